// paged_mqa_topk's resident route on the warp-specialized Hopper kernel (indexer_ws.cuh): every
// score stays in the shared memory of the CTA that computed it, and after its last tile each CTA
// selects the top k of its requests together with the other CTAs that scored them. One kernel
// after the schedule: no candidate buffers, no merge kernels, and no scores in global memory
// (SPEC §3.4: the workspace holds histograms and suffix sums, independent of the context length).
//
// Why: at batch 1 the streaming route's pieces are shorter than k, so its merges read and select
// the whole row after the scoring kernel (H200, 1 x 64K, k = 2048: scoring ~10 us, merges ~20 us,
// three launches after the schedule). Here the select is a radix select over the CTAs' own
// scores: three digits (11, 11, 10 bits of the order-preserving key), each a shared-memory
// histogram per CTA added into the request's histogram in global memory, a barrier among the CTAs
// that hold the request's scores, and every one of them reading that histogram to find the digit
// of the k-th key (rounds stop once the k-th key's bin wins whole). Each CTA also publishes its
// histograms as suffix sums, so after the last round every CTA knows how many winners the CTAs
// before it hold (ties at the k-th key go to the smallest indices) and writes its own in index
// order after them (the order the other routes write), without a barrier.
//
// One request of at most 32K states (its longest row from the device-side lengths, so a graph
// captured for a wider block table takes it too; the plan's kResidentFastMaxWidth) selects in two
// grid barriers instead (select_fast): a grid histogram of the keys' top 16 bits,
// then the keys of the k-th key's 16-bit bin gathered into a list that every CTA reads; it falls
// back to the rounds by itself where that list would be too long.
//
// Requests (groups of N rows). The schedule deals the (group, unit) positions of all requests to
// the partitions in order, so a CTA (partitions 3 c .. 3 c + 2) holds one contiguous run: the
// groups strictly inside it are its alone (selected in shared memory, no barrier), and at most its
// first and last groups are shared with other CTAs. A shared group's participants are the
// non-empty CTAs from the one holding its first unit to the one holding its last (found from the
// schedule's partition starts); they meet at a barrier word of the group's own, so the groups'
// selects run side by side. Each CTA takes its (up to two) shared groups together, round by round,
// arriving at both barriers before it waits at either: no CTA waits on a CTA that waits on it.
// The groups inside a CTA follow one at a time.
//
// Requirements the plan (fused_topk_launch.cu) checks: unsorted output, every CTA resident at once
// (cooperative launch, one CTA per SM, at most kMaxCtas), pieces of at most `cap` states (the
// schedule's bound with the rows' lengths capped at the block table, IndexerWork::len_cap), and
// the ring's shared memory large enough for the select's histograms once the scoring is over.
#pragma once
#include "common/indexer_work.h"
#include "cuda/common/topk_grid.cuh"
#include "cuda/sm90/indexer_ws.cuh"

namespace dsattn {
namespace cuda {
namespace resident {

constexpr int kBins = 2048;   // digits 0 and 1: key bits 31..21 and 20..10
constexpr int kBins2 = 1024;  // digit 2: key bits 9..0
constexpr int kRounds = 3;
constexpr int kFindThreads = 256;  // threads that scan a histogram (kBins / 8 bins each)
constexpr int kSlots = 2;          // groups a CTA selects at once: its first and last
constexpr int kMaxCtas = 256;      // grid bound (the partition starts kept in shared memory)
// One request's two-barrier select (select_fast): a grid histogram of the keys' top 16 bits in
// global memory (kFineBins per row, found through kCoarseBins totals of its top 8), then the keys
// of the k-th key's 16-bit bin gathered into a list that every CTA reads; ties at the exact
// threshold are ranked by index when at most kTieCap of them share it.
constexpr int kFineBins = 65536;
constexpr int kCoarseBins = 256;
constexpr int kListCapMax = 4096;  // keys in the k-th key's 16-bit bin that the fast select takes
constexpr int kListCapMin = 256;   // below this the plan leaves the fast select off
constexpr int kTieCap = 384;
static_assert(kCoarseBins <= kBins, "select_fast's coarse histograms fit where select_one's histograms do");
// The select runs on the consumer warpgroups alone, synchronized by named barrier kSelBarrier (the
// warpgroups' own are 1..3): the producer warps have nothing to select, and leave.
constexpr int kSelThreads = 128 * kWsConsumers;
constexpr int kSelBarrier = 1 + kWsConsumers;
__device__ __forceinline__ void sel_sync() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kSelBarrier), "n"(kSelThreads) : "memory");
}
struct SelGroup {
  __device__ __forceinline__ int rank() const { return static_cast<int>(threadIdx.x); }
  __device__ __forceinline__ int size() const { return kSelThreads; }
  __device__ __forceinline__ void sync() const { sel_sync(); }
};

// A warpgroup's scratch: a 16-byte header {segments}, its share of the CTA's partition starts
// (starts_per_wg (group, unit) pairs), its segment table (one {group, first state, position,
// states} per group its piece touches, in order), then its keys [rows][cap] by position in the
// piece.
struct Scratch {
  static constexpr size_t kHeader = 16;  // one request (WsResident): {first state, states}, then the keys
  __host__ __device__ static int starts_per_wg(int grid) { return (grid + 1 + kWsConsumers - 1) / kWsConsumers; }
  __host__ __device__ static int max_segs(int cap) { return cap / detail::kIndexerUnit + 1; }
  __host__ __device__ static size_t starts_off() { return kHeader; }
  __host__ __device__ static size_t segs_off(int grid) {
    return kHeader + (size_t(starts_per_wg(grid)) * 8 + 15) / 16 * 16;
  }
  __host__ __device__ static size_t keys_off(int grid, int cap) { return segs_off(grid) + size_t(max_segs(cap)) * 16; }
  __host__ __device__ static size_t bytes(int grid, int rows, int cap) {
    return keys_off(grid, cap) + size_t(rows) * cap * 4;
  }
};

// Global scratch (paged_mqa_topk's workspace). `bar` and `hist` are zeroed by the schedule kernel
// before every call (launch_indexer_schedule's zero range); `suf` is written before it is read.
struct Buffers {
  uint32_t* bar = nullptr;   // [groups] barrier words
  uint32_t* hist = nullptr;  // [groups][kRounds][rows][kBins] each shared group's histograms
  uint32_t* suf = nullptr;   // [kRounds][ids][rows][kBins] suffix sums of CTA c's histograms of
                             // group g at id c + g (distinct for the CTA-group pairs of one run
                             // of positions; one request: id c)
  int ids = 0;               // grid + groups
  int rows = 0;              // rows per group (N; varlen: 1)
  int cap = 0;               // states per piece (a warpgroup's scratch: rows x cap keys)
  int k = 0;
  topk_detail::TopkOutputs out;
  // One request (WsResident), select_fast; list_cap = 0 turns it off. fine, coarse and lcount are
  // zeroed with bar and hist; cnt and list are written before they are read.
  uint32_t* fine = nullptr;    // [rows][kFineBins] grid histogram of key >> 16
  uint32_t* coarse = nullptr;  // [rows][kCoarseBins] grid histogram of key >> 24
  uint32_t* lcount = nullptr;  // [rows] entries appended to list
  uint32_t* cnt = nullptr;     // [rows][grid] CTA c's winners outside the k-th key's 16-bit bin
  uint2* list = nullptr;       // [rows][list_cap] {key, state} of the keys in that bin
  int list_cap = 0;
  // select_fast runs when the request's longest row (device-side lengths, capped at the block
  // table) has at most this many states; the three rounds otherwise. Decided by every CTA alike
  // from the same lengths, so a graph captured for a wide block table still takes it for short
  // requests.
  int fast_max_len = 0;
};

