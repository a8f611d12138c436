// dsattn demo: one decode step of DeepSeek sparse attention in a preset's real cache geometry.
//
// Per indexer layer (one per distinct compress ratio that has an indexer):
//   write_indexer_cache / write_latent_cache (+ the sliding-window cache of V4-style presets)
//   -> paged_mqa_logits -> topk              (unfused: logits written to memory)
//   -> paged_mqa_topk                        (fused: the same selection without the logits)
//   -> sparse_mla_decode over the fused top-k slot ids (+ window).
// Runs on the GPU when one is usable (per stage: a stage the GPU does not implement runs on the CPU
// and says so), cross-checks GPU results against the CPU reference, and spot-checks the primary
// results against values recomputed here from the cache bytes (tools/cache_decode.h).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cache_decode.h"
#include "cli_args.h"
#include "commands.h"
#include "demo_buffers.h"
#include "dsattn/codecs.h"
#include "dsattn/geometry.h"
#include "dsattn/ops.h"
#include "preset_arg.h"

namespace dsattn {
namespace cli {

namespace {

// Request b holds `context - (b * 37) % 128` tokens: unequal lengths, partial last pages.
constexpr int64_t kLenStep = 37, kLenMod = 128;
constexpr int64_t kWriteChunk = 8192;      // rows per cache-writer call (bounds host memory)
constexpr double kProgressMacs = 2e9;      // indexer work above which progress goes to stderr
constexpr double kProgressStates = 1 << 20;  // cache states above which progress goes to stderr
constexpr int kSampleStates = 256;         // writer round-trip sample
constexpr int kSampleLogits = 256;         // logits spot-check sample
constexpr double kMaxHostBytes = 16.0 * (1 << 30);  // refuse runs that would need more host memory

// Check thresholds (what each comparison can legitimately differ by).
constexpr double kFp8RoundTrip = 1.0 / 16;   // E4M3 rounding: <= 2^-4 relative per normal value
constexpr double kFp4RoundTrip = 1.0 / 4;    // E2M1 rounding: <= 2^-2 relative per normal value
constexpr double kLogitsTol = 1e-3;          // fp32 accumulation vs double, relative
constexpr double kOverlapMin = 0.99;         // top-k sets: only near-ties may swap between backends
constexpr double kMlaTol = 1e-2;             // bf16 outputs (2^-9 rounding) vs double, relative L2
constexpr double kLseTol = 1e-3;             // absolute, natural log

// Value streams of the deterministic inputs (so checks can recompute any single value).
enum Stream : uint64_t { kIdxKey = 1, kIdxKeyAmp, kIdxQ, kIdxW, kLatKv, kLatAmp, kMlaQ, kWinKv, kSink, kPerm };

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
uint64_t hash3(uint64_t seed, uint64_t stream, uint64_t i) { return mix64(seed ^ mix64(stream ^ mix64(i))); }
// Uniform in [-1, 1).
float uval(uint64_t seed, uint64_t stream, uint64_t i) {
  return static_cast<float>(static_cast<double>(hash3(seed, stream, i) >> 40) / double(1 << 23) - 1.0);
}
// Per-row amplitude in {1/4, 1/2, 1, 2, 4}: different quantization scales per state/token.
float amp(uint64_t seed, uint64_t stream, uint64_t i) {
  return std::ldexp(1.0f, static_cast<int>(hash3(seed, stream, i) % 5) - 2);
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof(b), f, v);
  return b;
}
std::string shape_text(const std::vector<int64_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? "," : "") + std::to_string(s[i]);
  return o + "]";
}
std::string time_text(double ms) {
  if (ms < 1) return fmt("%.3f ms", ms);
  if (ms < 1000) return fmt("%.1f ms", ms);
  return fmt("%.2f s", ms / 1000);
}

struct Row {
  std::string stage, layer, shape, backend, time, check;
  bool ok = true;
};

struct StageRun {
  bool gpu = false;       // ran on the GPU
  bool fallback = false;  // the GPU reported kNotImplemented; ran on the CPU
  double ms = 0;
};

// Everything one indexer layer needs. R = B*N query rows, row (b, j) = b*N + j.
struct Layer {
  LayerGeometry g;
  int r = 0, S = 0, D = 0, H = 0, k = 0, Hq = 0, dqk = 0;
  int64_t R = 0, W = 0;               // rows, logits width (max_pages * S)
  std::vector<int32_t> ctx;           // [R] states visible to each row
  std::vector<int64_t> states;        // [B] states stored per request
  std::vector<int64_t> state_base;    // [B] global id of request b's first state
  int64_t total_states = 0, num_pages = 0, max_pages = 0;
  std::vector<int32_t> bt_host;       // [B, max_pages]
  Buf block_table, idx_cache, lat_cache, q, q_scales, weights, ctx_lens, ends;
  Buf logits, topk_idx, topk_val, fused_idx, fused_val, fused_slot;
  Buf mq, out, lse, sink, win_cache, win_idx;
  // Window cache (V4-style presets): request b keeps tokens [win_first[b], L_b) in its own pages.
  int Pw = 0, window = 0;
  int64_t win_pages = 0, win_total = 0;
  std::vector<int64_t> win_first, win_base;
  std::vector<int32_t> win_bt;        // [B, win_max_pages]
  int64_t win_max_pages = 0;
  std::string label;
};

class Demo {
 public:
  Demo(const DemoOptions& o, const ModelPreset& p, bool gpu) : o_(o), p_(p), gpu_(gpu) {
    for (int b = 0; b < o.batch; ++b)
      tokens_.push_back(std::max<int64_t>(o.next_n, o.context - (b * kLenStep) % kLenMod));
  }
  const std::vector<int64_t>& tokens() const { return tokens_; }
  // Progress on stderr: one self-overwriting line on a terminal, else one line per step (long runs).
  void set_progress(bool on, bool live) {
    progress_ = on;
    live_ = live;
  }
  void end_progress() const {
    if (progress_ && live_) std::fprintf(stderr, "\r\033[K");
  }
  Status run_layer(const LayerGeometry& g);
  const std::vector<Row>& rows() const { return rows_; }
  // Why stages fell back to the CPU (the GPU's kNotImplemented messages), in first-seen order.
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  Status setup(Layer& l);
  Status write_stage(Layer& l, const char* stage, int64_t total, int dim, bool latent_values,
                     const std::function<void(int64_t, float*, int32_t*)>& fill,
                     const std::function<Status(bool, const TensorView&, const TensorView&)>& write,
                     Buf& cache, const std::function<double()>& round_trip);
  Status logits_stage(Layer& l);
  Status topk_stage(Layer& l);
  Status fused_stage(Layer& l);
  Status mla_stage(Layer& l);

