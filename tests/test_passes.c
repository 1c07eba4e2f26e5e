/* Graph passes (ir/passes.h): each pass on small hand-built graphs (structure
 * before/after, results against the unoptimised graph on random inputs),
 * random op chains through the whole pipeline, and the exported models when
 * present (KILN_MODELS_DIR, default ../models from the test's directory). */
#include <stdint.h>

#include "frontend/onnx.h"
#include "ir/passes.h"
#include "compiler/compare.h"
#include "kiln/npy.h"
#include "compiler/ref_exec.h"
#include "testing.h"

#define RTOL 1e-4
#define ATOL 1e-5

static kiln_allocator_t A(void) { return kiln_allocator_system(); }

/* ---- building -------------------------------------------------------- */

static uint64_t rng_state = 1;
static uint32_t rnd(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng_state >> 33);
}
static float frand(void) { return (float)(rnd() % 20001) / 10000.f - 1.f; } /* [-1,1] */

static kiln_graph_t* new_graph(void) {
  kiln_graph_t* g = NULL;
  CHECK_OK(kiln_graph_create(A(), &g));
  CHECK_OK(kiln_graph_set_opset(g, "", 13));
  return g;
}

static void input(kiln_graph_t* g, const char* name, int32_t rank, const int64_t* dims) {
  kiln_shape_t s = kiln_shape_make(rank, dims);
  CHECK_OK(kiln_graph_add_input(g, name, KILN_DTYPE_F32, &s, NULL));
}

/* f32 constant; |v| NULL: random values in [lo, lo + 1]. */
static void constf(kiln_graph_t* g, const char* name, int32_t rank, const int64_t* dims,
                   const float* v, float lo) {
  kiln_shape_t s = kiln_shape_make(rank, dims);
  kiln_array_t a;
  CHECK_OK(kiln_array_alloc(A(), KILN_DTYPE_F32, &s, &a));
  float* f = a.data;
  for (int64_t i = 0; i < kiln_shape_count(&s); ++i) f[i] = v ? v[i] : lo + (frand() + 1.f) / 2;
  CHECK_OK(kiln_graph_add_initializer(g, name, &a, NULL));
}

static void scalar(kiln_graph_t* g, const char* name, float v) { constf(g, name, 0, NULL, &v, 0); }

static void consti(kiln_graph_t* g, const char* name, int32_t n, const int64_t* v) {
  kiln_shape_t s = kiln_shape_make(1, (int64_t[]){n});
  kiln_array_t a;
  CHECK_OK(kiln_array_alloc(A(), KILN_DTYPE_I64, &s, &a));
  memcpy(a.data, v, sizeof(int64_t) * (size_t)n);
  CHECK_OK(kiln_graph_add_initializer(g, name, &a, NULL));
}

static void node(kiln_graph_t* g, const char* op, int32_t n_in, const char* const* in,
                 const char* out, int32_t n_attrs, const kiln_attr_t* attrs) {
  CHECK_OK(kiln_graph_add_node(g, op, "", n_in, in, 1, &out, n_attrs, attrs, NULL));
}
#define NODE(g, op, out, ...) \
  node(g, op, sizeof((const char*[]){__VA_ARGS__}) / sizeof(char*), (const char*[]){__VA_ARGS__}, out, 0, NULL)

static int count_op(const kiln_graph_t* g, const char* op) {
  int k = 0;
  for (int32_t i = 0; i < g->n_nodes; ++i) k += strcmp(g->nodes[i].op_type, op) == 0;
  return k;
}

/* ---- running and comparing ------------------------------------------ */

typedef void (*build_fn)(kiln_graph_t* g);

/* Random f32 inputs for |g|'s (static) inputs, seeded. */
static void make_inputs(const kiln_graph_t* g, kiln_array_t* in, uint64_t seed) {
  rng_state = seed * 7919 + 3;
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    const kiln_tensor_t* t = &g->tensors[g->inputs[i]];
    CHECK_OK(kiln_array_alloc(A(), KILN_DTYPE_F32, &t->shape, &in[i]));
    float* f = in[i].data;
    for (int64_t k = 0; k < kiln_array_numel(&in[i]); ++k) f[k] = 3.f * frand();
  }
}

/* Runs both graphs on the same inputs and compares every output. */
static void compare_graphs(const kiln_graph_t* ref, const kiln_graph_t* opt, const kiln_array_t* in,
                           double rtol, double atol, const char* what) {
  kiln_ref_options_t o;
  kiln_ref_options_default(&o);
  kiln_array_t want[8] = {{0}}, got[8] = {{0}};
  CHECK(ref->n_outputs == opt->n_outputs && ref->n_outputs <= 8);
  if (ref->n_outputs != opt->n_outputs || ref->n_outputs > 8) return;
  for (int32_t i = 0; i < ref->n_outputs; ++i)
    CHECK_MSG(strcmp(ref->tensors[ref->outputs[i]].name, opt->tensors[opt->outputs[i]].name) == 0,
              "%s: output %d renamed", what, i);
  if (!CHECK_OK(kiln_ref_run(ref, in, &o, want))) return;
  if (CHECK_OK(kiln_ref_run(opt, in, &o, got))) {
    for (int32_t i = 0; i < ref->n_outputs; ++i) {
      kiln_compare_result_t r;
      kiln_compare(&got[i], &want[i], rtol, atol, &r);
      CHECK_MSG(r.ok, "%s: output %d: %s", what, i, r.message);
    }
  }
  for (int32_t i = 0; i < ref->n_outputs; ++i) {
    kiln_array_free(A(), &want[i]);
    kiln_array_free(A(), &got[i]);
  }
}

/* Builds the graph twice, runs pass |name| (NULL: the whole pipeline) on one
 * and compares results. Returns the optimised graph (caller destroys) and
 * the pass's rewrite count. */
