// CPU reference of paged_mqa_topk (SPEC §3.4): equals topk(paged_mqa_logits) on every shape
// (the scores are the same f32 values), slot ids, values, and a hand case.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/indexer_test_util.h"
#include "cpu_test_util.h"
#include "dsattn/ops.h"

using namespace dsattn;
using namespace dsattn::testutil;

namespace {

struct Selected {
  std::vector<int32_t> idx, slots;
  std::vector<float> val;
};

// The fused op.
Selected run_fused(PagedCase& c, int k, bool sorted, int threads = 2) {
  Selected o;
  o.idx.assign(static_cast<size_t>(c.rows * k), -7);
  o.slots.assign(static_cast<size_t>(c.rows * k), -7);
  o.val.assign(static_cast<size_t>(c.rows * k), kPoison);
  PagedMqaTopkParams p;
  static_cast<PagedIndexerArgs&>(p) = c.args();
  p.k = k;
  p.sorted = sorted;
  p.indices = make_tensor(o.idx.data(), DType::kI32, {c.rows, k});
  p.values = make_tensor(o.val.data(), DType::kF32, {c.rows, k});
  p.slot_ids = make_tensor(o.slots.data(), DType::kI32, {c.rows, k});
  const Status st = paged_mqa_topk(p, cpu_exec(threads));
  EXPECT_TRUE(st.ok()) << st.to_string();
  return o;
}

// paged_mqa_logits (clean, f32) then topk with ends = row context and the slot transform.
Selected run_composed(PagedCase& c, int k, bool sorted) {
  const int64_t W = c.max_context;
  std::vector<float> logits(static_cast<size_t>(c.rows * W));
  PagedMqaLogitsParams lp;
  static_cast<PagedIndexerArgs&>(lp) = c.args();
  lp.logits = make_tensor(logits.data(), DType::kF32, {c.rows, W});
  lp.clean = true;
  Status st = paged_mqa_logits(lp, cpu_exec());
  EXPECT_TRUE(st.ok()) << st.to_string();
  Selected o;
  o.idx.assign(static_cast<size_t>(c.rows * k), -7);
  o.slots.assign(static_cast<size_t>(c.rows * k), -7);
  o.val.assign(static_cast<size_t>(c.rows * k), kPoison);
  std::vector<int32_t> ends;
  for (int64_t r = 0; r < c.rows; ++r) ends.push_back(static_cast<int32_t>(c.row_ctx[static_cast<size_t>(r)]));
  std::vector<int32_t> rr;
  for (int64_t r = 0; r < c.rows; ++r) rr.push_back(static_cast<int32_t>(c.row_req[static_cast<size_t>(r)]));
  TopkParams tp;
  tp.logits = lp.logits;
  tp.ends = make_tensor(ends.data(), DType::kI32, {c.rows});
  tp.k = k;
  tp.sorted = sorted;
  tp.indices = make_tensor(o.idx.data(), DType::kI32, {c.rows, k});
  tp.values = make_tensor(o.val.data(), DType::kF32, {c.rows, k});
  tp.block_table = c.cache.block_table_view();
  tp.row_request = make_tensor(rr.data(), DType::kI32, {c.rows});
  tp.states_per_page = c.spec.states_per_page;
  tp.slot_ids = make_tensor(o.slots.data(), DType::kI32, {c.rows, k});
  st = topk(tp, cpu_exec());
  EXPECT_TRUE(st.ok()) << st.to_string();
  return o;
}

struct FusedCase {
  PagedShape shape;
  int k;
};

class FusedSweep : public ::testing::TestWithParam<FusedCase> {};

TEST_P(FusedSweep, EqualsTopkOfLogits) {
  const FusedCase fc = GetParam();
  PagedCaseSpec spec = sweep_spec(fc.shape);
  spec.max_len = 3 * fc.k + 7;  // rows shorter and longer than k
  spec.stride_pad_bytes = 16;
  spec.seed = 500 + fc.shape.S + fc.k;
  PagedCase c = make_paged_case(spec);
  for (bool sorted : {false, true}) {
    const Selected a = run_fused(c, fc.k, sorted), b = run_composed(c, fc.k, sorted);
    EXPECT_EQ(a.idx, b.idx) << "sorted " << sorted;
    EXPECT_EQ(a.val, b.val) << "sorted " << sorted;
    EXPECT_EQ(a.slots, b.slots) << "sorted " << sorted;
  }
}

// {format, S, H, D, N, varlen, per_row}, k
const FusedCase kFused[] = {
    {{IndexerFormat::kFp8, 1, 8, 32, 1, false, true}, 4},
    {{IndexerFormat::kFp8, 3, 16, 64, 2, false, false}, 16},
    {{IndexerFormat::kFp8, 64, 32, 128, 1, true, true}, 64},
    {{IndexerFormat::kFp8, 96, 64, 32, 4, false, true}, 33},
    {{IndexerFormat::kMxfp4, 32, 8, 128, 2, false, true}, 20},
    {{IndexerFormat::kMxfp4, 48, 24, 64, 1, true, true}, 50},
    {{IndexerFormat::kMxfp4, 256, 16, 32, 3, false, false}, 8},
};
INSTANTIATE_TEST_SUITE_P(Shapes, FusedSweep, ::testing::ValuesIn(kFused));

}  // namespace

