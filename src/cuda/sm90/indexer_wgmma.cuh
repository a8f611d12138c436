// Indexer scores on Hopper tensor cores (sm_90a): E4M3 keys and Q through `wgmma`, keys brought in
// by the tensor-map copy engine. Same formula, work split, schedule metadata and epilogue interface
// as the portable kernel (src/cuda/sm80/indexer_kernel.cuh, whose top comment defines them):
//
//   logit[r, t] = kscale[t] * sum_h w[r, h] * relu( sum_d q[r, h, d] * k[t, d] )      (FP8, D = 128)
//
// Why a second kernel: on sm_90 the e4m3 `mma.sync` of the portable path is emulated (conversions
// plus f16 MMAs), which caps it at about a third of the copy bandwidth at 128 x 32K; Hopper's FP8
// tensor cores are reached only through `wgmma`. This tile kernel serves paged_mqa_topk, prefill
// and small shared-memory budgets; paged_mqa_logits runs its warp-specialized variant
// (indexer_ws.cuh), which shares the block scoring below (wg_score_block).
//
// MXFP4 keys (the kernels' kFp4, WgmmaShape::fp4): the copies bring each state's 64 bytes of E2M1
// pairs as stored (unswizzled) and, paged, its 4 packed UE8M0 exponents into the stage's scale
// slot (prefill reads them from global memory, as it reads FP8 scales). Each consumer thread folds
// block lane % 4 of its two states into E4M3 registers (wg_fp4_keys: one lookup per 4 values, each
// block shifted against the state's largest exponent, mx_vector in indexer_dequant.cuh) and the
// MMAs take A from registers; the state's factor 2^(e_max - 133) is its scale, each head's factor
// goes into its weight. Q is folded the same way at group load, its K order permuted to match the
// registers (wg_load_group_fp4). Exact for vectors whose block exponents span at most 14. H200,
// H = 64, S = 64, next_n = 1 (BENCHMARKS.md, 2026-12-04): 32 x 32K 60.0-60.4 us, 128 x 32K
// 208.2-209.2 (portable kernel: 131.9-132.0, 487.9-488.1; FP8 here: 43.9-44.7, 150.3-150.5);
// prefill 4096 x 64K 609 TFLOPS (FP8 491). Decode is bound by the conversion's instructions: with
// it left out (wrong logits, timing only) 32 x 32K took 47.0-47.2 us.
//
// ---------------------------------------------------------------- tiles and roles
// 256 threads = 2 warpgroups, two CTAs per SM; a tile is T = wg_tile(NW) states (384 for NW = 64,
// 256 for NW = 128), scored in 64-state blocks: warpgroup w takes blocks w, w + 2, ...
// MMA: M = the 64 states (A = keys, shared memory, K-major, 128-byte swizzle), N = NW = C query rows
// x HP heads (B = Q, shared memory, same layout), K = D = 128 in 4 steps of 32. HP is the head count
// padded to 16, 32 or 64 (padding heads have zero Q and weight 0); a group's rows are scored C at a
// time. Thread (warp q of the warpgroup, lane l) holds, for n-block i, the accumulators of states
// 16 q + l / 4 (+ 8) and columns 8 i + 2 (l % 4) (+ 1): the weighted ReLU head sum of a row is a
// sum over the thread's columns of that row plus a quad shuffle; the state's scale comes after.
//
// Loads: a tile's states are covered by boxes of g = gcd(S, 64) states (paged; S % 8 == 0 so
// g >= 8; prefill: g = 64, one contiguous key array). Box k: the keys with one 3-D tensor-map copy
// {D, g, 1} out of the cache viewed as [pages][S][D] (128-byte swizzle applied by the copy engine),
// the g scales with one bulk copy (paged; prefill tiles start at any state, so their scales are
// read from global memory by the threads that apply them). Every box starts at a multiple of
// g x 128 >= 1024 bytes of the stage, so the swizzle phase matches the descriptors. With two
// warpgroups, warp 4 walks the tile cursor and reads the block-table entries (lane k: boxes k and
// k + 32), keeps them in registers while the loads fly and stores them into a shared-memory slot
// one iteration later; warp 0 issues the copies from that slot the iteration after (one warp
// doing both cost ~1.1 us per tile on the warpgroup's critical path). Entries are bounds-checked
// as in the portable kernel; a box on an invalid page is not copied and its states score -inf
// (per-stage 64-bit box mask). Every stage has one mbarrier (1 arrival + the copies' bytes).
//
// Barrier protocol per tile i (stage s = i % stages, tracked incrementally), all 256 threads:
//   wait stage s's mbarrier (phase (i / stages) & 1) ; __syncthreads [B1] (tile i - 1 consumed)
//   warp 0: issue tile i + stages - 1 (slot i & 1) into stage (i - 1) % stages
//   warp 4: store the entries read last iteration into slot (i + 1) & 1 ; read the next tile's
//   if the group changed: epi.group_end(previous) ; Q / weights / windows of the new group ; sync
//   wgmma + weighted head sum -> score tile (shared) ; __syncthreads [B2] ; epi.consume(tile)
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "cuda/sm80/indexer_kernel.cuh"
#include "cuda/sm90/wgmma.cuh"

