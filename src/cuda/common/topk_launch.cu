// dsattn::topk on CUDA (SPEC §3.3): plan + launches of the radix top-k in topk_grid.cuh.
// No host synchronization, no allocation: safe inside CUDA graphs (workspace from Exec).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "api/validate.h"
#include "cuda/common/topk_cluster.cuh"
#include "cuda/common/topk_filter.cuh"
#include "cuda/common/topk_launch.cuh"
#include "cuda/common/topk_sampled.cuh"
#include "cuda/cuda_ops.h"

namespace dsattn {
namespace cuda {

using namespace topk_detail;

namespace {
// TopkDeviceLimits::cluster_slots of device `dev` for `stream` (whose SMs number `sms`), asked of
// the driver once per (device, SM count) and kept: every instantiation of topk_cluster_kernel is
// alone on its SM (1,024 threads), so any of them answers for all. A query that fails leaves 0
// (unknown). Safe inside a CUDA-graph capture (BENCHMARKS.md, 2026-12-06 10:48).
void cluster_slots(int dev, void* stream, int sms, int* slots) {
  struct Entry {
    int dev = -1, sms = 0;
    int slots[9] = {};
  };
  static std::mutex mu;
  static std::vector<Entry> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const Entry& e : cache) {
      if (e.dev == dev && e.sms == sms) {
        std::copy(e.slots, e.slots + 9, slots);
        return;
      }
    }
  }
  Entry e;
  e.dev = dev;
  e.sms = sms;
  auto kern = topk_cluster_kernel<float, kClusterV, false, true, true>;
  if (raise_dynamic_smem(kern, kClusterKernelSmemBytes) == cudaSuccess) {
    for (int c = 2; c <= kClusterMaxCtas; ++c) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(static_cast<unsigned>(c));
      cfg.blockDim = dim3(kTopkThreads);
      cfg.dynamicSmemBytes = kClusterKernelSmemBytes;
      cfg.stream = static_cast<cudaStream_t>(stream);
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = static_cast<unsigned>(c);
      attr[0].val.clusterDim.y = 1;
      attr[0].val.clusterDim.z = 1;
      cfg.attrs = attr;
      cfg.numAttrs = 1;
      int n = 0;
      if (cudaOccupancyMaxActiveClusters(&n, kern, &cfg) == cudaSuccess && n > 0) e.slots[c] = n;
    }
  }
  cudaGetLastError();  // a failed query is not the op's error
  std::copy(e.slots, e.slots + 9, slots);
  std::lock_guard<std::mutex> lock(mu);
  cache.push_back(e);
}
}  // namespace
static_assert(kClusterMaxCtas == 8, "TopkDeviceLimits::cluster_slots holds c = 2 .. 8");

