#!/bin/sh
# The Python package test: `pip install ./python` into a fresh venv (Debian's
# python3 with its numpy and pytest, no network), then pytest on
# test_kiln_package.py against the libraries of build dir $2.
#   run_pytest.sh SOURCE_DIR BUILD_DIR MODELS_PYTHON
# MODELS_PYTHON (with onnx + onnxruntime) writes the model and onnxruntime's
# outputs first (make_models.py).
set -eu
src=$1
build=$2
models_py=$3
work=$build/python-test
for mod in venv numpy pytest; do
  if ! /usr/bin/python3 -c "import $mod" 2>/dev/null; then
    echo "python_package: Debian's python3 has no '$mod' (install python3-venv python3-numpy python3-pytest: tools/setup.sh)" >&2
    exit 1
  fi
done
rm -rf "$work"
mkdir -p "$work"
"$models_py" "$src/tests/python/make_models.py" "$work/models"
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
# From a copy: setuptools writes build/ and *.egg-info next to the sources.
# --no-build-isolation: setuptools from the system, nothing downloaded.
cp -r "$src/python" "$work/package"
"$work/venv/bin/pip" install -q --no-deps --no-build-isolation --no-index "$work/package"
cd "$work"  # not the checkout: the installed package must be what is imported
KILN_LIBRARY_PATH=$build KILN_TEST_MODELS=$work/models \
  "$work/venv/bin/python" -m pytest -q -p no:cacheprovider "$src/tests/python/test_kiln_package.py"
