// Block-level radix top-k (SPEC §3.3): the building block of dsattn::topk and of the fused
// paged_mqa_topk merge.
//
// Order. Every value maps to an order-preserving uint32 key (topk_key): larger key = ranks higher.
// NaN maps to kNanKey (1), below -inf (0x007FFFFF); key 0 (kAbsentKey) marks an empty candidate
// slot and ranks below everything. -0.0 maps to the key of +0.0 (they compare equal, so the smaller
// index wins, as for any tie). The selection is "the k largest (key, -index) pairs": ties go to the
// smaller index, which makes the result deterministic and independent of the launch shape.
//
// One CTA (kTopkThreads threads) selects from n <= cap keys it holds in shared memory:
//   1. load + key + histogram of the top 12 bits (4096 bins) in one pass over global memory;
//   2. two more histogram passes over shared memory (bits 19..10, then 9..0), each restricted to
//      the keys sharing the prefix found so far -> the exact k-th key T and how many keys equal to
//      T are still needed (`need`);
//   3. a write pass: warp w owns a contiguous segment; ballots + one cross-warp prefix give each
//      selected element its output position, so the k winners come out in source (index) order.
// Histogram atomics are aggregated when a whole warp hits one bin (constant rows would otherwise
// serialize 32 lanes on one shared-memory word).
//
// Shared memory (dynamic): [keys: cap + 8 u32 (+8: shift so 16-byte source vectors land on
// 16-byte smem words)][region: max(4096, 2 * k_pad) u32, the histogram, later (sel_key, sel_pos)].
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

#include "cuda/common/pdl.cuh"
#include "cuda/common/warp_scan.cuh"

