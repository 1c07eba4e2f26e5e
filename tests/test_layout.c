/* Tests for the memory-layout pass (lowering/layout.c) and the blocked
 * kernels (lowering/lower_nn_conv_blocked.c).
 *
 * The pass: on small graphs, which tensors are NCHWc and which nodes run
 * blocked, that reorders appear only at the edges (an op that needs NCHW,
 * a model output) and once per tensor and layout, that the naive form's
 * pairs cancel, that conv weights are re-laid out at compile time (the
 * plan's kernels read the packed constants, never the model's weights) and
 * that blocked tensors get [N][ceil(C/c)][H][W][c] buffers.
 *
 * The kernels: convolutions with strides, pads (asymmetric), dilation,
 * depthwise groups, with and without bias, channel counts that are not
 * multiples of the block (remainder lanes), from a plain input (a stem)
 * and from a blocked one, MaxPool (ceil mode) and AveragePool (with and
 * without count_include_pad), Concat on channels, GlobalAveragePool,
 * BatchNormalization with constant statistics and element-wise ops with a
 * scalar, run on the CPU backend with blocks of 8 and 16 lanes against
 * the reference executor. KILN_TEST_NO_CPU=1 skips the native runs. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/ref_exec.h"
#include "ir/op.h"
#include "lowering/fuse.h"
#include "lowering/layout.h"
#include "lowering/plan.h"
#include "targets/cpu/cpu_backend.h"
#include "testing.h"

#include "tg_graph_util.h"

static int32_t node(const kiln_graph_t* g, const char* name) {
  for (int32_t i = 0; i < g->n_nodes; ++i)
    if (!strcmp(g->nodes[i].name, name)) return i;
  return -1;
}

/* ---- the pass ------------------------------------------------------------ */

/* x [1,3,10,10] -> Conv c1 (16, 3x3 pad 1) -> Relu r1 -> Conv c2 (16) -> Add
 * a (r1 + c2) -> Transpose t (needs NCHW) -> Relu r2 -> output y; the Add
 * also feeds GlobalAveragePool gp -> output z, and Relu r3 -> output w. */
static void build_net(tg_t* t) {
  tg_init(t);
  tg_input(t, "x", DIMS(1, 3, 10, 10));
  tg_const(t, "w1", 4, DIMS(16, 3, 3, 3));
  tg_const(t, "b1", 1, DIMS(16));
  tg_const(t, "w2", 4, DIMS(16, 16, 3, 3));
  static const int64_t p1[4] = {1, 1, 1, 1}, perm[4] = {0, 1, 3, 2};
  kiln_attr_t pads = ints("pads", 4, p1);
  tg_node(t, "Conv", "c1", 3, NAMES("x", "w1", "b1"), "h1", 1, &pads);
  tg_node(t, "Relu", "r1", 1, NAMES("h1"), "h2", 0, NULL);
  tg_node(t, "Conv", "c2", 2, NAMES("h2", "w2"), "h3", 1, &pads);
  tg_node(t, "Add", "a", 2, NAMES("h2", "h3"), "h4", 0, NULL);
  kiln_attr_t pa = ints("perm", 4, perm);
  tg_node(t, "Transpose", "t", 1, NAMES("h4"), "h5", 1, &pa);
  tg_node(t, "Relu", "r2", 1, NAMES("h5"), "y", 0, NULL);
  tg_node(t, "GlobalAveragePool", "gp", 1, NAMES("h4"), "z", 0, NULL);
  tg_node(t, "Relu", "r3", 1, NAMES("h4"), "w", 0, NULL);
  tg_output(t, "y");
  tg_output(t, "z");
  tg_output(t, "w");
}

