// CUDA backend entry points (host functions, implemented in src/cuda/**.cu). Called by src/api/
// after validation with tensors on the current CUDA device. Without a CUDA build, src/api/no_cuda.cpp
// provides versions that return kNotImplemented.
#pragma once
#include "api/problems.h"
#include "dsattn/ops.h"

namespace dsattn {
namespace cuda {

bool available();
// The current CUDA device of the calling thread (cudaGetDevice), -1 where there is none.
int current_device();
int num_sms();
// Whether this build has code that device `dev` (the current device: the probe kernel's attributes
// are asked of it) runs, checked once per device; *major / *minor: its compute capability.
bool device_has_code(int dev, int* major, int* minor);
// The compute capability of the calling thread's current device, from the table device_has_code
// keeps (one driver query per device); a CUDA error is reported as op's.
Status device_capability(const char* op, int* major, int* minor);
// Multiprocessors that work on `stream` (a cudaStream_t) can use: num_sms(), or fewer where the
// stream belongs to a green context (or the context has an SM-count affinity).
int stream_sms(void* stream);
// The same for a caller that already holds the device's count `device_sms` (the ops' planning):
// at most device_sms, at least 1 where device_sms > 0.
int sm_share(void* stream, int device_sms);

size_t paged_mqa_logits_workspace(const PagedMqaLogitsParams& p, const detail::PagedIndexerProblem& pb, const Exec& ex);
// trigger_next: the scoring kernel lets the next PDL launch be scheduled at its start (the fused
// op's logits route, when its top-k is a launch of few CTAs; see run_logits_route).
Status paged_mqa_logits(const PagedMqaLogitsParams& p, const detail::PagedIndexerProblem& pb, const Exec& ex,
                        bool trigger_next = false);
Status schedule_metadata(const ScheduleMetadataParams& p, const detail::PagedIndexerProblem& pb, const Exec& ex);

size_t mqa_logits_workspace(const MqaLogitsParams& p, const detail::MqaProblem& pb, const Exec& ex);
Status mqa_logits(const MqaLogitsParams& p, const detail::MqaProblem& pb, const Exec& ex);

size_t topk_workspace(const TopkParams& p, const detail::TopkProblem& pb, const Exec& ex);
Status topk(const TopkParams& p, const detail::TopkProblem& pb, const Exec& ex);

size_t paged_mqa_topk_workspace(const PagedMqaTopkParams& p, const detail::PagedIndexerProblem& pb, const Exec& ex);
Status paged_mqa_topk(const PagedMqaTopkParams& p, const detail::PagedIndexerProblem& pb, const Exec& ex);
Status paged_mqa_topk_route(const PagedMqaTopkParams& p, const detail::PagedIndexerProblem& pb, const Exec& ex,
                           const char** route);

size_t sparse_mla_decode_workspace(const SparseMlaDecodeParams& p, const Exec& ex);
Status sparse_mla_decode(const SparseMlaDecodeParams& p, const Exec& ex);
size_t sparse_mla_prefill_workspace(const SparseMlaPrefillParams& p, const Exec& ex);
Status sparse_mla_prefill(const SparseMlaPrefillParams& p, const Exec& ex);
Status write_indexer_cache(const WriteIndexerCacheParams& p, const Exec& ex);
Status write_latent_cache(const WriteLatentCacheParams& p, const Exec& ex);

}  // namespace cuda
}  // namespace dsattn
