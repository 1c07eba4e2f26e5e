/* Softmax / LogSoftmax rows on Vulkan through kernels/vulkan/rows.comp (a
 * subgroup a row, subgroupMax / subgroupAdd): a model with last-axis rows
 * of 1000 (a batch of 3 x 2 rows, vec4 steps), 7 and 3 (shorter than a
 * subgroup, scalar steps; the 3 a LogSoftmax), 4096 (two rows), 1040 rows
 * of 1024 (past the default's 2^20 elements) and one Softmax over a
 * middle axis (strided: the printed kernel) is compiled
 * through the public compiler API (which asks the device its features)
 * with the shaders dumped, then run in a session against loops here.
 * Per mode: the device's subgroup_arith, the row instances in the dumped
 * GLSL and the results: the default (the template on the big rows only),
 * every last-axis node (KILN_SPIRV_ROWS=subgroup; never the strided one),
 * the printed kernels (=printed), and the template forced on a device
 * whose subgroup arithmetic is hidden (KILN_VULKAN_FEATURES=
 * no-subgroup-arith: the printed kernels, subgroup ballot still there).
 * fp16: Relu -> Softmax -> Relu in an fp16 plan, so that the Softmax reads
 * and writes f16 activations, with the template forced: rows of 1000 (vec4
 * steps) and 7, X and Y f16 in the instance (HX, HY), the sums f32, the
 * results within the halves' rounding of the loops here; by default none,
 * even on 1040 rows of 1024 (the f16 rule: the printed kernel).
 * LayerNormalization rows (rows.comp's LN mode) in a second model: rows of
 * 768 (a 3 x 2 batch), 1000 (a run-time scale, no bias), 7, 3 (eps 0.1),
 * 512 of mean 1e3 and spread ~1, 12 (axis 1 of 2 x 3 x 4), 1040 x 1024,
 * and a [1] scale the lowering broadcasts (the printed kernel), against
 * loops in double: forced (7 instances), by default, printed and with the
 * arithmetic hidden (none).
 * Reductions (rows.comp's RED modes) in a third model: ReduceSum (axes an
 * input), Mean, Max, Min, SumSquare, L2, L1, LogSum, LogSumExp (its two
 * kernels) over the last axes, keepdims 0 and 1, rows of 1, 3, 7, 20, 28,
 * 768, 1000, 4099, values past f32's exp (LogSumExp's max subtracted),
 * rows with NaN / -inf / +inf for Max, Min, LogSumExp and GlobalMaxPool,
 * GlobalAveragePool 1x32x7x7 and 2x3x56x56, and a middle-axis ReduceSum
 * (the printed kernel), against loops in double: forced (every last-axis
 * case), by default (none: slower on lavapipe), printed and hidden (none). */
#include "../bad_model_util.h" /* first: it defines _GNU_SOURCE */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kiln/compiler.h"
#include "kiln/runtime.h"
#include "runtime/device.h"
#include "testing.h"

/* the cases: input shape, Softmax axis, log form, rows through rows.comp */
typedef struct {
  const char *in, *out;
  int32_t rank;
  int64_t dims[3];
  int64_t axis;
  bool log, tmpl;
} case_t;

static const case_t g_cases[] = {
    {"A", "YA", 3, {3, 2, 1000}, -1, false, true}, {"B", "YB", 2, {5, 7, 0}, -1, false, true},
    {"C", "YC", 2, {9, 3, 0}, 1, true, true},      {"D", "YD", 2, {2, 4096, 0}, -1, false, true},
    {"E", "YE", 3, {2, 5, 6}, 1, false, false},    {"F", "YF", 2, {1040, 1024, 0}, -1, false, true},
};
/* row instances: every last-axis case where forced; by default the one
 * of 2^20 elements or more (F) */
enum { NCASE = sizeof g_cases / sizeof g_cases[0], NTMPL = 5, NBIG = 1 };

static char g_dir[512];
static char g_model[600];

static int64_t numel(const case_t* c) {
  int64_t n = 1;
  for (int32_t i = 0; i < c->rank; ++i) n *= c->dims[i];
  return n;
}

/* inputs of a few units with one row far from 0 (the max taken first) */
static float x_at(int32_t c, int64_t i) {
  return 4.0f * sinf(0.37f * (float)i + (float)c) + 0.01f * (float)(i % 101) + (i < 7 ? 30.0f : 0.0f);
}

static void write_model(void) {
  bm_model_t b;
  bm_init(&b, 13);
  for (int32_t c = 0; c < NCASE; ++c) {
    b.g.input[b.g.n_input++] = bm_value(&b, g_cases[c].in, BM_F32, g_cases[c].rank, g_cases[c].dims, NULL);
    char ins[8];
    snprintf(ins, sizeof ins, "%s", g_cases[c].in);
    Onnx__NodeProto* n = bm_node(&b, g_cases[c].log ? "LogSoftmax" : "Softmax", g_cases[c].out, ins, g_cases[c].out);
    bm_attr_int(&b, n, "axis", g_cases[c].axis);
    bm_output(&b, g_cases[c].out);
  }
  snprintf(g_model, sizeof g_model, "%s/rows.onnx", g_dir);
  CHECK(bm_write(&b, g_model));
  bm_free(&b);
}

