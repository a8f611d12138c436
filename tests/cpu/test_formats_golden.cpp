// Golden byte images of a small page of every cache format (SPEC §2.1, §2.2, §2.3). The expected
// bytes below were worked out independently of dsattn (exact rational arithmetic for the nearest
// E4M3 / E2M1 codes, IEEE float32 for the divisions) and are written here literally; the cache writer
// must reproduce them exactly, and must leave every other byte of the pages untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu_test_util.h"
#include "dsattn/ops.h"

using namespace dsattn;
using testutil::indexer_cache_view;
using testutil::latent_cache_view;

namespace {

constexpr uint8_t kUntouched = 0xAA;

void put_bytes(std::vector<uint8_t>* img, size_t at, const std::vector<uint8_t>& b) {
  std::memcpy(img->data() + at, b.data(), b.size());
}
void put_bf16(std::vector<uint8_t>* img, size_t at, const std::vector<uint16_t>& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    (*img)[at + 2 * i] = static_cast<uint8_t>(v[i]);
    (*img)[at + 2 * i + 1] = static_cast<uint8_t>(v[i] >> 8);
  }
}

// Reports the first differing byte, then compares the whole image.
void expect_image(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      ADD_FAILURE() << "first difference at byte " << i << ": got 0x" << std::hex << int(got[i]) << ", want 0x"
                    << int(want[i]);
      break;
    }
  }
  EXPECT_TRUE(got == want);
}

}  // namespace

// Indexer FP8, D = 32, S = 2 states per page, 2 pages of 72 bytes (2 * (32 + 4)).
TEST(FormatsGolden, IndexerFp8Page) {
  constexpr int D = 32, S = 2, kStride = 72, kPages = 2;
  std::vector<uint8_t> pages(kPages * kStride, kUntouched);
  const IndexerCache cache = indexer_cache_view(pages, IndexerFormat::kFp8, S, D, kStride);

  // Token A (f32) -> slot 0 (page 0, state 0): x[d] = (d - 16) / 4, amax 4 -> 4/448 -> scale 2^-6,
  // x / scale = 16 * (d - 16), all exact E4M3 values.
  std::vector<float> a(D);
  for (int d = 0; d < D; ++d) a[d] = (d - 16) * 0.25f;
  int32_t slot_a = 0;
  WriteIndexerCacheParams pa;
  pa.k = make_tensor(a.data(), DType::kF32, {1, D});
  pa.slot_mapping = make_tensor(&slot_a, DType::kI32, {1});
  pa.cache = cache;
  ASSERT_TRUE(write_indexer_cache(pa, Exec{}).ok());

  // Token B (bf16) -> slot 3 (page 1, state 1): 1.0, -0.30078125, 0.00090027, 0.5, zeros, -0.98828125.
  // amax 1 -> 1/448 -> scale 2^-8; -77.0 -> -80 (0xEA), 0.2305 -> 0.234375 (0x27), -253 -> -256 (0xF8).
  std::vector<uint16_t> b(D, 0);
  b[0] = 0x3F80;
  b[1] = 0xBE9A;
  b[2] = 0x3A6C;
  b[3] = 0x3F00;
  b[31] = 0xBF7D;
  int64_t slot_b = 3;
  WriteIndexerCacheParams pb = pa;
  pb.k = make_tensor(b.data(), DType::kBF16, {1, D});
  pb.slot_mapping = make_tensor(&slot_b, DType::kI64, {1});
  ASSERT_TRUE(write_indexer_cache(pb, Exec{}).ok());

  std::vector<uint8_t> want(kPages * kStride, kUntouched);
  put_bytes(&want, 0, {0xF8, 0xF7, 0xF6, 0xF5, 0xF4, 0xF3, 0xF2, 0xF1, 0xF0, 0xEE, 0xEC, 0xEA, 0xE8, 0xE4, 0xE0, 0xD8,
                       0x00, 0x58, 0x60, 0x64, 0x68, 0x6A, 0x6C, 0x6E, 0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77});
  put_bytes(&want, S * D + 0, {0x00, 0x00, 0x80, 0x3C});  // fp32 2^-6
  std::vector<uint8_t> b_codes(D, 0x00);
  b_codes[0] = 0x78;
  b_codes[1] = 0xEA;
  b_codes[2] = 0x27;
  b_codes[3] = 0x70;
  b_codes[31] = 0xF8;
  put_bytes(&want, kStride + 1 * D, b_codes);
  put_bytes(&want, kStride + S * D + 4, {0x00, 0x00, 0x80, 0x3B});  // fp32 2^-8
  expect_image(pages, want);
}

