// Host planning of the Hopper indexer kernel: eligibility, tensor maps (driver entry point through
// the runtime, so nothing links libcuda directly), pipeline depth.
#include "cuda/sm90/indexer_wgmma_launch.h"

#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "api/validate.h"
#include "common/indexer_work.h"
#include "cuda/common/driver_entry.h"
#include "cuda/cuda_ops.h"
#include "cuda/sm80/fused_topk_epilogue.cuh"

#ifndef DSATTN_HAS_SM90A
#define DSATTN_HAS_SM90A 0
#endif

namespace dsattn {
namespace cuda {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] { driver_entry_point("cuTensorMapEncodeTiled", 12000, &fn); });
  return fn;
}

int log2_exact(int v) {
  int l = 0;
  while ((1 << l) < v) ++l;
  return l;
}

}  // namespace

IndexerKernelChoice indexer_kernel_choice() {
  const char* env = std::getenv("DSATTN_INDEXER_KERNEL");
  if (env == nullptr) return IndexerKernelChoice::kAuto;
  if (std::strcmp(env, "portable") == 0) return IndexerKernelChoice::kPortable;
  if (std::strcmp(env, "wgmma") == 0) return IndexerKernelChoice::kWgmma;
  if (std::strcmp(env, "mma-ws") == 0) return IndexerKernelChoice::kMmaWs;
  if (std::strcmp(env, "warp-local") == 0) return IndexerKernelChoice::kWarpLocal;
  return IndexerKernelChoice::kAuto;
}

bool wgmma_device(int* major, int* minor) {
  if (!device_capability("indexer", major, minor).ok()) *major = *minor = 0;  // device_limits reports it
  return DSATTN_HAS_SM90A && *major == 9 && *minor == 0;
}

