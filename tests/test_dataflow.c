/* Data-dependent shapes and control flow through the staged executor
 * (compiler/staged.h), beside the reference executor:
 *
 *   test_dataflow [--target cpu|opencl|vulkan]
 *
 *   - Relu -> NonZero -> Reshape -> Cast -> Mul: the NonZero output carries a
 *     data-dependent dim with its upper bound at load time; the stage after
 *     it is compiled for the count each run observes, reused when the count
 *     repeats and compiled again when it changes; outputs have the real
 *     shapes and match the reference;
 *   - TopK whose K is a graph input: the TopK runs on the host, the Add
 *     after it is compiled per K;
 *   - If on a graph input runs either branch; an If whose condition is a
 *     constant is inlined by the graph passes and compiles as plain nodes;
 *   - Loop with a trip count, a loop-carried value, a value from the outer
 *     scope and a scan output: the body is compiled once and reused by every
 *     iteration;
 *   - on a GPU target the host nodes are logged as CPU fallbacks and
 *     --strict (options.strict) refuses them by name. */
#include "compiler/staged.h"
#include "target_graph_util.h"

static kiln_staged_t* staged(const kiln_graph_t* g) {
  kiln_staged_options_t o = {g_target, g_device, 1, 2, g_device->info.loop_limit, false, 0, NULL};
  kiln_staged_t* st = NULL;
  if (!CHECK_OK(kiln_staged_create(g, &o, &st))) return NULL;
  return st;
}

/* Runs |st| and the reference on |in|; outputs must agree in shape and to
 * 1e-5. */
static void same_as_ref(kiln_staged_t* st, const kiln_graph_t* g, const kiln_array_t* in, kiln_array_t* keep0) {
  kiln_array_t got[4], ref[4];
  memset(got, 0, sizeof got);
  memset(ref, 0, sizeof ref);
  if (!st || !CHECK_OK(kiln_staged_run(st, in, got)) || !CHECK_OK(kiln_ref_run(g, in, NULL, ref))) {
    free_arrays(got, g->n_outputs);
    return;
  }
  for (int32_t k = 0; k < g->n_outputs; ++k) {
    CHECK_MSG(kiln_shape_equal(&got[k].shape, &ref[k].shape) && got[k].dtype == ref[k].dtype,
              "output %d: shape or dtype differs from the reference", k);
    if (!kiln_shape_equal(&got[k].shape, &ref[k].shape)) continue;
    for (int64_t i = 0; i < kiln_array_numel(&got[k]); ++i)
      CHECK_NEAR(kiln_load_f64(got[k].dtype, got[k].data, (size_t)i), kiln_load_f64(ref[k].dtype, ref[k].data, (size_t)i),
                 1e-5);
  }
  if (keep0) {
    *keep0 = got[0];
    memset(&got[0], 0, sizeof got[0]);
  }
  free_arrays(got, g->n_outputs);
  free_arrays(ref, g->n_outputs);
}

