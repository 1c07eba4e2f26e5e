/* Unit tests of kiln's core value types: statuses, dtypes and fp16
 * conversion, shapes, host arrays and allocators, the arena, .npy files and
 * array comparison (include/kiln/status.h, include/kiln/array.h, ir/arena.h,
 * runtime/npy.h, compiler/compare.h). */
#define _GNU_SOURCE
#include <float.h>
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ir/arena.h"
#include "kiln/array.h"
#include "kiln/status.h"
#include "compiler/compare.h"
#include "kiln/npy.h"
#include "testing.h"

#define SHAPE(...)                                                                 \
  kiln_shape_make((int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), \
                  (int64_t[]){__VA_ARGS__})

static kiln_allocator_t sys(void) { return kiln_allocator_system(); }

/* ---- a counting allocator (also used to inject failures) -------------- */

typedef struct {
  int64_t live_bytes, peak_bytes, n_alloc, n_free;
  int64_t fail_after; /* allocations left before failing; -1 = never */
} counter_t;

static void* c_alloc(void* self, size_t size) {
  counter_t* c = self;
  if (c->fail_after == 0) return NULL;
  if (c->fail_after > 0) --c->fail_after;
  size_t* p = malloc(size + 16);
  if (!p) return NULL;
  p[0] = size;
  /* Poison: kiln must zero custom-allocator memory itself. */
  memset(p + 2, 0xAB, size);
  c->live_bytes += (int64_t)size;
  if (c->live_bytes > c->peak_bytes) c->peak_bytes = c->live_bytes;
  c->n_alloc++;
  return p + 2;
}

static void* c_realloc(void* self, void* ptr, size_t size) {
  counter_t* c = self;
  if (!ptr) return c_alloc(self, size);
  if (c->fail_after == 0) return NULL;
  size_t* old = (size_t*)ptr - 2;
  size_t old_size = old[0];
  size_t* p = realloc(old, size + 16);
  if (!p) return NULL;
  p[0] = size;
  c->live_bytes += (int64_t)size - (int64_t)old_size;
  if (c->live_bytes > c->peak_bytes) c->peak_bytes = c->live_bytes;
  return p + 2;
}

static void c_free(void* self, void* ptr) {
  counter_t* c = self;
  if (!ptr) return;
  size_t* p = (size_t*)ptr - 2;
  c->live_bytes -= (int64_t)p[0];
  c->n_free++;
  free(p);
}

static kiln_allocator_t counting(counter_t* c) {
  memset(c, 0, sizeof *c);
  c->fail_after = -1;
  kiln_allocator_t a = {c, c_alloc, c_realloc, c_free};
  return a;
}

/* ---- temp folders ------------------------------------------------------ */

static int rm_one(const char* p, const struct stat* sb, int flag, struct FTW* ftw) {
  return remove(p);
}

