// Shared pieces of the CPU reference for the indexer ops (SPEC §3.1-3.4): number decoding, a
// paged row scorer, and the one top-k selection routine used by both topk and paged_mqa_topk.
// Scores accumulate in double; a score is rounded to f32 once, when it is stored or ranked.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <string>
#include <vector>

#include "api/indexer_args.h"
#include "api/problems.h"
#include "dsattn/codecs.h"
#include "dsattn/ops.h"

namespace dsattn {
namespace cpu {

// Runs fn(), turning an exception (std::bad_alloc from a row buffer, say) into a Status.
template <typename Fn>
Status guarded(const char* op, Fn fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return Status(Code::kInternal, std::string(op) + ": cpu backend failed: " + e.what());
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- decoding
struct DecodeTables {
  double e4m3[256];
  double e2m1[16];
  double ue8m0[256];
};

inline const DecodeTables& decode_tables() {
  static const DecodeTables t = [] {
    DecodeTables d{};
    for (int i = 0; i < 256; ++i) d.e4m3[i] = codec::e4m3_to_f32(static_cast<uint8_t>(i));
    for (int i = 0; i < 16; ++i) d.e2m1[i] = codec::e2m1_to_f32(static_cast<uint8_t>(i));
    for (int i = 0; i < 256; ++i) d.ue8m0[i] = codec::ue8m0_to_f32(static_cast<uint8_t>(i));
    return d;
  }();
  return t;
}

// D E4M3 bytes -> doubles (no scale).
inline void decode_fp8(const uint8_t* v, int d, double* out) {
  const DecodeTables& t = decode_tables();
  for (int i = 0; i < d; ++i) out[i] = t.e4m3[v[i]];
}

// D/2 bytes of E2M1 pairs (low nibble = even element) + an int32 of D/32 UE8M0 block scales
// (byte i = scale of elements [32i, 32i+32)) -> D doubles e2m1 * 2^(e - 127).
inline void decode_mxfp4(const uint8_t* packed, uint32_t scales, int d, double* out) {
  const DecodeTables& t = decode_tables();
  for (int i = 0; i < d; i += 2) {
    const double s = t.ue8m0[(scales >> (8 * (i / 32))) & 0xFFu];
    const uint8_t b = packed[i / 2];
    out[i] = t.e2m1[b & 0xF] * s;
    out[i + 1] = t.e2m1[b >> 4] * s;
  }
}

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline float load_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

// scale * sum_h w[h] * relu(q[h] . k); q [H, D], w [H], k [D].
inline double indexer_score(const double* q, const double* w, const double* k, int heads, int d, double scale) {
  double acc = 0.0;
  for (int h = 0; h < heads; ++h) {
    const double* qh = q + static_cast<int64_t>(h) * d;
    // Four partial sums (d is a multiple of 32) give the FPU independent chains. FP8 products have
    // <= 8 significant bits within 2^-18..2^18, so the sum is exact in double whatever the order;
    // MXFP4 sums are exact too unless two blocks' scales differ by more than ~2^40.
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    for (int i = 0; i < d; i += 4) {
      s0 += qh[i] * k[i];
      s1 += qh[i + 1] * k[i + 1];
      s2 += qh[i + 2] * k[i + 2];
      s3 += qh[i + 3] * k[i + 3];
    }
    const double dot = (s0 + s1) + (s2 + s3);
    // NaN must survive relu: std::max(0, NaN) would drop it.
    if (!(dot <= 0.0)) acc += w[h] * dot;
  }
  return scale * acc;
}

// Decodes query row `row` (q [R, H, D] FP8 or [R, H, D/2] + q_scales [R, H] MXFP4) into q [H, D]
// and weights [R, H] into w [H].
inline void load_query_row(IndexerFormat f, const TensorView& q, const TensorView& q_scales,
                           const TensorView& weights, int64_t row, int heads, int d, double* qd, double* w) {
  const float* wp = weights.ptr<const float>() + row * heads;
  for (int h = 0; h < heads; ++h) w[h] = wp[h];
  if (f == IndexerFormat::kFp8) {
    decode_fp8(q.ptr<const uint8_t>() + row * heads * d, heads * d, qd);
    return;
  }
  const uint8_t* qp = q.ptr<const uint8_t>() + row * heads * (d / 2);
  const int32_t* sp = q_scales.ptr<const int32_t>() + row * heads;
  for (int h = 0; h < heads; ++h) {
    decode_mxfp4(qp + static_cast<int64_t>(h) * (d / 2), static_cast<uint32_t>(sp[h]), d, qd + static_cast<int64_t>(h) * d);
  }
}

// ---------------------------------------------------------------- paged scoring
// Scores the states of one query row at a time from a paged indexer cache (SPEC §2.1/§2.2).
// One per thread: it owns the decoded query and key buffers.
class PagedRowScorer {
 public:
  PagedRowScorer(const PagedIndexerArgs& a, const detail::PagedIndexerProblem& pb)
      : a_(a), pb_(pb), q_(static_cast<size_t>(pb.heads) * pb.head_dim), w_(pb.heads), k_(pb.head_dim) {}

  // Loads query row r; returns its context length (states [0, ctx) are defined).
  int64_t begin_row(int64_t r) {
    load_query_row(a_.cache.format, a_.q, a_.q_scales, a_.weights, r, pb_.heads, pb_.head_dim, q_.data(), w_.data());
    const TensorView& bt = a_.block_table;
    bt_row_ = bt.ptr<const int32_t>() + detail::host_row_request(a_, pb_, r) * bt.strides[0];
    return detail::host_row_context(a_, pb_, r);
  }

  // The row's page table (block_table row of its request).
  const int32_t* block_table_row() const { return bt_row_; }

  // Score of state t of the current row (double accumulation).
  double score(int64_t t) {
    const int S = pb_.states_per_page, D = pb_.head_dim;
    const int64_t page = bt_row_[t / S];
    const int s = static_cast<int>(t % S);
    const uint8_t* base = a_.cache.pages.ptr<const uint8_t>() + page * a_.cache.page_stride_bytes;
    const int64_t scale_off = indexer_scale_offset(a_.cache.format, S, D) + 4 * int64_t(s);
    double scale = 1.0;
    if (a_.cache.format == IndexerFormat::kFp8) {
      decode_fp8(base + int64_t(s) * D, D, k_.data());
      scale = load_f32(base + scale_off);
    } else {
      decode_mxfp4(base + int64_t(s) * (D / 2), load_u32(base + scale_off), D, k_.data());
    }
    return indexer_score(q_.data(), w_.data(), k_.data(), pb_.heads, D, scale);
  }

 private:
  const PagedIndexerArgs& a_;
  const detail::PagedIndexerProblem& pb_;
  std::vector<double> q_, w_, k_;
  const int32_t* bt_row_ = nullptr;
};

// ---------------------------------------------------------------- top-k selection
// Ranking of (value, index): a larger value first; NaN below every number (-inf included); equal
// values (and +0 / -0, and NaN vs NaN) rank the smaller index first. A strict total order, so the
// selection is deterministic.
inline bool topk_better(float va, int64_t ia, float vb, int64_t ib) {
  const bool na = std::isnan(va), nb = std::isnan(vb);
  if (na || nb) return na == nb ? ia < ib : nb;
  if (va != vb) return va > vb;
  return ia < ib;
}

// Selects the k best of row[0, len) (SPEC §3.3). idx_out [k] gets indices relative to row (-1
// padding when len < k); val_out (optional) [k] their values (-inf for padding).
// Order: sorted -> by rank (topk_better); unsorted -> ascending index (what the CPU gives; the
// API leaves it unspecified). Rows with len <= k give 0..len-1 (unsorted) before the padding.
// `scratch` is caller-owned (per thread) so a row costs no allocation once it is large enough.
inline void select_topk(const float* row, int64_t len, int k, bool sorted, int32_t* idx_out, float* val_out,
                        std::vector<int32_t>& scratch) {
  const int64_t take = std::min<int64_t>(len, k);
  auto better = [row](int32_t a, int32_t b) { return topk_better(row[a], a, row[b], b); };
  if (len <= k) {
    for (int64_t i = 0; i < len; ++i) idx_out[i] = static_cast<int32_t>(i);
    if (sorted) std::sort(idx_out, idx_out + len, better);
  } else {
    scratch.resize(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) scratch[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    std::nth_element(scratch.begin(), scratch.begin() + (k - 1), scratch.end(), better);
    if (sorted) {
      std::sort(scratch.begin(), scratch.begin() + k, better);
    } else {
      std::sort(scratch.begin(), scratch.begin() + k);
    }
    std::copy(scratch.begin(), scratch.begin() + k, idx_out);
  }
  for (int64_t i = take; i < k; ++i) idx_out[i] = -1;
  if (val_out != nullptr) {
    for (int64_t i = 0; i < k; ++i) {
      val_out[i] = i < take ? row[idx_out[i]] : -std::numeric_limits<float>::infinity();
    }
  }
}

// Slot-id transform of one selected row: slot = bt_row[i / S] * S + i % S; -1 stays -1.
inline void indices_to_slots(const int32_t* idx, int k, const int32_t* bt_row, int states_per_page, int32_t* slots) {
  for (int i = 0; i < k; ++i) {
    const int32_t t = idx[i];
    slots[i] = t < 0 ? -1
                     : static_cast<int32_t>(int64_t(bt_row[t / states_per_page]) * states_per_page + t % states_per_page);
  }
}

}  // namespace cpu
}  // namespace dsattn
