/* Winograd convs on the blocked layout (lowering/lower_nn_conv_wino.c):
 * 3x3 stride-1 group-1 convs reading an NCHWc input (a 1x1 conv before
 * each makes it blocked), against the reference executor: odd planes
 * (remainder tiles), pads 0 / 1 / asymmetric, channels that are not whole
 * blocks, K blocks (576 input channels), batch 2, 2 threads, with and
 * without bias, fused epilogues (Clip; a residual Add of another input
 * then Relu), all in one graph. Under the rule (no KILN_WINO) the plan is
 * checked to run F(4x4) where the plane is whole 4x4 tiles of at least
 * 8x8, F(2x2) on the other planes of at least 6x6 and the dense conv
 * below (blocks of 16); then every 3x3 forced to F(4x4) by KILN_WINO=4
 * (blocks of 8; remainder tiles for F(4x4) too). The error is the largest
 * over sqrt(9 C); measured: the dense conv 2e-7, F(2x2) up to 4.6e-6,
 * F(4x4) up to 1.6e-5, both largest at 576 channels. Last, the tuning
 * knob (cpu.conv_wino.1, compiler/tune_cpu.c): the space and its
 * constraints, and points switching a conv between the direct conv, F(2)
 * and F(4) (with other GEMM knobs) through the plan's gemm hook, each
 * against the reference.
 * KILN_TEST_NO_CPU=1 skips the native runs. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/ref_exec.h"
#include "compiler/tune_cpu.h"
#include "ir/op.h"
#include "lowering/fuse.h"
#include "lowering/layout.h"
#include "lowering/plan.h"
#include "targets/cpu/cpu_backend.h"
#include "testing.h"

typedef struct wino_case_s {
  int64_t N, C, M, H, W, pt, pl, pb, pr;
  bool bias;
  int epi;     /* 1: Clip(0, 0.5), 2: Add of another input, then Relu */
  int rule_m;  /* the tile the rule picks (0: the dense conv) */
} wino_case_t;

static const wino_case_t k_cases[] = {
    /* N  C     M   H   W pt pl pb pr bias  epi m */
    {1, 16, 16, 8, 8, 1, 1, 1, 1, true, 2, 4},      /* one whole tile row per 4 rows */
    {2, 24, 40, 11, 9, 1, 1, 1, 1, true, 1, 2},     /* odd plane, partial channel blocks, batch 2 */
    {1, 32, 32, 12, 16, 0, 0, 0, 0, true, 2, 2},    /* no pads: 10 x 14 */
    {1, 20, 24, 9, 10, 2, 0, 1, 1, false, 2, 2},    /* asymmetric pads: 10 x 9 */
    {2, 16, 16, 16, 16, 1, 1, 1, 1, false, 1, 4},   /* batch 2, interior tiles */
    {1, 576, 16, 8, 8, 1, 1, 1, 1, true, 2, 4},     /* two K blocks of 288 */
    {1, 32, 48, 7, 7, 1, 1, 1, 1, true, 2, 2},      /* ResNet's 7x7 plane */
    {1, 32, 32, 4, 5, 1, 1, 1, 1, true, 1, 0},      /* small plane: the dense conv */
};
#define N_CASES ((int)(sizeof k_cases / sizeof k_cases[0]))

#define MAX_FEEDS (2 * N_CASES)
#include "tg_graph_util.h"

/* max |got - want| over sqrt(9 C), the size of a sum of 9 C products of
 * about unit terms: Winograd's rounding is relative to the sums' size, not
 * to each element (a sum near 0 out of large terms, or one Clip cut) */
static double norm_err(const kiln_array_t* got, const kiln_array_t* want, int64_t C) {
  if (!kiln_shape_equal(&got->shape, &want->shape)) return INFINITY;
  double e = 0;
  for (int64_t i = 0; i < kiln_array_numel(want); ++i) {
    const double gv = kiln_load_f64(F32, got->data, (size_t)i), wv = kiln_load_f64(F32, want->data, (size_t)i);
    const double d = fabs(gv - wv);
    if (!(d <= e)) e = d; /* NaN counts */
  }
  return e / sqrt(9.0 * (double)C);
}

