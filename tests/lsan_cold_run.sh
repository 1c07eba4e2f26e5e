#!/bin/sh
# A run under LeakSanitizer that tells a leak from LSan's own failure.
#
#   lsan_cold_run.sh DIR|- COMMAND [ARG...]
#
# Runs COMMAND with leak detection on -- cold, with PoCL's and kiln's caches
# in the emptied DIR, or with the caches as they are for '-' -- and exits
# with COMMAND's status, except where LSan's tracer itself dies at exit
# before it reports (google/sanitizers#1353: a signal while it suspends the
# driver's threads, seen on one host with PoCL's threads, and never with a
# leak report). Then COMMAND runs again without the leak check: its failure
# fails the test, its success is reported as a skip (77), because the leak
# check could not run.
set -u
dir=$1
shift
if [ "$dir" = - ]; then
  log=$(mktemp) || exit 1
  trap 'rm -f "$log"' EXIT
else
  rm -rf "$dir" && mkdir -p "$dir" || exit 1
  log=$dir/stderr.log
  POCL_CACHE_DIR=$dir/pocl KILN_CACHE_DIR=$dir/kiln
  export POCL_CACHE_DIR KILN_CACHE_DIR
fi
asan=${ASAN_OPTIONS:-}
ASAN_OPTIONS=$asan:detect_leaks=1 "$@" 2>"$log"
rc=$?
cat "$log" >&2
if [ "$rc" -ne 0 ] && ! grep -q "detected memory leaks" "$log" &&
   grep -q "LeakSanitizer has encountered a fatal error" "$log"; then
  echo "lsan_cold_run: LeakSanitizer's tracer failed before it could report (google/sanitizers#1353); running again without the leak check" >&2
  ASAN_OPTIONS=$asan:detect_leaks=0 "$@" || exit $?
  echo "lsan_cold_run: passed without the leak check, which could not run: skipped" >&2
  exit 77
fi
exit "$rc"
