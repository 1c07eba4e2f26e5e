#!/usr/bin/env bash
# bench/gpu/prepare.sh: packs what bench/gpu/device_check.sh needs on a bare
# device machine (one NVIDIA GPU, no network) into one ignored folder that the
# device tool's `carry` takes along. Run it HERE, on the dev machine, from any
# folder of the checkout, after building; it builds nothing.
#
#   bench/gpu/prepare.sh [--build DIR] [--dest DIR] [--models-from DIR]
#                        [--models NAME,...] [--limit-mib N] [--no-debs]
#
# --build DIR        the build folder whose kiln and sgemm benches travel
#                    (default: build/ of the checkout)
# --dest DIR         where the pack goes (default: .gpu/ of the checkout, then
#                    added to .git/info/exclude so it never travels by accident
#                    and never gets committed)
# --models-from DIR  where the exported models are (default: BUILD/models)
# --models LIST      models in priority order (default resnet18,mobilenet_v2);
#                    a NAME is NAME.onnx in --models-from, a path ending in .onnx
#                    is taken as it is. A model goes in only while the whole
#                    tree that travels stays under --limit-mib
# --limit-mib N      the device tool's limit on what travels (default 64) minus
#                    a 1 MiB margin for files the lead adds before the call
# --no-debs          no `apt-get download` (the tests' offline pack)
#
# What it writes under DEST:
#   bin/NAME.xz        stripped, xz-compressed kiln, kiln_bench_vulkan_sgemm,
#                      kiln_bench_opencl_sgemm (the strip drops debug info: 19
#                      -> 3 MB for kiln)
#   debs/*.deb         `apt-get download` of the package of every shared library
#                      those binaries load beyond libc/libm/libpthread/libdl/
#                      librt/libgcc/libstdc++ (dpkg -S maps library -> package),
#                      plus the GL-vendor-neutral libraries NVIDIA's Vulkan ICD
#                      (libGLX_nvidia) loads
#   models/NAME.onnx.xz, NAME_input.npy.xz, NAME_ort.npy in priority order,
#                      while they fit (ResNet-18 alone is 43 MB after xz)
#   MANIFEST.tsv       one line per file: kind, name, package, version, class,
#                      extra (a deb's libraries; a model's input=FILE,output=FILE
#                      pair), bytes, sha256 (device_check.sh reads it)
# and prints the run tool's carry list and command.
set -euo pipefail
# (under pipefail a reader that stops early -- head, awk's exit -- fails the
# pipeline with SIGPIPE: the pipelines here read their input to the end)

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-2}"; }

here=$(cd "$(dirname "$0")" && pwd)
root=$(git -C "$here" rev-parse --show-toplevel)
build="$root/build"
dest=""
models_from=""
models="resnet18,mobilenet_v2"
limit_mib=64
debs=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --dest) dest="$2"; shift 2 ;;
    --models-from) models_from="$2"; shift 2 ;;
    --models) models="$2"; shift 2 ;;
    --limit-mib) limit_mib="$2"; shift 2 ;;
    --no-debs) debs=0; shift ;;
    -h|--help) usage 0 ;;
    *) echo "prepare.sh: unknown argument '$1'" >&2; usage 2 ;;
  esac
done
[ -n "$models_from" ] || models_from="$build/models"
default_dest=0
if [ -z "$dest" ]; then dest="$root/.gpu"; default_dest=1; fi
case "$limit_mib" in ''|*[!0-9]*) echo "prepare.sh: --limit-mib wants a whole number" >&2; exit 2 ;; esac

bins="kiln kiln_bench_vulkan_sgemm kiln_bench_opencl_sgemm"
for b in $bins; do
  [ -x "$build/$b" ] || { echo "prepare.sh: $build/$b is missing: build it first (cmake --build build)" >&2; exit 1; }
done
for t in strip xz sha256sum; do
  command -v "$t" >/dev/null || { echo "prepare.sh: '$t' is not installed" >&2; exit 1; }
done

