// CPU reference of paged_mqa_logits and mqa_logits (SPEC §3.1, §3.2): hand-computed cases, then
// random cases against the test-side reference (tests/common/indexer_test_util.h) and properties.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "common/indexer_test_util.h"
#include "cpu/indexer_ref_util.h"
#include "cpu_test_util.h"
#include "dsattn/codecs.h"
#include "dsattn/ops.h"

using namespace dsattn;
using namespace dsattn::testutil;

namespace {

uint8_t e4m3(float x) { return codec::f32_to_e4m3(x); }

// E2M1 codes: 0:0 1:0.5 2:1 3:1.5 4:2 5:3 6:4 7:6, bit 3 = sign.
uint8_t pack2(uint8_t lo, uint8_t hi) { return static_cast<uint8_t>(lo | (hi << 4)); }

// ---------------------------------------------------------------- FP8 hand case
// Fp8HandCase (cpu_test_util.h): S = 2, D = 32, H = 8, context_lens [B] = {3}; row 0 scores {34, 24},
// row 1 scores {68, 48, 120}; the varlen row of request 0 with length 3 scores {34, 24, 60}.
PagedMqaLogitsParams hand_params(Fp8HandCase& c, TensorView logits) {
  PagedMqaLogitsParams p;
  static_cast<PagedIndexerArgs&>(p) = c.args();
  p.logits = logits;
  return p;
}

TEST(PagedMqaLogitsRef, Fp8HandCaseClean) {
  Fp8HandCase c;
  std::vector<float> out(2 * 4, kPoison);
  PagedMqaLogitsParams p = hand_params(c, make_tensor(out.data(), DType::kF32, {2, 4}));
  p.clean = true;
  ASSERT_TRUE(paged_mqa_logits(p, cpu_exec()).ok());
  const std::vector<float> want = {34, 24, -kInf, -kInf, 68, 48, 120, -kInf};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], want[i]) << "element " << i;
}

TEST(PagedMqaLogitsRef, Fp8HandCaseUncleanLeavesTailUntouched) {
  Fp8HandCase c;
  std::vector<float> out(2 * 4, kPoison);
  PagedMqaLogitsParams p = hand_params(c, make_tensor(out.data(), DType::kF32, {2, 4}));
  ASSERT_TRUE(paged_mqa_logits(p, cpu_exec()).ok());
  const std::vector<float> want = {34, 24, kPoison, kPoison, 68, 48, 120, kPoison};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], want[i]) << "element " << i;
}

TEST(PagedMqaLogitsRef, Fp8HandCaseBf16AndRowStride) {
  Fp8HandCase c;
  // Row stride 6 > width 4: columns 4, 5 of each row belong to nobody and must stay untouched.
  std::vector<uint16_t> out(2 * 6, kPoisonBf16);
  PagedMqaLogitsParams p = hand_params(c, make_tensor_strided(out.data(), DType::kBF16, {2, 4}, {6, 1}));
  p.clean = true;
  ASSERT_TRUE(paged_mqa_logits(p, cpu_exec()).ok());
  const std::vector<float> want = {34, 24, -kInf, -kInf, kPoison, kPoison, 68, 48, 120, -kInf, kPoison, kPoison};
  for (int i = 0; i < 12; ++i) {
    if (want[i] == kPoison) {
      EXPECT_EQ(out[i], kPoisonBf16) << "element " << i;
    } else {
      EXPECT_EQ(bf16_value(out[i]), want[i]) << "element " << i;
    }
  }
}

TEST(PagedMqaLogitsRef, Fp8HandCasePerRowLensAndVarlen) {
  Fp8HandCase c;
  // [B, N] lengths {1, 3}: row 0 sees only t0.
  std::vector<int32_t> lens2 = {1, 3};
  std::vector<float> out(2 * 4, kPoison);
  PagedMqaLogitsParams p = hand_params(c, make_tensor(out.data(), DType::kF32, {2, 4}));
  p.context_lens = make_tensor(lens2.data(), DType::kI32, {1, 2});
  p.clean = true;
  ASSERT_TRUE(paged_mqa_logits(p, cpu_exec()).ok());
  std::vector<float> want = {34, -kInf, -kInf, -kInf, 68, 48, 120, -kInf};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], want[i]) << "element " << i;

  // Varlen: the same two query rows, both of request 0, lengths {3, 0}.
  std::vector<int32_t> vl = {3, 0}, rr = {0, 0};
  p.q = make_tensor(c.q.data(), DType::kF8E4M3, {2, Fp8HandCase::H, Fp8HandCase::D});
  p.context_lens = make_tensor(vl.data(), DType::kI32, {2});
  p.row_request = make_tensor(rr.data(), DType::kI32, {2});
  std::fill(out.begin(), out.end(), kPoison);
  ASSERT_TRUE(paged_mqa_logits(p, cpu_exec()).ok());
  want = {34, 24, 60, -kInf, -kInf, -kInf, -kInf, -kInf};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], want[i]) << "element " << i;
}

