# Custom-op plugins (include/kiln/custom_op.h): the example plugin
# (examples/plugin), plugins that are wrong in one way each
# (tests/plugins/bad_plugin.c), the C test of registration, inference,
# patterns and the reference kernel (test_bad_plugins), and the end-to-end
# test of the example on every target built (test_plugin_example.py).
# The example's cpu_fn kernel (ScaledSwishFn) is built as kiln builds its
# own CPU code (-O3 -fno-math-errno, OpenMP), so bench/plugin.py compares
# the call with the same loop compiled into a module. The _nofn build
# registers that op with a source kernel instead (a module compiled against
# the cpu_fn build must be refused with it).
find_package(OpenMP COMPONENTS C)
foreach(_variant "" _nofn)
  add_library(kiln_example_plugin${_variant} MODULE ${CMAKE_SOURCE_DIR}/examples/plugin/example_plugin.c)
  target_include_directories(kiln_example_plugin${_variant} PRIVATE ${CMAKE_SOURCE_DIR}/include)
  target_compile_options(kiln_example_plugin${_variant} PRIVATE -O3 -fno-math-errno)
  target_link_libraries(kiln_example_plugin${_variant} PRIVATE m)
  if(OpenMP_C_FOUND)
    target_link_libraries(kiln_example_plugin${_variant} PRIVATE OpenMP::OpenMP_C)
  endif()
  set_target_properties(kiln_example_plugin${_variant} PROPERTIES PREFIX "lib" OUTPUT_NAME kiln_example${_variant})
endforeach()
target_compile_definitions(kiln_example_plugin_nofn PRIVATE EXAMPLE_NO_CPU_FN)
set(_bad_plugins)
set(_bad_targets)
foreach(bad NO_ENTRY VERSION DUP HALF OPS BOTH V1 PATTERN)
  string(TOLOWER ${bad} _lower)
  add_library(kiln_bad_plugin_${_lower} MODULE ${CMAKE_CURRENT_SOURCE_DIR}/plugins/bad_plugin.c)
  target_include_directories(kiln_bad_plugin_${_lower} PRIVATE ${CMAKE_SOURCE_DIR}/include)
  target_compile_definitions(kiln_bad_plugin_${_lower} PRIVATE BAD_${bad})
  list(APPEND _bad_plugins "KILN_BAD_PLUGIN_${bad}=$<TARGET_FILE:kiln_bad_plugin_${_lower}>")
  list(APPEND _bad_targets kiln_bad_plugin_${_lower})
endforeach()
if(TEST test_bad_plugins)
  # building the test builds the plugins it loads (a stale one would hold
  # descriptors of an older layout)
  add_dependencies(test_bad_plugins kiln_example_plugin ${_bad_targets})
  set_property(TEST test_bad_plugins APPEND PROPERTY ENVIRONMENT
               "KILN_EXAMPLE_PLUGIN=$<TARGET_FILE:kiln_example_plugin>" ${_bad_plugins})
endif()
if(TEST test_plugin_cpu_fn)
  add_dependencies(test_plugin_cpu_fn kiln_example_plugin kiln_example_plugin_nofn kiln_bad_plugin_both
                   kiln_bad_plugin_v1)
  set_property(TEST test_plugin_cpu_fn APPEND PROPERTY ENVIRONMENT
               "KILN_EXAMPLE_PLUGIN=$<TARGET_FILE:kiln_example_plugin>"
               "KILN_EXAMPLE_PLUGIN_NOFN=$<TARGET_FILE:kiln_example_plugin_nofn>"
               "KILN_BAD_PLUGIN_BOTH=$<TARGET_FILE:kiln_bad_plugin_both>"
               "KILN_BAD_PLUGIN_V1=$<TARGET_FILE:kiln_bad_plugin_v1>"
               "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-plugin-cache")
