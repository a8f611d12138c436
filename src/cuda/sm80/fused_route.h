// Which route paged_mqa_topk's CUDA plan may take (see plan_logits_route in fused_topk_launch.cu):
// the call's PagedMqaTopkParams::logits_route (true: the logits route where it fits; false: kAuto,
// the logits route only where the streaming plan would keep every score as a candidate anyway),
// unless the DSATTN_FUSED_LOGITS environment variable overrides it for the process ("0": streaming
// only, "1": the logits route where it fits, "force": the logits route wherever the top-k can plan
// it; tests and benchmarks). Host code, no CUDA.
#pragma once
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

}  // namespace cuda
}  // namespace dsattn