// Indexer MXFP4, D = 64, S = 2, one page of 72 bytes (2 * (32 + 4)); the token goes to state 1.
TEST(FormatsGolden, IndexerMxfp4Page) {
  constexpr int D = 64, S = 2, kStride = 72;
  std::vector<uint8_t> pages(kStride, kUntouched);
  WriteIndexerCacheParams p;
  p.cache = indexer_cache_view(pages, IndexerFormat::kMxfp4, S, D, kStride);
  // Group 0: i/4 - 4 (amax 4 -> 4/6 -> scale 1, e = 127); group 1: (i - 16) * 3/32 (amax 1.5 ->
  // 0.25 -> scale 2^-2, e = 125), so x / scale = (i - 16) * 3/8.
  std::vector<float> x(D);
  for (int i = 0; i < 32; ++i) x[i] = i * 0.25f - 4.0f;
  for (int i = 0; i < 32; ++i) x[32 + i] = (i - 16) * 0.09375f;
  int32_t slot = 1;
  p.k = make_tensor(x.data(), DType::kF32, {1, D});
  p.slot_mapping = make_tensor(&slot, DType::kI32, {1});
  ASSERT_TRUE(write_indexer_cache(p, Exec{}).ok());

  std::vector<uint8_t> want(kStride, kUntouched);
  // E2M1 pairs, low nibble = even element. Group 0: -4 -3.75 -3.5 -3.25 ... -> 6,6,6,5,...
  put_bytes(&want, 1 * (D / 2),
            {0xEE, 0xDE, 0xDD, 0xCC, 0xCC, 0xAB, 0xAA, 0x89, 0x00, 0x21, 0x22, 0x43, 0x44, 0x54, 0x55, 0x66,
             0xFF, 0xEF, 0xEE, 0xDE, 0xDD, 0xCC, 0xAB, 0x9A, 0x10, 0x22, 0x43, 0x54, 0x55, 0x66, 0x66, 0x77});
  // One int32 of UE8M0 scales per state at S * D/2 + 4 * s; D/32 = 2 used bytes, 2 zero bytes.
  put_bytes(&want, S * (D / 2) + 4, {0x7F, 0x7D, 0x00, 0x00});
  expect_image(pages, want);
}

