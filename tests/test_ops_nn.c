/* Unit tests for the nn op family (ir/ops/nn*.c): reference kernels on
 * hand-computed values (Conv stride/pad/group/dilation, depthwise,
 * ConvTranspose, Gemm, MatMul, pools, Softmax, normalisations, reductions),
 * shape inference with symbolic dims, and the validation messages for bad
 * attributes (BAD_INPUTS rows 10 and 12). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ir/op.h"
#include "compiler/ref_exec.h"
#include "testing.h"

#define F32 KILN_DTYPE_F32
#define F16 KILN_DTYPE_F16
#define U8 KILN_DTYPE_U8
#define I32 KILN_DTYPE_I32
#define I64 KILN_DTYPE_I64
#define BOOL KILN_DTYPE_BOOL
#define NONE KILN_DTYPE_UNDEFINED /* an omitted optional input */

#define DIMS(...) (int64_t[]){__VA_ARGS__}
#define FV(...) (float[]){__VA_ARGS__}
#define IV(...) (int64_t[]){__VA_ARGS__}
#define ARR(t, rank, dims, data) mk((t), (rank), (dims), (data))
#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

static kiln_allocator_t A(void) { return kiln_allocator_system(); }

/* A borrowed description of an array (data not owned). */
static kiln_array_t mk(kiln_dtype_t t, int rank, const int64_t* dims,
                       const void* data) {
  kiln_array_t a;
  memset(&a, 0, sizeof a);
  a.dtype = t;
  a.shape = kiln_shape_make(rank, dims);
  a.data = (void*)data;
  a.nbytes = t == NONE ? 0 : (size_t)kiln_shape_count(&a.shape) * kiln_dtype_size(t);
  return a;
}
static const kiln_array_t omitted = {.dtype = NONE};

#define INTS(name, ...) \
  kiln_attr_make_ints(name, NELEM(((int64_t[]){__VA_ARGS__})), (int64_t[]){__VA_ARGS__})

typedef struct spec_s {
  const char* op;
  int64_t opset;
  int n_in;
  const kiln_array_t* in;
  uint32_t const_mask; /* bit i: input i is an initializer */
  int n_attrs;
  const kiln_attr_t* attrs;
  int n_out;
} spec_t;

static const char* const in_names[] = {"x0", "x1", "x2", "x3", "x4"};
static const char* const out_names[] = {"y0", "y1", "y2"};

/* Builds and prepares a one-node graph. */
static kiln_status_t build(const spec_t* sp, kiln_graph_t** out_g) {
  kiln_graph_t* g = NULL;
  KILN_RETURN_IF_ERROR(kiln_graph_create(A(), &g));
  kiln_status_t s = kiln_graph_set_opset(g, "", sp->opset);
  const char* names[5];
  for (int i = 0; i < sp->n_in && !s; ++i) {
    names[i] = sp->in[i].dtype == NONE ? "" : in_names[i];
    if (sp->in[i].dtype == NONE) continue;
    if (sp->const_mask & (1u << i)) {
      kiln_array_t c;
      s = kiln_array_clone(A(), &sp->in[i], &c);
      if (!s) s = kiln_graph_add_initializer(g, in_names[i], &c, NULL);
    } else {
      s = kiln_graph_add_input(g, in_names[i], sp->in[i].dtype, &sp->in[i].shape, NULL);
    }
  }
  if (!s)
    s = kiln_graph_add_node(g, sp->op, "n0", sp->n_in, names, sp->n_out, out_names,
                            sp->n_attrs, sp->attrs, NULL);
  for (int o = 0; o < sp->n_out && !s; ++o) s = kiln_graph_add_output(g, out_names[o]);
  if (!s) s = kiln_graph_prepare(g);
  if (s) {
    kiln_graph_destroy(g);
    return s;
  }
  *out_g = g;
  return NULL;
}

/* Builds, prepares and runs; |outs| receive arrays the caller frees. */
static kiln_status_t run_spec(const spec_t* sp, kiln_array_t* outs) {
  kiln_graph_t* g = NULL;
  KILN_RETURN_IF_ERROR(build(sp, &g));
  kiln_array_t feeds[5];
  int nf = 0;
  for (int i = 0; i < sp->n_in; ++i)
    if (sp->in[i].dtype != NONE && !(sp->const_mask & (1u << i))) feeds[nf++] = sp->in[i];
  kiln_ref_options_t o;
  kiln_ref_options_default(&o);
  kiln_status_t s = kiln_ref_run(g, feeds, &o, outs);
  kiln_graph_destroy(g);
  return s;
}

static kiln_status_t run_op(const char* op, int64_t opset, int n_in,
                            const kiln_array_t* in, uint32_t const_mask,
                            int n_attrs, const kiln_attr_t* attrs,
                            kiln_array_t* out) {
  spec_t sp = {op, opset, n_in, in, const_mask, n_attrs, attrs, 1};
  return run_spec(&sp, out);
}

static bool shape_is(const kiln_shape_t* s, int rank, const int64_t* dims) {
  if (s->rank != rank) return false;
  for (int i = 0; i < rank; ++i)
    if (s->dims[i] != dims[i]) return false;
  return true;
}

static void check_f32(const kiln_array_t* y, int64_t n, const float* want,
                      double tol) {
  CHECK(y->dtype == F32);
  CHECK_MSG(kiln_array_numel(y) == n, "numel %lld, want %lld",
            (long long)kiln_array_numel(y), (long long)n);
  if (y->dtype != F32 || kiln_array_numel(y) != n) return;
  for (int64_t i = 0; i < n; ++i) {
    float got = ((const float*)y->data)[i];
    /* == first: infinities compare equal, their difference is NaN */
    CHECK_MSG(got == want[i] || fabs(got - want[i]) <= tol, "element %lld: got %.9g, want %.9g",
              (long long)i, got, want[i]);
  }
}

/* Runs |op| and compares output 0 with |want| (shape and values). */
static void expect_f32(const char* op, int64_t opset, int n_in,
                       const kiln_array_t* in, uint32_t const_mask, int n_attrs,
                       const kiln_attr_t* attrs, int rank, const int64_t* dims,
                       const float* want, double tol) {
  kiln_array_t y = {0};
  if (!CHECK_OK(run_op(op, opset, n_in, in, const_mask, n_attrs, attrs, &y))) return;
  CHECK_MSG(shape_is(&y.shape, rank, dims), "%s: unexpected output shape", op);
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  check_f32(&y, n, want, tol);
  kiln_array_free(A(), &y);
}

/* Expects building (load-time inference) to fail with |code| and |needle|. */
static kiln_status_t load_only(const char* op, int64_t opset, int n_in,
                               const kiln_array_t* in, uint32_t const_mask,
                               int n_attrs, const kiln_attr_t* attrs) {
  spec_t sp = {op, opset, n_in, in, const_mask, n_attrs, attrs, 1};
  kiln_graph_t* g = NULL;
  kiln_status_t s = build(&sp, &g);
  kiln_graph_destroy(g);
  return s;
}

static float iota16[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
static float ones9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};

/* ---- Conv ------------------------------------------------------------- */

static void test_conv_stride2_pad1_bias(void) {
  /* x[r][c] = 4r + c, 3x3 ones kernel, stride 2, pad 1: each output sums the
   * in-bounds part of a window centred on (2*oh, 2*ow). */
  kiln_array_t in[3] = {ARR(F32, 4, DIMS(1, 1, 4, 4), iota16),
                        ARR(F32, 4, DIMS(1, 1, 3, 3), ones9),
                        ARR(F32, 1, DIMS(1), FV(1))};
  kiln_attr_t at[3] = {INTS("strides", 2, 2), INTS("pads", 1, 1, 1, 1),
                       INTS("kernel_shape", 3, 3)};
  expect_f32("Conv", 13, 3, in, 6, 3, at, 4, DIMS(1, 1, 2, 2),
             FV(11, 25, 52, 91), 1e-5);
}

