/* Shape sharing on the CPU target (targets/cpu/cpu_share.c): kernels whose
 * C differs only in integer constants print one body that reads the
 * differing constants from its callers.
 *
 * - the literal scan: which numbers of a kernel text may become parameters
 *   (plain int literals) and which stay part of the shape (floats, suffixed
 *   and too-large literals, pragmas, array sizes, loop steps, the loop under
 *   an unroll pragma);
 * - a DenseNet-like graph: two 1x1 convs of one kind (NCHWc input, Relu
 *   epilogue) with different input channels (16 and 32), and a third
 *   identical to the first: the first two
 *   call one shared body, the third is an alias of the first; run on the
 *   CPU against the reference executor, with sharing on and off
 *   (KILN_CPU_SHARE=0), and the two runs agree bit for bit.
 * - a weight prefetch's literals are parameters (test_prefetch_scan).
 * KILN_TEST_NO_CPU=1 skips the native runs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "ref_graph_util.h"
#include "targets/cpu/cpu_internal.h"

static kiln_cpu_shape_t shape_of(const char* text) {
  kiln_cpu_shape_t s;
  memset(&s, 0, sizeof s);
  CHECK_OK(kiln_cpu_shape_of(text, strlen(text), &s));
  return s;
}

static void test_literal_scan(void) {
  const char* a =
      "void KILN_KERNEL(void* const* args) {\n"
      "  float* restrict p0 = (float*)args[0];\n"
      "  float v1[96] __attribute__((aligned(64)));\n"
      "  #pragma GCC unroll 6\n"
      "  for (int64_t v2 = 0; v2 < 6; v2++) {\n"
      "    for (int64_t v4 = 0; v4 < 64; v4++) {\n"
      "      for (int64_t v3 = 0; v3 < 16; v3 += 8) {\n"
      "        p0[v2 * 25088 + v4 % 7 + v3] = 1.5f + 2e-05f + 0x10 + 3000000000 + 4u + .5f + v1[v3];\n"
      "      }\n"
      "    }\n"
      "  }\n"
      "}\n";
  kiln_cpu_shape_t s = shape_of(a);
  /* parameters: args[0] (a plain int, but equal in every member that can
   * share), the middle loop's 0 and 64, and 25088; the loop under the
   * unroll pragma, the innermost loop, the pragma, the array size, the
   * divisor 7, the floats, hex, too large and suffixed literals stay in the
   * shape */
  static const int32_t want[] = {0, 0, 64, 25088};
  CHECK_MSG(s.n_lits == 4, "%d literals", (int)s.n_lits);
  for (int32_t i = 0; i < s.n_lits && i < 4; ++i)
    CHECK_MSG(s.lits[i] == want[i], "literal %d is %d", (int)i, (int)s.lits[i]);
  CHECK(strstr(s.skel, "unroll 6\n") && strstr(s.skel, "v2 < 6;") && strstr(s.skel, "[96]") &&
        strstr(s.skel, "v3 < 16; v3 += 8)") && strstr(s.skel, "% 7 ") &&
        strstr(s.skel, "1.5f + 2e-05f + 0x10 + 3000000000 + 4u + .5f"));
  /* another member: another middle trip and stride; same shape */
  char b[1024];
  snprintf(b, sizeof b, "%s", a);
  char* at = strstr(b, "v4 < 64");
  memcpy(at, "v4 < 32", 7);
  at = strstr(b, "25088");
  memcpy(at, "12544", 5);
  kiln_cpu_shape_t t = shape_of(b);
  CHECK(kiln_cpu_shape_same(&s, &t));
  kiln_cpu_shape_free(&t);
  /* another register tile (the unroll count and its loop's trip), another
   * innermost trip, another divisor, another float: each another shape */
  const char* edits[][2] = {{"unroll 6\n  for (int64_t v2 = 0; v2 < 6;", "unroll 5\n  for (int64_t v2 = 0; v2 < 5;"},
                            {"v3 < 16", "v3 < 24"}, {"% 7", "% 9"}, {"1.5f", "1.7f"}};
  for (int i = 0; i < 4; ++i) {
    snprintf(b, sizeof b, "%s", a);
    at = strstr(b, edits[i][0]);
    memcpy(at, edits[i][1], strlen(edits[i][1]));
    t = shape_of(b);
    CHECK_MSG(!kiln_cpu_shape_same(&s, &t), "edit %d keeps the shape", i);
    kiln_cpu_shape_free(&t);
  }
  kiln_cpu_shape_free(&s);
}

/* x [1,16,8,8] -> p = Conv 1x1 16->16 (x) (so the next convs read NCHWc);
 * a = Relu(Conv 1x1 16->16 (p)); cat = Concat(p, a) [1,32,8,8] -> y =
 * Relu(Conv 1x1 32->16 (cat)); z = Relu(Conv 1x1 16->16 (p), other
 * weights); outputs y, z. */
