// TEMPORARY stub: replaced by the real launcher.
#include "api/validate.h"
#include "cuda/cuda_ops.h"

namespace dsattn {
namespace cuda {

Status sparse_mla_decode(const SparseMlaDecodeParams&, const Exec&) { return detail::not_implemented("sparse_mla_decode", "not yet implemented on the GPU"); }
Status sparse_mla_prefill(const SparseMlaPrefillParams&, const Exec&) { return detail::not_implemented("sparse_mla_prefill", "not yet implemented on the GPU"); }
}  // namespace cuda
}  // namespace dsattn
