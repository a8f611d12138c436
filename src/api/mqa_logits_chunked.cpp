// mqa_logits_chunked: prefill logits in row chunks that fit a caller buffer (bounded memory).
// Each chunk is a plain mqa_logits call (same backends) on row slices. The whole call is validated
// first, as this op's: a chunk's own checks see only its slices, whose first dimension the slicing
// sets (ks / ke / weights shorter than q passed them, and their rows past the end were read), and
// would report errors as mqa_logits' with the chunk's row numbers.
#include <algorithm>
#include <cstdint>

#include "api/indexer_args.h"
#include "api/validate.h"
#include "dsattn/ops.h"

namespace dsattn {
namespace {

constexpr const char* kOp = "mqa_logits_chunked";

// Rows [r0, r0 + n) of a tensor (dim 0); absent tensors stay absent.
TensorView slice_rows(const TensorView& t, int64_t r0, int64_t n) {
  if (!t.defined()) return t;
  TensorView s = t;
  s.data = static_cast<uint8_t*>(t.data) + r0 * t.strides[0] * static_cast<int64_t>(dtype_size(t.dtype));
  s.shape[0] = n;
  return s;
}

struct Plan {
  int64_t rows = 0, width = 0, chunk_rows = 0;
};

Status plan(const MqaLogitsChunkedParams& p, const Exec& ex, Plan* out) {
  const MqaLogitsParams& b = p.base;
  DSATTN_RETURN_IF_ERROR(detail::check_present(kOp, "q", b.q));
  DSATTN_RETURN_IF_ERROR(detail::check_present(kOp, "k", b.k));
  if (p.logits_dtype != DType::kF32 && p.logits_dtype != DType::kBF16) {
    return detail::invalid(kOp, "logits_dtype expected f32 or bf16, got %s", dtype_name(p.logits_dtype));
  }
  if (p.width < 0) return detail::invalid(kOp, "width expected >= 0, got %lld", static_cast<long long>(p.width));
  const int64_t W = (b.compressed && p.width > 0) ? p.width : b.k.shape[0];
  if (b.compressed && p.width <= 0) return detail::invalid(kOp, "width expected > 0 with compressed output, got 0");
  const size_t row_bytes = static_cast<size_t>(std::max<int64_t>(W, 1)) * dtype_size(p.logits_dtype);
  if (p.chunk_buffer == nullptr) return detail::invalid(kOp, "chunk_buffer is a null pointer");
  const int64_t fit = static_cast<int64_t>(p.chunk_buffer_bytes / row_bytes);
  if (fit < 1) {
    return detail::invalid(kOp, "chunk_buffer_bytes expected >= %zu (one row of %lld logits), got %zu", row_bytes,
                           static_cast<long long>(W), p.chunk_buffer_bytes);
  }
  // The whole call, its logits [rows, W] standing for the chunks' (never accessed here).
  MqaLogitsParams whole = b;
  whole.logits = make_tensor(p.chunk_buffer, p.logits_dtype, {std::max<int64_t>(b.q.shape[0], 0), W}, b.q.device,
                             b.q.device_id);
  detail::MqaProblem pb;
  Backend be;
  DSATTN_RETURN_IF_ERROR(detail::prepare_mqa(kOp, whole, ex, &pb, &be));
  if (be == Backend::kCpu) DSATTN_RETURN_IF_ERROR(detail::check_mqa_host_values(kOp, whole, pb));
  out->rows = b.q.shape[0];
  out->width = W;
  out->chunk_rows = fit >= 8 ? fit / 8 * 8 : fit;  // whole 8-row groups when possible
  return Status::Ok();
}

MqaLogitsParams chunk_params(const MqaLogitsChunkedParams& p, const Plan& pl, int64_t r0, int64_t n) {
  MqaLogitsParams c = p.base;
  c.q = slice_rows(p.base.q, r0, n);
  c.q_scales = slice_rows(p.base.q_scales, r0, n);
  c.weights = slice_rows(p.base.weights, r0, n);
  c.ks = slice_rows(p.base.ks, r0, n);
  c.ke = slice_rows(p.base.ke, r0, n);
  c.logits = make_tensor(p.chunk_buffer, p.logits_dtype, {n, pl.width}, p.base.q.device, p.base.q.device_id);
  return c;
}

}  // namespace

Status mqa_logits_chunked_workspace(const MqaLogitsChunkedParams& p, const Exec& ex, size_t* bytes) {
  if (bytes == nullptr) return detail::invalid(kOp, "bytes (workspace size output) is a null pointer");
  Plan pl;
  DSATTN_RETURN_IF_ERROR(plan(p, ex, &pl));
  *bytes = 0;
  if (pl.rows == 0) return Status::Ok();
  return mqa_logits_workspace(chunk_params(p, pl, 0, std::min(pl.chunk_rows, pl.rows)), ex, bytes);
}

Status mqa_logits_chunked(const MqaLogitsChunkedParams& p, const Exec& ex) {
  Plan pl;
  DSATTN_RETURN_IF_ERROR(plan(p, ex, &pl));
  if (!p.on_chunk) return detail::invalid(kOp, "on_chunk callback is required");
  for (int64_t r0 = 0; r0 < pl.rows; r0 += pl.chunk_rows) {
    const int64_t n = std::min(pl.chunk_rows, pl.rows - r0);
    const MqaLogitsParams c = chunk_params(p, pl, r0, n);
    DSATTN_RETURN_IF_ERROR(mqa_logits(c, ex));
    DSATTN_RETURN_IF_ERROR(p.on_chunk(r0, n, c.logits));
  }
  return Status::Ok();
}

}  // namespace dsattn
