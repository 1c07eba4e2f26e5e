# `cmake --install` into a temporary prefix, then examples/consumer built
# out of tree against it twice -- with CMake (find_package(kiln)) and with
# pkg-config (kiln.pc, which requires kiln-runtime.pc) -- and run on
# examples/tinycnn.onnx; checks the installed layout on the way.
#   cmake -DBUILD=<build dir> -DSRC=<source dir> -DWORK=<scratch dir> -DCC=<C compiler> -P install_package.cmake
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE ${WORK})
set(prefix ${WORK}/prefix)

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(last_out "${out}" PARENT_SCOPE)
endfunction()

run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD} --prefix ${prefix})
foreach(f include/kiln/compiler.h include/kiln/runtime.h include/kiln/export.h bin/kiln bin/kiln-rt-run
          lib/libkiln.so lib/libkiln_rt.so lib/cmake/kiln/kilnConfig.cmake lib/cmake/kiln/kilnConfigVersion.cmake
          lib/pkgconfig/kiln.pc lib/pkgconfig/kiln-runtime.pc)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "cmake --install did not install ${f} under ${prefix}")
  endif()
endforeach()

# tinycnn ends in a Softmax over 10 classes: its output sums to 1.
set(probs_line "output 'probs' \\[1,10\\]: sum 1\\.0000")
function(check_example dir how)
  run("${how} example" ${dir}/kiln_example ${SRC}/examples/tinycnn.onnx ${WORK}/${how}.kiln)
  if(NOT last_out MATCHES "${probs_line}" OR NOT last_out MATCHES "fusion\\.kernels_after = ")
    message(FATAL_ERROR "${how} example: unexpected output:\n${last_out}")
  endif()
  set(compiled "${last_out}")
  # the module it wrote, run by the runtime alone: the same sums
  run("${how} runtime-only example" ${dir}/kiln_run_module ${WORK}/${how}.kiln)
  string(REGEX MATCH "output 'probs'[^\n]*" a "${compiled}")
  string(REGEX MATCH "output 'probs'[^\n]*" b "${last_out}")
  if(NOT a STREQUAL b)
    message(FATAL_ERROR "${how}: the runtime-only example printed '${b}', the compiling one '${a}'")
  endif()
  run("installed kiln-rt-run" ${prefix}/bin/kiln-rt-run ${WORK}/${how}.kiln)
  message(STATUS "${how}: ${b}")
endfunction()

# CMake: only the prefix is given; the example finds everything from there.
run("cmake configure (find_package)" ${CMAKE_COMMAND} -S ${SRC}/examples/consumer -B ${WORK}/cmake-build
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_C_COMPILER=${CC} -DCMAKE_BUILD_TYPE=Release)
run("cmake build" ${CMAKE_COMMAND} --build ${WORK}/cmake-build)
check_example(${WORK}/cmake-build cmake)

# pkg-config: flags from kiln.pc (and kiln-runtime.pc through Requires).
set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
run("pkg-config kiln" pkg-config --cflags --libs kiln)
string(STRIP "${last_out}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
if(NOT "-lkiln_rt" IN_LIST flags OR NOT "-lkiln" IN_LIST flags)
  message(FATAL_ERROR "pkg-config --libs kiln: expected -lkiln and -lkiln_rt, got ${flags}")
endif()
set(ex ${SRC}/examples/consumer)
file(MAKE_DIRECTORY ${WORK}/pkgconfig-build)
run("cc with kiln.pc's flags" ${CC} ${ex}/main.c ${ex}/run.c -o ${WORK}/pkgconfig-build/kiln_example ${flags}
    -lm -Wl,-rpath,${prefix}/lib)
# the runtime alone: kiln-runtime.pc links libkiln_rt and not the compiler
run("pkg-config kiln-runtime" pkg-config --cflags --libs kiln-runtime)
string(STRIP "${last_out}" rt_flags)
separate_arguments(rt_flags UNIX_COMMAND "${rt_flags}")
if(NOT "-lkiln_rt" IN_LIST rt_flags OR "-lkiln" IN_LIST rt_flags)
  message(FATAL_ERROR "pkg-config --libs kiln-runtime: expected -lkiln_rt and not -lkiln, got ${rt_flags}")
endif()
run("cc with kiln-runtime.pc's flags" ${CC} ${ex}/kiln_run_module.c ${ex}/run.c
    -o ${WORK}/pkgconfig-build/kiln_run_module ${rt_flags} -lm -Wl,-rpath,${prefix}/lib)
check_example(${WORK}/pkgconfig-build pkgconfig)
