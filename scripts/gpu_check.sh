#!/usr/bin/env bash
# One-command GPU check for an H100/H200 (sm_90a):
#   1. build for sm_90a with CXX=/usr/bin/g++ (or use binaries from --prebuilt DIR),
#   2. run every GPU test suite (dsattn_gpu_tests), then the CUDA-graph and cluster tests again with
#      DSATTN_PDL=0 (kernels launched without programmatic dependent launch), and the fused top-k
#      tests under the sm_100 family's indexer kernel choice (DSATTN_INDEXER_KERNEL=portable),
#   3. a reduced compute-sanitizer memcheck + racecheck pass (tests whose name contains "Sanitizer";
#      racecheck without the indexer producer's L1 touch, see below),
#   4. the Python tests (python/tests, GPU ones included) with torch, when $PYTHON has torch:
#      from the wheels given with --wheel (unpacked into $OUT/pysite: the dsattn wheel, plus e.g.
#      pytest's on a machine without it), else from a wheel built here when scikit-build-core
#      and nanobind are installed (CXX=/usr/bin/g++: the image's /opt/gcc links libstdc++
#      statically, and such an extension crashed inside torch),
#   5. the benchmarks: dsattn bench indexer (+ bench topk, bench indexer --fused and --fused --cold
#      when present), and after the Python tests bench/torch_ops_overhead.py (host time of the
#      Python entry points)
#      and bench/compat_overhead.py (GPU time of dsattn.compat.deep_gemm beside the op),
#   2b. with --random N: the *RandomCases tests again over N fresh random cases each (seed from
#      DSATTN_TEST_RANDOM_SEED, else drawn from the clock and printed, so a failure can be rerun),
#   6. with --native-fp8: the portable indexer's sm_89 / sm_120 code (native e4m3 MMA, E4M3 Q) on
#      this Hopper GPU, from a build with -DDSATTN_SM90_NATIVE_FP8_MMA=ON (its sm_90 code takes that
#      path; ptxas emulates the e4m3 MMA): GpuIndexer.* and the fused op's portable-kernel tests,
# writing logs to ${OUT:-./gpu_out} and printing a summary table last.
#
# Usage: scripts/gpu_check.sh [--prebuilt DIR] [--quick] [--no-bench] [--no-sanitizer] [--no-python]
#                             [--wheel FILE]... [--san-filter GTEST_FILTER] [--test-filter GTEST_FILTER]
#                             [--native-fp8] [--native-prebuilt DIR] [--random N]
#   --prebuilt DIR   DIR holds dsattn_gpu_tests and dsattn (built elsewhere for sm_90a)
#   --wheel FILE     a wheel to unpack for the Python tests (repeatable; the dsattn one built
#                    elsewhere with DSATTN_CUDA=ON for this Python version)
#   --quick          quick benchmark shapes
#   --native-fp8     step 6, building that variant in build-gpu-native (target dsattn_gpu_tests)
#   --native-prebuilt DIR  step 6 with DIR's dsattn_gpu_tests (a DSATTN_SM90_NATIVE_FP8_MMA=ON build)
#   --random N       step 2b: N random cases per *RandomCases test (the suite's own run draws 8 top-k,
#                    8 indexer, 4 fused, 3 sparse-MLA cases)
# Environment: OUT (log folder), STEP_TIMEOUT (seconds per step, default 1800), PYTHON (python3).
set -uo pipefail
cd "$(dirname "$0")/.."

PREBUILT=""
QUICK=0
BENCH=1
SAN=1
PYTESTS=1
WHEELS=()
SAN_FILTER="*Sanitizer*"
TEST_FILTER="*"
NATIVE=0
NATIVE_BIN=""
RANDOM_CASES=0
while [ $# -gt 0 ]; do
  case "$1" in
    --prebuilt) PREBUILT="$2"; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --no-bench) BENCH=0; shift ;;
    --no-sanitizer) SAN=0; shift ;;
    --no-python) PYTESTS=0; shift ;;
    --wheel) WHEELS+=("$2"); shift 2 ;;
    --san-filter) SAN_FILTER="$2"; shift 2 ;;
    --test-filter) TEST_FILTER="$2"; shift 2 ;;
    --native-fp8) NATIVE=1; shift ;;
    --native-prebuilt) NATIVE=1; NATIVE_BIN="$2"; shift 2 ;;
    --random) RANDOM_CASES="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/{/^#/p}' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument $1" >&2; exit 2 ;;
  esac
done

OUT="${OUT:-./gpu_out}"
mkdir -p "$OUT"
. scripts/lib_step.sh  # step, device_info, sanitize, print_summary

device_info

if [ -n "$PREBUILT" ]; then
  BIN="$PREBUILT"
