/* Element-wise, reduce and activation kernels at the GPU targets' limits
 * (issue 23), against the reference executor:
 *
 *   test_gpu_ew_limits [--target cpu|opencl|vulkan]   (default cpu)
 *
 *   - Relu and Add over 65537 x 257 elements (16.8M): a printed grid past
 *     65535 work-groups in x, which Vulkan folds into y (65537 is prime:
 *     the folded grid is guarded); Relu over 65537 x 256 (Vulkan: vec4
 *     texels, 16385 groups); exact;
 *   - ReduceSum / ReduceMean over axis 1 of 8 x 512 x 1024 (a kept inner
 *     run of 1024): each output reduces 512 values, within lavapipe's loop
 *     limit of 65535 an invocation; integer-valued inputs, so exact;
 *   - ReduceSum over axis 0 of 100000 x 8 and ReduceMax over axes {0, 2} of
 *     300 x 4 x 300 x 8: groups past half the loop limit, in chunks and a
 *     second pass on lavapipe; exact;
 *   - Erf, Tanh, Sigmoid, Softplus, Silu (x * Sigmoid(x)) and Gelu (exact
 *     and tanh) over a dense sweep of [-12, 12] plus the edges 0, -0,
 *     +-1e-30, subnormals, +-40, +-1e30, +-inf and NaN: within 2e-6 absolute
 *     + 4e-6 relative of the reference (double), NaN for NaN, the same inf.
 */
#include <math.h>

#include "target_graph_util.h"

/* x -> op -> y, one input of |n| f32 elements as [rows, n / rows]. */
static kiln_graph_t* unary_graph(const char* op, int64_t rows, int64_t cols, int n_attrs, const kiln_attr_t* attrs,
                                 int64_t opset) {
  kiln_graph_t* g = graph_new();
  if (!g) return NULL;
  int64_t d[2] = {rows, cols};
  bool ok = (opset <= 17 || CHECK_OK(kiln_graph_set_opset(g, "", opset))) && input(g, "x", KILN_DTYPE_F32, 2, d);
  if (ok && !strcmp(op, "Silu")) {
    ok = node1(g, "Sigmoid", "sig", 1, (const char*[]){"x"}, "s", 0, NULL) &&
         node1(g, "Mul", "op", 2, (const char*[]){"x", "s"}, "y", 0, NULL);
  } else if (ok && !strcmp(op, "AddSelf")) {
    ok = node1(g, "Add", "op", 2, (const char*[]){"x", "x"}, "y", 0, NULL);
  } else if (ok) {
    ok = node1(g, op, "op", 1, (const char*[]){"x"}, "y", n_attrs, attrs);
  }
  ok = ok && CHECK_OK(kiln_graph_add_output(g, "y")) && CHECK_OK(kiln_graph_prepare(g)) &&
       CHECK_OK(kiln_graph_optimize(g, 1, NULL));
  if (!ok) {
    kiln_graph_destroy(g);
    return NULL;
  }
  return g;
}

static void run_exact(kiln_graph_t* g, const kiln_array_t* in) {
  kiln_module_t* m = g ? compile(g) : NULL;
  kiln_session_t* s = session(m);
  CHECK(s != NULL);
  if (s) both_agree(g, s, in);
  kiln_session_destroy(s);
  kiln_module_release(m);
}

/* More work-groups than one Vulkan grid dimension holds: Relu and Add over
 * 65537 x 257 (16.8M elements, an odd row: one float an invocation, 65794
 * groups), and Relu over 65537 x 256 (Vulkan's vec4 kernel: 16385 groups;
 * a vec4 grid past 65535 groups would bind 256 MB, twice what lavapipe
 * binds) */
static void test_big_grid(void) {
  const char* ops[] = {"Relu", "AddSelf", "Relu"};
  const int64_t cols[] = {257, 257, 256};
  for (int k = 0; k < 3; ++k) {
    const int64_t rows = 65537, d[2] = {rows, cols[k]};
    kiln_array_t in = arr(KILN_DTYPE_F32, 2, d);
    if (!in.data) return;
    float* x = in.data;
    for (int64_t i = 0; i < rows * cols[k]; ++i) x[i] = (float)((i * 7919) % 2001 - 1000) * 0.25f;
    kiln_graph_t* g = unary_graph(ops[k], rows, cols[k], 0, NULL, 17);
    run_exact(g, &in);
    kiln_graph_destroy(g);
    kiln_array_free(al(), &in);
  }
}

