// CPU reference of paged_mqa_topk (SPEC §3.4): for each query row, score its states into a
// per-thread buffer (the same f32 values paged_mqa_logits would store), then run topk's selection.
// Memory: one [max ctx of the thread's rows] buffer per thread, never [R, max_context].
#include <vector>

#include "common/thread_pool.h"
#include "cpu/cpu_ops.h"
#include "cpu/indexer_ref_util.h"

namespace dsattn {
namespace cpu {

Status paged_mqa_topk(const PagedMqaTopkParams& p, const detail::PagedIndexerProblem& pb, const Exec& ex) {
  return guarded("paged_mqa_topk", [&] {
    detail::parallel_for(pb.rows, ex.num_threads, [&](int64_t r0, int64_t r1) {
      PagedRowScorer scorer(p, pb);
      std::vector<float> scores;
      std::vector<int32_t> scratch;
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t ctx = scorer.begin_row(r);
        scores.resize(static_cast<size_t>(ctx));
        for (int64_t t = 0; t < ctx; ++t) scores[static_cast<size_t>(t)] = static_cast<float>(scorer.score(t));
        int32_t* idx = p.indices.ptr<int32_t>() + r * p.indices.strides[0];
        float* val = p.values.defined() ? p.values.ptr<float>() + r * p.values.strides[0] : nullptr;
        select_topk(scores.data(), ctx, p.k, p.sorted, idx, val, scratch);
        if (p.slot_ids.defined()) {
          indices_to_slots(idx, p.k, scorer.block_table_row(), pb.states_per_page,
                           p.slot_ids.ptr<int32_t>() + r * p.slot_ids.strides[0]);
        }
      }
    });
  });
}

}  // namespace cpu
}  // namespace dsattn
