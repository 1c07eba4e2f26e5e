/* Unit tests of the tensor op family (ir/ops/tensor*.c): shape inference
 * with known and symbolic dims, the reference kernels, opset variants and
 * the errors bad attributes and indices must produce. */
#include <stdint.h>
#include <string.h>

#include "frontend/onnx.h"
#include "ref_graph_util.h"

/* ---- graph-building helpers (the shared ones: ref_graph_util.h) -------- */

static void init_i64(kiln_graph_t* g, const char* name, int32_t n, const int64_t* v) {
  init(g, name, KILN_DTYPE_I64, kiln_shape_make(1, (int64_t[]){n}), v);
}

static void node(kiln_graph_t* g, const char* op, int32_t n_in, const char* const* in,
                 int32_t n_out, const char* const* out, int32_t n_attr,
                 const kiln_attr_t* attrs) {
  CHECK_OK(kiln_graph_add_node(g, op, op, n_in, in, n_out, out, n_attr, attrs, NULL));
}

static const kiln_tensor_t* tensor(const kiln_graph_t* g, const char* name) {
  int32_t i = kiln_graph_find_tensor(g, name);
  KILN_ASSERT(i >= 0);
  return &g->tensors[i];
}

static bool shape_is(const kiln_shape_t* s, kiln_shape_t want) {
  return kiln_shape_equal(s, &want);
}

static void free_arrays(kiln_array_t* a, int n) {
  for (int i = 0; i < n; ++i) kiln_array_free(sys(), &a[i]);
}

static float iota_f32[64];
static void fill_iota(void) {
  for (int i = 0; i < 64; ++i) iota_f32[i] = (float)i;
}

/* Builds x:f32[dims] -> Op -> y, runs on 0,1,2,... and returns y. */
static kiln_status_t run_unary(kiln_graph_t* g, kiln_shape_t xs, kiln_array_t* y) {
  CHECK_OK(kiln_graph_add_output(g, "y"));
  kiln_status_t s = kiln_graph_prepare(g);
  if (s) return s;
  kiln_array_t x = array(KILN_DTYPE_F32, xs, iota_f32);
  s = run(g, &x, y);
  kiln_array_free(sys(), &x);
  return s;
}

/* ---- Reshape ---------------------------------------------------------- */

static void test_reshape_zero_and_minus_one(void) {
  kiln_graph_t* g = graph(17);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3, 4));
  init_i64(g, "shape", I64S(0, -1));
  node(g, "Reshape", NAMES("x", "shape"), NAMES("y"), NO_ATTRS);
  kiln_array_t y;
  CHECK_OK(run_unary(g, SHAPE(2, 3, 4), &y));
  CHECK(shape_is(&tensor(g, "y")->shape, SHAPE(2, 12)));
  double want[24];
  for (int i = 0; i < 24; ++i) want[i] = i;
  expect(&y, SHAPE(2, 12), want);
  free_arrays(&y, 1);
  kiln_graph_destroy(g);

  /* -1 first, 0 copying a middle dim. */
  g = graph(17);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3, 4));
  init_i64(g, "shape", I64S(-1, 0, 2));
  node(g, "Reshape", NAMES("x", "shape"), NAMES("y"), NO_ATTRS);
  CHECK_OK(run_unary(g, SHAPE(2, 3, 4), &y));
  expect(&y, SHAPE(4, 3, 2), want);
  free_arrays(&y, 1);
  kiln_graph_destroy(g);

  /* allowzero=1: 0 is a real zero-size dim. */
  g = graph(17);
  input(g, "x", KILN_DTYPE_F32, SHAPE(0, 3, 4));
  init_i64(g, "shape", I64S(3, 4, 0));
  node(g, "Reshape", NAMES("x", "shape"), NAMES("y"), ATTRS(kiln_attr_make_int("allowzero", 1)));
  CHECK_OK(run_unary(g, SHAPE(0, 3, 4), &y));
  CHECK(shape_is(&y.shape, SHAPE(3, 4, 0)));
  free_arrays(&y, 1);
  kiln_graph_destroy(g);

  /* A symbolic batch dim survives [0, -1]. */
  g = graph(17);
  int32_t sym;
  CHECK_OK(kiln_graph_symbol(g, "N", &sym));
  input(g, "x", KILN_DTYPE_F32, SHAPE(kiln_dim_from_symbol(sym), 3, 4));
  init_i64(g, "shape", I64S(0, -1));
  node(g, "Reshape", NAMES("x", "shape"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_OK(kiln_graph_prepare(g));
  CHECK(shape_is(&tensor(g, "y")->shape, SHAPE(kiln_dim_from_symbol(sym), 12)));
  kiln_graph_destroy(g);
}

static void test_reshape_errors(void) {
  /* BAD_INPUTS row 10: the error names both shapes. */
  kiln_graph_t* g = graph(17);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3, 4));
  init_i64(g, "shape", I64S(5, 5));
  node(g, "Reshape", NAMES("x", "shape"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  kiln_status_t s = kiln_graph_prepare(g);
  CHECK_MSG(s && strstr(kiln_status_message(s), "[2,3,4]") &&
                strstr(kiln_status_message(s), "[5,5]"),
            "message: %s", kiln_status_message(s));
  CHECK_ERR(s, KILN_INVALID_ARGUMENT, "Reshape: cannot reshape");
  kiln_graph_destroy(g);

  g = graph(17);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3, 4));
  init_i64(g, "shape", I64S(-1, -1));
  node(g, "Reshape", NAMES("x", "shape"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "more than one -1");
  kiln_graph_destroy(g);

  g = graph(17);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3, 4));
  init_i64(g, "shape", I64S(5, -1));
  node(g, "Reshape", NAMES("x", "shape"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "[5,-1]");
  kiln_graph_destroy(g);

  /* A target fed at run time is checked at run time. */
  g = graph(17);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3));
  input(g, "shape", KILN_DTYPE_I64, SHAPE(2));
  node(g, "Reshape", NAMES("x", "shape"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_OK(kiln_graph_prepare(g));
  CHECK(tensor(g, "y")->shape.rank == 2);
  kiln_array_t in[2] = {array(KILN_DTYPE_F32, SHAPE(2, 3), iota_f32),
                        array(KILN_DTYPE_I64, SHAPE(2), (int64_t[]){4, 2})}, y;
  CHECK_ERR(run(g, in, &y), KILN_INVALID_ARGUMENT, "[2,3]");
  ((int64_t*)in[1].data)[0] = 3;
  CHECK_OK(run(g, in, &y));
  expect(&y, SHAPE(3, 2), (double[]){0, 1, 2, 3, 4, 5});
  free_arrays(&y, 1);
  free_arrays(in, 2);
  kiln_graph_destroy(g);
}

/* ---- Shape and the shape-arithmetic chain ----------------------------- */

static void test_shape_start_end(void) {
  kiln_graph_t* g = graph(15);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3, 4, 5));
  node(g, "Shape", NAMES("x"), NAMES("y"), ATTRS(kiln_attr_make_int("start", 1), kiln_attr_make_int("end", -1)));
  node(g, "Shape", NAMES("x"), NAMES("z"), ATTRS(kiln_attr_make_int("start", -10), kiln_attr_make_int("end", 10)));
  node(g, "Shape", NAMES("x"), NAMES("w"), ATTRS(kiln_attr_make_int("start", 3), kiln_attr_make_int("end", 1)));
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_OK(kiln_graph_add_output(g, "z"));
  CHECK_OK(kiln_graph_add_output(g, "w"));
  CHECK_OK(kiln_graph_prepare(g));
  /* Known at load time. */
  const kiln_tensor_t* y = tensor(g, "y");
  CHECK(y->dtype == KILN_DTYPE_I64 && shape_is(&y->shape, SHAPE(2)));
  CHECK((y->flags & KILN_TENSOR_CONST) && y->value.data);
  if (y->value.data) CHECK(((int64_t*)y->value.data)[0] == 3 && ((int64_t*)y->value.data)[1] == 4);
  kiln_array_t x = array(KILN_DTYPE_F32, SHAPE(2, 3, 4, 5), NULL), out[3];
  CHECK_OK(run(g, &x, out));
  expect(&out[0], SHAPE(2), (double[]){3, 4});
  expect(&out[1], SHAPE(4), (double[]){2, 3, 4, 5});
  CHECK(shape_is(&out[2].shape, SHAPE(0)));
  free_arrays(out, 3);
  kiln_array_free(sys(), &x);
  kiln_graph_destroy(g);
}

