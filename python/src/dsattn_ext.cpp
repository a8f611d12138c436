// dsattn Python extension (nanobind): the thin C++ half of `import dsattn`.
//
// DLPack tensors (torch / cupy / jax / numpy, via nb::ndarray, no copies) become TensorViews,
// keyword arguments fill the C++ params structs, and a failed Status becomes a Python exception:
// kInvalidArgument -> ValueError, kNotImplemented -> NotImplementedError, kCudaError / kInternal
// -> RuntimeError, each carrying the Status message (which names the op and the argument).
// Output allocation, stream parsing and defaults live in python/dsattn/_api.py.
//
// Bit-pattern rule (documented in python/dsattn/__init__.py): an argument documented as FP8 E4M3
// also accepts a uint8 tensor of E4M3 bit patterns, and an argument documented as bf16 also
// accepts a uint16 tensor of bf16 bit patterns (numpy has neither type). Nowhere else is a dtype
// reinterpreted.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dsattn/dsattn.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using dsattn::Backend;
using dsattn::Code;
using dsattn::Device;
using dsattn::DType;
using dsattn::Exec;
using dsattn::Status;
using dsattn::TensorView;

using In = std::optional<nb::ndarray<nb::ro>>;  // read by the op (read-only sources accepted)
using Out = std::optional<nb::ndarray<>>;       // written by the op

// Carries a Status to the exception translator below.
struct StatusError {
  Status status;
};

[[noreturn]] void raise(Status s) { throw StatusError{std::move(s)}; }

void check_status(const Status& s) {
  if (!s.ok()) raise(s);
}

// DLPack type codes (DLPack 1.1): 0 int, 1 uint, 2 float, 4 bfloat, 10 float8_e4m3fn.
constexpr uint8_t kDlInt = 0, kDlUInt = 1, kDlFloat = 2, kDlBfloat = 4, kDlFloat8E4M3FN = 10;
// DLPack device types: 1 CPU, 2 CUDA, 3 CUDA pinned host memory, 13 CUDA managed memory.
constexpr int32_t kDlCpu = 1, kDlCuda = 2, kDlCudaHost = 3, kDlCudaManaged = 13;

// What a uint8 / uint16 tensor means for one argument (the bit-pattern rule above).
enum class Bits { kNone, kFp8, kBf16 };

std::string dl_dtype_str(const nb::dlpack::dtype& t) {
  const char* kind = "?";
  switch (t.code) {
    case kDlInt: kind = "int"; break;
    case kDlUInt: kind = "uint"; break;
    case kDlFloat: kind = "float"; break;
    case kDlBfloat: kind = "bfloat"; break;
    case 5: kind = "complex"; break;
    case 6: kind = "bool"; break;
    default: kind = "dlpack-code-"; break;
  }
  std::string s = kind;
  if (t.code > 6) s += std::to_string(t.code) + "-";
  s += std::to_string(t.bits);
  if (t.lanes != 1) s += "x" + std::to_string(t.lanes);
  return s;
}

DType map_dtype(const char* op, const char* arg, const nb::dlpack::dtype& t, Bits bits) {
  if (t.lanes == 1) {
    if (t.code == kDlFloat && t.bits == 32) return DType::kF32;
    if (t.code == kDlFloat && t.bits == 16) return DType::kF16;
    if (t.code == kDlBfloat && t.bits == 16) return DType::kBF16;
    if (t.code == kDlFloat8E4M3FN && t.bits == 8) return DType::kF8E4M3;
    if (t.code == kDlUInt && t.bits == 8) return bits == Bits::kFp8 ? DType::kF8E4M3 : DType::kU8;
    if (t.code == kDlUInt && t.bits == 16 && bits == Bits::kBf16) return DType::kBF16;
    if (t.code == kDlInt && t.bits == 32) return DType::kI32;
    if (t.code == kDlInt && t.bits == 64) return DType::kI64;
  }
  std::string note;
  if (t.code == kDlUInt && t.bits == 16) note = " (uint16 is read as bf16 bits only where bf16 is accepted)";
  raise(dsattn::Status(Code::kInvalidArgument,
                       std::string(op) + ": " + arg +
                           " dtype expected one of f32, bf16, f16, f8_e4m3, u8, i32, i64, got " +
                           dl_dtype_str(t) + note));
}

