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
