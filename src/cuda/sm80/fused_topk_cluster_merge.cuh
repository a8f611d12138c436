// Cluster merge of the fused indexer + top-k (SPEC §3.4) for few rows spread over many pieces
// (batch-1 decode: a 64K-state row is ~400 pieces of ~165 states), sm_90 and newer. One
// thread-block cluster of C <= 8 CTAs per row replaces the split merge's two launches (level 1:
// ~13 CTAs per row streaming their slots with a running threshold, level 2: a merge of their
// top-ks) and the row histograms they need from the scoring kernel:
//   - every CTA reads the row's slot headers (one per thread) and scans the counts, so candidate
//     f of the row (slots in order = increasing state index) is entry f - off[w] of slot w;
//   - CTA c takes the c-th of C equal shares of the candidates, thread t a contiguous run of it;
//   - the radix digits of topk_cluster.cuh (histograms summed over the cluster through
//     distributed shared memory), a (greater, equal) scan per CTA and an exchange of the CTA
//     totals place every winner in index order; unsorted output goes straight to the outputs,
//     sorted output is gathered into CTA 0.
// A thread's run of at most kClusterMergeRun candidates (rows of up to C x 8192 candidates, e.g. a
// 64K-state row) is read once and held in registers (CmHeld), as topk_cluster_kernel holds its
// keys; longer runs are re-read from global memory (L2) on every pass (CmRun), so the kernel is
// correct for any number of candidates (a row longer than its block table included), only slower
// when it is large. H200, paged_mqa_topk k = 2048, DSATTN_FUSED_CLUSTER=1, re-read / held, us
// (same device call, two runs): 1 x 64K 43.6-43.9 / 41.9-42.4, 2 x 64K 48.5-48.7 / 46.7-47.4,
// 4 x 64K 55.6-56.0 / 54.7-54.8, 8 x 64K 69.8-70.3 / 69.1-69.8. Absent keys (0: states outside the row's window in dense pieces)
// never count. Values come from the keys (the scores only ever existed as keys).
//
// Shared memory (dynamic, cluster_merge_smem_bytes()): [topk_cluster's histograms / CTA 0's
// sorted winners: kClusterSelWords][tot 4][slot_off kTopkThreads + 1][slot_t0 kTopkThreads].
#pragma once
#include <cstdint>

#include "cuda/common/topk_cluster.cuh"
#include "cuda/sm80/fused_topk_collect.cuh"

namespace dsattn {
namespace cuda {
namespace fused_topk {

constexpr int kClusterMergeMaxSlots = topk_detail::kTopkThreads;  // slots per row: one header per thread
constexpr int kClusterMergeRun = 8;                                // candidates per thread and step

__host__ __device__ constexpr size_t cluster_merge_smem_bytes() {
  return (static_cast<size_t>(topk_detail::kClusterSelWords) + 4 + 2 * kClusterMergeMaxSlots + 1) * 4;
}

#if DSATTN_TOPK_CLUSTER_DEVICE
// Exclusive prefix over the block (thread order) of a 64-bit value and the block total. Ends synced.
__device__ __forceinline__ uint64_t cm_block_scan64(uint64_t v, uint64_t* warp_tot, uint64_t* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint64_t incl = warp_inclusive_scan(v);
  if (lane == 31) warp_tot[warp] = incl;
  __syncthreads();
  uint64_t before = 0, all = 0;
  for (int w = 0; w < topk_detail::kTopkWarps; ++w) {
    const uint64_t t = warp_tot[w];
    before += w < warp ? t : 0;
    all += t;
  }
  __syncthreads();
  *total = all;
  return before + incl - v;
}

// A thread's contiguous run [lo, hi) of the row's candidates, read in steps of kClusterMergeRun.
struct CmRun {
  const CollectorBuffers* b;
  int64_t s0;
  int j;
  const int* off;  // [ns + 1]
  const int* t0;   // [ns]
  int ns, lo, hi;
  int w_lo;        // slot of candidate lo

