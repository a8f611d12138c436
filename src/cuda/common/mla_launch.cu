// Launchers of the sparse-MLA kernel (arguments validated by src/api/sparse_mla.cpp): decode over
// the FP8 latent cache, prefill over a bf16 kv tensor, both with src/cuda/common/mla_kernel.cuh.
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

template <typename Src>
Status launch(const char* op, const MlaDecodeArgs& a, int64_t rows, int64_t heads, const Exec& ex) {
  if (rows > 0x7FFFFFFF) {
    return detail::not_implemented(op, "query rows expected <= 2147483647 on CUDA, got %lld", static_cast<long long>(rows));
  }
  const size_t smem = mla_smem_bytes(Src::kDqk);
  if (ex.smem_budget_bytes > 0 && smem > static_cast<size_t>(ex.smem_budget_bytes)) {
    return detail::not_implemented(op, "the CUDA kernel needs %zu bytes of shared memory per block, budget is %d",
                                   smem, ex.smem_budget_bytes);
  }
  DSATTN_CUDA_RETURN(op, cudaFuncSetAttribute(sparse_mla_kernel<Src>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(heads / kMlaHeadsPerCta));
  sparse_mla_kernel<Src><<<grid, kMlaThreads, smem, static_cast<cudaStream_t>(ex.stream)>>>(a);
  return last_launch_status(op, "sparse_mla_kernel");
}

void set_sink(MlaDecodeArgs* a, const TensorView& sink) {
  a->sink = sink.defined() ? sink.ptr<const float>() : nullptr;
  a->sink_s = sink.defined() ? sink.strides[0] : 0;
}

}  // namespace

Status sparse_mla_decode(const SparseMlaDecodeParams& p, const Exec& ex) {
  const int64_t B = p.q.shape[0], Sq = p.q.shape[1], Hq = p.q.shape[2];
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
  set_sink(&a, p.attn_sink);
  a.sm_scale = p.sm_scale;
  a.Sq = static_cast<int>(Sq);
  a.dv = kLatentDv;
  a.main = cache_args(p.cache, p.indices, p.topk_length);
  if (p.extra_indices.defined()) a.extra = cache_args(p.extra_cache, p.extra_indices, p.extra_topk_length);
  const char* op = "sparse_mla_decode";
  return p.cache.format == LatentFormat::kV4Fp8
             ? launch<LatentSource<LatentFormat::kV4Fp8>>(op, a, B * Sq, Hq, ex)
             : launch<LatentSource<LatentFormat::kV32Fp8>>(op, a, B * Sq, Hq, ex);
}

Status sparse_mla_prefill(const SparseMlaPrefillParams& p, const Exec& ex) {
  const char* op = "sparse_mla_prefill";
  const int64_t M = p.q.shape[0], Hq = p.q.shape[1], dqk = p.q.shape[2];
  if (p.d_v > 2 * kMlaThreads) {
    return detail::not_implemented(op, "d_v expected <= %d on CUDA, got %d", 2 * kMlaThreads, p.d_v);
  }
  MlaDecodeArgs a{};
  a.q = p.q.ptr<const uint16_t>();
  a.q_sb = p.q.strides[0];
  a.q_sh = p.q.strides[1];
  a.out = p.out.ptr<uint16_t>();
  a.o_sb = p.out.strides[0];
  a.o_sh = p.out.strides[1];
  a.lse = p.lse.ptr<float>();
  a.l_sb = p.lse.strides[0];
  a.l_sh = p.lse.strides[1];
  set_sink(&a, p.attn_sink);
  a.sm_scale = p.sm_scale;
  a.Sq = 1;  // query row m is (b = m, s = 0)
  a.dv = p.d_v;
  a.main.pages = static_cast<const uint8_t*>(p.kv.data);
  a.main.page_stride = p.kv.strides[0];
  a.main.P = 1;
  a.main.num_slots = p.kv.shape[0];
  a.main.idx = p.indices.ptr<const int32_t>();
  a.main.idx_sb = p.indices.strides[0];
  a.main.topk = static_cast<int>(p.indices.shape[1]);
  a.main.len = p.topk_length.defined() ? p.topk_length.ptr<const int32_t>() : nullptr;
  a.main.len_s = p.topk_length.defined() ? p.topk_length.strides[0] : 0;
  return dqk == 512 ? launch<Bf16Source<512>>(op, a, M, Hq, ex) : launch<Bf16Source<576>>(op, a, M, Hq, ex);
}

}  // namespace cuda
}  // namespace dsattn
