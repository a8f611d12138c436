// The warp-specialized indexer kernel of indexer_ws.cuh (producer warps, rings of TMA-filled
// stages, one CTA per SM) with mma.sync consumers instead of wgmma: paged_mqa_logits (WsLogits)
// and the streaming scoring of paged_mqa_topk (WsTopkT<false>, staged scores and ordered appends),
// FP8 keys, D = 128. The producers, the stage layout (keys in the 128-byte TMA swizzle), the
// barriers and the epilogues are indexer_ws.cuh's; what differs is how a consumer warp scores its
// states. The fused op scores with it wherever paged_mqa_logits does (logits_mma_ws_rule), so that
// both ops compute every score the same way: the portable kernel groups the head dim into MMA
// k-steps differently, and its scores differ from this kernel's in the last bits.
//
// Consumer warp wq of warpgroup w scores the 32-state chunks wq, wq + 4, ... of each stage of its
// ring: the chunk's keys as the A operand (two m16 tiles of states), converted to f16, and Q as f16
// B fragments from shared memory; then the weighted ReLU head sum, a quad reduction and the
// per-state scale. At next_n = 1 with 64 heads the k32 step is the outer loop (wsm_score32_one:
// all 64 heads' accumulators live, 16 independent chains); otherwise the chunk's keys are
// converted once and each query row takes one n-tile of 8 heads at a time (wsm_score32_rows), as
// the portable kernel's warps do (indexer_kernel.cuh, idx_compute_tile's f16 path). Keys come
// from the swizzled stage by ldmatrix (8 lanes per 8x16-byte matrix, conflict-free under the
// swizzle), which gives the m16n8k32 A fragment in natural K order; Q is laid out to match
// (wsm_load_group).
//
// Stages of 128 states (f16 Q takes 16 KiB per warpgroup at N = 1, H = 64, so 256-state stages
// would leave fewer than two per ring), so each consumer warp scores one chunk per stage.
//
// Why: the portable kernel's warps also walk the tiles, read the block-table entries and issue the
// copies, about a third of their instructions (ncu, BENCHMARKS.md 2026-12-02); here three producer
// warps do that with a few TMA copies per stage. H200 (FP8, D = 128, H = 64, next_n = 1, us, this
// kernel / the portable kernel): 32 x 32K 54.1-54.6 / 76.8-77.2, 128 x 32K 187.5-189.2 / 279-282,
// 256 x 8K 104.6-105.7 / 151-152, 32 x 32K next_n = 2 94.2-94.7 / 114.6-115.2; 1 x 64K 10.4 / 9.5
// (hence the size rule in indexer_launch.cu; BENCHMARKS.md, 2026-12-04). Where it runs: sm_90a
// (DSATTN_INDEXER_KERNEL=portable or mma-ws) and the sm_100 family (the default for those calls), whose
// E4M3 mma.sync is emulated and which take this f16 code; sm_120 (native E4M3 mma.sync, 99 KiB
// per CTA, where three rings of f16 Q do not fit) keeps the portable kernel. Tried and dropped
// (row loop, same calls): four accumulator chains per n-tile (128 x 32K 210-211 us), two n-tiles
// at once (level), two n-tiles at once with the next pair's Q prefetched (211-212); setmaxnreg
// 56 / 152 (more producer spills, no fewer NOPs in the consumer's MMA code; not timed).
#pragma once
#include "cuda/sm90/indexer_ws.cuh"