static void rm_rf(const char* dir) { nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static char tmpdir[64];

static const char* tmp_path(const char* name) {
  static char buf[8][256];
  static int k = 0;
  k = (k + 1) % 8;
  snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
  return buf[k];
}

static void write_bytes(const char* path, const void* data, size_t n) {
  FILE* f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  CHECK(fwrite(data, 1, n, f) == n);
  fclose(f);
}

static size_t read_bytes(const char* path, void* data, size_t cap) {
  FILE* f = fopen(path, "rb");
  CHECK(f != NULL);
  if (!f) return 0;
  size_t n = fread(data, 1, cap, f);
  fclose(f);
  return n;
}

/* ---- status ------------------------------------------------------------ */

static kiln_status_t fails_with(int code) {
  return kiln_make_status((kiln_status_code_t)code, "inner %d", code);
}

static kiln_status_t propagate(int code) {
  KILN_RETURN_IF_ERROR(fails_with(code), "layer '%s'", "conv1");
  return NULL;
}

static kiln_status_t propagate_plain(int code) {
  KILN_RETURN_IF_ERROR(fails_with(code));
  return NULL;
}

static void test_status(void) {
  kiln_status_t s = kiln_make_status(KILN_NOT_FOUND, "tensor '%s' of %d", "w", 3);
  CHECK(s != NULL);
  CHECK(kiln_status_code(s) == KILN_NOT_FOUND);
  CHECK(strcmp(kiln_status_message(s), "tensor 'w' of 3") == 0);
  s = kiln_status_annotate(s, "node '%s'", "conv");
  s = kiln_status_annotate(s, "%s", "m.onnx");
  CHECK_MSG(strcmp(kiln_status_message(s), "m.onnx: node 'conv': tensor 'w' of 3") == 0,
            "annotated message is '%s'", kiln_status_message(s));
  CHECK(kiln_status_code(s) == KILN_NOT_FOUND); /* annotation keeps the code */
  /* An empty context leaves the message alone -- both an empty format and
   * one that formats to "" (KILN_RETURN_IF_ERROR(f(), "%s", path) with an
   * empty path must not prefix ": "). */
  s = kiln_status_annotate(s, "");
  CHECK(strcmp(kiln_status_message(s), "m.onnx: node 'conv': tensor 'w' of 3") == 0);
  s = kiln_status_annotate(s, "%s", "");
  CHECK_MSG(strcmp(kiln_status_message(s), "m.onnx: node 'conv': tensor 'w' of 3") == 0,
            "annotating with a context that formats to \"\" gave '%s'", kiln_status_message(s));
  kiln_status_free(s);

  /* NULL handling: NULL is OK everywhere. */
  CHECK(kiln_status_annotate(NULL, "context %d", 1) == NULL);
  CHECK(kiln_status_code(NULL) == KILN_OK);
  CHECK(strcmp(kiln_status_message(NULL), "OK") == 0);
  kiln_status_free(NULL);

  /* KILN_OK is not an error code: it becomes INTERNAL, never NULL. */
  s = kiln_make_status(KILN_OK, "oops");
  CHECK(s != NULL);
  CHECK(kiln_status_code(s) == KILN_INTERNAL);
  kiln_status_free(s);

  /* Long messages are kept whole. */
  char big[5000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = 0;
  s = kiln_make_status(KILN_PARSE_ERROR, "%s|end", big);
  CHECK(strlen(kiln_status_message(s)) == sizeof big - 1 + 4);
  CHECK(strstr(kiln_status_message(s), "|end") != NULL);
  kiln_status_free(s);

  /* KILN_RETURN_IF_ERROR with and without context. */
  CHECK_ERR(propagate(KILN_IO_ERROR), KILN_IO_ERROR, "layer 'conv1': inner 8");
  s = propagate_plain(KILN_OUT_OF_RANGE);
  CHECK(kiln_status_code(s) == KILN_OUT_OF_RANGE);
  CHECK(strcmp(kiln_status_message(s), "inner 7") == 0);
  kiln_status_free(s);

  /* kiln_make_status_v. */
  s = fails_with(KILN_DEVICE_ERROR);
  CHECK(strcmp(kiln_status_message(s), "inner 10") == 0);
  kiln_status_free(s);
}

static void test_status_code_names(void) {
  static const struct {
    kiln_status_code_t code;
    const char* name;
  } want[] = {
      {KILN_OK, "OK"},
      {KILN_INVALID_ARGUMENT, "INVALID_ARGUMENT"},
      {KILN_NOT_FOUND, "NOT_FOUND"},
      {KILN_UNSUPPORTED, "UNSUPPORTED"},
      {KILN_PARSE_ERROR, "PARSE_ERROR"},
      {KILN_OUT_OF_MEMORY, "OUT_OF_MEMORY"},
      {KILN_LIMIT_EXCEEDED, "LIMIT_EXCEEDED"},
      {KILN_OUT_OF_RANGE, "OUT_OF_RANGE"},
      {KILN_IO_ERROR, "IO_ERROR"},
      {KILN_PERMISSION_DENIED, "PERMISSION_DENIED"},
      {KILN_DEVICE_ERROR, "DEVICE_ERROR"},
      {KILN_INTERNAL, "INTERNAL"},
      {KILN_CANCELLED, "CANCELLED"},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; ++i)
    CHECK_MSG(strcmp(kiln_status_code_name(want[i].code), want[i].name) == 0,
              "code %d is named '%s', expected '%s'", (int)want[i].code,
              kiln_status_code_name(want[i].code), want[i].name);
  /* Out-of-range codes still get a printable name. */
  CHECK(kiln_status_code_name((kiln_status_code_t)999) != NULL);
  /* Every code round-trips through a status. */
  for (int c = 1; c <= KILN_CANCELLED; ++c) {
    kiln_status_t s = fails_with(c);
    CHECK(kiln_status_code(s) == (kiln_status_code_t)c);
    kiln_status_free(s);
  }
}

/* ---- dtypes ------------------------------------------------------------ */

static void test_dtypes(void) {
  static const struct {
    kiln_dtype_t t;
    size_t size;
    const char* name;
    int32_t onnx;
    bool is_float, is_int;
  } want[] = {
      {KILN_DTYPE_F32, 4, "f32", 1, true, false},  {KILN_DTYPE_F16, 2, "f16", 10, true, false},
      {KILN_DTYPE_I8, 1, "i8", 3, false, true},    {KILN_DTYPE_U8, 1, "u8", 2, false, true},
      {KILN_DTYPE_I32, 4, "i32", 6, false, true},  {KILN_DTYPE_I64, 8, "i64", 7, false, true},
      {KILN_DTYPE_BOOL, 1, "bool", 9, false, false},
      /* appended later, after BOOL: the codes above stay (modules store them) */
      {KILN_DTYPE_F64, 8, "f64", 11, true, false}, {KILN_DTYPE_I16, 2, "i16", 5, false, true},
      {KILN_DTYPE_U16, 2, "u16", 4, false, true},  {KILN_DTYPE_U32, 4, "u32", 12, false, true},
      {KILN_DTYPE_U64, 8, "u64", 13, false, true},
      /* float8 and 4-bit ints: one byte an element inside kiln */
      {KILN_DTYPE_F8E4M3FN, 1, "f8e4m3fn", 17, false, false},
      {KILN_DTYPE_F8E4M3FNUZ, 1, "f8e4m3fnuz", 18, false, false},
      {KILN_DTYPE_F8E5M2, 1, "f8e5m2", 19, false, false},
      {KILN_DTYPE_F8E5M2FNUZ, 1, "f8e5m2fnuz", 20, false, false},
      {KILN_DTYPE_I4, 1, "i4", 22, false, false}, {KILN_DTYPE_U4, 1, "u4", 21, false, false},
  };
  CHECK(KILN_DTYPE_BOOL == 7 && KILN_DTYPE_F64 == 8 && KILN_DTYPE_U64 == 12);
  for (size_t i = 0; i < sizeof want / sizeof want[0]; ++i) {
    CHECK(kiln_dtype_size(want[i].t) == want[i].size);
    CHECK(strcmp(kiln_dtype_name(want[i].t), want[i].name) == 0);
    CHECK(kiln_dtype_to_onnx(want[i].t) == want[i].onnx);
    CHECK(kiln_dtype_from_onnx(want[i].onnx) == want[i].t);
    CHECK(kiln_dtype_is_float(want[i].t) == want[i].is_float);
    CHECK(kiln_dtype_is_int(want[i].t) == want[i].is_int);
  }
  CHECK(kiln_dtype_size(KILN_DTYPE_UNDEFINED) == 0);
  CHECK(kiln_dtype_to_onnx(KILN_DTYPE_UNDEFINED) == 0);
  /* ONNX types kiln lacks map to UNDEFINED: string, complex, bf16... */
  int32_t lacking[] = {0, 8, 14, 15, 16, 23, 999, -1};
  for (size_t i = 0; i < sizeof lacking / sizeof lacking[0]; ++i)
    CHECK_MSG(kiln_dtype_from_onnx(lacking[i]) == KILN_DTYPE_UNDEFINED,
              "onnx type %d maps to %s", lacking[i],
              kiln_dtype_name(kiln_dtype_from_onnx(lacking[i])));
  CHECK(strcmp(kiln_onnx_dtype_name(11), "DOUBLE") == 0);
  CHECK(strcmp(kiln_onnx_dtype_name(8), "STRING") == 0);
  CHECK(strcmp(kiln_onnx_dtype_name(16), "BFLOAT16") == 0);
  CHECK(kiln_onnx_dtype_name(12345) != NULL);
  CHECK(kiln_onnx_dtype_name(-3) != NULL);
}

static void test_element_access(void) {
  /* Floats truncate toward zero into ints and saturate; NaN becomes 0. */
  int32_t i32[4];
  kiln_store_f64(KILN_DTYPE_I32, i32, 0, -2.7);
  kiln_store_f64(KILN_DTYPE_I32, i32, 1, 2.7);
  kiln_store_f64(KILN_DTYPE_I32, i32, 2, NAN);
  kiln_store_f64(KILN_DTYPE_I32, i32, 3, 7.0);
  CHECK(i32[0] == -2 && i32[1] == 2 && i32[2] == 0 && i32[3] == 7);
  int64_t i64[3];
  kiln_store_f64(KILN_DTYPE_I64, i64, 0, 1e300);
  kiln_store_f64(KILN_DTYPE_I64, i64, 1, -1e300);
  kiln_store_f64(KILN_DTYPE_I64, i64, 2, -0.5);
  CHECK(i64[0] == INT64_MAX && i64[1] == INT64_MIN && i64[2] == 0);
  uint8_t b[3];
  kiln_store_f64(KILN_DTYPE_BOOL, b, 0, 0.0);
  kiln_store_f64(KILN_DTYPE_BOOL, b, 1, -3.5);
  kiln_store_i64(KILN_DTYPE_BOOL, b, 2, 256);
  CHECK(b[0] == 0 && b[1] == 1 && b[2] == 1);
  CHECK(kiln_load_f64(KILN_DTYPE_BOOL, (uint8_t[]){7}, 0) == 1.0);
  uint16_t h[2];
  kiln_store_f64(KILN_DTYPE_F16, h, 0, 1.5);
  kiln_store_i64(KILN_DTYPE_F16, h, 1, -3);
  CHECK(h[0] == 0x3E00 && h[1] == 0xC200);
  CHECK(kiln_load_f64(KILN_DTYPE_F16, h, 1) == -3.0);
  CHECK(kiln_load_i64(KILN_DTYPE_F16, h, 0) == 1);
  int8_t s8[1] = {-128};
  CHECK(kiln_load_i64(KILN_DTYPE_I8, s8, 0) == -128);
  CHECK(kiln_load_f64(KILN_DTYPE_U8, (uint8_t[]){255}, 0) == 255.0);
  int64_t big = (int64_t)1 << 62;
  CHECK(kiln_load_i64(KILN_DTYPE_I64, &big, 0) == big); /* exact, not via double */
  float f[1] = {-1e30f};
  CHECK(kiln_load_i64(KILN_DTYPE_F32, f, 0) == INT64_MIN);
}

/* ---- fp16 -------------------------------------------------------------- */

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void test_f16_known_values(void) {
  static const struct {
    uint16_t h;
    float f;
  } v[] = {
      {0x0000, 0.0f},          {0x3C00, 1.0f},           {0xC000, -2.0f},
      {0x3555, 0.333251953125f}, {0x7BFF, 65504.0f},     {0xFBFF, -65504.0f},
      {0x0400, 6.103515625e-05f}, /* smallest normal 2^-14 */
      {0x03FF, 6.097555160522461e-05f}, /* largest subnormal */
      {0x0001, 5.960464477539063e-08f}, /* smallest subnormal 2^-24 */
      {0x8001, -5.960464477539063e-08f}, {0x0200, 3.0517578125e-05f},
      {0x3BFF, 0.99951171875f},  {0x3C01, 1.0009765625f},
  };
  for (size_t i = 0; i < sizeof v / sizeof v[0]; ++i) {
    CHECK_MSG(kiln_f16_to_f32(v[i].h) == v[i].f, "f16 0x%04x -> %.10g, expected %.10g", v[i].h,
              kiln_f16_to_f32(v[i].h), v[i].f);
    CHECK_MSG(kiln_f32_to_f16(v[i].f) == v[i].h, "f32 %.10g -> 0x%04x, expected 0x%04x", v[i].f,
              kiln_f32_to_f16(v[i].f), v[i].h);
  }
  /* Signed zero survives both ways. */
  CHECK(kiln_f32_to_f16(-0.0f) == 0x8000);
  CHECK(f32_bits(kiln_f16_to_f32(0x8000)) == 0x80000000u);
}

static void test_f16_round_trip_exhaustive(void) {
  int bad = 0;
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    float f = kiln_f16_to_f32((uint16_t)h);
    bool nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF);
    if (nan) {
      if (!isnan(f) || !isnan(kiln_f16_to_f32(kiln_f32_to_f16(f)))) ++bad;
      if ((kiln_f32_to_f16(f) & 0x8000) != (h & 0x8000)) ++bad; /* sign kept */
      continue;
    }
    if (kiln_f32_to_f16(f) != h) {
      if (bad < 5)
        kiln_test_fail(__FILE__, __LINE__, "f16 0x%04x -> %.10g -> 0x%04x", h, f,
                       kiln_f32_to_f16(f));
      ++bad;
    }
  }
  CHECK_MSG(bad == 0, "%d f16 values do not round-trip", bad);
}

