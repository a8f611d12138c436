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
//   compact (buffer cannot take another tile): radix passes (8-bit digits, histogram in shared
//           memory) over the live half find the k-th key's bin; the winners move, in order, to the
//           other half. Usually after two passes: every key in or above the k-th key's 16-bit bin
//           (k or a few more), thr = the bin's lower bound - 1; with many keys in that bin, after
//           four: exactly k, thr = the k-th key T.
// Memory per (slot, row): 2 * ccap * 8 bytes, independent of the context length. The merge kernel
// (fused_topk_merge in fused_topk_launch.cu) reads each row's pieces and finishes the selection.
//
// Block-size generic (any multiple of 32 up to 1024 threads): the calling kernel owns the launch.
#pragma once
#include <cstdint>

#include "common/indexer_work.h"
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
  int warp_app[kMaxPieceRows][32];  // collector_append_block: appends of (row, warp) this tile
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

// Block-wide ordered append of a score tile: rows [0, rows), states t0 + q for q < n, scores at
// scores[j * ld + q] (shared memory), state t0 + q valid for row j when it lies in
// [win[j].lo, win[j].hi). Every warp filters its 32 states of every row against the row's threshold
// (a ballot per row), one barrier publishes the per-(row, warp) counts, then each warp with
// survivors writes them at the row's count plus the counts of the warps before it; thread j < rows
// advances row j's count. The caller guarantees room (collector_reserve) and a barrier between this
// call and the next use of the counts or of warp_app (the indexer's B1 / B2 are).
// kRows: compile-time upper bound on rows (1 for the common N = 1 decode: no per-row guards).
template <int kRows>
__device__ __forceinline__ void collector_append_rows(const CollectorBuffers& b, CollectorShared& sh, int64_t slot,
                                                      int rows, int t0, int n, const float* scores, int ld,
                                                      const detail::RowWindow* win) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  const unsigned lt = (1u << lane) - 1u;
  for (int q0 = 0; q0 < n; q0 += blockDim.x) {
    if (q0 > 0) __syncthreads();  // previous step's counts and warp_app consumed
    const int q = q0 + threadIdx.x;
    unsigned mask[kRows];
    uint32_t key[kRows];
    int cnt[kRows];
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      mask[j] = 0u;
      key[j] = 0u;
      cnt[j] = 0;
      if (j < rows) {
        const CollectorRow st = sh.row[j];
        cnt[j] = st.cnt;
        bool app = false;
        if (q < n && t0 + q >= win[j].lo && t0 + q < win[j].hi) {
          key[j] = topk_key(scores[j * ld + q]);
          app = key[j] > st.thr;
        }
        mask[j] = __ballot_sync(0xffffffffu, app);
        if (lane == 0) sh.warp_app[j][warp] = __popc(mask[j]);
      }
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      if (j >= rows) break;
      const int c = lane < nwarps ? sh.warp_app[j][lane] : 0;
      if (mask[j] != 0u) {  // warp-uniform
        const int before = __reduce_add_sync(0xffffffffu, lane < warp ? c : 0);
        if (mask[j] & (1u << lane)) {
          const int pos = cnt[j] + before + __popc(mask[j] & lt);
          const int64_t base = b.half_offset(slot, j, sh.row[j].half);
          b.key[base + pos] = key[j];
          b.idx[base + pos] = t0 + q;
        }
      }
      if (warp == 0) {
        const int total = __reduce_add_sync(0xffffffffu, c);
        if (lane == 0) sh.row[j].cnt = cnt[j] + total;  // every thread read cnt before the barrier
      }
    }
  }
}

