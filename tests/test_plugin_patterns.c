/* Plugin patterns given as graphs (kiln_custom_pattern_t.inputs, custom-op
 * API version 2), through the graph passes and the reference executor:
 *   - a residual tail Conv -> BatchNormalization -> Add(., skip) -> Relu,
 *     the Add reading two graph tensors, in either operand order, becomes
 *     the example's FusedConvBNAddReLU and computes what the nodes did;
 *   - a fan-in, Mul(x, x) -> Add(., b), becomes SquarePlus (the bad-ops
 *     test plugin) only where both Mul inputs are one tensor;
 *   - an intermediate read outside the pattern, or a graph output, keeps
 *     the nodes;
 *   - a malformed graph pattern refuses its plugin (tests/plugins/bad_plugin.c
 *     BAD_PATTERN), naming the op and the reason.
 * The plugins' paths come from the environment (tests/plugin_tests.cmake);
 * the residual model on every target against onnxruntime is in
 * tests/test_plugin_api2.py. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/ref_exec.h"
#include "ir/passes.h"
#include "kiln/custom_op.h"
#include "plugin_test_util.h"
#include "testing.h"

static kiln_allocator_t al(void) { return kiln_allocator_system(); }

static void add_const(kiln_graph_t* g, const char* name, int rank, const int64_t* dims, float base) {
  kiln_array_t a = {0};
  kiln_shape_t s = kiln_shape_make(rank, dims);
  CHECK_OK(kiln_array_alloc(al(), KILN_DTYPE_F32, &s, &a));
  for (int64_t j = 0; j < kiln_array_numel(&a); ++j) ((float*)a.data)[j] = base + 0.5f * sinf(1.7f * (float)j + base);
  CHECK_OK(kiln_graph_add_initializer(g, name, &a, NULL));
}

static void node(kiln_graph_t* g, const char* op, const char* name, int n_in, const char* const* in, const char* out,
                 int n_attrs, const kiln_attr_t* attrs) {
  CHECK_OK(kiln_graph_add_node(g, op, name, n_in, in, 1, (const char*[]){out}, n_attrs, attrs, NULL));
}

/* x[1,2,5,5], skip[1,3,5,5] -> Conv -> BN -> Add(bn, skip) (or (skip, bn)) -> Relu -> y;
 * |bn_out|: the BN's output is a graph output too. */
static kiln_graph_t* residual(bool skip_first, bool bn_out) {
  kiln_graph_t* g = NULL;
  CHECK_OK(kiln_graph_create(al(), &g));
  CHECK_OK(kiln_graph_set_opset(g, "", 17));
  const int64_t xd[4] = {1, 2, 5, 5}, sd[4] = {1, 3, 5, 5}, wd[4] = {3, 2, 3, 3}, cd[1] = {3};
  kiln_shape_t xs = kiln_shape_make(4, xd), ss = kiln_shape_make(4, sd);
  CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &xs, NULL));
  CHECK_OK(kiln_graph_add_input(g, "skip", KILN_DTYPE_F32, &ss, NULL));
  add_const(g, "w", 4, wd, 0.0f);
  add_const(g, "scale", 1, cd, 1.0f);
  add_const(g, "bias", 1, cd, 0.1f);
  add_const(g, "mean", 1, cd, -0.2f);
  add_const(g, "var", 1, cd, 1.5f);
  const int64_t pads[4] = {1, 1, 1, 1};
  kiln_attr_t pa = kiln_attr_make_ints("pads", 4, pads);
  node(g, "Conv", "conv", 2, (const char*[]){"x", "w"}, "c", 1, &pa);
  kiln_attr_t eps = kiln_attr_make_float("epsilon", 1e-3f);
  node(g, "BatchNormalization", "bn", 5, (const char*[]){"c", "scale", "bias", "mean", "var"}, "b", 1, &eps);
  node(g, "Add", "add", 2, skip_first ? (const char*[]){"skip", "b"} : (const char*[]){"b", "skip"}, "a", 0, NULL);
  node(g, "Relu", "relu", 1, (const char*[]){"a"}, "y", 0, NULL);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  if (bn_out) CHECK_OK(kiln_graph_add_output(g, "b"));
  CHECK_OK(kiln_graph_prepare(g));
  return g;
}

/* x, b [2,3] -> Mul(x, x or b) -> Add(., b) -> y */
static kiln_graph_t* square_plus(bool same) {
  kiln_graph_t* g = NULL;
  CHECK_OK(kiln_graph_create(al(), &g));
  CHECK_OK(kiln_graph_set_opset(g, "", 17));
  const int64_t d[2] = {2, 3};
  kiln_shape_t s = kiln_shape_make(2, d);
  CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &s, NULL));
  CHECK_OK(kiln_graph_add_input(g, "b", KILN_DTYPE_F32, &s, NULL));
  node(g, "Mul", "mul", 2, (const char*[]){"x", same ? "x" : "b"}, "m", 0, NULL);
  node(g, "Add", "add", 2, (const char*[]){"m", "b"}, "y", 0, NULL);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_OK(kiln_graph_prepare(g));
  return g;
}

