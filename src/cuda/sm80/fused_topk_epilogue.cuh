// Indexer epilogue of the fused paged_mqa_topk (SPEC §3.4): instead of writing the score tile to
// a logits tensor, it feeds it to the top-k candidate collector (fused_topk_collect.cuh).
//
// Pieces and slots. The persistent indexer kernel (indexer_kernel.cuh) gives CTA p the (group,
// unit) positions [meta pair p, meta pair p + 1), in row-major order. The part of group g that
// CTA p scores is piece (p, g), stored in slot p + g: along the walk, p + g never decreases and
// strictly increases from one piece to the next, so slots are unique (< partitions + groups) and a
// group's pieces occupy slots [p_first(g) + g, p_last(g) + g] in increasing state order. The merge
// (MetaSlots below) finds p_first / p_last by binary search in the metadata.
//
// Per tile: make room (block-wide compaction when a row's buffer could overflow), then all warps
// filter the tile against the rows' thresholds and append the survivors in state order
// (collector_append_block; states outside a row's window skipped). The kernel's barriers B1 / B2
// separate tiles, so the counts left in shared memory are visible to the next tile's room check.
#pragma once
#include <cstdint>

#include "common/indexer_work.h"
#include "cuda/sm80/fused_route.h"
#include "cuda/sm80/fused_topk_collect.cuh"
#include "cuda/sm80/indexer_kernel.cuh"

namespace dsattn {
namespace cuda {

struct TopkEpilogue {
  static constexpr bool kPdl = false;  // pdl.cuh's EpiPdl: the streaming route measured slower with it
  fused_topk::CollectorBuffers buf;
  fused_topk::CollectorShared* sh = nullptr;
  int64_t cur_group = -1;

  __host__ __device__ static size_t smem_bytes(const IndexerParams&) { return sizeof(fused_topk::CollectorShared); }

  __device__ void begin(const IndexerParams&, uint8_t* epi_smem) {
    sh = reinterpret_cast<fused_topk::CollectorShared*>(epi_smem);
    cur_group = -1;
  }

  __device__ void consume(const IndexerParams&, const ScoreTile& t) { consume_tile(t); }
  __device__ void consume_tile(const ScoreTile& t) {
    const int64_t slot = int64_t(blockIdx.x) + t.group;
    if (t.group != cur_group) {
      cur_group = t.group;
      fused_topk::collector_begin(*sh, t.rows);
    }
    fused_topk::collector_reserve(buf, *sh, slot, t.rows, t.count);
    fused_topk::collector_append_block(buf, *sh, slot, t.row0, t.rows, static_cast<int>(t.t0), t.count, t.scores,
                                       t.ld, t.win);
  }

  __device__ void group_end(const IndexerParams&, const GroupInfo& g) { end_group(g); }
  __device__ void end_group(const GroupInfo& g) {
    fused_topk::collector_end(buf, *sh, int64_t(blockIdx.x) + g.group, g.rows);
    cur_group = -1;
  }

  __device__ void finish(const IndexerParams&) {}
};

// The same collector behind the warp-local pipeline (indexer_body_staged, indexer_kernel.cuh): the
// warps score M tiles each on their own into this CTA's staging in global memory (L2; M x
// rows_per_group x tile_states floats per CTA, independent of the context length), then the CTA
// feeds them to consume_tile() in order, runs of consecutive tiles as one (up to `run` tiles: an
// append of n states needs ccap - k >= 2 n, so that a compaction leaves room for it). It scores as
// paged_mqa_logits does on the portable tile kernel (same pipeline, same config), where the
// CTA-wide pipeline that TopkEpilogue runs on is ~1.6x slower (H100, 128 x 32K at sm_80's 163 KiB:
// 489 against 292 us, BENCHMARKS.md 2026-12-07).
struct TopkStagedEpilogue : TopkEpilogue {
  static constexpr bool kStaged = true;
  float* stage = nullptr;  // [gridDim.x][rows_per_group][tiles x tile_states]
  int tiles = 1;  // staged tiles between two flushes, and
  int run = 1;    // the most staged tiles one consume_tile() takes (staged_shape, fused_route.h)
  int2* meta = nullptr;  // shared [kMaxStageTiles, fused_route.h]: (t0, count) of each staged tile

