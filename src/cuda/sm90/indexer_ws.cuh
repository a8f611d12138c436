// Warp-specialized Hopper indexer kernel for paged_mqa_logits (decode: paged FP8 cache, D = 128,
// logits epilogue). Same formula, MMAs, head sum, schedule and output as indexer_wgmma.cuh (the
// scores are bitwise identical, so paged_mqa_topk, which keeps that kernel, selects from the same
// numbers); what differs is how the copies and the MMAs meet.
//
// Why: indexer_wgmma.cuh runs two CTAs per SM, each with two 384-state stages, and all 256 threads
// of a CTA pass two barriers per tile. One stage is always being computed on, so an SM has about
// two tiles (100 KB) of keys in flight, and a tile cannot be refilled before the whole CTA is done
// with it: ~66% of the copy bandwidth at 128 x 32K. Here one CTA per SM keeps a ring of stages
// that a producer warp refills as soon as the warpgroup that read one lets go, and three consumer
// warpgroups take stages in turn without waiting for each other (no block barrier in the loop).
//
// Roles (448 threads):
//   warps 0-11: consumer warpgroups w = 0, 1, 2. Tile j of the CTA's walk (ws_stage() states)
//            lives in stage j % stages and belongs to warpgroup j % 3 (stages is a multiple of 3,
//            so a warpgroup always sees the same stages); it is scored as 64-state MMA blocks in
//            turn. Each warpgroup keeps its own copy of the group's Q, weights and windows (they
//            may be on different groups), loaded when its tile's group changes (named barrier
//            1 + w, 128 threads).
//   warps 12, 13: producers; warp 12 + q fills the tiles j with j % 2 == q. Each walks the
//            partition with the schedule cursor (every other tile), reads the block-table entries
//            of its next batch of 32 boxes (one per lane) while it issues the current batch, so
//            their latency hides behind the waits for free stages.
//   Before its first stage, each consumer warpgroup loads the Q of the partition's first group
//   (at batch 1 that load would otherwise follow the first stage's keys: 1 x 64K 10.6 -> 9.5 us).
// Per stage: mbarrier full (1 arrival: its producer, after writing the stage's WsInfo; plus the
// copies' bytes) and empty (4 arrivals: the consuming warpgroup's warps, after their MMAs and
// scale reads). The producers end each warpgroup's walk with a stage whose info has g = -1 (ring
// positions T, T + 1, T + 2 after the CTA's T tiles; the two producers add up T through shared
// memory).
// Boxes: as in indexer_wgmma.cuh, a tile is covered by boxes of g = gcd(S, 64) states (3-D
// tensor-map copy of the keys + bulk copy of the scales); a box on an invalid page is not copied
// and its states score -inf (WsInfo::mask).
// Shape, measured on an H200 at 128 x 32K (H = 64, 64-state pages), same run:
//   consumers x stage states     N = 1     N = 2
//   2 x 64 (producer-bound)       334 us
//   2 x 256                       195 us    334 us
//   3 x 256                       180 us    346 us   (N = 2: 48 KB of Q leave 3 stages)
//   3 x 128                       224 us    298 us
//   2 x 128                       226 us    350 us
// so 3 consumers, 256-state stages when a warpgroup's Q is one 64-column block (N = 1 at H = 64),
// else 128. (N = 2 as two 64-column chunks instead of one NW = 128 MMA: 295 against 299 us.)
#pragma once
#include "cuda/sm90/indexer_wgmma.cuh"

