# The onnx wheel's model suites beside the node tests, on every target built:
# pytorch-converted, pytorch-operator and simple have the node-test layout
# (model.onnx + test_data_set_N); light/ holds light_<name>.onnx with its
# expected output and gets the onnx runner's dummy inputs (--light,
# tests/conformance_light.c). Labels follow the node suites: "onnx" on ref and
# cpu, "onnx;target=opencl" on OpenCL, "target=vulkan" on Vulkan (validation
# layer on, any message fails); an entry that takes minutes is labelled "slow"
# as well, so the default suite stays short.
# Included by tests/CMakeLists.txt after the targets' own tests.cmake.
if(NOT KILN_NODE_TEST_DIR OR NOT TARGET kiln_conformance)
  return()
endif()
get_filename_component(KILN_ONNX_TEST_DATA ${KILN_NODE_TEST_DIR} DIRECTORY)

# kiln_model_suite(SUITE TARGET LEVEL LABELS TIMEOUT [EXTRA_ARGS...]): one
# ctest entry running the suite folder SUITE on TARGET (ref, cpu, opencl,
# vulkan) at -O LEVEL (ignored on ref); EXTRA_ARGS go to kiln_conformance
# (--exclude for the known failures named below).
function(kiln_model_suite suite target level labels timeout)
  if(NOT EXISTS ${KILN_ONNX_TEST_DATA}/${suite})
    return()
  endif()
  string(REPLACE "-" "_" id ${suite})
  set(args --quiet ${ARGN})
  if(suite STREQUAL "light")
    list(APPEND args --light)
  endif()
  if(target STREQUAL "ref")
    set(name conformance_onnx_${id})
  else()
    set(name conformance_onnx_${id}_${target}_${level})
    list(APPEND args --target ${target} -${level})
  endif()
  add_test(NAME ${name} COMMAND kiln_conformance ${args} ${KILN_ONNX_TEST_DATA}/${suite})
  if(target STREQUAL "vulkan")
    set_tests_properties(${name} PROPERTIES LABELS "${labels}" TIMEOUT ${timeout}
                         FAIL_REGULAR_EXPRESSION "kiln vulkan validation:"
                         ENVIRONMENT "KILN_VULKAN_VALIDATION=1;KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-vk-cache")
  else()
    set_tests_properties(${name} PROPERTIES LABELS "${labels}" TIMEOUT ${timeout}
                         ENVIRONMENT "KILN_CACHE_DIR=${CMAKE_BINARY_DIR}/kiln-cache")
  endif()
endfunction()

# Times below: this 2-core CI machine under load (other builds running).
# Reference executor: every suite in under 20 s.
foreach(suite pytorch-converted pytorch-operator simple)
  kiln_model_suite(${suite} ref "" onnx 600)
endforeach()
# light/ is nine ImageNet-size models: seconds on the reference executor, but
# many minutes under ASan, so it carries "noasan" (tools/test.sh's sanitizer
# step leaves that label out; the small suites above run under it).
kiln_model_suite(light ref "" "onnx;noasan" 600)
# Compiled targets; known failures would be left out with --exclude (the run
# lists them as "excluded"); none now. light vgg19's logits are ~3.7e31, all
# equal in exact arithmetic: every column of a GEMM must sum with the same
# roundings or Softmax picks a few (the CPU's 8-column edge tile once did,
# giving 8 of 0.125 for 1,000 of 0.001; its steps are explicit FMAs now).
# light/ compiles nine ImageNet-size models: minutes per target, so "slow".
# opencl (PoCL): 9/9, cold (fresh KILN_CACHE_DIR and POCL_CACHE_DIR) 1,009 s
# at load 17-24 on 2 cores, one model per process: alexnet 49, densenet121
# 75, inception_v1 74, inception_v2 232, resnet50 61, shufflenet 168,
# squeezenet 84, vgg19 153, zfnet512 113 s; timeout 2.5x that.
# vulkan (lavapipe): 9/9, 730 s for the suite in one process at load 2.5-5
# (fresh KILN_CACHE_DIR; Mesa's own shader cache held alexnet's, vgg19's and
# zfnet512's shaders from an earlier run); timeout 2.5x that. Nearly all of a
# cold run is lavapipe's LLVM compiling the shaders (samples: LLVMRunPasses /
# CoroSplitPass, the barrier shaders made coroutines), so load stretches it:
# at load ~20 alexnet alone took 1,504 s and a densenet121 ran over an hour.
# AlexNet's, VGG-19's and ZFNet-512's first FC weights (144-392 MiB) exceed
# lavapipe's 128 MiB binding: those Gemms are split into column slices that
# fit (ir/pass_split.c: 2 x 2048, 4 x 1024 and 3 x 1376 columns) and run on
# the device; the times above were measured before, when those nodes ran on
# the CPU of the session (targets/partition.c).
kiln_model_suite(simple cpu O1 onnx 600)                                  # 3 s
kiln_model_suite(simple cpu O0 onnx 600)                                  # <1 s
kiln_model_suite(pytorch-operator cpu O1 onnx 600)                        # 29 s (3 s warm)
kiln_model_suite(pytorch-operator cpu O0 onnx 600)                        # 3 s
kiln_model_suite(pytorch-converted cpu O1 "onnx;slow" 1800) # 111 s cold
kiln_model_suite(pytorch-converted cpu O0 "onnx;slow" 1800) # 3 s warm
kiln_model_suite(light cpu O1 "onnx;slow" 3600)                          # 46 s warm, 422 s cold (load 12-20)
if(opencl IN_LIST KILN_TARGETS_BUILT)
  kiln_model_suite(simple opencl O1 "onnx;target=opencl" 600)                       # 23 s
  kiln_model_suite(pytorch-operator opencl O1 "onnx;target=opencl;slow" 1200)       # 90 s
  kiln_model_suite(pytorch-converted opencl O1 "onnx;target=opencl;slow" 1800) # 387 s
  kiln_model_suite(light opencl O1 "onnx;target=opencl;slow" 2520)            # 1,009 s cold (above)
endif()
if(vulkan IN_LIST KILN_TARGETS_BUILT)
  kiln_model_suite(simple vulkan O1 "target=vulkan" 600)                            # 7 s
  kiln_model_suite(pytorch-operator vulkan O1 "target=vulkan;slow" 1200)            # 113 s
  kiln_model_suite(pytorch-converted vulkan O1 "target=vulkan;slow" 1800) # 281 s
  kiln_model_suite(light vulkan O1 "target=vulkan;slow" 1825)                 # 730 s (above)
endif()