// Per-row outcome of the rounds. Selected: key != 0 and
//   kAll:  every key (the row has at most k keys)
//   kGe:   key >= t (the k-th key's bin was taken whole)
//   kTies: key > t, or key == t among the first `ties` such keys of the row (index order)
enum Mode : int { kActive = 0, kAll = 1, kGe = 2, kTies = 3 };
struct RowState {
  uint32_t prefix;   // digits chosen so far (in place)
  uint32_t need;     // winners still to find inside the prefix
  uint32_t total;    // keys of the row (round 0)
  uint32_t ties;     // kTies: ties at the threshold taken over all the group's CTAs
  uint32_t bin[kRounds];
  int last;          // the round that decided the row
  int mode;
};
// A group this CTA selects: its participants are the non-empty CTAs in [first, last] (n of them).
struct SlotInfo {
  int g, first, last, n, rows;
};
// select_fast's outcome of a row's grid histograms: the 16-bit bin of the k-th key.
struct FastRow {
  uint32_t b16;    // key >> 16 of the k-th key
  uint32_t above;  // keys of the row in higher bins
  uint32_t count;  // keys of the row in the bin
  uint32_t total;  // keys of the row (at most k: every key wins)
};
struct Shared {
  RowState row[kSlots][kIdxMaxRows];
  FastRow fr[kIdxMaxRows];
  uint32_t fsel[8];
  SlotInfo slot[kSlots];
  uint32_t wsum[kFindThreads / 32];
  int warp_tot[32];
  int quota[kSlots][kIdxMaxRows];   // kTies: ties this CTA takes
  int offset[kSlots][kIdxMaxRows];  // this CTA's first output position
};
constexpr size_t kSharedBytes = (sizeof(Shared) + 15) / 16 * 16;
// Shared memory the select needs (at the ring's start, once the scoring is over): `slots` groups
// at a time (kSlots with several requests, else 1).
__host__ __device__ constexpr size_t select_smem_bytes(int rows, int slots) {
  return kSharedBytes + size_t(slots) * rows * kBins * 4;
}

__device__ __forceinline__ uint32_t digit(uint32_t key, int r) {
  return r == 0 ? key >> 21 : (r == 1 ? (key >> 10) & 0x7ffu : key & 0x3ffu);
}
// Whether `key` has the digits chosen in rounds before r.
__device__ __forceinline__ bool in_prefix(uint32_t key, uint32_t prefix, int r) {
  return r == 0 || (key >> (r == 1 ? 21 : 10)) == (prefix >> (r == 1 ? 21 : 10));
}
__device__ __forceinline__ int round_bins(int r) { return r < 2 ? kBins : kBins2; }
__device__ __forceinline__ int round_shift(int r) { return r == 0 ? 21 : (r == 1 ? 10 : 0); }

// A group's barrier among its n participants: the bit-31 flip of a counter whose low 31 bits start
// at 0 (zeroed before the kernel; every barrier adds exactly 2^31: the first participant adds
// 2^31 - (n - 1), the others 1, so they end at 0 again). Arrive and wait are apart, so a CTA
// arrives at both of its groups' barriers before it waits at either. By thread 0, after a
// sel_sync that orders the select threads' writes before its release add; the acquire load
// orders the other CTAs' writes before the sel_sync that follows the wait.
__device__ __forceinline__ uint32_t bar_arrive(uint32_t* bar, bool first, int n) {
  const uint32_t nb = first ? 0x80000000u - static_cast<uint32_t>(n - 1) : 1u;
  uint32_t old;
  asm volatile("atom.add.release.gpu.global.u32 %0, [%1], %2;\n" : "=r"(old) : "l"(bar), "r"(nb) : "memory");
  return old;
}
__device__ __forceinline__ void bar_wait(const uint32_t* bar, uint32_t old) {
  uint32_t v;
  do {
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(bar) : "memory");
  } while (((v ^ old) & 0x80000000u) == 0u);
}

// One request: a barrier over every CTA of the grid (the first adds 2^31 - (grid - 1)).
__device__ __forceinline__ void grid_sync(uint32_t* bar) {
  sel_sync();
  if (threadIdx.x == 0) bar_wait(bar, bar_arrive(bar, blockIdx.x == 0, static_cast<int>(gridDim.x)));
  sel_sync();
}

// The CTA's keys of one group: its segment in each piece w = 0, 1, 2 (partitions 3c + w,
// consecutive runs of states), one after another, so position i of the concatenation runs in
// state order.
struct CtaKeys {
  const uint32_t* keys[kWsConsumers];
  int lo[kWsConsumers], n[kWsConsumers];
  int cap;
  __device__ __forceinline__ int total() const { return n[0] + n[1] + n[2]; }
  __device__ __forceinline__ uint32_t key(int row, int i) const {
    if (i < n[0]) return keys[0][row * cap + i];
    i -= n[0];
    if (i < n[1]) return keys[1][row * cap + i];
    return keys[2][row * cap + i - n[1]];
  }
  __device__ __forceinline__ int32_t state(int i) const {
    if (i < n[0]) return lo[0] + i;
    i -= n[0];
    if (i < n[1]) return lo[1] + i;
    return lo[2] + i - n[1];
  }
};

// The CTA's view of its warpgroups' scratch (after the scoring).
struct CtaScratch {
  const uint8_t* base;
  size_t bytes;  // per warpgroup
  int grid, cap;
  __device__ __forceinline__ const uint8_t* wg(int w) const { return base + w * bytes; }
  __device__ __forceinline__ int nseg(int w) const { return reinterpret_cast<const int*>(wg(w))[0]; }
  __device__ __forceinline__ int4 seg(int w, int s) const {
    return reinterpret_cast<const int4*>(wg(w) + Scratch::segs_off(grid))[s];
  }
  // Partition 3c's first (group, unit); c = grid gives (groups, 0).
  __device__ __forceinline__ int2 start(int c) const {
    const int per = Scratch::starts_per_wg(grid);
    return reinterpret_cast<const int2*>(wg(c / per) + Scratch::starts_off())[c % per];
  }
  // One request (WsResident): each warpgroup's header {first state, states}, then its keys.
  __device__ __forceinline__ CtaKeys keys_single() const {
    CtaKeys ck;
    ck.cap = cap;
#pragma unroll
    for (int w = 0; w < kWsConsumers; ++w) {
      const int* h = reinterpret_cast<const int*>(wg(w));
      ck.lo[w] = h[0];
      ck.n[w] = h[1];
      ck.keys[w] = reinterpret_cast<const uint32_t*>(wg(w) + Scratch::kHeader);
    }
    return ck;
  }
  __device__ __forceinline__ CtaKeys keys_of(int g) const {
    CtaKeys ck;
    ck.cap = cap;
#pragma unroll
    for (int w = 0; w < kWsConsumers; ++w) {
      ck.keys[w] = nullptr;
      ck.lo[w] = 0;
      ck.n[w] = 0;
      const int ns = nseg(w);
      for (int s = 0; s < ns; ++s) {
        const int4 e = seg(w, s);  // {group, first state, position, states}
        if (e.x != g) continue;
        ck.keys[w] = reinterpret_cast<const uint32_t*>(wg(w) + Scratch::keys_off(grid, cap)) + e.z;
        ck.lo[w] = e.y;
        ck.n[w] = e.w;
        break;
      }
    }
    return ck;
  }
};