static void test_nonzero(void) {
  kiln_graph_t* g = graph_new();
  int64_t xd[1] = {8}, one[1] = {1};
  kiln_array_t two = arr(KILN_DTYPE_F32, 1, one), flat = arr(KILN_DTYPE_I64, 1, one);
  if (two.data) ((float*)two.data)[0] = 2.0f;
  if (flat.data) ((int64_t*)flat.data)[0] = -1;
  kiln_attr_t to32 = kiln_attr_make_int("to", 1);
  bool ok = g && two.data && flat.data && input(g, "x", KILN_DTYPE_F32, 1, xd) &&
            CHECK_OK(kiln_graph_add_initializer(g, "two", &two, NULL)) &&
            CHECK_OK(kiln_graph_add_initializer(g, "flat", &flat, NULL)) &&
            node1(g, "Relu", "relu", 1, (const char*[]){"x"}, "r", 0, NULL) &&
            node1(g, "NonZero", "nz", 1, (const char*[]){"r"}, "idx", 0, NULL) &&
            node1(g, "Reshape", "rs", 2, (const char*[]){"idx", "flat"}, "f", 0, NULL) &&
            node1(g, "Cast", "cast", 1, (const char*[]){"f"}, "fc", 1, &to32) &&
            node1(g, "Mul", "mul", 2, (const char*[]){"fc", "two"}, "y", 0, NULL) &&
            CHECK_OK(kiln_graph_add_output(g, "y")) && CHECK_OK(kiln_graph_add_output(g, "idx")) &&
            CHECK_OK(kiln_graph_prepare(g));
  kiln_array_free(al(), &two);
  kiln_array_free(al(), &flat);
  if (ok) {
    const kiln_tensor_t* idx = &g->tensors[kiln_graph_find_tensor(g, "idx")];
    CHECK(idx->flags & KILN_TENSOR_DATADEP);
    CHECK(idx->shape.rank == 2 && idx->shape.dims[0] == 1 && kiln_dim_symbol(idx->shape.dims[1]));
    CHECK(kiln_graph_datadep_bound(g, idx->shape.dims[1]) == 8);
    CHECK(kiln_graph_needs_staging(g));
    kiln_staged_t* st = staged(g);
    kiln_array_t x = arr(KILN_DTYPE_F32, 1, xd);
    const float a[8] = {1, -1, 2, 0, 3, -2, 0, 0}, b[8] = {-1, 4, 0, 5, 0, 6, 7, -3}, c[8] = {0, 0, 9, 1, 1, 0, 0, -1};
    const float* sets[4] = {a, b, a, c}; /* counts 3, 4, 3, 3 (c: other places) */
    kiln_array_t y = {0};
    for (int r = 0; r < 4 && x.data; ++r) {
      memcpy(x.data, sets[r], sizeof a);
      same_as_ref(st, g, &x, &y);
      CHECK(y.shape.rank == 1 && y.shape.dims[0] == (r == 1 ? 4 : 3));
      if (r == 3 && y.data) CHECK(((float*)y.data)[0] == 4.0f && ((float*)y.data)[2] == 8.0f);
      kiln_array_free(al(), &y);
    }
    kiln_staged_stats_t ss;
    if (st) {
      kiln_staged_stats(st, &ss);
      /* Relu stage once; the tail for 3 and for 4 values */
      CHECK_MSG(ss.stages == 3 && ss.host_nodes == 1 && ss.compiles == 3 && ss.reuses == 5,
                "stages %d host %d compiles %d reuses %d", ss.stages, ss.host_nodes, ss.compiles, ss.reuses);
    }
    kiln_array_free(al(), &x);
    kiln_staged_destroy(st);
  }
  kiln_graph_destroy(g);
}

static void test_topk_runtime_k(void) {
  kiln_graph_t* g = graph_new();
  int64_t xd[2] = {2, 6}, one[1] = {1};
  kiln_array_t b = arr(KILN_DTYPE_F32, 1, one);
  if (b.data) ((float*)b.data)[0] = 0.5f;
  bool ok = g && b.data && input(g, "x", KILN_DTYPE_F32, 2, xd) && input(g, "k", KILN_DTYPE_I64, 1, one) &&
            CHECK_OK(kiln_graph_add_initializer(g, "b", &b, NULL)) &&
            CHECK_OK(kiln_graph_add_node(g, "TopK", "topk", 2, (const char*[]){"x", "k"}, 2,
                                         (const char*[]){"v", "i"}, 0, NULL, NULL)) &&
            node1(g, "Add", "add", 2, (const char*[]){"v", "b"}, "y", 0, NULL) &&
            CHECK_OK(kiln_graph_add_output(g, "y")) && CHECK_OK(kiln_graph_add_output(g, "i")) &&
            CHECK_OK(kiln_graph_prepare(g));
  kiln_array_free(al(), &b);
  if (ok) {
    CHECK(g->tensors[kiln_graph_find_tensor(g, "v")].flags & KILN_TENSOR_DATADEP);
    kiln_staged_t* st = staged(g);
    kiln_array_t in[2] = {arr(KILN_DTYPE_F32, 2, xd), arr(KILN_DTYPE_I64, 1, one)};
    for (int i = 0; i < 12 && in[0].data; ++i) ((float*)in[0].data)[i] = (float)((i * 5) % 7) - 3.0f;
    const int64_t ks[3] = {2, 5, 2};
    for (int r = 0; r < 3 && in[1].data; ++r) {
      ((int64_t*)in[1].data)[0] = ks[r];
      kiln_array_t y = {0};
      same_as_ref(st, g, in, &y);
      CHECK(y.shape.rank == 2 && y.shape.dims[1] == ks[r]);
      kiln_array_free(al(), &y);
    }
    kiln_staged_stats_t ss;
    if (st) {
      kiln_staged_stats(st, &ss);
      CHECK_MSG(ss.compiles == 2 && ss.reuses == 1, "compiles %d reuses %d", ss.compiles, ss.reuses);
    }
    free_arrays(in, 2);
    kiln_staged_destroy(st);
  }
  kiln_graph_destroy(g);
}

