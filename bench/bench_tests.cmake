# Tests of the benchmark scripts (label "bench"): bench/plot.py and
# bench/models_peers.py on synthetic inputs, a few seconds, no timing asserted.
# Included by the lead's CMakeLists after tests/CMakeLists.txt has set
# KILN_PYTHON (the .venv interpreter); skipped (exit 77) without matplotlib.
if(NOT KILN_PYTHON AND EXISTS ${CMAKE_SOURCE_DIR}/.venv/bin/python)
  set(KILN_PYTHON ${CMAKE_SOURCE_DIR}/.venv/bin/python)
endif()
if(KILN_PYTHON)
  add_test(NAME bench_plot
           COMMAND ${KILN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/../tests/test_bench_plot.py)
  set_tests_properties(bench_plot PROPERTIES LABELS "bench" TIMEOUT 120
                       SKIP_RETURN_CODE 77)
else()
  message(STATUS "kiln: no Python (KILN_PYTHON); the bench_plot test is not registered")
endif()

# Memory planner on the exported models (label "bench"): exports resnet50,
# mobilenet_v2 and the encoder block into the build tree (fixture
# "planner_models"), then kiln_bench_planner plans each, verifies the plan
# and fails when an arena is more than 5% above its lower bound.
if(KILN_PYTHON AND TARGET kiln_bench_planner)
  set(_kiln_planner_models ${CMAKE_BINARY_DIR}/planner-models)
  add_test(NAME bench_planner_export
           COMMAND ${KILN_PYTHON} ${CMAKE_SOURCE_DIR}/tests/models/export_models.py
                   --out ${_kiln_planner_models} --models resnet50,mobilenet_v2)
  add_test(NAME bench_planner_export_encoder
           COMMAND ${KILN_PYTHON} ${CMAKE_SOURCE_DIR}/tests/models/export_encoder.py
                   --out ${_kiln_planner_models})
  set_tests_properties(bench_planner_export bench_planner_export_encoder PROPERTIES
                       FIXTURES_SETUP planner_models LABELS "bench" TIMEOUT 900)
  add_test(NAME bench_planner
           COMMAND kiln_bench_planner --max-ratio 1.05 ${_kiln_planner_models}/resnet50.onnx
                   ${_kiln_planner_models}/mobilenet_v2.onnx ${_kiln_planner_models}/encoder.onnx)
  set_tests_properties(bench_planner PROPERTIES FIXTURES_REQUIRED planner_models LABELS "bench"
                       TIMEOUT 900)
endif()

# bench/conv_peak.py (issue 22's per-conv %-of-peak table) on a seeded two-conv
# model with given peaks (no probe): rows, FLOPs, roofs and the goal count.
if(KILN_PYTHON)
  add_test(NAME bench_conv_peak
           COMMAND ${KILN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/../tests/test_conv_peak.py $<TARGET_FILE:kiln>)
  set_tests_properties(bench_conv_peak PROPERTIES LABELS "bench" TIMEOUT 120)
endif()

# bench/gpu (docs/GPU.md: the one prepared run on a lent NVIDIA device machine):
# prepare.sh packs this build offline with examples/tinycnn.onnx, then
# device_check.sh --dry-run runs every step on lavapipe and PoCL and the
# summary must hold each figure, so the script keeps up with kiln's CLI and
# the benches' output; a wrong expected output must fail it. ~60 s: "slow".
if(TARGET kiln_bench_vulkan_sgemm AND TARGET kiln_bench_opencl_sgemm)
  add_test(NAME bench_gpu_dry_run
           COMMAND bash ${CMAKE_SOURCE_DIR}/bench/gpu/test_dry_run.sh $<TARGET_FILE_DIR:kiln_cli>
                   ${CMAKE_BINARY_DIR}/gpu-dry-run)
  set_tests_properties(bench_gpu_dry_run PROPERTIES LABELS "slow;bench;target=vulkan;target=opencl"
                       TIMEOUT 600)
endif()
