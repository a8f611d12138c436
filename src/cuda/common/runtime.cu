#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

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

int num_sms() {
  if (!available()) return 0;
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 0;
  return sms;
}

bool pdl_enabled() {
  static const bool env_on = [] {
    const char* e = std::getenv("DSATTN_PDL");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }();
  if (!env_on) return false;
  // Per device: compute capability >= 9.0 (0 unknown, 1 no, 2 yes). Devices beyond the table ask
  // every time.
  static std::atomic<int> known[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (dev >= 0 && dev < 64) {
    const int k = known[dev].load(std::memory_order_relaxed);
    if (k != 0) return k == 2;
  }
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
  const bool on = major >= 9;
  if (dev >= 0 && dev < 64) known[dev].store(on ? 2 : 1, std::memory_order_relaxed);
  return on;
}

}  // namespace cuda
}  // namespace dsattn