  Status run_op(const std::string& what, const std::function<Status(bool)>& op,
                std::initializer_list<Buf*> inputs, std::initializer_list<Buf*> outputs, StageRun* r);
  template <typename P>
  Status call(Status (*ws)(const P&, const Exec&, size_t*), Status (*fn)(const P&, const Exec&),
              const P& p, bool dev) {
    Exec ex = exec(dev);
    size_t need = 0;
    DSATTN_RETURN_IF_ERROR(ws(p, ex, &need));
    DSATTN_RETURN_IF_ERROR(scratch_.provide(need, &ex));
    return fn(p, ex);
  }
  Exec exec(bool dev) const {
    Exec ex;
    ex.backend = dev ? Backend::kCuda : Backend::kCpu;
    return ex;
  }
  std::string backend_text(const StageRun& r) const {
    if (!gpu_) return "cpu";
    return r.fallback ? "cpu (gpu: not implemented)" : "cuda";
  }
  void add(const Layer& l, const std::string& stage, const std::string& shape, const StageRun& r,
           const std::string& check, bool ok) {
    rows_.push_back({stage, l.label, shape, backend_text(r), time_text(r.ms), check + (ok ? "  ok" : "  FAIL"), ok});
  }
  void progress(const std::string& msg) const {
    if (!progress_) return;
    if (live_) std::fprintf(stderr, "\r\033[Kdsattn demo: %s", msg.c_str());
    else std::fprintf(stderr, "dsattn demo: %s\n", msg.c_str());
    std::fflush(stderr);
  }
  // Checks of a [R, k] top-k result: every index in [0, ctx), distinct, min(k, ctx) of them.
  std::string topk_validity(const Layer& l, const int32_t* idx, bool* ok) const;
  double overlap(const Layer& l, const int32_t* a, const int32_t* b) const;
  IndexerCache idx_cache_view(Layer& l, bool dev) const {
    IndexerCache c;
    c.pages = l.idx_cache.view(dev);
    c.format = p_.indexer_format;
    c.states_per_page = l.S;
    c.head_dim = l.D;
    c.page_stride_bytes = l.g.indexer_page_bytes;
    return c;
  }
  LatentCache lat_cache_view(Layer& l, bool dev) const {
    LatentCache c;
    c.pages = l.lat_cache.view(dev);
    c.format = p_.latent_format;
    c.tokens_per_page = l.g.latent_tokens_per_page;
    c.page_stride_bytes = l.g.latent_page_bytes;
    return c;
  }
  LatentCache win_cache_view(Layer& l, bool dev) const {
    LatentCache c;
    c.pages = l.win_cache.view(dev);
    c.format = p_.latent_format;
    c.tokens_per_page = l.Pw;
    c.page_stride_bytes = latent_min_page_bytes(p_.latent_format, l.Pw);
    return c;
  }
  PagedIndexerArgs indexer_args(Layer& l, bool dev) const {
    PagedIndexerArgs a;
    a.q = l.q.view(dev);
    if (p_.indexer_format == IndexerFormat::kMxfp4) a.q_scales = l.q_scales.view(dev);
    a.weights = l.weights.view(dev);
    a.cache = idx_cache_view(l, dev);
    a.block_table = l.block_table.view(dev);
    a.context_lens = l.ctx_lens.view(dev);
    return a;
  }
  double logit_ref(Layer& l, int64_t row, int64_t state) const;

  DemoOptions o_;
  ModelPreset p_;
  bool gpu_;
  bool progress_ = false, live_ = false;
  std::vector<int64_t> tokens_;
  void note(const Status& st) {
    if (std::find(notes_.begin(), notes_.end(), st.message) == notes_.end()) notes_.push_back(st.message);
  }

