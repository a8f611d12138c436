// Presets (SPEC §4) and per-layer geometry (SPEC §3.8). Expected numbers are worked out by hand:
//   latent V4 page bytes  = ceil(P * 584 / 576) * 576     latent V3.2 page bytes = P * 656
//   indexer FP8 page bytes = S * (128 + 4) = S * 132
#include <gtest/gtest.h>

#include <vector>

#include "dsattn/geometry.h"

using namespace dsattn;

namespace {

ModelPreset preset(const char* name) {
  ModelPreset p;
  Status st = get_preset(name, &p);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return p;
}

std::vector<LayerGeometry> layers_of(const ModelPreset& p) {
  std::vector<LayerGeometry> g;
  Status st = plan(p, &g);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return g;
}

// The V4 compress-ratio layout: layers 0 and 1 have `lead`, then pairs (4, 128) up to layer n - 3,
// then 4 and 0.
void expect_v4_ratios(const std::vector<int>& r, size_t n, int lead) {
  ASSERT_EQ(r.size(), n);
  EXPECT_EQ(r[0], lead);
  EXPECT_EQ(r[1], lead);
  for (size_t i = 2; i < n - 2; ++i) EXPECT_EQ(r[i], i % 2 == 0 ? 4 : 128) << i;
  EXPECT_EQ(r[n - 2], 4);
  EXPECT_EQ(r[n - 1], 0);
}

}  // namespace

TEST(Geometry, PresetNamesAndVerification) {
  const std::vector<std::string> want = {"deepseek-v3.2", "deepseek-v4-flash", "deepseek-v4-pro",
                                         "deepseek-v4.1-flash"};
  EXPECT_EQ(preset_names(), want);
  EXPECT_TRUE(preset("deepseek-v3.2").verified);
  EXPECT_TRUE(preset("deepseek-v4-flash").verified);
  EXPECT_FALSE(preset("deepseek-v4-pro").verified);
  EXPECT_FALSE(preset("deepseek-v4.1-flash").verified);
  ModelPreset p;
  Status st = get_preset("deepseek-v5", &p);
  EXPECT_EQ(st.code, Code::kInvalidArgument);
  EXPECT_EQ(st.message,
            "get_preset: name expected one of deepseek-v3.2, deepseek-v4-flash, deepseek-v4-pro, "
            "deepseek-v4.1-flash, got \"deepseek-v5\"");
}

TEST(Geometry, PresetTableMatchesSpec) {
  ModelPreset v32 = preset("deepseek-v3.2");
  EXPECT_EQ(v32.index_heads, 64);
  EXPECT_EQ(v32.index_head_dim, 128);
  EXPECT_EQ(v32.topk, 2048);
  EXPECT_EQ(v32.block_tokens, 64);
  EXPECT_EQ(v32.latent_format, LatentFormat::kV32Fp8);
  for (int r : v32.compress_ratios) EXPECT_EQ(r, 1);

  ModelPreset flash = preset("deepseek-v4-flash");
  EXPECT_EQ(flash.index_heads, 64);
  EXPECT_EQ(flash.topk, 512);
  EXPECT_EQ(flash.block_tokens, 256);
  EXPECT_EQ(flash.attn_heads, 64);
  EXPECT_EQ(flash.window, 128);
  ASSERT_NO_FATAL_FAILURE(expect_v4_ratios(flash.compress_ratios, 44, 0));  // 2 + 2*20 + 2

  ModelPreset pro = preset("deepseek-v4-pro");
  EXPECT_EQ(pro.topk, 1024);
  EXPECT_EQ(pro.attn_heads, 128);
  ASSERT_NO_FATAL_FAILURE(expect_v4_ratios(pro.compress_ratios, 62, 128));  // 2 + 2*29 + 2

  ModelPreset v41 = preset("deepseek-v4.1-flash");
  EXPECT_EQ(v41.index_heads, 32);
  EXPECT_EQ(v41.index_head_dim, 128);
  EXPECT_EQ(v41.topk, 512);
  EXPECT_EQ(v41.block_tokens, 64);
  ASSERT_EQ(v41.compress_ratios.size(), 43u);  // 2 + 18 + 20 + 3
  for (int i = 0; i < 43; ++i) {
    const int want = i < 2 ? 0 : i < 20 ? 2 : i < 40 ? 1 : 0;
    EXPECT_EQ(v41.compress_ratios[i], want) << i;
  }
}

