// dsattn bench: parses the benchmark name and hands the remaining arguments to bench/bench.h.
#include <cstdio>
#include <string>
#include <vector>

#include "bench.h"
#include "cli_args.h"
#include "commands.h"

// The benchmarks live in bench/*.cu (CUDA builds) and bench/bench_nocuda.cpp (other builds), which
// land separately from this file. Weak references let a CUDA build that lacks one of them link and
// report it, instead of failing to build the whole program.
namespace dsattn {
namespace bench {
int run_indexer(const std::vector<std::string>& args) __attribute__((weak));
int run_fused(const std::vector<std::string>& args) __attribute__((weak));
int run_topk(const std::vector<std::string>& args) __attribute__((weak));
int run_mma(const std::vector<std::string>& args) __attribute__((weak));
int run_mla(const std::vector<std::string>& args) __attribute__((weak));
}  // namespace bench

namespace cli {

namespace {
const char kBenchUsage[] =
    "usage: dsattn bench indexer [options]          paged_mqa_logits (logits written to memory)\n"
    "       dsattn bench indexer --fused [options]  paged_mqa_topk (fused indexer + top-k)\n"
    "       dsattn bench topk [options]             topk over a logits matrix\n"
    "       dsattn bench mma [options]              mma.sync and E4M3-conversion ceilings (portable kernel)\n"
    "       dsattn bench mla [options]              sparse_mla_decode: scalar and tensor-core kernels\n"
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
  using Fn = int (*)(const std::vector<std::string>&);
  Fn fn = nullptr;
  const char* name = "";
  switch (kind) {
    case BenchKind::kIndexer: fn = bench::run_indexer, name = "indexer"; break;
    case BenchKind::kFused: fn = bench::run_fused, name = "indexer --fused"; break;
    case BenchKind::kTopk: fn = bench::run_topk, name = "topk"; break;
    case BenchKind::kMma: fn = bench::run_mma, name = "mma"; break;
    case BenchKind::kMla: fn = bench::run_mla, name = "mla"; break;
  }
  if (fn == nullptr) {
    std::fprintf(stderr, "dsattn bench %s: this build has no such benchmark yet (bench/*.cu does not define it)\n", name);
    return kExitFailure;
  }
  return fn(rest);
}

}  // namespace cli
}  // namespace dsattn
