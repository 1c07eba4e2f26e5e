/* kiln OpenCL runtime device: the kiln_device_t backend for OpenCL 1.2+.
 *
 * One device = one cl_device_id with its own context and one in-order queue
 * created with CL_QUEUE_PROFILING_ENABLE. What each vtable slot maps to:
 *   buffer_create      clCreateBuffer (+ clEnqueueFillBuffer with 0)
 *   view_create        clCreateSubBuffer on the root buffer (a view of a view
 *                      is re-based on the root: OpenCL forbids sub-buffers of
 *                      sub-buffers); offsets must be multiples of
 *                      info.buffer_alignment (CL_DEVICE_MEM_BASE_ADDR_ALIGN/8)
 *   buffer_write/read  blocking clEnqueueWriteBuffer / clEnqueueReadBuffer
 *   executable_create  clCreateProgramWithSource/Binary + clBuildProgram, one
 *                      cl_kernel per program kernel; binaries cached on disk
 *   cmd_*              a recorded list (dispatch, barrier, timestamp);
 *                      arguments are bound with clSetKernelArg at submit
 *   submit             enqueues the list (NDRange, barrier, marker events for
 *                      timestamps and one marker at the end) and clFlush
 *   wait               waits on the end marker of the last submission
 *   timestamps_read    CL_PROFILING_COMMAND_END of the timestamp markers
 * No cl* call happens outside these slots except in device listing and
 * creation, so the fault wrapper (kiln_device_fault_wrap) sees them all.
 *
 * Program binary cache: key = 128-bit hash of the source, the device name,
 * the driver and device versions and the build options; entry
 * <32 hex>.clbin in the code cache's "opencl" folder (runtime/code_cache.h:
 * build_options->cache_dir, "" disabling it, else $KILN_CACHE_DIR/opencl,
 * else $XDG_CACHE_HOME/kiln/opencl, else ~/.cache/kiln/opencl). An entry
 * that fails the cache's checks is ignored and one the driver rejects is
 * deleted, with a warning on stderr, and the program is built from source.
 * Not used on PoCL, which caches every program it builds itself (unless
 * POCL_KERNEL_CACHE=0) and compiles a generic work-group function for each
 * kernel when its binary is asked for: on ResNet-18 that query cost more
 * than the cold build it would save (238 s cold load with it, 67-86 s
 * without).
 *
 * Errors: DEVICE_ERROR with the CL error name and the call ("opencl:
 * clEnqueueNDRangeKernel(kernel 'conv_0'): CL_INVALID_WORK_GROUP_SIZE");
 * CL_DEVICE_NOT_AVAILABLE / a lost context: "device lost", and every later
 * call fails the same way (destroy the device and create it again);
 * OUT_OF_MEMORY naming the size for allocations over
 * CL_DEVICE_MAX_MEM_ALLOC_SIZE or refused by the driver; INVALID_ARGUMENT
 * for a build failure, with the kernel whose line the log points at and the
 * build log.
 *
 * Lifetimes: buffers, executables and command buffers must be destroyed
 * before their device. A command buffer retains the cl_mem objects it was
 * recorded with. Thread-compatible (see runtime/device.h).
 */
#ifndef KILN_RUNTIME_OPENCL_OPENCL_DEVICE_H_
#define KILN_RUNTIME_OPENCL_OPENCL_DEVICE_H_

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <stdio.h>

#include "runtime/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of OpenCL devices over all platforms (0 when there is no ICD or
 * no platform). Never fails. */
int32_t kiln_opencl_device_count(void);

/* Creates device |index| (counted over all platforms' devices, in platform
 * order). Errors: NOT_FOUND "no OpenCL platform / ICD" (with the CL error),
 * NOT_FOUND "OpenCL device N not found (M devices)", DEVICE_ERROR when
 * context or queue creation fails (with the CL error name). Release with
 * kiln_device_release (refs start at 1). */
kiln_status_t kiln_opencl_device_create(int32_t index, kiln_allocator_t al, kiln_device_t** out);

/* Prints one line per device: index, platform, device name, version,
 * compute units, global memory, fp16 yes/no, base-address alignment. With
 * no platform it prints the reason and returns NOT_FOUND. */
kiln_status_t kiln_opencl_list_devices(FILE* out);

/* True when |d| is an OpenCL device (its vtable is this backend's). */
bool kiln_opencl_is_device(const kiln_device_t* d);

/* |d|'s context and in-order queue (profiling enabled), for code that
 * enqueues its own work beside kiln's (`kiln bench`'s CLBlast peer). False
 * when |d| is not an OpenCL device or was lost. */
bool kiln_opencl_device_queue(kiln_device_t* d, cl_context* ctx, cl_command_queue* q);

/* How an executable was built (tests, `kiln run --verbose`). */
typedef struct kiln_opencl_build_stats_s {
  bool cache_hit;          /* loaded from the binary cache */
  bool cache_rejected;     /* a cache entry existed but was corrupt/refused */
  int32_t n_embedded;      /* program binaries the module carries (any device) */
  bool embedded_used;      /* built from the module's binary for this device */
  bool embedded_refused;   /* that binary existed but the driver refused it */
  bool driver_cache;       /* the driver caches programs itself: no binary cache */
  double build_s;          /* seconds in executable_create */
  char cache_path[1024];   /* the cache file ("" when the cache is off) */
  /* GEMM providers (runtime/opencl/opencl_gemm_provider.h): kernels with a
   * GEMM descriptor, those running as CLBlast calls, those timed now */
  int32_t n_gemm_choices, n_gemm_clblast, n_gemm_measured;
  char gemm_record[1024];  /* the provider record file ("" when none) */
  /* Built with reuse_code (kiln_device_build_options_t): the units of its
   * text (kernels printed once), and how many of them came from earlier
   * builds' programs instead of being compiled again. 0, 0 otherwise. */
  int32_t units, units_reused;
} kiln_opencl_build_stats_t;

/* Stats of an executable made by this backend. */
void kiln_opencl_executable_stats(const kiln_device_executable_t* e,
                                  kiln_opencl_build_stats_t* out);

/* The build options every program gets (part of the cache key). */
#define KILN_OPENCL_BUILD_OPTIONS "-cl-std=CL1.2 -cl-mad-enable"

#ifdef __cplusplus
}
#endif
#endif /* KILN_RUNTIME_OPENCL_OPENCL_DEVICE_H_ */
