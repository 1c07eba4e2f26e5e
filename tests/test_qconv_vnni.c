/* Group-1 QLinearConv on the blocked NCHWc layout read from a blocked
 * input, the GEMM whose steps are dot4_u8i8 (vpdpbusd) where the CPU has
 * VNNI and dot2_i16 elsewhere (lowering/lower_nn_qconv_blocked.c): taps
 * read in place, from a copy padded with x's zero point where they fall
 * outside x, i8 activations made u8 (x + 128, the zero point folded into
 * the bias). Run on the CPU backend with u8 activations and blocks of 16,
 * i8 and blocks of 8, against the reference executor, bit for bit:
 *
 *   x f32 [1,22,9,9] -> QuantizeLinear -> a 3x3 pad 1 (the stem, plain
 *   input: quads gathered from the channel planes) -> b 3x3 pad 1 (22 input channels: a last quad and block past
 *   the channels) -> c 3x3 stride 2 pads (1,0,0,1) -> d 1x1 (flat) -> e 1x1
 *   stride 2 -> DequantizeLinear -> y.
 * KILN_TEST_NO_CPU=1 skips the native runs. */
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

#define DIMS(...) (int64_t[]){__VA_ARGS__}
#define NAMES(...) (const char*[]){__VA_ARGS__}
#define CH 22

static kiln_dtype_t act_type = KILN_DTYPE_U8;

static kiln_allocator_t A(void) { return kiln_allocator_system(); }

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static double rnd(void) { /* [-1, 1) */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (double)(rng_state >> 11) / (double)(1ull << 52) - 1.0;
}

typedef struct q8g_s {
  kiln_graph_t* g;
  kiln_array_t x;
  bool ok;
} q8g_t;

/* Initializer |name| of |dtype| and dims (rank 0: a scalar), values
 * lo + (hi - lo) * u with u uniform in [0, 1), rounded for integer types. */
static void init(q8g_t* t, const char* name, kiln_dtype_t dt, int rank, const int64_t* d, double lo, double hi) {
  if (!t->ok) return;
  kiln_array_t a;
  kiln_shape_t s = kiln_shape_make(rank, d);
  KILN_ASSERT(!kiln_array_alloc(A(), dt, &s, &a));
  for (int64_t i = 0; i < kiln_array_numel(&a); ++i) {
    double v = lo + (hi - lo) * (rnd() + 1.0) / 2.0;
    kiln_store_f64(dt, a.data, (size_t)i, kiln_dtype_is_float(dt) ? v : (double)(int64_t)v);
  }
  t->ok = CHECK_OK(kiln_graph_add_initializer(t->g, name, &a, NULL));
}

static void node(q8g_t* t, const char* op, const char* name, int n_in, const char* const* in, const char* out,
                 int n_attrs, const kiln_attr_t* attrs) {
  if (t->ok) t->ok = CHECK_OK(kiln_graph_add_node(t->g, op, name, n_in, in, 1, (const char*[]){out}, n_attrs, attrs, NULL));
}

static kiln_attr_t ints(const char* name, int n, const int64_t* v) {
  return (kiln_attr_t){.name = name, .type = KILN_ATTR_INTS, .count = n, .ints = v};
}

/* QLinearConv |name| from (x, its scale and zero point) to |out| with M
 * output channels of k x k taps over C / group input channels each; its
 * weights, per-channel scales (zero points 0), output parameters and, when
 * bias_mag > 0, an i32 bias in [-bias_mag, bias_mag) are made here. */
static void qconv(q8g_t* t, const char* name, const char* x, const char* xs, const char* xz, int64_t C, int64_t M,
                  int64_t k, int64_t group, double bias_mag, int n_attrs, const kiln_attr_t* attrs) {
  char w[32], ws[32], wz[32], ys[32], yz[32], b[32], out[32];
  snprintf(w, sizeof w, "%s_w", name), snprintf(ws, sizeof ws, "%s_ws", name), snprintf(wz, sizeof wz, "%s_wz", name);
  snprintf(ys, sizeof ys, "%s_s", name), snprintf(yz, sizeof yz, "%s_z", name), snprintf(b, sizeof b, "%s_b", name);
  snprintf(out, sizeof out, "%s_o", name);
  init(t, w, KILN_DTYPE_I8, 4, DIMS(M, C / group, k, k), -127, 128);
  init(t, ws, KILN_DTYPE_F32, 1, DIMS(M), 0.002, 0.01);
  init(t, wz, KILN_DTYPE_I8, 1, DIMS(M), 0, 0);
  init(t, ys, KILN_DTYPE_F32, 0, NULL, 0.02, 0.05);
  init(t, yz, act_type, 0, NULL, act_type == KILN_DTYPE_U8 ? 100 : -30, act_type == KILN_DTYPE_U8 ? 150 : 30);
  if (bias_mag > 0) init(t, b, KILN_DTYPE_I32, 1, DIMS(M), -bias_mag, bias_mag);
  kiln_attr_t at[4];
  if (n_attrs > 0) memcpy(at, attrs, sizeof(kiln_attr_t) * (size_t)n_attrs);
  at[n_attrs] = (kiln_attr_t){.name = "group", .type = KILN_ATTR_INT, .i = group};
  node(t, "QLinearConv", name, bias_mag > 0 ? 9 : 8, NAMES(x, xs, xz, w, ws, wz, ys, yz, b), out, n_attrs + 1, at);
}