/* outputs of case |c| that differ from its rows computed here in double */
static int64_t case_bad(const case_t* c, const float* x, const float* y) {
  const int32_t ax = (int32_t)(c->axis < 0 ? c->axis + c->rank : c->axis);
  int64_t outer = 1, n = c->dims[ax], inner = 1;
  for (int32_t d = 0; d < ax; ++d) outer *= c->dims[d];
  for (int32_t d = ax + 1; d < c->rank; ++d) inner *= c->dims[d];
  int64_t bad = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      const int64_t base = o * n * inner + in;
      double m = -INFINITY, s = 0;
      for (int64_t i = 0; i < n; ++i) m = fmax(m, x[base + i * inner]);
      for (int64_t i = 0; i < n; ++i) s += exp((double)x[base + i * inner] - m);
      for (int64_t i = 0; i < n; ++i) {
        const double d = (double)x[base + i * inner] - m;
        const double want = c->log ? d - log(s) : exp(d) / s;
        const double got = y[base + i * inner];
        bad += !(fabs(got - want) <= 1e-5 + 1e-4 * fabs(want));
      }
    }
  return bad;
}

/* The module |data| (|len| bytes, named |name|) run on the Vulkan device
 * with inputs |in| into |out|; false after a failed check. */
static bool run_vulkan(const void* data, size_t len, const char* name, const kiln_array_t* in, kiln_array_t* out) {
  kiln_allocator_t al = kiln_allocator_system();
  kiln_module_t* m = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  const bool ok = CHECK_OK(kiln_module_load_memory(data, len, name, al, &m)) &&
                  CHECK_OK(kiln_device_open("vulkan", NULL, al, &d)) && CHECK_OK(kiln_session_create(m, d, NULL, &s)) &&
                  CHECK_OK(kiln_session_run(s, in, out));
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
  return ok;
}

static void run_and_compare(const void* data, size_t n, const char* mode) {
  kiln_allocator_t al = kiln_allocator_system();
  kiln_array_t in[NCASE], out[NCASE];
  memset(in, 0, sizeof in);
  memset(out, 0, sizeof out);
  bool ok = true;
  for (int32_t c = 0; c < NCASE && ok; ++c) {
    const kiln_shape_t sh = kiln_shape_make(g_cases[c].rank, g_cases[c].dims);
    ok = CHECK_OK(kiln_array_alloc(al, KILN_DTYPE_F32, &sh, &in[c]));
    for (int64_t i = 0; ok && i < numel(&g_cases[c]); ++i) ((float*)in[c].data)[i] = x_at(c, i);
  }
  if (ok && run_vulkan(data, n, "rows", in, out))
    for (int32_t c = 0; c < NCASE; ++c) {
      const int64_t bad = case_bad(&g_cases[c], in[c].data, out[c].data);
      CHECK_MSG(bad == 0, "%s: %s: %lld of %lld outputs differ from the reference", mode, g_cases[c].out,
                (long long)bad, (long long)numel(&g_cases[c]));
    }
  for (int32_t c = 0; c < NCASE; ++c) {
    kiln_array_free(al, &in[c]);
    kiln_array_free(al, &out[c]);
  }
}

/* |model| compiled for Vulkan (|precision|: NULL for the default) with its
 * kernels dumped under |dump|: the compiler, holding the module, and in
 * *glsl the dumped shaders (NULL where missing, named by a failed check;
 * the caller frees it); NULL, the compiler destroyed, where it failed. */
static kiln_compiler_t* compile_dumped(const char* model, const char* precision, const char* dump, char** glsl) {
  kiln_compiler_t* c = NULL;
  *glsl = NULL;
  if (!CHECK_OK(kiln_compiler_create(KILN_COMPILER_ABI_VERSION, &c))) return NULL;
  CHECK_OK(kiln_compiler_load_model(c, model));
  CHECK_OK(kiln_compiler_set_option(c, "target", "vulkan"));
  if (precision) CHECK_OK(kiln_compiler_set_option(c, "precision", precision));
  CHECK_OK(kiln_compiler_set_option(c, "dump", dump));
  if (!CHECK_OK(kiln_compiler_compile(c))) {
    kiln_compiler_destroy(c);
    return NULL;
  }
  char path[700];
  snprintf(path, sizeof path, "%s/kernels.comp", dump);
  *glsl = kiln_test_read_text(path);
  CHECK_MSG(*glsl != NULL, "%s: no %s", model, path);
  return c;
}

/* What check_mode, check_ln and check_red set up alike: KILN_VULKAN_FEATURES
 * |hide| and KILN_SPIRV_ROWS |rows| (NULL: unset), the mode's name in
 * |mode| (after |what|), and whether the device then reports subgroup
 * arithmetic and ballot; false where no device opened. */
static bool set_mode(const char* what, const char* hide, const char* rows, char* mode, size_t len, bool* arith,
                     bool* ballot) {
  snprintf(mode, len, "%sfeatures %s, rows %s", what, hide ? hide : "all", rows ? rows : "default");
  kiln_test_setenv("KILN_VULKAN_FEATURES", hide);
  kiln_test_setenv("KILN_SPIRV_ROWS", rows);
  kiln_device_t* d = NULL;
  if (!CHECK_OK(kiln_device_open("vulkan", NULL, kiln_allocator_system(), &d))) return false;
  *arith = d->info.subgroup_arith;
  *ballot = d->info.subgroup_ballot;
  kiln_device_release(d);
  return true;
}

/* |model| compiled as compile_dumped does, its kernels dumped in a folder
 * of its own named by |tag|, |hide| and |rows| */
static kiln_compiler_t* compile_mode(const char* tag, const char* model, const char* hide, const char* rows,
                                     char** glsl) {
  char dump[600];
  snprintf(dump, sizeof dump, "%s/%sdump-%s-%s", g_dir, tag, hide ? hide : "all", rows ? rows : "default");
  CHECK(mkdir(dump, 0755) == 0);
  return compile_dumped(model, NULL, dump, glsl);
}

