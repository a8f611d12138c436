// Small helpers for GPU tests: device buffers, CUDA error checks, tensor views on device memory.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "dsattn/ops.h"
#include "dsattn/tensor.h"

#ifndef DSATTN_HAS_SM90A
#define DSATTN_HAS_SM90A 0
#endif

#define DSATTN_TEST_CUDA(expr)                                                          \
  do {                                                                                  \
    cudaError_t _e = (expr);                                                            \
    ASSERT_EQ(_e, cudaSuccess) << #expr << ": " << cudaGetErrorString(_e);              \
  } while (0)

namespace dsattn {
namespace test {

// Owning device buffer (bytes).
class DevBuf {
 public:
  DevBuf() = default;
  explicit DevBuf(size_t bytes) { alloc(bytes); }
  ~DevBuf() { if (ptr_) cudaFree(ptr_); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  DevBuf(DevBuf&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; o.bytes_ = 0; }
  void alloc(size_t bytes) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = bytes;
    if (bytes && cudaMalloc(&ptr_, bytes) != cudaSuccess) ptr_ = nullptr;
  }
  template <typename T>
  void upload(const std::vector<T>& v) {
    if (bytes_ < v.size() * sizeof(T)) alloc(v.size() * sizeof(T));
    if (!v.empty()) cudaMemcpy(ptr_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  template <typename T>
  std::vector<T> download(size_t n) const {
    std::vector<T> v(n);
    if (n) cudaMemcpy(v.data(), ptr_, n * sizeof(T), cudaMemcpyDeviceToHost);
    return v;
  }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// An sm_90 device and a build with sm_90a code: the Hopper (wgmma) kernels, and paged_mqa_topk's
// resident route, exist here.
inline bool hopper() {
  if (!DSATTN_HAS_SM90A || !cuda_available()) return false;
  int dev = 0, major = 0, minor = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  return major == 9 && minor == 0;
}

inline TensorView dev_tensor(const DevBuf& b, DType t, std::initializer_list<int64_t> shape) {
  return make_tensor(b.get(), t, shape, Device::kCuda, 0);
}
inline TensorView dev_tensor_strided(const DevBuf& b, DType t, std::initializer_list<int64_t> shape,
                                     std::initializer_list<int64_t> strides) {
  return make_tensor_strided(b.get(), t, shape, strides, Device::kCuda, 0);
}

// Copies `bytes` host bytes into `d` (reallocated; at least 1 byte so empty inputs still get a
// non-null pointer); every CUDA call is checked.
inline void upload_bytes(DevBuf* d, const void* host, size_t bytes) {
  d->alloc(bytes == 0 ? 1 : bytes);
  ASSERT_NE(d->get(), nullptr) << "cudaMalloc of " << bytes << " bytes failed";
  if (bytes) DSATTN_TEST_CUDA(cudaMemcpy(d->get(), host, bytes, cudaMemcpyHostToDevice));
}

// The same view (shape, strides, dtype) with its data at `dptr` on CUDA device 0.
inline TensorView on_cuda(TensorView t, void* dptr) {
  t.data = dptr;
  t.device = Device::kCuda;
  t.device_id = 0;
  return t;
}

}  // namespace test
}  // namespace dsattn
