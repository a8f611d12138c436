// Driver API functions resolved through the CUDA runtime (cudaGetDriverEntryPointByVersion), so
// that nothing links libcuda directly: the tensor-map encoder (indexer_wgmma_launch.cu), the SM
// share queries (runtime.cu) and the green contexts of the tests and benchmarks
// (green_context.h). Host-only, header-only.
#pragma once
#include <cuda_runtime.h>

namespace dsattn {
namespace cuda {

// *fn = the driver's `name` at ABI `version` (e.g. 12040); false, *fn untouched and the runtime's
// error cleared, where this driver does not have it.
template <typename F>
bool driver_entry_point(const char* name, int version, F* fn) {
  void* ptr = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &ptr, version, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return false;
  }
  *fn = reinterpret_cast<F>(ptr);
  return true;
}

}  // namespace cuda
}  // namespace dsattn