// ---------------------------------------------------------------- MXFP4 hand case
// S = 3, D = 32 (one scale block), H = 8, one row, ctx 4 (pages {2, 0}), width 6, weights 1.
// q: element 0 = +1 (h even) / -1 (h odd), element 1 = 2; q scale 2^0 for heads 0-3, 2^1 for 4-7.
// keys (element 0, element 1, exponent):
//   t0 = (1, 0.5, 127):    heads 0,2: 1+1 = 2; 4,6: 4; odd: 0            -> 12
//   t1 = (-3, 1.5, 126) = (-1.5, 0.75): even 0; heads 1,3: 3; 5,7: 6      -> 18
//   t2 = (6, 0, 129) = (24, 0): heads 0,2: 24; 4,6: 48; odd < 0           -> 144
//   t3 = (0, 4, 125) = (0, 1): heads 0-3: 2; 4-7: 4                       -> 24
TEST(PagedMqaLogitsRef, Mxfp4HandCase) {
  constexpr int S = 3, D = 32, H = 8;
  constexpr int64_t kStride = 64;  // 3 * (16 + 4) = 60 + 4 pad
  std::vector<uint8_t> pages(3 * kStride, 0xFF);
  auto put = [&](int page, int s, uint8_t a, uint8_t b, uint8_t e) {
    uint8_t* p = pages.data() + page * kStride;
    for (int i = 0; i < D / 2; ++i) p[s * D / 2 + i] = 0;
    p[s * D / 2] = pack2(a, b);
    const uint32_t scale = e;  // one block: byte 0
    std::memcpy(p + S * D / 2 + 4 * s, &scale, 4);
  };
  put(2, 0, 0x2, 0x1, 127);
  put(2, 1, 0xD, 0x3, 126);
  put(2, 2, 0x7, 0x0, 129);
  put(0, 0, 0x0, 0x6, 125);
  std::vector<uint8_t> q(H * D / 2, 0);
  std::vector<int32_t> qs(H);
  for (int h = 0; h < H; ++h) {
    q[h * D / 2] = pack2(h % 2 == 0 ? 0x2 : 0xA, 0x4);
    qs[h] = h < 4 ? 127 : 128;
  }
  std::vector<float> w(H, 1.0f);
  std::vector<int32_t> bt = {2, 0}, lens = {4};
  std::vector<float> out(6, kPoison);
  PagedMqaLogitsParams p;
  p.q = make_tensor(q.data(), DType::kU8, {1, 1, H, D / 2});
  p.q_scales = make_tensor(qs.data(), DType::kI32, {1, 1, H});
  p.weights = make_tensor(w.data(), DType::kF32, {1, H});
  p.cache = indexer_cache_view(pages, IndexerFormat::kMxfp4, S, D, kStride);  // [3, kStride]
  p.block_table = make_tensor(bt.data(), DType::kI32, {1, 2});
  p.context_lens = make_tensor(lens.data(), DType::kI32, {1, 1});
  p.logits = make_tensor(out.data(), DType::kF32, {1, 6});
  p.clean = true;
  ASSERT_TRUE(paged_mqa_logits(p, cpu_exec()).ok());
  const std::vector<float> want = {12, 18, 144, 24, -kInf, -kInf};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out[i], want[i]) << "element " << i;
}

// D = 64: scale byte i covers elements [32i, 32i + 32). Element 33 (odd: high nibble of byte 16)
// uses byte 1 of both scale words: q 1 * 2^3, key 0.5 * 2^-1 -> 2; element 0: 1 * 2 -> 2.
// Per head dot 4; weights 1..8 sum to 36 -> 144. Swapped scale bytes would give 0.5 + 8 * ... != 144.
TEST(PagedMqaLogitsRef, Mxfp4ScaleByteSelectsBlock) {
  constexpr int D = 64, H = 8;
  std::vector<uint8_t> pages(D / 2 + 4, 0);
  pages[0] = pack2(0x4, 0x0);   // key element 0 = 2
  pages[16] = pack2(0x0, 0x1);  // key element 33 = 0.5
  const uint32_t kscale = 127u | (126u << 8);
  std::memcpy(pages.data() + D / 2, &kscale, 4);
  std::vector<uint8_t> q(H * D / 2, 0);
  std::vector<int32_t> qs(H, static_cast<int32_t>(127u | (130u << 8)));
  std::vector<float> w(H);
  for (int h = 0; h < H; ++h) {
    q[h * D / 2 + 0] = pack2(0x2, 0x0);   // element 0 = 1
    q[h * D / 2 + 16] = pack2(0x0, 0x2);  // element 33 = 1
    w[h] = static_cast<float>(h + 1);
  }
  std::vector<int32_t> bt = {0}, lens = {1};
  float out = kPoison;
  PagedMqaLogitsParams p;
  p.q = make_tensor(q.data(), DType::kU8, {1, 1, H, D / 2});
  p.q_scales = make_tensor(qs.data(), DType::kI32, {1, 1, H});
  p.weights = make_tensor(w.data(), DType::kF32, {1, H});
  p.cache = indexer_cache_view(pages, IndexerFormat::kMxfp4, 1, D, D / 2 + 4);  // one page
  p.block_table = make_tensor(bt.data(), DType::kI32, {1, 1});
  p.context_lens = make_tensor(lens.data(), DType::kI32, {1});
  p.logits = make_tensor(&out, DType::kF32, {1, 1});
  ASSERT_TRUE(paged_mqa_logits(p, cpu_exec()).ok());
  EXPECT_EQ(out, 144.0f);
}

