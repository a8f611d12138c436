#include "cuda/common/indexer_schedule.h"

#include <algorithm>

#include "cuda/common/pdl.cuh"
#include "cuda/common/warp_scan.cuh"

namespace dsattn {
namespace cuda {
namespace {

constexpr int kSchedThreads = 1024;

// Exclusive scan of v over the block; returns the prefix and stores the block total in *total.
__device__ int64_t block_exclusive_scan(int64_t v, int64_t* total, int64_t* warp_buf) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  int64_t x = warp_inclusive_scan(v);
  if (lane == 31) warp_buf[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int64_t s = warp_inclusive_scan(lane < nw ? warp_buf[lane] : 0);
    if (lane < nw) warp_buf[lane] = s;  // inclusive prefix of warp sums
  }
  __syncthreads();
  const int64_t warp_prefix = warp > 0 ? warp_buf[warp - 1] : 0;
  *total = warp_buf[nw - 1];
  __syncthreads();  // warp_buf is reused by the next call
  return warp_prefix + x - v;
}

// One block of up to 1024 threads (more blocks only zero their share of the zero range). Groups
// are taken a block at a time: a block scan gives each group its first unit, then the partitions
// that start inside the chunk are filled in parallel, each thread finding its partition's group
// by binary search over the chunk's unit prefix (shared memory). The same boundaries as
// detail::indexer_meta_fill_group (partition p starts at virtual unit floor(p * total / P), `cost`
// virtual units leading every non-empty group after the first), which the host-side schedule
// uses. (Filling a group's partitions in the thread of the group took 42 us at batch 1 with 264
// partitions: one thread, 264 64-bit divisions and stores in a row.)
__global__ void __launch_bounds__(kSchedThreads)
    indexer_schedule_kernel(detail::IndexerWork w, int P, int cost, int32_t* meta, uint32_t* zero, int zero_words) {
  pdl_trigger();  // pdl.cuh: before any global-memory access
  pdl_wait();
  {  // the zero range split over the blocks (one block: all of it); blocks after the first only zero
    const int per = (zero_words + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
    const int z0 = per * static_cast<int>(blockIdx.x), z1 = z0 + per < zero_words ? z0 + per : zero_words;
    for (int i = z0 + static_cast<int>(threadIdx.x); i < z1; i += blockDim.x) zero[i] = 0u;
    if (blockIdx.x > 0) return;
  }
  __shared__ int64_t warp_buf[32];
  __shared__ int64_t s_end[kSchedThreads];  // chunk group t's virtual units end at s_end[t] (exclusive)
  const int64_t G = w.groups;
  int64_t local = 0, u_first = 0;  // u_first: units of group threadIdx.x, reused by the first chunk
  for (int64_t g = threadIdx.x; g < G; g += blockDim.x) {
    const int64_t u = detail::indexer_group_units(w, g);
    if (g == threadIdx.x) u_first = u;
    local += u + detail::indexer_group_lead(g, u, cost);
  }
  int64_t total = 0;
  const int64_t pre0 = block_exclusive_scan(local, &total, warp_buf);
  if (threadIdx.x == 0) detail::indexer_meta_header(meta, P, G);
  if (total == 0) {
    for (int64_t p = threadIdx.x; p <= P; p += blockDim.x) {
      meta[detail::kIndexerMetaHeader + 2 * p] = static_cast<int32_t>(G);
      meta[detail::kIndexerMetaHeader + 2 * p + 1] = 0;
    }
    return;
  }
  const bool narrow = total <= int64_t(0xffffffffu) && total * P <= int64_t(0xffffffffu);  // block-uniform; no 64-bit division
  int64_t base = 0;
  for (int64_t c0 = 0; c0 < G; c0 += blockDim.x) {
    const int64_t g = c0 + threadIdx.x;
    const int64_t u0 = g >= G ? 0 : (c0 == 0 ? u_first : detail::indexer_group_units(w, g));
    const int64_t u = u0 + detail::indexer_group_lead(g, u0, cost);  // virtual units
    // One chunk (G <= threads): every thread summed just its own group, so the first scan is this one.
    int64_t chunk = total;
    const int64_t pre = G <= blockDim.x ? pre0 : block_exclusive_scan(u, &chunk, warp_buf);
    s_end[threadIdx.x] = base + pre + u;
    __syncthreads();
    // Partitions whose first unit lies in [base, base + chunk): p from ceil(base * P / total).
    const int64_t p_lo = detail::indexer_first_partition_from(base, total, P);
    const int64_t p_hi = min(int64_t(P), detail::indexer_first_partition_from(base + chunk, total, P));
    const int last = static_cast<int>(min(int64_t(blockDim.x), G - c0)) - 1;  // the chunk's last group
    for (int64_t p = p_lo + threadIdx.x; p < p_hi; p += blockDim.x) {
      // 64-bit division is a long software sequence; p * total fits 32 bits at usual sizes.
      const int64_t target = narrow ? int64_t(uint32_t(p) * uint32_t(total) / uint32_t(P))
                                    : detail::indexer_partition_start(p, total, P);
      int lo = 0, hi = last;  // first t with s_end[t] > target (s_end[last] = base + chunk > target)
      while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (s_end[mid] > target) {
          hi = mid;
        } else {
          lo = mid + 1;
        }
      }
      // The target's group is non-empty (it has virtual units), so its lead is `cost` after group 0.
      const int64_t first = (lo == 0 ? base : s_end[lo - 1]) + (c0 + lo > 0 ? cost : 0);
      meta[detail::kIndexerMetaHeader + 2 * p] = static_cast<int32_t>(c0 + lo);
      meta[detail::kIndexerMetaHeader + 2 * p + 1] = static_cast<int32_t>(target > first ? target - first : 0);
    }
    base += chunk;
    __syncthreads();  // s_end is rewritten by the next chunk
  }
  if (threadIdx.x == 0) {
    meta[detail::kIndexerMetaHeader + 2 * P] = static_cast<int32_t>(G);
    meta[detail::kIndexerMetaHeader + 2 * P + 1] = 0;
  }
}

}  // namespace

cudaError_t launch_indexer_schedule(const detail::IndexerWork& w, int partitions, int32_t* meta,
                                    cudaStream_t stream, uint32_t* zero, int zero_words, int group_cost) {
  // As few warps as the work needs (one thread per group or partition, up to 1024): the block runs
  // alone on one SM, so its idle warps would only slow every barrier (H200, batch 1 with 396
  // partitions, ncu: 4.9 us with 1024 threads and the old search / divisions, 3.5 us now).
  const int64_t want = std::max<int64_t>(32, std::max<int64_t>(w.groups, partitions));
  if (zero == nullptr) zero_words = 0;
  const int threads = static_cast<int>(std::min<int64_t>(kSchedThreads, (want + 31) / 32 * 32));
  // Large zero ranges (the resident route's histograms, 24 KiB per row) get blocks of their own,
  // ~32 KiB each, so the schedule's block does not store them alone.
  const int blocks = static_cast<int>(std::min<int64_t>(128, std::max<int64_t>(1, int64_t(zero_words) / 8192)));
  return launch_pdl(indexer_schedule_kernel, dim3(blocks), dim3(threads), 0, stream, LaunchOpt{}, w, partitions,
                    group_cost, meta, zero, zero_words);
}

}  // namespace cuda
}  // namespace dsattn
