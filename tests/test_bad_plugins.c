/* Custom-op plugins (include/kiln/custom_op.h): loading and refusing
 * plugins (no entry point, another API version, a duplicate op, an op that
 * fails its checks after a good one: nothing registered), inference
 * through the plugin's shape function (failing, nonsense, undeclared
 * attributes and dtypes: errors naming plugin, op and node), the reference
 * executor running the plugin's reference kernel, and the pattern rewrite
 * Conv -> BatchNormalization -> Relu into the example's FusedConvBNReLU.
 * The plugins' paths come from the environment (tests/plugin_tests.cmake). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/ref_exec.h"
#include "ir/ops/custom.h"
#include "ir/passes.h"
#include "kiln/custom_op.h"
#include "plugin_test_util.h"
#include "testing.h"

static void test_refused_plugins(void) {
  kiln_plugin_unload_all();
  const char* no_entry = plugin("KILN_BAD_PLUGIN_NO_ENTRY");
  CHECK_ERROR(kiln_plugin_load(no_entry), no_entry, "no entry point 'kiln_plugin_register'");
  const char* version = plugin("KILN_BAD_PLUGIN_VERSION");
  CHECK_ERROR(kiln_plugin_load(version), version, "com.kiln.bad/Future", "API version 99", "nothing of it");
  const char* half = plugin("KILN_BAD_PLUGIN_HALF");
  CHECK_ERROR(kiln_plugin_load(half), half, "com.kiln.bad/GoodTwo", "no reference kernel");
  CHECK(kiln_custom_op_find("com.kiln.bad", "GoodOne") == NULL); /* not half-registered */
  CHECK(kiln_custom_op_count() == 0);
  CHECK_ERROR(kiln_plugin_load("/nonexistent/libnothing.so"), "/nonexistent/libnothing.so", "no such file");
  CHECK_ERROR(kiln_plugin_load(NULL), "empty path");

  const char* example = plugin("KILN_EXAMPLE_PLUGIN");
  CHECK_OK(kiln_plugin_load(example));
  CHECK_OK(kiln_plugin_load(example)); /* the same file again: nothing new */
  CHECK(kiln_custom_op_count() == 4);
  CHECK(kiln_custom_pattern_count() == 3);
  CHECK(kiln_custom_op_find("com.kiln.example", "FusedConvBNReLU") != NULL);
  CHECK(strcmp(kiln_custom_op_plugin(kiln_custom_op_find("com.kiln.example", "ScaledSwish")), example) == 0);
  const char* dup = plugin("KILN_BAD_PLUGIN_DUP");
  CHECK_ERROR(kiln_plugin_load(dup), dup, "com.kiln.example/ScaledSwish", "duplicate op name", example);
  CHECK(kiln_custom_op_count() == 4);
}

/* x[1,2,2,2] -> one node |op| (domain com.kiln.*) -> y */
static kiln_graph_t* one_node(const char* domain, const char* op, kiln_dtype_t dt, int32_t n_attrs,
                              const kiln_attr_t* attrs) {
  kiln_graph_t* g = NULL;
  CHECK_OK(kiln_graph_create(kiln_allocator_system(), &g));
  CHECK_OK(kiln_graph_set_opset(g, "", 17));
  CHECK_OK(kiln_graph_set_opset(g, domain, 1));
  const int64_t dims[4] = {1, 2, 2, 2};
  kiln_shape_t s = kiln_shape_make(4, dims);
  CHECK_OK(kiln_graph_add_input(g, "x", dt, &s, NULL));
  const char* in[1] = {"x"};
  const char* out[1] = {"y"};
  int32_t ni;
  CHECK_OK(kiln_graph_add_node(g, op, "the_node", 1, in, 1, out, n_attrs, attrs, &ni));
  g->nodes[ni].domain = kiln_graph_strdup(g, domain);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  return g;
}

