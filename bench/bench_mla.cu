// dsattn bench mla: sparse_mla_decode (SPEC §3.5) on its CUDA kernels, in the same run: the
// scalar kernel (src/cuda/common/mla_kernel.cuh, DSATTN_MLA_KERNEL=simple), the tensor-core
// kernel (mla_mma_kernel.cuh, =mma) and Hopper's warpgroup-MMA kernel (mla_wgmma_kernel.cuh,
// =wgmma, where it can run), beside the measured copy
// bandwidth. Per row: time per call (bench_util.cuh's method: graphs of back-to-back calls over
// disjoint index sets, a cache larger than 3x the L2, medians), the gathered cache bytes per
// second against the copy (the bytes a call must read: its tokens' records plus q and out), the
// TFLOPS of Q K^T and P V, and the largest difference between a kernel's outputs and the scalar
// kernel's (without it: the first kernel timed) relative to the largest output, on the first
// index set. The tensor-core kernel's split over the indices
// follows its own rule (DSATTN_MLA_SPLITS overrides it); its workspace is allocated per row.
//
// The cache is written by the library's CUDA cache writer from uniform [-1, 1) latents (real
// scales); indices are uniform random slots of the whole cache (one request per row, next_n = 1).
// --prefill times sparse_mla_prefill the same way over a bf16 kv of uniform [-1, 1) rows.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_util.cuh"
#include "dsattn/codecs.h"
#include "dsattn/ops.h"

namespace dsattn {
namespace bench {

namespace {

int mla_usage(int rc = 2) {
  std::fprintf(rc == 0 ? stdout : stderr,
               "usage: dsattn bench mla [--format v4,v32] [--batch 1,16,64] [--heads 16,128] [--topk 2048]\n"
               "                        [--extra 0] [--page 64] [--reps 15] [--no-simple] [--prefill]\n"
               "  --format     latent cache layouts (SPEC 2.3): v4 (584 B/token, d_qk 512), v32 (656 B, d_qk 576)\n"
               "  --batch      query rows (requests, next_n = 1)\n"
               "  --heads      q heads (16, 32, 64, 128)\n"
               "  --topk       indices per row in the main cache; --extra: in a second cache (V4's window)\n"
               "  --page       tokens per page\n"
               "  --no-simple  skip the scalar kernel (slow at large shapes)\n"
               "  --prefill    sparse_mla_prefill instead: --batch query rows over a bf16 kv of d_qk 512 (v4) or\n"
               "               576 (v32), --topk rows each, d_v 512\n"
               "The tensor-core kernel's heads per CTA follow DSATTN_MLA_HEADS_PER_CTA when set.\n");
  return rc;
}

__global__ void mla_bench_fill_bf16(uint16_t* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float u = (bench_hash(seed * 0x9E3779B97F4A7C15ull + i) >> 8) * (2.0f / 16777216.0f) - 1.0f;
    p[i] = codec::f32_to_bf16(u);
  }
}
__global__ void mla_bench_fill_ids(int32_t* p, size_t n, uint64_t seed, int64_t slots) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    p[i] = static_cast<int32_t>(bench_hash(seed * 0x9E3779B97F4A7C15ull + i) % uint64_t(slots));
  }
}
__global__ void mla_bench_iota(int64_t* p, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) p[i] = i;
}

// A latent cache of `pages` pages of P tokens, every slot written by write_latent_cache.
struct BenchLatentCache {
  DeviceBuffer bytes;
  LatentCache view;
  int64_t slots = 0;
  BenchLatentCache(LatentFormat f, int P, int64_t min_slots, uint64_t seed) {
    const int dqk = latent_dqk(f);
    const int64_t pages = (min_slots + P - 1) / P;
    slots = pages * P;
    const int64_t stride = latent_min_page_bytes(f, P);
    bytes.alloc(size_t(pages * stride));
    DSATTN_BENCH_CHECK(cudaMemset(bytes.ptr, 0, bytes.bytes));
    view.pages = make_tensor(bytes.ptr, DType::kU8, {pages, stride}, Device::kCuda);
    view.format = f;
    view.tokens_per_page = P;
    view.page_stride_bytes = stride;
    const int64_t chunk = std::max<int64_t>(1, 65536 / P) * P;  // tokens per writer call, whole pages
    DeviceBuffer kv(size_t(chunk) * dqk * 4), map(size_t(chunk) * 8);
    for (int64_t t0 = 0; t0 < slots; t0 += chunk) {
      const int64_t n = std::min(chunk, slots - t0);
      fill_f32(kv.as<float>(), size_t(n) * dqk, seed + uint64_t(t0), -1.0f, 1.0f);
      mla_bench_iota<<<256, 256>>>(map.as<int64_t>(), n);
      DSATTN_BENCH_CHECK(cudaGetLastError());
      // Slots 0 .. n - 1 of a view whose first page is page t0 / P of the cache.
      WriteLatentCacheParams w;
      w.kv = make_tensor(kv.ptr, DType::kF32, {n, dqk}, Device::kCuda);
      w.slot_mapping = make_tensor(map.ptr, DType::kI64, {n}, Device::kCuda);
      w.cache = view;
      const int64_t first_page = t0 / P, npages = (n + P - 1) / P;
      w.cache.pages = make_tensor(bytes.as<uint8_t>() + first_page * stride, DType::kU8, {npages, stride}, Device::kCuda);
      const Status st = write_latent_cache(w, Exec{});
      if (!st.ok()) {
        std::fprintf(stderr, "dsattn bench mla: cache writer: %s\n", st.to_string().c_str());
        std::exit(1);
      }
    }
    DSATTN_BENCH_CHECK(cudaDeviceSynchronize());
  }
};

