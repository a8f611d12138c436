// Test-side helpers for the indexer ops (paged_mqa_logits, mqa_logits, topk, paged_mqa_topk), for
// CPU and GPU tests alike. Header-only, host-only, depends on include/dsattn only.
//
//  * Rng: a small deterministic generator (splitmix64), same sequence on every platform.
//  * quantize_fp8 / quantize_mxfp4: the writer rules of SPEC §2.1/§2.2 built on dsattn/codecs.h.
//  * make_query: FP8 or MXFP4 query tensors plus their decoded values.
//  * build_paged_cache: an indexer cache written byte by byte from the SPEC §2.1/§2.2 layouts
//    (independent of the library's cache writer), with shuffled physical pages, padded page strides,
//    spare pages and spare block-table columns. Every byte the ops must not read is poisoned
//    (0xFF: E4M3 NaN values, NaN fp32 scales, NaN UE8M0 exponents), so a stray read shows up as NaN.
//  * ref_logit: the SPEC §3.1 formula in double on decoded values (a reference independent of src/).
//  * make_paged_case: a whole random decode problem (cache, q, weights, lengths, varlen or not) with
//    PagedCase::args() giving the op inputs and PagedCase::ref(r, t) the reference logit;
//    ref_rows(case): every row's reference logits at once, on all hardware threads.
//  * parallel_items / parallel_chunks: fn(i) for i in [0, n), or fn(row, t0, t1) over runs of each
//    row's states, on all hardware threads (reference loops, cache quantization).
//  * check_logits_row / check_topk_row: gtest-free checkers for outputs of any backend.
//  * view(): TensorViews over std::vectors.
//  * EnvScope: an environment variable (the ops' tuning knobs, read per call) set for a scope.
#pragma once
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dsattn/codecs.h"
#include "dsattn/formats.h"
#include "dsattn/ops.h"
#include "dsattn/tensor.h"

