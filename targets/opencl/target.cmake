# OpenCL target: the OpenCL C emitter (targets/opencl), the OpenCL runtime
# device (runtime/opencl), the hand-tuned kernels (kernels/opencl/*.cl,
# embedded at build time) and the sgemm benchmark (vs CLBlast when found).
# Included by the top-level CMakeLists.txt for the "opencl" entry of
# KILN_TARGETS (targets/README.md); without OpenCL headers + ICD loader kiln
# builds without the target (KILN_TARGET_OK stays FALSE, so the registries
# do not list it).
if(NOT KILN_ENABLE_OPENCL)
  return()
endif()
find_package(OpenCL QUIET)
if(NOT OpenCL_FOUND)
  message(STATUS "kiln: OpenCL target off (no OpenCL headers / ICD loader: ocl-icd-opencl-dev, opencl-headers)")
  return()
endif()
message(STATUS "kiln: OpenCL target on (${OpenCL_LIBRARIES}, OpenCL ${OpenCL_VERSION_STRING})")

file(GLOB KILN_OPENCL_KERNELS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/opencl/*.cl)
# prelude.cl is the printer's, embedded by the top-level CMakeLists.txt
list(FILTER KILN_OPENCL_KERNELS EXCLUDE REGEX "/prelude\\.cl$")
kiln_embed_sources(KILN_OPENCL_EMBEDDED kiln_cl_ ${KILN_OPENCL_KERNELS})
file(GLOB KILN_OPENCL_TARGET_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/targets/opencl/*.c)
file(GLOB KILN_OPENCL_RT_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/runtime/opencl/*.c)

# The kiln version is part of a module's program binary key (it fixes the
# build options and the kernels' calling conventions).
set_property(SOURCE ${CMAKE_SOURCE_DIR}/runtime/opencl/opencl_build.c APPEND PROPERTY COMPILE_DEFINITIONS
             "KILN_OPENCL_KILN_VERSION_NUMBER=${PROJECT_VERSION}")
target_sources(kiln PRIVATE ${KILN_OPENCL_TARGET_SOURCES} ${KILN_OPENCL_RT_SOURCES}
               ${KILN_OPENCL_EMBEDDED})
target_link_libraries(kiln PUBLIC OpenCL::OpenCL)
set(KILN_TARGET_OK TRUE)

# The runtime-only library runs OpenCL source from a module file: the device
# only (the emitter and its kernel templates are compile-time pieces).
if(TARGET kiln_rt)
  target_sources(kiln_rt PRIVATE ${KILN_OPENCL_RT_SOURCES})
  # PRIVATE: the public headers show no OpenCL, and the installed package's
  # link interface must not name build-tree targets.
  target_link_libraries(kiln_rt PRIVATE OpenCL::OpenCL)
endif()

# CLBlast (libclblast-dev), optional: the device's second GEMM provider
# (runtime/opencl/opencl_gemm_provider.c) and the sgemm bench's peer.
find_library(KILN_CLBLAST_LIB NAMES clblast)
find_path(KILN_CLBLAST_INCLUDE clblast_c.h)
if(KILN_CLBLAST_LIB AND KILN_CLBLAST_INCLUDE)
  message(STATUS "kiln: CLBlast found (${KILN_CLBLAST_LIB}): OpenCL GEMMs choose kiln or CLBlast per shape")
  foreach(t kiln kiln_rt)
    if(TARGET ${t})
      target_compile_definitions(${t} PRIVATE KILN_HAVE_CLBLAST=1)
      target_include_directories(${t} PRIVATE ${KILN_CLBLAST_INCLUDE})
      if(t STREQUAL "kiln_rt")
        target_link_libraries(kiln_rt PRIVATE ${KILN_CLBLAST_LIB})
      else()
        target_link_libraries(kiln PUBLIC ${KILN_CLBLAST_LIB})
      endif()
    endif()
  endforeach()
else()
  message(STATUS "kiln: CLBlast not found (libclblast-dev): OpenCL GEMMs use kiln's template only")
endif()

# sgemm on the OpenCL device: our GEMM template vs CLBlast (optional).
if(EXISTS ${CMAKE_SOURCE_DIR}/bench/opencl_sgemm.c)
  add_executable(kiln_bench_opencl_sgemm ${CMAKE_SOURCE_DIR}/bench/opencl_sgemm.c)
  target_link_libraries(kiln_bench_opencl_sgemm PRIVATE kiln)
  if(KILN_CLBLAST_LIB AND KILN_CLBLAST_INCLUDE)
    target_compile_definitions(kiln_bench_opencl_sgemm PRIVATE KILN_HAVE_CLBLAST=1)
    target_include_directories(kiln_bench_opencl_sgemm PRIVATE ${KILN_CLBLAST_INCLUDE})
    target_link_libraries(kiln_bench_opencl_sgemm PRIVATE ${KILN_CLBLAST_LIB})
  else()
    message(STATUS "kiln: CLBlast not found (libclblast-dev): the OpenCL sgemm bench runs without it")
  endif()
endif()