float max_abs_bf16(const std::vector<uint16_t>& v) {
  float m = 0.0f;
  for (uint16_t x : v) m = std::max(m, std::fabs(codec::bf16_to_f32(x)));
  return m;
}

// Times one shape under DSATTN_MLA_KERNEL=simple (unless !simple), =mma and =wgmma (Hopper, 64-head
// groups; elsewhere its row says why it cannot run), adding a row each to
// `t`: params(set) are the call's arguments on index set `set`, `workspace` / `op` the op's
// workspace query and the op (sparse_mla_decode or sparse_mla_prefill); `out` holds the call's
// n_out bf16 outputs (compared between the kernels on set 0).
template <typename Params, typename MakeParams>
void time_kernels(Table* t, const std::vector<std::string>& label, bool simple, cudaStream_t stream, int sets, int reps,
                  double call_bytes, double flops, double copy, const DeviceBuffer& out, size_t n_out,
                  const MakeParams& params, Status (*workspace)(const Params&, const Exec&, size_t*),
                  Status (*op)(const Params&, const Exec&)) {
  Exec ex;
  ex.stream = stream;
  double us_simple = 0.0;
  std::vector<uint16_t> ref;
  for (const char* kernel : {"simple", "mma", "wgmma"}) {
    if (!simple && kernel[0] == 's') continue;
    setenv("DSATTN_MLA_KERNEL", kernel, 1);
    std::vector<std::string> row = label;
    row.push_back(kernel);
    size_t ws_bytes = 0;  // the tensor-core kernel's split over the indices
    (void)workspace(params(0), ex, &ws_bytes);
    DeviceBuffer ws(ws_bytes);
    ex.workspace = ws.ptr;
    ex.workspace_bytes = ws_bytes;
    const Status st = op(params(0), ex);
    if (!st.ok()) {
      row.push_back("error: " + st.to_string());
      t->add(row);
      continue;
    }
    DSATTN_BENCH_CHECK(cudaStreamSynchronize(stream));
    std::vector<uint16_t> o(n_out);
    DSATTN_BENCH_CHECK(cudaMemcpy(o.data(), out.ptr, o.size() * 2, cudaMemcpyDeviceToHost));
    std::string diff = "-";
    if (kernel[0] == 's' || ref.empty()) {  // without the scalar kernel: against the first one timed
      ref = o;
    } else {
      float d = 0.0f;
      for (size_t i = 0; i < o.size(); ++i) d = std::max(d, std::fabs(codec::bf16_to_f32(o[i]) - codec::bf16_to_f32(ref[i])));
      diff = fmt("%.2e", d / std::max(max_abs_bf16(ref), 1e-30f));
    }
    const double us = time_graph_us(stream, sets, [&](int s) { (void)op(params(s), ex); }, reps);
    if (kernel[0] == 's') us_simple = us;
    const double gbs = call_bytes / (us * 1e-6) / 1e9;
    for (const std::string& c : {fmt("%.1f", us), fmt("%.0f", gbs), fmt("%.1f", 100.0 * gbs / copy),
                                 fmt("%.1f", flops / (us * 1e-6) / 1e12),
                                 us_simple > 0.0 ? fmt("%.1f", us_simple / us) : std::string("-"), diff}) {
      row.push_back(c);
    }
    t->add(row);
  }
  unsetenv("DSATTN_MLA_KERNEL");
}

