#!/usr/bin/env bash
# bench/gpu/device_check.sh: the one prepared run on a lent device machine
# (one NVIDIA H100/H200, bare image, no network, root, $OUT set), for the
# figures issues 23 and 24 ask of a real GPU. Run from the checkout's root:
#
#   bash bench/gpu/device_check.sh [--gpu-dir .gpu] [--budget 450]
#   bash bench/gpu/device_check.sh --dry-run --build build [--models a.onnx,...]
#
# It sets up what bench/gpu/prepare.sh packed into --gpu-dir (the binaries,
# the .deb's of their shared libraries, the models), registers NVIDIA's OpenCL
# and Vulkan drivers where the image does not, then runs these steps, each
# under `timeout` and all within --budget seconds (default 450: the run tool's
# timeout_s 540 leaves 90 s for unpacking and slack); a failed, timed-out or
# skipped step is reported and the next one runs:
#   gpu        nvidia-smi -q (all of it in the log), the fp32 peak
#              SMs x FP32 lanes per SM x 2 x max SM clock
#   devices    kiln devices; picks the NVIDIA Vulkan and OpenCL indices
#   vk_sgemm   kiln_bench_vulkan_sgemm at 1024, 2048, 4096 (GFLOP/s, % of peak)
#   cl_sgemm   kiln_bench_opencl_sgemm at the same sizes (kiln and CLBlast)
#              (and, under the GPU rules, the largest size with an even K
#              slice, KILN_OPENCL_GEMM_TILES=4,4,4,16,16,32,1,1, step
#              cl_sgemm_bk32)
#   MODEL_*    kiln run MODEL --repeat 20 --profile --strict on vulkan with
#              KILN_VULKAN_RULES=gpu and =cpu, then opencl with
#              KILN_OPENCL_RULES=gpu and =cpu (the carried input
#              and onnxruntime's output: --compare, rtol 1e-3 / atol 1e-4)
#   tune       kiln tune FIRST_MODEL -t vulkan --budget 120s, then default vs
#              tuned runs alternated (--no-tuning-cache / --tuning-cache)
#   MODEL_vk_cpu_2, MODEL_vk_gpu_2  the first model's rules pair again, the
#              other way round, where a minute is left
#   MODEL_cpu  kiln run on the CPU backend last (it needs a C compiler there)
# $OUT gets: summary.md (the tables), log (every command and its output),
# nvidia-smi.txt, tuning.tsv. The summary is rewritten after every step, so a
# run cut short still leaves one. Exit status: 0 when no step failed.
#
# --dry-run (or KILN_GPU_DRY_RUN=1) runs the same steps here, on lavapipe and
# PoCL, with tiny sizes and budgets, writes nothing outside $OUT and a /tmp
# folder, and never touches / or /etc. --build DIR takes the binaries from a
# build folder instead of the pack. KILN_GPU_PEAK_GFLOPS overrides the peak.
#
# Options: --gpu-dir DIR, --build DIR, --budget S, --models LIST (ONNX paths,
# comma-separated; default: the pack's), --sizes LIST, --repeat N,
# --tune-budget S, --out DIR (default $OUT), --skip LIST (step groups to
# leave out: gpu, vk_sgemm, cl_sgemm, runs, tune, cpu; e.g. to rerun one part).
set -uo pipefail # not -e: a failing step is reported and the script goes on

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 2
dry=${KILN_GPU_DRY_RUN:-0}
gpu_dir=.gpu
build=""
budget=""
models_arg=""
sizes=""
repeat=""
tune_budget=""
out=${OUT:-}
skip_list=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1; shift ;;
    --gpu-dir) gpu_dir="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    --models) models_arg="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --tune-budget) tune_budget="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --skip) skip_list=",$2,"; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "device_check.sh: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done
if [ "$dry" = 1 ]; then
  : "${budget:=240}" "${sizes:=64,128}" "${repeat:=3}" "${tune_budget:=15}"
else
  : "${budget:=450}" "${sizes:=1024,2048,4096}" "${repeat:=20}" "${tune_budget:=120}"
