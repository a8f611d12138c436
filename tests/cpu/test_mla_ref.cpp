// Sparse MLA on the CPU backend (SPEC §3.5, §3.6): hand-computed tiny cases (numbers written here),
// and properties against a dense softmax attention computed independently in this file (long double)
// from the latent dequantized here straight from the SPEC §2.3 byte layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "dsattn/codecs.h"
#include "dsattn/ops.h"

using namespace dsattn;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

void put_f32(uint8_t* p, float f) { std::memcpy(p, &f, 4); }
void put_bf16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
float f32_at(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}
uint16_t u16_at(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
float bf(uint16_t h) { return codec::bf16_to_f32(h); }

// ---------------------------------------------------------------- independent dequant + dense reference
std::vector<long double> deq_token(const std::vector<uint8_t>& pages, LatentFormat f, int P, int64_t stride,
                                   int64_t slot) {
  const uint8_t* page = pages.data() + (slot / P) * stride;
  const int off = static_cast<int>(slot % P);
  std::vector<long double> v;
  if (f == LatentFormat::kV4Fp8) {
    const uint8_t* data = page + off * 576;
    const uint8_t* sc = page + P * 576 + off * 8;
    for (int i = 0; i < 448; ++i) v.push_back((long double)codec::e4m3_to_f32(data[i]) * std::ldexp(1.0L, sc[i / 64] - 127));
    for (int i = 0; i < 64; ++i) v.push_back(bf(u16_at(data + 448 + 2 * i)));
  } else {
    const uint8_t* tok = page + off * 656;
    for (int i = 0; i < 512; ++i) v.push_back((long double)codec::e4m3_to_f32(tok[i]) * f32_at(tok + 512 + 4 * (i / 128)));
    for (int i = 0; i < 64; ++i) v.push_back(bf(u16_at(tok + 528 + 2 * i)));
  }
  return v;
}

struct DenseOut {
  std::vector<long double> out;
  long double lse;
};

// softmax(sm_scale * q.K^T) V over the given key rows; V = first dv entries; optional sink.
DenseOut dense(const uint16_t* q, const std::vector<std::vector<long double>>& keys, int dv, float sm_scale,
               const float* sink) {
  DenseOut r;
  r.out.assign(dv, 0.0L);
  if (keys.empty()) {
    r.lse = -INFINITY;
    return r;
  }
  std::vector<long double> s;
  long double mx = -INFINITY;
  for (const auto& k : keys) {
    long double dot = 0;
    for (size_t d = 0; d < k.size(); ++d) dot += (long double)bf(q[d]) * k[d];
    s.push_back(dot * sm_scale);
    mx = std::max(mx, s.back());
  }
  long double sum = 0;
  for (long double x : s) sum += std::exp(x - mx);
  r.lse = mx + std::log(sum);
  for (size_t j = 0; j < keys.size(); ++j) {
    const long double p = std::exp(s[j] - r.lse);
    for (int d = 0; d < dv; ++d) r.out[d] += p * keys[j][d];
  }
  if (sink) {
    const long double f = 1.0L / (1.0L + std::exp((long double)*sink - r.lse));
    for (auto& x : r.out) x *= f;
  }
  return r;
}

// bf16 output within half a bf16 ulp (2^-9 relative) of the exact value, with a little slack.
void expect_close(uint16_t got, long double want, const char* what) {
  const long double g = bf(got);
  EXPECT_LE(std::fabs(g - want), std::ldexp(1.0L, -8) * std::fabs(want) + 1e-6L) << what << ": got " << (double)g
                                                                                  << " want " << (double)want;
}

// ---------------------------------------------------------------- random caches written by the writer
struct Cache {
  LatentFormat format;
  int P = 0;
  int num_pages = 0;
  int64_t stride = 0;
  std::vector<uint8_t> bytes;
  LatentCache view() {
    LatentCache c;
    c.pages = make_tensor(bytes.data(), DType::kU8, {num_pages, stride});
    c.format = format;
    c.tokens_per_page = P;
    c.page_stride_bytes = stride;
    return c;
  }
  int64_t slots() const { return int64_t(num_pages) * P; }
  std::vector<long double> key(int64_t slot) const { return deq_token(bytes, format, P, stride, slot); }
};

// Fills every slot of a cache with random latents (scaled like real ones) via write_latent_cache.
Cache make_cache(LatentFormat f, int P, int num_pages, uint32_t seed, float amp = 0.5f) {
  Cache c;
  c.format = f;
  c.P = P;
  c.num_pages = num_pages;
  c.stride = latent_min_page_bytes(f, P) + 64;
  c.bytes.assign(num_pages * c.stride, 0);
  const int dqk = latent_dqk(f);
  const int64_t T = c.slots();
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, amp);
  std::vector<float> kv(T * dqk);
  for (auto& x : kv) x = n(rng);
  std::vector<int64_t> slots(T);
  for (int64_t t = 0; t < T; ++t) slots[t] = t;
  WriteLatentCacheParams w;
  w.kv = make_tensor(kv.data(), DType::kF32, {T, dqk});
  w.slot_mapping = make_tensor(slots.data(), DType::kI64, {T});
  w.cache = c.view();
  Status st = write_latent_cache(w, Exec{});
  EXPECT_TRUE(st.ok()) << st.to_string();
  return c;
}

