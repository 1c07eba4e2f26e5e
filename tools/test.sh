#!/bin/sh
# Runs kiln's whole default test suite:
#   1. build/ (RelWithDebInfo): unit, badinput, ONNX node conformance (onnx) and
#      model tests (models: ResNet-18 / MobileNetV2 vs onnxruntime);
#   2. build-asan/ (ASan + UBSan): unit, badinput and conformance again (not
#      the suites labelled "noasan": nine ImageNet-size models take many
#      minutes under ASan);
#   3. build-fuzz/ (clang-15, libFuzzer + ASan + UBSan): seed corpora generated,
#      then a bounded run of each harness (ctest -L fuzzsmoke, ~40 s each; the
#      long runs are the label "fuzz": ctest --test-dir build-fuzz -L fuzz).
# Exits non-zero when any test fails. Suites labelled "slow" are left out; run
# them with: ctest --test-dir build -L slow
# Needs tools/setup.sh to have run once (Debian packages + .venv).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=$(nproc)
status=0

step() { echo; echo "=== $* ==="; }

step "build (RelWithDebInfo)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
  cmake --build build -j"$jobs" || exit 1

step "tests: unit, badinput, onnx, models"
ctest --test-dir build --output-on-failure -j"$jobs" -LE slow || status=1

step "build (ASan + UBSan)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON >/dev/null &&
  cmake --build build-asan -j"$jobs" || exit 1

step "tests under ASan + UBSan: unit, badinput, onnx"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs" -L 'unit|badinput|onnx' -LE 'slow|noasan' || status=1

step "libFuzzer harnesses, bounded runs (clang-15)"
if cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang-15 -DKILN_FUZZ=ON >/dev/null &&
  cmake --build build-fuzz -j"$jobs" --target kiln_fuzzers; then
  ctest --test-dir build-fuzz --output-on-failure -j"$jobs" -L fuzzsmoke || status=1
else
  status=1
fi

if [ "$status" -ne 0 ]; then
  echo; echo "tools/test.sh: FAILED (see the failing tests above)"
else
  echo; echo "tools/test.sh: all suites passed"
fi
exit "$status"
