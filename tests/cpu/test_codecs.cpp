// Exhaustive, bit-exact tests of include/dsattn/codecs.h. Every expected value comes from an
// independent formula written here (long-double arithmetic, brute-force nearest-code searches), never
// from the codec under test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "dsattn/codecs.h"

using namespace dsattn;

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---------------------------------------------------------------- independent reference formulas
// E4M3 (OCP fn): bias 7, subnormals m * 2^-9, S.1111.111 is NaN.
bool e4m3_ref_is_nan(int c) { return (c & 0x7F) == 0x7F; }
long double e4m3_ref(int c) {
  const int s = (c >> 7) & 1, e = (c >> 3) & 0xF, m = c & 7;
  long double v = e == 0 ? std::ldexp(static_cast<long double>(m), -9)
                         : std::ldexp(1.0L + m / 8.0L, e - 7);
  return s ? -v : v;
}

// Nearest E4M3 code of a finite or infinite x by brute force over the 127 non-negative finite codes;
// ties go to the even code; |x| beyond 448 saturates (it is nearest to 448 anyway).
uint8_t e4m3_brute(float x) {
  const long double a = std::fabs(static_cast<long double>(x));
  int best = 0;
  long double best_d = std::numeric_limits<long double>::infinity();
  for (int c = 0; c <= 0x7E; ++c) {
    const long double d = std::isinf(a) ? (c == 0x7E ? 0.0L : 1.0L) : std::fabs(a - e4m3_ref(c));
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best_d = d;
      best = c;
    }
  }
  return static_cast<uint8_t>((std::signbit(x) ? 0x80 : 0) | best);
}

// E2M1 magnitudes.
const float kE2M1Table[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

uint8_t e2m1_brute(float x) {
  const long double a = std::fabs(static_cast<long double>(x));
  int best = 0;
  long double best_d = std::numeric_limits<long double>::infinity();
  for (int c = 0; c < 8; ++c) {
    const long double d = std::isinf(a) ? (c == 7 ? 0.0L : 1.0L) : std::fabs(a - kE2M1Table[c]);
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best_d = d;
      best = c;
    }
  }
  return static_cast<uint8_t>((std::signbit(x) ? 0x8 : 0) | best);
}

// Nearest bf16 of a non-NaN float: the two candidates around x, ties to even; the value of the
// "infinity" candidate is 2^128 for rounding purposes (IEEE overflow rule).
long double bf16_value_for_rounding(uint16_t h) {
  if ((h & 0x7FFF) == 0x7F80) return (h & 0x8000) ? -std::ldexp(1.0L, 128) : std::ldexp(1.0L, 128);
  return static_cast<long double>(float_of(static_cast<uint32_t>(h) << 16));
}
uint16_t bf16_brute(float x) {
  const uint32_t u = bits_of(x);
  const uint16_t lo = static_cast<uint16_t>(u >> 16);
  if ((u & 0xFFFFu) == 0) return lo;
  const uint16_t hi = static_cast<uint16_t>(lo + 1);  // next magnitude away from zero
  const long double v = x;
  const long double dlo = std::fabs(v - bf16_value_for_rounding(lo));
  const long double dhi = std::fabs(v - bf16_value_for_rounding(hi));
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1) ? hi : lo;
}

// Smallest e in [0, 254] with 2^(e-127) >= x (x > 0 finite), clamped to 254.
int ue8m0_ceil_brute(float x) {
  const long double v = x;
  for (int e = 0; e <= 254; ++e) {
    if (std::ldexp(1.0L, e - 127) >= v) return e;
  }
  return 254;
}

float random_float(std::mt19937& rng, int min_exp, int max_exp) {
  std::uniform_int_distribution<int> e(min_exp, max_exp);
  std::uniform_int_distribution<uint32_t> mant(0, (1u << 23) - 1);
  std::uniform_int_distribution<int> sign(0, 1);
  const uint32_t biased = static_cast<uint32_t>(e(rng) + 127);
  return float_of((static_cast<uint32_t>(sign(rng)) << 31) | (biased << 23) | mant(rng));
}

}  // namespace