/* x -> Shape -> Gather(0) -> Unsqueeze -> Concat(.., [12]) -> Reshape(x). */
static kiln_graph_t* chain_graph(kiln_shape_t xs, int64_t* sym_out) {
  kiln_graph_t* g = graph(13);
  int32_t sym = 0;
  if (sym_out) {
    CHECK_OK(kiln_graph_symbol(g, "batch", &sym));
    xs.dims[0] = kiln_dim_from_symbol(sym);
    *sym_out = kiln_dim_from_symbol(sym);
  }
  input(g, "x", KILN_DTYPE_F32, xs);
  init(g, "zero", KILN_DTYPE_I64, SCALAR, (int64_t[]){0});
  init_i64(g, "axes0", I64S(0));
  init_i64(g, "twelve", I64S(12));
  node(g, "Shape", NAMES("x"), NAMES("shp"), NO_ATTRS);
  node(g, "Gather", NAMES("shp", "zero"), NAMES("batch"), ATTRS(kiln_attr_make_int("axis", 0)));
  node(g, "Unsqueeze", NAMES("batch", "axes0"), NAMES("batch1"), NO_ATTRS);
  node(g, "Concat", NAMES("batch1", "twelve"), NAMES("target"), ATTRS(kiln_attr_make_int("axis", 0)));
  node(g, "Reshape", NAMES("x", "target"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_OK(kiln_graph_prepare(g));
  return g;
}

static void test_shape_chain(void) {
  /* Static input: the chain folds and Reshape's output is static. */
  kiln_graph_t* g = chain_graph(SHAPE(2, 3, 4), NULL);
  CHECK(shape_is(&tensor(g, "target")->shape, SHAPE(2)));
  CHECK(tensor(g, "target")->flags & KILN_TENSOR_CONST);
  CHECK(shape_is(&tensor(g, "y")->shape, SHAPE(2, 12)));
  kiln_graph_destroy(g);

  /* Symbolic batch: the target is unknown at load (rank 2), right at run. */
  int64_t n;
  g = chain_graph(SHAPE(0, 3, 4), &n);
  const kiln_tensor_t* y = tensor(g, "y");
  CHECK(y->dtype == KILN_DTYPE_F32 && y->shape.rank == 2);
  CHECK(shape_is(&tensor(g, "shp")->shape, SHAPE(3)));
  CHECK(shape_is(&tensor(g, "batch")->shape, SCALAR));
  CHECK(shape_is(&tensor(g, "target")->shape, SHAPE(2)));
  for (int64_t b = 1; b <= 3; b += 2) {
    kiln_array_t x = array(KILN_DTYPE_F32, SHAPE(b, 3, 4), iota_f32), out;
    CHECK_OK(run(g, &x, &out));
    double want[36];
    for (int i = 0; i < 36; ++i) want[i] = i;
    expect(&out, SHAPE(b, 12), want);
    free_arrays(&out, 1);
    kiln_array_free(sys(), &x);
  }
  kiln_graph_destroy(g);
}

/* ---- Gather ----------------------------------------------------------- */

static void test_gather_negative_index(void) {
  kiln_graph_t* g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(5, 2));
  init_i64(g, "idx", I64S(-1, 0, -5));
  node(g, "Gather", NAMES("x", "idx"), NAMES("y"), NO_ATTRS);
  kiln_array_t y;
  CHECK_OK(run_unary(g, SHAPE(5, 2), &y));
  expect(&y, SHAPE(3, 2), (double[]){8, 9, 0, 1, 0, 1});
  free_arrays(&y, 1);
  kiln_graph_destroy(g);

  /* axis 1 with 2-D indices on a [2, 3] tensor. */
  g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3));
  init(g, "idx", KILN_DTYPE_I32, SHAPE(1, 2), (int32_t[]){2, -3});
  node(g, "Gather", NAMES("x", "idx"), NAMES("y"), ATTRS(kiln_attr_make_int("axis", -1)));
  CHECK_OK(run_unary(g, SHAPE(2, 3), &y));
  expect(&y, SHAPE(2, 1, 2), (double[]){2, 0, 5, 3});
  free_arrays(&y, 1);
  kiln_graph_destroy(g);
}

