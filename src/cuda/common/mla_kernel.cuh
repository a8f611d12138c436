// Sparse-MLA kernel (SPEC §3.5 decode over an FP8 latent cache, §3.6 prefill over a bf16 kv): a
// straightforward, correct, portable version; NOT performance-tuned (no tensor cores, no TMA, no
// split-KV; one pass over the indices per CTA). The KV source is a template parameter: LatentSource
// dequantizes paged V4 / V3.2 tokens, Bf16Source reads rows of a bf16 [Nk, d_qk] tensor (prefill,
// where a query row m is (b = m, s = 0)).
//
// One CTA of 256 threads per (query row (b, s), group of 16 heads). The CTA walks the used indices
// (main cache first, then the extra cache) in tiles of 16 tokens:
//   1. threads 0..15 resolve the tile's 16 index entries (position < topk_length and 0 <= id < slots,
//      else the entry is unused and its cache bytes are never read);
//   2. all threads dequantize the 16 tokens into shared memory (fp32, row stride d_qk + 1 so the
//      score loop below is free of bank conflicts);
//   3. thread t computes the score of head t / 16 with token t % 16 (fp32 dot over d_qk);
//   4. threads 0..15 run the online-softmax update of one head each (running max m, sum l, and the
//      factor alpha = exp(m_old - m_new) that rescales the accumulators; -inf guarded so an all-unused
//      prefix never produces (-inf) - (-inf) = NaN);
//   5. thread t accumulates output dims t and t + 256 (< d_v <= 512) of all 16 heads in registers.
// Finally out = acc / l, times 1 / (1 + exp(sink - lse)) with a sink, rounded to bf16; lse = m + ln l
// (sink not included). A row with no used token writes zeros and lse = -inf.
#pragma once
#include <math.h>

#include <cstdint>

#include "dsattn/codecs.h"
#include "dsattn/formats.h"