static kiln_graph_t* dense_graph(kiln_array_t* feed) {
  kiln_graph_t* g = graph(17);
  input(g, "x", KILN_DTYPE_F32, SHAPE(1, 16, 8, 8));
  uint64_t st = 0x9E3779B97F4A7C15ull;
  float wp[16 * 16], wa[16 * 16], wy[16 * 32], wz[16 * 16], x[16 * 64];
  float* all[] = {wp, wa, wy, wz, x};
  size_t counts[] = {16 * 16, 16 * 16, 16 * 32, 16 * 16, 16 * 64};
  for (int k = 0; k < 5; ++k)
    for (size_t i = 0; i < counts[k]; ++i) {
      st ^= st << 13, st ^= st >> 7, st ^= st << 17;
      all[k][i] = (float)((double)(st >> 11) / (double)(1ull << 52) - 1.0);
    }
  init(g, "wp", KILN_DTYPE_F32, SHAPE(16, 16, 1, 1), wp);
  init(g, "wa", KILN_DTYPE_F32, SHAPE(16, 16, 1, 1), wa);
  init(g, "wy", KILN_DTYPE_F32, SHAPE(16, 32, 1, 1), wy);
  init(g, "wz", KILN_DTYPE_F32, SHAPE(16, 16, 1, 1), wz);
  CHECK_OK(kiln_graph_add_node(g, "Conv", "conv_p", NAMES("x", "wp"), 1, (const char*[]){"p"}, NO_ATTRS, NULL));
  CHECK_OK(kiln_graph_add_node(g, "Conv", "conv_a", NAMES("p", "wa"), 1, (const char*[]){"ha"}, NO_ATTRS, NULL));
  CHECK_OK(kiln_graph_add_node(g, "Relu", "relu_a", NAMES("ha"), 1, (const char*[]){"a"}, NO_ATTRS, NULL));
  kiln_attr_t axis = {.name = "axis", .type = KILN_ATTR_INT, .i = 1};
  CHECK_OK(kiln_graph_add_node(g, "Concat", "cat", NAMES("p", "a"), 1, (const char*[]){"c"}, 1, &axis, NULL));
  CHECK_OK(kiln_graph_add_node(g, "Conv", "conv_y", NAMES("c", "wy"), 1, (const char*[]){"hy"}, NO_ATTRS, NULL));
  CHECK_OK(kiln_graph_add_node(g, "Relu", "relu_y", NAMES("hy"), 1, (const char*[]){"y"}, NO_ATTRS, NULL));
  CHECK_OK(kiln_graph_add_node(g, "Conv", "conv_z", NAMES("p", "wz"), 1, (const char*[]){"hz"}, NO_ATTRS, NULL));
  CHECK_OK(kiln_graph_add_node(g, "Relu", "relu_z", NAMES("hz"), 1, (const char*[]){"z"}, NO_ATTRS, NULL));
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_OK(kiln_graph_add_output(g, "z"));
  *feed = array(KILN_DTYPE_F32, SHAPE(1, 16, 8, 8), x);
  return g;
}

/* The plan kernel computing node |name|'s conv (the one with packed weights). */
static const char* conv_kernel(const kiln_plan_t* p, const kiln_graph_t* g, const char* name) {
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    int32_t nd = p->kernels[k].node;
    if (nd < 0 || nd >= g->n_nodes || strcmp(g->nodes[nd].name, name)) continue;
    for (int32_t j = 0; j < p->kernels[k].func->n_params; ++j)
      if (strstr(p->kernels[k].func->params[j]->name, "wpack")) return p->kernels[k].func->name;
  }
  return NULL;
}

/* max |got - want| / (1 + |want|) over f32 arrays of one size (NaN: infinite). */
static double max_err(const kiln_array_t* got, const kiln_array_t* want) {
  if (!got->data || got->nbytes != want->nbytes) return INFINITY;
  double err = 0;
  for (int64_t j = 0; j < kiln_array_numel(want); ++j) {
    double gv = kiln_load_f64(KILN_DTYPE_F32, got->data, (size_t)j);
    double wv = kiln_load_f64(KILN_DTYPE_F32, want->data, (size_t)j);
    double d = fabs(gv - wv) / (1.0 + fabs(wv));
    if (!(d <= err)) err = d;
  }
  return err;
}

/* Runs the plan on the CPU; outputs into |got| (one per graph output). */
static void run_cpu(const kiln_plan_t* p, const kiln_array_t* feed, kiln_array_t* got) {
  kiln_cpu_options_t o;
  kiln_cpu_options_default(&o);
  o.threads = 2;
  kiln_cpu_exec_t* e = NULL;
  if (CHECK_OK(kiln_cpu_compile(p, &o, &e, NULL))) CHECK_OK(kiln_cpu_run(e, feed, got, NULL, NULL));
  kiln_cpu_exec_destroy(e);
}

