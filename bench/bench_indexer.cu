// `dsattn bench indexer`: paged_mqa_logits (decode) and mqa_logits (prefill) on the GPU.
//   --quick              a small set of shapes
//   --b LIST --ctx LIST --n LIST --s LIST --h LIST   shape lists (ctx in states; 8K, 32K accepted)
//   --fp4                MXFP4 cache instead of FP8
//   --smem BYTES         shared-memory budget (101376 = sm_120)
//   --no-prefill         skip the prefill row
//   --no-schedule        paged_mqa_logits without a caller schedule (the op splits the work itself)
// Each row: median time per launch (CUDA graph, inputs rotated so they come from HBM), achieved
// GB/s over the bytes that must move (keys + scales once per request, logits written), and that
// as % of the device-to-device copy bandwidth measured in the same run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_sms.cuh"
#include "bench_util.cuh"
#include "dsattn/formats.h"
#include "dsattn/ops.h"

namespace dsattn {
namespace bench {
namespace {

__global__ void set_page_scales(uint8_t* pages, int64_t num_pages, int64_t stride, int S, int rb, int fp4) {
  const int64_t n = num_pages * S;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = i / S;
    const int s = static_cast<int>(i % S);
    uint8_t* at = pages + p * stride + int64_t(S) * rb + 4 * s;
    const uint32_t v = fp4 ? kBenchMxKeyExps : kBenchFp8Scale;
    *reinterpret_cast<uint32_t*>(at) = v;
  }
}

struct DecodeShape {
  int B, ctx, N, S, H, D;
};

void check(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "bench indexer: %s: %s\n", what, s.to_string().c_str());
    std::exit(2);
  }
}