/* A branch: y = x OP c (c a constant of the branch), reading x from the
 * enclosing scope. */
static kiln_graph_t* branch(const char* op, float cv) {
  kiln_graph_t* b = graph_new();
  int64_t one[1] = {1};
  kiln_array_t c = arr(KILN_DTYPE_F32, 1, one);
  if (c.data) ((float*)c.data)[0] = cv;
  bool ok = b && c.data && CHECK_OK(kiln_graph_add_initializer(b, "c", &c, NULL)) &&
            node1(b, op, "op", 2, (const char*[]){"x", "c"}, "y", 0, NULL) && CHECK_OK(kiln_graph_add_output(b, "y")) &&
            CHECK_OK(kiln_graph_collect_outer(b));
  kiln_array_free(al(), &c);
  if (!ok) {
    kiln_graph_destroy(b);
    return NULL;
  }
  CHECK(b->n_outer == 1);
  return b;
}

/* x -> If(cond) {x + 1} else {x - 1}; cond a graph input, or the constant
 * |konst| (0/1) when >= 0. */
static kiln_graph_t* if_model(int konst) {
  kiln_graph_t* g = graph_new();
  int64_t xd[1] = {4};
  kiln_graph_t* t = branch("Add", 1.0f);
  kiln_graph_t* e = branch("Sub", 1.0f);
  if (!g || !t || !e) {
    kiln_graph_destroy(t);
    kiln_graph_destroy(e);
    kiln_graph_destroy(g);
    return NULL;
  }
  bool ok = CHECK_OK(kiln_graph_adopt_subgraph(g, t)) && CHECK_OK(kiln_graph_adopt_subgraph(g, e));
  kiln_attr_t attrs[2] = {{.name = "then_branch", .type = KILN_ATTR_GRAPH, .graph = t},
                          {.name = "else_branch", .type = KILN_ATTR_GRAPH, .graph = e}};
  if (ok && konst >= 0) {
    kiln_array_t c = arr(KILN_DTYPE_BOOL, 0, NULL);
    if (c.data) ((uint8_t*)c.data)[0] = (uint8_t)konst;
    ok = c.data && CHECK_OK(kiln_graph_add_initializer(g, "cond", &c, NULL));
    kiln_array_free(al(), &c);
  } else if (ok) {
    ok = input(g, "cond", KILN_DTYPE_BOOL, 0, NULL);
  }
  ok = ok && input(g, "x", KILN_DTYPE_F32, 1, xd) &&
       node1(g, "If", "if0", 3, (const char*[]){"cond", "x", "x"}, "y", 2, attrs) &&
       node1(g, "Relu", "relu", 1, (const char*[]){"y"}, "out", 0, NULL) && CHECK_OK(kiln_graph_add_output(g, "out")) &&
       CHECK_OK(kiln_graph_prepare(g));
  if (!ok) {
    kiln_graph_destroy(g);
    return NULL;
  }
  return g;
}

