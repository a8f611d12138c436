// dsattn bench: parses the benchmark name and hands the remaining arguments to bench/bench.h.
#include <cstdio>
#include <string>
#include <vector>

#include "bench.h"
#include "cli_args.h"
#include "commands.h"

namespace dsattn {
namespace cli {

namespace {
const char kBenchUsage[] =
    "usage: dsattn bench indexer [options]          paged_mqa_logits (logits written to memory)\n"
    "       dsattn bench indexer --fused [options]  paged_mqa_topk (fused indexer + top-k)\n"
    "       dsattn bench topk [options]             topk over a logits matrix\n"
    "\n"
    "Benchmarks need a CUDA build and a GPU. `dsattn bench <name> --help` lists each one's options.\n";
}  // namespace

int cmd_bench(const std::vector<std::string>& args) {
  BenchKind kind = BenchKind::kIndexer;
  std::vector<std::string> rest;
  std::string err;
  switch (parse_bench_args(args, &kind, &rest, &err)) {
    case ParseResult::kHelp: std::fputs(kBenchUsage, stdout); return kExitOk;
    case ParseResult::kError: return usage_error(err);
    case ParseResult::kRun: break;
  }
  switch (kind) {
    case BenchKind::kIndexer: return bench::run_indexer(rest);
    case BenchKind::kFused: return bench::run_fused(rest);
    case BenchKind::kTopk: return bench::run_topk(rest);
  }
  return kExitFailure;
}

}  // namespace cli
}  // namespace dsattn
