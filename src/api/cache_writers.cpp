// write_indexer_cache / write_latent_cache (SPEC §3.7): argument checks, then the backend.
// Slot values are checked by the CPU backend (an out-of-range or repeated slot is an error there and
// nothing is written); the CUDA backend cannot read them without a sync and skips every slot outside
// [0, num_pages * page_size) instead (see src/cuda/common/cache_writer_launch.cu).
#include "api/latent_check.h"
#include "api/validate.h"
#include "cpu/cpu_ops.h"
#include "cuda/cuda_ops.h"
#include "dsattn/ops.h"

namespace dsattn {
namespace {

using detail::invalid;

Status check_slot_mapping(const char* op, const TensorView& slots, int64_t tokens) {
  DSATTN_RETURN_IF_ERROR(detail::check_present(op, "slot_mapping", slots));
  DSATTN_RETURN_IF_ERROR(detail::check_dtype_in(op, "slot_mapping", slots, {DType::kI32, DType::kI64}));
  DSATTN_RETURN_IF_ERROR(detail::check_shape(op, "slot_mapping", slots, {tokens}));
  return detail::check_strides_nonneg(op, "slot_mapping", slots);
}

Status check_input(const char* op, const char* arg, const TensorView& x, int64_t dim) {
  DSATTN_RETURN_IF_ERROR(detail::check_present(op, arg, x));
  DSATTN_RETURN_IF_ERROR(detail::check_dtype_in(op, arg, x, {DType::kF32, DType::kBF16}));
  DSATTN_RETURN_IF_ERROR(detail::check_shape(op, arg, x, {-1, dim}));
  DSATTN_RETURN_IF_ERROR(detail::check_strides_nonneg(op, arg, x));
  return detail::check_last_dim_contiguous(op, arg, x);
}

// pages: u8 [num_pages, >= used] with strides [page_stride_bytes, 1].
Status check_pages(const char* op, const TensorView& pages, int64_t page_stride, int64_t used) {
  DSATTN_RETURN_IF_ERROR(detail::check_present(op, "cache.pages", pages));
  DSATTN_RETURN_IF_ERROR(detail::check_dtype(op, "cache.pages", pages, DType::kU8));
  DSATTN_RETURN_IF_ERROR(detail::check_ndim(op, "cache.pages", pages, 2));
  if (pages.shape[1] < used) {
    return invalid(op, "cache.pages shape[1] expected >= %lld bytes, got %lld", static_cast<long long>(used),
                   static_cast<long long>(pages.shape[1]));
  }
  if (pages.shape[1] > 1 && pages.strides[1] != 1) {
    return invalid(op, "cache.pages stride[1] expected 1, got %lld", static_cast<long long>(pages.strides[1]));
  }
  if (pages.shape[0] > 1 && pages.strides[0] != page_stride) {
    return invalid(op, "cache.pages stride[0] expected %lld (cache.page_stride_bytes), got %lld",
                   static_cast<long long>(page_stride), static_cast<long long>(pages.strides[0]));
  }
  return Status::Ok();
}

}  // namespace

namespace detail {

// Shared with the sparse-MLA checks: a latent cache's own fields and its pages tensor.
Status check_latent_cache(const char* op, const char* arg, const LatentCache& c) {
  if (c.format != LatentFormat::kV4Fp8 && c.format != LatentFormat::kV32Fp8) {
    return invalid(op, "%s.format expected v4_fp8 or v32_fp8, got %d", arg, static_cast<int>(c.format));
  }
  if (c.tokens_per_page <= 0) {
    return invalid(op, "%s.tokens_per_page expected > 0, got %d", arg, c.tokens_per_page);
  }
  const int64_t min_stride = latent_min_page_bytes(c.format, c.tokens_per_page);
  if (c.page_stride_bytes < min_stride) {
    return invalid(op, "%s.page_stride_bytes expected >= %lld for %d %s tokens per page, got %lld", arg,
                   static_cast<long long>(min_stride), c.tokens_per_page, latent_format_name(c.format),
                   static_cast<long long>(c.page_stride_bytes));
  }
  const std::string pages_arg = std::string(arg) + ".pages";
  const char* pa = pages_arg.c_str();
  const int64_t used = int64_t(c.tokens_per_page) * latent_token_bytes(c.format);
  DSATTN_RETURN_IF_ERROR(check_present(op, pa, c.pages));
  DSATTN_RETURN_IF_ERROR(check_dtype(op, pa, c.pages, DType::kU8));
  DSATTN_RETURN_IF_ERROR(check_ndim(op, pa, c.pages, 2));
  if (c.pages.shape[1] < used) {
    return invalid(op, "%s shape[1] expected >= %lld bytes, got %lld", pa, static_cast<long long>(used),
                   static_cast<long long>(c.pages.shape[1]));
  }
  if (c.pages.shape[1] > 1 && c.pages.strides[1] != 1) {
    return invalid(op, "%s stride[1] expected 1, got %lld", pa, static_cast<long long>(c.pages.strides[1]));
  }
  if (c.pages.shape[0] > 1 && c.pages.strides[0] != c.page_stride_bytes) {
    return invalid(op, "%s stride[0] expected %lld (%s.page_stride_bytes), got %lld", pa,
                   static_cast<long long>(c.page_stride_bytes), arg, static_cast<long long>(c.pages.strides[0]));
  }
  return Status::Ok();
}

}  // namespace detail

Status write_indexer_cache(const WriteIndexerCacheParams& p, const Exec& ex) {
  const char* op = "write_indexer_cache";
  const IndexerCache& c = p.cache;
  if (c.format != IndexerFormat::kFp8 && c.format != IndexerFormat::kMxfp4) {
    return invalid(op, "cache.format expected fp8 or mxfp4, got %d", static_cast<int>(c.format));
  }
  if (c.head_dim != 32 && c.head_dim != 64 && c.head_dim != 128) {
    return invalid(op, "cache.head_dim expected 32, 64 or 128, got %d", c.head_dim);
  }
  if (c.states_per_page < 1 || c.states_per_page > 256) {
    return invalid(op, "cache.states_per_page expected in [1, 256], got %d", c.states_per_page);
  }
  const int64_t used = int64_t(c.states_per_page) * indexer_state_bytes(c.format, c.head_dim);
  if (c.page_stride_bytes < used || c.page_stride_bytes % 4 != 0) {
    return invalid(op, "cache.page_stride_bytes expected a multiple of 4 >= %lld (%d states of %lld bytes), got %lld",
                   static_cast<long long>(used), c.states_per_page,
                   static_cast<long long>(indexer_state_bytes(c.format, c.head_dim)),
                   static_cast<long long>(c.page_stride_bytes));
  }
  DSATTN_RETURN_IF_ERROR(check_pages(op, c.pages, c.page_stride_bytes, used));
  DSATTN_RETURN_IF_ERROR(check_input(op, "k", p.k, c.head_dim));
  DSATTN_RETURN_IF_ERROR(check_slot_mapping(op, p.slot_mapping, p.k.shape[0]));
  Backend b;
  DSATTN_RETURN_IF_ERROR(detail::resolve_backend(op, ex, {&p.k, &p.slot_mapping, &c.pages}, &b));
  if (p.k.shape[0] == 0) return Status::Ok();
  return b == Backend::kCuda ? cuda::write_indexer_cache(p, ex) : cpu::write_indexer_cache(p, ex);
}

Status write_latent_cache(const WriteLatentCacheParams& p, const Exec& ex) {
  const char* op = "write_latent_cache";
  DSATTN_RETURN_IF_ERROR(detail::check_latent_cache(op, "cache", p.cache));
  DSATTN_RETURN_IF_ERROR(check_input(op, "kv", p.kv, latent_dqk(p.cache.format)));
  DSATTN_RETURN_IF_ERROR(check_slot_mapping(op, p.slot_mapping, p.kv.shape[0]));
  Backend b;
  DSATTN_RETURN_IF_ERROR(detail::resolve_backend(op, ex, {&p.kv, &p.slot_mapping, &p.cache.pages}, &b));
  if (p.kv.shape[0] == 0) return Status::Ok();
  return b == Backend::kCuda ? cuda::write_latent_cache(p, ex) : cpu::write_latent_cache(p, ex);
}

}  // namespace dsattn
