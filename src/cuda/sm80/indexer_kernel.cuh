// Indexer scores on tensor cores via mma.sync (portable path: sm_80, sm_89, sm_90, sm_100, sm_120).
// (On sm_100, and on sm_90 under DSATTN_INDEXER_KERNEL=portable, large FP8 paged-logits calls run
// src/cuda/sm90/indexer_ws_mma.cuh instead: the same MMAs behind warp-specialized TMA producers.)
//
//   logit[r, t] = kscale[t] * sum_h w[r, h] * relu( sum_d q[r, h, d] * k[t, d] )      (FP8, SPEC 2.1)
//   logit[r, t] =             sum_h w[r, h] * relu( sum_blk sq[r,h,blk] sk[t,blk] dot_blk )  (MXFP4, 2.2)
//
// ---------------------------------------------------------------- work and grid
// The kernel is persistent: CTA p walks the (group, unit) range [meta pair p, meta pair p+1) of
// the schedule metadata (src/common/indexer_work.h). A *group* is up to 8 query rows sharing one
// key sequence (a request's N rows; one varlen row; 8 prefill rows). The CTA loads the group's
// Q / weights once into shared memory and streams the group's keys in *tiles* of T states
// (T = 32 * warps: 64, 128 or 256); every key byte of a group is read from global memory once
// per group, no matter how many rows it has. Per-state scales are applied after the head sum.
// With p.split = k > 1 (logits epilogue only), CTA b walks partition b / k and takes every k-th
// tile of it, so a one-partition-per-SM schedule can still run k CTAs per SM.
//
// ---------------------------------------------------------------- warp roles and pipeline
// All warps load and all warps compute (sm_80-style multistage pipeline, `stages` >= 2 tiles):
//   loads:   the block-table entries of a tile are fetched one iteration before its copies are
//            issued (IdxPending), so their latency hides behind a tile of compute. Then
//            warp w copies the page-contiguous *runs* r = w, w + warps, ... of the tile: FP8 keys
//            on sm_90+ (p.bulk) with one bulk copy (TMA engine) per run, issued by lane 0 and
//            counted on the stage's mbarrier (every warp arrives once per tile); otherwise with
//            16-byte cp.async (4-byte when the cache is not 16-byte aligned; a warp instruction
//            moves 512 contiguous bytes). Scales always go through 4-byte cp.async. Block-table entries are bounds-checked: a page id outside
//            [0, num_pages), or a page index >= max_pages, is never dereferenced; its states are
//            marked invalid and score -inf.
//   compute: warp w owns states [32 w, 32 w + 32) of the tile (two m16 MMA tiles, states are the
//            MMA's M dimension, heads its N dimension), holds their key fragments in registers and
//            loops over rows j and head pairs (16 heads), reading Q fragments from shared memory
//            (f16 Q: one n-tile of 8 heads per step, the next n-tile's fragments loaded before the
//            current MMAs; one accumulator chain per m-tile and n-tile).
//            The head sum is a quad shuffle reduction; the per-state scale is applied after it.
//            MMA: native e4m3 m16n8k32 on sm_89 / sm_120; elsewhere (sm_80, sm_90, sm_100, whose
//            e4m3 mma.sync is emulated) the key fragments are converted to f16 once per tile and Q
//            is kept as f16 in shared memory when it fits (p.q_f16), feeding m16n8k16 f16 MMAs.
// Two pipelines share these parts:
//   warp-local (indexer_body_warp; cp.async keys and an epilogue that only stores, i.e. the logits
//            epilogue): warp w copies the keys, scales and valid flags of its own states, kH
//            halves of 32 from state 32 kH w of each tile (large calls: 12 warps x 32 states,
//            or kH = 2 with 8 warps where 12 do not fit, see pick_indexer_config; one
//            block-table entry per lane and half, a division by the
//            page size through detail::FastDivU31), waits for its own cp.async groups and stores
//            its logits itself; the CTA meets only when the group changes. Why (H200, 32 x 32K,
//            H = 64, ncu of the CTA-wide pipeline on such calls): the MMA loop held ~30 % of the
//            warp samples and a barrier 11 %, warps 0-3 issued every copy of a 64-state-page tile
//            while 4-7 waited, and each tile paid two integer divisions by the stage count. With
//            the warp-local pipeline, ring counters (IdxRingPos) and its own kernel: 121.8 ->
//            103.5-104.6 us there, 128 x 32K 444.8 -> 377.2 (BENCHMARKS.md, 2026-12-01; with
//            the later cuts and 64-state halves 90.5-91.4 and 321.4-322.9).
//   CTA-wide (indexer_body_cta; bulk copies, and epilogues that read the whole score tile), below.
// Barrier protocol of the CTA-wide pipeline, per tile i (stage s = i % stages):
//   wait(cp.async group i, and stage s's mbarrier phase (i / stages) & 1 when bulk) ;
//   __syncthreads [B1]  -> tile i's keys visible; tile i-1 fully consumed
//   issue loads of tile i + stages - 1 into stage (i - 1) % stages ; commit
//   if the group changed: epi.group_end(previous) ; load Q/w/windows of the new group ; __syncthreads
//   compute -> score tile (shared) ; __syncthreads [B2] ; epi.consume(tile)
// After the last tile: epi.group_end(last group) ; epi.finish(). All of these are called by every
// thread of the CTA (uniform control flow), so an epilogue may use __syncthreads inside them.
//
// ---------------------------------------------------------------- shared-memory layout (bytes)
//   q      [rows_per_group * Hp][Dq]   E4M3 (MXFP4 Q is dequantized to E4M3 here, scales apart),
//                                      or f16 [.. ][2 D] when p.q_f16;
//                                      Hp = H rounded up to 16 (padding heads are zero, weight 0)
//   w      [rows_per_group * Hp] f32
//   qs     [rows_per_group * Hp][D/32] f32   (MXFP4 only: Q block scales)
//   win    [8] RowWindow                      (lo, hi, col_off of each row of the current group)
//   bars   [stages] u64                       mbarriers of the bulk key copies
//   scores [rows_per_group][T] f32            <- the tile handed to the epilogue
//   stage  x stages: keys [T][RB] (swizzled 16-byte chunks; unswizzled when bulk), kscale [T] u32,
//                    valid [T] u8
//   epi    Epilogue::smem_bytes(...)          (the epilogue's own scratch)
//
// ---------------------------------------------------------------- epilogue interface
// The score tile of rows [row0, row0 + rows) x states [t0, t0 + count) lives in SHARED memory:
//   scores[j * ld + i] = logit of query row (row0 + j), state (t0 + i), fp32, for j < rows,
//   i < count; already scaled, weighted and masked: -inf where t0 + i is outside row j's window
//   [win[j].lo, win[j].hi) or on an invalid page. Output column of state t for row j is
//   t - win[j].col_off. An Epilogue type provides (all device members called by every thread):
//     __host__ __device__ static size_t smem_bytes(const IndexerParams&) scratch it needs (may
//                                                       depend on p.tile_states, p.work)
//     __device__ void begin(const IndexerParams&, uint8_t* epi_smem)    once per CTA
//     __device__ void consume(const IndexerParams&, const ScoreTile&)   per tile (after B2)
//     __device__ void group_end(const IndexerParams&, const GroupInfo&) after a group's last tile
//                                                                       in this CTA
//     __device__ void finish(const IndexerParams&)                      once per CTA, at the end
// consume() must not keep pointers into `scores` (rewritten after the next B1). A group may be
// split over several CTAs (GroupInfo says which state range this CTA covered): a fused top-k
// merges per-CTA candidates itself (workspace + a second pass or atomics).
// The logits epilogue (below) writes the tile coalesced to global memory and, when cleaning, -inf
// on the columns no tile covers.
#pragma once
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "common/fast_div.h"
#include "common/indexer_cursor.h"
#include "common/indexer_work.h"
#include "cuda/sm80/indexer_params.h"
#include "cuda/common/async_copy.cuh"
#include "cuda/common/indexer_dequant.cuh"
#include "cuda/common/mma_fp8.cuh"
#include "cuda/common/pdl.cuh"
#include "dsattn/codecs.h"
#include "dsattn/formats.h"

