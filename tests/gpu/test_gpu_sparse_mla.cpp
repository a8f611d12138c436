// CUDA sparse_mla_decode vs the CPU reference (double) on the same cache bytes.
//
// Tolerance: the kernel accumulates in fp32 (dot products over d_qk <= 576, sums over <= ~2100 tokens),
// whose error is ~1e-6 of the row's magnitude, far below half a bf16 step (2^-9 relative). Both sides
// round to bf16 once, so they may land on neighbouring bf16 values when the exact result sits near a
// rounding boundary: we allow one bf16 step (2^-7 relative to the larger value) plus 1e-5 of the
// row's largest output for values that cancel to near zero. lse (fp32): 2e-5 * max(1, |lse|).
// Empty rows must be exact: zeros and -inf. Repeated runs must be bitwise identical.
//
// Every decode case runs both decode kernels: the scalar one (DSATTN_MLA_KERNEL=simple) and the
// tensor-core one (=mma, and the default where it can take the call: checked bitwise). The latter multiplies bf16 operands: Q and the cache's E4M3 / RoPE
// values are bf16 values already (exact), its scores accumulate in fp32 as above, but each
// probability p_t is rounded to bf16 (scaled by its token's dequantization scale) before P V, a
// relative error of at most 2^-8 per term (bf16's unit roundoff: 8 significant bits, round to
// nearest). So its outputs get, on top of the bound above, 2^-8 of
// A_d = sum_t p_t |v_t,d| / sum_t p_t (computed here in double from the reference's dequantized
// values), times 1.05 for the fp32 sums around it; lse does not see that rounding.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/indexer_test_util.h"
#include "cpu/cpu_ops.h"
#include "cuda/common/mla_plan.h"
#include "dsattn/codecs.h"
#include "dsattn/ops.h"
#include "gpu/gpu_test_util.h"

using namespace dsattn;

namespace {

// Whether DSATTN_MLA_KERNEL=wgmma can run a problem of hq heads here: a Hopper device with sm_90a
// code, whole groups of 64 heads, the device's own shared-memory budget, and no heads-per-CTA or
// tile knob set to another shape.
bool wgmma_applies(int hq, int smem_budget) {
  const auto knob_is = [](const char* name, const char* v) {
    const char* e = std::getenv(name);
    return e == nullptr || *e == '\0' || std::string(e) == v;
  };
  return test::hopper() && hq % 64 == 0 && smem_budget == 0 && knob_is("DSATTN_MLA_HEADS_PER_CTA", "64") &&
         knob_is("DSATTN_MLA_TILE", "64");
}

struct HostCache {
  std::vector<uint8_t> bytes;
  LatentCache view;
};

// Every slot filled with random latents by the (CPU) cache writer.
void make_cache(HostCache* c, LatentFormat f, int P, int num_pages, uint32_t seed) {
  const int dqk = latent_dqk(f);
  const int64_t stride = latent_min_page_bytes(f, P);
  c->bytes.assign(num_pages * stride, 0);
  c->view.pages = make_tensor(c->bytes.data(), DType::kU8, {num_pages, stride});
  c->view.format = f;
  c->view.tokens_per_page = P;
  c->view.page_stride_bytes = stride;
  const int64_t T = int64_t(num_pages) * P;
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 0.5f);
  std::vector<float> kv(T * dqk);
  for (auto& x : kv) x = n(rng);
  std::vector<int64_t> slots(T);
  for (int64_t t = 0; t < T; ++t) slots[t] = t;
  WriteLatentCacheParams w;
  w.kv = make_tensor(kv.data(), DType::kF32, {T, dqk});
  w.slot_mapping = make_tensor(slots.data(), DType::kI64, {T});
  w.cache = c->view;
  Status st = write_latent_cache(w, Exec{});
  ASSERT_TRUE(st.ok()) << st.to_string();
}

// Random index rows: distinct valid ids, some -1 and some past the end.
std::vector<int32_t> make_indices(int rows, int topk, int64_t slots, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> idx(static_cast<size_t>(rows) * topk);
  std::vector<int32_t> perm(slots);
  for (int64_t i = 0; i < slots; ++i) perm[i] = static_cast<int32_t>(i);
  for (int r = 0; r < rows; ++r) {
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int j = 0; j < topk; ++j) {
      int32_t v = perm[j % slots];
      if (rng() % 10 == 0) v = -1;
      if (rng() % 40 == 0) v = static_cast<int32_t>(slots + rng() % 100);
      idx[static_cast<size_t>(r) * topk + j] = v;
    }
  }
  return idx;
}

// Sets (value != nullptr) or clears an environment variable for its scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      had_ = true;
      old_ = old;
    }
    if (value != nullptr) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_, old_.c_str(), 1);
    else unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

// A_d of the header comment for one query row: K [n][dqk] (double) are its used tokens' values, q
// its Hq heads (bf16, head stride q_sh); out[h * 512 + d] for d < 512.
void weighted_abs_row(const std::vector<double>& K, int dqk, const uint16_t* q, int64_t q_sh, int64_t Hq,
                      float sm_scale, double* out) {
  const int64_t n = static_cast<int64_t>(K.size()) / dqk;
  if (n == 0) return;
  std::vector<double> sc(n);
  for (int64_t h = 0; h < Hq; ++h) {
    const uint16_t* qh = q + h * q_sh;
    double mx = -INFINITY;
    for (int64_t t = 0; t < n; ++t) {
      double dot = 0.0;
      for (int d = 0; d < dqk; ++d) dot += double(codec::bf16_to_f32(qh[d])) * K[t * dqk + d];
      sc[t] = dot * sm_scale;
      mx = std::max(mx, sc[t]);
    }
    double sum = 0.0;
    for (int64_t t = 0; t < n; ++t) sum += (sc[t] = std::exp(sc[t] - mx));
    double* o = out + h * 512;
    for (int64_t t = 0; t < n; ++t) {
      for (int d = 0; d < 512; ++d) o[d] += sc[t] * std::fabs(K[t * dqk + d]);
    }
    for (int d = 0; d < 512; ++d) o[d] /= sum;
  }
}

// A_d for every (row, head, d < 512) of a decode call: [rows * Hq][512].
std::vector<double> weighted_abs_values(const SparseMlaDecodeParams& p) {
  const int64_t B = p.q.shape[0], Sq = p.q.shape[1], Hq = p.q.shape[2];
  const int dqk = static_cast<int>(p.q.shape[3]);
  std::vector<double> out(static_cast<size_t>(B * Sq * Hq) * 512, 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = 0; s < Sq; ++s) {
      std::vector<double> K;
      const auto gather = [&](const TensorView& idx, const TensorView& len, const LatentCache& c) {
        if (!idx.defined()) return;
        const int64_t topk = idx.shape[2];
        int64_t n = len.defined() ? len.ptr<const int32_t>()[b * len.strides[0]] : topk;
        n = std::max<int64_t>(0, std::min(n, topk));
        const int64_t slots = c.pages.shape[0] * c.tokens_per_page;
        const int32_t* ids = idx.ptr<const int32_t>() + b * idx.strides[0] + s * idx.strides[1];
        for (int64_t j = 0; j < n; ++j) {
          if (ids[j] < 0 || ids[j] >= slots) continue;
          K.resize(K.size() + dqk);
          cpu::dequant_latent(c, ids[j], K.data() + K.size() - dqk);
        }
      };
      gather(p.indices, p.topk_length, p.cache);
      gather(p.extra_indices, p.extra_topk_length, p.extra_cache);
      weighted_abs_row(K, dqk, p.q.ptr<const uint16_t>() + b * p.q.strides[0] + s * p.q.strides[1], p.q.strides[2],
                       Hq, p.sm_scale, out.data() + static_cast<size_t>((b * Sq + s) * Hq) * 512);
    }
  }
  return out;
}

struct Problem {
  LatentFormat format = LatentFormat::kV4Fp8;
  int B = 0, Sq = 0, Hq = 0;
  int P = 0, pages = 0, topk = 0;
  bool extra = false;
  int extra_P = 0, extra_pages = 0, extra_topk = 0;
  bool sink = false;
  // The second cache (V4's window): pages of P tokens, topk indices per row into it.
  void with_extra(int P_, int pages_, int topk_) {
    extra = true;
    extra_P = P_;
    extra_pages = pages_;
    extra_topk = topk_;
  }
  bool lengths = false;
  std::vector<int> empty_rows;  // rows (b * Sq + s) whose indices are all -1
  int smem_budget = 0;          // Exec::smem_budget_bytes of the CUDA calls
};