// NaN in a read state poisons its logit (relu keeps NaN); an out-of-context NaN is never read.
TEST(PagedMqaLogitsRef, NanKeyGivesNanLogitOnlyWhereRead) {
  Fp8HandCase c;
  c.pages[3 * Fp8HandCase::kStride + 32 + 5] = 0x7F;  // state t1, element 5: E4M3 NaN
  std::vector<float> out(2 * 4, kPoison);
  PagedMqaLogitsParams p = hand_params(c, make_tensor(out.data(), DType::kF32, {2, 4}));
  p.clean = true;
  ASSERT_TRUE(paged_mqa_logits(p, cpu_exec()).ok());
  EXPECT_EQ(out[0], 34.0f);
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_EQ(out[4], 68.0f);
  EXPECT_TRUE(std::isnan(out[5]));
  EXPECT_EQ(out[6], 120.0f);
}

// ---------------------------------------------------------------- random cases vs the reference
std::vector<float> run_logits(PagedCase& c, DType dt = DType::kF32, bool clean = true, int threads = 2,
                              int64_t width = -1) {
  if (width < 0) width = c.max_context;
  std::vector<float> out(static_cast<size_t>(c.rows * width), kPoison);
  PagedMqaLogitsParams p;
  static_cast<PagedIndexerArgs&>(p) = c.args();
  p.clean = clean;
  std::vector<uint16_t> out16;
  if (dt == DType::kF32) {
    p.logits = make_tensor(out.data(), DType::kF32, {c.rows, width});
  } else {
    out16.assign(out.size(), kPoisonBf16);
    p.logits = make_tensor(out16.data(), DType::kBF16, {c.rows, width});
  }
  const Status st = paged_mqa_logits(p, cpu_exec(threads));
  EXPECT_TRUE(st.ok()) << st.to_string();
  if (dt == DType::kBF16) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = out16[i] == kPoisonBf16 ? kPoison : bf16_value(out16[i]);
  }
  return out;
}

// Compares every defined logit with the reference and checks the tail is -inf.
void expect_matches_reference(const PagedCase& c, const std::vector<float>& out, const char* what) {
  int bad = 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    const int64_t ctx = c.row_ctx[static_cast<size_t>(r)];
    for (int64_t t = 0; t < c.max_context; ++t) {
      const float got = out[static_cast<size_t>(r * c.max_context + t)];
      if (t < ctx) {
        const double want = c.ref(r, t);
        if (!(std::fabs(got - want) <= 1e-6 * (1.0 + std::fabs(want))) && bad++ < 5) {
          ADD_FAILURE() << what << ": row " << r << " state " << t << " got " << got << " want " << want;
        }
      } else if (got != -kInf && bad++ < 5) {
        ADD_FAILURE() << what << ": row " << r << " column " << t << " expected -inf, got " << got;
      }
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

struct SweepCase {
  PagedShape shape;
  int64_t pad;
};

class PagedSweep : public ::testing::TestWithParam<SweepCase> {};

TEST_P(PagedSweep, MatchesReference) {
  const SweepCase sc = GetParam();
  const PagedShape& sh = sc.shape;
  PagedCaseSpec spec = sweep_spec(sh);
  spec.stride_pad_bytes = sc.pad;
  spec.max_len = sh.S * 3 + 5;
  spec.seed = 1000 + sh.S * 7 + sh.H + sh.D + sh.N;
  PagedCase c = make_paged_case(spec);
  expect_matches_reference(c, run_logits(c), "f32");
}

// {format, S, H, D, N, varlen, per_row}, page padding bytes
const SweepCase kSweep[] = {
    {{IndexerFormat::kFp8, 1, 8, 32, 1, false, true}, 0},
    {{IndexerFormat::kFp8, 3, 16, 64, 2, false, false}, 4},
    {{IndexerFormat::kFp8, 32, 32, 128, 3, false, true}, 0},
    {{IndexerFormat::kFp8, 48, 24, 32, 1, true, true}, 64},
    {{IndexerFormat::kFp8, 64, 64, 128, 2, false, false}, 64},
    {{IndexerFormat::kFp8, 96, 48, 64, 8, false, true}, 12},
    {{IndexerFormat::kFp8, 256, 8, 32, 1, false, true}, 0},
    {{IndexerFormat::kMxfp4, 1, 8, 32, 1, false, true}, 0},
    {{IndexerFormat::kMxfp4, 3, 16, 64, 2, false, false}, 4},
    {{IndexerFormat::kMxfp4, 32, 32, 128, 1, true, true}, 64},
    {{IndexerFormat::kMxfp4, 48, 64, 128, 3, false, true}, 0},
    {{IndexerFormat::kMxfp4, 64, 24, 64, 2, false, true}, 16},
    {{IndexerFormat::kMxfp4, 256, 8, 128, 1, false, false}, 0},
};
INSTANTIATE_TEST_SUITE_P(Shapes, PagedSweep, ::testing::ValuesIn(kSweep));

TEST(PagedMqaLogitsRef, CleanVsUnclean) {
  PagedCaseSpec spec;
  spec.states_per_page = 5;
  spec.next_n = 2;
  spec.seed = 7;
  PagedCase c = make_paged_case(spec);
  const std::vector<float> clean = run_logits(c, DType::kF32, true);
  const std::vector<float> raw = run_logits(c, DType::kF32, false);
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t t = 0; t < c.max_context; ++t) {
      const size_t i = static_cast<size_t>(r * c.max_context + t);
      if (t < c.row_ctx[static_cast<size_t>(r)]) {
        ASSERT_EQ(raw[i], clean[i]) << r << "," << t;
      } else {
        ASSERT_EQ(raw[i], kPoison) << r << "," << t;
        ASSERT_EQ(clean[i], -kInf) << r << "," << t;
      }
    }
  }
}

