// Launchers of the cache-writer kernels (arguments validated by src/api/cache_writers.cpp).
#include "cuda/common/cache_writer_kernel.cuh"
#include "cuda/common/cuda_check.cuh"
#include "cuda/cuda_ops.h"

namespace dsattn {
namespace cuda {
namespace {

constexpr int kThreads = 128;

unsigned grid_for(int64_t work) { return static_cast<unsigned>((work + kThreads - 1) / kThreads); }

template <typename T, typename SlotT>
void launch_indexer(const WriteIndexerCacheParams& p, cudaStream_t stream) {
  const IndexerCache& c = p.cache;
  const int units = quant::indexer_units(c.format, c.head_dim);
  const int64_t tokens = p.k.shape[0];
  write_indexer_cache_kernel<T, SlotT><<<grid_for(tokens * units), kThreads, 0, stream>>>(
      static_cast<const T*>(p.k.data), p.k.strides[0], static_cast<const SlotT*>(p.slot_mapping.data),
      p.slot_mapping.strides[0], tokens, c.pages.ptr<uint8_t>(), c.page_stride_bytes,
      c.pages.shape[0] * c.states_per_page, c.format, c.states_per_page, c.head_dim, units);
}

template <typename T, typename SlotT>
void launch_latent(const WriteLatentCacheParams& p, cudaStream_t stream) {
  const LatentCache& c = p.cache;
  const int units = quant::latent_units(c.format);
  const int64_t tokens = p.kv.shape[0];
  write_latent_cache_kernel<T, SlotT><<<grid_for(tokens * units), kThreads, 0, stream>>>(
      static_cast<const T*>(p.kv.data), p.kv.strides[0], static_cast<const SlotT*>(p.slot_mapping.data),
      p.slot_mapping.strides[0], tokens, c.pages.ptr<uint8_t>(), c.page_stride_bytes,
      c.pages.shape[0] * c.tokens_per_page, c.format, c.tokens_per_page, units);
}

}  // namespace

Status write_indexer_cache(const WriteIndexerCacheParams& p, const Exec& ex) {
  cudaStream_t stream = static_cast<cudaStream_t>(ex.stream);
  const bool bf16 = p.k.dtype == DType::kBF16, i64 = p.slot_mapping.dtype == DType::kI64;
  if (bf16) {
    i64 ? launch_indexer<uint16_t, int64_t>(p, stream) : launch_indexer<uint16_t, int32_t>(p, stream);
  } else {
    i64 ? launch_indexer<float, int64_t>(p, stream) : launch_indexer<float, int32_t>(p, stream);
  }
  return last_launch_status("write_indexer_cache", "write_indexer_cache_kernel");
}

Status write_latent_cache(const WriteLatentCacheParams& p, const Exec& ex) {
  cudaStream_t stream = static_cast<cudaStream_t>(ex.stream);
  const bool bf16 = p.kv.dtype == DType::kBF16, i64 = p.slot_mapping.dtype == DType::kI64;
  if (bf16) {
    i64 ? launch_latent<uint16_t, int64_t>(p, stream) : launch_latent<uint16_t, int32_t>(p, stream);
  } else {
    i64 ? launch_latent<float, int64_t>(p, stream) : launch_latent<float, int32_t>(p, stream);
  }
  return last_launch_status("write_latent_cache", "write_latent_cache_kernel");
}

}  // namespace cuda
}  // namespace dsattn