__device__ __forceinline__ bool pos_le(int2 a, int2 b) { return a.x < b.x || (a.x == b.x && a.y <= b.y); }

// Group g's participants, by one warp (lane 0 stores *si): the CTA holding its first unit, the
// last CTA starting in a group <= g, and the non-empty CTAs between them (inclusive).
__device__ __forceinline__ void slot_info(const CtaScratch& cs, int g, int rows, SlotInfo* si) {
  const int lane = threadIdx.x & 31, C = cs.grid;
  int first = 0, last = 0, n = 0;
  // first / last: the largest c whose start is <= (g, 0) / in a group <= g
  for (int c0 = 0; c0 <= C; c0 += 32) {
    const int c = c0 + lane;
    const int2 a = c <= C ? cs.start(c) : make_int2(0x7fffffff, 0);
    const unsigned f = __ballot_sync(0xffffffffu, c <= C && pos_le(a, make_int2(g, 0)));
    const unsigned l = __ballot_sync(0xffffffffu, c <= C && a.x <= g);
    if (f) first = c0 + 31 - __clz(f);
    if (l) last = c0 + 31 - __clz(l);
  }
  for (int c0 = first; c0 <= last; c0 += 32) {
    const int c = c0 + lane;
    bool nz = false;
    if (c <= last) {
      const int2 a = cs.start(c), b = cs.start(c + 1);
      nz = a.x != b.x || a.y != b.y;
    }
    n += __popc(__ballot_sync(0xffffffffu, nz));
  }
  if (lane == 0) *si = SlotInfo{g, first, last, n, rows};
}

// Whether a key wins outright (kTies: its ties at the threshold are counted apart).
__device__ __forceinline__ bool wins(uint32_t key, const RowState& rs) {
  if (key == topk_detail::kAbsentKey) return false;
  if (rs.mode == kAll) return true;
  if (rs.mode == kGe) return key >= rs.prefix;
  return key > rs.prefix;
}

// Inclusive suffix sum of v over the lanes >= this one; lane 0 stores the warp's total to *wtot.
__device__ __forceinline__ uint32_t warp_suffix_sum(uint32_t v, uint32_t* wtot) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const uint32_t y = __shfl_down_sync(0xffffffffu, v, off);
    if (lane + off < 32) v += y;
  }
  if (lane == 0) *wtot = v;
  return v;
}

// Round r of one row, threads < kFindThreads, bins [per * tid, per * tid + per) each: this CTA's
// histogram `lh` as suffix sums to `suf` (entry b: keys of the row's prefix whose digit is >= b),
// and its non-zero bins added into the group's histogram `gh`. By the select's threads.
__device__ __forceinline__ void publish(const uint32_t* lh, int r, uint32_t* suf, uint32_t* gh, Shared& sh) {
  const int tid = threadIdx.x, warp = tid >> 5;
  const int per = round_bins(r) / kFindThreads;  // 8 or 4
  uint32_t h[8], x = 0, t = 0;
  if (tid < kFindThreads) {
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      h[q] = q < per ? lh[tid * per + q] : 0u;
      t += h[q];
    }
    x = warp_suffix_sum(t, &sh.wsum[warp]);
  }
  sel_sync();
  if (tid < kFindThreads) {
    uint32_t acc = x - t;  // keys in the bins after this thread's
#pragma unroll
    for (int w = 0; w < kFindThreads / 32; ++w) acc += w > warp ? sh.wsum[w] : 0u;
    uint32_t sv[8];
#pragma unroll
    for (int q = 7; q >= 0; --q) {
      acc += h[q];
      sv[q] = acc;
      if (q < per && h[q] != 0u) atomicAdd(&gh[tid * per + q], h[q]);
    }
    uint4* dst = reinterpret_cast<uint4*>(suf + tid * per);
    dst[0] = make_uint4(sv[0], sv[1], sv[2], sv[3]);
    if (per == 8) dst[1] = make_uint4(sv[4], sv[5], sv[6], sv[7]);
  }
  sel_sync();  // sh.wsum is reused
}

// Round r's histogram of a row (threads < kFindThreads): the bin holding the need-th largest key
// (round 0: need = min(k, keys of the row)); updates rs. `local`: the histogram is this CTA's own
// in shared memory (a group no other CTA holds), else the group's in global memory. By the
// select's threads.
__device__ __forceinline__ void find_bin(const uint32_t* gh, bool local, int r, int k, RowState& rs, Shared& sh) {
  const int tid = threadIdx.x, warp = tid >> 5;
  const int per = round_bins(r) / kFindThreads;
  uint32_t h[8];
  uint32_t s = 0, x = 0;
  const uint32_t need_in = rs.need;  // read before anyone writes it (barrier below)
  if (tid < kFindThreads) {
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      h[q] = q < per ? (local ? gh[tid * per + q] : __ldcg(gh + tid * per + q)) : 0u;
      s += h[q];
    }
    x = warp_suffix_sum(s, &sh.wsum[warp]);
  }
  sel_sync();
  if (tid < kFindThreads) {
    uint32_t above = x - s, total = 0;
#pragma unroll
    for (int w = 0; w < kFindThreads / 32; ++w) {
      total += sh.wsum[w];
      if (w > warp) above += sh.wsum[w];
    }
    uint32_t need = need_in;
    if (r == 0) {
      if (total <= static_cast<uint32_t>(k)) {  // every key wins (also an empty row)
        if (tid == 0) {
          rs.total = total;
          rs.need = total;
          rs.last = 0;
          rs.mode = kAll;
        }
        need = 0;  // no boundary thread
      } else {
        need = static_cast<uint32_t>(k);
        if (tid == 0) rs.total = total;
      }
    }
    if (need > 0 && above < need && need <= above + s) {
      uint32_t acc = above;
      for (int q = per - 1; q >= 0; --q) {
        if (acc + h[q] >= need) {
          const uint32_t bin = static_cast<uint32_t>(tid * per + q);
          const uint32_t rem = need - acc;
          rs.prefix |= bin << round_shift(r);
          rs.need = rem;
          rs.bin[r] = bin;
          if (rem == h[q]) {  // the whole bin wins: every key >= its smallest key
            rs.last = r;
            rs.mode = kGe;
          } else if (r == kRounds - 1) {  // prefix is the k-th key itself; rem of its h[q] ties win
            rs.ties = rem;
            rs.last = r;
            rs.mode = kTies;
          }
          break;
        }
        acc += h[q];
      }
    }
  }
  sel_sync();
}

