// Fused paged_mqa_topk on the GPU (SPEC §3.4), three ways:
//  1. against the SPEC formula in double (testutil::PagedCase::ref): every row is a correct top-k
//     within the logits' error bound (2e-4 of the row's largest |score|), -1 padding, count;
//  2. against the unfused GPU path on the same inputs (paged_mqa_logits -> topk): identical
//     indices (same order), slot ids, and scores;
//  3. slot ids recomputed here from the block table.
// Every case runs on every route of the op (run_fused_case): streaming candidates through the
// collector and the merges (DSATTN_FUSED_LOGITS=0), scores in the workspace + topk's kernels (the
// logits route, forced: =force), the defaults (up to six requests on Hopper: the resident route,
// whose scores stay in the scoring kernel's shared memory; else the logits route where every
// piece would write as many bytes as score rows, streaming otherwise: RouteByPieceLength), the
// chunked logits route (scores of about a third of the block table at a time, DSATTN_FUSED_CHUNK;
// ChunkedRoute takes the smallest chunks), and the call's own switch
// (PagedMqaTopkParams::logits_route, environment unset). Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "common/indexer_test_util.h"
#include "cuda/common/green_context.h"
#include "dsattn/ops.h"
#include "gpu/gpu_test_util.h"
#include "gpu/topk_test_util.h"

namespace dsattn {
namespace {

using testing_gpu::DeviceBuffer;
using testing_gpu::GpuInputs;
using testing_gpu::upload_case;
using testutil::EnvScope;
using testutil::PagedCase;
using testutil::PagedCaseSpec;

struct FusedCase {
  PagedCaseSpec spec;
  int k = 512;
  bool sorted = false;
  bool slots = true;
  bool graph = false;
  int smem_budget = 0;     // Exec::smem_budget_bytes (101376: the sm_120 configuration)
  int schedule_parts = 0;  // > 0: caller-supplied schedule from schedule_metadata(num_sms = this)
  bool values = true;      // false: indices only (with slots = false: the direct-write paths)
  bool zero_keys = false;  // every key (and scale) zero: all scores tie at 0, the first k win
  bool resident_route = true;  // PagedMqaTopkParams::resident_route
  void* stream = nullptr;      // Exec::stream of every call (run_fused without a graph, run_unfused)
};

struct TopkOut {
  std::vector<int32_t> idx, slots;
  std::vector<float> val;
};

// One fused call: outputs poisoned (0x7b), the caller schedule when the case asks for one, the
// params, and the workspace.
struct FusedCall {
  size_t n = 0;  // R x k
  DeviceBuffer idx, val, slots, sched, ws;
  PagedMqaTopkParams p;
  Exec ex;
};
void setup_fused(const FusedCase& c, const PagedCase& pc, GpuInputs& g, FusedCall* f, bool logits_route) {
  const int64_t R = pc.rows;
  const size_t n = f->n = static_cast<size_t>(R * c.k);
  f->idx.alloc(n * 4);
  f->val.alloc(n * 4);
  f->slots.alloc(n * 4);
  DSATTN_CUDA_ASSERT(cudaMemset(f->idx.ptr, 0x7b, n * 4));
  DSATTN_CUDA_ASSERT(cudaMemset(f->val.ptr, 0x7b, n * 4));
  DSATTN_CUDA_ASSERT(cudaMemset(f->slots.ptr, 0x7b, n * 4));
  PagedMqaTopkParams& p = f->p;
  static_cast<PagedIndexerArgs&>(p) = g.args;
  p.k = c.k;
  p.sorted = c.sorted;
  p.logits_route = logits_route;
  p.resident_route = c.resident_route;
  p.indices = make_tensor(f->idx.ptr, DType::kI32, {R, c.k}, Device::kCuda);
  if (c.values) p.values = make_tensor(f->val.ptr, DType::kF32, {R, c.k}, Device::kCuda);
  if (c.slots) p.slot_ids = make_tensor(f->slots.ptr, DType::kI32, {R, c.k}, Device::kCuda);
  Exec& ex = f->ex;
  ex.backend = Backend::kCuda;
  ex.smem_budget_bytes = c.smem_budget;
  ex.stream = c.stream;
  if (c.schedule_parts > 0) {
    const int64_t ms = schedule_metadata_size(c.schedule_parts);
    f->sched.alloc(static_cast<size_t>(ms) * 4);
    DSATTN_CUDA_ASSERT(cudaMemset(f->sched.ptr, 0x7b, static_cast<size_t>(ms) * 4));
    p.schedule = make_tensor(f->sched.ptr, DType::kI32, {ms}, Device::kCuda);
    ScheduleMetadataParams sp;
    sp.context_lens = g.args.context_lens;
    sp.row_request = g.args.row_request;
    sp.next_n = c.spec.varlen ? 1 : c.spec.next_n;
    sp.states_per_page = c.spec.states_per_page;
    sp.num_sms = c.schedule_parts;
    sp.metadata = p.schedule;
    const Status ss = schedule_metadata(sp, ex);
    ASSERT_TRUE(ss.ok()) << ss.to_string();
  }
  size_t ws = 0;
  const Status s = paged_mqa_topk_workspace(p, ex, &ws);
  ASSERT_TRUE(s.ok()) << s.to_string();
  f->ws.alloc(ws);
  // Caller-owned scratch holds anything: poisoned, a candidate entry the op read without writing
  // it first would show up as a wrong index.
  DSATTN_CUDA_ASSERT(cudaMemset(f->ws.ptr, 0xff, ws));
  ex.workspace = f->ws.ptr;
  ex.workspace_bytes = ws;
  // The memsets above run on the legacy stream; a non-blocking call stream does not wait for it.
  DSATTN_CUDA_ASSERT(cudaDeviceSynchronize());
}

// The call captured once into a CUDA graph on a new stream (the call's stream from then on);
// destroyed with the object.
struct FusedGraph {
  cudaStream_t st = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~FusedGraph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    if (st) cudaStreamDestroy(st);
  }
};
void capture_fused(FusedCall* f, FusedGraph* fg) {
  DSATTN_CUDA_ASSERT(cudaStreamCreateWithFlags(&fg->st, cudaStreamNonBlocking));
  f->ex.stream = fg->st;
  DSATTN_CUDA_ASSERT(cudaStreamBeginCapture(fg->st, cudaStreamCaptureModeGlobal));
  const Status s = paged_mqa_topk(f->p, f->ex);
  DSATTN_CUDA_ASSERT(cudaStreamEndCapture(fg->st, &fg->graph));
  ASSERT_TRUE(s.ok()) << s.to_string();
  DSATTN_CUDA_ASSERT(cudaGraphInstantiate(&fg->exec, fg->graph, 0));
}

void download_fused(const FusedCall& f, TopkOut* o) {
  o->idx.resize(f.n);
  o->val.resize(f.n);
  o->slots.resize(f.n);
  ASSERT_TRUE(f.idx.download(o->idx.data(), f.n * 4));
  ASSERT_TRUE(f.val.download(o->val.data(), f.n * 4));
  ASSERT_TRUE(f.slots.download(o->slots.data(), f.n * 4));
}

// Fused path. With c.graph, captured into a CUDA graph and replayed twice.
void run_fused(const FusedCase& c, const PagedCase& pc, GpuInputs& g, TopkOut* o, bool logits_route = false) {
  FusedCall f;
  setup_fused(c, pc, g, &f, logits_route);
  if (::testing::Test::HasFatalFailure()) return;
  if (c.graph) {
    FusedGraph fg;
    capture_fused(&f, &fg);
    if (::testing::Test::HasFatalFailure()) return;
    for (int rep = 0; rep < 2; ++rep) DSATTN_CUDA_ASSERT(cudaGraphLaunch(fg.exec, fg.st));
    DSATTN_CUDA_ASSERT(cudaStreamSynchronize(fg.st));
  } else {
    const Status s = paged_mqa_topk(f.p, f.ex);
    ASSERT_TRUE(s.ok()) << s.to_string();
    DSATTN_CUDA_ASSERT(cudaStreamSynchronize(static_cast<cudaStream_t>(f.ex.stream)));
  }
  DSATTN_CUDA_ASSERT(cudaDeviceSynchronize());
  download_fused(f, o);
}

// The route paged_mqa_topk_route names for the case's call ("(null)" when it names none).
std::string fused_route(const FusedCase& c, const PagedCase& pc, GpuInputs& g, bool logits_route) {
  FusedCall f;
  setup_fused(c, pc, g, &f, logits_route);
  if (::testing::Test::HasFatalFailure()) return "(setup failed)";
  const char* r = nullptr;
  const Status s = paged_mqa_topk_route(f.p, f.ex, &r);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return std::string(r != nullptr ? r : "(null)");
}

// Unfused path: paged_mqa_logits into [R, W] then topk over [0, ctx) of each row.
void run_unfused(const FusedCase& c, const PagedCase& pc, GpuInputs& g, TopkOut* o) {
  const int64_t R = pc.rows, W = std::max<int64_t>(pc.max_context, 1);
  DeviceBuffer logits(static_cast<size_t>(R * W) * 4);
  PagedMqaLogitsParams lp;
  static_cast<PagedIndexerArgs&>(lp) = g.args;
  lp.logits = make_tensor(logits.ptr, DType::kF32, {R, W}, Device::kCuda);
  lp.clean = true;
  Exec ex;
  ex.backend = Backend::kCuda;
  ex.stream = c.stream;
  // The same budget as the fused call: on Hopper it decides between the wgmma and the portable
  // indexer kernel, whose scores differ in the last bits (both within the logits' error bound).
  ex.smem_budget_bytes = c.smem_budget;
  size_t ws = 0;
  Status s = paged_mqa_logits_workspace(lp, ex, &ws);
  ASSERT_TRUE(s.ok()) << s.to_string();
  DeviceBuffer d_ws(ws);
  ex.workspace = d_ws.ptr;
  ex.workspace_bytes = ws;
  s = paged_mqa_logits(lp, ex);
  ASSERT_TRUE(s.ok()) << s.to_string();

  std::vector<int32_t> ends(pc.row_ctx.begin(), pc.row_ctx.end());
  DeviceBuffer d_ends(ends.size() * 4);
  ASSERT_TRUE(ends.empty() || d_ends.upload(ends.data(), ends.size() * 4));
  const size_t n = static_cast<size_t>(R * c.k);
  DeviceBuffer idx(n * 4), val(n * 4), slots(n * 4);
  TopkParams tp;
  tp.logits = lp.logits;
  tp.ends = make_tensor(d_ends.ptr, DType::kI32, {R}, Device::kCuda);
  tp.k = c.k;
  tp.sorted = c.sorted;
  tp.indices = make_tensor(idx.ptr, DType::kI32, {R, c.k}, Device::kCuda);
  if (c.values) tp.values = make_tensor(val.ptr, DType::kF32, {R, c.k}, Device::kCuda);
  if (c.slots) {
    tp.block_table = g.args.block_table;
    tp.states_per_page = c.spec.states_per_page;
    if (c.spec.varlen) {
      tp.row_request = g.args.row_request;
    } else {
      tp.next_n = c.spec.next_n;
    }
    tp.slot_ids = make_tensor(slots.ptr, DType::kI32, {R, c.k}, Device::kCuda);
  }
  Exec tex;
  tex.backend = Backend::kCuda;
  tex.stream = c.stream;
  size_t tws = 0;
  s = topk_workspace(tp, tex, &tws);
  ASSERT_TRUE(s.ok()) << s.to_string();
  DeviceBuffer d_tws(tws);
  tex.workspace = d_tws.ptr;
  tex.workspace_bytes = tws;
  s = topk(tp, tex);
  ASSERT_TRUE(s.ok()) << s.to_string();
  DSATTN_CUDA_ASSERT(cudaStreamSynchronize(static_cast<cudaStream_t>(c.stream)));
  DSATTN_CUDA_ASSERT(cudaDeviceSynchronize());
  o->idx.resize(n);
  o->val.resize(n);
  o->slots.resize(n);
  ASSERT_TRUE(idx.download(o->idx.data(), n * 4));
  if (c.values) {
    ASSERT_TRUE(val.download(o->val.data(), n * 4));
  }
  if (c.slots) {
    ASSERT_TRUE(slots.download(o->slots.data(), n * 4));
  }
}

// The fused outputs against the reference (refs: testutil::ref_rows(pc), computed once per case
// for all the routes checked against it), the unfused outputs and the block table.
void check_fused(const FusedCase& c, const PagedCase& pc, const std::vector<std::vector<float>>& refs,
                 const TopkOut& fused, const TopkOut& unfused) {
  const int S = c.spec.states_per_page;
  int bad = 0;
  ASSERT_EQ(static_cast<int64_t>(refs.size()), pc.rows);
  for (int64_t r = 0; r < pc.rows && bad < 4; ++r) {
    const int64_t len = pc.row_ctx[static_cast<size_t>(r)];
    const std::vector<float>& ref = refs[static_cast<size_t>(r)];
    ASSERT_EQ(static_cast<int64_t>(ref.size()), len) << "row " << r;
    double amax = 0.0;
    for (int64_t t = 0; t < len; ++t) amax = std::max(amax, std::fabs(static_cast<double>(ref[static_cast<size_t>(t)])));
    const int32_t* fi = fused.idx.data() + r * c.k;
    const std::string err = testutil::check_topk_row(ref.data(), len, c.k, fi, 2e-4 * amax);
    if (!err.empty()) {
      ADD_FAILURE() << "row " << r << " (ctx " << len << "): " << err;
      ++bad;
      continue;
    }
    if (c.zero_keys) {  // every score ties: the first min(k, len) states, in order, then -1
      for (int j = 0; j < c.k; ++j) {
        const int32_t want = j < len ? j : -1;
        if (fi[j] != want) {
          ADD_FAILURE() << "row " << r << " (all scores tie) slot " << j << ": index " << fi[j] << ", want " << want;
          ++bad;
          break;
        }
      }
    }
    const int64_t b = pc.row_req[static_cast<size_t>(r)];
    for (int j = 0; j < c.k; ++j) {
      const size_t o = static_cast<size_t>(r * c.k + j);
      if (fused.idx[o] != unfused.idx[o]) {
        ADD_FAILURE() << "row " << r << " slot " << j << ": fused index " << fused.idx[o] << ", unfused "
                      << unfused.idx[o];
        ++bad;
        break;
      }
      const float fv = c.values ? fused.val[o] : 0.0f, uv = c.values ? unfused.val[o] : 0.0f;
      if (!(fv == uv || (std::isnan(fv) && std::isnan(uv)))) {
        ADD_FAILURE() << "row " << r << " slot " << j << ": fused score " << fv << ", unfused " << uv;
        ++bad;
        break;
      }
      if (c.slots) {
        const int32_t t = fused.idx[o];
        const int32_t want =
            t < 0 ? -1
                  : pc.cache.block_table[static_cast<size_t>(b * pc.cache.max_pages + t / S)] * S + t % S;
        if (fused.slots[o] != want || unfused.slots[o] != want) {
          ADD_FAILURE() << "row " << r << " slot " << j << ": slot id fused " << fused.slots[o] << ", unfused "
                        << unfused.slots[o] << ", want " << want;
          ++bad;
          break;
        }
      }
    }
  }
}

// A case's inputs on the device (c.zero_keys: every key zero), the unfused outputs and the
// reference rows that each route of the op is checked against.
struct CaseBaseline {
  PagedCase pc;
  GpuInputs g;
  TopkOut unfused;
  std::vector<std::vector<float>> refs;
};
void prepare_case(const FusedCase& c, CaseBaseline* b) {
  b->pc = testutil::make_paged_case(c.spec);
  PagedCase& pc = b->pc;
  if (c.zero_keys) {
    std::fill(pc.cache.pages.begin(), pc.cache.pages.end(), uint8_t{0});
    for (auto& v : pc.cache.key_values) std::fill(v.begin(), v.end(), 0.0f);
    for (auto& v : pc.cache.key_scales) std::fill(v.begin(), v.end(), 0.0f);
  }
  upload_case(pc, &b->g);
  if (::testing::Test::HasFatalFailure()) return;
  run_unfused(c, pc, b->g, &b->unfused);
  if (::testing::Test::HasFatalFailure()) return;
  b->refs = testutil::ref_rows(pc);
}

void run_fused_case(const FusedCase& c) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  CaseBaseline base;
  prepare_case(c, &base);
  if (::testing::Test::HasFatalFailure()) return;
  PagedCase& pc = base.pc;
  GpuInputs& g = base.g;
  const TopkOut& unfused = base.unfused;
  const std::vector<std::vector<float>>& refs = base.refs;
  // The routes of the op on the same inputs: streaming candidates through the collector and the
  // merges (DSATTN_FUSED_LOGITS=0), logits in the workspace + the top-k kernels (=force), both
  // with the resident route off (DSATTN_FUSED_RESIDENT=0); then the defaults, where up to six
  // requests with N = 1 on Hopper take the resident route (scores in the scoring kernel's shared
  // memory).
  for (const char* route : {"0", "force", "default"}) {
    SCOPED_TRACE(std::string("DSATTN_FUSED_LOGITS=") + route);
    TopkOut fused;
    if (std::string(route) == "default") {
      run_fused(c, pc, g, &fused);
    } else {
      EnvScope scope("DSATTN_FUSED_LOGITS", route);
      EnvScope off("DSATTN_FUSED_RESIDENT", "0");
      run_fused(c, pc, g, &fused);
    }
    if (::testing::Test::HasFatalFailure()) return;
    check_fused(c, pc, refs, fused, unfused);
  }
  {  // The chunked logits route (DSATTN_FUSED_CHUNK): about three chunks of the longest row.
    const std::string w = std::to_string(std::max<int64_t>(1, pc.max_context / 3));
    SCOPED_TRACE("DSATTN_FUSED_CHUNK=" + w);
    EnvScope chunk("DSATTN_FUSED_CHUNK", w.c_str());
    EnvScope off("DSATTN_FUSED_RESIDENT", "0");
    TopkOut fused;
    run_fused(c, pc, g, &fused);
    if (::testing::Test::HasFatalFailure()) return;
    check_fused(c, pc, refs, fused, unfused);
  }
  {  // The call's own switch (no environment override): the logits route where it fits.
    SCOPED_TRACE("PagedMqaTopkParams::logits_route");
    ASSERT_EQ(std::getenv("DSATTN_FUSED_LOGITS"), nullptr);
    TopkOut fused;
    run_fused(c, pc, g, &fused, true);
    if (::testing::Test::HasFatalFailure()) return;
    check_fused(c, pc, refs, fused, unfused);
  }
}

