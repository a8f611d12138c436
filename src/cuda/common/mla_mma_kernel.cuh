// Sparse MLA on tensor cores (SPEC §3.5 decode over the FP8 latent caches of §2.3; §3.6 prefill
// over a bf16 kv [Nk, d_qk] with d_v = 512, a query row m being (b = m, s = 0)): bf16
// m16n8k16 `mma.sync` with fp32 accumulators, so it runs on sm_80 .. sm_120 alike. The default
// wherever it can take the call (mla_launch.cu); mla_kernel.cuh's scalar kernel takes the rest.
//
// One CTA per (query row (b, s), group of HG = 16 HM heads), 4 HM warps; it walks the row's used
// indices (main cache, then the extra cache) in tiles of T = 32 or 64 tokens (mla_plan.h):
//   A. the tile's bytes, copied during the previous tile into a staging area by cp.async (kStaged)
//      or into registers (where the staging area would cost CTAs per SM), go to K: the
//      E4M3 values as bf16 *without* their scales (exact: every E4M3 value is a bf16 value), the
//      RoPE values as they are, the scales as fp32 per (token, block of kBlock dims) (a bf16 kv
//      row: its values as they are, every scale 1); V4's E4M3 values instead *with* their block
//      scales (kFoldK: UE8M0 powers of two, so the products are bf16 values, exact); unused tokens
//      (past topk_length, -1, ids past the end) as zeros, never read from the cache;
//   B. the next tile's copies are issued; warp w scores its (16 heads, T / 4 tokens) piece of
//      S = Q K^T (each Q fragment serves the warp's T / 32 n-tiles), one fp32 accumulator per
//      scale block, each multiplied by its tokens' scale before it is added (so the scores are
//      those of the dequantized keys, in fp32; V4: one accumulator for all blocks);
//   C. online softmax in the log2 domain, 8 threads per head (running max and sum in registers);
//   D. O += P V: warp w owns 512 / (4 HM) output dims of all HG heads (64 fp32 accumulators per
//      thread); P is rounded to bf16 after it is multiplied by the scale of the token and of the
//      warp's dims' block (V4: P itself; the only rounding the dequantized cache values do not
//      see).
// Then out = O / l (times 1 / (1 + exp(sink - lse)) with a sink) in bf16 and lse = ln(sum exp).
// A row with no used token writes zeros and lse = -inf.
//
// Split over the indices (MlaSplitArgs, when few CTAs would cover the GPU): CTA z of a (row, head
// group) takes tiles [z tps, (z + 1) tps) and writes its unnormalized O and its (max, sum) to the
// workspace; sparse_mla_combine_kernel merges the splits of each (row, head) and writes out / lse.
//
// Shared memory (dynamic): Q [HG][D + 8] bf16 | K [T][D + 8] bf16 | staging [T][chunks][16 B]
// (kStaged) | S/P [HG][T + 8] fp32 | scales [T][8] fp32 | token refs [2][T] | alpha, m, l [HG]
// fp32. The row pads keep ldmatrix and the fragment reads free of bank conflicts. Requirements checked by the launcher: q, out and kv rows and cache pages
// 16-byte aligned (row strides multiples of 8 elements, page strides multiples of 16 bytes).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/common/mla_kernel.cuh"
#include "cuda/common/mla_plan.h"
#include "cuda/common/mma_fp8.cuh"

