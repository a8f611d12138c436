// Sampled-threshold top-k for many wide rows (SPEC §3.3): one CTA per row reads its row from
// global memory once and keeps in shared memory only the states that pass a threshold guessed from
// a sample of the row; the exact selection then runs over those few thousand candidates.
//
// Why: the direct and split plans hold every key of a row (or chunk) in shared memory, so one CTA
// fills an SM, each key costs a histogram atomic and a compaction pass, and the barrier-separated
// phases of one CTA leave the SM idle (H200, 256 x 64K, k = 2048: 87 us, 18 % of copy; ncu: ~70
// instructions per key, one CTA per SM). Here a key costs a load and one compare; two CTAs share
// an SM, so one streams while the other selects.
//
// One row (len > k):
//   1. threshold: S states are sampled (S = 4096 f32 / 8192 bf16: 256 evenly spaced 64-byte
//      chunks). One or two radix digits over the sample find the 12-bit (when that bin is narrow
//      enough) or 22-bit key prefix P of the sample's r-th largest key, r = 1.25 mu + 4 sqrt(mu)
//      + 4, where mu = S k / len is the sample count expected above the row's k-th key.
//      Candidates are the keys with a prefix >= P: about 1.25 k + 4 sqrt(k len / S) plus P's bin;
//      fewer than k only when the sample is 4 standard deviations off (more often when the scores
//      of neighbouring states within a chunk are alike). Rows of len <= mcap skip the sample:
//      every state is a candidate.
//   2. stream: tiles of 1024 threads x E consecutive states (32 bytes) each; a block scan per
//      tile (one barrier) appends the tile's candidates in position order; the next tile's loads
//      are issued before it when the SM runs only this CTA. Rows read from DRAM (not just written
//      by the fused op) are also prefetched into L2 one tile ahead (two with one CTA per SM;
//      sampled_prefetch), the first tiles while the sample is read: phase timers (H200, 1024 x
//      64K f32, k = 2048, averages per CTA) put the threshold at 5.0 us, the stream at 18.9 and
//      the selection at 6.2 without it, and the stream at 15.3 with it (the kernel 130 -> 120 us).
//      Tried and dropped (TopkTuning::sampled_l2_ahead has the figures): prefetching further
//      ahead (slower from 2 tiles on with two CTAs per SM), and a CTA prefetching, once its row
//      is streamed, the sample and first tile of the row that a CTA starting soon would take
//      (1024 x 64K 119.7 -> 121.5 us), or running persistent CTAs that prefetch their own next
//      row (121.3; their loop cost registers), or that copy their next row's sample into shared
//      memory while streaming the current one (2026-12-03 17:50: 112.0 -> 128.1 us; spills, and
//      the CTAs' phases stay aligned).
//      ncu reads the kernel as issue-bound (H200, 1024 x 64K f32, k = 2048: 3.0 warp
//      instructions issued per cycle and SM of 4, DRAM 41 % busy): 79.7 M warp instructions,
//      half of them in the stream's loop (152 per warp and tile), a third once per warp
//      (threshold, selection setup, write), the rest in the selection's loops. So the stream's
//      block scan uses warp_inclusive_scan_pred (two instructions per step, not four), and with
//      mcap = kSampledMinMcap (k <= 2048) a compile-time constant, cand_pos is an immediate offset
//      from cand_key's store address (one fewer instruction per candidate slot): 152 -> ~135 per
//      warp and tile, 1024 x 64K 119.4 -> 115.5 us. Then whole tiles without per-thread bounds
//      (~120 per warp and tile), the window select's histogram at four keys per hist_add_v and
//      the histograms zeroed by one 16-byte store per thread: 1024 x 64K 114.1-114.5 ->
//      111.8-112.0 us, bf16 (whose stream kept its bounds) 103.5-103.7 -> 101.1. So the
//      stream's instruction count is not what bounds it: the gain is the shorter threshold and
//      selection (phase stamps: ~5 us each of a row's ~27, the stream ~16), during which the
//      CTA reads nothing. Nor is the stream's load latency. Tried and dropped (BENCHMARKS.md,
//      2026-12-03 16:15-17:50): the next whole tile copied into a 32 KB shared buffer
//      (cp.async) while the CTA scans the current one (two CTAs per SM still fit; 112.0 -> 116.7
//      us), more tiles prefetched into L2 before the sample (2: 113.9, 3: 116.2, against
//      112.4-112.7 at 1) or none (114.0), and the sample loaded before that prefetch (within
//      noise). Tried and dropped (BENCHMARKS.md, 2026-12-03 14:30): the CTAs of an SM taking
//      turns to stream (a lock per SM: 124.0 us; a staggered start: 121-123), candidates' values
//      gathered from L2 at the selection instead of stored in the stream (145: the row has left
//      L2 by then, and each value costs a 32-byte sector), and 64 bytes per thread and tile in
//      whole-warp vectors with packed per-vector counts (126; bf16 110 against 105). Tried and
//      dropped (BENCHMARKS.md, 2026-12-03 18:25-19:15; 1024 x 64K 112.0-112.3 us): the same
//      coalesced loads at 32 bytes per thread (113.5; bf16 100.5 -> 105.2), deeper L2 prefetch
//      for the last rows (2-3 tiles for the last 132-396: 112.3-115.0) or more first tiles for
//      the first wave (112.2-113.8), and a one-pass ordered select (~200 fewer instructions per
//      warp and row; 112.5-112.8): the selection's time is its chain of barrier-separated steps,
//      not their instructions. Rows beyond 1024 cost 67-68 % of copy; ~18 us of a launch (the
//      first wave, the last rows) does not amortize over 1024.
//   3. select: f32 rows: radix digits over key - (the threshold), whose first level spreads the
//      candidates over 4096 bins (window_threshold); bf16 rows: the block radix select of
//      topk_kernel.cuh over the n candidates (k <= n <= mcap). Then the ordered write and
//      finish_row (sort on request, values, slot ids). The winners and the tie rule (smaller
//      position first) are those of every other plan: the candidates hold every key >= the k-th.
//      The kernel is issue-bound outside its stream (both CTAs of an SM select at about the same
//      time), so the instructions that every warp runs there set its time: f32 rows with a
//      positive threshold keep their candidates' float bits as keys (no conversion pass),
//      unsorted indices-only calls take the window's winners straight to the output (no
//      finish_row pass), the ordered write's counts come from the window's list pass, idle warps
//      skip the window histogram's tail step, its first level adds without hist_add_v's test,
//      rows without ties at T take a loop without tie bookkeeping, and full-width rows take their
//      sample rank from the host. H200, k = 2048, 1024 x 64K 112.0-112.1 -> 105.2-105.4 us (57.0
//      -> 60.8-60.9 % of copy), 2048 x 64K 206.4 -> 194.4-195.1 (BENCHMARKS.md, 2026-12-04
//      17:15-18:50). Instructions added in every warp cost more than a barrier saves: a find_bin
//      whose every warp scanned the holding block itself, to drop its trailing barrier, was 2.4 us
//      slower.
//   4. fallback (a bad sample: fewer than k candidates, more than mcap, or a threshold among NaN /
//      -inf): the exact radix select streams the row from global memory (four more reads; slow but
//      exact, e.g. constant rows).
//
// Shared memory (dynamic): [cand_key mcap][cand_pos mcap][region sel_words(k_pad)]: the histograms,
// then (sel_key, sel_pos). The candidates' keys are written after the stream, in place of their
// float bits.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/common/async_copy.cuh"
#include "cuda/common/topk_filter.cuh"

