#include "demo_buffers.h"

#include <cstring>
#include <utility>

#if DSATTN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace dsattn {
namespace cli {

namespace {

#if DSATTN_WITH_CUDA
Status cuda_status(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status(Code::kCudaError, "dsattn demo: " + what + ": " + cudaGetErrorString(e));
}
#endif

Status no_cuda(const char* what) {
  return Status(Code::kInternal, std::string("dsattn demo: ") + what + " needs a CUDA build");
}

}  // namespace

Buf::~Buf() {
#if DSATTN_WITH_CUDA
  if (dev_) cudaFree(dev_);  // nothing useful to do with an error while tearing down
#endif
}

Status Buf::init(DType dtype, std::vector<int64_t> shape, bool device) {
  dtype_ = dtype;
  shape_ = std::move(shape);
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  host_.assign(static_cast<size_t>(n) * dtype_size(dtype), 0);
  if (!device) return Status::Ok();
#if DSATTN_WITH_CUDA
  const size_t bytes = host_.empty() ? 1 : host_.size();
  DSATTN_RETURN_IF_ERROR(cuda_status(cudaMalloc(&dev_, bytes), "cudaMalloc(" + std::to_string(bytes) + " B)"));
  return cuda_status(cudaMemset(dev_, 0, bytes), "cudaMemset");
#else
  return no_cuda("a device buffer");
#endif
}

TensorView Buf::view_as(bool dev, const std::vector<int64_t>& shape) const {
  TensorView t;
  t.data = dev ? dev_ : const_cast<uint8_t*>(host_.data());
  t.dtype = dtype_;
  t.device = dev ? Device::kCuda : Device::kCpu;
  t.ndim = static_cast<int>(shape.size());
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = stride;
    stride *= shape[i];
  }
  return t;
}

Status Buf::upload() {
  if (!dev_ || host_.empty()) return Status::Ok();
#if DSATTN_WITH_CUDA
  return cuda_status(cudaMemcpy(dev_, host_.data(), host_.size(), cudaMemcpyHostToDevice),
                     "cudaMemcpy host to device");
#else
  return no_cuda("upload");
#endif
}

Status Buf::download() {
  if (!dev_ || host_.empty()) return Status::Ok();
#if DSATTN_WITH_CUDA
  return cuda_status(cudaMemcpy(host_.data(), dev_, host_.size(), cudaMemcpyDeviceToHost),
                     "cudaMemcpy device to host");
#else
  return no_cuda("download");
#endif
}

Status Buf::download_to(std::vector<uint8_t>* out) const {
  out->assign(host_.size(), 0);
  if (!dev_ || host_.empty()) return no_cuda("download_to");
#if DSATTN_WITH_CUDA
  return cuda_status(cudaMemcpy(out->data(), dev_, out->size(), cudaMemcpyDeviceToHost),
                     "cudaMemcpy device to host");
#else
  return no_cuda("download_to");
#endif
}

Scratch::~Scratch() {
#if DSATTN_WITH_CUDA
  if (dev_) cudaFree(dev_);
#endif
}

Status Scratch::provide(size_t bytes, Exec* ex) {
  if (ex->backend != Backend::kCuda) {
    if (host_.size() < bytes) host_.resize(bytes);
    ex->workspace = host_.empty() ? nullptr : host_.data();
    ex->workspace_bytes = host_.size();
    return Status::Ok();
  }
#if DSATTN_WITH_CUDA
  if (dev_bytes_ < bytes) {
    if (dev_) DSATTN_RETURN_IF_ERROR(cuda_status(cudaFree(dev_), "cudaFree"));
    dev_ = nullptr;
    dev_bytes_ = 0;
    DSATTN_RETURN_IF_ERROR(cuda_status(cudaMalloc(&dev_, bytes), "cudaMalloc(" + std::to_string(bytes) + " B workspace)"));
    dev_bytes_ = bytes;
  }
  ex->workspace = dev_;
  ex->workspace_bytes = dev_bytes_;
  return Status::Ok();
#else
  return no_cuda("a device workspace");
#endif
}

Status device_sync() {
#if DSATTN_WITH_CUDA
  return cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#else
  return Status::Ok();
#endif
}

std::string device_description() {
#if DSATTN_WITH_CUDA
  int dev = 0;
  cudaDeviceProp prop;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls report their own
    return "no CUDA device visible";
  }
  std::string d = std::string(prop.name) + ", " + std::to_string(prop.multiProcessorCount) + " SMs";
  // Fewer SMs for this process's default stream (a green context current, or an MPS SM limit):
  // the ops size their grids by that share.
  const int share = cuda_stream_num_sms(nullptr);
  if (share > 0 && share < prop.multiProcessorCount) d += " (" + std::to_string(share) + " usable here)";
  return d + ", sm_" + std::to_string(prop.major * 10 + prop.minor);
#else
  return "CPU-only build (no CUDA)";
#endif
}

}  // namespace cli
}  // namespace dsattn
