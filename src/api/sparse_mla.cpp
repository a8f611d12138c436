// sparse_mla_decode / sparse_mla_prefill (SPEC §3.5, §3.6): argument checks, then the backend.
//
// Semantics shared by both backends:
//  * An index is used when it is among the first topk_length[b] (when given) and names an existing
//    token: decode 0 <= id < num_pages * P of its cache, prefill 0 <= id < Nk. Anything else (-1, other
//    negatives, ids past the end) is skipped and never read. A repeated id counts once per occurrence.
//  * lse is the natural-log sum of exp(sm_scale * q.k) over the used tokens and does NOT include the
//    attention sink (FlashMLA returns the same quantity); with a sink the output is scaled by
//    exp(lse) / (exp(lse) + exp(sink[h])).
//  * A row with no used token gives out = 0 and lse = -inf (FlashMLA writes +inf there; SPEC §3.5
//    asks for -inf), never NaN.
// topk_length values outside [0, topk]: the CPU backend rejects them; the CUDA kernel cannot report
// them without a host sync and clamps them into [0, topk] instead.
// CUDA: both ops run on tensor cores where that kernel can take the call (src/cuda/common/
// mla_mma_kernel.cuh; prefill with d_v = 512), else on a straightforward scalar kernel
// (mla_kernel.cuh, fp32 online softmax; prefill needs d_v <= 512): see src/cuda/common/
// mla_launch.cu and DSATTN_MLA_KERNEL.
#include <cmath>

#include "api/latent_check.h"
#include "api/validate.h"
#include "cpu/cpu_ops.h"
#include "cuda/cuda_ops.h"
#include "dsattn/ops.h"