// Winners of the CTA whose suffix sums of this group are at `id` (row j): its keys above the
// threshold, and `ties`: its keys at it, from the suffix sums it published in the rounds up to the
// row's last.
__device__ __forceinline__ void cta_winners(const Buffers& b, int64_t id, int j, const RowState& rs, int* above,
                                            int* ties) {
  const int64_t R = b.rows;
  auto suf = [&](int r, uint32_t bin) -> int {
    if (bin >= static_cast<uint32_t>(round_bins(r))) return 0;
    return static_cast<int>(__ldcg(b.suf + ((int64_t(r) * b.ids + id) * R + j) * kBins + bin));
  };
  *ties = 0;
  if (rs.mode == kAll) {
    *above = suf(0, 0);
    return;
  }
  int a = 0;
  for (int r = 0; r < rs.last; ++r) a += suf(r, rs.bin[r] + 1);  // a larger digit in an earlier round
  const uint32_t bl = rs.bin[rs.last];
  const int after = suf(rs.last, bl + 1);
  if (rs.mode == kGe) {
    a += suf(rs.last, bl);
  } else {
    a += after;
    *ties = suf(rs.last, bl) - after;
  }
  *above = a;
}

// Row j's output offset and tie quota in this CTA (thread 0 stores them): `above` / `ties` are
// the winners / ties at the threshold of the earlier CTAs that this thread counted (summed over
// the select's threads); `lh`: this CTA's histogram of the row's last round (its own ties).
__device__ __forceinline__ void row_offset(int above, int ties, const RowState& rs, const uint32_t* lh, int* quota_out,
                                           int* offset_out, Shared& sh) {
  int above_tot = 0, ties_tot = 0;
  topk_detail::group_exclusive_scan(above, sh.warp_tot, &above_tot, SelGroup{});
  if (rs.mode == kTies) topk_detail::group_exclusive_scan(ties, sh.warp_tot, &ties_tot, SelGroup{});
  if (threadIdx.x == 0) {
    int quota = 0, taken = 0;
    if (rs.mode == kTies) {
      const int mine = static_cast<int>(lh[rs.bin[kRounds - 1]]);  // round 2's histogram
      const int left = static_cast<int>(rs.ties) - ties_tot;
      quota = left < 0 ? 0 : (left > mine ? mine : left);
      taken = ties_tot < static_cast<int>(rs.ties) ? ties_tot : static_cast<int>(rs.ties);
    }
    *quota_out = quota;
    *offset_out = above_tot + taken;
  }
}

// This CTA's winners of row j (output row `row`) in index order, each thread a contiguous run
// [i0, i1) of its keys: the keys above the threshold and (kTies) its first `quota` ties, from
// output position `offset` on (exclusive scans of the ties and the winners); `pad`: then -1 after
// the row's winners (min(k, keys of the row) of them), as the row's last CTA.
__device__ __forceinline__ void write_row(const Buffers& buf, const CtaKeys& ck, int i0, int i1, int j, int64_t row,
                                          const RowState rs, int quota, int offset, bool pad, Shared& sh) {
  int tie0 = 0, tot = 0;
  if (rs.mode == kTies) {
    int t = 0;
    for (int i = i0; i < i1; ++i) t += ck.key(j, i) == rs.prefix ? 1 : 0;
    tie0 = topk_detail::group_exclusive_scan(t, sh.warp_tot, &tot, SelGroup{});
  }
  int mine = 0;
  for (int i = i0, tr = tie0; i < i1; ++i) {
    const uint32_t key = ck.key(j, i);
    const bool tie = rs.mode == kTies && key == rs.prefix;
    mine += (wins(key, rs) || (tie && tr < quota)) ? 1 : 0;
    tr += tie ? 1 : 0;
  }
  int pos = topk_detail::group_exclusive_scan(mine, sh.warp_tot, &tot, SelGroup{}) + offset;
  for (int i = i0, tr = tie0; i < i1; ++i) {
    const uint32_t key = ck.key(j, i);
    const bool tie = rs.mode == kTies && key == rs.prefix;
    if (wins(key, rs) || (tie && tr < quota)) {
      buf.out.write(row, pos, ck.state(i), [&] { return topk_detail::key_to_float(key); });
      ++pos;
    }
    tr += tie ? 1 : 0;
  }
  if (pad) {
    const int nwin = rs.mode == kAll ? static_cast<int>(rs.total) : buf.k;
    for (int q = nwin + static_cast<int>(threadIdx.x); q < buf.k; q += kSelThreads) {
      buf.out.write(row, q, -1, [] { return 0.f; });
    }
  }
}

// A 256-bin histogram, one bin per thread < kCoarseBins (`hv`; larger bins hold larger keys): the
// bin holding the need-th largest key (0 < need <= total), the keys in higher bins and the bin's
// count go to sh.fsel[0..2]; *total gets the sum. By the select's threads; ends synced (sh.fsel
// may be read until the next call's first barrier).
__device__ __forceinline__ void find256(uint32_t hv, uint32_t need, uint32_t* total, Shared& sh) {
  const int tid = threadIdx.x, warp = tid >> 5;
  uint32_t x = 0;
  if (tid < kCoarseBins) x = warp_suffix_sum(hv, &sh.wsum[warp]);
  sel_sync();
  uint32_t tot = 0, above = x - hv;
#pragma unroll
  for (int w = 0; w < kCoarseBins / 32; ++w) {
    tot += sh.wsum[w];
    if (w > warp) above += sh.wsum[w];
  }
  if (tid < kCoarseBins && need > 0u && above < need && need <= above + hv) {
    sh.fsel[0] = static_cast<uint32_t>(tid);
    sh.fsel[1] = above;
    sh.fsel[2] = hv;
  }
  sel_sync();
  *total = tot;
}