// Latent V4 ("MODEL1"), P = 2 tokens per page: page = 2 data records of 576 B + 2 scale records of
// 8 B = 1168 B, padded to 1728 (3 * 576). The token goes to slot 1.
TEST(FormatsGolden, LatentV4Page) {
  constexpr int P = 2, kStride = 1728;
  std::vector<uint8_t> pages(kStride, kUntouched);
  WriteLatentCacheParams p;
  p.cache = latent_cache_view(pages, LatentFormat::kV4Fp8, P, kStride);
  // NoPE group g < 6: pattern * 2^(g-4), so the codes repeat and the scale exponent steps by one
  // (pattern amax 43.851: group 0 amax 2.74 -> 2.74/448 -> 2^-7, e = 120). Group 6: zeros (amax 0
  // -> e = 127, codes 0). RoPE: (i - 32) / 8, exact in bf16.
  std::vector<float> x(512, 0.0f);
  for (int g = 0; g < 6; ++g) {
    for (int i = 0; i < 64; ++i) {
      const float pat = static_cast<float>((i - 31) * 1.37 + (i % 3 == 0 ? 0.011 : -0.007));
      x[g * 64 + i] = pat * std::ldexp(1.0f, g - 4);
    }
  }
  for (int i = 0; i < 64; ++i) x[448 + i] = (i - 32) / 8.0f;
  int32_t slot = 1;
  p.kv = make_tensor(x.data(), DType::kF32, {1, 512});
  p.slot_mapping = make_tensor(&slot, DType::kI32, {1});
  ASSERT_TRUE(write_latent_cache(p, Exec{}).ok());

  const std::vector<uint8_t> codes = {
    0xFB, 0xFA, 0xFA, 0xFA, 0xF9, 0xF9, 0xF9, 0xF8, 0xF8, 0xF7, 0xF6, 0xF6, 0xF5, 0xF4, 0xF4, 0xF3,
    0xF2, 0xF2, 0xF1, 0xF0, 0xEF, 0xEE, 0xEC, 0xEB, 0xEA, 0xE8, 0xE6, 0xE3, 0xE0, 0xDB, 0xD3, 0x96,
    0x53, 0x5B, 0x60, 0x63, 0x66, 0x68, 0x6A, 0x6B, 0x6C, 0x6E, 0x6F, 0x70, 0x71, 0x72, 0x72, 0x73,
    0x74, 0x74, 0x75, 0x76, 0x76, 0x77, 0x78, 0x78, 0x79, 0x79, 0x79, 0x7A, 0x7A, 0x7A, 0x7B, 0x7B,
  };
  const std::vector<uint16_t> rope = {
    0xC080, 0xC078, 0xC070, 0xC068, 0xC060, 0xC058, 0xC050, 0xC048,
    0xC040, 0xC038, 0xC030, 0xC028, 0xC020, 0xC018, 0xC010, 0xC008,
    0xC000, 0xBFF0, 0xBFE0, 0xBFD0, 0xBFC0, 0xBFB0, 0xBFA0, 0xBF90,
    0xBF80, 0xBF60, 0xBF40, 0xBF20, 0xBF00, 0xBEC0, 0xBE80, 0xBE00,
    0x0000, 0x3E00, 0x3E80, 0x3EC0, 0x3F00, 0x3F20, 0x3F40, 0x3F60,
    0x3F80, 0x3F90, 0x3FA0, 0x3FB0, 0x3FC0, 0x3FD0, 0x3FE0, 0x3FF0,
    0x4000, 0x4008, 0x4010, 0x4018, 0x4020, 0x4028, 0x4030, 0x4038,
    0x4040, 0x4048, 0x4050, 0x4058, 0x4060, 0x4068, 0x4070, 0x4078,
  };
  std::vector<uint8_t> want(kStride, kUntouched);
  const size_t data = 1 * 576, scales = P * 576 + 1 * 8;
  for (int g = 0; g < 6; ++g) put_bytes(&want, data + g * 64, codes);
  put_bytes(&want, data + 6 * 64, std::vector<uint8_t>(64, 0x00));
  put_bf16(&want, data + 448, rope);
  put_bytes(&want, scales, {120, 121, 122, 123, 124, 125, 127, 0});
  expect_image(pages, want);
}