static kiln_graph_t* check_pass(build_fn build, const char* name, int* rewrites) {
  kiln_graph_t* ref = new_graph();
  kiln_graph_t* opt = new_graph();
  rng_state = 12345; /* both builds draw the same constants */
  build(ref);
  rng_state = 12345;
  build(opt);
  CHECK_OK(kiln_graph_prepare(ref));
  CHECK_OK(kiln_graph_prepare(opt));
  kiln_pass_stats_t st = {opt->n_nodes, opt->n_nodes, 0};
  if (name) {
    const kiln_graph_pass_t* p = kiln_graph_pass_find(name);
    CHECK(p != NULL);
    if (p) CHECK_OK(p->fn(opt, &st));
  } else {
    CHECK_OK(kiln_graph_optimize(opt, 2, NULL));
  }
  CHECK_OK(kiln_graph_verify(opt));
  if (rewrites) *rewrites = st.rewrites;
  for (uint64_t seed = 0; seed < 2; ++seed) {
    kiln_array_t in[8] = {{0}};
    make_inputs(ref, in, seed);
    compare_graphs(ref, opt, in, RTOL, ATOL, name ? name : "pipeline");
    for (int32_t i = 0; i < ref->n_inputs; ++i) kiln_array_free(A(), &in[i]);
  }
  kiln_graph_destroy(ref);
  return opt;
}

/* ---- pass manager ---------------------------------------------------- */

static void b_small(kiln_graph_t* g) {
  input(g, "x", 2, (int64_t[]){2, 3});
  NODE(g, "Identity", "a", "x");
  NODE(g, "Relu", "y", "a");
  NODE(g, "Sigmoid", "unused", "x");
  CHECK_OK(kiln_graph_add_output(g, "y"));
}

static void test_manager(void) {
  static const char* const names[] = {"plugin-patterns", "einsum-to-matmul", "remove-noops", "fold-qdq",
                                      "fold-constants", "inline-const-if", "fold-batchnorm",
                                      "fold-reshape-chains", "recognize-patterns", "cse", "dce"};
  CHECK(kiln_graph_pass_count == 11);
  for (size_t i = 0; i < 11; ++i) {
    CHECK(kiln_graph_pass_find(names[i]) == &kiln_graph_passes[i]);
  }
  CHECK(kiln_graph_pass_find("no-such-pass") == NULL);
  CHECK(kiln_graph_pass_find(NULL) == NULL);
  kiln_graph_t* g = new_graph();
  b_small(g);
  CHECK_OK(kiln_graph_prepare(g));
  CHECK_OK(kiln_graph_optimize(g, 0, NULL)); /* -O0: nothing */
  CHECK(g->n_nodes == 3);
  char buf[4096] = {0};
  FILE* log = fmemopen(buf, sizeof buf, "w");
  CHECK_OK(kiln_graph_optimize(g, 1, log));
  fclose(log);
  CHECK(g->n_nodes == 1 && count_op(g, "Relu") == 1);
  CHECK_MSG(strstr(buf, "pass remove-noops") && strstr(buf, "pass dce"), "log: %s", buf);
  kiln_graph_destroy(g);

  /* A target's skip list (kiln_target_t.skip_graph_passes): the named
   * passes do not run, the others do. */
  g = new_graph();
  b_small(g);
  CHECK_OK(kiln_graph_prepare(g));
  static const char* const skip[] = {"remove-noops", NULL};
  memset(buf, 0, sizeof buf);
  log = fmemopen(buf, sizeof buf, "w");
  CHECK_OK(kiln_graph_optimize_except(g, 1, skip, log));
  fclose(log);
  CHECK(g->n_nodes == 2 && count_op(g, "Identity") == 1 && count_op(g, "Sigmoid") == 0);
  CHECK_MSG(!strstr(buf, "pass remove-noops") && strstr(buf, "pass dce"), "log: %s", buf);
  kiln_graph_destroy(g);

  /* kiln_graph_remove_nodes: compacts and fixes producers. */
  g = new_graph();
  b_small(g);
  CHECK_OK(kiln_graph_prepare(g));
  bool dead[3] = {false, false, false};
  for (int32_t i = 0; i < 3; ++i) dead[i] = strcmp(g->nodes[i].op_type, "Sigmoid") == 0;
  CHECK_OK(kiln_graph_remove_nodes(g, dead));
  CHECK(g->n_nodes == 2 && count_op(g, "Sigmoid") == 0);
  CHECK(g->tensors[kiln_graph_find_tensor(g, "unused")].producer == -1);
  int32_t y = kiln_graph_find_tensor(g, "y");
  CHECK(g->tensors[y].producer >= 0 && strcmp(g->nodes[g->tensors[y].producer].op_type, "Relu") == 0);
  /* Removing the producer of a used tensor leaves an undefined input. */
  bool dead2[2];
  for (int32_t i = 0; i < 2; ++i) dead2[i] = strcmp(g->nodes[i].op_type, "Identity") == 0;
  CHECK_ERR(kiln_graph_remove_nodes(g, dead2), KILN_INVALID_ARGUMENT, "does not exist");
  kiln_graph_destroy(g);
}

/* ---- remove-noops ---------------------------------------------------- */

static void b_noops(kiln_graph_t* g) {
  input(g, "x", 2, (int64_t[]){4, 6});
  consti(g, "shape", 2, (int64_t[]){4, 6});
  NODE(g, "Identity", "a", "x");
  NODE(g, "Relu", "b", "a");
  NODE(g, "Dropout", "c", "b");
  kiln_attr_t to = kiln_attr_make_int("to", 1); /* FLOAT */
  node(g, "Cast", 1, (const char*[]){"c"}, "d", 1, &to);
  NODE(g, "Reshape", "e", "d", "shape");
  kiln_attr_t perm = kiln_attr_make_ints("perm", 2, (int64_t[]){0, 1});
  node(g, "Transpose", 1, (const char*[]){"e"}, "f", 1, &perm);
  NODE(g, "Expand", "h", "f", "shape");
  NODE(g, "Identity", "y", "h"); /* graph output produced by a no-op */
  CHECK_OK(kiln_graph_add_output(g, "y"));
  /* Not no-ops: a real transpose and a reshape that changes the shape. */
  kiln_attr_t perm2 = kiln_attr_make_ints("perm", 2, (int64_t[]){1, 0});
  node(g, "Transpose", 1, (const char*[]){"x"}, "z", 1, &perm2);
  consti(g, "shape2", 2, (int64_t[]){4, 6});
  NODE(g, "Reshape", "z2", "z", "shape2");
  CHECK_OK(kiln_graph_add_output(g, "z2"));
}

