// Hostile device-side values on the CUDA backend. The host validates shapes, dtypes and strides
// but cannot read device memory, so the kernels meet whatever lengths, block-table entries,
// row_request entries, bounds and floats the caller's earlier kernels left there (ops.h,
// "Device-side values"; SPEC §3.3: NaN never gives an out-of-range index). Random calls with such
// values must succeed without a CUDA error and write nothing outside their outputs (guard words on
// both sides of every output, checked after each call), and:
//  - topk: every row is exactly a top-k (testing_gpu::is_topk, written apart from the library) of
//    the row within its bounds as the kernels clamp them (start into [0, W], end into [start, W]),
//    across the plans (one CTA, clusters, many rows, the split plan of very long rows), with NaN,
//    +-inf, -0 and runs of ties in the logits;
//  - paged_mqa_topk: on every route (streaming, logits, and on sm_90 the resident route where the
//    call allows it) indices in [-1, the row's length) with none twice, the same index sets on
//    every route, and the same bytes when run again; lengths negative or past the block table,
//    entries outside the cache, varlen row_request outside the batch, NaN / inf in weights and in
//    the cache's scales;
//  - paged_mqa_logits: the same bytes when run again.
// The *Sanitizer* test runs a few of these under compute-sanitizer (scripts/gpu_check.sh).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/indexer_test_util.h"
#include "dsattn/codecs.h"
#include "dsattn/ops.h"
#include "gpu/gpu_test_util.h"
#include "gpu/topk_test_util.h"

