// FP8 E4M3 tensor-core MMA, m16n8k32, fp32 accumulate (mma.sync):
//   sm_89+ (incl. sm_90, sm_100, sm_120): one native e4m3 instruction.
//   sm_80: the operands are converted to f16 in registers (exact) and fed to two m16n8k16 MMAs.
// Fragment layout (g = lane / 4, t = lane % 4), k-slots as in the PTX ISA:
//   a[0]: row g,   k 4t..4t+3     a[1]: row g+8, k 4t..4t+3
//   a[2]: row g,   k 16+4t..      a[3]: row g+8, k 16+4t..
//   b[0]: col g,   k 4t..4t+3     b[1]: col g,   k 16+4t..
//   c[0..1]: row g, cols 2t, 2t+1;  c[2..3]: row g+8, cols 2t, 2t+1.
// Callers may permute k consistently in A and B (only the dot products matter).
#pragma once
#include <cstdint>

#include "cuda/common/indexer_dequant.cuh"

namespace dsattn {
namespace cuda {

__device__ __forceinline__ void mma_e4m3_16x8x32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                 uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#elif defined(__CUDA_ARCH__)
  uint32_t a0l, a0h, a1l, a1h, a2l, a2h, a3l, a3h, b0l, b0h, b1l, b1h;
  e4m3x4_to_f16x2(a[0], &a0l, &a0h);
  e4m3x4_to_f16x2(a[1], &a1l, &a1h);
  e4m3x4_to_f16x2(a[2], &a2l, &a2h);
  e4m3x4_to_f16x2(a[3], &a3l, &a3h);
  e4m3x4_to_f16x2(b0, &b0l, &b0h);
  e4m3x4_to_f16x2(b1, &b1l, &b1h);
  // k-slots 4t..4t+3 of the fp8 step -> f16 slots {2t, 2t+1} (lo) and {8+2t, 8+2t+1} (hi).
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0l), "r"(a1l), "r"(a0h), "r"(a1h), "r"(b0l), "r"(b0h));
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a2l), "r"(a3l), "r"(a2h), "r"(a3h), "r"(b1l), "r"(b1h));
#else
  (void)c; (void)a; (void)b0; (void)b1;
#endif
}

}  // namespace cuda
}  // namespace dsattn
