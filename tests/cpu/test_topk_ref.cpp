// CPU reference of topk (SPEC §3.3): hand cases, ties, NaN / inf, short rows, bounds, bf16, the
// slot-id transform, and random rows against a brute-force sort.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "common/indexer_test_util.h"
#include "cpu_test_util.h"
#include "dsattn/codecs.h"
#include "dsattn/ops.h"

using namespace dsattn;
using namespace dsattn::testutil;

namespace {

const float kNaN = std::nanf("");

struct TopkOut {
  std::vector<int32_t> idx;
  std::vector<float> val;
  std::vector<int32_t> slots;
};

// One f32 row, optional bounds.
TopkOut run_row(std::vector<float> row, int k, bool sorted, int start = -1, int end = -1) {
  const int64_t W = static_cast<int64_t>(row.size());
  std::vector<int32_t> s = {start}, e = {end};
  TopkOut o;
  o.idx.assign(static_cast<size_t>(k), -7);
  o.val.assign(static_cast<size_t>(k), kPoison);
  TopkParams p;
  p.logits = make_tensor(row.data(), DType::kF32, {1, W});
  if (start >= 0) p.starts = make_tensor(s.data(), DType::kI32, {1});
  if (end >= 0) p.ends = make_tensor(e.data(), DType::kI32, {1});
  p.k = k;
  p.sorted = sorted;
  p.indices = make_tensor(o.idx.data(), DType::kI32, {1, k});
  p.values = make_tensor(o.val.data(), DType::kF32, {1, k});
  const Status st = topk(p, cpu_exec());
  EXPECT_TRUE(st.ok()) << st.to_string();
  return o;
}

using I = std::vector<int32_t>;
using F = std::vector<float>;

TEST(TopkRef, HandCaseUnsortedAndSorted) {
  const F row = {3, 1, 4, 1, 5, 9, 2, 6};
  TopkOut u = run_row(row, 3, false);
  EXPECT_EQ(u.idx, (I{4, 5, 7}));  // the CPU gives ascending indices when unsorted
  EXPECT_EQ(u.val, (F{5, 9, 6}));
  TopkOut s = run_row(row, 3, true);
  EXPECT_EQ(s.idx, (I{5, 7, 4}));
  EXPECT_EQ(s.val, (F{9, 6, 5}));
  EXPECT_EQ(run_row(row, 1, true).idx, (I{5}));
  EXPECT_EQ(run_row(row, 7, true).idx, (I{5, 7, 4, 2, 0, 6, 1}));  // 1 at 1 and 3: index 1 first
}

TEST(TopkRef, TiesPreferSmallerIndex) {
  EXPECT_EQ(run_row(F(10, 2.5f), 4, false).idx, (I{0, 1, 2, 3}));
  EXPECT_EQ(run_row(F(10, 2.5f), 4, true).idx, (I{0, 1, 2, 3}));
  EXPECT_EQ(run_row(F{1, 2, 2, 2, 0}, 2, false).idx, (I{1, 2}));
  EXPECT_EQ(run_row(F{1, 2, 2, 2, 0}, 4, true).idx, (I{1, 2, 3, 0}));
  EXPECT_EQ(run_row(F{0.0f, -0.0f, 0.0f, -1.0f}, 2, true).idx, (I{0, 1}));  // +0 == -0: index decides
  EXPECT_EQ(run_row(F{-0.0f, 0.0f, -1.0f}, 1, true).idx, (I{0}));
}

TEST(TopkRef, NanRanksBelowEveryNumber) {
  const F row = {kNaN, -kInf, 1, kNaN, -kInf};
  EXPECT_EQ(run_row(row, 3, false).idx, (I{1, 2, 4}));
  EXPECT_EQ(run_row(row, 3, true).idx, (I{2, 1, 4}));
  TopkOut o = run_row(row, 4, true);
  EXPECT_EQ(o.idx, (I{2, 1, 4, 0}));  // NaN fills only when fewer than k non-NaN exist
  EXPECT_EQ(o.val[0], 1.0f);
  EXPECT_EQ(o.val[1], -kInf);
  EXPECT_EQ(o.val[2], -kInf);
  EXPECT_TRUE(std::isnan(o.val[3]));
  EXPECT_EQ(run_row(F(6, kNaN), 2, true).idx, (I{0, 1}));
  EXPECT_EQ(run_row(F{kNaN, kNaN, 3, kNaN}, 2, false).idx, (I{0, 2}));
  EXPECT_EQ(run_row(F{kNaN, kNaN, 3, kNaN}, 2, true).idx, (I{2, 0}));
}

TEST(TopkRef, Infinities) {
  EXPECT_EQ(run_row(F{kInf, 1, kInf, -kInf}, 2, true).idx, (I{0, 2}));
  EXPECT_EQ(run_row(F{-kInf, -kInf, -kInf, 7}, 2, true).idx, (I{3, 0}));
  EXPECT_EQ(run_row(F{-kInf, -kInf, -kInf, -kInf}, 3, false).idx, (I{0, 1, 2}));
}

TEST(TopkRef, ShortRowsPadWithMinusOne) {
  const int k = 4;
  const F row = {5, 7, 6, 9, 1, 8};
  // len 0
  TopkOut o = run_row(row, k, false, 2, 2);
  EXPECT_EQ(o.idx, (I{-1, -1, -1, -1}));
  EXPECT_EQ(o.val, (F{-kInf, -kInf, -kInf, -kInf}));
  // len 1
  o = run_row(row, k, true, 3, 4);
  EXPECT_EQ(o.idx, (I{0, -1, -1, -1}));
  EXPECT_EQ(o.val, (F{9, -kInf, -kInf, -kInf}));
  // len k - 1: 0..len-1 (unsorted), by value (sorted)
  EXPECT_EQ(run_row(row, k, false, 0, 3).idx, (I{0, 1, 2, -1}));
  o = run_row(row, k, true, 0, 3);
  EXPECT_EQ(o.idx, (I{1, 2, 0, -1}));
  EXPECT_EQ(o.val, (F{7, 6, 5, -kInf}));
  // len k
  EXPECT_EQ(run_row(row, k, false, 1, 5).idx, (I{0, 1, 2, 3}));
  EXPECT_EQ(run_row(row, k, true, 1, 5).idx, (I{2, 0, 1, 3}));
  // len k + 1: the smallest (1 at relative 4) drops out
  EXPECT_EQ(run_row(row, k, false, 0, 5).idx, (I{0, 1, 2, 3}));
  EXPECT_EQ(run_row(row, k, false, 1, 6).idx, (I{0, 1, 2, 4}));
  EXPECT_EQ(run_row(row, k, true, 1, 6).idx, (I{2, 4, 0, 1}));
}

TEST(TopkRef, IndicesAreRelativeToStart) {
  const F row = {9, 8, 1, 2, 3};
  TopkOut o = run_row(row, 2, true, 2, 5);
  EXPECT_EQ(o.idx, (I{2, 1}));
  EXPECT_EQ(o.val, (F{3, 2}));
  EXPECT_EQ(run_row(row, 2, true, -1, 3).idx, (I{0, 1}));  // end only
}

TEST(TopkRef, Bf16InputAndStridedRows) {
  // 2 rows of width 5 with row stride 8; 1.0078125 and 1.0 are distinct bf16 values, 1.001 rounds to 1.
  std::vector<uint16_t> buf(16, codec::f32_to_bf16(100.0f));  // padding columns must be ignored
  const F r0 = {1.0f, 1.0078125f, 1.001f, -3.0f, 0.5f}, r1 = {kNaN, 2, -kInf, 2, 3};
  for (int i = 0; i < 5; ++i) {
    buf[i] = codec::f32_to_bf16(r0[static_cast<size_t>(i)]);
    buf[8 + i] = codec::f32_to_bf16(r1[static_cast<size_t>(i)]);
  }
  std::vector<int32_t> idx(2 * 6, -7);  // row stride 6 for the output too
  std::vector<float> val(2 * 3, kPoison);
  TopkParams p;
  p.logits = make_tensor_strided(buf.data(), DType::kBF16, {2, 5}, {8, 1});
  p.k = 3;
  p.sorted = true;
  p.indices = make_tensor_strided(idx.data(), DType::kI32, {2, 3}, {6, 1});
  p.values = make_tensor(val.data(), DType::kF32, {2, 3});
  ASSERT_TRUE(topk(p, cpu_exec()).ok());
  EXPECT_EQ(idx, (I{1, 0, 2, -7, -7, -7, 4, 1, 3, -7, -7, -7}));
  EXPECT_EQ(val, (F{1.0078125f, 1.0f, 1.0f, 3, 2, 2}));
}

// Slot transform: S = 4, next_n = 2, block_table [2, 3] = {{7, 2, 5}, {1, 0, 9}}: rows 0, 1 use
// request 0, rows 2, 3 request 1. slot = bt[b][i / 4] * 4 + i % 4.
TEST(TopkRef, SlotTransform) {
  const int W = 10, k = 3;
  std::vector<float> logits(4 * W, 0.0f);
  // Row r: the best three at these indices (values 3, 2, 1).
  const int best[4][3] = {{9, 0, 5}, {1, 4, 8}, {3, 6, 2}, {7, 8, 9}};
  for (int r = 0; r < 4; ++r) {
    for (int j = 0; j < 3; ++j) logits[r * W + best[r][j]] = static_cast<float>(3 - j);
  }
  std::vector<int32_t> bt = {7, 2, 5, 1, 0, 9}, ends = {10, 10, 10, 2};
  std::vector<int32_t> idx(4 * k), slots(4 * k, -7);
  TopkParams p;
  p.logits = make_tensor(logits.data(), DType::kF32, {4, W});
  p.ends = make_tensor(ends.data(), DType::kI32, {4});
  p.k = k;
  p.sorted = true;
  p.indices = make_tensor(idx.data(), DType::kI32, {4, k});
  p.block_table = make_tensor(bt.data(), DType::kI32, {2, 3});
  p.next_n = 2;
  p.states_per_page = 4;
  p.slot_ids = make_tensor(slots.data(), DType::kI32, {4, k});
  ASSERT_TRUE(topk(p, cpu_exec()).ok());
  // Row 3 has only 2 states (ends = 2): both zeros, ties by index, then -1.
  EXPECT_EQ(idx, (I{9, 0, 5, 1, 4, 8, 3, 6, 2, 0, 1, -1}));
  // row 0: 9 -> 5*4+1 = 21, 0 -> 7*4+0 = 28, 5 -> 2*4+1 = 9
  // row 1: 1 -> 29, 4 -> 8, 8 -> 20
  // row 2 (request 1): 3 -> 1*4+3 = 7, 6 -> 0*4+2 = 2, 2 -> 6
  // row 3 (request 1): 0 -> 4, 1 -> 5, -1 -> -1
  EXPECT_EQ(slots, (I{21, 28, 9, 29, 8, 20, 7, 2, 6, 4, 5, -1}));

  // Same with row_request {1, 0, 1, 0} (next_n must then be 1).
  std::vector<int32_t> rr = {1, 0, 1, 0};
  p.row_request = make_tensor(rr.data(), DType::kI32, {4});
  p.next_n = 1;
  ASSERT_TRUE(topk(p, cpu_exec()).ok());
  // row 0 (request 1): 9 -> 9*4+1 = 37, 0 -> 4, 5 -> 0*4+1 = 1
  // row 1 (request 0): 1 -> 29, 4 -> 8, 8 -> 20
  // row 2 (request 1): 7, 2, 6;  row 3 (request 0): 0 -> 28, 1 -> 29, -1
  EXPECT_EQ(slots, (I{37, 4, 1, 29, 8, 20, 7, 2, 6, 28, 29, -1}));
}

// ---------------------------------------------------------------- random vs brute force
// Independent ranking: non-NaN before NaN, then larger value, then smaller index.
std::vector<int32_t> brute_force(const float* row, int64_t len, int k) {
  std::vector<int32_t> order(static_cast<size_t>(len));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const int na = std::isnan(row[a]) ? 1 : 0, nb = std::isnan(row[b]) ? 1 : 0;
    if (na != nb) return na < nb;
    if (na) return false;  // stable: index order
    return row[a] > row[b];
  });
  order.resize(static_cast<size_t>(std::min<int64_t>(len, k)));
  order.resize(static_cast<size_t>(k), -1);
  return order;
}