namespace dsattn {
namespace cuda {

constexpr int kMlaMmaScales = 8;  // scale words per token

// What the kernel reads: an FP8 latent cache (decode, SPEC §2.3) or a bf16 kv [Nk, d_qk] (prefill).
enum class MlaSrc { kV4Fp8, kV32Fp8, kBf16D512, kBf16D576 };

constexpr MlaSrc mla_src_of(LatentFormat f) { return f == LatentFormat::kV4Fp8 ? MlaSrc::kV4Fp8 : MlaSrc::kV32Fp8; }

// Per-source constants. Chunks are the 16-byte pieces a token's bytes are loaded in: for the FP8
// caches the E4M3 NoPE chunks first, then (V4) RoPE chunks and the scale record (8 bytes), or
// (V3.2) the scale chunk (4 fp32) and the RoPE chunks, every chunk but V4's scales at 16 p from the
// token's record; for a bf16 kv row, d_qk / 8 chunks of bf16 values (no scales: all 1).
template <MlaSrc S>
struct MlaMmaFormat {
  static constexpr bool kV4 = S == MlaSrc::kV4Fp8;
  static constexpr bool kFp8 = S == MlaSrc::kV4Fp8 || S == MlaSrc::kV32Fp8;
  static constexpr int kDqk = S == MlaSrc::kV4Fp8 || S == MlaSrc::kBf16D512 ? 512 : 576;
  static constexpr int kNope = kDqk - 64;                         // 448 / 512: the dims with scale blocks
  static constexpr int kBlock = S == MlaSrc::kV32Fp8 ? 128 : 64;  // dims per scale
  static constexpr int kNopeBlocks = kNope / kBlock;              // 7 / 4 (bf16: 7 / 8, scale 1)
  static constexpr int kNopeChunks = kFp8 ? kNope / 16 : 0;       // E4M3 chunks: 28 / 32
  static constexpr int kChunks = kFp8 ? kNopeChunks + 9 : kDqk / 8;  // + 8 RoPE + 1 scale: 37 / 41; 64 / 72
  static constexpr int kScaleChunk = kV4 ? kNopeChunks + 8 : kFp8 ? kNopeChunks : -1;  // 36 / 32
  static constexpr int kRawChunk0 = kV4 ? kNopeChunks : kFp8 ? kNopeChunks + 1 : 0;   // first bf16 chunk
  static constexpr int kRawDim0 = kFp8 ? kNope : 0;                                    // ... and its dim
  static constexpr int kRecBytes = kV4 ? kV4DataBytes : kV32TokenBytes;               // FP8 caches
};

template <int HM, MlaSrc S, int T>
struct MlaMmaShape {
  using Fmt = MlaMmaFormat<S>;
  static_assert(T == 32 || T == 64, "tiles of 32 or 64 tokens");
  static constexpr int kHeads = 16 * HM;
  static constexpr int kWarps = 4 * HM;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRow = Fmt::kDqk + 8;             // bf16 per Q / K row in shared memory
  static constexpr int kTokPerWarp = T / 4;              // S: a warp's tokens (4 groups of them)
  static constexpr int kNt = kTokPerWarp / 8;            // ... in n-tiles of 8
  static constexpr int kSRow = T + 8;                    // fp32 words per S / P row (conflict-free float2 reads)
  static constexpr int kRawRow = Fmt::kChunks * 16;      // staged bytes per token (its chunks, 16 bytes each)
  static constexpr int kCopies = (T * Fmt::kChunks + kThreads - 1) / kThreads;  // chunks per thread
  static constexpr int kDimsPerWarp = kLatentDv / kWarps;                        // 128 / 64 / 32
  static constexpr int kSub = kDimsPerWarp < Fmt::kBlock ? kDimsPerWarp : Fmt::kBlock;  // dims per scale
  static constexpr int kNSub = kDimsPerWarp / kSub;
  static constexpr size_t kQBytes = size_t(kHeads) * kRow * 2;
  static constexpr size_t kKBytes = size_t(T) * kRow * 2;
  static constexpr size_t kSBytes = size_t(kHeads) * kSRow * 4;
  static constexpr size_t kScBytes = size_t(T) * kMlaMmaScales * 4;
  static constexpr size_t kRefBytes = 2 * size_t(T) * 16;  // two tiles' TokenRefs
  static constexpr size_t kBaseBytes = kQBytes + kKBytes + kSBytes + kScBytes + kRefBytes + 3 * size_t(kHeads) * 4;
  // The next tile is staged in shared memory by cp.async (kStaged) unless, at 32 tokens per tile,
  // the staging area would cost CTAs per SM on Hopper (228 KiB, 1 KiB reserved per CTA): at 16
  // heads per CTA over V3.2 or a bf16 kv, and 32 over a bf16 kv of d_qk 576, the CTAs the kernel is
  // built for fit only without it (H200, 2026-12-05: V3.2 64 x 16 heads took 74 -> 111 us staged).
  // There each thread holds its chunks of the next tile in registers instead. 64-token tiles are
  // always staged (their chunks would not fit in registers).
  static constexpr size_t kStagedRaw = size_t(T) * kRawRow;
  static constexpr bool kStaged =
      T == 64 || (kBaseBytes + kStagedRaw + 1024) * size_t(mla_mma_ctas_per_sm(HM)) <= size_t(228) * 1024;
  static constexpr size_t kRawBytes = kStaged ? kStagedRaw : 0;
  static constexpr size_t kSmemBytes = kBaseBytes + kRawBytes;
  static_assert(kDimsPerWarp % 16 == 0 && kSub % 16 == 0, "n-tiles are taken in pairs");
};

// The split over the indices: partial results in the caller's workspace.
struct MlaSplitArgs {
  float* part_o;    // [rows * hq][splits][512] fp32: each split's O, not divided by its sum
  float2* part_ml;  // [rows * hq][splits]: each split's running max (log2 units) and sum
  int splits;       // 1: no split (part_* unused)
  int tiles_per_split;
  int hq;
};

template <int HM, MlaSrc S, int T>
constexpr size_t mla_mma_smem_bytes() {
  return MlaMmaShape<HM, S, T>::kSmemBytes;
}

namespace mla_mma {

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
// c += a (16 x 16, row) * b (16 x 8, col), bf16 in, fp32 accumulate.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&b);
}
// f16x2 -> bf16x2 through fp32: exact for the E4M3 values it is given.
__device__ __forceinline__ uint32_t f16x2_to_bf16x2(uint32_t h) {
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  return pack_bf16(f.x, f.y);
}
// 16 E4M3 bytes -> 8 f16x2 (same order), exact.
__device__ __forceinline__ void e4m3x16_to_f16x2(const uint4& v, uint32_t (&h)[8]) {
  e4m3x4_to_f16x2_fast(v.x, &h[0], &h[1]);
  e4m3x4_to_f16x2_fast(v.y, &h[2], &h[3]);
  e4m3x4_to_f16x2_fast(v.z, &h[4], &h[5]);
  e4m3x4_to_f16x2_fast(v.w, &h[6], &h[7]);
}
// 16 E4M3 bytes -> 16 bf16 (same order), exact.
__device__ __forceinline__ void e4m3x16_to_bf16(const uint4& v, uint4* lo, uint4* hi) {
  uint32_t h[8];
  e4m3x16_to_f16x2(v, h);
  *lo = make_uint4(f16x2_to_bf16x2(h[0]), f16x2_to_bf16x2(h[1]), f16x2_to_bf16x2(h[2]), f16x2_to_bf16x2(h[3]));
  *hi = make_uint4(f16x2_to_bf16x2(h[4]), f16x2_to_bf16x2(h[5]), f16x2_to_bf16x2(h[6]), f16x2_to_bf16x2(h[7]));
}
// The same times a power-of-two scale (V4's UE8M0 block scales), also exact: the products of
// E4M3 values and scales of at least 2^-117 are bf16 values (fp32 products, then packed).
__device__ __forceinline__ void e4m3x16_to_bf16_scaled(const uint4& v, float scale, uint4* lo, uint4* hi) {
  uint32_t h[8], b[8];
  e4m3x16_to_f16x2(v, h);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h[i]));
    b[i] = pack_bf16(f.x * scale, f.y * scale);
  }
  *lo = make_uint4(b[0], b[1], b[2], b[3]);
  *hi = make_uint4(b[4], b[5], b[6], b[7]);
}