  std::vector<Row> rows_;
  std::vector<std::string> notes_;
  Scratch scratch_;
};

Status Demo::run_op(const std::string& what, const std::function<Status(bool)>& op,
                    std::initializer_list<Buf*> inputs, std::initializer_list<Buf*> outputs, StageRun* r) {
  progress(what + (gpu_ ? " on cuda" : " on cpu"));
  if (gpu_) {
    const Status st = op(true);  // warm-up (first launch loads the kernels)
    if (st.code != Code::kNotImplemented) {
      DSATTN_RETURN_IF_ERROR(st);
      DSATTN_RETURN_IF_ERROR(device_sync());
      const double t0 = now_ms();
      DSATTN_RETURN_IF_ERROR(op(true));
      DSATTN_RETURN_IF_ERROR(device_sync());
      r->ms = now_ms() - t0;
      r->gpu = true;
      return Status::Ok();
    }
    r->fallback = true;
    note(st);
    for (Buf* b : inputs) DSATTN_RETURN_IF_ERROR(b->download());
  }
  const double t0 = now_ms();
  DSATTN_RETURN_IF_ERROR(op(false));
  r->ms = now_ms() - t0;
  if (gpu_)
    for (Buf* b : outputs) DSATTN_RETURN_IF_ERROR(b->upload());
  return Status::Ok();
}

Status Demo::setup(Layer& l) {
  const LayerGeometry& g = l.g;
  const int B = o_.batch, N = o_.next_n;
  l.r = g.compress_ratio;
  l.S = g.states_per_page;
  l.D = p_.index_head_dim;
  l.H = p_.index_heads;
  l.k = g.topk;
  l.Hq = p_.attn_heads;
  l.dqk = latent_dqk(p_.latent_format);
  l.R = int64_t(B) * N;
  l.label = std::to_string(g.layer) + " (r=" + std::to_string(l.r) + ")";
  if (g.latent_tokens_per_page != l.S)
    return Status(Code::kInternal, "dsattn demo: layer " + std::to_string(g.layer) +
                                       ": latent tokens per page " + std::to_string(g.latent_tokens_per_page) +
                                       " differ from indexer states per page " + std::to_string(l.S) +
                                       " (the demo shares one block table)");
  // Rows, states, pages. Row (b, j) is the token at position L_b - N + j.
  l.ctx.resize(l.R);
  for (int b = 0; b < B; ++b) {
    for (int j = 0; j < N; ++j) l.ctx[b * N + j] = static_cast<int32_t>(visible_states(tokens_[b] - N + j, l.r));
    l.states.push_back(visible_states(tokens_[b] - 1, l.r));
    l.state_base.push_back(l.total_states);
    l.total_states += l.states.back();
    const int64_t pages = (l.states.back() + l.S - 1) / l.S;
    l.max_pages = std::max(l.max_pages, pages);
    l.num_pages += pages;
  }
  l.max_pages = std::max<int64_t>(l.max_pages, 1);
  l.num_pages += 1;  // one spare page nobody owns
  l.W = l.max_pages * l.S;
  // Physical pages: a seeded shuffle, so consecutive logical pages are never adjacent in memory.
  std::vector<int32_t> perm(l.num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = l.num_pages - 1; i > 0; --i)
    std::swap(perm[i], perm[hash3(o_.seed, kPerm * 1000 + g.layer, i) % (i + 1)]);
  l.bt_host.assign(B * l.max_pages, 0);
  int64_t next = 0;
  for (int b = 0; b < B; ++b)
    for (int64_t pg = 0; pg < (l.states[b] + l.S - 1) / l.S; ++pg) l.bt_host[b * l.max_pages + pg] = perm[next++];

  const bool dev = gpu_;
  DSATTN_RETURN_IF_ERROR(l.block_table.init(DType::kI32, {B, l.max_pages}, dev));
  std::copy(l.bt_host.begin(), l.bt_host.end(), l.block_table.h<int32_t>());
  DSATTN_RETURN_IF_ERROR(l.ctx_lens.init(DType::kI32, {B, N}, dev));
  DSATTN_RETURN_IF_ERROR(l.ends.init(DType::kI32, {l.R}, dev));
  std::copy(l.ctx.begin(), l.ctx.end(), l.ctx_lens.h<int32_t>());
  std::copy(l.ctx.begin(), l.ctx.end(), l.ends.h<int32_t>());
  DSATTN_RETURN_IF_ERROR(l.idx_cache.init(DType::kU8, {l.num_pages, g.indexer_page_bytes}, dev));
  DSATTN_RETURN_IF_ERROR(l.lat_cache.init(DType::kU8, {l.num_pages, g.latent_page_bytes}, dev));
  DSATTN_RETURN_IF_ERROR(check_indexer_cache(g, p_, idx_cache_view(l, dev)));  // what an engine would do

  // Indexer query and weights.
  const uint64_t s = o_.seed, lay = uint64_t(g.layer) * 1000;
  const int64_t qn = l.R * l.H * l.D;
  if (p_.indexer_format == IndexerFormat::kFp8) {
    DSATTN_RETURN_IF_ERROR(l.q.init(DType::kF8E4M3, {B, N, l.H, l.D}, dev));
    uint8_t* q = l.q.h<uint8_t>();
    for (int64_t i = 0; i < qn; ++i) q[i] = codec::f32_to_e4m3(uval(s, kIdxQ + lay, i) * 448.0f);
  } else {
    DSATTN_RETURN_IF_ERROR(l.q.init(DType::kU8, {B, N, l.H, l.D / 2}, dev));
    DSATTN_RETURN_IF_ERROR(l.q_scales.init(DType::kI32, {B, N, l.H}, dev));
    uint8_t* q = l.q.h<uint8_t>();
    for (int64_t i = 0; i < qn / 2; ++i) q[i] = static_cast<uint8_t>(hash3(s, kIdxQ + lay, i) & 0xFF);
    uint8_t* sc = l.q_scales.h<uint8_t>();  // D/32 UE8M0 bytes per (row, head), near 2^0
    for (int64_t i = 0; i < l.R * l.H * 4; ++i)
      sc[i] = static_cast<uint8_t>(i % 4 < l.D / 32 ? 125 + hash3(s, kIdxQ + lay + 500, i) % 5 : 127);
  }
  DSATTN_RETURN_IF_ERROR(l.weights.init(DType::kF32, {l.R, l.H}, dev));
  for (int64_t i = 0; i < l.R * l.H; ++i) l.weights.h<float>()[i] = uval(s, kIdxW + lay, i) / 1024.0f;

  DSATTN_RETURN_IF_ERROR(l.logits.init(DType::kF32, {l.R, l.W}, dev));
  for (Buf* b : {&l.topk_idx, &l.fused_idx, &l.fused_slot}) DSATTN_RETURN_IF_ERROR(b->init(DType::kI32, {l.R, l.k}, dev));
  for (Buf* b : {&l.topk_val, &l.fused_val}) DSATTN_RETURN_IF_ERROR(b->init(DType::kF32, {l.R, l.k}, dev));

  // Sparse MLA inputs.
  DSATTN_RETURN_IF_ERROR(l.mq.init(DType::kBF16, {B, N, l.Hq, l.dqk}, dev));
  for (int64_t i = 0; i < l.R * l.Hq * l.dqk; ++i)
    l.mq.h<uint16_t>()[i] = codec::f32_to_bf16(3.0f * uval(s, kMlaQ + lay, i));
  DSATTN_RETURN_IF_ERROR(l.out.init(DType::kBF16, {B, N, l.Hq, kLatentDv}, dev));
  DSATTN_RETURN_IF_ERROR(l.lse.init(DType::kF32, {B, N, l.Hq}, dev));
  l.window = p_.window;
  if (l.window > 0) {
    DSATTN_RETURN_IF_ERROR(l.sink.init(DType::kF32, {l.Hq}, dev));
    for (int h = 0; h < l.Hq; ++h) l.sink.h<float>()[h] = uval(s, kSink + lay, h);
    // Window cache: uncompressed tokens, block_tokens per page, the last window + N - 1 tokens.
    l.Pw = p_.block_tokens;
    for (int b = 0; b < B; ++b) {
      const int64_t keep = std::min<int64_t>(tokens_[b], l.window + N - 1);
      l.win_first.push_back(tokens_[b] - keep);
      l.win_base.push_back(l.win_total);
      l.win_total += keep;
      l.win_max_pages = std::max(l.win_max_pages, (keep + l.Pw - 1) / l.Pw);
    }
    l.win_bt.assign(B * l.win_max_pages, 0);
    for (int b = 0; b < B; ++b) {
      const int64_t keep = tokens_[b] - l.win_first[b];
      for (int64_t pg = 0; pg < (keep + l.Pw - 1) / l.Pw; ++pg)
        l.win_bt[b * l.win_max_pages + pg] = static_cast<int32_t>(l.win_pages++);
    }
    // Reverse the page order per batch so logical and physical order differ here too.
    for (int32_t& p : l.win_bt) p = static_cast<int32_t>(l.win_pages - 1 - p);
    DSATTN_RETURN_IF_ERROR(l.win_cache.init(DType::kU8, {std::max<int64_t>(l.win_pages, 1),
                                                         latent_min_page_bytes(p_.latent_format, l.Pw)}, dev));
    DSATTN_RETURN_IF_ERROR(l.win_idx.init(DType::kI32, {B, N, l.window}, dev));
    int32_t* wi = l.win_idx.h<int32_t>();
    std::fill(wi, wi + l.R * l.window, -1);
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < N; ++j) {
        const int64_t pos = tokens_[b] - N + j;
        const int64_t lo = std::max<int64_t>(0, pos - l.window + 1);
        for (int64_t t = lo; t <= pos; ++t) {
          const int64_t i = t - l.win_first[b];
          wi[(b * N + j) * l.window + (t - lo)] =
              l.win_bt[b * l.win_max_pages + i / l.Pw] * l.Pw + static_cast<int32_t>(i % l.Pw);
        }
      }
  }
  for (Buf* b : {&l.block_table, &l.ctx_lens, &l.ends, &l.q, &l.q_scales, &l.weights, &l.mq, &l.sink, &l.win_idx})
    DSATTN_RETURN_IF_ERROR(b->upload());
  return Status::Ok();
}