/* |hide|: KILN_VULKAN_FEATURES (NULL: unset); |rows|: KILN_SPIRV_ROWS (NULL: unset);
 * whether the device must then report subgroup arithmetic and the row
 * instances the compile must print. */
static void check_mode(const char* hide, const char* rows, bool arith, int want) {
  char mode[128];
  bool has = false, ballot = false;
  if (!set_mode("", hide, rows, mode, sizeof mode, &has, &ballot)) return;
  if (hide) {
    CHECK_MSG(has == arith && ballot, "%s: device reports subgroup arithmetic %d, ballot %d", mode, has, ballot);
  } else if (!has) {
    printf("  (this device has no subgroup arithmetic in compute: no row instances expected)\n");
    want = 0;
  }
  char* glsl = NULL;
  kiln_compiler_t* c = compile_mode("", g_model, hide, rows, &glsl);
  if (c) {
    if (glsl) {
      const int n = kiln_test_count(glsl, "// kiln rows '");
      CHECK_MSG(n == want, "%s: %d row instances, expected %d", mode, n, want);
      if (want == NTMPL) {
        CHECK_MSG(kiln_test_count(glsl, "#define VEC4 1\n") == 3 && kiln_test_count(glsl, "#define VEC4 0\n") == 2,
                  "%s: vec4 steps for the rows of 1000, 4096 and 1024 only", mode);
        CHECK_MSG(kiln_test_count(glsl, "#define LOG 1\n") == 1, "%s: one LogSoftmax instance", mode);
      }
      free(glsl);
    }
    const void* data = NULL;
    size_t n = 0;
    if (CHECK_OK(kiln_compiler_module(c, &data, &n))) run_and_compare(data, n, mode);
  }
  kiln_compiler_destroy(c);
}

/* fp16: relu(softmax(relu(x))) over [rows][n], the Softmax's X and Y f16;
 * |forced|: KILN_SPIRV_ROWS=subgroup (one f16 instance), else the default
 * (none: on lavapipe the printed kernel reading rgba16f texels is faster) */
static void check_fp16(int64_t rows, int64_t n, bool vec4, bool forced) {
  char model[640], dump[640];
  snprintf(model, sizeof model, "%s/rows16_%lld_%d.onnx", g_dir, (long long)n, forced);
  snprintf(dump, sizeof dump, "%s/dump16_%lld_%d", g_dir, (long long)n, forced);
  const int64_t dims[2] = {rows, n};
  bm_model_t b;
  bm_init(&b, 5);
  b.g.input[b.g.n_input++] = bm_value(&b, "X", BM_F32, 2, dims, NULL);
  bm_node(&b, "Relu", "r1", "X", "H");
  bm_attr_int(&b, bm_node(&b, "Softmax", "sm", "H", "S"), "axis", -1);
  bm_node(&b, "Relu", "r2", "S", "Y");
  bm_output(&b, "Y");
  CHECK(bm_write(&b, model));
  bm_free(&b);
  CHECK(mkdir(dump, 0755) == 0);
  unsetenv("KILN_VULKAN_FEATURES");
  kiln_test_setenv("KILN_SPIRV_ROWS", forced ? "subgroup" : NULL);
  kiln_device_t* d = NULL;
  if (!CHECK_OK(kiln_device_open("vulkan", NULL, kiln_allocator_system(), &d))) return;
  const bool has = d->info.subgroup_arith;
  kiln_device_release(d);
  char* glsl = NULL;
  kiln_compiler_t* c = compile_dumped(model, "fp16", dump, &glsl);
  if (c) {
    if (glsl && !(has && forced))
      CHECK_MSG(kiln_test_count(glsl, "// kiln rows '") == 0, "fp16 rows of %lld: a row instance by default",
                (long long)n);
    else if (glsl)
      CHECK_MSG(kiln_test_count(glsl, "// kiln rows '") == 1 && kiln_test_count(glsl, "#define HX 1\n#define HY 1\n") == 1 &&
                    kiln_test_count(glsl, vec4 ? "#define VEC4 1\n" : "#define VEC4 0\n") == 1,
                "fp16 rows of %lld: no f16 row instance (vec4 %d)", (long long)n, vec4);
    free(glsl);
    const void* data = NULL;
    size_t len = 0;
    kiln_allocator_t al = kiln_allocator_system();
    kiln_array_t x, y;
    memset(&x, 0, sizeof x);
    memset(&y, 0, sizeof y);
    const kiln_shape_t sh = kiln_shape_make(2, dims);
    if (CHECK_OK(kiln_compiler_module(c, &data, &len)) && CHECK_OK(kiln_array_alloc(al, KILN_DTYPE_F32, &sh, &x))) {
      float* xv = x.data;
      for (int64_t i = 0; i < rows * n; ++i) xv[i] = x_at(1, i) * 0.25f;
      if (run_vulkan(data, len, "rows16", &x, &y)) {
        int64_t bad = 0;
        for (int64_t r = 0; r < rows; ++r) {
          double m = 0, sum = 0; /* relu(x) >= 0 */
          for (int64_t i = 0; i < n; ++i) m = fmax(m, fmax(xv[r * n + i], 0.0f));
          for (int64_t i = 0; i < n; ++i) sum += exp(fmax(xv[r * n + i], 0.0f) - m);
          for (int64_t i = 0; i < n; ++i) {
            const double want = exp(fmax(xv[r * n + i], 0.0f) - m) / sum, got = ((float*)y.data)[r * n + i];
            bad += !(fabs(got - want) <= 1e-5 + 4e-3 * want); /* x and y as halves */
          }
        }
        CHECK_MSG(bad == 0, "fp16 rows of %lld: %lld of %lld outputs off", (long long)n, (long long)bad,
                  (long long)(rows * n));
      }
    }
    kiln_array_free(al, &x);
    kiln_array_free(al, &y);
  }
  kiln_compiler_destroy(c);
}

