// Small timing helpers of the top-k benchmarks: device memory, random fill, copy-bandwidth
// ceiling, and a median-of-N event timer that flushes L2 before every timed call.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/common/pdl.cuh"

namespace dsattn {
namespace bench {

struct DevMem {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DevMem(size_t n) : bytes(n) {
    if (n > 0 && cudaMalloc(&p, n) != cudaSuccess) {
      p = nullptr;
      cudaGetLastError();
    }
  }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
  ~DevMem() {
    if (p) cudaFree(p);
  }
  bool ok() const { return bytes == 0 || p != nullptr; }
};

// One mixing round of the fill's hash.
__device__ inline uint64_t bench_mix(uint64_t z) {
  z ^= z >> 31;
  z *= 0xBF58476D1CE4E5B9ull;
  return z ^ (z >> 29);
}

// Approximately normal value (sum of 4 uniforms, centered, variance ~1), deterministic per index.
__device__ inline float bench_normal(uint64_t i, uint64_t seed) {
  uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull + seed;
  float acc = 0.0f;
  for (int j = 0; j < 4; ++j) {
    z = bench_mix(z);
    acc += static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
  }
  return (acc - 2.0f) * 1.7f;
}

// A finite normal float of random sign, exponent (1..254) and mantissa, deterministic per index.
__device__ inline float bench_spread(uint64_t i, uint64_t seed) {
  const uint64_t z = bench_mix((i + 1) * 0xD1B54A32D192ED03ull + seed);
  const uint32_t e = 1u + static_cast<uint32_t>((z >> 32) % 254u);
  return __uint_as_float(static_cast<uint32_t>(z >> 63) << 31 | e << 23 | static_cast<uint32_t>(z & 0x7fffffu));
}

// Approximately normal values. run > 1: neighbours alike, as scores of nearby states can be: each
// run of `run` consecutive values shares a component (0.8 shared + 0.6 own, correlation 0.64).
// grid > 0: every value rounded to a multiple of grid (ties: a few distinct values near the top).
// spread: finite floats of random sign, exponent and mantissa instead, so that the radix top-k's
// first digit (sign, exponent and three mantissa bits) puts about as many keys in each of its bins:
// few same-bin shared-memory atomics and a small bin at the k-th key (a diagnostic, not scores).
__global__ void bench_fill_kernel(void* out, size_t n, bool bf16, uint64_t seed, int64_t run, float grid,
                                  bool spread = false) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    float v;
    if (spread) {
      v = bench_spread(i, seed);
    } else {
      v = bench_normal(i, seed);
      if (run > 1) v = 0.8f * bench_normal(i / static_cast<uint64_t>(run), seed ^ 0x5bd1e995ull) + 0.6f * v;
      if (grid > 0.0f) v = rintf(v / grid) * grid;
    }
    if (bf16) {
      static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16(v);
    } else {
      static_cast<float*>(out)[i] = v;
    }
  }
}

inline void fill_random(void* p, size_t n, bool bf16, uint64_t seed = 1234, int64_t run = 1, float grid = 0.0f,
                        bool spread = false) {
  if (n == 0) return;
  bench_fill_kernel<<<1024, 256>>>(p, n, bf16, seed, run, grid, spread);
}

__global__ void bench_empty_kernel() {}

// --cold: straight-line code of 2 x kN FFMAs (225 KiB of sm_90a code at kN = 8192), one CTA per SM,
// run before every timed call after the flush. It evicts the timed op's instructions from the
// instruction caches, as the other kernels of a serving engine's step do between two calls of one
// op. (Before 9637e5c, a single CTA of this kernel before each call slowed the Hopper scoring
// kernel by 10-15 us at 32 x 32K on an H100, as the fused op's own top-k did: BENCHMARKS.md,
// 2026-12-06. Timing calls back to back, or after a flush alone, hides such costs.)
constexpr int kBenchColdCodeN = 8192;
template <int kN>
__global__ void bench_cold_code_kernel(float* out, float seed) {
  float a = seed + static_cast<float>(threadIdx.x), b = seed * 0.5f;
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    a = fmaf(a, 1.0000001f + static_cast<float>(i) * 1e-9f, static_cast<float>(i) * 0.37f);
    b = fmaf(b, a, static_cast<float>(i) * 0.11f + 1.0f);
  }
  if (a + b == 1.2345f) out[threadIdx.x] = a + b;  // never true in practice; keeps the chain live
}

// --follower: a kernel of the kind a serving engine launches after the timed op (one CTA per SM,
// reads the op's output), captured after it in the same graph, launched either in plain stream
// order or with programmatic dependent launch (PDL; it then waits at griddepcontrol.wait before
// its first read). The op's last kernel decides when a PDL follower's CTAs may be placed: at its
// pdl_trigger() (the top-k kernels trigger first thing), else at its exit.
enum class Follower { kNone, kPlain, kPdl };
__global__ void bench_follower_kernel(const uint32_t* __restrict__ src, size_t n, uint32_t* out) {
  cuda::pdl_wait();
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    acc ^= src[i];
  }
  acc = __reduce_xor_sync(0xffffffffu, acc);
  if ((threadIdx.x & 31) == 0 && acc == 0x9e3779b9u) out[blockIdx.x] = acc;  // keeps the loads live
}

