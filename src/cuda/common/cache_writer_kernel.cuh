// Cache-writer kernels (SPEC §3.7). One thread per (token, unit): a unit is one quantization group
// (or the bf16 RoPE copy of a latent token), and its bytes come from the same functions the CPU writer
// runs (src/common/cache_quant.h), so host and device write identical bytes. Memory-bound and small;
// not performance-tuned (uncoalesced per-thread group loops).
//
// Slots outside [0, num_slots) -- -1 and anything else -- are skipped (never written): the kernel
// cannot report an error without a host sync. The CPU writer rejects such slots instead.
#pragma once
#include <cstdint>

#include "common/cache_quant.h"

namespace dsattn {
namespace cuda {

template <typename SlotT>
__device__ __forceinline__ int64_t load_slot(const SlotT* slots, int64_t stride, int64_t t) {
  return static_cast<int64_t>(slots[t * stride]);
}

template <typename T, typename SlotT>
__global__ void write_indexer_cache_kernel(const T* __restrict__ k,           // [tokens, D], row stride k_stride
                                           int64_t k_stride,
                                           const SlotT* __restrict__ slots,   // [tokens], stride slot_stride
                                           int64_t slot_stride, int64_t tokens,
                                           uint8_t* __restrict__ pages,       // [num_pages, page_stride]
                                           int64_t page_stride, int64_t num_slots, IndexerFormat format,
                                           int S, int D, int units) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= tokens * units) return;
  const int64_t t = idx / units;
  const int u = static_cast<int>(idx % units);
  const int64_t slot = load_slot(slots, slot_stride, t);
  if (slot < 0 || slot >= num_slots) return;
  quant::write_indexer_unit(format, k + t * k_stride, D, S, pages + (slot / S) * page_stride,
                            static_cast<int>(slot % S), u);
}

template <typename T, typename SlotT>
__global__ void write_latent_cache_kernel(const T* __restrict__ kv,           // [tokens, d_qk], row stride kv_stride
                                          int64_t kv_stride,
                                          const SlotT* __restrict__ slots,    // [tokens], stride slot_stride
                                          int64_t slot_stride, int64_t tokens,
                                          uint8_t* __restrict__ pages,        // [num_pages, page_stride]
                                          int64_t page_stride, int64_t num_slots, LatentFormat format, int P,
                                          int units) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= tokens * units) return;
  const int64_t t = idx / units;
  const int u = static_cast<int>(idx % units);
  const int64_t slot = load_slot(slots, slot_stride, t);
  if (slot < 0 || slot >= num_slots) return;
  quant::write_latent_unit(format, kv + t * kv_stride, P, pages + (slot / P) * page_stride,
                           static_cast<int>(slot % P), u);
}

}  // namespace cuda
}  // namespace dsattn