TEST(TopkRef, RandomRowsMatchBruteForce) {
  Rng rng(2024);
  for (int trial = 0; trial < 24; ++trial) {
    const int64_t R = rng.randint(1, 6), W = rng.randint(1, 700);
    const int k = static_cast<int>(rng.randint(1, 300));
    const bool few_values = trial % 3 == 0;  // many ties
    std::vector<float> logits(static_cast<size_t>(R * W));
    for (float& x : logits) {
      const int64_t u = rng.randint(0, 99);
      x = u < 3 ? kNaN : u < 6 ? -kInf : u < 8 ? kInf : few_values ? static_cast<float>(rng.randint(-3, 3)) : rng.normal();
    }
    std::vector<int32_t> starts(static_cast<size_t>(R)), ends(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) {
      starts[static_cast<size_t>(r)] = static_cast<int32_t>(rng.randint(0, W));
      ends[static_cast<size_t>(r)] = static_cast<int32_t>(rng.randint(starts[static_cast<size_t>(r)], W));
    }
    std::vector<int32_t> idx(static_cast<size_t>(R * k)), idx_u(static_cast<size_t>(R * k));
    std::vector<float> val(static_cast<size_t>(R * k));
    TopkParams p;
    p.logits = make_tensor(logits.data(), DType::kF32, {R, W});
    p.starts = make_tensor(starts.data(), DType::kI32, {R});
    p.ends = make_tensor(ends.data(), DType::kI32, {R});
    p.k = k;
    p.sorted = true;
    p.indices = make_tensor(idx.data(), DType::kI32, {R, k});
    p.values = make_tensor(val.data(), DType::kF32, {R, k});
    ASSERT_TRUE(topk(p, cpu_exec(3)).ok());
    p.sorted = false;
    p.values = TensorView{};
    p.indices = make_tensor(idx_u.data(), DType::kI32, {R, k});
    ASSERT_TRUE(topk(p, cpu_exec(1)).ok());
    for (int64_t r = 0; r < R; ++r) {
      const int64_t s = starts[static_cast<size_t>(r)], len = ends[static_cast<size_t>(r)] - s;
      const float* row = logits.data() + r * W + s;
      const std::vector<int32_t> want = brute_force(row, len, k);
      const std::vector<int32_t> got(idx.begin() + r * k, idx.begin() + (r + 1) * k);
      ASSERT_EQ(got, want) << "trial " << trial << " row " << r << " len " << len << " k " << k;
      for (int j = 0; j < k; ++j) {
        const int32_t i = got[static_cast<size_t>(j)];
        const float v = val[static_cast<size_t>(r * k + j)];
        if (i < 0) {
          ASSERT_EQ(v, -kInf);
        } else if (std::isnan(row[i])) {
          ASSERT_TRUE(std::isnan(v));
        } else {
          ASSERT_EQ(v, row[i]);
        }
      }
      // Unsorted: the same set, ascending, -1 padding last.
      std::vector<int32_t> got_u(idx_u.begin() + r * k, idx_u.begin() + (r + 1) * k), set = want;
      std::sort(set.begin(), set.end(), [](int32_t a, int32_t b) { return (a < 0) != (b < 0) ? b < 0 : a < b; });
      ASSERT_EQ(got_u, set) << "trial " << trial << " row " << r;
    }
  }
}

