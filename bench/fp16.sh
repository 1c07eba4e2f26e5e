#!/bin/sh
# fp16 vs fp32 figures on resnet18 and mobilenet_v2 (bench/fp16.c).
#
#   bench/fp16.sh [BUILD_DIR] [kiln_bench_fp16 options]   (default: build)
#
# Exports the two models with .venv/bin/python into a temporary folder,
# builds kiln_bench_fp16 in BUILD_DIR (configured first when it has no
# CMakeCache.txt) and prints one line per model and target: the CPU, and
# each of opencl / vulkan that `kiln devices` lists.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
[ $# -gt 0 ] && shift
py="$root/.venv/bin/python"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$root"
"$py" tests/models/export_models.py --out "$tmp" --models resnet18,mobilenet_v2 >/dev/null
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target kiln_bench_fp16 kiln_cli >/dev/null
targets=cpu
devices=$("$build/kiln" devices 2>/dev/null || true)
for api in opencl vulkan; do
  # `kiln devices` lists the CPU as "  [0] ..." but GPU devices as
  # "opencl:0  platform ..." / "vulkan:0  ..." (or "  none: why")
  if printf '%s\n' "$devices" | grep -q "^$api:0 "; then
    targets="$targets $api"
  fi
done
for t in $targets; do
  "$build/bench/kiln_bench_fp16" --target "$t" "$@" "$tmp/resnet18.onnx" "$tmp/mobilenet_v2.onnx"
done
