// Explicit instantiations: MXFP4 indexer kernel with the logits epilogue.
#include "cuda/sm80/indexer_launch.h"

namespace dsattn {
namespace cuda {
template struct IndexerKernelOps<IndexerFormat::kMxfp4, 32, LogitsEpilogue>;
template struct IndexerKernelOps<IndexerFormat::kMxfp4, 64, LogitsEpilogue>;
template struct IndexerKernelOps<IndexerFormat::kMxfp4, 128, LogitsEpilogue>;
}  // namespace cuda
}  // namespace dsattn