static void test_if(void) {
  kiln_graph_t* g = if_model(-1);
  if (g) {
    kiln_staged_t* st = staged(g);
    int64_t xd[1] = {4};
    kiln_array_t in[2] = {arr(KILN_DTYPE_BOOL, 0, NULL), arr(KILN_DTYPE_F32, 1, xd)};
    for (int i = 0; i < 4 && in[1].data; ++i) ((float*)in[1].data)[i] = (float)i - 0.5f;
    for (int c = 0; c < 2 && in[0].data; ++c) {
      ((uint8_t*)in[0].data)[0] = (uint8_t)c;
      kiln_array_t y = {0};
      same_as_ref(st, g, in, &y);
      if (y.data) CHECK_NEAR(((float*)y.data)[3], c ? 3.5 : 1.5, 1e-6);
      kiln_array_free(al(), &y);
    }
    free_arrays(in, 2);
    kiln_staged_destroy(st);
  }
  kiln_graph_destroy(g);
  /* a constant condition: inlined, then a plain compile */
  g = if_model(1);
  if (g && CHECK_OK(kiln_graph_optimize(g, 1, NULL))) {
    bool any_if = false;
    for (int32_t i = 0; i < g->n_nodes; ++i) any_if |= !strcmp(g->nodes[i].op_type, "If");
    CHECK_MSG(!any_if, "the If on a constant condition was not inlined");
    CHECK(!kiln_graph_needs_staging(g));
    kiln_module_t* m = compile(g);
    kiln_session_t* s = session(m);
    int64_t xd[1] = {4};
    kiln_array_t x = arr(KILN_DTYPE_F32, 1, xd), y = {0};
    for (int i = 0; i < 4 && x.data; ++i) ((float*)x.data)[i] = (float)i - 2.0f;
    if (s && x.data && CHECK_OK(kiln_session_run(s, &x, &y)))
      for (int i = 0; i < 4; ++i) CHECK_NEAR(((float*)y.data)[i], i - 1.0 > 0 ? i - 1.0 : 0.0, 1e-6);
    kiln_array_free(al(), &x);
    kiln_array_free(al(), &y);
    kiln_session_destroy(s);
    kiln_module_release(m);
  }
  kiln_graph_destroy(g);
}

/* Loop M times: y = y + x (x from the outer scope), scanning each y; M, y0
 * and x graph inputs, or with |konst| constants (M = 3, y0 = 1, x = 2:
 * nothing may fold the Loop without running its body). */
static kiln_graph_t* loop_model(bool konst) {
  kiln_graph_t* g = graph_new();
  kiln_graph_t* b = graph_new();
  int64_t two[1] = {2};
  bool ok = g && b && input(b, "i", KILN_DTYPE_I64, 0, NULL) && input(b, "c", KILN_DTYPE_BOOL, 0, NULL) &&
            input(b, "y", KILN_DTYPE_F32, 1, two) && node1(b, "Add", "acc", 2, (const char*[]){"y", "x"}, "y2", 0, NULL) &&
            node1(b, "Identity", "keep", 1, (const char*[]){"c"}, "c2", 0, NULL) &&
            node1(b, "Identity", "scan", 1, (const char*[]){"y2"}, "s", 0, NULL) &&
            CHECK_OK(kiln_graph_add_output(b, "c2")) && CHECK_OK(kiln_graph_add_output(b, "y2")) &&
            CHECK_OK(kiln_graph_add_output(b, "s")) && CHECK_OK(kiln_graph_collect_outer(b));
  if (!ok || !CHECK_OK(kiln_graph_adopt_subgraph(g, b))) {
    if (!ok) kiln_graph_destroy(b);
    kiln_graph_destroy(g);
    return NULL;
  }
  kiln_attr_t body = {.name = "body", .type = KILN_ATTR_GRAPH, .graph = b};
  if (konst) {
    kiln_array_t m = arr(KILN_DTYPE_I64, 0, NULL), y0 = arr(KILN_DTYPE_F32, 1, two), x = arr(KILN_DTYPE_F32, 1, two);
    ok = m.data && y0.data && x.data;
    if (ok) {
      ((int64_t*)m.data)[0] = 3;
      ((float*)y0.data)[0] = ((float*)y0.data)[1] = 1;
      ((float*)x.data)[0] = ((float*)x.data)[1] = 2;
    }
    ok = ok && CHECK_OK(kiln_graph_add_initializer(g, "M", &m, NULL)) &&
         CHECK_OK(kiln_graph_add_initializer(g, "y0", &y0, NULL)) && CHECK_OK(kiln_graph_add_initializer(g, "x", &x, NULL));
    kiln_array_free(al(), &m);
    kiln_array_free(al(), &y0);
    kiln_array_free(al(), &x);
  } else {
    ok = input(g, "M", KILN_DTYPE_I64, 0, NULL) && input(g, "y0", KILN_DTYPE_F32, 1, two) &&
         input(g, "x", KILN_DTYPE_F32, 1, two);
  }
  ok = ok &&
       CHECK_OK(kiln_graph_add_node(g, "Loop", "loop", 4, (const char*[]){"M", "", "y0", "x"}, 2,
                                    (const char*[]){"yf", "ys"}, 1, &body, NULL)) &&
       CHECK_OK(kiln_graph_add_output(g, "yf")) && CHECK_OK(kiln_graph_add_output(g, "ys")) &&
       CHECK_OK(kiln_graph_prepare(g));
  if (!ok) {
    kiln_graph_destroy(g);
    return NULL;
  }
  return g;
}

