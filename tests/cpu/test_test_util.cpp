// The test utilities' thread helpers (tests/common/indexer_test_util.h), which the GPU tests use for
// their references and cases and which only run on a GPU machine there: parallel_items hands out
// every item exactly once, ref_rows equals PagedCase::ref state by state, on one thread and on
// several, and a case built on several threads is the same every time.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "common/indexer_test_util.h"

using namespace dsattn;
using namespace dsattn::testutil;

namespace {

TEST(TestUtil, ParallelItemsRunsEachItemOnce) {
  for (const int threads : {0, 1, 3, 64}) {
    for (const int64_t n : {int64_t(0), int64_t(1), int64_t(2), int64_t(1000)}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (auto& h : hits) h = 0;
      parallel_items(n, [&](int64_t i) { ++hits[static_cast<size_t>(i)]; }, threads);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "item " << i << " of " << n << ", threads " << threads;
      }
    }
  }
}

TEST(TestUtil, RefRowsEqualRefStateByState) {
  PagedCaseSpec spec;
  spec.batch = 3;
  spec.next_n = 2;
  spec.heads = 8;
  spec.head_dim = 32;
  spec.states_per_page = 16;
  spec.lengths = {0, 5000, 2049};  // empty rows, rows of several kRefChunk chunks, a partial chunk
  spec.lens_per_row = false;       // the N rule: row lengths L - 1 and L
  spec.seed = 7;
  const PagedCase c = make_paged_case(spec);
  for (const int threads : {1, 4}) {
    const std::vector<std::vector<float>> refs = ref_rows(c, threads);
    ASSERT_EQ(static_cast<int64_t>(refs.size()), c.rows);
    for (int64_t r = 0; r < c.rows; ++r) {
      const std::vector<float>& row = refs[static_cast<size_t>(r)];
      ASSERT_EQ(static_cast<int64_t>(row.size()), c.row_ctx[static_cast<size_t>(r)]) << "row " << r;
      for (int64_t t = 0; t < static_cast<int64_t>(row.size()); ++t) {
        // Bitwise: the same double, rounded once.
        ASSERT_EQ(row[static_cast<size_t>(t)], static_cast<float>(c.ref(r, t)))
            << "row " << r << " state " << t << ", threads " << threads;
      }
    }
  }
}

// The cache's states are quantized on several threads (build_paged_cache): the same spec gives the
// same bytes and decoded values every time, FP8 and MXFP4 alike.
TEST(TestUtil, PagedCaseIsDeterministic) {
  for (const IndexerFormat f : {IndexerFormat::kFp8, IndexerFormat::kMxfp4}) {
    PagedCaseSpec spec;
    spec.format = f;
    spec.batch = 4;
    spec.heads = 4;
    spec.head_dim = 128;
    spec.states_per_page = 32;
    spec.lengths = {3000, 0, 1025, 77};
    spec.seed = 11;
    const PagedCase a = make_paged_case(spec), b = make_paged_case(spec);
    ASSERT_EQ(a.cache.pages, b.cache.pages);
    ASSERT_EQ(a.cache.block_table, b.cache.block_table);
    ASSERT_EQ(a.cache.key_values, b.cache.key_values);
    ASSERT_EQ(a.cache.key_scales, b.cache.key_scales);
    ASSERT_EQ(a.cache.key_values.size(), 4u);
    ASSERT_EQ(a.cache.key_values[0].size(), size_t(3000 * 128));
  }
}

}  // namespace