PagedCaseSpec spec(IndexerFormat f, int B, int N, int H, int D, int S, std::vector<int64_t> lengths, uint64_t seed) {
  PagedCaseSpec s;
  s.format = f;
  s.batch = B;
  s.next_n = N;
  s.heads = H;
  s.head_dim = D;
  s.states_per_page = S;
  s.lengths = std::move(lengths);
  s.lens_per_row = false;
  s.seed = seed;
  return s;
}

TEST(GpuFusedTopk, Fp8DecodeLengthsAroundK) {
  FusedCase c;
  c.k = 512;
  c.spec = spec(IndexerFormat::kFp8, 8, 1, 64, 128, 64, {0, 1, 511, 512, 513, 3000, 7000, 64}, 1);
  run_fused_case(c);
  c.sorted = true;
  c.spec.seed = 2;
  run_fused_case(c);
}

TEST(GpuFusedTopk, Fp8NextNAndPageSizes) {
  for (int S : {1, 32, 100, 256}) {
    FusedCase c;
    c.k = 2048;
    c.spec = spec(IndexerFormat::kFp8, 3, 4, 32, 128, S, {2049, 5000, 2}, 10 + S);
    c.sorted = S == 32;
    run_fused_case(c);
  }
}

TEST(GpuFusedTopk, Fp8HeadsAndDims) {
  FusedCase c;
  c.k = 1024;
  c.spec = spec(IndexerFormat::kFp8, 4, 2, 24, 64, 64, {1500, 900, 4000, 0}, 21);
  run_fused_case(c);
  c.spec = spec(IndexerFormat::kFp8, 4, 1, 8, 32, 32, {1500, 900, 4000, 1024}, 22);
  c.spec.lens_per_row = true;
  run_fused_case(c);
}

TEST(GpuFusedTopk, Varlen) {
  FusedCase c;
  c.k = 512;
  c.spec = spec(IndexerFormat::kFp8, 5, 4, 32, 128, 64, {6000, 100, 3000, 512, 9000}, 31);
  c.spec.varlen = true;
  run_fused_case(c);
}

// A varlen row_request outside the block table that only the device sees (host validation cannot
// read device memory): the row has no keys, so every route returns -1 for it (the logits route
// takes its row windows from the indexer's, as the streaming route does), and the other rows are
// those of the same call with valid requests.
TEST(GpuFusedTopk, VarlenRowRequestOutOfRangeOnDevice) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  FusedCase c;
  c.k = 512;
  c.spec = spec(IndexerFormat::kFp8, 5, 4, 32, 128, 64, {6000, 100, 3000, 512, 9000}, 35);
  c.spec.varlen = true;
  PagedCase pc = testutil::make_paged_case(c.spec);
  GpuInputs g;
  upload_case(pc, &g);
  if (::testing::Test::HasFatalFailure()) return;
  TopkOut base;
  {
    EnvScope scope("DSATTN_FUSED_LOGITS", "0");
    run_fused(c, pc, g, &base);
  }
  if (::testing::Test::HasFatalFailure()) return;
  std::vector<int64_t> bad;  // two rows with more than k states
  for (int64_t r = 0; r < pc.rows && bad.size() < 2; ++r) {
    if (pc.row_ctx[static_cast<size_t>(r)] > c.k) bad.push_back(r);
  }
  ASSERT_EQ(bad.size(), 2u);
  const int32_t bad_req[2] = {-1, 1 << 20};
  for (int i = 0; i < 2; ++i) {
    DSATTN_CUDA_ASSERT(cudaMemcpy(static_cast<int32_t*>(g.rr.buf.ptr) + bad[i], &bad_req[i], 4, cudaMemcpyHostToDevice));
  }
  for (int route = 0; route < 3; ++route) {  // streaming, logits route (forced), the call's switch
    SCOPED_TRACE(route == 0 ? "DSATTN_FUSED_LOGITS=0" : route == 1 ? "DSATTN_FUSED_LOGITS=force" : "logits_route");
    TopkOut o;
    if (route < 2) {
      EnvScope scope("DSATTN_FUSED_LOGITS", route == 0 ? "0" : "force");
      run_fused(c, pc, g, &o);
    } else {
      run_fused(c, pc, g, &o, true);
    }
    if (::testing::Test::HasFatalFailure()) return;
    for (int64_t r = 0; r < pc.rows; ++r) {
      const bool empty = r == bad[0] || r == bad[1];
      for (int j = 0; j < c.k; ++j) {
        const size_t i = static_cast<size_t>(r * c.k + j);
        if (empty) {
          ASSERT_EQ(o.idx[i], -1) << "row " << r << " (row_request out of range) slot " << j;
          ASSERT_EQ(o.slots[i], -1) << "row " << r << " (row_request out of range) slot " << j;
        } else {
          ASSERT_EQ(o.idx[i], base.idx[i]) << "row " << r << " slot " << j;
          ASSERT_EQ(o.slots[i], base.slots[i]) << "row " << r << " slot " << j;
          ASSERT_TRUE(o.val[i] == base.val[i] || (std::isnan(o.val[i]) && std::isnan(base.val[i])))
              << "row " << r << " slot " << j << ": " << o.val[i] << " vs " << base.val[i];
        }
      }
    }
  }
}

