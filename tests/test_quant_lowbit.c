/* float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz) and int4 / uint4 (issue 21):
 * the conversions (ir/f8.h) against a brute-force nearest-even search, the
 * frontend's reading of packed int4 and float8 TensorProtos, bad inputs
 * (zero points outside the 4-bit range, packed sizes, float types kiln
 * lacks), and a graph with int4 / float8 inputs and outputs run through the
 * session API on one target against the reference: inside kiln an int4
 * element is one byte holding its value (docs/DESIGN.md, "float8 and int4").
 *   test_quant_lowbit [--target cpu|opencl|vulkan] */
#include <math.h>
#include <unistd.h>

#include "compiler/compare.h"
#include "frontend/onnx.h"
#include "ir/f8.h"
#include "target_graph_util.h"

/* ---- conversions --------------------------------------------------------- */

/* The nearest finite code to |x| (>= 0) by search, ties to the even code. */
static int nearest_code(kiln_dtype_t t, float x) {
  int best = -1;
  double bd = INFINITY;
  for (int c = 0; c < 128; ++c) {
    const float v = kiln_f8_to_f32(t, (uint8_t)c);
    if (!isfinite(v)) continue;
    const double d = fabs((double)v - (double)x);
    if (d < bd || (d == bd && (c & 1) == 0)) best = c, bd = d;
  }
  return best;
}

