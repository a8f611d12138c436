// The schedule's partition bound that paged_mqa_topk's plan relies on (src/cuda/sm80/
// fused_topk_launch.cu): no partition is longer than ceil(total units / partitions), so a piece (a
// partition's part of one group) never holds more than that many units of states. On Hopper the
// pure dense scoring kernel sizes its buffers by this bound; the device schedule kernel uses the
// same boundaries as the host schedule checked here (GpuIndexer.ScheduleDeviceMatchesHost).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/indexer_work.h"
#include "cpu_test_util.h"
#include "dsattn/ops.h"

namespace dsattn {
namespace {

constexpr int kUnit = 64;  // states per schedule unit (detail::kIndexerUnit)

using testutil::host_schedule;

// DSATTN_INDEXER_GROUP_COST for one scope (the schedule reads it per call). paged_mqa_topk's own
// schedules use cost 0 (launch_indexer_schedule's default), so the bounds its plans rely on are
// checked at 0 whatever the logits ops' default is.
struct GroupCost : testutil::EnvScope {
  explicit GroupCost(int units) : EnvScope("DSATTN_INDEXER_GROUP_COST", std::to_string(units).c_str()) {}
};

TEST(ScheduleBounds, NoPartitionLongerThanItsShare) {
  const GroupCost cost0(0);
  std::mt19937_64 rng(11);
  struct SC {
    int B, N, parts, maxlen;
  };
  for (const SC& sc : {SC{128, 1, 396, 32768}, SC{7, 1, 396, 5000}, SC{1, 1, 396, 65536}, SC{300, 2, 264, 900},
                       SC{33, 3, 132, 70000}, SC{2000, 1, 396, 8192}, SC{5, 1, 1500, 200000}}) {
    std::vector<int32_t> lens(size_t(sc.B) * sc.N);
    for (auto& l : lens) l = int32_t(rng() % (sc.maxlen + 1));
    const std::vector<int32_t> meta = host_schedule(lens, sc.B, sc.N, sc.parts);
    if (::testing::Test::HasFailure()) return;
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

// The group cost (detail::indexer_group_lead): `cost` virtual units lead every non-empty request
// after the first, and partitions split the virtual units evenly. So the partitions still cover
// every unit once, in order; each partition's units plus `cost` for every request it enters after
// its first stay within ceil(virtual total / P). Empty requests (length 0) get no lead.
TEST(ScheduleBounds, GroupCostBalancesVirtualUnits) {
  std::mt19937_64 rng(23);
  struct SC {
    int B, N, parts, maxlen;
    bool some_empty;
  };
  for (int cost : {0, 1, 4, 9, 64}) {
    const GroupCost env(cost);
    for (const SC& sc : {SC{32, 1, 132, 32768, false}, SC{128, 1, 132, 8192, false}, SC{7, 2, 396, 5000, true},
                         SC{1, 1, 132, 65536, false}, SC{300, 1, 132, 900, true}, SC{64, 3, 264, 16384, true},
                         SC{3, 1, 1500, 200000, false}, SC{5, 1, 16, 0, true}}) {
      std::vector<int32_t> lens(size_t(sc.B) * sc.N);
      for (auto& l : lens) l = sc.maxlen == 0 ? 0 : int32_t(rng() % (sc.maxlen + 1));
      if (!sc.some_empty) {
        for (auto& l : lens) l = std::max<int32_t>(l, 1);
      } else if (sc.maxlen > 0) {
        for (int b = 0; b < sc.B; b += 3) std::fill_n(lens.begin() + int64_t(b) * sc.N, sc.N, 0);
      }
      const std::vector<int32_t> meta = host_schedule(lens, sc.B, sc.N, sc.parts);
      if (::testing::Test::HasFailure()) return;
      std::vector<int64_t> units(size_t(sc.B)), prefix(size_t(sc.B) + 1, 0);
      int64_t virt = 0;
      for (int b = 0; b < sc.B; ++b) {
        int64_t hi = 0;
        for (int j = 0; j < sc.N; ++j) hi = std::max<int64_t>(hi, lens[size_t(b) * sc.N + j]);
        units[size_t(b)] = (hi + kUnit - 1) / kUnit;
        prefix[size_t(b) + 1] = prefix[size_t(b)] + units[size_t(b)];
        virt += units[size_t(b)] + (b > 0 && units[size_t(b)] > 0 ? cost : 0);
      }
      const int64_t total = prefix[size_t(sc.B)];
      const int64_t share_v = (virt + sc.parts - 1) / sc.parts;
      auto at = [&](int p) {
        const int32_t g = meta[4 + 2 * size_t(p)], u = meta[5 + 2 * size_t(p)];
        EXPECT_GE(g, 0);
        EXPECT_LE(g, sc.B);
        if (g < sc.B) {
          EXPECT_GE(u, 0);
          EXPECT_LT(u, std::max<int64_t>(units[size_t(g)], 1)) << "a start inside its request";
        }
        return g >= sc.B ? total : prefix[size_t(g)] + u;
      };
      EXPECT_EQ(at(0), 0);
      EXPECT_EQ(meta[4 + 2 * size_t(sc.parts)], sc.B);
      int64_t covered = 0;
      for (int p = 0; p < sc.parts; ++p) {
        const int64_t a = at(p), b = at(p + 1);
        ASSERT_LE(a, b) << "cost " << cost << " partition " << p;
        covered += b - a;
        // Requests entered after the partition's first: non-empty ones whose first unit lies in (a, b).
        int entered = 0;
        for (int g = 1; g < sc.B; ++g) entered += units[size_t(g)] > 0 && prefix[size_t(g)] > a && prefix[size_t(g)] < b;
        EXPECT_LE(b - a + int64_t(cost) * entered, share_v)
            << "cost " << cost << " B " << sc.B << " partition " << p << " units " << b - a << " enters " << entered;
      }
      EXPECT_EQ(covered, total) << "cost " << cost << " B " << sc.B;
    }
  }
}

// The paged work of one request with N rows (the N rule) whose context length is *len.
detail::IndexerWork one_request_work(int N, const int32_t* len) {
  detail::IndexerWork w;
  w.mode = detail::IndexerMode::kPaged;
  w.rows_per_group = N;
  w.next_n = N;
  w.lens_per_row = 0;
  w.rows = N;
  w.groups = 1;
  w.batch = 1;
  w.lens = len;
  w.lens_s0 = 1;
  return w;
}

// The resident route's bound (src/cuda/sm80/fused_topk_launch.cu, plan_resident): with the rows'
// lengths capped at the block table's states (IndexerWork::len_cap = width), a request's units
// never exceed ceil(width / unit), so no partition of the schedule is longer than the plan's piece
// capacity ceil(ceil(width / unit) / P) units, whatever lengths the device holds (also lengths
// beyond the block table, which only the device sees). Without the cap such a length breaks it.
TEST(ScheduleBounds, LenCapKeepsPiecesWithinTheBlockTable) {
  const int32_t width = 65536 + 320;  // block-table states
  const int P = 396;
  const int64_t width_units = (width + kUnit - 1) / kUnit;
  const int64_t cap_units = (width_units + P - 1) / P;
  for (int N : {1, 2, 3}) {
    for (int32_t len : {0, 1, width - 5, width, width + 1, 10 * width}) {
      for (int32_t cap : {width, 0}) {
        detail::IndexerWork w = one_request_work(N, &len);
        w.len_cap = cap;
        for (int j = 0; j < N; ++j) {
          int64_t want = int64_t(len) - N + 1 + j;
          if (cap > 0) want = std::min<int64_t>(want, cap);
          want = std::max<int64_t>(want, 0);
          EXPECT_EQ(detail::indexer_row_window(w, 0, j).hi, want) << "N " << N << " len " << len << " row " << j;
        }
        const int64_t units = detail::indexer_group_units(w, 0);
        std::vector<int32_t> meta(size_t(detail::indexer_meta_size(P)), -7);
        detail::indexer_meta_header(meta.data(), P, 1);
        detail::indexer_meta_fill_group(meta.data(), P, units, 0, 0, units);
        meta[4 + 2 * size_t(P)] = 1;  // the end pair (G, 0)
        meta[5 + 2 * size_t(P)] = 0;
        int64_t longest = 0;
        for (int p = 0; units > 0 && p < P; ++p) {  // no units: every partition is empty
          const int64_t a = meta[4 + 2 * size_t(p)] >= 1 ? units : meta[5 + 2 * size_t(p)];
          const int64_t b = meta[4 + 2 * size_t(p + 1)] >= 1 ? units : meta[5 + 2 * size_t(p + 1)];
          longest = std::max(longest, b - a);
        }
        if (cap > 0) {
          EXPECT_LE(units, width_units) << "N " << N << " len " << len;
          EXPECT_LE(longest, cap_units) << "N " << N << " len " << len;
        } else if (len == 10 * width) {
          EXPECT_GT(longest, cap_units) << "without the cap a length past the block table outgrows the pieces";
        }
      }
    }
  }
}

// IndexerWork::skip_len (paged_mqa_topk's rows left unscored): a row of at most skip_len states
// has an empty window (no units, so the schedules give it none) while indexer_row_length still
// returns its length, from which the op writes 0..len-1; longer rows keep their windows. With the
// N rule a request of skip_len + 1 states has one skipped row (skip_len states) beside a scored
// one, and its group's range is that of the scored row. skip_len = 0 changes nothing.
TEST(ScheduleBounds, SkipLenEmptiesShortRowsOnly) {
  for (int N : {1, 2, 3}) {
    for (int32_t skip : {0, 512}) {
      for (int32_t len : {0, 1, 511, 512, 513, 514, 2000}) {
        detail::IndexerWork w = one_request_work(N, &len);
        w.skip_len = skip;
        int64_t hi_max = 0;
        for (int j = 0; j < N; ++j) {
          const int64_t want = std::max<int64_t>(int64_t(len) - N + 1 + j, 0);
          const bool skipped = skip > 0 && want <= skip;
          const std::string at = "N " + std::to_string(N) + " skip " + std::to_string(skip) + " len " +
                                 std::to_string(len) + " row " + std::to_string(j);
          EXPECT_EQ(detail::indexer_row_length(w, 0, j), want) << at;
          EXPECT_EQ(detail::indexer_row_skipped(w, static_cast<int>(want)), skipped) << at;
          const detail::RowWindow rw = detail::indexer_row_window(w, 0, j);
          EXPECT_EQ(rw.lo, 0) << at;
          EXPECT_EQ(rw.hi, skipped ? 0 : want) << at;
          if (!skipped) hi_max = std::max(hi_max, want);
        }
        int32_t glo = -1, ghi = -1;
        detail::indexer_group_range(w, 0, &glo, &ghi);
        EXPECT_EQ(ghi, hi_max) << "N " << N << " skip " << skip << " len " << len;
        EXPECT_EQ(detail::indexer_group_units(w, 0), (hi_max + kUnit - 1) / kUnit)
            << "N " << N << " skip " << skip << " len " << len;
      }
    }
  }
}

// What the resident route's select for several requests (src/cuda/sm90/indexer_ws_resident.cuh)
// assumes of the schedule, checked on the host schedule (the device kernel's boundaries are the
// same): with CTA c taking partitions 3c .. 3c + 2, the requests a CTA holds units of are
// consecutive; a request strictly between a CTA's first and last is held by that CTA alone; the
// holders of a request are exactly the non-empty CTAs from first(g) = the last CTA whose start is
// <= (g, 0) to last(g) = the last CTA whose start lies in a request <= g (slot_info's rule on the
// partition starts); requests without units are held by none; and c + g is distinct over all
// (holder, request) pairs (the suffix sums' index).
TEST(ScheduleBounds, ResidentRequestsHeldByRunsOfCtas) {
  const GroupCost cost0(0);
  std::mt19937_64 rng(23);
  struct SC {
    int B, C, maxlen, zero_every;
  };
  for (const SC& sc : {SC{2, 132, 65536, 0}, SC{6, 132, 70000, 3}, SC{40, 132, 20000, 5}, SC{300, 132, 900, 4},
                       SC{5, 78, 200000, 2}, SC{1, 132, 3000, 0}, SC{9, 132, 64, 3}}) {
    const int P = 3 * sc.C;
    std::vector<int32_t> lens(size_t(sc.B));
    for (int b = 0; b < sc.B; ++b) {
      lens[size_t(b)] = sc.zero_every > 0 && b % sc.zero_every == 1 ? 0 : int32_t(rng() % (sc.maxlen + 1));
    }
    const std::vector<int32_t> meta = host_schedule(lens, sc.B, 1, P);
    if (::testing::Test::HasFailure()) return;
    std::vector<int64_t> units(size_t(sc.B)), prefix(size_t(sc.B) + 1, 0);
    for (int b = 0; b < sc.B; ++b) {
      units[size_t(b)] = (int64_t(lens[size_t(b)]) + kUnit - 1) / kUnit;
      prefix[size_t(b) + 1] = prefix[size_t(b)] + units[size_t(b)];
    }
    struct Pos {
      int32_t g, u;
    };
    auto start = [&](int c) { return Pos{meta[4 + 6 * size_t(c)], meta[5 + 6 * size_t(c)]}; };  // pair 3c
    auto off = [&](Pos p) { return p.g >= sc.B ? prefix[size_t(sc.B)] : prefix[size_t(p.g)] + p.u; };
    auto le = [](Pos a, Pos b) { return a.g < b.g || (a.g == b.g && a.u <= b.u); };
    // Brute force: the requests each CTA holds units of.
    std::vector<std::vector<int>> held(size_t(sc.C));
    std::vector<std::vector<int>> holders(size_t(sc.B));
    for (int c = 0; c < sc.C; ++c) {
      const int64_t a = off(start(c)), e = off(start(c + 1));
      ASSERT_LE(a, e) << "CTA " << c;
      for (int g = 0; g < sc.B; ++g) {
        if (std::max(a, prefix[size_t(g)]) < std::min(e, prefix[size_t(g) + 1])) {
          held[size_t(c)].push_back(g);
          holders[size_t(g)].push_back(c);
        }
      }
      const auto& h = held[size_t(c)];
      for (size_t i = 1; i < h.size(); ++i) {  // consecutive among the requests with units
        for (int g = h[i - 1] + 1; g < h[i]; ++g) EXPECT_EQ(units[size_t(g)], 0) << "CTA " << c << " skips " << g;
      }
      for (size_t i = 1; i + 1 < h.size(); ++i) {
        EXPECT_EQ(holders[size_t(h[i])].size(), 1u) << "request " << h[i] << " inside CTA " << c;
      }
    }
    std::vector<char> id_used(size_t(sc.C + sc.B), 0);
    for (int g = 0; g < sc.B; ++g) {
      const auto& hs = holders[size_t(g)];
      if (units[size_t(g)] == 0) {
        EXPECT_TRUE(hs.empty()) << "request " << g << " has no units";
        continue;
      }
      int first = -1, last = -1, n = 0;
      for (int c = 0; c <= sc.C; ++c) {
        if (c < sc.C && le(start(c), Pos{g, 0})) first = c;
        if (start(c).g <= g) last = c;
      }
      for (int c = std::max(first, 0); c <= last; ++c) {
        const Pos a = start(c), b = start(c + 1);
        n += (a.g != b.g || a.u != b.u) ? 1 : 0;
      }
      ASSERT_FALSE(hs.empty());
      EXPECT_EQ(first, hs.front()) << "request " << g;
      EXPECT_EQ(last, hs.back()) << "request " << g;
      EXPECT_EQ(n, int(hs.size())) << "request " << g;
      for (int c : hs) {
        EXPECT_FALSE(id_used[size_t(c + g)]) << "id " << c + g << " twice";
        id_used[size_t(c + g)] = 1;
      }
    }
  }
}

}  // namespace
}  // namespace dsattn
