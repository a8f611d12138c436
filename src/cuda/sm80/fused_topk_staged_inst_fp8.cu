// Explicit instantiations: FP8 indexer kernel with the staged top-k epilogue (paged_mqa_topk's
// streaming route on the portable tile kernel; a TU of its own so it builds beside the others).
#include "cuda/sm80/fused_topk_epilogue.cuh"
#include "cuda/sm80/indexer_launch.h"

namespace dsattn {
namespace cuda {
template struct IndexerKernelOps<IndexerFormat::kFp8, 32, TopkStagedEpilogue>;
template struct IndexerKernelOps<IndexerFormat::kFp8, 64, TopkStagedEpilogue>;
template struct IndexerKernelOps<IndexerFormat::kFp8, 128, TopkStagedEpilogue>;
}  // namespace cuda
}  // namespace dsattn
