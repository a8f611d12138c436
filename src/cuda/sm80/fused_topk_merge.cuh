// Merge of the fused indexer + top-k (SPEC §3.4): one CTA per query row reads the candidates its
// pieces left (fused_topk_collect.cuh), in slot order (= increasing state index), streams them
// through a shared-memory buffer with a running threshold (ordered appends, compaction by the
// block radix select of topk_kernel.cuh when full), then selects, sorts on request and writes
// indices / scores / slot ids. Memory: the pieces' buffers only, O(rows x pieces x k).
#pragma once
#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/common/topk_grid.cuh"
#include "cuda/sm80/fused_topk_collect.cuh"

namespace dsattn {
namespace cuda {
namespace fused_topk {

using topk_detail::kTopkThreads;
using topk_detail::kTopkWarps;
using topk_detail::TopkShared;

// A SlotRange tells the merge, for query row r: its slots [s0, s1), its row j inside them, and its
// length (states [0, len) are defined). UniformSlots: every group has the same number of pieces
// (tests): group g = r / rows_per_group owns slots [g * pieces, (g + 1) * pieces).
struct UniformSlots {
  int rows_per_group = 1;
  int pieces = 1;
  const int32_t* lens = nullptr;  // [R]
  __device__ __forceinline__ void get(int64_t r, int64_t* s0, int64_t* s1, int* j, int* len) const {
    const int64_t g = r / rows_per_group;
    *j = static_cast<int>(r % rows_per_group);
    *s0 = g * pieces;
    *s1 = *s0 + pieces;
    *len = lens[r] < 0 ? 0 : lens[r];
  }
  __device__ __forceinline__ bool skipped(int) const { return false; }
};

// Level 1 of a split merge (few long rows): CTA (r, c) of grid (R, C) merges the c-th of C equal
// shares of row r's slots. SplitSlots is the view of level 2: row r's slots are the C level-1
// outputs [r * C, r * C + C) (rows_per_slot = 1), its length comes from the inner range.
template <typename SlotRange>
struct SplitSlots {
  SlotRange inner;
  int parts = 1;  // C
  __device__ __forceinline__ void get(int64_t r, int64_t* s0, int64_t* s1, int* j, int* len) const {
    *len = inner.length(r);
    *j = 0;
    *s0 = r * parts;
    *s1 = *s0 + parts;
  }
  __device__ __forceinline__ bool skipped(int len) const { return inner.skipped(len); }
};

struct MergeShared {
  TopkShared t;
  int cnt;
  uint32_t thr;
  int total;
  int row_total;             // candidates in the row's slots (non-split rows)
  int round_n;               // slots in the current round
  int slot_end[32];          // inclusive prefix of their candidate counts
  int slot_vend[32];         // inclusive prefix of the 4-entry vectors per slot
  int slot_t0[32];           // dense slot: entry p is state slot_t0 + p (indices not stored); else -1
  uint32_t bin_key[32];      // merge_bin_threshold: the buffer's keys in the k-th key's 22-bit bin
  int bin_n;
  uint32_t bin_T;
  int bin_need;
};

// Where flat vector v of a round lies: slot w of the round (the first whose vector prefix exceeds
// v), vector vi inside it, and how many of its 4 entries are candidates (cnt). The round's prefixes
// (sh.slot_end / slot_vend, m slots) are published. A buffer holds ccap entries (a multiple of 4)
// from a multiple of 4, so whole vectors past a slot's count stay inside it.
struct RoundVec {
  int w, vi, cnt;
};
// The slot of the round (m slots) that holds flat vector v: the first whose vector prefix exceeds v.
__device__ __forceinline__ int round_slot(const MergeShared& sh, int m, int v) {
  int w = 0;
#pragma unroll
  for (int step = 16; step > 0; step >>= 1) {
    if (w + step <= m - 1 && sh.slot_vend[w + step - 1] <= v) w += step;
  }
  return w;
}
__device__ __forceinline__ RoundVec round_vec(const MergeShared& sh, int m, int v) {
  const int w = round_slot(sh, m, v);
  const int vi = v - (w > 0 ? sh.slot_vend[w - 1] : 0);
  const int slot_n = sh.slot_end[w] - (w > 0 ? sh.slot_end[w - 1] : 0);
  return RoundVec{w, vi, min(4, slot_n - 4 * vi)};
}

// Warp 0, one round of up to 32 slots: lane l reads the header of slot s = sb + l of row j (none
// past s1): its count n (clamped to [0, ccap]) and, with kT0, t0 (dense slot: entry p is state
// t0 + p; -1: indices stored), and publishes the round's prefixes sh.slot_end / slot_vend (and
// sh.slot_t0). Headers are zeroed before the scoring kernel; a piece that never ran reads as empty.
struct RoundSlot {
  int n, t0, incl, vincl;  // this lane's slot; incl / vincl: inclusive prefixes over the lanes
};
template <bool kT0>
__device__ __forceinline__ RoundSlot round_headers(const CollectorBuffers& b, int64_t s, int64_t s1, int j,
                                                   MergeShared& sh) {
  const int lane = threadIdx.x & 31;
  RoundSlot r{0, -1, 0, 0};
  if (s < s1) {
    const int32_t* h = b.header_of(s, j);
    r.n = min(max(h[0], 0), b.ccap);
    if constexpr (kT0) r.t0 = h[1] - 1;
  }
  r.incl = warp_inclusive_scan(r.n);
  r.vincl = warp_inclusive_scan((r.n + 3) >> 2);
  sh.slot_end[lane] = r.incl;
  sh.slot_vend[lane] = r.vincl;
  if constexpr (kT0) sh.slot_t0[lane] = r.t0;
  return r;
}

// The first-digit histogram (top 12 key bits, kBins1 words at region) of keys[0, n) in shared
// memory, zeroed first. Block-wide; ends synced. One key per thread and step with hist_add: two
// keys per thread with hist_add_v measured no faster (H200, paged_mqa_topk 128 x 32K 239.5-240.4
// against 237.9-238.3 us, 8 x 64K 83.5-84.3 against 83.4-83.6).
__device__ __forceinline__ void merge_first_digit_hist(const uint32_t* keys, int n, uint32_t* region) {
  using namespace topk_detail;
  for (int i = threadIdx.x; i < kBins1; i += kTopkThreads) region[i] = 0;
  __syncthreads();
  for (int base = 0; base < n; base += kTopkThreads) {  // block-uniform: warp votes inside
    const int i = base + static_cast<int>(threadIdx.x);
    hist_add(region, (i < n ? keys[i] : 0u) >> 20, i < n);
  }
  __syncthreads();
}

// A bounded level 2 that is not exact (the k-th key's 22-bit bin p2 holds keys that lose, e.g.
// ties): the buffer keys[0, cnt) hold every candidate key in or above p2. Those above p2 win; of
// the bin's keys the best k - above do (larger key, then earlier position = smaller index). With
// at most 32 keys in the bin, warp 0 finds the k-th key T and how many keys equal to T win (*need)
// by comparing them pairwise, so the ordered selection needs no radix digits over the buffer.
// Returns false (nothing found) otherwise, or should the counts not come out (block-uniform).
// Block-wide; ends synced. (The radix selection this skips, a first-digit histogram, two find_bin
// scans over 4096 and 1024 bins, a compaction and two more digits, made such calls ~11 us slower
// than exact ones: H200, paged_mqa_topk 1 x 64K on the streaming route, 2 of 14 random instances,
// the level-2 kernel 19.4-20.4 us against 8.9-9.2; the call 47.2-47.8 us before, 40.5-41.5 with
// this, 37.0 on the exact instances.)
__device__ __forceinline__ bool merge_bin_threshold(const uint32_t* keys, int cnt, int k, uint32_t p2,
                                                    MergeShared& sh, uint32_t* T, int* need) {
  using namespace topk_detail;
  if (threadIdx.x == 0) sh.bin_n = 0;
  __syncthreads();
  int above = 0;
  for (int base = 0; base < cnt; base += kTopkThreads) {  // block-uniform
    const int i = base + static_cast<int>(threadIdx.x);
    const uint32_t key = i < cnt ? keys[i] : 0u;
    const uint32_t hi = key >> 10;
    above += __syncthreads_count(i < cnt && hi > p2);
    if (i < cnt && hi == p2) {
      const int q = atomicAdd(&sh.bin_n, 1);
      if (q < 32) sh.bin_key[q] = key;
    }
  }
  __syncthreads();
  const int m = sh.bin_n, want = k - above;
  if (m > 32 || want < 1 || want > m) return false;
  if (threadIdx.x < 32) warp_rank_pick(sh.bin_key, m, want, &sh.bin_T, &sh.bin_need);
  __syncthreads();
  *T = sh.bin_T;
  *need = sh.bin_need;
  return true;
}

// Compacts the buffer keys/idx [0, cnt) to its k best (index order kept). Block-wide.
__device__ __forceinline__ void merge_compact(uint32_t* keys, int32_t* idx, int k, uint32_t* region, int k_pad,
                                              int m_cap, MergeShared& sh) {
  using namespace topk_detail;
  const int n = sh.cnt;
  merge_first_digit_hist(keys, n, region);
  uint32_t T;
  int* sel_pos = reinterpret_cast<int*>(region + k_pad);  // the winners' candidate indices
  select_topk_by(keys, n, k, k_pad, m_cap, region, sh.t, sel_pos, [&](int p) { return idx[p]; }, &T);
  const uint32_t* sel_key = region;
  // Gather first (sel_pos[j] >= j: writing in place would race), then write back.
  constexpr int kPer = kMaxK / kTopkThreads;
  uint32_t kk[kPer];
  int32_t ii[kPer];
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int j = threadIdx.x + q * kTopkThreads;
    if (j < k) {
      kk[q] = sel_key[j];
      ii[q] = sel_pos[j];
    }
  }
  __syncthreads();
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int j = threadIdx.x + q * kTopkThreads;
    if (j < k) {
      keys[j] = kk[q];
      idx[j] = ii[q];
    }
  }
  if (threadIdx.x == 0) {
    sh.cnt = k;
    sh.thr = T;
  }
  __syncthreads();
}

// Raises sh.thr to (b1 << 20) - 1, b1 = the first-digit bin (top 12 key bits) of the k-th largest
// candidate in slots [s0, s1) (row j): k candidates, distinct states of the row, have keys >= b1 << 20.
// Reads only the keys, 16 bytes at a time and four loads per thread in flight; slots in rounds of
// 32 as in the merge stream. The histogram: kBins1 words of the dynamic shared memory from word
// hist_off (indexed from the array itself, so that its atomics stay shared-memory atomics in a
// function that is not inlined). Block-wide; ends synced.
// Not inlined and `b` by value: inlined, its registers made the merge kernels spill on every path.
extern __shared__ __align__(16) uint32_t fused_merge_smem[];
__device__ __noinline__ inline void merge_row_bound(const CollectorBuffers b, int64_t s0, int64_t s1, int j,
                                                    int hist_off, MergeShared& sh) {
  using namespace topk_detail;
  uint32_t* hist = fused_merge_smem + hist_off;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int i = threadIdx.x; i < kBins1; i += kTopkThreads) hist[i] = 0;
  for (int64_t sb = s0; sb < s1; sb += 32) {
    __syncthreads();  // the histogram's zeroes; the previous round's slot prefixes consumed
    if (warp == 0) round_headers<false>(b, sb + lane, s1, j, sh);
    __syncthreads();
    const int m = static_cast<int>(s1 - sb < 32 ? s1 - sb : 32);
    const int nv = sh.slot_vend[m - 1];
    constexpr int kLoads = 4;
    for (int v0 = 0; v0 < nv; v0 += kLoads * kTopkThreads) {  // block-uniform
      uint32_t bin[4 * kLoads];
      bool act[4 * kLoads];
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int v = v0 + u * kTopkThreads + static_cast<int>(threadIdx.x);
        uint4 kv = make_uint4(0u, 0u, 0u, 0u);
        int cnt = 0;
        if (v < nv) {
          const RoundVec rv = round_vec(sh, m, v);
          kv = __ldg(reinterpret_cast<const uint4*>(b.key + b.offset(sb + rv.w, j) + 4 * rv.vi));
          cnt = rv.cnt;
        }
        const uint32_t kk[4] = {kv.x, kv.y, kv.z, kv.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          bin[4 * u + e] = kk[e] >> 20;
          act[4 * u + e] = e < cnt;
        }
      }
      hist_add_v(hist, bin, act);
    }
  }
  if (threadIdx.x == 0) sh.t.bin = 0xffffffffu;  // an exactness test before may have set it
  __syncthreads();
  find_bin(hist, kBins1, b.k, sh.t);  // ends synced; bin unset: fewer than k candidates
  const uint32_t b1 = sh.t.bin;
  if (threadIdx.x == 0 && b1 != 0xffffffffu && b1 > 0u) atomicMax(&sh.thr, (b1 << 20) - 1u);
  __syncthreads();
}

