// Helpers of the GPU top-k tests: device buffers, a CPU-vs-GPU topk runner, and an independent
// check that an index list is a correct top-k of a row (in range, unique, nothing better left out).
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/indexer_test_util.h"
#include "cuda/common/topk_plan.h"
#include "dsattn/ops.h"

namespace dsattn {
namespace testing_gpu {

// Restores the top-k plan tuning (a process-wide setting) when the scope ends, also when an
// ASSERT leaves the test early.
struct TopkTuningScope {
  cuda::TopkTuning saved = cuda::topk_tuning();
  ~TopkTuningScope() { cuda::topk_tuning() = saved; }
};

// Sets the width from which rows take the threshold-filter plan (any number of rows), for one scope.
struct FilterMinWidth : TopkTuningScope {
  explicit FilterMinWidth(int v) {
    cuda::topk_tuning().filter_min_width = v;
    cuda::topk_tuning().filter_max_rows = 0;
  }
};

#define DSATTN_CUDA_ASSERT(x) ASSERT_EQ((x), cudaSuccess) << #x

// Owning device allocation (freed on scope exit).
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n = 0) : bytes(n) {
    if (n > 0 && cudaMalloc(&ptr, n) != cudaSuccess) ptr = nullptr;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { alloc(0); }
  // Frees the current allocation, then allocates n bytes (ptr stays null when n == 0 or on failure).
  void alloc(size_t n) {
    if (ptr) cudaFree(ptr);
    ptr = nullptr;
    bytes = n;
    if (n > 0 && cudaMalloc(&ptr, n) != cudaSuccess) ptr = nullptr;
  }
  bool upload(const void* src, size_t n) { return cudaMemcpy(ptr, src, n, cudaMemcpyHostToDevice) == cudaSuccess; }
  bool download(void* dst, size_t n) const { return cudaMemcpy(dst, ptr, n, cudaMemcpyDeviceToHost) == cudaSuccess; }
};

// A device copy of a contiguous host tensor, same shape and strides.
struct DevTensor {
  DeviceBuffer buf;
  TensorView view;
};
inline void to_device(const TensorView& h, DevTensor* d) {
  if (!h.defined()) return;
  const size_t bytes = static_cast<size_t>(h.numel()) * dtype_size(h.dtype);
  d->buf.alloc(bytes);
  if (bytes > 0) {
    ASSERT_TRUE(d->buf.upload(h.data, bytes));
  }
  d->view = h;
  d->view.data = d->buf.ptr;
  d->view.device = Device::kCuda;
}

// A paged indexer case's inputs on the device; args point at them (the cache descriptor's other
// fields as on the host).
struct GpuInputs {
  DevTensor q, qs, w, pages, bt, lens, rr;
  PagedIndexerArgs args;
};
inline void upload_case(testutil::PagedCase& pc, GpuInputs* g) {
  PagedIndexerArgs h = pc.args();
  to_device(h.q, &g->q);
  to_device(h.q_scales, &g->qs);
  to_device(h.weights, &g->w);
  to_device(h.cache.pages, &g->pages);
  to_device(h.block_table, &g->bt);
  to_device(h.context_lens, &g->lens);
  to_device(h.row_request, &g->rr);
  g->args = h;
  g->args.q = g->q.view;
  g->args.q_scales = g->qs.view;
  g->args.weights = g->w.view;
  g->args.cache.pages = g->pages.view;
  g->args.block_table = g->bt.view;
  g->args.context_lens = g->lens.view;
  g->args.row_request = g->rr.view;
}

// Ranking used by SPEC §3.3 (larger first, NaN lowest, ties to the smaller index). Written
// independently of the library's CPU reference.
inline bool rank_better(float va, int64_t ia, float vb, int64_t ib) {
  const bool na = std::isnan(va), nb = std::isnan(vb);
  if (na || nb) return na == nb ? ia < ib : nb;
  if (va != vb) return va > vb;
  return ia < ib;
}

// Checks that idx[0..k) is a top-k of row[0..len): count == min(k, len), -1 padding after, every
// index in range and unique, and no unselected element ranks above the worst selected one.
// `tol` > 0 relaxes the last check by that much in value (fused path: scores carry rounding).
inline ::testing::AssertionResult is_topk(const float* row, int64_t len, int k, const int32_t* idx,
                                          float tol = 0.0f) {
  const int64_t take = len < k ? len : k;
  std::vector<char> seen(static_cast<size_t>(len), 0);
  int64_t worst = -1;
  for (int64_t j = 0; j < k; ++j) {
    const int32_t i = idx[j];
    if (j >= take) {
      if (i != -1) return ::testing::AssertionFailure() << "slot " << j << " expected -1 padding, got " << i;
      continue;
    }
    if (i < 0 || i >= len) return ::testing::AssertionFailure() << "slot " << j << " index " << i << " out of [0, " << len << ")";
    if (seen[static_cast<size_t>(i)]) return ::testing::AssertionFailure() << "index " << i << " selected twice";
    seen[static_cast<size_t>(i)] = 1;
    if (worst < 0 || rank_better(row[worst], worst, row[i], i)) worst = i;
  }
  if (take == len) return ::testing::AssertionSuccess();
  for (int64_t i = 0; i < len; ++i) {
    if (seen[static_cast<size_t>(i)]) continue;
    if (tol > 0.0f) {
      if (!std::isnan(row[i]) && !std::isnan(row[worst]) && row[i] > row[worst] + tol) {
        return ::testing::AssertionFailure() << "unselected " << i << " (" << row[i] << ") beats selected " << worst
                                             << " (" << row[worst] << ") by more than " << tol;
      }
      if (!std::isnan(row[i]) && std::isnan(row[worst])) {
        return ::testing::AssertionFailure() << "NaN " << worst << " selected before number " << i;
      }
    } else if (rank_better(row[i], i, row[worst], worst)) {
      return ::testing::AssertionFailure() << "unselected " << i << " (" << row[i] << ") ranks above selected "
                                           << worst << " (" << row[worst] << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

inline bool same_bits_or_both_nan(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

}  // namespace testing_gpu
}  // namespace dsattn
