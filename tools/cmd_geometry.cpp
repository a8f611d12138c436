// dsattn geometry / dsattn presets: the per-layer cache geometry of the model presets.
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "cli_args.h"
#include "commands.h"
#include "dsattn/geometry.h"
#include "layer_folding.h"
#include "preset_arg.h"

namespace dsattn {
namespace cli {

namespace {

std::string num_or_dash(int64_t v) { return v ? std::to_string(v) : std::string("-"); }

std::string ratio_text(const LayerGeometry& g) {
  return g.compress_ratio ? std::to_string(g.compress_ratio) : std::string("0 (window only)");
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
  for (const FoldedRow& f : fold_layers(layers)) row(f.layers, layers[f.first]);
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
