// CUDA sparse_mla_decode vs the CPU reference (double) on the same cache bytes.
//
// Tolerance: the kernel accumulates in fp32 (dot products over d_qk <= 576, sums over <= ~2100 tokens),
// whose error is ~1e-6 of the row's magnitude, far below half a bf16 step (2^-9 relative). Both sides
// round to bf16 once, so they may land on neighbouring bf16 values when the exact result sits near a
// rounding boundary: we allow one bf16 step (2^-7 relative to the larger value) plus 1e-5 of the
// row's largest output for values that cancel to near zero. lse (fp32): 2e-5 * max(1, |lse|).
// Empty rows must be exact: zeros and -inf. Repeated runs must be bitwise identical.
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

struct Problem {
  LatentFormat format = LatentFormat::kV4Fp8;
  int B = 0, Sq = 0, Hq = 0;
  int P = 0, pages = 0, topk = 0;
  bool extra = false;
  int extra_P = 0, extra_pages = 0, extra_topk = 0;
  bool sink = false;
  bool lengths = false;
  std::vector<int> empty_rows;  // rows (b * Sq + s) whose indices are all -1
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

  std::vector<uint16_t> out_gpu(out_cpu.size()), first_out;
  std::vector<float> lse_gpu(lse_cpu.size()), first_lse;
  for (int rep = 0; rep < 5; ++rep) {
    st = sparse_mla_decode(g, Exec{});
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
        const float tol = std::ldexp(std::max(std::fabs(c), std::fabs(gv)), -7) + 1e-5f * row_max;
        if (!(std::fabs(gv - c) <= tol) && ++bad <= 10) {
          ADD_FAILURE() << "row " << r << " head " << h << " dim " << d << ": gpu " << gv << " cpu " << c;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

}  // namespace

TEST(GpuSparseMla, V4WithExtraCacheSinkAndLengths) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Problem pr = problem(LatentFormat::kV4Fp8, 2, 2, 64, 64, 6, 128);
  pr.extra = true;
  pr.extra_P = 16;
  pr.extra_pages = 4;
  pr.extra_topk = 40;
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
      pr.extra = true;
      pr.extra_P = 64;
      pr.extra_pages = 1;
      pr.extra_topk = 5;
      pr.empty_rows = {1};
      run_problem(pr, 3000 + hq);
    }
  }
}

// Prefill over a bf16 kv on CUDA vs the CPU reference; d_v below 512, empty rows, invalid ids.
TEST(GpuSparseMla, PrefillMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (int dqk : {512, 576}) {
    for (int dv : {512, 256}) {
      const int M = 5, Hq = 32, Nk = 300, topk = 96;
      std::mt19937 rng(dqk + dv);
      std::normal_distribution<float> n(0.0f, 0.6f);
      std::vector<uint16_t> q(M * Hq * dqk), kv(Nk * dqk);
      for (auto& x : q) x = codec::f32_to_bf16(n(rng));
      for (auto& x : kv) x = codec::f32_to_bf16(n(rng));
      std::vector<int32_t> idx = make_indices(M, topk, Nk, dqk * 7 + dv);
      std::fill(idx.begin() + 2 * topk, idx.begin() + 3 * topk, -1);  // row 2 empty
      std::vector<int32_t> len = {96, 50, 96, 0, 77};                   // row 3 empty by length
      std::vector<float> sink(Hq);
      for (int h = 0; h < Hq; ++h) sink[h] = 0.1f * h - 1.5f;
      SparseMlaPrefillParams p;
      p.q = make_tensor(q.data(), DType::kBF16, {M, Hq, dqk});
      p.kv = make_tensor(kv.data(), DType::kBF16, {Nk, dqk});
      p.indices = make_tensor(idx.data(), DType::kI32, {M, topk});
      p.topk_length = make_tensor(len.data(), DType::kI32, {M});
      p.attn_sink = make_tensor(sink.data(), DType::kF32, {Hq});
      p.sm_scale = 1.0f / std::sqrt(static_cast<float>(dqk));
      p.d_v = dv;
      std::vector<uint16_t> out_cpu(M * Hq * dv);
      std::vector<float> lse_cpu(M * Hq);
      p.out = make_tensor(out_cpu.data(), DType::kBF16, {M, Hq, dv});
      p.lse = make_tensor(lse_cpu.data(), DType::kF32, {M, Hq});
      Status st = sparse_mla_prefill(p, Exec{});
      ASSERT_TRUE(st.ok()) << st.to_string();

      test::DevBuf dq, dkv, didx, dlen, dsink, dout, dlse;
      test::upload_bytes(&dq, q.data(), q.size() * 2);
      test::upload_bytes(&dkv, kv.data(), kv.size() * 2);
      test::upload_bytes(&didx, idx.data(), idx.size() * 4);
      test::upload_bytes(&dlen, len.data(), len.size() * 4);
      test::upload_bytes(&dsink, sink.data(), sink.size() * 4);
      std::vector<uint16_t> garbage(out_cpu.size(), 0x7FC1);
      std::vector<float> lse_garbage(lse_cpu.size(), std::numeric_limits<float>::quiet_NaN());
      test::upload_bytes(&dout, garbage.data(), garbage.size() * 2);
      test::upload_bytes(&dlse, lse_garbage.data(), lse_garbage.size() * 4);
      SparseMlaPrefillParams g = p;
      g.q = test::on_cuda(p.q, dq.get());
      g.kv = test::on_cuda(p.kv, dkv.get());
      g.indices = test::on_cuda(p.indices, didx.get());
      g.topk_length = test::on_cuda(p.topk_length, dlen.get());
      g.attn_sink = test::on_cuda(p.attn_sink, dsink.get());
      g.out = test::on_cuda(p.out, dout.get());
      g.lse = test::on_cuda(p.lse, dlse.get());
      st = sparse_mla_prefill(g, Exec{});
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
          for (int d = 0; d < dv; ++d) ASSERT_EQ(out_gpu[r * dv + d], 0);
          continue;
        }
        ASSERT_LE(std::fabs(lse_gpu[r] - lse_cpu[r]), 2e-5f * std::max(1.0f, std::fabs(lse_cpu[r])));
        float row_max = 0.0f;
        for (int d = 0; d < dv; ++d) row_max = std::max(row_max, std::fabs(codec::bf16_to_f32(out_cpu[r * dv + d])));
        for (int d = 0; d < dv; ++d) {
          const float c = codec::bf16_to_f32(out_cpu[r * dv + d]), gv = codec::bf16_to_f32(out_gpu[r * dv + d]);
          const float tol = std::ldexp(std::max(std::fabs(c), std::fabs(gv)), -7) + 1e-5f * row_max;
          if (!(std::fabs(gv - c) <= tol) && ++bad <= 10) {
            ADD_FAILURE() << "dqk " << dqk << " dv " << dv << " row " << r << " dim " << d << ": gpu " << gv << " cpu " << c;
          }
        }
      }
      EXPECT_EQ(bad, 0);
    }
  }
}
