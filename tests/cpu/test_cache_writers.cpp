// Cache writers (SPEC §3.7) on the CPU backend: round trips within the quantization bound, exact
// bytes for hand-picked values, the amax == 0 and NaN rules, slot handling (-1 skips; out-of-range
// and repeated slots are errors that write nothing) and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cpu_test_util.h"
#include "dsattn/codecs.h"
#include "dsattn/ops.h"

using namespace dsattn;
using testutil::indexer_cache_view;
using testutil::latent_cache_view;

namespace {

constexpr uint8_t kUntouched = 0xAA;

float f32_at(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}
uint16_t u16_at(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// Independent dequantizers, straight from the SPEC §2 byte layouts.
std::vector<float> deq_indexer_fp8(const uint8_t* page, int S, int D, int s) {
  std::vector<float> v(D);
  const float scale = f32_at(page + S * D + 4 * s);
  for (int d = 0; d < D; ++d) v[d] = codec::e4m3_to_f32(page[s * D + d]) * scale;
  return v;
}
std::vector<float> deq_indexer_mxfp4(const uint8_t* page, int S, int D, int s) {
  std::vector<float> v(D);
  for (int d = 0; d < D; ++d) {
    const uint8_t pair = page[s * (D / 2) + d / 2];
    const uint8_t nib = (d % 2 == 0) ? (pair & 0xF) : (pair >> 4);
    const uint8_t e = page[S * (D / 2) + 4 * s + d / 32];
    v[d] = codec::e2m1_to_f32(nib) * std::ldexp(1.0f, e - 127);
  }
  return v;
}
std::vector<float> deq_latent_v4(const uint8_t* page, int P, int off) {
  std::vector<float> v(512);
  const uint8_t* data = page + off * 576;
  const uint8_t* sc = page + P * 576 + off * 8;
  for (int i = 0; i < 448; ++i) v[i] = codec::e4m3_to_f32(data[i]) * std::ldexp(1.0f, sc[i / 64] - 127);
  for (int i = 0; i < 64; ++i) v[448 + i] = codec::bf16_to_f32(u16_at(data + 448 + 2 * i));
  return v;
}
std::vector<float> deq_latent_v32(const uint8_t* page, int off) {
  std::vector<float> v(576);
  const uint8_t* tok = page + off * 656;
  for (int i = 0; i < 512; ++i) v[i] = codec::e4m3_to_f32(tok[i]) * f32_at(tok + 512 + 4 * (i / 128));
  for (int i = 0; i < 64; ++i) v[512 + i] = codec::bf16_to_f32(u16_at(tok + 528 + 2 * i));
  return v;
}

// E4M3 round trip: relative half-ulp 2^-4 for normals, absolute 2^-10 * scale for subnormals.
bool within_e4m3(float x, float y, float scale) {
  return std::fabs(x - y) <= std::fabs(x) / 16 + scale * std::ldexp(1.0f, -10);
}

std::vector<float> random_rows(int rows, int dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_real_distribution<float> mag(-6.0f, 6.0f);
  std::vector<float> x(static_cast<size_t>(rows) * dim);
  for (int r = 0; r < rows; ++r) {
    const float row_scale = std::exp2(mag(rng));  // rows of very different magnitudes
    for (int d = 0; d < dim; ++d) x[r * dim + d] = n(rng) * row_scale;
  }
  return x;
}

// Writes one f32 row kv [1, 576] to slot 0 of a one-page, one-token V3.2 latent cache whose 656
// bytes start as kUntouched; *page receives those bytes.
void write_one_v32_token(std::vector<float>& kv, std::vector<uint8_t>* page) {
  page->assign(656, kUntouched);
  int32_t slot = 0;
  WriteLatentCacheParams p;
  p.kv = make_tensor(kv.data(), DType::kF32, {1, 576});
  p.slot_mapping = make_tensor(&slot, DType::kI32, {1});
  p.cache = latent_cache_view(*page, LatentFormat::kV32Fp8, 1, 656);
  ASSERT_TRUE(write_latent_cache(p, Exec{}).ok());
}

}  // namespace

TEST(CacheWriters, IndexerFp8RoundTripWithinBound) {
  constexpr int T = 40, D = 128, S = 64, kPages = 3, kStride = 64 * 132 + 64;  // padded stride
  std::vector<float> k = random_rows(T, D, 1);
  std::vector<uint8_t> pages(kPages * kStride, kUntouched);
  std::vector<int32_t> slots(T);
  for (int t = 0; t < T; ++t) slots[t] = (t * 7 + 5) % (kPages * S);  // distinct, shuffled
  WriteIndexerCacheParams p;
  p.k = make_tensor(k.data(), DType::kF32, {T, D});
  p.slot_mapping = make_tensor(slots.data(), DType::kI32, {T});
  p.cache = indexer_cache_view(pages, IndexerFormat::kFp8, S, D, kStride);
  Status st = write_indexer_cache(p, Exec{});
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (int t = 0; t < T; ++t) {
    const uint8_t* page = pages.data() + (slots[t] / S) * kStride;
    const int s = slots[t] % S;
    const float scale = f32_at(page + S * D + 4 * s);
    float amax = 0;
    for (int d = 0; d < D; ++d) amax = std::max(amax, std::fabs(k[t * D + d]));
    // power of two, and the smallest one with amax / scale <= 448
    int e;
    EXPECT_EQ(std::frexp(scale, &e), 0.5f) << "scale is not a power of two: " << scale;
    EXPECT_LE(amax / scale, 448.0f);
    EXPECT_GT(amax / scale, 224.0f);
    const std::vector<float> v = deq_indexer_fp8(page, S, D, s);
    for (int d = 0; d < D; ++d) ASSERT_TRUE(within_e4m3(k[t * D + d], v[d], scale)) << t << "," << d;
  }
  // Padding bytes of each page are not touched.
  for (int pg = 0; pg < kPages; ++pg) {
    for (int i = S * 132; i < kStride; ++i) ASSERT_EQ(pages[pg * kStride + i], kUntouched);
  }
}

TEST(CacheWriters, IndexerMxfp4RoundTripWithinBound) {
  for (int D : {32, 64, 128}) {
    constexpr int T = 20, S = 32, kPages = 2;
    const int stride = S * (D / 2 + 4);
    std::vector<float> k = random_rows(T, D, 2 + D);
    std::vector<uint8_t> pages(kPages * stride, kUntouched);
    std::vector<int64_t> slots(T);
    for (int t = 0; t < T; ++t) slots[t] = 63 - 3 * t;
    WriteIndexerCacheParams p;
    p.k = make_tensor(k.data(), DType::kF32, {T, D});
    p.slot_mapping = make_tensor(slots.data(), DType::kI64, {T});
    p.cache = indexer_cache_view(pages, IndexerFormat::kMxfp4, S, D, stride);
    ASSERT_TRUE(write_indexer_cache(p, Exec{}).ok());
    for (int t = 0; t < T; ++t) {
      const uint8_t* page = pages.data() + (slots[t] / S) * stride;
      const int s = static_cast<int>(slots[t] % S);
      const std::vector<float> v = deq_indexer_mxfp4(page, S, D, s);
      for (int g = 0; g < D / 32; ++g) {
        const float scale = std::ldexp(1.0f, page[S * (D / 2) + 4 * s + g] - 127);
        for (int i = g * 32; i < g * 32 + 32; ++i) {
          const float x = k[t * D + i];
          ASSERT_LE(std::fabs(x - v[i]), 0.25f * std::fabs(x) + 0.25f * scale) << "D=" << D << " t=" << t << " i=" << i;
        }
      }
      for (int j = D / 32; j < 4; ++j) EXPECT_EQ(page[S * (D / 2) + 4 * s + j], 0) << "unused scale byte";
    }
  }
}

TEST(CacheWriters, LatentRoundTripWithinBoundBothFormatsAndDtypes) {
  for (LatentFormat f : {LatentFormat::kV4Fp8, LatentFormat::kV32Fp8}) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      const int dqk = latent_dqk(f), P = 16, kPages = 4, T = 30;
      const int64_t stride = latent_min_page_bytes(f, P);
      std::vector<float> x = random_rows(T, dqk, 3);
      std::vector<uint16_t> xb(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        xb[i] = codec::f32_to_bf16(x[i]);
        if (dt == DType::kBF16) x[i] = codec::bf16_to_f32(xb[i]);  // the exact input values
      }
      std::vector<uint8_t> pages(kPages * stride, kUntouched);
      std::vector<int32_t> slots(T);
      for (int t = 0; t < T; ++t) slots[t] = (t * 13 + 3) % (kPages * P);
      WriteLatentCacheParams p;
      p.kv = dt == DType::kF32 ? make_tensor(x.data(), dt, {T, dqk}) : make_tensor(xb.data(), dt, {T, dqk});
      p.slot_mapping = make_tensor(slots.data(), DType::kI32, {T});
      p.cache = latent_cache_view(pages, f, P, stride);
      Status st = write_latent_cache(p, Exec{});
      ASSERT_TRUE(st.ok()) << st.to_string();
      for (int t = 0; t < T; ++t) {
        const uint8_t* page = pages.data() + (slots[t] / P) * stride;
        const int off = slots[t] % P;
        const std::vector<float> v = f == LatentFormat::kV4Fp8 ? deq_latent_v4(page, P, off) : deq_latent_v32(page, off);
        const int nope = f == LatentFormat::kV4Fp8 ? 448 : 512, group = f == LatentFormat::kV4Fp8 ? 64 : 128;
        for (int i = 0; i < nope; ++i) {
          float amax = 0;
          for (int j = (i / group) * group; j < (i / group + 1) * group; ++j) amax = std::max(amax, std::fabs(x[t * dqk + j]));
          // pow2 scale <= 2 * amax / 448; raw scale = amax / 448
          const float scale_bound = 2 * amax / 448;
          ASSERT_TRUE(within_e4m3(x[t * dqk + i], v[i], scale_bound)) << latent_format_name(f) << " t=" << t << " i=" << i;
        }
        for (int i = nope; i < dqk; ++i) {
          ASSERT_EQ(codec::f32_to_bf16(v[i]), xb[t * dqk + i]) << "rope must be the bf16 of the input";
        }
      }
      if (f == LatentFormat::kV4Fp8) {  // the page padding [P*584, stride) stays untouched
        for (int pg = 0; pg < kPages; ++pg) {
          for (int64_t i = P * 584; i < stride; ++i) ASSERT_EQ(pages[pg * stride + i], kUntouched);
        }
      }
    }
  }
}

