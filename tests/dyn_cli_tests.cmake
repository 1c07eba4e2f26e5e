# Dynamic batch through the command line (issue 25, label "models": the model
# is exported by torch): a small ResNet-style CNN exported with dynamic_axes
# (tests/models/export_dyn_cnn.py), compiled ONCE with --dim batch=1..8, run
# at batches 1, 3 and 8 from that one .kiln against the reference
# interpreter's output at each batch (and onnxruntime's); kiln-rt-run on the
# same module; the errors for values outside the range and for bad --dim
# specs. Included from tests/CMakeLists.txt after cli_tests.cmake.

if(NOT KILN_PYTHON OR NOT EXISTS "${KILN_PYTHON}")
  return()
endif()
set(D ${CMAKE_BINARY_DIR}/models/dyn)
add_test(NAME models_export_dyn_cnn
         COMMAND ${KILN_PYTHON} ${CMAKE_SOURCE_DIR}/tests/models/export_dyn_cnn.py --out ${D} --batches 1,3,8,9)
set_tests_properties(models_export_dyn_cnn PROPERTIES FIXTURES_SETUP dyn_cnn LABELS models TIMEOUT 600)

kiln_cli_test(dyn_compile FIXTURE dyn_module REQUIRES dyn_cnn FILE ${D}/dyn_cnn.kiln
  CHECK "STDOUT_HAS=dynamic dim 'batch' = 1..8: compiled per sample" "STDOUT_HAS=kernels loop over it at run time"
  ARGS compile ${D}/dyn_cnn.onnx --dim batch=1..8 -o ${D}/dyn_cnn.kiln)
foreach(b 1 3 8)
  # the reference interpreter at this batch writes the expected output
  kiln_cli_test(dyn_ref_b${b} FIXTURE dyn_ref_b${b} REQUIRES dyn_cnn FILE ${D}/ref_b${b}/logits.npy
    ARGS run ${D}/dyn_cnn.onnx --target ref --input input=${D}/dyn_cnn_in_b${b}.npy --output ${D}/ref_b${b}
         --compare logits=${D}/dyn_cnn_ort_b${b}.npy --rtol 1e-3 --atol 1e-4)
  kiln_cli_test(dyn_run_b${b} REQUIRES dyn_module dyn_ref_b${b}
    CHECK "STDOUT_HAS=output logits: f32[${b},10]" "STDOUT_HAS=match: 0 of"
    ARGS run ${D}/dyn_cnn.kiln --input input=${D}/dyn_cnn_in_b${b}.npy
         --compare logits=${D}/ref_b${b}/logits.npy --rtol 1e-4 --atol 1e-5)
endforeach()
kiln_cli_test(dyn_rt_run_b3 EXE kiln_rt_run REQUIRES dyn_module FILE ${D}/rt_b3/logits.npy
  ARGS ${D}/dyn_cnn.kiln --input input=${D}/dyn_cnn_in_b3.npy --output ${D}/rt_b3)
kiln_cli_test(dyn_rt_run_dim EXE kiln_rt_run REQUIRES dyn_module CLEAN ${D}/rt_d5 FILE ${D}/rt_d5/logits.npy
  ARGS ${D}/dyn_cnn.kiln --dim batch=5 --output ${D}/rt_d5)
kiln_cli_test(dyn_info REQUIRES dyn_module
  CHECK "STDOUT_HAS=dynamic dim 'batch': 1..8" "STDOUT_HAS=input input: f32[1,3,32,32]"
  ARGS info ${D}/dyn_cnn.kiln)
kiln_cli_test(dyn_run_dim REQUIRES dyn_module CHECK "STDOUT_HAS=output logits: f32[6,10]"
  ARGS run ${D}/dyn_cnn.kiln --dim batch=6)
# outside the range: named input, dim, value and range
kiln_cli_test(dyn_run_b9 RC 1 REQUIRES dyn_module
  CHECK "STDERR_HAS=input 'input' dim 0 ('batch') is 9, outside the module's range 1..8"
  ARGS run ${D}/dyn_cnn.kiln --input input=${D}/dyn_cnn_in_b9.npy)
kiln_cli_test(dyn_rt_run_b9 EXE kiln_rt_run RC 1 REQUIRES dyn_module
  CHECK "STDERR_HAS=input 'input' dim 0 ('batch') is 9, outside the module's range 1..8"
  ARGS ${D}/dyn_cnn.kiln --input input=${D}/dyn_cnn_in_b9.npy)
kiln_cli_test(dyn_run_dim9 RC 1 REQUIRES dyn_module CHECK "STDERR_HAS=dim 'batch' takes a value in 1..8"
  ARGS run ${D}/dyn_cnn.kiln --dim batch=9)
kiln_cli_test(dyn_run_dim_name RC 1 REQUIRES dyn_module CHECK "STDERR_HAS=the module's dynamic dim is 'batch' (1..8)"
  ARGS run ${D}/dyn_cnn.kiln --dim N=2)