/* Reduce{Sum,Mean} over the middle axis of 8 x 512 x 1024 */
static void test_reduce_middle(void) {
  const int64_t d[3] = {8, 512, 1024}, one = 1;
  kiln_array_t in = arr(KILN_DTYPE_F32, 3, d);
  if (!in.data) return;
  float* x = in.data;
  for (int64_t i = 0; i < 8 * 512 * 1024; ++i) x[i] = (float)((i * 31) % 17 - 8);
  const char* ops[] = {"ReduceSum", "ReduceMean"};
  for (int k = 0; k < 2; ++k) {
    kiln_graph_t* g = graph_new();
    kiln_array_t ax = arr(KILN_DTYPE_I64, 1, &one);
    if (ax.data) ((int64_t*)ax.data)[0] = 1;
    const bool from_input = k == 0; /* ReduceSum-13 takes axes as an input; ReduceMean-17 an attribute */
    kiln_attr_t attrs[2] = {kiln_attr_make_int("keepdims", 0), kiln_attr_make_ints("axes", 1, (const int64_t[]){1})};
    bool ok = g && ax.data && input(g, "x", KILN_DTYPE_F32, 3, d) &&
              (!from_input || CHECK_OK(kiln_graph_add_initializer(g, "ax", &ax, NULL))) &&
              node1(g, ops[k], "reduce", from_input ? 2 : 1, (const char*[]){"x", "ax"}, "y", from_input ? 1 : 2,
                    attrs) &&
              CHECK_OK(kiln_graph_add_output(g, "y")) && CHECK_OK(kiln_graph_prepare(g)) &&
              CHECK_OK(kiln_graph_optimize(g, 1, NULL));
    kiln_array_free(al(), &ax);
    if (ok) run_exact(g, &in);
    kiln_graph_destroy(g);
  }
  kiln_array_free(al(), &in);
}

/* Groups past half of lavapipe's loop limit: ReduceSum over axis 0 of
 * 100000 x 8 and ReduceMax over axes {0, 2} of 300 x 4 x 300 x 8 (90,000
 * values an output, two reduced runs) split in chunks and a second pass on
 * a device with a loop limit; exact (small integers) */
static void test_reduce_long_groups(void) {
  const int64_t d2[2] = {100000, 8}, d4[4] = {300, 4, 300, 8}, one = 1;
  for (int k = 0; k < 2; ++k) {
    const int rank = k == 0 ? 2 : 4;
    const int64_t* d = k == 0 ? d2 : d4;
    kiln_array_t in = arr(KILN_DTYPE_F32, rank, d);
    kiln_graph_t* g = graph_new();
    kiln_array_t ax = arr(KILN_DTYPE_I64, 1, &one);
    if (ax.data) ((int64_t*)ax.data)[0] = 0;
    kiln_attr_t attrs[2] = {kiln_attr_make_int("keepdims", 1), kiln_attr_make_ints("axes", 2, (const int64_t[]){0, 2})};
    bool ok = g && in.data && ax.data && input(g, "x", KILN_DTYPE_F32, rank, d) &&
              (k == 1 || CHECK_OK(kiln_graph_add_initializer(g, "ax", &ax, NULL))) &&
              node1(g, k == 0 ? "ReduceSum" : "ReduceMax", "reduce", k == 0 ? 2 : 1, (const char*[]){"x", "ax"}, "y",
                    k == 0 ? 1 : 2, attrs) &&
              CHECK_OK(kiln_graph_add_output(g, "y")) && CHECK_OK(kiln_graph_prepare(g)) &&
              CHECK_OK(kiln_graph_optimize(g, 1, NULL));
    if (ok) {
      float* x = in.data;
      const int64_t n = k == 0 ? 800000 : 2880000;
      for (int64_t i = 0; i < n; ++i) x[i] = (float)((i * 131) % 23 - 11);
      run_exact(g, &in);
    }
    kiln_array_free(al(), &ax);
    kiln_array_free(al(), &in);
    kiln_graph_destroy(g);
  }
}