std::vector<uint16_t> random_q(int64_t n, uint32_t seed, float amp = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, amp);
  std::vector<uint16_t> q(n);
  for (auto& x : q) x = codec::f32_to_bf16(d(rng));
  return q;
}

struct Decode {
  int B, Sq, Hq, dqk;
  std::vector<uint16_t> q, out;
  std::vector<float> lse;
  SparseMlaDecodeParams p;
  Decode(int b, int sq, int hq, LatentFormat f, uint32_t seed) : B(b), Sq(sq), Hq(hq), dqk(latent_dqk(f)) {
    q = random_q(int64_t(B) * Sq * Hq * dqk, seed, 0.7f);
    out.assign(int64_t(B) * Sq * Hq * 512, 0xFFFF);  // NaN garbage: every element must be written
    lse.assign(int64_t(B) * Sq * Hq, std::numeric_limits<float>::quiet_NaN());
    p.q = make_tensor(q.data(), DType::kBF16, {B, Sq, Hq, dqk});
    p.out = make_tensor(out.data(), DType::kBF16, {B, Sq, Hq, 512});
    p.lse = make_tensor(lse.data(), DType::kF32, {B, Sq, Hq});
    p.sm_scale = 1.0f / std::sqrt(static_cast<float>(dqk));
  }
  const uint16_t* qrow(int b, int s, int h) const { return q.data() + ((int64_t(b) * Sq + s) * Hq + h) * dqk; }
  const uint16_t* orow(int b, int s, int h) const { return out.data() + ((int64_t(b) * Sq + s) * Hq + h) * 512; }
  float lse_at(int b, int s, int h) const { return lse[(int64_t(b) * Sq + s) * Hq + h]; }
  Status run() { return sparse_mla_decode(p, Exec{}); }
};

}  // namespace

