// CPU reference of paged_mqa_logits (SPEC §3.1) and mqa_logits (SPEC §3.2): double accumulation,
// one rounding to f32 per logit (then RNE to bf16 for bf16 outputs). Rows run in parallel.
#include <limits>
#include <vector>

#include "api/validate.h"
#include "common/thread_pool.h"
#include "cpu/cpu_ops.h"
#include "cpu/indexer_ref_util.h"

namespace dsattn {
namespace cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Writes logits of one output row: value(c) for columns [c0, c1), -inf on the rest when clean.
template <typename ValueFn>
void write_row(const TensorView& out, int64_t row, int64_t c0, int64_t c1, bool clean, ValueFn value) {
  const int64_t width = out.shape[1];
  if (out.dtype == DType::kF32) {
    float* o = out.ptr<float>() + row * out.strides[0];
    for (int64_t c = c0; c < c1; ++c) o[c] = value(c);
    if (clean) {
      for (int64_t c = 0; c < c0; ++c) o[c] = kNegInf;
      for (int64_t c = c1; c < width; ++c) o[c] = kNegInf;
    }
  } else {
    uint16_t* o = out.ptr<uint16_t>() + row * out.strides[0];
    for (int64_t c = c0; c < c1; ++c) o[c] = codec::f32_to_bf16(value(c));
    if (clean) {
      const uint16_t ninf = codec::f32_to_bf16(kNegInf);
      for (int64_t c = 0; c < c0; ++c) o[c] = ninf;
      for (int64_t c = c1; c < width; ++c) o[c] = ninf;
    }
  }
}

}  // namespace

Status paged_mqa_logits(const PagedMqaLogitsParams& p, const detail::PagedIndexerProblem& pb, const Exec& ex) {
  return guarded("paged_mqa_logits", [&] {
    detail::parallel_for(pb.rows, ex.num_threads, [&](int64_t r0, int64_t r1) {
      PagedRowScorer scorer(p, pb);
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t ctx = scorer.begin_row(r);
        write_row(p.logits, r, 0, ctx, p.clean, [&](int64_t t) { return static_cast<float>(scorer.score(t)); });
      }
    });
  });
}

Status mqa_logits(const MqaLogitsParams& p, const detail::MqaProblem& pb, const Exec& ex) {
  return guarded("mqa_logits", [&] {
    detail::parallel_for(pb.rows, ex.num_threads, [&](int64_t m0, int64_t m1) {
      const int H = pb.heads, D = pb.head_dim;
      std::vector<double> q(static_cast<size_t>(H) * D), w(H), k(D);
      const bool fp8 = p.format == IndexerFormat::kFp8;
      const int64_t row_bytes = fp8 ? D : D / 2;
      const uint8_t* kp = p.k.ptr<const uint8_t>();
      auto score = [&](int64_t t) {
        double scale = 1.0;
        if (fp8) {
          decode_fp8(kp + t * row_bytes, D, k.data());
          scale = p.k_scales.ptr<const float>()[t];
        } else {
          decode_mxfp4(kp + t * row_bytes, static_cast<uint32_t>(p.k_scales.ptr<const int32_t>()[t]), D, k.data());
        }
        return static_cast<float>(indexer_score(q.data(), w.data(), k.data(), H, D, scale));
      };
      for (int64_t m = m0; m < m1; ++m) {
        load_query_row(p.format, p.q, p.q_scales, p.weights, m, H, D, q.data(), w.data());
        const int64_t ks = p.ks.ptr<const int32_t>()[m], ke = p.ke.ptr<const int32_t>()[m];
        if (p.compressed) {
          write_row(p.logits, m, 0, ke - ks, p.clean, [&](int64_t c) { return score(ks + c); });
        } else {
          write_row(p.logits, m, ks, ke, p.clean, score);
        }
      }
    });
  });
}

}  // namespace cpu
}  // namespace dsattn