// Writes `total` rows in chunks on the CPU (always: the CPU caches are the reference) and on the GPU
// when it runs there; then compares the GPU's bytes with the CPU's, or (CPU only) checks a sample of
// rows decoded from the bytes against the values written.
Status Demo::write_stage(Layer& l, const char* stage, int64_t total, int dim, bool latent_values,
                         const std::function<void(int64_t, float*, int32_t*)>& fill,
                         const std::function<Status(bool, const TensorView&, const TensorView&)>& write,
                         Buf& cache, const std::function<double()>& round_trip) {
  progress("layer " + l.label + ": " + stage + " (" + std::to_string(total) + " rows)" + (gpu_ ? " on cuda" : " on cpu"));
  const int64_t chunk = std::max<int64_t>(1, std::min(kWriteChunk, total));
  Buf vals, slots;
  DSATTN_RETURN_IF_ERROR(vals.init(DType::kF32, {chunk, dim}, gpu_));
  DSATTN_RETURN_IF_ERROR(slots.init(DType::kI32, {chunk}, gpu_));
  StageRun r;
  bool use_gpu = gpu_;
  double cpu_ms = 0, gpu_ms = 0;
  for (int64_t c0 = 0; c0 < total; c0 += chunk) {
    const int64_t n = std::min(chunk, total - c0);
    if (c0 > 0 && total > 8 * chunk && (c0 / chunk) % 8 == 0)
      progress("layer " + l.label + ": " + stage + " " + std::to_string(100 * c0 / total) + "%");
    for (int64_t i = 0; i < n; ++i) fill(c0 + i, vals.h<float>() + i * dim, slots.h<int32_t>() + i);
    double t0 = now_ms();
    DSATTN_RETURN_IF_ERROR(write(false, vals.view_as(false, {n, dim}), slots.view_as(false, {n})));
    cpu_ms += now_ms() - t0;
    if (!use_gpu) continue;
    DSATTN_RETURN_IF_ERROR(vals.upload());
    DSATTN_RETURN_IF_ERROR(slots.upload());
    if (c0 == 0) {  // warm-up, and the place where a missing GPU writer shows
      const Status st = write(true, vals.view_as(true, {n, dim}), slots.view_as(true, {n}));
      if (st.code == Code::kNotImplemented) {
        use_gpu = false;
        r.fallback = true;
        note(st);
        continue;
      }
      DSATTN_RETURN_IF_ERROR(st);
    }
    DSATTN_RETURN_IF_ERROR(device_sync());
    t0 = now_ms();
    DSATTN_RETURN_IF_ERROR(write(true, vals.view_as(true, {n, dim}), slots.view_as(true, {n})));
    DSATTN_RETURN_IF_ERROR(device_sync());
    gpu_ms += now_ms() - t0;
  }
  r.gpu = use_gpu;
  r.ms = use_gpu ? gpu_ms : cpu_ms;
  std::string check;
  bool ok = true;
  if (total == 0) {
    check = "nothing to write (no complete state yet)";
  } else if (use_gpu) {
    std::vector<uint8_t> got;
    DSATTN_RETURN_IF_ERROR(cache.download_to(&got));
    const uint8_t* want = cache.h<uint8_t>();
    int64_t first = -1, diff = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != want[i]) {
        if (first < 0) first = static_cast<int64_t>(i);
        ++diff;
      }
    ok = diff == 0;
    check = ok ? "bytes == cpu writer (" + std::to_string(got.size()) + " B)"
               : std::to_string(diff) + " bytes differ from cpu writer, first at " + std::to_string(first);
  } else {
    if (gpu_) DSATTN_RETURN_IF_ERROR(cache.upload());  // GPU stages downstream read the CPU's bytes
    const double err = round_trip();
    const double tol = (!latent_values && p_.indexer_format == IndexerFormat::kMxfp4) ? kFp4RoundTrip : kFp8RoundTrip;
    ok = err <= tol;
    check = "round trip rel L2 " + fmt("%.1e", err) + " (<= " + fmt("%.1e", tol) + ")";
  }
  const std::string shape = "[" + std::to_string(total) + "," + std::to_string(dim) + "] -> " +
                            std::to_string(cache.dim(0)) + " pages x " + std::to_string(cache.dim(1)) + " B";
  add(l, stage, shape, r, check, ok);
  return Status::Ok();
}

double Demo::logit_ref(Layer& l, int64_t row, int64_t state) const {
  const int64_t b = row / o_.next_n;
  const int32_t slot = l.bt_host[b * l.max_pages + state / l.S] * l.S + static_cast<int32_t>(state % l.S);
  std::vector<float> k(l.D);
  decode_indexer_state(l.idx_cache.h<uint8_t>(), p_.indexer_format, l.S, l.D, l.g.indexer_page_bytes, slot, k.data());
  double total = 0;
  for (int h = 0; h < l.H; ++h) {
    double dot = 0;
    for (int d = 0; d < l.D; ++d) {
      const int64_t qi = (row * l.H + h) * l.D + d;
      double qv;
      if (p_.indexer_format == IndexerFormat::kFp8) {
        qv = codec::e4m3_to_f32(l.q.h<uint8_t>()[qi]);
      } else {
        const uint8_t byte = l.q.h<uint8_t>()[qi / 2];
        const uint8_t e = l.q_scales.h<uint8_t>()[(row * l.H + h) * 4 + d / 32];
        qv = codec::e2m1_to_f32(qi % 2 == 0 ? (byte & 0xF) : (byte >> 4)) * codec::ue8m0_to_f32(e);
      }
      dot += qv * k[d];
    }
    total += l.weights.h<float>()[row * l.H + h] * std::max(dot, 0.0);
  }
  return total;
}

Status Demo::logits_stage(Layer& l) {
  PagedMqaLogitsParams p;
  auto op = [&](bool dev) {
    static_cast<PagedIndexerArgs&>(p) = indexer_args(l, dev);
    p.logits = l.logits.view(dev);
    p.clean = true;
    return call(paged_mqa_logits_workspace, paged_mqa_logits, p, dev);
  };
  StageRun r;
  DSATTN_RETURN_IF_ERROR(run_op("layer " + l.label + ": paged_mqa_logits", op,
                                {&l.idx_cache, &l.q, &l.q_scales, &l.weights, &l.block_table, &l.ctx_lens}, {&l.logits}, &r));
  DSATTN_RETURN_IF_ERROR(l.logits.download());
  const float* lg = l.logits.h<float>();
  // -inf on [ctx, W) (clean = true), finite below.
  bool tails = true;
  for (int64_t row = 0; row < l.R; ++row)
    for (int64_t t = 0; t < l.W; ++t) {
      const float v = lg[row * l.W + t];
      if (t < l.ctx[row] ? !std::isfinite(v) : !(std::isinf(v) && v < 0)) tails = false;
    }
  // Spot check: sampled entries recomputed in double from the cache bytes.
  double err = 0, ref2 = 0;
  int n = 0;
  for (int i = 0; i < kSampleLogits; ++i) {
    const int64_t row = i % l.R;
    if (l.ctx[row] == 0) continue;
    const int64_t t = static_cast<int64_t>(hash3(o_.seed, 77, i) % static_cast<uint64_t>(l.ctx[row]));
    const double ref = logit_ref(l, row, t);
    err = std::max(err, std::fabs(lg[row * l.W + t] - ref));
    ref2 += ref * ref;
    ++n;
  }
  const double spot = n ? err / std::max(std::sqrt(ref2 / n), 1e-30) : 0.0;
  bool ok = tails && spot <= kLogitsTol;
  std::string check = "spot " + std::to_string(n) + " vs bytes: " + fmt("%.1e", spot) + (tails ? ", -inf tail" : ", BAD tail");
  if (r.gpu && o_.check) {
    progress("layer " + l.label + ": paged_mqa_logits on cpu (reference)");
    Buf ref;
    DSATTN_RETURN_IF_ERROR(ref.init(DType::kF32, {l.R, l.W}, false));
    PagedMqaLogitsParams pc;
    static_cast<PagedIndexerArgs&>(pc) = indexer_args(l, false);
    pc.logits = ref.view(false);
    pc.clean = true;
    DSATTN_RETURN_IF_ERROR(call(paged_mqa_logits_workspace, paged_mqa_logits, pc, false));
    double d2 = 0, c2 = 0;
    for (int64_t row = 0; row < l.R; ++row)
      for (int64_t t = 0; t < l.ctx[row]; ++t) {
        const double a = lg[row * l.W + t], c = ref.h<float>()[row * l.W + t];
        d2 += (a - c) * (a - c);
        c2 += c * c;
      }
    const double rel = std::sqrt(d2 / std::max(c2, 1e-300));
    ok = ok && rel <= kLogitsTol;
    check += "; vs cpu rel L2 " + fmt("%.1e", rel);
  }
  add(l, "indexer logits", "q" + shape_text({o_.batch, o_.next_n, l.H, l.D}) + " -> " + shape_text({l.R, l.W}), r, check, ok);
  return Status::Ok();
}

