// dsattn — cache formats (SPEC §2). Byte layouts match the public ones exactly.
#pragma once
#include <cstdint>

#include "dsattn/tensor.h"

namespace dsattn {

// Indexer key cache (SPEC §2.1 / §2.2). Page-major: page p starts at base + p * page_stride_bytes.
//  kFp8:   [S*D   B of E4M3 values, state s at s*D  ][S*4 B: fp32 scale per state]          (D + 4 B/state)
//  kMxfp4: [S*D/2 B of E2M1 pairs (low nibble = even element)][S*4 B: int32 of D/32 UE8M0 scales]
//                                                                                            (D/2 + 4 B/state)
enum class IndexerFormat { kFp8, kMxfp4 };
const char* indexer_format_name(IndexerFormat f);  // "fp8", "mxfp4"

// Bytes one state occupies in an indexer page (values + scale).
constexpr int64_t indexer_state_bytes(IndexerFormat f, int head_dim) {
  return f == IndexerFormat::kFp8 ? head_dim + 4 : head_dim / 2 + 4;
}
// Offset of the scale block inside a page.
constexpr int64_t indexer_scale_offset(IndexerFormat f, int states_per_page, int head_dim) {
  return f == IndexerFormat::kFp8 ? int64_t(states_per_page) * head_dim
                                  : int64_t(states_per_page) * (head_dim / 2);
}

struct IndexerCache {
  TensorView pages;               // u8 [num_pages, page_bytes]; strides[0] == page_stride_bytes
  IndexerFormat format = IndexerFormat::kFp8;
  int states_per_page = 0;        // S, 1..256
  int head_dim = 0;               // D, 32 / 64 / 128
  int64_t page_stride_bytes = 0;  // >= S * indexer_state_bytes, multiple of 4
};

// Sparse-MLA latent cache (SPEC §2.3).
//  kV4Fp8  ("MODEL1", 584 B/token, page-major): P data records of 576 B ([0,448) E4M3 NoPE,
//          [448,576) 64 bf16 RoPE) then P scale records of 8 B (7 UE8M0 + 1 pad); page padded to
//          a multiple of 576 B. d_qk = 512.
//  kV32Fp8 (656 B/token, token-interleaved): [0,512) E4M3 NoPE, [512,528) 4 fp32 scales (one per
//          128 values), [528,656) 64 bf16 RoPE. d_qk = 576.
//  d_v = 512 for both.
enum class LatentFormat { kV4Fp8, kV32Fp8 };
const char* latent_format_name(LatentFormat f);  // "v4_fp8", "v32_fp8"

constexpr int kLatentDv = 512;
constexpr int kV4NopeDim = 448, kV4RopeDim = 64, kV4DataBytes = 576, kV4ScaleBytes = 8;
constexpr int kV32NopeDim = 512, kV32RopeDim = 64, kV32TokenBytes = 656;

constexpr int latent_dqk(LatentFormat f) { return f == LatentFormat::kV4Fp8 ? 512 : 576; }
constexpr int64_t latent_token_bytes(LatentFormat f) {
  return f == LatentFormat::kV4Fp8 ? kV4DataBytes + kV4ScaleBytes : kV32TokenBytes;
}
// Minimum page stride for P tokens (V4: P*584 rounded up to a multiple of 576; V3.2: P*656).
constexpr int64_t latent_min_page_bytes(LatentFormat f, int tokens_per_page) {
  return f == LatentFormat::kV4Fp8
             ? ((int64_t(tokens_per_page) * 584 + 575) / 576) * 576
             : int64_t(tokens_per_page) * kV32TokenBytes;
}

struct LatentCache {
  TensorView pages;               // u8 [num_pages, page_bytes]; strides[0] == page_stride_bytes
  LatentFormat format = LatentFormat::kV4Fp8;
  int tokens_per_page = 0;        // P
  int64_t page_stride_bytes = 0;  // >= latent_min_page_bytes(format, P)
};

}  // namespace dsattn