namespace dsattn {
namespace cuda {

struct ScoreTile {
  const float* scores;      // shared [rows][ld]
  int ld;
  int rows;
  int64_t group, row0;
  int64_t t0;
  int count;
  const detail::RowWindow* win;  // shared [rows]
};

struct GroupInfo {
  int64_t group, row0;
  int rows;
  int64_t t_begin, t_end;  // states this CTA processed for the group
  const detail::RowWindow* win;
};

template <IndexerFormat F, int D>
struct IdxTraits {
  static constexpr bool kFp4 = F == IndexerFormat::kMxfp4;
  static constexpr int kRowBytes = kFp4 ? D / 2 : D;  // key bytes per state in shared memory
  static constexpr int kChunks = kRowBytes / 16;      // 16-byte chunks per state
  static constexpr int kKSteps = D / 32;
  // Swizzled 16-byte chunk of a key row (conflict-free fragment loads, see compute()).
  __device__ static __forceinline__ int key_chunk(int row, int c) {
    if (!kFp4) return D == 128 ? (c ^ ((row & 1) << 2)) : c;
    if (D == 128) return c ^ ((row >> 1) & 3);
    if (D == 64) return c ^ ((row >> 2) & 1);
    return c;
  }
  // Byte offset of 8-byte unit u of Q row `row` (E4M3, D bytes per row).
  __device__ static __forceinline__ int q_unit_off(int row, int u) {
    if (!kFp4) return key_chunk(row, u >> 1) * 16 + (u & 1) * 8;
    if (D == 128) return (u ^ ((row & 3) << 2)) * 8;
    if (D == 64) return (u ^ (((row >> 1) & 1) << 2)) * 8;
    return u * 8;
  }
};

// Keys by bulk copies (p.bulk): FP8 only, and only where this code was compiled for sm_90+ (a
// JIT-compiled older PTX on a newer GPU falls back to cp.async).
template <IndexerFormat F>
__device__ __forceinline__ bool idx_bulk(const IndexerParams& p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return F == IndexerFormat::kFp8 && p.bulk != 0;
#else
  (void)p;
  return false;
#endif
}

// ---------------------------------------------------------------- tile iteration
// IdxTile and IdxCursor: common/indexer_cursor.h (host and device code).

// ---------------------------------------------------------------- loads
// Page id of page index `pi` of block-table row `b`, or -1 when it must not be read.
__device__ __forceinline__ int64_t idx_page_id(const IndexerParams& p, int64_t b, int64_t pi) {
  if (p.block_table == nullptr) return pi < p.num_pages ? pi : -1;
  if (b < 0 || pi < 0 || pi >= p.max_pages) return -1;
  const int64_t id = p.block_table[b * p.bt_s0 + pi * p.bt_s1];
  return (id >= 0 && id < p.num_pages) ? id : -1;
}

// Pulls the block-table entries of the pages this CTA will read in the group of tile `t` (from
// t.t0 to the end of the CTA's part of the group, as the cursor `c` that produced t knows it) into
// L1 with prefetches, so the per-tile entry loads (issued only one tile ahead of their copies)
// mostly hit L1. Measured effect is small (H200, 128 x 32K, copies only: 320 -> 310 us); the
// per-tile cost that dominated was elsewhere (see src/cuda/sm90/indexer_wgmma.cuh). Called by one
// warp when its cursor enters a group; non-blocking.
__device__ __forceinline__ void idx_prefetch_group_entries(const IndexerParams& p, const IdxCursor& c,
                                                           const IdxTile& t, int lane) {
  if (p.block_table == nullptr) return;
  const int64_t b = detail::indexer_group_request(p.work, t.g);
  if (b < 0) return;
  int64_t end = int64_t(c.glo) + int64_t(c.uend) * detail::kIndexerUnit;
  if (end > c.ghi) end = c.ghi;
  if (end <= t.t0) return;
  // 32-bit divisions (states < 2^31): this runs on the warp that issues the copies.
  const int32_t S = p.states_per_page;
  const int32_t pi0 = t.t0 / S;
  int64_t pi1 = static_cast<int32_t>(end - 1) / S + 1;
  if (pi1 > p.max_pages) pi1 = p.max_pages;
  const int32_t log2_step = p.bt_s1 == 1 ? 5 : 0;  // one prefetch per 128-byte line when contiguous
  const int32_t step = 1 << log2_step;
  const int32_t n = static_cast<int32_t>((pi1 - pi0 + step - 1) >> log2_step);
  const int32_t cap = n < 2048 ? n : 2048;
  for (int32_t k = lane; k < cap; k += 32) {
    const int32_t* a = p.block_table + b * p.bt_s0 + (int64_t(pi0) + int64_t(k) * step) * p.bt_s1;
    asm volatile("prefetch.global.L1 [%0];\n" ::"l"(a));
  }
}

// A tile whose page ids are being fetched: one iteration ahead of its cp.async issue, so the
// block-table latency hides behind a tile of compute. Lane k of warp w holds the page id of run
// w + warps * k (a run = the tile's states inside one page; runs <= 32 * warps always).
struct IdxPending {
  IdxTile t;
  bool ok;
  int32_t pi0;   // page index of the tile's first state
  int off0;      // its offset inside that page
  int nruns;
  int32_t raw;   // this lane's run: block-table entry as loaded (checked only at issue time, so the
                 // load stays in flight across the iteration), or -1 when it must not be read
};

// `last_g`: group of the previous pending tile (its block-table span is already prefetched).
__device__ __forceinline__ void idx_prefetch(const IndexerParams& p, IdxCursor& lc, IdxPending& pd, int32_t& last_g,
                                             int warp, int lane) {
  pd.ok = lc.next(p, &pd.t);
  pd.raw = -1;
  if (!pd.ok) return;
  if (pd.t.g != last_g) {
    last_g = pd.t.g;
    if (warp == 0) idx_prefetch_group_entries(p, lc, pd.t, lane);
  }
  const int32_t S = p.states_per_page;
  pd.pi0 = pd.t.t0 / S;
  pd.off0 = pd.t.t0 - pd.pi0 * S;
  pd.nruns = (pd.off0 + pd.t.count + S - 1) / S;
  const int r = warp + p.warps * lane;
  if (r < pd.nruns) {
    const int64_t pi = pd.pi0 + r;
    if (p.block_table == nullptr) {
      pd.raw = pi < p.num_pages ? static_cast<int32_t>(pi) : -1;
    } else {
      const int64_t b = detail::indexer_group_request(p.work, pd.t.g);
      if (b >= 0 && pi < p.max_pages) pd.raw = p.block_table[b * p.bt_s0 + pi * p.bt_s1];
    }
  }
}

template <IndexerFormat F, int D>
__device__ __forceinline__ void idx_issue_tile(const IndexerParams& p, const IdxPending& pd, uint8_t* stage,
                                               const IdxSmemLayout& L, uint32_t bar, int warp, int lane) {
  using Tr = IdxTraits<F, D>;
  constexpr int RB = Tr::kRowBytes;
  const int S = p.states_per_page;
  uint8_t* valid = stage + L.valid_off;
  const uint32_t keys_s = smem_u32(stage + L.keys_off);
  const uint32_t scale_s = smem_u32(stage + L.scale_off);
  // The stage was last read through ld.shared (generic proxy); the bulk copies write it through
  // the async proxy.
  const bool bulk = idx_bulk<F>(p);
  if (bulk && lane == 0) fence_proxy_async_smem();
  for (int k = 0; warp + p.warps * k < pd.nruns; ++k) {
    const int r = warp + p.warps * k;
    const int32_t raw = __shfl_sync(0xffffffffu, pd.raw, k);
    const int64_t page = (raw >= 0 && raw < p.num_pages) ? raw : -1;
    const int s_lo = r == 0 ? pd.off0 : 0;
    const int64_t s_hi64 = pd.off0 + pd.t.count - int64_t(r) * S;
    const int s_hi = static_cast<int>(s_hi64 < S ? s_hi64 : S);
    const int n = s_hi - s_lo;
    const int ts0 = static_cast<int>(int64_t(r) * S + s_lo - pd.off0);  // tile index of the run's first state
    for (int i = lane; i < n; i += 32) valid[ts0 + i] = page >= 0 ? 1 : 0;
    if (page < 0) continue;
    const uint8_t* ksrc = p.kbase + page * p.page_stride + int64_t(s_lo) * RB;
    const uint8_t* ssrc = p.sbase + page * p.scale_page_stride + int64_t(s_lo) * 4;
    if (bulk) {
      // One bulk copy for the run's keys (unswizzled), issued by lane 0; its bytes are announced
      // on the stage's mbarrier first (the warp's arrive follows after all its runs).
      if (lane == 0) {
        mbar_expect_tx(bar, static_cast<uint32_t>(n * RB));
        bulk_copy_g2s(keys_s + ts0 * RB, ksrc, static_cast<uint32_t>(n * RB), bar);
      }
    } else if (p.keys_aligned16) {
      // Lane chunk c = lane + 32 i: state ts0 + c / kChunks, chunk c % kChunks. A step of 32 chunks
      // is 512 bytes and keeps the swizzle phase, so dst advances by 512 too.
      const int chunks = n * Tr::kChunks;
      const int st = ts0 + lane / Tr::kChunks, pc = lane % Tr::kChunks;
      uint32_t dst = keys_s + st * RB + Tr::key_chunk(st, pc) * 16;
      const uint8_t* src = ksrc + lane * 16;
      for (int c = lane; c < chunks; c += 32, dst += 512, src += 512) cp_async16(dst, src);
    } else {
      const int words = n * (RB / 4);
      for (int c = lane; c < words; c += 32) {
        const int st = ts0 + c / (RB / 4), wi = c % (RB / 4);
        cp_async4(keys_s + st * RB + Tr::key_chunk(st, wi >> 2) * 16 + (wi & 3) * 4, ksrc + int64_t(c) * 4);
      }
    }
    for (int i = lane; i < n; i += 32) cp_async4(scale_s + (ts0 + i) * 4, ssrc + int64_t(i) * 4);
  }
  // Every warp arrives once per issued tile (the barrier counts p.warps arrivals).
  if (bulk && lane == 0) mbar_arrive(bar);
}

// ---------------------------------------------------------------- warp-local loads
// The warp-local pipeline (indexer_body_warp): warp w copies the keys, scales and valid flags of
// the states it scores, so its loads wait on its own cp.async groups only and no CTA barrier
// separates a tile's copies from its MMAs. It scores kH "halves" of 32 states of each tile, from
// state 32 kH w (tile = 32 kH warps states; kH = 1 or 2, a template argument of the kernel), one
// after the other with the same registers. Lane l holds the block-table entry of state l of each
// half (fetched one iteration ahead, as IdxPending does); the key chunks are spread over the
// lanes (4 states per 512-byte warp instruction at D = 128) and take their row address from the
// owning lane by shuffle.
template <int kH>
struct IdxPendingW {
  IdxTile t;
  bool ok;
  int32_t raw[kH];  // this lane's state of each half: block-table entry as loaded (checked at
                    // issue), or -1
  int32_t off[kH];  // its offset inside its page
};

template <int kH>
__device__ __forceinline__ void idx_prefetch_w(const IndexerParams& p, const detail::FastDivU31& spp, IdxCursor& lc,
                                               IdxPendingW<kH>& pd, int32_t& last_g, int warp, int lane) {
  pd.ok = lc.next(p, &pd.t);
#pragma unroll
  for (int h = 0; h < kH; ++h) {
    pd.raw[h] = -1;
    pd.off[h] = 0;
  }
  if (!pd.ok) return;
  if (pd.t.g != last_g) {
    last_g = pd.t.g;
    if (warp == 0) idx_prefetch_group_entries(p, lc, pd.t, lane);
  }
  const int64_t b = p.block_table != nullptr ? detail::indexer_group_request(p.work, pd.t.g) : 0;
#pragma unroll
  for (int h = 0; h < kH; ++h) {
    const int ts = (warp * kH + h) * 32 + lane;
    if (ts >= pd.t.count) continue;
    const uint32_t st = static_cast<uint32_t>(pd.t.t0 + ts);  // states < 2^31 (IdxCursor)
    const uint32_t pi = spp.div(st);
    pd.off[h] = static_cast<int32_t>(st - pi * static_cast<uint32_t>(p.states_per_page));
    if (p.block_table == nullptr) {
      pd.raw[h] = pi < p.num_pages ? static_cast<int32_t>(pi) : -1;
    } else if (b >= 0 && pi < p.max_pages) {
      pd.raw[h] = p.block_table[b * p.bt_s0 + int64_t(pi) * p.bt_s1];
    }
  }
}

// The copies of one half (states [base, base + 32) of the tile; raw / off: this lane's state's).
template <IndexerFormat F, int D>
__device__ __forceinline__ void idx_issue_w(const IndexerParams& p, const IdxTile& tile, int32_t raw, int32_t off,
                                            int base, uint8_t* stage, const IdxSmemLayout& L, int lane) {
  using Tr = IdxTraits<F, D>;
  constexpr int RB = Tr::kRowBytes;
  const int ts = base + lane;
  const bool in = ts < tile.count;
  const int32_t page = (in && raw >= 0 && raw < p.num_pages) ? raw : -1;
  if (in) stage[L.valid_off + ts] = page >= 0 ? 1 : 0;
  if (page >= 0) {
    cp_async4(smem_u32(stage + L.scale_off) + ts * 4, p.sbase + int64_t(page) * p.scale_page_stride + int64_t(off) * 4);
  }
  const uint32_t keys_s = smem_u32(stage + L.keys_off);
  if (p.keys_off32) {
    // Each lane's key row as a 32-bit offset from kbase in 16-byte units (kNoRow: not read), then
    // every chunk's from its state's lane: all shuffles first, then the copies without branches (a
    // chunk of a state that is not read is zero-filled; its score is masked by `valid`). 32-bit
    // offsets: one shuffle and one wide multiply-add a chunk where 64-bit addresses took two
    // shuffles, a 64-bit test, select and add (caches of 64 GiB or more take the 4-byte path).
    constexpr int CH = Tr::kChunks;  // 32 * CH chunks of 16 bytes for the warp's 32 states
    constexpr uint32_t kNoRow = 0xffffffffu;
    const uint32_t row = page >= 0 ? static_cast<uint32_t>(page) * static_cast<uint32_t>(p.page_stride >> 4) +
                                         static_cast<uint32_t>(off) * (RB / 16)
                                   : kNoRow;
    // Chunk lane + 32 i is chunk pc = lane % CH of state lane / CH + (32 / CH) i: a step of 32
    // chunks is 512 bytes in shared memory and keeps key_chunk's swizzle phase (it depends on row
    // bits below 32 / CH), so one destination address serves all i.
    static_assert((32 / CH) * RB == 512, "32 chunks of 16 bytes are 512 bytes");
    uint32_t src[CH];
#pragma unroll
    for (int i = 0; i < CH; ++i) src[i] = __shfl_sync(0xffffffffu, row, lane / CH + (32 / CH) * i);
    const int st0 = base + lane / CH, pc = lane % CH;
    const uint32_t dst0 = keys_s + st0 * RB + Tr::key_chunk(st0, pc) * 16;
    const uint8_t* kpc = p.kbase + pc * 16;
#pragma unroll
    for (int i = 0; i < CH; ++i) {
      const bool rd = src[i] != kNoRow;
      cp_async16_zfill(dst0 + 512 * i, kpc + static_cast<uint64_t>(rd ? src[i] : 0u) * 16u, rd ? 16 : 0);
    }
  } else {
    constexpr int W = RB / 4;  // 4-byte words per state
    for (int i = 0; i < W; ++i) {
      const int c = lane + 32 * i;
      const int s = c / W, wi = c % W;
      const int32_t pg = __shfl_sync(0xffffffffu, page, s);
      const int32_t of = __shfl_sync(0xffffffffu, off, s);
      if (pg >= 0) {
        const int st = base + s;
        cp_async4(keys_s + st * RB + Tr::key_chunk(st, wi >> 2) * 16 + (wi & 3) * 4,
                  p.kbase + int64_t(pg) * p.page_stride + int64_t(of) * RB + wi * 4);
      }
    }
  }
}

// 16 bytes of Q from global memory: one vector load when Q rows are 16-byte aligned, else bytewise.
__device__ __forceinline__ uint4 idx_load_q_chunk(const uint8_t* src, bool aligned16) {
  if (aligned16) return *reinterpret_cast<const uint4*>(src);
  uint32_t w[4];
  for (int e = 0; e < 4; ++e) {
    w[e] = src[4 * e] | src[4 * e + 1] << 8 | src[4 * e + 2] << 16 | uint32_t(src[4 * e + 3]) << 24;
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Items [0, total) over threads [0, nt) (tid: this thread's rank), kB per thread at a time: the
// batch's load(idx) calls (global memory) all come before its store(idx, value) calls (shared
// memory), so a batch costs one memory latency, not one per item (the group loads below).
template <int kB, class T, class Load, class Store>
__device__ __forceinline__ void idx_batched_items(int tid, int nt, int total, Load load, Store store) {
  for (int base = tid; base < total; base += kB * nt) {
    T v[kB];
#pragma unroll
    for (int u = 0; u < kB; ++u) {
      const int idx = base + u * nt;
      if (idx < total) v[u] = load(idx);
    }
#pragma unroll
    for (int u = 0; u < kB; ++u) {
      const int idx = base + u * nt;
      if (idx < total) store(idx, v[u]);
    }
  }
}

// Loads Q (dequantized to E4M3 for MXFP4), weights, Q scales and row windows of group g. The CTA
// waits here at every group change, so the loads go in batches (idx_batched_items) and the windows'
// loads fly with the first batch: H200, portable kernel, at 1M states over 32-128 requests, 3-4 %
// at sm_120's 99 KiB budget and 0-2 % at the device maximum against one load, then its store, at a
// time (BENCHMARKS.md).
template <IndexerFormat F, int D>
__device__ void idx_load_group(const IndexerParams& p, int64_t g, int rows, uint8_t* smem, const IdxSmemLayout& L) {
  using Tr = IdxTraits<F, D>;
  const int Hp = p.heads_padded, H = p.heads;
  const int qrows = p.work.rows_per_group * Hp;
  const int tid = threadIdx.x, nt = blockDim.x;
  uint8_t* qs = smem + L.q;
  const uint8_t* qg = p.q + g * p.q_sg;
  float* ws = reinterpret_cast<float*>(smem + L.w);
  detail::RowWindow rw{0, 0, 0};
  if (tid < kIdxMaxRows && tid < rows) rw = detail::indexer_row_window(p.work, g, tid);
  // Q items: 16-byte chunks (FP8) or 4-byte units of 8 packed elements (MXFP4), each with the
  // weight of the same index (qrows * CH >= qrows items, so every weight has one).
  constexpr int CH = Tr::kFp4 ? D / 8 : D / 16;
  using Raw = typename std::conditional<Tr::kFp4, uint32_t, uint4>::type;
  struct Item {
    Raw q;
    float w;
  };
  const auto load = [&](int idx) {
    const int row = idx / CH, c = idx % CH;
    const int j = row / Hp, h = row % Hp;
    Item it;
    if constexpr (Tr::kFp4) {
      it.q = 0u;
      if (j < rows && h < H) {
        const uint8_t* src = qg + j * p.q_sr + h * p.q_sh + c * 4;
        it.q = src[0] | src[1] << 8 | src[2] << 16 | uint32_t(src[3]) << 24;
      }
    } else {
      it.q = make_uint4(0, 0, 0, 0);
      if (j < rows && h < H) it.q = idx_load_q_chunk(qg + j * p.q_sr + h * p.q_sh + c * 16, p.q_aligned16 != 0);
    }
    const int wj = idx / Hp, wh = idx % Hp;
    it.w = (idx < qrows && wj < rows && wh < H) ? p.w[g * p.w_sg + wj * p.w_sr + wh * p.w_sh] : 0.0f;
    return it;
  };
  const auto store = [&](int idx, const Item& it) {
    if (idx < qrows) ws[idx] = it.w;
    const int row = idx / CH, c = idx % CH;
    if constexpr (Tr::kFp4) {
      uint32_t lo, hi;
      e2m1x8_to_e4m3(it.q, &lo, &hi);
      *reinterpret_cast<uint2*>(qs + row * D + Tr::q_unit_off(row, c)) = make_uint2(lo, hi);
    } else if (DSATTN_MMA_NATIVE_FP8 || !p.q_f16) {
      *reinterpret_cast<uint4*>(qs + row * D + Tr::key_chunk(row, c) * 16) = it.q;
    } else {
      // f16 layout: fp8 chunk c -> 32 bytes at c * 32; its two 16-byte halves (k-steps) swap on odd
      // rows when D >= 64 (conflict-free LDS.128 in compute).
      uint4 h0, h1;
      e4m3x4_to_f16x2_fast(it.q.x, &h0.x, &h0.y);
      e4m3x4_to_f16x2_fast(it.q.y, &h0.z, &h0.w);
      e4m3x4_to_f16x2_fast(it.q.z, &h1.x, &h1.y);
      e4m3x4_to_f16x2_fast(it.q.w, &h1.z, &h1.w);
      const int sw = (D >= 64 && (row & 1)) ? 16 : 0;
      uint8_t* dst = qs + row * 2 * D + c * 32;
      *reinterpret_cast<uint4*>(dst + sw) = h0;
      *reinterpret_cast<uint4*>(dst + (16 ^ sw)) = h1;
    }
  };
  idx_batched_items<4, Item>(tid, nt, qrows * CH, load, store);
  if constexpr (Tr::kFp4) {
    float* qsc = reinterpret_cast<float*>(smem + L.qs);
    for (int idx = tid; idx < qrows * Tr::kKSteps; idx += nt) {
      const int row = idx / Tr::kKSteps, k = idx % Tr::kKSteps;
      const int j = row / Hp, h = row % Hp;
      float s = 0.0f;
      if (j < rows && h < H) {
        const uint32_t packed = static_cast<uint32_t>(p.q_scales[g * p.qs_sg + j * p.qs_sr + h * p.qs_sh]);
        s = codec::ue8m0_to_f32(static_cast<uint8_t>(packed >> (8 * k)));
      }
      qsc[idx] = s;
    }
  }
  detail::RowWindow* win = reinterpret_cast<detail::RowWindow*>(smem + L.win);
  if (tid < kIdxMaxRows) win[tid] = rw;
}

// ---------------------------------------------------------------- compute
// f16 Q fragments (B operand) in the layout idx_load_group writes (fp8 chunk c -> 32 bytes at
// c * 32, its two 16-byte halves swapped on odd rows when D >= 64). A lane's two base addresses
// into it for rows g8 + 8 m: the even and the odd k-steps' 16-byte halves (the swap depends on the
// row's parity, i.e. on g8 alone, since Q rows are stepped by multiples of 8).
struct IdxQ16Lane {
  uint32_t lo, hi;
};
template <int D>
__device__ __forceinline__ IdxQ16Lane idx_q16_lane(uint32_t q_s, int g8, int tig) {
  if (D >= 64) {
    const uint32_t sw = (g8 & 1) ? 16u : 0u;
    const uint32_t base = q_s + g8 * 2 * D + tig * 32;
    return IdxQ16Lane{base + sw, base + (16u ^ sw)};
  }
  return IdxQ16Lane{q_s + g8 * 2 * D + tig * 16, 0u};
}
// The fragments of Q row g8 + row_off (row_off a multiple of 8), all k-steps.
template <int D>
__device__ __forceinline__ void idx_load_q16(const IdxQ16Lane& b, int row_off, uint4 (&q)[D / 32]) {
  const uint32_t r = static_cast<uint32_t>(row_off) * 2 * D;
#pragma unroll
  for (int k = 0; k < D / 32; ++k) q[k] = lds128(((k & 1) ? b.hi : b.lo) + r + (k >> 1) * 128);
}

// The weighted ReLU of one n-tile's accumulators (acc[m-tile]: columns 2 tig, 2 tig + 1 of rows
// g8 and g8 + 8) added into the lane's head sums part[m-tile][half]; wv: the two columns' weights.
__device__ __forceinline__ void idx_relu_wsum(const float (&acc)[2][4], float2 wv, float (&part)[2][2]) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    part[mt][0] = fmaf(fmaxf(acc[mt][0], 0.f), wv.x, part[mt][0]);
    part[mt][0] = fmaf(fmaxf(acc[mt][1], 0.f), wv.y, part[mt][0]);
    part[mt][1] = fmaf(fmaxf(acc[mt][2], 0.f), wv.x, part[mt][1]);
    part[mt][1] = fmaf(fmaxf(acc[mt][3], 0.f), wv.y, part[mt][1]);
  }
}

// One n-tile (8 heads) against the warp's 32 states: 4 KS f16 MMAs in 2 chains (one per m-tile,
// both k16 halves of every k32 step accumulating into it), then the weighted ReLU into part (wload()
// returns the weights of this lane's columns 2 tig, 2 tig + 1, read after the MMAs are issued). One
// chain per m-tile rather than one per m-tile and k16 half saves the 8 adds that joined the halves
// (H200, portable kernel: 1 x 64K 10.6-10.7 -> 10.0-10.1 us, 32 x 8K 30.3-30.5 -> 28.2-28.4, 128 x
// 32K 324-330 -> 322.4-322.5).
template <int KS, class WLoad>
__device__ __forceinline__ void idx_ntile_f16_w(const uint32_t (&kf)[2][KS][kMmaARegs], const uint4 (&q)[KS],
                                                WLoad&& wload, float (&part)[2][2]) {
  float acc[2][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[mt][e] = 0.f;
#pragma unroll
  for (int k = 0; k < KS; ++k) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) mma_k16_f16b<0>(acc[mt], kf[mt][k], q[k]);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) mma_k16_f16b<1>(acc[mt], kf[mt][k], q[k]);
  }
  idx_relu_wsum(acc, wload(), part);
}
// w2: the two weights in shared memory, through a generic pointer.
template <int KS>
__device__ __forceinline__ void idx_ntile_f16(const uint32_t (&kf)[2][KS][kMmaARegs], const uint4 (&q)[KS],
                                              const float* w2, float (&part)[2][2]) {
  idx_ntile_f16_w<KS>(kf, q, [&] { return *reinterpret_cast<const float2*>(w2); }, part);
}

// The head sums of a quad's four lanes (part[m-tile][half]: this lane's partial sums of the states
// g8 + 16 m-tile + 8 half) reduced and transposed: lane tig ends with the whole sum of value index
// tig = (m-tile tig >> 1, half tig & 1).
__device__ __forceinline__ float idx_quad_reduce(const float (&part)[2][2], int tig) {
  const bool hi2 = (tig & 2) != 0;
  float k0 = hi2 ? part[1][0] : part[0][0], k1 = hi2 ? part[1][1] : part[0][1];
  const float s0 = hi2 ? part[0][0] : part[1][0], s1 = hi2 ? part[0][1] : part[1][1];
  k0 += __shfl_xor_sync(0xffffffffu, s0, 2);
  k1 += __shfl_xor_sync(0xffffffffu, s1, 2);
  const bool hi1 = (tig & 1) != 0;
  float v = hi1 ? k1 : k0;
  v += __shfl_xor_sync(0xffffffffu, hi1 ? k0 : k1, 1);
  return v;
}

// One logit into the logits epilogue's output (f32 or bf16).
__device__ __forceinline__ void idx_store_logit(const IndexerParams& p, int64_t row, int64_t col, float v) {
  if (p.out_bf16) {
    reinterpret_cast<uint16_t*>(p.out)[row * p.out_s0 + col] = codec::f32_to_bf16(v);
  } else {
    reinterpret_cast<float*>(p.out)[row * p.out_s0 + col] = v;
  }
}

// A warp scores states [base, base + 32) of the tile for all rows of the group, into the score
// tile (score_dst, else shared memory), or with kDirect straight into the logits (rows row0 + j;
// the warp's 32 lanes store 32 consecutive columns of a row at once).
template <IndexerFormat F, int D, bool kDirect = false>
__device__ __forceinline__ void idx_compute_tile(const IndexerParams& p, const IdxTile& t, int rows,
                                                 const uint8_t* stage, uint8_t* smem, const IdxSmemLayout& L,
                                                 int base, int lane, int64_t row0 = 0,
                                                 float* score_dst = nullptr, int score_ld = 0) {
  using Tr = IdxTraits<F, D>;
  constexpr int RB = Tr::kRowBytes;
  constexpr int KS = Tr::kKSteps;
  if (base >= t.count) return;
  const int g8 = lane >> 2, tig = lane & 3;
  const uint32_t keys_s = smem_u32(stage + L.keys_off);

  // Key fragments of the warp's 32 states: [m-tile][k-step][a0..a3].
  uint32_t ka[2][KS][4];
  float ksc[2][2][KS];  // MXFP4 block scales of rows g8 / g8 + 8 of each m-tile
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int rh = 0; rh < 2; ++rh) {
      const int row = base + mt * 16 + rh * 8 + g8;
      if constexpr (!Tr::kFp4) {
        if constexpr (D >= 64) {
#pragma unroll
          for (int kp = 0; kp < D / 64; ++kp) {
            const int c = idx_bulk<F>(p) ? kp * 4 + tig : Tr::key_chunk(row, kp * 4 + tig);
            const uint4 v = lds128(keys_s + row * RB + c * 16);
            ka[mt][2 * kp][rh] = v.x;
            ka[mt][2 * kp][2 + rh] = v.y;
            ka[mt][2 * kp + 1][rh] = v.z;
            ka[mt][2 * kp + 1][2 + rh] = v.w;
          }
        } else {
          const uint2 v = lds64(keys_s + row * RB + tig * 8);
          ka[mt][0][rh] = v.x;
          ka[mt][0][2 + rh] = v.y;
        }
      } else {
        const uint32_t sc = lds32(smem_u32(stage + L.scale_off) + row * 4);
#pragma unroll
        for (int k = 0; k < KS; ++k) {
          const uint32_t wv = lds32(keys_s + row * RB + Tr::key_chunk(row, k) * 16 + tig * 4);
          e2m1x8_to_e4m3(wv, &ka[mt][k][rh], &ka[mt][k][2 + rh]);
          ksc[mt][rh][k] = codec::ue8m0_to_f32(static_cast<uint8_t>(sc >> (8 * k)));
        }
      }
    }
  }
  (void)ksc;
  uint32_t kf[2][KS][kMmaARegs];  // A operands, converted once per tile
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int k = 0; k < KS; ++k) {
      if constexpr (!Tr::kFp4) {
        mma_prepare_a_gathered(ka[mt][k], kf[mt][k]);  // rows g8 / g8 + 8 from two loads
      } else {
        mma_prepare_a(ka[mt][k], kf[mt][k]);  // e2m1x8_to_e4m3 wrote them
      }
    }

  // The state this lane reports after the quad reduction: index tig -> (m-tile, half).
  const int my_state = base + (tig >> 1) * 16 + (tig & 1) * 8 + g8;
  const bool my_in = my_state < t.count;
  const uint8_t* valid = stage + L.valid_off;
  const bool my_valid = my_in && valid[my_state] != 0;
  float my_scale = 1.0f;
  if (!Tr::kFp4 && my_valid) my_scale = reinterpret_cast<const float*>(stage + L.scale_off)[my_state];
  const int32_t my_t = t.t0 + my_state;

  const int Hp = p.heads_padded;
  const bool qf16 = !DSATTN_MMA_NATIVE_FP8 && p.q_f16 != 0;
  (void)qf16;
  const uint32_t q_s = smem_u32(smem + L.q);
  const float* ws = reinterpret_cast<const float*>(smem + L.w);
  const float* qsc = reinterpret_cast<const float*>(smem + L.qs);
  const detail::RowWindow* win = reinterpret_cast<const detail::RowWindow*>(smem + L.win);
  // The score tile: shared memory ([rows][tile_states]), or score_dst (rows score_ld floats apart,
  // anywhere; the staged pipeline's global staging).
  float* scores = score_dst != nullptr ? score_dst : reinterpret_cast<float*>(smem + L.scores);
  const int sld = score_dst != nullptr ? score_ld : p.tile_states;
  (void)scores;
  (void)sld;
  (void)row0;

  // Head sum of row j done: transposed quad reduction (lane tig ends with the sum of value index
  // tig = (m-tile, half)), then scale, window / validity mask, store to the score tile.
  auto reduce_store = [&](const float (&part)[2][2], int j) {
    const float v = idx_quad_reduce(part, tig);
    if (my_in) {
      const detail::RowWindow rw = win[j];
      const bool ok = my_valid && my_t >= rw.lo && my_t < rw.hi;
      const float out = ok ? v * my_scale : -INFINITY;
      if constexpr (kDirect) {
        const int64_t col = int64_t(my_t) - rw.col_off;
        if (col >= 0 && col < p.out_width) idx_store_logit(p, row0 + j, col, out);
      } else {
        scores[j * sld + my_state] = out;
      }
    }
  };

  if constexpr (!Tr::kFp4) {
    if (qf16) {
      // Q as f16, one n-tile (8 heads) per step; the Q fragments of the next n-tile are loaded
      // before the MMAs of the current one (two register sets, qa / qb), so the shared-memory
      // latency hides behind 4 KS MMAs. Q rows of a group are contiguous (row j * Hp + h), so the
      // step after (j, Hp - 8) is (j + 1, 0).
      const IdxQ16Lane qb16 = idx_q16_lane<D>(q_s, g8, tig);
      // 64 and 32 heads (the DeepSeek indexers' 64; 32 and 24 padded to 32): the same n-tile
      // order (so the same logits) with the head loop unrolled, so the next n-tile's Q loads are
      // scheduled among the current one's MMAs rather than at a loop boundary. H200, portable
      // kernel at its own shared-memory budget: 32 x 32K 82.6-83.1 -> 81.1-81.4 us, 128 x 32K
      // 299.8-303.0 -> 295.4-296.9, next_n = 2 123.0-123.6 -> 118.8-119.0, H = 32 64.9 -> 63.6-64.0;
      // batch 1 unchanged; 2-3 % slower under sm_120's 99 KiB budget forced on the H200 (sm_120
      // itself runs the native E4M3 path below, without these lines). BENCHMARKS.md, 2026-12-02.
      const auto unrolled = [&](auto nt_c) {
        constexpr int NT = decltype(nt_c)::value;  // n-tiles of 8 heads per row
        for (int j = 0; j < rows; ++j) {
          float part[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
          uint4 q[2][KS];
          idx_load_q16<D>(qb16, j * 8 * NT, q[0]);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            if (nt + 1 < NT) idx_load_q16<D>(qb16, j * 8 * NT + (nt + 1) * 8, q[(nt + 1) & 1]);
            idx_ntile_f16<KS>(kf, q[nt & 1], ws + j * 8 * NT + nt * 8 + 2 * tig, part);
          }
          reduce_store(part, j);
        }
      };
      if (Hp == 64) {
        unrolled(std::integral_constant<int, 8>{});
        return;
      }
      if (Hp == 32) {
        unrolled(std::integral_constant<int, 4>{});
        return;
      }
      const int qrows = rows * Hp;
      uint4 qa[KS], qb[KS];
      idx_load_q16<D>(qb16, 0, qa);
      for (int j = 0; j < rows; ++j) {
        float part[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
        for (int hp = 0; hp < Hp; hp += 16) {
          const int r0 = j * Hp + hp;
          idx_load_q16<D>(qb16, r0 + 8, qb);
          idx_ntile_f16<KS>(kf, qa, ws + r0 + 2 * tig, part);
          if (r0 + 16 < qrows) idx_load_q16<D>(qb16, r0 + 16, qa);
          idx_ntile_f16<KS>(kf, qb, ws + r0 + 8 + 2 * tig, part);
        }
        reduce_store(part, j);
      }
      return;
    }
  }

  for (int j = 0; j < rows; ++j) {
    float part[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
    for (int hp = 0; hp < Hp; hp += 16) {
      float acc[2][2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
      uint32_t qb[2][KS][2];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const int qrow = j * Hp + hp + nt * 8 + g8;
        if constexpr (!Tr::kFp4 && D >= 64) {
#pragma unroll
          for (int kp = 0; kp < D / 64; ++kp) {
            const uint4 v = lds128(q_s + qrow * D + Tr::key_chunk(qrow, kp * 4 + tig) * 16);
            qb[nt][2 * kp][0] = v.x;
            qb[nt][2 * kp][1] = v.y;
            qb[nt][2 * kp + 1][0] = v.z;
            qb[nt][2 * kp + 1][1] = v.w;
          }
        } else if constexpr (!Tr::kFp4) {
          const uint2 v = lds64(q_s + qrow * D + tig * 8);
          qb[nt][0][0] = v.x;
          qb[nt][0][1] = v.y;
        } else {
#pragma unroll
          for (int k = 0; k < KS; ++k) {
            const uint2 v = lds64(q_s + qrow * D + Tr::q_unit_off(qrow, k * 4 + tig));
            qb[nt][k][0] = v.x;
            qb[nt][k][1] = v.y;
          }
        }
      }
      if constexpr (!Tr::kFp4) {
#pragma unroll
        for (int k = 0; k < KS; ++k)
#pragma unroll
          for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) mma_k32(acc[mt][nt], kf[mt][k], qb[nt][k][0], qb[nt][k][1]);
      } else {
#pragma unroll
        for (int k = 0; k < KS; ++k) {
          float qsv[2][2];
#pragma unroll
          for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int c = 0; c < 2; ++c) qsv[nt][c] = qsc[(j * Hp + hp + nt * 8 + 2 * tig + c) * KS + k];
#pragma unroll
          for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
              float tmp[4] = {0.f, 0.f, 0.f, 0.f};
              mma_k32(tmp, kf[mt][k], qb[nt][k][0], qb[nt][k][1]);
#pragma unroll
              for (int e = 0; e < 4; ++e) acc[mt][nt][e] = fmaf(ksc[mt][e >> 1][k] * qsv[nt][e & 1], tmp[e], acc[mt][nt][e]);
            }
        }
      }
      // Weighted ReLU head sum (columns 2 tig, 2 tig + 1 of each n-tile).
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const float2 wv = *reinterpret_cast<const float2*>(ws + j * Hp + hp + nt * 8 + 2 * tig);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          part[mt][0] = fmaf(fmaxf(acc[mt][nt][0], 0.f), wv.x, part[mt][0]);
          part[mt][0] = fmaf(fmaxf(acc[mt][nt][1], 0.f), wv.y, part[mt][0]);
          part[mt][1] = fmaf(fmaxf(acc[mt][nt][2], 0.f), wv.x, part[mt][1]);
          part[mt][1] = fmaf(fmaxf(acc[mt][nt][3], 0.f), wv.y, part[mt][1]);
        }
      }
    }
    reduce_store(part, j);
  }
}