namespace dsattn {
namespace testutil {

// Sets an environment variable (an op's tuning knob) for a scope, or unsets it when value is
// nullptr; its previous value (or its absence) is restored however the scope ends.
struct EnvScope {
  const char* name;
  bool had = false;
  std::string old;
  EnvScope(const char* n, const char* value) : name(n) {
    if (const char* v = std::getenv(n)) {
      had = true;
      old = v;
    }
    if (value != nullptr) {
      setenv(n, value, 1);
    } else {
      unsetenv(n);
    }
  }
  ~EnvScope() {
    if (had) {
      setenv(name, old.c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  EnvScope(const EnvScope&) = delete;
  EnvScope& operator=(const EnvScope&) = delete;
};

// ---------------------------------------------------------------- RNG
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  float uniform(float lo, float hi) { return lo + static_cast<float>(uniform() * (hi - lo)); }
  int64_t randint(int64_t lo, int64_t hi) {  // [lo, hi]
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
  float normal() {  // Box-Muller
    const double u1 = uniform() + 1e-300, u2 = uniform();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  std::vector<float> normals(size_t n, float sigma = 1.0f) {
    std::vector<float> v(n);
    for (float& x : v) x = sigma * normal();
    return v;
  }
  template <typename T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[static_cast<size_t>(next() % i)]);
  }

 private:
  uint64_t s_;
};

// ---------------------------------------------------------------- views
template <typename T>
TensorView view(std::vector<T>& v, DType dt, std::initializer_list<int64_t> shape) {
  return make_tensor(v.data(), dt, shape);
}
template <typename T>
TensorView view(std::vector<T>& v, DType dt, std::initializer_list<int64_t> shape,
                std::initializer_list<int64_t> strides) {
  return make_tensor_strided(v.data(), dt, shape, strides);
}

// ---------------------------------------------------------------- quantizers (SPEC §2.1 / §2.2)
// FP8 state: scale = 2^ceil(log2(amax / 448)) (pow2) or amax / 448, codes = e4m3(x / scale).
// An all-zero state gets scale 1. Returns the scale.
inline float quantize_fp8(const float* x, int d, uint8_t* codes, bool pow2_scale = true) {
  float amax = 0.0f;
  for (int i = 0; i < d; ++i) amax = std::max(amax, std::fabs(x[i]));
  float scale = 1.0f;
  if (amax > 0.0f) {
    scale = pow2_scale ? codec::ue8m0_to_f32(codec::ue8m0_ceil(amax / codec::kE4M3Max)) : amax / codec::kE4M3Max;
  }
  for (int i = 0; i < d; ++i) codes[i] = codec::f32_to_e4m3(x[i] / scale);
  return scale;
}

// MXFP4: per block of 32 values e = ue8m0_ceil(amax / 6), nibble = e2m1(x / 2^(e - 127)); the D/2
// packed bytes (low nibble = even element) go to `packed`; returns the int32 of D/32 scale bytes
// (byte i = block i).
inline uint32_t quantize_mxfp4(const float* x, int d, uint8_t* packed) {
  uint32_t scales = 0;
  for (int b = 0; b < d / 32; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    const uint8_t e = codec::ue8m0_ceil(amax / 6.0f);
    scales |= static_cast<uint32_t>(e) << (8 * b);
    const double inv = std::ldexp(1.0, 127 - static_cast<int>(e));
    for (int i = 0; i < 32; i += 2) {
      const uint8_t lo = codec::f32_to_e2m1(static_cast<float>(x[b * 32 + i] * inv));
      const uint8_t hi = codec::f32_to_e2m1(static_cast<float>(x[b * 32 + i + 1] * inv));
      packed[(b * 32 + i) / 2] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
  return scales;
}

// Decoded MXFP4 values: e2m1(nibble) * 2^(e - 127).
inline void dequant_mxfp4(const uint8_t* packed, uint32_t scales, int d, float* out) {
  for (int i = 0; i < d; ++i) {
    const uint8_t nib = (i % 2 == 0) ? (packed[i / 2] & 0xF) : (packed[i / 2] >> 4);
    const uint8_t e = static_cast<uint8_t>((scales >> (8 * (i / 32))) & 0xFF);
    out[i] = static_cast<float>(codec::e2m1_to_f32(nib) * static_cast<double>(codec::ue8m0_to_f32(e)));
  }
}

// ---------------------------------------------------------------- queries
struct QueryHost {
  IndexerFormat format = IndexerFormat::kFp8;
  int64_t rows = 0;
  int heads = 0, head_dim = 0;
  std::vector<uint8_t> q;       // FP8: [rows, H, D] E4M3 codes; MXFP4: [rows, H, D/2] packed E2M1
  std::vector<int32_t> scales;  // MXFP4 only: [rows, H] packed UE8M0
  std::vector<float> deq;       // [rows, H, D] the values the op multiplies (decoded, scaled for MXFP4)

  // q as [B, N, H, D(/2)] (rows = B*N) or, with n == 0, varlen [rows, H, D(/2)].
  TensorView q_view(int64_t b, int64_t n) {
    const int64_t last = format == IndexerFormat::kFp8 ? head_dim : head_dim / 2;
    const DType dt = format == IndexerFormat::kFp8 ? DType::kF8E4M3 : DType::kU8;
    return n == 0 ? make_tensor(q.data(), dt, {rows, heads, last}) : make_tensor(q.data(), dt, {b, n, heads, last});
  }
  TensorView scales_view(int64_t b, int64_t n) {
    if (format == IndexerFormat::kFp8) return TensorView{};
    return n == 0 ? make_tensor(scales.data(), DType::kI32, {rows, heads})
                  : make_tensor(scales.data(), DType::kI32, {b, n, heads});
  }
};

// Quantizes values [rows, H, D]: FP8 codes = e4m3(value) (no scale: it is folded into the weights);
// MXFP4 per (row, head) with quantize_mxfp4.
inline QueryHost make_query(IndexerFormat f, int64_t rows, int heads, int head_dim, const std::vector<float>& values) {
  QueryHost q;
  q.format = f;
  q.rows = rows;
  q.heads = heads;
  q.head_dim = head_dim;
  const int64_t n = rows * heads;
  q.deq.resize(static_cast<size_t>(n * head_dim));
  if (f == IndexerFormat::kFp8) {
    q.q.resize(static_cast<size_t>(n * head_dim));
    for (size_t i = 0; i < q.q.size(); ++i) {
      q.q[i] = codec::f32_to_e4m3(values[i]);
      q.deq[i] = codec::e4m3_to_f32(q.q[i]);
    }
  } else {
    q.q.resize(static_cast<size_t>(n * head_dim / 2));
    q.scales.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      uint8_t* packed = q.q.data() + i * head_dim / 2;
      q.scales[static_cast<size_t>(i)] = static_cast<int32_t>(quantize_mxfp4(values.data() + i * head_dim, head_dim, packed));
      dequant_mxfp4(packed, static_cast<uint32_t>(q.scales[static_cast<size_t>(i)]), head_dim, q.deq.data() + i * head_dim);
    }
  }
  return q;
}

// ---------------------------------------------------------------- threads
// fn(i) for every i in [0, n), each exactly once, on `threads` threads (0: the hardware's; the
// calling thread is one of them), items handed out one at a time (their costs differ: rows of
// different lengths). fn must be safe to call concurrently. For the tests' reference loops, whose
// double-precision dot products (H x D multiply-adds in one dependent chain per head: ~10 us per
// state at H = 64, D = 128) made up most of the GPU tests' time when run on one thread, and for
// the quantization of the test caches (build_paged_cache).
template <class Fn>
void parallel_items(int64_t n, Fn&& fn, int threads = 0) {
  if (n <= 0) return;
  int T = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
  if (T < 1) T = 1;
  if (T > n) T = static_cast<int>(n);
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t i = next++; i < n; i = next++) fn(i);
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(T - 1));
  for (int t = 1; t < T; ++t) pool.emplace_back(work);
  work();
  for (std::thread& th : pool) th.join();
}

// fn(r, t0, t1) over every row r < rows cut into runs [t0, t1) of at most `chunk` states of its
// [0, len(r)), the runs on parallel_items' threads.
template <class LenFn, class Fn>
void parallel_chunks(int64_t rows, LenFn&& len, int64_t chunk, Fn&& fn, int threads = 0) {
  std::vector<std::pair<int64_t, int64_t>> runs;  // (row, first state)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t t0 = 0, L = len(r); t0 < L; t0 += chunk) runs.emplace_back(r, t0);
  }
  parallel_items(
      static_cast<int64_t>(runs.size()),
      [&](int64_t i) {
        const int64_t r = runs[static_cast<size_t>(i)].first, t0 = runs[static_cast<size_t>(i)].second;
        fn(r, t0, std::min(t0 + chunk, static_cast<int64_t>(len(r))));
      },
      threads);
}

// ---------------------------------------------------------------- paged cache
struct PagedCacheOptions {
  IndexerFormat format = IndexerFormat::kFp8;
  int states_per_page = 64;       // S
  int head_dim = 128;             // D
  int64_t stride_pad_bytes = 0;   // page_stride = S * state_bytes + pad (keep pad a multiple of 4)
  bool shuffle_pages = true;      // physical pages in random order
  int64_t extra_pages = 0;        // poisoned physical pages nobody references
  int64_t extra_table_cols = 0;   // block-table columns past what the longest request needs
  int32_t table_fill = -1;        // value of unused block-table entries
  bool pow2_scale = true;         // FP8 writer scale rule (false: amax / 448)
};

struct PagedCacheHost {
  PagedCacheOptions opt;
  int64_t page_stride = 0, num_pages = 0, batch = 0, max_pages = 0;
  std::vector<uint8_t> pages;           // [num_pages, page_stride]
  std::vector<int32_t> block_table;     // [batch, max_pages]
  std::vector<int64_t> lengths;         // states written per request
  // Per request b, state t: decoded key values [L_b * D] (FP8: e4m3 codes decoded, unscaled; MXFP4:
  // e2m1 * 2^(e-127)) and the per-state scale [L_b] (FP8: the fp32 scale; MXFP4: 1).
  std::vector<std::vector<float>> key_values, key_scales;

