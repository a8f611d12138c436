// GPU topk (SPEC §3.3) against the CPU reference (Backend::kCpu on the same inputs): the results
// must be identical (indices in the same order, values bit for bit, slot ids), and each row is
// also checked independently (is_topk). Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "common/indexer_test_util.h"
#include "cuda/common/topk_plan.h"
#include "dsattn/codecs.h"
#include "dsattn/ops.h"
#include "gpu/topk_test_util.h"

namespace dsattn {
namespace {

using testing_gpu::DeviceBuffer;
using testing_gpu::FilterMinWidth;
using testing_gpu::TopkTuningScope;
using testing_gpu::is_topk;
using testing_gpu::same_bits_or_both_nan;
using testutil::Rng;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Case {
  int64_t rows = 1;
  int64_t width = 0;
  int k = 1;
  bool bf16 = false;
  bool sorted = false;
  bool values = false;
  bool bounds = false;  // random per-row [start, end) bounds (else whole rows)
  bool ends_only = false;  // with bounds: starts all 0 and not passed (only `ends`)
  bool slots = false;
  bool row_request = false;
  int next_n = 1;
  int states_per_page = 64;
  int64_t ld_pad = 0;  // extra logits row stride
  int smem_budget = 0;
  int repeats = 1;     // bitwise self-consistency over repeated launches
};

struct Inputs {
  std::vector<float> logits;      // [rows, ld] f32 values (bf16 cases: values already bf16-exact)
  std::vector<uint16_t> logits16;  // bf16 bits when Case::bf16
  std::vector<int32_t> starts, ends, block_table, row_request;
  int64_t ld = 0, bt_rows = 0, max_pages = 0;
};

// Every row holds `logits` for its full width; bounds pick the lengths the test wants to cover.
Inputs make_inputs(const Case& c, Rng& rng, const std::vector<float>& values, const std::vector<int32_t>& lens) {
  Inputs in;
  in.ld = c.width + c.ld_pad;
  in.logits.assign(static_cast<size_t>(c.rows * in.ld), kNaN);
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t i = 0; i < c.width; ++i) in.logits[r * in.ld + i] = values[r * c.width + i];
  }
  if (c.bf16) {
    in.logits16.resize(in.logits.size());
    for (size_t i = 0; i < in.logits.size(); ++i) {
      in.logits16[i] = codec::f32_to_bf16(in.logits[i]);
      in.logits[i] = codec::bf16_to_f32(in.logits16[i]);
    }
  }
  if (c.bounds) {
    for (int64_t r = 0; r < c.rows; ++r) {
      const int64_t len = lens.empty() ? rng.randint(0, c.width) : std::min<int64_t>(lens[r % lens.size()], c.width);
      const int64_t s = c.ends_only ? 0 : rng.randint(0, c.width - len);
      in.starts.push_back(static_cast<int32_t>(s));
      in.ends.push_back(static_cast<int32_t>(s + len));
    }
  }
  if (c.slots) {
    in.max_pages = (c.width + c.states_per_page - 1) / c.states_per_page + 1;
    in.bt_rows = c.row_request ? 5 : (c.rows + c.next_n - 1) / c.next_n;
    in.block_table.resize(static_cast<size_t>(in.bt_rows * in.max_pages));
    for (auto& v : in.block_table) v = static_cast<int32_t>(rng.randint(0, 100000));
    if (c.row_request) {
      for (int64_t r = 0; r < c.rows; ++r) in.row_request.push_back(static_cast<int32_t>(rng.randint(0, in.bt_rows - 1)));
    }
  }
  return in;
}

struct Outputs {
  std::vector<int32_t> idx, slots;
  std::vector<float> val;
};

// Builds TopkParams over the given buffers (host or device).
TopkParams make_params(const Case& c, const Inputs& in, void* logits, void* starts, void* ends, void* bt, void* rr,
                       void* idx, void* val, void* slots, Device dev) {
  TopkParams p;
  p.logits = make_tensor_strided(logits, c.bf16 ? DType::kBF16 : DType::kF32, {c.rows, c.width}, {in.ld, 1}, dev);
  if (c.bounds) {
    if (!c.ends_only) p.starts = make_tensor(starts, DType::kI32, {c.rows}, dev);
    p.ends = make_tensor(ends, DType::kI32, {c.rows}, dev);
  }
  p.k = c.k;
  p.indices = make_tensor(idx, DType::kI32, {c.rows, c.k}, dev);
  if (c.values) p.values = make_tensor(val, DType::kF32, {c.rows, c.k}, dev);
  p.sorted = c.sorted;
  if (c.slots) {
    p.block_table = make_tensor(bt, DType::kI32, {in.bt_rows, in.max_pages}, dev);
    if (c.row_request) p.row_request = make_tensor(rr, DType::kI32, {c.rows}, dev);
    p.next_n = c.next_n;
    p.states_per_page = c.states_per_page;
    p.slot_ids = make_tensor(slots, DType::kI32, {c.rows, c.k}, dev);
  }
  return p;
}

Outputs run_cpu(const Case& c, Inputs& in) {
  Outputs o;
  const size_t n = static_cast<size_t>(c.rows * c.k);
  o.idx.assign(n, -7);
  o.val.assign(n, 0.0f);
  o.slots.assign(n, -7);
  void* logits = c.bf16 ? static_cast<void*>(in.logits16.data()) : static_cast<void*>(in.logits.data());
  TopkParams p = make_params(c, in, logits, in.starts.data(), in.ends.data(), in.block_table.data(),
                             in.row_request.data(), o.idx.data(), o.val.data(), o.slots.data(), Device::kCpu);
  Exec ex;
  ex.backend = Backend::kCpu;
  const Status s = topk(p, ex);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return o;
}

// Device copies of the inputs and outputs of one case.
struct GpuCase {
  DeviceBuffer logits, starts, ends, bt, rr, idx, val, slots, ws;
  TopkParams p;
  Exec ex;
};

void setup_gpu(const Case& c, Inputs& in, GpuCase& g) {
  const size_t esz = c.bf16 ? 2 : 4;
  const size_t n_logits = in.logits.size();
  g.logits.alloc(n_logits * esz);
  ASSERT_TRUE(g.logits.upload(c.bf16 ? static_cast<void*>(in.logits16.data()) : static_cast<void*>(in.logits.data()),
                              n_logits * esz));
  auto up = [](DeviceBuffer& b, std::vector<int32_t>& v) {
    b.alloc(v.size() * 4);
    return v.empty() || b.upload(v.data(), v.size() * 4);
  };
  ASSERT_TRUE(up(g.starts, in.starts) && up(g.ends, in.ends) && up(g.bt, in.block_table) && up(g.rr, in.row_request));
  const size_t n = static_cast<size_t>(c.rows * c.k) * 4;
  g.idx.alloc(n);
  g.val.alloc(n);
  g.slots.alloc(n);
  // Poison the outputs: every element must be written.
  DSATTN_CUDA_ASSERT(cudaMemset(g.idx.ptr, 0x7b, n));
  DSATTN_CUDA_ASSERT(cudaMemset(g.val.ptr, 0x7b, n));
  DSATTN_CUDA_ASSERT(cudaMemset(g.slots.ptr, 0x7b, n));
  g.p = make_params(c, in, g.logits.ptr, g.starts.ptr, g.ends.ptr, g.bt.ptr, g.rr.ptr, g.idx.ptr, g.val.ptr,
                    g.slots.ptr, Device::kCuda);
  g.ex.backend = Backend::kCuda;
  g.ex.smem_budget_bytes = c.smem_budget;
  size_t ws = 0;
  const Status s = topk_workspace(g.p, g.ex, &ws);
  ASSERT_TRUE(s.ok()) << s.to_string();
  g.ws.alloc(ws);
  if (ws > 0) {
    ASSERT_NE(g.ws.ptr, nullptr);
  }
  g.ex.workspace = g.ws.ptr;
  g.ex.workspace_bytes = ws;
}