// ================================================================ hand-computed
// V3.2 page of P = 4 tokens written by hand. Token 1: nope[0] = 1.0 (0x38), nope[1] = 3.0 (0x44);
// token 2: nope[0] = 2.0 (0x40); all scales 1.0. Indices {1, 2, -1, 7 (past the 4 slots)}.
// Even heads: q[0] = 1 -> scores 1, 2: out[0] = (1 + 2e)/(1 + e) = 1.7310586 (bf16 0x3FDE),
// out[1] = 3/(1 + e) = 0.8068243 (0x3F4F), lse = ln(e + e^2) = 2.3132617.
// Odd heads: q = 0 -> uniform: out[0] = out[1] = 1.5 (0x3FC0), lse = ln 2.
// With sink 0.5: factor e^lse / (e^lse + e^0.5): even 0.8597556 -> 1.4882873 (0x3FBF), 0.6936717 (0x3F32);
// odd 0.5481372 -> 0.8222059 (0x3F52).
TEST(MlaRef, HandComputedV32WithSink) {
  constexpr int P = 4, Hq = 16;
  std::vector<uint8_t> page(P * 656, 0);
  for (int t = 0; t < P; ++t) {
    for (int g = 0; g < 4; ++g) put_f32(&page[t * 656 + 512 + 4 * g], 1.0f);
  }
  page[1 * 656 + 0] = 0x38;
  page[1 * 656 + 1] = 0x44;
  page[2 * 656 + 0] = 0x40;
  std::vector<uint16_t> q(Hq * 576, 0);
  for (int h = 0; h < Hq; h += 2) q[h * 576 + 0] = 0x3F80;
  int32_t idx[4] = {1, 2, -1, 7};
  std::vector<uint16_t> out(Hq * 512, 0xFFFF);
  std::vector<float> lse(Hq, 0.0f);
  SparseMlaDecodeParams p;
  p.q = make_tensor(q.data(), DType::kBF16, {1, 1, Hq, 576});
  p.cache.pages = make_tensor(page.data(), DType::kU8, {1, P * 656});
  p.cache.format = LatentFormat::kV32Fp8;
  p.cache.tokens_per_page = P;
  p.cache.page_stride_bytes = P * 656;
  p.indices = make_tensor(idx, DType::kI32, {1, 1, 4});
  p.sm_scale = 1.0f;
  p.out = make_tensor(out.data(), DType::kBF16, {1, 1, Hq, 512});
  p.lse = make_tensor(lse.data(), DType::kF32, {1, 1, Hq});
  Status st = sparse_mla_decode(p, Exec{});
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (int h = 0; h < Hq; ++h) {
    const bool even = h % 2 == 0;
    EXPECT_EQ(out[h * 512 + 0], even ? 0x3FDE : 0x3FC0) << h;
    EXPECT_EQ(out[h * 512 + 1], even ? 0x3F4F : 0x3FC0) << h;
    for (int d = 2; d < 512; ++d) ASSERT_EQ(out[h * 512 + d], 0) << h << "," << d;
    EXPECT_NEAR(lse[h], even ? 2.3132617f : 0.6931472f, 1e-6f) << h;
  }
  std::vector<float> sink(Hq, 0.5f);
  p.attn_sink = make_tensor(sink.data(), DType::kF32, {Hq});
  ASSERT_TRUE(sparse_mla_decode(p, Exec{}).ok());
  for (int h = 0; h < Hq; ++h) {
    const bool even = h % 2 == 0;
    EXPECT_EQ(out[h * 512 + 0], even ? 0x3FBF : 0x3F52) << h;
    EXPECT_EQ(out[h * 512 + 1], even ? 0x3F32 : 0x3F52) << h;
    EXPECT_NEAR(lse[h], even ? 2.3132617f : 0.6931472f, 1e-6f) << "lse excludes the sink";
  }
}

// V4 pages of P = 2 (page bytes 1728). Token A (slot 1): nope[0] = 1.0 with group-0 scale 2^1
// (UE8M0 128) -> 2.0; rope[0] = 0.25. Token B (slot 2, page 1): nope[64] = 1.0 with group-1 scale
// 2^-1 (UE8M0 126) -> 0.5. q[0] = 1, q[64] = 4, q[448] = 2, sm_scale 0.5: scores A = (2 + 0.5) / 2
// = 1.25, B = 2 / 2 = 1.0. out[0] = 2 pA = 1.1243530 (0x3F90), out[448] = 0.25 pA = 0.1405441
// (0x3E10), out[64] = 0.5 pB = 0.2189117 (0x3E60), lse = ln(e^1.25 + e) = 1.8259394.
TEST(MlaRef, HandComputedV4) {
  constexpr int P = 2, kStride = 1728, Hq = 16;
  std::vector<uint8_t> pages(2 * kStride, 0);
  for (int pg = 0; pg < 2; ++pg) {
    for (int t = 0; t < P; ++t) {
      for (int g = 0; g < 7; ++g) pages[pg * kStride + P * 576 + t * 8 + g] = 127;
    }
  }
  pages[0 * kStride + 1 * 576 + 0] = 0x38;
  pages[0 * kStride + P * 576 + 1 * 8 + 0] = 128;
  put_bf16(&pages[0 * kStride + 1 * 576 + 448], 0x3E80);  // 0.25
  pages[1 * kStride + 0 * 576 + 64] = 0x38;
  pages[1 * kStride + P * 576 + 0 * 8 + 1] = 126;
  std::vector<uint16_t> q(Hq * 512, 0);
  for (int h = 0; h < Hq; ++h) {
    q[h * 512 + 0] = 0x3F80;
    q[h * 512 + 64] = 0x4080;
    q[h * 512 + 448] = 0x4000;
  }
  int32_t idx[3] = {2, -1, 1};
  std::vector<uint16_t> out(Hq * 512, 0xFFFF);
  std::vector<float> lse(Hq);
  SparseMlaDecodeParams p;
  p.q = make_tensor(q.data(), DType::kBF16, {1, 1, Hq, 512});
  p.cache.pages = make_tensor(pages.data(), DType::kU8, {2, kStride});
  p.cache.format = LatentFormat::kV4Fp8;
  p.cache.tokens_per_page = P;
  p.cache.page_stride_bytes = kStride;
  p.indices = make_tensor(idx, DType::kI32, {1, 1, 3});
  p.sm_scale = 0.5f;
  p.out = make_tensor(out.data(), DType::kBF16, {1, 1, Hq, 512});
  p.lse = make_tensor(lse.data(), DType::kF32, {1, 1, Hq});
  ASSERT_TRUE(sparse_mla_decode(p, Exec{}).ok());
  for (int h = 0; h < Hq; ++h) {
    for (int d = 0; d < 512; ++d) {
      const uint16_t want = d == 0 ? 0x3F90 : d == 448 ? 0x3E10 : d == 64 ? 0x3E60 : 0;
      ASSERT_EQ(out[h * 512 + d], want) << h << "," << d;
    }
    EXPECT_NEAR(lse[h], 1.8259394f, 1e-6f);
  }
}