  IndexerCache cache() {
    IndexerCache c;
    c.format = opt.format;
    c.states_per_page = opt.states_per_page;
    c.head_dim = opt.head_dim;
    c.page_stride_bytes = page_stride;
    c.pages = make_tensor(pages.data(), DType::kU8, {num_pages, page_stride});
    return c;
  }
  TensorView block_table_view() { return make_tensor(block_table.data(), DType::kI32, {batch, max_pages}); }
  // Physical page holding state t of request b.
  int64_t page_of(int64_t b, int64_t t) const { return block_table[static_cast<size_t>(b * max_pages + t / opt.states_per_page)]; }
};

// keys[b]: request b's float keys [L_b, D] row-major. Quantizes each state, writes it into its page
// (SPEC layout), and fills the block table.
inline PagedCacheHost build_paged_cache(const std::vector<std::vector<float>>& keys, const PagedCacheOptions& opt,
                                        Rng& rng) {
  PagedCacheHost c;
  c.opt = opt;
  const int S = opt.states_per_page, D = opt.head_dim;
  const bool fp8 = opt.format == IndexerFormat::kFp8;
  const int64_t state_bytes = indexer_state_bytes(opt.format, D);
  c.page_stride = S * state_bytes + opt.stride_pad_bytes;
  c.batch = static_cast<int64_t>(keys.size());
  int64_t used_pages = 0, longest = 0;
  for (const auto& k : keys) {
    const int64_t L = static_cast<int64_t>(k.size()) / D;
    c.lengths.push_back(L);
    used_pages += (L + S - 1) / S;
    longest = std::max(longest, (L + S - 1) / S);
  }
  c.num_pages = used_pages + opt.extra_pages;
  c.max_pages = longest + opt.extra_table_cols;
  c.pages.assign(static_cast<size_t>(c.num_pages * c.page_stride), 0xFF);
  c.block_table.assign(static_cast<size_t>(c.batch * c.max_pages), opt.table_fill);
  std::vector<int32_t> phys(static_cast<size_t>(c.num_pages));
  std::iota(phys.begin(), phys.end(), 0);
  if (opt.shuffle_pages) rng.shuffle(phys);
  size_t next = 0;
  const int64_t scale_off = indexer_scale_offset(opt.format, S, D);
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t L = c.lengths[static_cast<size_t>(b)];
    for (int64_t i = 0; i < (L + S - 1) / S; ++i) c.block_table[static_cast<size_t>(b * c.max_pages + i)] = phys[next++];
    c.key_values.emplace_back(static_cast<size_t>(L * D));
    c.key_scales.emplace_back(static_cast<size_t>(L));
  }
  // Each state's codes and scale go to their own bytes of their page: the states are quantized in
  // runs of 1024 on parallel_chunks' threads (no random numbers are drawn here, so the case is the
  // same).
  const auto request_len = [&](int64_t b) { return c.lengths[static_cast<size_t>(b)]; };
  parallel_chunks(c.batch, request_len, 1024, [&](int64_t b, int64_t t0, int64_t t1) {
    std::vector<float>& vals = c.key_values[static_cast<size_t>(b)];
    std::vector<float>& scales = c.key_scales[static_cast<size_t>(b)];
    for (int64_t t = t0; t < t1; ++t) {
      uint8_t* page = c.pages.data() + c.page_of(b, t) * c.page_stride;
      const int64_t s = t % S;
      const float* x = keys[static_cast<size_t>(b)].data() + t * D;
      float* out = vals.data() + t * D;
      if (fp8) {
        uint8_t* codes = page + s * D;
        const float scale = quantize_fp8(x, D, codes, opt.pow2_scale);
        std::memcpy(page + scale_off + 4 * s, &scale, 4);
        for (int d = 0; d < D; ++d) out[d] = codec::e4m3_to_f32(codes[d]);
        scales[static_cast<size_t>(t)] = scale;
      } else {
        uint8_t* packed = page + s * (D / 2);
        const uint32_t e = quantize_mxfp4(x, D, packed);
        std::memcpy(page + scale_off + 4 * s, &e, 4);
        dequant_mxfp4(packed, e, D, out);
        scales[static_cast<size_t>(t)] = 1.0f;
      }
    }
  });
  return c;
}

// ---------------------------------------------------------------- reference
// SPEC §3.1 in double on decoded values: scale * sum_h w[h] * relu(sum_d q[h, d] * k[d]).
// q [H, D], w [H], k [D]. relu keeps NaN (a NaN key poisons the logit instead of vanishing).
inline double ref_logit(const float* q, const float* w, const float* k, double scale, int heads, int d) {
  double acc = 0.0;
  for (int h = 0; h < heads; ++h) {
    double dot = 0.0;
    for (int i = 0; i < d; ++i) dot += static_cast<double>(q[h * d + i]) * k[i];
    if (!(dot <= 0.0)) acc += static_cast<double>(w[h]) * dot;  // relu; a NaN dot stays NaN
  }
  return scale * acc;
}

// ---------------------------------------------------------------- a whole paged decode problem
struct PagedCaseSpec {
  IndexerFormat format = IndexerFormat::kFp8;
  int batch = 2, next_n = 1, heads = 8, head_dim = 32, states_per_page = 64;
  bool varlen = false;        // rows = batch * next_n flattened rows, each with a random request
  bool lens_per_row = true;   // non-varlen: context_lens [B, N] (random <= L_b) or [B] (the N rule)
  std::vector<int64_t> lengths;  // states per request L_b; empty: random in [0, max_len]
  int64_t max_len = 200;
  int64_t stride_pad_bytes = 0;
  bool shuffle_pages = true;
  int64_t extra_pages = 1, extra_table_cols = 1;
  int64_t extra_width = 3;    // logits columns past the longest context
  float key_sigma = 1.0f, q_sigma = 1.0f;
  int64_t key_period = 0;     // > 0: state t's key is state (t mod key_period)'s (scores repeat: ties)
  float key_ramp = 0.0f;      // state t of L: key scaled by 1 + key_ramp t / L (> 0: the best scores late)
  uint64_t seed = 1;
};

struct PagedCase {
  PagedCaseSpec spec;
  PagedCacheHost cache;
  QueryHost q;
  std::vector<float> weights;            // [rows, H]
  std::vector<int32_t> context_lens;     // [B, N], [B] or varlen [rows]
  std::vector<int32_t> row_request;      // varlen: [rows]
  int64_t rows = 0, max_context = 0;
  std::vector<int64_t> row_ctx, row_req;  // per row: states visible, block-table row

