/* kiln CPU device: the runtime device interface (runtime/device.h) on the
 * host.
 *
 * Buffers are 64-byte-aligned host memory (views are pointers into them).
 * An executable is the program's C unit compiled by the system compiler
 * into a cached shared object (runtime/cpu/cpu_loader.h: $KILN_CC,
 * $KILN_CPU_FLAGS, $KILN_CACHE_DIR) and its kernel symbols. Command buffers
 * are recorded lists of (kernel, argument pointers), barriers and
 * timestamps; submit hands one to the device's queue thread, which runs
 * submissions in order (kernels use OpenMP threads inside), so the host
 * can upload the next run's inputs while one executes. Barriers are
 * recorded and counted but cost nothing: the queue runs one dispatch at a
 * time. Timestamps are CLOCK_MONOTONIC nanoseconds taken on the queue
 * thread.
 */
#ifndef KILN_RUNTIME_CPU_DEVICE_H_
#define KILN_RUNTIME_CPU_DEVICE_H_

#include "runtime/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* |threads| OpenMP threads per kernel (0 = all cores). Errors: OUT_OF_MEMORY,
 * DEVICE_ERROR when the queue thread cannot start. */
kiln_status_t kiln_cpu_device_create(int32_t threads, kiln_allocator_t allocator,
                                     kiln_device_t** out_device);

/* The CPU's entry in the device registry (runtime/device_registry.h). */
extern const struct kiln_device_api_s kiln_device_api_cpu;

#ifdef __cplusplus
}
#endif
#endif /* KILN_RUNTIME_CPU_DEVICE_H_ */
