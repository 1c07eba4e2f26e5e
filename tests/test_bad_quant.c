/* Bad quantization parameters (BAD_INPUTS row 29): a zero, negative or NaN
 * scale given as an initializer, a zero point whose dtype range is not its
 * data's, an axis outside the rank, per-channel scales whose count differs
 * from the channel count. Each is an error at load (graph preparation)
 * naming the node, never a NaN model. */
#include <math.h>

#include "ref_graph_util.h"

/* Prepares |g| (whose node is named "qnode") expecting |code| with a
 * message naming the node and holding |needle|. */
static void expect_bad(kiln_graph_t* g, int code, const char* needle) {
  kiln_status_t st = kiln_graph_prepare(g);
  CHECK_MSG(st && strstr(kiln_status_message(st), "qnode"), "expected an error naming node 'qnode', got %s",
            st ? kiln_status_message(st) : "success");
  CHECK_ERR(st, code, needle);
  kiln_graph_destroy(g);
}

static kiln_attr_t axis_attr(int64_t v) {
  kiln_attr_t a;
  memset(&a, 0, sizeof a);
  a.name = "axis";
  a.type = KILN_ATTR_INT;
  a.i = v;
  return a;
}

/* x [2, 3] f32 input, scale initializer |s| (shape |ss|), optional zero
 * point initializer of dtype |zt|, QuantizeLinear or DequantizeLinear. */
static kiln_graph_t* qgraph(const char* op, kiln_shape_t ss, const float* s, kiln_dtype_t zt,
                            int n_attr, const kiln_attr_t* attrs) {
  kiln_graph_t* g = graph(21);
  const bool dq = !strcmp(op, "DequantizeLinear");
  input(g, "x", dq ? KILN_DTYPE_U8 : KILN_DTYPE_F32, SHAPE(2, 3));
  init(g, "scale", KILN_DTYPE_F32, ss, s);
  int n_in = 2;
  if (zt != KILN_DTYPE_UNDEFINED) {
    const int64_t zeros[8] = {0};
    init(g, "zp", zt, ss, zeros);
    n_in = 3;
  }
  CHECK_OK(kiln_graph_add_node(g, op, "qnode", n_in, (const char*[]){"x", "scale", "zp"}, 1,
                               (const char*[]){"y"}, n_attr, attrs, NULL));
  CHECK_OK(kiln_graph_add_output(g, "y"));
  return g;
}

static void test_bad_scales(void) {
  const float zero = 0.0f, neg = -0.5f, nan = NAN, inf = INFINITY;
  expect_bad(qgraph("QuantizeLinear", SCALAR, &zero, KILN_DTYPE_U8, 0, NULL), KILN_INVALID_ARGUMENT,
             "positive");
  expect_bad(qgraph("QuantizeLinear", SCALAR, &neg, KILN_DTYPE_UNDEFINED, 0, NULL),
             KILN_INVALID_ARGUMENT, "scale 'scale'");
  expect_bad(qgraph("DequantizeLinear", SCALAR, &nan, KILN_DTYPE_U8, 0, NULL), KILN_INVALID_ARGUMENT,
             "positive and finite");
  expect_bad(qgraph("DequantizeLinear", SCALAR, &inf, KILN_DTYPE_UNDEFINED, 0, NULL),
             KILN_INVALID_ARGUMENT, "positive and finite");
  /* per axis: one bad channel among good ones */
  const float per[3] = {1.0f, 0.0f, 2.0f};
  kiln_attr_t a[1] = {axis_attr(1)};
  expect_bad(qgraph("QuantizeLinear", SHAPE(3), per, KILN_DTYPE_I8, 1, a), KILN_INVALID_ARGUMENT,
             "element 1");
}

