// Explicit instantiation: the Hopper indexer kernel with the logits epilogue.
#include "cuda/sm90/indexer_wgmma_launch.h"

namespace dsattn {
namespace cuda {
template struct WgmmaKernelOps<LogitsEpilogue>;
}  // namespace cuda
}  // namespace dsattn
