/* Plugin CPU kernels given as functions (kiln_custom_op_t.cpu_fn, custom-op
 * API version 2) on the CPU target, through the runtime as `kiln run` does:
 *   - the example's ScaledSwishFn with a LeakyRelu fused in as its epilogue
 *     (applied by kiln after the call) matches the reference executor (the
 *     plugin's reference kernel) on f32 and f16;
 *   - a function that fails at run time fails the run naming the node;
 *   - code that calls the function, loaded where the plugin registers the
 *     op without one (the example's _nofn build) or where no plugin has the
 *     op, is refused naming the op, the node and the plugin;
 *   - API version 1 descriptors still load and run (tests/plugins/bad_plugin.c
 *     BAD_V1: under ASan, reading past a version-1 descriptor is an error),
 *     and an op with both a CPU source and a function is refused.
 * The plugins' paths come from the environment (tests/plugin_tests.cmake);
 * the same on the GPU targets (the function as the CPU fallback) is in
 * tests/test_plugin_cpu_fn.py. */
#include <math.h>

#include "ir/ops/custom.h"
#include "kiln/custom_op.h"
#include "plugin_test_util.h"
#include "target_graph_util.h"

/* x[2,3,40] -> Cast(dt) -> domain/op(beta) -> LeakyRelu(0.2) -> Cast(f32) -> y, optimized (-O1). */
static kiln_graph_t* swish_graph(const char* domain, const char* op, kiln_dtype_t dt, float beta) {
  kiln_graph_t* g = graph_new();
  CHECK_OK(kiln_graph_set_opset(g, domain, 1));
  const int64_t dims[3] = {2, 3, 40};
  input(g, "x", KILN_DTYPE_F32, 3, dims);
  kiln_attr_t to = kiln_attr_make_int("to", dt == KILN_DTYPE_F16 ? 10 : 1); /* ONNX TensorProto codes */
  node1(g, "Cast", "cast_in", 1, (const char*[]){"x"}, "xc", 1, &to);
  kiln_attr_t b = kiln_attr_make_float("beta", beta);
  int32_t ni = -1;
  CHECK_OK(kiln_graph_add_node(g, op, "the_swish", 1, (const char*[]){"xc"}, 1, (const char*[]){"s"}, strcmp(op, "Old") ? 1 : 0,
                               &b, &ni));
  g->nodes[ni].domain = kiln_graph_strdup(g, domain);
  kiln_attr_t alpha = kiln_attr_make_float("alpha", 0.2f);
  node1(g, "LeakyRelu", "leaky", 1, (const char*[]){"s"}, "l", 1, &alpha);
  kiln_attr_t f32 = kiln_attr_make_int("to", 1);
  node1(g, "Cast", "cast_out", 1, (const char*[]){"l"}, "y", 1, &f32);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_OK(kiln_graph_prepare(g));
  CHECK_OK(kiln_graph_optimize(g, 1, NULL));
  return g;
}

static kiln_array_t x_input(void) {
  const int64_t dims[3] = {2, 3, 40};
  kiln_array_t x = arr(KILN_DTYPE_F32, 3, dims);
  for (int i = 0; i < 240; ++i) ((float*)x.data)[i] = 4.0f * sinf(0.37f * (float)i);
  return x;
}

/* The session's result against the reference executor's, within |tol|. */
static void agree(const kiln_graph_t* g, kiln_session_t* s, const kiln_array_t* x, float tol) {
  kiln_array_t want = {0}, got = {0};
  if (!CHECK_OK(kiln_ref_run(g, x, NULL, &want))) return;
  if (s && CHECK_OK(kiln_session_run(s, x, &got))) {
    CHECK(got.nbytes == want.nbytes);
    int negative = 0;
    for (int64_t i = 0; i < kiln_array_numel(&want) && got.nbytes == want.nbytes; ++i) {
      const float a = ((float*)want.data)[i], b = ((float*)got.data)[i];
      CHECK_MSG(fabsf(a - b) <= tol * (1.0f + fabsf(a)), "y[%lld]: %g vs reference %g", (long long)i, b, a);
      negative += b < 0;
    }
    CHECK(negative > 0); /* the LeakyRelu epilogue ran (swish alone dips only to -0.28) */
  }
  kiln_array_free(al(), &want);
  kiln_array_free(al(), &got);
}