TEST(Geometry, V41FlashHas64And32StatesPerPage) {
  const auto g = layers_of(preset("deepseek-v4.1-flash"));
  ASSERT_EQ(g.size(), 43u);
  // layer 0: window only
  EXPECT_EQ(g[0].compress_ratio, 0);
  EXPECT_FALSE(g[0].has_indexer);
  EXPECT_EQ(g[0].states_per_page, 0);
  EXPECT_EQ(g[0].indexer_page_bytes, 0);
  // layer 2: ratio 2 -> 64 / 2 = 32 states per 64-token page
  EXPECT_EQ(g[2].compress_ratio, 2);
  EXPECT_TRUE(g[2].has_indexer);
  EXPECT_EQ(g[2].states_per_page, 32);
  EXPECT_EQ(g[2].indexer_page_bytes, 32 * 132);                // 4224
  EXPECT_EQ(g[2].latent_tokens_per_page, 32);
  EXPECT_EQ(g[2].latent_page_bytes, 19008);                    // 32*584 = 18688 -> 33*576
  EXPECT_EQ(g[2].topk, 512);
  // layer 20: ratio 1 -> 64 states per page
  EXPECT_EQ(g[20].compress_ratio, 1);
  EXPECT_TRUE(g[20].has_indexer);
  EXPECT_EQ(g[20].states_per_page, 64);
  EXPECT_EQ(g[20].indexer_page_bytes, 8448);                   // 64 * 132
  EXPECT_EQ(g[20].latent_page_bytes, 37440);                   // 64*584 = 37376 -> 65*576
  EXPECT_EQ(g[42].states_per_page, 0);
  for (const auto& l : g) EXPECT_EQ(l.layer, &l - &g[0]);
}

TEST(Geometry, V4FlashRatio4Has64StatesAndRatio128Has2) {
  const auto g = layers_of(preset("deepseek-v4-flash"));
  ASSERT_EQ(g.size(), 44u);
  EXPECT_EQ(g[2].compress_ratio, 4);
  EXPECT_TRUE(g[2].has_indexer);
  EXPECT_EQ(g[2].states_per_page, 64);
  EXPECT_EQ(g[2].indexer_page_bytes, 8448);
  EXPECT_EQ(g[2].latent_page_bytes, 37440);
  EXPECT_EQ(g[3].compress_ratio, 128);
  EXPECT_FALSE(g[3].has_indexer);
  EXPECT_EQ(g[3].states_per_page, 2);
  EXPECT_EQ(g[3].latent_tokens_per_page, 2);
  EXPECT_EQ(g[3].indexer_page_bytes, 0);
  EXPECT_EQ(g[3].latent_page_bytes, 1728);  // 2*584 = 1168 -> 3*576
  EXPECT_EQ(g[3].topk, 0);
}

TEST(Geometry, V32PageBytes) {
  const auto g = layers_of(preset("deepseek-v3.2"));
  ASSERT_EQ(g.size(), 61u);
  EXPECT_EQ(g[0].states_per_page, 64);
  EXPECT_EQ(g[0].latent_page_bytes, 64 * 656);  // 41984
  EXPECT_EQ(g[0].indexer_page_bytes, 8448);
  EXPECT_EQ(g[0].topk, 2048);
}

TEST(Geometry, Mxfp4IndexerPageBytes) {
  ModelPreset p = preset("deepseek-v4.1-flash");
  p.indexer_format = IndexerFormat::kMxfp4;
  const auto g = layers_of(p);
  EXPECT_EQ(g[2].indexer_page_bytes, 32 * 68);
  EXPECT_EQ(g[20].indexer_page_bytes, 64 * 68);
}

TEST(Geometry, VisibleStates) {
  EXPECT_EQ(visible_states(0, 1), 1);
  EXPECT_EQ(visible_states(0, 2), 0);
  EXPECT_EQ(visible_states(1, 2), 1);
  EXPECT_EQ(visible_states(2, 2), 1);
  EXPECT_EQ(visible_states(3, 4), 1);
  EXPECT_EQ(visible_states(254, 128), 1);
  EXPECT_EQ(visible_states(255, 128), 2);
  EXPECT_EQ(visible_states(100, 0), 0);
}

