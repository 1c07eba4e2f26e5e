# Cross-builds libkiln_rt and kiln-rt-run for aarch64 into OUT with Debian's
# gcc-aarch64-linux-gnu (cmake/aarch64-linux-gnu.cmake); the fixture of the
# tests in aarch64.cmake. Usage:
#   cmake -DSRC=<source dir> -DOUT=<build dir> [-DLAUNCHER=ccache] -P build_rt.cmake
set(args -S ${SRC} -B ${OUT} -DCMAKE_TOOLCHAIN_FILE=${SRC}/cmake/aarch64-linux-gnu.cmake
         -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo)
if(LAUNCHER)
  list(APPEND args -DCMAKE_C_COMPILER_LAUNCHER=${LAUNCHER})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} ${args} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the aarch64 cross build in ${OUT} failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${OUT} -j2 --target kiln_rt kiln_rt_run RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building libkiln_rt and kiln-rt-run for aarch64 in ${OUT} failed (${rc})")
endif()
