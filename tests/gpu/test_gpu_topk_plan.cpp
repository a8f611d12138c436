// The CUDA top-k launch plan (src/cuda/common/topk_plan.h) for given device limits: hand-computed
// plans for the H200 (132 SMs, 227 KiB opt-in shared memory) and invariants over many shapes.
// Host code only: runs without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "cuda/common/topk_plan.h"
#include "cuda/sm80/fused_route.h"
#include "gpu/topk_test_util.h"

namespace dsattn {
namespace {

using cuda::plan_topk;
using cuda::TopkDeviceLimits;
using cuda::TopkPlan;
using testing_gpu::FilterMinWidth;

// H200: 232448 bytes opt-in per block, minus the 1024 the plan reserves for static smem.
constexpr TopkDeviceLimits kH200{132, 232448 - 1024};
// sm_120 configuration: 99 KiB.
constexpr TopkDeviceLimits kSm120{188, 101376 - 1024};
// The same with thread-block cluster launch (the cluster kernel's plans).
constexpr TopkDeviceLimits kH200Cluster{132, 232448 - 1024, true};
constexpr TopkDeviceLimits kSm120Cluster{188, 101376 - 1024, true};

TEST(GpuTopkPlan, H200HandComputed) {
  FilterMinWidth off(0);  // the direct / split plans
  TopkPlan p;
  // k = 2048: kc = k_pad = 2048, mlist 4096 entries; region = 4096 + 2 * 4096 words;
  // cap = (231424 / 4 - 12288 - 8) / 256 * 256 = 45312 keys.
  ASSERT_TRUE(plan_topk(128, 32768, 2048, kH200, &p).ok());
  EXPECT_EQ(p.cap, 45312);
  EXPECT_EQ(p.m_cap, 4096);
  EXPECT_TRUE(p.direct);  // 128 rows fill the GPU; 32768 <= cap
  EXPECT_EQ(p.workspace_bytes, 0u);
  EXPECT_EQ(p.smem_final, size_t(32768 + 8 + 12288) * 4);

  // One 64K row: 2 chunks would be enough for shared memory, 8 chunks of 8192 fill more SMs.
  ASSERT_TRUE(plan_topk(1, 65536, 2048, kH200, &p).ok());
  EXPECT_FALSE(p.direct);
  EXPECT_EQ(p.chunks, 8);
  EXPECT_EQ(p.chunk_len, 8192);
  EXPECT_EQ(p.levels, 0);
  EXPECT_EQ(p.final_n, 8 * 2048);

  // 4M states: 93 chunks of 45104 (ceil(4194304 / 93) rounded up to 8), 93 * 2048 = 190464
  // candidates > cap -> one merge level with CTAs of 22 * 2048 = 45056 -> 5 chunks -> 10240.
  ASSERT_TRUE(plan_topk(1, 4194304, 2048, kH200, &p).ok());
  EXPECT_EQ(p.chunks, 93);
  EXPECT_EQ(p.chunk_len, 45104);
  EXPECT_EQ(p.levels, 1);
  EXPECT_EQ(p.level_in_n[0], 190464);
  EXPECT_EQ(p.level_fan_n[0], 45056);
  EXPECT_EQ(p.level_out_chunks[0], 5);
  EXPECT_EQ(p.final_n, 10240);
}

TEST(GpuTopkPlan, H200FilterHandComputed) {
  FilterMinWidth on(4096);  // independent of the default
  TopkPlan p;
  // One 64K row, k = 2048: 65536 / (512 * 4 * 132) < 1 -> 1 state per thread, 128 tiles of 512.
  // mcap = min(fit, max(4 * 2048, 8192)) = 8192, fit = (57856 - 12288 - 2048 - 32) / 2 / 256 * 256
  // = 21504. Workspace: ghist 16384 B, counters 16 -> 256 (zeroed: 16640), record 256, tile
  // offsets / counts 512 each, candidates 2 x 32768 -> 83456 B.
  ASSERT_TRUE(plan_topk(1, 65536, 2048, kH200, &p).ok());
  EXPECT_TRUE(p.filter);
  EXPECT_FALSE(p.direct);
  EXPECT_EQ(p.f_per, 1);
  EXPECT_EQ(p.f_tiles, 128);
  EXPECT_EQ(p.f_mcap, 8192);
  EXPECT_FALSE(p.f_digit2);
  EXPECT_EQ(p.f_zero_bytes, 16640u);
  EXPECT_EQ(p.f_off_cand_idx, 50688u);
  EXPECT_EQ(p.workspace_bytes, 83456u);
  EXPECT_EQ(p.smem_filter_final, size_t(2 * 8192 + 2048 + 32 + 12288) * 4);
  // 128 x 32K: 4194304 / 270336 -> 16, capped at 8 per thread: 8 tiles of 4096 per row.
  ASSERT_TRUE(plan_topk(128, 32768, 2048, kH200, &p).ok());
  EXPECT_TRUE(p.filter);
  EXPECT_EQ(p.f_per, 8);
  EXPECT_EQ(p.f_tiles, 8);
  // 4M states: 1024 tiles of 4096, the second digit on (>= 262144 states).
  ASSERT_TRUE(plan_topk(1, 4194304, 2048, kH200, &p).ok());
  EXPECT_TRUE(p.filter);
  EXPECT_EQ(p.f_tiles, 1024);
  EXPECT_TRUE(p.f_digit2);
  // Rows no wider than 2k stay direct.
  ASSERT_TRUE(plan_topk(128, 4096, 2048, kH200, &p).ok());
  EXPECT_FALSE(p.filter);
  EXPECT_TRUE(p.direct);
  // k = 4096 at 99 KiB: no room for 2k candidates next to the select region -> split plan.
  ASSERT_TRUE(plan_topk(3, 150001, 4096, kSm120, &p).ok());
  EXPECT_FALSE(p.filter);
}

TEST(GpuTopkPlan, DefaultFilterPolicy) {
  // Default: the filter plan for at most 4 rows of at least 262144 states (H200 measurements).
  TopkPlan p;
  ASSERT_TRUE(plan_topk(1, 1048576, 2048, kH200, &p).ok());
  EXPECT_TRUE(p.filter);
  ASSERT_TRUE(plan_topk(4, 262144, 2048, kH200, &p).ok());
  EXPECT_TRUE(p.filter);
  ASSERT_TRUE(plan_topk(1, 262143, 2048, kH200, &p).ok());
  EXPECT_FALSE(p.filter);
  ASSERT_TRUE(plan_topk(5, 1048576, 2048, kH200, &p).ok());
  EXPECT_FALSE(p.filter);
  ASSERT_TRUE(plan_topk(128, 32768, 2048, kH200, &p).ok());
  EXPECT_FALSE(p.filter);
  EXPECT_TRUE(p.direct);
}

TEST(GpuTopkPlan, ClusterPolicy) {
  // With cluster launch: rows of 8193..65536 positions, one CTA per 8192 of them (per 4096 up to
  // 32768 positions where the call stays within the CTA budget), at most 96 CTAs per call
  // (default); not without cluster launch, not past 96 CTAs, not for wider rows.
  TopkPlan p;
  ASSERT_TRUE(plan_topk(1, 65536, 2048, kH200Cluster, &p).ok());
  EXPECT_EQ(p.cluster, 8);
  EXPECT_EQ(p.small_v, 8);
  EXPECT_EQ(p.workspace_bytes, 0u);
  // (sel_key, sel_pos) for k <= 4096, the (greater, equal) totals padded to 16 bytes, then the
  // gather: 4096 keys, 8 + 8 per-CTA counts and a slot counter (u32 words).
  EXPECT_EQ(p.smem_final, size_t(2 * 4096 + 8 + 4096 + 2 * 8 + 1) * 4);
  EXPECT_TRUE(p.cluster_gather);
  ASSERT_TRUE(plan_topk(1, 16384, 2048, kH200Cluster, &p).ok());  // one row of 4 CTAs: the digits
  EXPECT_EQ(p.cluster, 4);
  EXPECT_FALSE(p.cluster_gather);
  ASSERT_TRUE(plan_topk(2, 16384, 2048, kH200Cluster, &p).ok());  // several rows: the gather
  EXPECT_TRUE(p.cluster_gather);
  ASSERT_TRUE(plan_topk(1, 65536, 2048, kH200Cluster, &p).ok());
  {
    testing_gpu::TopkTuningScope scope;
    cuda::topk_tuning().cluster_gather = false;
    ASSERT_TRUE(plan_topk(1, 65536, 2048, kH200Cluster, &p).ok());
    EXPECT_FALSE(p.cluster_gather);
  }
  ASSERT_TRUE(plan_topk(12, 65536, 2048, kH200Cluster, &p).ok());
  EXPECT_EQ(p.cluster, 8);
  ASSERT_TRUE(plan_topk(48, 8193, 512, kSm120Cluster, &p).ok());
  EXPECT_EQ(p.cluster, 2);
  ASSERT_TRUE(plan_topk(13, 65536, 2048, kH200Cluster, &p).ok());
  EXPECT_EQ(p.cluster, 0);
  ASSERT_TRUE(plan_topk(25, 32768, 2048, kH200Cluster, &p).ok());
  EXPECT_EQ(p.cluster, 0);
  ASSERT_TRUE(plan_topk(1, 65537, 2048, kH200Cluster, &p).ok());
  EXPECT_EQ(p.cluster, 0);
  ASSERT_TRUE(plan_topk(1, 16384, 2048, kH200Cluster, &p).ok());  // 4 keys per thread
  EXPECT_EQ(p.cluster, 4);
  EXPECT_EQ(p.small_v, 4);
  ASSERT_TRUE(plan_topk(12, 32768, 2048, kH200Cluster, &p).ok());
  EXPECT_EQ(p.cluster, 8);
  EXPECT_EQ(p.small_v, 4);
  ASSERT_TRUE(plan_topk(13, 32768, 2048, kH200Cluster, &p).ok());  // 104 CTAs at 4: 8 keys
  EXPECT_EQ(p.cluster, 4);
  EXPECT_EQ(p.small_v, 8);
  ASSERT_TRUE(plan_topk(1, 32769, 2048, kH200Cluster, &p).ok());
  EXPECT_EQ(p.cluster, 5);
  EXPECT_EQ(p.small_v, 8);
  ASSERT_TRUE(plan_topk(1, 8192, 2048, kH200Cluster, &p).ok());
  EXPECT_EQ(p.cluster, 0);
  EXPECT_EQ(p.small_v, 8);
  ASSERT_TRUE(plan_topk(1, 65536, 2048, kH200, &p).ok());
  EXPECT_EQ(p.cluster, 0);
}

TEST(GpuTopkPlan, ClusterOneWave) {
  // 4 keys per thread only where those clusters all run at once on the stream's SMs
  // (TopkDeviceLimits::cluster_slots), else 8 (half the CTAs); the cluster kernel stays where even
  // that takes two waves (still faster than the split plan). Slots of a green context of 72 SMs on
  // an H100 (cudaOccupancyMaxActiveClusters).
  TopkDeviceLimits lim{72, 232448 - 1024, true};
  const int green72[9] = {0, 0, 36, 18, 18, 9, 9, 9, 9};
  std::copy(green72, green72 + 9, lim.cluster_slots);
  TopkPlan p;
  ASSERT_TRUE(plan_topk(9, 32768, 2048, lim, &p).ok());  // 9 clusters of 8: one wave
  EXPECT_EQ(p.cluster, 8);
  EXPECT_EQ(p.small_v, 4);
  ASSERT_TRUE(plan_topk(10, 32768, 2048, lim, &p).ok());  // 10 of 8 would not fit: 10 of 4
  EXPECT_EQ(p.cluster, 4);
  EXPECT_EQ(p.small_v, 8);
  ASSERT_TRUE(plan_topk(18, 16384, 2048, lim, &p).ok());  // 18 clusters of 4 at 4 keys per thread
  EXPECT_EQ(p.cluster, 4);
  EXPECT_EQ(p.small_v, 4);
  ASSERT_TRUE(plan_topk(19, 16384, 2048, lim, &p).ok());  // 19 would not: 19 of 2
  EXPECT_EQ(p.cluster, 2);
  EXPECT_EQ(p.small_v, 8);
  ASSERT_TRUE(plan_topk(10, 65536, 2048, lim, &p).ok());  // two waves at 8 keys: still the cluster
  EXPECT_EQ(p.cluster, 8);
  EXPECT_EQ(p.small_v, 8);
  ASSERT_TRUE(plan_topk(10, 40000, 2048, lim, &p).ok());
  EXPECT_EQ(p.cluster, 5);
  // Past the CTA budget (96), fewer rows than the sampled kernel takes (16) keep the cluster kernel
  // where their clusters all run at once: a whole H100's counts.
  TopkDeviceLimits h100{132, 232448 - 1024, true};
  const int h100_slots[9] = {0, 0, 66, 39, 30, 22, 17, 15, 15};
  std::copy(h100_slots, h100_slots + 9, h100.cluster_slots);
  ASSERT_TRUE(plan_topk(13, 65536, 2048, h100, &p).ok());  // 104 CTAs
  EXPECT_EQ(p.cluster, 8);
  ASSERT_TRUE(plan_topk(15, 65536, 2048, h100, &p).ok());  // 120 CTAs
  EXPECT_EQ(p.cluster, 8);
  ASSERT_TRUE(plan_topk(16, 65536, 2048, h100, &p).ok());  // the sampled kernel's
  EXPECT_EQ(p.cluster, 0);
  EXPECT_TRUE(p.sampled);
  ASSERT_TRUE(plan_topk(13, 65536, 2048, kH200Cluster, &p).ok());  // unknown slots: the budget alone
  EXPECT_EQ(p.cluster, 0);
  {
    testing_gpu::TopkTuningScope scope;
    cuda::topk_tuning().cluster_max_ctas = 0;  // off stays off
    ASSERT_TRUE(plan_topk(13, 65536, 2048, h100, &p).ok());
    EXPECT_EQ(p.cluster, 0);
  }
  // Unknown slots (0) cap nothing: the CTA budget alone decides, as on kH200Cluster.
  TopkDeviceLimits unknown{72, 232448 - 1024, true};
  ASSERT_TRUE(plan_topk(10, 32768, 2048, unknown, &p).ok());
  EXPECT_EQ(p.cluster, 8);
  EXPECT_EQ(p.small_v, 4);
  EXPECT_TRUE(cuda::topk_cluster_one_wave(unknown, 1000, 8));
  EXPECT_TRUE(cuda::topk_cluster_one_wave(lim, 9, 8));
  EXPECT_FALSE(cuda::topk_cluster_one_wave(lim, 10, 8));
  EXPECT_TRUE(cuda::topk_cluster_one_wave(lim, 1000, 1));
}

TEST(GpuTopkPlan, ClusterSlotsOfThisDevice) {
  // topk_device_limits asks the driver how many clusters of each size run at once: on a device
  // with cluster launch every size 2..8 has at least one slot, no more than the SMs allow, and
  // fewer clusters fit as they grow.
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  TopkDeviceLimits lim;
  ASSERT_TRUE(cuda::topk_device_limits(Exec{}, &lim).ok());
  if (!lim.cluster) GTEST_SKIP() << "no cluster launch on this device";
  for (int c = 2; c <= 8; ++c) {
    EXPECT_GE(lim.cluster_slots[c], 1) << "clusters of " << c;
    EXPECT_LE(lim.cluster_slots[c] * c, lim.num_sms) << "clusters of " << c;
    if (c > 2) {
      EXPECT_LE(lim.cluster_slots[c], lim.cluster_slots[c - 1]) << "clusters of " << c;
    }
  }
}

TEST(GpuTopkPlan, SampledPolicy) {
  // Default: rows the split plan would chunk, 16K..256K wide (and >= 8 kc), at least 16 of them
  // up to 64K positions and 20 per 64K of width beyond.
  TopkPlan p;
  ASSERT_TRUE(plan_topk(256, 65536, 2048, kH200Cluster, &p).ok());
  EXPECT_TRUE(p.sampled);
  EXPECT_EQ(p.s_mcap, 8192);
  EXPECT_TRUE(p.s_const_mcap);  // the kernel's capacity a compile-time constant
  EXPECT_EQ(p.smem_final, size_t(2 * 8192 + 4096) * 4);
  ASSERT_TRUE(plan_topk(32, 65536, 2048, kH200Cluster, &p).ok());
  EXPECT_TRUE(p.sampled);
  ASSERT_TRUE(plan_topk(64, 16384, 2048, kH200, &p).ok());  // split to fill the SMs: 2 chunks
  EXPECT_TRUE(p.sampled);
  ASSERT_TRUE(plan_topk(128, 131072, 4096, kH200, &p).ok());
  EXPECT_TRUE(p.sampled);
  EXPECT_EQ(p.s_mcap, 16384);
  EXPECT_FALSE(p.s_const_mcap);
  ASSERT_TRUE(plan_topk(40, 131072, 2048, kH200, &p).ok());  // 20 rows per 64K of width
  EXPECT_TRUE(p.sampled);
  ASSERT_TRUE(plan_topk(39, 131072, 2048, kH200, &p).ok());
  EXPECT_FALSE(p.sampled);
  ASSERT_TRUE(plan_topk(16, 65536, 2048, kH200, &p).ok());  // 16 rows up to 64K
  EXPECT_TRUE(p.sampled);
  ASSERT_TRUE(plan_topk(60, 196608, 2048, kH200, &p).ok());
  EXPECT_TRUE(p.sampled);
  ASSERT_TRUE(plan_topk(59, 196608, 2048, kH200, &p).ok());
  EXPECT_FALSE(p.sampled);
  ASSERT_TRUE(plan_topk(96, 196608, 2048, kH200, &p).ok());
  EXPECT_TRUE(p.sampled);
  // Not: rows that fit one CTA (direct), fewer than 16 rows, narrower than 8 kc or wider than 256K,
  // k = 4096 in 99 KiB (160 KiB of candidates), or when disabled.
  ASSERT_TRUE(plan_topk(128, 32768, 2048, kH200, &p).ok());
  EXPECT_FALSE(p.sampled);
  EXPECT_TRUE(p.direct);
  ASSERT_TRUE(plan_topk(15, 65536, 2048, kH200, &p).ok());
  EXPECT_FALSE(p.sampled);
  ASSERT_TRUE(plan_topk(64, 16384, 4096, kH200, &p).ok());
  EXPECT_FALSE(p.sampled);
  ASSERT_TRUE(plan_topk(64, 262145, 2048, kH200, &p).ok());
  EXPECT_FALSE(p.sampled);
  ASSERT_TRUE(plan_topk(64, 131072, 4096, kSm120, &p).ok());
  EXPECT_FALSE(p.sampled);
  ASSERT_TRUE(plan_topk(64, 131072, 2048, kSm120, &p).ok());
  EXPECT_TRUE(p.sampled);  // 80 KiB fits the 99 KiB budget
  EXPECT_TRUE(p.s_pipe);
  // The stream's loads a tile ahead up to one row per SM, not beyond.
  ASSERT_TRUE(plan_topk(256, 65536, 2048, kH200Cluster, &p).ok());
  EXPECT_FALSE(p.s_pipe);
  ASSERT_TRUE(plan_topk(132, 65536, 2048, kH200, &p).ok());
  EXPECT_TRUE(p.sampled);
  EXPECT_TRUE(p.s_pipe);
  EXPECT_EQ(p.s_l2_ahead, 2);  // L2 prefetch two tiles ahead with one CTA per SM
  ASSERT_TRUE(plan_topk(133, 65536, 2048, kH200, &p).ok());
  EXPECT_TRUE(p.sampled);
  EXPECT_FALSE(p.s_pipe);
  EXPECT_EQ(p.s_l2_ahead, 1);  // one tile with two
  ASSERT_TRUE(plan_topk(188, 65536, 2048, kSm120, &p).ok());
  EXPECT_TRUE(p.sampled);
  EXPECT_TRUE(p.s_pipe);
  ASSERT_TRUE(plan_topk(32, 65536, 2048, kH200, &p, /*rows_in_l2=*/true).ok());  // the fused logits route
  EXPECT_TRUE(p.sampled);
  EXPECT_FALSE(p.s_pipe);
  EXPECT_EQ(p.s_l2_ahead, 0);  // rows just written: no prefetch
  testing_gpu::TopkTuningScope scope;
  cuda::topk_tuning().sampled_pipe = 0;
  ASSERT_TRUE(plan_topk(32, 65536, 2048, kH200, &p).ok());
  EXPECT_FALSE(p.s_pipe);
  cuda::topk_tuning().sampled_pipe = 1;  // forcing wins over rows_in_l2
  ASSERT_TRUE(plan_topk(32, 65536, 2048, kH200, &p, /*rows_in_l2=*/true).ok());
  EXPECT_TRUE(p.s_pipe);
  cuda::topk_tuning().sampled_pipe = -1;
  cuda::topk_tuning().sampled_l2_ahead = 3;  // forcing wins over rows_in_l2
  ASSERT_TRUE(plan_topk(32, 65536, 2048, kH200, &p, /*rows_in_l2=*/true).ok());
  EXPECT_EQ(p.s_l2_ahead, 3);
  cuda::topk_tuning().sampled_l2_ahead = -1;
  cuda::topk_tuning().sampled_fixed_mcap = false;
  ASSERT_TRUE(plan_topk(256, 65536, 2048, kH200, &p).ok());
  EXPECT_TRUE(p.sampled);
  EXPECT_FALSE(p.s_const_mcap);
  cuda::topk_tuning().sampled_fixed_mcap = true;
  cuda::topk_tuning().sampled_min_width = 0;
  ASSERT_TRUE(plan_topk(256, 65536, 2048, kH200, &p).ok());
  EXPECT_FALSE(p.sampled);
}

TEST(GpuTopkPlan, FusedRouteSwitch) {
  // paged_mqa_topk's route: the call's field (false: kAuto, the logits route only where streaming
  // would keep every score), unless DSATTN_FUSED_LOGITS overrides it.
  using cuda::FusedRouteMode;
  using cuda::fused_route_mode;
  EXPECT_EQ(fused_route_mode(nullptr, false), FusedRouteMode::kAuto);
  EXPECT_EQ(fused_route_mode(nullptr, true), FusedRouteMode::kWhereItFits);
  EXPECT_EQ(fused_route_mode("0", true), FusedRouteMode::kStreaming);
  EXPECT_EQ(fused_route_mode("1", false), FusedRouteMode::kWhereItFits);
  EXPECT_EQ(fused_route_mode("force", false), FusedRouteMode::kForce);
  EXPECT_EQ(fused_route_mode("yes", false), FusedRouteMode::kAuto);  // unknown values: the field
  EXPECT_EQ(fused_route_mode("", true), FusedRouteMode::kWhereItFits);
}

TEST(GpuTopkPlan, FusedStagedSwitch) {
  // The tile kernel's streaming route: staged tiles appended in runs unless DSATTN_FUSED_STAGED
  // is "0" (the CTA-wide pipeline) or "tile" (one staged tile per append).
  using cuda::fused_staged_mode;
  using cuda::StagedMode;
  EXPECT_EQ(fused_staged_mode(nullptr), StagedMode::kRuns);
  EXPECT_EQ(fused_staged_mode("0"), StagedMode::kOff);
  EXPECT_EQ(fused_staged_mode("tile"), StagedMode::kTile);
  EXPECT_EQ(fused_staged_mode("1"), StagedMode::kRuns);
  EXPECT_EQ(fused_staged_mode(""), StagedMode::kRuns);
  EXPECT_EQ(fused_staged_mode("off"), StagedMode::kRuns);  // unknown values: the default
}

TEST(GpuTopkPlan, StagedShapeHandComputed) {
  using cuda::staged_shape;
  using cuda::StagedMode;
  const auto expect = [](cuda::StagedShape s, int tiles, int run) {
    EXPECT_EQ(s.tiles, tiles);
    EXPECT_EQ(s.run, run);
  };
  // sm_80's 163 KiB on a large call, N = 1: 12 x 32 = 384-state tiles, 3072 / 384 = 8 staged;
  // k = 2048 with ccap = 4k = 8192: (8192 - 2048) / 2 = 3072 states = 8 tiles per append.
  expect(staged_shape(1, 384, 8192, 2048, StagedMode::kRuns), 8, 8);
  expect(staged_shape(1, 384, 8192, 2048, StagedMode::kTile), 8, 1);
  // sm_120's 99 KiB: 8 x 32 = 256-state tiles, 12 staged, 12 per append.
  expect(staged_shape(1, 256, 8192, 2048, StagedMode::kRuns), 12, 12);
  // next_n = 2: 3072 / 768 = 4 staged tiles.
  expect(staged_shape(2, 384, 8192, 2048, StagedMode::kRuns), 4, 4);
  // next_n = 8 at 512-state tiles: fewer than one tile's row-states fit 3072, so one tile a flush.
  expect(staged_shape(8, 512, 8192, 2048, StagedMode::kRuns), 1, 1);
  // Small tiles: at most 16 staged (3072 / 128 = 24); k = 512 (ccap 2048): 1536 / 2 / 128 = 6.
  expect(staged_shape(1, 128, 2048, 512, StagedMode::kRuns), 16, 6);
  // Short pieces shrink ccap to kc + 512: 512 / 2 < one tile of 384, so one tile per append.
  expect(staged_shape(1, 384, 2048 + 512, 2048, StagedMode::kRuns), 8, 1);
}

TEST(GpuTopkPlan, StagedShapeInvariants) {
  // Over the shapes the planner can give (tiles of 32..512 states, 1..8 rows, ccap from the
  // planner's floor kc + 512 up to 6k): the staging stays within kMaxStageTiles tiles and about
  // kStageStates row-states per CTA, and every append of a run finds room in its buffer after
  // a compaction (n <= ccap - kc; runs of more than one tile keep half that room free).
  using cuda::staged_shape;
  using cuda::StagedMode;
  int cases = 0;
  for (int rows = 1; rows <= 8; ++rows) {
    for (int tile = 32; tile <= 512; tile += 32) {
      for (int k : {1, 100, 511, 512, 1000, 1024, 2047, 2048, 3000, 4096}) {
        const int kc = (k + 3) & ~3;
        for (int ccap : {kc + 512, kc + 516, kc + 2 * tile, 2 * kc + 512, 4 * kc, 6 * kc + 1024}) {
          if (ccap < kc + 512) continue;
          for (StagedMode mode : {StagedMode::kRuns, StagedMode::kTile}) {
            const cuda::StagedShape s = staged_shape(rows, tile, ccap, kc, mode);
            SCOPED_TRACE(testing::Message() << "rows " << rows << " tile " << tile << " k " << k << " ccap " << ccap);
            ASSERT_GE(s.tiles, 1);
            ASSERT_LE(s.tiles, cuda::kMaxStageTiles);
            if (s.tiles > 1) {
              ASSERT_LE(s.tiles * rows * tile, cuda::kStageStates);
            }
            ASSERT_GE(s.run, 1);
            ASSERT_LE(s.run, s.tiles);
            ASSERT_LE(s.run * tile, ccap - kc);  // room after an exact compaction (k kept)
            if (s.run > 1) {
              ASSERT_LE(2 * s.run * tile, ccap - kc);
            }
            if (mode == StagedMode::kTile) {
              ASSERT_EQ(s.run, 1);
            }
            // The longest such run: one more tile would break the half-room rule or the staging.
            if (mode == StagedMode::kRuns && s.run < s.tiles) {
              ASSERT_GT(2 * (s.run + 1) * tile, ccap - kc);
            }
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 10000);
}

TEST(GpuTopkPlan, LogitsRouteEarlyTrigger) {
  // paged_mqa_topk's logits route lets its top-k be scheduled at the scoring kernel's start only
  // with DSATTN_FUSED_EARLY_TRIGGER=1 (off by default, and for any other value), and then only
  // where the top-k's first launch has 1..8 CTAs (fused_route.h). Plans as the route makes them
  // (rows in L2), with cluster launch: 1 x 64K a cluster of 8 CTAs (8 keys per thread), 1 x 32K
  // one of 8 (4 keys per thread, a CTA per 4096 positions), 1 x 8K one CTA (keys in registers);
  // 2 x 64K and 4 x 16K 16 CTAs; one 4M row the filter plan (a memset first: no trigger), or
  // without it 93 chunk CTAs.
  using cuda::logits_route_early_trigger;
  using cuda::topk_first_ctas;
  TopkPlan p;
  ASSERT_TRUE(plan_topk(1, 65536, 2048, kH200Cluster, &p, true).ok());
  EXPECT_EQ(p.cluster, 8);
  EXPECT_EQ(topk_first_ctas(p, 1), 8);
  EXPECT_TRUE(logits_route_early_trigger("1", topk_first_ctas(p, 1)));
  EXPECT_FALSE(logits_route_early_trigger(nullptr, topk_first_ctas(p, 1)));  // the default
  EXPECT_FALSE(logits_route_early_trigger("0", topk_first_ctas(p, 1)));
  EXPECT_FALSE(logits_route_early_trigger("", topk_first_ctas(p, 1)));
  ASSERT_TRUE(plan_topk(1, 32768, 2048, kH200Cluster, &p, true).ok());
  EXPECT_EQ(p.cluster, 8);
  EXPECT_EQ(topk_first_ctas(p, 1), 8);
  EXPECT_TRUE(logits_route_early_trigger("1", topk_first_ctas(p, 1)));
  ASSERT_TRUE(plan_topk(1, 8192, 2048, kH200Cluster, &p, true).ok());
  EXPECT_TRUE(p.direct);
  EXPECT_EQ(p.cluster, 0);
  EXPECT_EQ(topk_first_ctas(p, 1), 1);
  EXPECT_TRUE(logits_route_early_trigger("1", topk_first_ctas(p, 1)));
  ASSERT_TRUE(plan_topk(2, 65536, 2048, kH200Cluster, &p, true).ok());
  EXPECT_EQ(topk_first_ctas(p, 2), 16);
  EXPECT_FALSE(logits_route_early_trigger("1", topk_first_ctas(p, 2)));
  ASSERT_TRUE(plan_topk(4, 16384, 2048, kH200Cluster, &p, true).ok());
  EXPECT_EQ(p.cluster, 4);
  EXPECT_EQ(topk_first_ctas(p, 4), 16);
  EXPECT_FALSE(logits_route_early_trigger("1", topk_first_ctas(p, 4)));
  {
    FilterMinWidth on(262144);
    ASSERT_TRUE(plan_topk(1, 4194304, 2048, kH200Cluster, &p, true).ok());
    EXPECT_TRUE(p.filter);
    EXPECT_EQ(topk_first_ctas(p, 1), 0);
    EXPECT_FALSE(logits_route_early_trigger("1", topk_first_ctas(p, 1)));
  }
  {
    FilterMinWidth off(0);
    ASSERT_TRUE(plan_topk(1, 4194304, 2048, kH200, &p, true).ok());
    EXPECT_FALSE(p.filter);
    EXPECT_EQ(p.chunks, 93);
    EXPECT_EQ(topk_first_ctas(p, 1), 93);
    EXPECT_FALSE(logits_route_early_trigger("1", topk_first_ctas(p, 1)));
  }
  EXPECT_FALSE(logits_route_early_trigger("1", 0));
  EXPECT_TRUE(logits_route_early_trigger("1", cuda::kEarlyTriggerMaxTopkCtas));
  EXPECT_FALSE(logits_route_early_trigger("1", cuda::kEarlyTriggerMaxTopkCtas + 1));
  EXPECT_FALSE(logits_route_early_trigger(nullptr, cuda::kEarlyTriggerMaxTopkCtas));
}

TEST(GpuTopkPlan, RejectsOutOfRangeK) {
  TopkPlan p;
  EXPECT_FALSE(plan_topk(1, 100, 0, kH200, &p).ok());
  EXPECT_FALSE(plan_topk(1, 100, 4097, kH200, &p).ok());
  EXPECT_TRUE(plan_topk(1, 100, 4096, kH200, &p).ok());
}

TEST(GpuTopkPlan, SmallBudgetDropsTheMlist) {
  TopkPlan p;
  // k = 4096 at 99 KiB: with the mlist (2 x 8192 entries) no keys would fit; without it the
  // capacity is (100352 / 4 - 8192 - 8) / 256 * 256 = 16640 >= 4 * 4096.
  ASSERT_TRUE(plan_topk(3, 150001, 4096, kSm120, &p).ok());
  EXPECT_EQ(p.m_cap, 0);
  EXPECT_EQ(p.cap, 16640);
  // k = 2048: the mlist would leave (25088 - 12288 - 8) / 256 * 256 = 12544 < 8 * 2048 keys, so it
  // goes too: cap = (25088 - 4096 - 8) / 256 * 256 = 20736.
  ASSERT_TRUE(plan_topk(3, 150001, 2048, kSm120, &p).ok());
  EXPECT_EQ(p.m_cap, 0);
  EXPECT_EQ(p.cap, 20736);
  // k = 512 keeps it: mlist 512 + 2048 entries, cap = (25088 - 4096 - 5120 - 8) / 256 * 256 = 15616.
  ASSERT_TRUE(plan_topk(3, 150001, 512, kSm120, &p).ok());
  EXPECT_EQ(p.m_cap, 2560);
  EXPECT_EQ(p.cap, 15616);
}

TEST(GpuTopkPlan, InvariantsOverShapes) {
  for (int filter_min : {0, 4096, 1})
  for (const TopkDeviceLimits& lim : {kH200, kSm120, kH200Cluster, kSm120Cluster}) {
    FilterMinWidth fm(filter_min);
    for (int k : {1, 7, 512, 1000, 2048, 4096}) {
      for (int64_t rows : {1, 2, 37, 128, 1000}) {
        for (int64_t width : {0, 1, 100, 8192, 65536, 100000, 1 << 20, 3000001}) {
          TopkPlan p;
          ASSERT_TRUE(plan_topk(rows, width, k, lim, &p).ok()) << rows << "x" << width << " k " << k;
          const size_t smem_max = static_cast<size_t>(lim.smem_max);
          EXPECT_EQ(p.kc % 4, 0);
          EXPECT_GE(p.kc, k);
          EXPECT_GE(p.k_pad, k);
          EXPECT_LE(p.smem_final, smem_max);
          if (p.filter) {
            EXPECT_GT(filter_min, 0);
            EXPECT_GT(width, 2 * p.kc);
            EXPECT_GE(p.f_per, 1);
            EXPECT_LE(p.f_per, 8);
            EXPECT_GE(int64_t(p.f_tiles) * 512 * p.f_per, width);
            EXPECT_LT(int64_t(p.f_tiles - 1) * 512 * p.f_per, width);
            EXPECT_GE(p.f_mcap, 2 * p.kc);
            EXPECT_LE(p.smem_filter_final, smem_max);
            EXPECT_GE(p.f_zero_bytes, size_t(rows) * (4096 + 4) * 4);
            EXPECT_GE(p.f_off_cand_key, p.f_off_tile_cnt + size_t(rows) * p.f_tiles * 4);
            EXPECT_GE(p.workspace_bytes, p.f_off_cand_idx + size_t(rows) * p.f_mcap * 4);
            continue;
          }
          if (p.sampled) {
            EXPECT_FALSE(p.direct);
            EXPECT_EQ(p.cluster, 0);
            EXPECT_GE(rows, 32 * ((width + 65535) / 65536));
            EXPECT_GE(width, 8 * p.kc);
            EXPECT_LE(width, 262144);
            EXPECT_EQ(p.s_mcap, std::max(8192, 4 * p.kc));
            EXPECT_EQ(p.smem_final, size_t(2 * p.s_mcap + std::max(4096, 2 * p.k_pad)) * 4);
            EXPECT_EQ(p.workspace_bytes, 0u);
            continue;
          }
          if (p.cluster > 0) {
            EXPECT_TRUE(lim.cluster);
            EXPECT_FALSE(p.direct);
            EXPECT_GT(width, 8192);
            EXPECT_LE(p.cluster, 8);
            EXPECT_TRUE(p.small_v == 8 || (p.small_v == 4 && width <= 32768)) << p.small_v;
            EXPECT_GE(int64_t(p.cluster) * p.small_v * 1024, width);
            EXPECT_LT(int64_t(p.cluster - 1) * p.small_v * 1024, width);
            EXPECT_LE(p.smem_final, smem_max);
            EXPECT_EQ(p.workspace_bytes, 0u);
            continue;
          }
          if (p.small_v > 0) {
            EXPECT_TRUE(p.direct);
            EXPECT_LE(width, int64_t(p.small_v) * 1024);
          }
          if (p.direct) {
            EXPECT_LE(width, p.cap);
            EXPECT_EQ(p.workspace_bytes, 0u);
            continue;
          }
          EXPECT_LE(p.chunk_len, p.cap);
          EXPECT_GE(int64_t(p.chunks) * p.chunk_len, width);
          EXPECT_LT(int64_t(p.chunks - 1) * p.chunk_len, width);
          EXPECT_LE(p.smem_chunk, smem_max);
          int64_t n = int64_t(p.chunks) * p.kc;
          EXPECT_EQ(p.buf_words[0], size_t(rows * n));
          for (int l = 0; l < p.levels; ++l) {
            EXPECT_EQ(p.level_in_n[l], n);
            EXPECT_EQ(p.level_fan_n[l] % p.kc, 0);
            EXPECT_LE(p.level_fan_n[l], p.cap);
            EXPECT_GE(p.level_fan_n[l], 2 * p.kc);  // every level at least halves the candidates
            EXPECT_LE(p.smem_merge[l], smem_max);
            EXPECT_EQ(p.level_out_chunks[l], (n + p.level_fan_n[l] - 1) / p.level_fan_n[l]);
            n = int64_t(p.level_out_chunks[l]) * p.kc;
            EXPECT_LE(size_t(rows * n), p.buf_words[(l + 1) & 1]);
          }
          EXPECT_EQ(p.final_n, n);
          EXPECT_LE(p.final_n, p.cap);
          EXPECT_GE(p.workspace_bytes, 2 * (p.buf_words[0] + p.buf_words[1]) * 4);
        }
      }
    }
  }
}

}  // namespace
}  // namespace dsattn
