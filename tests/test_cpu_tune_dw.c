/* The CPU depthwise knobs (compiler/tune_cpu.h, space "cpu.dw_nchwc.1"):
 * the space of the NCHWc depthwise window kernel holds the lowering's
 * point and ascending values, the constraints take the default and refuse
 * points the kernel cannot take (before anything is built), fingerprints
 * see the window; on a graph of three depthwise convs planned in NCHWc
 * (stride 1 3x3, stride 2 5x5 with a column remainder, a dilated one) the
 * hook sees each, and every point of a spread over the space that the
 * constraints accept builds and matches the default point's outputs
 * (kiln_tune_micro: the node's kernels alone on seeded inputs). The
 * three-block NCHWc conv tiles are accepted where three blocks divide the
 * output channels. */
#include <stdlib.h>
#include <string.h>

#include "compiler/tune.h"
#include "compiler/tune_cpu.h"
#include "compiler/tune_micro.h"
#include "ir/passes.h"
#include "runtime/device.h"
#include "targets/registry.h"
#include "testing.h"
#include "tg_graph_util.h"

static kiln_gemm_problem_t dw_problem(void) {
  kiln_gemm_problem_t p;
  memset(&p, 0, sizeof p);
  p.op = "Conv";
  p.batch = 1, p.M = 10, p.N = 9, p.K = 32, p.taps = 9;
  p.lanes = 8, p.regs = 16, p.threads = 2, p.block = p.in_block = 8;
  const int64_t geo[8] = {3, 3, 1, 1, 1, 1, 1, 1};
  memcpy(p.dw, geo, sizeof geo);
  return p;
}

static const char* check3(const kiln_gemm_problem_t* p, int32_t cols, int32_t rg, int32_t split) {
  const kiln_template_tiles_t x = {3, {cols, rg, split}};
  return kiln_tune_cpu_check(p, &x);
}

