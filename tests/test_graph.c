/* Unit tests of the graph IR (ir/graph.h, ir/op.h) and the reference
 * executor's bookkeeping (compiler/ref_exec.h): building graphs by hand,
 * ordering, verification, inference with symbolic dims, constant folding,
 * the text/dot printers, the unsupported-op report and intermediate
 * freeing. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/op.h"
#include "compiler/ref_exec.h"
#include "testing.h"

#define N_OF(T, ...) ((int32_t)(sizeof((T[]){__VA_ARGS__}) / sizeof(T)))
#define SHAPE(...) kiln_shape_make(N_OF(int64_t, __VA_ARGS__), (int64_t[]){__VA_ARGS__})
#define NAMES(...) N_OF(const char*, __VA_ARGS__), (const char*[]){__VA_ARGS__}
#define NO_ATTRS 0, NULL

static kiln_allocator_t sys(void) { return kiln_allocator_system(); }

static kiln_graph_t* new_graph(int64_t opset) {
  kiln_graph_t* g = NULL;
  CHECK_OK(kiln_graph_create(sys(), &g));
  if (g) CHECK_OK(kiln_graph_set_opset(g, "", opset));
  return g;
}

static kiln_array_t array(kiln_allocator_t a, kiln_dtype_t dt, kiln_shape_t s, const void* data) {
  kiln_array_t arr;
  memset(&arr, 0, sizeof arr);
  CHECK_OK(kiln_array_alloc(a, dt, &s, &arr));
  if (data && arr.nbytes) memcpy(arr.data, data, arr.nbytes);
  return arr;
}

static void add_init(kiln_graph_t* g, const char* name, kiln_dtype_t dt, kiln_shape_t s,
                     const void* data) {
  kiln_array_t a = array(g->allocator, dt, s, data);
  CHECK_OK(kiln_graph_add_initializer(g, name, &a, NULL));
  CHECK(a.data == NULL); /* ownership moved to the graph */
}

static void add_node(kiln_graph_t* g, const char* op, const char* name, int32_t n_in,
                     const char* const* in, int32_t n_out, const char* const* out, int32_t n_attr,
                     const kiln_attr_t* attrs) {
  CHECK_OK(kiln_graph_add_node(g, op, name, n_in, in, n_out, out, n_attr, attrs, NULL));
}

static const kiln_tensor_t* tensor(const kiln_graph_t* g, const char* name) {
  int32_t i = kiln_graph_find_tensor(g, name);
  CHECK_MSG(i >= 0, "no tensor '%s'", name);
  return i >= 0 ? &g->tensors[i] : NULL;
}

static const char* shape_of(const kiln_graph_t* g, const char* name) {
  static char buf[4][128];
  static int k = 0;
  k = (k + 1) % 4;
  const kiln_tensor_t* t = tensor(g, name);
  if (!t) return "<none>";
  return kiln_graph_format_shape(g, &t->shape, buf[k], sizeof buf[k]);
}

#define CHECK_SHAPE(g, name, want)                                                  \
  CHECK_MSG(strcmp(shape_of(g, name), want) == 0, "tensor '%s' has shape %s, expected %s", \
            name, shape_of(g, name), want)

/* ---- building and lookup ------------------------------------------------ */