template <class A>
TensorView view_of(const char* op, const char* arg, const A& a, Bits bits) {
  TensorView v;
  const int nd = static_cast<int>(a.ndim());
  if (nd > dsattn::kMaxDims) {
    raise(Status(Code::kInvalidArgument, std::string(op) + ": " + arg + " ndim expected <= " +
                                             std::to_string(dsattn::kMaxDims) + ", got " + std::to_string(nd)));
  }
  switch (a.device_type()) {
    case kDlCpu:
    case kDlCudaHost: v.device = Device::kCpu; break;
    case kDlCuda:
    case kDlCudaManaged: v.device = Device::kCuda; break;
    default:
      raise(Status(Code::kInvalidArgument, std::string(op) + ": " + arg +
                                               " device expected cpu or cuda, got DLPack device type " +
                                               std::to_string(a.device_type())));
  }
  v.device_id = a.device_id();
  v.dtype = map_dtype(op, arg, a.dtype(), bits);
  v.data = const_cast<void*>(static_cast<const void*>(a.data()));
  v.ndim = nd;
  for (int i = 0; i < nd; ++i) {
    v.shape[i] = static_cast<int64_t>(a.shape(i));
    v.strides[i] = a.stride(i);
  }
  return v;
}

template <class A>
TensorView opt_view(const char* op, const char* arg, const std::optional<A>& a, Bits bits = Bits::kNone) {
  return a ? view_of(op, arg, *a, bits) : TensorView{};
}

// Cache pages: any u8 tensor whose first dimension is the page (e.g. DeepGEMM's
// [num_pages, S, 1, D + 4] or a flat [num_pages, page_bytes]) becomes [num_pages, page_bytes];
// the page stride is the first-dimension stride unless given. Inner dimensions must be dense.
template <class A>
TensorView pages_view(const char* op, const char* arg, const std::optional<A>& a, int64_t* page_stride_bytes) {
  TensorView v = opt_view(op, arg, a);
  if (a && v.ndim < 2) {  // the page stride would come from a dimension that is not the page's
    raise(Status(Code::kInvalidArgument, std::string(op) + ": " + arg +
                                             " rank expected >= 2 ([num_pages, page_bytes], or [num_pages, ...] with "
                                             "dense inner dimensions), got " +
                                             std::to_string(v.ndim) + " (shape " + dsattn::shape_str(v) + ")"));
  }
  if (v.ndim >= 2) {
    int64_t expect = 1;
    bool dense = true;
    for (int i = v.ndim - 1; i >= 1; --i) {
      if (v.shape[i] != 1 && v.strides[i] != expect) dense = false;
      expect *= v.shape[i];
    }
    if (dense) {
      v.shape[1] = expect;
      v.strides[1] = 1;
      v.ndim = 2;
    }
  }
  if (*page_stride_bytes == 0 && v.ndim >= 1) {
    *page_stride_bytes = v.strides[0] * static_cast<int64_t>(dsattn::dtype_size(v.dtype));
  }
  return v;
}

template <class A>
dsattn::IndexerCache indexer_cache(const char* op, const std::optional<A>& pages, int format,
                                   int states_per_page, int head_dim, int64_t page_stride_bytes) {
  dsattn::IndexerCache c;
  c.pages = pages_view(op, "cache.pages", pages, &page_stride_bytes);
  c.format = static_cast<dsattn::IndexerFormat>(format);
  c.states_per_page = states_per_page;
  c.head_dim = head_dim;
  c.page_stride_bytes = page_stride_bytes;
  return c;
}

template <class A>
dsattn::LatentCache latent_cache(const char* op, const char* arg, const std::optional<A>& pages, int format,
                                 int tokens_per_page, int64_t page_stride_bytes) {
  dsattn::LatentCache c;
  if (!pages) return c;
  c.pages = pages_view(op, arg, pages, &page_stride_bytes);
  c.format = static_cast<dsattn::LatentFormat>(format);
  c.tokens_per_page = tokens_per_page;
  c.page_stride_bytes = page_stride_bytes;
  return c;
}