static void test_fp16(void) {
  check_fp16(6, 1000, true, true);
  check_fp16(5, 7, false, true);
  check_fp16(1040, 1024, true, false); /* past 2^20 elements: still printed */
}

/* ---- LayerNormalization rows ---------------------------------------------- */

/* the LayerNorm cases: X's shape, axis, the scale (CONST: an [n]
 * initializer; INPUT: an [n] graph input; ONE: a [1] initializer, which
 * the lowering broadcasts: the printed kernel), a bias, eps, X's offset
 * (1e3: a row of mean 1e3 and spread ~1), and whether forced rows take it */
enum { SC_CONST, SC_INPUT, SC_ONE };
typedef struct {
  const char *in, *out;
  int32_t rank;
  int64_t dims[3];
  int64_t axis;
  int sc;
  bool bias;
  float eps, off;
  bool tmpl;
} ln_case_t;

static const ln_case_t g_ln[] = {
    {"LA", "ZA", 3, {3, 2, 768}, -1, SC_CONST, true, 1e-5f, 0, true},
    {"LB", "ZB", 2, {4, 1000, 0}, -1, SC_INPUT, false, 1e-5f, 0, true},
    {"LC", "ZC", 2, {5, 7, 0}, -1, SC_CONST, true, 1e-3f, 0, true},
    {"LD", "ZD", 2, {6, 3, 0}, -1, SC_CONST, false, 0.1f, 0, true},
    {"LE", "ZE", 2, {2, 512, 0}, -1, SC_CONST, true, 1e-5f, 1e3f, true},
    {"LF", "ZF", 3, {2, 3, 4}, 1, SC_CONST, true, 1e-5f, 0, true},
    {"LG", "ZG", 2, {4, 8, 0}, -1, SC_ONE, true, 1e-5f, 0, false},
    {"LH", "ZH", 2, {1040, 1024, 0}, -1, SC_CONST, true, 1e-5f, 0, true},
};
/* instances where forced; by default none (on lavapipe the printed kernel
 * measured as fast or faster, even on LH's 2^20 elements) */
enum { NLN = sizeof g_ln / sizeof g_ln[0], NLN_TMPL = 7, NLN_BIG = 0 };

static char g_ln_model[600];

static int64_t ln_rows(const ln_case_t* c, int64_t* n) {
  const int32_t ax = (int32_t)(c->axis < 0 ? c->axis + c->rank : c->axis);
  int64_t rows = 1;
  *n = 1;
  for (int32_t d = 0; d < c->rank; ++d) {
    if (d < ax) rows *= c->dims[d];
    else *n *= c->dims[d];
  }
  return rows;
}
static float ln_x(int32_t c, int64_t i) {
  return g_ln[c].off + 2.0f * sinf(0.37f * (float)i + (float)c) + 0.01f * (float)(i % 101);
}
/* scale and bias differ, so that swapping them shows */
static float ln_scale(int64_t i) { return 0.5f + 0.1f * (float)(i % 9); }
static float ln_bias(int64_t i) { return 0.25f * (float)(i % 5) - 0.5f; }

static void write_ln_model(void) {
  bm_model_t b;
  bm_init(&b, 17);
  for (int32_t c = 0; c < NLN; ++c) {
    const ln_case_t* lc = &g_ln[c];
    int64_t n;
    ln_rows(lc, &n);
    b.g.input[b.g.n_input++] = bm_value(&b, lc->in, BM_F32, lc->rank, lc->dims, NULL);
    char sname[16], bname[16], ins[48];
    snprintf(sname, sizeof sname, "S%s", lc->in);
    snprintf(bname, sizeof bname, "B%s", lc->in);
    const int32_t ax = (int32_t)(lc->axis < 0 ? lc->axis + lc->rank : lc->axis);
    const int64_t one = 1;
    float* sv = malloc(sizeof(float) * (size_t)n);
    float* bv = malloc(sizeof(float) * (size_t)n);
    CHECK(sv && bv);
    if (!sv || !bv) {
      free(sv);
      free(bv);
      continue;
    }
    for (int64_t i = 0; i < n; ++i) sv[i] = ln_scale(i), bv[i] = ln_bias(i);
    if (lc->sc == SC_INPUT) b.g.input[b.g.n_input++] = bm_value(&b, sname, BM_F32, lc->rank - ax, lc->dims + ax, NULL);
    else if (lc->sc == SC_ONE) bm_initializer(&b, sname, BM_F32, 1, &one, sv + 1, sizeof(float));
    else bm_initializer(&b, sname, BM_F32, lc->rank - ax, lc->dims + ax, sv, sizeof(float) * (size_t)n);
    if (lc->bias) bm_initializer(&b, bname, BM_F32, lc->rank - ax, lc->dims + ax, bv, sizeof(float) * (size_t)n);
    free(sv);
    free(bv);
    snprintf(ins, sizeof ins, lc->bias ? "%s,%s,%s" : "%s,%s", lc->in, sname, bname);
    Onnx__NodeProto* nd = bm_node(&b, "LayerNormalization", lc->out, ins, lc->out);
    bm_attr_int(&b, nd, "axis", lc->axis);
    Onnx__AttributeProto* a = bm_attr(&b, nd, "epsilon", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    a->has_f = 1;
    a->f = lc->eps;
    bm_output(&b, lc->out);
  }
  snprintf(g_ln_model, sizeof g_ln_model, "%s/ln.onnx", g_dir);
  CHECK(bm_write(&b, g_ln_model));
  bm_free(&b);
}

/* outputs of LayerNorm case |c| off its rows computed here in double: within
 * 1e-5 + 1e-4 |want|, plus the f32 mean's own rounding (|mean| 2^-23 / std,
 * scaled) for rows far from 0 */
static int64_t ln_bad(int32_t c, const float* x, const float* y) {
  const ln_case_t* lc = &g_ln[c];
  int64_t n;
  const int64_t rows = ln_rows(lc, &n);
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    double m = 0, v = 0;
    for (int64_t i = 0; i < n; ++i) m += xr[i];
    m /= (double)n;
    for (int64_t i = 0; i < n; ++i) v += (xr[i] - m) * (xr[i] - m);
    v /= (double)n;
    const double inv = 1.0 / sqrt(v + (double)lc->eps), slack = 4.0 * fabs(m) * 0x1p-23 * inv;
    for (int64_t i = 0; i < n; ++i) {
      const double sc = lc->sc == SC_ONE ? ln_scale(1) : ln_scale(i);
      const double want = (xr[i] - m) * inv * sc + (lc->bias ? ln_bias(i) : 0.0), got = y[r * n + i];
      bad += !(fabs(got - want) <= 1e-5 + 1e-4 * fabs(want) + slack * fabs(sc));
    }
  }
  return bad;
}

