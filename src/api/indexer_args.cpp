#include "api/indexer_args.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "api/validate.h"

namespace dsattn {
namespace detail {
namespace {

using ll = long long;

// Element i of a 1-D i32 tensor (host).
int32_t at1(const TensorView& t, int64_t i) { return t.ptr<const int32_t>()[i * t.strides[0]]; }

Status check_contiguous_tensor(const char* op, const char* arg, const TensorView& t, DType dtype,
                               std::initializer_list<int64_t> shape) {
  DSATTN_RETURN_IF_ERROR(check_tensor(op, arg, t, dtype, shape));
  return check_contiguous(op, arg, t);
}

// 2-D tensor whose rows may be strided but whose last dim is contiguous (logits, block tables, outputs).
Status check_row_strided(const char* op, const char* arg, const TensorView& t, DType dtype,
                         std::initializer_list<int64_t> shape) {
  DSATTN_RETURN_IF_ERROR(check_tensor(op, arg, t, dtype, shape));
  return check_last_dim_contiguous(op, arg, t);
}

Status check_format(const char* op, IndexerFormat f) {
  if (f != IndexerFormat::kFp8 && f != IndexerFormat::kMxfp4) {
    return invalid(op, "kv_cache format expected fp8 or mxfp4, got %d", static_cast<int>(f));
  }
  return Status::Ok();
}

Status check_heads(const char* op, const char* arg, int64_t h) {
  if (!indexer_heads_supported(h)) {
    return invalid(op, "%s heads expected 8, 16, 24, 32, 48 or 64, got %lld", arg, static_cast<ll>(h));
  }
  return Status::Ok();
}

}  // namespace

bool indexer_heads_supported(int64_t h) {
  return h == 8 || h == 16 || h == 24 || h == 32 || h == 48 || h == 64;
}
bool indexer_head_dim_supported(int64_t d) { return d == 32 || d == 64 || d == 128; }

// ---------------------------------------------------------------- paged indexer
Status validate_paged_lens(const char* op, const TensorView& context_lens, const TensorView& row_request,
                           int64_t batch, int next_n, int64_t rows, PagedIndexerProblem* out) {
  DSATTN_RETURN_IF_ERROR(check_present(op, "context_lens", context_lens));
  DSATTN_RETURN_IF_ERROR(check_dtype(op, "context_lens", context_lens, DType::kI32));
  DSATTN_RETURN_IF_ERROR(check_strides_nonneg(op, "context_lens", context_lens));
  if (!row_request.defined()) {
    if (next_n < 1 || next_n > kMaxNextN) {
      return invalid(op, "next_n expected 1..%d, got %d", kMaxNextN, next_n);
    }
    if (context_lens.ndim == 2) {
      DSATTN_RETURN_IF_ERROR(check_shape(op, "context_lens", context_lens, {batch, next_n}));
      out->lens_per_row = true;
    } else if (context_lens.ndim == 1) {
      DSATTN_RETURN_IF_ERROR(check_shape(op, "context_lens", context_lens, {batch}));
      out->lens_per_row = false;
    } else {
      return invalid(op, "context_lens rank expected 1 ([B]) or 2 ([B, N]), got %d (shape %s)",
                     context_lens.ndim, shape_str(context_lens).c_str());
    }
    out->varlen = false;
    out->next_n = next_n;
    out->batch = context_lens.shape[0];
    out->rows = context_lens.shape[0] * next_n;
    return Status::Ok();
  }
  if (next_n != 1) return invalid(op, "next_n expected 1 in varlen mode (row_request given), got %d", next_n);
  DSATTN_RETURN_IF_ERROR(check_contiguous_tensor(op, "row_request", row_request, DType::kI32, {rows}));
  DSATTN_RETURN_IF_ERROR(check_shape(op, "context_lens", context_lens, {row_request.shape[0]}));
  out->varlen = true;
  out->lens_per_row = true;
  out->next_n = 1;
  out->rows = row_request.shape[0];
  return Status::Ok();
}

Status validate_paged_indexer(const char* op, const PagedIndexerArgs& a, PagedIndexerProblem* out) {
  PagedIndexerProblem pb;
  const IndexerCache& c = a.cache;
  DSATTN_RETURN_IF_ERROR(check_format(op, c.format));
  const bool fp4 = c.format == IndexerFormat::kMxfp4;
  const bool varlen = a.row_request.defined();

  // q: [B, N, H, D(/2)] or varlen [R, H, D(/2)]
  DSATTN_RETURN_IF_ERROR(check_present(op, "q", a.q));
  DSATTN_RETURN_IF_ERROR(check_dtype(op, "q", a.q, fp4 ? DType::kU8 : DType::kF8E4M3));
  DSATTN_RETURN_IF_ERROR(check_ndim(op, "q", a.q, varlen ? 3 : 4));
  int64_t batch = -1, rows = 0, n = 1, h = 0;
  if (varlen) {
    rows = a.q.shape[0];
    h = a.q.shape[1];
  } else {
    batch = a.q.shape[0];
    n = a.q.shape[1];
    h = a.q.shape[2];
    rows = batch * n;
    if (n < 1 || n > kMaxNextN) {
      return invalid(op, "q next_n (dim 1) expected 1..%d, got %lld", kMaxNextN, static_cast<ll>(n));
    }
  }
  DSATTN_RETURN_IF_ERROR(check_heads(op, "q", h));
  if (c.states_per_page < 1 || c.states_per_page > kMaxStatesPerPage) {
    return invalid(op, "kv_cache states_per_page expected 1..%d, got %d", kMaxStatesPerPage, c.states_per_page);
  }
  if (!indexer_head_dim_supported(c.head_dim)) {
    return invalid(op, "kv_cache head_dim expected 32, 64 or 128, got %d", c.head_dim);
  }
  const int64_t d = c.head_dim;
  const int64_t q_last = a.q.shape[a.q.ndim - 1];
  if (fp4 && q_last != d / 2) {
    return invalid(op, "q last dim expected %lld (kv_cache head_dim %lld / 2, packed E2M1), got %lld",
                   static_cast<ll>(d / 2), static_cast<ll>(d), static_cast<ll>(q_last));
  }
  if (!fp4 && q_last != d) {
    return invalid(op, "q last dim expected %lld (kv_cache head_dim), got %lld", static_cast<ll>(d),
                   static_cast<ll>(q_last));
  }
  DSATTN_RETURN_IF_ERROR(check_strides_nonneg(op, "q", a.q));
  DSATTN_RETURN_IF_ERROR(check_contiguous(op, "q", a.q));

  if (fp4) {
    if (varlen) {
      DSATTN_RETURN_IF_ERROR(check_contiguous_tensor(op, "q_scales", a.q_scales, DType::kI32, {rows, h}));
    } else {
      DSATTN_RETURN_IF_ERROR(check_contiguous_tensor(op, "q_scales", a.q_scales, DType::kI32, {batch, n, h}));
    }
  } else if (a.q_scales.defined()) {
    return invalid(op, "q_scales is only used with the mxfp4 kv_cache format, got it with fp8");
  }
  DSATTN_RETURN_IF_ERROR(check_contiguous_tensor(op, "weights", a.weights, DType::kF32, {rows, h}));

  // kv_cache: page p at pages.data + p * page_stride_bytes.
  const int64_t state_bytes = indexer_state_bytes(c.format, c.head_dim);
  const int64_t need = int64_t(c.states_per_page) * state_bytes;
  if (c.page_stride_bytes < need) {
    return invalid(op, "kv_cache page_stride %lld B < %d states x %lld B = %lld B", static_cast<ll>(c.page_stride_bytes),
                   c.states_per_page, static_cast<ll>(state_bytes), static_cast<ll>(need));
  }
  if (c.page_stride_bytes % 4 != 0) {
    return invalid(op, "kv_cache page_stride %lld B expected a multiple of 4", static_cast<ll>(c.page_stride_bytes));
  }
  const TensorView& pg = c.pages;
  DSATTN_RETURN_IF_ERROR(check_present(op, "kv_cache pages", pg));
  DSATTN_RETURN_IF_ERROR(check_dtype(op, "kv_cache pages", pg, DType::kU8));
  DSATTN_RETURN_IF_ERROR(check_ndim(op, "kv_cache pages", pg, 2));
  if (pg.shape[1] < need) {
    return invalid(op, "kv_cache pages shape expected [*, >= %lld] (%d states x %lld B), got %s", static_cast<ll>(need),
                   c.states_per_page, static_cast<ll>(state_bytes), shape_str(pg).c_str());
  }
  DSATTN_RETURN_IF_ERROR(check_last_dim_contiguous(op, "kv_cache pages", pg));
  if (pg.shape[0] > 1 && pg.strides[0] != c.page_stride_bytes) {
    return invalid(op, "kv_cache pages stride 0 expected %lld (page_stride), got %lld",
                   static_cast<ll>(c.page_stride_bytes), static_cast<ll>(pg.strides[0]));
  }
  if (reinterpret_cast<uintptr_t>(pg.data) % 4 != 0) {
    return invalid(op, "kv_cache pages data pointer expected 4-byte aligned, got %p", pg.data);
  }

  DSATTN_RETURN_IF_ERROR(check_row_strided(op, "block_table", a.block_table, DType::kI32, {batch, -1}));
  DSATTN_RETURN_IF_ERROR(validate_paged_lens(op, a.context_lens, a.row_request, batch, static_cast<int>(n),
                                             varlen ? rows : -1, &pb));
  if (a.schedule.defined()) {
    DSATTN_RETURN_IF_ERROR(check_present(op, "schedule", a.schedule));
    DSATTN_RETURN_IF_ERROR(check_dtype(op, "schedule", a.schedule, DType::kI32));
    DSATTN_RETURN_IF_ERROR(check_ndim(op, "schedule", a.schedule, 1));
    DSATTN_RETURN_IF_ERROR(check_contiguous(op, "schedule", a.schedule));
  }

  pb.rows = rows;
  pb.batch = a.block_table.shape[0];
  pb.heads = static_cast<int>(h);
  pb.head_dim = c.head_dim;
  pb.states_per_page = c.states_per_page;
  pb.num_pages = pg.shape[0];
  pb.max_pages = a.block_table.shape[1];
  pb.max_context = 0;
  *out = pb;
  return Status::Ok();
}

int64_t host_row_context(const PagedIndexerArgs& a, const PagedIndexerProblem& pb, int64_t r) {
  const TensorView& l = a.context_lens;
  const int64_t s1 = l.ndim == 2 ? l.strides[1] : 0;
  return row_context(pb, l.ptr<const int32_t>(), l.strides[0], s1, r / pb.next_n, r % pb.next_n, r);
}

int64_t host_row_request(const PagedIndexerArgs& a, const PagedIndexerProblem& pb, int64_t r) {
  return pb.varlen ? at1(a.row_request, r) : r / pb.next_n;
}

Status check_paged_host_values(const char* op, const PagedIndexerArgs& a, const PagedIndexerProblem& pb,
                               int64_t logits_width) {
  const int64_t S = pb.states_per_page;
  const int64_t cap = pb.max_pages * S;
  if (pb.varlen) {
    for (int64_t r = 0; r < pb.rows; ++r) {
      const int32_t v = at1(a.row_request, r);
      if (v < 0 || v >= pb.batch) {
        return invalid(op, "row_request[%lld] = %d out of range [0, %lld) (block_table rows)", static_cast<ll>(r), v,
                       static_cast<ll>(pb.batch));
      }
    }
  }
  // Raw length values, named by their position in context_lens.
  const TensorView& l = a.context_lens;
  const int32_t* lp = l.ptr<const int32_t>();
  const int64_t n0 = l.shape[0], n1 = l.ndim == 2 ? l.shape[1] : 1;
  for (int64_t i = 0; i < n0; ++i) {
    for (int64_t j = 0; j < n1; ++j) {
      const int32_t v = lp[i * l.strides[0] + (l.ndim == 2 ? j * l.strides[1] : 0)];
      if (v >= 0 && v <= cap && (logits_width < 0 || v <= logits_width)) continue;
      const std::string name = l.ndim == 2 ? strf("context_lens[%lld, %lld]", static_cast<ll>(i), static_cast<ll>(j))
                                           : strf("context_lens[%lld]", static_cast<ll>(i));
      if (v < 0) return invalid(op, "%s = %d is negative", name.c_str(), v);
      if (v > cap) {
        return invalid(op, "%s = %d exceeds block_table capacity %lld pages x %lld states = %lld", name.c_str(), v,
                       static_cast<ll>(pb.max_pages), static_cast<ll>(S), static_cast<ll>(cap));
      }
      return invalid(op, "%s = %d exceeds logits width %lld", name.c_str(), v, static_cast<ll>(logits_width));
    }
  }
  // Block-table entries of every page some row reads.
  std::vector<int64_t> pages_read(static_cast<size_t>(pb.batch), 0);
  for (int64_t r = 0; r < pb.rows; ++r) {
    const int64_t b = host_row_request(a, pb, r);
    const int64_t np = (host_row_context(a, pb, r) + S - 1) / S;
    pages_read[static_cast<size_t>(b)] = std::max(pages_read[static_cast<size_t>(b)], np);
  }
  const TensorView& bt = a.block_table;
  for (int64_t b = 0; b < pb.batch; ++b) {
    for (int64_t i = 0; i < pages_read[static_cast<size_t>(b)]; ++i) {
      const int32_t e = bt.ptr<const int32_t>()[b * bt.strides[0] + i];
      if (e < 0 || e >= pb.num_pages) {
        return invalid(op, "block_table[%lld, %lld] = %d out of range [0, %lld) (kv_cache pages)", static_cast<ll>(b),
                       static_cast<ll>(i), e, static_cast<ll>(pb.num_pages));
      }
    }
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- topk
Status check_output_rows(const char* op, const char* arg, const TensorView& t) {
  if (t.ndim == 2 && t.shape[0] > 1 && t.shape[1] > 1 && t.strides[0] < t.shape[1]) {
    return invalid(op, "%s row stride expected >= %lld (the row width; rows must not overlap), got %lld", arg,
                   static_cast<ll>(t.shape[1]), static_cast<ll>(t.strides[0]));
  }
  return Status::Ok();
}

Status validate_topk_outputs(const char* op, int k, int64_t rows, const TensorView& indices,
                             const TensorView& values, const TensorView& slot_ids) {
  if (k < 1 || k > kMaxTopk) return invalid(op, "k expected 1..%d, got %d", kMaxTopk, k);
  DSATTN_RETURN_IF_ERROR(check_row_strided(op, "indices", indices, DType::kI32, {rows, k}));
  DSATTN_RETURN_IF_ERROR(check_output_rows(op, "indices", indices));
  if (values.defined()) {
    DSATTN_RETURN_IF_ERROR(check_row_strided(op, "values", values, DType::kF32, {rows, k}));
    DSATTN_RETURN_IF_ERROR(check_output_rows(op, "values", values));
  }
  if (slot_ids.defined()) {
    DSATTN_RETURN_IF_ERROR(check_row_strided(op, "slot_ids", slot_ids, DType::kI32, {rows, k}));
    DSATTN_RETURN_IF_ERROR(check_output_rows(op, "slot_ids", slot_ids));
  }
  return Status::Ok();
}

Status validate_topk(const char* op, const TopkParams& p, TopkProblem* out) {
  DSATTN_RETURN_IF_ERROR(check_present(op, "logits", p.logits));
  DSATTN_RETURN_IF_ERROR(check_dtype_in(op, "logits", p.logits, {DType::kF32, DType::kBF16}));
  DSATTN_RETURN_IF_ERROR(check_ndim(op, "logits", p.logits, 2));
  DSATTN_RETURN_IF_ERROR(check_strides_nonneg(op, "logits", p.logits));
  DSATTN_RETURN_IF_ERROR(check_last_dim_contiguous(op, "logits", p.logits));
  const int64_t rows = p.logits.shape[0], width = p.logits.shape[1];
  if (p.starts.defined()) DSATTN_RETURN_IF_ERROR(check_contiguous_tensor(op, "starts", p.starts, DType::kI32, {rows}));
  if (p.ends.defined()) DSATTN_RETURN_IF_ERROR(check_contiguous_tensor(op, "ends", p.ends, DType::kI32, {rows}));
  DSATTN_RETURN_IF_ERROR(validate_topk_outputs(op, p.k, rows, p.indices, p.values, p.slot_ids));

  const bool slots = p.block_table.defined() || p.slot_ids.defined();
  if (slots) {
    if (!p.block_table.defined()) return invalid(op, "slot_ids needs block_table (the slot-id transform), got none");
    if (!p.slot_ids.defined()) return invalid(op, "block_table given but the slot_ids output is missing");
    DSATTN_RETURN_IF_ERROR(check_row_strided(op, "block_table", p.block_table, DType::kI32, {-1, -1}));
    if (p.states_per_page < 1 || p.states_per_page > kMaxStatesPerPage) {
      return invalid(op, "states_per_page expected 1..%d, got %d", kMaxStatesPerPage, p.states_per_page);
    }
    if (p.row_request.defined()) {
      if (p.next_n != 1) return invalid(op, "next_n expected 1 when row_request is given, got %d", p.next_n);
      DSATTN_RETURN_IF_ERROR(check_contiguous_tensor(op, "row_request", p.row_request, DType::kI32, {rows}));
    } else {
      if (p.next_n < 1 || p.next_n > kMaxNextN) return invalid(op, "next_n expected 1..%d, got %d", kMaxNextN, p.next_n);
      const int64_t need = (rows + p.next_n - 1) / p.next_n;
      if (p.block_table.shape[0] < need) {
        return invalid(op, "block_table rows expected >= %lld (ceil(rows %lld / next_n %d)), got %lld",
                       static_cast<ll>(need), static_cast<ll>(rows), p.next_n, static_cast<ll>(p.block_table.shape[0]));
      }
    }
  } else if (p.row_request.defined()) {
    return invalid(op, "row_request is only used with the slot-id transform (block_table, slot_ids), got no block_table");
  }
  out->rows = rows;
  out->width = width;
  out->k = p.k;
  out->slot_transform = slots;
  return Status::Ok();
}

Status check_topk_host_values(const char* op, const TopkParams& p, const TopkProblem& pb) {
  const int64_t S = p.states_per_page;
  for (int64_t r = 0; r < pb.rows; ++r) {
    const int64_t s = p.starts.defined() ? at1(p.starts, r) : 0;
    const int64_t e = p.ends.defined() ? at1(p.ends, r) : pb.width;
    if (s < 0 || s > e || e > pb.width) {
      return invalid(op, "row %lld bounds [%lld, %lld) expected 0 <= start <= end <= %lld", static_cast<ll>(r),
                     static_cast<ll>(s), static_cast<ll>(e), static_cast<ll>(pb.width));
    }
    if (!pb.slot_transform) continue;
    const TensorView& bt = p.block_table;
    int64_t b = r / p.next_n;
    if (p.row_request.defined()) {
      b = at1(p.row_request, r);
      if (b < 0 || b >= bt.shape[0]) {
        return invalid(op, "row_request[%lld] = %lld out of range [0, %lld) (block_table rows)", static_cast<ll>(r),
                       static_cast<ll>(b), static_cast<ll>(bt.shape[0]));
      }
    }
    const int64_t cap = bt.shape[1] * S;
    if (e - s > cap) {
      return invalid(op, "row %lld length %lld exceeds block_table capacity %lld pages x %lld states = %lld",
                     static_cast<ll>(r), static_cast<ll>(e - s), static_cast<ll>(bt.shape[1]), static_cast<ll>(S),
                     static_cast<ll>(cap));
    }
    for (int64_t i = 0; i < (e - s + S - 1) / S; ++i) {
      const int32_t v = bt.ptr<const int32_t>()[b * bt.strides[0] + i];
      if (v < 0) {
        return invalid(op, "block_table[%lld, %lld] = %d is negative", static_cast<ll>(b), static_cast<ll>(i), v);
      }
    }
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- mqa_logits
Status validate_mqa(const char* op, const MqaLogitsParams& p, MqaProblem* out) {
  DSATTN_RETURN_IF_ERROR(check_format(op, p.format));
  const bool fp4 = p.format == IndexerFormat::kMxfp4;
  const DType vt = fp4 ? DType::kU8 : DType::kF8E4M3;
  DSATTN_RETURN_IF_ERROR(check_present(op, "q", p.q));
  DSATTN_RETURN_IF_ERROR(check_dtype(op, "q", p.q, vt));
  DSATTN_RETURN_IF_ERROR(check_ndim(op, "q", p.q, 3));
  const int64_t m = p.q.shape[0], h = p.q.shape[1];
  const int64_t d = fp4 ? 2 * p.q.shape[2] : p.q.shape[2];
  DSATTN_RETURN_IF_ERROR(check_heads(op, "q", h));
  if (!indexer_head_dim_supported(d)) {
    if (fp4) {
      return invalid(op, "q last dim expected 16, 32 or 64 (head_dim 32, 64 or 128 / 2, packed E2M1), got %lld",
                     static_cast<ll>(p.q.shape[2]));
    }
    return invalid(op, "q head_dim (last dim) expected 32, 64 or 128, got %lld", static_cast<ll>(d));
  }
  DSATTN_RETURN_IF_ERROR(check_strides_nonneg(op, "q", p.q));
  DSATTN_RETURN_IF_ERROR(check_contiguous(op, "q", p.q));
  if (fp4) {
    DSATTN_RETURN_IF_ERROR(check_contiguous_tensor(op, "q_scales", p.q_scales, DType::kI32, {m, h}));
  } else if (p.q_scales.defined()) {
    return invalid(op, "q_scales is only used with the mxfp4 format, got it with fp8");
  }
  DSATTN_RETURN_IF_ERROR(check_contiguous_tensor(op, "weights", p.weights, DType::kF32, {m, h}));
  DSATTN_RETURN_IF_ERROR(check_contiguous_tensor(op, "k", p.k, vt, {-1, fp4 ? d / 2 : d}));
  const int64_t nk = p.k.shape[0];
  DSATTN_RETURN_IF_ERROR(check_contiguous_tensor(op, "k_scales", p.k_scales, fp4 ? DType::kI32 : DType::kF32, {nk}));
  DSATTN_RETURN_IF_ERROR(check_contiguous_tensor(op, "ks", p.ks, DType::kI32, {m}));
  DSATTN_RETURN_IF_ERROR(check_contiguous_tensor(op, "ke", p.ke, DType::kI32, {m}));
  DSATTN_RETURN_IF_ERROR(check_present(op, "logits", p.logits));
  DSATTN_RETURN_IF_ERROR(check_dtype_in(op, "logits", p.logits, {DType::kF32, DType::kBF16}));
  DSATTN_RETURN_IF_ERROR(check_shape(op, "logits", p.logits, {m, p.compressed ? -1 : nk}));
  DSATTN_RETURN_IF_ERROR(check_strides_nonneg(op, "logits", p.logits));
  DSATTN_RETURN_IF_ERROR(check_last_dim_contiguous(op, "logits", p.logits));
  DSATTN_RETURN_IF_ERROR(check_output_rows(op, "logits", p.logits));
  out->rows = m;
  out->keys = nk;
  out->heads = static_cast<int>(h);
  out->head_dim = static_cast<int>(d);
  out->out_width = p.logits.shape[1];
  return Status::Ok();
}

Status check_mqa_host_values(const char* op, const MqaLogitsParams& p, const MqaProblem& pb) {
  for (int64_t m = 0; m < pb.rows; ++m) {
    const int64_t s = at1(p.ks, m), e = at1(p.ke, m);
    if (s < 0 || s > e || e > pb.keys) {
      return invalid(op, "row %lld window [%lld, %lld) expected 0 <= ks <= ke <= %lld", static_cast<ll>(m),
                     static_cast<ll>(s), static_cast<ll>(e), static_cast<ll>(pb.keys));
    }
    if (p.compressed && e - s > pb.out_width) {
      return invalid(op, "row %lld window length %lld exceeds compressed logits width %lld", static_cast<ll>(m),
                     static_cast<ll>(e - s), static_cast<ll>(pb.out_width));
    }
  }
  return Status::Ok();
}

}  // namespace detail
}  // namespace dsattn
