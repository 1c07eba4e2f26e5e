/* Bad control flow and data-dependent ops (BAD_INPUTS.md rows 6, 7, 10):
 * each an error naming the node, at load time where the shapes show it,
 * else from the reference and the staged executor alike, never a crash or
 * a hang:
 *   - Loop whose trip count is a float, or that has neither a trip count
 *     nor a condition (it would never end);
 *   - a subgraph reading a name no scope defines;
 *   - If without an else_branch, or whose branches disagree with its outputs;
 *   - NonMaxSuppression with boxes not [batches, boxes, 4], or boxes and
 *     scores that disagree on the box count. */
#include "compiler/staged.h"
#include "target_graph_util.h"

/* A one-node body: out = Identity(src) for every name in |outs| (|src| may
 * be a name of the enclosing scope). */
static kiln_graph_t* body(int n_in, const char* const* ins, const kiln_dtype_t* dts, int n_out, const char* const* srcs,
                          const char* const* outs) {
  kiln_graph_t* b = graph_new();
  bool ok = b != NULL;
  for (int i = 0; ok && i < n_in; ++i) ok = input(b, ins[i], dts[i], 0, NULL);
  for (int i = 0; ok && i < n_out; ++i)
    ok = node1(b, "Identity", outs[i], 1, &srcs[i], outs[i], 0, NULL) && CHECK_OK(kiln_graph_add_output(b, outs[i]));
  if (ok) ok = CHECK_OK(kiln_graph_collect_outer(b));
  if (!ok) {
    kiln_graph_destroy(b);
    return NULL;
  }
  return b;
}

/* Loop(M, cond, v) with the body passing cond and v through; M of |mdt|
 * (or omitted with UNDEFINED), cond omitted when !with_cond. */
static kiln_graph_t* loop_model(kiln_dtype_t mdt, bool with_cond) {
  kiln_graph_t* g = graph_new();
  kiln_graph_t* b = body(3, (const char*[]){"i", "c", "v"}, (kiln_dtype_t[]){KILN_DTYPE_I64, KILN_DTYPE_BOOL, KILN_DTYPE_F32},
                         2, (const char*[]){"c", "v"}, (const char*[]){"c2", "v2"});
  if (!g || !b || !CHECK_OK(kiln_graph_adopt_subgraph(g, b))) {
    if (g) kiln_graph_destroy(g);
    else kiln_graph_destroy(b);
    return NULL;
  }
  kiln_attr_t a = {.name = "body", .type = KILN_ATTR_GRAPH, .graph = b};
  bool ok = (mdt == KILN_DTYPE_UNDEFINED || input(g, "M", mdt, 0, NULL)) &&
            (!with_cond || input(g, "cond", KILN_DTYPE_BOOL, 0, NULL)) && input(g, "v", KILN_DTYPE_F32, 0, NULL) &&
            CHECK_OK(kiln_graph_add_node(g, "Loop", "loop", 3,
                                         (const char*[]){mdt == KILN_DTYPE_UNDEFINED ? "" : "M", with_cond ? "cond" : "", "v"},
                                         1, (const char*[]){"vf"}, 1, &a, NULL)) &&
            CHECK_OK(kiln_graph_add_output(g, "vf"));
  if (!ok) {
    kiln_graph_destroy(g);
    return NULL;
  }
  return g;
}

static void test_loop(void) {
  kiln_graph_t* g = loop_model(KILN_DTYPE_F32, false);
  if (g) CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "node 'loop' (Loop): Loop: trip count M 'M' must be one integer");
  kiln_graph_destroy(g);
  g = loop_model(KILN_DTYPE_UNDEFINED, false);
  if (g && CHECK_OK(kiln_graph_prepare(g))) {
    kiln_array_t v = arr(KILN_DTYPE_F32, 0, NULL), out = {0};
    CHECK_ERR(kiln_ref_run(g, &v, NULL, &out), KILN_INVALID_ARGUMENT, "node 'loop' (Loop): Loop: neither a trip count");
    kiln_staged_options_t o = {g_target, g_device, 1, 2, 0, false, 0, NULL};
    kiln_staged_t* st = NULL;
    if (CHECK_OK(kiln_staged_create(g, &o, &st)))
      CHECK_ERR(kiln_staged_run(st, &v, &out), KILN_INVALID_ARGUMENT, "node 'loop' (Loop): Loop: neither a trip count");
    CHECK(out.data == NULL);
    kiln_staged_destroy(st);
    kiln_array_free(al(), &v);
  }
  kiln_graph_destroy(g);
}