namespace {

// The FP8 hand case (Fp8HandCase, cpu_test_util.h; S = 2, block_table {3, 1, 99}, lengths [B] = {3}):
// row 0 scores {34, 24}, row 1 scores {68, 48, 120}.
TEST(PagedMqaTopkRef, HandCase) {
  Fp8HandCase c;
  const int k = 2;
  std::vector<int32_t> idx(2 * k, -7), slots(2 * k, -7);
  std::vector<float> val(2 * k, kPoison);
  PagedMqaTopkParams p;
  static_cast<PagedIndexerArgs&>(p) = c.args();
  p.k = k;
  p.sorted = true;
  p.indices = make_tensor(idx.data(), DType::kI32, {2, k});
  p.values = make_tensor(val.data(), DType::kF32, {2, k});
  p.slot_ids = make_tensor(slots.data(), DType::kI32, {2, k});
  ASSERT_TRUE(paged_mqa_topk(p, cpu_exec()).ok());
  EXPECT_EQ(idx, (std::vector<int32_t>{0, 1, 2, 0}));
  EXPECT_EQ(val, (std::vector<float>{34, 24, 120, 68}));
  // slot = bt[i / 2] * 2 + i % 2: 0 -> 6, 1 -> 7, 2 -> 1 * 2 + 0 = 2
  EXPECT_EQ(slots, (std::vector<int32_t>{6, 7, 2, 6}));
  // k = 4 > ctx: everything, then -1 / -inf / -1.
  std::vector<int32_t> idx4(8), slots4(8);
  std::vector<float> val4(8);
  p.k = 4;
  p.indices = make_tensor(idx4.data(), DType::kI32, {2, 4});
  p.values = make_tensor(val4.data(), DType::kF32, {2, 4});
  p.slot_ids = make_tensor(slots4.data(), DType::kI32, {2, 4});
  p.sorted = false;
  ASSERT_TRUE(paged_mqa_topk(p, cpu_exec()).ok());
  EXPECT_EQ(idx4, (std::vector<int32_t>{0, 1, -1, -1, 0, 1, 2, -1}));
  EXPECT_EQ(val4, (std::vector<float>{34, 24, -kInf, -kInf, 68, 48, 120, -kInf}));
  EXPECT_EQ(slots4, (std::vector<int32_t>{6, 7, -1, -1, 6, 7, 2, -1}));
}

// paged_mqa_topk_route: the same validation as the call, "cpu" on the CPU backend, and errors that
// name the op and the argument.
TEST(PagedMqaTopkRef, RouteQuery) {
  Fp8HandCase c;
  const int k = 2;
  std::vector<int32_t> idx(2 * k, -7);
  PagedMqaTopkParams p;
  static_cast<PagedIndexerArgs&>(p) = c.args();
  p.k = k;
  p.indices = make_tensor(idx.data(), DType::kI32, {2, k});
  const char* route = nullptr;
  Status st = paged_mqa_topk_route(p, cpu_exec(), &route);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_STREQ(route, "cpu");
  st = paged_mqa_topk_route(p, cpu_exec(), nullptr);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("paged_mqa_topk_route"), std::string::npos) << st.to_string();
  p.indices = make_tensor(idx.data(), DType::kI32, {2, k + 1});  // wrong shape: the call's own check
  st = paged_mqa_topk_route(p, cpu_exec(), &route);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("indices"), std::string::npos) << st.to_string();
  p.indices = make_tensor(idx.data(), DType::kI32, {2, k});
  p.k = 4097;  // beyond every backend's range: refused before any plan, as by the call
  st = paged_mqa_topk_route(p, cpu_exec(), &route);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("k expected 1..4096"), std::string::npos) << st.to_string();
  EXPECT_EQ(idx, std::vector<int32_t>(2 * k, -7));  // nothing written
}