TEST(GpuFusedTopk, Mxfp4) {
  FusedCase c;
  c.k = 512;
  c.spec = spec(IndexerFormat::kMxfp4, 4, 2, 32, 128, 64, {3000, 700, 6000, 511}, 41);
  run_fused_case(c);
  c.spec = spec(IndexerFormat::kMxfp4, 2, 1, 16, 64, 32, {5000, 2000}, 42);
  c.sorted = true;
  run_fused_case(c);
}

TEST(GpuFusedTopk, LongSingleRequest) {
  FusedCase c;
  c.k = 2048;
  c.sorted = true;
  c.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {70000}, 51);
  run_fused_case(c);
}

// Two host threads, each on its own stream with its own outputs and workspace, call the op over
// and over on different shapes at once (one 64K request: the logits route; 12 requests of
// next_n = 2 on 32-state pages: their own route): every call succeeds, and each thread's last
// result passes the same checks as a call alone (reference and unfused path).
TEST(GpuFusedTopk, TwoHostThreads) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  FusedCase c[2];
  c[0].k = 2048;
  c[0].spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {65536}, 141);
  c[1].k = 512;
  c[1].spec = spec(IndexerFormat::kFp8, 12, 2, 32, 128, 32,
                   {9000, 300, 4000, 12000, 513, 2, 7000, 600, 2048, 5000, 1, 8000}, 142);
  PagedCase pc[2] = {testutil::make_paged_case(c[0].spec), testutil::make_paged_case(c[1].spec)};
  GpuInputs g[2];
  TopkOut unfused[2];
  FusedCall f[2];
  cudaStream_t st[2] = {nullptr, nullptr};
  for (int t = 0; t < 2; ++t) {
    DSATTN_CUDA_ASSERT(cudaStreamCreateWithFlags(&st[t], cudaStreamNonBlocking));
    upload_case(pc[t], &g[t]);
    if (::testing::Test::HasFatalFailure()) return;
    run_unfused(c[t], pc[t], g[t], &unfused[t]);
    if (::testing::Test::HasFatalFailure()) return;
    c[t].stream = st[t];
    setup_fused(c[t], pc[t], g[t], &f[t], false);
    if (::testing::Test::HasFatalFailure()) return;
  }
  std::string err[2];
  auto body = [&](int t) {
    if (cudaSetDevice(0) != cudaSuccess) return;
    for (int i = 0; i < 200 && err[t].empty(); ++i) {
      const Status s = paged_mqa_topk(f[t].p, f[t].ex);
      if (!s.ok()) err[t] = "call " + std::to_string(i) + ": " + s.to_string();
    }
    if (cudaStreamSynchronize(st[t]) != cudaSuccess) err[t] += " cudaStreamSynchronize failed";
  };
  std::thread a(body, 0), b(body, 1);
  a.join();
  b.join();
  for (int t = 0; t < 2; ++t) {
    SCOPED_TRACE("thread " + std::to_string(t));
    EXPECT_EQ(err[t], "");
    TopkOut fused;
    download_fused(f[t], &fused);
    check_fused(c[t], pc[t], testutil::ref_rows(pc[t]), fused, unfused[t]);
    cudaStreamDestroy(st[t]);
  }
}

TEST(GpuFusedTopk, GraphReplay) {
  FusedCase c;
  c.k = 512;
  c.graph = true;
  c.spec = spec(IndexerFormat::kFp8, 4, 2, 32, 128, 64, {4000, 300, 2500, 9000}, 61);
  run_fused_case(c);
}

// Indices only (no scores, no slot ids): the merges write the winners straight to the output.
// One long row (split merge, exact level-2 threshold) and 80 rows (one merge CTA per row, its own
// selection), against the reference and the unfused path.
TEST(GpuFusedTopk, IndicesOnly) {
  FusedCase c;
  c.values = false;
  c.slots = false;
  c.k = 2048;
  c.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {70000}, 101);
  run_fused_case(c);
  std::vector<int64_t> lens;
  for (int b = 0; b < 80; ++b) lens.push_back(b % 4 == 3 ? 2000 : 6000 + 997 * (b % 7));
  c.spec = spec(IndexerFormat::kFp8, 80, 1, 16, 128, 64, lens, 102);
  run_fused_case(c);
}

// Every score ties (zero keys): the first k states win, in order. One row spread over hundreds of
// pieces (split merge: the k-th key's 22-bit bin holds every state, so level 2 cannot take its
// exact-threshold path and selects), and a few rows, sorted and unsorted.
TEST(GpuFusedTopk, AllScoresTie) {
  FusedCase c;
  c.zero_keys = true;
  c.k = 2048;
  c.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {9000}, 111);
  run_fused_case(c);
  c.sorted = true;
  run_fused_case(c);
  c.sorted = false;
  c.values = false;
  c.slots = false;
  c.k = 512;
  c.spec = spec(IndexerFormat::kFp8, 3, 2, 32, 128, 64, {5000, 300, 1200}, 112);
  run_fused_case(c);
}

// The sm_120 / sm_121 configuration (99 KiB of shared memory per block) on this GPU: smaller
// indexer tiles / fewer stages and a smaller merge buffer (more merge compactions).
TEST(GpuFusedTopk, SmemBudget99KiB) {
  FusedCase c;
  c.smem_budget = 101376;
  c.k = 2048;
  c.spec = spec(IndexerFormat::kFp8, 3, 2, 64, 128, 64, {40000, 2100, 9000}, 71);
  run_fused_case(c);
  c.k = 512;
  c.sorted = true;
  c.spec = spec(IndexerFormat::kMxfp4, 2, 1, 32, 128, 64, {30000, 700}, 72);
  run_fused_case(c);
  c.k = 2048;
  c.sorted = false;
  c.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {70000}, 73);  // one row: split merge
  run_fused_case(c);
}

// A caller-supplied schedule (schedule_metadata) with partition counts other than the one the op
// would pick: few partitions (long pieces, many collector compactions), the SM count, and many
// (short pieces; one row spread over hundreds of slots, split merge). On Hopper the op plans its
// own split where its own plan runs the warp-specialized kernel (plan_call), so these run with
// DSATTN_FUSED_SCHEDULE=caller, which keeps the caller's; then once more without it (the schedule
// checked, not used).
TEST(GpuFusedTopk, CallerSchedule) {
  const int sms = cuda_available() ? cuda_num_sms() : 1;
  for (int parts : {3, sms, 3 * sms + 1, -sms}) {
    EnvScope keep("DSATTN_FUSED_SCHEDULE", parts > 0 ? "caller" : nullptr);
    if (parts < 0) parts = -parts;
    FusedCase c;
    c.schedule_parts = parts;
    c.k = 1024;
    c.spec = spec(IndexerFormat::kFp8, 4, 2, 32, 128, 64, {20000, 1000, 7000, 3}, 80 + parts);
    run_fused_case(c);
    c.k = 2048;
    c.sorted = true;
    c.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {66000}, 90 + parts);
    run_fused_case(c);
    c.k = 512;
    c.sorted = false;
    c.spec = spec(IndexerFormat::kFp8, 5, 4, 32, 128, 64, {6000, 100, 3000, 512, 9000}, 95 + parts);
    c.spec.varlen = true;
    run_fused_case(c);
  }
}

// A caller schedule of the wrong size (one word short: not [schedule_metadata_size(P)]) is refused
// by both indexer ops, with a message that names the op and the argument (check_caller_schedule,
// shared by both), on the default path and under DSATTN_FUSED_SCHEDULE=caller. (The workspace
// queries return 0 for a call that cannot be planned; the call itself says why.)
TEST(GpuFusedTopk, CallerScheduleWrongSize) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  FusedCase c;
  c.k = 512;
  c.schedule_parts = cuda_num_sms();
  c.spec = spec(IndexerFormat::kFp8, 4, 1, 32, 128, 64, {6000, 100, 3000, 9000}, 78);
  PagedCase pc = testutil::make_paged_case(c.spec);
  GpuInputs g;
  upload_case(pc, &g);
  if (::testing::Test::HasFatalFailure()) return;
  FusedCall f;
  setup_fused(c, pc, g, &f, false);
  if (::testing::Test::HasFatalFailure()) return;
  const int64_t ms = schedule_metadata_size(c.schedule_parts);
  const TensorView bad = make_tensor(f.sched.ptr, DType::kI32, {ms - 1}, Device::kCuda);
  auto refused = [](const Status& s, const char* op) {
    EXPECT_EQ(s.code, Code::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message.find(op), std::string::npos) << s.message;
    EXPECT_NE(s.message.find("schedule shape expected [schedule_metadata_size(num_sms)]"), std::string::npos)
        << s.message;
  };
  for (const char* keep : {static_cast<const char*>(nullptr), "caller"}) {
    SCOPED_TRACE(keep ? "DSATTN_FUSED_SCHEDULE=caller" : "default");
    EnvScope env("DSATTN_FUSED_SCHEDULE", keep);
    PagedMqaTopkParams p = f.p;
    p.schedule = bad;
    refused(paged_mqa_topk(p, f.ex), "paged_mqa_topk");
  }
  const int64_t W = std::max<int64_t>(pc.max_context, 1);
  DeviceBuffer logits(static_cast<size_t>(pc.rows * W) * 4);
  PagedMqaLogitsParams lp;
  static_cast<PagedIndexerArgs&>(lp) = g.args;
  lp.logits = make_tensor(logits.ptr, DType::kF32, {pc.rows, W}, Device::kCuda);
  lp.schedule = bad;
  Exec ex;
  ex.backend = Backend::kCuda;
  refused(paged_mqa_logits(lp, ex), "paged_mqa_logits");
  DSATTN_CUDA_ASSERT(cudaDeviceSynchronize());
}

