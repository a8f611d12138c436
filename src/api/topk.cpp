// topk (SPEC §3.3): validate -> pick backend -> call.
#include "api/indexer_args.h"
#include "api/validate.h"
#include "cpu/cpu_ops.h"
#include "cuda/cuda_ops.h"
#include "dsattn/ops.h"

namespace dsattn {
namespace {

constexpr const char* kOp = "topk";

Status prepare(const TopkParams& p, const Exec& ex, detail::TopkProblem* pb, Backend* be) {
  DSATTN_RETURN_IF_ERROR(detail::validate_topk(kOp, p, pb));
  return detail::resolve_backend(kOp, ex,
                                 {&p.logits, &p.starts, &p.ends, &p.indices, &p.values, &p.block_table,
                                  &p.row_request, &p.slot_ids},
                                 be);
}

}  // namespace

Status topk_workspace(const TopkParams& p, const Exec& ex, size_t* bytes) {
  if (bytes == nullptr) return detail::invalid(kOp, "bytes (workspace size output) is a null pointer");
  detail::TopkProblem pb;
  Backend be;
  DSATTN_RETURN_IF_ERROR(prepare(p, ex, &pb, &be));
  *bytes = be == Backend::kCuda ? cuda::topk_workspace(p, pb, ex) : 0;
  return Status::Ok();
}

Status topk(const TopkParams& p, const Exec& ex) {
  detail::TopkProblem pb;
  Backend be;
  DSATTN_RETURN_IF_ERROR(prepare(p, ex, &pb, &be));
  if (be == Backend::kCpu) {
    // Bounds and block-table entries are only readable here, on host tensors.
    DSATTN_RETURN_IF_ERROR(detail::check_topk_host_values(kOp, p, pb));
    return cpu::topk(p, pb, ex);
  }
  DSATTN_RETURN_IF_ERROR(detail::check_workspace(kOp, ex, cuda::topk_workspace(p, pb, ex)));
  return cuda::topk(p, pb, ex);
}

}  // namespace dsattn
