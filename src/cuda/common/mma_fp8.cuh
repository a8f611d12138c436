// FP8 E4M3 tensor-core MMA, m16n8k32, fp32 accumulate (mma.sync), with the A operand converted
// once (prepare_a) and reused across many MMAs:
//   sm_89, sm_120 (kMmaNativeFp8): native e4m3 mma.sync; A stays 4 registers of E4M3.
//   sm_80, sm_90, sm_100: those compile e4m3 mma.sync into per-instruction conversions + two f16
//   MMAs; here A is converted to f16 once (8 registers) and each MMA converts only B (exact: every
//   E4M3 value is an f16 value) and issues two m16n8k16 f16 MMAs.
// Fragment layout (g = lane / 4, t = lane % 4), k-slots as in the PTX ISA:
//   a[0]: row g,   k 4t..4t+3     a[1]: row g+8, k 4t..4t+3
//   a[2]: row g,   k 16+4t..      a[3]: row g+8, k 16+4t..
//   b[0]: col g,   k 4t..4t+3     b[1]: col g,   k 16+4t..
//   c[0..1]: row g, cols 2t, 2t+1;  c[2..3]: row g+8, cols 2t, 2t+1.
// Callers may permute k consistently in A and B (only the dot products matter).
#pragma once
#include <cstdint>

#include "cuda/common/indexer_dequant.cuh"

// DSATTN_SM90_NATIVE_FP8_MMA (CMake option of the same name, a test build): sm_90 code takes the
// native path too. ptxas compiles e4m3 mma.sync for sm_90 into conversions and f16 MMAs of its
// own, so an H100 / H200 then runs the code that sm_89 and sm_120 run (E4M3 Q and A fragments,
// e4m3 MMA instructions), only slower; scripts/gpu_check.sh --native-fp8 tests it.
#ifndef DSATTN_SM90_NATIVE_FP8_MMA
#define DSATTN_SM90_NATIVE_FP8_MMA 0
#endif
#if defined(__CUDA_ARCH__) && \
    (__CUDA_ARCH__ == 890 || __CUDA_ARCH__ >= 1200 || (DSATTN_SM90_NATIVE_FP8_MMA && __CUDA_ARCH__ == 900))
#define DSATTN_MMA_NATIVE_FP8 1
#else
#define DSATTN_MMA_NATIVE_FP8 0
#endif

namespace dsattn {
namespace cuda {

#if DSATTN_MMA_NATIVE_FP8
constexpr int kMmaARegs = 4;
#else
constexpr int kMmaARegs = 8;
#endif

// 4 E4M3 bytes -> two f16x2 (bytes 0,1 -> lo; 2,3 -> hi), exact.
__device__ __forceinline__ void e4m3x4_to_f16x2_fast(uint32_t w, uint32_t* lo, uint32_t* hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
      : "=r"(*lo), "=r"(*hi) : "r"(w));
#else
  e4m3x4_to_f16x2(w, lo, hi);
#endif
}

// a: 4 registers of E4M3 (layout above) -> the A operand in the form mma_k32 takes.
__device__ __forceinline__ void mma_prepare_a(const uint32_t (&a)[4], uint32_t (&out)[kMmaARegs]) {
#if DSATTN_MMA_NATIVE_FP8
  out[0] = a[0]; out[1] = a[1]; out[2] = a[2]; out[3] = a[3];
#else
  // k-slots 4t..4t+3 of the fp8 step -> f16 slots {2t, 2t+1} (lo) and {8+2t, 8+2t+1} (hi).
  e4m3x4_to_f16x2_fast(a[0], &out[0], &out[2]);
  e4m3x4_to_f16x2_fast(a[1], &out[1], &out[3]);
  e4m3x4_to_f16x2_fast(a[2], &out[4], &out[6]);
  e4m3x4_to_f16x2_fast(a[3], &out[5], &out[7]);
#endif
}

// mma_prepare_a for A words that come from different loads (the portable indexer's FP8 keys: rows
// g and g + 8 of a fragment from two 16-byte shared-memory loads). On the native path the four
// words get registers of their own, once, by identity byte permutes: with plain copies ptxas keeps
// the words where the loads left them and assembles the MMA's 4-register operand with 4 moves
// before every MMA that uses it. SASS of the FP8 logits kernel (D = 128, 8 warps x 32 states), the
// first 16 MMAs of its head loop: sm_120f 82 -> 31 instructions (54 MOVs -> 0), sm_89 85 -> 47 (52
// IMAD.MOVs -> 0); 32 permutes per tile instead. Same values, same MMAs, same results. The f16
// path (sm_80, sm_90, sm_100) converts into registers of its own anyway: mma_prepare_a.
__device__ __forceinline__ void mma_prepare_a_gathered(const uint32_t (&a)[4], uint32_t (&out)[kMmaARegs]) {
#if DSATTN_MMA_NATIVE_FP8
#pragma unroll
  for (int i = 0; i < 4; ++i) out[i] = __byte_perm(a[i], 0u, 0x3210);
#else
  mma_prepare_a(a, out);
#endif
}

__device__ __forceinline__ void mma_k32(float (&c)[4], const uint32_t (&a)[kMmaARegs], uint32_t b0, uint32_t b1) {
#if DSATTN_MMA_NATIVE_FP8
  asm(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#elif defined(__CUDA_ARCH__)
  uint32_t b0l, b0h, b1l, b1h;
  e4m3x4_to_f16x2_fast(b0, &b0l, &b0h);
  e4m3x4_to_f16x2_fast(b1, &b1l, &b1h);
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0l), "r"(b0h));
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[4]), "r"(a[5]), "r"(a[6]), "r"(a[7]), "r"(b1l), "r"(b1h));
#else
  (void)c; (void)a; (void)b0; (void)b1;
#endif
}

// Same MMA with B already converted to f16 (b0 -> b[0], b[1]; b1 -> b[2], b[3], as
// e4m3x4_to_f16x2_fast makes them). Only for the f16 path (not DSATTN_MMA_NATIVE_FP8).
__device__ __forceinline__ void mma_k32_f16b(float (&c)[4], const uint32_t (&a)[kMmaARegs], const uint4& b) {
#if !DSATTN_MMA_NATIVE_FP8 && defined(__CUDA_ARCH__)
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[4]), "r"(a[5]), "r"(a[6]), "r"(a[7]), "r"(b.z), "r"(b.w));
#else
  (void)c; (void)a; (void)b;
#endif
}

// Half of mma_k32_f16b (h = 0: k-slots of b0, h = 1: of b1): lets callers interleave independent
// accumulators between the two dependent halves.
template <int h>
__device__ __forceinline__ void mma_k16_f16b(float (&c)[4], const uint32_t (&a)[kMmaARegs], const uint4& b) {
#if !DSATTN_MMA_NATIVE_FP8 && defined(__CUDA_ARCH__)
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[4 * h]), "r"(a[4 * h + 1]), "r"(a[4 * h + 2]), "r"(a[4 * h + 3]), "r"(h ? b.z : b.x),
        "r"(h ? b.w : b.y));
#else
  (void)c; (void)a; (void)b;
#endif
}

}  // namespace cuda
}  // namespace dsattn
