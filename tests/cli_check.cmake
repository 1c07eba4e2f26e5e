# Runs one command and checks its exit status and what it printed.
#
#   cmake [-DEXPECT_RC=N] [-D<CHECK>_<n>=TEXT ...] [-DCLEAN=PATH] [-DEXPECT_FILE=PATH]
#         -P cli_check.cmake -- COMMAND [ARGS...]
#
# EXPECT_RC    exit status the command must return (default 0).
# <CHECK>_<n>  n = 1..9; CHECK is one of
#                STDOUT_HAS / STDERR_HAS       TEXT occurs in stdout / stderr (plain text)
#                STDOUT_LACKS / STDERR_LACKS   TEXT does not occur
#                STDOUT_MATCHES / STDERR_MATCHES  TEXT is a CMake regex that must match
# STDERR_EMPTY when set, stderr must be empty.
# CLEAN        file or folder removed before the command runs.
# EXPECT_FILE  a file the command must have created.
#
# A crash (signal) or sanitizer report always fails. On failure the command,
# its status and both streams are printed. Used by tests/cli_tests.cmake.

set(cmd)
set(after FALSE)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE 0 ${last})
  if(after)
    list(APPEND cmd "${CMAKE_ARGV${i}}")
  elseif("${CMAKE_ARGV${i}}" STREQUAL "--")
    set(after TRUE)
  endif()
endforeach()
if(NOT cmd)
  message(FATAL_ERROR "cli_check.cmake: no command after '--'")
endif()
if(NOT DEFINED EXPECT_RC)
  set(EXPECT_RC 0)
endif()

if(DEFINED CLEAN AND NOT CLEAN STREQUAL "")
  file(REMOVE_RECURSE "${CLEAN}")
endif()

execute_process(COMMAND ${cmd}
                RESULT_VARIABLE rc
                OUTPUT_VARIABLE out
                ERROR_VARIABLE err)

set(problems "")
macro(problem text)
  string(APPEND problems "  - ${text}\n")
endmacro()

if(NOT rc MATCHES "^-?[0-9]+$")
  problem("the command did not exit normally: ${rc}")
elseif(NOT rc EQUAL EXPECT_RC)
  problem("exit status ${rc}, expected ${EXPECT_RC}")
endif()
if(err MATCHES "AddressSanitizer|LeakSanitizer|runtime error:|internal invariant broken")
  problem("stderr has a sanitizer report or a failed internal check")
endif()
if(STDERR_EMPTY AND NOT err STREQUAL "")
  problem("stderr is not empty")
endif()

foreach(n RANGE 1 9)
  foreach(stream STDOUT STDERR)
    if(stream STREQUAL "STDOUT")
      set(text "${out}")
    else()
      set(text "${err}")
    endif()
    string(TOLOWER "${stream}" sname)
    if(DEFINED ${stream}_HAS_${n})
      string(FIND "${text}" "${${stream}_HAS_${n}}" pos)
      if(pos EQUAL -1)
        problem("${sname} lacks \"${${stream}_HAS_${n}}\"")
      endif()
    endif()
    if(DEFINED ${stream}_LACKS_${n})
      string(FIND "${text}" "${${stream}_LACKS_${n}}" pos)
      if(NOT pos EQUAL -1)
        problem("${sname} has \"${${stream}_LACKS_${n}}\"")
      endif()
    endif()
    if(DEFINED ${stream}_MATCHES_${n})
      if(NOT text MATCHES "${${stream}_MATCHES_${n}}")
        problem("${sname} does not match the regex \"${${stream}_MATCHES_${n}}\"")
      endif()
    endif()
  endforeach()
endforeach()

if(DEFINED EXPECT_FILE AND NOT EXISTS "${EXPECT_FILE}")
  problem("the command did not create ${EXPECT_FILE}")
endif()

if(NOT problems STREQUAL "")
  list(JOIN cmd " " shown)
  message(FATAL_ERROR "command: ${shown}\n${problems}"
                      "---- exit status: ${rc}\n---- stdout:\n${out}\n---- stderr:\n${err}")
endif()
message(STATUS "ok (exit status ${rc})")