static void test_pass(void) {
  tg_t t;
  build_net(&t);
  if (!t.ok || !CHECK_OK(kiln_graph_prepare(t.g))) {
    tg_free(&t);
    return;
  }
  const kiln_graph_t* g = t.g;
  kiln_layout_t l;
  if (!CHECK_OK(kiln_layout_choose(g, 8, &l))) {
    tg_free(&t);
    return;
  }
  /* blocked: the convs (c1 reads the model input as is), r1, a, gp, r3 */
  CHECK(l.node_blocked[node(g, "c1")] && l.node_blocked[node(g, "r1")] && l.node_blocked[node(g, "c2")]);
  CHECK(l.node_blocked[node(g, "a")] && l.node_blocked[node(g, "gp")] && l.node_blocked[node(g, "r3")]);
  CHECK(!l.node_blocked[node(g, "t")] && !l.node_blocked[node(g, "r2")]); /* r2's input is plain */
  CHECK(l.tensor_block[tensor(g, "x")] == 0 && kiln_layout_in_port(&l, g, node(g, "c1"), 0) == 0);
  CHECK(l.tensor_block[tensor(g, "h1")] == 8 && l.tensor_block[tensor(g, "h2")] == 8);
  CHECK(l.tensor_block[tensor(g, "h4")] == 8 && l.tensor_block[tensor(g, "h5")] == 0);
  /* model outputs stay NCHW; GlobalAveragePool writes its plain output */
  CHECK(l.tensor_block[tensor(g, "y")] == 0 && l.tensor_block[tensor(g, "z")] == 0 && l.tensor_block[tensor(g, "w")] == 0);
  CHECK(kiln_layout_out_port(&l, g, node(g, "gp"), 0) == 0 && kiln_layout_out_port(&l, g, node(g, "r3"), 0) == 8);
  /* reorders: h4 -> NCHW for the Transpose, and r3's output w */
  CHECK_MSG(l.n_reorders == 2, "reorders %d, expected 2", (int)l.n_reorders);
  /* the naive form wraps each of the 7 nodes that can run blocked (r2
   * too): 8 data inputs (Add has two) + 6 outputs (not GlobalAveragePool's) */
  CHECK_MSG(l.n_reorders_naive == 14, "naive reorders %d", (int)l.n_reorders_naive);
  kiln_layout_free(&l);

  /* No block: everything plain, no reorders. */
  CHECK_OK(kiln_layout_choose(g, 0, &l));
  for (int32_t i = 0; i < g->n_tensors; ++i) CHECK(l.tensor_block[i] == 0);
  CHECK(l.n_reorders == 0 && l.n_blocked_nodes == 0);
  kiln_layout_free(&l);

  /* The plan: blocked buffers, reorder kernels, weights re-laid out. */
  kiln_plan_options_t po = {.target = KILN_TARGET_CLASS_CPU, .threads = 2, .layout_block = 8};
  kiln_plan_t* p = NULL;
  if (CHECK_OK(kiln_plan_build(g, &po, A(), &p))) {
    const tir_buffer_t* h2 = p->buffers[p->tensor_buffer[tensor(g, "h2")]].buf;
    CHECK(h2->rank == 5 && h2->shape[1] == 2 && h2->shape[4] == 8);
    int reorders = 0;
    for (int32_t k = 0; k < p->n_kernels; ++k) reorders += strstr(p->kernels[k].func->name, "_reorder_") != NULL;
    CHECK_MSG(reorders == 2, "reorder kernels %d", reorders);
    /* no kernel reads the model's conv weights: they were packed (or
     * Winograd-transformed and packed) */
    const int32_t w1 = p->tensor_buffer[tensor(g, "w1")], w2 = p->tensor_buffer[tensor(g, "w2")];
    bool packed = false;
    for (int32_t k = 0; k < p->n_kernels; ++k)
      for (int32_t a = 0; a < p->kernels[k].func->n_params; ++a) {
        int32_t b = p->kernels[k].args[a];
        CHECK(b != w1 && b != w2);
        packed = packed || (p->buffers[b].kind == KILN_PLAN_CONST && (strstr(p->buffers[b].buf->name, "wpack_blk") ||
                                                                      strstr(p->buffers[b].buf->name, "wino_w")));
      }
    CHECK(packed);
  }
  kiln_plan_destroy(p);
  /* A GPU plan ignores the block (the pass is the CPU target's for now). */
  kiln_plan_options_t pg = {.target = KILN_TARGET_CLASS_GPU, .layout_block = 8};
  if (CHECK_OK(kiln_plan_build(g, &pg, A(), &p))) CHECK(p->layout == NULL);
  kiln_plan_destroy(p);
  tg_free(&t);
}

/* ---- the kernels ------------------------------------------------------------ */

typedef struct conv_case_s {
  int64_t C, M, H, W, k, s, d, pt, pl, pb, pr, group;
  bool bias, blocked_in; /* blocked_in: a 1x1 conv before it makes its input NCHWc */
} conv_case_t;

