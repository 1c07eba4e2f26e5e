/* Element types, fp16 conversion, shapes, host arrays and the system
 * allocator. */
#include "kiln/array.h"

#include "ir/f8.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- allocator ------------------------------------------------------- */

static void* sys_alloc(void* self, size_t size) { return calloc(1, size); }
static void* sys_realloc(void* self, void* p, size_t size) {
  return realloc(p, size);
}
static void sys_free(void* self, void* p) { free(p); }

kiln_allocator_t kiln_allocator_system(void) {
  kiln_allocator_t a = {NULL, sys_alloc, sys_realloc, sys_free};
  return a;
}

kiln_status_t kiln_allocator_malloc(kiln_allocator_t a, size_t size,
                                    const char* what, void** out_ptr) {
  void* p = a.alloc(a.self, size ? size : 1);
  if (!p)
    return kiln_make_status(KILN_OUT_OF_MEMORY,
                            "out of memory allocating %zu bytes for %s", size,
                            what ? what : "a buffer");
  /* Custom allocators need not zero; kiln relies on zeroed memory. */
  if (a.alloc != sys_alloc) memset(p, 0, size ? size : 1);
  *out_ptr = p;
  return NULL;
}

kiln_status_t kiln_allocator_realloc(kiln_allocator_t a, size_t size,
                                     const char* what, void** inout_ptr) {
  void* p = a.realloc(a.self, *inout_ptr, size ? size : 1);
  if (!p)
    return kiln_make_status(KILN_OUT_OF_MEMORY,
                            "out of memory growing %s to %zu bytes",
                            what ? what : "a buffer", size);
  *inout_ptr = p;
  return NULL;
}

void kiln_allocator_free(kiln_allocator_t a, void* ptr) {
  if (ptr) a.free(a.self, ptr);
}

/* ---- dtypes ---------------------------------------------------------- */

/* Tables indexed by kiln_dtype_t (smaller in libkiln_rt than switches). */
static const uint8_t k_dtype_size[KILN_DTYPE_COUNT_] = {0, 4, 2, 1, 1, 4, 8, 1, 8, 2, 2, 4, 8,
                                                        1, 1, 1, 1, 1, 1};
static const char k_dtype_name[KILN_DTYPE_COUNT_][11] = {
    "undefined", "f32", "f16", "i8", "u8", "i32", "i64", "bool", "f64", "i16", "u16", "u32", "u64",
    "f8e4m3fn", "f8e4m3fnuz", "f8e5m2", "f8e5m2fnuz", "i4", "u4"};
/* ONNX TensorProto.DataType of each kiln dtype, and back (0: none) */
static const uint8_t k_to_onnx[KILN_DTYPE_COUNT_] = {0, 1, 10, 3, 2, 6, 7, 9, 11, 5, 4, 12, 13,
                                                     17, 18, 19, 20, 22, 21};
static const uint8_t k_from_onnx[23] = {0, 1, 4, 3, 10, 9, 5, 6, 0, 7, 2, 8, 11, 12,
                                        0, 0, 0, 13, 14, 15, 16, 18, 17};

size_t kiln_dtype_size(kiln_dtype_t t) {
  return (unsigned)t < KILN_DTYPE_COUNT_ ? k_dtype_size[t] : 0;
}

const char* kiln_dtype_name(kiln_dtype_t t) {
  return (unsigned)t < KILN_DTYPE_COUNT_ ? k_dtype_name[t] : k_dtype_name[0];
}

bool kiln_dtype_is_float(kiln_dtype_t t) {
  return t == KILN_DTYPE_F32 || t == KILN_DTYPE_F16 || t == KILN_DTYPE_F64;
}
bool kiln_dtype_is_int(kiln_dtype_t t) {
  return t == KILN_DTYPE_I8 || t == KILN_DTYPE_U8 || t == KILN_DTYPE_I32 ||
         t == KILN_DTYPE_I64 || t == KILN_DTYPE_I16 || t == KILN_DTYPE_U16 ||
         t == KILN_DTYPE_U32 || t == KILN_DTYPE_U64;
}
bool kiln_dtype_is_unsigned(kiln_dtype_t t) {
  return t == KILN_DTYPE_U8 || t == KILN_DTYPE_U16 || t == KILN_DTYPE_U32 ||
         t == KILN_DTYPE_U64;
}

kiln_dtype_t kiln_dtype_from_onnx(int32_t v) {
  return (uint32_t)v < sizeof k_from_onnx ? (kiln_dtype_t)k_from_onnx[v] : KILN_DTYPE_UNDEFINED;
}