// Exec from the Python side: (backend, stream handle, workspace or None, num_threads, smem budget),
// and `alloc`: None, or a callable bytes -> array that finish() calls for the workspace when none
// is given and the op needs one.
struct ExecArgs {
  Exec ex;
  const char* op = "";
  nb::object alloc;
};

// Where a workspace array lives, for Exec::workspace_device: the ops then refuse a host array (or
// another GPU's) passed to a CUDA call instead of faulting inside a kernel.
int workspace_device(const TensorView& w) {
  return w.device == Device::kCuda ? w.device_id : dsattn::kWorkspaceDeviceHost;
}

ExecArgs exec_of(const char* op, int backend, uintptr_t stream, const Out& workspace, int num_threads,
                 int smem_budget_bytes, nb::object alloc) {
  ExecArgs e;
  e.op = op;
  e.alloc = std::move(alloc);
  e.ex.backend = static_cast<Backend>(backend);
  e.ex.stream = reinterpret_cast<void*>(stream);
  if (workspace) {
    const TensorView w = view_of(op, "workspace", *workspace, Bits::kNone);
    e.ex.workspace = w.data;
    e.ex.workspace_bytes = static_cast<size_t>(w.numel()) * dsattn::dtype_size(w.dtype);
    e.ex.workspace_device = workspace_device(w);
  }
  e.ex.num_threads = num_threads;
  e.ex.smem_budget_bytes = smem_budget_bytes;
  return e;
}

// Either asks for the workspace size (query) or runs the op with the GIL released. A run without a
// workspace, with `alloc` given, sizes the workspace and takes it from alloc(bytes) in this one
// call, where the Python side's size query followed by the call converted every tensor and planned
// the op twice (the query alone took ~20 us of host time for paged_mqa_topk on torch tensors).
template <class P>
int64_t finish(const P& p, const ExecArgs& e, bool query, Status (*ws)(const P&, const Exec&, size_t*),
               Status (*run)(const P&, const Exec&)) {
  if (query) {
    size_t bytes = 0;
    if (ws != nullptr) check_status(ws(p, e.ex, &bytes));
    return static_cast<int64_t>(bytes);
  }
  Exec ex = e.ex;
  nb::object buffer;                    // the allocated workspace, alive until the op has run
  nb::ndarray<> buffer_view;
  if (ws != nullptr && ex.workspace == nullptr && e.alloc.is_valid() && !e.alloc.is_none()) {
    size_t bytes = 0;
    check_status(ws(p, ex, &bytes));
    if (bytes > 0) {
      buffer = e.alloc(bytes);
      if (!nb::try_cast(buffer, buffer_view)) {
        raise(Status(Code::kInvalidArgument, std::string(e.op) + ": alloc(" + std::to_string(bytes) +
                                                 ") expected to return a writable array, got " +
                                                 nb::type_name(buffer.type()).c_str()));
      }
      const TensorView w = view_of(e.op, "workspace", buffer_view, Bits::kNone);
      ex.workspace = w.data;
      ex.workspace_bytes = static_cast<size_t>(w.numel()) * dsattn::dtype_size(w.dtype);
      ex.workspace_device = workspace_device(w);
    }
  }
  Status s;
  {
    nb::gil_scoped_release release;
    s = run(p, ex);
  }
  check_status(s);
  return 0;
}

#define DSATTN_EXEC_PARAMS                                                                                   \
  bool query, int backend, uintptr_t stream, Out workspace, int num_threads, int smem_budget_bytes, \
      nb::object alloc
#define DSATTN_EXEC_ARGS                                                                                    \
  "query"_a = false, "backend"_a = 0, "stream"_a = 0, "workspace"_a.none() = nb::none(), "num_threads"_a = 0, \
      "smem_budget_bytes"_a = 0, "alloc"_a.none() = nb::none()

Bits q_bits(int format) {
  return static_cast<dsattn::IndexerFormat>(format) == dsattn::IndexerFormat::kFp8 ? Bits::kFp8 : Bits::kNone;
}

