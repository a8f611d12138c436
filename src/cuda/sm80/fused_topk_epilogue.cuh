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
#include "cuda/sm80/fused_topk_collect.cuh"
#include "cuda/sm80/indexer_kernel.cuh"

namespace dsattn {
namespace cuda {

struct TopkEpilogue {
  fused_topk::CollectorBuffers buf;
  fused_topk::CollectorShared* sh = nullptr;
  int64_t cur_group = -1;

  __host__ __device__ static size_t smem_bytes(const IndexerParams&) { return sizeof(fused_topk::CollectorShared); }

  __device__ void begin(const IndexerParams&, uint8_t* epi_smem) {
    sh = reinterpret_cast<fused_topk::CollectorShared*>(epi_smem);
    cur_group = -1;
  }

  __device__ void consume(const IndexerParams&, const ScoreTile& t) {
    const int64_t slot = int64_t(blockIdx.x) + t.group;
    if (t.group != cur_group) {
      cur_group = t.group;
      fused_topk::collector_begin(*sh, t.rows);
    }
    fused_topk::collector_reserve(buf, *sh, slot, t.rows, t.count);
    fused_topk::collector_append_block(buf, *sh, slot, t.rows, static_cast<int>(t.t0), t.count, t.scores, t.ld,
                                       t.win);
  }

  __device__ void group_end(const IndexerParams&, const GroupInfo& g) {
    fused_topk::collector_end(buf, *sh, int64_t(blockIdx.x) + g.group, g.rows);
    cur_group = -1;
  }

  __device__ void finish(const IndexerParams&) {}
};

// Slot range of query row r from the schedule metadata (see the block comment above).
struct MetaSlots {
  detail::IndexerWork work;
  const int32_t* meta = nullptr;  // [indexer_meta_size(partitions)]
  int partitions = 0;

  // Largest partition p in [0, partitions) whose first position is <= (g, u).
  __device__ __forceinline__ int64_t partition_of(int64_t g, int64_t u) const {
    const int32_t* pairs = meta + detail::kIndexerMetaHeader;
    int64_t lo = 0, hi = partitions - 1;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      const int64_t pg = pairs[2 * mid], pu = pairs[2 * mid + 1];
      if (pg < g || (pg == g && pu <= u)) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    return lo;
  }

  __device__ __forceinline__ void get(int64_t r, int64_t* s0, int64_t* s1, int* j, int* len) const {
    const int64_t g = r / work.rows_per_group;
    *j = static_cast<int>(r % work.rows_per_group);
    const detail::RowWindow rw = detail::indexer_row_window(work, g, *j);
    *len = rw.hi > rw.lo ? rw.hi - rw.lo : 0;
    const int64_t units = detail::indexer_group_units(work, g);
    if (units <= 0 || *len == 0) {
      *s0 = *s1 = 0;
      return;
    }
    *s0 = partition_of(g, 0) + g;
    *s1 = partition_of(g, units - 1) + g + 1;
  }
};

}  // namespace cuda
}  // namespace dsattn
