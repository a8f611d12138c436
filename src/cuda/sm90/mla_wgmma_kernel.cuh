// Sparse MLA on Hopper's warpgroup MMA (sm_90a): the tensor-core kernel of mla_mma_kernel.cuh with
// `wgmma` in place of `mma.sync`, for 64 heads per CTA and 64-token tiles. Same inputs, outputs,
// split (MlaSplitArgs, sparse_mla_combine_kernel) and arithmetic: the cache's E4M3 values go to
// shared memory as bf16 without their scales (exact), each scale block's scores accumulate
// separately in fp32 and are multiplied by their tokens' scales before they are added, and P is
// rounded to bf16 after it is multiplied by the scale of its token and of the output dims' block.
// What changes is who reads shared memory: `mma.sync` warps each load their own fragments of the
// tile (16 warps x the whole K tile per 64 tokens), a warpgroup MMA reads its B operand once for
// the 4 warps (the mma.sync kernel measured bound by shared-memory traffic, L1/TEX 77.8 %).
//
// One CTA per (query row, group of 64 heads, split): two warpgroups of 128 threads; a thread holds
// rows 16 w + lane / 4 and + 8 of its warp w in the warpgroup (the quad of lanes 4 i .. 4 i + 3
// shares a row). Warpgroup g accumulates O's dims [256 g, 256 g + 256) with P from registers (A)
// and V read MN-major from the same shared-memory tile (B, imm-trans-b). S = Q K^T comes in two
// forms (kHalf, a template parameter):
//   kHalf = false: both warpgroups compute the whole S of the tile (M = 64 heads, N = 64 tokens),
//     so each has every row's softmax in its own registers; the QK work is done twice;
//   kHalf = true: warpgroup g computes tokens [32 g, 32 g + 32) (N = 32); the row maxima meet in
//     shared memory (one barrier) and each thread hands its P (fp32) to its twin in the other
//     warpgroup (a second barrier), which rounds it to bf16 with its own dims' scales as the
//     first does. Needs 16.5 KB more shared memory (not the bf16 kv of d_qk 576).
// With kHalf a warpgroup's S reads only its own 32 tokens' rows of K, so for the FP8 caches (kPipe)
// each warpgroup dequantizes those rows itself, one group of parts at a time (the RoPE dims and
// scales, then each scale block), with a barrier of its own 128 threads after each group: the
// tensor cores run one block's MMAs while the warps convert the next block. Then the warpgroup
// issues the next tile's copies of its tokens into its half of the staging area. The barriers of
// the softmax exchange make every row visible to both warpgroups' P V, and the next tile's first
// barrier orders its stores after them. (H200, V3.2 64 x 128 heads 228 -> 196 us; before it, the
// whole tile was dequantized by all 256 threads between two barriers, ~30 % of each tile with the
// tensor cores idle. A bf16 kv, and kHalf = false, keep that order.)
// V4 with kPipe (kFoldK), as the mma.sync kernel: each E4M3 value is stored times its token's
// block scale (UE8M0, a power of two: the product is a bf16 value, exact), so S is one chain of
// MMAs over every block and P goes to bf16 without a scale (H100, 64 x 128 heads 231 -> 205 us).
//
// Shared memory (dynamic, its base rounded up to 1024 bytes for the swizzle atoms):
//   Q [D / 64 chunks][64 heads][128 bytes] | K [D / 64][64 tokens][128 bytes], both bf16 with the
//   128-byte swizzle (16-byte unit u of row r at unit u ^ (r % 8)) | staging: the next tile's
//   bytes as cp.async copies them ([64][chunks][16 bytes], as the mma.sync kernel's kStaged) |
//   scales [64][8] fp32 | token refs [2][64] | used-token masks [2] (u64) | kHalf: row maxima
//   [2][64] fp32 and P [2][128][16] fp32.
// A chunk of 64 dims is one 8-KB block: a K-major k-step of 16 dims is +32 bytes inside a row;
// for P V, V's 64-dim chunks lie 8 KB apart (the descriptor's leading offset) and its 8-token
// groups 1 KB apart (the stride offset).
#pragma once
#include <cuda_bf16.h>
#include <math.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/async_copy.cuh"
#include "cuda/common/mla_mma_kernel.cuh"
#include "cuda/sm90/wgmma.cuh"