int32_t kiln_dtype_to_onnx(kiln_dtype_t t) {
  return (unsigned)t < KILN_DTYPE_COUNT_ ? k_to_onnx[t] : 0;
}

const char* kiln_onnx_dtype_name(int32_t v) {
  static const char* names[] = {
      "UNDEFINED", "FLOAT",   "UINT8",     "INT8",         "UINT16",
      "INT16",     "INT32",   "INT64",     "STRING",       "BOOL",
      "FLOAT16",   "DOUBLE",  "UINT32",    "UINT64",       "COMPLEX64",
      "COMPLEX128", "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ",
      "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4", "INT4", "FLOAT4E2M1"};
  if (v >= 0 && v < (int32_t)(sizeof(names) / sizeof(names[0])))
    return names[v];
  return "UNKNOWN";
}

/* ---- fp16 ------------------------------------------------------------ */

float kiln_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else { /* subnormal: renormalise */
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while (!(man & 0x400));
      bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t kiln_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t exp = (x >> 23) & 0xff;
  uint32_t man = x & 0x7fffff;
  if (exp == 0xff) /* inf / nan (keep nan quiet) */
    return (uint16_t)(sign | 0x7c00 | (man ? 0x200 | (man >> 13) : 0));
  int32_t e = (int32_t)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    man |= 0x800000;
    uint32_t shift = (uint32_t)(14 - e);
    uint32_t half = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return (uint16_t)(sign | half);
  }
  uint32_t half = ((uint32_t)e << 10) | (man >> 13);
  uint32_t rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half; /* may carry into exp: fine */
  return (uint16_t)(sign | half);
}

/* ---- element access -------------------------------------------------- */

double kiln_load_f64(kiln_dtype_t t, const void* d, size_t i) {
  if (kiln_dtype_is_f8(t)) return kiln_f8_to_f32(t, ((const uint8_t*)d)[i]);
  if (kiln_dtype_is_int4(t)) t = kiln_dtype_storage(t); /* one value a byte */
  switch (t) {
    case KILN_DTYPE_F32: return ((const float*)d)[i];
    case KILN_DTYPE_F16: return kiln_f16_to_f32(((const uint16_t*)d)[i]);
    case KILN_DTYPE_I8: return ((const int8_t*)d)[i];
    case KILN_DTYPE_U8: return ((const uint8_t*)d)[i];
    case KILN_DTYPE_I32: return ((const int32_t*)d)[i];
    case KILN_DTYPE_I64: return (double)((const int64_t*)d)[i];
    case KILN_DTYPE_BOOL: return ((const uint8_t*)d)[i] ? 1.0 : 0.0;
    case KILN_DTYPE_F64: return ((const double*)d)[i];
    case KILN_DTYPE_I16: return ((const int16_t*)d)[i];
    case KILN_DTYPE_U16: return ((const uint16_t*)d)[i];
    case KILN_DTYPE_U32: return ((const uint32_t*)d)[i];
    case KILN_DTYPE_U64: return (double)((const uint64_t*)d)[i];
    default: return 0.0;
  }
}

static int64_t sat_i64(double v) {
  if (isnan(v)) return 0;
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return (int64_t)v;
}

/* u64 values above INT64_MAX keep their magnitude (not sat_i64's clamp). */
static uint64_t sat_u64(double v) {
  if (v >= 9.2233720368547758e18) {
    return v >= 1.8446744073709552e19 ? UINT64_MAX : (uint64_t)v;
  }
  return (uint64_t)sat_i64(v);
}