/* Every value between two adjacent halves must round to the nearer one and
 * ties to the one with an even mantissa; this walks all positive and
 * negative finite pairs, subnormals included. */
static void test_f16_rounding_exhaustive(void) {
  int bad = 0;
  for (uint32_t sign = 0; sign <= 0x8000; sign += 0x8000) {
    for (uint32_t h = 0; h < 0x7BFF; ++h) {
      uint16_t lo = (uint16_t)(sign | h), hi = (uint16_t)(sign | (h + 1));
      float flo = kiln_f16_to_f32(lo), fhi = kiln_f16_to_f32(hi);
      float mid = (float)(((double)flo + (double)fhi) / 2); /* exact in f32 */
      uint16_t even = (h & 1) ? hi : lo;
      uint16_t got_mid = kiln_f32_to_f16(mid);
      uint16_t got_below = kiln_f32_to_f16(nextafterf(mid, flo));
      uint16_t got_above = kiln_f32_to_f16(nextafterf(mid, fhi));
      if (got_mid != even || got_below != lo || got_above != hi) {
        if (bad < 5)
          kiln_test_fail(__FILE__, __LINE__,
                         "between 0x%04x and 0x%04x: mid %.10g -> 0x%04x (want 0x%04x), "
                         "below -> 0x%04x, above -> 0x%04x",
                         lo, hi, mid, got_mid, even, got_below, got_above);
        ++bad;
      }
    }
  }
  CHECK_MSG(bad == 0, "%d f16 rounding cases wrong", bad);
}

static void test_f16_specials(void) {
  /* Overflow: the midpoint between 65504 and 65536 (= inf) goes to inf
   * (65504 has an odd mantissa), anything below it to 65504. */
  CHECK(kiln_f32_to_f16(65520.0f) == 0x7C00);
  CHECK(kiln_f32_to_f16(-65520.0f) == 0xFC00);
  CHECK(kiln_f32_to_f16(nextafterf(65520.0f, 0)) == 0x7BFF);
  CHECK(kiln_f32_to_f16(65536.0f) == 0x7C00);
  CHECK(kiln_f32_to_f16(1e10f) == 0x7C00);
  CHECK(kiln_f32_to_f16(FLT_MAX) == 0x7C00);
  CHECK(kiln_f32_to_f16(-FLT_MAX) == 0xFC00);
  CHECK(kiln_f32_to_f16(INFINITY) == 0x7C00);
  CHECK(kiln_f32_to_f16(-INFINITY) == 0xFC00);
  CHECK(isinf(kiln_f16_to_f32(0x7C00)) && kiln_f16_to_f32(0x7C00) > 0);
  CHECK(isinf(kiln_f16_to_f32(0xFC00)) && kiln_f16_to_f32(0xFC00) < 0);
  /* NaN stays NaN, including f32 NaNs whose payload sits only in the low
   * mantissa bits that f16 drops. */
  uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0x7FBFFFFFu, 0xFF800001u};
  for (size_t i = 0; i < sizeof nans / sizeof nans[0]; ++i) {
    uint16_t h = kiln_f32_to_f16(bits_f32(nans[i]));
    CHECK_MSG((h & 0x7C00) == 0x7C00 && (h & 0x3FF), "NaN 0x%08x -> 0x%04x", nans[i], h);
    CHECK((h & 0x8000) == ((nans[i] >> 16) & 0x8000));
  }
  CHECK(isnan(kiln_f16_to_f32(0x7E00)));
  CHECK(isnan(kiln_f16_to_f32(0xFC01)));
  /* Underflow: below half the smallest subnormal -> signed zero; exactly
   * half ties to even (zero); just above half rounds up to 0x0001. */
  float tiny = 5.960464477539063e-08f; /* 2^-24 */
  CHECK(kiln_f32_to_f16(tiny / 2) == 0x0000);
  CHECK(kiln_f32_to_f16(-tiny / 2) == 0x8000);
  CHECK(kiln_f32_to_f16(nextafterf(tiny / 2, 1)) == 0x0001);
  CHECK(kiln_f32_to_f16(tiny * 1.5f) == 0x0002); /* tie between 1 and 2 -> even */
  CHECK(kiln_f32_to_f16(tiny / 4) == 0x0000);
  CHECK(kiln_f32_to_f16(1e-30f) == 0x0000);
  CHECK(kiln_f32_to_f16(-1e-30f) == 0x8000);
  CHECK(kiln_f32_to_f16(bits_f32(0x00000001u)) == 0x0000); /* f32 subnormal */
  CHECK(kiln_f32_to_f16(bits_f32(0x807FFFFFu)) == 0x8000);
  /* Rounding up out of the subnormal range lands on the smallest normal. */
  CHECK(kiln_f32_to_f16(nextafterf(6.103515625e-05f, 0)) == 0x0400);
  /* Rounding up to the next binade carries into the exponent. */
  CHECK(kiln_f32_to_f16(nextafterf(2.0f, 0)) == 0x4000);
}