namespace dsattn {
namespace cuda {

namespace mla_wg {
constexpr uint32_t kChunkBytes = 64 * 128;  // one 64-dim chunk of 64 rows of an operand
// Byte offset of 16-byte unit `unit` (dims 8 unit .. 8 unit + 7) of row `row` in a [chunks][64
// rows][128 bytes] operand with the 128-byte swizzle.
__device__ __forceinline__ uint32_t sw128(int row, int unit) {
  return static_cast<uint32_t>((unit >> 3) * kChunkBytes + row * 128 + (((unit & 7) ^ (row & 7)) << 4));
}
}  // namespace mla_wg

template <MlaSrc S, bool kHalf>
struct MlaWgShape {
  using Fmt = MlaMmaFormat<S>;
  static constexpr int kHeads = 64;
  static constexpr int kTile = 64;
  static constexpr int kThreads = 256;
  static constexpr int kDChunks = Fmt::kDqk / 64;  // 64-dim chunks of a Q / K row: 8 / 9
  static constexpr size_t kQBytes = size_t(kDChunks) * mla_wg::kChunkBytes;
  static constexpr size_t kKBytes = kQBytes;
  static constexpr int kRawRow = Fmt::kChunks * 16;
  static constexpr size_t kRawBytes = size_t(kTile) * kRawRow;
  static constexpr int kCopies = (kTile * Fmt::kChunks + kThreads - 1) / kThreads;  // chunks per thread
  static constexpr size_t kScBytes = size_t(kTile) * kMlaMmaScales * 4;
  static constexpr size_t kRefBytes = 2 * size_t(kTile) * sizeof(mla_mma::TokenRef);
  // kHalf: each warpgroup's half of S, exchanged: row maxima [2][64] fp32 and P [2][128 threads][16] fp32.
  static constexpr size_t kRedBytes = kHalf ? 2 * 64 * 4 : 0;
  static constexpr size_t kPexBytes = kHalf ? 2 * 128 * 16 * 4 : 0;
  static constexpr size_t kSmemBytes =
      1024 + kQBytes + kKBytes + kRawBytes + kScBytes + kRefBytes + 2 * 8 + kRedBytes + kPexBytes;
  static constexpr bool kFits = kSmemBytes <= 232448;  // Hopper's 227 KiB per block
  // P V in blocks of output dims that share a scale (bf16 sources: 128, no scale).
  static constexpr int kVBlock = Fmt::kFp8 ? Fmt::kBlock : 128;  // V3.2 128, V4 64
  static constexpr int kNVB = 256 / kVBlock;                     // blocks per warpgroup: 2 / 4
};

template <MlaSrc S, bool kHalf>
constexpr size_t mla_wgmma_smem_bytes() {
  return MlaWgShape<S, kHalf>::kSmemBytes;
}

template <MlaSrc S, bool kHalf>
__global__ void __launch_bounds__(256, 1) sparse_mla_wgmma_kernel(MlaDecodeArgs a, MlaSplitArgs sp) {
#if DSATTN_SM90A_DEVICE
  using namespace mla_mma;
  using mla_wg::sw128;
  using Fmt = MlaMmaFormat<S>;
  using Sh = MlaWgShape<S, kHalf>;
  static_assert(Sh::kFits, "more than Hopper's 227 KiB of shared memory per block");
  constexpr int T = Sh::kTile, D = Fmt::kDqk, CH = Fmt::kChunks, NC = Sh::kCopies, NT = Sh::kThreads;
  constexpr int VB = Sh::kVBlock, NVB = Sh::kNVB;
  constexpr int NTOK = kHalf ? 32 : 64;  // tokens of S per warpgroup
  constexpr int NS = NTOK / 2;           // S accumulators per thread
  constexpr int NI = NTOK / 8;           // ... in n8 blocks of 4
  // kPipe (FP8 caches with S split): warpgroup g dequantizes its own tokens [32 g, 32 g + 32), one
  // scale block of parts at a time, while the tensor cores run its previous block's S (below).
  constexpr bool kPipe = Fmt::kFp8 && kHalf;
  // kFoldK (V4 with kPipe): V4's block scales are powers of two, so each E4M3 value times its
  // token's block scale is a bf16 value, dequantized into K as such: S is one chain of MMAs with
  // no per-block fold, and P V's A operand is P itself.
  constexpr bool kFoldK = kPipe && Fmt::kV4;
  constexpr float kLog2e = 1.4426950408889634f;
  const float kNegInf = -INFINITY;

  extern __shared__ __align__(16) uint8_t mla_wg_smem[];
  const uint32_t raw0 = smem_u32(mla_wg_smem);
  const uint32_t base_u32 = (raw0 + 1023u) & ~1023u;
  uint8_t* const q_s = mla_wg_smem + (base_u32 - raw0);
  uint8_t* const k_s = q_s + Sh::kQBytes;
  uint8_t* const raw_s = k_s + Sh::kKBytes;
  float* const sc_s = reinterpret_cast<float*>(raw_s + Sh::kRawBytes);
  TokenRef(*ref_s)[T] = reinterpret_cast<TokenRef(*)[T]>(sc_s + T * kMlaMmaScales);
  uint64_t* const used_s = reinterpret_cast<uint64_t*>(reinterpret_cast<uint8_t*>(ref_s) + Sh::kRefBytes);
  float(*red_s)[64] = reinterpret_cast<float(*)[64]>(used_s + 2);                  // kHalf: [2][64]
  float4(*pex_s)[128][4] = reinterpret_cast<float4(*)[128][4]>(used_s + 2 + 64);  // kHalf: [2][128][4]
  const uint32_t q_u32 = base_u32, k_u32 = base_u32 + static_cast<uint32_t>(Sh::kQBytes);
  const uint32_t raw_u32 = smem_u32(raw_s);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = tid >> 7;                       // warpgroup: O dims [256 wg, 256 wg + 256)
  const int t4 = lane & 3;
  const int r0 = 16 * (warp & 3) + (lane >> 2);  // this thread's heads: r0, r0 + 8
  const int tok0 = kHalf ? 32 * wg : 0;          // first token of this warpgroup's S
  const int slot_t = tid & 127;                  // kHalf: this thread's P slot (the other warpgroup's twin reads it)
  const int64_t b = blockIdx.x / a.Sq, s = blockIdx.x % a.Sq;
  const int h0 = blockIdx.y * Sh::kHeads;
  const int len_main = used_length(a.main, b);
  const int len_extra = a.extra.topk > 0 ? used_length(a.extra, b) : 0;
  const int total = len_main + len_extra;
  const int ntiles = (total + T - 1) / T;
  const int t_begin = blockIdx.z * sp.tiles_per_split;
  const int t_end = sp.splits > 1 ? min(ntiles, t_begin + sp.tiles_per_split) : ntiles;
  const float qk_scale = a.sm_scale * kLog2e;

  // Q: 64 rows of D bf16 into the swizzled operand layout.
  {
    const uint16_t* qrow = a.q + b * a.q_sb + s * a.q_ss + int64_t(h0) * a.q_sh;
    for (int e = tid; e < Sh::kHeads * (D / 8); e += NT) {
      const int h = e / (D / 8), u = e % (D / 8);
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(qrow + int64_t(h) * a.q_sh + 8 * u));
      *reinterpret_cast<uint4*>(q_s + sw128(h, u)) = v;
    }
    fence_proxy_async_smem();  // read by the tensor cores (async proxy) after the barriers below
  }
  // Warp 0 resolves the positions of the next tile but one (as the mma.sync kernel): `publish`
  // turns the cache entries read ahead (pend_*) into slot's token refs and mask of used tokens,
  // then reads the entries of tile `next`.
  int pend_which[T / 32], pend_id[T / 32];
  const auto publish = [&](int slot, int next) {
    uint32_t m[T / 32];
#pragma unroll
    for (int r = 0; r < T / 32; ++r) {
      const TokenRef ref = make_ref<S>(a, pend_which[r], pend_id[r]);
      ref_s[slot][lane + 32 * r] = ref;
      m[r] = __ballot_sync(0xffffffffu, ref.rec != nullptr);
      load_index(a, b, s, len_main, total, next * T + lane + 32 * r, &pend_which[r], &pend_id[r]);
    }
    if (lane == 0) used_s[slot] = (uint64_t(m[1]) << 32) | m[0];
  };
  if (warp == 0) {
#pragma unroll
    for (int r = 0; r < T / 32; ++r) {
      load_index(a, b, s, len_main, total, t_begin * T + lane + 32 * r, &pend_which[r], &pend_id[r]);
    }
    publish(0, t_begin + 1);
    if (kPipe && t_begin + 1 < t_end) publish(1, t_begin + 2);  // kPipe publishes a tile ahead
  }
  __syncthreads();