static void test_conv_asymmetric_pads_and_auto_pad(void) {
  /* pads [1,0,0,0] (top only), 2x2 ones kernel on 4x4: 4x3 output. */
  float w4[4] = {1, 1, 1, 1};
  kiln_array_t in[2] = {ARR(F32, 4, DIMS(1, 1, 4, 4), iota16),
                        ARR(F32, 4, DIMS(1, 1, 2, 2), w4)};
  kiln_attr_t at[1] = {INTS("pads", 1, 0, 0, 0)};
  expect_f32("Conv", 13, 2, in, 2, 1, at, 4, DIMS(1, 1, 4, 3),
             FV(1, 3, 5, 10, 14, 18, 26, 30, 34, 42, 46, 50), 1e-5);
  /* SAME_UPPER, stride 1: output 4x4, the extra pad goes at the end. */
  kiln_attr_t su[1] = {kiln_attr_make_string("auto_pad", "SAME_UPPER")};
  expect_f32("Conv", 13, 2, in, 2, 1, su, 4, DIMS(1, 1, 4, 4),
             FV(10, 14, 18, 10, 26, 30, 34, 18, 42, 46, 50, 26, 25, 27, 29, 15),
             1e-5);
  /* SAME_LOWER puts it at the start. */
  kiln_attr_t sl[1] = {kiln_attr_make_string("auto_pad", "SAME_LOWER")};
  expect_f32("Conv", 13, 2, in, 2, 1, sl, 4, DIMS(1, 1, 4, 4),
             FV(0, 1, 3, 5, 4, 10, 14, 18, 12, 26, 30, 34, 20, 42, 46, 50),
             1e-5);
}

static void test_conv_group2(void) {
  /* Two groups of one input channel and two output channels each: output
   * channel m reads input channel m / 2. */
  float x[4] = {1, 2, 3, 4};  /* ch0 = [1,2], ch1 = [3,4] */
  float w[4] = {1, 2, 3, 4};  /* 1x1 kernels */
  kiln_array_t in[2] = {ARR(F32, 4, DIMS(1, 2, 1, 2), x),
                        ARR(F32, 4, DIMS(4, 1, 1, 1), w)};
  kiln_attr_t at[1] = {kiln_attr_make_int("group", 2)};
  expect_f32("Conv", 13, 2, in, 2, 1, at, 4, DIMS(1, 4, 1, 2),
             FV(1, 2, 2, 4, 9, 12, 12, 16), 1e-6);
  /* 2x2 kernels over constant channels (1 and 2) with weights 1 and 10. */
  float x2[18], w2[8] = {1, 1, 1, 1, 10, 10, 10, 10};
  for (int i = 0; i < 18; ++i) x2[i] = i < 9 ? 1.0f : 2.0f;
  kiln_array_t in2[2] = {ARR(F32, 4, DIMS(1, 2, 3, 3), x2),
                         ARR(F32, 4, DIMS(2, 1, 2, 2), w2)};
  expect_f32("Conv", 13, 2, in2, 2, 1, at, 4, DIMS(1, 2, 2, 2),
             FV(4, 4, 4, 4, 80, 80, 80, 80), 1e-5);
}

static void test_conv_dilation2(void) {
  /* y[i][j] = x[i][j] + 2x[i][j+2] + 3x[i+2][j] + 4x[i+2][j+2] with
   * x[r][c] = 5r + c, i.e. 10(5i + j) + 82. */
  float x[25];
  for (int i = 0; i < 25; ++i) x[i] = (float)i;
  kiln_array_t in[2] = {ARR(F32, 4, DIMS(1, 1, 5, 5), x),
                        ARR(F32, 4, DIMS(1, 1, 2, 2), FV(1, 2, 3, 4))};
  kiln_attr_t at[1] = {INTS("dilations", 2, 2)};
  expect_f32("Conv", 13, 2, in, 2, 1, at, 4, DIMS(1, 1, 3, 3),
             FV(82, 92, 102, 132, 142, 152, 182, 192, 202), 1e-4);
}

static void test_conv_depthwise(void) {
  /* group = channels = 3, ones input, kernel of channel c all (c + 1), pad 1:
   * each output counts its in-bounds taps (4 corner, 6 edge, 9 centre). */
  float x[27], w[27];
  for (int i = 0; i < 27; ++i) {
    x[i] = 1.0f;
    w[i] = (float)(i / 9 + 1);
  }
  kiln_array_t in[2] = {ARR(F32, 4, DIMS(1, 3, 3, 3), x),
                        ARR(F32, 4, DIMS(3, 1, 3, 3), w)};
  kiln_attr_t at[2] = {kiln_attr_make_int("group", 3), INTS("pads", 1, 1, 1, 1)};
  float want[27];
  const float taps[9] = {4, 6, 4, 6, 9, 6, 4, 6, 4};
  for (int i = 0; i < 27; ++i) want[i] = taps[i % 9] * (float)(i / 9 + 1);
  expect_f32("Conv", 13, 2, in, 2, 2, at, 4, DIMS(1, 3, 3, 3), want, 1e-5);
}

