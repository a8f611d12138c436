// Model presets (SPEC §4) and per-layer cache geometry (SPEC §3.8).
#include "dsattn/geometry.h"

#include <algorithm>

#include "api/validate.h"

namespace dsattn {
namespace {

constexpr int kMaxStatesPerPage = 256;  // SPEC §3.1: S in 1..256

std::vector<int> repeat(std::initializer_list<int> pattern, int times) {
  std::vector<int> v;
  for (int i = 0; i < times; ++i) v.insert(v.end(), pattern.begin(), pattern.end());
  return v;
}

std::vector<int> concat(std::initializer_list<std::vector<int>> parts) {
  std::vector<int> v;
  for (const auto& p : parts) v.insert(v.end(), p.begin(), p.end());
  return v;
}

std::vector<ModelPreset> all_presets() {
  std::vector<ModelPreset> ps;
  {
    ModelPreset p;
    p.name = "deepseek-v3.2";
    p.index_heads = 64;
    p.index_head_dim = 128;
    p.topk = 2048;
    p.block_tokens = 64;
    p.compress_ratios = std::vector<int>(61, 1);  // 61 layers, no compression
    p.indexer_ratios = {1};
    p.attn_heads = 128;
    p.window = 0;
    p.indexer_format = IndexerFormat::kFp8;
    p.latent_format = LatentFormat::kV32Fp8;
    p.verified = true;
    ps.push_back(p);
  }
  {
    ModelPreset p;
    p.name = "deepseek-v4-flash";
    p.index_heads = 64;
    p.index_head_dim = 128;
    p.topk = 512;
    p.block_tokens = 256;
    p.compress_ratios = concat({{0, 0}, repeat({4, 128}, 20), {4, 0}});
    p.indexer_ratios = {4};  // ratio-128 layers attend every compressed state
    p.attn_heads = 64;
    p.window = 128;
    p.latent_format = LatentFormat::kV4Fp8;
    p.verified = true;
    ps.push_back(p);
  }
  {
    ModelPreset p;
    p.name = "deepseek-v4-pro";
    p.index_heads = 64;
    p.index_head_dim = 128;
    p.topk = 1024;
    p.block_tokens = 256;
    p.compress_ratios = concat({{128, 128}, repeat({4, 128}, 29), {4, 0}});
    p.indexer_ratios = {4};
    p.attn_heads = 128;
    p.window = 128;
    p.latent_format = LatentFormat::kV4Fp8;
    p.verified = false;  // config from a third-party copy
    ps.push_back(p);
  }
  {
    ModelPreset p;
    p.name = "deepseek-v4.1-flash";
    p.index_heads = 32;
    p.index_head_dim = 128;
    p.topk = 512;
    p.block_tokens = 64;
    p.compress_ratios = concat({{0, 0}, repeat({2}, 18), repeat({1}, 20), {0, 0, 0}});
    p.indexer_ratios = {1, 2};
    p.attn_heads = 64;
    p.window = 128;
    p.latent_format = LatentFormat::kV4Fp8;
    p.verified = false;  // config from a third-party copy
    ps.push_back(p);
  }
  return ps;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& p : all_presets()) names.push_back(p.name);
  return names;
}

Status get_preset(const std::string& name, ModelPreset* out) {
  if (out == nullptr) return detail::invalid("get_preset", "out is a null pointer");
  std::string known;
  for (const auto& p : all_presets()) {
    if (p.name == name) {
      *out = p;
      return Status::Ok();
    }
    known += (known.empty() ? "" : ", ") + p.name;
  }
  return detail::invalid("get_preset", "name expected one of %s, got \"%s\"", known.c_str(), name.c_str());
}

Status plan(const ModelPreset& preset, std::vector<LayerGeometry>* layers) {
  const char* op = "plan";
  if (layers == nullptr) return detail::invalid(op, "layers is a null pointer");
  const char* name = preset.name.c_str();
  if (preset.block_tokens <= 0) {
    return detail::invalid(op, "%s: block_tokens expected > 0, got %d", name, preset.block_tokens);
  }
  if (preset.index_heads <= 0) {
    return detail::invalid(op, "%s: index_heads expected > 0, got %d", name, preset.index_heads);
  }
  if (preset.index_head_dim != 32 && preset.index_head_dim != 64 && preset.index_head_dim != 128) {
    return detail::invalid(op, "%s: index_head_dim expected 32, 64 or 128, got %d", name, preset.index_head_dim);
  }
  if (preset.topk <= 0) return detail::invalid(op, "%s: topk expected > 0, got %d", name, preset.topk);
  if (preset.compress_ratios.empty()) {
    return detail::invalid(op, "%s: compress_ratios expected at least one layer, got none", name);
  }
  std::vector<LayerGeometry> out;
  out.reserve(preset.compress_ratios.size());
  for (size_t i = 0; i < preset.compress_ratios.size(); ++i) {
    const int layer = static_cast<int>(i);
    const int r = preset.compress_ratios[i];
    LayerGeometry g;
    g.layer = layer;
    g.compress_ratio = r;
    if (r < 0) return detail::invalid(op, "%s: layer %d compress_ratio expected >= 0, got %d", name, layer, r);
    if (r > 0) {
      if (preset.block_tokens % r != 0) {
        return detail::invalid(op, "%s: layer %d compress_ratio expected a divisor of block_tokens %d, got %d",
                               name, layer, preset.block_tokens, r);
      }
      g.states_per_page = preset.block_tokens / r;
      g.latent_tokens_per_page = g.states_per_page;
      g.latent_page_bytes = latent_min_page_bytes(preset.latent_format, g.states_per_page);
      g.has_indexer = std::find(preset.indexer_ratios.begin(), preset.indexer_ratios.end(), r) !=
                      preset.indexer_ratios.end();
      if (g.has_indexer) {
        if (g.states_per_page > kMaxStatesPerPage) {
          return detail::invalid(op, "%s: layer %d (compress ratio %d) states per page expected <= %d, got %d",
                                 name, layer, r, kMaxStatesPerPage, g.states_per_page);
        }
        g.indexer_page_bytes =
            int64_t(g.states_per_page) * indexer_state_bytes(preset.indexer_format, preset.index_head_dim);
        g.topk = preset.topk;
      }
    }
    out.push_back(g);
  }
  *layers = std::move(out);
  return Status::Ok();
}

Status check_indexer_cache(const LayerGeometry& layer, const ModelPreset& preset, const IndexerCache& cache) {
  const char* op = "check_indexer_cache";
  const int L = layer.layer, r = layer.compress_ratio;
  if (!layer.has_indexer) {
    return detail::invalid(op, "layer %d (compress ratio %d) has no indexer cache in %s", L, r, preset.name.c_str());
  }
  if (cache.format != preset.indexer_format) {
    return detail::invalid(op, "layer %d (compress ratio %d) format expected %s, got %s", L, r,
                           indexer_format_name(preset.indexer_format), indexer_format_name(cache.format));
  }
  if (cache.head_dim != preset.index_head_dim) {
    return detail::invalid(op, "layer %d (compress ratio %d) head_dim expected %d, got %d", L, r,
                           preset.index_head_dim, cache.head_dim);
  }
  if (cache.states_per_page != layer.states_per_page) {
    return detail::invalid(op, "layer %d (compress ratio %d) states_per_page expected %d, got %d", L, r,
                           layer.states_per_page, cache.states_per_page);
  }
  if (cache.page_stride_bytes < layer.indexer_page_bytes) {
    return detail::invalid(op, "layer %d (compress ratio %d) page_stride_bytes expected >= %lld, got %lld", L, r,
                           static_cast<long long>(layer.indexer_page_bytes),
                           static_cast<long long>(cache.page_stride_bytes));
  }
  if (cache.page_stride_bytes % 4 != 0) {
    return detail::invalid(op, "layer %d (compress ratio %d) page_stride_bytes expected a multiple of 4, got %lld",
                           L, r, static_cast<long long>(cache.page_stride_bytes));
  }
  const TensorView& pg = cache.pages;
  if (pg.defined()) {
    if (pg.dtype != DType::kU8) {
      return detail::invalid(op, "layer %d (compress ratio %d) pages dtype expected u8, got %s", L, r,
                             dtype_name(pg.dtype));
    }
    if (pg.ndim != 2) {
      return detail::invalid(op, "layer %d (compress ratio %d) pages rank expected 2, got %d (shape %s)", L, r,
                             pg.ndim, shape_str(pg).c_str());
    }
    if (pg.shape[1] < layer.indexer_page_bytes) {
      return detail::invalid(op, "layer %d (compress ratio %d) pages shape[1] expected >= %lld, got %lld", L, r,
                             static_cast<long long>(layer.indexer_page_bytes),
                             static_cast<long long>(pg.shape[1]));
    }
    if (pg.shape[0] > 1 && pg.strides[0] != cache.page_stride_bytes) {
      return detail::invalid(op, "layer %d (compress ratio %d) pages stride[0] expected %lld (page_stride_bytes), got %lld",
                             L, r, static_cast<long long>(cache.page_stride_bytes),
                             static_cast<long long>(pg.strides[0]));
    }
  }
  return Status::Ok();
}

}  // namespace dsattn
