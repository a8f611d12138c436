// Reusable benchmark harness (CUDA): measured copy bandwidth, CUDA-graph timing, random device
// data, argument lists, table printing. Header-only (its kernels are static, so any number of
// bench/*.cu files may include it); used by bench_indexer.cu, the top-k bench and bench_mma.cu.
//
// Method: each timed op is captured into a CUDA graph as `sets` back-to-back launches that read
// disjoint input sets (sized so that all sets together exceed 3x the L2), so every launch reads
// from device memory, not L2, and launch gaps are the graph's; time = median over replays of the
// graph time / sets. The copy baseline is a device-to-device cudaMemcpyAsync of >= 1 GiB, timed
// the same way in the same run, counting bytes read + written.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace dsattn {
namespace bench {

#define DSATTN_BENCH_CHECK(expr)                                                                   \
  do {                                                                                             \
    cudaError_t _e = (expr);                                                                       \
    if (_e != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "bench: %s failed: %s (%s:%d)\n", #expr, cudaGetErrorString(_e), __FILE__, \
                   __LINE__);                                                                      \
      std::exit(2);                                                                                \
    }                                                                                              \
  } while (0)

// The scales the benchmarks' caches and queries carry. FP8: 1/64 per state. MXFP4: UE8M0 block
// exponents, four per 32-bit word (block 0 in the low byte): keys 2^-1 .. 2^-4, queries 2^1 .. 2^-2,
// four consecutive exponents per vector (well within the Hopper kernel's exact range of 14).
constexpr uint32_t kBenchFp8Scale = 0x3C800000u;
constexpr uint32_t kBenchMxKeyExps = 0x7B7C7D7Eu;
constexpr uint32_t kBenchMxQueryExps = 0x7D7E7F80u;

// Owning device allocation.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { alloc(n); }
  ~DeviceBuffer() { if (ptr) cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void alloc(size_t n) {
    if (ptr) cudaFree(ptr);
    ptr = nullptr;
    bytes = n;
    if (n) DSATTN_BENCH_CHECK(cudaMalloc(&ptr, n));
  }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr); }
};

// ---------------------------------------------------------------- random device data
__device__ __forceinline__ uint32_t bench_hash(uint64_t x) {
  x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
  return static_cast<uint32_t>(x);
}
// Random bytes; with `no_e4m3_nan`, the E4M3 NaN codes (S.1111.111) are avoided.
static __global__ void bench_fill_bytes(uint8_t* p, size_t n, uint64_t seed, int no_e4m3_nan) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint8_t b = static_cast<uint8_t>(bench_hash(seed * 0x9E3779B97F4A7C15ull + i));
    if (no_e4m3_nan && (b & 0x7F) == 0x7F) b ^= 1;
    p[i] = b;
  }
}
// Uniform floats in [lo, hi).
static __global__ void bench_fill_f32(float* p, size_t n, uint64_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    p[i] = lo + (hi - lo) * (bench_hash(seed * 0x9E3779B97F4A7C15ull + i) >> 8) * (1.0f / 16777216.0f);
  }
}
inline void fill_bytes(void* p, size_t n, uint64_t seed, bool no_e4m3_nan) {
  bench_fill_bytes<<<1024, 256>>>(static_cast<uint8_t*>(p), n, seed, no_e4m3_nan ? 1 : 0);
  DSATTN_BENCH_CHECK(cudaGetLastError());
}
inline void fill_f32(float* p, size_t n, uint64_t seed, float lo, float hi) {
  bench_fill_f32<<<1024, 256>>>(p, n, seed, lo, hi);
  DSATTN_BENCH_CHECK(cudaGetLastError());
}

// ---------------------------------------------------------------- timing
inline size_t l2_bytes() {
  int dev = 0, l2 = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev);
  return static_cast<size_t>(l2);
}

// Number of disjoint input sets so that sets * set_bytes >= 3 * L2 (between 1 and max_sets).
inline int sets_for(size_t set_bytes, int max_sets = 64) {
  const size_t want = 3 * l2_bytes();
  if (set_bytes == 0) return max_sets;
  const size_t s = (want + set_bytes - 1) / set_bytes;
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(s, size_t(max_sets))));
}

