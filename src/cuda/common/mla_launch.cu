// Launchers of the sparse-MLA kernels (arguments validated by src/api/sparse_mla.cpp): decode over
// the FP8 latent cache, prefill over a bf16 kv tensor, both with src/cuda/common/mla_kernel.cuh;
// both on tensor cores with src/cuda/common/mla_mma_kernel.cuh wherever that kernel can take the call
// (see mla_kernel_choice, mma_decide), on sm_90 by default (64-head multiples) with Hopper's
// warpgroup MMA (src/cuda/sm90/mla_wgmma_kernel.cuh, wgmma_decide).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>

#include "cuda/common/cuda_check.cuh"
#include "cuda/common/kernel_smem.h"
#include "cuda/common/mla_kernel.cuh"
#include "cuda/common/mla_mma_kernel.cuh"
#include "cuda/common/mla_plan.h"
#include "cuda/cuda_ops.h"
#include "cuda/sm90/mla_wgmma_kernel.cuh"

#ifndef DSATTN_HAS_SM90A
#define DSATTN_HAS_SM90A 0
#endif

namespace dsattn {
namespace cuda {
namespace {

MlaCacheArgs cache_args(const LatentCache& c, const TensorView& idx, const TensorView& len) {
  MlaCacheArgs m{};
  m.pages = c.pages.ptr<const uint8_t>();
  m.page_stride = c.page_stride_bytes;
  m.P = c.tokens_per_page;
  m.num_slots = c.pages.shape[0] * c.tokens_per_page;
  m.idx = idx.ptr<const int32_t>();
  m.idx_sb = idx.strides[0];
  m.idx_ss = idx.strides[1];
  m.topk = static_cast<int>(idx.shape[2]);
  m.len = len.defined() ? len.ptr<const int32_t>() : nullptr;
  m.len_s = len.defined() ? len.strides[0] : 0;
  return m;
}

template <typename Src>
Status launch(const char* op, const MlaDecodeArgs& a, int64_t rows, int64_t heads, const Exec& ex) {
  if (rows > 0x7FFFFFFF) {
    return detail::not_implemented(op, "query rows expected <= 2147483647 on CUDA, got %lld", static_cast<long long>(rows));
  }
  const size_t smem = mla_smem_bytes(Src::kDqk);
  if (ex.smem_budget_bytes > 0 && smem > static_cast<size_t>(ex.smem_budget_bytes)) {
    return detail::not_implemented(op, "the CUDA kernel needs %zu bytes of shared memory per block, budget is %d",
                                   smem, ex.smem_budget_bytes);
  }
  DSATTN_CUDA_RETURN(op, raise_dynamic_smem(sparse_mla_kernel<Src>, smem));
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(heads / kMlaHeadsPerCta));
  sparse_mla_kernel<Src><<<grid, kMlaThreads, smem, static_cast<cudaStream_t>(ex.stream)>>>(a);
  return last_launch_status(op, "sparse_mla_kernel");
}

// The kernel a decode or prefill call runs (DSATTN_MLA_KERNEL, read per call): unset or "auto"
// run the Hopper kernel on decode and prefill where it can take the call, else the
// tensor-core kernel where it can (layout, d_v, shared memory: see mma_decide), and the scalar
// kernel elsewhere; "simple" always the scalar kernel; "mma" always the
// tensor-core kernel, an error saying why where it cannot; "wgmma" the Hopper kernel
// (mla_wgmma_kernel.cuh: sm_90a builds on compute capability 9.0, 64 heads per CTA, 64-token
// tiles), an error where it cannot. The tensor-core kernel's knobs: DSATTN_MLA_HEADS_PER_CTA
// (16, 32 or 64; default mla_mma_default_hm), DSATTN_MLA_TILE (tokens per tile, 32 or 64; default
// mla_mma_default_tile) and DSATTN_MLA_SPLITS (splits of each row's indices, >= 1; default:
// mla_plan.h's rule); the Hopper kernel's: DSATTN_MLA_SPLITS and DSATTN_MLA_WGMMA_HALF ("1", the
// default where it fits: each tile's S split over its two warpgroups; "0": both compute all of it).
enum class MlaMode { kAuto, kSimple, kMma, kWgmma };
struct MlaChoice {
  MlaMode mode = MlaMode::kAuto;
  int hm = 0;      // heads per CTA / 16; 0: the default
  int tile = 0;    // tokens per tile; 0: the default
  int splits = 0;  // 0: the default
  int half = -1;   // DSATTN_MLA_WGMMA_HALF: 0 / 1, -1 the default (wgmma_decide)
};

Status mla_kernel_choice(const char* op, MlaChoice* c) {
  *c = MlaChoice{};
  const char* e = std::getenv("DSATTN_MLA_KERNEL");
  if (e != nullptr && *e != '\0' && std::strcmp(e, "auto") != 0) {
    if (std::strcmp(e, "simple") == 0) {
      c->mode = MlaMode::kSimple;
    } else if (std::strcmp(e, "mma") == 0) {
      c->mode = MlaMode::kMma;
    } else if (std::strcmp(e, "wgmma") == 0) {
      c->mode = MlaMode::kWgmma;
    } else {
      return detail::invalid(op, "DSATTN_MLA_KERNEL expected auto, simple, mma or wgmma, got \"%s\"", e);
    }
  }
  const char* h = std::getenv("DSATTN_MLA_HEADS_PER_CTA");
  if (h != nullptr && *h != '\0') {
    const int v = std::atoi(h);
    if (v != 16 && v != 32 && v != 64) {
      return detail::invalid(op, "DSATTN_MLA_HEADS_PER_CTA expected 16, 32 or 64, got \"%s\"", h);
    }
    c->hm = v / 16;
  }
  const char* t = std::getenv("DSATTN_MLA_TILE");
  if (t != nullptr && *t != '\0') {
    if (std::strcmp(t, "32") != 0 && std::strcmp(t, "64") != 0) {
      return detail::invalid(op, "DSATTN_MLA_TILE expected 32 or 64, got \"%s\"", t);
    }
    c->tile = std::atoi(t);
  }
  const char* w = std::getenv("DSATTN_MLA_WGMMA_HALF");
  if (w != nullptr && *w != '\0') {
    if (std::strcmp(w, "0") != 0 && std::strcmp(w, "1") != 0) {
      return detail::invalid(op, "DSATTN_MLA_WGMMA_HALF expected 0 or 1, got \"%s\"", w);
    }
    c->half = w[0] - '0';
  }
  const char* z = std::getenv("DSATTN_MLA_SPLITS");
  if (z != nullptr && *z != '\0') {
    const int v = std::atoi(z);
    if (v < 1 || v > 1024) return detail::invalid(op, "DSATTN_MLA_SPLITS expected 1 .. 1024, got \"%s\"", z);
    c->splits = v;
  }
  return Status::Ok();
}

template <int HM, int T>
size_t mma_smem_hm(MlaSrc s) {
  switch (s) {
    case MlaSrc::kV4Fp8: return mla_mma_smem_bytes<HM, MlaSrc::kV4Fp8, T>();
    case MlaSrc::kV32Fp8: return mla_mma_smem_bytes<HM, MlaSrc::kV32Fp8, T>();
    case MlaSrc::kBf16D512: return mla_mma_smem_bytes<HM, MlaSrc::kBf16D512, T>();
    default: return mla_mma_smem_bytes<HM, MlaSrc::kBf16D576, T>();
  }
}
template <int T>
size_t mma_smem_t(MlaSrc s, int hm) {
  return hm == 1 ? mma_smem_hm<1, T>(s) : hm == 2 ? mma_smem_hm<2, T>(s) : mma_smem_hm<4, T>(s);
}
size_t mma_smem(MlaSrc s, int hm, int tile) { return tile == 64 ? mma_smem_t<64>(s, hm) : mma_smem_t<32>(s, hm); }

// The Hopper kernel's shared memory; 0 where a variant cannot exist (kHalf over a bf16 kv of d_qk
// 576 would exceed 227 KiB).
template <bool kHalf>
size_t wgmma_smem_t(MlaSrc s) {
  switch (s) {
    case MlaSrc::kV4Fp8: return mla_wgmma_smem_bytes<MlaSrc::kV4Fp8, kHalf>();
    case MlaSrc::kV32Fp8: return mla_wgmma_smem_bytes<MlaSrc::kV32Fp8, kHalf>();
    case MlaSrc::kBf16D512: return mla_wgmma_smem_bytes<MlaSrc::kBf16D512, kHalf>();
    default: return kHalf ? 0 : mla_wgmma_smem_bytes<MlaSrc::kBf16D576, false>();
  }
}
size_t wgmma_smem(MlaSrc s, bool half) { return half ? wgmma_smem_t<true>(s) : wgmma_smem_t<false>(s); }

// The Hopper kernel's plan (64 heads per CTA, 64-token tiles, mla_wgmma_plan_for's split rule,
// S split over the warpgroups unless DSATTN_MLA_WGMMA_HALF=0 or it does not
// fit), or an error naming what it cannot take: DSATTN_MLA_KERNEL=wgmma reports it, the default
// takes the other kernels then.
Status wgmma_decide(const char* op, MlaSrc src, int64_t rows, int64_t heads, int64_t indices, const Status& layout,
                    const Exec& ex, const MlaChoice& c, MlaMmaPlan* plan) {
  if (!DSATTN_HAS_SM90A) {
    return detail::not_implemented(op, "DSATTN_MLA_KERNEL=wgmma needs a build with sm_90a code (DSATTN_CUDA_ARCHS)");
  }
  int dev = 0, major = 0, minor = 0, budget = ex.smem_budget_bytes;
  DSATTN_CUDA_RETURN(op, cudaGetDevice(&dev));
  DSATTN_RETURN_IF_ERROR(device_capability(op, &major, &minor));
  if (major != 9 || minor != 0) {
    return detail::not_implemented(op, "DSATTN_MLA_KERNEL=wgmma needs a compute capability 9.0 device, got %d.%d",
                                   major, minor);
  }
  if (heads % 64 != 0) {
    return detail::not_implemented(op, "DSATTN_MLA_KERNEL=wgmma needs a multiple of 64 heads, got %lld",
                                   static_cast<long long>(heads));
  }
  if ((c.hm != 0 && c.hm != 4) || (c.tile != 0 && c.tile != 64)) {
    return detail::invalid(op, "DSATTN_MLA_KERNEL=wgmma runs 64 heads per CTA and 64-token tiles, got "
                               "DSATTN_MLA_HEADS_PER_CTA %d and DSATTN_MLA_TILE %d", 16 * (c.hm != 0 ? c.hm : 4),
                           c.tile != 0 ? c.tile : 64);
  }
  DSATTN_RETURN_IF_ERROR(layout);
  if (rows > 0x7FFFFFFF) {
    return detail::not_implemented(op, "query rows expected <= 2147483647 on CUDA, got %lld", static_cast<long long>(rows));
  }
  const bool half = c.half != 0 && wgmma_smem(src, true) != 0;
  if (c.half == 1 && !half) {
    return detail::not_implemented(op, "DSATTN_MLA_WGMMA_HALF=1 does not fit a bf16 kv of d_qk 576 in 227 KiB");
  }
  if (budget <= 0) DSATTN_CUDA_RETURN(op, cudaDeviceGetAttribute(&budget, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (wgmma_smem(src, half) > static_cast<size_t>(budget)) {
    return detail::not_implemented(op, "DSATTN_MLA_KERNEL=wgmma needs %zu bytes of shared memory per block, budget is %d",
                                   wgmma_smem(src, half), budget);
  }
  *plan = mla_wgmma_plan_for(rows, heads, indices, cuda_stream_num_sms(ex.stream), c.splits);
  plan->wgmma = true;
  plan->wgmma_half = half;
  return Status::Ok();
}

// Whether the tensor-core kernel takes this call and how (mla_plan.h). `layout`: the call's
// layout check (alignment, d_v), not ok where the kernel cannot read or write it. Heads per CTA:
// the knob's, else mla_mma_default_hm's, halved while its shared memory at 32 tokens per tile
// exceeds the budget (64 heads per CTA take 129-158 KB; sm_120's 99 KiB: 32, or 16 for V3.2). Tokens per tile: the
// knob's, else mla_mma_default_tile's (64 heads per CTA at 64 tokens: 190-217 KB, H100 / H200 /
// B200; 32 on sm_80's 163 KB). In auto mode a call the kernel cannot take runs the scalar kernel
// (*use = false); under DSATTN_MLA_KERNEL=mma it is an error.
Status mma_decide(const char* op, MlaSrc src, int64_t rows, int64_t heads, int64_t indices, const Status& layout,
                  const Exec& ex, const MlaChoice& c, bool* use, MlaMmaPlan* plan) {
  *use = false;
  if (c.mode == MlaMode::kSimple) return Status::Ok();
  if (c.mode == MlaMode::kWgmma) {
    DSATTN_RETURN_IF_ERROR(wgmma_decide(op, src, rows, heads, indices, layout, ex, c, plan));
    *use = true;
    return Status::Ok();
  }
  // By default the Hopper kernel takes what it can (H100, 2026-12-05, BENCHMARKS.md: decode 64 x
  // 128 heads V3.2 261.6 -> 224-226 us and V4 308 -> 262-263 once its FP8 tile was stored
  // token-minor, prefill 1024 x 128 rows 5.03 -> 3.43-3.58 ms at d_qk 576).
  if (c.mode == MlaMode::kAuto && wgmma_decide(op, src, rows, heads, indices, layout, ex, c, plan).ok()) {
    *use = true;
    return Status::Ok();
  }
  const bool forced = c.mode == MlaMode::kMma;
  if (c.hm != 0 && 16 * c.hm > heads) {
    return detail::invalid(op, "DSATTN_MLA_HEADS_PER_CTA expected at most the %lld heads of q, got %d",
                           static_cast<long long>(heads), 16 * c.hm);
  }
  if (!layout.ok()) return forced ? layout : Status::Ok();
  if (rows > 0x7FFFFFFF) {
    if (!forced) return Status::Ok();
    return detail::not_implemented(op, "query rows expected <= 2147483647 on CUDA, got %lld", static_cast<long long>(rows));
  }
  int budget = ex.smem_budget_bytes;
  if (budget <= 0) {
    int dev = 0;
    DSATTN_CUDA_RETURN(op, cudaGetDevice(&dev));
    DSATTN_CUDA_RETURN(op, cudaDeviceGetAttribute(&budget, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  }
  int hm = c.hm != 0 ? c.hm : mla_mma_default_hm(heads);
  while (c.hm == 0 && hm > 1 && mma_smem(src, hm, 32) > static_cast<size_t>(budget)) hm /= 2;
  const int tile =
      c.tile != 0 ? c.tile : mla_mma_default_tile(hm, mma_smem(src, hm, 64) <= static_cast<size_t>(budget));
  if (mma_smem(src, hm, tile) > static_cast<size_t>(budget)) {
    if (!forced) return Status::Ok();
    return detail::not_implemented(op,
                                   "the tensor-core kernel at %d heads per CTA and %d tokens per tile needs %zu bytes "
                                   "of shared memory per block, budget is %d",
                                   16 * hm, tile, mma_smem(src, hm, tile), budget);
  }
  *plan = mla_mma_plan_for(rows, heads, indices, cuda_stream_num_sms(ex.stream), hm, c.splits, tile);
  *use = true;
  return Status::Ok();
}

int64_t decode_indices(const SparseMlaDecodeParams& p) {
  return p.indices.shape[2] + (p.extra_indices.defined() ? p.extra_indices.shape[2] : 0);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The combine kernel after a split launch (sparse_mla_combine_kernel); nothing without a split.
Status launch_combine(const char* op, const MlaDecodeArgs& a, const MlaSplitArgs& sp, int64_t rows, int64_t heads,
                      cudaStream_t st) {
  if (sp.splits == 1) return Status::Ok();
  sparse_mla_combine_kernel<<<static_cast<unsigned>(rows * heads), kMlaCombineThreads, 0, st>>>(a, sp);
  return last_launch_status(op, "sparse_mla_combine_kernel");
}

template <int HM, MlaSrc S, int T>
Status launch_mma(const char* op, const MlaDecodeArgs& a, const MlaSplitArgs& sp, int64_t rows, int64_t heads,
                  const Exec& ex) {
  constexpr size_t smem = mla_mma_smem_bytes<HM, S, T>();  // mma_decide checked it against the budget
  const auto kern = sparse_mla_mma_kernel<HM, S, T>;
  const cudaStream_t st = static_cast<cudaStream_t>(ex.stream);
  DSATTN_CUDA_RETURN(op, raise_dynamic_smem(kern, smem));
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(heads / (16 * HM)), static_cast<unsigned>(sp.splits));
  kern<<<grid, MlaMmaShape<HM, S, T>::kThreads, smem, st>>>(a, sp);
  DSATTN_RETURN_IF_ERROR(last_launch_status(op, "sparse_mla_mma_kernel"));
  return launch_combine(op, a, sp, rows, heads, st);
}

template <MlaSrc S, int T>
Status launch_mma_hm(const char* op, const MlaDecodeArgs& a, const MlaSplitArgs& sp, int64_t rows, int64_t heads,
                     int hm, const Exec& ex) {
  switch (hm) {
    case 1: return launch_mma<1, S, T>(op, a, sp, rows, heads, ex);
    case 2: return launch_mma<2, S, T>(op, a, sp, rows, heads, ex);
    default: return launch_mma<4, S, T>(op, a, sp, rows, heads, ex);
  }
}
template <MlaSrc S, bool kHalf>
Status launch_wgmma(const char* op, const MlaDecodeArgs& a, const MlaSplitArgs& sp, int64_t rows, int64_t heads,
                    const Exec& ex) {
  constexpr size_t smem = mla_wgmma_smem_bytes<S, kHalf>();  // wgmma_decide checked it against the budget
  const auto kern = sparse_mla_wgmma_kernel<S, kHalf>;
  const cudaStream_t st = static_cast<cudaStream_t>(ex.stream);
  DSATTN_CUDA_RETURN(op, raise_dynamic_smem(kern, smem));
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(heads / 64), static_cast<unsigned>(sp.splits));
  kern<<<grid, MlaWgShape<S, kHalf>::kThreads, smem, st>>>(a, sp);
  DSATTN_RETURN_IF_ERROR(last_launch_status(op, "sparse_mla_wgmma_kernel"));
  return launch_combine(op, a, sp, rows, heads, st);
}

template <MlaSrc S>
Status launch_mma_tile(const char* op, const MlaDecodeArgs& a, const MlaSplitArgs& sp, int64_t rows, int64_t heads,
                       const MlaMmaPlan& plan, const Exec& ex) {
  if (plan.wgmma) {
    if constexpr (S == MlaSrc::kBf16D576) {  // kHalf does not fit (wgmma_decide)
      return launch_wgmma<S, false>(op, a, sp, rows, heads, ex);
    } else {
      return plan.wgmma_half ? launch_wgmma<S, true>(op, a, sp, rows, heads, ex)
                             : launch_wgmma<S, false>(op, a, sp, rows, heads, ex);
    }
  }
  return plan.tile == 64 ? launch_mma_hm<S, 64>(op, a, sp, rows, heads, plan.hm, ex)
                         : launch_mma_hm<S, 32>(op, a, sp, rows, heads, plan.hm, ex);
}

// Runs the tensor-core kernel (and its combine kernel when it splits) as mma_decide planned it,
// the partial results in the workspace: checked here against the plan (the one decision a call
// makes; sparse_mla_*_workspace reports the same plan's size).
Status run_mma(const char* op, const MlaDecodeArgs& a, MlaSrc src, int64_t rows, int64_t heads,
               const MlaMmaPlan& plan, const Exec& ex) {
  DSATTN_RETURN_IF_ERROR(detail::check_workspace(op, ex, plan.workspace));
  MlaSplitArgs sp{};
  sp.splits = plan.splits;
  sp.tiles_per_split = plan.tiles_per_split;
  sp.hq = static_cast<int>(heads);
  if (plan.splits > 1) {  // check_workspace: the workspace is kWorkspaceAlignment (16) byte aligned
    sp.part_o = static_cast<float*>(ex.workspace);
    sp.part_ml = reinterpret_cast<float2*>(sp.part_o + size_t(rows * heads) * plan.splits * kLatentDv);
  }
  switch (src) {
    case MlaSrc::kV4Fp8: return launch_mma_tile<MlaSrc::kV4Fp8>(op, a, sp, rows, heads, plan, ex);
    case MlaSrc::kV32Fp8: return launch_mma_tile<MlaSrc::kV32Fp8>(op, a, sp, rows, heads, plan, ex);
    case MlaSrc::kBf16D512: return launch_mma_tile<MlaSrc::kBf16D512>(op, a, sp, rows, heads, plan, ex);
    default: return launch_mma_tile<MlaSrc::kBf16D576>(op, a, sp, rows, heads, plan, ex);
  }
}

std::string strides_text(const TensorView& v) {
  std::string s = "[";
  for (int d = 0; d < v.ndim; ++d) s += (d ? ", " : "") + std::to_string(v.strides[d]);
  return s + "]";
}

// The tensor-core kernel reads q rows, kv rows and cache tokens in 16-byte pieces and writes out in
// 4- or 8-byte pieces: each named view 16-byte aligned with every stride but the last a multiple
// of 8 elements.
Status check_mma_views(const char* op, std::initializer_list<std::pair<const char*, const TensorView*>> views) {
  for (const auto& [name, v] : views) {
    bool ok = aligned16(v->data);
    for (int d = 0; d + 1 < v->ndim; ++d) ok = ok && v->strides[d] % 8 == 0;
    if (!ok) {
      return detail::not_implemented(op,
                                     "DSATTN_MLA_KERNEL=mma needs %s 16-byte aligned with strides (but the last) "
                                     "that are multiples of 8, got strides %s",
                                     name, strides_text(*v).c_str());
    }
  }
  return Status::Ok();
}

Status check_mma_caches(const char* op, const SparseMlaDecodeParams& p) {
  const LatentCache* caches[2] = {&p.cache, p.extra_indices.defined() ? &p.extra_cache : nullptr};
  for (const LatentCache* c : caches) {
    if (c == nullptr) continue;
    if (!aligned16(c->pages.data) || c->page_stride_bytes % 16 != 0) {
      return detail::not_implemented(op,
                                     "DSATTN_MLA_KERNEL=mma needs %s pages 16-byte aligned with a page stride that is "
                                     "a multiple of 16 bytes, got a stride of %lld",
                                     c == &p.cache ? "cache" : "extra_cache",
                                     static_cast<long long>(c->page_stride_bytes));
    }
  }
  return Status::Ok();
}

// The layouts the tensor-core kernel can take (mma_decide's `layout`).
Status mma_layout_decode(const char* op, const SparseMlaDecodeParams& p) {
  DSATTN_RETURN_IF_ERROR(check_mma_views(op, {{"q", &p.q}, {"out", &p.out}}));
  return check_mma_caches(op, p);
}
Status mma_layout_prefill(const char* op, const SparseMlaPrefillParams& p) {
  if (p.d_v != kLatentDv) {  // its warps own 512 output dims
    return detail::not_implemented(op, "DSATTN_MLA_KERNEL=mma needs d_v %d for prefill, got %d", kLatentDv, p.d_v);
  }
  return check_mma_views(op, {{"q", &p.q}, {"kv", &p.kv}, {"out", &p.out}});
}
MlaSrc prefill_src(const SparseMlaPrefillParams& p) {
  return p.q.shape[2] == 512 ? MlaSrc::kBf16D512 : MlaSrc::kBf16D576;
}

void set_sink(MlaDecodeArgs* a, const TensorView& sink) {
  a->sink = sink.defined() ? sink.ptr<const float>() : nullptr;
  a->sink_s = sink.defined() ? sink.strides[0] : 0;
}

// Workspace of the tensor-core kernel's split (0 where the call runs the scalar kernel or does not
// split). A bad knob gives 0 here; the call itself reports it.
size_t mma_workspace(const char* op, MlaSrc src, int64_t rows, int64_t heads, int64_t indices, const Status& layout,
                     const Exec& ex) {
  MlaChoice choice;
  MlaMmaPlan plan;
  bool use = false;
  if (!mla_kernel_choice(op, &choice).ok()) return 0;
  if (!mma_decide(op, src, rows, heads, indices, layout, ex, choice, &use, &plan).ok() || !use) return 0;
  return plan.workspace;
}

}  // namespace

size_t sparse_mla_decode_workspace(const SparseMlaDecodeParams& p, const Exec& ex) {
  const char* op = "sparse_mla_decode";
  return mma_workspace(op, mla_src_of(p.cache.format), p.q.shape[0] * p.q.shape[1], p.q.shape[2], decode_indices(p),
                       mma_layout_decode(op, p), ex);
}

size_t sparse_mla_prefill_workspace(const SparseMlaPrefillParams& p, const Exec& ex) {
  const char* op = "sparse_mla_prefill";
  return mma_workspace(op, prefill_src(p), p.q.shape[0], p.q.shape[1], p.indices.shape[1], mma_layout_prefill(op, p),
                       ex);
}

Status sparse_mla_decode(const SparseMlaDecodeParams& p, const Exec& ex) {
  const int64_t B = p.q.shape[0], Sq = p.q.shape[1], Hq = p.q.shape[2];
  MlaDecodeArgs a{};
  a.q = p.q.ptr<const uint16_t>();
  a.q_sb = p.q.strides[0];
  a.q_ss = p.q.strides[1];
  a.q_sh = p.q.strides[2];
  a.out = p.out.ptr<uint16_t>();
  a.o_sb = p.out.strides[0];
  a.o_ss = p.out.strides[1];
  a.o_sh = p.out.strides[2];
  a.lse = p.lse.ptr<float>();
  a.l_sb = p.lse.strides[0];
  a.l_ss = p.lse.strides[1];
  a.l_sh = p.lse.strides[2];
  set_sink(&a, p.attn_sink);
  a.sm_scale = p.sm_scale;
  a.Sq = static_cast<int>(Sq);
  a.dv = kLatentDv;
  a.main = cache_args(p.cache, p.indices, p.topk_length);
  if (p.extra_indices.defined()) a.extra = cache_args(p.extra_cache, p.extra_indices, p.extra_topk_length);
  const char* op = "sparse_mla_decode";
  MlaChoice choice;
  DSATTN_RETURN_IF_ERROR(mla_kernel_choice(op, &choice));
  MlaMmaPlan plan;
  bool use = false;
  const MlaSrc src = mla_src_of(p.cache.format);
  DSATTN_RETURN_IF_ERROR(
      mma_decide(op, src, B * Sq, Hq, decode_indices(p), mma_layout_decode(op, p), ex, choice, &use, &plan));
  if (use) return run_mma(op, a, src, B * Sq, Hq, plan, ex);
  return p.cache.format == LatentFormat::kV4Fp8
             ? launch<LatentSource<LatentFormat::kV4Fp8>>(op, a, B * Sq, Hq, ex)
             : launch<LatentSource<LatentFormat::kV32Fp8>>(op, a, B * Sq, Hq, ex);
}

Status sparse_mla_prefill(const SparseMlaPrefillParams& p, const Exec& ex) {
  const char* op = "sparse_mla_prefill";
  const int64_t M = p.q.shape[0], Hq = p.q.shape[1], dqk = p.q.shape[2];
  if (p.d_v > 2 * kMlaThreads) {
    return detail::not_implemented(op, "d_v expected <= %d on CUDA, got %d", 2 * kMlaThreads, p.d_v);
  }
  MlaDecodeArgs a{};
  a.q = p.q.ptr<const uint16_t>();
  a.q_sb = p.q.strides[0];
  a.q_sh = p.q.strides[1];
  a.out = p.out.ptr<uint16_t>();
  a.o_sb = p.out.strides[0];
  a.o_sh = p.out.strides[1];
  a.lse = p.lse.ptr<float>();
  a.l_sb = p.lse.strides[0];
  a.l_sh = p.lse.strides[1];
  set_sink(&a, p.attn_sink);
  a.sm_scale = p.sm_scale;
  a.Sq = 1;  // query row m is (b = m, s = 0)
  a.dv = p.d_v;
  a.main.pages = static_cast<const uint8_t*>(p.kv.data);
  a.main.page_stride = p.kv.strides[0];
  a.main.P = 1;
  a.main.num_slots = p.kv.shape[0];
  a.main.idx = p.indices.ptr<const int32_t>();
  a.main.idx_sb = p.indices.strides[0];
  a.main.topk = static_cast<int>(p.indices.shape[1]);
  a.main.len = p.topk_length.defined() ? p.topk_length.ptr<const int32_t>() : nullptr;
  a.main.len_s = p.topk_length.defined() ? p.topk_length.strides[0] : 0;
  MlaChoice choice;
  DSATTN_RETURN_IF_ERROR(mla_kernel_choice(op, &choice));
  MlaMmaPlan plan;
  bool use = false;
  DSATTN_RETURN_IF_ERROR(mma_decide(op, prefill_src(p), M, Hq, p.indices.shape[1], mma_layout_prefill(op, p), ex,
                                    choice, &use, &plan));
  if (use) return run_mma(op, a, prefill_src(p), M, Hq, plan, ex);
  return dqk == 512 ? launch<Bf16Source<512>>(op, a, M, Hq, ex) : launch<Bf16Source<576>>(op, a, M, Hq, ex);
}

}  // namespace cuda
}  // namespace dsattn