namespace dsattn {
namespace cuda {
namespace topk_detail {

// The stream: 32 bytes per thread and tile (8 f32 / 16 bf16 states; 64 bytes streamed slower with
// two CTAs per SM). With one CTA per SM (TopkPlan::s_pipe) the next tile's loads go out before
// the current tile's scan, barrier and stores; with two they do not (TopkTuning::sampled_pipe has
// the H200 figures).
constexpr int kSampledStreamBytes = 32;
constexpr int kSampledMinMcap = 8192;          // candidate capacity, at least 4 round_up(k, 4)
// Plan limits: rows at least 8 round_up(k, 4) wide (narrower rows gain nothing from the filter)
// and at most 256K wide (set for the earlier 2048-state sample, which overshot the candidate
// capacity beyond it; not re-measured with the 4096 / 8192-state one).
constexpr int kSampledMinRatio = 8;
constexpr int64_t kSampledMaxWidth = 262144;

__host__ __device__ inline size_t sampled_smem_bytes(int mcap, int k_pad) {
  return (2 * static_cast<size_t>(mcap) + sel_words(k_pad)) * 4;
}

constexpr int kWindowList = 32;  // window select: keys of the k-th bin ranked by one warp

// Zeroes a kBins1-word histogram (16-byte aligned) with one 16-byte store per thread of the
// kTopkThreads-thread block: the strided loop it replaces cost ~25 instructions per warp.
__device__ __forceinline__ void zero_bins1(uint32_t* hist) {
  static_assert(kBins1 == 4 * kTopkThreads, "zero_bins1: four bins per thread");
  reinterpret_cast<uint4*>(hist)[threadIdx.x] = make_uint4(0u, 0u, 0u, 0u);
}

struct SampledShared {
  int cnt[2][kTopkWarps];  // candidates of each warp in a tile, by tile parity
  int list_n;              // window select: keys gathered from the k-th bin
  uint32_t list[kWindowList];
  int list_i[kWindowList];  // the list's keys' candidate indices
};

// A row in the aligned space of 16-byte vectors: element a lives at abase[a]; the row is
// a in [mis, span).
template <typename T>
struct SampledRow {
  const T* src = nullptr;
  const T* abase = nullptr;
  int len = 0, mis = 0, span = 0;
};

template <typename T>
__device__ __forceinline__ SampledRow<T> sampled_row(const T* logits, int64_t ld, const TopkRowBounds& rb, int64_t r) {
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  SampledRow<T> g;
  int start;
  rb.get(r, &start, &g.len);
  g.src = row_ptr(logits, ld, r) + start;
  g.mis = static_cast<int>((reinterpret_cast<uintptr_t>(g.src) / sizeof(T)) % V);
  g.abase = g.src - g.mis;
  g.span = g.len + g.mis;
  return g;
}

// The sample: kTopkThreads 16-byte vectors (4096 f32 / 8192 bf16 states) in kSampleChunkVecs-vector
// chunks (64 bytes, two sectors each), evenly spaced over the row. H200, 256 x 64K f32, k = 2048
// (phase timers, same run): 2048 single states 128 bytes apart took 23 us of the kernel's 58,
// longer than streaming the row (18 us): each state costs a DRAM access of its own. 512 sectors:
// 8.5 us, kernel 48.6; 128-byte chunks 5.4 / 46.8. Whole-kernel figures (H200, f32, k = 2048,
// `bench topk`, 2026-12-02): 256 chunks of 64 bytes against 512 of 32, 1024 x 64K 131.1 against
// 135.1 us, 256 x 128K 60.7 / 62.6, bf16 1024 x 64K 114.6 / 118.6, and no slower on rows whose
// neighbours are alike (`--runs 16 / 32 / 64`, k = 512 .. 4096). 128 chunks of 128 bytes gained
// another 1-2 % on independent values but fell back to the exact stream on rows with runs of 32
// or 64 alike (1024 x 64K 129 -> 187-211 us, 256 x 128K 60 -> 236-241): 32-state chunks are too
// few independent places for the rank's margin.
constexpr int kSampleChunkVecs = 4;

// The vector of the sample that this thread loads (len > mcap >= 8192: at least 1024 vectors,
// so every chunk lies in [0, span / V)).
template <typename T>
__device__ __forceinline__ int sample_vec(const SampledRow<T>& g) {
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  constexpr int kChunks = kTopkThreads / kSampleChunkVecs;
  const int tid = static_cast<int>(threadIdx.x);
  const int nvec = g.span / V;  // <= 65540 (rows of <= 256K states): the products below fit 32 bits
  const uint32_t gv0 = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(g.abase) / 16);  // abase's vector number, low bits
  int v = (tid / kSampleChunkVecs) * nvec / kChunks;
  v -= static_cast<int>((gv0 + static_cast<uint32_t>(v)) & (kSampleChunkVecs - 1));  // chunk-aligned
  return (v < 0 ? v + kSampleChunkVecs : v) + tid % kSampleChunkVecs;
}

template <typename T>
__device__ __forceinline__ uint4 sample_load(const SampledRow<T>& g) {
  return __ldg(reinterpret_cast<const uint4*>(g.abase) + sample_vec(g));
}

// sampled_threshold's sample rank for rows of len states of elem_bytes each: r = 1.25 mu +
// 4 sqrt(mu) + 4, mu = S k / len (S: the sample's states), at most S less one vector. A margin, not
// a result, the same on every run. On the device with approximate division and square root (the
// IEEE forms cost ~30 instructions in every warp of an issue-bound kernel); on the host, for a
// launch's full-width rows (the kernel's full_rank, so that its warps skip the float math), in
// exact arithmetic.
__host__ __device__ __forceinline__ int sample_rank(int elem_bytes, int k, int len) {
  const int V = 16 / elem_bytes;
  const int sample = kTopkThreads * V;
#ifdef __CUDA_ARCH__
  const float mu = __fdividef(static_cast<float>(sample) * static_cast<float>(k), static_cast<float>(len));
  const int rank = static_cast<int>(ceilf(1.25f * mu + 4.0f * (mu * rsqrtf(mu)) + 4.0f));
#else
  const double mu = static_cast<double>(sample) * k / len;
  const int rank = static_cast<int>(std::ceil(1.25 * mu + 4.0 * std::sqrt(mu) + 4.0));
#endif
  return rank < sample - V ? rank : sample - V;
}

// The lowest key that can be a candidate, from the sample (`raw`: this thread's sample_load), or 0
// when the sample's threshold lies among NaN / -inf (fallback). Block-wide; ends synced, except
// where the first digit is the threshold (the stream that follows rewrites neither hist nor sh).
// The sample's rank-r key (sample_rank; mu = S k / len is the sample states expected above the
// row's k-th key, S = 4096 f32 / 8192 bf16).
template <typename T>
__device__ __forceinline__ uint32_t sampled_threshold(uint4 raw, const SampledRow<T>& g, int k, int mcap, int full_len,
                                                      int full_rank, uint32_t* hist, TopkShared& sh) {
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  constexpr int kSample = kTopkThreads * V;
  const int tid = static_cast<int>(threadIdx.x);
  zero_bins1(hist);
  const int v = sample_vec(g);
  const T* e = reinterpret_cast<const T*>(&raw);
  uint32_t sk[V], bin[V];
  bool act[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    act[j] = v * V + j >= g.mis;  // at most V - 1 states of the first vector lie before the row
    sk[j] = key_of(e[j]);
    bin[j] = sk[j] >> 20;
  }
  __syncthreads();  // hist zeroed
  hist_add_v<V>(hist, bin, act);
  __syncthreads();
  // The launch's full-width rows take the rank computed once on the host.
  const int rank = g.len == full_len ? full_rank : sample_rank(static_cast<int>(sizeof(T)), k, g.len);
  find_bin<true>(hist, kBins1, rank, sh);
  const uint32_t b1 = sh.bin;
  const int rem = rank - sh.above;
  // The first digit alone when its bin keeps the expected candidates within 3/4 of the capacity
  // (saves the second histogram's barriers; normal-like rows of 64K at k = 2048: ~4000 expected).
  const bool one_digit = static_cast<int64_t>(sh.above + static_cast<int>(hist[b1])) * g.len <=
                         static_cast<int64_t>(mcap) * kSample * 3 / 4;
  // A usable first digit returns without a barrier: until the selection, which zeroes hist after
  // the stream's barriers, nothing rewrites hist or sh (the stream writes the candidate arrays and
  // ss only).
  if (one_digit && b1 >= 8u) return b1 << 20;
  __syncthreads();  // sh and hist read by every thread
  if (one_digit) return 0u;  // b1 < 8: the bin holds -inf / NaN keys (the fallback rewrites hist)
  static_assert(kBins2 == kTopkThreads, "one bin per thread");
  hist[tid] = 0;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    bin[j] = (sk[j] >> 10) & (kBins2 - 1);
    act[j] = act[j] && (sk[j] >> 20) == b1;
  }
  __syncthreads();
  hist_add_v<V>(hist, bin, act);
  __syncthreads();
  find_bin<true>(hist, kBins2, rem, sh);
  const uint32_t lo = ((b1 << 10) | sh.bin) << 10;
  __syncthreads();  // sh and hist read by every thread
  // Keys below 0x00800000 are -inf, NaN and absent: a float comparison cannot express them.
  return lo >= 0x00800000u ? lo : 0u;
}

// The stream's L2 prefetch: the row's aligned-space elements [p0, min(p0 + n, span)) are asked
// into L2 ahead of their loads by one bulk prefetch, so that DRAM requests stay in flight
// through each tile's scan and barrier and while the CTA samples, without registers. `issuer`:
// the threads that issue it (thread 0, or warp 0: the prefetch is a uniform instruction, one per
// warp, and a warp-wide flag costs the stream's other warps fewer instructions than a test of
// the thread index). sm_90 and newer (the TMA engine); none before (not measured there).
template <typename T>
__device__ __forceinline__ void sampled_prefetch(const SampledRow<T>& g, int p0, int n, bool issuer) {
  if (issuer && p0 < g.span) {
    const uint32_t bytes = (static_cast<uint32_t>(min(g.span - p0, n)) * static_cast<uint32_t>(sizeof(T))) & ~15u;
    if (bytes != 0u) prefetch_l2_bulk(g.abase + p0, bytes);
  }
}

// Streams the row once and appends, in position order, the states whose value is >= thr (every
// in-range state when kAll) to cand_pos, with their values' float bits (not yet keys) in
// cand_key. Returns their number, or -1 when there are more than mcap. Block-wide; ends synced.
// Thread t of a tile takes E consecutive states (16-byte vectors), so thread order is position
// order and one block scan per tile places the candidates. H200 profile of a first version with a
// vector per thread and step (coalesced, order from three ballots per vector) and per-element key
// conversion at the write: ~340 instructions per warp and tile of 8 states per lane, issue-bound.
// The stream's code is register-bound (two CTAs of 1024 threads per SM: 32 registers): keys and
// their maximum computed here made the kernel spill and cost 12 % at 1024 x 64K (H200).
// Tiles that lie wholly inside the row (all of a 64K row's but at most its first and last) run a
// body without per-thread bounds: no range tests, no branch around the vector loads, and `all`
// (kAll) decided per call, not per tile.
template <typename T, int E, bool kPipe, int kPosWords, bool kAll>
__device__ __forceinline__ int sampled_stream(const SampledRow<T>& g, float thr, int mcap, uint32_t* cand_key,
                                              int* cand_pos, SampledShared& ss, int l2_ahead) {
  constexpr int V = 16 / static_cast<int>(sizeof(T));  // elements per vector
  constexpr int kVecs = E / V;                         // vectors per thread and tile
  static_assert(E % V == 0 && E <= 32, "sampled_stream: E is a multiple of the vector, at most 32");
  constexpr int kTile = E * kTopkThreads;
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const T* abase = g.abase;
  const int mis = g.mis, span = g.span;
  // Tile t0 is whole when every thread's E states lie in the row (mis < V <= E: only the first
  // tile can start before the row).
  // f32 only: with bf16's 16 states per thread the whole-tile body spilled at the two-CTA bound.
  constexpr bool kWholeTiles = sizeof(T) == 4;
  const auto whole = [&](int t0) { return kWholeTiles && (t0 > 0 || mis == 0) && t0 <= span - kTile; };
  // A tile's loads: whole vectors where the thread's E states lie in the row (all but two threads
  // per row), else state by state (zeros outside).
  const auto load = [&](int t0, uint4 (&r)[kVecs]) {
    const int a0 = t0 + tid * E;
    if (a0 >= mis && a0 + E <= span) {
#pragma unroll
      for (int u = 0; u < kVecs; ++u) r[u] = __ldg(reinterpret_cast<const uint4*>(abase + a0) + u);
    } else {
      T* e = reinterpret_cast<T*>(r);
#pragma unroll
      for (int j = 0; j < E; ++j) {
        const bool in = a0 + j >= mis && a0 + j < span;
        e[j] = in ? abase[a0 + j] : T(0.0f);
      }
    }
  };
  const uint4* const tvec = reinterpret_cast<const uint4*>(abase + tid * E);  // the thread's vectors of tile 0
  const auto load_whole = [&](int t0, uint4 (&r)[kVecs]) {
    const uint4* p = tvec + t0 / V;
#pragma unroll
    for (int u = 0; u < kVecs; ++u) r[u] = __ldg(p + u);
  };
  const auto load_any = [&](int t0, uint4 (&r)[kVecs]) {  // kPipe's loads a tile ahead: either body
    if (whole(t0)) {
      load_whole(t0, r);
    } else {
      load(t0, r);
    }
  };
  const bool prefetcher = l2_ahead > 0 && warp == 0;  // sampled_prefetch's issuer
  const int ahead = l2_ahead * kTile;
  int n = 0;
  int parity = 0;
  uint4 raw[kVecs];
  // One tile: kWhole (compile time) drops the per-thread bounds. Returns false when the candidates
  // overflow mcap (uniform).
  const auto tile = [&](auto whole_tag, int t0) -> bool {
    constexpr bool kWhole = decltype(whole_tag)::value;
    const int a0 = t0 + tid * E;
    sampled_prefetch(g, t0 + ahead, kTile, prefetcher);
    if (!kPipe) {
      if (kWhole) {
        load_whole(t0, raw);
      } else {
        load(t0, raw);
      }
    }
    const T* e = reinterpret_cast<const T*>(raw);
    unsigned f = 0u;
    if (kWhole || (a0 >= mis && a0 + E <= span)) {
      if (kAll) {
        f = E == 32 ? 0xffffffffu : (1u << (E & 31)) - 1u;
      } else {
#pragma unroll
        for (int j = 0; j < E; ++j) f |= (to_float(e[j]) >= thr ? 1u : 0u) << j;
      }
    } else {
#pragma unroll
      for (int j = 0; j < E; ++j) {
        const bool in = a0 + j >= mis && a0 + j < span;
        if (in && (kAll || to_float(e[j]) >= thr)) f |= 1u << j;
      }
    }
    // kPipe: the next tile's loads go out before this tile's scan, barrier and stores.
    uint4 nxt[kVecs];
    if (kPipe && t0 + kTile < span) load_any(t0 + kTile, nxt);
    const int c = __popc(f);
    const int incl = warp_inclusive_scan_pred(c);
    if (lane == 31) ss.cnt[parity][warp] = incl;
    __syncthreads();
    const int wt = ss.cnt[parity][lane];
    const int total = __reduce_add_sync(0xffffffffu, wt);
    if (n + total > mcap) return false;  // uniform
    const int o = n + __reduce_add_sync(0xffffffffu, lane < warp ? wt : 0) + incl - c;
    if (f != 0u) {
      // Shared-window byte offsets: one running offset for both arrays (a store each, one add);
      // kPosWords > 0: cand_pos lies that many words after cand_key, an immediate offset.
      uint32_t off = smem_u32(cand_key + o);
      const uint32_t pos_delta = kPosWords > 0 ? 4u * kPosWords : smem_u32(cand_pos) - smem_u32(cand_key);
      const int p0 = a0 - mis;
#pragma unroll
      for (int j = 0; j < E; ++j) {
        if (f & (1u << j)) {
          asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(off), "r"(__float_as_uint(to_float(e[j]))));
          asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(off + pos_delta), "r"(p0 + j));
          off += 4u;
        }
      }
    }
    n += total;
    if (kPipe) {
#pragma unroll
      for (int u = 0; u < kVecs; ++u) raw[u] = nxt[u];
    }
    parity ^= 1;
    // No barrier: the next tile writes the other parity's counts, and its barrier comes before
    // the tile after it rewrites these.
    return true;
  };
  using Whole = std::integral_constant<bool, true>;
  using Part = std::integral_constant<bool, false>;
  int t0 = 0;
  if (kPipe && span > 0) load_any(0, raw);
  if (kWholeTiles) {
    if (span > 0 && !whole(0)) {  // a first tile that starts before the row (or is also its last)
      if (!tile(Part{}, 0)) return -1;
      t0 = kTile;
    }
    for (; t0 <= span - kTile; t0 += kTile) {
      if (!tile(Whole{}, t0)) return -1;
    }
  }
  for (; t0 < span; t0 += kTile) {  // bf16: every tile; f32: a last tile that ends past the row
    if (!tile(Part{}, t0)) return -1;
  }
  __syncthreads();  // the candidates are complete
  return n;
}