void kiln_store_f64(kiln_dtype_t t, void* d, size_t i, double v) {
  if (kiln_dtype_is_f8(t)) {
    ((uint8_t*)d)[i] = kiln_f32_to_f8(t, (float)v, true);
    return;
  }
  switch (t) {
    case KILN_DTYPE_F32: ((float*)d)[i] = (float)v; break;
    case KILN_DTYPE_F16: ((uint16_t*)d)[i] = kiln_f32_to_f16((float)v); break;
    case KILN_DTYPE_I8: ((int8_t*)d)[i] = (int8_t)sat_i64(v); break;
    case KILN_DTYPE_U8: ((uint8_t*)d)[i] = (uint8_t)sat_i64(v); break;
    case KILN_DTYPE_I32: ((int32_t*)d)[i] = (int32_t)sat_i64(v); break;
    case KILN_DTYPE_I64: ((int64_t*)d)[i] = sat_i64(v); break;
    case KILN_DTYPE_BOOL: ((uint8_t*)d)[i] = v != 0.0; break;
    case KILN_DTYPE_F64: ((double*)d)[i] = v; break;
    case KILN_DTYPE_I16: ((int16_t*)d)[i] = (int16_t)sat_i64(v); break;
    case KILN_DTYPE_U16: ((uint16_t*)d)[i] = (uint16_t)sat_i64(v); break;
    case KILN_DTYPE_U32: ((uint32_t*)d)[i] = (uint32_t)sat_i64(v); break;
    case KILN_DTYPE_U64: ((uint64_t*)d)[i] = sat_u64(v); break;
    case KILN_DTYPE_I4:
    case KILN_DTYPE_U4: kiln_store_i64(t, d, i, sat_i64(v)); break;
    default: break;
  }
}

int64_t kiln_load_i64(kiln_dtype_t t, const void* d, size_t i) {
  if (kiln_dtype_is_f8(t)) return sat_i64(kiln_f8_to_f32(t, ((const uint8_t*)d)[i]));
  if (kiln_dtype_is_int4(t)) t = kiln_dtype_storage(t); /* one value a byte */
  switch (t) {
    case KILN_DTYPE_F32: return sat_i64(((const float*)d)[i]);
    case KILN_DTYPE_F16: return sat_i64(kiln_f16_to_f32(((const uint16_t*)d)[i]));
    case KILN_DTYPE_I8: return ((const int8_t*)d)[i];
    case KILN_DTYPE_U8: return ((const uint8_t*)d)[i];
    case KILN_DTYPE_I32: return ((const int32_t*)d)[i];
    case KILN_DTYPE_I64: return ((const int64_t*)d)[i];
    case KILN_DTYPE_BOOL: return ((const uint8_t*)d)[i] != 0;
    case KILN_DTYPE_F64: return sat_i64(((const double*)d)[i]);
    case KILN_DTYPE_I16: return ((const int16_t*)d)[i];
    case KILN_DTYPE_U16: return ((const uint16_t*)d)[i];
    case KILN_DTYPE_U32: return ((const uint32_t*)d)[i];
    /* u64 keeps its bits: values above INT64_MAX read as negative, which
     * wraps back exactly on kiln_store_i64. */
    case KILN_DTYPE_U64: return (int64_t)((const uint64_t*)d)[i];
    default: return 0;
  }
}

void kiln_store_i64(kiln_dtype_t t, void* d, size_t i, int64_t v) {
  if (kiln_dtype_is_f8(t)) {
    ((uint8_t*)d)[i] = kiln_f32_to_f8(t, (float)v, true);
    return;
  }
  switch (t) {
    case KILN_DTYPE_F32: ((float*)d)[i] = (float)v; break;
    case KILN_DTYPE_F16: ((uint16_t*)d)[i] = kiln_f32_to_f16((float)v); break;
    case KILN_DTYPE_I8: ((int8_t*)d)[i] = (int8_t)v; break;
    case KILN_DTYPE_U8: ((uint8_t*)d)[i] = (uint8_t)v; break;
    case KILN_DTYPE_I32: ((int32_t*)d)[i] = (int32_t)v; break;
    case KILN_DTYPE_I64: ((int64_t*)d)[i] = v; break;
    case KILN_DTYPE_BOOL: ((uint8_t*)d)[i] = v != 0; break;
    case KILN_DTYPE_F64: ((double*)d)[i] = (double)v; break;
    case KILN_DTYPE_I16: ((int16_t*)d)[i] = (int16_t)v; break;
    case KILN_DTYPE_U16: ((uint16_t*)d)[i] = (uint16_t)v; break;
    case KILN_DTYPE_U32: ((uint32_t*)d)[i] = (uint32_t)v; break;
    case KILN_DTYPE_U64: ((uint64_t*)d)[i] = (uint64_t)v; break;
    /* 4-bit: the low four bits, sign-extended for i4 (wraps as i8 does) */
    case KILN_DTYPE_I4: ((int8_t*)d)[i] = (int8_t)(((v & 0xF) ^ 8) - 8); break;
    case KILN_DTYPE_U4: ((uint8_t*)d)[i] = (uint8_t)(v & 0xF); break;
    default: break;
  }
}

/* ---- shapes ---------------------------------------------------------- */