Outputs download(const Case& c, const GpuCase& g) {
  Outputs o;
  const size_t n = static_cast<size_t>(c.rows * c.k);
  o.idx.resize(n);
  o.val.resize(n);
  o.slots.resize(n);
  EXPECT_TRUE(g.idx.download(o.idx.data(), n * 4));
  EXPECT_TRUE(g.val.download(o.val.data(), n * 4));
  EXPECT_TRUE(g.slots.download(o.slots.data(), n * 4));
  return o;
}

void expect_same(const Case& c, const Inputs& in, const Outputs& cpu, const Outputs& gpu) {
  int bad = 0;
  for (int64_t r = 0; r < c.rows && bad < 5; ++r) {
    const int64_t s = c.bounds ? in.starts[r] : 0;
    const int64_t len = c.bounds ? in.ends[r] - s : c.width;
    const int32_t* gi = gpu.idx.data() + r * c.k;
    const ::testing::AssertionResult ok = is_topk(in.logits.data() + r * in.ld + s, len, c.k, gi);
    if (!ok) {
      ADD_FAILURE() << "row " << r << " (len " << len << ", k " << c.k << "): " << ok.message();
      ++bad;
      continue;
    }
    for (int j = 0; j < c.k; ++j) {
      const size_t o = static_cast<size_t>(r * c.k + j);
      if (cpu.idx[o] != gpu.idx[o]) {
        ADD_FAILURE() << "row " << r << " slot " << j << ": index cpu " << cpu.idx[o] << " gpu " << gpu.idx[o];
        ++bad;
        break;
      }
      if (c.values && !same_bits_or_both_nan(cpu.val[o], gpu.val[o])) {
        ADD_FAILURE() << "row " << r << " slot " << j << ": value cpu " << cpu.val[o] << " gpu " << gpu.val[o];
        ++bad;
        break;
      }
      if (c.slots && cpu.slots[o] != gpu.slots[o]) {
        ADD_FAILURE() << "row " << r << " slot " << j << ": slot id cpu " << cpu.slots[o] << " gpu " << gpu.slots[o];
        ++bad;
        break;
      }
    }
  }
}

// values: [rows, width]; lens (with c.bounds): row lengths to cycle through (empty = random).
void run_case(const Case& c, const std::vector<float>& values, const std::vector<int32_t>& lens = {},
              uint64_t seed = 1) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Rng rng(seed);
  Inputs in = make_inputs(c, rng, values, lens);
  const Outputs cpu = run_cpu(c, in);
  GpuCase g;
  setup_gpu(c, in, g);
  if (::testing::Test::HasFatalFailure()) return;
  Outputs first;
  for (int rep = 0; rep < c.repeats; ++rep) {
    const Status s = topk(g.p, g.ex);
    ASSERT_TRUE(s.ok()) << s.to_string();
    DSATTN_CUDA_ASSERT(cudaDeviceSynchronize());
    const Outputs gpu = download(c, g);
    if (rep == 0) {
      expect_same(c, in, cpu, gpu);
      first = gpu;
    } else {
      ASSERT_EQ(first.idx, gpu.idx) << "repeat " << rep << " differs";
    }
  }
}

std::vector<float> normals(Rng& rng, int64_t n, float sigma = 1.0f) { return rng.normals(static_cast<size_t>(n), sigma); }

// Values from a small set: many ties at the threshold.
std::vector<float> coarse(Rng& rng, int64_t n, int levels) {
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(rng.randint(0, levels - 1)) * 0.25f - 2.0f;
  return v;
}

TEST(GpuTopk, RandomRowsDirect) {
  Rng rng(11);
  for (int k : {1, 7, 512, 1024, 2048}) {
    Case c;
    c.rows = 37;
    c.width = 6000;
    c.k = k;
    run_case(c, normals(rng, c.rows * c.width), {}, 100 + k);
  }
}

TEST(GpuTopk, LengthsAroundK) {
  Rng rng(12);
  for (int k : {512, 2048, 4096, 1000}) {
    Case c;
    c.rows = 12;
    c.width = 3 * k;
    c.k = k;
    c.bounds = true;
    c.values = true;
    run_case(c, normals(rng, c.rows * c.width), {0, 1, k - 1, k, k + 1, 2 * k, 3 * k, 2}, 200 + k);
  }
}

// Rows bounded by `ends` alone start at 0, so the small kernel (rows of <= 8192) loads their keys
// up to the width before it reads the length (TopkRowBounds::early_keys, up to 128 rows): the
// states past each row's end hold +inf and NaN, which must never be selected. Lengths around k,
// sorted and unsorted output, values, f32 and bf16; 37 rows (early) and 150 (not).
TEST(GpuTopk, EndsOnlyRowsIgnoreStatesPastTheEnd) {
  Rng rng(14);
  for (int64_t rows : {37, 150}) {
    for (int k : {1, 512, 2048}) {
      for (bool bf16 : {false, true}) {
        Case c;
        c.rows = rows;
        c.width = 8000;
        c.k = k;
        c.bf16 = bf16;
        c.bounds = true;
        c.ends_only = true;
        c.values = true;
        c.sorted = k == 512;
        const std::vector<int32_t> lens = {0, 1, k - 1, k, k + 1, 3000, 7999, 8000, 4097, 2 * k + 3};
        std::vector<float> v = normals(rng, c.rows * c.width);
        for (int64_t r = 0; r < c.rows; ++r) {
          const int64_t len = std::min<int64_t>(lens[r % lens.size()], c.width);
          for (int64_t i = len; i < c.width; ++i) v[r * c.width + i] = (i % 3 == 0) ? kNaN : kInf;
        }
        run_case(c, v, lens, 1400 + 10 * k + bf16 + 2 * static_cast<int>(rows));
      }
    }
  }
}

TEST(GpuTopk, SortedAndValues) {
  Rng rng(13);
  for (bool bounds : {false, true}) {
    Case c;
    c.rows = 9;
    c.width = 20000;
    c.k = 2048;
    c.sorted = true;
    c.values = true;
    c.bounds = bounds;
    run_case(c, normals(rng, c.rows * c.width), {100, 2047, 2048, 2049, 20000}, 300);
  }
}

TEST(GpuTopk, TiesAndConstantRows) {
  Rng rng(14);
  Case c;
  c.rows = 6;
  c.width = 9000;
  c.k = 1024;
  c.values = true;
  std::vector<float> v = coarse(rng, c.rows * c.width, 8);
  for (int64_t i = 0; i < c.width; ++i) {
    v[i] = 1.5f;                       // row 0: constant
    v[c.width + i] = (i % 2) ? 0.0f : -0.0f;  // row 1: +0 / -0 tie
  }
  run_case(c, v, {}, 400);
  // Hand-checked: a constant row selects 0..k-1.
  c.sorted = true;
  run_case(c, v, {}, 401);
  // Split path (few rows, long) with ties across chunk boundaries.
  Case l;
  l.rows = 1;
  l.width = 200000;
  l.k = 2048;
  l.sorted = true;
  run_case(l, coarse(rng, l.width, 3), {}, 402);
  std::vector<float> flat(static_cast<size_t>(l.width), -3.0f);
  run_case(l, flat, {}, 403);
}

TEST(GpuTopk, ConstantRowSelectsFirstK) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t W = 70000;
  const int k = 512;
  std::vector<float> row(W, 2.0f);
  DeviceBuffer d_logits(W * 4), d_idx(k * 4);
  ASSERT_TRUE(d_logits.upload(row.data(), W * 4));
  TopkParams p;
  p.logits = make_tensor(d_logits.ptr, DType::kF32, {1, W}, Device::kCuda);
  p.indices = make_tensor(d_idx.ptr, DType::kI32, {1, k}, Device::kCuda);
  p.k = k;
  Exec ex;
  size_t ws = 0;
  ASSERT_TRUE(topk_workspace(p, ex, &ws).ok());
  DeviceBuffer d_ws(ws);
  ex.workspace = d_ws.ptr;
  ex.workspace_bytes = ws;
  ASSERT_TRUE(topk(p, ex).ok());
  std::vector<int32_t> idx(k);
  ASSERT_TRUE(d_idx.download(idx.data(), k * 4));
  for (int j = 0; j < k; ++j) ASSERT_EQ(idx[j], j);
}

