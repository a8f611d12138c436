// Benchmark entry points behind `dsattn bench ...` (tools/ parses the subcommand and hands the
// remaining arguments over). Implemented in bench/*.cu for CUDA builds; bench/bench_nocuda.cpp
// reports that a CUDA build is needed otherwise. Each returns a process exit code.
#pragma once
#include <string>
#include <vector>

namespace dsattn {
namespace bench {

int run_indexer(const std::vector<std::string>& args);  // dsattn bench indexer [...]
int run_fused(const std::vector<std::string>& args);    // dsattn bench indexer --fused [...]
int run_topk(const std::vector<std::string>& args);     // dsattn bench topk [...]
int run_mma(const std::vector<std::string>& args);      // dsattn bench mma [...]
int run_mla(const std::vector<std::string>& args);      // dsattn bench mla [...]

}  // namespace bench
}  // namespace dsattn