// Permuting a row (distinct values) permutes its top-k set.
TEST(TopkRef, PermutedRowGivesPermutedTopk) {
  Rng rng(77);
  const int W = 500, k = 37;
  std::vector<float> row(W);
  for (int i = 0; i < W; ++i) row[static_cast<size_t>(i)] = static_cast<float>(i) * 0.25f - 40.0f;
  rng.shuffle(row);
  std::vector<int32_t> perm(W);
  std::iota(perm.begin(), perm.end(), 0);
  rng.shuffle(perm);
  std::vector<float> permuted(W);
  for (int i = 0; i < W; ++i) permuted[static_cast<size_t>(perm[static_cast<size_t>(i)])] = row[static_cast<size_t>(i)];
  const TopkOut a = run_row(row, k, true), b = run_row(permuted, k, true);
  for (int j = 0; j < k; ++j) {
    EXPECT_EQ(perm[static_cast<size_t>(a.idx[static_cast<size_t>(j)])], b.idx[static_cast<size_t>(j)]);
    EXPECT_EQ(a.val[static_cast<size_t>(j)], b.val[static_cast<size_t>(j)]);
  }
  // The k values are the k largest: W - 1 .. W - k in steps of 0.25.
  for (int j = 0; j < k; ++j) EXPECT_EQ(a.val[static_cast<size_t>(j)], static_cast<float>(W - 1 - j) * 0.25f - 40.0f);
}