  // A tile's copies into the staging area, part-minor (a token's record is read in order): all
  // 64 tokens by all threads, or with kPipe warpgroup g's own tokens [32 g, 32 g + 32) by its 128
  // threads, issued once its chunks of the previous tile are stored.
  constexpr int kIssueTok = kPipe ? 32 : T, kIssueThr = kPipe ? 128 : NT;
  const int issue_tok0 = kPipe ? 32 * wg : 0, issue_idx = kPipe ? slot_t : tid;
  const auto issue = [&](int slot) {
#pragma unroll
    for (int i = 0; i < (kIssueTok * CH + kIssueThr - 1) / kIssueThr; ++i) {
      const int c = issue_idx + i * kIssueThr;
      if (c < kIssueTok * CH) {
        const int tok = issue_tok0 + c / CH, part = c % CH;
        const TokenRef r = ref_s[slot][tok];
        if (r.rec != nullptr) stage_chunk<S>(raw_u32 + 16 * (kPipe ? tok * CH + part : c), r, part);
      }
    }
    cp_async_commit();
  };
  // The staged tile into K (bf16, swizzled) and the scales; an unused position's chunks as zeros.
  // FP8 caches are stored token-minor (a warp's 32 lanes: 32 tokens of one part), unlike the
  // copies: each lane's 16-byte stores land in another row of the same 64-dim chunk, 8 distinct
  // 16-byte bank groups after the swizzle, and the staged reads (656 / 592 bytes apart) spread
  // likewise. Part-minor put lanes a few parts apart on the same banks of chunks 8 KB apart (H100
  // ncu, V3.2 64 x 128: 7.4 M of 26.9 M shared-memory wavefronts were bank conflicts; V4 decode
  // 64 x 128 307 -> 262 us, 2026-12-05 BENCHMARKS). A bf16 kv stays part-minor, with the same code
  // as before: its 8-dim chunks fill whole 128-byte rows, and its staged rows (1024 / 1152 bytes)
  // would all start on bank 0.
  constexpr bool kTokMinor = Fmt::kFp8;
  const auto store = [&](int slot) {
#pragma unroll
    for (int i = 0; i < NC; ++i) {
      const int c = tid + i * NT;
      if (c < T * CH) {
        const int part = kTokMinor ? c / T : c % CH, tok = kTokMinor ? c % T : c / CH;
        const int at = kTokMinor ? tok * CH + part : c;  // the chunk's place in the staged tile
        const uint4 v = ref_s[slot][tok].rec != nullptr ? staged_chunk<S>(raw_s + 16 * at, part) : make_uint4(0u, 0u, 0u, 0u);
        store_chunk<S>(v, part, sc_s + tok * kMlaMmaScales,
                       [&](int u) { return reinterpret_cast<uint4*>(k_s + sw128(tok, u)); });
      }
    }
    fence_proxy_async_smem();  // K is read by the tensor cores after the barrier
  };
  // kPipe: one group of parts of this thread's token (lane) of its warpgroup's half, warp w of
  // the warpgroup taking parts p0 + w, p0 + w + 4, ...: with kNope the E4M3 parts [p0, p0 + one
  // scale block), else the RoPE dims and the scales (parts kNopeChunks ..); dequantized into K,
  // then fenced for the tensor cores and the warpgroup's barrier.
  const auto store_parts = [&](auto nope_only, int slot, int p0) {
    constexpr bool kNope = decltype(nope_only)::value;
    constexpr int np = kNope ? Fmt::kBlock / 16 : CH - Fmt::kNopeChunks;
    const int tok = tok0 + lane;
    const bool used = ref_s[slot][tok].rec != nullptr;
    const auto unit = [&](int u) { return reinterpret_cast<uint4*>(k_s + sw128(tok, u)); };
#pragma unroll
    for (int i = 0; i < (np + 3) / 4; ++i) {
      const int part = p0 + (warp & 3) + 4 * i;
      if (np % 4 == 0 || part < p0 + np) {
        const uint4 v = used ? staged_chunk<S>(raw_s + 16 * (tok * CH + part), part) : make_uint4(0u, 0u, 0u, 0u);
        if constexpr (kNope && kFoldK) {  // one scale block per call: its scale, written by the RoPE group
          store_e4m3_chunk_scaled(v, part, unit, sc_s[tok * kMlaMmaScales + p0 * 16 / Fmt::kBlock]);
        } else if constexpr (kNope) {
          store_e4m3_chunk(v, part, unit);
        } else {
          store_chunk<S>(v, part, sc_s + tok * kMlaMmaScales, unit);
        }
      }
    }
    fence_proxy_async_smem();
    if (wg == 0) {  // this warpgroup's 4 warps (named barriers 1 and 2; 0 is __syncthreads)
      asm volatile("bar.sync 1, 128;\n" ::: "memory");
    } else {
      asm volatile("bar.sync 2, 128;\n" ::: "memory");
    }
  };
  if (t_begin < t_end) issue(0);

