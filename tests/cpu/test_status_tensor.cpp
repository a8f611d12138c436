#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "api/validate.h"
#include "dsattn/dsattn.h"

using namespace dsattn;

TEST(Tensor, MakeTensorIsRowMajor) {
  float buf[24];
  TensorView t = make_tensor(buf, DType::kF32, {2, 3, 4});
  EXPECT_EQ(t.ndim, 3);
  EXPECT_EQ(t.strides[0], 12);
  EXPECT_EQ(t.strides[1], 4);
  EXPECT_EQ(t.strides[2], 1);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(shape_str(t), "[2, 3, 4]");
  TensorView s = make_tensor_strided(buf, DType::kF32, {2, 3}, {8, 1});
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_TRUE(s.last_dim_contiguous());
}

TEST(Tensor, DtypeSizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF8E4M3), 1u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  EXPECT_STREQ(dtype_name(DType::kF8E4M3), "f8_e4m3");
}

TEST(Validate, MessagesNameOpArgExpectedAndGiven) {
  float buf[4];
  TensorView t = make_tensor(buf, DType::kF32, {2, 2});
  Status s = detail::check_tensor("paged_mqa_logits", "q", t, DType::kF8E4M3, {-1, 2});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code, Code::kInvalidArgument);
  EXPECT_EQ(s.message, "paged_mqa_logits: q dtype expected f8_e4m3, got f32");
  s = detail::check_tensor("topk", "logits", t, DType::kF32, {2, 3});
  EXPECT_EQ(s.message, "topk: logits shape expected [2, 3], got [2, 2]");
  s = detail::check_tensor("topk", "logits", TensorView{}, DType::kF32, {2, 3});
  EXPECT_EQ(s.message, "topk: logits is required but was not given");
  TensorView null_data = make_tensor(nullptr, DType::kF32, {2, 2});
  s = detail::check_tensor("topk", "logits", null_data, DType::kF32, {2, 2});
  EXPECT_EQ(s.message, "topk: logits data pointer is null for shape [2, 2]");
  // A 0-d tensor (data, no dimensions) was given: not "missing".
  TensorView scalar = make_tensor(buf, DType::kF32, {});
  s = detail::check_tensor("topk", "logits", scalar, DType::kF32, {2, 2});
  EXPECT_EQ(s.message, "topk: logits rank expected >= 1, got a 0-d tensor (a scalar)");
}

TEST(Validate, BackendResolution) {
  float buf[4];
  TensorView h = make_tensor(buf, DType::kF32, {4});
  TensorView d = make_tensor(buf, DType::kF32, {4}, Device::kCuda, 0);
  Backend b;
  Exec ex;
  ASSERT_TRUE(detail::resolve_backend("op", ex, {&h}, &b).ok());
  EXPECT_EQ(b, Backend::kCpu);
  Status s = detail::resolve_backend("op", ex, {&h, &d}, &b);
  EXPECT_EQ(s.message, "op: all tensors must be on one device: found cpu:0 and cuda:0");
  ex.backend = Backend::kCpu;
  s = detail::resolve_backend("op", ex, {&d}, &b);
  EXPECT_EQ(s.message, "op: backend cpu expected host tensors, got tensors on cuda:0");
}

// The workspace checks every CUDA op makes before it plans a launch (detail::check_workspace):
// size, alignment, and where the caller says it lives. Host code; on a machine without a GPU the
// "where" check has no current device to compare with and leaves it to the call.
TEST(Validate, WorkspaceChecks) {
  alignas(256) static uint8_t buf[1024];
  Exec ex;
  EXPECT_TRUE(detail::check_workspace("topk", ex, 0).ok());  // none needed: anything goes
  Status s = detail::check_workspace("topk", ex, 512);
  EXPECT_EQ(s.code, Code::kInvalidArgument);
  EXPECT_EQ(s.message, "topk: workspace expected >= 512 bytes, got 0 bytes (null pointer)");
  ex.workspace = buf;
  ex.workspace_bytes = 256;
  EXPECT_EQ(detail::check_workspace("topk", ex, 512).message, "topk: workspace expected >= 512 bytes, got 256 bytes");
  ex.workspace_bytes = 1000;
  EXPECT_TRUE(detail::check_workspace("topk", ex, 512).ok());
  for (int off : {4, 8, 12}) {
    ex.workspace = buf + off;
    s = detail::check_workspace("paged_mqa_topk", ex, 512);
    EXPECT_EQ(s.code, Code::kInvalidArgument);
    EXPECT_NE(s.message.find("paged_mqa_topk: workspace expected 16-byte aligned, got address 0x"), std::string::npos)
        << s.message;
  }
  ex.workspace = buf + 16;
  EXPECT_TRUE(detail::check_workspace("topk", ex, 512).ok());
  if (!cuda_available()) {
    ex.workspace_device = kWorkspaceDeviceHost;
    EXPECT_TRUE(detail::check_workspace("topk", ex, 512).ok());
  }
}

TEST(Status, ToStringAndCheck) {
  Status s(Code::kInvalidArgument, "x: bad");
  EXPECT_EQ(s.to_string(), "invalid argument: x: bad");
  EXPECT_THROW(check(s), Error);
  EXPECT_NO_THROW(check(Status::Ok()));
}