// ================================================================ properties vs dense attention
TEST(MlaRef, AllTokensEqualsDenseAttentionBothFormats) {
  for (LatentFormat f : {LatentFormat::kV4Fp8, LatentFormat::kV32Fp8}) {
    Cache c = make_cache(f, 16, 3, 11);
    Decode dec(2, 2, 16, f, 12);
    const int64_t n = c.slots();
    std::vector<int32_t> idx(dec.B * dec.Sq * n);
    std::mt19937 rng(13);
    for (int r = 0; r < dec.B * dec.Sq; ++r) {
      std::vector<int32_t> perm(n);
      for (int i = 0; i < n; ++i) perm[i] = i;
      std::shuffle(perm.begin(), perm.end(), rng);
      std::copy(perm.begin(), perm.end(), idx.begin() + r * n);
    }
    dec.p.cache = c.view();
    dec.p.indices = make_tensor(idx.data(), DType::kI32, {dec.B, dec.Sq, n});
    Status st = dec.run();
    ASSERT_TRUE(st.ok()) << st.to_string();
    std::vector<std::vector<long double>> keys;
    for (int64_t s = 0; s < n; ++s) keys.push_back(c.key(s));
    for (int b = 0; b < dec.B; ++b) {
      for (int s = 0; s < dec.Sq; ++s) {
        for (int h = 0; h < dec.Hq; ++h) {
          const DenseOut ref = dense(dec.qrow(b, s, h), keys, 512, dec.p.sm_scale, nullptr);
          for (int d = 0; d < 512; ++d) expect_close(dec.orow(b, s, h)[d], ref.out[d], latent_format_name(f));
          EXPECT_NEAR(dec.lse_at(b, s, h), (double)ref.lse, 1e-6 * std::max(1.0, std::fabs((double)ref.lse)));
        }
      }
    }
  }
}

TEST(MlaRef, IndexOrderDoesNotMatter) {
  Cache c = make_cache(LatentFormat::kV4Fp8, 8, 4, 21);
  Decode a(1, 1, 32, LatentFormat::kV4Fp8, 22), b(1, 1, 32, LatentFormat::kV4Fp8, 22);
  std::vector<int32_t> idx = {3, 17, 30, 0, 9, 21, 12, 5, 28, 14};
  std::vector<int32_t> rev(idx.rbegin(), idx.rend());
  a.p.cache = b.p.cache = c.view();
  a.p.indices = make_tensor(idx.data(), DType::kI32, {1, 1, 10});
  b.p.indices = make_tensor(rev.data(), DType::kI32, {1, 1, 10});
  ASSERT_TRUE(a.run().ok());
  ASSERT_TRUE(b.run().ok());
  for (size_t i = 0; i < a.out.size(); ++i) {
    // same sum in another order: equal up to double rounding, i.e. at most one bf16 step apart
    ASSERT_LE(std::abs(int(a.out[i]) - int(b.out[i])), 1) << i;
  }
  for (size_t i = 0; i < a.lse.size(); ++i) EXPECT_NEAR(a.lse[i], b.lse[i], 1e-6f);
}