static void test_remove_noops(void) {
  int rw = 0;
  kiln_graph_t* g = check_pass(b_noops, "remove-noops", &rw);
  CHECK_MSG(rw == 7, "rewrites %d", rw);
  CHECK(g->n_nodes == 3 && count_op(g, "Relu") == 1 && count_op(g, "Transpose") == 1 &&
        count_op(g, "Reshape") == 1);
  /* The Relu now writes the output "y" directly. */
  int32_t y = kiln_graph_find_tensor(g, "y");
  CHECK(g->tensors[y].producer >= 0 && strcmp(g->nodes[g->tensors[y].producer].op_type, "Relu") == 0);
  kiln_graph_destroy(g);
}

/* An output that is a graph input cannot lose its Identity. */
static void b_noop_io(kiln_graph_t* g) {
  input(g, "x", 1, (int64_t[]){5});
  NODE(g, "Identity", "y", "x");
  CHECK_OK(kiln_graph_add_output(g, "y"));
}

static void test_remove_noops_keeps_io(void) {
  int rw = -1;
  kiln_graph_t* g = check_pass(b_noop_io, "remove-noops", &rw);
  CHECK(rw == 0 && g->n_nodes == 1);
  kiln_graph_destroy(g);
}

/* ---- fold-constants -------------------------------------------------- */

static void b_consts(kiln_graph_t* g) {
  input(g, "x", 2, (int64_t[]){3, 300});
  constf(g, "a", 1, (int64_t[]){300}, NULL, 0);
  constf(g, "b", 1, (int64_t[]){300}, NULL, 0);
  constf(g, "w", 2, (int64_t[]){300, 300}, NULL, -0.5f); /* 90,000 elements: over infer's cap */
  NODE(g, "Add", "ab", "a", "b");
  NODE(g, "Transpose", "wt", "w");
  NODE(g, "MatMul", "m", "x", "wt");
  NODE(g, "Add", "m2", "m", "ab");
  /* Shape-driven: Reshape target from Shape -> Gather -> Concat. */
  NODE(g, "Shape", "s", "x");
  consti(g, "i1", 1, (int64_t[]){1});
  kiln_attr_t ax = kiln_attr_make_int("axis", 0);
  node(g, "Gather", 2, (const char*[]){"s", "i1"}, "s1", 1, &ax);
  consti(g, "i0", 1, (int64_t[]){0});
  node(g, "Gather", 2, (const char*[]){"s", "i0"}, "s0", 1, &ax);
  node(g, "Concat", 2, (const char*[]){"s1", "s0"}, "tgt", 1, &ax);
  NODE(g, "Reshape", "r", "m2", "tgt");
  NODE(g, "Relu", "y", "r");
  CHECK_OK(kiln_graph_add_output(g, "y"));
}

static void test_fold_constants(void) {
  int rw = 0;
  kiln_graph_t* g = check_pass(b_consts, "fold-constants", &rw);
  CHECK_MSG(rw == 6, "rewrites %d", rw); /* Add, Transpose, Shape, 2 Gather, Concat */
  CHECK(g->n_nodes == 4 && count_op(g, "Transpose") == 0 && count_op(g, "Shape") == 0);
  int32_t wt = kiln_graph_find_tensor(g, "wt");
  CHECK(wt >= 0 && (g->tensors[wt].flags & KILN_TENSOR_INITIALIZER) && g->tensors[wt].producer < 0);
  kiln_graph_destroy(g);
}

/* ---- fold-batchnorm -------------------------------------------------- */

static void bn(kiln_graph_t* g, const char* x, const char* y, int64_t c, const char* tag) {
  char n[4][64];
  const char* parts[] = {"scale", "bias", "mean", "var"};
  for (int k = 0; k < 4; ++k) {
    snprintf(n[k], sizeof n[k], "%s_%s", tag, parts[k]);
    constf(g, n[k], 1, (int64_t[]){c}, NULL, k == 3 ? 0.2f : -0.5f);
  }
  kiln_attr_t eps = kiln_attr_make_float("epsilon", 1e-3f);
  node(g, "BatchNormalization", 5, (const char*[]){x, n[0], n[1], n[2], n[3]}, y, 1, &eps);
}

