// CPU reference of topk (SPEC §3.3). Selection and ordering rules: select_topk in indexer_ref_util.h.
#include <vector>

#include "common/thread_pool.h"
#include "cpu/cpu_ops.h"
#include "cpu/indexer_ref_util.h"

namespace dsattn {
namespace cpu {

Status topk(const TopkParams& p, const detail::TopkProblem& pb, const Exec& ex) {
  return guarded("topk", [&] {
    detail::parallel_for(pb.rows, ex.num_threads, [&](int64_t r0, int64_t r1) {
      std::vector<float> row_f32;  // bf16 rows are widened here (exactly)
      std::vector<int32_t> scratch;
      const int k = pb.k;
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t s = p.starts.defined() ? p.starts.ptr<const int32_t>()[r] : 0;
        const int64_t e = p.ends.defined() ? p.ends.ptr<const int32_t>()[r] : pb.width;
        const float* row;
        if (p.logits.dtype == DType::kF32) {
          row = p.logits.ptr<const float>() + r * p.logits.strides[0] + s;
        } else {
          const uint16_t* src = p.logits.ptr<const uint16_t>() + r * p.logits.strides[0] + s;
          row_f32.resize(static_cast<size_t>(e - s));
          for (int64_t i = 0; i < e - s; ++i) row_f32[static_cast<size_t>(i)] = codec::bf16_to_f32(src[i]);
          row = row_f32.data();
        }
        int32_t* idx = p.indices.ptr<int32_t>() + r * p.indices.strides[0];
        float* val = p.values.defined() ? p.values.ptr<float>() + r * p.values.strides[0] : nullptr;
        select_topk(row, e - s, k, p.sorted, idx, val, scratch);
        if (pb.slot_transform) {
          const int64_t b = p.row_request.defined() ? p.row_request.ptr<const int32_t>()[r] : r / p.next_n;
          const int32_t* bt_row = p.block_table.ptr<const int32_t>() + b * p.block_table.strides[0];
          indices_to_slots(idx, k, bt_row, p.states_per_page, p.slot_ids.ptr<int32_t>() + r * p.slot_ids.strides[0]);
        }
      }
    });
  });
}

}  // namespace cpu
}  // namespace dsattn
