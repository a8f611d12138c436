// paged_mqa_logits (SPEC §3.1): validate -> pick backend -> call.
#include "api/indexer_args.h"
#include "api/validate.h"
#include "cpu/cpu_ops.h"
#include "cuda/cuda_ops.h"
#include "dsattn/ops.h"

namespace dsattn {
namespace {

constexpr const char* kOp = "paged_mqa_logits";

Status prepare(const PagedMqaLogitsParams& p, const Exec& ex, detail::PagedIndexerProblem* pb, Backend* be) {
  DSATTN_RETURN_IF_ERROR(detail::validate_paged_indexer(kOp, p, pb));
  DSATTN_RETURN_IF_ERROR(detail::check_present(kOp, "logits", p.logits));
  DSATTN_RETURN_IF_ERROR(detail::check_dtype_in(kOp, "logits", p.logits, {DType::kF32, DType::kBF16}));
  DSATTN_RETURN_IF_ERROR(detail::check_shape(kOp, "logits", p.logits, {pb->rows, -1}));
  DSATTN_RETURN_IF_ERROR(detail::check_strides_nonneg(kOp, "logits", p.logits));
  DSATTN_RETURN_IF_ERROR(detail::check_last_dim_contiguous(kOp, "logits", p.logits));
  DSATTN_RETURN_IF_ERROR(detail::check_output_rows(kOp, "logits", p.logits));
  pb->max_context = p.logits.shape[1];
  return detail::resolve_backend(kOp, ex,
                                 {&p.q, &p.q_scales, &p.weights, &p.cache.pages, &p.block_table, &p.context_lens,
                                  &p.row_request, &p.schedule, &p.logits},
                                 be);
}

}  // namespace

Status paged_mqa_logits_workspace(const PagedMqaLogitsParams& p, const Exec& ex, size_t* bytes) {
  if (bytes == nullptr) return detail::invalid(kOp, "bytes (workspace size output) is a null pointer");
  detail::PagedIndexerProblem pb;
  Backend be;
  DSATTN_RETURN_IF_ERROR(prepare(p, ex, &pb, &be));
  *bytes = be == Backend::kCuda ? cuda::paged_mqa_logits_workspace(p, pb, ex) : 0;
  return Status::Ok();
}

Status paged_mqa_logits(const PagedMqaLogitsParams& p, const Exec& ex) {
  detail::PagedIndexerProblem pb;
  Backend be;
  DSATTN_RETURN_IF_ERROR(prepare(p, ex, &pb, &be));
  if (be == Backend::kCpu) {
    // Tensor values (lengths, block-table entries) are only readable here, on host tensors.
    DSATTN_RETURN_IF_ERROR(detail::check_paged_host_values(kOp, p, pb, pb.max_context));
    return cpu::paged_mqa_logits(p, pb, ex);
  }
  DSATTN_RETURN_IF_ERROR(detail::check_workspace(kOp, ex, cuda::paged_mqa_logits_workspace(p, pb, ex)));
  return cuda::paged_mqa_logits(p, pb, ex);
}

}  // namespace dsattn