static void test_gather_out_of_range(void) {
  /* BAD_INPUTS row 11: a constant index fails at load. */
  kiln_graph_t* g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(5));
  init_i64(g, "idx", I64S(1, 7));
  node(g, "Gather", NAMES("x", "idx"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_ERR(kiln_graph_prepare(g), KILN_OUT_OF_RANGE,
            "Gather: index 7 out of range [-5, 5) on axis 0");
  kiln_graph_destroy(g);

  g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(5));
  init_i64(g, "idx", I64S(-6));
  node(g, "Gather", NAMES("x", "idx"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_ERR(kiln_graph_prepare(g), KILN_OUT_OF_RANGE, "index -6 out of range [-5, 5)");
  kiln_graph_destroy(g);

  /* Indices fed at run time are checked before any read. */
  g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(5));
  input(g, "idx", KILN_DTYPE_I64, SHAPE(2));
  node(g, "Gather", NAMES("x", "idx"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_OK(kiln_graph_prepare(g));
  kiln_array_t in[2] = {array(KILN_DTYPE_F32, SHAPE(5), iota_f32),
                        array(KILN_DTYPE_I64, SHAPE(2), (int64_t[]){4, 7})}, y;
  CHECK_ERR(run(g, in, &y), KILN_OUT_OF_RANGE, "Gather: index 7 out of range [-5, 5) on axis 0");
  ((int64_t*)in[1].data)[1] = INT64_MIN;
  CHECK_ERR(run(g, in, &y), KILN_OUT_OF_RANGE, "out of range");
  ((int64_t*)in[1].data)[1] = -5;
  CHECK_OK(run(g, in, &y));
  expect(&y, SHAPE(2), (double[]){4, 0});
  free_arrays(&y, 1);
  free_arrays(in, 2);
  kiln_graph_destroy(g);
}

/* ---- Slice ------------------------------------------------------------ */

static void test_slice_negative_steps(void) {
  kiln_graph_t* g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(3, 4));
  init_i64(g, "starts", I64S(-1, INT64_MAX));
  init_i64(g, "ends", I64S(INT64_MIN, -INT64_MAX));
  init_i64(g, "axes", I64S(1, 0));
  init_i64(g, "steps", I64S(-2, -1));
  node(g, "Slice", NAMES("x", "starts", "ends", "axes", "steps"), NAMES("y"), NO_ATTRS);
  kiln_array_t y;
  CHECK_OK(run_unary(g, SHAPE(3, 4), &y));
  CHECK(shape_is(&tensor(g, "y")->shape, SHAPE(3, 2)));
  expect(&y, SHAPE(3, 2), (double[]){11, 9, 7, 5, 3, 1});
  free_arrays(&y, 1);
  kiln_graph_destroy(g);

  /* Huge ends clamp; default axes and steps; empty result. */
  g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(3, 4));
  init_i64(g, "starts", I64S(1, 10));
  init_i64(g, "ends", I64S(INT64_MAX, INT64_MAX));
  node(g, "Slice", NAMES("x", "starts", "ends"), NAMES("y"), NO_ATTRS);
  CHECK_OK(run_unary(g, SHAPE(3, 4), &y));
  CHECK(shape_is(&y.shape, SHAPE(2, 0)));
  free_arrays(&y, 1);
  kiln_graph_destroy(g);

  /* Slice-1: attributes. */
  g = graph(9);
  input(g, "x", KILN_DTYPE_F32, SHAPE(3, 4));
  node(g, "Slice", NAMES("x"), NAMES("y"),
       ATTRS(kiln_attr_make_ints("starts", I64S(1)), kiln_attr_make_ints("ends", I64S(-1)), kiln_attr_make_ints("axes", I64S(1))));
  CHECK_OK(run_unary(g, SHAPE(3, 4), &y));
  expect(&y, SHAPE(3, 2), (double[]){1, 2, 5, 6, 9, 10});
  free_arrays(&y, 1);
  kiln_graph_destroy(g);

  /* Starts fed at run time: only the sliced axis is unknown at load. */
  g = graph(13);
  int32_t sym;
  CHECK_OK(kiln_graph_symbol(g, "N", &sym));
  input(g, "x", KILN_DTYPE_F32, SHAPE(kiln_dim_from_symbol(sym), 4));
  input(g, "starts", KILN_DTYPE_I64, SHAPE(1));
  init_i64(g, "ends", I64S(INT64_MAX));
  init_i64(g, "axes", I64S(-1));
  node(g, "Slice", NAMES("x", "starts", "ends", "axes"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_OK(kiln_graph_prepare(g));
  CHECK(shape_is(&tensor(g, "y")->shape, SHAPE(kiln_dim_from_symbol(sym), KILN_DIM_UNKNOWN)));
  kiln_array_t sin[2] = {array(KILN_DTYPE_F32, SHAPE(2, 4), iota_f32),
                         array(KILN_DTYPE_I64, SHAPE(1), (int64_t[]){-1})};
  CHECK_OK(run(g, sin, &y));
  expect(&y, SHAPE(2, 1), (double[]){3, 7});
  free_arrays(&y, 1);
  free_arrays(sin, 2);
  kiln_graph_destroy(g);

  /* Zero step and a repeated axis are errors. */
  g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(3, 4));
  init_i64(g, "starts", I64S(0));
  init_i64(g, "ends", I64S(2));
  init_i64(g, "axes", I64S(0));
  init_i64(g, "steps", I64S(0));
  node(g, "Slice", NAMES("x", "starts", "ends", "axes", "steps"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "Slice: steps[0] is 0");
  kiln_graph_destroy(g);

  g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(3, 4));
  init_i64(g, "starts", I64S(0, 0));
  init_i64(g, "ends", I64S(2, 2));
  init_i64(g, "axes", I64S(1, -1));
  node(g, "Slice", NAMES("x", "starts", "ends", "axes"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "more than once");
  kiln_graph_destroy(g);
}

/* ---- Pad -------------------------------------------------------------- */

static void pad_case(int64_t opset, const char* mode, int32_t n_pads, const int64_t* pads,
                     kiln_shape_t want_shape, const double* want) {
  kiln_graph_t* g = graph(opset);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3));
  init_i64(g, "pads", n_pads, pads);
  init(g, "cv", KILN_DTYPE_F32, SCALAR, (float[]){-1.0f});
  node(g, "Pad", NAMES("x", "pads", "cv"), NAMES("y"), ATTRS(kiln_attr_make_string("mode", mode)));
  kiln_array_t y;
  if (CHECK_OK(run_unary(g, SHAPE(2, 3), &y))) {
    expect(&y, want_shape, want);
    free_arrays(&y, 1);
  }
  kiln_graph_destroy(g);
}

static void test_pad_modes(void) {
  /* x = [[0,1,2],[3,4,5]]; pads (begin0, begin1, end0, end1). */
  pad_case(13, "reflect", I64S(0, 2, 0, 1), SHAPE(2, 6),
           (double[]){2, 1, 0, 1, 2, 1, 5, 4, 3, 4, 5, 4});
  pad_case(13, "edge", I64S(1, 1, 0, 0), SHAPE(3, 4),
           (double[]){0, 0, 1, 2, 0, 0, 1, 2, 3, 3, 4, 5});
  pad_case(19, "wrap", I64S(0, 1, 1, 2), SHAPE(3, 6),
           (double[]){2, 0, 1, 2, 0, 1, 5, 3, 4, 5, 3, 4, 2, 0, 1, 2, 0, 1});
  pad_case(13, "constant", I64S(1, 0, 0, 1), SHAPE(3, 4),
           (double[]){-1, -1, -1, -1, 0, 1, 2, -1, 3, 4, 5, -1});
  /* Negative pads crop first; reflect then reads only what is kept. */
  pad_case(13, "constant", I64S(0, -1, -1, 1), SHAPE(1, 3), (double[]){1, 2, -1});
  pad_case(13, "reflect", I64S(0, -1, 0, 2), SHAPE(2, 4), (double[]){1, 2, 1, 2, 4, 5, 4, 5});

  /* Pad-18 axes input; Pad-2 attributes. */
  kiln_graph_t* g = graph(18);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3));
  init_i64(g, "pads", I64S(1, 0));
  init_i64(g, "axes", I64S(-1));
  node(g, "Pad", NAMES("x", "pads", "", "axes"), NAMES("y"), NO_ATTRS);
  kiln_array_t y;
  CHECK_OK(run_unary(g, SHAPE(2, 3), &y));
  expect(&y, SHAPE(2, 4), (double[]){0, 0, 1, 2, 0, 3, 4, 5});
  free_arrays(&y, 1);
  kiln_graph_destroy(g);

  g = graph(7);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3));
  node(g, "Pad", NAMES("x"), NAMES("y"),
       ATTRS(kiln_attr_make_ints("pads", I64S(0, 0, 1, 0)), kiln_attr_make_float("value", 7.0f)));
  CHECK_OK(run_unary(g, SHAPE(2, 3), &y));
  expect(&y, SHAPE(3, 3), (double[]){0, 1, 2, 3, 4, 5, 7, 7, 7});
  free_arrays(&y, 1);
  kiln_graph_destroy(g);

  /* Too much cropping and bad pad counts are errors. */
  g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3));
  init_i64(g, "pads", I64S(0, -2, 0, -2));
  node(g, "Pad", NAMES("x", "pads"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "Pad: axis 1 of size 3");
  kiln_graph_destroy(g);

  g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3));
  init_i64(g, "pads", I64S(0, 1, 0));
  node(g, "Pad", NAMES("x", "pads"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "pads has 3 entries");
  kiln_graph_destroy(g);
}

