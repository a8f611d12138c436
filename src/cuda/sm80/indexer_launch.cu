// TEMPORARY stub: replaced by the real launcher.
#include "api/validate.h"
#include "cuda/cuda_ops.h"

namespace dsattn {
namespace cuda {

size_t paged_mqa_logits_workspace(const PagedMqaLogitsParams&, const detail::PagedIndexerProblem&, const Exec&) { return 0; }
Status paged_mqa_logits(const PagedMqaLogitsParams&, const detail::PagedIndexerProblem&, const Exec&) { return detail::not_implemented("paged_mqa_logits", "not yet implemented on the GPU"); }
Status schedule_metadata(const ScheduleMetadataParams&, const detail::PagedIndexerProblem&, const Exec&) { return detail::not_implemented("schedule_metadata", "not yet implemented on the GPU"); }
size_t mqa_logits_workspace(const MqaLogitsParams&, const detail::MqaProblem&, const Exec&) { return 0; }
Status mqa_logits(const MqaLogitsParams&, const detail::MqaProblem&, const Exec&) { return detail::not_implemented("mqa_logits", "not yet implemented on the GPU"); }
}  // namespace cuda
}  // namespace dsattn