// ---------------------------------------------------------------- the kernel
// A position in the ring of `stages` stages, advanced once per tile: kept as a counter that wraps
// (and the wrap parity, for the mbarrier phase), since `i % stages` with the run-time stage count
// is an integer division on every tile.
struct IdxRingPos {
  int s = 0;
  uint32_t parity = 0;
  __device__ __forceinline__ void advance(int stages) {
    if (++s == stages) {
      s = 0;
      parity ^= 1u;
    }
  }
};

// The start both pipelines share: this CTA's cursors (lc walks ahead for the copies, cc for the
// scoring; CTA b takes partition b / split, every split-th tile of it), then the copies of the
// first stages - 1 tiles issued into stages 0 .. stages - 2, with one more tile prefetched into pd.
// prefetch(Pending&) steps lc to the next tile and loads its block-table entries; issue(pd, stage)
// issues a pending tile's copies into ring stage `stage`.
template <class Pending, class Prefetch, class Issue>
__device__ __forceinline__ void idx_pipeline_start(const IndexerParams& p, IdxCursor& lc, IdxCursor& cc,
                                                   IdxRingPos& wr, Pending& pd, Prefetch&& prefetch,
                                                   Issue&& issue) {
  const int split = p.split > 1 ? p.split : 1;
  lc.init(p, blockIdx.x / split, blockIdx.x % split);
  cc = lc;
  prefetch(pd);
  for (int s = 0; s < p.stages - 1; ++s) {
    Pending nx;
    nx.ok = false;
    if (pd.ok) {
      prefetch(nx);  // in flight while pd's entries are consumed
      issue(pd, wr.s);
    }
    pd = nx;
    wr.advance(p.stages);
    cp_async_commit();
  }
}

