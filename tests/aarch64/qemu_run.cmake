# One model on aarch64 under qemu against x86-64 (tests/aarch64/aarch64.cmake):
#   1. kiln compile MODEL -o WORK/NAME.kiln --cpu-target host,aarch64
#   2. the aarch64 kiln-rt-run runs it under qemu-aarch64 with PATH empty
#      (no compiler: the module's aarch64 machine code or nothing)
#   3. kiln run runs the same module here (x86-64 machine code) and compares
#      its output with the aarch64 one (--compare), and with REF when given
# Usage: cmake -DKILN=... -DRT_RUN=<aarch64 kiln-rt-run> -DQEMU=... -DMODEL=...
#        -DNAME=... -DWORK=... -DOUTPUT=<output name> [-DINPUT=NAME=FILE.npy]
#        [-DREF=FILE.npy] [-DRTOL=1e-3] [-DATOL=1e-4]
#        [-DPYTHON=python -DGEN_INPUT=NAME:D0,D1,...] -P qemu_run.cmake
# GEN_INPUT writes a float32 input of that shape (sin(0.37 i), with numpy)
# for a model without exported inputs: both runs must see the same data.
if(NOT RTOL)
  set(RTOL 1e-3)
endif()
if(NOT ATOL)
  set(ATOL 1e-4)
endif()
file(REMOVE_RECURSE ${WORK}/${NAME})
file(MAKE_DIRECTORY ${WORK}/${NAME})
set(module ${WORK}/${NAME}/${NAME}.kiln)
set(in_args)
if(GEN_INPUT)
  string(REGEX MATCH "^([^:]+):([0-9,]+)$" ok "${GEN_INPUT}")
  if(NOT ok)
    message(FATAL_ERROR "GEN_INPUT '${GEN_INPUT}': expected NAME:D0,D1,...")
  endif()
  set(gen ${WORK}/${NAME}/input.npy)
  execute_process(COMMAND ${PYTHON} -c "import numpy as np; s=(${CMAKE_MATCH_2},); np.save('${gen}', np.sin(0.37*np.arange(np.prod(s))).reshape(s).astype(np.float32))"
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "writing ${gen} with ${PYTHON} failed (${rc})")
  endif()
  set(INPUT ${CMAKE_MATCH_1}=${gen})
endif()
if(INPUT)
  set(in_args --input ${INPUT})
endif()

function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "${what}:\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc})")
  endif()
  set(step_out "${out}" PARENT_SCOPE)
endfunction()

step("compile for x86-64 and aarch64" ${KILN} compile ${MODEL} -o ${module} --cpu-target host,aarch64)
# env -i: no PATH, no compiler, and no QEMU_LD_PREFIX (qemu 7.2 with the cross
# libc under /usr/aarch64-linux-gnu hangs in pthread_create; the arm64
# multiarch loader and libraries work)
string(TIMESTAMP t0 "%s")
step("run on aarch64 under qemu, PATH empty" env -i PATH= ${QEMU} ${RT_RUN} ${module} ${in_args}
     --output ${WORK}/${NAME}/aarch64)
string(TIMESTAMP t1 "%s")
math(EXPR dt "${t1} - ${t0}")
message(STATUS "qemu run: ${dt} s")
step("run on x86-64, compare with aarch64" ${KILN} run ${module} ${in_args}
     --compare ${OUTPUT}=${WORK}/${NAME}/aarch64/${OUTPUT}.npy --rtol ${RTOL} --atol ${ATOL})
if(NOT step_out MATCHES "kernels from the module's x86-64-v[34] machine code")
  message(FATAL_ERROR "the x86-64 run did not use the module's machine code")
endif()
if(REF)
  step("run on x86-64, compare with the reference" ${KILN} run ${module} ${in_args}
       --compare ${OUTPUT}=${REF} --rtol ${RTOL} --atol ${ATOL})
endif()