/* ---- Resize ----------------------------------------------------------- */

static kiln_graph_t* resize_graph(const char* mode, const char* coord, kiln_shape_t xs) {
  kiln_graph_t* g = graph(19);
  input(g, "x", KILN_DTYPE_F32, xs);
  int32_t r = xs.rank;
  float sc[KILN_MAX_RANK];
  for (int32_t k = 0; k < r; ++k) sc[k] = k >= r - 2 ? 2.0f : 1.0f;
  init(g, "scales", KILN_DTYPE_F32, kiln_shape_make(1, (int64_t[]){r}), sc);
  node(g, "Resize", NAMES("x", "", "scales"), NAMES("y"),
       ATTRS(kiln_attr_make_string("mode", mode), kiln_attr_make_string("coordinate_transformation_mode", coord)));
  return g;
}

static void test_resize_2x(void) {
  kiln_graph_t* g = resize_graph("nearest", "half_pixel", SHAPE(1, 1, 2, 2));
  kiln_array_t y;
  CHECK_OK(run_unary(g, SHAPE(1, 1, 2, 2), &y));
  CHECK(shape_is(&tensor(g, "y")->shape, SHAPE(1, 1, 4, 4)));
  expect(&y, SHAPE(1, 1, 4, 4),
         (double[]){0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3});
  free_arrays(&y, 1);
  kiln_graph_destroy(g);

  g = resize_graph("linear", "half_pixel", SHAPE(1, 1, 2, 2));
  CHECK_OK(run_unary(g, SHAPE(1, 1, 2, 2), &y));
  expect(&y, SHAPE(1, 1, 4, 4),
         (double[]){0,   0.25, 0.75, 1,   0.5, 0.75, 1.25, 1.5,
                    1.5, 1.75, 2.25, 2.5, 2,   2.25, 2.75, 3});
  free_arrays(&y, 1);
  kiln_graph_destroy(g);

  g = resize_graph("linear", "align_corners", SHAPE(1, 2));
  CHECK_OK(run_unary(g, SHAPE(1, 2), &y));
  expect(&y, SHAPE(2, 4), (double[]){0, 1.0 / 3, 2.0 / 3, 1, 0, 1.0 / 3, 2.0 / 3, 1});
  free_arrays(&y, 1);
  kiln_graph_destroy(g);

  g = resize_graph("nearest", "asymmetric", SHAPE(3));
  CHECK_OK(run_unary(g, SHAPE(3), &y));
  expect(&y, SHAPE(6), (double[]){0, 0, 1, 1, 2, 2});
  free_arrays(&y, 1);
  kiln_graph_destroy(g);

  /* sizes + axes, and nearest on an integer tensor. */
  g = graph(18);
  input(g, "x", KILN_DTYPE_I32, SHAPE(2, 2));
  init_i64(g, "sizes", I64S(3));
  node(g, "Resize", NAMES("x", "", "", "sizes"), NAMES("y"),
       ATTRS(kiln_attr_make_ints("axes", I64S(0)), kiln_attr_make_string("nearest_mode", "floor"),
             kiln_attr_make_string("coordinate_transformation_mode", "asymmetric")));
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_OK(kiln_graph_prepare(g));
  CHECK(shape_is(&tensor(g, "y")->shape, SHAPE(3, 2)));
  kiln_array_t x = array(KILN_DTYPE_I32, SHAPE(2, 2), (int32_t[]){1, 2, 3, 4});
  CHECK_OK(run(g, &x, &y));
  expect(&y, SHAPE(3, 2), (double[]){1, 2, 1, 2, 3, 4});
  free_arrays(&y, 1);
  kiln_array_free(sys(), &x);
  kiln_graph_destroy(g);

  /* Antialiased linear downscaling: a 4-tap triangle filter widened by
   * 1/scale (values from the ONNX reference evaluator). */
  g = graph(18);
  input(g, "x", KILN_DTYPE_F32, SHAPE(1, 4));
  init(g, "scales", KILN_DTYPE_F32, SHAPE(2), (float[]){1.0f, 0.5f});
  node(g, "Resize", NAMES("x", "", "scales"), NAMES("y"),
       ATTRS(kiln_attr_make_string("mode", "linear"), kiln_attr_make_int("antialias", 1)));
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_OK(kiln_graph_prepare(g));
  x = array(KILN_DTYPE_F32, SHAPE(1, 4), (float[]){1, 2, 3, 4});
  CHECK_OK(run(g, &x, &y));
  expect(&y, SHAPE(1, 2), (double[]){1.625, 3.375});
  free_arrays(&y, 1);
  kiln_graph_destroy(g);

  /* Cubic with cubic_coeff_a and exclude_outside (weights of taps outside
   * the input dropped and the rest renormalised). */
  g = graph(18);
  input(g, "x", KILN_DTYPE_F32, SHAPE(1, 4));
  init(g, "scales", KILN_DTYPE_F32, SHAPE(2), (float[]){1.0f, 1.5f});
  node(g, "Resize", NAMES("x", "", "scales"), NAMES("y"),
       ATTRS(kiln_attr_make_string("mode", "cubic"), kiln_attr_make_int("exclude_outside", 1),
             kiln_attr_make_float("cubic_coeff_a", -0.5f)));
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_OK(kiln_graph_prepare(g));
  CHECK_OK(run(g, &x, &y));
  expect(&y, SHAPE(1, 6),
         (double[]){0.93421054, 1.4117647, 2.1666667, 2.8333333, 3.5882354, 4.0657897});
  free_arrays(&y, 1);
  kiln_array_free(sys(), &x);
  kiln_graph_destroy(g);

  /* antialias has no meaning for nearest. */
  g = graph(18);
  input(g, "x", KILN_DTYPE_F32, SHAPE(1, 4));
  init(g, "scales", KILN_DTYPE_F32, SHAPE(2), (float[]){1.0f, 0.5f});
  node(g, "Resize", NAMES("x", "", "scales"), NAMES("y"), ATTRS(kiln_attr_make_int("antialias", 1)));
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "antialias=1 needs mode linear or cubic");
  kiln_graph_destroy(g);

  g = graph(18);
  input(g, "x", KILN_DTYPE_F32, SHAPE(1, 4));
  init(g, "scales", KILN_DTYPE_F32, SHAPE(2), (float[]){1.0f, 0.0f});
  node(g, "Resize", NAMES("x", "", "scales"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "scales[1] is 0");
  kiln_graph_destroy(g);
}