/* The sweep: a dense grid of [-12, 12] and the edges. */
enum { SWEEP_DENSE = 24001, SWEEP_N = SWEEP_DENSE + 23 };

static void sweep_fill(float* x) {
  for (int i = 0; i < SWEEP_DENSE; ++i) x[i] = -12.0f + (float)i * 0.001f;
  const float edges[23] = {0.0f,   -0.0f,   1e-30f,  -1e-30f,   1e-40f,   -1e-40f,  40.0f,   -40.0f,
                           1e30f,  -1e30f,  INFINITY, -INFINITY, NAN,      3.9999f,  -3.9999f, 4.0001f,
                           -4.0001f, 9.0001f, -9.0001f, 0.6249f, -0.6251f, 88.5f,   -104.5f};
  for (int i = 0; i < 23; ++i) x[SWEEP_DENSE + i] = edges[i];
}

static void test_sweep(const char* op, int n_attrs, const kiln_attr_t* attrs, int64_t opset) {
  kiln_graph_t* g = unary_graph(op, 1, SWEEP_N, n_attrs, attrs, opset);
  kiln_module_t* m = g ? compile(g) : NULL;
  kiln_session_t* s = session(m);
  const int64_t d[2] = {1, SWEEP_N};
  kiln_array_t in = arr(KILN_DTYPE_F32, 2, d);
  kiln_array_t want, got;
  memset(&want, 0, sizeof want);
  memset(&got, 0, sizeof got);
  if (s && in.data) {
    sweep_fill(in.data);
    if (CHECK_OK(kiln_ref_run(g, &in, NULL, &want)) && CHECK_OK(kiln_session_run(s, &in, &got))) {
      const float *w = want.data, *y = got.data, *x = in.data;
      int bad = 0;
      double worst = 0;
      for (int64_t i = 0; i < SWEEP_N; ++i) {
        const bool ok = isnan(w[i]) ? isnan(y[i])
                        : isinf(w[i]) ? y[i] == w[i]
                                      : fabs((double)y[i] - w[i]) <= 2e-6 + 4e-6 * fabs((double)w[i]);
        if (!ok && bad++ < 3)
          fprintf(stderr, "%s %s(%.9g) = %.9g, reference %.9g\n", g_target_name, op, x[i], y[i], w[i]);
        if (!isnan(w[i]) && !isinf(w[i]) && fabs((double)y[i] - w[i]) > worst) worst = fabs((double)y[i] - w[i]);
      }
      CHECK_MSG(bad == 0, "%s: %s: %d of %d values off the reference", g_target_name, op, bad, (int)SWEEP_N);
      printf("%s %s: max abs error %.3g over %d values\n", g_target_name, op, worst, (int)SWEEP_N);
    }
  }
  CHECK(s != NULL);
  kiln_array_free(al(), &in);
  kiln_array_free(al(), &want);
  kiln_array_free(al(), &got);
  kiln_session_destroy(s);
  kiln_module_release(m);
  kiln_graph_destroy(g);
}

int main(int argc, char** argv) {
  int rc = target_open(argc, argv);
  if (rc) return rc;
  test_sweep("Erf", 0, NULL, 17);
  test_sweep("Tanh", 0, NULL, 17);
  test_sweep("Sigmoid", 0, NULL, 17);
  test_sweep("Softplus", 0, NULL, 17);
  test_sweep("Silu", 0, NULL, 17);
  test_sweep("Gelu", 0, NULL, 20);
  kiln_attr_t tanh_approx = kiln_attr_make_string("approximate", "tanh");
  test_sweep("Gelu", 1, &tanh_approx, 20);
  test_reduce_middle();
  test_reduce_long_groups();
  test_big_grid();
  kiln_device_release(g_device);
  return kiln_test_finish();
}