// The exact radix select of a row streamed from global memory (three histogram passes, then the
// ordered write): (sel_key, sel_pos) [0, k) hold the k winners in position order. Block-wide.
template <typename T>
__device__ __forceinline__ void sampled_fallback(const T* __restrict__ src, int len, int k, uint32_t* region,
                                                 uint32_t* sel_key, int* sel_pos, TopkShared& sh) {
  const int tid = static_cast<int>(threadIdx.x);
  for (int i = tid; i < kBins1; i += kTopkThreads) region[i] = 0;
  __syncthreads();
  for (int base = 0; base < len; base += kTopkThreads) {
    const int i = base + tid;
    const uint32_t key = i < len ? key_of(src[i]) : 0u;
    hist_add(region, key >> 20, i < len);
  }
  __syncthreads();
  find_bin(region, kBins1, k, sh);
  const uint32_t b1 = sh.bin;
  int k_rem = k - sh.above;
  __syncthreads();
  const uint32_t p2 = stream_digit(src, len, b1, 10, k_rem, region, sh);
  const uint32_t thr = stream_digit(src, len, p2, 0, k_rem, region, sh);
  stream_select_in_order(src, len, thr, k_rem, sel_key, sel_pos, sh);
}

// Converts the n candidates' float bits in `keys` to keys (all >= lo) and finds the exact k-th
// largest, as the winners' rule of select_in_order_by: {key > *T_out} plus the first *need_out
// keys == *T_out. With a positive threshold (lo >= the key of the smallest normal float) the
// candidates are positive floats and keep their float bits, which order them as their keys do;
// *T_out is then a float-bits value too, for the same `keys` (every later comparison reads them).
// Radix digits over d = key - lo instead of over the key's top bits: the candidates of a sampled
// row share their top bits, so a top-12-bit histogram puts them into a few bins (contended
// atomics, then two more digits). The first level's 4096 bins cover [0, max key - lo], shifted
// by s; each later level takes the next 12 bits of the k-th bin. It stops when the digits are
// exhausted, when the k-th bin is needed whole (threshold: its lower bound - 1), or when the bin
// holds at most kWindowList keys: one warp ranks them. `hist`: kBins1 words. Block-wide; starts
// synced, and ends with the results in every thread but not synced (threads may still read hist
// and sh.bin / sh.above: select_in_order_by writes only sh.warp_gt / warp_eq before its barrier,
// and its ordered write into sel_key, over hist, comes after it). Returns true on the list's exit,
// with this warp's *gt_before / *eq_before (the keys > and == *T_out in the segments of
// select_in_order_keyed before this warp's) for select_in_order_write; hist is not read after it
// there, so the write may start at once.
__device__ __forceinline__ bool window_threshold(uint32_t* keys, int n, int k, uint32_t lo, uint32_t* hist,
                                                 TopkShared& sh, SampledShared& ss, uint32_t* T_out, int* need_out,
                                                 int* gt_before, int* eq_before) {
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  uint32_t range;
  {
    zero_bins1(hist);
    if (tid == 0) ss.list_n = 0;
    uint32_t mx = 0u;
    if (lo >= 0x80800000u) {
      // A positive threshold (at least the smallest normal float): every candidate is a positive
      // float, whose bits order it as its key does (key = bits | sign bit). The keys stay float
      // bits and lo drops its sign bit: no conversion pass, and T_out is in the same space.
      lo ^= 0x80000000u;
      for (int i = tid; i < n; i += kTopkThreads) mx = max(mx, keys[i]);
    } else {
      for (int i = tid; i < n; i += kTopkThreads) {
        const uint32_t key = topk_key(__uint_as_float(keys[i]));
        keys[i] = key;
        mx = max(mx, key);
      }
    }
    mx = __reduce_max_sync(0xffffffffu, mx);
    if (lane == 0) sh.warp_scan[tid >> 5] = static_cast<int>(mx);
    __syncthreads();
    // Read before the first level's barrier; find_bin rewrites warp_scan after it.
    range = __reduce_max_sync(0xffffffffu, static_cast<uint32_t>(sh.warp_scan[lane])) - lo;
  }
  int s = range < static_cast<uint32_t>(kBins1) ? 0 : (32 - __clz(range)) - 12;  // range >> s < kBins1
  int sp = 32;       // the previous level's shift (32: the first level, every key)
  uint32_t P = 0u;   // prefix of d above bit sp: the bins chosen so far
  int rem = k;       // winners still to place below the bins above
  for (;;) {
    // Four keys per thread and step (tid, tid + 1024, ...): hist_add_v's warp-wide test of a shared
    // bin once per four keys, not hist_add's per key (~24 instructions per key and warp).
    // A warp whose lowest key of a step lies past n has none in it (its keys are base + 1024 v +
    // tid): it skips the step, histogram test included, instead of running it idle.
    for (int base = 0; base + (tid & ~31) < n; base += 4 * kTopkThreads) {
      uint32_t bin[4];
      bool act[4];
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const int i = base + v * kTopkThreads + tid;
        const uint32_t d = i < n ? keys[i] - lo : 0u;
        act[v] = i < n && (sp == 32 || (d >> sp) == P);
        bin[v] = (d >> s) & (kBins1 - 1);
      }
      if (sp == 32) {
        // The first level spreads the keys over the window's bins by construction: one atomic
        // per key, without hist_add_v's test for a warp whose keys share one bin.
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          if (act[v]) atomicAdd(&hist[bin[v]], 1u);
        }
      } else {
        hist_add_v<4>(hist, bin, act);
      }
    }
    __syncthreads();
    find_bin<true>(hist, kBins1, rem, sh);  // the level holds >= rem keys: n >= k, later the bin's count
    const uint32_t b = sh.bin;
    rem -= sh.above;
    const int cnt = static_cast<int>(hist[b]);
    P = sp == 32 ? b : ((P << (sp - s)) | b);  // now the prefix of d above bit s
    if (s == 0) {
      *T_out = lo + P;
      *need_out = rem;
      break;
    }
    if (cnt == rem) {
      // No wrap: P = 0 here means every candidate wins (n = k), which a row whose states are all
      // candidates (lo = 0) cannot have (n = len > k); otherwise lo >= 0x00800000.
      *T_out = lo + (P << s) - 1u;
      *need_out = 0;
      break;
    }
    if (cnt <= kWindowList) {
      // The bin's keys (with their indices) go to the list while each warp counts, over its
      // segment of select_in_order_keyed's ordered write, the keys above the bin (all > T).
      // Once one warp has ranked the list, every warp adds the list's keys > T and == T that
      // lie in the segments before its own: the ordered write needs no counting pass.
      const int seg = select_segment(n, kTopkWarps);
      const int seg_lo = warp * seg, seg_hi = min(n, seg_lo + seg);
      int n_above = 0;
      for (int base = seg_lo; base < seg_hi; base += 32) {
        const int i = base + lane;
        const uint32_t q = i < seg_hi ? (keys[i] - lo) >> s : 0u;
        n_above += __popc(__ballot_sync(0xffffffffu, i < seg_hi && q > P));
        if (i < seg_hi && q == P) {
          const int slot = atomicAdd(&ss.list_n, 1);
          ss.list[slot] = keys[i];
          ss.list_i[slot] = i;
        }
      }
      if (lane == 0) sh.warp_gt[warp] = n_above;
      __syncthreads();
      if (tid < 32) warp_rank_pick(ss.list, cnt, rem, &sh.bin, &sh.above);
      __syncthreads();
      uint32_t t = sh.bin;
      int nd = sh.above;
      const bool before = lane < cnt && ss.list_i[lane] < seg_lo;
      const uint32_t lk = lane < cnt ? ss.list[lane] : 0u;
      // Every key equal to T lies in the list. When all of them win (distinct values: one), the
      // winners are the keys >= T: T - 1 with need 0 (no wrap: a candidate's key is at least
      // kNanKey = 1) takes the ordered write's loop without ties.
      if (nd == __popc(__ballot_sync(0xffffffffu, lane < cnt && lk == t))) {
        t -= 1u;
        nd = 0;
      }
      *gt_before = __reduce_add_sync(0xffffffffu, lane < warp ? sh.warp_gt[lane] : 0) +
                   __popc(__ballot_sync(0xffffffffu, before && lk > t));
      *eq_before = __popc(__ballot_sync(0xffffffffu, before && lk == t));
      *T_out = t;
      *need_out = nd;
      return true;
    }
    sp = s;
    s = s > 12 ? s - 12 : 0;
    __syncthreads();  // hist[b] and sh read by every thread
    zero_bins1(hist);
    __syncthreads();
  }
  return false;
}

