// Smoke test of the GPU test harness (skips on machines without a CUDA device), and the check
// that a call's tensors are on the current device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/cuda_arch.h"
#include "cuda/cuda_ops.h"
#include "dsattn/ops.h"
#include "gpu/gpu_test_util.h"

TEST(GpuEnv, DeviceVisible) {
  if (!dsattn::cuda_available()) GTEST_SKIP() << "no CUDA device";
  EXPECT_GT(dsattn::cuda_num_sms(), 0);
}

// The build has code for the device the GPU tests run on, and says so the way resolve_backend
// asks (its refusal for a device without code is covered by the CPU tests of the rules).
TEST(GpuEnv, BuildHasCodeForThisDevice) {
  if (!dsattn::cuda_available()) GTEST_SKIP() << "no CUDA device";
  int dev = -1, major = 0, minor = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  EXPECT_TRUE(dsattn::cuda::device_has_code(dev, &major, &minor));
  EXPECT_GE(major, 8);
  EXPECT_TRUE(dsattn::detail::arch_list_runs_on(dsattn::cuda_architectures(), major, minor))
      << "built for " << dsattn::cuda_architectures() << ", device " << major << "." << minor;
}

// The planners' cached compute capability (device_capability) is the driver's, asked twice (the
// second answer comes from the table).
TEST(GpuEnv, DeviceCapabilityIsTheDriversAndCached) {
  if (!dsattn::cuda_available()) GTEST_SKIP() << "no CUDA device";
  int dev = -1, want_major = 0, want_minor = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&want_major, cudaDevAttrComputeCapabilityMajor, dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&want_minor, cudaDevAttrComputeCapabilityMinor, dev), cudaSuccess);
  for (int round = 0; round < 2; ++round) {
    int major = -1, minor = -1;
    const dsattn::Status st = dsattn::cuda::device_capability("test", &major, &minor);
    ASSERT_TRUE(st.ok()) << st.message;
    EXPECT_EQ(major, want_major) << "round " << round;
    EXPECT_EQ(minor, want_minor) << "round " << round;
  }
}

// Tensors of another device than the current one are refused, naming both, instead of launching
// on the current device with the other device's pointers. One device suffices: the views below
// say cuda:1 about memory of cuda:0, and the check refuses the call before anything reads it.
TEST(GpuEnv, TensorsOfAnotherDeviceAreRefused) {
  if (!dsattn::cuda_available()) GTEST_SKIP() << "no CUDA device";
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  dsattn::test::DevBuf logits(2 * 64 * 4), idx(2 * 4 * 4);
  dsattn::TopkParams p;
  p.logits = dsattn::make_tensor(logits.get(), dsattn::DType::kF32, {2, 64}, dsattn::Device::kCuda, 1);
  p.indices = dsattn::make_tensor(idx.get(), dsattn::DType::kI32, {2, 4}, dsattn::Device::kCuda, 1);
  p.k = 4;
  dsattn::Exec ex;
  size_t bytes = 0;
  for (dsattn::Backend b : {dsattn::Backend::kAuto, dsattn::Backend::kCuda}) {
    ex.backend = b;
    const dsattn::Status s = dsattn::topk_workspace(p, ex, &bytes);
    EXPECT_EQ(s.code, dsattn::Code::kInvalidArgument);
    EXPECT_NE(s.message.find("topk: tensors are on cuda:1 but the current CUDA device is cuda:0"),
              std::string::npos)
        << s.message;
    EXPECT_EQ(dsattn::topk(p, ex).code, dsattn::Code::kInvalidArgument);
  }
}