__device__ __forceinline__ void collector_append_block(const CollectorBuffers& b, CollectorShared& sh, int64_t slot,
                                                       int rows, int t0, int n, const float* scores, int ld,
                                                       const detail::RowWindow* win) {
  if (rows == 1) {
    collector_append_rows<1>(b, sh, slot, 1, t0, n, scores, ld, win);
  } else {
    collector_append_rows<kMaxPieceRows>(b, sh, slot, rows, t0, n, scores, ld, win);
  }
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
// Usually two of the four radix passes suffice: after the top 16 bits, the k-th key's 16-bit bin
// is known, and keeping every key in or above that bin (threshold = the bin's lower bound - 1)
// keeps at least k entries and drops only keys that k kept ones beat. That is taken when it
// leaves at most `limit` entries (half of the room above k after the incoming tile stays free);
// otherwise (many keys in that bin: ties) the last two passes make it exact.
template <int U>
__device__ __forceinline__ void collector_compact_regs(const CollectorBuffers& b, CollectorShared& sh, int64_t slot,
                                                       int j, int incoming) {
  const CollectorRow st = sh.row[j];
  const int n = st.cnt;
  const int k = b.k;
  const uint32_t* src_key = b.key + b.half_offset(slot, j, st.half);
  const int32_t* src_idx = b.idx + b.half_offset(slot, j, st.half);
  uint32_t* dst_key = b.key + b.half_offset(slot, j, st.half ^ 1);
  int32_t* dst_idx = b.idx + b.half_offset(slot, j, st.half ^ 1);
  const int base = threadIdx.x * U;
  // Keys and indices both come in with 16-byte loads (a half holds ccap entries, a multiple of 4,
  // so reading a whole vector past n stays inside it); the ordered write below then needs no
  // further memory round trip.
  uint32_t key[U];
  int32_t idx[U];
#pragma unroll
  for (int u = 0; u < U; u += 4) {
    const int i = base + u;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    int4 x = make_int4(0, 0, 0, 0);
    if (i < n) {
      v = *reinterpret_cast<const uint4*>(src_key + i);  // ccap and base are multiples of 4
      x = *reinterpret_cast<const int4*>(src_idx + i);
    }
    key[u] = v.x;
    key[u + 1] = v.y;
    key[u + 2] = v.z;
    key[u + 3] = v.w;
    idx[u] = x.x;
    idx[u + 1] = x.y;
    idx[u + 2] = x.z;
    idx[u + 3] = x.w;
  }
  const int limit = k + (b.ccap - k - incoming) / 2;
  uint32_t prefix = 0;
  int k_rem = k;
  int kept = k;
  bool approx = false;
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
    const int in_bin = static_cast<int>(sh.hist[sh.bin]);
    __syncthreads();
    if (pass == 1 && prefix != 0u && (k - k_rem) + in_bin <= limit) {  // block-uniform
      approx = true;
      kept = (k - k_rem) + in_bin;
      break;
    }
  }
  // Exact: keys > T, then the first `need` keys == T. Approximate: keys >= prefix (> T, need 0).
  const uint32_t T = approx ? prefix - 1u : prefix;
  const int need = approx ? 0 : k_rem;
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
      dst_idx[pos] = idx[u];
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    sh.row[j].cnt = kept;
    sh.row[j].half = st.half ^ 1;
    sh.row[j].thr = T;
  }
  __syncthreads();
}

// Block-wide: compacts row j (to its k best entries, or a few more, see collector_compact_regs) so
// that `incoming` more entries fit.
// All threads call it with the same arguments (after a __syncthreads that published the counts).
// Not inlined: it runs once per ~k appended states, and keeping its three variants out of the
// indexer's tile loop keeps that loop's code small.
inline __device__ __noinline__ void collector_compact(const CollectorBuffers& b, CollectorShared& sh, int64_t slot,
                                                  int j, int incoming) {
  const int n_live = sh.row[j].cnt;
  if (n_live <= static_cast<int>(blockDim.x) * 16) {
    collector_compact_regs<16>(b, sh, slot, j, incoming);
    return;
  }
  if (n_live <= static_cast<int>(blockDim.x) * 32) {
    collector_compact_regs<32>(b, sh, slot, j, incoming);
    return;
  }
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
    collector_find_bin(sh, k_rem);
    __syncthreads();
    prefix |= sh.bin << shift;
    k_rem -= sh.above;
    __syncthreads();  // sh.bin / sh.above are rewritten by the next pass
  }
  const uint32_t T = prefix;
  const int need = k_rem;
  // Ordered move of the winners (ties in position order), carrying their state indices.
  topk_detail::select_in_order_by(src_key, n, T, need, nwarps, sh.warp_gt, sh.warp_eq, dst_key, dst_idx,
                     [&](int i) { return src_idx[i]; });
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
    if (sh.row[j].cnt + incoming > b.ccap) collector_compact(b, sh, slot, j, incoming);
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