std::string Demo::topk_validity(const Layer& l, const int32_t* idx, bool* ok) const {
  for (int64_t row = 0; row < l.R; ++row) {
    std::set<int32_t> seen;
    for (int i = 0; i < l.k; ++i) {
      const int32_t v = idx[row * l.k + i];
      if (v == -1) continue;
      if (v < 0 || v >= l.ctx[row] || !seen.insert(v).second) {
        *ok = false;
        return "row " + std::to_string(row) + ": bad index " + std::to_string(v);
      }
    }
    if (static_cast<int64_t>(seen.size()) != std::min<int64_t>(l.k, l.ctx[row])) {
      *ok = false;
      return "row " + std::to_string(row) + ": " + std::to_string(seen.size()) + " indices, expected " +
             std::to_string(std::min<int64_t>(l.k, l.ctx[row]));
    }
  }
  return "";
}

double Demo::overlap(const Layer& l, const int32_t* a, const int32_t* b) const {
  int64_t common = 0, total = 0;
  for (int64_t row = 0; row < l.R; ++row) {
    std::set<int32_t> sa, sb;
    for (int i = 0; i < l.k; ++i) {
      if (a[row * l.k + i] >= 0) sa.insert(a[row * l.k + i]);
      if (b[row * l.k + i] >= 0) sb.insert(b[row * l.k + i]);
    }
    for (int32_t v : sa) common += sb.count(v);
    total += std::max(sa.size(), sb.size());
  }
  return total ? double(common) / double(total) : 1.0;
}

Status Demo::topk_stage(Layer& l) {
  TopkParams p;
  auto make = [&](TopkParams& t, bool dev, Buf& logits, Buf& idx, Buf& val) {
    t.logits = logits.view(dev);
    t.ends = l.ends.view(dev);
    t.k = l.k;
    t.indices = idx.view(dev);
    t.values = val.view(dev);
  };
  auto op = [&](bool dev) {
    make(p, dev, l.logits, l.topk_idx, l.topk_val);
    return call(topk_workspace, topk, p, dev);
  };
  StageRun r;
  DSATTN_RETURN_IF_ERROR(run_op("layer " + l.label + ": topk", op, {&l.logits, &l.ends}, {&l.topk_idx, &l.topk_val}, &r));
  DSATTN_RETURN_IF_ERROR(l.topk_idx.download());
  const int32_t* idx = l.topk_idx.h<int32_t>();
  bool ok = true;
  std::string check = topk_validity(l, idx, &ok);
  if (ok) {
    // Exact selection: every selected logit >= every unselected one of the row.
    const float* lg = l.logits.h<float>();
    int64_t bad_rows = 0;
    for (int64_t row = 0; row < l.R; ++row) {
      std::vector<char> sel(l.ctx[row], 0);
      float min_sel = INFINITY, max_unsel = -INFINITY;
      for (int i = 0; i < l.k; ++i)
        if (idx[row * l.k + i] >= 0) {
          sel[idx[row * l.k + i]] = 1;
          min_sel = std::min(min_sel, lg[row * l.W + idx[row * l.k + i]]);
        }
      for (int64_t t = 0; t < l.ctx[row]; ++t)
        if (!sel[t]) max_unsel = std::max(max_unsel, lg[row * l.W + t]);
      if (max_unsel > min_sel) ++bad_rows;
    }
    ok = bad_rows == 0;
    check = bad_rows ? std::to_string(bad_rows) + " rows select a smaller logit" : "selection exact (each row vs its logits)";
  }
  if (r.gpu && o_.check) {
    progress("layer " + l.label + ": topk on cpu (reference, same logits)");
    Buf ri, rv;
    DSATTN_RETURN_IF_ERROR(ri.init(DType::kI32, {l.R, l.k}, false));
    DSATTN_RETURN_IF_ERROR(rv.init(DType::kF32, {l.R, l.k}, false));
    TopkParams pc;
    make(pc, false, l.logits, ri, rv);
    DSATTN_RETURN_IF_ERROR(call(topk_workspace, topk, pc, false));
    const double ov = overlap(l, idx, ri.h<int32_t>());
    ok = ok && ov == 1.0;
    check += "; vs cpu " + fmt("%.2f%%", 100 * ov);
  }
  add(l, "top-k", shape_text({l.R, l.W}) + " -> " + shape_text({l.R, l.k}), r, check, ok);
  return Status::Ok();
}

Status Demo::fused_stage(Layer& l) {
  PagedMqaTopkParams p;
  auto make = [&](PagedMqaTopkParams& t, bool dev, Buf& idx, Buf& val, Buf& slot) {
    static_cast<PagedIndexerArgs&>(t) = indexer_args(l, dev);
    t.k = l.k;
    t.indices = idx.view(dev);
    t.values = val.view(dev);
    t.slot_ids = slot.view(dev);
  };
  auto op = [&](bool dev) {
    make(p, dev, l.fused_idx, l.fused_val, l.fused_slot);
    return call(paged_mqa_topk_workspace, paged_mqa_topk, p, dev);
  };
  StageRun r;
  DSATTN_RETURN_IF_ERROR(run_op("layer " + l.label + ": paged_mqa_topk", op,
                                {&l.idx_cache, &l.q, &l.q_scales, &l.weights, &l.block_table, &l.ctx_lens},
                                {&l.fused_idx, &l.fused_val, &l.fused_slot}, &r));
  DSATTN_RETURN_IF_ERROR(l.fused_idx.download());
  DSATTN_RETURN_IF_ERROR(l.fused_slot.download());
  const int32_t* idx = l.fused_idx.h<int32_t>();
  const int32_t* slot = l.fused_slot.h<int32_t>();
  bool ok = true;
  std::string check = topk_validity(l, idx, &ok);
  if (ok) {
    int64_t bad_slots = 0;
    for (int64_t row = 0; row < l.R; ++row)
      for (int i = 0; i < l.k; ++i) {
        const int32_t v = idx[row * l.k + i];
        const int64_t b = row / o_.next_n;
        const int32_t want = v < 0 ? -1 : l.bt_host[b * l.max_pages + v / l.S] * l.S + v % l.S;
        if (slot[row * l.k + i] != want) ++bad_slots;
      }
    const double ov = overlap(l, idx, l.topk_idx.h<int32_t>());
    ok = bad_slots == 0 && ov >= kOverlapMin;
    check = "= logits+topk " + fmt("%.2f%%", 100 * ov) + (bad_slots ? ", " + std::to_string(bad_slots) + " bad slot ids" : ", slot ids ok");
  }
  if (r.gpu && o_.check) {
    progress("layer " + l.label + ": paged_mqa_topk on cpu (reference)");
    Buf ri, rv, rs;
    DSATTN_RETURN_IF_ERROR(ri.init(DType::kI32, {l.R, l.k}, false));
    DSATTN_RETURN_IF_ERROR(rv.init(DType::kF32, {l.R, l.k}, false));
    DSATTN_RETURN_IF_ERROR(rs.init(DType::kI32, {l.R, l.k}, false));
    PagedMqaTopkParams pc;
    make(pc, false, ri, rv, rs);
    DSATTN_RETURN_IF_ERROR(call(paged_mqa_topk_workspace, paged_mqa_topk, pc, false));
    const double ov = overlap(l, idx, ri.h<int32_t>());
    ok = ok && ov >= kOverlapMin;
    check += "; vs cpu " + fmt("%.2f%%", 100 * ov);
  }
  add(l, "fused indexer+top-k", "q" + shape_text({o_.batch, o_.next_n, l.H, l.D}) + " -> " + shape_text({l.R, l.k}), r, check, ok);
  return Status::Ok();
}