// The select of one request in two grid barriers, by the select's threads (every CTA of the grid;
// empty ones publish zeros):
//   1. each CTA adds its keys into the grid histograms: key >> 16 straight into `fine` (global
//      atomics), key >> 24 through shared memory into `coarse`;
//   -- grid barrier;
//   2. every CTA finds each row's 16-bit bin b of the k-th key: its 8-bit bin from the coarse
//      totals, then the 256 fine bins inside it;
//   3. each CTA publishes its count of keys above b (cnt) and appends its keys in b to the row's
//      list (key, state);
//   -- grid barrier;
//   4. every CTA reads the list (at most list_cap keys) and finds the exact threshold T in it and,
//      when only some of the keys equal to T win, the last winning state: a list of at most one
//      key per select thread is ranked directly (larger key, then smaller state, one entry per
//      thread); a longer one goes through two 8-bit histograms, then the ties ranked by state.
//      Its output offset is the counts of the CTAs before it plus the list's winners at lower
//      states; then it writes its winners in index order.
// The select_one below takes three rounds of 2048- and 1024-bin histograms published as suffix
// sums, each round's steps ~1-3 us (H200, 1 x 64K, stamps in BENCHMARKS.md). Returns false,
// alike in every CTA (every decision reads the same global data), when a row's bin b holds more
// than list_cap keys or more than kTieCap keys tie at T and not all of them win: select_one then
// runs from the start and writes every row again.
__device__ __forceinline__ bool select_fast(const Buffers& buf, const CtaScratch& cs, uint32_t* loc, Shared& sh) {
  const int R = buf.rows, tid = threadIdx.x, nt = kSelThreads;
  const int C = blockIdx.x, G = gridDim.x;
  const uint32_t k = static_cast<uint32_t>(buf.k);
  const CtaKeys ck = cs.keys_single();
  const int n = ck.total();
  // 1. The grid histograms.
  for (int i = tid; i < R * kCoarseBins; i += nt) loc[i] = 0u;
  sel_sync();
  for (int j = 0; j < R; ++j) {
    uint32_t* fine = buf.fine + int64_t(j) * kFineBins;
    uint32_t* lc = loc + j * kCoarseBins;
    for (int i = tid; i < n; i += nt) {
      const uint32_t key = ck.key(j, i);
      if (key == topk_detail::kAbsentKey) continue;
      atomicAdd(fine + (key >> 16), 1u);
      atomicAdd(lc + (key >> 24), 1u);
    }
  }
  sel_sync();
  for (int i = tid; i < R * kCoarseBins; i += nt) {
    if (loc[i] != 0u) atomicAdd(buf.coarse + i, loc[i]);
  }
  grid_sync(buf.bar);
  // 2. Each row's 16-bit bin of the k-th key.
  bool fits = true;
  for (int j = 0; j < R; ++j) {
    uint32_t tot = 0, t2 = 0;
    find256(tid < kCoarseBins ? __ldcg(buf.coarse + j * kCoarseBins + tid) : 0u, k, &tot, sh);
    if (tot <= k) {  // every key wins (also an empty row); uniform
      if (tid == 0) sh.fr[j] = FastRow{0u, 0u, 0u, tot};
      continue;
    }
    const uint32_t cb = sh.fsel[0], ca = sh.fsel[1];
    const uint32_t* fine = buf.fine + int64_t(j) * kFineBins + cb * kCoarseBins;
    find256(tid < kCoarseBins ? __ldcg(fine + tid) : 0u, k - ca, &t2, sh);
    const FastRow fr{cb * kCoarseBins + sh.fsel[0], ca + sh.fsel[1], sh.fsel[2], tot};
    if (tid == 0) sh.fr[j] = fr;
    fits = fits && fr.count <= static_cast<uint32_t>(buf.list_cap);
  }
  if (!fits) return false;
  sel_sync();  // sh.fr
  // 3. This CTA's keys above the bin (counted) and in it (appended to the row's list, one global
  // add per warp step that has any: fr.count of them over the grid, at most list_cap).
  const int lane = tid & 31;
  for (int j = 0; j < R; ++j) {
    const FastRow fr = sh.fr[j];
    const bool all = fr.total <= k;
    uint2* list = buf.list + int64_t(j) * buf.list_cap;
    int a = 0;
    for (int base = tid & ~31; base < n; base += nt) {  // warp-uniform trips (the ballot)
      const int i = base + lane;
      const uint32_t key = i < n ? ck.key(j, i) : topk_detail::kAbsentKey;
      const uint32_t d = key >> 16;
      const bool present = key != topk_detail::kAbsentKey;
      a += present && (all || d > fr.b16) ? 1 : 0;
      const bool in = present && !all && d == fr.b16;
      const unsigned m = __ballot_sync(0xffffffffu, in);
      if (m != 0u) {
        const int lead = __ffs(m) - 1;
        uint32_t pos = 0;
        if (lane == lead) pos = atomicAdd(buf.lcount + j, static_cast<uint32_t>(__popc(m)));
        pos = __shfl_sync(0xffffffffu, pos, lead) + static_cast<uint32_t>(__popc(m & ((1u << lane) - 1u)));
        if (in) list[pos] = make_uint2(key, static_cast<uint32_t>(ck.state(i)));
      }
    }
    int tot = 0;
    topk_detail::group_exclusive_scan(a, sh.warp_tot, &tot, SelGroup{});
    if (tid == 0) buf.cnt[int64_t(j) * G + C] = static_cast<uint32_t>(tot);
  }
  grid_sync(buf.bar);
  // 4. Thresholds, offsets, winners.
  uint2* L = reinterpret_cast<uint2*>(loc);     // [list_cap] the row's list
  uint32_t* hist = loc + 2 * buf.list_cap;      // [kCoarseBins]
  uint32_t* tie = hist + kCoarseBins;           // [kTieCap] states of the keys equal to T
  const int chunk = (n + nt - 1) / nt;
  const int i0 = tid * chunk < n ? tid * chunk : n, i1 = i0 + chunk < n ? i0 + chunk : n;
  const int32_t s_lo = n > 0 ? ck.state(0) : 0, s_hi = n > 0 ? ck.state(n - 1) : -1;  // this CTA's states
  for (int j = 0; j < R; ++j) {
    const FastRow fr = sh.fr[j];
    int pre = 0;  // winners of the CTAs before this one, outside the list
    topk_detail::group_exclusive_scan(tid < C ? static_cast<int>(__ldcg(buf.cnt + int64_t(j) * G + tid)) : 0,
                                      sh.warp_tot, &pre, SelGroup{});
    RowState rs{0u, 0u, fr.total, 0u, {0u, 0u, 0u}, 0, kAll};
    int quota = 0, before = 0;
    const int c16 = static_cast<int>(fr.count);
    const uint32_t need = k - fr.above;  // winners in the list: 1..c16 (when fr.total > k)
    const uint2* list = buf.list + int64_t(j) * buf.list_cap;
    if (fr.total > k && c16 <= nt) {
      // A short list (the usual case: a few dozen keys): one key per thread, ranked among all
      // (larger key first, then smaller state); the need-th is the boundary (T, last). Winners:
      // key > T, or key == T at a state <= last. Offsets and this CTA's winning ties in one scan.
      const uint2 v = tid < c16 ? __ldcg(list + tid) : make_uint2(0u, 0u);
      if (tid < c16) L[tid] = v;
      sel_sync();
      if (tid < c16) {
        uint32_t r = 0;
        for (int f = 0; f < c16; ++f) {
          const uint2 u = L[f];
          r += (u.x > v.x || (u.x == v.x && u.y < v.y)) ? 1u : 0u;
        }
        if (r == need - 1u) {
          sh.fsel[0] = v.x;
          sh.fsel[1] = v.y;
        }
      }
      sel_sync();
      const uint32_t T = sh.fsel[0];
      const int32_t last = static_cast<int32_t>(sh.fsel[1]);
      const int32_t st = static_cast<int32_t>(v.y);
      const bool win = tid < c16 && (v.x > T || (v.x == T && st <= last));
      const int packed = (win && st < s_lo ? 1 : 0) | ((win && v.x == T && st >= s_lo && st <= s_hi ? 1 : 0) << 16);
      int tot = 0;
      topk_detail::group_exclusive_scan(packed, sh.warp_tot, &tot, SelGroup{});
      before = tot & 0xffff;
      quota = tot >> 16;
      rs.prefix = T;
      rs.mode = kTies;
    } else if (fr.total > k) {
      for (int e = tid; e < c16; e += nt) L[e] = __ldcg(list + e);
      if (tid < kCoarseBins) hist[tid] = 0u;
      sel_sync();
      for (int e = tid; e < c16; e += nt) atomicAdd(hist + ((L[e].x >> 8) & 0xffu), 1u);
      sel_sync();
      uint32_t t = 0;
      find256(tid < kCoarseBins ? hist[tid] : 0u, need, &t, sh);
      const uint32_t p1 = sh.fsel[0], need1 = need - sh.fsel[1];
      if (tid < kCoarseBins) hist[tid] = 0u;  // every read of it preceded find256's first barrier
      sel_sync();
      for (int e = tid; e < c16; e += nt) {
        const uint32_t key = L[e].x;
        if (((key >> 8) & 0xffu) == p1) atomicAdd(hist + (key & 0xffu), 1u);
      }
      sel_sync();
      find256(tid < kCoarseBins ? hist[tid] : 0u, need1, &t, sh);
      const uint32_t T = (fr.b16 << 16) | (p1 << 8) | sh.fsel[0];
      const uint32_t take = need1 - sh.fsel[1], nties = sh.fsel[2];  // winners among the ties: 1..nties
      int32_t last = INT32_MAX;  // the last winning tie's state
      if (take < nties) {
        if (nties > static_cast<uint32_t>(kTieCap)) return false;
        if (tid == 0) sh.fsel[3] = 0u;
        sel_sync();
        for (int e = tid; e < c16; e += nt) {
          if (L[e].x == T) tie[atomicAdd(&sh.fsel[3], 1u)] = L[e].y;
        }
        sel_sync();
        for (int q = tid; q < static_cast<int>(nties); q += nt) {  // states are distinct
          const uint32_t s = tie[q];
          uint32_t r = 0;
          for (int u = 0; u < static_cast<int>(nties); ++u) r += tie[u] < s ? 1u : 0u;
          if (r == take - 1u) sh.fsel[4] = s;
        }
        sel_sync();
        last = static_cast<int32_t>(sh.fsel[4]);
      }
      int wb = 0, mine = 0;  // the list's winners before this CTA; this CTA's winning ties
      for (int e = tid; e < c16; e += nt) {
        const uint2 v = L[e];
        const int32_t st = static_cast<int32_t>(v.y);
        const bool tie_win = v.x == T && st <= last;
        wb += (v.x > T || tie_win) && st < s_lo ? 1 : 0;
        mine += tie_win && st >= s_lo && st <= s_hi ? 1 : 0;
      }
      topk_detail::group_exclusive_scan(wb, sh.warp_tot, &before, SelGroup{});
      topk_detail::group_exclusive_scan(mine, sh.warp_tot, &quota, SelGroup{});
      rs.prefix = T;
      rs.mode = take < nties ? kTies : kGe;
    }
    write_row(buf, ck, i0, i1, j, j, rs, quota, pre + before, C == G - 1, sh);
    sel_sync();  // L, hist, tie and sh.fsel are reused by the next row
  }
  return true;
}