/* ---- shapes ------------------------------------------------------------ */

static void test_shapes(void) {
  kiln_shape_t s = SHAPE(2, 3, 4);
  CHECK(s.rank == 3 && s.dims[2] == 4);
  CHECK(kiln_shape_is_static(&s));
  int64_t n = -1;
  CHECK_OK(kiln_shape_numel(&s, &n));
  CHECK(n == 24);
  CHECK(kiln_shape_count(&s) == 24);
  kiln_shape_t scalar = kiln_shape_make(0, NULL);
  CHECK(kiln_shape_is_static(&scalar));
  CHECK_OK(kiln_shape_numel(&scalar, &n));
  CHECK(n == 1);
  kiln_shape_t empty = SHAPE(3, 0, 5);
  CHECK_OK(kiln_shape_numel(&empty, &n));
  CHECK(n == 0);
  /* A zero dim makes any product 0, even with huge dims beside it. */
  kiln_shape_t zero_big = SHAPE(INT64_MAX, 0, INT64_MAX);
  CHECK_OK(kiln_shape_numel(&zero_big, &n));
  CHECK(n == 0);

  /* Overflow is an error, not a wrapped product. */
  kiln_shape_t huge = SHAPE((int64_t)1 << 32, (int64_t)1 << 32);
  CHECK_ERR(kiln_shape_numel(&huge, &n), KILN_LIMIT_EXCEEDED, "overflow");
  kiln_shape_t huge2 = SHAPE(3037000500, 3037000500);
  CHECK_ERR(kiln_shape_numel(&huge2, &n), KILN_LIMIT_EXCEEDED, NULL);
  kiln_shape_t just = SHAPE((int64_t)1 << 31, ((int64_t)1 << 32) - 1);
  CHECK_OK(kiln_shape_numel(&just, &n));
  CHECK(n == (((int64_t)1 << 31) * (((int64_t)1 << 32) - 1)));
  kiln_shape_t max = SHAPE(INT64_MAX, 1);
  CHECK_OK(kiln_shape_numel(&max, &n));
  CHECK(n == INT64_MAX);
  kiln_shape_t over = SHAPE(INT64_MAX, 2);
  CHECK_ERR(kiln_shape_numel(&over, &n), KILN_LIMIT_EXCEEDED, NULL);

  /* Symbolic and unknown dims. */
  kiln_shape_t sym = SHAPE(kiln_dim_from_symbol(2), 3, KILN_DIM_UNKNOWN);
  CHECK(!kiln_shape_is_static(&sym));
  CHECK(kiln_dim_symbol(sym.dims[0]) == 2);
  CHECK(kiln_dim_symbol(sym.dims[1]) == 0);
  CHECK(kiln_dim_symbol(sym.dims[2]) == 0);
  CHECK(!kiln_dim_known(sym.dims[0]) && kiln_dim_known(sym.dims[1]));
  CHECK_ERR(kiln_shape_numel(&sym, &n), -1, "not static");
  kiln_shape_t unk = kiln_shape_unknown();
  CHECK(unk.rank == -1 && !kiln_shape_is_static(&unk));
  kiln_status_t st = kiln_shape_numel(&unk, &n);
  CHECK(st != NULL);
  kiln_status_free(st);

  kiln_shape_t same = SHAPE(2, 3, 4), shorter = SHAPE(2, 3), differs = SHAPE(2, 3, 5);
  kiln_shape_t scalar2 = kiln_shape_make(0, NULL);
  CHECK(kiln_shape_equal(&s, &same));
  CHECK(!kiln_shape_equal(&s, &shorter));
  CHECK(!kiln_shape_equal(&s, &differs));
  CHECK(kiln_shape_equal(&scalar, &scalar2));

  char buf[64];
  CHECK(strcmp(kiln_shape_format(&s, buf, sizeof buf), "[2,3,4]") == 0);
  CHECK(strcmp(kiln_shape_format(&scalar, buf, sizeof buf), "[]") == 0);
  CHECK(strcmp(kiln_shape_format(&sym, buf, sizeof buf), "[$2,3,?]") == 0);
  CHECK(strcmp(kiln_shape_format(&unk, buf, sizeof buf), "[?rank]") == 0);
  /* A short buffer truncates but stays NUL-terminated inside its size. */
  char small[6];
  memset(small, 'Z', sizeof small);
  kiln_shape_t wide = SHAPE(1000, 2000, 3000);
  kiln_shape_format(&wide, small, sizeof small);
  CHECK(memchr(small, 0, sizeof small) != NULL);
  CHECK(strncmp(small, "[1000", 5) == 0);
  for (size_t cap = 1; cap < 20; ++cap) {
    char b2[32];
    memset(b2, 'Z', sizeof b2);
    kiln_shape_format(&wide, b2, cap);
    CHECK_MSG(memchr(b2, 0, cap) != NULL && b2[cap] == 'Z', "format into %zu bytes", cap);
  }
}

/* ---- arrays and allocators --------------------------------------------- */

