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

}  // namespace detail
}  // namespace dsattn