fi
for v in "$budget" "$repeat" "$tune_budget"; do
  case "$v" in ''|*[!0-9]*) echo "device_check.sh: --budget, --repeat and --tune-budget want whole numbers" >&2; exit 2 ;; esac
done
for g in ${skip_list//,/ }; do
  case "$g" in gpu|vk_sgemm|cl_sgemm|runs|tune|cpu) ;; *) echo "device_check.sh: --skip knows gpu, vk_sgemm, cl_sgemm, runs, tune, cpu, not '$g'" >&2; exit 2 ;; esac
done
wanted() { case "$skip_list" in *",$1,"*) return 1 ;; esac; return 0; }
[ -n "$out" ] || { echo "device_check.sh: \$OUT is not set (give --out DIR)" >&2; exit 2; }
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
log="$out/log"
summary="$out/summary.md"
: >"$log"
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-gpu.XXXXXX") || exit 2
# the binaries and the CPU backend's compiled code run from here: where /tmp is
# mounted noexec, a folder in the checkout instead
printf '#!/bin/sh\nexit 0\n' >"$work/x" && chmod +x "$work/x"
if ! "$work/x" 2>/dev/null; then
  rm -rf "$work"
  work=$(mktemp -d "$root/.gpu-work.XXXXXX") || exit 2
fi
rm -f "$work/x"
trap 'rm -rf "$work"' EXIT
t_start=$(date +%s)
deadline=$((t_start + budget))

say() { echo "$*" | tee -a "$log"; }
left() { echo $((deadline - $(date +%s))); }