// States whose page bytes are NaN (the builder's poison) score NaN and rank below every number.
TEST(PagedMqaTopkRef, NanStatesRankLast) {
  PagedCaseSpec spec;
  spec.batch = 1;
  spec.next_n = 1;
  spec.lengths = {6};  // states 0..5 written; page size 4: states 6, 7 of page 1 are poison
  spec.states_per_page = 4;
  spec.seed = 8;
  PagedCase c = make_paged_case(spec);
  c.context_lens = {8};
  const Selected o = run_fused(c, 8, true);
  for (int j = 0; j < 6; ++j) {
    EXPECT_LT(o.idx[static_cast<size_t>(j)], 6) << j;
    EXPECT_FALSE(std::isnan(o.val[static_cast<size_t>(j)])) << j;
  }
  EXPECT_EQ(o.idx[6], 6);  // NaN ties: smaller index first
  EXPECT_EQ(o.idx[7], 7);
  EXPECT_TRUE(std::isnan(o.val[6]));
  EXPECT_TRUE(std::isnan(o.val[7]));
  const Selected few = run_fused(c, 3, false);
  for (int j = 0; j < 3; ++j) EXPECT_LT(few.idx[static_cast<size_t>(j)], 6);
}

TEST(PagedMqaTopkRef, ThreadCountDoesNotChangeResults) {
  PagedCaseSpec spec;
  spec.batch = 4;
  spec.next_n = 2;
  spec.states_per_page = 32;
  spec.max_len = 300;
  spec.seed = 44;
  PagedCase c = make_paged_case(spec);
  const Selected one = run_fused(c, 64, false, 1);
  for (int t : {2, 5}) {
    const Selected many = run_fused(c, 64, false, t);
    EXPECT_EQ(many.idx, one.idx);
    EXPECT_EQ(many.val, one.val);
    EXPECT_EQ(many.slots, one.slots);
  }
}

// A V3.2-like row shape (H = 64, D = 128, S = 64, k = 2048 < ctx) against the composition.
TEST(PagedMqaTopkRef, V32ShapeEqualsComposition) {
  PagedCaseSpec spec;
  spec.batch = 1;
  spec.next_n = 2;
  spec.heads = 64;
  spec.head_dim = 128;
  spec.states_per_page = 64;
  spec.lengths = {2300};
  spec.lens_per_row = false;
  spec.seed = 9;
  PagedCase c = make_paged_case(spec);
  const Selected a = run_fused(c, 2048, false), b = run_composed(c, 2048, false);
  EXPECT_EQ(a.idx, b.idx);
  EXPECT_EQ(a.val, b.val);
  EXPECT_EQ(a.slots, b.slots);
}

}  // namespace