namespace dsattn {
namespace {

using test::hopper;
using testing_gpu::DeviceBuffer;
using testing_gpu::GpuInputs;
using testutil::EnvScope;
using testutil::Rng;

constexpr int64_t kGuard = 64;             // guard words on each side of an output
constexpr uint32_t kGuardWord = 0x7b7b7b7bu;

// A device output of n 4-byte words between guard words; view() is the n words.
struct Guarded {
  DeviceBuffer buf;
  int64_t n = 0;
  void alloc(int64_t words) {
    n = words;
    buf.alloc(static_cast<size_t>(n + 2 * kGuard) * 4);
    std::vector<uint32_t> fill(static_cast<size_t>(n + 2 * kGuard), kGuardWord);
    ASSERT_TRUE(buf.upload(fill.data(), fill.size() * 4));
  }
  void* data() const { return static_cast<uint32_t*>(buf.ptr) + kGuard; }
  // The n words; the guards must be intact.
  std::vector<uint32_t> download(const std::string& what) const {
    std::vector<uint32_t> all(static_cast<size_t>(n + 2 * kGuard));
    EXPECT_TRUE(buf.download(all.data(), all.size() * 4));
    for (int64_t i = 0; i < kGuard; ++i) {
      EXPECT_EQ(all[static_cast<size_t>(i)], kGuardWord) << what << ": written before its first element";
      EXPECT_EQ(all[static_cast<size_t>(n + kGuard + i)], kGuardWord) << what << ": written past its last element";
    }
    return std::vector<uint32_t>(all.begin() + kGuard, all.begin() + kGuard + n);
  }
};

float as_float(uint32_t w) {
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}

// ---------------------------------------------------------------- topk
TEST(GpuFuzz, TopkHostileBoundsAndValues) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  struct Shape {
    int64_t R, W;
  };
  // One CTA, cluster rows (few rows of 8K..64K), many rows, the split plan (one very long row).
  const Shape shapes[] = {{1, 100}, {3, 5000}, {1, 20000}, {5, 40000}, {200, 3000}, {37, 9000}, {1, 300000}};
  Rng rng(4242);
  for (int trial = 0; trial < 28; ++trial) {
    const Shape sh = shapes[trial % 7];
    const int64_t R = sh.R, W = sh.W;
    static const int kK[] = {1, 64, 512, 2048, 4096};
    const int k = kK[rng.next() % 5];
    const bool bf16 = rng.next() % 4 == 0, sorted = rng.next() % 2 == 0, bounded = rng.next() % 3 != 0;
    SCOPED_TRACE("trial " + std::to_string(trial) + ": R " + std::to_string(R) + " W " + std::to_string(W) +
                 " k " + std::to_string(k) + (bf16 ? " bf16" : " f32") + (sorted ? " sorted" : "") +
                 (bounded ? " bounds" : ""));
    // Logits: normals with NaN (both signs), +-inf, -0 / +0 and runs of one value (ties).
    std::vector<float> x = rng.normals(static_cast<size_t>(R * W));
    for (float& v : x) {
      const uint64_t u = rng.next() % 100;
      const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
      if (u < 2) v = u == 0 ? nan : -nan;
      else if (u < 3) v = rng.next() % 2 ? inf : -inf;
      else if (u < 4) v = rng.next() % 2 ? -0.0f : 0.0f;
    }
    for (int run = 0; run < 4; ++run) {
      const size_t at = static_cast<size_t>(rng.next() % static_cast<uint64_t>(R * W));
      const size_t len = std::min<size_t>(x.size() - at, 1 + rng.next() % 3000);
      std::fill(x.begin() + static_cast<int64_t>(at), x.begin() + static_cast<int64_t>(at + len), x[at]);
    }
    std::vector<uint16_t> x16;
    if (bf16) {
      for (float& v : x) {
        x16.push_back(codec::f32_to_bf16(v));
        v = codec::bf16_to_f32(x16.back());  // the values the kernels see
      }
    }
    // Bounds: hostile starts / ends, and what the kernels make of them.
    std::vector<int32_t> starts(static_cast<size_t>(R)), ends(static_cast<size_t>(R));
    std::vector<int64_t> s0(static_cast<size_t>(R), 0), len(static_cast<size_t>(R), W);
    const int32_t w32 = static_cast<int32_t>(W);
    for (int64_t r = 0; r < R; ++r) {
      const int32_t a[] = {std::numeric_limits<int32_t>::min(), -5, 0, static_cast<int32_t>(rng.next() % W), w32,
                           w32 + 7};
      const int32_t s = a[rng.next() % 6];
      const int32_t below_s = s > -1000 ? s - 3 : s;  // crossed bounds
      const int32_t past_s = s < 1000000 ? s + static_cast<int32_t>(rng.next() % 5000) : s;
      const int32_t b[] = {std::numeric_limits<int32_t>::max(), w32, static_cast<int32_t>(rng.next() % (W + 1)),
                           below_s, -1, past_s};
      const int32_t e = b[rng.next() % 6];
      starts[static_cast<size_t>(r)] = s;
      ends[static_cast<size_t>(r)] = e;
      if (bounded) {
        const int64_t cs = std::min<int64_t>(std::max<int64_t>(s, 0), W);
        const int64_t ce = std::min<int64_t>(std::max<int64_t>(e, cs), W);
        s0[static_cast<size_t>(r)] = cs;
        len[static_cast<size_t>(r)] = ce - cs;
      }
    }
    DeviceBuffer dx(static_cast<size_t>(R * W) * (bf16 ? 2 : 4)), ds(static_cast<size_t>(R) * 4),
        de(static_cast<size_t>(R) * 4);
    ASSERT_TRUE(dx.upload(bf16 ? static_cast<const void*>(x16.data()) : x.data(), dx.bytes));
    ASSERT_TRUE(ds.upload(starts.data(), ds.bytes));
    ASSERT_TRUE(de.upload(ends.data(), de.bytes));
    Guarded idx, val;
    idx.alloc(R * k);
    val.alloc(R * k);
    TopkParams p;
    p.logits = make_tensor(dx.ptr, bf16 ? DType::kBF16 : DType::kF32, {R, W}, Device::kCuda);
    if (bounded) {
      p.starts = make_tensor(ds.ptr, DType::kI32, {R}, Device::kCuda);
      p.ends = make_tensor(de.ptr, DType::kI32, {R}, Device::kCuda);
    }
    p.k = k;
    p.sorted = sorted;
    p.indices = make_tensor(idx.data(), DType::kI32, {R, k}, Device::kCuda);
    p.values = make_tensor(val.data(), DType::kF32, {R, k}, Device::kCuda);
    Exec ex;
    ex.backend = Backend::kCuda;
    size_t wsb = 0;
    ASSERT_TRUE(topk_workspace(p, ex, &wsb).ok());
    DeviceBuffer ws(wsb);
    if (wsb > 0) {
      DSATTN_CUDA_ASSERT(cudaMemset(ws.ptr, 0xff, wsb));
    }
    ex.workspace = ws.ptr;
    ex.workspace_bytes = wsb;
    const Status st = topk(p, ex);
    ASSERT_TRUE(st.ok()) << st.to_string();
    DSATTN_CUDA_ASSERT(cudaDeviceSynchronize());
    const std::vector<uint32_t> gi = idx.download("indices"), gv = val.download("values");
    for (int64_t r = 0; r < R; ++r) {
      const float* row = x.data() + r * W + s0[static_cast<size_t>(r)];
      const int32_t* ri = reinterpret_cast<const int32_t*>(gi.data()) + r * k;
      ASSERT_TRUE(testing_gpu::is_topk(row, len[static_cast<size_t>(r)], k, ri))
          << "row " << r << " bounds (" << starts[static_cast<size_t>(r)] << ", " << ends[static_cast<size_t>(r)]
          << ")";
      for (int j = 0; j < k; ++j) {
        const float got = as_float(gv[static_cast<size_t>(r * k + j)]);
        if (ri[j] < 0) {
          ASSERT_TRUE(std::isinf(got) && got < 0) << "row " << r << " padding slot " << j << " value " << got;
          continue;
        }
        const float want = row[ri[j]];
        ASSERT_TRUE(got == want || (std::isnan(got) && std::isnan(want))) << "row " << r << " slot " << j;
        if (sorted && j > 0 && ri[j - 1] >= 0) {
          ASSERT_TRUE(testing_gpu::rank_better(row[ri[j - 1]], ri[j - 1], row[ri[j]], ri[j]))
              << "row " << r << " order at " << j;
        }
      }
    }
  }
}

// ---------------------------------------------------------------- paged ops
// A paged problem with hostile device-side values, on the GPU.
struct HostileCase {
  testutil::PagedCase pc;
  int k = 512;
  bool sorted = false;
  std::vector<int64_t> row_len;  // each row's length as the kernels read it (negative: 0)
  std::vector<bool> row_dead;    // varlen row whose row_request is outside the batch: no states
  GpuInputs g;
};

void make_hostile(Rng& rng, HostileCase* h, int max_batch) {
  testutil::PagedCaseSpec spec;
  spec.format = rng.next() % 3 == 0 ? IndexerFormat::kMxfp4 : IndexerFormat::kFp8;
  spec.batch = 1 + static_cast<int>(rng.next() % static_cast<uint64_t>(max_batch));
  spec.varlen = rng.next() % 4 == 0;
  spec.next_n = spec.varlen ? 1 : 1 + static_cast<int>(rng.next() % 2);
  spec.lens_per_row = rng.next() % 2 == 0;
  spec.heads = 64;
  spec.head_dim = 128;
  static const int kS[] = {16, 32, 64};
  spec.states_per_page = kS[rng.next() % 3];
  spec.max_len = 1 + static_cast<int64_t>(rng.next() % 12000);
  spec.extra_table_cols = rng.next() % 2 ? 0 : static_cast<int64_t>(70000 / spec.states_per_page);  // > 64K states
  spec.extra_pages = 2;
  spec.seed = rng.next();
  h->pc = testutil::make_paged_case(spec);
  testutil::PagedCase& pc = h->pc;
  static const int kK[] = {1, 100, 512, 2048};
  h->k = kK[rng.next() % 4];
  h->sorted = rng.next() % 3 == 0;
  const int64_t cap = pc.cache.max_pages * spec.states_per_page;
  // Lengths: negative, zero, past the block table, INT32_MAX.
  for (auto& l : pc.context_lens) {
    const uint64_t u = rng.next() % 10;
    const int32_t hostile[] = {-7, 0, static_cast<int32_t>(cap + 1 + static_cast<int64_t>(rng.next() % 5000)),
                               std::numeric_limits<int32_t>::max()};
    if (u < 3) l = hostile[rng.next() % 4];
  }
  // Block-table entries outside the cache.
  for (int t = 0; t < 6; ++t) {
    int32_t& e = pc.cache.block_table[static_cast<size_t>(rng.next() % pc.cache.block_table.size())];
    const int32_t bad[] = {-1, static_cast<int32_t>(pc.cache.num_pages), std::numeric_limits<int32_t>::min(), 1 << 30};
    e = bad[rng.next() % 4];
  }
  // varlen: row_request outside the batch.
  for (auto& b : pc.row_request) {
    if (rng.next() % 6 == 0) b = rng.next() % 2 ? -3 : static_cast<int32_t>(spec.batch + 9);
  }
  // NaN / inf weights, and NaN / inf FP8 scale words in the cache.
  for (int t = 0; t < 3; ++t) {
    pc.weights[static_cast<size_t>(rng.next() % pc.weights.size())] =
        rng.next() % 2 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  }
  if (spec.format == IndexerFormat::kFp8 && pc.cache.num_pages > 0) {
    for (int t = 0; t < 3; ++t) {
      const int64_t page = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(pc.cache.num_pages));
      const int64_t at = page * pc.cache.page_stride +
                         indexer_scale_offset(spec.format, spec.states_per_page, spec.head_dim) +
                         4 * static_cast<int64_t>(rng.next() % static_cast<uint64_t>(spec.states_per_page));
      const float v =
          rng.next() % 2 ? std::numeric_limits<float>::quiet_NaN() : -std::numeric_limits<float>::infinity();
      std::memcpy(pc.cache.pages.data() + at, &v, 4);
    }
  }
  // Each row's length as the kernels read it.
  const int64_t B = spec.batch, N = spec.next_n;
  h->row_len.assign(static_cast<size_t>(pc.rows), 0);
  h->row_dead.assign(static_cast<size_t>(pc.rows), false);
  for (int64_t r = 0; r < pc.rows; ++r) {
    int64_t L;
    if (spec.varlen) {
      L = pc.context_lens[static_cast<size_t>(r)];
      const int32_t b = pc.row_request[static_cast<size_t>(r)];
      h->row_dead[static_cast<size_t>(r)] = b < 0 || b >= B;
    } else if (spec.lens_per_row) {
      L = pc.context_lens[static_cast<size_t>(r)];
    } else {
      L = int64_t(pc.context_lens[static_cast<size_t>(r / N)]) - N + r % N + 1;
    }
    h->row_len[static_cast<size_t>(r)] = std::max<int64_t>(L, 0);
  }
  // Upload (the host never reads these values on the CUDA backend).
  testing_gpu::upload_case(pc, &h->g);
}