// Where a used token's bytes are: its record (data record for V4, token record for V3.2) and its
// scales; rec == nullptr for an unused position.
struct TokenRef {
  const uint8_t* rec;
  const uint8_t* scl;
};

// The cache entry behind position j of the row's concatenated list (main, then extra): which
// cache (0 / 1, -1 none) and its id, read from the index tensor (no bounds check on the id yet).
__device__ __forceinline__ void load_index(const MlaDecodeArgs& a, int64_t b, int64_t s, int len_main, int total,
                                           int j, int* which, int* id) {
  *which = -1;
  *id = -1;
  if (j < len_main) {
    *which = 0;
    *id = __ldg(a.main.idx + b * a.main.idx_sb + s * a.main.idx_ss + j);
  } else if (j < total) {
    *which = 1;
    *id = __ldg(a.extra.idx + b * a.extra.idx_sb + s * a.extra.idx_ss + (j - len_main));
  }
}

template <MlaSrc S>
__device__ __forceinline__ TokenRef make_ref(const MlaDecodeArgs& a, int which, int id) {
  TokenRef r{nullptr, nullptr};
  if (which < 0) return r;
  const MlaCacheArgs& c = which == 0 ? a.main : a.extra;
  if (id < 0 || id >= c.num_slots) return r;
  if constexpr (!MlaMmaFormat<S>::kFp8) {  // bf16 kv: page_stride is the row stride in elements
    r.rec = c.pages + int64_t(id) * c.page_stride * 2;
    return r;
  }
  const uint32_t page = static_cast<uint32_t>(id) / static_cast<uint32_t>(c.P);
  const uint32_t off = static_cast<uint32_t>(id) - page * static_cast<uint32_t>(c.P);
  const uint8_t* pg = c.pages + int64_t(page) * c.page_stride;
  r.rec = pg + int64_t(off) * MlaMmaFormat<S>::kRecBytes;
  r.scl = MlaMmaFormat<S>::kV4 ? pg + int64_t(c.P) * kV4DataBytes + int64_t(off) * kV4ScaleBytes
                               : r.rec + kV32NopeDim;
  return r;
}

// The staging area's copies (kStaged, and the Hopper kernel): chunk `part` of a used token by
// cp.async to `dst` (V4's scale record is 8 bytes, every other chunk 16), and its bytes read back
// as 16 (the scale record's then zeros).
template <MlaSrc S>
__device__ __forceinline__ void stage_chunk(uint32_t dst, const TokenRef& r, int part) {
  if (MlaMmaFormat<S>::kV4 && part == MlaMmaFormat<S>::kScaleChunk) {
    cp_async8(dst, r.scl);
  } else {
    cp_async16(dst, r.rec + 16 * part);
  }
}
template <MlaSrc S>
__device__ __forceinline__ uint4 staged_chunk(const uint8_t* src, int part) {
  if (MlaMmaFormat<S>::kV4 && part == MlaMmaFormat<S>::kScaleChunk) {
    const uint2 w = *reinterpret_cast<const uint2*>(src);
    return make_uint4(w.x, w.y, 0u, 0u);
  }
  return *reinterpret_cast<const uint4*>(src);
}
// A token's scale chunk -> its kMlaMmaScales fp32 scales: V4's 7 UE8M0 block scales and 1 for the
// RoPE dims (V's last 64), V3.2's 4 fp32 scales.
template <MlaSrc S>
__device__ __forceinline__ void store_scales(const uint4& v, float* sc) {
  if constexpr (MlaMmaFormat<S>::kV4) {
#pragma unroll
    for (int e = 0; e < 7; ++e) {
      const uint32_t w = e < 4 ? v.x : v.y;
      sc[e] = codec::ue8m0_to_f32(static_cast<uint8_t>(w >> (8 * (e & 3))));
    }
    sc[7] = 1.0f;
  } else {
    sc[0] = __uint_as_float(v.x);
    sc[1] = __uint_as_float(v.y);
    sc[2] = __uint_as_float(v.z);
    sc[3] = __uint_as_float(v.w);
  }
}