static void b_bn(kiln_graph_t* g) {
  input(g, "x", 4, (int64_t[]){1, 3, 8, 8});
  input(g, "v", 2, (int64_t[]){5, 6});
  /* Conv with bias, Conv without bias (grouped). */
  constf(g, "w1", 4, (int64_t[]){4, 3, 3, 3}, NULL, -0.5f);
  constf(g, "b1", 1, (int64_t[]){4}, NULL, -0.5f);
  kiln_attr_t pads = kiln_attr_make_ints("pads", 4, (int64_t[]){1, 1, 1, 1});
  node(g, "Conv", 3, (const char*[]){"x", "w1", "b1"}, "c1", 1, &pads);
  bn(g, "c1", "y1", 4, "bn1");
  constf(g, "w2", 4, (int64_t[]){4, 2, 1, 1}, NULL, -0.5f);
  kiln_attr_t grp = kiln_attr_make_int("group", 2);
  node(g, "Conv", 2, (const char*[]){"y1", "w2"}, "c2", 1, &grp);
  bn(g, "c2", "y2", 4, "bn2");
  CHECK_OK(kiln_graph_add_output(g, "y2"));
  /* Gemm transB=1 with beta and a [1,C] bias; Gemm transB=0 without bias. */
  constf(g, "gw", 2, (int64_t[]){7, 6}, NULL, -0.5f);
  constf(g, "gb", 2, (int64_t[]){1, 7}, NULL, -0.5f);
  kiln_attr_t ga[2] = {kiln_attr_make_int("transB", 1), kiln_attr_make_float("beta", 0.5f)};
  node(g, "Gemm", 3, (const char*[]){"v", "gw", "gb"}, "g1", 2, ga);
  bn(g, "g1", "y3", 7, "bn3");
  CHECK_OK(kiln_graph_add_output(g, "y3"));
  constf(g, "gw2", 2, (int64_t[]){7, 3}, NULL, -0.5f);
  node(g, "Gemm", 2, (const char*[]){"y3", "gw2"}, "g2", 0, NULL);
  bn(g, "g2", "y4", 3, "bn4");
  CHECK_OK(kiln_graph_add_output(g, "y4"));
  /* MatMul alone and MatMul + Add. */
  constf(g, "mw", 2, (int64_t[]){6, 4}, NULL, -0.5f);
  NODE(g, "MatMul", "m1", "v", "mw");
  bn(g, "m1", "y5", 4, "bn5");
  CHECK_OK(kiln_graph_add_output(g, "y5"));
  constf(g, "mb", 1, (int64_t[]){4}, NULL, -0.5f);
  NODE(g, "MatMul", "m2", "v", "mw");
  NODE(g, "Add", "m2b", "mb", "m2");
  bn(g, "m2b", "y6", 4, "bn6");
  CHECK_OK(kiln_graph_add_output(g, "y6"));
  /* Not folded: the conv output has another consumer. */
  node(g, "Conv", 3, (const char*[]){"x", "w1", "b1"}, "c7", 1, &pads);
  bn(g, "c7", "y7", 4, "bn7");
  NODE(g, "Add", "y8", "y7", "c7");
  CHECK_OK(kiln_graph_add_output(g, "y8"));
}

static void test_fold_batchnorm(void) {
  int rw = 0;
  kiln_graph_t* g = check_pass(b_bn, "fold-batchnorm", &rw);
  CHECK_MSG(rw == 6, "rewrites %d", rw);
  CHECK(count_op(g, "BatchNormalization") == 1);
  CHECK(count_op(g, "Conv") == 3 && count_op(g, "Gemm") == 2 && count_op(g, "MatMul") == 2);
  CHECK(count_op(g, "Add") == 3); /* MatMul's new bias, the MatMul+Add one, y8 */
  kiln_graph_destroy(g);
}

/* ---- fold-reshape-chains --------------------------------------------- */

static void b_chains(kiln_graph_t* g) {
  input(g, "x", 4, (int64_t[]){2, 3, 4, 5});
  consti(g, "s1", 3, (int64_t[]){6, 4, 5});
  NODE(g, "Reshape", "a", "x", "s1");
  kiln_attr_t ax = kiln_attr_make_int("axis", 1);
  node(g, "Flatten", 1, (const char*[]){"a"}, "b", 1, &ax);
  consti(g, "ax0", 1, (int64_t[]){0});
  NODE(g, "Unsqueeze", "c", "b", "ax0");
  NODE(g, "Squeeze", "d", "c", "ax0");
  NODE(g, "Relu", "y", "d");
  CHECK_OK(kiln_graph_add_output(g, "y"));
  /* Transposes that cancel, and two that compose. */
  kiln_attr_t p1 = kiln_attr_make_ints("perm", 4, (int64_t[]){0, 2, 3, 1});
  kiln_attr_t p2 = kiln_attr_make_ints("perm", 4, (int64_t[]){0, 3, 1, 2});
  node(g, "Transpose", 1, (const char*[]){"x"}, "t1", 1, &p1);
  node(g, "Transpose", 1, (const char*[]){"t1"}, "t2", 1, &p2);
  NODE(g, "Sigmoid", "z", "t2");
  CHECK_OK(kiln_graph_add_output(g, "z"));
  node(g, "Transpose", 1, (const char*[]){"x"}, "u1", 1, &p1);
  node(g, "Transpose", 1, (const char*[]){"u1"}, "w", 1, &p1); /* graph output */
  CHECK_OK(kiln_graph_add_output(g, "w"));
  /* Reshape back to the source shape: the chain disappears. */
  consti(g, "s0", 4, (int64_t[]){2, 3, 4, 5});
  NODE(g, "Reshape", "r1", "x", "s1");
  NODE(g, "Reshape", "r2", "r1", "s0");
  NODE(g, "Tanh", "q", "r2");
  CHECK_OK(kiln_graph_add_output(g, "q"));
}

/* Transposes that move axes of size 1 only are Reshapes; one that swaps
 * two axes of other sizes stays. */
static void b_unit_transposes(kiln_graph_t* g) {
  input(g, "x", 3, (int64_t[]){1, 6, 4});
  kiln_attr_t p1 = kiln_attr_make_ints("perm", 3, (int64_t[]){1, 0, 2}); /* [6, 1, 4] */
  node(g, "Transpose", 1, (const char*[]){"x"}, "a", 1, &p1);
  NODE(g, "Relu", "y", "a");
  CHECK_OK(kiln_graph_add_output(g, "y"));
  kiln_attr_t p2 = kiln_attr_make_ints("perm", 3, (int64_t[]){2, 1, 0}); /* [4, 6, 1]: swaps 6 and 4 */
  node(g, "Transpose", 1, (const char*[]){"x"}, "b", 1, &p2);
  NODE(g, "Sigmoid", "z", "b");
  CHECK_OK(kiln_graph_add_output(g, "z"));
  kiln_attr_t p3 = kiln_attr_make_ints("perm", 3, (int64_t[]){1, 2, 0}); /* [6, 4, 1] */
  node(g, "Transpose", 1, (const char*[]){"x"}, "c", 1, &p3);
  NODE(g, "Tanh", "w", "c");
  CHECK_OK(kiln_graph_add_output(g, "w"));
}

