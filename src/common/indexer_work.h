// Indexer work description shared by host and device code (schedule metadata on the CPU backend,
// the schedule kernel and the indexer kernels on CUDA).
//
// The indexer's unit of work is a *group*: up to 8 query rows that share one key sequence, so the
// keys of a group are read once for all its rows. paged_mqa_logits: a group is a request (its N
// rows; varlen: one row). mqa_logits (prefill): a group is 8 consecutive query rows over the one
// contiguous key array. Each row r of group g has a window [lo, hi) of key states it scores; the
// group covers [glo, ghi) = union of its rows' windows. Work is split in units of kIndexerUnit
// states counted from glo.
//
// Every read here is bounds-checked against the values the host validated (batch, rows), so any
// device-side length or row index is safe; lengths are clamped at 0.
#pragma once
#include <cstdint>

#include "api/problems.h"
#include "common/fast_div.h"
#include "dsattn/codecs.h"  // DSATTN_HD
#include "dsattn/tensor.h"

namespace dsattn {
namespace detail {

constexpr int kIndexerUnit = 64;          // states per schedule unit
constexpr int kIndexerMaxGroupRows = 8;   // rows per group (N <= 8)
constexpr int kIndexerMetaHeader = 4;     // [P, G, unit, magic]
constexpr int32_t kIndexerMetaMagic = 0x1d5a7e11;

enum class IndexerMode : int32_t { kPaged = 0, kPrefill = 1 };

struct IndexerWork {
  IndexerMode mode = IndexerMode::kPaged;
  int32_t rows_per_group = 1;  // N (paged), 1 (varlen), 8 (prefill)
  int32_t next_n = 1;          // N rule for [B] context lengths
  int32_t lens_per_row = 1;    // paged: lens is [B, N] (or varlen [R]); 0: [B] with the N rule
  int32_t varlen = 0;
  int32_t compressed = 0;      // prefill: output column t - ks[r]
  int64_t rows = 0;            // R
  int64_t groups = 0;          // G
  int64_t batch = 0;           // block-table rows (paged)
  int64_t key_limit = 0;       // prefill: Nk (windows are clamped to [0, Nk))
  const int32_t* lens = nullptr;         // paged: [B, N] / [B] / varlen [R]
  int64_t lens_s0 = 0, lens_s1 = 0;      // element strides
  const int32_t* row_request = nullptr;  // varlen: [R]
  int64_t rr_s0 = 0;
  const int32_t* ks = nullptr;           // prefill: [M]
  const int32_t* ke = nullptr;           // prefill: [M]
  int64_t ks_s0 = 0, ke_s0 = 0;
  // paged, > 0: every row's window ends at min(length, len_cap) (paged_mqa_topk's resident route
  // caps lengths at the block table's states, so no partition outgrows the plan's piece bound)
  int32_t len_cap = 0;
  // paged, > 0: rows whose window holds at most skip_len states are not scored (paged_mqa_topk
  // with k = skip_len, unsorted and without values: their result is 0..len-1, which the op's last
  // kernel writes from indexer_row_length). indexer_row_window returns them empty, so the
  // schedules give them no units and the scoring kernels never read their keys.
  int32_t skip_len = 0;
};

// The paged-mode work of a validated decode problem (host code: the CPU schedule, the schedule
// kernel's and the indexer kernels' launchers). `batch` bounds varlen row_request entries (the
// block-table rows); pass INT64_MAX where the block table is not known (schedule metadata).
inline IndexerWork paged_indexer_work(const PagedIndexerProblem& pb, const TensorView& context_lens,
                                      const TensorView& row_request, int64_t batch) {
  IndexerWork w;
  w.mode = IndexerMode::kPaged;
  w.varlen = pb.varlen ? 1 : 0;
  w.next_n = pb.next_n;
  w.rows_per_group = pb.varlen ? 1 : pb.next_n;
  w.lens_per_row = (pb.varlen || pb.lens_per_row) ? 1 : 0;  // varlen lens are [R]
  w.rows = pb.rows;
  w.groups = pb.varlen ? pb.rows : pb.batch;
  w.batch = batch;
  w.lens = static_cast<const int32_t*>(context_lens.data);
  w.lens_s0 = context_lens.ndim > 0 ? context_lens.strides[0] : 0;
  w.lens_s1 = context_lens.ndim > 1 ? context_lens.strides[1] : 0;
  w.skip_len = pb.skip_len;
  if (pb.varlen) {
    w.row_request = static_cast<const int32_t*>(row_request.data);
    w.rr_s0 = row_request.strides[0];
  }
  return w;
}

struct RowWindow {
  int32_t lo, hi;      // states [lo, hi) are scored (hi <= lo: empty)
  int64_t col_off;     // output column = t - col_off
};

DSATTN_HD int64_t indexer_group_rows(const IndexerWork& w, int64_t g) {
  const int64_t r0 = g * w.rows_per_group;
  const int64_t n = w.rows - r0;
  return n < w.rows_per_group ? (n < 0 ? 0 : n) : w.rows_per_group;
}

// Block-table row of group g, or -1 when it has none or it is out of range (varlen row_request).
DSATTN_HD int64_t indexer_group_request(const IndexerWork& w, int64_t g) {
  if (w.mode != IndexerMode::kPaged) return -1;
  if (!w.varlen) return g;
  const int64_t b = w.row_request[g * w.rr_s0];
  return (b >= 0 && b < w.batch) ? b : -1;
}

// Paged mode: the length of row j of group g (the N rule, [B, N] or varlen lengths, len_cap), >= 0.
DSATTN_HD int32_t indexer_paged_len(const IndexerWork& w, int64_t g, int j) {
  const int64_t r = g * w.rows_per_group + j;
  int64_t len = 0;
  if (w.varlen) {
    if (indexer_group_request(w, g) >= 0) len = w.lens[r * w.lens_s0];
  } else if (w.lens_per_row) {
    len = w.lens[g * w.lens_s0 + j * w.lens_s1];
  } else {
    len = int64_t(w.lens[g * w.lens_s0]) - w.next_n + j + 1;
  }
  if (w.len_cap > 0 && len > w.len_cap) len = w.len_cap;
  return static_cast<int32_t>(len < 0 ? 0 : len);
}

// Whether a paged row of length len is left unscored by skip_len.
DSATTN_HD bool indexer_row_skipped(const IndexerWork& w, int len) {
  return w.mode == IndexerMode::kPaged && w.skip_len > 0 && len <= w.skip_len;
}

// The states [lo, hi) of row j of group g that the kernels score (a row of at most skip_len
// states: none).
DSATTN_HD RowWindow indexer_row_window(const IndexerWork& w, int64_t g, int j) {
  RowWindow rw{0, 0, 0};
  const int64_t r = g * w.rows_per_group + j;
  if (w.mode == IndexerMode::kPaged) {
    const int32_t len = indexer_paged_len(w, g, j);
    rw.hi = indexer_row_skipped(w, len) ? 0 : len;
    return rw;
  }
  const int64_t s = w.ks[r * w.ks_s0], e = w.ke[r * w.ke_s0];
  int64_t lo = s < 0 ? 0 : s, hi = e > w.key_limit ? w.key_limit : e;
  if (hi < lo) hi = lo;
  rw.lo = static_cast<int32_t>(lo);
  rw.hi = static_cast<int32_t>(hi);
  rw.col_off = w.compressed ? s : 0;
  return rw;
}

// The length of row j of group g as its top-k sees it: its window's, counting a row that
// skip_len leaves unscored (whose result is then 0..len-1, len <= skip_len).
DSATTN_HD int32_t indexer_row_length(const IndexerWork& w, int64_t g, int j) {
  if (w.mode == IndexerMode::kPaged) return indexer_paged_len(w, g, j);
  const RowWindow rw = indexer_row_window(w, g, j);
  return rw.hi > rw.lo ? rw.hi - rw.lo : 0;
}

// Union [glo, ghi) of the group's non-empty row windows ({0, 0} when all are empty).
DSATTN_HD void indexer_group_range(const IndexerWork& w, int64_t g, int32_t* glo, int32_t* ghi) {
  const int n = static_cast<int>(indexer_group_rows(w, g));
  int32_t lo = 0x7fffffff, hi = 0;
  for (int j = 0; j < n; ++j) {
    const RowWindow rw = indexer_row_window(w, g, j);
    if (rw.hi <= rw.lo) continue;
    lo = rw.lo < lo ? rw.lo : lo;
    hi = rw.hi > hi ? rw.hi : hi;
  }
  if (hi == 0) lo = 0;
  *glo = lo;
  *ghi = hi;
}

// Schedule units covering the states [lo, hi) (lo <= hi).
DSATTN_HD int64_t indexer_range_units(int32_t lo, int32_t hi) {
  return (int64_t(hi) - lo + kIndexerUnit - 1) / kIndexerUnit;
}

DSATTN_HD int64_t indexer_group_units(const IndexerWork& w, int64_t g) {
  int32_t lo, hi;
  indexer_group_range(w, g, &lo, &hi);
  return indexer_range_units(lo, hi);
}

// Metadata layout (i32): [P, G, unit, magic] then P + 1 (group, unit) pairs: partition p works on
// (group, unit) positions [pair p, pair p + 1) in row-major order. Pair P is (G, 0).
DSATTN_HD int64_t indexer_meta_size(int partitions) { return kIndexerMetaHeader + 2 * (int64_t(partitions) + 1); }

// The schedule's partition boundaries, in one place for the host schedule, the schedule kernel and
// the kernels that split one request without a schedule (IdxCursor::init): of `total` units over
// P partitions, partition p starts at unit floor(p * total / P) ...
DSATTN_HD int64_t indexer_partition_start(int64_t p, int64_t total, int64_t P) { return div_small(p * total, P); }
// ... so the first partition starting at or after unit x is ceil(x * P / total) (total > 0).
DSATTN_HD int64_t indexer_first_partition_from(int64_t x, int64_t total, int64_t P) {
  return div_small(x * P + total - 1, total);
}

// The schedule's group-change cost: `cost` virtual units placed before every non-empty group after
// the first, so that a partition whose range enters another group gets that many fewer units of
// states (the schedule balances virtual units). Why: the warp-specialized Hopper kernel's CTAs
// whose partition straddles two requests (a Q / weight / window load at the change, among other
// costs) ended last at ~1M states over many requests; balanced this way those calls gained 2-5 %
// of copy bandwidth on an H200 (BENCHMARKS.md, 2026-12-02). With cost 0
// (paged_mqa_topk's own schedules, whose piece bound relies on it: fused_topk_launch.cu's
// piece_states_bound) this is the plain split; the logits ops' schedules use indexer_group_cost().
DSATTN_HD int64_t indexer_group_lead(int64_t g, int64_t u, int64_t cost) { return u > 0 && g > 0 ? cost : 0; }

// The cost the logits ops' schedules use (schedule_metadata, paged_mqa_logits's own schedule):
// kIndexerGroupCost, or DSATTN_INDEXER_GROUP_COST=<units> (0..64, benchmarks). Host only; both
// defined in src/api/schedule_metadata.cpp, with the measurements behind the default.
int indexer_group_cost();

// Partition boundaries that fall into group g, whose virtual units are [pre, pre + lead + u) of
// `total` virtual units (lead = indexer_group_lead(g, u, cost)): a boundary in the lead starts the
// partition at the group's first unit.
DSATTN_HD void indexer_meta_fill_group(int32_t* meta, int partitions, int64_t total, int64_t g, int64_t pre,
                                       int64_t u, int64_t cost = 0) {
  if (u <= 0 || total <= 0) return;
  const int64_t P = partitions;
  const int64_t lead = indexer_group_lead(g, u, cost);
  int64_t p = indexer_first_partition_from(pre, total, P);
  const int64_t p_end = indexer_first_partition_from(pre + lead + u, total, P);
  for (; p < p_end && p < P; ++p) {
    const int64_t off = indexer_partition_start(p, total, P) - pre - lead;
    meta[kIndexerMetaHeader + 2 * p] = static_cast<int32_t>(g);
    meta[kIndexerMetaHeader + 2 * p + 1] = static_cast<int32_t>(off > 0 ? off : 0);
  }
}

// The pairs of partitions q / q + 1 that start in group g, whose u units (read by the caller) are
// virtual units [pre, pre + lead + u): a boundary in the lead starts the partition at the group's
// first unit. indexer_run_pairs calls it for each group of a run; ws_inline_schedule with at most
// one group per thread (kWsOwnRange) calls it directly with the units it already read, so the
// lengths are not read again.
DSATTN_HD void indexer_group_pairs(int64_t g, int64_t u, int64_t cost, int64_t pre, int64_t total, int64_t P,
                                   int64_t q, int32_t* pair) {
  const int64_t lead = indexer_group_lead(g, u, cost), v = lead + u;
  if (total <= 0 || u <= 0) return;
  for (int i = 0; i < 2; ++i) {
    if (q + i >= P) break;
    const int64_t target = indexer_partition_start(q + i, total, P);
    if (target < pre || target >= pre + v) continue;  // in another group
    const int64_t off = target - pre - lead;
    pair[2 * i] = static_cast<int32_t>(g);
    pair[2 * i + 1] = static_cast<int32_t>(off > 0 ? off : 0);
  }
}

// A schedule computed by the scoring kernel's CTA for its own partition (ws_inline_schedule): the
// block's threads each take a run of consecutive groups [g_lo, g_hi); indexer_run_units is a run's
// virtual units (lead included, as in indexer_meta_fill_group); after a block scan gives the run's
// first virtual unit `pre` of `total`, indexer_run_pairs writes into pair[0..1] / pair[2..3] the
// metadata pairs of partitions q / q + 1 (of P) that start inside the run, and leaves the others:
// the caller starts them at (G, 0), which is every pair when total = 0 and pair P. Together the
// runs give exactly the schedule's pairs (tests/cpu/test_indexer_cursor.cpp).
DSATTN_HD int64_t indexer_run_units(const IndexerWork& w, int64_t g_lo, int64_t g_hi, int64_t cost) {
  int64_t v = 0;
  for (int64_t g = g_lo; g < g_hi; ++g) {
    const int64_t u = indexer_group_units(w, g);
    v += u + indexer_group_lead(g, u, cost);
  }
  return v;
}
DSATTN_HD void indexer_run_pairs(const IndexerWork& w, int64_t g_lo, int64_t g_hi, int64_t cost, int64_t pre,
                                 int64_t v, int64_t total, int64_t P, int64_t q, int32_t* pair) {
  if (total <= 0 || v <= 0) return;
  bool holds = false;  // whether partition q or q + 1 starts in this run (most runs: no second read)
  for (int i = 0; i < 2 && q + i < P; ++i) {
    const int64_t target = indexer_partition_start(q + i, total, P);
    holds = holds || (target >= pre && target < pre + v);
  }
  if (!holds) return;
  int64_t acc = pre;
  for (int64_t g = g_lo; g < g_hi; ++g) {
    const int64_t u = indexer_group_units(w, g);
    indexer_group_pairs(g, u, cost, acc, total, P, q, pair);
    acc += u + indexer_group_lead(g, u, cost);
  }
}

DSATTN_HD void indexer_meta_header(int32_t* meta, int partitions, int64_t groups) {
  meta[0] = partitions;
  meta[1] = static_cast<int32_t>(groups);
  meta[2] = kIndexerUnit;
  meta[3] = kIndexerMetaMagic;
}

}  // namespace detail
}  // namespace dsattn
