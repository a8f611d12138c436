// CPU cache writers (SPEC §3.7). The quantization itself lives in src/common/cache_quant.h, shared
// with the CUDA kernel, so both write identical bytes.
//
// Slots: -1 skips the token. Any other slot outside [0, num_pages * page_size), or a slot named by
// two tokens, is an error, reported before anything is written.
#include <algorithm>
#include <utility>
#include <vector>

#include "api/validate.h"
#include "common/cache_quant.h"
#include "common/thread_pool.h"
#include "cpu/cpu_ops.h"

namespace dsattn {
namespace cpu {
namespace {

int64_t slot_at(const TensorView& s, int64_t t) {
  return s.dtype == DType::kI64 ? s.ptr<const int64_t>()[t * s.strides[0]]
                                : static_cast<int64_t>(s.ptr<const int32_t>()[t * s.strides[0]]);
}

// Reads every slot; fails on an out-of-range or repeated one.
Status read_slots(const char* op, const TensorView& s, int64_t tokens, int64_t num_slots,
                  std::vector<int64_t>* out) {
  out->resize(static_cast<size_t>(tokens));
  std::vector<std::pair<int64_t, int64_t>> used;  // (slot, token)
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t v = slot_at(s, t);
    (*out)[t] = v;
    if (v == -1) continue;
    if (v < 0 || v >= num_slots) {
      return detail::invalid(op, "slot_mapping[%lld] expected -1 or in [0, %lld), got %lld",
                             static_cast<long long>(t), static_cast<long long>(num_slots), static_cast<long long>(v));
    }
    used.emplace_back(v, t);
  }
  std::sort(used.begin(), used.end());
  for (size_t i = 1; i < used.size(); ++i) {
    if (used[i].first == used[i - 1].first) {
      return detail::invalid(op, "slot_mapping[%lld] and slot_mapping[%lld] expected distinct slots, both are %lld",
                             static_cast<long long>(used[i - 1].second), static_cast<long long>(used[i].second),
                             static_cast<long long>(used[i].first));
    }
  }
  return Status::Ok();
}

template <typename T>
void write_indexer(const WriteIndexerCacheParams& p, const std::vector<int64_t>& slots, const Exec& ex) {
  const IndexerCache& c = p.cache;
  const int S = c.states_per_page, D = c.head_dim;
  const int units = quant::indexer_units(c.format, D);
  const T* k = static_cast<const T*>(p.k.data);  // [T, D], row stride k.strides[0]
  const int64_t row_stride = p.k.strides[0];
  uint8_t* pages = c.pages.ptr<uint8_t>();        // [num_pages, page_stride_bytes]
  detail::parallel_for(static_cast<int64_t>(slots.size()), ex.num_threads, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t slot = slots[t];
      if (slot < 0) continue;
      uint8_t* page = pages + (slot / S) * c.page_stride_bytes;
      for (int u = 0; u < units; ++u) {
        quant::write_indexer_unit(c.format, k + t * row_stride, D, S, page, static_cast<int>(slot % S), u);
      }
    }
  });
}

template <typename T>
void write_latent(const WriteLatentCacheParams& p, const std::vector<int64_t>& slots, const Exec& ex) {
  const LatentCache& c = p.cache;
  const int P = c.tokens_per_page;
  const int units = quant::latent_units(c.format);
  const T* kv = static_cast<const T*>(p.kv.data);  // [T, d_qk], row stride kv.strides[0]
  const int64_t row_stride = p.kv.strides[0];
  uint8_t* pages = c.pages.ptr<uint8_t>();          // [num_pages, page_stride_bytes]
  detail::parallel_for(static_cast<int64_t>(slots.size()), ex.num_threads, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t slot = slots[t];
      if (slot < 0) continue;
      uint8_t* page = pages + (slot / P) * c.page_stride_bytes;
      for (int u = 0; u < units; ++u) {
        quant::write_latent_unit(c.format, kv + t * row_stride, P, page, static_cast<int>(slot % P), u);
      }
    }
  });
}

}  // namespace

Status write_indexer_cache(const WriteIndexerCacheParams& p, const Exec& ex) {
  std::vector<int64_t> slots;
  const int64_t num_slots = p.cache.pages.shape[0] * p.cache.states_per_page;
  DSATTN_RETURN_IF_ERROR(read_slots("write_indexer_cache", p.slot_mapping, p.k.shape[0], num_slots, &slots));
  if (p.k.dtype == DType::kF32) {
    write_indexer<float>(p, slots, ex);
  } else {
    write_indexer<uint16_t>(p, slots, ex);
  }
  return Status::Ok();
}

Status write_latent_cache(const WriteLatentCacheParams& p, const Exec& ex) {
  std::vector<int64_t> slots;
  const int64_t num_slots = p.cache.pages.shape[0] * p.cache.tokens_per_page;
  DSATTN_RETURN_IF_ERROR(read_slots("write_latent_cache", p.slot_mapping, p.kv.shape[0], num_slots, &slots));
  if (p.kv.dtype == DType::kF32) {
    write_latent<float>(p, slots, ex);
  } else {
    write_latent<uint16_t>(p, slots, ex);
  }
  return Status::Ok();
}

}  // namespace cpu
}  // namespace dsattn
