// Host side of the warp-specialized Hopper logits kernel (indexer_ws.cuh): ring depth and launch.
#include <algorithm>
#include <cstdlib>

#include "cuda/sm90/indexer_wgmma_launch.h"
#include "cuda/sm90/indexer_ws.cuh"

namespace dsattn {
namespace cuda {

void plan_wgmma_ws(int budget, WgmmaPlan* plan) {
  plan->ws_stages = 0;
  plan->ws_smem = 0;
  if (!plan->use || plan->shape.prefill) return;
  if (const char* env = std::getenv("DSATTN_INDEXER_WS")) {
    if (std::atoi(env) == 0) return;
  }
  const WgmmaShape& s = plan->shape;
  const int stage = ws_stage(s.q_rows, s.hp);
  auto need = [&](int st) { return ws_smem_layout(st, stage, s.q_rows, s.hp).total + 1024; };
  // A multiple of the consumer count: consumer w always takes stages w, w + kWsConsumers, ...
  int stages = kWsMaxStages / kWsConsumers * kWsConsumers;
  while (stages >= kWsMinStages && need(stages) > static_cast<size_t>(budget)) stages -= kWsConsumers;
  if (stages < kWsMinStages) return;
  plan->ws_stages = stages;
  plan->ws_stage = stage;
  plan->ws_smem = need(stages);
}

namespace {
template <class Fn>
cudaError_t with_ws_kernel(const WgmmaPlan& plan, Fn&& fn) {
  const int hp = plan.shape.hp;
  // ws_stage(): 256 exactly when NW = 64.
  if (plan.nw == 64 && plan.ws_stage == 256) {
    if (hp == 16) return fn(indexer_ws_kernel<16, 64, 256>);
    if (hp == 32) return fn(indexer_ws_kernel<32, 64, 256>);
    if (hp == 64) return fn(indexer_ws_kernel<64, 64, 256>);
  } else if (plan.nw == 128 && plan.ws_stage == 128) {
    if (hp == 16) return fn(indexer_ws_kernel<16, 128, 128>);
    if (hp == 32) return fn(indexer_ws_kernel<32, 128, 128>);
    if (hp == 64) return fn(indexer_ws_kernel<64, 128, 128>);
  }
  return cudaErrorInvalidValue;
}
}  // namespace

cudaError_t launch_indexer_ws(const WgmmaPlan& plan, const IndexerParams& p, int grid, cudaStream_t stream) {
  WgmmaShape s = plan.shape;
  s.stages = plan.ws_stages;
  s.tile = plan.ws_stage;
  return with_ws_kernel(plan, [&](auto kern) {
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(plan.ws_smem));
    if (e != cudaSuccess) return e;
    kern<<<grid, kWsThreads, plan.ws_smem, stream>>>(plan.maps, p, s);
    return cudaGetLastError();
  });
}

}  // namespace cuda
}  // namespace dsattn
