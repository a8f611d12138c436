// The portable indexer kernel's pipeline shape (plan_indexer_config, src/cuda/sm80/indexer_params.h)
// for given device limits: hand-derived choices for the H200 (sm_90, 132 SMs, 227 KiB opt-in shared
// memory) and for sm_120 (188 SMs, 99 KiB, native FP8 MMA), and invariants over many shapes.
// Host code only: runs without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "cuda/sm80/indexer_params.h"

namespace dsattn {
namespace {

using cuda::IndexerConfig;
using cuda::IndexerDeviceInfo;
using cuda::IndexerParams;
using cuda::plan_indexer_config;

constexpr int kH200Optin = 232448;   // cudaDevAttrMaxSharedMemoryPerBlockOptin, H200
constexpr int kSm120Budget = 101376;  // 99 KiB
constexpr IndexerDeviceInfo kH200{9, 0, 132};
constexpr IndexerDeviceInfo kSm120{12, 0, 188};

size_t no_epi(const IndexerParams&) { return 0; }  // the logits epilogue's scratch

// A paged decode call: `groups` requests of next_n rows on block tables of max_pages pages of S.
IndexerParams paged(int64_t groups, int64_t max_pages, int S, int N = 1, int H = 64, int D = 128, bool fp4 = false) {
  IndexerParams p;
  p.work.mode = detail::IndexerMode::kPaged;
  p.work.rows_per_group = N;
  p.work.groups = groups;
  p.work.batch = groups;
  p.heads = H;
  p.heads_padded = (H + 15) / 16 * 16;
  p.head_dim = D;
  p.fp4 = fp4 ? 1 : 0;
  p.states_per_page = S;
  p.max_pages = max_pages;
  p.keys_aligned16 = 1;
  return p;
}

struct Plan {
  IndexerConfig cfg;
  IndexerParams p;
};

Plan plan(IndexerParams p, const IndexerDeviceInfo& dev, int budget, bool warp_local = true) {
  Plan r;
  const Status s = plan_indexer_config("test", &p, dev, budget, no_epi, &r.cfg, warp_local);
  EXPECT_TRUE(s.ok()) << s.to_string();
  r.p = p;
  return r;
}

size_t need(const Plan& r) {
  return cuda::idx_smem_layout(r.p.fp4 != 0, r.p.head_dim, r.p.work.rows_per_group, r.p.heads_padded,
                               r.p.tile_states, r.p.stages, 0, r.p.q_f16 != 0)
      .total;
}

// The chosen shape (and the params the launch reads agree with it).
void expect_shape(const Plan& r, int warps, int tile_states, int stages) {
  EXPECT_EQ(r.cfg.warps, warps);
  EXPECT_EQ(r.cfg.tile_states, tile_states);
  if (stages > 0) {
    EXPECT_EQ(r.cfg.stages, stages);
  }
  EXPECT_EQ(r.p.warps, r.cfg.warps);
  EXPECT_EQ(r.p.tile_states, r.cfg.tile_states);
  EXPECT_EQ(r.p.stages, r.cfg.stages);
}

// The benchmark knobs are read per call; none may leak into these checks.
struct NoKnobs {
  NoKnobs() {
    for (const char* v : {"DSATTN_INDEXER_WARPS", "DSATTN_INDEXER_WARP_STATES", "DSATTN_INDEXER_TILE",
                          "DSATTN_INDEXER_QF16", "DSATTN_INDEXER_BULK"}) {
      unsetenv(v);
    }
  }
};

// plan() with one benchmark knob set for that call only.
Plan plan_with(const char* knob, const char* value, IndexerParams p, const IndexerDeviceInfo& dev, int budget) {
  setenv(knob, value, 1);
  Plan r = plan(p, dev, budget);
  unsetenv(knob);
  return r;
}

TEST(GpuIndexerPlan, H200HandDerived) {
  NoKnobs clean;
  // 32 x 32K at S 64: the block tables hold 1M states >= 8 tiles of 512 per SM (540672): a large
  // call. 12 warps x 32 states, 3 stages (the most cp.async FP8 stages on sm_90): 384 * 133 bytes
  // a stage = 153216 for three, + f16 Q 64 * 128 * 2 = 16384 + small parts, under 227 KiB.
  Plan r = plan(paged(32, 512, 64), kH200, kH200Optin);
  expect_shape(r, 12, 384, 3);
  EXPECT_EQ(r.p.q_f16, 1);
  EXPECT_EQ(r.p.bulk, 0);
  EXPECT_EQ(r.cfg.smem, need(r));
  EXPECT_GT(r.cfg.smem, size_t(153216 + 16384));
  // The same with S 32 (the same states) and 128 x 8K: large too.
  r = plan(paged(32, 1024, 32), kH200, kH200Optin);
  expect_shape(r, 12, 384, 3);
  r = plan(paged(128, 128, 64), kH200, kH200Optin);
  expect_shape(r, 12, 384, 3);
  // 32 x 8K (262144 states, 7.8 tiles of 256 per SM) and one 32K request (0.97 tiles per SM):
  // small calls keep 8 warps x 32 states, 3 stages; one request of 64K or 128K states (more than
  // one and at most 4 tiles per SM) takes 2 stages.
  for (const IndexerParams& q : {paged(32, 128, 64), paged(1, 512, 64), paged(1, 128, 64)}) {
    r = plan(q, kH200, kH200Optin);
    expect_shape(r, 8, 256, 3);
  }
  for (const IndexerParams& q : {paged(1, 1024, 64), paged(1, 2048, 64), paged(1, 4096, 32), paged(4, 512, 64)}) {
    r = plan(q, kH200, kH200Optin);
    expect_shape(r, 8, 256, 2);
  }
  // DSATTN_INDEXER_TILE=8:3 keeps 3 stages there.
  expect_shape(plan_with("DSATTN_INDEXER_TILE", "8:3", paged(1, 1024, 64), kH200, kH200Optin), 8, 256, 3);
  // The CTA-wide pipeline's epilogues (the fused op's streaming route: warp_local false) never take
  // the large-call shapes.
  r = plan(paged(32, 512, 64), kH200, kH200Optin, /*warp_local=*/false);
  expect_shape(r, 8, 256, 0);
  // next_n = 8: Q is 8 * 64 * 128 * 2 = 131072 bytes; 12 x 32 with 3 stages (153216) does not fit,
  // nor 8 x 64 with 2 (136192); 8 x 32 fits with 2 stages (68096), which the warp-local pipeline
  // takes (the largest tile with >= 2 stages); the CTA-wide one keeps the largest with >= 3: 4 x 32
  // (51072).
  r = plan(paged(32, 512, 64, 8), kH200, kH200Optin);
  expect_shape(r, 8, 256, 2);
  EXPECT_EQ(r.p.q_f16, 1);
  EXPECT_LE(r.cfg.smem, size_t(kH200Optin));
  r = plan(paged(32, 512, 64, 8), kH200, kH200Optin, /*warp_local=*/false);
  expect_shape(r, 4, 128, 3);
}

TEST(GpuIndexerPlan, H200Knobs) {
  NoKnobs clean;
  // DSATTN_INDEXER_WARPS=8 on a large call: 8 warps x 64 states (two halves), 3 stages of 512 *
  // 133 = 68096 bytes (the kernel before the 12-warp shape).
  expect_shape(plan_with("DSATTN_INDEXER_WARPS", "8", paged(32, 512, 64), kH200, kH200Optin), 8, 512, 3);
  // DSATTN_INDEXER_WARPS=12 on a small call: 12 x 32.
  expect_shape(plan_with("DSATTN_INDEXER_WARPS", "12", paged(1, 128, 64), kH200, kH200Optin), 12, 384, 0);
  // DSATTN_INDEXER_WARP_STATES=64 on a small call: 8 x 64; =32 on a large call: still 12 x 32.
  expect_shape(plan_with("DSATTN_INDEXER_WARP_STATES", "64", paged(1, 128, 64), kH200, kH200Optin), 8, 512, 0);
  expect_shape(plan_with("DSATTN_INDEXER_WARP_STATES", "32", paged(32, 512, 64), kH200, kH200Optin), 12, 384, 0);
  // DSATTN_INDEXER_TILE=warps:stages forces that shape where it fits, also past the 3-stage cap of
  // cp.async FP8 keys on sm_90 and on large calls (4 x 32 with 5 stages: 5 * 17024 + 16384 + ...;
  // 8 x 32 with 6: 6 * 34048 + 16384 + ... < 227 KiB); where it does not fit (next_n = 8: 131072
  // bytes of Q beside 204288) the usual choice stands (8 x 32, 2 stages).
  const Plan r = plan_with("DSATTN_INDEXER_TILE", "4:5", paged(32, 512, 64), kH200, kH200Optin);
  expect_shape(r, 4, 128, 5);
  EXPECT_EQ(r.p.q_f16, 1);
  expect_shape(plan_with("DSATTN_INDEXER_TILE", "8:6", paged(1, 128, 64), kH200, kH200Optin), 8, 256, 6);
  expect_shape(plan_with("DSATTN_INDEXER_TILE", "8:6", paged(32, 512, 64, 8), kH200, kH200Optin), 8, 256, 2);
}

TEST(GpuIndexerPlan, Budget99KiB) {
  NoKnobs clean;
  // The H200 under sm_120's 99 KiB: on a large call 12 x 32 x 3 stages and 8 x 64 x 2 stages do not
  // fit; 8 x 32 fits with 2 stages (68096 + 16384 + ...), which the warp-local pipeline takes over
  // 4 x 32 with 3 (51072 + 16384 + ...); the CTA-wide pipeline keeps the >= 3-stage rule.
  Plan r = plan(paged(128, 512, 32), kH200, kSm120Budget);
  expect_shape(r, 8, 256, 2);
  EXPECT_EQ(r.p.q_f16, 1);
  EXPECT_LE(r.cfg.smem, size_t(kSm120Budget));
  r = plan(paged(128, 512, 32), kH200, kSm120Budget, /*warp_local=*/false);
  expect_shape(r, 4, 128, 3);
  // One request: the same shapes.
  r = plan(paged(1, 1024, 64), kH200, kSm120Budget);
  expect_shape(r, 8, 256, 2);
  // next_n = 2: f16 Q is 32768 bytes, so 8 x 32 with 2 stages does not fit (68096 + 32768 + ...);
  // 4 x 32 with 3 does.
  r = plan(paged(32, 512, 64, 2), kH200, kSm120Budget);
  expect_shape(r, 4, 128, 3);
  EXPECT_EQ(r.p.q_f16, 1);
  // sm_120 itself: native FP8 MMA, so Q stays E4M3 (8192 bytes) and up to 6 stages: 8 x 32 fits
  // with 2 (3 x 34048 + 8192 + ... > 99 KiB), 4 x 32 would with 5 (5 x 17024 = 85120 + 8192 + ...).
  // The warp-local pipeline takes 8 x 32 x 2, the CTA-wide one 4 x 32 x 5.
  r = plan(paged(128, 512, 32), kSm120, kSm120Budget);
  expect_shape(r, 8, 256, 2);
  EXPECT_EQ(r.p.q_f16, 0);
  EXPECT_LE(r.cfg.smem, size_t(kSm120Budget));
  r = plan(paged(128, 512, 32), kSm120, kSm120Budget, /*warp_local=*/false);
  expect_shape(r, 4, 128, 5);
}

TEST(GpuIndexerPlan, Budget163KiB) {
  NoKnobs clean;
  // sm_80's opt-in budget (166912 bytes; f16 Q as on the H200): on a large call 12 x 32 x 3 stages
  // (153216 + 16384 + ...) does not fit, 12 x 32 x 2 (102144 + 16384 + ...) does and is taken over
  // 8 x 64 x 2 (136192 + ...).
  constexpr int kSm80Budget = 166912;
  Plan r = plan(paged(32, 512, 64), kH200, kSm80Budget);
  expect_shape(r, 12, 384, 2);
  EXPECT_EQ(r.p.q_f16, 1);
  EXPECT_LE(r.cfg.smem, size_t(kSm80Budget));
  // DSATTN_INDEXER_WARPS=8 keeps 8 warps: 8 x 64 x 2.
  expect_shape(plan_with("DSATTN_INDEXER_WARPS", "8", paged(32, 512, 64), kH200, kSm80Budget), 8, 512, 2);
  // Small calls: 8 x 32 with 3 stages fits (102144 + 16384 + ...); one 64K request takes 2.
  r = plan(paged(32, 128, 64), kH200, kSm80Budget);
  expect_shape(r, 8, 256, 3);
  r = plan(paged(1, 1024, 64), kH200, kSm80Budget);
  expect_shape(r, 8, 256, 2);
  // next_n = 8: f16 Q (131072 bytes) leaves room for 2 warps x 32 x 3 only (4 x 32 x 2: 34048 +
  // 131072 + ... > 163 KiB); E4M3 Q (65536) fits 8 x 32 x 2: fewer than 4 warps with f16 Q, so E4M3.
  r = plan(paged(32, 128, 64, 8), kH200, kSm80Budget);
  expect_shape(r, 8, 256, 2);
  EXPECT_EQ(r.p.q_f16, 0);
  // next_n = 2 under 99 KiB: f16 Q keeps 4 warps (4 x 32 x 3), so it stays f16.
  r = plan(paged(32, 512, 64, 2), kH200, kSm120Budget);
  expect_shape(r, 4, 128, 3);
  EXPECT_EQ(r.p.q_f16, 1);
}

TEST(GpuIndexerPlan, NativeFp8OnSm90) {
  NoKnobs clean;
  // A DSATTN_SM90_NATIVE_FP8_MMA build runs sm_120's native-FP8 code on sm_90 and says so with
  // native_fp8 = 1: Q stays E4M3 (8192 bytes instead of 16384), the sm_90 stage cap (3) stays.
  IndexerDeviceInfo dev = kH200;
  dev.native_fp8 = 1;
  Plan r = plan(paged(32, 128, 64), dev, kH200Optin);
  expect_shape(r, 8, 256, 3);
  EXPECT_EQ(r.p.q_f16, 0);
  r = plan(paged(128, 512, 32), dev, kSm120Budget);
  expect_shape(r, 8, 256, 2);
  EXPECT_EQ(r.p.q_f16, 0);
  // native_fp8 = 0 on a compute capability that has it: f16 Q where it fits.
  dev = kSm120;
  dev.native_fp8 = 0;
  r = plan(paged(1, 1024, 64), dev, kSm120Budget);
  EXPECT_EQ(r.p.q_f16, 1);
}

TEST(GpuIndexerPlan, Mxfp4LargeCall) {
  NoKnobs clean;
  // MXFP4 on the H200: 64-byte key rows, Q dequantized to E4M3 (no f16 Q), up to 6 stages (the
  // 3-stage cap is for cp.async FP8 keys): 12 x 32 with 6 stages of 384 * (64 + 4 + 1) = 26496.
  Plan r = plan(paged(32, 512, 64, 1, 64, 128, /*fp4=*/true), kH200, kH200Optin);
  expect_shape(r, 12, 384, 6);
  EXPECT_EQ(r.p.q_f16, 0);
}

// Over many shapes and budgets: whatever is chosen fits the budget and is a shape the kernels have.
TEST(GpuIndexerPlan, InvariantsOverShapes) {
  NoKnobs clean;
  std::mt19937_64 rng(7);
  const int budgets[] = {kH200Optin, kSm120Budget, 160 * 1024, 64 * 1024};
  int checked = 0;
  for (int it = 0; it < 3000; ++it) {
    const int S = std::uniform_int_distribution<int>(1, 256)(rng);
    const int N = std::uniform_int_distribution<int>(1, 8)(rng);
    const int H = std::vector<int>{8, 16, 24, 32, 48, 64}[rng() % 6];
    const int D = std::vector<int>{32, 64, 128}[rng() % 3];
    const bool fp4 = rng() % 3 == 0;
    const int64_t groups = std::uniform_int_distribution<int64_t>(1, 256)(rng);
    const int64_t pages = std::uniform_int_distribution<int64_t>(1, 70000 / S + 1)(rng);
    const IndexerDeviceInfo dev = rng() % 2 ? kH200 : kSm120;
    const int budget = budgets[rng() % 4];
    const bool warp_local = rng() % 4 != 0;
    IndexerParams p = paged(groups, pages, S, N, H, D, fp4);
    IndexerConfig cfg;
    const Status s = plan_indexer_config("test", &p, dev, budget, no_epi, &cfg, warp_local);
    if (!s.ok()) {
      // Only where even 2 warps x 2 stages cannot fit (large Q at a small budget).
      IndexerParams q = p;
      q.tile_states = 64; q.stages = 2; q.q_f16 = 0;
      EXPECT_GT(cuda::idx_smem_layout(fp4, D, N, q.heads_padded, 64, 2, 0, false).total, size_t(budget));
      continue;
    }
    ++checked;
    ASSERT_TRUE(cfg.warps == 2 || cfg.warps == 4 || cfg.warps == 8 || cfg.warps == 12) << cfg.warps;
    EXPECT_EQ(cfg.warps, p.warps);
    EXPECT_EQ(cfg.tile_states, p.tile_states);
    EXPECT_EQ(cfg.stages, p.stages);
    EXPECT_TRUE(p.tile_states == 32 * p.warps || (p.tile_states == 64 * p.warps && p.warps == 8));
    EXPECT_EQ(p.tile_states % detail::kIndexerUnit, 0);  // tiles are whole schedule units
    EXPECT_GE(p.stages, 2);
    EXPECT_LE(p.stages, (dev.major == 9 && !fp4) ? 3 : 6);
    EXPECT_LE(cfg.smem, size_t(budget));
    EXPECT_EQ(cfg.smem, cuda::idx_smem_layout(fp4, D, N, p.heads_padded, p.tile_states, p.stages, 0,
                                              p.q_f16 != 0).total);
    if (p.warps == 12 || p.tile_states > 32 * p.warps) {
      EXPECT_TRUE(warp_local);  // the large-call shapes are the warp-local pipeline's only
      EXPECT_GE(groups * pages * S, int64_t(8) * 512 * dev.sms);
    }
    if (p.q_f16) {
      EXPECT_TRUE(dev.major == 9 && !fp4);  // f16 Q only where FP8 MMA is emulated
    }
  }
  EXPECT_GT(checked, 2000);
}

}  // namespace
}  // namespace dsattn