  // Inputs for paged_mqa_logits / paged_mqa_topk (host tensors over this object's vectors).
  PagedIndexerArgs args() {
    PagedIndexerArgs a;
    const int64_t B = spec.batch, N = spec.next_n;
    a.q = spec.varlen ? q.q_view(rows, 0) : q.q_view(B, N);
    a.q_scales = spec.varlen ? q.scales_view(rows, 0) : q.scales_view(B, N);
    a.weights = make_tensor(weights.data(), DType::kF32, {rows, spec.heads});
    a.cache = cache.cache();
    a.block_table = cache.block_table_view();
    if (spec.varlen) {
      a.context_lens = make_tensor(context_lens.data(), DType::kI32, {rows});
      a.row_request = make_tensor(row_request.data(), DType::kI32, {rows});
    } else if (spec.lens_per_row) {
      a.context_lens = make_tensor(context_lens.data(), DType::kI32, {B, N});
    } else {
      a.context_lens = make_tensor(context_lens.data(), DType::kI32, {B});
    }
    return a;
  }
  // Reference logit of row r, state t (t < row_ctx[r]).
  double ref(int64_t r, int64_t t) const {
    const int H = spec.heads, D = spec.head_dim;
    const size_t b = static_cast<size_t>(row_req[static_cast<size_t>(r)]);
    return ref_logit(q.deq.data() + r * H * D, weights.data() + r * H, cache.key_values[b].data() + t * D,
                     cache.key_scales[b][static_cast<size_t>(t)], H, D);
  }
};

inline PagedCase make_paged_case(const PagedCaseSpec& spec) {
  PagedCase c;
  c.spec = spec;
  Rng rng(spec.seed);
  const int64_t B = spec.batch, N = spec.next_n;
  const int H = spec.heads, D = spec.head_dim;
  std::vector<std::vector<float>> keys;
  std::vector<int64_t> L = spec.lengths;
  if (L.empty()) {
    for (int64_t b = 0; b < B; ++b) L.push_back(rng.randint(0, spec.max_len));
  }
  for (int64_t b = 0; b < B; ++b) keys.push_back(rng.normals(static_cast<size_t>(L[static_cast<size_t>(b)] * D), spec.key_sigma));
  if (spec.key_ramp != 0.0f) {
    for (auto& kb : keys) {
      const size_t n = kb.size() / static_cast<size_t>(D);
      for (size_t t = 0; t < n; ++t) {
        const float f = 1.0f + spec.key_ramp * static_cast<float>(t) / static_cast<float>(n);
        for (int d = 0; d < D; ++d) kb[t * static_cast<size_t>(D) + static_cast<size_t>(d)] *= f;
      }
    }
  }
  if (spec.key_period > 0) {
    for (auto& kb : keys) {
      const size_t P = static_cast<size_t>(spec.key_period * D);
      for (size_t i = P; i < kb.size(); ++i) kb[i] = kb[i % P];
    }
  }
  PagedCacheOptions o;
  o.format = spec.format;
  o.states_per_page = spec.states_per_page;
  o.head_dim = D;
  o.stride_pad_bytes = spec.stride_pad_bytes;
  o.shuffle_pages = spec.shuffle_pages;
  o.extra_pages = spec.extra_pages;
  o.extra_table_cols = spec.extra_table_cols;
  // A separate stream for the page shuffle: layout options must not change the data.
  Rng page_rng(spec.seed ^ 0x5A5A5A5A5A5A5A5Aull);
  c.cache = build_paged_cache(keys, o, page_rng);
  c.rows = B * N;
  for (int64_t r = 0; r < c.rows; ++r) {
    int64_t b = r / N, ctx;
    const int64_t j = r % N;
    if (spec.varlen) {
      b = rng.randint(0, B - 1);
      ctx = rng.randint(0, L[static_cast<size_t>(b)]);
      c.row_request.push_back(static_cast<int32_t>(b));
      c.context_lens.push_back(static_cast<int32_t>(ctx));
    } else if (spec.lens_per_row) {
      ctx = rng.randint(0, L[static_cast<size_t>(b)]);
      c.context_lens.push_back(static_cast<int32_t>(ctx));
    } else {
      ctx = std::max<int64_t>(0, L[static_cast<size_t>(b)] - N + j + 1);
      if (j == 0) c.context_lens.push_back(static_cast<int32_t>(L[static_cast<size_t>(b)]));
    }
    c.row_req.push_back(b);
    c.row_ctx.push_back(ctx);
  }
  c.q = make_query(spec.format, c.rows, H, D, rng.normals(static_cast<size_t>(c.rows * H * D), spec.q_sigma));
  c.weights = rng.normals(static_cast<size_t>(c.rows * H));
  c.max_context = (L.empty() ? 0 : *std::max_element(L.begin(), L.end())) + spec.extra_width;
  return c;
}

// Every row's reference logits (PagedCase::ref of states [0, row_ctx[r])) as float, computed once
// in runs of kRefChunk states on parallel_chunks' threads: a test that checks several routes or
// kernels against the same case computes them once instead of once per check.
constexpr int64_t kRefChunk = 2048;
inline std::vector<std::vector<float>> ref_rows(const PagedCase& c, int threads = 0) {
  std::vector<std::vector<float>> out(static_cast<size_t>(c.rows));
  for (int64_t r = 0; r < c.rows; ++r) out[static_cast<size_t>(r)].resize(static_cast<size_t>(c.row_ctx[static_cast<size_t>(r)]));
  const auto row_len = [&](int64_t r) { return c.row_ctx[static_cast<size_t>(r)]; };
  parallel_chunks(
      c.rows, row_len, kRefChunk,
      [&](int64_t r, int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) out[static_cast<size_t>(r)][static_cast<size_t>(t)] = static_cast<float>(c.ref(r, t));
      },
      threads);
  return out;
}

