#!/usr/bin/env bash
# One device call for the tensor-core sparse-MLA kernel (decode and prefill) (src/cuda/common/mla_mma_kernel.cuh,
# DSATTN_MLA_KERNEL=mma; BENCHMARKS.md 2026-12-05 "sparse MLA decode on tensor cores"):
#   1. the GPU tests GpuSparseMla* (every decode and prefill case on both kernels, against the CPU
#      reference; heads per CTA 16 / 32 / 64, splits over the indices, sm_120's 99 KiB budget, the
#      errors; the split rule);
#      Then `dsattn demo` (V4.1-Flash, V3.2 with next_n 2) under DSATTN_MLA_KERNEL=mma: its MLA
#      stage checked against the CPU reference and recomputed attention rows;
#   2. compute-sanitizer memcheck and racecheck of GpuSparseMla.SmallHeadCountsAndEmptyRows and
#      GpuSparseMla.MmaRejectsWhatItCannotRun (short and empty rows, both caches, both formats);
#   3. dsattn bench mla: the scalar and the tensor-core kernels beside the copy bandwidth, both
#      formats, at the default heads per CTA; prefill over a bf16 kv (64 / 256 rows beside the scalar
#      kernel, 4096 rows alone); without the split over the indices at small batches
#      (DSATTN_MLA_SPLITS=1); 16 and 64 heads per CTA at 64 and 128 heads;
#   4. ncu of the tensor-core kernel at 64 x 128 heads (one launch), when ncu is present.
# Logs go to ${OUT:-./gpu_out}/mla_mma; a summary table is printed last.
#
# Usage: scripts/exp/mla_mma.sh --prebuilt DIR [--no-tests] [--no-sanitizer] [--no-bench] [--no-ncu]
#   DIR holds dsattn_gpu_tests and dsattn, built for sm_90a (with CXX=/usr/bin/g++).
set -uo pipefail
cd "$(dirname "$0")/../.."

BIN=""
TESTS=1
SAN=1
BENCH=1
NCU=1
while [ $# -gt 0 ]; do
  case "$1" in
    --prebuilt) BIN="$2"; shift 2 ;;
    --no-tests) TESTS=0; shift ;;
    --no-sanitizer) SAN=0; shift ;;
    --no-bench) BENCH=0; shift ;;
    --no-ncu) NCU=0; shift ;;
    -h|--help) sed -n '2,/^set -uo/{/^#/p}' "$0"; exit 0 ;;
    *) echo "mla_mma: unknown argument $1" >&2; exit 2 ;;
  esac
done
. scripts/lib_step.sh  # step, device_info, sanitize, print_summary, need_binaries, bench_step
need_binaries mla_mma --prebuilt "$BIN"

OUT="${OUT:-./gpu_out}/mla_mma"
mkdir -p "$OUT"
STEP_TIMEOUT_DEFAULT=300

device_info

if [ "$TESTS" = 1 ]; then
  step tests tests.log "$BIN/dsattn_gpu_tests" --gtest_filter='GpuSparseMla*'
fi
[ "$SAN" = 1 ] && sanitize "$BIN" 'GpuSparseMla.SmallHeadCountsAndEmptyRows:GpuSparseMla.MmaRejectsWhatItCannotRun'
if [ "$TESTS" = 1 ]; then  # end to end: the demo's decode step with the tensor-core kernel, checked by the demo
  step "demo v4.1" demo_v41.log env DSATTN_MLA_KERNEL=mma "$BIN/dsattn" demo --preset deepseek-v4.1-flash --batch 8
  step "demo v3.2" demo_v32.log env DSATTN_MLA_KERNEL=mma "$BIN/dsattn" demo --preset deepseek-v3.2 --batch 2 \
    --next-n 2
fi
if [ "$BENCH" = 1 ]; then
  step "bench v32" bench_v32.log "$BIN/dsattn" bench mla --format v32 --batch 1,16,64 --heads 16,64,128 --topk 2048
  step "bench v4" bench_v4.log "$BIN/dsattn" bench mla --format v4 --batch 1,16,64 --heads 16,64,128 --topk 512 \
    --extra 128
  step "bench prefill" bench_prefill.log "$BIN/dsattn" bench mla --prefill --format v32,v4 --batch 64,256 \
    --heads 16,128 --topk 2048
  step "bench prefill big" bench_prefill_big.log "$BIN/dsattn" bench mla --prefill --format v32 --batch 4096 \
    --heads 128 --topk 2048 --no-simple
  step "bench nosplit" bench_nosplit.log env DSATTN_MLA_SPLITS=1 "$BIN/dsattn" bench mla --format v32,v4 \
    --batch 1,4,16 --heads 16,128 --topk 2048 --no-simple
  for h in 16 64; do
    step "bench hpc$h" "bench_hpc$h.log" \
      env DSATTN_MLA_HEADS_PER_CTA=$h "$BIN/dsattn" bench mla --format v32,v4 --batch 16,64 --heads 64,128 --topk 2048 --no-simple
  done
fi
if [ "$NCU" = 1 ] && command -v ncu >/dev/null; then
  step ncu ncu.log ncu --kernel-name regex:sparse_mla_mma_kernel --launch-count 1 --section SpeedOfLight \
    --section LaunchStats --section Occupancy --section WarpStateStats \
    "$BIN/dsattn" bench mla --format v32 --batch 64 --heads 128 --no-simple --reps 3
fi

print_summary
for f in "$OUT"/bench_*.log; do
  [ -f "$f" ] || continue
  echo "== $(basename "$f")"
  cat "$f"
done | tee "$OUT/rows.txt"
exit "$FAILED"
