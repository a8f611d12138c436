// CPU reference of paged_mqa_topk (SPEC §3.4): equals topk(paged_mqa_logits) on every shape
// (the scores are the same f32 values), slot ids, values, and a hand case.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/indexer_test_util.h"
#include "dsattn/ops.h"

using namespace dsattn;
using namespace dsattn::testutil;

namespace {

Exec cpu_exec(int threads = 2) {
  Exec ex;
  ex.backend = Backend::kCpu;
  ex.num_threads = threads;
  return ex;
}

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
  IndexerFormat format;
  int S, H, D, N;
  bool varlen, per_row;
  int k;
};

class FusedSweep : public ::testing::TestWithParam<FusedCase> {};

TEST_P(FusedSweep, EqualsTopkOfLogits) {
  const FusedCase fc = GetParam();
  PagedCaseSpec spec;
  spec.format = fc.format;
  spec.states_per_page = fc.S;
  spec.heads = fc.H;
  spec.head_dim = fc.D;
  spec.next_n = fc.N;
  spec.varlen = fc.varlen;
  spec.lens_per_row = fc.per_row;
  spec.batch = 3;
  spec.max_len = 3 * fc.k + 7;  // rows shorter and longer than k
  spec.stride_pad_bytes = 16;
  spec.seed = 500 + fc.S + fc.k;
  PagedCase c = make_paged_case(spec);
  for (bool sorted : {false, true}) {
    const Selected a = run_fused(c, fc.k, sorted), b = run_composed(c, fc.k, sorted);
    EXPECT_EQ(a.idx, b.idx) << "sorted " << sorted;
    EXPECT_EQ(a.val, b.val) << "sorted " << sorted;
    EXPECT_EQ(a.slots, b.slots) << "sorted " << sorted;
  }
}

const FusedCase kFused[] = {
    {IndexerFormat::kFp8, 1, 8, 32, 1, false, true, 4},
    {IndexerFormat::kFp8, 3, 16, 64, 2, false, false, 16},
    {IndexerFormat::kFp8, 64, 32, 128, 1, true, true, 64},
    {IndexerFormat::kFp8, 96, 64, 32, 4, false, true, 33},
    {IndexerFormat::kMxfp4, 32, 8, 128, 2, false, true, 20},
    {IndexerFormat::kMxfp4, 48, 24, 64, 1, true, true, 50},
    {IndexerFormat::kMxfp4, 256, 16, 32, 3, false, false, 8},
};
INSTANTIATE_TEST_SUITE_P(Shapes, FusedSweep, ::testing::ValuesIn(kFused));

}  // namespace
