// Threshold-filter top-k for long rows (SPEC §3.3): the row is read from global memory twice
// (the second time mostly from L2) by many CTAs, and only the few thousand states that can still
// be among the k largest reach the one CTA per row that finishes the selection.
//
//   memset        ghist [R, 4096], ghist2 [R, 1024], counters [R, 4] = 0
//   hist kernel   grid (R, T): tile t histograms the top 12 key bits of its states into shared
//                 memory, adds the non-zero bins to ghist; the last tile of the row (counter) finds
//                 the bin b1 of the k-th largest key and writes the row record: candidates are the
//                 keys >= b1 << 20, m1 of them (k <= m1).
//   hist2 kernel  (long rows only, when m1 > mcap) the same for bits 19..10 of the keys in bin b1:
//                 candidates become the keys >= (b1, b2) << 10.
//   filter kernel grid (R, T): tile t re-reads its states, reserves room for its candidates with
//                 one atomic per tile, writes them (state order) and its (offset, count).
//   final kernel  grid (R): gathers the tiles' candidates in tile order (= state order) into shared
//                 memory, runs the block radix select of topk_kernel.cuh on them and finishes the
//                 row. When the candidates do not fit (heavy ties at the threshold: m > mcap), it
//                 instead streams the row from global memory for the remaining digits and the
//                 ordered write (slow but exact).
// The counts in the histograms are exact, so every kernel derives the same threshold; results are
// identical to the other plans (same winners, index order, ties to the smaller index).
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda/common/topk_grid.cuh"