static void test_arrays(void) {
  kiln_array_t a;
  kiln_shape_t s = SHAPE(2, 3);
  CHECK_OK(kiln_array_alloc(sys(), KILN_DTYPE_I64, &s, &a));
  CHECK(a.dtype == KILN_DTYPE_I64 && a.nbytes == 48 && kiln_array_numel(&a) == 6);
  CHECK(kiln_shape_equal(&a.shape, &s));
  bool zero = true;
  for (size_t i = 0; i < a.nbytes; ++i) zero = zero && ((uint8_t*)a.data)[i] == 0;
  CHECK(zero);
  for (int i = 0; i < 6; ++i) ((int64_t*)a.data)[i] = i * 10;
  kiln_array_t c;
  CHECK_OK(kiln_array_clone(sys(), &a, &c));
  CHECK(c.data != a.data && c.nbytes == a.nbytes && memcmp(c.data, a.data, a.nbytes) == 0);
  ((int64_t*)a.data)[0] = 99;
  CHECK(((int64_t*)c.data)[0] == 0); /* deep copy */
  kiln_array_free(sys(), &a);
  CHECK(a.data == NULL && a.nbytes == 0 && a.dtype == KILN_DTYPE_UNDEFINED);
  kiln_array_free(sys(), &a); /* freeing twice is harmless after zeroing */
  kiln_array_free(sys(), &c);
  kiln_array_free(sys(), NULL);

  /* 0-d and empty arrays. */
  kiln_shape_t scalar = kiln_shape_make(0, NULL);
  CHECK_OK(kiln_array_alloc(sys(), KILN_DTYPE_F32, &scalar, &a));
  CHECK(a.nbytes == 4 && a.data != NULL && a.shape.rank == 0);
  kiln_array_free(sys(), &a);
  kiln_shape_t empty = SHAPE(0, 7);
  CHECK_OK(kiln_array_alloc(sys(), KILN_DTYPE_F16, &empty, &a));
  CHECK(a.nbytes == 0 && kiln_array_numel(&a) == 0);
  CHECK_OK(kiln_array_clone(sys(), &a, &c));
  CHECK(c.nbytes == 0 && c.shape.dims[1] == 7);
  kiln_array_free(sys(), &a);
  kiln_array_free(sys(), &c);

  /* Errors: undefined dtype, non-static shape, element count or byte size
   * overflow -- all before any allocation. */
  counter_t cnt;
  kiln_allocator_t ca = counting(&cnt);
  CHECK_ERR(kiln_array_alloc(ca, KILN_DTYPE_UNDEFINED, &s, &a), KILN_INVALID_ARGUMENT,
            "undefined");
  kiln_shape_t sym = SHAPE(kiln_dim_from_symbol(1), 3);
  CHECK_ERR(kiln_array_alloc(ca, KILN_DTYPE_F32, &sym, &a), -1, NULL);
  kiln_shape_t over = SHAPE((int64_t)1 << 40, (int64_t)1 << 40);
  CHECK_ERR(kiln_array_alloc(ca, KILN_DTYPE_F32, &over, &a), KILN_LIMIT_EXCEEDED, NULL);
  kiln_shape_t bytes_over = SHAPE((int64_t)1 << 31, (int64_t)1 << 31); /* 2^62 x 4 bytes */
  CHECK_ERR(kiln_array_alloc(ca, KILN_DTYPE_F32, &bytes_over, &a), KILN_LIMIT_EXCEEDED,
            "f32 array [2147483648,2147483648]");
  CHECK(cnt.n_alloc == 0);
  CHECK(a.data == NULL);

  /* Custom allocators get zeroed memory (the counter poisons it). */
  CHECK_OK(kiln_array_alloc(ca, KILN_DTYPE_I32, &s, &a));
  zero = true;
  for (size_t i = 0; i < a.nbytes; ++i) zero = zero && ((uint8_t*)a.data)[i] == 0;
  CHECK(zero);
  CHECK(cnt.live_bytes == 24);
  kiln_array_free(ca, &a);
  CHECK(cnt.live_bytes == 0 && cnt.n_alloc == cnt.n_free);

  /* Out of memory names the size and what it was for. */
  cnt.fail_after = 0;
  CHECK_ERR(kiln_array_alloc(ca, KILN_DTYPE_I32, &s, &a), KILN_OUT_OF_MEMORY, "24 bytes");
  void* p = NULL;
  CHECK_ERR(kiln_allocator_malloc(ca, 1234, "weights of 'fc'", &p), KILN_OUT_OF_MEMORY,
            "1234 bytes for weights of 'fc'");
  CHECK(p == NULL);
  cnt.fail_after = -1;
  CHECK_OK(kiln_allocator_malloc(ca, 0, "nothing", &p)); /* size 0 -> 1 byte */
  CHECK(p != NULL);
  CHECK_OK(kiln_allocator_realloc(ca, 4096, "growing", &p));
  CHECK(cnt.live_bytes == 4096);
  cnt.fail_after = 0;
  void* keep = p;
  CHECK_ERR(kiln_allocator_realloc(ca, 1 << 20, "table", &p), KILN_OUT_OF_MEMORY, "table");
  CHECK(p == keep); /* still valid after a failed realloc */
  kiln_allocator_free(ca, p);
  kiln_allocator_free(ca, NULL);
  CHECK(cnt.live_bytes == 0 && cnt.n_alloc == cnt.n_free);
}

/* ---- arena ------------------------------------------------------------- */

static void test_arena(void) {
  counter_t cnt;
  kiln_arena_t ar;
  kiln_arena_init(&ar, counting(&cnt));
  char* prev = NULL;
  size_t handed = 0;
  for (int i = 0; i < 5000; ++i) {
    size_t sz = (size_t)(i % 97) + 1;
    char* p = kiln_arena_alloc(&ar, sz);
    CHECK(p != NULL);
    if (!p) break;
    CHECK(((uintptr_t)p & 15) == 0);
    bool zero = true;
    for (size_t k = 0; k < sz; ++k) zero = zero && p[k] == 0;
    if (!zero) CHECK_MSG(zero, "arena block %d not zeroed", i);
    memset(p, 0x5A, sz); /* overlapping allocations would show under ASan/checks */
    CHECK(p != prev);
    prev = p;
    handed += sz;
  }
  CHECK(ar.total >= handed);
  CHECK(cnt.n_alloc > 1); /* spanned several blocks */
  /* One request bigger than a block gets its own block; the current block
   * is still used afterwards. */
  int64_t blocks = cnt.n_alloc;
  char* big = kiln_arena_alloc(&ar, 1 << 20);
  CHECK(big != NULL && ((uintptr_t)big & 15) == 0);
  if (big) {
    memset(big, 1, 1 << 20);
    CHECK(big[0] == 1 && big[(1 << 20) - 1] == 1);
  }
  CHECK(cnt.n_alloc == blocks + 1);
  char* small = kiln_arena_alloc(&ar, 8);
  CHECK(small != NULL);
  CHECK(cnt.n_alloc == blocks + 1);

  char* s = kiln_arena_strndup(&ar, "hello world", 5);
  CHECK(s && strcmp(s, "hello") == 0);
  char* e = kiln_arena_strndup(&ar, NULL, 0);
  CHECK(e && e[0] == 0);
  void* p = NULL;
  CHECK_OK(kiln_arena_calloc(&ar, 10, 24, "pairs", &p));
  CHECK(p != NULL);
  CHECK_ERR(kiln_arena_calloc(&ar, SIZE_MAX / 4, 8, "things", &p), KILN_LIMIT_EXCEEDED, "things");
  CHECK(kiln_arena_alloc(&ar, SIZE_MAX - 8) == NULL);

  kiln_arena_deinit(&ar);
  CHECK(cnt.live_bytes == 0 && cnt.n_alloc == cnt.n_free);
  kiln_arena_deinit(&ar); /* twice is fine */

  /* A failing allocator gives NULL / OUT_OF_MEMORY naming the request. */
  kiln_arena_init(&ar, counting(&cnt));
  cnt.fail_after = 0;
  CHECK(kiln_arena_alloc(&ar, 16) == NULL);
  CHECK_ERR(kiln_arena_calloc(&ar, 4, 4, "node inputs", &p), KILN_OUT_OF_MEMORY, "node inputs");
  CHECK(kiln_arena_strndup(&ar, "x", 1) == NULL);
  kiln_arena_deinit(&ar);
  CHECK(cnt.live_bytes == 0);
}

/* ---- npy --------------------------------------------------------------- */

