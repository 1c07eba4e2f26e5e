/* NumPy .npy read/write (format versions 1.0-3.0, C order, little endian).
 * Supported dtypes: <f4 <f2 |i1 |u1 <i4 <i8 |b1; <f8 is read and converted
 * to f32. Errors name the file. */
#ifndef KILN_RUNTIME_NPY_H_
#define KILN_RUNTIME_NPY_H_

#include "kiln/array.h"

#ifdef __cplusplus
extern "C" {
#endif

kiln_status_t kiln_npy_read(const char* path, kiln_allocator_t allocator,
                            kiln_array_t* out);
kiln_status_t kiln_npy_write(const char* path, const kiln_array_t* arr);

#ifdef __cplusplus
}
#endif
#endif
