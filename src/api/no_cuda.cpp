// Backend entry points for builds without nvcc: every CUDA op reports that it is unavailable.
// (resolve_backend already refuses Backend::kCuda in such builds; these keep the link complete.)
#if !DSATTN_WITH_CUDA
#include "api/validate.h"
#include "cuda/cuda_ops.h"

namespace dsattn {
namespace cuda {
namespace {
Status no_cuda(const char* op) { return detail::not_implemented(op, "this dsattn build has no CUDA kernels"); }
}  // namespace

bool available() { return false; }
int current_device() { return -1; }
int num_sms() { return 0; }
bool device_has_code(int, int*, int*) { return false; }
int stream_sms(void*) { return 0; }
size_t paged_mqa_logits_workspace(const PagedMqaLogitsParams&, const detail::PagedIndexerProblem&, const Exec&) { return 0; }
Status paged_mqa_logits(const PagedMqaLogitsParams&, const detail::PagedIndexerProblem&, const Exec&, bool) { return no_cuda("paged_mqa_logits"); }
Status schedule_metadata(const ScheduleMetadataParams&, const detail::PagedIndexerProblem&, const Exec&) { return no_cuda("schedule_metadata"); }
size_t mqa_logits_workspace(const MqaLogitsParams&, const detail::MqaProblem&, const Exec&) { return 0; }
Status mqa_logits(const MqaLogitsParams&, const detail::MqaProblem&, const Exec&) { return no_cuda("mqa_logits"); }
size_t topk_workspace(const TopkParams&, const detail::TopkProblem&, const Exec&) { return 0; }
Status topk(const TopkParams&, const detail::TopkProblem&, const Exec&) { return no_cuda("topk"); }
size_t paged_mqa_topk_workspace(const PagedMqaTopkParams&, const detail::PagedIndexerProblem&, const Exec&) { return 0; }
Status paged_mqa_topk(const PagedMqaTopkParams&, const detail::PagedIndexerProblem&, const Exec&) { return no_cuda("paged_mqa_topk"); }
Status paged_mqa_topk_route(const PagedMqaTopkParams&, const detail::PagedIndexerProblem&, const Exec&, const char**) {
  return no_cuda("paged_mqa_topk_route");
}
size_t sparse_mla_decode_workspace(const SparseMlaDecodeParams&, const Exec&) { return 0; }
Status sparse_mla_decode(const SparseMlaDecodeParams&, const Exec&) { return no_cuda("sparse_mla_decode"); }
size_t sparse_mla_prefill_workspace(const SparseMlaPrefillParams&, const Exec&) { return 0; }
Status sparse_mla_prefill(const SparseMlaPrefillParams&, const Exec&) { return no_cuda("sparse_mla_prefill"); }
Status write_indexer_cache(const WriteIndexerCacheParams&, const Exec&) { return no_cuda("write_indexer_cache"); }
Status write_latent_cache(const WriteLatentCacheParams&, const Exec&) { return no_cuda("write_latent_cache"); }

}  // namespace cuda
}  // namespace dsattn
#endif  // !DSATTN_WITH_CUDA