# A transformer encoder block (MatMul, Softmax, LayerNorm; its head reshapes
# take the batch from Shape -> Gather -> Concat), compiled once for 1..4.
kiln_cli_test(dyn_enc_compile FIXTURE dyn_enc_module REQUIRES dyn_cnn FILE ${D}/dyn_enc.kiln
  CHECK "STDOUT_HAS=dynamic dim 'batch' = 1..4: compiled per sample"
  ARGS compile ${D}/dyn_enc.onnx --dim batch=1..4 -o ${D}/dyn_enc.kiln)
foreach(b 1 3)
  kiln_cli_test(dyn_enc_ref_b${b} FIXTURE dyn_enc_ref_b${b} REQUIRES dyn_cnn FILE ${D}/enc_ref_b${b}/output.npy
    ARGS run ${D}/dyn_enc.onnx --target ref --input input=${D}/dyn_enc_in_b${b}.npy --output ${D}/enc_ref_b${b}
         --compare output=${D}/dyn_enc_ort_b${b}.npy --rtol 1e-3 --atol 1e-4)
  kiln_cli_test(dyn_enc_run_b${b} REQUIRES dyn_enc_module dyn_enc_ref_b${b}
    CHECK "STDOUT_HAS=output output: f32[${b},128,256]" "STDOUT_HAS=match: 0 of"
    ARGS run ${D}/dyn_enc.kiln --input input=${D}/dyn_enc_in_b${b}.npy
         --compare output=${D}/enc_ref_b${b}/output.npy --rtol 1e-3 --atol 1e-4)
endforeach()
# bad specs at compile time
kiln_cli_test(dyn_compile_empty RC 1 REQUIRES dyn_cnn CHECK "STDERR_HAS=expected NAME=LO..HI with 1 <= LO <= HI"
  ARGS compile ${D}/dyn_cnn.onnx --dim batch=8..1 -o ${D}/bad.kiln)
kiln_cli_test(dyn_compile_zero RC 1 REQUIRES dyn_cnn CHECK "STDERR_HAS=--dim 'batch=0..4'"
  ARGS compile ${D}/dyn_cnn.onnx --dim batch=0..4 -o ${D}/bad.kiln)
kiln_cli_test(dyn_compile_name RC 1 REQUIRES dyn_cnn CHECK "STDERR_HAS=the model has no dimension named 'seq'"
  ARGS compile ${D}/dyn_cnn.onnx --dim seq=1..4 -o ${D}/bad.kiln)
# The same model once for 1..8 on OpenCL (PoCL; no program binary in the
# module: PoCL's cache serves later runs), run at 3 and 8 against the
# reference and refused at 9 naming the input, dim, value and range.
if("opencl" IN_LIST KILN_TARGETS_BUILT)
  kiln_cli_test(dyn_opencl_compile FIXTURE dyn_opencl_module REQUIRES dyn_cnn FILE ${D}/dyn_cnn_cl.kiln
    CHECK "STDOUT_HAS=dynamic dim 'batch' = 1..8: compiled per sample"
    ARGS compile ${D}/dyn_cnn.onnx -t opencl --device none --dim batch=1..8 -o ${D}/dyn_cnn_cl.kiln)
  foreach(b 3 8)
    kiln_cli_test(dyn_opencl_run_b${b} REQUIRES dyn_opencl_module dyn_ref_b${b}
      CHECK "STDOUT_HAS=output logits: f32[${b},10]" "STDOUT_HAS=match: 0 of"
      ARGS run ${D}/dyn_cnn_cl.kiln --input input=${D}/dyn_cnn_in_b${b}.npy
           --compare logits=${D}/ref_b${b}/logits.npy --rtol 1e-4 --atol 1e-5)
  endforeach()
  kiln_cli_test(dyn_opencl_rt_run_dim EXE kiln_rt_run REQUIRES dyn_opencl_module CLEAN ${D}/rt_cl_d5
    FILE ${D}/rt_cl_d5/logits.npy ARGS ${D}/dyn_cnn_cl.kiln --dim batch=5 --output ${D}/rt_cl_d5)
  kiln_cli_test(dyn_opencl_run_b9 RC 1 REQUIRES dyn_opencl_module
    CHECK "STDERR_HAS=input 'input' dim 0 ('batch') is 9, outside the module's range 1..8"
    ARGS run ${D}/dyn_cnn_cl.kiln --input input=${D}/dyn_cnn_in_b9.npy)
endif()
foreach(t enc_compile enc_ref_b1 enc_ref_b3 enc_run_b1 enc_run_b3 info compile ref_b1 ref_b3 ref_b8 run_b1 run_b3 run_b8 rt_run_b3 rt_run_dim run_dim run_b9 rt_run_b9 run_dim9
        run_dim_name compile_empty compile_zero compile_name)
  if(TEST cli_dyn_${t})
    set_tests_properties(cli_dyn_${t} PROPERTIES LABELS models)
  endif()
endforeach()
foreach(t opencl_compile opencl_run_b3 opencl_run_b8 opencl_rt_run_dim opencl_run_b9)
  if(TEST cli_dyn_${t})
    set_tests_properties(cli_dyn_${t} PROPERTIES LABELS "models;target=opencl")
  endif()
endforeach()