Problem problem(LatentFormat f, int B, int Sq, int Hq, int P, int pages, int topk) {
  Problem pr;
  pr.format = f;
  pr.B = B;
  pr.Sq = Sq;
  pr.Hq = Hq;
  pr.P = P;
  pr.pages = pages;
  pr.topk = topk;
  return pr;
}

void run_problem(const Problem& pr, uint32_t seed) {
  const int dqk = latent_dqk(pr.format);
  const int rows = pr.B * pr.Sq;
  HostCache main_c, extra_c;
  ASSERT_NO_FATAL_FAILURE(make_cache(&main_c, pr.format, pr.P, pr.pages, seed));
  if (pr.extra) {
    ASSERT_NO_FATAL_FAILURE(make_cache(&extra_c, pr.format, pr.extra_P, pr.extra_pages, seed + 1));
  }
  std::mt19937 rng(seed + 2);
  std::normal_distribution<float> n(0.0f, 0.7f);
  std::vector<uint16_t> q(static_cast<size_t>(rows) * pr.Hq * dqk);
  for (auto& x : q) x = codec::f32_to_bf16(n(rng));
  std::vector<int32_t> idx = make_indices(rows, pr.topk, int64_t(pr.P) * pr.pages, seed + 3);
  for (int r : pr.empty_rows) std::fill(idx.begin() + r * pr.topk, idx.begin() + (r + 1) * pr.topk, -1);
  std::vector<int32_t> eidx;
  if (pr.extra) eidx = make_indices(rows, pr.extra_topk, int64_t(pr.extra_P) * pr.extra_pages, seed + 4);
  for (int r : pr.empty_rows) {
    if (pr.extra) std::fill(eidx.begin() + r * pr.extra_topk, eidx.begin() + (r + 1) * pr.extra_topk, -1);
  }
  std::vector<int32_t> len(pr.B), elen(pr.B);
  for (int b = 0; b < pr.B; ++b) {
    len[b] = b == 0 ? pr.topk : static_cast<int>(rng() % (pr.topk + 1));
    elen[b] = b == 0 ? pr.extra_topk : static_cast<int>(rng() % (pr.extra_topk + 1));
  }
  std::vector<float> sink(pr.Hq);
  for (int h = 0; h < pr.Hq; ++h) sink[h] = -2.0f + 0.05f * h;

  SparseMlaDecodeParams p;
  p.q = make_tensor(q.data(), DType::kBF16, {pr.B, pr.Sq, pr.Hq, dqk});
  p.cache = main_c.view;
  p.indices = make_tensor(idx.data(), DType::kI32, {pr.B, pr.Sq, pr.topk});
  if (pr.lengths) p.topk_length = make_tensor(len.data(), DType::kI32, {pr.B});
  if (pr.extra) {
    p.extra_cache = extra_c.view;
    p.extra_indices = make_tensor(eidx.data(), DType::kI32, {pr.B, pr.Sq, pr.extra_topk});
    if (pr.lengths) p.extra_topk_length = make_tensor(elen.data(), DType::kI32, {pr.B});
  }
  if (pr.sink) p.attn_sink = make_tensor(sink.data(), DType::kF32, {pr.Hq});
  p.sm_scale = 1.0f / std::sqrt(static_cast<float>(dqk));
  std::vector<uint16_t> out_cpu(static_cast<size_t>(rows) * pr.Hq * 512);
  std::vector<float> lse_cpu(static_cast<size_t>(rows) * pr.Hq);
  p.out = make_tensor(out_cpu.data(), DType::kBF16, {pr.B, pr.Sq, pr.Hq, 512});
  p.lse = make_tensor(lse_cpu.data(), DType::kF32, {pr.B, pr.Sq, pr.Hq});
  Status st = sparse_mla_decode(p, Exec{});
  ASSERT_TRUE(st.ok()) << st.to_string();

  test::DevBuf dq, dpages, didx, dlen, depages, deidx, delen, dsink, dout, dlse;
  test::upload_bytes(&dq, q.data(), q.size() * 2);
  test::upload_bytes(&dpages, main_c.bytes.data(), main_c.bytes.size());
  test::upload_bytes(&didx, idx.data(), idx.size() * 4);
  test::upload_bytes(&dlen, len.data(), len.size() * 4);
  test::upload_bytes(&dsink, sink.data(), sink.size() * 4);
  if (pr.extra) {
    test::upload_bytes(&depages, extra_c.bytes.data(), extra_c.bytes.size());
    test::upload_bytes(&deidx, eidx.data(), eidx.size() * 4);
    test::upload_bytes(&delen, elen.data(), elen.size() * 4);
  }
  std::vector<uint16_t> garbage(out_cpu.size(), 0x7FC1);  // NaN: every element must be written
  std::vector<float> lse_garbage(lse_cpu.size(), std::numeric_limits<float>::quiet_NaN());
  test::upload_bytes(&dout, garbage.data(), garbage.size() * 2);
  test::upload_bytes(&dlse, lse_garbage.data(), lse_garbage.size() * 4);
  SparseMlaDecodeParams g = p;
  g.q = test::on_cuda(p.q, dq.get());
  g.cache.pages = test::on_cuda(p.cache.pages, dpages.get());
  g.indices = test::on_cuda(p.indices, didx.get());
  if (pr.lengths) g.topk_length = test::on_cuda(p.topk_length, dlen.get());
  if (pr.extra) {
    g.extra_cache.pages = test::on_cuda(p.extra_cache.pages, depages.get());
    g.extra_indices = test::on_cuda(p.extra_indices, deidx.get());
    if (pr.lengths) g.extra_topk_length = test::on_cuda(p.extra_topk_length, delen.get());
  }
  if (pr.sink) g.attn_sink = test::on_cuda(p.attn_sink, dsink.get());
  g.out = test::on_cuda(p.out, dout.get());
  g.lse = test::on_cuda(p.lse, dlse.get());

  std::vector<double> wabs;
  // The scalar kernel, the tensor-core kernel, then the default (auto), which on these aligned
  // inputs must be the tensor-core kernel: bitwise its outputs.
  // The default runs the Hopper kernel (S split over its warpgroups) where it can, else the
  // mma.sync kernel: auto must be bitwise the one it picks.
  const bool auto_wgmma = wgmma_applies(pr.Hq, pr.smem_budget);
  std::vector<uint16_t> mma_out;
  std::vector<float> mma_lse;
  // On Hopper the warpgroup-MMA kernel too (DSATTN_MLA_KERNEL=wgmma: 64 heads per CTA, 64-token
  // tiles; the same arithmetic as the tensor-core kernel, so the same bound), where it can take the
  // problem and no heads-per-CTA or tile knob asks for another shape.
  // Both of its forms: S split over its warpgroups (DSATTN_MLA_WGMMA_HALF=1) or not (=0).
  std::vector<std::pair<const char*, const char*>> kernels = {{"simple", nullptr}, {"mma", nullptr}};
  if (wgmma_applies(pr.Hq, pr.smem_budget)) {
    kernels.push_back({"wgmma", "0"});
    kernels.push_back({"wgmma", "1"});
  }
  kernels.push_back({nullptr, nullptr});
  for (const auto& [kernel, half] : kernels) {
    SCOPED_TRACE(kernel == nullptr ? std::string("DSATTN_MLA_KERNEL unset (auto)")
                                   : std::string("DSATTN_MLA_KERNEL=") + kernel +
                                         (half ? std::string(", DSATTN_MLA_WGMMA_HALF=") + half : std::string()));
    const ScopedEnv env("DSATTN_MLA_KERNEL", kernel), env_half("DSATTN_MLA_WGMMA_HALF", half);
    const bool wg = kernel != nullptr && std::string(kernel) == "wgmma";
    const bool mma = kernel == nullptr || std::string(kernel) == "mma" || wg;
    if (mma && wabs.empty()) wabs = weighted_abs_values(p);
    DSATTN_TEST_CUDA(cudaMemcpy(dout.get(), garbage.data(), garbage.size() * 2, cudaMemcpyHostToDevice));
    DSATTN_TEST_CUDA(cudaMemcpy(dlse.get(), lse_garbage.data(), lse_garbage.size() * 4, cudaMemcpyHostToDevice));
    std::vector<uint16_t> out_gpu(out_cpu.size()), first_out;
    std::vector<float> lse_gpu(lse_cpu.size()), first_lse;
    Exec gex;
    gex.smem_budget_bytes = pr.smem_budget;
    size_t ws_bytes = 0;  // the tensor-core kernel's split over the indices needs one
    ASSERT_TRUE(sparse_mla_decode_workspace(g, gex, &ws_bytes).ok());
    if (!mma) {
      EXPECT_EQ(ws_bytes, 0u);
    }
    test::DevBuf dws;
    if (ws_bytes > 0) {
      dws.alloc(ws_bytes);
      gex.workspace = dws.get();
      gex.workspace_bytes = ws_bytes;
    }
    for (int rep = 0; rep < 5; ++rep) {
      st = sparse_mla_decode(g, gex);
      ASSERT_TRUE(st.ok()) << st.to_string();
      DSATTN_TEST_CUDA(cudaDeviceSynchronize());
      DSATTN_TEST_CUDA(cudaMemcpy(out_gpu.data(), dout.get(), out_gpu.size() * 2, cudaMemcpyDeviceToHost));
      DSATTN_TEST_CUDA(cudaMemcpy(lse_gpu.data(), dlse.get(), lse_gpu.size() * 4, cudaMemcpyDeviceToHost));
      if (rep == 0) {
        first_out = out_gpu;
        first_lse = lse_gpu;
      } else {
        ASSERT_TRUE(out_gpu == first_out) << "run " << rep << " differs bitwise from run 0";
        ASSERT_EQ(0, std::memcmp(lse_gpu.data(), first_lse.data(), lse_gpu.size() * 4)) << "lse run " << rep;
      }
    }

    if (kernel == nullptr) {
      ASSERT_TRUE(out_gpu == mma_out) << "auto did not run the kernel it should (" << (auto_wgmma ? "wgmma" : "mma") << ")";
      ASSERT_EQ(0, std::memcmp(lse_gpu.data(), mma_lse.data(), lse_gpu.size() * 4));
      continue;
    }
    if (auto_wgmma ? (wg && std::string(half) == "1") : (mma && !wg)) {
      mma_out = out_gpu;
      mma_lse = lse_gpu;
    }
    int bad = 0;
    for (int r = 0; r < rows; ++r) {
      for (int h = 0; h < pr.Hq; ++h) {
        const size_t row = static_cast<size_t>(r) * pr.Hq + h;
        const float lc = lse_cpu[row], lg = lse_gpu[row];
        if (std::isinf(lc)) {
          ASSERT_EQ(lg, lc) << "row " << r << " head " << h << ": empty row lse";
          for (int d = 0; d < 512; ++d) ASSERT_EQ(out_gpu[row * 512 + d], 0) << "empty row output";
          continue;
        }
        ASSERT_LE(std::fabs(lg - lc), 2e-5f * std::max(1.0f, std::fabs(lc))) << "row " << r << " head " << h;
        float row_max = 0.0f;
        for (int d = 0; d < 512; ++d) row_max = std::max(row_max, std::fabs(codec::bf16_to_f32(out_cpu[row * 512 + d])));
        for (int d = 0; d < 512; ++d) {
          const float c = codec::bf16_to_f32(out_cpu[row * 512 + d]);
          const float gv = codec::bf16_to_f32(out_gpu[row * 512 + d]);
          float tol = std::ldexp(std::max(std::fabs(c), std::fabs(gv)), -7) + 1e-5f * row_max;
          if (mma) tol += static_cast<float>(1.05 * std::ldexp(wabs[row * 512 + d], -8));
          if (!(std::fabs(gv - c) <= tol) && ++bad <= 10) {
            ADD_FAILURE() << "row " << r << " head " << h << " dim " << d << ": gpu " << gv << " cpu " << c;
          }
        }
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

}  // namespace

TEST(GpuSparseMla, V4WithExtraCacheSinkAndLengths) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Problem pr = problem(LatentFormat::kV4Fp8, 2, 2, 64, 64, 6, 128);
  pr.with_extra(16, 4, 40);
  pr.sink = true;
  pr.lengths = true;
  run_problem(pr, 1000);
}

TEST(GpuSparseMla, V32Heads128Topk2048) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Problem pr = problem(LatentFormat::kV32Fp8, 1, 2, 128, 64, 40, 2048);
  run_problem(pr, 2000);
}

TEST(GpuSparseMla, SmallHeadCountsAndEmptyRows) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (int hq : {16, 32}) {
    for (LatentFormat f : {LatentFormat::kV4Fp8, LatentFormat::kV32Fp8}) {
      Problem pr = problem(f, 3, 2, hq, 2, 9, 13);  // P = 2: 128-ratio style pages; topk not a multiple of 16
      pr.sink = true;
      pr.lengths = true;  // request 1 or 2 may get length 0
      pr.with_extra(64, 1, 5);
      pr.empty_rows = {1};
      run_problem(pr, 3000 + hq);
    }
  }
}

