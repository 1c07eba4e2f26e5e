# Staged modules through the command line (section STGS): a model with a
# compiled stage feeding NonMaxSuppression and NonZero, written with
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