// One tile's step of a warp's copies on the warp-local pipeline (indexer_body_warp,
// indexer_body_staged): wait for this warp's copies of the tile scored next, then issue the pending
// tile's copies into ring stage wr and prefetch the one after (issue / prefetch as in
// idx_pipeline_start), all in one cp.async group.
template <class Pending, class Issue, class Prefetch>
__device__ __forceinline__ void idx_warp_copy_step(int stages, IdxRingPos& wr, Pending& pd, Issue&& issue,
                                                   Prefetch&& prefetch) {
  cp_async_wait_dyn(stages - 2);
  __syncwarp();  // this warp's copies of tile i visible to all its lanes; its reads of tile i - 1 done
  if (pd.ok) {
    issue(pd, wr.s);
    prefetch(pd);
  }
  wr.advance(stages);
  cp_async_commit();
}

// Epilogues whose consume() only stores and whose group_end() does nothing say so with
// `static constexpr bool kWarpLocal = true` (the logits epilogue).
template <class E, class = void>
struct EpiWarpLocal : std::false_type {};
template <class E>
struct EpiWarpLocal<E, std::void_t<decltype(E::kWarpLocal)>> : std::integral_constant<bool, E::kWarpLocal> {};

// Epilogues that consume whole score tiles block-wide (the fused top-k's collector) but let the
// warp-local pipeline score for them say `static constexpr bool kStaged = true` and provide
// stage_tiles() (M), stage_base(p) (this CTA's rows_per_group x M x tile_states floats, global),
// stage_meta() (M int2 in shared memory), flush_run(), and consume_tile(t) / end_group(g) (what
// consume / group_end do, without the kernel's parameters): see indexer_body_staged.
template <class E, class = void>
struct EpiStaged : std::false_type {};
template <class E>
struct EpiStaged<E, std::void_t<decltype(E::kStaged)>> : std::integral_constant<bool, E::kStaged> {};