# ---- the summary: rows kept in arrays, the file rewritten after each step ----
steps=()      # "| name | status | seconds | command |"
dev_lines=()  # the devices picked
sgemm_rows=() # "| bench | N | GFLOP/s | % | check |"
run_rows=()   # "| step | model | target | rules | median | min | kernels | check |"
tune_lines=()
gpu_line="(no GPU information)"
peak=""     # GFLOP/s, empty when unknown
peak_how=""
failed=0
write_summary() {
  {
    echo "# kiln device check ($( [ "$dry" = 1 ] && echo "DRY RUN, " )$(date -u +%Y-%m-%dT%H:%M:%SZ))"
    echo
    echo "- host: $(uname -n), $(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-?}"), $(nproc) cores"
    echo "- pack: $pack_line"
    echo "- GPU: $gpu_line"
    echo "- fp32 peak: ${peak:-unknown} GFLOP/s ${peak_how:+($peak_how)}"
    echo "- KILN_VULKAN_RULES / KILN_OPENCL_RULES known to this kiln: $rules_known"
    echo "- budget: ${budget} s, used $(( $(date +%s) - t_start )) s"
    echo
    echo "## Steps"
    echo
    echo "| step | status | s | command |"
    echo "| --- | --- | --- | --- |"
    printf '%s\n' "${steps[@]}"
    echo
    echo "## Figures"
    echo
    [ ${#dev_lines[@]} -gt 0 ] && printf '%s\n' "${dev_lines[@]}"
    if [ ${#sgemm_rows[@]} -gt 0 ]; then
      printf '\n### sgemm (C = A B, N x N x N, fp32; %% of the fp32 peak above)\n\n'
      echo "| bench | N | GFLOP/s | % of peak | check |"
      echo "| --- | --- | --- | --- | --- |"
      printf '%s\n' "${sgemm_rows[@]}"
    fi
    if [ ${#run_rows[@]} -gt 0 ]; then
      printf '\n### model runs (kiln run --repeat %s --profile --strict)\n\n' "$repeat"
      echo "| step | model | target | KILN_VULKAN_RULES | median ms | min ms | kernels ms/run | vs onnxruntime |"
      echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
      printf '%s\n' "${run_rows[@]}"
    fi
    if [ ${#tune_lines[@]} -gt 0 ]; then
      echo
      printf '%s\n' "${tune_lines[@]}"
    fi
  } >"$summary"
}
rules_known="not checked yet"
pack_line=""

# step NAME TIMEOUT MIN CMD...: runs CMD under timeout (TIMEOUT, cut to what is
# left of the budget; skipped when that is under MIN), its output in the log
# and in $work/NAME.out; returns CMD's status (124: timed out, 99: skipped).
step() {
  local name="$1" want="$2" min="$3" t rc t0 dt st shown
  shift 3
  shown="$*"
  shown=${shown//$work/\$W} # W: the work folder the log's first line names
  t=$(( $(left) - 2 ))
  [ "$t" -gt "$want" ] && t=$want
  if [ "$t" -lt "$min" ]; then
    steps+=("| $name | SKIPPED (budget: $(left) s left) | 0 | \`$shown\` |")
    say "=== $name: skipped, $(left) s of the budget left"
    : >"$work/$name.out"
    write_summary
    return 99
  fi
  say "=== $name (timeout ${t}s, $(left) s left): $*"
  t0=$(date +%s.%N)
  timeout -k 5 "$t" "$@" >"$work/$name.out" 2>&1
  rc=$?
  dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
  cat "$work/$name.out" >>"$log"
  case $rc in
    0) st=ok ;;
    124|137) st="TIMEOUT (${t} s)"; failed=$((failed + 1)) ;;
    3) st="FAIL (rc 3: outputs outside tolerance)"; failed=$((failed + 1)) ;;
    *) st="FAIL (rc $rc)"; failed=$((failed + 1)) ;;
  esac
  say "=== $name: $st in $dt s"
  steps+=("| $name | $st | $dt | \`$shown\` |")
  write_summary
  return $rc
}
skip() { # skip NAME REASON
  steps+=("| $1 | SKIPPED ($2) | 0 | |")
  say "=== $1: skipped: $2"
  write_summary
}
pct() { # pct GFLOPS -> "12.3%" of the peak, or "-"
  if [ -n "$peak" ]; then awk -v g="$1" -v p="$peak" 'BEGIN {printf "%.1f%%", 100 * g / p}'; else echo "-"; fi
}
deb_x() { # deb_x FILE.deb DIR: dpkg -x, else Python (an ar archive holding data.tar.*)
  if command -v dpkg-deb >/dev/null && [ "${KILN_GPU_DEB_X:-dpkg}" = dpkg ]; then dpkg-deb -x "$1" "$2"; return; fi
  python3 - "$1" "$2" <<'PY'
import io, sys, tarfile
blob = open(sys.argv[1], "rb").read()
assert blob[:8] == b"!<arch>\n", "not an ar archive"
pos = 8
while pos + 60 <= len(blob):
    name, size = blob[pos:pos + 16].decode().strip().rstrip("/"), int(blob[pos + 48:pos + 58])
    if name.startswith("data.tar"):
        kw = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
        tarfile.open(fileobj=io.BytesIO(blob[pos + 60:pos + 60 + size])).extractall(sys.argv[2], **kw)
        sys.exit(0)
    pos += 60 + size + (size & 1)
sys.exit("no data.tar member")
PY
}
unxz_to() { # unxz_to FILE.xz DEST: xz, else Python's lzma (both usual; one suffices)
  if command -v xz >/dev/null; then xz -dc "$1" >"$2"
  else python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"
  fi
}

say "kiln device check: root $root, OUT $out, work (W) $work, budget $budget s, dry run $dry"
say "host: $(uname -a)"
say "libc: $(ldd --version 2>&1 | head -1)"
manifest="$gpu_dir/MANIFEST.tsv"
pack_line="$(sed -n '1s/^# //p' "$manifest" 2>/dev/null)"
[ -n "$build" ] && pack_line="binaries from $build${pack_line:+; libraries and models from: $pack_line}"
if [ -z "$build" ] && [ ! -f "$manifest" ]; then
  say "no $manifest: run bench/gpu/prepare.sh on the dev machine first (or give --build DIR)"
  exit 2
fi
[ -f "$manifest" ] && cat "$manifest" >>"$log"

# ---- binaries ------------------------------------------------------------------
bin="$work/bin"
mkdir -p "$bin"
for b in kiln kiln_bench_vulkan_sgemm kiln_bench_opencl_sgemm; do
  if [ -n "$build" ]; then
    [ -x "$build/$b" ] && ln -s "$(cd "$build" && pwd)/$b" "$bin/$b"
  elif [ -f "$gpu_dir/bin/$b.xz" ]; then
    unxz_to "$gpu_dir/bin/$b.xz" "$bin/$b" && chmod +x "$bin/$b"
  fi
  [ -x "$bin/$b" ] || say "warning: no $b (its steps will fail)"
done
kiln="$bin/kiln"

# ---- shared libraries: loaders into / where missing, the rest private ----------
# The ICD loaders look for drivers in paths compiled into them (/etc/OpenCL,
# /usr/share/vulkan), so they go where the image's own would be; kiln's other
# libraries stay in $work/root behind LD_LIBRARY_PATH, away from the image's.
prefix="$work/root"
mkdir -p "$prefix"
ran_ldconfig=0
if [ -f "$manifest" ]; then
  while IFS=$'\t' read -r kind file pkg ver class extra _; do
    [ "$kind" = deb ] && [ "$file" != "-" ] || continue
    first=${extra%%,*}
    if [ "$class" = loader ] && [ "$dry" != 1 ]; then
      if ldconfig -p | grep -F "$first" >/dev/null; then
        say "deb $pkg $ver: the image has $first; not unpacked"
      else
        deb_x "$gpu_dir/debs/$file" / && say "deb $pkg $ver: unpacked into / ($extra)" ||
          say "deb $pkg $ver: unpacking into / FAILED"
        ran_ldconfig=1
      fi
    else
      deb_x "$gpu_dir/debs/$file" "$prefix" && say "deb $pkg $ver: unpacked into $prefix ($extra)" ||
        say "deb $pkg $ver: unpacking FAILED"
    fi
  done < <(grep -v '^#' "$manifest")
fi
[ "$ran_ldconfig" = 1 ] && ldconfig
export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu:$prefix/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# ---- drivers: NVIDIA's OpenCL ICD and Vulkan ICD where the image lacks them ------
nv_dirs="/usr/local/nvidia /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib"
if ! ls /etc/OpenCL/vendors/*.icd >/dev/null 2>&1 || ! grep -qs nvidia /etc/OpenCL/vendors/*.icd; then
  nvcl=$(ldconfig -p | awk '/libnvidia-opencl\.so\.1/ {print $NF; exit}')
  [ -n "$nvcl" ] || nvcl=$(find $nv_dirs -maxdepth 3 -name 'libnvidia-opencl.so.1' 2>/dev/null | head -1)
  if [ -z "$nvcl" ]; then
    say "OpenCL: no libnvidia-opencl.so.1 on this machine: the OpenCL steps will find no NVIDIA device"
  elif [ "$dry" = 1 ]; then
    say "OpenCL: dry run: would register $nvcl in /etc/OpenCL/vendors/nvidia.icd"
  else
    mkdir -p /etc/OpenCL/vendors && echo "$nvcl" >/etc/OpenCL/vendors/nvidia.icd &&
      say "OpenCL: registered $nvcl in /etc/OpenCL/vendors/nvidia.icd"
    # its own dependencies sit beside it where the ld cache does not list them
    ldconfig -p | grep -F "$nvcl" >/dev/null || LD_LIBRARY_PATH="$LD_LIBRARY_PATH:${nvcl%/*}"
  fi
else
  say "OpenCL: vendors: $(cat /etc/OpenCL/vendors/*.icd | tr '\n' ' ')"
fi
if ls /usr/share/vulkan/icd.d/nvidia*.json /etc/vulkan/icd.d/nvidia*.json >/dev/null 2>&1; then
  say "Vulkan: the image registers NVIDIA's ICD"
else
  vkjson=$(find /usr/local/nvidia /usr/share /etc -maxdepth 5 -name 'nvidia_icd*.json' 2>/dev/null | head -1)
  if [ -z "$vkjson" ]; then
    say "Vulkan: no nvidia_icd.json on this machine"
  elif [ "$dry" = 1 ]; then
    say "Vulkan: dry run: would set VK_DRIVER_FILES=$vkjson"
  else
    export VK_DRIVER_FILES="$vkjson" VK_ICD_FILENAMES="$vkjson"
    egl=$(find /usr/local/nvidia /usr/share -maxdepth 5 -name '10_nvidia.json' -path '*egl_vendor*' 2>/dev/null | head -1)
    [ -n "$egl" ] && export __EGL_VENDOR_LIBRARY_FILENAMES="$egl"
    say "Vulkan: VK_DRIVER_FILES=$vkjson"
  fi
fi
# the driver's own folder, where the ld cache does not list it (the ICDs'
# libraries load their helpers from there)
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
  [ -d "$d" ] && ! ldconfig -p | grep -F " $d/" >/dev/null && [ "$dry" != 1 ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done
say "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
if [ -x "$kiln" ]; then
  missing=$(ldd "$kiln" 2>&1 | grep 'not found' | tr -s ' \t' ' ')
  [ -n "$missing" ] && say "kiln lacks libraries:$missing"
  # the switch is read with getenv by name: present in the binary or not at all
  if grep -aq KILN_VULKAN_RULES "$kiln" && grep -aq KILN_OPENCL_RULES "$kiln"; then rules_known=yes
  else rules_known="no: the =gpu and =cpu runs use the same rules (the device class decides)"; fi
fi
export KILN_CACHE_DIR="$work/cache" # cold: no stale pipeline or tuning cache
write_summary

# ---- gpu: name, clocks, SMs -> fp32 peak --------------------------------------
gname="" cc="" maxclk="" sms=""
if ! wanted gpu; then
  skip gpu "--skip"
elif command -v nvidia-smi >/dev/null; then
  step gpu 30 5 nvidia-smi -q
  cp "$work/gpu.out" "$out/nvidia-smi.txt"
  # one query per field that older drivers may lack (an unknown field fails
  # the whole query)
  q=$(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.sm,clocks.max.mem,memory.total,power.limit \
        --format=csv,noheader,nounits 2>>"$log" | head -1)
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>>"$log" | head -1)
  say "nvidia-smi query: $q; compute capability $cc"
  IFS=',' read -r gname drv maxclk curclk maxmem memtot plim <<<"$q"
  gname=$(echo "$gname" | sed 's/^ *//; s/ *$//'); cc=${cc// /}; maxclk=${maxclk// /}
  case "$maxclk" in ''|*[!0-9]*) maxclk="" ;; esac
  gpu_line="$gname, driver${drv}, compute ${cc}, SM clock max ${maxclk} MHz (now${curclk}), memory${memtot} MiB at max${maxmem} MHz, power limit${plim} W"
else
  skip gpu "no nvidia-smi"
fi

# ---- devices --------------------------------------------------------------------
step devices 60 5 "$kiln" devices
devs="$work/devices.out"
# the GPU in device mode; any device in a dry run (lavapipe, PoCL)
if [ "$dry" = 1 ]; then
  vk_idx=$(sed -n 's/^vulkan:\([0-9]*\) .*/\1/p' "$devs" | head -1)
  cl_idx=$(sed -n 's/^opencl:\([0-9]*\) .*/\1/p' "$devs" | head -1)
else
  vk_idx=$(grep -E '^vulkan:[0-9]+ ' "$devs" | grep -v 'type=cpu' | grep -i -m1 nvidia | sed 's/^vulkan:\([0-9]*\) .*/\1/')
  cl_idx=$(grep -E '^opencl:[0-9]+ ' "$devs" | grep -i -m1 nvidia | sed 's/^opencl:\([0-9]*\) .*/\1/')
fi
say "picked vulkan:${vk_idx:-none} opencl:${cl_idx:-none}"
[ -n "$vk_idx" ] && dev_lines+=("- Vulkan device: \`$(grep -m1 "^vulkan:$vk_idx " "$devs")\`")
[ -n "$cl_idx" ] && dev_lines+=("- OpenCL device: \`$(grep -m1 "^opencl:$cl_idx " "$devs")\`")

# SMs: OpenCL's compute units on NVIDIA are the SMs; else the known parts;
# FP32 lanes per SM: 64 on compute 6.0, 7.x and 8.0, 128 on 6.1/6.2, 8.6+ and 9.0
if [ -n "${KILN_GPU_PEAK_GFLOPS:-}" ]; then
  peak=$KILN_GPU_PEAK_GFLOPS peak_how="KILN_GPU_PEAK_GFLOPS"
elif [ -n "$gname" ]; then
  [ -n "$cl_idx" ] && sms=$(grep -m1 "^opencl:$cl_idx " "$devs" | sed -n 's/.* \([0-9][0-9]*\) compute units.*/\1/p')
  how="OpenCL compute units"
  if [ -z "$sms" ]; then
    how="the part's datasheet"
    case "$gname" in
      *H100*PCIe*) sms=114 ;;
      *H100*|*H200*) sms=132 ;;
      *A100*) sms=108 ;;
      *L40S*|*L40*) sms=142 ;;
    esac
  fi
  case "$cc" in 6.0|7.*|8.0) lanes=64 ;; *) lanes=128 ;; esac
  if [ -n "$sms" ] && [ -n "$maxclk" ]; then
    peak=$(awk -v s="$sms" -v l="$lanes" -v c="$maxclk" 'BEGIN {printf "%.0f", s * l * 2 * c / 1000}')
    peak_how="$sms SMs ($how) x $lanes FP32 lanes x 2 x ${maxclk} MHz"
  fi