namespace dsattn {
namespace cuda {

#ifndef DSATTN_WG_GROUPS
#define DSATTN_WG_GROUPS 2
#endif
constexpr int kWgGroups = DSATTN_WG_GROUPS;  // warpgroups per CTA
constexpr int kWgThreads = 128 * kWgGroups;
// 64-state blocks per warpgroup and tile. A tile's fixed cost (barriers, the copy-issuing warp's
// cursor and block-table work, which every MMA of its warpgroup waits for) is paid once per tile,
// so tiles are as long as two CTAs per SM still fit (H200, 128 x 32K, N = 1: 128 states per tile
// 345 us, 256: 254 us, 384: 223 us; 512 fits only one CTA per SM: 296 us). N >= 2 (NW = 128,
// twice the Q) keeps 256.
__host__ __device__ constexpr int wg_sub(int nw) { return nw == 64 ? 3 : 2; }
__host__ __device__ constexpr int wg_tile(int nw) { return 64 * kWgGroups * wg_sub(nw); }
constexpr int kWgMaxTile = 64 * kWgGroups * 3;
constexpr int kWgReadWarp = kWgGroups >= 2 ? 4 : 0;  // warp that reads block-table entries
constexpr int kWgHeadDim = 128;   // D: one 128-byte swizzle row per state
constexpr int kWgMaxStages = 8;  // deepest pipeline the launcher tries

// Tensor maps of one call (kernel parameter, __grid_constant__).
struct WgmmaMaps {
  CUtensorMap keys;  // u8 {D, S, pages} (paged) / {D, Nk, 1} (prefill); box {D, g, 1}; 128B swizzle
};

// Shape of the Hopper kernel for one call (host fills it; POD).
struct WgmmaShape {
  int hp = 64;          // padded heads per query row (template HP)
  int q_rows = 1;       // query rows held in shared memory: rows_per_group rounded up to C
  int log2_box = 6;     // g = 1 << log2_box states per key copy
  int prefill = 0;
  int stages = 4;
  int tile = 256;       // states per tile: wg_tile(NW)
  int producer = 0;     // the warp-specialized producer's options (kWsEvictFirst, ... in indexer_ws.cuh)
  int fp4 = 0;          // MXFP4 cache (the kernels' kFp4): 64-byte key rows, folded into E4M3 registers
};

// Bytes of one state's keys in a stage: FP8 128 (one 128-byte swizzle row), MXFP4 64 (as stored).
__host__ __device__ constexpr int wg_key_row(bool fp4) { return fp4 ? kWgHeadDim / 2 : kWgHeadDim; }

// A pending tile handed from the warp that reads its block-table entries to the warp that issues
// its copies (two slots, alternating per tile; see indexer_wgmma_body).
struct WgSlot {
  IdxTile t;
  int32_t ok;
  int32_t raw[64];
  int32_t off[64];
};

struct WgmmaSmemLayout {
  size_t stage0, stage_bytes, keys_off, scale_off, mask_off, q, w, win, bars, slots, scores, epi, total;
};

// Offsets from a 1024-byte aligned base (the kernel aligns its dynamic shared memory; the host adds
// 1024 bytes of slack).
__host__ __device__ inline WgmmaSmemLayout wgmma_smem_layout(const WgmmaShape& s, int rows_per_group,
                                                            size_t epi_bytes) {
  WgmmaSmemLayout L{};
  size_t off = 0;
  L.keys_off = 0;
  L.scale_off = size_t(s.tile) * wg_key_row(s.fp4 != 0);
  L.mask_off = L.scale_off + size_t(s.tile) * 4;
  L.stage_bytes = (L.mask_off + 16 + 1023) / 1024 * 1024;
  L.stage0 = off; off += L.stage_bytes * s.stages;
  L.q = off; off += size_t(s.q_rows) * s.hp * kWgHeadDim;  // multiple of 2048
  L.w = off; off += idx_align16(size_t(s.q_rows) * s.hp * 4);
  L.win = off; off += idx_align16(sizeof(detail::RowWindow) * kIdxMaxRows);
  L.bars = off; off += idx_align16(size_t(8) * s.stages);
  L.slots = off; off += idx_align16(sizeof(WgSlot) * 2);
  L.scores = off; off += idx_align16(size_t(rows_per_group) * s.tile * 4);
  L.epi = off; off += idx_align16(epi_bytes);
  L.total = off;
  return L;
}

// A tile whose block-table entries are in flight (warp 0): lane k holds boxes k and k + 32.
struct WgPending {
  IdxTile t;
  bool ok;
  int32_t raw[2];  // block-table entries as loaded (checked at issue time), -1: not to be read
  int32_t off[2];  // the box's first state's offset inside its page
};

__device__ __forceinline__ void wg_slot_store(WgSlot& sl, const WgPending& pd, int lane) {
  if (lane == 0) {
    sl.t = pd.t;
    sl.ok = pd.ok ? 1 : 0;
  }
  sl.raw[lane] = pd.raw[0];
  sl.raw[lane + 32] = pd.raw[1];
  sl.off[lane] = pd.off[0];
  sl.off[lane + 32] = pd.off[1];
}

__device__ __forceinline__ void wg_slot_load(const WgSlot& sl, WgPending& pd, int lane) {
  pd.t = sl.t;
  pd.ok = sl.ok != 0;
  pd.raw[0] = sl.raw[lane];
  pd.raw[1] = sl.raw[lane + 32];
  pd.off[0] = sl.off[lane];
  pd.off[1] = sl.off[lane + 32];
}

// `last_g`: the group of the previous pending tile (its block-table span is already prefetched).
__device__ __forceinline__ void wg_prefetch(const IndexerParams& p, const WgmmaShape& s, IdxCursor& lc,
                                            WgPending& pd, int32_t& last_g, int lane) {
  pd.ok = lc.next(p, &pd.t);
  pd.raw[0] = pd.raw[1] = -1;
  pd.off[0] = pd.off[1] = 0;
  if (!pd.ok || s.prefill) return;
  if (pd.t.g != last_g) {
    last_g = pd.t.g;
    idx_prefetch_group_entries(p, lc, pd.t, lane);
  }
  const int nb = (pd.t.count + (1 << s.log2_box) - 1) >> s.log2_box;
  const int64_t b = p.block_table == nullptr ? -1 : detail::indexer_group_request(p.work, pd.t.g);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int box = lane + 32 * h;
    if (box >= nb) break;
    // 32-bit: states are < 2^31. A 64-bit division here (a ~100-instruction call on the one warp
    // every MMA waits for) cost ~0.5 us per tile.
    const int32_t st = pd.t.t0 + (box << s.log2_box);
    const int32_t pi = st / p.states_per_page;
    pd.off[h] = st - pi * p.states_per_page;
    if (p.block_table == nullptr) {
      pd.raw[h] = pi < p.num_pages ? static_cast<int32_t>(pi) : -1;
    } else if (b >= 0 && pi < p.max_pages) {
      pd.raw[h] = p.block_table[b * p.bt_s0 + pi * p.bt_s1];
    }
  }
}

// Warp 0: copies of the pending tile into a stage (lane k: boxes k and k + 32), the stage's
// 64-bit box-validity mask, then one arrival on the stage's mbarrier.
__device__ __forceinline__ void wg_issue(const IndexerParams& p, const WgmmaShape& s, const WgmmaMaps& maps,
                                         const WgPending& pd, uint8_t* stage, const WgmmaSmemLayout& L,
                                         uint32_t bar, int lane) {
  const int g = 1 << s.log2_box;
  const int nb = (pd.t.count + g - 1) >> s.log2_box;
  fence_proxy_async_smem();  // the stage was last read through ld.shared; every issuing lane fences
  __syncwarp();
  uint32_t mask[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int box = lane + 32 * h;
    bool ok = false;
    if (box < nb) {
      int64_t page;
      int32_t off;
      if (s.prefill) {
        page = 0;
        off = pd.t.t0 + (box << s.log2_box);
      } else {
        page = (pd.raw[h] >= 0 && pd.raw[h] < p.num_pages) ? pd.raw[h] : -1;
        off = pd.off[h];
      }
      ok = page >= 0;
      if (ok) {
        const int row = wg_key_row(s.fp4 != 0);
        const uint32_t keys = smem_u32(stage + L.keys_off) + static_cast<uint32_t>(box * g * row);
        const uint32_t scales = smem_u32(stage + L.scale_off) + static_cast<uint32_t>(box * g * 4);
        mbar_expect_tx(bar, static_cast<uint32_t>(g * (row + (s.prefill ? 0 : 4))));
        tma_load_3d(keys, &maps.keys, 0, static_cast<int>(off), static_cast<int>(page), bar);
        if (!s.prefill) {
          bulk_copy_g2s(scales, p.sbase + page * p.scale_page_stride + int64_t(off) * 4, static_cast<uint32_t>(g * 4),
                        bar);
        }
      }
    }
    mask[h] = __ballot_sync(0xffffffffu, ok);
  }
  if (lane == 0) {
    *reinterpret_cast<uint2*>(stage + L.mask_off) = make_uint2(mask[0], mask[1]);
    mbar_arrive(bar);
  }
}

// Row tid's window of group g (threads tid < kIdxMaxRows store it for the group's consumers).
__device__ __forceinline__ detail::RowWindow wg_load_row_window(const IndexerParams& p, int64_t g, int rows, int tid) {
  detail::RowWindow rw{0, 0, 0};
  if (tid < kIdxMaxRows && tid < rows) rw = detail::indexer_row_window(p.work, g, tid);
  return rw;
}

// Q (128-byte swizzled rows: 16-byte chunk c of smem row r at chunk c ^ (r % 8)), weights and row
// windows of group g, loaded by threads [0, nthreads) (tid: this thread's rank among them). Smem row
// r = j * HP + h of q_rows * HP; rows j >= rows and heads h >= H are zero.
template <int HP>
__device__ void wg_load_group(const IndexerParams& p, int q_rows, int64_t g, int rows, uint8_t* qs, float* ws,
                              detail::RowWindow* win, int tid, int nthreads, bool batched = true) {
  const int H = p.heads;
  const int qrows = q_rows * HP;
  const uint8_t* qg = p.q + g * p.q_sg;
  constexpr int CH = kWgHeadDim / 16;
  if (!batched) {  // one load, then its store, at a time (kWsBatchedGroupLoad off: A/B only)
    for (int idx = tid; idx < qrows * CH; idx += nthreads) {
      const int row = idx / CH, c = idx % CH;
      const int j = row / HP, h = row % HP;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (j < rows && h < H) v = idx_load_q_chunk(qg + j * p.q_sr + h * p.q_sh + c * 16, p.q_aligned16 != 0);
      *reinterpret_cast<uint4*>(qs + row * kWgHeadDim + ((c ^ (row & 7)) * 16)) = v;
    }
    for (int idx = tid; idx < qrows; idx += nthreads) {
      const int j = idx / HP, h = idx % HP;
      ws[idx] = (j < rows && h < H) ? p.w[g * p.w_sg + j * p.w_sr + h * p.w_sh] : 0.0f;
    }
    if (tid < kIdxMaxRows) {
      detail::RowWindow rw{0, 0, 0};
      if (tid < rows) rw = detail::indexer_row_window(p.work, g, tid);
      win[tid] = rw;
    }
    return;
  }
  // Every global load of a batch (kB Q chunks and kB weights per thread, and the row windows) is
  // issued before the batch's shared-memory stores, so a group change costs about one memory
  // latency per batch (one batch at N = 1, H = 64 on 128 threads) instead of one per load: the
  // warpgroup's ring waits through it, and a ring's tiles are fixed, so its CTA ends that much later.
  // Written out rather than through idx_batched_items (the portable kernel's helper): that version
  // measured no gain here (H200, 32 x 32K and 128 x 8K, same call, 15 -> 31: within +-0.5 us, where
  // this one gains 1-2 us).
  const detail::RowWindow rw = wg_load_row_window(p, g, rows, tid);
  constexpr int kB = 4;
  const int total = qrows * CH;  // >= qrows: the weights' indices lie inside the chunks' range
  for (int base = tid; base < total; base += kB * nthreads) {
    uint4 v[kB];
    float wv[kB];
#pragma unroll
    for (int u = 0; u < kB; ++u) {
      const int idx = base + u * nthreads;
      const int row = idx / CH, c = idx % CH;
      const int j = row / HP, h = row % HP;
      v[u] = make_uint4(0, 0, 0, 0);
      if (idx < total && j < rows && h < H) {
        v[u] = idx_load_q_chunk(qg + j * p.q_sr + h * p.q_sh + c * 16, p.q_aligned16 != 0);
      }
      const int wj = idx / HP, wh = idx % HP;
      wv[u] = (idx < qrows && wj < rows && wh < H) ? p.w[g * p.w_sg + wj * p.w_sr + wh * p.w_sh] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kB; ++u) {
      const int idx = base + u * nthreads;
      const int row = idx / CH, c = idx % CH;
      if (idx < total) *reinterpret_cast<uint4*>(qs + row * kWgHeadDim + ((c ^ (row & 7)) * 16)) = v[u];
      if (idx < qrows) ws[idx] = wv[u];
    }
  }
  if (tid < kIdxMaxRows) win[tid] = rw;
}

// MXFP4 Q of group g (kFp4 kernels): wg_load_group's layout, each head row folded into
// E4M3 (mx_* in indexer_dequant.cuh) with its factor 2^(e_max - 133) multiplied into the head's
// weight, and its K order permuted to match the keys' registers (wg_fp4_keys): lane t (mod 4) of
// the MMA holds block t of its states, so element 8 kk + 4 h + e of block t (raw word 4 t + kk,
// half h) sits at K position 32 kk + 16 h + 4 t + e, in both operands (a dot product does not
// depend on the order of its terms).
template <int HP>
__device__ void wg_load_group_fp4(const IndexerParams& p, int q_rows, int64_t g, int rows, uint8_t* qs, float* ws,
                                  detail::RowWindow* win, int tid, int nthreads) {
  const int H = p.heads;
  const int qrows = q_rows * HP;
  const uint8_t* qg = p.q + g * p.q_sg;
  const detail::RowWindow rw = wg_load_row_window(p, g, rows, tid);
  // Items: (head row, block b) = 16 bytes of 32 values, with the row's packed exponents; item idx
  // < qrows also carries weight idx. As in wg_load_group, every global load of a batch is issued
  // before its stores (one memory latency per batch: at batch 1 this load is on the critical path).
  constexpr int kB = 4;
  const int total = qrows * 4;
  for (int base = tid; base < total; base += kB * nthreads) {
    uint4 v[kB];
    uint32_t sw[kB], swr[kB];
    float wv[kB];
#pragma unroll
    for (int u = 0; u < kB; ++u) {
      const int idx = base + u * nthreads;
      const int row = idx >> 2, b = idx & 3;
      const int j = row / HP, h = row % HP;
      v[u] = make_uint4(0, 0, 0, 0);
      sw[u] = 0u;  // padding rows: exponents 0, values 0
      if (idx < total && j < rows && h < H) {
        const uint8_t* src = qg + j * p.q_sr + h * p.q_sh + b * 16;
        if (p.q_aligned16) {
          v[u] = *reinterpret_cast<const uint4*>(src);
        } else {
          uint32_t w4[4];
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            w4[k] = src[4 * k] | src[4 * k + 1] << 8 | src[4 * k + 2] << 16 | uint32_t(src[4 * k + 3]) << 24;
          }
          v[u] = make_uint4(w4[0], w4[1], w4[2], w4[3]);
        }
        sw[u] = static_cast<uint32_t>(p.q_scales[g * p.qs_sg + j * p.qs_sr + h * p.qs_sh]);
      }
      const int wj = idx / HP, wh = idx % HP;
      wv[u] = 0.0f;
      swr[u] = 0u;
      if (idx < qrows && wj < rows && wh < H) {
        wv[u] = p.w[g * p.w_sg + wj * p.w_sr + wh * p.w_sh];
        swr[u] = static_cast<uint32_t>(p.q_scales[g * p.qs_sg + wj * p.qs_sr + wh * p.qs_sh]);
      }
    }
#pragma unroll
    for (int u = 0; u < kB; ++u) {
      const int idx = base + u * nthreads;
      if (idx < qrows) ws[idx] = wv[u] * mx_scale(mx_max_exp(swr[u]));  // padding: 0 * 2^-133
      if (idx >= total) continue;
      const int row = idx >> 2, b = idx & 3, x = row & 7;
      const uint2 lut = mx_block_lut(sw[u], b, mx_max_exp(sw[u]));
      uint8_t* dst = qs + row * kWgHeadDim;
      const uint32_t w4[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {  // word kk: values 8 kk .. 8 kk + 7 of block b
        const int p0 = 32 * kk + 4 * b, p1 = p0 + 16;
        uint32_t lo, hi;
        mx_e2m1x8(w4[kk], lut, &lo, &hi);
        *reinterpret_cast<uint32_t*>(dst + (((p0 >> 4) ^ x) << 4) + (p0 & 15)) = lo;
        *reinterpret_cast<uint32_t*>(dst + (((p1 >> 4) ^ x) << 4) + (p1 & 15)) = hi;
      }
    }
  }
  if (tid < kIdxMaxRows) win[tid] = rw;
}

// kFp4: this thread's A registers of a 64-state block of raw MXFP4 keys at a_addr (64 bytes per
// state, unswizzled): block lane % 4 of states 16 wq + lane / 4 (+ 8), through that block's
// lookup words l0 (l1) (mx_vector), folded into E4M3 (K order: wg_load_group_fp4). a[kk]: the
// registers of K-step kk.
__device__ __forceinline__ void wg_fp4_keys(uint32_t a_addr, uint2 l0, uint2 l1, int wq, int lane,
                                            uint32_t (&a)[4][4]) {
  const uint32_t r0 = a_addr + static_cast<uint32_t>((16 * wq + (lane >> 2)) * 64 + (lane & 3) * 16);
  const uint4 x0 = lds128(r0), x1 = lds128(r0 + 8 * 64);
  const uint32_t w0[4] = {x0.x, x0.y, x0.z, x0.w}, w1[4] = {x1.x, x1.y, x1.z, x1.w};
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    mx_e2m1x8(w0[kk], l0, &a[kk][0], &a[kk][2]);
    mx_e2m1x8(w1[kk], l1, &a[kk][1], &a[kk][3]);
  }
}