/* x -> If(c) with branches made by |mk|; |else_too| false leaves out
 * else_branch. */
static kiln_graph_t* if_model(const char* then_src, int then_outs, bool else_too) {
  kiln_graph_t* g = graph_new();
  const char* srcs[2] = {then_src, then_src};
  kiln_graph_t* t = body(0, NULL, NULL, then_outs, srcs, (const char*[]){"t0", "t1"});
  kiln_graph_t* e = else_too ? body(0, NULL, NULL, 1, (const char*[]){"x"}, (const char*[]){"e0"}) : NULL;
  if (!g || !t || (else_too && !e)) {
    kiln_graph_destroy(t);
    kiln_graph_destroy(e);
    kiln_graph_destroy(g);
    return NULL;
  }
  bool ok = CHECK_OK(kiln_graph_adopt_subgraph(g, t)) && (!e || CHECK_OK(kiln_graph_adopt_subgraph(g, e)));
  kiln_attr_t attrs[2] = {{.name = "then_branch", .type = KILN_ATTR_GRAPH, .graph = t},
                          {.name = "else_branch", .type = KILN_ATTR_GRAPH, .graph = e}};
  const char* ins[4] = {"c"};
  int n_in = 1;
  for (int32_t k = 0; k < t->n_outer; ++k) ins[n_in++] = t->tensors[t->inputs[k]].name;
  for (int32_t k = 0; e && k < e->n_outer; ++k) ins[n_in++] = e->tensors[e->inputs[k]].name;
  ok = ok && input(g, "c", KILN_DTYPE_BOOL, 0, NULL) && input(g, "x", KILN_DTYPE_F32, 0, NULL) &&
       node1(g, "If", "if0", n_in, ins, "y", e ? 2 : 1, attrs) && CHECK_OK(kiln_graph_add_output(g, "y"));
  if (!ok) {
    kiln_graph_destroy(g);
    return NULL;
  }
  return g;
}

static void test_if(void) {
  kiln_graph_t* g = if_model("nosuch", 1, true); /* a name no scope has */
  if (g) CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "nosuch");
  kiln_graph_destroy(g);
  g = if_model("x", 1, false);
  if (g) CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "node 'if0' (If): If: attribute 'else_branch' is missing");
  kiln_graph_destroy(g);
  g = if_model("x", 2, true);
  if (g) CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "node 'if0' (If): If: 1 outputs, then_branch has 2");
  kiln_graph_destroy(g);
}

static void test_nms(void) {
  const int64_t shapes[2][2][3] = {{{1, 3, 5}, {1, 1, 3}}, {{1, 3, 4}, {1, 1, 2}}};
  const char* want[2] = {"node 'nms' (NonMaxSuppression): NonMaxSuppression: boxes 'b' must be [batches, boxes, 4]",
                         "NonMaxSuppression: boxes 'b' hold 3 boxes, scores 's' score 2"};
  for (int c = 0; c < 2; ++c) {
    kiln_graph_t* g = graph_new();
    if (g && input(g, "b", KILN_DTYPE_F32, 3, shapes[c][0]) && input(g, "s", KILN_DTYPE_F32, 3, shapes[c][1]) &&
        node1(g, "NonMaxSuppression", "nms", 2, (const char*[]){"b", "s"}, "sel", 0, NULL) &&
        CHECK_OK(kiln_graph_add_output(g, "sel")))
      CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, want[c]);
    kiln_graph_destroy(g);
  }
}

int main(int argc, char** argv) {
  int rc = target_open(argc, argv);
  if (rc) return rc;
  test_loop();
  test_if();
  test_nms();
  kiln_device_release(g_device);
  return kiln_test_finish();
}