// ------------------------------------------------------------------ ops
template <class P>
void fill_paged_indexer(const char* op, P* p, const In& q, const In& q_scales, const In& weights,
                        const In& cache_pages, int cache_format, int states_per_page, int head_dim,
                        int64_t page_stride_bytes, const In& block_table, const In& context_lens,
                        const In& row_request, const In& schedule) {
  p->q = opt_view(op, "q", q, q_bits(cache_format));
  p->q_scales = opt_view(op, "q_scales", q_scales);
  p->weights = opt_view(op, "weights", weights);
  p->cache = indexer_cache(op, cache_pages, cache_format, states_per_page, head_dim, page_stride_bytes);
  p->block_table = opt_view(op, "block_table", block_table);
  p->context_lens = opt_view(op, "context_lens", context_lens);
  p->row_request = opt_view(op, "row_request", row_request);
  p->schedule = opt_view(op, "schedule", schedule);
}

int64_t paged_mqa_logits(In q, In q_scales, In weights, In cache_pages, int cache_format, int states_per_page,
                         int head_dim, int64_t page_stride_bytes, In block_table, In context_lens,
                         In row_request, In schedule, Out logits, bool clean, DSATTN_EXEC_PARAMS) {
  const char* op = "paged_mqa_logits";
  dsattn::PagedMqaLogitsParams p;
  fill_paged_indexer(op, &p, q, q_scales, weights, cache_pages, cache_format, states_per_page, head_dim,
                     page_stride_bytes, block_table, context_lens, row_request, schedule);
  p.logits = opt_view(op, "logits", logits, Bits::kBf16);
  p.clean = clean;
  const ExecArgs e = exec_of(op, backend, stream, workspace, num_threads, smem_budget_bytes, alloc);
  return finish(p, e, query, &dsattn::paged_mqa_logits_workspace, &dsattn::paged_mqa_logits);
}

#define DSATTN_TOPK_PARAMS                                                                                      \
  In q, In q_scales, In weights, In cache_pages, int cache_format, int states_per_page, int head_dim,            \
      int64_t page_stride_bytes, In block_table, In context_lens, In row_request, In schedule, int k, Out indices, \
      Out values, Out slot_ids, bool sorted, bool logits_route, bool resident_route
#define DSATTN_TOPK_ARGS                                                                                          \
  "q"_a.none(), "q_scales"_a.none(), "weights"_a.none(), "cache_pages"_a.none(), "cache_format"_a,               \
      "states_per_page"_a, "head_dim"_a, "page_stride_bytes"_a, "block_table"_a.none(), "context_lens"_a.none(), \
      "row_request"_a.none(), "schedule"_a.none(), "k"_a, "indices"_a.none(), "values"_a.none(),                 \
      "slot_ids"_a.none(), "sorted"_a, "logits_route"_a = false, "resident_route"_a = true

dsattn::PagedMqaTopkParams topk_params(const char* op, DSATTN_TOPK_PARAMS) {
  dsattn::PagedMqaTopkParams p;
  fill_paged_indexer(op, &p, q, q_scales, weights, cache_pages, cache_format, states_per_page, head_dim,
                     page_stride_bytes, block_table, context_lens, row_request, schedule);
  p.k = k;
  p.indices = opt_view(op, "indices", indices);
  p.values = opt_view(op, "values", values);
  p.slot_ids = opt_view(op, "slot_ids", slot_ids);
  p.sorted = sorted;
  p.logits_route = logits_route;
  p.resident_route = resident_route;
  return p;
}

int64_t paged_mqa_topk(DSATTN_TOPK_PARAMS, DSATTN_EXEC_PARAMS) {
  const char* op = "paged_mqa_topk";
  const dsattn::PagedMqaTopkParams p =
      topk_params(op, q, q_scales, weights, cache_pages, cache_format, states_per_page, head_dim, page_stride_bytes,
                  block_table, context_lens, row_request, schedule, k, indices, values, slot_ids, sorted,
                  logits_route, resident_route);
  const ExecArgs e = exec_of(op, backend, stream, workspace, num_threads, smem_budget_bytes, alloc);
  return finish(p, e, query, &dsattn::paged_mqa_topk_workspace, &dsattn::paged_mqa_topk);
}