else
  BIN=build-gpu
  step build build.log bash -c "CXX=/usr/bin/g++ cmake -S . -B $BIN -DDSATTN_CUDA=ON -DDSATTN_CUDA_ARCHS=90a \
      -DCMAKE_BUILD_TYPE=Release && cmake --build $BIN -j$(nproc) --target dsattn_gpu_tests dsattn_cli" || {
    tail -30 "$OUT/build.log"; printf '%s\n' "${SUMMARY[@]}"; exit 1; }
fi

step gpu_tests gpu_tests.log "$BIN/dsattn_gpu_tests" --gtest_filter="$TEST_FILTER"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED" "$OUT/gpu_tests.log" | head -20
# The slowest tests (ms), to keep the suite within one device call.
grep -E "^\[ +OK \]" "$OUT/gpu_tests.log" | sed -E 's/.*\] ([^ ]+) \(([0-9]+) ms\)/\2 \1/' | sort -rn | head -8
step gpu_tests_no_pdl gpu_tests_no_pdl.log env DSATTN_PDL=0 "$BIN/dsattn_gpu_tests" \
  --gtest_filter='*GraphReplay*:*GpuTopkCluster.KernelRows*:GpuFusedTopk.Fp8DecodeLengthsAroundK:GpuFusedTopk.ResidentGraphNewLengths*'
# The sm_100 family's kernel choice on this GPU (DSATTN_INDEXER_KERNEL=portable: FP8 calls with
# D = 128 and >= 768 block-table states per SM on the mma.sync consumers' warp-specialized kernel,
# the rest on the portable kernel), for which the fused op must return paged_mqa_logits' scores
# bitwise: every fused test but the two that assert Hopper's own routes (the resident route).
step gpu_tests_sm100_rule gpu_tests_sm100_rule.log env DSATTN_INDEXER_KERNEL=portable "$BIN/dsattn_gpu_tests" \
  --gtest_filter='GpuFusedTopk.*:-GpuFusedTopk.RouteByPieceLength:GpuFusedTopk.ResidentRouteCallSwitch'

if [ "$RANDOM_CASES" -gt 0 ]; then
  RSEED="${DSATTN_TEST_RANDOM_SEED:-$(( $(date +%s) % 1000000 ))}"
  echo "random cases: $RANDOM_CASES per test, DSATTN_TEST_RANDOM_SEED=$RSEED"
  step random_cases random_cases.log env DSATTN_TEST_RANDOM_CASES="$RANDOM_CASES" DSATTN_TEST_RANDOM_SEED="$RSEED" \
    "$BIN/dsattn_gpu_tests" --gtest_filter='*RandomCases'
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$OUT/random_cases.log" | head -5
fi

if [ $SAN -eq 1 ]; then
  if command -v compute-sanitizer >/dev/null; then
    step memcheck memcheck.log compute-sanitizer --tool memcheck --error-exitcode 97 \
      "$BIN/dsattn_gpu_tests" --gtest_filter="$SAN_FILTER"
    # Without the indexer producer's L1 touch (kWsTouchGroup, indexer_ws.cuh; off by default since
    # 2026-12-06, -64 keeps it off where DSATTN_WS_PRODUCER's default would have it): its
    # cp.async.ca copies into a never-read 16-byte scratch per lane are WAW hazards to racecheck.
    # Every kernel checked: under --kernel-name, a thread-block-cluster kernel left unchecked made
    # racecheck abort ("failed to handle a hardware exception"; BENCHMARKS.md, 2026-12-07).
    step racecheck racecheck.log env DSATTN_WS_PRODUCER=-64 compute-sanitizer --tool racecheck \
      --racecheck-report all --error-exitcode 97 "$BIN/dsattn_gpu_tests" --gtest_filter="$SAN_FILTER"
  else
    SUMMARY+=("| compute-sanitizer      | missing   |")
  fi
fi

if [ $NATIVE -eq 1 ]; then
  if [ -z "$NATIVE_BIN" ]; then
    NATIVE_BIN=build-gpu-native
    step native_build native_build.log bash -c "CXX=/usr/bin/g++ cmake -S . -B $NATIVE_BIN -DDSATTN_CUDA=ON \
        -DDSATTN_CUDA_ARCHS=90a -DDSATTN_SM90_NATIVE_FP8_MMA=ON -DCMAKE_BUILD_TYPE=Release && \
        cmake --build $NATIVE_BIN -j$(nproc) --target dsattn_gpu_tests" || NATIVE_BIN=""
  fi
  if [ -n "$NATIVE_BIN" ]; then
    # Every GpuIndexer case runs on the portable kernel among others; the fused tests below are
    # forced onto it (their streaming route is its CTA-wide pipeline, the logits route its
    # warp-local one), including sm_120's 99 KiB budget.
    step native_fp8_indexer native_fp8_indexer.log "$NATIVE_BIN/dsattn_gpu_tests" \
      --gtest_filter='GpuIndexer.*:GpuIndexerPlan.*'
    step native_fp8_fused native_fp8_fused.log env DSATTN_INDEXER_KERNEL=portable "$NATIVE_BIN/dsattn_gpu_tests" \
      --gtest_filter='GpuFusedTopk.Fp8DecodeLengthsAroundK:GpuFusedTopk.Fp8NextNAndPageSizes:GpuFusedTopk.Fp8HeadsAndDims:GpuFusedTopk.Varlen:GpuFusedTopk.GraphReplay:GpuFusedTopk.SmemBudget99KiB:GpuFusedTopk.CallerSchedule:GpuFusedTopk.TensOfRows:GpuFusedTopk.PartialTieAtKthKey'
  fi