namespace dsattn {
namespace {

using detail::invalid;

Status check_heads(const char* op, int64_t hq, int dim) {
  if (hq != 16 && hq != 32 && hq != 64 && hq != 128) {
    return invalid(op, "q heads (shape[%d]) expected 16, 32, 64 or 128, got %lld", dim, static_cast<long long>(hq));
  }
  return Status::Ok();
}

Status check_sm_scale(const char* op, float s) {
  if (!(std::isfinite(s) && s > 0.0f)) return invalid(op, "sm_scale expected a finite value > 0, got %g", s);
  return Status::Ok();
}

Status check_optional(const char* op, const char* arg, const TensorView& t, DType dt,
                      std::initializer_list<int64_t> shape) {
  if (!t.defined()) return Status::Ok();
  return detail::check_tensor(op, arg, t, dt, shape);
}

Status check_indices(const char* op, const char* arg, const TensorView& t, std::initializer_list<int64_t> shape) {
  DSATTN_RETURN_IF_ERROR(detail::check_tensor(op, arg, t, DType::kI32, shape));
  return detail::check_last_dim_contiguous(op, arg, t);
}

Status validate_decode(const SparseMlaDecodeParams& p, const Exec& ex, Backend* backend) {
  const char* op = "sparse_mla_decode";
  DSATTN_RETURN_IF_ERROR(detail::check_present(op, "q", p.q));
  DSATTN_RETURN_IF_ERROR(detail::check_dtype(op, "q", p.q, DType::kBF16));
  DSATTN_RETURN_IF_ERROR(detail::check_ndim(op, "q", p.q, 4));
  DSATTN_RETURN_IF_ERROR(detail::check_strides_nonneg(op, "q", p.q));
  DSATTN_RETURN_IF_ERROR(detail::check_last_dim_contiguous(op, "q", p.q));
  const int64_t B = p.q.shape[0], Sq = p.q.shape[1], Hq = p.q.shape[2], dqk = p.q.shape[3];
  DSATTN_RETURN_IF_ERROR(check_heads(op, Hq, 2));
  DSATTN_RETURN_IF_ERROR(detail::check_latent_cache(op, "cache", p.cache));
  if (dqk != latent_dqk(p.cache.format)) {
    return invalid(op, "q head dim (shape[3]) expected %d for a %s cache, got %lld", latent_dqk(p.cache.format),
                   latent_format_name(p.cache.format), static_cast<long long>(dqk));
  }
  DSATTN_RETURN_IF_ERROR(check_indices(op, "indices", p.indices, {B, Sq, -1}));
  DSATTN_RETURN_IF_ERROR(check_optional(op, "topk_length", p.topk_length, DType::kI32, {B}));
  if (p.extra_indices.defined()) {
    DSATTN_RETURN_IF_ERROR(detail::check_latent_cache(op, "extra_cache", p.extra_cache));
    if (p.extra_cache.format != p.cache.format) {
      return invalid(op, "extra_cache.format expected %s (the format of cache), got %s",
                     latent_format_name(p.cache.format), latent_format_name(p.extra_cache.format));
    }
    DSATTN_RETURN_IF_ERROR(check_indices(op, "extra_indices", p.extra_indices, {B, Sq, -1}));
    DSATTN_RETURN_IF_ERROR(check_optional(op, "extra_topk_length", p.extra_topk_length, DType::kI32, {B}));
  } else {
    if (p.extra_topk_length.defined()) {
      return invalid(op, "extra_topk_length expected absent without extra_indices, got shape %s",
                     shape_str(p.extra_topk_length).c_str());
    }
    if (p.extra_cache.pages.defined()) {
      return invalid(op, "extra_cache expected absent without extra_indices, got pages of shape %s",
                     shape_str(p.extra_cache.pages).c_str());
    }
  }
  DSATTN_RETURN_IF_ERROR(check_optional(op, "attn_sink", p.attn_sink, DType::kF32, {Hq}));
  DSATTN_RETURN_IF_ERROR(check_sm_scale(op, p.sm_scale));
  DSATTN_RETURN_IF_ERROR(detail::check_tensor(op, "out", p.out, DType::kBF16, {B, Sq, Hq, kLatentDv}));
  DSATTN_RETURN_IF_ERROR(detail::check_last_dim_contiguous(op, "out", p.out));
  DSATTN_RETURN_IF_ERROR(detail::check_tensor(op, "lse", p.lse, DType::kF32, {B, Sq, Hq}));
  return detail::resolve_backend(op, ex,
                                 {&p.q, &p.cache.pages, &p.indices, &p.topk_length, &p.extra_cache.pages,
                                  &p.extra_indices, &p.extra_topk_length, &p.attn_sink, &p.out, &p.lse},
                                 backend);
}

Status validate_prefill(const SparseMlaPrefillParams& p, const Exec& ex, Backend* backend) {
  const char* op = "sparse_mla_prefill";
  DSATTN_RETURN_IF_ERROR(detail::check_present(op, "q", p.q));
  DSATTN_RETURN_IF_ERROR(detail::check_dtype(op, "q", p.q, DType::kBF16));
  DSATTN_RETURN_IF_ERROR(detail::check_ndim(op, "q", p.q, 3));
  DSATTN_RETURN_IF_ERROR(detail::check_strides_nonneg(op, "q", p.q));
  DSATTN_RETURN_IF_ERROR(detail::check_last_dim_contiguous(op, "q", p.q));
  const int64_t M = p.q.shape[0], Hq = p.q.shape[1], dqk = p.q.shape[2];
  DSATTN_RETURN_IF_ERROR(check_heads(op, Hq, 1));
  if (dqk != 512 && dqk != 576) {
    return invalid(op, "q head dim (shape[2]) expected 512 or 576, got %lld", static_cast<long long>(dqk));
  }
  DSATTN_RETURN_IF_ERROR(detail::check_tensor(op, "kv", p.kv, DType::kBF16, {-1, dqk}));
  DSATTN_RETURN_IF_ERROR(detail::check_last_dim_contiguous(op, "kv", p.kv));
  DSATTN_RETURN_IF_ERROR(check_indices(op, "indices", p.indices, {M, -1}));
  DSATTN_RETURN_IF_ERROR(check_optional(op, "topk_length", p.topk_length, DType::kI32, {M}));
  DSATTN_RETURN_IF_ERROR(check_optional(op, "attn_sink", p.attn_sink, DType::kF32, {Hq}));
  DSATTN_RETURN_IF_ERROR(check_sm_scale(op, p.sm_scale));
  if (p.d_v < 1 || p.d_v > dqk) {
    return invalid(op, "d_v expected in [1, %lld], got %d", static_cast<long long>(dqk), p.d_v);
  }
  DSATTN_RETURN_IF_ERROR(detail::check_tensor(op, "out", p.out, DType::kBF16, {M, Hq, p.d_v}));
  DSATTN_RETURN_IF_ERROR(detail::check_last_dim_contiguous(op, "out", p.out));
  DSATTN_RETURN_IF_ERROR(detail::check_tensor(op, "lse", p.lse, DType::kF32, {M, Hq}));
  return detail::resolve_backend(op, ex, {&p.q, &p.kv, &p.indices, &p.topk_length, &p.attn_sink, &p.out, &p.lse},
                                 backend);
}

}  // namespace

Status sparse_mla_decode_workspace(const SparseMlaDecodeParams& p, const Exec& ex, size_t* bytes) {
  if (bytes == nullptr) return invalid("sparse_mla_decode_workspace", "bytes is a null pointer");
  Backend b;
  DSATTN_RETURN_IF_ERROR(validate_decode(p, ex, &b));
  // Only the tensor-core kernel's split over the indices needs scratch (CUDA).
  *bytes = b == Backend::kCuda ? cuda::sparse_mla_decode_workspace(p, ex) : 0;
  return Status::Ok();
}

Status sparse_mla_decode(const SparseMlaDecodeParams& p, const Exec& ex) {
  Backend b;
  DSATTN_RETURN_IF_ERROR(validate_decode(p, ex, &b));
  if (p.q.shape[0] * p.q.shape[1] == 0) return Status::Ok();
  // CUDA checks the workspace against the plan it runs (src/cuda/common/mla_launch.cu).
  return b == Backend::kCuda ? cuda::sparse_mla_decode(p, ex) : cpu::sparse_mla_decode(p, ex);
}

Status sparse_mla_prefill_workspace(const SparseMlaPrefillParams& p, const Exec& ex, size_t* bytes) {
  if (bytes == nullptr) return invalid("sparse_mla_prefill_workspace", "bytes is a null pointer");
  Backend b;
  DSATTN_RETURN_IF_ERROR(validate_prefill(p, ex, &b));
  *bytes = b == Backend::kCuda ? cuda::sparse_mla_prefill_workspace(p, ex) : 0;  // as for decode
  return Status::Ok();
}

Status sparse_mla_prefill(const SparseMlaPrefillParams& p, const Exec& ex) {
  Backend b;
  DSATTN_RETURN_IF_ERROR(validate_prefill(p, ex, &b));
  if (p.q.shape[0] == 0) return Status::Ok();
  // CUDA checks the workspace against the plan it runs (src/cuda/common/mla_launch.cu).
  return b == Backend::kCuda ? cuda::sparse_mla_prefill(p, ex) : cpu::sparse_mla_prefill(p, ex);
}

}  // namespace dsattn