namespace dsattn {
namespace cuda {
namespace topk_detail {

constexpr int kTopkThreads = 1024;
constexpr int kTopkWarps = kTopkThreads / 32;
constexpr int kBins1 = 4096;  // first digit: key bits 31..20
constexpr int kBins2 = 1024;  // second and third digits: bits 19..10 and 9..0
constexpr int kMaxK = 4096;
constexpr int kKeyPad = 8;    // extra keys in front of the smem key array (alignment shift)
constexpr uint32_t kAbsentKey = 0u;
constexpr uint32_t kNanKey = 1u;

__host__ __device__ inline int next_pow2(int v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}
// Shared region after the keys: [hist (4096) / later sel_key, sel_pos (k_pad each)][ml_key, ml_pos
// (mlist_cap each): the keys that survive the first digit, in position order].
__host__ __device__ inline int sel_words(int k_pad) { return 2 * k_pad > kBins1 ? 2 * k_pad : kBins1; }
// Default mlist capacity; 0 disables the mlist (tight shared-memory budgets).
__host__ __device__ inline int mlist_cap(int k_pad) { return k_pad + (k_pad > 2048 ? k_pad : 2048); }
__host__ __device__ inline int region_words(int k_pad, int m_cap) { return sel_words(k_pad) + 2 * m_cap; }

__device__ __forceinline__ uint32_t topk_key(float v) {
  if (v != v) return kNanKey;
  uint32_t b = __float_as_uint(v);
  if (b == 0x80000000u) b = 0u;  // -0 ties with +0
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
// topk_key in branch-free form: negative values flip every bit, the rest only the sign bit, and
// adding +0 (round to nearest) turns -0 into +0 first. The fused scoring's dense stores use it
// (H200, paged_mqa_topk 128 x 32K: 207.7 -> ~205 us); in the collector's staged path the same
// form made the H = 32 kernel spill (232 -> 239 us), so that path keeps topk_key.
__device__ __forceinline__ uint32_t topk_key_branchless(float v) {
  const uint32_t b = __float_as_uint(__fadd_rn(v, 0.0f));
  const uint32_t k = b ^ (static_cast<uint32_t>(static_cast<int32_t>(b) >> 31) | 0x80000000u);
  return (b & 0x7fffffffu) > 0x7f800000u ? kNanKey : k;  // NaN
}
__device__ __forceinline__ float key_to_float(uint32_t key) {
  if (key <= kNanKey) return __uint_as_float(0x7fc00000u);
  const uint32_t b = (key & 0x80000000u) ? (key & 0x7fffffffu) : ~key;
  return __uint_as_float(b);
}

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ uint32_t key_of(float v) { return topk_key(v); }
__device__ __forceinline__ uint32_t key_of(__nv_bfloat16 v) { return topk_key(__bfloat162float(v)); }
__device__ __forceinline__ uint32_t key_of(uint32_t v) { return v; }  // already a key

// Scalars shared by the block-level routines.
struct TopkShared {
  uint32_t bin;
  int above;
  int warp_scan[kTopkWarps];
  int warp_gt[kTopkWarps];
  int warp_eq[kTopkWarps];
};

// Shared-memory histogram increment for a warp. All 32 lanes must call it together. When every
// active lane hits one bin (constant or sorted runs), one lane adds the count; otherwise each lane
// adds 1 (__match_any_sync aggregation measured far slower than the conflicts it saves).
__device__ __forceinline__ void hist_add(uint32_t* hist, uint32_t bin, bool active) {
  const unsigned mask = __ballot_sync(0xffffffffu, active);
  if (mask == 0u) return;
  const int leader = __ffs(mask) - 1;
  const uint32_t lead_bin = __shfl_sync(0xffffffffu, bin, leader);
  if (__all_sync(0xffffffffu, !active || bin == lead_bin)) {
    if ((threadIdx.x & 31) == leader) atomicAdd(&hist[lead_bin], __popc(mask));
  } else if (active) {
    atomicAdd(&hist[bin], 1u);
  }
}

// hist_add for V keys per lane at once: one warp-wide test (two reductions) for all V x 32 keys
// instead of one per key. When every active key of the warp falls in one bin, one lane adds the
// count; otherwise each active key adds 1. All 32 lanes must call it together.
template <int V>
__device__ __forceinline__ void hist_add_v(uint32_t* hist, const uint32_t (&bin)[V], const bool (&active)[V]) {
  uint32_t lo = 0xffffffffu, hi = 0u;
  int n = 0;
#pragma unroll
  for (int v = 0; v < V; ++v) {
    if (active[v]) {
      lo = min(lo, bin[v]);
      hi = max(hi, bin[v]);
      ++n;
    }
  }
  lo = __reduce_min_sync(0xffffffffu, lo);
  hi = __reduce_max_sync(0xffffffffu, hi);
  if (lo == hi) {  // at least one active key, all in bin lo
    const unsigned total = __reduce_add_sync(0xffffffffu, static_cast<unsigned>(n));
    if ((threadIdx.x & 31) == 0) atomicAdd(&hist[lo], total);
  } else {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      if (active[v]) atomicAdd(&hist[bin[v]], 1u);
    }
  }
}

// The threads that run a block-level routine together: the whole CTA, or one warpgroup (the
// warp-specialized Hopper indexer, named barrier `id`). Routines taking one are called by all
// threads of the group with the same arguments.
struct CtaGroup {
  __device__ __forceinline__ int rank() const { return static_cast<int>(threadIdx.x); }
  __device__ __forceinline__ int size() const { return static_cast<int>(blockDim.x); }
  __device__ __forceinline__ void sync() const { __syncthreads(); }
};
struct WarpgroupGroup {
  int id;  // named barrier, 1..15
  __device__ __forceinline__ int rank() const { return static_cast<int>(threadIdx.x & 127); }
  __device__ __forceinline__ int size() const { return 128; }
  __device__ __forceinline__ void sync() const { asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory"); }
};

// Exclusive prefix over the group (rank order) of v, and the group total in *total, for groups of
// any size up to 1024; warp_tot: shared scratch of one int per warp of the group. Ends synced.
template <class G>
__device__ __forceinline__ int group_exclusive_scan(int v, int* warp_tot, int* total, const G& grp) {
  const int lane = grp.rank() & 31, warp = grp.rank() >> 5, nwarps = grp.size() >> 5;
  int incl = warp_inclusive_scan(v);
  if (lane == 31) warp_tot[warp] = incl;
  grp.sync();
  int before = 0, all = 0;
  for (int w = 0; w < nwarps; ++w) {
    const int t = warp_tot[w];
    before += w < warp ? t : 0;
    all += t;
  }
  grp.sync();
  *total = all;
  return before + incl - v;
}

// Exclusive prefix sum over the block (thread order); every thread gets its own prefix. One barrier
// publishes the warp totals, then every warp adds up those before it (one shared load per lane and
// a warp reduction) instead of one warp scanning them behind a second barrier. kReuse: a trailing
// barrier, so that sh.warp_scan may be rewritten right after; without it the caller must pass
// another barrier before the next scan.
template <bool kReuse = true>
__device__ __forceinline__ int block_exclusive_scan(int v, TopkShared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int x = warp_inclusive_scan(v);
  if (lane == 31) sh.warp_scan[warp] = x;
  __syncthreads();
  const int before = __reduce_add_sync(0xffffffffu, lane < warp ? sh.warp_scan[lane] : 0);
  if (kReuse) __syncthreads();
  return before + x - v;
}

// Finds, in a histogram of `nbins` (4096 or 1024) bins (counting from the top bin down), the bin
// holding the k_rem-th largest element. Writes sh.bin and sh.above (elements in higher bins); writes
// nothing when the histogram holds fewer than k_rem. Ends synced. Thread t holds the `per` bins
// below nbins - t per; warp w's 32 x per bins are one contiguous block. Two barriers: the warp
// totals are published, then every warp finds from them whether its block holds the bin, and only
// that warp scans its lanes (four barriers when the block scan ran over all 1024 threads; H200,
// topk 1 x 8K k = 2048: see BENCHMARKS.md). kPredScan: the warp scans of warp_inclusive_scan_pred
// (the sampled kernel, issue-bound; the other kernels keep the code they were measured with).
template <bool kPredScan = false>
__device__ __forceinline__ void find_bin(const uint32_t* hist, int nbins, int k_rem, TopkShared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int per = nbins / kTopkThreads;  // 4 or 1
  const int hi = nbins - 1 - static_cast<int>(threadIdx.x) * per;  // this thread's highest bin
  int local = 0;
  for (int j = 0; j < per; ++j) local += hist[hi - j];
  const int wsum = __reduce_add_sync(0xffffffffu, local);
  if (lane == 0) sh.warp_scan[warp] = wsum;
  __syncthreads();
  const int wt = sh.warp_scan[lane];
  const int wincl = kPredScan ? warp_inclusive_scan_pred(wt) : warp_inclusive_scan(wt);
  const int wbefore = __shfl_sync(0xffffffffu, wincl - wt, warp);  // warps above this one
  if (wbefore < k_rem && wbefore + wsum >= k_rem) {  // warp-uniform: this warp's block holds it
    int cum = wbefore + (kPredScan ? warp_inclusive_scan_pred(local) : warp_inclusive_scan(local)) - local;
    if (cum < k_rem && cum + local >= k_rem) {
      for (int j = 0; j < per; ++j) {
        const int h = hist[hi - j];
        if (cum + h >= k_rem) {
          sh.bin = hi - j;
          sh.above = cum;
          break;
        }
        cum += h;
      }
    }
  }
  __syncthreads();
}

// By one warp (its 32 lanes together): of the m <= 32 keys list[0, m), the want-th largest T
// (1 <= want <= m) and how many keys equal to T are among the want largest (want minus the keys
// above T), written by one lane to *T_out and *need_out (shared; the caller syncs before reading).
// Pairwise comparisons: no histogram, no block barrier.
__device__ __forceinline__ void warp_rank_pick(const uint32_t* list, int m, int want, uint32_t* T_out, int* need_out) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  const uint32_t key = lane < m ? list[lane] : 0u;
  int gt = 0, ge = 0;
  for (int q = 0; q < m; ++q) {
    const uint32_t o = list[q];
    gt += o > key ? 1 : 0;
    ge += o >= key ? 1 : 0;
  }
  const unsigned hit = __ballot_sync(0xffffffffu, lane < m && gt < want && ge >= want);
  if (lane == __ffs(hit) - 1) {  // every lane holding T qualifies; want <= m: one does
    *T_out = key;
    *need_out = want - gt;
  }
}

// Loads n elements of `src` (T = float, bf16, or u32 keys), converts them to keys in shared memory
// and histograms their top 12 bits. `keys_base` has n + kKeyPad words; returns the pointer where
// element i's key lives (keys_base + misalignment). `hist` must be zeroed and synced by the caller.
template <typename T>
__device__ __forceinline__ uint32_t* load_keys(const T* __restrict__ src, int n, uint32_t* keys_base,
                                               uint32_t* hist) {
  constexpr int V = 16 / sizeof(T);
  const int mis = static_cast<int>((reinterpret_cast<uintptr_t>(src) / sizeof(T)) % V);
  uint32_t* keys = keys_base + mis;
  int head = (V - mis) % V;
  if (head > n) head = n;
  {  // unaligned head (< V elements)
    const int i = threadIdx.x;
    const bool act = i < head;
    const uint32_t key = act ? key_of(src[i]) : 0u;
    if (act) keys[i] = key;
    if (threadIdx.x < 32) hist_add(hist, key >> 20, act);
  }
  const int nvec = (n - head) / V;
  const uint4* vsrc = reinterpret_cast<const uint4*>(src + head);
  constexpr int kUnroll = 4;
  for (int base = 0; base < nvec; base += kTopkThreads * kUnroll) {
    uint4 raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = base + u * kTopkThreads + threadIdx.x;
      raw[u] = v < nvec ? __ldg(vsrc + v) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = base + u * kTopkThreads + threadIdx.x;
      const bool act = v < nvec;
      const T* e = reinterpret_cast<const T*>(&raw[u]);
      uint32_t k4[V], bin[V];
      bool on[V];
#pragma unroll
      for (int j = 0; j < V; ++j) {
        k4[j] = key_of(e[j]);
        bin[j] = k4[j] >> 20;
        on[j] = act;
      }
      if (act) {
        uint4* dst = reinterpret_cast<uint4*>(keys + head + v * V);
#pragma unroll
        for (int j = 0; j < V; j += 4) dst[j / 4] = make_uint4(k4[j], k4[j + 1], k4[j + 2], k4[j + 3]);
      }
      hist_add_v<V>(hist, bin, on);
    }
  }
  const int tail0 = head + nvec * V;
  {  // tail (< V elements)
    const int i = tail0 + threadIdx.x;
    const bool act = i < n;
    const uint32_t key = act ? key_of(src[i]) : 0u;
    if (act) keys[i] = key;
    if (threadIdx.x < 32) hist_add(hist, key >> 20, act);
  }
  return keys;
}

// Digits 2 and 3 (bits 19..10, then 9..0) over the keys[0..n) whose top 12 bits are b1: the exact
// k_rem-th largest among them, T, and how many keys equal to T to take (smallest positions first).
__device__ __forceinline__ void find_threshold_rest(const uint32_t* keys, int n, uint32_t b1, int k_rem, uint32_t* hist,
                                                    TopkShared& sh, uint32_t* T_out, int* need_out) {
  for (int i = threadIdx.x; i < kBins2; i += kTopkThreads) hist[i] = 0;
  __syncthreads();
  for (int base = 0; base < n; base += kTopkThreads) {
    const int i = base + threadIdx.x;
    const uint32_t key = i < n ? keys[i] : 0u;
    hist_add(hist, (key >> 10) & (kBins2 - 1), i < n && (key >> 20) == b1);
  }
  __syncthreads();
  find_bin(hist, kBins2, k_rem, sh);
  const uint32_t p2 = (b1 << 10) | sh.bin;  // key >> 10
  k_rem -= sh.above;
  // Every key of the 22-bit bin is needed (usually one key is left): the threshold is the bin's
  // lower bound - 1 and the third digit is skipped. p2 > 0: not among the absent / NaN keys.
  const bool whole_bin = p2 > 0u && static_cast<int>(hist[sh.bin]) == k_rem;
  __syncthreads();  // hist[sh.bin] read before the third digit or the caller rewrites hist
  if (whole_bin) {
    *T_out = (p2 << 10) - 1u;
    *need_out = 0;
    return;
  }
  for (int i = threadIdx.x; i < kBins2; i += kTopkThreads) hist[i] = 0;
  __syncthreads();
  for (int base = 0; base < n; base += kTopkThreads) {
    const int i = base + threadIdx.x;
    const uint32_t key = i < n ? keys[i] : 0u;
    hist_add(hist, key & (kBins2 - 1), i < n && (key >> 10) == p2);
  }
  __syncthreads();
  find_bin(hist, kBins2, k_rem, sh);
  *T_out = (p2 << 10) | sh.bin;
  *need_out = k_rem - sh.above;
}

// Given keys[0..n) in shared memory and the 12-bit histogram of all of them (synced), finds the
// exact k-th largest key T and the number of keys equal to T to take (smallest positions first).
__device__ __forceinline__ void find_threshold(const uint32_t* keys, int n, int k, uint32_t* hist,
                                               TopkShared& sh, uint32_t* T_out, int* need_out) {
  find_bin(hist, kBins1, k, sh);
  const uint32_t b1 = sh.bin;
  const int k_rem = k - sh.above;
  __syncthreads();  // everyone has read sh before find_threshold_rest rewrites it
  find_threshold_rest(keys, n, b1, k_rem, hist, sh, T_out, need_out);
}

// Ordered compaction: keys[i] >= lo_key move, in position order, to out_key / out_pos (position).
// Returns how many. Ends synced. Each lane takes two aligned 16-byte vectors (8 keys) per step and
// their flags as one bit mask; one warp scan per step places them (H200 profile, a 32K row: one key
// per lane with a ballot per key cost ~0.8 instructions per key, a third of the selection; one
// vector per lane still ~0.75, the scan and the store addresses per 4 keys). Up to 3 words before
// keys[0] and 7 after keys[n - 1] are read and ignored: they must lie in the block's shared
// memory (every caller has a pad or another array there).
__device__ __forceinline__ int compact_ge(const uint32_t* keys, int n, uint32_t lo_key, uint32_t* out_key, int* out_pos,
                                          TopkShared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int mis = static_cast<int>((reinterpret_cast<uintptr_t>(keys) >> 2) & 3u);
  const uint4* vk = reinterpret_cast<const uint4*>(keys - mis);
  const int np = (n + mis + 7) >> 3;  // pairs of vectors covering positions [-mis, n)
  const int seg = ((np + kTopkWarps - 1) / kTopkWarps + 31) & ~31;
  const int lo = warp * seg;
  const int hi = min(np, lo + seg);
  // Keys of pair p (positions 8 p - mis ..) and which of them move (bit e: in range, >= lo_key).
  auto take = [&](int p, uint4& a, uint4& b) {
    a = vk[2 * p];
    b = vk[2 * p + 1];
    const int i0 = 8 * p - mis;
    unsigned f = (a.x >= lo_key ? 1u : 0u) | (a.y >= lo_key ? 2u : 0u) | (a.z >= lo_key ? 4u : 0u) |
                 (a.w >= lo_key ? 8u : 0u) | (b.x >= lo_key ? 16u : 0u) | (b.y >= lo_key ? 32u : 0u) |
                 (b.z >= lo_key ? 64u : 0u) | (b.w >= lo_key ? 128u : 0u);
    if (i0 < 0 || i0 + 8 > n) {  // the first or last pair of the keys
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if (static_cast<unsigned>(i0 + e) >= static_cast<unsigned>(n)) f &= ~(1u << e);
      }
    }
    return f;
  };
  int c = 0;
  for (int p = lo + lane; p < hi; p += 32) {
    uint4 a, b;
    c += __popc(take(p, a, b));
  }
  c = __reduce_add_sync(0xffffffffu, c);
  if (lane == 0) sh.warp_gt[warp] = c;
  __syncthreads();
  int before = lane < warp ? sh.warp_gt[lane] : 0;
  int total = sh.warp_gt[lane];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    before += __shfl_xor_sync(0xffffffffu, before, o);
    total += __shfl_xor_sync(0xffffffffu, total, o);
  }
  for (int base = lo; base < hi; base += 32) {  // warp-uniform
    const int p = base + lane;
    uint4 a = make_uint4(0u, 0u, 0u, 0u), b = a;
    const unsigned f = p < hi ? take(p, a, b) : 0u;
    // Position order = lane order, then the 8 keys of a lane.
    const int cnt = __popc(f);
    const int incl = warp_inclusive_scan(cnt);
    if (f != 0u) {
      uint32_t* ok = out_key + (before + incl - cnt);
      int* op = out_pos + (before + incl - cnt);
      const int i0 = 8 * p - mis;
      const uint32_t kk[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if (f & (1u << e)) {
          *ok++ = kk[e];
          *op++ = i0 + e;
        }
      }
    }
    before += __shfl_sync(0xffffffffu, incl, 31);
  }
  __syncthreads();
  return total;
}

