// paged_mqa_topk's chunked logits route (plan_chunked_route in fused_topk_launch.cu): the block
// table in column chunks of W states, each scored by paged_mqa_logits into a [rows, k + W] fp32
// buffer after the k winners carried from the chunks before it, then selected by topk's kernels.
//
// Why: the logits route (scores of whole rows in the workspace, then topk) beats streaming
// candidates through the collector on many long requests, but only runs where the rows fit the
// streaming plan's workspace (H100, 128 x 128K: 827 us for logits + topk against 915 streaming).
// In chunks the buffer is rows x (k + W) whatever the context length, so the op's memory stays that
// of the streaming plan.
//
// Exactness. A chunk's row holds, at columns [0, k), the values of the winners so far in index
// order (topk writes unsorted winners in index order on every plan), then the chunk's scores: a
// winner of the whole row is a winner of its chunk's row, and the column order is the state order,
// so topk's tie rule (the smaller column) is the op's (the smaller state). Columns map back to
// states through the carried winners' states (head) or c0 + column - k. Chunk 0 has no head: its
// top-k reads the rows from column k on, so its columns are states.
//
// Lengths. Chunk c scores states [c0, c0 + W) of each row: paged_mqa_logits over the block table
// shifted by c0 / S pages with lengths len - c0, clamped to [0, W] ([B] lengths under the next_n
// rule: to [0, W + N - 1], so that row j's window len - N + j + 1 keeps its offset; the scoring
// kernels stop at the logits width W). The top-k row of chunk c ends at min(k, states before c0)
// + the chunk's states of the row (every row with fewer than k states before c0 has none after:
// W >= k). The arithmetic: common/fused_chunks.h, which a CPU test replays with a reference top-k.
#pragma once
#include <cstdint>

#include "common/fused_chunks.h"
#include "cuda/common/topk_grid.cuh"

namespace dsattn {
namespace cuda {
namespace fused_chunked {

constexpr int kThreads = 256;

// chunk_prep_kernel's arguments: every chunk's lengths and top-k row ends, computed once per call
// from the device-side lengths.
struct Prep {
  topk_detail::TopkRowBounds rb;  // the call's rows as the logits route bounds them (paged, capped at the table)
  int64_t rows = 0;               // R
  int64_t chunk = 0;              // W
  int nchunks = 0;
  int k = 0;
  // The call's context_lens, n0 x n1 values at lens[i0 * s0 + i1 * s1]; chunk c's go contiguously
  // to clens + c * n0 * n1. slack: N - 1 for [B] lengths under the next_n rule, else 0.
  const int32_t* lens = nullptr;
  int64_t n0 = 0, n1 = 1, s0 = 0, s1 = 0;
  int32_t slack = 0;
  int32_t* clens = nullptr;   // [nchunks][n0 * n1]
  int32_t* cends = nullptr;  // [nchunks][R]: top-k row ends (columns; chunk 0's from column k)
};

__global__ void __launch_bounds__(kThreads) chunk_prep_kernel(Prep p) {
  const int64_t n = p.n0 * p.n1;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = tid; i < n * p.nchunks; i += step) {
    const int64_t c = i / n, e = i - c * n;
    const int64_t i0 = e / p.n1, i1 = e - i0 * p.n1;
    p.clens[i] = detail::chunk_context_len(p.lens[i0 * p.s0 + i1 * p.s1], c * p.chunk, p.chunk, p.slack);
  }
  for (int64_t i = tid; i < p.rows * p.nchunks; i += step) {
    const int64_t c = i / p.rows, r = i - c * p.rows;
    int start, hi;
    p.rb.get(r, &start, &hi);
    p.cends[i] = detail::chunk_row_end(hi, c * p.chunk, p.chunk, p.k);
  }
}

// A chunk's top-k (column indices sidx and values svals, [R, k] each) mapped back to states.
struct Map {
  const int32_t* sidx = nullptr;
  const float* svals = nullptr;
  const int32_t* head = nullptr;  // [R, k] the carried winners' states (chunk >= 1)
  int k = 0;
  int64_t c0 = 0;  // the chunk's first state

  __device__ __forceinline__ int32_t state(int64_t r, int32_t col) const {
    return detail::chunk_column_state(col, c0, k, head + r * k);
  }
};

// Between chunks: the winners' states to head_out, their values to the next chunk's columns [0, k).
__global__ void __launch_bounds__(kThreads) chunk_carry_kernel(Map m, int32_t* head_out, float* buf, int64_t ld) {
  const int64_t r = blockIdx.x;
  for (int j = threadIdx.x; j < m.k; j += kThreads) {
    const int32_t col = m.sidx[r * m.k + j];
    const int32_t t = m.state(r, col);
    if (col >= 0) buf[r * ld + j] = m.svals[r * m.k + j];
    head_out[r * m.k + j] = t;
  }
}

// After the last chunk: the op's outputs (indices, values, slot ids) in the top-k's order.
__global__ void __launch_bounds__(kThreads) chunk_final_kernel(Map m, topk_detail::TopkOutputs out) {
  const int64_t r = blockIdx.x;
  for (int j = threadIdx.x; j < m.k; j += kThreads) {
    const int32_t t = m.state(r, m.sidx[r * m.k + j]);
    out.write(r, j, t, [&] { return m.svals[r * m.k + j]; });
  }
}

}  // namespace fused_chunked
}  // namespace cuda
}  // namespace dsattn
