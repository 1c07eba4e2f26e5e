#!/bin/sh
# Memory planner figures on resnet50, mobilenet_v2 and the encoder block.
#
#   bench/planner.sh [BUILD_DIR]     (default: build)
#
# Exports the three models with .venv/bin/python (tests/python_env.sh) into a
# temporary folder, builds kiln_bench_planner in BUILD_DIR (configured
# first when it has no CMakeCache.txt) and prints one line per model.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
py="$root/.venv/bin/python"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$root"
"$py" tests/models/export_models.py --out "$tmp" --models resnet50,mobilenet_v2 >/dev/null
"$py" tests/models/export_encoder.py --out "$tmp" >/dev/null
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target kiln_bench_planner >/dev/null
"$build/bench/kiln_bench_planner" "$tmp/resnet50.onnx" "$tmp/mobilenet_v2.onnx" "$tmp/encoder.onnx"
