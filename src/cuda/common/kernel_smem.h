// A kernel's dynamic shared-memory limit, raised and never lowered.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace dsattn {
namespace cuda {

// Raises `kernel`'s dynamic shared-memory limit (cudaFuncAttributeMaxDynamicSharedMemorySize) on
// the current device to at least `bytes`, to the largest size any call has asked of it so far.
// The limit is one setting per kernel and device, shared by every host thread: a call that set it
// to its own size and then launched could find it lowered by another thread's smaller call in
// between, and its launch refused (GpuThreads.TopkShapesOnTwoThreads). Each call still sets it
// (a device reset restores the default), under one lock.
cudaError_t raise_dynamic_smem(const void* kernel, size_t bytes);

template <class K>
cudaError_t raise_dynamic_smem(K* kernel, size_t bytes) {
  return raise_dynamic_smem(reinterpret_cast<const void*>(kernel), bytes);
}

}  // namespace cuda
}  // namespace dsattn