static void ln_run(const void* data, size_t len, const char* mode) {
  kiln_allocator_t al = kiln_allocator_system();
  kiln_array_t in[NLN + 1], out[NLN];
  memset(in, 0, sizeof in);
  memset(out, 0, sizeof out);
  int32_t nin = 0;
  bool ok = true;
  for (int32_t c = 0; c < NLN && ok; ++c) {
    const ln_case_t* lc = &g_ln[c];
    kiln_shape_t sh = kiln_shape_make(lc->rank, lc->dims);
    ok = CHECK_OK(kiln_array_alloc(al, KILN_DTYPE_F32, &sh, &in[nin]));
    for (int64_t i = 0; ok && i < kiln_array_numel(&in[nin]); ++i) ((float*)in[nin].data)[i] = ln_x(c, i);
    ++nin;
    if (ok && lc->sc == SC_INPUT) {
      const int32_t ax = (int32_t)(lc->axis < 0 ? lc->axis + lc->rank : lc->axis);
      sh = kiln_shape_make(lc->rank - ax, lc->dims + ax);
      ok = CHECK_OK(kiln_array_alloc(al, KILN_DTYPE_F32, &sh, &in[nin]));
      for (int64_t i = 0; ok && i < kiln_array_numel(&in[nin]); ++i) ((float*)in[nin].data)[i] = ln_scale(i);
      ++nin;
    }
  }
  if (ok && run_vulkan(data, len, "ln", in, out)) {
    int32_t j = 0;
    for (int32_t c = 0; c < NLN; ++c) {
      const int64_t bad = ln_bad(c, in[j].data, out[c].data);
      CHECK_MSG(bad == 0, "%s: %s: %lld of %lld outputs differ from the reference", mode, g_ln[c].out,
                (long long)bad, (long long)kiln_array_numel(&out[c]));
      j += g_ln[c].sc == SC_INPUT ? 2 : 1;
    }
  }
  for (int32_t i = 0; i < nin; ++i) kiln_array_free(al, &in[i]);
  for (int32_t c = 0; c < NLN; ++c) kiln_array_free(al, &out[c]);
}

/* the LayerNorm model under |hide| / |rows| as check_mode: |want| row
 * instances (all of them LayerNorm) */
static void check_ln(const char* hide, const char* rows, int want) {
  char mode[128];
  bool has = false, ballot = false;
  if (!set_mode("layernorm: ", hide, rows, mode, sizeof mode, &has, &ballot)) return;
  if (!hide && !has) want = 0;
  char* glsl = NULL;
  kiln_compiler_t* c = compile_mode("ln", g_ln_model, hide, rows, &glsl);
  if (c) {
    if (glsl) {
      const int n = kiln_test_count(glsl, "// kiln rows '"), nl = kiln_test_count(glsl, "': LayerNormalization, ");
      CHECK_MSG(n == want && nl == want, "%s: %d row instances (%d LayerNorm), expected %d", mode, n, nl, want);
      if (want == NLN_TMPL) {
        /* 768, 1000, 512, 12, 1024: vec4; 7, 3: scalar; bias on all but LB / LD */
        CHECK_MSG(kiln_test_count(glsl, "#define VEC4 1\n") == 5 && kiln_test_count(glsl, "#define VEC4 0\n") == 2,
                  "%s: vec4 steps for the rows of 768, 1000, 512, 12 and 1024 only", mode);
        CHECK_MSG(kiln_test_count(glsl, "#define BIAS 1\n") == 5 && kiln_test_count(glsl, "#define BIAS 0\n") == 2,
                  "%s: a bias on 5 instances", mode);
      }
      free(glsl);
    }
    const void* data = NULL;
    size_t n = 0;
    if (CHECK_OK(kiln_compiler_module(c, &data, &n))) ln_run(data, n, mode);
  }
  kiln_compiler_destroy(c);
}

