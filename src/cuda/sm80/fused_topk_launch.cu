// dsattn::paged_mqa_topk on CUDA (SPEC §3.4): a scoring kernel with the top-k epilogue (portable,
// wgmma tile or warp-specialized; fused_topk_epilogue.cuh), then the merges (fused_topk_merge.cuh,
// fused_topk_cluster_merge.cuh). Device scratch is the schedule metadata plus
// (partitions + groups) x rows_per_group x ccap candidates, independent of context. Where no piece
// is long enough to drop a candidate (every state of every piece would be kept, so the streaming
// route writes every score to the scratch anyway) and the rows' scores fit in that same scratch,
// they are written there as dense rows and selected by topk's kernels instead (plan_logits_route):
// the same scores written, no more memory, faster. Opt-in beyond that
// (PagedMqaTopkParams::logits_route, or DSATTN_FUSED_LOGITS=1): wherever the rows fit the scratch,
// which writes scores that streaming would have dropped. Up to six requests with N = 1 on Hopper
// (one with N = 2) take the resident route (plan_resident, indexer_ws_resident.cuh) when their
// block table holds more than 128K states (up to that the logits route takes them where it fits):
// the scoring kernel keeps its scores in shared memory and its CTAs select together, after the
// schedule kernel, with no merges.
// No host synchronization: capturable in CUDA graphs.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "api/validate.h"
#include "cuda/common/cuda_check.cuh"
#include "cuda/common/indexer_schedule.h"
#include "cuda/common/topk_launch.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/sm80/fused_topk_cluster_merge.cuh"
#include "cuda/sm80/fused_chunked.cuh"
#include "cuda/sm80/fused_topk_epilogue.cuh"
#include "cuda/sm80/fused_route.h"
#include "cuda/sm80/fused_topk_merge.cuh"
#include "cuda/sm80/indexer_launch.h"
#include "cuda/sm90/indexer_wgmma_launch.h"
#include "cuda/sm90/indexer_ws.cuh"
#include "cuda/sm90/indexer_ws_resident.cuh"

