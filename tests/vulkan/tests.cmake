# Vulkan test suites (label target=vulkan): every tests/vulkan/*.c is one
# executable run on the first Vulkan device (Mesa lavapipe in CI) with the
# Khronos validation layer on; a test fails on any validation message.
# Included by tests/CMakeLists.txt when the target is built in.
file(GLOB KILN_VULKAN_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/vulkan/*.c)
foreach(src ${KILN_VULKAN_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE kiln_testing)
  target_include_directories(${name} PRIVATE ${KILN_SHADERC_INCLUDE})
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES
    LABELS "target=vulkan"
    TIMEOUT 600
    WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}
    # A validation message is printed as "kiln vulkan validation: ..." and
    # counted; the tests check the count, and this regex catches any that
    # arrive after the last check (e.g. while the instance is destroyed).
    FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
    ENVIRONMENT "KILN_VULKAN_VALIDATION=1;KILN_TEST_SRC=${CMAKE_SOURCE_DIR}/tests;KILN_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/kiln-vk-cache")
endforeach()
# test_vulkan_tune's Winograd points all compiled and its tune of the
# Winograd instance on the device (its first point an F(4x4) shader, which
# glslang and lavapipe compile for tens of seconds)
add_test(NAME test_vulkan_tune_winograd COMMAND test_vulkan_tune winograd)
set_tests_properties(test_vulkan_tune_winograd PROPERTIES
  LABELS "target=vulkan;slow" TIMEOUT 900 WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}
  FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
  ENVIRONMENT "KILN_VULKAN_VALIDATION=1;KILN_TEST_SRC=${CMAKE_SOURCE_DIR}/tests;KILN_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/kiln-vk-cache")
# the device tests again with the conv, depthwise, Winograd and pool shaders'
# outputs stored as vec4s (no u64vec4 pairs) and as imageStores: the two
# store forms the default (pairs where the device has shaderInt64) leaves
foreach(form vec4 image)
  add_test(NAME test_vulkan_device_ystore_${form} COMMAND test_vulkan_device)
  set_tests_properties(test_vulkan_device_ystore_${form} PROPERTIES
    LABELS "target=vulkan" TIMEOUT 600 WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}
    FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
    ENVIRONMENT "KILN_SPIRV_YSTORE=${form};KILN_SPIRV_CONV_YSTORE=${form};KILN_VULKAN_VALIDATION=1;KILN_TEST_SRC=${CMAKE_SOURCE_DIR}/tests;KILN_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/kiln-vk-cache")
endforeach()
# conv.comp reading X itself (strides, uneven pads, stems, batch 2, fused
# epilogues) and with the phase split's copy (KILN_SPIRV_CONV_PAD=copy)
add_test(NAME test_vulkan_device_conv_direct COMMAND test_vulkan_device conv_direct)
set_tests_properties(test_vulkan_device_conv_direct PROPERTIES
  LABELS "target=vulkan" TIMEOUT 600 WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}
  FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
  ENVIRONMENT "KILN_VULKAN_VALIDATION=1;KILN_TEST_SRC=${CMAKE_SOURCE_DIR}/tests;KILN_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/kiln-vk-cache")
# F(4x4) Winograd convs of one kind at two sizes: one SPIR-V binary, one
# pipeline (the sizes read at run time), and both match the reference
add_test(NAME test_vulkan_device_wino_shared COMMAND test_vulkan_device wino_shared)
set_tests_properties(test_vulkan_device_wino_shared PROPERTIES
  LABELS "target=vulkan" TIMEOUT 600 WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}
  FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
  ENVIRONMENT "KILN_VULKAN_VALIDATION=1;KILN_TEST_SRC=${CMAKE_SOURCE_DIR}/tests;KILN_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/kiln-vk-cache")
# Winograd on small planes: F(4x4)'s tiles of 7x7 and 5x5 planes as 2 tile
# rows an invocation, 9x9 and 13x13 in both forms, batch 2, against the reference
add_test(NAME test_vulkan_device_wino_rows COMMAND test_vulkan_device wino_rows)
set_tests_properties(test_vulkan_device_wino_rows PROPERTIES
  LABELS "target=vulkan" TIMEOUT 600 WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}
  FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
  ENVIRONMENT "KILN_VULKAN_VALIDATION=1;KILN_TEST_SRC=${CMAKE_SOURCE_DIR}/tests;KILN_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/kiln-vk-cache")
# The template and row shaders on lavapipe at other SIMD widths: every
# default was measured with its 8-lane subgroups, and a GPU's are 16-64 lanes
# (and some 4). llvmpipe at 128 bits runs 4-lane subgroups, at 512 bits 16
# (tests/vulkan/lp_width.sh checks the device reports them): the shaders'
# subgroupBroadcast / ballot / arithmetic paths and the row reductions must
# give the same results (the broadcast modes fall back where the subgroup is
# narrower than the work-group).
foreach(width 128 512)
  math(EXPR _lanes "${width} / 32")
  foreach(t test_vulkan_device test_vulkan_rows)
    add_test(NAME ${t}_sg${_lanes}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/vulkan/lp_width.sh ${width} $<TARGET_FILE:kiln_cli> $<TARGET_FILE:${t}>)
    set_tests_properties(${t}_sg${_lanes} PROPERTIES
      LABELS "target=vulkan" TIMEOUT 600 WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR} SKIP_RETURN_CODE 77
      FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
      ENVIRONMENT "KILN_VULKAN_VALIDATION=1;KILN_TEST_SRC=${CMAKE_SOURCE_DIR}/tests;KILN_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/kiln-vk-cache")
  endforeach()
endforeach()
# compiles through the public compiler API (which asks the device its features)
target_link_libraries(test_vulkan_features PRIVATE kiln_compiler)
target_link_libraries(test_vulkan_rows PRIVATE kiln_compiler)

# ONNX node conformance on the Vulkan device (labels target=vulkan and slow:
# tens of minutes on lavapipe with the validation layer, so it runs apart with
# `ctest -L slow`) and the example model end to end through a session (several
# dispatches, barriers, arena aliasing; in the default suite). Both run with the
# validation layer on: any message fails the test. None is labelled unit/onnx,
# so the ASan pass of tools/test.sh leaves them out (Mesa's LLVM is not built
# for ASan).
set(KILN_VULKAN_TEST_ENV "KILN_VULKAN_VALIDATION=1;KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-vk-cache")
if(KILN_NODE_TEST_DIR AND TARGET kiln_conformance)
  add_test(NAME conformance_onnx_node_vulkan_O1
           COMMAND kiln_conformance --target vulkan -O1 --quiet ${KILN_NODE_TEST_DIR})
  set_tests_properties(conformance_onnx_node_vulkan_O1 PROPERTIES
                       LABELS "target=vulkan;slow" TIMEOUT 3600
                       FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
                       ENVIRONMENT "${KILN_VULKAN_TEST_ENV}")
endif()
# The node suite again on lavapipe with 4- and 16-lane subgroups (see
# lp_width.sh; slow: ~1 min each without the validation layer, far more with it).
if(KILN_NODE_TEST_DIR AND TARGET kiln_conformance)
  foreach(width 128 512)
    math(EXPR _lanes "${width} / 32")
    add_test(NAME conformance_onnx_node_vulkan_O1_sg${_lanes}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/vulkan/lp_width.sh ${width} $<TARGET_FILE:kiln_cli>
                     $<TARGET_FILE:kiln_conformance> --target vulkan -O1 --quiet ${KILN_NODE_TEST_DIR})
    set_tests_properties(conformance_onnx_node_vulkan_O1_sg${_lanes} PROPERTIES
                         LABELS "target=vulkan;slow" TIMEOUT 3600 SKIP_RETURN_CODE 77
                         FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
                         ENVIRONMENT "${KILN_VULKAN_TEST_ENV}")
  endforeach()
endif()
# The casts in an fp16 plan on Vulkan (f16 arithmetic: the fp16 rewrite must
# keep f8_encode's operand and f8_decode's result f32; f32 -> f16 texel
# stores rounded to nearest even), the whole suite's Cast cases: ~25 s.
if(KILN_NODE_TEST_DIR AND TARGET kiln_conformance)
  add_test(NAME conformance_onnx_node_vulkan_fp16_cast
           COMMAND kiln_conformance --target vulkan -O1 --precision fp16 --quiet --filter cast ${KILN_NODE_TEST_DIR})
  set_tests_properties(conformance_onnx_node_vulkan_fp16_cast PROPERTIES
                       LABELS "target=vulkan" TIMEOUT 600
                       FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
                       ENVIRONMENT "${KILN_VULKAN_TEST_ENV}")
endif()
foreach(level O0 O1)
  add_test(NAME vulkan_tinycnn_check_ref_${level}
           COMMAND kiln_cli run ${CMAKE_SOURCE_DIR}/examples/tinycnn.onnx --target vulkan --strict
                   -${level} --check-ref --profile --trace ${CMAKE_CURRENT_BINARY_DIR}/vk_tinycnn_${level}.json)
  set_tests_properties(vulkan_tinycnn_check_ref_${level} PROPERTIES
                       LABELS "target=vulkan" TIMEOUT 600
                       PASS_REGULAR_EXPRESSION "check probs vs reference interpreter: match"
                       FAIL_REGULAR_EXPRESSION "kiln vulkan validation:|MISMATCH"
                       ENVIRONMENT "${KILN_VULKAN_TEST_ENV}")
endforeach()

# Run-time arithmetic errors and large-sum accuracy on the Vulkan device
# (tests/test_bad_runtime_arith.c with --target vulkan), validation layer on.
add_test(NAME test_bad_runtime_arith_vulkan COMMAND test_bad_runtime_arith --target vulkan)
set_tests_properties(test_bad_runtime_arith_vulkan PROPERTIES LABELS "target=vulkan;badinput" TIMEOUT 600
                     FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
                     ENVIRONMENT "${KILN_VULKAN_TEST_ENV}")
# CumSum, TopK and ReverseSequence against the reference on the Vulkan device.
add_test(NAME test_tensor_ops_target_vulkan COMMAND test_tensor_ops_target --target vulkan)
set_tests_properties(test_tensor_ops_target_vulkan PROPERTIES LABELS "target=vulkan" TIMEOUT 600
                     FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
                     ENVIRONMENT "${KILN_VULKAN_TEST_ENV}")
# The quantized ops (tests/test_ops_quant.c) against the reference on the Vulkan device.
add_test(NAME test_ops_quant_vulkan COMMAND test_ops_quant --target vulkan)
set_tests_properties(test_ops_quant_vulkan PROPERTIES LABELS "target=vulkan" TIMEOUT 600
                     FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
                     ENVIRONMENT "${KILN_VULKAN_TEST_ENV}")
# QLinearConv through Conv's GEMM lowering (tests/test_qconv_gemm.c) on the Vulkan device.
add_test(NAME test_qconv_gemm_vulkan COMMAND test_qconv_gemm --target vulkan)
set_tests_properties(test_qconv_gemm_vulkan PROPERTIES LABELS "target=vulkan" TIMEOUT 600
                     FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
                     ENVIRONMENT "${KILN_VULKAN_TEST_ENV}")
# Under the sanitizer build, lavapipe's one leaked block (tests/lsan_vulkan.supp)
# is only suppressible with LSan's slow unwinder, which makes this test's
# in-process shader compiles run past 10 minutes: it runs with ASan/UBSan but
# without leak checking. The status-word paths it shares with the CPU and
# OpenCL devices are leak-checked by test_bad_runtime_arith(_opencl), and the
# Vulkan device paths by test_bad_device.
if(KILN_SANITIZE)
  set_property(TEST test_bad_runtime_arith_vulkan APPEND PROPERTY ENVIRONMENT "LSAN_OPTIONS=detect_leaks=0")
  # the same for the quantized ops (their leak-free paths: test_ops_quant on cpu/opencl)
  set_property(TEST test_ops_quant_vulkan APPEND PROPERTY ENVIRONMENT "LSAN_OPTIONS=detect_leaks=0")
  set_property(TEST test_qconv_gemm_vulkan APPEND PROPERTY ENVIRONMENT "LSAN_OPTIONS=detect_leaks=0")
endif()
# f64 on Vulkan: the GLSL dialect has no f64, so compiling refuses it by name.
add_test(NAME test_f64_target_vulkan COMMAND test_f64_target --target vulkan)
set_tests_properties(test_f64_target_vulkan PROPERTIES LABELS "target=vulkan" TIMEOUT 600
                     FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
                     ENVIRONMENT "${KILN_VULKAN_TEST_ENV}")

# Patchify convs, MatMul with a shared B, Identity on shared initializers and
# equal weight columns at -O0 and -O1 on the Vulkan device
# (tests/test_lower_targets.c --target vulkan), validation layer on.
add_test(NAME test_lower_targets_vulkan COMMAND test_lower_targets --target vulkan)
set_tests_properties(test_lower_targets_vulkan PROPERTIES LABELS "target=vulkan" TIMEOUT 900
                     FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
                     ENVIRONMENT "${KILN_VULKAN_TEST_ENV}")

# Heterogeneous execution: the f64 nodes GLSL cannot spell run on the CPU of
# the same session (tests/test_hetero.c), and --strict refuses them by name.
add_test(NAME test_hetero_vulkan COMMAND test_hetero --target vulkan)
set_tests_properties(test_hetero_vulkan PROPERTIES LABELS "target=vulkan" TIMEOUT 600
                     FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
                     ENVIRONMENT "${KILN_VULKAN_TEST_ENV}")
if(KILN_SANITIZE)
  set_property(TEST test_hetero_vulkan APPEND PROPERTY ENVIRONMENT "LSAN_OPTIONS=detect_leaks=0")
endif()
# Data-dependent shapes and control flow: host nodes as the CPU fallback
# between stages compiled for the device (tests/test_dataflow.c).
add_test(NAME test_dataflow_vulkan COMMAND test_dataflow --target vulkan)
set_tests_properties(test_dataflow_vulkan PROPERTIES LABELS "target=vulkan" TIMEOUT 600
                     FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
                     ENVIRONMENT "${KILN_VULKAN_TEST_ENV}")
# Under the sanitizer, as test_hetero_vulkan: ASan and UBSan without leak
# checking (lavapipe's one block needs the slow unwinder, which deadlocks in
# lavapipe's threads here); test_dataflow on the CPU is leak-checked.
if(KILN_SANITIZE)
  set_property(TEST test_dataflow_vulkan APPEND PROPERTY ENVIRONMENT "LSAN_OPTIONS=detect_leaks=0")
endif()
# kiln tune runs the graph passes as the compile does: on lavapipe (a
# device on the host CPU) a QDQ model's pairs stay around the float
# templates (api/driver.c's fold policy, with its note), and every kernel
# of that graph is searched alone (the unused constants' views of such a
# kernel-alone program carry no bytes: targets/program_build.c).
if(TARGET kiln_cli)
  set(_dir ${CMAKE_CURRENT_BINARY_DIR}/vulkan_tune_qdq)
  add_test(NAME vulkan_tune_qdq_cli
           COMMAND sh -c "set -e; rm -rf '${_dir}'; mkdir -p '${_dir}'
             '$<TARGET_FILE:kiln_cli>' tune '${CMAKE_BINARY_DIR}/models/qdq_s8.onnx' -t vulkan --budget 60s --trials 1 --repeats 2 --cache '${_dir}/t.tsv' > '${_dir}/tune.log' 2>&1
             grep -q 'note: int8: Q/DQ pairs kept around the float templates' '${_dir}/tune.log'
             if grep -q 'not searched' '${_dir}/tune.log'; then cat '${_dir}/tune.log'; exit 1; fi
             grep -q 'rounds, [1-9][0-9]* trials' '${_dir}/tune.log'
             echo ok")
  set_tests_properties(vulkan_tune_qdq_cli PROPERTIES FIXTURES_REQUIRED models_qdq LABELS "models;target=vulkan"
                       TIMEOUT 600 ENVIRONMENT "${KILN_VULKAN_TEST_ENV}")
endif()

# RoiAlign's two kernels against the reference on the Vulkan device
# (tests/test_roi_align_targets.c), validation layer on.
add_test(NAME test_roi_align_targets_vulkan COMMAND test_roi_align_targets --target vulkan)
set_tests_properties(test_roi_align_targets_vulkan PROPERTIES LABELS "target=vulkan" TIMEOUT 900
                     FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
                     ENVIRONMENT "${KILN_VULKAN_TEST_ENV}")
# float8 / int4 conversions, QuantizeLinear / DequantizeLinear / Cast and the
# session's int4 I/O on the Vulkan device (tests/test_quant_lowbit.c), validation on.
add_test(NAME test_quant_lowbit_vulkan COMMAND test_quant_lowbit --target vulkan)
set_tests_properties(test_quant_lowbit_vulkan PROPERTIES LABELS "target=vulkan;quant;badinput" TIMEOUT 600
                     FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
                     ENVIRONMENT "${KILN_VULKAN_TEST_ENV}")
if(KILN_SANITIZE) # lavapipe's leak, as for test_ops_quant_vulkan above (leak-checked on cpu / opencl)
  set_property(TEST test_quant_lowbit_vulkan APPEND PROPERTY ENVIRONMENT "LSAN_OPTIONS=detect_leaks=0")
endif()

# Issue 23: a printed grid past 65535 work-groups (16.8M elements) folded
# into y, ReduceSum/ReduceMean over a middle axis within the loop limit, and
# the activations' sweep against the reference (tests/test_gpu_ew_limits.c).
add_test(NAME test_gpu_ew_limits_vulkan COMMAND test_gpu_ew_limits --target vulkan)
set_tests_properties(test_gpu_ew_limits_vulkan PROPERTIES LABELS "target=vulkan" TIMEOUT 600
                     FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
                     ENVIRONMENT "${KILN_VULKAN_TEST_ENV}")

# Issue 23: template grids (GEMM, conv, Winograd, depthwise, pool, int8)
# past the device's work-group counts, folded (tests/test_gpu_template_grids.c):
# small cases on a device whose counts KILN_VULKAN_FEATURES=groups=32 lowers,
# with --real a conv and a MatMul past the 65,535 every device has, with
# --refuse a grid past 32^3 refused naming the node.
add_test(NAME test_gpu_template_grids_vulkan COMMAND test_gpu_template_grids --target vulkan)
add_test(NAME test_gpu_template_grids_vulkan_refuse COMMAND test_gpu_template_grids --target vulkan --refuse)
set_tests_properties(test_gpu_template_grids_vulkan test_gpu_template_grids_vulkan_refuse PROPERTIES
                     LABELS "target=vulkan" TIMEOUT 600 FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
                     ENVIRONMENT "${KILN_VULKAN_TEST_ENV};KILN_VULKAN_FEATURES=groups=32")
add_test(NAME test_gpu_template_grids_vulkan_real COMMAND test_gpu_template_grids --target vulkan --real)
set_tests_properties(test_gpu_template_grids_vulkan_real PROPERTIES LABELS "target=vulkan" TIMEOUT 600
                     FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
                     ENVIRONMENT "${KILN_VULKAN_TEST_ENV}")
# the plans, direct convs and Winograd's small planes with the GPU rules
# (KILN_VULKAN_RULES=gpu on lavapipe: shared-memory GEMM / conv tiles of
# 64-256 invocations, work-groups of 64), their launches checked
add_test(NAME test_vulkan_device_gpu_rules COMMAND test_vulkan_device gpu_rules)
set_tests_properties(test_vulkan_device_gpu_rules PROPERTIES
  LABELS "target=vulkan" TIMEOUT 600 WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}
  FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
  ENVIRONMENT "KILN_VULKAN_VALIDATION=1;KILN_TEST_SRC=${CMAKE_SOURCE_DIR}/tests;KILN_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/kiln-vk-cache")

# `kiln tune --precision fp16 --fp16-accumulate` (docs/TUNING.md): the
# kernels an fp16 compile with f16 accumulators runs (tinycnn's 3x3 conv
# as the implicit-GEMM conv: Winograd sums in f32 and has no h), whose GEMM / conv
# records carry h (space vulkan.*.1-h); such a compile takes every record,
# an fp16 compile without the flag none of them (other fingerprints); the
# flag alone and fp16 on the CPU target are refused with a message.
if(TARGET kiln_cli)
  set(_dir ${CMAKE_CURRENT_BINARY_DIR}/vulkan_tune_fp16_cli)
  set(_k "'$<TARGET_FILE:kiln_cli>'")
  set(_m "'${CMAKE_SOURCE_DIR}/examples/tinycnn.onnx'")
  add_test(NAME vulkan_tune_fp16_cli
           COMMAND sh -c "set -e; rm -rf '${_dir}'; mkdir -p '${_dir}'; cd '${_dir}'
             export KILN_SPIRV_WINOGRAD=off
             ${_k} tune ${_m} -t vulkan --precision fp16 --fp16-accumulate --budget 90s --trials 1 --repeats 2 --cache h.tsv > tune.log
             grep -q 'vulkan.conv.1-h' h.tsv
             n=$(grep -vc '^#' h.tsv)
             ${_k} run ${_m} -t vulkan --strict --precision fp16 --fp16-accumulate --tuning-cache h.tsv --check-ref > run.log
             grep -Eq \"^tuning: [0-9]+ of $n template kernels tuned from h.tsv .* 0 untuned, 0 refused\" run.log
             ${_k} run ${_m} -t vulkan --strict --precision fp16 --tuning-cache h.tsv > run2.log
             grep -Eq '^tuning: 0 of [0-9]+ template kernels tuned from h.tsv' run2.log
             ! ${_k} tune ${_m} -t vulkan --fp16-accumulate > bad.log 2>&1
             grep -q 'needs --precision fp16' bad.log
             ! ${_k} tune ${_m} -t cpu --precision fp16 --budget 20s > bad2.log 2>&1
             grep -q 'tuned at fp32 only' bad2.log
             echo ok")
  set_tests_properties(vulkan_tune_fp16_cli PROPERTIES LABELS "target=vulkan" TIMEOUT 600
                       ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endif()