// kFp4: the lookup words of block lane % 4 of states r0 / r1 (packed exponents kw0 / kw1; *kl0,
// *kl1) and their factors, 0 for a state not valid (*sc0, *sc1).
__device__ __forceinline__ void wg_fp4_states(uint32_t kw0, uint32_t kw1, bool v0, bool v1, int lane, uint2* kl0,
                                              uint2* kl1, float* sc0, float* sc1) {
  float f0, f1;
  mx_vector(kw0, lane & 3, kl0, &f0);
  mx_vector(kw1, lane & 3, kl1, &f1);
  *sc0 = v0 ? f0 : 0.f;
  *sc1 = v1 ? f1 : 0.f;
}

// The calling warpgroup scores 64 states (the MMA's M) for all rows of the group: keys at shared
// address a_addr (64 rows of 128 bytes, 128-byte swizzle), Q at q_addr (wg_load_group's layout),
// weights ws and windows win of the group. Thread (warp q of the warpgroup, lane l) owns states
// r0 = 16 q + l / 4 and r1 = r0 + 8 of the block (state t0 + r): valid v0 / v1 (in range and on a
// loaded page) with scales sc0 / sc1. For every row, the quad's lane 0 hands the score of r0 and
// lane 1 that of r1 to sink(row, r, value) (states r < n only): -inf outside the row's window.
// The rows' weights and windows are read while the MMAs run (NW = 64: 16 more live registers
// next to the 32 accumulators; NW = 128 reads them after the wait, its 64 accumulators leave no
// room), and the descriptors of the 4 K-steps are one base plus 32 bytes (2 units) per step.
// Starts the MMAs of one 64-state block against NW Q rows: acc = keys (descriptor da) x Q
// (descriptor db), 4 K-steps of 32 committed as one group.
template <int NW>
__device__ __forceinline__ void wg_mma_issue(float (&acc)[NW / 2], uint64_t da, uint64_t db) {
#pragma unroll
  for (int i = 0; i < NW / 2; ++i) acc[i] = 0.f;
  wgmma_fence_operands(acc);
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < kWgHeadDim / 32; ++k) wgmma_e4m3<NW>(acc, da + 2 * k, db + 2 * k, k > 0);
  wgmma_commit();
}