Status topk_device_limits(const Exec& ex, TopkDeviceLimits* out) {
  int dev = 0;
  DSATTN_CUDA_RETURN("topk", cudaGetDevice(&dev));
  DSATTN_CUDA_RETURN("topk", cudaDeviceGetAttribute(&out->num_sms, cudaDevAttrMultiProcessorCount, dev));
  out->num_sms = sm_share(ex.stream, out->num_sms);  // a green context's share
  DSATTN_CUDA_RETURN("topk", cudaDeviceGetAttribute(&out->smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  int cluster = 0;
  DSATTN_CUDA_RETURN("topk", cudaDeviceGetAttribute(&cluster, cudaDevAttrClusterLaunch, dev));
  out->cluster = cluster != 0;
  if (out->cluster) cluster_slots(dev, ex.stream, out->num_sms, out->cluster_slots);
  // Room for the kernels' static shared memory (TopkShared) and the runtime's reserve.
  out->smem_max -= 1024;
  if (ex.smem_budget_bytes > 0) out->smem_max = std::min(out->smem_max, ex.smem_budget_bytes - 1024);
  return Status::Ok();
}

TopkTuning& topk_tuning() {
  static TopkTuning t;
  return t;
}

size_t topk_smem_bytes(int n_keys, int k_pad, int m_cap) {
  return (static_cast<size_t>(n_keys) + kKeyPad + region_words(k_pad, m_cap)) * 4;
}

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

Status plan_levels(int64_t rows, int cand_n, TopkPlan* plan) {
  int64_t n = cand_n;
  plan->buf_words[0] = static_cast<size_t>(rows * n);
  plan->levels = 0;
  while (n > plan->cap) {
    if (plan->levels == TopkPlan::kMaxLevels) {
      return detail::not_implemented("topk", "%lld candidates per row need more than %d merge levels",
                                      static_cast<long long>(cand_n), TopkPlan::kMaxLevels);
    }
    const int l = plan->levels++;
    const int fan_n = (plan->cap / plan->kc) * plan->kc;
    const int64_t out_chunks = ceil_div(n, fan_n);
    if (out_chunks > 65535) {
      return detail::not_implemented("topk", "rows of %lld candidates are too long", static_cast<long long>(n));
    }
    plan->level_in_n[l] = static_cast<int>(n);
    plan->level_fan_n[l] = fan_n;
    plan->level_out_chunks[l] = static_cast<int>(out_chunks);
    plan->smem_merge[l] = topk_smem_bytes(fan_n, plan->k_pad, plan->m_cap);
    n = out_chunks * plan->kc;
    size_t& w = plan->buf_words[(l + 1) & 1];
    w = std::max(w, static_cast<size_t>(rows * n));
  }
  plan->final_n = static_cast<int>(n);
  plan->smem_final = topk_smem_bytes(plan->final_n, plan->k_pad, plan->m_cap);
  plan->workspace_bytes = topk_buffers_bytes(*plan);
  return Status::Ok();
}

Status plan_common(int k, const TopkDeviceLimits& lim, TopkPlan* plan) {
  if (k < 1 || k > kMaxK) return detail::not_implemented("topk", "k expected 1..%d on CUDA, got %d", kMaxK, k);
  *plan = TopkPlan();
  plan->k = k;
  plan->kc = (k + 3) & ~3;
  plan->k_pad = next_pow2(k);
  // The mlist needs its own shared memory; drop it when the key capacity would get too small.
  auto cap_for = [&](int m_cap) { return ((lim.smem_max / 4 - region_words(plan->k_pad, m_cap) - kKeyPad) / 256) * 256; };
  plan->m_cap = mlist_cap(plan->k_pad);
  plan->cap = cap_for(plan->m_cap);
  if (plan->cap < 8 * plan->kc) {
    plan->m_cap = 0;
    plan->cap = cap_for(0);
  }
  if (plan->cap < 4 * plan->kc) {
    return detail::not_implemented("topk", "k = %d needs more shared memory than the %d bytes available", k,
                                   lim.smem_max);
  }
  return Status::Ok();
}
// Threshold-filter plan (topk_filter.cuh). False (plan unchanged) when it does not apply.
bool plan_filter(int64_t rows, int64_t W, const TopkDeviceLimits& lim, TopkPlan* plan) {
  // Tiles of 512 x per states: about 4 CTAs of 512 threads per SM over the whole problem, at most
  // 8 states per thread.
  const int64_t per = std::min<int64_t>(kFilterMaxPer, std::max<int64_t>(1, ceil_div(rows * W, int64_t(kFilterThreads) * 4 * lim.num_sms)));
  const int64_t tiles = ceil_div(W, kFilterThreads * per);
  if (tiles > 65535) return false;
  // Candidates the final kernel holds: up to 8192 (4k for k > 2048), as the shared memory allows.
  const int64_t fit = ((lim.smem_max / 4 - region_words(plan->k_pad, plan->m_cap) - 2 * kFilterBatch - 32) / 2) / 256 * 256;
  const int64_t mcap = std::min<int64_t>(fit, std::max<int64_t>(4 * plan->kc, 8192));
  if (mcap < 2 * plan->kc) return false;
  auto al = [](size_t v) { return align_up(v, 256); };
  const size_t R = static_cast<size_t>(rows);
  const bool digit2 = W >= 262144;
  size_t off = al(R * kBins1 * 4);
  plan->f_off_ghist2 = off;
  if (digit2) off += al(R * kBins2 * 4);
  plan->f_off_counters = off;
  off += al(R * 4 * 4);
  plan->f_zero_bytes = off;
  plan->f_off_rec = off;
  off += al(R * kRecWords * 4);
  plan->f_off_tile_off = off;
  off += al(R * static_cast<size_t>(tiles) * 4);
  plan->f_off_tile_cnt = off;
  off += al(R * static_cast<size_t>(tiles) * 4);
  plan->f_off_cand_key = off;
  off += al(R * static_cast<size_t>(mcap) * 4);
  plan->f_off_cand_idx = off;
  off += al(R * static_cast<size_t>(mcap) * 4);
  if (off > (size_t(256) << 20)) return false;  // many rows: the direct / split plans need no such buffers
  plan->filter = true;
  plan->direct = false;
  plan->f_per = static_cast<int>(per);
  plan->f_tiles = static_cast<int>(tiles);
  plan->f_mcap = static_cast<int>(mcap);
  plan->f_digit2 = digit2;
  plan->smem_filter_final = filter_final_smem_bytes(plan->f_mcap, plan->k_pad, plan->m_cap);
  plan->workspace_bytes = off;
  return true;
}

}  // namespace

Status plan_topk_merge(int64_t rows, int cand_n, int k, const TopkDeviceLimits& lim, TopkPlan* plan) {
  DSATTN_RETURN_IF_ERROR(plan_common(k, lim, plan));
  plan->direct = false;
  return plan_levels(rows, cand_n, plan);
}

Status plan_topk(int64_t rows, int64_t width, int k, const TopkDeviceLimits& lim, TopkPlan* plan, bool rows_in_l2) {
  DSATTN_RETURN_IF_ERROR(plan_common(k, lim, plan));
  const int64_t W = std::max<int64_t>(width, 0);
  const TopkTuning& tune = topk_tuning();
  if (tune.filter_min_width > 0 && rows > 0 && W >= tune.filter_min_width && W > 2 * int64_t(plan->kc) &&
      (tune.filter_max_rows <= 0 || rows <= tune.filter_max_rows) && plan_filter(rows, W, lim, plan)) {
    return Status::Ok();
  }
  const int64_t small_max = std::min<int64_t>(tune.small_max_width, int64_t(kSmallMaxV) * kTopkThreads);
  // 4 keys per thread (twice the CTAs) where that still fits a cluster and the call's CTA budget,
  // and where those clusters all run at once (TopkDeviceLimits::cluster_slots): else 8 keys per
  // thread in half the CTAs. H100, a green context of 72 SMs, `bench topk --cold --sms 66`, us,
  // before -> after: 10 x 32K 22.7 -> 13.9 (10 clusters of 8, 9 at once -> 10 of 4), 12 x 32K
  // 23.7-23.8 -> 14.9, 20 x 16K 21.8 -> 14.3. Not a reason to leave the cluster kernel: where even 8
  // keys per thread would take two waves, they still beat the split plan (10 x 64K 25.4-25.5
  // against 32.4-32.5, 10 x 40000 15.3-15.4 against 24.6-24.8; BENCHMARKS.md, 2026-12-06 10:12).
  const int64_t span4 = int64_t(kClusterV4) * kTopkThreads;
  const bool v4 = W <= tune.cluster_v4_max_width && W <= kClusterMaxCtas * span4 &&
                  rows * ceil_div(W, span4) <= tune.cluster_max_ctas &&
                  topk_cluster_one_wave(lim, rows, ceil_div(W, span4));
  const int cluster_v = v4 ? kClusterV4 : kClusterV;
  const int64_t cluster_span = int64_t(cluster_v) * kTopkThreads;
  const int64_t cluster_c = ceil_div(W, cluster_span);
  // Past cluster_max_ctas, a call of fewer rows than the sampled kernel takes (which would take the
  // split plan instead) still runs the cluster kernel where its clusters all run at once (known
  // cluster_slots). H100, k = 2048, f32, cold code, us, split -> cluster: 13 x 64K 25.8-26.1 ->
  // 16.6-16.8 (104 CTAs), 15 x 64K 26.0-26.3 -> 16.9-17.2 (120); paged_mqa_topk 13 x 64K
  // 84.2-84.3 -> 74.5-74.6, 15 x 64K 91.6-93.0 -> 82.7-82.8. Where the sampled kernel takes the
  // call it stays (64 x 16K 13.7-13.9 against 15.7-16.1 in clusters of 2, 30 x 32K 15.5-15.7
  // against 16.1-16.4), and so do two waves (16 x 64K: 19.6-19.8 sampled, 25.9-26.1 clusters).
  const int slots = topk_cluster_slots(lim, cluster_c);
  const bool cluster_ctas = rows * cluster_c <= tune.cluster_max_ctas ||
                            (tune.cluster_max_ctas > 0 && rows < tune.sampled_min_rows && slots > 0 && rows <= slots);
  if (lim.cluster && rows > 0 && rows <= 65535 && W > small_max && W > int64_t(kClusterV) * kTopkThreads &&
      W <= kClusterMaxCtas * cluster_span && cluster_ctas && lim.smem_max >= static_cast<int>(kClusterKernelSmemBytes)) {
    plan->direct = false;
    plan->cluster = static_cast<int>(cluster_c);
    plan->small_v = cluster_v;
    plan->chunks = plan->cluster;
    plan->chunk_len = static_cast<int>(cluster_span);
    plan->smem_final = kClusterKernelSmemBytes;
    // The gather on rows of more than 4 CTAs, or when the call has several rows (TopkTuning).
    plan->cluster_gather = tune.cluster_gather && (plan->cluster > 4 || rows > 1);
    plan->workspace_bytes = 0;
    return Status::Ok();
  }
  const int64_t direct_max = tune.max_direct > 0 ? std::min(tune.max_direct, plan->cap) : plan->cap;
  int64_t C = std::max<int64_t>(1, ceil_div(W, direct_max));
  // Few rows: split each over several CTAs (chunks of at least min_chunk positions) to fill the SMs.
  const int64_t min_chunk = std::max<int64_t>(4 * plan->kc, tune.min_chunk);
  if (rows > 0 && rows * C < lim.num_sms / std::max(1, tune.fill_div) && W >= 2 * min_chunk) {
    C = std::max(C, std::min(ceil_div(lim.num_sms, rows), W / min_chunk));
  }
  const int64_t chunk_len = std::max<int64_t>(8, (ceil_div(W, C) + 7) & ~int64_t(7));
  C = std::max<int64_t>(1, ceil_div(W, chunk_len));
  if (C > 65535) return detail::not_implemented("topk", "rows of %lld are too long", static_cast<long long>(W));
  // Rows the split plan would break into chunks: one CTA per row with a sampled threshold instead
  // (reads each row once, no candidate buffers, no merge launch), when there are enough of them:
  // sampled_min_rows of them up to 64K positions, sampled_min_rows_wide per 64K positions beyond
  // (one CTA's time grows with its row).
  const int64_t min_rows = W <= 65536 ? int64_t(std::max(1, tune.sampled_min_rows))
                                      : int64_t(std::max(1, tune.sampled_min_rows_wide)) * ceil_div(W, 65536);
  if (C > 1 && tune.sampled_min_width > 0 && rows >= min_rows &&
      W >= tune.sampled_min_width && W >= int64_t(kSampledMinRatio) * plan->kc && W <= kSampledMaxWidth) {
    const int mcap = std::max(kSampledMinMcap, 4 * plan->kc);
    const size_t smem = sampled_smem_bytes(mcap, plan->k_pad);
    if (smem <= static_cast<size_t>(lim.smem_max)) {
      plan->direct = false;
      plan->sampled = true;
      plan->s_mcap = mcap;
      plan->s_window = tune.sampled_window;
      // Rows in L2 stream faster without loads a tile ahead (H200, topk --no-flush, k = 2048: 64 x
      // 64K 20.2 against 21.6 us, 16 x 64K 19.9 / 21.3).
      plan->s_pipe = tune.sampled_pipe >= 0 ? tune.sampled_pipe != 0 : !rows_in_l2 && rows <= lim.num_sms;
      plan->s_l2_ahead =
          tune.sampled_l2_ahead >= 0 ? tune.sampled_l2_ahead : (rows_in_l2 ? 0 : (plan->s_pipe ? 2 : 1));
      plan->s_const_mcap = mcap == kSampledMinMcap && tune.sampled_fixed_mcap;
      plan->smem_final = smem;
      plan->workspace_bytes = 0;
      return Status::Ok();
    }
  }
  plan->chunks = static_cast<int>(C);
  plan->chunk_len = static_cast<int>(chunk_len);
  if (C == 1) {
    plan->direct = true;
    plan->workspace_bytes = 0;
    if (W > 0 && W <= small_max) {  // keys in registers: shared memory only for the selection
      plan->small_v = W <= 4 * kTopkThreads ? 4 : 8;
      plan->smem_final = static_cast<size_t>(small_words(plan->k_pad)) * 4;
    } else {
      plan->smem_final = topk_smem_bytes(static_cast<int>(W), plan->k_pad, plan->m_cap);
    }
    return Status::Ok();
  }
  plan->direct = false;
  plan->smem_chunk = topk_smem_bytes(plan->chunk_len, plan->k_pad, plan->m_cap);
  return plan_levels(rows, static_cast<int>(C * plan->kc), plan);
}

namespace {

template <typename T>
Status run_topk_filter(const TopkPlan& plan, int64_t rows, const T* logits, int64_t ld, const TopkRowBounds& rb,
                       bool sorted, const TopkOutputs& out, const Exec& ex, const char* op) {
  cudaStream_t st = static_cast<cudaStream_t>(ex.stream);
  char* ws = static_cast<char*>(ex.workspace);
  FilterWork w;
  w.ghist = reinterpret_cast<uint32_t*>(ws);
  w.ghist2 = reinterpret_cast<uint32_t*>(ws + plan.f_off_ghist2);
  w.counters = reinterpret_cast<int32_t*>(ws + plan.f_off_counters);
  w.rec = reinterpret_cast<int32_t*>(ws + plan.f_off_rec);
  w.tile_off = reinterpret_cast<int32_t*>(ws + plan.f_off_tile_off);
  w.tile_cnt = reinterpret_cast<int32_t*>(ws + plan.f_off_tile_cnt);
  w.cand_key = reinterpret_cast<uint32_t*>(ws + plan.f_off_cand_key);
  w.cand_idx = reinterpret_cast<int32_t*>(ws + plan.f_off_cand_idx);
  w.per = plan.f_per;
  w.tiles = plan.f_tiles;
  w.mcap = plan.f_mcap;
  DSATTN_CUDA_RETURN(op, cudaMemsetAsync(ws, 0, plan.f_zero_bytes, st));
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(plan.f_tiles));
  const dim3 block(kFilterThreads);
  DSATTN_RETURN_IF_ERROR(cuda_status(launch_pdl(topk_filter_hist_kernel<T>, grid, block, 0, st, LaunchOpt{}, logits, ld, rb,
                                                plan.k, w),
                                     op, "topk_filter_hist_kernel"));
  if (plan.f_digit2) {
    DSATTN_RETURN_IF_ERROR(cuda_status(launch_pdl(topk_filter_hist2_kernel<T>, grid, block, 0, st, LaunchOpt{}, logits, ld, rb,
                                                  plan.k, w),
                                       op, "topk_filter_hist2_kernel"));
  }
  DSATTN_RETURN_IF_ERROR(cuda_status(launch_pdl(topk_filter_kernel<T>, grid, block, 0, st, LaunchOpt{}, logits, ld, rb, plan.k, w),
                                     op, "topk_filter_kernel"));
  auto fin = topk_filter_final_kernel<T>;
  DSATTN_RETURN_IF_ERROR(set_smem(fin, plan.smem_filter_final, op));
  return cuda_status(launch_pdl(fin, dim3(static_cast<unsigned>(rows)), dim3(kTopkThreads), plan.smem_filter_final, st,
                                LaunchOpt{}, logits, ld, rb, plan.k, plan.k_pad, plan.m_cap, sorted, w, out),
                     op, "topk_filter_final_kernel");
}

// The small and cluster kernels for a call's sorted flag (and the cluster's push: more than 4 CTAs):
// template parameters, so that each kernel holds only the code it runs (topk_cluster_kernel).
template <typename T, int V>
auto small_kernel(bool sorted) {
  return sorted ? topk_small_kernel<T, V, true> : topk_small_kernel<T, V, false>;
}
// The sampled kernel for a plan's stream (s_pipe) and capacity (s_const_mcap), as above.
template <typename T, bool kWindow>
auto sampled_kernel(bool pipe, bool const_mcap) {
  return pipe ? (const_mcap ? topk_sampled_kernel<T, kWindow, true, true> : topk_sampled_kernel<T, kWindow, true, false>)
              : (const_mcap ? topk_sampled_kernel<T, kWindow, false, true> : topk_sampled_kernel<T, kWindow, false, false>);
}
// The cluster kernel's gather code (kGather) is in every push kernel (their calls take it by
// default; the kernel argument still turns it off), and in the pull kernels only for calls that
// take it: with it compiled in, single rows of 3-4 CTAs that skip it lost 0.2-0.5 us (H200).
template <typename T, int V>
auto cluster_kernel(bool sorted, bool push, bool gather) {
  if (push) return sorted ? topk_cluster_kernel<T, V, true, true, true> : topk_cluster_kernel<T, V, false, true, true>;
  if (gather) return sorted ? topk_cluster_kernel<T, V, true, false, true> : topk_cluster_kernel<T, V, false, false, true>;
  return sorted ? topk_cluster_kernel<T, V, true, false, false> : topk_cluster_kernel<T, V, false, false, false>;
}

// Every launch of a planned top-k over rows [rows, W] of `logits` (row stride ld) with the given
// row bounds and outputs; workspace and stream from ex. `op` names the calling op in errors.
template <typename T>
Status launch_topk_rows(const TopkPlan& plan, int64_t rows, const T* logits, int64_t ld, const TopkRowBounds& rb,
                        bool sorted, const TopkOutputs& out, const Exec& ex, const char* op) {
  cudaStream_t st = static_cast<cudaStream_t>(ex.stream);
  if (plan.filter) return run_topk_filter<T>(plan, rows, logits, ld, rb, sorted, out, ex, op);
  if (plan.sampled) {
    // bf16 keeps the radix digits: its keys' low 16 bits never vary, so only 1 in 16 of the
    // window's bins can hold keys (H200, k = 2048: 1024 x 64K 123.7 us radix, 126.0 window).
    auto kern = sampled_kernel<T, false>(plan.s_pipe, plan.s_const_mcap);
    if constexpr (sizeof(T) == 4) {
      if (plan.s_window) kern = sampled_kernel<T, true>(plan.s_pipe, plan.s_const_mcap);
    }
    DSATTN_RETURN_IF_ERROR(set_smem(kern, plan.smem_final, op));
    // Two CTAs per SM need the largest shared-memory carveout (a hint; the default may pick less).
    DSATTN_RETURN_IF_ERROR(cuda_status(
        cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared), op,
        "cudaFuncSetAttribute(topk carveout)"));
    // Rows as wide as the launch (topk's without bounds, most with them) take the sample rank
    // computed here; the fused route's rows (paged bounds) compute theirs (full_len -1: none).
    const int full_len = rb.paged || rb.width <= plan.s_mcap ? -1 : rb.width;
    const int full_rank = full_len > 0 ? sample_rank(static_cast<int>(sizeof(T)), plan.k, full_len) : 0;
    return cuda_status(launch_pdl(kern, dim3(static_cast<unsigned>(rows)), dim3(kTopkThreads), plan.smem_final, st, LaunchOpt{},
                                  logits, ld, rb, plan.k, plan.k_pad, plan.s_mcap, plan.s_l2_ahead, full_len, full_rank,
                                  sorted, out),
                       op, "topk_sampled_kernel");
  }
  if (plan.cluster > 0) {
    const bool push = plan.cluster > 4;  // see topk_cluster_kernel
    auto kern = plan.small_v == kClusterV4 ? cluster_kernel<T, kClusterV4>(sorted, push, plan.cluster_gather)
                                           : cluster_kernel<T, kClusterV>(sorted, push, plan.cluster_gather);
    return launch_cluster(kern, plan.cluster, rows, plan.smem_final, st, true, op, "topk_cluster_kernel", logits, ld,
                          rb, plan.k, plan.k_pad, plan.cluster_gather, out);
  }
  if (plan.direct && plan.small_v > 0) {
    auto kern = plan.small_v == 4 ? small_kernel<T, 4>(sorted) : small_kernel<T, 8>(sorted);
    DSATTN_RETURN_IF_ERROR(set_smem(kern, plan.smem_final, op));
    return cuda_status(launch_pdl(kern, dim3(static_cast<unsigned>(rows)), dim3(kTopkThreads), plan.smem_final, st, LaunchOpt{},
                                  logits, ld, rb, plan.k, plan.k_pad, out),
                       op, "topk_small_kernel");
  }
  if (plan.direct) {
    auto kern = topk_final_kernel<T, false>;
    DSATTN_RETURN_IF_ERROR(set_smem(kern, plan.smem_final, op));
    return cuda_status(launch_pdl(kern, dim3(static_cast<unsigned>(rows)), dim3(kTopkThreads), plan.smem_final, st, LaunchOpt{},
                                  logits, ld, rb, plan.k, plan.k_pad, plan.m_cap, rb.width, sorted,
                                  static_cast<const uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr), 0, out),
                       op, "topk_final_kernel");
  }
  const TopkBuffers buf = topk_buffers(plan, ex.workspace);
  auto kern = topk_chunk_kernel<T>;
  DSATTN_RETURN_IF_ERROR(set_smem(kern, plan.smem_chunk, op));
  dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(plan.chunks));
  DSATTN_RETURN_IF_ERROR(cuda_status(launch_pdl(kern, grid, dim3(kTopkThreads), plan.smem_chunk, st, LaunchOpt{}, logits, ld, rb,
                                                plan.k, plan.kc, plan.k_pad, plan.m_cap, plan.chunk_len, buf.key[0],
                                                buf.idx[0]),
                                     op, "topk_chunk_kernel"));
  return launch_merge_and_final<T>(plan, rows, buf, logits, ld, rb, sorted, out, st, op);
}