static const conv_case_t k_cases[] = {
    /* C   M   H   W  k  s  d pt pl pb pr grp bias blocked_in */
    {3, 16, 17, 15, 7, 2, 1, 3, 3, 3, 3, 1, true, false},   /* stem from NCHW */
    {16, 16, 9, 9, 3, 1, 1, 1, 1, 1, 1, 1, true, true},     /* padded copy */
    {5, 12, 8, 11, 3, 1, 1, 1, 0, 2, 1, 1, false, true},    /* remainders, asymmetric pads */
    {13, 20, 10, 10, 3, 2, 1, 1, 1, 1, 1, 1, true, true},   /* stride 2 */
    {12, 9, 12, 12, 3, 1, 2, 2, 2, 2, 2, 1, true, true},    /* dilation 2 */
    {24, 40, 6, 6, 1, 1, 1, 0, 0, 0, 0, 1, true, true},     /* 1x1 in place */
    {40, 16, 7, 7, 1, 2, 1, 0, 0, 0, 0, 1, false, true},    /* 1x1 stride 2 */
    {20, 20, 11, 9, 3, 1, 1, 1, 1, 1, 1, 20, true, true},   /* depthwise */
    {12, 12, 10, 10, 5, 2, 1, 2, 2, 2, 2, 12, true, true},  /* depthwise 5x5 stride 2 */
    {10, 10, 7, 7, 3, 1, 2, 2, 1, 2, 1, 10, false, true},   /* depthwise dilated, remainder */
    {16, 16, 12, 23, 5, 2, 1, 2, 2, 2, 2, 16, true, true},  /* depthwise 5x5 s2: 4-column tiles + rest */
    {8, 8, 6, 14, 5, 1, 1, 2, 2, 2, 2, 8, false, true},     /* depthwise 5x5 s1: 2 tiles */
    {128, 256, 4, 4, 3, 1, 1, 1, 1, 1, 1, 1, true, true},   /* big weights: N blocks, K blocks of 64 */
    {96, 24, 6, 5, 3, 1, 1, 1, 1, 1, 1, 1, true, true},     /* K blocks of 48 (block 8 and 16) */
    {128, 16, 7, 7, 3, 2, 1, 1, 1, 1, 1, 1, false, true},   /* K blocks, stride 2, no bias */
    {100, 12, 5, 5, 1, 1, 1, 0, 0, 0, 0, 1, true, true},    /* C not whole blocks: one K block */
    {80, 16, 6, 6, 3, 1, 1, 1, 1, 1, 1, 1, true, false},    /* many channels from NCHW */
    {20, 44, 9, 7, 3, 1, 1, 1, 1, 1, 1, 1, true, true},     /* 3 blocks of 16 a tile column, remainder */
    {24, 136, 5, 7, 1, 1, 1, 0, 0, 0, 0, 1, false, true},   /* 9 blocks of 16: 3 tiles of 3 blocks */
};
#define N_CASES ((int)(sizeof k_cases / sizeof k_cases[0]))

/* One graph with every case as its own input -> [1x1 conv ->] conv ->
 * Relu -> output; then GlobalAveragePool of the last case and an Add of a
 * scalar. */