Status Demo::mla_stage(Layer& l) {
  const float sm_scale = 1.0f / std::sqrt(static_cast<float>(l.dqk));
  const int B = o_.batch, N = o_.next_n;
  auto make = [&](SparseMlaDecodeParams& t, bool dev, Buf& out, Buf& lse) {
    t.q = l.mq.view(dev);
    t.cache = lat_cache_view(l, dev);
    t.indices = l.fused_slot.view_as(dev, {B, N, l.k});
    if (l.window > 0) {
      t.extra_cache = win_cache_view(l, dev);
      t.extra_indices = l.win_idx.view(dev);
      t.attn_sink = l.sink.view(dev);
    }
    t.sm_scale = sm_scale;
    t.out = out.view(dev);
    t.lse = lse.view(dev);
  };
  SparseMlaDecodeParams p;
  auto op = [&](bool dev) {
    make(p, dev, l.out, l.lse);
    return call(sparse_mla_decode_workspace, sparse_mla_decode, p, dev);
  };
  StageRun r;
  DSATTN_RETURN_IF_ERROR(run_op("layer " + l.label + ": sparse_mla_decode", op,
                                {&l.mq, &l.lat_cache, &l.fused_slot, &l.win_cache, &l.win_idx, &l.sink},
                                {&l.out, &l.lse}, &r));
  DSATTN_RETURN_IF_ERROR(l.out.download());
  DSATTN_RETURN_IF_ERROR(l.lse.download());
  const uint16_t* out = l.out.h<uint16_t>();
  const float* lse = l.lse.h<float>();

  // Spot check: first and last query row, every head, recomputed in double from the cache bytes.
  double d2 = 0, r2 = 0, lse_err = 0;
  std::vector<int64_t> rows = {0};
  if (l.R > 1) rows.push_back(l.R - 1);
  for (int64_t row : rows) {
    std::vector<std::vector<float>> keys;
    std::vector<float> kv(l.dqk);
    for (int i = 0; i < l.k; ++i) {
      const int32_t slot = l.fused_slot.h<int32_t>()[row * l.k + i];
      if (slot < 0) continue;
      decode_latent_token(l.lat_cache.h<uint8_t>(), p_.latent_format, l.S, l.g.latent_page_bytes, slot, kv.data());
      keys.push_back(kv);
    }
    for (int i = 0; l.window > 0 && i < l.window; ++i) {
      const int32_t slot = l.win_idx.h<int32_t>()[row * l.window + i];
      if (slot < 0) continue;
      decode_latent_token(l.win_cache.h<uint8_t>(), p_.latent_format, l.Pw,
                          latent_min_page_bytes(p_.latent_format, l.Pw), slot, kv.data());
      keys.push_back(kv);
    }
    for (int h = 0; h < l.Hq; ++h) {
      const uint16_t* q = l.mq.h<uint16_t>() + (row * l.Hq + h) * l.dqk;
      std::vector<double> score(keys.size());
      double m = -INFINITY;
      for (size_t t = 0; t < keys.size(); ++t) {
        double dot = 0;
        for (int d = 0; d < l.dqk; ++d) dot += double(codec::bf16_to_f32(q[d])) * keys[t][d];
        score[t] = sm_scale * dot;
        m = std::max(m, score[t]);
      }
      std::vector<double> acc(kLatentDv, 0.0);
      double sum = 0;
      for (size_t t = 0; t < keys.size(); ++t) {
        const double e = std::exp(score[t] - m);
        sum += e;
        for (int d = 0; d < kLatentDv; ++d) acc[d] += e * keys[t][d];
      }
      const double ref_lse = keys.empty() ? -INFINITY : m + std::log(sum);
      double gate = 1.0;
      if (l.window > 0 && !keys.empty()) gate = 1.0 / (1.0 + std::exp(double(l.sink.h<float>()[h]) - ref_lse));
      for (int d = 0; d < kLatentDv; ++d) {
        const double ref = keys.empty() ? 0.0 : acc[d] / sum * gate;
        const double got = codec::bf16_to_f32(out[(row * l.Hq + h) * kLatentDv + d]);
        d2 += (got - ref) * (got - ref);
        r2 += ref * ref;
      }
      const float gl = lse[row * l.Hq + h];
      lse_err = std::max(lse_err, keys.empty() ? (std::isinf(gl) && gl < 0 ? 0.0 : INFINITY) : std::fabs(gl - ref_lse));
    }
  }
  const double spot = std::sqrt(d2 / std::max(r2, 1e-300));
  bool ok = spot <= kMlaTol && lse_err <= kLseTol;
  std::string check = "spot " + std::to_string(rows.size()) + " rows vs bytes: " + fmt("%.1e", spot) + ", lse " + fmt("%.0e", lse_err);
  if (r.gpu && o_.check) {
    progress("layer " + l.label + ": sparse_mla_decode on cpu (reference, same indices)");
    Buf ro, rl;
    DSATTN_RETURN_IF_ERROR(ro.init(DType::kBF16, {B, N, l.Hq, kLatentDv}, false));
    DSATTN_RETURN_IF_ERROR(rl.init(DType::kF32, {B, N, l.Hq}, false));
    SparseMlaDecodeParams pc;
    make(pc, false, ro, rl);
    DSATTN_RETURN_IF_ERROR(call(sparse_mla_decode_workspace, sparse_mla_decode, pc, false));
    double e2 = 0, c2 = 0, le = 0;
    for (int64_t i = 0; i < l.R * l.Hq * kLatentDv; ++i) {
      const double a = codec::bf16_to_f32(out[i]), c = codec::bf16_to_f32(ro.h<uint16_t>()[i]);
      e2 += (a - c) * (a - c);
      c2 += c * c;
    }
    for (int64_t i = 0; i < l.R * l.Hq; ++i) {
      const float a = lse[i], c = rl.h<float>()[i];
      le = std::max(le, (std::isinf(a) || std::isinf(c)) ? (a == c ? 0.0 : INFINITY) : std::fabs(double(a) - c));
    }
    const double rel = std::sqrt(e2 / std::max(c2, 1e-300));
    ok = ok && rel <= kMlaTol && le <= kLseTol;
    check += "; vs cpu " + fmt("%.1e", rel) + ", lse " + fmt("%.0e", le);
  }
  std::string shape = "q" + shape_text({B, N, l.Hq, l.dqk}) + ", " + std::to_string(l.k) + " top-k" +
                      (l.window > 0 ? " + " + std::to_string(l.window) + " window" : "") + " -> " +
                      shape_text({B, N, l.Hq, kLatentDv});
  add(l, "sparse MLA decode", shape, r, check, ok);
  return Status::Ok();
}