static void test_unit_transposes(void) {
  int rw = 0;
  kiln_graph_t* g = check_pass(b_unit_transposes, "fold-reshape-chains", &rw);
  CHECK_MSG(rw == 2, "rewrites %d", rw);
  CHECK_MSG(count_op(g, "Reshape") == 2 && count_op(g, "Transpose") == 1, "reshapes %d transposes %d",
            count_op(g, "Reshape"), count_op(g, "Transpose"));
  kiln_graph_destroy(g);
}

static void test_fold_chains(void) {
  int rw = 0;
  kiln_graph_t* g = check_pass(b_chains, "fold-reshape-chains", &rw);
  CHECK_MSG(rw == 6, "rewrites %d", rw);
  CHECK_MSG(count_op(g, "Reshape") == 1 && count_op(g, "Flatten") == 0 &&
                count_op(g, "Squeeze") == 0 && count_op(g, "Unsqueeze") == 0,
            "reshapes %d", count_op(g, "Reshape"));
  CHECK(count_op(g, "Transpose") == 1); /* x -> w; t1/t2 cancelled */
  CHECK(g->n_nodes == 5);
  kiln_graph_destroy(g);
}

/* ---- recognize-patterns ---------------------------------------------- */

/* F.gelu as torch 1.13 exports it, plus the two other operand orders. */
static void b_gelu(kiln_graph_t* g) {
  input(g, "x", 2, (int64_t[]){4, 16});
  scalar(g, "sq2", 1.4142135f);
  scalar(g, "one", 1.f);
  scalar(g, "half", 0.5f);
  NODE(g, "Div", "d", "x", "sq2");
  NODE(g, "Erf", "e", "d");
  NODE(g, "Add", "a", "e", "one");
  NODE(g, "Mul", "m", "x", "a");
  NODE(g, "Mul", "y", "m", "half");
  CHECK_OK(kiln_graph_add_output(g, "y"));
  /* x * ((1 + erf(x * 0.7071)) * 0.5) */
  scalar(g, "isq2", 0.70710678f);
  NODE(g, "Mul", "d2", "isq2", "y");
  NODE(g, "Erf", "e2", "d2");
  NODE(g, "Add", "a2", "one", "e2");
  NODE(g, "Mul", "h2", "half", "a2");
  NODE(g, "Mul", "y2", "h2", "y");
  CHECK_OK(kiln_graph_add_output(g, "y2"));
  /* (x * 0.5) * (1 + erf(x / sqrt2)) */
  NODE(g, "Div", "d3", "y2", "sq2");
  NODE(g, "Erf", "e3", "d3");
  NODE(g, "Add", "a3", "e3", "one");
  NODE(g, "Mul", "h3", "y2", "half");
  NODE(g, "Mul", "y3", "a3", "h3");
  CHECK_OK(kiln_graph_add_output(g, "y3"));
  /* tanh form as torch exports approximate='tanh'. */
  scalar(g, "c0", 0.044715f);
  scalar(g, "c1", 0.7978846f);
  NODE(g, "Mul", "t0", "y3", "y3");
  NODE(g, "Mul", "t1", "y3", "t0");
  NODE(g, "Mul", "t2", "c0", "t1");
  NODE(g, "Add", "t3", "y3", "t2");
  NODE(g, "Mul", "t4", "c1", "t3");
  NODE(g, "Tanh", "t5", "t4");
  NODE(g, "Add", "t6", "one", "t5");
  NODE(g, "Mul", "t7", "y3", "t6");
  NODE(g, "Mul", "y4", "half", "t7");
  CHECK_OK(kiln_graph_add_output(g, "y4"));
  /* Not Gelu: the last factor is 0.6. */
  scalar(g, "six", 0.6f);
  NODE(g, "Div", "d5", "x", "sq2");
  NODE(g, "Erf", "e5", "d5");
  NODE(g, "Add", "a5", "e5", "one");
  NODE(g, "Mul", "m5", "x", "a5");
  NODE(g, "Mul", "y5", "m5", "six");
  CHECK_OK(kiln_graph_add_output(g, "y5"));
}

static void test_patterns_gelu(void) {
  int rw = 0;
  kiln_graph_t* g = check_pass(b_gelu, "recognize-patterns", &rw);
  CHECK_MSG(rw == 4, "rewrites %d", rw);
  CHECK(count_op(g, "Gelu") == 4 && count_op(g, "Erf") == 1 && count_op(g, "Tanh") == 0);
  CHECK(g->n_nodes == 4 + 5);
  kiln_graph_destroy(g);
}

static void b_hardswish(kiln_graph_t* g) {
  input(g, "x", 2, (int64_t[]){4, 16});
  kiln_attr_t al = kiln_attr_make_float("alpha", 1.f / 6);
  node(g, "HardSigmoid", 1, (const char*[]){"x"}, "h", 1, &al);
  NODE(g, "Mul", "y", "h", "x");
  CHECK_OK(kiln_graph_add_output(g, "y"));
  scalar(g, "three", 3.f);
  scalar(g, "zero", 0.f);
  scalar(g, "six", 6.f);
  scalar(g, "sixth", 1.f / 6);
  /* x * Clip(x + 3, 0, 6) / 6 */
  NODE(g, "Add", "a", "three", "y");
  NODE(g, "Clip", "c", "a", "zero", "six");
  NODE(g, "Mul", "m", "y", "c");
  NODE(g, "Div", "y2", "m", "six");
  CHECK_OK(kiln_graph_add_output(g, "y2"));
  /* x * (Clip(x + 3, 0, 6) * (1/6)) */
  NODE(g, "Add", "a3", "y2", "three");
  NODE(g, "Clip", "c3", "a3", "zero", "six");
  NODE(g, "Mul", "s3", "sixth", "c3");
  NODE(g, "Mul", "y3", "y2", "s3");
  CHECK_OK(kiln_graph_add_output(g, "y3"));
  /* Not HardSwish: default HardSigmoid alpha (0.2). */
  NODE(g, "HardSigmoid", "h4", "x");
  NODE(g, "Mul", "y4", "x", "h4");
  CHECK_OK(kiln_graph_add_output(g, "y4"));
}