TEST(CacheWriters, ExactBytesZerosNaNAndOnes) {
  // Indexer FP8, D = 32: all zeros -> amax 0 -> scale 1.0 (ue8m0_ceil(0) = 127), codes 0.
  // Second token: ones with a NaN at d = 5 -> amax 1 (NaN ignored) -> scale 2^-8, codes 256 = 0x78,
  // the NaN stays a NaN code (0x7F).
  constexpr int D = 32, S = 4;
  std::vector<float> k(2 * D, 0.0f);
  for (int d = 0; d < D; ++d) k[D + d] = 1.0f;
  k[D + 5] = std::numeric_limits<float>::quiet_NaN();
  std::vector<uint8_t> pages(S * (D + 4), kUntouched);
  int32_t slots[2] = {2, 0};
  WriteIndexerCacheParams p;
  p.k = make_tensor(k.data(), DType::kF32, {2, D});
  p.slot_mapping = make_tensor(slots, DType::kI32, {2});
  p.cache = indexer_cache_view(pages, IndexerFormat::kFp8, S, D, S * (D + 4));
  ASSERT_TRUE(write_indexer_cache(p, Exec{}).ok());
  for (int d = 0; d < D; ++d) EXPECT_EQ(pages[2 * D + d], 0x00);
  EXPECT_EQ(f32_at(&pages[S * D + 4 * 2]), 1.0f);
  for (int d = 0; d < D; ++d) EXPECT_EQ(pages[d], d == 5 ? 0x7F : 0x78) << d;
  EXPECT_EQ(f32_at(&pages[S * D]), 0.00390625f);
  for (int d = 0; d < D; ++d) EXPECT_EQ(pages[1 * D + d], kUntouched);  // state 1 untouched
  for (int d = 0; d < D; ++d) EXPECT_EQ(pages[3 * D + d], kUntouched);  // state 3 untouched

  // Latent V3.2: a zero group gets FLT_MIN (vLLM's floor); a group with amax 448 gets scale 1.0.
  std::vector<float> kv(576, 0.0f);
  for (int i = 128; i < 256; ++i) kv[i] = (i % 2 ? 448.0f : -1.0f);
  std::vector<uint8_t> lp;
  ASSERT_NO_FATAL_FAILURE(write_one_v32_token(kv, &lp));
  EXPECT_EQ(f32_at(&lp[512]), std::numeric_limits<float>::min());
  EXPECT_EQ(f32_at(&lp[516]), 1.0f);
  EXPECT_EQ(lp[128], 0xB8);  // -1.0
  EXPECT_EQ(lp[129], 0x7E);  // 448
  EXPECT_EQ(lp[0], 0x00);
}