static void test_build_by_hand(void) {
  kiln_graph_t* g = new_graph(17);
  if (!g) return;
  CHECK(g->opset == 17);
  int32_t xi = -1, wi = -1, ni = -1;
  kiln_shape_t xs = SHAPE(2, 3);
  CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &xs, &xi));
  kiln_array_t w = array(sys(), KILN_DTYPE_F32, SHAPE(3), (float[]){1, 2, 3});
  CHECK_OK(kiln_graph_add_initializer(g, "w", &w, &wi));
  kiln_attr_t attrs[] = {kiln_attr_make_float("alpha", 0.25f), kiln_attr_make_ints("perm", 2, (int64_t[]){1, 0}),
                         kiln_attr_make_string("mode", "constant")};
  CHECK_OK(kiln_graph_add_node(g, "Add", "add0", NAMES("x", "w"), NAMES("y"), 3, attrs, &ni));
  CHECK_OK(kiln_graph_add_node(g, "Relu", "", NAMES("y"), NAMES("z"), NO_ATTRS, NULL));
  CHECK_OK(kiln_graph_add_output(g, "z"));

  CHECK(xi == kiln_graph_find_tensor(g, "x") && wi == kiln_graph_find_tensor(g, "w"));
  CHECK(kiln_graph_find_tensor(g, "nope") == -1);
  CHECK(kiln_graph_find_tensor(g, NULL) == -1);
  CHECK(g->n_inputs == 1 && g->inputs[0] == xi);
  CHECK(g->n_outputs == 1 && g->n_nodes == 2 && ni == 0);
  CHECK(g->tensors[xi].flags & KILN_TENSOR_INPUT);
  CHECK((g->tensors[wi].flags & (KILN_TENSOR_INITIALIZER | KILN_TENSOR_CONST)) ==
        (KILN_TENSOR_INITIALIZER | KILN_TENSOR_CONST));
  CHECK(((float*)g->tensors[wi].value.data)[2] == 3.0f);
  /* Unnamed nodes get "<op>_<index>". */
  CHECK(strcmp(g->nodes[1].name, "Relu_1") == 0);
  CHECK(strcmp(g->nodes[0].domain, "") == 0);
  /* Attributes are deep copies: the caller's arrays may go away. */
  const kiln_attr_t* a = kiln_node_attr(&g->nodes[0], "perm");
  CHECK(a && a->type == KILN_ATTR_INTS && a->count == 2 && a->ints != attrs[1].ints &&
        a->ints[0] == 1 && a->ints[1] == 0);
  CHECK(kiln_node_attr(&g->nodes[0], "missing") == NULL);
  int64_t iv = 0;
  float fv = 0;
  const char* sv = NULL;
  const int64_t* ints = NULL;
  int64_t count = 0;
  CHECK_OK(kiln_attr_float(&g->nodes[0], "alpha", 1.0f, &fv));
  CHECK(fv == 0.25f);
  CHECK_OK(kiln_attr_float(&g->nodes[0], "beta", 1.5f, &fv));
  CHECK(fv == 1.5f);
  CHECK_OK(kiln_attr_string(&g->nodes[0], "mode", "reflect", &sv));
  CHECK(sv && strcmp(sv, "constant") == 0 && sv != attrs[2].s);
  CHECK_OK(kiln_attr_ints(&g->nodes[0], "perm", &ints, &count));
  CHECK(count == 2 && ints && ints[0] == 1);
  CHECK_OK(kiln_attr_ints(&g->nodes[0], "axes", &ints, &count));
  CHECK(count == -1 && ints == NULL);
  CHECK_OK(kiln_attr_int(&g->nodes[0], "axis", -1, &iv));
  CHECK(iv == -1);
  CHECK_ERR(kiln_attr_int(&g->nodes[0], "alpha", 0, &iv), KILN_INVALID_ARGUMENT, "alpha");
  CHECK_ERR(kiln_attr_int_required(&g->nodes[0], "axis", &iv), KILN_INVALID_ARGUMENT, "axis");

  /* Duplicate names are refused. */
  kiln_shape_t s1 = SHAPE(1);
  CHECK_ERR(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &s1, NULL), KILN_INVALID_ARGUMENT, "'x'");
  kiln_array_t dup = array(sys(), KILN_DTYPE_F32, SHAPE(1), NULL);
  CHECK_ERR(kiln_graph_add_initializer(g, "w", &dup, NULL), KILN_INVALID_ARGUMENT, "'w'");
  CHECK_ERR(kiln_graph_add_node(g, "Relu", "again", NAMES("x"), NAMES("y"), NO_ATTRS, NULL),
            KILN_INVALID_ARGUMENT, "'y'");
  CHECK_ERR(kiln_graph_add_output(g, "z"), KILN_INVALID_ARGUMENT, "'z'");

  CHECK_OK(kiln_graph_prepare(g));
  CHECK(g->tensors[kiln_graph_find_tensor(g, "z")].dtype == KILN_DTYPE_F32);
  CHECK_SHAPE(g, "z", "[2,3]");

  /* Many tensors: the name table grows and every name is still found. */
  for (int i = 0; i < 1000; ++i) {
    char name[32];
    snprintf(name, sizeof name, "t%d", i);
    int32_t idx;
    CHECK_OK(kiln_graph_get_or_add_tensor(g, name, &idx));
  }
  bool all = true;
  for (int i = 0; i < 1000; ++i) {
    char name[32];
    snprintf(name, sizeof name, "t%d", i);
    int32_t idx = kiln_graph_find_tensor(g, name);
    all = all && idx >= 0 && strcmp(g->tensors[idx].name, name) == 0;
  }
  CHECK(all);
  CHECK(kiln_graph_find_tensor(g, "x") == xi);
  kiln_graph_destroy(g);
  kiln_graph_destroy(NULL);
}

/* ---- toposort and verify ----------------------------------------------- */

static void test_toposort_out_of_order(void) {
  kiln_graph_t* g = new_graph(13);
  if (!g) return;
  kiln_shape_t s = SHAPE(4);
  CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &s, NULL));
  /* Added consumers first: d = Add(c, a); c = Neg(b); b = Abs(a); a = Relu(x). */
  add_node(g, "Add", "n_d", NAMES("c", "a"), NAMES("d"), NO_ATTRS);
  add_node(g, "Neg", "n_c", NAMES("b"), NAMES("c"), NO_ATTRS);
  add_node(g, "Abs", "n_b", NAMES("a"), NAMES("b"), NO_ATTRS);
  add_node(g, "Relu", "n_a", NAMES("x"), NAMES("a"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "d"));
  /* Before sorting, verify sees a use before its producer. */
  CHECK_ERR(kiln_graph_verify(g), KILN_INVALID_ARGUMENT, "before it is produced");
  CHECK_OK(kiln_graph_resolve_ops(g));
  CHECK_OK(kiln_graph_toposort(g));
  const char* order[] = {"n_a", "n_b", "n_c", "n_d"};
  for (int i = 0; i < 4; ++i)
    CHECK_MSG(strcmp(g->nodes[i].name, order[i]) == 0, "node %d is %s, expected %s", i,
              g->nodes[i].name, order[i]);
  /* Producers follow the new order. */
  CHECK(tensor(g, "a")->producer == 0 && tensor(g, "b")->producer == 1);
  CHECK(tensor(g, "c")->producer == 2 && tensor(g, "d")->producer == 3);
  CHECK(tensor(g, "x")->producer == -1);
  CHECK_OK(kiln_graph_infer(g));
  CHECK_OK(kiln_graph_verify(g));
  CHECK_SHAPE(g, "d", "[4]");

  /* It runs in the new order: d = -|relu(x)| + relu(x) = 0 for x >= 0. */
  kiln_array_t in = array(sys(), KILN_DTYPE_F32, SHAPE(4), (float[]){-1, 2, -3, 4});
  kiln_array_t out;
  memset(&out, 0, sizeof out);
  CHECK_OK(kiln_ref_run(g, &in, NULL, &out));
  if (out.data) {
    const float* y = out.data;
    CHECK(y[0] == 0 && y[1] == 0 && y[2] == 0 && y[3] == 0);
  }
  kiln_array_free(sys(), &out);
  kiln_array_free(sys(), &in);
  /* Sorting a sorted graph keeps it. */
  CHECK_OK(kiln_graph_toposort(g));
  CHECK(strcmp(g->nodes[0].name, "n_a") == 0 && strcmp(g->nodes[3].name, "n_d") == 0);
  kiln_graph_destroy(g);

  /* A diamond with a node that reads the same tensor twice. */
  g = new_graph(13);
  if (!g) return;
  CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &s, NULL));
  add_node(g, "Mul", "sq", NAMES("r", "r"), NAMES("y"), NO_ATTRS);
  add_node(g, "Relu", "r", NAMES("x"), NAMES("r"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_OK(kiln_graph_prepare(g));
  CHECK(strcmp(g->nodes[0].name, "r") == 0);
  in = array(sys(), KILN_DTYPE_F32, SHAPE(4), (float[]){-1, 2, -3, 4});
  CHECK_OK(kiln_ref_run(g, &in, NULL, &out));
  if (out.data) CHECK(((float*)out.data)[1] == 4 && ((float*)out.data)[3] == 16);
  kiln_array_free(sys(), &out);
  kiln_array_free(sys(), &in);
  kiln_graph_destroy(g);
}

static void test_toposort_and_verify_errors(void) {
  kiln_shape_t s = SHAPE(4);
  /* A cycle names a node on it. */
  kiln_graph_t* g = new_graph(13);
  if (!g) return;
  CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &s, NULL));
  add_node(g, "Add", "loop_a", NAMES("x", "b"), NAMES("a"), NO_ATTRS);
  add_node(g, "Relu", "loop_b", NAMES("a"), NAMES("b"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "b"));
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "cycle");
  kiln_graph_destroy(g);

  /* An input nothing produces names node and tensor. */
  g = new_graph(13);
  if (!g) return;
  CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &s, NULL));
  add_node(g, "Add", "adder", NAMES("x", "ghost"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  kiln_status_t st = kiln_graph_prepare(g);
  CHECK(kiln_status_code(st) == KILN_INVALID_ARGUMENT);
  CHECK_MSG(st && strstr(kiln_status_message(st), "adder") &&
                strstr(kiln_status_message(st), "ghost"),
            "message: %s", kiln_status_message(st));
  kiln_status_free(st);
  kiln_graph_destroy(g);

  /* An output nothing produces. */
  g = new_graph(13);
  if (!g) return;
  CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &s, NULL));
  add_node(g, "Relu", "r", NAMES("x"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_OK(kiln_graph_add_output(g, "nowhere"));
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "nowhere");
  kiln_graph_destroy(g);

  /* An optional input left out ("") is -1 and fine. */
  g = new_graph(13);
  if (!g) return;
  CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &s, NULL));
  add_node(g, "Clip", "clip", NAMES("x", "", ""), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK(g->nodes[0].inputs[1] == -1 && g->nodes[0].inputs[2] == -1);
  CHECK_OK(kiln_graph_prepare(g));
  kiln_graph_destroy(g);
}

