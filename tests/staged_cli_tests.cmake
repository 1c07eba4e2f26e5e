# Staged modules through the command line (section STGS): a model with a
# compiled stage feeding NonMaxSuppression and NonZero (and, at the end, one
# with Compress and TopK), written with
# onnx.helper (tests/models/staged_det.py, which also runs onnxruntime),
# compiled by `kiln compile`, listed by `kiln info`, run by `kiln run` on the
# module and by `kiln-rt-run`: every output equal to onnxruntime's. Included
# from tests/CMakeLists.txt after cli_tests.cmake.

if(NOT KILN_PYTHON OR NOT EXISTS "${KILN_PYTHON}" OR NOT COMMAND kiln_cli_test)
  return()
endif()
set(D ${CMAKE_BINARY_DIR}/models/staged)
add_test(NAME staged_det_export COMMAND ${KILN_PYTHON} ${CMAKE_SOURCE_DIR}/tests/models/staged_det.py --out ${D})
set_tests_properties(staged_det_export PROPERTIES FIXTURES_SETUP staged_det LABELS unit TIMEOUT 120)

kiln_cli_test(staged_compile FIXTURE staged_module REQUIRES staged_det FILE ${D}/det.kiln
  CHECK "STDOUT_HAS=wrote ${D}/det.kiln"
  ARGS compile ${D}/det.onnx -o ${D}/det.kiln)
kiln_cli_test(staged_info REQUIRES staged_module
  CHECK "STDOUT_HAS=staged: 4 segments, 2 compiled stages and 2 host nodes"
        "STDOUT_HAS=host node 'nms' (NonMaxSuppression)" "STDOUT_HAS=host node 'nz' (NonZero)"
        "STDOUT_HAS=output sel: i64[<=12,3]" "STDOUT_HAS=output nz: i64[3,<=16]"
  ARGS info ${D}/det.kiln)
kiln_cli_test(staged_run_module FIXTURE staged_out_run REQUIRES staged_module CLEAN ${D}/run FILE ${D}/run/sel.npy
  ARGS run ${D}/det.kiln --input boxes=${D}/boxes.npy --input scores=${D}/scores.npy --output ${D}/run)
kiln_cli_test(staged_rt_run EXE kiln_rt_run FIXTURE staged_out_rt REQUIRES staged_module CLEAN ${D}/rt FILE ${D}/rt/sel.npy
  ARGS ${D}/det.kiln --input boxes=${D}/boxes.npy --input scores=${D}/scores.npy --output ${D}/rt --runs 3)
kiln_cli_test(staged_run_onnx FIXTURE staged_out_onnx REQUIRES staged_det CLEAN ${D}/onnx FILE ${D}/onnx/sel.npy
  ARGS run ${D}/det.onnx --input boxes=${D}/boxes.npy --input scores=${D}/scores.npy --output ${D}/onnx)
foreach(run run rt onnx)
  add_test(NAME staged_check_${run}
           COMMAND ${KILN_PYTHON} ${CMAKE_SOURCE_DIR}/tests/models/staged_det.py --out ${D} --check ${D}/${run})
  set_tests_properties(staged_check_${run} PROPERTIES LABELS unit FIXTURES_REQUIRED "staged_det;staged_out_${run}")
endforeach()

# Compress and TopK with a run-time K as host nodes of a staged module
# (ops.onnx, written by staged_det.py beside det.onnx): compiled, run by
# `kiln run` and `kiln-rt-run` on the module, equal to onnxruntime's outputs.
kiln_cli_test(staged_ops_compile FIXTURE staged_ops_module REQUIRES staged_det FILE ${D}/ops.kiln
  CHECK "STDOUT_HAS=wrote ${D}/ops.kiln"
  ARGS compile ${D}/ops.onnx -o ${D}/ops.kiln)
kiln_cli_test(staged_ops_info REQUIRES staged_ops_module
  CHECK "STDOUT_HAS=host node 'keep_cols' (Compress)" "STDOUT_HAS=host node 'top' (TopK)"
        "STDOUT_HAS=output c: f32[3,<=20]" "STDOUT_HAS=output topi: i64[<=20]"
  ARGS info ${D}/ops.kiln)
kiln_cli_test(staged_ops_run_module FIXTURE staged_ops_out_run REQUIRES staged_ops_module CLEAN ${D}/ops_run
  FILE ${D}/ops_run/top.npy
  ARGS run ${D}/ops.kiln --input x=${D}/x.npy --input s=${D}/s.npy --output ${D}/ops_run)
kiln_cli_test(staged_ops_rt_run EXE kiln_rt_run FIXTURE staged_ops_out_rt REQUIRES staged_ops_module CLEAN ${D}/ops_rt
  FILE ${D}/ops_rt/top.npy
  ARGS ${D}/ops.kiln --input x=${D}/x.npy --input s=${D}/s.npy --output ${D}/ops_rt --runs 3)
foreach(run run rt)
  add_test(NAME staged_ops_check_${run}
           COMMAND ${KILN_PYTHON} ${CMAKE_SOURCE_DIR}/tests/models/staged_det.py --out ${D} --check-ops ${D}/ops_${run})
  set_tests_properties(staged_ops_check_${run} PROPERTIES LABELS unit FIXTURES_REQUIRED "staged_det;staged_ops_out_${run}")
endforeach()
