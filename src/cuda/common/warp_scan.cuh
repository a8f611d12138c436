// Warp-level inclusive prefix sum in lane order, shared by the block and group scans of the
// schedule, top-k and fused top-k kernels. All 32 lanes of the warp call it together.
#pragma once

namespace dsattn {
namespace cuda {

template <typename T>
__device__ __forceinline__ T warp_inclusive_scan(T v) {
  const int lane = static_cast<int>(threadIdx.x & 31);
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T y = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += y;
  }
  return v;
}

}  // namespace cuda
}  // namespace dsattn