static void test_dense_convs(void) {
  kiln_array_t feed;
  kiln_graph_t* g = dense_graph(&feed);
  kiln_array_t want[2], on[2], off[2];
  memset(want, 0, sizeof want), memset(on, 0, sizeof on), memset(off, 0, sizeof off);
  kiln_plan_options_t po = {.target = KILN_TARGET_CLASS_CPU, .threads = 2, .layout_block = 8};
  kiln_plan_t* p = NULL;
  if (CHECK_OK(kiln_graph_prepare(g)) && CHECK_OK(run(g, &feed, want)) &&
      CHECK_OK(kiln_plan_build(g, &po, sys(), &p))) {
    kiln_fusion_report_t fr;
    CHECK_OK(kiln_plan_fuse(p, &fr, NULL));
    const char *ka = conv_kernel(p, g, "conv_a"), *ky = conv_kernel(p, g, "conv_y"),
               *kz = conv_kernel(p, g, "conv_z");
    CHECK_MSG(ka && ky && kz, "conv kernels: %s %s %s", ka ? ka : "-", ky ? ky : "-", kz ? kz : "-");
    char* src = NULL;
    unsetenv("KILN_CPU_SHARE");
    if (ka && ky && kz && CHECK_OK(kiln_cpu_generate_source(p, &src, NULL))) {
      char call[256];
      /* conv_y and conv_z: calls of one shared body, with their constants
       * (conv_a stores into its slice of the Concat, at an offset the
       * others' stores lack, so it keeps a body of its own) */
      const char* body = strstr(src, "KILN_SHARED void kiln_shared_");
      CHECK_MSG(body != NULL, "no shared body in the source");
      int group = body ? atoi(body + strlen("KILN_SHARED void kiln_shared_")) : -1;
      const char* names[] = {ky, kz};
      for (int i = 0; i < 2; ++i) {
        snprintf(call, sizeof call, "void %s(void* const* args) {\n  static const int kc[] = {", names[i]);
        const char* at = strstr(src, call);
        CHECK_MSG(at, "kernel %s is not a call of a shared body", names[i]);
        snprintf(call, sizeof call, "kiln_shared_%d(args, kc);", group);
        CHECK_MSG(at && strstr(at, call), "kernel %s does not call kiln_shared_%d", names[i], group);
      }
    }
    free(src);
    if (!getenv("KILN_TEST_NO_CPU")) {
      run_cpu(p, &feed, on);
      setenv("KILN_CPU_SHARE", "0", 1);
      src = NULL;
      if (CHECK_OK(kiln_cpu_generate_source(p, &src, NULL)))
        CHECK_MSG(!strstr(src, "kiln_shared_"), "KILN_CPU_SHARE=0 still shares");
      free(src);
      run_cpu(p, &feed, off);
      unsetenv("KILN_CPU_SHARE");
      for (int i = 0; i < 2; ++i) {
        CHECK(on[i].data && off[i].data && on[i].nbytes == want[i].nbytes && off[i].nbytes == want[i].nbytes);
        if (!on[i].data || !off[i].data || on[i].nbytes != want[i].nbytes || off[i].nbytes != want[i].nbytes) continue;
        CHECK_MSG(memcmp(on[i].data, off[i].data, on[i].nbytes) == 0,
                  "output %d differs between shared and specialised kernels", i);
        double err = max_err(&on[i], &want[i]);
        CHECK_MSG(err <= 1e-4, "output %d differs from the reference by %g", i, err);
      }
    }
  }
  for (int i = 0; i < 2; ++i) {
    kiln_array_free(sys(), &want[i]);
    kiln_array_free(sys(), &on[i]);
    kiln_array_free(sys(), &off[i]);
  }
  kiln_array_free(sys(), &feed);
  kiln_plan_destroy(p);
  kiln_graph_destroy(g);
}

/* x [1,16,12,12] -> Conv 1x1 (NCHWc) -> MaxPool 3x3 stride 2 pad 1: the
 * running maximum select(x > acc, x, acc) prints each operand once (a
 * statement expression), not 2^9 copies of the first tap; and computes as
 * the reference. */
