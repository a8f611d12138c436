// Warp-specialized Hopper indexer kernel for paged decode (paged FP8 or MXFP4 cache, D = 128; MXFP4
// as in indexer_wgmma.cuh's top comment, template kFp4): the logits
// of paged_mqa_logits, and the scores + top-k candidates of paged_mqa_topk. Same formula, MMAs,
// head sum and schedule as indexer_wgmma.cuh (scores are bitwise identical: both score 64-state
// blocks with wg_score_block); what differs is how the copies and the MMAs meet.
//
// Why: indexer_wgmma.cuh runs two CTAs per SM, each with two 384-state stages, and all 256 threads
// of a CTA pass two barriers per tile. One stage is always being computed on, so an SM has about
// two tiles (100 KB) of keys in flight, and a tile cannot be refilled before the whole CTA is done
// with it: ~66% of the copy bandwidth at 128 x 32K. Here one CTA per SM has three consumer
// warpgroups, each with its own producer warp and ring of stages: a producer refills a stage as
// soon as its warpgroup lets go of it, and no barrier spans more than one warpgroup.
//
// Roles (480 threads):
//   warps 0-11: consumer warpgroups w = 0, 1, 2. Warpgroup w reads stages w, w + 3, w + 6, ...
//            (its ring) and scores each tile as 64-state MMA blocks in turn. It keeps its own copy
//            of the group's Q, weights and windows, loaded when its tile's group changes (named
//            barrier 1 + w, 128 threads); before its first stage it loads the Q of its first
//            group (at batch 1 that load would otherwise follow the first stage's keys).
//   warps 12-14: producers; warp 12 + w fills ring w. It walks its tiles with the schedule
//            cursor, reads the block-table entries of its next batch of 32 boxes (one per lane)
//            while it issues the current batch, so their latency hides behind the waits for free
//            stages, and ends the ring with a stage whose info has g = -1.
// Which tiles a warpgroup gets is the epilogue's choice (WsLogits: the CTA's partition dealt
//   round robin, tile j to warpgroup j % 3; WsTopkT: partition 3 c + w, contiguous, because the
//   top-k collector keeps per-piece candidates in state order).
// Per stage: mbarrier full (1 arrival: the producer, after writing the stage's WsInfo; plus the
// copies' bytes) and empty (128 arrivals: the warpgroup's threads, after their MMAs and reads).
// Boxes: as in indexer_wgmma.cuh, a tile is covered by boxes of g = gcd(S, 64) states (3-D
// tensor-map copy of the keys + bulk copy of the scales); a box on an invalid page is not copied
// and its states score -inf (WsInfo::mask).
// Shape, measured on an H200 at 128 x 32K (H = 64, 64-state pages, logits):
//   consumers x stage states     N = 1     N = 2
//   2 x 64 (producer-bound)       334 us
//   2 x 256                       195 us    334 us
//   3 x 256                       180 us    346 us   (N = 2: 48 KB of Q leave 3 stages)
//   3 x 128                       224 us    298 us
//   2 x 128                       226 us    350 us
// so 3 consumers, 256-state stages when a warpgroup's Q is one 64-column block (N = 1 at H = 64),
// else 128. One producer warp for all three (~200 instructions per stage, a serialized copy per
// box) held S = 32 pages back (128 x 32K 193 us; two: 170 us; three: the same within noise).
// N = 2 as two 64-column chunks instead of one NW = 128 MMA: 295 against 299 us (dropped); again on
// 2026-12-04, with the kernel as it is now: 32 x 32K 67.2-67.7 against 63.2-64.2 us, 128 x 32K
// 246.0-249.2 against 228.4-230.0 (the logits are bitwise the same either way).
#pragma once
#include "cuda/sm80/fused_topk_collect.cuh"
#include "cuda/sm90/indexer_wgmma.cuh"