// Tens of rows of a dozen or so pieces each (the split merge with a few level-1 CTAs per row and
// the row histograms), N = 1 and N = 2, against the reference and the unfused path.
TEST(GpuFusedTopk, TensOfRows) {
  std::vector<int64_t> lens;
  for (int b = 0; b < 24; ++b) lens.push_back(b % 6 == 5 ? 300 : 2000 + 1499 * (b % 7));
  FusedCase c;
  c.k = 512;
  c.spec = spec(IndexerFormat::kFp8, 24, 1, 16, 128, 64, lens, 131);
  run_fused_case(c);
  c.sorted = true;
  c.spec = spec(IndexerFormat::kFp8, 24, 2, 16, 128, 32, lens, 132);
  run_fused_case(c);
}

// Tens of rows of up to 40K states on the warp-specialized kernel at 64 heads (and 32: the pure
// dense kernel): dense pieces, ~18 per row, and rows that fit the merge's shared memory, so one
// merge CTA per row loads its keys in one pass (merge_dense_row) instead of the split merge;
// empty, short (<= k) and long rows, with scores + slot ids, indices only (winners straight to
// the output) and sorted.
TEST(GpuFusedTopk, DenseRows) {
  std::vector<int64_t> lens;
  for (int b = 0; b < 24; ++b) {
    const int64_t l[12] = {40000, 0, 1, 1023, 1024, 1025, 3000, 12000, 25000, 33000, 64, 700};
    lens.push_back(l[(b * 5) % 12]);
  }
  FusedCase c;
  c.k = 1024;
  c.spec = spec(IndexerFormat::kFp8, 24, 1, 64, 128, 64, lens, 141);
  run_fused_case(c);
  c.values = false;
  c.slots = false;
  c.spec.seed = 142;
  run_fused_case(c);
  c.sorted = true;
  c.spec.seed = 143;
  run_fused_case(c);
  // 32 heads: dense rows on the pure dense kernel.
  c.sorted = false;
  c.values = true;
  c.spec = spec(IndexerFormat::kFp8, 24, 1, 32, 128, 64, lens, 144);
  run_fused_case(c);
}

// 80 rows of 0..6000 states: with k = 512 every piece fits its buffer (3072 entries, ~1200 states
// per piece); empty, short (<= k) and long rows.
std::vector<int64_t> short_piece_lens() {
  std::vector<int64_t> lens;
  for (int b = 0; b < 80; ++b) {
    const int64_t l[8] = {6000, 0, 513, 511, 4097, 2500, 1, 5200};
    lens.push_back(l[(b * 3) % 8]);
  }
  return lens;
}

// Every piece fits its buffer (short_piece_lens, k = 512), so on Hopper the scoring kernel is the
// pure dense one (no staged scores, 256-state stages) at 32 heads as at 64, and one merge CTA per
// row loads the dense keys (no split merge, no row histogram).
TEST(GpuFusedTopk, PureDensePiecesAt32And64Heads) {
  const std::vector<int64_t> lens = short_piece_lens();
  FusedCase c;
  c.k = 512;
  for (int h : {32, 64}) {
    c.spec = spec(IndexerFormat::kFp8, 80, 1, h, 128, 64, lens, 150 + h);
    run_fused_case(c);
  }
}

// 140 rows of 3000..4688 states, every fifth of 63: with k = 100, pieces much longer than the
// collector's buffers (PiecesCompactWhileScoring, PureKernelPositionalAppends).
std::vector<int64_t> long_piece_lens() {
  std::vector<int64_t> lens;
  for (int b = 0; b < 140; ++b) lens.push_back(b % 5 == 4 ? 63 : 3000 + 211 * (b % 9));
  return lens;
}

// Pieces much longer than the collector's buffer on the scoring kernel the op picks (Hopper: the
// warp-specialized one; k = 64: 576 entries, ~1100 states per piece), so every piece compacts while
// scoring, with and without the row histograms (6 rows: split merge; 140 rows: one merge CTA per
// row), against the reference and the unfused path. The other cases' pieces are too short to.
TEST(GpuFusedTopk, PiecesCompactWhileScoring) {
  FusedCase c;
  c.k = 64;
  c.spec = spec(IndexerFormat::kFp8, 6, 1, 32, 128, 64, {120000, 90000, 65, 64, 70000, 100000}, 121);
  run_fused_case(c);
  const std::vector<int64_t> lens = long_piece_lens();
  c.k = 100;
  c.sorted = true;
  c.spec = spec(IndexerFormat::kFp8, 140, 1, 64, 128, 32, lens, 122);
  run_fused_case(c);
}

// The sm_100 family's kernel choice, on any GPU that has the kernels: there (and on sm_90 under
// DSATTN_INDEXER_KERNEL=portable, which this test sets) paged_mqa_logits scores FP8 calls with
// D = 128 and at least 768 block-table states per SM on the warp-specialized kernel with mma.sync
// consumers (logits_mma_ws_rule). The fused op scores them on the same kernel with its top-k
// epilogue, so every route returns the unfused path's indices and bitwise its scores. On the
// portable kernel, which it took before, its scores differed from the unfused ones in the last bits
// (H100, 17 of the 37 GpuFusedTopk tests failed under the variable, every one on scores alone).
// The cases: pieces that compact while scoring (140 rows), few long rows with the split merge's row
// histograms, next_n = 2, 16 and 32 heads, the chunked route's chunks (run_fused_case: each chunk
// on the kernel the whole call takes), and a caller schedule (checked, then the op's own split).
// Whether the indexer's size rule for the mma.sync consumers' kernel (logits_mma_ws_rule) is in
// force: the sm_100 family's default, or DSATTN_INDEXER_KERNEL=portable on any GPU.
bool sm100_kernel_rule() {
  if (const char* k = std::getenv("DSATTN_INDEXER_KERNEL")) return std::string(k) == "portable";
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
  return major == 10;
}

// Whether Hopper's kernels score paged_mqa_topk's streaming route here: hopper() (sm_90 with sm_90a
// code), and no DSATTN_INDEXER_KERNEL knob picking another kernel.
bool hopper_kernels_score() { return test::hopper() && std::getenv("DSATTN_INDEXER_KERNEL") == nullptr; }

TEST(GpuFusedTopk, Sm100KernelChoice) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  EnvScope kern("DSATTN_INDEXER_KERNEL", "portable");
  const int sms = cuda_num_sms();
  FusedCase c;
  c.k = 100;
  c.sorted = true;
  c.spec = spec(IndexerFormat::kFp8, 140, 1, 64, 128, 32, long_piece_lens(), 181);
  run_fused_case(c);
  c.k = 64;
  c.sorted = false;
  c.spec = spec(IndexerFormat::kFp8, 6, 1, 32, 128, 64, {120000, 90000, 65, 64, 70000, 100000}, 182);
  run_fused_case(c);
  c.k = 512;
  c.spec = spec(IndexerFormat::kFp8, 4, 2, 64, 128, 64, {40000, 30000, 5000, 60000}, 183);
  run_fused_case(c);
  c.k = 256;
  c.spec = spec(IndexerFormat::kFp8, 16, 1, 16, 128, 64, std::vector<int64_t>(16, 9000), 184);
  run_fused_case(c);
  c.k = 1024;
  c.schedule_parts = sms;
  c.spec = spec(IndexerFormat::kFp8, 8, 1, 64, 128, 64, {30000, 2000, 17000, 30000, 1, 25000, 9000, 29000}, 185);
  run_fused_case(c);
}

// Which route the plan takes (paged_mqa_topk_route): by default the logits route only where the
// streaming route would write at least as many bytes as the score rows (no piece longer than twice
// its buffer: 80 rows, k = 512; on Hopper also 140 rows, k = 100, in pieces of ~900 states against
// buffers of 612 entries), the streaming route where pieces are longer (140 rows, k = 100, ~1700
// states), the resident route for one request on Hopper; on the portable tile kernel the logits
// route wherever it fits; the environment and the call's switches as documented. The other tests
// check that every route gives the same results.
TEST(GpuFusedTopk, RouteByPieceLength) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto route_of = [](const FusedCase& c, bool logits_route) {
    PagedCase pc = testutil::make_paged_case(c.spec);
    GpuInputs g;
    upload_case(pc, &g);
    return fused_route(c, pc, g, logits_route);
  };
  FusedCase shortc;
  shortc.k = 512;
  shortc.spec = spec(IndexerFormat::kFp8, 80, 1, 64, 128, 64, short_piece_lens(), 150);
  FusedCase longc;
  longc.k = 100;
  longc.spec = spec(IndexerFormat::kFp8, 140, 1, 64, 128, 32, long_piece_lens(), 122);
  const bool hopper_kernels = hopper_kernels_score();
  EXPECT_EQ(route_of(shortc, false), "logits");
  if (hopper_kernels) {
    EXPECT_EQ(route_of(longc, false), "streaming");
  }
  {
    // Where the streaming route would score on the portable tile kernel (what sm_80 / sm_86 /
    // sm_89 / sm_120 run; here forced on any GPU), the logits route takes every call whose rows
    // fit the streaming plan's workspace, long pieces and the top-k's filter plan (one row of 256K
    // states) included; wider tables still stream unless the call asks for the chunked route. So
    // the default is what logits_route = true takes, the chunked route aside (longc's 140 rows
    // outgrow the small streaming workspace of k = 100 on an H100: chunked there).
    EnvScope tile("DSATTN_INDEXER_KERNEL", "warp-local");
    const std::string asked = route_of(longc, true);
    EXPECT_EQ(route_of(longc, false), asked == "chunked" ? std::string("streaming") : asked);
    FusedCase one_long;
    one_long.k = 2048;
    one_long.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {262144}, 165);
    EXPECT_EQ(route_of(one_long, false), "logits");
    EnvScope streaming("DSATTN_FUSED_LOGITS", "0");
    EXPECT_EQ(route_of(longc, false), "streaming");
    EXPECT_EQ(route_of(one_long, false), "streaming");
  }
  {
    EnvScope scope("DSATTN_FUSED_LOGITS", "0");
    EXPECT_EQ(route_of(shortc, false), "streaming");
    EXPECT_EQ(route_of(shortc, true), "streaming");
  }
  {
    EnvScope scope("DSATTN_FUSED_LOGITS", "force");
    EXPECT_EQ(route_of(longc, false), "logits");
  }
  {
    // 128 requests on a block table of 128K states (short contexts; the plan reads the table's
    // width): their score rows (64 MB) outgrow the streaming plan's workspace, so the call's switch
    // takes the chunked logits route, in that workspace; by default it streams.
    FusedCase wide;
    wide.k = 2048;
    wide.spec = spec(IndexerFormat::kFp8, 128, 1, 64, 128, 64, std::vector<int64_t>(128, 64), 163);
    wide.spec.extra_table_cols = 2048;
    wide.resident_route = false;
    EXPECT_EQ(route_of(wide, false), "streaming");
    EXPECT_EQ(route_of(wide, true), "chunked");
    {
      EnvScope tile("DSATTN_INDEXER_KERNEL", "warp-local");
      EXPECT_EQ(route_of(wide, false), "streaming");
    }
    EnvScope scope("DSATTN_FUSED_LOGITS", "0");
    EXPECT_EQ(route_of(wide, true), "streaming");
  }
  {
    EnvScope chunk("DSATTN_FUSED_CHUNK", "1");
    EXPECT_EQ(route_of(longc, false), "chunked");
  }
  if (hopper_kernels) {
    // The resident route (sm_90a) keeps one request on a block table of more than 128K states;
    // off, its pieces are short. Up to 128K states the logits route takes it (N = 1 and N = 2),
    // unless DSATTN_FUSED_RESIDENT=force or DSATTN_FUSED_LOGITS=0.
    FusedCase one;
    one.k = 2048;
    one.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {140000}, 160);
    EXPECT_EQ(route_of(one, false), "resident");
    EXPECT_EQ(route_of(one, true), "resident");
    one.resident_route = false;
    EXPECT_EQ(route_of(one, false), "logits");
    FusedCase mid = one;  // 64K..128K states: the logits route since 2026-12-06
    mid.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {70000}, 162);
    mid.resident_route = true;
    EXPECT_EQ(route_of(mid, false), "logits");
    {
      EnvScope streaming("DSATTN_FUSED_LOGITS", "0");
      EXPECT_EQ(route_of(mid, false), "resident");
    }
    // Between one and two buffers per piece: the warp-specialized kernel's three partitions per SM
    // cut 140 requests of 0.3 x SMs units (64 states each) into pieces of 15 units (960 states on
    // 132 SMs), against buffers of 612 entries at k = 100. Streaming would write >= 612 x 8 bytes
    // per piece, more than its scores' 960 x 4: the logits route, unless DSATTN_FUSED_LOGITS=0.
    {
      FusedCase between;
      between.k = 100;
      const int64_t width = 64 * ((3 * cuda_num_sms() + 9) / 10);
      between.spec = spec(IndexerFormat::kFp8, 140, 1, 64, 128, 32, std::vector<int64_t>(140, width), 164);
      EXPECT_EQ(route_of(between, false), "logits");
      EnvScope streaming("DSATTN_FUSED_LOGITS", "0");
      EXPECT_EQ(route_of(between, false), "streaming");
    }
    // A caller schedule (one partition per SM) leaves the route as it is without one; with
    // DSATTN_FUSED_SCHEDULE=caller the call keeps it, on the tile kernel: pieces too long for the
    // logits route by default (140 rows, k = 100: ~5000 states per piece), and no resident route.
    FusedCase sched = shortc;
    sched.schedule_parts = cuda_num_sms();
    EXPECT_EQ(route_of(sched, false), "logits");
    FusedCase sched_long = longc;
    sched_long.schedule_parts = cuda_num_sms();
    EXPECT_EQ(route_of(sched_long, false), "streaming");
    FusedCase sched_one = one;
    sched_one.resident_route = true;
    sched_one.schedule_parts = cuda_num_sms();
    EXPECT_EQ(route_of(sched_one, false), "resident");
    {
      EnvScope keep("DSATTN_FUSED_SCHEDULE", "caller");
      EXPECT_EQ(route_of(sched_long, false), "streaming");
      EXPECT_NE(route_of(sched_one, false), "resident");
    }
    for (int n : {1, 2}) {
      FusedCase narrow;
      narrow.k = 2048;
      narrow.spec = spec(IndexerFormat::kFp8, 1, n, 64, 128, 64, {20000}, 161);
      EXPECT_EQ(route_of(narrow, false), "logits") << n;
      EXPECT_EQ(route_of(narrow, true), "logits") << n;
      {
        EnvScope force("DSATTN_FUSED_RESIDENT", "force");
        EXPECT_EQ(route_of(narrow, false), "resident") << n;
      }
      {
        EnvScope streaming("DSATTN_FUSED_LOGITS", "0");
        EXPECT_EQ(route_of(narrow, false), "resident") << n;
      }
    }
  }
}