// The same with the keys in registers (kFp4: wg_fp4_keys).
template <int NW>
__device__ __forceinline__ void wg_mma_issue_rs(float (&acc)[NW / 2], const uint32_t (&a)[4][4], uint64_t db) {
#pragma unroll
  for (int i = 0; i < NW / 2; ++i) acc[i] = 0.f;
  wgmma_fence_operands(acc);
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < kWgHeadDim / 32; ++k) wgmma_e4m3_rs<NW>(acc, a[k], db + 2 * k, k > 0);
  wgmma_commit();
}

// The weighted ReLU head sum of the chunk's row j from completed accumulators: this thread's
// weight pairs wv (columns 2 tig + 8 i), the row's window [lo, hi); sink(row, r, value) as in
// wg_score_block.
template <int HP, int NW, class Sink>
__device__ __forceinline__ void wg_row_sum(const float (&acc)[NW / 2], int j, const float2 (&wv)[HP / 8], int32_t lo,
                                           int32_t hi, int row, int32_t t0, int n, bool v0, bool v1, float sc0,
                                           float sc1, int wq, int lane, Sink&& sink) {
  const int tig = lane & 3;
  const int r0 = 16 * wq + (lane >> 2), r1 = r0 + 8;
  float s0 = 0.f, s1 = 0.f;
#pragma unroll
  for (int i = 0; i < HP / 8; ++i) {
    const float2 w = wv[i];
    const int a = 4 * (j * (HP / 8) + i);
    s0 = fmaf(fmaxf(acc[a], 0.f), w.x, s0);
    s0 = fmaf(fmaxf(acc[a + 1], 0.f), w.y, s0);
    s1 = fmaf(fmaxf(acc[a + 2], 0.f), w.x, s1);
    s1 = fmaf(fmaxf(acc[a + 3], 0.f), w.y, s1);
  }
  s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
  s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
  s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
  s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
  const int32_t t_0 = t0 + r0, t_1 = t0 + r1;
  if (tig == 0 && r0 < n) {
    sink(row, r0, (v0 && t_0 >= lo && t_0 < hi) ? s0 * sc0 : -INFINITY);
  } else if (tig == 1 && r1 < n) {
    sink(row, r1, (v1 && t_1 >= lo && t_1 < hi) ? s1 * sc1 : -INFINITY);
  }
}

