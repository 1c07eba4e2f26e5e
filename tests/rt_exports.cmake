# libkiln_rt exports exactly its public API: every dynamic symbol the shared
# library defines must be a kiln_ function declared KILN_API in
# include/kiln/*.h, and every KILN_API function must be exported (a
# declaration the library does not define is as wrong as an internal symbol
# that leaks).
#   cmake -DNM=nm -DLIB=libkiln_rt.so -DINCLUDE_DIR=include/kiln -P rt_exports.cmake
# With -DMACRO=KILN_COMPILER_API the same check holds libkiln.so (the
# compiler) to the declarations carrying that macro (kiln/compiler.h).
cmake_minimum_required(VERSION 3.25)
if(NOT MACRO)
  set(MACRO KILN_API)
endif()
execute_process(COMMAND ${NM} -D --defined-only ${LIB}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} -D --defined-only ${LIB} failed (${rc}): ${err}")
endif()
string(REPLACE "\n" ";" lines "${out}")
set(exported)
foreach(line IN LISTS lines)
  # "<address> <type> <name>"; A entries are version nodes, not symbols.
  # Lowercase t/d/b/r are local symbols some linkers leave in the
  # dynamic table (from static C++ archives); only global ones are exports.
  if(line MATCHES "^[0-9a-fA-F]+ ([A-Zuvw]) ([^ @]+)")
    if(NOT CMAKE_MATCH_1 STREQUAL "A")
      list(APPEND exported ${CMAKE_MATCH_2})
    endif()
  endif()
endforeach()

file(GLOB headers ${INCLUDE_DIR}/*.h)
set(declared)
foreach(h IN LISTS headers)
  file(READ ${h} text)
  string(REGEX MATCHALL "${MACRO}[^;(]*[ *](kiln_[a-z0-9_]+)\\(" decls "${text}")
  foreach(d IN LISTS decls)
    string(REGEX REPLACE ".*[ *](kiln_[a-z0-9_]+)\\($" "\\1" name "${d}")
    list(APPEND declared ${name})
  endforeach()
endforeach()
list(LENGTH declared n_declared)
if(n_declared LESS 10)
  message(FATAL_ERROR "found only ${n_declared} ${MACRO} declarations in ${INCLUDE_DIR}: the pattern is broken")
endif()

set(bad)
foreach(s IN LISTS exported)
  if(NOT s MATCHES "^kiln_")
    list(APPEND bad "${s} (no kiln_ prefix)")
  elseif(NOT s IN_LIST declared)
    list(APPEND bad "${s} (not declared ${MACRO} in include/kiln/)")
  endif()
endforeach()
foreach(s IN LISTS declared)
  if(NOT s IN_LIST exported)
    list(APPEND bad "${s} (declared ${MACRO}, not exported)")
  endif()
endforeach()
list(LENGTH exported n_exported)
if(bad)
  string(REPLACE ";" "\n  " bad "${bad}")
  message(FATAL_ERROR "${LIB}: ${n_exported} exported symbols, wrong ones:\n  ${bad}")
endif()
message(STATUS "${LIB}: ${n_exported} exported symbols, all declared ${MACRO} in ${INCLUDE_DIR}")