static void test_f8_conversions(void) {
  static const struct {
    kiln_dtype_t t;
    float max;
    int maxc, over; /* largest finite code, overflow code without saturate */
  } k[] = {{KILN_DTYPE_F8E4M3FN, 448.0f, 0x7E, 0x7F},
           {KILN_DTYPE_F8E4M3FNUZ, 240.0f, 0x7F, 0x80},
           {KILN_DTYPE_F8E5M2, 57344.0f, 0x7B, 0x7C},
           {KILN_DTYPE_F8E5M2FNUZ, 57344.0f, 0x7F, 0x80}};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; ++i) {
    const kiln_dtype_t t = k[i].t;
    const char* n = kiln_dtype_name(t);
    CHECK_MSG(kiln_f8_to_f32(t, (uint8_t)k[i].maxc) == k[i].max, "%s max", n);
    /* every finite code round-trips */
    for (int c = 0; c < 256; ++c) {
      const float v = kiln_f8_to_f32(t, (uint8_t)c);
      if (isnan(v) || (c == 0x80 && t != KILN_DTYPE_F8E4M3FNUZ && t != KILN_DTYPE_F8E5M2FNUZ && v == 0))
        continue;
      for (int sat = 0; sat < 2; ++sat)
        CHECK_MSG(kiln_f32_to_f8(t, v, sat) == c || (isinf(v) && sat), "%s code 0x%02x (%g) sat %d -> 0x%02x",
                  n, c, (double)v, sat, kiln_f32_to_f8(t, v, sat));
    }
    /* nearest even against the search: values between codes, midpoints */
    for (int c = 0; c < k[i].maxc; ++c) {
      const float a = kiln_f8_to_f32(t, (uint8_t)c), b = kiln_f8_to_f32(t, (uint8_t)(c + 1));
      const float pts[3] = {a + (b - a) * 0.25f, (a + b) * 0.5f, a + (b - a) * 0.75f};
      for (int j = 0; j < 3; ++j) {
        const int want = nearest_code(t, pts[j]);
        CHECK_MSG(kiln_f32_to_f8(t, pts[j], true) == want, "%s %g -> 0x%02x, nearest even 0x%02x", n,
                  (double)pts[j], kiln_f32_to_f8(t, pts[j], true), want);
        CHECK_MSG(kiln_f32_to_f8(t, -pts[j], true) == (want | 0x80) || want == 0, "%s -%g", n, (double)pts[j]);
      }
    }
    /* out of range, infinities, NaN, negative zero */
    const bool uz = k[i].over == 0x80;
    CHECK_MSG(kiln_f32_to_f8(t, 1e6f, true) == k[i].maxc, "%s 1e6 saturated", n);
    CHECK_MSG(kiln_f32_to_f8(t, -1e6f, true) == (k[i].maxc | 0x80), "%s -1e6 saturated", n);
    CHECK_MSG(kiln_f32_to_f8(t, 1e6f, false) == k[i].over, "%s 1e6 unsaturated", n);
    CHECK_MSG(kiln_f32_to_f8(t, -INFINITY, false) == (uz ? 0x80 : k[i].over | 0x80), "%s -inf", n);
    CHECK_MSG(kiln_f32_to_f8(t, INFINITY, true) == k[i].maxc, "%s inf saturated", n);
    CHECK_MSG(isnan(kiln_f8_to_f32(t, kiln_f32_to_f8(t, NAN, true))), "%s NaN", n);
    CHECK_MSG(kiln_f32_to_f8(t, -0.0f, true) == (uz ? 0 : 0x80), "%s -0", n);
    CHECK_MSG(kiln_f32_to_f8(t, -1e-30f, true) == (uz ? 0 : 0x80), "%s tiny negative", n);
  }
  /* the largest finite value's rounding boundary: e4m3fn 464 ties to 448 */
  CHECK(kiln_f32_to_f8(KILN_DTYPE_F8E4M3FN, 464.0f, false) == 0x7E);
  CHECK(kiln_f32_to_f8(KILN_DTYPE_F8E4M3FN, 465.0f, false) == 0x7F);
  CHECK(kiln_f32_to_f8(KILN_DTYPE_F8E5M2, 61440.0f, false) == 0x7C); /* tie to the even inf */
  CHECK(kiln_f8_to_f32(KILN_DTYPE_F8E5M2, 0x7C) == INFINITY && isnan(kiln_f8_to_f32(KILN_DTYPE_F8E5M2, 0x7D)));
  /* int4 elements: one byte, stores wrap to 4 bits */
  int8_t i4[2];
  uint8_t u4[2];
  kiln_store_i64(KILN_DTYPE_I4, i4, 0, 9);
  kiln_store_i64(KILN_DTYPE_I4, i4, 1, -9);
  kiln_store_i64(KILN_DTYPE_U4, u4, 0, 17);
  kiln_store_i64(KILN_DTYPE_U4, u4, 1, 15);
  CHECK(i4[0] == -7 && i4[1] == 7 && u4[0] == 1 && u4[1] == 15);
  CHECK(kiln_load_i64(KILN_DTYPE_I4, i4, 0) == -7 && kiln_load_f64(KILN_DTYPE_U4, u4, 1) == 15.0);
}

/* The comparison the conformance runner uses sees float8 values: one code
 * apart is a mismatch, the same codes (NaN included) are not. */
static void test_compare_f8(void) {
  const int64_t n = 4;
  kiln_array_t a = arr(KILN_DTYPE_F8E4M3FN, 1, &n), b = arr(KILN_DTYPE_F8E4M3FN, 1, &n);
  if (a.data && b.data) {
    const uint8_t codes[4] = {0x38, 0x39, 0x7F, 0x80};
    memcpy(a.data, codes, 4);
    memcpy(b.data, codes, 4);
    kiln_compare_result_t r;
    kiln_compare(&a, &b, 1e-4, 1e-5, &r);
    CHECK_MSG(r.mismatches == 0, "same codes: %lld mismatches", (long long)r.mismatches);
    ((uint8_t*)b.data)[1] = 0x3A; /* 1.125 -> 1.25 */
    kiln_compare(&a, &b, 1e-4, 1e-5, &r);
    CHECK_MSG(r.mismatches == 1 && r.worst_index == 1, "one code apart: %lld mismatches at %lld",
              (long long)r.mismatches, (long long)r.worst_index);
  }
  kiln_array_free(al(), &a);
  kiln_array_free(al(), &b);
}

/* ---- frontend --------------------------------------------------------------- */

