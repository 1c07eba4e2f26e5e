/* kiln npy: NumPy .npy read/write (format versions 1.0-3.0, C order, little
 * endian), part of libkiln_rt so an application can feed a module's inputs
 * and keep its outputs as files.
 * Supported dtypes: <f4 <f2 <f8 |i1 |u1 <i2 <u2 <i4 <u4 <i8 <u8 |b1; <f8 is
 * read as f64 unless kiln_npy_read_options_t asks for f32 or a refusal. Errors name the file. Thread-safe (no shared state).
 */
#ifndef KILN_NPY_H_
#define KILN_NPY_H_

#include "kiln/array.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The array cap kiln_npy_read applies (and kiln_npy_read_with when
 * max_bytes is 0): 16 GiB, the ONNX frontend's default total-weights cap. */
#define KILN_NPY_DEFAULT_MAX_BYTES (16ull << 30)

typedef struct kiln_npy_read_options_s {
  /* Cap on the array's bytes (as stored in memory, after any conversion);
   * 0: KILN_NPY_DEFAULT_MAX_BYTES. */
  uint64_t max_bytes;
  /* <f8 data is read as f64 by default. refuse_f64 refuses it
   * (UNSUPPORTED); otherwise f64_to_f32 rounds it to f32 and sets
   * *out_converted_f64 (for feeding an f32 input from numpy's default
   * float64). */
  bool refuse_f64;
  bool f64_to_f32;
} kiln_npy_read_options_t;

/* Reads |path| into *out, allocated with |allocator| (the caller frees it
 * with kiln_array_free). The header's shape is checked before anything is
 * allocated: a byte size that overflows or passes the cap is LIMIT_EXCEEDED,
 * a regular file shorter than the header claims is PARSE_ERROR. |options|
 * may be NULL (defaults above). |out_converted_f64| (optional) is set true
 * when <f8 data was converted to f32 (f64_to_f32), false otherwise. Errors: NOT_FOUND /
 * IO_ERROR, PARSE_ERROR for a bad or truncated file, UNSUPPORTED dtype, order
 * or rank, LIMIT_EXCEEDED, and the allocation's errors; all name the file. */
KILN_API kiln_status_t kiln_npy_read_with(const char* path, const kiln_npy_read_options_t* options,
                                          kiln_allocator_t allocator, kiln_array_t* out,
                                          bool* out_converted_f64);
/* kiln_npy_read_with(path, NULL, allocator, out, NULL). */
KILN_API kiln_status_t kiln_npy_read(const char* path, kiln_allocator_t allocator,
                                     kiln_array_t* out);
/* Writes |arr| to |path| (replacing it). Errors: INVALID_ARGUMENT for a dtype
 * .npy cannot hold, IO_ERROR. */
KILN_API kiln_status_t kiln_npy_write(const char* path, const kiln_array_t* arr);

#ifdef __cplusplus
}
#endif
#endif