// This thread's weight pairs of row `row` (columns 2 tig + 8 i). Explicit shared-memory loads: the
// compiler cannot prove these pointers shared and would issue generic loads, which it schedules
// as long-latency (H200, paged_mqa_logits 128 x 32K N = 2: part of 297 -> 286 us).
template <int HP>
__device__ __forceinline__ void wg_row_weights(const float* ws, int row, int tig, float2 (&wv)[HP / 8]) {
  const uint32_t a = smem_u32(ws) + static_cast<uint32_t>((row * HP + 2 * tig) * 4);
#pragma unroll
  for (int i = 0; i < HP / 8; ++i) {
    const uint2 v = lds64(a + 32 * i);
    wv[i] = make_float2(__uint_as_float(v.x), __uint_as_float(v.y));
  }
}

// Row `row`'s window bounds (shared memory).
__device__ __forceinline__ void wg_row_window(const detail::RowWindow* win, int row, int32_t* lo, int32_t* hi) {
  const uint2 v = lds64(smem_u32(win + row));  // lo, hi: the first 8 bytes
  *lo = static_cast<int32_t>(v.x);
  *hi = static_cast<int32_t>(v.y);
}

// kFp4: a_addr holds the block's raw MXFP4 keys (wg_fp4_keys; kl0 / kl1: the lookup words of
// states r0 / r1, from wg_fp4_states with sc0 / sc1), converted once for all chunks of rows.
template <int HP, int NW, bool kFp4 = false, class Sink>
__device__ __forceinline__ void wg_score_block(uint32_t a_addr, uint32_t q_addr, const float* ws,
                                               const detail::RowWindow* win, int rows, int32_t t0, int n, bool v0,
                                               bool v1, float sc0, float sc1, uint2 kl0, uint2 kl1, int wq, int lane,
                                               Sink&& sink) {
  constexpr int C = NW / HP;
  constexpr bool kEarly = NW == 64;  // weights and windows loaded before the MMAs complete
  constexpr int CW = kEarly ? C : 1;
  const int tig = lane & 3;
  const uint64_t da = wgmma_desc_sw128(a_addr);
  const uint64_t db0 = wgmma_desc_sw128(q_addr);
  uint32_t ka[4][4];
  if constexpr (kFp4) wg_fp4_keys(a_addr, kl0, kl1, wq, lane, ka);
  (void)kl0;
  (void)kl1;
  (void)ka;
  for (int c = 0; c * C < rows; ++c) {
    float acc[NW / 2];
    // Q rows of chunk c start c * NW * 128 bytes in: a multiple of 1024, so no swizzle-phase change.
    if constexpr (kFp4) {
      wg_mma_issue_rs<NW>(acc, ka, db0 + static_cast<uint64_t>(c * NW * kWgHeadDim / 16));
    } else {
      wg_mma_issue<NW>(acc, da, db0 + static_cast<uint64_t>(c * NW * kWgHeadDim / 16));
    }
    float2 wv[CW][HP / 8];
    int32_t lo[CW], hi[CW];
    if constexpr (kEarly) {
#pragma unroll
      for (int j = 0; j < C; ++j) {
        const int row = c * C + j < rows ? c * C + j : 0;
        wg_row_weights<HP>(ws, row, tig, wv[j]);
        wg_row_window(win, row, &lo[j], &hi[j]);
      }
    }
    wgmma_wait_all();
    wgmma_fence_operands(acc);
    if constexpr (kFp4) wgmma_fence_regs(ka);
#pragma unroll
    for (int j = 0; j < C; ++j) {
      const int row = c * C + j;
      if (row >= rows) break;  // uniform
      const int jw = kEarly ? j : 0;
      if constexpr (!kEarly) {
        wg_row_weights<HP>(ws, row, tig, wv[0]);
        wg_row_window(win, row, &lo[0], &hi[0]);
      }
      wg_row_sum<HP, NW>(acc, j, wv[jw], lo[jw], hi[jw], row, t0, n, v0, v1, sc0, sc1, wq, lane, sink);
    }
  }
}