TEST(TopkRef, LargestKOnLongRow) {
  const int W = 5000, k = 4096;
  std::vector<float> row(W);
  for (int i = 0; i < W; ++i) row[static_cast<size_t>(i)] = static_cast<float>((i * 7919) % W);  // a permutation
  const TopkOut o = run_row(row, k, false);
  // Values >= W - k are selected; unsorted output is ascending by index.
  for (int j = 0; j < k; ++j) {
    const int32_t i = o.idx[static_cast<size_t>(j)];
    ASSERT_GE(i, 0);
    ASSERT_GE(row[static_cast<size_t>(i)], static_cast<float>(W - k));
    if (j > 0) {
      ASSERT_LT(o.idx[static_cast<size_t>(j - 1)], i);
    }
  }
}

// bf16 logits select exactly what their f32 widening selects (ties included).
TEST(TopkRef, Bf16EqualsWidenedF32) {
  Rng rng(321);
  const int64_t R = 5, W = 300;
  const int k = 40;
  std::vector<uint16_t> b16(static_cast<size_t>(R * W));
  std::vector<float> f32(b16.size());
  for (size_t i = 0; i < b16.size(); ++i) {
    const int64_t u = rng.randint(0, 49);
    const float x = u == 0 ? kNaN : u == 1 ? -kInf : rng.normal() * 0.01f;  // coarse: many bf16 ties
    b16[i] = codec::f32_to_bf16(x);
    f32[i] = codec::bf16_to_f32(b16[i]);
  }
  std::vector<int32_t> ia(static_cast<size_t>(R * k)), ib(ia.size());
  std::vector<float> va(ia.size()), vb(ia.size());
  for (bool sorted : {false, true}) {
    TopkParams p;
    p.k = k;
    p.sorted = sorted;
    p.logits = make_tensor(b16.data(), DType::kBF16, {R, W});
    p.indices = make_tensor(ia.data(), DType::kI32, {R, k});
    p.values = make_tensor(va.data(), DType::kF32, {R, k});
    ASSERT_TRUE(topk(p, cpu_exec()).ok());
    p.logits = make_tensor(f32.data(), DType::kF32, {R, W});
    p.indices = make_tensor(ib.data(), DType::kI32, {R, k});
    p.values = make_tensor(vb.data(), DType::kF32, {R, k});
    ASSERT_TRUE(topk(p, cpu_exec()).ok());
    EXPECT_EQ(ia, ib) << "sorted " << sorted;
    for (size_t i = 0; i < va.size(); ++i) {
      if (std::isnan(vb[i])) {
        EXPECT_TRUE(std::isnan(va[i])) << i;
      } else {
        EXPECT_EQ(va[i], vb[i]) << i;
      }
    }
  }
}

TEST(TopkRef, SmallestShapes) {
  EXPECT_EQ(run_row(F{-5}, 1, false).idx, (I{0}));
  EXPECT_EQ(run_row(F{-5}, 1, true).val, (F{-5}));
  EXPECT_EQ(run_row(F{kNaN}, 1, true).idx, (I{0}));
  EXPECT_EQ(run_row(F{1, 2}, 1, true).idx, (I{1}));
  EXPECT_EQ(run_row(F{2, 2}, 1, true).idx, (I{0}));
  // Zero rows: nothing to do.
  std::vector<float> none;
  std::vector<int32_t> idx;
  TopkParams p;
  p.logits = make_tensor(none.data(), DType::kF32, {0, 8});
  p.k = 4;
  p.indices = make_tensor(idx.data(), DType::kI32, {0, 4});
  EXPECT_TRUE(topk(p, cpu_exec()).ok());
}

}  // namespace