static void test_patterns_hardswish(void) {
  int rw = 0;
  kiln_graph_t* g = check_pass(b_hardswish, "recognize-patterns", &rw);
  CHECK_MSG(rw == 3, "rewrites %d", rw);
  CHECK(count_op(g, "HardSwish") == 3 && count_op(g, "Clip") == 0 &&
        count_op(g, "HardSigmoid") == 1);
  kiln_graph_destroy(g);
}

static void layernorm(kiln_graph_t* g, const char* x, const char* y, const char* gamma,
                      const char* beta, bool swap, const char* t) {
  char n[8][32];
  for (int k = 0; k < 8; ++k) snprintf(n[k], sizeof n[k], "%s_%d", t, k);
  kiln_attr_t ra[2] = {kiln_attr_make_ints("axes", 1, (int64_t[]){-1}), kiln_attr_make_int("keepdims", 1)};
  node(g, "ReduceMean", 1, (const char*[]){x}, n[0], 2, ra);
  NODE(g, "Sub", n[1], x, n[0]);
  NODE(g, "Pow", n[2], n[1], "two");
  node(g, "ReduceMean", 1, (const char*[]){n[2]}, n[3], 2, ra);
  NODE(g, "Add", n[4], n[3], "eps");
  NODE(g, "Sqrt", n[5], n[4]);
  if (!gamma) {
    NODE(g, "Div", y, n[1], n[5]);
    return;
  }
  NODE(g, "Div", n[6], n[1], n[5]);
  if (swap) {
    NODE(g, "Mul", n[7], gamma, n[6]);
    NODE(g, "Add", y, beta, n[7]);
  } else {
    NODE(g, "Mul", n[7], n[6], gamma);
    NODE(g, "Add", y, n[7], beta);
  }
}

static void b_layernorm(kiln_graph_t* g) {
  input(g, "x", 3, (int64_t[]){2, 5, 32});
  scalar(g, "two", 2.f);
  scalar(g, "eps", 1e-5f);
  constf(g, "gamma", 1, (int64_t[]){32}, NULL, 0.5f);
  constf(g, "beta", 1, (int64_t[]){32}, NULL, -0.5f);
  layernorm(g, "x", "y", "gamma", "beta", false, "l1");
  CHECK_OK(kiln_graph_add_output(g, "y"));
  layernorm(g, "y", "y2", "gamma", "beta", true, "l2");
  CHECK_OK(kiln_graph_add_output(g, "y2"));
  layernorm(g, "y2", "y3", NULL, NULL, false, "l3");
  CHECK_OK(kiln_graph_add_output(g, "y3"));
  /* Not LayerNorm: gamma over the middle axis broadcasts differently. */
  constf(g, "gmid", 2, (int64_t[]){5, 1}, NULL, 0.5f);
  layernorm(g, "x", "y4", "gmid", "beta", false, "l4");
  CHECK_OK(kiln_graph_add_output(g, "y4"));
}

static void test_patterns_layernorm(void) {
  int rw = 0;
  kiln_graph_t* g = check_pass(b_layernorm, "recognize-patterns", &rw);
  CHECK_MSG(rw == 4, "rewrites %d", rw); /* l4 still becomes LN without its affine part */
  CHECK(count_op(g, "LayerNormalization") == 4 && count_op(g, "ReduceMean") == 0);
  CHECK(count_op(g, "Mul") == 1 && count_op(g, "Add") == 1);
  kiln_graph_destroy(g);
}

/* ---- cse / dce ------------------------------------------------------- */

static void b_cse(kiln_graph_t* g) {
  input(g, "x", 2, (int64_t[]){3, 4});
  scalar(g, "k1", 2.f);
  scalar(g, "k2", 2.f); /* equal constant under another name */
  NODE(g, "Relu", "r1", "x");
  NODE(g, "Relu", "r2", "x");
  NODE(g, "Mul", "m1", "r1", "k1");
  NODE(g, "Mul", "m2", "r2", "k2");
  NODE(g, "Add", "y", "m1", "m2");
  CHECK_OK(kiln_graph_add_output(g, "y"));
  /* Same node twice, the second a graph output. */
  NODE(g, "Sigmoid", "s1", "x");
  NODE(g, "Sigmoid", "z", "x");
  NODE(g, "Tanh", "t", "s1");
  CHECK_OK(kiln_graph_add_output(g, "z"));
  CHECK_OK(kiln_graph_add_output(g, "t"));
  /* Differing attributes are different nodes. */
  kiln_attr_t a1 = kiln_attr_make_float("alpha", 0.1f), a2 = kiln_attr_make_float("alpha", 0.2f);
  node(g, "LeakyRelu", 1, (const char*[]){"x"}, "l1", 1, &a1);
  node(g, "LeakyRelu", 1, (const char*[]){"x"}, "l2", 1, &a2);
  NODE(g, "Add", "w", "l1", "l2");
  CHECK_OK(kiln_graph_add_output(g, "w"));
}

static void test_cse(void) {
  int rw = 0;
  kiln_graph_t* g = check_pass(b_cse, "cse", &rw);
  CHECK_MSG(rw == 3, "rewrites %d", rw);
  CHECK(count_op(g, "Relu") == 1 && count_op(g, "Mul") == 1 && count_op(g, "Sigmoid") == 1 &&
        count_op(g, "LeakyRelu") == 2);
  kiln_graph_destroy(g);
}