// The warp-local pipeline (cp.async keys, an epilogue with kWarpLocal): each warp loads and scores
// its own kH x 32 states of every tile (idx_prefetch_w / idx_issue_w) and stores their logits itself,
// so it waits only for its own copies (cp.async group + __syncwarp) and the CTA meets at a barrier
// only when the group changes (new Q, weights and windows). The warps drift apart by up to a tile,
// so one warp's loads, address arithmetic and stores overlap another's MMAs, where the CTA-wide
// pipeline (indexer_body_cta) runs every warp through the same phase between two barriers per tile.
template <IndexerFormat F, int D, class Epi, int kH>
__device__ __forceinline__ void indexer_body_warp(const IndexerParams& p, Epi& epi, uint8_t* smem,
                                                  const IdxSmemLayout& L, int warp, int lane) {
  detail::FastDivU31 spp = p.spp_div;  // set_states_per_page
  if (spp.d != static_cast<uint32_t>(p.states_per_page)) spp = detail::FastDivU31(static_cast<uint32_t>(p.states_per_page));
  IdxCursor lc, cc;
  const int S = p.stages;
  IdxRingPos wr, rd;  // the stage the next copies go to; the stage of the tile scored next
  // This warp's copies of a tile: all its halves in one cp.async group.
  const auto issue = [&](const IdxPendingW<kH>& q, int stage) {
#pragma unroll
    for (int h = 0; h < kH; ++h) {
      idx_issue_w<F, D>(p, q.t, q.raw[h], q.off[h], (warp * kH + h) * 32, smem + L.stage0 + stage * L.stage_bytes, L,
                        lane);
    }
  };
  IdxPendingW<kH> pd;
  int32_t pf_g = -1;
  const auto prefetch = [&](IdxPendingW<kH>& q) { idx_prefetch_w(p, spp, lc, q, pf_g, warp, lane); };
  idx_pipeline_start(p, lc, cc, wr, pd, prefetch, issue);
  int32_t cur_g = -1;
  int cur_rows = 0;
  for (;;) {
    IdxTile t;
    if (!cc.next(p, &t)) break;
    if (t.g != cur_g) {
      // Before the wait for the tile's keys, so that the group's loads (Q, weights, windows) and
      // the keys' copies are in flight together (the first tile of a CTA waits for both).
      __syncthreads();  // every warp is done with the previous group's Q, weights and windows
      cur_g = t.g;
      cur_rows = static_cast<int>(detail::indexer_group_rows(p.work, t.g));
      idx_load_group<F, D>(p, t.g, cur_rows, smem, L);
      __syncthreads();
    }
    idx_warp_copy_step(S, wr, pd, issue, prefetch);
#pragma unroll 1
    for (int h = 0; h < kH; ++h) {  // not unrolled: one copy of the scoring code
      idx_compute_tile<F, D, true>(p, t, cur_rows, smem + L.stage0 + rd.s * L.stage_bytes, smem, L,
                                   (warp * kH + h) * 32, lane, int64_t(t.g) * p.work.rows_per_group);
    }
    rd.advance(S);
  }
  cp_async_wait<0>();
  __syncthreads();
  epi.finish(p);
}

