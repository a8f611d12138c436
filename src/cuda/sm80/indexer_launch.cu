// Host launchers of the portable indexer: paged_mqa_logits, schedule_metadata, mqa_logits.
#include "cuda/sm80/indexer_launch.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>

#include "api/validate.h"
#include "common/indexer_work.h"
#include "cuda/common/cuda_check.cuh"
#include "cuda/common/indexer_schedule.h"
#include "cuda/cuda_ops.h"
#include "cuda/sm90/indexer_wgmma_launch.h"

namespace dsattn {
namespace cuda {

extern template struct IndexerKernelOps<IndexerFormat::kFp8, 32, LogitsEpilogue>;
extern template struct IndexerKernelOps<IndexerFormat::kFp8, 64, LogitsEpilogue>;
extern template struct IndexerKernelOps<IndexerFormat::kFp8, 128, LogitsEpilogue>;
extern template struct IndexerKernelOps<IndexerFormat::kMxfp4, 32, LogitsEpilogue>;
extern template struct IndexerKernelOps<IndexerFormat::kMxfp4, 64, LogitsEpilogue>;
extern template struct IndexerKernelOps<IndexerFormat::kMxfp4, 128, LogitsEpilogue>;
extern template struct WgmmaKernelOps<LogitsEpilogue>;

namespace {

// The states the block tables of a paged-decode call hold (0 for prefill): the kernel and tile size
// rules of plan_logits and plan_indexer_config go by them per SM. A call that scores a column chunk
// of a larger block table (the fused op's chunked route) counts the whole table's pages
// (IndexerParams::size_pages), so that it runs the kernel the whole call would.
int64_t block_table_states(const IndexerParams& p) {
  const int64_t pages = p.size_pages > 0 ? p.size_pages : p.max_pages;
  return p.work.mode == detail::IndexerMode::kPaged ? int64_t(p.work.groups) * pages * p.states_per_page : 0;
}

constexpr int kMaxStages = 6;

bool aligned(const void* ptr, int64_t a) { return (reinterpret_cast<uintptr_t>(ptr) % a) == 0; }

// Dispatch on (format, head dim) for the logits epilogue.
template <class Fn>
cudaError_t with_logits_ops(IndexerFormat f, int d, Fn&& fn) {
  if (f == IndexerFormat::kFp8) {
    if (d == 32) return fn(IndexerKernelOps<IndexerFormat::kFp8, 32, LogitsEpilogue>{});
    if (d == 64) return fn(IndexerKernelOps<IndexerFormat::kFp8, 64, LogitsEpilogue>{});
    if (d == 128) return fn(IndexerKernelOps<IndexerFormat::kFp8, 128, LogitsEpilogue>{});
  } else {
    if (d == 32) return fn(IndexerKernelOps<IndexerFormat::kMxfp4, 32, LogitsEpilogue>{});
    if (d == 64) return fn(IndexerKernelOps<IndexerFormat::kMxfp4, 64, LogitsEpilogue>{});
    if (d == 128) return fn(IndexerKernelOps<IndexerFormat::kMxfp4, 128, LogitsEpilogue>{});
  }
  return cudaErrorInvalidValue;
}

size_t logits_epi_smem(const IndexerParams& p) { return LogitsEpilogue::smem_bytes(p); }

struct LogitsPlan {
  IndexerParams p;
  IndexerConfig cfg;
  WgmmaPlan wg;  // wg.use: the Hopper kernel runs it (cfg unused)
  int partitions = 0;
  int grid = 0;  // partitions * p.split CTAs
  bool own_schedule = false;
  size_t workspace = 0;
};

// DSATTN_INDEXER_SCHEDULE=kernel: paged_mqa_logits computes its own schedule with the schedule
// kernel for one request too, and for several on the warp-specialized wgmma kernel, which
// otherwise computes its partitions itself (A/B against the schedule-free launch; tests switch it
// per call).
// The most groups (requests; varlen: rows) whose partitions a warp-specialized wgmma CTA computes itself
// (ws_inline_schedule: each of its threads sums the lengths of groups / threads of them); above,
// the schedule kernel runs.
constexpr int64_t kInlineScheduleMaxGroups = 16384;

bool schedule_kernel_always() {
  const char* e = std::getenv("DSATTN_INDEXER_SCHEDULE");
  return e != nullptr && std::strcmp(e, "kernel") == 0;
}

// Several requests without a caller schedule on the warp-specialized wgmma kernel: the CTAs
// compute their partitions themselves (kInlineScheduleDefault), unless DSATTN_INDEXER_SCHEDULE=
// kernel; DSATTN_INDEXER_SCHEDULE=inline turns it on where the default is off.
constexpr bool kInlineScheduleDefault = true;
bool inline_schedule_on() {
  if (schedule_kernel_always()) return false;
  const char* e = std::getenv("DSATTN_INDEXER_SCHEDULE");
  return (e != nullptr && std::strcmp(e, "inline") == 0) || kInlineScheduleDefault;
}

}  // namespace

// The mma.sync kernels' large calls (FP8 paged decode) run the warp-specialized kernel with
// mma.sync consumers: where it has code (sm_90a, sm_100 family builds) and the call is the portable
// path's (by default on sm_100; on sm_90 under DSATTN_INDEXER_KERNEL=portable, or mma-ws for any
// size), when the block tables hold at least kMmaWsStatesPerSm states per SM. Below that the
// portable kernel's smaller tiles are faster. H200, FP8, D = 128, H = 64, S = 64, us, mma-ws /
// portable kernel, re-measured after the mma-ws consumers' k-outer order (4959bf6), two rounds:
// 1 x 32K 7.9 / 6.7, 1 x 64K 10.4 / 9.5, 2 x 32K 10.4 / 9.5, 4 x 8K 8.2-8.3 / 8.3 (<= 496 states
// per SM), 8 x 8K 10.5-10.6 / 11.0 (496), 1 x 128K 14.2 / 14.9, 4 x 32K 14.1 / 14.8-14.9, 16 x 8K
// 14.3-14.5 / 16.2-16.3 (993), 32 x 32K 54.1-54.9 / 77.2, 128 x 32K 187.5-189.8 / 279-281
// (BENCHMARKS.md, 2026-12-04).
// The fused op (paged_mqa_topk) scores its streaming route on the same kernel by the same rule
// (with its top-k epilogue), so that both ops compute every score alike.
bool logits_mma_ws_rule(const IndexerParams& p, IndexerFormat fmt, int D, int sms) {
  constexpr int64_t kMmaWsStatesPerSm = 768;
  const IndexerKernelChoice choice = indexer_kernel_choice();
  int major = 0, minor = 0;
  if (!device_capability("indexer", &major, &minor).ok()) major = 0;  // device_limits reports it
  const bool large = block_table_states(p) >= kMmaWsStatesPerSm * sms;
  const bool portable_call =
      choice == IndexerKernelChoice::kPortable || (choice == IndexerKernelChoice::kAuto && major == 10);
  return p.work.mode == detail::IndexerMode::kPaged && fmt == IndexerFormat::kFp8 && D == 128 &&
         (choice == IndexerKernelChoice::kMmaWs || (portable_call && large));
}

Status plan_mma_ws(const char* op, IndexerParams* p, IndexerFormat fmt, int D, int sms, int budget,
                   size_t (*epi_smem)(const IndexerParams&), bool topk, WgmmaPlan* wg) {
  if (!logits_mma_ws_rule(*p, fmt, D, sms)) return Status::Ok();
  const IndexerParams saved = *p;
  DSATTN_RETURN_IF_ERROR(plan_wgmma_indexer(op, p, budget, epi_smem, wg, /*mma_ws=*/true));
  if (wg->use) plan_wgmma_ws(*p, budget, topk, wg, false, /*mma=*/true);
  if (wg->ws_stages == 0) {  // no code for this device, or no ring fits: as if not asked
    *p = saved;
    *wg = WgmmaPlan{};
  }
  return Status::Ok();
}

namespace {

// Common planning for the logits ops: config, partitions, workspace.
Status plan_logits(const char* op, IndexerParams* p, IndexerFormat fmt, int D, const TensorView& schedule,
                   const Exec& ex, LogitsPlan* plan) {
  int sms = 0, optin = 0;
  DSATTN_RETURN_IF_ERROR(device_limits(op, ex, &sms, &optin));
  const int budget = ex.smem_budget_bytes > 0 ? std::min(ex.smem_budget_bytes, optin) : optin;
  // Both size rules below (the mma.sync consumers' kernel here, the warp-specialized wgmma kernel's
  // stage length further on) go by the block tables' states per SM.
  const int64_t cap_states = block_table_states(*p);
  // The mma.sync consumers' warp-specialized kernel where logits_mma_ws_rule says so.
  DSATTN_RETURN_IF_ERROR(plan_mma_ws(op, p, fmt, D, sms, budget, logits_epi_smem, /*topk=*/false, &plan->wg));
  if (!plan->wg.use) DSATTN_RETURN_IF_ERROR(plan_wgmma_indexer(op, p, budget, logits_epi_smem, &plan->wg));
  int occ = 0;
  if (plan->wg.use && !plan->wg.ws_mma) {
    plan_wgmma_ws(*p, budget, false, &plan->wg, false, false, cap_states / std::max(sms, 1));
  }
  if (plan->wg.ws_stages > 0) {
    occ = 1;  // one CTA per SM; its producer warp walks the partition in stage-sized tiles
    p->tile_states = plan->wg.ws_stage;
    p->stages = plan->wg.ws_stages;
  } else if (plan->wg.use) {
    const cudaError_t oe = WgmmaKernelOps<LogitsEpilogue>::occupancy(plan->wg, &occ);
    DSATTN_RETURN_IF_ERROR(cuda_status(oe, op, "cudaOccupancyMaxActiveBlocksPerMultiprocessor"));
  } else {
    DSATTN_RETURN_IF_ERROR(pick_indexer_config(op, p, budget, logits_epi_smem, &plan->cfg, /*warp_local=*/true, sms));
    const cudaError_t oe = with_logits_ops(fmt, D, [&](auto ops) { return ops.occupancy(*p, plan->cfg.smem, &occ); });
    DSATTN_RETURN_IF_ERROR(cuda_status(oe, op, "cudaOccupancyMaxActiveBlocksPerMultiprocessor"));
  }
  occ = std::max(1, std::min(occ, 4));
  if (schedule.defined()) {
    DSATTN_RETURN_IF_ERROR(check_caller_schedule(op, schedule, &plan->partitions));
    plan->own_schedule = false;
    plan->workspace = 0;
    // A caller schedule usually has one partition per SM: split each over several CTAs so that
    // every SM runs `occ` of them (all resident). DSATTN_INDEXER_SPLIT=k forces k (benchmark knob).
    p->split = std::max(1, sms * occ / std::max(1, plan->partitions));
  } else {
    plan->partitions = sms * occ;
    plan->own_schedule = true;
    plan->workspace = indexer_schedule_workspace(plan->partitions);
    p->split = 1;
  }
  if (const char* env = std::getenv("DSATTN_INDEXER_SPLIT")) {
    const int k = std::atoi(env);
    if (k >= 1 && k <= 8) p->split = k;
  }
  plan->grid = plan->partitions * p->split;
  return Status::Ok();
}

// trigger_next: see paged_mqa_logits (the warp-specialized kernels only).
Status launch_logits(const char* op, const LogitsPlan& plan, const IndexerParams& p, IndexerFormat fmt, int D,
                     cudaStream_t stream, bool trigger_next = false) {
  if (plan.wg.ws_stages > 0) {
    return cuda_status(launch_indexer_ws(plan.wg, p, plan.grid, stream, trigger_next), op, "indexer_ws_kernel launch");
  }
  if (plan.wg.use) {
    return cuda_status(WgmmaKernelOps<LogitsEpilogue>::launch(plan.wg, p, LogitsEpilogue{}, plan.grid, stream), op,
                       "indexer_wgmma_kernel launch");
  }
  const cudaError_t e = with_logits_ops(fmt, D, [&](auto ops) {
    return ops.launch(p, LogitsEpilogue{}, plan.grid, plan.cfg.smem, stream);
  });
  return cuda_status(e, op, "indexer_kernel launch");
}

}  // namespace

size_t indexer_schedule_workspace(int partitions) {
  return idx_align16(static_cast<size_t>(detail::indexer_meta_size(partitions)) * sizeof(int32_t));
}

Status device_limits(const char* op, const Exec& ex, int* sms, int* smem_optin) {
  int dev = 0;
  DSATTN_CUDA_RETURN(op, cudaGetDevice(&dev));
  DSATTN_CUDA_RETURN(op, cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev));
  *sms = sm_share(ex.stream, *sms);
  DSATTN_CUDA_RETURN(op, cudaDeviceGetAttribute(smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return Status::Ok();
}

Status pick_indexer_config(const char* op, IndexerParams* p, int budget, size_t (*epi_smem)(const IndexerParams&),
                           IndexerConfig* cfg, bool warp_local, int sms) {
  IndexerDeviceInfo info;
  DSATTN_RETURN_IF_ERROR(device_capability(op, &info.major, &info.minor));
  info.sms = sms;
#if defined(DSATTN_SM90_NATIVE_FP8_MMA) && DSATTN_SM90_NATIVE_FP8_MMA
  if (info.major == 9) info.native_fp8 = 1;  // mma_fp8.cuh: this build's sm_90 code takes the native path
#endif
  return plan_indexer_config(op, p, info, budget, epi_smem, cfg, warp_local);
}

Status plan_indexer_config(const char* op, IndexerParams* p, const IndexerDeviceInfo& dev, int budget,
                           size_t (*epi_smem)(const IndexerParams&), IndexerConfig* cfg, bool warp_local) {
  // Q as f16 in shared memory on archs whose FP8 mma.sync is emulated (sm_80, sm_90, sm_100):
  // converted once per group instead of once per MMA. DSATTN_INDEXER_QF16=0 turns it off.
  const int major = dev.major, minor = dev.minor, sms = dev.sms;
  const bool native_fp8 = dev.native_fp8 >= 0 ? dev.native_fp8 != 0 : (major == 8 && minor == 9) || major >= 12;
  const char* qenv = std::getenv("DSATTN_INDEXER_QF16");
  const bool want_f16 = !p->fp4 && !native_fp8 && !(qenv && qenv[0] == '0');
  // Key copies (H200 measurements, BENCHMARKS.md): bulk copies (sm_90+, FP8, 16-byte aligned cache)
  // for prefill, where a tile is one contiguous 32 KB run (20.8 vs 22.0 ms at 4K x 64K); per-thread
  // cp.async with at most 3 stages for paged decode on sm_90 (128 x 32K: 427 us, vs 441 with bulk
  // copies at any stage count and 468 with cp.async at 6 stages; batch 1 is 0.6-1 us slower with
  // bulk copies). DSATTN_INDEXER_BULK=0 / 1 forces the copy path (bulk only where possible).
  const char* benv = std::getenv("DSATTN_INDEXER_BULK");
  const bool bulk_ok = major >= 9 && !p->fp4 && p->keys_aligned16;
  const bool bulk_want = (benv && (benv[0] == '0' || benv[0] == '1')) ? benv[0] == '1'
                                                                       : p->work.mode == detail::IndexerMode::kPrefill;
  const int bulk = bulk_ok && bulk_want ? 1 : 0;
  const int max_stages = (major == 9 && !p->fp4 && !bulk) ? 3 : kMaxStages;
  size_t smallest = SIZE_MAX;
  auto need_of = [&](const IndexerParams& q) {
    return idx_smem_layout(q.fp4 != 0, q.head_dim, q.work.rows_per_group, q.heads_padded, q.tile_states, q.stages,
                           epi_smem(q), q.q_f16 != 0).total;
  };
  // The fitting configuration of `warps` warps and `tile_states`-state tiles with the most stages
  // in [min_stages, top] (top: max_stages unless given), or none.
  auto fit = [&](int warps, int tile_states, int min_stages, int q_f16, int top = 0) {
    IndexerParams q = *p;
    q.warps = warps;
    q.tile_states = tile_states;
    q.q_f16 = q_f16;
    for (int stages = top > 0 ? top : max_stages; stages >= min_stages; --stages) {
      q.stages = stages;
      const size_t need = need_of(q);
      smallest = std::min(smallest, need);
      if (need <= static_cast<size_t>(budget)) return IndexerConfig{warps, tile_states, stages, need};
    }
    return IndexerConfig{};
  };
  // Small calls on sm_90's FP8 cp.async pipeline (warp-local, more than one and at most
  // kFewTilesPerSm 256-state tiles per SM in the block tables: one request of 64K or 128K states,
  // 2 x 32K, 4 x 32K) take 2 stages rather than the cap of 3. H200, portable kernel, one call,
  // 2 / 3 stages, us: 1 x 64K 9.5-9.6 / 9.8, 1 x 128K 14.8-15.0 / 15.3-15.4, 2 x 32K 9.4 / 9.8,
  // 4 x 32K 14.8-14.9 / 15.3, 1 x 64K H 32 8.2 / 8.5-8.6, next_n 2 level or better; but 1 x 32K
  // (one tile per SM) 6.9-7.0 / 6.7-6.8, so calls of one tile per SM or less keep 3 (BENCHMARKS.md,
  // 2026-12-03). Other archs keep the most stages that fit: not measured there.
  // (Prefill holds 0 states: neither this rule nor the large-call rule below takes it.)
  const int64_t cap_states = block_table_states(*p);
  constexpr int64_t kFewTilesPerSm = 4;
  const bool few_tiles = warp_local && max_stages == 3 && sms > 0 && cap_states > int64_t(256) * sms &&
                         cap_states <= kFewTilesPerSm * 256 * sms;
  auto search = [&](int q_f16, IndexerConfig* best, IndexerConfig* fallback) {
    // Tuning knob for benchmarks: DSATTN_INDEXER_TILE="warps:stages" forces a shape when it fits.
    if (const char* env = std::getenv("DSATTN_INDEXER_TILE")) {
      int w = 0, st = 0;
      if (std::sscanf(env, "%d:%d", &w, &st) == 2 && (w == 2 || w == 4 || w == 8) && st >= 2 && st <= kMaxStages) {
        const IndexerConfig c = fit(w, w * 32, st, q_f16, st);
        if (c.warps) {
          *best = c;
          return;
        }
      }
    }
    // The largest tile with >= 3 stages, else the first that fits with 2. The warp-local
    // pipeline takes the largest tile that fits with 2: its warps each keep their own tile in
    // flight, so 8 warps x 2 stages have the bytes in flight of 4 warps x 3 stages and twice the
    // warps to overlap one's MMAs with another's loads and stores. H200, portable kernel under
    // sm_120's 99 KiB (8 x 32 x 2 against 4 x 32 x 3, f16 Q, us): 32 x 32K 91.5-92.7 / 99.9-100.7,
    // 128 x 8K 91.3-92.0 / 100.0-100.4, 128 x 32K 328.0-329.2 / 360.8-363.1, 1 x 8K 6.3-6.4 /
    // 7.6-7.7, 1 x 64K 10.3-10.4 / 11.2.
    const int min_best = warp_local && !bulk ? 2 : 3;
    for (int warps : {8, 4, 2}) {
      const IndexerConfig c = fit(warps, warps * 32, 2, q_f16, few_tiles ? 2 : 0);
      if (!c.warps) continue;
      if (c.stages >= min_best && best->warps == 0) *best = c;
      if (fallback->warps == 0) *fallback = c;
    }
  };
  // Large calls on the warp-local pipeline (logits epilogue, cp.async keys): where the block tables
  // hold at least kLargeTilesPerSm 512-state tiles per SM, 12 warps x 32 states (384-state tiles,
  // a kernel built for 384 threads: 3 warps per scheduler instead of 2 overlap one warp's copies,
  // conversions and stores with another's MMAs) with the most stages that fit (>= 2). H200,
  // portable kernel, against 8 x 64 (two halves of 32 per warp): 32 x 32K 89.0-89.3 -> 86.5-86.7
  // us, 128 x 32K 317.5-319.7 -> 300.3-302.4, 256 x 8K 168.1-169.1 -> 161.6-161.7 (3 stages each);
  // under sm_80's 163 KiB, where 12 x 32 fits with 2 stages and 8 x 64 with 2 (the previous rule
  // wanted 3 for 12 x 32): 32 x 32K 90.0-90.2 -> 85.6-85.8, 128 x 8K 91.2-92.4 -> 86.0-86.1, 128 x
  // 32K 317.8-322.1 -> 301.1-302.3. 8 x 64 (smem above 12 x 32's at the same stages, so only
  // reached where a knob asks for 8 warps) stays for DSATTN_INDEXER_WARPS=8 and
  // DSATTN_INDEXER_WARP_STATES=64. 12 x 64 (2 stages) was slower (32 x 32K 100 us). Fewer, longer
  // tiles leave SMs idle on small calls (1 x 8K: 6.3 us with 8 x 32, 7.1 with 12 x 32, 8.0 with
  // 8 x 64), which keep 8 warps x 32 states. Benchmark knobs, where the shape fits:
  // DSATTN_INDEXER_WARPS=12 forces 12 x 32 on any such call, =8 keeps 8 warps;
  // DSATTN_INDEXER_WARP_STATES=64 forces 8 x 64, =32 keeps 32 states per warp.
  constexpr int64_t kLargeTilesPerSm = 8;
  const char* wsenv = std::getenv("DSATTN_INDEXER_WARP_STATES");
  const bool ws32 = wsenv && std::strcmp(wsenv, "32") == 0, ws64 = wsenv && std::strcmp(wsenv, "64") == 0;
  const char* wenv = std::getenv("DSATTN_INDEXER_WARPS");
  const bool w8 = wenv && std::strcmp(wenv, "8") == 0, w12 = wenv && std::strcmp(wenv, "12") == 0;
  const bool shaped = warp_local && !bulk && std::getenv("DSATTN_INDEXER_TILE") == nullptr;
  const bool large = sms > 0 && cap_states >= kLargeTilesPerSm * 512 * sms;
  const int qf = want_f16 ? 1 : 0;
  IndexerConfig best{}, fallback{};
  if (shaped) {
    if (w12) {
      best = fit(12, 12 * 32, 2, qf);
    } else if (ws64) {
      best = fit(8, 8 * 64, 2, qf);
    } else if (large) {
      if (!w8) best = fit(12, 12 * 32, 2, qf);
      if (!best.warps && !ws32) best = fit(8, 8 * 64, 2, qf);
    }
  }
  const bool large_shape = best.warps != 0;
  int q_f16 = large_shape ? qf : 0;
  bool e4m3_searched = false;  // best / fallback already hold search(0)'s result
  if (want_f16 && !large_shape) {
    search(1, &best, &fallback);
    if (best.warps) q_f16 = 1;
    // f16 Q doubles Q's shared memory. Where that leaves fewer warps than an SM has sub-partitions
    // (4) and E4M3 Q gets more, E4M3 Q (converted in the MMA loop) wins: H200, portable kernel,
    // next_n = 8 under sm_80's 163 KiB, f16 2 x 32 x 3 against E4M3 8 x 32 x 2 (us): 1 x 8K
    // 33.1 / 19.2-19.3, 32 x 8K 301.9-302.4 / 128.9-129.3. With 4 or more warps f16 Q stays:
    // at the same shape it is faster (next_n = 8, device maximum, 8 x 32 x 2 f16 against 8 x 32 x 3
    // E4M3: 32 x 8K 113.0-113.3 / 128.1-128.3), and 4 f16 warps against 8 E4M3 ones were mixed
    // (99 KiB, next_n = 2: 32 x 32K 144.2-144.8 / 150.1-150.9, 1 x 32K 11.0 / 9.8).
    if (q_f16 && best.warps < 4) {
      IndexerConfig b8{}, f8{};
      search(0, &b8, &f8);
      if ((b8.warps ? b8.warps : f8.warps) > best.warps) {
        q_f16 = 0;
        best = b8;
        fallback = f8;
        e4m3_searched = true;
      }
    }
  }
  if (!q_f16 && !large_shape && !e4m3_searched) {
    best = IndexerConfig{};
    fallback = IndexerConfig{};
    search(0, &best, &fallback);
  }
  const IndexerConfig c = best.warps ? best : fallback;
  if (c.warps == 0) {
    return detail::not_implemented(op, "shared memory budget expected >= %zu bytes for %d rows per group x %d heads x "
                                   "head dim %d, got %d bytes", smallest, p->work.rows_per_group, p->heads,
                                   p->head_dim, budget);
  }
  *cfg = c;
  p->warps = c.warps;
  p->tile_states = c.tile_states;
  p->stages = c.stages;
  p->q_f16 = q_f16;
  p->split = 1;
  p->bulk = bulk;
  return Status::Ok();
}

Status check_caller_schedule(const char* op, const TensorView& schedule, int* partitions) {
  DSATTN_RETURN_IF_ERROR(detail::check_present(op, "schedule", schedule));
  DSATTN_RETURN_IF_ERROR(detail::check_dtype(op, "schedule", schedule, DType::kI32));
  DSATTN_RETURN_IF_ERROR(detail::check_contiguous(op, "schedule", schedule));
  const int64_t n = schedule.numel();
  if (schedule.ndim != 1 || n < detail::indexer_meta_size(1) || (n - detail::kIndexerMetaHeader) % 2 != 0) {
    return detail::invalid(op, "schedule shape expected [schedule_metadata_size(num_sms)], got %s",
                           shape_str(schedule).c_str());
  }
  *partitions = static_cast<int>((n - detail::kIndexerMetaHeader) / 2 - 1);
  return Status::Ok();
}

Status fill_paged_indexer_params(const char* op, const PagedIndexerArgs& a, const detail::PagedIndexerProblem& pb,
                                 IndexerParams* p) {
  const IndexerCache& c = a.cache;
  const bool fp4 = c.format == IndexerFormat::kMxfp4;
  p->work = detail::paged_indexer_work(pb, a.context_lens, a.row_request, pb.batch);
  const detail::IndexerWork& w = p->work;
  p->heads = pb.heads;
  p->heads_padded = (pb.heads + 15) / 16 * 16;
  p->head_dim = pb.head_dim;
  p->fp4 = fp4 ? 1 : 0;
  // q [B, N, H, Dq] or varlen [R, H, Dq] (u8 / f8: element strides are byte strides).
  const TensorView& q = a.q;
  p->q = static_cast<const uint8_t*>(q.data);
  if (pb.varlen) {
    p->q_sg = q.strides[0]; p->q_sr = 0; p->q_sh = q.strides[1];
  } else {
    p->q_sg = q.strides[0]; p->q_sr = q.strides[1]; p->q_sh = q.strides[2];
  }
  p->q_aligned16 = (aligned(q.data, 16) && p->q_sg % 16 == 0 && p->q_sr % 16 == 0 && p->q_sh % 16 == 0) ? 1 : 0;
  if (fp4) {
    const TensorView& qs = a.q_scales;
    p->q_scales = qs.ptr<const int32_t>();
    if (pb.varlen) {
      p->qs_sg = qs.strides[0]; p->qs_sr = 0; p->qs_sh = qs.strides[1];
    } else {
      p->qs_sg = qs.strides[0]; p->qs_sr = qs.strides[1]; p->qs_sh = qs.strides[2];
    }
  }
  // weights [R, H]: row r = g * rows_per_group + j.
  p->w = a.weights.ptr<const float>();
  p->w_sr = a.weights.strides[0];
  p->w_sg = p->w_sr * w.rows_per_group;
  p->w_sh = a.weights.strides[1];
  // cache
  const int rb = fp4 ? pb.head_dim / 2 : pb.head_dim;
  p->kbase = static_cast<const uint8_t*>(c.pages.data);
  p->page_stride = c.page_stride_bytes;
  p->sbase = p->kbase + int64_t(pb.states_per_page) * rb;
  p->scale_page_stride = c.page_stride_bytes;
  set_states_per_page(p, pb.states_per_page);
  p->num_pages = pb.num_pages;
  if (!aligned(c.pages.data, 4) || c.page_stride_bytes % 4 != 0) {
    return detail::invalid(op, "cache pages expected 4-byte aligned base and page stride, got base %p, stride %lld",
                           c.pages.data, static_cast<long long>(c.page_stride_bytes));
  }
  p->keys_aligned16 = (aligned(c.pages.data, 16) && c.page_stride_bytes % 16 == 0) ? 1 : 0;
  p->keys_off32 = (p->keys_aligned16 && pb.num_pages * c.page_stride_bytes / 16 < int64_t(UINT32_MAX)) ? 1 : 0;
  p->block_table = a.block_table.ptr<const int32_t>();
  p->bt_s0 = a.block_table.strides[0];
  p->bt_s1 = a.block_table.strides[1];
  p->max_pages = pb.max_pages;
  p->size_pages = pb.size_pages;
  const int64_t page_limit = pb.max_pages * pb.states_per_page;
  p->state_limit = std::min<int64_t>(page_limit, INT32_MAX);
  return Status::Ok();
}

size_t paged_mqa_logits_workspace(const PagedMqaLogitsParams& a, const detail::PagedIndexerProblem& pb, const Exec& ex) {
  IndexerParams p;
  if (!fill_paged_indexer_params("paged_mqa_logits", a, pb, &p).ok()) return 0;
  LogitsPlan plan;
  if (!plan_logits("paged_mqa_logits", &p, a.cache.format, pb.head_dim, a.schedule, ex, &plan).ok()) return 0;
  return plan.workspace;
}

Status paged_mqa_logits(const PagedMqaLogitsParams& a, const detail::PagedIndexerProblem& pb, const Exec& ex,
                        bool trigger_next) {
  const char* op = "paged_mqa_logits";
  if (pb.rows == 0) return Status::Ok();
  IndexerParams p;
  DSATTN_RETURN_IF_ERROR(fill_paged_indexer_params(op, a, pb, &p));
  p.out = a.logits.data;
  p.out_s0 = a.logits.strides[0];
  p.out_width = a.logits.shape[1];
  p.out_bf16 = a.logits.dtype == DType::kBF16 ? 1 : 0;
  p.clean = a.clean ? 1 : 0;
  p.state_limit = std::min<int64_t>(p.state_limit, p.out_width);
  LogitsPlan plan;
  DSATTN_RETURN_IF_ERROR(plan_logits(op, &p, a.cache.format, pb.head_dim, a.schedule, ex, &plan));
  cudaStream_t stream = static_cast<cudaStream_t>(ex.stream);
  p.partitions = plan.partitions;
  if (plan.own_schedule) {
    DSATTN_RETURN_IF_ERROR(detail::check_workspace(op, ex, plan.workspace));
    if (p.work.groups == 1 && !schedule_kernel_always()) {
      // One request: the scoring kernel's CTAs find their partitions from its length themselves
      // (IdxCursor::init), the same boundaries the schedule kernel would write, so that kernel
      // and its launch stay off the critical path (batch-1 decode).
      p.meta = nullptr;
      if (ws_one_group_walk(plan.wg, p)) {
        p.partitions = 1;
        p.split = plan.grid;
      }
    } else if (plan.wg.ws_stages > 0 && !plan.wg.ws_mma && p.split == 1 &&
               p.work.groups <= kInlineScheduleMaxGroups && inline_schedule_on()) {
      // Several requests on the warp-specialized wgmma kernel: each CTA computes its own
      // partition's boundaries at its start (ws_inline_schedule), the same ones the schedule kernel
      // would write, so that kernel and the scoring kernel's wait for it leave the call. Not on the
      // mma.sync consumers' kernel (sm_100's default): there the same code cost ptxas ~90 more
      // bytes of spills per thread, unmeasured on its hardware.
      p.meta = nullptr;
      p.inline_schedule = 1;
      p.inline_cost = detail::indexer_group_cost();
    } else {
      int32_t* meta = static_cast<int32_t*>(ex.workspace);
      DSATTN_RETURN_IF_ERROR(cuda_status(
          launch_indexer_schedule(p.work, plan.partitions, meta, stream, nullptr, 0, detail::indexer_group_cost()), op,
          "indexer_schedule_kernel launch"));
      p.meta = meta;
    }
  } else {
    p.meta = a.schedule.ptr<const int32_t>();
  }
  return launch_logits(op, plan, p, a.cache.format, pb.head_dim, stream, trigger_next);
}

Status schedule_metadata(const ScheduleMetadataParams& a, const detail::PagedIndexerProblem& pb, const Exec& ex) {
  // The block table is not known here; the kernel checks row_request itself.
  const detail::IndexerWork w = detail::paged_indexer_work(pb, a.context_lens, a.row_request, INT64_MAX);
  const int partitions = static_cast<int>((a.metadata.numel() - detail::kIndexerMetaHeader) / 2 - 1);
  return cuda_status(launch_indexer_schedule(w, partitions, a.metadata.ptr<int32_t>(), static_cast<cudaStream_t>(ex.stream),
                                             nullptr, 0, detail::indexer_group_cost()),
                     "schedule_metadata", "indexer_schedule_kernel launch");
}

// ---------------------------------------------------------------- mqa_logits (prefill)
namespace {

Status fill_prefill_params(const char* op, const MqaLogitsParams& a, const detail::MqaProblem& pb, IndexerParams* p) {
  const bool fp4 = a.format == IndexerFormat::kMxfp4;
  const int rb = fp4 ? pb.head_dim / 2 : pb.head_dim;
  detail::IndexerWork& w = p->work;
  w.mode = detail::IndexerMode::kPrefill;
  w.rows_per_group = detail::kIndexerMaxGroupRows;
  w.rows = pb.rows;
  w.groups = (pb.rows + w.rows_per_group - 1) / w.rows_per_group;
  w.key_limit = pb.keys;
  w.compressed = a.compressed ? 1 : 0;
  w.ks = a.ks.ptr<const int32_t>();
  w.ke = a.ke.ptr<const int32_t>();
  w.ks_s0 = a.ks.strides[0];
  w.ke_s0 = a.ke.strides[0];
  p->heads = pb.heads;
  p->heads_padded = (pb.heads + 15) / 16 * 16;
  p->head_dim = pb.head_dim;
  p->fp4 = fp4 ? 1 : 0;
  p->q = static_cast<const uint8_t*>(a.q.data);
  p->q_sr = a.q.strides[0];
  p->q_sg = p->q_sr * w.rows_per_group;
  p->q_sh = a.q.strides[1];
  p->q_aligned16 = (aligned(a.q.data, 16) && p->q_sr % 16 == 0 && p->q_sh % 16 == 0) ? 1 : 0;
  if (fp4) {
    p->q_scales = a.q_scales.ptr<const int32_t>();
    p->qs_sr = a.q_scales.strides[0];
    p->qs_sg = p->qs_sr * w.rows_per_group;
    p->qs_sh = a.q_scales.strides[1];
  }
  p->w = a.weights.ptr<const float>();
  p->w_sr = a.weights.strides[0];
  p->w_sg = p->w_sr * w.rows_per_group;
  p->w_sh = a.weights.strides[1];
  if (pb.keys > 1 && a.k.strides[0] != rb) {
    return detail::invalid(op, "k row stride expected %d (contiguous rows), got %lld", rb,
                           static_cast<long long>(a.k.strides[0]));
  }
  if (pb.keys > 1 && a.k_scales.strides[0] != 1) {
    return detail::invalid(op, "k_scales stride expected 1, got %lld", static_cast<long long>(a.k_scales.strides[0]));
  }
  if (!aligned(a.k.data, 4) || !aligned(a.k_scales.data, 4)) {
    return detail::invalid(op, "k and k_scales expected 4-byte aligned data pointers");
  }
  p->kbase = static_cast<const uint8_t*>(a.k.data);
  p->sbase = static_cast<const uint8_t*>(a.k_scales.data);
  p->page_stride = 0;
  p->scale_page_stride = 0;
  set_states_per_page(p, 1 << 30);
  p->num_pages = pb.keys > 0 ? 1 : 0;
  p->keys_aligned16 = aligned(a.k.data, 16) ? 1 : 0;
  p->keys_off32 = (p->keys_aligned16 && pb.keys * int64_t(rb) / 16 < int64_t(UINT32_MAX)) ? 1 : 0;
  p->block_table = nullptr;
  p->max_pages = 1;
  p->state_limit = pb.keys;
  p->out = a.logits.data;
  p->out_s0 = a.logits.strides[0];
  p->out_width = a.logits.shape[1];
  p->out_bf16 = a.logits.dtype == DType::kBF16 ? 1 : 0;
  p->clean = a.clean ? 1 : 0;
  return Status::Ok();
}

}  // namespace

size_t mqa_logits_workspace(const MqaLogitsParams& a, const detail::MqaProblem& pb, const Exec& ex) {
  IndexerParams p;
  if (!fill_prefill_params("mqa_logits", a, pb, &p).ok()) return 0;
  LogitsPlan plan;
  if (!plan_logits("mqa_logits", &p, a.format, pb.head_dim, TensorView{}, ex, &plan).ok()) return 0;
  return plan.workspace;
}

Status mqa_logits(const MqaLogitsParams& a, const detail::MqaProblem& pb, const Exec& ex) {
  const char* op = "mqa_logits";
  if (pb.rows == 0) return Status::Ok();
  IndexerParams p;
  DSATTN_RETURN_IF_ERROR(fill_prefill_params(op, a, pb, &p));
  LogitsPlan plan;
  DSATTN_RETURN_IF_ERROR(plan_logits(op, &p, a.format, pb.head_dim, TensorView{}, ex, &plan));
  DSATTN_RETURN_IF_ERROR(detail::check_workspace(op, ex, plan.workspace));
  cudaStream_t stream = static_cast<cudaStream_t>(ex.stream);
  int32_t* meta = static_cast<int32_t*>(ex.workspace);
  DSATTN_RETURN_IF_ERROR(cuda_status(launch_indexer_schedule(p.work, plan.partitions, meta, stream), op,
                                     "indexer_schedule_kernel launch"));
  p.meta = meta;
  return launch_logits(op, plan, p, a.format, pb.head_dim, stream);
}

}  // namespace cuda
}  // namespace dsattn