// The tensor-core kernel at every heads-per-CTA setting (16, 32, 64: 4, 8, 16 warps), and under
// sm_120's 99 KiB shared-memory budget (the default halves to 32 heads per CTA for V4, 16 for V3.2).
TEST(GpuSparseMla, MmaHeadsPerCtaAndSmallBudget) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (const char* hpc : {"16", "64"}) {
    SCOPED_TRACE(std::string("DSATTN_MLA_HEADS_PER_CTA=") + hpc);
    const ScopedEnv env("DSATTN_MLA_HEADS_PER_CTA", hpc);
    Problem v4 = problem(LatentFormat::kV4Fp8, 2, 1, 64, 32, 20, 300);
    v4.lengths = true;
    v4.sink = true;
    run_problem(v4, 4000);
    Problem v32 = problem(LatentFormat::kV32Fp8, 1, 2, 128, 64, 12, 200);
    v32.with_extra(2, 40, 33);
    run_problem(v32, 4100);
  }
  for (LatentFormat f : {LatentFormat::kV4Fp8, LatentFormat::kV32Fp8}) {
    Problem pr = problem(f, 3, 1, 64, 64, 8, 160);
    pr.smem_budget = 101376;
    pr.lengths = true;
    run_problem(pr, 4200);
  }
}

// The tensor-core kernel's split over the indices: forced split counts (the last split shorter,
// rows whose length leaves whole splits empty), no split, and the default rule on one request.
TEST(GpuSparseMla, MmaSplitsOverTheIndices) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (const char* splits : {"1", "3", "7"}) {
    SCOPED_TRACE(std::string("DSATTN_MLA_SPLITS=") + splits);
    const ScopedEnv env("DSATTN_MLA_SPLITS", splits);
    Problem pr = problem(LatentFormat::kV32Fp8, 4, 1, 32, 64, 16, 300);
    pr.lengths = true;  // request 0 all 300; the others random, some below a split's first tile
    pr.sink = true;
    pr.with_extra(16, 8, 40);
    pr.empty_rows = {2};
    run_problem(pr, 5000);
  }
  Problem one = problem(LatentFormat::kV4Fp8, 1, 1, 128, 64, 40, 2048);  // default rule: splits
  one.sink = true;
  run_problem(one, 5100);
}