static void build_cases(tg_t* t) {
  tg_init(t);
  for (int i = 0; i < N_CASES && t->ok; ++i) {
    const conv_case_t* c = &k_cases[i];
    char x[16], x1[16], w0[16], w[16], b[16], h[16], y[16], n0[16], n1[16], n2[16];
    snprintf(x, sizeof x, "x%d", i), snprintf(x1, sizeof x1, "xb%d", i), snprintf(w0, sizeof w0, "w0_%d", i);
    snprintf(w, sizeof w, "w%d", i), snprintf(b, sizeof b, "b%d", i), snprintf(h, sizeof h, "h%d", i);
    snprintf(y, sizeof y, "y%d", i), snprintf(n0, sizeof n0, "pre%d", i), snprintf(n1, sizeof n1, "conv%d", i);
    snprintf(n2, sizeof n2, "relu%d", i);
    tg_input(t, x, DIMS(1, c->C, c->H, c->W));
    const char* xin = x;
    if (c->blocked_in) {
      tg_const(t, w0, 4, DIMS(c->C, c->C, 1, 1));
      tg_node(t, "Conv", n0, 2, NAMES(x, w0), x1, 0, NULL);
      xin = x1;
    }
    tg_const(t, w, 4, DIMS(c->M, c->C / c->group, c->k, c->k));
    if (c->bias) tg_const(t, b, 1, DIMS(c->M));
    const int64_t* pads = (int64_t[]){c->pt, c->pl, c->pb, c->pr};
    kiln_attr_t at[4] = {ints("pads", 4, pads), ints("strides", 2, (int64_t[]){c->s, c->s}),
                         ints("dilations", 2, (int64_t[]){c->d, c->d}), one_int("group", c->group)};
    /* the attribute arrays above live until the node copies them */
    tg_node(t, "Conv", n1, c->bias ? 3 : 2, NAMES(xin, w, b), h, 4, at);
    tg_node(t, "Relu", n2, 1, NAMES(h), y, 0, NULL);
    tg_output(t, y);
  }
  char last[16];
  snprintf(last, sizeof last, "h%d", N_CASES - 1);
  tg_node(t, "GlobalAveragePool", "gap", 1, NAMES(last), "gapo", 0, NULL);
  tg_output(t, "gapo");
  /* pools on case 1's blocked conv output [1,16,9,9] */
  static const int64_t pp[4] = {1, 1, 1, 1}, pa[4] = {0, 1, 1, 0}, k3[2] = {3, 3}, s2[2] = {2, 2};
  kiln_attr_t mp[4] = {ints("kernel_shape", 2, k3), ints("strides", 2, s2), ints("pads", 4, pp), one_int("ceil_mode", 1)};
  tg_node(t, "MaxPool", "mpool", 1, NAMES("h1"), "mpo", 4, mp);
  tg_output(t, "mpo");
  kiln_attr_t ap[3] = {ints("kernel_shape", 2, k3), ints("pads", 4, pa), one_int("count_include_pad", 0)};
  tg_node(t, "AveragePool", "apool", 1, NAMES("h1"), "apo", 3, ap);
  tg_output(t, "apo");
  kiln_attr_t ap1[4] = {ints("kernel_shape", 2, k3), ints("pads", 4, pp), ints("strides", 2, s2),
                        one_int("count_include_pad", 1)};
  tg_node(t, "AveragePool", "apool1", 1, NAMES("h1"), "apo1", 4, ap1);
  tg_output(t, "apo1");
  /* Concat of case 1's output (16 channels: whole blocks of 8 and 16) and
   * a 1x1 conv of it to 20 (a remainder in the last input) */
  tg_const(t, "wcat", 4, DIMS(20, 16, 1, 1));
  tg_node(t, "Conv", "catc", 2, NAMES("h1", "wcat"), "h1b", 0, NULL);
  tg_node(t, "Concat", "cat", 2, NAMES("h1", "h1b"), "cato", 1, (kiln_attr_t[]){one_int("axis", 1)});
  tg_node(t, "Relu", "catr", 1, NAMES("cato"), "catro", 0, NULL);
  tg_output(t, "catro");
  /* squeeze-excite on the 20-channel conv output (a remainder block): its
   * channel scale [1,20,1,1] is read blocked, so the Mul runs blocked */
  tg_const(t, "wse", 4, DIMS(20, 20, 1, 1));
  tg_node(t, "GlobalAveragePool", "segap", 1, NAMES("h1b"), "sep", 0, NULL);
  tg_node(t, "Conv", "seconv", 2, NAMES("sep", "wse"), "sec", 0, NULL);
  tg_node(t, "Sigmoid", "sesig", 1, NAMES("sec"), "ses", 0, NULL);
  tg_node(t, "Mul", "semul", 2, NAMES("ses", "h1b"), "sem", 0, NULL);
  tg_node(t, "Relu", "serelu", 1, NAMES("sem"), "sero", 0, NULL);
  tg_output(t, "sero");
  /* BatchNormalization after a Relu (no conv absorbs it) on the
   * 20-channel output: runs blocked, its per-channel a and b padded to
   * whole blocks; var positive */
  tg_const(t, "bns", 1, DIMS(20));
  tg_const(t, "bnb", 1, DIMS(20));
  tg_const(t, "bnm", 1, DIMS(20));
  if (t->ok) {
    kiln_array_t v = rand_array(1, DIMS(20));
    for (int64_t k = 0; k < 20; ++k) kiln_store_f64(F32, v.data, (size_t)k, 0.25 + fabs(kiln_load_f64(F32, v.data, (size_t)k)));
    t->ok = CHECK_OK(kiln_graph_add_initializer(t->g, "bnv", &v, NULL));
  }
  tg_node(t, "Relu", "bnin", 1, NAMES("h1b"), "bni", 0, NULL);
  tg_node(t, "BatchNormalization", "bn", 5, NAMES("bni", "bns", "bnb", "bnm", "bnv"), "bno", 0, NULL);
  tg_node(t, "Relu", "bnrelu", 1, NAMES("bno"), "bnro", 0, NULL);
  tg_output(t, "bnro");
  tg_scalar(t, "half", 0.5);
  tg_node(t, "Mul", "scale", 2, NAMES("h1", "half"), "sc", 0, NULL);
  tg_node(t, "Sigmoid", "sig", 1, NAMES("sc"), "sg", 0, NULL);
  tg_node(t, "Add", "res", 2, NAMES("sg", "h1"), "ro", 0, NULL);
  tg_output(t, "ro");
}


