// dsattn — operations (SPEC §3). Each op: a params struct, a workspace query, the call.
// Nothing allocates device memory inside a call: device scratch comes from Exec::workspace, which
// the caller owns (size it with the *_workspace query). That makes every CUDA op capturable in a
// CUDA graph. Do not share one workspace between eager calls and graph replays that may overlap.
//
// Conventions: shapes in comments ([B, N, H, D]); strides in elements; "optional" tensors are left
// default-constructed (TensorView{}) when absent. Errors come back as a Status whose message names
// the op, the argument, what was expected and what was given.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>

#include "dsattn/formats.h"
#include "dsattn/status.h"
#include "dsattn/tensor.h"

namespace dsattn {

enum class Backend { kAuto, kCpu, kCuda };
const char* backend_name(Backend b);  // "auto", "cpu", "cuda"

// Exec::workspace_device values besides a CUDA device ordinal.
constexpr int kWorkspaceDeviceUnknown = -2;  // not said: not checked (the default)
constexpr int kWorkspaceDeviceHost = -1;     // host memory (pageable or pinned)
// A CUDA op's workspace starts at a multiple of this many bytes (cudaMalloc and torch give 256).
constexpr int kWorkspaceAlignment = 16;

struct Exec {
  // kAuto: CUDA when the tensors live on a CUDA device, else CPU. kCpu with CUDA tensors (or kCuda with host
  // tensors) is an error, never a silent copy; so are CUDA tensors of another device than the current one.
  Backend backend = Backend::kAuto;
  void* stream = nullptr;           // cudaStream_t; nullptr = legacy default stream. A live stream,
                                    // in workspace queries too: the plans ask the driver which SMs
                                    // it has (cuda_stream_num_sms)
  void* workspace = nullptr;        // kCuda: device memory, kWorkspaceAlignment-byte aligned; kCpu: unused
  size_t workspace_bytes = 0;
  // Where `workspace` lives, for callers that know (the Python module always says): a CUDA device
  // ordinal or kWorkspaceDeviceHost. A CUDA op whose workspace is said to be anywhere but the
  // current device's memory returns kInvalidArgument instead of faulting inside a kernel.
  int workspace_device = kWorkspaceDeviceUnknown;
  int num_threads = 0;              // CPU backend: 0 = hardware concurrency
  // CUDA: shared-memory budget per block in bytes for kernels that tile to fit (0 = device max).
  // 99 KiB (101376) reproduces the sm_120 / sm_121 configuration on larger GPUs.
  int smem_budget_bytes = 0;
};

// True when this build has CUDA kernels and a CUDA device is visible.
bool cuda_available();
// The CUDA architectures this build has code for, as DSATTN_CUDA_ARCHS named them
// ("80;89;90a;100f;120f"); "" in a build without CUDA. A CUDA call on a device none of them runs on
// (e.g. 12.1 with only "120a") returns kNotImplemented saying which entry to add.
const char* cuda_architectures();
// Number of multiprocessors of the current device (0 without CUDA).
int cuda_num_sms();
// Multiprocessors that work on `stream` (a cudaStream_t; nullptr = legacy default stream) can
// use: those of the stream's green context (or of the current context, for the default stream,
// when it was made from one), else cuda_num_sms() (which under MPS with an SM limit already gives
// the client's share), 0 without CUDA. The CUDA ops size their grids and partitions by this
// count, so ask for a workspace size on the stream you will call on (a green context's is
// smaller than the whole device's).
int cuda_stream_num_sms(void* stream);

// ---------------------------------------------------------------- indexer inputs (decode, paged)
// Query rows: non-varlen mode has R = B*N rows, row (b, j) = b*N + j. Varlen mode (row_request
// given) has R flattened rows, each naming its request (block-table row) and its own length.
struct PagedIndexerArgs {
  TensorView q;             // kFp8:   f8_e4m3 [B, N, H, D]    (varlen: [R, H, D])
                            // kMxfp4: u8      [B, N, H, D/2]  (varlen: [R, H, D/2]) packed E2M1
  TensorView q_scales;      // kMxfp4 only: i32 [B, N, H] (varlen [R, H]) packed UE8M0, D/32 bytes
  TensorView weights;       // f32 [R, H] (FP8: the per-token q scale is folded in)
  IndexerCache cache;
  TensorView block_table;   // i32 [B, max_pages], any row stride
  TensorView context_lens;  // i32 [B, N] states visible to each row, or [B]: row j of request b
                            // sees L_b - N + j + 1 (clamped at 0). Varlen: i32 [R].
  TensorView row_request;   // varlen only: i32 [R], block-table row of each query row
  TensorView schedule;      // optional i32 [schedule_metadata_size(num_sms)] from
                            // schedule_metadata(); absent = computed inside the call (CUDA; for
                            // one request paged_mqa_logits needs no schedule kernel: its CTAs
                            // split the request's length themselves)
};
// Device-side values (CUDA backend). The host cannot read lengths, block-table entries or
// row_request on the GPU, so the kernels check them instead of rejecting the call: a block-table
// entry outside [0, num_pages) -- or a state whose page index is >= max_pages -- is never read and
// its states score -inf; a varlen row_request outside [0, B) gives an all -inf row; negative
// lengths count as 0; states >= the logits width are not computed. The CPU backend rejects such
// values with an error instead. A caller-given `schedule` must come from schedule_metadata() on the
// same context_lens (a stale one can leave columns unwritten, never out-of-bounds accesses).

struct PagedMqaLogitsParams : PagedIndexerArgs {
  TensorView logits;        // f32 or bf16 [R, max_context], any row stride (last dim contiguous)
  bool clean = false;       // write -inf on [ctx, max_context) of each row
};
Status paged_mqa_logits_workspace(const PagedMqaLogitsParams& p, const Exec& ex, size_t* bytes);
Status paged_mqa_logits(const PagedMqaLogitsParams& p, const Exec& ex);

// Balanced split of (request, KV-range) work over `num_sms` multiprocessors; a device kernel on
// CUDA (graph-safe, no host sync). The layout of `metadata` is private to dsattn.
struct ScheduleMetadataParams {
  TensorView context_lens;  // as in PagedIndexerArgs
  TensorView row_request;   // varlen only
  int next_n = 1;           // N (1 in varlen mode)
  int states_per_page = 0;
  int num_sms = 0;          // 0 = cuda_num_sms()
  TensorView metadata;      // i32 [schedule_metadata_size(num_sms)]
};
int64_t schedule_metadata_size(int num_sms);
Status schedule_metadata(const ScheduleMetadataParams& p, const Exec& ex);

// ---------------------------------------------------------------- mqa_logits (prefill, ragged)
struct MqaLogitsParams {
  IndexerFormat format = IndexerFormat::kFp8;
  TensorView q;         // kFp8: f8_e4m3 [M, H, D]; kMxfp4: u8 [M, H, D/2]
  TensorView q_scales;  // kMxfp4 only: i32 [M, H]
  TensorView weights;   // f32 [M, H]
  TensorView k;         // kFp8: f8_e4m3 [Nk, D]; kMxfp4: u8 [Nk, D/2]
  TensorView k_scales;  // kFp8: f32 [Nk]; kMxfp4: i32 [Nk]
  TensorView ks, ke;    // i32 [M]: row m covers keys [ks[m], ke[m])
  TensorView logits;    // f32 or bf16 [M, Nk], or [M, W] when compressed (column t - ks[m])
  bool compressed = false;
  bool clean = false;   // -inf outside the window
};
Status mqa_logits_workspace(const MqaLogitsParams& p, const Exec& ex, size_t* bytes);
Status mqa_logits(const MqaLogitsParams& p, const Exec& ex);

// mqa_logits with bounded output memory: the M query rows are processed in chunks whose logits
// ([chunk_rows, W], W = Nk, or `width` when compressed) fit `chunk_buffer_bytes`; after each chunk
// is enqueued (CUDA: on ex.stream), on_chunk(row0, rows, logits) is called on the host with a view
// of the chunk's logits in `chunk_buffer` (device memory on CUDA, host memory on CPU). The callback
// consumes the chunk (e.g. enqueues topk on the same stream) before returning; the next chunk
// overwrites the buffer. Chunks hold a multiple of 8 rows when the buffer allows.
struct MqaLogitsChunkedParams {
  MqaLogitsParams base;            // all but `logits` (ignored)
  int64_t width = 0;               // compressed: output width (>= max(ke - ks)); 0 = Nk
  DType logits_dtype = DType::kF32;  // f32 or bf16
  void* chunk_buffer = nullptr;
  size_t chunk_buffer_bytes = 0;
  std::function<Status(int64_t row0, int64_t rows, const TensorView& logits)> on_chunk;
};
Status mqa_logits_chunked_workspace(const MqaLogitsChunkedParams& p, const Exec& ex, size_t* bytes);
Status mqa_logits_chunked(const MqaLogitsChunkedParams& p, const Exec& ex);

// ---------------------------------------------------------------- topk
struct TopkParams {
  TensorView logits;       // f32 or bf16 [R, W], any row stride
  TensorView starts;       // optional i32 [R] (absent = 0)
  TensorView ends;         // optional i32 [R] (absent = W)
  int k = 0;
  TensorView indices;      // i32 [R, k] out, relative to start; -1 padding
  TensorView values;       // optional f32 [R, k] out (the selected logits; -inf for padding)
  bool sorted = false;     // sort each row by value, descending (ties: smaller index first)
  // Optional slot-id transform: slot = block_table[b][i / S] * S + i % S, -1 stays -1.
  TensorView block_table;  // i32 [B, max_pages]
  TensorView row_request;  // optional i32 [R] block-table row of each row (absent: row / next_n)
  int next_n = 1;
  int states_per_page = 0;
  TensorView slot_ids;     // optional i32 [R, k] out
};
Status topk_workspace(const TopkParams& p, const Exec& ex, size_t* bytes);
Status topk(const TopkParams& p, const Exec& ex);

// ---------------------------------------------------------------- fused indexer + top-k
// paged_mqa_logits followed by topk without a [R, max_context] logits tensor: the workspace
// (paged_mqa_topk_workspace) holds per-partition candidate buffers, O(num_sms x k + R x k)
// (on the portable tile kernel also ~12 KB of staged scores per partition), independent of the
// context length. Each partition's piece of a row keeps the states that can still enter the
// row's top k. Each piece appends every state until its buffer is full (8 bytes
// each: score and index), so where no piece is longer than twice its buffer (the block table's
// states over the partitions) streaming would write at least as many bytes as the scores
// themselves; there (CUDA), when the call's [R, W] fp32 scores (W = max_pages x S) fit in that
// same workspace, the op writes them as dense rows instead and selects with topk's kernels: no
// more bytes written, no more workspace, faster (H200, k = 2048: 128 x 32K 194 -> 185 us,
// 64 x 16K N = 2 119 -> 88-95, 8 x 64K 70 -> 52; H100: 128 x 64K 499 -> 430, 32 x 256K 519 ->
// 457, both pieces between one and two buffers, taken since 2026-12-07). Where streaming would
// score on the portable tile kernel (sm_80 / sm_86 / sm_89 / sm_120), slower than the kernel
// paged_mqa_logits runs there, the op takes that route wherever the rows fit, whatever the pieces
// (see logits_route below); where they do not fit it streams on the same warp-local pipeline as
// paged_mqa_logits, its tiles staged in the workspace for the collector (H100 at sm_120's 99 KiB,
// k = 2048: 128 x 64K 1000 -> 823-827 us, the logits op 656-659; DSATTN_FUSED_STAGED=0: the CTA-wide
// pipeline, as before 2026-12-07). `logits_route` below (or
// DSATTN_FUSED_LOGITS=1 for the whole process) takes that route wherever the rows fit, also where
// longer pieces would have dropped states; where they do not fit (calls of 16 rows or more) it takes the chunked logits
// route: the block table in column chunks (the fewest whose [R, k + chunk] score rows fit the same
// workspace), each selected together with the k winners carried from the chunks before it (same
// results, memory still independent of the context length; H100, k = 2048, against streaming:
// 128 x 128K 916 -> 875 us, 64 x 256K 931 -> 893; logits + topk 833 / 874). DSATTN_FUSED_LOGITS=0
// never takes either;
// DSATTN_FUSED_CHUNK=W takes the chunked route with chunks of W states (tests, benchmarks).
// paged_mqa_topk_route says which route a call takes.
// On sm_90 a call for up to six requests with N = 1 whose block table holds more than 128K states
// (unsorted, without `schedule`) takes the resident route instead: the scoring kernel keeps its
// scores in shared memory and its CTAs, all resident (cooperative launch), select the top k
// together, the CTAs of each request with that request's histograms; same results, same memory
// bound (its workspace holds histograms and suffix sums, not scores). Up to 128K states such calls
// (and one request with N = 2 of up to 32K) take the logits route where it fits. Up to 64K states
// its launches are faster (H200, k = 2048: 1 x 8K 23.5 -> 20.4 us, 1 x 64K 34.1 -> 29.2, 4 x 64K
// 50.8 -> 40.0, one request with N = 2 at 32K 36.8 -> 26.7). At 64K-128K, on an H100 with other
// kernels run before each call as in a serving engine, the two routes are within ~3 us of each
// other: one request is faster on the logits route (1 x 128K 44.0 -> 42.1), several requests on
// the resident one (4 x 128K 67.9 against 69.5). Its rows are at most 128K states (512 KB) each.
// DSATTN_FUSED_RESIDENT=0 turns the resident route off, =force takes it at any width.
// `schedule` (sm_90): the call splits its work its own way (three partitions per SM for the
// warp-specialized scoring kernel, or per request on the resident route), so where that plan runs
// the warp-specialized kernel or the resident route, a caller-given schedule is checked but not
// used: the call is planned, sized and run as without it. A caller schedule (one partition per
// SM) would put it on the slower tile kernel, off the resident route and, with its longer pieces,
// off the logits route more often (see BENCHMARKS.md, 2026-12-06 13:00);
// DSATTN_FUSED_SCHEDULE=caller keeps it anyway (tests, A/B).
// Elsewhere (the portable kernels) the caller's schedule is used, and so it is by the logits
// route's scoring for several requests (its partitions are charged for the requests they enter).
// Same results either way. Except on the sm_100 family, for the calls paged_mqa_logits scores on
// its warp-specialized mma.sync kernel (FP8 keys, D = 128, block tables of at least 768 states per
// SM): the fused op scores those on the same kernel, with its own split (the schedule checked,
// not used), so that both ops compute every score alike (on the portable kernel its scores
// differed from paged_mqa_logits' in the last bits, which could break near-ties apart).
// Rows of at most k states (CUDA, streaming and logits routes): where the output is unsorted and
// has no `values`, such a row's result is 0..len-1 whatever its scores (topk above), so it is not
// scored: the scoring kernels skip such rows and the route's last kernel writes their positions
// (and slot ids), so requests of up to k states cost no key bandwidth. DSATTN_FUSED_SKIP_SHORT=0
// scores them anyway (A/B); the results are the same.
struct PagedMqaTopkParams : PagedIndexerArgs {
  int k = 0;
  TensorView indices;   // i32 [R, k] out: state indices (0..ctx-1), -1 padding
  TensorView values;    // optional f32 [R, k] out: their scores
  TensorView slot_ids;  // optional i32 [R, k] out: block_table[b][i / S] * S + i % S
  bool sorted = false;
  // CUDA: allow the logits route (see above) wherever it fits in the streaming plan's workspace,
  // and the chunked logits route where it does not; false: the logits route only where the
  // streaming plan would write at least as many bytes. Same results either way;
  // the CPU backend ignores it. DSATTN_FUSED_LOGITS, when set to 0 / 1 / force, overrides it.
  // On GPUs without a warp-specialized scoring kernel (sm_80 / sm_86 / sm_89 / sm_120), where
  // streaming scores on a slower kernel than paged_mqa_logits, the default already takes the
  // logits route wherever the rows fit (H100 at sm_80's 163 KiB, k = 2048: 128 x 32K 522 -> 331
  // us, 1 x 1M 237 -> 126); there `true` adds the chunked route, worth it where block tables are
  // about as wide as the contexts (64 x 64K 525 -> 368) and not where they are much wider (128
  // requests of 8K states on a 128K-state table 165 -> 195; BENCHMARKS.md, 2026-12-07).
  bool logits_route = false;
  // CUDA, sm_90: allow the resident route (see above). It is a cooperative launch of one CTA per
  // SM the call's stream can use (cuda_stream_num_sms: a green context's SMs, an MPS client's),
  // all resident at once; false keeps the call off it (e.g. where other work shares those SMs).
  // Same results either way; the CPU backend ignores it. DSATTN_FUSED_RESIDENT, when set to
  // 0 / force, overrides it.
  bool resident_route = true;
};
Status paged_mqa_topk_workspace(const PagedMqaTopkParams& p, const Exec& ex, size_t* bytes);
Status paged_mqa_topk(const PagedMqaTopkParams& p, const Exec& ex);
// The route paged_mqa_topk takes for these arguments on `ex` (after the same validation): "cpu", or
// on CUDA "resident", "logits", "chunked" or "streaming" (see above), "empty" for zero rows. Every
// route gives the same results; this is for logs and benchmarks.
Status paged_mqa_topk_route(const PagedMqaTopkParams& p, const Exec& ex, const char** route);

// ---------------------------------------------------------------- sparse MLA
struct SparseMlaDecodeParams {
  TensorView q;                  // bf16 [B, Sq, Hq, d_qk]
  LatentCache cache;
  TensorView indices;            // i32 [B, Sq, topk] slot ids (page * P + offset), -1 invalid
  TensorView topk_length;        // optional i32 [B]: only the first topk_length[b] indices count
  // Optional second cache (V4: sliding window + compressed cache); absent when extra_indices is.
  LatentCache extra_cache;
  TensorView extra_indices;      // i32 [B, Sq, extra_topk]
  TensorView extra_topk_length;  // optional i32 [B]
  TensorView attn_sink;          // optional f32 [Hq]
  float sm_scale = 0.0f;
  TensorView out;                // bf16 [B, Sq, Hq, 512]
  TensorView lse;                // f32 [B, Sq, Hq] (natural log, sink NOT included, as FlashMLA);
                                 // -inf for rows with no valid index (their out is 0)
};
Status sparse_mla_decode_workspace(const SparseMlaDecodeParams& p, const Exec& ex, size_t* bytes);
Status sparse_mla_decode(const SparseMlaDecodeParams& p, const Exec& ex);

struct SparseMlaPrefillParams {
  TensorView q;            // bf16 [M, Hq, d_qk]
  TensorView kv;           // bf16 [Nk, d_qk]
  TensorView indices;      // i32 [M, topk] rows of kv, -1 invalid
  TensorView topk_length;  // optional i32 [M]
  TensorView attn_sink;    // optional f32 [Hq]
  float sm_scale = 0.0f;
  int d_v = kLatentDv;
  TensorView out;          // bf16 [M, Hq, d_v]
  TensorView lse;          // f32 [M, Hq]
};
Status sparse_mla_prefill_workspace(const SparseMlaPrefillParams& p, const Exec& ex, size_t* bytes);
Status sparse_mla_prefill(const SparseMlaPrefillParams& p, const Exec& ex);

// ---------------------------------------------------------------- cache writers (SPEC §3.7)
struct WriteIndexerCacheParams {
  TensorView k;             // f32 or bf16 [T, D]
  TensorView slot_mapping;  // i32 or i64 [T]: page * S + offset, -1 = skip
  IndexerCache cache;       // written in place
};
Status write_indexer_cache(const WriteIndexerCacheParams& p, const Exec& ex);

struct WriteLatentCacheParams {
  TensorView kv;            // f32 or bf16 [T, d_qk]
  TensorView slot_mapping;  // i32 or i64 [T]: page * P + offset, -1 = skip
  LatentCache cache;        // written in place
};
Status write_latent_cache(const WriteLatentCacheParams& p, const Exec& ex);

}  // namespace dsattn