static void b_dce(kiln_graph_t* g) {
  input(g, "x", 1, (int64_t[]){8});
  input(g, "unused_in", 1, (int64_t[]){2});
  NODE(g, "Relu", "a", "x");
  NODE(g, "Exp", "b", "a");   /* dead */
  NODE(g, "Log", "c", "b");   /* dead */
  NODE(g, "Neg", "y", "a");
  CHECK_OK(kiln_graph_add_output(g, "y"));
}

static void test_dce(void) {
  int rw = 0;
  kiln_graph_t* g = check_pass(b_dce, "dce", &rw);
  CHECK(rw == 2 && g->n_nodes == 2 && g->n_inputs == 2);
  kiln_graph_destroy(g);
}

/* ---- random graphs through the whole pipeline ------------------------- */

static int rg_n;
static char* rg_name(char* buf) {
  snprintf(buf, 32, "t%d", rg_n++);
  return buf;
}

/* One random chain on a [1,C,H,W] input: elementwise ops with random
 * constants, reshapes, transposes, Conv+BN, decomposed Gelu/HardSwish,
 * duplicated subexpressions and dead branches. */
static void b_random(kiln_graph_t* g) {
  rg_n = 0;
  const int64_t C = 4, H = 6, W = 5;
  input(g, "x", 4, (int64_t[]){1, C, H, W});
  scalar(g, "one", 1.f);
  scalar(g, "half", 0.5f);
  scalar(g, "sq2", 1.4142135f);
  scalar(g, "three", 3.f);
  scalar(g, "zero", 0.f);
  scalar(g, "six", 6.f);
  consti(g, "ax0", 1, (int64_t[]){0});
  char cur[32] = "x", b1[32], b2[32], b3[32], b4[32], kn[32];
  kiln_shape_t s = kiln_shape_make(4, (int64_t[]){1, C, H, W});
  int steps = 6 + (int)(rnd() % 10);
  for (int st = 0; st < steps; ++st) {
    int op = (int)(rnd() % 12);
    if (op == 0) {
      static const char* const un[] = {"Relu", "Sigmoid", "Tanh", "Identity", "Neg", "Dropout"};
      NODE(g, un[rnd() % 6], rg_name(b1), cur);
      strcpy(cur, b1);
    } else if (op == 1) { /* Add/Mul by a constant over the last dim */
      rg_name(kn);
      constf(g, kn, 1, (int64_t[]){s.dims[s.rank - 1]}, NULL, -0.5f);
      const char* op2 = rnd() % 2 ? "Add" : "Mul";
      rg_name(b1);
      if (rnd() % 2) NODE(g, op2, b1, cur, kn); /* either operand order */
      else NODE(g, op2, b1, kn, cur);
      strcpy(cur, b1);
    } else if (op == 2 && s.rank >= 2) { /* random transpose */
      int64_t p[KILN_MAX_RANK];
      for (int32_t i = 0; i < s.rank; ++i) p[i] = i;
      for (int32_t i = s.rank - 1; i > 0; --i) {
        int32_t j = (int32_t)(rnd() % (uint32_t)(i + 1));
        int64_t t = p[i]; p[i] = p[j]; p[j] = t;
      }
      kiln_attr_t pa = kiln_attr_make_ints("perm", s.rank, p);
      node(g, "Transpose", 1, (const char*[]){cur}, rg_name(b1), 1, &pa);
      kiln_shape_t o = s;
      for (int32_t i = 0; i < s.rank; ++i) o.dims[i] = s.dims[p[i]];
      s = o;
      strcpy(cur, b1);
    } else if (op == 3) { /* reshape to a permutation of the dims, maybe merged */
      int64_t d[KILN_MAX_RANK];
      int32_t r = s.rank;
      for (int32_t i = 0; i < r; ++i) d[i] = s.dims[r - 1 - i];
      if (r > 2 && rnd() % 2) { d[0] *= d[1]; memmove(d + 1, d + 2, sizeof(int64_t) * (size_t)(r - 2)); --r; }
      rg_name(kn);
      consti(g, kn, r, d);
      NODE(g, "Reshape", rg_name(b1), cur, kn);
      s = kiln_shape_make(r, d);
      strcpy(cur, b1);
    } else if (op == 4 && s.rank < 6) { /* Unsqueeze, sometimes Squeeze back */
      NODE(g, "Unsqueeze", rg_name(b1), cur, "ax0");
      strcpy(cur, b1);
      kiln_shape_t o = {.rank = s.rank + 1};
      o.dims[0] = 1;
      for (int32_t i = 0; i < s.rank; ++i) o.dims[i + 1] = s.dims[i];
      s = o;
      if (rnd() % 2) {
        NODE(g, "Squeeze", rg_name(b1), cur, "ax0");
        strcpy(cur, b1);
        s = kiln_shape_make(s.rank - 1, s.dims + 1);
      }
    } else if (op == 5) { /* back to [1,C,H,W] and a Conv (+ BN) */
      consti(g, rg_name(kn), 4, (int64_t[]){1, C, H, W});
      NODE(g, "Reshape", rg_name(b1), cur, kn);
      char w[32], bb[32];
      constf(g, rg_name(w), 4, (int64_t[]){C, C, 3, 3}, NULL, -0.5f);
      constf(g, rg_name(bb), 1, (int64_t[]){C}, NULL, -0.5f);
      kiln_attr_t pads = kiln_attr_make_ints("pads", 4, (int64_t[]){1, 1, 1, 1});
      node(g, "Conv", 3, (const char*[]){b1, w, bb}, rg_name(b2), 1, &pads);
      strcpy(cur, b2);
      if (rnd() % 2) {
        bn(g, cur, rg_name(b3), C, b3);
        strcpy(cur, b3);
      }
      s = kiln_shape_make(4, (int64_t[]){1, C, H, W});
    } else if (op == 6) { /* decomposed Gelu */
      NODE(g, "Div", rg_name(b1), cur, "sq2");
      NODE(g, "Erf", rg_name(b2), b1);
      NODE(g, "Add", rg_name(b3), "one", b2);
      NODE(g, "Mul", rg_name(b4), cur, b3);
      NODE(g, "Mul", rg_name(b1), b4, "half");
      strcpy(cur, b1);
    } else if (op == 7) { /* decomposed HardSwish */
      NODE(g, "Add", rg_name(b1), cur, "three");
      NODE(g, "Clip", rg_name(b2), b1, "zero", "six");
      NODE(g, "Mul", rg_name(b3), cur, b2);
      NODE(g, "Div", rg_name(b4), b3, "six");
      strcpy(cur, b4);
    } else if (op == 8) { /* the same op twice, summed (CSE) */
      NODE(g, "Sigmoid", rg_name(b1), cur);
      NODE(g, "Sigmoid", rg_name(b2), cur);
      NODE(g, "Add", rg_name(b3), b1, b2);
      strcpy(cur, b3);
    } else if (op == 9) { /* dead branch */
      NODE(g, "Exp", rg_name(b1), cur);
    } else if (op == 10) { /* constant subgraph feeding the chain */
      constf(g, rg_name(kn), 1, (int64_t[]){s.dims[s.rank - 1]}, NULL, 0.f);
      NODE(g, "Sqrt", rg_name(b1), kn);
      NODE(g, "Mul", rg_name(b2), b1, cur);
      strcpy(cur, b2);
    } else { /* Cast to the same type */
      kiln_attr_t to = kiln_attr_make_int("to", 1);
      node(g, "Cast", 1, (const char*[]){cur}, rg_name(b1), 1, &to);
      strcpy(cur, b1);
    }
  }
  NODE(g, "Identity", "y", cur);
  CHECK_OK(kiln_graph_add_output(g, "y"));
}