  float o[NVB][VB / 2];
#pragma unroll
  for (int vb = 0; vb < NVB; ++vb)
#pragma unroll
    for (int i = 0; i < VB / 2; ++i) o[vb][i] = 0.0f;
  float m_run[2] = {kNegInf, kNegInf}, l_run[2] = {0.0f, 0.0f};  // rows r0, r0 + 8 (l: this thread's part)

  // K-major descriptors of k-step ks (dims 16 ks ..) of Q and of the K tile.
  const auto kdesc = [](uint32_t base, int ks) {
    return wgmma_desc_sw128(base + (ks >> 2) * mla_wg::kChunkBytes + (ks & 3) * 32);
  };

  for (int j = t_begin; j < t_end; ++j) {
    const int slot = (j - t_begin) & 1;
    cp_async_wait<0>();
    __syncthreads();  // the tile's copies landed; both warpgroups are past the previous tile's MMAs
    if constexpr (!kPipe) {
      store(slot);
      if (warp == 0 && j + 1 < t_end) publish(slot ^ 1, j + 2);
      __syncthreads();
      if (j + 1 < t_end) issue(slot ^ 1);
    }

    // S = Q K^T over this warpgroup's tokens (all 64, or with kHalf its 32): for the FP8 caches
    // the RoPE dims straight into sacc, each scale block into c, then added with its tokens'
    // scales (kHalf: two c buffers, the next block's MMAs in flight while one is added); a bf16 kv
    // all in one.
    float sacc[NS];
    const uint32_t k_tok = k_u32 + static_cast<uint32_t>(tok0 * 128);  // row tok0 of the K tile
    constexpr int PB = Fmt::kFp8 ? Fmt::kBlock / 16 : 1;  // E4M3 parts (16 dims) per scale block
    using NopeOnly = std::integral_constant<bool, true>;
    if constexpr (kPipe) store_parts(std::integral_constant<bool, false>{}, slot, Fmt::kNopeChunks);
    wgmma_fence();
    if constexpr (Fmt::kFp8) {
      constexpr int KB = Fmt::kBlock / 16;  // k-steps per scale block
      constexpr int NB = Fmt::kNopeBlocks;
#pragma unroll
      for (int ks = Fmt::kNope / 16; ks < D / 16; ++ks) {
        wgmma_bf16_ss<NTOK>(sacc, kdesc(q_u32, ks), kdesc(k_tok, ks), ks != Fmt::kNope / 16);
      }
      const auto fold = [&](const float(&c)[NS], int blk) {
#pragma unroll
        for (int i = 0; i < NI; ++i) {
          const int tok = tok0 + 8 * i + 2 * t4;
          const float s0 = sc_s[tok * kMlaMmaScales + blk], s1 = sc_s[(tok + 1) * kMlaMmaScales + blk];
          sacc[4 * i + 0] = fmaf(c[4 * i + 0], s0, sacc[4 * i + 0]);
          sacc[4 * i + 1] = fmaf(c[4 * i + 1], s1, sacc[4 * i + 1]);
          sacc[4 * i + 2] = fmaf(c[4 * i + 2], s0, sacc[4 * i + 2]);
          sacc[4 * i + 3] = fmaf(c[4 * i + 3], s1, sacc[4 * i + 3]);
        }
      };
      if constexpr (kFoldK) {  // every block into sacc, its conversion while the previous block's MMAs run
#pragma unroll
        for (int blk = 0; blk < NB; ++blk) {
          store_parts(NopeOnly{}, slot, blk * PB);
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < KB; ++kk) {
            wgmma_bf16_ss<NTOK>(sacc, kdesc(q_u32, blk * KB + kk), kdesc(k_tok, blk * KB + kk), 1);
          }
          wgmma_commit();
        }
        wgmma_wait_all();
        wgmma_fence_operands(sacc);
      } else if constexpr (kHalf) {
        float c[2][NS];
        if constexpr (kPipe) {
          store_parts(NopeOnly{}, slot, 0);  // while the RoPE dims' MMAs run
          wgmma_fence();
        }
#pragma unroll
        for (int kk = 0; kk < KB; ++kk) wgmma_bf16_ss<NTOK>(c[0], kdesc(q_u32, kk), kdesc(k_tok, kk), kk != 0);
        wgmma_commit();
#pragma unroll
        for (int blk = 0; blk < NB; ++blk) {
          if (blk + 1 < NB) {
            if constexpr (kPipe) store_parts(NopeOnly{}, slot, (blk + 1) * PB);  // while block blk's run
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < KB; ++kk) {
              wgmma_bf16_ss<NTOK>(c[(blk + 1) & 1], kdesc(q_u32, (blk + 1) * KB + kk), kdesc(k_tok, (blk + 1) * KB + kk),
                                  kk != 0);
            }
            wgmma_commit();
            wgmma_wait_1();
          } else {
            wgmma_wait_all();
          }
          wgmma_fence_operands(c[blk & 1]);
          wgmma_fence_operands(sacc);
          fold(c[blk & 1], blk);
        }
      } else {
        float c[NS];
#pragma unroll 1
        for (int blk = 0; blk < NB; ++blk) {
          if (blk > 0) wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < KB; ++kk) {
            wgmma_bf16_ss<NTOK>(c, kdesc(q_u32, blk * KB + kk), kdesc(k_tok, blk * KB + kk), kk != 0);
          }
          wgmma_commit();
          wgmma_wait_all();
          wgmma_fence_operands(c);
          wgmma_fence_operands(sacc);
          fold(c, blk);
        }
      }
    } else {
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) wgmma_bf16_ss<NTOK>(sacc, kdesc(q_u32, ks), kdesc(k_tok, ks), ks != 0);
      wgmma_commit();
      wgmma_wait_all();
      wgmma_fence_operands(sacc);
    }
    // kPipe: this warpgroup's half of the staging area is read (its last store_parts barrier).
    if constexpr (kPipe) {
      if (j + 1 < t_end) issue(slot ^ 1);
    }

    // Online softmax in the log2 domain on the thread's two rows (the quad's four lanes share a
    // row): unused tokens -inf. kHalf: the row maxima of both halves meet in shared memory, and
    // each warpgroup's P goes to its twin thread of the other one.
    float po[kHalf ? NS : 1];
    {
      const uint64_t used = used_s[slot];
      float mx[2] = {kNegInf, kNegInf};
#pragma unroll
      for (int i = 0; i < NI; ++i) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const bool u = (used >> (tok0 + 8 * i + 2 * t4 + e)) & 1u;
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            float& x = sacc[4 * i + 2 * hr + e];
            x = u ? x * qk_scale : kNegInf;
            mx[hr] = fmaxf(mx[hr], x);
          }
        }
      }
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
        mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
      }
      if constexpr (kHalf) {
        if (t4 == 0) {
          red_s[wg][r0] = mx[0];
          red_s[wg][r0 + 8] = mx[1];
        }
        __syncthreads();
        mx[0] = fmaxf(mx[0], red_s[wg ^ 1][r0]);
        mx[1] = fmaxf(mx[1], red_s[wg ^ 1][r0 + 8]);
      }
      float alpha[2];
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const float m_new = fmaxf(m_run[hr], mx[hr]);
        alpha[hr] = m_new != kNegInf ? exp2f(m_run[hr] - m_new) : 1.0f;  // m_run = -inf -> 0
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < NI; ++i) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& x = sacc[4 * i + 2 * hr + e];
            x = m_new != kNegInf ? exp2f(x - m_new) : 0.0f;  // unused tokens: exp2(-inf) = 0
            sum += x;
          }
        }
        l_run[hr] = l_run[hr] * alpha[hr] + sum;
        m_run[hr] = m_new;
      }
      if constexpr (kHalf) {
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          pex_s[wg][slot_t][v] = make_float4(sacc[4 * v], sacc[4 * v + 1], sacc[4 * v + 2], sacc[4 * v + 3]);
        }
      }
