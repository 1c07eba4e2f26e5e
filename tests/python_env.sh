#!/bin/sh
# Creates (once) the Python venv the model tests, examples and benchmarks use:
#   <repo>/.venv  -- /usr/bin/python3 -m venv --system-site-packages
# and installs tests/requirements.txt into it. Safe to run again: an existing
# venv is reused and pip only installs what is missing.
#
# numpy, torch and torchvision come from Debian; install them first:
#   apt-get install python3-venv python3-numpy python3-torch python3-torchvision
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
venv="$root/.venv"
req="$here/requirements.txt"

die() { echo "python_env.sh: error: $*" >&2; exit 1; }

[ -x /usr/bin/python3 ] || die "/usr/bin/python3 not found (apt-get install python3)"
[ -f "$req" ] || die "$req not found"

if [ ! -x "$venv/bin/python" ]; then
  echo "python_env.sh: creating $venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv" ||
    die "could not create $venv (apt-get install python3-venv)"
fi

echo "python_env.sh: installing $req"
PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/python" -m pip install --quiet --no-cache-dir -r "$req" ||
  die "pip install -r $req failed"

"$venv/bin/python" - <<'PY' || die "the venv at $venv cannot import the packages the tests need (see above)"
import sys
missing = []
versions = {}
for name in ("numpy", "torch", "torchvision", "onnx", "onnxruntime"):
    try:
        mod = __import__(name)
        versions[name] = getattr(mod, "__version__", "?")
    except Exception as e:  # report every failure, not just the first
        missing.append(f"{name}: {type(e).__name__}: {e}")
if missing:
    print("\n".join(missing), file=sys.stderr)
    if any(m.startswith(("numpy", "torch")) for m in missing):
        print("numpy/torch/torchvision come from Debian: "
              "apt-get install python3-numpy python3-torch python3-torchvision", file=sys.stderr)
    sys.exit(1)
for name in ("numpy", "torch", "torchvision"):
    path = sys.modules[name].__file__
    if path.startswith(sys.prefix + "/"):
        print(f"{name} {versions[name]} was installed into the venv ({path}); it must come "
              f"from Debian (python3-{name}). Remove {sys.prefix} and run this again.",
              file=sys.stderr)
        sys.exit(1)
if int(versions["numpy"].split(".")[0]) >= 2:
    print(f"numpy {versions['numpy']} is installed in the venv; Debian's torch needs numpy < 2",
          file=sys.stderr)
    sys.exit(1)
print("python_env.sh: ok: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
PY
echo "python_env.sh: use $venv/bin/python"
