// Cluster top-k for few rows of 8K..64K positions (SPEC §3.3), sm_90 and newer: one thread-block
// cluster of C <= 8 CTAs per row, CTA c holding positions [c V 1024, (c + 1) V 1024) of the row in
// registers (V keys per thread, as topk_small_kernel does for one CTA). Each radix digit (bits
// 31..20, 19..10, 9..0) is histogrammed by every CTA in its own shared memory; each CTA pushes
// the histogram's 64-bin chunk totals into every CTA's shared memory, and after a cluster barrier
// each CTA finds the chunk from those, then the bin from the chunk's bins read from every CTA
// through distributed shared memory (cluster_digit_push; clusters of up to 4 CTAs read the totals
// remotely too, cluster_digit), so all CTAs find the same bin without a trip through global memory
// or another launch. Below the first digit, when its chosen bin holds at most kClusterGather keys
// (TopkTuning::cluster_gather), every CTA sends its keys in that bin and its count of keys in
// higher bins to every CTA (cluster_gather); after one cluster barrier each CTA finds the threshold
// among those keys and the winners before its own positions by itself (gather_resolve). Otherwise
// the second and third digits run cluster-wide like the first, and the per-CTA (greater, equal)
// totals are exchanged the same way. Either way each CTA places its winners in index order at the
// right offsets; unsorted output goes straight to the outputs, sorted output is gathered into CTA
// 0, which sorts and writes it. The split plan this replaces for such rows runs two kernels (chunk
// top-ks, then a final selection over C x k candidates) and writes / reads the candidates.
//
// Shared memory (dynamic, kClusterKernelSmemBytes; the fused cluster merge uses the first
// kClusterSmemWords u32 alike): [hist1 4096][csum1 64][hist2 1024][csum2 16]
// [hist3 1024][csum3 16] ... [tot 4] at word 8192: this CTA's histograms (read by the others) and
// their 64-bin chunk totals (read by the others where they pull them: the fused cluster merge, and
// clusters of up to 4 CTAs; larger clusters push them into ClusterPickShared instead), and its
// (greater, equal) totals. For sorted output, CTA 0's first
// 2 k_pad <= 8192 words (the histograms, no longer read by then) receive (sel_key, sel_pos).
// Then, at word kClusterGatherOffset, the gather's ClusterGatherShared (written by every CTA).
#pragma once
#include <cooperative_groups.h>

#include <cstdint>

#include "cuda/common/topk_grid.cuh"
#include "cuda/common/warp_scan.cuh"

