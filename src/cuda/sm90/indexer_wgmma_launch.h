// Host side of the Hopper indexer kernel (indexer_wgmma.cuh): eligibility, tensor maps, shape, and
// launches for one epilogue. The portable kernel (src/cuda/sm80/indexer_launch.h) runs whatever this
// path declines.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/common/kernel_smem.h"
#include "cuda/sm80/fused_topk_collect.cuh"
#include "cuda/sm90/indexer_wgmma.cuh"
#include "dsattn/status.h"

namespace dsattn {
namespace cuda {

// Which indexer kernel runs (benchmark / test knob DSATTN_INDEXER_KERNEL): auto (default: the
// Hopper kernel where it applies, else the portable one), portable, or wgmma (an error naming the
// reason when the Hopper kernel cannot run the problem).
// Portable means the mma.sync kernels: on sm_90 (under this knob) and sm_100 (by default), FP8
// paged_mqa_logits on large calls run the warp-specialized kernel with mma.sync consumers
// (indexer_ws_mma.cuh), everything else the portable kernel (indexer_kernel.cuh). mma-ws: that
// kernel wherever it can run the call (paged FP8 logits), whatever the size; warp-local: the
// portable kernel only (sm_80 / sm_89 / sm_120 run nothing else).
enum class IndexerKernelChoice { kAuto, kPortable, kWgmma, kMmaWs, kWarpLocal };
// Whether indexer_ws_mma_kernel has code for a device of compute capability major.minor in this
// build (sm_90a or sm_100 family code; its f16 consumers: not sm_120, whose E4M3 mma.sync is native).
bool mma_ws_kernel_runs(int major, int minor);
IndexerKernelChoice indexer_kernel_choice();
// The current device's compute capability into *major / *minor; true where the Hopper (wgmma)
// kernels can run on it at all: compute capability 9.0 and sm_90a code in this build
// (plan_wgmma_indexer's first two conditions).
bool wgmma_device(int* major, int* minor);

struct WgmmaPlan {
  bool use = false;
  int nw = 64;       // wgmma N (template NW)
  size_t smem = 0;   // dynamic shared memory of the launch (layout + 1024 alignment slack)
  WgmmaShape shape;
  WgmmaMaps maps;
  // The warp-specialized logits kernel (indexer_ws.cuh) instead, when ws_stages > 0: its ring
  // depth and dynamic shared memory. One CTA per SM.
  int ws_stages = 0;
  int ws_stage = 0;  // states per stage
  size_t ws_smem = 0;
  bool ws_pure = false;  // paged_mqa_topk: WsTopkT<true, true> (dense pieces that never overflow)
  bool ws_mma = false;   // paged_mqa_logits: indexer_ws_mma_kernel (mma.sync consumers, f16 Q)
};

// Decides whether the Hopper kernel runs this problem and prepares it: an sm_90 device and sm_90a
// code in this build, FP8 or MXFP4 keys, D = 128, H <= 64, a 16-byte aligned cache, S % 8 == 0
// (paged), and the pipeline fits `budget` bytes. `p` is filled by the
// portable launcher's fill_*_params (its work, Q, cache fields); on success p->warps, tile_states,
// stages are set to the Hopper kernel's. plan->use = false means "run the portable kernel", unless
// DSATTN_INDEXER_KERNEL=wgmma, which turns the reason into an error.
// mma_ws: plan for indexer_ws_mma_kernel instead (paged FP8 decode on a device it has code for;
// never an error, plan->use = false where it declines), followed by plan_wgmma_ws(..., mma = true).
Status plan_wgmma_indexer(const char* op, IndexerParams* p, int budget, size_t (*epi_smem)(const IndexerParams&),
                          WgmmaPlan* plan, bool mma_ws = false);

// After plan_wgmma_indexer chose the Hopper kernel for paged decode: takes the warp-specialized
// kernel (plan->ws_stages > 0; one CTA per SM) when at least kWsMinStages stages fit `budget`
// with the logits (topk = false) or top-k collector (topk = true) scratch. pure (top-k, shapes of
// ws_pure_shape): the dense kernel without staged scores (WsTopkT<true, true>), for a call whose
// every piece fits its buffer; plan->ws_pure says whether it was taken.
// DSATTN_INDEXER_WS=0 keeps indexer_wgmma.cuh (benchmark / test knob).
// mma: indexer_ws_mma_kernel's ring (128-state stages, f16 Q), plan->ws_mma; with topk its
// epilogue is WsTopkT<false> (never pure or dense).
// states_per_sm (logits): the block tables' states per SM of the grid (0 for prefill), for the
// choice of 64-state stages (kWsShortStage) on small calls; DSATTN_WS_STAGE overrides it.
void plan_wgmma_ws(const IndexerParams& p, int budget, bool topk, WgmmaPlan* plan, bool pure = false,
                   bool mma = false, int64_t states_per_sm = 0);
// The shapes with pure dense kernels (indexer_ws_launch.cu): a warpgroup's Q is one 64-column block
// (NW = 64, 256-state stages) at 32 or 64 padded heads. The plan of paged_mqa_topk routes rows to
// the dense-row merge by the same rule.
inline bool ws_pure_shape(const WgmmaShape& s) { return s.q_rows * s.hp <= 64 && s.hp >= 32; }
// Whether paged_mqa_logits' call without schedule metadata takes the warp-specialized kernel's
// kWsOneGroupWalk (indexer_ws.cuh): one paged request (not varlen) on the wgmma consumers with
// 64-state stages, the option not switched off by DSATTN_WS_PRODUCER. The caller then makes the
// request one partition dealt over the whole grid: p.partitions = 1, p.split = the grid.
bool ws_one_group_walk(const WgmmaPlan& plan, const IndexerParams& p);
// paged_mqa_logits on it (grid: one CTA per schedule partition, p.split CTAs each).
// trigger_next: the kernel calls pdl_trigger() at its start (kWsEarlyTrigger).
cudaError_t launch_indexer_ws(const WgmmaPlan& plan, const IndexerParams& p, int grid, cudaStream_t stream,
                              bool trigger_next = false);
// Whether paged_mqa_topk's scoring on it writes dense pieces (WsTopkT<true> in indexer_ws.cuh):
// at 64 padded heads, where the merge needs no row histogram (H200, k = 2048, same run: H = 64
// 128 x 32K 239 -> 225 us, 128 x 64K 450 -> 435, N = 2 64 x 16K 131 -> 126.5; but H = 32 128 x 32K
// 230 -> 235.5, so fewer heads keep the ordered path, except in the pure variant, ws_pure, whose
// 256-state stages pay for the stores there too). The launcher and the merge plan (which routes
// rows to merge_dense_row) both decide by it. Not on the mma consumers' kernel (its store takes no
// row window).
inline bool ws_topk_dense(const WgmmaPlan& plan, bool row_hist) {
  return plan.ws_stages > 0 && !plan.ws_mma && (plan.shape.hp == 64 || plan.ws_pure) && !row_hist;
}
// paged_mqa_topk's resident route (indexer_ws_resident.cuh): the ring that fits `budget` beside
// each warpgroup's scratch (rows x cap keys; `multi`, several requests: also a segment table and
// the partition starts of `grid` CTAs) and still holds the select's histograms; false where none
// does (or the shape has no such kernel). Then its cooperative launch (`grid` CTAs, one per SM).
bool plan_wgmma_ws_resident(int budget, int grid, int rows, int cap, bool multi, WgmmaPlan* plan);
template <bool kMulti>
struct WsResidentT;
using WsResident = WsResidentT<false>;
using WsResidentMulti = WsResidentT<true>;
cudaError_t launch_indexer_ws_resident(const WgmmaPlan& plan, const IndexerParams& p, const WsResident& epi, int grid,
                                       bool pdl, cudaStream_t stream);
cudaError_t launch_indexer_ws_resident(const WgmmaPlan& plan, const IndexerParams& p, const WsResidentMulti& epi,
                                       int grid, bool pdl, cudaStream_t stream);
// paged_mqa_topk's scoring on it: grid CTAs, warpgroup w of CTA c scores partition 3 c + w (the
// schedule has 3 x grid partitions, p.split = 1) into the candidate buffers `buf`.
cudaError_t launch_indexer_ws_topk(const WgmmaPlan& plan, const IndexerParams& p,
                                   const fused_topk::CollectorBuffers& buf, int grid, cudaStream_t stream);

// Launch and occupancy of the Hopper kernel with epilogue Epi (explicitly instantiated in
// indexer_wgmma_inst_*.cu; other translation units declare them extern).
template <class Epi>
struct WgmmaKernelOps {
  static cudaError_t launch(const WgmmaPlan& plan, const IndexerParams& p, const Epi& epi, int grid,
                            cudaStream_t stream);
  static cudaError_t occupancy(const WgmmaPlan& plan, int* blocks_per_sm);
};

namespace wgmma_detail {
template <class Epi, bool kFp4, class Fn>
cudaError_t with_kernel_fmt(const WgmmaPlan& plan, Fn&& fn) {
  const int hp = plan.shape.hp;
  if (plan.nw == 64) {
    if (hp == 16) return fn(indexer_wgmma_kernel<16, 64, Epi, kFp4>);
    if (hp == 32) return fn(indexer_wgmma_kernel<32, 64, Epi, kFp4>);
    if (hp == 64) return fn(indexer_wgmma_kernel<64, 64, Epi, kFp4>);
  } else if (plan.nw == 128) {
    if (hp == 16) return fn(indexer_wgmma_kernel<16, 128, Epi, kFp4>);
    if (hp == 32) return fn(indexer_wgmma_kernel<32, 128, Epi, kFp4>);
    if (hp == 64) return fn(indexer_wgmma_kernel<64, 128, Epi, kFp4>);
  }
  return cudaErrorInvalidValue;
}
// FP8 or MXFP4 (WgmmaShape::fp4) keys.
template <class Epi, class Fn>
cudaError_t with_kernel(const WgmmaPlan& plan, Fn&& fn) {
  return plan.shape.fp4 ? with_kernel_fmt<Epi, true>(plan, fn) : with_kernel_fmt<Epi, false>(plan, fn);
}
}  // namespace wgmma_detail

template <class Epi>
cudaError_t WgmmaKernelOps<Epi>::launch(const WgmmaPlan& plan, const IndexerParams& p, const Epi& epi, int grid,
                                        cudaStream_t stream) {
  return wgmma_detail::with_kernel<Epi>(plan, [&](auto kern) {
    cudaError_t e = raise_dynamic_smem(kern, plan.smem);
    if (e != cudaSuccess) return e;
    return launch_pdl(kern, dim3(grid), dim3(kWgThreads), plan.smem, stream, LaunchOpt{0, EpiPdl<Epi>::value}, plan.maps,
                      p, plan.shape, epi);
  });
}

template <class Epi>
cudaError_t WgmmaKernelOps<Epi>::occupancy(const WgmmaPlan& plan, int* blocks_per_sm) {
  return wgmma_detail::with_kernel<Epi>(plan, [&](auto kern) {
    cudaError_t e = raise_dynamic_smem(kern, plan.smem);
    if (e != cudaSuccess) return e;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, kern, kWgThreads, plan.smem);
  });
}

}  // namespace cuda
}  // namespace dsattn