static void test_ln(void) {
  write_ln_model();
  check_ln(NULL, NULL, NLN_BIG);
  check_ln(NULL, "subgroup", NLN_TMPL);
  check_ln(NULL, "printed", 0);
  check_ln("no-subgroup-arith", "subgroup", 0);
}

/* ---- reductions and global pools ------------------------------------------ */

/* the reduction cases: op (ReduceSum takes its axes as an input at opset
 * 13, the others as an attribute), X's shape, the axes (na 0: all of
 * them; a global pool: none), keepdims, the values, and the row instances
 * forced rows print for it (LogSumExp: 2, its max and its sum kernel; a
 * middle axis: 0, the printed kernel) */
enum { RV_SIN, RV_POS, RV_BIG, RV_SPEC };
typedef struct {
  const char *op, *in, *out;
  int32_t rank;
  int64_t dims[4];
  int32_t na;
  int64_t axes[2];
  int64_t keep;
  int vals;
  int tmpl;
} red_case_t;

static const red_case_t g_red[] = {
    {"ReduceSum", "RA", "QA", 2, {6, 1000}, 1, {-1}, 1, RV_SIN, 1},
    {"ReduceSum", "RB", "QB", 3, {2, 3, 7}, 1, {2}, 0, RV_SIN, 1},
    {"ReduceSum", "RC", "QC", 2, {2, 4099}, 1, {1}, 1, RV_SIN, 1},
    {"ReduceSum", "RD", "QD", 2, {4, 7}, 0, {0}, 0, RV_SIN, 1},           /* every axis: one row of 28 */
    {"ReduceSum", "RE", "QE", 4, {2, 3, 4, 5}, 2, {2, 3}, 1, RV_SIN, 1}, /* 6 rows of 20 */
    {"ReduceSum", "RF", "QF", 3, {3, 4, 5}, 1, {1}, 1, RV_SIN, 0},       /* a middle axis */
    {"ReduceMean", "RG", "QG", 2, {5, 768}, 1, {1}, 0, RV_SIN, 1},
    {"ReduceMean", "RH", "QH", 2, {4, 1}, 1, {1}, 1, RV_SIN, 1},
    {"ReduceMean", "RI", "QI", 2, {3, 3}, 1, {-1}, 0, RV_SIN, 1},
    {"ReduceMax", "RJ", "QJ", 2, {3, 4099}, 1, {1}, 1, RV_SIN, 1},
    {"ReduceMax", "RK", "QK", 2, {6, 7}, 1, {1}, 0, RV_SPEC, 1},
    {"ReduceMax", "RL", "QL", 2, {6, 1000}, 1, {1}, 1, RV_SPEC, 1},
    {"ReduceMin", "RM", "QM", 2, {6, 3}, 1, {1}, 1, RV_SPEC, 1},
    {"ReduceMin", "RN", "QN", 2, {6, 768}, 1, {1}, 0, RV_SPEC, 1},
    {"ReduceMin", "RO", "QO", 2, {2, 1}, 1, {1}, 0, RV_SIN, 1},
    {"ReduceSumSquare", "RP", "QP", 2, {3, 7}, 1, {1}, 1, RV_SIN, 1},
    {"ReduceSumSquare", "RQ", "QQ", 2, {2, 1000}, 1, {1}, 0, RV_SIN, 1},
    {"ReduceL2", "RR", "QR", 2, {4, 1000}, 1, {1}, 1, RV_SIN, 1},
    {"ReduceL2", "RS", "QS", 2, {3, 4099}, 1, {1}, 0, RV_SIN, 1},
    {"ReduceL1", "RT", "QT", 2, {3, 3}, 1, {1}, 1, RV_SIN, 1},
    {"ReduceL1", "RU", "QU", 2, {2, 768}, 1, {1}, 0, RV_SIN, 1},
    {"ReduceLogSum", "RV", "QV", 2, {2, 768}, 1, {1}, 1, RV_POS, 1},
    {"ReduceLogSum", "RW", "QW", 2, {3, 7}, 1, {1}, 0, RV_POS, 1},
    {"ReduceLogSumExp", "RX", "QX", 2, {3, 1000}, 1, {1}, 1, RV_BIG, 2},
    {"ReduceLogSumExp", "RY", "QY", 2, {6, 7}, 1, {1}, 0, RV_SPEC, 2},
    {"ReduceLogSumExp", "RZ", "QZ", 2, {2, 1}, 1, {1}, 1, RV_SIN, 2},
    {"GlobalAveragePool", "PA", "GA", 4, {1, 32, 7, 7}, 0, {0}, 1, RV_SIN, 1},
    {"GlobalAveragePool", "PB", "GB", 4, {2, 3, 56, 56}, 0, {0}, 1, RV_SIN, 1},
    {"GlobalMaxPool", "PC", "GC", 4, {2, 3, 5, 5}, 0, {0}, 1, RV_SPEC, 1},
};
enum { NRED = sizeof g_red / sizeof g_red[0], NRED_BIG = 0 };

static char g_red_model[600];

static int64_t red_numel(const red_case_t* c) {
  int64_t n = 1;
  for (int32_t i = 0; i < c->rank; ++i) n *= c->dims[i];
  return n;
}
/* rows and their length; *inner: the stride of a row's values (1 but for
 * the middle-axis case: its kept dims after the reduced one) */