static void test_inference_errors(void) {
  const char* ops = plugin("KILN_BAD_PLUGIN_OPS");
  CHECK_OK(kiln_plugin_load(ops));
  kiln_graph_t* g = one_node("com.kiln.bad", "FailShape", KILN_DTYPE_F32, 0, NULL);
  CHECK_ERROR(kiln_graph_prepare(g), "com.kiln.bad/FailShape", ops, "the_node", "always fails");
  kiln_graph_destroy(g);
  g = one_node("com.kiln.bad", "Nonsense", KILN_DTYPE_F32, 0, NULL);
  CHECK_ERROR(kiln_graph_prepare(g), "com.kiln.bad/Nonsense", "nonsense", "rank");
  kiln_graph_destroy(g);
  kiln_attr_t bad = kiln_attr_make_int("alpha", 3);
  g = one_node("com.kiln.example", "ScaledSwish", KILN_DTYPE_F32, 1, &bad);
  CHECK_ERROR(kiln_graph_prepare(g), "ScaledSwish", "'alpha' is not declared");
  kiln_graph_destroy(g);
  kiln_attr_t beta_int = kiln_attr_make_int("beta", 2);
  g = one_node("com.kiln.example", "ScaledSwish", KILN_DTYPE_F32, 1, &beta_int);
  CHECK_ERROR(kiln_graph_prepare(g), "'beta' has the wrong type");
  kiln_graph_destroy(g);
  g = one_node("com.kiln.example", "ScaledSwish", KILN_DTYPE_I8, 0, NULL);
  CHECK_ERROR(kiln_graph_prepare(g), "input 'X' is i8", "does not declare");
  kiln_graph_destroy(g);
  /* outside the op's opset range: an unsupported op, as any unknown one */
  g = one_node("com.kiln.example", "ScaledSwish", KILN_DTYPE_F32, 0, NULL);
  CHECK_OK(kiln_graph_set_opset(g, "com.kiln.example", 0));
  CHECK_ERROR(kiln_graph_prepare(g), "unsupported op", "ScaledSwish");
  kiln_graph_destroy(g);
}

/* The reference executor runs the plugin's reference kernel. */
static void test_reference_kernel(void) {
  kiln_attr_t beta = kiln_attr_make_float("beta", 1.5f);
  kiln_graph_t* g = one_node("com.kiln.example", "ScaledSwish", KILN_DTYPE_F32, 1, &beta);
  CHECK_OK(kiln_graph_prepare(g));
  CHECK(g->tensors[g->outputs[0]].shape.rank == 4);
  kiln_array_t x = {0}, y = {0};
  CHECK_OK(kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_F32, &(kiln_shape_t){4, {1, 2, 2, 2}}, &x));
  float* xv = x.data;
  for (int i = 0; i < 8; ++i) xv[i] = (float)i - 3.5f;
  kiln_ref_options_t o;
  kiln_ref_options_default(&o);
  CHECK_OK(kiln_ref_run(g, &x, &o, &y));
  const float* yv = y.data;
  for (int i = 0; i < 8; ++i) CHECK_NEAR(yv[i], xv[i] / (1.0f + expf(-1.5f * xv[i])), 1e-6);
  kiln_array_free(kiln_allocator_system(), &x);
  kiln_array_free(kiln_allocator_system(), &y);
  kiln_graph_destroy(g);
}

/* Conv -> BatchNormalization -> Relu, with |auto_pad| on the Conv or not;
 * |one_d|: a 1-D Conv (the example's kernel is 2-D only). */
