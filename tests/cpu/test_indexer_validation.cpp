// Argument validation of paged_mqa_logits, paged_mqa_topk, mqa_logits and topk: one test per
// rejection, each checking the exact message (op, argument, expected, given).
#include <gtest/gtest.h>

#include <vector>

#include "common/indexer_test_util.h"
#include "cpu_test_util.h"
#include "dsattn/ops.h"

using namespace dsattn;
using namespace dsattn::testutil;

namespace {

// A valid paged problem: B = 2, N = 2, H = 8, D = 32, S = 4 (144 B pages), lengths {5, 13},
// block_table [2, 5], 7 physical pages, logits [4, 16].
struct PagedFixture : ::testing::Test {
  PagedCase c;
  std::vector<float> logits;
  PagedMqaLogitsParams p;

  void SetUp() override { build(IndexerFormat::kFp8); }
  void build(IndexerFormat f) {
    PagedCaseSpec spec;
    spec.format = f;
    spec.batch = 2;
    spec.next_n = 2;
    spec.heads = 8;
    spec.head_dim = 32;
    spec.states_per_page = 4;
    spec.lengths = {5, 13};
    spec.extra_pages = 1;
    spec.extra_table_cols = 1;
    spec.extra_width = 3;
    c = make_paged_case(spec);
    c.context_lens = {4, 5, 12, 13};
    logits.assign(static_cast<size_t>(c.rows * c.max_context), 0.0f);
    p = PagedMqaLogitsParams{};
    static_cast<PagedIndexerArgs&>(p) = c.args();
    p.logits = make_tensor(logits.data(), DType::kF32, {c.rows, c.max_context});
  }
  std::string error() {
    const Status s = paged_mqa_logits(p, cpu_exec(1));
    EXPECT_FALSE(s.ok());
    if (!s.ok()) {
      EXPECT_EQ(s.code, Code::kInvalidArgument);
    }
    return s.message;
  }
};

TEST_F(PagedFixture, BaseCaseIsValid) {
  ASSERT_EQ(c.cache.page_stride, 144);
  ASSERT_EQ(c.cache.num_pages, 7);
  ASSERT_EQ(c.cache.max_pages, 5);
  ASSERT_EQ(c.max_context, 16);
  const Status s = paged_mqa_logits(p, cpu_exec(1));
  EXPECT_TRUE(s.ok()) << s.to_string();
  size_t bytes = 123;
  EXPECT_TRUE(paged_mqa_logits_workspace(p, cpu_exec(1), &bytes).ok());
  EXPECT_EQ(bytes, 0u);
}

TEST_F(PagedFixture, QMissing) {
  p.q = TensorView{};
  EXPECT_EQ(error(), "paged_mqa_logits: q is required but was not given");
}
TEST_F(PagedFixture, QNullData) {
  p.q.data = nullptr;
  EXPECT_EQ(error(), "paged_mqa_logits: q data pointer is null for shape [2, 2, 8, 32]");
}
TEST_F(PagedFixture, QDtype) {
  p.q.dtype = DType::kF32;
  EXPECT_EQ(error(), "paged_mqa_logits: q dtype expected f8_e4m3, got f32");
}
TEST_F(PagedFixture, QRank) {
  p.q = make_tensor(c.q.q.data(), DType::kF8E4M3, {4, 8, 32});
  EXPECT_EQ(error(), "paged_mqa_logits: q rank expected 4, got 3 (shape [4, 8, 32])");
}
TEST_F(PagedFixture, NextNTooLarge) {
  std::vector<uint8_t> q(1 * 9 * 8 * 32);
  p.q = make_tensor(q.data(), DType::kF8E4M3, {1, 9, 8, 32});
  EXPECT_EQ(error(), "paged_mqa_logits: q next_n (dim 1) expected 1..8, got 9");
}
TEST_F(PagedFixture, NextNZero) {
  p.q = make_tensor(c.q.q.data(), DType::kF8E4M3, {2, 0, 8, 32});
  EXPECT_EQ(error(), "paged_mqa_logits: q next_n (dim 1) expected 1..8, got 0");
}
TEST_F(PagedFixture, WeightsNullData) {
  p.weights.data = nullptr;
  EXPECT_EQ(error(), "paged_mqa_logits: weights data pointer is null for shape [4, 8]");
}
TEST_F(PagedFixture, BlockTableNullData) {
  p.block_table.data = nullptr;
  EXPECT_EQ(error(), "paged_mqa_logits: block_table data pointer is null for shape [2, 5]");
}
TEST_F(PagedFixture, ContextLensNullData) {
  p.context_lens.data = nullptr;
  EXPECT_EQ(error(), "paged_mqa_logits: context_lens data pointer is null for shape [2, 2]");
}
TEST_F(PagedFixture, PagesNullData) {
  p.cache.pages.data = nullptr;
  EXPECT_EQ(error(), "paged_mqa_logits: kv_cache pages data pointer is null for shape [7, 144]");
}
TEST_F(PagedFixture, LogitsNullData) {
  p.logits.data = nullptr;
  EXPECT_EQ(error(), "paged_mqa_logits: logits data pointer is null for shape [4, 16]");
}
TEST_F(PagedFixture, PagesMisaligned) {
  std::vector<uint8_t> buf(7 * 144 + 4);
  p.cache.pages = make_tensor(buf.data() + 1, DType::kU8, {7, 144});
  const std::string m = error();
  EXPECT_EQ(m.rfind("paged_mqa_logits: kv_cache pages data pointer expected 4-byte aligned, got ", 0), 0u) << m;
}
TEST_F(PagedFixture, HeadsUnsupported) {
  std::vector<uint8_t> q(4 * 12 * 32);
  p.q = make_tensor(q.data(), DType::kF8E4M3, {2, 2, 12, 32});
  EXPECT_EQ(error(), "paged_mqa_logits: q heads expected 8, 16, 24, 32, 48 or 64, got 12");
}
TEST_F(PagedFixture, StatesPerPageZero) {
  p.cache.states_per_page = 0;
  EXPECT_EQ(error(), "paged_mqa_logits: kv_cache states_per_page expected 1..256, got 0");
}
TEST_F(PagedFixture, StatesPerPageTooLarge) {
  p.cache.states_per_page = 257;
  EXPECT_EQ(error(), "paged_mqa_logits: kv_cache states_per_page expected 1..256, got 257");
}
TEST_F(PagedFixture, HeadDimUnsupported) {
  p.cache.head_dim = 96;
  EXPECT_EQ(error(), "paged_mqa_logits: kv_cache head_dim expected 32, 64 or 128, got 96");
}
TEST_F(PagedFixture, QHeadDimMismatch) {
  p.cache.head_dim = 64;
  EXPECT_EQ(error(), "paged_mqa_logits: q last dim expected 64 (kv_cache head_dim), got 32");
}
TEST_F(PagedFixture, QNotContiguous) {
  p.q = make_tensor_strided(c.q.q.data(), DType::kF8E4M3, {2, 2, 8, 32}, {512, 256, 64, 1});
  EXPECT_EQ(error(),
            "paged_mqa_logits: q must be contiguous (row-major) for shape [2, 2, 8, 32], got strides [512, 256, 64, 1]");
}
TEST_F(PagedFixture, QScalesWithFp8) {
  std::vector<int32_t> s(4 * 8);
  p.q_scales = make_tensor(s.data(), DType::kI32, {2, 2, 8});
  EXPECT_EQ(error(), "paged_mqa_logits: q_scales is only used with the mxfp4 kv_cache format, got it with fp8");
}
TEST_F(PagedFixture, WeightsShape) {
  std::vector<float> w(4 * 16);
  p.weights = make_tensor(w.data(), DType::kF32, {4, 16});
  EXPECT_EQ(error(), "paged_mqa_logits: weights shape expected [4, 8], got [4, 16]");
}
TEST_F(PagedFixture, WeightsDtype) {
  p.weights.dtype = DType::kBF16;
  EXPECT_EQ(error(), "paged_mqa_logits: weights dtype expected f32, got bf16");
}
TEST_F(PagedFixture, PageStrideTooSmallIssueExample) {
  // The shape from the issue: S = 64, D = 128 (132 B per state) with an 8192 B page stride.
  PagedCaseSpec spec;
  spec.head_dim = 128;
  spec.states_per_page = 64;
  spec.lengths = {70, 3};
  PagedCase big = make_paged_case(spec);
  std::vector<float> out(static_cast<size_t>(big.rows * big.max_context));
  PagedMqaLogitsParams q;
  static_cast<PagedIndexerArgs&>(q) = big.args();
  q.logits = make_tensor(out.data(), DType::kF32, {big.rows, big.max_context});
  ASSERT_TRUE(paged_mqa_logits(q, cpu_exec(1)).ok());
  q.cache.page_stride_bytes = 8192;
  const Status s = paged_mqa_logits(q, cpu_exec(1));
  EXPECT_EQ(s.message, "paged_mqa_logits: kv_cache page_stride 8192 B < 64 states x 132 B = 8448 B");
}
TEST_F(PagedFixture, PageStrideNotMultipleOf4) {
  p.cache.page_stride_bytes = 146;
  EXPECT_EQ(error(), "paged_mqa_logits: kv_cache page_stride 146 B expected a multiple of 4");
}
TEST_F(PagedFixture, PagesStrideDisagreesWithPageStride) {
  p.cache.page_stride_bytes = 148;
  EXPECT_EQ(error(), "paged_mqa_logits: kv_cache pages stride 0 expected 148 (page_stride), got 144");
}
TEST_F(PagedFixture, PagesMissing) {
  p.cache.pages = TensorView{};
  EXPECT_EQ(error(), "paged_mqa_logits: kv_cache pages is required but was not given");
}
TEST_F(PagedFixture, PagesDtype) {
  p.cache.pages.dtype = DType::kI32;
  EXPECT_EQ(error(), "paged_mqa_logits: kv_cache pages dtype expected u8, got i32");
}
TEST_F(PagedFixture, PagesTooNarrow) {
  p.cache.pages.shape[1] = 100;
  EXPECT_EQ(error(), "paged_mqa_logits: kv_cache pages shape expected [*, >= 144] (4 states x 36 B), got [7, 100]");
}
TEST_F(PagedFixture, PagesRank) {
  p.cache.pages = make_tensor(c.cache.pages.data(), DType::kU8, {7 * 144});
  EXPECT_EQ(error(), "paged_mqa_logits: kv_cache pages rank expected 2, got 1 (shape [1008])");
}
TEST_F(PagedFixture, BlockTableDtype) {
  p.block_table.dtype = DType::kI64;
  EXPECT_EQ(error(), "paged_mqa_logits: block_table dtype expected i32, got i64");
}
TEST_F(PagedFixture, BlockTableRows) {
  p.block_table.shape[0] = 3;
  EXPECT_EQ(error(), "paged_mqa_logits: block_table shape expected [2, *], got [3, 5]");
}
TEST_F(PagedFixture, BlockTableLastDimStride) {
  p.block_table.strides[1] = 2;
  EXPECT_EQ(error(), "paged_mqa_logits: block_table last-dimension stride expected 1, got 2");
}
TEST_F(PagedFixture, BlockTableNegativeStride) {
  p.block_table.strides[0] = -5;
  EXPECT_EQ(error(), "paged_mqa_logits: block_table stride 0 expected >= 0, got -5");
}
TEST_F(PagedFixture, ContextLensDtype) {
  p.context_lens.dtype = DType::kI64;
  EXPECT_EQ(error(), "paged_mqa_logits: context_lens dtype expected i32, got i64");
}
TEST_F(PagedFixture, ContextLensRank) {
  p.context_lens = make_tensor(c.context_lens.data(), DType::kI32, {1, 2, 2});
  EXPECT_EQ(error(), "paged_mqa_logits: context_lens rank expected 1 ([B]) or 2 ([B, N]), got 3 (shape [1, 2, 2])");
}
TEST_F(PagedFixture, ContextLensShape) {
  p.context_lens = make_tensor(c.context_lens.data(), DType::kI32, {4});
  EXPECT_EQ(error(), "paged_mqa_logits: context_lens shape expected [2], got [4]");
  p.context_lens = make_tensor(c.context_lens.data(), DType::kI32, {1, 4});
  EXPECT_EQ(error(), "paged_mqa_logits: context_lens shape expected [2, 2], got [1, 4]");
}
TEST_F(PagedFixture, ContextLensNegative) {
  c.context_lens[2] = -1;
  EXPECT_EQ(error(), "paged_mqa_logits: context_lens[1, 0] = -1 is negative");
}
TEST_F(PagedFixture, ContextLensNegative1D) {
  std::vector<int32_t> l = {5, -2};
  p.context_lens = make_tensor(l.data(), DType::kI32, {2});
  EXPECT_EQ(error(), "paged_mqa_logits: context_lens[1] = -2 is negative");
}
TEST_F(PagedFixture, ContextExceedsBlockTable) {
  c.context_lens[1] = 21;
  std::vector<float> wide(4 * 32);
  p.logits = make_tensor(wide.data(), DType::kF32, {4, 32});
  EXPECT_EQ(error(), "paged_mqa_logits: context_lens[0, 1] = 21 exceeds block_table capacity 5 pages x 4 states = 20");
}
TEST_F(PagedFixture, ContextExceedsLogitsWidth) {
  c.context_lens[3] = 17;
  EXPECT_EQ(error(), "paged_mqa_logits: context_lens[1, 1] = 17 exceeds logits width 16");
}
TEST_F(PagedFixture, ContextExceedsZeroWidthLogits) {
  p.logits = make_tensor(logits.data(), DType::kF32, {4, 0});
  EXPECT_EQ(error(), "paged_mqa_logits: context_lens[0, 0] = 4 exceeds logits width 0");
  c.context_lens = {0, 0, 0, 0};
  EXPECT_TRUE(paged_mqa_logits(p, cpu_exec(1)).ok());
}
TEST_F(PagedFixture, BlockTableEntryOutOfRange) {
  c.cache.block_table[5 + 2] = 7;  // request 1, page 2: read by rows with ctx > 8
  EXPECT_EQ(error(), "paged_mqa_logits: block_table[1, 2] = 7 out of range [0, 7) (kv_cache pages)");
  c.cache.block_table[5 + 2] = -1;
  EXPECT_EQ(error(), "paged_mqa_logits: block_table[1, 2] = -1 out of range [0, 7) (kv_cache pages)");
}
TEST_F(PagedFixture, UnreadBlockTableEntriesAreNotChecked) {
  // Column 4 of both requests and column 2+ of request 0 are never read: junk there is fine.
  ASSERT_EQ(c.cache.block_table[4], -1);
  c.cache.block_table[2] = 1000;
  c.cache.block_table[5 + 4] = -9;
  EXPECT_TRUE(paged_mqa_logits(p, cpu_exec(1)).ok());
}
TEST_F(PagedFixture, LogitsDtype) {
  p.logits.dtype = DType::kF16;
  EXPECT_EQ(error(), "paged_mqa_logits: logits dtype expected f32 or bf16, got f16");
}
TEST_F(PagedFixture, LogitsRows) {
  p.logits.shape[0] = 3;
  EXPECT_EQ(error(), "paged_mqa_logits: logits shape expected [4, *], got [3, 16]");
}
TEST_F(PagedFixture, LogitsLastDimStride) {
  p.logits.strides[1] = 2;
  EXPECT_EQ(error(), "paged_mqa_logits: logits last-dimension stride expected 1, got 2");
}
TEST_F(PagedFixture, LogitsOverlappingRows) {
  p.logits.strides[0] = 8;
  EXPECT_EQ(error(), "paged_mqa_logits: logits row stride expected >= 16 (the row width; rows must not overlap), got 8");
}
TEST_F(PagedFixture, LogitsMissing) {
  p.logits = TensorView{};
  EXPECT_EQ(error(), "paged_mqa_logits: logits is required but was not given");
}
TEST_F(PagedFixture, MixedDevices) {
  p.logits.device = Device::kCuda;
  EXPECT_EQ(error(), "paged_mqa_logits: all tensors must be on one device: found cpu:0 and cuda:0");
}
TEST_F(PagedFixture, CudaBackendWithHostTensors) {
  Exec ex = cpu_exec(1);
  ex.backend = Backend::kCuda;
  const Status s = paged_mqa_logits(p, ex);
  EXPECT_EQ(s.message, "paged_mqa_logits: backend cuda expected CUDA tensors, got host tensors");
}
TEST_F(PagedFixture, WorkspaceNullOutput) {
  const Status s = paged_mqa_logits_workspace(p, cpu_exec(1), nullptr);
  EXPECT_EQ(s.message, "paged_mqa_logits: bytes (workspace size output) is a null pointer");
}
TEST_F(PagedFixture, ScheduleDtype) {
  std::vector<float> sched(8);
  p.schedule = make_tensor(sched.data(), DType::kF32, {8});
  EXPECT_EQ(error(), "paged_mqa_logits: schedule dtype expected i32, got f32");
}

// ---------------------------------------------------------------- varlen
struct VarlenFixture : PagedFixture {
  void SetUp() override {
    PagedFixture::SetUp();
    c.spec.varlen = true;
    c.row_request = {1, 0, 1, 1};
    c.context_lens = {13, 5, 0, 7};
    static_cast<PagedIndexerArgs&>(p) = c.args();
  }
};
TEST_F(VarlenFixture, BaseCaseIsValid) { EXPECT_TRUE(paged_mqa_logits(p, cpu_exec(1)).ok()); }
TEST_F(VarlenFixture, QRank) {
  p.q = make_tensor(c.q.q.data(), DType::kF8E4M3, {2, 2, 8, 32});
  EXPECT_EQ(error(), "paged_mqa_logits: q rank expected 3, got 4 (shape [2, 2, 8, 32])");
}
TEST_F(VarlenFixture, RowRequestShape) {
  p.row_request.shape[0] = 3;
  EXPECT_EQ(error(), "paged_mqa_logits: row_request shape expected [4], got [3]");
}
TEST_F(VarlenFixture, RowRequestDtype) {
  p.row_request.dtype = DType::kI64;
  EXPECT_EQ(error(), "paged_mqa_logits: row_request dtype expected i32, got i64");
}
TEST_F(VarlenFixture, ContextLensShape) {
  p.context_lens = make_tensor(c.context_lens.data(), DType::kI32, {2, 2});
  EXPECT_EQ(error(), "paged_mqa_logits: context_lens shape expected [4], got [2, 2]");
}
TEST_F(VarlenFixture, RowRequestOutOfRange) {
  c.row_request[2] = 2;
  EXPECT_EQ(error(), "paged_mqa_logits: row_request[2] = 2 out of range [0, 2) (block_table rows)");
}
TEST_F(VarlenFixture, ContextNegative) {
  c.context_lens[3] = -4;
  EXPECT_EQ(error(), "paged_mqa_logits: context_lens[3] = -4 is negative");
}
TEST_F(VarlenFixture, ContextReadsUnmappedPage) {
  c.context_lens[1] = 9;  // request 0 has 2 mapped pages (5 states); page 2 is -1
  EXPECT_EQ(error(), "paged_mqa_logits: block_table[0, 2] = -1 out of range [0, 7) (kv_cache pages)");
}

// ---------------------------------------------------------------- MXFP4
struct Mxfp4Fixture : PagedFixture {
  void SetUp() override { build(IndexerFormat::kMxfp4); }
};
TEST_F(Mxfp4Fixture, BaseCaseIsValid) {
  ASSERT_EQ(c.cache.page_stride, 4 * 20);
  EXPECT_TRUE(paged_mqa_logits(p, cpu_exec(1)).ok());
}
TEST_F(Mxfp4Fixture, QDtype) {
  p.q.dtype = DType::kF8E4M3;
  EXPECT_EQ(error(), "paged_mqa_logits: q dtype expected u8, got f8_e4m3");
}
TEST_F(Mxfp4Fixture, QPackedLastDim) {
  std::vector<uint8_t> q(4 * 8 * 32);
  p.q = make_tensor(q.data(), DType::kU8, {2, 2, 8, 32});
  EXPECT_EQ(error(), "paged_mqa_logits: q last dim expected 16 (kv_cache head_dim 32 / 2, packed E2M1), got 32");
}
TEST_F(Mxfp4Fixture, QScalesMissing) {
  p.q_scales = TensorView{};
  EXPECT_EQ(error(), "paged_mqa_logits: q_scales is required but was not given");
}
TEST_F(Mxfp4Fixture, QScalesShape) {
  p.q_scales = make_tensor(c.q.scales.data(), DType::kI32, {4, 8});
  EXPECT_EQ(error(), "paged_mqa_logits: q_scales shape expected [2, 2, 8], got [4, 8]");
}
TEST_F(Mxfp4Fixture, PageStrideTooSmall) {
  p.cache.page_stride_bytes = 76;
  EXPECT_EQ(error(), "paged_mqa_logits: kv_cache page_stride 76 B < 4 states x 20 B = 80 B");
}

// ---------------------------------------------------------------- paged_mqa_topk
struct FusedFixture : PagedFixture {
  std::vector<int32_t> idx, slots;
  std::vector<float> vals;
  PagedMqaTopkParams f;
  void SetUp() override {
    PagedFixture::SetUp();
    idx.assign(4 * 8, 0);
    slots.assign(4 * 8, 0);
    vals.assign(4 * 8, 0.0f);
    static_cast<PagedIndexerArgs&>(f) = c.args();
    f.k = 8;
    f.indices = make_tensor(idx.data(), DType::kI32, {4, 8});
    f.values = make_tensor(vals.data(), DType::kF32, {4, 8});
    f.slot_ids = make_tensor(slots.data(), DType::kI32, {4, 8});
  }
  std::string fused_error() {
    const Status s = paged_mqa_topk(f, cpu_exec(1));
    EXPECT_FALSE(s.ok());
    return s.message;
  }
};
TEST_F(FusedFixture, BaseCaseIsValid) {
  EXPECT_TRUE(paged_mqa_topk(f, cpu_exec(1)).ok());
  size_t bytes = 5;
  EXPECT_TRUE(paged_mqa_topk_workspace(f, cpu_exec(1), &bytes).ok());
  EXPECT_EQ(bytes, 0u);
}
TEST_F(FusedFixture, KZero) {
  f.k = 0;
  EXPECT_EQ(fused_error(), "paged_mqa_topk: k expected 1..4096, got 0");
}
TEST_F(FusedFixture, KTooLarge) {
  f.k = 4097;
  EXPECT_EQ(fused_error(), "paged_mqa_topk: k expected 1..4096, got 4097");
}
TEST_F(FusedFixture, IndicesShape) {
  f.indices.shape[1] = 7;
  EXPECT_EQ(fused_error(), "paged_mqa_topk: indices shape expected [4, 8], got [4, 7]");
}
TEST_F(FusedFixture, IndicesMissing) {
  f.indices = TensorView{};
  EXPECT_EQ(fused_error(), "paged_mqa_topk: indices is required but was not given");
}
TEST_F(FusedFixture, ValuesDtype) {
  f.values.dtype = DType::kBF16;
  EXPECT_EQ(fused_error(), "paged_mqa_topk: values dtype expected f32, got bf16");
}
TEST_F(FusedFixture, SlotIdsShape) {
  f.slot_ids.shape[0] = 2;
  EXPECT_EQ(fused_error(), "paged_mqa_topk: slot_ids shape expected [4, 8], got [2, 8]");
}
TEST_F(FusedFixture, ContextExceedsBlockTable) {
  c.context_lens[0] = 40;
  EXPECT_EQ(fused_error(), "paged_mqa_topk: context_lens[0, 0] = 40 exceeds block_table capacity 5 pages x 4 states = 20");
}
TEST_F(FusedFixture, NoLogitsWidthLimit) {
  // Without logits, a context of 20 (> the 16 columns the logits op had) is fine.
  c.context_lens[0] = 20;
  for (int i = 2; i < 5; ++i) c.cache.block_table[i] = 6;  // map request 0's pages 2..4 (6 is a spare)
  EXPECT_TRUE(paged_mqa_topk(f, cpu_exec(1)).ok());
}
TEST_F(FusedFixture, ShapeErrorsNameTheFusedOp) {
  f.cache.head_dim = 64;
  EXPECT_EQ(fused_error(), "paged_mqa_topk: q last dim expected 64 (kv_cache head_dim), got 32");
}

// ---------------------------------------------------------------- topk
struct TopkFixture : ::testing::Test {
  std::vector<float> logits = std::vector<float>(3 * 10, 1.0f);
  std::vector<int32_t> idx = std::vector<int32_t>(3 * 4), slots = std::vector<int32_t>(3 * 4);
  std::vector<int32_t> starts = {0, 2, 5}, ends = {10, 9, 5};
  std::vector<int32_t> bt = {0, 1, 2, 3, 4, 5};  // [2, 3]
  std::vector<int32_t> rr = {1, 0, 1};
  TopkParams p;
  void SetUp() override {
    p.logits = make_tensor(logits.data(), DType::kF32, {3, 10});
    p.starts = make_tensor(starts.data(), DType::kI32, {3});
    p.ends = make_tensor(ends.data(), DType::kI32, {3});
    p.k = 4;
    p.indices = make_tensor(idx.data(), DType::kI32, {3, 4});
  }
  void with_slots() {
    p.block_table = make_tensor(bt.data(), DType::kI32, {2, 3});
    p.states_per_page = 4;
    p.next_n = 2;
    p.slot_ids = make_tensor(slots.data(), DType::kI32, {3, 4});
  }
  std::string error() {
    const Status s = topk(p, cpu_exec(1));
    EXPECT_FALSE(s.ok());
    return s.message;
  }
};
TEST_F(TopkFixture, BaseCasesAreValid) {
  EXPECT_TRUE(topk(p, cpu_exec(1)).ok());
  with_slots();
  EXPECT_TRUE(topk(p, cpu_exec(1)).ok());
}
TEST_F(TopkFixture, LogitsNullData) {
  p.logits.data = nullptr;
  EXPECT_EQ(error(), "topk: logits data pointer is null for shape [3, 10]");
}
TEST_F(TopkFixture, IndicesNullData) {
  p.indices.data = nullptr;
  EXPECT_EQ(error(), "topk: indices data pointer is null for shape [3, 4]");
}
TEST_F(TopkFixture, LogitsMissing) {
  p.logits = TensorView{};
  EXPECT_EQ(error(), "topk: logits is required but was not given");
}
TEST_F(TopkFixture, ValuesShape) {
  std::vector<float> v(3 * 5);
  p.values = make_tensor(v.data(), DType::kF32, {3, 5});
  EXPECT_EQ(error(), "topk: values shape expected [3, 4], got [3, 5]");
}
TEST_F(TopkFixture, WorkspaceQueryOnCpuIsZero) {
  size_t bytes = 99;
  ASSERT_TRUE(topk_workspace(p, cpu_exec(1), &bytes).ok());
  EXPECT_EQ(bytes, 0u);
  EXPECT_EQ(topk_workspace(p, cpu_exec(1), nullptr).message, "topk: bytes (workspace size output) is a null pointer");
}
TEST_F(TopkFixture, LogitsDtype) {
  p.logits.dtype = DType::kF16;
  EXPECT_EQ(error(), "topk: logits dtype expected f32 or bf16, got f16");
}
TEST_F(TopkFixture, LogitsRank) {
  p.logits = make_tensor(logits.data(), DType::kF32, {30});
  EXPECT_EQ(error(), "topk: logits rank expected 2, got 1 (shape [30])");
}
TEST_F(TopkFixture, LogitsLastDimStride) {
  p.logits.strides[1] = 3;
  EXPECT_EQ(error(), "topk: logits last-dimension stride expected 1, got 3");
}
TEST_F(TopkFixture, KZero) {
  p.k = 0;
  EXPECT_EQ(error(), "topk: k expected 1..4096, got 0");
}
TEST_F(TopkFixture, KTooLarge) {
  p.k = 5000;
  EXPECT_EQ(error(), "topk: k expected 1..4096, got 5000");
}
TEST_F(TopkFixture, IndicesShape) {
  p.indices = make_tensor(idx.data(), DType::kI32, {4, 3});
  EXPECT_EQ(error(), "topk: indices shape expected [3, 4], got [4, 3]");
}
TEST_F(TopkFixture, IndicesDtype) {
  p.indices.dtype = DType::kI64;
  EXPECT_EQ(error(), "topk: indices dtype expected i32, got i64");
}
TEST_F(TopkFixture, IndicesOverlappingRows) {
  p.indices.strides[0] = 2;
  EXPECT_EQ(error(), "topk: indices row stride expected >= 4 (the row width; rows must not overlap), got 2");
}
TEST_F(TopkFixture, StartsShape) {
  p.starts.shape[0] = 2;
  EXPECT_EQ(error(), "topk: starts shape expected [3], got [2]");
}
TEST_F(TopkFixture, EndsDtype) {
  p.ends.dtype = DType::kF32;
  EXPECT_EQ(error(), "topk: ends dtype expected i32, got f32");
}
TEST_F(TopkFixture, StartAfterEnd) {
  starts[1] = 9;
  ends[1] = 8;
  EXPECT_EQ(error(), "topk: row 1 bounds [9, 8) expected 0 <= start <= end <= 10");
}
TEST_F(TopkFixture, EndPastWidth) {
  ends[2] = 11;
  EXPECT_EQ(error(), "topk: row 2 bounds [5, 11) expected 0 <= start <= end <= 10");
}
TEST_F(TopkFixture, NegativeStart) {
  starts[0] = -1;
  EXPECT_EQ(error(), "topk: row 0 bounds [-1, 10) expected 0 <= start <= end <= 10");
}
TEST_F(TopkFixture, SlotIdsWithoutBlockTable) {
  p.slot_ids = make_tensor(slots.data(), DType::kI32, {3, 4});
  EXPECT_EQ(error(), "topk: slot_ids needs block_table (the slot-id transform), got none");
}
TEST_F(TopkFixture, BlockTableWithoutSlotIds) {
  with_slots();
  p.slot_ids = TensorView{};
  EXPECT_EQ(error(), "topk: block_table given but the slot_ids output is missing");
}
TEST_F(TopkFixture, StatesPerPageOutOfRange) {
  with_slots();
  p.states_per_page = 0;
  EXPECT_EQ(error(), "topk: states_per_page expected 1..256, got 0");
}
TEST_F(TopkFixture, NextNOutOfRange) {
  with_slots();
  p.next_n = 9;
  EXPECT_EQ(error(), "topk: next_n expected 1..8, got 9");
}
TEST_F(TopkFixture, BlockTableTooFewRows) {
  with_slots();
  p.next_n = 1;
  EXPECT_EQ(error(), "topk: block_table rows expected >= 3 (ceil(rows 3 / next_n 1)), got 2");
}
TEST_F(TopkFixture, RowRequestWithNextN) {
  with_slots();
  p.row_request = make_tensor(rr.data(), DType::kI32, {3});
  EXPECT_EQ(error(), "topk: next_n expected 1 when row_request is given, got 2");
}
TEST_F(TopkFixture, RowRequestOutOfRange) {
  with_slots();
  p.next_n = 1;
  rr[2] = 2;
  p.row_request = make_tensor(rr.data(), DType::kI32, {3});
  EXPECT_EQ(error(), "topk: row_request[2] = 2 out of range [0, 2) (block_table rows)");
}
TEST_F(TopkFixture, RowRequestWithoutSlots) {
  p.row_request = make_tensor(rr.data(), DType::kI32, {3});
  EXPECT_EQ(error(), "topk: row_request is only used with the slot-id transform (block_table, slot_ids), got no block_table");
}
TEST_F(TopkFixture, RowLongerThanBlockTable) {
  with_slots();
  p.states_per_page = 3;  // capacity 3 x 3 = 9 < row 0's 10
  EXPECT_EQ(error(), "topk: row 0 length 10 exceeds block_table capacity 3 pages x 3 states = 9");
}
TEST_F(TopkFixture, NegativeBlockTableEntry) {
  with_slots();
  bt[1] = -1;  // request 0, page 1: read by rows 0 (length 10) and 1 (length 7)
  EXPECT_EQ(error(), "topk: block_table[0, 1] = -1 is negative");
}
TEST_F(TopkFixture, SlotIdsShape) {
  with_slots();
  p.slot_ids.shape[1] = 5;
  EXPECT_EQ(error(), "topk: slot_ids shape expected [3, 4], got [3, 5]");
}

// ---------------------------------------------------------------- mqa_logits
struct MqaFixture : ::testing::Test {
  static constexpr int M = 3, H = 8, D = 64, Nk = 6;
  std::vector<uint8_t> q = std::vector<uint8_t>(M * H * D), k = std::vector<uint8_t>(Nk * D);
  std::vector<float> w = std::vector<float>(M * H, 1.0f), ks_f = std::vector<float>(Nk, 1.0f);
  std::vector<int32_t> ks = {0, 1, 2}, ke = {1, 4, 6};
  std::vector<float> out = std::vector<float>(M * Nk);
  MqaLogitsParams p;
  void SetUp() override {
    p.q = make_tensor(q.data(), DType::kF8E4M3, {M, H, D});
    p.weights = make_tensor(w.data(), DType::kF32, {M, H});
    p.k = make_tensor(k.data(), DType::kF8E4M3, {Nk, D});
    p.k_scales = make_tensor(ks_f.data(), DType::kF32, {Nk});
    p.ks = make_tensor(ks.data(), DType::kI32, {M});
    p.ke = make_tensor(ke.data(), DType::kI32, {M});
    p.logits = make_tensor(out.data(), DType::kF32, {M, Nk});
  }
  std::string error() {
    const Status s = mqa_logits(p, cpu_exec(1));
    EXPECT_FALSE(s.ok());
    return s.message;
  }
};
TEST_F(MqaFixture, BaseCaseIsValid) { EXPECT_TRUE(mqa_logits(p, cpu_exec(1)).ok()); }
TEST_F(MqaFixture, WorkspaceQueryOnCpuIsZero) {
  size_t bytes = 99;
  ASSERT_TRUE(mqa_logits_workspace(p, cpu_exec(1), &bytes).ok());
  EXPECT_EQ(bytes, 0u);
}
TEST_F(MqaFixture, KNullData) {
  p.k.data = nullptr;
  EXPECT_EQ(error(), "mqa_logits: k data pointer is null for shape [6, 64]");
}
TEST_F(MqaFixture, QScalesWithFp8) {
  std::vector<int32_t> qs(M * H);
  p.q_scales = make_tensor(qs.data(), DType::kI32, {M, H});
  EXPECT_EQ(error(), "mqa_logits: q_scales is only used with the mxfp4 format, got it with fp8");
}
TEST_F(MqaFixture, Mxfp4QLastDim) {
  p.format = IndexerFormat::kMxfp4;
  p.q = make_tensor(q.data(), DType::kU8, {M, H, 24});
  EXPECT_EQ(error(), "mqa_logits: q last dim expected 16, 32 or 64 (head_dim 32, 64 or 128 / 2, packed E2M1), got 24");
}
TEST_F(MqaFixture, LogitsBf16AndCompressedAreValid) {
  std::vector<uint16_t> o16(M * 4);
  p.logits = make_tensor(o16.data(), DType::kBF16, {M, 4});
  p.compressed = true;
  EXPECT_TRUE(mqa_logits(p, cpu_exec(1)).ok());
}
TEST_F(MqaFixture, QDtype) {
  p.q.dtype = DType::kBF16;
  EXPECT_EQ(error(), "mqa_logits: q dtype expected f8_e4m3, got bf16");
}
TEST_F(MqaFixture, HeadDimUnsupported) {
  p.q = make_tensor(q.data(), DType::kF8E4M3, {M, H, 48});
  EXPECT_EQ(error(), "mqa_logits: q head_dim (last dim) expected 32, 64 or 128, got 48");
}
TEST_F(MqaFixture, HeadsUnsupported) {
  p.q = make_tensor(q.data(), DType::kF8E4M3, {M, 4, D});
  EXPECT_EQ(error(), "mqa_logits: q heads expected 8, 16, 24, 32, 48 or 64, got 4");
}
TEST_F(MqaFixture, KShape) {
  p.k = make_tensor(k.data(), DType::kF8E4M3, {Nk, 32});
  EXPECT_EQ(error(), "mqa_logits: k shape expected [*, 64], got [6, 32]");
}
TEST_F(MqaFixture, KScalesShape) {
  p.k_scales.shape[0] = 5;
  EXPECT_EQ(error(), "mqa_logits: k_scales shape expected [6], got [5]");
}
TEST_F(MqaFixture, KsDtype) {
  p.ks.dtype = DType::kI64;
  EXPECT_EQ(error(), "mqa_logits: ks dtype expected i32, got i64");
}
TEST_F(MqaFixture, LogitsWidth) {
  p.logits = make_tensor(out.data(), DType::kF32, {M, 5});
  EXPECT_EQ(error(), "mqa_logits: logits shape expected [3, 6], got [3, 5]");
}
TEST_F(MqaFixture, WindowOutOfRange) {
  ke[1] = 7;
  EXPECT_EQ(error(), "mqa_logits: row 1 window [1, 7) expected 0 <= ks <= ke <= 6");
}
TEST_F(MqaFixture, WindowReversed) {
  ks[2] = 5;
  ke[2] = 3;
  EXPECT_EQ(error(), "mqa_logits: row 2 window [5, 3) expected 0 <= ks <= ke <= 6");
}
TEST_F(MqaFixture, CompressedTooNarrow) {
  p.compressed = true;
  p.logits = make_tensor(out.data(), DType::kF32, {M, 3});
  EXPECT_EQ(error(), "mqa_logits: row 2 window length 4 exceeds compressed logits width 3");
}
TEST_F(MqaFixture, Mxfp4KScalesDtype) {
  p.format = IndexerFormat::kMxfp4;
  std::vector<int32_t> qs(M * H);
  p.q = make_tensor(q.data(), DType::kU8, {M, H, D / 2});
  p.q_scales = make_tensor(qs.data(), DType::kI32, {M, H});
  p.k = make_tensor(k.data(), DType::kU8, {Nk, D / 2});
  EXPECT_EQ(error(), "mqa_logits: k_scales dtype expected i32, got f32");
}

}  // namespace