// indexer_body_staged's flush: feeds the `staged` tiles (tile_states states each, staged rows
// `ld` floats apart from `stage`) of group g, whose rows start at row0, to the epilogue
// (consume_tile), runs of consecutive tiles at once (each full but the run's last, up to
// flush_run() tiles), then, with `end_group`, ends the group (end_group). Block-wide; starts with
// the barrier that publishes the warps' staged scores and ends synced. Inlined: as a call (its
// own registers, the loop's saved around it) the fused op ran slower on the portable tile kernel
// (H100, k = 2048: 128 x 64K at sm_120's 99 KiB 806 -> 859 us, 128 x 32K at sm_80's 163 KiB
// 451 -> 460, BENCHMARKS.md 2026-12-07).
template <class Epi>
__device__ __forceinline__ void idx_staged_flush(Epi& epi, int staged, int32_t g, int64_t row0, int rows, int tile_states,
                                              const float* stage, int ld, const detail::RowWindow* win,
                                              bool end_group, int32_t t_begin, int32_t t_end) {
  const int2* meta = epi.stage_meta();
  const int run_max = epi.flush_run();
  __syncthreads();  // every warp's staged scores (global stores) and the tiles' meta visible
  for (int s = 0; s < staged;) {
    const int2 m = meta[s];
    int n = m.y, e = s + 1;
    while (e < staged && e - s < run_max && n == (e - s) * tile_states && meta[e].x == m.x + n) n += meta[e++].y;
    epi.consume_tile(ScoreTile{stage + s * tile_states, ld, rows, g, row0, m.x, n, win});
    __syncthreads();  // the collector's counts published before the next run's room check
    s = e;
  }
  if (end_group) {
    epi.end_group(GroupInfo{g, row0, rows, t_begin, t_end, win});
    __syncthreads();
  }
}

