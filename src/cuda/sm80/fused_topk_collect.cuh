// Top-k candidate collection for the fused indexer + top-k (SPEC §3.4): the piece of a scoring CTA
// that keeps, per query row, only the states that can still enter the row's top k.
//
// A *piece* is the part of one request (group of <= kMaxPieceRows query rows) that one CTA scores;
// pieces are numbered by `slot` so that a row's pieces, in slot order, cover its states in
// increasing index order. For each (slot, row) the collector keeps a candidate buffer of `ccap`
// entries in global memory and, in shared memory, the row's running threshold `thr` and count. Appends are ordered (ballot + popc), so a
// buffer always lists its states in increasing index order and ties resolve to the smaller index,
// exactly as in topk.
//
//   append: a state enters when key(score) > thr (strict: once k entries >= thr are held, a later
//           state equal to thr has a larger index and loses the tie).
//   compact (buffer cannot take another tile): radix passes (7-bit digits, histogram in shared
//           memory) over the buffer find the k-th key's bin; the winners move, in order, to the
//           front of the buffer. Usually after two passes: every key in or above the k-th key's
//           14-bit bin (k or a few more), thr = the bin's lower bound - 1; with many keys in that
//           bin, after five: exactly k, thr = the k-th key T.
// The buffer holds 4k entries, 6k under the warp-specialized Hopper kernel (when the merge's
// shared memory allows). There a piece of up to 6k states never compacts at all (12K at k = 2048:
// 128 x 32K decode on 132 SMs makes ~10.6K-state pieces) and a longer one compacts only after ~5k
// log-spaced appends (k (1 + ln(n / k)) for n states in random order): a compaction stalls its
// scoring warpgroup for three passes over the buffer, and the merge, which runs on the whole GPU
// afterwards, does that selection instead, its histogram pre-pass bounding such rows first (H200,
// paged_mqa_topk, 4k vs 6k: 128 x 32K 253 -> 240 us, 128 x 64K 461 -> 450 us; scratch 35.4 ->
// 45.6 / 52.6 MB). The tile kernels keep 4k: with 6k the Hopper tile kernel got slower (128 x 32K
// 303 -> 313 us, 128 x 64K 553 -> 572 us).
// The warp-specialized Hopper kernel at 64 padded heads (and its pure variant at 32) skips the
// ordered append while a piece fits its buffer: it writes the key of every state of the piece at
// its position, key 0 outside the row's window, and no indices (WsTopkT in indexer_ws.cuh; header
// word 1 says so).
// Memory per (slot, row): ccap * 8 bytes, independent of the context length. The merge kernel
// (fused_topk_merge in fused_topk_launch.cu) reads each row's pieces and finishes the selection.
//
// Block-size generic (multiples of 32 up to kCollectorMaxWarps warps): the calling kernel owns
// the launch.
#pragma once
#include <cstdint>
#include <type_traits>

#include "common/indexer_work.h"
#include "cuda/common/topk_kernel.cuh"