/* kernels of the plan whose name holds |s| */
static int count_kernels(const kiln_plan_t* p, const char* s) {
  int n = 0;
  for (int32_t i = 0; i < p->n_kernels; ++i)
    n += p->kernels[i].func && p->kernels[i].func->name && strstr(p->kernels[i].func->name, s);
  return n;
}

/* Every case in one graph: x_i -> Conv 1x1 -> Conv 3x3 -> epilogue -> y_i.
 * force: 0 the rule, 2 / 4 KILN_WINO. */
static void run_cases(int32_t block, int force) {
  if (force) {
    char v[4];
    snprintf(v, sizeof v, "%d", force);
    setenv("KILN_WINO", v, 1);
  } else {
    unsetenv("KILN_WINO");
  }
  kiln_graph_t* g = NULL;
  kiln_array_t feeds[MAX_FEEDS], want[N_CASES], got[N_CASES];
  int n_feeds = 0;
  memset(want, 0, sizeof want);
  memset(got, 0, sizeof got);
  bool ok = CHECK_OK(kiln_graph_create(A(), &g)) && CHECK_OK(kiln_graph_set_opset(g, "", 17));
  for (int i = 0; i < N_CASES && ok; ++i) {
    const wino_case_t* c = &k_cases[i];
    char x[8], w0[8], w[8], b[8], h0[8], h[8], y[8], n00[8], n0[8];
    snprintf(x, sizeof x, "x%d", i), snprintf(w, sizeof w, "w%d", i), snprintf(b, sizeof b, "b%d", i);
    snprintf(w0, sizeof w0, "v%d", i), snprintf(h0, sizeof h0, "g%d", i), snprintf(n00, sizeof n00, "p%d", i);
    snprintf(h, sizeof h, "h%d", i), snprintf(y, sizeof y, "y%d", i), snprintf(n0, sizeof n0, "c%d", i);
    const int64_t OH = c->H + c->pt + c->pb - 2, OW = c->W + c->pl + c->pr - 2;
    feeds[n_feeds] = rand_array(4, DIMS(c->N, 8, c->H, c->W));
    ok = ok && CHECK_OK(kiln_graph_add_input(g, x, F32, &feeds[n_feeds++].shape, NULL));
    kiln_array_t wa0 = rand_array(4, DIMS(c->C, 8, 1, 1));
    ok = ok && CHECK_OK(kiln_graph_add_initializer(g, w0, &wa0, NULL)) &&
         CHECK_OK(kiln_graph_add_node(g, "Conv", n00, 2, NAMES(x, w0), 1, NAMES(h0), 0, NULL, NULL));
    kiln_array_t wa = rand_array(4, DIMS(c->M, c->C, 3, 3));
    ok = ok && CHECK_OK(kiln_graph_add_initializer(g, w, &wa, NULL));
    if (c->bias) {
      kiln_array_t ba = rand_array(1, DIMS(c->M));
      ok = ok && CHECK_OK(kiln_graph_add_initializer(g, b, &ba, NULL));
    }
    const int64_t pads[4] = {c->pt, c->pl, c->pb, c->pr};
    kiln_attr_t at[1] = {kiln_attr_make_ints("pads", 4, pads)};
    ok = ok && CHECK_OK(kiln_graph_add_node(g, "Conv", n0, c->bias ? 3 : 2, NAMES(h0, w, b), 1, NAMES(h), 1, at, NULL));
    ok = tg_conv_epilogue(g, ok, c->epi, i, h, y, DIMS(c->N, c->M, OH, OW), feeds, &n_feeds);
    ok = ok && CHECK_OK(kiln_graph_add_output(g, y));
  }
  ok = ok && CHECK_OK(kiln_graph_prepare(g));
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  kiln_plan_options_t po = {.target = KILN_TARGET_CLASS_CPU, .threads = 2, .layout_block = block};
  kiln_plan_t* p = NULL;
  if (ok && CHECK_OK(kiln_ref_run(g, feeds, &ro, want)) && CHECK_OK(kiln_plan_build(g, &po, A(), &p))) {
    /* each Winograd conv is three kernels (input transform, GEMMs, output
     * transform), named after the tile */
    int want2 = 0, want4 = 0;
    for (int i = 0; i < N_CASES; ++i) {
      const int m = force ? force : k_cases[i].rule_m;
      want2 += m == 2, want4 += m == 4;
    }
    const int in2 = count_kernels(p, "_wino2_in"), out2 = count_kernels(p, "_wino2_out");
    const int in4 = count_kernels(p, "_wino4_in"), out4 = count_kernels(p, "_wino4_out");
    CHECK_MSG(in2 == want2 && out2 == want2 && count_kernels(p, "_wino2_gemm") == want2,
              "block %d, KILN_WINO %d: %d F(2x2) convs, want %d", (int)block, force, in2, want2);
    CHECK_MSG(in4 == want4 && out4 == want4 && count_kernels(p, "_wino4_gemm") == want4,
              "block %d, KILN_WINO %d: %d F(4x4) convs, want %d", (int)block, force, in4, want4);
    kiln_fusion_report_t fr;
    CHECK_OK(kiln_plan_fuse(p, &fr, NULL));
    if (tg_cpu_run(p, feeds, got)) {
      for (int i = 0; i < N_CASES; ++i) {
        const wino_case_t* c = &k_cases[i];
        const double err = norm_err(&got[i], &want[i], c->C);
        if (getenv("KILN_TEST_VERBOSE")) printf("block %d KILN_WINO %d case %d: %.3g\n", (int)block, force, i, err);
        const int m = force ? force : c->rule_m;
        CHECK_MSG(err <= (m == 4 ? 5e-5 : 2e-5), "block %d, KILN_WINO %d, case %d (%dx%d->%d %dx%d): differs from the reference by %g",
                  (int)block, force, i, (int)c->N, (int)c->C, (int)c->M, (int)c->H, (int)c->W, err);
      }
    }
  }
  for (int i = 0; i < N_CASES; ++i) {
    kiln_array_free(A(), &want[i]);
    kiln_array_free(A(), &got[i]);
  }
  kiln_plan_destroy(p);
  for (int i = 0; i < n_feeds; ++i) kiln_array_free(A(), &feeds[i]);
  kiln_graph_destroy(g);
  unsetenv("KILN_WINO");
}