namespace dsattn {
namespace cuda {
namespace topk_detail {

constexpr int kFilterThreads = 512;
constexpr int kFilterMaxPer = 8;     // states per thread and tile
constexpr int kFilterBatch = 1024;   // tiles gathered per step of the final kernel (= its threads)
constexpr int kRecWords = 8;         // row record
enum FilterRec : int { kRecState = 0, kRecLoKey, kRecM, kRecB1, kRecAbove1, kRecB2, kRecAbove2 };
constexpr int kFilterOk = 0;        // candidates = keys >= lo_key, m of them, m <= mcap
constexpr int kFilterOverflow = 1;  // too many: the final kernel streams the row

struct FilterWork {
  uint32_t* ghist = nullptr;   // [R, kBins1] (zeroed)
  uint32_t* ghist2 = nullptr;  // [R, kBins2] (zeroed; digit2 only)
  int32_t* counters = nullptr;  // [R, 4]: tiles done (hist, hist2), candidates reserved (zeroed)
  int32_t* rec = nullptr;       // [R, kRecWords]
  int32_t* tile_off = nullptr;  // [R, T]
  int32_t* tile_cnt = nullptr;  // [R, T]
  uint32_t* cand_key = nullptr;  // [R, mcap]
  int32_t* cand_idx = nullptr;   // [R, mcap]
  int per = 1;    // states per thread and tile (tile = kFilterThreads * per)
  int tiles = 1;  // T
  int mcap = 0;
};

struct FilterShared {
  int warp_sum[32];
  uint32_t bin;
  int above;
  int last;
  int off;
};

// Exclusive prefix over the block (thread order) for any block size up to 1024; *total = sum.
// Ends synced.
__device__ __forceinline__ int filter_block_scan(int v, FilterShared& sh, int* total) {
  return group_exclusive_scan(v, sh.warp_sum, total, CtaGroup());
}

// Bin of the k_rem-th largest in hist[0, nbins) (shared memory, scanned from the top bin down; the
// total must be >= k_rem): sh.bin, sh.above = keys in higher bins. Any block size. Ends synced.
__device__ __forceinline__ void filter_find_bin(const uint32_t* hist, int nbins, int k_rem, FilterShared& sh) {
  const int per = (nbins + blockDim.x - 1) / blockDim.x;
  const int hi = nbins - 1 - static_cast<int>(threadIdx.x) * per;
  int local = 0;
  for (int j = 0; j < per; ++j) {
    if (hi - j >= 0) local += static_cast<int>(hist[hi - j]);
  }
  int total;
  int cum = filter_block_scan(local, sh, &total);
  if (cum < k_rem && cum + local >= k_rem) {
    for (int j = 0; j < per; ++j) {
      const int h = static_cast<int>(hist[hi - j]);
      if (cum + h >= k_rem) {
        sh.bin = static_cast<uint32_t>(hi - j);
        sh.above = cum;
        break;
      }
      cum += h;
    }
  }
  __syncthreads();
}

// Loads tile t of row r as keys: key[u] for state u * blockDim.x + threadIdx.x of the tile (0 when
// outside). Returns the tile's state count n. The raw loads are predicated and all issued before
// any is used (kFilterMaxPer in flight per thread).
template <typename T>
__device__ __forceinline__ int filter_load_tile(const T* __restrict__ src, int len, int per, int t,
                                                uint32_t (&key)[kFilterMaxPer]) {
  using Bits = typename std::conditional<sizeof(T) == 4, uint32_t, unsigned short>::type;
  static_assert(sizeof(T) == sizeof(Bits), "float or bf16 logits");
  const int lo = t * static_cast<int>(blockDim.x) * per;
  int n = len - lo;
  n = n < 0 ? 0 : (n > static_cast<int>(blockDim.x) * per ? static_cast<int>(blockDim.x) * per : n);
  const Bits* s = reinterpret_cast<const Bits*>(src + lo);
  Bits raw[kFilterMaxPer];
#pragma unroll
  for (int u = 0; u < kFilterMaxPer; ++u) {
    const int i = u * blockDim.x + threadIdx.x;
    raw[u] = 0;
    if (u < per && i < n) raw[u] = __ldg(s + i);
  }
#pragma unroll
  for (int u = 0; u < kFilterMaxPer; ++u) {
    const int i = u * blockDim.x + threadIdx.x;
    T v;
    memcpy(&v, &raw[u], sizeof(T));
    key[u] = (u < per && i < n) ? key_of(v) : 0u;
  }
  return n;
}

// Copies a global histogram row (nbins = a multiple of kFilterThreads) to shared memory, all loads
// in flight at once (L2, bypassing L1: other CTAs' atomics). Block of kFilterThreads.
template <int kNbins>
__device__ __forceinline__ void filter_read_hist(const uint32_t* gh, uint32_t* hist) {
  constexpr int kPer = kNbins / kFilterThreads;
  uint32_t v[kPer];
#pragma unroll
  for (int q = 0; q < kPer; ++q) v[q] = __ldcg(gh + q * kFilterThreads + threadIdx.x);
#pragma unroll
  for (int q = 0; q < kPer; ++q) hist[q * kFilterThreads + threadIdx.x] = v[q];
  __syncthreads();
}

// Adds the non-zero bins of a shared histogram to a global one, then (counter) tells whether this
// CTA is the row's last; the last one sees every other CTA's additions. Ends synced.
__device__ __forceinline__ bool filter_flush_hist(const uint32_t* hist, int nbins, uint32_t* ghist,
                                                  int32_t* counter, FilterShared& sh) {
  for (int b = threadIdx.x; b < nbins; b += blockDim.x) {
    const uint32_t c = hist[b];
    if (c != 0u) atomicAdd(ghist + b, c);
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) sh.last = atomicAdd(counter, 1) == static_cast<int>(gridDim.y) - 1;
  __syncthreads();
  if (!sh.last) return false;
  __threadfence();
  return true;
}

// grid (R, T), kFilterThreads. Top-12-bit histogram of the row; the row's last tile writes its record.
template <typename T>
__global__ void __launch_bounds__(kFilterThreads)
    topk_filter_hist_kernel(const T* __restrict__ logits,  // [R, W] (row stride ld)
                            int64_t ld, TopkRowBounds rb, int k, FilterWork w) {
  pdl_trigger();  // pdl.cuh: before any global-memory access
  pdl_wait();
  __shared__ uint32_t hist[kBins1];
  __shared__ FilterShared sh;
  const int64_t r = blockIdx.x;
  int start, len;
  rb.get(r, &start, &len);
  if (len <= k) return;  // the final kernel emits 0..len-1
  for (int i = threadIdx.x; i < kBins1; i += blockDim.x) hist[i] = 0;
  __syncthreads();
  uint32_t key[kFilterMaxPer];
  const int n = filter_load_tile(row_ptr(logits, ld, r) + start, len, w.per, blockIdx.y, key);
#pragma unroll
  for (int u = 0; u < kFilterMaxPer; ++u) {
    if (u < w.per) hist_add(hist, key[u] >> 20, static_cast<int>(u * blockDim.x + threadIdx.x) < n);
  }
  __syncthreads();
  uint32_t* gh = w.ghist + r * kBins1;
  if (!filter_flush_hist(hist, kBins1, gh, w.counters + r * 4, sh)) return;
  filter_read_hist<kBins1>(gh, hist);
  filter_find_bin(hist, kBins1, k, sh);
  if (threadIdx.x == 0) {
    const int m = sh.above + static_cast<int>(hist[sh.bin]);
    int32_t* rec = w.rec + r * kRecWords;
    rec[kRecState] = m <= w.mcap ? kFilterOk : kFilterOverflow;
    rec[kRecLoKey] = static_cast<int32_t>(sh.bin << 20);
    rec[kRecM] = m;
    rec[kRecB1] = static_cast<int32_t>(sh.bin);
    rec[kRecAbove1] = sh.above;
    rec[kRecB2] = -1;
    rec[kRecAbove2] = 0;
  }
}

// grid (R, T), kFilterThreads. Rows whose first digit left too many candidates: histogram of bits
// 19..10 of the keys in bin b1; the last tile refines the record.
template <typename T>
__global__ void __launch_bounds__(kFilterThreads)
    topk_filter_hist2_kernel(const T* __restrict__ logits,  // [R, W] (row stride ld)
                             int64_t ld, TopkRowBounds rb, int k, FilterWork w) {
  pdl_trigger();  // pdl.cuh: before any global-memory access
  pdl_wait();
  __shared__ uint32_t hist[kBins2];
  __shared__ FilterShared sh;
  const int64_t r = blockIdx.x;
  int start, len;
  rb.get(r, &start, &len);
  if (len <= k) return;
  int32_t* rec = w.rec + r * kRecWords;
  if (rec[kRecState] == kFilterOk) return;  // row-uniform
  const uint32_t b1 = static_cast<uint32_t>(rec[kRecB1]);
  const int above1 = rec[kRecAbove1];
  for (int i = threadIdx.x; i < kBins2; i += blockDim.x) hist[i] = 0;
  __syncthreads();
  uint32_t key[kFilterMaxPer];
  const int n = filter_load_tile(row_ptr(logits, ld, r) + start, len, w.per, blockIdx.y, key);
#pragma unroll
  for (int u = 0; u < kFilterMaxPer; ++u) {
    if (u < w.per) {
      const bool act = static_cast<int>(u * blockDim.x + threadIdx.x) < n && (key[u] >> 20) == b1;
      hist_add(hist, (key[u] >> 10) & (kBins2 - 1), act);
    }
  }
  __syncthreads();
  uint32_t* gh = w.ghist2 + r * kBins2;
  if (!filter_flush_hist(hist, kBins2, gh, w.counters + r * 4 + 1, sh)) return;
  filter_read_hist<kBins2>(gh, hist);
  filter_find_bin(hist, kBins2, k - above1, sh);
  if (threadIdx.x == 0) {
    const int m = above1 + sh.above + static_cast<int>(hist[sh.bin]);
    rec[kRecB2] = static_cast<int32_t>(sh.bin);
    rec[kRecAbove2] = sh.above;
    if (m <= w.mcap) {
      rec[kRecLoKey] = static_cast<int32_t>(((b1 << 10) | sh.bin) << 10);
      rec[kRecM] = m;
      rec[kRecState] = kFilterOk;
    }
  }
}

// grid (R, T), kFilterThreads. Writes tile t's candidates (key >= lo_key), in state order.
template <typename T>
__global__ void __launch_bounds__(kFilterThreads)
    topk_filter_kernel(const T* __restrict__ logits,  // [R, W] (row stride ld)
                       int64_t ld, TopkRowBounds rb, int k, FilterWork w) {
  pdl_trigger();  // pdl.cuh: before any global-memory access
  pdl_wait();
  __shared__ FilterShared sh;
  __shared__ int prefix[kFilterMaxPer * 32];  // exclusive prefix of the (u, warp) counts
  const int64_t r = blockIdx.x;
  const int t = blockIdx.y;
  int start, len;
  rb.get(r, &start, &len);
  if (len <= k) return;
  const int32_t* rec = w.rec + r * kRecWords;
  const int state = rec[kRecState];
  const uint32_t lo_key = static_cast<uint32_t>(rec[kRecLoKey]);
  uint32_t key[kFilterMaxPer];  // loads issued together with the record's
  const int n = filter_load_tile(row_ptr(logits, ld, r) + start, len, w.per, t, key);
  if (state != kFilterOk) return;  // row-uniform
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const unsigned lt = (1u << lane) - 1u;
  unsigned mask[kFilterMaxPer];
#pragma unroll
  for (int u = 0; u < kFilterMaxPer; ++u) {
    const bool sel = u < w.per && static_cast<int>(u * blockDim.x + threadIdx.x) < n && key[u] >= lo_key;
    mask[u] = __ballot_sync(0xffffffffu, sel);
    if (lane == 0 && u < w.per) prefix[u * nwarps + warp] = __popc(mask[u]);
  }
  __syncthreads();
  // State order = (u, warp, lane) order: exclusive prefix of the (u, warp) counts, by warp 0.
  const int nc = w.per * nwarps;  // <= 256
  if (warp == 0) {
    int c[8];
    int s = 0;
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const int i = lane * 8 + q;
      c[q] = i < nc ? prefix[i] : 0;
      s += c[q];
    }
    int incl = warp_inclusive_scan(s);
    int run = incl - s;
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const int i = lane * 8 + q;
      if (i < nc) prefix[i] = run;
      run += c[q];
    }
    const int total = __shfl_sync(0xffffffffu, incl, 31);
    if (lane == 0) {
      const int off = total > 0 ? atomicAdd(w.counters + r * 4 + 2, total) : 0;
      sh.off = off;
      w.tile_off[r * w.tiles + t] = off;
      w.tile_cnt[r * w.tiles + t] = total;
    }
  }
  __syncthreads();
  const int off = sh.off;
  uint32_t* ck = w.cand_key + r * w.mcap;
  int32_t* ci = w.cand_idx + r * w.mcap;
  const int lo = t * static_cast<int>(blockDim.x) * w.per;
#pragma unroll
  for (int u = 0; u < kFilterMaxPer; ++u) {
    if (mask[u] & (1u << lane)) {
      const int p = off + prefix[u * nwarps + warp] + __popc(mask[u] & lt);
      if (p < w.mcap) {  // m <= mcap holds by construction; never write past the row's buffer
        ck[p] = key[u];
        ci[p] = lo + static_cast<int>(u * blockDim.x + threadIdx.x);
      }
    }
  }
}

// select_in_order over a global row (keys computed on the fly).
template <typename T>
__device__ __forceinline__ void stream_select_in_order(const T* __restrict__ src, int n, uint32_t thr, int need,
                                                       uint32_t* out_key, int* out_pos, TopkShared& sh) {
  select_in_order_keyed([&](int i) { return key_of(src[i]); }, n, thr, need, kTopkWarps, sh.warp_gt, sh.warp_eq,
                        out_key, out_pos, [](int i) { return i; });
}

// Histogram (kBins2 bins, zeroed and synced by the caller) of the 10-bit digit at `shift` of the
// row's keys whose bits above it equal `prefix`. Streams the row.
template <typename T>
__device__ __forceinline__ void stream_hist(const T* __restrict__ src, int n, uint32_t prefix, int shift,
                                            uint32_t* hist) {
  for (int base = 0; base < n; base += kTopkThreads) {
    const int i = base + threadIdx.x;
    const uint32_t key = i < n ? key_of(src[i]) : 0u;
    hist_add(hist, (key >> shift) & (kBins2 - 1), i < n && (key >> (shift + 10)) == prefix);
  }
}

// One 10-bit digit of a row streamed from global memory: among the keys whose bits above
// shift + 10 equal `prefix`, the bin of the k_rem-th largest. Returns (prefix << 10) | bin and
// lowers k_rem by the keys in higher bins. Block-wide; ends synced (hist and sh free to reuse).
template <typename T>
__device__ __forceinline__ uint32_t stream_digit(const T* __restrict__ src, int n, uint32_t prefix, int shift,
                                                 int& k_rem, uint32_t* hist, TopkShared& sh) {
  for (int i = threadIdx.x; i < kBins2; i += kTopkThreads) hist[i] = 0;
  __syncthreads();
  stream_hist(src, n, prefix, shift, hist);
  __syncthreads();
  find_bin(hist, kBins2, k_rem, sh);
  const uint32_t p = (prefix << 10) | sh.bin;
  k_rem -= sh.above;
  __syncthreads();
  return p;
}

// Dynamic shared memory of the final kernel: [keys mcap][idx mcap][pre kFilterBatch + 32]
// [offs kFilterBatch][region].
__host__ __device__ inline size_t filter_final_smem_bytes(int mcap, int k_pad, int m_cap) {
  return (2 * static_cast<size_t>(mcap) + 2 * kFilterBatch + 32 + region_words(k_pad, m_cap)) * 4;
}

// grid (R), kTopkThreads. Gathers the row's candidates and finishes it (see the file comment).
template <typename T>
__global__ void __launch_bounds__(kTopkThreads, 1)
    topk_filter_final_kernel(const T* __restrict__ logits,  // [R, W] (row stride ld)
                             int64_t ld, TopkRowBounds rb, int k, int k_pad, int m_cap, bool sorted, FilterWork w,
                             TopkOutputs out) {
  pdl_trigger();  // pdl.cuh: before any global-memory access
  pdl_wait();
  __shared__ TopkShared sh;
  __shared__ FilterShared fsh;
  const int64_t r = blockIdx.x;
  int start, len;
  rb.get(r, &start, &len);
  const T* src = row_ptr(logits, ld, r) + start;
  uint32_t* keys = topk_dyn_smem;
  int32_t* idx = reinterpret_cast<int32_t*>(topk_dyn_smem + w.mcap);
  int* pre = reinterpret_cast<int*>(topk_dyn_smem + 2 * w.mcap);
  int* offs = pre + kFilterBatch + 32;
  uint32_t* region = reinterpret_cast<uint32_t*>(offs + kFilterBatch);
  uint32_t* sel_key = region;
  int* sel_pos = reinterpret_cast<int*>(region + k_pad);
  const int count = len < k ? len : k;
  if (len <= k) {
    finish_short_row(src, len, k, k_pad, sorted, sel_key, sel_pos, r, out);
    return;
  }
  const int32_t* rec = w.rec + r * kRecWords;
  // The record and the first batch of tile entries load together (the tile entries are garbage for
  // an overflowing row and then unused).
  const int state = rec[kRecState];
  const uint32_t b1 = static_cast<uint32_t>(rec[kRecB1]);
  const int above1 = rec[kRecAbove1];
  int c_next = 0, o_next = 0;
  if (static_cast<int>(threadIdx.x) < w.tiles) {
    c_next = w.tile_cnt[r * w.tiles + threadIdx.x];
    o_next = w.tile_off[r * w.tiles + threadIdx.x];
  }
  if (state == kFilterOk) {
    const uint32_t* ck = w.cand_key + r * w.mcap;
    const int32_t* ci = w.cand_idx + r * w.mcap;
    int base = 0;
    for (int t0 = 0; t0 < w.tiles; t0 += kFilterBatch) {
      const int t = t0 + threadIdx.x;
      int c = c_next, o = o_next;
      if (t0 > 0) {
        c = t < w.tiles ? w.tile_cnt[r * w.tiles + t] : 0;
        o = t < w.tiles ? w.tile_off[r * w.tiles + t] : 0;
      }
      int tot;
      const int p = filter_block_scan(c, fsh, &tot);  // synced: the previous batch is done
      pre[threadIdx.x] = p;
      offs[threadIdx.x] = o;
      const int nt = min(kFilterBatch, w.tiles - t0);
      if (threadIdx.x == 0) pre[nt] = tot;  // sentinel
      __syncthreads();
      // Flat copy: element e of the batch lives in tile q = last with pre[q] <= e.
      constexpr int kU = 4;
      for (int e0 = 0; e0 < tot; e0 += kU * kTopkThreads) {
        uint32_t kk[kU];
        int32_t ii[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int e = e0 + u * kTopkThreads + threadIdx.x;
          kk[u] = 0u;
          ii[u] = 0;
          if (e < tot) {
            int q = 0;
            for (int step = kFilterBatch / 2; step > 0; step >>= 1) {
              if (q + step < nt && pre[q + step] <= e) q += step;
            }
            const int g = offs[q] + (e - pre[q]);
            kk[u] = ck[g];
            ii[u] = ci[g];
          }
        }
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int e = e0 + u * kTopkThreads + threadIdx.x;
          if (e < tot && base + e < w.mcap) {
            keys[base + e] = kk[u];
            idx[base + e] = ii[u];
          }
        }
      }
      base += tot;
      __syncthreads();  // pre / offs reused by the next batch; keys complete
    }
    const int n = base < w.mcap ? base : w.mcap;
    // The first digit is known (b1, above1 from the global histogram): every candidate above bin b1
    // wins, digits 2 and 3 over the candidates in b1 give the exact k-th key T.
    uint32_t thr;
    int need;
    find_threshold_rest(keys, n, b1, k - above1, region, sh, &thr, &need);
    __syncthreads();  // sh / region read by every thread before select_in_order reuses them
    select_in_order(keys, n, thr, need, sel_key, sel_pos, sh);
    for (int j = threadIdx.x; j < k; j += kTopkThreads) sel_pos[j] = idx[sel_pos[j]];
    __syncthreads();
    finish_row(sel_key, sel_pos, count, k, k_pad, sorted, src, r, out);
    return;
  }
  // Overflow: the remaining digits and the ordered write stream the row.
  int k_rem = k - above1;
  uint32_t p2;
  if (rec[kRecB2] >= 0) {
    p2 = (b1 << 10) | static_cast<uint32_t>(rec[kRecB2]);
    k_rem -= rec[kRecAbove2];
  } else {
    p2 = stream_digit(src, len, b1, 10, k_rem, region, sh);
  }
  const uint32_t thr = stream_digit(src, len, p2, 0, k_rem, region, sh);
  stream_select_in_order(src, len, thr, k_rem, sel_key, sel_pos, sh);
  finish_row(sel_key, sel_pos, count, k, k_pad, sorted, src, r, out);
}

}  // namespace topk_detail
}  // namespace cuda
}  // namespace dsattn
