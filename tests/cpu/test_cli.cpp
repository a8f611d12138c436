// Argument parsing of the dsattn command-line program (tools/cli_args.h is header-only).
#include <gtest/gtest.h>

#include "../../tools/cli_args.h"
#include "../../tools/layer_folding.h"

using namespace dsattn::cli;

namespace {
std::vector<std::string> A(std::initializer_list<const char*> a) { return {a.begin(), a.end()}; }
}  // namespace

TEST(CliArgs, DemoDefaults) {
  DemoOptions o;
  std::string err;
  ASSERT_EQ(parse_demo_args({}, &o, &err), ParseResult::kRun);
  EXPECT_EQ(o.preset, "deepseek-v4.1-flash");
  EXPECT_EQ(o.batch, 4);
  EXPECT_EQ(o.context, 8192);
  EXPECT_EQ(o.next_n, 1);
  EXPECT_EQ(o.backend, "auto");
  EXPECT_TRUE(o.check);
}

TEST(CliArgs, DemoValuesBothSpellings) {
  DemoOptions o;
  std::string err;
  ASSERT_EQ(parse_demo_args(A({"--batch", "7", "--context=1000", "--next-n", "3", "--backend=cpu",
                               "--preset", "deepseek-v3.2", "--seed", "42", "--no-check"}),
                            &o, &err),
            ParseResult::kRun)
      << err;
  EXPECT_EQ(o.batch, 7);
  EXPECT_EQ(o.context, 1000);
  EXPECT_EQ(o.next_n, 3);
  EXPECT_EQ(o.backend, "cpu");
  EXPECT_EQ(o.preset, "deepseek-v3.2");
  EXPECT_EQ(o.seed, 42u);
  EXPECT_FALSE(o.check);
}

TEST(CliArgs, DemoHelp) {
  DemoOptions o;
  std::string err;
  EXPECT_EQ(parse_demo_args(A({"--batch", "2", "--help"}), &o, &err), ParseResult::kHelp);
  EXPECT_EQ(parse_demo_args(A({"-h"}), &o, &err), ParseResult::kHelp);
}

TEST(CliArgs, DemoErrorsNameTheValueAndTheAccepted) {
  DemoOptions o;
  std::string err;
  EXPECT_EQ(parse_demo_args(A({"--bach", "3"}), &o, &err), ParseResult::kError);
  EXPECT_EQ(err, "dsattn demo: unknown flag '--bach' (accepted: --preset, --batch, --context, --next-n, "
                 "--backend, --seed, --no-check, --help)");
  EXPECT_EQ(parse_demo_args(A({"--backend", "gpu"}), &o, &err), ParseResult::kError);
  EXPECT_EQ(err, "dsattn demo: unknown --backend 'gpu' (accepted: auto, cpu, cuda)");
  EXPECT_EQ(parse_demo_args(A({"--next-n", "9"}), &o, &err), ParseResult::kError);
  EXPECT_EQ(err, "dsattn demo: --next-n 9 is out of range (accepted: an integer in [1, 8])");
  EXPECT_EQ(parse_demo_args(A({"--batch", "4x"}), &o, &err), ParseResult::kError);
  EXPECT_EQ(err, "dsattn demo: --batch '4x' is not a number (accepted: an integer in [1, 256])");
  EXPECT_EQ(parse_demo_args(A({"--context"}), &o, &err), ParseResult::kError);
  EXPECT_EQ(err, "dsattn demo: flag '--context' needs a value (TOKENS)");
  EXPECT_EQ(parse_demo_args(A({"--no-check=1"}), &o, &err), ParseResult::kError);
  EXPECT_EQ(err, "dsattn demo: flag '--no-check' takes no value, got '1'");
  EXPECT_EQ(parse_demo_args(A({"extra"}), &o, &err), ParseResult::kError);
  EXPECT_NE(err.find("unexpected argument 'extra'"), std::string::npos);
  EXPECT_EQ(parse_demo_args(A({"--context", "99999999999999999999"}), &o, &err), ParseResult::kError);
  EXPECT_NE(err.find("is not a number"), std::string::npos);
}

TEST(CliArgs, IntRange) {
  int64_t v = 0;
  std::string err;
  EXPECT_TRUE(parse_int("c", "x", "-3", -5, 5, &v, &err));
  EXPECT_EQ(v, -3);
  EXPECT_FALSE(parse_int("c", "x", "6", -5, 5, &v, &err));
  EXPECT_FALSE(parse_int("c", "x", "", -5, 5, &v, &err));
  EXPECT_FALSE(parse_int("c", "x", " 1", -5, 5, &v, &err));
}

