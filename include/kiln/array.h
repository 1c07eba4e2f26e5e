/* kiln arrays: element types, shapes, allocators and host n-d arrays.
 *
 * kiln_dtype_t is kiln's element type (a subset of ONNX's).
 * kiln_shape_t is a fixed-capacity shape; dims >= 0 are known sizes,
 * KILN_DIM_UNKNOWN is an anonymous unknown and other negative values name a
 * symbolic dimension (a graph's dim_param) -- see kiln_dim_symbol().
 * kiln_array_t is a concrete host array (all dims known) whose data is owned
 * by whoever allocated it (kiln_array_alloc / kiln_array_free).
 *
 * The allocator is a small struct passed by value into every _create; the
 * system allocator wraps malloc. Tests pass failing allocators to check that
 * out-of-memory is reported and nothing leaks.
 */
#ifndef KILN_ARRAY_H_
#define KILN_ARRAY_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- allocator ------------------------------------------------------- */

typedef struct kiln_allocator_s {
  void* self;
  /* Returns NULL on failure. |size| > 0. */
  void* (*alloc)(void* self, size_t size);
  /* realloc semantics; returns NULL on failure leaving |ptr| valid. */
  void* (*realloc)(void* self, void* ptr, size_t size);
  void (*free)(void* self, void* ptr);
} kiln_allocator_t;

KILN_API kiln_allocator_t kiln_allocator_system(void);

/* Allocates |size| bytes (zeroed) into *out_ptr; an OUT_OF_MEMORY status
 * naming |size| and |what| on failure. size 0 allocates 1 byte. */
KILN_API kiln_status_t kiln_allocator_malloc(kiln_allocator_t a, size_t size,
                                             const char* what, void** out_ptr);
KILN_API kiln_status_t kiln_allocator_realloc(kiln_allocator_t a, size_t size,
                                              const char* what, void** inout_ptr);
KILN_API void kiln_allocator_free(kiln_allocator_t a, void* ptr);

/* ---- element types --------------------------------------------------- */

typedef enum kiln_dtype_e {
  KILN_DTYPE_UNDEFINED = 0,
  KILN_DTYPE_F32 = 1,
  KILN_DTYPE_F16 = 2,
  KILN_DTYPE_I8 = 3,
  KILN_DTYPE_U8 = 4,
  KILN_DTYPE_I32 = 5,
  KILN_DTYPE_I64 = 6,
  KILN_DTYPE_BOOL = 7,
  /* Appended later: the codes above are stored in .kiln modules and must
   * not change. */
  KILN_DTYPE_F64 = 8,
  KILN_DTYPE_I16 = 9,
  KILN_DTYPE_U16 = 10,
  KILN_DTYPE_U32 = 11,
  KILN_DTYPE_U64 = 12,
  /* float8 (ONNX FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ:
   * the bits, one byte each) and 4-bit integers (ONNX INT4, UINT4). Inside
   * kiln an int4/uint4 element takes one byte, holding its value
   * sign-/zero-extended; ONNX files pack them two a byte, low nibble first,
   * and the frontend unpacks them (docs/DESIGN.md, "float8 and int4"). Only
   * QuantizeLinear, DequantizeLinear, Cast and CastLike compute on them. */
  KILN_DTYPE_F8E4M3FN = 13,
  KILN_DTYPE_F8E4M3FNUZ = 14,
  KILN_DTYPE_F8E5M2 = 15,
  KILN_DTYPE_F8E5M2FNUZ = 16,
  KILN_DTYPE_I4 = 17,
  KILN_DTYPE_U4 = 18,
  KILN_DTYPE_COUNT_
} kiln_dtype_t;

KILN_API size_t kiln_dtype_size(kiln_dtype_t t);      /* 0 for UNDEFINED */
KILN_API const char* kiln_dtype_name(kiln_dtype_t t); /* "f32", ... */
KILN_API bool kiln_dtype_is_float(kiln_dtype_t t);    /* f32, f16, f64 */
/* i8 u8 i16 u16 i32 u32 i64 u64 (not bool) */
KILN_API bool kiln_dtype_is_int(kiln_dtype_t t);
KILN_API bool kiln_dtype_is_unsigned(kiln_dtype_t t); /* u8 u16 u32 u64 */
/* ONNX TensorProto.DataType <-> kiln; UNDEFINED when kiln lacks it. */
KILN_API kiln_dtype_t kiln_dtype_from_onnx(int32_t onnx_type);
KILN_API int32_t kiln_dtype_to_onnx(kiln_dtype_t t);
/* Name of an ONNX data type number, for messages ("DOUBLE", "STRING"...). */
KILN_API const char* kiln_onnx_dtype_name(int32_t onnx_type);