// Returns {time_us, bytes}.
std::pair<double, double> run_decode(const DecodeShape& sh, bool fp4, int smem, cudaStream_t stream,
                                     bool linear_pages = false, bool caller_schedule = true) {
  const int rb = fp4 ? sh.D / 2 : sh.D;
  const int64_t stride = int64_t(sh.S) * (rb + 4);
  const int64_t ppr = (sh.ctx + sh.S - 1) / sh.S;
  const int64_t set_pages = int64_t(sh.B) * ppr;
  const int64_t R = int64_t(sh.B) * sh.N;
  const int sets = sets_for(size_t(set_pages * stride));
  const int64_t num_pages = set_pages * sets;
  DeviceBuffer cache(size_t(num_pages * stride));
  fill_bytes(cache.ptr, cache.bytes, 11, !fp4);
  set_page_scales<<<1024, 256>>>(cache.as<uint8_t>(), num_pages, stride, sh.S, rb, fp4 ? 1 : 0);
  DSATTN_BENCH_CHECK(cudaGetLastError());
  // Block tables: set k owns pages [k * set_pages, (k + 1) * set_pages), shuffled.
  std::mt19937_64 rng(5);
  std::vector<int32_t> bt(static_cast<size_t>(num_pages));
  for (int k = 0; k < sets; ++k) {
    auto* b = bt.data() + size_t(k) * set_pages;
    std::iota(b, b + set_pages, int32_t(k * set_pages));
    if (!linear_pages) std::shuffle(b, b + set_pages, rng);
  }
  DeviceBuffer dbt(bt.size() * 4);
  DSATTN_BENCH_CHECK(cudaMemcpy(dbt.ptr, bt.data(), bt.size() * 4, cudaMemcpyHostToDevice));
  std::vector<int32_t> lens(size_t(sh.B), sh.ctx);
  DeviceBuffer dlens(lens.size() * 4);
  DSATTN_BENCH_CHECK(cudaMemcpy(dlens.ptr, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
  DeviceBuffer q(size_t(R) * sh.H * rb), qs(size_t(R) * sh.H * 4), w(size_t(R) * sh.H * 4);
  fill_bytes(q.ptr, q.bytes, 12, !fp4);
  fill_bytes(qs.ptr, qs.bytes, 13, false);
  if (fp4) {
    std::vector<int32_t> h(size_t(R) * sh.H, static_cast<int32_t>(kBenchMxQueryExps));
    DSATTN_BENCH_CHECK(cudaMemcpy(qs.ptr, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  }
  fill_f32(w.as<float>(), size_t(R) * sh.H, 14, -1.f, 1.f);
  DeviceBuffer logits(size_t(R) * sh.ctx * 4);
  const int parts = cuda_stream_num_sms(stream);  // the caller schedule's partitions: the SMs the stream has
  DeviceBuffer sched(size_t(schedule_metadata_size(parts)) * 4);

  PagedMqaLogitsParams p;
  p.q = make_tensor(q.ptr, fp4 ? DType::kU8 : DType::kF8E4M3, {sh.B, sh.N, sh.H, rb}, Device::kCuda);
  if (fp4) p.q_scales = make_tensor(qs.ptr, DType::kI32, {sh.B, sh.N, sh.H}, Device::kCuda);
  p.weights = make_tensor(w.ptr, DType::kF32, {R, sh.H}, Device::kCuda);
  p.cache.pages = make_tensor(cache.ptr, DType::kU8, {num_pages, stride}, Device::kCuda);
  p.cache.format = fp4 ? IndexerFormat::kMxfp4 : IndexerFormat::kFp8;
  p.cache.states_per_page = sh.S;
  p.cache.head_dim = sh.D;
  p.cache.page_stride_bytes = stride;
  p.context_lens = make_tensor(dlens.ptr, DType::kI32, {sh.B}, Device::kCuda);
  p.logits = make_tensor(logits.ptr, DType::kF32, {R, sh.ctx}, Device::kCuda);
  p.schedule = make_tensor(sched.ptr, DType::kI32, {schedule_metadata_size(parts)}, Device::kCuda);
  Exec ex;
  ex.backend = Backend::kCuda;
  ex.stream = stream;
  ex.smem_budget_bytes = smem;
  check(bench_schedule(p.context_lens, sh.N, sh.S, parts, p.schedule, stream), "schedule_metadata");
  DeviceBuffer own_ws;  // without a caller schedule: the op's own schedule workspace
  if (!caller_schedule) {
    p.schedule = TensorView{};
    PagedMqaLogitsParams p0 = p;
    p0.block_table = make_tensor(dbt.ptr, DType::kI32, {sh.B, ppr}, Device::kCuda);
    size_t bytes = 0;
    check(paged_mqa_logits_workspace(p0, ex, &bytes), "paged_mqa_logits_workspace");
    own_ws.alloc(bytes);
    ex.workspace = own_ws.ptr;
    ex.workspace_bytes = bytes;
  }
  // Warm-up run outside capture (module load, attributes).
  {
    PagedMqaLogitsParams p0 = p;
    p0.block_table = make_tensor(dbt.ptr, DType::kI32, {sh.B, ppr}, Device::kCuda);
    check(paged_mqa_logits(p0, ex), "paged_mqa_logits");
    DSATTN_BENCH_CHECK(cudaStreamSynchronize(stream));
  }
  const double us = time_graph_us(stream, sets, [&](int k) {
    PagedMqaLogitsParams pk = p;
    pk.block_table = make_tensor(dbt.as<int32_t>() + size_t(k) * set_pages, DType::kI32, {sh.B, ppr}, Device::kCuda);
    check(paged_mqa_logits(pk, ex), "paged_mqa_logits");
  });
  const double bytes = double(sh.B) * sh.ctx * (rb + 4) + double(R) * sh.ctx * 4;
  return {us, bytes};
}

// Prefill: M query rows over Nk keys, row m sees [0, Nk - M + m + 1) (causal tail). fp4: MXFP4 keys
// and queries (the block exponents of run_decode's).
std::pair<double, double> run_prefill(int M, int Nk, int H, int D, cudaStream_t stream, int smem, bool fp4 = false) {
  const int rb = fp4 ? D / 2 : D;
  DeviceBuffer q(size_t(M) * H * rb), w(size_t(M) * H * 4), k(size_t(Nk) * rb), ks(size_t(Nk) * 4),
      qs(size_t(M) * H * 4);
  fill_bytes(q.ptr, q.bytes, 21, !fp4);
  fill_bytes(k.ptr, k.bytes, 22, !fp4);
  fill_f32(w.as<float>(), size_t(M) * H, 23, -1.f, 1.f);
  if (fp4) {
    const std::vector<int32_t> hk(size_t(Nk), static_cast<int32_t>(kBenchMxKeyExps)),
        hq(size_t(M) * H, static_cast<int32_t>(kBenchMxQueryExps));
    DSATTN_BENCH_CHECK(cudaMemcpy(ks.ptr, hk.data(), hk.size() * 4, cudaMemcpyHostToDevice));
    DSATTN_BENCH_CHECK(cudaMemcpy(qs.ptr, hq.data(), hq.size() * 4, cudaMemcpyHostToDevice));
  } else {
    fill_f32(ks.as<float>(), size_t(Nk), 24, 0.01f, 0.02f);
  }
  std::vector<int32_t> hs(M, 0), he(M);
  double flops = 0;
  for (int m = 0; m < M; ++m) {
    he[m] = Nk - M + m + 1;
    flops += 2.0 * H * D * he[m];
  }
  DeviceBuffer dks(M * 4), dke(M * 4);
  DSATTN_BENCH_CHECK(cudaMemcpy(dks.ptr, hs.data(), M * 4, cudaMemcpyHostToDevice));
  DSATTN_BENCH_CHECK(cudaMemcpy(dke.ptr, he.data(), M * 4, cudaMemcpyHostToDevice));
  DeviceBuffer logits(size_t(M) * Nk * 4);
  MqaLogitsParams p;
  p.q = make_tensor(q.ptr, fp4 ? DType::kU8 : DType::kF8E4M3, {M, H, rb}, Device::kCuda);
  p.weights = make_tensor(w.ptr, DType::kF32, {M, H}, Device::kCuda);
  p.k = make_tensor(k.ptr, fp4 ? DType::kU8 : DType::kF8E4M3, {Nk, rb}, Device::kCuda);
  p.k_scales = make_tensor(ks.ptr, fp4 ? DType::kI32 : DType::kF32, {Nk}, Device::kCuda);
  if (fp4) {
    p.format = IndexerFormat::kMxfp4;
    p.q_scales = make_tensor(qs.ptr, DType::kI32, {M, H}, Device::kCuda);
  }
  p.ks = make_tensor(dks.ptr, DType::kI32, {M}, Device::kCuda);
  p.ke = make_tensor(dke.ptr, DType::kI32, {M}, Device::kCuda);
  p.logits = make_tensor(logits.ptr, DType::kF32, {M, Nk}, Device::kCuda);
  Exec ex;
  ex.backend = Backend::kCuda;
  ex.stream = stream;
  ex.smem_budget_bytes = smem;
  size_t wsb = 0;
  check(mqa_logits_workspace(p, ex, &wsb), "mqa_logits_workspace");
  DeviceBuffer ws(wsb + 16);
  ex.workspace = ws.ptr;
  ex.workspace_bytes = ws.bytes;
  check(mqa_logits(p, ex), "mqa_logits");
  DSATTN_BENCH_CHECK(cudaStreamSynchronize(stream));
  const double us = time_graph_us(stream, 1, [&](int) { check(mqa_logits(p, ex), "mqa_logits"); }, 5, 1);
  return {us, flops};
}

}  // namespace

int run_indexer(const std::vector<std::string>& args) {
  if (has_flag(args, "--help") || has_flag(args, "-h")) {
    std::puts("usage: dsattn bench indexer [--quick] [--b LIST] [--ctx LIST] [--n LIST] [--s LIST] [--h LIST] [--d D]\n"
              "                            [--fp4] [--smem BYTES] [--no-prefill] [--linear-pages] [--sms N]\n"
              "                            [--no-schedule]\n"
              "  LIST: comma-separated, K/M suffixes (e.g. --ctx 8K,32K). Default: B 1,32,128 x ctx 8K,32K,128K x\n"
              "  N 1,2 x S 32,64 x H 32,64, D 128, plus the DeepGEMM reference rows and a 4K x 64K prefill row.\n"
              "  Block tables are shuffled pages; --linear-pages gives each request consecutive pages.\n"
              "  --sms N: run on a green context of at least N SMs (the copy baseline too).\n"
              "  --no-schedule: paged_mqa_logits without a caller schedule (by default every call gets one from\n"
              "  schedule_metadata, made once outside the timed graph), so the op splits the work itself.");
    return 0;
  }
  if (!cuda_available()) {
    std::fprintf(stderr, "bench indexer: no CUDA device\n");
    return 1;
  }
  if (!use_sm_share(int_list(args, "--sms", {0})[0])) return 1;
  const bool quick = has_flag(args, "--quick");
  const bool fp4 = has_flag(args, "--fp4");
  const int smem = static_cast<int>(int_list(args, "--smem", {0})[0]);
  std::vector<long> Bs = int_list(args, "--b", quick ? std::vector<long>{1, 32, 128} : std::vector<long>{1, 32, 128});
  std::vector<long> ctxs = int_list(args, "--ctx", quick ? std::vector<long>{32768} : std::vector<long>{8192, 32768, 131072});
  std::vector<long> ns = int_list(args, "--n", quick ? std::vector<long>{1} : std::vector<long>{1, 2});
  std::vector<long> Ss = int_list(args, "--s", quick ? std::vector<long>{32, 64} : std::vector<long>{32, 64});
  std::vector<long> Hs = int_list(args, "--h", quick ? std::vector<long>{64} : std::vector<long>{32, 64});
  const long D = int_list(args, "--d", {128})[0];
  const bool linear_pages = has_flag(args, "--linear-pages");
  const bool caller_schedule = !has_flag(args, "--no-schedule");
  cudaStream_t stream;
  DSATTN_BENCH_CHECK(cudaStreamCreate(&stream));
  cudaDeviceProp prop;
  DSATTN_BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  const double copy = copy_bandwidth_gbs(stream);
  std::printf("device: %s, %d SMs, L2 %zu MB; copy bandwidth %.0f GB/s (read + write)\n", prop.name,
              prop.multiProcessorCount, l2_bytes() >> 20, copy);
  std::printf("paged_mqa_logits %s, D=%ld, fp32 logits, smem budget %s, %s\n", fp4 ? "MXFP4" : "FP8", D,
              smem ? std::to_string(smem).c_str() : "device max",
              caller_schedule ? "caller schedule (schedule_metadata)" : "no caller schedule");
  std::vector<DecodeShape> shapes;
  for (long B : Bs)
    for (long ctx : ctxs)
      for (long n : ns)
        for (long S : Ss)
          for (long H : Hs) shapes.push_back({int(B), int(ctx), int(n), int(S), int(H), int(D)});
  if (!quick && !has_flag(args, "--b")) {  // DeepGEMM reference rows
    for (long S : {32, 64}) {
      shapes.push_back({1, 65536, 1, int(S), 64, int(D)});
      shapes.push_back({256, 8192, 1, int(S), 64, int(D)});
      shapes.push_back({128, 65536, 2, int(S), 64, int(D)});
    }
  }
  Table t({"B", "ctx", "N", "S", "H", "time us", "GB/s", "% copy"});
  for (const auto& sh : shapes) {
    const auto r = run_decode(sh, fp4, smem, stream, linear_pages, caller_schedule);
    const double gbs = r.second / (r.first * 1e-6) / 1e9;
    t.add({std::to_string(sh.B), std::to_string(sh.ctx), std::to_string(sh.N), std::to_string(sh.S),
           std::to_string(sh.H), fmt("%.1f", r.first), fmt("%.0f", gbs), fmt("%.1f", 100.0 * gbs / copy)});
  }
  t.print();
  if (!has_flag(args, "--no-prefill")) {
    const int M = quick ? 1024 : 4096, Nk = 65536;
    const auto r = run_prefill(M, Nk, 64, static_cast<int>(D), stream, smem, fp4);
    Table tp({"prefill M", "Nk", "H", "time us", "TFLOPS"});
    tp.add({std::to_string(M), std::to_string(Nk), "64", fmt("%.1f", r.first), fmt("%.1f", r.second / (r.first * 1e-6) / 1e12)});
    tp.print();
  }
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace bench
}  // namespace dsattn
