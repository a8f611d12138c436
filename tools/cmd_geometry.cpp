// dsattn geometry / dsattn presets: the per-layer cache geometry of the model presets.
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "cli_args.h"
#include "commands.h"
#include "dsattn/geometry.h"
#include "preset_arg.h"

namespace dsattn {
namespace cli {

namespace {

constexpr size_t kMaxPeriod = 4;  // longest repeating layer pattern folded into one row per layer kind
constexpr size_t kMinCycles = 3;

std::string num_or_dash(int64_t v) { return v ? std::to_string(v) : std::string("-"); }

std::string ratio_text(const LayerGeometry& g) {
  return g.compress_ratio ? std::to_string(g.compress_ratio) : std::string("0 (window only)");
}

bool same_geometry(const LayerGeometry& a, const LayerGeometry& b) {
  return a.compress_ratio == b.compress_ratio && a.has_indexer == b.has_indexer &&
         a.states_per_page == b.states_per_page && a.indexer_page_bytes == b.indexer_page_bytes &&
         a.latent_tokens_per_page == b.latent_tokens_per_page &&
         a.latent_page_bytes == b.latent_page_bytes && a.topk == b.topk;
}

}  // namespace

std::string preset_summary(const ModelPreset& p) {
  std::set<int> ratios(p.compress_ratios.begin(), p.compress_ratios.end());
  std::vector<std::string> r;
  for (int x : ratios) r.push_back(std::to_string(x));
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "%zu layers, compress ratios {%s}, %d tokens/page, indexer %dx%d %s, top-k %d, "
                "latent %s with %d heads, window %d%s",
                p.compress_ratios.size(), join(r, ",").c_str(), p.block_tokens, p.index_heads,
                p.index_head_dim, indexer_format_name(p.indexer_format), p.topk,
                latent_format_name(p.latent_format), p.attn_heads, p.window,
                p.verified ? "" : " (unverified config)");
  return buf;
}

int cmd_geometry(const std::vector<std::string>& args) {
  const std::vector<FlagSpec> specs = {
      {"preset", true, "NAME", "model preset (see `dsattn presets`)"},
      {"help", false, "", "show this help"},
  };
  FlagValues v;
  std::string err;
  if (!parse_flags("dsattn geometry", args, specs, &v, &err)) return usage_error(err);
  if (v.count("help")) {
    std::printf("usage: dsattn geometry --preset NAME\n\n"
                "Per-layer cache geometry: compress ratio r, indexer states per page (block tokens / "
                "r),\nbytes of one indexer page and one latent page, top-k. Identical consecutive "
                "layers are\nshown as one range.\n\n%s",
                flags_help(specs).c_str());
    return kExitOk;
  }
  if (!v.count("preset"))
    return usage_error("dsattn geometry: --preset is required (accepted: " + join(preset_names()) + ")");
  ModelPreset preset;
  if (!lookup_preset("dsattn geometry", v["preset"], &preset, &err)) return usage_error(err);
  std::vector<LayerGeometry> layers;
  const Status st = plan(preset, &layers);
  if (!st.ok()) {
    std::fprintf(stderr, "dsattn geometry: %s\n", st.to_string().c_str());
    return kExitFailure;
  }
  std::printf("%s: %s\n\n", preset.name.c_str(), preset_summary(preset).c_str());
  auto row = [](const std::string& range, const LayerGeometry& g) {
    std::printf("%-16s %-16s %12s %15s %14s %6s\n", range.c_str(), ratio_text(g).c_str(),
                num_or_dash(g.states_per_page).c_str(), num_or_dash(g.indexer_page_bytes).c_str(),
                num_or_dash(g.latent_page_bytes).c_str(), num_or_dash(g.topk).c_str());
  };
  std::printf("%-16s %-16s %12s %15s %14s %6s\n", "layers", "ratio", "states/page", "indexer page B",
              "latent page B", "top-k");
  const size_t n = layers.size();
  for (size_t i = 0; i < n;) {
    // A cycle of single layers repeated >= kMinCycles times (V4: 4, 128, 4, 128, ...) prints as
    // one row per position in the cycle; otherwise identical consecutive layers form one range.
    size_t period = 0, cycles = 0;
    for (size_t p = 2; p <= kMaxPeriod && !period; ++p) {
      if (i + p > n || same_geometry(layers[i], layers[i + 1])) break;
      size_t m = p;
      while (i + m < n && same_geometry(layers[i + m], layers[i + m % p])) ++m;
      if (m / p >= kMinCycles) {
        period = p;
        cycles = m / p;
      }
    }
    if (period) {
      const char* nth[] = {"", "", "2nd", "3rd", "4th"};
      for (size_t q = 0; q < period; ++q)
        row(std::to_string(layers[i + q].layer) + "-" + std::to_string(layers[i + q + (cycles - 1) * period].layer) +
                " every " + nth[period],
            layers[i + q]);
      i += period * cycles;
      continue;
    }
    size_t j = i + 1;
    while (j < n && same_geometry(layers[i], layers[j])) ++j;
    row(j - i == 1 ? std::to_string(layers[i].layer)
                   : std::to_string(layers[i].layer) + "-" + std::to_string(layers[j - 1].layer),
        layers[i]);
    i = j;
  }
  return kExitOk;
}

int cmd_presets(const std::vector<std::string>& args) {
  const std::vector<FlagSpec> specs = {{"help", false, "", "show this help"}};
  FlagValues v;
  std::string err;
  if (!parse_flags("dsattn presets", args, specs, &v, &err)) return usage_error(err);
  if (v.count("help")) {
    std::printf("usage: dsattn presets\n\nLists the model presets usable with --preset.\n");
    return kExitOk;
  }
  for (const std::string& name : preset_names()) {
    ModelPreset p;
    const Status st = get_preset(name, &p);
    if (!st.ok()) {
      std::fprintf(stderr, "dsattn presets: %s\n", st.to_string().c_str());
      return kExitFailure;
    }
    std::printf("%-22s %s\n", name.c_str(), preset_summary(p).c_str());
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace dsattn
