// Quantize-and-insert rules of the cache writers (SPEC §2, §3.7), shared verbatim by the CPU writer
// (src/cpu/cache_writer_ref.cpp) and the CUDA kernel (src/cuda/common/cache_writer_kernel.cuh), so
// both produce the same bytes by construction. Everything is plain float arithmetic: IEEE division
// (__fdiv_rn on the device, whatever the compiler flags), exact max, the shared codecs.
//
// A token is written as independent "units" (one quantization group each, plus one unit for the
// bf16 RoPE part of a latent token); the CPU runs them in a loop, the GPU one thread per unit.
//
// Scale rules (amax = max |x| over the group, NaN inputs ignored; a group of zeros has amax 0):
//  * indexer FP8 / latent V4:  e = ue8m0_ceil(amax / 448), scale 2^(e-127) (amax 0 -> e = 127, scale 1)
//    indexer FP8 stores the scale as fp32, latent V4 stores the UE8M0 byte e.
//  * indexer MXFP4:            e = ue8m0_ceil(amax / 6) per 32 values, E2M1 of x / 2^(e-127).
//  * latent V3.2:              scale = max(amax / 448, FLT_MIN) stored as raw fp32 (vLLM's
//    fp8_ds_mla writer, concat_and_cache_ds_mla); amax 0 -> FLT_MIN.
//  Values are E4M3(x / scale) with round-to-nearest-even and saturation to +-448; a NaN input value
//  becomes the positive E4M3 NaN code 0x7F (whatever its sign) and does not change the group's scale.
#pragma once
#include <math.h>

#include <cstdint>

#include "dsattn/codecs.h"
#include "dsattn/formats.h"