// ---------------------------------------------------------------- checkers (gtest-free)
// Each returns "" when the row is acceptable, else a description of the first problem, so any test
// framework can assert on it: EXPECT_EQ(check_logits_row(...), "").

// A logits row from some backend against reference values `want` on [0, ctx): |got - want| <=
// atol + rtol * |want| (NaN must match NaN); on [ctx, width) -inf exactly when `clean`.
inline std::string check_logits_row(const float* got, const double* want, int64_t ctx, int64_t width, bool clean,
                                    double rtol, double atol) {
  for (int64_t t = 0; t < ctx; ++t) {
    const double w = want[t], g = got[t];
    const bool ok = std::isnan(w) ? std::isnan(g) : std::fabs(g - w) <= atol + rtol * std::fabs(w);
    if (!ok) return "column " + std::to_string(t) + ": got " + std::to_string(g) + ", want " + std::to_string(w);
  }
  if (clean) {
    for (int64_t t = ctx; t < width; ++t) {
      if (!(got[t] == -std::numeric_limits<float>::infinity())) {
        return "column " + std::to_string(t) + " (>= ctx " + std::to_string(ctx) + "): got " + std::to_string(got[t]) +
               ", want -inf";
      }
    }
  }
  return "";
}

// A top-k row (indices in any order) against reference scores [0, len), for backends whose
// scores may differ from the reference by rounding: exactly min(len, k) distinct indices in
// [0, len) first, then -1 padding; and no unselected state beats a selected one by more than
// `tol` (NaN counts as -inf here). With tol = 0 and exact scores this pins the set up to ties.
inline std::string check_topk_row(const float* scores, int64_t len, int k, const int32_t* idx, double tol) {
  const int64_t take = std::min<int64_t>(len, k);
  std::vector<char> chosen(static_cast<size_t>(len), 0);
  auto score = [&](int64_t i) {
    const double v = scores[i];
    return std::isnan(v) ? -std::numeric_limits<double>::infinity() : v;
  };
  double worst_chosen = std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < k; ++j) {
    const int32_t i = idx[j];
    if (j >= take) {
      if (i != -1) return "slot " + std::to_string(j) + ": got " + std::to_string(i) + ", want -1 padding";
      continue;
    }
    if (i < 0 || i >= len) return "slot " + std::to_string(j) + ": index " + std::to_string(i) + " outside [0, " + std::to_string(len) + ")";
    if (chosen[static_cast<size_t>(i)]) return "index " + std::to_string(i) + " selected twice";
    chosen[static_cast<size_t>(i)] = 1;
    worst_chosen = std::min(worst_chosen, score(i));
  }
  for (int64_t i = 0; i < len; ++i) {
    if (!chosen[static_cast<size_t>(i)] && score(i) > worst_chosen + tol) {
      return "unselected index " + std::to_string(i) + " (score " + std::to_string(score(i)) +
             ") beats a selected one (score " + std::to_string(worst_chosen) + ")";
    }
  }
  return "";
}