/* ---- inference with symbolic dims --------------------------------------- */

static void test_infer_symbolic(void) {
  kiln_graph_t* g = new_graph(13);
  if (!g) return;
  int32_t n_sym = 0, m_sym = 0, again = 0;
  CHECK_OK(kiln_graph_symbol(g, "N", &n_sym));
  CHECK_OK(kiln_graph_symbol(g, "M", &m_sym));
  CHECK_OK(kiln_graph_symbol(g, "N", &again));
  CHECK(n_sym >= 1 && m_sym != n_sym && again == n_sym && g->n_symbols == 2);
  int64_t N = kiln_dim_from_symbol(n_sym), M = kiln_dim_from_symbol(m_sym);
  kiln_shape_t xs = SHAPE(N, 3), ys = SHAPE(1, 3), zs = SHAPE(N, 1), ms = SHAPE(M, 3);
  kiln_shape_t us = SHAPE(KILN_DIM_UNKNOWN, 3), fs = SHAPE(2, 3);
  CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &xs, NULL));
  CHECK_OK(kiln_graph_add_input(g, "y", KILN_DTYPE_F32, &ys, NULL));
  CHECK_OK(kiln_graph_add_input(g, "z", KILN_DTYPE_F32, &zs, NULL));
  CHECK_OK(kiln_graph_add_input(g, "m", KILN_DTYPE_F32, &ms, NULL));
  CHECK_OK(kiln_graph_add_input(g, "u", KILN_DTYPE_F32, &us, NULL));
  CHECK_OK(kiln_graph_add_input(g, "f", KILN_DTYPE_F32, &fs, NULL));
  add_node(g, "Add", "xy", NAMES("x", "y"), NAMES("xy"), NO_ATTRS);    /* [N,3]+[1,3] */
  add_node(g, "Mul", "xz", NAMES("xy", "z"), NAMES("xz"), NO_ATTRS);   /* [N,3]*[N,1] */
  add_node(g, "Relu", "r", NAMES("xz"), NAMES("r"), NO_ATTRS);         /* keeps N */
  add_node(g, "Sub", "rm", NAMES("r", "m"), NAMES("rm"), NO_ATTRS);    /* N vs M */
  add_node(g, "Add", "ru", NAMES("r", "u"), NAMES("ru"), NO_ATTRS);    /* N vs ? */
  add_node(g, "Add", "rf", NAMES("r", "f"), NAMES("rf"), NO_ATTRS);    /* N vs 2 */
  add_node(g, "Less", "cmp", NAMES("x", "y"), NAMES("mask"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "xz"));
  CHECK_OK(kiln_graph_add_output(g, "rm"));
  CHECK_OK(kiln_graph_add_output(g, "ru"));
  CHECK_OK(kiln_graph_add_output(g, "rf"));
  CHECK_OK(kiln_graph_add_output(g, "mask"));
  CHECK_OK(kiln_graph_prepare(g));
  CHECK_SHAPE(g, "x", "[N,3]");
  CHECK_SHAPE(g, "xy", "[N,3]");
  CHECK_SHAPE(g, "xz", "[N,3]");
  CHECK_SHAPE(g, "r", "[N,3]");
  CHECK(tensor(g, "r")->shape.dims[0] == N); /* the same symbol, not just the same name */
  CHECK_SHAPE(g, "rm", "[?,3]");              /* two different symbols */
  CHECK_SHAPE(g, "ru", "[?,3]");
  CHECK_SHAPE(g, "rf", "[2,3]"); /* a symbol against a known size takes the size */
  CHECK_SHAPE(g, "mask", "[N,3]");
  CHECK(tensor(g, "mask")->dtype == KILN_DTYPE_BOOL);
  CHECK(tensor(g, "rm")->dtype == KILN_DTYPE_F32);
  /* Unknown rank and unknown symbols print as '?'. */
  char buf[64];
  kiln_shape_t unk = kiln_shape_unknown();
  CHECK(strcmp(kiln_graph_format_shape(g, &unk, buf, sizeof buf), "[?]") == 0);
  kiln_shape_t bogus = SHAPE(kiln_dim_from_symbol(99), 1);
  CHECK(strcmp(kiln_graph_format_shape(g, &bogus, buf, sizeof buf), "[?,1]") == 0);
  CHECK(strcmp(kiln_graph_format_shape(NULL, &xs, buf, sizeof buf), "[?,3]") == 0);
  char tiny[4];
  kiln_graph_format_shape(g, &xs, tiny, sizeof tiny);
  CHECK(memchr(tiny, 0, sizeof tiny) != NULL);

  /* At run time N binds to the first size seen and must agree after. */
  float xv[6] = {1, 2, 3, 4, 5, 6}, yv[3] = {10, 20, 30}, zv[2] = {2, -1}, mv[9] = {0};
  kiln_array_t in[6] = {
      array(sys(), KILN_DTYPE_F32, SHAPE(2, 3), xv), array(sys(), KILN_DTYPE_F32, SHAPE(1, 3), yv),
      array(sys(), KILN_DTYPE_F32, SHAPE(2, 1), zv), array(sys(), KILN_DTYPE_F32, SHAPE(1, 3), mv),
      array(sys(), KILN_DTYPE_F32, SHAPE(2, 3), xv), array(sys(), KILN_DTYPE_F32, SHAPE(2, 3), xv),
  };
  kiln_array_t out[5];
  memset(out, 0, sizeof out);
  CHECK_OK(kiln_ref_run(g, in, NULL, out));
  if (out[0].data) {
    const float* xz = out[0].data; /* (x + y) * z */
    float want[6] = {22, 44, 66, -14, -25, -36};
    for (int i = 0; i < 6; ++i) CHECK_NEAR(xz[i], want[i], 0);
    CHECK(out[1].shape.rank == 2 && out[1].shape.dims[0] == 2 && out[1].shape.dims[1] == 3);
    CHECK(out[4].dtype == KILN_DTYPE_BOOL);
  }
  for (int i = 0; i < 5; ++i) kiln_array_free(sys(), &out[i]);
  /* z disagrees with x about N: the error names the input and both shapes. */
  kiln_array_free(sys(), &in[2]);
  in[2] = array(sys(), KILN_DTYPE_F32, SHAPE(3, 1), NULL);
  kiln_status_t st = kiln_ref_run(g, in, NULL, out);
  CHECK(st != NULL);
  CHECK_MSG(st && strstr(kiln_status_message(st), "'z'") &&
                strstr(kiln_status_message(st), "[N,1]") &&
                strstr(kiln_status_message(st), "[3,1]"),
            "message: %s", kiln_status_message(st));
  kiln_status_free(st);
  /* Wrong dtype. */
  kiln_array_free(sys(), &in[2]);
  in[2] = array(sys(), KILN_DTYPE_I32, SHAPE(2, 1), NULL);
  CHECK_ERR(kiln_ref_run(g, in, NULL, out), KILN_INVALID_ARGUMENT, "i32");
  for (int i = 0; i < 6; ++i) kiln_array_free(sys(), &in[i]);
  kiln_graph_destroy(g);
}