// ================================================================ E4M3
TEST(CodecE4M3, EveryCodeDecodesToTheFormulaValue) {
  for (int c = 0; c < 256; ++c) {
    const float f = codec::e4m3_to_f32(static_cast<uint8_t>(c));
    if (e4m3_ref_is_nan(c)) {
      EXPECT_TRUE(std::isnan(f)) << "code " << c;
      EXPECT_EQ(std::signbit(f), (c & 0x80) != 0) << "code " << c;
      continue;
    }
    const long double ref = e4m3_ref(c);
    EXPECT_EQ(static_cast<long double>(f), ref) << "code " << c;
    EXPECT_EQ(std::signbit(f), (c & 0x80) != 0) << "code " << c;  // -0 for 0x80
  }
  // A few values written out by hand.
  EXPECT_EQ(codec::e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(codec::e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(codec::e4m3_to_f32(0xFE), -448.0f);
  EXPECT_EQ(codec::e4m3_to_f32(0x01), 0.001953125f);  // 2^-9
  EXPECT_EQ(codec::e4m3_to_f32(0x08), 0.015625f);     // 2^-6, smallest normal
  EXPECT_EQ(codec::e4m3_to_f32(0x07), 0.013671875f);  // 7 * 2^-9
  EXPECT_EQ(codec::e4m3_to_f32(0x40), 2.0f);
  EXPECT_EQ(codec::e4m3_to_f32(0x3F), 1.875f);
}

TEST(CodecE4M3, EveryCodeReencodesToItself) {
  for (int c = 0; c < 256; ++c) {
    const uint8_t back = codec::f32_to_e4m3(codec::e4m3_to_f32(static_cast<uint8_t>(c)));
    if (e4m3_ref_is_nan(c)) {
      EXPECT_EQ(back, (c & 0x80) ? 0xFF : 0x7F) << "code " << c;
    } else {
      EXPECT_EQ(back, c) << "code " << c;
    }
  }
}

TEST(CodecE4M3, MidpointsRoundToEvenAndNeighboursRoundToNearest) {
  for (int sign = 0; sign < 2; ++sign) {
    for (int c = 0; c < 0x7E; ++c) {
      const long double lo = e4m3_ref(c), hi = e4m3_ref(c + 1);
      const float mid = static_cast<float>((lo + hi) / 2);
      ASSERT_EQ(static_cast<long double>(mid), (lo + hi) / 2) << "midpoint not exact in float";
      const float m = sign ? -mid : mid;
      const int even = (c & 1) ? c + 1 : c;
      const uint8_t sb = sign ? 0x80 : 0;
      EXPECT_EQ(codec::f32_to_e4m3(m), sb | even) << "midpoint of codes " << c << "," << c + 1;
      const float up = std::nextafter(mid, 1e30f), down = std::nextafter(mid, 0.0f);
      EXPECT_EQ(codec::f32_to_e4m3(sign ? -up : up), sb | (c + 1)) << "just above midpoint " << c;
      EXPECT_EQ(codec::f32_to_e4m3(sign ? -down : down), sb | c) << "just below midpoint " << c;
    }
  }
}

TEST(CodecE4M3, SaturationNaNAndSignedZero) {
  const float inf = std::numeric_limits<float>::infinity();
  const float big[] = {448.0f, 448.5f, 449.0f, 464.0f, 479.99f, 480.0f, 512.0f, 1e4f, 1e30f,
                       std::numeric_limits<float>::max(), inf};
  for (float v : big) {
    EXPECT_EQ(codec::f32_to_e4m3(v), 0x7E) << v;
    EXPECT_EQ(codec::f32_to_e4m3(-v), 0xFE) << -v;
  }
  // Below 448: the previous code is 416 (0x7D), the midpoint 432 ties to the even code 448 (0x7E).
  EXPECT_EQ(codec::f32_to_e4m3(432.0f), 0x7E);
  EXPECT_EQ(codec::f32_to_e4m3(431.99f), 0x7D);
  EXPECT_EQ(codec::f32_to_e4m3(440.0f), 0x7E);
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(codec::f32_to_e4m3(qnan), 0x7F);
  EXPECT_EQ(codec::f32_to_e4m3(-qnan), 0xFF);
  EXPECT_EQ(codec::f32_to_e4m3(float_of(0x7F800001u)), 0x7F);  // signalling NaN
  EXPECT_EQ(codec::f32_to_e4m3(float_of(0xFFFFFFFFu)), 0xFF);
  EXPECT_EQ(codec::f32_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(codec::f32_to_e4m3(-0.0f), 0x80);
}

TEST(CodecE4M3, SubnormalsAndValuesBelowTheSmallestSubnormal) {
  for (int m = 1; m < 8; ++m) {
    EXPECT_EQ(codec::f32_to_e4m3(std::ldexp(static_cast<float>(m), -9)), m);
    EXPECT_EQ(codec::f32_to_e4m3(-std::ldexp(static_cast<float>(m), -9)), 0x80 | m);
  }
  const float half_min = std::ldexp(1.0f, -10);  // midpoint between 0 and 2^-9: tie to 0
  EXPECT_EQ(codec::f32_to_e4m3(half_min), 0x00);
  EXPECT_EQ(codec::f32_to_e4m3(-half_min), 0x80);
  EXPECT_EQ(codec::f32_to_e4m3(std::nextafter(half_min, 1.0f)), 0x01);
  EXPECT_EQ(codec::f32_to_e4m3(std::nextafter(half_min, 0.0f)), 0x00);
  EXPECT_EQ(codec::f32_to_e4m3(-std::nextafter(half_min, 1.0f)), 0x81);
  EXPECT_EQ(codec::f32_to_e4m3(1.5f * std::ldexp(1.0f, -9)), 0x02);  // tie 1 vs 2: even (2)
  EXPECT_EQ(codec::f32_to_e4m3(2.5f * std::ldexp(1.0f, -9)), 0x02);  // tie 2 vs 3: even (2)
  EXPECT_EQ(codec::f32_to_e4m3(7.5f * std::ldexp(1.0f, -9)), 0x08);  // tie 7 vs 2^-6: even (8)
  const float tiny[] = {std::ldexp(1.0f, -11), std::ldexp(1.0f, -20), std::numeric_limits<float>::min(),
                        std::numeric_limits<float>::denorm_min(), float_of(0x007FFFFFu)};
  for (float v : tiny) {
    EXPECT_EQ(codec::f32_to_e4m3(v), 0x00) << v;
    EXPECT_EQ(codec::f32_to_e4m3(-v), 0x80) << -v;
  }
}

TEST(CodecE4M3, BruteForceNearestCodeAgreesOnRandomFloats) {
  std::mt19937 rng(1234);
  int mismatches = 0;
  for (int i = 0; i < 200000; ++i) {
    // exponents from far below the subnormal range to far above the max
    const float x = random_float(rng, -14, 10);
    const uint8_t got = codec::f32_to_e4m3(x), want = e4m3_brute(x);
    if (got != want && ++mismatches < 20) ADD_FAILURE() << "x=" << x << " got " << int(got) << " want " << int(want);
  }
  std::uniform_real_distribution<float> u(-500.0f, 500.0f);
  for (int i = 0; i < 100000; ++i) {
    const float x = u(rng);
    const uint8_t got = codec::f32_to_e4m3(x), want = e4m3_brute(x);
    if (got != want && ++mismatches < 20) ADD_FAILURE() << "x=" << x << " got " << int(got) << " want " << int(want);
  }
  EXPECT_EQ(mismatches, 0);
}

// ================================================================ UE8M0
TEST(CodecUE8M0, EveryCodeDecodes) {
  for (int e = 0; e < 256; ++e) {
    const float f = codec::ue8m0_to_f32(static_cast<uint8_t>(e));
    if (e == 255) {
      EXPECT_TRUE(std::isnan(f));
      continue;
    }
    EXPECT_EQ(static_cast<long double>(f), std::ldexp(1.0L, e - 127)) << "code " << e;
  }
  EXPECT_EQ(codec::ue8m0_to_f32(127), 1.0f);
  EXPECT_EQ(codec::ue8m0_to_f32(128), 2.0f);
  EXPECT_EQ(codec::ue8m0_to_f32(120), 0.0078125f);
}

TEST(CodecUE8M0, CeilOnPowersOfTwoAndNeighbours) {
  for (int e = 0; e <= 254; ++e) {
    const float p = static_cast<float>(std::ldexp(1.0L, e - 127));
    EXPECT_EQ(codec::ue8m0_ceil(p), e) << "2^" << e - 127;
    const float above = std::nextafter(p, std::numeric_limits<float>::infinity());
    EXPECT_EQ(codec::ue8m0_ceil(above), e < 254 ? e + 1 : 254) << "just above 2^" << e - 127;
    const float below = std::nextafter(p, 0.0f);
    EXPECT_EQ(codec::ue8m0_ceil(below), e) << "just below 2^" << e - 127;
    // 1.5 * 2^k lies strictly between 2^k and 2^(k+1)
    if (e < 254) {
      EXPECT_EQ(codec::ue8m0_ceil(static_cast<float>(1.5L * p)), e + 1);
    }
  }
  // Below 2^-127 everything maps to 0 (the smallest scale covers it).
  EXPECT_EQ(codec::ue8m0_ceil(std::numeric_limits<float>::denorm_min()), 0);
  EXPECT_EQ(codec::ue8m0_ceil(std::ldexp(1.0f, -140)), 0);
  EXPECT_EQ(codec::ue8m0_ceil(std::numeric_limits<float>::min()), 1);  // 2^-126
  // Huge, infinite, non-positive and NaN inputs.
  EXPECT_EQ(codec::ue8m0_ceil(std::numeric_limits<float>::max()), 254);
  EXPECT_EQ(codec::ue8m0_ceil(std::numeric_limits<float>::infinity()), 254);
  EXPECT_EQ(codec::ue8m0_ceil(0.0f), 127);
  EXPECT_EQ(codec::ue8m0_ceil(-0.0f), 127);
  EXPECT_EQ(codec::ue8m0_ceil(-3.0f), 127);
  EXPECT_EQ(codec::ue8m0_ceil(std::numeric_limits<float>::quiet_NaN()), 0xFF);
  // Writer rule by hand: amax 1.0 with qmax 448 -> 1/448 -> 2^-8 (code 119); amax 6 / 6 -> 2^0.
  EXPECT_EQ(codec::ue8m0_ceil(1.0f / 448.0f), 119);
  EXPECT_EQ(codec::ue8m0_ceil(6.0f / 6.0f), 127);
  EXPECT_EQ(codec::ue8m0_ceil(7.0f / 6.0f), 128);
}

TEST(CodecUE8M0, BruteForceCeilAgreesOnRandomFloats) {
  std::mt19937 rng(99);
  int mismatches = 0;
  for (int i = 0; i < 100000; ++i) {
    float x = std::fabs(random_float(rng, -126, 127));
    if (i % 10 == 0) x = float_of(rng() & 0x007FFFFFu);  // float subnormals (and +0)
    const int want = x > 0.0f ? ue8m0_ceil_brute(x) : 127;
    const int got = codec::ue8m0_ceil(x);
    if (got != want && ++mismatches < 20) ADD_FAILURE() << "x=" << x << " got " << got << " want " << want;
  }
  EXPECT_EQ(mismatches, 0);
}

// ================================================================ E2M1
TEST(CodecE2M1, EveryCodeDecodesAndReencodes) {
  for (int c = 0; c < 16; ++c) {
    const float want = (c & 8) ? -kE2M1Table[c & 7] : kE2M1Table[c & 7];
    const float got = codec::e2m1_to_f32(static_cast<uint8_t>(c));
    EXPECT_EQ(got, want) << "code " << c;
    EXPECT_EQ(std::signbit(got), (c & 8) != 0) << "code " << c;
    EXPECT_EQ(codec::f32_to_e2m1(got), c) << "code " << c;
  }
}

TEST(CodecE2M1, MidpointsTiesAndSaturation) {
  for (int sign = 0; sign < 2; ++sign) {
    const uint8_t sb = sign ? 8 : 0;
    for (int c = 0; c < 7; ++c) {
      const float mid = (kE2M1Table[c] + kE2M1Table[c + 1]) / 2;
      const int even = (c & 1) ? c + 1 : c;
      const float s = sign ? -1.0f : 1.0f;
      EXPECT_EQ(codec::f32_to_e2m1(s * mid), sb | even) << "midpoint " << mid;
      EXPECT_EQ(codec::f32_to_e2m1(s * std::nextafter(mid, 100.0f)), sb | (c + 1)) << "above " << mid;
      EXPECT_EQ(codec::f32_to_e2m1(s * std::nextafter(mid, 0.0f)), sb | c) << "below " << mid;
    }
    const float s = sign ? -1.0f : 1.0f;
    for (float v : {6.0f, 6.5f, 7.0f, 100.0f, 1e30f, std::numeric_limits<float>::infinity()}) {
      EXPECT_EQ(codec::f32_to_e2m1(s * v), sb | 7) << s * v;
    }
  }
  // Hand-written ties: 0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2.0, 2.5 -> 2.0, 3.5 -> 4.0, 5 -> 4.0
  EXPECT_EQ(codec::f32_to_e2m1(0.25f), 0);
  EXPECT_EQ(codec::f32_to_e2m1(0.75f), 2);
  EXPECT_EQ(codec::f32_to_e2m1(1.25f), 2);
  EXPECT_EQ(codec::f32_to_e2m1(1.75f), 4);
  EXPECT_EQ(codec::f32_to_e2m1(2.5f), 4);
  EXPECT_EQ(codec::f32_to_e2m1(3.5f), 6);
  EXPECT_EQ(codec::f32_to_e2m1(5.0f), 6);
  EXPECT_EQ(codec::f32_to_e2m1(-5.0f), 0xE);
  EXPECT_EQ(codec::f32_to_e2m1(-0.0f), 0x8);
  EXPECT_EQ(codec::f32_to_e2m1(std::numeric_limits<float>::quiet_NaN()), 0);
  EXPECT_EQ(codec::f32_to_e2m1(-std::numeric_limits<float>::quiet_NaN()), 0);
}

TEST(CodecE2M1, BruteForceNearestCodeAgreesOnRandomFloats) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-8.0f, 8.0f);
  int mismatches = 0;
  for (int i = 0; i < 100000; ++i) {
    const float x = (i & 1) ? u(rng) : random_float(rng, -30, 10);
    const uint8_t got = codec::f32_to_e2m1(x), want = e2m1_brute(x);
    if (got != want && ++mismatches < 20) ADD_FAILURE() << "x=" << x << " got " << int(got) << " want " << int(want);
  }
  EXPECT_EQ(mismatches, 0);
}

// ================================================================ bf16
TEST(CodecBF16, EveryCodeDecodesAndReencodes) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = codec::bf16_to_f32(static_cast<uint16_t>(h));
    EXPECT_EQ(bits_of(f), h << 16);
    const uint16_t back = codec::f32_to_bf16(f);
    if ((h & 0x7F80) == 0x7F80 && (h & 0x7F)) {  // NaN: stays a quiet NaN with its sign
      EXPECT_EQ(back & 0x7FC0, 0x7FC0) << h;
      EXPECT_EQ(back & 0x8000, h & 0x8000) << h;
    } else {
      EXPECT_EQ(back, h) << h;
    }
  }
}

