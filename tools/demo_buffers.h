// Buffers of the demo: a host array with an optional CUDA mirror, and scratch workspaces.
// Every CUDA call's return code is checked and turned into a Status.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "dsattn/ops.h"
#include "dsattn/status.h"
#include "dsattn/tensor.h"

namespace dsattn {
namespace cli {

class Buf {
 public:
  Buf() = default;
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  ~Buf();

  // Zero-filled host array; with `device`, also a zero-filled CUDA copy.
  Status init(DType dtype, std::vector<int64_t> shape, bool device);
  // Contiguous view of the host (dev = false) or CUDA copy; `shape` reshapes (same or fewer
  // elements, taken from the start).
  TensorView view(bool dev) const { return view_as(dev, shape_); }
  TensorView view_as(bool dev, const std::vector<int64_t>& shape) const;
  template <typename T>
  T* h() { return reinterpret_cast<T*>(host_.data()); }
  template <typename T>
  const T* h() const { return reinterpret_cast<const T*>(host_.data()); }
  size_t bytes() const { return host_.size(); }
  int64_t dim(int d) const { return shape_[d]; }
  bool on_device() const { return dev_ != nullptr; }

  Status upload();    // host -> CUDA copy (no-op without one)
  Status download();  // CUDA copy -> host (no-op without one)
  Status download_to(std::vector<uint8_t>* out) const;  // CUDA copy -> *out (host copy untouched)

 private:
  DType dtype_ = DType::kU8;
  std::vector<int64_t> shape_;
  std::vector<uint8_t> host_;
  void* dev_ = nullptr;
};

// Grow-only scratch memory for Exec::workspace, one on the host and one on the device.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch();
  // Points ex->workspace at >= `bytes` of memory on the side of ex->backend.
  Status provide(size_t bytes, Exec* ex);

 private:
  std::vector<uint8_t> host_;
  void* dev_ = nullptr;
  size_t dev_bytes_ = 0;
};

Status device_sync();              // cudaDeviceSynchronize (ok without CUDA)
std::string device_description();  // "NVIDIA H200, 132 SMs, sm_90" or why there is none

}  // namespace cli
}  // namespace dsattn
