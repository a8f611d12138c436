// Tile iteration over one partition of the indexer schedule (common/indexer_work.h's metadata):
// the indexer kernels walk it on the device; tests/cpu/test_indexer_cursor.cpp checks on the host
// that IdxCursor's direct access (fast_*) returns exactly the tiles of its walk (next()).
// P (the kernels' IndexerParams, or a test's stand-in) provides meta, partitions, work, split,
// tile_states and state_limit.
#pragma once
#include <cstdint>

#include "common/indexer_work.h"

#if defined(__CUDACC__)
#define DSATTN_CURSOR_FN __host__ __device__
#else
#define DSATTN_CURSOR_FN
#endif

namespace dsattn {
namespace cuda {

// A partition's two boundary pairs (its own first (group, unit) and the next partition's, as in
// the metadata), held by value: computed by the kernel itself (IndexerParams::inline_schedule),
// they stay in registers (a pointer to them would put them, and with them the kernel's parameters,
// in local memory).
struct IdxBounds {
  int32_t g = 0, u = 0, ge = 0, ue = 0;
  bool set = false;  // false: none (the cursor reads p.meta, or splits one group itself)
};

// 32-bit: the schedule metadata holds groups and units as int32, and states are < 2^31 (windows
// are int32); 32-bit bookkeeping keeps the registers for the MMA fragments.
struct IdxTile {
  int32_t g;
  int32_t t0;
  int count;
};

// Walks the (group, unit) positions of one partition in tiles of `tile_units` units. Every thread
// runs an identical copy, so all threads see the same tile sequence.
struct IdxCursor {
  int32_t g, ge;
  int32_t u, ue;
  int32_t uend;      // end unit of the current group inside this partition (-1: not yet computed)
  int32_t glo, ghi;
  int tile_units;
  int32_t limit;
  int split, sub, rot;  // this CTA takes the tiles whose position mod split is sub

