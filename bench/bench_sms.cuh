// `--sms N` of the benchmarks: run the whole benchmark on a green context of at least N SMs (the
// driver rounds up to its partition size), made current on this thread, so every stream, event
// and buffer the benchmark makes belongs to it, the copy baseline included, and the ops size their
// grids by its SMs (cuda_stream_num_sms). What a serving engine that partitions the GPU sees.
#pragma once
#include <cstdio>
#include <string>

#include "cuda/common/green_context.h"
#include "dsattn/ops.h"

namespace dsattn {
namespace bench {

// n <= 0: the whole device (nothing done). Returns false, with a message, where no green context
// of that size can be made.
inline bool use_sm_share(long n) {
  if (n <= 0) return true;
  static cuda::GreenContext g;  // lives as long as the process (the benchmark's context)
  std::string err = g.make(static_cast<int>(n));
  if (err.empty()) err = g.make_current();
  if (!err.empty()) {
    std::fprintf(stderr, "bench: --sms %ld: %s\n", n, err.c_str());
    return false;
  }
  std::printf("green context: %d of the device's %d SMs (--sms %ld); the ops see %d\n", g.sms(), cuda_num_sms(), n,
              cuda_stream_num_sms(nullptr));
  return true;
}

// The caller schedule the benchmarks pass (`bench indexer` unless --no-schedule, `bench indexer
// --fused --schedule`): schedule_metadata over `context_lens` into `metadata`
// ([schedule_metadata_size(parts)]) on `stream`, made once before the timed calls, as an engine
// makes one per decode step for every layer.
inline Status bench_schedule(const TensorView& context_lens, int next_n, int states_per_page, int parts,
                             const TensorView& metadata, void* stream) {
  ScheduleMetadataParams sp;
  sp.context_lens = context_lens;
  sp.next_n = next_n;
  sp.states_per_page = states_per_page;
  sp.num_sms = parts;
  sp.metadata = metadata;
  Exec ex;
  ex.backend = Backend::kCuda;
  ex.stream = stream;
  return schedule_metadata(sp, ex);
}

}  // namespace bench
}  // namespace dsattn