static void test_dw_space(void) {
  const kiln_gemm_problem_t p = dw_problem();
  kiln_gemm_knobs_t d = {0};
  d.dw_cols = 4, d.dw_rgroups = 1, d.par = KILN_GEMM_PAR_AUTO;
  kiln_template_space_t sp;
  kiln_tune_cpu_space(&p, &d, &sp);
  CHECK(!strcmp(sp.version, KILN_TUNE_CPU_SPACE_DW) && sp.n_knobs == 3);
  CHECK(!strcmp(kiln_tune_cpu_space_name(&p), KILN_TUNE_CPU_SPACE_DW));
  kiln_template_tiles_t dt;
  kiln_tune_cpu_tiles_of(&d, &dt);
  CHECK(dt.n == 3 && dt.v[0] == 4 && dt.v[1] == 1 && dt.v[2] == 1);
  int32_t idx[KILN_TEMPLATE_TILES_MAX];
  CHECK(kiln_template_space_index(&sp, &dt, idx));
  CHECK(kiln_tune_cpu_check(&p, &dt) == NULL);
  for (int32_t i = 0; i < sp.n_knobs; ++i) {
    CHECK(sp.knobs[i].n >= 2);
    for (int32_t j = 1; j < sp.knobs[i].n; ++j) CHECK(sp.knobs[i].v[j - 1] < sp.knobs[i].v[j]);
  }
  CHECK(sp.knobs[0].v[sp.knobs[0].n - 1] <= 9); /* no more columns than the output has */
  kiln_gemm_knobs_t back;
  kiln_tune_cpu_knobs_of(&dt, &back);
  CHECK(back.dw_cols == 4 && back.dw_rgroups == 1 && back.par == KILN_GEMM_PAR_AUTO);
  CHECK(check3(&p, 6, 8, 2) == NULL);
  CHECK(check3(&p, 0, 1, 1) != NULL);   /* no columns */
  CHECK(check3(&p, 4, 0, 1) != NULL);   /* no rows */
  CHECK(check3(&p, 4, 9, 1) != NULL);   /* more than 8 groups */
  CHECK(check3(&p, 4, 1, 3) != NULL);   /* a GEMM's split */
  CHECK(check3(&p, 4, 1, 0) != NULL);
  CHECK(check3(&p, -4, 1, 1) != NULL);
  kiln_gemm_problem_t small = p;
  small.M = 2, small.N = 3;
  CHECK(check3(&small, 4, 1, 1) != NULL && check3(&small, 3, 2, 1) == NULL && check3(&small, 3, 3, 1) != NULL);
  kiln_gemm_problem_t one = p;
  one.threads = 1;
  CHECK(check3(&one, 4, 1, 2) != NULL && check3(&one, 4, 1, 1) == NULL);
  kiln_template_space_t sp1;
  kiln_tune_cpu_space(&one, &d, &sp1);
  CHECK(sp1.knobs[2].n == 1);
  const kiln_template_tiles_t four = {4, {4, 1, 1, 1}};
  CHECK(kiln_tune_cpu_check(&p, &four) != NULL); /* a GEMM point is not one of these */
  kiln_gemm_problem_t wide = p;
  wide.lanes = 16, wide.regs = 32, wide.block = wide.in_block = 16;
  CHECK(check3(&wide, 16, 1, 1) != NULL && check3(&wide, 9, 1, 1) == NULL); /* 16 columns past 9 */
  wide.N = 56;
  CHECK(check3(&wide, 16, 1, 1) == NULL);
  kiln_gemm_problem_t avx2 = wide; /* 16-lane blocks on 8-lane vectors, 16 registers */
  avx2.lanes = 8, avx2.regs = 16;
  CHECK(check3(&avx2, 6, 1, 1) == NULL && check3(&avx2, 7, 1, 1) != NULL); /* 7 x 2 + 4 vectors > 16 */
  /* fingerprints: the window and the plane, never the knobs */
  kiln_gemm_problem_t s2 = p;
  s2.dw[2] = s2.dw[3] = 2;
  CHECK(kiln_tune_cpu_fingerprint(&s2) != kiln_tune_cpu_fingerprint(&p));
  kiln_gemm_problem_t conv = p;
  memset(conv.dw, 0, sizeof conv.dw);
  CHECK(kiln_tune_cpu_fingerprint(&conv) != kiln_tune_cpu_fingerprint(&p));
  CHECK(!strcmp(kiln_tune_cpu_space_name(&conv), KILN_TUNE_CPU_SPACE_NCHWC));
  /* the NCHWc conv: three blocks a tile column where they divide the
   * output channels (72: nine blocks of 8) */
  kiln_gemm_problem_t nc = {"Conv", 1, 49, 72, 24, 1, true, false, false, true, true, 16, 8, 32, 2, 8, 8, {0}, 0};
  const kiln_template_tiles_t n3 = {5, {8, 24, 24, 1, 256}}, n3b = {5, {8, 24, 24, 1, 256}};
  CHECK(kiln_tune_cpu_check(&nc, &n3) == NULL);
  nc.N = 64;
  CHECK(kiln_tune_cpu_check(&nc, &n3b) != NULL);
}

/* x [1,32,10,9] -> 1x1 conv (makes it NCHWc) -> depthwise 3x3 s1 -> y0;
 * depthwise 5x5 s2 (6 x 5 out: a 4-column tile and a rest) -> y1;
 * depthwise 3x3 dilation 2 -> y2. */
static kiln_graph_t* dw_graph(tg_t* t) {
  tg_init(t);
  tg_input(t, "x", DIMS(1, 32, 10, 9));
  tg_const(t, "w0", 4, DIMS(32, 32, 1, 1));
  tg_node(t, "Conv", "pre", 2, NAMES("x", "w0"), "xb", 0, NULL);
  static const struct { int64_t k, s, d, p; } cs[3] = {{3, 1, 1, 1}, {5, 2, 1, 2}, {3, 1, 2, 2}};
  for (int i = 0; i < 3; ++i) {
    char w[8], b[8], n[8], h[8], r[8], y[8];
    snprintf(w, sizeof w, "w%d", i + 1), snprintf(b, sizeof b, "b%d", i + 1), snprintf(n, sizeof n, "dw%d", i);
    snprintf(h, sizeof h, "h%d", i), snprintf(r, sizeof r, "relu%d", i), snprintf(y, sizeof y, "y%d", i);
    tg_const(t, w, 4, DIMS(32, 1, cs[i].k, cs[i].k));
    tg_const(t, b, 1, DIMS(32));
    const int64_t pads[4] = {cs[i].p, cs[i].p, cs[i].p, cs[i].p};
    kiln_attr_t at[4] = {ints("pads", 4, pads), ints("strides", 2, (int64_t[]){cs[i].s, cs[i].s}),
                         ints("dilations", 2, (int64_t[]){cs[i].d, cs[i].d}), one_int("group", 32)};
    tg_node(t, "Conv", n, 3, NAMES("xb", w, b), h, 4, at);
    tg_node(t, "Relu", r, 1, NAMES(h), y, 0, NULL);
    tg_output(t, y);
  }
  if (!t->ok || !CHECK_OK(kiln_graph_prepare(t->g))) return NULL;
  return t->g;
}

