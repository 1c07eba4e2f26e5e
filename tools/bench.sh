#!/bin/sh
# Reproduces kiln's whole benchmark report in one command: builds, runs every
# benchmark against its peers in the same run, and draws the plots.
#
#   tools/bench.sh [--quick] [--build DIR] [--out DIR] [--threads N] [--no-build]
#
# Needs tools/setup.sh to have run (.venv, OpenBLAS, python3-matplotlib).
# Steps (a failing step is reported and the others still run; the exit status
# is 1 when any step failed):
#   1. build (configures DIR first when it has no CMakeCache.txt)
#   2. sgemm: kiln CPU backend vs OpenBLAS     (build/bench/kiln_bench_sgemm)
#   3. kernels: `kiln bench --json --csv`      -> OUT/kernels.json, kernels.csv
#   4. models: kiln vs onnxruntime vs PyTorch  -> OUT/models.json (bench/models_peers.py)
#   5. fusion: -O0 vs -O1 per model            (bench/fusion.py)
#   6. reference interpreter vs onnxruntime    (bench/ref_vs_ort.py; skipped by --quick)
#   7. targets: OpenCL/Vulkan vs the CPU backend -> OUT/targets.csv (bench/targets.py;
#      the targets `kiln devices` lists, at fp32 and fp16; Vulkan on lavapipe and fp16 only
#      without --quick)
#   8. winograd: OpenCL Winograd vs implicit GEMM per 3x3 shape, ResNet-18
#      -> OUT/winograd.csv (bench/opencl_winograd.py; only with an OpenCL device)
#   9. int8: digits top-1 in fp32, kiln quantize and onnxruntime quantize_static
#      -> OUT/int8_digits.json (bench/int8_digits.py)
#  10. plots + summary.md                      -> OUT/plots/ (bench/plot.py)
# Everything printed is also written to OUT/bench.log. Defaults: --build build,
# --out <build>/bench-out, --threads $(nproc). --quick: fewer sizes and repeats,
# resnet18 + mobilenet_v2 only (a few minutes). Figures are for this machine's
# CPUs; run on an idle machine.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

build=build
out=""
threads=$(nproc)
quick=0
do_build=1
usage() { sed -n '5p' "$0" | sed 's/^# *//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --no-build) do_build=0 ;;
    --build) [ $# -ge 2 ] || usage; build=$2; shift ;;
    --out) [ $# -ge 2 ] || usage; out=$2; shift ;;
    --threads) [ $# -ge 2 ] || usage; threads=$2; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench.sh: unknown option '$1'" >&2; usage ;;
  esac
  shift
done
[ -n "$out" ] || out=$build/bench-out
py=$root/.venv/bin/python
[ -x "$py" ] || { echo "bench.sh: $py missing: run tools/setup.sh first" >&2; exit 2; }
mkdir -p "$out/plots"
log=$out/bench.log

if [ $quick -eq 1 ]; then
  sizes=256,1024; sgemm_repeat=5; repeat=5; names=resnet18,mobilenet_v2
  fusion_names=resnet18,mobilenet_v2
else
  sizes=256,512,1024,2048; sgemm_repeat=10; repeat=20; names=resnet18,mobilenet_v2,resnet50
  fusion_names=resnet18,mobilenet_v2,encoder
fi
kiln=$build/kiln
models=$build/models
failed=""

# Runs one step with a header; a failure is recorded, not fatal.
step() {
  title=$1; shift
  printf '\n== %s ==\n' "$title"
  start=$(date +%s)
  if "$@"; then
    printf -- '-- %s: done in %ss\n' "$title" $(( $(date +%s) - start ))
  else
    rc=$?
    printf -- '-- %s: FAILED (exit %s)\n' "$title" "$rc"
    failed="$failed
  $title"
  fi
}

do_build_step() {
  if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || return 1
  fi
  cmake --build "$build" -j"$threads" >/dev/null
}

sgemm() {
  if [ ! -x "$build/bench/kiln_bench_sgemm" ]; then
    echo "skipped: $build/bench/kiln_bench_sgemm not built (OpenBLAS missing: apt-get install libopenblas-dev)"
    return 0
  fi
  "$build/bench/kiln_bench_sgemm" --sizes "$sizes" --threads "$threads" --repeat "$sgemm_repeat"
}

kernels() {
  if ! help=$("$kiln" bench --help 2>&1); then
    echo "skipped: '$kiln bench --help' failed; this kiln has no bench command yet:"
    echo "$help" | head -3
    rm -f "$out/kernels.json"  # never plot a stale file as if it were this run's
    return 1
  fi
  set -- --json "$out/kernels.json" --csv "$out/kernels.csv"
  # Only pass the options this kiln's bench documents.
  case "$help" in *--threads*) set -- "$@" --threads "$threads" ;; esac
  if [ $quick -eq 1 ]; then
    case "$help" in *--quick*) set -- "$@" --quick ;; esac
  fi
  "$kiln" bench "$@"
}

