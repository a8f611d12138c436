// Top-k candidate collection for the fused indexer + top-k (SPEC §3.4): the piece of a scoring CTA
// that keeps, per query row, only the states that can still enter the row's top k.
//
// A *piece* is the part of one request (group of <= kMaxPieceRows query rows) that one CTA scores;
// pieces are numbered by `slot` so that a row's pieces, in slot order, cover its states in
// increasing index order. For each (slot, row) the collector keeps a candidate buffer in global
// memory (two halves of `ccap` entries: the live one and the compaction target) and, in shared
// memory, the row's running threshold `thr` and count. Appends are ordered (ballot + popc), so a
// buffer always lists its states in increasing index order and ties resolve to the smaller index,
// exactly as in topk.
//
//   append: a state enters when key(score) > thr (strict: once k entries >= thr are held, a later
//           state equal to thr has a larger index and loses the tie).
//   compact (buffer cannot take another tile): 4 radix passes (8-bit digits, histogram in shared
//           memory) over the live half find the k-th key T; the k winners move, in order, to the
//           other half; thr = T.
// Memory per (slot, row): 2 * ccap * 8 bytes, independent of the context length. The merge kernel
// (fused_topk_merge in fused_topk_launch.cu) reads each row's pieces and finishes the selection.
//
// Block-size generic (any multiple of 32 up to 1024 threads): the calling kernel owns the launch.
#pragma once
#include <cstdint>

#include "cuda/common/topk_kernel.cuh"

namespace dsattn {
namespace cuda {
namespace fused_topk {

using topk_detail::kAbsentKey;
using topk_detail::topk_key;

constexpr int kMaxPieceRows = 8;    // rows per piece (next_n <= 8)
constexpr int kMaxTileStates = 512;  // most states one append call may add per row

// Candidate storage of all pieces: [slots, rows_per_slot, 2, ccap] keys and indices, plus a
// header [slots, rows_per_slot] = (count, live half) written when the piece ends.
struct CollectorBuffers {
  uint32_t* key = nullptr;
  int32_t* idx = nullptr;
  int32_t* header = nullptr;  // [slots, rows_per_slot, 2]
  int ccap = 0;               // entries per half
  int rows_per_slot = 1;
  int k = 0;

