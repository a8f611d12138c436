// Merge of the fused indexer + top-k (SPEC §3.4): one CTA per query row reads the candidates its
// pieces left (fused_topk_collect.cuh), in slot order (= increasing state index), streams them
// through a shared-memory buffer with a running threshold (ordered appends, compaction by the
// block radix select of topk_kernel.cuh when full), then selects, sorts on request and writes
// indices / scores / slot ids. Memory: the pieces' buffers only, O(rows x pieces x k).
#pragma once
#include <cstdint>

#include "cuda/common/topk_grid.cuh"
#include "cuda/sm80/fused_topk_collect.cuh"

namespace dsattn {
namespace cuda {
namespace fused_topk {

using topk_detail::kTopkThreads;
using topk_detail::kTopkWarps;
using topk_detail::TopkShared;

// A SlotRange tells the merge, for query row r: its slots [s0, s1), its row j inside them, and its
// length (states [0, len) are defined). UniformSlots: every group has the same number of pieces
// (tests): group g = r / rows_per_group owns slots [g * pieces, (g + 1) * pieces).
struct UniformSlots {
  int rows_per_group = 1;
  int pieces = 1;
  const int32_t* lens = nullptr;  // [R]
  __device__ __forceinline__ void get(int64_t r, int64_t* s0, int64_t* s1, int* j, int* len) const {
    const int64_t g = r / rows_per_group;
    *j = static_cast<int>(r % rows_per_group);
    *s0 = g * pieces;
    *s1 = *s0 + pieces;
    *len = lens[r] < 0 ? 0 : lens[r];
  }
};

struct MergeShared {
  TopkShared t;
  int cnt;
  uint32_t thr;
  int total;
};

// Exclusive block scan of a 0/1 flag; *total gets the block sum. Ends synced.
__device__ __forceinline__ int flag_scan(bool f, MergeShared& sh, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned m = __ballot_sync(0xffffffffu, f);
  if (lane == 0) sh.t.warp_gt[warp] = __popc(m);
  __syncthreads();
  int before = 0, sum = 0;
#pragma unroll
  for (int w = 0; w < kTopkWarps; ++w) {
    const int c = sh.t.warp_gt[w];
    before += w < warp ? c : 0;
    sum += c;
  }
  *total = sum;
  const int r = before + __popc(m & ((1u << lane) - 1u));
  __syncthreads();
  return r;
}

// Compacts the buffer keys/idx [0, cnt) to its k best (index order kept). Block-wide.
__device__ __forceinline__ void merge_compact(uint32_t* keys, int32_t* idx, int k, uint32_t* region, int k_pad,
                                              MergeShared& sh) {
  using namespace topk_detail;
  const int n = sh.cnt;
  for (int i = threadIdx.x; i < kBins1; i += kTopkThreads) region[i] = 0;
  __syncthreads();
  for (int base = 0; base < n; base += kTopkThreads) {
    const int i = base + threadIdx.x;
    const uint32_t key = i < n ? keys[i] : 0u;
    hist_add(region, key >> 20, i < n);
  }
  __syncthreads();
  uint32_t T;
  int need;
  find_threshold(keys, n, k, region, sh.t, &T, &need);
  uint32_t* sel_key = region;
  int* sel_pos = reinterpret_cast<int*>(region + k_pad);
  select_in_order(keys, n, T, need, sel_key, sel_pos, sh.t);
  // Gather first (sel_pos[j] >= j: writing in place would race), then write back.
  constexpr int kPer = kMaxK / kTopkThreads;
  uint32_t kk[kPer];
  int32_t ii[kPer];
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int j = threadIdx.x + q * kTopkThreads;
    if (j < k) {
      kk[q] = sel_key[j];
      ii[q] = idx[sel_pos[j]];
    }
  }
  __syncthreads();
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int j = threadIdx.x + q * kTopkThreads;
    if (j < k) {
      keys[j] = kk[q];
      idx[j] = ii[q];
    }
  }
  if (threadIdx.x == 0) {
    sh.cnt = k;
    sh.thr = T;
  }
  __syncthreads();
}

extern __shared__ __align__(16) uint32_t fused_merge_smem[];

// grid (R). Dynamic smem: [keys mcap][idx mcap][region_words(k_pad, 0)] u32.
template <typename SlotRange>
__global__ void __launch_bounds__(kTopkThreads)
    fused_topk_merge_kernel(CollectorBuffers b, SlotRange slots, int k, int k_pad, int mcap, bool sorted,
                            topk_detail::TopkOutputs out) {
  using namespace topk_detail;
  __shared__ MergeShared sh;
  const int64_t r = blockIdx.x;
  int64_t s0, s1;
  int j, len;
  slots.get(r, &s0, &s1, &j, &len);
  uint32_t* keys = fused_merge_smem;
  int32_t* idx = reinterpret_cast<int32_t*>(fused_merge_smem + mcap);
  uint32_t* region = fused_merge_smem + 2 * mcap;
  if (threadIdx.x == 0) {
    sh.cnt = 0;
    sh.thr = kAbsentKey;
  }
  __syncthreads();
  for (int64_t s = s0; s < s1; ++s) {
    const int32_t* h = b.header + (s * b.rows_per_slot + j) * 2;
    // Headers are zeroed before the scoring kernel; a piece that never ran reads as empty.
    const int n_s = min(max(h[0], 0), b.ccap);
    const int64_t off = b.half_offset(s, j, h[1] & 1);
    for (int base = 0; base < n_s; base += kTopkThreads) {
      if (sh.cnt + kTopkThreads > mcap) merge_compact(keys, idx, k, region, k_pad, sh);
      const int i = base + threadIdx.x;
      const uint32_t key = i < n_s ? b.key[off + i] : 0u;
      const bool app = i < n_s && key > sh.thr;
      int total;
      const int pos = flag_scan(app, sh, &total);
      const int cnt = sh.cnt;
      if (app) {
        keys[cnt + pos] = key;
        idx[cnt + pos] = b.idx[off + i];
      }
      __syncthreads();
      if (threadIdx.x == 0) sh.cnt = cnt + total;
      __syncthreads();
    }
  }
  const int cnt = sh.cnt;
  uint32_t* sel_key = region;
  int* sel_pos = reinterpret_cast<int*>(region + k_pad);
  const int count = len < k ? len : k;
  if (cnt <= k) {
    // Short rows (every state is a candidate) or exactly k candidates: all of them, in order.
    for (int q = threadIdx.x; q < cnt; q += kTopkThreads) {
      sel_key[q] = keys[q];
      sel_pos[q] = idx[q];
    }
    __syncthreads();
  } else {
    for (int i = threadIdx.x; i < kBins1; i += kTopkThreads) region[i] = 0;
    __syncthreads();
    for (int base = 0; base < cnt; base += kTopkThreads) {
      const int i = base + threadIdx.x;
      hist_add(region, (i < cnt ? keys[i] : 0u) >> 20, i < cnt);
    }
    __syncthreads();
    select_topk(keys, cnt, k, k_pad, 0, region, sh.t);
    for (int q = threadIdx.x; q < k; q += kTopkThreads) sel_pos[q] = idx[sel_pos[q]];
    __syncthreads();
  }
  finish_row<float>(sel_key, sel_pos, count < cnt ? count : cnt, k, k_pad, sorted, nullptr, r, out);
}

// Dynamic shared memory of the merge kernel for a buffer of mcap entries.
__host__ __device__ inline size_t merge_smem_bytes(int mcap, int k_pad) {
  return (2 * static_cast<size_t>(mcap) + topk_detail::region_words(k_pad, 0)) * 4;
}

}  // namespace fused_topk
}  // namespace cuda
}  // namespace dsattn