/* ---- constant folding ---------------------------------------------------- */

/* y = Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])): the shape
 * arithmetic folds at load time, so y's shape is static. */
static kiln_graph_t* reshape_chain(int64_t opset) {
  kiln_graph_t* g = new_graph(opset);
  if (!g) return NULL;
  kiln_shape_t xs = SHAPE(2, 3, 4);
  CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &xs, NULL));
  add_init(g, "zero", KILN_DTYPE_I64, kiln_shape_make(0, NULL), (int64_t[]){0});
  add_init(g, "minus1", KILN_DTYPE_I64, SHAPE(1), (int64_t[]){-1});
  add_node(g, "Shape", "shape", NAMES("x"), NAMES("s"), NO_ATTRS);
  add_node(g, "Gather", "gather", NAMES("s", "zero"), NAMES("n"), 1,
           (kiln_attr_t[]){kiln_attr_make_int("axis", 0)});
  if (opset >= 13) {
    add_init(g, "axes0", KILN_DTYPE_I64, SHAPE(1), (int64_t[]){0});
    add_node(g, "Unsqueeze", "unsq", NAMES("n", "axes0"), NAMES("n1"), NO_ATTRS);
  } else {
    add_node(g, "Unsqueeze", "unsq", NAMES("n"), NAMES("n1"), 1,
             (kiln_attr_t[]){kiln_attr_make_ints("axes", 1, (int64_t[]){0})});
  }
  add_node(g, "Concat", "concat", NAMES("n1", "minus1"), NAMES("target"), 1,
           (kiln_attr_t[]){kiln_attr_make_int("axis", 0)});
  add_node(g, "Reshape", "reshape", NAMES("x", "target"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  return g;
}

static void test_constant_folding(void) {
  int64_t opsets[] = {11, 13};
  for (int k = 0; k < 2; ++k) {
    kiln_graph_t* g = reshape_chain(opsets[k]);
    if (!g) return;
    CHECK_OK(kiln_graph_prepare(g));
    CHECK_MSG(strcmp(shape_of(g, "y"), "[2,12]") == 0, "opset %lld: y is %s",
              (long long)opsets[k], shape_of(g, "y"));
    CHECK(kiln_shape_is_static(&tensor(g, "y")->shape));
    CHECK(!(tensor(g, "y")->flags & KILN_TENSOR_CONST)); /* depends on x's values */
    const char* folded[] = {"s", "n", "n1", "target"};
    for (int i = 0; i < 4; ++i) {
      const kiln_tensor_t* t = tensor(g, folded[i]);
      CHECK_MSG(t && (t->flags & KILN_TENSOR_CONST) && t->value.data,
                "opset %lld: '%s' was not folded", (long long)opsets[k], folded[i]);
    }
    const kiln_tensor_t* target = tensor(g, "target");
    if (target && target->value.data) {
      CHECK(target->value.dtype == KILN_DTYPE_I64 && kiln_array_numel(&target->value) == 2);
      CHECK(((int64_t*)target->value.data)[0] == 2 && ((int64_t*)target->value.data)[1] == -1);
    }
    const kiln_tensor_t* n = tensor(g, "n");
    if (n) CHECK(n->shape.rank == 0 && ((int64_t*)n->value.data)[0] == 2);

    float xv[24];
    for (int i = 0; i < 24; ++i) xv[i] = (float)i;
    kiln_array_t in = array(sys(), KILN_DTYPE_F32, SHAPE(2, 3, 4), xv);
    kiln_array_t out;
    memset(&out, 0, sizeof out);
    CHECK_OK(kiln_ref_run(g, &in, NULL, &out));
    CHECK(out.shape.rank == 2 && out.shape.dims[0] == 2 && out.shape.dims[1] == 12);
    if (out.data) CHECK(memcmp(out.data, xv, sizeof xv) == 0);
    kiln_array_free(sys(), &out);
    kiln_array_free(sys(), &in);
    kiln_graph_destroy(g);
  }

  /* A purely constant subgraph folds to a value the executor just copies. */
  kiln_graph_t* g = new_graph(13);
  if (!g) return;
  add_init(g, "a", KILN_DTYPE_F32, SHAPE(3), (float[]){1, 2, 3});
  add_init(g, "b", KILN_DTYPE_F32, SHAPE(3), (float[]){10, 20, 30});
  add_node(g, "Add", "ab", NAMES("a", "b"), NAMES("c"), NO_ATTRS);
  add_node(g, "Neg", "neg", NAMES("c"), NAMES("d"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "d"));
  CHECK_OK(kiln_graph_prepare(g));
  const kiln_tensor_t* d = tensor(g, "d");
  CHECK(d && (d->flags & KILN_TENSOR_CONST) && d->value.data &&
        ((float*)d->value.data)[2] == -33.0f);
  kiln_array_t out;
  memset(&out, 0, sizeof out);
  CHECK_OK(kiln_ref_run(g, NULL, NULL, &out));
  if (out.data) CHECK(((float*)out.data)[0] == -11.0f && out.data != d->value.data);
  kiln_array_free(sys(), &out);
  kiln_graph_destroy(g);
}

/* ---- printers ------------------------------------------------------------ */

static char* capture_dump(const kiln_graph_t* g, bool dot) {
  char* text = NULL;
  size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  CHECK(f != NULL);
  if (!f) return NULL;
  if (dot) kiln_graph_write_dot(g, f);
  else kiln_graph_dump(g, f);
  fclose(f);
  return text;
}

#define CHECK_HAS(text, needle) \
  CHECK_MSG((text) && strstr((text), (needle)), "output lacks \"%s\":\n%s", (needle), (text))

static void test_dump_and_dot(void) {
  kiln_graph_t* g = new_graph(13);
  if (!g) return;
  g->name = kiln_graph_strdup(g, "demo");
  int32_t n_sym;
  CHECK_OK(kiln_graph_symbol(g, "batch", &n_sym));
  kiln_shape_t xs = SHAPE(kiln_dim_from_symbol(n_sym), 4);
  CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &xs, NULL));
  add_init(g, "w", KILN_DTYPE_F32, SHAPE(4, 2), NULL);
  add_node(g, "MatMul", "mm", NAMES("x", "w"), NAMES("h"), NO_ATTRS);
  kiln_attr_t names = {0};
  names.name = "labels";
  names.type = KILN_ATTR_STRINGS;
  names.count = 2;
  names.strings = (const char*[]){"cat", "dog"};
  kiln_attr_t scales = {0};
  scales.name = "scales";
  scales.type = KILN_ATTR_FLOATS;
  scales.count = 2;
  scales.floats = (float[]){0.25f, 4};
  add_node(g, "LeakyRelu", "act \"1\"", NAMES("h"), NAMES("a"), 4,
           (kiln_attr_t[]){kiln_attr_make_float("alpha", 0.5f), names, scales,
                           kiln_attr_make_string("note", "hi")});
  add_node(g, "Transpose", "tr", NAMES("a"), NAMES("t"), 1,
           (kiln_attr_t[]){kiln_attr_make_ints("perm", 2, (int64_t[]){1, 0})});
  add_node(g, "Softmax", "sm", NAMES("t"), NAMES("y"), 1,
           (kiln_attr_t[]){kiln_attr_make_int("axis", -1)});
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_OK(kiln_graph_prepare(g));

  char* text = capture_dump(g, false);
  CHECK_HAS(text, "graph demo (opset 13, 4 nodes");
  CHECK_HAS(text, "input  x: f32[batch,4]");
  CHECK_HAS(text, "const  w: f32[4,2]");
  CHECK_HAS(text, "mm = MatMul(x, w) -> h: f32[batch,2]");
  CHECK_HAS(text, "{alpha=0.5, labels=");
  CHECK_HAS(text, "scales=[0.25,4]");
  CHECK_HAS(text, "note=\"hi\"");
  /* Every attribute type prints its value, strings lists included. */
  CHECK_HAS(text, "cat");
  CHECK_HAS(text, "dog");
  CHECK_HAS(text, "{perm=[1,0]}");
  CHECK_HAS(text, "{axis=-1}");
  CHECK_HAS(text, "-> t: f32[2,batch]");
  CHECK_HAS(text, "output y: f32[2,batch]");
  free(text);

  text = capture_dump(g, true);
  CHECK_HAS(text, "digraph");
  CHECK_HAS(text, "MatMul\\nmm");
  CHECK_HAS(text, "act \\\"1\\\""); /* quotes in names are escaped */
  CHECK_HAS(text, "n0 -> n1");
  CHECK_HAS(text, "[batch,2]");     /* edges carry shapes */
  CHECK_HAS(text, "f32[batch,4]");  /* input node label */
  if (text) {
    CHECK(text[strlen(text) - 2] == '}');
    /* Weights are left out of the picture. */
    char w_edge[32];
    snprintf(w_edge, sizeof w_edge, "t%d -> ", kiln_graph_find_tensor(g, "w"));
    CHECK(strstr(text, w_edge) == NULL);
  }
  free(text);
  kiln_graph_destroy(g);
}

