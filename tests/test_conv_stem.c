/* The stem kernel of the blocked layout (lowering/lower_nn_conv_stem.c):
 * convs with at most 4 channels read from the plain NCHW input, NCHWc
 * output, no zero-padded input copy. Against the reference executor with
 * blocks of 8 and 16: odd planes, batch 2, one to four channels, strides,
 * dilation, asymmetric and wide pads (border rows and columns whose taps
 * are left out), output channels that are not whole blocks, with and
 * without bias, and fused epilogues (Clip; a residual Add of another input
 * then Relu), all in one graph. The plan is checked to take the kernel (its packed weights,
 * no padded copy of the input) for up to 5x5 taps, and the padded copy for ResNet's 7x7
 * (whose GEMM takes all four blocks of 64 channels in one tile column on AVX-512, the last
 * tile overlapping the one before it). KILN_TEST_NO_CPU=1 skips the native runs. */
#include <math.h>
#include <stdio.h>
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

typedef struct stem_case_s {
  int64_t N, C, M, H, W, k, s, d, pt, pl, pb, pr;
  bool bias;
  int epi; /* 1: Clip(0, 0.5), 2: Add of another input, then Relu */
} stem_case_t;

static const stem_case_t k_cases[] = {
    /* N  C   M   H   W  k  s  d pt pl pb pr bias epi */
    {2, 3, 24, 13, 11, 3, 2, 1, 1, 1, 1, 1, true, 1},  /* MobileNetV2's stem, odd plane, batch 2 */
    {1, 1, 8, 9, 10, 3, 1, 1, 1, 0, 1, 2, false, 2},   /* one channel, asymmetric pads */
    {2, 4, 40, 12, 9, 5, 2, 2, 4, 3, 2, 4, true, 2},   /* dilation 2, wide pads, residual epilogue */
    {1, 3, 32, 20, 37, 3, 2, 1, 1, 1, 1, 1, true, 1},  /* interior tiles and a shorter last one */
    {1, 3, 64, 23, 19, 7, 2, 1, 3, 3, 3, 3, false, 2}, /* ResNet's 7x7: padded copy + GEMM */
    {2, 2, 5, 3, 4, 3, 1, 1, 2, 2, 2, 2, true, 1},     /* no interior at all */
    /* 7x7 with four blocks of 16 (AVX-512: 6 x 64 tiles, the last one
     * overlapping the one before it): one image split over positions
     * between the threads (81 = 13 x 6 + 3), batch 2, 60 channels (zero
     * columns past M) */
    {1, 3, 64, 17, 17, 7, 2, 1, 3, 3, 3, 3, true, 2},
    {2, 3, 64, 17, 17, 7, 2, 1, 3, 3, 3, 3, true, 1},
    {1, 3, 60, 15, 17, 7, 2, 1, 3, 3, 3, 3, false, 2},
};
#define N_CASES ((int)(sizeof k_cases / sizeof k_cases[0]))

static int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1) {
  return (in + p0 + p1 - (k - 1) * d - 1) / s + 1;
}

#define MAX_FEEDS (2 * N_CASES)
#include "tg_graph_util.h"

/* Every case in one graph (one compile per block): x_i -> Conv ->
 * epilogue -> y_i. */