static void test_rule_16(void) { run_cases(16, 0); }

/* One 12x12 conv of 32 -> 32 channels behind a 1x1 one, planned through
 * the CPU tuner's hook: its problem is in the Winograd space with the
 * rule's F(4) as the default; points 1 / 2 / 4 (and 4 with other register
 * tiles and K blocks) lower to the direct conv / F(2) / F(4) and match the
 * reference. */
static void test_tune_knob(void) {
  unsetenv("KILN_WINO");
  kiln_graph_t* g = NULL;
  kiln_array_t x = rand_array(4, DIMS(1, 8, 12, 12)), want = {0};
  bool ok = CHECK_OK(kiln_graph_create(A(), &g)) && CHECK_OK(kiln_graph_set_opset(g, "", 17)) &&
            CHECK_OK(kiln_graph_add_input(g, "x", F32, &x.shape, NULL));
  kiln_array_t w0 = rand_array(4, DIMS(32, 8, 1, 1)), w = rand_array(4, DIMS(32, 32, 3, 3)), b = rand_array(1, DIMS(32));
  const int64_t pads[4] = {1, 1, 1, 1};
  kiln_attr_t at[1] = {kiln_attr_make_ints("pads", 4, pads)};
  ok = ok && CHECK_OK(kiln_graph_add_initializer(g, "w0", &w0, NULL)) &&
       CHECK_OK(kiln_graph_add_initializer(g, "w", &w, NULL)) && CHECK_OK(kiln_graph_add_initializer(g, "b", &b, NULL)) &&
       CHECK_OK(kiln_graph_add_node(g, "Conv", "c0", 2, NAMES("x", "w0"), 1, NAMES("h"), 0, NULL, NULL)) &&
       CHECK_OK(kiln_graph_add_node(g, "Conv", "c1", 3, NAMES("h", "w", "b"), 1, NAMES("y"), 1, at, NULL)) &&
       CHECK_OK(kiln_graph_add_output(g, "y")) && CHECK_OK(kiln_graph_prepare(g));
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  ok = ok && CHECK_OK(kiln_ref_run(g, &x, &ro, &want));
  kiln_plan_options_t po = {.target = KILN_TARGET_CLASS_CPU, .threads = 2, .layout_block = 16};
  kiln_tune_cpu_table_t table = {0};
  kiln_plan_t* p = NULL;
  int32_t e3 = -1;
  if (ok && CHECK_OK(kiln_plan_build_hooked(g, &po, kiln_tune_cpu_hook, &table, A(), &p))) {
    for (int32_t i = 0; i < table.n; ++i)
      if (table.e[i].problem.wino_tiles) e3 = i;
    CHECK(e3 >= 0 && count_kernels(p, "_wino4_gemm") == 1);
  }
  kiln_plan_destroy(p);
  p = NULL;
  if (e3 >= 0) {
    kiln_tune_cpu_gemm_t* e = &table.e[e3];
    const kiln_gemm_problem_t* pr = &e->problem;
    CHECK(pr->wino_tiles == ((1 << 2) | (1 << 4)));
    CHECK(!strcmp(kiln_tune_cpu_space_name(pr), KILN_TUNE_CPU_SPACE_WINO));
    kiln_template_tiles_t dt;
    kiln_tune_cpu_tiles_of(&e->dflt, &dt);
    CHECK(dt.n == 6 && dt.v[5] == 4 && kiln_tune_cpu_check(pr, &dt) == NULL);
    kiln_template_space_t sp;
    kiln_tune_cpu_space(pr, &e->dflt, &sp);
    CHECK(!strcmp(sp.version, KILN_TUNE_CPU_SPACE_WINO) && sp.n_knobs == 6);
    CHECK(sp.knobs[5].n == 3 && sp.knobs[5].v[0] == 1 && sp.knobs[5].v[1] == 2 && sp.knobs[5].v[2] == 4);
    int32_t idx[KILN_TEMPLATE_TILES_MAX];
    CHECK(kiln_template_space_index(&sp, &dt, idx));
    kiln_template_tiles_t bad = dt;
    bad.v[5] = 3;
    CHECK(kiln_tune_cpu_check(pr, &bad) != NULL);
    bad = dt;
    bad.n = 5;
    CHECK(kiln_tune_cpu_check(pr, &bad) != NULL);
    /* the points: {wino, mr, kc} (0: the default's) */
    static const int32_t pts[4][3] = {{1, 0, 0}, {2, 0, 0}, {4, 0, 0}, {4, 3, 16}};
    for (int i = 0; i < 4; ++i) {
      kiln_template_tiles_t pt = dt;
      pt.v[5] = pts[i][0];
      if (pts[i][1]) pt.v[0] = pts[i][1];
      if (pts[i][2]) pt.v[2] = pts[i][2];
      CHECK_MSG(kiln_tune_cpu_check(pr, &pt) == NULL, "point %d refused: %s", i, kiln_tune_cpu_check(pr, &pt));
      e->has_point = true;
      e->point = pt;
      kiln_array_t got = {0};
      if (CHECK_OK(kiln_plan_build_hooked(g, &po, kiln_tune_cpu_hook, &table, A(), &p))) {
        const int m = pts[i][0];
        CHECK_MSG(count_kernels(p, "_wino2_gemm") == (m == 2) && count_kernels(p, "_wino4_gemm") == (m == 4),
                  "point %d: the plan does not run F(%d)", i, m);
        kiln_fusion_report_t fr;
        CHECK_OK(kiln_plan_fuse(p, &fr, NULL));
        if (tg_cpu_run(p, &x, &got)) {
          const double err = norm_err(&got, &want, 32);
          CHECK_MSG(err <= 5e-5, "point %d differs from the reference by %g", i, err);
        }
      }
      kiln_array_free(A(), &got);
      kiln_plan_destroy(p);
      p = NULL;
    }
  }
  kiln_tune_cpu_table_free(&table);
  kiln_array_free(A(), &want);
  kiln_array_free(A(), &x);
  kiln_graph_destroy(g);
}
static void test_f4_8(void) { run_cases(8, 4); }

int main(void) {
  rng_state = 0x9E3779B97F4A7C15ull;
  RUN(test_rule_16);
  RUN(test_f4_8);
  RUN(test_tune_knob);
  return kiln_test_finish();
}