TEST(MlaRef, InvalidIdsAreSkipped) {
  for (LatentFormat f : {LatentFormat::kV4Fp8, LatentFormat::kV32Fp8}) {
    Cache c = make_cache(f, 4, 2, 31);  // 8 slots
    Decode a(1, 1, 16, f, 32), b(1, 1, 16, f, 32);
    std::vector<int32_t> with = {-1, 5, 8, 1, -7, 2147483647, 6, 100, -2147483647 - 1, 0};
    std::vector<int32_t> without = {5, 1, 6, 0};
    a.p.cache = b.p.cache = c.view();
    a.p.indices = make_tensor(with.data(), DType::kI32, {1, 1, 10});
    b.p.indices = make_tensor(without.data(), DType::kI32, {1, 1, 4});
    ASSERT_TRUE(a.run().ok());
    ASSERT_TRUE(b.run().ok());
    EXPECT_TRUE(a.out == b.out);  // same used tokens in the same order: bitwise equal
    for (size_t i = 0; i < a.lse.size(); ++i) EXPECT_EQ(a.lse[i], b.lse[i]);
    // and not trivially: the result depends on the used tokens
    std::vector<int32_t> other = {5, 1, 6};
    Decode d(1, 1, 16, f, 32);
    d.p.cache = c.view();
    d.p.indices = make_tensor(other.data(), DType::kI32, {1, 1, 3});
    ASSERT_TRUE(d.run().ok());
    EXPECT_FALSE(d.out == b.out);
  }
}

TEST(MlaRef, TopkLengthCutsEachRequest) {
  Cache c = make_cache(LatentFormat::kV32Fp8, 8, 2, 41);
  Decode a(2, 2, 16, LatentFormat::kV32Fp8, 42), b(2, 2, 16, LatentFormat::kV32Fp8, 42);
  // request 0 uses 3 of 6, request 1 uses 5 of 6; b has -1 in the cut-off places
  std::vector<int32_t> idx = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0, 15, 14, 13, 12, 11, 2, 4, 6, 8, 10, 12};
  std::vector<int32_t> cut = idx;
  const int lens[2] = {3, 5};
  for (int r = 0; r < 4; ++r) {
    for (int j = lens[r / 2]; j < 6; ++j) cut[r * 6 + j] = -1;
  }
  std::vector<int32_t> tl = {3, 5};
  a.p.cache = b.p.cache = c.view();
  a.p.indices = make_tensor(idx.data(), DType::kI32, {2, 2, 6});
  a.p.topk_length = make_tensor(tl.data(), DType::kI32, {2});
  b.p.indices = make_tensor(cut.data(), DType::kI32, {2, 2, 6});
  ASSERT_TRUE(a.run().ok());
  ASSERT_TRUE(b.run().ok());
  EXPECT_TRUE(a.out == b.out);
  EXPECT_TRUE(a.lse == b.lse);
}

TEST(MlaRef, SinkScalesOutputAndLeavesLse) {
  Cache c = make_cache(LatentFormat::kV4Fp8, 16, 2, 51);
  Decode a(1, 2, 64, LatentFormat::kV4Fp8, 52), b(1, 2, 64, LatentFormat::kV4Fp8, 52);
  std::vector<int32_t> idx = {0, 3, 7, 8, 19, 25, 31, 2, 4, 6, 9, 10, 11, 12, 13, 14};
  std::vector<float> sink(64);
  for (int h = 0; h < 64; ++h) sink[h] = -3.0f + 0.1f * h;
  a.p.cache = b.p.cache = c.view();
  a.p.indices = b.p.indices = make_tensor(idx.data(), DType::kI32, {1, 2, 8});
  b.p.attn_sink = make_tensor(sink.data(), DType::kF32, {64});
  ASSERT_TRUE(a.run().ok());
  ASSERT_TRUE(b.run().ok());
  EXPECT_TRUE(a.lse == b.lse);
  for (int s = 0; s < 2; ++s) {
    std::vector<std::vector<long double>> keys;
    for (int j = 0; j < 8; ++j) keys.push_back(c.key(idx[s * 8 + j]));
    for (int h = 0; h < 64; ++h) {
      const DenseOut ref = dense(b.qrow(0, s, h), keys, 512, b.p.sm_scale, &sink[h]);
      for (int d = 0; d < 512; ++d) expect_close(b.orow(0, s, h)[d], ref.out[d], "sink");
      EXPECT_NEAR(b.lse_at(0, s, h), (double)ref.lse, 1e-5);
    }
  }
}