static kiln_graph_t* cbr_graph_ex(bool auto_pad, bool one_d) {
  kiln_graph_t* g = NULL;
  CHECK_OK(kiln_graph_create(kiln_allocator_system(), &g));
  CHECK_OK(kiln_graph_set_opset(g, "", 17));
  const int64_t xd[4] = {1, 2, 5, 5}, wd[4] = {3, 2, 3, 3}, cd[1] = {3};
  kiln_shape_t xs = kiln_shape_make(one_d ? 3 : 4, xd), ws = kiln_shape_make(one_d ? 3 : 4, wd),
               cs = kiln_shape_make(1, cd);
  CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &xs, NULL));
  const char* names[5] = {"w", "scale", "bias", "mean", "var"};
  for (int i = 0; i < 5; ++i) {
    kiln_array_t a = {0};
    CHECK_OK(kiln_array_alloc(g->allocator, KILN_DTYPE_F32, i ? &cs : &ws, &a));
    float* v = a.data;
    for (int64_t j = 0; j < kiln_array_numel(&a); ++j) v[j] = i == 4 ? 0.5f + 0.1f * (float)j : 0.5f * sinf(1.7f * (float)j + (float)i);
    CHECK_OK(kiln_graph_add_initializer(g, names[i], &a, NULL));
  }
  const int64_t pads[4] = {1, 1, 1, 1};
  kiln_attr_t ca[2] = {kiln_attr_make_ints("pads", one_d ? 2 : 4, pads), kiln_attr_make_string("auto_pad", "NOTSET")};
  const char* ci[2] = {"x", "w"};
  const char* co[1] = {"c"};
  CHECK_OK(kiln_graph_add_node(g, "Conv", "conv", 2, ci, 1, co, auto_pad ? 2 : 1, ca, NULL));
  const char* bi[5] = {"c", "scale", "bias", "mean", "var"};
  const char* bo[1] = {"b"};
  kiln_attr_t eps = kiln_attr_make_float("epsilon", 1e-3f);
  CHECK_OK(kiln_graph_add_node(g, "BatchNormalization", "bn", 5, bi, 1, bo, 1, &eps, NULL));
  const char* ri[1] = {"b"};
  const char* ro[1] = {"y"};
  CHECK_OK(kiln_graph_add_node(g, "Relu", "relu", 1, ri, 1, ro, 0, NULL, NULL));
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_OK(kiln_graph_prepare(g));
  return g;
}

static kiln_graph_t* cbr_graph(bool auto_pad) { return cbr_graph_ex(auto_pad, false); }

static void run_ref(const kiln_graph_t* g, const kiln_array_t* x, kiln_array_t* y) {
  kiln_ref_options_t o;
  kiln_ref_options_default(&o);
  CHECK_OK(kiln_ref_run(g, x, &o, y));
}

static void test_pattern(void) {
  kiln_graph_t* plain = cbr_graph(false);
  kiln_graph_t* fused = cbr_graph(false);
  CHECK_OK(kiln_graph_optimize(fused, 1, NULL));
  CHECK_MSG(fused->n_nodes == 1 && !strcmp(fused->nodes[0].op_type, "FusedConvBNReLU") &&
                !strcmp(fused->nodes[0].domain, "com.kiln.example"),
            "%d nodes, first %s", (int)fused->n_nodes, fused->nodes[0].op_type);
  kiln_array_t x = {0}, y0 = {0}, y1 = {0};
  CHECK_OK(kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_F32, &(kiln_shape_t){4, {1, 2, 5, 5}}, &x));
  float* xv = x.data;
  for (int i = 0; i < 50; ++i) xv[i] = sinf((float)i);
  run_ref(plain, &x, &y0);
  run_ref(fused, &x, &y1);
  const float *a = y0.data, *b = y1.data;
  int positive = 0;
  for (int64_t i = 0; i < kiln_array_numel(&y0); ++i) {
    CHECK_NEAR(a[i], b[i], 1e-5);
    positive += a[i] > 0;
  }
  CHECK(positive > 0 && positive < kiln_array_numel(&y0)); /* the Relu did something */
  kiln_array_free(kiln_allocator_system(), &x);
  kiln_array_free(kiln_allocator_system(), &y0);
  kiln_array_free(kiln_allocator_system(), &y1);
  kiln_graph_destroy(plain);
  kiln_graph_destroy(fused);
  /* an attribute the op does not declare (auto_pad) leaves the chain alone */
  kiln_graph_t* kept = cbr_graph(true);
  CHECK_OK(kiln_graph_optimize(kept, 1, NULL));
  for (int32_t i = 0; i < kept->n_nodes; ++i) CHECK(strcmp(kept->nodes[i].op_type, "FusedConvBNReLU") != 0);
  kiln_graph_destroy(kept);
  /* a chain the op's shape function refuses (1-D) is left alone, not an error */
  kept = cbr_graph_ex(false, true);
  CHECK_OK(kiln_graph_optimize(kept, 1, NULL));
  for (int32_t i = 0; i < kept->n_nodes; ++i) CHECK(strcmp(kept->nodes[i].op_type, "FusedConvBNReLU") != 0);
  kiln_graph_destroy(kept);
}