TEST(CacheWriters, MinusOneSkipsAndStridedInput) {
  constexpr int D = 64, S = 8, T = 3;
  // rows with a padded row stride of 80 elements
  std::vector<float> k(T * 80, 0.5f);
  std::vector<uint8_t> pages(S * (D + 4), kUntouched);
  int64_t slots[T] = {-1, 6, -1};
  WriteIndexerCacheParams p;
  p.k = make_tensor_strided(k.data(), DType::kF32, {T, D}, {80, 1});
  p.slot_mapping = make_tensor(slots, DType::kI64, {T});
  p.cache = indexer_cache_view(pages, IndexerFormat::kFp8, S, D, S * (D + 4));
  ASSERT_TRUE(write_indexer_cache(p, Exec{}).ok());
  for (int s = 0; s < S; ++s) {
    for (int d = 0; d < D; ++d) {
      // 0.5 -> scale 2^-9 (0.5/448 -> 2^-9), 0.5 / 2^-9 = 256 -> 0x78
      EXPECT_EQ(pages[s * D + d], s == 6 ? 0x78 : kUntouched) << s;
    }
    EXPECT_EQ(pages[S * D + 4 * s + 3], s == 6 ? 0x3B : kUntouched) << s;  // 2^-9 = 0x3B000000
  }
}