TEST(GpuTopk, NanAndInfinities) {
  Rng rng(15);
  Case c;
  c.rows = 8;
  c.width = 5000;
  c.k = 512;
  c.values = true;
  std::vector<float> v = normals(rng, c.rows * c.width);
  for (int64_t i = 0; i < c.width; ++i) {
    v[0 * c.width + i] = kNaN;                                  // all NaN: 0..k-1
    v[1 * c.width + i] = (i % 10 == 3) ? 1.0f : kNaN;           // 500 numbers + NaN fill
    v[2 * c.width + i] = (i % 3 == 0) ? -kInf : kNaN;           // -inf ranks above NaN
    v[3 * c.width + i] = (i % 7 == 0) ? kInf : v[3 * c.width + i];
    if (i % 5 == 0) v[4 * c.width + i] = kNaN;                  // sprinkled NaN
    v[5 * c.width + i] = (i < 100) ? kNaN : -kInf;              // NaN first in index order
  }
  run_case(c, v, {}, 500);
  c.sorted = true;
  run_case(c, v, {}, 501);
  // Hand-checked: row 1 (sorted) lists its 500 numbers (i % 10 == 3, ties by index) before any NaN.
  if (!cuda_available()) return;
  Case one = c;
  one.rows = 1;
  one.sorted = true;
  std::vector<float> r1(v.begin() + c.width, v.begin() + 2 * c.width);
  Rng rng2(1);
  Inputs in = make_inputs(one, rng2, r1, {});
  GpuCase g;
  setup_gpu(one, in, g);
  ASSERT_TRUE(topk(g.p, g.ex).ok());
  const Outputs o = download(one, g);
  for (int j = 0; j < 500; ++j) ASSERT_EQ(o.idx[j], 10 * j + 3) << j;  // numbers first (index order)
  const int nan_idx[12] = {0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12};  // the smallest NaN indices
  for (int j = 500; j < 512; ++j) ASSERT_EQ(o.idx[j], nan_idx[j - 500]) << j;
}

TEST(GpuTopk, Bf16) {
  Rng rng(16);
  Case c;
  c.rows = 20;
  c.width = 33000;
  c.k = 2048;
  c.bf16 = true;
  c.values = true;
  c.bounds = true;
  run_case(c, normals(rng, c.rows * c.width), {}, 600);
  c.sorted = true;
  c.rows = 2;
  c.width = 300000;
  run_case(c, normals(rng, c.rows * c.width), {}, 601);
}

TEST(GpuTopk, SlotIds) {
  Rng rng(17);
  for (int S : {1, 32, 64, 100}) {
    Case c;
    c.rows = 8;
    c.width = 7000;
    c.k = 512;
    c.slots = true;
    c.states_per_page = S;
    c.next_n = 2;
    c.bounds = true;
    run_case(c, normals(rng, c.rows * c.width), {10, 600, 7000}, 700 + S);
    c.row_request = true;
    c.next_n = 1;
    run_case(c, normals(rng, c.rows * c.width), {}, 800 + S);
  }
}

TEST(GpuTopk, StridedLogitsAndSmallSmemBudget) {
  Rng rng(18);
  Case c;
  c.rows = 3;
  c.width = 150001;
  c.k = 2048;
  c.ld_pad = 3;  // misaligned rows: every row starts at a different 16-byte phase
  c.bounds = true;
  c.sorted = true;
  c.smem_budget = 101376;  // sm_120 configuration: smaller chunks, more merge levels
  run_case(c, normals(rng, c.rows * c.width), {150001, 150000, 77777}, 900);
  c.k = 4096;
  run_case(c, normals(rng, c.rows * c.width), {}, 901);
}

TEST(GpuTopk, VeryLongSingleRow) {
  Rng rng(19);
  for (int k : {512, 2048}) {
    Case c;
    c.rows = 1;
    c.width = 4 * 1024 * 1024 + 13;
    c.k = k;
    c.sorted = true;
    c.values = true;
    c.repeats = 3;
    run_case(c, normals(rng, c.width, 3.0f), {}, 1000 + k);
  }
  Case c2;
  c2.rows = 2;
  c2.width = 3000000;
  c2.k = 1024;
  c2.bounds = true;
  run_case(c2, coarse(rng, c2.rows * c2.width, 50), {3000000, 2500000}, 1100);
}

TEST(GpuTopk, ManyRowsDeterministic) {
  Rng rng(20);
  Case c;
  c.rows = 300;
  c.width = 32768;
  c.k = 2048;
  c.repeats = 5;
  run_case(c, coarse(rng, c.rows * c.width, 40), {}, 1200);
}

TEST(GpuTopk, CudaGraphReplay) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Rng rng(21);
  for (int64_t width : {8192, 100000}) {
    Case c;
    c.rows = 2;
    c.width = width;
    c.k = 2048;
    c.sorted = true;
    c.values = true;
    Inputs in = make_inputs(c, rng, normals(rng, c.rows * c.width), {});
    GpuCase g;
    setup_gpu(c, in, g);
    cudaStream_t st;
    DSATTN_CUDA_ASSERT(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    g.ex.stream = st;
    cudaGraph_t graph;
    DSATTN_CUDA_ASSERT(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    const Status s = topk(g.p, g.ex);
    DSATTN_CUDA_ASSERT(cudaStreamEndCapture(st, &graph));
    ASSERT_TRUE(s.ok()) << s.to_string();
    cudaGraphExec_t exec;
    DSATTN_CUDA_ASSERT(cudaGraphInstantiate(&exec, graph, 0));
    for (int rep = 0; rep < 2; ++rep) {
      // New logits in the same buffer, then replay: the graph must pick them up.
      std::vector<float> fresh = normals(rng, c.rows * c.width);
      Rng r2(5);
      in = make_inputs(c, r2, fresh, {});
      ASSERT_TRUE(g.logits.upload(in.logits.data(), in.logits.size() * 4));
      // A pageable cudaMemcpy may return before its DMA lands; st does not wait for the legacy stream.
      DSATTN_CUDA_ASSERT(cudaDeviceSynchronize());
      DSATTN_CUDA_ASSERT(cudaGraphLaunch(exec, st));
      DSATTN_CUDA_ASSERT(cudaStreamSynchronize(st));
      const Outputs cpu = run_cpu(c, in);
      expect_same(c, in, cpu, download(c, g));
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(st);
  }
}

// The plan topk takes for rows x width (k) on this device.
cuda::TopkPlan device_plan(int64_t rows, int64_t width, int k, int smem_budget = 0) {
  cuda::TopkDeviceLimits lim;
  cuda::TopkPlan plan;
  Exec ex;
  ex.smem_budget_bytes = smem_budget;
  EXPECT_TRUE(cuda::topk_device_limits(ex, &lim).ok());
  EXPECT_TRUE(cuda::plan_topk(rows, width, k, lim, &plan).ok());
  return plan;
}

// Most cases above are wide enough for the threshold-filter plan; these keep the direct and split
// plans (the filter off) covered.
TEST(GpuTopk, DirectAndSplitPlansWithoutFilter) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  FilterMinWidth off(0);
  Rng rng(30);
  ASSERT_TRUE(device_plan(37, 6000, 512).direct);
  Case c;
  c.rows = 37;
  c.width = 6000;
  c.k = 512;
  c.values = true;
  run_case(c, normals(rng, c.rows * c.width), {}, 3000);
  // Split, ties across chunk boundaries, sorted.
  Case l;
  l.rows = 1;
  l.width = 200000;
  l.k = 2048;
  l.sorted = true;
  ASSERT_FALSE(device_plan(l.rows, l.width, l.k).direct);
  ASSERT_FALSE(device_plan(l.rows, l.width, l.k).filter);
  run_case(l, coarse(rng, l.width, 3), {}, 3001);
  // Split with a merge level, bounds, values, slot ids.
  Case m;
  m.rows = 2;
  m.width = 1 << 20;
  m.k = 1024;
  m.values = true;
  m.bounds = true;
  m.slots = true;
  ASSERT_GT(device_plan(m.rows, m.width, m.k).levels, 0);
  run_case(m, normals(rng, m.rows * m.width), {1 << 20, 500000}, 3002);
  // Split rows of NaN / infinities.
  Case n;
  n.rows = 3;
  n.width = 70000;
  n.k = 512;
  n.values = true;
  std::vector<float> v = normals(rng, n.rows * n.width);
  for (int64_t i = 0; i < n.width; ++i) {
    v[i] = kNaN;
    v[n.width + i] = (i % 3 == 0) ? -kInf : kNaN;
  }
  run_case(n, v, {}, 3003);
}

// Direct rows up to 8192 keep their keys in registers (topk_small_kernel, 4 or 8 keys per
// thread); the shared-memory direct kernel stays for wider rows and when the tuning turns the
// small kernel off. Both against the CPU reference on the same inputs: widths around the
// per-thread boundary, ties at the threshold (50 levels), row bounds, values, sorted, bf16.
TEST(GpuTopk, SmallRowKernelAndSharedMemoryDirect) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  FilterMinWidth off(0);
  Rng rng(40);
  for (int64_t w : {1000, 4096, 4097, 8192}) {
    Case c;
    c.rows = 5;
    c.width = w;
    c.k = w == 4096 ? 2048 : 512;
    c.values = true;
    c.bounds = w == 1000 || w == 8192;
    c.sorted = w == 4096;
    c.bf16 = w == 4097;
    const std::vector<float> v = coarse(rng, c.rows * c.width, 50);
    ASSERT_GT(device_plan(c.rows, c.width, c.k).small_v, 0) << w;
    ASSERT_LE(c.width, device_plan(c.rows, c.width, c.k).small_v * 1024) << w;
    run_case(c, v, {}, 4000 + w);
    {
      TopkTuningScope legacy;
      cuda::topk_tuning().small_max_width = 0;
      ASSERT_EQ(device_plan(c.rows, c.width, c.k).small_v, 0) << w;
      ASSERT_TRUE(device_plan(c.rows, c.width, c.k).direct) << w;
      run_case(c, v, {}, 4000 + w);
    }
  }
}