// Place of an element in the ordered winners {key > T} + the first `need` keys == T, given the
// winners' counts before it (g_before keys > T, e_before keys == T, both advanced here); -1 when
// it is not a winner. Elements must be visited in position order.
__device__ __forceinline__ int winner_pos(uint32_t key, uint32_t T, int need, int& g_before, int& e_before) {
  int pos = -1;
  if (key > T) {
    pos = g_before + min(e_before, need);
    ++g_before;
  } else if (key == T) {
    if (e_before < need) pos = g_before + e_before;
    ++e_before;
  }
  return pos;
}

// The length of each warp's segment in select_in_order_keyed (a multiple of 32).
__device__ __forceinline__ int select_segment(int n, int nwarps) { return ((n + nwarps - 1) / nwarps + 31) & ~31; }

// select_in_order_keyed's ordered write of one warp's segment [lo, hi), given the keys > T and
// == T in the segments before it. All 32 lanes together; no barrier.
// kNoTies: a loop of its own for need == 0 (the winners are exactly the keys > T: one comparison
// and one ballot per step), taken at run time.
template <bool kNoTies = false, typename KeyAt, typename IdxOf>
__device__ __forceinline__ void select_in_order_write(KeyAt key_at, int lo, int hi, uint32_t T, int need,
                                                      int gt_before, int eq_before, uint32_t* out_key,
                                                      int* out_idx, IdxOf idx_of) {
  const int lane = threadIdx.x & 31;
  const unsigned lt = (1u << lane) - 1u;
  int sel_before = gt_before + min(eq_before, need);
  if (kNoTies && need == 0) {  // uniform
    for (int base = lo; base < hi; base += 32) {
      const int i = base + lane;
      const bool sel = i < hi && key_at(i) > T;
      const unsigned sel_mask = __ballot_sync(0xffffffffu, sel);
      if (sel) {
        const int pos = sel_before + __popc(sel_mask & lt);
        out_key[pos] = key_at(i);
        out_idx[pos] = idx_of(i);
      }
      sel_before += __popc(sel_mask);
    }
    return;
  }
  for (int base = lo; base < hi; base += 32) {
    const int i = base + lane;
    const uint32_t key = i < hi ? key_at(i) : 0u;
    const bool gt = i < hi && key > T;
    const bool eq = i < hi && key == T;
    const unsigned eq_mask = __ballot_sync(0xffffffffu, eq);
    const bool sel = gt || (eq && eq_before + __popc(eq_mask & lt) < need);
    const unsigned sel_mask = __ballot_sync(0xffffffffu, sel);
    if (sel) {
      const int pos = sel_before + __popc(sel_mask & lt);
      out_key[pos] = key;
      out_idx[pos] = idx_of(i);
    }
    eq_before += __popc(eq_mask);
    sel_before += __popc(sel_mask);
  }
}

