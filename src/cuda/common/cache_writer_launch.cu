// TEMPORARY stub: replaced by the real launcher.
#include "api/validate.h"
#include "cuda/cuda_ops.h"

namespace dsattn {
namespace cuda {

Status write_indexer_cache(const WriteIndexerCacheParams&, const Exec&) { return detail::not_implemented("write_indexer_cache", "not yet implemented on the GPU"); }
Status write_latent_cache(const WriteLatentCacheParams&, const Exec&) { return detail::not_implemented("write_latent_cache", "not yet implemented on the GPU"); }
}  // namespace cuda
}  // namespace dsattn
