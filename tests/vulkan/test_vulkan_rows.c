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
 * even on 1040 rows of 1024 (the f16 rule: the printed kernel). */
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

static void run_and_compare(const void* data, size_t n, const char* mode) {
  kiln_allocator_t al = kiln_allocator_system();
  kiln_module_t* m = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_array_t in[NCASE], out[NCASE];
  memset(in, 0, sizeof in);
  memset(out, 0, sizeof out);
  bool ok = CHECK_OK(kiln_module_load_memory(data, n, "rows", al, &m));
  for (int32_t c = 0; c < NCASE && ok; ++c) {
    const kiln_shape_t sh = kiln_shape_make(g_cases[c].rank, g_cases[c].dims);
    ok = CHECK_OK(kiln_array_alloc(al, KILN_DTYPE_F32, &sh, &in[c]));
    for (int64_t i = 0; ok && i < numel(&g_cases[c]); ++i) ((float*)in[c].data)[i] = x_at(c, i);
  }
  if (ok && CHECK_OK(kiln_device_open("vulkan", NULL, al, &d))) CHECK_OK(kiln_session_create(m, d, NULL, &s));
  if (s && CHECK_OK(kiln_session_run(s, in, out)))
    for (int32_t c = 0; c < NCASE; ++c) {
      const int64_t bad = case_bad(&g_cases[c], in[c].data, out[c].data);
      CHECK_MSG(bad == 0, "%s: %s: %lld of %lld outputs differ from the reference", mode, g_cases[c].out,
                (long long)bad, (long long)numel(&g_cases[c]));
    }
  for (int32_t c = 0; c < NCASE; ++c) {
    kiln_array_free(al, &in[c]);
    kiln_array_free(al, &out[c]);
  }
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
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

/* |hide|: KILN_VULKAN_FEATURES (NULL: unset); |rows|: KILN_SPIRV_ROWS (NULL: unset);
 * whether the device must then report subgroup arithmetic and the row
 * instances the compile must print. */
static void check_mode(const char* hide, const char* rows, bool arith, int want) {
  char mode[128];
  snprintf(mode, sizeof mode, "features %s, rows %s", hide ? hide : "all", rows ? rows : "default");
  kiln_test_setenv("KILN_VULKAN_FEATURES", hide);
  kiln_test_setenv("KILN_SPIRV_ROWS", rows);
  kiln_device_t* d = NULL;
  if (!CHECK_OK(kiln_device_open("vulkan", NULL, kiln_allocator_system(), &d))) return;
  const bool has = d->info.subgroup_arith, ballot = d->info.subgroup_ballot;
  kiln_device_release(d);
  if (hide) {
    CHECK_MSG(has == arith && ballot, "%s: device reports subgroup arithmetic %d, ballot %d", mode, has, ballot);
  } else if (!has) {
    printf("  (this device has no subgroup arithmetic in compute: no row instances expected)\n");
    want = 0;
  }
  char dump[600];
  snprintf(dump, sizeof dump, "%s/dump-%s-%s", g_dir, hide ? hide : "all", rows ? rows : "default");
  CHECK(mkdir(dump, 0755) == 0);
  char* glsl = NULL;
  kiln_compiler_t* c = compile_dumped(g_model, NULL, dump, &glsl);
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
    kiln_module_t* m = NULL;
    kiln_session_t* s = NULL;
    kiln_array_t x, y;
    memset(&x, 0, sizeof x);
    memset(&y, 0, sizeof y);
    const kiln_shape_t sh = kiln_shape_make(2, dims);
    d = NULL;
    if (CHECK_OK(kiln_compiler_module(c, &data, &len)) && CHECK_OK(kiln_module_load_memory(data, len, "rows16", al, &m)) &&
        CHECK_OK(kiln_array_alloc(al, KILN_DTYPE_F32, &sh, &x)) && CHECK_OK(kiln_device_open("vulkan", NULL, al, &d)) &&
        CHECK_OK(kiln_session_create(m, d, NULL, &s))) {
      float* xv = x.data;
      for (int64_t i = 0; i < rows * n; ++i) xv[i] = x_at(1, i) * 0.25f;
      if (CHECK_OK(kiln_session_run(s, &x, &y))) {
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
    kiln_session_destroy(s);
    kiln_device_release(d);
    kiln_module_release(m);
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
  unsetenv("KILN_VULKAN_FEATURES");
  unsetenv("KILN_SPIRV_ROWS");
  bm_rmtree(g_dir);
  return kiln_test_finish();
}