// The select of one request (WsResident), by the select's threads: every CTA of the grid takes
// part (empty ones publish zeros), grid barriers. The same steps as select_slots with one slot;
// kept apart because this latency-bound default route measured slower through the slot code
// (H200, k = 2048: 1 x 8K / 64K / 1M 25.5 / 30.4 / 85.3 -> 26.8 / 31.6 / 87.7 us).
__device__ __forceinline__ void select_one(const Buffers& buf, const CtaScratch& cs, uint32_t* loc, Shared& sh) {
  const int R = buf.rows, tid = threadIdx.x, nt = kSelThreads;
  const int C = blockIdx.x, G = gridDim.x;
  RowState* row = sh.row[0];
  const CtaKeys ck = cs.keys_single();
  const int n = ck.total();
  if (tid < R) row[tid] = RowState{0u, 0u, 0u, 0u, {0u, 0u, 0u}, 0, kActive};
  // Rounds: this CTA's histogram of the next digit (keys inside each row's prefix), published as
  // suffix sums and added into the grid histogram; a grid barrier; every CTA finds the same bin.
  for (int r = 0; r < kRounds; ++r) {
    sel_sync();  // row states
    bool any = false;
    for (int j = 0; j < R; ++j) any |= row[j].mode == kActive;
    if (!any) break;  // grid-uniform: every CTA read the same histograms
    for (int i = tid; i < R * kBins; i += nt) loc[i] = 0u;
    sel_sync();
    for (int j = 0; j < R; ++j) {
      const RowState rs = row[j];
      if (rs.mode != kActive) continue;
      uint32_t* lh = loc + j * kBins;
      for (int i = tid; i < n; i += nt) {
        const uint32_t key = ck.key(j, i);
        if (key != topk_detail::kAbsentKey && in_prefix(key, rs.prefix, r)) atomicAdd(&lh[digit(key, r)], 1u);
      }
    }
    sel_sync();
    for (int j = 0; j < R; ++j) {
      if (row[j].mode != kActive) continue;  // uniform
      publish(loc + j * kBins, r, buf.suf + ((int64_t(r) * buf.ids + C) * R + j) * kBins,
              buf.hist + (int64_t(r) * R + j) * kBins, sh);
    }
    grid_sync(buf.bar);
    for (int j = 0; j < R; ++j) {
      if (row[j].mode != kActive) continue;  // uniform
      find_bin(buf.hist + (int64_t(r) * R + j) * kBins, false, r, buf.k, row[j], sh);
    }
  }
  // Each row's winners: the keys above its threshold and the first `ties` keys at it, in index
  // order, so CTA c writes its winners after those of the CTAs before it; every CTA computes
  // those counts from the published suffix sums (no further barrier).
  for (int j = 0; j < R; ++j) {
    const RowState rs = row[j];
    int above = 0, ties = 0;
    for (int c = tid; c < C; c += nt) {
      int a, t;
      cta_winners(buf, c, j, rs, &a, &t);
      above += a;
      ties += t;
    }
    row_offset(above, ties, rs, loc + j * kBins, &sh.quota[0][j], &sh.offset[0][j], sh);
  }
  sel_sync();
  // Winners in index order: thread-contiguous runs, exclusive scans of the ties and the winners.
  const int chunk = (n + nt - 1) / nt;
  const int i0 = tid * chunk < n ? tid * chunk : n, i1 = i0 + chunk < n ? i0 + chunk : n;
  for (int j = 0; j < R; ++j) {
    write_row(buf, ck, i0, i1, j, j, row[j], sh.quota[0][j], sh.offset[0][j], C == G - 1, sh);
  }
}

