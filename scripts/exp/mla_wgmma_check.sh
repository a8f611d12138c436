#!/usr/bin/env bash
# One device call for the Hopper sparse-MLA kernel (mla_wgmma_kernel.cuh; BENCHMARKS.md 2026-12-05
# "Sparse MLA on Hopper's warpgroup MMA"): the new build's GpuSparseMla* tests (every kernel, the
# default bitwise against the one it picks, many rows against sampled CPU rows), memcheck and
# racecheck of a case that runs every kernel, the v3.2 demo, then `dsattn bench mla` (the mma.sync
# kernel and the Hopper kernel timed in each run) for the old build (when given) and the new one,
# two rounds, decode at 16-128 heads and prefill; then the Python tests from the wheels given.
# Logs go to ${OUT:-./gpu_out}/mla_wgmma; the bench rows and a summary are printed compactly.
#
# Usage: scripts/exp/mla_wgmma_check.sh --new DIR [--old DIR] [--wheel FILE]... [--no-tests] [--no-bench]
#   DIR: dsattn and dsattn_gpu_tests built for sm_90a (with CXX=/usr/bin/g++); FILE: wheels to
#   unpack for the Python tests (the dsattn one for the device's Python, plus pytest's).
set -uo pipefail
cd "$(dirname "$0")/../.."
OLD=""; NEW=""; TESTS=1; BENCH=1; WHEELS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --old) OLD="$2"; shift 2 ;;
    --new) NEW="$2"; shift 2 ;;
    --wheel) WHEELS+=("$2"); shift 2 ;;
    --no-tests) TESTS=0; shift ;;
    --no-bench) BENCH=0; shift ;;
    -h|--help) sed -n '2,/^set -uo/{/^#/p}' "$0"; exit 0 ;;
    *) echo "mla_wgmma_check: unknown argument $1" >&2; exit 2 ;;
  esac
done
. scripts/lib_step.sh  # step, device_info, sanitize, print_summary, need_binaries, bench_step
need_binaries mla_wgmma_check --new "$NEW"
OUT="${OUT:-./gpu_out}/mla_wgmma"
mkdir -p "$OUT"
STEP_TIMEOUT_DEFAULT=240
device_info
cat "$OUT/device.txt"

if [ "$TESTS" = 1 ]; then
  step tests tests.log "$NEW/dsattn_gpu_tests" --gtest_filter='GpuSparseMla*'
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$OUT/tests.log" | head -20
  sanitize "$NEW" 'GpuSparseMla.V4WithExtraCacheSinkAndLengths'
  step "demo v3.2" demo_v32.log "$NEW/dsattn" demo --preset deepseek-v3.2 --batch 2 --next-n 2
fi
DEC=(--format v32,v4 --batch 1,16,64 --heads 16,32,64,128 --topk 2048 --no-simple --reps 9)
PRE=(--prefill --format v32,v4 --batch 1024 --heads 128 --topk 2048 --no-simple --reps 5)
if [ "$BENCH" = 1 ]; then
  for round in 1 2; do
    [ -n "$OLD" ] && bench_step "old r$round" "old_r$round.log" "$OLD/dsattn" bench mla "${DEC[@]}"
    bench_step "new r$round" "new_r$round.log" "$NEW/dsattn" bench mla "${DEC[@]}"
  done
  [ -n "$OLD" ] && bench_step "old prefill" old_pre.log "$OLD/dsattn" bench mla "${PRE[@]}"
  bench_step "new prefill" new_pre.log "$NEW/dsattn" bench mla "${PRE[@]}"
fi
if [ ${#WHEELS[@]} -gt 0 ]; then
  mkdir -p "$OUT/pysite"
  for w in "${WHEELS[@]}"; do python3 -m zipfile -e "$w" "$OUT/pysite"; done
  step python python.log env PYTHONPATH="$OUT/pysite" python3 -m pytest -q -p no:cacheprovider python/tests
  tail -2 "$OUT/python.log"
fi
print_summary
exit $FAILED