TEST(CliArgs, Bench) {
  BenchKind kind = BenchKind::kTopk;
  std::vector<std::string> rest;
  std::string err;
  ASSERT_EQ(parse_bench_args(A({"indexer", "--heads", "32"}), &kind, &rest, &err), ParseResult::kRun);
  EXPECT_EQ(kind, BenchKind::kIndexer);
  EXPECT_EQ(rest, A({"--heads", "32"}));
  ASSERT_EQ(parse_bench_args(A({"indexer", "--heads", "32", "--fused"}), &kind, &rest, &err), ParseResult::kRun);
  EXPECT_EQ(kind, BenchKind::kFused);
  EXPECT_EQ(rest, A({"--heads", "32"}));
  ASSERT_EQ(parse_bench_args(A({"topk", "--k", "512"}), &kind, &rest, &err), ParseResult::kRun);
  EXPECT_EQ(kind, BenchKind::kTopk);
  EXPECT_EQ(rest, A({"--k", "512"}));
  ASSERT_EQ(parse_bench_args(A({"mma", "--warps", "12"}), &kind, &rest, &err), ParseResult::kRun);
  EXPECT_EQ(kind, BenchKind::kMma);
  EXPECT_EQ(rest, A({"--warps", "12"}));
  ASSERT_EQ(parse_bench_args(A({"mla", "--batch", "4"}), &kind, &rest, &err), ParseResult::kRun);
  EXPECT_EQ(kind, BenchKind::kMla);
  EXPECT_EQ(rest, A({"--batch", "4"}));
  EXPECT_EQ(parse_bench_args(A({"--help"}), &kind, &rest, &err), ParseResult::kHelp);
  EXPECT_EQ(parse_bench_args(A({"attention"}), &kind, &rest, &err), ParseResult::kError);
  EXPECT_EQ(err, "dsattn bench: unknown benchmark 'attention' (accepted: indexer, indexer --fused, topk, mma, mla)");
  EXPECT_EQ(parse_bench_args({}, &kind, &rest, &err), ParseResult::kError);
}

namespace {
dsattn::LayerGeometry L(int layer, int ratio, int spp) {
  dsattn::LayerGeometry g;
  g.layer = layer;
  g.compress_ratio = ratio;
  g.states_per_page = spp;
  return g;
}
std::vector<std::string> labels(const std::vector<dsattn::LayerGeometry>& layers) {
  std::vector<std::string> out;
  for (const FoldedRow& r : fold_layers(layers)) out.push_back(r.layers + ":" + std::to_string(layers[r.first].compress_ratio));
  return out;
}
}  // namespace

TEST(CliGeometryTable, RangesOfIdenticalLayers) {
  // [0,0] + [2]*3 + [1]*2 + [0]
  std::vector<dsattn::LayerGeometry> g = {L(0, 0, 0), L(1, 0, 0), L(2, 2, 32), L(3, 2, 32),
                                          L(4, 2, 32), L(5, 1, 64), L(6, 1, 64), L(7, 0, 0)};
  EXPECT_EQ(labels(g), A({"0-1:0", "2-4:2", "5-6:1", "7:0"}));
}

TEST(CliGeometryTable, AlternatingLayersFoldPerKind) {
  // [0,0] + [4,128]*3 + [4,0]
  std::vector<dsattn::LayerGeometry> g = {L(0, 0, 0), L(1, 0, 0)};
  for (int i = 0; i < 3; ++i) {
    g.push_back(L(2 + 2 * i, 4, 64));
    g.push_back(L(3 + 2 * i, 128, 2));
  }
  g.push_back(L(8, 4, 64));
  g.push_back(L(9, 0, 0));
  EXPECT_EQ(labels(g), A({"0-1:0", "2-6 every 2nd:4", "3-7 every 2nd:128", "8:4", "9:0"}));
  // Two repeats are not folded.
  std::vector<dsattn::LayerGeometry> h = {L(0, 4, 64), L(1, 128, 2), L(2, 4, 64), L(3, 128, 2)};
  EXPECT_EQ(labels(h), A({"0:4", "1:128", "2:4", "3:128"}));
}