TEST(PagedMqaLogitsRef, Bf16IsRoundedF32) {
  for (IndexerFormat f : {IndexerFormat::kFp8, IndexerFormat::kMxfp4}) {
    PagedCaseSpec spec;
    spec.format = f;
    spec.states_per_page = 16;
    spec.seed = 11;
    PagedCase c = make_paged_case(spec);
    const std::vector<float> f32 = run_logits(c, DType::kF32, true);
    const std::vector<float> b16 = run_logits(c, DType::kBF16, true);
    for (size_t i = 0; i < f32.size(); ++i) {
      ASSERT_EQ(b16[i], bf16_value(codec::f32_to_bf16(f32[i]))) << i;
    }
  }
}

TEST(PagedMqaLogitsRef, OneDimLensEqualTwoDimLens) {
  PagedCaseSpec spec;
  spec.lens_per_row = false;
  spec.next_n = 4;
  spec.batch = 3;
  spec.lengths = {0, 2, 37};  // 0 and 2 < N exercise the clamp at 0
  spec.states_per_page = 8;
  spec.seed = 3;
  PagedCase c = make_paged_case(spec);
  const std::vector<float> one = run_logits(c);
  expect_matches_reference(c, one, "[B] lens");
  // The same rows described per row.
  std::vector<int32_t> lens2;
  for (int64_t r = 0; r < c.rows; ++r) lens2.push_back(static_cast<int32_t>(c.row_ctx[static_cast<size_t>(r)]));
  EXPECT_EQ(lens2, (std::vector<int32_t>{0, 0, 0, 0, 0, 0, 1, 2, 34, 35, 36, 37}));
  c.context_lens = lens2;
  c.spec.lens_per_row = true;
  EXPECT_EQ(run_logits(c), one);
}

TEST(PagedMqaLogitsRef, VarlenEqualsNonVarlen) {
  PagedCaseSpec spec;
  spec.next_n = 3;
  spec.batch = 3;
  spec.states_per_page = 7;
  spec.seed = 5;
  PagedCase c = make_paged_case(spec);
  const std::vector<float> ref = run_logits(c);
  // Same rows, flattened: row r names request r / N and carries its own length.
  c.spec.varlen = true;
  c.context_lens.clear();
  for (int64_t r = 0; r < c.rows; ++r) {
    c.row_request.push_back(static_cast<int32_t>(r / 3));
    c.context_lens.push_back(static_cast<int32_t>(c.row_ctx[static_cast<size_t>(r)]));
  }
  EXPECT_EQ(run_logits(c), ref);
}

TEST(PagedMqaLogitsRef, ShuffledPaddedPagesEqualContiguous) {
  for (IndexerFormat f : {IndexerFormat::kFp8, IndexerFormat::kMxfp4}) {
    PagedCaseSpec spec;
    spec.format = f;
    spec.states_per_page = 48;
    spec.head_dim = 64;
    spec.heads = 16;
    spec.next_n = 2;
    spec.shuffle_pages = false;
    spec.extra_pages = 0;
    spec.extra_table_cols = 0;
    spec.seed = 21;
    PagedCase plain = make_paged_case(spec);
    spec.shuffle_pages = true;
    spec.extra_pages = 3;
    spec.extra_table_cols = 2;
    spec.stride_pad_bytes = 128;
    PagedCase shuffled = make_paged_case(spec);
    ASSERT_NE(plain.cache.block_table, shuffled.cache.block_table);
    ASSERT_GT(shuffled.cache.page_stride, plain.cache.page_stride);
    EXPECT_EQ(run_logits(plain), run_logits(shuffled));
  }
}

TEST(PagedMqaLogitsRef, ThreadCountDoesNotChangeResults) {
  PagedCaseSpec spec;
  spec.batch = 5;
  spec.next_n = 3;
  spec.seed = 13;
  PagedCase c = make_paged_case(spec);
  const std::vector<float> one = run_logits(c, DType::kF32, true, 1);
  EXPECT_EQ(run_logits(c, DType::kF32, true, 3), one);
  EXPECT_EQ(run_logits(c, DType::kF32, true, 7), one);
}

TEST(PagedMqaLogitsRef, LinearInWeights) {
  PagedCaseSpec spec;
  spec.states_per_page = 16;
  spec.seed = 17;
  PagedCase c = make_paged_case(spec);
  const std::vector<float> base = run_logits(c);
  // x2 is exact in every step.
  for (float& w : c.weights) w *= 2.0f;
  const std::vector<float> twice = run_logits(c);
  for (size_t i = 0; i < base.size(); ++i) ASSERT_EQ(twice[i], 2.0f * base[i]) << i;
  // Additivity: logits(w1 + w2) = logits(w1) + logits(w2) (up to f32 rounding).
  const std::vector<float> w0 = c.weights;
  Rng rng(99);
  std::vector<float> w1 = rng.normals(w0.size()), w2(w0.size());
  for (size_t i = 0; i < w0.size(); ++i) w2[i] = w0[i] - w1[i];
  c.weights = w1;
  const std::vector<float> a = run_logits(c);
  c.weights = w2;
  const std::vector<float> b = run_logits(c);
  for (size_t i = 0; i < base.size(); ++i) {
    if (std::isinf(twice[i])) continue;
    ASSERT_NEAR(a[i] + b[i], twice[i], 1e-4 * (1.0 + std::fabs(twice[i]))) << i;
  }
}

