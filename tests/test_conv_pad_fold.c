/* Tests for slice folding (lowering/fuse_slice.c) with the blocked convs'
 * padded inputs (lowering/lower_nn_conv_blocked.c): a conv whose taps fall
 * outside its input reads a zero-padded workspace whose interior is the
 * input's own storage (its producer stores there, its other readers load
 * there), or, with KILN_CONV_PAD=copy, a copy of the input.
 *
 * One graph, batch 2, odd planes: a tensor read by two padded convs (one
 * folds, the other copies from the slice), a residual Add and a strided
 * 1x1 conv; a tensor with one reader (the copy folds into its producer by
 * epilogue fusion); a padded conv's input that is also a model output (kept
 * as a copy); a Concat's output read by a padded conv (the Concat's parts
 * store into the slice); a conv padded on one side only. Checks that the
 * folded tensors have no memory of their own and that every output matches
 * the reference executor, with blocks of 8 and 16, fused and unfused, and
 * with the copies. The dense conv throughout (KILN_WINO=0): the 3x3
 * stride-1 convs would run Winograd (lower_nn_conv_wino.c), which reads
 * its input in place with no padded workspace. KILN_TEST_NO_CPU=1 skips
 * the native runs. */
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

/* Conv |name| (M outputs, k x k, stride s, dilation d, pads t/l/b/r) of
 * |in| with its weights "w_<name>" [M][C] and a bias. */
static void tg_conv(tg_t* t, const char* name, const char* in, int64_t C, int64_t M, int64_t k, int64_t s, int64_t d,
                    const int64_t* pads, const char* out) {
  char w[32], b[32];
  snprintf(w, sizeof w, "w_%s", name), snprintf(b, sizeof b, "b_%s", name);
  tg_const(t, w, 4, DIMS(M, C, k, k));
  tg_const(t, b, 1, DIMS(M));
  kiln_attr_t conv_attrs[3];
  int64_t* st = malloc(sizeof(int64_t) * 8);
  KILN_ASSERT(st);
  st[0] = st[1] = s, st[2] = st[3] = d;
  memcpy(st + 4, pads, sizeof(int64_t) * 4);
  conv_attrs[0] = ints("pads", 4, st + 4);
  conv_attrs[1] = ints("strides", 2, st);
  conv_attrs[2] = ints("dilations", 2, st + 2);
  tg_node(t, "Conv", name, 3, NAMES(in, w, b), out, 3, conv_attrs);
  free(st);
}

#define P1 DIMS(1, 1, 1, 1)
#define P0 DIMS(0, 0, 0, 0)

static void build(tg_t* t) {
  tg_init(t);
  tg_input(t, "x", DIMS(2, 12, 9, 7));
  /* a: 1x1 conv + Relu, read by two padded convs, an Add and a strided 1x1 */
  tg_conv(t, "c0", "x", 12, 20, 1, 1, 1, P0, "h0");
  tg_node(t, "Relu", "r0", 1, NAMES("h0"), "a", 0, NULL);
  tg_conv(t, "c1", "a", 20, 20, 3, 1, 1, P1, "h1");
  tg_conv(t, "c2", "a", 20, 16, 3, 1, 2, DIMS(2, 2, 2, 2), "h2"); /* the second padded reader */
  tg_conv(t, "cd", "a", 20, 24, 1, 2, 1, P0, "hd");                /* strided 1x1 */
  /* stride 2 leaving a's last row and column unread: the padded temp is
   * smaller than a plus its pads, so this one copies */
  tg_conv(t, "c8", "a", 20, 8, 3, 2, 1, DIMS(1, 1, 0, 0), "h8");
  tg_output(t, "h8");
  /* b: one reader (c3, padded): epilogue fusion folds the copy */
  tg_node(t, "Relu", "r1", 1, NAMES("h1"), "b", 0, NULL);
  tg_conv(t, "c3", "b", 20, 20, 3, 1, 1, P1, "h3");
  tg_node(t, "Add", "res", 2, NAMES("h3", "a"), "s", 0, NULL);
  tg_node(t, "Relu", "r2", 1, NAMES("s"), "o1", 0, NULL);
  tg_output(t, "o1");
  tg_output(t, "h2");
  tg_output(t, "hd");
  /* o1 is a model output and the input of a padded conv too */
  tg_conv(t, "c4", "o1", 20, 12, 3, 2, 1, DIMS(1, 0, 1, 2), "h4");
  tg_output(t, "h4");
  /* a Concat (whole blocks of 8 and 16) read by a padded conv: its parts
   * store into the slice */
  tg_conv(t, "c5", "x", 12, 16, 1, 1, 1, P0, "h5");
  tg_conv(t, "c6", "x", 12, 16, 1, 1, 1, P0, "h6");
  tg_node(t, "Concat", "cat", 2, NAMES("h5", "h6"), "cc", 1, (kiln_attr_t[]){one_int("axis", 1)});
  tg_conv(t, "c7", "cc", 32, 8, 3, 1, 1, DIMS(0, 1, 2, 1), "h7"); /* padded on three sides */
  tg_output(t, "h7");
  /* e: padded only at the bottom and right (its box at offset 0 of the
   * temp), read by that conv and an Add */
  tg_conv(t, "c9", "x", 12, 16, 1, 1, 1, P0, "h9");
  tg_node(t, "Relu", "r9", 1, NAMES("h9"), "e", 0, NULL);
  tg_conv(t, "c10", "e", 16, 16, 2, 1, 1, DIMS(0, 0, 1, 1), "h10");
  tg_node(t, "Add", "res2", 2, NAMES("e", "h10"), "o2", 0, NULL);
  tg_output(t, "o2");
}


