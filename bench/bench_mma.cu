// dsattn bench mma: the tensor-core ceilings the portable indexer kernel (mma.sync) works against,
// measured on this GPU. Register-only loops, no memory traffic:
//   - latency: one warp, one accumulator chain (each MMA waits for the previous one's result);
//   - throughput: one CTA per SM of --warps warps (default 8), each with --chains independent
//     accumulator chains (default 4); TFLOPS from CUDA events over the whole grid, and the SM
//     clock of the run (clock64 cycles / event time), so the cycles per warp instruction and SM
//     sub-partition (SMSP) follow;
//   - the E4M3 -> f16x2 conversion (cvt.rn.f16x2.e4m3x2) the sm_80 / sm_90 / sm_100 f16 path
//     uses for its key fragments (src/cuda/common/mma_fp8.cuh), alone.
// The e4m3 MMA row changes one A and one B register every iteration from the accumulator (two
// LOP3 each), so that ptxas cannot hoist the conversions it emits for sm_90 / sm_100 (where e4m3
// mma.sync is two f16 MMAs plus conversions) out of the loop. Why this exists: the portable
// kernel's MMA loop is judged against these rates, and on an H200 they differed from the figures
// we had been using (BENCHMARKS.md). On sm_89 / sm_120 the e4m3 row is the native instruction.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_util.cuh"

namespace dsattn {
namespace bench {

namespace {

enum MmaKind { kF16, kBf16, kE4m3, kCvt };

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define DSATTN_BENCH_HAS_E4M3 1
#else
#define DSATTN_BENCH_HAS_E4M3 0
#endif

template <MmaKind K>
__device__ __forceinline__ void bench_mma_step(float (&c)[4], uint32_t (&a)[4], uint32_t (&b)[2]) {
  if constexpr (K == kF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else if constexpr (K == kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else if constexpr (K == kE4m3) {
#if DSATTN_BENCH_HAS_E4M3
    // A and B change every iteration with the accumulator (see the file comment): a constant xor
    // was folded by ptxas, which then ran the emulated MMAs from zero and added the results.
    a[0] ^= __float_as_uint(c[0]) & 0x00010001u;
    b[0] ^= __float_as_uint(c[1]) & 0x00010001u;
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
  } else {
#if DSATTN_BENCH_HAS_E4M3
    // a[0] carries the dependence through the converted value (one cvt per step, as the MMA rows
    // have one MMA per step), and the xor keeps the input changing.
    uint32_t r;
    asm volatile("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %1;\n cvt.rn.f16x2.e4m3x2 %0, l;\n}\n"
                 : "=r"(r)
                 : "r"(a[0]));
    a[0] ^= r;
#endif
  }
}

// Every warp runs `iters` steps of `chains` independent accumulators; lane 0 of warp 0 of each CTA
// records its clock64 cycles.
template <MmaKind K, int CH>
__global__ void bench_mma_kernel(int iters, float* sink, long long* cycles) {
  uint32_t a[CH][4], b[CH][2];
  float c[CH][4];
#pragma unroll
  for (int k = 0; k < CH; ++k) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      a[k][i] = 0x3c003c00u ^ ((threadIdx.x * (i + 1 + k)) & 0x00ff00ffu);  // small f16 / bf16 / e4m3 values
      c[k][i] = 0.f;
    }
    b[k][0] = 0x38003800u ^ (threadIdx.x & 0x000f000fu);
    b[k][1] = 0x38003800u;
  }
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int k = 0; k < CH; ++k) bench_mma_step<K>(c[k], a[k], b[k]);
  }
  const long long t1 = clock64();
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < CH; ++k) s += c[k][0] + c[k][1] + c[k][2] + c[k][3] + float(a[k][0] & 1u);
  if (s == 1.2345f) sink[0] = s;  // never true in practice; keeps the loop alive
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

struct MmaResult {
  double ms = 0, cycles = 0;  // event time; mean clock64 cycles of the CTAs' warp 0
};

template <MmaKind K, int CH>
MmaResult bench_mma_run(int blocks, int warps, int iters, float* sink, long long* cycles) {
  bench_mma_kernel<K, CH><<<blocks, 32 * warps>>>(iters / 10 + 1, sink, cycles);  // warm-up
  DSATTN_BENCH_CHECK(cudaGetLastError());
  cudaEvent_t e0, e1;
  DSATTN_BENCH_CHECK(cudaEventCreate(&e0));
  DSATTN_BENCH_CHECK(cudaEventCreate(&e1));
  DSATTN_BENCH_CHECK(cudaEventRecord(e0));
  bench_mma_kernel<K, CH><<<blocks, 32 * warps>>>(iters, sink, cycles);
  DSATTN_BENCH_CHECK(cudaEventRecord(e1));
  DSATTN_BENCH_CHECK(cudaEventSynchronize(e1));
  float ms = 0.f;
  DSATTN_BENCH_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  std::vector<long long> h(static_cast<size_t>(blocks));
  DSATTN_BENCH_CHECK(cudaMemcpy(h.data(), cycles, h.size() * sizeof(long long), cudaMemcpyDeviceToHost));
  double sum = 0;
  for (long long v : h) sum += double(v);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return MmaResult{ms, sum / blocks};
}

int mma_usage(int rc = 2) {
  std::printf(
      "usage: dsattn bench mma [--warps W] [--chains 2|4|8] [--iters N]\n"
      "  mma.sync f16 / bf16 m16n8k16 and e4m3 m16n8k32 (fp32 accumulate), and the e4m3 -> f16x2\n"
      "  conversion: latency (one warp, one dependent chain) and throughput (one CTA of W warps per\n"
      "  SM, default 8, each with `chains` independent accumulators, default 4), in TFLOPS and in\n"
      "  cycles per warp instruction and SM sub-partition (SMSP) at the clock measured in the run;\n"
      "  the conversion row always runs 8 chains\n");
  return rc;
}

template <MmaKind K>
void bench_mma_row(Table& t, const char* name, double flops_per_instr, int sms, int warps, int chains,
                   int iters, float* sink, long long* cycles) {
  const int lat_iters = iters * 4;
  const MmaResult lat = K == kCvt ? MmaResult{} : bench_mma_run<K, 1>(1, 1, lat_iters, sink, cycles);
  if (K == kCvt) chains = 8;  // its chains are short (cvt + lop3): more of them to fill the pipe
  MmaResult tp;
  switch (chains) {
    case 2: tp = bench_mma_run<K, 2>(sms, warps, iters, sink, cycles); break;
    case 8: tp = bench_mma_run<K, 8>(sms, warps, iters, sink, cycles); break;
    default: tp = bench_mma_run<K, 4>(sms, warps, iters, sink, cycles); break;
  }
  const double instrs = double(sms) * warps * chains * double(iters);
  const double ghz = tp.cycles / (tp.ms * 1e6);  // the CTAs' loops span (nearly) the whole launch
  const double per_smsp = tp.cycles / (double(iters) * chains * (warps / 4.0));
  // The conversion row has no latency column: its one-chain loop (cvt, then lop3 into the next
  // input) read ~0 cycles per step on an H200, which is not a latency.
  const double s = tp.ms * 1e-3;
  t.add({name, K == kCvt ? std::string("-") : fmt("%.1f", lat.cycles / lat_iters), fmt("%.2f", per_smsp),
         fmt("%.2f", ghz), flops_per_instr > 0 ? fmt("%.0f", instrs * flops_per_instr / s / 1e12) : "-",
         flops_per_instr > 0 ? "-" : fmt("%.0f", instrs * 32.0 * 2.0 / s / 1e9)});
}

}  // namespace

