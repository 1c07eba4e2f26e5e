# Vulkan target: the SPIR-V emitter (targets/vulkan, GLSL -> libshaderc ->
# SPIR-V, validated with the SPIRV-Tools C API), the Vulkan runtime device
# (runtime/vulkan), the hand-written compute shaders (kernels/vulkan/*.comp,
# embedded at build time) and the sgemm benchmark. Included by the top-level
# CMakeLists.txt for the "vulkan" entry of KILN_TARGETS (targets/README.md);
# everything here is optional: without Vulkan, shaderc or SPIRV-Tools kiln
# builds without the target (KILN_TARGET_OK stays FALSE, so the registries
# do not list it).
if(NOT KILN_ENABLE_VULKAN)
  return()
endif()
find_package(Vulkan QUIET)
find_package(PkgConfig QUIET)
# shaderc + SPIRV-Tools. Candidates, first that compiles a shader in a test
# program wins:
#  1. libshaderc_shared.so (upstream's self-contained shared library);
#  2. libshaderc_combined.a with glslang's and SPIRV-Tools' static libraries
#     (Debian bookworm: its libshaderc.so.1 leaves 36 glslang symbols to be
#     provided by the glslc executable and crashes when linked with the
#     glslang-dev static libraries, so it is not usable in-process);
#  3. plain -lshaderc plus SPIRV-Tools.
find_path(KILN_SHADERC_INCLUDE shaderc/shaderc.h)
find_path(KILN_SPIRV_TOOLS_INCLUDE spirv-tools/libspirv.h)
set(KILN_VULKAN_OK FALSE)
if(Vulkan_FOUND AND KILN_SHADERC_INCLUDE AND KILN_SPIRV_TOOLS_INCLUDE AND NOT DEFINED KILN_SHADERC_LIBS)
  find_package(Threads REQUIRED)
  find_library(KILN_SHADERC_SHARED NAMES shaderc_shared)
  find_library(KILN_SHADERC_COMBINED NAMES libshaderc_combined.a shaderc_combined)
  find_library(KILN_SHADERC_PLAIN NAMES shaderc)
  set(glslang_libs)
  foreach(l glslang MachineIndependent OSDependent OGLCompiler GenericCodeGen SPIRV
          glslang-default-resource-limits SPIRV-Tools-opt SPIRV-Tools)
    find_library(KILN_LIB_${l} NAMES lib${l}.a ${l})
    if(KILN_LIB_${l})
      list(APPEND glslang_libs ${KILN_LIB_${l}})
    endif()
  endforeach()
  set(candidates)
  if(KILN_SHADERC_SHARED)
    list(APPEND candidates "${KILN_SHADERC_SHARED}")
  endif()
  if(KILN_SHADERC_COMBINED)
    string(REPLACE ";" "|" g "${glslang_libs}")
    list(APPEND candidates "-Wl,--start-group|${KILN_SHADERC_COMBINED}|${g}|-Wl,--end-group|stdc++|m")
  endif()
  if(KILN_SHADERC_PLAIN)
    string(REPLACE ";" "|" g "${glslang_libs}")
    list(APPEND candidates "${KILN_SHADERC_PLAIN}|-Wl,--start-group|${g}|-Wl,--end-group|stdc++|m")
  endif()
  include(CheckCSourceRuns)
  include(CMakePushCheckState)
  set(i 0)
  foreach(c ${candidates})
    string(REPLACE "|" ";" libs "${c}")
    cmake_push_check_state(RESET)
    set(CMAKE_REQUIRED_INCLUDES ${KILN_SHADERC_INCLUDE} ${KILN_SPIRV_TOOLS_INCLUDE})
    set(CMAKE_REQUIRED_LIBRARIES ${libs} Threads::Threads)
    set(CMAKE_REQUIRED_QUIET ON)
    check_c_source_runs([=[
#include <shaderc/shaderc.h>
#include <spirv-tools/libspirv.h>
#include <string.h>
int main(void) {
  const char* src = "#version 450\\nlayout(local_size_x = 1) in;\\n"
                    "layout(std430, binding = 0) buffer B { float b[]; };\\n"
                    "void main() { b[0] = exp(b[1]); }\\n";
  shaderc_compiler_t c = shaderc_compiler_initialize();
  shaderc_compilation_result_t r =
      shaderc_compile_into_spv(c, src, strlen(src), shaderc_compute_shader, "t", "main", NULL);
  int ok = shaderc_result_get_compilation_status(r) == shaderc_compilation_status_success;
  spv_context x = spvContextCreate(SPV_ENV_VULKAN_1_1);
  spv_const_binary_t bin = {(const uint32_t*)(const void*)shaderc_result_get_bytes(r),
                            shaderc_result_get_length(r) / 4};
  spv_diagnostic d = NULL;
  if (ok) ok = spvValidate(x, &bin, &d) == SPV_SUCCESS;
  spvContextDestroy(x);
  shaderc_result_release(r);
  shaderc_compiler_release(c);
  return ok ? 0 : 1;
}
]=] KILN_SHADERC_WORKS_${i})
    cmake_pop_check_state()
    if(KILN_SHADERC_WORKS_${i})
      set(KILN_SHADERC_LIBS ${libs} CACHE INTERNAL "shaderc + SPIRV-Tools link line")
      break()
    endif()
    math(EXPR i "${i} + 1")
  endforeach()
endif()
if(Vulkan_FOUND AND KILN_SHADERC_LIBS)
  set(KILN_VULKAN_OK TRUE)
endif()
if(NOT KILN_VULKAN_OK)
  message(STATUS "kiln: Vulkan target off (Vulkan ${Vulkan_FOUND}, no working shaderc + "
                 "SPIRV-Tools: headers ${KILN_SHADERC_INCLUDE} ${KILN_SPIRV_TOOLS_INCLUDE})")
  return()
endif()
message(STATUS "kiln: Vulkan target on (shaderc: ${KILN_SHADERC_LIBS})")

file(GLOB KILN_VULKAN_KERNELS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/vulkan/*.comp)
kiln_embed_sources(KILN_VULKAN_EMBEDDED kiln_vk_ ${KILN_VULKAN_KERNELS})
file(GLOB KILN_SPIRV_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/targets/vulkan/*.c)
file(GLOB KILN_VULKAN_RT_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/runtime/vulkan/*.c)

target_sources(kiln PRIVATE ${KILN_SPIRV_SOURCES} ${KILN_VULKAN_RT_SOURCES} ${KILN_VULKAN_EMBEDDED})
target_include_directories(kiln PRIVATE ${KILN_SHADERC_INCLUDE} ${KILN_SPIRV_TOOLS_INCLUDE})
target_link_libraries(kiln PUBLIC Vulkan::Vulkan ${KILN_SHADERC_LIBS} Threads::Threads)
set(KILN_TARGET_OK TRUE)

# The runtime-only library runs SPIR-V from a module file: no shaderc there.
if(TARGET kiln_rt)
  target_sources(kiln_rt PRIVATE ${KILN_VULKAN_RT_SOURCES})
  target_link_libraries(kiln_rt PRIVATE Vulkan::Vulkan) # not in the installed link interface
endif()

# sgemm on the Vulkan device (label "bench" via tools/bench.sh; not a test).
if(EXISTS ${CMAKE_SOURCE_DIR}/bench/vulkan_sgemm.c)
  add_executable(kiln_bench_vulkan_sgemm ${CMAKE_SOURCE_DIR}/bench/vulkan_sgemm.c)
  target_link_libraries(kiln_bench_vulkan_sgemm PRIVATE kiln)
endif()