TEST(PagedMqaLogitsRef, EmptyRowsAndEmptyBatch) {
  PagedCaseSpec spec;
  spec.lengths = {0, 0};
  spec.next_n = 2;
  spec.extra_width = 4;
  PagedCase c = make_paged_case(spec);
  const std::vector<float> out = run_logits(c);
  ASSERT_EQ(out.size(), 4u * 4u);
  for (float v : out) EXPECT_EQ(v, -kInf);
  // Zero rows: nothing to do, still ok.
  spec.batch = 0;
  spec.lengths = {};
  PagedCase e = make_paged_case(spec);
  EXPECT_TRUE(run_logits(e, DType::kF32, true, 2, 8).empty());
}

TEST(PagedMqaLogitsRef, PlainAmaxScaleIsReadToo) {
  // SPEC §2.1: a non-power-of-two scale amax / 448 must also be readable.
  PagedCaseSpec spec;
  spec.seed = 23;
  spec.states_per_page = 4;
  PagedCase c = make_paged_case(spec);
  PagedCacheOptions o = c.cache.opt;
  o.pow2_scale = false;
  Rng rng(5);
  std::vector<std::vector<float>> keys;
  for (int64_t L : c.cache.lengths) keys.push_back(rng.normals(static_cast<size_t>(L * spec.head_dim)));
  c.cache = build_paged_cache(keys, o, rng);
  bool non_pow2 = false;
  for (const auto& s : c.cache.key_scales) {
    for (float x : s) {
      int e = 0;
      non_pow2 |= std::frexp(x, &e) != 0.5f;
    }
  }
  EXPECT_TRUE(non_pow2);
  expect_matches_reference(c, run_logits(c), "amax/448 scales");
}

// ---------------------------------------------------------------- mqa_logits
// Keys t0..t2 and q / weights as in the FP8 paged hand case; ks = {0, 1}, ke = {2, 3}.
struct MqaHand {
  static constexpr int H = 8, D = 32;
  std::vector<uint8_t> k = std::vector<uint8_t>(3 * D, 0);
  std::vector<float> ks_f = {1.0f, 0.5f, 2.0f};
  std::vector<uint8_t> q = std::vector<uint8_t>(2 * H * D, 0);
  std::vector<float> w = std::vector<float>(2 * H);
  std::vector<int32_t> ks = {0, 1}, ke = {2, 3};
  MqaHand() {
    const float a[3] = {1, 4, -2}, b[3] = {1, 1, 0.5f};
    for (int t = 0; t < 3; ++t) {
      for (int d = 0; d < D; ++d) k[t * D + d] = e4m3(0.0f);
      k[t * D] = e4m3(a[t]);
      k[t * D + 1] = e4m3(b[t]);
    }
    for (int r = 0; r < 2; ++r) {
      for (int h = 0; h < H; ++h) {
        q[(r * H + h) * D] = e4m3(h % 2 == 0 ? 1.0f : -1.0f);
        q[(r * H + h) * D + 1] = e4m3(2.0f);
        w[r * H + h] = 0.5f * static_cast<float>(h + 1) * static_cast<float>(r + 1);
      }
    }
  }
  MqaLogitsParams params(TensorView logits, bool compressed) {
    MqaLogitsParams p;
    p.q = make_tensor(q.data(), DType::kF8E4M3, {2, H, D});
    p.weights = make_tensor(w.data(), DType::kF32, {2, H});
    p.k = make_tensor(k.data(), DType::kF8E4M3, {3, D});
    p.k_scales = make_tensor(ks_f.data(), DType::kF32, {3});
    p.ks = make_tensor(ks.data(), DType::kI32, {2});
    p.ke = make_tensor(ke.data(), DType::kI32, {2});
    p.logits = logits;
    p.compressed = compressed;
    return p;
  }
};

TEST(MqaLogitsRef, HandCaseFull) {
  MqaHand c;
  std::vector<float> out(6, kPoison);
  MqaLogitsParams p = c.params(make_tensor(out.data(), DType::kF32, {2, 3}), false);
  p.clean = true;
  ASSERT_TRUE(mqa_logits(p, cpu_exec()).ok());
  EXPECT_EQ(out, (std::vector<float>{34, 24, -kInf, -kInf, 48, 120}));
  std::fill(out.begin(), out.end(), kPoison);
  p.clean = false;
  ASSERT_TRUE(mqa_logits(p, cpu_exec()).ok());
  EXPECT_EQ(out, (std::vector<float>{34, 24, kPoison, kPoison, 48, 120}));
}

TEST(MqaLogitsRef, HandCaseCompressed) {
  MqaHand c;
  std::vector<float> out(2 * 3, kPoison);
  MqaLogitsParams p = c.params(make_tensor(out.data(), DType::kF32, {2, 3}), true);
  p.clean = true;
  ASSERT_TRUE(mqa_logits(p, cpu_exec()).ok());
  EXPECT_EQ(out, (std::vector<float>{34, 24, -kInf, 48, 120, -kInf}));
  std::vector<uint16_t> o16(2 * 2, kPoisonBf16);
  p = c.params(make_tensor(o16.data(), DType::kBF16, {2, 2}), true);
  ASSERT_TRUE(mqa_logits(p, cpu_exec()).ok());
  EXPECT_EQ(bf16_value(o16[0]), 34.0f);
  EXPECT_EQ(bf16_value(o16[1]), 24.0f);
  EXPECT_EQ(bf16_value(o16[2]), 48.0f);
  EXPECT_EQ(bf16_value(o16[3]), 120.0f);
}