// An E4M3 chunk `part` (16 values, dims 16 part ..) into K as bf16: 16-byte units 2 part and
// 2 part + 1 (unit(u): where K's unit u of the token lives).
template <typename Unit>
__device__ __forceinline__ void store_e4m3_chunk(const uint4& v, int part, const Unit& unit) {
  uint4 lo, hi;
  e4m3x16_to_bf16(v, &lo, &hi);
  *unit(2 * part) = lo;
  *unit(2 * part + 1) = hi;
}

// The same with each value times `scale` (V4's power-of-two block scale; e4m3x16_to_bf16_scaled).
template <typename Unit>
__device__ __forceinline__ void store_e4m3_chunk_scaled(const uint4& v, int part, const Unit& unit, float scale) {
  uint4 lo, hi;
  e4m3x16_to_bf16_scaled(v, scale, &lo, &hi);
  *unit(2 * part) = lo;
  *unit(2 * part + 1) = hi;
}

// A token's chunk `part` (16 bytes as staged_chunk gives them) into K and the scales: E4M3 values
// as bf16 (dims 16 part .., 16-byte units 2 part and 2 part + 1), the scale chunk into sc, bf16
// values as they are; unit(u) is where K's 16-byte unit u (dims 8 u .. 8 u + 7) of the token lives.
template <MlaSrc S, typename Unit>
__device__ __forceinline__ void store_chunk(const uint4& v, int part, float* sc, const Unit& unit) {
  using Fmt = MlaMmaFormat<S>;
  if (part < Fmt::kNopeChunks) {
    store_e4m3_chunk(v, part, unit);
  } else if (part == Fmt::kScaleChunk) {
    store_scales<S>(v, sc);
  } else {  // bf16 values: the FP8 caches' RoPE, or a bf16 kv row
    *unit((Fmt::kRawDim0 >> 3) + (part - Fmt::kRawChunk0)) = v;
  }
}

// A finished row of head `head`: running max m (log2 units) and sum l -> lse (natural log, without
// the sink) and the factor its unnormalized output is multiplied by (1 / l, times
// 1 / (1 + exp(sink - lse)) with a sink); l == 0 (no used token): lse -inf, factor 0.
__device__ __forceinline__ void finish_row(float m, float l, const MlaDecodeArgs& a, int64_t head, float* lse,
                                           float* factor) {
  *lse = -INFINITY;
  *factor = 0.0f;
  if (!(l > 0.0f)) return;
  *lse = (m + log2f(l)) * 0.6931471805599453f;
  *factor = 1.0f / l;
  if (a.sink != nullptr) *factor *= 1.0f / (1.0f + expf(a.sink[head * a.sink_s] - *lse));
}

}  // namespace mla_mma