static void test_conv_1d_and_3d(void) {
  /* 1-D: [1,2,3,4,5] * [1,0,-1] with stride 2 -> [-2, -2]. */
  kiln_array_t in1[2] = {ARR(F32, 3, DIMS(1, 1, 5), FV(1, 2, 3, 4, 5)),
                         ARR(F32, 3, DIMS(1, 1, 3), FV(1, 0, -1))};
  kiln_attr_t s2[1] = {INTS("strides", 2)};
  expect_f32("Conv", 13, 2, in1, 2, 1, s2, 3, DIMS(1, 1, 2), FV(-2, -2), 1e-6);
  /* 3-D: 2x2x2 ones kernel over a 2x2x3 volume of 0..11. */
  float x[12];
  for (int i = 0; i < 12; ++i) x[i] = (float)i;
  float w[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  kiln_array_t in3[2] = {ARR(F32, 5, DIMS(1, 1, 2, 2, 3), x),
                         ARR(F32, 5, DIMS(1, 1, 2, 2, 2), w)};
  /* window at w0: 0+1+3+4+6+7+9+10 = 40; at w1: 48. */
  expect_f32("Conv", 13, 2, in3, 2, 0, NULL, 5, DIMS(1, 1, 1, 1, 2), FV(40, 48),
             1e-5);
}

static void test_conv_f16(void) {
  uint16_t x[4], w[1] = {kiln_f32_to_f16(2.0f)};
  for (int i = 0; i < 4; ++i) x[i] = kiln_f32_to_f16((float)i);
  kiln_array_t in[2] = {ARR(F16, 4, DIMS(1, 1, 2, 2), x),
                        ARR(F16, 4, DIMS(1, 1, 1, 1), w)};
  kiln_array_t y = {0};
  if (!CHECK_OK(run_op("Conv", 13, 2, in, 2, 0, NULL, &y))) return;
  CHECK(y.dtype == F16);
  for (int i = 0; i < 4 && y.dtype == F16; ++i)
    CHECK_NEAR(kiln_f16_to_f32(((uint16_t*)y.data)[i]), 2.0f * i, 1e-3);
  kiln_array_free(A(), &y);
}

static void test_conv_symbolic_batch(void) {
  kiln_graph_t* g = NULL;
  if (!CHECK_OK(kiln_graph_create(A(), &g))) return;
  int32_t sym = 0;
  CHECK_OK(kiln_graph_set_opset(g, "", 13));
  CHECK_OK(kiln_graph_symbol(g, "N", &sym));
  const int64_t N = kiln_dim_from_symbol(sym);
  kiln_shape_t xs = kiln_shape_make(4, DIMS(N, 3, KILN_DIM_UNKNOWN, 8));
  CHECK_OK(kiln_graph_add_input(g, "x", F32, &xs, NULL));
  float w[16 * 3 * 9] = {0};
  kiln_array_t wa = ARR(F32, 4, DIMS(16, 3, 3, 3), w), wc;
  CHECK_OK(kiln_array_clone(A(), &wa, &wc));
  CHECK_OK(kiln_graph_add_initializer(g, "w", &wc, NULL));
  kiln_attr_t at[2] = {INTS("strides", 2, 2), INTS("pads", 1, 1, 1, 1)};
  CHECK_OK(kiln_graph_add_node(g, "Conv", "c", 2, (const char*[]){"x", "w"}, 1,
                               (const char*[]){"y"}, 2, at, NULL));
  CHECK_OK(kiln_graph_add_output(g, "y"));
  if (CHECK_OK(kiln_graph_prepare(g))) {
    const kiln_tensor_t* y = &g->tensors[kiln_graph_find_tensor(g, "y")];
    CHECK(y->shape.rank == 4);
    CHECK(y->shape.dims[0] == N);
    CHECK(y->shape.dims[1] == 16);
    CHECK(y->shape.dims[2] == KILN_DIM_UNKNOWN);
    CHECK(y->shape.dims[3] == 4);
  }
  kiln_graph_destroy(g);
}

static void test_conv_errors(void) {
  float x[4 * 25] = {0}, w[2 * 3 * 25] = {0};
  kiln_array_t in[2] = {ARR(F32, 4, DIMS(1, 1, 5, 5), x),
                        ARR(F32, 4, DIMS(1, 1, 5, 5), w)};
  /* Zero stride and dilation, zero group (row 12). */
  kiln_attr_t zs[1] = {INTS("strides", 1, 0)};
  CHECK_ERR(load_only("Conv", 13, 2, in, 2, 1, zs), KILN_INVALID_ARGUMENT,
            "Conv: strides[1] is 0, must be >= 1");
  kiln_attr_t zd[1] = {INTS("dilations", 0, 1)};
  CHECK_ERR(load_only("Conv", 13, 2, in, 2, 1, zd), KILN_INVALID_ARGUMENT,
            "Conv: dilations[0] is 0, must be >= 1");
  kiln_attr_t zg[1] = {kiln_attr_make_int("group", 0)};
  CHECK_ERR(load_only("Conv", 13, 2, in, 2, 1, zg), KILN_INVALID_ARGUMENT,
            "Conv: group is 0, must be >= 1");
  kiln_attr_t np[1] = {INTS("pads", 0, -1, 0, 0)};
  CHECK_ERR(load_only("Conv", 13, 2, in, 2, 1, np), KILN_INVALID_ARGUMENT,
            "Conv: pads[1] is -1, must be >= 0");
  kiln_attr_t sl[1] = {INTS("strides", 1)};
  CHECK_ERR(load_only("Conv", 13, 2, in, 2, 1, sl), KILN_INVALID_ARGUMENT,
            "Conv: strides has 1 values, expected 2");
  /* kernel_shape disagreeing with the weight (row 10). */
  kiln_attr_t ks[1] = {INTS("kernel_shape", 3, 3)};
  CHECK_ERR(load_only("Conv", 13, 2, in, 2, 1, ks), KILN_INVALID_ARGUMENT,
            "Conv: kernel_shape [3,3] disagrees with weight 'x1' spatial dims "
            "[5,5]");
  /* Weight channels vs input channels / group. */
  kiln_array_t cm[2] = {ARR(F32, 4, DIMS(1, 4, 5, 5), x),
                        ARR(F32, 4, DIMS(2, 3, 3, 3), w)};
  CHECK_ERR(load_only("Conv", 13, 2, cm, 2, 0, NULL), KILN_INVALID_ARGUMENT,
            "weight 'x1' has 3 input channels (dim 1), expected 4");
  kiln_attr_t g3[1] = {kiln_attr_make_int("group", 3)};
  CHECK_ERR(load_only("Conv", 13, 2, cm, 2, 1, g3), KILN_INVALID_ARGUMENT,
            "Conv: group 3 does not divide the 4 input channels of 'x0'");
  /* group beyond the channel count (0 channels, 0 filters). */
  kiln_array_t z0[2] = {ARR(F32, 4, DIMS(1, 0, 5, 5), x),
                        ARR(F32, 4, DIMS(0, 0, 3, 3), w)};
  kiln_attr_t gh[1] = {kiln_attr_make_int("group", (int64_t)1 << 40)};
  CHECK_ERR(load_only("Conv", 13, 2, z0, 2, 1, gh), KILN_INVALID_ARGUMENT,
            "exceeds the 0 input channels");
  kiln_array_t mo[2] = {ARR(F32, 4, DIMS(1, 4, 5, 5), x),
                        ARR(F32, 4, DIMS(3, 2, 3, 3), w)};
  kiln_attr_t g2[1] = {kiln_attr_make_int("group", 2)};
  CHECK_ERR(load_only("Conv", 13, 2, mo, 2, 1, g2), KILN_INVALID_ARGUMENT,
            "group 2 does not divide the 3 output channels");
  /* Output spatial size <= 0: 3x3 kernel on a 2x2 input. */
  kiln_array_t sm[2] = {ARR(F32, 4, DIMS(1, 1, 2, 2), x),
                        ARR(F32, 4, DIMS(1, 1, 3, 3), w)};
  CHECK_ERR(load_only("Conv", 13, 2, sm, 2, 0, NULL), KILN_INVALID_ARGUMENT,
            "Conv: output spatial dim 0 would be 0");
  /* Bias of the wrong length, ranks that disagree, a bad auto_pad. */
  kiln_array_t bb[3] = {in[0], in[1], ARR(F32, 1, DIMS(2), FV(0, 0))};
  CHECK_ERR(load_only("Conv", 13, 3, bb, 6, 0, NULL), KILN_INVALID_ARGUMENT,
            "Conv: bias has shape [2], expected [1]");
  kiln_array_t rk[2] = {ARR(F32, 4, DIMS(1, 1, 5, 5), x),
                        ARR(F32, 3, DIMS(1, 1, 5), w)};
  CHECK_ERR(load_only("Conv", 13, 2, rk, 2, 0, NULL), KILN_INVALID_ARGUMENT,
            "weight 'x1' has rank 3 but input 'x0' has rank 4");
  kiln_attr_t ap[1] = {kiln_attr_make_string("auto_pad", "SAME")};
  CHECK_ERR(load_only("Conv", 13, 2, in, 2, 1, ap), KILN_INVALID_ARGUMENT,
            "auto_pad 'SAME'");
  /* Integer inputs are not claimed. */
  int32_t xi[25] = {0}, wi[25] = {0};
  kiln_array_t ii[2] = {ARR(I32, 4, DIMS(1, 1, 5, 5), xi),
                        ARR(I32, 4, DIMS(1, 1, 5, 5), wi)};
  CHECK_ERR(load_only("Conv", 13, 2, ii, 2, 0, NULL), KILN_UNSUPPORTED,
            "Conv: input 'x0' has dtype i32");
}

/* ---- ConvTranspose ---------------------------------------------------- */

static void test_conv_transpose(void) {
  /* 1-D, stride 2: each input scatters w = [1,1,1] at 2i: out length 7. */
  kiln_array_t in[2] = {ARR(F32, 3, DIMS(1, 1, 3), FV(1, 2, 3)),
                        ARR(F32, 3, DIMS(1, 1, 3), FV(1, 1, 1))};
  kiln_attr_t at[1] = {INTS("strides", 2)};
  expect_f32("ConvTranspose", 13, 2, in, 2, 1, at, 3, DIMS(1, 1, 7),
             FV(1, 1, 3, 2, 5, 3, 3), 1e-6);
  /* pads [1,1] trim one element per side; output_padding adds one at the
   * end (left untouched by the scatter, so 0). */
  kiln_attr_t pp[3] = {INTS("strides", 2), INTS("pads", 1, 1),
                       INTS("output_padding", 1)};
  expect_f32("ConvTranspose", 13, 2, in, 2, 3, pp, 3, DIMS(1, 1, 6),
             FV(1, 3, 2, 5, 3, 3), 1e-6);
  /* output_shape fixes the size, pads follow from it. */
  kiln_attr_t os[2] = {INTS("strides", 2), INTS("output_shape", 8)};
  expect_f32("ConvTranspose", 13, 2, in, 2, 2, os, 3, DIMS(1, 1, 8),
             FV(1, 1, 3, 2, 5, 3, 3, 0), 1e-6);
  /* SAME_*: output = input * stride, the 7-long full result trimmed by
   * one at the end (UPPER) or the start (LOWER). */
  kiln_attr_t su[2] = {INTS("strides", 2), kiln_attr_make_string("auto_pad", "SAME_UPPER")};
  expect_f32("ConvTranspose", 13, 2, in, 2, 2, su, 3, DIMS(1, 1, 6),
             FV(1, 1, 3, 2, 5, 3), 1e-6);
  kiln_attr_t sl[2] = {INTS("strides", 2), kiln_attr_make_string("auto_pad", "SAME_LOWER")};
  expect_f32("ConvTranspose", 13, 2, in, 2, 2, sl, 3, DIMS(1, 1, 6),
             FV(1, 3, 2, 5, 3, 3), 1e-6);
  /* group 2 with two output channels per group plus bias. */
  kiln_array_t g[3] = {ARR(F32, 3, DIMS(1, 2, 1), FV(1, 10)),
                       ARR(F32, 3, DIMS(2, 2, 1), FV(1, 2, 3, 4)),
                       ARR(F32, 1, DIMS(4), FV(0, 0, 0, 0.5f))};
  kiln_attr_t gr[1] = {kiln_attr_make_int("group", 2)};
  expect_f32("ConvTranspose", 13, 3, g, 6, 1, gr, 3, DIMS(1, 4, 1),
             FV(1, 2, 30, 40.5f), 1e-6);
  /* Channel mismatch. */
  kiln_array_t bad[2] = {ARR(F32, 3, DIMS(1, 2, 3), FV(0, 0, 0, 0, 0, 0)),
                         ARR(F32, 3, DIMS(1, 1, 3), FV(1, 1, 1))};
  CHECK_ERR(load_only("ConvTranspose", 13, 2, bad, 2, 0, NULL),
            KILN_INVALID_ARGUMENT,
            "ConvTranspose: weight 'x1' has 1 input channels (dim 0) but "
            "input 'x0' has 2");
  kiln_attr_t zs[1] = {INTS("strides", 0)};
  CHECK_ERR(load_only("ConvTranspose", 13, 2, in, 2, 1, zs),
            KILN_INVALID_ARGUMENT, "ConvTranspose: strides[0] is 0");
}

/* ---- MatMul / Gemm ---------------------------------------------------- */

static void test_gemm(void) {
  /* transB, alpha 2, beta 0.5, C [2] broadcast along rows. */
  kiln_array_t in[3] = {ARR(F32, 2, DIMS(2, 3), FV(1, 2, 3, 4, 5, 6)),
                        ARR(F32, 2, DIMS(2, 3), FV(1, 0, 1, 0, 1, 0)),
                        ARR(F32, 1, DIMS(2), FV(10, 20))};
  kiln_attr_t at[3] = {kiln_attr_make_int("transB", 1), kiln_attr_make_float("alpha", 2.0f),
                       kiln_attr_make_float("beta", 0.5f)};
  expect_f32("Gemm", 13, 3, in, 0, 3, at, 2, DIMS(2, 2), FV(13, 14, 25, 20),
             1e-5);
  /* C [2,1] broadcast along columns, transA, no alpha/beta. */
  kiln_array_t ta[3] = {ARR(F32, 2, DIMS(3, 2), FV(1, 4, 2, 5, 3, 6)),
                        ARR(F32, 2, DIMS(3, 2), FV(1, 0, 0, 1, 1, 0)),
                        ARR(F32, 2, DIMS(2, 1), FV(100, 200))};
  kiln_attr_t tt[1] = {kiln_attr_make_int("transA", 1)};
  expect_f32("Gemm", 13, 3, ta, 0, 1, tt, 2, DIMS(2, 2), FV(104, 102, 210, 205),
             1e-5);
  /* No C (opset 11+). */
  kiln_array_t nc[3] = {ARR(F32, 2, DIMS(1, 2), FV(1, 2)),
                        ARR(F32, 2, DIMS(2, 1), FV(3, 4)), omitted};
  expect_f32("Gemm", 13, 3, nc, 0, 0, NULL, 2, DIMS(1, 1), FV(11), 1e-6);
  /* Errors: K mismatch, C that does not broadcast. */
  CHECK_ERR(load_only("Gemm", 13, 3, in, 0, 0, NULL), KILN_INVALID_ARGUMENT,
            "Gemm: inner dimensions disagree");
  kiln_array_t bc[3] = {in[0], in[1], ARR(F32, 1, DIMS(3), FV(1, 2, 3))};
  kiln_attr_t tb[1] = {kiln_attr_make_int("transB", 1)};
  CHECK_ERR(load_only("Gemm", 13, 3, bc, 0, 1, tb), KILN_INVALID_ARGUMENT,
            "does not broadcast to [2,2]");
}

static void test_matmul(void) {
  /* 1-D x 2-D: the promoted dim is dropped -> shape [2]. */
  kiln_array_t v[2] = {ARR(F32, 1, DIMS(3), FV(1, 2, 3)),
                       ARR(F32, 2, DIMS(3, 2), FV(1, 2, 3, 4, 5, 6))};
  expect_f32("MatMul", 13, 2, v, 0, 0, NULL, 1, DIMS(2), FV(22, 28), 1e-5);
  /* 2-D x 1-D -> [2]. */
  kiln_array_t mv[2] = {ARR(F32, 2, DIMS(2, 3), FV(1, 2, 3, 4, 5, 6)),
                        ARR(F32, 1, DIMS(3), FV(1, 0, -1))};
  expect_f32("MatMul", 13, 2, mv, 0, 0, NULL, 1, DIMS(2), FV(-2, -2), 1e-6);
  /* 1-D x 1-D -> scalar. */
  kiln_array_t dot[2] = {ARR(F32, 1, DIMS(3), FV(1, 2, 3)),
                         ARR(F32, 1, DIMS(3), FV(4, 5, 6))};
  expect_f32("MatMul", 13, 2, dot, 0, 0, NULL, 0, NULL, FV(32), 1e-5);
  /* Batched with broadcast: [2,1,2] x [3,2,1] -> [2,3,1,1]... as [2,1,1,2] x
   * [3,2,1] -> [2,3,1,1]. */
  kiln_array_t bb[2] = {ARR(F32, 4, DIMS(2, 1, 1, 2), FV(1, 2, 3, 4)),
                        ARR(F32, 3, DIMS(3, 2, 1), FV(1, 1, 1, 0, 0, 1))};
  expect_f32("MatMul", 13, 2, bb, 0, 0, NULL, 4, DIMS(2, 3, 1, 1),
             FV(3, 1, 2, 7, 3, 4), 1e-6);
  /* Integers. */
  int64_t ai[4] = {1, 2, 3, 4}, bi[4] = {5, 6, 7, 8};
  kiln_array_t ii[2] = {ARR(I64, 2, DIMS(2, 2), ai), ARR(I64, 2, DIMS(2, 2), bi)};
  kiln_array_t y = {0};
  if (CHECK_OK(run_op("MatMul", 13, 2, ii, 0, 0, NULL, &y))) {
    const int64_t* d = (const int64_t*)y.data;
    CHECK(y.dtype == I64 && d[0] == 19 && d[1] == 22 && d[2] == 43 && d[3] == 50);
    kiln_array_free(A(), &y);
  }
  kiln_array_t km[2] = {ARR(F32, 2, DIMS(2, 3), FV(0, 0, 0, 0, 0, 0)),
                        ARR(F32, 2, DIMS(2, 3), FV(0, 0, 0, 0, 0, 0))};
  CHECK_ERR(load_only("MatMul", 13, 2, km, 0, 0, NULL), KILN_INVALID_ARGUMENT,
            "MatMul: inner dimensions disagree: 'x0' [2,3] has K=3, 'x1' "
            "[2,3] has K=2");
}

/* ---- pools ------------------------------------------------------------ */

static void test_maxpool(void) {
  float x[16];
  for (int i = 0; i < 16; ++i) x[i] = (float)(i + 1);
  kiln_array_t in[1] = {ARR(F32, 4, DIMS(1, 1, 4, 4), x)};
  kiln_attr_t at[3] = {INTS("kernel_shape", 3, 3), INTS("strides", 2, 2),
                       kiln_attr_make_int("ceil_mode", 1)};
  expect_f32("MaxPool", 13, 1, in, 0, 3, at, 4, DIMS(1, 1, 2, 2),
             FV(11, 12, 15, 16), 0);
  /* Without ceil_mode only one window fits. */
  expect_f32("MaxPool", 13, 1, in, 0, 2, at, 4, DIMS(1, 1, 1, 1), FV(11), 0);
  /* ceil_mode never starts a window in the end padding: 2x2, k1, s2 -> 1x1. */
  kiln_array_t two[1] = {ARR(F32, 4, DIMS(1, 1, 2, 2), FV(1, 2, 3, 4))};
  kiln_attr_t k1[3] = {INTS("kernel_shape", 1, 1), INTS("strides", 2, 2),
                       kiln_attr_make_int("ceil_mode", 1)};
  expect_f32("MaxPool", 13, 1, two, 0, 3, k1, 4, DIMS(1, 1, 1, 1), FV(1), 0);
  /* Indices, row- and column-major. */
  kiln_array_t ix[1] = {ARR(F32, 4, DIMS(1, 1, 2, 3), FV(1, 5, 2, 4, 3, 6))};
  for (int order = 0; order < 2; ++order) {
    kiln_attr_t ka[2] = {INTS("kernel_shape", 2, 2), kiln_attr_make_int("storage_order", order)};
    spec_t sp = {"MaxPool", 12, 1, ix, 0, 2, ka, 2};
    kiln_array_t out[2] = {{0}, {0}};
    if (!CHECK_OK(run_spec(&sp, out))) continue;
    check_f32(&out[0], 2, FV(5, 6), 0);
    CHECK(out[1].dtype == I64);
    if (out[1].dtype == I64) {
      const int64_t* d = (const int64_t*)out[1].data;
      CHECK_MSG(d[0] == (order ? 2 : 1) && d[1] == 5, "order %d: indices %lld %lld",
                order, (long long)d[0], (long long)d[1]);
    }
    kiln_array_free(A(), &out[0]);
    kiln_array_free(A(), &out[1]);
  }
  /* u8 works; zero stride and a missing kernel_shape do not. */
  uint8_t xu[4] = {3, 200, 7, 9};
  kiln_array_t iu[1] = {ARR(U8, 4, DIMS(1, 1, 2, 2), xu)};
  kiln_attr_t k2[1] = {INTS("kernel_shape", 2, 2)};
  kiln_array_t y = {0};
  if (CHECK_OK(run_op("MaxPool", 13, 1, iu, 0, 1, k2, &y))) {
    CHECK(y.dtype == U8 && ((uint8_t*)y.data)[0] == 200);
    kiln_array_free(A(), &y);
  }
  kiln_attr_t zs[2] = {INTS("kernel_shape", 2, 2), INTS("strides", 0, 1)};
  CHECK_ERR(load_only("MaxPool", 13, 1, in, 0, 2, zs), KILN_INVALID_ARGUMENT,
            "MaxPool: strides[0] is 0, must be >= 1");
  CHECK_ERR(load_only("MaxPool", 13, 1, in, 0, 0, NULL), KILN_INVALID_ARGUMENT,
            "MaxPool: required attribute kernel_shape is missing");
  /* A huge kernel with matching padding is valid and must stay cheap: the
   * taps are clipped to the input. */
  kiln_array_t v4[1] = {ARR(F32, 3, DIMS(1, 1, 4), FV(3, 1, 4, 1))};
  kiln_attr_t hk[2] = {INTS("kernel_shape", (int64_t)1 << 30),
                       INTS("pads", ((int64_t)1 << 30) - 1, 0)};
  expect_f32("MaxPool", 13, 1, v4, 0, 2, hk, 3, DIMS(1, 1, 4), FV(3, 3, 4, 4), 0);
  kiln_attr_t big[1] = {INTS("kernel_shape", 5, 5)};
  CHECK_ERR(load_only("MaxPool", 13, 1, in, 0, 1, big), KILN_INVALID_ARGUMENT,
            "MaxPool: output spatial dim 0 would be 0");
}

static void test_averagepool(void) {
  float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  kiln_array_t in[1] = {ARR(F32, 4, DIMS(1, 1, 3, 3), x)};
  /* k2, s2, pads 1: windows rows {-1,0},{1,2} x cols {-1,0},{1,2}. */
  kiln_attr_t at[4] = {INTS("kernel_shape", 2, 2), INTS("strides", 2, 2),
                       INTS("pads", 1, 1, 1, 1), kiln_attr_make_int("count_include_pad", 1)};
  expect_f32("AveragePool", 13, 1, in, 0, 4, at, 4, DIMS(1, 1, 2, 2),
             FV(0.25f, 1.25f, 2.75f, 7), 1e-6);
  expect_f32("AveragePool", 13, 1, in, 0, 3, at, 4, DIMS(1, 1, 2, 2),
             FV(1, 2.5f, 5.5f, 7), 1e-6);
  /* SAME_UPPER, k2 s1 on 3x3: pads go at the end. */
  kiln_attr_t su[2] = {INTS("kernel_shape", 2, 2), kiln_attr_make_string("auto_pad", "SAME_UPPER")};
  expect_f32("AveragePool", 13, 1, in, 0, 2, su, 4, DIMS(1, 1, 3, 3),
             FV(3, 4, 4.5f, 6, 7, 7.5f, 7.5f, 8.5f, 9), 1e-6);
  /* GlobalAveragePool. */
  expect_f32("GlobalAveragePool", 13, 1, in, 0, 0, NULL, 4, DIMS(1, 1, 1, 1),
             FV(5), 1e-6);
}

/* ---- Softmax / normalisation ------------------------------------------ */

static void test_softmax(void) {
  kiln_array_t in[1] = {ARR(F32, 2, DIMS(2, 3), FV(1, 2, 3, 1, 1, 1))};
  kiln_attr_t a0[1] = {kiln_attr_make_int("axis", 0)};
  expect_f32("Softmax", 13, 1, in, 0, 1, a0, 2, DIMS(2, 3),
             FV(0.5f, 0.7310586f, 0.8807971f, 0.5f, 0.2689414f, 0.1192029f),
             1e-6);
  /* Default axis -1 (opset 13). */
  expect_f32("Softmax", 13, 1, in, 0, 0, NULL, 2, DIMS(2, 3),
             FV(0.09003057f, 0.24472847f, 0.66524096f, 1 / 3.0f, 1 / 3.0f,
                1 / 3.0f),
             1e-6);
  expect_f32("LogSoftmax", 13, 1, in, 0, 0, NULL, 2, DIMS(2, 3),
             FV(-2.40760596f, -1.40760596f, -0.40760596f, -1.09861229f,
                -1.09861229f, -1.09861229f),
             1e-5);
  /* Opset 11: axis 1 of [1,2,3] coerces to [1,6] and normalises all six. */
  kiln_array_t in3[1] = {ARR(F32, 3, DIMS(1, 2, 3), FV(0, 0, 0, 0, 0, 0))};
  float sixth[6] = {1 / 6.0f, 1 / 6.0f, 1 / 6.0f, 1 / 6.0f, 1 / 6.0f, 1 / 6.0f};
  expect_f32("Softmax", 11, 1, in3, 0, 0, NULL, 3, DIMS(1, 2, 3), sixth, 1e-6);
  /* Opset 13 normalises only the last axis. */
  float third[6] = {1 / 3.0f, 1 / 3.0f, 1 / 3.0f, 1 / 3.0f, 1 / 3.0f, 1 / 3.0f};
  expect_f32("Softmax", 13, 1, in3, 0, 0, NULL, 3, DIMS(1, 2, 3), third, 1e-6);
  kiln_attr_t bad[1] = {kiln_attr_make_int("axis", 2)};
  CHECK_ERR(load_only("Softmax", 13, 1, in, 0, 1, bad), KILN_INVALID_ARGUMENT,
            "Softmax: axis 2 is out of range for rank 2");
}

static void test_batchnorm(void) {
  /* y = (x - mean) / sqrt(var + eps) * scale + B per channel. */
  kiln_array_t in[5] = {ARR(F32, 4, DIMS(1, 2, 1, 2), FV(1, 2, 3, 4)),
                        ARR(F32, 1, DIMS(2), FV(1, 2)),
                        ARR(F32, 1, DIMS(2), FV(0, 1)),
                        ARR(F32, 1, DIMS(2), FV(1, 3)),
                        ARR(F32, 1, DIMS(2), FV(4, 1))};
  kiln_attr_t at[1] = {kiln_attr_make_float("epsilon", 0.0f)};
  expect_f32("BatchNormalization", 15, 5, in, 30, 1, at, 4, DIMS(1, 2, 1, 2),
             FV(0, 0.5f, 1, 3), 1e-6);
  kiln_attr_t tm[1] = {kiln_attr_make_int("training_mode", 1)};
  CHECK_ERR(load_only("BatchNormalization", 15, 5, in, 30, 1, tm), KILN_UNSUPPORTED,
            "training_mode=1 is not supported");
  kiln_array_t bad[5] = {in[0], ARR(F32, 1, DIMS(3), FV(1, 2, 3)), in[2], in[3], in[4]};
  CHECK_ERR(load_only("BatchNormalization", 15, 5, bad, 30, 0, NULL),
            KILN_INVALID_ARGUMENT, "scale 'x1' has shape [3], expected [2]");
}

static void test_layernorm(void) {
  /* Rows [1,2,3] and [2,2,2]: mean 2 / var 2/3, mean 2 / var 0. */
  kiln_array_t in[3] = {ARR(F32, 2, DIMS(2, 3), FV(1, 2, 3, 2, 2, 2)),
                        ARR(F32, 1, DIMS(3), FV(1, 1, 2)),
                        ARR(F32, 1, DIMS(3), FV(0, 0, 1))};
  kiln_attr_t at[1] = {kiln_attr_make_float("epsilon", 0.0f)};
  const float r = 1.22474487f; /* 1 / sqrt(2/3) */
  spec_t sp = {"LayerNormalization", 17, 3, in, 6, 1, at, 3};
  kiln_array_t out[3] = {{0}, {0}, {0}};
  if (CHECK_OK(run_spec(&sp, out))) {
    /* The second row has var 0 and eps 0: inv = inf, 0 * inf = NaN; only
     * check the first row and the stats. */
    const float* y = (const float*)out[0].data;
    CHECK_NEAR(y[0], -r, 1e-5);
    CHECK_NEAR(y[1], 0, 1e-6);
    CHECK_NEAR(y[2], 2 * r + 1, 1e-5);
    CHECK(shape_is(&out[1].shape, 2, DIMS(2, 1)));
    CHECK_NEAR(((const float*)out[1].data)[0], 2, 1e-6);
    CHECK_NEAR(((const float*)out[2].data)[0], r, 1e-5);
    for (int i = 0; i < 3; ++i) kiln_array_free(A(), &out[i]);
  }
  kiln_array_t bad[3] = {in[0], ARR(F32, 1, DIMS(2), FV(1, 1)), omitted};
  CHECK_ERR(load_only("LayerNormalization", 17, 3, bad, 2, 0, NULL),
            KILN_INVALID_ARGUMENT, "Scale 'x1' of shape [2] does not broadcast");
}

/* ---- reductions ------------------------------------------------------- */

static void test_reduce(void) {
  kiln_array_t x[1] = {ARR(F32, 2, DIMS(2, 3), FV(1, 2, 3, 4, 5, 6))};
  /* Opset 13: axes is an attribute of ReduceMean. */
  kiln_attr_t a13[2] = {INTS("axes", 1), kiln_attr_make_int("keepdims", 0)};
  expect_f32("ReduceMean", 13, 1, x, 0, 2, a13, 1, DIMS(2), FV(2, 5), 1e-6);
  /* Opset 18: axes is an input. */
  kiln_array_t x18[2] = {x[0], ARR(I64, 1, DIMS(1), IV(-2))};
  kiln_attr_t k0[1] = {kiln_attr_make_int("keepdims", 0)};
  expect_f32("ReduceMean", 18, 2, x18, 2, 1, k0, 1, DIMS(3), FV(2.5f, 3.5f, 4.5f),
             1e-6);
  /* Everything, keepdims (default). */
  expect_f32("ReduceSum", 13, 1, x, 0, 0, NULL, 2, DIMS(1, 1), FV(21), 1e-6);
  expect_f32("ReduceMax", 13, 1, x, 0, 0, NULL, 2, DIMS(1, 1), FV(6), 0);
  /* noop_with_empty_axes: identity. */
  kiln_attr_t noop[1] = {kiln_attr_make_int("noop_with_empty_axes", 1)};
  expect_f32("ReduceSum", 13, 1, x, 0, 1, noop, 2, DIMS(2, 3), FV(1, 2, 3, 4, 5, 6),
             0);
  /* ReduceMax on int32 and bool. */
  int32_t xi[4] = {-5, 7, 3, -9};
  kiln_array_t ii[1] = {ARR(I32, 2, DIMS(2, 2), xi)};
  kiln_attr_t ax1[1] = {INTS("axes", 1)};
  kiln_array_t y = {0};
  if (CHECK_OK(run_op("ReduceMax", 13, 1, ii, 0, 1, ax1, &y))) {
    CHECK(y.dtype == I32 && ((int32_t*)y.data)[0] == 7 && ((int32_t*)y.data)[1] == 3);
    kiln_array_free(A(), &y);
  }
  /* Errors: out-of-range and repeated axes, axes attribute in opset 18. */
  kiln_attr_t oor[1] = {INTS("axes", 2)};
  CHECK_ERR(load_only("ReduceMean", 13, 1, x, 0, 1, oor), KILN_INVALID_ARGUMENT,
            "ReduceMean: axes[0] = 2 is out of range for rank 2");
  kiln_attr_t dup[1] = {INTS("axes", 1, -1)};
  CHECK_ERR(load_only("ReduceMean", 13, 1, x, 0, 1, dup), KILN_INVALID_ARGUMENT,
            "axis 1 appears twice");
  CHECK_ERR(load_only("ReduceMean", 18, 1, x, 0, 1, ax1), KILN_INVALID_ARGUMENT,
            "axes is an input since opset 18");
  bool xb[2] = {true, false};
  kiln_array_t bb[1] = {ARR(BOOL, 1, DIMS(2), xb)};
  CHECK_ERR(load_only("ReduceSum", 13, 1, bb, 0, 0, NULL), KILN_UNSUPPORTED,
            "dtype bool");
}

static void test_reduce_runtime_axes(void) {
  /* axes as a graph input: unknown at load (rank known with keepdims), then
   * bound at run time. */
  kiln_array_t x[2] = {ARR(F32, 3, DIMS(2, 2, 2), FV(1, 2, 3, 4, 5, 6, 7, 8)),
                       ARR(I64, 1, DIMS(1), IV(1))};
  spec_t sp = {"ReduceSum", 13, 2, x, 0, 0, NULL, 1};
  kiln_graph_t* g = NULL;
  if (CHECK_OK(build(&sp, &g))) {
    const kiln_tensor_t* y = &g->tensors[kiln_graph_find_tensor(g, "y0")];
    CHECK(y->shape.rank == 3 && y->shape.dims[1] == KILN_DIM_UNKNOWN);
    kiln_graph_destroy(g);
  }
  expect_f32("ReduceSum", 13, 2, x, 0, 0, NULL, 3, DIMS(2, 1, 2), FV(4, 6, 12, 14),
             1e-6);
}

static void test_flops(void) {
  /* Conv: 2 * N*M*OH*OW * C/g*KH*KW = 2 * 1*4*3*3 * 2*3*3 = 1296. */
  const kiln_op_schema_t* s = kiln_op_lookup("", "Conv");
  CHECK(s && s->flops);
  if (!s || !s->flops) return;
  kiln_tensor_t x = {.name = "x", .dtype = F32, .shape = kiln_shape_make(4, DIMS(1, 2, 5, 5))};
  kiln_tensor_t w = {.name = "w", .dtype = F32, .shape = kiln_shape_make(4, DIMS(4, 2, 3, 3))};
  kiln_tensor_t y = {.name = "y", .dtype = F32, .shape = kiln_shape_make(4, DIMS(1, 4, 3, 3))};
  kiln_tensor_t* in[2] = {&x, &w};
  kiln_tensor_t* out[1] = {&y};
  kiln_node_t node = {.name = "c", .op_type = "Conv", .domain = ""};
  kiln_infer_t ctx = {NULL, &node, 13, 2, in, 1, out, A(), false};
  CHECK(s->flops(&ctx) == 1296);
  s = kiln_op_lookup("", "MatMul");
  kiln_tensor_t a = {.name = "a", .dtype = F32, .shape = kiln_shape_make(3, DIMS(2, 3, 4))};
  kiln_tensor_t b = {.name = "b", .dtype = F32, .shape = kiln_shape_make(2, DIMS(4, 5))};
  kiln_tensor_t c = {.name = "c", .dtype = F32, .shape = kiln_shape_make(3, DIMS(2, 3, 5))};
  kiln_tensor_t* in2[2] = {&a, &b};
  kiln_tensor_t* out2[1] = {&c};
  kiln_node_t mm = {.name = "m", .op_type = "MatMul", .domain = ""};
  kiln_infer_t ctx2 = {NULL, &mm, 13, 2, in2, 1, out2, A(), false};
  CHECK(s && s->flops && s->flops(&ctx2) == 2 * 2 * 3 * 5 * 4);
}

/* ---- added reductions / normalisations: values worked by hand ---------- */

static void test_reduce_kinds(void) {
  kiln_array_t x[1] = {ARR(F32, 2, DIMS(2, 3), FV(1, -2, 2, 3, 0, -4))};
  kiln_attr_t ax1[2] = {INTS("axes", 1), kiln_attr_make_int("keepdims", 0)};
  expect_f32("ReduceMin", 13, 1, x, 0, 2, ax1, 1, DIMS(2), FV(-2, -4), 0);
  expect_f32("ReduceProd", 13, 1, x, 0, 2, ax1, 1, DIMS(2), FV(-4, 0), 0);
  expect_f32("ReduceL1", 13, 1, x, 0, 2, ax1, 1, DIMS(2), FV(5, 7), 1e-6);
  expect_f32("ReduceL2", 13, 1, x, 0, 2, ax1, 1, DIMS(2), FV(3, 5), 1e-6);
  expect_f32("ReduceSumSquare", 13, 1, x, 0, 2, ax1, 1, DIMS(2), FV(9, 25), 1e-6);
  /* LogSum of [1,-2,2] = log 1 = 0; of [3,0,-4]: log(-1) = NaN is skipped */
  kiln_array_t xp[1] = {ARR(F32, 2, DIMS(2, 2), FV(1, 2, 0.5f, 0.25f))};
  expect_f32("ReduceLogSum", 13, 1, xp, 0, 2, ax1, 1, DIMS(2), FV(logf(3), logf(0.75f)), 1e-6);
  /* LogSumExp over [0, ln 3] = ln 4; opset 18 axes input */
  kiln_array_t xe[2] = {ARR(F32, 1, DIMS(2), FV(0, logf(3))), ARR(I64, 1, DIMS(1), IV(0))};
  expect_f32("ReduceLogSumExp", 18, 2, xe, 2, 0, NULL, 1, DIMS(1), FV(logf(4)), 1e-6);
  /* empty set: Min +inf, Prod 1, LogSum -inf */
  kiln_array_t xz[1] = {ARR(F32, 2, DIMS(2, 0), NULL)};
  kiln_attr_t k1[1] = {INTS("axes", 1)};
  expect_f32("ReduceMin", 13, 1, xz, 0, 1, k1, 2, DIMS(2, 1), FV(INFINITY, INFINITY), 0);
  expect_f32("ReduceProd", 13, 1, xz, 0, 1, k1, 2, DIMS(2, 1), FV(1, 1), 0);
  expect_f32("ReduceLogSum", 13, 1, xz, 0, 1, k1, 2, DIMS(2, 1), FV(-INFINITY, -INFINITY), 0);
  /* integer Min / Prod stay integers; L2 on ints is refused */
  int32_t xi[4] = {-5, 7, 3, -9};
  kiln_array_t ii[1] = {ARR(I32, 2, DIMS(2, 2), xi)};
  kiln_array_t y = {0};
  if (CHECK_OK(run_op("ReduceProd", 13, 1, ii, 0, 1, k1, &y))) {
    CHECK(y.dtype == I32 && ((int32_t*)y.data)[0] == -35 && ((int32_t*)y.data)[1] == -27);
    kiln_array_free(A(), &y);
  }
  CHECK_ERR(load_only("ReduceL2", 13, 1, ii, 0, 1, k1), KILN_UNSUPPORTED, "ReduceL2: input");
  kiln_attr_t a18[1] = {INTS("axes", 1)};
  CHECK_ERR(load_only("ReduceMin", 18, 1, x, 0, 1, a18), KILN_INVALID_ARGUMENT, "axes is an input since opset 18");
}

static void test_argmax_ref(void) {
  /* ties: first index, or the last with select_last_index */
  kiln_array_t x[1] = {ARR(F32, 2, DIMS(2, 4), FV(1, 5, 5, 0, 2, NAN, 7, NAN))};
  kiln_array_t y = {0};
  kiln_attr_t at[2] = {kiln_attr_make_int("axis", 1), kiln_attr_make_int("select_last_index", 0)};
  for (int last = 0; last < 2; ++last) {
    at[1] = kiln_attr_make_int("select_last_index", last);
    if (CHECK_OK(run_op("ArgMax", 13, 1, x, 0, 2, at, &y))) {
      const int64_t* v = y.data;
      /* row 1 holds NaNs: the first (or last) NaN wins, as in numpy */
      CHECK(y.dtype == I64 && shape_is(&y.shape, 2, DIMS(2, 1)));
      CHECK_MSG(v[0] == (last ? 2 : 1) && v[1] == (last ? 3 : 1), "ArgMax last=%d: %lld %lld", last,
                (long long)v[0], (long long)v[1]);
      kiln_array_free(A(), &y);
    }
  }
  int32_t xi[6] = {4, -1, 4, -1, 0, 2};
  kiln_array_t ii[1] = {ARR(I32, 2, DIMS(3, 2), xi)};
  kiln_attr_t a0[2] = {kiln_attr_make_int("axis", 0), kiln_attr_make_int("keepdims", 0)};
  if (CHECK_OK(run_op("ArgMin", 13, 1, ii, 0, 2, a0, &y))) {
    const int64_t* v = y.data;
    CHECK(shape_is(&y.shape, 1, DIMS(2)) && v[0] == 2 && v[1] == 0);
    kiln_array_free(A(), &y);
  }
  a0[1] = kiln_attr_make_int("select_last_index", 1);
  if (CHECK_OK(run_op("ArgMin", 13, 1, ii, 0, 2, a0, &y))) {
    const int64_t* v = y.data;
    CHECK(shape_is(&y.shape, 2, DIMS(1, 2)) && v[0] == 2 && v[1] == 1);
    kiln_array_free(A(), &y);
  }
  kiln_array_t xz[1] = {ARR(F32, 2, DIMS(2, 0), NULL)};
  kiln_attr_t a1[1] = {kiln_attr_make_int("axis", 1)};
  CHECK_ERR(load_only("ArgMax", 13, 1, xz, 0, 1, a1), KILN_INVALID_ARGUMENT, "has size 0");
  expect_f32("Hardmax", 13, 1, x, 0, 0, NULL, 2, DIMS(2, 4), FV(0, 1, 0, 0, 0, 1, 0, 0), 0);
}

static void test_more_norms_ref(void) {
  /* LpNormalization: rows [3,4] and [-1,0]; p 2 and p 1 */
  kiln_array_t x[1] = {ARR(F32, 2, DIMS(2, 2), FV(3, 4, -1, 0))};
  expect_f32("LpNormalization", 1, 1, x, 0, 0, NULL, 2, DIMS(2, 2), FV(0.6f, 0.8f, -1, 0), 1e-6);
  kiln_attr_t p1[2] = {kiln_attr_make_int("p", 1), kiln_attr_make_int("axis", 0)};
  expect_f32("LpNormalization", 1, 1, x, 0, 2, p1, 2, DIMS(2, 2), FV(0.75f, 1, -0.25f, 0), 1e-6);
  kiln_attr_t p3[1] = {kiln_attr_make_int("p", 3)};
  CHECK_ERR(load_only("LpNormalization", 1, 1, x, 0, 1, p3), KILN_INVALID_ARGUMENT, "p must be 1 or 2");
  /* GroupNormalization-18 (per-group scale/bias) on [1,4,1,1] in 2 groups:
   * each group [a, b] normalises to [-1, 1] (eps 0), then * s[g] + b[g] */
  kiln_array_t g18[3] = {ARR(F32, 4, DIMS(1, 4, 1, 1), FV(1, 3, 10, 20)), ARR(F32, 1, DIMS(2), FV(2, 3)),
                         ARR(F32, 1, DIMS(2), FV(0, 1))};
  kiln_attr_t ga[2] = {kiln_attr_make_int("num_groups", 2), kiln_attr_make_float("epsilon", 0)};
  expect_f32("GroupNormalization", 18, 3, g18, 0, 2, ga, 4, DIMS(1, 4, 1, 1), FV(-2, 2, -2, 4), 1e-5);
  kiln_array_t g21[3] = {g18[0], ARR(F32, 1, DIMS(4), FV(1, 2, 3, 4)), ARR(F32, 1, DIMS(4), FV(0, 0, 1, 1))};
  expect_f32("GroupNormalization", 21, 3, g21, 0, 2, ga, 4, DIMS(1, 4, 1, 1), FV(-1, 2, -2, 5), 1e-5);
  CHECK_ERR(load_only("GroupNormalization", 21, 3, g18, 0, 2, ga), KILN_INVALID_ARGUMENT, "expected [4]");
  kiln_attr_t g3[1] = {kiln_attr_make_int("num_groups", 3)};
  CHECK_ERR(load_only("GroupNormalization", 21, 3, g21, 0, 1, g3), KILN_INVALID_ARGUMENT,
            "4 channels do not split into 3 groups");
  /* LRN size 3, alpha 3 (alpha/size = 1), beta 1, bias 1 over channels [1,2]:
   * y0 = 1 / (1 + 1 + 4), y1 = 2 / (1 + 1 + 4) */
  kiln_array_t xl[1] = {ARR(F32, 3, DIMS(1, 2, 1), FV(1, 2))};
  kiln_attr_t la[3] = {kiln_attr_make_int("size", 3), kiln_attr_make_float("alpha", 3),
                       kiln_attr_make_float("beta", 1)};
  expect_f32("LRN", 13, 1, xl, 0, 3, la, 3, DIMS(1, 2, 1), FV(1.0f / 6, 2.0f / 6), 1e-6);
  /* MVN over axis 1 of [[1,3],[2,2]]: [-1,1] (sd 1) and [0,0] (sd 0 + 1e-9) */
  kiln_array_t xm[1] = {ARR(F32, 2, DIMS(2, 2), FV(1, 3, 2, 2))};
  kiln_attr_t ma[1] = {INTS("axes", 1)};
  expect_f32("MeanVarianceNormalization", 13, 1, xm, 0, 1, ma, 2, DIMS(2, 2), FV(-1, 1, 0, 0), 1e-6);
  /* GlobalMaxPool and LpPool (p 2, k 2, stride 2) on [1,1,2,2] = [3,4,0,0] */
  kiln_array_t xg[1] = {ARR(F32, 4, DIMS(1, 1, 2, 2), FV(3, -4, 0, 0))};
  expect_f32("GlobalMaxPool", 13, 1, xg, 0, 0, NULL, 4, DIMS(1, 1, 1, 1), FV(3), 0);
  kiln_attr_t lp[2] = {INTS("kernel_shape", 2, 2), INTS("strides", 2, 2)};
  expect_f32("LpPool", 18, 1, xg, 0, 2, lp, 4, DIMS(1, 1, 1, 1), FV(5), 1e-6);
}

int main(void) {
  RUN(test_conv_stride2_pad1_bias);
  RUN(test_conv_asymmetric_pads_and_auto_pad);
  RUN(test_conv_group2);
  RUN(test_conv_dilation2);
  RUN(test_conv_depthwise);
  RUN(test_conv_1d_and_3d);
  RUN(test_conv_f16);
  RUN(test_conv_symbolic_batch);
  RUN(test_conv_errors);
  RUN(test_conv_transpose);
  RUN(test_gemm);
  RUN(test_matmul);
  RUN(test_maxpool);
  RUN(test_averagepool);
  RUN(test_softmax);
  RUN(test_batchnorm);
  RUN(test_layernorm);
  RUN(test_reduce);
  RUN(test_reduce_runtime_axes);
  RUN(test_reduce_kinds);
  RUN(test_argmax_ref);
  RUN(test_more_norms_ref);
  RUN(test_flops);
  return kiln_test_finish();
}