// A row of dense pieces only (every state of the row at its position, indices implied by each
// piece's first state; warp-specialized scoring at 64 padded heads, N = 1) with more than k but at
// most 2 * mcap entries, in at most 32 slots: all its keys go to shared memory in one pass over
// global memory (the index half of the buffer holds keys too: no indices are read), and the block
// top-k selects from them as the standalone top-k's direct plan does; a winner's state comes from
// its position. Replaces the histogram pre-pass, the filtering stream and the selection over its
// survivors (two passes over the keys and one over the indices). Returns false (nothing done) when
// the row does not qualify. Block-uniform; not inlined and `b` / `out` by value, as merge_row_bound.
__device__ __noinline__ inline bool merge_dense_row(const CollectorBuffers b, int64_t s0, int64_t s1, int len,
                                                    int64_t r, int k, int k_pad, int m_cap, int mcap, bool sorted,
                                                    const topk_detail::TopkOutputs out, MergeShared& sh) {
  using namespace topk_detail;
  if (b.rows_per_slot != 1 || s1 <= s0 || s1 - s0 > 32) return false;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (warp == 0) {
    const RoundSlot rs = round_headers<true>(b, s0 + lane, s1, 0, sh);
    const bool all = __all_sync(0xffffffffu, rs.t0 >= 0 || rs.n == 0);  // every slot dense (or empty)
    const int total = __shfl_sync(0xffffffffu, rs.incl, 31);
    const int vtotal = __shfl_sync(0xffffffffu, rs.vincl, 31);
    if (lane == 0) sh.round_n = (all && total > k && 4 * vtotal <= 2 * mcap) ? static_cast<int>(s1 - s0) : 0;
  }
  uint32_t* region = fused_merge_smem + 2 * mcap;
  for (int i = threadIdx.x; i < kBins1; i += kTopkThreads) region[i] = 0;
  __syncthreads();
  const int m = sh.round_n;
  if (m == 0) return false;
  // Slot w's keys go to vectors [vend[w - 1], vend[w]) of the shared buffer (its last vector padded
  // with key 0, which ranks below every state), so every vector moves whole, as one asynchronous
  // copy: all of a row's copies in flight at once, no registers held. A thread finds the slot of
  // its next vector by stepping forward from the last one (its vectors only increase), where the
  // flat-vector binary search per vector cost more instructions than the copy (H200 profile,
  // 128 x 32K). Then one pass over shared memory takes the first-digit histogram. (Loads into
  // registers, four per thread at a time, with the histogram taken on the way: the same time.)
  const int nv = sh.slot_vend[m - 1];
  {
    const uint32_t keys_s = smem_u32(fused_merge_smem);
    int w = -1, vb = 0, ve = 0, nb = 0, ne = 0;
    const uint32_t* src = nullptr;
    for (int v = threadIdx.x; v < nv; v += kTopkThreads) {
      while (v >= ve) {
        ++w;
        vb = ve;
        nb = ne;
        ve = sh.slot_vend[w];
        ne = sh.slot_end[w];
        src = b.key + b.offset(s0 + w, 0);
      }
      const int cnt = min(4, ne - nb - 4 * (v - vb));
      cp_async16_zfill(keys_s + 16u * static_cast<uint32_t>(v), src + 4 * (v - vb), 4 * cnt);
    }
    cp_async_commit();
    cp_async_wait<0>();
  }
  __syncthreads();
  const uint4* keys4 = reinterpret_cast<const uint4*>(fused_merge_smem);
  for (int v0 = 0; v0 < nv; v0 += kTopkThreads) {  // block-uniform
    const int v = v0 + static_cast<int>(threadIdx.x);
    const bool act = v < nv;
    const uint4 kv = act ? keys4[v] : make_uint4(0u, 0u, 0u, 0u);
    const uint32_t bin[4] = {kv.x >> 20, kv.y >> 20, kv.z >> 20, kv.w >> 20};
    const bool on[4] = {act, act, act, act};  // pads too: bin 0 ranks last
    hist_add_v<4>(region, bin, on);
  }
  __syncthreads();
  uint32_t* keys = fused_merge_smem;
  const int total = 4 * nv;
  auto state_of = [&](int p) {  // entry p lies in vector p / 4
    const int w = round_slot(sh, m, p >> 2);
    return sh.slot_t0[w] + p - 4 * (w > 0 ? sh.slot_vend[w - 1] : 0);
  };
  const bool to_out = out.indices_only(sorted);
  int* sel_pos = reinterpret_cast<int*>(region + k_pad);
  select_topk_by(keys, total, k, k_pad, m_cap, region, sh.t, to_out ? out.indices + r * out.indices_ld : sel_pos,
                 state_of);  // the pads (key 0) never win: more than k keys of states rank above them
  if (to_out) return true;
  __syncthreads();
  finish_row<float>(region, sel_pos, len < k ? len : k, k, k_pad, sorted, nullptr, r, out);
  return true;
}