fi
write_summary

# ---- sgemm benches --------------------------------------------------------------
if ! wanted vk_sgemm; then
  skip vk_sgemm "--skip"
elif [ -n "$vk_idx" ]; then
  step vk_sgemm 150 15 "$bin/kiln_bench_vulkan_sgemm" --sizes "$sizes" --repeat 10 --device "$vk_idx"
  # shader  1024^3  tiles ... 9.12 GFLOP/s (device 235.351 ms) ... check ok
  while read -r n gf ck; do
    sgemm_rows+=("| vulkan shader (device time) | $n | $gf | $(pct "$gf") | $ck |")
  done < <(sed -n 's/^shader *\([0-9]*\)^3 .* \([0-9.][0-9.]*\) GFLOP\/s (device .* check \([a-zA-Z]*\).*/\1 \2 \3/p' "$work/vk_sgemm.out")
  while read -r n gf ck; do
    sgemm_rows+=("| vulkan plan (wall) | $n | $gf | $(pct "$gf") | $ck |")
  done < <(sed -n 's/^plan *\([0-9]*\)^3 .* \([0-9.][0-9.]*\) GFLOP\/s (wall .* check \([a-zA-Z]*\).*/\1 \2 \3/p' "$work/vk_sgemm.out")
else
  skip vk_sgemm "no Vulkan GPU in kiln devices"