// The extra cache (own page size, own indices and lengths) acts like appending its tokens to the
// main index set: compare against one cache holding both token sets.
TEST(MlaRef, ExtraCacheEqualsConcatenatedIndexSets) {
  for (LatentFormat f : {LatentFormat::kV4Fp8, LatentFormat::kV32Fp8}) {
    const int dqk = latent_dqk(f);
    Cache main_c = make_cache(f, 16, 2, 61);   // 32 slots
    Cache extra_c = make_cache(f, 4, 3, 62);   // 12 slots, another page size
    // combined cache (P = 16, 3 pages): main tokens at the same slots, extra slot e at 32 + e
    Cache comb;
    comb.format = f;
    comb.P = 16;
    comb.num_pages = 3;
    comb.stride = main_c.stride;
    comb.bytes.assign(comb.num_pages * comb.stride, 0);
    std::memcpy(comb.bytes.data(), main_c.bytes.data(), main_c.bytes.size());
    for (int e = 0; e < 12; ++e) {
      // copy the token's bytes from the extra cache layout to the combined one
      const int64_t src_page = e / 4, src_off = e % 4, dst_slot = 32 + e;
      const int64_t dst_page = dst_slot / 16, dst_off = dst_slot % 16;
      const uint8_t* sp = extra_c.bytes.data() + src_page * extra_c.stride;
      uint8_t* dp = comb.bytes.data() + dst_page * comb.stride;
      if (f == LatentFormat::kV4Fp8) {
        std::memcpy(dp + dst_off * 576, sp + src_off * 576, 576);
        std::memcpy(dp + 16 * 576 + dst_off * 8, sp + 4 * 576 + src_off * 8, 8);
      } else {
        std::memcpy(dp + dst_off * 656, sp + src_off * 656, 656);
      }
    }
    for (int e = 0; e < 12; ++e) ASSERT_TRUE(comb.key(32 + e) == extra_c.key(e));
    Decode a(2, 1, 16, f, 63), b(2, 1, 16, f, 63);
    std::vector<int32_t> mi = {3, 9, 31, -1, 0, 17, 22, 5};     // [2, 1, 4]
    std::vector<int32_t> ei = {11, 0, 4, 7, 2, 6};              // [2, 1, 3]
    std::vector<int32_t> ml = {3, 4}, el = {2, 3};
    a.p.cache = main_c.view();
    a.p.indices = make_tensor(mi.data(), DType::kI32, {2, 1, 4});
    a.p.topk_length = make_tensor(ml.data(), DType::kI32, {2});
    a.p.extra_cache = extra_c.view();
    a.p.extra_indices = make_tensor(ei.data(), DType::kI32, {2, 1, 3});
    a.p.extra_topk_length = make_tensor(el.data(), DType::kI32, {2});
    // combined: request 0: {3, 9, 31} + {32+11, 32+0}; request 1: {0, 17, 22, 5} + {32+7, 32+2, 32+6}
    std::vector<int32_t> ci = {3, 9, 31, 43, 32, -1, -1, 0, 17, 22, 5, 39, 34, 38};
    b.p.cache = comb.view();
    b.p.indices = make_tensor(ci.data(), DType::kI32, {2, 1, 7});
    Status st = a.run();
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_TRUE(b.run().ok());
    EXPECT_TRUE(a.out == b.out) << latent_format_name(f);
    EXPECT_TRUE(a.lse == b.lse) << latent_format_name(f);
    (void)dqk;
  }
}

TEST(MlaRef, EmptyRowsGiveZerosAndMinusInf) {
  Cache c = make_cache(LatentFormat::kV4Fp8, 8, 1, 71);
  Decode a(3, 1, 16, LatentFormat::kV4Fp8, 72);
  // row 0: all invalid; row 1: valid ids but topk_length 0; row 2: normal
  std::vector<int32_t> idx = {-1, -1, 9, 1, 2, 3, 4, 5, 6};
  std::vector<int32_t> tl = {3, 0, 3};
  std::vector<float> sink(16, 1.0f);
  a.p.cache = c.view();
  a.p.indices = make_tensor(idx.data(), DType::kI32, {3, 1, 3});
  a.p.topk_length = make_tensor(tl.data(), DType::kI32, {3});
  a.p.attn_sink = make_tensor(sink.data(), DType::kF32, {16});
  ASSERT_TRUE(a.run().ok());
  for (int b = 0; b < 2; ++b) {
    for (int h = 0; h < 16; ++h) {
      EXPECT_EQ(a.lse_at(b, 0, h), -kInf);
      for (int d = 0; d < 512; ++d) ASSERT_EQ(a.orow(b, 0, h)[d], 0) << b << "," << h << "," << d;
    }
  }
  for (int h = 0; h < 16; ++h) {
    EXPECT_TRUE(std::isfinite(a.lse_at(2, 0, h)));
    for (int d = 0; d < 512; ++d) ASSERT_FALSE(std::isnan(bf(a.orow(2, 0, h)[d])));
  }
}

