// Calls that share a kernel's launch settings: from several host threads at once, on their own
// streams (what a serving engine does when it runs two batches, or two models, side by side on one
// GPU from different threads), and CUDA graphs captured for different shapes, replayed in any order
// (what an engine's graph runner does for each of its batch sizes).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda/common/topk_plan.h"
#include "dsattn/ops.h"
#include "gpu/gpu_test_util.h"

namespace dsattn {
namespace {

// Random rows of distinct-enough floats (one correct top-k up to order) on the host and the
// device, and the device indices [rows, k] the calls write.
struct TopkRows {
  int64_t rows = 0, width = 0;
  int k = 0;
  std::vector<float> host;
  test::DevBuf logits, idx;
  // topk's parameters over the device rows.
  TopkParams params() const {
    TopkParams p;
    p.logits = make_tensor(logits.get(), DType::kF32, {rows, width}, Device::kCuda, 0);
    p.indices = make_tensor(idx.get(), DType::kI32, {rows, k}, Device::kCuda, 0);
    p.k = k;
    return p;
  }
};

void make_rows(std::mt19937* rng, int64_t rows, int64_t width, int k, TopkRows* r) {
  std::uniform_real_distribution<float> u(-10.f, 10.f);
  r->rows = rows;
  r->width = width;
  r->k = k;
  r->host.resize(size_t(rows * width));
  for (float& v : r->host) v = u(*rng);
  r->logits.alloc(r->host.size() * 4);
  r->idx.alloc(size_t(rows) * k * 4);
  ASSERT_EQ(cudaMemcpy(r->logits.get(), r->host.data(), r->host.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
}

// The device indices against the CPU reference's selection on the same keys, as sets per row.
void expect_cpu_topk(const TopkRows& r, const std::string& what) {
  const int64_t rows = r.rows;
  const int k = r.k;
  std::vector<int32_t> got(size_t(rows) * k), want(size_t(rows) * k);
  ASSERT_EQ(cudaMemcpy(got.data(), r.idx.get(), got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  TopkParams p;
  p.logits = make_tensor(const_cast<float*>(r.host.data()), DType::kF32, {rows, r.width}, Device::kCpu, 0);
  p.indices = make_tensor(want.data(), DType::kI32, {rows, k}, Device::kCpu, 0);
  p.k = k;
  Exec cpu;
  cpu.backend = Backend::kCpu;
  ASSERT_TRUE(topk(p, cpu).ok());
  for (int64_t row = 0; row < rows; ++row) {
    std::vector<int32_t> a(got.begin() + row * k, got.begin() + (row + 1) * k);
    std::vector<int32_t> b(want.begin() + row * k, want.begin() + (row + 1) * k);
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    ASSERT_EQ(a, b) << what << ", row " << row;
  }
}

// Two threads run the same top-k kernel with different shared-memory sizes (rows of 16K and 32K
// positions: one CTA per row, its keys in shared memory). A kernel's dynamic shared-memory limit is
// one setting per kernel and device, so a call that set it for its own size and then launched
// could find it lowered by the other thread in between, and its launch refused ("invalid
// argument"). Every call must succeed and return a correct top-k. (On an H200 the launch code
// before raise_dynamic_smem failed this in each of three repeats: launches refused with "invalid
// argument" and "too many resources requested for launch".)
TEST(GpuThreads, TopkShapesOnTwoThreads) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int k = 2048, iters = 400;
  const int64_t rows = 128;
  const int64_t widths[2] = {16384, 32768};
  Exec probe;
  cuda::TopkDeviceLimits lim;
  ASSERT_TRUE(cuda::topk_device_limits(probe, &lim).ok());
  for (int64_t w : widths) {  // the premise: one kernel, two sizes above the 48 KB default
    cuda::TopkPlan plan;
    ASSERT_TRUE(cuda::plan_topk(rows, w, k, lim, &plan).ok());
    ASSERT_TRUE(plan.direct && plan.small_v == 0 && !plan.filter && !plan.sampled && plan.cluster == 0) << w;
    ASSERT_GT(plan.smem_final, size_t(48 * 1024)) << w;
  }

  struct Side {
    TopkRows r;
    cudaStream_t stream = nullptr;
    std::string error;
  };
  Side side[2];
  std::mt19937 rng(5);
  for (int t = 0; t < 2; ++t) {
    make_rows(&rng, rows, widths[t], k, &side[t].r);
    if (::testing::Test::HasFatalFailure()) return;
    ASSERT_EQ(cudaStreamCreateWithFlags(&side[t].stream, cudaStreamNonBlocking), cudaSuccess);
  }
  std::atomic<int> ready{0};
  auto body = [&](int t) {
    Side& s = side[t];
    const TopkParams p = s.r.params();
    Exec ex;
    ex.backend = Backend::kCuda;
    ex.stream = s.stream;
    if (cudaSetDevice(0) != cudaSuccess) {
      s.error = "cudaSetDevice";
      return;
    }
    ready.fetch_add(1);
    while (ready.load() < 2) {
    }
    for (int i = 0; i < iters; ++i) {
      const Status st = topk(p, ex);
      if (!st.ok()) {
        s.error = "call " + std::to_string(i) + ": " + st.message;
        return;
      }
    }
    if (cudaStreamSynchronize(s.stream) != cudaSuccess) s.error = "cudaStreamSynchronize";
  };
  std::thread a(body, 0), b(body, 1);
  a.join();
  b.join();
  for (int t = 0; t < 2; ++t) {
    EXPECT_EQ(side[t].error, "") << "thread " << t << " (rows of " << widths[t] << ")";
    // The last call's result.
    expect_cpu_topk(side[t].r, "thread " + std::to_string(t));
    cudaStreamDestroy(side[t].stream);
  }
}

// Graphs captured for a large plan, then for a smaller plan of the same kernel (rows of 32K, then
// 16K positions), replayed large, small, large: a capture that set the kernel's shared-memory limit
// to its own smaller size must not leave the earlier graph's launch above the limit. Both results
// against the CPU reference. (On an H200 with CUDA 13 this passed with the launch code before
// raise_dynamic_smem too: a graph's kernel node did not fail after a later capture lowered the
// limit. It stays as a guard for drivers that check.)
TEST(GpuThreads, GraphsOfTwoSizesReplayInAnyOrder) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int k = 2048;
  const int64_t rows = 128;
  const int64_t widths[2] = {32768, 16384};
  cudaStream_t st = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
  std::mt19937 rng(9);
  TopkRows r[2];
  cudaGraph_t graph[2] = {nullptr, nullptr};
  cudaGraphExec_t exec[2] = {nullptr, nullptr};
  for (int g = 0; g < 2; ++g) {
    make_rows(&rng, rows, widths[g], k, &r[g]);
    if (::testing::Test::HasFatalFailure()) return;
    const TopkParams p = r[g].params();
    Exec ex;
    ex.backend = Backend::kCuda;
    ex.stream = st;
    ASSERT_TRUE(topk(p, ex).ok());  // warm-up outside the capture
    ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
    ASSERT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal), cudaSuccess);
    const Status s = topk(p, ex);
    ASSERT_EQ(cudaStreamEndCapture(st, &graph[g]), cudaSuccess);
    ASSERT_TRUE(s.ok()) << s.to_string();
    ASSERT_EQ(cudaGraphInstantiate(&exec[g], graph[g], 0), cudaSuccess);
  }
  for (int g : {0, 1, 0}) {
    ASSERT_EQ(cudaMemsetAsync(r[g].idx.get(), 0xff, size_t(rows) * k * 4, st), cudaSuccess);
    EXPECT_EQ(cudaGraphLaunch(exec[g], st), cudaSuccess) << "graph of rows " << widths[g];
    EXPECT_EQ(cudaStreamSynchronize(st), cudaSuccess) << "graph of rows " << widths[g];
  }
  for (int g = 0; g < 2; ++g) {
    expect_cpu_topk(r[g], "graph of rows " + std::to_string(widths[g]));
    cudaGraphExecDestroy(exec[g]);
    cudaGraphDestroy(graph[g]);
  }
  cudaStreamDestroy(st);
}

}  // namespace
}  // namespace dsattn