// Few rows of 8K..64K positions take the cluster kernel (sm_90+: one thread-block cluster of up to
// 8 CTAs per row, 8 or 4 keys per thread, histograms summed through distributed shared memory).
// Against the CPU reference:
// lengths around k and around the CTAs' 8192-position spans, ties at the threshold (coarse values,
// so the third digit runs and ties straddle CTAs), NaN / infinity / constant rows, sorted output,
// values, bf16, slot ids through row_request, rows not 16-byte aligned (scalar loads), k = 1 and
// k = 4096, repeated launches bitwise identical.
class GpuTopkCluster : public ::testing::TestWithParam<int> {};

// The cluster tests' rows built around the first digit's bin: k = 2048, values, two launches.
Case bin_case(int64_t rows, int64_t width) {
  Case c;
  c.rows = rows;
  c.width = width;
  c.k = 2048;
  c.values = true;
  c.repeats = 2;
  return c;
}

// Whether this device has thread-block cluster launch (the cluster kernel's tests skip without).
bool cluster_launch() {
  cuda::TopkDeviceLimits lim;
  const bool ok = cuda::topk_device_limits(Exec{}, &lim).ok();
  EXPECT_TRUE(ok) << "topk_device_limits";
  return ok && lim.cluster;
}

TEST_P(GpuTopkCluster, KernelRows) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (!cluster_launch()) GTEST_SKIP() << "no thread-block cluster launch on this device";
  TopkTuningScope scope;
  cuda::topk_tuning().cluster_v4_max_width = GetParam();  // 0: 8 keys per thread on every row
  const bool v4 = GetParam() > 0;
  const auto ctas = [&](int64_t width) {  // the plan's rule (<= 8 CTAs; these calls stay within 96)
    const int64_t V = width <= GetParam() && width <= 8 * 4096 ? 4 : 8;
    return static_cast<int>((width + V * 1024 - 1) / (V * 1024));
  };
  Rng rng(41);
  {  // lengths around k and the spans; ties; values; repeats
    Case c;
    c.rows = 8;
    c.width = v4 ? 32768 : 65536;
    c.k = 2048;
    c.bounds = true;
    c.values = true;
    c.repeats = 3;
    ASSERT_EQ(device_plan(c.rows, c.width, c.k).cluster, ctas(c.width));
    ASSERT_EQ(device_plan(c.rows, c.width, c.k).small_v, v4 ? 4 : 8);
    if (v4) {  // spans of 4096
      run_case(c, coarse(rng, c.rows * c.width, 50), {0, 2047, 2049, 4095, 4097, 12289, 30000, 32768}, 4100);
      run_case(c, coarse(rng, c.rows * c.width, 50), {1, 2048, 4096, 8192, 20000, 32767, 32768, 9000}, 4110);
    } else {
      run_case(c, coarse(rng, c.rows * c.width, 50), {0, 2047, 2049, 8191, 8193, 16385, 30000, 65536}, 4100);
      run_case(c, coarse(rng, c.rows * c.width, 50), {1, 2048, 8192, 16384, 40000, 65535, 65536, 9000}, 4110);
    }
  }
  {  // sorted, bf16, k = 4096 and k = 1
    for (int k : {4096, 1}) {
      Case c;
      c.rows = 3;
      c.width = 20000;
      c.k = k;
      c.sorted = true;
      c.values = true;
      c.bf16 = k == 4096;
      ASSERT_EQ(device_plan(c.rows, c.width, c.k).cluster, ctas(c.width));
      run_case(c, coarse(rng, c.rows * c.width, 200), {}, 4101 + k);
    }
  }
  {  // NaN / infinity / constant rows, slot ids through row_request, unaligned rows (ld = W + 3)
    Case c;
    c.rows = 5;
    c.width = v4 ? 30000 : 40000;  // 8 CTAs at 4 keys per thread, 5 at 8
    c.k = 512;
    c.values = true;
    c.slots = true;
    c.row_request = true;
    c.ld_pad = 3;
    c.sorted = false;
    ASSERT_EQ(device_plan(c.rows, c.width, c.k).cluster, ctas(c.width));
    std::vector<float> v = normals(rng, c.rows * c.width);
    for (int64_t i = 0; i < c.width; ++i) {
      v[i] = kNaN;                                                      // all NaN: the first k
      v[c.width + i] = (i % 3 == 0) ? -kInf : kNaN;                     // -inf above NaN
      v[2 * c.width + i] = 0.5f;                                        // constant: the first k
      if (i % 997 == 5) v[3 * c.width + i] = kInf;                      // 41 infinities
      if (i % 2 == 0) v[4 * c.width + i] = -0.0f;                       // -0 ties +0
    }
    run_case(c, v, {}, 4102);
    c.sorted = true;
    run_case(c, v, {}, 4103);
    // Short rows (len <= k: CTA 0 writes 0..len-1 and the -1 padding) with values and slot ids.
    c.sorted = false;
    c.bounds = true;
    run_case(c, v, {0, 100, 512, 513, 40000}, 4105);
  }
  // The first digit's bin (key bits 31..20: [1, 1.125) here) holding 4096, 4097, 1048 (the bin
  // needed whole) and 2500 keys (8 values: ties straddling CTAs, the third digit); 1000 keys above
  // it, the rest below. On 8 CTAs (the push pick), and on 4 or 2 (the pull).
  for (const int64_t width : {v4 ? int64_t(32768) : int64_t(65536), int64_t(16384)}) {
    Case c = bin_case(4, width);
    ASSERT_EQ(device_plan(c.rows, c.width, c.k).cluster, ctas(c.width));
    const int in_bin[4] = {4096, 4097, 1048, 2500};
    std::vector<float> v(static_cast<size_t>(c.rows * c.width));
    for (int64_t r = 0; r < c.rows; ++r) {
      std::vector<int64_t> pos(static_cast<size_t>(c.width));
      std::iota(pos.begin(), pos.end(), int64_t(0));
      rng.shuffle(pos);
      for (int64_t j = 0; j < c.width; ++j) {
        float x;
        if (j < 1000) {
          x = 2.0f + static_cast<float>(rng.uniform());  // above the bin
        } else if (j < 1000 + in_bin[r]) {  // in the bin: 512 levels, or 8 where ties straddle CTAs
          const int levels = r == 3 ? 8 : 512;
          x = 1.0f + 0.125f * static_cast<float>(rng.randint(0, levels - 1)) / levels;
        } else {
          x = 0.5f * static_cast<float>(rng.uniform()) - 1.0f;  // below it
        }
        v[static_cast<size_t>(r * c.width + pos[j])] = x;
      }
    }
    run_case(c, v, {}, 4104);
  }
}

