# OpenCL test suites (label target=opencl; "unit" too for the fast device test).
# Included by tests/CMakeLists.txt. They run on whatever OpenCL device 0 is
# (PoCL's CPU device in CI); without a platform each test reports it and fails.
if(NOT TARGET kiln OR NOT OpenCL_FOUND OR NOT KILN_ENABLE_OPENCL)
  return()
endif()
file(GLOB KILN_OPENCL_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/opencl/test_*.c)
foreach(src ${KILN_OPENCL_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src} ${CMAKE_SOURCE_DIR}/tests/opencl/graph_harness.c)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests/opencl)
  target_link_libraries(${name} PRIVATE kiln_testing OpenCL::OpenCL)
  add_test(NAME ${name} COMMAND ${name})
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

# ONNX node conformance on the OpenCL device, against the ONNX expected
# outputs and the reference interpreter, with and without fusion (label
# "onnx" like the CPU runs, plus target=opencl).
if(KILN_NODE_TEST_DIR AND TARGET kiln_conformance)
  foreach(level O1 O0)
    add_test(NAME conformance_onnx_node_opencl_${level}
             COMMAND kiln_conformance --target opencl -${level} --quiet ${KILN_NODE_TEST_DIR})
    set_tests_properties(conformance_onnx_node_opencl_${level} PROPERTIES
                         LABELS "onnx;target=opencl" TIMEOUT 3600
                         ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
  endforeach()
endif()
