// Argument rejection of sparse_mla_decode / sparse_mla_prefill: one test per rejection, each checking
// the full message (op, argument, expected, given).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <vector>

#include "dsattn/ops.h"

using namespace dsattn;

namespace {

// A valid decode call: B = 1, Sq = 2, Hq = 16, V4 cache of 2 pages x 2 tokens, topk 4.
class MlaDecodeValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    q_.assign(1 * 2 * 16 * 576, 0);
    pages_.assign(2 * 1728, 0);
    idx_ = {0, 1, 2, 3, 3, 2, 1, 0};
    out_.assign(1 * 2 * 16 * 512, 0);
    lse_.assign(1 * 2 * 16, 0.0f);
    sink_.assign(16, 0.0f);
    lens_ = {4, 4};
    p_.q = make_tensor(q_.data(), DType::kBF16, {1, 2, 16, 512});
    p_.cache = cache(2);
    p_.indices = make_tensor(idx_.data(), DType::kI32, {1, 2, 4});
    p_.sm_scale = 0.0625f;
    p_.out = make_tensor(out_.data(), DType::kBF16, {1, 2, 16, 512});
    p_.lse = make_tensor(lse_.data(), DType::kF32, {1, 2, 16});
    ASSERT_TRUE(sparse_mla_decode(p_, Exec{}).ok());
  }
  LatentCache cache(int P) {
    LatentCache c;
    c.pages = make_tensor(pages_.data(), DType::kU8, {2, 1728});
    c.format = LatentFormat::kV4Fp8;
    c.tokens_per_page = P;
    c.page_stride_bytes = 1728;
    return c;
  }
  std::string run() {
    Status st = sparse_mla_decode(p_, Exec{});
    EXPECT_EQ(st.code, Code::kInvalidArgument);
    return st.message;
  }
  std::vector<uint16_t> q_, out_;
  std::vector<uint8_t> pages_;
  std::vector<int32_t> idx_, lens_;
  std::vector<float> lse_, sink_;
  SparseMlaDecodeParams p_;
};

}  // namespace

TEST_F(MlaDecodeValidation, QMissing) {
  p_.q = TensorView{};
  EXPECT_EQ(run(), "sparse_mla_decode: q is required but was not given");
}

TEST_F(MlaDecodeValidation, QDtype) {
  p_.q.dtype = DType::kF32;
  EXPECT_EQ(run(), "sparse_mla_decode: q dtype expected bf16, got f32");
}

TEST_F(MlaDecodeValidation, QRank) {
  p_.q = make_tensor(q_.data(), DType::kBF16, {2, 16, 512});
  EXPECT_EQ(run(), "sparse_mla_decode: q rank expected 4, got 3 (shape [2, 16, 512])");
}

TEST_F(MlaDecodeValidation, QLastDimNotContiguous) {
  p_.q = make_tensor_strided(q_.data(), DType::kBF16, {1, 2, 16, 512}, {0, 8192, 512, 2});
  EXPECT_EQ(run(), "sparse_mla_decode: q last-dimension stride expected 1, got 2");
}

TEST_F(MlaDecodeValidation, QHeads) {
  p_.q = make_tensor(q_.data(), DType::kBF16, {1, 2, 8, 512});
  EXPECT_EQ(run(), "sparse_mla_decode: q heads (shape[2]) expected 16, 32, 64 or 128, got 8");
}

TEST_F(MlaDecodeValidation, QHeadDimDoesNotMatchCacheFormat) {
  p_.q = make_tensor(q_.data(), DType::kBF16, {1, 2, 16, 576});
  EXPECT_EQ(run(), "sparse_mla_decode: q head dim (shape[3]) expected 512 for a v4_fp8 cache, got 576");
}

TEST_F(MlaDecodeValidation, CacheTokensPerPage) {
  p_.cache.tokens_per_page = 0;
  EXPECT_EQ(run(), "sparse_mla_decode: cache.tokens_per_page expected > 0, got 0");
}

TEST_F(MlaDecodeValidation, CachePageStrideTooSmall) {
  p_.cache.page_stride_bytes = 1168;  // 2 * 584 is not padded to a multiple of 576
  EXPECT_EQ(run(), "sparse_mla_decode: cache.page_stride_bytes expected >= 1728 for 2 v4_fp8 tokens per page, got 1168");
}