// Past the plan's CTA budget (96), fewer rows than the sampled kernel takes run the cluster kernel
// where their clusters all fit one wave (TopkDeviceLimits::cluster_slots; an H100 or H200 runs 15
// clusters of 8): every such call's rows against the reference, with bounds, ties and values.
TEST(GpuTopkClusterOneWave, PastTheCtaBudget) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (!cluster_launch()) GTEST_SKIP() << "no thread-block cluster launch on this device";
  cuda::TopkDeviceLimits lim;
  ASSERT_TRUE(cuda::topk_device_limits(Exec{}, &lim).ok());
  const int64_t rows = std::min<int64_t>(lim.cluster_slots[8], cuda::topk_tuning().sampled_min_rows - 1);
  if (rows * 8 <= cuda::topk_tuning().cluster_max_ctas) {
    GTEST_SKIP() << "this device runs only " << lim.cluster_slots[8] << " clusters of 8 at once";
  }
  Rng rng(43);
  Case c;
  c.rows = rows;
  c.width = 65536;
  c.k = 2048;
  c.bounds = true;
  c.values = true;
  ASSERT_EQ(device_plan(c.rows, c.width, c.k).cluster, 8);
  std::vector<int32_t> lens;
  for (int64_t r = 0; r < rows; ++r) lens.push_back(static_cast<int32_t>(r == 0 ? 2047 : r == 1 ? 2049 : 65536 - 977 * r));
  run_case(c, coarse(rng, c.rows * c.width, 50), lens, 4120);
}

// Below its first digit the cluster kernel gathers the keys of the chosen bin (at most 4096 in the
// cluster, at most 4096 / C rounded down to a power of two from each CTA) into every CTA, which then finds the threshold and its
// winners' places alone; otherwise, or with TopkTuning::cluster_gather off, two more cluster-wide
// digits. Rows built so that the first digit's bin ([1, 1.125)) holds the k-th key: its keys spread
// over the row (the gather), crowded into one CTA's span beyond that CTA's share of the slots (the
// fallback after the gather: first CTA, last CTA), with 8 levels (ties straddling CTAs, the third
// digit) or 2000 (the second digit alone), and the bin needed whole (k - 1000 keys in it). Each row
// set runs with the gather on and off; sorted output and values too.
TEST_P(GpuTopkCluster, GatherAndFallback) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (!cluster_launch()) GTEST_SKIP() << "no thread-block cluster launch on this device";
  TopkTuningScope scope;
  cuda::topk_tuning().cluster_v4_max_width = GetParam();
  Rng rng(42);
  for (const int64_t width : {int64_t(65536), int64_t(40000), int64_t(16384)}) {
    const int64_t V = width <= GetParam() && width <= 8 * 4096 ? 4 : 8;
    const int64_t span = V * 1024;
    const int C = static_cast<int>((width + span - 1) / span);
    Case c = bin_case(6, width);
    ASSERT_EQ(device_plan(c.rows, c.width, c.k).cluster, C) << width;
    const int share = C <= 2 ? 2048 : C <= 4 ? 1024 : 512;  // slots per CTA: 4096 / C, a power of two
    // Row r: how many keys in the bin, where (0: anywhere, 1: the first CTA's span, 2: the last's),
    // and how many levels.
    // `above`: keys above the bin (fewer than k, and k - above <= in_bin: the k-th key is in it).
    struct Layout {
      int in_bin, where, levels, above;
    };
    const int last_span = static_cast<int>(width - (C - 1) * span);
    const int crowd_first = std::min<int>(static_cast<int>(span), share + 300);
    const int crowd_last = std::min<int>(last_span - 10, share + 100);
    const Layout rows[6] = {{3000, 0, 8, 1000},
                            {3000, 0, 2000, 1000},
                            {crowd_first, 1, 2000, c.k - crowd_first / 2},
                            {crowd_last, 2, 8, c.k - crowd_last / 2},
                            {1048, 0, 2000, 1000},
                            {std::min<int>(static_cast<int>(span), 1200), 1, 8, 1000}};
    std::vector<float> v(static_cast<size_t>(c.rows * c.width));
    for (int64_t r = 0; r < c.rows; ++r) {
      const Layout L = rows[r];
      ASSERT_TRUE(L.above < c.k && c.k - L.above <= L.in_bin) << width << " row " << r;  // the k-th key is in the bin
      // The bin's keys take in_bin positions of [lo, hi): anywhere, or inside one CTA's span.
      const int64_t lo = L.where == 2 ? (C - 1) * span : 0;
      const int64_t hi = L.where == 1 ? span : c.width;
      std::vector<int64_t> inside, outside;
      for (int64_t j = 0; j < c.width; ++j) (j >= lo && j < hi ? inside : outside).push_back(j);
      rng.shuffle(inside);
      std::vector<int64_t> order(inside.begin(), inside.begin() + L.in_bin);
      std::vector<int64_t> rest(inside.begin() + L.in_bin, inside.end());
      rest.insert(rest.end(), outside.begin(), outside.end());
      rng.shuffle(rest);
      order.insert(order.end(), rest.begin(), rest.end());
      for (int64_t j = 0; j < c.width; ++j) {
        float x;
        if (j < L.in_bin) {
          x = 1.0f + 0.125f * static_cast<float>(rng.randint(0, L.levels - 1)) / static_cast<float>(L.levels);
        } else if (j < L.in_bin + L.above) {
          x = 2.0f + static_cast<float>(rng.uniform());  // above the bin
        } else {
          x = 0.5f * static_cast<float>(rng.uniform()) - 1.0f;  // below it
        }
        v[static_cast<size_t>(r * c.width + order[static_cast<size_t>(j)])] = x;
      }
    }
    for (const bool gather : {true, false}) {
      cuda::topk_tuning().cluster_gather = gather;
      c.sorted = false;
      run_case(c, v, {}, 4200 + static_cast<int>(width % 1000));
      c.sorted = true;
      run_case(c, v, {}, 4300 + static_cast<int>(width % 1000));
    }
  }
}

// 8 keys per thread on every row (cluster_v4_max_width 0), and the default rule (4 up to 32768).
INSTANTIATE_TEST_SUITE_P(KeysPerThread, GpuTopkCluster, ::testing::Values(0, 32768),
                         [](const ::testing::TestParamInfo<int>& i) { return "v4max" + std::to_string(i.param); });

// The sampled-threshold kernel (topk_sampled.cuh) forced onto every split shape: lengths around k and
// around its candidate capacity (8192 at k <= 2048: rows up to it skip the sample), unaligned rows,
// rows whose sample leads to the exact fallback (constant, all NaN, -inf under NaN, heavy ties),
// sorted rows (all candidates at one end), sorted output, values, slot ids, bf16, k = 1 and 4096.
struct SampledEverywhere : TopkTuningScope {
  SampledEverywhere() {
    cuda::topk_tuning().sampled_min_width = 1;
    cuda::topk_tuning().sampled_min_rows = 1;
    cuda::topk_tuning().sampled_min_rows_wide = 1;
    cuda::topk_tuning().cluster_max_ctas = 0;
  }
};

// Both streams (TopkPlan::s_pipe: loads a tile ahead, the default for these calls of at most one
// row per SM, and not, what more rows take).
class GpuTopkSampled : public ::testing::TestWithParam<int> {};

