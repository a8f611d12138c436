// Which route paged_mqa_topk's CUDA plan may take (see plan_logits_route in fused_topk_launch.cu):
// the call's PagedMqaTopkParams::logits_route (true: the logits route where it fits; false: kAuto,
// the logits route only where the streaming plan would write at least as many bytes anyway, or,
// where streaming would score on the portable tile kernel, where it fits),
// unless the DSATTN_FUSED_LOGITS environment variable overrides it for the process ("0": streaming
// only, "1": the logits route where it fits, "force": the logits route wherever the top-k can plan
// it; tests and benchmarks). Host code, no CUDA.
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

}  // namespace cuda
}  // namespace dsattn
