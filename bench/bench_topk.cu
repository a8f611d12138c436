// dsattn bench topk: standalone top-k over a [rows, width] fp32 logits matrix.
// For each shape: median time per call (L2 flushed before every call), GB/s counted as reading
// the logits once, and that as a % of the device-to-device copy bandwidth measured in this run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_topk_util.cuh"
#include "cuda/common/topk_plan.h"
#include "dsattn/ops.h"

namespace dsattn {
namespace bench {

namespace {

struct TopkShape {
  int64_t rows, width;
};

int topk_usage() {
  std::printf(
      "usage: dsattn bench topk [--k K] [--iters N] [--sorted] [--bf16] [--shape ROWSxWIDTH ...]\n"
      "                         [--max-direct N] [--min-chunk N]   (split-policy tuning)\n"
      "  default shapes: 1x8192 1x65536 128x32768 64x65536 1x1048576 1x4194304; default k 2048\n");
  return 2;
}

}  // namespace

int run_topk(const std::vector<std::string>& args) {
  int k = 2048, iters = 50;
  bool sorted = false, bf16 = false;
  std::vector<TopkShape> shapes;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool has_next = i + 1 < args.size();
    if (a == "--k" && has_next) {
      k = std::atoi(args[++i].c_str());
    } else if (a == "--iters" && has_next) {
      iters = std::max(1, std::atoi(args[++i].c_str()));
    } else if (a == "--sorted") {
      sorted = true;
    } else if (a == "--max-direct" && has_next) {
      cuda::topk_tuning().max_direct = std::atoi(args[++i].c_str());
    } else if (a == "--min-chunk" && has_next) {
      cuda::topk_tuning().min_chunk = std::atoi(args[++i].c_str());
    } else if (a == "--bf16") {
      bf16 = true;
    } else if (a == "--shape" && has_next) {
      long long r = 0, w = 0;
      if (std::sscanf(args[++i].c_str(), "%lldx%lld", &r, &w) != 2 || r < 1 || w < 1) return topk_usage();
      shapes.push_back({r, w});
    } else {
      return topk_usage();
    }
  }
  if (shapes.empty()) shapes = {{1, 8192}, {1, 65536}, {128, 32768}, {64, 65536}, {1, 1 << 20}, {1, 1 << 22}};
  if (!cuda_available()) {
    std::fprintf(stderr, "dsattn bench topk: no CUDA device\n");
    return 1;
  }
  BenchContext ctx;
  if (!ctx.init()) return 1;
  std::printf("device: %s, %d SMs; copy bandwidth %.0f GB/s (read + write)\n", ctx.device_name.c_str(), ctx.num_sms,
              ctx.copy_gbps);
  std::printf("topk k=%d %s%s, L2 flushed before each call, median of %d; GB/s and %% copy from the graph time\n\n", k, bf16 ? "bf16" : "f32",
              sorted ? " sorted" : "", iters);
  std::printf("%10s %9s %12s %10s %10s %8s %9s %12s  %s\n", "rows", "width", "logits MB", "eager us", "graph us",
              "GB/s", "% copy", "workspace MB", "plan");
  const size_t esz = bf16 ? 2 : 4;
  for (const TopkShape& s : shapes) {
    const size_t n = static_cast<size_t>(s.rows * s.width);
    DevMem logits(n * esz), idx(static_cast<size_t>(s.rows) * k * 4);
    if (!logits.ok() || !idx.ok()) {
      std::fprintf(stderr, "out of memory for %lldx%lld\n", static_cast<long long>(s.rows), static_cast<long long>(s.width));
      return 1;
    }
    fill_random(logits.p, n, bf16);
    TopkParams p;
    p.logits = make_tensor(logits.p, bf16 ? DType::kBF16 : DType::kF32, {s.rows, s.width}, Device::kCuda);
    p.indices = make_tensor(idx.p, DType::kI32, {s.rows, k}, Device::kCuda);
    p.k = k;
    p.sorted = sorted;
    Exec ex;
    size_t ws_bytes = 0;
    Status st = topk_workspace(p, ex, &ws_bytes);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.to_string().c_str());
      return 1;
    }
    DevMem ws(ws_bytes);
    ex.workspace = ws.p;
    ex.workspace_bytes = ws_bytes;
    auto call = [&](cudaStream_t stream) {
      ex.stream = stream;
      const Status s2 = topk(p, ex);
      if (!s2.ok()) st = s2;
    };
    const float eager_us = ctx.time_median_us(iters, call, false);
    const float us = ctx.time_median_us(iters, call, true);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.to_string().c_str());
      return 1;
    }
    const double gbps = n * esz / (us * 1e3);
    cuda::TopkDeviceLimits lim;
    cuda::TopkPlan plan;
    char plan_str[64] = "?";
    if (cuda::topk_device_limits(ex, &lim).ok() && cuda::plan_topk(s.rows, s.width, k, lim, &plan).ok()) {
      if (plan.direct) {
        std::snprintf(plan_str, sizeof(plan_str), "direct");
      } else {
        std::snprintf(plan_str, sizeof(plan_str), "%d chunks of %d, %d merge levels", plan.chunks, plan.chunk_len,
                      plan.levels);
      }
    }
    std::printf("%10lld %9lld %12.2f %10.2f %10.2f %8.0f %8.1f%% %12.2f  %s\n", static_cast<long long>(s.rows),
                static_cast<long long>(s.width), n * esz / 1e6, eager_us, us, gbps, 100.0 * gbps / ctx.copy_gbps,
                ws_bytes / 1e6, plan_str);
  }
  return 0;
}

}  // namespace bench
}  // namespace dsattn