kiln_shape_t kiln_shape_make(int32_t rank, const int64_t* dims) {
  kiln_shape_t s = kiln_shape_unknown();
  KILN_ASSERT(rank <= KILN_MAX_RANK);
  s.rank = rank;
  for (int32_t i = 0; i < rank && dims; ++i) s.dims[i] = dims[i];
  return s;
}

bool kiln_shape_is_static(const kiln_shape_t* s) {
  if (s->rank < 0) return false;
  for (int32_t i = 0; i < s->rank; ++i)
    if (s->dims[i] < 0) return false;
  return true;
}

kiln_status_t kiln_shape_numel(const kiln_shape_t* s, int64_t* out) {
  if (!kiln_shape_is_static(s))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "shape is not static");
  int64_t n = 1;
  for (int32_t i = 0; i < s->rank; ++i) {
    int64_t d = s->dims[i];
    if (d != 0 && n > INT64_MAX / d) {
      char buf[160];
      return kiln_make_status(KILN_LIMIT_EXCEEDED,
                              "element count of shape %s overflows int64",
                              kiln_shape_format(s, buf, sizeof buf));
    }
    n *= d;
  }
  *out = n;
  return NULL;
}

int64_t kiln_shape_count(const kiln_shape_t* s) {
  /* Saturates instead of overflowing: callers that need exactness on huge
   * shapes use kiln_shape_numel, which reports the overflow. */
  int64_t n = 1;
  for (int32_t i = 0; i < s->rank; ++i) {
    int64_t d = s->dims[i] < 0 ? 0 : s->dims[i];
    if (__builtin_mul_overflow(n, d, &n)) return INT64_MAX;
  }
  return n;
}

bool kiln_shape_equal(const kiln_shape_t* a, const kiln_shape_t* b) {
  if (a->rank != b->rank) return false;
  for (int32_t i = 0; i < a->rank; ++i)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

char* kiln_shape_format(const kiln_shape_t* s, char* buf, size_t n) {
  if (!n) return buf;
  if (s->rank < 0) {
    snprintf(buf, n, "[?rank]");
    return buf;
  }
  size_t o = 0;
  o += (size_t)snprintf(buf + o, o < n ? n - o : 0, "[");
  for (int32_t i = 0; i < s->rank; ++i) {
    const char* sep = i ? "," : "";
    int64_t d = s->dims[i];
    if (d >= 0)
      o += (size_t)snprintf(buf + o, o < n ? n - o : 0, "%s%lld", sep, (long long)d);
    else if (d == KILN_DIM_UNKNOWN)
      o += (size_t)snprintf(buf + o, o < n ? n - o : 0, "%s?", sep);
    else
      o += (size_t)snprintf(buf + o, o < n ? n - o : 0, "%s$%d", sep, kiln_dim_symbol(d));
  }
  snprintf(buf + (o < n ? o : n - 1), o < n ? n - o : 1, "]");
  return buf;
}

/* ---- arrays ---------------------------------------------------------- */

kiln_status_t kiln_array_alloc(kiln_allocator_t a, kiln_dtype_t dtype,
                               const kiln_shape_t* shape, kiln_array_t* out) {
  memset(out, 0, sizeof(*out));
  size_t es = kiln_dtype_size(dtype);
  if (!es)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "array of undefined dtype");
  int64_t n;
  KILN_RETURN_IF_ERROR(kiln_shape_numel(shape, &n));
  if ((uint64_t)n > SIZE_MAX / es) {
    char buf[160];
    return kiln_make_status(KILN_LIMIT_EXCEEDED, "%s array %s is too large",
                            kiln_dtype_name(dtype),
                            kiln_shape_format(shape, buf, sizeof buf));
  }
  size_t bytes = (size_t)n * es;
  void* p = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(a, bytes, "array", &p));
  out->dtype = dtype;
  out->shape = *shape;
  out->data = p;
  out->nbytes = bytes;
  return NULL;
}

void kiln_array_free(kiln_allocator_t a, kiln_array_t* arr) {
  if (!arr) return;
  kiln_allocator_free(a, arr->data);
  memset(arr, 0, sizeof(*arr));
}

kiln_status_t kiln_array_clone(kiln_allocator_t a, const kiln_array_t* src,
                               kiln_array_t* out) {
  KILN_RETURN_IF_ERROR(kiln_array_alloc(a, src->dtype, &src->shape, out));
  if (src->nbytes) memcpy(out->data, src->data, src->nbytes);
  return NULL;
}