// Random prefill (FP8 and MXFP4) against the reference; compressed output equals the window of
// the full output.
TEST(MqaLogitsRef, RandomMatchesReferenceAndCompressedMatchesFull) {
  for (IndexerFormat f : {IndexerFormat::kFp8, IndexerFormat::kMxfp4}) {
    for (int D : {32, 128}) {
      const int H = 16, M = 9, Nk = 70;
      Rng rng(31 + D);
      QueryHost q = make_query(f, M, H, D, rng.normals(static_cast<size_t>(M * H * D)));
      std::vector<float> w = rng.normals(static_cast<size_t>(M * H));
      const std::vector<float> kf = rng.normals(static_cast<size_t>(Nk * D));
      std::vector<uint8_t> k(static_cast<size_t>(Nk * (f == IndexerFormat::kFp8 ? D : D / 2)));
      std::vector<float> kscale(Nk), kdeq(static_cast<size_t>(Nk * D));
      std::vector<int32_t> kscale_i(Nk);
      for (int t = 0; t < Nk; ++t) {
        if (f == IndexerFormat::kFp8) {
          kscale[t] = quantize_fp8(kf.data() + t * D, D, k.data() + t * D);
          for (int d = 0; d < D; ++d) kdeq[t * D + d] = codec::e4m3_to_f32(k[t * D + d]);
        } else {
          kscale[t] = 1.0f;
          kscale_i[t] = static_cast<int32_t>(quantize_mxfp4(kf.data() + t * D, D, k.data() + t * D / 2));
          dequant_mxfp4(k.data() + t * D / 2, static_cast<uint32_t>(kscale_i[t]), D, kdeq.data() + t * D);
        }
      }
      std::vector<int32_t> ks(M), ke(M);
      int64_t W = 0;
      for (int m = 0; m < M; ++m) {
        ks[m] = static_cast<int32_t>(rng.randint(0, Nk));
        ke[m] = static_cast<int32_t>(rng.randint(ks[m], Nk));
        W = std::max<int64_t>(W, ke[m] - ks[m]);
      }
      ks[0] = ke[0] = 4;  // an empty window
      MqaLogitsParams p;
      p.format = f;
      p.q = q.q_view(0, 0);
      p.q_scales = q.scales_view(0, 0);
      p.weights = make_tensor(w.data(), DType::kF32, {M, H});
      if (f == IndexerFormat::kFp8) {
        p.k = make_tensor(k.data(), DType::kF8E4M3, {Nk, D});
        p.k_scales = make_tensor(kscale.data(), DType::kF32, {Nk});
      } else {
        p.k = make_tensor(k.data(), DType::kU8, {Nk, D / 2});
        p.k_scales = make_tensor(kscale_i.data(), DType::kI32, {Nk});
      }
      p.ks = make_tensor(ks.data(), DType::kI32, {M});
      p.ke = make_tensor(ke.data(), DType::kI32, {M});
      p.clean = true;
      std::vector<float> full(static_cast<size_t>(M * Nk), kPoison), comp(static_cast<size_t>(M * W), kPoison);
      p.logits = make_tensor(full.data(), DType::kF32, {M, Nk});
      ASSERT_TRUE(mqa_logits(p, cpu_exec()).ok());
      p.compressed = true;
      p.logits = make_tensor(comp.data(), DType::kF32, {M, W});
      ASSERT_TRUE(mqa_logits(p, cpu_exec(3)).ok());
      for (int m = 0; m < M; ++m) {
        for (int t = 0; t < Nk; ++t) {
          const float got = full[static_cast<size_t>(m * Nk + t)];
          if (t < ks[m] || t >= ke[m]) {
            ASSERT_EQ(got, -kInf) << m << "," << t;
            continue;
          }
          const double want = ref_logit(q.deq.data() + m * H * D, w.data() + m * H, kdeq.data() + t * D, kscale[t], H, D);
          ASSERT_NEAR(got, want, 1e-6 * (1.0 + std::fabs(want))) << m << "," << t;
          ASSERT_EQ(comp[static_cast<size_t>(m * W + t - ks[m])], got) << m << "," << t;
        }
        for (int64_t c = ke[m] - ks[m]; c < W; ++c) ASSERT_EQ(comp[static_cast<size_t>(m * W + c)], -kInf);
      }
    }
  }
}

