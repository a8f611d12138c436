// dsattn — bit-exact number codecs shared by host and device code.
//
//  * E4M3 (OCP "fn"): bias 7, max 448, no infinities, S.1111.111 is NaN. Encoding rounds to nearest
//    even and saturates to +-448 (infinities too); NaN encodes to 0x7F (sign kept: 0xFF for -NaN).
//  * UE8M0: 8-bit biased exponent, value 2^(e-127); 0xFF is NaN.
//  * E2M1 (4 bit): 0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives; encoding rounds to nearest even and
//    saturates to +-6; NaN encodes to +0 (E2M1 has no NaN).
//  * bf16: round to nearest even; NaN stays a (quiet) NaN.
//
// These are plain integer/float functions, usable from CUDA device code (the DSATTN_HD macro adds
// __host__ __device__ under nvcc) and from C++17 host code alike. Host and device results are
// identical bit for bit; tests check every code point.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DSATTN_HD __host__ __device__ __forceinline__
#else
#define DSATTN_HD inline
#endif

namespace dsattn {
namespace codec {

DSATTN_HD uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

DSATTN_HD float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// Shift right by `s` (0..63) rounding to nearest, ties to even.
DSATTN_HD uint32_t rne_shift(uint32_t v, int s) {
  if (s <= 0) return v;
  if (s >= 32) return 0;  // callers never pass a value >= 2^31 with s >= 32 that rounds up
  const uint32_t keep = v >> s;
  const uint32_t rem = v & ((1u << s) - 1u);
  const uint32_t half = 1u << (s - 1);
  return keep + ((rem > half || (rem == half && (keep & 1u))) ? 1u : 0u);
}

// ---------------------------------------------------------------- E4M3
constexpr float kE4M3Max = 448.0f;
constexpr uint8_t kE4M3NaN = 0x7F;

DSATTN_HD float e4m3_to_f32(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80) << 24;
  const uint32_t e = (c >> 3) & 0xF;
  const uint32_t m = c & 0x7;
  if (e == 0xF && m == 0x7) return f32_from_bits(sign | 0x7FC00000u);
  if (e == 0) {
    // subnormal: m * 2^-9, exact in float
    const float v = static_cast<float>(m) * (1.0f / 512.0f);
    return sign ? -v : v;
  }
  return f32_from_bits(sign | ((e + 120u) << 23) | (m << 20));
}

DSATTN_HD uint8_t f32_to_e4m3(float x) {
  const uint32_t u = f32_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80);
  const uint32_t abs_bits = u & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return static_cast<uint8_t>(sign | kE4M3NaN);  // NaN
  if (abs_bits >= 0x43E00000u) return static_cast<uint8_t>(sign | 0x7E);     // >= 448 (and inf): saturate
  const int exp = static_cast<int>(abs_bits >> 23) - 127;
  const uint32_t mant = abs_bits & 0x7FFFFFu;
  if (exp >= -6) {
    // normal range: keep 3 mantissa bits
    uint32_t r = rne_shift((static_cast<uint32_t>(exp + 7) << 23) | mant, 20);  // carry rolls into exponent
    if (r > 0x7E) r = 0x7E;
    return static_cast<uint8_t>(sign | r);
  }
  if (abs_bits < 0x00800000u) return sign;  // float zero / subnormal: far below half of 2^-9
  // subnormal range of e4m3: value = m24 * 2^(exp-23), in units of 2^-9 -> shift by (14 - exp)
  const uint32_t m24 = mant | 0x800000u;
  const int shift = 14 - exp;  // >= 21
  const uint32_t r = rne_shift(m24, shift);  // may round up to 8 == smallest normal (0x08)
  return static_cast<uint8_t>(sign | r);
}

// ---------------------------------------------------------------- UE8M0
constexpr uint8_t kUE8M0NaN = 0xFF;

DSATTN_HD float ue8m0_to_f32(uint8_t e) {
  if (e == 0xFF) return f32_from_bits(0x7FC00000u);
  if (e == 0) return f32_from_bits(0x00400000u);  // 2^-127 (a float subnormal)
  return f32_from_bits(static_cast<uint32_t>(e) << 23);
}

// Smallest e with 2^(e-127) >= x, for finite x > 0; clamps to [0, 254]. x <= 0 gives 127 (scale 1).
// NaN gives 0xFF. This is the writer's "2^ceil(log2(amax / qmax))" with x = amax / qmax.
DSATTN_HD uint8_t ue8m0_ceil(float x) {
  const uint32_t u = f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return kUE8M0NaN;
  if (!(x > 0.0f)) return 127;
  if (u >= 0x7F000000u) return 254;  // >= 2^127 (and +inf)
  if (u < 0x00800000u) {
    // float subnormal x = mant * 2^-149 <= 2^-127 ... return 0 (2^-127) when it covers x
    return (u <= 0x00400000u) ? 0 : 1;
  }
  const uint32_t e = u >> 23;
  const uint32_t mant = u & 0x7FFFFFu;
  return static_cast<uint8_t>(mant ? e + 1 : e);
}

// ---------------------------------------------------------------- E2M1
DSATTN_HD float e2m1_to_f32(uint8_t nib) {
  // magnitudes in units of 0.5: 0, 1, 2, 3, 4, 6, 8, 12
  const uint32_t m = nib & 0x7u;
  const uint32_t halves = m < 4 ? m : (m == 4 ? 4u : (m == 5 ? 6u : (m == 6 ? 8u : 12u)));
  const float v = static_cast<float>(halves) * 0.5f;
  return (nib & 0x8u) ? -v : v;
}

DSATTN_HD uint8_t f32_to_e2m1(float x) {
  const uint32_t u = f32_bits(x);
  const uint32_t abs_bits = u & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return 0;  // NaN -> +0
  const uint8_t sign = static_cast<uint8_t>((u >> 28) & 0x8u);
  const float a = f32_from_bits(abs_bits);
  uint8_t m;
  // Midpoints between neighbours; a tie goes to the even code.
  if (a <= 0.25f) m = 0;
  else if (a < 0.75f) m = 1;
  else if (a <= 1.25f) m = 2;
  else if (a < 1.75f) m = 3;
  else if (a <= 2.5f) m = 4;
  else if (a < 3.5f) m = 5;
  else if (a <= 5.0f) m = 6;
  else m = 7;
  return static_cast<uint8_t>(sign | m);
}

// ---------------------------------------------------------------- bf16
DSATTN_HD float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

DSATTN_HD uint16_t f32_to_bf16(float x) {
  const uint32_t u = f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  const uint32_t lsb = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7FFFu + lsb) >> 16);
}

}  // namespace codec
}  // namespace dsattn