// CTAs per SM asked of the register allocator (mla_mma_ctas_per_sm): 2 x 256 or 1 x 512 threads
// at <= 128 registers, 3 x 128 threads at <= 170.
template <int HM, MlaSrc S, int T>
__global__ void __launch_bounds__(MlaMmaShape<HM, S, T>::kThreads, mla_mma_ctas_per_sm(HM))
    sparse_mla_mma_kernel(MlaDecodeArgs a, MlaSplitArgs sp) {
  using namespace mla_mma;
  using Fmt = MlaMmaFormat<S>;
  using Sh = MlaMmaShape<HM, S, T>;
  constexpr int D = Fmt::kDqk, KS = Sh::kRow, HG = Sh::kHeads, NT = Sh::kThreads;
  constexpr int SR = Sh::kSRow, CH = Fmt::kChunks, NC = Sh::kCopies, NTW = Sh::kNt;
  // kFoldK (V4, staged tiles): V4's block scales are powers of two, so each E4M3 value times its
  // token's block scale (read from the staged scale record) is a bf16 value, dequantized into K as
  // such: S takes no per-block fold, and P V's A operand is P itself.
  constexpr bool kFoldK = Fmt::kV4 && Sh::kStaged;
  constexpr float kLog2e = 1.4426950408889634f;
  const float kNegInf = -INFINITY;

  extern __shared__ __align__(16) uint8_t mla_smem[];
  uint16_t* q_s = reinterpret_cast<uint16_t*>(mla_smem);
  uint16_t* k_s = reinterpret_cast<uint16_t*>(mla_smem + Sh::kQBytes);
  uint8_t* raw_s = mla_smem + Sh::kQBytes + Sh::kKBytes;
  float* s_s = reinterpret_cast<float*>(raw_s + Sh::kRawBytes);
  float* sc_s = s_s + HG * SR;
  TokenRef(*ref_s)[T] = reinterpret_cast<TokenRef(*)[T]>(sc_s + T * kMlaMmaScales);
  float* alpha_s = reinterpret_cast<float*>(mla_smem + Sh::kSmemBytes - 3 * size_t(HG) * 4);
  float* m_s = alpha_s + HG;
  float* l_s = m_s + HG;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int64_t b = blockIdx.x / a.Sq, s = blockIdx.x % a.Sq;
  const int h0 = blockIdx.y * HG;
  const int len_main = used_length(a.main, b);
  const int len_extra = a.extra.topk > 0 ? used_length(a.extra, b) : 0;
  const int total = len_main + len_extra;
  const int ntiles = (total + T - 1) / T;
  const int t_begin = blockIdx.z * sp.tiles_per_split;  // this CTA's tiles (all of them without a split)
  const int t_end = sp.splits > 1 ? min(ntiles, t_begin + sp.tiles_per_split) : ntiles;
  const float qk_scale = a.sm_scale * kLog2e;  // scores in the log2 domain

  // Q: HG rows of D bf16, 16-byte pieces.
  {
    const uint16_t* qrow = a.q + b * a.q_sb + s * a.q_ss + int64_t(h0) * a.q_sh;
    for (int e = tid; e < HG * (D / 8); e += NT) {
      const int h = e / (D / 8), c = e % (D / 8);
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(qrow + int64_t(h) * a.q_sh + 8 * c));
      *reinterpret_cast<uint4*>(q_s + h * KS + 8 * c) = v;
    }
  }
  if constexpr (!Fmt::kFp8) {  // a bf16 kv has no scales; nothing overwrites these
    for (int e = tid; e < T * kMlaMmaScales; e += NT) sc_s[e] = 1.0f;
  }
  // Warp 0 resolves the positions of the next tile but one: T (j + 1) + lane + 32 r.
  int pend_which[T / 32], pend_id[T / 32];
  if (warp == 0) {
#pragma unroll
    for (int r = 0; r < T / 32; ++r) {
      int w0, i0;
      load_index(a, b, s, len_main, total, t_begin * T + lane + 32 * r, &w0, &i0);
      ref_s[0][lane + 32 * r] = make_ref<S>(a, w0, i0);
      load_index(a, b, s, len_main, total, (t_begin + 1) * T + lane + 32 * r, &pend_which[r], &pend_id[r]);
    }
  }
  __syncthreads();

  // A tile's bytes go to the staging area as they are, by cp.async: chunk c = tid + i NT is part
  // c % CH of token c / CH, at byte 16 c of the area; nothing is read for an unused position.
  // Without the staging area (!kStaged) the thread's chunks go to registers (ld) instead.
  const uint32_t raw_u32 = smem_u32(raw_s);
  uint4 ld[Sh::kStaged ? 1 : NC];
  const auto issue = [&](int slot) {
#pragma unroll
    for (int i = 0; i < NC; ++i) {
      const int c = tid + i * NT;
      if constexpr (!Sh::kStaged) ld[i] = make_uint4(0u, 0u, 0u, 0u);
      if (c < T * CH) {
        const int tok = c / CH, part = c % CH;
        const TokenRef r = ref_s[slot][tok];
        if (r.rec != nullptr) {
          if constexpr (Sh::kStaged) {
            stage_chunk<S>(raw_u32 + 16 * c, r, part);
          } else if (Fmt::kV4 && part == Fmt::kScaleChunk) {
            const uint2 v = __ldg(reinterpret_cast<const uint2*>(r.scl));
            ld[i].x = v.x;
            ld[i].y = v.y;
          } else {
            ld[i] = __ldg(reinterpret_cast<const uint4*>(r.rec + 16 * part));
          }
        }
      }
    }
    if constexpr (Sh::kStaged) cp_async_commit();
  };
  // The staged tile into K (bf16) and the scales; an unused position's chunks as zeros.
  const auto store = [&](int slot) {
#pragma unroll
    for (int i = 0; i < NC; ++i) {
      const int c = tid + i * NT;
      if (c < T * CH) {
        const int tok = c / CH, part = c % CH;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        float scale = 1.0f;  // kFoldK
        if constexpr (!Sh::kStaged) {
          v = ld[i];
        } else if (ref_s[slot][tok].rec != nullptr) {
          v = staged_chunk<S>(raw_s + 16 * c, part);
          if (kFoldK && part < Fmt::kNopeChunks) {  // the staged UE8M0 scale of the part's block
            scale = codec::ue8m0_to_f32(raw_s[16 * (tok * CH + Fmt::kScaleChunk) + part * 16 / Fmt::kBlock]);
          }
        }
        uint16_t* krow = k_s + tok * KS;
        const auto unit = [&](int u) { return reinterpret_cast<uint4*>(krow + 8 * u); };
        if (kFoldK && part < Fmt::kNopeChunks) {
          store_e4m3_chunk_scaled(v, part, unit, scale);
        } else {
          store_chunk<S>(v, part, sc_s + tok * kMlaMmaScales, unit);
        }
      }
    }
  };
  if (t_begin < t_end) issue(0);

  float o[HM][Sh::kDimsPerWarp / 8][4];