// Prefill in chunks of query rows (bounded memory) gives the same rows as one call.
TEST(MqaLogitsRef, ChunkedRowsEqualOneCall) {
  const int H = 8, D = 64, M = 10, Nk = 40;
  Rng rng(404);
  QueryHost q = make_query(IndexerFormat::kFp8, M, H, D, rng.normals(static_cast<size_t>(M * H * D)));
  std::vector<float> w = rng.normals(static_cast<size_t>(M * H));
  std::vector<float> kf = rng.normals(static_cast<size_t>(Nk * D));
  std::vector<uint8_t> k(static_cast<size_t>(Nk * D));
  std::vector<float> kscale(Nk);
  for (int t = 0; t < Nk; ++t) kscale[t] = quantize_fp8(kf.data() + t * D, D, k.data() + t * D);
  std::vector<int32_t> ks(M), ke(M);
  for (int m = 0; m < M; ++m) {  // causal prefill windows
    ks[m] = 0;
    ke[m] = 31 + m;
  }
  auto run = [&](int m0, int m1, float* out) {
    MqaLogitsParams p;
    p.q = make_tensor(q.q.data() + m0 * H * D, DType::kF8E4M3, {m1 - m0, H, D});
    p.weights = make_tensor(w.data() + m0 * H, DType::kF32, {m1 - m0, H});
    p.k = make_tensor(k.data(), DType::kF8E4M3, {Nk, D});
    p.k_scales = make_tensor(kscale.data(), DType::kF32, {Nk});
    p.ks = make_tensor(ks.data() + m0, DType::kI32, {m1 - m0});
    p.ke = make_tensor(ke.data() + m0, DType::kI32, {m1 - m0});
    p.logits = make_tensor(out + m0 * Nk, DType::kF32, {m1 - m0, Nk});
    p.clean = true;
    const Status st = mqa_logits(p, cpu_exec());
    EXPECT_TRUE(st.ok()) << st.to_string();
  };
  std::vector<float> whole(static_cast<size_t>(M * Nk)), chunked(static_cast<size_t>(M * Nk));
  run(0, M, whole.data());
  run(0, 3, chunked.data());
  run(3, 7, chunked.data());
  run(7, M, chunked.data());
  EXPECT_EQ(chunked, whole);
  for (int m = 0; m < M; ++m) {
    EXPECT_NE(whole[static_cast<size_t>(m * Nk + ke[m] - 1)], -kInf);
    if (ke[m] < Nk) {
      EXPECT_EQ(whole[static_cast<size_t>(m * Nk + ke[m])], -kInf);
    }
  }
}

// ---------------------------------------------------------------- decoders and test helpers
// MXFP4 decoding (library and test side): low nibble = even element, scale byte i = block i.
// A q/key pair decoded with the same wrong convention would give the same dot products, so the
// convention is pinned here directly.
TEST(IndexerDecode, Mxfp4NibbleOrderAndScaleBytes) {
  std::vector<uint8_t> packed(32, 0);
  packed[0] = 0x72;   // element 0: code 2 (1.0), element 1: code 7 (6.0)
  packed[16] = 0xA1;  // element 32: code 1 (0.5), element 33: code 0xA (-1.0)
  const uint32_t scales = 127u | (129u << 8);  // block 0: x1, block 1: x4
  std::vector<double> lib(64);
  std::vector<float> test(64);
  cpu::decode_mxfp4(packed.data(), scales, 64, lib.data());
  dequant_mxfp4(packed.data(), scales, 64, test.data());
  const double want[4] = {1.0, 6.0, 2.0, -4.0};
  const int at[4] = {0, 1, 32, 33};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(lib[at[i]], want[i]) << at[i];
    EXPECT_EQ(test[at[i]], want[i]) << at[i];
  }
  for (int i = 2; i < 64; ++i) {
    if (i == 32 || i == 33) continue;
    EXPECT_EQ(lib[i], 0.0) << i;
    EXPECT_EQ(test[i], 0.0f) << i;
  }
  // UE8M0 0xFF is NaN.
  cpu::decode_mxfp4(packed.data(), 0xFFu, 32, lib.data());
  EXPECT_TRUE(std::isnan(lib[0]));
}

TEST(IndexerDecode, Fp8Values) {
  const uint8_t codes[4] = {0x3C, 0xBC, 0x7E, 0x01};  // 1.5, -1.5, 448, 2^-9
  double out[4];
  cpu::decode_fp8(codes, 4, out);
  EXPECT_EQ(out[0], 1.5);
  EXPECT_EQ(out[1], -1.5);
  EXPECT_EQ(out[2], 448.0);
  EXPECT_EQ(out[3], 1.0 / 512.0);
}

TEST(IndexerTestUtil, QuantizeFp8) {
  std::vector<float> x(32, 0.0f);
  x[0] = 896.0f;  // amax / 448 = 2 -> scale 2
  x[1] = -3.0f;
  std::vector<uint8_t> codes(32);
  EXPECT_EQ(quantize_fp8(x.data(), 32, codes.data()), 2.0f);
  EXPECT_EQ(codes[0], 0x7E);  // 448
  EXPECT_EQ(codes[1], 0xBC);  // -1.5
  EXPECT_EQ(codes[2], 0x00);
  x[0] = 500.0f;  // pow2: 2^ceil(log2(500 / 448)) = 2; plain: 500 / 448
  EXPECT_EQ(quantize_fp8(x.data(), 32, codes.data()), 2.0f);
  EXPECT_EQ(quantize_fp8(x.data(), 32, codes.data(), false), 500.0f / 448.0f);
  EXPECT_EQ(codes[0], 0x7E);
  std::vector<float> zeros(32, 0.0f);
  EXPECT_EQ(quantize_fp8(zeros.data(), 32, codes.data()), 1.0f);
}

TEST(IndexerTestUtil, QuantizeMxfp4) {
  std::vector<float> x(64, 0.0f);
  x[0] = 6.0f;   // block 0 amax 6 -> e = 127
  x[1] = -3.0f;
  x[2] = 0.5f;
  x[32] = 12.0f;  // block 1 amax 12 -> e = 128: 12 -> 6, 1 -> 0.5
  x[35] = 1.0f;
  std::vector<uint8_t> packed(32, 0xEE);
  const uint32_t scales = quantize_mxfp4(x.data(), 64, packed.data());
  EXPECT_EQ(scales, 127u | (128u << 8));
  EXPECT_EQ(packed[0], 0xD7);   // elements 0, 1: codes 7, 0xD
  EXPECT_EQ(packed[1], 0x01);   // element 2: code 1
  EXPECT_EQ(packed[16], 0x07);  // element 32: code 7
  EXPECT_EQ(packed[17], 0x10);  // element 35 (high nibble of byte 17): code 1
  EXPECT_EQ(packed[5], 0x00);
}