// Captures `body(set)` for set = 0..sets-1 into one graph on `stream`, replays it `reps` times
// after `warmup` replays; returns the median time per set in microseconds.
inline double time_graph_us(cudaStream_t stream, int sets, const std::function<void(int)>& body, int reps = 15,
                            int warmup = 3) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  DSATTN_BENCH_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int s = 0; s < sets; ++s) body(s);
  DSATTN_BENCH_CHECK(cudaStreamEndCapture(stream, &graph));
  DSATTN_BENCH_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  DSATTN_BENCH_CHECK(cudaEventCreate(&a));
  DSATTN_BENCH_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) DSATTN_BENCH_CHECK(cudaGraphLaunch(exec, stream));
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    DSATTN_BENCH_CHECK(cudaEventRecord(a, stream));
    DSATTN_BENCH_CHECK(cudaGraphLaunch(exec, stream));
    DSATTN_BENCH_CHECK(cudaEventRecord(b, stream));
    DSATTN_BENCH_CHECK(cudaEventSynchronize(b));
    DSATTN_BENCH_CHECK(cudaEventElapsedTime(&ms[i], a, b));
  }
  DSATTN_BENCH_CHECK(cudaGetLastError());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  std::sort(ms.begin(), ms.end());
  return 1000.0 * ms[reps / 2] / sets;
}

// Plain copy kernel (16-byte loads and stores, grid-stride): the bandwidth a streaming kernel gets.
static __global__ void bench_copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}

// Device-to-device copy bandwidth (bytes read + written per second), measured now: the better of
// cudaMemcpyAsync and a 16-byte copy kernel, after ~0.2 s of warm-up so clocks have ramped.
inline double copy_bandwidth_gbs(cudaStream_t stream, size_t bytes = size_t(1) << 30) {
  DeviceBuffer src(bytes), dst(bytes);
  fill_bytes(src.ptr, bytes, 1, false);
  int sms = 0;
  DSATTN_BENCH_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t n16 = bytes / 16;
  auto kern = [&](int) {
    bench_copy_kernel<<<sms * 8, 512, 0, stream>>>(src.as<uint4>(), dst.as<uint4>(), n16);
  };
  for (int i = 0; i < 300; ++i) kern(0);  // warm-up: ~0.15 s of full-bandwidth traffic
  const double us_kernel = time_graph_us(stream, 1, kern, 20, 2);
  const double us_memcpy = time_graph_us(stream, 1, [&](int) {
    DSATTN_BENCH_CHECK(cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice, stream));
  }, 20, 2);
  return 2.0 * double(bytes) / (std::min(us_kernel, us_memcpy) * 1e-6) / 1e9;
}

// ---------------------------------------------------------------- arguments and tables
inline bool has_flag(const std::vector<std::string>& args, const std::string& f) {
  return std::find(args.begin(), args.end(), f) != args.end();
}
// "a,b,,c" -> {"a", "b", "", "c"} (empty tokens kept: each caller decides what they mean; "" -> {""}).
inline std::vector<std::string> comma_tokens(const std::string& v) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t c = v.find(',', pos);
    out.push_back(v.substr(pos, c == std::string::npos ? std::string::npos : c - pos));
    if (c == std::string::npos) return out;
    pos = c + 1;
  }
}

// "--name a,b,c" or "--name=a,b,c" -> {a, b, c}; `dflt` when absent.
inline std::vector<long> int_list(const std::vector<std::string>& args, const std::string& name, std::vector<long> dflt) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string v;
    if (args[i] == name && i + 1 < args.size()) v = args[i + 1];
    else if (args[i].rfind(name + "=", 0) == 0) v = args[i].substr(name.size() + 1);
    else continue;
    std::vector<long> out;
    for (const std::string& tok : comma_tokens(v)) {
      if (tok.empty()) continue;
      long x = std::strtol(tok.c_str(), nullptr, 10);
      const char last = tok.back();
      if (last == 'K' || last == 'k') x *= 1024;
      if (last == 'M' || last == 'm') x *= 1024 * 1024;
      out.push_back(x);
    }
    return out;
  }
  return dflt;
}

// Fixed-width table: header once, then rows of preformatted cells.
struct Table {
  std::vector<std::string> head;
  std::vector<int> width;
  std::vector<std::vector<std::string>> rows;
  explicit Table(std::vector<std::string> h) : head(std::move(h)) {
    for (auto& s : head) width.push_back(static_cast<int>(s.size()));
  }
  void add(std::vector<std::string> r) {
    for (size_t i = 0; i < r.size() && i < width.size(); ++i) width[i] = std::max<int>(width[i], int(r[i].size()));
    rows.push_back(std::move(r));
  }
  void print(FILE* f = stdout) const {
    auto line = [&](const std::vector<std::string>& r) {
      std::fputs("|", f);
      for (size_t i = 0; i < width.size(); ++i) std::fprintf(f, " %*s |", width[i], i < r.size() ? r[i].c_str() : "");
      std::fputs("\n", f);
    };
    line(head);
    std::fputs("|", f);
    for (int w : width) std::fprintf(f, "%s|", std::string(size_t(w) + 2, '-').c_str());
    std::fputs("\n", f);
    for (auto& r : rows) line(r);
    std::fflush(f);
  }
};

inline std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

}  // namespace bench
}  // namespace dsattn
