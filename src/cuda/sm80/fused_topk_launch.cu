// TEMPORARY stub: replaced by the fused indexer + top-k launcher.
#include "api/validate.h"
#include "cuda/cuda_ops.h"

namespace dsattn {
namespace cuda {
size_t paged_mqa_topk_workspace(const PagedMqaTopkParams&, const detail::PagedIndexerProblem&, const Exec&) { return 0; }
Status paged_mqa_topk(const PagedMqaTopkParams&, const detail::PagedIndexerProblem&, const Exec&) { return detail::not_implemented("paged_mqa_topk", "not yet implemented on the GPU"); }
}  // namespace cuda
}  // namespace dsattn