  __device__ __forceinline__ int slot_of(int f) const {  // the slot holding candidate f < off[ns]
    int w = 0;
#pragma unroll
    for (int step = kClusterMergeMaxSlots / 2; step > 0; step >>= 1) {
      if (w + step < ns && off[w + step] <= f) w += step;
    }
    return w;
  }
  // Keys of candidates [f0, f0 + kClusterMergeRun) (0 past hi) and their slots; w: the slot of the
  // last one read, carried from step to step.
  __device__ __forceinline__ void keys(int f0, int& w, uint32_t (&key)[kClusterMergeRun],
                                       int (&slot)[kClusterMergeRun]) const {
#pragma unroll
    for (int v = 0; v < kClusterMergeRun; ++v) {
      const int f = f0 + v;
      key[v] = topk_detail::kAbsentKey;
      if (f < hi) {
        while (off[w + 1] <= f) ++w;
        key[v] = b->key[b->offset(s0 + w, j) + (f - off[w])];
      }
      slot[v] = w;
    }
  }
  // fn(key, slot, f0) for each step of the run: key[v] is candidate f0 + v (absent past hi), held
  // in slot[v] (the digit passes ignore the slots; the output passes need them for the indices).
  template <class Fn>
  __device__ __forceinline__ void for_each(int steps, Fn fn) const {
    int w = w_lo;
    for (int st = 0; st < steps; ++st) {
      const int f0 = lo + st * kClusterMergeRun;
      uint32_t key[kClusterMergeRun];
      int slot[kClusterMergeRun];
      keys(f0, w, key, slot);
      fn(key, slot, f0);
    }
  }
  __device__ __forceinline__ int32_t index_of(int f, int w) const {
    const int p = f - off[w];
    return t0[w] >= 0 ? t0[w] + p : b->idx[b->offset(s0 + w, j) + p];
  }
};

// A run of at most one step, read once into registers. Its slots are not held (register room at
// 1024 threads): index_of finds a winner's slot again.
struct CmHeld {
  const CmRun* run;
  uint32_t key[kClusterMergeRun];
  __device__ __forceinline__ explicit CmHeld(const CmRun& r) : run(&r) {
    int w = r.w_lo;
    int slot[kClusterMergeRun];
    r.keys(r.lo, w, key, slot);
  }
  template <class Fn>
  __device__ __forceinline__ void for_each(int, Fn fn) const {
    const int slot[kClusterMergeRun] = {};  // unused (index_of)
    fn(key, slot, run->lo);
  }
  __device__ __forceinline__ int32_t index_of(int f, int) const { return run->index_of(f, run->slot_of(f)); }
};

// One radix digit over the run: keys present (not absent) whose bits from kShift + kBits up equal
// prefix, histogrammed by bits [kShift, kShift + kBits). Also counts the present keys. Block-wide
// (the step count is uniform: every run of the CTA has the same length bound).
template <int kShift, int kBits, class Src>
__device__ __forceinline__ int cm_digit_pass(const Src& run, int steps, uint32_t prefix, uint32_t* hist) {
  int present = 0;
  run.for_each(steps, [&](const uint32_t (&key)[kClusterMergeRun], const int (&)[kClusterMergeRun], int) {
    uint32_t bin[kClusterMergeRun];
    bool act[kClusterMergeRun];
    topk_detail::run_digit<kShift, kBits>(key, 0, kClusterMergeRun, prefix, act, bin);
#pragma unroll
    for (int v = 0; v < kClusterMergeRun; ++v) {
      act[v] = act[v] && key[v] != topk_detail::kAbsentKey;
      present += key[v] != topk_detail::kAbsentKey ? 1 : 0;
    }
    topk_detail::hist_add_v<kClusterMergeRun>(hist, bin, act);
  });
  return present;
}
#endif

// grid (C, R), cluster (C, 1, 1): the CTAs of cluster r merge row r. The row's slots must number
// at most kClusterMergeMaxSlots (the host checks: a row spans at most `partitions` + 1 slots).
template <class SlotRange>
__global__ void __launch_bounds__(topk_detail::kTopkThreads)
    fused_topk_cluster_merge_kernel(CollectorBuffers b, SlotRange slots, int k, int k_pad, bool sorted,
                                    topk_detail::TopkOutputs out) {
  pdl_trigger();  // pdl.cuh: before any global-memory access
  pdl_wait();
#if DSATTN_TOPK_CLUSTER_DEVICE
  using namespace topk_detail;
  namespace cg = cooperative_groups;
  __shared__ TopkShared sh;
  __shared__ ClusterPick pick;
  __shared__ uint64_t warp_tot64[kTopkWarps];
  __shared__ int s_present;  // present keys of the row (cluster-wide)
  const cg::cluster_group cluster = cg::this_cluster();
  const int c = static_cast<int>(cluster.block_rank());
  const int C = static_cast<int>(cluster.num_blocks());
  const int tid = static_cast<int>(threadIdx.x);
  const bool warp0 = tid < 32;
  const int64_t r = blockIdx.y;
  int64_t s0, s1;
  int j, len;
  slots.get(r, &s0, &s1, &j, &len);  // block-wide
  if (slots.skipped(len)) {  // uniform over the cluster: a row the scoring kernel skipped
    if (c == 0) topk_detail::write_position_row(len, k, r, out);
    return;
  }
  const ClusterHists h(topk_dyn_smem);
  int* tot = reinterpret_cast<int*>(topk_dyn_smem + kClusterSelWords);  // greater, equal, present
  int* slot_off = tot + 4;
  int* slot_t0 = slot_off + kClusterMergeMaxSlots + 1;
  uint32_t* sel_key = topk_dyn_smem;
  int* sel_pos = reinterpret_cast<int*>(topk_dyn_smem + k_pad);

  // Slot headers: counts (clamped to the buffer) and dense starts; their prefix = candidate offsets.
  const int ns = static_cast<int>(s1 - s0);
  int n = 0, t0 = -1;
  if (tid < ns) {
    const int32_t* hdr = b.header_of(s0 + tid, j);
    n = min(max(hdr[0], 0), b.ccap);
    t0 = hdr[1] - 1;
  }
  int N;
  const int off = group_exclusive_scan(n, sh.warp_scan, &N, CtaGroup());  // ends synced
  if (tid < ns) {
    slot_off[tid] = off;
    slot_t0[tid] = t0;
  }
  if (tid == 0) {
    slot_off[ns] = N;
    tot[2] = 0;
  }
  h.zero();
  __syncthreads();
  // This CTA's share of the candidates and this thread's run of it.
  const int per_cta = (N + C - 1) / C;
  const int lo_c = min(c * per_cta, N), hi_c = min(lo_c + per_cta, N);
  const int L = (hi_c - lo_c + kTopkThreads - 1) / kTopkThreads;
  const int steps = (L + kClusterMergeRun - 1) / kClusterMergeRun;
  CmRun run;
  run.b = &b;
  run.s0 = s0;
  run.j = j;
  run.off = slot_off;
  run.t0 = slot_t0;
  run.ns = ns;
  run.lo = min(lo_c + tid * L, hi_c);
  run.hi = min(run.lo + L, hi_c);
  run.w_lo = run.lo < run.hi ? run.slot_of(run.lo) : 0;

  // The selection over this thread's run: one pass per digit, the counts, the output. Every CTA
  // passes the same cluster barriers whichever source it holds (steps differ only in the last CTA).
  auto select = [&](const auto& src) {
    // Digit 1 (and the present keys of the row).
    const int present = cm_digit_pass<20, 12>(src, steps, 0u, h.hist1);
    const int warp_present = __reduce_add_sync(0xffffffffu, present);
    if ((tid & 31) == 0 && warp_present > 0) atomicAdd(&tot[2], warp_present);
    __syncthreads();
    cluster_chunk_sums(h.hist1, h.csum1, kBins1);
    cluster_sync();  // every CTA's digit-1 histogram, chunk totals and present count
    if (warp0) {
      const int lane = tid & 31;
      const int p = cluster_prefix_word(tot, 2, C);
      if (lane == 0) s_present = p;
      if (p > k) cluster_pick(C, h.hist1, h.csum1, kBins1, k, &pick);
    }
    __syncthreads();
    const int P = s_present;
    uint32_t T_key = kAbsentKey;  // P <= k: every present key wins
    int need = 0;
    if (P > k) {  // uniform over the cluster
      const uint32_t b1 = pick.bin;
      int k_rem = k - pick.above;
      cm_digit_pass<10, 10>(src, steps, b1, h.hist2);
      cluster_digit(C, h.hist2, h.csum2, kBins2, k_rem, &pick);
      const uint32_t p2 = (b1 << 10) | pick.bin;  // key >> 10
      k_rem -= pick.above;
      if (p2 > 0u && pick.count == k_rem) {  // the whole 22-bit bin is needed (uniform)
        T_key = (p2 << 10) - 1u;
      } else {
        cm_digit_pass<0, 10>(src, steps, p2, h.hist3);
        cluster_digit(C, h.hist3, h.csum3, kBins2, k_rem, &pick);
        T_key = (p2 << 10) | pick.bin;
        need = k_rem - pick.above;
      }
    }
    // (greater, equal) counts of the run, their block prefix and the CTA totals.
    uint64_t ge = 0;
    src.for_each(steps, [&](const uint32_t (&key)[kClusterMergeRun], const int (&)[kClusterMergeRun], int) {
  #pragma unroll
      for (int v = 0; v < kClusterMergeRun; ++v) {
        if (key[v] == kAbsentKey) continue;
        ge += key[v] > T_key ? 1u : 0u;
        ge += key[v] == T_key ? uint64_t(1) << 32 : 0u;
      }
    });
    uint64_t cta_ge;
    const uint64_t before = cm_block_scan64(ge, warp_tot64, &cta_ge);
    int g_before = static_cast<int>(before & 0xffffffffu), e_before = static_cast<int>(before >> 32);
    if (tid == 0) {
      tot[0] = static_cast<int>(cta_ge & 0xffffffffu);
      tot[1] = static_cast<int>(cta_ge >> 32);
    }
    cluster_sync();  // every CTA's totals
    g_before += cluster_prefix_word(tot, 0, c);  // the winners of the CTAs before this one (index order)
    e_before += cluster_prefix_word(tot, 1, c);
    const int count = min(min(P, k), max(len, 0));
    if (!sorted) {
      cluster_arrive();  // this CTA's reads of the others are done; wait below before exiting
      int wpos = g_before + min(e_before, need);
      src.for_each(steps, [&](const uint32_t (&key)[kClusterMergeRun], const int (&slot)[kClusterMergeRun], int f0) {
  #pragma unroll
        for (int v = 0; v < kClusterMergeRun; ++v) {
          if (key[v] == kAbsentKey) continue;
          const bool sel = key[v] > T_key || (key[v] == T_key && e_before++ < need);
          if (sel && wpos < count) {
            const int f = f0 + v;
            out.write(r, wpos, src.index_of(f, slot[v]), [&] { return key_to_float(key[v]); });
          }
          wpos += sel ? 1 : 0;
        }
      });
      if (c == 0) {
        for (int q = count + tid; q < k; q += kTopkThreads) out.write(r, q, -1, [] { return 0.0f; });
      }
      cluster_wait();  // no CTA leaves while another may still read its shared memory
      return;
    }
    {
      uint32_t* key0 = cluster.map_shared_rank(sel_key, 0);
      int* pos0 = cluster.map_shared_rank(sel_pos, 0);
      src.for_each(steps, [&](const uint32_t (&key)[kClusterMergeRun], const int (&slot)[kClusterMergeRun], int f0) {
  #pragma unroll
        for (int v = 0; v < kClusterMergeRun; ++v) {
          if (key[v] == kAbsentKey) continue;
          const int pos = winner_pos(key[v], T_key, need, g_before, e_before);
          if (pos >= 0 && pos < count) {
            const int f = f0 + v;
            key0[pos] = key[v];
            pos0[pos] = src.index_of(f, slot[v]);
          }
        }
      });
    }
    cluster_sync();  // the winners are in CTA 0; every read of another CTA is done
    if (c == 0) finish_row<float>(sel_key, sel_pos, count, k, k_pad, sorted, nullptr, r, out);
  };
  if (steps <= 1) {
    select(CmHeld(run));
  } else {
    select(run);
  }
#else
  (void)b; (void)slots; (void)k; (void)k_pad; (void)sorted; (void)out;
  __trap();  // never launched: the host takes this kernel only on devices with cluster launch
#endif
}

}  // namespace fused_topk
}  // namespace cuda
}  // namespace dsattn
