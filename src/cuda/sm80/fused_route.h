// Which route paged_mqa_topk's CUDA plan may take (see plan_logits_route in fused_topk_launch.cu):
// the call's PagedMqaTopkParams::logits_route (true: the logits route where it fits; false: kAuto,
// the logits route only where the streaming plan would write at least as many bytes anyway, or,
// where streaming would score on the portable tile kernel, where it fits),
// unless the DSATTN_FUSED_LOGITS environment variable overrides it for the process ("0": streaming
// only, "1": the logits route where it fits, "force": the logits route wherever the top-k can plan
// it; tests and benchmarks); and how the streaming route stages its tiles on the portable tile
// kernel (staged_shape). Host code, no CUDA.
#pragma once
#include <cstdint>
#include <cstring>

namespace dsattn {
namespace cuda {

enum class FusedRouteMode { kStreaming, kAuto, kWhereItFits, kForce };

inline FusedRouteMode fused_route_mode(const char* env, bool logits_route) {
  if (env != nullptr) {
    if (std::strcmp(env, "force") == 0) return FusedRouteMode::kForce;
    if (std::strcmp(env, "1") == 0) return FusedRouteMode::kWhereItFits;
    if (std::strcmp(env, "0") == 0) return FusedRouteMode::kStreaming;
  }
  return logits_route ? FusedRouteMode::kWhereItFits : FusedRouteMode::kAuto;
}

// Whether the logits route's scoring kernel lets its top-k be scheduled at its start
// (paged_mqa_logits' trigger_next, the warp-specialized kernels' kWsEarlyTrigger), given the
// DSATTN_FUSED_EARLY_TRIGGER environment variable and the CTAs of the top-k's first launch
// (topk_first_ctas; 0: not a kernel launch). Off unless the variable is "1"; then where that launch
// has at most kEarlyTriggerMaxTopkCtas CTAs, which are placed as the scoring CTAs free their SMs,
// without the launch's own latency after the last one.
// It was on by default: measured with the ops' code still in the instruction caches from the call
// before, it gained ~1 us (H200, k = 2048, FP8, H = 64, S = 64, us per call / back to back: 1 x 64K
// (a cluster of 8) 25.1 -> 24.1 / 19.4 -> 19.1, 1 x 32K (a cluster of 8 at 4 keys per thread)
// 22.3 -> 21.2 / 16.2-16.3 -> 15.9-16.0, 1 x 8K (one CTA) 16.0 -> 15.5 / 12.0-12.1 -> 11.6-11.7).
// With other code run on every SM before each call (bench indexer --fused --cold), as a serving
// engine's other kernels do between two calls, it costs several times that (H100, us per call, L2
// flushed, trigger off -> on, two rounds: 1 x 64K 24.6-24.7 -> 30.0-30.6, 1 x 32K 21.6-21.7 ->
// 26.7-26.8, 1 x 8K 17.2 -> 20.1-20.7, 8 x 8K 26.2-26.5 -> 27.8-27.9; without --cold 23.9 -> 23.2,
// 20.8 -> 20.0-20.2, 16.6 -> 15.9, 24.4-24.5 -> 23.9-24.0; BENCHMARKS.md, 2026-12-06). Larger
// launches were never measured with it (2 x 64K and 4 x 16K, 16 CTAs): a top-k of many CTAs landed
// two to an SM on the first SMs to free up (pdl.cuh).
constexpr int64_t kEarlyTriggerMaxTopkCtas = 8;
inline bool logits_route_early_trigger(const char* env, int64_t topk_first_ctas) {
  if (env == nullptr || std::strcmp(env, "1") != 0) return false;
  return topk_first_ctas > 0 && topk_first_ctas <= kEarlyTriggerMaxTopkCtas;
}

// The streaming route on the portable tile kernel scores on the warp-local pipeline with staged
// tiles (TopkStagedEpilogue, fused_topk_epilogue.cuh) appended in runs (kRuns), unless the
// DSATTN_FUSED_STAGED environment variable is "0" (kOff: the CTA-wide pipeline) or "tile" (kTile:
// the staged tiles appended one at a time; A/B, tests). Other values: kRuns.
enum class StagedMode { kOff, kTile, kRuns };
inline StagedMode fused_staged_mode(const char* env) {
  if (env == nullptr) return StagedMode::kRuns;
  if (std::strcmp(env, "0") == 0) return StagedMode::kOff;
  return std::strcmp(env, "tile") == 0 ? StagedMode::kTile : StagedMode::kRuns;
}

// The staged pipeline's shape for tiles of tile_states states (at most 512, the collector's
// kMaxTileStates) and groups of rows_per_group rows: `tiles` staged tiles per CTA between two
// flushes (about kStageStates row-states, 1..kMaxStageTiles), and the most staged tiles one append
// takes, `run`. An append of n states must find room after a compaction, which keeps k entries
// (exact) or at most k + (ccap - k - n) / 2 (approximate): n <= ccap - kc, which one tile always
// meets (the planner's ccap >= kc + 512), and a run of several tiles keeps 2 n <= ccap - kc, so
// that half of the room above k stays free after an approximate compaction. kc: k rounded up to
// a multiple of 4; ccap: the collector's entries per (slot, row).
constexpr int kMaxStageTiles = 16;
constexpr int kStageStates = 3072;
struct StagedShape {
  int tiles = 1;
  int run = 1;
};
inline StagedShape staged_shape(int rows_per_group, int tile_states, int ccap, int kc, StagedMode mode) {
  StagedShape s;
  const int m = kStageStates / (rows_per_group * tile_states);
  s.tiles = m < 1 ? 1 : m > kMaxStageTiles ? kMaxStageTiles : m;
  const int fit = (ccap - kc) / 2 / tile_states;
  s.run = mode == StagedMode::kTile ? 1 : fit < 1 ? 1 : fit < s.tiles ? fit : s.tiles;
  return s;
}

}  // namespace cuda
}  // namespace dsattn
