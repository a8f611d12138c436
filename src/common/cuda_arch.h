// Which GPUs a build's CUDA architectures run on (host code; no CUDA needed, so the CPU tests
// cover it). The architectures are DSATTN_CUDA_ARCHS entries: "80" (sm_80 code: compute
// capability 8.x with minor >= 0), "90a" (arch-specific: exactly 9.0), "120f" (family, CUDA >= 12.9:
// 12.x with minor >= 0, so DGX Spark's 12.1 too).
#pragma once
#include <string>

namespace dsattn {
namespace detail {

// True when one entry of `list` (entries separated by ',' or ';', e.g. "80,89,90a,100f,120f") has
// code a device of compute capability major.minor runs. Malformed entries never match.
bool arch_list_runs_on(const std::string& list, int major, int minor);

// The DSATTN_CUDA_ARCHS entry that adds code for a device of compute capability major.minor: the
// family target for 10.x and 12.x ("100f", "120f"), "90a" for 9.0 (wgmma), else the plain one ("86").
std::string arch_for_device(int major, int minor);

// `list` written for a message: "80, 89, 90a, 100f, 120f".
std::string arch_list_text(const std::string& list);

}  // namespace detail
}  // namespace dsattn