endif()
if(TEST test_plugin_patterns)
  add_dependencies(test_plugin_patterns kiln_example_plugin kiln_bad_plugin_ops kiln_bad_plugin_pattern)
  set_property(TEST test_plugin_patterns APPEND PROPERTY ENVIRONMENT
               "KILN_EXAMPLE_PLUGIN=$<TARGET_FILE:kiln_example_plugin>"
               "KILN_BAD_PLUGIN_OPS=$<TARGET_FILE:kiln_bad_plugin_ops>"
               "KILN_BAD_PLUGIN_PATTERN=$<TARGET_FILE:kiln_bad_plugin_pattern>")
endif()
if(TEST test_plugin_registry)
  # through libkiln.so, as applications use it (tests/CMakeLists.txt links
  # the static library too: a third copy of the registry code)
  target_link_libraries(test_plugin_registry PRIVATE kiln_compiler)
  target_compile_definitions(test_plugin_registry PRIVATE
                             "KILN_RT_SONAME=\"libkiln_rt.so.${PROJECT_VERSION_MAJOR}\"")
  add_dependencies(test_plugin_registry kiln_example_plugin)
  set_property(TEST test_plugin_registry APPEND PROPERTY ENVIRONMENT
               "KILN_EXAMPLE_PLUGIN=$<TARGET_FILE:kiln_example_plugin>"
               "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-plugin-cache")
endif()
if(KILN_PYTHON AND TARGET kiln_cli)
  string(REPLACE ";" "," _plugin_targets "${KILN_TARGETS_BUILT}")
  # the Python package too, but not under the sanitizer: Python cannot
  # dlopen ASan-built libraries
  set(_py_args)
  if(NOT KILN_SANITIZE AND TARGET kiln_compiler)
    set(_py_args --python-package=${CMAKE_SOURCE_DIR}/python --lib-dir=$<TARGET_FILE_DIR:kiln_compiler>)
  endif()
  add_test(NAME plugin_example
           COMMAND ${KILN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_plugin_example.py
                   --kiln $<TARGET_FILE:kiln_cli> --rt-run $<TARGET_FILE:kiln_rt_run>
                   --plugin $<TARGET_FILE:kiln_example_plugin> --bad-plugin $<TARGET_FILE:kiln_bad_plugin_ops>
                   --targets ${_plugin_targets} --work ${CMAKE_CURRENT_BINARY_DIR}/plugin_example ${_py_args})
  add_test(NAME plugin_api2
           COMMAND ${KILN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_plugin_api2.py
                   --kiln $<TARGET_FILE:kiln_cli> --rt-run $<TARGET_FILE:kiln_rt_run>
                   --plugin $<TARGET_FILE:kiln_example_plugin> --plugin-nofn $<TARGET_FILE:kiln_example_plugin_nofn>
                   --bad-plugin $<TARGET_FILE:kiln_bad_plugin_ops>
                   --targets ${_plugin_targets} --work ${CMAKE_CURRENT_BINARY_DIR}/plugin_api2 ${_py_args})
  set(_env "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-plugin-cache")
  # Under the sanitizer the OpenCL and Vulkan runs go without leak checking
  # (the CPU runs keep it; test_plugin_cpu_fn, test_plugin_registry and
  # test_bad_plugins check the plugin paths for leaks): lavapipe's one leak
  # needs LSan's slow unwinder, which makes each run take minutes (as
  # test_bad_module_validate_vulkan_device), and with PoCL's worker threads
  # LSan's own tracer crashed at a run's exit once in CI (signal 11 while
  # stopping the threads, after the outputs matched: the sanitizer runtime's
  # intermittent bug google/sanitizers#1353, as conformance_onnx_node_opencl_O0).
  if(KILN_SANITIZE)
    list(APPEND _env "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan_pocl.supp"
         "KILN_TEST_GPU_NO_LEAK_CHECK=vulkan,opencl")
  endif()
  set_tests_properties(plugin_example PROPERTIES LABELS "onnx;badinput" TIMEOUT 900 ENVIRONMENT "${_env}")
  # cold (PoCL and shaderc compiles of every target) about a minute: slow
  set_tests_properties(plugin_api2 PROPERTIES LABELS "onnx;badinput;slow" TIMEOUT 600 ENVIRONMENT "${_env}")
endif()
