// Host side of the warp-specialized Hopper logits kernel (indexer_ws.cuh): ring depth and launch.
#include <algorithm>
#include <cstdlib>
#include <type_traits>

#include "cuda/common/kernel_smem.h"
#include "cuda/sm90/indexer_wgmma_launch.h"
#include "cuda/sm90/indexer_ws.cuh"
#include "cuda/sm90/indexer_ws_mma.cuh"
#include "cuda/sm90/indexer_ws_resident.cuh"

namespace dsattn {
namespace cuda {

namespace {
// The producer's options (WgmmaShape::producer): the default bits (all but kWsTouchGroup, off
// since 2026-12-06: see there) unless DSATTN_WS_PRODUCER gives the bits (0: the producer before
// them; bench A/B in one binary; 351 the default with the touch), or "-BITS": the default but those
// (the GPU check's racecheck pass runs with -64, see kWsTouchGroup).
int ws_producer_flags() {
  constexpr int kAll = kWsEvictFirst | kWsLateFetch | kWsFastCursor | kWsFirstBatchOneGroup | kWsBatchedGroupLoad |
                       kWsOneGroupWalk | kWsOwnRange;
  const char* env = std::getenv("DSATTN_WS_PRODUCER");
  if (env == nullptr) return kAll;
  return env[0] == '-' ? kAll & ~std::atoi(env + 1) : std::atoi(env);
}
// Whether the warp-specialized kernel can run `plan`'s shape (Hopper decode, not switched off by
// DSATTN_INDEXER_WS=0); the plan's ring fields are cleared first.
bool ws_applies(WgmmaPlan* plan, bool mma = false) {
  plan->ws_stages = 0;
  plan->ws_smem = 0;
  plan->ws_pure = false;
  plan->ws_mma = false;
  if (!plan->use || plan->shape.prefill) return false;
  if (mma) return true;  // DSATTN_INDEXER_WS concerns the wgmma kernels
  if (const char* env = std::getenv("DSATTN_INDEXER_WS")) {
    if (std::atoi(env) == 0) return false;
  }
  return true;
}
// The deepest ring of `stage`-state stages that fits `budget` beside `epi` bytes of epilogue
// scratch per warpgroup: a multiple of the consumer count (consumer w always takes stages
// w, w + kWsConsumers, ...), at least kWsMinStages; 0 when none fits. *smem: its dynamic smem.
int ws_ring(const WgmmaShape& s, int stage, size_t epi, int budget, size_t* smem, bool q_f16 = false) {
  auto need = [&](int st) { return ws_smem_layout(st, stage, s.q_rows, s.hp, epi, s.fp4 != 0, q_f16).total + 1024; };
  int stages = kWsMaxStages / kWsConsumers * kWsConsumers;
  while (stages >= kWsMinStages && need(stages) > static_cast<size_t>(budget)) stages -= kWsConsumers;
  if (stages < kWsMinStages) return 0;
  *smem = need(stages);
  return stages;
}

// paged_mqa_logits on the wgmma consumers with one 64-column Q block (N = 1 at 64 heads, N <= 2 at
// 32; FP8 or MXFP4): 64-state stages (kWsShortStage) where the block tables hold more than 64 and
// at most kWsShortStageStatesPerSm (MXFP4: kWsShortStageStatesPerSmFp4) states per SM, else the
// 256-state stages of ws_stage. A CTA then has 4x the tiles (at 1 x 64K: 8 instead of 2), all
// three rings get work, and the last tile of a ring is short. At 64 or fewer states per SM a CTA
// has one tile either way (1 x 8K: 5.4 / 5.5 us).
// H200, S = 64, us, 256 / 64-state stages, same binary (states per SM in brackets):
//   FP8, H = 64: 1 x 32K (248) 7.3 / 6.7, 1 x 64K (496) 8.9 / 8.1, 1 x 128K (993) 13.1 / 10.6,
//     4 x 8K (248) 7.2-7.3 / 6.7, 4 x 32K (993) 13.1 / 10.6, 1 x 256K (1986) 18.4 / 15.3-15.4,
//     8 x 32K (1986) 18.3-18.6 / 17.2-17.5, 32 x 8K (1986) 18.4 / 17.4, 48 x 8K (2979) 23.1-23.3 /
//     21.7; level at 3971 (8 x 64K 27.0-27.3 / 26.6-27.4, 16 x 32K 27.2-27.4 / 26.9-27.3, 64 x 8K
//     27.7 / 27.1-27.3); slower from ~6000 (96 x 8K 36.0-36.6 / 37.3, 16 x 64K 43.4-43.5 /
//     45.1-45.2, 32 x 32K 43.8-44.6 / 46.7), where the producer's per-stage work (~200
//     instructions) shows.
//   FP8, H = 32: 1 x 32K 7.5 / 6.8, 4 x 32K 13.6 / 11.0, 32 x 32K 44.4-44.5 / 47.7-48.2; N = 2:
//     1 x 32K 8.4 / 7.6, 1 x 64K 10.2 / 9.3-9.4, 4 x 32K (993) 15.5-15.6 / 12.7-12.8, 4 x 64K
//     (1986) 22.0-22.1 / 18.7-18.8, 32 x 8K 21.8 / 20.2-20.3, 16 x 32K (3971) 33.5-33.6 /
//     32.2-32.3, 32 x 32K 53.8-54.1 / 56.6-56.7.
//   MXFP4, H = 64 (larger calls bound by the key conversion, not by memory: it gains less and
//     stops gaining sooner): 1 x 32K (248) 8.4-8.5 / 7.7-7.8, 1 x 64K (496) 9.9 / 9.5-9.6, 4 x 8K
//     8.5 / 7.9, 4 x 32K (993) 14.3 / 13.3-13.4, 4 x 64K (1986) 20.4-20.5 / 20.2, 32 x 8K (1986)
//     20.7-20.8 / 20.5-20.8; 32 x 32K (7943) 58.2-58.3 / 60.7-60.9.
// Not taken: N = 2 at 64 heads (a 128-column Q block) would need kernels of its own for smaller
// gains (1 x 64K 11.0 / 10.2, 4 x 32K 14.7 / 14.3, but 32 x 8K 22.7 / 23.3-23.4).
// DSATTN_WS_STAGE=64 / 256 forces either where the shape has the kernel (benchmarks, tests).
constexpr int64_t kWsShortStageStatesPerSm = 4096;
constexpr int64_t kWsShortStageStatesPerSmFp4 = 2048;
bool ws_short_stage(const WgmmaShape& s, int nw, int64_t states_per_sm) {
  if (nw != 64 || s.q_rows * s.hp > 64 || (s.hp != 32 && s.hp != 64)) return false;
  if (const char* env = std::getenv("DSATTN_WS_STAGE")) {
    const int want = std::atoi(env);
    if (want == kWsShortStage) return true;
    if (want == 256) return false;
  }
  return states_per_sm > kWsShortStage &&
         states_per_sm <= (s.fp4 != 0 ? kWsShortStageStatesPerSmFp4 : kWsShortStageStatesPerSm);
}
}  // namespace

void plan_wgmma_ws(const IndexerParams& p, int budget, bool topk, WgmmaPlan* plan, bool pure, bool mma,
                   int64_t states_per_sm) {
  if (!ws_applies(plan, mma)) return;
  const WgmmaShape& s = plan->shape;
  mma = mma && s.fp4 == 0;
  pure = topk && pure && !mma && ws_pure_shape(s);  // WsTopkT<true, true>'s kernels
  // The mma consumers' f16 Q takes twice the bytes: 128-state stages, so that a ring still has 3.
  int stage = mma ? 128 : ws_stage(s.q_rows, s.hp, topk && !pure);
  if (!topk && !mma && ws_short_stage(s, plan->nw, states_per_sm)) stage = kWsShortStage;
  // The mma kernel's top-k epilogue is WsTopkT<false> (launch_indexer_ws_topk), whose scratch is
  // WsTopkT<true>'s.
  const size_t epi = !topk ? WsLogits::smem_bytes(p, stage)
                     : pure ? WsTopkT<true, true>::smem_bytes(p, stage)
                            : WsTopkT<true>::smem_bytes(p, stage);
  size_t smem = 0;
  const int stages = ws_ring(s, stage, epi, budget, &smem, mma);
  if (stages == 0) return;
  plan->ws_stages = stages;
  plan->ws_stage = stage;
  plan->ws_smem = smem;
  plan->ws_pure = pure;
  plan->ws_mma = mma;
}

bool plan_wgmma_ws_resident(int budget, int grid, int rows, int cap, bool multi, WgmmaPlan* plan) {
  if (!ws_applies(plan) || grid < 1 || grid > resident::kMaxCtas) return false;
  const WgmmaShape& s = plan->shape;
  if (s.hp < WsResident::kHpMin) return false;
  const int stage = ws_stage(s.q_rows, s.hp, WsResident::kStaged);
  size_t smem = 0;
  const size_t scratch =
      multi ? WsResidentMulti::scratch_bytes(grid, rows, cap) : WsResident::scratch_bytes(grid, rows, cap);
  const int stages = ws_ring(s, stage, scratch, budget, &smem);
  if (stages == 0) return false;
  // The select's histograms live in the ring once the scoring is over.
  const size_t select_bytes = resident::select_smem_bytes(rows, multi ? resident::kSlots : 1);
  if (size_t(stages) * stage * wg_key_row(s.fp4 != 0) < select_bytes) return false;
  plan->ws_stages = stages;
  plan->ws_stage = stage;
  plan->ws_smem = smem;
  return true;
}

namespace {
// rr: kWsOneGroupWalk's kernels (WsLogits with short stages; the caller checked the call).
// kOwn: IndexerParams::inline_schedule's kernels (WsLogits).
template <class Epi, bool kFp4, bool kOwn, class Fn>
cudaError_t with_ws_kernel_fmt(const WgmmaPlan& plan, Fn&& fn, bool rr) {
  const int hp = plan.shape.hp;
  // ws_stage(): NW = 64 exactly when the stage is longer than 128 states.
  constexpr int kStage64 = ws_stage(1, 64, Epi::kStaged);
  constexpr bool kRr = false;
  if constexpr (std::is_same_v<Epi, WsLogits>) {  // short stages (ws_short_stage)
    if (plan.nw == 64 && plan.ws_stage == kWsShortStage && rr && !kOwn) {
      if (hp == 32) return fn(indexer_ws_kernel<32, 64, kWsShortStage, Epi, kFp4, true>);
      if (hp == 64) return fn(indexer_ws_kernel<64, 64, kWsShortStage, Epi, kFp4, true>);
      return cudaErrorInvalidValue;
    }
    if (plan.nw == 64 && plan.ws_stage == kWsShortStage) {
      if (hp == 32) return fn(indexer_ws_kernel<32, 64, kWsShortStage, Epi, kFp4, kRr, kOwn>);
      if (hp == 64) return fn(indexer_ws_kernel<64, 64, kWsShortStage, Epi, kFp4, kRr, kOwn>);
      return cudaErrorInvalidValue;
    }
  }
  if (plan.nw == 64 && plan.ws_stage == kStage64) {
    if constexpr (Epi::kHpMin <= 16) {
      if (hp == 16) return fn(indexer_ws_kernel<16, 64, kStage64, Epi, kFp4, kRr, kOwn>);
    }
    if constexpr (Epi::kHpMin <= 32) {
      if (hp == 32) return fn(indexer_ws_kernel<32, 64, kStage64, Epi, kFp4, kRr, kOwn>);
    }
    if (hp == 64) return fn(indexer_ws_kernel<64, 64, kStage64, Epi, kFp4, kRr, kOwn>);
  } else if (plan.nw == 128 && plan.ws_stage == 128) {
    if constexpr (!Epi::kNw64Only) {
      if constexpr (Epi::kHpMin <= 16) {
        if (hp == 16) return fn(indexer_ws_kernel<16, 128, 128, Epi, kFp4, kRr, kOwn>);
      }
      if constexpr (Epi::kHpMin <= 32) {
        if (hp == 32) return fn(indexer_ws_kernel<32, 128, 128, Epi, kFp4, kRr, kOwn>);
      }
      if (hp == 64) return fn(indexer_ws_kernel<64, 128, 128, Epi, kFp4, kRr, kOwn>);
    }
  }
  return cudaErrorInvalidValue;
}
// FP8 or MXFP4 (WgmmaShape::fp4) keys.
template <class Epi, class Fn>
cudaError_t with_ws_kernel(const WgmmaPlan& plan, Fn&& fn, bool rr = false, bool own = false) {
  if constexpr (std::is_same_v<Epi, WsLogits>) {
    if (own) {
      return plan.shape.fp4 ? with_ws_kernel_fmt<Epi, true, true>(plan, fn, false)
                            : with_ws_kernel_fmt<Epi, false, true>(plan, fn, false);
    }
  }
  return plan.shape.fp4 ? with_ws_kernel_fmt<Epi, true, false>(plan, fn, rr)
                        : with_ws_kernel_fmt<Epi, false, false>(plan, fn, rr);
}

// The warp-specialized kernels' shape argument for `plan`: its ring, and the producer's options
// (ws_producer_flags(), plus `extra` bits such as kWsEarlyTrigger).
WgmmaShape ws_shape(const WgmmaPlan& plan, int extra) {
  WgmmaShape s = plan.shape;
  s.stages = plan.ws_stages;
  s.tile = plan.ws_stage;
  s.producer = ws_producer_flags() | extra;
  return s;
}

// opt: PDL as the epilogue says (EpiPdl), no cooperative launch, unless given. extra: see ws_shape.
template <class Epi>
cudaError_t launch_ws(const WgmmaPlan& plan, const IndexerParams& p, const Epi& epi, int grid, cudaStream_t stream,
                      LaunchOpt opt = LaunchOpt{0, EpiPdl<Epi>::value}, int extra = 0, bool rr = false,
                      bool own = false) {
  const WgmmaShape s = ws_shape(plan, extra);
  return with_ws_kernel<Epi>(
      plan,
      [&](auto kern) {
        cudaError_t e = raise_dynamic_smem(kern, plan.ws_smem);
        if (e != cudaSuccess) return e;
        return launch_pdl(kern, dim3(grid), dim3(kWsThreads), plan.ws_smem, stream, opt, plan.maps, p, s, epi);
      },
      rr, own);
}
}  // namespace

bool mma_ws_kernel_runs(int major, int minor) {
  if (major != 9 && major != 10) return false;
  // The native-FP8 test build runs sm_120's code on sm_90, and sm_120 has no body for this kernel.
  if (DSATTN_SM90_NATIVE_FP8_MMA && major == 9) return false;
  cudaFuncAttributes a{};
  if (cudaFuncGetAttributes(&a, indexer_ws_mma_kernel<64, 128, WsLogits>) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  // Real code for this device, not another arch's stub: the code's major is the device's, and its
  // minor not above the device's (a family target's 100 code on a 10.3 device).
  return a.binaryVersion / 10 == major && a.binaryVersion % 10 <= minor;
}

namespace {
template <class Epi, class Fn>
cudaError_t with_ws_mma_kernel(const WgmmaPlan& plan, Fn&& fn) {
  const int hp = plan.shape.hp;
  if (plan.ws_stage == 128) {
    if (hp == 16) return fn(indexer_ws_mma_kernel<16, 128, Epi>);
    if (hp == 32) return fn(indexer_ws_mma_kernel<32, 128, Epi>);
    if (hp == 64) return fn(indexer_ws_mma_kernel<64, 128, Epi>);
  }
  return cudaErrorInvalidValue;
}
template <class Epi>
cudaError_t launch_ws_mma(const WgmmaPlan& plan, const IndexerParams& p, const Epi& epi, int grid, int extra,
                          cudaStream_t stream) {
  const WgmmaShape s = ws_shape(plan, extra);
  return with_ws_mma_kernel<Epi>(plan, [&](auto kern) {
    cudaError_t e = raise_dynamic_smem(kern, plan.ws_smem);
    if (e != cudaSuccess) return e;
    return launch_pdl(kern, dim3(grid), dim3(kWsmThreads), plan.ws_smem, stream, LaunchOpt{0, EpiPdl<Epi>::value},
                      plan.maps, p, s, epi);
  });
}
}  // namespace

bool ws_one_group_walk(const WgmmaPlan& plan, const IndexerParams& p) {
  return plan.ws_stages > 0 && !plan.ws_mma && plan.ws_stage == kWsShortStage &&
         (ws_producer_flags() & kWsOneGroupWalk) != 0 && p.work.groups == 1 &&
         p.work.mode == detail::IndexerMode::kPaged && p.work.varlen == 0;
}

cudaError_t launch_indexer_ws(const WgmmaPlan& plan, const IndexerParams& p, int grid, cudaStream_t stream,
                              bool trigger_next) {
  const int extra = trigger_next ? kWsEarlyTrigger : 0;
  if (plan.ws_mma) return launch_ws_mma(plan, p, WsLogits{}, grid, extra, stream);
  // kWsOneGroupWalk where the caller set the call up for it (paged_mqa_logits, indexer_launch.cu).
  const bool rr = ws_one_group_walk(plan, p) && p.meta == nullptr && p.partitions == 1 && p.split == grid;
  // IndexerParams::inline_schedule: the kernels that compute their partitions themselves.
  const bool own = p.inline_schedule != 0 && p.meta == nullptr;
  return launch_ws(plan, p, WsLogits{}, grid, stream, LaunchOpt{0, EpiPdl<WsLogits>::value}, extra, rr, own);
}

cudaError_t launch_indexer_ws_topk(const WgmmaPlan& plan, const IndexerParams& p,
                                   const fused_topk::CollectorBuffers& buf, int grid, cudaStream_t stream) {
  if (plan.ws_mma) {  // ordered appends only (ws_topk_dense)
    WsTopkT<false> epi;
    epi.buf = buf;
    return launch_ws_mma(plan, p, epi, grid, 0, stream);
  }
  if (ws_topk_dense(plan, buf.hist != nullptr)) {
    if (plan.ws_pure) {
      WsTopkT<true, true> epi;
      epi.buf = buf;
      return launch_ws(plan, p, epi, grid, stream);
    }
    WsTopkT<true> epi;
    epi.buf = buf;
    return launch_ws(plan, p, epi, grid, stream);
  }
  WsTopkT<false> epi;
  epi.buf = buf;
  return launch_ws(plan, p, epi, grid, stream);
}

cudaError_t launch_indexer_ws_resident(const WgmmaPlan& plan, const IndexerParams& p, const WsResident& epi, int grid,
                                       bool pdl, cudaStream_t stream) {
  return launch_ws(plan, p, epi, grid, stream, LaunchOpt{0, pdl, true});  // every CTA resident: grid barriers
}

cudaError_t launch_indexer_ws_resident(const WgmmaPlan& plan, const IndexerParams& p, const WsResidentMulti& epi,
                                       int grid, bool pdl, cudaStream_t stream) {
  return launch_ws(plan, p, epi, grid, stream, LaunchOpt{0, pdl, true});  // every CTA resident: barriers
}

}  // namespace cuda
}  // namespace dsattn
