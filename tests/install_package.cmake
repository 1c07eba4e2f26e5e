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

function(check_example exe how)
  run("${how} example" ${exe} ${SRC}/examples/tinycnn.onnx ${WORK}/${how}.kiln)
  # tinycnn ends in a Softmax over 10 classes: its output sums to 1
  if(NOT last_out MATCHES "output 'probs' \\[1,10\\]: sum 1\\.0000" OR NOT last_out MATCHES "fusion\\.kernels_after = ")
    message(FATAL_ERROR "${how} example: unexpected output:\n${last_out}")
  endif()
  # the module it wrote runs with the installed runtime-only runner
  run("installed kiln-rt-run" ${prefix}/bin/kiln-rt-run ${WORK}/${how}.kiln)
  message(STATUS "${how}: ${last_out}")
endfunction()

# CMake: only the prefix is given; the example finds everything from there.
run("cmake configure (find_package)" ${CMAKE_COMMAND} -S ${SRC}/examples/consumer -B ${WORK}/cmake-build
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_C_COMPILER=${CC} -DCMAKE_BUILD_TYPE=Release)
run("cmake build" ${CMAKE_COMMAND} --build ${WORK}/cmake-build)
check_example(${WORK}/cmake-build/kiln_example cmake)

# pkg-config: flags from kiln.pc (and kiln-runtime.pc through Requires).
set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
run("pkg-config kiln" pkg-config --cflags --libs kiln)
string(STRIP "${last_out}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
if(NOT "-lkiln_rt" IN_LIST flags OR NOT "-lkiln" IN_LIST flags)
  message(FATAL_ERROR "pkg-config --libs kiln: expected -lkiln and -lkiln_rt, got ${flags}")
endif()
run("cc with pkg-config flags" ${CC} ${SRC}/examples/consumer/main.c -o ${WORK}/pkgconfig-example ${flags}
    -lm -Wl,-rpath,${prefix}/lib)
check_example(${WORK}/pkgconfig-example pkgconfig)