static void fill_pattern(kiln_array_t* a) {
  int64_t n = kiln_array_numel(a);
  for (int64_t i = 0; i < n; ++i) {
    switch (a->dtype) {
      case KILN_DTYPE_F32: ((float*)a->data)[i] = (float)i * -1.25f + 0.5f; break;
      case KILN_DTYPE_F16: ((uint16_t*)a->data)[i] = kiln_f32_to_f16((float)i - 2.5f); break;
      case KILN_DTYPE_I8: ((int8_t*)a->data)[i] = (int8_t)(i % 2 ? -100 - i : 100 + i); break;
      case KILN_DTYPE_U8: ((uint8_t*)a->data)[i] = (uint8_t)(250 - i); break;
      case KILN_DTYPE_I32: ((int32_t*)a->data)[i] = (int32_t)(i * 100000 - 2000000000); break;
      case KILN_DTYPE_I64: ((int64_t*)a->data)[i] = ((int64_t)1 << 40) * (i - 3); break;
      case KILN_DTYPE_BOOL: ((uint8_t*)a->data)[i] = (uint8_t)(i % 3 == 0); break;
      /* f64 values f32 cannot hold; u64 above INT64_MAX */
      case KILN_DTYPE_F64: ((double*)a->data)[i] = 1.0 + (double)i * 1e-12 - 1e300 * (double)(i % 2); break;
      case KILN_DTYPE_I16: ((int16_t*)a->data)[i] = (int16_t)(i % 2 ? -30000 + i : 30000 - i); break;
      case KILN_DTYPE_U16: ((uint16_t*)a->data)[i] = (uint16_t)(65530 - i); break;
      case KILN_DTYPE_U32: ((uint32_t*)a->data)[i] = 4000000000u + (uint32_t)i; break;
      case KILN_DTYPE_U64: ((uint64_t*)a->data)[i] = UINT64_MAX - (uint64_t)i; break;
      default: break;
    }
  }
}

static void npy_round_trip(kiln_dtype_t dt, kiln_shape_t s) {
  char name[64], sb[64];
  snprintf(name, sizeof name, "rt_%s_%d.npy", kiln_dtype_name(dt), s.rank);
  const char* path = tmp_path(name);
  kiln_array_t a, b;
  CHECK_OK(kiln_array_alloc(sys(), dt, &s, &a));
  fill_pattern(&a);
  CHECK_OK(kiln_npy_write(path, &a));
  /* Header: magic, version 1.0, data 64-byte aligned, numpy dict. */
  unsigned char raw[4096];
  size_t got = read_bytes(path, raw, sizeof raw);
  CHECK(got >= 10 && memcmp(raw, "\x93NUMPY\x01\x00", 8) == 0);
  size_t hlen = raw[8] | (size_t)raw[9] << 8;
  CHECK_MSG((10 + hlen) % 64 == 0, "%s: header ends at %zu", name, 10 + hlen);
  CHECK(got == 10 + hlen + a.nbytes);
  CHECK(raw[10 + hlen - 1] == '\n');
  CHECK(memmem(raw, got, "'fortran_order': False", 22) != NULL);
  char want_shape[64];
  if (s.rank == 0) snprintf(want_shape, sizeof want_shape, "'shape': ()");
  else if (s.rank == 1)
    snprintf(want_shape, sizeof want_shape, "'shape': (%lld,)", (long long)s.dims[0]);
  else
    snprintf(want_shape, sizeof want_shape, "'shape': (%lld, %lld)", (long long)s.dims[0],
             (long long)s.dims[1]);
  CHECK_MSG(memmem(raw, got, want_shape, strlen(want_shape)) != NULL, "%s lacks %s", name,
            want_shape);

  CHECK_OK(kiln_npy_read(path, sys(), &b));
  CHECK_MSG(b.dtype == dt, "%s: read back as %s", name, kiln_dtype_name(b.dtype));
  CHECK_MSG(kiln_shape_equal(&a.shape, &b.shape), "%s: shape %s", name,
            kiln_shape_format(&b.shape, sb, sizeof sb));
  CHECK(b.nbytes == a.nbytes);
  CHECK(a.nbytes == 0 || (b.data && memcmp(a.data, b.data, a.nbytes) == 0));
  kiln_array_free(sys(), &a);
  kiln_array_free(sys(), &b);
}

static void test_npy_round_trip(void) {
  /* numpy has no float8 or 4-bit dtypes: writing them is refused */
  for (int t = KILN_DTYPE_F8E4M3FN; t <= KILN_DTYPE_U4; ++t) {
    kiln_array_t a;
    kiln_shape_t s = SHAPE(2);
    CHECK_OK(kiln_array_alloc(sys(), (kiln_dtype_t)t, &s, &a));
    kiln_status_t st = kiln_npy_write(tmp_path("lowbit.npy"), &a);
    CHECK_MSG(st && strstr(kiln_status_message(st), "cannot write dtype"), "%s written as npy",
              kiln_dtype_name((kiln_dtype_t)t));
    kiln_status_free(st);
    kiln_array_free(sys(), &a);
  }
  for (int t = 1; t < KILN_DTYPE_F8E4M3FN; ++t) {
    npy_round_trip((kiln_dtype_t)t, SHAPE(2, 3));
    npy_round_trip((kiln_dtype_t)t, SHAPE(5));
    npy_round_trip((kiln_dtype_t)t, kiln_shape_make(0, NULL)); /* 0-d */
  }
  /* Empty arrays (a zero dim) of each dtype. */
  for (int t = 1; t < KILN_DTYPE_F8E4M3FN; ++t) {
    char name[64];
    snprintf(name, sizeof name, "empty_%s.npy", kiln_dtype_name((kiln_dtype_t)t));
    kiln_array_t a, b;
    kiln_shape_t s = SHAPE(0, 4);
    CHECK_OK(kiln_array_alloc(sys(), (kiln_dtype_t)t, &s, &a));
    CHECK_OK(kiln_npy_write(tmp_path(name), &a));
    CHECK_OK(kiln_npy_read(tmp_path(name), sys(), &b));
    CHECK(b.dtype == (kiln_dtype_t)t && b.shape.rank == 2 && b.shape.dims[0] == 0 &&
          b.shape.dims[1] == 4 && b.nbytes == 0);
    kiln_array_free(sys(), &a);
    kiln_array_free(sys(), &b);
  }
  /* Higher rank round trip. */
  kiln_array_t a, b;
  kiln_shape_t s5 = SHAPE(1, 2, 1, 3, 2);
  CHECK_OK(kiln_array_alloc(sys(), KILN_DTYPE_F32, &s5, &a));
  fill_pattern(&a);
  CHECK_OK(kiln_npy_write(tmp_path("rank5.npy"), &a));
  CHECK_OK(kiln_npy_read(tmp_path("rank5.npy"), sys(), &b));
  CHECK(kiln_shape_equal(&a.shape, &b.shape) && memcmp(a.data, b.data, a.nbytes) == 0);
  kiln_array_free(sys(), &a);
  kiln_array_free(sys(), &b);
}

/* Writes an npy v|major| file with header dict |dict| and |n| data bytes. */
static void write_npy_raw(const char* path, int major, const char* dict, const void* data,
                          size_t n) {
  unsigned char buf[1024];
  size_t pre = major == 1 ? 10 : 12;
  size_t dl = strlen(dict);
  size_t total = pre + dl + 1;
  size_t pad = (64 - total % 64) % 64;
  size_t hl = dl + pad + 1;
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = (unsigned char)major;
  buf[7] = 0;
  buf[8] = (unsigned char)(hl & 0xff);
  buf[9] = (unsigned char)(hl >> 8);
  if (major != 1) buf[10] = buf[11] = 0;
  memcpy(buf + pre, dict, dl);
  memset(buf + pre + dl, ' ', pad);
  buf[pre + dl + pad] = '\n';
  memcpy(buf + pre + hl, data, n);
  write_bytes(path, buf, pre + hl + n);
}

/* Reads |path| in a child process: a malformed header must give an error,
 * not kill the reader. Returns the error message (static) or NULL. */
