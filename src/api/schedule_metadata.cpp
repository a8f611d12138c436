// schedule_metadata: balanced (group, KV-unit) split of the indexer's work over `num_sms`
// partitions. CUDA: a one-CTA device kernel (graph-safe); CPU: the same arithmetic on the host.
#include <cstdint>
#include <cstdlib>

#include "api/indexer_args.h"
#include "api/validate.h"
#include "common/indexer_work.h"
#include "cuda/cuda_ops.h"
#include "dsattn/ops.h"

namespace dsattn {

int64_t schedule_metadata_size(int num_sms) { return num_sms > 0 ? detail::indexer_meta_size(num_sms) : 0; }

namespace {

constexpr const char* kOp = "schedule_metadata";

Status validate(const ScheduleMetadataParams& p, int num_sms, detail::PagedIndexerProblem* pb) {
  if (p.states_per_page < 1 || p.states_per_page > detail::kMaxStatesPerPage) {
    return detail::invalid(kOp, "states_per_page expected 1..%d, got %d", detail::kMaxStatesPerPage, p.states_per_page);
  }
  DSATTN_RETURN_IF_ERROR(detail::validate_paged_lens(kOp, p.context_lens, p.row_request, -1, p.next_n, -1, pb));
  if (pb->varlen) pb->batch = pb->rows;
  pb->states_per_page = p.states_per_page;
  const int64_t size = detail::indexer_meta_size(num_sms);
  DSATTN_RETURN_IF_ERROR(detail::check_tensor(kOp, "metadata", p.metadata, DType::kI32, {size}));
  DSATTN_RETURN_IF_ERROR(detail::check_contiguous(kOp, "metadata", p.metadata));
  return Status::Ok();
}

detail::IndexerWork host_work(const ScheduleMetadataParams& p, const detail::PagedIndexerProblem& pb) {
  // The block table is not an argument here; the schedule only needs lengths.
  return detail::paged_indexer_work(pb, p.context_lens, p.row_request, INT64_MAX);
}

// The host computation mirrors indexer_schedule_kernel (src/cuda/common/indexer_schedule.cu).
void schedule_metadata_host(const detail::IndexerWork& w, int partitions, int32_t* meta) {
  const int64_t G = w.groups;
  const int cost = detail::indexer_group_cost();
  detail::indexer_meta_header(meta, partitions, G);
  int64_t total = 0;  // virtual units
  for (int64_t g = 0; g < G; ++g) {
    const int64_t u = detail::indexer_group_units(w, g);
    total += u + detail::indexer_group_lead(g, u, cost);
  }
  if (total == 0) {
    for (int64_t p = 0; p <= partitions; ++p) {
      meta[detail::kIndexerMetaHeader + 2 * p] = static_cast<int32_t>(G);
      meta[detail::kIndexerMetaHeader + 2 * p + 1] = 0;
    }
    return;
  }
  int64_t pre = 0;
  for (int64_t g = 0; g < G; ++g) {
    const int64_t u = detail::indexer_group_units(w, g);
    detail::indexer_meta_fill_group(meta, partitions, total, g, pre, u, cost);
    pre += u + detail::indexer_group_lead(g, u, cost);
  }
  meta[detail::kIndexerMetaHeader + 2 * int64_t(partitions)] = static_cast<int32_t>(G);
  meta[detail::kIndexerMetaHeader + 2 * int64_t(partitions) + 1] = 0;
}

}  // namespace

namespace detail {
// 8 units (512 states) per group change. H200, bench indexer (caller schedule from this op, FP8,
// H = 64, D = 128, N = 1 unless noted, % of copy in the same run; two rounds, cost 0 -> 8):
// Hopper kernel 32 x 32K S 64 78.9 / 79.4 -> 83.1 / 83.4, S 32 80.1 / 80.4 -> 83.4 / 83.9, N = 2
// 56.7 / 56.2 -> 58.7 / 58.9, 64 x 16K 81.0 / 80.3 -> 82.4 / 82.4, 32 x 8K 46.9 / 46.8 -> 49.5 /
// 49.1; 128 x 8K, 256 x 8K, 64 x 32K and 128 x 32K level (within +-1); 33 x 32K, where no
// partition straddled a request, 84.3 / 84.1 -> 82.6 / 83.5. Costs 12 and 16 were as good on the
// Hopper rows, 24 worse; the portable kernel: 32 x 32K 86.6 / 86.4 -> 82.4 / 82.9 us (cost 16:
// 85.2 / 85.6), its other rows level.
constexpr int kIndexerGroupCost = 8;

int indexer_group_cost() {  // read per call, as the other tuning knobs (tests switch it)
  const char* e = std::getenv("DSATTN_INDEXER_GROUP_COST");
  if (e == nullptr || *e == '\0') return kIndexerGroupCost;
  const long v = std::strtol(e, nullptr, 10);
  return v >= 0 && v <= 64 ? static_cast<int>(v) : kIndexerGroupCost;
}
}  // namespace detail

Status schedule_metadata(const ScheduleMetadataParams& p, const Exec& ex) {
  Backend backend;
  DSATTN_RETURN_IF_ERROR(detail::resolve_backend(kOp, ex, {&p.context_lens, &p.row_request, &p.metadata}, &backend));
  int num_sms = p.num_sms;
  if (num_sms < 0) return detail::invalid(kOp, "num_sms expected >= 0 (0 = this device's count), got %d", num_sms);
  if (num_sms == 0) {
    num_sms = backend == Backend::kCuda ? cuda_num_sms() : 0;
    if (num_sms <= 0) return detail::invalid(kOp, "num_sms expected > 0 when no CUDA device is used, got 0");
  }
  detail::PagedIndexerProblem pb;
  DSATTN_RETURN_IF_ERROR(validate(p, num_sms, &pb));
  if (backend == Backend::kCuda) return cuda::schedule_metadata(p, pb, ex);
  schedule_metadata_host(host_work(p, pb), num_sms, p.metadata.ptr<int32_t>());
  return Status::Ok();
}

}  // namespace dsattn