namespace dsattn {
namespace cuda {

constexpr int kWsConsumers = 3;                      // consumer warpgroups = producer warps = rings
constexpr int kWsThreads = 160 * kWsConsumers;
constexpr int kWsProducerWarp = 4 * kWsConsumers;   // the first producer warp
// States per stage (a multiple of 64, the MMA's M): the producer's per-stage work (cursor step,
// block-table entries, copies, barrier) is ~200 instructions, so stages are long; 256 when a
// warpgroup's Q is one 64-column block (8 KiB; N = 1 at H = 64), else 128 (twice the Q per
// warpgroup: the ring must stay deep enough). The top-k epilogue's scratch (the staged scores and
// the collector) leaves room for only three 256-state stages at N = 1, so it takes 192; without
// the staged scores (WsTopkT<true, true>) six 256-state stages fit again.
__host__ __device__ constexpr int ws_stage(int q_rows, int hp, bool staged) {
  return q_rows * hp <= 64 ? (staged ? 192 : 256) : 128;
}
// paged_mqa_logits' stages on small calls (plan_wgmma_ws; one 64-column Q block, 32 or 64 heads).
constexpr int kWsShortStage = 64;
constexpr int kWsMaxStages = 18;
constexpr int kWsMinStages = 2 * kWsConsumers;

// What the producer put into a stage (written before its arrival on the stage's full barrier).
struct WsInfo {
  int32_t g;       // group (-1: the walk is over)
  int32_t t0;      // first state
  int32_t count;   // states (<= the stage size)
  uint32_t mask;   // bit b: box b was copied (its page id is valid); <= 32 boxes of >= 8 states
};

struct WsSmemLayout {
  size_t keys, q, q_bytes, scales, w, w_bytes, win, win_bytes, epi, epi_bytes, info, full, empty, total;
};

// Offsets from a 1024-byte aligned base. keys: [stages][stage][key_row] (FP8: 128-byte rows, each
// stage 1024-aligned for the 128-byte swizzle; MXFP4: the 64-byte rows as stored, see
// wg_key_row); q: one [q_rows * HP][128] buffer per consumer warpgroup (1024-aligned).
// epi_bytes: the epilogue's scratch per warpgroup.
// q_f16: Q as f16 (twice the bytes; the mma.sync consumers of indexer_ws_mma.cuh).
__host__ __device__ inline WsSmemLayout ws_smem_layout(int stages, int stage, int q_rows, int hp, size_t epi_bytes,
                                                       bool fp4 = false, bool q_f16 = false) {
  WsSmemLayout L{};
  size_t off = 0;
  L.keys = off; off += size_t(stages) * stage * wg_key_row(fp4);  // stage >= 128: 1024-aligned
  L.q_bytes = size_t(q_rows) * hp * kWgHeadDim * (q_f16 ? 2 : 1);  // a multiple of 2048
  L.q = off; off += L.q_bytes * kWsConsumers;
  L.scales = off; off += size_t(stages) * stage * 4;
  L.w_bytes = idx_align16(size_t(q_rows) * hp * 4);
  L.w = off; off += L.w_bytes * kWsConsumers;
  L.win_bytes = idx_align16(sizeof(detail::RowWindow) * kIdxMaxRows);
  L.win = off; off += L.win_bytes * kWsConsumers;
  L.epi_bytes = idx_align16(epi_bytes);
  L.epi = off; off += L.epi_bytes * kWsConsumers;
  L.info = off; off += sizeof(WsInfo) * size_t(stages);
  L.full = off; off += 8 * size_t(stages);
  L.empty = off; off += 8 * size_t(stages);
  L.total = off;
  return L;
}

// The producer's options (WgmmaShape::producer; all on by default but kWsTouchGroup,
// DSATTN_WS_PRODUCER=<bits> for A/B). Options 1, 2 and 4 together on an H200 (bench indexer,
// N = 1, H = 64, S = 64, one call, us, off -> on): 32 x 32K 57.2 -> 48.6, 128 x 8K 54.1 -> 47.0,
// 256 x 8K 99.6 -> 84.3, 128 x 32K 172.4 -> 151.6 (BENCHMARKS.md). globaltimer stamps at
// 32 x 32K had shown the first copy issued 8 us after the CTA started, 5.4 us of it the first
// batch's cursor walk (8 tiles, 24 next_any calls on one warp, cold), and the slowest ring ending
// 12 us after the median one.
//   kWsFastCursor: every lane computes its own tile of the batch (IdxCursor::fast_tile) while the
//       batch stays inside the current group; next() only at group changes. First copy at ~3.5 us.
//   kWsLateFetch: the next batch's walk and block-table loads after the batch's first copy.
//   kWsEvictFirst: key and scale copies with an L2 evict_first policy (read once; the block
//       tables, Q, schedule and code stay in L2): the slowest rings end sooner.
//   kWsFirstBatchOneGroup: the first batch stops where its group does, so the first copy does
//       not wait for the next group's range (7 -> 15, two rounds, us: 32 x 8K 21.7 -> 19.5-19.6,
//       32 x 32K S 64 49.8-50.7 -> 46.9-47.2, 256 x 8K 84.1-84.5 -> 82.2-83.1; 128 x 2K +0.1-0.5).
//   kWsBatchedGroupLoad (a consumer option, carried in the same bits): wg_load_group issues a
//       group's Q, weight and window loads before storing them (one memory latency per group change
//       instead of one per load).
constexpr int kWsEvictFirst = 1, kWsLateFetch = 2, kWsFastCursor = 4, kWsFirstBatchOneGroup = 8;
constexpr int kWsBatchedGroupLoad = 16;
//   kWsTouchGroup (for epilogues with kTouch): when the producer has issued the first tile of a
//       group other than its previous tile's, it pulls the group's Q, weight and length sectors
//       into the SM's L1 with cp.async.ca copies into a scratch of the epilogue (16 bytes per
//       lane, never read), so that the consumer's wg_load_group, ~2.3 us later, hits L1. Why
//       (H200, %globaltimer per warpgroup, 32 x 32K and 128 x 8K): at a group change the next
//       tile's keys were usually there already (median wait 0.2 us), and the warpgroup then idled
//       1.7-1.9 us (median) in wg_load_group, whose loads queue behind the SM's key copies; the
//       CTAs whose partition straddles two requests ended ~2.5 us after the others. Three rounds,
//       us, off -> on: 128 x 8K 45.7-46.4 -> 44.8-45.5, 64 x 16K 46.0-46.2 -> 45.0-45.7, 32 x 32K
//       45.6-46.3 -> 45.6-45.9; shapes without group changes unchanged. prefetch.global.L1 at the
//       same point (or earlier, when the walk enters the group) measured no gain. Taken where a
//       group's Q is at most 8 KiB (see ws_produce).
//       Sanitizers: a lane's copies (up to 8 per touch, and each touch's) all land in its one
//       16-byte scratch with no wait between, which compute-sanitizer racecheck reports as WAW
//       hazards (invalid memcpy_async synchronization; 43,448 on GpuFuzz.HostilePagedSanitizer).
//       The scratch is never read, so the GPU check's racecheck pass runs with the touch off
//       (DSATTN_WS_PRODUCER=-64). Kept that way because the alternatives measured slower or do
//       not fit: a destination per copy (~1 KiB per ring) does not fit beside 6 stages of 256
//       states at 64 heads (1,216 bytes spare), and 4-byte ld.global.ca loads into registers
//       (22345d5, reverted) cost 256 x 1K 21.1 -> 21.8 us, 4 x 64K 15.6 -> 15.8, and the mma.sync
//       consumers' kernel 2-3.6 % (BENCHMARKS.md, 2026-12-05).
//       Off by default since 2026-12-06 (not in ws_producer_flags' default bits): its gain was
//       measured with the kernel's code in the instruction caches (calls back to back), and a
//       serving engine runs other kernels between two calls. The touch runs only at a group
//       change, so its code is then fetched cold, mid-kernel, by the CTAs whose partition enters
//       another request, and they end last. H100, 32 x 32K, paged_mqa_logits after a top-k (or
//       after any kernel of 256 KB of code on one SM), us, touch on -> off: 70.5-70.9 -> 61.6-62.0
//       (61.1-62.0 without the kernel before it), L2 flushed 77.0-78.2 -> 69.4-69.5 (66.9-67.7);
//       paged_mqa_topk (bench indexer --fused, whose top-k runs before each next scoring kernel)
//       32 x 32K 91.1-92.6 -> 82.8-83.0, 128 x 32K 240.7-241.9 -> 236.6-237.6, the other shapes
//       level. Touching the first tile's group as well, so that the code has run before a group
//       change, halved that cost (65.1-65.5; fused 32 x 32K 86.2) but added ~2 us at 1 x 64K and
//       ~0.8 us at 8 x 8K (not kept).
constexpr int kWsTouchGroup = 64;
constexpr size_t kWsTouchScratch = 32 * 16;  // per ring: 16 bytes per producer lane, never read
//   kWsEarlyTrigger (not in the default bits; a launch adds it: launch_indexer_ws' trigger_next):
//       the kernel calls pdl_trigger() first thing, so the next PDL launch is scheduled at once and
//       its CTAs are placed as the scoring CTAs free their SMs (the fused logits route's top-k of
//       at most 8 CTAs with DSATTN_FUSED_EARLY_TRIGGER=1; off by default: fused_route.h has the
//       measurements).
constexpr int kWsEarlyTrigger = 128;
//   kWsOneGroupWalk: one request without schedule metadata (paged_mqa_logits at batch 1; the host
//       sets it up, ws_one_group_walk in indexer_ws_launch.cu, where the stage is kWsShortStage):
//       the request is ONE partition whose tiles are dealt round robin over the CTAs' rings
//       (p.partitions = 1, p.split = the grid), so a ring's tile positions do not depend on the
//       request's length (idx_round_robin_tile in indexer_cursor.h). The producer computes its
//       first batch's pages before griddepcontrol.wait, reads the lengths and its block-table
//       entries together after it (one memory latency instead of a chain of them), and walks the
//       rest in closed form, without the cursor. Why: at 1 x 64K its first copy left ~4 us after
//       the wait, ~2 us of it one warp's serial instructions (the cursor's partition and walk,
//       19 run-time divisions; BENCHMARKS.md, 2026-12-04). 64-state tiles only: with longer ones
//       a short request would leave most CTAs idle, where contiguous partitions split it by units.
//       Its own kernel instantiations (indexer_ws_kernel's kRr): in the same kernels, the option
//       switched off at run time cost 4 x 64K ~0.8 us back to back and 1 x 64K ~0.9 us (code).
//       H200, fused paged_mqa_topk (bench indexer --fused --b2b, k = 2048, FP8, H = 64, S = 64),
//       us per call / back to back, off -> on, same binary, two rounds: 1 x 64K 23.6-23.8 /
//       19.3 -> 23.1 / 18.3 (its logits 11.6-11.8 / 8.0 -> 10.5-10.7 / 7.1), 1 x 32K 20.0-20.2 /
//       15.8 -> 19.8-20.1 / 14.9; 1 x 8K, 1 x 128K (the resident route) and 4 x 64K level.
//       prefetch.tensormap of the key map before the wait as well measured no gain (dropped).
constexpr int kWsOneGroupWalk = 256;
//   kWsOwnRange: IndexerParams::inline_schedule (paged_mqa_logits without a caller schedule, up to
//       kWsThreads groups): each thread keeps the units of the group it summed, and the thread
//       whose group holds the CTA's boundary computes its pair from them
//       (detail::indexer_group_pairs) instead of reading the lengths again. Why: %globaltimer
//       stamps (H100, 4 x 32K and 32 x 32K, L2 flushed) put the inline schedule at ~2.5 us from
//       the wait to its end, against ~0.06 us for a caller schedule's pairs: one memory latency
//       for the lengths (~1.0 us), then ~1.4 us more in which its boundary thread read them again.
constexpr int kWsOwnRange = 512;

// kWsTouchGroup: group g's Q (16-byte aligned rows; D = 128: 4 sectors of 32 bytes per head row),
// weight and length sectors into L1. dummy: this lane's 16-byte scratch (kWsTouchScratch).
__device__ __forceinline__ void ws_touch_group(const IndexerParams& p, int32_t g, uint32_t dummy, int lane) {
  const int rows = static_cast<int>(detail::indexer_group_rows(p.work, g));
  const int H = p.heads;
  if (p.q_aligned16) {
    for (int idx = lane; idx < rows * H * 4; idx += 32) {
      const int row = idx >> 2, sec = idx & 3;
      const int j = row / H, h = row % H;
      cp_async16_ca(dummy, p.q + int64_t(g) * p.q_sg + j * p.q_sr + h * p.q_sh + sec * 32);
    }
  }
  const int wstep = p.w_sh == 1 ? 8 : 1;  // floats per 32-byte sector
  const int wper = (H + wstep - 1) / wstep;
  for (int idx = lane; idx < rows * wper; idx += 32) {
    const int j = idx / wper, h = (idx % wper) * wstep;
    cp_async4(dummy, p.w + int64_t(g) * p.w_sg + j * p.w_sr + h * p.w_sh);
  }
  // The group's first length word (paged: [B] or [B, N]; varlen: row g).
  if (lane == 31 && p.work.mode == detail::IndexerMode::kPaged) {
    cp_async4(dummy, p.work.lens + int64_t(g) * p.work.lens_s0);
  }
  cp_async_commit();
}

// Ring helpers of the mma.sync consumers (indexer_ws_mma.cuh). ws_produce and ws_consume keep
// the same steps written out: with these helpers ptxas scheduled the wgmma kernel differently
// (its cubin changed), and that kernel's timings are the measured ones.
// The ring position after stage st: ring w takes stages w, w + kWsConsumers, ...; ph is the phase
// (parity) of the current pass over the ring.
__device__ __forceinline__ void ws_ring_advance(int& st, uint32_t& ph, int stages) {
  st += kWsConsumers;
  if (st >= stages) {
    st -= stages;
    ph ^= 1u;
  }
}
// A consumer's wait for stage st to be full, and the producer's WsInfo of it.
__device__ __forceinline__ WsInfo ws_wait_full(const WsInfo* info, uint32_t full0, int st, uint32_t ph) {
  mbar_wait(full0 + 8 * st, ph);
  const uint4 v = lds128(smem_u32(info + st));
  return WsInfo{static_cast<int32_t>(v.x), static_cast<int32_t>(v.y), static_cast<int32_t>(v.z), v.w};
}

// The group of the first tile of consumer warpgroup wg's partition (from the schedule, or the
// pairs the kernel computed itself: own; group 0 without either), or -1 when there is none.
template <class Epi>
__device__ __forceinline__ int32_t ws_first_group(const IndexerParams& p, int wg, IdxBounds own = IdxBounds{}) {
  const int32_t g0 = own.set             ? own.g
                     : p.meta != nullptr ? p.meta[detail::kIndexerMetaHeader + 2 * Epi::partition(p, wg)]
                                         : 0;
  return g0 >= 0 && g0 < p.work.groups ? g0 : -1;
}

// IndexerParams::inline_schedule: the boundary pairs of this CTA's partition q = blockIdx.x (the
// launcher sets split 1, so the grid is the P partitions): pair[0..1] its own, pair[2..3] the next
// one's, the values indexer_schedule_kernel writes at meta pairs q and q + 1. Every thread sums a
// run of consecutive groups (indexer_run_units: their lengths, one round trip, all CTAs alike), a
// block scan gives each run its first virtual unit, and the thread whose run holds a boundary walks
// it again (indexer_run_pairs). This replaces the schedule kernel in front of a call (~4.5 us on its
// own under ncu at 128 requests, and the scoring kernel waiting for it). Block-wide (every thread
// of the CTA; blockDim a multiple of 32); ends synced. s_scan: >= 32 int64 of shared memory.
// Inlined, and its results kept by value (IdxBounds): as a call taking p by reference, and with a
// pointer to the pairs in the epilogue, it put the parameter block in local memory (ptxas: 570-810
// bytes of stack and 240-1300 bytes of spills on every WsLogits kernel), and the scoring kernel ran
// 15-40 % slower with or without a caller schedule (H100, 2026-12-06).
// keep (kWsOwnRange): with at most one group per thread, each thread keeps its group's units
// from the scan's read for the pairs (detail::indexer_group_pairs) instead of reading them again.
static __device__ __forceinline__ void ws_inline_schedule(const IndexerParams& p, int32_t* pair, int64_t* s_scan,
                                                          bool keep) {
  const int nt = static_cast<int>(blockDim.x), t = static_cast<int>(threadIdx.x);
  const int lane = t & 31, warp = t >> 5, nw = nt >> 5;
  const int64_t G = p.work.groups, P = p.partitions > 0 ? p.partitions : 1, cost = p.inline_cost;
  const int64_t per = (G + nt - 1) / nt, g_lo = per * t < G ? per * t : G, g_hi = g_lo + per < G ? g_lo + per : G;
  const bool one = keep && per == 1;  // uniform
  int64_t u1 = 0, v = 0;  // one: the group's units (the lengths read once)
  if (one) {
    if (g_lo < g_hi) {
      u1 = detail::indexer_group_units(p.work, g_lo);
      v = u1 + detail::indexer_group_lead(g_lo, u1, cost);
    }
  } else {
    v = detail::indexer_run_units(p.work, g_lo, g_hi, cost);
  }
  const int64_t x = warp_inclusive_scan(v);  // block exclusive scan of v
  if (lane == 31) s_scan[warp] = x;
  if (t == 0) {  // the default of every pair: (G, 0)
    pair[0] = pair[2] = static_cast<int32_t>(G);
    pair[1] = pair[3] = 0;
  }
  __syncthreads();
  if (warp == 0) {
    const int64_t y = warp_inclusive_scan(lane < nw ? s_scan[lane] : int64_t(0));
    if (lane < nw) s_scan[lane] = y;
  }
  __syncthreads();
  const int64_t total = s_scan[nw - 1];
  const int64_t pre = (warp > 0 ? s_scan[warp - 1] : 0) + x - v;
  if (one) {  // u1 = 0 for a thread without a group: no pair
    detail::indexer_group_pairs(g_lo, u1, cost, pre, total, P, blockIdx.x, pair);
  } else {
    detail::indexer_run_pairs(p.work, g_lo, g_hi, cost, pre, v, total, P, blockIdx.x, pair);
  }
  __syncthreads();
}

// kWsOneGroupWalk: a lane's box of its tile (tile i of its ring) from the parameters alone: the
// tile's first state (paged windows start at 0, so the group's glo is 0), the box's page index in
// request 0's block-table row (-1 where the box starts at or beyond the state limit or the row)
// and its first state in that page.
struct WsRrBox {
  int64_t t0;
  int32_t pi;
  int32_t off;
};
__device__ __forceinline__ WsRrBox ws_rr_box(const IndexerParams& p, int32_t first, int32_t step, int64_t i,
                                             int tile_states, int box_off) {
  WsRrBox x{idx_round_robin_t0(0, first, step, i, tile_states), -1, 0};
  const int64_t st = x.t0 + box_off;
  const int64_t lim = p.state_limit < INT32_MAX ? p.state_limit : INT32_MAX;
  if (st < lim) {  // so st < 2^31
    const uint32_t pi = p.spp_div.div(static_cast<uint32_t>(st));
    x.off = static_cast<int32_t>(st - int64_t(pi) * p.states_per_page);
    if (int64_t(pi) < (p.block_table == nullptr ? p.num_pages : p.max_pages)) x.pi = static_cast<int32_t>(pi);
  }
  return x;
}
// Its page id (-1: none): request 0's block-table entry, read whether or not the box turns out to
// be inside the request (the row has max_pages entries), or the index itself without a table.
__device__ __forceinline__ int32_t ws_rr_raw(const IndexerParams& p, const WsRrBox& x) {
  if (x.pi < 0) return -1;
  return p.block_table == nullptr ? x.pi : p.block_table[int64_t(x.pi) * p.bt_s1];
}
// A ring's round-robin walk (first tile position, positions between its tiles), this lane's place
// in a batch (its tile k, its box's first state in that tile) and its box of the first batch,
// computed before griddepcontrol.wait.
struct WsRrStart {
  int32_t first, step;
  int k, box_off;
  WsRrBox box;
};
__device__ __forceinline__ WsRrStart ws_rr_start(const IndexerParams& p, const WgmmaShape& s, int stage, int w,
                                                 int lane) {
  WsRrStart r;
  // WsLogits::cursor with one partition and split = the grid: CTA c's ring w takes positions
  // c + w split, c + w split + 3 split, ...
  r.first = static_cast<int32_t>(blockIdx.x) + w * p.split;
  r.step = kWsConsumers * p.split;
  const int nb = stage >> s.log2_box;  // boxes per tile: lane l holds box l % nb of tile l / nb
  r.k = lane / nb;
  r.box_off = (lane % nb) << s.log2_box;
  r.box = ws_rr_box(p, r.first, r.step, r.k, stage, r.box_off);
  return r;
}

// Producer warp of ring w: the tiles of cursor `lc` (kStage states each), in order, into stages
// w, w + 3, ..., then the end marker. rr (kWsOneGroupWalk; the kernel checked that the call is
// set up for it): the round-robin walk of `start` instead, lc unused; the caller computed `start`
// before its pdl_wait().
template <int kStage, bool kTouch, bool kFp4, bool kRr = false>
__device__ __forceinline__ void ws_produce(const WgmmaMaps& maps, const IndexerParams& p, const WgmmaShape& s,
                                           int stages, uint8_t* smem, const WsSmemLayout& L, IdxCursor& lc, int w,
                                           int lane, bool rr_on = false, const WsRrStart& start = WsRrStart{}) {
  const bool rr = kRr && rr_on;  // compiled out of the kernels without kRr
  const int g = 1 << s.log2_box;
  const int nb = kStage >> s.log2_box;  // boxes per tile: 2 .. 32
  const int per = 32 / nb;                // tiles per batch: lane l holds box l % nb of tile l / nb
  const uint32_t nb_mask = nb == 32 ? 0xffffffffu : (1u << nb) - 1u;
  WsInfo* info = reinterpret_cast<WsInfo*>(smem + L.info);
  const uint32_t full0 = smem_u32(smem + L.full), empty0 = smem_u32(smem + L.empty);
  int32_t pf_g = -1;
  const bool fast = (s.producer & kWsFastCursor) != 0, late = (s.producer & kWsLateFetch) != 0;
  // Only where a group's Q is one 64-column block (8 KiB at most; 256-state stages): with twice
  // that (next_n = 2 at H = 64) the touches measured ~1 % slower (32 x 32K 65.7-65.9 -> 66.4-66.6 us).
  const bool touch = kTouch && (s.producer & kWsTouchGroup) != 0 && s.q_rows * s.hp <= 64;
  const uint32_t dummy = smem_u32(smem + L.epi + w * L.epi_bytes);  // the epilogue's kTouch scratch
  int32_t last_tg = -1;
  const bool evict_first = (s.producer & kWsEvictFirst) != 0;
  const uint64_t pol = evict_first ? l2_policy_evict_first() : 0;
  // A batch: up to `per` blocks; this lane's block (if any) and its box's block-table entry.
  struct Batch {
    int n;
    IdxTile t;
    bool mine;
    int32_t raw, off;
  };
  bool first_batch = (s.producer & kWsFirstBatchOneGroup) != 0;
  // rr: the batch of this ring's tiles rr_i, rr_i + 1, ... (this lane's box x, its page id raw),
  // tiles existing up to rr_end (idx_round_robin_tile, the same formula the host test checks).
  int64_t rr_end = 0, rr_i = 0;
  auto rr_fill = [&](Batch& b, const WsRrBox& x, int32_t raw) {
    IdxTile t{-1, 0, 0};
    const bool valid =
        start.k < per && idx_round_robin_tile(0, rr_end, start.first, start.step, rr_i + start.k, kStage, &t);
    b.n = __popc(__ballot_sync(0xffffffffu, valid && start.box_off == 0));  // a prefix of the batch's tiles
    b.mine = valid;
    b.t = t;
    b.off = x.off;
    b.raw = valid && start.box_off < t.count ? raw : -1;
    rr_i += per;
  };
  auto fetch = [&](Batch& b) {
    if (rr) {
      const WsRrBox x = ws_rr_box(p, start.first, start.step, rr_i + start.k, kStage, start.box_off);
      rr_fill(b, x, ws_rr_raw(p, x));
      return;
    }
    b.n = 0;
    b.mine = false;
    b.raw = -1;
    b.off = 0;
    b.t = IdxTile{-1, 0, 0};
    while (b.n < per) {
      if (fast) {
        int nf = lc.fast_count();
        if (nf > 0) {
          if (nf > per - b.n) nf = per - b.n;
          const int k = lane / nb - b.n;
          if (k >= 0 && k < nf) {
            b.t = lc.fast_tile(k);
            b.mine = true;
          }
          lc.fast_skip(nf);
          b.n += nf;
          continue;
        }
      }
      // The first batch ends where its group does (the next group's range loads would hold up
      // the first copy).
      if (first_batch && b.n > 0 && lc.uend >= 0 && lc.fast_count() == 0) break;
      IdxTile t;
      if (!lc.next(p, &t)) break;
      if (t.g != pf_g) {  // entering a group: pull its block-table span into L1
        pf_g = t.g;
        idx_prefetch_group_entries(p, lc, t, lane);
      }
      if (b.n == lane / nb) {
        b.t = t;
        b.mine = true;
      }
      ++b.n;
    }
    const int box = lane % nb;
    if (b.mine && box * g < b.t.count) {
      // 32-bit: states are < 2^31 (see wg_prefetch).
      const int32_t st = b.t.t0 + box * g;
      const int32_t pi = st / p.states_per_page;
      b.off = st - pi * p.states_per_page;
      if (p.block_table == nullptr) {
        b.raw = pi < p.num_pages ? pi : -1;
      } else {
        const int64_t req = detail::indexer_group_request(p.work, b.t.g);
        if (req >= 0 && pi < p.max_pages) b.raw = p.block_table[req * p.bt_s0 + pi * p.bt_s1];
      }
    }
    first_batch = false;
  };
  Batch cur, nxt;
  bool fetched = false;  // cur holds the first batch
  if (rr) {
    // The block-table entry's load is issued before the lengths', so both latencies overlap.
    const int32_t raw = ws_rr_raw(p, start.box);
    int32_t glo, ghi;
    detail::indexer_group_range(p.work, 0, &glo, &ghi);
    rr_end = idx_round_robin_end(ghi, p.state_limit);
    rr_fill(cur, start.box, raw);
    fetched = true;
  }
  int st = w;
  uint32_t ph = 0;
  auto advance = [&] {
    st += kWsConsumers;
    if (st >= stages) {
      st -= stages;
      ph ^= 1u;
    }
  };
  // One call site of fetch() (the first batch, then each next one): inlined at several sites,
  // its group-change code (the cursor's next group, its block-table span) had a copy that only
  // CTAs whose partition enters another request ever ran, mid-kernel and with its instructions
  // out of every cache. Those CTAs then ended ~10 us after the others whenever other code had run
  // on the GPU in between (a top-k, any kernel of 256 KB of code on one SM): H100, 32 x 32K,
  // BENCHMARKS.md 2026-12-06. Likewise load_group in ws_consume.
  int k = 0;             // the next tile of cur to issue
  bool nxt_ready = false;  // nxt holds the batch after cur
  for (;;) {
    if (fetched && cur.n == 0) break;  // the batch before was the last (or the first is empty)
    // The next batch: before cur's first copy, or (kWsLateFetch) once it is on its way, so that
    // its block-table loads fly while this batch is issued.
    if (!fetched || (!nxt_ready && k == (late ? 1 : 0))) {
      fetch(nxt);
      if (!fetched) {
        cur = nxt;
        fetched = true;
        continue;
      }
      nxt_ready = true;
    }
    if (k == cur.n) {  // cur.n > 0: nxt was fetched at k = 0 or 1
      cur = nxt;
      nxt_ready = false;
      k = 0;
      continue;
    }
    {
      const uint32_t full = full0 + 8 * st, empty = empty0 + 8 * st;
      mbar_wait(empty, ph ^ 1u);  // a fresh barrier counts as released (first pass over the ring)
      const bool mine = cur.mine && lane / nb == k;
      const int box = lane % nb;
      bool ok = false;
      if (mine && box * g < cur.t.count) {
        const int64_t page = (cur.raw >= 0 && cur.raw < p.num_pages) ? cur.raw : -1;
        ok = page >= 0;
        if (ok) {
          // The stage's scales were last read through ld.shared (before the consumers' release
          // this lane acquired): every lane that issues a copy into it fences on its own, since
          // a proxy fence orders only the executing thread's accesses.
          fence_proxy_async_smem();
          constexpr int kRow = wg_key_row(kFp4);
          const uint32_t keys = smem_u32(smem + L.keys) + static_cast<uint32_t>((st * kStage + box * g) * kRow);
          const uint32_t scales = smem_u32(smem + L.scales) + static_cast<uint32_t>((st * kStage + box * g) * 4);
          mbar_expect_tx(full, static_cast<uint32_t>(g * (kRow + 4)));
          const uint8_t* src = p.sbase + page * p.scale_page_stride + int64_t(cur.off) * 4;
          if (evict_first) {
            tma_load_3d_hint(keys, &maps.keys, 0, static_cast<int>(cur.off), static_cast<int>(page), full, pol);
            bulk_copy_g2s_hint(scales, src, static_cast<uint32_t>(g * 4), full, pol);
          } else {
            tma_load_3d(keys, &maps.keys, 0, static_cast<int>(cur.off), static_cast<int>(page), full);
            bulk_copy_g2s(scales, src, static_cast<uint32_t>(g * 4), full);
          }
        }
      }
      const uint32_t m = (__ballot_sync(0xffffffffu, ok) >> (k * nb)) & nb_mask;
      const int src = k * nb;
      const int32_t tg = __shfl_sync(0xffffffffu, cur.t.g, src);
      const int32_t tt0 = __shfl_sync(0xffffffffu, cur.t.t0, src);
      const int32_t tc = __shfl_sync(0xffffffffu, cur.t.count, src);
      if (lane == 0) {
        info[st] = WsInfo{tg, tt0, tc, m};
        mbar_arrive(full);  // after every lane's expect_tx (the ballot above ordered them)
      }
      if (touch && last_tg >= 0 && tg != last_tg) ws_touch_group(p, tg, dummy + 16 * lane, lane);
      last_tg = tg;
      advance();
      ++k;
    }
  }
  if (touch) cp_async_wait<0>();  // the touches' copies are complete before the CTA can exit
  mbar_wait(empty0 + 8 * st, ph ^ 1u);
  if (lane == 0) {
    info[st] = WsInfo{-1, 0, 0, 0u};
    mbar_arrive(full0 + 8 * st);
  }
}

// Epilogues of the warp-specialized kernel. Members other than finish() are called by the 128
// threads of one consumer warpgroup w (which owns the object's scratch); store() by the lanes that
// hold a score (wg_score_block's sink).
//   size_t smem_bytes(const IndexerParams&, int stage)          scratch per warpgroup (static, or
//        a member where it depends on the call: the kernel calls it on its epilogue object)
//   static int partition(const IndexerParams&, int w)            partition of w's first tile
//   static void cursor(const IndexerParams&, int w, IdxCursor*)  the tiles of ring w
//   void begin(const IndexerParams&, uint8_t* scratch, int w, int stage, int rows_per_group)
//   void group_begin(int32_t g, int rows) / group_end(int64_t g, int rows)  (group_end only after
//        >= 1 tile)
//   void tile_begin(rows, t0, count)          before a tile's scores
//   void store(p, row, r, t, v, row0, win)    score of group row `row`, tile state r (state t)
//   void tile_end(p, g, rows, row0, t0, count, win)  after the tile's stage was released
//   void finish(p, smem, L)                   every thread of the CTA, at the end (smem: the
//        kernel's aligned shared memory, laid out as L)

// paged_mqa_logits: scores straight to the logits; the CTA's partition (split over p.split CTAs)
// dealt round robin to the three rings.
struct WsLogits {
  static constexpr int kHpMin = 16;  // kernels for every padded head count (16, 32, 64)
  static constexpr bool kStaged = false;  // no staged scores: 256-state stages (ws_stage)
  static constexpr bool kNw64Only = false;
  static constexpr bool kTouch = true;  // its scratch: kWsTouchScratch
  __host__ __device__ static size_t smem_bytes(const IndexerParams&, int) { return kWsTouchScratch; }
  __device__ static int partition(const IndexerParams& p, int) { return blockIdx.x / (p.split > 1 ? p.split : 1); }
  __device__ static void cursor(const IndexerParams& p, int w, IdxCursor* lc, IdxBounds own = IdxBounds{}) {
    const int split = p.split > 1 ? p.split : 1;
    IndexerParams pq = p;
    pq.split = split * kWsConsumers;  // CTA c takes tiles c, c + split, ...; ring w every third of those
    lc->init(pq, blockIdx.x / split, blockIdx.x % split + w * split, own);
  }
  __device__ void begin(const IndexerParams&, uint8_t*, int, int, int) {}
  __device__ void group_begin(int32_t, int) {}
  __device__ void tile_begin(int, int32_t, int) {}
  __device__ void group_end(int64_t, int) {}
  // Paged decode (the only mode this kernel runs): output column = state (col_off is 0).
  __device__ __forceinline__ void store(const IndexerParams& p, int row, int, int32_t t, float v, int64_t row0,
                                        const detail::RowWindow*) {
    if (t < p.out_width) LogitsEpilogue::store(p, row0 + row, t, v);
  }
  __device__ void tile_end(const IndexerParams&, int64_t, int, int64_t, int32_t, int, const detail::RowWindow*) {}
  __device__ void finish(const IndexerParams& p, uint8_t*, const WsSmemLayout&) { LogitsEpilogue{}.finish(p); }
};

// The switch-out from dense positions to entries (the ordered and the positional appends take
// over from it): the n0 positions written so far in each row of the piece at `base` become its
// first n0 entries, their keys already in place and their indices (t_first + q) written now.
__device__ __forceinline__ void ws_switch_out(const fused_topk::CollectorBuffers& b, fused_topk::CollectorShared& sh,
                                              int64_t base, int rows, int32_t t_first, int n0,
                                              const fused_topk::WarpgroupGroup& grp) {
  for (int j = 0; j < rows; ++j) {
    int32_t* idx = b.idx + base + int64_t(j) * b.ccap;
    for (int q = grp.rank(); q < n0; q += grp.size()) idx[q] = t_first + q;
  }
  if (grp.rank() < rows) sh.row[grp.rank()].cnt = n0;
}

// The pure kernel's positional appends (WsTopkT's kPure), out of line, on a path that valid inputs
// never take. Even so the kernels grew (registers 106 -> 117 at 64 heads; 124 -> 128 with 8 bytes
// spilled at 32): H200 128 x 32K, three runs each, 197.4 -> 197.3 us at 64 heads, 194.8 -> 197.7
// at 32 heads (the price of no trap on lengths beyond the block table).
// Begin: after the piece's dense positions (from t_first on; t_first < 0: none, an earlier tile
// already switched), whose indices are written now, room for the tile twice over in every row (its
// entries moved down at the end, and the window [ccap - count, ccap) that the dense store writes
// now); returns the store's dense_t0.
__device__ __noinline__ inline int32_t ws_positional_begin(const fused_topk::CollectorBuffers b,
                                                          fused_topk::CollectorShared& sh, int64_t slot, int rows,
                                                          int32_t t0, int count, int32_t t_first,
                                                          const fused_topk::WarpgroupGroup grp) {
  if (t_first >= 0) ws_switch_out(b, sh, b.offset(slot, 0), rows, t_first, t0 - t_first, grp);
  grp.sync();  // the indices and counts above, or the previous tile's moves and counts
  fused_topk::collector_reserve(b, sh, slot, rows, 2 * count, grp);
  return t0 - (b.ccap - count);  // state t at position ccap - count + (t - t0)
}
// End: the tile's window moves down to each row's count, with its indices.
__device__ __noinline__ inline void ws_positional_end(const fused_topk::CollectorBuffers b,
                                                      fused_topk::CollectorShared& sh, int64_t base, int rows,
                                                      int32_t t0, int count, const fused_topk::WarpgroupGroup grp) {
  grp.sync();  // the tile's stores; the compaction's counts
  for (int j = 0; j < rows; ++j) {
    const int64_t row_base = base + int64_t(j) * b.ccap;
    const int64_t to = row_base + sh.row[j].cnt, from = row_base + (b.ccap - count);
    for (int q = grp.rank(); q < count; q += grp.size()) {
      b.key[to + q] = b.key[from + q];
      b.idx[to + q] = t0 + q;
    }
  }
  grp.sync();  // every thread read the counts
  if (grp.rank() < rows) sh.row[grp.rank()].cnt += count;
  // ws_positional_begin syncs before the counts and entries are read again; so does collector_end
}

// paged_mqa_topk: warpgroup w of CTA c is partition 3 c + w (a contiguous piece per group, as the
// collector needs: slot = partition + group) and runs a top-k collector on its own tiles, scores
// staged in its scratch ([rows_per_group][stage] f32, then its CollectorShared).
// kPure (with kDense): every piece of the call fits its buffer (the plan's bound: no piece is
// longer than its partition's share of the schedule units, given context lengths within the block
// table), so no staged scores: no staging scratch, and the ring gets 256-state stages (6 x 192 ->
// 6 x 256; paged_mqa_logits measured 185 -> 178 us for the same change at 128 x 32K). Should a
// piece outgrow its buffer anyway (context lengths beyond the block table move the partition
// boundaries), it goes on with positional appends: the collector's compaction makes room for two
// tiles, the dense store (unchanged, so the hot path pays nothing) writes the tile's keys to the
// buffer's last `count` positions, and tile_end moves them down to the row's count with their
// indices (DSATTN_FUSED_PURE=force takes this kernel for any call: tests). A version that
// appended at the row's count inside the store measured 197 -> 204 us at 128 x 32K, never taken.
template <bool kDense, bool kPure = false>
struct WsTopkT {
  static constexpr bool kPdl = false;  // pdl.cuh's EpiPdl: the streaming route measured slower with it
  static_assert(kDense || !kPure, "pure mode is a dense mode");
  // Dense at 64 padded heads, pure also at 32 (ws_topk_dense): kernels for padded heads >= kHpMin.
  static constexpr int kHpMin = kPure ? 32 : kDense ? 64 : 16;
  static constexpr bool kStaged = !kPure;
  static constexpr bool kNw64Only = kPure;  // pure only where a warpgroup's Q is one 64-column block
  static constexpr bool kTouch = false;
  fused_topk::CollectorBuffers buf;
  fused_topk::CollectorShared* sh = nullptr;
  float* scores = nullptr;
  int ld = 0;
  int64_t part = 0;
  fused_topk::WarpgroupGroup grp{1};
  // Dense mode (kDense: the launcher's choice where the merge needs no row histogram, i.e. no
  // b.hist; few rows keep kDense = false, whose kernel is the ordered path alone: with both paths
  // compiled in, H200 32 x 128K H = 32 (row histogram, ordered appends) scored 216 -> 242 us).
  // While every state of the piece fits its buffer, the key of state t of row j goes straight from
  // the head sums to position t - dense_t0 of (slot, j) (key 0 = outside the row's window, which
  // every reader skips; the index is implied, header word 1 = dense_t0 + 1), without staging,
  // ballots or barriers; the ordered append takes over from the first tile that would not fit
  // (the piece's count becomes its positions so far, their indices written then). H200,
  // 128 x 32K, k = 2048: the ordered appends cost ~65 us of a ~240 us call (the consumer
  // warpgroups are the bottleneck there), writing the same scores from the head sums ~11 us.
  bool dense = false;      // this tile
  bool dense_ok = false;   // this piece so far
  int64_t dense_base = 0;  // buf.offset(slot, 0)
  int32_t dense_t0 = 0, dense_end = 0;
  int64_t slot = 0;        // part + the current group (kPure's positional appends)