TEST_P(GpuTopkSampled, KernelRows) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  SampledEverywhere on;
  cuda::topk_tuning().sampled_pipe = GetParam();
  ASSERT_EQ(device_plan(40, 40000, 2048).s_pipe, GetParam() != 0);
  Rng rng(51);
  {  // lengths around k and the capacity, random starts (unaligned rows), values, repeats
    Case c;
    c.rows = 40;
    c.width = 40000;
    c.k = 2048;
    c.bounds = true;
    c.values = true;
    c.repeats = 3;
    ASSERT_TRUE(device_plan(c.rows, c.width, c.k).sampled);
    ASSERT_EQ(device_plan(c.rows, c.width, c.k).s_mcap, 8192);
    run_case(c, normals(rng, c.rows * c.width),
             {0, 1, 2047, 2048, 2049, 4000, 8191, 8192, 8193, 9000, 16385, 30000, 39999, 40000}, 5100);
    c.sorted = true;
    run_case(c, normals(rng, c.rows * c.width), {}, 5101);
  }
  {  // rows of every kind, whole and unaligned (ld = W + 3), slot ids through row_request
    Case c;
    c.rows = 10;
    c.width = 65536;
    c.k = 2048;
    c.values = true;
    c.slots = true;
    c.row_request = true;
    c.ld_pad = 3;
    ASSERT_TRUE(device_plan(c.rows, c.width, c.k).sampled);
    std::vector<float> v = normals(rng, c.rows * c.width);
    const std::vector<float> ties = coarse(rng, c.width, 20);
    for (int64_t i = 0; i < c.width; ++i) {
      v[0 * c.width + i] = kNaN;                                    // all NaN: fallback, the first k
      v[1 * c.width + i] = (i % 3 == 0) ? -kInf : kNaN;             // -inf above NaN: fallback
      v[2 * c.width + i] = 0.5f;                                    // constant: overflow, the first k
      v[3 * c.width + i] = ties[i];                                 // ~3300 copies of each value
      if (i % 997 == 5) v[4 * c.width + i] = kInf;                  // 66 infinities among normals
      if (i % 2 == 0) v[5 * c.width + i] = -0.0f;                   // -0 ties +0
      v[6 * c.width + i] = static_cast<float>(i);                   // ascending: winners at the end
      v[7 * c.width + i] = -static_cast<float>(i);                  // descending: the first k
      v[8 * c.width + i] = (i % 64 == 0) ? 1.0f + 1e-3f * static_cast<float>(i % 1000) : -1.0f;  // sparse
    }
    run_case(c, v, {}, 5102);
    c.sorted = true;
    run_case(c, v, {}, 5103);
    c.sorted = false;  // unsorted indices only: written straight from the selection
    c.values = false;
    c.slots = false;
    run_case(c, v, {}, 5104);
  }
  // Rows of every kind in one launch (short, all candidates, sampled, fallback: constant and NaN
  // rows; unaligned starts), f32 and bf16 (8192-state sample), at the device maximum and at the
  // 99 KiB budget of sm_120.
  for (int budget : {0, 101376}) {
    for (bool bf16 : {false, true}) {
      Case c;
      c.rows = 26;
      c.width = 70001;
      c.k = 2048;
      c.bf16 = bf16;
      c.bounds = true;
      c.values = true;
      c.repeats = 2;
      c.smem_budget = budget;
      ASSERT_TRUE(device_plan(c.rows, c.width, c.k, budget).sampled);
      std::vector<float> v = normals(rng, c.rows * c.width);
      for (int64_t i = 0; i < c.width; ++i) {
        v[4 * c.width + i] = 0.25f;  // constant: overflow, then the first k
        v[11 * c.width + i] = kNaN;  // all NaN: the threshold is among NaN, fallback
        v[16 * c.width + i] = static_cast<float>(i % 5000);  // ascending runs
      }
      run_case(c, v, {70001, 65536, 1, 9000, 70000, 0, 2049, 30000, 8192, 16385, 2048, 69999, 40000},
               5400 + budget + bf16);
    }
  }
  for (int k : {1, 512, 4096}) {  // other k; bf16; sorted; mcap = max(8192, 4 round_up(k, 4))
    Case c;
    c.rows = 6;
    c.width = 70001;
    c.k = k;
    c.sorted = k != 512;
    c.values = true;
    c.bounds = true;
    const cuda::TopkPlan plan = device_plan(c.rows, c.width, c.k);
    ASSERT_TRUE(plan.sampled) << k;
    EXPECT_EQ(plan.s_mcap, std::max(8192, 4 * plan.kc));
    run_case(c, normals(rng, c.rows * c.width), {70001, 65536, 33333, 20000, 16385, k + 1}, 5200 + k);
    c.bf16 = true;
    run_case(c, normals(rng, c.rows * c.width), {}, 5300 + k);
  }
}

INSTANTIATE_TEST_SUITE_P(Stream, GpuTopkSampled, ::testing::Values(1, 0),
                         [](const ::testing::TestParamInfo<int>& p) { return p.param ? "ahead" : "inline"; });

// The sampled kernel's two selections over its candidates: the window digits (over key - the
// threshold) and the top-12-bit radix digits. Rows that end each window level: normals (the k-th
// bin whole, or a few keys ranked by one warp), values on a 0.05 grid (tens of ties at the k-th
// key: a second level, then ties split by position), consecutive floats (candidates within ~4096
// units in the last place: one level of exact keys), negative values, ascending runs of integers
// (~20 ties at the k-th key: ranked by one warp), a constant row (fallback), a 0.25 grid; f32 and
// bf16 (which takes the radix digits either way), unaligned starts; values, sorted output, and
// unsorted indices only (the window selection's winners written straight to the output).
TEST(GpuTopk, SampledKernelVariants) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  SampledEverywhere on;
  Rng rng(57);
  for (int variant = 0; variant < 4; ++variant) {
    // 0, 1: the window and the radix selection; 2, 3: the run-time candidate capacity (what
    // k > 2048 takes; TopkTuning::sampled_fixed_mcap) with each stream.
    const bool window = variant != 1;
    const int seed = variant < 2 ? 0 : 10 * variant;
    cuda::topk_tuning().sampled_window = window;
    cuda::topk_tuning().sampled_fixed_mcap = variant < 2;
    cuda::topk_tuning().sampled_pipe = variant == 2 ? 0 : -1;
    for (bool bf16 : {false, true}) {
      Case c;
      c.rows = 12;
      c.width = 65536 + 37;
      c.k = 2048;
      c.bf16 = bf16;
      c.bounds = true;
      c.values = true;
      const cuda::TopkPlan plan = device_plan(c.rows, c.width, c.k);
      ASSERT_TRUE(plan.sampled);
      ASSERT_EQ(plan.s_window, window);
      std::vector<float> v = normals(rng, c.rows * c.width);
      for (int64_t i = 0; i < c.width; ++i) {
        float* row = v.data();
        row[1 * c.width + i] = std::round(row[1 * c.width + i] * 20.0f) / 20.0f;        // 0.05 grid
        row[2 * c.width + i] = 1.0f + std::ldexp(static_cast<float>(i), -23);            // consecutive floats
        row[3 * c.width + i] = -3.0f - std::fabs(row[3 * c.width + i]);                  // negative
        row[4 * c.width + i] = static_cast<float>(i % 3000);                             // ascending runs
        row[5 * c.width + i] = 0.75f;                                                     // constant
        row[6 * c.width + i] = std::round(row[6 * c.width + i] * 4.0f) / 4.0f + 10.0f;   // 0.25 grid
      }
      run_case(c, v, {65573, 65536, 40000, 30000, 16385, 9000, 8193, 2049, 65000, 50000, 0, 12345},
               5600 + seed + 2 * window + bf16);
      c.sorted = true;
      run_case(c, v, {}, 5700 + seed + 2 * window + bf16);
      // Unsorted indices only: the window selection writes the winners straight to the output.
      c.sorted = false;
      c.values = false;
      run_case(c, v, {65573, 65536, 40000, 30000, 16385, 9000, 8193, 2049, 65000, 50000, 0, 12345},
               5800 + seed + 2 * window + bf16);
    }
  }
}