namespace dsattn {
namespace cuda {

#if !DSATTN_MMA_NATIVE_FP8
// Q of group g as f16 for the mma consumers (D = 128): head row r (= j * HP + h) takes 256 bytes;
// its 16-byte unit u = 4 k + t holds the f16 of E4M3 dims 32 k + 4 t .. + 3 and 32 k + 16 + 4 t .. + 3
// (the m16n8k32 B fragment of lane t, k-step k, in the f16 order mma_k16_f16b reads), stored at
// unit u ^ 4 on odd rows (conflict-free LDS.128 of two rows at once). Weights and row windows as
// wg_load_group writes them. nthreads threads (tid < nthreads); ends without a barrier. Each
// batch's global loads go out before its stores; written out rather than through
// idx_batched_items, which spilled more in this kernel (ptxas: 240 against 176 bytes).
template <int HP>
__device__ void wsm_load_group(const IndexerParams& p, int q_rows, int64_t g, int rows, uint8_t* qs, float* ws,
                               detail::RowWindow* win, int tid, int nthreads) {
  const detail::RowWindow rw = wg_load_row_window(p, g, rows, tid);
  const int H = p.heads, qrows = q_rows * HP;
  const uint8_t* qg = p.q + g * p.q_sg;
  constexpr int kB = 2;
  const int total = qrows * 4;  // items (row, k-step): 32 E4M3 bytes each; >= qrows (weights)
  for (int base = tid; base < total; base += kB * nthreads) {
    uint4 v[kB][2];
    float wv[kB];
#pragma unroll
    for (int u = 0; u < kB; ++u) {
      const int idx = base + u * nthreads;
      const int row = idx >> 2, k = idx & 3;
      const int j = row / HP, h = row % HP;
      v[u][0] = v[u][1] = make_uint4(0, 0, 0, 0);
      if (idx < total && j < rows && h < H) {
        const uint8_t* src = qg + j * p.q_sr + h * p.q_sh + k * 32;
        v[u][0] = idx_load_q_chunk(src, p.q_aligned16 != 0);
        v[u][1] = idx_load_q_chunk(src + 16, p.q_aligned16 != 0);
      }
      const int wj = idx / HP, wh = idx % HP;
      wv[u] = (idx < qrows && wj < rows && wh < H) ? p.w[g * p.w_sg + wj * p.w_sr + wh * p.w_sh] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kB; ++u) {
      const int idx = base + u * nthreads;
      if (idx >= total) continue;
      if (idx < qrows) ws[idx] = wv[u];
      const int row = idx >> 2, k = idx & 3;
      const uint32_t lo4[4] = {v[u][0].x, v[u][0].y, v[u][0].z, v[u][0].w};
      const uint32_t hi4[4] = {v[u][1].x, v[u][1].y, v[u][1].z, v[u][1].w};
      uint8_t* dst = qs + row * 256;
      const int flip = (row & 1) << 2;
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        uint4 o;
        e4m3x4_to_f16x2_fast(lo4[t], &o.x, &o.y);
        e4m3x4_to_f16x2_fast(hi4[t], &o.z, &o.w);
        *reinterpret_cast<uint4*>(dst + (((4 * k + t) ^ flip) << 4)) = o;
      }
    }
  }
  if (tid < kIdxMaxRows) win[tid] = rw;
}

__device__ __forceinline__ void wsm_ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// A consumer lane's constant shared-memory offsets (computed once per kernel).
struct WsmLane {
  uint32_t key[4];  // ldmatrix x4 of k-step k, m-tile 0, from a chunk's first key row (m-tile 1: + 2048)
  uint32_t q_lo, q_hi;  // f16 Q fragments of rows g8 (+ 8 m): even and odd k-steps' units (IdxQ16Lane)
  uint32_t w;       // weights: 8 tig bytes (columns 2 tig, 2 tig + 1 of each n-tile)
  int ms;           // the state (of a 32-state chunk) this lane reports after the quad reduction
};

__device__ __forceinline__ WsmLane wsm_lane(uint32_t q_s, uint32_t w_s, int lane) {
  WsmLane l;
  // ldmatrix x4 of (m-tile, k-step k): matrices (rows 0-7, chunk 2k), (rows 8-15, 2k),
  // (rows 0-7, 2k + 1), (rows 8-15, 2k + 1) = a0..a3 of the m16n8k32 A fragment. Lane l gives
  // row (l & 7) + 8 ((l >> 3) & 1) of matrix l >> 3; the swizzle puts chunk c of row r at c ^ (r & 7).
  const uint32_t row = static_cast<uint32_t>((lane & 7) + ((lane >> 3) & 1) * 8);
  const uint32_t hi = static_cast<uint32_t>(lane >> 4), sw = static_cast<uint32_t>(lane & 7);
#pragma unroll
  for (int k = 0; k < 4; ++k) l.key[k] = row * 128 + (((2 * k + hi) ^ sw) << 4);
  const int g8 = lane >> 2, tig = lane & 3;
  const uint32_t qb = q_s + g8 * 256 + tig * 16;
  const uint32_t odd = (g8 & 1) ? 64u : 0u;
  l.q_lo = qb + odd;
  l.q_hi = qb + (64u - odd);
  l.w = w_s + 8 * tig;
  l.ms = (tig >> 1) * 16 + (tig & 1) * 8 + g8;
  return l;
}

// The state a consumer lane reports for a chunk after the quad reduction, and its store.
struct WsmState {
  int state;      // in the stage
  bool in, valid;  // within the stage's count; and its box was copied
  float scale;
  int32_t t;      // position in the request
};

__device__ __forceinline__ WsmState wsm_state(const WsmLane& ln, uint32_t scales, int base, int32_t t0, int count,
                                              uint32_t mask, int log2_box) {
  WsmState st;
  st.state = base + ln.ms;
  st.in = st.state < count;
  st.valid = st.in && ((mask >> (st.state >> log2_box)) & 1u);
  st.scale = st.valid ? __uint_as_float(lds32(scales + 4 * st.state)) : 0.f;
  st.t = t0 + st.state;
  return st;
}

// Row j's head sum v of the lane's state: scaled, masked by validity and row j's window, stored.
// (No window pointer goes to the store: the epilogues this kernel runs, WsLogits and WsTopkT<false>,
// read none there.)
template <class Epi>
__device__ __forceinline__ void wsm_store(const IndexerParams& p, Epi& epi, const WsmState& st, uint32_t win, int j,
                                          float v, int64_t row0) {
  if (st.in) {
    const uint2 lh = lds64(win + j * static_cast<uint32_t>(sizeof(detail::RowWindow)));  // lo, hi
    const bool ok = st.valid && st.t >= static_cast<int32_t>(lh.x) && st.t < static_cast<int32_t>(lh.y);
    epi.store(p, j, st.state, st.t, ok ? v * st.scale : -INFINITY, row0, nullptr);
  }
}

// One query row (next_n = 1): the k32 step outermost, every n-tile's accumulators live at once
// (NT x 2 independent chains), the keys of a k32 step loaded and converted just before its MMAs;
// then the weighted ReLU head sums in idx_ntile_f16_w's order (idx_relu_wsum per n-tile), so the
// same logits as wsm_score32_rows.
template <int HP, class Epi>
__device__ __forceinline__ void wsm_score32_one(const IndexerParams& p, Epi& epi, const WsmLane& ln, uint32_t keys,
                                                uint32_t scales, uint32_t win, int base, int32_t t0, int count,
                                                uint32_t mask, int log2_box, int64_t row0, int lane) {
  constexpr int KS = 4;  // k32 steps at D = 128
  constexpr int NT = HP / 8;
  float acc[NT][2][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[nt][mt][e] = 0.f;
#pragma unroll
  for (int k = 0; k < KS; ++k) {
    uint32_t kk[2][kMmaARegs];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      uint32_t a[4];
      wsm_ldsm_x4(keys + ln.key[k] + mt * 2048, a);
      mma_prepare_a(a, kk[mt]);
    }
    uint4 q[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) q[nt] = lds128(((k & 1) ? ln.q_hi : ln.q_lo) + nt * 8 * 256 + (k >> 1) * 128);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) mma_k16_f16b<0>(acc[nt][mt], kk[mt], q[nt]);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) mma_k16_f16b<1>(acc[nt][mt], kk[mt], q[nt]);
  }
  const WsmState st = wsm_state(ln, scales, base, t0, count, mask, log2_box);
  float part[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const uint2 r = lds64(ln.w + 4 * (nt * 8));
    idx_relu_wsum(acc[nt], make_float2(__uint_as_float(r.x), __uint_as_float(r.y)), part);
  }
  wsm_store(p, epi, st, win, 0, idx_quad_reduce(part, lane & 3), row0);
}