/* ---- Split ------------------------------------------------------------ */

static void test_split_uneven(void) {
  kiln_graph_t* g = graph(18);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 7));
  node(g, "Split", NAMES("x"), NAMES("a", "b", "c", "d"),
       ATTRS(kiln_attr_make_int("axis", 1), kiln_attr_make_int("num_outputs", 4)));
  const char* outs[] = {"a", "b", "c", "d"};
  for (int i = 0; i < 4; ++i) CHECK_OK(kiln_graph_add_output(g, outs[i]));
  CHECK_OK(kiln_graph_prepare(g));
  CHECK(shape_is(&tensor(g, "d")->shape, SHAPE(2, 1)));
  kiln_array_t x = array(KILN_DTYPE_F32, SHAPE(2, 7), iota_f32), y[4];
  CHECK_OK(run(g, &x, y));
  expect(&y[0], SHAPE(2, 2), (double[]){0, 1, 7, 8});
  expect(&y[2], SHAPE(2, 2), (double[]){4, 5, 11, 12});
  expect(&y[3], SHAPE(2, 1), (double[]){6, 13});
  free_arrays(y, 4);
  kiln_array_free(sys(), &x);
  kiln_graph_destroy(g);

  /* Split-13: sizes from the input, including a zero-size part. */
  g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(5));
  init_i64(g, "split", I64S(2, 0, 3));
  node(g, "Split", NAMES("x", "split"), NAMES("a", "b", "c"), NO_ATTRS);
  for (int i = 0; i < 3; ++i) CHECK_OK(kiln_graph_add_output(g, outs[i]));
  CHECK_OK(kiln_graph_prepare(g));
  x = array(KILN_DTYPE_F32, SHAPE(5), iota_f32);
  CHECK_OK(run(g, &x, y));
  expect(&y[0], SHAPE(2), (double[]){0, 1});
  CHECK(shape_is(&y[1].shape, SHAPE(0)));
  expect(&y[2], SHAPE(3), (double[]){2, 3, 4});
  free_arrays(y, 3);
  kiln_array_free(sys(), &x);
  kiln_graph_destroy(g);

  /* Split-11: the attribute; Split-13 equal parts must divide evenly. */
  g = graph(11);
  input(g, "x", KILN_DTYPE_F32, SHAPE(5));
  node(g, "Split", NAMES("x"), NAMES("a", "b"), ATTRS(kiln_attr_make_ints("split", I64S(1, 4))));
  for (int i = 0; i < 2; ++i) CHECK_OK(kiln_graph_add_output(g, outs[i]));
  CHECK_OK(kiln_graph_prepare(g));
  CHECK(shape_is(&tensor(g, "b")->shape, SHAPE(4)));
  kiln_graph_destroy(g);

  g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(5));
  node(g, "Split", NAMES("x"), NAMES("a", "b"), NO_ATTRS);
  for (int i = 0; i < 2; ++i) CHECK_OK(kiln_graph_add_output(g, outs[i]));
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "2 equal parts");
  kiln_graph_destroy(g);

  g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(5));
  init_i64(g, "split", I64S(2, 2));
  node(g, "Split", NAMES("x", "split"), NAMES("a", "b"), NO_ATTRS);
  for (int i = 0; i < 2; ++i) CHECK_OK(kiln_graph_add_output(g, outs[i]));
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "add up to 4");
  kiln_graph_destroy(g);
}