namespace dsattn {
namespace cuda {

extern template struct IndexerKernelOps<IndexerFormat::kFp8, 32, TopkEpilogue>;
extern template struct IndexerKernelOps<IndexerFormat::kFp8, 64, TopkEpilogue>;
extern template struct IndexerKernelOps<IndexerFormat::kFp8, 128, TopkEpilogue>;
extern template struct IndexerKernelOps<IndexerFormat::kMxfp4, 32, TopkEpilogue>;
extern template struct IndexerKernelOps<IndexerFormat::kMxfp4, 64, TopkEpilogue>;
extern template struct IndexerKernelOps<IndexerFormat::kMxfp4, 128, TopkEpilogue>;
extern template struct WgmmaKernelOps<TopkEpilogue>;
extern template struct IndexerKernelOps<IndexerFormat::kFp8, 32, TopkStagedEpilogue>;
extern template struct IndexerKernelOps<IndexerFormat::kFp8, 64, TopkStagedEpilogue>;
extern template struct IndexerKernelOps<IndexerFormat::kFp8, 128, TopkStagedEpilogue>;
extern template struct IndexerKernelOps<IndexerFormat::kMxfp4, 32, TopkStagedEpilogue>;
extern template struct IndexerKernelOps<IndexerFormat::kMxfp4, 64, TopkStagedEpilogue>;
extern template struct IndexerKernelOps<IndexerFormat::kMxfp4, 128, TopkStagedEpilogue>;

namespace {

constexpr const char* kOp = "paged_mqa_topk";

template <class Epi = TopkEpilogue, class Fn>
cudaError_t with_topk_ops(IndexerFormat f, int d, Fn&& fn) {
  if (f == IndexerFormat::kFp8) {
    if (d == 32) return fn(IndexerKernelOps<IndexerFormat::kFp8, 32, Epi>{});
    if (d == 64) return fn(IndexerKernelOps<IndexerFormat::kFp8, 64, Epi>{});
    if (d == 128) return fn(IndexerKernelOps<IndexerFormat::kFp8, 128, Epi>{});
  } else {
    if (d == 32) return fn(IndexerKernelOps<IndexerFormat::kMxfp4, 32, Epi>{});
    if (d == 64) return fn(IndexerKernelOps<IndexerFormat::kMxfp4, 64, Epi>{});
    if (d == 128) return fn(IndexerKernelOps<IndexerFormat::kMxfp4, 128, Epi>{});
  }
  return cudaErrorInvalidValue;
}

size_t topk_epi_smem(const IndexerParams& p) { return TopkEpilogue::smem_bytes(p); }
size_t topk_staged_epi_smem(const IndexerParams& p) { return TopkStagedEpilogue::smem_bytes(p); }

size_t align256(size_t v) { return (v + 255) / 256 * 256; }

// Rows of the cluster merge (8 CTAs each). H200, paged_mqa_topk k = 2048 (cluster / split merge,
// us): 8 x 64K 78.5-79.2 / 84.1-84.3, 16 x 32K 66.1-66.2 / 66.0-66.6, 4 x 64K 64.1 / 64.4-64.7,
// but 1 x 64K 47.9-48.6 / 36.6-36.8 and 1 x 256K 129 / 53: one cluster's eight CTAs then read
// and select the whole row (ncu, 1 x 64K: scoring 15.3 -> 12.5 us without the row histograms, the
// merge 39.6 us against 13.4 + 11.1 for the split merge's two levels). Since the cluster pick
// reads the other CTAs' histograms with all loads in flight (same binary, DSATTN_FUSED_CLUSTER=1 /
// =0, two runs): 4 x 64K 56.3-56.4 / 64.4-64.9, 2 x 64K 48.1-48.4 / 43.0-43.1, 1 x 64K 43.7-44.0 /
// 35.5-35.7; with a thread's keys held in registers (CmHeld): 4 x 64K 54.7-54.8 / 64.6-64.7,
// 3 x 64K 49.6-49.9 / 47.5-47.7, 2 x 64K 46.7-47.4 / 43.5, 1 x 64K 41.9-42.4 / 35.7-35.9. But at
// 4-6 rows of other widths the split merge still won (one run): 4 x 32K 44.9 / 42.8, 5 x 16K
// 42.0 / 38.9, 4 x 128K 86.9 / 83.4, 6 x 256K 191.6 / 159.9, 2 x 64K with N = 2 51.0 / 47.3
// (8 x 128K: 110.4 / 126.5). So by default from 8 rows on; DSATTN_FUSED_CLUSTER=1 takes it from 1
// row (tests), =0 never.
constexpr int64_t kClusterMergeMinRows = 8, kClusterMergeMaxRows = 16;
// Widest block table (states) at which a call that could take the resident route takes the logits
// route instead (by default where its pieces are short, per call where it fits; see
// plan_fused_routes). 131072 since 2026-12-06, measured with other code run on every SM before each
// call (bench indexer --fused --cold), as a serving engine's other kernels do between two calls:
// the resident kernel's phases are then fetched cold, 7.5-12 us more per call, the logits route's
// kernels 4-5.5 us more. H100, k = 2048, FP8, H = 64, S = 64, us per call, L2 flushed, same call, two
// rounds, resident / logits route, cold (warm): 1 x 96K 46.2-46.4 / 41.9-42.2
// (35.4-35.5 / 36.5-36.7), 1 x 128K 52.9 / 47.5 (43.6-43.8 / 42.1-42.2), 2 x 96K 61.0 / 53.7-54.1
// (49.3 / 48.7-48.8), 2 x 128K 61.9-62.2 / 57.8-57.9 (51.0-51.2 / 53.1-53.3), 4 x 128K
// 76.0-76.5 / 72.0-72.1 (66.3-66.5 / 67.8-68.3), 6 x 128K 88.6 / 85.3-86.0 (80.6-81.3 / 80.9-81.3).
// Wider block tables keep the resident route: 1 x 192K 53.5-53.9 / 60.5-60.7
// (43.5-43.8 / 61.6-61.8), 5 x 192K 107.5-107.6 / 107.8-108.0 (98.7-100.4 / 105.3-105.7); but
// 6 x 256K 133.8-137.9 / 127.6-128.0 (128.9-129.3 / 122.3-122.6) would gain (not taken: one shape).
// Beyond the rows that fit the logits route's workspace (1 x 256K, 2 x 256K, 4 x 256K, 1 x 512K,
// 2 x 512K) the alternative is streaming, which the resident route beats cold or warm (1 x 512K
// cold 70.2-70.8 / 81.7-81.8). The H200 was not measured with this bound. Since 6a27007 the
// resident kernel launches without PDL, which took 3-9 us of its cold cost away; against it the
// logits route stays ahead on one request (cold: 1 x 80K 39.8-40.1 / 37.6-37.7, 1 x 128K
// 43.9-44.2 / 42.1-42.2, 2 x 96K 52.4-52.6 / 49.0-49.3) and falls behind by up to 2.5 us on several
// (2 x 128K 52.7 / 54.9-55.2, 4 x 128K 67.7-68.1 / 69.4-69.6): BENCHMARKS.md, 2026-12-06.
// Up to 64K states the top-k of the score rows is one small, cluster or direct kernel, and the two
// launches beat the resident kernel's grid-wide select even with the code warm. H200, k = 2048,
// same binary and call, two data seeds, us (resident / logits route): 1 x 4K 20.9-21.5 / 17.4-17.5,
// 1 x 8K 23.5-24.2 / 20.3-20.4, 1 x 16K 25.4-26.0 / 23.8-25.9, 1 x 32K 29.1-30.7 / 26.3-26.6,
// 1 x 48K 32.6-35.7 / 28.4-30.1, 1 x 64K 34.1-37.6 / 29.2-30.8; N = 2: 1 x 8K
// 29.2-30.2 / 20.9-21.3, 1 x 32K 36.8-38.0 / 26.6-26.7; 2 x 16K 35.9-38.8 / 25.9-27.2, 4 x 64K
// 49.5-50.8 / 40.0, 6 x 64K 55.8-56.2 / 44.7-45.2; an 8K request in a 64K table 24.5 / 25.0 (30000:
// 28.7 / 27.0). Beyond it the top-k of one wide row is a split plan and the resident route won with
// the code warm (H200, 2026-12-01: 1 x 96K 36.5-36.9 / 42.3-42.8, 1 x 128K 38.3-42.3 / 47.3-49.3;
// since then the top-k got faster, see above).
constexpr int64_t kLogitsOverResidentMaxWidth = 131072;

struct FusedPlan {
  IndexerParams p;
  IndexerConfig cfg;
  WgmmaPlan wg;  // wg.use: the Hopper kernel scores (cfg unused); wg.ws_stages > 0: its
                 // warp-specialized variant, ws_grid CTAs
  int partitions = 0;
  int ws_grid = 0;
  bool own_schedule = false;
  int64_t slots = 0;
  int ccap = 0, k_pad = 0, m_cap = 0, mcap = 0;
  size_t merge_smem = 0;
  size_t off_key = 0, off_idx = 0, off_hdr = 0, hdr_bytes = 0, total = 0;
  // Cluster merge (few rows with many pieces, sm_90+): `cluster` CTAs per row in one launch.
  int cluster = 0;
  // Split merge (few rows with many pieces, no cluster merge): `split` level-1 CTAs per row,
  // their outputs here.
  int split = 1, kc = 0;
  size_t off_pkey = 0, off_pidx = 0, off_phdr = 0;
  // Row histograms and level 1's records (split merge only), right after the headers so one
  // memset zeroes all of them.
  size_t off_hist = 0, off_hist2 = 0, off_rec = 0, zero_bytes = 0;
  // Logits route (see plan_logits_route): paged_mqa_logits into [rows, width] fp32 logits in the
  // workspace, then dsattn::topk's kernels over them with the context lengths as row bounds.
  bool logits_route = false;
  int64_t width = 0;
  // Streaming on the portable tile kernel's warp-local pipeline (TopkStagedEpilogue): stage_tiles
  // staged tiles per CTA, at off_stage.
  bool staged = false;
  int stage_tiles = 0, stage_run = 1;
  size_t off_stage = 0;
  TopkPlan tp;
  // Resident route (see plan_resident): scores kept in the scoring kernel's shared memory and
  // selected there; its scratch after the schedule: the groups' barrier words and histograms
  // (zeroed by the schedule kernel: res_zero_bytes from off_res, the histograms res_hist_words
  // in), then the CTAs' suffix sums.
  bool resident = false;
  bool res_multi = false;  // several requests: WsResidentMulti
  bool res_forced = false;  // DSATTN_FUSED_RESIDENT=force: the resident route whatever else fits
  int res_cap = 0;
  size_t off_res = 0, res_zero_bytes = 0, res_hist_words = 0, off_suf = 0;
  // One request: select_fast's grid histograms (zeroed too, res_fine_words in from off_res), its
  // per-CTA counts at off_cnt and bin lists at off_list; res_list_cap = 0 leaves it off.
  size_t res_fine_words = 0, off_cnt = 0, off_list = 0;
  int res_list_cap = 0;
  int res_fast_max_len = 0;  // select_fast for a request whose longest row has at most this many states
  size_t logits_ws = 0, off_topk = 0;  // logits at logits_ws (after the schedule), then the top-k scratch
  // Chunked logits route (see plan_chunked_route; fused_chunked.cuh): nchunks chunks of chunk_w
  // states, each scored into [rows, k + chunk_w] fp32 at off_cbuf (after the schedule, logits_ws
  // bytes) and selected with tp (scratch at off_topk); the carried winners' states (two [rows, k]
  // buffers) at off_head, the top-k's columns and values at off_sidx / off_svals, every chunk's
  // lengths (lens_n each) at off_clens, its row ends at off_cends.
  bool chunked = false;
  int64_t chunk_w = 0;
  int nchunks = 0;
  int64_t lens_n = 0;
  size_t off_cbuf = 0, off_head = 0, off_sidx = 0, off_svals = 0, off_clens = 0, off_cends = 0;
};

// The logits view of the call: the same inputs, logits [rows, width] at `ptr` (nullptr to plan).
PagedMqaLogitsParams route_logits_params(const PagedMqaTopkParams& a, const detail::PagedIndexerProblem& pb,
                                         int64_t width, void* ptr, detail::PagedIndexerProblem* lpb) {
  PagedMqaLogitsParams lp;
  static_cast<PagedIndexerArgs&>(lp) = a;
  lp.logits = make_tensor(ptr, DType::kF32, {pb.rows, width}, Device::kCuda);
  *lpb = pb;
  lpb->max_context = width;
  return lp;
}

// Scoring into logits and selecting with the standalone top-k beats streaming candidates through
// the collector and merges wherever the logits fit: the top-k kernels (small, cluster, split) are
// faster than the merges, and the collector cannot raise a threshold when pieces are shorter than
// k (H200, k = 2048, us, same run, route / streaming: 1 x 8K 22.7 / 31.2, 1 x 64K 33.9 / 35.9,
// 2 x 128K 53.3 / 65.4, 8 x 64K 63.6 / 78.5, 32 x 128K H = 32 206.9 / 267.4, 128 x 32K 194.8 /
// 198.3; one shape loses: 32 x 32K 91.6 / 88.4; since the warp-specialized logits kernel it wins
// on every many-request shape measured, e.g. 128 x 32K 184-185 / 194, 64 x 16K N = 2 88-95 / 119,
// 128 x 64K 325 / 423, BENCHMARKS.md). It writes [rows, width] score rows, and SPEC §3.4 asks the
// op not to write the logits, for their memory and for the bytes they move. So by default (kAuto)
// it is taken only where the streaming plan would write at least as many bytes anyway: every
// piece at most 2 ccap states (writes_rows_anyway). A piece appends every state of its window
// until its buffer of ccap entries is full, 8 bytes each, so it writes at least 8 min(n, ccap)
// >= 4 n bytes for n states, the size of their scores in rows. (Until 2026-12-07 the bound was
// ccap, where streaming keeps every score: many long requests then streamed, 5-20 % slower than
// this route on Hopper's kernel, 27-33 % on sm_100's and 53-57 % on sm_120's at its 99 KiB, with
// the same workspace; H100, BENCHMARKS.md, 2026-12-07.)
// PagedMqaTopkParams::logits_route (or DSATTN_FUSED_LOGITS=1, see fused_route.h) takes it also
// where pieces are longer (scores that streaming would drop get written). Either way only where
// its workspace (schedule + rows x width fp32 logits + top-k scratch) is no larger than the
// streaming plan's, so the op's memory stays what the streaming plan needs (independent of the
// context length; longer contexts stream), and not for the filter plan. DSATTN_FUSED_LOGITS=0
// never takes it; =force takes it whenever the top-k can plan it (tests: both routes on the same
// inputs).
// Where the streaming route would score on the portable tile kernel (`tile_scoring`, !f->wg.use:
// sm_80, sm_86, sm_89, sm_120 and the sm_100 family's smaller calls), kAuto takes the logits route
// wherever it fits, the filter plan included: there streaming lost on every shape that took it.
// Its candidate collector is block-wide; it then scored on the CTA-wide pipeline of 8 warps, while
// paged_mqa_logits runs the warp-local one of 12 (H100 with `DSATTN_INDEXER_KERNEL=warp-local`,
// k = 2048, cold, us, streaming -> this route: sm_80's 163 KiB 128 x 32K 521.6 -> 330.7, 1 x 1M
// 236.5 -> 126.0, 4 x 256K 211.4 -> 136.0, 128 requests of 4096 states on a 32K table 106.1 ->
// 79.2; sm_120's 99 KiB 1 x 1M 205.2 -> 129.5; BENCHMARKS.md, 2026-12-07). Since it scores on the
// warp-local pipeline with staged tiles (TopkStagedEpilogue) it still trails this route (128 x 32K
// streamed 501.9-506.3 against 330.7; BENCHMARKS.md, 2026-12-08). The chunked route stays opt-in
// there: on wide tables with short contexts its chunks cost more than streaming.
Status plan_logits_route(const PagedMqaTopkParams& a, const detail::PagedIndexerProblem& pb, const Exec& ex,
                         bool writes_rows_anyway, FusedPlan* f) {
  const bool tile_scoring = !f->wg.use;
  const FusedRouteMode mode = fused_route_mode(std::getenv("DSATTN_FUSED_LOGITS"), a.logits_route);
  if (mode == FusedRouteMode::kStreaming) return Status::Ok();
  if (mode == FusedRouteMode::kAuto && !writes_rows_anyway && !tile_scoring) return Status::Ok();
  const bool force = mode == FusedRouteMode::kForce;
  const int64_t width = pb.max_pages * pb.states_per_page;
  if (width <= 0 || width > INT32_MAX) return Status::Ok();
  detail::PagedIndexerProblem lpb;
  const PagedMqaLogitsParams lp = route_logits_params(a, pb, width, nullptr, &lpb);
  TopkDeviceLimits lim;
  DSATTN_RETURN_IF_ERROR(topk_device_limits(ex, &lim));
  TopkPlan tp;
  // The score rows are written just before the top-k reads them: in L2.
  if (!plan_topk(pb.rows, width, a.k, lim, &tp, /*rows_in_l2=*/true).ok()) return Status::Ok();
  // Few very long rows take the top-k's filter plan, which loses to streaming on Hopper's kernels
  // (1 x 256K: 62.3 against 54.5 us), not on the tile kernel (see above).
  if (tp.filter && !force && !tile_scoring) return Status::Ok();
  const size_t logits_ws = align256(paged_mqa_logits_workspace(lp, lpb, ex));
  const size_t off_topk = logits_ws + align256(static_cast<size_t>(pb.rows) * static_cast<size_t>(width) * 4);
  const size_t total = off_topk + tp.workspace_bytes;
  if (!force && total > f->total) return Status::Ok();
  f->logits_route = true;
  f->width = width;
  f->tp = tp;
  f->logits_ws = logits_ws;
  f->off_topk = off_topk;
  f->total = std::max(total, f->total);  // the streaming plan stays valid (and is the larger one)
  return Status::Ok();
}

// The chunked logits route (fused_chunked.cuh): where the logits route is asked for
// (PagedMqaTopkParams::logits_route, DSATTN_FUSED_LOGITS=1 or force) but the rows do not fit the
// streaming plan's workspace, the block table is scored in nchunks column chunks of chunk_w states
// into [rows, k + chunk_w] score rows, each selected together with the k winners of the chunks
// before it. The fewest chunks (at least kChunkMinWidth states and k each) whose workspace fits
// that of the streaming plan, so memory stays independent of the context length. Not by default:
// it writes score rows, which SPEC §3.4 asks the op not to do; and not for the top-k's filter plan.
// Only for calls of at least kChunkMinRows rows, the many-long-requests calls it was measured on
// (fewer rows keep the streaming or resident route they took before). DSATTN_FUSED_CHUNK=W (tests,
// benchmarks) takes it with chunks of W states (at least k, rounded up to whole pages) wherever the
// top-k can plan it, unless DSATTN_FUSED_LOGITS=0.
constexpr int64_t kChunkMinWidth = 8192;
constexpr int64_t kChunkMinRows = 16;
constexpr int kMaxChunks = 64;

// The chunk logits view of the call: chunk c's states [c * chunk_w, ...) of the block table,
// lengths `lens` (prepared on the device, the shape of context_lens), scores into `buf`'s columns
// [k, k + chunk_w) (row stride k + chunk_w; nullptr to plan).
PagedMqaLogitsParams chunk_logits_params(const PagedMqaTopkParams& a, const detail::PagedIndexerProblem& pb,
                                         int64_t chunk_w, int c, int32_t* lens, float* buf,
                                         detail::PagedIndexerProblem* lpb) {
  PagedMqaLogitsParams lp;
  static_cast<PagedIndexerArgs&>(lp) = a;
  lp.schedule = TensorView{};  // a caller schedule splits whole rows, not a chunk's
  const int64_t S = pb.states_per_page;
  const int64_t p0 = c * chunk_w / S;
  const int64_t pages = std::min(chunk_w / S, pb.max_pages - p0);
  if (a.block_table.data != nullptr) {
    lp.block_table.data = static_cast<int32_t*>(a.block_table.data) + p0 * a.block_table.strides[1];
  }
  lp.block_table.shape[1] = pages;
  const TensorView& cl = a.context_lens;
  lp.context_lens = cl.ndim == 2 ? make_tensor(lens, DType::kI32, {cl.shape[0], cl.shape[1]}, Device::kCuda)
                                 : make_tensor(lens, DType::kI32, {cl.shape[0]}, Device::kCuda);
  lp.logits = make_tensor_strided(buf == nullptr ? nullptr : buf + a.k, DType::kF32, {pb.rows, chunk_w},
                                  {a.k + chunk_w, 1}, Device::kCuda);
  *lpb = pb;
  lpb->max_pages = pages;
  lpb->max_context = chunk_w;
  lpb->size_pages = pb.max_pages;  // each chunk on the kernel the whole call would take
  return lp;
}

Status plan_chunked_route(const PagedMqaTopkParams& a, const detail::PagedIndexerProblem& pb, const Exec& ex,
                          FusedPlan* f) {
  const FusedRouteMode mode = fused_route_mode(std::getenv("DSATTN_FUSED_LOGITS"), a.logits_route);
  const char* cenv = std::getenv("DSATTN_FUSED_CHUNK");
  const int64_t forced = cenv != nullptr ? std::max<int64_t>(std::atoll(cenv), 0) : 0;
  if (mode == FusedRouteMode::kStreaming) return Status::Ok();
  if (forced == 0 && (f->logits_route || (mode != FusedRouteMode::kWhereItFits && mode != FusedRouteMode::kForce))) {
    return Status::Ok();
  }
  const int64_t S = pb.states_per_page;
  const int64_t width = pb.max_pages * S;
  const int64_t rows = pb.rows;
  if (forced == 0 && rows < kChunkMinRows) return Status::Ok();
  if (width <= 0 || width > INT32_MAX / 2 || S <= 0) return Status::Ok();
  const TensorView& cl = a.context_lens;
  if (cl.ndim < 1 || cl.ndim > 2) return Status::Ok();
  TopkDeviceLimits lim;
  DSATTN_RETURN_IF_ERROR(topk_device_limits(ex, &lim));
  const int64_t lens_n = cl.ndim == 2 ? cl.shape[0] * cl.shape[1] : cl.shape[0];
  auto pages_up = [&](int64_t v) { return (v + S - 1) / S * S; };
  // The workspace of chunks of w states (0: the top-k cannot plan them, or its filter plan).
  FusedPlan g = *f;
  auto try_width = [&](int64_t w) -> size_t {
    const int n = static_cast<int>((width + w - 1) / w);
    if (a.k + w > INT32_MAX / 2) return 0;
    TopkPlan tp;
    if (!plan_topk(rows, a.k + w, a.k, lim, &tp, /*rows_in_l2=*/true).ok() || (tp.filter && forced == 0)) return 0;
    // The scoring's workspace (its schedule) for the first and the last chunk, which may hold
    // fewer pages.
    size_t lws = 0;
    for (int c : {0, n - 1}) {
      detail::PagedIndexerProblem lpb;
      const PagedMqaLogitsParams lp = chunk_logits_params(a, pb, w, c, nullptr, nullptr, &lpb);
      lws = std::max(lws, paged_mqa_logits_workspace(lp, lpb, ex));
    }
    const size_t rk = static_cast<size_t>(rows) * a.k * 4;
    g.logits_ws = align256(lws);
    g.off_cbuf = g.logits_ws;
    g.off_topk = g.off_cbuf + align256(static_cast<size_t>(rows) * static_cast<size_t>(a.k + w) * 4);
    g.off_head = g.off_topk + align256(tp.workspace_bytes);
    g.off_sidx = g.off_head + 2 * align256(rk);
    g.off_svals = g.off_sidx + align256(rk);
    g.off_clens = g.off_svals + align256(rk);
    g.off_cends = g.off_clens + align256(static_cast<size_t>(n) * lens_n * 4);
    g.tp = tp;
    g.chunk_w = w;
    g.nchunks = n;
    return g.off_cends + align256(static_cast<size_t>(n) * rows * 4);
  };
  size_t total = 0;
  if (forced > 0) {
    total = try_width(pages_up(std::max<int64_t>(forced, a.k)));
  } else {
    const int64_t wmin = pages_up(std::max<int64_t>(kChunkMinWidth, a.k));
    for (int n = 2; n <= kMaxChunks; ++n) {
      const int64_t w = pages_up((width + n - 1) / n);
      if (w < wmin) break;
      const size_t t = try_width(w);
      if (t != 0 && t <= f->total) {
        total = t;
        break;
      }
    }
  }
  if (total == 0) return Status::Ok();
  g.logits_route = false;
  g.chunked = true;
  g.lens_n = lens_n;
  g.width = width;
  g.total = std::max(total, f->total);  // the streaming plan stays valid (and is the larger one by default)
  *f = g;
  return Status::Ok();
}

// The longest piece (states) the schedule gives a partition: it starts partition p at unit
// floor(p * U / P) of U = groups x the block table's units, so no piece is longer than ceil(U / P)
// units, for lengths within the block table (or capped there: IndexerWork::len_cap).
int64_t piece_states_bound(const detail::PagedIndexerProblem& pb, int64_t groups, int partitions) {
  const int64_t units = (pb.max_pages * pb.states_per_page + detail::kIndexerUnit - 1) / detail::kIndexerUnit;
  return (groups * units + partitions - 1) / std::max(partitions, 1) * detail::kIndexerUnit;
}

// Hopper: the resident route (indexer_ws_resident.cuh), one cooperative scoring kernel that keeps
// its scores in shared memory and selects with histograms shared by the CTAs of each request,
// when each warpgroup's piece (the schedule's bound over the block table's states) fits beside a
// ring of at least kWsMinStages stages. Unsorted output only (it writes in index order). By
// default for one row per request (N = 1) and up to kResidentMaxGroups requests, and for N = 2 on
// one request of at most kResidentN2MaxWidth states: with two rows it measured slower than
// streaming on longer rows (H200, 1 x 64K, N = 2, k = 2048: 44.2 against 41.3 us), and so
// it did at 8 requests and more (k = 2048, us, resident / streaming: 8 x 64K 73.5 / 70.2,
// 32 x 32K 101.8 / 88.3; but 2 x 64K 38.5 / 44.0, 4 x 64K 50.8 / 64.0, 6 x 64K 55.4 / 70.9,
// 4 x 256K 90.7 / 125.2). On block tables of up to kLogitsOverResidentMaxWidth states the logits
// route takes such calls instead (plan_fused_routes). PagedMqaTopkParams::resident_route = false
// turns it off for the call;
// DSATTN_FUSED_RESIDENT overrides that: =0 off, =force for any N and any number of requests
// (tests and benchmarks).
constexpr int64_t kResidentMaxGroups = 6;
constexpr int64_t kResidentStatesPerCta = 512;
constexpr int64_t kResidentN2MaxWidth = 32768;
// The two-barrier select of one request (indexer_ws_resident.cuh, select_fast) against the
// three-round select, same binary and call, H200, k = 2048, us (DSATTN_RESIDENT_FAST=0 / force,
// two rounds each): 1 x 4K 24.3 / 20.0, 1 x 8K 26.2 / 21.4-22.0, 1 x 16K 29.3 / 22.8, 1 x 32K
// 28.7-30.0 / 26.0, 1 x 16K N = 2 39.2 / 31.9, 1 x 12000 S = 32 N = 2 38.8-39.2 / 29.4; but
// 1 x 64K 31.7 / 31.6-32.0, and in an earlier call (list appends then one global add per key)
// 1 x 256K 43.1 / 65.7 and 1 x 1M 86.9 / 193.5. Its grid histogram takes one global add per key,
// and bunched scores make those adds wait on the same words: a shared-memory hash table that
// summed each CTA's bins first took 1 x 1M to 104.5 us (still slower) and cost 1.4 us at 64K.
constexpr int64_t kResidentFastMaxWidth = 32768;
bool plan_resident(const PagedMqaTopkParams& a, const detail::PagedIndexerProblem& pb, int budget, int sms,
                   FusedPlan* f) {
  const int sms_all = sms;  // the stream's SMs
  const char* env = std::getenv("DSATTN_FUSED_RESIDENT");
  if (env != nullptr && std::strcmp(env, "0") == 0) return false;
  const bool force = env != nullptr && std::strcmp(env, "force") == 0;
  // The resident kernel is a wgmma one: not for the mma.sync consumers' plan (ws_mma).
  if (!f->wg.use || f->wg.ws_mma || a.schedule.defined() || a.sorted) return false;
  if (!a.resident_route && !force) return false;
  if (f->p.work.groups > kResidentMaxGroups && !force) return false;
  const int64_t width = pb.max_pages * pb.states_per_page;
  const int64_t groups = f->p.work.groups;
  if (width <= 0 || width > INT32_MAX || groups < 1 || groups > INT32_MAX / 2) return false;
  // next_n = 2: one request of at most kResidentN2MaxWidth states (block table width). With the
  // three-round select it beat streaming by 1-6 % up to 16K states (H200, k = 2048, us, resident
  // at 66 CTAs / streaming, two data seeds of `bench indexer --fused --seed`: 1 x 8K 32.5 /
  // 33.9-34.3, 1 x 12K 33.2 / 34.4-34.8, 1 x 16K 33.9-34.0 / 34.3-34.6, 1 x 16K H = 32 32.1 /
  // 33.9-34.0, 1 x 12000 S = 32 32.9-33.1 / 34.5-34.8) but not beyond (1 x 32K 37.8 / 36.9,
  // 1 x 64K 43.3 / 40.9). The two-barrier select (up to kResidentFastMaxWidth) carries it to 32K
  // (resident / streaming, same call, seed 0: 1 x 20000 H = 32 30.8-31.1 / 38.0-38.4, 1 x 24K
  // 33.8-33.9 / 36.0-36.1, 1 x 32K S = 32 37.1-37.2 / 40.1-40.4, 1 x 32K 36.9-37.1 / 36.8).
  const bool n2_short = f->p.work.rows_per_group == 2 && groups == 1 && width <= kResidentN2MaxWidth;
  if (f->p.work.rows_per_group != 1 && !n2_short && !force) return false;
  int dev = 0, coop = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev) != cudaSuccess || coop == 0) {
    return false;
  }
  // One request of few states takes fewer CTAs, about one per kResidentStatesPerCta states of the
  // block table's width, at least half the SMs: the select's rounds (histogram adds, grid barrier,
  // find) then wait for fewer CTAs, while the scoring of so few states gains little from more SMs.
  // H200, k = 2048, us at 132 / 96 / 66 / 44 / 32 CTAs (same call, two rounds agreeing within
  // ~0.5 us): 1 x 8K 26.0 / 24.9 / 24.5 / 24.3 / 25.5; 1 x 16K 30.9 / 29.7 / 28.6 / 29.7 / 30.0;
  // 1 x 32K 28.1 / 27.4 / 27.5 / 28.1 / 30.0; 1 x 64K 30.7 / 30.4 / 30.4 / 32.8 / 36.6; 1 x 256K
  // 41.9 / 43.2 / 48.5; but 2 x 64K 37.8 / 38.8 / 41.5 (several requests keep every SM).
  // With the two-barrier select (below: up to kResidentFastMaxWidth states) the floor is three
  // quarters of the SMs (DSATTN_RESIDENT_CTAS sweep, same call, us at 132 / 96 / 66 / 44 CTAs:
  // 1 x 8K 22.0-22.4 / 21.2 / 21.2-21.3 / 22.0, 1 x 16K 22.9-23.0 / 22.4 / 22.8 / 23.1, 1 x 32K
  // 25.7 / 25.6 / 26.0-26.1 / 28.1, 1 x 16K N = 2 32.3 / 30.8 / 31.5 / 32.3; then 66 against
  // the new rule's 99 in another call: 21.5 / 21.2-21.4, 22.6-22.8 / 22.3-22.4, 25.7-25.9 /
  // 25.4-25.5, 31.4-31.6 / 30.9-31.2: near the noise, but never slower).
  const char* fe = std::getenv("DSATTN_RESIDENT_FAST");
  const bool fast_off = fe != nullptr && std::strcmp(fe, "0") == 0;
  const bool fast_force = fe != nullptr && std::strcmp(fe, "force") == 0;
  const bool fast_width = !fast_off && (width <= kResidentFastMaxWidth || fast_force);
  if (groups == 1) {
    const int64_t want = (width + kResidentStatesPerCta - 1) / kResidentStatesPerCta;
    const int64_t floor = fast_width ? (3 * int64_t(sms) + 3) / 4 : (sms + 1) / 2;
    sms = static_cast<int>(std::min<int64_t>(sms, std::max<int64_t>(floor, want)));
  }
  // DSATTN_RESIDENT_CTAS=N: N CTAs (at most the stream's SMs) whatever the rule above says
  // (benchmark sweeps).
  if (const char* ce = std::getenv("DSATTN_RESIDENT_CTAS")) {
    const long want = std::strtol(ce, nullptr, 10);
    if (want > 0) sms = static_cast<int>(std::min<long>(want, sms_all));
  }
  const int partitions = sms * kWsConsumers;
  // The bound holds for any device-side length once the lengths are capped at the block table
  // (len_cap, set below).
  const int64_t cap = piece_states_bound(pb, groups, partitions);
  const int rows = f->p.work.rows_per_group;
  if (cap > INT32_MAX / 8 || rows < 1 || rows > kIdxMaxRows) return false;
  WgmmaPlan plan = f->wg;
  const bool multi = groups > 1;
  if (!plan_wgmma_ws_resident(budget, sms, rows, static_cast<int>(cap), multi, &plan)) return false;
  f->wg = plan;
  f->resident = true;
  f->res_multi = multi;
  f->res_forced = force;
  f->ws_grid = sms;
  f->partitions = partitions;
  f->own_schedule = true;
  f->p.tile_states = plan.ws_stage;
  f->p.split = 1;
  f->p.work.len_cap = static_cast<int32_t>(width);
  f->res_cap = static_cast<int>(cap);
  // One request: the two-barrier select (select_fast) when the request's longest row has at most
  // kResidentFastMaxWidth states, decided on the device from its lengths (a graph captured for a
  // wide block table takes it for short requests); its list as long as the ring has room for
  // beside the other select scratch (up to kListCapMax). DSATTN_RESIDENT_FAST=0 leaves it off,
  // =force takes it at any length (tests, benchmarks).
  int list_cap = 0;
  if (!multi && !fast_off) {
    const size_t ring = size_t(plan.ws_stages) * plan.ws_stage * wg_key_row(plan.shape.fp4 != 0);
    const size_t fixed = resident::kSharedBytes + size_t(resident::kCoarseBins + resident::kTieCap) * 4;
    const size_t fit = ring > fixed ? (ring - fixed) / 8 : 0;
    list_cap = static_cast<int>(std::min<size_t>(resident::kListCapMax, fit)) / 32 * 32;
    // (Its coarse histograms, rows x kCoarseBins words, fit where plan_wgmma_ws_resident made room
    // for select_one's rows x kBins.)
    if (list_cap < resident::kListCapMin) list_cap = 0;
  }
  // Zeroed by the schedule kernel: a barrier word per group, then each group's histograms, then
  // (select_fast) the fine and coarse grid histograms and the list counters.
  const size_t hist_words = static_cast<size_t>(groups) * resident::kRounds * rows * resident::kBins;
  const size_t fast_zero_words =
      list_cap > 0 ? static_cast<size_t>(rows) * (resident::kFineBins + resident::kCoarseBins) + 64 : 0;
  f->off_res = align256(indexer_schedule_workspace(partitions));
  f->res_hist_words = align256(static_cast<size_t>(groups) * 4) / 4;
  f->res_fine_words = f->res_hist_words + hist_words;
  f->res_zero_bytes = (f->res_fine_words + fast_zero_words) * 4;
  if (f->res_zero_bytes / 4 > static_cast<size_t>(INT32_MAX)) return false;
  f->off_suf = f->off_res + align256(f->res_zero_bytes);
  const size_t suf_words = static_cast<size_t>(resident::kRounds) * (sms + groups) * rows * resident::kBins;
  f->off_cnt = f->off_suf + align256(suf_words * 4);
  f->off_list = f->off_cnt + (list_cap > 0 ? align256(static_cast<size_t>(rows) * sms * 4) : 0);
  f->res_list_cap = list_cap;
  f->res_fast_max_len = fast_force ? INT32_MAX : static_cast<int>(kResidentFastMaxWidth);
  f->total = f->off_list + align256(static_cast<size_t>(rows) * list_cap * 8);
  return true;
}

// The streaming plan, or one of the routes that replace it (resident: *resident, when
// *have_resident is set and the logits route does not take the call).
Status plan_fused_routes(const PagedMqaTopkParams& a, const detail::PagedIndexerProblem& pb, const Exec& ex,
                         FusedPlan* f, FusedPlan* resident_out, bool* have_resident_out) {
  FusedPlan& resident = *resident_out;
  bool& have_resident = *have_resident_out;
  DSATTN_RETURN_IF_ERROR(fill_paged_indexer_params(kOp, a, pb, &f->p));
  int sms = 0, optin = 0;
  DSATTN_RETURN_IF_ERROR(device_limits(kOp, ex, &sms, &optin));
  const int budget = ex.smem_budget_bytes > 0 ? std::min(ex.smem_budget_bytes, optin) : optin;
  DSATTN_RETURN_IF_ERROR(plan_wgmma_indexer(kOp, &f->p, budget, topk_epi_smem, &f->wg));
  // Where paged_mqa_logits scores on the mma.sync consumers' warp-specialized kernel (the sm_100
  // family's large calls; logits_mma_ws_rule), so does this op, with the top-k epilogue and its own
  // split (a caller schedule is checked, not used, even under DSATTN_FUSED_SCHEDULE=caller): the
  // portable kernel's scores differ from that kernel's in the last bits (it groups the head dim
  // into MMA k-steps differently), so the two ops would return different scores and could break
  // near-ties at the k-th key apart.
  if (!f->wg.use) {
    DSATTN_RETURN_IF_ERROR(
        plan_mma_ws(kOp, &f->p, a.cache.format, pb.head_dim, sms, budget, topk_epi_smem, /*topk=*/true, &f->wg));
  }
  const StagedMode staged_mode = fused_staged_mode(std::getenv("DSATTN_FUSED_STAGED"));
  if (!f->wg.use && staged_mode != StagedMode::kOff) {
    // The config paged_mqa_logits picks (same pipeline, same scores), with the staged epilogue's
    // scratch; the CTA-wide pipeline where the keys would come by bulk copies.
    const IndexerParams saved = f->p;
    DSATTN_RETURN_IF_ERROR(
        pick_indexer_config(kOp, &f->p, budget, topk_staged_epi_smem, &f->cfg, /*warp_local=*/true, sms));
    f->staged = !f->p.bulk && f->p.tile_states <= fused_topk::kMaxTileStates;
    if (!f->staged) f->p = saved;
  }
  if (!f->wg.use && !f->staged) DSATTN_RETURN_IF_ERROR(pick_indexer_config(kOp, &f->p, budget, topk_epi_smem, &f->cfg));
  size_t meta_bytes = 0;
  int caller_parts = 0;
  if (a.schedule.defined()) DSATTN_RETURN_IF_ERROR(check_caller_schedule(kOp, a.schedule, &caller_parts));
  if (a.schedule.defined() && !f->wg.ws_mma) {
    f->partitions = caller_parts;
  } else {  // the op's own split (a caller schedule of the mma kernel's call: checked above, not used)
    // The resident route for a few requests, except on block tables of up to
    // kLogitsOverResidentMaxWidth states, where the logits route wins when it is allowed (by
    // default: pieces at most twice their buffers, which holds for so few requests) and fits; not
    // when DSATTN_FUSED_RESIDENT=force asks for the resident route, or DSATTN_FUSED_LOGITS=0 keeps
    // the logits route off.
    resident = *f;
    if (plan_resident(a, pb, budget, sms, &resident)) {
      const FusedRouteMode mode = fused_route_mode(std::getenv("DSATTN_FUSED_LOGITS"), a.logits_route);
      const int64_t width = pb.max_pages * pb.states_per_page;
      if (mode == FusedRouteMode::kStreaming || resident.res_forced ||
          (mode != FusedRouteMode::kForce && width > kLogitsOverResidentMaxWidth)) {
        *f = resident;
        return Status::Ok();
      }
      have_resident = true;  // unless the logits route takes the call after all
    }
    // Own schedule: on Hopper the warp-specialized kernel when it fits (one CTA per SM, each
    // consumer warpgroup scoring its own partition); a caller schedule keeps the tile kernel.
    if (f->wg.use && !f->wg.ws_mma) plan_wgmma_ws(f->p, budget, true, &f->wg);
    if (f->wg.ws_stages > 0) {
      f->ws_grid = sms;
      f->partitions = sms * kWsConsumers;
      f->p.tile_states = f->wg.ws_stage;
      f->p.split = 1;
    } else {
      int occ = 0;
      const auto tile_occ = [&](auto ops) { return ops.occupancy(f->p, f->cfg.smem, &occ); };
      const cudaError_t e = f->wg.use ? WgmmaKernelOps<TopkEpilogue>::occupancy(f->wg, &occ)
                            : f->staged ? with_topk_ops<TopkStagedEpilogue>(a.cache.format, pb.head_dim, tile_occ)
                                        : with_topk_ops(a.cache.format, pb.head_dim, tile_occ);
      DSATTN_RETURN_IF_ERROR(cuda_status(e, kOp, "cudaOccupancyMaxActiveBlocksPerMultiprocessor"));
      f->partitions = sms * std::max(1, std::min(occ, 4));
    }
    f->own_schedule = true;
    meta_bytes = align256(indexer_schedule_workspace(f->partitions));
  }
  const int rps = f->p.work.rows_per_group;
  f->slots = f->partitions + f->p.work.groups;
  f->k_pad = topk_detail::next_pow2(a.k);
  // Merge buffer: as many (key, index) pairs as the shared memory holds (a multiple of 1024); it
  // must take k survivors plus a whole piece, so a piece holds at most mcap - k entries (tight
  // budgets: fewer than collector_ccap's 4k / 6k, never fewer than k plus one tile). Without room
  // for the mlist and pieces of 4k, go without the mlist (pieces of 4k..6k do not justify dropping it).
  const int kc = (a.k + 3) & ~3;
  const int ccap_min = kc + fused_topk::kMaxTileStates;
  auto mcap_for = [&](int m_cap) {
    return ((budget - 1024) / 4 - topk_detail::region_words(f->k_pad, m_cap)) / 2 / 1024 * 1024;
  };
  f->m_cap = topk_detail::mlist_cap(f->k_pad);
  f->mcap = mcap_for(f->m_cap);
  if (f->mcap < a.k + fused_topk::collector_ccap(a.k, 4)) {
    f->m_cap = 0;
    f->mcap = mcap_for(0);
  }
  if (f->mcap < a.k + ccap_min) {
    return detail::not_implemented(kOp, "k = %d needs more shared memory than the %d bytes available", a.k, budget);
  }
  // 6k under the warp-specialized kernel (no compaction on 128 x 32K's pieces), 4k for the tile
  // kernels (see fused_topk_collect.cuh).
  f->ccap = std::min(fused_topk::collector_ccap(a.k, f->wg.ws_stages > 0 ? 6 : 4), (f->mcap - a.k) & ~3);
  // No piece holds more states than its partition's share of the schedule units (the schedule
  // balances units; the block table bounds every context), so short pieces (small batches) need
  // less; a longer piece (an unbalanced caller schedule) only compacts more often.
  bool short_pieces = false;  // no piece compacts, so none finds a row bound
  // Every piece writes at least as many bytes as score rows of its states would take (see
  // plan_logits_route): a piece appends every state of its window until its buffer is full, 8
  // bytes each (key and index; a dense piece writes its keys, and their indices if it overflows),
  // so n states write at least 8 min(n, ccap) >= 4 n bytes when n <= 2 ccap.
  bool writes_rows_anyway = false;
  {
    const int64_t piece_max = piece_states_bound(pb, f->p.work.groups, f->partitions);
    const int64_t fit = std::max<int64_t>(ccap_min, (piece_max + 3) & ~int64_t(3));
    if (fit < f->ccap) f->ccap = static_cast<int>(fit);
    short_pieces = piece_max <= f->ccap;
    writes_rows_anyway = piece_max <= 2 * int64_t(f->ccap);
  }
  f->merge_smem = fused_topk::merge_smem_bytes(f->mcap, f->k_pad, f->m_cap);
  const size_t entries = static_cast<size_t>(f->slots) * rps * f->ccap;
  f->off_key = meta_bytes;
  f->off_idx = f->off_key + align256(entries * 4);
  f->off_hdr = f->off_idx + align256(entries * 4);
  f->hdr_bytes = static_cast<size_t>(f->slots) * rps * fused_topk::kHeaderInts * 4;
  f->total = f->off_hdr + align256(f->hdr_bytes);
  f->zero_bytes = f->hdr_bytes;
  // Few rows, each spread over many pieces (batch-1 decode: every piece is shorter than k, so the
  // merge sees the whole context): one merge CTA per row would stream all of it alone. Split each
  // row's slots over `split` CTAs of about 32 slots (one round) each, then merge their top-ks.
  // Rows of 8..32 pieces too short to compact (32 x 32K: ~13 pieces of ~2.6K states; none finds a
  // row bound, so one CTA would stream and select the whole row): about 4 pieces per CTA, and the
  // row histogram's bound lets level 1 keep only ~k / split of them. (Pieces that compact find
  // bounds, and the histogram's atomics would only cost: 32 x 128K stays one CTA per row.)
  const int64_t per_row = (f->slots + f->p.work.groups - 1) / std::max<int64_t>(f->p.work.groups, 1);
  // Except where every row can be a dense row (fused_topk_merge.cuh, merge_dense_row): dense pieces
  // (warp-specialized kernel at 64 padded heads, or at 32 on the pure kernel chosen below, N = 1,
  // no row histogram) that never leave dense mode, at most 32 per row, and rows (bounded by the
  // block table) that fit the merge's shared memory as keys: one merge CTA per row then loads its
  // keys once and selects.
  const bool dense_heads =
      f->wg.ws_stages > 0 && !f->wg.ws_mma && (f->wg.shape.hp == 64 || ws_pure_shape(f->wg.shape));
  const bool dense_rows = dense_heads && rps == 1 && short_pieces && per_row <= 32 &&
                          pb.max_pages * pb.states_per_page <= 2 * int64_t(f->mcap);
  const bool few_long_rows = pb.rows * 2 <= sms && !dense_rows && (per_row > 32 || (per_row >= 8 && short_pieces));
  // On devices with cluster launch, kClusterMergeMinRows..kClusterMergeMaxRows such rows take the
  // cluster merge (fused_topk_cluster_merge.cuh): one launch instead of two, and no row
  // histograms, so the scoring kernel stays dense (and pure).
  const char* cluster_env = std::getenv("DSATTN_FUSED_CLUSTER");
  const bool cluster_off = cluster_env != nullptr && std::strcmp(cluster_env, "0") == 0;
  const bool cluster_any = cluster_env != nullptr && std::strcmp(cluster_env, "1") == 0;
  int cluster_launch = 0;
  {
    int dev = 0;
    DSATTN_CUDA_RETURN(kOp, cudaGetDevice(&dev));
    DSATTN_CUDA_RETURN(kOp, cudaDeviceGetAttribute(&cluster_launch, cudaDevAttrClusterLaunch, dev));
  }
  if (few_long_rows && cluster_launch != 0 && !cluster_off && (cluster_any || pb.rows >= kClusterMergeMinRows) &&
      pb.rows <= kClusterMergeMaxRows &&
      f->partitions <= fused_topk::kClusterMergeMaxSlots &&
      fused_topk::cluster_merge_smem_bytes() + 1024 <= static_cast<size_t>(budget)) {
    f->cluster = topk_detail::kClusterMaxCtas;
  } else if (few_long_rows) {
    const int64_t want = per_row > 32 ? (per_row + 31) / 32 : (per_row + 3) / 4;
    f->split = static_cast<int>(std::max<int64_t>(2, std::min<int64_t>(want, std::max<int64_t>(2, sms / pb.rows))));
    // Pieces this short rarely reach k candidates, so none of them finds a row bound: the row
    // histogram gives the merge one instead (level 1 then keeps ~k of the row's candidates).
    f->off_hist = f->total;
    f->total = f->off_hist + align256(static_cast<size_t>(pb.rows) * fused_topk::kRowHistCopies *
                                      fused_topk::kRowHistBins * 4);
    f->off_hist2 = f->total;
    f->total = f->off_hist2 + align256(static_cast<size_t>(pb.rows) * topk_detail::kBins2 * 4);
    f->off_rec = f->total;
    f->total = f->off_rec + align256(static_cast<size_t>(pb.rows) * 4 * 4);
    f->zero_bytes = f->total - f->off_hdr;
    // Level 1's outputs hold 2k entries: a CTA passes every candidate on while they fit, and
    // selects only beyond that (fused_topk_merge_kernel, keep_all).
    f->kc = std::min(2 * kc, f->mcap & ~3);
    const size_t pentries = static_cast<size_t>(pb.rows) * f->split * f->kc;
    f->off_pkey = f->total;
    f->off_pidx = f->off_pkey + align256(pentries * 4);
    f->off_phdr = f->off_pidx + align256(pentries * 4);
    f->total = f->off_phdr + align256(static_cast<size_t>(pb.rows) * f->split * fused_topk::kHeaderInts * 4);
  }
  // Dense pieces that never overflow (short_pieces): the scoring kernel without staged scores,
  // whose ring then takes 256-state stages (see WsTopkT's kPure), when it is as deep.
  // DSATTN_FUSED_PURE=force takes it for any call (tests: its positional appends after an overflow).
  const char* pure_env = std::getenv("DSATTN_FUSED_PURE");
  const bool force_pure = pure_env != nullptr && std::strcmp(pure_env, "force") == 0;
  if (f->wg.ws_stages > 0 && !f->wg.ws_mma && f->split == 1 && (short_pieces || force_pure)) {
    WgmmaPlan pure = f->wg;
    plan_wgmma_ws(f->p, budget, true, &pure, true);
    if (pure.ws_pure && pure.ws_stages >= f->wg.ws_stages) {
      f->wg = pure;
      f->p.tile_states = pure.ws_stage;
    }
  }
  if (f->staged) {  // the staging slots: partitions (the grid) x stage_tiles tiles
    const StagedShape shape = staged_shape(rps, f->p.tile_states, f->ccap, kc, staged_mode);
    f->stage_tiles = shape.tiles;
    f->stage_run = shape.run;
    f->off_stage = f->total;
    const int64_t cta = TopkStagedEpilogue::cta_floats(f->stage_tiles, rps, f->p.tile_states);
    f->total = f->off_stage + align256(static_cast<size_t>(f->partitions) * static_cast<size_t>(cta) * 4);
  }
  DSATTN_RETURN_IF_ERROR(plan_logits_route(a, pb, ex, writes_rows_anyway, f));
  return plan_chunked_route(a, pb, ex, f);
}

Status plan_fused(const PagedMqaTopkParams& a, const detail::PagedIndexerProblem& pb, const Exec& ex, FusedPlan* f) {
  FusedPlan resident;
  bool have_resident = false;
  DSATTN_RETURN_IF_ERROR(plan_fused_routes(a, pb, ex, f, &resident, &have_resident));
  if (have_resident && !f->logits_route && !f->chunked) *f = resident;
  return Status::Ok();
}

// Rows of at most k states are not scored where nothing of their result depends on their scores
// (SPEC §3.3: such a row yields 0..len-1): unsorted output without values (slot ids are positions
// mapped through the block table). The schedules then give them no units, the scoring kernels
// never read their keys, and the route's last kernel writes their positions (the merges:
// write_position_row; the logits route's top-k kernels: their short-row paths, which read no
// scores for such output). On the streaming and logits routes; the resident and chunked routes
// score every row. On by default since its GPU test and benchmark ran (2026-12-07, H100: 128
// requests of 2048 states on a 128K-state table, k = 2048, 48.4 -> 15.5 us, BENCHMARKS.md);
// DSATTN_FUSED_SKIP_SHORT=0 scores every row (A/B, tests): every kernel then sees skip_len = 0.
int32_t short_row_skip(const PagedMqaTopkParams& a, const FusedPlan& f) {
  if (a.sorted || a.values.defined() || f.resident || f.chunked) return 0;
  const char* env = std::getenv("DSATTN_FUSED_SKIP_SHORT");
  if (env != nullptr && std::strcmp(env, "0") == 0) return 0;
  return a.k;
}

// The plan of a call, and the arguments it runs with (*use: `a`, or *own, a copy without the
// schedule). A caller schedule (schedule_metadata: one partition per SM, what paged_mqa_logits
// takes) puts the call on the wgmma tile kernel, off the resident route and, its pieces three times
// as long, off the logits route more often: those split the work their own way (three partitions
// per SM, or per request). So on Hopper, where the op's own plan runs the warp-specialized kernel
// or the resident route, the call is planned and run as if no schedule were given: the schedule
// is still checked, and read only by
// the logits route's scoring of several requests (paged_mqa_topk below). The results are the same
// either way (SPEC 3.4 leaves the split to the implementation); an engine that shares one schedule
// between its indexer ops per step loses nothing by passing it here (H100, 128 x 32K with a
// schedule: 471.4 -> 231.3 us). DSATTN_FUSED_SCHEDULE=caller keeps the caller's schedule (tests
// and A/B of those paths).
bool keep_caller_schedule() {
  const char* env = std::getenv("DSATTN_FUSED_SCHEDULE");
  return env != nullptr && std::strcmp(env, "caller") == 0;
}
Status plan_call(const PagedMqaTopkParams& a, const detail::PagedIndexerProblem& pb, const Exec& ex,
                 PagedMqaTopkParams* own, const PagedMqaTopkParams** use, FusedPlan* f) {
  *use = &a;
  // Where neither the wgmma kernels nor the mma.sync consumers' warp-specialized kernel have code,
  // the own plan cannot run those, so the caller's plan is made once (not after a discarded own
  // plan). On the sm_100 family the own plan scores the calls of logits_mma_ws_rule on the latter,
  // as paged_mqa_logits does.
  int major = 0, minor = 0;
  const bool ws_device = wgmma_device(&major, &minor) || mma_ws_kernel_runs(major, minor);
  if (a.schedule.defined() && !keep_caller_schedule() && ws_device) {
    int parts = 0;
    DSATTN_RETURN_IF_ERROR(check_caller_schedule(kOp, a.schedule, &parts));
    *own = a;
    own->schedule = TensorView{};
    FusedPlan g;
    if (plan_fused(*own, pb, ex, &g).ok() && (g.resident || g.wg.ws_stages > 0)) {
      *f = g;
      *use = own;
      return Status::Ok();
    }
  }
  return plan_fused(a, pb, ex, f);
}

// The logits route's launches (see plan_logits_route).
Status run_logits_route(const PagedMqaTopkParams& a, const detail::PagedIndexerProblem& pb, const Exec& ex,
                        const FusedPlan& f, const topk_detail::TopkOutputs& out) {
  char* ws = static_cast<char*>(ex.workspace);
  float* logits = reinterpret_cast<float*>(ws + f.logits_ws);
  detail::PagedIndexerProblem lpb;
  const PagedMqaLogitsParams lp = route_logits_params(a, pb, f.width, logits, &lpb);
  lpb.skip_len = f.p.work.skip_len;  // the logits op's scoring leaves those rows out too (short_row_skip)
  Exec lex = ex;
  lex.workspace = ws;
  lex.workspace_bytes = f.logits_ws;
  const bool trigger =
      logits_route_early_trigger(std::getenv("DSATTN_FUSED_EARLY_TRIGGER"), topk_first_ctas(f.tp, pb.rows));
  DSATTN_RETURN_IF_ERROR(paged_mqa_logits(lp, lpb, lex, trigger));
  topk_detail::TopkRowBounds rb;
  rb.width = static_cast<int>(f.width);
  rb.paged = true;
  rb.work = f.p.work;  // the rows the scoring kernel (and the streaming route) sees
  Exec tex = ex;
  tex.workspace = ws + f.off_topk;
  tex.workspace_bytes = f.tp.workspace_bytes;
  return topk_rows_f32(f.tp, pb.rows, logits, f.width, rb, a.sorted, out, tex, kOp);
}

// The chunked logits route's launches (see plan_chunked_route, fused_chunked.cuh): every chunk's
// lengths and row ends, then per chunk the scores (paged_mqa_logits), the top-k of the carried
// winners and the chunk's scores, and the carry (or, after the last chunk, the outputs).
Status run_chunked_route(const PagedMqaTopkParams& a, const detail::PagedIndexerProblem& pb, const Exec& ex,
                         const FusedPlan& f, const topk_detail::TopkOutputs& out) {
  cudaStream_t stream = static_cast<cudaStream_t>(ex.stream);
  char* ws = static_cast<char*>(ex.workspace);
  const int64_t rows = pb.rows, ld = a.k + f.chunk_w;
  float* buf = reinterpret_cast<float*>(ws + f.off_cbuf);
  int32_t* head[2] = {reinterpret_cast<int32_t*>(ws + f.off_head),
                      reinterpret_cast<int32_t*>(ws + f.off_head + align256(static_cast<size_t>(rows) * a.k * 4))};
  int32_t* sidx = reinterpret_cast<int32_t*>(ws + f.off_sidx);
  float* svals = reinterpret_cast<float*>(ws + f.off_svals);
  int32_t* clens = reinterpret_cast<int32_t*>(ws + f.off_clens);
  int32_t* cends = reinterpret_cast<int32_t*>(ws + f.off_cends);
  {
    fused_chunked::Prep p;
    p.rb.width = static_cast<int>(f.width);  // the logits route's bounds (run_logits_route)
    p.rb.paged = true;
    p.rb.work = f.p.work;
    p.rows = rows;
    p.chunk = f.chunk_w;
    p.nchunks = f.nchunks;
    p.k = a.k;
    const TensorView& cl = a.context_lens;
    p.lens = cl.ptr<const int32_t>();
    p.n0 = cl.shape[0];
    p.s0 = cl.strides[0];
    p.n1 = cl.ndim == 2 ? cl.shape[1] : 1;
    p.s1 = cl.ndim == 2 ? cl.strides[1] : 0;
    p.slack = f.p.work.lens_per_row == 0 ? f.p.work.next_n - 1 : 0;
    p.clens = clens;
    p.cends = cends;
    const int64_t n = std::max<int64_t>(f.lens_n, rows) * f.nchunks;
    const int blocks = static_cast<int>(std::min<int64_t>((n + fused_chunked::kThreads - 1) / fused_chunked::kThreads, 1024));
    fused_chunked::chunk_prep_kernel<<<std::max(blocks, 1), fused_chunked::kThreads, 0, stream>>>(p);
    DSATTN_CUDA_RETURN(kOp, cudaGetLastError());
  }
  topk_detail::TopkOutputs sout;
  sout.indices = sidx;
  sout.indices_ld = a.k;
  sout.values = svals;
  sout.values_ld = a.k;
  Exec lex = ex;
  lex.workspace = ws;
  lex.workspace_bytes = f.logits_ws;
  Exec tex = ex;
  tex.workspace = ws + f.off_topk;
  tex.workspace_bytes = f.tp.workspace_bytes;
  for (int c = 0; c < f.nchunks; ++c) {
    detail::PagedIndexerProblem lpb;
    const PagedMqaLogitsParams lp =
        chunk_logits_params(a, pb, f.chunk_w, c, clens + static_cast<int64_t>(c) * f.lens_n, buf, &lpb);
    DSATTN_RETURN_IF_ERROR(paged_mqa_logits(lp, lpb, lex, false));
    // Chunk 0 has no carried winners: its top-k reads the rows from column k on.
    const int64_t col0 = c == 0 ? a.k : 0;
    topk_detail::TopkRowBounds rb;
    rb.width = static_cast<int>(ld - col0);
    rb.ends = cends + static_cast<int64_t>(c) * rows;
    rb.ends_stride = 1;
    const bool last = c + 1 == f.nchunks;
    DSATTN_RETURN_IF_ERROR(topk_rows_f32(f.tp, rows, buf + col0, ld, rb, last && a.sorted, sout, tex, kOp));
    fused_chunked::Map m;
    m.sidx = sidx;
    m.svals = svals;
    m.head = head[c & 1];
    m.k = a.k;
    m.c0 = static_cast<int64_t>(c) * f.chunk_w;
    if (last) {
      fused_chunked::chunk_final_kernel<<<static_cast<unsigned>(rows), fused_chunked::kThreads, 0, stream>>>(m, out);
    } else {
      fused_chunked::chunk_carry_kernel<<<static_cast<unsigned>(rows), fused_chunked::kThreads, 0, stream>>>(
          m, head[(c + 1) & 1], buf, ld);
    }
    DSATTN_CUDA_RETURN(kOp, cudaGetLastError());
  }
  return Status::Ok();
}

// The resident route's launches (see plan_resident): the schedule (which also zeroes the barrier
// and the grid histograms), then the scoring kernel that selects.
Status run_resident(const PagedMqaTopkParams& a, const FusedPlan& f, const topk_detail::TopkOutputs& out,
                    const Exec& ex) {
  cudaStream_t stream = static_cast<cudaStream_t>(ex.stream);
  char* ws = static_cast<char*>(ex.workspace);
  int32_t* meta = reinterpret_cast<int32_t*>(ws);
  uint32_t* res = reinterpret_cast<uint32_t*>(ws + f.off_res);
  DSATTN_RETURN_IF_ERROR(cuda_status(launch_indexer_schedule(f.p.work, f.partitions, meta, stream, res,
                                                             static_cast<int>(f.res_zero_bytes / 4)),
                                     kOp, "indexer_schedule_kernel launch"));
  IndexerParams p = f.p;
  p.meta = meta;
  auto launch = [&](auto epi) {
    epi.grid = f.ws_grid;
    epi.buf.bar = res;
    epi.buf.hist = res + f.res_hist_words;
    epi.buf.suf = reinterpret_cast<uint32_t*>(ws + f.off_suf);
    epi.buf.ids = f.ws_grid + static_cast<int>(f.p.work.groups);
    epi.buf.rows = f.p.work.rows_per_group;
    epi.buf.cap = f.res_cap;
    epi.buf.k = a.k;
    epi.buf.out = out;
    if (f.res_list_cap > 0) {  // one request: select_fast
      const int rows = f.p.work.rows_per_group;
      epi.buf.fine = res + f.res_fine_words;
      epi.buf.coarse = epi.buf.fine + size_t(rows) * resident::kFineBins;
      epi.buf.lcount = epi.buf.coarse + size_t(rows) * resident::kCoarseBins;
      epi.buf.cnt = reinterpret_cast<uint32_t*>(ws + f.off_cnt);
      epi.buf.list = reinterpret_cast<uint2*>(ws + f.off_list);
      epi.buf.list_cap = f.res_list_cap;
      epi.buf.fast_max_len = f.res_fast_max_len;
    }
    const char* what =
        f.res_multi ? "indexer_ws_kernel<WsResidentMulti> launch" : "indexer_ws_kernel<WsResident> launch";
    // Without PDL: the schedule kernel triggers its dependents first thing, so with PDL the
    // resident CTAs were placed at once and waited out the schedule kernel. In a CUDA graph with
    // other code run before each call (bench --cold) that cost 3-9 us (H100, us per call, PDL on ->
    // off: 1 x 192K 53.2-53.6 -> 46.1-46.4, 1 x 256K 55.9-57.1 -> 48.6-48.7, 1 x 1M 101.5-102.1 ->
    // 94.8-95.6, 2 x 256K 74.3-74.7 -> 65.8, 6 x 256K 137.4-138.9 -> 131.7-132.0); with the code
    // warm it gained 0.2-1.4 us (1 x 192K 42.5-42.9 -> 43.3-43.5, 2 x 256K 63.4-64.2 -> 64.9-65.5).
    // BENCHMARKS.md, 2026-12-06; pdl.cuh.
    return cuda_status(launch_indexer_ws_resident(f.wg, p, epi, f.ws_grid, false, stream), kOp, what);
  };
  return f.res_multi ? launch(WsResidentMulti{}) : launch(WsResident{});
}

}  // namespace