TEST_F(MlaDecodeValidation, CachePagesDtype) {
  p_.cache.pages.dtype = DType::kI32;
  EXPECT_EQ(run(), "sparse_mla_decode: cache.pages dtype expected u8, got i32");
}

TEST_F(MlaDecodeValidation, CachePagesTooNarrow) {
  p_.cache.pages = make_tensor_strided(pages_.data(), DType::kU8, {2, 1000}, {1728, 1});
  EXPECT_EQ(run(), "sparse_mla_decode: cache.pages shape[1] expected >= 1168 bytes, got 1000");
}

TEST_F(MlaDecodeValidation, CachePagesStrideDisagreesWithPageStride) {
  p_.cache.pages = make_tensor_strided(pages_.data(), DType::kU8, {2, 1728}, {1729, 1});
  EXPECT_EQ(run(), "sparse_mla_decode: cache.pages stride[0] expected 1728 (cache.page_stride_bytes), got 1729");
}

TEST_F(MlaDecodeValidation, IndicesDtype) {
  p_.indices.dtype = DType::kI64;
  EXPECT_EQ(run(), "sparse_mla_decode: indices dtype expected i32, got i64");
}

TEST_F(MlaDecodeValidation, IndicesShape) {
  p_.indices = make_tensor(idx_.data(), DType::kI32, {1, 1, 8});
  EXPECT_EQ(run(), "sparse_mla_decode: indices shape expected [1, 2, *], got [1, 1, 8]");
}

TEST_F(MlaDecodeValidation, TopkLengthShape) {
  p_.topk_length = make_tensor(lens_.data(), DType::kI32, {2});
  EXPECT_EQ(run(), "sparse_mla_decode: topk_length shape expected [1], got [2]");
}

TEST_F(MlaDecodeValidation, TopkLengthValue) {
  lens_[0] = 5;
  p_.topk_length = make_tensor(lens_.data(), DType::kI32, {1});
  EXPECT_EQ(run(), "sparse_mla_decode: topk_length[0] expected in [0, 4], got 5");
}

TEST_F(MlaDecodeValidation, ExtraCacheFormat) {
  p_.extra_cache = cache(1);
  p_.extra_cache.format = LatentFormat::kV32Fp8;
  p_.extra_cache.page_stride_bytes = 1728;
  p_.extra_indices = p_.indices;
  EXPECT_EQ(run(), "sparse_mla_decode: extra_cache.format expected v4_fp8 (the format of cache), got v32_fp8");
}

TEST_F(MlaDecodeValidation, ExtraCacheInvalid) {
  p_.extra_cache = cache(1);
  p_.extra_cache.page_stride_bytes = 500;
  p_.extra_indices = p_.indices;
  EXPECT_EQ(run(), "sparse_mla_decode: extra_cache.page_stride_bytes expected >= 1152 for 1 v4_fp8 tokens per page, got 500");
}

TEST_F(MlaDecodeValidation, ExtraIndicesShape) {
  p_.extra_cache = cache(1);
  p_.extra_indices = make_tensor(idx_.data(), DType::kI32, {2, 2, 2});
  EXPECT_EQ(run(), "sparse_mla_decode: extra_indices shape expected [1, 2, *], got [2, 2, 2]");
}

TEST_F(MlaDecodeValidation, ExtraTopkLengthWithoutExtraIndices) {
  p_.extra_topk_length = make_tensor(lens_.data(), DType::kI32, {1});
  EXPECT_EQ(run(), "sparse_mla_decode: extra_topk_length expected absent without extra_indices, got shape [1]");
}

TEST_F(MlaDecodeValidation, ExtraCacheWithoutExtraIndices) {
  p_.extra_cache = cache(1);
  EXPECT_EQ(run(), "sparse_mla_decode: extra_cache expected absent without extra_indices, got pages of shape [2, 1728]");
}

TEST_F(MlaDecodeValidation, ExtraTopkLengthValue) {
  p_.extra_cache = cache(1);
  p_.extra_indices = make_tensor(idx_.data(), DType::kI32, {1, 2, 2});
  lens_[0] = -1;
  p_.extra_topk_length = make_tensor(lens_.data(), DType::kI32, {1});
  EXPECT_EQ(run(), "sparse_mla_decode: extra_topk_length[0] expected in [0, 2], got -1");
}

