// Benchmark entry points for builds without CUDA: the benchmarks time GPU kernels only.
#if !DSATTN_WITH_CUDA
#include <cstdio>

#include "bench.h"

namespace dsattn {
namespace bench {
namespace {
int needs_cuda() {
  std::fprintf(stderr, "dsattn bench needs a CUDA build\n");
  return 2;
}
}  // namespace

int run_indexer(const std::vector<std::string>&) { return needs_cuda(); }
int run_fused(const std::vector<std::string>&) { return needs_cuda(); }
int run_topk(const std::vector<std::string>&) { return needs_cuda(); }
int run_mma(const std::vector<std::string>&) { return needs_cuda(); }
int run_mla(const std::vector<std::string>&) { return needs_cuda(); }

}  // namespace bench
}  // namespace dsattn
#endif  // !DSATTN_WITH_CUDA