  __device__ __forceinline__ int64_t half_offset(int64_t slot, int j, int half) const {
    return ((slot * rows_per_slot + j) * 2 + half) * int64_t(ccap);
  }
};

struct CollectorRow {
  uint32_t thr;
  int cnt;
  int half;
};

struct CollectorShared {
  CollectorRow row[kMaxPieceRows];
  uint32_t hist[256];
  uint32_t bin;
  int above;
  int warp_gt[32];
  int warp_eq[32];
};

// Capacity per half for top-k of k: room for k winners plus at least one full tile.
__host__ __device__ inline int collector_ccap(int k) {
  const int kc = (k + 3) & ~3;
  return kc + (kc > kMaxTileStates ? kc : kMaxTileStates);
}

// Starts a piece: every row empty, threshold 0 (everything enters). Block-wide; ends synced.
__device__ __forceinline__ void collector_begin(CollectorShared& sh, int rows) {
  if (threadIdx.x < kMaxPieceRows) {
    sh.row[threadIdx.x].thr = kAbsentKey;
    sh.row[threadIdx.x].cnt = 0;
    sh.row[threadIdx.x].half = 0;
  }
  (void)rows;
  __syncthreads();
}

// Warp-level ordered append of row j's scores[0..n) (states t0 + q), n <= kMaxTileStates, with
// `valid(q)` false for states outside the row. The caller guarantees room (collector_reserve).
// Only one warp may work on a given row at a time.
template <typename ScoreAt, typename Valid>
__device__ __forceinline__ void collector_append_warp(const CollectorBuffers& b, CollectorShared& sh, int64_t slot,
                                                      int j, int t0, int n, ScoreAt score_at, Valid valid) {
  const int lane = threadIdx.x & 31;
  const unsigned lt = (1u << lane) - 1u;
  CollectorRow& st = sh.row[j];
  const uint32_t thr = st.thr;
  int cnt = st.cnt;
  const int64_t base = b.half_offset(slot, j, st.half);
  for (int q0 = 0; q0 < n; q0 += 32) {
    const int q = q0 + lane;
    bool app = false;
    uint32_t key = 0;
    if (q < n && valid(q)) {
      key = topk_key(score_at(q));
      app = key > thr;
    }
    const unsigned m = __ballot_sync(0xffffffffu, app);
    if (app) {
      const int pos = cnt + __popc(m & lt);
      b.key[base + pos] = key;
      b.idx[base + pos] = t0 + q;
    }
    cnt += __popc(m);
  }
  if (lane == 0) st.cnt = cnt;
  __syncwarp();
}

// Exclusive prefix over the block (thread order), any block size up to 1024. Ends synced.
__device__ __forceinline__ int collector_block_scan(int v, CollectorShared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) sh.warp_gt[warp] = incl;
  __syncthreads();
  int before = 0;
  for (int w = 0; w < warp; ++w) before += sh.warp_gt[w];
  __syncthreads();
  return before + incl - v;
}

// Warp 0 finds, in the 256-bin histogram (scanned from the top), the bin of the k_rem-th largest.
__device__ __forceinline__ void collector_find_bin(CollectorShared& sh, int k_rem) {
  const int lane = threadIdx.x & 31;
  if ((threadIdx.x >> 5) != 0) return;
  int local = 0;
  for (int q = 0; q < 8; ++q) local += sh.hist[255 - 8 * lane - q];
  int incl = local;
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  int cum = incl - local;
  if (cum < k_rem && cum + local >= k_rem) {
    for (int q = 0; q < 8; ++q) {
      const int h = sh.hist[255 - 8 * lane - q];
      if (cum + h >= k_rem) {
        sh.bin = 255 - 8 * lane - q;
        sh.above = cum;
        break;
      }
      cum += h;
    }
  }
}

// collector_compact with the live buffer held in registers: thread t owns entries
// [t * U, (t + 1) * U) (one round trip to L2 instead of one per pass), 4 radix passes over the
// registers, one block scan for the ordered write. Needs cnt <= blockDim.x * U.
template <int U>
__device__ __forceinline__ void collector_compact_regs(const CollectorBuffers& b, CollectorShared& sh, int64_t slot,
                                                       int j) {
  const CollectorRow st = sh.row[j];
  const int n = st.cnt;
  const int k = b.k;
  const uint32_t* src_key = b.key + b.half_offset(slot, j, st.half);
  const int32_t* src_idx = b.idx + b.half_offset(slot, j, st.half);
  uint32_t* dst_key = b.key + b.half_offset(slot, j, st.half ^ 1);
  int32_t* dst_idx = b.idx + b.half_offset(slot, j, st.half ^ 1);
  const int base = threadIdx.x * U;
  uint32_t key[U];
#pragma unroll
  for (int u = 0; u < U; u += 4) {
    const int i = base + u;
    if (i + 3 < n) {
      const uint4 v = *reinterpret_cast<const uint4*>(src_key + i);  // ccap and base are multiples of 4
      key[u] = v.x;
      key[u + 1] = v.y;
      key[u + 2] = v.z;
      key[u + 3] = v.w;
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) key[u + e] = i + e < n ? src_key[i + e] : 0u;
    }
  }
  uint32_t prefix = 0;
  int k_rem = k;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    for (int i = threadIdx.x; i < 256; i += blockDim.x) sh.hist[i] = 0;
    __syncthreads();
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const bool act = base + u < n && (pass == 0 || (key[u] >> (shift + 8)) == (prefix >> (shift + 8)));
      topk_detail::hist_add(sh.hist, (key[u] >> shift) & 255u, act);
    }
    __syncthreads();
    collector_find_bin(sh, k_rem);
    __syncthreads();
    prefix |= sh.bin << shift;
    k_rem -= sh.above;
    __syncthreads();
  }
  const uint32_t T = prefix;
  const int need = k_rem;
  int g = 0, e = 0;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (base + u < n) {
      g += key[u] > T ? 1 : 0;
      e += key[u] == T ? 1 : 0;
    }
  }
  // Counts stay below 2^16 (n <= 2 * 4096 + 512), so both prefixes share one scan.
  const int packed = collector_block_scan((e << 16) | g, sh);
  int g_before = packed & 0xffff, e_before = packed >> 16;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (base + u >= n) continue;
    int pos = -1;
    if (key[u] > T) {
      pos = g_before + min(e_before, need);
      ++g_before;
    } else if (key[u] == T) {
      if (e_before < need) pos = g_before + e_before;
      ++e_before;
    }
    if (pos >= 0) {
      dst_key[pos] = key[u];
      dst_idx[pos] = src_idx[base + u];
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    sh.row[j].cnt = k;
    sh.row[j].half = st.half ^ 1;
    sh.row[j].thr = T;
  }
  __syncthreads();
}