TEST_F(MlaDecodeValidation, SinkShape) {
  p_.attn_sink = make_tensor(sink_.data(), DType::kF32, {8});
  EXPECT_EQ(run(), "sparse_mla_decode: attn_sink shape expected [16], got [8]");
}

TEST_F(MlaDecodeValidation, SinkDtype) {
  p_.attn_sink = make_tensor(sink_.data(), DType::kBF16, {16});
  EXPECT_EQ(run(), "sparse_mla_decode: attn_sink dtype expected f32, got bf16");
}

TEST_F(MlaDecodeValidation, SmScaleZero) {
  p_.sm_scale = 0.0f;
  EXPECT_EQ(run(), "sparse_mla_decode: sm_scale expected a finite value > 0, got 0");
}

TEST_F(MlaDecodeValidation, SmScaleNaN) {
  p_.sm_scale = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(run(), "sparse_mla_decode: sm_scale expected a finite value > 0, got nan");
}

TEST_F(MlaDecodeValidation, OutShape) {
  p_.out = make_tensor(out_.data(), DType::kBF16, {1, 2, 16, 448});
  EXPECT_EQ(run(), "sparse_mla_decode: out shape expected [1, 2, 16, 512], got [1, 2, 16, 448]");
}

TEST_F(MlaDecodeValidation, OutDtype) {
  p_.out.dtype = DType::kF32;
  EXPECT_EQ(run(), "sparse_mla_decode: out dtype expected bf16, got f32");
}

TEST_F(MlaDecodeValidation, LseMissing) {
  p_.lse = TensorView{};
  EXPECT_EQ(run(), "sparse_mla_decode: lse is required but was not given");
}

TEST_F(MlaDecodeValidation, LseShape) {
  p_.lse = make_tensor(lse_.data(), DType::kF32, {1, 16, 2});
  EXPECT_EQ(run(), "sparse_mla_decode: lse shape expected [1, 2, 16], got [1, 16, 2]");
}

TEST_F(MlaDecodeValidation, MixedDevices) {
  p_.out.device = Device::kCuda;
  EXPECT_EQ(run(), "sparse_mla_decode: all tensors must be on one device: found cpu:0 and cuda:0");
}

TEST_F(MlaDecodeValidation, CudaBackendWithHostTensors) {
  Exec ex;
  ex.backend = Backend::kCuda;
  Status st = sparse_mla_decode(p_, ex);
  EXPECT_EQ(st.message, "sparse_mla_decode: backend cuda expected CUDA tensors, got host tensors");
}

TEST_F(MlaDecodeValidation, WorkspaceIsZeroAndValidates) {
  size_t bytes = 123;
  ASSERT_TRUE(sparse_mla_decode_workspace(p_, Exec{}, &bytes).ok());
  EXPECT_EQ(bytes, 0u);
  EXPECT_EQ(sparse_mla_decode_workspace(p_, Exec{}, nullptr).message,
            "sparse_mla_decode_workspace: bytes is a null pointer");
  p_.sm_scale = -1.0f;
  EXPECT_EQ(sparse_mla_decode_workspace(p_, Exec{}, &bytes).message,
            "sparse_mla_decode: sm_scale expected a finite value > 0, got -1");
}

// The CUDA kernel knobs (DSATTN_MLA_KERNEL=mma, DSATTN_MLA_SPLITS) do not reach the CPU backend:
// no workspace asked for, and the call runs.
TEST_F(MlaDecodeValidation, CudaKernelKnobsLeaveTheCpuBackendAlone) {
  setenv("DSATTN_MLA_KERNEL", "mma", 1);
  setenv("DSATTN_MLA_SPLITS", "4", 1);
  size_t bytes = 123;
  const Status ws = sparse_mla_decode_workspace(p_, Exec{}, &bytes);
  const Status run = sparse_mla_decode(p_, Exec{});
  unsetenv("DSATTN_MLA_KERNEL");
  unsetenv("DSATTN_MLA_SPLITS");
  ASSERT_TRUE(ws.ok()) << ws.to_string();
  EXPECT_EQ(bytes, 0u);
  EXPECT_TRUE(run.ok()) << run.to_string();
}

