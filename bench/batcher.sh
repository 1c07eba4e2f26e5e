#!/bin/sh
# The dynamic batcher (include/kiln/batcher.h) on ResNet-18, CPU: 8
# concurrent single-image clients, each with its own session of the batch-1
# module (unbatched), then all through one batcher of the batch-8 module,
# in one kiln-rt-run per setting (tools/rt/rt_clients.c).
#
#   bench/batcher.sh [BUILD_DIR] [MODELS_DIR]     (defaults: build, a temporary folder)
#
# Environment: CLIENTS (8), REQUESTS per client and phase (8), DELAYS, the
# max delays in microseconds to run (default "2000"), SPIN=1 to run each
# once more with libgomp's own spin-then-sleep (GOMP_SPINCOUNT=300000)
# instead of the CPU device's passive default (include/kiln/runtime.h).
#
# Exports resnet18.onnx with .venv/bin/python (tests/models/export_models.py,
# random weights) unless MODELS_DIR has it, compiles it at batch 1 and 8 and
# prints kiln-rt-run's report per setting: throughput (wall and CPU per
# request), p50/p99 latency, the batcher's batches and padded rows, and the
# outputs of the two phases compared. On a machine shared with other work,
# wall throughput favours the phase with more runnable threads (8 sessions
# against one batcher): CPU per request is the figure that compares them.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
models=${2:-}
clients=${CLIENTS:-8}
requests=${REQUESTS:-8}
delays=${DELAYS:-2000}
py="$root/.venv/bin/python"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$root"
if [ -z "$models" ]; then models="$tmp"; fi
if [ ! -f "$models/resnet18.onnx" ]; then
  "$py" tests/models/export_models.py --out "$models" --models resnet18 >/dev/null
fi
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target kiln_cli kiln_rt_run >/dev/null
for b in 1 8; do
  "$build/kiln" compile "$models/resnet18.onnx" --dim N=$b -o "$tmp/resnet18_b$b.kiln" >/dev/null
done
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for d in $delays; do
  echo "== ResNet-18, $clients clients x $requests requests, max batch 8, max delay $d us"
  "$build/kiln-rt-run" "$tmp/resnet18_b8.kiln" --clients "$clients" --max-batch 8 --max-delay-us "$d" \
    --requests "$requests" --sample-module "$tmp/resnet18_b1.kiln"
  if [ "${SPIN:-0}" = 1 ]; then
    echo "== the same with libgomp spinning (GOMP_SPINCOUNT=300000)"
    GOMP_SPINCOUNT=300000 "$build/kiln-rt-run" "$tmp/resnet18_b8.kiln" --clients "$clients" --max-batch 8 \
      --max-delay-us "$d" --requests "$requests" --sample-module "$tmp/resnet18_b1.kiln"
  fi
done
