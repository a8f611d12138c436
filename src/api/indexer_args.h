// Argument checks shared by the indexer ops: paged_mqa_logits, paged_mqa_topk, schedule_metadata,
// mqa_logits and topk (SPEC §3.1-3.4). The api files call these before dispatching, so backends
// (src/cpu/, src/cuda/) can rely on what is listed under "after validation" below.
//
// Messages name the op, the argument, what was expected and what was given. The indexer cache is
// called "kv_cache" in messages (its name in DeepGEMM and in the Python binding).
//
// After validate_paged_indexer() succeeds:
//  * q, q_scales (MXFP4), weights and row_request are contiguous (row-major);
//  * context_lens has non-negative strides (use row_context() from problems.h or the helpers below);
//  * block_table has stride 1 on its last dim and any non-negative row stride;
//  * kv_cache.pages is u8 [num_pages, >= S * state_bytes], strides {page_stride_bytes, 1}, page_stride
//    a multiple of 4 and >= S * state_bytes, base pointer 4-byte aligned.
// Tensor *values* (lengths, block-table entries, row_request, starts/ends) live in device memory on
// the CUDA backend and cannot be read from the host, so their checks (check_*_host_values) run only
// for host tensors, i.e. on the CPU backend.
#pragma once
#include <cstdint>

#include "api/problems.h"
#include "dsattn/ops.h"
#include "dsattn/status.h"

namespace dsattn {
namespace detail {

constexpr int kMaxStatesPerPage = 256;  // S in 1..256
constexpr int kMaxNextN = 8;            // N in 1..8
constexpr int kMaxTopk = 4096;          // k in 1..4096 (topk, paged_mqa_topk)

bool indexer_heads_supported(int64_t h);     // {8, 16, 24, 32, 48, 64}
bool indexer_head_dim_supported(int64_t d);  // {32, 64, 128}

// Shape/dtype/stride checks of a PagedIndexerArgs (q, q_scales, weights, kv_cache, block_table,
// context_lens, row_request, schedule). Reads no tensor data. Fills every field of *out except
// max_context (left 0; the caller sets it, e.g. to the logits width).
Status validate_paged_indexer(const char* op, const PagedIndexerArgs& a, PagedIndexerProblem* out);

// The context_lens / row_request part of the above, usable without q (schedule_metadata):
//  non-varlen (row_request absent): context_lens i32 [B, N] or [B]; `batch` = B when known (else -1);
//  varlen: context_lens i32 [R] and row_request i32 [R]; `rows` = R when known (else -1), N must be 1.
// Fills out->rows, batch (non-varlen only), next_n, varlen, lens_per_row.
Status validate_paged_lens(const char* op, const TensorView& context_lens, const TensorView& row_request,
                           int64_t batch, int next_n, int64_t rows, PagedIndexerProblem* out);

// Host-only value checks (CPU backend), after validate_paged_indexer:
//  row_request[r] in [0, block_table rows); context lengths >= 0 and <= max_pages * S; when
//  logits_width >= 0 (logits given; pass -1 without) also <= logits_width; block-table entries of
//  every page a row reads ([0, ceil(ctx / S))) in [0, num_pages).
Status check_paged_host_values(const char* op, const PagedIndexerArgs& a, const PagedIndexerProblem& pb,
                               int64_t logits_width);

// Host readers (valid after validation, host tensors only).
// Context length (states visible) of query row r, SPEC §3.1 ([B] lengths clamp at 0).
int64_t host_row_context(const PagedIndexerArgs& a, const PagedIndexerProblem& pb, int64_t r);
// Block-table row (request) of query row r: row_request[r] in varlen mode, else r / N.
int64_t host_row_request(const PagedIndexerArgs& a, const PagedIndexerProblem& pb, int64_t r);

// topk: shapes of logits / starts / ends / indices / values / slot-transform arguments and k.
Status validate_topk(const char* op, const TopkParams& p, TopkProblem* out);
// Host-only: 0 <= start <= end <= W per row; with the slot transform also row_request in range,
// end - start <= max_pages * S and the used block-table entries non-negative.
Status check_topk_host_values(const char* op, const TopkParams& p, const TopkProblem& pb);

// A 2-D output [rows, width] (checked by check_tensor before) must not have overlapping rows:
// row stride >= width when rows > 1.
Status check_output_rows(const char* op, const char* arg, const TensorView& t);

// paged_mqa_topk's outputs (k, indices, values, slot_ids) given the validated problem.
Status validate_topk_outputs(const char* op, int k, int64_t rows, const TensorView& indices,
                             const TensorView& values, const TensorView& slot_ids);

// mqa_logits: shapes / dtypes of every argument.
Status validate_mqa(const char* op, const MqaLogitsParams& p, MqaProblem* out);
// Host-only: 0 <= ks[m] <= ke[m] <= Nk and, when compressed, ke[m] - ks[m] <= W.
Status check_mqa_host_values(const char* op, const MqaLogitsParams& p, const MqaProblem& pb);
// validate_mqa, then the backend of its tensors (mqa_logits' calls, and mqa_logits_chunked's
// whole call before its chunks); defined in mqa_logits.cpp.
Status prepare_mqa(const char* op, const MqaLogitsParams& p, const Exec& ex, MqaProblem* pb, Backend* be);

}  // namespace detail
}  // namespace dsattn
