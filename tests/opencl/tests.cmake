# OpenCL test suites (label target=opencl; "unit" too for the fast device test).
# Included by tests/CMakeLists.txt. They run on whatever OpenCL device 0 is
# (PoCL's CPU device in CI); without a platform each test reports it and fails.
file(GLOB KILN_OPENCL_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/opencl/test_*.c)
foreach(src ${KILN_OPENCL_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src} ${CMAKE_SOURCE_DIR}/tests/opencl/graph_harness.c)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests/opencl)
  target_link_libraries(${name} PRIVATE kiln_testing OpenCL::OpenCL)
  add_test(NAME ${name} COMMAND ${name})
  if(name STREQUAL "test_opencl_half")
    # clang's OpenCL C front end (PoCL's own compiler, clang-15 on Debian 12)
    # checks the native-half programs that PoCL (no cl_khr_fp16) cannot build.
    find_program(KILN_TEST_CLANG NAMES clang-15 clang
                 DOC "clang with the OpenCL C front end, for test_opencl_half")
    if(KILN_TEST_CLANG)
      target_compile_definitions(${name} PRIVATE KILN_TEST_CLANG="${KILN_TEST_CLANG}")
    else()
      message(WARNING "no clang-15 or clang: test_opencl_half will fail (install clang-15)")
    endif()
  endif()
  # The device test takes seconds; the plan and GEMM suites compile dozens
  # of programs with PoCL (minutes on a cold cache), so they are not "unit".
  if(name STREQUAL "test_opencl_device")
    set(labels "target=opencl;unit")
  else()
    set(labels "target=opencl")
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${labels}" TIMEOUT 1200
                       WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}
                       ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endforeach()