#pragma unroll
      for (int vb = 0; vb < NVB; ++vb)
#pragma unroll
        for (int i = 0; i < VB / 8; ++i) {
          o[vb][4 * i + 0] *= alpha[0];
          o[vb][4 * i + 1] *= alpha[0];
          o[vb][4 * i + 2] *= alpha[1];
          o[vb][4 * i + 3] *= alpha[1];
        }
      if constexpr (kHalf) {
        __syncthreads();
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          const float4 x = pex_s[wg ^ 1][slot_t][v];
          po[4 * v] = x.x;
          po[4 * v + 1] = x.y;
          po[4 * v + 2] = x.z;
          po[4 * v + 3] = x.w;
        }
      }
    }

    // O[:, dims of this warpgroup] += P V, in blocks of VB dims with one scale per (token, block):
    // A = P times the scale (bf16, registers), B = the tile's V rows read MN-major. Two blocks per
    // commit keep at most 32 registers of A alive.
#pragma unroll
    for (int vb0 = 0; vb0 < NVB; vb0 += 2) {
      uint32_t pa[2][4][4];
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int dim0 = 256 * wg + (vb0 + q) * VB;
        const int blk = Fmt::kFp8 ? dim0 / Fmt::kBlock : 0;  // V4: the RoPE dims (448 ..) are block 7, scale 1
#pragma unroll
        for (int sx = 0; sx < 4; ++sx) {  // k-steps of 16 tokens: kHalf, this warpgroup's two, then the other's
          const bool mine = !kHalf || sx < 2;
          const int st = kHalf ? (mine ? 2 * wg : 2 - 2 * wg) + (sx & 1) : sx;
          const int lb = kHalf ? 2 * (sx & 1) : 2 * sx;  // its first n8 block in sacc / po
          const float* src = mine ? sacc : po;
          const int ta = 16 * st + 2 * t4, tb = ta + 8;
          float sa0 = 1.0f, sa1 = 1.0f, sb0 = 1.0f, sb1 = 1.0f;
          if constexpr (Fmt::kFp8 && !kFoldK) {
            sa0 = sc_s[ta * kMlaMmaScales + blk];
            sa1 = sc_s[(ta + 1) * kMlaMmaScales + blk];
            sb0 = sc_s[tb * kMlaMmaScales + blk];
            sb1 = sc_s[(tb + 1) * kMlaMmaScales + blk];
          }
          const float* pa_lo = src + 4 * lb;
          const float* pa_hi = src + 4 * (lb + 1);
          pa[q][sx][0] = pack_bf16(pa_lo[0] * sa0, pa_lo[1] * sa1);
          pa[q][sx][1] = pack_bf16(pa_lo[2] * sa0, pa_lo[3] * sa1);
          pa[q][sx][2] = pack_bf16(pa_hi[0] * sb0, pa_hi[1] * sb1);
          pa[q][sx][3] = pack_bf16(pa_hi[2] * sb0, pa_hi[3] * sb1);
        }
      }
      wgmma_fence();
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int dim0 = 256 * wg + (vb0 + q) * VB;
#pragma unroll
        for (int sx = 0; sx < 4; ++sx) {
          const int st = kHalf ? (sx < 2 ? 2 * wg : 2 - 2 * wg) + (sx & 1) : sx;
          const uint64_t vd = wgmma_desc_sw128_lbo(k_u32 + (dim0 >> 6) * mla_wg::kChunkBytes + st * 16 * 128,
                                                   mla_wg::kChunkBytes, 1024);
          wgmma_bf16_rs_tb<VB>(o[vb0 + q], pa[q][sx], vd, 1);
        }
      }
      wgmma_commit();
      wgmma_wait_all();