// paged_mqa_topk on the current route: the indices (guards checked), the same bytes when run again.
std::vector<int32_t> run_topk(HostileCase& h, const std::string& route) {
  const int64_t R = h.pc.rows;
  Guarded idx, val, slots;
  idx.alloc(R * h.k);
  val.alloc(R * h.k);
  slots.alloc(R * h.k);
  PagedMqaTopkParams p;
  static_cast<PagedIndexerArgs&>(p) = h.g.args;
  p.k = h.k;
  p.sorted = h.sorted;
  p.indices = make_tensor(idx.data(), DType::kI32, {R, h.k}, Device::kCuda);
  p.values = make_tensor(val.data(), DType::kF32, {R, h.k}, Device::kCuda);
  p.slot_ids = make_tensor(slots.data(), DType::kI32, {R, h.k}, Device::kCuda);
  Exec ex;
  ex.backend = Backend::kCuda;
  size_t wsb = 0;
  Status st = paged_mqa_topk_workspace(p, ex, &wsb);
  EXPECT_TRUE(st.ok()) << route << ": " << st.to_string();
  DeviceBuffer ws(wsb);
  if (wsb > 0) {
    EXPECT_EQ(cudaMemset(ws.ptr, 0xff, wsb), cudaSuccess);
  }
  ex.workspace = ws.ptr;
  ex.workspace_bytes = wsb;
  std::vector<uint32_t> first[3];
  for (int rep = 0; rep < 2; ++rep) {
    st = paged_mqa_topk(p, ex);
    EXPECT_TRUE(st.ok()) << route << ": " << st.to_string();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << route;
    const std::vector<uint32_t> got[3] = {idx.download(route + " indices"), val.download(route + " values"),
                                          slots.download(route + " slot_ids")};
    for (int o = 0; o < 3; ++o) {
      if (rep == 0) {
        first[o] = got[o];
      } else {
        EXPECT_TRUE(first[o] == got[o]) << route << ": output " << o << " differs when run again";
      }
    }
  }
  const int32_t* i32 = reinterpret_cast<const int32_t*>(first[0].data());
  return std::vector<int32_t>(i32, i32 + R * h.k);
}

