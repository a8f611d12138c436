// A stream on a green context (CUDA 12.4+ driver API): kernels launched on it run on a subset of
// the device's SMs, as in a serving engine that partitions the GPU. Host-only and header-only,
// for the GPU tests (GpuFusedTopk.GreenContextSmShare) and the benchmarks (`--sms N`, which make
// it current for the whole run); the ops themselves only ask which SMs a stream has
// (cuda::sm_share / stream_sms, runtime.cu). The driver
// functions come through the runtime's entry points (driver_entry.h), so nothing links libcuda.
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "cuda/common/driver_entry.h"

namespace dsattn {
namespace cuda {

class GreenContext {
 public:
  GreenContext() = default;
  GreenContext(const GreenContext&) = delete;
  GreenContext& operator=(const GreenContext&) = delete;
  ~GreenContext() {
    if (stream_ != nullptr && destroy_stream_ != nullptr) destroy_stream_(stream_);
    if (ctx_ != nullptr && destroy_ctx_ != nullptr) destroy_ctx_(ctx_);
  }

  // Makes a green context of at least `min_sms` SMs of the current device (the driver rounds up
  // to its partition granularity) and a non-blocking stream on it. Returns "" or why it could not.
  std::string make(int min_sms) {
    PFN_cuDeviceGetDevResource_v12040 dev_resource = nullptr;
    PFN_cuDevSmResourceSplitByCount_v12040 split = nullptr;
    PFN_cuDevResourceGenerateDesc_v12040 desc_of = nullptr;
    PFN_cuGreenCtxCreate_v12040 create = nullptr;
    PFN_cuGreenCtxStreamCreate_v12050 stream_create = nullptr;
    if (!driver_entry_point("cuDeviceGetDevResource", 12040, &dev_resource) ||
        !driver_entry_point("cuDevSmResourceSplitByCount", 12040, &split) ||
        !driver_entry_point("cuDevResourceGenerateDesc", 12040, &desc_of) ||
        !driver_entry_point("cuGreenCtxCreate", 12040, &create) ||
        !driver_entry_point("cuGreenCtxStreamCreate", 12050, &stream_create) ||
        !driver_entry_point("cuGreenCtxDestroy", 12040, &destroy_ctx_) ||
        !driver_entry_point("cuStreamDestroy", 4000, &destroy_stream_)) {
      return "the driver has no green-context API";
    }
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return "cudaGetDevice failed";
    cudaFree(nullptr);  // the primary context exists before the green context is made from it
    CUdevResource all, part, rest;
    std::memset(&all, 0, sizeof(all));
    std::memset(&part, 0, sizeof(part));
    std::memset(&rest, 0, sizeof(rest));
    CUresult r = dev_resource(static_cast<CUdevice>(dev), &all, CU_DEV_RESOURCE_TYPE_SM);
    if (r != CUDA_SUCCESS) return "cuDeviceGetDevResource failed: " + std::to_string(r);
    unsigned int groups = 1;
    r = split(&part, &groups, &all, &rest, 0, static_cast<unsigned int>(min_sms));
    if (r != CUDA_SUCCESS || groups != 1) return "cuDevSmResourceSplitByCount failed: " + std::to_string(r);
    CUdevResourceDesc desc = nullptr;
    if ((r = desc_of(&desc, &part, 1)) != CUDA_SUCCESS) return "cuDevResourceGenerateDesc failed: " + std::to_string(r);
    if ((r = create(&ctx_, desc, static_cast<CUdevice>(dev), CU_GREEN_CTX_DEFAULT_STREAM)) != CUDA_SUCCESS) {
      ctx_ = nullptr;
      return "cuGreenCtxCreate failed: " + std::to_string(r);
    }
    if ((r = stream_create(&stream_, ctx_, CU_STREAM_NON_BLOCKING, 0)) != CUDA_SUCCESS) {
      stream_ = nullptr;
      return "cuGreenCtxStreamCreate failed: " + std::to_string(r);
    }
    sms_ = static_cast<int>(part.sm.smCount);
    return "";
  }

  // Makes the green context current on this thread (after make()): from then on the runtime's
  // default stream, new streams, events and allocations of this thread belong to it.
  std::string make_current() {
    PFN_cuCtxFromGreenCtx_v12040 from_green = nullptr;
    PFN_cuCtxSetCurrent_v4000 set_current = nullptr;
    if (ctx_ == nullptr) return "no green context";
    if (!driver_entry_point("cuCtxFromGreenCtx", 12040, &from_green) ||
        !driver_entry_point("cuCtxSetCurrent", 4000, &set_current)) {
      return "the driver has no cuCtxFromGreenCtx / cuCtxSetCurrent";
    }
    CUcontext c = nullptr;
    CUresult r = from_green(&c, ctx_);
    if (r != CUDA_SUCCESS) return "cuCtxFromGreenCtx failed: " + std::to_string(r);
    if ((r = set_current(c)) != CUDA_SUCCESS) return "cuCtxSetCurrent failed: " + std::to_string(r);
    return "";
  }

  cudaStream_t stream() const { return reinterpret_cast<cudaStream_t>(stream_); }
  int sms() const { return sms_; }

 private:
  PFN_cuGreenCtxDestroy_v12040 destroy_ctx_ = nullptr;
  PFN_cuStreamDestroy_v4000 destroy_stream_ = nullptr;
  CUgreenCtx ctx_ = nullptr;
  CUstream stream_ = nullptr;
  int sms_ = 0;
};

}  // namespace cuda
}  // namespace dsattn
