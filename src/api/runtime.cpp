#include "cuda/cuda_ops.h"
#include "dsattn/ops.h"

namespace dsattn {

bool cuda_available() { return cuda::available(); }
const char* cuda_architectures() {
#if DSATTN_WITH_CUDA
  return DSATTN_CUDA_ARCH_LIST;
#else
  return "";
#endif
}
int cuda_num_sms() { return cuda::num_sms(); }
int cuda_stream_num_sms(void* stream) { return cuda::stream_sms(stream); }

}  // namespace dsattn