// Both tile sizes (DSATTN_MLA_TILE 32 / 64: 32 is what 16 and 32 heads per CTA and sm_80 run, 64
// the default at 64 heads per CTA) at every heads-per-CTA setting: lengths that end mid-tile and
// below one tile, empty rows, the extra cache, a sink, splits over the indices (forced, and the
// rule on a single request).
TEST(GpuSparseMla, MmaTileSizes) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (const char* tile : {"32", "64"}) {
    for (const char* hpc : {"16", "32", "64"}) {
      SCOPED_TRACE(std::string("DSATTN_MLA_TILE=") + tile + ", DSATTN_MLA_HEADS_PER_CTA=" + hpc);
      const ScopedEnv et("DSATTN_MLA_TILE", tile), eh("DSATTN_MLA_HEADS_PER_CTA", hpc);
      Problem v4 = problem(LatentFormat::kV4Fp8, 3, 1, 64, 16, 30, 200);
      v4.lengths = true;  // random lengths, some below one tile
      v4.sink = true;
      v4.with_extra(64, 2, 70);
      v4.empty_rows = {2};
      run_problem(v4, 6000);
      Problem v32 = problem(LatentFormat::kV32Fp8, 2, 2, 64, 64, 12, 333);
      v32.lengths = true;
      run_problem(v32, 6100);
      {
        const ScopedEnv z("DSATTN_MLA_SPLITS", "3");
        Problem sp = problem(LatentFormat::kV32Fp8, 2, 1, 64, 2, 200, 260);
        sp.with_extra(16, 4, 40);
        sp.sink = true;
        run_problem(sp, 6200);
      }
      Problem one = problem(LatentFormat::kV4Fp8, 1, 1, 64, 64, 40, 2048);  // the rule splits it
      run_problem(one, 6300);
    }
  }
}

// One small decode call on the GPU for the error cases: request 0 of a V4 cache of 4 pages of 16
// tokens, indices 0 .. 63, q (with 8 spare elements, for misaligned views) and out at Hq heads.
struct SmallDecode {
  HostCache c;
  std::vector<uint16_t> q;
  std::vector<int32_t> idx;
  test::DevBuf dq, dpages, didx, dout, dlse;
  SparseMlaDecodeParams g;
};
void make_small_decode(SmallDecode* d, int Hq) {
  const int topk = 64;
  ASSERT_NO_FATAL_FAILURE(make_cache(&d->c, LatentFormat::kV4Fp8, 16, 4, 77));
  d->q.assign(size_t(Hq) * 512 + 8, codec::f32_to_bf16(0.5f));
  d->idx.resize(topk);
  for (int j = 0; j < topk; ++j) d->idx[j] = j;
  test::upload_bytes(&d->dq, d->q.data(), d->q.size() * 2);
  test::upload_bytes(&d->dpages, d->c.bytes.data(), d->c.bytes.size());
  test::upload_bytes(&d->didx, d->idx.data(), d->idx.size() * 4);
  test::upload_bytes(&d->dout, d->q.data(), size_t(Hq) * 512 * 2);
  test::upload_bytes(&d->dlse, d->q.data(), size_t(Hq) * 4);
  SparseMlaDecodeParams& g = d->g;
  g.q = test::on_cuda(make_tensor(d->q.data(), DType::kBF16, {1, 1, Hq, 512}), d->dq.get());
  g.cache = d->c.view;
  g.cache.pages = test::on_cuda(d->c.view.pages, d->dpages.get());
  g.indices = test::on_cuda(make_tensor(d->idx.data(), DType::kI32, {1, 1, topk}), d->didx.get());
  g.out = test::on_cuda(make_tensor(d->q.data(), DType::kBF16, {1, 1, Hq, 512}), d->dout.get());
  g.lse = test::on_cuda(make_tensor(d->q.data(), DType::kF32, {1, 1, Hq}), d->dlse.get());
  g.sm_scale = 0.05f;
}
// sparse_mla_decode fails, naming the op and `what`.
void expect_decode_error(const SparseMlaDecodeParams& p, const Exec& ex, const char* what) {
  const Status st = sparse_mla_decode(p, ex);
  ASSERT_FALSE(st.ok()) << what;
  EXPECT_NE(st.to_string().find("sparse_mla_decode"), std::string::npos) << st.to_string();
  EXPECT_NE(st.to_string().find(what), std::string::npos) << st.to_string();
}

// The warpgroup-MMA kernel (Hopper) beside the others (run_problem adds it at 64 and 128 heads):
// forced splits over the indices with the last split short and whole splits empty, the default
// rule, both caches with a sink, ragged lengths and empty rows; knobs that ask it for another
// shape are errors.
TEST(GpuSparseMla, WgmmaSplitsAndShapes) {
  if (!test::hopper()) GTEST_SKIP() << "needs an sm_90 device and a build with sm_90a code";
  for (const char* splits : {"1", "3", "7"}) {
    SCOPED_TRACE(std::string("DSATTN_MLA_SPLITS=") + splits);
    const ScopedEnv env("DSATTN_MLA_SPLITS", splits);
    Problem pr = problem(LatentFormat::kV32Fp8, 4, 1, 64, 64, 16, 300);
    pr.lengths = true;
    pr.sink = true;
    pr.with_extra(16, 8, 40);
    pr.empty_rows = {2};
    run_problem(pr, 7000);
    Problem v4 = problem(LatentFormat::kV4Fp8, 2, 2, 128, 64, 12, 257);
    v4.lengths = true;
    v4.with_extra(64, 2, 70);
    run_problem(v4, 7100);
  }
  Problem one = problem(LatentFormat::kV32Fp8, 1, 1, 128, 64, 40, 2048);  // the rule splits it
  one.sink = true;
  run_problem(one, 7200);
  const ScopedEnv w("DSATTN_MLA_KERNEL", "wgmma"), t("DSATTN_MLA_TILE", "32");
  SmallDecode d;
  ASSERT_NO_FATAL_FAILURE(make_small_decode(&d, 64));
  expect_decode_error(d.g, Exec{}, "DSATTN_MLA_KERNEL=wgmma runs 64 heads per CTA and 64-token tiles");
  const ScopedEnv t64("DSATTN_MLA_TILE", "64");
  {
    const ScopedEnv h("DSATTN_MLA_WGMMA_HALF", "2");
    expect_decode_error(d.g, Exec{}, "DSATTN_MLA_WGMMA_HALF expected 0 or 1, got \"2\"");
  }
  Exec small;
  small.smem_budget_bytes = 101376;  // sm_120's budget: the kernel needs ~170-225 KB
  expect_decode_error(d.g, small, "DSATTN_MLA_KERNEL=wgmma needs");
  expect_decode_error(d.g, small, "budget is 101376");
  const Status st = sparse_mla_decode(d.g, Exec{});  // the well-formed call runs
  EXPECT_TRUE(st.ok()) << st.to_string();
  DSATTN_TEST_CUDA(cudaDeviceSynchronize());
}

