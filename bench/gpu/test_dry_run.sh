#!/usr/bin/env bash
# ctest bench_gpu_dry_run: bench/gpu/prepare.sh packs this build (no .deb's:
# offline) with examples/tinycnn.onnx, its input and the reference target's
# output as the expected one; bench/gpu/device_check.sh --dry-run then runs
# every step on lavapipe and PoCL from that pack, and the summary must hold a
# figure for each: so the device script keeps up with kiln's CLI and the
# benches' output. Then a second, short run against a wrong expected output
# must report the mismatch and exit 1.
#
#   bench/gpu/test_dry_run.sh BUILD_DIR WORK_DIR
set -uo pipefail
build=$(cd "$1" && pwd) || exit 2
work="$2"
root=$(cd "$(dirname "$0")/../.." && pwd)
fail=0
check() { # check WHAT COMMAND...: one assertion
  if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi
}
has() { grep -E -q -- "$1" "$2"; }

rm -rf "$work"
mkdir -p "$work/models"
cp "$root/examples/tinycnn.onnx" "$work/models/"
# a seeded float32 [1,1,28,28] input as .npy (format 1.0), with the stdlib
python3 - "$work/models/tinycnn_input.npy" <<'EOF' || exit 1
import random, struct, sys
random.seed(7)
hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 28, 28), }"
hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
    f.write(struct.pack("<784f", *[random.gauss(0, 1) for _ in range(784)]))
EOF
"$build/kiln" run "$work/models/tinycnn.onnx" --target ref --input "image=$work/models/tinycnn_input.npy" \
  --output "$work/ref" >/dev/null || exit 1
cp "$work/ref/probs.npy" "$work/models/tinycnn_ort.npy"

echo "--- prepare.sh"
bash "$root/bench/gpu/prepare.sh" --build "$build" --dest "$work/pack" --no-debs \
  --models "$work/models/tinycnn.onnx" >"$work/prepare.log" 2>&1
check "prepare.sh exits 0" test $? = 0
m="$work/pack/MANIFEST.tsv"
for b in kiln kiln_bench_vulkan_sgemm kiln_bench_opencl_sgemm; do
  check "pack holds $b" test -s "$work/pack/bin/$b.xz"
  check "manifest lists $b" has "^bin	$b	" "$m"
done
check "manifest maps libvulkan.so.1 to its package" has "^deb	-	libvulkan1	.*	loader	libvulkan.so.1	" "$m"
check "manifest maps libprotobuf-c.so.1 to its package" has "^deb	-	libprotobuf-c1	.*	private	" "$m"
check "manifest lists the model with kiln info's names" has "^model	tinycnn	.*	image=tinycnn_input.npy,probs=tinycnn_ort.npy	" "$m"
check "manifest gives the sizes" has "^# sizes: tree [0-9]+ B \+ pack [0-9]+ B" "$m"

echo "--- device_check.sh --dry-run"
KILN_GPU_PEAK_GFLOPS=100 bash "$root/bench/gpu/device_check.sh" --dry-run --gpu-dir "$work/pack" \
  --out "$work/out" >"$work/dry.log" 2>&1
check "device_check.sh --dry-run exits 0 (no step failed)" test $? = 0
s="$work/out/summary.md"
check "summary written" test -s "$s"
check "log written" test -s "$work/out/log"
for st in devices vk_sgemm cl_sgemm tinycnn_vk_gpu tinycnn_vk_cpu tinycnn_cl_gpu tinycnn_cl_cpu tune tinycnn_cpu; do
  check "step $st ok" has "^\| $st \| ok \|" "$s"
done
num='[0-9]+\.[0-9]+'
for n in 64 128; do
  check "vulkan sgemm $n: GFLOP/s, % of peak, checked" has "^\| vulkan shader \(device time\) \| $n \| $num \| $num% \| ok \|" "$s"
  check "opencl sgemm $n: kiln's GFLOP/s, the rule set (PoCL: cpu)" has "^\| opencl kiln \| $n \| $num \| $num% \| cpu rules \|" "$s"
done
check "Vulkan rules gpu: latency, kernels, compared" has "^\| tinycnn_vk_gpu \| tinycnn \| vulkan:0 \| gpu \| $num \| $num \| $num \| ok \|" "$s"
check "Vulkan rules cpu: latency, kernels, compared" has "^\| tinycnn_vk_cpu \| tinycnn \| vulkan:0 \| cpu \| $num \| $num \| $num \| ok \|" "$s"
check "the rules pair again, the other way round" has "^\| tinycnn_vk_gpu_2 \| tinycnn \| vulkan:0 \| gpu \| $num \|" "$s"
check "OpenCL rules gpu: latency, kernels, compared" has "^\| tinycnn_cl_gpu \| tinycnn \| opencl:0 \| gpu \| $num \| $num \| $num \| ok \|" "$s"
check "OpenCL rules cpu: latency, kernels, compared" has "^\| tinycnn_cl_cpu \| tinycnn \| opencl:0 \| cpu \| $num \| $num \| $num \| ok \|" "$s"
check "CPU run" has "^\| tinycnn_cpu \| tinycnn \| cpu \| .* \| $num \| $num \| $num \| ok \|" "$s"
check "tune's own default/tuned line" has "^kiln tune: model: $num ms default, $num ms tuned" "$s"
check "default and tuned runs after the tune" has "^\| tune_tuned_1 \| tinycnn \| vulkan:0 \| .* \| $num \|" "$s"
check "tuning cache returned" test -s "$work/out/tuning.tsv"
check "the GPU step says why it is skipped" has "^\| gpu \| SKIPPED \(no nvidia-smi\)" "$s"

echo "--- a wrong expected output"
# probs of another input: same shape, different values
"$build/kiln" run "$work/models/tinycnn.onnx" --target ref --seed 3 --output "$work/ref3" >/dev/null || exit 1
cp "$work/ref3/probs.npy" "$work/pack/models/tinycnn_ort.npy"
KILN_GPU_PEAK_GFLOPS=100 bash "$root/bench/gpu/device_check.sh" --dry-run --gpu-dir "$work/pack" \
  --out "$work/out2" --skip vk_sgemm,cl_sgemm,tune,cpu >"$work/dry2.log" 2>&1
check "a mismatch makes the exit status 1" test $? = 1
check "the mismatch is in the step table" has "^\| tinycnn_vk_gpu \| FAIL \(rc 3: outputs outside tolerance\)" "$work/out2/summary.md"
check "and in the run table" has "^\| tinycnn_cl_gpu \| tinycnn \| opencl:0 \| .* \| MISMATCH \|" "$work/out2/summary.md"
check "skipped groups are named" has "^\| tune \| SKIPPED \(--skip\)" "$work/out2/summary.md"

if [ "$fail" != 0 ]; then
  echo "--- summary.md"; cat "$s"; echo "--- prepare.log"; cat "$work/prepare.log"
  echo "--- dry.log (tail)"; tail -40 "$work/dry.log"
  exit 1
fi
echo "all checks passed"
