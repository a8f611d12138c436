#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "cuda/common/cuda_check.cuh"
#include "cuda/common/driver_entry.h"
#include "cuda/common/kernel_smem.h"
#include "cuda/common/pdl.cuh"
#include "cuda/cuda_ops.h"

namespace dsattn {
namespace cuda {

bool available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error so later calls start clean
    return false;
  }
  return n > 0;
}

int current_device() {
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return dev;
}

cudaError_t raise_dynamic_smem(const void* kernel, size_t bytes) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  static std::mutex m;
  static std::map<std::pair<const void*, int>, size_t> largest;
  std::lock_guard<std::mutex> lock(m);
  size_t& hi = largest[{kernel, dev}];
  const size_t want = std::max(hi, bytes);
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(want));
  if (e == cudaSuccess) hi = want;
  return e;
}

namespace {
__global__ void device_code_probe() {}
}  // namespace

namespace {

// Per device, 0 until asked, then 10 * major + minor of its compute capability, plus kHasCode
// when the build has code for it: later calls make no driver call. Devices beyond the table ask
// every time.
constexpr int kMaxDevices = 64, kHasCode = 1000;
std::atomic<int> g_device_code[kMaxDevices];

// The table's entry for `dev` (the current device: the probe kernel's attributes are asked of it),
// asking the driver where it is not known yet; 0 and the error in *err where the driver has no
// answer.
int device_code(int dev, cudaError_t* err) {
  const bool cached = dev >= 0 && dev < kMaxDevices;
  int k = cached ? g_device_code[dev].load(std::memory_order_relaxed) : 0;
  if (k != 0) return k;
  int maj = 0, min = 0;
  cudaError_t e = cudaDeviceGetAttribute(&maj, cudaDevAttrComputeCapabilityMajor, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&min, cudaDevAttrComputeCapabilityMinor, dev);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *err = e;
    return 0;
  }
  // The probe is compiled for the same architectures as every kernel of the build: no image for
  // it means none for any of them (the launch would fail with "no kernel image").
  cudaFuncAttributes a{};
  const bool has = cudaFuncGetAttributes(&a, device_code_probe) == cudaSuccess;
  if (!has) cudaGetLastError();
  k = 10 * maj + min + (has ? kHasCode : 0);
  if (cached) g_device_code[dev].store(k, std::memory_order_relaxed);
  return k;
}

// The compute capability in a table entry (0.0 for 0, no answer).
void split_device_code(int k, int* major, int* minor) {
  *major = (k % kHasCode) / 10;
  *minor = k % 10;
}

}  // namespace

bool device_has_code(int dev, int* major, int* minor) {
  cudaError_t e = cudaSuccess;
  const int k = device_code(dev, &e);
  split_device_code(k, major, minor);
  return k == 0 || k >= kHasCode;  // no answer (k = 0): let the call report its own error
}

Status device_capability(const char* op, int* major, int* minor) {
  *major = *minor = 0;
  int dev = 0;
  DSATTN_CUDA_RETURN(op, cudaGetDevice(&dev));
  cudaError_t e = cudaSuccess;
  const int k = device_code(dev, &e);
  if (k == 0) return cuda_status(e, op, "cudaDeviceGetAttribute(cudaDevAttrComputeCapabilityMajor / Minor)");
  split_device_code(k, major, minor);
  return Status::Ok();
}

int num_sms() {
  if (!available()) return 0;
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 0;
  return sms;
}

namespace {

// Driver entry points for the SM-share queries (driver_entry.h). Any of them may be missing on an
// older driver; its query is skipped.
struct ShareFns {
  PFN_cuStreamGetGreenCtx_v12040 stream_green = nullptr;
  PFN_cuGreenCtxGetDevResource_v12040 green_resource = nullptr;
  PFN_cuCtxGetCurrent_v4000 ctx_current = nullptr;
  PFN_cuCtxGetExecAffinity_v11040 exec_affinity = nullptr;
};

const ShareFns& share_fns() {
  static ShareFns f;
  static std::once_flag once;
  std::call_once(once, [] {
    driver_entry_point("cuStreamGetGreenCtx", 12040, &f.stream_green);
    driver_entry_point("cuGreenCtxGetDevResource", 12040, &f.green_resource);
    driver_entry_point("cuCtxGetCurrent", 4000, &f.ctx_current);
    driver_entry_point("cuCtxGetExecAffinity", 11040, &f.exec_affinity);
  });
  return f;
}

}  // namespace

int stream_sms(void* stream) { return sm_share(stream, num_sms()); }

int sm_share(void* stream, int device_sms) {
  if (device_sms <= 0) return device_sms;
  int sms = device_sms;
  const ShareFns& f = share_fns();
  // Whether a context is current: a thread that has not used the runtime yet has none, and the
  // driver would answer only "invalid context" (an API error that compute-sanitizer reports).
  CUcontext ctx = nullptr;
  const bool has_ctx = f.ctx_current != nullptr && f.ctx_current(&ctx) == CUDA_SUCCESS && ctx != nullptr;
  // A green context: the stream's own (cuGreenCtxStreamCreate, or a stream created while a context
  // made from one was current), or, for the NULL / legacy stream, the current context's (none
  // without a current context).
  if (f.stream_green != nullptr && f.green_resource != nullptr && (stream != nullptr || has_ctx)) {
    CUgreenCtx g = nullptr;
    if (f.stream_green(static_cast<CUstream>(stream), &g) == CUDA_SUCCESS && g != nullptr) {
      CUdevResource r;
      std::memset(&r, 0, sizeof(r));
      if (f.green_resource(g, &r, CU_DEV_RESOURCE_TYPE_SM) == CUDA_SUCCESS && r.sm.smCount > 0) {
        sms = std::min(sms, static_cast<int>(r.sm.smCount));
      }
    }
  }
  // An MPS client limited to part of the SMs. With CUDA_MPS_ACTIVE_THREAD_PERCENTAGE the device
  // attribute already gives the client's share (H200, 50 %: 66 SMs); a context made with an
  // SM-count affinity is asked here too, when one is current.
  if (f.exec_affinity != nullptr && has_ctx) {
    CUexecAffinityParam a;
    std::memset(&a, 0, sizeof(a));
    if (f.exec_affinity(&a, CU_EXEC_AFFINITY_TYPE_SM_COUNT) == CUDA_SUCCESS && a.param.smCount.val > 0) {
      sms = std::min(sms, static_cast<int>(a.param.smCount.val));
    }
  }
  return sms;
}

bool pdl_enabled() {
  static const bool env_on = [] {
    const char* e = std::getenv("DSATTN_PDL");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }();
  if (!env_on) return false;
  int major = 0, minor = 0;
  return device_capability("pdl", &major, &minor).ok() && major >= 9;
}

}  // namespace cuda
}  // namespace dsattn
