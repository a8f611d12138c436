// paged_mqa_topk (SPEC §3.4): validate -> pick backend -> call.
#include "api/indexer_args.h"
#include "api/validate.h"
#include "cpu/cpu_ops.h"
#include "cuda/cuda_ops.h"
#include "dsattn/ops.h"

namespace dsattn {
namespace {

constexpr const char* kOp = "paged_mqa_topk";

Status prepare(const PagedMqaTopkParams& p, const Exec& ex, detail::PagedIndexerProblem* pb, Backend* be) {
  DSATTN_RETURN_IF_ERROR(detail::validate_paged_indexer(kOp, p, pb));
  DSATTN_RETURN_IF_ERROR(detail::validate_topk_outputs(kOp, p.k, pb->rows, p.indices, p.values, p.slot_ids));
  pb->max_context = 0;  // no logits: lengths are bounded by the block table only
  return detail::resolve_backend(kOp, ex,
                                 {&p.q, &p.q_scales, &p.weights, &p.cache.pages, &p.block_table, &p.context_lens,
                                  &p.row_request, &p.schedule, &p.indices, &p.values, &p.slot_ids},
                                 be);
}

}  // namespace

Status paged_mqa_topk_workspace(const PagedMqaTopkParams& p, const Exec& ex, size_t* bytes) {
  if (bytes == nullptr) return detail::invalid(kOp, "bytes (workspace size output) is a null pointer");
  detail::PagedIndexerProblem pb;
  Backend be;
  DSATTN_RETURN_IF_ERROR(prepare(p, ex, &pb, &be));
  *bytes = be == Backend::kCuda ? cuda::paged_mqa_topk_workspace(p, pb, ex) : 0;
  return Status::Ok();
}

Status paged_mqa_topk(const PagedMqaTopkParams& p, const Exec& ex) {
  detail::PagedIndexerProblem pb;
  Backend be;
  DSATTN_RETURN_IF_ERROR(prepare(p, ex, &pb, &be));
  if (be == Backend::kCpu) {
    // Tensor values (lengths, block-table entries) are only readable here, on host tensors.
    DSATTN_RETURN_IF_ERROR(detail::check_paged_host_values(kOp, p, pb, -1));
    return cpu::paged_mqa_topk(p, pb, ex);
  }
  DSATTN_RETURN_IF_ERROR(detail::check_workspace(kOp, ex, cuda::paged_mqa_topk_workspace(p, pb, ex)));
  return cuda::paged_mqa_topk(p, pb, ex);
}

Status paged_mqa_topk_route(const PagedMqaTopkParams& p, const Exec& ex, const char** route) {
  if (route == nullptr) return detail::invalid("paged_mqa_topk_route", "route (output) is a null pointer");
  detail::PagedIndexerProblem pb;
  Backend be;
  DSATTN_RETURN_IF_ERROR(prepare(p, ex, &pb, &be));
  if (be == Backend::kCpu) {
    *route = "cpu";
    return Status::Ok();
  }
  return cuda::paged_mqa_topk_route(p, pb, ex, route);
}

}  // namespace dsattn
