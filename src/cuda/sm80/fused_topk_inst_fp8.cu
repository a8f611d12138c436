// Explicit instantiations: FP8 indexer kernel with the top-k epilogue (paged_mqa_topk).
#include "cuda/sm80/fused_topk_epilogue.cuh"
#include "cuda/sm80/indexer_launch.h"

namespace dsattn {
namespace cuda {
template struct IndexerKernelOps<IndexerFormat::kFp8, 32, TopkEpilogue>;
template struct IndexerKernelOps<IndexerFormat::kFp8, 64, TopkEpilogue>;
template struct IndexerKernelOps<IndexerFormat::kFp8, 128, TopkEpilogue>;
}  // namespace cuda
}  // namespace dsattn
