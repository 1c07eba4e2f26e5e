# Shape buckets through the command line (issue 25, label "models"): the
# transformer encoder block exported with dynamic_axes on batch AND sequence
# (tests/models/export_dyn_cnn.py, dyn_encseq.onnx), compiled ONCE with
# --dim batch=1..2 --dim seq=16,77,128 (the sequence dim sits inside MatMul,
# Softmax, Reshape and Transpose shapes: one static program per size, the
# batch dynamic in each), run at (1,16), (2,77), (1,128) against the
# reference interpreter at each shape; kiln-rt-run on the same module; the
# errors for a size outside the set and for a range on the inner dim.
# Included from tests/CMakeLists.txt after dyn_cli_tests.cmake (its fixture
# dyn_cnn exports the models).

if(NOT KILN_PYTHON OR NOT EXISTS "${KILN_PYTHON}")
  return()
endif()
set(D ${CMAKE_BINARY_DIR}/models/dyn)
kiln_cli_test(dyn_seq_compile FIXTURE dyn_seq_module REQUIRES dyn_cnn FILE ${D}/dyn_encseq.kiln
  CHECK "STDOUT_HAS=shape buckets: dim 'seq' at 3 sizes, one static program each, picked by input 'input' dim 1"
        "STDOUT_HAS=dynamic dim 'batch' = 1..2: compiled per sample"
  ARGS compile ${D}/dyn_encseq.onnx --dim batch=1..2 --dim seq=16,77,128 -o ${D}/dyn_encseq.kiln)
set(_seq_tests compile)
foreach(bs "1;16" "2;77" "1;128")
  list(GET bs 0 b)
  list(GET bs 1 q)
  set(t b${b}_s${q})
  kiln_cli_test(dyn_seq_ref_${t} FIXTURE dyn_seq_ref_${t} REQUIRES dyn_cnn FILE ${D}/encseq_ref_${t}/output.npy
    ARGS run ${D}/dyn_encseq.onnx --target ref --input input=${D}/dyn_encseq_in_${t}.npy --output ${D}/encseq_ref_${t}
         --compare output=${D}/dyn_encseq_ort_${t}.npy --rtol 1e-3 --atol 1e-4)
  kiln_cli_test(dyn_seq_run_${t} REQUIRES dyn_seq_module dyn_seq_ref_${t}
    CHECK "STDOUT_HAS=output output: f32[${b},${q},256]" "STDOUT_HAS=match: 0 of" "STDOUT_HAS=shape bucket 'seq' = ${q}"
    ARGS run ${D}/dyn_encseq.kiln --input input=${D}/dyn_encseq_in_${t}.npy
         --compare output=${D}/encseq_ref_${t}/output.npy --rtol 1e-3 --atol 1e-4)
  list(APPEND _seq_tests ref_${t} run_${t})
endforeach()
# kiln-rt-run at seq 77 from a file, its output checked against the reference's
kiln_cli_test(dyn_seq_rt_run_s77 EXE kiln_rt_run REQUIRES dyn_seq_module FIXTURE dyn_seq_rt_s77 CLEAN ${D}/rt_s77
  FILE ${D}/rt_s77/output.npy ARGS ${D}/dyn_encseq.kiln --input input=${D}/dyn_encseq_in_b2_s77.npy --output ${D}/rt_s77)
add_test(NAME cli_dyn_seq_rt_s77_matches
         COMMAND ${KILN_PYTHON} -c "import numpy as n,sys; a=n.load(sys.argv[1]); b=n.load(sys.argv[2]); sys.exit(0 if a.shape==b.shape==(2,77,256) and n.allclose(a,b,1e-3,1e-4) else 1)"
                 ${D}/rt_s77/output.npy ${D}/encseq_ref_b2_s77/output.npy)
set_tests_properties(cli_dyn_seq_rt_s77_matches PROPERTIES FIXTURES_REQUIRED "dyn_seq_rt_s77;dyn_seq_ref_b2_s77")
# --dim picks the bucket (and the batch) of the zero inputs
kiln_cli_test(dyn_seq_rt_run_dim EXE kiln_rt_run REQUIRES dyn_seq_module CLEAN ${D}/rt_s128 FILE ${D}/rt_s128/output.npy
  ARGS ${D}/dyn_encseq.kiln --dim seq=128 --dim batch=2 --output ${D}/rt_s128)