static int64_t red_rows_strided(const red_case_t* c, int64_t* n, int64_t* inner) {
  bool red[4] = {false};
  for (int32_t d = 0; d < c->rank; ++d) red[d] = c->na == 0 && strncmp(c->op, "Global", 6) ? true : false;
  if (!strncmp(c->op, "Global", 6))
    for (int32_t d = 2; d < c->rank; ++d) red[d] = true;
  for (int32_t i = 0; i < c->na; ++i) red[c->axes[i] < 0 ? c->axes[i] + c->rank : c->axes[i]] = true;
  int64_t rows = 1;
  *n = 1, *inner = 1;
  for (int32_t d = 0; d < c->rank; ++d) {
    if (red[d]) *n *= c->dims[d];
    else rows *= c->dims[d];
    if (!red[d] && *n > 1) *inner *= c->dims[d];
  }
  return rows;
}
static int64_t red_rows(const red_case_t* c, int64_t* n) {
  int64_t inner;
  return red_rows_strided(c, n, &inner);
}
/* value |i| of case |c| (row |r| of |n|): RV_SPEC rows hold a NaN (row
 * 0), only -inf (1), -inf among finite values (2), +inf (3), NaN and
 * +inf (4), -inf and +inf (5), then plain ones */
static float red_x(int32_t c, int64_t i, int64_t n) {
  const float v = x_at(c, i);
  const int64_t r = i / n, j = i % n;
  switch (g_red[c].vals) {
    case RV_POS: return fabsf(v) + 0.125f;
    case RV_BIG: return v + 200.0f; /* exp overflows f32 without the max */
    case RV_SPEC:
      if (r == 0 && j == n / 2) return NAN;
      if (r == 1) return -INFINITY;
      if (r == 2 && j % 2 == 0) return -INFINITY;
      if (r == 3 && j == n - 1) return INFINITY;
      if (r == 4 && j == 0) return NAN;
      if (r == 4 && j == n - 1) return INFINITY;
      if (r == 5 && j == 0) return -INFINITY;
      if (r == 5 && j == n / 2) return INFINITY;
      return v;
    default: return v;
  }
}

static void write_red_model(void) {
  bm_model_t b;
  bm_init(&b, 13);
  for (int32_t c = 0; c < NRED; ++c) {
    const red_case_t* rc = &g_red[c];
    b.g.input[b.g.n_input++] = bm_value(&b, rc->in, BM_F32, rc->rank, rc->dims, NULL);
    char ins[32], an[16];
    snprintf(an, sizeof an, "A%s", rc->in);
    const bool sum = !strcmp(rc->op, "ReduceSum");
    if (sum && rc->na > 0) {
      const int64_t na = rc->na;
      bm_init_i64(&b, an, 1, &na, rc->axes);
    }
    snprintf(ins, sizeof ins, sum && rc->na > 0 ? "%s,%s" : "%s", rc->in, an);
    Onnx__NodeProto* n = bm_node(&b, rc->op, rc->out, ins, rc->out);
    if (strncmp(rc->op, "Global", 6)) bm_attr_int(&b, n, "keepdims", rc->keep);
    if (!sum && rc->na > 0) bm_attr_ints(&b, n, "axes", (size_t)rc->na, rc->axes);
    bm_output(&b, rc->out);
  }
  snprintf(g_red_model, sizeof g_red_model, "%s/red.onnx", g_dir);
  CHECK(bm_write(&b, g_red_model));
  bm_free(&b);
}

/* outputs of case |c| off its rows reduced here in double: Max / Min
 * exactly (NaN where the row holds one, as the reference), the sums
 * within 1e-5 of the sum of the terms' magnitudes (f32 partial sums), the
 * logs and roots within 1e-5 relative */
static int64_t red_bad(int32_t c, const float* x, const float* y) {
  const red_case_t* rc = &g_red[c];
  int64_t n, inner;
  const int64_t rows = red_rows_strided(rc, &n, &inner);
  const char* op = rc->op;
  float* xr = malloc(sizeof(float) * (size_t)n);
  CHECK(xr != NULL);
  if (!xr) return rows;
  const bool mx = !strcmp(op, "ReduceMax") || !strcmp(op, "GlobalMaxPool"), mn = !strcmp(op, "ReduceMin");
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    /* row r: output r, its values inner apart */
    const int64_t o = r / inner, in = r % inner;
    for (int64_t i = 0; i < n; ++i) xr[i] = x[(o * n + i) * inner + in];
    double want, tol;
    if (mx || mn) {
      double a = mx ? -INFINITY : INFINITY;
      for (int64_t i = 0; i < n; ++i) {
        const double v = xr[i];
        a = (mx ? v > a : v < a) || isnan(v) ? v : a;
      }
      want = a, tol = 0;
    } else {
      double m = -INFINITY;
      for (int64_t i = 0; i < n; ++i) m = xr[i] > m || isnan(xr[i]) ? xr[i] : m;
      const double sh = isinf(m) ? 0.0 : m;
      double sum = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double v = xr[i];
        const double t = !strcmp(op, "ReduceSumSquare") || !strcmp(op, "ReduceL2") ? v * v
                         : !strcmp(op, "ReduceL1")                                 ? fabs(v)
                         : !strcmp(op, "ReduceLogSumExp")                          ? exp(v - sh)
                                                                                   : v;
        sum += t, mag += fabs(t);
      }
      tol = 1e-5 * (1.0 + mag);
      if (!strcmp(op, "ReduceMean") || !strcmp(op, "GlobalAveragePool")) want = sum / (double)n, tol /= (double)n;
      else if (!strcmp(op, "ReduceL2")) want = sqrt(sum), tol = 1e-5 * (1.0 + want);
      else if (!strcmp(op, "ReduceLogSum")) want = log(sum), tol = 1e-5 * (1.0 + fabs(want));
      else if (!strcmp(op, "ReduceLogSumExp")) want = log(sum) + sh, tol = 1e-5 * (1.0 + fabs(want));
      else want = sum;
    }
    const double got = y[r];
    const bool ok = isnan(want) ? isnan(got) : isinf(want) ? got == want : fabs(got - want) <= tol;
    if (!ok && bad < 3) printf("  %s row %lld: %.9g, expected %.9g\n", rc->out, (long long)r, got, want);
    bad += !ok;
  }
  free(xr);
  return bad;
}

