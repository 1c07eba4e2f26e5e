/* Helpers of the OpenCL device that make no device calls: CL error names,
 * the program-binary cache key, source
 * dumps and finding the kernel a build log points at. Private to
 * runtime/opencl/ (and its tests). Thread-safe (no global state).
 */
#ifndef KILN_RUNTIME_OPENCL_OPENCL_UTIL_H_
#define KILN_RUNTIME_OPENCL_OPENCL_UTIL_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cl_khr_icd's "no platform" code, so the header need not be included. */
#define CL_PLATFORM_NOT_FOUND_KHR_ (-1001)

/* "CL_OUT_OF_RESOURCES", ..., or "CL error -N" for unknown codes. */
const char* kiln_cl_error_name(int32_t err);

/* The program-binary cache key (entries live in the code cache's "opencl"
 * folder, runtime/code_cache.h): 32 hex digits (+ NUL) of a 128-bit hash
 * over the inputs. */
void kiln_opencl_cache_key(const char* source, size_t len, const char* device, const char* driver,
                           const char* version, const char* options, char out[33]);

/* Writes |source| to <dir>/<model stem>.cl (dir created). */
kiln_status_t kiln_opencl_dump_source(const char* dir, const char* model, const char* source,
                                      size_t len);

/* The next extension |source| (|len| bytes) enables at or after |*pos|: a
 * line "#pragma OPENCL EXTENSION <name> : enable" (spaces free). Copies
 * <name> into |out| and moves |*pos| past the line; false when none is
 * left (or a name does not fit |n|: then it is skipped). */
bool kiln_opencl_next_enabled_extension(const char* source, size_t len, size_t* pos, char* out, size_t n);

/* The kernel whose definition contains the first "<line>:<col>: error"
 * line of |log| ("'name'"), else every kernel name in |source| ("one of
 * 'a', 'b'"). */
void kiln_opencl_kernel_at_error(const char* source, const char* log, char* out, size_t n);

#ifdef __cplusplus
}
#endif
#endif
