// Randomized bad input for the CPU backend (the double-precision reference, which is also the
// no-GPU fallback). Each trial builds a small valid call of one op, applies one to three random
// mutations and calls the op:
//   - a tensor argument: its dtype, rank, one extent or stride, its presence, a null data pointer,
//     or a CUDA device;
//   - an entry of an index / length tensor set to a hostile value (negative, past a bound,
//     INT32_MIN / INT32_MAX), a float entry set to NaN / +-inf / 3e38, a cache byte set at random;
//   - a scalar argument out of range (k, next_n, page sizes, head_dim, strides, formats, ...).
// The op must return Ok, or kInvalidArgument / kNotImplemented with a message that starts with
// its name; it must not write into its inputs, nor outside the elements of its output views, nor
// anywhere at all when it returns an error; and it must not read outside any view. Every tensor
// lives in its own buffer with room on both sides (a trial whose mutated views leave their buffers
// is skipped: that would be the caller's lie about its memory, not a bad argument); under
// AddressSanitizer the bytes outside each view's span are poisoned during the call, so a stray
// read aborts the test, and without it the writes are still caught by the comparisons.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/indexer_test_util.h"
#include "cpu_test_util.h"
#include "dsattn/codecs.h"
#include "dsattn/ops.h"

#if defined(__SANITIZE_ADDRESS__)
#define DSATTN_FUZZ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DSATTN_FUZZ_ASAN 1
#endif
#endif
#if defined(DSATTN_FUZZ_ASAN)
#include <sanitizer/asan_interface.h>
#endif

namespace dsattn {
namespace {

using testutil::Rng;

// Byte span [lo, hi) of a view relative to its data pointer; empty when it has no elements (or a
// negative extent, which the op must reject before touching memory).
struct Span {
  bool empty = true;
  int64_t lo = 0, hi = 0;
};
Span span_of(const TensorView& v) {
  Span s;
  if (v.data == nullptr || v.ndim <= 0 || v.ndim > kMaxDims) return s;
  int64_t lo = 0, hi = 0;
  for (int d = 0; d < v.ndim; ++d) {
    if (v.shape[d] <= 0) return s;
    const int64_t ext = (v.shape[d] - 1) * v.strides[d];
    (ext < 0 ? lo : hi) += ext;
  }
  const int64_t es = static_cast<int64_t>(dtype_size(v.dtype));
  s.empty = false;
  s.lo = lo * es;
  s.hi = (hi + 1) * es;
  return s;
}

// Calls f(byte offset) for every byte of every element of v (a view that fits its buffer).
template <class F>
void for_each_element_byte(const TensorView& v, F&& f) {
  if (span_of(v).empty) return;
  const int64_t es = static_cast<int64_t>(dtype_size(v.dtype));
  int64_t idx[kMaxDims] = {};
  for (;;) {
    int64_t off = 0;
    for (int d = 0; d < v.ndim; ++d) off += idx[d] * v.strides[d];
    for (int64_t b = 0; b < es; ++b) f(off * es + b);
    int d = v.ndim - 1;
    while (d >= 0 && ++idx[d] == v.shape[d]) idx[d--] = 0;
    if (d < 0) return;
  }
}

// One tensor argument's buffer: the view's original bytes with 4x their size (+ 1 KiB) of filler
// on each side, so that grown views still fit.
struct Region {
  std::vector<uint8_t> mem, before;
  bool out = false;
};

struct Slot {
  std::string name;
  TensorView* v;
  Region* r;
  bool view_fixed;  // a raw buffer standing in as a view: its view is not mutated
};

// A call under test: its tensor arguments rebound into Regions, and the scalar mutations the op's
// generator registered.
struct Trial {
  std::deque<Region> regions;
  std::vector<Slot> slots;
  std::vector<std::function<void(Rng&)>> scalar_mutations;