fi
command -v nvidia-smi >/dev/null && wanted gpu &&
  say "after the Vulkan sgemm: $(nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv 2>&1 | tr '\n' ' ')"
if ! wanted cl_sgemm; then
  skip cl_sgemm "--skip"
elif [ -n "$cl_idx" ]; then
  shapes=$(echo "$sizes" | tr ',' '\n' | awk '{printf "%sx%sx%s ", $1, $1, $1}')
  # shellcheck disable=SC2086 # one argument per shape
  step cl_sgemm 90 10 "$bin/kiln_bench_opencl_sgemm" --device "$cl_idx" --reps 10 $shapes
  # rules: gpu (max work-group 1024, ...): the tile rule set it took
  # opencl sgemm 1024x1024x1024: kiln 48.1 GFLOP/s, clblast 15.2 GFLOP/s (3.16x)
  clrules=$(sed -n 's/^rules: \([a-z]*\).*/\1 rules/p' "$work/cl_sgemm.out" | head -n 1)
  while read -r n k c; do
    sgemm_rows+=("| opencl kiln | $n | $k | $(pct "$k") | $clrules |")
    [ -n "$c" ] && sgemm_rows+=("| opencl CLBlast | $n | $c | $(pct "$c") | |")
  done < <(sed -n 's/^opencl sgemm \([0-9]*\)x.*: kiln \([0-9.]*\) GFLOP\/s\(, clblast \([0-9.]*\) GFLOP\/s\)\{0,1\}.*/\1 \2 \4/p' "$work/cl_sgemm.out")
  # the GPU rules' odd K slice (31: neighbouring work-items' __local panels
  # in distinct banks) against an even one at the largest size, on a GPU
  nmax=$(echo "$sizes" | tr ',' '\n' | sort -n | tail -n 1)
  if [ "$clrules" = "gpu rules" ] && [ -n "$nmax" ]; then
    step cl_sgemm_bk32 60 10 env KILN_OPENCL_GEMM_TILES=4,4,4,16,16,32,1,1 "$bin/kiln_bench_opencl_sgemm" \
      --device "$cl_idx" --reps 10 "${nmax}x${nmax}x${nmax}"
    while read -r n k; do
      sgemm_rows+=("| opencl kiln, K slice 32 | $n | $k | $(pct "$k") | gpu rules |")
    done < <(sed -n 's/^opencl sgemm \([0-9]*\)x.*: kiln \([0-9.]*\) GFLOP\/s.*/\1 \2/p' "$work/cl_sgemm_bk32.out")
  fi