TEST(CacheWriters, OutOfRangeAndRepeatedSlotsAreErrorsAndWriteNothing) {
  constexpr int D = 32, S = 4;
  std::vector<float> k(3 * D, 1.0f);
  std::vector<uint8_t> pages(2 * S * (D + 4), kUntouched);
  WriteIndexerCacheParams p;
  p.k = make_tensor(k.data(), DType::kF32, {3, D});
  p.cache = indexer_cache_view(pages, IndexerFormat::kFp8, S, D, S * (D + 4));  // 2 pages
  int32_t over[3] = {0, 8, 1};
  p.slot_mapping = make_tensor(over, DType::kI32, {3});
  Status st = write_indexer_cache(p, Exec{});
  EXPECT_EQ(st.code, Code::kInvalidArgument);
  EXPECT_EQ(st.message, "write_indexer_cache: slot_mapping[1] expected -1 or in [0, 8), got 8");
  int32_t neg[3] = {0, -2, 1};
  p.slot_mapping = make_tensor(neg, DType::kI32, {3});
  EXPECT_EQ(write_indexer_cache(p, Exec{}).message,
            "write_indexer_cache: slot_mapping[1] expected -1 or in [0, 8), got -2");
  int32_t dup[3] = {5, 1, 5};
  p.slot_mapping = make_tensor(dup, DType::kI32, {3});
  EXPECT_EQ(write_indexer_cache(p, Exec{}).message,
            "write_indexer_cache: slot_mapping[0] and slot_mapping[2] expected distinct slots, both are 5");
  for (uint8_t b : pages) ASSERT_EQ(b, kUntouched);

  std::vector<float> kv(512, 1.0f);
  std::vector<uint8_t> lp(1728, kUntouched);
  int64_t slot = 2;
  WriteLatentCacheParams l;
  l.kv = make_tensor(kv.data(), DType::kF32, {1, 512});
  l.slot_mapping = make_tensor(&slot, DType::kI64, {1});
  l.cache = latent_cache_view(lp, LatentFormat::kV4Fp8, 2, 1728);
  EXPECT_EQ(write_latent_cache(l, Exec{}).message, "write_latent_cache: slot_mapping[0] expected -1 or in [0, 2), got 2");
  for (uint8_t b : lp) ASSERT_EQ(b, kUntouched);
}