static const char* npy_read_survives(const char* path, bool* crashed) {
  static char msg[512];
  int fds[2];
  *crashed = false;
  if (pipe(fds) != 0) return NULL;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    kiln_array_t a;
    kiln_status_t s = kiln_npy_read(path, sys(), &a);
    const char* m = s ? kiln_status_message(s) : "";
    ssize_t w = write(fds[1], m, strlen(m));
    (void)w;
    _exit(s ? 0 : 3); /* anything else (a signal, ASan's exit code) is a crash */
  }
  close(fds[1]);
  ssize_t n = read(fds[0], msg, sizeof msg - 1);
  msg[n > 0 ? n : 0] = 0;
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  *crashed = !WIFEXITED(st) || (WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 3);
  return !*crashed && WEXITSTATUS(st) == 0 ? msg : NULL;
}

static void test_npy_malformed_headers(void) {
  float f[1] = {0};
  static const char* dicts[] = {
      "{'descr': '<f4', 'shape': (1,), 'fortran_order'}", /* key without a value */
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1 }",
      "{'descr': '<f4, 'fortran_order': False, 'shape': (1,), }",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }",
      "{'descr': '<f4', 'fortran_order': False, 'shape': ",
      "{'descr'",
  };
  for (size_t i = 0; i < sizeof dicts / sizeof dicts[0]; ++i) {
    char name[32];
    snprintf(name, sizeof name, "malformed%zu.npy", i);
    write_npy_raw(tmp_path(name), 1, dicts[i], f, sizeof f);
    bool crashed;
    const char* m = npy_read_survives(tmp_path(name), &crashed);
    CHECK_MSG(!crashed, "kiln_npy_read crashed on header %s", dicts[i]);
    if (!crashed)
      CHECK_MSG(m && strstr(m, name), "header %s: expected an error naming the file, got '%s'",
                dicts[i], m ? m : "(success)");
  }
}

static void test_npy_foreign(void) {
  kiln_array_t a;
  /* Version 2.0 header, numpy's own spelling of a 2-D float32 array. */
  float f[6] = {1, 2, 3, 4, 5, 6};
  write_npy_raw(tmp_path("v2.npy"), 2, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }",
                f, sizeof f);
  CHECK_OK(kiln_npy_read(tmp_path("v2.npy"), sys(), &a));
  CHECK(a.dtype == KILN_DTYPE_F32 && a.shape.rank == 2 && a.shape.dims[0] == 3 &&
        a.shape.dims[1] == 2 && a.data && ((float*)a.data)[5] == 6);
  kiln_array_free(sys(), &a);

  /* float64 is read as f64, exactly; converted to f32 only when asked. */
  double d[3] = {0.5, -1e10, 3.0 + 1e-12};
  write_npy_raw(tmp_path("f8.npy"), 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }",
                d, sizeof d);
  CHECK_OK(kiln_npy_read(tmp_path("f8.npy"), sys(), &a));
  CHECK(a.dtype == KILN_DTYPE_F64 && a.shape.dims[0] == 3 && a.nbytes == 24);
  if (a.data) CHECK(memcmp(a.data, d, sizeof d) == 0);
  kiln_array_free(sys(), &a);
  kiln_npy_read_options_t to32 = {.f64_to_f32 = true};
  bool conv = false;
  CHECK_OK(kiln_npy_read_with(tmp_path("f8.npy"), &to32, sys(), &a, &conv));
  CHECK(conv && a.dtype == KILN_DTYPE_F32 && a.shape.dims[0] == 3 && a.nbytes == 12);
  if (a.data) CHECK(((float*)a.data)[0] == 0.5f && ((float*)a.data)[1] == -1e10f);
  kiln_array_free(sys(), &a);

  /* numpy writes bool/u8/i8 with '|' and, for some writers, i1 as '<i1'
   * (byte order does not matter for one byte). */
  uint8_t bytes[2] = {1, 0};
  write_npy_raw(tmp_path("b1.npy"), 1, "{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }",
                bytes, 2);
  CHECK_OK(kiln_npy_read(tmp_path("b1.npy"), sys(), &a));
  CHECK(a.dtype == KILN_DTYPE_BOOL && a.nbytes == 2);
  kiln_array_free(sys(), &a);

  /* Big-endian data is not kiln's byte order: it must be rejected (or
   * byte-swapped), never read as if it were little endian. */
  unsigned char be[8] = {0, 0, 0, 1, 0, 0, 1, 0}; /* >i4 [1, 256] */
  write_npy_raw(tmp_path("be.npy"), 1, "{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }",
                be, sizeof be);
  kiln_status_t s = kiln_npy_read(tmp_path("be.npy"), sys(), &a);
  if (!s) {
    CHECK_MSG(a.dtype == KILN_DTYPE_I32 && ((int32_t*)a.data)[0] == 1 &&
                  ((int32_t*)a.data)[1] == 256,
              "big-endian '>i4' [1, 256] read as [%d, %d]", ((int32_t*)a.data)[0],
              ((int32_t*)a.data)[1]);
    kiln_array_free(sys(), &a);
  } else {
    CHECK(strstr(kiln_status_message(s), "be.npy") != NULL);
    kiln_status_free(s);
  }
  unsigned char bef[4] = {0x3F, 0x80, 0, 0}; /* >f4 1.0 */
  write_npy_raw(tmp_path("bef.npy"), 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }",
                bef, sizeof bef);
  s = kiln_npy_read(tmp_path("bef.npy"), sys(), &a);
  if (!s) {
    CHECK_MSG(((float*)a.data)[0] == 1.0f, "big-endian '>f4' 1.0 read as %g",
              ((float*)a.data)[0]);
    kiln_array_free(sys(), &a);
  } else {
    kiln_status_free(s);
  }

  /* Errors name the file. */
  CHECK_ERR(kiln_npy_read(tmp_path("missing.npy"), sys(), &a), KILN_NOT_FOUND, "missing.npy");
  write_npy_raw(tmp_path("huge.npy"), 1,
                "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
                f, sizeof f);
  CHECK_ERR(kiln_npy_read(tmp_path("huge.npy"), sys(), &a), KILN_LIMIT_EXCEEDED, "huge.npy");
  write_npy_raw(tmp_path("fortran.npy"), 1,
                "{'descr': '<f4', 'fortran_order': True, 'shape': (3, 2), }", f, sizeof f);
  CHECK_ERR(kiln_npy_read(tmp_path("fortran.npy"), sys(), &a), KILN_UNSUPPORTED, "fortran.npy");
  write_npy_raw(tmp_path("c8.npy"), 1, "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }",
                f, 8);
  CHECK_ERR(kiln_npy_read(tmp_path("c8.npy"), sys(), &a), KILN_UNSUPPORTED, "<c8");
  write_npy_raw(tmp_path("short.npy"), 1,
                "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 4), }", f, sizeof f);
  CHECK_ERR(kiln_npy_read(tmp_path("short.npy"), sys(), &a), KILN_PARSE_ERROR, "short.npy");
  CHECK(a.data == NULL);
  write_bytes(tmp_path("junk.npy"), "PK\x03\x04 not numpy!", 16);
  CHECK_ERR(kiln_npy_read(tmp_path("junk.npy"), sys(), &a), KILN_PARSE_ERROR, "junk.npy");
  /* Writing into a folder that does not exist. */
  kiln_shape_t s1 = SHAPE(1);
  CHECK_OK(kiln_array_alloc(sys(), KILN_DTYPE_F32, &s1, &a));
  CHECK_ERR(kiln_npy_write(tmp_path("no/such/dir/x.npy"), &a), KILN_IO_ERROR, "x.npy");
  kiln_array_free(sys(), &a);
}