// Any number of query rows: the chunk's keys converted once, then per row one n-tile at a time.
template <int HP, class Epi>
__device__ __forceinline__ void wsm_score32_rows(const IndexerParams& p, Epi& epi, const WsmLane& ln, uint32_t keys,
                                                 uint32_t scales, uint32_t win, int rows, int base, int32_t t0,
                                                 int count, uint32_t mask, int log2_box, int64_t row0, int lane) {
  constexpr int KS = 4;  // k32 steps at D = 128
  uint32_t kf[2][KS][kMmaARegs];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int k = 0; k < KS; ++k) {
      uint32_t a[4];
      wsm_ldsm_x4(keys + ln.key[k] + mt * 2048, a);
      mma_prepare_a(a, kf[mt][k]);
    }
  }
  const WsmState st = wsm_state(ln, scales, base, t0, count, mask, log2_box);
  const IdxQ16Lane ql{ln.q_lo, ln.q_hi};
  constexpr int NT = HP / 8;
  for (int j = 0; j < rows; ++j) {
    float part[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
    uint4 q[2][KS];
    idx_load_q16<128>(ql, j * HP, q[0]);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      if (nt + 1 < NT) idx_load_q16<128>(ql, j * HP + (nt + 1) * 8, q[(nt + 1) & 1]);
      const uint32_t w2 = ln.w + 4 * (j * HP + nt * 8);
      idx_ntile_f16_w<KS>(kf, q[nt & 1], [&] {
        const uint2 r = lds64(w2);
        return make_float2(__uint_as_float(r.x), __uint_as_float(r.y));
      }, part);
    }
    wsm_store(p, epi, st, win, j, idx_quad_reduce(part, lane & 3), row0);
  }
}