  // own (optional): the partition's boundary pairs computed by the kernel itself
  // (IndexerParams::inline_schedule); else p.meta's.
  template <class P>
  DSATTN_CURSOR_FN void init(const P& p, int part, int sub_, IdxBounds own = IdxBounds{}) {
    split = p.split > 1 ? p.split : 1;
    sub = sub_;
    rot = 0;
    const int64_t G = p.work.groups;
    bool ranged = false;  // glo / ghi of group 0 known here (no schedule)
    if (own.set) {
      g = own.g; u = own.u; ge = own.ge; ue = own.ue;
    } else if (p.meta != nullptr) {
      const int32_t* m = p.meta + detail::kIndexerMetaHeader + 2 * part;
      g = m[0]; u = m[1]; ge = m[2]; ue = m[3];
    } else {
      // One group and no schedule (paged_mqa_logits at batch 1): the schedule's boundaries
      // computed here, partition `part` of P starting at unit floor(part * U / P) of the group's U
      // units, the last one ending at (G, 0). The group's range is kept (uend below), so the first
      // next() does not read the lengths and walk the rows again, and fast_count() holds from the
      // first tile on. Every step here is on the critical path of a batch-1 call: on an H200 the
      // warp-specialized kernel's producer warp issued its first copy ~4.8 us after its start at
      // 1 x 64K, one warp's serial instructions for the most part (its walk of the first batch
      // took 2.0 us of that, 1.2 with the range kept; BENCHMARKS.md, 2026-12-04).
      int64_t U = 0;
      if (G >= 1) {
        detail::indexer_group_range(p.work, 0, &glo, &ghi);
        U = range_units();
        ranged = true;
      }
      const int64_t parts = p.partitions > 0 ? p.partitions : 1;
      g = 0;
      u = static_cast<int32_t>(detail::indexer_partition_start(part, U, parts));
      if (part + 1 >= parts) {
        ge = static_cast<int32_t>(G);
        ue = 0;
      } else {
        ge = 0;
        ue = static_cast<int32_t>(detail::indexer_partition_start(part + 1, U, parts));
      }
    }
    if (g < 0) g = 0;
    if (ge > G) { ge = static_cast<int32_t>(G); ue = 0; }
    if (u < 0) u = 0;
    uend = -1;
    if (ranged && g == 0 && (g < ge || (g == ge && u < ue))) set_uend();  // next_any's entry into group 0
    tile_units = p.tile_states / detail::kIndexerUnit;
    limit = static_cast<int32_t>(p.state_limit < INT32_MAX ? p.state_limit : INT32_MAX);
  }
  // Next tile of this CTA (every split-th tile of the partition).
  template <class P>
  DSATTN_CURSOR_FN bool next(const P& p, IdxTile* t) {
    for (;;) {
      if (!next_any(p, t)) return false;
      const bool mine = rot == sub;
      rot = rot + 1 == split ? 0 : rot + 1;
      if (mine) return true;
    }
  }
  // Direct access to this CTA's next tiles inside the current group, for a caller that needs many
  // at once (the warp-specialized producer: each lane computes its own tile instead of one warp
  // walking next() tile by tile; the walk cost ~0.2 us per tile warm, ~0.6 us cold, on the
  // critical path of the first copy). fast_count(): how many of the next next() results lie in
  // the current group, none clipped by the state limit (0 until the group's range is known);
  // fast_tile(k), k < fast_count(): the k-th of them; fast_skip(n): what n next() calls would do.
  // Tile k of this CTA here is partition tile j0 + k * split from unit u, where j0 brings the
  // rotation to sub (a clipped tile does not rotate, hence the clip bound).
  DSATTN_CURSOR_FN int fast_first() const { return sub - rot + (sub < rot ? split : 0); }
  DSATTN_CURSOR_FN int fast_count() const {
    if (uend < 0) return 0;
    int32_t end = uend;
    const int64_t lim_units = (int64_t(limit) - glo + detail::kIndexerUnit - 1) / detail::kIndexerUnit;
    if (lim_units < end) end = static_cast<int32_t>(lim_units);
    const int32_t first = u + fast_first() * tile_units;  // unit of tile 0
    if (first >= end) return 0;
    const int32_t step = split * tile_units;
    return (end - first + step - 1) / step;
  }
  DSATTN_CURSOR_FN IdxTile fast_tile(int k) const {
    const int32_t u0 = u + (fast_first() + k * split) * tile_units;
    const int32_t u1 = u0 + tile_units < uend ? u0 + tile_units : uend;
    const int64_t t0 = glo + int64_t(u0) * detail::kIndexerUnit;
    int64_t t1 = glo + int64_t(u1) * detail::kIndexerUnit;
    if (t1 > ghi) t1 = ghi;
    if (t1 > limit) t1 = limit;
    return IdxTile{g, static_cast<int32_t>(t0), static_cast<int>(t1 - t0)};
  }
  DSATTN_CURSOR_FN void fast_skip(int n) {
    const int32_t u0 = u + (fast_first() + (n - 1) * split) * tile_units;  // the last tile taken
    u = u0 + tile_units < uend ? u0 + tile_units : uend;
    rot = sub + 1 == split ? 0 : sub + 1;
  }
  // Units in the current group's range [glo, ghi).
  DSATTN_CURSOR_FN int32_t range_units() const {
    return static_cast<int32_t>(detail::indexer_range_units(glo, ghi));
  }
  // The end unit of group g inside this partition, from the group's range.
  DSATTN_CURSOR_FN void set_uend() {
    const int32_t units = range_units();
    uend = (g == ge) ? (ue < units ? ue : units) : units;
  }
  // Next tile of the partition.
  template <class P>
  DSATTN_CURSOR_FN bool next_any(const P& p, IdxTile* t) {
    while (g < ge || (g == ge && u < ue && g < p.work.groups)) {
      if (uend < 0) {
        detail::indexer_group_range(p.work, g, &glo, &ghi);
        set_uend();
      }
      if (u >= uend) { ++g; u = 0; uend = -1; continue; }
      const int32_t u1 = u + tile_units < uend ? u + tile_units : uend;
      // Unsigned 32-bit: 0 <= glo, 0 <= u <= u1 <= uend <= ceil((ghi - glo) / unit), so both ends
      // are below ghi + unit <= 2^31 + unit; ghi and limit are non-negative int32.
      const uint32_t t0 = static_cast<uint32_t>(glo) + static_cast<uint32_t>(u) * detail::kIndexerUnit;
      uint32_t t1 = static_cast<uint32_t>(glo) + static_cast<uint32_t>(u1) * detail::kIndexerUnit;
      if (t1 > static_cast<uint32_t>(ghi)) t1 = static_cast<uint32_t>(ghi);
      if (t1 > static_cast<uint32_t>(limit)) t1 = static_cast<uint32_t>(limit);
      u = u1;
      if (t1 <= t0) continue;  // clipped away by the state limit
      t->g = g; t->t0 = static_cast<int32_t>(t0); t->count = static_cast<int>(t1 - t0);
      return true;
    }
    return false;
  }
};

// One group without schedule metadata, walked as ONE partition whose tiles are dealt round robin
// (the warp-specialized producer's kWsOneGroupWalk, indexer_ws.cuh): with P.partitions = 1 and
// P.split = step, IdxCursor::init(P, 0, first) followed by next() returns tile i = 0, 1, ... of
// this ring as idx_round_robin_tile(glo, end, first, step, i, tile_states), and no more once it
// returns false (tests/cpu/test_indexer_cursor.cpp checks this against the walk). The tile
// positions do not depend on the group's length: only whether a tile exists and its count do,
// through end, so a kernel can compute its first tiles' pages before it may read the length.
// end: idx_round_robin_end(ghi, state_limit); states < 2^31 as everywhere here.
DSATTN_CURSOR_FN inline int64_t idx_round_robin_end(int32_t ghi, int64_t state_limit) {
  const int64_t lim = state_limit < INT32_MAX ? state_limit : INT32_MAX;
  return ghi < lim ? ghi : lim;
}
DSATTN_CURSOR_FN inline int64_t idx_round_robin_t0(int32_t glo, int64_t first, int64_t step, int64_t i,
                                                   int tile_states) {
  return glo + (first + i * step) * tile_states;
}
DSATTN_CURSOR_FN inline bool idx_round_robin_tile(int32_t glo, int64_t end, int64_t first, int64_t step, int64_t i,
                                                  int tile_states, IdxTile* t) {
  const int64_t t0 = idx_round_robin_t0(glo, first, step, i, tile_states);
  if (t0 >= end) return false;
  const int64_t n = end - t0;
  *t = IdxTile{0, static_cast<int32_t>(t0), static_cast<int>(n < tile_states ? n : tile_states)};
  return true;
}

}  // namespace cuda
}  // namespace dsattn
