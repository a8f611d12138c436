# Sourced by the scripts that run on the device machine (gpu_check.sh, exp/*.sh), from the
# repository root, after they set OUT. step NAME LOG CMD...: runs CMD under a timeout of
# ${STEP_TIMEOUT:-$STEP_TIMEOUT_DEFAULT} seconds with its output in $OUT/LOG, appends a row for the
# summary table to SUMMARY, sets FAILED=1 when CMD fails, and returns CMD's status.
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