// ---------------------------------------------------------------- misc
constexpr float kInf = std::numeric_limits<float>::infinity();
// A recognizable finite value for "must stay untouched" checks (finite, so EXPECT_EQ can compare it).
constexpr float kPoison = 12345.678f;
constexpr uint16_t kPoisonBf16 = 0x4640;  // bf16 12288.0

inline float bf16_value(uint16_t h) { return codec::bf16_to_f32(h); }

// ---------------------------------------------------------------- random cases
// The random-case GPU tests (*RandomCases): an environment variable as an int (dflt when unset or
// empty), for DSATTN_TEST_RANDOM_CASES / DSATTN_TEST_RANDOM_SEED.
inline int env_int(const char* name, int dflt) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : dflt;
}

// Case i's seed of a draw: base (DSATTN_TEST_RANDOM_SEED, default kRandomSeedDefault) times a
// prime, plus i and a salt that keeps the draws of different tests apart. One formula for the
// tests that run a draw and the host checks that replay it (GpuTopkDraw.ReachesEveryPlan).
constexpr int kRandomSeedDefault = 2026;
inline uint64_t random_seed_base() {
  return static_cast<uint64_t>(env_int("DSATTN_TEST_RANDOM_SEED", kRandomSeedDefault));
}
inline uint64_t random_case_seed(uint64_t base, int i, uint64_t salt) {
  return base * 100003 + static_cast<uint64_t>(i) + salt;
}