// The warp-local pipeline for an epilogue with kStaged (the fused op's collector on the portable
// tile kernel): each warp loads and scores its own states of every tile as in indexer_body_warp,
// but into staging in global memory (this CTA's: M tiles of every row); after M tiles, at a group
// change and at the end, the CTA meets and feeds the staged tiles, in order, to the epilogue's
// block-wide consume_tile(), runs of consecutive tiles at once where flush_run() allows. So the
// warps drift apart between flushes as they do for the logits, where the CTA-wide pipeline runs
// every warp through two barriers per tile. Every warp walks the same tile sequence (its own
// cursor), so all of them reach each flush's barriers.
template <IndexerFormat F, int D, class Epi, int kH>
__device__ __forceinline__ void indexer_body_staged(const IndexerParams& p, Epi& epi, uint8_t* smem,
                                                    const IdxSmemLayout& L, int warp, int lane) {
  detail::FastDivU31 spp = p.spp_div;  // set_states_per_page
  if (spp.d != static_cast<uint32_t>(p.states_per_page)) spp = detail::FastDivU31(static_cast<uint32_t>(p.states_per_page));
  IdxCursor lc, cc;
  const int S = p.stages;
  IdxRingPos wr, rd;
  const auto issue = [&](const IdxPendingW<kH>& q, int stage) {
#pragma unroll
    for (int h = 0; h < kH; ++h) {
      idx_issue_w<F, D>(p, q.t, q.raw[h], q.off[h], (warp * kH + h) * 32, smem + L.stage0 + stage * L.stage_bytes, L,
                        lane);
    }
  };
  IdxPendingW<kH> pd;
  int32_t pf_g = -1;
  const auto prefetch = [&](IdxPendingW<kH>& q) { idx_prefetch_w(p, spp, lc, q, pf_g, warp, lane); };
  idx_pipeline_start(p, lc, cc, wr, pd, prefetch, issue);
  const detail::RowWindow* win = reinterpret_cast<const detail::RowWindow*>(smem + L.win);
  const int M = epi.stage_tiles();
  const int ld = M * p.tile_states;  // staging: [rows_per_group][M tiles x tile_states]
  float* stage = epi.stage_base(p);
  int2* meta = epi.stage_meta();
  int32_t cur_g = -1;
  int cur_rows = 0;
  int32_t cur_t_begin = 0, cur_t_end = 0;
  int staged = 0;
  for (;;) {
    IdxTile t;
    const bool more = cc.next(p, &t);
    if (!more || t.g != cur_g || staged == M) {
      const bool end_group = cur_g >= 0 && (!more || t.g != cur_g);
      if (staged > 0 || end_group) {
        idx_staged_flush(epi, staged, cur_g, int64_t(cur_g) * p.work.rows_per_group, cur_rows, p.tile_states, stage, ld,
                         win, end_group, cur_t_begin, cur_t_end);
      }
      staged = 0;
      if (!more) break;
      if (t.g != cur_g) {
        __syncthreads();  // every warp is done with the previous group's Q, weights and windows
        cur_g = t.g;
        cur_rows = static_cast<int>(detail::indexer_group_rows(p.work, t.g));
        cur_t_begin = t.t0;
        idx_load_group<F, D>(p, t.g, cur_rows, smem, L);
        __syncthreads();
      }
    }
    cur_t_end = t.t0 + t.count;
    idx_warp_copy_step(S, wr, pd, issue, prefetch);
    if (threadIdx.x == 0) meta[staged] = make_int2(t.t0, t.count);
    float* dst = stage + staged * p.tile_states;
#pragma unroll 1
    for (int h = 0; h < kH; ++h) {
      idx_compute_tile<F, D>(p, t, cur_rows, smem + L.stage0 + rd.s * L.stage_bytes, smem, L, (warp * kH + h) * 32,
                             lane, 0, dst, ld);
    }
    rd.advance(S);
    ++staged;
  }
  cp_async_wait<0>();  // the last group ended at the flush that left the loop
  __syncthreads();
  epi.finish(p);
}

