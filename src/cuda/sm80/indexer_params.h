// The portable indexer kernel's arguments (IndexerParams), its shared-memory layout and the host's
// choice of its pipeline shape: host and device code (no CUDA headers), so that host-only tests
// check the planning for given device limits without a GPU (tests/gpu/test_gpu_indexer_plan.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/indexer_work.h"
#include "dsattn/status.h"

#if defined(__CUDACC__)
#define DSATTN_IDX_HD __host__ __device__
#else
#define DSATTN_IDX_HD
#endif

namespace dsattn {
namespace cuda {

constexpr int kIdxMaxRows = detail::kIndexerMaxGroupRows;

// Kernel arguments (host fills them in indexer_launch.cu; POD, passed by value).
struct IndexerParams {
  detail::IndexerWork work;
  int heads = 0;            // H
  int heads_padded = 0;     // Hp (multiple of 16)
  int head_dim = 0;         // D (the kernel's template argument; host bookkeeping)
  int fp4 = 0;              // MXFP4 cache (the kernel's template argument; host bookkeeping)
  // Q: group g row j head h at q + g*q_sg + j*q_sr + h*q_sh (bytes); D (FP8) or D/2 (MXFP4) bytes
  const uint8_t* q = nullptr;
  int64_t q_sg = 0, q_sr = 0, q_sh = 0;
  int q_aligned16 = 0;      // all Q head rows start 16-byte aligned
  int q_f16 = 0;            // FP8, f16-MMA archs (not DSATTN_MMA_NATIVE_FP8): Q kept as f16 in shared
                            // memory (converted once per group instead of once per MMA)
  const int32_t* q_scales = nullptr;  // MXFP4: element strides below
  int64_t qs_sg = 0, qs_sr = 0, qs_sh = 0;
  const float* w = nullptr;           // element strides
  int64_t w_sg = 0, w_sr = 0, w_sh = 0;
  // Keys: state `o` of page `p`: keys at kbase + p*page_stride + o*RB, scale at
  // sbase + p*scale_page_stride + o*4 (bytes). Paged: sbase = kbase + S*RB.
  const uint8_t* kbase = nullptr;
  const uint8_t* sbase = nullptr;
  int64_t page_stride = 0, scale_page_stride = 0;
  int states_per_page = 0;  // S (prefill: 1 << 30, a single page)
  // Division by S for the warp-local copies (idx_prefetch_w), set with states_per_page by
  // set_states_per_page: its constructor's 64-bit division, run per warp at the kernel's start, was
  // a called subroutine fetched cold on the way to the first copies. A kernel given a divisor for
  // another S builds its own (the same division, only slower).
  detail::FastDivU31 spp_div;
  int64_t num_pages = 0;
  int keys_aligned16 = 0;   // kbase and page_stride 16-byte aligned
  int keys_off32 = 0;       // keys_aligned16, and every key row lies below kbase + 16 (2^32 - 1) bytes:
                            // the warp-local copies pass rows as 32-bit 16-byte-unit offsets
  const int32_t* block_table = nullptr;  // [batch, max_pages]; null: page index = page id
  int64_t bt_s0 = 0, bt_s1 = 0, max_pages = 0;
  int64_t size_pages = 0;   // host planning only: the pages per block-table row the size rules
                            // count (a column chunk of a larger table: the whole table's); 0: max_pages
  int64_t state_limit = 0;  // states >= limit are never processed (logits width, pages * S)
  const int32_t* meta = nullptr;  // schedule metadata; null: one group (work.groups == 1) split
                                  // into `partitions` without it (IdxCursor::init)
  int partitions = 0;
  // Without meta (null) and with several groups: the warp-specialized wgmma kernel computes its CTA's
  // partition boundaries themselves at their start (ws_inline_schedule, indexer_ws.cuh; the same
  // pairs the schedule kernel writes, with group cost `inline_cost`), so no schedule kernel runs in
  // front of it. 0: off (meta, or one group split by IdxCursor::init).
  int inline_schedule = 0;
  int inline_cost = 0;
  // Pipeline shape (chosen by the launcher).
  int warps = 8, tile_states = 256, stages = 3;
  // CTAs per schedule partition: CTA b works on partition b / split and takes every split-th tile
  // of it (tiles b % split, b % split + split, ...), so a schedule of one partition per SM still
  // fills an SM with several CTAs. Only for epilogues that need no contiguous per-CTA state range
  // (the logits epilogue); others keep 1.
  int split = 1;
  // sm_90+: FP8 keys arrive by bulk copies (the TMA engine, one per page run, completing on one
  // mbarrier per stage) instead of per-thread cp.async, and are stored unswizzled. Set by the
  // launcher (FP8, 16-byte aligned cache, device sm_90+).
  int bulk = 0;
  // Epilogue arguments (logits epilogue; other epilogues keep theirs in their own object).
  void* out = nullptr;      // f32 / bf16 [R, W]
  int64_t out_s0 = 0;       // row stride (elements)
  int64_t out_width = 0;    // W
  int out_bf16 = 0;
  int clean = 0;
};

// Sets states_per_page and its divisor together.
inline void set_states_per_page(IndexerParams* p, int s) {
  p->states_per_page = s;
  p->spp_div = detail::FastDivU31(static_cast<uint32_t>(s));
}

DSATTN_IDX_HD constexpr size_t idx_align16(size_t x) { return (x + 15) & ~size_t(15); }

struct IdxSmemLayout {
  size_t q, w, qs, win, bars, scores, stage0, stage_bytes, keys_off, scale_off, valid_off, epi, total;
};

// Shared-memory layout for a configuration (host and device agree on it).
DSATTN_IDX_HD inline IdxSmemLayout idx_smem_layout(bool fp4, int D, int rows_per_group, int heads_padded,
                                                         int tile_states, int stages, size_t epi_bytes,
                                                         bool q_f16 = false) {
  IdxSmemLayout L{};
  const size_t qrows = size_t(rows_per_group) * heads_padded;
  const int rb = fp4 ? D / 2 : D;
  size_t off = 0;
  L.q = off; off += idx_align16(qrows * D * (q_f16 ? 2 : 1));
  L.w = off; off += idx_align16(qrows * 4);
  L.qs = off; off += fp4 ? idx_align16(qrows * (D / 32) * 4) : 0;
  L.win = off; off += idx_align16(sizeof(detail::RowWindow) * kIdxMaxRows);
  L.bars = off; off += idx_align16(size_t(8) * stages);  // one mbarrier per stage (p.bulk)
  L.scores = off; off += idx_align16(size_t(rows_per_group) * tile_states * 4);
  L.keys_off = 0;
  L.scale_off = idx_align16(size_t(tile_states) * rb);
  L.valid_off = L.scale_off + size_t(tile_states) * 4;
  L.stage_bytes = idx_align16(L.valid_off + tile_states);
  L.stage0 = off; off += L.stage_bytes * stages;
  L.epi = off; off += idx_align16(epi_bytes);
  L.total = off;
  return L;
}

// Pipeline shape for a problem: warps (tile = 32 * warps states, or 64 * warps with two halves a
// warp), stages, shared memory.
struct IndexerConfig {
  int warps = 0, tile_states = 0, stages = 0;
  size_t smem = 0;
};

// What the planning needs to know of the device.
struct IndexerDeviceInfo {
  int major = 0, minor = 0;  // compute capability
  int sms = 0;               // the multiprocessors the call may use (0: unknown)
  // The kernel's e4m3 mma.sync is native (E4M3 Q, no f16 copy): 1 / 0, or -1 to derive it from the
  // compute capability (sm_89, sm_120+). A DSATTN_SM90_NATIVE_FP8_MMA build sets 1 on sm_90.
  int native_fp8 = -1;
};

// pick_indexer_config (indexer_launch.h) for a device described by `dev`: the same choice, from the
// device's compute capability and SM count instead of the current device's attributes.
Status plan_indexer_config(const char* op, IndexerParams* p, const IndexerDeviceInfo& dev, int budget,
                           size_t (*epi_smem)(const IndexerParams&), IndexerConfig* cfg, bool warp_local);

}  // namespace cuda
}  // namespace dsattn
