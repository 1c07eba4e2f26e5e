# The Python package (python/kiln): installed into a fresh venv with pip
# and tested with pytest against onnxruntime's outputs (run_pytest.sh).
# Needs the test Python (KILN_PYTHON, for onnx/onnxruntime) and Debian's
# python3 with venv, numpy and pytest (tools/setup.sh). noasan: Python
# cannot dlopen ASan-built libraries.
if(KILN_PYTHON AND EXISTS /usr/bin/python3)
  add_test(NAME python_package
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run_pytest.sh ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR} ${KILN_PYTHON})
  set_tests_properties(python_package PROPERTIES LABELS "unit;python;noasan" TIMEOUT 600
                       ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endif()
