// Launch plan of the tensor-core sparse-MLA decode kernel (mla_mma_kernel.cuh): heads per CTA and
// the split of each row's indices over CTAs. A pure function of the call's shape and the SM count,
// so the workspace query and the call always agree (and host tests can check the rule).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace dsattn {
namespace cuda {

constexpr int kMlaMmaTile = 32;  // indices per tile of the tensor-core kernel: 32, or 64 (mla_mma_default_tile)

// Heads per CTA / 16 by default: 64 heads per CTA from 64 heads on (H100, 2026-12-05: 64 x 128
// heads 356 -> 317 us at V3.2, 16 x 64 59 -> 55 against 32 per CTA; BENCHMARKS.md), else all heads.
constexpr int mla_mma_default_hm(int64_t heads) { return heads >= 64 ? 4 : heads >= 32 ? 2 : 1; }

// CTAs per SM the tensor-core kernel is built for at 16 hm heads per CTA (its __launch_bounds__).
constexpr int mla_mma_ctas_per_sm(int hm) { return hm == 1 ? 3 : hm == 2 ? 2 : 1; }

// Tokens per tile by default: 64 at 64 heads per CTA (one CTA per SM either way; each Q fragment
// serves twice the tokens) where its shared memory fits the budget (`fits64`), else 32 (at 16 and
// 32 heads per CTA, 64 would leave room for one CTA per SM instead of 3 or 2).
constexpr int mla_mma_default_tile(int hm, bool fits64) { return hm == 4 && fits64 ? 64 : 32; }

struct MlaMmaPlan {
  int hm = 2;                       // heads per CTA / 16
  int splits = 1;                   // CTAs per (row, head group) along the indices
  int tile = kMlaMmaTile;           // indices per tile (32 or 64)
  int tiles_per_split = 1 << 30;    // tiles per split
  size_t workspace = 0;             // bytes of partial results (splits > 1)
  bool wgmma = false;               // the Hopper warpgroup-MMA kernel (64 heads per CTA, 64-token tiles)
  bool wgmma_half = false;          // ... with each tile's S split over its two warpgroups
};

// rows = B Sq, heads = Hq, indices = topk (+ the extra cache's topk); hm: heads per CTA / 16
// (0: mla_mma_default_hm); forced_splits: 0 for the rule; tile: indices per tile (32 or 64). The
// rule: as many splits as fill the SMs at the kernel's CTAs per SM, each of at least 128 indices
// (4 tiles of 32, 2 of 64), at most 64, none for a row of a single tile; then as few splits as
// cover the tiles at that many tiles per split. The partial results take rows x heads x splits x
// (512 + 2) fp32.
inline MlaMmaPlan mla_mma_plan_for(int64_t rows, int64_t heads, int64_t indices, int num_sms, int hm,
                                   int forced_splits, int tile = kMlaMmaTile) {
  MlaMmaPlan plan;
  plan.hm = hm != 0 ? hm : mla_mma_default_hm(heads);
  plan.tile = tile;
  const int64_t ntiles = (indices + tile - 1) / tile;
  int64_t splits = forced_splits;
  if (splits == 0) {
    const int64_t ctas = std::max<int64_t>(1, rows * (heads / (16 * plan.hm)));
    splits = std::min<int64_t>({int64_t(num_sms) * mla_mma_ctas_per_sm(plan.hm) / ctas, ntiles / (128 / tile), 64});
  }
  if (splits > 1 && ntiles > 1 && rows * heads <= 0x7FFFFFFF) {
    plan.tiles_per_split = static_cast<int>((ntiles + splits - 1) / splits);
    plan.splits = static_cast<int>((ntiles + plan.tiles_per_split - 1) / plan.tiles_per_split);
  }
  if (plan.splits > 1) plan.workspace = size_t(rows * heads) * plan.splits * (512 * sizeof(float) + 2 * sizeof(float));
  return plan;
}

// The Hopper kernel's plan (64 heads per CTA, 64-token tiles): mla_mma_plan_for's rule, except
// that a call small enough for one split per tile of every row and head group to take at most
// half the SMs gets exactly that (H100, 2026-12-05, BENCHMARKS.md: one request of 2048 indices,
// 32 splits against the rule's 16: V3.2 64 heads 24.8-24.9 -> 23.2-23.3 us, 128 heads 25.1-25.3
// -> 24.4-24.5, V4 26.1 -> 23.5-23.6 / 26.2-26.3 -> 24.5-24.6; at 4 requests x 64 heads, 128
// CTAs, 32 splits were slower, 26.2-26.7 -> 27.9-28.2).
inline MlaMmaPlan mla_wgmma_plan_for(int64_t rows, int64_t heads, int64_t indices, int num_sms, int forced_splits) {
  const int64_t ntiles = (indices + 63) / 64;
  const int64_t ctas = std::max<int64_t>(1, rows * (heads / 64));
  if (forced_splits == 0 && ntiles > 1 && ntiles <= 64 && ctas * ntiles <= num_sms / 2) {
    forced_splits = static_cast<int>(ntiles);
  }
  return mla_mma_plan_for(rows, heads, indices, num_sms, 4, forced_splits, 64);
}

}  // namespace cuda
}  // namespace dsattn
