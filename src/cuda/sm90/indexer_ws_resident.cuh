// paged_mqa_topk's resident route on the warp-specialized Hopper kernel (indexer_ws.cuh): for one
// request (one group of N rows), every score stays in the shared memory of the CTA that computed
// it, and after its last tile the whole grid selects each row's top k together. One kernel after
// the schedule: no candidate buffers, no merge kernels, and no scores in global memory (SPEC §3.4:
// the workspace holds histograms and per-CTA suffix sums, independent of the context length).
//
// Why: at batch 1 the streaming route's pieces are shorter than k, so its merges read and select
// the whole row after the scoring kernel (H200, 1 x 64K, k = 2048: scoring ~10 us, merges ~20 us,
// three launches after the schedule). Here the select is a radix select over the CTAs' own
// scores: three digits (11, 11, 10 bits of the order-preserving key), each a shared-memory
// histogram per CTA added into a grid histogram, a grid barrier, and every CTA reading the grid
// histogram to find the digit of the k-th key (rounds stop once the k-th key's bin wins whole).
// Each CTA also publishes its histograms as suffix sums, so after the last round every CTA knows
// how many winners the CTAs before it hold (ties at the k-th key go to the smallest indices) and
// writes its own in index order after them (the order the other routes write), without a barrier.
//
// Requirements the plan (fused_topk_launch.cu) checks: one group, unsorted output, every CTA
// resident at once (cooperative launch, one CTA per SM), pieces of at most `cap` states (the
// schedule's bound with the rows' lengths capped at the block table, IndexerWork::len_cap), and
// the ring's shared memory large enough for the select's histograms once the scoring is over.
#pragma once
#include "cuda/common/topk_grid.cuh"
#include "cuda/sm90/indexer_ws.cuh"

