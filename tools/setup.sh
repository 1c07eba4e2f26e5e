#!/bin/sh
# One-step set-up on Debian 12: installs the Debian packages kiln needs (apt),
# makes the pinned Python test environment (.venv, see tests/python_env.sh),
# then configures and builds kiln into build/ (the CLI is build/kiln).
# Safe to run again. Uses sudo for apt when not run as root.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi

# Build: compiler, CMake, protobuf-c + the onnx.proto from libonnx-dev;
# OpenBLAS is the peer of the sgemm benchmark (bench/).
# Tests: Python with Debian's CPU-only torch/torchvision (model export) and numpy.
# GPU targets: OpenCL (ICD loader, headers, PoCL's CPU device for tests, CLBlast as
# the GEMM peer; clang-15, which PoCL uses anyway, checks the fp16-arithmetic OpenCL C
# that PoCL cannot build) and Vulkan (loader, lavapipe's CPU device, shaderc/glslc,
# glslang (its static libraries complete shaderc in-process), SPIRV-Tools, the
# Khronos validation layer the Vulkan tests enable). Fuzzing: libFuzzer for
# clang-15 (tests/fuzz, build-fuzz).
PACKAGES="build-essential cmake pkg-config git
  libprotobuf-c-dev protobuf-c-compiler libonnx-dev libopenblas-dev libsodium-dev
  ocl-icd-opencl-dev opencl-headers pocl-opencl-icd libclblast-dev clinfo clang-15 libfuzzer-15-dev
  libvulkan-dev mesa-vulkan-drivers glslc libshaderc-dev glslang-dev spirv-tools vulkan-validationlayers vulkan-tools
  python3 python3-venv python3-pip python3-numpy python3-pytest python3-torch python3-torchvision python3-sympy
  python3-matplotlib python3-sklearn
  gcc-aarch64-linux-gnu qemu-user libc6-dev:arm64 libsodium-dev:arm64 libprotobuf-c-dev:arm64 libgomp1:arm64"

echo "setup: installing Debian packages"
# aarch64 (tests/aarch64): libkiln_rt and kiln-rt-run cross-built with Debian's
# gcc-aarch64-linux-gnu against the arm64 multiarch libraries, run under
# qemu-aarch64 with the arm64 loader from libc6:arm64 (qemu 7.2 with the older
# cross libc under /usr/aarch64-linux-gnu hangs in pthread_create).
$SUDO dpkg --add-architecture arm64
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
# shellcheck disable=SC2086
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $PACKAGES

echo "setup: Python test environment"
sh tests/python_env.sh

echo "setup: building kiln"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$(nproc)"
echo "setup: done; the CLI is build/kiln"