TEST(GpuFuzz, PagedMqaTopkHostileDeviceValues) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Rng rng(777);
  for (int trial = 0; trial < 16; ++trial) {
    HostileCase h;
    make_hostile(rng, &h, 6);
    if (::testing::Test::HasFatalFailure()) return;
    const testutil::PagedCaseSpec& sp = h.pc.spec;
    SCOPED_TRACE("trial " + std::to_string(trial) + ": B " + std::to_string(sp.batch) + " N " +
                 std::to_string(sp.next_n) + " S " + std::to_string(sp.states_per_page) + " k " + std::to_string(h.k) +
                 (sp.varlen ? " varlen" : "") + (sp.format == IndexerFormat::kMxfp4 ? " mxfp4" : " fp8") +
                 (h.sorted ? " sorted" : ""));
    struct Route {
      const char* name;
      const char* logits;    // DSATTN_FUSED_LOGITS
      const char* resident;  // DSATTN_FUSED_RESIDENT
    };
    std::vector<Route> routes = {{"streaming", "0", "0"}, {"logits", "force", "0"}};
    // The resident route (sm_90): up to six requests with N = 1, unsorted.
    if (hopper() && !sp.varlen && sp.next_n == 1 && sp.batch <= 6 && !h.sorted) {
      routes.push_back({"resident", nullptr, "force"});
    }
    std::vector<std::vector<int32_t>> sets;
    for (const Route& rt : routes) {
      EnvScope l("DSATTN_FUSED_LOGITS", rt.logits), res("DSATTN_FUSED_RESIDENT", rt.resident);
      const std::vector<int32_t> idx = run_topk(h, rt.name);
      if (::testing::Test::HasFailure()) return;
      // In range, none twice; per row sorted into a set for the comparison across routes.
      std::vector<int32_t> set;
      for (int64_t r = 0; r < h.pc.rows; ++r) {
        const int64_t L = h.row_dead[static_cast<size_t>(r)] ? 0 : h.row_len[static_cast<size_t>(r)];
        std::vector<int32_t> row(idx.begin() + r * h.k, idx.begin() + (r + 1) * h.k);
        for (int32_t i : row) {
          ASSERT_TRUE(i == -1 || (i >= 0 && i < L)) << rt.name << " row " << r << " index " << i << " length " << L;
        }
        std::sort(row.begin(), row.end());
        for (size_t j = 1; j < row.size(); ++j) {
          ASSERT_TRUE(row[j] == -1 || row[j] != row[j - 1])
              << rt.name << " row " << r << " index " << row[j] << " twice";
        }
        set.insert(set.end(), row.begin(), row.end());
      }
      sets.push_back(set);
    }
    for (size_t i = 1; i < sets.size(); ++i) {
      for (int64_t r = 0; r < h.pc.rows; ++r) {
        const auto a = sets[0].begin() + r * h.k, b = sets[i].begin() + r * h.k;
        ASSERT_TRUE(std::equal(a, a + h.k, b))
            << routes[i].name << " selects other states than " << routes[0].name << " in row " << r;
      }
    }
  }
}