namespace dsattn {
namespace cuda {
namespace fused_topk {

using topk_detail::kAbsentKey;
using topk_detail::topk_key;

constexpr int kMaxPieceRows = 8;    // rows per piece (next_n <= 8)
// Most states of one scoring tile: the planner's ccap >= kc + kMaxTileStates leaves room for a
// tile after an exact compaction (runs of staged tiles keep their own bound: staged_shape).
constexpr int kMaxTileStates = 512;

// Candidate storage of all pieces: [slots, rows_per_slot, ccap] keys and indices, plus a
// header [slots, rows_per_slot, kHeaderInts] = (count, dense, row bound, 0) written when the
// piece ends. The row bound is a key that at least k of the piece's entries beat outright, so
// no state of the row whose key is <= it can be in the row's top k (0: none known). dense = 0:
// the indices are stored; dense = t0 + 1: entry p is state t0 + p and its index was not written
// (a dense piece of the warp-specialized kernel, see the note below).
constexpr int kHeaderInts = 4;
constexpr int kRowHistBins = 4096;  // row histogram: the top 12 key bits (topk_kernel's first digit)
// Copies of each row's histogram, CTA c adding into copy c % kRowHistCopies: a row's keys crowd a
// few bins, and every scoring CTA of a batch-1 call hits the same ones at about the same time.
constexpr int kRowHistCopies = 8;

struct CollectorBuffers {
  uint32_t* key = nullptr;
  int32_t* idx = nullptr;
  int32_t* header = nullptr;  // [slots, rows_per_slot, kHeaderInts]
  // Optional [rows, kRowHistCopies, kRowHistBins], zeroed before the scoring kernel: every appended
  // key is counted in its row's bin (one of the copies), so the merge knows a bin that k of the row's states reach before it reads a
  // single candidate (few rows split into many short pieces, where no piece finds a bound).
  uint32_t* hist = nullptr;
  // Split merge only (fused_topk_merge.cuh), zeroed with the row histogram: level 1 records per
  // row (valid, hb, above) = the row histogram's bin of the k-th key and the count above it, and
  // counts the key bits 19..10 of every entry it keeps from bin hb in hist2 [rows, 1024]; level 2
  // then knows the k-th key's 22-bit bin before it reads a candidate.
  uint32_t* hist2 = nullptr;
  int32_t* rec = nullptr;  // [rows, 4]
  int ccap = 0;               // entries per (slot, row), a multiple of 4
  int rows_per_slot = 1;
  int k = 0;

