// CPU reference of sparse MLA (SPEC §3.5, §3.6), double accumulation. Parallel over query rows
// ((b, s) for decode, m for prefill); each row gathers and dequantizes its used tokens once, then
// runs an exact (two-pass) softmax per head. Semantics: see src/api/sparse_mla.cpp.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "api/validate.h"
#include "common/thread_pool.h"
#include "cpu/cpu_ops.h"
#include "dsattn/codecs.h"

namespace dsattn {
namespace cpu {
namespace {

float f32_at(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}
uint16_t u16_at(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// Attention of one query head over n gathered keys K [n, dqk] (values: the first dv entries).
// Writes dv bf16 outputs and the lse (without the sink).
void attend(const double* K, int64_t n, int dqk, int dv, const uint16_t* q, double sm_scale, bool has_sink,
            double sink, std::vector<double>* scratch, uint16_t* out, float* lse) {
  if (n == 0) {
    for (int d = 0; d < dv; ++d) out[d] = 0;
    *lse = -std::numeric_limits<float>::infinity();
    return;
  }
  std::vector<double>& s = *scratch;
  s.assign(static_cast<size_t>(n) + dv, 0.0);
  double* acc = s.data() + n;
  std::vector<double> qd(dqk);
  for (int d = 0; d < dqk; ++d) qd[d] = codec::bf16_to_f32(q[d]);
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    const double* k = K + j * dqk;
    double dot = 0.0;
    for (int d = 0; d < dqk; ++d) dot += qd[d] * k[d];
    s[j] = dot * sm_scale;
    if (s[j] > mx) mx = s[j];
  }
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    const double w = std::exp(s[j] - mx);
    sum += w;
    const double* k = K + j * dqk;
    for (int d = 0; d < dv; ++d) acc[d] += w * k[d];
  }
  const double l = mx + std::log(sum);
  // With a sink: softmax over the keys plus one extra logit sink[h] whose value row is zero.
  const double sink_factor = has_sink ? 1.0 / (1.0 + std::exp(sink - l)) : 1.0;
  for (int d = 0; d < dv; ++d) out[d] = codec::f32_to_bf16(static_cast<float>(acc[d] / sum * sink_factor));
  *lse = static_cast<float>(l);
}

// Used entries of one index row: the first `len` ids with 0 <= id < limit.
void collect(const int32_t* ids, int64_t len, int64_t limit, std::vector<int64_t>* out) {
  for (int64_t j = 0; j < len; ++j) {
    const int64_t id = ids[j];
    if (id >= 0 && id < limit) out->push_back(id);
  }
}

Status check_lengths(const char* op, const char* arg, const TensorView& t, int64_t topk) {
  if (!t.defined()) return Status::Ok();
  for (int64_t b = 0; b < t.shape[0]; ++b) {
    const int64_t v = t.ptr<const int32_t>()[b * t.strides[0]];
    if (v < 0 || v > topk) {
      return detail::invalid(op, "%s[%lld] expected in [0, %lld], got %lld", arg, static_cast<long long>(b),
                             static_cast<long long>(topk), static_cast<long long>(v));
    }
  }
  return Status::Ok();
}

int64_t length_of(const TensorView& t, int64_t row, int64_t topk) {
  return t.defined() ? t.ptr<const int32_t>()[row * t.strides[0]] : topk;
}

}  // namespace

// cpu_ops.h. The products are exact in double.
void dequant_latent(const LatentCache& c, int64_t slot, double* dst) {
  const int P = c.tokens_per_page;
  const uint8_t* page = c.pages.ptr<const uint8_t>() + (slot / P) * c.page_stride_bytes;
  const int off = static_cast<int>(slot % P);
  if (c.format == LatentFormat::kV4Fp8) {
    const uint8_t* data = page + int64_t(off) * kV4DataBytes;
    const uint8_t* sc = page + int64_t(P) * kV4DataBytes + int64_t(off) * kV4ScaleBytes;
    for (int i = 0; i < kV4NopeDim; ++i) {
      dst[i] = double(codec::e4m3_to_f32(data[i])) * double(codec::ue8m0_to_f32(sc[i / 64]));
    }
    for (int i = 0; i < kV4RopeDim; ++i) dst[kV4NopeDim + i] = codec::bf16_to_f32(u16_at(data + kV4NopeDim + 2 * i));
  } else {
    const uint8_t* tok = page + int64_t(off) * kV32TokenBytes;
    for (int i = 0; i < kV32NopeDim; ++i) {
      dst[i] = double(codec::e4m3_to_f32(tok[i])) * double(f32_at(tok + kV32NopeDim + 4 * (i / 128)));
    }
    for (int i = 0; i < kV32RopeDim; ++i) dst[kV32NopeDim + i] = codec::bf16_to_f32(u16_at(tok + 528 + 2 * i));
  }
}

Status sparse_mla_decode(const SparseMlaDecodeParams& p, const Exec& ex) {
  const char* op = "sparse_mla_decode";
  const int64_t B = p.q.shape[0], Sq = p.q.shape[1], Hq = p.q.shape[2];
  const int dqk = static_cast<int>(p.q.shape[3]);
  const int64_t topk = p.indices.shape[2];
  const bool has_extra = p.extra_indices.defined();
  const int64_t extra_topk = has_extra ? p.extra_indices.shape[2] : 0;
  DSATTN_RETURN_IF_ERROR(check_lengths(op, "topk_length", p.topk_length, topk));
  if (has_extra) DSATTN_RETURN_IF_ERROR(check_lengths(op, "extra_topk_length", p.extra_topk_length, extra_topk));
  const int64_t limit = p.cache.pages.shape[0] * p.cache.tokens_per_page;
  const int64_t extra_limit = has_extra ? p.extra_cache.pages.shape[0] * p.extra_cache.tokens_per_page : 0;
  const bool has_sink = p.attn_sink.defined();
  const double sm_scale = p.sm_scale;

  detail::parallel_for(B * Sq, ex.num_threads, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> main_ids, extra_ids;
    std::vector<double> K, scratch;
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / Sq, s = r % Sq;
      main_ids.clear();
      extra_ids.clear();
      const int32_t* idx = p.indices.ptr<const int32_t>() + b * p.indices.strides[0] + s * p.indices.strides[1];
      collect(idx, length_of(p.topk_length, b, topk), limit, &main_ids);
      if (has_extra) {
        const int32_t* eidx =
            p.extra_indices.ptr<const int32_t>() + b * p.extra_indices.strides[0] + s * p.extra_indices.strides[1];
        collect(eidx, length_of(p.extra_topk_length, b, extra_topk), extra_limit, &extra_ids);
      }
      const int64_t n = static_cast<int64_t>(main_ids.size() + extra_ids.size());
      K.resize(static_cast<size_t>(n) * dqk);
      int64_t j = 0;
      for (int64_t id : main_ids) dequant_latent(p.cache, id, K.data() + (j++) * dqk);
      for (int64_t id : extra_ids) dequant_latent(p.extra_cache, id, K.data() + (j++) * dqk);
      for (int64_t h = 0; h < Hq; ++h) {
        const uint16_t* q = p.q.ptr<const uint16_t>() + b * p.q.strides[0] + s * p.q.strides[1] + h * p.q.strides[2];
        uint16_t* out = p.out.ptr<uint16_t>() + b * p.out.strides[0] + s * p.out.strides[1] + h * p.out.strides[2];
        float* lse = p.lse.ptr<float>() + b * p.lse.strides[0] + s * p.lse.strides[1] + h * p.lse.strides[2];
        const double sink = has_sink ? p.attn_sink.ptr<const float>()[h * p.attn_sink.strides[0]] : 0.0;
        attend(K.data(), n, dqk, kLatentDv, q, sm_scale, has_sink, sink, &scratch, out, lse);
      }
    }
  });
  return Status::Ok();
}

