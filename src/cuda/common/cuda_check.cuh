// CUDA error handling for launchers: every runtime call and launch turns into a Status.
#pragma once
#include <cuda_runtime.h>

#include "api/validate.h"
#include "dsattn/status.h"

namespace dsattn {
namespace cuda {

inline Status cuda_status(cudaError_t e, const char* op, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status(Code::kCudaError, detail::strf("%s: %s failed: %s (%s)", op, what, cudaGetErrorName(e),
                                               cudaGetErrorString(e)));
}

// Status of the most recent launch (does not synchronize).
inline Status last_launch_status(const char* op, const char* kernel) {
  return cuda_status(cudaGetLastError(), op, kernel);
}

}  // namespace cuda
}  // namespace dsattn

#define DSATTN_CUDA_RETURN(op, expr) DSATTN_RETURN_IF_ERROR(::dsattn::cuda::cuda_status((expr), op, #expr))