// The pure dense scoring kernel (no staged scores) forced onto pieces much longer than their
// buffers (k = 100: 612 entries, ~1500 states per piece), as when context lengths beyond the block
// table move the partition boundaries: each piece overflows, goes on with positional appends and
// compacts while scoring; at 64 and 32 heads, against the reference and the unfused path.
TEST(GpuFusedTopk, PureKernelPositionalAppends) {
  const std::vector<int64_t> lens = long_piece_lens();
  EnvScope force("DSATTN_FUSED_PURE", "force");
  FusedCase c;
  c.k = 100;
  for (int h : {64, 32}) {
    c.spec = spec(IndexerFormat::kFp8, 140, 1, h, 128, 32, lens, 160 + h);
    run_fused_case(c);
  }
}

// 8..16 rows spread over many pieces take the cluster merge on devices with cluster launch (one
// cluster of 8 CTAs per row), fewer with DSATTN_FUSED_CLUSTER=1: 16 rows, lengths around k, empty
// and one-state rows, N = 2, scores + slot ids, sorted, indices only; pieces that compact (stored
// indices) and the pure kernel's positional appends (forced, k = 100). It asserts nothing
// about the plan: on devices without cluster launch these run the split merge.
TEST(GpuFusedTopk, ClusterMergeRows) {
  FusedCase c;
  c.k = 2048;
  std::vector<int64_t> lens = {65536, 0, 1, 2047, 2048, 2049, 30000, 8191, 40000, 5, 64000, 2500, 17000, 9000, 100, 33333};
  c.spec = spec(IndexerFormat::kFp8, 16, 1, 64, 128, 64, lens, 171);
  run_fused_case(c);
  c.sorted = true;
  c.spec = spec(IndexerFormat::kFp8, 8, 2, 32, 128, 32, {40000, 2048, 0, 65000, 3000, 2049, 12000, 7}, 172);
  run_fused_case(c);
  EnvScope any("DSATTN_FUSED_CLUSTER", "1");
  c.sorted = false;
  c.values = false;
  c.slots = false;
  c.k = 512;
  c.spec = spec(IndexerFormat::kFp8, 3, 1, 32, 128, 64, {60000, 513, 20000}, 173);
  run_fused_case(c);
  c.k = 2048;
  c.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {70000}, 175);
  run_fused_case(c);
  {
    EnvScope force("DSATTN_FUSED_PURE", "force");
    c.values = true;
    c.slots = true;
    c.k = 100;
    c.spec = spec(IndexerFormat::kFp8, 4, 1, 32, 128, 64, {50000, 300, 20000, 101}, 174);
    run_fused_case(c);
  }
}

// The split merge (two launches, row histograms), which few long rows take below 8 rows and on
// devices without cluster launch, forced with DSATTN_FUSED_CLUSTER=0: one row, sorted; every
// score tied; a few rows with N = 2; pieces that compact; 8 rows (the cluster merge's by default).
TEST(GpuFusedTopk, SplitMergeWithoutClusters) {
  EnvScope off("DSATTN_FUSED_CLUSTER", "0");
  FusedCase c;
  c.k = 2048;
  c.sorted = true;
  c.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {70000}, 181);
  run_fused_case(c);
  c.sorted = false;
  c.zero_keys = true;
  c.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {9000}, 182);
  run_fused_case(c);
  c.zero_keys = false;
  c.k = 512;
  c.spec = spec(IndexerFormat::kFp8, 3, 2, 32, 128, 64, {40000, 2100, 9000}, 183);
  run_fused_case(c);
  c.k = 64;
  c.spec = spec(IndexerFormat::kFp8, 6, 1, 32, 128, 64, {120000, 90000, 65, 64, 70000, 100000}, 184);
  run_fused_case(c);
  c.k = 2048;
  c.spec = spec(IndexerFormat::kFp8, 8, 1, 64, 128, 64, {65536, 30000, 2049, 0, 50000, 8000, 65000, 1}, 185);
  run_fused_case(c);
}

// By default, rows of at most k states are not scored where their result cannot depend on the
// scores (unsorted, no values: SPEC §3.3 gives them 0..len-1), on the streaming and logits routes
// (short_row_skip in fused_topk_launch.cu); with DSATTN_FUSED_SKIP_SHORT=0 they are. Both against
// the reference and the unfused path, on every route run_fused_case takes: rows around k among long
// ones; N = 2, where a request of k + 1 states has one skipped row of k beside one of k + 1 (the
// group is scored for the longer row only); few rows (cluster and split merges, the skipped row
// returned by level 2 without level 1's outputs); indices only (the merges' direct writes); varlen
// with a caller schedule kept (its units still count the skipped rows); the sm_120 budget.
TEST(GpuFusedTopk, ShortRowsLeftUnscored) {
  for (const char* skip : {static_cast<const char*>(nullptr), "0"}) {
    SCOPED_TRACE(skip ? "DSATTN_FUSED_SKIP_SHORT=0" : "default (short rows unscored)");
    EnvScope env("DSATTN_FUSED_SKIP_SHORT", skip);
    FusedCase c;
    c.values = false;
    c.k = 512;
    std::vector<int64_t> lens;
    for (int b = 0; b < 40; ++b) {
      const int64_t l[10] = {0, 1, 511, 512, 513, 4000, 100, 12000, 512, 2};
      lens.push_back(l[(b * 7) % 10]);
    }
    c.spec = spec(IndexerFormat::kFp8, 40, 1, 64, 128, 64, lens, 201);
    run_fused_case(c);
    c.spec = spec(IndexerFormat::kFp8, 6, 2, 32, 128, 64, {513, 512, 514, 9000, 1, 3000}, 202);
    run_fused_case(c);
    for (const char* cluster : {static_cast<const char*>(nullptr), "0"}) {
      SCOPED_TRACE(cluster ? "DSATTN_FUSED_CLUSTER=0" : "cluster merge where it applies");
      EnvScope cl("DSATTN_FUSED_CLUSTER", cluster);
      c.k = 2048;
      c.spec = spec(IndexerFormat::kFp8, 3, 1, 64, 128, 64, {40000, 2048, 100}, 203);
      run_fused_case(c);
      c.spec = spec(IndexerFormat::kFp8, 8, 1, 64, 128, 64, {65536, 2047, 2049, 0, 50000, 8000, 2048, 1}, 204);
      run_fused_case(c);
    }
    c.slots = false;
    c.k = 1024;
    c.spec = spec(IndexerFormat::kFp8, 24, 1, 64, 128, 64, lens, 205);
    run_fused_case(c);
    c.slots = true;
    {
      EnvScope keep("DSATTN_FUSED_SCHEDULE", "caller");
      c.schedule_parts = cuda_available() ? cuda_num_sms() : 1;
      c.k = 512;
      c.spec = spec(IndexerFormat::kFp8, 5, 4, 32, 128, 64, {6000, 100, 3000, 512, 9000}, 206);
      c.spec.varlen = true;
      run_fused_case(c);
      c.schedule_parts = 0;
    }
    c.smem_budget = 101376;
    c.spec = spec(IndexerFormat::kMxfp4, 4, 2, 32, 128, 64, {30000, 513, 700, 2}, 207);
    run_fused_case(c);
  }
}

