// Programmatic dependent launch (PDL, sm_90 and newer): a kernel launched with launch_pdl() may
// start while the kernel before it in the stream is still running, so its launch and set-up
// (shared-memory carve-out, barrier initialization) hide behind that kernel's last wave instead of
// following it. Measured in a CUDA graph on an H200, a kernel's first CTA starts ~0.9-1.0 us after
// the previous kernel ends without PDL (BENCHMARKS.md). Ops made of several kernels (schedule ->
// scoring, scoring -> top-k, the top-k's chunk -> merge -> final) pay that at every boundary.
//
// The contract, for every kernel launched through launch_pdl():
//   - pdl_wait() before its first global-memory access, read or write. It returns once the kernel
//     before it in the stream has completed and its writes are visible (and at once when the
//     launch had no PDL, or before sm_90). Everything earlier in the stream is complete by then,
//     as that kernel itself started after it.
//   - pdl_trigger() may come anywhere: the next PDL-launched kernel may then be scheduled once
//     every CTA of this grid has called it or exited. It says nothing about memory: the next
//     kernel still waits for this one's completion. The schedule and top-k kernels call it first
//     thing; the scoring kernels do not call it by default, because the top-k kernels after the
//     logits were then placed on the SMs as they freed up, two CTAs on each of the first (H200,
//     32 x 32K logits + topk: 86 -> 93 us). The fused op's logits route asks the warp-specialized
//     scoring kernel for it where its top-k is a launch of at most 8 CTAs only with
//     DSATTN_FUSED_EARLY_TRIGGER=1 (kWsEarlyTrigger; off by default since it costs 1.5-6 us per
//     call when other code ran before the call, fused_route.h).
// Early triggers and cold code (H100, BENCHMARKS.md 2026-12-06): where a kernel triggers first
// thing, the next PDL launch's CTAs are placed at once and wait at griddepcontrol.wait through
// the whole kernel before them. In a CUDA graph whose call starts with its code out of the
// instruction caches (bench --cold: other code run on every SM before each call, as a serving
// engine's other kernels do), such a wait cost 3-9 us: the fused logits route's early trigger,
// the resident route after the schedule kernel, topk's split plan after its chunk kernel. Launched
// eagerly, or with the code warm, the same launches gained 0.5-1 us. A PDL launch after a kernel
// that does not trigger (the scoring kernels) cost nothing with cold code. So those three launch
// without PDL or without the trigger now. Why the wait costs that much was not found. The other
// top-k kernels still trigger first thing (the filter plan measured faster with PDL, cold too).
// An op's last kernel triggering first thing helps a kernel an engine launches after it with PDL:
// that kernel's CTAs, placed at once on the SMs the top-k leaves idle, waited through it at no
// cost, and the call gained 0.8-1.5 us cold or warm against the same kernel launched plainly;
// moving the trigger after the selection gained nothing (bench --follower, H100, BENCHMARKS.md
// 2026-12-06 10:00).
// A PDL launch after something other than a kernel (a memset, a copy, an event) is ordinary
// stream order; so is any launch when DSATTN_PDL=0 (benchmarks compare both) or before sm_90.
#pragma once
#include <cuda_runtime.h>

#include <type_traits>
#include <utility>

namespace dsattn {
namespace cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" :::);
#endif
}

// The current device is sm_90 or newer and DSATTN_PDL is not "0" (read once per process).
bool pdl_enabled();

struct LaunchOpt {
  unsigned cluster = 0;  // > 0: thread-block clusters of (cluster, 1, 1)
  bool pdl = true;       // PDL when pdl_enabled() too
  bool cooperative = false;  // every CTA co-resident (grid-wide barriers; fails when they cannot be)
};

// kernel<<<grid, block, smem, stream>>>(args...), with PDL when opt.pdl and pdl_enabled(), and in
// clusters when opt.cluster > 0. Returns the launch's error.
template <typename... KArgs, typename... Args>
cudaError_t launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                       LaunchOpt opt, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[3];
  unsigned n = 0;
  if (opt.cluster > 0) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = opt.cluster;
    attr[n].val.clusterDim.y = 1;
    attr[n].val.clusterDim.z = 1;
    ++n;
  }
  if (opt.pdl && pdl_enabled()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  if (opt.cooperative) {
    attr[n].id = cudaLaunchAttributeCooperative;
    attr[n].val.cooperative = 1;
    ++n;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  if (e != cudaSuccess) cudaGetLastError();  // reported here; not left for the caller's next check
  return e;
}

// Whether an indexer kernel with epilogue Epi takes PDL: Epi::kPdl where the epilogue has one, else
// yes. paged_mqa_topk's streaming route (its scoring kernels' top-k epilogues and the merges after
// them) measured slower with PDL on an H200 (BENCHMARKS.md), so those say no.
template <class E, class = void>
struct EpiPdl : std::true_type {};
template <class E>
struct EpiPdl<E, std::void_t<decltype(E::kPdl)>> : std::bool_constant<E::kPdl> {};

}  // namespace cuda
}  // namespace dsattn