if [ "$default_dest" = 1 ]; then
  # The pack is ignored through info/exclude (per clone, shared by its
  # worktrees), not .gitignore: it is this workplace's, not the project's.
  excl=$(git -C "$root" rev-parse --git-path info/exclude)
  case "$excl" in /*) ;; *) excl="$root/$excl" ;; esac
  mkdir -p "$(dirname "$excl")"
  grep -qxF '/.gpu/' "$excl" 2>/dev/null || echo '/.gpu/' >>"$excl"
fi
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/debs" "$dest/models"
dest=$(cd "$dest" && pwd)
manifest="$dest/MANIFEST.tsv"
{
  echo "# kiln device pack: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- 2>/dev/null || echo '+dirty'), built on $(. /etc/os-release && echo "$PRETTY_NAME"), $(ldd --version | sed -n 1p)"
  printf '# kind\tname\tpackage\tversion\tclass\textra\tbytes\tsha256\n'
} >"$manifest"
sha() { sha256sum "$1" | cut -d' ' -f1; }
bytes() { stat -c %s "$1"; }

# ---- binaries: stripped (the debug info is 80% of them), then xz ----------
for b in $bins; do
  strip -o "$dest/bin/$b" "$build/$b"
  xz -6 -T0 -f "$dest/bin/$b"
  printf 'bin\t%s\t-\t-\t-\t-\t%s\t%s\n' "$b" "$(bytes "$dest/bin/$b.xz")" "$(sha "$build/$b")" >>"$manifest"
done

# ---- shared libraries -> packages ---------------------------------------------
# The toolchain's own libraries are on any glibc system; everything else a
# binary loads travels as its .deb.
skip_lib() {
  case "$1" in
    linux-vdso.so*|ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libgcc_s.so*|libstdc++.so*) return 0 ;;
  esac
  return 1
}
# the package that owns a path; merged-/usr systems record either spelling
owner() {
  local p="$1" r q
  r=$(readlink -f "$p")
  for q in "$p" "$r" "${p#/usr}" "/usr$p" "${r#/usr}" "/usr$r"; do
    dpkg -S "$q" 2>/dev/null | sed -n 1p | cut -d: -f1 && return 0
  done
  return 1
}
declare -A pkg_libs=()
for b in $bins; do
  # "libfoo.so.1 => /path (0x...)"; the vDSO and the dynamic loader have no "=>"
  while read -r lib arrow path _; do
    [ "$arrow" = "=>" ] || continue
    skip_lib "$lib" && continue
    [ -n "$path" ] && [ "$path" != "not" ] || { echo "prepare.sh: $b needs $lib, which is not found here" >&2; exit 1; }
    pkg=$(owner "$path") || { echo "prepare.sh: no package owns $path ($lib, needed by $b)" >&2; exit 1; }
    case ",${pkg_libs[$pkg]:-}," in *",$lib,"*) ;; *) pkg_libs[$pkg]="${pkg_libs[$pkg]:+${pkg_libs[$pkg]},}$lib" ;; esac
  done < <(ldd "$build/$b" | sed 's/^[[:space:]]*//')
done
# NVIDIA's Vulkan ICD is libGLX_nvidia.so.0, which needs libglvnd's dispatch
# library; these are the device README's Vulkan/EGL loader set.
for p in libglvnd0:libGLdispatch.so.0 libglx0:libGLX.so.0 libegl1:libEGL.so.1 libgl1:libGL.so.1 \
         libopengl0:libOpenGL.so.0 libgles2:libGLESv2.so.2; do
  pkg_libs[${p%%:*}]="${p#*:}"
done
# Loaders (the ICD loaders and libglvnd) go into / on the device, and only
# where the image lacks them: their search paths for drivers are built in.
# The rest goes into a private prefix on LD_LIBRARY_PATH.
class_of() {
  case "$1" in
    libvulkan1|ocl-icd-libopencl1|libglvnd0|libglx0|libegl1|libgl1|libopengl0|libgles2) echo loader ;;
    *) echo private ;;
  esac
}
for pkg in $(printf '%s\n' "${!pkg_libs[@]}" | sort); do
  ver=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || apt-cache policy "$pkg" | awk '/Candidate:/ {print $2}')
  file="-"
  if [ "$debs" = 1 ]; then
    # apt-get download writes into the current folder; as root it warns that
    # _apt cannot write there, which is harmless
    if ! (cd "$dest/debs" && apt-get download -q "$pkg" >/dev/null 2>"$dest/debs/.err"); then
      echo "prepare.sh: apt-get download $pkg failed ($(tail -1 "$dest/debs/.err")); trying apt-get update once" >&2
      apt-get update -q >/dev/null
      (cd "$dest/debs" && apt-get download -q "$pkg" >/dev/null 2>"$dest/debs/.err") ||
        { echo "prepare.sh: apt-get download $pkg failed: $(cat "$dest/debs/.err")" >&2; exit 1; }
    fi
    rm -f "$dest/debs/.err"
    file=$(cd "$dest/debs" && ls -t "${pkg}"_*.deb | sed -n 1p)
    ver=$(dpkg-deb -f "$dest/debs/$file" Version)
  fi
  if [ "$file" = "-" ]; then
    printf 'deb\t-\t%s\t%s\t%s\t%s\t0\t-\n' "$pkg" "$ver" "$(class_of "$pkg")" "${pkg_libs[$pkg]}" >>"$manifest"
  else
    printf 'deb\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$file" "$pkg" "$ver" "$(class_of "$pkg")" "${pkg_libs[$pkg]}" \
      "$(bytes "$dest/debs/$file")" "$(sha "$dest/debs/$file")" >>"$manifest"
  fi
