#!/bin/sh
# Runs kiln's benchmarks and prints their figures (ratios against a peer
# measured in the same run). Not part of the test suite.
#   tools/bench.sh [--quick]
# Needs tools/setup.sh to have run (build/, .venv). Figures are for this
# machine's CPUs; run on an idle machine.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
py=.venv/bin/python
threads=$(nproc)
sizes=256,512,1024,2048
repeat=20
if [ "${1:-}" = "--quick" ]; then sizes=256,1024; repeat=5; fi

cmake --build build -j"$threads" >/dev/null
models=build/models

echo "== sgemm: kiln CPU backend vs OpenBLAS =="
build/bench/kiln_bench_sgemm --sizes "$sizes" --threads "$threads" --repeat 10

echo
echo "== models: kiln CPU backend vs onnxruntime ($threads threads) =="
$py bench/models_cpu.py --kiln build/kiln --models "$models" --threads "$threads" --repeat "$repeat"

echo
echo "== models: kiln reference interpreter vs onnxruntime =="
$py bench/ref_vs_ort.py --kiln build/kiln --models "$models" --repeat 5
