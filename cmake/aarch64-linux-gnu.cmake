# Cross-building libkiln_rt and kiln-rt-run for 64-bit Arm Linux on an
# x86-64 Debian machine (tests/aarch64/aarch64.cmake; run them with
# qemu-aarch64). Needs gcc-aarch64-linux-gnu and the arm64 libsodium and
# protobuf-c development packages (tools/setup.sh installs them):
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DBUILD_TESTING=OFF
#   cmake --build build-aarch64 --target kiln_rt kiln-rt-run
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
# pkg-config finds the arm64 libraries of Debian's multiarch layout only.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
# Libraries and headers for the target; programs (protoc-c) from the host.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