// Writes the selected elements ({key > T} plus the first `need` with key == T, ties kept in position
// order) in position order to out_key / out_idx, with out_idx[pos] = idx_of(i) for element i whose
// key is key_at(i). Run by `nwarps` warps (the whole block); warp_gt / warp_eq are shared scratch
// of >= nwarps ints. Warp w owns a contiguous segment, so the output order is the position order.
// Ends synced (sync_end false: not, for a caller that exits right after). key_at reads shared keys
// (select_in_order_by) or a global row (the filter's stream_select_in_order); it is called twice
// per element.
template <typename KeyAt, typename IdxOf>
__device__ __forceinline__ void select_in_order_keyed(KeyAt key_at, int n, uint32_t T, int need, int nwarps,
                                                      int* warp_gt, int* warp_eq, uint32_t* out_key, int* out_idx,
                                                      IdxOf idx_of, bool sync_end = true) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int seg = select_segment(n, nwarps);
  const int lo = warp * seg;
  const int hi = min(n, lo + seg);
  int n_gt = 0, n_eq = 0;
  for (int base = lo; base < hi; base += 32) {
    const int i = base + lane;
    const uint32_t key = i < hi ? key_at(i) : 0u;
    n_gt += __popc(__ballot_sync(0xffffffffu, i < hi && key > T));
    n_eq += __popc(__ballot_sync(0xffffffffu, i < hi && key == T));
  }
  if (lane == 0) {
    warp_gt[warp] = n_gt;
    warp_eq[warp] = n_eq;
  }
  __syncthreads();
  // One warp reduction each (REDUX), not five shuffle-and-add steps.
  const int eq_before = __reduce_add_sync(0xffffffffu, lane < warp ? warp_eq[lane] : 0);
  const int gt_before = __reduce_add_sync(0xffffffffu, lane < warp ? warp_gt[lane] : 0);
  select_in_order_write(key_at, lo, hi, T, need, gt_before, eq_before, out_key, out_idx, idx_of);
  if (sync_end) __syncthreads();
}