# A module compiled with fp16 arithmetic for an OpenCL device that has
# cl_khr_fp16 (kiln compile --fp16-arith yes): the transformer encoder's
# generated OpenCL C enables the extension and clang compiles it for SPIR with
# it; where device 0 lacks it (PoCL), running the module fails naming
# cl_khr_fp16, else it matches onnxruntime within fp16 tolerance.
if(KILN_TEST_CLANG AND TARGET kiln_cli)
  set(_dir ${CMAKE_CURRENT_BINARY_DIR}/opencl_fp16_arith)
  set(_models ${CMAKE_BINARY_DIR}/models)
  set(_clang_cl "'${KILN_TEST_CLANG}' -x cl -cl-std=CL1.2 -target spir64-unknown-unknown -Xclang -finclude-default-header -Xclang -cl-ext=+cl_khr_fp16 -c -emit-llvm -o /dev/null")
  add_test(NAME opencl_fp16_arith_module
           COMMAND sh -c "set -e; rm -rf '${_dir}'; mkdir -p '${_dir}'
             '$<TARGET_FILE:kiln_cli>' compile '${_models}/encoder.onnx' -t opencl --precision fp16 --fp16-arith yes --dump '${_dir}' -o '${_dir}/enc.kiln' > '${_dir}/compile.log'
             grep -q 'with fp16 arithmetic' '${_dir}/compile.log'
             grep -q '^#pragma OPENCL EXTENSION cl_khr_fp16 : enable$' '${_dir}/kernels.cl'
             ${_clang_cl} '${_dir}/kernels.cl'
             if '$<TARGET_FILE:kiln_cli>' devices | grep -q '^opencl:0 .* fp16 no '; then
               if '$<TARGET_FILE:kiln_cli>' run '${_dir}/enc.kiln' --target opencl --strict 2> '${_dir}/run.err'; then echo 'ran without cl_khr_fp16'; exit 1; fi
               grep -q 'needs cl_khr_fp16' '${_dir}/run.err'
             else
               '$<TARGET_FILE:kiln_cli>' run '${_dir}/enc.kiln' --target opencl --strict --input input='${_models}/encoder_input.npy' --compare '${_models}/encoder_ort.npy' --rtol 1e-2 --atol 1e-2
             fi
             echo ok")
  set_tests_properties(opencl_fp16_arith_module PROPERTIES
                       FIXTURES_REQUIRED models LABELS "models;target=opencl" TIMEOUT 600
                       ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
  # The int8 template's integer dot-product path (kernels/opencl/q8.cl),
  # which PoCL here does not take (no cl_khr_integer_dot_product): the
  # folded QDQ model's program compiles with clang for OpenCL C 3.0 with
  # the 4x8-bit dot-product feature (the builtin dot(char4, char4) called)
  # and for OpenCL C 1.2 without it (the plain path: no such call).
  set(_dir ${CMAKE_CURRENT_BINARY_DIR}/opencl_q8_int_dot)
  set(_clang_ir "'${KILN_TEST_CLANG}' -x cl -target spir64-unknown-unknown -Xclang -finclude-default-header -O1 -S -emit-llvm")
  add_test(NAME opencl_q8_int_dot_compile
           COMMAND sh -c "set -e; rm -rf '${_dir}'; mkdir -p '${_dir}'
             KILN_GPU_INT8_FOLD=on '$<TARGET_FILE:kiln_cli>' compile '${CMAKE_BINARY_DIR}/models/qdq_pc.onnx' -t opencl --device none --dump '${_dir}' -o '${_dir}/q.kiln' > '${_dir}/compile.log'
             grep -q '^pass fold-qdq  *rewrites  *[1-9]' '${_dir}/compile.log'
             test \$(grep -c '^/\\* kiln int8 conv template' '${_dir}/kernels.cl') -ge 1
             ${_clang_ir} -cl-std=CL3.0 -Xclang -cl-ext=+__opencl_c_integer_dot_product_input_4x8bit -o '${_dir}/dot.ll' '${_dir}/kernels.cl'
             grep -q 'call.*@_Z3dotDv4_cS_' '${_dir}/dot.ll'
             ${_clang_ir} -cl-std=CL1.2 -o '${_dir}/plain.ll' '${_dir}/kernels.cl'
             if grep -q '@_Z3dotDv4_cS_' '${_dir}/plain.ll'; then echo 'dot product without the extension'; exit 1; fi
             echo ok")
  set_tests_properties(opencl_q8_int_dot_compile PROPERTIES
                       FIXTURES_REQUIRED models_qdq LABELS "models;target=opencl" TIMEOUT 600)
endif()

# A QLinearMatMul no int8 template takes (a 3-D B) runs as the plain
# integer loops with a compile note naming it; a 2-D one takes the template
# (kernels/opencl/q8.cl) and gets no note.
if(KILN_NODE_TEST_DIR AND TARGET kiln_cli)
  set(_n ${KILN_NODE_TEST_DIR})
  add_test(NAME opencl_q8_untemplated_note
           COMMAND sh -c "set -e
             '$<TARGET_FILE:kiln_cli>' compile '${_n}/test_qlinearmatmul_3D_uint8_float32/model.onnx' -t opencl 2>&1 | grep -q \"QLinearMatMul 'QLinearMatMul_0' runs as plain integer loops on opencl: no int8 template\"
             if '$<TARGET_FILE:kiln_cli>' compile '${_n}/test_qlinearmatmul_2D_uint8_float32/model.onnx' -t opencl 2>&1 | grep -q 'plain integer loops'; then exit 1; fi
             echo ok")
  set_tests_properties(opencl_q8_untemplated_note PROPERTIES LABELS "onnx;target=opencl" TIMEOUT 300
                       ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endif()

# ONNX node conformance on the OpenCL device, against the ONNX expected
# outputs and the reference interpreter, with and without fusion (label
# "onnx" like the CPU runs, plus target=opencl).
if(KILN_NODE_TEST_DIR AND TARGET kiln_conformance)
  # Under the sanitizer through tests/lsan_cold_run.sh: LSan's own tracer
  # has died at the -O0 run's exit on one host (google/sanitizers#1353),
  # which the script tells from a leak (then the run is checked again
  # without the leak check and reported skipped).
  set(_lsan_wrap)
  if(KILN_SANITIZE)
    set(_lsan_wrap sh ${CMAKE_SOURCE_DIR}/tests/lsan_cold_run.sh -)
  endif()
  foreach(level O1 O0)
    add_test(NAME conformance_onnx_node_opencl_${level}
             COMMAND ${_lsan_wrap} $<TARGET_FILE:kiln_conformance> --target opencl -${level} --quiet ${KILN_NODE_TEST_DIR})
    set_tests_properties(conformance_onnx_node_opencl_${level} PROPERTIES
                         LABELS "onnx;target=opencl" TIMEOUT 3600 SKIP_RETURN_CODE 77
                         ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
  endforeach()
endif()

# Run-time arithmetic errors (integer Div by zero, Gather indices out of
# range) and large-sum accuracy on the OpenCL device: the executable is the
# CPU suite's (tests/test_bad_runtime_arith.c) with --target opencl.
add_test(NAME test_bad_runtime_arith_opencl COMMAND test_bad_runtime_arith --target opencl)
set_tests_properties(test_bad_runtime_arith_opencl PROPERTIES LABELS "target=opencl;badinput" TIMEOUT 600
                     WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
# CumSum, TopK and ReverseSequence against the reference on the OpenCL device.
add_test(NAME test_tensor_ops_target_opencl COMMAND test_tensor_ops_target --target opencl)
set_tests_properties(test_tensor_ops_target_opencl PROPERTIES LABELS "target=opencl" TIMEOUT 600
                     WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
# The quantized ops (tests/test_ops_quant.c) against the reference on the OpenCL device.
add_test(NAME test_ops_quant_opencl COMMAND test_ops_quant --target opencl)
set_tests_properties(test_ops_quant_opencl PROPERTIES LABELS "target=opencl" TIMEOUT 600
                     WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
# QLinearConv through Conv's GEMM lowering (tests/test_qconv_gemm.c) on the OpenCL device.
add_test(NAME test_qconv_gemm_opencl COMMAND test_qconv_gemm --target opencl)
set_tests_properties(test_qconv_gemm_opencl PROPERTIES LABELS "target=opencl" TIMEOUT 600
                     WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
# f64 computed in double on the OpenCL device (cl_khr_fp64), module file round trip.
add_test(NAME test_f64_target_opencl COMMAND test_f64_target --target opencl)
set_tests_properties(test_f64_target_opencl PROPERTIES LABELS "target=opencl" TIMEOUT 600
                     WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})

# Shapes the compiled targets once refused or ran badly (patchify convs,
# MatMul with a B shared by all batches, Identity on shared initializers) at
# -O0 and -O1 on the OpenCL device: tests/test_lower_targets.c --target opencl.
add_test(NAME test_lower_targets_opencl COMMAND test_lower_targets --target opencl)
set_tests_properties(test_lower_targets_opencl PROPERTIES LABELS "target=opencl" TIMEOUT 900
                     WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}
                     ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")

# `kiln tune` end to end on the command line (docs/TUNING.md): a quick tune
# of examples/tinycnn.onnx writes a cache; merged with a corrupt one (a
# warning naming the file and line, never fatal) and used by `kiln run
# --tuning-cache` on the merged copy, every template kernel is found (tuned
# or kept at its default, none untuned) and the outputs still match the
# reference; a cache for another driver leaves every kernel untuned.
# A fresh machine: `kiln tune` without --cache writes machine A's cache
# folder (HOME=a), that cache merged with another driver's and copied into
# a fresh HOME b is what `kiln run` there uses without being told (every
# kernel found), `--no-tuning-cache` turns it off; a module compiled with
# points records them (`kiln info`) and `kiln run --profile` marks them.
if(TARGET kiln_cli)
  set(_dir ${CMAKE_CURRENT_BINARY_DIR}/opencl_tune_cli)
  set(_k "'$<TARGET_FILE:kiln_cli>'")
  set(_m "'${CMAKE_SOURCE_DIR}/examples/tinycnn.onnx'")
  set(_a "env -u KILN_CACHE_DIR -u XDG_CACHE_HOME HOME='${_dir}/a'")
  set(_b "env -u KILN_CACHE_DIR -u XDG_CACHE_HOME HOME='${_dir}/b'")
  add_test(NAME opencl_tune_cli
           COMMAND sh -c "set -e; rm -rf '${_dir}'; mkdir -p '${_dir}/a' '${_dir}/b/.cache/kiln'; cd '${_dir}'
             ${_a} ${_k} tune ${_m} -t opencl --budget 60s --trials 1 --repeats 2 > tune.log
             grep -q 'tuning.tsv (3 records)' tune.log
             cp a/.cache/kiln/tuning.tsv a.tsv
             printf 'garbage line\\n' > b.tsv
             ${_k} tune --merge a.tsv b.tsv -o c.tsv 2> merge.err
             grep -q 'b.tsv:1: not 9 tab-separated fields' merge.err
             ${_k} run ${_m} -t opencl --strict --tuning-cache c.tsv --check-ref > run.log
             grep -Eq '^tuning: [0-9]+ of 3 template kernels tuned from c.tsv .* 0 untuned, 0 refused' run.log
             awk -F '\\t' -v OFS='\\t' '/^#/ { print; next } { $5 = $5 \" (another build)\"; print }' c.tsv > d.tsv
             ${_k} run ${_m} -t opencl --strict --tuning-cache d.tsv > run2.log 2> run2.err
             grep -q '^tuning: 0 of 3 template kernels tuned from d.tsv .* 3 untuned' run2.log
             grep -q 'another device, driver or kiln version' run2.err
             ${_k} tune --merge a/.cache/kiln/tuning.tsv d.tsv -o b/.cache/kiln/tuning.tsv > merge2.log
             ${_b} ${_k} run ${_m} -t opencl --strict --check-ref > run3.log
             grep -Eq '^tuning: [0-9]+ of 3 template kernels tuned from .*/b/.cache/kiln/tuning.tsv .* 0 untuned, 0 refused' run3.log
             ${_b} ${_k} run ${_m} -t opencl --strict --no-tuning-cache > run4.log
             ! grep -q '^tuning:' run4.log
             awk -F '\t' -v OFS='\t' '/^#/ { print; next } { $9 = $8 / 2; print }' c.tsv > e.tsv
             ${_k} compile ${_m} -t opencl --tuning-cache e.tsv -o m.kiln > compile.log
             ${_k} info m.kiln > info.log
             grep -q '^tuned kernels: 3$' info.log
             ${_k} run m.kiln --profile > run5.log
             grep -q '\\[tuned: ' run5.log
             echo ok")
  set_tests_properties(opencl_tune_cli PROPERTIES LABELS "target=opencl" TIMEOUT 600
                       ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endif()

# OpenCL program binaries in modules (module section 'DBIN'): kiln compile
# -t opencl -o embeds device 0's binary (a progress line with --progress,
# none off a terminal without it), and a run with an empty PoCL cache
# builds from it; --device none leaves the source only; an explicit device
# that is not there is an error naming it; --device on the CPU target a
# usage error.
if(TARGET kiln_cli)
  set(_dir ${CMAKE_CURRENT_BINARY_DIR}/opencl_module_binary)
  set(_kiln "'$<TARGET_FILE:kiln_cli>'")
  set(_m "'${CMAKE_SOURCE_DIR}/examples/tinycnn.onnx'")
  add_test(NAME opencl_module_binary
           COMMAND sh -c "set -e; rm -rf '${_dir}'; mkdir -p '${_dir}/pocl' '${_dir}/kiln'
             export KILN_CACHE_DIR='${_dir}/kiln'
             ${_kiln} compile ${_m} -t opencl -o '${_dir}/m.kiln' > '${_dir}/compile.log' 2> '${_dir}/compile.err'
             grep -q '^embedded the opencl:0 program binary for .* KB' '${_dir}/compile.log'
             if grep -q 'building for' '${_dir}/compile.err'; then echo 'progress line off a terminal'; exit 1; fi
             ${_kiln} compile ${_m} -t opencl --progress -o '${_dir}/m2.kiln' > /dev/null 2> '${_dir}/progress.err'
             grep -Eq '^building for .*: kernels compiled, ([0-9]+)/\\1 steps, ' '${_dir}/progress.err'
             ${_kiln} info '${_dir}/m.kiln' > '${_dir}/info.log'
             grep -q '^program binary: .* (.*, driver .*, kiln [0-9.]*, [0-9.]* KB); the source is the fallback' '${_dir}/info.log'
             POCL_CACHE_DIR='${_dir}/pocl' ${_kiln} run '${_dir}/m.kiln' --target opencl --strict > '${_dir}/run.log'
             grep -q '^opencl program: built from the module.s program binary' '${_dir}/run.log'
             ${_kiln} compile ${_m} -t opencl --device none -o '${_dir}/src.kiln' > '${_dir}/src.log'
             if grep -q embedded '${_dir}/src.log'; then echo 'embedded with --device none'; exit 1; fi
             ${_kiln} run '${_dir}/src.kiln' --target opencl --strict > '${_dir}/src_run.log'
             grep -Eq '^opencl program: built from (source|the binary cache)' '${_dir}/src_run.log'
             if ${_kiln} compile ${_m} -t opencl --device 63 -o '${_dir}/x.kiln' 2> '${_dir}/d63.err'; then exit 1; fi
             grep -q 'opencl: device 63 not found' '${_dir}/d63.err'
             grep -q -- '--device 63' '${_dir}/d63.err'
             test ! -e '${_dir}/x.kiln'
             set +e; ${_kiln} compile ${_m} --device 0 -o '${_dir}/y.kiln' 2> '${_dir}/cpu.err'; rc=$?; set -e
             test $rc = 2
             grep -q -- '--device needs -o FILE.kiln and a target whose driver builds binaries' '${_dir}/cpu.err'
             echo ok")
  set_tests_properties(opencl_module_binary PROPERTIES LABELS "target=opencl" TIMEOUT 600)
endif()
# Heterogeneous execution: OpenCL has f64, so the same model gets no host
# kernels (tests/test_hetero.c; the CPU-only plugin op that falls back on
# OpenCL is in test_plugin_example.py).
add_test(NAME test_hetero_opencl COMMAND test_hetero --target opencl)
set_tests_properties(test_hetero_opencl PROPERTIES LABELS "target=opencl" TIMEOUT 600)
# The same on an OpenCL device without fp64 (PoCL's hidden): asked per node,
# the f64 nodes run on the CPU of the session and --strict names them.
add_test(NAME test_hetero_opencl_nofp64 COMMAND test_hetero --target opencl)
set_tests_properties(test_hetero_opencl_nofp64 PROPERTIES LABELS "target=opencl" TIMEOUT 600
                     ENVIRONMENT "KILN_OPENCL_FEATURES=no-fp64")
# Data-dependent shapes and control flow: host nodes as the CPU fallback
# between stages compiled for the device (tests/test_dataflow.c).
add_test(NAME test_dataflow_opencl COMMAND test_dataflow --target opencl)
set_tests_properties(test_dataflow_opencl PROPERTIES LABELS "target=opencl" TIMEOUT 600)

# RoiAlign's two kernels (per bin, per output element) against the
# reference on the OpenCL device: tests/test_roi_align_targets.c.
add_test(NAME test_roi_align_targets_opencl COMMAND test_roi_align_targets --target opencl)
set_tests_properties(test_roi_align_targets_opencl PROPERTIES LABELS "target=opencl" TIMEOUT 900
                     WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}
                     ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
# float8 / int4 conversions, QuantizeLinear / DequantizeLinear / Cast and the
# session's int4 I/O on the OpenCL device (tests/test_quant_lowbit.c).
add_test(NAME test_quant_lowbit_opencl COMMAND test_quant_lowbit --target opencl)
set_tests_properties(test_quant_lowbit_opencl PROPERTIES LABELS "target=opencl;quant;badinput" TIMEOUT 600
                     WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})

# Issue 23: the printed erf / tanh / sigmoid / softplus approximations over a
# sweep with the edges, a 16.8M-element grid and middle-axis reductions
# against the reference (tests/test_gpu_ew_limits.c).
add_test(NAME test_gpu_ew_limits_opencl COMMAND test_gpu_ew_limits --target opencl)
set_tests_properties(test_gpu_ew_limits_opencl PROPERTIES LABELS "target=opencl" TIMEOUT 600
                     WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}
                     ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")

# Issue 23: the template grids of tests/test_gpu_template_grids.c on PoCL
# (global sizes are size_t: nothing folds), the small cases and --real; with
# --refuse, work-groups past CL_DEVICE_MAX_WORK_ITEM_SIZES (lowered to 4 by
# KILN_OPENCL_FEATURES=items=4) refused naming the kernel and node.
add_test(NAME test_gpu_template_grids_opencl COMMAND test_gpu_template_grids --target opencl)
add_test(NAME test_gpu_template_grids_opencl_real COMMAND test_gpu_template_grids --target opencl --real)
add_test(NAME test_gpu_template_grids_opencl_refuse COMMAND test_gpu_template_grids --target opencl --refuse)
set_tests_properties(test_gpu_template_grids_opencl test_gpu_template_grids_opencl_real
                     test_gpu_template_grids_opencl_refuse PROPERTIES
                     LABELS "target=opencl" TIMEOUT 600 WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}
                     ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
set_property(TEST test_gpu_template_grids_opencl_refuse APPEND PROPERTY ENVIRONMENT "KILN_OPENCL_FEATURES=items=4")