/* A Tanh after ScaledSwish (an op that declares epilogue) is fused into
 * it: one node left, the reference applies the Tanh after the plugin's
 * reference kernel, as the unfused graph does. */
static void test_epilogue(void) {
  kiln_graph_t* gs[2];
  kiln_array_t x = {0}, y[2] = {{0}, {0}};
  CHECK_OK(kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_F32, &(kiln_shape_t){4, {1, 2, 2, 2}}, &x));
  for (int i = 0; i < 8; ++i) ((float*)x.data)[i] = 0.7f * (float)i - 2.5f;
  for (int k = 0; k < 2; ++k) {
    kiln_graph_t* g = gs[k] = one_node("com.kiln.example", "ScaledSwish", KILN_DTYPE_F32, 0, NULL);
    /* y -> Tanh -> z, z the output */
    g->tensors[kiln_graph_find_tensor(g, "y")].flags &= ~KILN_TENSOR_OUTPUT;
    g->n_outputs = 0;
    const char* in[1] = {"y"};
    const char* out[1] = {"z"};
    CHECK_OK(kiln_graph_add_node(g, "Tanh", "tanh", 1, in, 1, out, 0, NULL, NULL));
    CHECK_OK(kiln_graph_add_output(g, "z"));
    CHECK_OK(kiln_graph_prepare(g));
    if (k) {
      CHECK_OK(kiln_graph_optimize(g, 1, NULL));
      float alpha;
      CHECK_MSG(g->n_nodes == 1 && kiln_custom_node_epilogue(&g->nodes[0], &alpha) &&
                    !strcmp(kiln_custom_node_epilogue(&g->nodes[0], &alpha), "Tanh"),
                "%d nodes", (int)g->n_nodes);
    }
    run_ref(g, &x, &y[k]);
  }
  for (int i = 0; i < 8; ++i) CHECK_NEAR(((float*)y[0].data)[i], ((float*)y[1].data)[i], 1e-6);
  for (int k = 0; k < 2; ++k) {
    kiln_array_free(kiln_allocator_system(), &y[k]);
    kiln_graph_destroy(gs[k]);
  }
  kiln_array_free(kiln_allocator_system(), &x);
}

/* Unloading everything and loading again gives working ops (the graph
 * IR's cached schemas follow the registry). */
static void test_unload_reload(void) {
  kiln_plugin_unload_all();
  CHECK(kiln_custom_op_count() == 0 && kiln_custom_pattern_count() == 0);
  kiln_graph_t* g = one_node("com.kiln.example", "ScaledSwish", KILN_DTYPE_F32, 0, NULL);
  CHECK_ERROR(kiln_graph_prepare(g), "unsupported op", "ScaledSwish");
  kiln_graph_destroy(g);
  CHECK_OK(kiln_plugin_load(plugin("KILN_EXAMPLE_PLUGIN")));
  g = one_node("com.kiln.example", "ScaledSwish", KILN_DTYPE_F32, 0, NULL);
  CHECK_OK(kiln_graph_prepare(g));
  kiln_graph_destroy(g);
}

int main(void) {
  RUN(test_refused_plugins);
  RUN(test_inference_errors);
  RUN(test_reference_kernel);
  RUN(test_pattern);
  RUN(test_epilogue);
  RUN(test_unload_reload);
  kiln_plugin_unload_all();
  return kiln_test_finish();
}