namespace dsattn {
namespace cuda {

constexpr int kMlaThreads = 256;
constexpr int kMlaHeadsPerCta = 16;
constexpr int kMlaTile = 16;  // tokens per tile; kMlaHeadsPerCta * kMlaTile == kMlaThreads

struct MlaCacheArgs {
  const uint8_t* pages;   // latent: [num_pages, page_stride] bytes; bf16 source: kv [Nk, page_stride] bf16
  int64_t page_stride;    // latent: bytes per page; bf16 source: elements per kv row
  int P;                  // tokens per page (1 for the bf16 source)
  int64_t num_slots;      // num_pages * P (Nk for the bf16 source)
  const int32_t* idx;     // [B, Sq, topk] (prefill: [M, topk], idx_ss = 0), last dim contiguous
  int64_t idx_sb, idx_ss;
  int topk;
  const int32_t* len;     // optional [B]
  int64_t len_s;
};

struct MlaDecodeArgs {
  const uint16_t* q;      // bf16 [B, Sq, Hq, d_qk], last dim contiguous
  int64_t q_sb, q_ss, q_sh;
  uint16_t* out;          // bf16 [B, Sq, Hq, d_v], last dim contiguous
  int64_t o_sb, o_ss, o_sh;
  float* lse;             // [B, Sq, Hq]
  int64_t l_sb, l_ss, l_sh;
  const float* sink;      // optional [Hq]
  int64_t sink_s;
  float sm_scale;
  int Sq;
  int dv;                 // <= 2 * kMlaThreads
  MlaCacheArgs main, extra;  // extra.topk == 0 when absent
};

constexpr size_t mla_smem_bytes(int dqk) {
  return sizeof(float) * (size_t(kMlaHeadsPerCta) * dqk + size_t(kMlaTile) * (dqk + 1) +
                          size_t(kMlaHeadsPerCta) * kMlaTile + 3 * kMlaHeadsPerCta);
}

// Dequantized element d of latent token `slot` (SPEC §2.3).
template <LatentFormat F>
__device__ __forceinline__ float latent_value(const uint8_t* pages, int64_t stride, int P, int64_t slot, int d) {
  const uint8_t* page = pages + (slot / P) * stride;
  const int off = static_cast<int>(slot % P);
  if (F == LatentFormat::kV4Fp8) {
    const uint8_t* data = page + int64_t(off) * kV4DataBytes;
    if (d < kV4NopeDim) {
      const uint8_t e = page[int64_t(P) * kV4DataBytes + int64_t(off) * kV4ScaleBytes + d / 64];
      return codec::e4m3_to_f32(data[d]) * codec::ue8m0_to_f32(e);
    }
    const uint8_t* r = data + kV4NopeDim + 2 * (d - kV4NopeDim);
    return codec::bf16_to_f32(static_cast<uint16_t>(r[0] | (r[1] << 8)));
  } else {
    const uint8_t* tok = page + int64_t(off) * kV32TokenBytes;
    if (d < kV32NopeDim) {
      const uint8_t* sp = tok + kV32NopeDim + 4 * (d / 128);
      const uint32_t bits = uint32_t(sp[0]) | (uint32_t(sp[1]) << 8) | (uint32_t(sp[2]) << 16) | (uint32_t(sp[3]) << 24);
      return codec::e4m3_to_f32(tok[d]) * codec::f32_from_bits(bits);
    }
    const uint8_t* r = tok + kV32NopeDim + 16 + 2 * (d - kV32NopeDim);
    return codec::bf16_to_f32(static_cast<uint16_t>(r[0] | (r[1] << 8)));
  }
}

template <LatentFormat F>
struct LatentSource {
  static constexpr int kDqk = F == LatentFormat::kV4Fp8 ? 512 : 576;
  static __device__ __forceinline__ float value(const MlaCacheArgs& c, int64_t slot, int d) {
    return latent_value<F>(c.pages, c.page_stride, c.P, slot, d);
  }
};

template <int D>
struct Bf16Source {
  static constexpr int kDqk = D;
  static __device__ __forceinline__ float value(const MlaCacheArgs& c, int64_t slot, int d) {
    return codec::bf16_to_f32(reinterpret_cast<const uint16_t*>(c.pages)[slot * c.page_stride + d]);
  }
};

__device__ __forceinline__ int used_length(const MlaCacheArgs& c, int64_t b) {
  if (c.len == nullptr) return c.topk;
  const int v = c.len[b * c.len_s];
  return v < 0 ? 0 : (v > c.topk ? c.topk : v);  // clamp: the CPU backend rejects these instead
}

template <typename Src>
__global__ void __launch_bounds__(kMlaThreads) sparse_mla_kernel(MlaDecodeArgs a) {
  constexpr int D = Src::kDqk;
  constexpr int KS = D + 1;  // padded row: lanes reading different tokens hit different banks
  constexpr int H = kMlaHeadsPerCta, NT = kMlaTile;
  const float kNegInf = -INFINITY;
  extern __shared__ float smem[];
  float* q_s = smem;               // [H][D]
  float* k_s = q_s + H * D;        // [NT][KS]
  float* p_s = k_s + NT * KS;      // [H][NT] scores, then probabilities
  float* alpha_s = p_s + H * NT;   // [H]
  float* m_s = alpha_s + H;        // [H] running max
  float* l_s = m_s + H;            // [H] running sum
  __shared__ int64_t slot_s[NT];
  __shared__ int which_s[NT];      // 0 main cache, 1 extra cache, -1 unused

  const int tid = threadIdx.x;
  const int64_t b = blockIdx.x / a.Sq, s = blockIdx.x % a.Sq;
  const int h0 = blockIdx.y * H;

  for (int e = tid; e < H * D; e += kMlaThreads) {
    const int h = e / D, d = e % D;
    q_s[e] = codec::bf16_to_f32(a.q[b * a.q_sb + s * a.q_ss + (h0 + h) * a.q_sh + d]);
  }
  if (tid < H) {
    m_s[tid] = kNegInf;
    l_s[tid] = 0.0f;
  }
  const int len_main = used_length(a.main, b);
  const int len_extra = a.extra.topk > 0 ? used_length(a.extra, b) : 0;
  const int total = len_main + len_extra;

  float acc[H][2];
#pragma unroll
  for (int h = 0; h < H; ++h) acc[h][0] = acc[h][1] = 0.0f;

  for (int j0 = 0; j0 < total; j0 += NT) {
    __syncthreads();  // the previous tile's k_s / p_s / which_s are no longer read
    if (tid < NT) {
      const int j = j0 + tid;
      int which = -1;
      int64_t slot = 0;
      if (j < len_main) {
        const int64_t id = a.main.idx[b * a.main.idx_sb + s * a.main.idx_ss + j];
        if (id >= 0 && id < a.main.num_slots) {
          which = 0;
          slot = id;
        }
      } else if (j < total) {
        const int64_t id = a.extra.idx[b * a.extra.idx_sb + s * a.extra.idx_ss + (j - len_main)];
        if (id >= 0 && id < a.extra.num_slots) {
          which = 1;
          slot = id;
        }
      }
      which_s[tid] = which;
      slot_s[tid] = slot;
    }
    __syncthreads();
    for (int e = tid; e < NT * D; e += kMlaThreads) {
      const int n = e / D, d = e % D;
      const int w = which_s[n];
      float v = 0.0f;
      if (w == 0) v = Src::value(a.main, slot_s[n], d);
      if (w == 1) v = Src::value(a.extra, slot_s[n], d);
      k_s[n * KS + d] = v;
    }
    __syncthreads();
    {
      const int h = tid / NT, n = tid % NT;
      float score = kNegInf;
      if (which_s[n] >= 0) {
        float dot = 0.0f;
        const float* qh = q_s + h * D;
        const float* kn = k_s + n * KS;
        for (int d = 0; d < D; ++d) dot = fmaf(qh[d], kn[d], dot);
        score = dot * a.sm_scale;
      }
      p_s[h * NT + n] = score;
    }
    __syncthreads();
    if (tid < H) {
      const int h = tid;
      const float m_old = m_s[h];
      float m_new = m_old;
      for (int n = 0; n < NT; ++n) m_new = fmaxf(m_new, p_s[h * NT + n]);
      float alpha = 1.0f, sum = 0.0f;
      if (m_new != kNegInf) {  // else nothing used yet: keep alpha 1, probabilities 0
        alpha = expf(m_old - m_new);  // m_old = -inf -> 0
        for (int n = 0; n < NT; ++n) {
          const float pr = expf(p_s[h * NT + n] - m_new);  // unused tokens: exp(-inf) = 0
          p_s[h * NT + n] = pr;
          sum += pr;
        }
      } else {
        for (int n = 0; n < NT; ++n) p_s[h * NT + n] = 0.0f;
      }
      m_s[h] = m_new;
      l_s[h] = l_s[h] * alpha + sum;
      alpha_s[h] = alpha;
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < H; ++h) {
      const float al = alpha_s[h];
      float a0 = acc[h][0] * al, a1 = acc[h][1] * al;
      for (int n = 0; n < NT; ++n) {
        const float pr = p_s[h * NT + n];
        a0 = fmaf(pr, k_s[n * KS + tid], a0);
        a1 = fmaf(pr, k_s[n * KS + tid + kMlaThreads], a1);
      }
      acc[h][0] = a0;
      acc[h][1] = a1;
    }
  }
  __syncthreads();

#pragma unroll
  for (int h = 0; h < H; ++h) {
    const float l = l_s[h];
    const bool empty = !(l > 0.0f);
    float lse = kNegInf, factor = 0.0f;
    if (!empty) {
      lse = m_s[h] + logf(l);
      factor = 1.0f / l;
      if (a.sink != nullptr) factor *= 1.0f / (1.0f + expf(a.sink[(h0 + h) * a.sink_s] - lse));
    }
    uint16_t* o = a.out + b * a.o_sb + s * a.o_ss + (h0 + h) * a.o_sh;
    if (tid < a.dv) o[tid] = empty ? uint16_t(0) : codec::f32_to_bf16(acc[h][0] * factor);
    if (tid + kMlaThreads < a.dv) o[tid + kMlaThreads] = empty ? uint16_t(0) : codec::f32_to_bf16(acc[h][1] * factor);
    if (tid == 0) a.lse[b * a.l_sb + s * a.l_ss + (h0 + h) * a.l_sh] = lse;
  }
}

}  // namespace cuda
}  // namespace dsattn