// sparse_mla_prefill over a bf16 kv of >= 3x the L2: rows x heads, `topk` random rows each.
void run_prefill(LatentFormat f, const std::vector<long>& batches, const std::vector<long>& heads, long topk, int reps,
                 bool simple, cudaStream_t stream, double copy) {
  const int dqk = latent_dqk(f);
  const int64_t nk = std::max<int64_t>(65536, int64_t(3 * l2_bytes() / size_t(2 * dqk)) + 1);
  DeviceBuffer kv(size_t(nk) * dqk * 2);
  mla_bench_fill_bf16<<<1024, 256>>>(kv.as<uint16_t>(), size_t(nk) * dqk, 21);  // waited for with q's fill
  DSATTN_BENCH_CHECK(cudaGetLastError());
  Table t({"prefill", "M x Hq", "indices", "kernel", "us", "GB/s", "% copy", "TFLOPS", "x scalar", "max |diff|"});
  for (long M : batches) {
    for (long Hq : heads) {
      const double call_bytes = double(M) * topk * dqk * 2 + double(M) * Hq * (dqk + 512) * 2;
      const int sets = sets_for(size_t(call_bytes));
      DeviceBuffer q(size_t(M) * Hq * dqk * 2), out(size_t(M) * Hq * 512 * 2), lse(size_t(M) * Hq * 4);
      DeviceBuffer idx(size_t(sets) * M * topk * 4);
      mla_bench_fill_bf16<<<256, 256>>>(q.as<uint16_t>(), size_t(M) * Hq * dqk, 22);
      mla_bench_fill_ids<<<256, 256>>>(idx.as<int32_t>(), size_t(sets) * M * topk, 23, nk);
      DSATTN_BENCH_CHECK(cudaGetLastError());
      // The fills run on the legacy default stream, the ops on a non-blocking one: without this the
      // first kernel timed could read q and the indices half written (its outputs, the reference
      // of the diff column, then differed from every later kernel's by ~1x the largest output).
      DSATTN_BENCH_CHECK(cudaDeviceSynchronize());
      const auto params = [&](int s) {
        SparseMlaPrefillParams p;
        p.q = make_tensor(q.ptr, DType::kBF16, {M, Hq, dqk}, Device::kCuda);
        p.kv = make_tensor(kv.ptr, DType::kBF16, {nk, dqk}, Device::kCuda);
        p.indices = make_tensor(idx.as<int32_t>() + size_t(s) * M * topk, DType::kI32, {M, topk}, Device::kCuda);
        p.sm_scale = 1.0f / std::sqrt(float(dqk));
        p.d_v = 512;
        p.out = make_tensor(out.ptr, DType::kBF16, {M, Hq, 512}, Device::kCuda);
        p.lse = make_tensor(lse.ptr, DType::kF32, {M, Hq}, Device::kCuda);
        return p;
      };
      time_kernels(&t, {"d_qk " + std::to_string(dqk), std::to_string(M) + " x " + std::to_string(Hq), std::to_string(topk)},
                   simple, stream, sets, reps, call_bytes, 2.0 * double(M) * Hq * double(topk) * (dqk + 512), copy, out,
                   size_t(M) * Hq * 512, params, sparse_mla_prefill_workspace, sparse_mla_prefill);
    }
  }
  t.print();
}

}  // namespace

