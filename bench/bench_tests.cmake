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