// The calling warpgroup scores the 64 states [base, base + 64) of the tile into the score tile.
template <int HP, int NW, bool kFp4>
__device__ __forceinline__ void wg_compute_tile(const IndexerParams& p, const WgmmaShape& s, const IdxTile& t,
                                                int rows, const uint8_t* stage, const uint8_t* smem,
                                                const WgmmaSmemLayout& L, int base, int wq, int lane) {
  if (base >= t.count) return;  // uniform per warpgroup
  const int r0 = base + 16 * wq + (lane >> 2), r1 = r0 + 8;
  const uint2 mw = *reinterpret_cast<const uint2*>(stage + L.mask_off);
  const uint64_t mask = uint64_t(mw.y) << 32 | mw.x;
  const float* kscale = reinterpret_cast<const float*>(stage + L.scale_off);
  const bool v0 = r0 < t.count && ((mask >> (r0 >> s.log2_box)) & 1u);
  const bool v1 = r1 < t.count && ((mask >> (r1 >> s.log2_box)) & 1u);
  // Prefill scales come straight from global memory (a tile starts at any state, so they are not
  // 16-byte aligned for a bulk copy); loaded here, their latency hides behind the MMAs.
  const float* gscale = reinterpret_cast<const float*>(p.sbase) + t.t0;
  float sc0, sc1;
  uint2 kl0{0u, 0u}, kl1{0u, 0u};
  if constexpr (kFp4) {  // packed exponents: the stage's scale slots, or (prefill) global memory
    const uint32_t* kw = reinterpret_cast<const uint32_t*>(kscale);
    const uint32_t* gw = reinterpret_cast<const uint32_t*>(p.sbase) + t.t0;
    const uint32_t kw0 = s.prefill ? (v0 ? __ldg(gw + r0) : 0u) : kw[r0];
    const uint32_t kw1 = s.prefill ? (v1 ? __ldg(gw + r1) : 0u) : kw[r1];
    wg_fp4_states(kw0, kw1, v0, v1, lane, &kl0, &kl1, &sc0, &sc1);
  } else {
    sc0 = v0 ? (s.prefill ? __ldg(gscale + r0) : kscale[r0]) : 0.f;
    sc1 = v1 ? (s.prefill ? __ldg(gscale + r1) : kscale[r1]) : 0.f;
  }
  float* scores = const_cast<float*>(reinterpret_cast<const float*>(smem + L.scores)) + base;
  wg_score_block<HP, NW, kFp4>(smem_u32(stage + L.keys_off) + static_cast<uint32_t>(base * wg_key_row(kFp4)),
                               smem_u32(smem + L.q), reinterpret_cast<const float*>(smem + L.w),
                               reinterpret_cast<const detail::RowWindow*>(smem + L.win), rows, t.t0 + base,
                               t.count - base, v0, v1, sc0, sc1, kl0, kl1, wq, lane,
                               [&](int row, int r, float v) { scores[row * wg_tile(NW) + r] = v; });
}