// The streaming route on the portable tile kernel (what sm_80 / sm_86 / sm_89 / sm_120 run; forced
// here by DSATTN_INDEXER_KERNEL=warp-local; run_fused_case takes every route, streaming included,
// and checks each against the reference and the unfused path) scores on the
// warp-local pipeline with staged tiles (TopkStagedEpilogue), appended in runs of consecutive
// tiles (DSATTN_FUSED_STAGED=tile: one at a time), or with DSATTN_FUSED_STAGED=0 on the CTA-wide
// pipeline. All three, over what changes a flush:
// N = 1 (8 tiles a flush, pieces that compact, and a rising ramp that appends every state), N = 2,
// 4 and 8 (fewer tiles a flush, down to one), runs of 1 to 8 tiles (k = 100 to 2048), both formats,
// small head dims and pages, sorted output with values, sm_120's 99 KiB budget, varlen rows under
// a caller schedule.
TEST(GpuFusedTopk, TileKernelStagedStreaming) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  EnvScope tile("DSATTN_INDEXER_KERNEL", "warp-local");
  for (const char* staged : {static_cast<const char*>(nullptr), "tile", "0"}) {
    SCOPED_TRACE(staged == nullptr ? "staged warp-local pipeline"
                 : std::string(staged) == "tile" ? "DSATTN_FUSED_STAGED=tile (staged tiles one at a time)"
                                                  : "DSATTN_FUSED_STAGED=0 (CTA-wide pipeline)");
    EnvScope st("DSATTN_FUSED_STAGED", staged);
    FusedCase c;
    c.k = 2048;
    c.spec = spec(IndexerFormat::kFp8, 3, 1, 64, 128, 64, {70000, 30000, 2100}, 231);
    run_fused_case(c);
    c.spec.key_ramp = 20.0f;
    run_fused_case(c);
    c.k = 512;
    c.sorted = true;
    c.spec = spec(IndexerFormat::kFp8, 5, 2, 64, 128, 64, {20000, 600, 9000, 513, 40000}, 232);
    run_fused_case(c);
    c.sorted = false;
    c.spec = spec(IndexerFormat::kFp8, 4, 4, 32, 64, 32, {12000, 3000, 700, 25000}, 233);
    run_fused_case(c);
    c.spec = spec(IndexerFormat::kMxfp4, 3, 8, 64, 128, 64, {9000, 4000, 15000}, 234);
    run_fused_case(c);
    c.k = 100;
    c.values = false;
    c.spec = spec(IndexerFormat::kFp8, 6, 1, 64, 32, 16, {5000, 100, 30000, 2, 8000, 12000}, 235);
    run_fused_case(c);
    c.values = true;
    c.smem_budget = 101376;
    c.k = 1024;
    c.spec = spec(IndexerFormat::kFp8, 8, 1, 64, 128, 64, {40000, 1, 20000, 1025, 60000, 3000, 1024, 9000}, 236);
    run_fused_case(c);
    c.spec = spec(IndexerFormat::kMxfp4, 4, 2, 32, 128, 64, {30000, 513, 7000, 2}, 237);
    run_fused_case(c);
    c.smem_budget = 0;
    {
      EnvScope keep("DSATTN_FUSED_SCHEDULE", "caller");
      c.schedule_parts = cuda_num_sms();
      c.k = 512;
      c.spec = spec(IndexerFormat::kFp8, 5, 4, 32, 128, 64, {6000, 100, 3000, 512, 9000}, 238);
      c.spec.varlen = true;
      run_fused_case(c);
      c.schedule_parts = 0;
    }
  }
  // The staged plan holds its staging slots in the workspace, beside what the CTA-wide plan needs
  // (streaming forced: by default the tile kernel takes the logits route wherever it fits).
  EnvScope streaming("DSATTN_FUSED_LOGITS", "0");
  FusedCase c;
  c.k = 2048;
  c.spec = spec(IndexerFormat::kFp8, 3, 1, 64, 128, 64, {70000, 30000, 2100}, 231);
  PagedCase pc = testutil::make_paged_case(c.spec);
  GpuInputs g;
  upload_case(pc, &g);
  size_t bytes[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    EnvScope st("DSATTN_FUSED_STAGED", i == 0 ? nullptr : "0");
    FusedCall f;
    setup_fused(c, pc, g, &f, false);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    EXPECT_EQ(fused_route(c, pc, g, false), "streaming");
    ASSERT_TRUE(paged_mqa_topk_workspace(f.p, f.ex, &bytes[i]).ok());
  }
  EXPECT_GT(bytes[0], bytes[1]) << "the staged plan's workspace should add its staging slots";
}

// The k-th key's bin shared by keys of which only some win: every state's key repeats with period
// 7000, so each score comes in groups of 10 (tied, the smaller indices win), and k = 2048 needs 8
// of the k-th group (2040 needs it whole). Every radix route then needs its last digit: the split
// merge's level 2 selects over the keys at or above the k-th key's 22-bit bin, the cluster merge
// and the resident select take their third round. run_fused_case compares each route's indices
// with the unfused path's.
TEST(GpuFusedTopk, PartialTieAtKthKey) {
  FusedCase c;
  c.k = 2048;
  c.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {70000}, 191);
  c.spec.key_period = 7000;
  run_fused_case(c);
  c.k = 2040;
  run_fused_case(c);
  {
    EnvScope off("DSATTN_FUSED_CLUSTER", "0");  // the split merge for the few-row case below too
    c.k = 2048;
    run_fused_case(c);
    c.k = 1000;
    c.spec = spec(IndexerFormat::kFp8, 3, 2, 32, 128, 32, {40000, 12000, 3001}, 192);
    c.spec.key_period = 3000;  // groups of 14 / 4 / 1-2
    run_fused_case(c);
  }
  c.spec.key_period = 1500;
  run_fused_case(c);
}

// Scores that rise (or fall) along the context: the row's best keys crowd into the last (first)
// pieces, so the split merge's level-1 CTA for that share holds more than k candidates and passes
// up to 2k of them on (keep_all) while the others hold few. Split merge forced for one and three
// rows (N = 2), k = 2048 and 512; the default routes on the same inputs.
TEST(GpuFusedTopk, ScoresRisingOrFallingAlongTheContext) {
  FusedCase c;
  for (float ramp : {20.0f, -0.95f}) {
    SCOPED_TRACE(ramp);
    c.k = 2048;
    c.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {70000}, 195);
    c.spec.key_ramp = ramp;
    run_fused_case(c);
    EnvScope off("DSATTN_FUSED_CLUSTER", "0");
    run_fused_case(c);
    c.k = 512;
    c.spec = spec(IndexerFormat::kFp8, 3, 2, 32, 128, 32, {40000, 12000, 3001}, 196);
    c.spec.key_ramp = ramp;
    run_fused_case(c);
  }
}

// One request on Hopper takes the resident route (by default for N = 1; forced here for any N):
// the scores stay in the scoring kernel's shared memory, grid-wide radix select. run_fused_case
// compares it with the streaming and logits routes and the reference. Lengths around k and an
// empty row (every key wins, then -1), one to four rows (N), 32 and 64 heads, page sizes 1 .. 256,
// one long row, k = 2048 / 512 / 1, scores + slot ids or indices only, per-row lengths; elsewhere
// (other GPUs, heads <= 16, sorted output) the same cases check whichever route runs.
TEST(GpuFusedTopk, ResidentRoute) {
  EnvScope any("DSATTN_FUSED_RESIDENT", "force");  // also for N > 1
  FusedCase c;
  c.k = 2048;
  int seed = 191;
  for (int64_t len : {int64_t(0), int64_t(1), int64_t(2047), int64_t(2048), int64_t(2049), int64_t(9000)}) {
    c.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {len}, seed++);
    run_fused_case(c);
  }
  c.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 32, {150000}, seed++);
  run_fused_case(c);
  for (int N : {2, 3, 4}) {
    c.spec = spec(IndexerFormat::kFp8, 1, N, N == 3 ? 32 : 64, 128, 64, {30000}, seed++);
    run_fused_case(c);
  }
  c.spec = spec(IndexerFormat::kFp8, 1, 2, 64, 128, 64, {2050}, seed++);  // rows of 2049 and 2050 states
  run_fused_case(c);
  c.spec = spec(IndexerFormat::kFp8, 1, 2, 32, 128, 64, {40000, 2000}, seed++);
  c.spec.lens_per_row = true;
  run_fused_case(c);
  c.k = 512;
  for (int S : {1, 2, 48, 100, 256}) {
    c.spec = spec(IndexerFormat::kFp8, 1, 1, 32, 128, S, {20000}, seed++);
    run_fused_case(c);
  }
  c.values = false;
  c.slots = false;
  c.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {65536}, seed++);
  run_fused_case(c);
  c.k = 1;
  c.values = true;
  c.slots = true;
  c.spec = spec(IndexerFormat::kFp8, 1, 2, 64, 128, 64, {5000}, seed++);
  run_fused_case(c);
}

// Several requests on the resident route (forced: by default it takes up to six): groups
// shared by many CTAs, groups inside one CTA (selected in its shared memory alone), empty
// requests (all -1, written by CTA g % grid), lengths around k, N = 2 and varlen rows, 32 and 64
// heads, indices only, and ties spread over the CTAs of several requests at once.
TEST(GpuFusedTopk, ResidentRouteManyRequests) {
  EnvScope any("DSATTN_FUSED_RESIDENT", "force");
  FusedCase c;
  c.k = 512;
  int seed = 231;
  c.spec = spec(IndexerFormat::kFp8, 8, 1, 64, 128, 64, {0, 1, 511, 512, 513, 3000, 7000, 64}, seed++);
  run_fused_case(c);
  c.k = 2048;
  c.spec = spec(IndexerFormat::kFp8, 4, 1, 64, 128, 64, {65536, 30000, 2049, 50000}, seed++);
  run_fused_case(c);
  c.spec = spec(IndexerFormat::kFp8, 3, 2, 64, 128, 32, {20000, 2049, 9000}, seed++);
  run_fused_case(c);
  std::vector<int64_t> lens;
  for (int b = 0; b < 40; ++b) lens.push_back(b % 9 == 4 ? 0 : (b % 5 == 2 ? 700 : 1500 + 977 * (b % 11)));
  c.k = 1024;
  c.spec = spec(IndexerFormat::kFp8, 40, 1, 32, 128, 64, lens, seed++);
  run_fused_case(c);
  c.spec = spec(IndexerFormat::kFp8, 5, 4, 32, 128, 64, {6000, 100, 3000, 512, 9000}, seed++);
  c.spec.varlen = true;
  run_fused_case(c);
  c.values = false;
  c.slots = false;
  c.spec = spec(IndexerFormat::kFp8, 6, 1, 64, 128, 64, {40000, 0, 12000, 33000, 2048, 70000}, seed++);
  run_fused_case(c);
  c.values = true;
  c.slots = true;
  c.zero_keys = true;
  c.k = 2048;
  c.spec = spec(IndexerFormat::kFp8, 3, 1, 64, 128, 64, {60000, 9000, 45000}, seed++);
  run_fused_case(c);
}

// The resident route's select under ties: zero keys (every score ties at 0, so the k-th key's
// ties span every CTA and go to the smallest indices), and a short row (every state wins).
TEST(GpuFusedTopk, ResidentRouteTies) {
  EnvScope any("DSATTN_FUSED_RESIDENT", "force");  // also for N > 1
  FusedCase c;
  c.zero_keys = true;
  c.k = 2048;
  c.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {100000}, 201);
  run_fused_case(c);
  c.k = 512;
  c.spec = spec(IndexerFormat::kFp8, 1, 3, 32, 128, 32, {7000}, 202);
  run_fused_case(c);
  c.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {300}, 203);
  run_fused_case(c);
}

