// IdxCursor (src/common/indexer_cursor.h), the indexer kernels' walk over a schedule partition: the
// warp-specialized producer takes a batch's tiles through fast_count / fast_tile / fast_skip (each
// lane computes its own tile) and falls back to next() where a group changes. This checks, on the
// host schedule, that the batched direct access returns exactly the tiles that next() alone returns,
// in order, for every partition and rotation slot: partitions that start and end inside groups,
// empty and short groups, several rows per group with different lengths, rotations over 1-6 slots
// (the kernel's three rings times the CTAs of a split partition), 64- to 256-state tiles, state
// limits that clip, and batches of 1-32 tiles (with and without the first batch stopping at its
// group's end).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "common/indexer_cursor.h"
#include "common/indexer_work.h"
#include "cpu_test_util.h"
#include "dsattn/ops.h"

namespace dsattn {
namespace {

using cuda::IdxCursor;
using cuda::IdxTile;

// What IdxCursor reads of the kernels' IndexerParams.
struct CursorParams {
  const int32_t* meta = nullptr;
  int partitions = 0;  // meta == nullptr (one group): the partitions
  detail::IndexerWork work;
  int split = 1;
  int tile_states = 256;
  int64_t state_limit = INT32_MAX;
};

using testutil::host_schedule;

std::vector<IdxTile> walk(const CursorParams& p, int part, int sub) {
  IdxCursor c;
  c.init(p, part, sub);
  std::vector<IdxTile> out;
  IdxTile t;
  while (c.next(p, &t)) out.push_back(t);
  return out;
}

// The producer's batches: fast tiles while the group has them, next() otherwise.
std::vector<IdxTile> batched(const CursorParams& p, int part, int sub, int per, bool first_one_group, int64_t* fast) {
  IdxCursor c;
  c.init(p, part, sub);
  std::vector<IdxTile> out;
  bool first = first_one_group;
  for (;;) {
    int n = 0;
    bool ended = false;
    while (n < per) {
      int nf = c.fast_count();
      if (nf > 0) {
        if (nf > per - n) nf = per - n;
        for (int k = 0; k < nf; ++k) out.push_back(c.fast_tile(k));
        c.fast_skip(nf);
        n += nf;
        *fast += nf;
        continue;
      }
      if (first && n > 0 && c.uend >= 0) break;
      IdxTile t;
      if (!c.next(p, &t)) {
        ended = true;
        break;
      }
      out.push_back(t);
      ++n;
    }
    first = false;
    if (ended || n == 0) break;
  }
  return out;
}

TEST(IndexerCursor, BatchedDirectAccessEqualsTheWalk) {
  std::mt19937_64 rng(29);
  struct SC {
    int B, N, parts, maxlen;
  };
  int64_t tiles = 0, fast = 0;
  for (const SC& sc : {SC{1, 1, 132, 65536}, SC{32, 1, 132, 32768}, SC{37, 2, 132, 9000}, SC{5, 3, 7, 70000},
                       SC{128, 1, 132, 2048}, SC{300, 2, 44, 700}, SC{3, 1, 1, 20000}, SC{9, 4, 260, 1500}}) {
    for (int rep = 0; rep < 3; ++rep) {
      std::vector<int32_t> lens(size_t(sc.B) * sc.N);
      for (auto& l : lens) {
        const uint64_t r = rng() % 10;
        l = r == 0 ? 0 : r == 1 ? int32_t(rng() % 64) : int32_t(rng() % (sc.maxlen + 1));
      }
      const std::vector<int32_t> meta = host_schedule(lens, sc.B, sc.N, sc.parts);
      if (::testing::Test::HasFailure()) return;
      CursorParams p;
      p.meta = meta.data();
      p.work.mode = detail::IndexerMode::kPaged;
      p.work.rows_per_group = sc.N;
      p.work.next_n = sc.N;
      p.work.lens_per_row = 1;
      p.work.rows = int64_t(sc.B) * sc.N;
      p.work.groups = sc.B;
      p.work.batch = sc.B;
      p.work.lens = lens.data();
      p.work.lens_s0 = sc.N;
      p.work.lens_s1 = 1;
      for (int split : {1, 2, 3, 6}) {
        for (int tile_states : {64, 128, 192, 256, 384, 512}) {
          for (int64_t limit : {int64_t(INT32_MAX), int64_t(sc.maxlen / 2), int64_t(100)}) {
            p.split = split;
            p.tile_states = tile_states;
            p.state_limit = limit;
            for (int part = 0; part < sc.parts; ++part) {
              for (int sub = 0; sub < split; ++sub) {
                const std::vector<IdxTile> ref = walk(p, part, sub);
                const int per = 1 << (rng() % 6);  // 1 .. 32
                const std::vector<IdxTile> got = batched(p, part, sub, per, rng() % 2 == 0, &fast);
                tiles += int64_t(ref.size());
                ASSERT_EQ(got.size(), ref.size())
                    << "B " << sc.B << " N " << sc.N << " parts " << sc.parts << " part " << part << " split " << split
                    << " sub " << sub << " tile " << tile_states << " limit " << limit << " per " << per;
                for (size_t i = 0; i < ref.size(); ++i) {
                  ASSERT_TRUE(got[i].g == ref[i].g && got[i].t0 == ref[i].t0 && got[i].count == ref[i].count)
                      << "tile " << i << ": (" << got[i].g << ", " << got[i].t0 << ", " << got[i].count
                      << ") against the walk's (" << ref[i].g << ", " << ref[i].t0 << ", " << ref[i].count
                      << "); B " << sc.B << " N " << sc.N << " parts " << sc.parts << " part " << part << " split "
                      << split << " sub " << sub << " tile " << tile_states << " limit " << limit << " per " << per;
                  ASSERT_GT(ref[i].count, 0);
                }
              }
            }
          }
        }
      }
    }
  }
  // The direct access must actually have been taken (most tiles lie inside their group).
  EXPECT_GT(tiles, 100000);
  EXPECT_GT(fast, tiles / 2);
}

// One request without schedule metadata (paged_mqa_logits at batch 1 launches no schedule kernel):
// every partition's walk, and its batched direct access, must return exactly the tiles of the
// host schedule's partition, for lengths from 0 to 1M, next_n 1-4 with per-row lengths, 1-396
// partitions (more partitions than units too), rotations and state limits.
TEST(IndexerCursor, OneGroupWithoutMetadataEqualsTheSchedule) {
  std::mt19937_64 rng(31);
  int64_t tiles = 0;
  for (int N : {1, 2, 4}) {
    for (int parts : {1, 7, 132, 264, 396}) {
      for (int rep = 0; rep < 6; ++rep) {
        std::vector<int32_t> lens(static_cast<size_t>(N), 0);
        const uint64_t kind = rng() % 6;
        for (auto& l : lens) {
          l = kind == 0 ? 0 : kind == 1 ? int32_t(rng() % 200) : kind == 2 ? int32_t(1 << 20)
                                                               : int32_t(rng() % 70000);
        }
        const std::vector<int32_t> meta = host_schedule(lens, 1, N, parts);
        if (::testing::Test::HasFailure()) return;
        CursorParams with, without;
        with.meta = meta.data();
        with.work.mode = detail::IndexerMode::kPaged;
        with.work.rows_per_group = N;
        with.work.next_n = N;
        with.work.lens_per_row = 1;
        with.work.rows = N;
        with.work.groups = 1;
        with.work.batch = 1;
        with.work.lens = lens.data();
        with.work.lens_s0 = N;
        with.work.lens_s1 = 1;
        without = with;
        without.meta = nullptr;
        without.partitions = parts;
        for (int split : {1, 3}) {
          for (int64_t limit : {int64_t(INT32_MAX), int64_t(30000)}) {
            with.split = without.split = split;
            with.state_limit = without.state_limit = limit;
            with.tile_states = without.tile_states = rng() % 2 == 0 ? 256 : 64;
            for (int part = 0; part < parts; ++part) {
              for (int sub = 0; sub < split; ++sub) {
                const std::vector<IdxTile> ref = walk(with, part, sub);
                int64_t fast = 0;
                const std::vector<IdxTile> got = walk(without, part, sub);
                const std::vector<IdxTile> got_b = batched(without, part, sub, 8, false, &fast);
                tiles += int64_t(ref.size());
                ASSERT_EQ(got.size(), ref.size()) << "N " << N << " parts " << parts << " part " << part << " len "
                                                  << lens[0] << " split " << split << " limit " << limit;
                ASSERT_EQ(got_b.size(), ref.size()) << "batched; N " << N << " parts " << parts << " part " << part;
                for (size_t i = 0; i < ref.size(); ++i) {
                  ASSERT_TRUE(got[i].g == ref[i].g && got[i].t0 == ref[i].t0 && got[i].count == ref[i].count)
                      << "tile " << i << " of part " << part << " (N " << N << " parts " << parts << ")";
                  ASSERT_TRUE(got_b[i].g == ref[i].g && got_b[i].t0 == ref[i].t0 && got_b[i].count == ref[i].count)
                      << "batched tile " << i << " of part " << part << " (N " << N << " parts " << parts << ")";
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(tiles, 10000);
}

// One request walked as one partition dealt round robin (the warp-specialized producer's
// kWsOneGroupWalk at batch 1): for every ring (CTA c of `ctas`, ring w of 3: first tile c + w ctas,
// 3 ctas tiles apart) the closed form returns exactly the cursor's tiles, and over all rings the
// tiles cover every state of [0, min(group end, limit)) exactly once. Lengths 0 to 1M, next_n 1-4
// with per-row lengths and the [B] rule, 64- to 256-state tiles, 1-396 CTAs, limits that clip.
TEST(IndexerCursor, OneGroupRoundRobinEqualsTheWalk) {
  std::mt19937_64 rng(37);
  int64_t tiles = 0;
  for (int N : {1, 2, 4}) {
    for (int ctas : {1, 5, 132, 396}) {
      for (int rep = 0; rep < 5; ++rep) {
        const bool per_row = rep % 2 == 0;
        std::vector<int32_t> lens(static_cast<size_t>(per_row ? N : 1), 0);
        const uint64_t kind = rng() % 6;
        for (auto& l : lens) {
          l = kind == 0 ? 0 : kind == 1 ? int32_t(rng() % 200) : kind == 2 ? int32_t(1 << 20)
                                                               : int32_t(rng() % 70000);
        }
        CursorParams p;
        p.meta = nullptr;
        p.partitions = 1;
        p.work.mode = detail::IndexerMode::kPaged;
        p.work.rows_per_group = N;
        p.work.next_n = N;
        p.work.lens_per_row = per_row ? 1 : 0;
        p.work.rows = N;
        p.work.groups = 1;
        p.work.batch = 1;
        p.work.lens = lens.data();
        p.work.lens_s0 = per_row ? N : 1;
        p.work.lens_s1 = 1;
        int32_t glo = 0, ghi = 0;
        detail::indexer_group_range(p.work, 0, &glo, &ghi);
        ASSERT_EQ(glo, 0);  // paged windows start at 0: the kernel's closed form relies on it
        for (int64_t limit : {int64_t(INT32_MAX), int64_t(30000), int64_t(64), int64_t(0)}) {
          for (int tile_states : {64, 128, 192, 256}) {
            p.split = 3 * ctas;
            p.tile_states = tile_states;
            p.state_limit = limit;
            const int64_t end = cuda::idx_round_robin_end(ghi, limit);
            std::vector<uint8_t> seen(static_cast<size_t>(end > 0 ? end : 0), 0);
            for (int c = 0; c < ctas; ++c) {
              for (int w = 0; w < 3; ++w) {
                const int first = c + w * ctas;
                const std::vector<IdxTile> ref = walk(p, 0, first);
                std::vector<IdxTile> got;
                IdxTile t;
                for (int64_t i = 0; cuda::idx_round_robin_tile(glo, end, first, 3 * ctas, i, tile_states, &t); ++i) {
                  got.push_back(t);
                }
                tiles += int64_t(ref.size());
                ASSERT_EQ(got.size(), ref.size()) << "N " << N << " ctas " << ctas << " c " << c << " w " << w
                                                  << " len " << lens[0] << " limit " << limit << " tile " << tile_states;
                for (size_t i = 0; i < ref.size(); ++i) {
                  ASSERT_TRUE(got[i].g == ref[i].g && got[i].t0 == ref[i].t0 && got[i].count == ref[i].count)
                      << "tile " << i << ": (" << got[i].g << ", " << got[i].t0 << ", " << got[i].count
                      << ") against the walk's (" << ref[i].g << ", " << ref[i].t0 << ", " << ref[i].count
                      << "); N " << N << " ctas " << ctas << " c " << c << " w " << w << " tile " << tile_states;
                  for (int s = 0; s < got[i].count; ++s) ++seen[size_t(got[i].t0) + s];
                }
              }
            }
            for (size_t s = 0; s < seen.size(); ++s) {
              ASSERT_EQ(seen[s], 1) << "state " << s << " of " << end << "; N " << N << " ctas " << ctas << " tile "
                                    << tile_states << " limit " << limit;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(tiles, 10000);
}

// The warp-specialized wgmma kernel's own schedule (ws_inline_schedule, IndexerParams::inline_schedule):
// each thread of a CTA of nt threads takes a run of consecutive groups, a block scan gives the
// runs' first virtual units, and indexer_run_pairs fills the CTA's two pairs from the runs that
// hold them (indexer_group_pairs, from the units already read, when every run is one group).
// Simulated here thread by thread for every partition, it must give exactly the host schedule's
// pairs (the schedule kernel's, which GpuIndexer.GraphReplayRequestsOwnSchedule checks
// bitwise on the GPU): fewer and more groups than threads, empty groups, all groups empty, several
// rows per group, more partitions than groups.
TEST(IndexerCursor, RunPairsEqualTheSchedule) {
  std::mt19937_64 rng(31);
  struct SC {
    int B, N, parts, maxlen;
  };
  const int64_t cost = detail::indexer_group_cost();
  int64_t checked = 0, checked_one = 0;
  for (const SC& sc : {SC{2, 1, 132, 65536}, SC{32, 1, 132, 32768}, SC{37, 2, 132, 9000}, SC{5, 3, 7, 70000},
                       SC{128, 1, 132, 2048}, SC{600, 1, 132, 300}, SC{1500, 2, 264, 100}, SC{9, 4, 260, 1500}}) {
    for (int rep = 0; rep < 4; ++rep) {
      std::vector<int32_t> lens(size_t(sc.B) * sc.N);
      for (auto& l : lens) {
        const uint64_t r = rng() % 10;
        l = rep == 3 ? 0 : r == 0 ? 0 : r == 1 ? int32_t(rng() % 64) : int32_t(rng() % (sc.maxlen + 1));
      }
      const std::vector<int32_t> meta = host_schedule(lens, sc.B, sc.N, sc.parts);
      if (::testing::Test::HasFailure()) return;
      detail::IndexerWork w;
      w.mode = detail::IndexerMode::kPaged;
      w.rows_per_group = sc.N;
      w.next_n = sc.N;
      w.lens_per_row = 1;
      w.rows = int64_t(sc.B) * sc.N;
      w.groups = sc.B;
      w.batch = sc.B;
      w.lens = lens.data();
      w.lens_s0 = sc.N;
      w.lens_s1 = 1;
      const int64_t G = sc.B, P = sc.parts;
      for (int nt : {32, 480, 512}) {
        const int64_t per = (G + nt - 1) / nt;
        std::vector<int64_t> lo(nt), hi(nt), v(nt), pre(nt);
        int64_t total = 0;
        for (int t = 0; t < nt; ++t) {
          lo[t] = std::min(G, per * t);
          hi[t] = std::min(G, lo[t] + per);
          v[t] = detail::indexer_run_units(w, lo[t], hi[t], cost);
          pre[t] = total;
          total += v[t];
        }
        for (int64_t q = 0; q < P; ++q) {
          int32_t pair[4] = {int32_t(G), 0, int32_t(G), 0};
          for (int t = 0; t < nt; ++t) detail::indexer_run_pairs(w, lo[t], hi[t], cost, pre[t], v[t], total, P, q, pair);
          const int32_t* want = meta.data() + detail::kIndexerMetaHeader + 2 * q;
          for (int i = 0; i < 4; ++i) {
            ASSERT_EQ(pair[i], want[i]) << "B " << sc.B << " N " << sc.N << " parts " << P << " rep " << rep << " threads "
                                        << nt << " partition " << q << " word " << i;
          }
          if (per == 1) {  // kWsOwnRange: one group per thread, its units kept from the scan's read
            int32_t one[4] = {int32_t(G), 0, int32_t(G), 0};
            for (int t = 0; t < nt; ++t) {
              if (lo[t] < hi[t]) {
                detail::indexer_group_pairs(lo[t], detail::indexer_group_units(w, lo[t]), cost, pre[t], total, P, q, one);
              }
            }
            for (int i = 0; i < 4; ++i) {
              ASSERT_EQ(one[i], want[i]) << "one group per thread: B " << sc.B << " N " << sc.N << " parts " << P
                                         << " rep " << rep << " threads " << nt << " partition " << q << " word " << i;
            }
            ++checked_one;
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 0);
  EXPECT_GT(checked_one, 0);
}

// The partition formulas the host schedule, the schedule kernel and IdxCursor::init share:
// indexer_first_partition_from(x) is the first partition whose start is at or after unit x, and
// the starts are non-decreasing from 0 to `total`.
TEST(IndexerCursor, PartitionStartsAndFirstPartitionFrom) {
  std::mt19937_64 rng(11);
  for (int it = 0; it < 400; ++it) {
    const int64_t total = it < 200 ? 1 + int64_t(rng() % 5000) : 1 + int64_t(rng() % (int64_t(1) << 34));
    const int64_t P = 1 + int64_t(rng() % 1100);
    EXPECT_EQ(detail::indexer_partition_start(0, total, P), 0);
    EXPECT_EQ(detail::indexer_partition_start(P, total, P), total);
    for (int k = 0; k < 40; ++k) {
      const int64_t p = int64_t(rng() % uint64_t(P));
      EXPECT_LE(detail::indexer_partition_start(p, total, P), detail::indexer_partition_start(p + 1, total, P));
      const int64_t x = int64_t(rng() % uint64_t(total + 1));
      const int64_t f = detail::indexer_first_partition_from(x, total, P);
      ASSERT_GE(f, 0);
      ASSERT_LE(f, P);
      EXPECT_GE(detail::indexer_partition_start(f, total, P), x) << total << " " << P << " " << x;
      if (f > 0) {
        EXPECT_LT(detail::indexer_partition_start(f - 1, total, P), x) << total << " " << P << " " << x;
      }
    }
  }
}

}  // namespace
}  // namespace dsattn
