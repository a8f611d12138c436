// Explicit instantiations: FP8 indexer kernel with the logits epilogue.
#include "cuda/sm80/indexer_launch.h"

namespace dsattn {
namespace cuda {
template struct IndexerKernelOps<IndexerFormat::kFp8, 32, LogitsEpilogue>;
template struct IndexerKernelOps<IndexerFormat::kFp8, 64, LogitsEpilogue>;
template struct IndexerKernelOps<IndexerFormat::kFp8, 128, LogitsEpilogue>;
}  // namespace cuda
}  // namespace dsattn