static void test_kernels(int32_t block) {
  tg_t t;
  build_cases(&t);
  if (!t.ok || !CHECK_OK(kiln_graph_prepare(t.g))) {
    tg_free(&t);
    return;
  }
  const kiln_graph_t* g = t.g;
  /* one output per case, then the pools', Concat's and the element-wise
   * chains' (build_cases) */
  kiln_array_t want[N_CASES + 8], got[N_CASES + 8];
  if (g->n_outputs > N_CASES + 8) {
    CHECK_MSG(false, "%d outputs", (int)g->n_outputs);
    tg_free(&t);
    return;
  }
  memset(want, 0, sizeof want);
  memset(got, 0, sizeof got);
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  kiln_plan_options_t po = {.target = KILN_TARGET_CLASS_CPU, .threads = 2, .layout_block = block};
  kiln_plan_t* p = NULL;
  if (CHECK_OK(kiln_ref_run(g, t.feeds, &ro, want)) && CHECK_OK(kiln_plan_build(g, &po, A(), &p))) {
    /* every conv and the element-wise ops of case 1 run blocked */
    for (int i = 0; i < N_CASES; ++i) {
      char n1[16];
      snprintf(n1, sizeof n1, "conv%d", i);
      CHECK_MSG(p->layout->node_blocked[node(g, n1)], "block %d: conv%d not blocked", (int)block, i);
    }
    CHECK(p->layout->node_blocked[node(g, "scale")] && p->layout->node_blocked[node(g, "sig")] &&
          p->layout->node_blocked[node(g, "gap")] && p->layout->node_blocked[node(g, "mpool")] &&
          p->layout->node_blocked[node(g, "apool")] && p->layout->node_blocked[node(g, "apool1")] &&
          p->layout->node_blocked[node(g, "cat")]);
    const int32_t se = node(g, "semul");
    CHECK(p->layout->node_blocked[se] && p->layout->node_blocked[node(g, "sesig")] &&
          kiln_layout_in_port(p->layout, g, se, 0) == block && kiln_layout_in_port(p->layout, g, se, 1) == block);
    const int32_t bn = node(g, "bn");
    CHECK(bn >= 0 && p->layout->node_blocked[bn] && kiln_layout_in_port(p->layout, g, bn, 0) == block &&
          kiln_layout_in_port(p->layout, g, bn, 1) == 0 && p->layout->node_blocked[node(g, "bnrelu")]);
    kiln_fusion_report_t fr;
    CHECK_OK(kiln_plan_fuse(p, &fr, NULL));
    if (tg_cpu_run(p, t.feeds, got)) {
      for (int32_t i = 0; i < g->n_outputs; ++i) {
        double err = max_err(&got[i], &want[i]);
        CHECK_MSG(err <= 1e-4, "block %d: output %s differs from the reference by %g", (int)block,
                  g->tensors[g->outputs[i]].name, err);
      }
    }
  }
  for (int32_t i = 0; i < g->n_outputs; ++i) {
    kiln_array_free(A(), &want[i]);
    kiln_array_free(A(), &got[i]);
  }
  kiln_plan_destroy(p);
  tg_free(&t);
}

static void test_kernels_8(void) { test_kernels(8); }
static void test_kernels_16(void) { test_kernels(16); }

int main(void) {
  RUN(test_pass);
  RUN(test_kernels_8);
  RUN(test_kernels_16);
  return kiln_test_finish();
}