typedef struct {
  uint8_t b[256];
  size_t n;
} pb_t;

static void pb_varint(pb_t* p, uint64_t v) {
  do {
    p->b[p->n++] = (uint8_t)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
    v >>= 7;
  } while (v);
}

/* A TensorProto: name, dims, data_type, then raw_data (|raw| non-NULL) or
 * int32_data (|i32|, |n32| entries). */
static const char* write_tensor(const char* dir, const char* name, int ndims, const int64_t* dims, int onnx_type,
                                const uint8_t* raw, size_t nraw, const int32_t* i32, size_t n32) {
  static char path[512];
  pb_t p = {{0}, 0};
  for (int i = 0; i < ndims; ++i) pb_varint(&p, 0x08), pb_varint(&p, (uint64_t)dims[i]);
  pb_varint(&p, 0x10), pb_varint(&p, (uint64_t)onnx_type);
  for (size_t i = 0; i < n32; ++i) pb_varint(&p, 0x28), pb_varint(&p, (uint64_t)(uint32_t)i32[i]);
  pb_varint(&p, 0x42), pb_varint(&p, strlen(name));
  memcpy(p.b + p.n, name, strlen(name)), p.n += strlen(name);
  if (raw) {
    pb_varint(&p, 0x4A), pb_varint(&p, nraw);
    memcpy(p.b + p.n, raw, nraw), p.n += nraw;
  }
  snprintf(path, sizeof path, "%s/%s.pb", dir, name);
  FILE* f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return path;
  fwrite(p.b, 1, p.n, f);
  fclose(f);
  return path;
}

static void test_frontend_tensors(void) {
  char dir[] = "/tmp/kiln-lowbit-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  const int64_t five = 5, three = 3;
  /* int4: 5 values in 3 bytes, low nibble first; 0xF is -1 / 15 */
  const uint8_t packed[3] = {0x8F, 0x07, 0x02};
  const int8_t want_i4[5] = {-1, -8, 7, 0, 2};
  const uint8_t want_u4[5] = {15, 8, 7, 0, 2};
  kiln_array_t a;
  memset(&a, 0, sizeof a);
  if (CHECK_OK(kiln_onnx_load_tensor(write_tensor(dir, "i4raw", 1, &five, 22, packed, 3, NULL, 0), NULL, al(), &a,
                                     NULL))) {
    CHECK(a.dtype == KILN_DTYPE_I4 && a.nbytes == 5 && !memcmp(a.data, want_i4, 5));
    kiln_array_free(al(), &a);
  }
  const int32_t packed32[3] = {0x8F, 0x07, 0x02};
  if (CHECK_OK(kiln_onnx_load_tensor(write_tensor(dir, "u4i32", 1, &five, 21, NULL, 0, packed32, 3), NULL, al(),
                                     &a, NULL))) {
    CHECK(a.dtype == KILN_DTYPE_U4 && a.nbytes == 5 && !memcmp(a.data, want_u4, 5));
    kiln_array_free(al(), &a);
  }
  /* float8 in int32_data: one code an entry */
  const int32_t codes[3] = {0x38, 0xC0, 0x7F};
  if (CHECK_OK(kiln_onnx_load_tensor(write_tensor(dir, "f8i32", 1, &three, 17, NULL, 0, codes, 3), NULL, al(), &a,
                                     NULL))) {
    CHECK(a.dtype == KILN_DTYPE_F8E4M3FN && a.nbytes == 3);
    CHECK(a.data && kiln_load_f64(a.dtype, a.data, 0) == 1.0 && kiln_load_f64(a.dtype, a.data, 1) == -2.0 &&
          isnan(kiln_load_f64(a.dtype, a.data, 2)));
    kiln_array_free(al(), &a);
  }
  /* one int4 value: a byte in the file and a byte in kiln, but the high
   * nibble is not the value's (raw_data the array takes over unconverted
   * must not include packed types) */
  const int64_t one = 1;
  if (CHECK_OK(kiln_onnx_load_tensor(write_tensor(dir, "i4one", 1, &one, 22, packed, 1, NULL, 0), NULL, al(), &a,
                                     NULL))) {
    CHECK_MSG(a.dtype == KILN_DTYPE_I4 && a.nbytes == 1 && ((const int8_t*)a.data)[0] == -1,
              "one int4 from byte 0x8F: %d, expected -1", a.nbytes == 1 ? ((const int8_t*)a.data)[0] : 99);
    kiln_array_free(al(), &a);
  }
  /* bad: a packed size that does not hold 5 values, or one too many */
  kiln_status_t st = kiln_onnx_load_tensor(write_tensor(dir, "i4short", 1, &five, 22, packed, 2, NULL, 0), NULL,
                                           al(), &a, NULL);
  CHECK_ERR(st, KILN_INVALID_ARGUMENT, "tensor 'i4short': raw_data has 2 bytes, expected 3");
  st = kiln_onnx_load_tensor(write_tensor(dir, "u4long", 1, &five, 21, NULL, 0, (const int32_t[]){1, 2, 3, 4}, 4),
                             NULL, al(), &a, NULL);
  CHECK_ERR(st, KILN_INVALID_ARGUMENT, "tensor 'u4long': int32_data has 4 elements, expected 3");
  /* float types kiln lacks: FLOAT4E2M1 (23), BFLOAT16 (16) */
  st = kiln_onnx_load_tensor(write_tensor(dir, "f4", 1, &three, 23, packed, 2, NULL, 0), NULL, al(), &a, NULL);
  CHECK_ERR(st, KILN_UNSUPPORTED, "tensor 'f4' has element type FLOAT4E2M1");
  const char* names[] = {"i4raw", "u4i32", "f8i32", "i4short", "u4long", "f4", "i4one"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s.pb", dir, names[i]);
    unlink(p);
  }
  rmdir(dir);
}

