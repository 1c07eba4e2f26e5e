/* kiln npy: NumPy .npy read/write (format versions 1.0-3.0, C order, little
 * endian), part of libkiln_rt so an application can feed a module's inputs
 * and keep its outputs as files.
 * Supported dtypes: <f4 <f2 |i1 |u1 <i4 <i8 |b1; <f8 is read and converted
 * to f32. Errors name the file. Thread-safe (no shared state).
 */
#ifndef KILN_NPY_H_
#define KILN_NPY_H_

#include "kiln/array.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads |path| into *out, allocated with |allocator| (the caller frees it
 * with kiln_array_free). Errors: NOT_FOUND / IO_ERROR, PARSE_ERROR for a bad
 * or truncated file, UNSUPPORTED dtype, order or rank, and the allocation's
 * errors. */
KILN_API kiln_status_t kiln_npy_read(const char* path, kiln_allocator_t allocator,
                                     kiln_array_t* out);
/* Writes |arr| to |path| (replacing it). Errors: INVALID_ARGUMENT for a dtype
 * .npy cannot hold, IO_ERROR. */
KILN_API kiln_status_t kiln_npy_write(const char* path, const kiln_array_t* arr);

#ifdef __cplusplus
}
#endif
#endif