static void test_loop(void) {
  kiln_graph_t* g = loop_model(true);
  if (g && CHECK_OK(kiln_graph_optimize(g, 1, NULL))) {
    kiln_staged_t* st = staged(g);
    kiln_array_t out[2] = {{0}};
    if (st && CHECK_OK(kiln_staged_run(st, NULL, out)) && out[1].data) {
      CHECK(out[1].shape.rank == 2 && out[1].shape.dims[0] == 3);
      CHECK_NEAR(((float*)out[0].data)[1], 7.0, 1e-6);
    }
    free_arrays(out, 2);
    kiln_staged_destroy(st);
  }
  kiln_graph_destroy(g);
  g = loop_model(false);
  if (!g) return;
  CHECK(g->tensors[kiln_graph_find_tensor(g, "ys")].flags & KILN_TENSOR_DATADEP);
  kiln_staged_t* st = staged(g);
  int64_t two[1] = {2};
  kiln_array_t in[3] = {arr(KILN_DTYPE_I64, 0, NULL), arr(KILN_DTYPE_F32, 1, two), arr(KILN_DTYPE_F32, 1, two)};
  if (in[0].data && in[1].data && in[2].data) {
    ((int64_t*)in[0].data)[0] = 5;
    ((float*)in[1].data)[0] = 1, ((float*)in[1].data)[1] = -1;
    ((float*)in[2].data)[0] = 0.5f, ((float*)in[2].data)[1] = 2;
    kiln_array_t yf = {0};
    same_as_ref(st, g, in, &yf);
    if (yf.data) CHECK_NEAR(((float*)yf.data)[1], -1 + 5 * 2, 1e-6);
    kiln_array_free(al(), &yf);
    ((int64_t*)in[0].data)[0] = 0; /* no iteration: y0 back, an empty scan */
    same_as_ref(st, g, in, NULL);
  }
  kiln_staged_stats_t ss;
  if (st) {
    kiln_staged_stats(st, &ss);
    CHECK_MSG(ss.compiles == 1 && ss.reuses == 4, "body compiles %d reuses %d", ss.compiles, ss.reuses);
  }
  free_arrays(in, 3);
  kiln_staged_destroy(st);
  kiln_graph_destroy(g);
}

static void test_log_and_strict(void) {
  kiln_graph_t* g = if_model(-1);
  if (!g) return;
  kiln_compile_log_t log = {0};
  if (CHECK_OK(kiln_staged_log(g, g_target, &log))) {
    bool named = false;
    for (int32_t i = 0; i < log.n; ++i)
      named |= log.entries[i].text && strstr(log.entries[i].text, "node 'if0' (If) runs on the") != NULL;
    CHECK_MSG(named, "the log does not name the host node");
  }
  kiln_compile_log_free(&log);
  kiln_staged_options_t o = {g_target, g_device, 1, 2, 0, true, 0, NULL};
  kiln_staged_t* st = NULL;
  kiln_status_t s = kiln_staged_create(g, &o, &st);
  if (g_target->lowering == KILN_TARGET_CLASS_GPU)
    CHECK_ERR(s, KILN_UNSUPPORTED, "node 'if0' (If) cannot run on the");
  else
    CHECK_OK(s);
  kiln_staged_destroy(st);
  kiln_graph_destroy(g);
}

int main(int argc, char** argv) {
  int rc = target_open(argc, argv);
  if (rc) return rc;
  test_nonzero();
  test_topk_runtime_k();
  test_if();
  test_loop();
  test_log_and_strict();
  kiln_device_release(g_device);
  return kiln_test_finish();
}