  static constexpr size_t kMetaOff = (sizeof(fused_topk::CollectorShared) + 7) & ~size_t(7);
  __host__ __device__ static size_t smem_bytes(const IndexerParams&) { return kMetaOff + kMaxStageTiles * sizeof(int2); }
  __device__ void begin(const IndexerParams& p, uint8_t* epi_smem) {
    TopkEpilogue::begin(p, epi_smem);
    meta = reinterpret_cast<int2*>(epi_smem + kMetaOff);
  }
  __device__ int stage_tiles() const { return tiles; }
  __device__ int flush_run() const { return run; }
  // Staged floats per CTA: the planner sizes the workspace by it, the kernel finds its CTA's part.
  __host__ __device__ static int64_t cta_floats(int tiles, int rows_per_group, int tile_states) {
    return int64_t(tiles) * rows_per_group * tile_states;
  }
  __device__ float* stage_base(const IndexerParams& p) const {
    return stage + int64_t(blockIdx.x) * cta_floats(tiles, p.work.rows_per_group, p.tile_states);
  }
  __device__ int2* stage_meta() const { return meta; }
};

// Slot range of query row r from the schedule metadata (see the block comment above).
struct MetaSlots {
  detail::IndexerWork work;
  const int32_t* meta = nullptr;  // [indexer_meta_size(partitions)]
  int partitions = 0;

  // Largest partitions p in [0, partitions) whose first position is <= (g, u0) and <= (g, u1):
  // the positions are monotone, so that is the count of such partitions - 1, counted by the whole
  // block in parallel (one load per thread and chunk instead of a chain of dependent loads).
  // Block-wide: every thread calls it with the same arguments.
  __device__ __forceinline__ void partitions_of(int64_t g, int64_t u0, int64_t u1, int64_t* p0, int64_t* p1) const {
    const int32_t* pairs = meta + detail::kIndexerMetaHeader;
    int c0 = 0, c1 = 0;
    for (int base = 0; base < partitions; base += blockDim.x) {
      const int p = base + threadIdx.x;
      bool le0 = false, le1 = false;
      if (p < partitions) {
        const int64_t pg = pairs[2 * p], pu = pairs[2 * p + 1];
        le0 = pg < g || (pg == g && pu <= u0);
        le1 = pg < g || (pg == g && pu <= u1);
      }
      c0 += __syncthreads_count(le0);
      c1 += __syncthreads_count(le1);
    }
    *p0 = c0 > 0 ? c0 - 1 : 0;
    *p1 = c1 > 0 ? c1 - 1 : 0;
  }

  // Row r's length (no slot lookup), also where work.skip_len left it unscored.
  __device__ __forceinline__ int length(int64_t r) const {
    const int64_t g = detail::div_small(r, work.rows_per_group);
    return detail::indexer_row_length(work, g, static_cast<int>(r - g * work.rows_per_group));
  }
  // A row of this length was not scored (work.skip_len): its result is 0..len-1.
  __device__ __forceinline__ bool skipped(int len) const { return detail::indexer_row_skipped(work, len); }

  // Block-wide (see partitions_of).
  __device__ __forceinline__ void get(int64_t r, int64_t* s0, int64_t* s1, int* j, int* len) const {
    const int64_t g = detail::div_small(r, work.rows_per_group);
    *j = static_cast<int>(r - g * work.rows_per_group);
    *len = length(r);
    const int64_t units = detail::indexer_group_units(work, g);
    if (units <= 0 || *len == 0 || skipped(*len)) {  // block-uniform
      *s0 = *s1 = 0;
      return;
    }
    int64_t p0, p1;
    partitions_of(g, 0, units - 1, &p0, &p1);
    *s0 = p0 + g;
    *s1 = p1 + g + 1;
  }
};

}  // namespace cuda
}  // namespace dsattn