#pragma unroll
  for (int mt = 0; mt < HM; ++mt)
#pragma unroll
    for (int n = 0; n < Sh::kDimsPerWarp / 8; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
  float m_run = kNegInf, l_run = 0.0f;  // softmax threads: head tid / 8

  for (int j = t_begin; j < t_end; ++j) {
    const int slot = (j - t_begin) & 1;
    // A: this tile's staged bytes (its copies waited for here; the barrier also ends the previous
    // tile's P V) into K and the scales; warp 0 resolves the next tile's positions.
    cp_async_wait<0>();
    __syncthreads();
    store(slot);
    if (warp == 0 && j + 1 < t_end) {
#pragma unroll
      for (int r = 0; r < T / 32; ++r) {
        ref_s[slot ^ 1][lane + 32 * r] = make_ref<S>(a, pend_which[r], pend_id[r]);
        load_index(a, b, s, len_main, total, (j + 2) * T + lane + 32 * r, &pend_which[r], &pend_id[r]);
      }
    }
    __syncthreads();
    // B: the next tile's copies into the staging area, then S for (heads 16 (warp / 4) ..,
    // tokens T / 4 (warp % 4) ..): one Q fragment per k-step for the warp's NTW n-tiles.
    if (j + 1 < t_end) issue(slot ^ 1);
    {
      const int mt = warp >> 2, tg = warp & 3;
      const uint32_t qa = smem_u32(q_s + (16 * mt + (lane & 15)) * KS + (lane >> 4) * 8);
      const uint32_t kb = smem_u32(k_s + (Sh::kTokPerWarp * tg + (lane & 7)) * KS + (lane >> 3) * 8);
      // Two k-steps (dims k0 .. k0 + 31) of this warp's piece into acc.
      const auto ksteps = [&](float(&acc)[NTW][4], int k0) {
        uint32_t a0[4], a1[4];
        ldsm_x4(qa + 2 * k0, a0);
        ldsm_x4(qa + 2 * (k0 + 16), a1);
#pragma unroll
        for (int n = 0; n < NTW; ++n) {
          uint32_t bb[4];
          ldsm_x4(kb + 2 * (8 * n * KS + k0), bb);
          mma_bf16(acc[n], a0, bb[0], bb[1]);
          mma_bf16(acc[n], a1, bb[2], bb[3]);
        }
      };
      float sacc[NTW][4];
#pragma unroll
      for (int n = 0; n < NTW; ++n) sacc[n][0] = sacc[n][1] = sacc[n][2] = sacc[n][3] = 0.0f;
      if constexpr (kFoldK) {
#pragma unroll
        for (int k0 = 0; k0 < Fmt::kNope; k0 += 32) ksteps(sacc, k0);
      }
#pragma unroll
      for (int blk = 0; blk < (kFoldK ? 0 : Fmt::kNopeBlocks); ++blk) {
        float c[NTW][4];
#pragma unroll
        for (int n = 0; n < NTW; ++n) c[n][0] = c[n][1] = c[n][2] = c[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < Fmt::kBlock / 32; ++kk) ksteps(c, blk * Fmt::kBlock + 32 * kk);
#pragma unroll
        for (int n = 0; n < NTW; ++n) {
          const int tok0 = Sh::kTokPerWarp * tg + 8 * n + 2 * t4;
          const float sc0 = sc_s[tok0 * kMlaMmaScales + blk], sc1 = sc_s[(tok0 + 1) * kMlaMmaScales + blk];
          sacc[n][0] = fmaf(c[n][0], sc0, sacc[n][0]);
          sacc[n][1] = fmaf(c[n][1], sc1, sacc[n][1]);
          sacc[n][2] = fmaf(c[n][2], sc0, sacc[n][2]);
          sacc[n][3] = fmaf(c[n][3], sc1, sacc[n][3]);
        }
      }
      ksteps(sacc, Fmt::kNope);  // RoPE: 64 dims, no scale
      ksteps(sacc, Fmt::kNope + 32);
#pragma unroll
      for (int n = 0; n < NTW; ++n) {
        const int tok0 = Sh::kTokPerWarp * tg + 8 * n + 2 * t4;
        const bool u0 = ref_s[slot][tok0].rec != nullptr, u1 = ref_s[slot][tok0 + 1].rec != nullptr;
        float* r0 = s_s + (16 * mt + g) * SR + tok0;
        float* r1 = r0 + 8 * SR;
        *reinterpret_cast<float2*>(r0) =
            make_float2(u0 ? sacc[n][0] * qk_scale : kNegInf, u1 ? sacc[n][1] * qk_scale : kNegInf);
        *reinterpret_cast<float2*>(r1) =
            make_float2(u0 ? sacc[n][2] * qk_scale : kNegInf, u1 ? sacc[n][3] * qk_scale : kNegInf);
      }
    }
    __syncthreads();
    // C: online softmax, head tid / 8, tokens 4 (tid % 8) + 32 r .. + 3 (r < T / 32).
    {
      const int h = tid >> 3, q4 = tid & 7;
      float4 v[T / 32];
      float mx = kNegInf;
#pragma unroll
      for (int r = 0; r < T / 32; ++r) {
        v[r] = *reinterpret_cast<const float4*>(s_s + h * SR + 32 * r + 4 * q4);
        mx = fmaxf(mx, fmaxf(fmaxf(v[r].x, v[r].y), fmaxf(v[r].z, v[r].w)));
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      const float m_new = fmaxf(m_run, mx);
      float alpha = 1.0f, sum = 0.0f;
#pragma unroll
      for (int r = 0; r < T / 32; ++r) {
        if (m_new != kNegInf) {  // else nothing used yet: probabilities 0, alpha 1
          v[r].x = exp2f(v[r].x - m_new);  // unused tokens: exp2(-inf) = 0
          v[r].y = exp2f(v[r].y - m_new);
          v[r].z = exp2f(v[r].z - m_new);
          v[r].w = exp2f(v[r].w - m_new);
        } else {
          v[r] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        sum += (v[r].x + v[r].y) + (v[r].z + v[r].w);
        *reinterpret_cast<float4*>(s_s + h * SR + 32 * r + 4 * q4) = v[r];
      }
      if (m_new != kNegInf) alpha = exp2f(m_run - m_new);  // m_run = -inf -> 0
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      sum += __shfl_xor_sync(0xffffffffu, sum, 4);
      l_run = l_run * alpha + sum;
      m_run = m_new;
      if (q4 == 0) alpha_s[h] = alpha;
    }
    __syncthreads();
    // D: O += P V over this warp's dims [d0, d0 + kDimsPerWarp).
    {
      const int d0 = warp * Sh::kDimsPerWarp;
#pragma unroll
      for (int mt = 0; mt < HM; ++mt) {
        const float al0 = alpha_s[16 * mt + g], al1 = alpha_s[16 * mt + g + 8];
#pragma unroll
        for (int n = 0; n < Sh::kDimsPerWarp / 8; ++n) {
          o[mt][n][0] *= al0;
          o[mt][n][1] *= al0;
          o[mt][n][2] *= al1;
          o[mt][n][3] *= al1;
        }
      }
#pragma unroll
      for (int ks = 0; ks < T / 16; ++ks) {
        const int ta = 16 * ks + 2 * t4;  // this thread's tokens: ta, ta + 1, ta + 8, ta + 9
#pragma unroll
        for (int sb = 0; sb < Sh::kNSub; ++sb) {
          const int dsub = d0 + sb * Sh::kSub;
          const int blk = dsub / Fmt::kBlock;  // V4: the RoPE dims (448 ..) are block 7, scale 1 (bf16: all 1)
          const float c0 = kFoldK ? 1.0f : sc_s[ta * kMlaMmaScales + blk];
          const float c1 = kFoldK ? 1.0f : sc_s[(ta + 1) * kMlaMmaScales + blk];
          const float c2 = kFoldK ? 1.0f : sc_s[(ta + 8) * kMlaMmaScales + blk];
          const float c3 = kFoldK ? 1.0f : sc_s[(ta + 9) * kMlaMmaScales + blk];
          uint32_t pa[HM][4];
#pragma unroll
          for (int mt = 0; mt < HM; ++mt) {
            const float* p0 = s_s + (16 * mt + g) * SR + ta;
            const float* p1 = p0 + 8 * SR;
            const float2 x00 = *reinterpret_cast<const float2*>(p0);
            const float2 x01 = *reinterpret_cast<const float2*>(p0 + 8);
            const float2 x10 = *reinterpret_cast<const float2*>(p1);
            const float2 x11 = *reinterpret_cast<const float2*>(p1 + 8);
            pa[mt][0] = pack_bf16(x00.x * c0, x00.y * c1);
            pa[mt][1] = pack_bf16(x10.x * c0, x10.y * c1);
            pa[mt][2] = pack_bf16(x01.x * c2, x01.y * c3);
            pa[mt][3] = pack_bf16(x11.x * c2, x11.y * c3);
          }
#pragma unroll
          for (int np = 0; np < Sh::kSub / 16; ++np) {
            const int n0 = dsub + 16 * np;
            uint32_t vb[4];
            ldsm_x4_trans(smem_u32(k_s + (16 * ks + (lane & 7) + ((lane >> 3) & 1) * 8) * KS + n0 + (lane >> 4) * 8),
                          vb);
            const int ni = (sb * Sh::kSub + 16 * np) / 8;
#pragma unroll
            for (int mt = 0; mt < HM; ++mt) {
              mma_bf16(o[mt][ni], pa[mt], vb[0], vb[1]);
              mma_bf16(o[mt][ni + 1], pa[mt], vb[2], vb[3]);
            }
          }
        }
      }
    }
  }

  const int d0 = warp * Sh::kDimsPerWarp;
  if (sp.splits > 1) {  // this split's unnormalized O and (max, sum), for the combine kernel
    const int64_t row_h = int64_t(blockIdx.x) * sp.hq + h0;  // (row, first head of the group)
    if ((tid & 7) == 0) sp.part_ml[(row_h + (tid >> 3)) * sp.splits + blockIdx.z] = make_float2(m_run, l_run);
#pragma unroll
    for (int mt = 0; mt < HM; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float* po = sp.part_o + ((row_h + 16 * mt + g + 8 * half) * sp.splits + blockIdx.z) * kLatentDv + d0 + 2 * t4;
#pragma unroll
        for (int n = 0; n < Sh::kDimsPerWarp / 8; ++n) {
          *reinterpret_cast<float2*>(po + 8 * n) = make_float2(o[mt][n][2 * half], o[mt][n][2 * half + 1]);
        }
      }
    }
    return;
  }
  // Epilogue: per-head max and sum to shared memory, then each warp writes its dims.
  if ((tid & 7) == 0) {
    const int h = tid >> 3;
    m_s[h] = m_run;
    l_s[h] = l_run;
    float lse, f;
    finish_row(m_run, l_run, a, h0 + h, &lse, &f);
    a.lse[b * a.l_sb + s * a.l_ss + int64_t(h0 + h) * a.l_sh] = lse;
  }
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < HM; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int h = 16 * mt + g + 8 * half;
      const float l = l_s[h];
      float lse, f;
      finish_row(m_s[h], l, a, h0 + h, &lse, &f);
      uint16_t* orow = a.out + b * a.o_sb + s * a.o_ss + int64_t(h0 + h) * a.o_sh;
#pragma unroll
      for (int n = 0; n < Sh::kDimsPerWarp / 8; ++n) {
        const uint32_t v = l > 0.0f ? pack_bf16(o[mt][n][2 * half] * f, o[mt][n][2 * half + 1] * f) : 0u;
        *reinterpret_cast<uint32_t*>(orow + d0 + 8 * n + 2 * t4) = v;
      }
    }
  }
}