static void test_random_graphs(void) {
  int rewrites = 0, nodes_before = 0, nodes_after = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    /* Both builds must draw the same random graph. */
    uint64_t start = seed * 1000003;
    kiln_graph_t* ref = new_graph();
    kiln_graph_t* opt = new_graph();
    rng_state = start;
    b_random(ref);
    rng_state = start;
    b_random(opt);
    if (!CHECK_OK(kiln_graph_prepare(ref)) || !CHECK_OK(kiln_graph_prepare(opt))) {
      kiln_graph_destroy(ref);
      kiln_graph_destroy(opt);
      continue;
    }
    nodes_before += ref->n_nodes;
    char buf[8192] = {0};
    FILE* log = fmemopen(buf, sizeof buf, "w");
    CHECK_OK(kiln_graph_optimize(opt, 2, log));
    fclose(log);
    nodes_after += opt->n_nodes;
    rewrites += ref->n_nodes != opt->n_nodes;
    kiln_array_t in[1] = {{0}};
    make_inputs(ref, in, seed);
    char what[64];
    snprintf(what, sizeof what, "random graph %llu", (unsigned long long)seed);
    int before = kiln_test_failures;
    compare_graphs(ref, opt, in, RTOL, ATOL, what);
    if (kiln_test_failures != before) {
      printf("%s\n", buf);
      kiln_graph_dump(opt, stdout);
    }
    kiln_array_free(A(), &in[0]);
    kiln_graph_destroy(ref);
    kiln_graph_destroy(opt);
  }
  printf("  random graphs: %d nodes -> %d, %d graphs changed\n", nodes_before, nodes_after,
         rewrites);
  CHECK(nodes_after < nodes_before);
}

/* ---- exported models ------------------------------------------------- */

static void check_model(const char* name) {
  const char* dir = getenv("KILN_MODELS_DIR");
  if (!dir || !dir[0]) dir = "../models";
  char path[1024], in_path[1024];
  snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
  snprintf(in_path, sizeof in_path, "%s/%s_input.npy", dir, name);
  FILE* f = fopen(path, "rb");
  if (!f) {
    printf("  note: %s not found, skipping (set KILN_MODELS_DIR or run the models fixture)\n",
           path);
    return;
  }
  fclose(f);
  kiln_graph_t *ref = NULL, *opt = NULL;
  if (!CHECK_OK(kiln_onnx_load_model(path, NULL, A(), &ref))) return;
  if (!CHECK_OK(kiln_onnx_load_model(path, NULL, A(), &opt))) {
    kiln_graph_destroy(ref);
    return;
  }
  int32_t before = opt->n_nodes;
  printf("  %s:\n", name);
  CHECK_OK(kiln_graph_optimize(opt, 1, stdout));
  printf("  %s: nodes %d -> %d\n", name, before, opt->n_nodes);
  CHECK(opt->n_nodes <= before); /* resnet18 arrives with BatchNorm already folded */
  kiln_array_t in[1] = {{0}};
  if (ref->n_inputs == 1 && CHECK_OK(kiln_npy_read(in_path, A(), &in[0]))) {
    /* Deep nets: folds reassociate float sums, so the model tolerances. */
    compare_graphs(ref, opt, in, 1e-3, 1e-4, name);
    kiln_array_free(A(), &in[0]);
  }
  kiln_graph_destroy(ref);
  kiln_graph_destroy(opt);
}

static void test_models(void) {
  check_model("resnet18");
  check_model("mobilenet_v2");
  check_model("encoder");
}

int main(void) {
  RUN(test_manager);
  RUN(test_remove_noops);
  RUN(test_remove_noops_keeps_io);
  RUN(test_fold_constants);
  RUN(test_fold_batchnorm);
  RUN(test_fold_chains);
  RUN(test_unit_transposes);
  RUN(test_patterns_gelu);
  RUN(test_patterns_hardswish);
  RUN(test_patterns_layernorm);
  RUN(test_cse);
  RUN(test_dce);
  RUN(test_random_graphs);
  RUN(test_models);
  return kiln_test_finish();
}
