// TEMPORARY stub: replaced by the real launcher.
#include "api/validate.h"
#include "cuda/cuda_ops.h"

namespace dsattn {
namespace cuda {

size_t topk_workspace(const TopkParams&, const detail::TopkProblem&, const Exec&) { return 0; }
Status topk(const TopkParams&, const detail::TopkProblem&, const Exec&) { return detail::not_implemented("topk", "not yet implemented on the GPU"); }
size_t paged_mqa_topk_workspace(const PagedMqaTopkParams&, const detail::PagedIndexerProblem&, const Exec&) { return 0; }
Status paged_mqa_topk(const PagedMqaTopkParams&, const detail::PagedIndexerProblem&, const Exec&) { return detail::not_implemented("paged_mqa_topk", "not yet implemented on the GPU"); }
}  // namespace cuda
}  // namespace dsattn