  __device__ __forceinline__ int64_t offset(int64_t slot, int j) const {
    return (slot * rows_per_slot + j) * int64_t(ccap);
  }
  __device__ __forceinline__ int32_t* header_of(int64_t slot, int j) const {
    return header + (slot * rows_per_slot + j) * kHeaderInts;
  }
};

struct CollectorRow {
  uint32_t thr;    // appends need key > thr
  uint32_t bound;  // the row bound (see CollectorBuffers)
  int cnt;
};

constexpr int kCollectorMaxWarps = 12;  // the scoring kernels run 2..12 warps (12: the staged tile kernel)
constexpr int kDigitBins = 128;        // compaction radix: 7-bit digits (bits 31..25, 24..18, ...)

// Small on purpose: on Hopper it sits next to two 48 KiB key stages in a CTA that shares its SM
// with another one (N = 1: about 1 KiB was left). The compaction's histogram and scan scratch and
// the append's per-warp counts are never live at the same time (barriers separate them).
struct CollectorShared {
  CollectorRow row[kMaxPieceRows];
  uint32_t bin;
  int above;
  union {
    uint32_t hist[kDigitBins];                          // compaction: digit histogram
    int warp_app[kMaxPieceRows][kCollectorMaxWarps];    // append: appends of (row, warp) this tile
    struct {
      int tot[kCollectorMaxWarps];                      // compaction: per-warp scan totals
    } scan;
  } u;
};
// At N = 1 (H = 64) the Hopper kernel's layout leaves 1104 bytes for the epilogue under half an
// SM's shared memory; more would silently drop paged_mqa_topk to one CTA per SM (1.5x slower).
static_assert(sizeof(CollectorShared) <= 1024, "the collector's shared state must stay small (see above)");

// The threads that run a collector together (topk_kernel.cuh): the whole CTA (the tile kernels)
// or one warpgroup (the warp-specialized Hopper kernel). Every collector function below is called
// by all threads of the group with the same arguments.
using topk_detail::CtaGroup;
using topk_detail::WarpgroupGroup;

// Capacity per (slot, row) for top-k of k: `mult` x k (4 or 6, see the top comment), and at least
// room for k winners plus one full tile.
__host__ __device__ inline int collector_ccap(int k, int mult = 4) {
  const int kc = (k + 3) & ~3;
  return mult * kc > kc + kMaxTileStates ? mult * kc : kc + kMaxTileStates;
}

// Starts a piece: every row empty, threshold 0 (everything enters). Block-wide; ends synced.
template <class G = CtaGroup>
__device__ __forceinline__ void collector_begin(CollectorShared& sh, int rows, const G& grp = G()) {
  const int t = grp.rank();
  if (t < kMaxPieceRows) {
    sh.row[t].thr = kAbsentKey;
    sh.row[t].bound = kAbsentKey;
    sh.row[t].cnt = 0;
  }
  (void)rows;
  grp.sync();
}

// Block-wide ordered append of a score tile: rows [0, rows), states t0 + q for q < n, scores at
// scores[j * ld + q] (shared memory), state t0 + q valid for row j when it lies in
// [win[j].lo, win[j].hi). A step covers kSub x (group size) states (thread t: states t, t + size,
// ...): every warp filters its states of every row against the row's threshold (a ballot per row
// and sub-step), one barrier publishes the per-(row, sub-step, warp) counts, then each warp with
// survivors writes them at the row's count plus the counts before it in state order; warp 0
// advances the counts. The caller guarantees room (collector_reserve) and a barrier between this
// call and the next use of the counts or of warp_app (the indexer's B1 / B2 are).
// kRows: compile-time upper bound on rows (1 for the common N = 1 decode: no per-row guards);
// kSub: sub-steps per barrier (2 for N = 1: a 384-state tile on 256 threads in one step).
template <int kRows, int kSub, class G>
__device__ __forceinline__ void collector_append_rows(const CollectorBuffers& b, CollectorShared& sh, int64_t slot,
                                                      int64_t row0, int rows, int t0, int n, const float* scores,
                                                      int ld, const detail::RowWindow* win, const G& grp) {
  static_assert(kRows * kSub <= kMaxPieceRows, "warp_app holds kMaxPieceRows (row, sub-step) pairs");
  const int tid = grp.rank(), nthreads = grp.size();
  const int lane = tid & 31, warp = tid >> 5;
  const int nwarps = nthreads >> 5;
  const unsigned lt = (1u << lane) - 1u;
  for (int q0 = 0; q0 < n; q0 += kSub * nthreads) {
    if (q0 > 0) grp.sync();  // previous step's counts and warp_app consumed
    unsigned mask[kRows][kSub];
    uint32_t key[kRows][kSub];
    int cnt[kRows];
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      cnt[j] = 0;
#pragma unroll
      for (int v = 0; v < kSub; ++v) {
        mask[j][v] = 0u;
        key[j][v] = 0u;
      }
      if (j < rows) {
        const CollectorRow st = sh.row[j];
        cnt[j] = st.cnt;
#pragma unroll
        for (int v = 0; v < kSub; ++v) {
          const int q = q0 + v * nthreads + tid;
          bool app = false;
          if (q < n && t0 + q >= win[j].lo && t0 + q < win[j].hi) {
            key[j][v] = topk_key(scores[j * ld + q]);
            app = key[j][v] > st.thr;
          }
          mask[j][v] = __ballot_sync(0xffffffffu, app);
          if (lane == 0) sh.u.warp_app[j * kSub + v][warp] = __popc(mask[j][v]);
        }
      }
    }
    grp.sync();
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      if (j >= rows) break;
      int done = 0;  // survivors of the earlier sub-steps (block total)
#pragma unroll
      for (int v = 0; v < kSub; ++v) {
        const int c = lane < nwarps ? sh.u.warp_app[j * kSub + v][lane] : 0;
        if (mask[j][v] != 0u) {  // warp-uniform
          const int before = __reduce_add_sync(0xffffffffu, lane < warp ? c : 0);
          if (mask[j][v] & (1u << lane)) {
            const int pos = cnt[j] + done + before + __popc(mask[j][v] & lt);
            const int64_t base = b.offset(slot, j);
            b.key[base + pos] = key[j][v];
            b.idx[base + pos] = t0 + q0 + v * nthreads + tid;
            if (b.hist != nullptr) {  // one atomic per (warp, bin): a row's keys crowd a few bins
              const uint32_t bin = key[j][v] >> 20;
              const unsigned same = __match_any_sync(mask[j][v], bin);
              const int64_t copy = (row0 + j) * kRowHistCopies + (blockIdx.x & (kRowHistCopies - 1));
              if ((same & lt) == 0u) atomicAdd(b.hist + copy * kRowHistBins + bin, __popc(same));
            }
          }
        }
        done += __reduce_add_sync(0xffffffffu, c);
      }
      if (warp == 0 && lane == 0) sh.row[j].cnt = cnt[j] + done;  // every thread read cnt before the barrier
    }
  }
}

// row0: the global query row of the piece's row 0 (rows of a group are consecutive).
template <class G = CtaGroup>
__device__ __forceinline__ void collector_append_block(const CollectorBuffers& b, CollectorShared& sh, int64_t slot,
                                                       int64_t row0, int rows, int t0, int n, const float* scores,
                                                       int ld, const detail::RowWindow* win, const G& grp = G()) {
  if (rows == 1) {
    collector_append_rows<1, 2>(b, sh, slot, row0, 1, t0, n, scores, ld, win, grp);
  } else {
    collector_append_rows<kMaxPieceRows, 1>(b, sh, slot, row0, rows, t0, n, scores, ld, win, grp);
  }
}

// Exclusive prefix over the block (thread order) of v, and the block total in *total. Up to
// kCollectorMaxWarps warps. Ends synced.
template <class G>
__device__ __forceinline__ int collector_block_scan(int v, CollectorShared& sh, int* total, const G& grp) {
  return topk_detail::group_exclusive_scan(v, sh.u.scan.tot, total, grp);
}

// Warp 0 finds, in the nb-bin digit histogram (scanned from the top), the bin of the k_rem-th
// largest: sh.bin, and sh.above = the count in higher bins.
template <class G>
__device__ __forceinline__ void collector_find_bin(CollectorShared& sh, int nb, int k_rem, const G& grp) {
  const int lane = grp.rank() & 31;
  if ((grp.rank() >> 5) != 0) return;
  const int per = nb >= 32 ? nb / 32 : 1;
  const int hi = nb - 1 - lane * per;  // this lane's highest bin (< 0: none)
  int local = 0;
  for (int q = 0; q < per && hi >= 0; ++q) local += sh.u.hist[hi - q];
  int incl = warp_inclusive_scan(local);
  int cum = incl - local;
  if (hi >= 0 && cum < k_rem && cum + local >= k_rem) {
    for (int q = 0; q < per; ++q) {
      const int h = sh.u.hist[hi - q];
      if (cum + h >= k_rem) {
        sh.bin = hi - q;
        sh.above = cum;
        break;
      }
      cum += h;
    }
  }
}

constexpr int kCompactPer = 8;  // entries per thread and step (two 16-byte loads in flight)

// Loads entries [base, base + kCompactPer) of a buffer (zeros past n). A buffer holds ccap
// entries, a multiple of 4, from a multiple of 4, so a vector that starts below n stays inside it.
template <typename T>
__device__ __forceinline__ void collector_load8(const T* src, int base, int n, T (&v)[kCompactPer]) {
#pragma unroll
  for (int u = 0; u < kCompactPer; u += 4) {
    uint4 x = make_uint4(0u, 0u, 0u, 0u);
    if (base + u < n) x = *reinterpret_cast<const uint4*>(src + base + u);
    v[u] = static_cast<T>(x.x);
    v[u + 1] = static_cast<T>(x.y);
    v[u + 2] = static_cast<T>(x.z);
    v[u + 3] = static_cast<T>(x.w);
  }
}

// Block-wide: compacts row j so that `incoming` more entries fit. Radix passes over 7-bit digits
// (31..25, 24..18, 11..17, 4..10, 0..3) stream the buffer from L2; usually two suffice: after
// the top 14 bits the k-th key's bin is known, and keeping every key in or above that bin
// (threshold = the bin's lower bound - 1) keeps at least k entries and drops only keys that k kept
// ones beat. That is taken when it leaves at most `limit` entries (half of the room above k after
// the incoming tile stays free); otherwise (many keys in that bin: ties) the remaining passes make
// it exact (k entries, ties in position order). The winners move, in order, to the front of the
// buffer: thread t owns runs of kCompactPer consecutive entries, a block scan of the (greater,
// equal) counts gives every winner its place. In place is safe: a winner's place is at most its
// position, and a step's entries are all loaded before the scan's barrier lets any thread write.
// All threads call it with the same arguments (after a group barrier that published the counts).
// Not inlined and register-light: it runs once per ~k appended states, and the Hopper scoring
// kernel it is called from must stay within 128 registers (two CTAs per SM); holding the buffer
// in registers made that kernel spill around the call. How it takes its arguments matters
// (collector_reserve): by reference, it takes the address of the caller's copy, which then lives
// in local memory; by value, the caller keeps the buffers in registers across the call.
template <class G>
__device__ __forceinline__ void collector_compact_body(const CollectorBuffers& b, CollectorShared& sh, int64_t slot,
                                                       int j, int incoming, const G& grp) {
  const int tid = grp.rank(), nthreads = grp.size();
  const CollectorRow st = sh.row[j];
  const int n = st.cnt;
  const int k = b.k;
  uint32_t* keys = b.key + b.offset(slot, j);
  int32_t* idxs = b.idx + b.offset(slot, j);
  const int step = kCompactPer * nthreads;
  const int limit = k + (b.ccap - k - incoming) / 2;
  uint32_t prefix = 0;
  int k_rem = k;
  int kept = k;
  bool approx = false;
  for (int pass = 0; pass < 5; ++pass) {
    const int width = pass < 4 ? 7 : 4;
    const int shift = 25 - 7 * pass < 0 ? 0 : 25 - 7 * pass;  // 25, 18, 11, 4, 0
    const int nb = 1 << width;
    for (int i = tid; i < kDigitBins; i += nthreads) sh.u.hist[i] = 0;
    grp.sync();
    for (int c0 = 0; c0 < n; c0 += step) {  // warp-uniform: hist_add needs all lanes
      const int base = c0 + kCompactPer * tid;
      uint32_t key[kCompactPer], bin[kCompactPer];
      bool act[kCompactPer];
      collector_load8(keys, base, n, key);
#pragma unroll
      for (int u = 0; u < kCompactPer; ++u) {
        act[u] = base + u < n && (pass == 0 || (key[u] >> (shift + width)) == (prefix >> (shift + width)));
        bin[u] = (key[u] >> shift) & (nb - 1);
      }
      topk_detail::hist_add_v(sh.u.hist, bin, act);  // one warp-wide bin test per run
    }
    grp.sync();
    collector_find_bin(sh, nb, k_rem, grp);
    grp.sync();
    prefix |= sh.bin << shift;
    k_rem -= sh.above;
    const int in_bin = static_cast<int>(sh.u.hist[sh.bin]);
    grp.sync();  // sh.bin / sh.above / hist are rewritten by the next pass
    if (pass == 1 && prefix != 0u && (k - k_rem) + in_bin <= limit) {  // block-uniform
      approx = true;
      kept = (k - k_rem) + in_bin;
      break;
    }
  }
  // Exact: keys > T, then the first `need` keys == T. Approximate: keys >= prefix (> T, need 0).
  const uint32_t T = approx ? prefix - 1u : prefix;
  const int need = approx ? 0 : k_rem;
  int g_run = 0, e_run = 0;  // winners of earlier steps: greater / equal to T
  for (int c0 = 0; c0 < n; c0 += step) {
    const int base = c0 + kCompactPer * tid;
    uint32_t key[kCompactPer];
    int32_t idx[kCompactPer];
    collector_load8(keys, base, n, key);
    collector_load8(idxs, base, n, idx);
    int g = 0, e = 0;
#pragma unroll
    for (int u = 0; u < kCompactPer; ++u) {
      g += base + u < n && key[u] > T ? 1 : 0;
      e += base + u < n && key[u] == T ? 1 : 0;
    }
    // Counts per step stay below 2^16 (kCompactPer x at most 384 threads), so both prefixes share one scan.
    int step_total = 0;
    const int packed = collector_block_scan((e << 16) | g, sh, &step_total, grp);
    int g_before = g_run + (packed & 0xffff), e_before = e_run + (packed >> 16);
    g_run += step_total & 0xffff;
    e_run += step_total >> 16;
    if (g + e == 0) continue;
#pragma unroll
    for (int u = 0; u < kCompactPer; ++u) {
      if (base + u >= n) continue;
      const int pos = topk_detail::winner_pos(key[u], T, need, g_before, e_before);
      if (pos >= 0) {
        keys[pos] = key[u];
        idxs[pos] = idx[u];
      }
    }
  }
  grp.sync();
  if (tid == 0) {
    sh.row[j].cnt = kept;
    sh.row[j].thr = T;
    // Approximate: >= k kept keys are > T. Exact: k kept keys are >= T, but a state of another
    // piece with key T may have a smaller index and win the tie, so only keys < T are ruled out.
    sh.row[j].bound = approx ? T : T - 1u;
  }
  grp.sync();
}

template <class G>
__device__ __noinline__ void collector_compact(const CollectorBuffers& b, CollectorShared& sh, int64_t slot, int j,
                                               int incoming, const G& grp) {
  collector_compact_body(b, sh, slot, j, incoming, grp);
}
__device__ __noinline__ inline void collector_compact_wg(const CollectorBuffers b, CollectorShared& sh, int64_t slot,
                                                         int j, int incoming, const WarpgroupGroup grp) {
  collector_compact_body(b, sh, slot, j, incoming, grp);
}

// Block-wide: makes room for `incoming` more entries in each of rows [0, rows). Call between
// barrier-separated append phases. The warp-specialized kernel (one warpgroup) passes by value: by
// reference, its whole epilogue object lived in local memory and was read and written there on
// every tile (H200, paged_mqa_topk 128 x 32K: ~281 -> ~260 us). The tile kernels pass by
// reference: by value they spill more around the call (128 x 32K, Hopper tile kernel: 305 -> 351 us).
template <class G = CtaGroup>
__device__ __forceinline__ void collector_reserve(const CollectorBuffers& b, CollectorShared& sh, int64_t slot,
                                                  int rows, int incoming, const G& grp = G()) {
  for (int j = 0; j < rows; ++j) {
    if (sh.row[j].cnt + incoming > b.ccap) {
      if constexpr (std::is_same<G, WarpgroupGroup>::value) {
        collector_compact_wg(b, sh, slot, j, incoming, grp);
      } else {
        collector_compact(b, sh, slot, j, incoming, grp);
      }
    }
  }
}

// Ends a piece: publishes (count, dense, row bound) of rows [0, rows) (see kHeaderInts). Block-wide.
template <class G = CtaGroup>
__device__ __forceinline__ void collector_end(const CollectorBuffers& b, CollectorShared& sh, int64_t slot, int rows,
                                              const G& grp = G(), int32_t dense = 0) {
  grp.sync();
  const int t = grp.rank();
  if (t < rows) {
    int32_t* h = b.header_of(slot, t);
    h[0] = sh.row[t].cnt;
    h[1] = dense;
    h[2] = static_cast<int32_t>(sh.row[t].bound);
  }
}

}  // namespace fused_topk
}  // namespace cuda
}  // namespace dsattn