// The route paged_mqa_topk takes for these arguments (dsattn::paged_mqa_topk_route).
std::string paged_mqa_topk_route(DSATTN_TOPK_PARAMS, DSATTN_EXEC_PARAMS) {
  const char* op = "paged_mqa_topk_route";
  (void)query;
  const dsattn::PagedMqaTopkParams p =
      topk_params(op, q, q_scales, weights, cache_pages, cache_format, states_per_page, head_dim, page_stride_bytes,
                  block_table, context_lens, row_request, schedule, k, indices, values, slot_ids, sorted,
                  logits_route, resident_route);
  const ExecArgs e = exec_of(op, backend, stream, workspace, num_threads, smem_budget_bytes, alloc);
  const char* route = nullptr;
  check_status(dsattn::paged_mqa_topk_route(p, e.ex, &route));
  return std::string(route);
}

int64_t schedule_metadata(In context_lens, In row_request, int next_n, int states_per_page, int num_sms,
                          Out metadata, DSATTN_EXEC_PARAMS) {
  const char* op = "schedule_metadata";
  dsattn::ScheduleMetadataParams p;
  p.context_lens = opt_view(op, "context_lens", context_lens);
  p.row_request = opt_view(op, "row_request", row_request);
  p.next_n = next_n;
  p.states_per_page = states_per_page;
  p.num_sms = num_sms;
  p.metadata = opt_view(op, "metadata", metadata);
  const ExecArgs e = exec_of(op, backend, stream, workspace, num_threads, smem_budget_bytes, alloc);
  return finish<dsattn::ScheduleMetadataParams>(p, e, query, nullptr, &dsattn::schedule_metadata);
}

int64_t mqa_logits(int format, In q, In q_scales, In weights, In k, In k_scales, In ks, In ke, Out logits,
                   bool compressed, bool clean, DSATTN_EXEC_PARAMS) {
  const char* op = "mqa_logits";
  dsattn::MqaLogitsParams p;
  p.format = static_cast<dsattn::IndexerFormat>(format);
  p.q = opt_view(op, "q", q, q_bits(format));
  p.q_scales = opt_view(op, "q_scales", q_scales);
  p.weights = opt_view(op, "weights", weights);
  p.k = opt_view(op, "k", k, q_bits(format));
  p.k_scales = opt_view(op, "k_scales", k_scales);
  p.ks = opt_view(op, "ks", ks);
  p.ke = opt_view(op, "ke", ke);
  p.logits = opt_view(op, "logits", logits, Bits::kBf16);
  p.compressed = compressed;
  p.clean = clean;
  const ExecArgs e = exec_of(op, backend, stream, workspace, num_threads, smem_budget_bytes, alloc);
  return finish(p, e, query, &dsattn::mqa_logits_workspace, &dsattn::mqa_logits);
}

int64_t topk(In logits, In starts, In ends, int k, Out indices, Out values, bool sorted, In block_table,
             In row_request, int next_n, int states_per_page, Out slot_ids, DSATTN_EXEC_PARAMS) {
  const char* op = "topk";
  dsattn::TopkParams p;
  p.logits = opt_view(op, "logits", logits, Bits::kBf16);
  p.starts = opt_view(op, "starts", starts);
  p.ends = opt_view(op, "ends", ends);
  p.k = k;
  p.indices = opt_view(op, "indices", indices);
  p.values = opt_view(op, "values", values);
  p.sorted = sorted;
  p.block_table = opt_view(op, "block_table", block_table);
  p.row_request = opt_view(op, "row_request", row_request);
  p.next_n = next_n;
  p.states_per_page = states_per_page;
  p.slot_ids = opt_view(op, "slot_ids", slot_ids);
  const ExecArgs e = exec_of(op, backend, stream, workspace, num_threads, smem_budget_bytes, alloc);
  return finish(p, e, query, &dsattn::topk_workspace, &dsattn::topk);
}