template <typename T>
Status run_topk(const TopkParams& p, const detail::TopkProblem& pb, const TopkPlan& plan, const Exec& ex) {
  TopkRowBounds rb;
  rb.width = static_cast<int>(pb.width);
  if (p.starts.defined()) {
    rb.starts = p.starts.ptr<const int32_t>();
    rb.starts_stride = p.starts.strides[0];
  }
  if (p.ends.defined()) {
    rb.ends = p.ends.ptr<const int32_t>();
    rb.ends_stride = p.ends.strides[0];
  }
  const TopkOutputs out = topk_outputs(p.indices, p.values, pb.slot_transform ? p.slot_ids : TensorView{},
                                       p.block_table, p.row_request, p.next_n, p.states_per_page);
  return launch_topk_rows<T>(plan, pb.rows, p.logits.ptr<const T>(), p.logits.strides[0], rb, p.sorted, out, ex,
                             "topk");
}

}  // namespace

Status topk_rows_f32(const TopkPlan& plan, int64_t rows, const float* logits, int64_t ld, const TopkRowBounds& rb,
                     bool sorted, const TopkOutputs& out, const Exec& ex, const char* op) {
  if (rows == 0) return Status::Ok();
  return launch_topk_rows<float>(plan, rows, logits, ld, rb, sorted, out, ex, op);
}

