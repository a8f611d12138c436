// CUDA cache writers vs the CPU writer: the whole page buffers must be identical byte for byte, on
// random inputs with hard cases mixed in (zero groups, NaN, +-inf, huge and tiny magnitudes, values at
// E4M3 / E2M1 midpoints), both input dtypes, both slot dtypes, -1 slots and out-of-range slots (which
// the CUDA writer skips; the CPU writer is given -1 there, since it rejects them).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "dsattn/codecs.h"
#include "dsattn/ops.h"
#include "gpu/gpu_test_util.h"

using namespace dsattn;

namespace {

// Random values with hard cases mixed in, in groups of `group` elements.
std::vector<float> hard_inputs(int rows, int dim, int group, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 99);
  std::uniform_real_distribution<float> mag(-20.0f, 20.0f);
  std::vector<float> x(static_cast<size_t>(rows) * dim);
  for (int r = 0; r < rows; ++r) {
    for (int g0 = 0; g0 < dim; g0 += group) {
      const int kind = pick(rng);
      const float scale = std::exp2(mag(rng));
      for (int i = g0; i < g0 + group && i < dim; ++i) {
        float v = n(rng) * scale;
        if (kind < 5) v = 0.0f;                                          // all-zero group
        else if (kind < 10) v = (i % 2 ? -0.0f : 0.0f);
        else if (kind < 20) v = std::ldexp(static_cast<float>(static_cast<int>(n(rng) * 8)) + 0.5f, -3);  // midpoints
        const int elem = pick(rng);
        if (elem == 0) v = std::numeric_limits<float>::quiet_NaN();
        if (elem == 1 && kind % 7 == 0) v = std::numeric_limits<float>::infinity() * (i % 2 ? 1 : -1);
        if (elem == 2) v = std::numeric_limits<float>::denorm_min() * 3;
        x[static_cast<size_t>(r) * dim + i] = v;
      }
    }
  }
  return x;
}

struct Case {
  bool bf16;
  bool i64;
};

template <typename T>
std::vector<T> cast_slots(const std::vector<int64_t>& s) {
  return std::vector<T>(s.begin(), s.end());
}

// One writer comparison: `x` [T, dim] (written as f32 or bf16), slots for the CUDA writer (which
// skips -1 and out-of-range slots) and for the CPU writer (-1 where the CUDA slot is invalid, since
// the CPU writer rejects such slots), pages [num_pages, stride] starting from `init`.
struct WriterCase {
  std::vector<float> x;
  int T = 0, dim = 0;
  std::vector<int64_t> slots_cuda, slots_cpu;
  std::vector<uint8_t> init;
  int64_t num_pages = 0, stride = 0;
  bool bf16 = false, i64 = false;
};

// Runs `write` (write_indexer_cache / write_latent_cache) on a host copy and on a device copy of
// wc.init, with the same input and params `p` (its cache format fields set; `input` names its input
// tensor), and stores in *first the first byte where the two page buffers differ (init.size() when
// none).
template <typename Params, typename Write>
void first_difference(const WriterCase& wc, Params p, TensorView Params::*input, Write write, size_t* first) {
  *first = 0;
  std::vector<uint16_t> xb(wc.x.size());
  for (size_t i = 0; i < wc.x.size(); ++i) xb[i] = codec::f32_to_bf16(wc.x[i]);
  void* in_ptr = wc.bf16 ? static_cast<void*>(xb.data()) : const_cast<float*>(wc.x.data());
  const size_t in_bytes = wc.bf16 ? xb.size() * 2 : wc.x.size() * 4;
  const int64_t T = wc.T;

  // CPU
  std::vector<uint8_t> pages_cpu = wc.init;
  std::vector<int64_t> s64 = wc.slots_cpu;
  std::vector<int32_t> s32 = cast_slots<int32_t>(wc.slots_cpu);
  p.*input = make_tensor(in_ptr, wc.bf16 ? DType::kBF16 : DType::kF32, {T, wc.dim});
  p.slot_mapping = wc.i64 ? make_tensor(s64.data(), DType::kI64, {T}) : make_tensor(s32.data(), DType::kI32, {T});
  p.cache.pages = make_tensor(pages_cpu.data(), DType::kU8, {wc.num_pages, wc.stride});
  Status st = write(p, Exec{});
  ASSERT_TRUE(st.ok()) << st.to_string();

  // CUDA
  std::vector<int64_t> g64 = wc.slots_cuda;
  std::vector<int32_t> g32 = cast_slots<int32_t>(wc.slots_cuda);
  test::DevBuf din, dslots, dpages;
  test::upload_bytes(&din, in_ptr, in_bytes);
  test::upload_bytes(&dslots, wc.i64 ? static_cast<void*>(g64.data()) : static_cast<void*>(g32.data()),
                     T * (wc.i64 ? 8 : 4));
  test::upload_bytes(&dpages, wc.init.data(), wc.init.size());
  Params g = p;
  g.*input = test::on_cuda(p.*input, din.get());
  g.slot_mapping = test::on_cuda(p.slot_mapping, dslots.get());
  g.cache.pages = test::on_cuda(p.cache.pages, dpages.get());
  st = write(g, Exec{});
  ASSERT_TRUE(st.ok()) << st.to_string();
  DSATTN_TEST_CUDA(cudaDeviceSynchronize());
  std::vector<uint8_t> pages_gpu(wc.init.size());
  DSATTN_TEST_CUDA(cudaMemcpy(pages_gpu.data(), dpages.get(), wc.init.size(), cudaMemcpyDeviceToHost));
  *first = std::mismatch(pages_gpu.begin(), pages_gpu.end(), pages_cpu.begin()).first - pages_gpu.begin();
}

}  // namespace