/* ---- bad graphs ---------------------------------------------------------------- */

/* DequantizeLinear of an |t| input whose constant zero point holds |zp|. */
static void zp_out_of_range(kiln_dtype_t t, int zp, const char* needle) {
  kiln_graph_t* g = graph_new();
  if (!g) return;
  const int64_t d = 4, one = 1;
  kiln_array_t s = arr(KILN_DTYPE_F32, 0, NULL), z = arr(t, 1, &one);
  bool ok = s.data && z.data && CHECK_OK(kiln_graph_set_opset(g, "", 21)) && input(g, "x", t, 1, &d);
  if (ok) ((float*)s.data)[0] = 0.5f, ((int8_t*)z.data)[0] = (int8_t)zp;
  ok = ok && CHECK_OK(kiln_graph_add_initializer(g, "s", &s, NULL)) &&
       CHECK_OK(kiln_graph_add_initializer(g, "zp4", &z, NULL)) &&
       node1(g, "DequantizeLinear", "dq4", 3, (const char*[]){"x", "s", "zp4"}, "y", 0, NULL) &&
       CHECK_OK(kiln_graph_add_output(g, "y"));
  if (ok) {
    kiln_status_t st = kiln_graph_prepare(g);
    CHECK_MSG(st && strstr(kiln_status_message(st), "dq4"), "expected an error naming the node");
    CHECK_ERR(st, KILN_INVALID_ARGUMENT, needle);
  }
  kiln_array_free(al(), &s);
  kiln_array_free(al(), &z);
  kiln_graph_destroy(g);
}