// The split rule (mla_plan.h), host only, with hand-computed expectations for an H200's 132 SMs.
TEST(GpuSparseMlaPlan, SplitRule) {
  using cuda::mla_mma_plan_for;
  // One request, 128 heads, 2048 indices: 2 CTAs of 64 heads (one per SM), 132 / 2 = 66 splits
  // wanted, 64 tiles allow 16 (4 tiles each).
  cuda::MlaMmaPlan p = mla_mma_plan_for(1, 128, 2048, 132, 0, 0);
  EXPECT_EQ(p.hm, 4);
  EXPECT_EQ(p.splits, 16);
  EXPECT_EQ(p.tiles_per_split, 4);
  EXPECT_EQ(p.workspace, size_t(128) * 16 * (512 * 4 + 8));
  p = mla_mma_plan_for(16, 128, 2048, 132, 0, 0);  // 32 CTAs: 132 / 32 = 4 splits of 16 tiles
  EXPECT_EQ(p.splits, 4);
  EXPECT_EQ(p.tiles_per_split, 16);
  p = mla_mma_plan_for(64, 128, 2048, 132, 0, 0);  // 128 CTAs fill the SMs: no split, no workspace
  EXPECT_EQ(p.splits, 1);
  EXPECT_EQ(p.workspace, 0u);
  p = mla_mma_plan_for(16, 32, 2048, 132, 0, 0);  // 32 heads: one CTA of 32, 2 per SM: 264 / 16 = 16
  EXPECT_EQ(p.hm, 2);
  EXPECT_EQ(p.splits, 16);
  p = mla_mma_plan_for(1, 16, 2048, 132, 0, 0);  // 16 heads: 16 per CTA, 3 CTAs per SM
  EXPECT_EQ(p.hm, 1);
  EXPECT_EQ(p.splits, 16);
  p = mla_mma_plan_for(1, 64, 640, 132, 0, 0);  // 20 tiles: at most 5 splits of 4
  EXPECT_EQ(p.splits, 5);
  EXPECT_EQ(p.tiles_per_split, 4);
  EXPECT_EQ(mla_mma_plan_for(1, 64, 200, 132, 0, 0).splits, 1);  // 7 tiles: not 2 x 4
  EXPECT_EQ(mla_mma_plan_for(1, 64, 32, 132, 0, 7).splits, 1);   // one tile: never split
  p = mla_mma_plan_for(4, 32, 340, 132, 0, 7);  // forced 7 over 11 tiles: 2 each, 6 splits cover them
  EXPECT_EQ(p.tiles_per_split, 2);
  EXPECT_EQ(p.splits, 6);
  p = mla_mma_plan_for(4, 32, 340, 132, 0, 3);
  EXPECT_EQ(p.tiles_per_split, 4);
  EXPECT_EQ(p.splits, 3);
  p = mla_mma_plan_for(1, 128, 2048, 132, 2, 0);  // 32 heads per CTA: 4 CTAs, 2 per SM -> 66, 16 allowed
  EXPECT_EQ(p.hm, 2);
  EXPECT_EQ(p.splits, 16);
  EXPECT_EQ(mla_mma_plan_for(1, 128, 2048, 132, 0, 1).splits, 1);  // DSATTN_MLA_SPLITS=1
  // 64-token tiles: the same 128 indices per split at least (2 tiles), counted in tiles of 64.
  p = mla_mma_plan_for(1, 128, 2048, 132, 0, 0, 64);  // 32 tiles: 16 splits of 2
  EXPECT_EQ(p.tile, 64);
  EXPECT_EQ(p.splits, 16);
  EXPECT_EQ(p.tiles_per_split, 2);
  EXPECT_EQ(p.workspace, size_t(128) * 16 * (512 * 4 + 8));
  p = mla_mma_plan_for(16, 128, 2048, 132, 0, 0, 64);  // 32 CTAs: 4 splits of 8 tiles
  EXPECT_EQ(p.splits, 4);
  EXPECT_EQ(p.tiles_per_split, 8);
  p = mla_mma_plan_for(1, 64, 640, 132, 0, 0, 64);  // 10 tiles: at most 5 splits of 2
  EXPECT_EQ(p.splits, 5);
  EXPECT_EQ(p.tiles_per_split, 2);
  p = mla_mma_plan_for(1, 64, 200, 132, 0, 0, 64);  // 4 tiles: 2 splits of 2 (at 32: 7 tiles, none)
  EXPECT_EQ(p.splits, 2);
  EXPECT_EQ(p.tiles_per_split, 2);
  EXPECT_EQ(mla_mma_plan_for(1, 64, 64, 132, 0, 7, 64).splits, 1);   // one tile: never split
  // The Hopper kernel: one split per tile where all of them take at most half the SMs.
  p = cuda::mla_wgmma_plan_for(1, 64, 2048, 132, 0);  // 1 CTA x 32 tiles <= 66: 32 splits of 1
  EXPECT_EQ(p.tile, 64);
  EXPECT_EQ(p.hm, 4);
  EXPECT_EQ(p.splits, 32);
  EXPECT_EQ(p.tiles_per_split, 1);
  EXPECT_EQ(p.workspace, size_t(64) * 32 * (512 * 4 + 8));
  EXPECT_EQ(cuda::mla_wgmma_plan_for(1, 128, 2048, 132, 0).splits, 32);  // 2 x 32 = 64 <= 66
  EXPECT_EQ(cuda::mla_wgmma_plan_for(1, 128, 2048, 72, 0).splits, 16);   // 64 > 36: the rule's 16 (36 / 2 = 18 wanted)
  EXPECT_EQ(cuda::mla_wgmma_plan_for(4, 64, 2048, 132, 0).splits, 16);   // 4 x 32 = 128 > 66: the rule
  EXPECT_EQ(cuda::mla_wgmma_plan_for(64, 128, 2048, 132, 0).splits, 1);
  EXPECT_EQ(cuda::mla_wgmma_plan_for(1, 64, 512, 132, 0).splits, 8);     // 8 tiles: 8 splits (the rule: 4)
  EXPECT_EQ(cuda::mla_wgmma_plan_for(1, 64, 2048, 132, 7).splits, 7);    // DSATTN_MLA_SPLITS wins
  EXPECT_EQ(cuda::mla_wgmma_plan_for(1, 64, 64, 132, 0).splits, 1);      // one tile: never split
  EXPECT_EQ(cuda::mla_mma_default_tile(4, true), 64);
  EXPECT_EQ(cuda::mla_mma_default_tile(4, false), 32);
  EXPECT_EQ(cuda::mla_mma_default_tile(2, true), 32);
  EXPECT_EQ(cuda::mla_mma_default_tile(1, true), 32);
}

// What the tensor-core kernel cannot take is an error that says why, never a wrong answer.
TEST(GpuSparseMla, MmaRejectsWhatItCannotRun) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int Hq = 32;
  SmallDecode d;
  ASSERT_NO_FATAL_FAILURE(make_small_decode(&d, Hq));
  const SparseMlaDecodeParams& g = d.g;
  {
    const ScopedEnv env("DSATTN_MLA_KERNEL", "fast");
    expect_decode_error(g, Exec{}, "DSATTN_MLA_KERNEL expected auto, simple, mma or wgmma");
  }
  const ScopedEnv env("DSATTN_MLA_KERNEL", "mma");
  ASSERT_TRUE(sparse_mla_decode(g, Exec{}).ok());  // the well-formed call runs
  DSATTN_TEST_CUDA(cudaDeviceSynchronize());
  {
    SparseMlaDecodeParams m = g;  // q 2 bytes past a 16-byte boundary
    m.q.data = static_cast<uint8_t*>(d.dq.get()) + 2;
    expect_decode_error(m, Exec{}, "q 16-byte aligned");
    const ScopedEnv autod("DSATTN_MLA_KERNEL", nullptr);  // the default takes the scalar kernel there
    size_t need = 1;
    ASSERT_TRUE(sparse_mla_decode_workspace(m, Exec{}, &need).ok());
    EXPECT_EQ(need, 0u);
    const Status st = sparse_mla_decode(m, Exec{});
    EXPECT_TRUE(st.ok()) << st.to_string();
    DSATTN_TEST_CUDA(cudaDeviceSynchronize());
  }
  {
    const ScopedEnv h("DSATTN_MLA_HEADS_PER_CTA", "64");
    expect_decode_error(g, Exec{}, "at most the 32 heads of q");
  }
  {
    const ScopedEnv h("DSATTN_MLA_HEADS_PER_CTA", "24");
    expect_decode_error(g, Exec{}, "DSATTN_MLA_HEADS_PER_CTA expected 16, 32 or 64");
  }
  {
    Exec small;
    small.smem_budget_bytes = 48 * 1024;
    expect_decode_error(g, small, "bytes of shared memory per block, budget is 49152");
  }
  {
    const ScopedEnv t("DSATTN_MLA_TILE", "48");
    expect_decode_error(g, Exec{}, "DSATTN_MLA_TILE expected 32 or 64");
  }
  {
    const ScopedEnv t("DSATTN_MLA_TILE", "64");  // 32 heads at 64 tokens per tile need > 99 KiB
    Exec small;
    small.smem_budget_bytes = 101376;
    expect_decode_error(g, small, "32 heads per CTA and 64 tokens per tile needs");
  }
  {
    const ScopedEnv z("DSATTN_MLA_SPLITS", "0");
    expect_decode_error(g, Exec{}, "DSATTN_MLA_SPLITS expected 1 .. 1024");
  }
  {  // the warpgroup-MMA kernel: 64 heads per CTA on Hopper only, and it says so
    const ScopedEnv w("DSATTN_MLA_KERNEL", "wgmma");
    if (!test::hopper()) {
      expect_decode_error(g, Exec{}, DSATTN_HAS_SM90A ? "needs a compute capability 9.0 device" : "needs a build with sm_90a");
    } else {
      expect_decode_error(g, Exec{}, "DSATTN_MLA_KERNEL=wgmma needs a multiple of 64 heads, got 32");
      size_t need = 1;
      ASSERT_TRUE(sparse_mla_decode_workspace(g, Exec{}, &need).ok());
      EXPECT_EQ(need, 0u);
    }
  }
  {
    const ScopedEnv z("DSATTN_MLA_SPLITS", "2");  // two tiles, two splits: partial results in the workspace
    size_t need = 0;
    ASSERT_TRUE(sparse_mla_decode_workspace(g, Exec{}, &need).ok());
    EXPECT_EQ(need, size_t(Hq) * 2 * (512 * 4 + 8));
    expect_decode_error(g, Exec{}, "workspace expected >= ");
  }
}