// ---------------------------------------------------------------- prefill
namespace {

class MlaPrefillValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    q_.assign(3 * 16 * 576, 0);
    kv_.assign(10 * 576, 0);
    idx_.assign(3 * 4, 0);
    out_.assign(3 * 16 * 512, 0);
    lse_.assign(3 * 16, 0.0f);
    p_.q = make_tensor(q_.data(), DType::kBF16, {3, 16, 576});
    p_.kv = make_tensor(kv_.data(), DType::kBF16, {10, 576});
    p_.indices = make_tensor(idx_.data(), DType::kI32, {3, 4});
    p_.sm_scale = 0.05f;
    p_.out = make_tensor(out_.data(), DType::kBF16, {3, 16, 512});
    p_.lse = make_tensor(lse_.data(), DType::kF32, {3, 16});
    ASSERT_TRUE(sparse_mla_prefill(p_, Exec{}).ok());
  }
  std::string run() {
    Status st = sparse_mla_prefill(p_, Exec{});
    EXPECT_EQ(st.code, Code::kInvalidArgument);
    return st.message;
  }
  std::vector<uint16_t> q_, kv_, out_;
  std::vector<int32_t> idx_;
  std::vector<float> lse_;
  SparseMlaPrefillParams p_;
};

}  // namespace

TEST_F(MlaPrefillValidation, QRank) {
  p_.q = make_tensor(q_.data(), DType::kBF16, {1, 3, 16, 576});
  EXPECT_EQ(run(), "sparse_mla_prefill: q rank expected 3, got 4 (shape [1, 3, 16, 576])");
}

TEST_F(MlaPrefillValidation, QHeads) {
  p_.q = make_tensor(q_.data(), DType::kBF16, {3, 24, 576});
  EXPECT_EQ(run(), "sparse_mla_prefill: q heads (shape[1]) expected 16, 32, 64 or 128, got 24");
}

TEST_F(MlaPrefillValidation, QHeadDim) {
  p_.q = make_tensor(q_.data(), DType::kBF16, {3, 16, 448});
  EXPECT_EQ(run(), "sparse_mla_prefill: q head dim (shape[2]) expected 512 or 576, got 448");
}

TEST_F(MlaPrefillValidation, KvShape) {
  p_.kv = make_tensor(kv_.data(), DType::kBF16, {10, 512});
  EXPECT_EQ(run(), "sparse_mla_prefill: kv shape expected [*, 576], got [10, 512]");
}

TEST_F(MlaPrefillValidation, KvDtype) {
  p_.kv.dtype = DType::kF8E4M3;
  EXPECT_EQ(run(), "sparse_mla_prefill: kv dtype expected bf16, got f8_e4m3");
}

TEST_F(MlaPrefillValidation, IndicesShape) {
  p_.indices = make_tensor(idx_.data(), DType::kI32, {4, 3});
  EXPECT_EQ(run(), "sparse_mla_prefill: indices shape expected [3, *], got [4, 3]");
}

TEST_F(MlaPrefillValidation, TopkLengthValue) {
  std::vector<int32_t> tl = {4, 5, 0};
  p_.topk_length = make_tensor(tl.data(), DType::kI32, {3});
  EXPECT_EQ(run(), "sparse_mla_prefill: topk_length[1] expected in [0, 4], got 5");
}

TEST_F(MlaPrefillValidation, DvTooLarge) {
  p_.d_v = 600;
  EXPECT_EQ(run(), "sparse_mla_prefill: d_v expected in [1, 576], got 600");
}

TEST_F(MlaPrefillValidation, OutShapeFollowsDv) {
  p_.d_v = 256;
  EXPECT_EQ(run(), "sparse_mla_prefill: out shape expected [3, 16, 256], got [3, 16, 512]");
}

TEST_F(MlaPrefillValidation, SmScaleInfinite) {
  p_.sm_scale = std::numeric_limits<float>::infinity();
  EXPECT_EQ(run(), "sparse_mla_prefill: sm_scale expected a finite value > 0, got inf");
}
