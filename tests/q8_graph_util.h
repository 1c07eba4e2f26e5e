/* Small int8 graphs for the tests of the int8 CPU kernels
 * (test_layout_q8.c, test_qconv_vnni.c): seeded initializers, nodes and
 * QLinearConvs with their weights and parameters made here. Header-only:
 * each test is its own executable. */
#ifndef KILN_TESTS_Q8_GRAPH_UTIL_H_
#define KILN_TESTS_Q8_GRAPH_UTIL_H_

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/ref_exec.h"
#include "ir/graph.h"
#include "lowering/fuse.h"
#include "lowering/layout.h"
#include "lowering/plan.h"
#include "targets/cpu/cpu_backend.h"
#include "testing.h"

#define DIMS(...) (int64_t[]){__VA_ARGS__}
#define NAMES(...) (const char*[]){__VA_ARGS__}

/* The activations' type (u8 or i8) of the QLinearConv outputs qconv makes. */
static kiln_dtype_t q8_act_type = KILN_DTYPE_U8;

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

static inline kiln_attr_t ints(const char* name, int n, const int64_t* v) {
  return (kiln_attr_t){.name = name, .type = KILN_ATTR_INTS, .count = n, .ints = v};
}

/* QLinearConv |name| from (x, its scale and zero point) to |out| with M
 * output channels of k x k taps over C / group input channels each; its
 * weights, per-channel scales (zero points 0), output parameters and, when
 * bias_mag > 0, an i32 bias in [-bias_mag, bias_mag) are made here. */
static inline void qconv(q8g_t* t, const char* name, const char* x, const char* xs, const char* xz, int64_t C, int64_t M,
                  int64_t k, int64_t group, double bias_mag, int n_attrs, const kiln_attr_t* attrs) {
  char w[32], ws[32], wz[32], ys[32], yz[32], b[32], out[32];
  snprintf(w, sizeof w, "%s_w", name), snprintf(ws, sizeof ws, "%s_ws", name), snprintf(wz, sizeof wz, "%s_wz", name);
  snprintf(ys, sizeof ys, "%s_s", name), snprintf(yz, sizeof yz, "%s_z", name), snprintf(b, sizeof b, "%s_b", name);
  snprintf(out, sizeof out, "%s_o", name);
  init(t, w, KILN_DTYPE_I8, 4, DIMS(M, C / group, k, k), -127, 128);
  init(t, ws, KILN_DTYPE_F32, 1, DIMS(M), 0.002, 0.01);
  init(t, wz, KILN_DTYPE_I8, 1, DIMS(M), 0, 0);
  init(t, ys, KILN_DTYPE_F32, 0, NULL, 0.02, 0.05);
  init(t, yz, q8_act_type, 0, NULL, q8_act_type == KILN_DTYPE_U8 ? 100 : -30, q8_act_type == KILN_DTYPE_U8 ? 150 : 30);
  if (bias_mag > 0) init(t, b, KILN_DTYPE_I32, 1, DIMS(M), -bias_mag, bias_mag);
  kiln_attr_t at[4];
  if (n_attrs > 0) memcpy(at, attrs, sizeof(kiln_attr_t) * (size_t)n_attrs);
  at[n_attrs] = (kiln_attr_t){.name = "group", .type = KILN_ATTR_INT, .i = group};
  node(t, "QLinearConv", name, bias_mag > 0 ? 9 : 8, NAMES(x, xs, xz, w, ws, wz, ys, yz, b), out, n_attrs + 1, at);
}

static inline int32_t node_index(const kiln_graph_t* g, const char* name) {
  for (int32_t i = 0; i < g->n_nodes; ++i)
    if (!strcmp(g->nodes[i].name, name)) return i;
  return -1;
}

/* Prepares |t|'s graph, runs the reference interpreter on t->x into |want|
 * and builds the CPU plan with the NCHW|block|c layout into |p|: false
 * (after a failed CHECK) where any of it fails. q8_case_free frees them all
 * either way. */
static inline bool q8_ref_and_plan(q8g_t* t, int32_t block, kiln_array_t* want, kiln_plan_t** p) {
  memset(want, 0, sizeof *want);
  *p = NULL;
  if (!t->ok || !CHECK_OK(kiln_graph_prepare(t->g))) return false;
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  kiln_plan_options_t po = {.target = KILN_TARGET_CLASS_CPU, .threads = 2, .layout_block = block};
  return CHECK_OK(kiln_ref_run(t->g, &t->x, &ro, want)) && CHECK_OK(kiln_plan_build(t->g, &po, A(), p));
}

static inline void q8_case_free(q8g_t* t, kiln_array_t* want, kiln_plan_t* p) {
  kiln_array_free(A(), want);
  kiln_plan_destroy(p);
  kiln_array_free(A(), &t->x);
  kiln_graph_destroy(t->g);
}

/* Every node named in |names| runs on the blocked layout in |p|. */
static inline void q8_check_blocked(const kiln_plan_t* p, const kiln_graph_t* g, const char* const* names, int n,
                                    const char* what) {
  for (int i = 0; i < n; ++i)
    CHECK_MSG(p->layout->node_blocked[node_index(g, names[i])], "%s: %s not blocked", what, names[i]);
}

/* Fuses |p|, compiles it for the CPU (2 threads), runs it on |x| and checks
 * every output value equals |want|'s bit for bit; |what| names the case.
 * KILN_TEST_NO_CPU=1 skips the native run. */
static void q8_check_cpu_exact(kiln_plan_t* p, const kiln_array_t* x, const kiln_array_t* want, const char* what) {
  kiln_fusion_report_t fr;
  CHECK_OK(kiln_plan_fuse(p, &fr, NULL));
  kiln_cpu_options_t o;
  kiln_cpu_options_default(&o);
  o.threads = 2;
  kiln_cpu_exec_t* e = NULL;
  kiln_array_t got;
  memset(&got, 0, sizeof got);
  if (!getenv("KILN_TEST_NO_CPU") && CHECK_OK(kiln_cpu_compile(p, &o, &e, NULL)) &&
      CHECK_OK(kiln_cpu_run(e, x, &got, NULL, NULL))) {
    CHECK(kiln_shape_equal(&got.shape, &want->shape));
    int64_t diff = 0;
    for (int64_t i = 0; i < kiln_array_numel(want) && kiln_shape_equal(&got.shape, &want->shape); ++i)
      diff += kiln_load_f64(KILN_DTYPE_F32, got.data, (size_t)i) !=
              kiln_load_f64(KILN_DTYPE_F32, want->data, (size_t)i);
    CHECK_MSG(diff == 0, "%s: %lld of %lld outputs differ from the reference", what, (long long)diff,
              (long long)kiln_array_numel(want));
  }
  kiln_cpu_exec_destroy(e);
  kiln_array_free(A(), &got);
}

#endif  // KILN_TESTS_Q8_GRAPH_UTIL_H_