kiln_cli_test(dyn_seq_run_dim REQUIRES dyn_seq_module
  CHECK "STDOUT_HAS=output output: f32[2,77,256]" "STDOUT_HAS=shape bucket 'seq' = 77 (2 of 3)"
  ARGS run ${D}/dyn_encseq.kiln --dim seq=77 --dim batch=2)
kiln_cli_test(dyn_seq_info REQUIRES dyn_seq_module
  CHECK "STDOUT_HAS=shape buckets: seq=16 (" "STDOUT_HAS=, seq=77 (" "STDOUT_HAS=, seq=128 ("
        "STDOUT_HAS=dynamic dim 'batch': 1..2" "STDOUT_HAS=input input: f32[1,16,256]"
  ARGS info ${D}/dyn_encseq.kiln)
# a size outside the set: named input, dim, value and sizes
kiln_cli_test(dyn_seq_run_s64 RC 1 REQUIRES dyn_seq_module
  CHECK "STDERR_HAS=input 'input' dim 1 ('seq') is 64; the module was compiled for the sizes 16, 77, 128 there"
  ARGS run ${D}/dyn_encseq.kiln --input input=${D}/dyn_encseq_in_b1_s64.npy)
kiln_cli_test(dyn_seq_rt_run_s64 EXE kiln_rt_run RC 1 REQUIRES dyn_seq_module
  CHECK "STDERR_HAS=input 'input' dim 1 ('seq') is 64; the module was compiled for the sizes 16, 77, 128 there"
  ARGS ${D}/dyn_encseq.kiln --input input=${D}/dyn_encseq_in_b1_s64.npy)
kiln_cli_test(dyn_seq_run_dim65 RC 1 REQUIRES dyn_seq_module
  CHECK "STDERR_HAS=--dim 'seq=65': dim 'seq' takes one of the sizes 16, 77, 128"
  ARGS run ${D}/dyn_encseq.kiln --dim seq=65)
# a range on the sequence dim (lowering/plan_seq.h): ONE compile, run at 16, 64, 77, 128 and 256 against the
# reference interpreter; a size outside the range names the input, the axis, the dim, the value and the range
kiln_cli_test(dyn_seq_compile_range REQUIRES dyn_cnn FIXTURE dyn_seqr_module FILE ${D}/dyn_encseqr.kiln
  CHECK "STDOUT_HAS=dynamic dim 'seq' = 8..256 inside the shapes:"
        "STDOUT_HAS=buffers sized per value (0 roots that change keep the top of the range's size); arena"
  ARGS compile ${D}/dyn_encseq.onnx --dim batch=1 --dim seq=8..256 -o ${D}/dyn_encseqr.kiln)
foreach(q 16 64 77 128 256)
  kiln_cli_test(dyn_seqr_ref_s${q} FIXTURE dyn_seqr_ref_s${q} REQUIRES dyn_cnn FILE ${D}/encseqr_ref_s${q}/output.npy
    ARGS run ${D}/dyn_encseq.onnx --target ref --input input=${D}/dyn_encseq_in_b1_s${q}.npy
         --output ${D}/encseqr_ref_s${q} --compare output=${D}/dyn_encseq_ort_b1_s${q}.npy --rtol 1e-3 --atol 1e-4)
  kiln_cli_test(dyn_seqr_run_s${q} REQUIRES dyn_seqr_module dyn_seqr_ref_s${q}
    CHECK "STDOUT_HAS=output output: f32[1,${q},256]" "STDOUT_HAS=match: 0 of"
          "STDOUT_HAS=dynamic dim 'seq' = ${q} (range 8..256): arena"
    ARGS run ${D}/dyn_encseqr.kiln --input input=${D}/dyn_encseq_in_b1_s${q}.npy
         --compare output=${D}/encseqr_ref_s${q}/output.npy --rtol 1e-3 --atol 1e-4)
  set_tests_properties(cli_dyn_seqr_ref_s${q} cli_dyn_seqr_run_s${q} PROPERTIES LABELS models)
