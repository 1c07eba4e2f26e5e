#!/bin/sh
# A cold run under LeakSanitizer that tells a leak from LSan's own failure.
#
#   lsan_cold_run.sh DIR COMMAND [ARG...]
#
# Empties DIR, runs COMMAND with PoCL's and kiln's caches inside it and
# leak detection on, and exits with COMMAND's status -- except where LSan's
# tracer itself dies at exit before it reports (google/sanitizers#1353: a
# signal while it suspends the driver's threads, seen on some hosts with
# PoCL's threads and never with a leak report): then the leak check could
# not run, and the test is reported skipped (77), not passed.
set -u
dir=$1
shift
rm -rf "$dir" && mkdir -p "$dir" || exit 1
log=$dir/stderr.log
POCL_CACHE_DIR=$dir/pocl KILN_CACHE_DIR=$dir/kiln ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=1 \
  "$@" 2>"$log"
rc=$?
cat "$log" >&2
if [ "$rc" -ne 0 ] && ! grep -q "detected memory leaks" "$log" &&
   grep -q "LeakSanitizer has encountered a fatal error" "$log"; then
  echo "lsan_cold_run: LeakSanitizer's tracer failed before it could report (google/sanitizers#1353); the leak check did not run" >&2
  exit 77
fi
exit "$rc"