static void test_maxpool_text(void) {
  kiln_graph_t* g = graph(17);
  input(g, "x", KILN_DTYPE_F32, SHAPE(1, 16, 12, 12));
  float w[16 * 16], x[16 * 144];
  for (int i = 0; i < 16 * 16; ++i) w[i] = (float)((i * 37) % 17 - 8) * 0.05f;
  for (int i = 0; i < 16 * 144; ++i) x[i] = (float)((i * 53) % 101 - 50) * 0.02f;
  init(g, "w", KILN_DTYPE_F32, SHAPE(16, 16, 1, 1), w);
  CHECK_OK(kiln_graph_add_node(g, "Conv", "conv", NAMES("x", "w"), 1, (const char*[]){"h"}, NO_ATTRS, NULL));
  static const int64_t k3[2] = {3, 3}, s2[2] = {2, 2}, p1[4] = {1, 1, 1, 1};
  kiln_attr_t at[3] = {{.name = "kernel_shape", .type = KILN_ATTR_INTS, .count = 2, .ints = k3},
                       {.name = "strides", .type = KILN_ATTR_INTS, .count = 2, .ints = s2},
                       {.name = "pads", .type = KILN_ATTR_INTS, .count = 4, .ints = p1}};
  CHECK_OK(kiln_graph_add_node(g, "MaxPool", "pool", NAMES("h"), 1, (const char*[]){"y"}, 3, at, NULL));
  CHECK_OK(kiln_graph_add_output(g, "y"));
  kiln_array_t feed = array(KILN_DTYPE_F32, SHAPE(1, 16, 12, 12), x), want, got;
  memset(&want, 0, sizeof want), memset(&got, 0, sizeof got);
  kiln_plan_options_t po = {.target = KILN_TARGET_CLASS_CPU, .threads = 2, .layout_block = 8};
  kiln_plan_t* p = NULL;
  char* src = NULL;
  size_t len = 0;
  if (CHECK_OK(kiln_graph_prepare(g)) && CHECK_OK(run(g, &feed, &want)) &&
      CHECK_OK(kiln_plan_build(g, &po, sys(), &p)) && CHECK_OK(kiln_cpu_generate_source(p, &src, &len))) {
    /* the whole unit with the bindings is ~20 KB; as trees the pool alone was over 100 KB */
    CHECK_MSG(len < 60000, "the unit is %zu bytes", len);
    CHECK(strstr(src, " kiln_s0 = ") != NULL); /* kiln_v8f, or v4f on 4-lane CPUs */
    if (!getenv("KILN_TEST_NO_CPU")) {
      run_cpu(p, &feed, &got);
      double err = max_err(&got, &want);
      CHECK_MSG(err <= 1e-4, "the pool differs from the reference by %g", err);
    }
  }
  free(src);
  kiln_array_free(sys(), &want);
  kiln_array_free(sys(), &got);
  kiln_array_free(sys(), &feed);
  kiln_plan_destroy(p);
  kiln_graph_destroy(g);
}

/* A weight prefetch (a statement line without '=') takes parameters like
 * any statement: two kernels whose prefetch strides differ share a shape
 * (DenseNet-121's prefetching 1x1 convs printed a body each before); a
 * call without '=' that is not a prefetch stays part of the shape. */
static void test_prefetch_scan(void) {
  const char* a =
      "void KILN_KERNEL(void* const* args) {\n"
      "  float* restrict p0 = (float*)args[0];\n"
      "  for (int64_t v4 = 0; v4 < 25; v4++) {\n"
      "    for (int64_t v3 = 0; v3 < 16; v3++) {\n"
      "      __builtin_prefetch(&p0[v4 * 51200 + v3 * 32]);\n"
      "      kiln_touch(p0, 12800);\n"
      "      p0[v4 * 51200 + v3] = 1.0f;\n"
      "    }\n"
      "  }\n"
      "}\n";
  kiln_cpu_shape_t s = shape_of(a);
  /* args[0], the outer loop's 0 and 25, the prefetch's 51200 and 32, the store's 51200 */
  static const int32_t want[] = {0, 0, 25, 51200, 32, 51200};
  CHECK_MSG(s.n_lits == 6, "%d literals", (int)s.n_lits);
  for (int32_t i = 0; i < s.n_lits && i < 6; ++i)
    CHECK_MSG(s.lits[i] == want[i], "literal %d is %d", (int)i, (int)s.lits[i]);
  char b[1024];
  snprintf(b, sizeof b, "%s", a);
  char* at = strstr(b, "v4 < 25");
  memcpy(at, "v4 < 26", 7);
  while ((at = strstr(b, "51200")) != NULL) memcpy(at, "53248", 5);
  kiln_cpu_shape_t t = shape_of(b);
  CHECK(kiln_cpu_shape_same(&s, &t));
  kiln_cpu_shape_free(&t);
  snprintf(b, sizeof b, "%s", a);
  at = strstr(b, "12800");
  memcpy(at, "13312", 5);
  t = shape_of(b);
  CHECK(!kiln_cpu_shape_same(&s, &t));
  kiln_cpu_shape_free(&t);
  kiln_cpu_shape_free(&s);
}

int main(void) {
  RUN(test_literal_scan);
  RUN(test_dense_convs);
  RUN(test_maxpool_text);
  RUN(test_prefetch_scan);
  return kiln_test_finish();
}