// grid (R) (kPartial: (R, C), see SplitSlots). Dynamic smem: [keys mcap][idx mcap]
// [region_words(k_pad, m_cap)] u32.
// The threshold starts at the best row bound of the row's pieces. Slots are read in rounds of up to
// 32: warp 0 loads the round's headers and takes as many slots as the buffer has room for; the
// whole block then filters the round as one flat list of 16-byte vectors (each thread 2 vectors of
// keys and indices in flight) and appends the survivors in state order. A round costs a few memory
// round trips however short or few its slots.
// kPartial: instead of writing the row's result, the CTA writes its candidates, or its best k of
// them when they are more than part.ccap, in state order to slot r * C + c of `part` (header =
// (count, 0, row bound)).
template <typename SlotRange, bool kPartial = false>
__global__ void __launch_bounds__(kTopkThreads)
    fused_topk_merge_kernel(CollectorBuffers b, SlotRange slots, int k, int k_pad, int m_cap, int mcap, bool sorted,
                            topk_detail::TopkOutputs out, CollectorBuffers part) {
  pdl_trigger();  // pdl.cuh: before any global-memory access
  pdl_wait();
  using namespace topk_detail;
  __shared__ MergeShared sh;
  const int64_t r = blockIdx.x;
  int64_t s0, s1;
  int j, len;
  slots.get(r, &s0, &s1, &j, &len);
  // A row the scoring kernel skipped (at most k states, unsorted, no values): its positions. Level
  // 1 of a split merge leaves it to level 2, which reads none of level 1's outputs for it.
  if (slots.skipped(len)) {  // block-uniform
    if constexpr (!kPartial) topk_detail::write_position_row(len, k, r, out);
    return;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) {
    sh.cnt = 0;
    sh.thr = kAbsentKey;
    sh.t.bin = 0xffffffffu;
    sh.row_total = 0;
  }
  __syncthreads();
  if (!kPartial && b.rec == nullptr && merge_dense_row(b, s0, s1, len, r, k, k_pad, m_cap, mcap, sorted, out, sh)) {
    return;
  }
  // Split level 2 with level 1's records: the k-th key's 22-bit bin p2 from hist2. At least k
  // states have keys in or above p2, so no key <= T = (p2 << 10) - 1 can win (bounded), and the
  // stream below keeps about k keys. When the row needs every key of p2 (the usual case: it holds
  // one key), every key > T is a winner and there are exactly k of them, so the threshold is
  // exact and no selection is left. Otherwise the selection runs over those ~k keys
  // (merge_bin_threshold). Before, only the exact case used p2; the others took the header bounds,
  // a histogram pass over every level-1 output and a radix selection over thousands of keys.
  bool exact = false, bounded = false;
  uint32_t p2 = 0u;  // bounded: the k-th key's 22-bit bin
  if (!kPartial && b.rec != nullptr) {  // block-uniform
    const int4 rc = __ldg(reinterpret_cast<const int4*>(b.rec + r * 4));
    const uint32_t hb = static_cast<uint32_t>(rc.y);
    if (rc.x != 0 && hb > 0u) {
      uint32_t* h2 = fused_merge_smem + 2 * mcap;  // the region, free until the first compaction
      for (int i = threadIdx.x; i < kBins2; i += kTopkThreads) h2[i] = __ldg(b.hist2 + r * kBins2 + i);
      __syncthreads();
      const int k_rem = k - rc.z;
      find_bin(h2, kBins2, k_rem, sh.t);  // ends synced; bin unset: fewer kept than needed
      const uint32_t b2 = sh.t.bin;
      if (b2 != 0xffffffffu) {
        bounded = true;
        exact = static_cast<int>(h2[b2]) == k_rem - sh.t.above;
        p2 = (hb << 10) | b2;
        if (threadIdx.x == 0) sh.thr = (p2 << 10) - 1u;
      }
      __syncthreads();
    }
  }
  // Start from the best row bound any piece of the row found (header word 2): keys at or below
  // it cannot be in the top k, so most candidates of the other pieces never enter the buffer.
  // Level 1 (row histogram) and a bounded level 2 have a better bound already.
  if (!bounded && !(kPartial && b.hist != nullptr)) {  // block-uniform
    uint32_t row_bound = kAbsentKey;
    int n_row = 0;
    for (int64_t s = s0 + threadIdx.x; s < s1; s += kTopkThreads) {
      const int32_t* h = b.header_of(s, j);
      row_bound = max(row_bound, static_cast<uint32_t>(h[2]));
      n_row += min(max(h[0], 0), b.ccap);
    }
    row_bound = __reduce_max_sync(0xffffffffu, row_bound);
    n_row = __reduce_add_sync(0xffffffffu, n_row);
    if (lane == 0 && row_bound != kAbsentKey) atomicMax(&sh.thr, row_bound);
    if (lane == 0 && n_row > 0) atomicAdd(&sh.row_total, n_row);
  }
  // Level 1: the row histogram's bin of the k-th key; unset when fewer than k keys were appended
  // or the bin is that of the absent / NaN keys (no bound from it).
  uint32_t hb = 0xffffffffu;
  if (kPartial && b.hist != nullptr) {  // block-uniform: the row histogram of the appended keys
    uint32_t* hsum = fused_merge_smem + 2 * mcap;  // the region, free until the first compaction
    {  // all kRowHistCopies x 4 loads of a thread in flight at once: one memory round trip
      static_assert(kRowHistBins == 4 * kTopkThreads, "four bins per thread");
      const uint32_t* h = b.hist + r * kRowHistCopies * kRowHistBins + threadIdx.x;
      uint32_t v[4] = {0u, 0u, 0u, 0u};
#pragma unroll
      for (int c = 0; c < kRowHistCopies; ++c) {
#pragma unroll
        for (int q = 0; q < 4; ++q) v[q] += __ldg(h + c * kRowHistBins + q * kTopkThreads);
      }
#pragma unroll
      for (int q = 0; q < 4; ++q) hsum[threadIdx.x + q * kTopkThreads] = v[q];
    }
    if (threadIdx.x == 0) sh.t.bin = 0xffffffffu;
    __syncthreads();
    find_bin(hsum, kBins1, k, sh.t);  // ends synced; bin unset: < k appended
    if (sh.t.bin > 0u) hb = sh.t.bin;  // unset stays 0xffffffff
    // k appended states have keys >= hb << 20: every key below that is beaten k times over.
    if (threadIdx.x == 0 && hb != 0xffffffffu) {
      atomicMax(&sh.thr, (hb << 20) - 1u);
      if (b.rec != nullptr && blockIdx.y == 0) {
        *reinterpret_cast<int4*>(b.rec + r * 4) = make_int4(1, static_cast<int>(hb), sh.t.above, 0);
      }
    }
  }
  __syncthreads();
  // A row with more candidates than the buffer takes beside k winners (pieces that never
  // compacted bound only themselves, if at all): one histogram pass over the keys of all its slots
  // first. The bin of the k-th largest candidate bounds the row (k of its states are in or above
  // it), so the stream below keeps about k + that bin's count instead of filling and compacting
  // the buffer. (On smaller rows the extra pass cost more than it saved: 128 x 32K with 4k-entry
  // pieces, ~8K candidates per row, 252 -> 257 us.)
  if (!kPartial && !bounded && sh.row_total > mcap - k) {  // block-uniform
    merge_row_bound(b, s0, s1, j, 2 * mcap, sh);
  }
  const uint32_t row_bound = sh.thr;
  // Level 1 with records: entries kept from bin hb count in hist2 (before any compaction here,
  // so level 2's exactness test counts every key that could reach its threshold).
  uint32_t* hist2_row = kPartial && b.hist2 != nullptr && hb != 0xffffffffu ? b.hist2 + r * kBins2 : nullptr;
  if (kPartial) {  // share c of C = gridDim.y
    const int64_t ns = s1 - s0, per = detail::div_small(ns + gridDim.y - 1, gridDim.y);
    const int64_t a = s0 + per * blockIdx.y;
    s0 = a < s1 ? a : s1;
    s1 = a + per < s1 ? a + per : s1;
  }
  // An exact unsorted level 2 writes its winners straight to the outputs as they stream in (the
  // buffer still gets them: should the count not come out at k, the usual finish rewrites all).
  const bool direct = !kPartial && exact && !sorted;
  uint32_t* keys = fused_merge_smem;
  int32_t* idx = reinterpret_cast<int32_t*>(fused_merge_smem + mcap);
  uint32_t* region = fused_merge_smem + 2 * mcap;
  for (int64_t sb = s0; sb < s1;) {
    if (warp == 0) {
      const int64_t s = sb + lane;
      const RoundSlot rs = round_headers<true>(b, s, s1, j, sh);
      const bool fits = s < s1 && rs.incl <= mcap - sh.cnt;  // incl grows with lane: a prefix fits
      const int m = __popc(__ballot_sync(0xffffffffu, fits));
      if (lane == 0) sh.round_n = m;
    }
    __syncthreads();
    const int m = sh.round_n;
    if (m == 0) {  // not even one slot fits: compact (leaves mcap - k >= ccap free)
      merge_compact(keys, idx, k, region, k_pad, m_cap, sh);
      continue;
    }
    // The round as one flat list of 16-byte vectors (slot order, then position: state order).
    // Thread t takes vectors 2t, 2t + 1 of each step; a block scan of the counts above the
    // threshold gives every survivor its place, so the buffer stays in state order.
    const uint32_t thr = sh.thr;
    const int nv = sh.slot_vend[m - 1];
    int pos_base = sh.cnt;
    constexpr int kVec = 2;
    for (int v0 = 0; v0 < nv; v0 += kVec * kTopkThreads) {
      uint4 kv[kVec];
      int4 iv[kVec];
      int cntv[kVec];
      int sel = 0;
#pragma unroll
      for (int u = 0; u < kVec; ++u) {
        const int v = v0 + kVec * threadIdx.x + u;
        cntv[u] = 0;
        kv[u] = make_uint4(0u, 0u, 0u, 0u);
        iv[u] = make_int4(0, 0, 0, 0);
        if (v < nv) {
          const RoundVec rv = round_vec(sh, m, v);
          const int64_t off = b.offset(sb + rv.w, j) + 4 * rv.vi;
          kv[u] = __ldg(reinterpret_cast<const uint4*>(b.key + off));
          const int t0 = sh.slot_t0[rv.w];
          if (t0 >= 0) {
            const int i0 = t0 + 4 * rv.vi;
            iv[u] = make_int4(i0, i0 + 1, i0 + 2, i0 + 3);
          } else {
            iv[u] = __ldg(reinterpret_cast<const int4*>(b.idx + off));
          }
          cntv[u] = rv.cnt;
          sel += (cntv[u] > 0 && kv[u].x > thr) + (cntv[u] > 1 && kv[u].y > thr) + (cntv[u] > 2 && kv[u].z > thr) +
                 (cntv[u] > 3 && kv[u].w > thr);
        }
      }
      const int pre = block_exclusive_scan(sel, sh.t);
      if (threadIdx.x == kTopkThreads - 1) sh.total = pre + sel;
      int p = pos_base + pre;
#pragma unroll
      for (int u = 0; u < kVec; ++u) {
        const uint32_t kk[4] = {kv[u].x, kv[u].y, kv[u].z, kv[u].w};
        const int32_t ii[4] = {iv[u].x, iv[u].y, iv[u].z, iv[u].w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (e < cntv[u] && kk[e] > thr) {
            keys[p] = kk[e];
            idx[p] = ii[e];
            // Values decoded from the keys: the fused path's scores only ever existed as keys.
            if (direct) out.write(r, p, ii[e], [&] { return key_to_float(kk[e]); });
            ++p;
            if (hist2_row != nullptr && (kk[e] >> 20) == hb) atomicAdd(hist2_row + ((kk[e] >> 10) & (kBins2 - 1)), 1u);
          }
        }
      }
      __syncthreads();  // sh.total published; the next step's scan rewrites it only after its barriers
      pos_base += sh.total;
    }
    __syncthreads();
    if (threadIdx.x == 0) sh.cnt = pos_base;
    sb += m;
    __syncthreads();
  }
  const int cnt = sh.cnt;
  uint32_t* sel_key = region;
  int* sel_pos = reinterpret_cast<int*>(region + k_pad);
  // Level 1 passes every candidate on while they fit its part of the output (part.ccap >= k): level 2
  // bounds the row from hist2 and filters them. Otherwise a level-1 CTA whose share holds most of
  // the row's best keys (scores rising or falling along the context) runs the full selection alone
  // while the others idle (H200, 1 x 64K on the streaming route: level 1 26.9-27.7 us against
  // 14.2 in random order; the call with rising scores 48.3 -> 37.3 us, falling 61.1 -> 41.1,
  // random order 36.7 -> 36.8).
  const bool keep_all = kPartial && cnt <= part.ccap;
  if (cnt > k && !keep_all) {
    // The winners' state indices go to sel_pos, or straight to the output when it takes indices only.
    const bool to_out = !kPartial && out.indices_only(sorted);
    int* dst = to_out ? out.indices + r * out.indices_ld : sel_pos;
    uint32_t T;
    int need;
    if (bounded && merge_bin_threshold(keys, cnt, k, p2, sh, &T, &need)) {  // block-uniform
      select_in_order_by(keys, cnt, T, need, kTopkWarps, sh.t.warp_gt, sh.t.warp_eq, sel_key, dst,
                         [&](int p) { return idx[p]; });
    } else {
      merge_first_digit_hist(keys, cnt, region);
      select_topk_by(keys, cnt, k, k_pad, m_cap, region, sh.t, dst, [&](int p) { return idx[p]; });
    }
    if (to_out) return;
  }
  const int n_sel = cnt < k || keep_all ? cnt : k;
  if constexpr (kPartial) {
    // Every candidate (in order) or the share's k winners (in order).
    const int64_t ps = r * gridDim.y + blockIdx.y;
    const int64_t o = part.offset(ps, 0);
    const bool selected = cnt > k && !keep_all;
    for (int q = threadIdx.x; q < n_sel; q += kTopkThreads) {
      part.key[o + q] = selected ? sel_key[q] : keys[q];
      part.idx[o + q] = selected ? sel_pos[q] : idx[q];
    }
    if (threadIdx.x == 0) {
      int32_t* h = part.header_of(ps, 0);
      h[0] = n_sel;
      h[1] = 0;
      h[2] = static_cast<int32_t>(row_bound);  // still a bound for the whole row
    }
  } else {
    (void)part;
    if (direct && cnt == k) return;  // every output written by the stream
    if (cnt <= k) {
      // Short rows (every state is a candidate) or exactly k candidates: all of them, in order.
      for (int q = threadIdx.x; q < cnt; q += kTopkThreads) {
        sel_key[q] = keys[q];
        sel_pos[q] = idx[q];
      }
    }
    __syncthreads();
    const int count = len < k ? len : k;
    finish_row<float>(sel_key, sel_pos, count < n_sel ? count : n_sel, k, k_pad, sorted, nullptr, r, out);
  }
}

// The host plans the dynamic part with 1024 bytes left for this (Exec::smem_budget_bytes).
static_assert(kRowHistBins == topk_detail::kBins1, "the row histogram is read with the first-digit find_bin");
static_assert(sizeof(MergeShared) <= 1024, "merge kernel static shared memory exceeds its reserve");

// Dynamic shared memory of the merge kernel for a buffer of mcap entries.
__host__ __device__ inline size_t merge_smem_bytes(int mcap, int k_pad, int m_cap) {
  return (2 * static_cast<size_t>(mcap) + topk_detail::region_words(k_pad, m_cap)) * 4;
}

}  // namespace fused_topk
}  // namespace cuda
}  // namespace dsattn
