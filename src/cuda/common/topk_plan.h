// Launch plan of the grid-level top-k (topk_grid.cuh): how rows are split into chunks, how many
// merge levels follow, shared memory per launch and workspace bytes. A pure function of
// (rows, width, k, device limits), so the workspace query and the call always agree.
#pragma once
#include <cstddef>
#include <cstdint>

#include "dsattn/ops.h"
#include "dsattn/status.h"

namespace dsattn {
namespace cuda {

struct TopkDeviceLimits {
  int num_sms = 0;
  int smem_max = 0;  // dynamic shared memory per block usable by the top-k kernels (bytes)
  bool cluster = false;  // thread-block cluster launch (sm_90 and newer): topk_cluster_kernel
  // cluster_slots[c] (c = 2 .. 8): how many clusters of c CTAs of topk_cluster_kernel (1,024
  // threads, one CTA per SM) can run at once on the stream's SMs (cudaOccupancyMaxActiveClusters,
  // which knows green contexts); 0: unknown. A cluster must fit in one GPC, so this is less than
  // the SMs / c: H100, all 132 SMs: 66 clusters of 2, 39 of 3, 30 of 4, 22 of 5, 17 of 6, 15 of 7
  // and of 8 (120 CTAs); a green context of 72 SMs: 36 / 18 / 18 / 9 / 9 / 9 / 9 (10 clusters of 5
  // measured as fast as 9 there, so the sizes that are not powers of two may be low). Clusters
  // beyond it wait for a second wave: plan_topk takes 4 keys per thread only within it.
  int cluster_slots[9] = {};
};
// Limits of the current device (the stream's SMs), capped by ex.smem_budget_bytes when set.
Status topk_device_limits(const Exec& ex, TopkDeviceLimits* out);

// lim.cluster_slots[c], 0 (unknown) where c is out of 2 .. 8.
inline int topk_cluster_slots(const TopkDeviceLimits& lim, int64_t c) {
  return c >= 2 && c <= 8 ? lim.cluster_slots[c] : 0;
}
// Whether `rows` clusters of `c` CTAs (one per row) all run at once under `lim` (true where the
// slots are unknown).
inline bool topk_cluster_one_wave(const TopkDeviceLimits& lim, int64_t rows, int64_t c) {
  const int slots = topk_cluster_slots(lim, c);
  return slots <= 0 || rows <= slots;
}

struct TopkPlan {
  int k = 0, kc = 0, k_pad = 0;
  int cap = 0;             // most keys one CTA holds in shared memory
  int m_cap = 0;           // mlist capacity (topk_kernel.cuh); 0 when shared memory is too tight
  bool direct = true;      // one CTA per row straight from the logits
  int small_v = 0;         // direct rows of <= small_v * 1024 positions: topk_small_kernel<T, small_v, sorted>
  int cluster = 0;         // > 0: topk_cluster_kernel, a cluster of `cluster` CTAs per row, keys in
                           // registers (small_v per thread); chunks / chunk_len describe the CTAs
  bool cluster_gather = true;  // topk_cluster_kernel gathers the first digit's bin (TopkTuning)
  int chunks = 1;          // C: chunks per row (split mode)
  int chunk_len = 0;       // positions per chunk
  static constexpr int kMaxLevels = 8;
  int levels = 0;          // merge launches after the chunk kernel
  int level_in_n[kMaxLevels] = {};   // candidates per row entering merge level i
  int level_fan_n[kMaxLevels] = {};  // candidates per merge CTA
  int level_out_chunks[kMaxLevels] = {};
  int final_n = 0;         // candidates per row entering the final kernel (split mode)
  size_t buf_words[2] = {0, 0};  // words of each ping-pong candidate buffer (keys; indices alike)
  size_t workspace_bytes = 0;
  size_t smem_chunk = 0, smem_final = 0;
  size_t smem_merge[kMaxLevels] = {};
  // Threshold-filter plan (topk_filter.cuh), used instead of direct / split when `filter`.
  bool filter = false;
  int f_per = 0;       // states per thread and tile (tile = kFilterThreads * f_per)
  int f_tiles = 0;     // tiles per row
  int f_mcap = 0;      // candidates per row the final kernel holds
  bool f_digit2 = false;  // second histogram kernel (bits 19..10) for very long rows
  size_t f_zero_bytes = 0;  // leading workspace bytes zeroed before the histogram kernel
  size_t f_off_ghist2 = 0, f_off_counters = 0, f_off_rec = 0, f_off_tile_off = 0, f_off_tile_cnt = 0;
  size_t f_off_cand_key = 0, f_off_cand_idx = 0;
  size_t smem_filter_final = 0;
  // Sampled-threshold plan (topk_sampled.cuh): one CTA per row, candidates of a sampled threshold.
  bool sampled = false;
  int s_mcap = 0;         // candidates a row's CTA holds
  bool s_window = true;   // window_threshold selects f32 rows (else, and bf16, the top-12-bit digits)
  bool s_pipe = false;    // the stream issues the next tile's loads before this tile's scan
  int s_l2_ahead = 0;     // the stream's L2 prefetch distance in tiles (0: none)
  bool s_const_mcap = false;  // s_mcap is kSampledMinMcap, a compile-time constant in the kernel
};

// Bytes of dynamic shared memory for a CTA holding `n_keys` keys.
size_t topk_smem_bytes(int n_keys, int k_pad, int m_cap);

// Split policy, a process-wide setting that benchmarks sweep. A row goes straight to one CTA when
// it fits in shared memory (and is no wider than max_direct, when set); with fewer than
// num_sms / fill_div row-CTAs, rows are split further into chunks of at least min_chunk positions.
struct TopkTuning {
  int min_chunk = 8192;
  int fill_div = 2;
  int max_direct = 0;  // 0: the shared-memory capacity
  // Rows at least this wide (and wider than 2k) take the threshold-filter plan when there are at
  // most filter_max_rows of them (0: any number); filter_min_width = 0 disables it. Default from
  // the H200 (BENCHMARKS.md): the filter wins on single rows of 256K states and more, but costs
  // ~30 us even on one 8K row and loses to the direct / split plans on many rows.
  int filter_min_width = 262144;
  int filter_max_rows = 4;
  // Direct rows at most this wide (<= 8192) keep their keys in registers (topk_small_kernel);
  // 0 disables it. H200, k = 2048: 1 x 4096 8.8 us (shared-memory direct kernel 12.2), 1 x 8192
  // 11.8 (13.6), 128 x 8192 13.7 (15.1); at 16 keys per thread (128 x 16384) it was slower, 20.9
  // against 18.0, so wider rows stay on the shared-memory kernel.
  int small_max_width = 8192;
  // Rows wider than that and at most kClusterMaxCtas x 8192 wide go to the cluster kernel
  // (topk_cluster.cuh, one CTA per 8192 positions) when the device has cluster launch, the call
  // needs at most cluster_max_ctas CTAs (the H200 figures below that lost at 128 CTAs were likely
  // second waves: 30 clusters of 4 and 15 of 8 run at once on an H100's 132 SMs, TopkDeviceLimits::
  // cluster_slots), or more where its clusters all run at once and it has fewer rows than the
  // sampled kernel takes (13-15 x 64K on an H100: plan_topk); 0 disables it. H200, k = 2048
  // (cluster / other plans, us): 1 x 16K 12.8 / 20.1, 1 x 64K 17.4 / 22.0, 9 x 64K 22.5 / 24.7
  // (72 CTAs), 24 x 32K 18.3 / 24.1 (96 CTAs), 64 x 16K 16.6 / 24.0 (128 CTAs in clusters of 2,
  // one wave), but at 128 CTAs in clusters of 4 and 8 the split plans win: 32 x 32K 29.6 / 24.7,
  // 16 x 64K 33.2 / 25.8.
  int cluster_max_ctas = 96;
  // Rows at most this wide take the cluster kernel at 4 keys per thread (a CTA per 4096 positions,
  // still at most kClusterMaxCtas, and within cluster_max_ctas) instead of 8; 0: always 8. H200,
  // k = 2048, L2 flushed, 8 -> 4 keys per thread, two rounds, us: 1 x 12000 11.2 -> 10.4, 1 x 16K
  // 11.3 -> 10.4, 8 x 16K 13.3 -> 12.4-12.5, 24 x 16K 13.9 -> 13.0-13.1, 3 x 20000 14.0 -> 13.4-13.5,
  // 1 x 24K 11.8-11.9 -> 11.5, 1 x 32K 11.8 -> 11.7, 12 x 32K 14.5 -> 14.3-14.4; the fused op's
  // logits route 1 x 16K 24.5 -> 22.1-22.5, 4 x 16K 29.2-31.3 -> 26.7-26.8. Wider rows lost with
  // 16-CTA clusters (a non-portable size): 1 x 64K 13.1 -> 14.4-14.6, 4 x 64K 15.9 -> 17.6.
  int cluster_v4_max_width = 32768;
  // The cluster kernel's threshold below the first digit: the keys of the first digit's chosen bin
  // (at most kClusterGather in the cluster) gathered into every CTA, which finds the threshold among
  // them and its place in the row without another cluster barrier (true: on calls of several rows
  // and on rows of more than 4 CTAs); or two more cluster-wide radix digits and an exchange of
  // per-CTA counts (false, and single rows of at most 4 CTAs; bench topk --cluster-gather 0).
  // H200, k = 2048, f32, L2 flushed, digits (HEAD 490eea6's binary) -> gather, us, two rounds in
  // each of two calls (BENCHMARKS.md, 2026-12-03 21:30-22:35): 8 x 64K 16.2-16.35 -> 14.5-14.7,
  // 5 x 40000 15.2 -> 13.6-13.7, 20 x 32K 15.4-15.5 -> 14.1-14.3, 3 x 20000 13.6-13.7 -> 12.2-12.4,
  // 12 x 32K 14.7-14.8 -> 13.1-13.3, 1 x 32K 11.8-12.1 -> 11.4-11.5, 1 x 64K 13.1-13.2 -> 12.9-13.1;
  // paged_mqa_topk's logits route 4 x 64K 39.6-40.6 -> 37.5-38.0, 2 x 32K next_n 2 30.9-31.4 ->
  // 28.9-29.2, 1 x 64K level (25.3-25.5); bf16 1 x 64K 15.7-15.9 -> 13.8, 8 x 64K 16.0-16.1 -> 14.1;
  // sorted f32 1 x 64K 32.8-33.0 -> 33.6-33.7 (one more cluster barrier before CTA 0 takes the
  // winners). Single rows of 3-4 CTAs lost with it (1 x 16K 10.4 ->
  // 10.9, 1 x 12000 10.2 -> 10.7: the pull digits are cheap there), and by 0.2-0.5 us even with it
  // off while its code was in their kernel (hence topk_cluster_kernel's kGather).
  bool cluster_gather = true;
  // Rows the split plan would break into chunks (wider than one CTA's shared memory, or split to
  // fill the SMs), of sampled_min_width .. 256K positions and at least 8 round_up(k, 4), take the
  // sampled-threshold kernel (topk_sampled.cuh) when there are at least sampled_min_rows of them
  // (rows of at most 64K positions) or sampled_min_rows_wide per 64K positions of width (wider
  // rows: one CTA per row, so its time grows with the row); sampled_min_width = 0 disables it.
  // H200, k = 2048, f32, L2 flushed, same run (sampled / split, us): 16 x 64K 24.0 / 25.0,
  // 20 x 64K 24.2 / 32.4, 28 x 64K 24.7 / 34.1, 32 x 128K 37.1 / 33.6, 24 x 128K 36.2 / 33.0,
  // 48 x 128K 38.6 / 51.4, 16 x 256K 58.0 / 34.4, 32 x 256K 61.7 / 54.1; rows in L2 (the fused
  // logits route): 16 x 64K 20.7 / 23.9, 32 x 128K 30.5 / 31.2. Earlier: 256 x 64K 47.9 / 87.3,
  // 1024 x 64K 146 / 311. Rows that fit one CTA stay direct (128 x 32K 20.5).
  int sampled_min_width = 16384;
  int sampled_min_rows = 16;
  int sampled_min_rows_wide = 20;
  // The sampled kernel's selection over its candidates of f32 rows: digits over key - (the
  // threshold), window_threshold (true), or the top-12-bit radix digits (false; bench topk
  // --sampled-select). bf16 rows take the radix digits either way (topk_launch.cu). H200, k = 2048,
  // same run (radix / window, us): 256 x 64K 48.2 / 46.1, 1024 x 64K 147.0 / 144.8, 128 x 128K
  // 48.2 / 46.8.
  bool sampled_window = true;
  // The sampled kernel's stream (32 bytes per thread and tile: 8 f32 / 16 bf16 states): -1 issues
  // the next tile's loads before the current tile's scan when the call has at most one row per SM
  // (one CTA per SM; never for rows in L2, plan_topk's rows_in_l2); 0 / 1 forces
  // (bench topk --sampled-pipe). H200, k = 2048, same run, L2 flushed (64 bytes per thread, the
  // previous default up to one row per SM / 32 pipelined / 32 not), us: f32 64 x 64K 26.1 / 24.8
  // / 26.8-27.7, 128 x 64K 30.9 / 27.7 / 31.2, 128 x 128K 46.3 / 40.4 / 48.9, 32 x 32K 18.7 /
  // 18.1 / 18.9; 1024 x 64K 143.8 / 139.0 / 135.0, 256 x 128K 68.2 / 66.5 / 62.7; bf16 128 x 64K
  // 25.2 / 24.0 / 25.2. Rows in L2 (--no-flush): 64 x 64K 21.0 / 21.6 / 20.2, 32 x 32K 16.0 /
  // 16.1 / 15.5. 16 and 48 bytes per thread, and 64 bytes pipelined (spills), were slower.
  int sampled_pipe = -1;
  // The sampled kernel's L2 prefetch distance, in stream tiles (32 KB; topk_sampled.cuh's
  // sampled_prefetch): -1 the default, 1 tile for two CTAs per SM, 2 for one (s_pipe), none for
  // rows in L2; N >= 0 forces (bench topk --sampled-l2 N). H200, k = 2048, f32, L2 flushed, us,
  // none / 1 / 2 / 3 / 4 tiles (two calls, alike within 0.5 %): 1024 x 64K 130.7 / 119.2 / 124.4 /
  // 132.6 / 140.4, 1024 x 128K 203.8 / 187.7 / 194.0 / 221.4 / 253.4, 256 x 128K 60.4 / 59.0 /
  // 65.3 / 73.3 / 78.4; one CTA per SM (s_pipe): 128 x 64K 26.3 / 26.7 / 25.5 / 26.8 / 28.3, 64 x
  // 64K 23.6 / 23.9 / 23.4 / 23.5 / 23.9, 16 x 64K 22.3 / 22.6 / 22.0 / 22.0 / 22.1. bf16 1024 x
  // 64K: 113.4 none, 109.9 at 2 tiles.
  int sampled_l2_ahead = -1;
  // The sampled kernel's candidate capacity as a compile-time constant where it is
  // kSampledMinMcap (k <= 2048; the stream then stores positions at an immediate offset, one
  // instruction fewer per candidate slot of its issue-bound loop); false: the run-time value, as
  // k > 2048 always takes (bench topk --sampled-fixed 0). H200, k = 2048, f32, same call, both
  // with the predicated scan, us: 1024 x 64K 117.5-118.2 run-time / 115.5-115.8 constant, 1024 x
  // 128K 185.9 / 183.9-184.1, 128 x 64K 24.8-24.9 / 24.4-24.5.
  bool sampled_fixed_mcap = true;
};
TopkTuning& topk_tuning();

// rows x width problem. `min_split_rows`: split rows into several CTAs when fewer rows than this
// (num_sms / 2 by default) would run. `rows_in_l2`: the rows were just written (the fused op's
// logits route), which sets the sampled kernel's stream (TopkTuning::sampled_pipe). Returns
// kNotImplemented when k is out of range.
Status plan_topk(int64_t rows, int64_t width, int k, const TopkDeviceLimits& lim, TopkPlan* plan,
                 bool rows_in_l2 = false);

// CTAs of the plan's first kernel over `rows` rows; 0 for the filter plan, which begins with a
// memset (no PDL launch after the kernel before it).
inline int64_t topk_first_ctas(const TopkPlan& plan, int64_t rows) {
  if (plan.filter) return 0;
  if (plan.cluster > 0) return rows * plan.cluster;
  if (plan.sampled || plan.direct) return rows;
  return rows * plan.chunks;
}

// Plans only the merge of `cand_n` candidates per row (fused path): levels + final_n.
Status plan_topk_merge(int64_t rows, int cand_n, int k, const TopkDeviceLimits& lim, TopkPlan* plan);

}  // namespace cuda
}  // namespace dsattn