// Their draws.
struct Draw {
  Rng rng;
  explicit Draw(uint64_t seed) : rng(seed) {}
  int below(int n) { return static_cast<int>(rng.randint(0, n - 1)); }  // [0, n)
  bool pct(int p) { return below(100) < p; }                              // true with p %
  int pick(std::initializer_list<int> v) { return *(v.begin() + below(static_cast<int>(v.size()))); }
};

// An indexer problem's geometry drawn over SPEC §3.1's coverage, the DeepSeek values weighted up:
// format (a quarter MXFP4), head dim, heads, states per page (1..256, odd ones too), the length
// layout, next_n, and a batch that is 1 in one_pct % of the draws, else mostly 2-8, sometimes
// 9-64, and up to max_batch in 10 %.
enum class LensLayout { kPerRow, kPerRequest, kVarlen };  // context_lens [B, N], [B], varlen [rows]
struct IndexerGeometry {
  IndexerFormat format = IndexerFormat::kFp8;
  int head_dim = 128, heads = 64, states_per_page = 64, next_n = 1, batch = 1;
  LensLayout layout = LensLayout::kPerRow;
};
// The first part alone (format, head dim, heads): what a prefill problem (mqa_logits) draws.
inline void draw_indexer_heads(Draw& d, IndexerGeometry* g) {
  g->format = d.pct(25) ? IndexerFormat::kMxfp4 : IndexerFormat::kFp8;
  g->head_dim = d.pct(60) ? 128 : d.pick({32, 64});
  g->heads = d.pct(35) ? 64 : d.pick({8, 16, 24, 32, 32, 48});
}
inline IndexerGeometry draw_indexer_geometry(Draw& d, int one_pct, int max_batch) {
  IndexerGeometry g;
  draw_indexer_heads(d, &g);
  g.states_per_page = d.pct(40) ? d.pick({32, 64}) : d.pick({1, 2, 3, 7, 8, 16, 24, 40, 48, 96, 128, 200, 256});
  const int lm = d.below(100);
  g.layout = lm < 45 ? LensLayout::kPerRow : lm < 75 ? LensLayout::kPerRequest : LensLayout::kVarlen;
  g.next_n = d.pct(50) ? 1 : d.pct(50) ? 2 : 3 + d.below(6);
  const int bm = d.below(100);
  g.batch = bm < one_pct ? 1 : bm < 65 ? 2 + d.below(7) : bm < 90 ? 9 + d.below(56) : 65 + d.below(max_batch - 64);
  return g;
}

// A top-k k for the top-k draws (topk, paged_mqa_topk): half the DeepSeek values (2048 twice as
// often), a quarter the edges and odd sizes (1, 2, 7, 64, 100, 256, 4096), a quarter any of 1..4096.
inline int draw_topk_k(Draw& d) {
  return d.pct(50) ? d.pick({512, 1024, 2048, 2048}) : d.pct(50) ? d.pick({1, 2, 7, 64, 100, 256, 4096}) : 1 + d.below(4096);
}

// A case name's list (lengths): " v0 v1 ..." for the first `most` values, then " ..." if more.
template <class T>
void append_values(std::string* name, const std::vector<T>& v, size_t most = 12) {
  for (size_t i = 0; i < v.size() && i < most; ++i) *name += " " + std::to_string(v[i]);
  if (v.size() > most) *name += " ...";
}

}  // namespace testutil
}  // namespace dsattn