int run_mma(const std::vector<std::string>& args) {
  int warps = 8, chains = 4, iters = 20000;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool has_next = i + 1 < args.size();
    if (a == "--help" || a == "-h") return mma_usage(0);
    if (a == "--warps" && has_next) {
      warps = std::atoi(args[++i].c_str());
      if (warps < 4 || warps > 32 || warps % 4 != 0) {
        std::fprintf(stderr, "dsattn bench mma: --warps expects a multiple of 4 in [4, 32], got %d\n", warps);
        return 2;
      }
    } else if (a == "--chains" && has_next) {
      chains = std::atoi(args[++i].c_str());
      if (chains != 2 && chains != 4 && chains != 8) {
        std::fprintf(stderr, "dsattn bench mma: --chains expects 2, 4 or 8, got %d\n", chains);
        return 2;
      }
    } else if (a == "--iters" && has_next) {
      iters = std::atoi(args[++i].c_str());
      if (iters < 100) {
        std::fprintf(stderr, "dsattn bench mma: --iters expects >= 100, got %d\n", iters);
        return 2;
      }
    } else {
      return mma_usage();
    }
  }
  int dev = 0, n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::fprintf(stderr, "dsattn bench mma: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  DSATTN_BENCH_CHECK(cudaGetDevice(&dev));
  DSATTN_BENCH_CHECK(cudaGetDeviceProperties(&prop, dev));
  const int cc = prop.major * 10 + prop.minor;
  const int sms = prop.multiProcessorCount;
  std::printf("GPU: %s (sm_%d, %d SMs); %d warps x %d chains per SM, %d iterations\n", prop.name, cc, sms, warps,
              chains, iters);
  DeviceBuffer sink_buf(64), cycles_buf(sizeof(long long) * size_t(sms));
  float* sink = sink_buf.as<float>();
  long long* cycles = cycles_buf.as<long long>();
  Table t({"instruction", "latency (clk)", "clk / instr / SMSP", "SM GHz", "TFLOPS", "G values/s"});
  bench_mma_row<kF16>(t, "mma m16n8k16 f16", 4096, sms, warps, chains, iters, sink, cycles);
  bench_mma_row<kBf16>(t, "mma m16n8k16 bf16", 4096, sms, warps, chains, iters, sink, cycles);
  if (cc >= 89) {
    const char* name = (cc == 89 || cc >= 120) ? "mma m16n8k32 e4m3 (native)" : "mma m16n8k32 e4m3 (ptxas: f16)";
    bench_mma_row<kE4m3>(t, name, 8192, sms, warps, chains, iters, sink, cycles);
    bench_mma_row<kCvt>(t, "cvt e4m3x2 -> f16x2 (+ lop3)", 0, sms, warps, chains, iters, sink, cycles);
  }
  t.print();
  std::printf(
      "latency: one warp, one dependent chain; throughput: %d CTAs; G values/s: E4M3 values converted (2 per\n"
      "lane and instruction); the conversion row's loop also holds one LOP3 per conversion%s\n",
      sms,
      (cc > 89 && cc < 120)
          ? ";\non this GPU ptxas builds e4m3 mma.sync from conversions and two f16 MMAs (mma_fp8.cuh), and the\n"
            "row's operands change with the accumulator every step, so it measures that expansion"
          : "");
  return 0;
}

}  // namespace bench
}  // namespace dsattn
