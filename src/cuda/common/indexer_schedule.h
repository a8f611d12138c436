// Device computation of the indexer's schedule metadata (src/common/indexer_work.h): one CTA,
// no host synchronization, safe inside CUDA-graph capture; all-zero lengths give empty partitions.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "common/indexer_work.h"

namespace dsattn {
namespace cuda {

// meta: device i32 [indexer_meta_size(partitions)]. zero (optional): zero_words words the kernel
// also sets to 0 (paged_mqa_topk's resident route: its grid barrier and histograms, so that the
// kernel after this one finds them zeroed without a memset of its own). group_cost: the virtual
// units leading every non-empty group after the first (detail::indexer_group_lead; 0: the plain
// split, whose piece bound paged_mqa_topk's own schedules rely on).
cudaError_t launch_indexer_schedule(const detail::IndexerWork& w, int partitions, int32_t* meta,
                                    cudaStream_t stream, uint32_t* zero = nullptr, int zero_words = 0,
                                    int group_cost = 0);

}  // namespace cuda
}  // namespace dsattn