static bool tiles_same(const kiln_template_tiles_t* a, const kiln_template_tiles_t* b) {
  return a->n == b->n && !memcmp(a->v, b->v, sizeof(int32_t) * (size_t)a->n);
}

static void test_dw_points_build_and_match(void) {
  tg_t t;
  kiln_graph_t* g = dw_graph(&t);
  const kiln_target_t* target = kiln_target_find("cpu");
  kiln_device_t* dev = NULL;
  kiln_device_open_options_t oo = {2, true, NULL};
  CHECK(target != NULL);
  if (!g || !target || !CHECK_OK(kiln_device_open("cpu", &oo, kiln_allocator_system(), &dev))) {
    tg_free(&t);
    return;
  }
  const int32_t lanes = kiln_cpu_simd().lanes;
  kiln_plan_options_t po = {KILN_TARGET_CLASS_CPU, 2, 0, 0, lanes, 0};
  kiln_tune_cpu_table_t table = {0};
  kiln_plan_t* pl = NULL;
  int32_t n_dw = 0, built = 0;
  if (CHECK_OK(kiln_plan_build_hooked(g, &po, kiln_tune_cpu_hook, &table, kiln_allocator_system(), &pl))) {
    for (int32_t i = 0; i < table.n; ++i) {
      kiln_tune_cpu_gemm_t* e = &table.e[i];
      if (e->problem.dw[0] <= 0) continue;
      n_dw++;
      kiln_template_tiles_t dt;
      kiln_tune_cpu_tiles_of(&e->dflt, &dt);
      CHECK(dt.n == 3 && kiln_tune_cpu_check(&e->problem, &dt) == NULL);
      CHECK(e->problem.block == lanes && e->problem.K == 32);
      kiln_template_space_t sp;
      kiln_tune_cpu_space(&e->problem, &e->dflt, &sp);
      kiln_tune_micro_t m;
      if (!CHECK_OK(kiln_tune_micro_init_cpu(&m, pl, g, &po, 0, &table, i, e->nodes[0], target, dev, 2, 7))) {
        kiln_tune_micro_free(&m);
        continue;
      }
      /* a spread (a build is a C compile: about 15 in all): the first
       * kernel every other column count with the default rows, each kernel
       * the smallest and largest column and row group counts and the
       * one-thread split */
      for (int32_t kn = 0; kn < 3; ++kn)
        for (int32_t j = 0; j < sp.knobs[kn].n; ++j) {
          kiln_template_tiles_t x = dt;
          x.v[kn] = sp.knobs[kn].v[j];
          if (tiles_same(&x, &dt)) continue;
          if (!(kn == 0 && n_dw == 1 && j % 2 == 0) && j != 0 && j != sp.knobs[kn].n - 1) continue;
          if (kiln_tune_cpu_check(&e->problem, &x)) continue;
          double tc = 0, td = 0;
          bool match = false;
          if (CHECK_OK(kiln_tune_micro_measure(&m, &x, 1, &tc, &td, &match, stderr)))
            CHECK_MSG(match, "point %d,%d,%d of depthwise node %d differs from the default's outputs", x.v[0], x.v[1],
                      x.v[2], e->nodes[0]);
          built++;
        }
      kiln_tune_micro_free(&m);
    }
  }
  CHECK_MSG(n_dw == 3, "depthwise kernels seen %d", n_dw);
  CHECK_MSG(built >= 12, "%d points built", built);
  if (getenv("KILN_TEST_VERBOSE")) fprintf(stderr, "%d points built\n", built);
  kiln_plan_destroy(pl);
  kiln_tune_cpu_table_free(&table);
  kiln_device_release(dev);
  tg_free(&t);
}

int main(void) {
  RUN(test_dw_space);
  RUN(test_dw_points_build_and_match);
  return kiln_test_finish();
}
