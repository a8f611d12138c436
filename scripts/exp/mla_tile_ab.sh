#!/usr/bin/env bash
# One device call for the tensor-core sparse-MLA kernel's staged 64-token tiles (BENCHMARKS.md
# 2026-12-05 "64-token tiles"): the new build's GPU tests (GpuSparseMla*: every case on both
# kernels; MmaTileSizes at 32 and 64 tokens per tile and 16 / 32 / 64 heads per CTA), memcheck and
# racecheck of the MLA sanitizer set, then `dsattn bench mla` (tensor-core kernel only) alternating
# the old build, the new build's default, and the new build at DSATTN_MLA_TILE=32 / 64, two rounds.
# Logs go to ${OUT:-./gpu_out}/mla_tile; the bench tables and a summary are printed.
#
# Usage: scripts/exp/mla_tile_ab.sh --old DIR --new DIR [--no-tests] [--no-bench] [--ncu]
#   DIR: dsattn and dsattn_gpu_tests built for sm_90a (with CXX=/usr/bin/g++).
set -uo pipefail
cd "$(dirname "$0")/../.."
OLD=""; NEW=""; TESTS=1; BENCH=1; NCU=0
while [ $# -gt 0 ]; do
  case "$1" in
    --old) OLD="$2"; shift 2 ;;
    --new) NEW="$2"; shift 2 ;;
    --no-tests) TESTS=0; shift ;;
    --no-bench) BENCH=0; shift ;;
    --ncu) NCU=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/{/^#/p}' "$0"; exit 0 ;;
    *) echo "mla_tile_ab: unknown argument $1" >&2; exit 2 ;;
  esac
done
. scripts/lib_step.sh  # step, device_info, sanitize, print_summary, need_binaries, bench_step
need_binaries mla_tile_ab --new "$NEW"
OUT="${OUT:-./gpu_out}/mla_tile"
mkdir -p "$OUT"
STEP_TIMEOUT_DEFAULT=300
device_info
cat "$OUT/device.txt"

if [ "$TESTS" = 1 ]; then
  step tests tests.log "$NEW/dsattn_gpu_tests" --gtest_filter='GpuSparseMla*'
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|error" "$OUT/tests.log" | head -30
  sanitize "$NEW" 'GpuSparseMla.SmallHeadCountsAndEmptyRows:GpuSparseMla.MmaRejectsWhatItCannotRun'
  step "demo v3.2" demo_v32.log "$NEW/dsattn" demo --preset deepseek-v3.2 --batch 2 --next-n 2
  step "demo v4.1" demo_v41.log "$NEW/dsattn" demo --preset deepseek-v4.1-flash --batch 8
fi
DEC=(--format v32,v4 --batch 1,16,64 --heads 16,32,64,128 --topk 2048 --no-simple)
PRE=(--prefill --format v32,v4 --batch 256,4096 --heads 128 --topk 2048 --no-simple)
if [ "$BENCH" = 1 ]; then
  for round in 1 2; do
    [ -n "$OLD" ] && bench_step "old r$round" "old_r$round.log" "$OLD/dsattn" bench mla "${DEC[@]}"
    bench_step "new r$round" "new_r$round.log" "$NEW/dsattn" bench mla "${DEC[@]}"
    bench_step "new t32 r$round" "t32_r$round.log" env DSATTN_MLA_TILE=32 "$NEW/dsattn" bench mla "${DEC[@]}"
    bench_step "new t64 r$round" "t64_r$round.log" env DSATTN_MLA_TILE=64 "$NEW/dsattn" bench mla "${DEC[@]}"
    if [ "$round" = 1 ]; then
      [ -n "$OLD" ] && bench_step "old prefill" old_pre.log "$OLD/dsattn" bench mla "${PRE[@]}"
      bench_step "new prefill" new_pre.log "$NEW/dsattn" bench mla "${PRE[@]}"
    fi
  done
fi
if [ "$NCU" = 1 ] && command -v ncu >/dev/null; then
  step ncu ncu.log ncu --kernel-name regex:sparse_mla_mma_kernel --launch-count 1 --section SpeedOfLight \
    --section Occupancy "$NEW/dsattn" bench mla --format v32 --batch 64 --heads 128 --no-simple --reps 3
  grep -E "Throughput|Duration|Occupancy|Registers" "$OUT/ncu.log" | head -20
fi
print_summary
exit $FAILED
