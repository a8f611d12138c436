// Folding of a per-layer geometry list into table rows for `dsattn geometry`. Header-only so that
// tests/cpu/test_cli.cpp can check it.
#pragma once
#include <string>
#include <vector>

#include "dsattn/geometry.h"

namespace dsattn {
namespace cli {

constexpr size_t kMaxPeriod = 4;  // longest repeating layer pattern folded into one row per layer kind
constexpr size_t kMinCycles = 3;  // repeats needed before a pattern is folded

inline bool same_geometry(const LayerGeometry& a, const LayerGeometry& b) {
  return a.compress_ratio == b.compress_ratio && a.has_indexer == b.has_indexer &&
         a.states_per_page == b.states_per_page && a.indexer_page_bytes == b.indexer_page_bytes &&
         a.latent_tokens_per_page == b.latent_tokens_per_page &&
         a.latent_page_bytes == b.latent_page_bytes && a.topk == b.topk;
}

struct FoldedRow {
  std::string layers;  // "2-19", "7", "2-40 every 2nd"
  size_t first = 0;    // index of a layer the row stands for
};

// Identical consecutive layers form one range ("2-19"). A cycle of single layers repeated at least
// kMinCycles times (V4: 4, 128, 4, 128, ...) gives one row per position in the cycle
// ("2-40 every 2nd", "3-41 every 2nd").
inline std::vector<FoldedRow> fold_layers(const std::vector<LayerGeometry>& layers) {
  std::vector<FoldedRow> rows;
  const size_t n = layers.size();
  for (size_t i = 0; i < n;) {
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
        rows.push_back({std::to_string(layers[i + q].layer) + "-" +
                            std::to_string(layers[i + q + (cycles - 1) * period].layer) + " every " + nth[period],
                        i + q});
      i += period * cycles;
      continue;
    }
    size_t j = i + 1;
    while (j < n && same_geometry(layers[i], layers[j])) ++j;
    rows.push_back({j - i == 1 ? std::to_string(layers[i].layer)
                               : std::to_string(layers[i].layer) + "-" + std::to_string(layers[j - 1].layer),
                    i});
    i = j;
  }
  return rows;
}

}  // namespace cli
}  // namespace dsattn
