# aarch64 (issue 26): libkiln_rt and kiln-rt-run cross-built with Debian's
# gcc-aarch64-linux-gnu (fixture aarch64_rt), modules compiled here with
# aarch64 machine code (--cpu-target host,aarch64: NEON-wide vectors) run
# under qemu-aarch64 with no compiler reachable, and their outputs compared
# with the same module's run on this x86-64 machine (tests/aarch64/
# qemu_run.cmake). tinycnn is in the default suite (3 s; the cross build 16 s
# cold with ccache); ResNet-18 (88-136 s: ~35 s compiling both levels, 54-78 s
# under qemu) and MobileNetV2 (46-70 s), the model tests' exports, are
# "slow". Their logits matched the x86-64 (AVX2) run within 2e-7 (and bit for
# bit with the x86 level tuned generically).
# Included by tests/CMakeLists.txt on x86-64 hosts.
find_program(KILN_AARCH64_CC aarch64-linux-gnu-gcc)
find_program(KILN_QEMU_AARCH64 qemu-aarch64)
if(NOT KILN_AARCH64_CC OR NOT KILN_QEMU_AARCH64 OR NOT EXISTS /usr/lib/aarch64-linux-gnu/pkgconfig/libsodium.pc)
  set(_msg "the aarch64 tests need gcc-aarch64-linux-gnu, qemu-user and the arm64 libsodium-dev, libprotobuf-c-dev and libgomp1 (tools/setup.sh installs them); found compiler '${KILN_AARCH64_CC}', qemu '${KILN_QEMU_AARCH64}'")
  message(WARNING "${_msg}")
  add_test(NAME aarch64_tools_missing COMMAND ${CMAKE_COMMAND} -E echo "${_msg}")
  set_tests_properties(aarch64_tools_missing PROPERTIES LABELS aarch64 FAIL_REGULAR_EXPRESSION "setup\\.sh")
  return()
endif()

set(KILN_AARCH64_DIR ${CMAKE_BINARY_DIR}/aarch64)
set(_launcher)
if(CMAKE_C_COMPILER_LAUNCHER)
  set(_launcher -DLAUNCHER=${CMAKE_C_COMPILER_LAUNCHER})
endif()
add_test(NAME aarch64_rt_build
         COMMAND ${CMAKE_COMMAND} -DSRC=${CMAKE_SOURCE_DIR} -DOUT=${KILN_AARCH64_DIR} ${_launcher}
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/aarch64/build_rt.cmake)
set_tests_properties(aarch64_rt_build PROPERTIES FIXTURES_SETUP aarch64_rt LABELS aarch64 TIMEOUT 900)

# kiln_aarch64_test(NAME MODEL OUTPUT LABELS TIMEOUT [INPUT=...] [REF=...])
function(kiln_aarch64_test name model output labels timeout)
  set(defs)
  foreach(a ${ARGN})
    list(APPEND defs -D${a})
  endforeach()
  add_test(NAME aarch64_${name}
           COMMAND ${CMAKE_COMMAND} -DKILN=$<TARGET_FILE:kiln_cli> -DRT_RUN=${KILN_AARCH64_DIR}/kiln-rt-run
                   -DQEMU=${KILN_QEMU_AARCH64} -DMODEL=${model} -DNAME=${name} -DOUTPUT=${output}
                   -DWORK=${CMAKE_BINARY_DIR}/aarch64-work ${defs}
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/aarch64/qemu_run.cmake)
  set_tests_properties(aarch64_${name} PROPERTIES FIXTURES_REQUIRED "aarch64_rt;${fixtures}" LABELS "${labels}"
                       TIMEOUT ${timeout} ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endfunction()

# The Python with numpy of the model tests (tests/models/CMakeLists.txt)
# writes tinycnn's input; the models come from its export fixture.
if(NOT KILN_PYTHON OR NOT EXISTS "${KILN_PYTHON}")
  return() # tests/models registers the failing models_python_missing
endif()
set(fixtures)
kiln_aarch64_test(tinycnn ${CMAKE_SOURCE_DIR}/examples/tinycnn.onnx probs aarch64 600
                  PYTHON=${KILN_PYTHON} GEN_INPUT=image:1,1,28,28)
set(fixtures models)
foreach(m resnet18 mobilenet_v2)
  kiln_aarch64_test(${m} ${CMAKE_BINARY_DIR}/models/${m}.onnx logits "aarch64;models;slow" 1800
                    INPUT=input=${CMAKE_BINARY_DIR}/models/${m}_input.npy REF=${CMAKE_BINARY_DIR}/models/${m}_ort.npy)
endforeach()