TEST(MlaRef, TopkLengthOutOfRangeIsAnError) {
  Cache c = make_cache(LatentFormat::kV4Fp8, 8, 1, 81);
  Decode a(2, 1, 16, LatentFormat::kV4Fp8, 82);
  std::vector<int32_t> idx = {0, 1, 2, 3};
  std::vector<int32_t> tl = {1, 3};
  a.p.cache = c.view();
  a.p.indices = make_tensor(idx.data(), DType::kI32, {2, 1, 2});
  a.p.topk_length = make_tensor(tl.data(), DType::kI32, {2});
  EXPECT_EQ(a.run().message, "sparse_mla_decode: topk_length[1] expected in [0, 2], got 3");
}

// ================================================================ prefill
TEST(MlaRef, PrefillMatchesDenseAndSkipsInvalidIds) {
  for (int dqk : {512, 576}) {
    const int M = 3, Hq = 16, Nk = 20, topk = 8, dv = 512;
    std::vector<uint16_t> q = random_q(M * Hq * dqk, 91, 0.5f);
    std::vector<uint16_t> kv = random_q(Nk * dqk, 92, 0.5f);
    std::vector<int32_t> idx = {0, 5, 19, -1, 20, 7, 3, 3,      // 20 is past Nk; 3 repeats (counts twice)
                                -1, -1, -1, -1, -1, -1, -1, -1,  // empty row
                                11, 12, 13, 14, 15, 16, 17, 18};
    std::vector<int32_t> tl = {8, 8, 6};
    std::vector<float> sink(Hq);
    for (int h = 0; h < Hq; ++h) sink[h] = 0.2f * h - 1.0f;
    std::vector<uint16_t> out(M * Hq * dv, 0xFFFF);
    std::vector<float> lse(M * Hq);
    SparseMlaPrefillParams p;
    p.q = make_tensor(q.data(), DType::kBF16, {M, Hq, dqk});
    p.kv = make_tensor(kv.data(), DType::kBF16, {Nk, dqk});
    p.indices = make_tensor(idx.data(), DType::kI32, {M, topk});
    p.topk_length = make_tensor(tl.data(), DType::kI32, {M});
    p.attn_sink = make_tensor(sink.data(), DType::kF32, {Hq});
    p.sm_scale = 0.07f;
    p.out = make_tensor(out.data(), DType::kBF16, {M, Hq, dv});
    p.lse = make_tensor(lse.data(), DType::kF32, {M, Hq});
    Status st = sparse_mla_prefill(p, Exec{});
    ASSERT_TRUE(st.ok()) << st.to_string();
    const std::vector<std::vector<int>> used = {{0, 5, 19, 7, 3, 3}, {}, {11, 12, 13, 14, 15, 16}};
    for (int m = 0; m < M; ++m) {
      std::vector<std::vector<long double>> keys;
      for (int id : used[m]) {
        std::vector<long double> k(dqk);
        for (int d = 0; d < dqk; ++d) k[d] = bf(kv[id * dqk + d]);
        keys.push_back(k);
      }
      for (int h = 0; h < Hq; ++h) {
        const DenseOut ref = dense(&q[(m * Hq + h) * dqk], keys, dv, p.sm_scale, &sink[h]);
        for (int d = 0; d < dv; ++d) expect_close(out[(m * Hq + h) * dv + d], ref.out[d], "prefill");
        if (used[m].empty()) {
          EXPECT_EQ(lse[m * Hq + h], -kInf);
        } else {
          EXPECT_NEAR(lse[m * Hq + h], (double)ref.lse, 1e-6 * std::max(1.0, std::fabs((double)ref.lse)));
        }
      }
    }
  }
}