template <IndexerFormat F, int D, class Epi>
__device__ __forceinline__ void indexer_body_cta(const IndexerParams& p, Epi& epi, uint8_t* smem,
                                                 const IdxSmemLayout& L, int warp, int lane) {
  const bool bulk = idx_bulk<F>(p);
  const uint32_t bars = smem_u32(smem + L.bars);  // [stages] mbarriers (bulk)
  if (bulk) {
    if (threadIdx.x == 0) {
      for (int s = 0; s < p.stages; ++s) mbar_init(bars + 8 * s, p.warps);
      mbar_fence_init();
    }
    __syncthreads();
  }

  IdxCursor lc, cc;
  const int S = p.stages;
  IdxRingPos wr, rd;
  IdxPending pd;
  int32_t pf_g = -1;
  const auto prefetch = [&](IdxPending& q) { idx_prefetch(p, lc, q, pf_g, warp, lane); };
  const auto issue = [&](const IdxPending& q, int stage) {
    idx_issue_tile<F, D>(p, q, smem + L.stage0 + stage * L.stage_bytes, L, bars + stage * 8, warp, lane);
  };
  idx_pipeline_start(p, lc, cc, wr, pd, prefetch, issue);
  int32_t cur_g = -1;
  int cur_rows = 0;
  int32_t cur_t_begin = 0, cur_t_end = 0;
  const detail::RowWindow* win = reinterpret_cast<const detail::RowWindow*>(smem + L.win);
  for (;;) {
    IdxTile t;
    if (!cc.next(p, &t)) break;
    cp_async_wait_dyn(S - 2);
    if (bulk) mbar_wait(bars + rd.s * 8, rd.parity);  // the tile's bulk key copies
    __syncthreads();  // B1
    if (pd.ok) {
      issue(pd, wr.s);
      prefetch(pd);
    }
    wr.advance(S);
    cp_async_commit();
    if (t.g != cur_g) {
      if (cur_g >= 0) {
        epi.group_end(p, GroupInfo{cur_g, int64_t(cur_g) * p.work.rows_per_group, cur_rows, cur_t_begin, cur_t_end, win});
        __syncthreads();
      }
      cur_g = t.g;
      cur_rows = static_cast<int>(detail::indexer_group_rows(p.work, t.g));
      cur_t_begin = t.t0;
      idx_load_group<F, D>(p, t.g, cur_rows, smem, L);
      __syncthreads();
    }
    cur_t_end = t.t0 + t.count;
    idx_compute_tile<F, D>(p, t, cur_rows, smem + L.stage0 + rd.s * L.stage_bytes, smem, L, warp * 32, lane);
    rd.advance(S);
    __syncthreads();  // B2
    epi.consume(p, ScoreTile{reinterpret_cast<const float*>(smem + L.scores), p.tile_states, cur_rows, t.g,
                             int64_t(t.g) * p.work.rows_per_group, t.t0, t.count, win});
  }
  cp_async_wait<0>();
  __syncthreads();
  if (cur_g >= 0) {
    epi.group_end(p, GroupInfo{cur_g, int64_t(cur_g) * p.work.rows_per_group, cur_rows, cur_t_begin, cur_t_end, win});
    __syncthreads();
  }
  epi.finish(p);
}

// The pipeline is chosen by two template parameters: kHalves 0 runs the CTA-wide pipeline
// (indexer_body_cta); kHalves 1 or 2 the warp-local one (indexer_body_warp) with that many halves of
// 32 states per warp and tile, for epilogues with kWarpLocal and keys by cp.async (p.bulk == 0),
// or its staged form (indexer_body_staged) for epilogues with kStaged.
// kThreads is the CTA size the kernel is built for (__launch_bounds__): 256 (8 warps or fewer), or
// 384 for CTAs of 12 warps x 32 states (kHalves 1; at most 168 registers a thread).
// IndexerKernelOps::kernel picks, from the shape pick_indexer_config chose. Separate kernels
// rather than run-time branches: each holds one pipeline's code (H200, portable kernel, 32 x 32K:
// 13 % of the warp samples waited on instruction fetch with both pipelines in one kernel), and the
// halves' arrays and loop bounds are constants (with the halves a run-time value the 32-state case
// ran 10 % slower: 32 x 32K 106.4-106.6 against 97.0-97.3 us).
template <IndexerFormat F, int D, class Epi, int kHalves>
__device__ __forceinline__ void indexer_body(const IndexerParams& p, Epi& epi) {
  static_assert(kHalves >= 0 && kHalves <= 2, "indexer_body: 0 (CTA-wide) or 1-2 halves of 32 states per warp");
  extern __shared__ __align__(16) uint8_t smem[];
  const IdxSmemLayout L = idx_smem_layout(F == IndexerFormat::kMxfp4, D, p.work.rows_per_group, p.heads_padded,
                                          p.tile_states, p.stages, Epi::smem_bytes(p), p.q_f16 != 0);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  epi.begin(p, smem + L.epi);
  if constexpr (kHalves > 0 && EpiStaged<Epi>::value) {
    indexer_body_staged<F, D, Epi, kHalves>(p, epi, smem, L, warp, lane);
  } else if constexpr (kHalves > 0) {
    static_assert(EpiWarpLocal<Epi>::value, "the warp-local pipeline needs an epilogue that only stores");
    indexer_body_warp<F, D, Epi, kHalves>(p, epi, smem, L, warp, lane);
  } else {
    indexer_body_cta<F, D, Epi>(p, epi, smem, L, warp, lane);
  }
}

template <IndexerFormat F, int D, class Epi, int kHalves = 0, int kThreads = 256>
__global__ void __launch_bounds__(kThreads, 1) indexer_kernel(IndexerParams p, Epi epi) {
  static_assert(kThreads == 256 || (kThreads == 384 && kHalves == 1),
                "indexer_kernel: 256 threads, or 384 for 12 warps x 32 states");
  // No pdl_trigger(): see pdl.cuh.
  pdl_wait();  // before any global-memory access
  indexer_body<F, D, Epi, kHalves>(p, epi);
}

// ---------------------------------------------------------------- logits epilogue
// Writes the score tile to logits[row][t - col_off] (f32 or bf16), coalesced along the row; with
// `clean`, finish() writes -inf on the columns of each row that no tile of its group covers.
struct LogitsEpilogue {
  // consume() only stores and group_end() does nothing, so the kernel stores each warp's scores
  // itself (indexer_body_warp) wherever the keys arrive by cp.async.
  static constexpr bool kWarpLocal = true;
  __host__ __device__ static size_t smem_bytes(const IndexerParams&) { return 0; }
  __device__ void begin(const IndexerParams&, uint8_t*) {}

  __device__ static void store(const IndexerParams& p, int64_t row, int64_t col, float v) {
    idx_store_logit(p, row, col, v);
  }

  __device__ void consume(const IndexerParams& p, const ScoreTile& t) {
    for (int j = 0; j < t.rows; ++j) {
      const int64_t off = t.win[j].col_off;
      for (int i = threadIdx.x; i < t.count; i += blockDim.x) {
        const int64_t col = t.t0 + i - off;
        if (col >= 0 && col < p.out_width) store(p, t.row0 + j, col, t.scores[j * t.ld + i]);
      }
    }
  }
  __device__ void group_end(const IndexerParams&, const GroupInfo&) {}

  // Columns outside the tiles' coverage [glo, min(ghi, limit)) - col_off get -inf.
  __device__ void finish(const IndexerParams& p) {
    if (!p.clean) return;
    const detail::IndexerWork& w = p.work;
    for (int64_t g = blockIdx.x; g < w.groups; g += gridDim.x) {
      int32_t glo, ghi;
      detail::indexer_group_range(w, g, &glo, &ghi);
      int64_t hi = ghi < p.state_limit ? ghi : p.state_limit;
      if (hi < glo) hi = glo;
      const int rows = static_cast<int>(detail::indexer_group_rows(w, g));
      for (int j = 0; j < rows; ++j) {
        const int64_t off = detail::indexer_row_window(w, g, j).col_off;
        const int64_t c_lo = glo - off, c_hi = hi - off;  // covered columns
        const int64_t row = g * w.rows_per_group + j;
        const int64_t a = c_lo < p.out_width ? c_lo : p.out_width;
        for (int64_t c = threadIdx.x; c < a; c += blockDim.x) store(p, row, c, -INFINITY);
        for (int64_t c = (c_hi > 0 ? c_hi : 0) + threadIdx.x; c < p.out_width; c += blockDim.x) {
          if (c >= a) store(p, row, c, -INFINITY);
        }
      }
    }
  }
};

}  // namespace cuda
}  // namespace dsattn