/* ---- compare ----------------------------------------------------------- */

static kiln_array_t f32_array(kiln_shape_t s, const float* v) {
  kiln_array_t a;
  CHECK_OK(kiln_array_alloc(sys(), KILN_DTYPE_F32, &s, &a));
  if (a.nbytes) memcpy(a.data, v, a.nbytes);
  return a;
}

static void test_compare(void) {
  kiln_compare_result_t r;
  float w[6] = {1, 2, 3, 4, 5, 6};
  kiln_array_t want = f32_array(SHAPE(2, 3), w);
  kiln_array_t got = f32_array(SHAPE(2, 3), w);

  kiln_compare(&got, &want, 1e-4, 1e-5, &r);
  CHECK(r.ok && r.mismatches == 0 && r.max_abs_err == 0 && r.max_rel_err == 0);
  CHECK(strncmp(r.message, "match", 5) == 0);

  /* Inside tolerance: |got - want| <= atol + rtol*|want|. */
  ((float*)got.data)[4] = 5.0f + 4e-4f; /* tol = 1e-5 + 1e-4*5 = 5.1e-4 */
  kiln_compare(&got, &want, 1e-4, 1e-5, &r);
  CHECK(r.ok && r.mismatches == 0);
  CHECK(r.max_abs_err > 3.9e-4 && r.max_abs_err < 4.1e-4);
  CHECK(r.max_rel_err > 7.9e-5 && r.max_rel_err < 8.1e-5);

  /* Two mismatches: the worst is the one with the largest excess over the
   * tolerance, reported by flat index and coordinates. */
  ((float*)got.data)[1] = 2.5f;  /* index 1, excess ~0.5 */
  ((float*)got.data)[5] = 16.0f; /* index 5 = [1,2], excess ~10 */
  kiln_compare(&got, &want, 1e-4, 1e-5, &r);
  CHECK(!r.ok && r.mismatches == 2);
  CHECK(r.worst_index == 5 && r.worst_got == 16.0 && r.worst_want == 6.0);
  CHECK(fabs(r.max_abs_err - 10.0) < 1e-9);
  CHECK_MSG(strstr(r.message, "MISMATCH") && strstr(r.message, "index 5 [1,2]") &&
                strstr(r.message, "2 of 6"),
            "message: %s", r.message);

  /* NaN matches NaN; NaN against a number is a mismatch and the worst. */
  float wn[4] = {NAN, 1, INFINITY, -INFINITY};
  kiln_array_t wantn = f32_array(SHAPE(4), wn);
  kiln_array_t gotn = f32_array(SHAPE(4), wn);
  kiln_compare(&gotn, &wantn, 0, 0, &r);
  CHECK_MSG(r.ok, "NaN/inf against themselves: %s", r.message);
  ((float*)gotn.data)[1] = NAN;
  kiln_compare(&gotn, &wantn, 1e-4, 1e-5, &r);
  CHECK(!r.ok && r.mismatches == 1 && r.worst_index == 1 && isinf(r.max_abs_err));
  ((float*)gotn.data)[1] = 1;
  ((float*)gotn.data)[0] = 0; /* want NaN, got 0 */
  kiln_compare(&gotn, &wantn, 1e-4, 1e-5, &r);
  CHECK(!r.ok && r.worst_index == 0);
  ((float*)gotn.data)[0] = NAN;
  /* inf must match exactly: -inf vs inf, and a huge finite vs inf. */
  ((float*)gotn.data)[2] = -INFINITY;
  kiln_compare(&gotn, &wantn, 1e-4, 1e-5, &r);
  CHECK(!r.ok && r.mismatches == 1 && r.worst_index == 2);
  ((float*)gotn.data)[2] = FLT_MAX;
  kiln_compare(&gotn, &wantn, 1, 1, &r);
  CHECK(!r.ok && r.worst_index == 2);
  ((float*)gotn.data)[2] = INFINITY;
  kiln_compare(&gotn, &wantn, 1e-4, 1e-5, &r);
  CHECK(r.ok);

  /* Shape mismatch is a result, not a crash; message has both shapes. */
  kiln_array_t other = f32_array(SHAPE(3, 2), w);
  kiln_compare(&other, &want, 1e-4, 1e-5, &r);
  CHECK(!r.ok);
  CHECK_MSG(strstr(r.message, "[3,2]") && strstr(r.message, "[2,3]"), "message: %s", r.message);
  kiln_array_t flat = f32_array(SHAPE(6), w);
  kiln_compare(&flat, &want, 1e-4, 1e-5, &r);
  CHECK(!r.ok && strstr(r.message, "shape"));

  /* dtype classes: float vs int is a mismatch; i32 vs i64 compare exactly;
   * f16 vs f32 compares by value. */
  kiln_array_t iw, ig, hg;
  kiln_shape_t s3 = SHAPE(3);
  CHECK_OK(kiln_array_alloc(sys(), KILN_DTYPE_I64, &s3, &iw));
  CHECK_OK(kiln_array_alloc(sys(), KILN_DTYPE_I32, &s3, &ig));
  CHECK_OK(kiln_array_alloc(sys(), KILN_DTYPE_F16, &s3, &hg));
  for (int i = 0; i < 3; ++i) {
    ((int64_t*)iw.data)[i] = i * 7;
    ((int32_t*)ig.data)[i] = i * 7;
    ((uint16_t*)hg.data)[i] = kiln_f32_to_f16((float)w[i]);
  }
  kiln_compare(&ig, &iw, 0, 0, &r);
  CHECK(r.ok);
  ((int32_t*)ig.data)[2] = 15; /* off by one: ints compare exactly, tolerance or not */
  kiln_compare(&ig, &iw, 1, 1, &r);
  CHECK(!r.ok && r.mismatches == 1 && r.worst_index == 2);
  kiln_array_t fw3 = f32_array(s3, w);
  kiln_compare(&fw3, &iw, 1e-4, 1e-5, &r);
  CHECK(!r.ok && strstr(r.message, "dtype"));
  kiln_compare(&hg, &fw3, 0, 0, &r);
  CHECK_MSG(r.ok, "f16 vs f32: %s", r.message);

  /* Empty arrays match. */
  kiln_array_t e1 = f32_array(SHAPE(0, 3), NULL), e2 = f32_array(SHAPE(0, 3), NULL);
  kiln_compare(&e1, &e2, 0, 0, &r);
  CHECK(r.ok && r.mismatches == 0);

  kiln_array_t* all[] = {&want, &got, &wantn, &gotn, &other, &flat, &iw, &ig, &hg, &fw3, &e1, &e2};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) kiln_array_free(sys(), all[i]);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/kiln-test-core-XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  RUN(test_status);
  RUN(test_status_code_names);
  RUN(test_dtypes);
  RUN(test_element_access);
  RUN(test_f16_known_values);
  RUN(test_f16_round_trip_exhaustive);
  RUN(test_f16_rounding_exhaustive);
  RUN(test_f16_specials);
  RUN(test_shapes);
  RUN(test_arrays);
  RUN(test_arena);
  RUN(test_npy_round_trip);
  RUN(test_npy_foreign);
  RUN(test_npy_malformed_headers);
  RUN(test_compare);
  rm_rf(tmpdir);
  return kiln_test_finish();
}