int run_mla(const std::vector<std::string>& args) {
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") return mla_usage(0);
  }
  std::vector<LatentFormat> formats;
  {
    std::string fl = "v4,v32";
    for (size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == "--format") fl = args[i + 1];
    }
    for (const std::string& tok : comma_tokens(fl)) {
      if (tok == "v4") formats.push_back(LatentFormat::kV4Fp8);
      else if (tok == "v32") formats.push_back(LatentFormat::kV32Fp8);
      else {
        std::fprintf(stderr, "dsattn bench mla: --format expects v4 and / or v32, got '%s'\n", tok.c_str());
        return 2;
      }
    }
  }
  const std::vector<long> batches = int_list(args, "--batch", {1, 16, 64});
  const std::vector<long> heads = int_list(args, "--heads", {16, 128});
  const long topk = int_list(args, "--topk", {2048})[0];
  const long extra = int_list(args, "--extra", {0})[0];
  const long P = int_list(args, "--page", {64})[0];
  const int reps = static_cast<int>(int_list(args, "--reps", {15})[0]);
  const bool simple = !has_flag(args, "--no-simple");
  for (long h : heads) {
    if (h != 16 && h != 32 && h != 64 && h != 128) {
      std::fprintf(stderr, "dsattn bench mla: --heads expects 16, 32, 64 or 128, got %ld\n", h);
      return 2;
    }
  }
  if (topk < 1 || extra < 0 || P < 1 || reps < 3 || batches.empty()) return mla_usage();

  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::fprintf(stderr, "dsattn bench mla: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  int dev = 0;
  DSATTN_BENCH_CHECK(cudaGetDevice(&dev));
  DSATTN_BENCH_CHECK(cudaGetDeviceProperties(&prop, dev));
  cudaStream_t stream;
  DSATTN_BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const double copy = copy_bandwidth_gbs(stream);
  const char* hpc = std::getenv("DSATTN_MLA_HEADS_PER_CTA");
  std::printf("GPU: %s (sm_%d%d, %d SMs); copy %.0f GB/s (read + write); topk %ld + extra %ld, page %ld; "
              "DSATTN_MLA_HEADS_PER_CTA=%s\n",
              prop.name, prop.major, prop.minor, prop.multiProcessorCount, copy, topk, extra, P, hpc ? hpc : "(default)");

  if (has_flag(args, "--prefill")) {
    for (LatentFormat f : formats) run_prefill(f, batches, heads, topk, reps, simple, stream, copy);
    cudaStreamDestroy(stream);
    return 0;
  }
  const long max_b = *std::max_element(batches.begin(), batches.end());
  for (LatentFormat f : formats) {
    const int dqk = latent_dqk(f);
    const int tok_bytes = static_cast<int>(latent_token_bytes(f));
    // Enough slots that the gathered records of all sets do not fit the L2.
    const int64_t min_slots = std::max<int64_t>(int64_t(max_b) * (topk + extra) * 2,
                                                int64_t(3 * l2_bytes() / size_t(tok_bytes)) + 1);
    BenchLatentCache cache(f, static_cast<int>(P), min_slots, 11);
    BenchLatentCache ecache(f, static_cast<int>(P), extra > 0 ? min_slots : P, 12);
    Table t({"format", "B x Hq", "tokens", "kernel", "us", "GB/s", "% copy", "TFLOPS", "x scalar", "max |diff|"});
    for (long B : batches) {
      for (long Hq : heads) {
        const size_t call_bytes = size_t(B) * (topk + extra) * tok_bytes + size_t(B) * Hq * (dqk + 512) * 2;
        const int sets = sets_for(call_bytes);
        DeviceBuffer q(size_t(B) * Hq * dqk * 2), out(size_t(B) * Hq * 512 * 2), lse(size_t(B) * Hq * 4);
        DeviceBuffer idx(size_t(sets) * B * topk * 4), eidx(size_t(sets) * B * std::max<long>(extra, 1) * 4);
        mla_bench_fill_bf16<<<256, 256>>>(q.as<uint16_t>(), size_t(B) * Hq * dqk, 5);
        mla_bench_fill_ids<<<256, 256>>>(idx.as<int32_t>(), size_t(sets) * B * topk, 6, cache.slots);
        if (extra > 0) mla_bench_fill_ids<<<256, 256>>>(eidx.as<int32_t>(), size_t(sets) * B * extra, 7, ecache.slots);
        DSATTN_BENCH_CHECK(cudaGetLastError());
        DSATTN_BENCH_CHECK(cudaDeviceSynchronize());  // filled before the ops' stream reads them (see run_prefill)
        const auto params = [&](int s) {
          SparseMlaDecodeParams p;
          p.q = make_tensor(q.ptr, DType::kBF16, {B, 1, Hq, dqk}, Device::kCuda);
          p.cache = cache.view;
          p.indices = make_tensor(idx.as<int32_t>() + size_t(s) * B * topk, DType::kI32, {B, 1, topk}, Device::kCuda);
          if (extra > 0) {
            p.extra_cache = ecache.view;
            p.extra_indices =
                make_tensor(eidx.as<int32_t>() + size_t(s) * B * extra, DType::kI32, {B, 1, extra}, Device::kCuda);
          }
          p.sm_scale = 1.0f / std::sqrt(float(dqk));
          p.out = make_tensor(out.ptr, DType::kBF16, {B, 1, Hq, 512}, Device::kCuda);
          p.lse = make_tensor(lse.ptr, DType::kF32, {B, 1, Hq}, Device::kCuda);
          return p;
        };
        time_kernels(&t, {f == LatentFormat::kV4Fp8 ? "v4" : "v32", std::to_string(B) + " x " + std::to_string(Hq),
                          std::to_string(topk + extra)},
                     simple, stream, sets, reps, double(call_bytes),
                     2.0 * double(B) * Hq * double(topk + extra) * (dqk + 512), copy, out, size_t(B) * Hq * 512,
                     params, sparse_mla_decode_workspace, sparse_mla_decode);
      }
    }
    t.print();
  }
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace bench
}  // namespace dsattn