/* ---- unsupported ops ----------------------------------------------------- */

static void test_unsupported_ops_listed_together(void) {
  kiln_graph_t* g = new_graph(13);
  if (!g) return;
  kiln_shape_t s = SHAPE(4);
  CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &s, NULL));
  add_node(g, "FancyOp", "f1", NAMES("x"), NAMES("a"), NO_ATTRS);
  add_node(g, "Relu", "ok", NAMES("a"), NAMES("b"), NO_ATTRS);
  add_node(g, "OtherOp", "o1", NAMES("b"), NAMES("c"), NO_ATTRS);
  add_node(g, "FancyOp", "f2", NAMES("c"), NAMES("d"), NO_ATTRS);
  add_node(g, "Relu", "custom", NAMES("d"), NAMES("e"), NO_ATTRS);
  g->nodes[4].domain = kiln_graph_strdup(g, "com.example");
  CHECK_OK(kiln_graph_set_opset(g, "com.example", 2));
  CHECK_OK(kiln_graph_add_output(g, "e"));
  kiln_status_t st = kiln_graph_prepare(g);
  const char* m = kiln_status_message(st);
  CHECK(kiln_status_code(st) == KILN_UNSUPPORTED);
  CHECK_MSG(st && strstr(m, "FancyOp") && strstr(m, "OtherOp") && strstr(m, "com.example") &&
                strstr(m, "opset 13") && strstr(m, "opset 2"),
            "message: %s", m);
  CHECK_MSG(st && strstr(m, "3 unsupported ops") && strstr(m, "4 nodes"), "counts: %s", m);
  /* FancyOp is listed once even though two nodes use it. */
  if (st) {
    const char* first = strstr(m, "FancyOp");
    CHECK_MSG(first && !strstr(first + 1, "FancyOp"), "FancyOp listed twice: %s", m);
  }
  kiln_status_free(st);
  kiln_graph_destroy(g);

  /* An opset kiln does not know and a model without ai.onnx opset. */
  g = new_graph(99);
  if (!g) return;
  CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &s, NULL));
  add_node(g, "Relu", "r", NAMES("x"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_ERR(kiln_graph_prepare(g), KILN_UNSUPPORTED, "opset 99");
  kiln_graph_destroy(g);
  CHECK_OK(kiln_graph_create(sys(), &g));
  CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &s, NULL));
  add_node(g, "Relu", "r", NAMES("x"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_ERR(kiln_graph_prepare(g), KILN_UNSUPPORTED, "no ai.onnx opset");
  kiln_graph_destroy(g);

  /* Every listed op resolves. */
  CHECK(kiln_op_count() > 30);
  for (size_t i = 0; i < kiln_op_count(); ++i) {
    const kiln_op_schema_t* sc = kiln_op_at(i);
    CHECK(sc && sc->op_type && sc->infer && sc->run);
    if (sc) CHECK(kiln_op_lookup("", sc->op_type) == sc);
    if (sc) CHECK(kiln_op_lookup("ai.onnx", sc->op_type) == sc);
  }
  CHECK(kiln_op_at(kiln_op_count()) == NULL);
  CHECK(kiln_op_lookup("com.microsoft", "Relu") == NULL);
  CHECK(kiln_op_lookup("", "NoSuchOp") == NULL);
}

/* ---- the executor frees intermediates -------------------------------------- */

typedef struct {
  int64_t live_bytes, peak_bytes, n_alloc, n_free;
} counter_t;

static void* c_alloc(void* self, size_t size) {
  counter_t* c = self;
  size_t* p = malloc(size + 16);
  if (!p) return NULL;
  p[0] = size;
  c->live_bytes += (int64_t)size;
  if (c->live_bytes > c->peak_bytes) c->peak_bytes = c->live_bytes;
  c->n_alloc++;
  return p + 2;
}

static void* c_realloc(void* self, void* ptr, size_t size) {
  counter_t* c = self;
  if (!ptr) return c_alloc(self, size);
  size_t* old = (size_t*)ptr - 2;
  int64_t old_size = (int64_t)old[0];
  size_t* p = realloc(old, size + 16);
  if (!p) return NULL;
  p[0] = size;
  c->live_bytes += (int64_t)size - old_size;
  if (c->live_bytes > c->peak_bytes) c->peak_bytes = c->live_bytes;
  return p + 2;
}

static void c_free(void* self, void* ptr) {
  counter_t* c = self;
  if (!ptr) return;
  size_t* p = (size_t*)ptr - 2;
  c->live_bytes -= (int64_t)p[0];
  c->n_free++;
  free(p);
}

static void test_ref_run_frees_intermediates(void) {
  counter_t cnt = {0};
  kiln_allocator_t ca = {&cnt, c_alloc, c_realloc, c_free};
  enum { LEN = 4096, STEPS = 12 };
  const size_t bytes = LEN * sizeof(float);
  kiln_graph_t* g = NULL;
  CHECK_OK(kiln_graph_create(ca, &g));
  if (!g) return;
  CHECK_OK(kiln_graph_set_opset(g, "", 13));
  kiln_shape_t s = SHAPE(LEN);
  CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &s, NULL));
  /* x -> Neg -> Abs -> Neg -> ... a chain of STEPS intermediates, plus one
   * side branch whose output nobody reads (it must go at once too). */
  const char* ops[] = {"Neg", "Abs", "Relu", "Neg"};
  char prev[32] = "x";
  for (int i = 0; i < STEPS; ++i) {
    char out[32], name[32];
    snprintf(out, sizeof out, "t%d", i);
    snprintf(name, sizeof name, "n%d", i);
    add_node(g, ops[i % 4], name, 1, (const char*[]){prev}, 1, (const char*[]){out}, NO_ATTRS);
    snprintf(prev, sizeof prev, "%s", out);
  }
  add_node(g, "Exp", "dead_end", NAMES("t3"), NAMES("unused"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, prev));
  CHECK_OK(kiln_graph_prepare(g));

  float* xv = malloc(bytes);
  for (int i = 0; i < LEN; ++i) xv[i] = (float)(i % 7) - 3.0f;
  kiln_array_t in = array(ca, KILN_DTYPE_F32, s, xv);
  kiln_array_t out;
  memset(&out, 0, sizeof out);
  int64_t base_live = cnt.live_bytes, base_alloc = cnt.n_alloc, base_free = cnt.n_free;
  cnt.peak_bytes = cnt.live_bytes;
  kiln_ref_options_t o;
  kiln_ref_options_default(&o);
  o.allocator = ca;
  CHECK_OK(kiln_ref_run(g, &in, &o, &out));
  int64_t peak = cnt.peak_bytes - base_live;
  /* Only the output is still held, and it is the run's one surviving block. */
  CHECK_MSG(cnt.live_bytes - base_live == (int64_t)bytes,
            "after the run %lld bytes are live beyond the output",
            (long long)(cnt.live_bytes - base_live - (int64_t)bytes));
  CHECK((cnt.n_alloc - base_alloc) - (cnt.n_free - base_free) == 1);
  /* The intermediates (STEPS arrays + the dead end) never coexist: the peak
   * stays near two arrays plus bookkeeping, well below their sum. */
  int64_t sum = (int64_t)(STEPS + 1) * (int64_t)bytes;
  CHECK_MSG(peak < sum, "peak %lld >= sum of intermediates %lld", (long long)peak,
            (long long)sum);
  CHECK_MSG(peak <= 3 * (int64_t)bytes + 8192, "peak %lld bytes, expected <= ~3 arrays (%zu)",
            (long long)peak, 3 * bytes);
  if (out.data) {
    /* Neg,Abs,Relu,Neg x3 = -|x|. */
    bool ok = true;
    for (int i = 0; i < LEN; ++i) ok = ok && ((float*)out.data)[i] == -fabsf(xv[i]);
    CHECK(ok);
  }
  kiln_array_free(ca, &out);

  /* A failing run (wrong input shape) allocates nothing that survives. */
  kiln_array_t wrong = array(ca, KILN_DTYPE_F32, SHAPE(LEN / 2), NULL);
  int64_t live = cnt.live_bytes;
  CHECK_ERR(kiln_ref_run(g, &wrong, &o, &out), KILN_INVALID_ARGUMENT, "'x'");
  CHECK(cnt.live_bytes == live);
  kiln_array_free(ca, &wrong);

  kiln_array_free(ca, &in);
  kiln_graph_destroy(g);
  free(xv);
  CHECK_MSG(cnt.live_bytes == 0 && cnt.n_alloc == cnt.n_free,
            "%lld bytes in %lld blocks leaked", (long long)cnt.live_bytes,
            (long long)(cnt.n_alloc - cnt.n_free));
}