else
  skip cl_sgemm "no OpenCL GPU in kiln devices"
fi
write_summary

# ---- models ----------------------------------------------------------------------
# models: name<TAB>onnx<TAB>run arguments (inputs and --compare), prepared in $work
model_list="$work/models.tsv"
: >"$model_list"
if [ -n "$models_arg" ]; then
  IFS=, read -r -a ms <<<"$models_arg"
  for m in "${ms[@]}"; do printf '%s\t%s\t\n' "$(basename "$m" .onnx)" "$(cd "$(dirname "$m")" && pwd)/$(basename "$m")" >>"$model_list"; done
elif [ -f "$manifest" ]; then
  mkdir -p "$work/models"
  while IFS=$'\t' read -r kind name _ _ _ io _; do
    [ "$kind" = model ] || continue
    unxz_to "$gpu_dir/models/$name.onnx.xz" "$work/models/$name.onnx" || { say "model $name: unpacking FAILED"; continue; }
    args=""
    if [ "$io" != "-" ]; then
      in=${io%%,*} cmp=${io#*,}
      unxz_to "$gpu_dir/models/${in#*=}.xz" "$work/models/${in#*=}" &&
        cp "$gpu_dir/models/${cmp#*=}" "$work/models/" &&
        args="--input ${in%%=*}=$work/models/${in#*=} --compare ${cmp%%=*}=$work/models/${cmp#*=} --rtol 1e-3 --atol 1e-4"
    fi
    printf '%s\t%s\t%s\n' "$name" "$work/models/$name.onnx" "$args" >>"$model_list"
  done < <(grep -v '^#' "$manifest")
fi
[ -s "$model_list" ] || say "no models: the run and tune steps are skipped"

# run_model STEP MODEL ONNX ARGS TARGET RULES [EXTRA...]: one kiln run, its
# latency and the profile's kernel total in a row
run_model() {
  local st="$1" name="$2" onnx="$3" args="$4" target="$5" rules="$6" med mn kern cmp rvar
  shift 6
  # the rule set's switch is the target's own
  case "$target" in opencl*) rvar=KILN_OPENCL_RULES ;; *) rvar=KILN_VULKAN_RULES ;; esac
  # shellcheck disable=SC2086 # ARGS is a list of options
  step "$st" 120 10 env ${rules:+$rvar=$rules} "$kiln" run "$onnx" --target "$target" --strict \
    --repeat "$repeat" --profile --trace "$work/$st.trace.json" $args "$@"
  local rc=$?
  [ $rc = 99 ] && return 0
  read -r med mn < <(sed -n 's/^latency: median \([0-9.]*\) ms, min \([0-9.]*\) ms.*/\1 \2/p' "$work/$st.out")
  kern=$(sed -n 's/^profile .* runs, \([0-9.]*\) ms\/run in kernels.*/\1/p' "$work/$st.out" | head -1)
  cmp="-"
  if [ -n "$args" ]; then
    case $rc in 0) cmp=ok ;; 3) cmp=MISMATCH ;; *) cmp="?" ;; esac
  fi
  [ -z "$rules" ] && case "$target" in vulkan* | opencl*) rules="(device class)" ;; *) rules="-" ;; esac
  run_rows+=("| $st | $name | $target | $rules | ${med:--} | ${mn:--} | ${kern:--} | $cmp |")
  # the five slowest kernels of the profile, for the log's reader
  grep -A6 '^profile ' "$work/$st.out" | sed -n '1,7p' | sed "s/^/[$st] /" >"$work/$st.top"
  write_summary
}

