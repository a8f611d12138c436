// mqa_logits (SPEC §3.2): validate -> pick backend -> call.
#include "api/indexer_args.h"
#include "api/validate.h"
#include "cpu/cpu_ops.h"
#include "cuda/cuda_ops.h"
#include "dsattn/ops.h"

namespace dsattn {

namespace detail {
Status prepare_mqa(const char* op, const MqaLogitsParams& p, const Exec& ex, MqaProblem* pb, Backend* be) {
  DSATTN_RETURN_IF_ERROR(validate_mqa(op, p, pb));
  return resolve_backend(op, ex, {&p.q, &p.q_scales, &p.weights, &p.k, &p.k_scales, &p.ks, &p.ke, &p.logits}, be);
}
}  // namespace detail

namespace {
constexpr const char* kOp = "mqa_logits";
}  // namespace

Status mqa_logits_workspace(const MqaLogitsParams& p, const Exec& ex, size_t* bytes) {
  if (bytes == nullptr) return detail::invalid(kOp, "bytes (workspace size output) is a null pointer");
  detail::MqaProblem pb;
  Backend be;
  DSATTN_RETURN_IF_ERROR(detail::prepare_mqa(kOp, p, ex, &pb, &be));
  *bytes = be == Backend::kCuda ? cuda::mqa_logits_workspace(p, pb, ex) : 0;
  return Status::Ok();
}

Status mqa_logits(const MqaLogitsParams& p, const Exec& ex) {
  detail::MqaProblem pb;
  Backend be;
  DSATTN_RETURN_IF_ERROR(detail::prepare_mqa(kOp, p, ex, &pb, &be));
  if (be == Backend::kCpu) {
    // Windows are only readable here, on host tensors.
    DSATTN_RETURN_IF_ERROR(detail::check_mqa_host_values(kOp, p, pb));
    return cpu::mqa_logits(p, pb, ex);
  }
  DSATTN_RETURN_IF_ERROR(detail::check_workspace(kOp, ex, cuda::mqa_logits_workspace(p, pb, ex)));
  return cuda::mqa_logits(p, pb, ex);
}

}  // namespace dsattn
