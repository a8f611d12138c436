// Host-side planning and launching of the portable indexer kernel (indexer_kernel.cuh), shared by
// paged_mqa_logits, mqa_logits and the fused paged_mqa_topk (which plugs in its own epilogue).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "api/problems.h"
#include "cuda/common/kernel_smem.h"
#include "cuda/sm80/indexer_kernel.cuh"
#include "dsattn/ops.h"
#include "dsattn/status.h"

namespace dsattn {
namespace cuda {

// Kernel entry points of one (format, head dim, epilogue) combination; explicitly instantiated in
// indexer_inst_*.cu (an epilogue defined elsewhere instantiates its own in its own .cu file).
template <IndexerFormat F, int D, class Epi>
struct IndexerKernelOps {
  using Kernel = void (*)(IndexerParams, Epi);
  // The kernel a launch with p runs (p.warps, p.tile_states and p.bulk as the config picker set
  // them): the warp-local pipeline for an epilogue with kWarpLocal and keys by cp.async, or with
  // kStaged (the 384-thread kernel for 12 warps, 64 states per warp when p.tile_states says so);
  // the CTA-wide one otherwise.
  static Kernel kernel(const IndexerParams& p);
  static cudaError_t launch(const IndexerParams& p, const Epi& epi, int grid, size_t smem, cudaStream_t stream);
  // CTAs per SM of the kernel a launch with p runs, with p.warps * 32 threads and `smem` bytes.
  static cudaError_t occupancy(const IndexerParams& p, size_t smem, int* blocks_per_sm);
};

// The warp-local pipeline's kernel for p's shape: the 384-thread kernel for 12 warps, two halves
// of 32 states per warp when p.tile_states says so. A function template of its own, so that it is
// instantiated only for epilogues that run that pipeline.
template <IndexerFormat F, int D, class Epi>
typename IndexerKernelOps<F, D, Epi>::Kernel warp_local_indexer_kernel(const IndexerParams& p) {
  if (p.warps > 8) return indexer_kernel<F, D, Epi, 1, 384>;
  return p.tile_states > 32 * p.warps ? indexer_kernel<F, D, Epi, 2> : indexer_kernel<F, D, Epi, 1>;
}

template <IndexerFormat F, int D, class Epi>
typename IndexerKernelOps<F, D, Epi>::Kernel IndexerKernelOps<F, D, Epi>::kernel(const IndexerParams& p) {
  if constexpr (EpiStaged<Epi>::value) {
    return warp_local_indexer_kernel<F, D, Epi>(p);  // only that pipeline (their planner keeps p.bulk off)
  } else {
    if constexpr (EpiWarpLocal<Epi>::value) {
      if (!p.bulk) return warp_local_indexer_kernel<F, D, Epi>(p);
    }
    return indexer_kernel<F, D, Epi, 0>;
  }
}

template <IndexerFormat F, int D, class Epi>
cudaError_t IndexerKernelOps<F, D, Epi>::launch(const IndexerParams& p, const Epi& epi, int grid, size_t smem,
                                                cudaStream_t stream) {
  const Kernel kern = kernel(p);
  cudaError_t e = raise_dynamic_smem(kern, smem);
  if (e != cudaSuccess) return e;
  return launch_pdl(kern, dim3(grid), dim3(p.warps * 32), smem, stream, LaunchOpt{0, EpiPdl<Epi>::value}, p, epi);
}

template <IndexerFormat F, int D, class Epi>
cudaError_t IndexerKernelOps<F, D, Epi>::occupancy(const IndexerParams& p, size_t smem, int* blocks_per_sm) {
  const Kernel kern = kernel(p);
  cudaError_t e = raise_dynamic_smem(kern, smem);
  if (e != cudaSuccess) return e;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, kern, p.warps * 32, smem);
}

// Picks the key copy path (p->bulk: bulk copies on sm_90+ for an FP8, 16-byte aligned cache, prefill
// only by default; set p->keys_aligned16 and p->work first) and the largest tile with >= 3 stages
// (>= 2 on the warp-local pipeline; else the first with 2; at most 3 for cp.async FP8 keys on
// sm_90, else at most 6) that fits `budget` bytes (0 = device max). epi_smem(p) gives the
// epilogue's scratch for a candidate (p.tile_states set). Benchmark knobs:
// DSATTN_INDEXER_TILE="warps:stages" forces a shape when it fits, DSATTN_INDEXER_QF16=0 keeps Q in
// E4M3, DSATTN_INDEXER_BULK=0 uses cp.async for the keys.
// warp_local: the call's epilogue runs the warp-local pipeline where the keys come by cp.async
// (the logits epilogue), which may then take CTAs of 12 warps (or 64 states per warp and tile) on
// calls whose block tables fill `sms` SMs with enough such tiles. The choice itself is
// plan_indexer_config (indexer_params.h), for the current device's compute capability.
Status pick_indexer_config(const char* op, IndexerParams* p, int budget, size_t (*epi_smem)(const IndexerParams&),
                           IndexerConfig* cfg, bool warp_local = false, int sms = 0);

// Whether paged_mqa_logits scores this paged-decode call (p as fill_paged_indexer_params filled it)
// on the warp-specialized kernel with mma.sync consumers (indexer_ws_mma.cuh) where that kernel
// has code and fits: FP8 keys, D = 128, the portable path's call (by default on the sm_100 family;
// DSATTN_INDEXER_KERNEL=portable or mma-ws on sm_90) with block tables of at least 768 states per
// SM (`sms`). The fused op takes the same kernel by the same rule.
bool logits_mma_ws_rule(const IndexerParams& p, IndexerFormat fmt, int D, int sms);
struct WgmmaPlan;  // cuda/sm90/indexer_wgmma_launch.h
// Plans that kernel into *wg where logits_mma_ws_rule says so (topk: with the fused op's top-k
// epilogue, epi_smem its scratch); else, or where it has no code or no ring fits `budget`, leaves
// *p and *wg as they were (wg->ws_mma says whether it was taken). Both indexer ops plan it here.
Status plan_mma_ws(const char* op, IndexerParams* p, IndexerFormat fmt, int D, int sms, int budget,
                   size_t (*epi_smem)(const IndexerParams&), bool topk, WgmmaPlan* wg);

// Fills the paged-decode parts of IndexerParams (work, Q, weights, cache, block table) from
// validated arguments. Output fields (out, out_width...) and the schedule are left to the caller.
Status fill_paged_indexer_params(const char* op, const PagedIndexerArgs& a, const detail::PagedIndexerProblem& pb,
                                 IndexerParams* p);

// Schedule handling for ops that run the indexer kernel: with a caller schedule,
// check_caller_schedule checks it (present, i32, contiguous, [schedule_metadata_size(P)]) and
// returns its partition count P; without, `partitions` = SMs * occupancy and the metadata goes
// into the workspace (bytes = indexer_schedule_workspace(partitions)).
Status check_caller_schedule(const char* op, const TensorView& schedule, int* partitions);
size_t indexer_schedule_workspace(int partitions);

// The multiprocessors that work on ex.stream can use (sm_share: the device's, or a green
// context's share; under MPS the device count is already the client's; grids and partitions are
// sized by it, and the resident route's cooperative launch needs that many CTAs at once) and the
// opt-in shared memory per block of the current device.
Status device_limits(const char* op, const Exec& ex, int* sms, int* smem_optin);

}  // namespace cuda
}  // namespace dsattn