// The select of `ns` groups (slots; the participants in sh.slot), by the select's threads: rounds
// of histograms (each slot arrives at its barrier before any slot waits), then every row's
// winners in index order after those of the group's earlier participants.
__device__ __forceinline__ void select_slots(const Buffers& buf, const CtaScratch& cs, uint32_t* loc, int ns,
                                             Shared& sh) {
  const int R = buf.rows, tid = threadIdx.x, nt = kSelThreads;
  const int C = blockIdx.x;
  if (tid < ns * kIdxMaxRows) {
    const int s = tid / kIdxMaxRows, j = tid % kIdxMaxRows;
    sh.row[s][j] = RowState{0u, 0u, 0u, 0u, {0u, 0u, 0u}, 0, j < sh.slot[s].rows ? kActive : kAll};
  }
  sel_sync();
  // The slots' keys (kept in registers; loops over the slots are not unrolled, so each picks one:
  // the select's code is fetched cold, at every call, and grows with every copy).
  const CtaKeys ck0 = cs.keys_of(sh.slot[0].g), ck1 = cs.keys_of(ns > 1 ? sh.slot[1].g : -1);
  auto slot_active = [&](int s) {
    bool a = false;
    for (int j = 0; j < sh.slot[s].rows; ++j) a |= sh.row[s][j].mode == kActive;
    return a;
  };
  // Rounds: this CTA's histogram of the next digit (keys inside each row's prefix); for a shared
  // group published as suffix sums and added into the group's histogram, then its barrier; every
  // participant finds the same bin.
  uint32_t bar_old[kSlots] = {0u, 0u};  // thread 0's arrivals
  for (int r = 0; r < kRounds; ++r) {
    sel_sync();  // row states
    unsigned act = 0u;  // bit s: slot s has rows left
    for (int s = 0; s < ns; ++s) act |= slot_active(s) ? 1u << s : 0u;
    if (act == 0u) break;  // uniform over the CTA; each group's participants read the same histograms
    for (int i = tid; i < ns * R * kBins; i += nt) loc[i] = 0u;
    sel_sync();
#pragma unroll 1
    for (int s = 0; s < ns; ++s) {
      if (!(act >> s & 1u)) continue;
      const CtaKeys ck = s == 0 ? ck0 : ck1;
      const int n = ck.total();
      for (int j = 0; j < sh.slot[s].rows; ++j) {
        const RowState rs = sh.row[s][j];
        if (rs.mode != kActive) continue;
        uint32_t* lh = loc + (s * R + j) * kBins;
        for (int i = tid; i < n; i += nt) {
          const uint32_t key = ck.key(j, i);
          if (key != topk_detail::kAbsentKey && in_prefix(key, rs.prefix, r)) atomicAdd(&lh[digit(key, r)], 1u);
        }
      }
    }
    sel_sync();
#pragma unroll 1
    for (int s = 0; s < ns; ++s) {
      if (!(act >> s & 1u) || sh.slot[s].n < 2) continue;
      const SlotInfo si = sh.slot[s];
      const int64_t id = int64_t(C) + si.g;
      for (int j = 0; j < si.rows; ++j) {
        if (sh.row[s][j].mode != kActive) continue;  // uniform
        publish(loc + (s * R + j) * kBins, r, buf.suf + ((int64_t(r) * buf.ids + id) * R + j) * kBins,
                buf.hist + ((int64_t(si.g) * kRounds + r) * R + j) * kBins, sh);
      }
    }
    // publish ended with sel_sync: every thread's writes precede thread 0's release adds, which
    // are issued back to back (their old values are first used by the waits)
    if (tid == 0) {
      const SlotInfo s0 = sh.slot[0], s1 = sh.slot[1];
      if ((act & 1u) && s0.n >= 2) bar_old[0] = bar_arrive(buf.bar + s0.g, C == s0.first, s0.n);
      if ((act & 2u) && s1.n >= 2) bar_old[1] = bar_arrive(buf.bar + s1.g, C == s1.first, s1.n);
    }
#pragma unroll 1
    for (int s = 0; s < ns; ++s) {
      if (!(act >> s & 1u)) continue;
      const SlotInfo si = sh.slot[s];
      const bool local = si.n < 2;
      if (!local) {
        if (tid == 0) bar_wait(buf.bar + si.g, s == 0 ? bar_old[0] : bar_old[1]);
        sel_sync();
      }
      for (int j = 0; j < si.rows; ++j) {
        if (sh.row[s][j].mode != kActive) continue;  // uniform
        const uint32_t* gh =
            local ? loc + (s * R + j) * kBins : buf.hist + ((int64_t(si.g) * kRounds + r) * R + j) * kBins;
        find_bin(gh, local, r, buf.k, sh.row[s][j], sh);
      }
    }
  }
  // Each row's winners: the keys above its threshold and the first `ties` keys at it, in index
  // order, so a CTA writes its winners after those of the group's earlier participants; every CTA
  // computes those counts from the published suffix sums (no further barrier).
#pragma unroll 1
  for (int s = 0; s < ns; ++s) {
    const SlotInfo si = sh.slot[s];
    for (int j = 0; j < si.rows; ++j) {
      const RowState rs = sh.row[s][j];
      int above = 0, ties = 0;
      if (si.n >= 2) {
        for (int c = si.first + tid; c < C; c += nt) {
          const int2 a = cs.start(c), b = cs.start(c + 1);
          if (a.x == b.x && a.y == b.y) continue;  // an empty CTA: no suffix sums
          int x, t;
          cta_winners(buf, int64_t(c) + si.g, j, rs, &x, &t);
          above += x;
          ties += t;
        }
      }
      row_offset(above, ties, rs, loc + (s * R + j) * kBins, &sh.quota[s][j], &sh.offset[s][j], sh);
    }
  }
  sel_sync();
  // Winners in index order: thread-contiguous runs, exclusive scans of the ties and the winners.
#pragma unroll 1
  for (int s = 0; s < ns; ++s) {
    const SlotInfo si = sh.slot[s];
    const CtaKeys ck = s == 0 ? ck0 : ck1;
    const int n = ck.total();
    const int chunk = (n + nt - 1) / nt;
    const int i0 = tid * chunk < n ? tid * chunk : n, i1 = i0 + chunk < n ? i0 + chunk : n;
    for (int j = 0; j < si.rows; ++j) {
      write_row(buf, ck, i0, i1, j, int64_t(si.g) * R + j, sh.row[s][j], sh.quota[s][j], sh.offset[s][j],
                C == si.last, sh);
    }
  }
  sel_sync();  // the row states and histograms are reused by the next call
}

// The select (WsResidentT::finish), by the consumer warpgroups (kSelThreads threads, named barrier
// kSelBarrier; the producer warps have left): their keys (and, kMulti, segment tables) are in
// shared memory, the ring is free (every copy was consumed).
template <bool kMulti>
__device__ __forceinline__ void select(const IndexerParams& p, const Buffers& buf, uint8_t* smem, size_t keys_off,
                                       size_t epi_off, size_t epi_bytes) {
  if (kMulti) asm volatile("cp.async.wait_all;\n" ::: "memory");  // the partition starts (begin)
  sel_sync();
  Shared& sh = *reinterpret_cast<Shared*>(smem + keys_off);
  uint32_t* loc = reinterpret_cast<uint32_t*>(smem + keys_off + kSharedBytes);  // [kSlots][rows][kBins]
  const int tid = threadIdx.x;
  CtaScratch cs{smem + epi_off, epi_bytes, static_cast<int>(gridDim.x), buf.cap};
  if constexpr (!kMulti) {
    if (buf.list_cap > 0) {
      int32_t lo = 0, hi = 0;
      detail::indexer_group_range(p.work, 0, &lo, &hi);  // the same lengths in every CTA: uniform
      if (hi <= buf.fast_max_len && select_fast(buf, cs, loc, sh)) return;
    }
    select_one(buf, cs, loc, sh);
    return;
  }
  // The groups of this CTA's run, in order: gA (first) .. gZ (last); empty CTAs have none.
  int gA = -1, gZ = -1;
#pragma unroll
  for (int w = 0; w < kWsConsumers; ++w) {
    const int ns = cs.nseg(w);
    if (ns == 0) continue;
    if (gA < 0) gA = cs.seg(w, 0).x;
    gZ = cs.seg(w, ns - 1).x;
  }
  // The first and last groups together (either may be shared), then the groups between them
  // (this CTA's alone) one at a time; one call site of select_slots (its code is fetched cold).
  for (int prev = -1; gA >= 0;) {
    int ns = 1;
    if (prev < 0) {
      ns = gZ != gA ? 2 : 1;
      if (tid < 32) {
        slot_info(cs, gA, static_cast<int>(detail::indexer_group_rows(p.work, gA)), &sh.slot[0]);
        if (ns == 2) slot_info(cs, gZ, static_cast<int>(detail::indexer_group_rows(p.work, gZ)), &sh.slot[1]);
      }
      prev = gA;
    } else {
      // The next group after `prev` in the run (each warpgroup's segments are in group order).
      int next = gZ;
      for (int w = 0; w < kWsConsumers; ++w) {
        const int nsg = cs.nseg(w);
        for (int s = 0; s < nsg; ++s) {
          const int g = cs.seg(w, s).x;
          if (g > prev && g < next) next = g;
        }
      }
      if (next >= gZ) break;
      if (tid == 0) {
        const int rows = static_cast<int>(detail::indexer_group_rows(p.work, next));
        sh.slot[0] = SlotInfo{next, static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.x), 1, rows};
      }
      prev = next;
    }
    sel_sync();
    select_slots(buf, cs, loc, ns, sh);
  }
  // Requests with no states (no CTA holds them): their rows are all padding, written by CTA g % grid.
  for (int64_t g = blockIdx.x; g < p.work.groups; g += gridDim.x) {
    if (detail::indexer_group_units(p.work, g) > 0) continue;
    const int rows = static_cast<int>(detail::indexer_group_rows(p.work, g));
    for (int i = tid; i < rows * buf.k; i += kSelThreads) {
      buf.out.write(g * buf.rows + i / buf.k, i % buf.k, -1, [] { return 0.f; });
    }
  }
}

}  // namespace resident

