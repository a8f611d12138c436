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

namespace {

std::string ratio_list(const std::vector<int>& v) {
  std::set<int> uniq(v.begin(), v.end());
  std::vector<std::string> r;
  for (int x : uniq) r.push_back(std::to_string(x));
  return join(r, ",");
}

// Columns shared by `dsattn presets` and the header of `dsattn geometry`.
const char kPresetRow[] = "%-20s %6s  %-8s %-10s %11s  %-11s %5s  %-14s %6s  %s";

void print_trimmed(const char* line) {
  std::string s(line);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  std::printf("%s\n", s.c_str());
}

void print_preset_header() {
  char buf[256];
  std::snprintf(buf, sizeof(buf), kPresetRow, "preset", "layers", "ratios", "indexer at", "tokens/page", "indexer",
                "top-k", "latent", "window", "");
  print_trimmed(buf);
}

void print_preset_row(const ModelPreset& p) {
  const std::string idx = std::to_string(p.index_heads) + "x" + std::to_string(p.index_head_dim) + " " +
                          indexer_format_name(p.indexer_format);
  const std::string lat = std::string(latent_format_name(p.latent_format)) + ", " + std::to_string(p.attn_heads) + " h";
  char buf[256];
  std::snprintf(buf, sizeof(buf), kPresetRow, p.name.c_str(), std::to_string(p.compress_ratios.size()).c_str(),
              ratio_list(p.compress_ratios).c_str(), ratio_list(p.indexer_ratios).c_str(),
              std::to_string(p.block_tokens).c_str(), idx.c_str(), std::to_string(p.topk).c_str(), lat.c_str(),
              std::to_string(p.window).c_str(), p.verified ? "" : "(unverified config)");
  print_trimmed(buf);
}

}  // namespace

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
  print_preset_header();
  print_preset_row(preset);
  std::printf("\n");
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
    std::printf("usage: dsattn presets\n\nLists the model presets usable with --preset: layers, the compress ratios\n"
                "of their layers (0 = sliding window only) and those that own an indexer, tokens per\n"
                "cache page, indexer heads x head dim and format, top-k, latent cache format and\n"
                "attention heads, sliding window in tokens.\n");
    return kExitOk;
  }
  print_preset_header();
  for (const std::string& name : preset_names()) {
    ModelPreset p;
    const Status st = get_preset(name, &p);
    if (!st.ok()) {
      std::fprintf(stderr, "dsattn presets: %s\n", st.to_string().c_str());
      return kExitFailure;
    }
    print_preset_row(p);
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace dsattn