/* A one-node graph of |op| with integer attribute |attr| = |v| on an f32 input. */
static void unknown_type_attr(const char* op, const char* attr, int64_t v, const char* needle) {
  kiln_graph_t* g = graph_new();
  if (!g) return;
  const int64_t d = 4;
  kiln_array_t s = arr(KILN_DTYPE_F32, 0, NULL);
  if (s.data) ((float*)s.data)[0] = 1.0f;
  kiln_attr_t a = {.name = attr, .type = KILN_ATTR_INT, .i = v};
  const bool q = !strcmp(op, "QuantizeLinear");
  bool ok = s.data && CHECK_OK(kiln_graph_set_opset(g, "", 21)) && input(g, "x", KILN_DTYPE_F32, 1, &d) &&
            CHECK_OK(kiln_graph_add_initializer(g, "s", &s, NULL)) &&
            node1(g, op, "lowbit_node", q ? 2 : 1, (const char*[]){"x", "s"}, "y", 1, &a) &&
            CHECK_OK(kiln_graph_add_output(g, "y"));
  if (ok) {
    kiln_status_t st = kiln_graph_prepare(g);
    CHECK_MSG(st && strstr(kiln_status_message(st), "lowbit_node"), "%s: expected an error naming the node", op);
    CHECK_ERR(st, KILN_UNSUPPORTED, needle);
  }
  kiln_array_free(al(), &s);
  kiln_graph_destroy(g);
}

static void test_bad_inputs(void) {
  zp_out_of_range(KILN_DTYPE_I4, 9, "zero point 'zp4' element 0 is 9, outside the i4 range [-8, 7]");
  zp_out_of_range(KILN_DTYPE_I4, -9, "zero point 'zp4' element 0 is -9, outside the i4 range [-8, 7]");
  zp_out_of_range(KILN_DTYPE_U4, 16, "zero point 'zp4' element 0 is 16, outside the u4 range [0, 15]");
  unknown_type_attr("Cast", "to", 23, "to FLOAT4E2M1 is not supported");
  unknown_type_attr("QuantizeLinear", "output_dtype", 23, "output_dtype 23 (FLOAT4E2M1) is not supported");
  unknown_type_attr("QuantizeLinear", "output_dtype", 16, "output_dtype 16 (BFLOAT16) is not supported");
}

/* ---- int4 / float8 through the session ----------------------------------------- */

/* x (i4) -> DequantizeLinear(0.5, -3) -> y (f32) -> QuantizeLinear(0.25, 1)
 * -> q (i4); y -> Cast(f8e5m2, saturate 0) -> h (f8) -> Cast(f32) -> r.
 * Outputs y, q, h, r; the session takes and returns int4 one value a byte. */
