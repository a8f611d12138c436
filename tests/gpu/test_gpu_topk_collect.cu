// The fused top-k machinery (candidate collector + merge, src/cuda/sm80/fused_topk_*.cuh) driven by
// a test kernel that hands it score tiles read from a logits matrix, piece by piece, exactly as the
// indexer epilogue does. The result must equal the CPU topk over the same logits (indices in the
// same order, values bit for bit). Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/indexer_test_util.h"
#include "cuda/sm80/fused_topk_merge.cuh"
#include "dsattn/ops.h"
#include "gpu/topk_test_util.h"

namespace dsattn {
namespace {

using cuda::fused_topk::CollectorBuffers;
using cuda::fused_topk::CollectorShared;
using testing_gpu::DeviceBuffer;
using testing_gpu::same_bits_or_both_nan;
using testutil::Rng;

// grid (groups * pieces). Piece c of group g scores states [c * span, (c + 1) * span) of the
// group's longest row, `tile` states at a time (tile <= threads or not), like the indexer's epilogue.
__global__ void collect_driver_kernel(const float* logits,  // [R, W]
                                      int W, const int32_t* lens, int64_t R, int rows_per_group, int pieces,
                                      int tile, CollectorBuffers b) {
  using namespace cuda::fused_topk;
  __shared__ CollectorShared sh;
  const int64_t slot = blockIdx.x;
  const int64_t g = slot / pieces;
  const int c = static_cast<int>(slot % pieces);
  const int64_t r0 = g * rows_per_group;
  const int rows = static_cast<int>(R - r0 < rows_per_group ? R - r0 : rows_per_group);
  int glen = 0;
  for (int j = 0; j < rows; ++j) glen = max(glen, lens[r0 + j]);
  const int span = (glen + pieces - 1) / pieces;
  const int lo = min(glen, c * span), hi = min(glen, lo + span);
  __shared__ detail::RowWindow win[kMaxPieceRows];
  if (threadIdx.x < rows) win[threadIdx.x] = detail::RowWindow{0, lens[r0 + threadIdx.x], 0};
  collector_begin(sh, rows);  // ends synced: win visible
  for (int t0 = lo; t0 < hi; t0 += tile) {
    const int n = min(tile, hi - t0);
    collector_reserve(b, sh, slot, rows, n);
    // The rows of the group are W apart in the logits: the "tile" is read in place.
    collector_append_block(b, sh, slot, r0, rows, t0, n, logits + r0 * int64_t(W) + t0, W, win);
    __syncthreads();
  }
  collector_end(b, sh, slot, rows);
}

struct CollectCase {
  int64_t rows = 1;
  int width = 0;
  int k = 16;
  int rows_per_group = 1;
  int pieces = 1;
  int tile = 64;
  int threads = 256;
  bool sorted = false;
  int ccap_mult = 4;  // candidate buffer: collector_ccap(k, ccap_mult) entries per piece and row
};

void run_collect_case(const CollectCase& c, const std::vector<float>& logits, const std::vector<int32_t>& lens) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  using namespace cuda::fused_topk;
  const int64_t R = c.rows;
  // CPU reference: topk over the same logits with ends = lens.
  std::vector<float> host = logits;
  std::vector<int32_t> ends = lens;
  std::vector<int32_t> ref_idx(static_cast<size_t>(R * c.k));
  std::vector<float> ref_val(ref_idx.size());
  {
    TopkParams p;
    p.logits = make_tensor(host.data(), DType::kF32, {R, c.width});
    p.ends = make_tensor(ends.data(), DType::kI32, {R});
    p.k = c.k;
    p.indices = make_tensor(ref_idx.data(), DType::kI32, {R, c.k});
    p.values = make_tensor(ref_val.data(), DType::kF32, {R, c.k});
    p.sorted = c.sorted;
    Exec ex;
    ex.backend = Backend::kCpu;
    const Status s = topk(p, ex);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  const int64_t groups = (R + c.rows_per_group - 1) / c.rows_per_group;
  const int64_t slots = groups * c.pieces;
  CollectorBuffers b;
  b.k = c.k;
  b.ccap = collector_ccap(c.k, c.ccap_mult);
  b.rows_per_slot = c.rows_per_group;
  const size_t entries = static_cast<size_t>(slots * c.rows_per_group) * b.ccap;
  DeviceBuffer d_logits(logits.size() * 4), d_lens(lens.size() * 4), d_key(entries * 4), d_idx(entries * 4),
      d_hdr(static_cast<size_t>(slots * c.rows_per_group * kHeaderInts * 4)), d_out_idx(ref_idx.size() * 4),
      d_out_val(ref_idx.size() * 4);
  ASSERT_TRUE(d_logits.upload(logits.data(), logits.size() * 4));
  ASSERT_TRUE(d_lens.upload(lens.data(), lens.size() * 4));
  DSATTN_CUDA_ASSERT(cudaMemset(d_key.ptr, 0xff, entries * 4));  // poison
  DSATTN_CUDA_ASSERT(cudaMemset(d_out_idx.ptr, 0x7b, ref_idx.size() * 4));
  b.key = static_cast<uint32_t*>(d_key.ptr);
  b.idx = static_cast<int32_t*>(d_idx.ptr);
  b.header = static_cast<int32_t*>(d_hdr.ptr);
  collect_driver_kernel<<<static_cast<unsigned>(slots), c.threads>>>(
      static_cast<const float*>(d_logits.ptr), c.width, static_cast<const int32_t*>(d_lens.ptr), R,
      c.rows_per_group, c.pieces, c.tile, b);
  DSATTN_CUDA_ASSERT(cudaGetLastError());

  cuda::topk_detail::TopkOutputs out;
  out.indices = static_cast<int32_t*>(d_out_idx.ptr);
  out.indices_ld = c.k;
  out.values = static_cast<float*>(d_out_val.ptr);
  out.values_ld = c.k;
  UniformSlots us;
  us.rows_per_group = c.rows_per_group;
  us.pieces = c.pieces;
  us.lens = static_cast<const int32_t*>(d_lens.ptr);
  int dev = 0, smem = 0;
  DSATTN_CUDA_ASSERT(cudaGetDevice(&dev));
  DSATTN_CUDA_ASSERT(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  const int k_pad = cuda::topk_detail::next_pow2(c.k);
  const int m_cap = cuda::topk_detail::mlist_cap(k_pad);
  const int mcap = ((smem - 1024) / 4 - cuda::topk_detail::region_words(k_pad, m_cap)) / 2 / 1024 * 1024;
  const size_t msmem = merge_smem_bytes(mcap, k_pad, m_cap);
  auto kern = fused_topk_merge_kernel<UniformSlots>;
  DSATTN_CUDA_ASSERT(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(msmem)));
  kern<<<static_cast<unsigned>(R), cuda::topk_detail::kTopkThreads, msmem>>>(b, us, c.k, k_pad, m_cap, mcap, c.sorted,
                                                                            out, CollectorBuffers{});
  DSATTN_CUDA_ASSERT(cudaGetLastError());
  DSATTN_CUDA_ASSERT(cudaDeviceSynchronize());
  std::vector<int32_t> idx(ref_idx.size());
  std::vector<float> val(ref_idx.size());
  ASSERT_TRUE(d_out_idx.download(idx.data(), idx.size() * 4));
  ASSERT_TRUE(d_out_val.download(val.data(), val.size() * 4));
  int bad = 0;
  for (int64_t r = 0; r < R && bad < 5; ++r) {
    for (int j = 0; j < c.k; ++j) {
      const size_t o = static_cast<size_t>(r * c.k + j);
      // Values come back decoded from keys: -0 reads as +0, so compare numerically (NaN == NaN).
      const bool val_ok = same_bits_or_both_nan(ref_val[o], val[o]) || (ref_val[o] == 0.0f && val[o] == 0.0f);
      if (idx[o] != ref_idx[o] || !val_ok) {
        ADD_FAILURE() << "row " << r << " (len " << lens[r] << ") slot " << j << ": cpu " << ref_idx[o] << " / "
                      << ref_val[o] << ", fused " << idx[o] << " / " << val[o];
        ++bad;
        break;
      }
    }
  }
}

std::vector<float> normals(Rng& rng, int64_t n) { return rng.normals(static_cast<size_t>(n)); }

TEST(GpuFusedCollect, LengthsPiecesAndGroups) {
  Rng rng(31);
  for (int k : {7, 512, 2048}) {
    for (int rpg : {1, 4}) {
      for (int pieces : {1, 3}) {
        CollectCase c;
        c.rows = 16;
        c.width = 3 * k + 5000;
        c.k = k;
        c.rows_per_group = rpg;
        c.pieces = pieces;
        c.sorted = (pieces == 3);
        std::vector<int32_t> lens;
        const int pick[] = {0, 1, k - 1, k, k + 1, c.width, 2 * k + 3, 5};
        for (int64_t r = 0; r < c.rows; ++r) lens.push_back(std::min(c.width, std::max(0, pick[r % 8])));
        run_collect_case(c, normals(rng, c.rows * c.width), lens);
      }
    }
  }
}

TEST(GpuFusedCollect, LongRowsManyPieces) {
  Rng rng(32);
  CollectCase c;
  c.rows = 2;
  c.width = 300000;
  c.k = 2048;
  c.pieces = 70;  // 140 pieces of ~4.3K states: the merge sees ~287K candidates (compactions)
  c.sorted = true;
  run_collect_case(c, normals(rng, c.rows * c.width), {300000, 250000});
  c.pieces = 1;  // one piece per row: many collector compactions
  c.threads = 128;
  c.tile = 128;
  run_collect_case(c, normals(rng, c.rows * c.width), {300000, 123457});
}

// Six rows: constant, all NaN, -inf among NaN, coarse ties, a quarter +inf, normals.
std::vector<float> tie_rows(Rng& rng, int width) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = normals(rng, 6 * int64_t(width));
  for (int i = 0; i < width; ++i) {
    v[i] = 0.5f;                                   // constant
    v[width + i] = nan;                            // all NaN
    v[2 * width + i] = (i % 9 == 0) ? -inf : nan;  // -inf above NaN
    v[3 * width + i] = static_cast<float>(i % 5);  // coarse ties
    if (i % 4 == 0) v[4 * width + i] = inf;
  }
  return v;
}

TEST(GpuFusedCollect, TiesNanInf) {
  Rng rng(33);
  CollectCase c;
  c.rows = 6;
  c.width = 20000;
  c.k = 1024;
  c.pieces = 4;
  std::vector<float> v = tie_rows(rng, c.width);
  std::vector<int32_t> lens(6, c.width);
  run_collect_case(c, v, lens);
  c.sorted = true;
  run_collect_case(c, v, lens);
  c.rows_per_group = 3;  // tiles wider than the block: several append steps per tile
  c.tile = 200;
  c.threads = 64;
  run_collect_case(c, v, lens);
}

// Rows with more candidates than the merge buffer takes beside k (12 pieces of 5K states that never
// compact in 6k-entry buffers: 60K per row): the merge's histogram pre-pass bounds the row first, on
// ties, NaN and infinities too (constant rows: the bound keeps every key, and the buffer still compacts).
TEST(GpuFusedCollect, MergeRowBoundPrePass) {
  Rng rng(34);
  CollectCase c;
  c.rows = 6;
  c.width = 60000;
  c.k = 1024;
  c.pieces = 12;
  c.ccap_mult = 6;
  std::vector<float> v = tie_rows(rng, c.width);
  std::vector<int32_t> lens = {60000, 60000, 59999, 60000, 41234, 60000};
  run_collect_case(c, v, lens);
  c.sorted = true;
  run_collect_case(c, v, lens);
}

}  // namespace
}  // namespace dsattn
