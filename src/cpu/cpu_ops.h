// CPU reference backend (double accumulation). Called by src/api/ after validation.
#pragma once
#include "api/problems.h"
#include "dsattn/ops.h"

namespace dsattn {
namespace cpu {

Status paged_mqa_logits(const PagedMqaLogitsParams& p, const detail::PagedIndexerProblem& pb, const Exec& ex);
Status mqa_logits(const MqaLogitsParams& p, const detail::MqaProblem& pb, const Exec& ex);
Status topk(const TopkParams& p, const detail::TopkProblem& pb, const Exec& ex);
Status paged_mqa_topk(const PagedMqaTopkParams& p, const detail::PagedIndexerProblem& pb, const Exec& ex);
Status sparse_mla_decode(const SparseMlaDecodeParams& p, const Exec& ex);
Status sparse_mla_prefill(const SparseMlaPrefillParams& p, const Exec& ex);
Status write_indexer_cache(const WriteIndexerCacheParams& p, const Exec& ex);
Status write_latent_cache(const WriteLatentCacheParams& p, const Exec& ex);

// Latent token `slot` of `c` (SPEC §2.3) dequantized into dst[0 .. d_qk), exact in double. The
// reference's own dequantization, shared with tests that model a kernel's error from the values.
void dequant_latent(const LatentCache& c, int64_t slot, double* dst);

}  // namespace cpu
}  // namespace dsattn