// The epilogue: scores of the warpgroup's piece to its scratch, then the select in finish().
// kMulti = false (WsResident, one request): a 16-byte header {first state, states}, then keys
// [rows][cap]. kMulti = true (WsResidentMulti, several requests): resident::Scratch, a segment
// per group the piece touches and keys [rows][cap] by position in the piece. Two kernels rather
// than one: the one-request select is the latency-bound default, and its code is fetched cold at
// every call (H200, one kernel for both: 1 x 64K 30.4 -> 38.0 us).
template <bool kMulti>
struct WsResidentT {
  static constexpr int kHpMin = 32;        // kernels for 32 and 64 padded heads
  static constexpr bool kStaged = true;    // 192-state stages at NW = 64: room for the scores
  static constexpr bool kNw64Only = false;
  static constexpr bool kTouch = false;
  resident::Buffers buf;
  int grid = 0;  // CTAs (kMulti: partition starts kept, grid + 1)
  uint32_t* keys = nullptr;
  int* hdr = nullptr;
  int4* segs = nullptr;
  int seg = -1, max_seg = 0;
  int32_t pend_g = -1, seg_g = -1, seg_lo = -1;
  int seg_pos0 = 0, pos_end = 0;

  __host__ __device__ static size_t scratch_bytes(int grid, int rows, int cap) {
    return kMulti ? resident::Scratch::bytes(grid, rows, cap) : resident::Scratch::kHeader + size_t(rows) * cap * 4;
  }
  __host__ __device__ size_t smem_bytes(const IndexerParams&, int) const {
    return scratch_bytes(grid, buf.rows, buf.cap);
  }
  __device__ static int partition(const IndexerParams&, int w) { return kWsConsumers * blockIdx.x + w; }
  __device__ static void cursor(const IndexerParams& p, int w, IdxCursor* lc) { lc->init(p, partition(p, w), 0); }
  __device__ void begin(const IndexerParams& p, uint8_t* scratch, int w, int, int) {
    hdr = reinterpret_cast<int*>(scratch);
    const int tid = threadIdx.x & 127;
    if constexpr (!kMulti) {
      keys = reinterpret_cast<uint32_t*>(scratch + resident::Scratch::kHeader);
      if (tid == 0) {
        hdr[0] = 0;
        hdr[1] = 0;
      }
      return;
    }
    segs = reinterpret_cast<int4*>(scratch + resident::Scratch::segs_off(grid));
    keys = reinterpret_cast<uint32_t*>(scratch + resident::Scratch::keys_off(grid, buf.cap));
    max_seg = resident::Scratch::max_segs(buf.cap);
    if (tid == 0) hdr[0] = 0;
    // This warpgroup's share of the partition starts (pairs 3c of the schedule, c <= grid), copied
    // while the scoring runs; the select waits for them (cp.async.wait_all).
    const int per = resident::Scratch::starts_per_wg(grid);
    for (int i = tid; i < per; i += 128) {
      const int c = w * per + i;
      if (c > grid) break;
      const int32_t* src = p.meta + detail::kIndexerMetaHeader + 2 * (kWsConsumers * c);
      const uint32_t dst = smem_u32(scratch + resident::Scratch::starts_off() + 8 * i);
      asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src) : "memory");
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  }
  __device__ void group_begin(int32_t g, int) { pend_g = g; }
  __device__ void group_end(int64_t, int) {}
  __device__ void tile_begin(int, int32_t t0, int) {
    if constexpr (!kMulti) {
      if (seg_lo < 0) seg_lo = t0;  // a piece's tiles are consecutive runs of states
      return;
    }
    if (seg < 0 || seg_g != pend_g) {  // a new group: a piece's tiles of a group are consecutive runs
      ++seg;
      seg_g = pend_g;
      seg_lo = t0;
      seg_pos0 = pos_end;
    }
  }
  __device__ __forceinline__ void store(const IndexerParams&, int row, int, int32_t t, float v, int64_t,
                                        const detail::RowWindow* win) {
    const int at = (kMulti ? seg_pos0 : 0) + (t - seg_lo);
    // at < cap (and seg < max_seg) by the plan's bound (lengths capped at the block table); the
    // test keeps a broken bound from writing past the scratch.
    if (at < buf.cap && (!kMulti || seg < max_seg)) {
      const bool in = t >= win[row].lo && t < win[row].hi;
      keys[row * buf.cap + at] = in ? topk_detail::topk_key_branchless(v) : topk_detail::kAbsentKey;
    }
  }
  __device__ void tile_end(const IndexerParams&, int64_t, int, int64_t, int32_t t0, int count,
                           const detail::RowWindow*) {
    const int end = (kMulti ? seg_pos0 : 0) + (t0 + count - seg_lo);
    pos_end = end < buf.cap ? end : buf.cap;
    if ((threadIdx.x & 127) != 0) return;
    if constexpr (!kMulti) {
      hdr[0] = seg_lo;
      hdr[1] = pos_end;
    } else if (seg < max_seg) {
      segs[seg] = make_int4(seg_g, seg_lo, seg_pos0, pos_end - seg_pos0);
      hdr[0] = seg + 1;
    }
  }

  __device__ void finish(const IndexerParams& p, uint8_t* smem, const WsSmemLayout& L) {
    if (threadIdx.x >= resident::kSelThreads) return;  // the producer warps
    resident::select<kMulti>(p, buf, smem, L.keys, L.epi, L.epi_bytes);
  }
};
using WsResident = WsResidentT<false>;
using WsResidentMulti = WsResidentT<true>;

}  // namespace cuda
}  // namespace dsattn