// sparse_mla_prefill on the GPU with the workspace it asks for, waited on when it launched.
Status prefill_on_gpu(const SparseMlaPrefillParams& g) {
  Exec gex;
  size_t ws_bytes = 0;
  Status st = sparse_mla_prefill_workspace(g, gex, &ws_bytes);
  if (!st.ok()) return st;
  test::DevBuf dws;
  if (ws_bytes > 0) {
    dws.alloc(ws_bytes);
    gex.workspace = dws.get();
    gex.workspace_bytes = ws_bytes;
  }
  st = sparse_mla_prefill(g, gex);
  if (st.ok() && cudaDeviceSynchronize() != cudaSuccess) return Status(Code::kCudaError, "cudaDeviceSynchronize failed");
  return st;
}

// Many query rows (a prefill of 1200 rows x 64 heads x 2048 indices, past the 512 x 64 the other
// cases reach): every kernel on the GPU, each checked against the CPU reference on sampled rows on
// both sides of 512 and 1024 (the reference for all 1200 would take minutes).
TEST(GpuSparseMla, PrefillManyRowsSampled) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int M = 1200, Hq = 64, dqk = 512, dv = 512, topk = 2048, Nk = 65536;
  std::mt19937 rng(991);
  std::normal_distribution<float> n(0.0f, 0.6f);
  std::vector<uint16_t> q(size_t(M) * Hq * dqk), kv(size_t(Nk) * dqk);
  for (auto& x : q) x = codec::f32_to_bf16(n(rng));
  for (auto& x : kv) x = codec::f32_to_bf16(n(rng));
  std::vector<int32_t> idx(size_t(M) * topk);
  for (auto& x : idx) x = static_cast<int32_t>(rng() % Nk);
  const std::vector<int> sample = {0, 1, 511, 512, 700, 1023, 1024, 1199};
  const int S = static_cast<int>(sample.size());
  // The reference on the sampled rows: a prefill of S rows with their q and indices.
  std::vector<uint16_t> qs(size_t(S) * Hq * dqk);
  std::vector<int32_t> is(size_t(S) * topk);
  for (int i = 0; i < S; ++i) {
    std::copy_n(q.begin() + size_t(sample[i]) * Hq * dqk, size_t(Hq) * dqk, qs.begin() + size_t(i) * Hq * dqk);
    std::copy_n(idx.begin() + size_t(sample[i]) * topk, topk, is.begin() + size_t(i) * topk);
  }
  SparseMlaPrefillParams c;
  c.q = make_tensor(qs.data(), DType::kBF16, {S, Hq, dqk});
  c.kv = make_tensor(kv.data(), DType::kBF16, {Nk, dqk});
  c.indices = make_tensor(is.data(), DType::kI32, {S, topk});
  c.sm_scale = 1.0f / std::sqrt(static_cast<float>(dqk));
  c.d_v = dv;
  std::vector<uint16_t> out_cpu(size_t(S) * Hq * dv);
  std::vector<float> lse_cpu(size_t(S) * Hq);
  c.out = make_tensor(out_cpu.data(), DType::kBF16, {S, Hq, dv});
  c.lse = make_tensor(lse_cpu.data(), DType::kF32, {S, Hq});
  ASSERT_TRUE(sparse_mla_prefill(c, Exec{}).ok());
  std::vector<double> wabs(size_t(S) * Hq * 512, 0.0);
  for (int i = 0; i < S; ++i) {
    std::vector<double> K;
    for (int j = 0; j < topk; ++j) {
      for (int d = 0; d < dqk; ++d) K.push_back(codec::bf16_to_f32(kv[size_t(is[size_t(i) * topk + j]) * dqk + d]));
    }
    weighted_abs_row(K, dqk, qs.data() + size_t(i) * Hq * dqk, dqk, Hq, c.sm_scale, wabs.data() + size_t(i) * Hq * 512);
  }

  test::DevBuf dq, dkv, didx, dout, dlse;
  test::upload_bytes(&dq, q.data(), q.size() * 2);
  test::upload_bytes(&dkv, kv.data(), kv.size() * 2);
  test::upload_bytes(&didx, idx.data(), idx.size() * 4);
  std::vector<uint16_t> garbage(size_t(M) * Hq * dv, 0x7FC1);
  test::upload_bytes(&dout, garbage.data(), garbage.size() * 2);
  test::upload_bytes(&dlse, garbage.data(), size_t(M) * Hq * 4);
  SparseMlaPrefillParams g;
  g.q = test::dev_tensor(dq, DType::kBF16, {M, Hq, dqk});
  g.kv = test::dev_tensor(dkv, DType::kBF16, {Nk, dqk});
  g.indices = test::dev_tensor(didx, DType::kI32, {M, topk});
  g.sm_scale = c.sm_scale;
  g.d_v = dv;
  g.out = test::dev_tensor(dout, DType::kBF16, {M, Hq, dv});
  g.lse = test::dev_tensor(dlse, DType::kF32, {M, Hq});
  std::vector<std::pair<const char*, const char*>> runs = {{"simple", nullptr}, {"mma", nullptr}};
  if (wgmma_applies(Hq, 0)) {
    runs.push_back({"wgmma", "0"});
    runs.push_back({"wgmma", "1"});
  }
  for (const auto& [kernel, half] : runs) {
    SCOPED_TRACE(std::string("DSATTN_MLA_KERNEL=") + kernel + (half ? std::string(", DSATTN_MLA_WGMMA_HALF=") + half : ""));
    const ScopedEnv env("DSATTN_MLA_KERNEL", kernel), env_half("DSATTN_MLA_WGMMA_HALF", half);
    const bool mma = std::string(kernel) != "simple";
    DSATTN_TEST_CUDA(cudaMemcpy(dout.get(), garbage.data(), garbage.size() * 2, cudaMemcpyHostToDevice));
    const Status st = prefill_on_gpu(g);
    ASSERT_TRUE(st.ok()) << st.to_string();
    std::vector<uint16_t> out_gpu(garbage.size());
    std::vector<float> lse_gpu(size_t(M) * Hq);
    DSATTN_TEST_CUDA(cudaMemcpy(out_gpu.data(), dout.get(), out_gpu.size() * 2, cudaMemcpyDeviceToHost));
    DSATTN_TEST_CUDA(cudaMemcpy(lse_gpu.data(), dlse.get(), lse_gpu.size() * 4, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < S; ++i) {
      for (int h = 0; h < Hq; ++h) {
        const size_t rc = size_t(i) * Hq + h, rg = size_t(sample[i]) * Hq + h;
        EXPECT_LE(std::fabs(lse_gpu[rg] - lse_cpu[rc]), 2e-5f * std::max(1.0f, std::fabs(lse_cpu[rc])))
            << "row " << sample[i] << " head " << h;
        float row_max = 0.0f;
        for (int d = 0; d < dv; ++d) row_max = std::max(row_max, std::fabs(codec::bf16_to_f32(out_cpu[rc * dv + d])));
        for (int d = 0; d < dv; ++d) {
          const float cv = codec::bf16_to_f32(out_cpu[rc * dv + d]), gv = codec::bf16_to_f32(out_gpu[rg * dv + d]);
          float tol = std::ldexp(std::max(std::fabs(cv), std::fabs(gv)), -7) + 1e-5f * row_max;
          if (mma) tol += static_cast<float>(1.05 * std::ldexp(wabs[rc * 512 + d], -8));
          if (!(std::fabs(gv - cv) <= tol) && ++bad <= 10) {
            ADD_FAILURE() << "row " << sample[i] << " head " << h << " dim " << d << ": gpu " << gv << " cpu " << cv;
          }
        }
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

namespace {

// A prefill problem over a bf16 kv: M query rows x Hq heads, top-k indices into Nk kv rows.
struct PrefillProblem {
  int Hq = 32, dqk = 512, dv = 512, M = 5, Nk = 300, topk = 96;
  uint32_t seed_values = 1, seed_indices = 1;  // q / kv normals, make_indices
  std::vector<int> minus_one_rows;              // rows whose indices are all -1
  std::vector<int32_t> len;                     // topk_length (empty: none)
  bool sink = true;                             // attn_sink 0.1 h - 1.5
};

// One prefill problem on the CPU reference and on each kernel that can take it: the scalar kernel,
// the tensor-core one whole and with its rows split in two, and on Hopper at 64 heads the
// warpgroup-MMA kernel likewise (both forms where they fit: S split over its warpgroups needs
// d_qk 512 for a bf16 kv). The tensor-core kernels take d_v = 512 only, and say so otherwise.
void run_prefill_problem(const PrefillProblem& pp) {
  const int Hq = pp.Hq, dqk = pp.dqk, dv = pp.dv, M = pp.M, Nk = pp.Nk, topk = pp.topk;
  std::mt19937 rng(pp.seed_values);
  std::normal_distribution<float> n(0.0f, 0.6f);
  std::vector<uint16_t> q(size_t(M) * Hq * dqk), kv(size_t(Nk) * dqk);
  for (auto& x : q) x = codec::f32_to_bf16(n(rng));
  for (auto& x : kv) x = codec::f32_to_bf16(n(rng));
  std::vector<int32_t> idx = make_indices(M, topk, Nk, pp.seed_indices);
  for (int r : pp.minus_one_rows) std::fill(idx.begin() + size_t(r) * topk, idx.begin() + size_t(r + 1) * topk, -1);
  std::vector<int32_t> len = pp.len;
  std::vector<float> sink(Hq);
  for (int h = 0; h < Hq; ++h) sink[h] = 0.1f * h - 1.5f;
  SparseMlaPrefillParams p;
  p.q = make_tensor(q.data(), DType::kBF16, {M, Hq, dqk});
  p.kv = make_tensor(kv.data(), DType::kBF16, {Nk, dqk});
  p.indices = make_tensor(idx.data(), DType::kI32, {M, topk});
  if (!len.empty()) p.topk_length = make_tensor(len.data(), DType::kI32, {M});
  if (pp.sink) p.attn_sink = make_tensor(sink.data(), DType::kF32, {Hq});
  p.sm_scale = 1.0f / std::sqrt(static_cast<float>(dqk));
  p.d_v = dv;
  std::vector<uint16_t> out_cpu(size_t(M) * Hq * dv);
  std::vector<float> lse_cpu(size_t(M) * Hq);
  p.out = make_tensor(out_cpu.data(), DType::kBF16, {M, Hq, dv});
  p.lse = make_tensor(lse_cpu.data(), DType::kF32, {M, Hq});
  Status st = sparse_mla_prefill(p, Exec{});
  ASSERT_TRUE(st.ok()) << st.to_string();

  test::DevBuf dq, dkv, didx, dlen, dsink, dout, dlse;
  test::upload_bytes(&dq, q.data(), q.size() * 2);
  test::upload_bytes(&dkv, kv.data(), kv.size() * 2);
  test::upload_bytes(&didx, idx.data(), idx.size() * 4);
  if (!len.empty()) test::upload_bytes(&dlen, len.data(), len.size() * 4);
  test::upload_bytes(&dsink, sink.data(), sink.size() * 4);
  std::vector<uint16_t> garbage(out_cpu.size(), 0x7FC1);
  std::vector<float> lse_garbage(lse_cpu.size(), std::numeric_limits<float>::quiet_NaN());
  test::upload_bytes(&dout, garbage.data(), garbage.size() * 2);
  test::upload_bytes(&dlse, lse_garbage.data(), lse_garbage.size() * 4);
  SparseMlaPrefillParams g = p;
  g.q = test::on_cuda(p.q, dq.get());
  g.kv = test::on_cuda(p.kv, dkv.get());
  g.indices = test::on_cuda(p.indices, didx.get());
  if (!len.empty()) g.topk_length = test::on_cuda(p.topk_length, dlen.get());
  if (pp.sink) g.attn_sink = test::on_cuda(p.attn_sink, dsink.get());
  g.out = test::on_cuda(p.out, dout.get());
  g.lse = test::on_cuda(p.lse, dlse.get());
  // A_d (header) of every (row, head) for the tensor-core kernel's bound.
  std::vector<double> wabs(static_cast<size_t>(M) * Hq * 512, 0.0);
  for (int m = 0; m < M; ++m) {
    std::vector<double> K;
    const int used = len.empty() ? topk : std::min(len[m], topk);
    for (int j = 0; j < used; ++j) {
      const int32_t id = idx[size_t(m) * topk + j];
      if (id < 0 || id >= Nk) continue;
      for (int d = 0; d < dqk; ++d) K.push_back(codec::bf16_to_f32(kv[size_t(id) * dqk + d]));
    }
    weighted_abs_row(K, dqk, q.data() + size_t(m) * Hq * dqk, dqk, Hq, p.sm_scale, wabs.data() + size_t(m) * Hq * 512);
  }
  struct Run {
    const char* kernel;
    const char* splits;
    const char* half;
  };
  std::vector<Run> runs = {{"simple", nullptr, nullptr}, {"mma", nullptr, nullptr}, {"mma", "2", nullptr}};
  if (wgmma_applies(Hq, 0)) {
    runs.push_back({"wgmma", nullptr, "0"});
    runs.push_back({"wgmma", "2", "0"});
    if (dqk == 512) {
      runs.push_back({"wgmma", nullptr, "1"});
      runs.push_back({"wgmma", "2", "1"});
    }
  }
  for (const auto& [kernel, splits, half] : runs) {
    SCOPED_TRACE(std::string("DSATTN_MLA_KERNEL=") + kernel + (splits ? ", DSATTN_MLA_SPLITS=2" : "") +
                 (half ? std::string(", DSATTN_MLA_WGMMA_HALF=") + half : std::string()));
    const ScopedEnv env("DSATTN_MLA_KERNEL", kernel), env_splits("DSATTN_MLA_SPLITS", splits),
        env_half("DSATTN_MLA_WGMMA_HALF", half);
    const bool wg = std::string(kernel) == "wgmma";
    const bool mma = std::string(kernel) == "mma" || wg;
    DSATTN_TEST_CUDA(cudaMemcpy(dout.get(), garbage.data(), garbage.size() * 2, cudaMemcpyHostToDevice));
    DSATTN_TEST_CUDA(cudaMemcpy(dlse.get(), lse_garbage.data(), lse_garbage.size() * 4, cudaMemcpyHostToDevice));
    st = prefill_on_gpu(g);
    if (mma && dv != 512) {  // the tensor-core kernel's warps own 512 output dims
      ASSERT_FALSE(st.ok());
      const std::string want = "DSATTN_MLA_KERNEL=mma needs d_v 512 for prefill, got " + std::to_string(dv);
      EXPECT_NE(st.to_string().find(want), std::string::npos) << st.to_string();
      continue;
    }
    ASSERT_TRUE(st.ok()) << st.to_string();
    DSATTN_TEST_CUDA(cudaDeviceSynchronize());
    std::vector<uint16_t> out_gpu(out_cpu.size());
    std::vector<float> lse_gpu(lse_cpu.size());
    DSATTN_TEST_CUDA(cudaMemcpy(out_gpu.data(), dout.get(), out_gpu.size() * 2, cudaMemcpyDeviceToHost));
    DSATTN_TEST_CUDA(cudaMemcpy(lse_gpu.data(), dlse.get(), lse_gpu.size() * 4, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int r = 0; r < M * Hq; ++r) {
      if (std::isinf(lse_cpu[r])) {
        ASSERT_EQ(lse_gpu[r], lse_cpu[r]) << "row " << r / Hq;
        for (int d = 0; d < dv; ++d) ASSERT_EQ(out_gpu[size_t(r) * dv + d], 0);
        continue;
      }
      ASSERT_LE(std::fabs(lse_gpu[r] - lse_cpu[r]), 2e-5f * std::max(1.0f, std::fabs(lse_cpu[r])));
      float row_max = 0.0f;
      for (int d = 0; d < dv; ++d) row_max = std::max(row_max, std::fabs(codec::bf16_to_f32(out_cpu[size_t(r) * dv + d])));
      for (int d = 0; d < dv; ++d) {
        const float c = codec::bf16_to_f32(out_cpu[size_t(r) * dv + d]);
        const float gv = codec::bf16_to_f32(out_gpu[size_t(r) * dv + d]);
        float tol = std::ldexp(std::max(std::fabs(c), std::fabs(gv)), -7) + 1e-5f * row_max;
        if (mma) tol += static_cast<float>(1.05 * std::ldexp(wabs[size_t(r) * 512 + d], -8));
        if (!(std::fabs(gv - c) <= tol) && ++bad <= 10) {
          ADD_FAILURE() << "dqk " << dqk << " dv " << dv << " row " << r << " dim " << d << ": gpu " << gv << " cpu " << c;
        }
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

}  // namespace

// Prefill over a bf16 kv on CUDA vs the CPU reference; d_v below 512, empty rows, invalid ids. Both
// kernels (the tensor-core one takes d_v = 512 only, and says so otherwise).
TEST(GpuSparseMla, PrefillMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (int Hq : {32, 64})
  for (int dqk : {512, 576}) {
    for (int dv : {512, 256}) {
      SCOPED_TRACE("Hq " + std::to_string(Hq) + ", d_qk " + std::to_string(dqk) + ", d_v " + std::to_string(dv));
      PrefillProblem pp;  // 5 rows x 96 indices into 300 kv rows, a sink
      pp.Hq = Hq;
      pp.dqk = dqk;
      pp.dv = dv;
      pp.seed_values = uint32_t(dqk + dv);
      pp.seed_indices = uint32_t(dqk * 7 + dv);
      pp.minus_one_rows = {2};       // row 2 empty
      pp.len = {96, 50, 96, 0, 77};  // row 3 empty by length
      run_prefill_problem(pp);
    }
  }
}

// Problems drawn at random (V3.2 / V4 latents, 1-8 requests of 1-4 query rows, 16-128 heads, pages
// of 1-128 tokens, top-k 1-2048 with -1 and out-of-range entries, the extra cache, per-request
// lengths, a sink, empty rows, sm_120's 99 KiB budget), each through run_problem: every kernel
// against the CPU reference, five runs bitwise alike, and auto equal to the kernel it should pick.
// DSATTN_TEST_RANDOM_CASES (default 3) and DSATTN_TEST_RANDOM_SEED (default 2026) widen or move
// the draw (scripts/gpu_check.sh --random); a failure names the problem and its seed.
TEST(GpuSparseMla, RandomCases) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int n = testutil::env_int("DSATTN_TEST_RANDOM_CASES", 3);
  const uint32_t base = static_cast<uint32_t>(testutil::random_seed_base());
  for (int i = 0; i < n && !::testing::Test::HasFatalFailure(); ++i) {
    const uint32_t seed = base * 7919u + static_cast<uint32_t>(i) * 104729u + 13u;
    std::mt19937 g(seed);
    auto below = [&](int m) { return static_cast<int>(g() % static_cast<uint32_t>(m)); };
    auto pick = [&](std::initializer_list<int> v) { return *(v.begin() + below(static_cast<int>(v.size()))); };
    const LatentFormat f = below(2) ? LatentFormat::kV4Fp8 : LatentFormat::kV32Fp8;
    const int hq = pick({16, 32, 64, 64, 128, 128});
    const int B = 1 + below(8), Sq = below(2) ? 1 : 1 + below(4);
    // top-k up to 2048 within ~1.5M (row, head, index) triples for the reference.
    const int tk_cap = std::max(1, std::min(2048, 1500000 / (B * Sq * hq)));
    const int topk = below(3) == 0 ? std::min(tk_cap, pick({64, 128, 512, 2048})) : 1 + below(tk_cap);
    const int P = pick({1, 2, 16, 32, 64, 64, 128});
    const int pages = 1 + below(std::max(1, 4096 / P));
    Problem pr = problem(f, B, Sq, hq, P, pages, topk);
    if (below(10) < 4) {
      const int eP = pick({1, 2, 16, 64, 128});
      pr.with_extra(eP, 1 + below(std::max(1, 1024 / eP)), 1 + below(std::min(256, tk_cap)));
    }
    pr.sink = below(2) == 1;
    pr.lengths = below(2) == 1;
    if (below(5) == 0) pr.empty_rows = {below(B * Sq)};
    if (below(7) == 0) pr.smem_budget = 101376;
    char name[256];
    std::snprintf(name, sizeof(name), "seed %u: %s B%d Sq%d Hq%d P%d pages%d topk%d extra%d(P%d pages%d topk%d) sink%d "
                  "lengths%d empty_rows%zu smem%d", seed, f == LatentFormat::kV4Fp8 ? "V4" : "V3.2", B, Sq, hq, P,
                  pages, topk, pr.extra, pr.extra_P, pr.extra_pages, pr.extra_topk, pr.sink, pr.lengths,
                  pr.empty_rows.size(), pr.smem_budget);
    SCOPED_TRACE(name);
    std::printf("[ random %d ] %s\n", i, name);
    std::fflush(stdout);
    run_problem(pr, seed);
  }
}

// Prefill problems drawn at random: 16-128 heads, d_qk 512 / 576, d_v 512 / 256, 1-64 query rows
// over 1-70000 kv rows, top-k 1-2048 (within ~1.5M (row, head, index) triples for the reference)
// with -1 and out-of-range entries, rows of -1 only, per-row lengths from 0 to top-k, a sink
// or none; each through run_prefill_problem (every kernel that takes it, against the CPU
// reference). DSATTN_TEST_RANDOM_CASES (default 3) and DSATTN_TEST_RANDOM_SEED as RandomCases.
TEST(GpuSparseMla, RandomPrefillCases) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int n = testutil::env_int("DSATTN_TEST_RANDOM_CASES", 3);
  const uint32_t base = static_cast<uint32_t>(testutil::random_seed_base());
  for (int i = 0; i < n && !::testing::Test::HasFatalFailure(); ++i) {
    const uint32_t seed = base * 6151u + static_cast<uint32_t>(i) * 15485863u + 29u;
    std::mt19937 g(seed);
    auto below = [&](int m) { return static_cast<int>(g() % static_cast<uint32_t>(m)); };
    auto pick = [&](std::initializer_list<int> v) { return *(v.begin() + below(static_cast<int>(v.size()))); };
    PrefillProblem pp;
    pp.Hq = pick({16, 32, 64, 64, 128});
    pp.dqk = pick({512, 576});
    pp.dv = below(4) == 0 ? 256 : 512;
    pp.M = 1 + below(below(2) ? 8 : 64);
    pp.Nk = 1 + static_cast<int>(std::exp(std::log(70000.0) * (g() / 4294967296.0)));
    const int tk_cap = std::max(1, std::min(2048, 1500000 / (pp.M * pp.Hq)));
    pp.topk = below(3) == 0 ? std::min(tk_cap, pick({64, 128, 512, 2048})) : 1 + below(tk_cap);
    pp.seed_values = seed;
    pp.seed_indices = seed + 1;
    if (below(4) == 0) pp.minus_one_rows = {below(pp.M)};
    if (below(2)) {
      for (int m = 0; m < pp.M; ++m) {
        const int lk = below(4);
        pp.len.push_back(lk == 0 ? 0 : lk == 1 ? pp.topk : below(pp.topk + 1));  // at most top-k (checked)
      }
    }
    pp.sink = below(2) == 1;
    char name[200];
    std::snprintf(name, sizeof(name), "prefill seed %u: Hq%d d_qk%d d_v%d M%d Nk%d topk%d minus_one_rows%zu lengths%d sink%d",
                  seed, pp.Hq, pp.dqk, pp.dv, pp.M, pp.Nk, pp.topk, pp.minus_one_rows.size(), int(!pp.len.empty()),
                  int(pp.sink));
    SCOPED_TRACE(name);
    std::printf("[ random %d ] %s\n", i, name);
    std::fflush(stdout);
    run_prefill_problem(pp);
  }
}