TEST(GpuCacheWriters, IndexerBytesMatchCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  DSATTN_TEST_CUDA(cudaSetDevice(0));
  int seed = 0;
  for (IndexerFormat f : {IndexerFormat::kFp8, IndexerFormat::kMxfp4}) {
    for (int D : {32, 64, 128}) {
      for (int S : {1, 32, 64, 37}) {
        for (Case c : {Case{false, false}, Case{true, true}, Case{false, true}, Case{true, false}}) {
          ++seed;
          const int T = 150, kPages = 7;
          const int64_t stride = ((S * indexer_state_bytes(f, D) + 4 + 3) / 4) * 4;  // padded a little
          const int64_t num_slots = int64_t(kPages) * S;
          WriterCase wc;
          wc.x = hard_inputs(T, D, 32, seed);
          wc.T = T;
          wc.dim = D;
          wc.bf16 = c.bf16;
          wc.i64 = c.i64;
          wc.num_pages = kPages;
          wc.stride = stride;
          // distinct slots; some -1, some out of range (CUDA skips them, CPU gets -1)
          std::mt19937 rng(seed);
          std::vector<int64_t> perm(num_slots);
          for (int64_t i = 0; i < num_slots; ++i) perm[i] = i;
          std::shuffle(perm.begin(), perm.end(), rng);
          for (int t = 0; t < T; ++t) {
            int64_t s = t < num_slots ? perm[t] : -1;
            if (t % 11 == 3) s = -1;
            if (t % 13 == 5) s = num_slots + t;  // out of range
            if (t % 17 == 6) s = -7;             // other negative: skipped too
            wc.slots_cuda.push_back(s);
            wc.slots_cpu.push_back((s >= 0 && s < num_slots) ? s : -1);
          }
          wc.init.resize(kPages * stride);
          for (auto& b : wc.init) b = static_cast<uint8_t>(rng());

          WriteIndexerCacheParams p;
          p.cache.format = f;
          p.cache.states_per_page = S;
          p.cache.head_dim = D;
          p.cache.page_stride_bytes = stride;
          size_t first = 0;
          first_difference(wc, p, &WriteIndexerCacheParams::k, write_indexer_cache, &first);
          if (HasFatalFailure()) return;
          ASSERT_EQ(first, wc.init.size()) << indexer_format_name(f) << " D=" << D << " S=" << S
                                             << " bf16=" << c.bf16 << " i64=" << c.i64 << ": first differing byte";
        }
      }
    }
  }
}

TEST(GpuCacheWriters, LatentBytesMatchCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  DSATTN_TEST_CUDA(cudaSetDevice(0));
  int seed = 100;
  for (LatentFormat f : {LatentFormat::kV4Fp8, LatentFormat::kV32Fp8}) {
    for (int P : {1, 2, 32, 64}) {
      for (Case c : {Case{false, false}, Case{true, true}, Case{true, false}}) {
        ++seed;
        const int T = 120, kPages = 5, dqk = latent_dqk(f);
        const int64_t stride = latent_min_page_bytes(f, P) + (P % 2 ? 0 : 656);  // some padded strides
        const int64_t num_slots = int64_t(kPages) * P;
        WriterCase wc;
        wc.x = hard_inputs(T, dqk, 64, seed);
        wc.T = T;
        wc.dim = dqk;
        wc.bf16 = c.bf16;
        wc.i64 = c.i64;
        wc.num_pages = kPages;
        wc.stride = stride;
        std::mt19937 rng(seed);
        std::vector<int64_t> perm(num_slots);
        for (int64_t i = 0; i < num_slots; ++i) perm[i] = i;
        std::shuffle(perm.begin(), perm.end(), rng);
        for (int t = 0; t < T; ++t) {
          int64_t s = t < num_slots ? perm[t] : -1;
          if (t % 9 == 2) s = -1;
          if (t % 10 == 7) s = num_slots;  // first out-of-range slot
          wc.slots_cuda.push_back(s);
          wc.slots_cpu.push_back((s >= 0 && s < num_slots) ? s : -1);
        }
        wc.init.resize(kPages * stride);
        for (auto& b : wc.init) b = static_cast<uint8_t>(rng());

        WriteLatentCacheParams p;
        p.cache.format = f;
        p.cache.tokens_per_page = P;
        p.cache.page_stride_bytes = stride;
        size_t first = 0;
        first_difference(wc, p, &WriteLatentCacheParams::kv, write_latent_cache, &first);
        if (HasFatalFailure()) return;
        ASSERT_EQ(first, wc.init.size()) << latent_format_name(f) << " P=" << P << " bf16=" << c.bf16
                                           << " i64=" << c.i64 << ": first differing byte";
      }
    }
  }
}
