// Host decoders of the cache byte layouts (SPEC §2), written straight from the spec with the public
// codecs. The demo uses them for checks that do not go through the library's own readers: writer
// round trips, and logits / attention recomputed from the cache bytes for a few sampled rows.
#pragma once
#include <cstdint>
#include <cstring>

#include "dsattn/codecs.h"
#include "dsattn/formats.h"

namespace dsattn {
namespace cli {

// Indexer state `slot` (= page * S + offset) of a page-major cache at `base`; writes D floats.
inline void decode_indexer_state(const uint8_t* base, IndexerFormat fmt, int states_per_page,
                                 int head_dim, int64_t page_stride, int64_t slot, float* out) {
  const int64_t page = slot / states_per_page, s = slot % states_per_page;
  const uint8_t* p = base + page * page_stride;
  const uint8_t* scale_at = p + indexer_scale_offset(fmt, states_per_page, head_dim) + 4 * s;
  if (fmt == IndexerFormat::kFp8) {
    const uint8_t* v = p + s * head_dim;  // [D] E4M3
    float scale;
    std::memcpy(&scale, scale_at, 4);
    for (int d = 0; d < head_dim; ++d) out[d] = codec::e4m3_to_f32(v[d]) * scale;
  } else {
    const uint8_t* v = p + s * (head_dim / 2);  // [D/2] E2M1 pairs, low nibble = even element
    for (int d = 0; d < head_dim; ++d) {
      const uint8_t nib = (d % 2 == 0) ? (v[d / 2] & 0xF) : (v[d / 2] >> 4);
      out[d] = codec::e2m1_to_f32(nib) * codec::ue8m0_to_f32(scale_at[d / 32]);
    }
  }
}

// Latent token `slot` (= page * P + offset); writes latent_dqk(fmt) floats (NoPE then RoPE).
inline void decode_latent_token(const uint8_t* base, LatentFormat fmt, int tokens_per_page,
                                int64_t page_stride, int64_t slot, float* out) {
  const int64_t page = slot / tokens_per_page, t = slot % tokens_per_page;
  const uint8_t* p = base + page * page_stride;
  if (fmt == LatentFormat::kV4Fp8) {
    const uint8_t* rec = p + t * kV4DataBytes;                                      // [576]
    const uint8_t* sc = p + int64_t(tokens_per_page) * kV4DataBytes + t * kV4ScaleBytes;  // [8]
    for (int d = 0; d < kV4NopeDim; ++d)
      out[d] = codec::e4m3_to_f32(rec[d]) * codec::ue8m0_to_f32(sc[d / 64]);
    for (int i = 0; i < kV4RopeDim; ++i) {
      uint16_t h;
      std::memcpy(&h, rec + kV4NopeDim + 2 * i, 2);
      out[kV4NopeDim + i] = codec::bf16_to_f32(h);
    }
  } else {
    const uint8_t* rec = p + t * kV32TokenBytes;  // [656]
    for (int d = 0; d < kV32NopeDim; ++d) {
      float scale;
      std::memcpy(&scale, rec + kV32NopeDim + 4 * (d / 128), 4);
      out[d] = codec::e4m3_to_f32(rec[d]) * scale;
    }
    for (int i = 0; i < kV32RopeDim; ++i) {
      uint16_t h;
      std::memcpy(&h, rec + kV32NopeDim + 16 + 2 * i, 2);
      out[kV32NopeDim + i] = codec::bf16_to_f32(h);
    }
  }
}

}  // namespace cli
}  // namespace dsattn