// Warp scores states [base, base + 32) of a stage (count states valid in it, mask: copied boxes).
// keys: shared address of the chunk's first key row (1024-aligned: the swizzle's phase is 0);
// scales, win: shared addresses of the stage's scales and the group's row windows.
//
// One query row with 64 heads takes the k-outer order (wsm_score32_one): 16 independent
// accumulator chains instead of the row loop's two per n-tile, which ptxas had issued with NOPs
// between dependent HMMAs and with each n-tile's Q loads just before their MMAs (ncu, 128 x 32K:
// the HMMA pipe active 55 -> 61 % of the cycles). H200, against the row loop in the same calls
// (us, three rounds): 128 x 32K 206.8-209.7 -> 187.5-189.2, 256 x 8K (S 32) 115.2-116.4 ->
// 104.7-104.9, 32 x 32K 59.2-59.7 -> 54.1-54.6. At 32 heads it measured slower (32 x 32K 47.2 ->
// 50.0: half the MMAs per conversion), so other head counts and next_n > 1 keep the row loop.
template <int HP, class Epi>
__device__ __forceinline__ void wsm_score32(const IndexerParams& p, Epi& epi, const WsmLane& ln, uint32_t keys,
                                            uint32_t scales, uint32_t win, int rows, int base, int32_t t0, int count,
                                            uint32_t mask, int log2_box, int64_t row0, int lane) {
  if (HP == 64 && rows == 1)
    wsm_score32_one<HP>(p, epi, ln, keys, scales, win, base, t0, count, mask, log2_box, row0, lane);
  else
    wsm_score32_rows<HP>(p, epi, ln, keys, scales, win, rows, base, t0, count, mask, log2_box, row0, lane);
}
#endif  // !DSATTN_MMA_NATIVE_FP8

// Consumer warpgroup wg (warp wq of it) of the mma kernel: ws_consume's ring protocol.
template <int HP, int kStage, class Epi>
__device__ __forceinline__ void wsm_consume(const IndexerParams& p, const WgmmaShape& s, int stages, uint8_t* smem,
                                            const WsSmemLayout& L, Epi& epi, int wg, int wq, int lane) {
#if !DSATTN_MMA_NATIVE_FP8
  const WsInfo* info = reinterpret_cast<const WsInfo*>(smem + L.info);
  const uint32_t full0 = smem_u32(smem + L.full), empty0 = smem_u32(smem + L.empty);
  uint8_t* qs = smem + L.q + wg * L.q_bytes;
  float* ws = reinterpret_cast<float*>(smem + L.w + wg * L.w_bytes);
  detail::RowWindow* win = reinterpret_cast<detail::RowWindow*>(smem + L.win + wg * L.win_bytes);
  const uint32_t scales0 = smem_u32(smem + L.scales), win_s = smem_u32(win);
  const uint32_t keys0 = smem_u32(smem + L.keys);
  const WsmLane ln = wsm_lane(smem_u32(qs), smem_u32(ws), lane);
  const int tid = threadIdx.x & 127;
  const fused_topk::WarpgroupGroup grp{1 + wg};
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
    wsm_load_group<HP>(p, s.q_rows, g, rows, qs, ws, win, tid, 128);
    grp.sync();
    epi.group_begin(g, rows);
  };
  {
    const int32_t g0 = ws_first_group<Epi>(p, wg);
    if (g0 >= 0) load_group(g0);
  }
  // Until the producer's end marker (g = -1; uniform). The epilogue's hooks are called as
  // ws_consume calls them (WsLogits: none does anything; WsTopkT: the fused op's candidates).
  for (WsInfo in = ws_wait_full(info, full0, st, ph); in.g >= 0; in = ws_wait_full(info, full0, st, ph)) {
    if (in.g != cur_g) {
      if (cur_g >= 0 && had_tile) epi.group_end(cur_g, rows);
      grp.sync();  // every thread is done with the previous group's Q, weights and windows
      load_group(in.g);
    }
    epi.tile_begin(rows, in.t0, in.count);
    const uint32_t keys = keys0 + static_cast<uint32_t>(st * kStage * kWgHeadDim);
    const uint32_t sc = scales0 + static_cast<uint32_t>(st * kStage * 4);
#pragma unroll 1
    for (int base = 32 * wq; base < in.count; base += 128) {
      wsm_score32<HP>(p, epi, ln, keys + static_cast<uint32_t>(base * kWgHeadDim), sc, win_s, rows, base, in.t0,
                      in.count, in.mask, s.log2_box, row0, lane);
    }
    mbar_arrive(empty0 + 8 * st);
    epi.tile_end(p, cur_g, rows, row0, in.t0, in.count, win);
    had_tile = true;
    ws_ring_advance(st, ph, stages);
  }
  if (cur_g >= 0 && had_tile) epi.group_end(cur_g, rows);
