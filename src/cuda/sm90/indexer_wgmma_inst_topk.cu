// Explicit instantiation: the Hopper indexer kernel with the fused top-k epilogue (paged_mqa_topk).
#include "cuda/sm80/fused_topk_epilogue.cuh"
#include "cuda/sm90/indexer_wgmma_launch.h"

namespace dsattn {
namespace cuda {
static_assert(kWgThreads / 32 <= fused_topk::kCollectorMaxWarps, "the collector's per-warp scratch is too small");
template struct WgmmaKernelOps<TopkEpilogue>;
}  // namespace cuda
}  // namespace dsattn