// One request's two-barrier select (select_fast in indexer_ws_resident.cuh) on inputs built for
// each of its paths, and the three-round select it falls back to, on the same inputs
// (run_fused_case compares every route with the unfused path and the reference; the test checks
// the results, not which path ran: the paths below follow from how the data is built):
//   - random scores: the k-th key's 16-bit bin gathered into the list, the exact key found in it;
//   - keys repeating with period 700 (70000 states: groups of 100 tied scores), k = 2048 taking
//     48 of the k-th group: the ties ranked by state;
//   - period 160 (groups of 437-438): more ties than kTieCap and only some win, so the fast select
//     gives up after its second barrier and the rounds run from the start;
//   - every score tied (zero keys): the bin holds every key, past the list, so it gives up after
//     its first barrier;
//   - N = 2 with per-row lengths, and a row of at most k keys (every key wins).
// Each case runs again with DSATTN_RESIDENT_FAST=0 (the rounds alone).
TEST(GpuFusedTopk, ResidentFastSelectPaths) {
  EnvScope any("DSATTN_FUSED_RESIDENT", "force");
  for (const char* fast : {"force", "0"}) {  // force: also past its default width
    SCOPED_TRACE(fast);
    EnvScope f("DSATTN_RESIDENT_FAST", fast);
    FusedCase c;
    c.k = 2048;
    c.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {70000}, 241);
    run_fused_case(c);
    for (int64_t period : {int64_t(700), int64_t(160)}) {
      SCOPED_TRACE(period);
      c.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {70000}, 242);
      c.spec.key_period = period;
      run_fused_case(c);
    }
    c.zero_keys = true;
    c.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {30000}, 243);
    run_fused_case(c);
    c.zero_keys = false;
    c.k = 512;
    c.spec = spec(IndexerFormat::kFp8, 1, 2, 64, 128, 32, {26000}, 244);
    c.spec.lens_per_row = true;  // each row its own length (random, at most 26000)
    run_fused_case(c);
    c.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {400}, 245);
    run_fused_case(c);
  }
}

// The call's own switch (PagedMqaTopkParams::resident_route = false, e.g. under MPS with a reduced
// SM share, where the resident route's cooperative launch fails): the call plans without the
// route, so its workspace is the one DSATTN_FUSED_RESIDENT=0 gives (on Hopper, where two requests
// on a block table of more than 128K states take the route by default, larger than the route's),
// DSATTN_FUSED_RESIDENT=force still takes the route, and the outputs equal the default's.
TEST(GpuFusedTopk, ResidentRouteCallSwitch) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  ASSERT_EQ(std::getenv("DSATTN_FUSED_RESIDENT"), nullptr);
  FusedCase c;
  c.k = 2048;
  c.spec = spec(IndexerFormat::kFp8, 2, 1, 64, 128, 64, {140000, 12000}, 241);
  PagedCase pc = testutil::make_paged_case(c.spec);
  GpuInputs g;
  upload_case(pc, &g);
  if (::testing::Test::HasFatalFailure()) return;
  auto workspace = [&](bool allow) {
    FusedCase cc = c;
    cc.resident_route = allow;
    FusedCall f;
    setup_fused(cc, pc, g, &f, false);
    return f.ex.workspace_bytes;
  };
  const size_t ws_on = workspace(true), ws_off = workspace(false);
  {
    EnvScope off("DSATTN_FUSED_RESIDENT", "0");
    EXPECT_EQ(workspace(true), ws_off);
  }
  {
    EnvScope force("DSATTN_FUSED_RESIDENT", "force");
    EXPECT_EQ(workspace(false), ws_on);
  }
  int major = 0;
  DSATTN_CUDA_ASSERT(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  if (major == 9) {
    EXPECT_LT(ws_on, ws_off) << "two requests should take the resident route on Hopper";
  }
  TopkOut on, off;
  run_fused(c, pc, g, &on);
  if (::testing::Test::HasFatalFailure()) return;
  c.resident_route = false;
  run_fused(c, pc, g, &off);
  if (::testing::Test::HasFatalFailure()) return;
  check_fused(c, pc, testutil::ref_rows(pc), off, on);  // the reference, and the same outputs as `on`
}

// The ops on a green context's stream with half the SMs (SGLang-style SM partitioning; under MPS
// with an SM limit the device's own count is already the share): the grids and partitions follow
// cuda_stream_num_sms, so the resident route's cooperative launch (one CTA per SM, all resident at
// once) takes the green context's SMs, not the device's, and must succeed; every route must give
// the full device's indices, and the scores paged_mqa_logits gives on the same stream. (The scores
// of the other stream can differ in the last bits where the indexer's size rule puts the two
// streams on different kernels: logits_mma_ws_rule counts block-table states per SM, on the sm_100
// family and under DSATTN_INDEXER_KERNEL=portable.) The workspace asked for on the green stream is
// smaller (fewer partitions / CTAs), where both streams score on the same kernel.
TEST(GpuFusedTopk, GreenContextSmShare) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  ASSERT_EQ(std::getenv("DSATTN_FUSED_RESIDENT"), nullptr);
  const int all_sms = cuda_num_sms();
  cuda::GreenContext gs;
  const std::string why = gs.make(all_sms / 2);
  if (!why.empty()) GTEST_SKIP() << why;
  if (gs.sms() >= all_sms) GTEST_SKIP() << "the green context got every SM (" << gs.sms() << ")";
  std::printf("green context: %d of %d SMs\n", gs.sms(), all_sms);
  EXPECT_EQ(cuda_stream_num_sms(gs.stream()), gs.sms());
  EXPECT_EQ(cuda_stream_num_sms(nullptr), all_sms);
  struct Shape {
    std::vector<int64_t> lens;
    int next_n;
  };
  // One request (the one-request resident kernel), three (several requests, shared CTAs), both on
  // block tables of more than 128K states; one with N = 2 and a row of 64K states for topk's
  // few-long-rows plans (the logits route by default).
  for (const Shape& sh :
       {Shape{{140000}, 1}, Shape{{30000, 9000, 140000}, 1}, Shape{{20000}, 2}, Shape{{65536}, 1}}) {
    FusedCase c;
    c.k = 2048;
    const int batch = static_cast<int>(sh.lens.size());
    c.spec = spec(IndexerFormat::kFp8, batch, sh.next_n, 64, 128, 64, sh.lens, 977 + batch);
    SCOPED_TRACE("B " + std::to_string(batch) + " N " + std::to_string(sh.next_n) + " first ctx " +
                 std::to_string(sh.lens[0]));
    PagedCase pc = testutil::make_paged_case(c.spec);
    GpuInputs g;
    upload_case(pc, &g);
    if (::testing::Test::HasFatalFailure()) return;
    TopkOut unfused_full;
    run_unfused(c, pc, g, &unfused_full);
    if (::testing::Test::HasFatalFailure()) return;
    FusedCase cg = c;
    cg.stream = gs.stream();
    // Whether the size rule of the mma.sync consumers' kernel (768 block-table states per SM, FP8,
    // D = 128) splits the two streams: then the green one scores on that kernel, the full device on
    // the portable one, each with its own workspace.
    const int64_t table_states = pc.cache.batch * pc.cache.max_pages * c.spec.states_per_page;
    const bool rule_splits = sm100_kernel_rule() && table_states >= 768 * int64_t(gs.sms()) &&
                             table_states < 768 * int64_t(all_sms);
    if (!rule_splits) {
      FusedCall full, green;
      setup_fused(c, pc, g, &full, false);
      setup_fused(cg, pc, g, &green, false);
      if (::testing::Test::HasFatalFailure()) return;
      // Planned for the stream's SMs. On Hopper's kernels the workspace shrinks with them; on the
      // portable tile kernel fewer partitions make longer pieces, and the route can change with
      // them (H100 under DSATTN_INDEXER_KERNEL=warp-local, three requests: 4629248 bytes on 72
      // SMs against 4062208 on 132), so there it only differs.
      if (hopper_kernels_score()) {
        EXPECT_LT(green.ex.workspace_bytes, full.ex.workspace_bytes);
      } else {
        EXPECT_NE(green.ex.workspace_bytes, full.ex.workspace_bytes);
      }
    }
    TopkOut unfused_green;
    run_unfused(cg, pc, g, &unfused_green);
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_EQ(unfused_green.idx, unfused_full.idx) << "paged_mqa_logits + topk on the green stream";
    const std::vector<std::vector<float>> refs = testutil::ref_rows(pc);
    for (bool resident : {true, false}) {
      SCOPED_TRACE(resident ? "resident route allowed" : "resident route off");
      cg.resident_route = resident;
      TopkOut fused;
      run_fused(cg, pc, g, &fused);
      if (::testing::Test::HasFatalFailure()) return;
      check_fused(cg, pc, refs, fused, unfused_green);
      EXPECT_EQ(fused.idx, unfused_full.idx) << "the full device's indices";
    }
  }
}

// One captured graph of the resident route replayed with new context lengths written into the
// same device buffer (`sets`: one length per request each; -1: longer than the block table holds,
// whose states past it are not scored, as on the other routes). Each replay must give what the
// streaming route gives on the same inputs, so the barrier words and histograms the kernel leaves
// behind never leak into the next call, and requests that change CTAs (or become empty) are
// selected right.
void resident_graph_new_lengths(const FusedCase& c, const std::vector<std::vector<int32_t>>& sets) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  EnvScope any("DSATTN_FUSED_RESIDENT", "force");
  PagedCase pc = testutil::make_paged_case(c.spec);
  GpuInputs g;
  upload_case(pc, &g);
  if (::testing::Test::HasFatalFailure()) return;
  FusedCall f;
  setup_fused(c, pc, g, &f, false);
  if (::testing::Test::HasFatalFailure()) return;
  FusedGraph fg;
  capture_fused(&f, &fg);
  if (::testing::Test::HasFatalFailure()) return;
  const int32_t table_states = static_cast<int32_t>(pc.cache.max_pages * c.spec.states_per_page);
  for (const auto& set : sets) {
    std::vector<int32_t> lens(set);
    std::string trace = "context lengths";
    for (auto& l : lens) {
      if (l < 0) l = table_states + 5000;
      trace += " " + std::to_string(l);
    }
    SCOPED_TRACE(trace);
    ASSERT_EQ(lens.size(), static_cast<size_t>(c.spec.batch));
    DSATTN_CUDA_ASSERT(cudaMemcpy(g.lens.buf.ptr, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
    DSATTN_CUDA_ASSERT(cudaMemset(f.idx.ptr, 0x7b, f.n * 4));
    DSATTN_CUDA_ASSERT(cudaGraphLaunch(fg.exec, fg.st));
    DSATTN_CUDA_ASSERT(cudaStreamSynchronize(fg.st));
    TopkOut o;
    download_fused(f, &o);
    if (::testing::Test::HasFatalFailure()) break;
    TopkOut base;
    {
      EnvScope route("DSATTN_FUSED_LOGITS", "0");
      EnvScope off("DSATTN_FUSED_RESIDENT", "0");
      run_fused(c, pc, g, &base);
    }
    if (::testing::Test::HasFatalFailure()) break;
    for (size_t i = 0; i < f.n; ++i) {
      ASSERT_EQ(o.idx[i], base.idx[i]) << "entry " << i;
      ASSERT_EQ(o.slots[i], base.slots[i]) << "entry " << i;
      ASSERT_TRUE(o.val[i] == base.val[i] || (std::isnan(o.val[i]) && std::isnan(base.val[i]))) << "entry " << i;
    }
  }
}

// One request with N = 2: shorter, shorter than k, zero, past the block table, the first again.
TEST(GpuFusedTopk, ResidentGraphNewLengths) {
  FusedCase c;
  c.k = 2048;
  c.spec = spec(IndexerFormat::kFp8, 1, 2, 64, 128, 64, {20000}, 211);
  resident_graph_new_lengths(c, {{20000}, {6000}, {2048}, {0}, {-1}, {20000}});
}

// Three requests: the CTAs each request spans move with every set of lengths.
TEST(GpuFusedTopk, ResidentGraphNewLengthsManyRequests) {
  FusedCase c;
  c.k = 2048;
  c.spec = spec(IndexerFormat::kFp8, 3, 1, 64, 128, 64, {20000, 6000, 30000}, 212);
  resident_graph_new_lengths(c, {{20000, 6000, 30000}, {0, 0, 0}, {-1, 100, 2048}, {30000, 30000, 30000},
                                 {0, 25000, 0}, {20000, 6000, 30000}});
}

// One request whose block table holds ~50K states, wider than the two-barrier select takes
// (32K): each replay chooses the select on the device from its lengths, the two barriers for a
// request of at most 32K states (8000, 32768, 20000, 2048, 12345), the three rounds beyond (50000,
// 32769, past the table).
TEST(GpuFusedTopk, ResidentGraphSelectByLength) {
  FusedCase c;
  c.k = 2048;
  c.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {50000}, 213);
  resident_graph_new_lengths(c, {{50000}, {8000}, {32768}, {32769}, {20000}, {2048}, {0}, {-1}, {12345}});
}