static void run_cases(int32_t block) {
  kiln_graph_t* g = NULL;
  kiln_array_t feeds[MAX_FEEDS], want[N_CASES], got[N_CASES];
  int n_feeds = 0;
  memset(want, 0, sizeof want);
  memset(got, 0, sizeof got);
  bool ok = CHECK_OK(kiln_graph_create(A(), &g)) && CHECK_OK(kiln_graph_set_opset(g, "", 17));
  for (int i = 0; i < N_CASES && ok; ++i) {
    const stem_case_t* c = &k_cases[i];
    char x[8], w[8], b[8], h[8], y[8], n0[8];
    snprintf(x, sizeof x, "x%d", i), snprintf(w, sizeof w, "w%d", i), snprintf(b, sizeof b, "b%d", i);
    snprintf(h, sizeof h, "h%d", i), snprintf(y, sizeof y, "y%d", i), snprintf(n0, sizeof n0, "c%d", i);
    const int64_t OH = out_dim(c->H, c->k, c->s, c->d, c->pt, c->pb), OW = out_dim(c->W, c->k, c->s, c->d, c->pl, c->pr);
    feeds[n_feeds] = rand_array(4, DIMS(c->N, c->C, c->H, c->W));
    ok = ok && CHECK_OK(kiln_graph_add_input(g, x, F32, &feeds[n_feeds++].shape, NULL));
    kiln_array_t wa = rand_array(4, DIMS(c->M, c->C, c->k, c->k));
    ok = ok && CHECK_OK(kiln_graph_add_initializer(g, w, &wa, NULL));
    if (c->bias) {
      kiln_array_t ba = rand_array(1, DIMS(c->M));
      ok = ok && CHECK_OK(kiln_graph_add_initializer(g, b, &ba, NULL));
    }
    const int64_t pads[4] = {c->pt, c->pl, c->pb, c->pr}, st[2] = {c->s, c->s}, dl[2] = {c->d, c->d};
    kiln_attr_t at[3] = {kiln_attr_make_ints("pads", 4, pads), kiln_attr_make_ints("strides", 2, st),
                         kiln_attr_make_ints("dilations", 2, dl)};
    ok = ok && CHECK_OK(kiln_graph_add_node(g, "Conv", n0, c->bias ? 3 : 2, NAMES(x, w, b), 1, NAMES(h), 3, at, NULL));
    ok = tg_conv_epilogue(g, ok, c->epi, i, h, y, DIMS(c->N, c->M, OH, OW), feeds, &n_feeds);
    ok = ok && CHECK_OK(kiln_graph_add_output(g, y));
  }
  ok = ok && CHECK_OK(kiln_graph_prepare(g));
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  kiln_plan_options_t po = {.target = KILN_TARGET_CLASS_CPU, .threads = 2, .layout_block = block};
  kiln_plan_t* p = NULL;
  if (ok && CHECK_OK(kiln_ref_run(g, feeds, &ro, want)) && CHECK_OK(kiln_plan_build(g, &po, A(), &p))) {
    /* every conv of at most 5x5 taps runs blocked through the stem kernel
     * (its packed weights), not through a padded copy; the 7x7 one keeps
     * the padded copy and the GEMM */
    int wstem = 0, xpad = 0, want_stem = 0;
    for (int i = 0; i < N_CASES; ++i) want_stem += k_cases[i].k <= 5;
    for (int32_t i = 0; i < p->n_buffers; ++i) {
      const char* name = p->buffers[i].buf ? p->buffers[i].buf->name : NULL;
      wstem += name && strstr(name, "wstem");
      xpad += name && strstr(name, "xpad");
    }
    CHECK_MSG(wstem == want_stem && xpad == N_CASES - want_stem, "block %d: %d stem kernels of %d, %d padded copies",
              (int)block, wstem, want_stem, xpad);
    kiln_fusion_report_t fr;
    CHECK_OK(kiln_plan_fuse(p, &fr, NULL));
    if (tg_cpu_run(p, feeds, got)) {
      for (int i = 0; i < N_CASES; ++i) {
        const stem_case_t* c = &k_cases[i];
        double err = max_err(&got[i], &want[i]);
        CHECK_MSG(err <= 1e-5, "block %d, case %d (%dx%dx%dx%d k%d s%d): differs from the reference by %g",
                  (int)block, i, (int)c->N, (int)c->C, (int)c->H, (int)c->W, (int)c->k, (int)c->s, err);
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
}

static void test_stem_8(void) { run_cases(8); }
static void test_stem_16(void) { run_cases(16); }

int main(void) {
  rng_state = 0x2545F4914F6CDD1Dull; /* this test's inputs since it was written */
  RUN(test_stem_8);
  RUN(test_stem_16);
  return kiln_test_finish();
}