Status sparse_mla_prefill(const SparseMlaPrefillParams& p, const Exec& ex) {
  const char* op = "sparse_mla_prefill";
  const int64_t M = p.q.shape[0], Hq = p.q.shape[1];
  const int dqk = static_cast<int>(p.q.shape[2]);
  const int64_t topk = p.indices.shape[1], Nk = p.kv.shape[0];
  DSATTN_RETURN_IF_ERROR(check_lengths(op, "topk_length", p.topk_length, topk));
  const bool has_sink = p.attn_sink.defined();
  const double sm_scale = p.sm_scale;

  detail::parallel_for(M, ex.num_threads, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> ids;
    std::vector<double> K, scratch;
    for (int64_t m = begin; m < end; ++m) {
      ids.clear();
      collect(p.indices.ptr<const int32_t>() + m * p.indices.strides[0], length_of(p.topk_length, m, topk), Nk, &ids);
      const int64_t n = static_cast<int64_t>(ids.size());
      K.resize(static_cast<size_t>(n) * dqk);
      for (int64_t j = 0; j < n; ++j) {
        const uint16_t* row = p.kv.ptr<const uint16_t>() + ids[j] * p.kv.strides[0];
        for (int d = 0; d < dqk; ++d) K[j * dqk + d] = codec::bf16_to_f32(row[d]);
      }
      for (int64_t h = 0; h < Hq; ++h) {
        const uint16_t* q = p.q.ptr<const uint16_t>() + m * p.q.strides[0] + h * p.q.strides[1];
        uint16_t* out = p.out.ptr<uint16_t>() + m * p.out.strides[0] + h * p.out.strides[1];
        float* lse = p.lse.ptr<float>() + m * p.lse.strides[0] + h * p.lse.strides[1];
        const double sink = has_sink ? p.attn_sink.ptr<const float>()[h * p.attn_sink.strides[0]] : 0.0;
        attend(K.data(), n, dqk, p.d_v, q, sm_scale, has_sink, sink, &scratch, out, lse);
      }
    }
  });
  return Status::Ok();
}

}  // namespace cpu
}  // namespace dsattn
