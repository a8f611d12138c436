// Host-side launch helpers of the grid-level top-k, shared by topk_launch.cu and the fused
// paged_mqa_topk launcher.
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "cuda/common/cuda_check.cuh"
#include "cuda/common/kernel_smem.h"
#include "cuda/common/topk_grid.cuh"
#include "cuda/common/topk_plan.h"
#include "dsattn/tensor.h"

namespace dsattn {
namespace cuda {
namespace topk_detail {

// Ping-pong candidate buffers carved from the workspace (see TopkPlan::buf_words).
struct TopkBuffers {
  uint32_t* key[2] = {nullptr, nullptr};
  int32_t* idx[2] = {nullptr, nullptr};
};
inline size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
inline size_t topk_buffers_bytes(const TopkPlan& plan) {
  return 2 * align_up(plan.buf_words[0] * 4, 256) + 2 * align_up(plan.buf_words[1] * 4, 256);
}
inline TopkBuffers topk_buffers(const TopkPlan& plan, void* ws) {
  TopkBuffers b;
  char* p = static_cast<char*>(ws);
  for (int i = 0; i < 2; ++i) {
    b.key[i] = reinterpret_cast<uint32_t*>(p);
    p += align_up(plan.buf_words[i] * 4, 256);
    b.idx[i] = reinterpret_cast<int32_t*>(p);
    p += align_up(plan.buf_words[i] * 4, 256);
  }
  return b;
}

// Output pointers of a top-k launch from validated tensors: indices [R, k], optional values
// [R, k], and optional slot ids [R, k] (given only when slot ids are asked for), which map through
// block_table [B, max_pages] by row_request [R] when defined, else by row / next_n.
inline TopkOutputs topk_outputs(const TensorView& indices, const TensorView& values, const TensorView& slot_ids,
                                const TensorView& block_table, const TensorView& row_request, int next_n,
                                int states_per_page) {
  TopkOutputs out;
  out.indices = indices.ptr<int32_t>();
  out.indices_ld = indices.strides[0];
  if (values.defined()) {
    out.values = values.ptr<float>();
    out.values_ld = values.strides[0];
  }
  if (slot_ids.defined()) {
    out.slots = slot_ids.ptr<int32_t>();
    out.slots_ld = slot_ids.strides[0];
    out.block_table = block_table.ptr<const int32_t>();
    out.bt_ld = block_table.strides[0];
    out.bt_rows = block_table.shape[0];
    out.max_pages = block_table.shape[1];
    if (row_request.defined()) {
      out.row_request = row_request.ptr<const int32_t>();
      out.rr_stride = row_request.strides[0];
    }
    out.next_n = next_n;
    out.states_per_page = states_per_page;
  }
  return out;
}

template <typename K>
inline Status set_smem(K kernel, size_t bytes, const char* op) {
  if (bytes <= 48 * 1024) return Status::Ok();
  return cuda_status(raise_dynamic_smem(kernel, bytes), op, "cudaFuncSetAttribute(topk smem)");
}

// Launches `kernel` on grid (cluster, rows) with thread-block clusters of (cluster, 1, 1) (the
// cluster top-k and the fused cluster merge; sm_90 and newer), kTopkThreads threads per CTA.
template <typename... KArgs, typename... Args>
Status launch_cluster(void (*kernel)(KArgs...), int cluster, int64_t rows, size_t smem, cudaStream_t st, bool pdl,
                      const char* op, const char* name, Args&&... args) {
  DSATTN_RETURN_IF_ERROR(set_smem(kernel, smem, op));
  return cuda_status(launch_pdl(kernel, dim3(static_cast<unsigned>(cluster), static_cast<unsigned>(rows)),
                                dim3(kTopkThreads), smem, st, LaunchOpt{static_cast<unsigned>(cluster), pdl},
                                std::forward<Args>(args)...),
                     op, name);
}

// Candidates of every row are in buf.key[0] / buf.idx[0] ([rows, plan.level_in_n[0]] or, without
// merge levels, [rows, plan.final_n]): runs the merge levels, then the final kernel. Both without
// PDL: the chunk and merge kernels trigger their dependents first thing, so with PDL the next
// kernel's CTAs were placed at once and waited out the whole kernel before them. In a CUDA graph
// with other code run before each call (bench topk --cold) that cost ~5.5 us (H100, graph us, PDL
// on -> off for the whole op: 1 x 80K 30.0-30.1 -> 24.6-24.7, 1 x 128K 30.5 -> 25.7-25.8, 4 x 128K
// 31.9-32.0 -> 28.6-28.7); with the code warm, or launched eagerly, PDL gained 0.5-1 us. pdl.cuh.
template <typename T>
Status launch_merge_and_final(const TopkPlan& plan, int64_t rows, const TopkBuffers& buf,
                              const T* logits, int64_t ld, const TopkRowBounds& rb, bool sorted,
                              const TopkOutputs& out, cudaStream_t st, const char* op) {
  int cur = 0;
  for (int l = 0; l < plan.levels; ++l) {
    auto kern = topk_merge_kernel<0>;
    DSATTN_RETURN_IF_ERROR(set_smem(kern, plan.smem_merge[l], op));
    dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(plan.level_out_chunks[l]));
    DSATTN_RETURN_IF_ERROR(cuda_status(
        launch_pdl(kern, grid, dim3(kTopkThreads), plan.smem_merge[l], st, LaunchOpt{0, false}, buf.key[cur],
                   buf.idx[cur], plan.level_in_n[l], plan.level_fan_n[l], plan.k, plan.kc, plan.k_pad, plan.m_cap,
                   buf.key[cur ^ 1], buf.idx[cur ^ 1]),
        op, "topk_merge_kernel"));
    cur ^= 1;
  }
  auto kern = topk_final_kernel<T, true>;
  DSATTN_RETURN_IF_ERROR(set_smem(kern, plan.smem_final, op));
  return cuda_status(launch_pdl(kern, dim3(static_cast<unsigned>(rows)), dim3(kTopkThreads), plan.smem_final, st,
                                LaunchOpt{0, false}, logits, ld, rb, plan.k, plan.k_pad, plan.m_cap, plan.final_n,
                                sorted, buf.key[cur], buf.idx[cur], plan.final_n, out),
                     op, "topk_final_kernel");
}

}  // namespace topk_detail

// A planned top-k (plan_topk over rows x rb.width) of fp32 rows with the given row bounds and
// outputs: the launches of dsattn::topk, for ops that hold their rows in a workspace (the fused
// paged_mqa_topk's logits route). Workspace (plan.workspace_bytes) and stream from ex; `op` names
// the calling op in errors. Defined in topk_launch.cu.
Status topk_rows_f32(const TopkPlan& plan, int64_t rows, const float* logits, int64_t ld,
                     const topk_detail::TopkRowBounds& rb, bool sorted, const topk_detail::TopkOutputs& out,
                     const Exec& ex, const char* op);

}  // namespace cuda
}  // namespace dsattn