// A small sampled-kernel launch for scripts/gpu_check.sh's compute-sanitizer step (tests named
// *Sanitizer*): one row of each of the selection's exits and input kinds (normals: the window's
// list; consecutive floats: its last digit; negative values: keys converted; a 0.05 grid: ties
// ranked by position; constant: the exact fallback), unsorted indices only (the winners written
// straight to the output) and sorted with values (through finish_row).
TEST(GpuTopk, SampledSanitizerSmall) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  SampledEverywhere on;
  Rng rng(58);
  Case c;
  c.rows = 5;
  c.width = 20000;
  c.k = 2048;
  ASSERT_TRUE(device_plan(c.rows, c.width, c.k).sampled);
  std::vector<float> v = normals(rng, c.rows * c.width);
  for (int64_t i = 0; i < c.width; ++i) {
    v[1 * c.width + i] = 1.0f + std::ldexp(static_cast<float>(i), -23);           // consecutive floats
    v[2 * c.width + i] = -3.0f - std::fabs(v[2 * c.width + i]);                    // negative
    v[3 * c.width + i] = std::round(v[3 * c.width + i] * 20.0f) / 20.0f;           // 0.05 grid
    v[4 * c.width + i] = 0.75f;                                                     // constant
  }
  run_case(c, v, {}, 5900);
  c.sorted = true;
  c.values = true;
  run_case(c, v, {}, 5901);
}

// The threshold-filter plan forced onto short rows: lengths around k in one launch (short rows
// emit 0..len-1, the others filter), sorted, values, bf16.
TEST(GpuTopk, FilterPlanAroundK) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  FilterMinWidth on(1);
  Rng rng(31);
  for (int k : {1, 100, 512, 2048}) {
    Case c;
    c.rows = 10;
    c.width = 3 * k + 16;  // wider than 2 * round_up(k, 4) for every k
    c.k = k;
    c.bounds = true;
    c.values = true;
    c.sorted = k != 100;
    ASSERT_TRUE(device_plan(c.rows, c.width, c.k).filter) << k;
    run_case(c, normals(rng, c.rows * c.width), {0, 1, k - 1, k, k + 1, 2 * k, 3 * k + 16, 2}, 3100 + k);
    c.bf16 = true;
    run_case(c, normals(rng, c.rows * c.width), {}, 3200 + k);
  }
}

// Filter plan rows of every kind in one launch (the plan takes at most 4 rows): candidates that fit
// (normals with 300 infinities), heavy ties at the threshold (the final kernel streams the row;
// wide enough for the second histogram digit, whose ties still overflow), constant, all NaN.
TEST(GpuTopk, FilterPlanMixedRows) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Rng rng(32);
  Case c;
  c.rows = 4;
  c.width = 300000;
  c.k = 2048;
  c.values = true;
  c.sorted = true;
  c.repeats = 2;
  const cuda::TopkPlan plan = device_plan(c.rows, c.width, c.k);
  ASSERT_TRUE(plan.filter);
  ASSERT_TRUE(plan.f_digit2);
  std::vector<float> v = normals(rng, c.rows * c.width);
  const std::vector<float> ties = coarse(rng, c.width, 20);
  for (int64_t i = 0; i < c.width; ++i) {
    v[1 * c.width + i] = ties[i];    // ~15000 copies of each value: overflow after both digits
    v[2 * c.width + i] = 0.75f;      // constant: the first k
    v[3 * c.width + i] = kNaN;       // all NaN: the first k
    if (i % 1000 == 7) v[0 * c.width + i] = kInf;  // 300 infinities among the normals
  }
  run_case(c, v, {}, 3300);
}

TEST(GpuTopk, ZeroRowsAndZeroWidth) {
  Case c;
  c.rows = 4;
  c.width = 0;
  c.k = 16;
  c.values = true;
  run_case(c, {}, {}, 1300);
}

// ---------------------------------------------------------------- random cases
// Cases drawn at random over the op's coverage, each against the CPU reference on the same inputs
// (run_case: indices in the same order, values bit for bit, slot ids, every row a correct top-k):
// k from 1 to 4096; 1 to 2000 rows of 1 to 4M positions (within 8M in all), shaped to reach every
// plan (small, direct, split with merge levels, cluster, sampled, filter), with the plan's
// tuning left alone or moved (each knob of TopkTuning over values that change the plan or the
// kernel's variant); f32 and bf16; whole rows, [start, end) bounds or ends only, at 0, around k,
// full or anywhere; padded strides (rows at every 16-byte phase); sorted or not, values, slot ids
// through a block table (next_n, row_request, pages of 1..128 states); the sm_120 shared-memory
// budget; repeated launches bitwise alike. Each row's values come from one of eight shapes
// (normals over nine decades of scale, a few levels, positive, negative, rising or falling along
// the row, alike within 64-position chunks, constant, consecutive floats), some of them strewn
// with NaN, infinities and signed zeros. DSATTN_TEST_RANDOM_CASES (default 8) and
// DSATTN_TEST_RANDOM_SEED (default 2026) widen or move the draw; a failure names the case.
struct RandomTopkCase {
  Case c;
  std::vector<float> values;
  std::vector<int32_t> lens;
  cuda::TopkTuning tune;
  std::string name;
};

constexpr uint64_t kTopkDrawSalt = 11;  // random_case_seed's salt of this draw

