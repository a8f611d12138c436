// Launcher of the sparse-MLA decode kernel (arguments validated by src/api/sparse_mla.cpp).
// sparse_mla_prefill has no CUDA kernel yet and says so.
#include "cuda/common/cuda_check.cuh"
#include "cuda/common/mla_kernel.cuh"
#include "cuda/cuda_ops.h"

namespace dsattn {
namespace cuda {
namespace {

MlaCacheArgs cache_args(const LatentCache& c, const TensorView& idx, const TensorView& len) {
  MlaCacheArgs m{};
  m.pages = c.pages.ptr<const uint8_t>();
  m.page_stride = c.page_stride_bytes;
  m.P = c.tokens_per_page;
  m.num_slots = c.pages.shape[0] * c.tokens_per_page;
  m.idx = idx.ptr<const int32_t>();
  m.idx_sb = idx.strides[0];
  m.idx_ss = idx.strides[1];
  m.topk = static_cast<int>(idx.shape[2]);
  m.len = len.defined() ? len.ptr<const int32_t>() : nullptr;
  m.len_s = len.defined() ? len.strides[0] : 0;
  return m;
}

template <LatentFormat F>
Status launch(const MlaDecodeArgs& a, int64_t rows, int64_t head_groups, const Exec& ex) {
  const char* op = "sparse_mla_decode";
  const size_t smem = mla_smem_bytes(MlaDims<F>::kDqk);
  if (ex.smem_budget_bytes > 0 && smem > static_cast<size_t>(ex.smem_budget_bytes)) {
    return detail::not_implemented(op, "the CUDA kernel needs %zu bytes of shared memory per block, budget is %d",
                                   smem, ex.smem_budget_bytes);
  }
  DSATTN_CUDA_RETURN(op, cudaFuncSetAttribute(sparse_mla_decode_kernel<F>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(head_groups));
  sparse_mla_decode_kernel<F><<<grid, kMlaThreads, smem, static_cast<cudaStream_t>(ex.stream)>>>(a);
  return last_launch_status(op, "sparse_mla_decode_kernel");
}

}  // namespace

Status sparse_mla_decode(const SparseMlaDecodeParams& p, const Exec& ex) {
  const int64_t B = p.q.shape[0], Sq = p.q.shape[1], Hq = p.q.shape[2];
  if (B * Sq > 0x7FFFFFFF) {
    return detail::not_implemented("sparse_mla_decode", "B * Sq expected <= 2^31 - 1 rows, got %lld",
                                   static_cast<long long>(B * Sq));
  }
  MlaDecodeArgs a{};
  a.q = p.q.ptr<const uint16_t>();
  a.q_sb = p.q.strides[0];
  a.q_ss = p.q.strides[1];
  a.q_sh = p.q.strides[2];
  a.out = p.out.ptr<uint16_t>();
  a.o_sb = p.out.strides[0];
  a.o_ss = p.out.strides[1];
  a.o_sh = p.out.strides[2];
  a.lse = p.lse.ptr<float>();
  a.l_sb = p.lse.strides[0];
  a.l_ss = p.lse.strides[1];
  a.l_sh = p.lse.strides[2];
  a.sink = p.attn_sink.defined() ? p.attn_sink.ptr<const float>() : nullptr;
  a.sink_s = p.attn_sink.defined() ? p.attn_sink.strides[0] : 0;
  a.sm_scale = p.sm_scale;
  a.Sq = static_cast<int>(Sq);
  a.main = cache_args(p.cache, p.indices, p.topk_length);
  if (p.extra_indices.defined()) {
    a.extra = cache_args(p.extra_cache, p.extra_indices, p.extra_topk_length);
  }
  const int64_t groups = Hq / kMlaHeadsPerCta;
  return p.cache.format == LatentFormat::kV4Fp8 ? launch<LatentFormat::kV4Fp8>(a, B * Sq, groups, ex)
                                                : launch<LatentFormat::kV32Fp8>(a, B * Sq, groups, ex);
}

Status sparse_mla_prefill(const SparseMlaPrefillParams&, const Exec&) {
  return detail::not_implemented("sparse_mla_prefill", "no CUDA kernel yet; use the CPU backend");
}

}  // namespace cuda
}  // namespace dsattn