fi

if [ $PYTESTS -eq 1 ]; then
  PY="${PYTHON:-python3}"
  if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    SUMMARY+=("$(printf '| %-22s | %-9s | needs torch in %s' "python tests" "skipped" "$PY")")
  else
    if [ ${#WHEELS[@]} -eq 0 ]; then
      if "$PY" -c "import scikit_build_core, nanobind" >/dev/null 2>&1; then
        rm -rf "$OUT/wheel"
        step python_build python_build.log env CXX=/usr/bin/g++ DSATTN_CUDA=ON DSATTN_CUDA_ARCHS=90a \
          "$PY" -m pip wheel . --no-deps --no-build-isolation -w "$OUT/wheel" && WHEELS=("$OUT"/wheel/dsattn-*.whl)
      else
        SUMMARY+=("$(printf '| %-22s | %-9s | no --wheel, and no scikit-build-core + nanobind to build one' \
          "python tests" "skipped")")
      fi
    fi
    if [ ${#WHEELS[@]} -gt 0 ]; then
      rm -rf "$OUT/pysite"
      for w in "${WHEELS[@]}"; do "$PY" -m zipfile -e "$w" "$OUT/pysite"; done
      step python_tests python_tests.log env PYTHONPATH="$(cd "$OUT/pysite" && pwd)" \
        "$PY" -m pytest -q -rs -p no:cacheprovider python/tests
      tail -n 3 "$OUT/python_tests.log"
      if [ $BENCH -eq 1 ]; then
        # The Python entry points' host time per call (torch op, compiled, graph replay) beside the
        # direct call with a workspace.
        step bench_torch_ops bench_torch_ops.log env PYTHONPATH="$(cd "$OUT/pysite" && pwd)" \
          "$PY" bench/torch_ops_overhead.py
        # DeepGEMM's paged-logits call through dsattn.compat beside the op it stands for (GPU time).
        step bench_compat bench_compat.log env PYTHONPATH="$(cd "$OUT/pysite" && pwd)" \
          "$PY" bench/compat_overhead.py
      fi
    fi
  fi
fi

if [ $BENCH -eq 1 ]; then
  Q=""; [ $QUICK -eq 1 ] && Q="--quick"
  step bench_indexer bench_indexer.log "$BIN/dsattn" bench indexer $Q
  # The same table on the portable (mma.sync) kernels, for comparison on Hopper (the default there
  # is the wgmma kernel wherever it applies): what sm_100 runs (large FP8 decode calls on the
  # warp-specialized kernel with mma.sync consumers), then the portable kernel alone (what sm_80,
  # sm_89 and sm_120 run).
  step bench_indexer_portable bench_indexer_portable.log env DSATTN_INDEXER_KERNEL=portable \
    "$BIN/dsattn" bench indexer $Q
  step bench_indexer_warp_local bench_indexer_warplocal.log env DSATTN_INDEXER_KERNEL=warp-local \
    "$BIN/dsattn" bench indexer $Q --no-prefill
  # Benchmarks other contributors add; skipped when this build does not have them.
  for b in "topk" "indexer --fused"; do
    log="bench_$(echo "$b" | tr -d ' -' ).log"
    if "$BIN/dsattn" bench $b --help >/dev/null 2>&1; then
      step "bench $b" "$log" "$BIN/dsattn" bench $b $Q
    else
      SUMMARY+=("$(printf '| %-22s | %-9s |' "bench $b" "absent")")
    fi
  done
  # The fused op again with other code run on every SM before each call (--cold), as a serving
  # engine's other kernels do between two calls (BENCHMARKS.md, 2026-12-06).
  if "$BIN/dsattn" bench indexer --fused --help 2>/dev/null | grep -q -- "--cold"; then
    step "bench fused --cold" bench_indexerfused_cold.log "$BIN/dsattn" bench indexer --fused --cold $Q
  fi
  for f in "$OUT"/bench_*.log; do echo "== $f"; tail -n 40 "$f"; done
fi

echo
echo "| step                   | result    |  time  | log"
echo "|------------------------|-----------|--------|-----"
printf '%s\n' "${SUMMARY[@]}"
exit $FAILED
