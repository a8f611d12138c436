// Division by a run-time divisor that stays fixed over a kernel (states per page): one multiply-high
// and a shift instead of the ~20-instruction integer division sequence, for dividends below 2^31.
// Host and device code; tests/cpu/test_fast_div.cpp checks it against `/` on the host.
//
//   d == 1: q = n.
//   d >= 2: l = ceil(log2 d), m = ceil(2^(31 + l) / d) (fits 32 bits), q = mulhi(n, m) >> (l - 1).
// Why it is exact for 0 <= n < 2^31: m = (2^(31 + l) + e) / d with 0 <= e < d, so
// n m / 2^(31 + l) = n / d + n e / (d 2^(31 + l)), and the second term is below 1 / d because
// n < 2^31 and e < d <= 2^l; a value below floor(n / d) + 1 stays below it when that term is added
// to n / d, whose fractional part is at most (d - 1) / d.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define DSATTN_FASTDIV_FN __host__ __device__ __forceinline__
#else
#define DSATTN_FASTDIV_FN inline
#endif

namespace dsattn {
namespace detail {

struct FastDivU31 {
  uint32_t d = 1;
  uint32_t m = 0;
  int shift = 0;  // l - 1 (d >= 2)

  FastDivU31() = default;
  DSATTN_FASTDIV_FN explicit FastDivU31(uint32_t divisor) : d(divisor < 1 ? 1 : divisor) {
    if (d == 1) return;
    int l = 0;
    while ((uint64_t(1) << l) < d) ++l;  // ceil(log2 d), 1..32
    m = static_cast<uint32_t>(((uint64_t(1) << (31 + l)) + d - 1) / d);
    shift = l - 1;
  }
  // n / d for 0 <= n < 2^31.
  DSATTN_FASTDIV_FN uint32_t div(uint32_t n) const {
    if (d == 1) return n;
#if defined(__CUDA_ARCH__)
    return __umulhi(n, m) >> shift;
#else
    return static_cast<uint32_t>((uint64_t(n) * m) >> 32) >> shift;
#endif
  }
};

// a / b (b != 0) where the operands are usually small: on the device, one 32-bit division (an
// inline sequence) when both are in [0, 2^32), else the 64-bit one, which the compiler emits as a
// called subroutine at the end of the kernel's code. A kernel that reached that call on its way
// to its first loads fetched the subroutine's instructions cold: on an H200 the portable
// indexer's start (FastDivU31's constructor, per warp) spent ~7 % of the kernel's warp samples on
// it at 1 x 64K (ncu, BENCHMARKS.md 2026-12-03). Same result as `/` for every a, b.
DSATTN_FASTDIV_FN int64_t div_small(int64_t a, int64_t b) {
#if defined(__CUDA_ARCH__)
  if (((static_cast<uint64_t>(a) | static_cast<uint64_t>(b)) >> 32) == 0) {
    return static_cast<int64_t>(static_cast<uint32_t>(a) / static_cast<uint32_t>(b));
  }
#endif
  return a / b;
}

}  // namespace detail
}  // namespace dsattn
