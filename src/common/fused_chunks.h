// The arithmetic of paged_mqa_topk's chunked logits route (src/cuda/sm80/fused_chunked.cuh),
// shared by its kernels and by the CPU test that replays the route with a reference top-k
// (tests/cpu/test_fused_chunks.cpp). Host and device, no CUDA.
//
// Chunk c covers states [c0, c0 + W) of every row, c0 = c W, W >= k. Its score rows hold, at
// columns [0, k), the values of the winners so far (index order), then the chunk's scores at
// columns k + (t - c0).
#pragma once
#include <cstdint>

#include "dsattn/codecs.h"  // DSATTN_HD

namespace dsattn {
namespace detail {

// A context length `len` of the call as chunk c0 / W sees it: its states from c0 on, at most
// W + slack (slack = N - 1 for [B] lengths under the next_n rule, whose row j sees len - N + j + 1
// states: the shift keeps every row's offset, and the scoring stops at the chunk's width).
DSATTN_HD int32_t chunk_context_len(int64_t len, int64_t c0, int64_t w, int32_t slack) {
  const int64_t l = len - c0, cap = w + slack;
  return static_cast<int32_t>(l < 0 ? 0 : (l > cap ? cap : l));
}

// The end (exclusive column) of a row of hi states in chunk c0 / W: chunk 0's top-k reads its
// rows from column k on (no head), later ones from column 0, after min(k, hi) carried winners
// (every row with fewer than k states before c0 >= W >= k has none after it).
DSATTN_HD int32_t chunk_row_end(int64_t hi, int64_t c0, int64_t w, int k) {
  int64_t fresh = hi - c0;
  fresh = fresh < 0 ? 0 : (fresh > w ? w : fresh);
  const int64_t head = c0 == 0 ? 0 : (hi < k ? hi : k);
  return static_cast<int32_t>(head + fresh);
}

// The state of column `col` of a chunk's top-k (chunk 0's top-k reads from column k on, so its
// columns are states), -1 for padding. head_row: the carried winners' states.
DSATTN_HD int32_t chunk_column_state(int32_t col, int64_t c0, int k, const int32_t* head_row) {
  if (col < 0) return -1;
  if (c0 == 0) return col;
  return col < k ? head_row[col] : static_cast<int32_t>(c0 + (col - k));
}

}  // namespace detail
}  // namespace dsattn
