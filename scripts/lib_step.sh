# Sourced by the scripts that run on the device machine (gpu_check.sh, exp/*.sh), from the
# repository root; step, bench_step and print_summary need OUT set. step NAME LOG CMD...: runs CMD
# under a timeout of ${STEP_TIMEOUT:-$STEP_TIMEOUT_DEFAULT} seconds with its output in $OUT/LOG,
# appends a row for the summary table to SUMMARY, sets FAILED=1 when CMD fails, and returns CMD's
# status.
SUMMARY=()
FAILED=0
step() {
  local name="$1" log="$2"; shift 2
  local t0=$SECONDS
  timeout "${STEP_TIMEOUT:-${STEP_TIMEOUT_DEFAULT:-1800}}" "$@" >"$OUT/$log" 2>&1
  local rc=$?
  local res="ok"
  if [ $rc -ne 0 ]; then res="FAIL($rc)"; FAILED=1; fi
  SUMMARY+=("$(printf '| %-22s | %-9s | %5ss | %s' "$name" "$res" "$((SECONDS - t0))" "$log")")
  return $rc
}

# device_info: the GPU's name, memory size and clocks into $OUT/device.txt.
device_info() {
  nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv >"$OUT/device.txt" 2>&1 || true
}

# sanitize BIN FILTER: compute-sanitizer memcheck and racecheck (steps "memcheck" / "racecheck",
# logs memcheck.log / racecheck.log) of BIN/dsattn_gpu_tests --gtest_filter=FILTER; a summary row
# says so when compute-sanitizer is missing.
sanitize() {
  local bin="$1" filter="$2"
  if ! command -v compute-sanitizer >/dev/null; then
    SUMMARY+=("| compute-sanitizer      | missing   |")
    return 0
  fi
  step memcheck memcheck.log compute-sanitizer --tool memcheck --error-exitcode 97 \
    "$bin/dsattn_gpu_tests" --gtest_filter="$filter"
  step racecheck racecheck.log compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 97 \
    "$bin/dsattn_gpu_tests" --gtest_filter="$filter"
}

# print_summary: the steps' table, to stdout and $OUT/summary.txt.
print_summary() {
  {
    echo "| step                   | result    |  time | log"
    printf '%s\n' "${SUMMARY[@]}"
  } | tee "$OUT/summary.txt"
}

# need_binaries SCRIPT FLAG DIR: exits 2, saying so, unless DIR holds dsattn and dsattn_gpu_tests
# (the experiment scripts' --new / --prebuilt builds).
need_binaries() {
  if [ -z "$3" ] || [ ! -x "$3/dsattn" ] || [ ! -x "$3/dsattn_gpu_tests" ]; then
    echo "$1: $2 DIR with dsattn and dsattn_gpu_tests expected" >&2
    exit 2
  fi
}

# bench_step NAME LOG CMD...: a step running `dsattn bench mla` whose rows are printed at once,
# "format shape kernel us %copy;" each (decode and prefill), after the run's copy bandwidth (a
# device call cut short keeps what ran).
bench_step() {
  local name="$1" log="$2"; shift 2
  step "$name" "$log" "$@"
  echo "== $name: $(grep -o 'copy [0-9]* GB/s' "$OUT/$log" | head -1)"
  awk -F'|' '/^\| *(v|d_qk)/ {gsub(/ /, "", $0); printf "%s %s %s %s %s; ", $2, $3, $5, $6, $8} END {print ""}' "$OUT/$log"
}
