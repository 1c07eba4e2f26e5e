# The device build's progress line of `kiln run` / `kiln compile` (issue 23,
# runtime/progress.h), included from tests/cli_tests.cmake. Each test gets a
# cache folder of its own, emptied first (CLEAN), so the CPU device compiles
# tinycnn's C and reports it: on a terminal (a pseudo-terminal from
# util-linux `script`) the line is rewritten in place; on a pipe nothing
# unless --progress; --quiet silences both.

function(kiln_progress_cache test dir)
  set_tests_properties(cli_${test} PROPERTIES ENVIRONMENT "KILN_CACHE_DIR=${dir}")
endfunction()

set(_pl "building for cpu \\([^)]+\\): [a-zA-Z ]+, [0-9]+/[0-9]+ steps, [0-9.]+ s, ETA")
kiln_cli_test(run_progress_pipe CLEAN ${W}/progress-pipe
              CHECK "STDOUT_HAS=ran " "STDERR_LACKS=building for"
              ARGS run ${M} --target cpu)
kiln_progress_cache(run_progress_pipe ${W}/progress-pipe)
kiln_cli_test(run_progress_forced CLEAN ${W}/progress-forced
              CHECK "STDOUT_HAS=ran " "STDERR_MATCHES=${_pl} -\n" "STDERR_MATCHES=([0-9]+)/[0-9]+ steps, [0-9.]+ s, ETA 0.0 s\n"
                    "STDERR_LACKS=\r"
              ARGS run ${M} --target cpu --progress)
kiln_progress_cache(run_progress_forced ${W}/progress-forced)
kiln_cli_test(run_progress_quiet CLEAN ${W}/progress-quiet
              CHECK "STDOUT_HAS=ran " "STDERR_LACKS=building for"
              ARGS run ${M} --target cpu --progress --quiet)
kiln_progress_cache(run_progress_quiet ${W}/progress-quiet)
kiln_cli_test(compile_progress_forced CLEAN ${W}/progress-compile
              CHECK "STDOUT_HAS=compile time" "STDERR_MATCHES=${_pl}"
              ARGS compile ${M} -t cpu --progress)
kiln_progress_cache(compile_progress_forced ${W}/progress-compile)

find_program(KILN_SCRIPT_EXE script)
if(KILN_SCRIPT_EXE)
  # script -q (no banner) -e (its status is the command's) -c CMD; the
  # terminal's output (stdout and stderr together) arrives on script's stdout
  foreach(mode tty tty_quiet)
    set(_extra "")
    set(_checks "-DSTDOUT_HAS_1=ran " "-DSTDOUT_MATCHES_1=\r${_pl}")
    if(mode STREQUAL "tty_quiet")
      set(_extra " --quiet")
      set(_checks "-DSTDOUT_HAS_1=ran " "-DSTDOUT_LACKS_1=building for")
    endif()
    add_test(NAME cli_run_progress_${mode}
             COMMAND ${CMAKE_COMMAND} -DEXPECT_RC=0 ${_checks} -DCLEAN=${W}/progress-${mode} -P ${KILN_CLI_CHECK}
                     -- ${KILN_SCRIPT_EXE} -qec "$<TARGET_FILE:kiln_cli> run ${M} --target cpu${_extra}" /dev/null
             WORKING_DIRECTORY ${W})
    set_tests_properties(cli_run_progress_${mode} PROPERTIES LABELS unit TIMEOUT 120
                         ENVIRONMENT "KILN_CACHE_DIR=${W}/progress-${mode}")
  endforeach()
endif()

# On a device backed by the host's CPU (PoCL, lavapipe) the driver compiles
# each kernel at its first launch: with the line on, `kiln run` launches
# every kernel once before the first run and counts them; the run then
# matches the reference interpreter as without it.
foreach(t opencl vulkan)
  if(t IN_LIST KILN_TARGETS_BUILT)
    kiln_cli_test(run_progress_first_launches_${t} CLEAN ${W}/progress-first-${t}
                  CHECK "STDERR_MATCHES=first launches, 0/[0-9]+ steps"
                        "STDERR_MATCHES=kernels compiled, ([0-9]+)/[0-9]+ steps, [0-9.]+ s, ETA 0.0 s\n"
                        "STDOUT_HAS=vs reference interpreter: match"
                  ARGS run ${M} --target ${t} --strict --progress --check-ref)
    kiln_progress_cache(run_progress_first_launches_${t} ${W}/progress-first-${t})
    set_property(TEST cli_run_progress_first_launches_${t} APPEND PROPERTY LABELS target=${t})
    if(KILN_SANITIZE AND t STREQUAL "vulkan") # lavapipe's leak (test_dyn_seq_gpu)
      set_property(TEST cli_run_progress_first_launches_${t} APPEND PROPERTY ENVIRONMENT "LSAN_OPTIONS=detect_leaks=0")
    endif()
  endif()
endforeach()
