// detail::FastDivU31 (src/common/fast_div.h), the indexer kernels' division by the run-time page
// size: compared with `/` for every divisor 1..4096 (page sizes are 1..256; larger ones cover the
// formula), powers of two and their neighbours up to 2^31 - 1, on dividends near every multiple
// of the divisor at the ends of the range and on random ones below 2^31.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "common/fast_div.h"

namespace dsattn {
namespace {

void check_divisor(uint32_t d, std::mt19937_64& rng) {
  const detail::FastDivU31 f(d);
  const uint32_t top = 0x7fffffffu;
  std::vector<uint32_t> ns = {0, 1, d - 1, d, d + 1, top, top - 1, top - d, top / d * d, top / d * d - 1};
  for (uint32_t q = 0; q < 64; ++q) {
    const uint64_t base = uint64_t(q) * d;
    for (int64_t e = -1; e <= 1; ++e) {
      const int64_t n = int64_t(base) + e;
      if (n >= 0 && n <= top) ns.push_back(static_cast<uint32_t>(n));
    }
    const uint64_t hi = uint64_t(top / d - q) * d;  // multiples near the top of the range
    for (int64_t e = -1; e <= 1; ++e) {
      const int64_t n = int64_t(hi) + e;
      if (n >= 0 && n <= top) ns.push_back(static_cast<uint32_t>(n));
    }
  }
  std::uniform_int_distribution<uint32_t> any(0, top);
  for (int i = 0; i < 256; ++i) ns.push_back(any(rng));
  for (const uint32_t n : ns) {
    ASSERT_EQ(f.div(n), n / d) << "n " << n << " d " << d;
  }
}

TEST(FastDiv, MatchesDivisionOnEveryPageSizeAndBeyond) {
  std::mt19937_64 rng(7);
  for (uint32_t d = 1; d <= 4096; ++d) check_divisor(d, rng);
}

TEST(FastDiv, PowersOfTwoAndNeighboursUpTo2To31) {
  std::mt19937_64 rng(11);
  for (int b = 1; b <= 31; ++b) {
    const uint32_t p = uint32_t(1) << b;
    for (const uint32_t d : {p - 1, p, p + 1}) {
      if (d >= 1 && d <= 0x7fffffffu) check_divisor(d, rng);
    }
  }
  std::uniform_int_distribution<uint32_t> any(2, 0x7fffffffu);
  for (int i = 0; i < 2000; ++i) check_divisor(any(rng), rng);
}

TEST(FastDiv, ZeroDivisorIsTreatedAsOne) {
  const detail::FastDivU31 f(0);
  EXPECT_EQ(f.div(12345u), 12345u);
}

}  // namespace
}  // namespace dsattn
