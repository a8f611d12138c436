// dsattn — model presets and per-layer cache geometry (SPEC §3.8, §4).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "dsattn/formats.h"
#include "dsattn/status.h"

namespace dsattn {

struct ModelPreset {
  std::string name;                  // "deepseek-v4.1-flash"
  int index_heads = 0;               // H
  int index_head_dim = 0;            // D
  int topk = 0;
  int block_tokens = 0;              // tokens per cache page
  std::vector<int> compress_ratios;  // per layer; 0 = sliding-window only (no compressed cache)
  std::vector<int> indexer_ratios;   // compress ratios whose layers select states with an indexer
  int attn_heads = 0;                // Hq of sparse MLA
  int window = 0;                    // sliding window in tokens (0 = none)
  IndexerFormat indexer_format = IndexerFormat::kFp8;
  LatentFormat latent_format = LatentFormat::kV4Fp8;
  bool verified = true;              // false for configs read from third-party copies
};

// "deepseek-v3.2", "deepseek-v4-flash", "deepseek-v4-pro", "deepseek-v4.1-flash".
std::vector<std::string> preset_names();
Status get_preset(const std::string& name, ModelPreset* out);

struct LayerGeometry {
  int layer = 0;
  int compress_ratio = 0;            // r (0 = window only)
  bool has_indexer = false;          // this ratio uses an indexer (top-k over compressed states)
  int states_per_page = 0;           // block_tokens / r (0 for window-only layers)
  int64_t indexer_page_bytes = 0;    // S * indexer_state_bytes (0 without an indexer)
  int latent_tokens_per_page = 0;    // compressed states per latent page (= states_per_page)
  int64_t latent_page_bytes = 0;     // latent_min_page_bytes(format, states_per_page)
  int topk = 0;                      // top-k of this layer's indexer (0 without one)
};

// Geometry of every layer of `preset`. Rejects a preset whose ratios do not divide block_tokens,
// whose indexer pages would hold more than 256 states, or whose sizes are not positive.
Status plan(const ModelPreset& preset, std::vector<LayerGeometry>* layers);

// States visible to a query token at 0-based position `pos`: (pos + 1) / r.
inline int64_t visible_states(int64_t pos, int ratio) { return ratio > 0 ? (pos + 1) / ratio : 0; }

// Checks a caller's indexer cache against a layer's geometry (format, head dim, states per page,
// page stride, and the pages tensor when it is given); the message names the layer, the expected
// and the given values.
Status check_indexer_cache(const LayerGeometry& layer, const ModelPreset& preset,
                           const IndexerCache& cache);

}  // namespace dsattn