// select_in_order_keyed over keys in shared memory.
template <typename IdxOf>
__device__ __forceinline__ void select_in_order_by(const uint32_t* keys, int n, uint32_t T, int need, int nwarps,
                                                   int* warp_gt, int* warp_eq, uint32_t* out_key, int* out_idx,
                                                   IdxOf idx_of, bool sync_end = true) {
  select_in_order_keyed([&](int i) { return keys[i]; }, n, T, need, nwarps, warp_gt, warp_eq, out_key, out_idx,
                        idx_of, sync_end);
}

// select_in_order_by over the standalone top-k block: out_idx = the element's position.
__device__ __forceinline__ void select_in_order(const uint32_t* keys, int n, uint32_t T, int need,
                                                uint32_t* sel_key, int* sel_pos, TopkShared& sh) {
  select_in_order_by(keys, n, T, need, kTopkWarps, sh.warp_gt, sh.warp_eq, sel_key, sel_pos,
                     [](int i) { return i; });
}

// Full block-level selection: keys (already in smem with the 12-bit histogram in region, synced)
// -> the k winners in position order: keys in sel_key = region, indices map(position) in out_idx
// (shared or global memory, k entries). Requires n >= k. Usual case: only the keys at or above the
// first digit's threshold bin (about k plus one bin) move to the mlist, and digits 2-3 and the
// ordered write run over that short list; when it would overflow (heavy ties, a threshold among
// NaNs) everything runs over the full keys. Ends synced.
template <typename Map>
__device__ __forceinline__ void select_topk_by(const uint32_t* keys, int n, int k, int k_pad, int m_cap,
                                               uint32_t* region, TopkShared& sh, int* out_idx, Map map,
                                               uint32_t* T_out = nullptr) {
  uint32_t* sel_key = region;
  uint32_t* ml_key = region + sel_words(k_pad);
  int* ml_pos = reinterpret_cast<int*>(ml_key + m_cap);
  find_bin(region, kBins1, k, sh);
  const uint32_t b1 = sh.bin;
  const int above1 = sh.above;
  const int m = above1 + static_cast<int>(region[b1]);
  __syncthreads();  // everyone has read sh and region[b1]
  uint32_t T;
  int need;
  if (m > m_cap || b1 == 0) {
    find_threshold_rest(keys, n, b1, k - above1, region, sh, &T, &need);
    if (T_out) *T_out = T;
    select_in_order_by(keys, n, T, need, kTopkWarps, sh.warp_gt, sh.warp_eq, sel_key, out_idx,
                       [&](int i) { return map(i); });
    return;
  }
  compact_ge(keys, n, b1 << 20, ml_key, ml_pos, sh);
  find_threshold_rest(ml_key, m, b1, k - above1, region, sh, &T, &need);
  if (T_out) *T_out = T;
  select_in_order_by(ml_key, m, T, need, kTopkWarps, sh.warp_gt, sh.warp_eq, sel_key, out_idx,
                     [&](int i) { return map(ml_pos[i]); });
}

