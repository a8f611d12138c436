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

// One step of warp_inclusive_scan_pred: adds lane - O's value where that lane exists.
template <int O>
__device__ __forceinline__ int warp_scan_step_pred(int v) {
  asm("{\n"
      "  .reg .s32 t;\n"
      "  .reg .pred p;\n"
      "  shfl.sync.up.b32 t|p, %0, %1, 0x0, 0xffffffff;\n"
      "  @p add.s32 %0, %0, t;\n"
      "}\n"
      : "+r"(v)
      : "n"(O));
  return v;
}

// warp_inclusive_scan for int in two instructions per step (a shuffle that also yields whether the
// source lane exists, and an add under that predicate) instead of four (shuffle, compare, select,
// add): for issue-bound loops (the sampled top-k's stream). All 32 lanes call it together.
__device__ __forceinline__ int warp_inclusive_scan_pred(int v) {
  v = warp_scan_step_pred<1>(v);
  v = warp_scan_step_pred<2>(v);
  v = warp_scan_step_pred<4>(v);
  v = warp_scan_step_pred<8>(v);
  return warp_scan_step_pred<16>(v);
}

}  // namespace cuda
}  // namespace dsattn