// Two CTAs per SM where an SM holds 2048 threads (sm_80, sm_90, sm_100, sm_103: at most 32
// registers); sm_86 / sm_89 / sm_120 hold 1536 and take one.
#if defined(__CUDA_ARCH__) && \
    (__CUDA_ARCH__ == 800 || __CUDA_ARCH__ == 900 || __CUDA_ARCH__ == 1000 || __CUDA_ARCH__ == 1030)
#define DSATTN_TOPK_SAMPLED_MIN_BLOCKS 2
#else
#define DSATTN_TOPK_SAMPLED_MIN_BLOCKS 1
#endif

// grid (R), kTopkThreads, sampled_smem_bytes(mcap, k_pad). See the file comment. kMinMcap: mcap is
// kSampledMinMcap (every k <= 2048), a constant in the stream's stores. kWindow:
// window_threshold selects (else the top-12-bit radix digits of select_topk_by); kPipe: the
// stream's loads run a tile ahead. l2_ahead: the stream's L2 prefetch distance in tiles
// (sampled_prefetch; 0: none). kPipe calls (at most one row per SM) run one CTA per SM
// anyway, so they drop the two-CTA register bound: the extra registers measured 2-3 % faster
// (H200, k = 2048: 16 x 64K 23.3 -> 22.7 us, 128 x 128K 40.5 -> 39.3, 32 x 32K 18.0 -> 17.7).
template <typename T, bool kWindow, bool kPipe, bool kMinMcap>
__global__ void __launch_bounds__(kTopkThreads, kPipe ? 1 : DSATTN_TOPK_SAMPLED_MIN_BLOCKS)
    topk_sampled_kernel(const T* __restrict__ logits,  // [R, W] (row stride ld)
                        int64_t ld, TopkRowBounds rb, int k, int k_pad, int mcap, int l2_ahead, int full_len,
                        int full_rank, bool sorted, TopkOutputs out) {
  pdl_trigger();  // pdl.cuh: before any global-memory access
  pdl_wait();
  __shared__ TopkShared sh;
  __shared__ SampledShared ss;
  const int64_t r = blockIdx.x;
  const SampledRow<T> g = sampled_row(logits, ld, rb, r);
  const T* src = g.src;
  const int len = g.len;
  if (kMinMcap) mcap = kSampledMinMcap;  // equal to the launch's; a constant (sampled_stream's kPosWords)
  uint32_t* cand_key = topk_dyn_smem;
  int* cand_pos = reinterpret_cast<int*>(topk_dyn_smem + mcap);
  uint32_t* region = topk_dyn_smem + 2 * mcap;
  uint32_t* sel_key = region;
  int* sel_pos = reinterpret_cast<int*>(region + k_pad);
  if (len <= k) {
    finish_short_row(src, len, k, k_pad, sorted, sel_key, sel_pos, r, out);
    return;
  }
  constexpr int E = kSampledStreamBytes / static_cast<int>(sizeof(T));
  // The first l2_ahead tiles go out now, while the sample decides the threshold.
  if (l2_ahead > 0) sampled_prefetch(g, 0, l2_ahead * E * kTopkThreads, threadIdx.x == 0);
  const bool all = len <= mcap;
  uint32_t lo = 0u;
  if (!all) lo = sampled_threshold(sample_load(g), g, k, mcap, full_len, full_rank, region, sh);
  int n = -1;
  if (all || lo != 0u) {
    constexpr int kPosWords = kMinMcap ? kSampledMinMcap : 0;
    n = all ? sampled_stream<T, E, kPipe, kPosWords, true>(g, 0.0f, mcap, cand_key, cand_pos, ss, l2_ahead)
            : sampled_stream<T, E, kPipe, kPosWords, false>(g, key_to_float(lo), mcap, cand_key, cand_pos, ss, l2_ahead);
  }
  if (n >= k) {
    const auto pos_of = [&](int i) { return cand_pos[i]; };
    if (kWindow) {
      uint32_t T_sel;
      int need, gt_before, eq_before;
      const bool counted = window_threshold(cand_key, n, k, lo, region, sh, ss, &T_sel, &need, &gt_before, &eq_before);
      // Unsorted indices only: the winners' positions go straight to the output row (no staging
      // in sel_pos, no finish_row pass and barrier).
      const bool direct = out.indices_only(sorted);
      int* dst = direct ? out.indices + r * out.indices_ld : sel_pos;
      if (counted) {  // the list's exit: each warp's prefix is known
        const int seg = select_segment(n, kTopkWarps);
        const int seg_lo = static_cast<int>(threadIdx.x >> 5) * seg;
        select_in_order_write<true>([&](int i) { return cand_key[i]; }, seg_lo, min(n, seg_lo + seg), T_sel, need,
                                    gt_before, eq_before, sel_key, dst, pos_of);
      } else {
        select_in_order_by(cand_key, n, T_sel, need, kTopkWarps, sh.warp_gt, sh.warp_eq, sel_key, dst, pos_of,
                           false);
      }
      if (direct) return;
      __syncthreads();  // sel_key / sel_pos complete for finish_row
    } else {
      for (int i = threadIdx.x; i < kBins1; i += kTopkThreads) region[i] = 0;
      __syncthreads();
      for (int base = 0; base < n; base += kTopkThreads) {  // float bits -> keys, top-12-bit histogram
        const int i = base + static_cast<int>(threadIdx.x);
        uint32_t key = 0u;
        if (i < n) {
          key = topk_key(__uint_as_float(cand_key[i]));
          cand_key[i] = key;
        }
        hist_add(region, key >> 20, i < n);
      }
      __syncthreads();
      // No mlist (m_cap 0): the candidates are already few; digits 2-3 and the ordered write run
      // over all of them.
      select_topk_by(cand_key, n, k, k_pad, 0, region, sh, sel_pos, pos_of);
    }
  } else {
    sampled_fallback(src, len, k, region, sel_key, sel_pos, sh);
  }
  finish_row(sel_key, sel_pos, k, k, k_pad, sorted, src, r, out);
}

}  // namespace topk_detail
}  // namespace cuda
}  // namespace dsattn
