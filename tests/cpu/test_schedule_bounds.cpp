// The schedule's partition bound that paged_mqa_topk's plan relies on (src/cuda/sm80/
// fused_topk_launch.cu): no partition is longer than ceil(total units / partitions), so a piece (a
// partition's part of one group) never holds more than that many units of states. On Hopper the
// pure dense scoring kernel sizes its buffers by this bound; the device schedule kernel uses the
// same boundaries as the host schedule checked here (GpuIndexer.ScheduleDeviceMatchesHost).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "dsattn/ops.h"

namespace dsattn {
namespace {

constexpr int kUnit = 64;  // states per schedule unit (detail::kIndexerUnit)

TEST(ScheduleBounds, NoPartitionLongerThanItsShare) {
  std::mt19937_64 rng(11);
  struct SC {
    int B, N, parts, maxlen;
  };
  for (const SC& sc : {SC{128, 1, 396, 32768}, SC{7, 1, 396, 5000}, SC{1, 1, 396, 65536}, SC{300, 2, 264, 900},
                       SC{33, 3, 132, 70000}, SC{2000, 1, 396, 8192}, SC{5, 1, 1500, 200000}}) {
    std::vector<int32_t> lens(size_t(sc.B) * sc.N);
    for (auto& l : lens) l = int32_t(rng() % (sc.maxlen + 1));
    std::vector<int32_t> meta(size_t(schedule_metadata_size(sc.parts)), -7);
    ScheduleMetadataParams sp;
    sp.context_lens = make_tensor(lens.data(), DType::kI32, {sc.B, sc.N});
    sp.next_n = sc.N;
    sp.states_per_page = 64;
    sp.num_sms = sc.parts;
    sp.metadata = make_tensor(meta.data(), DType::kI32, {int64_t(meta.size())});
    const Status s = schedule_metadata(sp, Exec{});
    ASSERT_TRUE(s.ok()) << s.to_string();
    // Units of group b: its rows' windows are [0, len), so ceil(max len / unit).
    std::vector<int64_t> prefix(size_t(sc.B) + 1, 0);
    for (int b = 0; b < sc.B; ++b) {
      int64_t hi = 0;
      for (int j = 0; j < sc.N; ++j) hi = std::max<int64_t>(hi, lens[size_t(b) * sc.N + j]);
      prefix[size_t(b) + 1] = prefix[size_t(b)] + (hi + kUnit - 1) / kUnit;
    }
    const int64_t total = prefix[size_t(sc.B)];
    const int64_t share = (total + sc.parts - 1) / sc.parts;
    auto at = [&](int p) {  // partition p's first (group, unit) as a global unit offset
      const int32_t g = meta[4 + 2 * size_t(p)], u = meta[5 + 2 * size_t(p)];
      EXPECT_GE(g, 0);
      EXPECT_LE(g, sc.B);
      return g >= sc.B ? total : prefix[size_t(g)] + u;
    };
    int64_t covered = 0;
    for (int p = 0; p < sc.parts; ++p) {
      const int64_t len = at(p + 1) - at(p);
      EXPECT_GE(len, 0) << "partition " << p;
      EXPECT_LE(len, share) << "partition " << p << " of " << sc.parts << ", total " << total;
      covered += len;
    }
    EXPECT_EQ(at(0), 0);
    EXPECT_EQ(covered, total);
  }
}

}  // namespace
}  // namespace dsattn
