// Grid-level top-k kernels built on topk_kernel.cuh. Shared by dsattn::topk and the fused
// paged_mqa_topk (which produces candidates from its own scoring epilogue, then reuses the merge
// and final kernels below).
//
// Flow for one row (length len, k < len):
//   direct (row fits in shared memory):      topk_final_kernel<T, false>  (one CTA per row), or
//                                            topk_small_kernel<T, V, sorted> (rows of <= 8K, keys
//                                            in registers)
//   cluster (sm_90+, few rows of 8K..64K):   topk_cluster_kernel<T, V, sorted, push, gather>
//                                            (topk_cluster.cuh)
//   split  (long rows, or few rows):         topk_chunk_kernel<T>  -> [topk_merge_kernel]* ->
//                                            topk_final_kernel<T, true>
// Each chunk / merge CTA keeps the exact top-k of its range in position order (kc = round_up(k, 4)
// slots, empty slots = key 0 / index -1), so concatenating chunks in order keeps the global index
// order and "smaller position wins" stays "smaller index wins". The union of per-chunk top-ks
// contains the row's top-k, so merging is exact.
#pragma once
#include <climits>
#include <cstdint>

#include "common/indexer_work.h"
#include "cuda/common/topk_kernel.cuh"

namespace dsattn {
namespace cuda {
namespace topk_detail {

// Row extent: either explicit [start, end) bounds (topk) or, for paged_mqa_topk's logits route,
// the indexer's own row windows (indexer_row_window: the N rule, [B, N] and varlen lengths, and an
// empty row for a varlen row_request outside the block table, as the streaming route sees them).
struct TopkRowBounds {
  // topk: starts / ends (optional; absent = 0 / width), clamped into [0, width].
  const int32_t* starts = nullptr;  // [R]
  int64_t starts_stride = 0;
  const int32_t* ends = nullptr;  // [R]
  int64_t ends_stride = 0;
  int width = 0;
  // paged_mqa_topk's logits route: row r is row r % rows_per_group of group r / rows_per_group of
  // `work`, capped at `width` when it is > 0.
  bool paged = false;
  detail::IndexerWork work;

  // Rows that start at position 0 whatever their bounds (the fused route's, and topk's without
  // `starts`): a kernel may load their keys up to `width` before it reads the length, so that the
  // two loads are in flight together (the length then masks the keys). Only on launches of at
  // most kEarlyRows rows: the keys beyond a short row's length are read for nothing.
  static constexpr int64_t kEarlyRows = 128;
  __device__ __forceinline__ bool early_keys(int64_t rows) const {
    return (paged || starts == nullptr) && rows <= kEarlyRows;
  }

  __device__ __forceinline__ void get(int64_t r, int* start, int* len) const {
    if (paged) {
      const int64_t g = detail::div_small(r, work.rows_per_group);
      // The row's length, also where work.skip_len left it unscored (len <= k: the top-k kernels
      // then write 0..len-1 without reading its scores, unsorted and without values).
      int64_t L = detail::indexer_row_length(work, g, static_cast<int>(r - g * work.rows_per_group));
      if (width > 0 && L > width) L = width;  // states beyond the rows' width are not scored
      *start = 0;
      *len = static_cast<int>(L);
      return;
    }
    int s = starts ? starts[r * starts_stride] : 0;
    int e = ends ? ends[r * ends_stride] : width;
    s = s < 0 ? 0 : (s > width ? width : s);
    e = e < s ? s : (e > width ? width : e);
    *start = s;
    *len = e - s;
  }
};

// Where and what the final kernel writes.
struct TopkOutputs {
  int32_t* indices = nullptr;  // [R, k] (row stride indices_ld)
  int64_t indices_ld = 0;
  float* values = nullptr;  // optional [R, k]
  int64_t values_ld = 0;
  int32_t* slots = nullptr;  // optional [R, k]
  int64_t slots_ld = 0;
  const int32_t* block_table = nullptr;  // [bt_rows, max_pages] (row stride bt_ld)
  int64_t bt_ld = 0;
  int64_t bt_rows = 0;
  int64_t max_pages = 0;
  const int32_t* row_request = nullptr;  // optional [R]
  int64_t rr_stride = 0;
  int next_n = 1;
  int states_per_page = 0;