Status plan_wgmma_indexer(const char* op, IndexerParams* p, int budget, size_t (*epi_smem)(const IndexerParams&),
                          WgmmaPlan* plan, bool mma_ws) {
  plan->use = false;
  const IndexerKernelChoice choice = indexer_kernel_choice();
  if (!mma_ws && (choice == IndexerKernelChoice::kPortable || choice == IndexerKernelChoice::kWarpLocal)) {
    return Status::Ok();
  }
  const bool forced = !mma_ws && choice == IndexerKernelChoice::kWgmma;
  const bool prefill = p->work.mode == detail::IndexerMode::kPrefill;
  // Reasons the Hopper kernel declines; an error only when it was asked for.
#define DSATTN_WG_DECLINE(...) \
  return forced ? detail::not_implemented(op, "Hopper (wgmma) indexer kernel: " __VA_ARGS__) : Status::Ok()
  int dev = 0, major = 0, minor = 0;
  cudaGetDevice(&dev);
  wgmma_device(&major, &minor);
  if (mma_ws) {
    // The mma.sync consumers' kernel: FP8 paged decode, built for this device (sm_90a / sm_100 family).
    if (prefill || p->fp4 || !mma_ws_kernel_runs(major, minor)) return Status::Ok();
  } else {
    if (!DSATTN_HAS_SM90A) DSATTN_WG_DECLINE("this build has no sm_90a code (DSATTN_CUDA_ARCHS without 90a)");
    if (major != 9 || minor != 0) DSATTN_WG_DECLINE("device compute capability 9.0 expected, got %d.%d", major, minor);
  }
  if (p->head_dim != kWgHeadDim) DSATTN_WG_DECLINE("head dim %d expected, got %d", kWgHeadDim, p->head_dim);
  if (p->heads > 64) DSATTN_WG_DECLINE("heads <= 64 expected, got %d", p->heads);
  if (!p->keys_aligned16) DSATTN_WG_DECLINE("16-byte aligned cache base and page stride expected");
  int box = 64;
  if (!prefill) {
    const int S = p->states_per_page;
    if (S % 8 != 0) DSATTN_WG_DECLINE("states per page a multiple of 8 expected, got %d", S);
    box = S % 64 == 0 ? 64 : (S % 32 == 0 ? 32 : (S % 16 == 0 ? 16 : 8));  // gcd(S, 64)
  }
  PFN_cuTensorMapEncodeTiled_v12000 encode = encode_fn();
  if (encode == nullptr) DSATTN_WG_DECLINE("the driver has no cuTensorMapEncodeTiled");

  WgmmaShape& s = plan->shape;
  s.hp = p->heads <= 16 ? 16 : (p->heads <= 32 ? 32 : 64);
  const int rpg = p->work.rows_per_group;
  plan->nw = rpg * s.hp <= 64 ? 64 : 128;
  const int C = plan->nw / s.hp;
  s.q_rows = (rpg + C - 1) / C * C;
  s.log2_box = log2_exact(box);
  s.prefill = prefill ? 1 : 0;
  s.fp4 = p->fp4 ? 1 : 0;
  const int row = wg_key_row(p->fp4 != 0);  // key bytes per state

  // Pipeline depth: the deepest (up to 5) that lets two CTAs share an SM, else the deepest that
  // fits the budget. H200, 128 x 32K: two CTAs per SM with 3-5 stages ran 345 us; one CTA with 8
  // stages 499 us (the CTA's tile loop, not the copies in flight, is the limit).
  // DSATTN_INDEXER_WG_STAGES=n forces n when it fits.
  IndexerParams q = *p;
  q.warps = kWgThreads / 32;
  s.tile = wg_tile(plan->nw);
  q.tile_states = s.tile;
  q.split = 1;
  q.bulk = 0;
  q.q_f16 = 0;
  int per_sm = 0;
  cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
  int want = 5;
  bool forced_depth = false;
  if (const char* env = std::getenv("DSATTN_INDEXER_WG_STAGES")) {
    const int n = std::atoi(env);
    if (n >= 2 && n <= kWgMaxStages) { want = n; forced_depth = true; }
  }
  auto need_for = [&](int st) {
    s.stages = st;
    q.stages = st;
    return wgmma_smem_layout(s, rpg, epi_smem(q)).total + 1024;
  };
  const size_t two_per_sm = per_sm > 0 ? static_cast<size_t>(per_sm) / 2 - 1024 : 0;
  size_t need = 0, smallest = need_for(2);
  int stages = 0;
  for (int pass = forced_depth ? 1 : 0; pass < 2 && stages == 0; ++pass) {
    const size_t cap = pass == 0 ? std::min<size_t>(two_per_sm, static_cast<size_t>(budget)) : static_cast<size_t>(budget);
    for (int st = pass == 0 ? want : (forced_depth ? want : kWgMaxStages); st >= 2; --st) {
      need = need_for(st);
      if (need <= cap) {
        stages = st;
        break;
      }
    }
  }
  // The kernel choice must not depend on the epilogue: paged_mqa_topk and paged_mqa_logits + topk
  // score with the same kernel (bitwise-identical scores) under the same budget. So the Hopper
  // kernel is taken only when its shallowest pipeline fits with the larger epilogue scratch.
  {
    q.stages = 2;
    s.stages = 2;
    const size_t epi_max = std::max(LogitsEpilogue::smem_bytes(q), TopkEpilogue::smem_bytes(q));
    const size_t any_epi = wgmma_smem_layout(s, rpg, epi_max).total + 1024;
    smallest = std::max(smallest, any_epi);
    if (any_epi > static_cast<size_t>(budget)) stages = 0;
  }
  if (mma_ws) stages = std::max(stages, 2);  // the tile kernel's pipeline is not run (plan_wgmma_ws sizes the ring)
  if (stages == 0) {
    DSATTN_WG_DECLINE("shared memory budget expected >= %zu bytes, got %d", smallest, budget);
  }
#undef DSATTN_WG_DECLINE
  s.stages = stages;
  plan->smem = need;

  // Tensor maps.
  std::memset(&plan->maps, 0, sizeof(plan->maps));
  CUtensorMap* km = &plan->maps.keys;
  cuuint64_t dims[3], strides[2];
  // FP8: 128-byte rows, swizzled for the MMA's shared-memory operand; MXFP4: 64-byte rows as stored
  // (the consumers read them into registers).
  cuuint32_t boxd[3] = {static_cast<cuuint32_t>(row), static_cast<cuuint32_t>(box), 1};
  const cuuint32_t estr[3] = {1, 1, 1};
  if (prefill) {
    const int64_t nk = p->state_limit > 0 ? p->state_limit : 1;
    dims[0] = static_cast<cuuint64_t>(row); dims[1] = static_cast<cuuint64_t>(nk); dims[2] = 1;
    strides[0] = static_cast<cuuint64_t>(row); strides[1] = static_cast<cuuint64_t>(nk) * row;
  } else {
    dims[0] = static_cast<cuuint64_t>(row); dims[1] = static_cast<cuuint64_t>(p->states_per_page);
    dims[2] = static_cast<cuuint64_t>(p->num_pages > 0 ? p->num_pages : 1);
    strides[0] = static_cast<cuuint64_t>(row); strides[1] = static_cast<cuuint64_t>(p->page_stride);
  }
  CUresult r = encode(km, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, const_cast<uint8_t*>(p->kbase), dims, strides, boxd, estr,
                      CU_TENSOR_MAP_INTERLEAVE_NONE, p->fp4 ? CU_TENSOR_MAP_SWIZZLE_NONE : CU_TENSOR_MAP_SWIZZLE_128B,
                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return detail::invalid(op, "cache expected to be describable by a tensor map (cuTensorMapEncodeTiled error %d)",
                           static_cast<int>(r));
  }
  p->warps = kWgThreads / 32;
  p->tile_states = s.tile;
  p->stages = stages;
  p->bulk = 0;
  p->q_f16 = 0;
  p->split = 1;
  plan->use = true;
  return Status::Ok();
}

}  // namespace cuda
}  // namespace dsattn