#else
  (void)p; (void)s; (void)stages; (void)smem; (void)L; (void)epi; (void)wg; (void)wq; (void)lane;
#endif
}

// 512 threads: the three consumer warpgroups, then a warpgroup of the three producer warps and an
// idle one (setmaxnreg acts on whole warpgroups): the producers give registers back (64 each) and
// the consumers take them (144; 128 at launch). H200, against the first version of this kernel
// (480 threads, no setmaxnreg, the lane's shared-memory offsets computed per chunk and the weights,
// scales and windows read through generic loads), both changes together: 128 x 32K 225-229 ->
// 206-210 us, 32 x 32K 62.5-63.7 -> 58.5-58.8, 256 x 8K 123-124 -> 113-115; producers at 40 and
// consumers at 152 measured 1-3 % slower than 64 / 144 (ptxas spills the producer's loop at 40).
constexpr int kWsmThreads = 512;
constexpr int kWsmProducerRegs = 64, kWsmConsumerRegs = 144;
static_assert(kWsmProducerRegs * 128 + kWsmConsumerRegs * 384 <= 65536, "register file");

template <int HP, int kStage, class Epi>
__global__ void __launch_bounds__(kWsmThreads, 1)
    indexer_ws_mma_kernel(const __grid_constant__ WgmmaMaps maps, IndexerParams p, WgmmaShape s, Epi epi) {
#if DSATTN_TMA_DEVICE && !DSATTN_MMA_NATIVE_FP8
  extern __shared__ __align__(1024) uint8_t wsm_smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(wsm_smem_raw) + 1023) & ~uintptr_t(1023));
  const int stages = s.stages;
  const WsSmemLayout L = ws_smem_layout(stages, kStage, s.q_rows, HP, epi.smem_bytes(p, kStage), false, true);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if ((s.producer & kWsEarlyTrigger) != 0) pdl_trigger();  // as indexer_ws_kernel
  if (threadIdx.x == 0) {
    for (int i = 0; i < stages; ++i) {
      mbar_init(smem_u32(smem + L.full) + 8 * i, 1);
      mbar_init(smem_u32(smem + L.empty) + 8 * i, 128);
    }
    mbar_fence_init();
  }
  __syncthreads();
  pdl_wait();
  if (warp >= kWsProducerWarp) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kWsmProducerRegs));
    const int w = warp - kWsProducerWarp;
    if (w < kWsConsumers) {
      IdxCursor lc;
      Epi::cursor(p, w, &lc);
      ws_produce<kStage, Epi::kTouch, false>(maps, p, s, stages, smem, L, lc, w, lane);
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kWsmConsumerRegs));
    const int w = warp >> 2;
    epi.begin(p, smem + L.epi + w * L.epi_bytes, w, kStage, p.work.rows_per_group);
    wsm_consume<HP, kStage>(p, s, stages, smem, L, epi, w, warp & 3, lane);
  }
  epi.finish(p, smem, L);
#else
  (void)maps; (void)p; (void)s; (void)epi;
  __trap();
#endif
}

}  // namespace cuda
}  // namespace dsattn