// A workspace said to live elsewhere than the current device (host memory, another GPU) is
// refused before any launch, naming both, and so is a misaligned one; said to be on the current
// device (or not said) it runs.
TEST(GpuEnv, WorkspaceElsewhereIsRefused) {
  if (!dsattn::cuda_available()) GTEST_SKIP() << "no CUDA device";
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const int64_t R = 1, W = 1 << 20, k = 2048;  // a single long row: the top-k needs a workspace
  dsattn::test::DevBuf logits(R * W * 4), idx(R * k * 4);
  ASSERT_EQ(cudaMemset(logits.get(), 0, R * W * 4), cudaSuccess);
  dsattn::TopkParams p;
  p.logits = dsattn::make_tensor(logits.get(), dsattn::DType::kF32, {R, W}, dsattn::Device::kCuda, 0);
  p.indices = dsattn::make_tensor(idx.get(), dsattn::DType::kI32, {R, k}, dsattn::Device::kCuda, 0);
  p.k = k;
  dsattn::Exec ex;
  size_t bytes = 0;
  ASSERT_TRUE(dsattn::topk_workspace(p, ex, &bytes).ok());
  ASSERT_GT(bytes, 0u);
  std::vector<uint8_t> host(bytes);
  ex.workspace = host.data();
  ex.workspace_bytes = bytes;
  ex.workspace_device = dsattn::kWorkspaceDeviceHost;
  dsattn::Status s = dsattn::topk(p, ex);
  EXPECT_EQ(s.code, dsattn::Code::kInvalidArgument);
  EXPECT_NE(s.message.find("topk: workspace expected memory of the current device cuda:0, got host memory"),
            std::string::npos)
      << s.message;
  dsattn::test::DevBuf ws(bytes);
  ex.workspace = ws.get();
  ex.workspace_device = 3;
  s = dsattn::topk(p, ex);
  EXPECT_EQ(s.code, dsattn::Code::kInvalidArgument);
  EXPECT_NE(s.message.find("got memory of cuda:3"), std::string::npos) << s.message;
  dsattn::test::DevBuf wider(bytes + 16);
  ex.workspace = static_cast<uint8_t*>(wider.get()) + 4;  // the current device's memory, misaligned
  ex.workspace_device = 0;
  s = dsattn::topk(p, ex);
  EXPECT_EQ(s.code, dsattn::Code::kInvalidArgument);
  EXPECT_NE(s.message.find("topk: workspace expected 16-byte aligned"), std::string::npos) << s.message;
  ex.workspace = ws.get();
  for (int where : {0, dsattn::kWorkspaceDeviceUnknown}) {
    ex.workspace_device = where;
    EXPECT_TRUE(dsattn::topk(p, ex).ok()) << where;
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// With their device current, the same call on a second device's tensors runs. Needs two devices.
TEST(GpuEnv, CallRunsOnTheTensorsDevice) {
  int n = 0;
  if (!dsattn::cuda_available() || cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
    GTEST_SKIP() << "needs two CUDA devices";
  }
  const int R = 2, W = 64, k = 4;
  std::vector<float> h(R * W);
  for (int i = 0; i < R * W; ++i) h[i] = static_cast<float>((i * 37) % W);  // each row a permutation of 0..63
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  void* logits = nullptr;
  void* idx = nullptr;
  ASSERT_EQ(cudaMalloc(&logits, h.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&idx, R * k * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(logits, h.data(), h.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  dsattn::TopkParams p;
  p.logits = dsattn::make_tensor(logits, dsattn::DType::kF32, {R, W}, dsattn::Device::kCuda, 1);
  p.indices = dsattn::make_tensor(idx, dsattn::DType::kI32, {R, k}, dsattn::Device::kCuda, 1);
  p.k = k;
  p.sorted = true;
  dsattn::Exec ex;
  ex.backend = dsattn::Backend::kCuda;
  size_t bytes = 0;
  ASSERT_TRUE(dsattn::topk_workspace(p, ex, &bytes).ok());
  void* ws = nullptr;
  if (bytes > 0) {
    ASSERT_EQ(cudaMalloc(&ws, bytes), cudaSuccess);
  }
  ex.workspace = ws;
  ex.workspace_bytes = bytes;
  const dsattn::Status run = dsattn::topk(p, ex);
  EXPECT_TRUE(run.ok()) << run.message;
  std::vector<int32_t> got(R * k);
  ASSERT_EQ(cudaMemcpy(got.data(), idx, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < k; ++j) {  // the k largest values W-1, W-2, ... at the positions holding them
      EXPECT_EQ(h[r * W + got[r * k + j]], static_cast<float>(W - 1 - j)) << "row " << r << " rank " << j;
    }
  }
  cudaFree(ws);
  cudaFree(idx);
  cudaFree(logits);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}