  void bind(const char* name, TensorView* v, bool out, bool view_fixed = false) {
    regions.emplace_back();
    Region& r = regions.back();
    r.out = out;
    const Span s = span_of(*v);
    const int64_t len = s.empty ? 0 : s.hi - s.lo;
    const int64_t pad = 4 * len + 1024;
    r.mem.assign(static_cast<size_t>(2 * pad + len), 0xA5);
    if (!s.empty) {
      std::memcpy(r.mem.data() + pad, static_cast<const uint8_t*>(v->data) + s.lo, static_cast<size_t>(len));
    }
    if (v->defined()) v->data = r.mem.data() + pad - s.lo;
    slots.push_back(Slot{name, v, &r, view_fixed});
  }
  // Every present CPU view fits its buffer.
  bool fits() const {
    for (const Slot& sl : slots) {
      const TensorView& v = *sl.v;
      const Span s = span_of(v);
      if (s.empty || v.device != Device::kCpu) continue;
      const int64_t base = static_cast<const uint8_t*>(v.data) - sl.r->mem.data();
      if (base + s.lo < 0 || base + s.hi > static_cast<int64_t>(sl.r->mem.size())) return false;
    }
    return true;
  }
  void poison(bool on) {
#if defined(DSATTN_FUZZ_ASAN)
    for (const Slot& sl : slots) {
      uint8_t* m = sl.r->mem.data();
      const size_t n = sl.r->mem.size();
      const TensorView& v = *sl.v;
      const Span s = span_of(v);
      if (!on) {
        ASAN_UNPOISON_MEMORY_REGION(m, n);
        continue;
      }
      if (s.empty || v.device != Device::kCpu) {
        ASAN_POISON_MEMORY_REGION(m, n);
        continue;
      }
      const int64_t base = static_cast<const uint8_t*>(v.data) - m;
      ASAN_POISON_MEMORY_REGION(m, static_cast<size_t>(base + s.lo));
      ASAN_POISON_MEMORY_REGION(m + base + s.hi, n - static_cast<size_t>(base + s.hi));
    }
#else
    (void)on;
#endif
  }
};

// ---------------------------------------------------------------- mutations
int32_t hostile_i32(Rng& rng) {
  static const int32_t v[] = {std::numeric_limits<int32_t>::min(), -1000000, -2, -1, 0, 1, 3, 63, 64, 65, 1000,
                              1 << 20, std::numeric_limits<int32_t>::max() - 1, std::numeric_limits<int32_t>::max()};
  return v[rng.next() % (sizeof(v) / sizeof(v[0]))];
}
float hostile_f32(Rng& rng) {
  static const float v[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            3e38f, -3e38f, 1e-42f, 0.0f, -0.0f};
  return v[rng.next() % (sizeof(v) / sizeof(v[0]))];
}

// Uniform in [0, n) (n >= 1).
int32_t below(Rng& rng, int64_t n) { return static_cast<int32_t>(rng.next() % static_cast<uint64_t>(n)); }
int bump(int x) { return x < std::numeric_limits<int>::max() ? x + 1 : x; }

// Byte offset (from data) of a random element of v (non-empty).
int64_t random_element(const TensorView& v, Rng& rng) {
  int64_t off = 0;
  for (int d = 0; d < v.ndim; ++d) off += below(rng, v.shape[d]) * v.strides[d];
  return off * static_cast<int64_t>(dtype_size(v.dtype));
}

void mutate_content(Slot& sl, Rng& rng) {
  TensorView& v = *sl.v;
  if (span_of(v).empty || v.device != Device::kCpu) return;
  uint8_t* p = static_cast<uint8_t*>(v.data) + random_element(v, rng);
  // Only inside the buffer (an earlier mutation of the view may have taken it outside).
  const int64_t at = p - sl.r->mem.data(), es = static_cast<int64_t>(dtype_size(v.dtype));
  if (at < 0 || at + es > static_cast<int64_t>(sl.r->mem.size())) return;
  switch (v.dtype) {
    case DType::kI32: {
      const int32_t x = hostile_i32(rng);
      std::memcpy(p, &x, 4);
      break;
    }
    case DType::kI64: {
      const int64_t x = rng.next() % 2 ? int64_t(hostile_i32(rng)) : std::numeric_limits<int64_t>::min() + 5;
      std::memcpy(p, &x, 8);
      break;
    }
    case DType::kF32: {
      const float x = hostile_f32(rng);
      std::memcpy(p, &x, 4);
      break;
    }
    case DType::kBF16: {
      const uint16_t x = static_cast<uint16_t>(rng.next() % 2 ? 0x7FC0 : 0xFF80);  // NaN, -inf
      std::memcpy(p, &x, 2);
      break;
    }
    default:
      *p = static_cast<uint8_t>(rng.next());  // codes and cache bytes (scales among them)
  }
}

void mutate_view(Slot& sl, Rng& rng) {
  TensorView& v = *sl.v;
  static const DType kTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3,
                                 DType::kU8,  DType::kI32,  DType::kI64};
  const int d = v.ndim > 0 ? static_cast<int>(rng.next() % static_cast<uint64_t>(v.ndim)) : 0;
  switch (rng.next() % 9) {
    case 0:
      v.dtype = kTypes[rng.next() % 7];
      break;
    case 1:  // drop the last dimension
      if (v.ndim > 0) --v.ndim;
      break;
    case 2:  // a new unit dimension in front
      if (v.ndim > 0 && v.ndim < kMaxDims) {
        for (int i = v.ndim; i > 0; --i) {
          v.shape[i] = v.shape[i - 1];
          v.strides[i] = v.strides[i - 1];
        }
        v.shape[0] = 1;
        v.strides[0] = v.ndim > 1 ? v.strides[1] * v.shape[1] : 1;
        ++v.ndim;
      }
      break;
    case 3: {
      static const int64_t kShape[] = {-1, 0, 1, 2};
      const uint64_t c = rng.next() % 6;
      if (v.ndim > 0) v.shape[d] = c < 4 ? kShape[c] : c == 4 ? v.shape[d] + 1 : 2 * v.shape[d];
      break;
    }
    case 4:
      if (v.ndim > 0 && v.shape[d] > 1) v.shape[d] -= 1;
      break;
    case 5: {
      const uint64_t c = rng.next() % 4;
      if (v.ndim > 0) v.strides[d] = c == 0 ? 0 : c == 1 ? -v.strides[d] : c == 2 ? v.strides[d] + 1 : 1;
      break;
    }
    case 6:
      v.data = nullptr;
      break;
    case 7:
      v.device = Device::kCuda;
      break;
    default:
      v = TensorView{};
  }
}

// Runs `trials` random trials of one op: make(rng, t) builds a valid call, binds every tensor of
// it into t, and returns the op's call on it.
using Maker = std::function<std::function<Status()>(Rng&, Trial&)>;
// DSATTN_FUZZ_SCALE=n runs n times the trials, from other seeds (longer local runs).
void fuzz(const char* op, const Maker& make, int trials, uint64_t seed) {
  if (const char* e = std::getenv("DSATTN_FUZZ_SCALE")) {
    const int n = std::atoi(e);
    if (n > 1) {
      trials *= n;
      seed = seed * 1000003u + static_cast<uint64_t>(n);
    }
  }
  Rng rng(seed);
  int ran = 0, skipped = 0, ok = 0;
  for (int it = 0; it < trials; ++it) {
    Trial t;
    const std::function<Status()> call = make(rng, t);
    // The unmutated call is valid.
    if (it % 16 == 0) {
      const Status s = call();
      ASSERT_TRUE(s.ok()) << op << " trial " << it << ": the unmutated call failed: " << s.to_string();
      for (Slot& sl : t.slots) {  // its outputs back to filler, so the mutated call starts from the same bytes
        if (sl.r->out) std::fill(sl.r->mem.begin(), sl.r->mem.end(), 0xA5);
      }
    }
    std::string what;
    const int n = 1 + static_cast<int>(rng.next() % 3);
    for (int m = 0; m < n; ++m) {
      const uint64_t kind = rng.next() % 10;
      if (kind < 3 && !t.scalar_mutations.empty()) {
        t.scalar_mutations[rng.next() % t.scalar_mutations.size()](rng);
        what += " scalar";
        continue;
      }
      Slot& sl = t.slots[rng.next() % t.slots.size()];
      if (kind < 7 && !sl.r->out) {
        mutate_content(sl, rng);
        what += " content(" + sl.name + ")";
      } else if (!sl.view_fixed) {
        mutate_view(sl, rng);
        what += " view(" + sl.name + ")";
      }
    }
    if (!t.fits()) {
      ++skipped;
      continue;
    }
    for (Region& r : t.regions) r.before = r.mem;
    t.poison(true);
    const Status s = call();
    t.poison(false);
    ++ran;
    ok += s.ok() ? 1 : 0;
    if (std::getenv("DSATTN_FUZZ_VERBOSE") != nullptr) {
      std::printf("%s -> %s\n", what.c_str(), s.ok() ? "ok" : s.message.c_str());
    }
    const std::string tag = std::string(op) + " trial " + std::to_string(it) + " (" + what + "): ";
    ASSERT_TRUE(s.ok() || s.code == Code::kInvalidArgument || s.code == Code::kNotImplemented) << tag << s.to_string();
    if (!s.ok()) {
      ASSERT_EQ(s.message.rfind(std::string(op) + ": ", 0), 0u) << tag << "message does not name the op: " << s.message;
    }
    for (const Slot& sl : t.slots) {
      const Region& r = *sl.r;
      if (!r.out || !s.ok() || sl.v->device != Device::kCpu) {
        ASSERT_TRUE(r.mem == r.before) << tag << sl.name << " was written ("
                                       << (r.out ? "output, the call failed" : "input") << "): " << s.to_string();
        continue;
      }
      std::vector<uint8_t> mine(r.mem.size(), 0);
      const int64_t base = static_cast<const uint8_t*>(sl.v->data) - r.mem.data();
      for_each_element_byte(*sl.v, [&](int64_t b) { mine[static_cast<size_t>(base + b)] = 1; });
      for (size_t i = 0; i < r.mem.size(); ++i) {
        ASSERT_TRUE(mine[i] || r.mem[i] == r.before[i]) << tag << sl.name << " written outside its elements at byte "
                                                         << static_cast<int64_t>(i) - base;
      }
    }
  }
  std::printf("[ fuzz     ] %s: %d trials, %d ran (%d returned Ok), %d skipped (views outside their buffers)\n", op,
              trials, ran, ok, skipped);
  // Most trials must have run, and some mutated calls must still be valid (so the checks above also
  // cover calls that compute).
  EXPECT_GT(ran, trials / 2) << op << ": " << skipped << " of " << trials << " trials skipped";
  EXPECT_GT(ok, 0) << op;
  EXPECT_LT(ok, ran) << op;
}

// ---------------------------------------------------------------- the ops' valid calls
// A small paged-indexer problem (FP8 or MXFP4, varlen or not, [B, N] or [B] lengths) and the
// buffers of the op's outputs. Each maker's holder is local: bind() copies every tensor it calls
// on into the trial's own buffers.
struct PagedHolder {
  testutil::PagedCase c;
  std::vector<float> logits;
  std::vector<int32_t> idx, slots_out;
  std::vector<float> vals;
};

testutil::PagedCase random_paged_case(Rng& rng) {
  testutil::PagedCaseSpec spec;
  spec.format = rng.next() % 3 == 0 ? IndexerFormat::kMxfp4 : IndexerFormat::kFp8;
  spec.batch = 1 + static_cast<int>(rng.next() % 3);
  spec.varlen = rng.next() % 4 == 0;
  spec.next_n = spec.varlen ? 1 : 1 + static_cast<int>(rng.next() % 2);
  spec.lens_per_row = rng.next() % 2 == 0;
  spec.heads = 8;
  spec.head_dim = 32;
  static const int kS[] = {1, 2, 4, 16, 64};
  spec.states_per_page = kS[rng.next() % 5];
  spec.max_len = 40;
  spec.extra_width = 2;
  spec.seed = rng.next();
  return testutil::make_paged_case(spec);
}

// A cache descriptor's scalar mutations: its page size, head dim, page stride and format (the
// other valid one, or no valid one).
void cache_mutations(Trial& t, IndexerCache* c) {
  t.scalar_mutations.push_back([c](Rng& r) { c->states_per_page = static_cast<int>(hostile_i32(r)); });
  t.scalar_mutations.push_back([c](Rng& r) { c->head_dim = r.next() % 2 ? 64 : static_cast<int>(hostile_i32(r)); });
  t.scalar_mutations.push_back([c](Rng& r) { c->page_stride_bytes += r.next() % 2 ? 4 : -4; });
  t.scalar_mutations.push_back([c](Rng& r) {
    c->format = r.next() % 4 == 0 ? static_cast<IndexerFormat>(7)
                : c->format == IndexerFormat::kFp8 ? IndexerFormat::kMxfp4 : IndexerFormat::kFp8;
  });
}
void cache_mutations(Trial& t, LatentCache* c) {
  t.scalar_mutations.push_back([c](Rng& r) { c->tokens_per_page = static_cast<int>(hostile_i32(r)); });
  t.scalar_mutations.push_back([c](Rng& r) { c->page_stride_bytes += r.next() % 2 ? 16 : -16; });
  t.scalar_mutations.push_back([c](Rng& r) {
    c->format = r.next() % 4 == 0 ? static_cast<LatentFormat>(5)
                : c->format == LatentFormat::kV4Fp8 ? LatentFormat::kV32Fp8 : LatentFormat::kV4Fp8;
  });
}

// Binds the paged arguments of `a` and registers their scalar mutations.
void bind_paged(Trial& t, PagedIndexerArgs& a) {
  t.bind("q", &a.q, false);
  if (a.q_scales.defined()) t.bind("q_scales", &a.q_scales, false);
  t.bind("weights", &a.weights, false);
  t.bind("cache.pages", &a.cache.pages, false);
  t.bind("block_table", &a.block_table, false);
  t.bind("context_lens", &a.context_lens, false);
  if (a.row_request.defined()) t.bind("row_request", &a.row_request, false);
  cache_mutations(t, &a.cache);
}


TEST(FuzzOps, PagedMqaLogits) {
  auto make = [](Rng& rng, Trial& t) {
    PagedHolder h;  // its bytes are copied into the trial by bind()
    h.c = random_paged_case(rng);
    auto p = std::make_shared<PagedMqaLogitsParams>();
    static_cast<PagedIndexerArgs&>(*p) = h.c.args();
    const bool bf16 = rng.next() % 3 == 0;
    h.logits.assign(static_cast<size_t>(h.c.rows * h.c.max_context), 0.0f);
    p->logits = make_tensor(h.logits.data(), bf16 ? DType::kBF16 : DType::kF32, {h.c.rows, h.c.max_context});
    p->clean = rng.next() % 2 == 0;
    bind_paged(t, *p);
    t.bind("logits", &p->logits, true);
    t.scalar_mutations.push_back([p](Rng&) { p->clean = !p->clean; });
    const int threads = 1 + static_cast<int>(rng.next() % 2);
    return std::function<Status()>([p, threads] { return paged_mqa_logits(*p, testutil::cpu_exec(threads)); });
  };
  fuzz("paged_mqa_logits", make, 3000, 101);
}

TEST(FuzzOps, PagedMqaTopk) {
  auto make = [](Rng& rng, Trial& t) {
    PagedHolder h;  // its bytes are copied into the trial by bind()
    h.c = random_paged_case(rng);
    auto p = std::make_shared<PagedMqaTopkParams>();
    static_cast<PagedIndexerArgs&>(*p) = h.c.args();
    const int64_t k = 1 + static_cast<int64_t>(rng.next() % static_cast<uint64_t>(h.c.max_context + 3));
    p->k = static_cast<int>(k);
    h.idx.assign(static_cast<size_t>(h.c.rows * k), 0);
    p->indices = make_tensor(h.idx.data(), DType::kI32, {h.c.rows, k});
    if (rng.next() % 2) {
      h.vals.assign(static_cast<size_t>(h.c.rows * k), 0.0f);
      p->values = make_tensor(h.vals.data(), DType::kF32, {h.c.rows, k});
    }
    if (rng.next() % 2) {
      h.slots_out.assign(static_cast<size_t>(h.c.rows * k), 0);
      p->slot_ids = make_tensor(h.slots_out.data(), DType::kI32, {h.c.rows, k});
    }
    p->sorted = rng.next() % 2 == 0;
    bind_paged(t, *p);
    t.bind("indices", &p->indices, true);
    if (p->values.defined()) t.bind("values", &p->values, true);
    if (p->slot_ids.defined()) t.bind("slot_ids", &p->slot_ids, true);
    t.scalar_mutations.push_back([p](Rng& r) { p->k = r.next() % 2 ? bump(p->k) : static_cast<int>(hostile_i32(r)); });
    t.scalar_mutations.push_back([p](Rng&) { p->sorted = !p->sorted; });
    return std::function<Status()>([p] { return paged_mqa_topk(*p, testutil::cpu_exec(2)); });
  };
  fuzz("paged_mqa_topk", make, 3000, 202);
}

struct TopkHolder {
  std::vector<float> logits;
  std::vector<uint16_t> logits16;
  std::vector<int32_t> starts, ends, idx, slots_out, bt, rr;
  std::vector<float> vals;
};

TEST(FuzzOps, Topk) {
  auto make = [](Rng& rng, Trial& t) {
    TopkHolder h;  // its bytes are copied into the trial by bind()
    auto p = std::make_shared<TopkParams>();
    const int64_t R = 1 + static_cast<int64_t>(rng.next() % 4), W = 1 + static_cast<int64_t>(rng.next() % 60);
    const int64_t k = 1 + static_cast<int64_t>(rng.next() % static_cast<uint64_t>(W + 2));
    const bool bf16 = rng.next() % 3 == 0;
    h.logits = rng.normals(static_cast<size_t>(R * W));
    if (bf16) {
      for (float x : h.logits) h.logits16.push_back(codec::f32_to_bf16(x));
      p->logits = make_tensor(h.logits16.data(), DType::kBF16, {R, W});
    } else {
      p->logits = make_tensor(h.logits.data(), DType::kF32, {R, W});
    }
    if (rng.next() % 2) {
      for (int64_t r = 0; r < R; ++r) {
        const int32_t a = below(rng, W + 1);
        h.starts.push_back(a);
        h.ends.push_back(a + below(rng, W - a + 1));
      }
      p->starts = make_tensor(h.starts.data(), DType::kI32, {R});
      p->ends = make_tensor(h.ends.data(), DType::kI32, {R});
    }
    p->k = static_cast<int>(k);
    h.idx.assign(static_cast<size_t>(R * k), 0);
    p->indices = make_tensor(h.idx.data(), DType::kI32, {R, k});
    if (rng.next() % 2) {
      h.vals.assign(static_cast<size_t>(R * k), 0.0f);
      p->values = make_tensor(h.vals.data(), DType::kF32, {R, k});
    }
    if (rng.next() % 2) {  // slot ids through a block table of R requests (next_n 1)
      const int S = 1 + static_cast<int>(rng.next() % 8);
      const int64_t mp = (W + S - 1) / S;
      for (int64_t i = 0; i < R * mp; ++i) h.bt.push_back(static_cast<int32_t>(rng.next() % 50));
      p->block_table = make_tensor(h.bt.data(), DType::kI32, {R, mp});
      p->states_per_page = S;
      h.slots_out.assign(static_cast<size_t>(R * k), 0);
      p->slot_ids = make_tensor(h.slots_out.data(), DType::kI32, {R, k});
      if (rng.next() % 2) {
        for (int64_t r = 0; r < R; ++r) h.rr.push_back(below(rng, R));
        p->row_request = make_tensor(h.rr.data(), DType::kI32, {R});
      }
    }
    p->sorted = rng.next() % 2 == 0;
    t.bind("logits", &p->logits, false);
    if (p->starts.defined()) {
      t.bind("starts", &p->starts, false);
      t.bind("ends", &p->ends, false);
    }
    if (p->block_table.defined()) t.bind("block_table", &p->block_table, false);
    if (p->row_request.defined()) t.bind("row_request", &p->row_request, false);
    t.bind("indices", &p->indices, true);
    if (p->values.defined()) t.bind("values", &p->values, true);
    if (p->slot_ids.defined()) t.bind("slot_ids", &p->slot_ids, true);
    t.scalar_mutations.push_back([p](Rng& r) { p->k = r.next() % 2 ? bump(p->k) : static_cast<int>(hostile_i32(r)); });
    t.scalar_mutations.push_back([p](Rng& r) { p->next_n = static_cast<int>(hostile_i32(r)); });
    t.scalar_mutations.push_back([p](Rng& r) { p->states_per_page = static_cast<int>(hostile_i32(r)); });
    t.scalar_mutations.push_back([p](Rng&) { p->sorted = !p->sorted; });
    return std::function<Status()>([p] { return topk(*p, testutil::cpu_exec(2)); });
  };
  fuzz("topk", make, 4000, 303);
}

struct SchedHolder {
  std::vector<int32_t> lens, rr, meta;
};

TEST(FuzzOps, ScheduleMetadata) {
  auto make = [](Rng& rng, Trial& t) {
    SchedHolder h;  // its bytes are copied into the trial by bind()
    auto p = std::make_shared<ScheduleMetadataParams>();
    const int64_t B = 1 + static_cast<int64_t>(rng.next() % 5);
    const int N = 1 + static_cast<int>(rng.next() % 3);
    const int sms = 1 + static_cast<int>(rng.next() % 20);
    const bool varlen = rng.next() % 3 == 0;
    if (varlen) {
      for (int64_t r = 0; r < B; ++r) {
        h.lens.push_back(static_cast<int32_t>(rng.next() % 500));
        h.rr.push_back(below(rng, B));
      }
      p->context_lens = make_tensor(h.lens.data(), DType::kI32, {B});
      p->row_request = make_tensor(h.rr.data(), DType::kI32, {B});
    } else {
      for (int64_t i = 0; i < B * N; ++i) h.lens.push_back(static_cast<int32_t>(rng.next() % 500));
      p->context_lens = make_tensor(h.lens.data(), DType::kI32, {B, N});
      p->next_n = N;
    }
    p->states_per_page = 1 + static_cast<int>(rng.next() % 64);
    p->num_sms = sms;
    h.meta.assign(static_cast<size_t>(schedule_metadata_size(sms)), 0);
    p->metadata = make_tensor(h.meta.data(), DType::kI32, {schedule_metadata_size(sms)});
    t.bind("context_lens", &p->context_lens, false);
    if (p->row_request.defined()) t.bind("row_request", &p->row_request, false);
    t.bind("metadata", &p->metadata, true);
    t.scalar_mutations.push_back([p](Rng& r) { p->next_n = static_cast<int>(hostile_i32(r)); });
    t.scalar_mutations.push_back([p](Rng& r) { p->states_per_page = static_cast<int>(hostile_i32(r)); });
    t.scalar_mutations.push_back(
        [p](Rng& r) { p->num_sms = r.next() % 2 ? bump(p->num_sms) : static_cast<int>(hostile_i32(r)); });
    return std::function<Status()>([p] { return schedule_metadata(*p, testutil::cpu_exec(1)); });
  };
  fuzz("schedule_metadata", make, 3000, 404);
}

struct WriterHolder {
  std::vector<float> k;
  std::vector<uint16_t> k16;
  std::vector<int32_t> slots32;
  std::vector<int64_t> slots64;
  std::vector<uint8_t> pages;
};

// T tokens of `d` values (f32 or bf16) and a slot mapping (i32 or i64; distinct slots, some -1) into
// num_pages x per_page slots; returns the number of pages.
int64_t writer_inputs(Rng& rng, WriterHolder& h, int64_t T, int d, int per_page, TensorView* k, TensorView* slots) {
  const int64_t pages = (T + per_page - 1) / per_page + static_cast<int64_t>(rng.next() % 3);
  h.k = rng.normals(static_cast<size_t>(T * d));
  if (rng.next() % 3 == 0) {
    for (float x : h.k) h.k16.push_back(codec::f32_to_bf16(x));
    *k = make_tensor(h.k16.data(), DType::kBF16, {T, d});
  } else {
    *k = make_tensor(h.k.data(), DType::kF32, {T, d});
  }
  std::vector<int64_t> s(static_cast<size_t>(pages * per_page));
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<int64_t>(i);
  rng.shuffle(s);
  s.resize(static_cast<size_t>(T));
  for (int64_t& x : s) x = rng.next() % 5 == 0 ? -1 : x;
  if (rng.next() % 2) {
    h.slots64 = s;
    *slots = make_tensor(h.slots64.data(), DType::kI64, {T});
  } else {
    for (int64_t x : s) h.slots32.push_back(static_cast<int32_t>(x));
    *slots = make_tensor(h.slots32.data(), DType::kI32, {T});
  }
  return pages;
}

TEST(FuzzOps, WriteIndexerCache) {
  auto make = [](Rng& rng, Trial& t) {
    WriterHolder h;  // its bytes are copied into the trial by bind()
    auto p = std::make_shared<WriteIndexerCacheParams>();
    const IndexerFormat f = rng.next() % 2 ? IndexerFormat::kMxfp4 : IndexerFormat::kFp8;
    const int D = rng.next() % 2 ? 32 : 64;
    const int S = 1 + static_cast<int>(rng.next() % 8);
    const int64_t T = 1 + static_cast<int64_t>(rng.next() % 12);
    const int64_t pages = writer_inputs(rng, h, T, D, S, &p->k, &p->slot_mapping);
    const int64_t stride = S * indexer_state_bytes(f, D) + 4 * static_cast<int64_t>(rng.next() % 3);
    h.pages.assign(static_cast<size_t>(pages * stride), 0);
    p->cache = testutil::indexer_cache_view(h.pages, f, S, D, stride);
    t.bind("k", &p->k, false);
    t.bind("slot_mapping", &p->slot_mapping, false);
    t.bind("cache.pages", &p->cache.pages, true);
    cache_mutations(t, &p->cache);
    return std::function<Status()>([p] { return write_indexer_cache(*p, testutil::cpu_exec(1)); });
  };
  fuzz("write_indexer_cache", make, 3000, 505);
}

TEST(FuzzOps, WriteLatentCache) {
  auto make = [](Rng& rng, Trial& t) {
    WriterHolder h;  // its bytes are copied into the trial by bind()
    auto p = std::make_shared<WriteLatentCacheParams>();
    const LatentFormat f = rng.next() % 2 ? LatentFormat::kV32Fp8 : LatentFormat::kV4Fp8;
    const int P = 1 + static_cast<int>(rng.next() % 4);
    const int64_t T = 1 + static_cast<int64_t>(rng.next() % 6);
    const int64_t pages = writer_inputs(rng, h, T, latent_dqk(f), P, &p->kv, &p->slot_mapping);
    const int64_t stride = latent_min_page_bytes(f, P) + (f == LatentFormat::kV4Fp8 ? 576 : 16) * below(rng, 2);
    h.pages.assign(static_cast<size_t>(pages * stride), 0);
    p->cache = testutil::latent_cache_view(h.pages, f, P, stride);
    t.bind("kv", &p->kv, false);
    t.bind("slot_mapping", &p->slot_mapping, false);
    t.bind("cache.pages", &p->cache.pages, true);
    cache_mutations(t, &p->cache);
    return std::function<Status()>([p] { return write_latent_cache(*p, testutil::cpu_exec(1)); });
  };
  fuzz("write_latent_cache", make, 3000, 606);
}

struct MlaHolder {
  std::vector<uint16_t> q, kv, out;
  std::vector<uint8_t> pages, extra_pages;
  std::vector<int32_t> idx, lens, extra_idx, extra_lens;
  std::vector<float> lse, sink;
};

std::vector<uint16_t> random_bf16(Rng& rng, size_t n) {
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = codec::f32_to_bf16(rng.normal());
  return v;
}

// Half the time an i32 [n] tensor over v of values in [0, upto] (topk_length), else absent.
TensorView maybe_lengths(Rng& rng, std::vector<int32_t>& v, int64_t n, int64_t upto) {
  if (rng.next() % 2 == 0) return TensorView{};
  for (int64_t i = 0; i < n; ++i) v.push_back(below(rng, upto + 1));
  return make_tensor(v.data(), DType::kI32, {n});
}
// Half the time an f32 [hq] attention sink over v, else absent.
TensorView maybe_sink(Rng& rng, std::vector<float>& v, int64_t hq) {
  if (rng.next() % 2 == 0) return TensorView{};
  v = rng.normals(static_cast<size_t>(hq));
  return make_tensor(v.data(), DType::kF32, {hq});
}

void scale_mutations(Trial& t, float* sm_scale) {
  t.scalar_mutations.push_back([sm_scale](Rng& r) {
    static const float v[] = {0.0f, -0.1f, std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::infinity()};
    *sm_scale = v[r.next() % 4];
  });
}

TEST(FuzzOps, SparseMlaDecode) {
  auto make = [](Rng& rng, Trial& t) {
    MlaHolder h;  // its bytes are copied into the trial by bind()
    auto p = std::make_shared<SparseMlaDecodeParams>();
    const LatentFormat f = rng.next() % 2 ? LatentFormat::kV32Fp8 : LatentFormat::kV4Fp8;
    const int64_t B = 1 + static_cast<int64_t>(rng.next() % 2), Sq = 1 + static_cast<int64_t>(rng.next() % 2), Hq = 16;
    const int64_t dqk = latent_dqk(f), topk_n = 1 + static_cast<int64_t>(rng.next() % 6);
    const int P = 1 + static_cast<int>(rng.next() % 3);
    const int64_t pages = 1 + static_cast<int64_t>(rng.next() % 3), stride = latent_min_page_bytes(f, P);
    h.q = random_bf16(rng, static_cast<size_t>(B * Sq * Hq * dqk));
    p->q = make_tensor(h.q.data(), DType::kBF16, {B, Sq, Hq, dqk});
    // Cache bytes: small codes, scales near 1 (random bytes would make most tokens NaN / inf).
    h.pages.assign(static_cast<size_t>(pages * stride), 0);
    for (auto& b : h.pages) b = static_cast<uint8_t>(rng.next() % 0x38);
    p->cache = testutil::latent_cache_view(h.pages, f, P, stride);
    for (int64_t i = 0; i < B * Sq * topk_n; ++i) {
      h.idx.push_back(rng.next() % 5 == 0 ? -1 : below(rng, pages * P));
    }
    p->indices = make_tensor(h.idx.data(), DType::kI32, {B, Sq, topk_n});
    p->topk_length = maybe_lengths(rng, h.lens, B, topk_n);
    if (rng.next() % 3 == 0) {
      h.extra_pages = h.pages;
      p->extra_cache = testutil::latent_cache_view(h.extra_pages, f, P, stride);
      const int64_t et = 1 + static_cast<int64_t>(rng.next() % 4);
      for (int64_t i = 0; i < B * Sq * et; ++i) h.extra_idx.push_back(below(rng, pages * P));
      p->extra_indices = make_tensor(h.extra_idx.data(), DType::kI32, {B, Sq, et});
      p->extra_topk_length = maybe_lengths(rng, h.extra_lens, B, et);
    }
    p->attn_sink = maybe_sink(rng, h.sink, Hq);
    p->sm_scale = 0.0625f;
    h.out.assign(static_cast<size_t>(B * Sq * Hq * kLatentDv), 0);
    p->out = make_tensor(h.out.data(), DType::kBF16, {B, Sq, Hq, kLatentDv});
    h.lse.assign(static_cast<size_t>(B * Sq * Hq), 0.0f);
    p->lse = make_tensor(h.lse.data(), DType::kF32, {B, Sq, Hq});
    t.bind("q", &p->q, false);
    t.bind("cache.pages", &p->cache.pages, false);
    t.bind("indices", &p->indices, false);
    if (p->topk_length.defined()) t.bind("topk_length", &p->topk_length, false);
    if (p->extra_indices.defined()) {
      t.bind("extra_cache.pages", &p->extra_cache.pages, false);
      t.bind("extra_indices", &p->extra_indices, false);
      if (p->extra_topk_length.defined()) t.bind("extra_topk_length", &p->extra_topk_length, false);
    }
    if (p->attn_sink.defined()) t.bind("attn_sink", &p->attn_sink, false);
    t.bind("out", &p->out, true);
    t.bind("lse", &p->lse, true);
    cache_mutations(t, &p->cache);
    scale_mutations(t, &p->sm_scale);
    return std::function<Status()>([p] { return sparse_mla_decode(*p, testutil::cpu_exec(2)); });
  };
  fuzz("sparse_mla_decode", make, 1500, 707);
}

TEST(FuzzOps, SparseMlaPrefill) {
  auto make = [](Rng& rng, Trial& t) {
    MlaHolder h;  // its bytes are copied into the trial by bind()
    auto p = std::make_shared<SparseMlaPrefillParams>();
    const int64_t M = 1 + static_cast<int64_t>(rng.next() % 3), Hq = 16, dqk = rng.next() % 2 ? 512 : 576;
    const int64_t Nk = 1 + static_cast<int64_t>(rng.next() % 8), topk_n = 1 + static_cast<int64_t>(rng.next() % 6);
    h.q = random_bf16(rng, static_cast<size_t>(M * Hq * dqk));
    p->q = make_tensor(h.q.data(), DType::kBF16, {M, Hq, dqk});
    h.kv = random_bf16(rng, static_cast<size_t>(Nk * dqk));
    p->kv = make_tensor(h.kv.data(), DType::kBF16, {Nk, dqk});
    for (int64_t i = 0; i < M * topk_n; ++i) {
      h.idx.push_back(rng.next() % 5 == 0 ? -1 : below(rng, Nk));
    }
    p->indices = make_tensor(h.idx.data(), DType::kI32, {M, topk_n});
    p->topk_length = maybe_lengths(rng, h.lens, M, topk_n);
    p->attn_sink = maybe_sink(rng, h.sink, Hq);
    p->sm_scale = 0.0625f;
    p->d_v = rng.next() % 2 ? kLatentDv : static_cast<int>(1 + rng.next() % static_cast<uint64_t>(dqk));
    h.out.assign(static_cast<size_t>(M * Hq * p->d_v), 0);
    p->out = make_tensor(h.out.data(), DType::kBF16, {M, Hq, p->d_v});
    h.lse.assign(static_cast<size_t>(M * Hq), 0.0f);
    p->lse = make_tensor(h.lse.data(), DType::kF32, {M, Hq});
    t.bind("q", &p->q, false);
    t.bind("kv", &p->kv, false);
    t.bind("indices", &p->indices, false);
    if (p->topk_length.defined()) t.bind("topk_length", &p->topk_length, false);
    if (p->attn_sink.defined()) t.bind("attn_sink", &p->attn_sink, false);
    t.bind("out", &p->out, true);
    t.bind("lse", &p->lse, true);
    t.scalar_mutations.push_back(
        [p](Rng& r) { p->d_v = r.next() % 2 ? bump(p->d_v) : static_cast<int>(hostile_i32(r)); });
    scale_mutations(t, &p->sm_scale);
    return std::function<Status()>([p] { return sparse_mla_prefill(*p, testutil::cpu_exec(2)); });
  };
  fuzz("sparse_mla_prefill", make, 1500, 808);
}

struct MqaHolder {
  testutil::QueryHost q;
  std::vector<uint8_t> k;
  std::vector<float> w, k_scales_f, logits;
  std::vector<int32_t> k_scales_i, ks, ke;
};

// The inputs of a valid mqa_logits call (all but logits): 1..max_rows query rows (H = 8, D = 32)
// over 1..40 keys, FP8 or (when mxfp4_too, a third of the time) MXFP4, each row's window inside
// the keys. Bound into t (q_scales where present). Returns the widest window (at least 1).
int64_t mqa_inputs(Rng& rng, MqaHolder& h, MqaLogitsParams* p, int64_t max_rows, bool mxfp4_too, Trial& t) {
  const IndexerFormat f = mxfp4_too && rng.next() % 3 == 0 ? IndexerFormat::kMxfp4 : IndexerFormat::kFp8;
  const int H = 8, D = 32;
  const int64_t M = 1 + static_cast<int64_t>(rng.next() % static_cast<uint64_t>(max_rows));
  const int64_t Nk = 1 + static_cast<int64_t>(rng.next() % 40);
  p->format = f;
  h.q = testutil::make_query(f, M, H, D, rng.normals(static_cast<size_t>(M * H * D)));
  p->q = h.q.q_view(M, 0);
  p->q_scales = h.q.scales_view(M, 0);
  h.w = rng.normals(static_cast<size_t>(M * H));
  p->weights = make_tensor(h.w.data(), DType::kF32, {M, H});
  if (f == IndexerFormat::kFp8) {
    h.k.resize(static_cast<size_t>(Nk * D));
    for (auto& b : h.k) b = codec::f32_to_e4m3(rng.normal());
    p->k = make_tensor(h.k.data(), DType::kF8E4M3, {Nk, D});
    for (int64_t i = 0; i < Nk; ++i) h.k_scales_f.push_back(0.5f + static_cast<float>(rng.uniform()));
    p->k_scales = make_tensor(h.k_scales_f.data(), DType::kF32, {Nk});
  } else {
    h.k.resize(static_cast<size_t>(Nk * D / 2));
    for (auto& b : h.k) b = static_cast<uint8_t>(rng.next());
    p->k = make_tensor(h.k.data(), DType::kU8, {Nk, D / 2});
    for (int64_t i = 0; i < Nk; ++i) h.k_scales_i.push_back(0x7f7f7f7f);
    p->k_scales = make_tensor(h.k_scales_i.data(), DType::kI32, {Nk});
  }
  int64_t widest = 1;
  for (int64_t m = 0; m < M; ++m) {
    const int32_t a = below(rng, Nk + 1);
    const int32_t b = a + below(rng, Nk - a + 1);
    h.ks.push_back(a);
    h.ke.push_back(b);
    widest = std::max<int64_t>(widest, b - a);
  }
  p->ks = make_tensor(h.ks.data(), DType::kI32, {M});
  p->ke = make_tensor(h.ke.data(), DType::kI32, {M});
  t.bind("q", &p->q, false);
  if (p->q_scales.defined()) t.bind("q_scales", &p->q_scales, false);
  t.bind("weights", &p->weights, false);
  t.bind("k", &p->k, false);
  t.bind("k_scales", &p->k_scales, false);
  t.bind("ks", &p->ks, false);
  t.bind("ke", &p->ke, false);
  return widest;
}

TEST(FuzzOps, MqaLogits) {
  auto make = [](Rng& rng, Trial& t) {
    MqaHolder h;  // its bytes are copied into the trial by bind()
    auto p = std::make_shared<MqaLogitsParams>();
    const int64_t widest = mqa_inputs(rng, h, p.get(), 4, /*mxfp4_too=*/true, t);
    const int64_t M = p->q.shape[0];
    p->compressed = rng.next() % 2 == 0;
    const int64_t W = p->compressed ? widest + static_cast<int64_t>(rng.next() % 3) : p->k.shape[0];
    h.logits.assign(static_cast<size_t>(M * W), 0.0f);
    p->logits = make_tensor(h.logits.data(), DType::kF32, {M, W});
    p->clean = rng.next() % 2 == 0;
    t.bind("logits", &p->logits, true);
    t.scalar_mutations.push_back([p](Rng&) {
      p->format = p->format == IndexerFormat::kFp8 ? IndexerFormat::kMxfp4 : IndexerFormat::kFp8;
    });
    t.scalar_mutations.push_back([p](Rng&) { p->compressed = !p->compressed; });
    t.scalar_mutations.push_back([p](Rng&) { p->clean = !p->clean; });
    return std::function<Status()>([p] { return mqa_logits(*p, testutil::cpu_exec(2)); });
  };
  fuzz("mqa_logits", make, 3000, 909);
}

// mqa_logits_chunked: the mqa_logits call above, in row chunks through a caller buffer (its
// bytes, the width, the logits dtype mutated too). The callback checks that every chunk's view lies
// inside the buffer and that the chunks cover the rows once, in order.
TEST(FuzzOps, MqaLogitsChunked) {
  auto make = [](Rng& rng, Trial& t) {
    MqaHolder h;  // its bytes are copied into the trial by bind()
    auto p = std::make_shared<MqaLogitsChunkedParams>();
    MqaLogitsParams& b = p->base;
    const int64_t widest = mqa_inputs(rng, h, &b, 20, /*mxfp4_too=*/false, t);
    b.compressed = rng.next() % 2 == 0;
    p->width = b.compressed ? widest : 0;
    p->logits_dtype = rng.next() % 2 ? DType::kBF16 : DType::kF32;
    const int64_t W = b.compressed ? widest : b.k.shape[0];
    const int64_t rows_fit = 1 + static_cast<int64_t>(rng.next() % 10);
    h.logits.assign(static_cast<size_t>(rows_fit * W), 0.0f);  // the chunk buffer (4 bytes per logit: fits bf16 too)
    auto buf = std::make_shared<TensorView>(make_tensor(h.logits.data(), DType::kU8, {rows_fit * W * 4}));
    t.bind("chunk_buffer", buf.get(), true, /*view_fixed=*/true);
    auto bytes = std::make_shared<size_t>(static_cast<size_t>(rows_fit * W) * dtype_size(p->logits_dtype));
    t.scalar_mutations.push_back([bytes](Rng& r) { *bytes = r.next() % 2 ? *bytes / 2 : 1; });
    t.scalar_mutations.push_back(
        [p](Rng& r) { p->width = r.next() % 2 ? p->width - 1 : static_cast<int64_t>(hostile_i32(r)); });
    t.scalar_mutations.push_back([p](Rng&) { p->logits_dtype = DType::kI32; });
    t.scalar_mutations.push_back([p](Rng&) { p->base.compressed = !p->base.compressed; });
    return std::function<Status()>([p, buf, bytes] {
      p->chunk_buffer = buf->data;
      p->chunk_buffer_bytes = std::min<size_t>(*bytes, static_cast<size_t>(buf->shape[0]));
      int64_t next = 0;
      bool inside = true;
      p->on_chunk = [&](int64_t row0, int64_t rows, const TensorView& v) {
        const uint8_t* lo = static_cast<const uint8_t*>(buf->data);
        const uint8_t* d = static_cast<const uint8_t*>(v.data);
        const int64_t span = v.shape[0] * v.strides[0] * static_cast<int64_t>(dtype_size(v.dtype));
        inside = inside && row0 == next && rows > 0 && d >= lo &&
                 d + span <= lo + static_cast<int64_t>(p->chunk_buffer_bytes);
        next = row0 + rows;
        return Status::Ok();
      };
      const Status s = mqa_logits_chunked(*p, testutil::cpu_exec(2));
      p->on_chunk = nullptr;
      if (s.ok() && (!inside || next != p->base.q.shape[0])) {
        return Status(Code::kInternal, "mqa_logits_chunked: chunks outside the buffer or not covering the rows");
      }
      return s;
    });
  };
  fuzz("mqa_logits_chunked", make, 3000, 1010);
}

}  // namespace
}  // namespace dsattn