/* ---- the rest: Flatten, Transpose, Concat, Squeeze, Unsqueeze, Expand,
 *      Constant, ConstantOfShape ------------------------------------------ */

static void test_layout_ops(void) {
  kiln_graph_t* g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3, 4));
  node(g, "Transpose", NAMES("x"), NAMES("y"), NO_ATTRS);
  kiln_array_t y;
  CHECK_OK(run_unary(g, SHAPE(2, 3, 4), &y));
  CHECK(shape_is(&y.shape, SHAPE(4, 3, 2)));
  CHECK(((float*)y.data)[1] == 12.0f && ((float*)y.data)[2] == 4.0f);
  free_arrays(&y, 1);
  kiln_graph_destroy(g);

  g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3));
  node(g, "Transpose", NAMES("x"), NAMES("y"), ATTRS(kiln_attr_make_ints("perm", I64S(0, 0))));
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "perm[1]");
  kiln_graph_destroy(g);

  g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3, 4));
  node(g, "Flatten", NAMES("x"), NAMES("y"), ATTRS(kiln_attr_make_int("axis", -1)));
  CHECK_OK(run_unary(g, SHAPE(2, 3, 4), &y));
  CHECK(shape_is(&y.shape, SHAPE(6, 4)));
  free_arrays(&y, 1);
  kiln_graph_destroy(g);

  g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 2));
  init(g, "c", KILN_DTYPE_F32, SHAPE(2, 1), (float[]){9, 8});
  node(g, "Concat", NAMES("x", "c", "x"), NAMES("y"), ATTRS(kiln_attr_make_int("axis", 1)));
  CHECK_OK(run_unary(g, SHAPE(2, 2), &y));
  expect(&y, SHAPE(2, 5), (double[]){0, 1, 9, 0, 1, 2, 3, 8, 2, 3});
  free_arrays(&y, 1);
  kiln_graph_destroy(g);

  g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 2));
  init(g, "c", KILN_DTYPE_F32, SHAPE(3, 1), (float[]){9, 8, 7});
  node(g, "Concat", NAMES("x", "c"), NAMES("y"), ATTRS(kiln_attr_make_int("axis", 1)));
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "Concat: input 1");
  kiln_graph_destroy(g);

  /* Squeeze/Unsqueeze: axes as attribute (opset 11) and input (13). */
  g = graph(11);
  input(g, "x", KILN_DTYPE_F32, SHAPE(1, 3, 1));
  node(g, "Squeeze", NAMES("x"), NAMES("s"), ATTRS(kiln_attr_make_ints("axes", I64S(-1))));
  node(g, "Unsqueeze", NAMES("s"), NAMES("y"), ATTRS(kiln_attr_make_ints("axes", I64S(3, 0))));
  CHECK_OK(run_unary(g, SHAPE(1, 3, 1), &y));
  CHECK(shape_is(&y.shape, SHAPE(1, 1, 3, 1)));
  free_arrays(&y, 1);
  kiln_graph_destroy(g);

  g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(1, 3, 1));
  init_i64(g, "axes", I64S(1));
  node(g, "Squeeze", NAMES("x", "axes"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "axis 1 has size 3");
  kiln_graph_destroy(g);

  g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(1, 3, 1));
  node(g, "Squeeze", NAMES("x"), NAMES("y"), NO_ATTRS);
  CHECK_OK(run_unary(g, SHAPE(1, 3, 1), &y));
  CHECK(shape_is(&y.shape, SHAPE(3)));
  free_arrays(&y, 1);
  kiln_graph_destroy(g);

  /* Expand broadcasts both ways. */
  g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(3, 1));
  init_i64(g, "shape", I64S(2, 1, 2));
  node(g, "Expand", NAMES("x", "shape"), NAMES("y"), NO_ATTRS);
  CHECK_OK(run_unary(g, SHAPE(3, 1), &y));
  expect(&y, SHAPE(2, 3, 2), (double[]){0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2});
  free_arrays(&y, 1);
  kiln_graph_destroy(g);

  g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(3, 2));
  init_i64(g, "shape", I64S(4, 2));
  node(g, "Expand", NAMES("x", "shape"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "Expand");
  kiln_graph_destroy(g);
}