namespace dsattn {
namespace quant {

constexpr float kFltMin = 1.17549435082228750797e-38f;  // FLT_MIN, the V3.2 scale floor
constexpr float kE2M1Max = 6.0f;
constexpr int kMxfp4Group = 32;
constexpr int kV4Group = 64, kV4Groups = 7;    // 448 NoPE values
constexpr int kV32Group = 128, kV32Groups = 4;  // 512 NoPE values

DSATTN_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// Input element as float: f32 as is, bf16 (raw bits in a uint16_t) widened exactly.
DSATTN_HD float load(const float* p, int64_t i) { return p[i]; }
DSATTN_HD float load(const uint16_t* p, int64_t i) { return codec::bf16_to_f32(p[i]); }
// Input element as bf16 bits: bf16 copied verbatim, f32 rounded to nearest even.
DSATTN_HD uint16_t load_bf16(const float* p, int64_t i) { return codec::f32_to_bf16(p[i]); }
DSATTN_HD uint16_t load_bf16(const uint16_t* p, int64_t i) { return p[i]; }

// Little-endian stores one byte at a time (cache pages carry no alignment promise).
DSATTN_HD void store_u32(uint8_t* dst, uint32_t v) {
  dst[0] = static_cast<uint8_t>(v);
  dst[1] = static_cast<uint8_t>(v >> 8);
  dst[2] = static_cast<uint8_t>(v >> 16);
  dst[3] = static_cast<uint8_t>(v >> 24);
}
DSATTN_HD void store_bf16(uint8_t* dst, uint16_t v) {
  dst[0] = static_cast<uint8_t>(v);
  dst[1] = static_cast<uint8_t>(v >> 8);
}

template <typename T>
DSATTN_HD float group_amax(const T* x, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = fmaxf(amax, fabsf(load(x, i)));  // fmaxf drops NaN
  return amax;
}

// A NaN quotient (a NaN input, or inf / inf when a V3.2 group holds an infinity and so has scale
// inf) is written as the positive NaN code 0x7F: the sign of a NaN produced by arithmetic differs
// between x86 (negative "indefinite") and CUDA (positive canonical NaN), so keeping it would make
// host and device bytes differ.
template <typename T>
DSATTN_HD void quantize_e4m3(const T* x, int n, float scale, uint8_t* out) {
  for (int i = 0; i < n; ++i) {
    const float q = div_rn(load(x, i), scale);
    out[i] = q != q ? codec::kE4M3NaN : codec::f32_to_e4m3(q);
  }
}

// ---------------------------------------------------------------- indexer caches (SPEC §2.1, §2.2)
DSATTN_HD int indexer_units(IndexerFormat f, int head_dim) {
  return f == IndexerFormat::kFp8 ? 1 : head_dim / kMxfp4Group;
}

// Writes unit `u` of one state: `x` [D] is the state's key, `page` the page base, `s` the state's
// offset inside the page (0 <= s < S).
template <typename T>
DSATTN_HD void write_indexer_unit(IndexerFormat f, const T* x, int D, int S, uint8_t* page, int s, int u) {
  if (f == IndexerFormat::kFp8) {
    const uint8_t e = codec::ue8m0_ceil(div_rn(group_amax(x, D), codec::kE4M3Max));
    const float scale = codec::ue8m0_to_f32(e);
    quantize_e4m3(x, D, scale, page + int64_t(s) * D);
    store_u32(page + int64_t(S) * D + 4 * int64_t(s), codec::f32_bits(scale));
    return;
  }
  const T* g = x + u * kMxfp4Group;
  const uint8_t e = codec::ue8m0_ceil(div_rn(group_amax(g, kMxfp4Group), kE2M1Max));
  const float scale = codec::ue8m0_to_f32(e);
  uint8_t* vals = page + int64_t(s) * (D / 2) + u * (kMxfp4Group / 2);
  for (int i = 0; i < kMxfp4Group; i += 2) {
    const uint8_t lo = codec::f32_to_e2m1(div_rn(load(g, i), scale));
    const uint8_t hi = codec::f32_to_e2m1(div_rn(load(g, i + 1), scale));
    vals[i / 2] = static_cast<uint8_t>(lo | (hi << 4));  // low nibble = even element
  }
  uint8_t* scales = page + int64_t(S) * (D / 2) + 4 * int64_t(s);  // one int32 per state
  scales[u] = e;
  if (u == 0) {
    for (int j = D / kMxfp4Group; j < 4; ++j) scales[j] = 0;  // unused bytes of the int32 (D < 128)
  }
}

// ---------------------------------------------------------------- latent caches (SPEC §2.3)
DSATTN_HD int latent_units(LatentFormat f) {
  return f == LatentFormat::kV4Fp8 ? kV4Groups + 1 : kV32Groups + 1;  // + the RoPE unit
}

// Writes unit `u` of one token: `x` [d_qk] is the token's latent (NoPE then RoPE), `page` the page
// base, `off` the token's offset inside the page (0 <= off < P).
template <typename T>
DSATTN_HD void write_latent_unit(LatentFormat f, const T* x, int P, uint8_t* page, int off, int u) {
  if (f == LatentFormat::kV4Fp8) {
    uint8_t* data = page + int64_t(off) * kV4DataBytes;
    uint8_t* scales = page + int64_t(P) * kV4DataBytes + int64_t(off) * kV4ScaleBytes;
    if (u < kV4Groups) {
      const T* g = x + u * kV4Group;
      const uint8_t e = codec::ue8m0_ceil(div_rn(group_amax(g, kV4Group), codec::kE4M3Max));
      quantize_e4m3(g, kV4Group, codec::ue8m0_to_f32(e), data + u * kV4Group);
      scales[u] = e;
    } else {
      for (int i = 0; i < kV4RopeDim; ++i) store_bf16(data + kV4NopeDim + 2 * i, load_bf16(x, kV4NopeDim + i));
      scales[kV4Groups] = 0;  // pad byte
    }
    return;
  }
  uint8_t* tok = page + int64_t(off) * kV32TokenBytes;
  if (u < kV32Groups) {
    const T* g = x + u * kV32Group;
    const float scale = fmaxf(div_rn(group_amax(g, kV32Group), codec::kE4M3Max), kFltMin);
    quantize_e4m3(g, kV32Group, scale, tok + u * kV32Group);
    store_u32(tok + kV32NopeDim + 4 * u, codec::f32_bits(scale));
  } else {
    for (int i = 0; i < kV32RopeDim; ++i) {
      store_bf16(tok + kV32NopeDim + 16 + 2 * i, load_bf16(x, kV32NopeDim + i));
    }
  }
}

}  // namespace quant
}  // namespace dsattn
