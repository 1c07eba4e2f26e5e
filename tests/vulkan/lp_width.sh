#!/bin/sh
# Runs a Vulkan test with Mesa llvmpipe at another SIMD width, so that
# lavapipe's subgroups are WIDTH/32 lanes instead of the 8 every default was
# measured with (128 bits: 4 lanes, 512 bits: 16). It checks the width took:
# the first Vulkan device must be llvmpipe and report that subgroup size,
# else the test fails (llvmpipe ignoring the variable would leave the run
# at 8 lanes, testing nothing new); another first device skips (77).
# usage: lp_width.sh WIDTH KILN_CLI COMMAND [ARGS...]
width=$1; cli=$2; shift 2
export LP_NATIVE_VECTOR_WIDTH=$width
want=$((width / 32))
dev=$("$cli" devices 2>&1 | grep -m1 '^vulkan:0 ')
case "$dev" in
  *llvmpipe*) ;;
  *) echo "lp_width: the first Vulkan device is not llvmpipe (${dev:-none}): skipped"; exit 77 ;;
esac
case "$dev" in
  *" subgroup=$want "*|*" subgroup=$want") ;;
  *) echo "lp_width: LP_NATIVE_VECTOR_WIDTH=$width did not give subgroups of $want lanes: $dev"; exit 1 ;;
esac
echo "lp_width: $dev"
exec "$@"