// paged_mqa_logits with hostile values: guards, and the same bytes when run again.
void logits_twice(HostileCase& h) {
  const int64_t R = h.pc.rows, W = h.pc.max_context;
  Guarded out;
  out.alloc(R * W);
  PagedMqaLogitsParams p;
  static_cast<PagedIndexerArgs&>(p) = h.g.args;
  p.logits = make_tensor(out.data(), DType::kF32, {R, W}, Device::kCuda);
  p.clean = true;
  Exec ex;
  ex.backend = Backend::kCuda;
  size_t wsb = 0;
  ASSERT_TRUE(paged_mqa_logits_workspace(p, ex, &wsb).ok());
  DeviceBuffer ws(wsb);
  ex.workspace = ws.ptr;
  ex.workspace_bytes = wsb;
  std::vector<uint32_t> first;
  for (int rep = 0; rep < 2; ++rep) {
    const Status st = paged_mqa_logits(p, ex);
    ASSERT_TRUE(st.ok()) << st.to_string();
    DSATTN_CUDA_ASSERT(cudaDeviceSynchronize());
    const std::vector<uint32_t> got = out.download("logits");
    if (rep == 0) {
      first = got;
    } else {
      ASSERT_TRUE(first == got) << "logits differ when run again";
    }
  }
}

TEST(GpuFuzz, PagedMqaLogitsHostileDeviceValues) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Rng rng(888);
  for (int trial = 0; trial < 12; ++trial) {
    HostileCase h;
    make_hostile(rng, &h, 8);
    if (::testing::Test::HasFatalFailure()) return;
    SCOPED_TRACE("trial " + std::to_string(trial));
    logits_twice(h);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// A few of the above under compute-sanitizer (scripts/gpu_check.sh runs *Sanitizer* tests there).
TEST(GpuFuzz, HostilePagedSanitizer) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Rng rng(999);
  for (int trial = 0; trial < 3; ++trial) {
    HostileCase h;
    make_hostile(rng, &h, 3);
    if (::testing::Test::HasFatalFailure()) return;
    SCOPED_TRACE("trial " + std::to_string(trial));
    logits_twice(h);
    if (::testing::Test::HasFatalFailure()) return;
    EnvScope l("DSATTN_FUSED_LOGITS", trial % 2 ? "force" : "0");
    run_topk(h, trial % 2 ? "logits" : "streaming");
    if (::testing::Test::HasFailure()) return;
  }
}

}  // namespace
}  // namespace dsattn