template <int HP, int NW, bool kFp4, class Epi>
__device__ __forceinline__ void indexer_wgmma_body(const WgmmaMaps& maps, const IndexerParams& p,
                                                   const WgmmaShape& s, Epi& epi) {
  extern __shared__ __align__(1024) uint8_t wg_smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(wg_smem_raw) + 1023) & ~uintptr_t(1023));
  const WgmmaSmemLayout L = wgmma_smem_layout(s, p.work.rows_per_group, Epi::smem_bytes(p));
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wg = warp >> 2, wq = warp & 3;
  const int S = s.stages;
  epi.begin(p, smem + L.epi);
  const uint32_t bars = smem_u32(smem + L.bars);
  if (tid == 0) {
    for (int i = 0; i < S; ++i) mbar_init(bars + 8 * i, 1);
    mbar_fence_init();
  }
  __syncthreads();

  IdxCursor lc, cc;
  const int split = p.split > 1 ? p.split : 1;
  lc.init(p, blockIdx.x / split, blockIdx.x % split);
  cc = lc;
  auto stage_at = [&](int k) { return smem + L.stage0 + size_t(k) * L.stage_bytes; };
  WgPending pd;
  pd.ok = false;
  int issued = 0;      // prologue copies
  int iss_stage = 0;  // issued % S, kept incrementally (no division per tile)
  int32_t pf_g = -1;
  // Copy issue and block-table reads: with two warpgroups, warp 0 issues and warp 4 (the other
  // warpgroup) reads the entries, so each warpgroup's MMAs wait for only half of that work (it was
  // ~0.35 + ~0.75 us per tile on one warp). The reader keeps a tile's entries in registers while
  // their loads fly, stores them into slot (i + 1) & 1 one iteration later, and the issuer takes
  // slot i & 1: a tile is issued two iterations after its entries were requested.
  WgSlot* slots = reinterpret_cast<WgSlot*>(smem + L.slots);
  if (warp == 0) {
    wg_prefetch(p, s, lc, pd, pf_g, lane);
    for (; issued < S - 1 && pd.ok; ++issued) {
      WgPending nx;
      wg_prefetch(p, s, lc, nx, pf_g, lane);  // in flight while pd's copies are issued
      wg_issue(p, s, maps, pd, stage_at(iss_stage), L, bars + 8 * iss_stage, lane);
      iss_stage = iss_stage + 1 == S ? 0 : iss_stage + 1;
      pd = nx;
    }
    if (kWgReadWarp != 0) wg_slot_store(slots[0], pd, lane);  // tile S - 1 (prologue: waits for its entries)
  } else if (warp == kWgReadWarp) {
    // The same cursor calls warp 0 made (S: the prologue stops early only when the tiles ran out,
    // and an exhausted cursor stays exhausted), then tile S, whose entries go to slot 1.
    IdxTile skip;
    for (int k = 0; k < S; ++k) {
      if (lc.next(p, &skip)) pf_g = skip.g;
    }
    wg_prefetch(p, s, lc, pd, pf_g, lane);
  }
  int cstage = 0;
  uint32_t cphase = 0;
  int32_t cur_g = -1;
  int cur_rows = 0;
  int32_t cur_t_begin = 0, cur_t_end = 0;
  const detail::RowWindow* win = reinterpret_cast<const detail::RowWindow*>(smem + L.win);
  for (int i = 0;; ++i) {
    IdxTile t;
    if (!cc.next(p, &t)) break;
    mbar_wait(bars + 8 * cstage, cphase);
    __syncthreads();  // B1
    if (kWgReadWarp == 0) {
      if (warp == 0 && pd.ok) {
        wg_issue(p, s, maps, pd, stage_at(iss_stage), L, bars + 8 * iss_stage, lane);
        iss_stage = iss_stage + 1 == S ? 0 : iss_stage + 1;
        wg_prefetch(p, s, lc, pd, pf_g, lane);
      }
    } else if (warp == 0) {
      WgPending q;
      wg_slot_load(slots[i & 1], q, lane);
      if (q.ok) {
        wg_issue(p, s, maps, q, stage_at(iss_stage), L, bars + 8 * iss_stage, lane);
        iss_stage = iss_stage + 1 == S ? 0 : iss_stage + 1;
      }
    } else if (warp == kWgReadWarp) {
      wg_slot_store(slots[(i + 1) & 1], pd, lane);
      if (pd.ok) wg_prefetch(p, s, lc, pd, pf_g, lane);
    }
    if (t.g != cur_g) {
      if (cur_g >= 0) {
        epi.group_end(p, GroupInfo{cur_g, int64_t(cur_g) * p.work.rows_per_group, cur_rows, cur_t_begin, cur_t_end, win});
        __syncthreads();
      }
      cur_g = t.g;
      cur_rows = static_cast<int>(detail::indexer_group_rows(p.work, t.g));
      cur_t_begin = t.t0;
      if constexpr (kFp4) {
        wg_load_group_fp4<HP>(p, s.q_rows, t.g, cur_rows, smem + L.q, reinterpret_cast<float*>(smem + L.w),
                              reinterpret_cast<detail::RowWindow*>(smem + L.win), threadIdx.x, kWgThreads);
      } else {
        wg_load_group<HP>(p, s.q_rows, t.g, cur_rows, smem + L.q, reinterpret_cast<float*>(smem + L.w),
                          reinterpret_cast<detail::RowWindow*>(smem + L.win), threadIdx.x, kWgThreads);
      }
      fence_proxy_async_smem();  // Q is read by the tensor cores (async proxy)
      __syncthreads();
    }
    cur_t_end = t.t0 + t.count;
#pragma unroll 1
    for (int j = 0; j < wg_sub(NW); ++j) {
      wg_compute_tile<HP, NW, kFp4>(p, s, t, cur_rows, stage_at(cstage), smem, L, (wg + kWgGroups * j) * 64, wq, lane);
    }
    __syncthreads();  // B2
    epi.consume(p, ScoreTile{reinterpret_cast<const float*>(smem + L.scores), wg_tile(NW), cur_rows, t.g,
                             int64_t(t.g) * p.work.rows_per_group, t.t0, t.count, win});
    if (++cstage == S) {
      cstage = 0;
      cphase ^= 1u;
    }
  }
  __syncthreads();
  if (cur_g >= 0) {
    epi.group_end(p, GroupInfo{cur_g, int64_t(cur_g) * p.work.rows_per_group, cur_rows, cur_t_begin, cur_t_end, win});
    __syncthreads();
  }
  epi.finish(p);
}

// Two CTAs per SM (at most 128 registers) for both epilogues: with one CTA per SM the tile loop's
// fixed cost is exposed (H200, paged_mqa_topk 128 x 32K: 481 us on one CTA per SM with 8 stages).
template <class Epi>
constexpr int wg_min_blocks() {
  return 2;
}

template <int HP, int NW, class Epi, bool kFp4 = false>
__global__ void __launch_bounds__(kWgThreads, wg_min_blocks<Epi>())
    indexer_wgmma_kernel(const __grid_constant__ WgmmaMaps maps, IndexerParams p, WgmmaShape s, Epi epi) {
  // No pdl_trigger(): see pdl.cuh.
  pdl_wait();  // before any global-memory access
#if DSATTN_SM90A_DEVICE
  indexer_wgmma_body<HP, NW, kFp4, Epi>(maps, p, s, epi);
#else
  (void)maps; (void)p; (void)s; (void)epi;
  __trap();  // never launched: the host picks this kernel only where sm_90a code exists
#endif
}

}  // namespace cuda
}  // namespace dsattn
