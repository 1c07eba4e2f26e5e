/* Reference kernels and load-time checks of the sampling/geometry ops:
 * GridSample, AffineGrid, Col2Im, DFT, RoiAlign, MaxUnpool (the ONNX node
 * tests cover the modes on every target; these check hand-computed values
 * and that bad inputs fail with a message naming the problem). */
#include "ref_graph_util.h"

static void node(kiln_graph_t* g, const char* op, int32_t n_in, const char* const* in, int32_t n_attr,
                 const kiln_attr_t* attrs) {
  const char* out[1] = {"y"};
  CHECK_OK(kiln_graph_add_node(g, op, op, n_in, in, 1, out, n_attr, attrs, NULL));
  CHECK_OK(kiln_graph_add_output(g, "y"));
}

/* X = [[0, 1], [2, 3]] sampled at grid points (x, y). */
static void grid_case(const char* padding, int64_t align, const float* pt, double want) {
  kiln_graph_t* g = graph(16);
  input(g, "x", KILN_DTYPE_F32, SHAPE(1, 1, 2, 2));
  init(g, "grid", KILN_DTYPE_F32, SHAPE(1, 1, 1, 2), pt);
  node(g, "GridSample", NAMES("x", "grid"),
       ATTRS(kiln_attr_make_string("padding_mode", padding), kiln_attr_make_int("align_corners", align)));
  CHECK_OK(kiln_graph_prepare(g));
  kiln_array_t x = array(KILN_DTYPE_F32, SHAPE(1, 1, 2, 2), (float[]){0, 1, 2, 3}), y;
  CHECK_OK(run(g, &x, &y));
  expect(&y, SHAPE(1, 1, 1, 1), (double[]){want});
  kiln_array_free(sys(), &x);
  kiln_array_free(sys(), &y);
  kiln_graph_destroy(g);
}

static void test_grid_sample(void) {
  grid_case("zeros", 0, (float[]){0, 0}, 1.5);    /* centre: mean of all four */
  grid_case("zeros", 1, (float[]){-1, -1}, 0.0);  /* corner pixel (0, 0) */
  grid_case("zeros", 1, (float[]){1, -1}, 1.0);   /* x is the last axis */
  grid_case("zeros", 0, (float[]){2, 0}, 0.0);    /* right of the image */
  grid_case("border", 0, (float[]){2, 0}, 2.0);   /* clamped to column 1 */
  grid_case("reflection", 1, (float[]){2, -1}, 0.5); /* x = 1.5 folds to 0.5 */
  grid_case("reflection", 1, (float[]){3, -1}, 0.0); /* x = 2 folds to 0 */

  kiln_graph_t* g = graph(16);
  input(g, "x", KILN_DTYPE_F32, SHAPE(1, 1, 2, 2));
  input(g, "grid", KILN_DTYPE_F32, SHAPE(1, 3, 3, 3));
  node(g, "GridSample", NAMES("x", "grid"), NO_ATTRS);
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "grid's last dim is 3, expected 2");
  kiln_graph_destroy(g);
  g = graph(16);
  input(g, "x", KILN_DTYPE_F32, SHAPE(1, 1, 2, 2));
  input(g, "grid", KILN_DTYPE_F32, SHAPE(1, 3, 3, 2));
  node(g, "GridSample", NAMES("x", "grid"), ATTRS(kiln_attr_make_string("mode", "area")));
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "mode 'area'");
  kiln_graph_destroy(g);
}

static void test_dft(void) {
  /* The 4-point DFT of 1, 2, 3, 4 along axis 1, then its inverse. */
  kiln_graph_t* g = graph(17);
  input(g, "x", KILN_DTYPE_F32, SHAPE(1, 4, 1));
  node(g, "DFT", NAMES("x"), NO_ATTRS);
  CHECK_OK(kiln_graph_prepare(g));
  kiln_array_t x = array(KILN_DTYPE_F32, SHAPE(1, 4, 1), (float[]){1, 2, 3, 4}), y;
  CHECK_OK(run(g, &x, &y));
  expect(&y, SHAPE(1, 4, 2), (double[]){10, 0, -2, 2, -2, 0, -2, -2});
  kiln_array_free(sys(), &x);
  kiln_graph_destroy(g);
  g = graph(17);
  input(g, "x", KILN_DTYPE_F32, SHAPE(1, 4, 2));
  node(g, "DFT", NAMES("x"), ATTRS(kiln_attr_make_int("inverse", 1)));
  CHECK_OK(kiln_graph_prepare(g));
  kiln_array_t back;
  CHECK_OK(run(g, &y, &back));
  expect(&back, SHAPE(1, 4, 2), (double[]){1, 0, 2, 0, 3, 0, 4, 0});
  kiln_array_free(sys(), &y);
  kiln_array_free(sys(), &back);
  kiln_graph_destroy(g);

  g = graph(17);
  input(g, "x", KILN_DTYPE_F32, SHAPE(1, 4, 1));
  node(g, "DFT", NAMES("x"), ATTRS(kiln_attr_make_int("axis", 2)));
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "axis 2 is outside");
  kiln_graph_destroy(g);
}

