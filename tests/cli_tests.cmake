# Behaviour tests of the `kiln` command line (label "unit"), included from
# tests/CMakeLists.txt. Each test runs tests/cli_check.cmake, which runs the
# CLI once and checks its exit status and output:
#
#   kiln_cli_test(NAME [RC n] [CLEAN path] [FILE path] [FIXTURE f] [REQUIRES f...]
#                 [EXE target] [CHECK "STDOUT_HAS=text" "STDERR_MATCHES=regex" ...]
#                 ARGS args...)
#
# EXE is the executable target to run (default kiln_cli; kiln_rt_run for the
# runtime-only runner).
# CHECK keys are those of cli_check.cmake (STDOUT_HAS, STDERR_HAS, *_LACKS,
# *_MATCHES, STDERR_EMPTY); a key may repeat. Tests that need files another
# test writes (an --output folder, an input .npy) use ctest fixtures.

set(KILN_CLI_CHECK ${CMAKE_CURRENT_LIST_DIR}/cli_check.cmake)
set(KILN_CLI_MODEL ${CMAKE_SOURCE_DIR}/examples/tinycnn.onnx)
set(KILN_CLI_WORK ${CMAKE_CURRENT_BINARY_DIR}/cli)
file(MAKE_DIRECTORY ${KILN_CLI_WORK})

