// Validated, derived problem sizes handed from src/api/ to the backends (src/cpu/, src/cuda/).
// The api layer fills these after checking every argument, so backends never re-validate.
#pragma once
#include <cstdint>

#include "dsattn/ops.h"

namespace dsattn {
namespace detail {

// paged_mqa_logits / paged_mqa_topk / schedule_metadata.
struct PagedIndexerProblem {
  int64_t rows = 0;         // R query rows (B*N, or the varlen row count)
  int64_t batch = 0;        // B requests = block_table rows (varlen: block_table.shape[0])
  int next_n = 1;           // N (1 in varlen mode)
  int heads = 0;            // H
  int head_dim = 0;         // D
  int states_per_page = 0;  // S
  bool varlen = false;      // row_request given
  bool lens_per_row = false;  // context_lens is [B, N] (or varlen [R]); false: [B] with the N rule
  int64_t num_pages = 0;    // cache.pages.shape[0]
  int64_t max_pages = 0;    // block_table.shape[1]
  int64_t max_context = 0;  // logits width (0 for the fused op)
  // CUDA planning: the pages per block-table row that the kernel size rules count, where the call
  // scores a column chunk of a larger table (the fused op's chunked route: the whole table's, so
  // that each chunk runs the kernel the whole call would); 0: max_pages.
  int64_t size_pages = 0;
  // CUDA, paged_mqa_topk: rows of at most this many states are not scored (IndexerWork::skip_len).
  int32_t skip_len = 0;
};

// Context length of row `r` (b = request, j = row within the request), following SPEC §3.1.
// `lens` is the context_lens data (host or device pointer readable by the caller), row-major with
// the given row stride for the [B, N] case.
inline int64_t row_context(const PagedIndexerProblem& pb, const int32_t* lens, int64_t lens_stride0,
                           int64_t lens_stride1, int64_t b, int64_t j, int64_t r) {
  if (pb.varlen) return lens[r * lens_stride0];
  if (pb.lens_per_row) return lens[b * lens_stride0 + j * lens_stride1];
  const int64_t L = lens[b * lens_stride0];
  const int64_t v = L - pb.next_n + j + 1;
  return v < 0 ? 0 : v;
}

// mqa_logits.
struct MqaProblem {
  int64_t rows = 0;       // M
  int64_t keys = 0;       // Nk
  int heads = 0;          // H
  int head_dim = 0;       // D
  int64_t out_width = 0;  // logits.shape[1]
};

// topk.
struct TopkProblem {
  int64_t rows = 0;       // R
  int64_t width = 0;      // W
  int k = 0;
  bool slot_transform = false;
};

}  // namespace detail
}  // namespace dsattn