  // Entry j of row r: index idx (-1: padding), its value value() when values are requested (-inf
  // for padding; value is not called then) and its slot id.
  template <typename ValueFn>
  __device__ __forceinline__ void write(int64_t r, int j, int32_t idx, ValueFn value) const {
    indices[r * indices_ld + j] = idx;
    if (values) values[r * values_ld + j] = idx >= 0 ? value() : -__int_as_float(0x7f800000);
    if (slots) slots[r * slots_ld + j] = slot_of(r, idx);
  }
  // Unsorted output of indices only: winners can go straight to `indices` as they are selected.
  __device__ __forceinline__ bool indices_only(bool sorted) const { return !sorted && !values && !slots; }

  // 32-bit divisions: rows (grid indices) and state indices are below 2^31, and each 64-bit
  // division is a long software sequence inlined at every write site (code the SM must fetch).
  __device__ __forceinline__ int32_t slot_of(int64_t r, int32_t idx) const {
    if (idx < 0) return -1;
    const int64_t b = row_request ? row_request[r * rr_stride] : static_cast<int32_t>(r) / next_n;
    const int32_t page = idx / states_per_page;
    if (b < 0 || b >= bt_rows || page >= max_pages) return -1;
    return block_table[b * bt_ld + page] * states_per_page + (idx - page * states_per_page);
  }
};

template <typename T>
__device__ __forceinline__ const T* row_ptr(const T* base, int64_t ld, int64_t r) {
  return base + r * ld;
}

// Last step of a row: sel_key / sel_pos [0, count) hold the winners (index order); pads the rest
// of k_pad, sorts on request, writes indices (-1 padding), values (from `src` when given, else
// decoded from the keys; -inf padding) and slot ids.
template <typename T>
__device__ __forceinline__ void finish_row(uint32_t* sel_key, int* sel_pos, int count, int k, int k_pad, bool sorted,
                                           const T* src, int64_t r, const TopkOutputs& out) {
  for (int j = count + threadIdx.x; j < k_pad; j += kTopkThreads) {
    sel_key[j] = kAbsentKey;
    sel_pos[j] = INT_MAX;
  }
  __syncthreads();
  if (sorted) sort_desc(sel_key, sel_pos, k_pad);
  for (int j = threadIdx.x; j < k; j += kTopkThreads) {
    const int32_t idx = j < count ? sel_pos[j] : -1;
    out.write(r, j, idx, [&] { return src ? to_float(src[idx]) : key_to_float(sel_key[j]); });
  }
}

// The output of a row of len <= k positions without its scores (unsorted, no values): 0..len-1,
// then -1 padding. Block-wide, no shared memory.
__device__ __forceinline__ void write_position_row(int len, int k, int64_t r, const TopkOutputs& out) {
#pragma unroll 1
  for (int j = threadIdx.x; j < k; j += kTopkThreads) out.write(r, j, j < len ? j : -1, [] { return 0.0f; });
}

// A row of len <= k positions: all of them, in order, then finish_row. Block-wide.
template <typename T>
__device__ __forceinline__ void finish_short_row(const T* src, int len, int k, int k_pad, bool sorted, uint32_t* sel_key,
                                                 int* sel_pos, int64_t r, const TopkOutputs& out) {
  for (int j = threadIdx.x; j < k_pad; j += kTopkThreads) {
    const bool v = j < len;
    sel_key[j] = v ? key_of(src[j]) : kAbsentKey;
    sel_pos[j] = v ? j : INT_MAX;
  }
  __syncthreads();
  finish_row(sel_key, sel_pos, len, k, k_pad, sorted, src, r, out);
}

// The same output as finish_short_row for unsorted output (0..len-1, then -1 padding), written
// straight from the row: no shared memory, no barrier, and a kernel's short-row code stays small
// (the small and cluster kernels jump over it to their rows' code).
template <typename T>
__device__ __forceinline__ void write_short_row(const T* src, int len, int k, int64_t r, const TopkOutputs& out) {
#pragma unroll 1
  for (int j = threadIdx.x; j < k; j += kTopkThreads) {
    const int32_t idx = j < len ? j : -1;
    out.write(r, j, idx, [&] { return to_float(src[idx]); });
  }
}

extern __shared__ __align__(16) uint32_t topk_dyn_smem[];

// grid (R, C). Chunk c of row r covers positions [c * chunk_len, (c+1) * chunk_len) of the row;
// writes its top-k (index order, kc slots) to out_key / out_idx [R, C, kc] (index relative to start).
template <typename T>
__global__ void __launch_bounds__(kTopkThreads)
    topk_chunk_kernel(const T* __restrict__ logits,  // [R, W] (row stride ld)
                      int64_t ld, TopkRowBounds rb, int k, int kc, int k_pad, int m_cap, int chunk_len,
                      uint32_t* __restrict__ out_key,  // [R, C, kc]
                      int32_t* __restrict__ out_idx) {  // [R, C, kc]
  pdl_trigger();  // pdl.cuh: before any global-memory access
  pdl_wait();
  __shared__ TopkShared sh;
  const int64_t r = blockIdx.x;
  const int c = blockIdx.y;
  int start, len;
  rb.get(r, &start, &len);
  const int lo = c * chunk_len;
  int m = len - lo;
  m = m < 0 ? 0 : (m > chunk_len ? chunk_len : m);
  const T* src = row_ptr(logits, ld, r) + start + lo;
  const int64_t o = (r * gridDim.y + c) * int64_t(kc);
  if (m <= k) {
    for (int j = threadIdx.x; j < kc; j += kTopkThreads) {
      out_key[o + j] = j < m ? key_of(src[j]) : kAbsentKey;
      out_idx[o + j] = j < m ? lo + j : -1;
    }
    return;
  }
  uint32_t* keys_base = topk_dyn_smem;
  uint32_t* region = topk_dyn_smem + chunk_len + kKeyPad;
  uint32_t* sel_key = region;
  int* sel_pos = reinterpret_cast<int*>(region + k_pad);
  for (int i = threadIdx.x; i < kBins1; i += kTopkThreads) region[i] = 0;
  __syncthreads();
  const uint32_t* keys = load_keys(src, m, keys_base, region);
  __syncthreads();
  select_topk(keys, m, k, k_pad, m_cap, region, sh);
  for (int j = threadIdx.x; j < kc; j += kTopkThreads) {
    out_key[o + j] = j < k ? sel_key[j] : kAbsentKey;
    out_idx[o + j] = j < k ? lo + sel_pos[j] : -1;
  }
}

// grid (R, C_out). Merges fan_n consecutive candidates (a multiple of kc) of each row into kc.
template <int kUnused = 0>
__global__ void __launch_bounds__(kTopkThreads)
    topk_merge_kernel(const uint32_t* __restrict__ in_key,  // [R, in_n]
                      const int32_t* __restrict__ in_idx,   // [R, in_n]
                      int in_n, int fan_n, int k, int kc, int k_pad, int m_cap,
                      uint32_t* __restrict__ out_key,  // [R, C_out, kc]
                      int32_t* __restrict__ out_idx) {
  pdl_trigger();  // pdl.cuh: before any global-memory access
  pdl_wait();
  __shared__ TopkShared sh;
  const int64_t r = blockIdx.x;
  const int c = blockIdx.y;
  const int lo = c * fan_n;
  const int m = min(fan_n, in_n - lo);
  const uint32_t* src_key = in_key + r * in_n + lo;
  const int32_t* src_idx = in_idx + r * in_n + lo;
  const int64_t o = (r * gridDim.y + c) * int64_t(kc);
  if (m <= kc) {
    for (int j = threadIdx.x; j < kc; j += kTopkThreads) {
      out_key[o + j] = j < m ? src_key[j] : kAbsentKey;
      out_idx[o + j] = j < m ? src_idx[j] : -1;
    }
    return;
  }
  uint32_t* keys_base = topk_dyn_smem;
  uint32_t* region = topk_dyn_smem + fan_n + kKeyPad;
  uint32_t* sel_key = region;
  int* sel_pos = reinterpret_cast<int*>(region + k_pad);
  for (int i = threadIdx.x; i < kBins1; i += kTopkThreads) region[i] = 0;
  __syncthreads();
  const uint32_t* keys = load_keys(src_key, m, keys_base, region);
  __syncthreads();
  select_topk(keys, m, k, k_pad, m_cap, region, sh);
  for (int j = threadIdx.x; j < kc; j += kTopkThreads) {
    out_key[o + j] = j < k ? sel_key[j] : kAbsentKey;
    out_idx[o + j] = j < k ? src_idx[sel_pos[j]] : -1;
  }
}

// grid (R). Rows of at most V * kTopkThreads positions (the direct plan's short rows): thread t
// holds the keys of positions [t V, t V + V) in registers, three radix digits (bits 31..20,
// 19..10, 9..0) with shared-memory histograms find the k-th key T and how many keys equal to T
// to take, and one block scan of the per-thread (greater, equal) counts places the k winners in
// index order; unsorted, they go straight to the outputs. topk_final_kernel stages the keys in
// shared memory and compacts them to a short list first, about twice the barrier chain (H200,
// k = 2048, 1 x 8K: 13.6 us against 11.8). Phase timing (clock64, H200, 1 x 8K) of this kernel:
// every barrier-separated phase of the 1024-thread block costs 1000-3000 cycles, so the kernel
// keeps phases few: 16-byte loads of each thread's run, one warp-wide bin test per V keys
// (hist_add_v) and no staging pass for unsorted output.
constexpr int kSmallMaxV = 8;  // keys per thread of topk_small_kernel at most (see TopkTuning)
// Dynamic shared memory of topk_small_kernel, in u32: three histograms, later (sel_key, sel_pos).
__host__ __device__ inline int small_words(int k_pad) {
  return 2 * k_pad > kBins1 + 2 * kBins2 ? 2 * k_pad : kBins1 + 2 * kBins2;
}

// Keys of V elements at p through V * sizeof(T) / sizeof(W) loads of word type W (uint4, uint2).
template <typename W, typename T, int V>
__device__ __forceinline__ void load_keys_as(const T* __restrict__ p, uint32_t (&key)[V]) {
  constexpr int kWords = V * static_cast<int>(sizeof(T)) / static_cast<int>(sizeof(W));
  W raw[kWords];
#pragma unroll
  for (int i = 0; i < kWords; ++i) raw[i] = __ldg(reinterpret_cast<const W*>(p) + i);
  const T* e = reinterpret_cast<const T*>(raw);
#pragma unroll
  for (int v = 0; v < V; ++v) key[v] = key_of(e[v]);
}

// Keys of the V positions [p, p + V) of a row; vector loads when the run is whole and `aligned`
// (the row start is 16-byte aligned, so every run of V elements is V * sizeof(T)-byte aligned).
template <typename T, int V>
__device__ __forceinline__ void load_run_keys(const T* __restrict__ p, int avail, bool aligned, uint32_t (&key)[V]) {
  constexpr int kBytes = V * static_cast<int>(sizeof(T));
  static_assert(kBytes % 8 == 0, "runs of whole 8-byte words");
  if (aligned && avail >= V) {
    if constexpr (kBytes % 16 == 0) {
      load_keys_as<uint4>(p, key);
    } else {
      load_keys_as<uint2>(p, key);
    }
  } else {
#pragma unroll
    for (int v = 0; v < V; ++v) key[v] = v < avail ? key_of(p[v]) : kAbsentKey;
  }
}

// A thread's run of V keys in registers, positions [base, base + V) of a row of len (the small and
// cluster kernels). Radix digit of the run: act = the key is in the row and its bits from kShift +
// kBits up equal `prefix` (none for the first digit, kShift + kBits = 32); bin = bits [kShift,
// kShift + kBits).
template <int kShift, int kBits, int V>
__device__ __forceinline__ void run_digit(const uint32_t (&key)[V], int base, int len, uint32_t prefix,
                                          bool (&act)[V], uint32_t (&bin)[V]) {
  constexpr int kTop = kShift + kBits;
#pragma unroll
  for (int v = 0; v < V; ++v) {
    if constexpr (kTop >= 32) {
      (void)prefix;
      act[v] = base + v < len;
    } else {
      act[v] = base + v < len && (key[v] >> kTop) == prefix;
    }
    bin[v] = (key[v] >> kShift) & ((1u << kBits) - 1u);
  }
}

// run_digit for the 10-bit digits at a run-time shift (10 or 0): act = the key is in the row and
// its bits from shift + 10 up equal `prefix`; bin = bits [shift, shift + 10). The second and
// third digits of the small and cluster kernels share one rolled copy of their code.
template <int V>
__device__ __forceinline__ void run_digit10(const uint32_t (&key)[V], int base, int len, uint32_t prefix, int shift,
                                            bool (&act)[V], uint32_t (&bin)[V]) {
#pragma unroll
  for (int v = 0; v < V; ++v) {
    act[v] = base + v < len && (key[v] >> (shift + 10)) == prefix;
    bin[v] = (key[v] >> shift) & (kBins2 - 1u);
  }
}

// After digit d (1: bits 19..10, 2: bits 9..0) of the small and cluster kernels' rolled loop chose
// its bin: prefix = the key's bits down to that digit, k_rem = the winners still to place in the
// bin, count = the keys in it. True when the threshold is known: after the third digit (T = the
// key, need = k_rem), or when the 22-bit bin is needed whole, as in find_threshold_rest (T = its
// lower bound - 1, need = 0; prefix > 0: not among the absent / NaN keys).
__device__ __forceinline__ bool digits_done(int d, uint32_t prefix, int k_rem, int count, uint32_t* T_key, int* need) {
  if (d == 2) {
    *T_key = prefix;
    *need = k_rem;
    return true;
  }
  if (prefix > 0u && count == k_rem) {
    *T_key = (prefix << 10) - 1u;
    *need = 0;
    return true;
  }
  return false;
}

// The run's keys > T (low 16 bits) and == T (high 16 bits), packed for one shared scan.
template <int V>
__device__ __forceinline__ int run_counts(const uint32_t (&key)[V], int base, int len, uint32_t T) {
  int g = 0, e = 0;
#pragma unroll
  for (int v = 0; v < V; ++v) {
    g += base + v < len && key[v] > T ? 1 : 0;
    e += base + v < len && key[v] == T ? 1 : 0;
  }
  return (e << 16) | g;
}

// Unsorted output: the run's winners (keys > T, then the first `need` == T over the row, given the
// winners before the run: g_before / e_before) straight to the outputs, in index order.
// The winners are marked in a bit mask first and written by one rolled loop, so the write code
// (indices, values, slot ids) exists once instead of V times (clock64 on an H200, topk 1 x 8K,
// thread 0: the write phase took 4000-5700 cycles unrolled, 2100-2300 rolled, for ~2 winners per
// thread; each phase of these kernels runs once, so its code is fetched cold).
template <typename T, int V>
__device__ __forceinline__ void run_write(const uint32_t (&key)[V], int base, int len, uint32_t T_key, int need,
                                          int g_before, int e_before, const T* src, int64_t r,
                                          const TopkOutputs& out) {
  int w = g_before + min(e_before, need);
  uint32_t mask = 0;
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const bool sel = base + v < len && (key[v] > T_key || (key[v] == T_key && e_before++ < need));
    mask |= sel ? 1u << v : 0u;
  }
#pragma unroll 1
  for (; mask != 0u; mask &= mask - 1u) {
    const int p = base + __ffs(mask) - 1;
    out.write(r, w++, p, [&] { return to_float(src[p]); });
  }
}

// Sorted output: the run's winners into (sel_key, sel_pos) at their places (see run_write).
template <int V>
__device__ __forceinline__ void run_stage(const uint32_t (&key)[V], int base, int len, uint32_t T_key, int need,
                                          int g_before, int e_before, uint32_t* sel_key, int* sel_pos) {
#pragma unroll
  for (int v = 0; v < V; ++v) {
    if (base + v >= len) continue;
    const int pos = winner_pos(key[v], T_key, need, g_before, e_before);
    if (pos >= 0) {
      sel_key[pos] = key[v];
      sel_pos[pos] = base + v;
    }
  }
}

// kSorted: sorted output, a template parameter so that the unsorted kernel holds no sort and its
// write follows the block scan in the code (see topk_cluster_kernel).
template <typename T, int V, bool kSorted>
__global__ void __launch_bounds__(kTopkThreads)
    topk_small_kernel(const T* __restrict__ logits,  // [R, W] (row stride ld)
                      int64_t ld, TopkRowBounds rb, int k, int k_pad, TopkOutputs out) {
  pdl_trigger();  // pdl.cuh: before any global-memory access
  pdl_wait();
  __shared__ TopkShared sh;
  const int64_t r = blockIdx.x;
  // The keys' loads go out before the row's length is read where the row starts at 0
  // (TopkRowBounds::early_keys): one round trip fewer before the first digit. H200, k = 2048,
  // paged_mqa_topk 1 x 8K (its lengths read through the indexer's work): 16.9-17.0 -> 16.4-16.6
  // us per call, 12.9-13.0 -> 12.6 back to back. The same order in topk_cluster_kernel measured
  // no gain (1 x 64K level, 1 x 16K and 1 x 32K 0.2-0.3 us slower), so that kernel keeps its own.
  const bool early = rb.early_keys(gridDim.x);
  int start = 0, len = rb.width;
  if (!early) rb.get(r, &start, &len);
  const T* src = row_ptr(logits, ld, r) + start;
  // [small_words(k_pad)]: the three digits' histograms (zeroed together up front, so no digit
  // waits on a zeroing pass), then sel_key / sel_pos over them.
  uint32_t* hist1 = topk_dyn_smem;
  uint32_t* hist2 = hist1 + kBins1;
  uint32_t* hist3 = hist2 + kBins2;
  uint32_t* sel_key = topk_dyn_smem;
  int* sel_pos = reinterpret_cast<int*>(topk_dyn_smem + k_pad);
  const int base = threadIdx.x * V;
  uint32_t key[V];
  load_run_keys<T, V>(src + base, len - base, reinterpret_cast<uintptr_t>(src) % 16 == 0, key);
  if (early) rb.get(r, &start, &len);  // start stays 0
  if (len <= k) {
    if constexpr (kSorted) {
      finish_short_row(src, len, k, k_pad, kSorted, sel_key, sel_pos, r, out);
    } else {
      write_short_row(src, len, k, r, out);
    }
    return;
  }
  for (int i = threadIdx.x; i < kBins1 + 2 * kBins2; i += kTopkThreads) hist1[i] = 0;
  bool act[V];
  uint32_t bin[V];
  run_digit<20, 12>(key, base, len, 0u, act, bin);
  __syncthreads();  // histograms zeroed
  hist_add_v<V>(hist1, bin, act);
  __syncthreads();
  find_bin(hist1, kBins1, k, sh);  // ends synced
  uint32_t prefix = sh.bin;  // the key's bits above the next digit
  int k_rem = k - sh.above;
  uint32_t T_key;
  int need;
  // The second and third digits, one rolled copy of the code (each phase is fetched cold; a
  // third digit runs the second's code again). The whole 22-bit bin needed (usually one key) ends
  // it after the second (digits_done; block-uniform).
#pragma unroll 1
  for (int d = 1;; ++d) {
    uint32_t* hist = d == 1 ? hist2 : hist3;
    run_digit10(key, base, len, prefix, d == 1 ? 10 : 0, act, bin);
    hist_add_v<V>(hist, bin, act);
    __syncthreads();
    find_bin(hist, kBins2, k_rem, sh);
    prefix = (prefix << 10) | sh.bin;
    k_rem -= sh.above;
    if (digits_done(d, prefix, k_rem, static_cast<int>(hist[sh.bin]), &T_key, &need)) break;
  }
  // Counts stay below 2^15 (len <= kSmallMaxV x 1024), so both prefixes share one scan. Its barrier
  // also ends every read of the histograms (hist[sh.bin] in the loop above) before sel_key / sel_pos
  // overwrite them.
  const int packed = block_exclusive_scan<false>(run_counts(key, base, len, T_key), sh);
  const int g_before = packed & 0xffff, e_before = packed >> 16;
  if constexpr (!kSorted) {  // the k winners (index order) straight to the outputs; no staging pass
    run_write(key, base, len, T_key, need, g_before, e_before, src, r, out);
  } else {
    run_stage(key, base, len, T_key, need, g_before, e_before, sel_key, sel_pos);
    __syncthreads();
    finish_row(sel_key, sel_pos, k, k, k_pad, kSorted, src, r, out);
  }
}

// grid (R). Final selection + optional sort + outputs. kFromCands: select from candidates
// [R, cand_n] (cand_n <= smem keys); else straight from the logits row (len <= keys_cap).
// Rows with len <= k emit 0..len-1 (then -1). Values come from `logits` when given, else from
// the keys (fused path: the scores only ever existed as keys).
template <typename T, bool kFromCands>
__global__ void __launch_bounds__(kTopkThreads)
    topk_final_kernel(const T* __restrict__ logits,  // [R, W] (row stride ld) or nullptr
                      int64_t ld, TopkRowBounds rb, int k, int k_pad, int m_cap, int keys_cap, bool sorted,
                      const uint32_t* __restrict__ cand_key,  // [R, cand_n] (kFromCands)
                      const int32_t* __restrict__ cand_idx,   // [R, cand_n]
                      int cand_n, TopkOutputs out) {
  pdl_trigger();  // pdl.cuh: before any global-memory access
  pdl_wait();
  __shared__ TopkShared sh;
  const int64_t r = blockIdx.x;
  int start, len;
  rb.get(r, &start, &len);
  const T* src = logits ? row_ptr(logits, ld, r) + start : nullptr;
  uint32_t* keys_base = topk_dyn_smem;
  uint32_t* region = topk_dyn_smem + keys_cap + kKeyPad;
  uint32_t* sel_key = region;
  int* sel_pos = reinterpret_cast<int*>(region + k_pad);
  const int count = len < k ? len : k;
  if (len <= k) {
    if (kFromCands && src == nullptr) {
      // Fused path: the candidates of a short row are all its states, in index order.
      for (int j = threadIdx.x; j < k_pad; j += kTopkThreads) {
        const bool v = j < len;
        sel_key[j] = v ? cand_key[r * cand_n + j] : kAbsentKey;
        sel_pos[j] = v ? cand_idx[r * cand_n + j] : INT_MAX;
      }
    } else {
      for (int j = threadIdx.x; j < k_pad; j += kTopkThreads) {
        const bool v = j < len;
        sel_key[j] = v ? key_of(src[j]) : kAbsentKey;
        sel_pos[j] = v ? j : INT_MAX;
      }
    }
    __syncthreads();
  } else {
    for (int i = threadIdx.x; i < kBins1; i += kTopkThreads) region[i] = 0;
    __syncthreads();
    int n;
    const uint32_t* keys;
    if (kFromCands) {
      n = cand_n;
      keys = load_keys(cand_key + r * cand_n, n, keys_base, region);
    } else {
      n = len;
      keys = load_keys(src, n, keys_base, region);
    }
    __syncthreads();
    // The winners' indices (candidates: their state indices) go to sel_pos, or straight to the
    // output when it takes indices only.
    const bool direct = out.indices_only(sorted);
    int* dst = direct ? out.indices + r * out.indices_ld : sel_pos;
    if (kFromCands) {
      const int32_t* ci = cand_idx + r * cand_n;
      select_topk_by(keys, n, k, k_pad, m_cap, region, sh, dst, [&](int p) { return ci[p]; });
    } else {
      select_topk_by(keys, n, k, k_pad, m_cap, region, sh, dst, [](int p) { return p; });
    }
    if (direct) return;
  }
  finish_row(sel_key, sel_pos, count, k, k_pad, sorted, src, r, out);
}

}  // namespace topk_detail
}  // namespace cuda
}  // namespace dsattn