static void red_run(const void* data, size_t len, const char* mode) {
  kiln_allocator_t al = kiln_allocator_system();
  kiln_array_t in[NRED], out[NRED];
  memset(in, 0, sizeof in);
  memset(out, 0, sizeof out);
  bool ok = true;
  for (int32_t c = 0; c < NRED && ok; ++c) {
    const kiln_shape_t sh = kiln_shape_make(g_red[c].rank, g_red[c].dims);
    int64_t n;
    red_rows(&g_red[c], &n);
    ok = CHECK_OK(kiln_array_alloc(al, KILN_DTYPE_F32, &sh, &in[c]));
    for (int64_t i = 0; ok && i < red_numel(&g_red[c]); ++i) ((float*)in[c].data)[i] = red_x(c, i, n);
  }
  if (ok && run_vulkan(data, len, "red", in, out))
    for (int32_t c = 0; c < NRED; ++c) {
      int64_t n;
      const int64_t rows = red_rows(&g_red[c], &n);
      CHECK_MSG(kiln_array_numel(&out[c]) == rows, "%s: %s: %lld outputs", mode, g_red[c].out,
                (long long)kiln_array_numel(&out[c]));
      if (kiln_array_numel(&out[c]) != rows) continue;
      const int64_t bad = red_bad(c, in[c].data, out[c].data);
      CHECK_MSG(bad == 0, "%s: %s (%s): %lld of %lld rows differ from the reference", mode, g_red[c].out,
                g_red[c].op, (long long)bad, (long long)rows);
    }
  for (int32_t c = 0; c < NRED; ++c) {
    kiln_array_free(al, &in[c]);
    kiln_array_free(al, &out[c]);
  }
}

/* the reduction model under |hide| / |rows| as check_mode; |forced|: every
 * case's instances expected, else |want| */
static void check_red(const char* hide, const char* rows, bool forced, int want) {
  char mode[128];
  bool has = false, ballot = false;
  if (!set_mode("reduce: ", hide, rows, mode, sizeof mode, &has, &ballot)) return;
  if (forced) {
    want = 0;
    for (int32_t c = 0; c < NRED; ++c) want += g_red[c].tmpl;
  }
  if (!hide && !has) want = 0;
  char* glsl = NULL;
  kiln_compiler_t* c = compile_mode("red", g_red_model, hide, rows, &glsl);
  if (c) {
    if (glsl) {
      const int n = kiln_test_count(glsl, "// kiln rows '"), nr = kiln_test_count(glsl, "': reduce-");
      CHECK_MSG(n == want && nr == want, "%s: %d row instances (%d reductions), expected %d", mode, n, nr, want);
      if (forced && has) {
        /* rows of 1000 (5, RX's two), 28, 20, 768 (4), 3136: vec4 steps */
        CHECK_MSG(kiln_test_count(glsl, "': reduce-max, ") == 7 && kiln_test_count(glsl, "': reduce-logsumexp, ") == 3 &&
                      kiln_test_count(glsl, "': reduce-mean, ") == 5 && kiln_test_count(glsl, "#define RED 9\n") == 3,
                  "%s: 7 max (3 of them LogSumExp's), 3 LogSumExp, 5 mean instances", mode);
        CHECK_MSG(kiln_test_count(glsl, "#define VEC4 1\n") == 13, "%s: %d vec4 instances, expected 13", mode,
                  kiln_test_count(glsl, "#define VEC4 1\n"));
      }
      free(glsl);
    }
    const void* data = NULL;
    size_t n = 0;
    if (CHECK_OK(kiln_compiler_module(c, &data, &n))) red_run(data, n, mode);
  }
  kiln_compiler_destroy(c);
}

static void test_red(void) {
  write_red_model();
  check_red(NULL, "subgroup", true, 0);
  check_red(NULL, NULL, false, NRED_BIG);
  check_red(NULL, "printed", false, 0);
  check_red("no-subgroup-arith", "subgroup", false, 0);
}

static void test_default(void) { check_mode(NULL, NULL, true, NBIG); }
static void test_subgroup(void) { check_mode(NULL, "subgroup", true, NTMPL); }
static void test_printed(void) { check_mode(NULL, "printed", true, 0); }
static void test_hidden(void) { check_mode("no-subgroup-arith", "subgroup", false, 0); }

int main(void) {
  if (!bm_tmpdir("vulkan_rows", g_dir, sizeof g_dir)) {
    fprintf(stderr, "cannot create a temp folder\n");
    return 1;
  }
  write_model();
  RUN(test_default);
  RUN(test_subgroup);
  RUN(test_printed);
  RUN(test_hidden);
  RUN(test_fp16);
  RUN(test_ln);
  RUN(test_red);
  unsetenv("KILN_VULKAN_FEATURES");
  unsetenv("KILN_SPIRV_ROWS");
  bm_rmtree(g_dir);
  return kiln_test_finish();
}