// Merges the splits of one (query row, head) per CTA of kMlaCombineThreads threads (4 dims each):
// M = max m_z, L = sum l_z 2^(m_z - M), out = sum 2^(m_z - M) O_z / L (times the sink factor),
// lse = ln2 (M + log2 L); no used token in any split: zeros and lse = -inf.
constexpr int kMlaCombineThreads = kLatentDv / 4;

__global__ void __launch_bounds__(kMlaCombineThreads) sparse_mla_combine_kernel(MlaDecodeArgs a, MlaSplitArgs sp) {
  const int64_t row_h = blockIdx.x;  // row * hq + h
  const int64_t row = row_h / sp.hq;
  const int h = static_cast<int>(row_h % sp.hq);
  const int64_t b = row / a.Sq, s = row % a.Sq;
  const float2* ml = sp.part_ml + row_h * sp.splits;
  float M = -INFINITY;
  for (int z = 0; z < sp.splits; ++z) M = fmaxf(M, ml[z].x);
  float L = 0.0f;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (M != -INFINITY) {
    const float4* po = reinterpret_cast<const float4*>(sp.part_o + row_h * sp.splits * kLatentDv) + threadIdx.x;
    for (int z = 0; z < sp.splits; ++z) {
      const float w = exp2f(ml[z].x - M);  // a split with no used token: 2^-inf = 0
      L = fmaf(ml[z].y, w, L);
      if (w > 0.0f) {
        const float4 v = po[z * (kLatentDv / 4)];
        acc.x = fmaf(v.x, w, acc.x);
        acc.y = fmaf(v.y, w, acc.y);
        acc.z = fmaf(v.z, w, acc.z);
        acc.w = fmaf(v.w, w, acc.w);
      }
    }
  }
  const bool used = L > 0.0f;
  float lse, f;
  mla_mma::finish_row(M, L, a, h, &lse, &f);
  uint16_t* orow = a.out + b * a.o_sb + s * a.o_ss + int64_t(h) * a.o_sh + 4 * threadIdx.x;
  const uint32_t lo = used ? mla_mma::pack_bf16(acc.x * f, acc.y * f) : 0u;
  const uint32_t hi = used ? mla_mma::pack_bf16(acc.z * f, acc.w * f) : 0u;
  *reinterpret_cast<uint2*>(orow) = make_uint2(lo, hi);
  if (threadIdx.x == 0) a.lse[b * a.l_sb + s * a.l_ss + int64_t(h) * a.l_sh] = lse;
}

}  // namespace cuda
}  // namespace dsattn