wanted runs || skip runs "--skip"
wanted runs && while IFS=$'\t' read -r name onnx args; do
  if [ -n "$vk_idx" ]; then
    run_model "${name}_vk_gpu" "$name" "$onnx" "$args" "vulkan:$vk_idx" gpu
    run_model "${name}_vk_cpu" "$name" "$onnx" "$args" "vulkan:$vk_idx" cpu
  else
    skip "${name}_vulkan" "no Vulkan GPU"
  fi
  if [ -n "$cl_idx" ]; then
    run_model "${name}_cl_gpu" "$name" "$onnx" "$args" "opencl:$cl_idx" gpu
    run_model "${name}_cl_cpu" "$name" "$onnx" "$args" "opencl:$cl_idx" cpu
  else
    skip "${name}_opencl" "no OpenCL GPU"
  fi
done <"$model_list"

# ---- tune the first model on Vulkan, then default vs tuned, alternated -----------
if ! wanted tune; then
  skip tune "--skip"
elif [ -s "$model_list" ] && [ -n "$vk_idx" ]; then
  IFS=$'\t' read -r name onnx args <"$model_list"
  tb=$tune_budget
  # what is left after the tune must hold two default/tuned pairs
  [ $(( $(left) - 60 )) -lt "$tb" ] && tb=$(( $(left) - 60 ))
  if [ "$tb" -lt 10 ]; then
    skip tune "budget: $(left) s left"
  else
    step tune $((tb + 60)) 10 "$kiln" tune "$onnx" -t "vulkan:$vk_idx" --budget "${tb}s" --cache "$work/tuning.tsv"
    tune_rc=$?
    cp "$work/tuning.tsv" "$out/tuning.tsv" 2>/dev/null
    line=$(grep -m1 '^model: ' "$work/tune.out")
    tune_lines+=("### tune ($name, vulkan:$vk_idx, budget ${tb} s)" "" "kiln tune: ${line:-no 'model:' line}"
                 "(default and tuned runs: the tune_default_N / tune_tuned_N rows above, alternated)")
    if [ "$tune_rc" = 0 ] && [ -s "$work/tuning.tsv" ]; then
      for round in 1 2; do
        [ "$(left)" -lt 25 ] && break
        run_model "tune_default_$round" "$name" "$onnx" "$args" "vulkan:$vk_idx" "" --no-tuning-cache
        run_model "tune_tuned_$round" "$name" "$onnx" "$args" "vulkan:$vk_idx" "" --tuning-cache "$work/tuning.tsv"
      done
    fi
    write_summary
  fi
else
  skip tune "no model or no Vulkan GPU"
fi

# ---- a second pair of Vulkan rules on the first model, the other way round ---------
# (one pair alone mixes the rules with the order: the first run of a process
# may find the driver's caches colder)
if wanted runs && [ -n "$vk_idx" ] && [ -s "$model_list" ] && [ "$(left)" -ge 60 ]; then
  IFS=$'\t' read -r name onnx args <"$model_list"
  run_model "${name}_vk_cpu_2" "$name" "$onnx" "$args" "vulkan:$vk_idx" cpu
  run_model "${name}_vk_gpu_2" "$name" "$onnx" "$args" "vulkan:$vk_idx" gpu
fi

# ---- the CPU backend last: a C compiler may be missing there --------------------
wanted cpu || skip cpu "--skip"
wanted cpu && while IFS=$'\t' read -r name onnx args; do
  run_model "${name}_cpu" "$name" "$onnx" "$args" cpu ""
done <"$model_list"

for f in "$work"/*.top; do [ -f "$f" ] && cat "$f" >>"$log"; done
say "done in $(( $(date +%s) - t_start )) s; $failed step(s) failed, timed out or mismatched"
write_summary
cat "$summary"
[ "$failed" = 0 ]