function(kiln_cli_test name)
  cmake_parse_arguments(PARSE_ARGV 1 T "" "RC;CLEAN;FILE;FIXTURE;EXE" "CHECK;REQUIRES;ARGS")
  if(NOT DEFINED T_EXE)
    set(T_EXE kiln_cli)
  endif()
  if(NOT DEFINED T_RC)
    set(T_RC 0)
  endif()
  set(defs -DEXPECT_RC=${T_RC})
  foreach(c IN LISTS T_CHECK)
    string(FIND "${c}" "=" eq)
    if(eq EQUAL -1)
      message(FATAL_ERROR "kiln_cli_test(${name}): CHECK '${c}' lacks '='")
    endif()
    string(SUBSTRING "${c}" 0 ${eq} key)
    math(EXPR vstart "${eq} + 1")
    string(SUBSTRING "${c}" ${vstart} -1 val)
    if(key STREQUAL "STDERR_EMPTY")
      list(APPEND defs "-DSTDERR_EMPTY=${val}")
      continue()
    endif()
    if(NOT DEFINED n_${key})
      set(n_${key} 0)
    endif()
    math(EXPR n_${key} "${n_${key}} + 1")
    list(APPEND defs "-D${key}_${n_${key}}=${val}")
  endforeach()
  if(DEFINED T_CLEAN)
    list(APPEND defs "-DCLEAN=${T_CLEAN}")
  endif()
  if(DEFINED T_FILE)
    list(APPEND defs "-DEXPECT_FILE=${T_FILE}")
  endif()
  add_test(NAME cli_${name}
           COMMAND ${CMAKE_COMMAND} ${defs} -P ${KILN_CLI_CHECK} -- $<TARGET_FILE:${T_EXE}> ${T_ARGS}
           WORKING_DIRECTORY ${KILN_CLI_WORK})
  set_tests_properties(cli_${name} PROPERTIES LABELS unit TIMEOUT 120
                       ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
  if(DEFINED T_FIXTURE)
    set_tests_properties(cli_${name} PROPERTIES FIXTURES_SETUP ${T_FIXTURE})
  endif()
  if(DEFINED T_REQUIRES)
    set_tests_properties(cli_${name} PROPERTIES FIXTURES_REQUIRED "${T_REQUIRES}")
  endif()
endfunction()

set(M ${KILN_CLI_MODEL})
set(W ${KILN_CLI_WORK})

# ---- help and usage ---------------------------------------------------------
kiln_cli_test(help
  CHECK "STDOUT_HAS=usage: kiln COMMAND" "STDOUT_HAS=  info " "STDOUT_HAS=  run "
        "STDOUT_HAS=  dot " "STDOUT_HAS=  dump " "STDOUT_HAS=  ops " "STDERR_EMPTY=1"
  ARGS --help)
kiln_cli_test(help_short CHECK "STDOUT_HAS=usage: kiln COMMAND" ARGS -h)
kiln_cli_test(no_arguments RC 2 CHECK "STDERR_HAS=usage: kiln COMMAND")
kiln_cli_test(unknown_command RC 2 CHECK "STDERR_HAS=unknown command 'frobnicate'" ARGS frobnicate)
foreach(sub info run dot dump ops)
  kiln_cli_test(${sub}_help CHECK "STDOUT_HAS=usage: kiln ${sub}" "STDERR_EMPTY=1"
                ARGS ${sub} --help)
endforeach()
kiln_cli_test(run_help_options
  CHECK "STDOUT_HAS=--input NAME=FILE.npy" "STDOUT_HAS=--output DIR" "STDOUT_HAS=--compare"
        "STDOUT_HAS=--seed" "STDOUT_HAS=--rtol"
  ARGS run -h)

# Usage errors exit 2 and point at --help, for every subcommand.
kiln_cli_test(run_unknown_option RC 2
  CHECK "STDERR_HAS=--bogus" "STDERR_HAS=kiln run --help" "STDOUT_LACKS=ran "
  ARGS run ${M} --bogus)
foreach(sub info dot dump ops)
  kiln_cli_test(${sub}_unknown_option RC 2 CHECK "STDERR_HAS=--bogus" "STDERR_HAS=--help"
                ARGS ${sub} --bogus)
endforeach()
kiln_cli_test(run_no_model RC 2 CHECK "STDERR_HAS=no model given" ARGS run)
kiln_cli_test(run_option_missing_value RC 2 CHECK "STDERR_HAS=--seed" ARGS run ${M} --seed)
kiln_cli_test(run_two_models RC 2 CHECK "STDERR_HAS=unexpected argument" ARGS run ${M} ${M})
# A value that is not a number is a usage error, not silently 0.
kiln_cli_test(run_bad_number RC 2 CHECK "STDERR_HAS=--rtol" ARGS run ${M} --rtol abc)

# ---- kiln info ------------------------------------------------------------------
kiln_cli_test(info
  CHECK "STDOUT_HAS=graph 'tinycnn'" "STDOUT_HAS=ai.onnx opset 13" "STDOUT_HAS=inputs:"
        "STDOUT_HAS=image" "STDOUT_HAS=outputs:" "STDOUT_HAS=probs" "STDOUT_HAS=ops:"
        "STDOUT_MATCHES=\n  Conv +2\n" "STDOUT_MATCHES=\n  Relu +2\n"
        "STDOUT_MATCHES=\n  MaxPool +2\n" "STDOUT_MATCHES=\n  Gemm +1\n"
        "STDOUT_MATCHES=\ntotal: [^\n]* parameters [^\n]*[1-9][0-9.]*[KMG]? FLOPs"
        "STDOUT_HAS=(9098," "STDOUT_HAS=bound to 1" "STDERR_EMPTY=1"
  ARGS info ${M})
kiln_cli_test(info_dim
  CHECK "STDOUT_HAS=[4,1,28,28]" "STDOUT_HAS=[4,10]" "STDOUT_LACKS=bound to 1"
        "STDOUT_MATCHES=\ntotal: [^\n]* FLOPs"
  ARGS info ${M} --dim N=4)
kiln_cli_test(info_symbolic
  CHECK "STDOUT_HAS=[N,1,28,28]" "STDOUT_HAS=+? FLOPs"
  ARGS info ${M} --symbolic)
kiln_cli_test(info_dim_unknown_symbol RC 1
  CHECK "STDERR_HAS=kiln: error:" "STDERR_HAS=no dimension named 'Q'"
  ARGS info ${M} --dim Q=3)
kiln_cli_test(info_missing_model RC 1
  CHECK "STDERR_HAS=${W}/no-such-model.onnx"
  ARGS info ${W}/no-such-model.onnx)

kiln_cli_test(info_fused
  CHECK "STDOUT_HAS=fusion (graph passes" "STDOUT_MATCHES=kernels: [0-9]+ before fusion, [0-9]+ after"
        "STDOUT_HAS=intermediate traffic" "STDOUT_MATCHES=Conv \\+ Relu" "STDERR_EMPTY=1"
  ARGS info ${M} --fused)

# ---- kiln compile -----------------------------------------------------------------
kiln_cli_test(compile_dump_graph
  CHECK "STDOUT_HAS=pass fold-constants" "STDOUT_HAS=graph passes (-O1)"
        "STDOUT_HAS=graph.before.dot" "STDOUT_HAS=graph.after.txt" "STDOUT_MATCHES=compiled [0-9]+ kernels"
        "STDERR_EMPTY=1"
  ARGS compile ${M} --dump-graph ${W}/graphdump)
kiln_cli_test(compile_O0
  CHECK "STDOUT_HAS=graph passes (-O0)" "STDOUT_LACKS=fused "
  ARGS compile ${M} -O0)
kiln_cli_test(compile_help
  CHECK "STDOUT_HAS=usage: kiln compile" "STDOUT_HAS=--dump-graph"
  ARGS compile --help)
kiln_cli_test(compile_fp16_arith_bad_value RC 2
  CHECK "STDERR_HAS=--fp16-arith 'maybe': expected yes or no"
  ARGS compile ${M} --precision fp16 --fp16-arith maybe)
kiln_cli_test(compile_loop_limit_bad_value RC 2
  CHECK "STDERR_HAS=--loop-limit '-3': expected a non-negative integer"
  ARGS compile ${M} -t vulkan --loop-limit -3)
kiln_cli_test(compile_fp16_arith_needs_fp16 RC 2
  CHECK "STDERR_HAS=--fp16-arith needs --precision fp16 or auto"
  ARGS compile ${M} --fp16-arith yes)
# the CPU computes an fp16-arith plan as floats on the half grid: it runs
kiln_cli_test(compile_fp16_arith_cpu
  CHECK "STDOUT_MATCHES=precision: .* fp16" "STDOUT_MATCHES=compiled [0-9]+ kernels"
  ARGS compile ${M} --precision fp16 --fp16-arith yes)
kiln_cli_test(compile_missing_model RC 1
  CHECK "STDERR_HAS=${W}/no-such-model.onnx"
  ARGS compile ${W}/no-such-model.onnx)
# --dump makes its folder (and those above it), as --dump-graph does; a
# path it cannot make is an error naming it, not a compile that writes nothing
kiln_cli_test(compile_dump_new_folder CLEAN ${W}/dumpnew
  CHECK "STDOUT_HAS=wrote ${W}/dumpnew/sub/plan.txt" "STDOUT_HAS=wrote ${W}/dumpnew/sub/kernels.c"
  ARGS compile ${M} --dump ${W}/dumpnew/sub)
kiln_cli_test(compile_dump_not_a_folder RC 1
  CHECK "STDERR_HAS=--dump '${M}/x'" "STDERR_HAS=is not a folder"
  ARGS compile ${M} --dump ${M}/x)

# ---- kiln run ---------------------------------------------------------------------
kiln_cli_test(run_O0_ref_check
  CHECK "STDOUT_HAS=check probs vs reference interpreter: match" "STDOUT_LACKS=fused "
  ARGS run ${M} -O0 --check-ref)
kiln_cli_test(run_O1_ref_check
  CHECK "STDOUT_HAS=check probs vs reference interpreter: match" "STDOUT_MATCHES=fused [0-9]+ kernels into"
  ARGS run ${M} --check-ref)
kiln_cli_test(run_random
  CHECK "STDOUT_HAS=ran ${M} on target cpu" "STDOUT_HAS=output probs: f32[1,10]"
        "STDOUT_HAS=argmax" "STDERR_EMPTY=1"
  ARGS run ${M})
kiln_cli_test(run_dim
  CHECK "STDOUT_HAS=output probs: f32[3,10]"
  ARGS run ${M} --dim N=3)
kiln_cli_test(run_repeat_profile
  CHECK "STDOUT_HAS=latency: median" "STDOUT_HAS=over 3 runs" "STDOUT_HAS=profile"
        "STDOUT_HAS=conv1"
  ARGS run ${M} --repeat 3 --profile)
kiln_cli_test(run_other_target RC 2
  CHECK "STDERR_HAS=--target 'nope'"
  ARGS run ${M} --target nope)
kiln_cli_test(run_missing_model RC 1
  CHECK "STDERR_HAS=kiln: error:" "STDERR_HAS=${W}/no-such-dir/missing.onnx" "STDOUT_LACKS=ran "
  ARGS run ${W}/no-such-dir/missing.onnx)

# --output writes one .npy per output; two seeds give two different files.
kiln_cli_test(run_output_seed0 FIXTURE cli_out_seed0
  CLEAN ${W}/seed0 FILE ${W}/seed0/probs.npy
  CHECK "STDOUT_HAS=wrote ${W}/seed0/probs.npy"
  ARGS run ${M} --output ${W}/seed0)
kiln_cli_test(run_output_seed1 FIXTURE cli_out_seed1
  CLEAN ${W}/seed1 FILE ${W}/seed1/probs.npy
  CHECK "STDOUT_HAS=wrote ${W}/seed1/probs.npy"
  ARGS run ${M} --seed 1 --output ${W}/seed1)

# --compare against the run's own output matches (exit 0)...
kiln_cli_test(run_compare_same REQUIRES cli_out_seed0
  CHECK "STDOUT_HAS=compare probs vs ${W}/seed0/probs.npy: match" "STDOUT_HAS=0 of 10"
  ARGS run ${M} --compare ${W}/seed0/probs.npy)
kiln_cli_test(run_compare_same_named REQUIRES cli_out_seed0
  CHECK "STDOUT_HAS=: match"
  ARGS run ${M} --compare probs=${W}/seed0/probs.npy)
# ... against another seed's output it does not (exit 3, worst index named) ...
kiln_cli_test(run_compare_different RC 3 REQUIRES cli_out_seed1
  CHECK "STDOUT_HAS=MISMATCH" "STDOUT_HAS=of 10 elements outside rtol"
        "STDOUT_MATCHES=worst at index [0-9]+ \\[0,[0-9]+\\]: got [-0-9.e]+, expected [-0-9.e]+"
        "STDOUT_HAS=max abs err"
  ARGS run ${M} --compare ${W}/seed1/probs.npy)
# ... unless the tolerance is loose enough.
kiln_cli_test(run_compare_loose REQUIRES cli_out_seed1
  CHECK "STDOUT_HAS=: match"
  ARGS run ${M} --compare ${W}/seed1/probs.npy --atol 1 --rtol 0)
kiln_cli_test(run_compare_missing_file RC 1
  CHECK "STDERR_HAS=${W}/no-such-expected.npy"
  ARGS run ${M} --compare ${W}/no-such-expected.npy)
kiln_cli_test(run_compare_unknown_output RC 1 REQUIRES cli_out_seed0
  CHECK "STDERR_HAS=no output named 'logits'"
  ARGS run ${M} --compare logits=${W}/seed0/probs.npy)

# --input: a .npy of the wrong shape names the input and both shapes.
kiln_cli_test(run_input_wrong_shape RC 1 REQUIRES cli_out_seed0
  CHECK "STDERR_HAS=input 'image'" "STDERR_HAS=[N,1,28,28]" "STDERR_HAS=[1,10]"
        "STDOUT_LACKS=output probs"
  ARGS run ${M} --input image=${W}/seed0/probs.npy)
kiln_cli_test(run_input_unknown_name RC 1 REQUIRES cli_out_seed0
  CHECK "STDERR_HAS=no input named 'pixels'"
  ARGS run ${M} --input pixels=${W}/seed0/probs.npy)
kiln_cli_test(run_input_missing_file RC 1
  CHECK "STDERR_HAS=${W}/no-such-input.npy"
  ARGS run ${M} --input image=${W}/no-such-input.npy)
kiln_cli_test(run_input_no_equals RC 1
  CHECK "STDERR_HAS=NAME=FILE.npy"
  ARGS run ${M} --input image)

# --input with a real image: zero-filled f32 .npy files of shape [B,1,28,28]
# (written with printf: CMake cannot write NUL bytes). The batch of 2 binds
# the symbolic N.
find_program(KILN_SH sh)
if(KILN_SH)
  foreach(batch 1 2)
    set(dict "{'descr': '<f4', 'fortran_order': False, 'shape': (${batch}, 1, 28, 28), }")
    string(LENGTH "${dict}" dlen)
    math(EXPR pad "(64 - (10 + ${dlen} + 1) % 64) % 64")
    math(EXPR hlen "${dlen} + ${pad} + 1")
    string(REPEAT " " ${pad} spaces)
    math(EXPR nbytes "${batch} * 28 * 28 * 4")
    math(EXPR o1 "${hlen} / 64")
    math(EXPR o2 "(${hlen} / 8) % 8")
    math(EXPR o3 "${hlen} % 8")
    set(npy ${W}/zeros${batch}.npy)
    set(script "printf '\\223NUMPY\\001\\000\\${o1}${o2}${o3}\\000' > '${npy}' && printf '%s\\n' \"${dict}${spaces}\" >> '${npy}' && head -c ${nbytes} /dev/zero >> '${npy}'")
    add_test(NAME cli_make_zeros${batch}_npy COMMAND ${KILN_SH} -c "${script}")
    set_tests_properties(cli_make_zeros${batch}_npy PROPERTIES LABELS unit
                         FIXTURES_SETUP cli_zeros${batch})
  endforeach()
  kiln_cli_test(run_input_npy REQUIRES cli_zeros1
    CHECK "STDOUT_HAS=output probs: f32[1,10]" "STDERR_EMPTY=1"
    ARGS run ${M} --input image=${W}/zeros1.npy)
  kiln_cli_test(run_input_npy_batch2 REQUIRES cli_zeros2
    CHECK "STDOUT_HAS=output probs: f32[2,10]"
    ARGS run ${M} --input image=${W}/zeros2.npy)
  # The same input twice gives the same output, whatever the seed.
  kiln_cli_test(run_input_npy_output FIXTURE cli_out_zeros REQUIRES cli_zeros1
    CLEAN ${W}/zeros_out FILE ${W}/zeros_out/probs.npy
    ARGS run ${M} --input image=${W}/zeros1.npy --output ${W}/zeros_out)
  kiln_cli_test(run_input_npy_compare REQUIRES cli_zeros1 cli_out_zeros
    CHECK "STDOUT_HAS=: match"
    ARGS run ${M} --seed 7 --input image=${W}/zeros1.npy --compare ${W}/zeros_out/probs.npy)
endif()

# ---- kiln dot / dump / ops --------------------------------------------------------
kiln_cli_test(dot
  CHECK "STDOUT_HAS=digraph" "STDOUT_HAS=Conv\\nconv1" "STDOUT_HAS=image"
        "STDOUT_MATCHES=n[0-9]+ -> n[0-9]+" "STDOUT_MATCHES=}\n$"
  ARGS dot ${M})
kiln_cli_test(dot_to_file
  CLEAN ${W}/graph.dot FILE ${W}/graph.dot
  ARGS dot ${M} -o ${W}/graph.dot)
kiln_cli_test(dot_unwritable RC 1
  CHECK "STDERR_HAS=${W}/no-such-dir/graph.dot"
  ARGS dot ${M} -o ${W}/no-such-dir/graph.dot)
kiln_cli_test(dump
  CHECK "STDOUT_HAS=graph tinycnn (opset 13, 9 nodes" "STDOUT_HAS=input  image: f32[N,1,28,28]"
        "STDOUT_HAS=const  conv1.w: f32[8,1,3,3]" "STDOUT_HAS=conv1 = Conv(image, conv1.w, conv1.b)"
        "STDOUT_HAS=kernel_shape=[3,3]" "STDOUT_HAS=output probs: f32[N,10]"
  ARGS dump ${M})
kiln_cli_test(dump_dim CHECK "STDOUT_HAS=output probs: f32[5,10]" ARGS dump ${M} --dim N=5)
kiln_cli_test(dump_missing_model RC 1 CHECK "STDERR_HAS=${W}/absent.onnx" ARGS dump ${W}/absent.onnx)
kiln_cli_test(ops
  CHECK "STDOUT_MATCHES=(^|\n)Conv\n" "STDOUT_MATCHES=(^|\n)Gemm\n" "STDOUT_MATCHES=(^|\n)Relu\n"
        "STDOUT_MATCHES=(^|\n)Reshape\n" "STDERR_EMPTY=1"
  ARGS ops)

# ---- modules, profiles, devices ------------------------------------------------------
kiln_cli_test(compile_module
  CLEAN ${W}/tiny.kiln FILE ${W}/tiny.kiln FIXTURE cli_module
  CHECK "STDOUT_MATCHES=wrote [^\n]*tiny.kiln \\([0-9.]+ KB\\)" "STDERR_EMPTY=1"
  ARGS compile ${M} -o ${W}/tiny.kiln)
kiln_cli_test(run_module REQUIRES cli_module
  CHECK "STDOUT_HAS=module ${W}/tiny.kiln: cpu target, fp32" "STDOUT_HAS=output probs: f32[1,10]"
        "STDOUT_MATCHES=arena [0-9.]+ [KMG]?B x 2 slots" "STDERR_EMPTY=1"
  ARGS run ${W}/tiny.kiln)
kiln_cli_test(run_module_check_ref REQUIRES cli_module RC 2
  CHECK "STDERR_HAS=has no graph for the reference interpreter"
  ARGS run ${W}/tiny.kiln --check-ref)
kiln_cli_test(run_module_wrong_target REQUIRES cli_module RC 1
  CHECK "STDERR_HAS=was compiled for target cpu" "STDERR_HAS=recompile with -t"
  ARGS run ${W}/tiny.kiln --target vulkan)
kiln_cli_test(run_module_corrupt RC 1
  CHECK "STDERR_HAS=${W}/corrupt.kiln" "STDERR_MATCHES=checksum|truncated|corrupt"
  ARGS run ${W}/corrupt.kiln)
set_tests_properties(cli_run_module_corrupt PROPERTIES FIXTURES_REQUIRED cli_corrupt_module)
# kiln-rt-run (tools/rt): an --input naming no input of the module is an
# error listing the module's inputs (it used to run on zeros with exit 0);
# I/O byte sizes are checked against a cap, naming the input.
kiln_cli_test(rt_run_module REQUIRES cli_module EXE kiln_rt_run
  CHECK "STDOUT_HAS=1 runs in" "STDOUT_HAS=wrote ${W}/rt_out/probs.npy"
  CLEAN ${W}/rt_out FILE ${W}/rt_out/probs.npy
  ARGS ${W}/tiny.kiln --output ${W}/rt_out)
# AOT CPU modules (issue 26): `kiln compile -t cpu -o` puts this machine's
# machine code in the module, so kiln-rt-run runs it with no compiler
# reachable (PATH empty, KILN_CC pointing nowhere); kiln info lists it.
kiln_cli_test(rt_run_no_compiler REQUIRES cli_module EXE kiln_rt_run
  CHECK "STDOUT_HAS=1 runs in" "STDOUT_MATCHES=load \\+ first run [0-9.]+ ms" "STDERR_EMPTY=1"
  ARGS ${W}/tiny.kiln)
set_tests_properties(cli_rt_run_no_compiler PROPERTIES
                     ENVIRONMENT "PATH=;KILN_CC=/nonexistent/kiln-cc;KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
kiln_cli_test(info_machine_code REQUIRES cli_module
  CHECK "STDOUT_MATCHES=machine code: [a-z0-9-]+ \\([0-9.]+ KB\\); the C source is the fallback"
  ARGS info ${W}/tiny.kiln)
kiln_cli_test(compile_cpu_target_unknown RC 1
  CHECK "STDERR_HAS=--cpu-target 'sparc': expected host, none or x86-64-v3, x86-64-v4, aarch64"
  ARGS compile ${M} -o ${W}/never-aot.kiln --cpu-target x86-64-v3,sparc)
kiln_cli_test(compile_cpu_target_needs_output RC 2
  CHECK "STDERR_HAS=--cpu-target needs -o FILE.kiln and a target with machine code (-t cpu)"
  ARGS compile ${M} --cpu-target host)
kiln_cli_test(rt_run_unknown_input REQUIRES cli_module EXE kiln_rt_run RC 1
  CHECK "STDERR_HAS=--input names 'imagee', which is not an input of the module; its inputs are: image (f32 [1,1,28,28])"
        "STDOUT_LACKS=runs in"
  ARGS ${W}/tiny.kiln --input imagee=${W}/nothing.npy)
kiln_cli_test(rt_run_input_twice REQUIRES cli_module EXE kiln_rt_run RC 1
  CHECK "STDERR_HAS=input 'image' is given twice" "STDOUT_LACKS=runs in"
  ARGS ${W}/tiny.kiln --input image=${W}/a.npy --input image=${W}/b.npy)
kiln_cli_test(rt_run_input_not_pair REQUIRES cli_module EXE kiln_rt_run RC 1
  CHECK "STDERR_HAS=--input 'image' is not NAME=FILE.npy"
  ARGS ${W}/tiny.kiln --input image)
kiln_cli_test(rt_run_io_cap REQUIRES cli_module EXE kiln_rt_run RC 1
  CHECK "STDERR_HAS=input 'image' (f32 [1,1,28,28]) needs 3136 bytes, above the 3000-byte I/O cap"
        "STDOUT_LACKS=runs in"
  ARGS ${W}/tiny.kiln --max-io-bytes 3000)
kiln_cli_test(rt_run_io_cap_env REQUIRES cli_module EXE kiln_rt_run RC 1
  CHECK "STDERR_HAS=input 'image' (f32 [1,1,28,28]) needs 3136 bytes, above the 3135-byte I/O cap"
  ARGS ${W}/tiny.kiln)
set_tests_properties(cli_rt_run_io_cap_env PROPERTIES
                     ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache;KILN_MAX_IO_BYTES=3135")
kiln_cli_test(rt_run_bad_cap RC 2
  EXE kiln_rt_run CHECK "STDERR_HAS=--max-io-bytes '-5' is not a positive whole number"
  ARGS ${W}/tiny.kiln --max-io-bytes -5)
add_test(NAME cli_make_corrupt_module
         COMMAND ${KILN_SH} -c "head -c 300 '${W}/tiny.kiln' > '${W}/corrupt.kiln'")
set_tests_properties(cli_make_corrupt_module PROPERTIES LABELS unit FIXTURES_REQUIRED cli_module
                     FIXTURES_SETUP cli_corrupt_module)
kiln_cli_test(run_profile_trace
  CLEAN ${W}/tiny-trace.json FILE ${W}/tiny-trace.json
  # --repeat 2 makes 3 runs; the first (warm-up) leaves the profile
  CHECK "STDOUT_MATCHES=profile \\(cpu, [^\n]*\\): [0-9]+ kernels, [0-9]+ barriers, 2 runs"
        "STDOUT_HAS=GFLOP/s" "STDOUT_HAS=GB/s" "STDOUT_HAS=Chrome trace" "STDOUT_HAS=k_conv1"
  ARGS run ${M} --profile --repeat 2 --trace ${W}/tiny-trace.json)
kiln_cli_test(devices
  CHECK "STDOUT_MATCHES=^cpu:\n  \\[0\\] " "STDOUT_HAS=opencl" "STDOUT_HAS=vulkan"
  ARGS devices)
kiln_cli_test(run_strict_missing_gpu RC 1
  CHECK "STDERR_HAS=device 'opencl:99'"
  ARGS run ${M} --target opencl:99 --strict)
kiln_cli_test(run_gpu_fallback
  CHECK "STDERR_HAS=falling back to the CPU" "STDOUT_HAS=output probs: f32[1,10]"
  ARGS run ${M} --target vulkan:99)
if(TEST cli_make_zeros1_npy)
  add_test(NAME cli_module_bitexact
           COMMAND ${CMAKE_COMMAND} -DKILN=$<TARGET_FILE:kiln_cli> -DKILN_RT_RUN=$<TARGET_FILE:kiln_rt_run>
                   -DMODEL=${M} -DWORK=${W}/bitexact "-DINPUTS=image=${W}/zeros1.npy" -DOUTPUTS=probs
                   -P ${CMAKE_CURRENT_LIST_DIR}/module_bitexact.cmake)
  set_tests_properties(cli_module_bitexact PROPERTIES LABELS unit FIXTURES_REQUIRED cli_zeros1 TIMEOUT 300
                       ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
endif()

# ---- --layout nchw|auto (lowering/layout.h) -----------------------------------
kiln_cli_test(run_layout_auto
  CHECK "STDOUT_MATCHES=layout: nchw[0-9]+c, [0-9]+ of [0-9]+ nodes blocked" "STDOUT_HAS=check probs vs reference interpreter: match"
  ARGS run ${M} --layout auto --check-ref)
kiln_cli_test(run_layout_nchw
  CHECK "STDOUT_LACKS=layout: nchw" "STDOUT_HAS=check probs vs reference interpreter: match"
  ARGS run ${M} --layout nchw --check-ref)
kiln_cli_test(run_layout_O0
  CHECK "STDOUT_LACKS=layout: nchw" "STDOUT_HAS=check probs vs reference interpreter: match"
  ARGS run ${M} -O0 --layout auto --check-ref)
kiln_cli_test(run_layout_bad RC 2
  CHECK "STDERR_HAS=--layout 'nhwc': expected nchw or auto"
  ARGS run ${M} --layout nhwc)
kiln_cli_test(compile_layout_bad RC 2
  CHECK "STDERR_HAS=--layout 'x': expected nchw or auto"
  ARGS compile ${M} --layout x)

# ---- --sparse auto|on|off (lowering/sparse_block.h) --------------------------
# tinycnn's dense conv forced onto the block-sparse kernel still matches.
kiln_cli_test(run_sparse_on
  CHECK "STDOUT_HAS=block-sparse kernel" "STDOUT_HAS=check probs vs reference interpreter: match"
  ARGS run ${M} --sparse on --check-ref)
kiln_cli_test(run_sparse_bad RC 2
  CHECK "STDERR_HAS=--sparse 'maybe': expected auto, on or off"
  ARGS run ${M} --sparse maybe)
kiln_cli_test(compile_sparse_bad RC 2
  CHECK "STDERR_HAS=--sparse 'x': expected auto, on or off"
  ARGS compile ${M} --sparse x)

# ---- --precision fp16 | auto (lowering/precision.h, compiler/calibrate.h) -----
kiln_cli_test(run_fp16
  CHECK "STDOUT_MATCHES=precision: 8 of 8 kernels fp16 \\(0 with fp16 arithmetic\\), [0-9]+ buffers f16"
        "STDOUT_HAS=check probs vs reference interpreter: match" "STDOUT_HAS=rtol 0.01 atol 0.001"
        "STDERR_HAS=has no fp16 arithmetic; using fp16 storage with fp32 arithmetic"
  ARGS run ${M} --precision fp16 --check-ref --layout nchw) # the NCHW plan's 8 kernels
kiln_cli_test(run_fp16_strict RC 1
  CHECK "STDERR_HAS=has no fp16 arithmetic (--strict" "STDOUT_LACKS=output probs"
  ARGS run ${M} --precision fp16 --strict)
kiln_cli_test(run_fp32_keeps_kernels
  CHECK "STDOUT_LACKS=precision:" "STDERR_EMPTY=1"
  ARGS run ${M} --precision fp32)
kiln_cli_test(run_precision_bad_word RC 2
  CHECK "STDERR_HAS=--precision 'fp8': expected fp32, fp16, auto or int8"
  ARGS run ${M} --precision fp8)
kiln_cli_test(run_tolerance_needs_auto RC 2
  CHECK "STDERR_HAS=need --precision auto"
  ARGS run ${M} --precision fp16 --tolerance 0.05)
kiln_cli_test(run_policy_needs_fp16 RC 2
  CHECK "STDERR_HAS=need --precision fp16 or auto"
  ARGS run ${M} --precision-policy ${W}/none.policy)
kiln_cli_test(run_precision_ref RC 2
  CHECK "STDERR_HAS=--precision fp16|auto applies to compiled targets"
  ARGS run ${M} --target ref --precision fp16)
kiln_cli_test(compile_auto FIXTURE cli_policy
  CLEAN ${W}/tiny.policy FILE ${W}/tiny-precision.txt
  CHECK "STDOUT_MATCHES=calibrated on 2 seeded random inputs in [0-9.]+ s: [0-9]+ of 6 fused groups fp16"
        "STDOUT_HAS=wrote ${W}/tiny.policy" "STDOUT_HAS=wrote ${W}/tiny16.kiln"
  ARGS compile ${M} --precision auto --calibrate-count 2 --write-policy ${W}/tiny.policy
       --precision-report ${W}/tiny-precision.txt -o ${W}/tiny16.kiln)
kiln_cli_test(run_policy_file REQUIRES cli_policy
  CHECK "STDOUT_HAS=check probs vs reference interpreter: match" "STDOUT_MATCHES=precision: [0-9]+ of 8 kernels fp16"
  ARGS run ${M} --precision fp16 --precision-policy ${W}/tiny.policy --check-ref --layout nchw) # as auto wrote it
kiln_cli_test(run_auto_module REQUIRES cli_policy
  CHECK "STDOUT_MATCHES=module [^\n]*tiny16.kiln: cpu target, auto," "STDOUT_HAS=output probs: f32[1,10]"
  ARGS run ${W}/tiny16.kiln)
kiln_cli_test(run_auto_check_ref
  CHECK "STDOUT_HAS=calibrated on 3 seeded random inputs" "STDOUT_HAS=check probs vs reference interpreter: match"
  ARGS run ${M} --precision auto --calibrate-count 3 --tolerance 0.02 --check-ref)
kiln_cli_test(run_calibrate_missing_dir RC 1
  CHECK "STDERR_HAS=${W}/no-such-cal: cannot open the calibration folder"
  ARGS run ${M} --precision auto --calibrate ${W}/no-such-cal)
if(KILN_SH)
  add_test(NAME cli_make_bad_policy
           COMMAND ${KILN_SH} -c "printf '# bad\\nop:Conv fp32\\nconv1 fp61\\n' > '${W}/bad.policy'")
  set_tests_properties(cli_make_bad_policy PROPERTIES LABELS unit FIXTURES_SETUP cli_bad_policy)
  kiln_cli_test(run_policy_bad_line RC 1 REQUIRES cli_bad_policy
    CHECK "STDERR_HAS=${W}/bad.policy:3: 'fp61': expected fp16, fp32 or int8"
    ARGS run ${M} --precision fp16 --precision-policy ${W}/bad.policy)
  add_test(NAME cli_make_cal_dir
           COMMAND ${KILN_SH} -c "mkdir -p '${W}/cal/a' '${W}/cal/b' && cp '${W}/zeros1.npy' '${W}/cal/a/image.npy' && cp '${W}/zeros1.npy' '${W}/cal/b/image.npy'")
  set_tests_properties(cli_make_cal_dir PROPERTIES LABELS unit FIXTURES_REQUIRED cli_zeros1
                       FIXTURES_SETUP cli_cal_dir)
  kiln_cli_test(run_calibrate_dir REQUIRES cli_cal_dir
    CHECK "STDOUT_HAS=calibrated on 2 given inputs" "STDOUT_HAS=output probs: f32[1,10]"
    ARGS run ${M} --precision auto --calibrate ${W}/cal)
  # --precision int8: kiln quantize's calibration in memory, then compiled
  # (the accuracy on real models: tests/models, quant_digits).
  kiln_cli_test(run_int8 REQUIRES cli_cal_dir
    CHECK "STDOUT_HAS=quantized 3 layers on 2 calibration samples" "STDOUT_MATCHES=conv1 +Conv"
          "STDOUT_HAS=model output probs" "STDOUT_HAS=check probs vs reference interpreter: match"
    ARGS run ${M} --precision int8 --calibrate ${W}/cal --check-ref)
  # auto tries int8 per layer with a calibration folder (half the tolerance)
  kiln_cli_test(run_auto_int8 REQUIRES cli_cal_dir
    CHECK "STDOUT_MATCHES=int8 under rtol 0.005 atol 0.001 \\(2 samples, [0-9]+ trials\\): [0-3] of 3 layers int8"
          "STDOUT_MATCHES=conv1 +(int8 \\(outputs at|stays float: int8 puts)" "STDOUT_HAS=calibrated on 2 given inputs"
          "STDOUT_HAS=check probs vs reference interpreter: match"
    ARGS run ${M} --precision auto --calibrate ${W}/cal --check-ref)
  add_test(NAME cli_make_int8_policy
           COMMAND ${KILN_SH} -c "printf 'node:conv1 int8\\nop:Gemm fp32\\n' > '${W}/int8.policy'")
  set_tests_properties(cli_make_int8_policy PROPERTIES LABELS unit FIXTURES_SETUP cli_int8_policy)
  kiln_cli_test(run_auto_int8_policy REQUIRES cli_cal_dir cli_int8_policy
    CHECK "STDOUT_MATCHES=conv1 +int8 \\(policy\\)" "STDOUT_MATCHES=fc +stays float \\(policy\\)"
          "STDOUT_HAS=check probs vs reference interpreter: match"
    ARGS run ${M} --precision auto --calibrate ${W}/cal --precision-policy ${W}/int8.policy --check-ref)
  kiln_cli_test(compile_int8 REQUIRES cli_cal_dir
    CHECK "STDOUT_HAS=quantized 3 layers" "STDOUT_HAS=wrote ${W}/tiny8.kiln"
    ARGS compile ${M} --precision int8 --calibrate ${W}/cal -o ${W}/tiny8.kiln)
endif()
kiln_cli_test(run_int8_needs_calibrate RC 2
  CHECK "STDERR_HAS=--precision int8 needs --calibrate DIR"
  ARGS run ${M} --precision int8)
kiln_cli_test(compile_int8_tolerance RC 2
  CHECK "STDERR_HAS=--tolerance need --precision auto"
  ARGS compile ${M} --precision int8 --calibrate ${W} --tolerance 0.1)
kiln_cli_test(compile_int8_policy RC 2
  CHECK "STDERR_HAS=need --precision fp16 or auto"
  ARGS compile ${M} --precision int8 --calibrate ${W} --precision-policy ${W}/none.policy)
kiln_cli_test(run_int8_missing_dir RC 1
  CHECK "STDERR_HAS=${W}/no-such-cal: cannot open the calibration folder"
  ARGS run ${M} --precision int8 --calibrate ${W}/no-such-cal)
kiln_cli_test(run_int8_empty_dir RC 1
  CHECK "STDERR_HAS=no calibration inputs"
  ARGS run ${M} --precision int8 --calibrate ${CMAKE_SOURCE_DIR}/docs)
# Weights halve, intermediates stay f32. The packed conv weights' size
# follows the CPU's vector width (AVX-512: 0.04 MB, AVX2: 0.06 MB).
kiln_cli_test(run_fp16_weights_only
  CHECK "STDOUT_MATCHES=weights (0\\.04 -> 0\\.02|0\\.06 -> 0\\.03) MB, intermediates 0\\.07 -> 0\\.07 MB"
        "STDOUT_HAS=check probs vs reference interpreter: match"
  ARGS run ${M} --precision fp16 --fp16-weights-only --check-ref --layout nchw) # the NCHW plan's buffers
include(${CMAKE_CURRENT_LIST_DIR}/cli_sign_tests.cmake)

# ---- kiln quantize (its runs on real models: tests/models, quant_digits) ------
kiln_cli_test(quantize_help
  CHECK "STDOUT_HAS=usage: kiln quantize" "STDOUT_HAS=--method M" "STDOUT_HAS=--per-tensor"
        "STDOUT_HAS=--activations u8|i8" "STDERR_EMPTY=1"
  ARGS quantize --help)
kiln_cli_test(quantize_in_main_help CHECK "STDOUT_HAS=  quantize MODEL.onnx" ARGS --help)
kiln_cli_test(quantize_unknown_option RC 2 CHECK "STDERR_HAS=--bogus" "STDERR_HAS=kiln quantize --help"
              ARGS quantize ${M} --bogus)
kiln_cli_test(quantize_no_calibrate RC 2 CHECK "STDERR_HAS=--calibrate DIR is required"
              ARGS quantize ${M} -o ${W}/q.onnx)
kiln_cli_test(quantize_no_output RC 2 CHECK "STDERR_HAS=-o FILE is required"
              ARGS quantize ${M} --calibrate ${W})
kiln_cli_test(quantize_bad_method RC 2 CHECK "STDERR_HAS=--method 'kl'"
              ARGS quantize ${M} --calibrate ${W} -o ${W}/q.onnx --method kl)
kiln_cli_test(quantize_bad_percentile RC 2 CHECK "STDERR_HAS=--percentile '101'"
              ARGS quantize ${M} --calibrate ${W} -o ${W}/q.onnx --method percentile --percentile 101)

# ---- kiln prune / kiln eval usage (their runs: tests/models, prune_digits) ----
kiln_cli_test(prune_help CHECK "STDOUT_HAS=usage: kiln prune" "STDOUT_HAS=--latency-ms L" "STDERR_EMPTY=1"
              ARGS prune --help)
kiln_cli_test(prune_in_main_help CHECK "STDOUT_HAS=  prune MODEL.onnx" "STDOUT_HAS=  eval MODEL.onnx" ARGS --help)
kiln_cli_test(prune_no_budget RC 2 CHECK "STDERR_HAS=give --ratio, --flops, --latency-ms or --tolerance"
              ARGS prune ${M} -o ${W}/p.onnx)
kiln_cli_test(prune_two_budgets RC 2 CHECK "STDERR_HAS=give one of --ratio, --flops"
              ARGS prune ${M} -o ${W}/p.onnx --ratio 0.5 --flops 0.5)
kiln_cli_test(prune_bad_method RC 2 CHECK "STDERR_HAS=--method 'l3'" ARGS prune ${M} -o ${W}/p.onnx --ratio 0.5 --method l3)
kiln_cli_test(prune_csv_needs_analyze RC 2 CHECK "STDERR_HAS=--csv needs --analyze"
              ARGS prune ${M} -o ${W}/p.onnx --ratio 0.5 --csv ${W}/a.csv)
kiln_cli_test(eval_help CHECK "STDOUT_HAS=usage: kiln eval" "STDOUT_HAS=prune:R" "STDERR_EMPTY=1" ARGS eval --help)
kiln_cli_test(eval_no_variants RC 2 CHECK "STDERR_HAS=--variants is required" ARGS eval ${M})
kiln_cli_test(quantize_percentile_needs_method RC 2 CHECK "STDERR_HAS=--percentile needs --method percentile"
              ARGS quantize ${M} --calibrate ${W} -o ${W}/q.onnx --percentile 99)
kiln_cli_test(quantize_missing_folder RC 1
  CHECK "STDERR_HAS=${W}/no_such_calibration: the calibration folder does not exist"
  ARGS quantize ${M} --calibrate ${W}/no_such_calibration -o ${W}/q.onnx)
include(${CMAKE_CURRENT_LIST_DIR}/cli_batcher_tests.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/cli_progress_tests.cmake)
