// Arch-neutral register dequantization for the indexer's tensor-core path.
//  * e2m1x8_to_e4m3: 8 packed E2M1 nibbles (low nibble = lower element) -> 8 E4M3 bytes, exact
//    (every E2M1 value is an E4M3 value). Two byte-permute lookups per 4 values.
//  * e4m3x4_to_f16x2: 4 E4M3 bytes -> 2 f16x2 words, exact (sm_80 has no FP8 MMA). The E4M3 NaN
//    code (S.1111.111) becomes the finite value +-480 on this path.
//  * mx_*: one MXFP4 vector's blocks folded into E4M3 under one power-of-two scale (the Hopper
//    kernel's FP4 path, see mx_vector).
#pragma once
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace dsattn {
namespace cuda {

// E4M3 bytes of the E2M1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6.
constexpr uint32_t kE2m1LutLo = 0x3C383000u;
constexpr uint32_t kE2m1LutHi = 0x4C484440u;

// 8 E2M1 nibbles of w (value i in bits 4 i .. 4 i + 3) -> E4M3 bytes of values 0-3 (*lo) and 4-7
// (*hi) through lookup words (the magnitudes' E4M3 bytes, lo: 0, 0.5, 1, 1.5, hi: 2, 3, 4, 6, each
// possibly scaled, see mx_shift_lut): a byte permute picks each magnitude (selectors: the
// nibbles' low 3 bits), another the sign byte 0x80 or 0x00 (selectors 1 / 0: the sign bits).
__device__ __forceinline__ void mx_e2m1x8(uint32_t w, uint2 lut, uint32_t* lo, uint32_t* hi) {
  const uint32_t m = w & 0x77777777u, sg = (w >> 3) & 0x11111111u;
  *lo = __byte_perm(lut.x, lut.y, m) | __byte_perm(0x8000u, 0u, sg);
  *hi = __byte_perm(lut.x, lut.y, m >> 16) | __byte_perm(0x8000u, 0u, sg >> 16);
}

// Exact E2M1 -> E4M3 (the lookup words of the plain magnitudes).
__device__ __forceinline__ void e2m1x8_to_e4m3(uint32_t w, uint32_t* lo, uint32_t* hi) {
  mx_e2m1x8(w, make_uint2(kE2m1LutLo, kE2m1LutHi), lo, hi);
}

// ---------------------------------------------------------------- MXFP4 folded into E4M3
// An MXFP4 vector (D values, one UE8M0 exponent e_b per 32) is e2m1 * 2^(e_b - 127). With e_max
// the largest e_b it equals 2^(e_max - 133) * (e2m1 * 2^t_b), t_b = e_b - e_max + 6 <= 6. The
// factor 2^(e_max - 133) is applied after the dot product (keys: the state's scale; Q: folded into
// the head's weight, since relu(c x) = c relu(x) for c > 0); e2m1 * 2^t is an E4M3 value for every
// e2m1 value when -8 <= t <= 6 (6 * 2^6 = 384 <= 448; 0.5 * 2^-8 = 2^-9, the smallest subnormal),
// so the folding is exact for vectors whose block exponents span at most 14. Blocks further below
// the largest are rounded to the nearest E4M3 value (ties to even): an error of at most half the
// smallest subnormal, 2^-10 * 2^(e_max - 133) = 2^-16 of the largest block's unit 2^(e_max - 127),
// per element.
// The E4M3 bytes of the E2M1 magnitudes 0, 0.5, 1, 1.5 (lo) and 2, 3, 4, 6 (hi) times 2^t, t <= 6.
__device__ __noinline__ inline uint2 mx_shift_lut_slow(int t) {
  const float mags[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  uint32_t w[2] = {0u, 0u};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t b = static_cast<uint32_t>(__nv_cvt_float_to_fp8(ldexpf(mags[i], t), __NV_SATFINITE, __NV_E4M3));
    w[i >> 2] |= b << (8 * (i & 3));
  }
  return make_uint2(w[0], w[1]);
}
__device__ __forceinline__ uint2 mx_shift_lut(int t) {
  if (t >= -5) {  // every nonzero product is a normal E4M3 value: its exponent field moves by t
    return make_uint2(kE2m1LutLo + static_cast<uint32_t>(t) * 0x08080800u,
                      kE2m1LutHi + static_cast<uint32_t>(t) * 0x08080808u);
  }
  return mx_shift_lut_slow(t);  // subnormal results (blocks 12 or more exponents below the largest)
}
// The largest of the 4 UE8M0 exponents packed in `sw` (D = 128): scalar byte extraction and integer
// max (sm_90 has no SIMD byte max; __vmaxu4 is ~8 instructions there).
__device__ __forceinline__ int mx_max_exp(uint32_t sw) {
  const int e0 = static_cast<int>(sw & 0xFFu), e1 = static_cast<int>((sw >> 8) & 0xFFu);
  const int e2 = static_cast<int>((sw >> 16) & 0xFFu), e3 = static_cast<int>(sw >> 24);
  return max(max(e0, e1), max(e2, e3));
}
// A vector's factor 2^(m - 133) for its largest exponent m (NaN for m = 0xFF, the UE8M0 NaN code:
// the dequantized vector then holds NaN). Normal from m = 7 on, else 2^-149 * 2^(m + 16).
__device__ __forceinline__ float mx_scale(int m) {
  const uint32_t bits = m >= 7 ? static_cast<uint32_t>(m - 6) << 23 : 1u << (m + 16);
  return __uint_as_float(m == 255 ? 0x7FC00000u : bits);
}
// The lookup words of block b of a vector with packed exponents `sw` whose largest is m.
__device__ __forceinline__ uint2 mx_block_lut(uint32_t sw, int b, int m) {
  return mx_shift_lut(static_cast<int>((sw >> (8 * b)) & 0xFFu) - m + 6);
}
// One MXFP4 vector of D = 128 values (packed exponents `sw`, one byte per block): the lookup words
// of its block b (*lut) and its factor (*scale, mx_scale).
__device__ __forceinline__ void mx_vector(uint32_t sw, int b, uint2* lut, float* scale) {
  const int m = mx_max_exp(sw);
  *lut = mx_block_lut(sw, b, m);
  *scale = mx_scale(m);
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