// select_topk_by into the block's own arrays: sel_key = region, sel_pos = region + k_pad (positions).
__device__ __forceinline__ void select_topk(const uint32_t* keys, int n, int k, int k_pad, int m_cap,
                                            uint32_t* region, TopkShared& sh, uint32_t* T_out = nullptr) {
  select_topk_by(keys, n, k, k_pad, m_cap, region, sh, reinterpret_cast<int*>(region + k_pad), [](int p) { return p; },
                 T_out);
}

// Ranks (key, index) pairs: true when a ranks strictly below b (smaller key, or equal key and
// larger index). Index -1 / INT_MAX padding carries key 0 and so ranks last.
__device__ __forceinline__ bool ranks_below(uint32_t ka, int ia, uint32_t kb, int ib) {
  return ka < kb || (ka == kb && ia > ib);
}

// Bitonic sort of p (power of two) pairs in shared memory, descending by rank. Ends synced.
// Pair t of a stage with stride s is (lo, lo + s), lo = ((t >> log s) << (log s + 1)) | (t & (s-1)).
// With s <= 32 the pairs of t in [32w, 32w + 32) stay inside elements [64w, 64w + 64), and a
// thread keeps the same t across stages, so two such stages in a row need only __syncwarp.
__device__ __forceinline__ void sort_desc(uint32_t* key, int* idx, int p) {
  const int half = p >> 1;
  for (int size = 2; size <= p; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      const int ls = __ffs(stride) - 1;
      for (int t = threadIdx.x; t < half; t += kTopkThreads) {
        const int lo = ((t >> ls) << (ls + 1)) | (t & (stride - 1));
        const int hi = lo + stride;
        const bool desc = (lo & size) == 0;
        const uint32_t ka = key[lo], kb = key[hi];
        const int ia = idx[lo], ib = idx[hi];
        const bool swap = desc ? ranks_below(ka, ia, kb, ib) : ranks_below(kb, ib, ka, ia);
        if (swap) {
          key[lo] = kb;
          key[hi] = ka;
          idx[lo] = ib;
          idx[hi] = ia;
        }
      }
      // A stage with stride > 32 writes across warps; so does the next one when its stride > 32.
      const int next = stride > 1 ? stride >> 1 : size;  // the next stage's stride
      if (stride > 32 || next > 32) {
        __syncthreads();
      } else {
        __syncwarp();
      }
    }
  }
  __syncthreads();
}

}  // namespace topk_detail
}  // namespace cuda
}  // namespace dsattn