// A small call of the resident route (and the other routes) for the compute-sanitizer pass of
// scripts/gpu_check.sh (tests named *Sanitizer*): two rows of 9000 states, every score tied (the
// k-th key's ties spread over the CTAs), and four requests (shared, inside one CTA, empty).
TEST(GpuFusedTopk, ResidentSanitizerSmall) {
  EnvScope any("DSATTN_FUSED_RESIDENT", "force");  // also for N > 1
  FusedCase c;
  c.k = 512;
  c.spec = spec(IndexerFormat::kFp8, 1, 2, 64, 128, 64, {9000}, 221);
  run_fused_case(c);
  c.zero_keys = true;
  c.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {3000}, 222);
  run_fused_case(c);
  c.zero_keys = false;
  c.spec = spec(IndexerFormat::kFp8, 4, 1, 64, 128, 64, {9000, 100, 0, 5000}, 223);  // several requests
  run_fused_case(c);
  c.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {9000}, 224);  // the fast select's tie ranking
  c.spec.key_period = 300;                                              // (groups of 30)
  run_fused_case(c);
}

// The split merge's level-2 bin threshold and level 1's pass-through for the compute-sanitizer
// pass: one request of 12000 states (five level-1 CTAs), tied scores in groups of 10 (k = 512
// needs 2 of the k-th group), and scores rising along the context (the last share holds most of
// the winners). Cluster merge off, so the few-row case takes the split merge too.
TEST(GpuFusedTopk, SplitMergeSanitizerSmall) {
  EnvScope off("DSATTN_FUSED_CLUSTER", "0");
  FusedCase c;
  c.k = 512;
  c.spec = spec(IndexerFormat::kFp8, 1, 1, 64, 128, 64, {12000}, 231);
  c.spec.key_period = 1200;
  run_fused_case(c);
  c.spec.key_period = 0;
  c.spec.key_ramp = 20.0f;
  run_fused_case(c);
}

// The chunked logits route with its smallest chunks (DSATTN_FUSED_CHUNK=1: k states, rounded up
// to whole pages), so rows cross many chunk boundaries and the carried winners are replaced many
// times: pages of 48 states, lengths at and around k and the chunk width, the next_n rule's [B]
// lengths (N = 2, 3), [B, N] lengths, varlen rows, every score tied (the first k states must win
// across every boundary), repeating keys (ties at the k-th score), the best scores late in the
// context, sorted output, graph replays and the sm_120 budget. Each against the reference and the
// unfused path (identical indices, scores and slot ids), and the route checked.
TEST(GpuFusedTopk, ChunkedRoute) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  std::vector<std::pair<std::string, FusedCase>> cases;
  auto add = [&](const char* name, FusedCase c) { cases.emplace_back(name, c); };
  FusedCase base;
  base.k = 256;
  base.spec = spec(IndexerFormat::kFp8, 7, 1, 64, 128, 48, {0, 1, 255, 256, 288, 577, 9001}, 171);
  add("S48 lengths around k and the chunk", base);
  FusedCase nrule = base;
  nrule.spec = spec(IndexerFormat::kFp8, 3, 2, 32, 128, 64, {700, 4096, 12001}, 172);
  add("N2 [B] lengths", nrule);
  nrule.spec.next_n = 3;
  nrule.spec.seed = 173;
  add("N3 [B] lengths", nrule);
  FusedCase perrow = base;
  perrow.spec = spec(IndexerFormat::kFp8, 3, 2, 64, 128, 32, {3000, 257, 20000}, 174);
  perrow.spec.lens_per_row = true;
  perrow.sorted = true;
  add("N2 [B,N] lengths, sorted", perrow);
  FusedCase var = base;
  var.spec = spec(IndexerFormat::kMxfp4, 4, 2, 64, 128, 64, {5000, 300, 0, 8000}, 175);
  var.spec.varlen = true;
  var.graph = true;
  add("varlen MXFP4, graph", var);
  FusedCase ties = base;
  ties.zero_keys = true;
  ties.spec = spec(IndexerFormat::kFp8, 2, 1, 64, 128, 64, {6000, 700}, 176);
  add("every score tied", ties);
  FusedCase period = base;
  period.k = 512;
  period.spec = spec(IndexerFormat::kFp8, 2, 1, 64, 128, 64, {9000, 30000}, 177);
  period.spec.key_period = 97;
  add("repeating keys", period);
  FusedCase ramp = period;
  ramp.spec.key_period = 0;
  ramp.spec.key_ramp = 2.0f;
  ramp.spec.seed = 178;
  ramp.smem_budget = 101376;
  add("best scores late, sm_120 budget", ramp);
  for (const auto& nc : cases) {
    SCOPED_TRACE(nc.first);
    const FusedCase& c = nc.second;
    CaseBaseline bl;
    prepare_case(c, &bl);
    if (::testing::Test::HasFatalFailure()) return;
    EnvScope chunk("DSATTN_FUSED_CHUNK", "1");
    EnvScope off("DSATTN_FUSED_RESIDENT", "0");
    EXPECT_EQ(fused_route(c, bl.pc, bl.g, false), "chunked");
    TopkOut fused;
    run_fused(c, bl.pc, bl.g, &fused);
    if (::testing::Test::HasFatalFailure()) return;
    check_fused(c, bl.pc, bl.refs, fused, bl.unfused);
  }
}

// ---------------------------------------------------------------- random cases
// Cases drawn at random over the op's coverage (format, D, H, S in 1..256, next_n, the three
// length layouts, 1..300 requests whose lengths sit at 0, around k or anywhere up to 70K, k from 1
// to 4096, sorted or not, indices only or with scores and slot ids, padded strides, ties from
// repeated keys, scores rising along the context, the sm_120 shared-memory budget, a caller
// schedule, graph replay), each through run_fused_case: every route against the double
// reference and against the unfused path. DSATTN_TEST_RANDOM_CASES (default 4) and
// DSATTN_TEST_RANDOM_SEED (default 2026) widen or move the draw; a failure names the case.
FusedCase random_fused_case(uint64_t seed, std::string* name) {
  testutil::Draw d(seed);
  const testutil::IndexerGeometry g = testutil::draw_indexer_geometry(d, 30, 300);
  FusedCase c;
  PagedCaseSpec& s = c.spec;
  s.seed = seed;
  s.format = g.format;
  s.head_dim = g.head_dim;
  s.heads = g.heads;
  s.states_per_page = g.states_per_page;
  s.varlen = g.layout == testutil::LensLayout::kVarlen;
  s.lens_per_row = g.layout == testutil::LensLayout::kPerRow;
  s.next_n = g.next_n;
  s.batch = g.batch;
  c.k = testutil::draw_topk_k(d);
  // Lengths: 0, around k, or log-uniform up to 70K states, within ~2M row-states for the reference.
  const double cap = std::min(70000.0, std::max(2.0, 2.0e6 / (double(s.batch) * s.next_n)));
  const int64_t lcap = s.states_per_page == 1 ? std::min<int64_t>(int64_t(cap), 5000) : int64_t(cap);
  for (int b = 0; b < s.batch; ++b) {
    const int lk = d.below(100);
    int64_t L = lk < 8 ? 0 : lk < 30 ? c.k - 1 + d.below(3) : int64_t(std::exp(std::log(cap) * d.rng.uniform()));
    s.lengths.push_back(std::max<int64_t>(0, std::min(L, lcap)));
  }
  s.stride_pad_bytes = d.pct(75) ? 0 : d.pick({4, 8, 16, 448});
  s.extra_width = d.below(8);
  s.extra_table_cols = d.below(3);
  s.key_period = d.pct(10) ? 1 + d.below(300) : 0;
  s.key_ramp = d.pct(10) ? 2.0f : 0.0f;
  c.sorted = d.pct(40);
  c.values = !d.pct(15);
  c.slots = c.values ? !d.pct(30) : d.pct(50);
  c.graph = d.pct(15);
  c.smem_budget = d.pct(15) ? 101376 : 0;
  c.schedule_parts = d.pct(70) ? 0 : d.pick({1, 2, 7, 64, 132, 264});
  c.resident_route = !d.pct(10);
  char buf[400];
  std::snprintf(buf, sizeof(buf),
                "seed %llu: %s B%d N%d H%d D%d S%d %s k%d sorted%d values%d slots%d graph%d smem%d sched%d "
                "pad%lld period%lld ramp%g resident%d lengths",
                static_cast<unsigned long long>(seed), s.format == IndexerFormat::kFp8 ? "fp8" : "mxfp4", s.batch,
                s.next_n, s.heads, s.head_dim, s.states_per_page,
                s.varlen ? "varlen" : s.lens_per_row ? "lens[B,N]" : "lens[B]", c.k, c.sorted, c.values, c.slots,
                c.graph, c.smem_budget, c.schedule_parts, static_cast<long long>(s.stride_pad_bytes),
                static_cast<long long>(s.key_period), double(s.key_ramp), c.resident_route);
  *name = buf;
  testutil::append_values(name, s.lengths);
  return c;
}

TEST(GpuFusedTopk, RandomCases) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int n = testutil::env_int("DSATTN_TEST_RANDOM_CASES", 4);
  const uint64_t base = testutil::random_seed_base();
  for (int i = 0; i < n && !::testing::Test::HasFatalFailure(); ++i) {
    std::string name;
    const FusedCase c = random_fused_case(testutil::random_case_seed(base, i, 7), &name);
    SCOPED_TRACE(name);
    std::printf("[ random %d ] %s\n", i, name.c_str());
    std::fflush(stdout);
    run_fused_case(c);
  }
}

}  // namespace
}  // namespace dsattn