peers() {
  "$py" bench/models_peers.py --kiln "$kiln" --models "$models" --names "$names" \
    --threads "$threads" --repeat "$repeat" --json "$out/models.json"
}

fusion() {
  "$py" bench/fusion.py --kiln "$kiln" --models "$models" --names "$fusion_names" \
    --threads "$threads" --repeat "$repeat"
}

ref() {
  "$py" bench/ref_vs_ort.py --kiln "$kiln" --models "$models" --repeat 5
}

targets() {
  t=cpu
  devs=$("$kiln" devices 2>/dev/null)
  case "$devs" in *opencl:0*) t="$t,opencl" ;; esac
  if [ $quick -eq 0 ]; then
    case "$devs" in *vulkan:0*) t="$t,vulkan" ;; esac
  fi
  "$py" bench/targets.py --kiln "$kiln" --models "$models" --names resnet18,mobilenet_v2 \
    --targets "$t" --precision "$([ $quick -eq 1 ] && echo fp32 || echo fp32,fp16)" \
    --rounds "$([ $quick -eq 1 ] && echo 2 || echo 5)" --repeat "$repeat" --csv "$out/targets.csv"
}

int8_digits() {
  "$py" bench/int8_digits.py --kiln "$kiln" --out "$build/digits" --models "$models" \
    --json "$out/int8_digits.json"
}

winograd() {
  case "$("$kiln" devices 2>/dev/null)" in
    *opencl:0*) ;;
    *) echo "no OpenCL device: skipped"; return 0 ;;
  esac
  "$py" bench/opencl_winograd.py --kiln "$kiln" --models "$models" \
    --rounds "$([ $quick -eq 1 ] && echo 1 || echo 3)" --repeat "$repeat" --csv "$out/winograd.csv"
}

plots() {
  set --
  [ -f "$out/kernels.json" ] && set -- "$@" --json "$out/kernels.json"
  [ -f "$out/models.json" ] && set -- "$@" --models-json "$out/models.json"
  if [ $# -eq 0 ]; then
    echo "nothing to plot: neither $out/kernels.json nor $out/models.json was written"
    return 1
  fi
  "$py" bench/plot.py "$@" --out "$out/plots"
}

main() {
  echo "kiln benchmarks: $(date -u '+%Y-%m-%d %H:%M UTC'), $threads threads, $(nproc) CPUs," \
       "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -1)"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$([ $quick -eq 1 ] && echo ', --quick')"
  [ $do_build -eq 1 ] && step "build ($build)" do_build_step
  if [ ! -x "$kiln" ]; then
    echo "bench.sh: $kiln missing (build failed?)"
    return 1
  fi
  step "sgemm: kiln CPU backend vs OpenBLAS" sgemm
  step "kernels: kiln bench" kernels
  step "models: kiln vs onnxruntime vs PyTorch ($threads threads)" peers
  step "fusion: -O0 vs -O1" fusion
  [ $quick -eq 0 ] && step "models: kiln reference interpreter vs onnxruntime" ref
  step "targets: OpenCL / Vulkan vs the CPU backend" targets
  step "winograd: OpenCL Winograd vs implicit GEMM" winograd
  step "int8: digits top-1, kiln quantize vs onnxruntime quantize_static" int8_digits
  step "plots" plots

  printf '\n== results ==\n'
  for f in "$out"/kernels.json "$out"/kernels.csv "$out"/models.json "$out"/targets.csv "$out"/winograd.csv "$out"/plots/*.png \
           "$out"/plots/summary.md; do
    [ -f "$f" ] && echo "  $f"
  done
  echo "  $log (this output)"
  if [ -n "$failed" ]; then
    echo "failed steps:$failed"
    return 1
  fi
  return 0
}

# The log keeps the whole report; the exit status is main's, not tee's.
status_file=$(mktemp)
{ main; echo $? >"$status_file"; } 2>&1 | tee "$log"
rc=$(cat "$status_file")
rm -f "$status_file"
exit "$rc"