TEST(CodecBF16, MidpointsOfEveryCodeRoundToEven) {
  int mismatches = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    if ((h & 0x7F80) == 0x7F80) continue;  // inf / NaN have no upper neighbour
    const uint32_t base = h << 16;
    for (uint32_t low : {0x8000u, 0x7FFFu, 0x8001u, 0x0001u, 0xFFFFu}) {
      const float x = float_of(base | low);
      const uint16_t got = codec::f32_to_bf16(x), want = bf16_brute(x);
      if (got != want && ++mismatches < 20) {
        ADD_FAILURE() << std::hex << "bits 0x" << (base | low) << " got 0x" << got << " want 0x" << want;
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
  // Hand-written cases.
  EXPECT_EQ(codec::f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(codec::f32_to_bf16(float_of(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(codec::f32_to_bf16(float_of(0x3F818000u)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(codec::f32_to_bf16(float_of(0x7F7FFFFFu)), 0x7F80);  // FLT_MAX rounds to inf
  EXPECT_EQ(codec::f32_to_bf16(float_of(0xFF7F8000u)), 0xFF80);  // tie at the top: even -> -inf
  EXPECT_EQ(codec::f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(codec::f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(codec::f32_to_bf16(float_of(0x7F800001u)) & 0x7FC0, 0x7FC0);  // sNaN -> qNaN, not inf
  EXPECT_EQ(codec::f32_to_bf16(float_of(0xFF800001u)) & 0xFFC0, 0xFFC0);
}

TEST(CodecBF16, BruteForceAgreesOnRandomFloats) {
  std::mt19937 rng(5);
  int mismatches = 0;
  for (int i = 0; i < 300000; ++i) {
    const uint32_t u = rng();
    if ((u & 0x7F800000u) == 0x7F800000u) continue;
    const float x = float_of(u);
    const uint16_t got = codec::f32_to_bf16(x), want = bf16_brute(x);
    if (got != want && ++mismatches < 20) ADD_FAILURE() << std::hex << "bits 0x" << u << " got " << got << " want " << want;
  }
  EXPECT_EQ(mismatches, 0);
}