namespace dsattn {
namespace cuda {
namespace resident {

constexpr int kBins = 2048;   // digits 0 and 1: key bits 31..21 and 20..10
constexpr int kBins2 = 1024;  // digit 2: key bits 9..0
constexpr int kRounds = 3;
constexpr int kFindThreads = 256;  // threads that scan a grid histogram (kBins / 8 bins each)
constexpr size_t kScratchHeader = 16;  // a warpgroup's scratch: {first state, states}, then its keys
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

// Global scratch (paged_mqa_topk's workspace). `bar` and `hist` are zeroed by the schedule kernel
// before every call (launch_indexer_schedule's zero range); `suf` is written before it is read.
struct Buffers {
  uint32_t* bar = nullptr;   // grid barrier word
  uint32_t* hist = nullptr;  // [kRounds][rows][kBins] grid histograms
  uint32_t* suf = nullptr;   // [kRounds][grid][rows][kBins] each CTA's histograms as suffix sums
  int rows = 0;              // rows of the group (N)
  int cap = 0;               // states per piece (a warpgroup's scratch: rows x cap keys)
  int k = 0;
  topk_detail::TopkOutputs out;
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
  uint32_t ties;     // kTies: ties at the threshold taken grid-wide
  uint32_t bin[kRounds];
  int last;          // the round that decided the row
  int mode;
};
struct Shared {
  RowState row[kIdxMaxRows];
  uint32_t wsum[kFindThreads / 32];
  int warp_tot[32];
  int quota[kIdxMaxRows];   // kTies: ties this CTA takes
  int offset[kIdxMaxRows];  // this CTA's first output position
};
constexpr size_t kSharedBytes = (sizeof(Shared) + 15) / 16 * 16;
// Shared memory the select needs (at the ring's start, once the scoring is over).
__host__ __device__ constexpr size_t select_smem_bytes(int rows) { return kSharedBytes + size_t(rows) * kBins * 4; }

__device__ __forceinline__ uint32_t digit(uint32_t key, int r) {
  return r == 0 ? key >> 21 : (r == 1 ? (key >> 10) & 0x7ffu : key & 0x3ffu);
}
// Whether `key` has the digits chosen in rounds before r.
__device__ __forceinline__ bool in_prefix(uint32_t key, uint32_t prefix, int r) {
  return r == 0 || (key >> (r == 1 ? 21 : 10)) == (prefix >> (r == 1 ? 21 : 10));
}
__device__ __forceinline__ int round_bins(int r) { return r < 2 ? kBins : kBins2; }
__device__ __forceinline__ int round_shift(int r) { return r == 0 ? 21 : (r == 1 ? 10 : 0); }

// Grid-wide barrier over all CTAs of a cooperative launch (all co-resident): the bit-31 flip of a
// counter whose low 31 bits start at 0 (zeroed before the kernel; every barrier adds exactly 2^31,
// so they end at 0 again). Called by the select's threads; thread 0's release add publishes their
// writes (ordered before it by the named barrier), its acquire load the other CTAs'.
__device__ __forceinline__ void grid_sync(uint32_t* bar) {
  sel_sync();
  if (threadIdx.x == 0) {
    const uint32_t nb = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;
    uint32_t old, v;
    asm volatile("atom.add.release.gpu.global.u32 %0, [%1], %2;\n" : "=r"(old) : "l"(bar), "r"(nb) : "memory");
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(bar) : "memory");
    } while (((v ^ old) & 0x80000000u) == 0u);
  }
  sel_sync();
}

// The CTA's keys: pieces w = 0, 1, 2 (partitions 3c + w, consecutive runs of states) one after
// another, so position i of the concatenation runs in state order.
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

// Round r of row j, threads < kFindThreads, bins [per * tid, per * tid + per) each: this CTA's
// histogram `lh` as suffix sums to `suf` (entry b: keys of the row's prefix whose digit is >= b),
// and its non-zero bins added into the grid histogram `gh`. By the select's threads.
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

// Round r's grid histogram of row j (threads < kFindThreads): the bin holding the need-th largest
// key (round 0: need = min(k, keys of the row)); updates sh.row[j]. By the select's threads.
__device__ __forceinline__ void find_bin(const uint32_t* gh, int r, int j, int k, Shared& sh) {
  const int tid = threadIdx.x, warp = tid >> 5;
  const int per = round_bins(r) / kFindThreads;
  uint32_t h[8];
  uint32_t s = 0, x = 0;
  const uint32_t need_in = sh.row[j].need;  // read before anyone writes it (barrier below)
  if (tid < kFindThreads) {
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      h[q] = q < per ? __ldcg(gh + tid * per + q) : 0u;
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
    RowState& rs = sh.row[j];
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

// Winners of CTA c in row j (its keys above the threshold; `ties`: its keys at it), from the
// suffix sums the CTA published in the rounds up to the row's last.
__device__ __forceinline__ void cta_winners(const Buffers& b, int c, int j, const RowState& rs, int* above, int* ties) {
  const int64_t G = gridDim.x, R = b.rows;
  auto suf = [&](int r, uint32_t bin) -> int {
    if (bin >= static_cast<uint32_t>(round_bins(r))) return 0;
    return static_cast<int>(__ldcg(b.suf + ((int64_t(r) * G + c) * R + j) * kBins + bin));
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

// The select (WsResident::finish), by the consumer warpgroups (kSelThreads threads, named barrier
// kSelBarrier; the producer warps have left): their keys and headers are in shared memory, the ring
// is free (every copy was consumed).
__device__ __forceinline__ void select(const Buffers& buf, uint8_t* smem, size_t keys_off, size_t epi_off,
                                       size_t epi_bytes) {
  sel_sync();
  Shared& sh = *reinterpret_cast<Shared*>(smem + keys_off);
  uint32_t* loc = reinterpret_cast<uint32_t*>(smem + keys_off + kSharedBytes);  // [rows][kBins]
  const int R = buf.rows, tid = threadIdx.x, nt = kSelThreads;
  const int C = blockIdx.x, G = gridDim.x;
  CtaKeys ck;
  ck.cap = buf.cap;
#pragma unroll
  for (int w = 0; w < kWsConsumers; ++w) {
    const int* h = reinterpret_cast<const int*>(smem + epi_off + w * epi_bytes);
    ck.lo[w] = h[0];
    ck.n[w] = h[1];
    ck.keys[w] = reinterpret_cast<const uint32_t*>(smem + epi_off + w * epi_bytes + kScratchHeader);
  }
  const int n = ck.total();
  if (tid < R) sh.row[tid] = RowState{0u, 0u, 0u, 0u, {0u, 0u, 0u}, 0, kActive};
  // Rounds: this CTA's histogram of the next digit (keys inside each row's prefix), published as
  // suffix sums and added into the grid histogram; a grid barrier; every CTA finds the same bin.
  for (int r = 0; r < kRounds; ++r) {
    sel_sync();  // row states
    bool any = false;
    for (int j = 0; j < R; ++j) any |= sh.row[j].mode == kActive;
    if (!any) break;  // grid-uniform: every CTA read the same histograms
    for (int i = tid; i < R * kBins; i += nt) loc[i] = 0u;
    sel_sync();
    for (int j = 0; j < R; ++j) {
      const RowState rs = sh.row[j];
      if (rs.mode != kActive) continue;
      uint32_t* lh = loc + j * kBins;
      for (int i = tid; i < n; i += nt) {
        const uint32_t key = ck.key(j, i);
        if (key != topk_detail::kAbsentKey && in_prefix(key, rs.prefix, r)) atomicAdd(&lh[digit(key, r)], 1u);
      }
    }
    sel_sync();
    for (int j = 0; j < R; ++j) {
      if (sh.row[j].mode != kActive) continue;  // uniform
      publish(loc + j * kBins, r, buf.suf + ((int64_t(r) * G + C) * R + j) * kBins,
              buf.hist + (int64_t(r) * R + j) * kBins, sh);
    }
    grid_sync(buf.bar);
    for (int j = 0; j < R; ++j) {
      if (sh.row[j].mode != kActive) continue;  // uniform
      find_bin(buf.hist + (int64_t(r) * R + j) * kBins, r, j, buf.k, sh);
    }
  }
  // Each row's winners: the keys above its threshold and the first `ties` keys at it, in index
  // order, so CTA c writes its winners after those of the CTAs before it; every CTA computes
  // those counts from the published suffix sums (no further barrier).
  for (int j = 0; j < R; ++j) {
    const RowState rs = sh.row[j];
    int above = 0, ties = 0;
    for (int c = tid; c < C; c += nt) {
      int a, t;
      cta_winners(buf, c, j, rs, &a, &t);
      above += a;
      ties += t;
    }
    int above_tot = 0, ties_tot = 0;
    topk_detail::group_exclusive_scan(above, sh.warp_tot, &above_tot, SelGroup{});
    if (rs.mode == kTies) topk_detail::group_exclusive_scan(ties, sh.warp_tot, &ties_tot, SelGroup{});
    if (tid == 0) {
      int quota = 0, taken = 0;
      if (rs.mode == kTies) {
        const int mine = static_cast<int>(loc[j * kBins + rs.bin[kRounds - 1]]);  // round 2's histogram
        const int left = static_cast<int>(rs.ties) - ties_tot;
        quota = left < 0 ? 0 : (left > mine ? mine : left);
        taken = ties_tot < static_cast<int>(rs.ties) ? ties_tot : static_cast<int>(rs.ties);
      }
      sh.quota[j] = quota;
      sh.offset[j] = above_tot + taken;
    }
  }
  sel_sync();
  // Winners in index order: thread-contiguous runs, exclusive scans of the ties and the winners.
  const int chunk = (n + nt - 1) / nt;
  const int i0 = tid * chunk < n ? tid * chunk : n, i1 = i0 + chunk < n ? i0 + chunk : n;
  for (int j = 0; j < R; ++j) {
    const RowState rs = sh.row[j];
    const int quota = sh.quota[j];
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
    int pos = topk_detail::group_exclusive_scan(mine, sh.warp_tot, &tot, SelGroup{}) + sh.offset[j];
    for (int i = i0, tr = tie0; i < i1; ++i) {
      const uint32_t key = ck.key(j, i);
      const bool tie = rs.mode == kTies && key == rs.prefix;
      if (wins(key, rs) || (tie && tr < quota)) {
        buf.out.write(j, pos, ck.state(i), [&] { return topk_detail::key_to_float(key); });
        ++pos;
      }
      tr += tie ? 1 : 0;
    }
    // Padding after a row's winners (min(k, keys of the row) of them): the last CTA.
    if (C == G - 1) {
      const int nwin = rs.mode == kAll ? static_cast<int>(rs.total) : buf.k;
      for (int q = nwin + tid; q < buf.k; q += nt) buf.out.write(j, q, -1, [] { return 0.f; });
    }
  }
}

}  // namespace resident

// The epilogue: scores of the warpgroup's piece to its scratch ([rows][cap] keys after a 16-byte
// header {first state, states}), then the grid-wide select in finish().
struct WsResident {
  static constexpr int kHpMin = 32;        // kernels for 32 and 64 padded heads
  static constexpr bool kStaged = true;    // 192-state stages at NW = 64: room for the scores
  static constexpr bool kNw64Only = false;
  static constexpr size_t kHeader = resident::kScratchHeader;
  resident::Buffers buf;
  uint32_t* keys = nullptr;
  int* hdr = nullptr;
  int32_t lo = -1;
  int grp_id = 1;

  __host__ __device__ static size_t scratch_bytes(int rows, int cap) { return kHeader + size_t(rows) * cap * 4; }
  __host__ __device__ size_t smem_bytes(const IndexerParams&, int) const { return scratch_bytes(buf.rows, buf.cap); }
  __device__ static int partition(const IndexerParams&, int w) { return kWsConsumers * blockIdx.x + w; }
  __device__ static void cursor(const IndexerParams& p, int w, IdxCursor* lc) { lc->init(p, partition(p, w), 0); }
  __device__ void begin(uint8_t* scratch, int w, int, int) {
    hdr = reinterpret_cast<int*>(scratch);
    keys = reinterpret_cast<uint32_t*>(scratch + kHeader);
    grp_id = 1 + w;
    if ((threadIdx.x & 127) == 0) {
      hdr[0] = 0;
      hdr[1] = 0;
    }
  }
  __device__ void group_begin(int32_t, int) {}
  __device__ void group_end(int64_t, int) {}
  __device__ void tile_begin(int, int32_t t0, int) {
    if (lo < 0) lo = t0;  // a piece's tiles are consecutive runs of states
  }
  __device__ __forceinline__ void store(const IndexerParams&, int row, int, int32_t t, float v, int64_t,
                                        const detail::RowWindow* win) {
    const int at = t - lo;
    // at < cap by the plan's bound (lengths capped at the block table); the test keeps a broken
    // bound from writing past the scratch.
    if (at < buf.cap) {
      const bool in = t >= win[row].lo && t < win[row].hi;
      keys[row * buf.cap + at] = in ? topk_detail::topk_key_branchless(v) : topk_detail::kAbsentKey;
    }
  }
  __device__ void tile_end(const IndexerParams&, int64_t, int, int64_t, int32_t t0, int count,
                           const detail::RowWindow*) {
    if ((threadIdx.x & 127) == 0) {
      hdr[0] = lo;
      const int n = t0 + count - lo;
      hdr[1] = n < buf.cap ? n : buf.cap;
    }
  }

  __device__ void finish(const IndexerParams&, uint8_t* smem, const WsSmemLayout& L) {
    if (threadIdx.x >= resident::kSelThreads) return;  // the producer warps
    resident::select(buf, smem, L.keys, L.epi, L.epi_bytes);
  }
};

}  // namespace cuda
}  // namespace dsattn
