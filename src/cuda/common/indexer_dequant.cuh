// Arch-neutral register dequantization for the indexer's tensor-core path.
//  * e2m1x8_to_e4m3: 8 packed E2M1 nibbles (low nibble = lower element) -> 8 E4M3 bytes, exact
//    (every E2M1 value is an E4M3 value). Two byte-permute lookups per 4 values.
//  * e4m3x4_to_f16x2: 4 E4M3 bytes -> 2 f16x2 words, exact (sm_80 has no FP8 MMA). The E4M3 NaN
//    code (S.1111.111) becomes the finite value +-480 on this path.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

namespace dsattn {
namespace cuda {

// E4M3 bytes of the E2M1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6.
constexpr uint32_t kE2m1LutLo = 0x3C383000u;
constexpr uint32_t kE2m1LutHi = 0x4C484440u;

// Nibbles 0..3 of the low 16 bits of `w` -> 4 E4M3 bytes.
__device__ __forceinline__ uint32_t e2m1x4_to_e4m3(uint32_t w) {
  const uint32_t mag = __byte_perm(kE2m1LutLo, kE2m1LutHi, w & 0x7777u);
  const uint32_t sgn = __byte_perm(0x8000u, 0u, (w >> 3) & 0x1111u);
  return mag | sgn;
}

__device__ __forceinline__ void e2m1x8_to_e4m3(uint32_t w, uint32_t* lo, uint32_t* hi) {
  *lo = e2m1x4_to_e4m3(w);
  *hi = e2m1x4_to_e4m3(w >> 16);
}

__device__ __forceinline__ void e4m3x4_to_f16x2(uint32_t w, uint32_t* lo, uint32_t* hi) {
  // Place each byte in the high half of a 16-bit lane, then shift exponent+mantissa into f16
  // position: that is value * 2^-8, so scale back by 2^8 (exact).
  const uint32_t y0 = __byte_perm(w, 0u, 0x1404u);
  const uint32_t y1 = __byte_perm(w, 0u, 0x3424u);
  const uint32_t f0 = (y0 & 0x80008000u) | ((y0 >> 1) & 0x3F803F80u);
  const uint32_t f1 = (y1 & 0x80008000u) | ((y1 >> 1) & 0x3F803F80u);
  const __half2 k256 = __floats2half2_rn(256.0f, 256.0f);
  __half2 h0 = __hmul2(*reinterpret_cast<const __half2*>(&f0), k256);
  __half2 h1 = __hmul2(*reinterpret_cast<const __half2*>(&f1), k256);
  *lo = *reinterpret_cast<uint32_t*>(&h0);
  *hi = *reinterpret_cast<uint32_t*>(&h1);
}

}  // namespace cuda
}  // namespace dsattn