/* Whether graph tensor |name|'s own buffer is used by a kernel. */
static bool live(const kiln_plan_t* p, const kiln_graph_t* g, const char* name) {
  int32_t b = p->tensor_buffer[tensor(g, name)];
  if (b < 0) return false;
  for (int32_t k = 0; k < p->n_kernels; ++k)
    for (int32_t i = 0; i < p->kernels[k].func->n_params; ++i)
      if (kiln_plan_root(p, p->kernels[k].args[i]) == kiln_plan_root(p, b)) return true;
  return false;
}

static void run_case(int32_t block, bool fuse, bool copy) {
  tg_t t;
  build(&t);
  if (!t.ok || !CHECK_OK(kiln_graph_prepare(t.g))) {
    tg_free(&t);
    return;
  }
  if (copy) setenv("KILN_CONV_PAD", "copy", 1);
  else unsetenv("KILN_CONV_PAD");
  const kiln_graph_t* g = t.g;
  kiln_array_t want[12], got[12];
  KILN_ASSERT(g->n_outputs <= 12);
  memset(want, 0, sizeof want);
  memset(got, 0, sizeof got);
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  kiln_plan_options_t po = {.target = KILN_TARGET_CLASS_CPU, .threads = 2, .layout_block = block};
  kiln_plan_t* p = NULL;
  if (CHECK_OK(kiln_ref_run(g, t.feeds, &ro, want)) && CHECK_OK(kiln_plan_build(g, &po, A(), &p))) {
    kiln_fusion_report_t fr;
    if (fuse) CHECK_OK(kiln_plan_fuse(p, &fr, NULL));
    if (fuse) {
      /* folded: a (5 readers), b (1 reader), cc (the Concat), e (at
       * offset 0); o1 is an output and keeps its buffer */
      CHECK_MSG(live(p, g, "a") == copy, "block %d copy %d: a live %d", (int)block, (int)copy, (int)live(p, g, "a"));
      CHECK_MSG(live(p, g, "b") == copy, "block %d copy %d: b", (int)block, (int)copy);
      CHECK_MSG(live(p, g, "cc") == copy, "block %d copy %d: cc", (int)block, (int)copy);
      CHECK_MSG(live(p, g, "e") == copy, "block %d copy %d: e", (int)block, (int)copy);
      CHECK(live(p, g, "o1"));
    }
    if (tg_cpu_run(p, t.feeds, got)) {
      for (int32_t i = 0; i < g->n_outputs; ++i) {
        double err = max_err(&got[i], &want[i]);
        CHECK_MSG(err <= 5e-4, "block %d fuse %d copy %d: output %s differs from the reference by %g", (int)block,
                  (int)fuse, (int)copy, g->tensors[g->outputs[i]].name, err);
      }
    }
  }
  unsetenv("KILN_CONV_PAD");
  for (int32_t i = 0; i < g->n_outputs; ++i) {
    kiln_array_free(A(), &want[i]);
    kiln_array_free(A(), &got[i]);
  }
  kiln_plan_destroy(p);
  tg_free(&t);
}

static void test_fold_16(void) { run_case(16, true, false); }
static void test_fold_8(void) { run_case(8, true, false); }
static void test_unfused_16(void) { run_case(16, false, false); }
static void test_copy_16(void) { run_case(16, true, true); }

int main(void) {
  setenv("KILN_WINO", "0", 1);
  RUN(test_fold_16);
  RUN(test_fold_8);
  RUN(test_unfused_16);
  RUN(test_copy_16);
  return kiln_test_finish();
}
