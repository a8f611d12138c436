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
        for (int tile_states : {64, 128, 192, 256}) {
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

}  // namespace
}  // namespace dsattn