static void test_constants(void) {
  kiln_graph_t* g = graph(13);
  node(g, "Constant", 0, NULL, NAMES("c"), ATTRS(kiln_attr_make_ints("value_ints", I64S(2, 3))));
  kiln_array_t seven = array(KILN_DTYPE_I32, SHAPE(1), (int32_t[]){7});
  node(g, "ConstantOfShape", NAMES("c"), NAMES("y"), ATTRS(kiln_attr_make_tensor("value", &seven)));
  node(g, "Constant", 0, NULL, NAMES("f"), ATTRS(kiln_attr_make_float("value_float", 1.5f)));
  node(g, "ConstantOfShape", NAMES("c"), NAMES("z"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_OK(kiln_graph_add_output(g, "f"));
  CHECK_OK(kiln_graph_add_output(g, "z"));
  CHECK_OK(kiln_graph_prepare(g));
  const kiln_tensor_t* c = tensor(g, "c");
  CHECK((c->flags & KILN_TENSOR_CONST) && shape_is(&c->shape, SHAPE(2)));
  CHECK(tensor(g, "y")->dtype == KILN_DTYPE_I32);
  CHECK(shape_is(&tensor(g, "y")->shape, SHAPE(2, 3)));
  CHECK(shape_is(&tensor(g, "f")->shape, SCALAR));
  kiln_array_t out[3];
  CHECK_OK(run(g, NULL, out));
  expect(&out[0], SHAPE(2, 3), (double[]){7, 7, 7, 7, 7, 7});
  expect(&out[1], SCALAR, (double[]){1.5});
  CHECK(out[2].dtype == KILN_DTYPE_F32);
  expect(&out[2], SHAPE(2, 3), (double[]){0, 0, 0, 0, 0, 0});
  free_arrays(out, 3);
  kiln_array_free(sys(), &seven);
  kiln_graph_destroy(g);

  g = graph(13);
  node(g, "Constant", 0, NULL, NAMES("c"), ATTRS(kiln_attr_make_string("value_string", "hi")));
  CHECK_OK(kiln_graph_add_output(g, "c"));
  CHECK_ERR(kiln_graph_prepare(g), KILN_UNSUPPORTED, "value_string");
  kiln_graph_destroy(g);

  g = graph(13);
  init_i64(g, "shape", I64S(2, -1));
  node(g, "ConstantOfShape", NAMES("shape"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "input[1] is -1");
  kiln_graph_destroy(g);
}

/* Data movement works byte-wise for every dtype. */
static void test_dtypes(void) {
  static const kiln_dtype_t types[] = {KILN_DTYPE_F32, KILN_DTYPE_F16, KILN_DTYPE_I8,
                                       KILN_DTYPE_U8,  KILN_DTYPE_I32, KILN_DTYPE_I64,
                                       KILN_DTYPE_BOOL};
  for (size_t t = 0; t < sizeof types / sizeof types[0]; ++t) {
    kiln_dtype_t dt = types[t];
    kiln_graph_t* g = graph(13);
    input(g, "x", dt, SHAPE(2, 3));
    init_i64(g, "pads", I64S(0, 1, 0, 0));
    node(g, "Transpose", NAMES("x"), NAMES("t"), NO_ATTRS);
    node(g, "Pad", NAMES("t", "pads"), NAMES("y"), ATTRS(kiln_attr_make_string("mode", "edge")));
    CHECK_OK(kiln_graph_add_output(g, "y"));
    CHECK_OK(kiln_graph_prepare(g));
    kiln_array_t x = array(dt, SHAPE(2, 3), NULL), y;
    for (int i = 0; i < 6; ++i) {
      kiln_store_f64(dt, x.data, (size_t)i, dt == KILN_DTYPE_BOOL ? i & 1 : i);
    }
    CHECK_OK(run(g, &x, &y));
    double want[] = {0, 0, 3, 1, 1, 4, 2, 2, 5};
    if (dt == KILN_DTYPE_BOOL) for (int i = 0; i < 9; ++i) want[i] = (int)want[i] & 1;
    CHECK(y.dtype == dt);
    expect(&y, SHAPE(3, 3), want);
    free_arrays(&y, 1);
    kiln_array_free(sys(), &x);
    kiln_graph_destroy(g);
  }
}

/* Integer inputs fed at run time with hostile values: every case must end
 * in an error (or a correct result), never a crash or a huge allocation. */
static void hostile_case(const char* op, int64_t opset, kiln_shape_t xs, int32_t n_vals,
                         const int64_t* vals, int32_t n_attr, const kiln_attr_t* attrs) {
  kiln_graph_t* g = graph(opset);
  input(g, "x", KILN_DTYPE_F32, xs);
  input(g, "v", KILN_DTYPE_I64, kiln_shape_make(1, (int64_t[]){n_vals}));
  bool cos = strcmp(op, "ConstantOfShape") == 0;
  node(g, op, cos ? 1 : 2, cos ? (const char* []){"v"} : (const char* []){"x", "v"},
       NAMES("y"), n_attr, attrs);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  kiln_status_t s = kiln_graph_prepare(g);
  if (s) { /* rejected at load (e.g. a rank kiln cannot hold): fine too */
    kiln_status_free(s);
    kiln_graph_destroy(g);
    return;
  }
  kiln_array_t in[2] = {array(KILN_DTYPE_F32, xs, NULL),
                        array(KILN_DTYPE_I64, kiln_shape_make(1, (int64_t[]){n_vals}), vals)};
  kiln_array_t y;
  s = run(g, in, &y);
  CHECK_MSG(s != NULL, "%s with hostile values succeeded", op);
  if (s) {
    kiln_status_free(s);
  } else {
    kiln_array_free(sys(), &y);
  }
  free_arrays(in, 2);
  kiln_graph_destroy(g);
}

static void test_hostile_values(void) {
  hostile_case("Reshape", 17, SHAPE(2, 3), I64S(INT64_MAX, 2), NO_ATTRS);
  hostile_case("Reshape", 17, SHAPE(2, 3), I64S(-7, 2), NO_ATTRS);
  hostile_case("Reshape", 17, SHAPE(2, 3), I64S(0, 0, 0), NO_ATTRS);
  hostile_case("Expand", 13, SHAPE(2, 3), I64S(INT64_MAX, INT64_MAX, 3), NO_ATTRS);
  hostile_case("Expand", 13, SHAPE(2, 3), I64S(-1, 3), NO_ATTRS);
  hostile_case("ConstantOfShape", 13, SHAPE(1), I64S(INT64_MAX, INT64_MAX), NO_ATTRS);
  hostile_case("ConstantOfShape", 13, SHAPE(1), I64S(1, 2, 3, 4, 5, 6, 7, 8, 9), NO_ATTRS);
  hostile_case("Pad", 13, SHAPE(2, 3), I64S(INT64_MAX, 0, INT64_MAX, 0), NO_ATTRS);
  hostile_case("Pad", 13, SHAPE(2, 3), I64S(INT64_MIN, 0, 0, 0), NO_ATTRS);
  hostile_case("Pad", 13, SHAPE(2, 3), I64S(0, -3, 0, 1), ATTRS(kiln_attr_make_string("mode", "reflect")));
  hostile_case("Unsqueeze", 13, SHAPE(2, 3), I64S(0, 0), NO_ATTRS);
  hostile_case("Unsqueeze", 13, SHAPE(2, 3), I64S(INT64_MIN), NO_ATTRS);
  hostile_case("Squeeze", 13, SHAPE(2, 3), I64S(0), NO_ATTRS);
  hostile_case("Squeeze", 13, SHAPE(2, 3), I64S(INT64_MAX), NO_ATTRS);
  hostile_case("Split", 13, SHAPE(4), I64S(INT64_MAX, 5), NO_ATTRS);
  hostile_case("Gather", 13, SHAPE(4), I64S(INT64_MAX), NO_ATTRS);

  /* Resize scales that would make a gigantic output. */
  kiln_graph_t* r = graph(13);
  input(r, "x", KILN_DTYPE_F32, SHAPE(2, 3));
  input(r, "scales", KILN_DTYPE_F32, SHAPE(2));
  node(r, "Resize", NAMES("x", "", "scales"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(r, "y"));
  CHECK_OK(kiln_graph_prepare(r));
  kiln_array_t rin[2] = {array(KILN_DTYPE_F32, SHAPE(2, 3), NULL),
                         array(KILN_DTYPE_F32, SHAPE(2), (float[]){1.0f, 1e30f})}, ry;
  CHECK_ERR(run(r, rin, &ry), KILN_LIMIT_EXCEEDED, "Resize: scale");
  ((float*)rin[1].data)[1] = -1.0f;
  CHECK_ERR(run(r, rin, &ry), KILN_INVALID_ARGUMENT, "scales[1] is -1");
  free_arrays(rin, 2);
  kiln_graph_destroy(r);

  /* Slice never reads outside the input, whatever the values. */
  static const int64_t edge[] = {INT64_MIN, INT64_MIN + 1, -5, -4, -1, 0, 1, 3, 4, 5, INT64_MAX};
  static const int64_t steps[] = {INT64_MIN, -3, -1, 1, 2, INT64_MAX};
  kiln_graph_t* g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(4));
  input(g, "s", KILN_DTYPE_I64, SHAPE(1));
  input(g, "e", KILN_DTYPE_I64, SHAPE(1));
  init_i64(g, "a", I64S(0));
  input(g, "st", KILN_DTYPE_I64, SHAPE(1));
  node(g, "Slice", NAMES("x", "s", "e", "a", "st"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_OK(kiln_graph_prepare(g));
  kiln_array_t in[4] = {array(KILN_DTYPE_F32, SHAPE(4), iota_f32),
                        array(KILN_DTYPE_I64, SHAPE(1), NULL),
                        array(KILN_DTYPE_I64, SHAPE(1), NULL),
                        array(KILN_DTYPE_I64, SHAPE(1), NULL)};
  int64_t n_edge = sizeof edge / sizeof edge[0];
  for (int64_t i = 0; i < n_edge; ++i)
    for (int64_t j = 0; j < n_edge; ++j)
      for (size_t k = 0; k < sizeof steps / sizeof steps[0]; ++k) {
        *(int64_t*)in[1].data = edge[i];
        *(int64_t*)in[2].data = edge[j];
        *(int64_t*)in[3].data = steps[k];
        kiln_array_t y;
        if (!CHECK_OK(run(g, in, &y))) continue;
        /* Every element read must be one of the input's. */
        for (int64_t e = 0; e < kiln_array_numel(&y); ++e) {
          float v = ((float*)y.data)[e];
          CHECK(v >= 0.0f && v <= 3.0f);
        }
        CHECK(kiln_array_numel(&y) <= 4);
        kiln_array_free(sys(), &y);
      }
  free_arrays(in, 4);
  kiln_graph_destroy(g);
}

int main(void) {
  fill_iota();
  RUN(test_reshape_zero_and_minus_one);
  RUN(test_reshape_errors);
  RUN(test_shape_start_end);
  RUN(test_shape_chain);
  RUN(test_gather_negative_index);
  RUN(test_gather_out_of_range);
  RUN(test_slice_negative_steps);
  RUN(test_pad_modes);
  RUN(test_resize_2x);
  RUN(test_split_uneven);
  RUN(test_layout_ops);
  RUN(test_constants);
  RUN(test_dtypes);
  RUN(test_hostile_values);
  return kiln_test_finish();
}