static int count_op(const kiln_graph_t* g, const char* op) {
  int n = 0;
  for (int32_t i = 0; i < g->n_nodes; ++i) n += !strcmp(g->nodes[i].op_type, op);
  return n;
}

static kiln_array_t input(int rank, const int64_t* dims, float phase) {
  kiln_array_t a = {0};
  kiln_shape_t s = kiln_shape_make(rank, dims);
  CHECK_OK(kiln_array_alloc(al(), KILN_DTYPE_F32, &s, &a));
  for (int64_t j = 0; j < kiln_array_numel(&a); ++j) ((float*)a.data)[j] = sinf(0.9f * (float)j + phase);
  return a;
}

/* |plain| and its optimized copy |fused| give the same output 0. */
static void same_result(const kiln_graph_t* plain, const kiln_graph_t* fused, const kiln_array_t* in) {
  kiln_array_t y0[2] = {{0}}, y1[2] = {{0}};
  kiln_ref_options_t o;
  kiln_ref_options_default(&o);
  CHECK_OK(kiln_ref_run(plain, in, &o, y0));
  CHECK_OK(kiln_ref_run(fused, in, &o, y1));
  int positive = 0;
  for (int64_t i = 0; i < kiln_array_numel(&y0[0]) && y0[0].nbytes == y1[0].nbytes; ++i) {
    CHECK_NEAR(((float*)y0[0].data)[i], ((float*)y1[0].data)[i], 1e-5);
    positive += ((float*)y0[0].data)[i] > 0;
  }
  CHECK(positive > 0);
  for (int k = 0; k < plain->n_outputs; ++k) {
    kiln_array_free(al(), &y0[k]);
    kiln_array_free(al(), &y1[k]);
  }
}

static void test_residual(void) {
  const int64_t xd[4] = {1, 2, 5, 5}, sd[4] = {1, 3, 5, 5};
  kiln_array_t in[2] = {input(4, xd, 0.0f), input(4, sd, 1.0f)};
  for (int skip_first = 0; skip_first < 2; ++skip_first) {
    kiln_graph_t* plain = residual(skip_first, false);
    kiln_graph_t* fused = residual(skip_first, false);
    CHECK_OK(kiln_graph_optimize(fused, 1, NULL));
    CHECK_MSG(fused->n_nodes == 1 && count_op(fused, "FusedConvBNAddReLU") == 1, "skip_first %d: %d nodes",
              skip_first, (int)fused->n_nodes);
    if (fused->n_nodes == 1) {
      const kiln_node_t* n = &fused->nodes[0];
      CHECK(n->n_inputs == 8 && !strcmp(fused->tensors[n->inputs[7]].name, "skip") &&
            !strcmp(fused->tensors[n->inputs[0]].name, "x"));
    }
    same_result(plain, fused, in);
    kiln_graph_destroy(plain);
    kiln_graph_destroy(fused);
  }
  /* the BN's output is a graph output: the nodes stay (the Conv -> BN
   * chain is no pattern of the example's) */
  kiln_graph_t* kept = residual(false, true);
  CHECK_OK(kiln_graph_optimize(kept, 1, NULL));
  CHECK(count_op(kept, "FusedConvBNAddReLU") == 0 && count_op(kept, "Relu") == 1);
  kiln_graph_destroy(kept);
  kiln_array_free(al(), &in[0]);
  kiln_array_free(al(), &in[1]);
}

static void test_fan_in(void) {
  const int64_t d[2] = {2, 3};
  kiln_array_t in[2] = {input(2, d, 0.3f), input(2, d, 2.0f)};
  kiln_graph_t* plain = square_plus(true);
  kiln_graph_t* fused = square_plus(true);
  CHECK_OK(kiln_graph_optimize(fused, 1, NULL));
  CHECK_MSG(fused->n_nodes == 1 && count_op(fused, "SquarePlus") == 1, "%d nodes", (int)fused->n_nodes);
  same_result(plain, fused, in);
  kiln_graph_destroy(plain);
  kiln_graph_destroy(fused);
  /* Mul(x, b): the slot bound twice sees two tensors, no match */
  kiln_graph_t* kept = square_plus(false);
  CHECK_OK(kiln_graph_optimize(kept, 1, NULL));
  CHECK(count_op(kept, "SquarePlus") == 0 && count_op(kept, "Mul") == 1);
  kiln_graph_destroy(kept);
  kiln_array_free(al(), &in[0]);
  kiln_array_free(al(), &in[1]);
}

static void test_bad_pattern(void) {
  const char* bad = plugin("KILN_BAD_PLUGIN_PATTERN");
  CHECK_ERROR(kiln_plugin_load(bad), bad, "com.kiln.bad/Lonely", "is read by no later node", "nothing of it");
  CHECK(kiln_custom_op_find("com.kiln.bad", "Lonely") == NULL);
}

int main(void) {
  kiln_plugin_unload_all();
  CHECK_OK(kiln_plugin_load(plugin("KILN_EXAMPLE_PLUGIN")));
  CHECK_OK(kiln_plugin_load(plugin("KILN_BAD_PLUGIN_OPS")));
  RUN(test_residual);
  RUN(test_fan_in);
  RUN(test_bad_pattern);
  kiln_plugin_unload_all();
  return kiln_test_finish();
}