size_t topk_workspace(const TopkParams&, const detail::TopkProblem& pb, const Exec& ex) {
  TopkDeviceLimits lim;
  TopkPlan plan;
  if (!topk_device_limits(ex, &lim).ok()) return 0;
  if (!plan_topk(pb.rows, pb.width, pb.k, lim, &plan).ok()) return 0;
  return plan.workspace_bytes;
}

Status topk(const TopkParams& p, const detail::TopkProblem& pb, const Exec& ex) {
  TopkDeviceLimits lim;
  DSATTN_RETURN_IF_ERROR(topk_device_limits(ex, &lim));
  TopkPlan plan;
  DSATTN_RETURN_IF_ERROR(plan_topk(pb.rows, pb.width, pb.k, lim, &plan));
  DSATTN_RETURN_IF_ERROR(detail::check_workspace("topk", ex, plan.workspace_bytes));
  if (pb.rows == 0 || pb.k == 0) return Status::Ok();
  if (pb.width > INT32_MAX) return detail::not_implemented("topk", "rows wider than %d are not supported", INT32_MAX);
  switch (p.logits.dtype) {
    case DType::kF32: return run_topk<float>(p, pb, plan, ex);
    case DType::kBF16: return run_topk<__nv_bfloat16>(p, pb, plan, ex);
    default:
      return detail::invalid("topk", "logits dtype expected f32 or bf16, got %s", dtype_name(p.logits.dtype));
  }
}

}  // namespace cuda
}  // namespace dsattn