endforeach()
kiln_cli_test(dyn_seqr_run_s300 RC 1 REQUIRES dyn_seqr_module
  CHECK "STDERR_HAS=input 'input' dim 1 ('seq') is 300, outside the module's range 8..256"
  ARGS run ${D}/dyn_encseqr.kiln --input input=${D}/dyn_encseq_in_b1_s300.npy)
kiln_cli_test(dyn_seqr_info REQUIRES dyn_seqr_module
  CHECK "STDOUT_HAS=dynamic dim 'seq': 8..256" "STDOUT_HAS=input input: f32[1,256,256]"
        "STDOUT_HAS=memory (cpu, per slot): arena" "STDOUT_HAS=MB at seq=8 (lower bound"
  ARGS info ${D}/dyn_encseqr.kiln)
set_tests_properties(cli_dyn_seqr_run_s300 cli_dyn_seqr_info PROPERTIES LABELS models)
kiln_cli_test(dyn_seq_compile_ranges RC 1 REQUIRES dyn_cnn
  CHECK "STDERR_HAS=--dim 'batch=1..2': dim 'seq' is a range inside the shapes already" "STDERR_HAS=--dim batch=1"
  ARGS compile ${D}/dyn_encseq.onnx --dim batch=1..2 --dim seq=8..512 -o ${D}/bad.kiln)
kiln_cli_test(dyn_seq_compile_short RC 1 REQUIRES dyn_cnn
  CHECK "STDERR_HAS=--dim 'seq=8..10': a range inside the shapes needs at least 5 values" "STDERR_HAS=--dim seq=8,10"
  ARGS compile ${D}/dyn_encseq.onnx --dim batch=1 --dim seq=8..10 -o ${D}/bad.kiln)
# buckets with a batch range on the GPU targets: each bucket per-sample in
# the batch (its batched attention GEMMs hand their template back to the
# printed kernel); on OpenCL run at (2,77) against the reference (lavapipe's
# cold shader compiles of this model take minutes: compiled only)
foreach(t opencl vulkan)
  if(t IN_LIST KILN_TARGETS_BUILT)
    set(_dev)
    if(t STREQUAL "opencl")
      set(_dev --device none) # no program binary in the module: PoCL's cache serves the runs
    endif()
    kiln_cli_test(dyn_seq_compile_${t} FIXTURE dyn_seq_module_${t} REQUIRES dyn_cnn FILE ${D}/dyn_encseq_${t}.kiln
      CHECK "STDOUT_HAS=shape buckets: dim 'seq' at 2 sizes"
      ARGS compile ${D}/dyn_encseq.onnx -t ${t} ${_dev} --dim batch=1..2 --dim seq=16,77 -o ${D}/dyn_encseq_${t}.kiln)
    list(APPEND _seq_tests compile_${t})
  endif()
endforeach()
if("opencl" IN_LIST KILN_TARGETS_BUILT)
  kiln_cli_test(dyn_seq_run_opencl_b2_s77 REQUIRES dyn_seq_module_opencl dyn_seq_ref_b2_s77
    CHECK "STDOUT_HAS=output output: f32[2,77,256]" "STDOUT_HAS=match: 0 of"
    ARGS run ${D}/dyn_encseq_opencl.kiln --input input=${D}/dyn_encseq_in_b2_s77.npy
         --compare output=${D}/encseq_ref_b2_s77/output.npy --rtol 1e-3 --atol 1e-4)
  list(APPEND _seq_tests run_opencl_b2_s77)
endif()
list(APPEND _seq_tests rt_run_s77 rt_s77_matches rt_run_dim run_dim info run_s64 rt_run_s64 run_dim65 compile_range
     compile_ranges compile_short)
foreach(t ${_seq_tests})
  if(TEST cli_dyn_seq_${t})
    set_tests_properties(cli_dyn_seq_${t} PROPERTIES LABELS models)
  endif()