size_t paged_mqa_topk_workspace(const PagedMqaTopkParams& a, const detail::PagedIndexerProblem& pb, const Exec& ex) {
  FusedPlan f;
  PagedMqaTopkParams own;
  const PagedMqaTopkParams* use = nullptr;
  if (pb.rows == 0 || !plan_call(a, pb, ex, &own, &use, &f).ok()) return 0;
  return f.total;
}

Status paged_mqa_topk_route(const PagedMqaTopkParams& a, const detail::PagedIndexerProblem& pb, const Exec& ex,
                           const char** route) {
  if (pb.rows == 0) {
    *route = "empty";
    return Status::Ok();
  }
  FusedPlan f;
  PagedMqaTopkParams own;
  const PagedMqaTopkParams* use = nullptr;
  DSATTN_RETURN_IF_ERROR(plan_call(a, pb, ex, &own, &use, &f));
  *route = f.resident ? "resident" : f.logits_route ? "logits" : f.chunked ? "chunked" : "streaming";
  return Status::Ok();
}

Status paged_mqa_topk(const PagedMqaTopkParams& caller, const detail::PagedIndexerProblem& pb, const Exec& ex) {
  if (pb.rows == 0) return Status::Ok();
  if (caller.k < 1 || caller.k > topk_detail::kMaxK) {
    return detail::not_implemented(kOp, "k expected 1..%d on CUDA, got %d", topk_detail::kMaxK, caller.k);
  }
  FusedPlan f;
  PagedMqaTopkParams own;
  const PagedMqaTopkParams* use = nullptr;
  DSATTN_RETURN_IF_ERROR(plan_call(caller, pb, ex, &own, &use, &f));
  const PagedMqaTopkParams& a = *use;  // the caller's, or without its schedule (plan_call)
  DSATTN_RETURN_IF_ERROR(detail::check_workspace(kOp, ex, f.total));
  f.p.work.skip_len = short_row_skip(a, f);  // every kernel below reads it from f.p.work
  // varlen (pb.varlen) is exactly "row_request given": slot ids then map through it.
  const topk_detail::TopkOutputs out = topk_detail::topk_outputs(
      a.indices, a.values, a.slot_ids, a.block_table, a.row_request, pb.varlen ? 1 : pb.next_n, pb.states_per_page);
  if (f.resident) return run_resident(a, f, out, ex);
  // The logits route of several requests scores with the caller's schedule when there is one, as
  // paged_mqa_logits would (it needs no workspace then): its partitions are charged for the
  // requests they enter (DSATTN_INDEXER_GROUP_COST), the op's own split for several requests is
  // not (H100, cold: 32 x 32K 82.4 -> 78.5 us, 64 x 16K N = 2 94.1 -> 87.2, 8 x 64K 58.0 -> 54.2).
  // One request splits itself faster without one (1 x 64K 26.7 against 24.6; BENCHMARKS.md,
  // 2026-12-06 13:00).
  if (f.chunked) return run_chunked_route(a, pb, ex, f, out);
  if (f.logits_route) return run_logits_route(pb.batch > 1 ? caller : a, pb, ex, f, out);
  cudaStream_t stream = static_cast<cudaStream_t>(ex.stream);
  char* ws = static_cast<char*>(ex.workspace);
  // No PDL on this route (pdl.cuh's EpiPdl): the scoring kernels' top-k epilogues say so, and so
  // do the merges below.
  constexpr bool kPdl = false;
  const LaunchOpt stream_opt{0, kPdl};
  // Pieces that never run (no tile survives the state limit) must read as empty: the headers (and
  // what follows them, f.zero_bytes) are zeroed first, so the kernels after it follow one another
  // (pdl.cuh: a launch after a memset waits for it in full).
  DSATTN_CUDA_RETURN(kOp, cudaMemsetAsync(ws + f.off_hdr, 0, f.zero_bytes, stream));
  if (f.own_schedule) {
    int32_t* meta = reinterpret_cast<int32_t*>(ws);
    DSATTN_RETURN_IF_ERROR(cuda_status(launch_indexer_schedule(f.p.work, f.partitions, meta, stream), kOp,
                                       "indexer_schedule_kernel launch"));
    f.p.meta = meta;
  } else {
    f.p.meta = a.schedule.ptr<const int32_t>();
  }
  TopkEpilogue epi;
  epi.buf.key = reinterpret_cast<uint32_t*>(ws + f.off_key);
  epi.buf.idx = reinterpret_cast<int32_t*>(ws + f.off_idx);
  epi.buf.header = reinterpret_cast<int32_t*>(ws + f.off_hdr);
  epi.buf.ccap = f.ccap;
  epi.buf.rows_per_slot = f.p.work.rows_per_group;
  epi.buf.k = a.k;
  if (f.off_hist != 0) epi.buf.hist = reinterpret_cast<uint32_t*>(ws + f.off_hist);
  cudaError_t e;
  if (f.wg.ws_stages > 0) {
    e = launch_indexer_ws_topk(f.wg, f.p, epi.buf, f.ws_grid, stream);
  } else if (f.wg.use) {
    e = WgmmaKernelOps<TopkEpilogue>::launch(f.wg, f.p, epi, f.partitions, stream);
  } else if (f.staged) {
    TopkStagedEpilogue se;
    static_cast<TopkEpilogue&>(se) = epi;
    se.stage = reinterpret_cast<float*>(ws + f.off_stage);
    se.tiles = f.stage_tiles;
    se.run = f.stage_run;
    e = with_topk_ops<TopkStagedEpilogue>(a.cache.format, pb.head_dim, [&](auto ops) {
      return ops.launch(f.p, se, f.partitions, f.cfg.smem, stream);
    });
  } else {
    e = with_topk_ops(a.cache.format, pb.head_dim,
                      [&](auto ops) { return ops.launch(f.p, epi, f.partitions, f.cfg.smem, stream); });
  }
  DSATTN_RETURN_IF_ERROR(cuda_status(e, kOp, "indexer_kernel<TopkEpilogue> launch"));

  MetaSlots slots;
  slots.work = f.p.work;
  slots.meta = f.p.meta;
  slots.partitions = f.partitions;
  if (f.cluster > 0) {
    return topk_detail::launch_cluster(fused_topk::fused_topk_cluster_merge_kernel<MetaSlots>, f.cluster, pb.rows,
                                       fused_topk::cluster_merge_smem_bytes(), stream, kPdl, kOp,
                                       "fused_topk_cluster_merge_kernel", epi.buf, slots, a.k, f.k_pad,
                                       static_cast<bool>(a.sorted), out);
  }
  if (f.split > 1) {
    fused_topk::CollectorBuffers part;
    part.key = reinterpret_cast<uint32_t*>(ws + f.off_pkey);
    part.idx = reinterpret_cast<int32_t*>(ws + f.off_pidx);
    part.header = reinterpret_cast<int32_t*>(ws + f.off_phdr);
    part.ccap = f.kc;
    part.rows_per_slot = 1;
    part.k = a.k;
    // Level 1 writes the records and hist2 (epi.buf), level 2 reads them (part).
    epi.buf.hist2 = part.hist2 = reinterpret_cast<uint32_t*>(ws + f.off_hist2);
    epi.buf.rec = part.rec = reinterpret_cast<int32_t*>(ws + f.off_rec);
    auto level1 = fused_topk::fused_topk_merge_kernel<MetaSlots, true>;
    DSATTN_RETURN_IF_ERROR(topk_detail::set_smem(level1, f.merge_smem, kOp));
    DSATTN_RETURN_IF_ERROR(cuda_status(
        launch_pdl(level1, dim3(static_cast<unsigned>(pb.rows), static_cast<unsigned>(f.split)),
                   dim3(topk_detail::kTopkThreads), f.merge_smem, stream, stream_opt, epi.buf, slots, a.k, f.k_pad, f.m_cap,
                   f.mcap, static_cast<bool>(a.sorted), out, part),
        kOp, "fused_topk_merge_kernel (level 1)"));
    fused_topk::SplitSlots<MetaSlots> split;
    split.inner = slots;
    split.parts = f.split;
    auto level2 = fused_topk::fused_topk_merge_kernel<fused_topk::SplitSlots<MetaSlots>>;
    DSATTN_RETURN_IF_ERROR(topk_detail::set_smem(level2, f.merge_smem, kOp));
    return cuda_status(launch_pdl(level2, dim3(static_cast<unsigned>(pb.rows)), dim3(topk_detail::kTopkThreads),
                                  f.merge_smem, stream, stream_opt, part, split, a.k, f.k_pad, f.m_cap, f.mcap,
                                  static_cast<bool>(a.sorted), out, fused_topk::CollectorBuffers{}),
                       kOp, "fused_topk_merge_kernel (level 2)");
  }
  auto merge = fused_topk::fused_topk_merge_kernel<MetaSlots>;
  DSATTN_RETURN_IF_ERROR(topk_detail::set_smem(merge, f.merge_smem, kOp));
  return cuda_status(launch_pdl(merge, dim3(static_cast<unsigned>(pb.rows)), dim3(topk_detail::kTopkThreads),
                                f.merge_smem, stream, stream_opt, epi.buf, slots, a.k, f.k_pad, f.m_cap, f.mcap,
                                static_cast<bool>(a.sorted), out, fused_topk::CollectorBuffers{}),
                     kOp, "fused_topk_merge_kernel");
}

}  // namespace cuda
}  // namespace dsattn