#pragma unroll
      for (int q = 0; q < 2; ++q) wgmma_fence_operands(o[vb0 + q]);
      wgmma_fence_regs(pa[0]);
      wgmma_fence_regs(pa[1]);
    }
    // kPipe: tile j's refs and used-token mask are read (its copies were issued in tile j - 1, its
    // stores and softmax are done): warp 0 puts tile j + 2's in their slot; the next tile's first
    // barrier publishes them.
    if constexpr (kPipe) {
      if (warp == 0 && j + 2 < t_end) publish(slot, j + 3);
    }
  }

  // Each row's sum over the quad's lanes (kHalf: and over both warpgroups' tokens).
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    l_run[hr] += __shfl_xor_sync(0xffffffffu, l_run[hr], 1);
    l_run[hr] += __shfl_xor_sync(0xffffffffu, l_run[hr], 2);
  }
  if constexpr (kHalf) {
    if (t4 == 0) {
      red_s[wg][r0] = l_run[0];
      red_s[wg][r0 + 8] = l_run[1];
    }
    __syncthreads();
    l_run[0] += red_s[wg ^ 1][r0];
    l_run[1] += red_s[wg ^ 1][r0 + 8];
  }
  if (sp.splits > 1) {  // this split's unnormalized O and (max, sum), for the combine kernel
    const int64_t row_h = int64_t(blockIdx.x) * sp.hq + h0;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int h = r0 + 8 * hr;
      if (wg == 0 && t4 == 0) sp.part_ml[(row_h + h) * sp.splits + blockIdx.z] = make_float2(m_run[hr], l_run[hr]);
      float* po = sp.part_o + ((row_h + h) * sp.splits + blockIdx.z) * kLatentDv + 256 * wg + 2 * t4;
#pragma unroll
      for (int vb = 0; vb < NVB; ++vb)
#pragma unroll
        for (int i = 0; i < VB / 8; ++i) {
          *reinterpret_cast<float2*>(po + vb * VB + 8 * i) = make_float2(o[vb][4 * i + 2 * hr], o[vb][4 * i + 2 * hr + 1]);
        }
    }
    return;
  }
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int h = r0 + 8 * hr;
    float lse, f;
    finish_row(m_run[hr], l_run[hr], a, h0 + h, &lse, &f);
    if (wg == 0 && t4 == 0) a.lse[b * a.l_sb + s * a.l_ss + int64_t(h0 + h) * a.l_sh] = lse;
    const bool used = l_run[hr] > 0.0f;
    uint16_t* orow = a.out + b * a.o_sb + s * a.o_ss + int64_t(h0 + h) * a.o_sh + 256 * wg + 2 * t4;
#pragma unroll
    for (int vb = 0; vb < NVB; ++vb)
#pragma unroll
      for (int i = 0; i < VB / 8; ++i) {
        const uint32_t v = used ? pack_bf16(o[vb][4 * i + 2 * hr] * f, o[vb][4 * i + 2 * hr + 1] * f) : 0u;
        *reinterpret_cast<uint32_t*>(orow + vb * VB + 8 * i) = v;
      }
  }
#else
  (void)a; (void)sp;
  __trap();  // never launched: the host takes this kernel only on sm_90 devices of builds with sm_90a code
#endif
}

}  // namespace cuda
}  // namespace dsattn
