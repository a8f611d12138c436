#include <cuda_runtime.h>

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

}  // namespace cuda
}  // namespace dsattn
