# CPU target: the C emitter (targets/cpu: the plan printed as one C unit
# through the C-family printer) and the CPU runtime device (runtime/cpu:
# the module's C compiled by the system compiler, cached, run on a queue
# thread with OpenMP inside). Included by the top-level CMakeLists.txt for
# the "cpu" entry of KILN_TARGETS (targets/README.md). Every build has it:
# it is the fallback of every other target and the reference they are
# compared against.
file(GLOB KILN_CPU_TARGET_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/targets/cpu/*.c)
file(GLOB KILN_CPU_RT_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/runtime/cpu/*.c)

target_sources(kiln PRIVATE ${KILN_CPU_TARGET_SOURCES} ${KILN_CPU_RT_SOURCES})

# The runtime-only library builds a module's C at load time: the device and
# its loader (runtime/cpu/cpu_loader.c), not the emitter.
target_sources(kiln_rt PRIVATE ${KILN_CPU_RT_SOURCES})
set(KILN_TARGET_OK TRUE)