TEST(CacheWriters, ArgumentErrors) {
  std::vector<float> kv(2 * 576, 0.0f);
  std::vector<uint8_t> lp(2 * 656);
  int32_t slots[2] = {0, 1};
  WriteLatentCacheParams l;
  l.kv = make_tensor(kv.data(), DType::kF32, {2, 512});
  l.slot_mapping = make_tensor(slots, DType::kI32, {2});
  l.cache = latent_cache_view(lp, LatentFormat::kV32Fp8, 2, 2 * 656);
  EXPECT_EQ(write_latent_cache(l, Exec{}).message, "write_latent_cache: kv shape expected [*, 576], got [2, 512]");
  l.kv = make_tensor(kv.data(), DType::kF16, {2, 576});
  EXPECT_EQ(write_latent_cache(l, Exec{}).message, "write_latent_cache: kv dtype expected f32 or bf16, got f16");
  l.kv = make_tensor(kv.data(), DType::kF32, {2, 576});
  l.slot_mapping = make_tensor(slots, DType::kI32, {1});
  EXPECT_EQ(write_latent_cache(l, Exec{}).message, "write_latent_cache: slot_mapping shape expected [2], got [1]");
  l.slot_mapping = make_tensor(slots, DType::kF32, {2});
  EXPECT_EQ(write_latent_cache(l, Exec{}).message,
            "write_latent_cache: slot_mapping dtype expected i32 or i64, got f32");
  l.slot_mapping = make_tensor(slots, DType::kI32, {2});
  l.cache.page_stride_bytes = 1000;
  EXPECT_EQ(write_latent_cache(l, Exec{}).message,
            "write_latent_cache: cache.page_stride_bytes expected >= 1312 for 2 v32_fp8 tokens per page, got 1000");
  l.cache.page_stride_bytes = 2 * 656;
  EXPECT_TRUE(write_latent_cache(l, Exec{}).ok());

  std::vector<float> k(2 * 128, 0.0f);
  std::vector<uint8_t> ip(64 * 132);
  WriteIndexerCacheParams p;
  p.k = make_tensor(k.data(), DType::kF32, {2, 128});
  p.slot_mapping = make_tensor(slots, DType::kI32, {2});
  p.cache = indexer_cache_view(ip, IndexerFormat::kFp8, 64, 128, 64 * 132);
  p.cache.page_stride_bytes = 64 * 132 - 4;
  EXPECT_EQ(write_indexer_cache(p, Exec{}).message,
            "write_indexer_cache: cache.page_stride_bytes expected a multiple of 4 >= 8448 (64 states of 132 bytes), got 8444");
  p.cache.page_stride_bytes = 64 * 132;
  p.cache.states_per_page = 300;
  EXPECT_EQ(write_indexer_cache(p, Exec{}).message, "write_indexer_cache: cache.states_per_page expected in [1, 256], got 300");
  p.cache.states_per_page = 64;
  p.cache.head_dim = 96;
  EXPECT_EQ(write_indexer_cache(p, Exec{}).message, "write_indexer_cache: cache.head_dim expected 32, 64 or 128, got 96");
  p.cache.head_dim = 128;
  EXPECT_TRUE(write_indexer_cache(p, Exec{}).ok());
}

TEST(CacheWriters, NaNCodesArePositiveWhateverTheirOrigin) {
  // V3.2 group 0 holds +inf: amax inf -> scale inf; inf / inf is NaN (negative on x86, positive on
  // CUDA) and finite / inf is 0. Group 1 holds a negative NaN input. Every NaN is written as 0x7F.
  std::vector<float> kv(576, 1.0f);
  kv[3] = std::numeric_limits<float>::infinity();
  kv[4] = -2.0f;
  kv[130] = -std::numeric_limits<float>::quiet_NaN();
  std::vector<uint8_t> lp;
  ASSERT_NO_FATAL_FAILURE(write_one_v32_token(kv, &lp));
  EXPECT_EQ(lp[3], 0x7F);  // inf / inf
  EXPECT_EQ(lp[0], 0x00);  // 1 / inf = +0
  EXPECT_EQ(lp[4], 0x80);  // -2 / inf = -0
  EXPECT_TRUE(std::isinf(f32_at(&lp[512])));
  EXPECT_EQ(lp[130], 0x7F);  // -NaN input
  EXPECT_EQ(f32_at(&lp[516]), 1.0f / 448.0f);  // amax 1 (NaN ignored)
}
