// Helpers shared by the CPU test files (tests/cpu/*.cpp), on top of tests/common/indexer_test_util.h:
//
//  * cpu_exec: an Exec that forces the CPU backend with a fixed thread count.
//  * indexer_cache_view / latent_cache_view: cache descriptors over a host page buffer.
//  * PagedShape: one row of a parameterized paged-indexer sweep and its PagedCaseSpec.
//  * Fp8HandCase: the hand-computed FP8 paged-indexer case (scores worked out below).
//  * host_schedule: the CPU backend's schedule metadata of [B, N] context lengths.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/indexer_test_util.h"
#include "dsattn/codecs.h"
#include "dsattn/formats.h"
#include "dsattn/ops.h"

namespace dsattn {
namespace testutil {

inline Exec cpu_exec(int threads = 2) {
  Exec ex;
  ex.backend = Backend::kCpu;
  ex.num_threads = threads;
  return ex;
}

// An indexer cache over `pages` (u8 [pages.size() / stride, stride]; the size is a whole number of pages).
inline IndexerCache indexer_cache_view(std::vector<uint8_t>& pages, IndexerFormat format, int states_per_page,
                                       int head_dim, int64_t stride) {
  IndexerCache c;
  c.pages = make_tensor(pages.data(), DType::kU8, {static_cast<int64_t>(pages.size()) / stride, stride});
  c.format = format;
  c.states_per_page = states_per_page;
  c.head_dim = head_dim;
  c.page_stride_bytes = stride;
  return c;
}

// A latent cache over `pages` (u8 [pages.size() / stride, stride]; the size is a whole number of pages).
inline LatentCache latent_cache_view(std::vector<uint8_t>& pages, LatentFormat format, int tokens_per_page,
                                     int64_t stride) {
  LatentCache c;
  c.pages = make_tensor(pages.data(), DType::kU8, {static_cast<int64_t>(pages.size()) / stride, stride});
  c.format = format;
  c.tokens_per_page = tokens_per_page;
  c.page_stride_bytes = stride;
  return c;
}

// One row of a parameterized paged sweep: cache format, S, H, D, N and how the lengths are given.
struct PagedShape {
  IndexerFormat format;
  int S, H, D, N;
  bool varlen, per_row;
};

// A batch of 3 requests of this shape; the caller sets the lengths, the page padding and the seed.
inline PagedCaseSpec sweep_spec(const PagedShape& sh) {
  PagedCaseSpec s;
  s.format = sh.format;
  s.states_per_page = sh.S;
  s.heads = sh.H;
  s.head_dim = sh.D;
  s.next_n = sh.N;
  s.varlen = sh.varlen;
  s.lens_per_row = sh.per_row;
  s.batch = 3;
  return s;
}

// ---------------------------------------------------------------- FP8 hand case
// S = 2, D = 32, H = 8, B = 1, N = 2, context_lens [B] = {3}: row 0 sees 2 states, row 1 sees 3.
// q (both rows): q[h][0] = +1 (h even) / -1 (h odd), q[h][1] = 2, rest 0.
// weights: row 0 w[h] = 0.5 (h + 1) (even heads sum to 8, odd heads to 10); row 1 = 2x row 0.
// keys (k8[0], k8[1]; scale):  t0 = (1, 1; 1)   t1 = (4, 1; 0.5)   t2 = (-2, 0.5; 2)
//   even-head dot = a + 2b, odd-head dot = -a + 2b
//   t0: 8*3 + 10*1 = 34        t1: 0.5 * (8*6 + 0) = 24        t2: 2 * (0 + 10*3) = 60
// So row 0 scores {34, 24} and row 1 (weights x2) scores {68, 48, 120}.
// Physical layout: page stride 80 B (72 needed + 8 pad), 4 pages, block_table {3, 1, 99}: t0, t1
// in page 3, t2 in page 1 (state 0); the third entry is never read. Unused bytes are 0xFF (NaN).
struct Fp8HandCase {
  static constexpr int S = 2, D = 32, H = 8;
  static constexpr int64_t kStride = 80;
  std::vector<uint8_t> pages = std::vector<uint8_t>(4 * kStride, 0xFF);
  std::vector<uint8_t> q = std::vector<uint8_t>(2 * H * D, 0);
  std::vector<float> w = std::vector<float>(2 * H);
  std::vector<int32_t> block_table = {3, 1, 99};
  std::vector<int32_t> lens = {3};

  Fp8HandCase() {
    put_state(3, 0, 1.0f, 1.0f, 1.0f);
    put_state(3, 1, 4.0f, 1.0f, 0.5f);
    put_state(1, 0, -2.0f, 0.5f, 2.0f);
    for (int r = 0; r < 2; ++r) {
      for (int h = 0; h < H; ++h) {
        q[(r * H + h) * D + 0] = codec::f32_to_e4m3(h % 2 == 0 ? 1.0f : -1.0f);
        q[(r * H + h) * D + 1] = codec::f32_to_e4m3(2.0f);
        w[r * H + h] = 0.5f * static_cast<float>(h + 1) * static_cast<float>(r + 1);
      }
    }
  }
  void put_state(int page, int s, float a, float b, float scale) {
    uint8_t* p = pages.data() + page * kStride;
    for (int d = 0; d < D; ++d) p[s * D + d] = codec::f32_to_e4m3(0.0f);
    p[s * D + 0] = codec::f32_to_e4m3(a);
    p[s * D + 1] = codec::f32_to_e4m3(b);
    std::memcpy(p + S * D + 4 * s, &scale, 4);
  }
  // The op inputs over this object's vectors: q [1, 2, H, D], weights [2, H], lengths [1].
  PagedIndexerArgs args() {
    PagedIndexerArgs a;
    a.q = make_tensor(q.data(), DType::kF8E4M3, {1, 2, H, D});
    a.weights = make_tensor(w.data(), DType::kF32, {2, H});
    a.cache = indexer_cache_view(pages, IndexerFormat::kFp8, S, D, kStride);
    a.block_table = make_tensor(block_table.data(), DType::kI32, {1, 3});
    a.context_lens = make_tensor(lens.data(), DType::kI32, {1});
    return a;
  }
};

// The host schedule (CPU backend) of [B, N] context lengths `lens` over `parts` partitions,
// 64-state pages (a failed call is a test failure).
inline std::vector<int32_t> host_schedule(std::vector<int32_t>& lens, int B, int N, int parts) {
  std::vector<int32_t> meta(size_t(schedule_metadata_size(parts)), -7);
  ScheduleMetadataParams sp;
  sp.context_lens = make_tensor(lens.data(), DType::kI32, {B, N});
  sp.next_n = N;
  sp.states_per_page = 64;
  sp.num_sms = parts;
  sp.metadata = make_tensor(meta.data(), DType::kI32, {int64_t(meta.size())});
  const Status s = schedule_metadata(sp, Exec{});
  EXPECT_TRUE(s.ok()) << s.to_string();
  return meta;
}

}  // namespace testutil
}  // namespace dsattn