  __host__ __device__ static size_t smem_bytes(const IndexerParams& p, int stage) {
    const size_t staged = kPure ? 0 : idx_align16(size_t(p.work.rows_per_group) * stage * 4);
    return staged + sizeof(fused_topk::CollectorShared);
  }
  __device__ static int partition(const IndexerParams&, int w) { return kWsConsumers * blockIdx.x + w; }
  __device__ static void cursor(const IndexerParams& p, int w, IdxCursor* lc) { lc->init(p, partition(p, w), 0); }
  __device__ void begin(const IndexerParams&, uint8_t* scratch, int w, int stage, int rows_per_group) {
    ld = stage;
    scores = kPure ? nullptr : reinterpret_cast<float*>(scratch);
    sh = reinterpret_cast<fused_topk::CollectorShared*>(
        scratch + (kPure ? 0 : idx_align16(size_t(rows_per_group) * stage * 4)));
    part = kWsConsumers * int64_t(blockIdx.x) + w;
    grp.id = 1 + w;
  }
  __device__ void group_begin(int32_t g, int rows) {
    dense_ok = kDense;
    slot = part + g;
    dense_base = buf.offset(slot, 0);
    dense_t0 = -1;
    fused_topk::collector_begin(*sh, rows, grp);
  }
  __device__ void group_end(int64_t g, int rows) {
    // The piece's positions (collector_end syncs before it reads them); entry p is state dense_t0 + p.
    if (kDense && dense_ok && grp.rank() < rows) sh->row[grp.rank()].cnt = dense_end - dense_t0;
    fused_topk::collector_end(buf, *sh, part + g, rows, grp, kDense && dense_ok ? dense_t0 + 1 : 0);
  }
  // Before the tile's scores: dense or staged (uniform over the warpgroup).
  __device__ void tile_begin(int rows, int32_t t0, int count) {
    dense = false;
    if (!kDense) return;
    if (dense_ok) {
      if (dense_t0 < 0) dense_t0 = t0;  // a piece's tiles are consecutive runs of states
      if (t0 + count - dense_t0 <= buf.ccap) {
        dense = true;
        dense_end = t0 + count;
        return;
      }
    }
    if constexpr (kPure) {  // positional appends from here on (see kPure)
      dense_t0 = ws_positional_begin(buf, *sh, slot, rows, t0, count, dense_ok ? dense_t0 : -1, grp);
      dense_ok = false;
      dense = true;
      return;
    }
    // From here on ordered appends, after the positions written so far, whose indices are written
    // now (compactions move entries). Both are read after tile_end's first barrier.
    if (!dense_ok) return;
    dense_ok = false;
    ws_switch_out(buf, *sh, dense_base, rows, dense_t0, t0 - dense_t0, grp);
  }
  __device__ __forceinline__ void store(const IndexerParams&, int row, int r, int32_t t, float v, int64_t,
                                        const detail::RowWindow* win) {
    if (kPure || (kDense && dense)) {
      const int64_t at = dense_base + int64_t(row) * buf.ccap + (t - dense_t0);
      const bool in = t >= win[row].lo && t < win[row].hi;
      buf.key[at] = in ? topk_detail::topk_key_branchless(v) : fused_topk::kAbsentKey;
    } else {
      scores[row * ld + r] = v;
    }
  }
  __device__ void tile_end(const IndexerParams&, int64_t g, int rows, int64_t row0, int32_t t0, int count,
                           const detail::RowWindow* win) {
    if constexpr (kPure) {
      if (!dense_ok) ws_positional_end(buf, *sh, dense_base, rows, t0, count, grp);
      return;
    }
    if (kDense && dense) return;
    const int64_t slot = part + g;
    grp.sync();  // the tile's scores; the counts of the previous append
    fused_topk::collector_reserve(buf, *sh, slot, rows, count, grp);
    fused_topk::collector_append_block(buf, *sh, slot, row0, rows, t0, count, scores, ld, win, grp);
    grp.sync();  // the scores may be rewritten; the counts are published
  }
  __device__ void finish(const IndexerParams&, uint8_t*, const WsSmemLayout&) {}
};

// Consumer warpgroup wg: the tiles of its ring, each as kStage / 64 MMA blocks in turn (the other
// warpgroups' MMAs overlap this one's head sums). Pipelining the blocks inside a warpgroup with
// two accumulator sets (block b + 1's MMAs during block b's head sums) measured slower (H200,
// 128 x 32K: 207 us against 195 at 2 x 256), and so did, at N = 2, one row's 64-column MMAs in
// flight during the other row's head sums (32 x 32K 72.8-73.4 against 63.0-65.7 us; BENCHMARKS.md,
// 2026-12-04). Whoever tries again: ptxas serializes every wgmma of the kernel (warning C7518,
// "WG.DP in divergent path") when a branch it cannot prove uniform runs while an MMA is in flight
// (a loop bound read from shared memory, the head sum's lane-dependent stores); an early stage
// release and head sums in four chains were slower too.
template <int HP, int NW, int kStage, bool kFp4, class Epi>
__device__ __forceinline__ void ws_consume(const IndexerParams& p, const WgmmaShape& s, int stages, uint8_t* smem,
                                           const WsSmemLayout& L, Epi& epi, int wg, int wq, int lane,
                                           IdxBounds own = IdxBounds{}) {
  const WsInfo* info = reinterpret_cast<const WsInfo*>(smem + L.info);
  const uint32_t full0 = smem_u32(smem + L.full), empty0 = smem_u32(smem + L.empty);
  uint8_t* qs = smem + L.q + wg * L.q_bytes;
  float* ws = reinterpret_cast<float*>(smem + L.w + wg * L.w_bytes);
  detail::RowWindow* win = reinterpret_cast<detail::RowWindow*>(smem + L.win + wg * L.win_bytes);
  const float* scales = reinterpret_cast<const float*>(smem + L.scales);
  const uint32_t keys0 = smem_u32(smem + L.keys);
  const int tid = threadIdx.x & 127;
  const fused_topk::WarpgroupGroup grp{1 + wg};  // named barrier of this warpgroup
  int st = wg;
  uint32_t ph = 0;
  int32_t cur_g = -1;
  int rows = 0;
  int64_t row0 = 0;
  bool had_tile = false;  // the current group has had a tile here (its piece exists)
  auto load_group = [&](int32_t g) {
    cur_g = g;
    had_tile = false;
    rows = static_cast<int>(detail::indexer_group_rows(p.work, g));
    row0 = int64_t(g) * p.work.rows_per_group;
    if constexpr (kFp4) {
      wg_load_group_fp4<HP>(p, s.q_rows, g, rows, qs, ws, win, tid, 128);
    } else {
      wg_load_group<HP>(p, s.q_rows, g, rows, qs, ws, win, tid, 128, (s.producer & kWsBatchedGroupLoad) != 0);
    }
    fence_proxy_async_smem();  // Q is read by the tensor cores (async proxy)
    grp.sync();
    epi.group_begin(g, rows);
  };
  // The group to load before the next wait: first the first group of this warpgroup's partition,
  // loaded while the producer starts the pipeline (at batch 1 it would otherwise wait for the
  // first stage's keys), usually the group of the first tile (if not, the loop reloads); then
  // each group a tile enters. One call site of load_group (see ws_produce's fetch).
  int32_t pending = ws_first_group<Epi>(p, wg, own);
  for (;;) {
    if (pending >= 0) {
      if (cur_g >= 0 && had_tile) epi.group_end(cur_g, rows);
      grp.sync();  // every thread is done with the previous group's weights / windows
      load_group(pending);
      pending = -1;
    }
    mbar_wait(full0 + 8 * st, ph);  // again after a group load: a completed phase, at once
    WsInfo in;
    {
      const uint4 v = lds128(smem_u32(info + st));
      in = WsInfo{static_cast<int32_t>(v.x), static_cast<int32_t>(v.y), static_cast<int32_t>(v.z), v.w};
    }
    if (in.g < 0) break;  // uniform
    if (in.g != cur_g) {  // uniform
      pending = in.g;
      continue;
    }
    epi.tile_begin(rows, in.t0, in.count);
#pragma unroll 1
    for (int b = 0; b < kStage / 64; ++b) {
      const int base = 64 * b;
      if (base >= in.count) break;  // uniform
      const int q0 = base + 16 * wq + (lane >> 2), q1 = q0 + 8;  // this thread's states of the tile
      const bool v0 = q0 < in.count && ((in.mask >> (q0 >> s.log2_box)) & 1u);
      const bool v1 = q1 < in.count && ((in.mask >> (q1 >> s.log2_box)) & 1u);
      const uint32_t sa = smem_u32(scales + st * kStage);
      float sc0, sc1;
      uint2 kl0{0u, 0u}, kl1{0u, 0u};
      if constexpr (kFp4) {  // the scale slots hold each state's packed exponents
        wg_fp4_states(lds32(sa + 4 * q0), lds32(sa + 4 * q1), v0, v1, lane, &kl0, &kl1, &sc0, &sc1);
      } else {
        sc0 = v0 ? __uint_as_float(lds32(sa + 4 * q0)) : 0.f;
        sc1 = v1 ? __uint_as_float(lds32(sa + 4 * q1)) : 0.f;
      }
      const int32_t t0 = in.t0 + base;
      wg_score_block<HP, NW, kFp4>(keys0 + static_cast<uint32_t>((st * kStage + base) * wg_key_row(kFp4)), smem_u32(qs),
                                   ws, win, rows, t0, in.count - base, v0, v1, sc0, sc1, kl0, kl1, wq, lane,
                                   [&](int row, int r, float v) { epi.store(p, row, base + r, t0 + r, v, row0, win); });
    }
    // Every thread releases its own reads of the stage (info, scales; its warp's MMAs completed):
    // an arrival releases only the arriving thread's accesses.
    mbar_arrive(empty0 + 8 * st);
    epi.tile_end(p, cur_g, rows, row0, in.t0, in.count, win);
    had_tile = true;
    st += kWsConsumers;
    if (st >= stages) {
      st -= stages;
      ph ^= 1u;
    }
  }
  if (cur_g >= 0 && had_tile) epi.group_end(cur_g, rows);
}

// kWsOneGroupWalk: whether this launch takes it. Only WsLogits deals tiles as ws_rr_start
// assumes; the host sets the call up for it (ws_one_group_walk in indexer_ws_launch.cu) and the
// kernel checks that it did.
template <class Epi>
__device__ __forceinline__ bool ws_one_group_walk(const IndexerParams& p, const WgmmaShape& s) {
  if constexpr (!std::is_same<Epi, WsLogits>::value) {
    return false;
  } else {
    return (s.producer & kWsOneGroupWalk) != 0 && p.meta == nullptr && p.partitions == 1 && p.work.groups == 1 &&
           p.work.mode == detail::IndexerMode::kPaged && p.work.varlen == 0 && p.split == int(gridDim.x);
  }
}

// kRr: kWsOneGroupWalk's instantiations (WsLogits, 64-state stages); the other kernels' code is
// what it was before the option (same SASS). kOwn: IndexerParams::inline_schedule's instantiations
// (WsLogits): the CTA computes its partition's boundaries itself; in the others `own` is a
// constant with set = false, so their code stays that of the kernels before the option (a run-time
// test in every WsLogits kernel cost caller-schedule calls 2-4 % at 32 x 32K on an H100).
template <int HP, int NW, int kStage, class Epi, bool kFp4 = false, bool kRr = false, bool kOwn = false>
__global__ void __launch_bounds__(kWsThreads, 1)
    indexer_ws_kernel(const __grid_constant__ WgmmaMaps maps, IndexerParams p, WgmmaShape s, Epi epi) {
  static_assert(!kOwn || (std::is_same<Epi, WsLogits>::value && !kRr), "kOwn: WsLogits, several groups");
#if DSATTN_SM90A_DEVICE
  extern __shared__ __align__(1024) uint8_t ws_smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(ws_smem_raw) + 1023) & ~uintptr_t(1023));
  const int stages = s.stages;
  const WsSmemLayout L = ws_smem_layout(stages, kStage, s.q_rows, HP, epi.smem_bytes(p, kStage), kFp4);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // No pdl_trigger() unless the launch asks for it (kWsEarlyTrigger): see pdl.cuh.
  if ((s.producer & kWsEarlyTrigger) != 0) pdl_trigger();
  if (threadIdx.x == 0) {
    for (int i = 0; i < stages; ++i) {
      mbar_init(smem_u32(smem + L.full) + 8 * i, 1);
      mbar_init(smem_u32(smem + L.empty) + 8 * i, 128);  // the consuming warpgroup's threads
    }
    mbar_fence_init();
  }
  __syncthreads();
  // kRr (kWsOneGroupWalk's kernels): the producer's first pages from the parameters alone, before
  // the wait; the kernel checks that the host set the call up for it.
  bool rr = false;
  WsRrStart start{};
  if constexpr (kRr) {
    if (warp >= kWsProducerWarp) {
      rr = ws_one_group_walk<Epi>(p, s);
      if (rr) start = ws_rr_start(p, s, kStage, warp - kWsProducerWarp, lane);
    }
  }
  pdl_wait();  // the barriers above are shared memory only; everything below reads global memory
  IdxBounds own{};  // kOwn: this CTA's partition boundaries
  if constexpr (kOwn) {
    // Scratch: stage 0's key buffer, which nothing uses before the producer's first copy (no
    // static shared memory: the ring is sized to the dynamic budget). The pairs are kept in
    // registers, and the fence orders these generic writes before that copy's async-proxy ones.
    if (p.inline_schedule != 0 && p.meta == nullptr) {  // uniform
      int32_t* sp = reinterpret_cast<int32_t*>(smem + L.keys);
      ws_inline_schedule(p, sp, reinterpret_cast<int64_t*>(smem + L.keys + 16), (s.producer & kWsOwnRange) != 0);
      own = IdxBounds{sp[0], sp[1], sp[2], sp[3], true};
      fence_proxy_async_smem();
      __syncthreads();
    }
  }
  if (warp >= kWsProducerWarp) {
    const int w = warp - kWsProducerWarp;
    IdxCursor lc;
    if (!rr) {
      if constexpr (std::is_same<Epi, WsLogits>::value) {
        Epi::cursor(p, w, &lc, own);
      } else {
        Epi::cursor(p, w, &lc);
      }
    }
    ws_produce<kStage, Epi::kTouch, kFp4, kRr>(maps, p, s, stages, smem, L, lc, w, lane, rr, start);
  } else {
    const int w = warp >> 2;
    epi.begin(p, smem + L.epi + w * L.epi_bytes, w, kStage, p.work.rows_per_group);
    ws_consume<HP, NW, kStage, kFp4>(p, s, stages, smem, L, epi, w, warp & 3, lane, own);
  }
  epi.finish(p, smem, L);
#else
  (void)maps; (void)p; (void)s; (void)epi;
  __trap();  // never launched: the host picks this kernel only where sm_90a code exists
#endif
}

}  // namespace cuda
}  // namespace dsattn
