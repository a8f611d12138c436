// dsattn bench topk: standalone top-k over a [rows, width] fp32 logits matrix.
// For each shape: median time per call (L2 flushed before every call), GB/s counted as reading
// the logits once, and that as a % of the device-to-device copy bandwidth measured in this run.
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_sms.cuh"
#include "bench_topk_util.cuh"
#include "bench_util.cuh"
#include "cuda/common/topk_plan.h"
#include "dsattn/ops.h"

namespace dsattn {
namespace bench {

namespace {

struct TopkShape {
  int64_t rows, width;
};

int topk_usage(int rc = 2) {
  std::printf(
      "usage: dsattn bench topk [--k K] [--iters N] [--sorted] [--bf16] [--no-flush] [--cold] [--follower plain|pdl]\n"
      "                         [--sms N] [--runs L] [--grid G]\n"
      "                         [--spread]\n"
      "                         [--shape ROWSxWIDTH ...]\n"
      "                         [--max-direct N] [--min-chunk N] [--filter-min N] [--small-max N]\n"
      "                         [--cluster-max N] [--cluster-v4-max N] [--cluster-gather 0|1]\n"
      "                         [--sampled-min N] [--sampled-rows N]\n"
      "                         [--sampled-select window|radix] [--sampled-pipe 0|1] [--sampled-l2 N]\n"
      "                         [--sampled-fixed 0|1]\n"
      "                         (plan tuning; --small-max N: keys-in-registers kernel for direct rows\n"
      "                         up to width N (<= 8192), 0: never;\n"
      "                         --cluster-max N: cluster kernel (sm_90+) for rows of 8K..64K when the\n"
      "                         call needs at most N CTAs (one per 8192 positions), 0: never;\n"
      "                         --cluster-v4-max N: rows up to N wide take it at 4 keys per thread\n"
      "                         (a CTA per 4096 positions, still <= 8 per cluster), 0: never;\n"
      "                         --cluster-gather 0: its threshold by two more cluster-wide digits\n"
      "                         instead of the first digit's bin gathered into every CTA (default 1);\n"
      "                         --filter-min N: threshold-filter plan from width N on, any rows;\n"
      "                         0: never; --sampled-min N / --sampled-rows N: sampled-threshold kernel\n"
      "                         for rows of width N .. 256K when there are at least that many rows\n"
      "                         (per 64K of width for wider rows),\n"
      "                         --sampled-min 0: never; --sampled-select: its selection over the\n"
      "                         candidates; --sampled-pipe: its stream's loads a tile ahead, default\n"
      "                         up to one row per SM; --sampled-l2 N: its L2 prefetch, N tiles ahead,\n"
      "                         0: none; --sampled-fixed 0: its candidate capacity as a run-time value\n"
      "                         even where it is the 8192 constant, default 1)\n"
      "  default shapes: 1x8192 1x65536 128x32768 64x65536 1x1048576 1x4194304; default k 2048\n"
      "  --quick: 1x8192 1x65536 128x32768\n"
      "  --runs L: neighbouring values alike (runs of L share a component, correlation 0.64; default 1: independent)\n"
      "  --grid G: values rounded to multiples of G (heavy ties; e.g. 1: a few distinct values above the k-th)\n"
      "  --spread: random finite floats of every exponent instead (keys spread evenly over the first radix\n"
      "            digit's bins: few same-bin atomics, a small bin at the k-th key; a diagnostic)\n"
      "  --sms N: run on a green context of at least N SMs (the copy baseline too)\n"
      "  --cold: before each timed call (after the flush), 225 KiB of other code run on every SM, so the\n"
      "          op's instructions are fetched cold, as where an engine runs other kernels between its\n"
      "          calls (the launch floor is timed the same way)\n"
      "  --follower plain|pdl: after each call, in the same graph, a kernel of one CTA per SM that reads\n"
      "          the op's output, launched in plain stream order or with PDL (griddepcontrol.wait first),\n"
      "          as an engine's next kernel may be (the launch floor too)\n");
  return rc;
}

// --follower's value; false when it is neither plain nor pdl.
bool parse_follower(const std::string& v, Follower* f) {
  if (v == "plain") {
    *f = Follower::kPlain;
  } else if (v == "pdl") {
    *f = Follower::kPdl;
  } else {
    std::fprintf(stderr, "bench: --follower expects plain or pdl, got %s\n", v.c_str());
    return false;
  }
  return true;
}

// The top-k plan flags (topk_usage), shared by bench topk and bench indexer --fused (whose logits
// route runs topk's plans). Returns 1 when args[*i] was one (consuming its value), 0 when it is not
// one, -1 when its value is bad.
int parse_topk_tuning(const std::vector<std::string>& args, size_t* i) {
  const std::string& a = args[*i];
  if (*i + 1 >= args.size()) return 0;
  const std::string& v = args[*i + 1];
  cuda::TopkTuning& t = cuda::topk_tuning();
  if (a == "--max-direct") {
    t.max_direct = std::atoi(v.c_str());
  } else if (a == "--min-chunk") {
    t.min_chunk = std::atoi(v.c_str());
  } else if (a == "--cluster-max") {
    t.cluster_max_ctas = std::atoi(v.c_str());
  } else if (a == "--cluster-v4-max") {
    t.cluster_v4_max_width = std::atoi(v.c_str());
  } else if (a == "--cluster-gather") {
    if (v != "0" && v != "1") {
      std::fprintf(stderr, "bench: --cluster-gather expects 0 or 1, got %s\n", v.c_str());
      return -1;
    }
    t.cluster_gather = v == "1";
  } else if (a == "--sampled-min") {
    t.sampled_min_width = std::atoi(v.c_str());
  } else if (a == "--sampled-pipe") {
    if (v != "0" && v != "1") {
      std::fprintf(stderr, "bench: --sampled-pipe expects 0 or 1, got %s\n", v.c_str());
      return -1;
    }
    t.sampled_pipe = std::atoi(v.c_str());
  } else if (a == "--sampled-fixed") {
    t.sampled_fixed_mcap = std::atoi(v.c_str()) != 0;
  } else if (a == "--sampled-l2") {
    t.sampled_l2_ahead = std::atoi(v.c_str());
  } else if (a == "--sampled-rows") {
    t.sampled_min_rows = t.sampled_min_rows_wide = std::atoi(v.c_str());
  } else if (a == "--sampled-select") {
    if (v != "window" && v != "radix") {
      std::fprintf(stderr, "bench: --sampled-select expects window or radix, got %s\n", v.c_str());
      return -1;
    }
    t.sampled_window = v == "window";
  } else if (a == "--small-max") {
    t.small_max_width = std::atoi(v.c_str());
  } else if (a == "--filter-min") {
    t.filter_min_width = std::atoi(v.c_str());
    t.filter_max_rows = 0;  // any number of rows
  } else {
    return 0;
  }
  ++*i;
  return 1;
}

}  // namespace

int run_topk(const std::vector<std::string>& args) {
  int k = 2048, iters = 50;
  long sms = 0;
  bool sorted = false, bf16 = false, flush = true, cold = false;
  Follower follower = Follower::kNone;
  long long runs = 1;
  float grid = 0.0f;
  bool spread = false;
  std::vector<TopkShape> shapes;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool has_next = i + 1 < args.size();
    if (a == "--help" || a == "-h") {
      return topk_usage(0);
    } else if (a == "--quick") {
      shapes = {{1, 8192}, {1, 65536}, {128, 32768}};
    } else if (a == "--k" && has_next) {
      k = std::atoi(args[++i].c_str());
    } else if (a == "--iters" && has_next) {
      iters = std::max(1, std::atoi(args[++i].c_str()));
    } else if (a == "--sorted") {
      sorted = true;
    } else if (a == "--no-flush") {
      flush = false;
    } else if (a == "--cold") {
      cold = true;
    } else if (a == "--follower" && has_next) {
      if (!parse_follower(args[++i], &follower)) return topk_usage();
    } else if (int t = parse_topk_tuning(args, &i); t != 0) {
      if (t < 0) return topk_usage();
    } else if (a == "--sms" && has_next) {
      sms = std::atol(args[++i].c_str());
    } else if (a == "--bf16") {
      bf16 = true;
    } else if (a == "--runs" && has_next) {
      runs = std::atoll(args[++i].c_str());
      if (runs < 1) return topk_usage();
    } else if (a == "--spread") {
      spread = true;
    } else if (a == "--grid" && has_next) {
      grid = std::strtof(args[++i].c_str(), nullptr);
      if (!(grid > 0.0f)) return topk_usage();
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
  if (!use_sm_share(sms)) return 1;
  BenchContext ctx;
  if (!ctx.init()) return 1;
  ctx.flush_l2 = flush;
  ctx.cold_code = cold;
  ctx.follower = follower;
  std::printf("device: %s, %d SMs; copy bandwidth %.0f GB/s (read + write)\n", ctx.device_name.c_str(), ctx.num_sms,
              ctx.copy_gbps);
  std::printf("topk k=%d %s%s, %s%s, median of %d; GB/s and %% copy from the graph time\n", k, bf16 ? "bf16" : "f32",
              sorted ? " sorted" : "", ctx.conditions(), ctx.follower_name(), iters);
  if (runs > 1) std::printf("values: runs of %lld neighbours share a component (correlation 0.64)\n", runs);
  if (grid > 0.0f) std::printf("values: rounded to multiples of %g (ties)\n", grid);
  if (spread) std::printf("values: random finite floats of every exponent (--spread)\n");
  std::printf("launch floor (an empty kernel timed the same way): %.2f us\n\n", ctx.launch_floor_us(iters));
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
    fill_random(logits.p, n, bf16, 1234, runs, grid, spread);
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
    ctx.follow_src = idx.p;
    ctx.follow_bytes = idx.bytes;
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
    ex.stream = nullptr;  // the timing streams are destroyed; the plan asks which SMs the stream has
    cuda::TopkDeviceLimits lim;
    cuda::TopkPlan plan;
    char plan_str[128] = "?";
    if (cuda::topk_device_limits(ex, &lim).ok() && cuda::plan_topk(s.rows, s.width, k, lim, &plan).ok()) {
      if (plan.filter) {
        std::snprintf(plan_str, sizeof(plan_str), "filter: %d tiles of %d%s", plan.f_tiles, 512 * plan.f_per,
                      plan.f_digit2 ? ", 2 digits" : "");
      } else if (plan.sampled) {
        std::snprintf(plan_str, sizeof(plan_str), "sampled threshold, one CTA per row, <= %d candidates, %s%s",
                      plan.s_mcap, plan.s_window && !bf16 ? "window select" : "radix select",
                      plan.s_pipe ? ", loads a tile ahead" : "");
      } else if (plan.cluster > 0) {
        std::snprintf(plan_str, sizeof(plan_str), "cluster of %d CTAs per row, %d keys per thread", plan.cluster,
                      plan.small_v);
      } else if (plan.direct && plan.small_v > 0) {
        std::snprintf(plan_str, sizeof(plan_str), "direct, %d keys per thread in registers", plan.small_v);
      } else if (plan.direct) {
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


// ---------------------------------------------------------------- dsattn bench indexer --fused
// Decode shapes: B requests x ctx states, N rows each, S states per page, H heads x D. For each:
// paged_mqa_logits alone, unfused (paged_mqa_logits + topk) and fused paged_mqa_topk, median graph
// time with L2 flushed before each call; device memory each needs beyond its inputs (workspace +
// outputs, plus the logits for the unfused path); GB/s over the cache bytes read once; and whether
// fused and unfused return the same indices (rows equal / rows).
namespace {

struct FusedShape {
  int B, ctx, N, S, H, D;
};

__global__ void bench_fill_cache_kernel(uint8_t* pages, int64_t num_pages, int64_t stride, int S, int rb,
                                        uint64_t seed = 0, int fp4 = 0) {
  const int64_t n = num_pages * stride;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = i / stride, o = i % stride;
    uint64_t z = (i + 7 + seed * 0xD1B54A32D192ED03ull) * 0x9E3779B97F4A7C15ull;
    z ^= z >> 29;
    z *= 0xBF58476D1CE4E5B9ull;
    z ^= z >> 32;
    uint8_t b = static_cast<uint8_t>(z);
    if ((b & 0x7F) == 0x7F) b ^= 1;  // no E4M3 NaN codes
    if (o >= int64_t(S) * rb) {  // scale block: per state, fp32 or packed MXFP4 exponents
      const int q = static_cast<int>((o - int64_t(S) * rb) % 4);
      const uint32_t v = fp4 ? kBenchMxKeyExps : kBenchFp8Scale;
      b = static_cast<uint8_t>(v >> (8 * q));
    }
    pages[p * stride + o] = b;
  }
}

// --order rising / falling: state t of request b (logical position, through the block table) gets
// the scale (1/64) (1 + 20 t / ctx) or (1/64) (1 - 0.95 t / ctx), so the scores' magnitude grows or
// shrinks along the context and the row's best states crowd at its end or start (recency-biased
// attention looks like "rising").
__global__ void bench_order_scales_kernel(uint8_t* pages, const int32_t* bt, int B, int64_t ppr, int64_t stride,
                                          int S, int rb, int ctx, float ramp) {
  const int64_t n = int64_t(B) * ppr * S;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = i / (ppr * S), t = i % (ppr * S);
    const int64_t page = bt[b * ppr + t / S];
    const float v = (1.0f / 64.0f) * (1.0f + ramp * static_cast<float>(t) / static_cast<float>(ctx));
    *reinterpret_cast<float*>(pages + page * stride + int64_t(S) * rb + (t % S) * 4) = v;
  }
}

int fused_usage(int rc = 2) {
  std::printf(
      "usage: dsattn bench indexer --fused [--k K] [--iters N] [--quick] [--no-flush] [--cold] [--follower plain|pdl]\n"
      "                                    [--b2b] [--sms N] [--schedule]\n"
      "                                    [--seed N]\n"
      "                                    [--len N[,N...]] [--smem BYTES] [--shape BxCTXxNxSxHxD ...]\n"
      "                                    [top-k plan flags]\n"
      "  default shapes: 128x32768x1x64x64x128 1x65536x1x64x64x128 64x16384x2x64x64x128 32x131072x1x64x32x128\n"
      "  --sms N: run on a green context of at least N SMs (the copy baseline too)\n"
      "  --cold: before each timed call (after the flush), 225 KiB of other code run on every SM, so the\n"
      "    ops' instructions are fetched cold, as where an engine runs other kernels between their calls\n"
      "    (all three per-call columns and the launch floor; not the --b2b columns)\n"
      "  --follower plain|pdl: after each call, in the same graph, a kernel of one CTA per SM that reads\n"
      "    [B x N, k] indices, launched in plain stream order or with PDL (griddepcontrol.wait first),\n"
      "    as an engine's next kernel may be (all three per-call columns and the launch floor)\n"
      "  --schedule: the logits op and the fused op given a caller schedule (schedule_metadata for the\n"
      "    stream's SMs, made once before the timed calls, as an engine makes one per step for every\n"
      "    layer); default: none, each op plans its own\n"
      "  --seed N: another instance of the random cache, queries and block table (default 0)\n"
      "  --order random|rising|falling: per-state scales that make the scores grow (or shrink) along\n"
      "    the context, so the best states crowd at its end (start); default random\n"
      "  --fp4: MXFP4 cache and queries instead of FP8 (not with --order)\n"
      "  --len N[,N...]: request b holds the (b mod count)-th N states (at most CTX; 0: CTX); the block\n"
      "    table stays CTX states wide, as in a CUDA graph captured for longer requests; GB/s then\n"
      "    counts the states held (e.g. --len 2048,40000: short and long requests alternate)\n"
      "  --smem BYTES: shared-memory budget of all three ops (101376 = sm_120; default: device max)\n"
      "  --b2b: two more columns, paged_mqa_logits alone and the fused op timed back to back the way\n"
      "    bench indexer times paged_mqa_logits: calls on distinct caches (together >= 3x L2, at most\n"
      "    32) captured in one CUDA graph, graph time / calls, no flush (the launch floor is not in them)\n"
      "  top-k plan flags: those of bench topk (--cluster-max N, --sampled-pipe 0|1, ...), for the\n"
      "    unfused top-k and the logits route\n");
  return rc;
}

}  // namespace

int run_fused(const std::vector<std::string>& args) {
  int k = 2048, iters = 30;
  long sms = 0;
  uint64_t seed = 0;
  std::vector<long> len_list;  // --len
  float ramp = 0.0f;  // --order
  int smem = 0;       // --smem
  bool flush = true;
  bool cold = false;  // --cold
  Follower follower = Follower::kNone;  // --follower
  bool b2b = false;   // --b2b
  bool fp4 = false;  // --fp4
  bool caller_schedule = false;  // --schedule
  std::vector<FusedShape> shapes;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool has_next = i + 1 < args.size();
    if (a == "--help" || a == "-h") return fused_usage(0);
    if (a == "--fused") continue;
    if (a == "--quick") {
      shapes = {{128, 32768, 1, 64, 64, 128}, {1, 65536, 1, 64, 64, 128}};
    } else if (a == "--k" && has_next) {
      k = std::atoi(args[++i].c_str());
    } else if (a == "--iters" && has_next) {
      iters = std::max(1, std::atoi(args[++i].c_str()));
    } else if (a == "--no-flush") {
      flush = false;
    } else if (a == "--cold") {
      cold = true;
    } else if (a == "--follower" && has_next) {
      if (!parse_follower(args[++i], &follower)) return fused_usage();
    } else if (a == "--b2b") {
      b2b = true;
    } else if (a == "--fp4") {
      fp4 = true;
    } else if (a == "--schedule") {
      caller_schedule = true;
    } else if (a == "--sms" && has_next) {
      sms = std::atol(args[++i].c_str());
    } else if (a == "--len" && has_next) {
      len_list.clear();
      for (const std::string& tok : comma_tokens(args[++i])) {
        char* end = nullptr;
        const long n = std::strtol(tok.c_str(), &end, 10);
        if (tok.empty() || *end != '\0' || n < 0) return fused_usage();
        len_list.push_back(n);
      }
    } else if (a == "--seed" && has_next) {
      seed = std::strtoull(args[++i].c_str(), nullptr, 10);
    } else if (a == "--smem" && has_next) {
      smem = std::atoi(args[++i].c_str());
      if (smem < 0) return fused_usage();
    } else if (a == "--order" && has_next) {
      const std::string o = args[++i];
      if (o == "rising") {
        ramp = 20.0f;
      } else if (o == "falling") {
        ramp = -0.95f;
      } else if (o != "random") {
        std::fprintf(stderr, "dsattn bench indexer --fused: --order expected random, rising or falling, got '%s'\n",
                     o.c_str());
        return 2;
      }
    } else if (int t = parse_topk_tuning(args, &i); t != 0) {
      if (t < 0) return fused_usage();
    } else if (a == "--shape" && has_next) {
      FusedShape f{};
      if (std::sscanf(args[++i].c_str(), "%dx%dx%dx%dx%dx%d", &f.B, &f.ctx, &f.N, &f.S, &f.H, &f.D) != 6) {
        return fused_usage();
      }
      shapes.push_back(f);
    } else {
      return fused_usage();
    }
  }
  if (fp4 && ramp != 0.0f) {
    std::fprintf(stderr, "dsattn bench indexer --fused: --order writes fp32 scales, not with --fp4\n");
    return 2;
  }
  if (shapes.empty()) {
    shapes = {{128, 32768, 1, 64, 64, 128}, {1, 65536, 1, 64, 64, 128}, {64, 16384, 2, 64, 64, 128},
              {32, 131072, 1, 64, 32, 128}};
  }
  if (!cuda_available()) {
    std::fprintf(stderr, "dsattn bench indexer --fused: no CUDA device\n");
    return 1;
  }
  if (!use_sm_share(sms)) return 1;
  BenchContext ctx;
  if (!ctx.init()) return 1;
  ctx.flush_l2 = flush;
  ctx.cold_code = cold;
  ctx.follower = follower;
  std::printf("device: %s, %d SMs; copy bandwidth %.0f GB/s (read + write)\n", ctx.device_name.c_str(), ctx.num_sms,
              ctx.copy_gbps);
  std::printf("indexer + top-k, k=%d, %s cache, %s%s, median of %d CUDA-graph replays\n"
              "GB/s: cache bytes read once / time; MB: device memory beyond the inputs (workspace + outputs,\n"
              "and the logits for the unfused path)\n",
              k, fp4 ? "MXFP4" : "FP8", ctx.conditions(), ctx.follower_name(), iters);
  std::printf("shared-memory budget: %s; schedule: %s\n", smem ? std::to_string(smem).c_str() : "device max",
              caller_schedule ? "the caller's (schedule_metadata, made once)" : "each op's own");
  std::printf("launch floor (an empty kernel timed the same way): %.2f us\n\n", ctx.launch_floor_us(iters));
  std::printf("%-24s %10s %10s %10s %8s %8s %10s %10s %8s %8s  %s%s\n", "B x ctx x N x S x H x D", "logits us",
              "unfused us", "fused us", "speedup", "vs logit", "unfused MB", "fused MB", "GB/s", "same",
              "fused route", b2b ? "  (b2b: logits us, fused us, calls)" : "");
  for (const FusedShape& sh : shapes) {
    const int rb = fp4 ? sh.D / 2 : sh.D;
    const int64_t stride = int64_t(sh.S) * (rb + 4);
    const int64_t ppr = (sh.ctx + sh.S - 1) / sh.S;
    const int64_t num_pages = int64_t(sh.B) * ppr;
    const int64_t R = int64_t(sh.B) * sh.N;
    DevMem cache(size_t(num_pages * stride)), bt(size_t(num_pages) * 4), lens(size_t(sh.B) * 4);
    DevMem q(size_t(R) * sh.H * rb), w(size_t(R) * sh.H * 4), qs(size_t(R) * sh.H * 4);
    DevMem logits(size_t(R) * sh.ctx * 4);
    DevMem idx_u(size_t(R) * k * 4), idx_f(size_t(R) * k * 4);
    if (!cache.ok() || !logits.ok() || !q.ok()) {
      std::fprintf(stderr, "out of device memory\n");
      return 1;
    }
    bench_fill_cache_kernel<<<2048, 256>>>(static_cast<uint8_t*>(cache.p), num_pages, stride, sh.S, rb, seed, fp4);
    std::vector<int32_t> h_bt(static_cast<size_t>(num_pages));
    std::iota(h_bt.begin(), h_bt.end(), 0);
    std::shuffle(h_bt.begin(), h_bt.end(), std::mt19937_64(3 + seed));
    std::vector<int32_t> h_lens(static_cast<size_t>(sh.B), sh.ctx);
    int64_t live_total = 0;  // states held by all requests
    bool shorter = false;    // some request holds fewer than CTX
    for (int b = 0; b < sh.B; ++b) {
      const long n = len_list.empty() ? 0 : len_list[size_t(b) % len_list.size()];
      if (n > 0 && n < sh.ctx) h_lens[size_t(b)] = static_cast<int32_t>(n);
      live_total += h_lens[size_t(b)];
      shorter = shorter || h_lens[size_t(b)] < sh.ctx;
    }
    cudaMemcpy(bt.p, h_bt.data(), h_bt.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(lens.p, h_lens.data(), h_lens.size() * 4, cudaMemcpyHostToDevice);
    // The unfused top-k reads each row up to its window's end, as an engine passes it (SPEC 3.1:
    // row j of a request of L states sees L - N + j + 1; paged_mqa_logits leaves the rest of the
    // row unspecified, here the columns past --len).
    std::vector<int32_t> h_ends(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) {
      h_ends[size_t(r)] = std::max<int32_t>(0, h_lens[size_t(r / sh.N)] - sh.N + int32_t(r % sh.N) + 1);
    }
    DevMem ends(size_t(R) * 4);
    cudaMemcpy(ends.p, h_ends.data(), h_ends.size() * 4, cudaMemcpyHostToDevice);
    if (ramp != 0.0f) {
      bench_order_scales_kernel<<<1024, 256>>>(static_cast<uint8_t*>(cache.p), static_cast<const int32_t*>(bt.p),
                                               sh.B, ppr, stride, sh.S, rb, sh.ctx, ramp);
    }
    // Query bytes: random E4M3 codes (no NaN) or E2M1 pairs; weights: approximately normal; MXFP4
    // query exponents 2^-2 .. 2^1.
    bench_fill_cache_kernel<<<256, 256>>>(static_cast<uint8_t*>(q.p), 1, int64_t(R) * sh.H * rb, 1 << 30, 1, seed);
    fill_random(w.p, size_t(R) * sh.H, false, 99 + seed);

    PagedIndexerArgs in;
    in.q = make_tensor(q.p, fp4 ? DType::kU8 : DType::kF8E4M3, {sh.B, sh.N, sh.H, rb}, Device::kCuda);
    if (fp4) {
      const std::vector<int32_t> h_qs(size_t(R) * sh.H, static_cast<int32_t>(kBenchMxQueryExps));
      cudaMemcpy(qs.p, h_qs.data(), h_qs.size() * 4, cudaMemcpyHostToDevice);
      in.q_scales = make_tensor(qs.p, DType::kI32, {sh.B, sh.N, sh.H}, Device::kCuda);
    }
    in.weights = make_tensor(w.p, DType::kF32, {R, sh.H}, Device::kCuda);
    in.cache.pages = make_tensor(cache.p, DType::kU8, {num_pages, stride}, Device::kCuda);
    in.cache.format = fp4 ? IndexerFormat::kMxfp4 : IndexerFormat::kFp8;
    in.cache.states_per_page = sh.S;
    in.cache.head_dim = sh.D;
    in.cache.page_stride_bytes = stride;
    in.block_table = make_tensor(bt.p, DType::kI32, {sh.B, ppr}, Device::kCuda);
    in.context_lens = make_tensor(lens.p, DType::kI32, {sh.B}, Device::kCuda);

    // --schedule: one schedule_metadata for every call, as an engine shares one per step.
    const int parts = cuda_stream_num_sms(nullptr);
    DevMem sched(caller_schedule ? size_t(schedule_metadata_size(parts)) * 4 : 0);
    if (caller_schedule) {
      in.schedule = make_tensor(sched.p, DType::kI32, {schedule_metadata_size(parts)}, Device::kCuda);
      const Status ss = bench_schedule(in.context_lens, sh.N, sh.S, parts, in.schedule, nullptr);
      if (!ss.ok()) {
        std::fprintf(stderr, "%s\n", ss.to_string().c_str());
        return 1;
      }
    }
    PagedMqaLogitsParams lp;
    static_cast<PagedIndexerArgs&>(lp) = in;
    lp.logits = make_tensor(logits.p, DType::kF32, {R, sh.ctx}, Device::kCuda);
    TopkParams tp;
    tp.logits = lp.logits;
    tp.ends = make_tensor(ends.p, DType::kI32, {R}, Device::kCuda);
    tp.k = k;
    tp.indices = make_tensor(idx_u.p, DType::kI32, {R, k}, Device::kCuda);
    PagedMqaTopkParams fp;
    static_cast<PagedIndexerArgs&>(fp) = in;
    fp.k = k;
    fp.indices = make_tensor(idx_f.p, DType::kI32, {R, k}, Device::kCuda);

    Exec lex, tex, fex;
    lex.smem_budget_bytes = tex.smem_budget_bytes = fex.smem_budget_bytes = smem;
    size_t lws = 0, tws = 0, fws = 0;
    Status st = paged_mqa_logits_workspace(lp, lex, &lws);
    if (st.ok()) st = topk_workspace(tp, tex, &tws);
    if (st.ok()) st = paged_mqa_topk_workspace(fp, fex, &fws);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.to_string().c_str());
      return 1;
    }
    DevMem lw(lws), tw(tws), fw(fws);
    lex.workspace = lw.p;
    lex.workspace_bytes = lws;
    tex.workspace = tw.p;
    tex.workspace_bytes = tws;
    fex.workspace = fw.p;
    fex.workspace_bytes = fws;
    auto keep = [&](const Status& s2) {
      if (!s2.ok() && st.ok()) st = s2;
    };
    ctx.follow_src = idx_f.p;  // the same follower in all three columns: it reads [R, k] indices
    ctx.follow_bytes = idx_f.bytes;
    const float logits_us = ctx.time_median_us(iters, [&](cudaStream_t s) {
      lex.stream = s;
      keep(paged_mqa_logits(lp, lex));
    });
    const float unfused_us = ctx.time_median_us(iters, [&](cudaStream_t s) {
      lex.stream = s;
      tex.stream = s;
      keep(paged_mqa_logits(lp, lex));
      keep(topk(tp, tex));
    });
    const float fused_us = ctx.time_median_us(iters, [&](cudaStream_t s) {
      fex.stream = s;
      keep(paged_mqa_topk(fp, fex));
    });
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.to_string().c_str());
      return 1;
    }
    // Same inputs, same selection? (Indices come back in ascending order from both paths.)
    cudaDeviceSynchronize();
    std::vector<int32_t> hu(static_cast<size_t>(R) * k), hf(hu.size());
    cudaMemcpy(hu.data(), idx_u.p, hu.size() * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(hf.data(), idx_f.p, hf.size() * 4, cudaMemcpyDeviceToHost);
    int64_t same = 0;
    for (int64_t r = 0; r < R; ++r) {
      same += std::equal(hu.begin() + r * k, hu.begin() + (r + 1) * k, hf.begin() + r * k) ? 1 : 0;
    }
    // --b2b (after the comparison: these calls overwrite the fused indices): the same ops over `sets`
    // caches (the first is the one above) back to back in one graph.
    double logits_b2b = 0.0, fused_b2b = 0.0;
    int sets = 0;
    if (b2b) {
      const size_t cache_bytes = size_t(num_pages * stride);
      sets = sets_for(cache_bytes, 32);
      std::vector<std::unique_ptr<DevMem>> extra;
      for (int s2 = 1; s2 < sets; ++s2) {
        extra.push_back(std::make_unique<DevMem>(cache_bytes));
        if (!extra.back()->ok()) {
          std::fprintf(stderr, "out of device memory (--b2b)\n");
          return 1;
        }
        uint8_t* pages = static_cast<uint8_t*>(extra.back()->p);
        bench_fill_cache_kernel<<<2048, 256>>>(pages, num_pages, stride, sh.S, rb, seed + 1000 + s2, fp4);
        if (ramp != 0.0f) {
          bench_order_scales_kernel<<<1024, 256>>>(pages, static_cast<const int32_t*>(bt.p), sh.B, ppr, stride, sh.S,
                                                   rb, sh.ctx, ramp);
        }
      }
      cudaDeviceSynchronize();
      const auto pages_of = [&](int s2) {
        return make_tensor(s2 == 0 ? cache.p : extra[static_cast<size_t>(s2 - 1)]->p, DType::kU8, {num_pages, stride},
                           Device::kCuda);
      };
      cudaStream_t bs = nullptr;
      cudaStreamCreateWithFlags(&bs, cudaStreamNonBlocking);
      lex.stream = bs;
      fex.stream = bs;
      PagedMqaLogitsParams lp2 = lp;  // both ops ran above (modules loaded, attributes set)
      PagedMqaTopkParams fp2 = fp;
      logits_b2b = time_graph_us(bs, sets, [&](int s2) {
        lp2.cache.pages = pages_of(s2);
        keep(paged_mqa_logits(lp2, lex));
      });
      fused_b2b = time_graph_us(bs, sets, [&](int s2) {
        fp2.cache.pages = pages_of(s2);
        keep(paged_mqa_topk(fp2, fex));
      });
      cudaStreamDestroy(bs);
      if (!st.ok()) {
        std::fprintf(stderr, "%s\n", st.to_string().c_str());
        return 1;
      }
    }
    const double out_b = double(R) * k * 4;
    const double unfused_mb = (double(R) * sh.ctx * 4 + lws + tws + out_b) / 1e6;
    const double fused_mb = (fws + out_b) / 1e6;
    const double cache_b = double(live_total) * (rb + 4);
    char name[96];
    if (shorter) {
      std::string held;  // the lengths the first requests took from the list
      for (size_t b = 0; b < std::min(len_list.size(), h_lens.size()); ++b) {
        held += (b > 0 ? "," : "") + std::to_string(h_lens[b]);
      }
      std::snprintf(name, sizeof(name), "%dx%d(%s)x%dx%dx%dx%d", sh.B, sh.ctx, held.c_str(), sh.N, sh.S, sh.H, sh.D);
    } else {
      std::snprintf(name, sizeof(name), "%dx%dx%dx%dx%dx%d", sh.B, sh.ctx, sh.N, sh.S, sh.H, sh.D);
    }
    char same_s[64];
    std::snprintf(same_s, sizeof(same_s), "%lld/%lld", static_cast<long long>(same), static_cast<long long>(R));
    const char* route = "?";
    fex.stream = nullptr;  // the timed streams are gone
    if (!paged_mqa_topk_route(fp, fex, &route).ok()) route = "?";
    char b2b_s[64] = "";
    if (b2b) std::snprintf(b2b_s, sizeof(b2b_s), "  b2b %.1f %.1f %d", logits_b2b, fused_b2b, sets);
    std::printf("%-24s %10.1f %10.1f %10.1f %7.2fx %7.2fx %10.1f %10.1f %8.0f %8s  %s%s\n", name, logits_us,
                unfused_us, fused_us, unfused_us / fused_us, fused_us / logits_us, unfused_mb, fused_mb,
                cache_b / (fused_us * 1e3), same_s, route, b2b_s);
  }
  return 0;
}

}  // namespace bench
}  // namespace dsattn