namespace dsattn {
namespace cuda {

constexpr int kWsConsumers = 3;                      // consumer warpgroups
// Producer warps; tiles alternate between them. One warp's ~200 instructions per stage (cursor,
// entries, a serialized copy per box) held S = 32 pages (8 boxes per stage) back: 128 x 32K
// 193 -> 170 us with two, 32 x 32K S = 64 60.8 -> 57 us.
constexpr int kWsProducers = 2;
constexpr int kWsThreads = 128 * kWsConsumers + 32 * kWsProducers;
constexpr int kWsProducerWarp = 4 * kWsConsumers;   // the first producer warp
constexpr int kWsProducerBarrier = 1 + kWsConsumers;  // named barrier of the producer warps
// States per stage: the producer's per-stage work (cursor step, block-table entries, copies,
// barrier) is ~200 instructions on one warp; at 64 states per stage it could not keep up. NW = 128
// (twice the Q per warpgroup) takes 128 so that the ring stays deep enough.
// 256 states when a warpgroup's Q is one 64-column block (8 KiB), else 128.
__host__ __device__ constexpr int ws_stage(int q_rows, int hp) { return q_rows * hp <= 64 ? 256 : 128; }
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
  size_t keys, q, q_bytes, scales, w, w_bytes, win, win_bytes, info, full, empty, total;
};

// Offsets from a 1024-byte aligned base. keys: [stages][stage][128] (each stage 1024-aligned: the
// 128-byte swizzle); q: one [q_rows * HP][128] buffer per consumer warpgroup (1024-aligned).
__host__ __device__ inline WsSmemLayout ws_smem_layout(int stages, int stage, int q_rows, int hp) {
  WsSmemLayout L{};
  size_t off = 0;
  L.keys = off; off += size_t(stages) * stage * kWgHeadDim;
  L.q_bytes = size_t(q_rows) * hp * kWgHeadDim;  // a multiple of 2048
  L.q = off; off += L.q_bytes * kWsConsumers;
  L.scales = off; off += size_t(stages) * stage * 4;
  L.w_bytes = idx_align16(size_t(q_rows) * hp * 4);
  L.w = off; off += L.w_bytes * kWsConsumers;
  L.win_bytes = idx_align16(sizeof(detail::RowWindow) * kIdxMaxRows);
  L.win = off; off += L.win_bytes * kWsConsumers;
  off += 16;  // the producers' tile counts (kWsProducers ints) right below the infos
  L.info = off; off += sizeof(WsInfo) * size_t(stages);
  L.full = off; off += 8 * size_t(stages);
  L.empty = off; off += 8 * size_t(stages);
  L.total = off;
  return L;
}

__device__ __forceinline__ void ws_named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Producer warp q of kWsProducers: the partition's kStage-state tiles in order into stages 0, 1,
// 2, ...; producer q takes the tiles j with j % kWsProducers == q.
template <int kStage>
__device__ __forceinline__ void ws_produce(const WgmmaMaps& maps, const IndexerParams& p, const WgmmaShape& s,
                                           int stages, uint8_t* smem, const WsSmemLayout& L, int q, int lane) {
  const int g = 1 << s.log2_box;
  const int nb = kStage >> s.log2_box;  // boxes per tile: 2 .. 32
  const int per = 32 / nb;                // tiles per batch: lane l holds box l % nb of tile l / nb
  const uint32_t nb_mask = nb == 32 ? 0xffffffffu : (1u << nb) - 1u;
  WsInfo* info = reinterpret_cast<WsInfo*>(smem + L.info);
  const uint32_t full0 = smem_u32(smem + L.full), empty0 = smem_u32(smem + L.empty);
  // CTA c of a partition split over `split` CTAs takes its tiles c, c + split, ...; of those,
  // producer q takes every kWsProducers-th starting at its q-th.
  const int split = p.split > 1 ? p.split : 1;
  IdxCursor lc;
  {
    IndexerParams pq = p;
    pq.split = split * kWsProducers;
    lc.init(pq, blockIdx.x / split, blockIdx.x % split + q * split);
  }
  int ntiles = 0;
  int32_t pf_g = -1;
  // A batch: up to `per` blocks; this lane's block (if any) and its box's block-table entry.
  struct Batch {
    int n;
    IdxTile t;
    bool mine;
    int32_t raw, off;
  };
  auto fetch = [&](Batch& b) {
    b.n = 0;
    b.mine = false;
    b.raw = -1;
    b.off = 0;
    b.t = IdxTile{-1, 0, 0};
    for (int k = 0; k < per; ++k) {
      IdxTile t;
      if (!lc.next(p, &t)) break;
      if (t.g != pf_g) {  // entering a group: pull its block-table span into L1
        pf_g = t.g;
        idx_prefetch_group_entries(p, lc, t, lane);
      }
      if (k == lane / nb) {
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
  };
  Batch cur, nxt;
  fetch(cur);
  int st = q;  // stage of ring position j = q + kWsProducers * i (stages > kWsProducers)
  uint32_t ph = 0;
  auto advance = [&] {
    st += kWsProducers;
    if (st >= stages) {
      st -= stages;
      ph ^= 1u;
    }
  };
  while (cur.n > 0) {
    fetch(nxt);  // its block-table loads fly while this batch is issued
    for (int k = 0; k < cur.n; ++k) {
      const uint32_t full = full0 + 8 * st, empty = empty0 + 8 * st;
      mbar_wait(empty, ph ^ 1u);  // a fresh barrier counts as released (first pass over the ring)
      const bool mine = cur.mine && lane / nb == k;
      const int box = lane % nb;
      bool ok = false;
      if (mine && box * g < cur.t.count) {
        const int64_t page = (cur.raw >= 0 && cur.raw < p.num_pages) ? cur.raw : -1;
        ok = page >= 0;
        if (ok) {
          if (box == 0) fence_proxy_async_smem();  // the stage's scales were last read through ld.shared
          const uint32_t keys = smem_u32(smem + L.keys) + static_cast<uint32_t>((st * kStage + box * g) * kWgHeadDim);
          const uint32_t scales = smem_u32(smem + L.scales) + static_cast<uint32_t>((st * kStage + box * g) * 4);
          mbar_expect_tx(full, static_cast<uint32_t>(g * (kWgHeadDim + 4)));
          tma_load_3d(keys, &maps.keys, 0, static_cast<int>(cur.off), static_cast<int>(page), full);
          bulk_copy_g2s(scales, p.sbase + page * p.scale_page_stride + int64_t(cur.off) * 4, static_cast<uint32_t>(g * 4),
                        full);
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
      advance();
      ++ntiles;
    }
    cur = nxt;
  }
  // One end marker per consumer warpgroup, at ring positions T, T + 1, T + 2 (T: all tiles of the
  // CTA; each producer takes the positions it owns).
  int total = ntiles;
  if (kWsProducers > 1) {
    int* counts = reinterpret_cast<int*>(smem + L.info) - kWsProducers;  // scratch below the infos
    if (lane == 0) counts[q] = ntiles;
    ws_named_sync(kWsProducerBarrier, 32 * kWsProducers);
    total = 0;
    for (int i = 0; i < kWsProducers; ++i) total += counts[i];
  }
  for (int j = total; j < total + kWsConsumers; ++j) {
    if (j % kWsProducers != q) continue;
    // This producer's next position is its ntiles-th: q + kWsProducers * ntiles; skip to j.
    while (q + kWsProducers * ntiles < j) {
      advance();
      ++ntiles;
    }
    mbar_wait(empty0 + 8 * st, ph ^ 1u);
    if (lane == 0) {
      info[st] = WsInfo{-1, 0, 0, 0u};
      mbar_arrive(full0 + 8 * st);
    }
    advance();
    ++ntiles;
  }
}

// Consumer warpgroup wg: tiles wg, wg + 3, ... of the walk, each as kStage / 64 MMA blocks in
// turn (the other warpgroup's MMAs overlap this one's head sums). Pipelining the blocks inside a
// warpgroup with two accumulator sets (block b + 1's MMAs during block b's head sums) measured
// slower (H200, 128 x 32K: 207 us against 195).
template <int HP, int NW, int kStage>
__device__ __forceinline__ void ws_consume(const IndexerParams& p, const WgmmaShape& s, int stages, uint8_t* smem,
                                           const WsSmemLayout& L, int wg, int wq, int lane) {
  const WsInfo* info = reinterpret_cast<const WsInfo*>(smem + L.info);
  const uint32_t full0 = smem_u32(smem + L.full), empty0 = smem_u32(smem + L.empty);
  uint8_t* qs = smem + L.q + wg * L.q_bytes;
  float* ws = reinterpret_cast<float*>(smem + L.w + wg * L.w_bytes);
  detail::RowWindow* win = reinterpret_cast<detail::RowWindow*>(smem + L.win + wg * L.win_bytes);
  const float* scales = reinterpret_cast<const float*>(smem + L.scales);
  const uint32_t keys0 = smem_u32(smem + L.keys);
  const int tid = threadIdx.x & 127;
  int st = wg;
  uint32_t ph = 0;
  int32_t cur_g = -1;
  int rows = 0;
  int64_t row0 = 0;
  auto load_group = [&](int32_t g) {
    cur_g = g;
    rows = static_cast<int>(detail::indexer_group_rows(p.work, g));
    row0 = int64_t(g) * p.work.rows_per_group;
    wg_load_group<HP>(p, s.q_rows, g, rows, qs, ws, win, tid, 128);
    fence_proxy_async_smem();  // Q is read by the tensor cores (async proxy)
    ws_named_sync(1 + wg, 128);
  };
  {
    // Load the Q of the partition's first group while the producer starts the pipeline (at batch 1
    // the Q load would otherwise wait for the first stage's keys): usually the group of this
    // warpgroup's first tile; if not, the loop reloads.
    const int split = p.split > 1 ? p.split : 1;
    const int32_t g0 = p.meta[detail::kIndexerMetaHeader + 2 * (blockIdx.x / split)];
    if (g0 >= 0 && g0 < p.work.groups) load_group(g0);
  }
  for (;;) {
    mbar_wait(full0 + 8 * st, ph);
    const WsInfo in = info[st];
    if (in.g < 0) break;  // uniform
    if (in.g != cur_g) {
      ws_named_sync(1 + wg, 128);  // every thread is done with the previous group's weights / windows
      load_group(in.g);
    }
#pragma unroll 1
    for (int b = 0; b < kStage / 64; ++b) {
      const int base = 64 * b;
      if (base >= in.count) break;  // uniform
      const int q0 = base + 16 * wq + (lane >> 2), q1 = q0 + 8;  // this thread's states of the tile
      const bool v0 = q0 < in.count && ((in.mask >> (q0 >> s.log2_box)) & 1u);
      const bool v1 = q1 < in.count && ((in.mask >> (q1 >> s.log2_box)) & 1u);
      const float sc0 = v0 ? scales[st * kStage + q0] : 0.f;
      const float sc1 = v1 ? scales[st * kStage + q1] : 0.f;
      const int32_t t0 = in.t0 + base;
      wg_score_block<HP, NW>(keys0 + static_cast<uint32_t>((st * kStage + base) * kWgHeadDim), smem_u32(qs), ws, win,
                             rows, t0, in.count - base, v0, v1, sc0, sc1, wq, lane, [&](int row, int r, float v) {
                               const int64_t col = int64_t(t0) + r - win[row].col_off;
                               if (col >= 0 && col < p.out_width) LogitsEpilogue::store(p, row0 + row, col, v);
                             });
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty0 + 8 * st);  // this warp's MMAs completed, its scales were read
    st += kWsConsumers;
    if (st >= stages) {
      st -= stages;
      ph ^= 1u;
    }
  }
}

template <int HP, int NW, int kStage>
__global__ void __launch_bounds__(kWsThreads, 1)
    indexer_ws_kernel(const __grid_constant__ WgmmaMaps maps, IndexerParams p, WgmmaShape s) {
#if DSATTN_SM90A_DEVICE
  extern __shared__ __align__(1024) uint8_t ws_smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(ws_smem_raw) + 1023) & ~uintptr_t(1023));
  const int stages = s.stages;
  const WsSmemLayout L = ws_smem_layout(stages, kStage, s.q_rows, HP);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    for (int i = 0; i < stages; ++i) {
      mbar_init(smem_u32(smem + L.full) + 8 * i, 1);
      mbar_init(smem_u32(smem + L.empty) + 8 * i, 4);  // the consuming warpgroup's warps
    }
    mbar_fence_init();
  }
  __syncthreads();
  if (warp >= kWsProducerWarp) {
    ws_produce<kStage>(maps, p, s, stages, smem, L, warp - kWsProducerWarp, lane);
  } else {
    ws_consume<HP, NW, kStage>(p, s, stages, smem, L, warp >> 2, warp & 3, lane);
  }
  LogitsEpilogue{}.finish(p);  // -inf on the columns no block covers (independent of the above)
#else
  (void)maps; (void)p; (void)s;
  __trap();  // never launched: the host picks this kernel only where sm_90a code exists
#endif
}

}  // namespace cuda
}  // namespace dsattn
