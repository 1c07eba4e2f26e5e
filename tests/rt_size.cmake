# libkiln_rt stripped stays within what a phone app ships beside its model
# (issue 26: <= 300 KB with every device built in):
#   cmake -DSTRIP=strip -DLIB=libkiln_rt.so -DOUT=dir -DMAX_KB=300 -P rt_size.cmake
file(MAKE_DIRECTORY ${OUT})
execute_process(COMMAND ${STRIP} -o ${OUT}/libkiln_rt.stripped.so ${LIB} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "strip ${LIB} failed (${rc})")
endif()
file(SIZE ${OUT}/libkiln_rt.stripped.so bytes)
math(EXPR kb "${bytes} / 1024")
message(STATUS "libkiln_rt stripped: ${kb} KB (${bytes} bytes), at most ${MAX_KB} KB")
if(kb GREATER MAX_KB)
  message(FATAL_ERROR "libkiln_rt stripped is ${kb} KB, over ${MAX_KB} KB")
endif()
