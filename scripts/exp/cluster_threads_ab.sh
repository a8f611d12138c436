#!/usr/bin/env bash
# One device call for the cluster top-k's CTA shape (TopkTuning::cluster_threads, BENCHMARKS.md
# 2026-12-05 "CTAs of 512 threads"), on an H100/H200 (sm_90a):
#   1. the GPU tests of the cluster kernel and of everything that plans a top-k: GpuTopk*,
#      GpuFusedTopk.* (KeysPerThread/GpuTopkCluster.* runs 1024 and 512 threads;
#      GpuFusedTopk.LogitsRouteClusterHalfThreads the fused op's logits route at 512, also in a
#      graph, against the reference and the unfused path at 1024);
#   2. compute-sanitizer memcheck and racecheck of GpuTopk.ClusterSanitizerSmall (the cluster
#      kernel at 1024 and 512 threads: pushed and pulled digits, the gather);
#   3. the A/B: bench topk and bench indexer --fused --b2b with --cluster-threads 1024 / 512,
#      alternating, two rounds;
#   4. ncu launch stats and instruction counts of the cluster kernel at 1024 and 512 (bench topk
#      1 x 64K, one launch each), when ncu is present.
# Logs go to ${OUT:-./gpu_out}/cluster_threads; a summary table is printed last.
#
# Usage: scripts/exp/cluster_threads_ab.sh --prebuilt DIR [--no-tests] [--no-sanitizer] [--no-bench]
#                                          [--no-ncu] [--rounds N]
#   DIR holds dsattn_gpu_tests and dsattn, built for sm_90a (with CXX=/usr/bin/g++).
# A device call runs at most 10 minutes: steps 1-2 and steps 3-4 may need a call each
# (--no-bench --no-ncu, then --no-tests --no-sanitizer).
set -uo pipefail
cd "$(dirname "$0")/../.."

BIN=""
TESTS=1
SAN=1
NCU=1
BENCH=1
ROUNDS=2
while [ $# -gt 0 ]; do
  case "$1" in
    --prebuilt) BIN="$2"; shift 2 ;;
    --no-tests) TESTS=0; shift ;;
    --no-sanitizer) SAN=0; shift ;;
    --no-ncu) NCU=0; shift ;;
    --no-bench) BENCH=0; shift ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/{/^#/p}' "$0"; exit 0 ;;
    *) echo "cluster_threads_ab: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$BIN" ] || [ ! -x "$BIN/dsattn" ] || [ ! -x "$BIN/dsattn_gpu_tests" ]; then
  echo "cluster_threads_ab: --prebuilt DIR with dsattn and dsattn_gpu_tests expected" >&2
  exit 2
fi

OUT="${OUT:-./gpu_out}/cluster_threads"
mkdir -p "$OUT"
STEP_TIMEOUT_DEFAULT=540  # a device call runs at most 600 s
. scripts/lib_step.sh  # step, device_info, sanitize, print_summary

device_info

if [ "$TESTS" = 1 ]; then
  step tests tests.log "$BIN/dsattn_gpu_tests" --gtest_filter='GpuTopk*:*GpuTopkCluster*:GpuFusedTopk.*'
fi
[ "$SAN" = 1 ] && sanitize "$BIN" 'GpuTopk.ClusterSanitizerSmall'

TOPK_SHAPES=(--shape 1x65536 --shape 1x40000 --shape 1x32768 --shape 1x16384 --shape 8x65536 --shape 12x32768)
FUSED_SHAPES=(--shape 1x65536x1x64x64x128 --shape 1x40000x1x64x64x128 --shape 1x32768x1x64x64x128
              --shape 4x65536x1x64x64x128 --shape 2x32768x2x64x64x128)
[ "$BENCH" = 1 ] || ROUNDS=0
for r in $(seq 1 "$ROUNDS"); do
  for t in 1024 512; do
    step "topk t$t r$r" "topk_t${t}_r$r.log" \
      "$BIN/dsattn" bench topk --iters 50 "${TOPK_SHAPES[@]}" --cluster-threads "$t"
    step "fused t$t r$r" "fused_t${t}_r$r.log" \
      "$BIN/dsattn" bench indexer --fused --b2b --iters 30 "${FUSED_SHAPES[@]}" --cluster-threads "$t"
  done
done

if [ "$NCU" = 1 ] && command -v ncu >/dev/null; then
  for t in 1024 512; do
    step "ncu t$t" "ncu_t$t.log" ncu --kernel-name regex:topk_cluster_kernel --launch-count 1 \
      --section LaunchStats --section SchedulerStats --section WarpStateStats --metrics smsp__inst_executed.sum \
      "$BIN/dsattn" bench topk --iters 1 --shape 1x65536 --cluster-threads "$t"
  done
fi

print_summary
# The medians side by side: the topk rows and the fused rows of every configuration and round.
for f in "$OUT"/topk_*.log "$OUT"/fused_*.log; do
  [ -f "$f" ] || continue
  echo "== $(basename "$f")"
  grep -E '^ +[0-9]+ ' "$f" | head -20
done | tee "$OUT/rows.txt"
exit "$FAILED"