/* A kernel that fails mid-run (Gather with an index out of range, known
 * only at run time) reports the node and leaves nothing allocated. */
static void test_ref_run_failure_cleans_up(void) {
  counter_t cnt = {0};
  kiln_allocator_t ca = {&cnt, c_alloc, c_realloc, c_free};
  kiln_graph_t* g = NULL;
  CHECK_OK(kiln_graph_create(ca, &g));
  if (!g) return;
  CHECK_OK(kiln_graph_set_opset(g, "", 13));
  kiln_shape_t xs = SHAPE(64), is = SHAPE(2);
  CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &xs, NULL));
  CHECK_OK(kiln_graph_add_input(g, "idx", KILN_DTYPE_I64, &is, NULL));
  add_node(g, "Neg", "neg", NAMES("x"), NAMES("nx"), NO_ATTRS);
  add_node(g, "Abs", "abs", NAMES("x"), NAMES("ax"), NO_ATTRS);
  add_node(g, "Gather", "pick", NAMES("nx", "idx"), NAMES("g"), 1,
           (kiln_attr_t[]){kiln_attr_make_int("axis", 0)});
  add_node(g, "Add", "sum", NAMES("g", "g"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_OK(kiln_graph_add_output(g, "ax"));
  CHECK_OK(kiln_graph_prepare(g));
  kiln_array_t in[2] = {array(ca, KILN_DTYPE_F32, xs, NULL),
                        array(ca, KILN_DTYPE_I64, is, (int64_t[]){3, -1})};
  kiln_array_t out[2];
  memset(out, 0, sizeof out);
  kiln_ref_options_t o;
  kiln_ref_options_default(&o);
  o.allocator = ca;
  CHECK_OK(kiln_ref_run(g, in, &o, out));
  kiln_array_free(ca, &out[0]);
  kiln_array_free(ca, &out[1]);
  int64_t live = cnt.live_bytes;
  ((int64_t*)in[1].data)[1] = 64; /* out of range for axis 0 of size 64 */
  kiln_status_t st = kiln_ref_run(g, in, &o, out);
  CHECK(st != NULL);
  CHECK_MSG(st && strstr(kiln_status_message(st), "pick"), "message: %s",
            kiln_status_message(st));
  kiln_status_free(st);
  CHECK(out[0].data == NULL && out[1].data == NULL);
  CHECK_MSG(cnt.live_bytes == live, "a failed run left %lld bytes allocated",
            (long long)(cnt.live_bytes - live));
  kiln_array_free(ca, &in[0]);
  kiln_array_free(ca, &in[1]);
  kiln_graph_destroy(g);
  CHECK(cnt.live_bytes == 0 && cnt.n_alloc == cnt.n_free);
}

/* Concurrent runs of one graph only read it: threads binding the symbolic
 * batch to different sizes each get their own correct results. */
typedef struct {
  const kiln_graph_t* g;
  int64_t batch;
  int runs;
  int bad;
} worker_t;

/* array() without the (not thread-safe) CHECK counters. */
static kiln_array_t array_quiet(kiln_shape_t s, const float* data, int* bad) {
  kiln_array_t a;
  memset(&a, 0, sizeof a);
  kiln_status_t st = kiln_array_alloc(sys(), KILN_DTYPE_F32, &s, &a);
  if (st) {
    ++*bad;
    kiln_status_free(st);
  } else {
    memcpy(a.data, data, a.nbytes);
  }
  return a;
}

static void* worker(void* arg) {
  worker_t* w = arg;
  int64_t n = w->batch;
  float* xv = malloc(sizeof(float) * (size_t)(n * 3));
  float* zv = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n * 3; ++i) xv[i] = (float)(i % 5) - (float)w->batch;
  for (int64_t i = 0; i < n; ++i) zv[i] = (float)(i + 1);
  kiln_array_t in[3] = {array_quiet(SHAPE(n, 3), xv, &w->bad),
                        array_quiet(SHAPE(1, 3), (float[]){1, 2, 3}, &w->bad),
                        array_quiet(SHAPE(n, 1), zv, &w->bad)};
  for (int r = 0; r < w->runs; ++r) {
    kiln_array_t out;
    memset(&out, 0, sizeof out);
    kiln_status_t st = kiln_ref_run(w->g, in, NULL, &out);
    if (st) {
      w->bad++;
      kiln_status_free(st);
      continue;
    }
    bool ok = out.shape.rank == 2 && out.shape.dims[0] == n && out.shape.dims[1] == 3;
    for (int64_t i = 0; ok && i < n * 3; ++i) {
      float want = (xv[i] + (float)(i % 3 + 1)) * zv[i / 3];
      if (want < 0) want = 0;
      ok = ((float*)out.data)[i] == want;
    }
    if (!ok) w->bad++;
    kiln_array_free(sys(), &out);
  }
  for (int i = 0; i < 3; ++i) kiln_array_free(sys(), &in[i]);
  free(xv);
  free(zv);
  return NULL;
}