/* QLinearMatMul whose y_scale initializer is 0 */
static void test_bad_qlinear_scale(void) {
  kiln_graph_t* g = graph(21);
  input(g, "a", KILN_DTYPE_U8, SHAPE(2, 3));
  input(g, "b", KILN_DTYPE_U8, SHAPE(3, 2));
  const float one = 1.0f, zero = 0.0f;
  const uint8_t z = 0;
  init(g, "s", KILN_DTYPE_F32, SCALAR, &one);
  init(g, "ys", KILN_DTYPE_F32, SCALAR, &zero);
  init(g, "z", KILN_DTYPE_U8, SCALAR, &z);
  CHECK_OK(kiln_graph_add_node(g, "QLinearMatMul", "qnode", 8,
                               (const char*[]){"a", "s", "z", "b", "s", "z", "ys", "z"}, 1,
                               (const char*[]){"y"}, NO_ATTRS, NULL));
  CHECK_OK(kiln_graph_add_output(g, "y"));
  expect_bad(g, KILN_INVALID_ARGUMENT, "scale 'ys' element 0 is 0");
}

/* A zero point whose dtype is not the data's: i8 for u8 data (half its
 * range lies outside u8's), i32 for QuantizeLinear. */
static void test_bad_zero_points(void) {
  const float one = 1.0f;
  expect_bad(qgraph("DequantizeLinear", SCALAR, &one, KILN_DTYPE_I8, 0, NULL), KILN_INVALID_ARGUMENT,
             "zero point 'zp'");
  expect_bad(qgraph("QuantizeLinear", SCALAR, &one, KILN_DTYPE_I32, 0, NULL), KILN_UNSUPPORTED,
             "zero point 'zp'");
  /* MatMulInteger: a u8 A with an i8 zero point */
  kiln_graph_t* g = graph(21);
  input(g, "a", KILN_DTYPE_U8, SHAPE(2, 3));
  input(g, "b", KILN_DTYPE_U8, SHAPE(3, 2));
  const int8_t z = -3;
  init(g, "az", KILN_DTYPE_I8, SCALAR, &z);
  CHECK_OK(kiln_graph_add_node(g, "MatMulInteger", "qnode", 3, (const char*[]){"a", "b", "az"}, 1,
                               (const char*[]){"y"}, NO_ATTRS, NULL));
  CHECK_OK(kiln_graph_add_output(g, "y"));
  expect_bad(g, KILN_INVALID_ARGUMENT, "range");
}

static void test_bad_axis_and_counts(void) {
  const float per[3] = {1.0f, 2.0f, 3.0f};
  kiln_attr_t a2[1] = {axis_attr(2)}, am3[1] = {axis_attr(-3)}, a0[1] = {axis_attr(0)};
  expect_bad(qgraph("QuantizeLinear", SHAPE(3), per, KILN_DTYPE_U8, 1, a2), KILN_INVALID_ARGUMENT,
             "axis 2");
  expect_bad(qgraph("DequantizeLinear", SHAPE(3), per, KILN_DTYPE_U8, 1, am3), KILN_INVALID_ARGUMENT,
             "axis -3");
  /* 3 scales along axis 0 of [2, 3] */
  expect_bad(qgraph("QuantizeLinear", SHAPE(3), per, KILN_DTYPE_U8, 1, a0), KILN_INVALID_ARGUMENT,
             "2 elements");
  /* QLinearConv: 3 weight scales for 2 output channels */
  kiln_graph_t* g = graph(21);
  input(g, "x", KILN_DTYPE_U8, SHAPE(1, 1, 4, 4));
  input(g, "w", KILN_DTYPE_U8, SHAPE(2, 1, 3, 3));
  const float one = 1.0f;
  const uint8_t zero = 0;
  init(g, "s", KILN_DTYPE_F32, SCALAR, &one);
  init(g, "z", KILN_DTYPE_U8, SCALAR, &zero);
  init(g, "ws", KILN_DTYPE_F32, SHAPE(3), per);
  CHECK_OK(kiln_graph_add_node(g, "QLinearConv", "qnode", 8,
                               (const char*[]){"x", "s", "z", "w", "ws", "z", "s", "z"}, 1,
                               (const char*[]){"y"}, NO_ATTRS, NULL));
  CHECK_OK(kiln_graph_add_output(g, "y"));
  expect_bad(g, KILN_INVALID_ARGUMENT, "one per output channel");
}

int main(void) {
  RUN(test_bad_scales);
  RUN(test_bad_qlinear_scale);
  RUN(test_bad_zero_points);
  RUN(test_bad_axis_and_counts);
  return kiln_test_finish();
}