TEST(Geometry, PlanRejectsBadPresets) {
  ModelPreset p = preset("deepseek-v4.1-flash");
  std::vector<LayerGeometry> g;
  p.compress_ratios[5] = 3;
  Status st = plan(p, &g);
  EXPECT_EQ(st.message, "plan: deepseek-v4.1-flash: layer 5 compress_ratio expected a divisor of block_tokens 64, got 3");
  p.compress_ratios[5] = -1;
  EXPECT_EQ(plan(p, &g).message, "plan: deepseek-v4.1-flash: layer 5 compress_ratio expected >= 0, got -1");
  p = preset("deepseek-v3.2");
  p.block_tokens = 512;
  EXPECT_EQ(plan(p, &g).message,
            "plan: deepseek-v3.2: layer 0 (compress ratio 1) states per page expected <= 256, got 512");
  p = preset("deepseek-v3.2");
  p.block_tokens = 0;
  EXPECT_EQ(plan(p, &g).message, "plan: deepseek-v3.2: block_tokens expected > 0, got 0");
  p = preset("deepseek-v3.2");
  p.index_head_dim = 96;
  EXPECT_EQ(plan(p, &g).message, "plan: deepseek-v3.2: index_head_dim expected 32, 64 or 128, got 96");
}

TEST(Geometry, CheckIndexerCache) {
  const ModelPreset p = preset("deepseek-v4.1-flash");
  const auto g = layers_of(p);
  IndexerCache c;
  c.format = IndexerFormat::kFp8;
  c.head_dim = 128;
  c.states_per_page = 32;
  c.page_stride_bytes = 4224;
  EXPECT_TRUE(check_indexer_cache(g[2], p, c).ok());
  c.page_stride_bytes = 4608;  // padded pages are fine
  EXPECT_TRUE(check_indexer_cache(g[2], p, c).ok());

  // The field failure: a 64-state page handed to a ratio-2 layer.
  c.states_per_page = 64;
  c.page_stride_bytes = 8448;
  EXPECT_EQ(check_indexer_cache(g[2], p, c).message,
            "check_indexer_cache: layer 2 (compress ratio 2) states_per_page expected 32, got 64");
  EXPECT_TRUE(check_indexer_cache(g[20], p, c).ok());
  c.states_per_page = 32;
  c.page_stride_bytes = 4200;
  EXPECT_EQ(check_indexer_cache(g[2], p, c).message,
            "check_indexer_cache: layer 2 (compress ratio 2) page_stride_bytes expected >= 4224, got 4200");
  c.page_stride_bytes = 4226;
  EXPECT_EQ(check_indexer_cache(g[2], p, c).message,
            "check_indexer_cache: layer 2 (compress ratio 2) page_stride_bytes expected a multiple of 4, got 4226");
  c.page_stride_bytes = 4224;
  c.head_dim = 64;
  EXPECT_EQ(check_indexer_cache(g[2], p, c).message,
            "check_indexer_cache: layer 2 (compress ratio 2) head_dim expected 128, got 64");
  c.head_dim = 128;
  c.format = IndexerFormat::kMxfp4;
  EXPECT_EQ(check_indexer_cache(g[2], p, c).message,
            "check_indexer_cache: layer 2 (compress ratio 2) format expected fp8, got mxfp4");
  c.format = IndexerFormat::kFp8;
  EXPECT_EQ(check_indexer_cache(g[0], p, c).message,
            "check_indexer_cache: layer 0 (compress ratio 0) has no indexer cache in deepseek-v4.1-flash");

  std::vector<uint8_t> buf(4 * 4224);
  c.pages = make_tensor(buf.data(), DType::kU8, {4, 4224});
  EXPECT_TRUE(check_indexer_cache(g[2], p, c).ok());
  c.pages = make_tensor_strided(buf.data(), DType::kU8, {3, 4224}, {4000, 1});
  EXPECT_EQ(check_indexer_cache(g[2], p, c).message,
            "check_indexer_cache: layer 2 (compress ratio 2) pages stride[0] expected 4224 (page_stride_bytes), got 4000");
  c.pages = make_tensor(buf.data(), DType::kI32, {4, 1056});
  EXPECT_EQ(check_indexer_cache(g[2], p, c).message,
            "check_indexer_cache: layer 2 (compress ratio 2) pages dtype expected u8, got i32");
}