static void build(q8g_t* t) {
  memset(t, 0, sizeof *t);
  t->ok = CHECK_OK(kiln_graph_create(A(), &t->g)) && CHECK_OK(kiln_graph_set_opset(t->g, "", 17));
  if (!t->ok) return;
  kiln_shape_t xs = kiln_shape_make(4, DIMS(1, CH, 9, 9));
  KILN_ASSERT(!kiln_array_alloc(A(), KILN_DTYPE_F32, &xs, &t->x));
  for (int64_t i = 0; i < kiln_array_numel(&t->x); ++i) kiln_store_f64(KILN_DTYPE_F32, t->x.data, (size_t)i, 3 * rnd());
  t->ok = CHECK_OK(kiln_graph_add_input(t->g, "x", KILN_DTYPE_F32, &xs, NULL));
  init(t, "x_s", KILN_DTYPE_F32, 0, NULL, 0.02, 0.03);
  if (act_type == KILN_DTYPE_U8) init(t, "x_z", KILN_DTYPE_U8, 0, NULL, 120, 136);
  else init(t, "x_z", KILN_DTYPE_I8, 0, NULL, -20, 20);
  node(t, "QuantizeLinear", "q", 3, NAMES("x", "x_s", "x_z"), "xq", 0, NULL);
  const kiln_attr_t p1[1] = {ints("pads", 4, DIMS(1, 1, 1, 1))};
  const kiln_attr_t s2asym[2] = {ints("strides", 2, DIMS(2, 2)), ints("pads", 4, DIMS(1, 0, 0, 1))};
  const kiln_attr_t s2[1] = {ints("strides", 2, DIMS(2, 2))};
  qconv(t, "a", "xq", "x_s", "x_z", CH, CH, 3, 1, 3000, 1, p1);      /* [1,22,9,9] */
  qconv(t, "b", "a_o", "a_s", "a_z", CH, CH, 3, 1, 3000, 1, p1);     /* [1,22,9,9] */
  qconv(t, "c", "b_o", "b_s", "b_z", CH, 20, 3, 1, 0, 2, s2asym);    /* [1,20,4,4] */
  qconv(t, "d", "c_o", "c_s", "c_z", 20, 24, 1, 1, 2000, 0, NULL);   /* [1,24,4,4] */
  qconv(t, "e", "d_o", "d_s", "d_z", 24, 16, 1, 1, 2000, 1, s2);     /* [1,16,2,2] */
  node(t, "DequantizeLinear", "dq", 3, NAMES("e_o", "e_s", "e_z"), "y", 0, NULL);
  if (t->ok) t->ok = CHECK_OK(kiln_graph_add_output(t->g, "y"));
}

static int32_t node_index(const kiln_graph_t* g, const char* name) {
  for (int32_t i = 0; i < g->n_nodes; ++i)
    if (!strcmp(g->nodes[i].name, name)) return i;
  return -1;
}

static void run(int32_t block, kiln_dtype_t act) {
  act_type = act;
  q8g_t t;
  build(&t);
  if (!t.ok || !CHECK_OK(kiln_graph_prepare(t.g))) {
    kiln_array_free(A(), &t.x);
    kiln_graph_destroy(t.g);
    return;
  }
  const kiln_graph_t* g = t.g;
  kiln_array_t want, got;
  memset(&want, 0, sizeof want);
  memset(&got, 0, sizeof got);
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  kiln_plan_options_t po = {.target = KILN_TARGET_CLASS_CPU, .threads = 2, .layout_block = block};
  kiln_plan_t* p = NULL;
  const char* act_name = act == KILN_DTYPE_U8 ? "u8" : "i8";
  if (CHECK_OK(kiln_ref_run(g, &t.x, &ro, &want)) && CHECK_OK(kiln_plan_build(g, &po, A(), &p))) {
    static const char* const blocked[] = {"a", "b", "c", "d", "e"};
    for (int i = 0; i < 5; ++i)
      CHECK_MSG(p->layout->node_blocked[node_index(g, blocked[i])], "block %d %s: %s not blocked", (int)block, act_name,
                blocked[i]);
    kiln_fusion_report_t fr;
    CHECK_OK(kiln_plan_fuse(p, &fr, NULL));
    kiln_cpu_options_t o;
    kiln_cpu_options_default(&o);
    o.threads = 2;
    kiln_cpu_exec_t* e = NULL;
    if (!getenv("KILN_TEST_NO_CPU") && CHECK_OK(kiln_cpu_compile(p, &o, &e, NULL)) &&
        CHECK_OK(kiln_cpu_run(e, &t.x, &got, NULL, NULL))) {
      CHECK(kiln_shape_equal(&got.shape, &want.shape));
      int64_t diff = 0;
      for (int64_t i = 0; i < kiln_array_numel(&want) && kiln_shape_equal(&got.shape, &want.shape); ++i)
        diff += kiln_load_f64(KILN_DTYPE_F32, got.data, (size_t)i) != kiln_load_f64(KILN_DTYPE_F32, want.data, (size_t)i);
      CHECK_MSG(diff == 0, "block %d %s: %lld of %lld outputs differ from the reference", (int)block, act_name,
                (long long)diff, (long long)kiln_array_numel(&want));
    }
    kiln_cpu_exec_destroy(e);
  }
  kiln_array_free(A(), &want);
  kiln_array_free(A(), &got);
  kiln_plan_destroy(p);
  kiln_array_free(A(), &t.x);
  kiln_graph_destroy(t.g);
}

/* (two of the four pairs: each case compiles its C) */
static void test_u8_block16(void) { run(16, KILN_DTYPE_U8); }
static void test_i8_block8(void) { run(8, KILN_DTYPE_I8); }

int main(void) {
  RUN(test_u8_block16);
  RUN(test_i8_block8);
  return kiln_test_finish();
}
