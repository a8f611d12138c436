#include "cuda/common/indexer_schedule.h"

namespace dsattn {
namespace cuda {
namespace {

constexpr int kSchedThreads = 1024;

// Exclusive scan of v over the block; returns the prefix and stores the block total in *total.
__device__ int64_t block_exclusive_scan(int64_t v, int64_t* total, int64_t* warp_buf) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  int64_t x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int64_t y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) warp_buf[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int64_t s = lane < nw ? warp_buf[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int64_t y = __shfl_up_sync(0xffffffffu, s, o);
      if (lane >= o) s += y;
    }
    if (lane < nw) warp_buf[lane] = s;  // inclusive prefix of warp sums
  }
  __syncthreads();
  const int64_t warp_prefix = warp > 0 ? warp_buf[warp - 1] : 0;
  *total = warp_buf[nw - 1];
  __syncthreads();  // warp_buf is reused by the next call
  return warp_prefix + x - v;
}

__global__ void __launch_bounds__(kSchedThreads) indexer_schedule_kernel(detail::IndexerWork w, int P, int32_t* meta) {
  __shared__ int64_t warp_buf[32];
  const int64_t G = w.groups;
  int64_t local = 0;
  for (int64_t g = threadIdx.x; g < G; g += blockDim.x) local += detail::indexer_group_units(w, g);
  int64_t total = 0;
  block_exclusive_scan(local, &total, warp_buf);
  if (threadIdx.x == 0) detail::indexer_meta_header(meta, P, G);
  if (total == 0) {
    for (int64_t p = threadIdx.x; p <= P; p += blockDim.x) {
      meta[detail::kIndexerMetaHeader + 2 * p] = static_cast<int32_t>(G);
      meta[detail::kIndexerMetaHeader + 2 * p + 1] = 0;
    }
    return;
  }
  int64_t base = 0;
  for (int64_t c0 = 0; c0 < G; c0 += blockDim.x) {
    const int64_t g = c0 + threadIdx.x;
    const int64_t u = g < G ? detail::indexer_group_units(w, g) : 0;
    int64_t chunk = 0;
    const int64_t pre = block_exclusive_scan(u, &chunk, warp_buf);
    if (g < G) detail::indexer_meta_fill_group(meta, P, total, g, base + pre, u);
    base += chunk;
  }
  if (threadIdx.x == 0) {
    meta[detail::kIndexerMetaHeader + 2 * P] = static_cast<int32_t>(G);
    meta[detail::kIndexerMetaHeader + 2 * P + 1] = 0;
  }
}

}  // namespace

cudaError_t launch_indexer_schedule(const detail::IndexerWork& w, int partitions, int32_t* meta,
                                    cudaStream_t stream) {
  indexer_schedule_kernel<<<1, kSchedThreads, 0, stream>>>(w, partitions, meta);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace dsattn
