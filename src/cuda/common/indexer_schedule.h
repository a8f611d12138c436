// Device computation of the indexer's schedule metadata (src/common/indexer_work.h): one CTA,
// no host synchronization, safe inside CUDA-graph capture; all-zero lengths give empty partitions.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "common/indexer_work.h"

namespace dsattn {
namespace cuda {

// meta: device i32 [indexer_meta_size(partitions)].
cudaError_t launch_indexer_schedule(const detail::IndexerWork& w, int partitions, int32_t* meta,
                                    cudaStream_t stream);

}  // namespace cuda
}  // namespace dsattn
