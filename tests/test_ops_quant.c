/* The quantized ops (ir/ops/nn_quant.c, lowering/lower_nn_quant.c) on
 * hand-computed cases: rounding ties go to even (0.5 -> 0, 1.5 -> 2, -2.5
 * -> -2), results saturate to the output type, zero points are subtracted
 * before the multiply, per-axis parameters follow their channel. Each case
 * runs on the reference executor against the hand values, then compiled
 * for the target (cpu by default; --target opencl|vulkan) against the
 * reference, bit for bit.
 *
 *   test_ops_quant [--target cpu|opencl|vulkan] */
#include <math.h>

#include "lowering/precision.h"
#include "target_graph_util.h"

typedef struct qin_s {
  const char* name;
  kiln_dtype_t dtype;
  int rank;
  int64_t dims[4];
  const double* v;
} qin_t;

#define QIN(name, dt, rank, dims, ...) \
  {name, KILN_DTYPE_##dt, rank, dims, (const double[]){__VA_ARGS__}}
#define DIMS(...) {__VA_ARGS__}

/* Builds |op| over inputs |in| (all graph inputs, fed at run time),
 * checks output |k| of the reference against want[k] (n_out outputs), and
 * the target against the reference. */
static void qcase(const char* op, int n_in, const qin_t* in, int n_attrs, const kiln_attr_t* attrs,
                  int n_out, const double* const* want) {
  kiln_graph_t* g = graph_new();
  if (!g) return;
  CHECK_OK(kiln_graph_set_opset(g, "", 21));
  const char* names[9];
  kiln_array_t arrays[9];
  bool ok = true;
  for (int i = 0; i < n_in; ++i) {
    names[i] = in[i].name;
    ok = ok && input(g, in[i].name, in[i].dtype, in[i].rank, in[i].dims);
    arrays[i] = arr(in[i].dtype, in[i].rank, in[i].dims);
    for (int64_t e = 0; arrays[i].data && e < kiln_array_numel(&arrays[i]); ++e)
      kiln_store_f64(in[i].dtype, arrays[i].data, (size_t)e, in[i].v[e]);
  }
  const char* outs[3] = {"y", "y1", "y2"};
  ok = ok && CHECK_OK(kiln_graph_add_node(g, op, "q", n_in, names, n_out, outs, n_attrs, attrs, NULL));
  for (int k = 0; ok && k < n_out; ++k) ok = CHECK_OK(kiln_graph_add_output(g, outs[k]));
  ok = ok && CHECK_OK(kiln_graph_prepare(g));
  kiln_array_t ref[3];
  memset(ref, 0, sizeof ref);
  if (ok && CHECK_OK(kiln_ref_run(g, arrays, NULL, ref))) {
    for (int k = 0; k < n_out; ++k)
      for (int64_t e = 0; e < kiln_array_numel(&ref[k]); ++e) {
        const double got = kiln_load_f64(ref[k].dtype, ref[k].data, (size_t)e);
        CHECK_MSG(isnan(want[k][e]) ? isnan(got) : fabs(got - want[k][e]) <= 1e-6 * (1.0 + fabs(want[k][e])),
                  "%s: output %d element %lld is %.9g, expected %.9g", op, k, (long long)e, got,
                  want[k][e]);
      }
  }
  free_arrays(ref, n_out);
  kiln_module_t* m = ok ? compile(g) : NULL;
  kiln_session_t* s = session(m);
  CHECK_MSG(s != NULL, "%s: %s did not compile", g_target_name, op);
  if (s) both_agree_n(g, s, arrays, n_out);
  free_arrays(arrays, n_in);
  kiln_session_destroy(s);
  kiln_module_release(m);
  kiln_graph_destroy(g);
}

static kiln_attr_t iattr(const char* name, int64_t v) {
  kiln_attr_t a;
  memset(&a, 0, sizeof a);
  a.name = name;
  a.type = KILN_ATTR_INT;
  a.i = v;
  return a;
}

/* Ties to even, and saturation at both ends of u8 and i8. */
static void test_quantize_ties_saturation(void) {
  const qin_t u8[] = {QIN("x", F32, 1, DIMS(8), 0.5, 1.5, 2.5, -0.5, -1.5, 254.5, 300, -300),
                      QIN("s", F32, 0, DIMS(0), 1.0), QIN("z", U8, 0, DIMS(0), 0)};
  qcase("QuantizeLinear", 3, u8, 0, NULL, 1, (const double* []){(const double[]){0, 2, 2, 0, 0, 254, 255, 0}});
  /* x / 0.5 = 0.5, 1.5, -0.5, -1.5, 200, -200, 126.5, -129.5; + 1 */
  const qin_t i8[] = {
      QIN("x", F32, 1, DIMS(8), 0.25, 0.75, -0.25, -0.75, 100, -100, 63.25, -64.75),
      QIN("s", F32, 0, DIMS(0), 0.5), QIN("z", I8, 0, DIMS(0), 1)};
  qcase("QuantizeLinear", 3, i8, 0, NULL, 1,
        (const double* []){(const double[]){1, 3, 1, -1, 127, -128, 127, -128}});
  /* 16-bit: i16 saturates at +-32767/-32768, u16 at 65535 */
  const qin_t i16[] = {QIN("x", F32, 1, DIMS(4), 1.5, -70000, 70000, 2.5), QIN("s", F32, 0, DIMS(0), 1.0),
                       QIN("z", I16, 0, DIMS(0), 0)};
  qcase("QuantizeLinear", 3, i16, 0, NULL, 1, (const double* []){(const double[]){2, -32768, 32767, 2}});
  const qin_t u16[] = {QIN("x", F32, 1, DIMS(4), 1.5, -70000, 70000, 2.5), QIN("s", F32, 0, DIMS(0), 2.0),
                       QIN("z", U16, 0, DIMS(0), 30000)};
  qcase("QuantizeLinear", 3, u16, 0, NULL, 1, (const double* []){(const double[]){30001, 0, 65000, 30001}});
  /* NaN saturates to the low end, as onnx's reference does on x86 */
  const qin_t nan_q[] = {QIN("x", F32, 1, DIMS(2), NAN, 3), QIN("s", F32, 0, DIMS(0), 1.0),
                         QIN("z", I8, 0, DIMS(0), 5)};
  qcase("QuantizeLinear", 3, nan_q, 0, NULL, 1, (const double* []){(const double[]){-128, 8}});
  /* no zero point: u8 with zero point 0 */
  qcase("QuantizeLinear", 2, u8, 0, NULL, 1, (const double* []){(const double[]){0, 2, 2, 0, 0, 254, 255, 0}});
}

/* Per-axis scales and zero points along axis 1 of [2, 3]. */
static void test_quantize_per_axis(void) {
  const qin_t in[] = {QIN("x", F32, 2, DIMS(2, 3), 1.5, 3, 10, -2.5, -3, 6),
                      QIN("s", F32, 1, DIMS(3), 1, 2, 4), QIN("z", I8, 1, DIMS(3), 0, 1, -1)};
  kiln_attr_t a[1] = {iattr("axis", 1)};
  qcase("QuantizeLinear", 3, in, 1, a, 1, (const double* []){(const double[]){2, 3, 1, -2, -1, 1}});
  /* blocks of 2 along axis 1 of [1, 4]: scales 1 and 4 */
  const qin_t bl[] = {QIN("x", F32, 2, DIMS(1, 4), 0.5, 1.5, 2, 10),
                      QIN("s", F32, 2, DIMS(1, 2), 1, 4), QIN("z", U8, 2, DIMS(1, 2), 10, 20)};
  kiln_attr_t b[2] = {iattr("axis", 1), iattr("block_size", 2)};
  qcase("QuantizeLinear", 3, bl, 2, b, 1, (const double* []){(const double[]){10, 12, 20, 22}});
}

static void test_dequantize(void) {
  const qin_t u8[] = {QIN("x", U8, 1, DIMS(3), 0, 128, 255), QIN("s", F32, 0, DIMS(0), 0.5),
                      QIN("z", U8, 0, DIMS(0), 128)};
  qcase("DequantizeLinear", 3, u8, 0, NULL, 1, (const double* []){(const double[]){-64, 0, 63.5}});
  const qin_t ax[] = {QIN("x", I8, 2, DIMS(2, 2), -128, 127, 0, 5), QIN("s", F32, 1, DIMS(2), 0.5, 2),
                      QIN("z", I8, 1, DIMS(2), 0, -1)};
  kiln_attr_t a[1] = {iattr("axis", 0)};
  qcase("DequantizeLinear", 3, ax, 1, a, 1, (const double* []){(const double[]){-64, 63.5, 2, 12}});
  /* a [1] scale beside a [] zero point (onnxruntime writes them so): per tensor */
  const qin_t mixed[] = {QIN("x", U8, 1, DIMS(2), 0, 255), QIN("s", F32, 1, DIMS(1), 0.5),
                         QIN("z", U8, 0, DIMS(0), 128)};
  qcase("DequantizeLinear", 3, mixed, 0, NULL, 1, (const double* []){(const double[]){-64, 63.5}});
  const qin_t i32[] = {QIN("x", I32, 1, DIMS(2), -1000000, 7), QIN("s", F32, 0, DIMS(0), 0.25)};
  qcase("DequantizeLinear", 2, i32, 0, NULL, 1, (const double* []){(const double[]){-250000, 1.75}});
}

/* range [-3, 5.1]: scale 8.1 / 255, zero point rint(94.44) = 94. */
static void test_dynamic_quantize(void) {
  const qin_t in[] = {QIN("x", F32, 1, DIMS(4), 0, 2, -3, 5.1)};
  const double scale = (double)((5.1f + 3.0f) / 255.0f);
  qcase("DynamicQuantizeLinear", 1, in, 0, NULL, 3,
        (const double* []){(const double[]){94, 157, 0, 255}, (const double[]){scale},
                           (const double[]){94}});
  /* a NaN: the range, hence the scale, is NaN; zero point and values 0 */
  const qin_t nan_in[] = {QIN("x", F32, 1, DIMS(3), 1, NAN, -1)};
  qcase("DynamicQuantizeLinear", 1, nan_in, 0, NULL, 3,
        (const double* []){(const double[]){0, 0, 0}, (const double[]){NAN}, (const double[]){0}});
  /* all zeros: scale 1/255, zero point 0 */
  const qin_t z[] = {QIN("x", F32, 1, DIMS(2), 0, 0)};
  qcase("DynamicQuantizeLinear", 1, z, 0, NULL, 3,
        (const double* []){(const double[]){0, 0}, (const double[]){1.0f / 255.0f}, (const double[]){0}});
}

/* A large input (more elements than one GPU loop may run on some drivers):
 * the target's scale, zero point and values equal the reference's. */
static void test_dynamic_quantize_large(void) {
  kiln_graph_t* g = graph_new();
  if (!g) return;
  const int64_t n = 300007;
  bool ok = input(g, "x", KILN_DTYPE_F32, 1, &n) &&
            CHECK_OK(kiln_graph_add_node(g, "DynamicQuantizeLinear", "q", 1, (const char*[]){"x"}, 3,
                                         (const char*[]){"y", "ys", "yz"}, 0, NULL, NULL));
  for (int k = 0; ok && k < 3; ++k) ok = CHECK_OK(kiln_graph_add_output(g, (const char*[]){"y", "ys", "yz"}[k]));
  ok = ok && CHECK_OK(kiln_graph_prepare(g));
  kiln_module_t* m = ok ? compile(g) : NULL;
  kiln_session_t* s = session(m);
  CHECK_MSG(s != NULL, "%s: DynamicQuantizeLinear did not compile", g_target_name);
  kiln_array_t in = arr(KILN_DTYPE_F32, 1, &n);
  float* x = in.data;
  /* the extremes sit far from the ends: -7.25 at 123457, 3.5 at 250001 */
  for (int64_t i = 0; x && i < n; ++i) x[i] = (float)((i * 7919) % 1000) * 0.003f - 1.0f;
  if (x) x[123457] = -7.25f, x[250001] = 3.5f;
  if (s && x) both_agree_n(g, s, &in, 3);
  free_arrays(&in, 1);
  kiln_session_destroy(s);
  kiln_module_release(m);
  kiln_graph_destroy(g);
}

/* (A - 1) [[0, 1, 2], [3, 4, 6]] x (B - [0, 1]) [[1, -2], [2, -1], [-3, 3]]. */
static void test_matmul_integer(void) {
  const qin_t in[] = {QIN("a", U8, 2, DIMS(2, 3), 1, 2, 3, 4, 5, 7),
                      QIN("b", I8, 2, DIMS(3, 2), 1, -1, 2, 0, -3, 4),
                      QIN("az", U8, 0, DIMS(0), 1), QIN("bz", I8, 1, DIMS(2), 0, 1)};
  qcase("MatMulInteger", 4, in, 0, NULL, 1, (const double* []){(const double[]){-4, 5, -7, 8}});
  /* per-row a zero points (the spec's reading, not numpy's broadcast over
   * columns, which would give [[0, 0], [8, 12]]): (A - [5, 6]) = [[0, 1], [1, 2]] */
  const qin_t rows[] = {QIN("a", U8, 2, DIMS(2, 2), 5, 6, 7, 8), QIN("b", U8, 2, DIMS(2, 2), 1, 2, 3, 4),
                        QIN("az", U8, 1, DIMS(2), 5, 6)};
  qcase("MatMulInteger", 3, rows, 0, NULL, 1, (const double* []){(const double[]){3, 4, 7, 10}});
}

/* sums [20, -30, 2520, 10] times 0.5 * 1 / 2: 5, -7.5 (tie to -8), 630
 * (saturates), 2.5 (tie to 2); + 100. */
static void test_qlinear_matmul(void) {
  const qin_t in[] = {QIN("a", U8, 2, DIMS(1, 2), 10, 20), QIN("as", F32, 0, DIMS(0), 0.5),
                      QIN("az", U8, 0, DIMS(0), 10),
                      QIN("b", U8, 2, DIMS(2, 4), 3, 255, 3, 3, 5, 0, 255, 4),
                      QIN("bs", F32, 0, DIMS(0), 1), QIN("bz", U8, 0, DIMS(0), 3),
                      QIN("ys", F32, 0, DIMS(0), 2), QIN("yz", U8, 0, DIMS(0), 100)};
  qcase("QLinearMatMul", 8, in, 0, NULL, 1, (const double* []){(const double[]){105, 92, 255, 102}});
  /* per-row a ([1, 0.5], zero points [0, 10]) and per-column b ([1, 2]):
   * sums [[20, 30], [20, 30]] times a_s[m] * b_s[n] */
  const qin_t pc[] = {QIN("a", U8, 2, DIMS(2, 1), 10, 20), QIN("as", F32, 1, DIMS(2), 1, 0.5),
                      QIN("az", U8, 1, DIMS(2), 0, 10), QIN("b", U8, 2, DIMS(1, 2), 3, 4),
                      QIN("bs", F32, 1, DIMS(2), 1, 2), QIN("bz", U8, 1, DIMS(2), 1, 1),
                      QIN("ys", F32, 0, DIMS(0), 1), QIN("yz", U8, 0, DIMS(0), 0)};
  qcase("QLinearMatMul", 8, pc, 0, NULL, 1, (const double* []){(const double[]){20, 60, 10, 30}});
}

/* (x - 1) with 1..9 in 3x3, padded by 1 (padding adds nothing), w 2x2. */
static void test_conv_integer(void) {
  const qin_t in[] = {QIN("x", U8, 4, DIMS(1, 1, 3, 3), 1, 2, 3, 4, 5, 6, 7, 8, 9),
                      QIN("w", U8, 4, DIMS(1, 1, 2, 2), 1, 2, 3, 4), QIN("xz", U8, 0, DIMS(0), 1)};
  kiln_attr_t a[1];
  memset(a, 0, sizeof a);
  a[0].name = "pads";
  a[0].type = KILN_ATTR_INTS;
  a[0].count = 4;
  a[0].ints = (const int64_t[]){1, 1, 1, 1};
  qcase("ConvInteger", 3, in, 1, a, 1,
        (const double* []){(const double[]){0, 4, 11, 6, 12, 27, 37, 17, 30, 57, 67, 29, 12, 20, 23, 8}});
}

/* Per-channel weight scales with a bias: channel 0 sums 2x + 1 = 21, -19,
 * 41, 61 times 0.5 (ties 10.5 -> 10, -9.5 -> -10, 20.5 -> 20, 30.5 -> 30);
 * channel 1 sums -3x times 0.25 (-7.5 -> -8, 7.5 -> 8, -15, -22.5 -> -22). */
static void test_qlinear_conv(void) {
  const qin_t in[] = {QIN("x", I8, 4, DIMS(1, 1, 2, 2), 10, -10, 20, 30), QIN("xs", F32, 0, DIMS(0), 0.5),
                      QIN("xz", I8, 0, DIMS(0), 0), QIN("w", I8, 4, DIMS(2, 1, 1, 1), 2, -3),
                      QIN("ws", F32, 1, DIMS(2), 1, 0.5), QIN("wz", I8, 1, DIMS(2), 0, 0),
                      QIN("ys", F32, 0, DIMS(0), 1), QIN("yz", I8, 0, DIMS(0), 0),
                      QIN("bias", I32, 1, DIMS(2), 1, 0)};
  qcase("QLinearConv", 9, in, 0, NULL, 1,
        (const double* []){(const double[]){10, -10, 20, 30, -8, 8, -15, -22}});
}

/* --precision fp16 leaves the quantized ops in fp32: a constant scale of
 * 0.1 (not an f16 value) and DynamicQuantizeLinear's min/max workspaces
 * keep f32, so no buffer converts and no kernel is fp16. */
static void test_fp16_keeps_quantized_fp32(void) {
  kiln_graph_t* g = graph_new();
  if (!g) return;
  const int64_t d = 6;
  kiln_shape_t sc = kiln_shape_make(0, NULL);
  kiln_array_t s;
  memset(&s, 0, sizeof s);
  bool ok = input(g, "x", KILN_DTYPE_F32, 1, &d) && CHECK_OK(kiln_array_alloc(al(), KILN_DTYPE_F32, &sc, &s));
  if (ok) *(float*)s.data = 0.1f;
  ok = ok && CHECK_OK(kiln_graph_add_initializer(g, "s", &s, NULL)) &&
       node1(g, "QuantizeLinear", "q", 2, (const char*[]){"x", "s"}, "y", 0, NULL) &&
       CHECK_OK(kiln_graph_add_node(g, "DynamicQuantizeLinear", "dq", 1, (const char*[]){"x"}, 3,
                                    (const char*[]){"y1", "y2", "y3"}, 0, NULL, NULL)) &&
       CHECK_OK(kiln_graph_add_output(g, "y")) && CHECK_OK(kiln_graph_add_output(g, "y1")) &&
       CHECK_OK(kiln_graph_prepare(g));
  kiln_array_free(al(), &s);
  kiln_plan_options_t po = {KILN_TARGET_CLASS_CPU, 2, 0, 0, 0, 0};
  kiln_plan_t* plan = NULL;
  kiln_precision_report_t rep;
  memset(&rep, 0, sizeof rep);
  kiln_precision_options_t o = {KILN_PRECISION_FP16, false, false, NULL, false, false};
  if (ok && CHECK_OK(kiln_plan_build(g, &po, al(), &plan)) && CHECK_OK(kiln_plan_fuse(plan, NULL, NULL)) &&
      CHECK_OK(kiln_plan_set_precision(plan, &o, &rep))) {
    CHECK_MSG(rep.n_kernels >= 4 && rep.kernels_fp16 == 0 && rep.buffers_converted == 0,
              "%d of %d kernels fp16, %d buffers converted", (int)rep.kernels_fp16, (int)rep.n_kernels,
              (int)rep.buffers_converted);
  }
  kiln_precision_report_free(&rep);
  kiln_plan_destroy(plan);
  kiln_graph_destroy(g);
}

int main(int argc, char** argv) {
  int rc = target_open(argc, argv);
  if (rc) return rc;
  RUN(test_quantize_ties_saturation);
  RUN(test_quantize_per_axis);
  RUN(test_dequantize);
  RUN(test_dynamic_quantize);
  RUN(test_dynamic_quantize_large);
  RUN(test_matmul_integer);
  RUN(test_qlinear_matmul);
  RUN(test_conv_integer);
  RUN(test_qlinear_conv);
  RUN(test_fp16_keeps_quantized_fp32);
  kiln_device_release(g_device);
  return kiln_test_finish();
}