int64_t sparse_mla_decode(In q, In cache_pages, int cache_format, int tokens_per_page, int64_t page_stride_bytes,
                          In indices, In topk_length, In extra_pages, int extra_format, int extra_tokens_per_page,
                          int64_t extra_page_stride_bytes, In extra_indices, In extra_topk_length, In attn_sink,
                          float sm_scale, Out out, Out lse, DSATTN_EXEC_PARAMS) {
  const char* op = "sparse_mla_decode";
  dsattn::SparseMlaDecodeParams p;
  p.q = opt_view(op, "q", q, Bits::kBf16);
  p.cache = latent_cache(op, "cache.pages", cache_pages, cache_format, tokens_per_page, page_stride_bytes);
  p.indices = opt_view(op, "indices", indices);
  p.topk_length = opt_view(op, "topk_length", topk_length);
  p.extra_cache = latent_cache(op, "extra_cache.pages", extra_pages, extra_format, extra_tokens_per_page,
                               extra_page_stride_bytes);
  p.extra_indices = opt_view(op, "extra_indices", extra_indices);
  p.extra_topk_length = opt_view(op, "extra_topk_length", extra_topk_length);
  p.attn_sink = opt_view(op, "attn_sink", attn_sink);
  p.sm_scale = sm_scale;
  p.out = opt_view(op, "out", out, Bits::kBf16);
  p.lse = opt_view(op, "lse", lse);
  const ExecArgs e = exec_of(op, backend, stream, workspace, num_threads, smem_budget_bytes, alloc);
  return finish(p, e, query, &dsattn::sparse_mla_decode_workspace, &dsattn::sparse_mla_decode);
}

int64_t sparse_mla_prefill(In q, In kv, In indices, In topk_length, In attn_sink, float sm_scale, int d_v,
                           Out out, Out lse, DSATTN_EXEC_PARAMS) {
  const char* op = "sparse_mla_prefill";
  dsattn::SparseMlaPrefillParams p;
  p.q = opt_view(op, "q", q, Bits::kBf16);
  p.kv = opt_view(op, "kv", kv, Bits::kBf16);
  p.indices = opt_view(op, "indices", indices);
  p.topk_length = opt_view(op, "topk_length", topk_length);
  p.attn_sink = opt_view(op, "attn_sink", attn_sink);
  p.sm_scale = sm_scale;
  p.d_v = d_v;
  p.out = opt_view(op, "out", out, Bits::kBf16);
  p.lse = opt_view(op, "lse", lse);
  const ExecArgs e = exec_of(op, backend, stream, workspace, num_threads, smem_budget_bytes, alloc);
  return finish(p, e, query, &dsattn::sparse_mla_prefill_workspace, &dsattn::sparse_mla_prefill);
}

int64_t write_indexer_cache(In k, In slot_mapping, Out cache_pages, int cache_format, int states_per_page,
                            int head_dim, int64_t page_stride_bytes, DSATTN_EXEC_PARAMS) {
  const char* op = "write_indexer_cache";
  dsattn::WriteIndexerCacheParams p;
  p.k = opt_view(op, "k", k, Bits::kBf16);
  p.slot_mapping = opt_view(op, "slot_mapping", slot_mapping);
  p.cache = indexer_cache(op, cache_pages, cache_format, states_per_page, head_dim, page_stride_bytes);
  const ExecArgs e = exec_of(op, backend, stream, workspace, num_threads, smem_budget_bytes, alloc);
  return finish<dsattn::WriteIndexerCacheParams>(p, e, query, nullptr, &dsattn::write_indexer_cache);
}

int64_t write_latent_cache(In kv, In slot_mapping, Out cache_pages, int cache_format, int tokens_per_page,
                           int64_t page_stride_bytes, DSATTN_EXEC_PARAMS) {
  const char* op = "write_latent_cache";
  dsattn::WriteLatentCacheParams p;
  p.kv = opt_view(op, "kv", kv, Bits::kBf16);
  p.slot_mapping = opt_view(op, "slot_mapping", slot_mapping);
  p.cache = latent_cache(op, "cache.pages", cache_pages, cache_format, tokens_per_page, page_stride_bytes);
  const ExecArgs e = exec_of(op, backend, stream, workspace, num_threads, smem_budget_bytes, alloc);
  return finish<dsattn::WriteLatentCacheParams>(p, e, query, nullptr, &dsattn::write_latent_cache);
}

