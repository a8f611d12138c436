// The chunked logits route of paged_mqa_topk (src/cuda/sm80/fused_chunked.cuh), replayed on the
// CPU with its own arithmetic (src/common/fused_chunks.h) and a reference top-k: for random
// lengths (the next_n rule's [B] lengths and per-row lengths), page sizes, k and chunk widths, and
// scores drawn from a few values (many ties, also at the k-th score),
//  - the states each chunk's scoring sees (the shifted lengths, the scoring stopped at the chunk's
//    width and at the block table) are exactly the row's states of that chunk;
//  - a row's carried winners leave no gap before the chunk's scores;
//  - the winners selected chunk by chunk, mapped back to states, are the winners of the whole
//    row, in the same order (index order; ties to the smaller state).
// The GPU tests (GpuFusedTopk.ChunkedRoute, every run_fused_case) run the kernels themselves.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "common/fused_chunks.h"

namespace dsattn {
namespace {

// The top k of vals[0, n) (larger value first, ties to the smaller index), in index order, padded
// with -1: what topk returns unsorted on every CUDA plan.
std::vector<int32_t> ref_topk(const std::vector<float>& vals, int64_t n, int k) {
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return vals[a] > vals[b]; });
  if (static_cast<int64_t>(idx.size()) > k) idx.resize(static_cast<size_t>(k));
  std::sort(idx.begin(), idx.end());
  idx.resize(static_cast<size_t>(k), -1);
  return idx;
}

struct Case {
  int next_n = 1;
  bool per_row = false;  // context_lens [B, N]; else [B] under the next_n rule
  int64_t S = 64, max_pages = 0, W = 0;
  int k = 1;
  std::vector<int64_t> lens;  // [B] or [B * N]
};

// One row (request b, row j): its window, then the chunked selection against the direct one.
void check_row(const Case& c, int64_t b, int j, const std::vector<float>& scores) {
  const int N = c.next_n;
  const int64_t width = c.max_pages * c.S;
  const int32_t slack = c.per_row ? 0 : N - 1;
  const int64_t len = c.per_row ? c.lens[static_cast<size_t>(b * N + j)] : c.lens[static_cast<size_t>(b)];
  int64_t hi = c.per_row ? len : len - N + j + 1;  // the row's window [0, hi) (indexer_row_window)
  hi = std::max<int64_t>(0, std::min(hi, width));
  const std::vector<int32_t> want = ref_topk(scores, hi, c.k);

  const int64_t nchunks = (width + c.W - 1) / c.W;
  std::vector<int32_t> head_state;  // carried winners (states, index order)
  std::vector<float> head_val;
  for (int64_t ch = 0; ch < nchunks; ++ch) {
    const int64_t c0 = ch * c.W;
    // The chunk's scoring: shifted length, its row window, stopped at the logits width W and at
    // the shifted block table's pages (state_limit).
    const int32_t clen = detail::chunk_context_len(len, c0, c.W, slack);
    const int64_t pages = std::min(c.W / c.S, c.max_pages - c0 / c.S);
    const int64_t limit = std::min(c.W, pages * c.S);
    int64_t chi = c.per_row ? clen : int64_t(clen) - N + j + 1;
    chi = std::max<int64_t>(0, std::min(chi, limit));
    const int64_t fresh = std::max<int64_t>(0, std::min(hi - c0, c.W));
    ASSERT_EQ(chi, fresh) << "chunk " << ch << " (c0 " << c0 << "): the scoring sees " << chi << " states, the row has "
                          << fresh;
    // The chunk's score row: carried values at [0, k), the chunk's scores at k + (t - c0).
    std::vector<float> row(static_cast<size_t>(c.k + c.W), -1e30f);
    const int m = static_cast<int>(head_state.size());
    for (int i = 0; i < m; ++i) row[static_cast<size_t>(i)] = head_val[static_cast<size_t>(i)];
    for (int64_t t = 0; t < chi; ++t) row[static_cast<size_t>(c.k + t)] = scores[static_cast<size_t>(c0 + t)];
    const int32_t start = ch == 0 ? c.k : 0;  // chunk 0's top-k reads from column k on
    const int32_t end = start + detail::chunk_row_end(hi, c0, c.W, c.k);
    if (ch > 0) {
      ASSERT_EQ(m, std::min<int64_t>(c.k, std::min(hi, c0))) << "chunk " << ch;
      // No gap: fewer than k carried winners only where the chunk adds nothing.
      if (m < c.k) ASSERT_EQ(end, m) << "chunk " << ch;
      else ASSERT_EQ(end, c.k + fresh) << "chunk " << ch;
    } else {
      ASSERT_EQ(end, c.k + fresh);
    }
    const std::vector<float> sub(row.begin() + start, row.begin() + end);
    const std::vector<int32_t> sel = ref_topk(sub, end - start, c.k);
    std::vector<int32_t> next_state;
    std::vector<float> next_val;
    for (int32_t col : sel) {
      const int32_t t = detail::chunk_column_state(col, c0, c.k, head_state.data());
      if (col < 0) {
        ASSERT_EQ(t, -1);
        continue;
      }
      next_state.push_back(t);
      next_val.push_back(sub[static_cast<size_t>(col)]);
    }
    head_state.swap(next_state);
    head_val.swap(next_val);
  }
  head_state.resize(static_cast<size_t>(c.k), -1);
  ASSERT_EQ(head_state, want) << "request " << b << " row " << j << " (hi " << hi << ")";
}

TEST(FusedChunks, ChunkedSelectionEqualsTheRowsSelection) {
  std::mt19937_64 rng(2026);
  auto below = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  int rows = 0;
  for (int it = 0; it < 400; ++it) {
    Case c;
    c.next_n = 1 + static_cast<int>(below(3));
    c.per_row = below(2) == 0;
    const int64_t s_pick[] = {1, 7, 32, 48, 64};
    c.S = s_pick[below(5)];
    const int k_pick[] = {1, 3, 16, 64, 200};
    c.k = k_pick[below(5)];
    const int64_t wreq = 1 + below(700);
    c.W = (std::max<int64_t>(wreq, c.k) + c.S - 1) / c.S * c.S;
    c.max_pages = 1 + below(3000 / c.S + 3);
    const int64_t width = c.max_pages * c.S;
    const int B = 1 + static_cast<int>(below(3));
    const int64_t n_lens = c.per_row ? int64_t(B) * c.next_n : B;
    for (int64_t i = 0; i < n_lens; ++i) {
      const int64_t pick = below(6);
      int64_t L = pick == 0 ? 0 : pick == 1 ? c.k + below(3) - 1 : pick == 2 ? c.W * (1 + below(3)) + below(3) - 1
                                                                 : below(width + 1);
      c.lens.push_back(std::max<int64_t>(0, std::min(L, width)));
    }
    // Scores from a few values: ties everywhere, also at the k-th score.
    const int levels = 1 + static_cast<int>(below(12));
    for (int b = 0; b < B && !::testing::Test::HasFatalFailure(); ++b) {
      for (int j = 0; j < c.next_n && !::testing::Test::HasFatalFailure(); ++j) {
        std::vector<float> scores(static_cast<size_t>(width));
        for (auto& v : scores) v = static_cast<float>(below(levels));
        SCOPED_TRACE(::testing::Message() << "case " << it << ": N " << c.next_n << (c.per_row ? " [B,N]" : " [B]")
                                          << " S " << c.S << " k " << c.k << " W " << c.W << " pages "
                                          << c.max_pages);
        check_row(c, b, j, scores);
        ++rows;
      }
    }
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(rows, 400);
}

}  // namespace
}  // namespace dsattn