RandomTopkCase random_topk_case(uint64_t seed, bool with_values = true) {
  testutil::Draw d(seed);
  RandomTopkCase r;
  Case& c = r.c;
  c.k = testutil::draw_topk_k(d);
  // Shapes toward each plan: one long row, a few rows (clusters), tens of wide rows (sampled),
  // many narrow rows (small / direct kernels).
  const auto log_uniform = [&](double lo, double hi) {
    return static_cast<int64_t>(std::exp(std::log(lo) + (std::log(hi) - std::log(lo)) * d.rng.uniform()));
  };
  const int shape = d.below(4);
  if (shape == 0) {
    c.rows = 1 + d.below(2);
    c.width = log_uniform(1, 4.2e6);
  } else if (shape == 1) {
    c.rows = 2 + d.below(14);
    c.width = log_uniform(4096, 140000);
  } else if (shape == 2) {
    c.rows = 16 + d.below(120);
    c.width = log_uniform(12000, 270000);
  } else {
    c.rows = 1 + d.below(2000);
    c.width = log_uniform(1, 20000);
  }
  if (d.pct(15)) c.width = std::max<int64_t>(1, c.k - 1 + d.below(3) + (d.pct(50) ? c.k : 0));
  c.rows = std::max<int64_t>(1, std::min<int64_t>(c.rows, (int64_t(8) << 20) / std::max<int64_t>(1, c.width)));
  c.bf16 = d.pct(25);
  c.sorted = d.pct(35);
  c.values = d.pct(50);
  c.bounds = d.pct(55);
  c.ends_only = c.bounds && d.pct(30);
  c.slots = d.pct(25);
  if (c.slots) {
    c.row_request = d.pct(30);
    c.next_n = c.row_request || d.pct(60) ? 1 : 2 + d.below(3);  // row_request takes next_n = 1
    c.states_per_page = d.pick({1, 2, 7, 16, 32, 64, 64, 128});
  }
  c.ld_pad = d.pct(70) ? 0 : d.pick({1, 2, 3, 8, 100});
  c.smem_budget = d.pct(15) ? 101376 : 0;
  c.repeats = d.pct(20) ? 2 : 1;
  // Lengths (with bounds): 0, around k, the whole row, or anywhere.
  if (c.bounds) {
    for (int64_t i = 0; i < std::min<int64_t>(c.rows, 64); ++i) {
      const int lk = d.below(100);
      const int64_t L = lk < 10 ? 0 : lk < 35 ? c.k - 1 + d.below(3) : lk < 55 ? c.width : d.rng.randint(0, c.width);
      r.lens.push_back(static_cast<int32_t>(std::min<int64_t>(L, c.width)));
    }
  }
  // The plan's tuning: the defaults, or each knob moved with some chance.
  cuda::TopkTuning& t = r.tune;
  t = cuda::TopkTuning{};
  const bool tuned = d.pct(55);
  if (tuned) {
    if (d.pct(40)) t.filter_min_width = d.pick({0, 4096, 32768});
    if (d.pct(30)) t.filter_max_rows = d.pick({0, 64});
    if (d.pct(25)) t.small_max_width = d.pick({0, 4096});
    if (d.pct(30)) t.cluster_max_ctas = d.pick({0, 16, 400});
    if (d.pct(25)) t.cluster_v4_max_width = 0;
    if (d.pct(25)) t.cluster_gather = false;
    if (d.pct(35)) t.sampled_min_width = d.pick({0, 1, 4096});
    if (d.pct(35)) t.sampled_min_rows = t.sampled_min_rows_wide = 1;
    if (d.pct(25)) t.sampled_window = false;
    if (d.pct(30)) t.sampled_pipe = d.pick({0, 1});
    if (d.pct(30)) t.sampled_l2_ahead = d.pick({0, 1, 2});
    if (d.pct(25)) t.sampled_fixed_mcap = false;
    if (d.pct(25)) t.min_chunk = d.pick({2048, 32768});
    if (d.pct(20)) t.fill_div = d.pick({1, 4});
    if (d.pct(20)) t.max_direct = d.pick({2048, 6000});
  }
  // Values: each row one of eight shapes; some rows strewn with NaN / infinities / signed zeros.
  const int palette = d.below(8), strew = d.pct(25) ? d.pick({1, 50, 500}) : 0;  // per mille
  const float scale = std::ldexp(1.0f, d.pick({-20, -10, 0, 0, 0, 4, 10, 20, 30}));
  const int levels = 1 + d.below(60);
  if (with_values) r.values.resize(static_cast<size_t>(c.rows * c.width));
  for (int64_t row = 0; with_values && row < c.rows; ++row) {
    float* v = r.values.data() + row * c.width;
    const int mode = d.pct(60) ? palette : d.below(8);
    const float slope = (d.pct(50) ? 1.0f : -1.0f) * scale / static_cast<float>(std::max<int64_t>(1, c.width));
    const float c0 = d.rng.uniform(-2.0f, 2.0f) * scale;
    const int64_t start = d.rng.randint(0, 1 << 20);
    float chunk = 0.0f;
    for (int64_t i = 0; i < c.width; ++i) {
      const float n = static_cast<float>(d.rng.uniform() * 2.0 - 1.0) + static_cast<float>(d.rng.uniform() * 2.0 - 1.0);
      float x = 0.0f;
      switch (mode) {
        case 0: x = n * scale; break;
        case 1: x = static_cast<float>(d.rng.randint(0, levels - 1)) * 0.25f * scale - scale; break;
        case 2: x = std::fabs(n) * scale + 0.5f * scale; break;
        case 3: x = -std::fabs(n) * scale - 0.5f * scale; break;
        case 4: x = c0 + slope * static_cast<float>(i) + 1e-3f * n * scale; break;
        case 5:
          if (i % 64 == 0) chunk = n * scale;
          x = chunk + 1e-4f * n * scale;
          break;
        case 6: x = c0; break;
        default: x = std::ldexp(static_cast<float>((start + i) & 0xFFFFF), -23) + 1.0f; break;
      }
      if (strew > 0 && d.rng.randint(0, 999) < strew) {
        const float odd[] = {kNaN, kInf, -kInf, 0.0f, -0.0f, -kNaN};
        x = odd[d.below(6)];
      }
      v[i] = x;
    }
  }
  char buf[480];
  std::snprintf(buf, sizeof(buf),
                "seed %llu: %lld x %lld k%d %s sorted%d values%d bounds%d ends_only%d slots%d (N%d S%d rr%d) pad%lld "
                "smem%d repeats%d values mode %d scale 2^%d levels %d strew %d/1000 tuning%s",
                static_cast<unsigned long long>(seed), static_cast<long long>(c.rows), static_cast<long long>(c.width),
                c.k, c.bf16 ? "bf16" : "f32", c.sorted, c.values, c.bounds, c.ends_only, c.slots, c.next_n,
                c.states_per_page, c.row_request, static_cast<long long>(c.ld_pad), c.smem_budget, c.repeats, palette,
                std::ilogb(scale), levels, strew, tuned ? "" : " default");
  r.name = buf;
  if (tuned) {
    std::snprintf(buf, sizeof(buf),
                  " {filter %d/%d small %d cluster %d/%d/%d sampled %d/%d/%d window%d pipe%d l2 %d fixed%d chunk %d "
                  "fill %d direct %d}",
                  t.filter_min_width, t.filter_max_rows, t.small_max_width, t.cluster_max_ctas, t.cluster_v4_max_width,
                  t.cluster_gather, t.sampled_min_width, t.sampled_min_rows, t.sampled_min_rows_wide, t.sampled_window,
                  t.sampled_pipe, t.sampled_l2_ahead, t.sampled_fixed_mcap, t.min_chunk, t.fill_div, t.max_direct);
    r.name += buf;
  }
  if (!r.lens.empty()) {
    r.name += " lengths";
    testutil::append_values(&r.name, r.lens);
  }
  return r;
}

// The plan's kind (and with `sizes` its CTAs), for the random cases' log and ReachesEveryPlan.
std::string plan_name(const cuda::TopkPlan& p, bool sizes = true) {
  if (p.filter) return p.f_digit2 ? "filter, two digits" : "filter";
  if (p.sampled) return p.s_window ? "sampled, window select" : "sampled, radix select";
  if (p.cluster > 0) {
    return "cluster" + (sizes ? " of " + std::to_string(p.cluster) : std::string()) +
           (p.cluster_gather ? ", gather" : ", digits");
  }
  if (p.direct) return p.small_v > 0 ? "direct, keys in registers" : "direct, shared memory";
  return "split" + (sizes ? " into " + std::to_string(p.chunks) + " chunks" : std::string()) +
         (p.levels > 0 ? ", merge levels" : ", no merge level");
}

TEST(GpuTopk, RandomCases) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int n = testutil::env_int("DSATTN_TEST_RANDOM_CASES", 8);
  const uint64_t base = testutil::random_seed_base();
  for (int i = 0; i < n && !::testing::Test::HasFatalFailure(); ++i) {
    const RandomTopkCase r = random_topk_case(testutil::random_case_seed(base, i, kTopkDrawSalt));
    SCOPED_TRACE(r.name);
    std::printf("[ random %d ] %s\n", i, r.name.c_str());
    TopkTuningScope scope;
    cuda::topk_tuning() = r.tune;
    std::printf("[ random %d ] plan: %s\n", i, plan_name(device_plan(r.c.rows, r.c.width, r.c.k, r.c.smem_budget)).c_str());
    std::fflush(stdout);
    run_case(r.c, r.values, r.lens, r.c.rows * 31 + r.c.width);
  }
}

// The draw's reach, on the host (no GPU needed): 400 cases of the default seed, planned for an
// H200's limits (132 SMs, 227 KiB of shared memory, cluster launch; the 99 KiB budget where a case
// sets it), take each of the ten plan kinds at least twice. A change to the draw (or to the plan
// rules) that leaves a kind to chance fails here instead of going unnoticed.
TEST(GpuTopkDraw, ReachesEveryPlan) {
  std::map<std::string, int> seen;
  for (int i = 0; i < 400; ++i) {
    const RandomTopkCase r = random_topk_case(testutil::random_case_seed(testutil::kRandomSeedDefault, i, kTopkDrawSalt), false);
    TopkTuningScope scope;
    cuda::topk_tuning() = r.tune;
    const cuda::TopkDeviceLimits lim{132, (r.c.smem_budget > 0 ? r.c.smem_budget : 232448) - 1024, true};
    cuda::TopkPlan plan;
    ASSERT_TRUE(cuda::plan_topk(r.c.rows, r.c.width, r.c.k, lim, &plan).ok()) << r.name;
    ++seen[plan_name(plan, false)];
  }
  for (const char* kind : {"filter", "filter, two digits", "sampled, window select", "sampled, radix select",
                           "cluster, gather", "cluster, digits", "direct, keys in registers", "direct, shared memory",
                           "split, no merge level", "split, merge levels"}) {
    EXPECT_GE(seen[kind], 2) << kind;
  }
  EXPECT_EQ(seen.size(), 10u);
}

}  // namespace
}  // namespace dsattn