namespace dsattn {
namespace cuda {
namespace topk_detail {

constexpr int kClusterMaxCtas = 8;  // portable cluster size
constexpr int kClusterV = 8;        // keys per thread
constexpr int kClusterV4 = 4;       // ... for rows of at most TopkTuning::cluster_v4_max_width
constexpr int kClusterSelWords = 2 * kMaxK;            // CTA 0's (sel_key, sel_pos), sorted output
constexpr int kClusterSmemWords = kClusterSelWords + 4;  // + this CTA's (greater, equal) totals
// The gather (cluster_gather): the first digit's chosen bin holds at most kClusterGather keys in
// the cluster, at most kClusterGather / C (rounded down to a power of two) from each CTA; every CTA
// receives all of them.
constexpr int kClusterGather = 4096;
struct ClusterGatherShared {
  uint32_t key[kClusterGather];  // [source rank][1 << gather_slot_bits(C)]: the bin's keys of each CTA
  int cnt[kClusterMaxCtas];      // keys in the bin, by source rank
  int above[kClusterMaxCtas];    // keys in higher bins, by source rank
  int local_n;                   // this CTA's slots taken so far
};
// topk_cluster_kernel's dynamic shared memory: the words above, then a ClusterGatherShared.
constexpr int kClusterGatherOffset = kClusterSmemWords + 4;  // words, 16-byte aligned
constexpr size_t kClusterKernelSmemBytes = kClusterGatherOffset * 4 + sizeof(ClusterGatherShared);
// With the kernel's static shared memory, more than 48 KiB: set_smem opts in (it does so only above).
static_assert(kClusterKernelSmemBytes > 48 * 1024, "topk_cluster_kernel: set_smem must raise its limit");
static_assert(kBins1 + kBins1 / 64 + 2 * (kBins2 + kBins2 / 64) <= kClusterSelWords, "histograms below tot");

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define DSATTN_TOPK_CLUSTER_DEVICE 1
#else
#define DSATTN_TOPK_CLUSTER_DEVICE 0
#endif

#if DSATTN_TOPK_CLUSTER_DEVICE
// Cluster barrier halves: arrive releases this thread's shared-memory writes (local or remote) to
// the cluster, wait acquires everyone's. Every thread of every CTA of the cluster takes part.
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}
#endif

// Histograms are summed over the cluster in two steps, both by one warp: first the 64-bin chunk
// totals of every CTA (which chunk holds the k_rem-th key), then that chunk's 64 bins of every CTA.
// Each CTA summing all C full histograms instead (128 KiB of distributed shared memory reads per
// CTA for the first digit at C = 8) took ~28 % of the kernel's warp samples (H200, 1 x 64K), though
// the call measured within +-0.7 us of this one (1 x 64K 18.8 vs 18.0, 1 x 16K 11.9 vs 12.7).
constexpr int kClusterChunk = 64;  // bins per chunk

// The total of chunk t / 16 of `hist` (bins [64 (t / 16), 64 (t / 16) + 64)), in every lane of
// thread t's 16-lane half of its warp. Threads t < nbins / 4 (whole warps) call it together.
__device__ __forceinline__ uint32_t chunk_total(const uint32_t* hist, int t) {
  const uint4 h = *reinterpret_cast<const uint4*>(hist + 4 * t);
  uint32_t s = h.x + h.y + h.z + h.w;
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
}

// This CTA's chunk totals: csum[i] = sum of hist[64 i, 64 i + 64). No barrier at the end: the
// cluster barrier after it publishes them with the histogram.
__device__ __forceinline__ void cluster_chunk_sums(const uint32_t* hist, uint32_t* csum, int nbins) {
  const int t = static_cast<int>(threadIdx.x);
  if (t < nbins / 4) {  // whole warps (nbins / 4 = 1024 or 256)
    const uint32_t s = chunk_total(hist, t);
    if ((t & 15) == 0) csum[t >> 4] = s;
  }
}

struct ClusterPick {
  uint32_t bin;
  int above;  // keys of the cluster in higher bins
  int count;  // keys of the cluster in the bin
};

#if DSATTN_TOPK_CLUSTER_DEVICE
// Distributed shared memory through explicit shared::cluster addresses (mapa + ld.shared::cluster).
// The loads are volatile asm, so they stay in program order, but nothing waits between them: the
// N loads of a pick step are all in flight at once.
// dsmem_map: a shared-window address of this CTA -> the same word in CTA `rank`; dsmem_addr: the
// same from a pointer.
__device__ __forceinline__ uint32_t dsmem_map(uint32_t a, int rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(rank));
  return r;
}
__device__ __forceinline__ uint32_t dsmem_addr(const void* p, int rank) {
  return dsmem_map(static_cast<uint32_t>(__cvta_generic_to_shared(p)), rank);
}
__device__ __forceinline__ void dsmem_st(uint32_t addr, uint32_t v) {
  asm volatile("st.shared::cluster.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t dsmem_ld(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared::cluster.u32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}

// Sum of word `i` of `a` (the same shared-memory offset in every CTA) over the CTAs of rank < n
// (n <= 32): lane q reads rank q's word, so the loads fly together. Warp-wide; every lane gets
// the sum.
__device__ __forceinline__ int cluster_prefix_word(const void* a, int i, int n) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  int v = lane < n ? static_cast<int>(dsmem_ld(dsmem_addr(a, lane) + 4u * static_cast<uint32_t>(i))) : 0;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Lane l holds the cluster-wide counts v0 at position hi and v1 at hi - 1 (counting down; positions
// < 0 count 0): the position holding the k_rem-th largest key, the keys above it and its count.
// Warp-wide; every lane gets the result.
__device__ __forceinline__ void pick_crossing(uint32_t v0, uint32_t v1, int hi, int k_rem, int* pos, int* above,
                                              int* count) {
  if (hi < 0) v0 = 0;
  if (hi < 1) v1 = 0;
  const int local = static_cast<int>(v0 + v1);
  const int incl = warp_inclusive_scan(local);
  const int excl = incl - local;
  const unsigned m = __ballot_sync(0xffffffffu, excl < k_rem && incl >= k_rem);
  const int src = __ffs(m) - 1;  // the totals reach k_rem, so some lane crosses it
  const bool first = excl + static_cast<int>(v0) >= k_rem;
  *pos = __shfl_sync(0xffffffffu, first ? hi : hi - 1, src);
  *above = __shfl_sync(0xffffffffu, first ? excl : excl + static_cast<int>(v0), src);
  *count = __shfl_sync(0xffffffffu, static_cast<int>(first ? v0 : v1), src);
}

// Sums over the C <= N CTAs of the values at positions hi and hi - 1 (counting down; positions < 0
// count 0) of array `a`, by lane; then the lane and place holding the k_rem-th largest. Warp-wide.
// All 2 N loads of a lane are issued before the first is used (ranks >= C read rank 0 and are
// dropped, so no load waits on a branch). The first version walked the ranks with a branch per
// rank and waited for each CTA's values in turn: H200, 1 x 64K (C = 8), %globaltimer per phase,
// each digit's cluster step took 3.3-4.6 us, 2.2-2.8 us this way.
template <int N>
__device__ __forceinline__ void cluster_pick_step(int C, const uint32_t* a, int hi, int k_rem, int* pos, int* above,
                                                  int* count) {
  uint32_t x0[N], x1[N];
  const uint32_t i0 = static_cast<uint32_t>(hi >= 0 ? hi : 0), i1 = static_cast<uint32_t>(hi >= 1 ? hi - 1 : 0);
#pragma unroll
  for (int q = 0; q < N; ++q) {
    const uint32_t ra = dsmem_addr(a, q < C ? q : 0);
    x0[q] = dsmem_ld(ra + 4u * i0);
    x1[q] = dsmem_ld(ra + 4u * i1);
  }
  uint32_t v0 = 0, v1 = 0;
#pragma unroll
  for (int q = 0; q < N; ++q) {
    v0 += q < C ? x0[q] : 0u;
    v1 += q < C ? x1[q] : 0u;
  }
  pick_crossing(v0, v1, hi, k_rem, pos, above, count);
}

template <int N>
__device__ __forceinline__ void cluster_pick_n(int C, const uint32_t* hist, const uint32_t* csum, int nbins, int k_rem,
                                               ClusterPick* pick) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int nch = nbins / kClusterChunk;  // 64 or 16: two chunks per lane at most
  int ch, above, count;
  cluster_pick_step<N>(C, csum, nch - 1 - 2 * lane, k_rem, &ch, &above, &count);
  int bin, above2;
  cluster_pick_step<N>(C, hist, ch * kClusterChunk + kClusterChunk - 1 - 2 * lane, k_rem - above, &bin, &above2,
                       &count);
  if (lane == 0) {
    pick->bin = static_cast<uint32_t>(bin);
    pick->above = above + above2;
    pick->count = count;
  }
}

// Warp 0, after the cluster barrier that published every CTA's hist and csum (nbins = 4096 or
// 1024): the bin of the cluster-wide histogram holding the k_rem-th largest key into *pick.
__device__ __forceinline__ void cluster_pick(int C, const uint32_t* hist, const uint32_t* csum, int nbins, int k_rem,
                                             ClusterPick* pick) {
  if (C <= 2) {
    cluster_pick_n<2>(C, hist, csum, nbins, k_rem, pick);
  } else if (C <= 4) {
    cluster_pick_n<4>(C, hist, csum, nbins, k_rem, pick);
  } else {
    cluster_pick_n<kClusterMaxCtas>(C, hist, csum, nbins, k_rem, pick);
  }
}

// The three digits' histograms of this CTA and their chunk totals, at the start of the dynamic
// shared memory (see the top comment).
struct ClusterHists {
  uint32_t *hist1, *csum1, *hist2, *csum2, *hist3, *csum3;
  __device__ explicit ClusterHists(uint32_t* base)
      : hist1(base),
        csum1(base + kBins1),
        hist2(csum1 + kBins1 / kClusterChunk),
        csum2(hist2 + kBins2),
        hist3(csum2 + kBins2 / kClusterChunk),
        csum3(hist3 + kBins2) {}
  __device__ void zero() const {  // block-wide; the caller syncs before the first hist_add
    for (int i = threadIdx.x; i < kBins1; i += kTopkThreads) hist1[i] = 0;
    for (int i = threadIdx.x; i < kBins2; i += kTopkThreads) {
      hist2[i] = 0;
      hist3[i] = 0;
    }
  }
};

// After this CTA's histogram of one digit is complete in its threads: publishes it with its chunk
// totals, and the bin of the cluster-wide histogram holding the k_rem-th key lands in *pick (every
// thread may read it on return; it is rewritten only after the next cluster barrier). Block-wide,
// every CTA of the cluster. (The fused cluster merge's, and topk_cluster_kernel's for C <= 4.)
__device__ __forceinline__ void cluster_digit(int C, const uint32_t* hist, uint32_t* csum, int nbins, int k_rem,
                                              ClusterPick* pick) {
  __syncthreads();
  cluster_chunk_sums(hist, csum, nbins);
  cluster_sync();
  if (threadIdx.x < 32) cluster_pick(C, hist, csum, nbins, k_rem, pick);
  __syncthreads();
}

// Every CTA's 64-bin chunk totals of each digit, pushed into every CTA of the cluster before the
// digit's cluster barrier (so the first step of the pick reads local shared memory), and the bins
// of the chosen chunk, copied from each CTA after it.
struct ClusterPickShared {
  uint32_t csum[3][kClusterMaxCtas][kClusterChunk];  // [digit][source rank][chunk]
  uint32_t bins[kClusterMaxCtas][kClusterChunk];     // [source rank][bin of the chosen chunk]
};

// Warp-wide, on rows in this CTA's shared memory: lane l sums positions hi = n - 1 - 2 l and hi - 1
// (positions < 0 count 0) over the C rows rows[q * kClusterChunk ..] (n <= kClusterChunk), then
// pick_crossing over those sums (the position holding the k_rem-th largest key, the keys above it
// and its count). Both steps of cluster_digit_push's pick.
__device__ __forceinline__ void local_rows_pick(const uint32_t* rows, int C, int n, int k_rem, int* pos, int* above,
                                                int* count) {
  const int hi = n - 1 - 2 * static_cast<int>(threadIdx.x & 31);
  uint32_t v0 = 0, v1 = 0;
  for (int q = 0; q < C; ++q) {
    v0 += hi >= 0 ? rows[q * kClusterChunk + hi] : 0u;
    v1 += hi >= 1 ? rows[q * kClusterChunk + hi - 1] : 0u;
  }
  pick_crossing(v0, v1, hi, k_rem, pos, above, count);
}

// After this CTA's histogram of digit d (0, 1, 2; nbins = 4096 or 1024 bins) is complete in its
// threads: pushes its chunk totals to every CTA, and after the cluster barrier the bin of the
// cluster-wide histogram holding the k_rem-th key lands in *pick (every thread may read it on
// return; it is rewritten only after the next cluster barrier). Block-wide, every CTA of the
// cluster. Remote reads: one round (the chosen chunk's bins, warp w < C reading CTA w), where
// reading the totals too took a second round (H200, 1 x 64K, %globaltimer: ~1.4-1.6 us per pick).
// d = 0 first waits on the cluster barrier the kernel arrived on at its start: no CTA writes to
// another's shared memory before every CTA of the cluster is running.
__device__ __forceinline__ void cluster_digit_push(int C, int rank, int d, const uint32_t* hist, int nbins,
                                                   int k_rem, ClusterPick* pick, ClusterPickShared& ps) {
  __syncthreads();
  if (d == 0) cluster_wait();
  {
    const int t = static_cast<int>(threadIdx.x);
    if (t < nbins / 4) {  // whole warps (nbins / 4 = 1024 or 256)
      const uint32_t s = chunk_total(hist, t);
      const int sub = t & 15;  // lane q < C of the 16 holding chunk t / 16 pushes it to CTA q
      if (sub < C) dsmem_st(dsmem_addr(&ps.csum[d][rank][t >> 4], sub), s);
    }
  }
  cluster_sync();
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  if (warp == 0) {
    int ch, above, count;
    local_rows_pick(&ps.csum[d][0][0], C, nbins / kClusterChunk, k_rem, &ch, &above, &count);
    if (lane == 0) {
      pick->bin = static_cast<uint32_t>(ch);
      pick->above = above;
    }
  }
  __syncthreads();
  const int ch = static_cast<int>(pick->bin), above = pick->above;
  if (warp < C) {
    const uint32_t ra = dsmem_addr(hist, warp) + 4u * static_cast<uint32_t>(ch * kClusterChunk);
    for (int i = lane; i < kClusterChunk; i += 32) ps.bins[warp][i] = dsmem_ld(ra + 4u * static_cast<uint32_t>(i));
  }
  __syncthreads();
  if (warp == 0) {
    int bin, above2, count;
    local_rows_pick(&ps.bins[0][0], C, kClusterChunk, k_rem - above, &bin, &above2, &count);
    if (lane == 0) {
      pick->bin = static_cast<uint32_t>(ch * kClusterChunk + bin);
      pick->above = above + above2;
      pick->count = count;
    }
  }
  __syncthreads();
}

// The gather's slots per source CTA: kClusterGather / C rounded down to a power of two (2048, 1024
// or 512), so that a slot's source is a shift.
__device__ __forceinline__ int gather_slot_bits(int C) { return C <= 2 ? 11 : C <= 4 ? 10 : 9; }

// The gather (TopkTuning::cluster_gather), once the first digit chose bin b1 of the cluster-wide
// histogram and that bin holds at most kClusterGather keys: this CTA's keys in the bin are stored
// into every CTA's ClusterGatherShared (slots [rank Gs, rank Gs + Gs), Gs = 1 << gather_slot_bits;
// keys past Gs are dropped, and the count tells every CTA so), with this CTA's counts of keys in
// the bin and in higher bins (from its own histogram and chunk totals: own_csum). Block-wide; no
// barrier: the cluster barrier after it publishes everything. Replaces the second and third
// cluster-wide digits (a histogram, a cluster barrier and a remote pick each) and the exchange of
// per-CTA counts (another cluster barrier and remote reads) by one cluster barrier: each CTA then
// finds the threshold among the gathered keys itself (gather_resolve). Its code is short and
// rolled where it can be: each phase of the kernel is fetched cold (see topk_cluster_kernel).
template <int V>
__device__ __forceinline__ void cluster_gather(const uint32_t (&key)[V], int base, int len, uint32_t b1, int C,
                                               int rank, const uint32_t* hist1, const uint32_t* own_csum,
                                               ClusterGatherShared& gs) {
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int Gs = 1 << gather_slot_bits(C);
  uint32_t m = 0u;  // this thread's keys in the bin
#pragma unroll
  for (int v = 0; v < V; ++v) m |= base + v < len && (key[v] >> 20) == b1 ? 1u << v : 0u;
  const int n = __popc(m);
  const int incl = warp_inclusive_scan(n);
  if (__shfl_sync(0xffffffffu, incl, 31) != 0) {  // warp-uniform
    int slot0 = 0;
    if (lane == 31) slot0 = atomicAdd(&gs.local_n, incl);
    int slot = __shfl_sync(0xffffffffu, slot0, 31) + incl - n;  // this thread's first
    const uint32_t row0 = static_cast<uint32_t>(__cvta_generic_to_shared(&gs.key[rank * Gs]));
#pragma unroll 1
    for (; m != 0u; m &= m - 1u, ++slot) {
      const int v = __ffs(m) - 1;
      uint32_t kv = key[0];
#pragma unroll
      for (int u = 1; u < V; ++u) kv = v == u ? key[u] : kv;
      if (slot < Gs) {
        const uint32_t a = row0 + 4u * static_cast<uint32_t>(slot);
#pragma unroll 1
        for (int q = 0; q < C; ++q) dsmem_st(dsmem_map(a, q), kv);
      }
    }
  }
  if (warp == 1) {  // keys in higher bins: chunks above b1's, then bins above b1 in its chunk
    const int ch = static_cast<int>(b1) / kClusterChunk, in = static_cast<int>(b1) % kClusterChunk;
    uint32_t s = 0u;
#pragma unroll
    for (int j = lane; j < kClusterChunk; j += 32) {
      s += j > ch ? own_csum[j] : 0u;
      s += j > in ? hist1[ch * kClusterChunk + j] : 0u;
    }
    s = __reduce_add_sync(0xffffffffu, s);
    const uint32_t cnt = hist1[b1];
    if (lane < C) {
      dsmem_st(dsmem_addr(&gs.cnt[rank], lane), cnt);
      dsmem_st(dsmem_addr(&gs.above[rank], lane), s);
    }
  }
}

// After the gather's cluster barrier, in every CTA alike: false when some CTA had more keys in the
// bin than its slots (uniform: every CTA reads the same counts; the caller then runs the
// cluster-wide digits). Else the threshold among the gathered keys (the k_rem-th largest of the
// bin, as the second and third digits would find it: T_key / need as digits_done gives them),
// the keys in higher bins of the CTAs before this one (*above_before), and this thread's share of
// the gathered keys of those CTAs above T / equal to T (*list_packed: equal << 16 | greater).
// hist2 / hist3: zeroed kBins2-word histograms. Block-wide; ends synced.
// Tried and dropped (H200, topk, k = 2048, against this form in other calls of one session): one
// warp finding each digit's bin (two barriers a digit instead of three; 1 x 64K 13.0 -> 13.2 us,
// 8 x 64K 14.6 -> 15.5), and one warp doing the whole selection, histograms included (1 x 64K
// 15.9, 8 x 64K 19.1-19.3: its loops over the keys wait on each load).
__device__ __forceinline__ bool gather_resolve(uint32_t b1, int k_rem, int C, int rank, const ClusterGatherShared& gs,
                                               uint32_t* hist2, uint32_t* hist3, TopkShared& sh, uint32_t* T_key,
                                               int* need, int* list_packed, int* above_before) {
  const int tid = static_cast<int>(threadIdx.x);
  const int bits = gather_slot_bits(C), Gs = 1 << bits;
  bool fits = true;
  int before = 0;
#pragma unroll 1
  for (int q = 0; q < C; ++q) {
    fits = fits && gs.cnt[q] <= Gs;
    before += q < rank ? gs.above[q] : 0;
  }
  if (!fits) return false;
  constexpr int J = kClusterGather / kTopkThreads;
  uint32_t lk[J];
  unsigned val = 0u;  // bit j: slot tid + j 1024 holds a key
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int i = tid + j * kTopkThreads, q = i >> bits;
    const bool ok = q < C && (i & (Gs - 1)) < gs.cnt[q < C ? q : 0];
    lk[j] = ok ? gs.key[i] : 0u;
    val |= ok ? 1u << j : 0u;
  }
  // The second digit (bits 19..10), then, unless its bin is needed whole, the third (9..0): one
  // rolled copy of the code, as the kernel's own digits.
  uint32_t p = b1;
  int kr = k_rem;
#pragma unroll 1
  for (int d = 1;; ++d) {
    const int shift = d == 1 ? 10 : 0;
    uint32_t* hist = d == 1 ? hist2 : hist3;
    uint32_t bin[J];
    bool act[J];
#pragma unroll
    for (int j = 0; j < J; ++j) {
      act[j] = (val >> j & 1u) != 0u && (lk[j] >> (shift + 10)) == p;
      bin[j] = (lk[j] >> shift) & (kBins2 - 1u);
    }
    hist_add_v<J>(hist, bin, act);
    __syncthreads();
    find_bin(hist, kBins2, kr, sh);  // ends synced
    const uint32_t b = sh.bin;
    p = (p << 10) | b;
    kr -= sh.above;
    if (digits_done(d, p, kr, static_cast<int>(hist[b]), T_key, need)) break;
  }
  int g = 0, e = 0;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const bool mine = (val >> j & 1u) != 0u && ((tid + j * kTopkThreads) >> bits) < rank;
    g += mine && lk[j] > *T_key ? 1 : 0;
    e += mine && lk[j] == *T_key ? 1 : 0;
  }
  *list_packed = (e << 16) | g;
  *above_before = before;
  return true;
}

// block_exclusive_scan<false> of v, plus the block-wide total of `extra` in every thread's result
// (one barrier).
__device__ __forceinline__ int block_exclusive_scan_plus(int v, int extra, TopkShared& sh) {
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int x = warp_inclusive_scan(v);
  const int e = __reduce_add_sync(0xffffffffu, extra);
  if (lane == 31) sh.warp_scan[warp] = x;
  if (lane == 0) sh.warp_gt[warp] = e;
  __syncthreads();
  const int before = __reduce_add_sync(0xffffffffu, (lane < warp ? sh.warp_scan[lane] : 0) + sh.warp_gt[lane]);
  return before + x - v;
}
#endif

// grid (C, R), cluster (C, 1, 1): CTA c of cluster r works on row r. Rows of len <= k take CTA 0
// alone (finish_short_row; write_short_row for unsorted output); the others return at once (no
// cluster barrier is reached then).
// kSorted (sorted output) and kPush (C > 4, see below) are template parameters so that each
// kernel holds only the code it runs: each phase of this kernel runs once per launch and is
// fetched cold, and with both variants inline every digit and the write began with a jump over
// the other variant's code (H200, f32, 8 keys per thread, unsorted, push: 8,344 -> 3,064 SASS
// instructions with the rolled digits below and write_short_row; paged_mqa_topk 1 x 64K 26.7-27.0
// -> 25.5-25.6 us, BENCHMARKS.md 2026-12-03).
// kGather: the gather's code is compiled in (the argument `gather` then decides per call).
template <typename T, int V, bool kSorted, bool kPush, bool kGather>
__global__ void __launch_bounds__(kTopkThreads)
    topk_cluster_kernel(const T* __restrict__ logits,  // [R, W] (row stride ld)
                        int64_t ld, TopkRowBounds rb, int k, int k_pad, bool gather, TopkOutputs out) {
  pdl_trigger();  // pdl.cuh: before any global-memory access
  pdl_wait();
#if DSATTN_TOPK_CLUSTER_DEVICE
  namespace cg = cooperative_groups;
  __shared__ TopkShared sh;
  __shared__ ClusterPick pick;
  __shared__ ClusterPickShared ps;
  const cg::cluster_group cluster = cg::this_cluster();
  const int c = static_cast<int>(cluster.block_rank());
  const int C = static_cast<int>(cluster.num_blocks());
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t r = blockIdx.y;
  int start, len;
  rb.get(r, &start, &len);
  const T* src = row_ptr(logits, ld, r) + start;
  const ClusterHists h(topk_dyn_smem);
  int* tot = reinterpret_cast<int*>(topk_dyn_smem + kClusterSelWords);
  ClusterGatherShared& gs = *reinterpret_cast<ClusterGatherShared*>(topk_dyn_smem + kClusterGatherOffset);
  uint32_t* sel_key = topk_dyn_smem;
  int* sel_pos = reinterpret_cast<int*>(topk_dyn_smem + k_pad);
  if (len <= k) {  // uniform over the cluster
    if (c == 0) {
      if constexpr (kSorted) {
        finish_short_row(src, len, k, k_pad, kSorted, sel_key, sel_pos, r, out);
      } else {
        write_short_row(src, len, k, r, out);
      }
    }
    return;
  }
  // Clusters of more than 4 CTAs push their chunk totals (cluster_digit_push); smaller ones pull
  // them (cluster_digit), each where it measured faster (H200, topk, k = 2048, pull -> push: 1 x
  // 64K (C = 8) 13.5-13.6 -> 13.4, 8 x 64K 16.8 -> 16.4, 5 x 40000 (C = 5) 16.1 -> 15.3 us; but
  // 1 x 16K (C = 2) 11.5 -> 12.0-12.35, 1 x 32K (C = 4) 12.0-12.1 -> 12.5-12.6; BENCHMARKS.md).
  // kPush == (C > 4): the launch picks the kernel by the cluster size.
  if constexpr (kPush) cluster_arrive();  // waited on before the first push to another CTA
  const auto digit = [&](int d, const uint32_t* hist, uint32_t* csum, int nbins, int k_rem) {
    if constexpr (kPush) {
      cluster_digit_push(C, c, d, hist, nbins, k_rem, &pick, ps);
    } else {
      cluster_digit(C, hist, csum, nbins, k_rem, &pick);
    }
  };
  h.zero();
  if (tid == 0) gs.local_n = 0;
  const int base = c * V * kTopkThreads + tid * V;
  uint32_t key[V];
  load_run_keys<T, V>(src + base, len - base, reinterpret_cast<uintptr_t>(src) % 16 == 0, key);
  bool act[V];
  uint32_t bin[V];
  run_digit<20, 12>(key, base, len, 0u, act, bin);
  __syncthreads();  // histograms zeroed
  hist_add_v<V>(h.hist1, bin, act);
  digit(0, h.hist1, h.csum1, kBins1, k);
  uint32_t prefix = pick.bin;  // the key's bits above the next digit
  int k_rem = k - pick.above;
  uint32_t T_key;
  int need;
  int g_before = 0, e_before = 0;
  bool gathered = false;
  if (kGather && gather && pick.count <= kClusterGather) {  // uniform over the cluster
    cluster_gather<V>(key, base, len, prefix, C, c, h.hist1, kPush ? &ps.csum[0][c][0] : h.csum1, gs);
    cluster_sync();  // every CTA's keys in the bin, and its counts
    int list_packed;
    gathered = gather_resolve(prefix, k_rem, C, c, gs, h.hist2, h.hist3, sh, &T_key, &need, &list_packed, &g_before);
    if (gathered) {
      const int packed = block_exclusive_scan_plus(run_counts(key, base, len, T_key), list_packed, sh);
      g_before += packed & 0xffff;
      e_before = packed >> 16;
    }
    // Else some CTA had more keys in the bin than its slots: the cluster-wide digits below.
  }
  if (!gathered) {
    // The second and third digits in one rolled copy of their code, as in topk_small_kernel; the
    // whole 22-bit bin needed ends it after the second (uniform over the cluster).
#pragma unroll 1
    for (int d = 1;; ++d) {
      uint32_t* hist = d == 1 ? h.hist2 : h.hist3;
      run_digit10(key, base, len, prefix, d == 1 ? 10 : 0, act, bin);
      hist_add_v<V>(hist, bin, act);
      digit(d, hist, d == 1 ? h.csum2 : h.csum3, kBins2, k_rem);
      prefix = (prefix << 10) | pick.bin;
      k_rem -= pick.above;
      if (digits_done(d, prefix, k_rem, pick.count, &T_key, &need)) break;
    }
    // Counts per CTA stay below 2^15 (V x 1024 <= 8192 keys), so both prefixes share one scan.
    const int counts = run_counts(key, base, len, T_key);
    const int packed = block_exclusive_scan<false>(counts, sh);  // the cluster barrier follows
    g_before = packed & 0xffff;
    e_before = packed >> 16;
    if (tid == kTopkThreads - 1) {
      tot[0] = g_before + (counts & 0xffff);
      tot[1] = e_before + (counts >> 16);
    }
    cluster_sync();  // every CTA's totals
    g_before += cluster_prefix_word(tot, 0, c);  // the winners of the CTAs before this one (index order)
    e_before += cluster_prefix_word(tot, 1, c);
  }
  // One copy of the write for both ways (each phase's code is fetched cold: see above).
  if constexpr (!kSorted) {
    // After the gather no CTA reads another's shared memory any more; after the digits, this
    // CTA's reads of the others are done (arrive), and it waits before exiting.
    if (!gathered) cluster_arrive();
    run_write(key, base, len, T_key, need, g_before, e_before, src, r, out);  // index order
    if (!gathered) cluster_wait();  // no CTA leaves while another may still read its shared memory
  } else {
    if (gathered) cluster_sync();  // every CTA is past its selection: CTA 0's histograms take the winners
    run_stage(key, base, len, T_key, need, g_before, e_before, cluster.map_shared_rank(sel_key, 0),
              cluster.map_shared_rank(sel_pos, 0));  // into CTA 0
    cluster_sync();  // the winners are in CTA 0; every read of another CTA is done
    if (c == 0) finish_row(sel_key, sel_pos, k, k, k_pad, kSorted, src, r, out);
  }
#else
  (void)logits; (void)ld; (void)rb; (void)k; (void)k_pad; (void)gather; (void)out;
  __trap();  // never launched: the plan takes this kernel only on devices with cluster launch
#endif
}

}  // namespace topk_detail
}  // namespace cuda
}  // namespace dsattn