static inline bool kiln_dtype_is_f8(kiln_dtype_t t) {
  return t >= KILN_DTYPE_F8E4M3FN && t <= KILN_DTYPE_F8E5M2FNUZ;
}
static inline bool kiln_dtype_is_int4(kiln_dtype_t t) {
  return t == KILN_DTYPE_I4 || t == KILN_DTYPE_U4;
}
/* The dtype kernels store an element of |t| as: u8 for float8 (the bits),
 * i8 / u8 for int4 / uint4 (the value), |t| itself otherwise. */
static inline kiln_dtype_t kiln_dtype_storage(kiln_dtype_t t) {
  return kiln_dtype_is_f8(t) || t == KILN_DTYPE_U4 ? KILN_DTYPE_U8
         : t == KILN_DTYPE_I4                      ? KILN_DTYPE_I8
                                                   : t;
}

/* IEEE half <-> float, round to nearest even. */
KILN_API float kiln_f16_to_f32(uint16_t h);
KILN_API uint16_t kiln_f32_to_f16(float f);

/* Reads element |i| of |data| (type |t|) as double / writes a double,
 * converting (ints truncate toward zero, bool is != 0; int4 / uint4 as
 * the value their byte holds, stored wrapped to 4 bits; float8 decoded,
 * and encoded to nearest even, saturating as ONNX Cast's default).
 * For reference kernels and comparisons, not for speed. */
KILN_API double kiln_load_f64(kiln_dtype_t t, const void* data, size_t i);
KILN_API void kiln_store_f64(kiln_dtype_t t, void* data, size_t i, double v);
KILN_API int64_t kiln_load_i64(kiln_dtype_t t, const void* data, size_t i);
KILN_API void kiln_store_i64(kiln_dtype_t t, void* data, size_t i, int64_t v);

/* ---- shapes ---------------------------------------------------------- */

#define KILN_MAX_RANK 8
#define KILN_DIM_UNKNOWN INT64_MIN

typedef struct kiln_shape_s {
  int32_t rank; /* -1: rank unknown */
  int64_t dims[KILN_MAX_RANK];
} kiln_shape_t;

static inline bool kiln_dim_known(int64_t d) { return d >= 0; }
/* Symbol index (>= 1) of a symbolic dim, 0 for known or anonymous unknown. */
static inline int32_t kiln_dim_symbol(int64_t d) {
  return (d < 0 && d != KILN_DIM_UNKNOWN) ? (int32_t)(-d) : 0;
}
static inline int64_t kiln_dim_from_symbol(int32_t sym) { return -(int64_t)sym; }

KILN_API kiln_shape_t kiln_shape_make(int32_t rank, const int64_t* dims);
static inline kiln_shape_t kiln_shape_unknown(void) {
  kiln_shape_t s;
  s.rank = -1;
  for (int i = 0; i < KILN_MAX_RANK; ++i) s.dims[i] = KILN_DIM_UNKNOWN;
  return s;
}
/* True when the rank and every dim are known. */
KILN_API bool kiln_shape_is_static(const kiln_shape_t* s);
/* Product of dims; fails with LIMIT_EXCEEDED on int64 overflow or when the
 * shape is not static. */
KILN_API kiln_status_t kiln_shape_numel(const kiln_shape_t* s, int64_t* out_numel);
/* Product of dims for a static shape (caller guarantees no overflow). */
KILN_API int64_t kiln_shape_count(const kiln_shape_t* s);
KILN_API bool kiln_shape_equal(const kiln_shape_t* a, const kiln_shape_t* b);
/* "[1,3,224,224]", symbolic dims printed as their index ("?N" needs the
 * graph; see kiln_graph_format_shape). Returns |buf|. */
KILN_API char* kiln_shape_format(const kiln_shape_t* s, char* buf, size_t n);

/* ---- host arrays ----------------------------------------------------- */

typedef struct kiln_array_s {
  kiln_dtype_t dtype;
  kiln_shape_t shape; /* static */
  void* data;
  size_t nbytes;
} kiln_array_t;

/* Allocates zeroed storage for |shape| (must be static) into |out|. Checks
 * the element count and byte size for overflow. */
KILN_API kiln_status_t kiln_array_alloc(kiln_allocator_t a, kiln_dtype_t dtype,
                                        const kiln_shape_t* shape, kiln_array_t* out);
/* Frees |arr|->data and zeroes |arr|. NULL or empty arrays are fine. */
KILN_API void kiln_array_free(kiln_allocator_t a, kiln_array_t* arr);
/* Deep copy. */
KILN_API kiln_status_t kiln_array_clone(kiln_allocator_t a, const kiln_array_t* src,
                                        kiln_array_t* out);
static inline int64_t kiln_array_numel(const kiln_array_t* arr) {
  return kiln_shape_count(&arr->shape);
}

#ifdef __cplusplus
}
#endif
#endif /* KILN_ARRAY_H_ */