// ------------------------------------------------------------------ geometry
dsattn::ModelPreset get_preset(const std::string& name) {
  dsattn::ModelPreset p;
  check_status(dsattn::get_preset(name, &p));
  return p;
}

std::vector<dsattn::LayerGeometry> plan(const dsattn::ModelPreset& preset) {
  std::vector<dsattn::LayerGeometry> layers;
  check_status(dsattn::plan(preset, &layers));
  return layers;
}

void check_indexer_cache(const dsattn::LayerGeometry& layer, const dsattn::ModelPreset& preset, In pages,
                         int format, int states_per_page, int head_dim, int64_t page_stride_bytes) {
  check_status(dsattn::check_indexer_cache(
      layer, preset, indexer_cache("check_indexer_cache", pages, format, states_per_page, head_dim,
                                   page_stride_bytes)));
}

}  // namespace

NB_MODULE(_dsattn, m) {
  m.doc() = "dsattn C++ core (private; use the `dsattn` package)";
  m.attr("__version__") = DSATTN_VERSION_STRING;

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      PyObject* type = PyExc_RuntimeError;
      if (e.status.code == Code::kInvalidArgument) type = PyExc_ValueError;
      if (e.status.code == Code::kNotImplemented) type = PyExc_NotImplementedError;
      PyErr_SetString(type, e.status.message.c_str());
    }
  });

  m.def("cuda_available", &dsattn::cuda_available);
  m.def("cuda_architectures", [] { return std::string(dsattn::cuda_architectures()); });
  m.def("cuda_num_sms", &dsattn::cuda_num_sms);
  m.def("cuda_stream_num_sms", [](uintptr_t stream) { return dsattn::cuda_stream_num_sms(reinterpret_cast<void*>(stream)); },
        "stream"_a = 0);
  m.def("schedule_metadata_size", &dsattn::schedule_metadata_size, "num_sms"_a);
  m.def("indexer_state_bytes", [](int format, int head_dim) {
    return dsattn::indexer_state_bytes(static_cast<dsattn::IndexerFormat>(format), head_dim);
  });
  m.def("latent_min_page_bytes", [](int format, int tokens_per_page) {
    return dsattn::latent_min_page_bytes(static_cast<dsattn::LatentFormat>(format), tokens_per_page);
  });
  m.def("latent_dqk", [](int format) { return dsattn::latent_dqk(static_cast<dsattn::LatentFormat>(format)); });

  m.def("paged_mqa_logits", &paged_mqa_logits, "q"_a.none(), "q_scales"_a.none(), "weights"_a.none(),
        "cache_pages"_a.none(), "cache_format"_a, "states_per_page"_a, "head_dim"_a, "page_stride_bytes"_a,
        "block_table"_a.none(), "context_lens"_a.none(), "row_request"_a.none(), "schedule"_a.none(),
        "logits"_a.none(), "clean"_a, DSATTN_EXEC_ARGS);
  m.def("paged_mqa_topk", &paged_mqa_topk, DSATTN_TOPK_ARGS, DSATTN_EXEC_ARGS);
  m.def("paged_mqa_topk_route", &paged_mqa_topk_route, DSATTN_TOPK_ARGS, DSATTN_EXEC_ARGS);
  m.def("schedule_metadata", &schedule_metadata, "context_lens"_a.none(), "row_request"_a.none(), "next_n"_a,
        "states_per_page"_a, "num_sms"_a, "metadata"_a.none(), DSATTN_EXEC_ARGS);
  m.def("mqa_logits", &mqa_logits, "format"_a, "q"_a.none(), "q_scales"_a.none(), "weights"_a.none(),
        "k"_a.none(), "k_scales"_a.none(), "ks"_a.none(), "ke"_a.none(), "logits"_a.none(), "compressed"_a,
        "clean"_a, DSATTN_EXEC_ARGS);
  m.def("topk", &topk, "logits"_a.none(), "starts"_a.none(), "ends"_a.none(), "k"_a, "indices"_a.none(),
        "values"_a.none(), "sorted"_a, "block_table"_a.none(), "row_request"_a.none(), "next_n"_a,
        "states_per_page"_a, "slot_ids"_a.none(), DSATTN_EXEC_ARGS);
  m.def("sparse_mla_decode", &sparse_mla_decode, "q"_a.none(), "cache_pages"_a.none(), "cache_format"_a,
        "tokens_per_page"_a, "page_stride_bytes"_a, "indices"_a.none(), "topk_length"_a.none(),
        "extra_pages"_a.none(), "extra_format"_a, "extra_tokens_per_page"_a, "extra_page_stride_bytes"_a,
        "extra_indices"_a.none(), "extra_topk_length"_a.none(), "attn_sink"_a.none(), "sm_scale"_a,
        "out"_a.none(), "lse"_a.none(), DSATTN_EXEC_ARGS);
  m.def("sparse_mla_prefill", &sparse_mla_prefill, "q"_a.none(), "kv"_a.none(), "indices"_a.none(),
        "topk_length"_a.none(), "attn_sink"_a.none(), "sm_scale"_a, "d_v"_a, "out"_a.none(), "lse"_a.none(),
        DSATTN_EXEC_ARGS);
  m.def("write_indexer_cache", &write_indexer_cache, "k"_a.none(), "slot_mapping"_a.none(),
        "cache_pages"_a.none(), "cache_format"_a, "states_per_page"_a, "head_dim"_a, "page_stride_bytes"_a,
        DSATTN_EXEC_ARGS);
  m.def("write_latent_cache", &write_latent_cache, "kv"_a.none(), "slot_mapping"_a.none(),
        "cache_pages"_a.none(), "cache_format"_a, "tokens_per_page"_a, "page_stride_bytes"_a, DSATTN_EXEC_ARGS);

  nb::class_<dsattn::ModelPreset>(m, "ModelPreset")
      .def(nb::init<>())
      .def_rw("name", &dsattn::ModelPreset::name)
      .def_rw("index_heads", &dsattn::ModelPreset::index_heads)
      .def_rw("index_head_dim", &dsattn::ModelPreset::index_head_dim)
      .def_rw("topk", &dsattn::ModelPreset::topk)
      .def_rw("block_tokens", &dsattn::ModelPreset::block_tokens)
      .def_rw("compress_ratios", &dsattn::ModelPreset::compress_ratios)
      .def_rw("indexer_ratios", &dsattn::ModelPreset::indexer_ratios)
      .def_rw("attn_heads", &dsattn::ModelPreset::attn_heads)
      .def_rw("window", &dsattn::ModelPreset::window)
      .def_prop_rw(
          "indexer_format", [](const dsattn::ModelPreset& p) { return static_cast<int>(p.indexer_format); },
          [](dsattn::ModelPreset& p, int f) { p.indexer_format = static_cast<dsattn::IndexerFormat>(f); })
      .def_prop_rw(
          "latent_format", [](const dsattn::ModelPreset& p) { return static_cast<int>(p.latent_format); },
          [](dsattn::ModelPreset& p, int f) { p.latent_format = static_cast<dsattn::LatentFormat>(f); })
      .def_rw("verified", &dsattn::ModelPreset::verified);

  nb::class_<dsattn::LayerGeometry>(m, "LayerGeometry")
      .def_ro("layer", &dsattn::LayerGeometry::layer)
      .def_ro("compress_ratio", &dsattn::LayerGeometry::compress_ratio)
      .def_ro("has_indexer", &dsattn::LayerGeometry::has_indexer)
      .def_ro("states_per_page", &dsattn::LayerGeometry::states_per_page)
      .def_ro("indexer_page_bytes", &dsattn::LayerGeometry::indexer_page_bytes)
      .def_ro("latent_tokens_per_page", &dsattn::LayerGeometry::latent_tokens_per_page)
      .def_ro("latent_page_bytes", &dsattn::LayerGeometry::latent_page_bytes)
      .def_ro("topk", &dsattn::LayerGeometry::topk);

  m.def("preset_names", &dsattn::preset_names);
  m.def("get_preset", &get_preset, "name"_a);
  m.def("plan", &plan, "preset"_a);
  m.def("check_indexer_cache", &check_indexer_cache, "layer"_a, "preset"_a, "pages"_a, "format"_a,
        "states_per_page"_a, "head_dim"_a, "page_stride_bytes"_a);
}