endforeach()
# the range on OpenCL (targets/gpu_bind_seq.h): ONE compile, the grids follow the run's length; run at 16, 77
# and 256 against the reference interpreter, 300 refused naming input, axis, dim, value and range
if("opencl" IN_LIST KILN_TARGETS_BUILT)
  kiln_cli_test(dyn_seqr_compile_opencl REQUIRES dyn_cnn FIXTURE dyn_seqr_module_opencl FILE ${D}/dyn_encseqr_opencl.kiln
    CHECK "STDOUT_HAS=dynamic dim 'seq' = 8..256 inside the shapes:"
          "STDOUT_HAS=6 GEMMs run as the opencl GEMM template with M read at run time"
          "STDOUT_HAS=buffers sized per value (0 roots that change keep the top of the range's size); arena"
    ARGS compile ${D}/dyn_encseq.onnx -t opencl --device none --dim batch=1 --dim seq=8..256
         -o ${D}/dyn_encseqr_opencl.kiln)
  set(_seqr_cl compile_opencl run_opencl_s300)
  foreach(q 16 77 256)
    kiln_cli_test(dyn_seqr_run_opencl_s${q} REQUIRES dyn_seqr_module_opencl dyn_seqr_ref_s${q}
      CHECK "STDOUT_HAS=output output: f32[1,${q},256]" "STDOUT_HAS=match: 0 of"
            "STDOUT_HAS=dynamic dim 'seq' = ${q} (range 8..256): arena"
      ARGS run ${D}/dyn_encseqr_opencl.kiln --input input=${D}/dyn_encseq_in_b1_s${q}.npy
           --compare output=${D}/encseqr_ref_s${q}/output.npy --rtol 1e-3 --atol 1e-4)
    list(APPEND _seqr_cl run_opencl_s${q})
  endforeach()
  kiln_cli_test(dyn_seqr_run_opencl_s300 RC 1 REQUIRES dyn_seqr_module_opencl
    CHECK "STDERR_HAS=input 'input' dim 1 ('seq') is 300, outside the module's range 8..256"
    ARGS run ${D}/dyn_encseqr_opencl.kiln --input input=${D}/dyn_encseq_in_b1_s300.npy)
  # the same with KILN_SEQ_GEMM_TEMPLATE=off at compile: every GEMM printed (row blocks), run at 16 and 256
  kiln_cli_test(dyn_seqr_compile_opencl_notmpl REQUIRES dyn_cnn FIXTURE dyn_seqr_module_opencl_notmpl
    FILE ${D}/dyn_encseqr_opencl_notmpl.kiln
    CHECK "STDOUT_HAS=dynamic dim 'seq' = 8..256 inside the shapes:" "STDOUT_LACKS=GEMM template"
          "STDOUT_HAS=8 GEMMs in blocks of rows"
    ARGS compile ${D}/dyn_encseq.onnx -t opencl --device none --dim batch=1 --dim seq=8..256
         -o ${D}/dyn_encseqr_opencl_notmpl.kiln)
  set_tests_properties(cli_dyn_seqr_compile_opencl_notmpl PROPERTIES
                       ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache;KILN_SEQ_GEMM_TEMPLATE=off")
  list(APPEND _seqr_cl compile_opencl_notmpl)
  foreach(q 16 256)
    kiln_cli_test(dyn_seqr_run_opencl_notmpl_s${q} REQUIRES dyn_seqr_module_opencl_notmpl dyn_seqr_ref_s${q}
      CHECK "STDOUT_HAS=output output: f32[1,${q},256]" "STDOUT_HAS=match: 0 of"
      ARGS run ${D}/dyn_encseqr_opencl_notmpl.kiln --input input=${D}/dyn_encseq_in_b1_s${q}.npy
           --compare output=${D}/encseqr_ref_s${q}/output.npy --rtol 1e-3 --atol 1e-4)
    list(APPEND _seqr_cl run_opencl_notmpl_s${q})
  endforeach()
  foreach(t ${_seqr_cl})
    set_tests_properties(cli_dyn_seqr_${t} PROPERTIES LABELS "models;target=opencl")
  endforeach()
endif()
# the range on Vulkan under lavapipe's loop limit (65535 iterations per invocation): the GEMMs in blocks of
# rows x columns under it, the Transposes over the grid; run at 16, 77, 128 and 256 against the reference
if("vulkan" IN_LIST KILN_TARGETS_BUILT)
  kiln_cli_test(dyn_seqr_compile_vulkan REQUIRES dyn_cnn FIXTURE dyn_seqr_module_vulkan FILE ${D}/dyn_encseqr_vulkan.kiln
    CHECK "STDOUT_HAS=dynamic dim 'seq' = 8..256 inside the shapes:"
          "STDOUT_HAS=under the device's loop limit (65535 iterations per invocation), 0 above it even so"
          "STDOUT_HAS=2 plain nests in parallel"
          "STDOUT_HAS=6 GEMMs run as the vulkan GEMM template with M read at run time"
    ARGS compile ${D}/dyn_encseq.onnx -t vulkan --loop-limit 65535 --dim batch=1 --dim seq=8..256
         -o ${D}/dyn_encseqr_vulkan.kiln)
  set(_seqr_vk compile_vulkan run_vulkan_s300)
  foreach(q 16 77 128 256)
    kiln_cli_test(dyn_seqr_run_vulkan_s${q} REQUIRES dyn_seqr_module_vulkan dyn_seqr_ref_s${q}
      CHECK "STDOUT_HAS=output output: f32[1,${q},256]" "STDOUT_HAS=match: 0 of"
            "STDOUT_HAS=dynamic dim 'seq' = ${q} (range 8..256): arena"
      ARGS run ${D}/dyn_encseqr_vulkan.kiln --input input=${D}/dyn_encseq_in_b1_s${q}.npy
           --compare output=${D}/encseqr_ref_s${q}/output.npy --rtol 1e-3 --atol 1e-4)
    list(APPEND _seqr_vk run_vulkan_s${q})
  endforeach()
  kiln_cli_test(dyn_seqr_run_vulkan_s300 RC 1 REQUIRES dyn_seqr_module_vulkan
    CHECK "STDERR_HAS=input 'input' dim 1 ('seq') is 300, outside the module's range 8..256"
    ARGS run ${D}/dyn_encseqr_vulkan.kiln --input input=${D}/dyn_encseq_in_b1_s300.npy)
  # the same with KILN_SEQ_GEMM_TEMPLATE=off at compile: every GEMM printed (row x column blocks under the
  # loop limit), run at 16 and 256
  kiln_cli_test(dyn_seqr_compile_vulkan_notmpl REQUIRES dyn_cnn FIXTURE dyn_seqr_module_vulkan_notmpl
    FILE ${D}/dyn_encseqr_vulkan_notmpl.kiln
    CHECK "STDOUT_HAS=dynamic dim 'seq' = 8..256 inside the shapes:" "STDOUT_LACKS=GEMM template"
          "STDOUT_HAS=8 GEMMs in blocks of rows"
    ARGS compile ${D}/dyn_encseq.onnx -t vulkan --loop-limit 65535 --dim batch=1 --dim seq=8..256
         -o ${D}/dyn_encseqr_vulkan_notmpl.kiln)
  list(APPEND _seqr_vk compile_vulkan_notmpl)
  foreach(q 16 256)
    kiln_cli_test(dyn_seqr_run_vulkan_notmpl_s${q} REQUIRES dyn_seqr_module_vulkan_notmpl dyn_seqr_ref_s${q}
      CHECK "STDOUT_HAS=output output: f32[1,${q},256]" "STDOUT_HAS=match: 0 of"
      ARGS run ${D}/dyn_encseqr_vulkan_notmpl.kiln --input input=${D}/dyn_encseq_in_b1_s${q}.npy
           --compare output=${D}/encseqr_ref_s${q}/output.npy --rtol 1e-3 --atol 1e-4)
    list(APPEND _seqr_vk run_vulkan_notmpl_s${q})
  endforeach()
  # the Vulkan validation layer on in every run (a message from it fails the test)
  foreach(t ${_seqr_vk})
    set(_env "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache;KILN_VULKAN_VALIDATION=1")
    if(t STREQUAL "compile_vulkan_notmpl")
      set(_env "${_env};KILN_SEQ_GEMM_TEMPLATE=off")
    endif()
    # (TIMEOUT: shaderc's 3 s of CPU for the module took over 120 s of wall at load 16)
    set_tests_properties(cli_dyn_seqr_${t} PROPERTIES LABELS "models;target=vulkan" ENVIRONMENT "${_env}"
                         FAIL_REGULAR_EXPRESSION "kiln vulkan validation:" TIMEOUT 600)
  endforeach()
endif()
