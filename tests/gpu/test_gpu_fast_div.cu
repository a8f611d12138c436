// detail::div_small (src/common/fast_div.h) on the device, where it takes a 32-bit division when
// both operands are in [0, 2^32) and the 64-bit one otherwise: compared with the host's `/` on
// operands at and around the 32-bit boundary, negative ones, and random ones of every magnitude.
// detail::FastDivU31 built on the host (IndexerParams::spp_div) and used on the device is checked
// here too. Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "common/fast_div.h"
#include "gpu/gpu_test_util.h"
#include "dsattn/ops.h"

namespace dsattn {
namespace {

__global__ void div_small_kernel(const int64_t* a, const int64_t* b, int64_t* q, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) q[i] = detail::div_small(a[i], b[i]);
}

__global__ void fast_div_kernel(detail::FastDivU31 f, const uint32_t* n, uint32_t* q, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) q[i] = f.div(n[i]);
}

TEST(GpuFastDiv, DivSmallMatchesDivision) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t k32 = int64_t(1) << 32;
  const std::vector<int64_t> edges = {0, 1, 2, 3, 7, 64, 65535, 65536, k32 / 2 - 1, k32 / 2, k32 - 2, k32 - 1,
                                      k32, k32 + 1, 3 * k32 + 5, (int64_t(1) << 47) + 123, INT64_MAX / 3};
  std::vector<int64_t> as, bs;
  for (const int64_t a : edges) {
    for (const int64_t b : edges) {
      if (b == 0) continue;
      as.push_back(a); bs.push_back(b);
      as.push_back(-a); bs.push_back(b);
      as.push_back(a); bs.push_back(-b);
    }
  }
  std::mt19937_64 rng(11);
  for (int i = 0; i < 4096; ++i) {
    const int64_t a = static_cast<int64_t>(rng() >> (rng() % 63));
    int64_t b = static_cast<int64_t>(rng() >> (1 + rng() % 62));
    if (b == 0) b = 1;
    as.push_back(a); bs.push_back(b);
  }
  const int n = static_cast<int>(as.size());
  test::DevBuf da, db, dq;
  test::upload_bytes(&da, as.data(), as.size() * sizeof(int64_t));
  test::upload_bytes(&db, bs.data(), bs.size() * sizeof(int64_t));
  dq.alloc(as.size() * sizeof(int64_t));
  ASSERT_NE(dq.get(), nullptr);
  div_small_kernel<<<(n + 255) / 256, 256>>>(da.as<int64_t>(), db.as<int64_t>(), dq.as<int64_t>(), n);
  DSATTN_TEST_CUDA(cudaGetLastError());
  DSATTN_TEST_CUDA(cudaDeviceSynchronize());
  const std::vector<int64_t> q = dq.download<int64_t>(as.size());
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(q[i], as[i] / bs[i]) << "a " << as[i] << " b " << bs[i];
  }
}

TEST(GpuFastDiv, HostBuiltDivisorOnTheDevice) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 rng(5);
  std::vector<uint32_t> ns = {0, 1, 63, 64, 65, 0x7fffffffu, 0x7ffffffeu};
  for (int i = 0; i < 2048; ++i) ns.push_back(static_cast<uint32_t>(rng() & 0x7fffffffu));
  test::DevBuf dn, dq;
  test::upload_bytes(&dn, ns.data(), ns.size() * sizeof(uint32_t));
  dq.alloc(ns.size() * sizeof(uint32_t));
  ASSERT_NE(dq.get(), nullptr);
  const int count = static_cast<int>(ns.size());
  for (const uint32_t d : {1u, 2u, 3u, 32u, 48u, 64u, 96u, 128u, 255u, 256u, 1u << 30}) {
    fast_div_kernel<<<(count + 255) / 256, 256>>>(detail::FastDivU31(d), dn.as<uint32_t>(), dq.as<uint32_t>(), count);
    DSATTN_TEST_CUDA(cudaGetLastError());
    DSATTN_TEST_CUDA(cudaDeviceSynchronize());
    const std::vector<uint32_t> q = dq.download<uint32_t>(ns.size());
    for (size_t i = 0; i < ns.size(); ++i) ASSERT_EQ(q[i], ns[i] / d) << "n " << ns[i] << " d " << d;
  }
}

}  // namespace
}  // namespace dsattn