struct BenchContext {
  std::string device_name;
  int num_sms = 0;
  double copy_gbps = 0.0;   // device-to-device copy, bytes read + written per second
  size_t flush_bytes = 0;   // > L2 size
  void* flush = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  bool flush_l2 = true;     // flush L2 before every timed call (--no-flush clears it)
  bool cold_code = false;   // bench_cold_code_kernel before every timed call (--cold)
  float* cold_sink = nullptr;
  Follower follower = Follower::kNone;  // --follower
  const void* follow_src = nullptr;     // what the follower reads (the op's output; set per shape)
  size_t follow_bytes = 0;

  // The follower after fn's work in `st` (nothing when follower is kNone).
  void launch_follower(cudaStream_t st) {
    if (follower == Follower::kNone) return;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(num_sms));
    cfg.blockDim = dim3(256);
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = follower == Follower::kPdl ? 1 : 0;
    const uint32_t* src = static_cast<const uint32_t*>(follow_src != nullptr ? follow_src : cold_sink);
    const size_t n = follow_src != nullptr ? follow_bytes / 4 : 32;
    cudaLaunchKernelEx(&cfg, bench_follower_kernel, src, n, reinterpret_cast<uint32_t*>(cold_sink));
  }
  const char* follower_name() const {
    return follower == Follower::kPdl ? "; a follower kernel after each call, launched with PDL"
           : follower == Follower::kPlain ? "; a follower kernel after each call, plain stream order"
                                          : "";
  }

  ~BenchContext() {
    if (flush) cudaFree(flush);
    if (cold_sink) cudaFree(cold_sink);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
  }

  bool init() {
    int dev = 0;
    cudaDeviceProp prop;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) return false;
    device_name = prop.name;
    num_sms = prop.multiProcessorCount;
    flush_bytes = std::max<size_t>(size_t(prop.l2CacheSize) * 4, 256u << 20);
    if (cudaMalloc(&flush, flush_bytes) != cudaSuccess) return false;
    if (cudaMalloc(&cold_sink, std::max(32, num_sms) * sizeof(float)) != cudaSuccess) return false;
    cudaMemset(cold_sink, 0, std::max(32, num_sms) * sizeof(float));
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    // Copy ceiling: 1 GiB device-to-device, median of 10.
    const size_t cb = size_t(1) << 30;
    void *a = nullptr, *b = nullptr;
    if (cudaMalloc(&a, cb) != cudaSuccess || cudaMalloc(&b, cb) != cudaSuccess) return false;
    cudaMemset(a, 1, cb);
    std::vector<float> t;
    for (int i = 0; i < 11; ++i) {
      cudaEventRecord(e0);
      cudaMemcpyAsync(b, a, cb, cudaMemcpyDeviceToDevice);
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      if (i > 0) t.push_back(ms);
    }
    cudaFree(a);
    cudaFree(b);
    std::sort(t.begin(), t.end());
    copy_gbps = 2.0 * cb / (t[t.size() / 2] * 1e6);
    return cudaGetLastError() == cudaSuccess;
  }

  // The conditions each timed call starts from, for the bench's header line.
  const char* conditions() const {
    if (cold_code) {
      return flush_l2 ? "L2 flushed and instructions evicted before each call"
                      : "instructions evicted before each call, L2 not flushed";
    }
    return flush_l2 ? "L2 flushed before each call" : "L2 not flushed";
  }

  // Median time of fn(stream) in microseconds; L2 flushed (a memset larger than L2) before each
  // call, and with cold_code other code run on every SM after it. graph = true: fn is captured
  // once into a CUDA graph and the replays are timed (no host launch overhead, as in a serving
  // engine's decode graph).
  template <typename Fn>
  float time_median_us(int iters, Fn fn, bool graph = true) {
    cudaStream_t st = nullptr;
    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    fn(st);  // warm-up (module load, smem attributes)
    launch_follower(st);
    cudaStreamSynchronize(st);
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    if (graph) {
      cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
      fn(st);
      launch_follower(st);
      cudaStreamEndCapture(st, &g);
      cudaGraphInstantiate(&ge, g, 0);
    }
    std::vector<float> t;
    for (int i = 0; i < iters; ++i) {
      if (flush_l2) cudaMemsetAsync(flush, i & 0xff, flush_bytes, st);
      if (cold_code) bench_cold_code_kernel<kBenchColdCodeN><<<num_sms, 32, 0, st>>>(cold_sink, static_cast<float>(i));
      cudaEventRecord(e0, st);
      if (graph) {
        cudaGraphLaunch(ge, st);
      } else {
        fn(st);
        launch_follower(st);
      }
      cudaEventRecord(e1, st);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      t.push_back(ms * 1e3f);
    }
    if (ge) cudaGraphExecDestroy(ge);
    if (g) cudaGraphDestroy(g);
    cudaStreamDestroy(st);
    std::sort(t.begin(), t.end());
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) std::fprintf(stderr, "CUDA error while timing: %s\n", cudaGetErrorString(err));
    return t[t.size() / 2];
  }

  // The floor of time_median_us: one empty kernel timed the same way (graph launch + events, L2
  // flushed as set), so short calls can be read against what any launch costs.
  float launch_floor_us(int iters) {
    return time_median_us(iters, [](cudaStream_t s) { bench_empty_kernel<<<1, 32, 0, s>>>(); });
  }
};

}  // namespace bench
}  // namespace dsattn