Status Demo::run_layer(const LayerGeometry& g) {
  Layer l;
  l.g = g;
  DSATTN_RETURN_IF_ERROR(setup(l));
  const uint64_t s = o_.seed, lay = uint64_t(g.layer) * 1000;

  // Global state id -> (request, state) -> slot.
  auto locate = [&](int64_t gid, int64_t* b, int64_t* i) {
    // Requests without states share their base with the next one; upper_bound skips them.
    *b = std::upper_bound(l.state_base.begin(), l.state_base.end(), gid) - l.state_base.begin() - 1;
    *i = gid - l.state_base[*b];
  };
  auto slot_of = [&](int64_t b, int64_t i) {
    return l.bt_host[b * l.max_pages + i / l.S] * l.S + static_cast<int32_t>(i % l.S);
  };
  // Indexer keys: uniform * per-state amplitude.
  auto fill_key = [&](int64_t gid, float* v, int32_t* slot) {
    int64_t b, i;
    locate(gid, &b, &i);
    const float a = amp(s, kIdxKeyAmp + lay, gid);
    for (int d = 0; d < l.D; ++d) v[d] = a * uval(s, kIdxKey + lay, gid * l.D + d);
    *slot = slot_of(b, i);
  };
  auto fill_kv = [&](int64_t gid, float* v, int32_t* slot) {
    int64_t b, i;
    locate(gid, &b, &i);
    const float a = amp(s, kLatAmp + lay, gid);
    for (int d = 0; d < l.dqk; ++d) v[d] = a * uval(s, kLatKv + lay, gid * l.dqk + d);
    *slot = slot_of(b, i);
  };
  // Round trip on a sample of rows: decode from the host cache, compare with the written values.
  auto round_trip = [&](bool latent, const std::function<void(int64_t, float*, int32_t*)>& fill, int64_t total,
                        int dim, const uint8_t* base, int per_page, int64_t stride) {
    double d2 = 0, r2 = 0;
    std::vector<float> want(dim), got(dim);
    for (int i = 0; i < kSampleStates && total > 0; ++i) {
      const int64_t gid = static_cast<int64_t>(hash3(s, 99 + lay, i) % static_cast<uint64_t>(total));
      int32_t slot = 0;
      fill(gid, want.data(), &slot);
      if (latent) decode_latent_token(base, p_.latent_format, per_page, stride, slot, got.data());
      else decode_indexer_state(base, p_.indexer_format, per_page, l.D, stride, slot, got.data());
      for (int d = 0; d < dim; ++d) {
        d2 += double(got[d] - want[d]) * (got[d] - want[d]);
        r2 += double(want[d]) * want[d];
      }
    }
    return std::sqrt(d2 / std::max(r2, 1e-300));
  };

  DSATTN_RETURN_IF_ERROR(write_stage(
      l, "write indexer cache", l.total_states, l.D, false, fill_key,
      [&](bool dev, const TensorView& k, const TensorView& slots) {
        WriteIndexerCacheParams p;
        p.k = k;
        p.slot_mapping = slots;
        p.cache = idx_cache_view(l, dev);
        return write_indexer_cache(p, exec(dev));
      },
      l.idx_cache, [&]() {
        return round_trip(false, fill_key, l.total_states, l.D, l.idx_cache.h<uint8_t>(), l.S, l.g.indexer_page_bytes);
      }));
  DSATTN_RETURN_IF_ERROR(write_stage(
      l, "write latent cache", l.total_states, l.dqk, true, fill_kv,
      [&](bool dev, const TensorView& kv, const TensorView& slots) {
        WriteLatentCacheParams p;
        p.kv = kv;
        p.slot_mapping = slots;
        p.cache = lat_cache_view(l, dev);
        return write_latent_cache(p, exec(dev));
      },
      l.lat_cache, [&]() {
        return round_trip(true, fill_kv, l.total_states, l.dqk, l.lat_cache.h<uint8_t>(), l.S, l.g.latent_page_bytes);
      }));
  if (l.window > 0) {
    auto fill_win = [&](int64_t gid, float* v, int32_t* slot) {
      const int64_t b = std::upper_bound(l.win_base.begin(), l.win_base.end(), gid) - l.win_base.begin() - 1;
      const int64_t i = gid - l.win_base[b];
      const uint64_t token = uint64_t(b) << 32 | uint64_t(l.win_first[b] + i);  // same token, same values
      const float a = amp(s, kWinKv + 500, token);
      for (int d = 0; d < l.dqk; ++d) v[d] = a * uval(s, kWinKv, token * l.dqk + d);
      *slot = l.win_bt[b * l.win_max_pages + i / l.Pw] * l.Pw + static_cast<int32_t>(i % l.Pw);
    };
    const int64_t stride = latent_min_page_bytes(p_.latent_format, l.Pw);
    DSATTN_RETURN_IF_ERROR(write_stage(
        l, "write window cache", l.win_total, l.dqk, true, fill_win,
        [&](bool dev, const TensorView& kv, const TensorView& slots) {
          WriteLatentCacheParams p;
          p.kv = kv;
          p.slot_mapping = slots;
          p.cache = win_cache_view(l, dev);
          return write_latent_cache(p, exec(dev));
        },
        l.win_cache, [&]() {
          return round_trip(true, fill_win, l.win_total, l.dqk, l.win_cache.h<uint8_t>(), l.Pw, stride);
        }));
  }
  DSATTN_RETURN_IF_ERROR(logits_stage(l));
  DSATTN_RETURN_IF_ERROR(topk_stage(l));
  DSATTN_RETURN_IF_ERROR(fused_stage(l));
  DSATTN_RETURN_IF_ERROR(mla_stage(l));
  return Status::Ok();
}

const char kDemoHelp[] =
    "usage: dsattn demo [options]\n"
    "\n"
    "One decode step of DeepSeek sparse attention on random caches in a preset's real geometry:\n"
    "for one indexer layer per distinct compress ratio, the cache writers, the indexer logits,\n"
    "top-k (unfused and fused) and sparse MLA over the selected states (plus the sliding window of\n"
    "V4-style presets). Runs on the GPU when one is usable and cross-checks it against the CPU\n"
    "reference; every result is also spot-checked against values recomputed from the cache bytes.\n"
    "Request b holds context - (37*b mod 128) tokens. Exit status: 0 all checks pass, 1 a check or\n"
    "the library failed, 2 a usage error.\n"
    "\n";

}  // namespace