static void test_fn_kernel(void) {
  kiln_plugin_unload_all();
  CHECK_OK(kiln_plugin_load(plugin("KILN_EXAMPLE_PLUGIN")));
  const kiln_custom_op_t* op = kiln_custom_op_find("com.kiln.example", "ScaledSwishFn");
  CHECK(op && op->cpu_fn && !op->cpu.source && op->api_version == KILN_CUSTOM_OP_API_VERSION);
  kiln_array_t x = x_input();
  for (int half = 0; half < 2; ++half) {
    kiln_graph_t* g = swish_graph("com.kiln.example", "ScaledSwishFn", half ? KILN_DTYPE_F16 : KILN_DTYPE_F32, 1.5f);
    int32_t plugin_nodes = 0;
    for (int32_t i = 0; i < g->n_nodes; ++i) {
      CHECK(strcmp(g->nodes[i].op_type, "LeakyRelu") != 0); /* fused as the epilogue */
      plugin_nodes += !strcmp(g->nodes[i].op_type, "ScaledSwishFn");
    }
    CHECK(plugin_nodes == 1);
    kiln_module_t* m = compile(g);
    kiln_session_t* s = session(m);
    agree(g, s, &x, half ? 2e-3f : 1e-5f);
    kiln_session_destroy(s);
    kiln_module_release(m);
    kiln_graph_destroy(g);
  }
  /* the function fails at run time (the example refuses a beta that is
   * not finite): the run fails naming the node */
  kiln_graph_t* g = swish_graph("com.kiln.example", "ScaledSwishFn", KILN_DTYPE_F32, INFINITY);
  kiln_module_t* m = compile(g);
  kiln_session_t* s = session(m);
  kiln_array_t y = {0};
  /* (the node fused with the LeakyRelu is named after both) */
  if (s) CHECK_ERROR(kiln_session_run(s, &x, &y), "node 'leaky__ScaledSwishFn'", "cpu_fn) failed");
  CHECK(y.data == NULL);
  kiln_session_destroy(s);
  kiln_module_release(m);
  kiln_graph_destroy(g);
  kiln_array_free(al(), &x);
}

/* Code compiled to call the function, loaded where it is missing. */
static void test_missing_fn(void) {
  kiln_plugin_unload_all();
  CHECK_OK(kiln_plugin_load(plugin("KILN_EXAMPLE_PLUGIN")));
  kiln_graph_t* g = swish_graph("com.kiln.example", "ScaledSwishFn", KILN_DTYPE_F32, 1.5f);
  kiln_module_t* m = compile(g);
  kiln_plugin_unload_all();
  const char* nofn = plugin("KILN_EXAMPLE_PLUGIN_NOFN");
  CHECK_OK(kiln_plugin_load(nofn));
  kiln_session_options_t so;
  kiln_session_options_default(&so);
  kiln_session_t* s = NULL;
  if (m)
    CHECK_ERROR(kiln_session_create(m, g_device, &so, &s), "com.kiln.example/ScaledSwishFn", nofn,
                "without a CPU function", "node 'leaky__ScaledSwishFn'");
  CHECK(s == NULL);
  kiln_plugin_unload_all();
  if (m) CHECK_ERROR(kiln_session_create(m, g_device, &so, &s), "no loaded plugin provides op", "ScaledSwishFn");
  kiln_module_release(m);
  kiln_graph_destroy(g);
}

static void test_api_versions(void) {
  kiln_plugin_unload_all();
  const char* both = plugin("KILN_BAD_PLUGIN_BOTH");
  CHECK_ERROR(kiln_plugin_load(both), both, "com.kiln.bad/Both", "both a cpu kernel source and a cpu_fn");
  CHECK(kiln_custom_op_count() == 0);
  CHECK_OK(kiln_plugin_load(plugin("KILN_BAD_PLUGIN_V1")));
  const kiln_custom_op_t* op = kiln_custom_op_find("com.kiln.bad", "Old");
  CHECK(op && op->api_version == 1 && op->cpu.source && !op->cpu_fn && !op->cpu_user_data);
  /* Old is the identity, without epilogue: the LeakyRelu stays a node */
  kiln_graph_t* g = swish_graph("com.kiln.bad", "Old", KILN_DTYPE_F32, 0.0f);
  kiln_module_t* m = compile(g);
  kiln_session_t* s = session(m);
  kiln_array_t x = x_input();
  agree(g, s, &x, 0.0f);
  kiln_array_free(al(), &x);
  kiln_session_destroy(s);
  kiln_module_release(m);
  kiln_graph_destroy(g);
}

int main(int argc, char** argv) {
  int rc = target_open(argc, argv);
  if (rc) return rc;
  RUN(test_fn_kernel);
  RUN(test_missing_fn);
  RUN(test_api_versions);
  kiln_plugin_unload_all();
  kiln_device_release(g_device);
  return kiln_test_finish();
}