done

# ---- models, in priority order, while the travelling tree fits -----------------
limit=$((limit_mib * 1048576 - 1048576))
# what travels besides the pack: tracked and untracked-not-ignored files
tree_bytes() {
  git -C "$root" ls-files -z -c -o --exclude-standard | (cd "$root" && xargs -0 -r stat -L -c %s 2>/dev/null) |
    awk '{s += $1} END {print s + 0}'
}
tree=$(tree_bytes)
pack() { du -sb "$dest" | cut -f1; }
skipped=""
IFS=, read -r -a model_list <<<"$models"
for m in "${model_list[@]}"; do
  case "$m" in
    *.onnx) src="$m"; name=$(basename "$m" .onnx) ;;
    *) src="$models_from/$m.onnx"; name="$m" ;;
  esac
  [ -f "$src" ] || { echo "prepare.sh: $src not found (export it: ctest --test-dir build -R models_export)" >&2; skipped="$skipped $name(missing)"; continue; }
  # tests/models/export_models.py writes NAME_input.npy and onnxruntime's
  # NAME_ort.npy beside the model: with them the device run checks its result
  # too (first input and first output, named as `kiln info` lists them)
  input="$(dirname "$src")/${name}_input.npy"
  ort="$(dirname "$src")/${name}_ort.npy"
  [ -f "$input" ] && [ -f "$ort" ] || input="" ort=""
  # a quick bound first (the raw files), so a hopeless model costs no xz time
  raw=$(bytes "$src")
  [ -n "$input" ] && raw=$((raw + $(bytes "$input") + $(bytes "$ort")))
  if [ $((tree + $(pack) + raw * 85 / 100)) -gt "$limit" ]; then
    skipped="$skipped $name(too-big)"; continue
  fi
  xz -6 -T0 -c "$src" >"$dest/models/$name.onnx.xz"
  io="-"
  if [ -n "$input" ]; then
    xz -6 -T0 -c "$input" >"$dest/models/${name}_input.npy.xz"
    cp "$ort" "$dest/models/${name}_ort.npy"
    in_name=$("$build/kiln" info "$src" 2>/dev/null | awk '/^inputs:/ {getline; if (!n++) print $1}')
    out_name=$("$build/kiln" info "$src" 2>/dev/null | awk '/^outputs:/ {getline; if (!n++) print $1}')
    [ -n "$in_name" ] && [ -n "$out_name" ] || { echo "prepare.sh: kiln info $src names no input or output" >&2; exit 1; }
    io="$in_name=${name}_input.npy,$out_name=${name}_ort.npy"
  fi
  if [ $((tree + $(pack))) -gt "$limit" ]; then
    rm -f "$dest/models/$name.onnx.xz" "$dest/models/${name}_input.npy.xz" "$dest/models/${name}_ort.npy"
    skipped="$skipped $name(too-big)"; continue
  fi
  printf 'model\t%s\t-\t-\t-\t%s\t%s\t%s\n' "$name" "$io" "$(bytes "$dest/models/$name.onnx.xz")" "$(sha "$src")" >>"$manifest"
done

total=$((tree + $(pack)))
rel=${dest#"$root"/}
{
  printf '# sizes: tree %d B + pack %d B = %d B of %d B (limit %d MiB less 1 MiB)%s\n' "$tree" "$(pack)" "$total" \
    "$limit" "$limit_mib" "${skipped:+; left out:$skipped}"
} >>"$manifest"
cat "$manifest"
echo
if [ "$rel" = "$dest" ]; then
  echo "prepare.sh: $dest is outside the checkout: the run tool cannot carry it (use the default --dest)."
else
  echo "run tool: carry [\"$rel\"], timeout_s 540, command:"
  echo "  bash bench/gpu/device_check.sh --gpu-dir $rel"
fi