static void test_session_io(void) {
  kiln_graph_t* g = graph_new();
  if (!g) return;
  const int64_t d = 6;
  kiln_array_t s1 = arr(KILN_DTYPE_F32, 0, NULL), z1 = arr(KILN_DTYPE_I4, 0, NULL);
  kiln_array_t s2 = arr(KILN_DTYPE_F32, 0, NULL), z2 = arr(KILN_DTYPE_I4, 0, NULL);
  bool ok = s1.data && z1.data && s2.data && z2.data && CHECK_OK(kiln_graph_set_opset(g, "", 21)) &&
            input(g, "x", KILN_DTYPE_I4, 1, &d);
  if (ok) {
    ((float*)s1.data)[0] = 0.5f, ((int8_t*)z1.data)[0] = -3;
    ((float*)s2.data)[0] = 0.25f, ((int8_t*)z2.data)[0] = 1;
  }
  kiln_attr_t to8[2] = {{.name = "to", .type = KILN_ATTR_INT, .i = 19},
                        {.name = "saturate", .type = KILN_ATTR_INT, .i = 0}};
  kiln_attr_t to32 = {.name = "to", .type = KILN_ATTR_INT, .i = 1};
  ok = ok && CHECK_OK(kiln_graph_add_initializer(g, "s1", &s1, NULL)) &&
       CHECK_OK(kiln_graph_add_initializer(g, "z1", &z1, NULL)) &&
       CHECK_OK(kiln_graph_add_initializer(g, "s2", &s2, NULL)) &&
       CHECK_OK(kiln_graph_add_initializer(g, "z2", &z2, NULL)) &&
       node1(g, "DequantizeLinear", "dq", 3, (const char*[]){"x", "s1", "z1"}, "y", 0, NULL) &&
       node1(g, "QuantizeLinear", "q", 3, (const char*[]){"y", "s2", "z2"}, "q4", 0, NULL) &&
       node1(g, "Cast", "to_f8", 1, (const char*[]){"y"}, "h", 2, to8) &&
       node1(g, "Cast", "from_f8", 1, (const char*[]){"h"}, "r", 1, &to32) &&
       CHECK_OK(kiln_graph_add_output(g, "y")) && CHECK_OK(kiln_graph_add_output(g, "q4")) &&
       CHECK_OK(kiln_graph_add_output(g, "h")) && CHECK_OK(kiln_graph_add_output(g, "r")) &&
       CHECK_OK(kiln_graph_prepare(g));
  kiln_module_t* m = ok ? compile(g) : NULL;
  kiln_session_t* ses = session(m);
  if (ses) {
    kiln_dtype_t it = KILN_DTYPE_UNDEFINED, ot = KILN_DTYPE_UNDEFINED, ht = KILN_DTYPE_UNDEFINED;
    kiln_module_input_shape(m, 0, &it);
    kiln_module_output_shape(m, 1, &ot);
    kiln_module_output_shape(m, 2, &ht);
    CHECK_MSG(it == KILN_DTYPE_I4 && ot == KILN_DTYPE_I4 && ht == KILN_DTYPE_F8E5M2,
              "module I/O dtypes %s %s %s", kiln_dtype_name(it), kiln_dtype_name(ot), kiln_dtype_name(ht));
    kiln_array_t in = arr(KILN_DTYPE_I4, 1, &d);
    const int8_t xv[6] = {-8, -3, 0, 5, 7, -1};
    if (in.data) memcpy(in.data, xv, 6);
    both_agree_n(g, ses, &in, 4);
    kiln_array_t out[4];
    memset(out, 0, sizeof out);
    if (CHECK_OK(kiln_session_run(ses, &in, out))) {
      /* y = (x + 3) / 2; q = clamp(round_even(4 y) + 1, -8, 7), one value a byte */
      const float wy[6] = {-2.5f, 0.0f, 1.5f, 4.0f, 5.0f, 1.0f};
      const int8_t wq[6] = {-8, 1, 7, 7, 7, 5};
      CHECK(out[0].dtype == KILN_DTYPE_F32 && !memcmp(out[0].data, wy, sizeof wy));
      CHECK(out[1].dtype == KILN_DTYPE_I4 && out[1].nbytes == 6 && !memcmp(out[1].data, wq, 6));
      CHECK(out[2].dtype == KILN_DTYPE_F8E5M2 && out[2].nbytes == 6 && ((uint8_t*)out[2].data)[2] == 0x3E);
      CHECK(out[3].dtype == KILN_DTYPE_F32 && !memcmp(out[3].data, wy, sizeof wy)); /* exact in e5m2 */
      free_arrays(out, 4);
    }
    /* an i8 array where the module takes i4: refused, naming both */
    kiln_array_t bad = arr(KILN_DTYPE_I8, 1, &d);
    memset(out, 0, sizeof out);
    kiln_status_t st = kiln_session_run(ses, &bad, out);
    CHECK_ERR(st, KILN_INVALID_ARGUMENT, "input 'x' has dtype i8, the module expects i4");
    kiln_array_free(al(), &bad);
    kiln_array_free(al(), &in);
  }
  kiln_session_destroy(ses);
  kiln_module_release(m);
  kiln_array_free(al(), &s1);
  kiln_array_free(al(), &z1);
  kiln_array_free(al(), &s2);
  kiln_array_free(al(), &z2);
  kiln_graph_destroy(g);
}

int main(int argc, char** argv) {
  int rc = target_open(argc, argv);
  if (rc) return rc;
  RUN(test_f8_conversions);
  RUN(test_compare_f8);
  RUN(test_frontend_tensors);
  RUN(test_bad_inputs);
  RUN(test_session_io);
  kiln_device_release(g_device);
  return kiln_test_finish();
}