// Latent V3.2, P = 2 tokens of 656 B per page, one page; the token goes to slot 1 (offset 656).
TEST(FormatsGolden, LatentV32Page) {
  constexpr int P = 2, kStride = 2 * 656;
  std::vector<uint8_t> pages(kStride, kUntouched);
  WriteLatentCacheParams p;
  p.cache = latent_cache_view(pages, LatentFormat::kV32Fp8, P, kStride);
  // NoPE group g < 3: pattern * 2^(g-2); the scale is the raw fp32 amax / 448 (group 0 amax
  // 0.280275 -> 0.0006256138), so codes repeat and scales double. Group 3: zeros -> FLT_MIN.
  std::vector<float> x(576, 0.0f);
  for (int g = 0; g < 3; ++g) {
    for (int i = 0; i < 128; ++i) {
      const float pat = static_cast<float>(((i * 37) % 101 - 50) * 0.0213 + i * 0.001);
      x[g * 128 + i] = pat * std::ldexp(1.0f, g - 2);
    }
  }
  for (int i = 0; i < 64; ++i) x[512 + i] = static_cast<float>((i * 0.3 - 9.6) * 1.001);
  int64_t slot = 1;
  p.kv = make_tensor(x.data(), DType::kF32, {1, 576});
  p.slot_mapping = make_tensor(&slot, DType::kI64, {1});
  ASSERT_TRUE(write_latent_cache(p, Exec{}).ok());

  const std::vector<uint8_t> codes = {
    0xFD, 0xEE, 0x75, 0xFB, 0xDC, 0x79, 0xF8, 0x68, 0x7C, 0xF2, 0x71, 0xFC, 0xEA, 0x77, 0xFA, 0x4C,
    0x7A, 0xF6, 0x6C, 0x7D, 0xF1, 0x73, 0xFB, 0xE5, 0x78, 0xF9, 0x61, 0x7B, 0xF4, 0x6F, 0x7E, 0xED,
    0x75, 0xFA, 0xDA, 0x79, 0xF8, 0x68, 0x7C, 0xF2, 0x72, 0xFC, 0xEA, 0x77, 0xFA, 0x51, 0x7A, 0xF6,
    0x6C, 0x7D, 0xF0, 0x73, 0xFB, 0xE4, 0x78, 0xF9, 0x62, 0x7B, 0xF4, 0x70, 0x7E, 0xED, 0x75, 0xFA,
    0xD8, 0x79, 0xF7, 0x69, 0x7C, 0xF2, 0x72, 0xFC, 0xE9, 0x77, 0xF9, 0x55, 0x7A, 0xF6, 0x6C, 0x7D,
    0xF0, 0x74, 0xFB, 0xE3, 0x78, 0xF9, 0x63, 0x7B, 0xF4, 0x70, 0x7E, 0xEC, 0x75, 0xFA, 0xD6, 0x79,
    0xF7, 0x69, 0x7C, 0xF2, 0x72, 0xFC, 0xE9, 0x77, 0xF9, 0x58, 0x7A, 0xF5, 0x6D, 0x7D, 0xF0, 0x74,
    0xFB, 0xE2, 0x79, 0xF8, 0x64, 0x7B, 0xF3, 0x70, 0x7E, 0xEC, 0x76, 0xFA, 0xD2, 0x7A, 0xF7, 0x6A,
  };
  const std::vector<uint16_t> rope = {
    0xC11A, 0xC115, 0xC110, 0xC10B, 0xC107, 0xC102, 0xC0FA, 0xC0F0,
    0xC0E7, 0xC0DD, 0xC0D3, 0xC0CA, 0xC0C0, 0xC0B7, 0xC0AD, 0xC0A3,
    0xC09A, 0xC090, 0xC087, 0xC07A, 0xC067, 0xC053, 0xC040, 0xC02D,
    0xC01A, 0xC007, 0xBFE7, 0xBFC0, 0xBF9A, 0xBF67, 0xBF1A, 0xBE9A,
    0x0000, 0x3E9A, 0x3F1A, 0x3F67, 0x3F9A, 0x3FC0, 0x3FE7, 0x4007,
    0x401A, 0x402D, 0x4040, 0x4053, 0x4067, 0x407A, 0x4087, 0x4090,
    0x409A, 0x40A3, 0x40AD, 0x40B7, 0x40C0, 0x40CA, 0x40D3, 0x40DD,
    0x40E7, 0x40F0, 0x40FA, 0x4102, 0x4107, 0x410B, 0x4110, 0x4115,
  };
  std::vector<uint8_t> want(kStride, kUntouched);
  const size_t tok = 656;
  for (int g = 0; g < 3; ++g) put_bytes(&want, tok + g * 128, codes);
  put_bytes(&want, tok + 3 * 128, std::vector<uint8_t>(128, 0x00));
  put_bytes(&want, tok + 512, {0x3B, 0x00, 0x24, 0x3A,    // 0.0006256138
                               0x3B, 0x00, 0xA4, 0x3A,    // 0.0012512276
                               0x3B, 0x00, 0x24, 0x3B,    // 0.0025024551
                               0x00, 0x00, 0x80, 0x00});  // FLT_MIN
  put_bf16(&want, tok + 528, rope);
  expect_image(pages, want);
}