// Block-wide: compacts row j to its k best entries when fewer than `incoming` free slots remain.
// All threads call it with the same arguments (after a __syncthreads that published the counts).
__device__ __forceinline__ void collector_compact(const CollectorBuffers& b, CollectorShared& sh, int64_t slot,
                                                  int j) {
  const int n_live = sh.row[j].cnt;
  if (n_live <= static_cast<int>(blockDim.x) * 16) {
    collector_compact_regs<16>(b, sh, slot, j);
    return;
  }
  if (n_live <= static_cast<int>(blockDim.x) * 32) {
    collector_compact_regs<32>(b, sh, slot, j);
    return;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  const CollectorRow st = sh.row[j];
  const int n = st.cnt;
  const int k = b.k;
  const uint32_t* src_key = b.key + b.half_offset(slot, j, st.half);
  const int32_t* src_idx = b.idx + b.half_offset(slot, j, st.half);
  uint32_t* dst_key = b.key + b.half_offset(slot, j, st.half ^ 1);
  int32_t* dst_idx = b.idx + b.half_offset(slot, j, st.half ^ 1);
  // Radix select, 8 bits per pass, from the top.
  uint32_t prefix = 0;
  int k_rem = k;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    for (int i = threadIdx.x; i < 256; i += blockDim.x) sh.hist[i] = 0;
    __syncthreads();
    for (int base = 0; base < n; base += blockDim.x) {
      const int i = base + threadIdx.x;
      const uint32_t key = i < n ? src_key[i] : 0u;
      const bool act = i < n && (pass == 0 || (key >> (shift + 8)) == (prefix >> (shift + 8)));
      topk_detail::hist_add(sh.hist, (key >> shift) & 255u, act);
    }
    __syncthreads();
    if (warp == 0) {
      // lane l owns bins [255 - 8l - 7, 255 - 8l], scanned from the top.
      int local = 0;
      for (int q = 0; q < 8; ++q) local += sh.hist[255 - 8 * lane - q];
      int incl = local;
      for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
      }
      int cum = incl - local;
      if (cum < k_rem && cum + local >= k_rem) {
        for (int q = 0; q < 8; ++q) {
          const int h = sh.hist[255 - 8 * lane - q];
          if (cum + h >= k_rem) {
            sh.bin = 255 - 8 * lane - q;
            sh.above = cum;
            break;
          }
          cum += h;
        }
      }
    }
    __syncthreads();
    prefix |= sh.bin << shift;
    k_rem -= sh.above;
    __syncthreads();  // sh.bin / sh.above are rewritten by the next pass
  }
  const uint32_t T = prefix;
  const int need = k_rem;
  // Ordered move of the winners: warp w owns a contiguous segment.
  const int seg = ((n + nwarps - 1) / nwarps + 31) & ~31;
  const int lo = warp * seg;
  const int hi = min(n, lo + seg);
  const unsigned lt = (1u << lane) - 1u;
  int n_gt = 0, n_eq = 0;
  for (int base = lo; base < hi; base += 32) {
    const int i = base + lane;
    const uint32_t key = i < hi ? src_key[i] : 0u;
    n_gt += __popc(__ballot_sync(0xffffffffu, i < hi && key > T));
    n_eq += __popc(__ballot_sync(0xffffffffu, i < hi && key == T));
  }
  if (lane == 0) {
    sh.warp_gt[warp] = n_gt;
    sh.warp_eq[warp] = n_eq;
  }
  __syncthreads();
  int gt_before = lane < warp ? sh.warp_gt[lane] : 0;
  int eq_before = lane < warp ? sh.warp_eq[lane] : 0;
  for (int o = 16; o > 0; o >>= 1) {
    gt_before += __shfl_xor_sync(0xffffffffu, gt_before, o);
    eq_before += __shfl_xor_sync(0xffffffffu, eq_before, o);
  }
  int sel_before = gt_before + min(eq_before, need);
  for (int base = lo; base < hi; base += 32) {
    const int i = base + lane;
    const uint32_t key = i < hi ? src_key[i] : 0u;
    const bool gt = i < hi && key > T;
    const bool eq = i < hi && key == T;
    const unsigned eq_mask = __ballot_sync(0xffffffffu, eq);
    const bool sel = gt || (eq && eq_before + __popc(eq_mask & lt) < need);
    const unsigned sel_mask = __ballot_sync(0xffffffffu, sel);
    if (sel) {
      const int pos = sel_before + __popc(sel_mask & lt);
      dst_key[pos] = key;
      dst_idx[pos] = src_idx[i];
    }
    eq_before += __popc(eq_mask);
    sel_before += __popc(sel_mask);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    sh.row[j].cnt = k;
    sh.row[j].half = st.half ^ 1;
    sh.row[j].thr = T;
  }
  __syncthreads();
}

// Block-wide: makes room for `incoming` more entries in each of rows [0, rows). Call between
// __syncthreads-separated append phases.
__device__ __forceinline__ void collector_reserve(const CollectorBuffers& b, CollectorShared& sh, int64_t slot,
                                                  int rows, int incoming) {
  for (int j = 0; j < rows; ++j) {
    if (sh.row[j].cnt + incoming > b.ccap) collector_compact(b, sh, slot, j);
  }
}

// Ends a piece: publishes (count, live half) of rows [0, rows). Block-wide.
__device__ __forceinline__ void collector_end(const CollectorBuffers& b, CollectorShared& sh, int64_t slot, int rows) {
  __syncthreads();
  if (threadIdx.x < rows) {
    int32_t* h = b.header + (slot * b.rows_per_slot + threadIdx.x) * 2;
    h[0] = sh.row[threadIdx.x].cnt;
    h[1] = sh.row[threadIdx.x].half;
  }
}

}  // namespace fused_topk
}  // namespace cuda
}  // namespace dsattn