// The builder writes SPEC §2.1 byte positions: S = 2, D = 32, 8 B of pad -> 80 B pages.
TEST(IndexerTestUtil, PagedCacheLayout) {
  std::vector<std::vector<float>> keys(1, std::vector<float>(3 * 32, 0.0f));
  keys[0][0 * 32 + 0] = 1.0f;    // state 0 (page 0, slot 0)
  keys[0][1 * 32 + 3] = 896.0f;  // state 1 (page 0, slot 1): scale 2, code 448
  keys[0][2 * 32 + 31] = -2.0f;  // state 2 (page 1, slot 0)
  PagedCacheOptions o;
  o.states_per_page = 2;
  o.head_dim = 32;
  o.stride_pad_bytes = 8;
  o.shuffle_pages = false;
  o.extra_pages = 0;
  Rng rng(1);
  PagedCacheHost c = build_paged_cache(keys, o, rng);
  ASSERT_EQ(c.page_stride, 80);
  ASSERT_EQ(c.num_pages, 2);
  EXPECT_EQ(c.block_table, (std::vector<int32_t>{0, 1}));
  const uint8_t* p0 = c.pages.data();
  const uint8_t* p1 = c.pages.data() + 80;
  float s;
  // state 0: amax 1 -> scale 2^ceil(log2(1 / 448)) = 2^-8, value 1 / 2^-8 = 256 = 0x78
  EXPECT_EQ(p0[0], 0x78);
  std::memcpy(&s, p0 + 64, 4);
  EXPECT_EQ(s, 0.00390625f);
  EXPECT_EQ(p0[32 + 3], 0x7E);
  std::memcpy(&s, p0 + 68, 4);
  EXPECT_EQ(s, 2.0f);
  for (int i = 72; i < 80; ++i) EXPECT_EQ(p0[i], 0xFF) << "pad byte " << i;
  // state 2: amax 2 -> scale 2^-7, value -256 = 0xF8
  EXPECT_EQ(p1[31], 0xF8);
  std::memcpy(&s, p1 + 64, 4);
  EXPECT_EQ(s, 0.0078125f);
  for (int i = 32; i < 64; ++i) EXPECT_EQ(p1[i], 0xFF) << "unused state byte " << i;
  for (int i = 68; i < 80; ++i) EXPECT_EQ(p1[i], 0xFF) << "unused scale / pad byte " << i;
  EXPECT_EQ(c.key_scales[0], (std::vector<float>{0.00390625f, 2.0f, 0.0078125f}));
}

// The checkers GPU tests use must reject wrong rows.
TEST(IndexerTestUtil, CheckersRejectWrongRows) {
  const float got[4] = {1.0f, 2.0f, -kInf, -kInf};
  const double want[3] = {1.0, 2.0000001, 5.0};
  EXPECT_EQ(check_logits_row(got, want, 2, 4, true, 1e-6, 0.0), "");
  EXPECT_EQ(check_logits_row(got, want, 2, 4, true, 1e-9, 0.0), "column 1: got 2.000000, want 2.000000");
  EXPECT_EQ(check_logits_row(got, want, 3, 4, true, 1e-6, 0.0), "column 2: got -inf, want 5.000000");
  const float tail[3] = {1.0f, 0.0f, -kInf};
  EXPECT_EQ(check_logits_row(tail, want, 1, 3, true, 1e-6, 0.0), "column 1 (>= ctx 1): got 0.000000, want -inf");
  EXPECT_EQ(check_logits_row(tail, want, 1, 3, false, 1e-6, 0.0), "");

  const float scores[5] = {5, 1, 4, std::nanf(""), 4};
  const int32_t good[3] = {4, 0, 2}, bad[3] = {0, 1, 2}, dup[3] = {0, 0, 2}, oob[3] = {0, 5, 2};
  const int32_t tie_a[2] = {0, 2}, tie_b[2] = {4, 0};  // k = 2: 2 and 4 tie at 4
  EXPECT_EQ(check_topk_row(scores, 5, 3, good, 0.0), "");
  EXPECT_EQ(check_topk_row(scores, 5, 2, tie_a, 0.0), "");
  EXPECT_EQ(check_topk_row(scores, 5, 2, tie_b, 0.0), "");
  EXPECT_EQ(check_topk_row(scores, 5, 3, bad, 0.0), "unselected index 4 (score 4.000000) beats a selected one (score 1.000000)");
  EXPECT_EQ(check_topk_row(scores, 5, 3, bad, 3.5), "");  // within the tolerance
  EXPECT_EQ(check_topk_row(scores, 5, 3, dup, 0.0), "index 0 selected twice");
  EXPECT_EQ(check_topk_row(scores, 5, 3, oob, 0.0), "slot 1: index 5 outside [0, 5)");
  const int32_t nan_pick[3] = {0, 3, 2};
  EXPECT_EQ(check_topk_row(scores, 5, 3, nan_pick, 0.0), "unselected index 1 (score 1.000000) beats a selected one (score -inf)");
  const int32_t shorter[3] = {1, 0, -1}, unpadded[3] = {1, 0, 2};
  EXPECT_EQ(check_topk_row(scores, 2, 3, shorter, 0.0), "");
  EXPECT_EQ(check_topk_row(scores, 2, 3, unpadded, 0.0), "slot 2: got 2, want -1 padding");
}

}  // namespace