int cmd_demo(const std::vector<std::string>& args) {
  DemoOptions o;
  std::string err;
  switch (parse_demo_args(args, &o, &err)) {
    case ParseResult::kHelp: std::printf("%s%s", kDemoHelp, flags_help(demo_flags()).c_str()); return kExitOk;
    case ParseResult::kError: return usage_error(err);
    case ParseResult::kRun: break;
  }
  ModelPreset preset;
  if (!lookup_preset("dsattn demo", o.preset, &preset, &err)) return usage_error(err);
  if (o.context < o.next_n)
    return usage_error("dsattn demo: --context " + std::to_string(o.context) + " is shorter than --next-n " +
                       std::to_string(o.next_n) + " (accepted: context >= next-n)");
  const bool have_cuda = cuda_available();
  if (o.backend == "cuda" && !have_cuda) {
    std::fprintf(stderr, "dsattn demo: --backend cuda: no usable CUDA device (%s)\n", device_description().c_str());
    return kExitFailure;
  }
  const bool gpu = o.backend == "cuda" || (o.backend == "auto" && have_cuda);

  std::vector<LayerGeometry> layers;
  const Status st = plan(preset, &layers);
  if (!st.ok()) {
    std::fprintf(stderr, "dsattn demo: %s\n", st.to_string().c_str());
    return kExitFailure;
  }
  std::vector<LayerGeometry> chosen;
  std::set<int> seen_ratio;
  for (const LayerGeometry& g : layers)
    if (g.has_indexer && seen_ratio.insert(g.compress_ratio).second) chosen.push_back(g);
  if (chosen.empty()) {
    std::fprintf(stderr, "dsattn demo: preset %s has no indexer layer\n", preset.name.c_str());
    return kExitFailure;
  }
  // Host memory of the largest layer (layers run one after the other): caches + logits.
  double need = 0;
  for (const LayerGeometry& g : chosen) {
    const double states = double(o.batch) * (double(o.context) / g.compress_ratio + g.states_per_page);
    const double per_state = double(g.indexer_page_bytes + g.latent_page_bytes) / g.states_per_page;
    need = std::max(need, states * per_state + double(o.batch) * o.next_n * states / o.batch * 4 * 2);
  }
  if (need > kMaxHostBytes)
    return usage_error("dsattn demo: --batch " + std::to_string(o.batch) + " --context " + std::to_string(o.context) +
                       " needs about " + fmt("%.0f", need / (1 << 30)) + " GiB of host memory per layer (accepted: up to " +
                       fmt("%.0f", kMaxHostBytes / (1 << 30)) + " GiB; lower --batch or --context)");

  Demo demo(o, preset, gpu);
  std::string lens;
  for (size_t b = 0; b < demo.tokens().size(); ++b) {
    if (b == 4 && demo.tokens().size() > 5) {
      lens += ", ...";
      break;
    }
    lens += (b ? ", " : "") + std::to_string(demo.tokens()[b]);
  }
  double macs = 0, states = 0;
  for (const LayerGeometry& g : chosen) {
    macs += 2.0 * o.batch * o.next_n * (double(o.context) / g.compress_ratio) * preset.index_heads * preset.index_head_dim;
    states += double(o.batch) * o.context / g.compress_ratio;
  }
  const bool cpu_work = !gpu || o.check;  // the CPU runs the indexer (primary or reference)
  const bool long_run = states > kProgressStates || (cpu_work && macs > kProgressMacs);
  demo.set_progress(isatty(2) || long_run, isatty(2));

  std::printf("dsattn demo: %s%s, batch %d, next_n %d, context %lld tokens (per request: %s), seed %llu\n",
              preset.name.c_str(), preset.verified ? "" : " (unverified config)", o.batch, o.next_n,
              static_cast<long long>(o.context), lens.c_str(), static_cast<unsigned long long>(o.seed));
  const std::string cpu_text = "cpu (" + std::to_string(std::max(1u, std::thread::hardware_concurrency())) + " threads)";
  std::printf("device: %s; backend %s%s\n", device_description().c_str(), gpu ? "cuda" : cpu_text.c_str(),
              gpu ? (o.check ? ", cross-checked against the cpu reference" : ", no cpu cross-check") : "");
  std::string which;
  for (const LayerGeometry& g : chosen)
    which += (which.empty() ? "" : ", ") + std::string("layer ") + std::to_string(g.layer) + " (r=" +
             std::to_string(g.compress_ratio) + ", " + std::to_string(g.states_per_page) + " states/page, top-k " +
             std::to_string(g.topk) + ")";
  std::printf("indexer layers (one per compress ratio): %s\n\n", which.c_str());

  const double t0 = now_ms();
  Status run_status;
  int failed_layer = -1;
  for (const LayerGeometry& g : chosen) {
    run_status = demo.run_layer(g);
    if (!run_status.ok()) {
      failed_layer = g.layer;
      break;
    }
  }
  const double total_ms = now_ms() - t0;
  demo.end_progress();

  const std::vector<Row>& rows = demo.rows();
  size_t w[5] = {5, 5, 5, 7, 4};
  for (const Row& r : rows) {
    w[0] = std::max(w[0], r.stage.size());
    w[1] = std::max(w[1], r.layer.size());
    w[2] = std::max(w[2], r.shape.size());
    w[3] = std::max(w[3], r.backend.size());
    w[4] = std::max(w[4], r.time.size());
  }
  auto line = [&](const std::string& a, const std::string& b, const std::string& c, const std::string& d,
                  const std::string& e, const std::string& f) {
    std::printf("%-*s  %-*s  %-*s  %-*s  %*s  %s\n", int(w[0]), a.c_str(), int(w[1]), b.c_str(), int(w[2]), c.c_str(),
                int(w[3]), d.c_str(), int(w[4]), e.c_str(), f.c_str());
  };
  if (!rows.empty()) line("stage", "layer", "shape", "backend", "time", "check");
  int failed = 0;
  for (const Row& r : rows) {
    line(r.stage, r.layer, r.shape, r.backend, r.time, r.check);
    failed += !r.ok;
  }
  if (!demo.notes().empty()) std::printf("\n");
  for (const std::string& n : demo.notes()) std::printf("gpu not implemented: %s\n", n.c_str());
  if (!run_status.ok()) {  // the stages that ran are shown above; then the library's message
    std::fflush(stdout);
    std::fprintf(stderr, "dsattn demo: layer %d: %s\n", failed_layer, run_status.to_string().c_str());
    return kExitFailure;
  }
  std::printf("\n%s (%zu stages, %.2f s wall including checks)\n",
              failed ? (std::to_string(failed) + " check(s) FAILED").c_str() : "all checks passed", rows.size(),
              total_ms / 1000);
  return failed ? kExitFailure : kExitOk;
}

}  // namespace cli
}  // namespace dsattn
