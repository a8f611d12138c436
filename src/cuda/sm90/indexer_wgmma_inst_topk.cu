// Explicit instantiation: the Hopper indexer kernel with the fused top-k epilogue (paged_mqa_topk).
#include "cuda/sm80/fused_topk_epilogue.cuh"
#include "cuda/sm90/indexer_wgmma_launch.h"

namespace dsattn {
namespace cuda {
template struct WgmmaKernelOps<TopkEpilogue>;
}  // namespace cuda
}  // namespace dsattn