static void test_col2im(void) {
  /* 1 x 3 image, block 1 x 2, stride 1: two positions overlap on pixel 1. */
  kiln_graph_t* g = graph(18);
  input(g, "x", KILN_DTYPE_F32, SHAPE(1, 2, 2));
  init(g, "image", KILN_DTYPE_I64, SHAPE(2), (int64_t[]){1, 3});
  init(g, "block", KILN_DTYPE_I64, SHAPE(2), (int64_t[]){1, 2});
  node(g, "Col2Im", NAMES("x", "image", "block"), NO_ATTRS);
  CHECK_OK(kiln_graph_prepare(g));
  kiln_array_t x = array(KILN_DTYPE_F32, SHAPE(1, 2, 2), (float[]){1, 2, 10, 20}), y;
  CHECK_OK(run(g, &x, &y));
  expect(&y, SHAPE(1, 1, 1, 3), (double[]){1, 12, 20});
  kiln_array_free(sys(), &x);
  kiln_array_free(sys(), &y);
  kiln_graph_destroy(g);

  g = graph(18);
  input(g, "x", KILN_DTYPE_F32, SHAPE(1, 2, 5));
  init(g, "image", KILN_DTYPE_I64, SHAPE(2), (int64_t[]){1, 3});
  init(g, "block", KILN_DTYPE_I64, SHAPE(2), (int64_t[]){1, 2});
  node(g, "Col2Im", NAMES("x", "image", "block"), NO_ATTRS);
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "input dim 2 is 5");
  kiln_graph_destroy(g);
}

static void test_bad_indices(void) {
  /* RoiAlign: batch index 1 of a batch of 1. */
  kiln_graph_t* g = graph(16);
  input(g, "x", KILN_DTYPE_F32, SHAPE(1, 1, 2, 2));
  input(g, "rois", KILN_DTYPE_F32, SHAPE(1, 4));
  input(g, "bi", KILN_DTYPE_I64, SHAPE(1));
  node(g, "RoiAlign", NAMES("x", "rois", "bi"), ATTRS(kiln_attr_make_int("sampling_ratio", 1)));
  CHECK_OK(kiln_graph_prepare(g));
  kiln_array_t in[3] = {array(KILN_DTYPE_F32, SHAPE(1, 1, 2, 2), (float[]){0, 1, 2, 3}),
                        array(KILN_DTYPE_F32, SHAPE(1, 4), (float[]){0, 0, 1, 1}),
                        array(KILN_DTYPE_I64, SHAPE(1), (int64_t[]){1})};
  kiln_array_t y;
  CHECK_ERR(run(g, in, &y), KILN_INVALID_ARGUMENT, "batch_indices[0] is 1");
  ((int64_t*)in[2].data)[0] = 0;
  CHECK_OK(run(g, in, &y));
  /* One sample per bin at the roi's centre (0.5, 0.5) - 0.5 = pixel (0, 0). */
  expect(&y, SHAPE(1, 1, 1, 1), (double[]){0.0});
  kiln_array_free(sys(), &y);
  for (int i = 0; i < 3; ++i) kiln_array_free(sys(), &in[i]);
  kiln_graph_destroy(g);

  /* MaxUnpool: index 4 of a 2 x 2 output. */
  g = graph(11);
  input(g, "x", KILN_DTYPE_F32, SHAPE(1, 1, 1, 1));
  input(g, "i", KILN_DTYPE_I64, SHAPE(1, 1, 1, 1));
  node(g, "MaxUnpool", NAMES("x", "i"), ATTRS(kiln_attr_make_ints("kernel_shape", 2, (int64_t[]){2, 2})));
  CHECK_OK(kiln_graph_prepare(g));
  kiln_array_t u[2] = {array(KILN_DTYPE_F32, SHAPE(1, 1, 1, 1), (float[]){7}),
                       array(KILN_DTYPE_I64, SHAPE(1, 1, 1, 1), (int64_t[]){4})};
  CHECK_ERR(run(g, u, &y), KILN_INVALID_ARGUMENT, "outside [0, 4)");
  ((int64_t*)u[1].data)[0] = 3;
  CHECK_OK(run(g, u, &y));
  expect(&y, SHAPE(1, 1, 2, 2), (double[]){0, 0, 0, 7});
  kiln_array_free(sys(), &y);
  for (int i = 0; i < 2; ++i) kiln_array_free(sys(), &u[i]);
  kiln_graph_destroy(g);
}

int main(void) {
  RUN(test_grid_sample);
  RUN(test_dft);
  RUN(test_col2im);
  RUN(test_bad_indices);
  return kiln_test_finish();
}
