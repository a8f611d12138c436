// Argument checks of a sparse-MLA latent cache (SPEC §2.3), shared by the cache writer and the
// sparse-MLA ops (src/api/cache_writers.cpp, src/api/sparse_mla.cpp).
#pragma once
#include "dsattn/formats.h"
#include "dsattn/status.h"

namespace dsattn {
namespace detail {

// Format, tokens per page, page stride (>= latent_min_page_bytes) and the pages tensor
// (u8 [num_pages, >= P * token bytes], strides [page_stride_bytes, 1]). `arg` names the cache
// in messages ("cache", "extra_cache").
Status check_latent_cache(const char* op, const char* arg, const LatentCache& c);

}  // namespace detail
}  // namespace dsattn