static void test_ref_run_concurrent(void) {
  kiln_graph_t* g = new_graph(13);
  if (!g) return;
  int32_t sym;
  CHECK_OK(kiln_graph_symbol(g, "N", &sym));
  int64_t N = kiln_dim_from_symbol(sym);
  kiln_shape_t xs = SHAPE(N, 3), bs = SHAPE(1, 3), zs = SHAPE(N, 1);
  CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &xs, NULL));
  CHECK_OK(kiln_graph_add_input(g, "b", KILN_DTYPE_F32, &bs, NULL));
  CHECK_OK(kiln_graph_add_input(g, "z", KILN_DTYPE_F32, &zs, NULL));
  add_node(g, "Add", "add", NAMES("x", "b"), NAMES("xb"), NO_ATTRS);
  add_node(g, "Mul", "mul", NAMES("xb", "z"), NAMES("m"), NO_ATTRS);
  add_node(g, "Relu", "relu", NAMES("m"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_OK(kiln_graph_prepare(g));
  enum { THREADS = 6 };
  pthread_t th[THREADS];
  worker_t w[THREADS];
  for (int i = 0; i < THREADS; ++i) {
    w[i] = (worker_t){g, 1 + i * 7, 40, 0};
    CHECK(pthread_create(&th[i], NULL, worker, &w[i]) == 0);
  }
  for (int i = 0; i < THREADS; ++i) {
    pthread_join(th[i], NULL);
    CHECK_MSG(w[i].bad == 0, "thread with batch %lld: %d of %d runs wrong",
              (long long)w[i].batch, w[i].bad, w[i].runs);
  }
  /* The graph still says N, not whatever a thread bound it to. */
  CHECK_SHAPE(g, "y", "[N,3]");
  kiln_graph_destroy(g);
}

/* on_node reports every executed node once, in order. */
typedef struct {
  int calls;
  int32_t last;
  bool ordered;
} node_log_t;

static void log_node(void* user, const kiln_graph_t* g, int32_t node, double seconds) {
  node_log_t* l = user;
  l->ordered = l->ordered && node > l->last && seconds >= 0;
  l->last = node;
  l->calls++;
}

static void test_ref_run_callback(void) {
  kiln_graph_t* g = new_graph(13);
  if (!g) return;
  kiln_shape_t s = SHAPE(3);
  CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &s, NULL));
  add_node(g, "Relu", "a", NAMES("x"), NAMES("y"), NO_ATTRS);
  add_node(g, "Neg", "b", NAMES("y"), NAMES("z"), NO_ATTRS);
  add_node(g, "Abs", "c", NAMES("z"), NAMES("w"), NO_ATTRS);
  CHECK_OK(kiln_graph_add_output(g, "w"));
  CHECK_OK(kiln_graph_add_output(g, "y")); /* an output that is also read later */
  CHECK_OK(kiln_graph_add_output(g, "x")); /* a graph input as an output */
  CHECK_OK(kiln_graph_prepare(g));
  node_log_t log = {0, -1, true};
  kiln_ref_options_t o;
  kiln_ref_options_default(&o);
  o.on_node = log_node;
  o.user = &log;
  kiln_array_t in = array(sys(), KILN_DTYPE_F32, s, (float[]){-1, 0, 2});
  kiln_array_t out[3];
  memset(out, 0, sizeof out);
  CHECK_OK(kiln_ref_run(g, &in, &o, out));
  CHECK(log.calls == 3 && log.ordered);
  if (out[0].data && out[1].data && out[2].data) {
    CHECK(((float*)out[0].data)[2] == 2 && ((float*)out[1].data)[0] == 0);
    CHECK(((float*)out[2].data)[0] == -1 && out[2].data != in.data);
  }
  for (int i = 0; i < 3; ++i) kiln_array_free(sys(), &out[i]);
  kiln_array_free(sys(), &in);
  kiln_graph_destroy(g);
}

int main(void) {
  RUN(test_build_by_hand);
  RUN(test_toposort_out_of_order);
  RUN(test_toposort_and_verify_errors);
  RUN(test_infer_symbolic);
  RUN(test_constant_folding);
  RUN(test_dump_and_dot);
  RUN(test_unsupported_ops_listed_together);
  RUN(test_ref_run_frees_intermediates);
  RUN(test_ref_run_failure_cleans_up);
  RUN(test_ref_run_concurrent);
  RUN(test_ref_run_callback);
  return kiln_test_finish();
}
