/* The public compiler API (include/kiln/compiler.h) through libkiln.so:
 * versions and the ABI check, options and their errors, a model written
 * here compiled to module bytes and a file, run with the runtime, and the
 * report's figures. */
#include "bad_model_util.h" /* first: it defines _GNU_SOURCE */

#include <math.h>
#include <string.h>

#include "kiln/compiler.h"
#include "kiln/npy.h"
#include "kiln/runtime.h"
#include "testing.h"

static char g_dir[512];
static char g_model[600]; /* Y = Relu(X) + C, X [N,4] with N symbolic */

static void write_model(void) {
  bm_model_t b;
  bm_init(&b, 13);
  const char* params[2] = {"N", NULL};
  int64_t dims[2] = {0, 4};
  b.g.input[b.g.n_input++] = bm_value(&b, "X", BM_F32, 2, dims, params);
  int64_t cd[1] = {4};
  bm_init_f32(&b, "C", 1, cd); /* 0.5, 1, 1.5, 2 */
  bm_node(&b, "Relu", "relu", "X", "R");
  bm_node(&b, "Add", "add", "R,C", "Y");
  bm_output(&b, "Y");
  snprintf(g_model, sizeof g_model, "%s/relu_add.onnx", g_dir);
  CHECK(bm_write(&b, g_model));
  bm_free(&b);
}

static void test_versions(void) {
  CHECK(kiln_compiler_abi_version() == KILN_COMPILER_ABI_VERSION);
  const char* v = kiln_version();
  int a, b, c;
  CHECK(v && sscanf(v, "%d.%d.%d", &a, &b, &c) == 3);
  kiln_compiler_t* cc = NULL;
  CHECK_ERR_ALL(kiln_compiler_create(KILN_COMPILER_ABI_VERSION + 1, &cc), KILN_UNSUPPORTED, "ABI 2", "ABI 1", v);
  CHECK(cc == NULL);
  kiln_compiler_destroy(NULL);
}

static void test_option_errors(void) {
  kiln_compiler_t* c = NULL;
  CHECK_OK(kiln_compiler_create(KILN_COMPILER_ABI_VERSION, &c));
  CHECK_ERR_ALL(kiln_compiler_set_option(c, "colour", "red"), KILN_INVALID_ARGUMENT, "unknown option 'colour'");
  CHECK_ERR_ALL(kiln_compiler_set_option(c, "target", "tpu"), KILN_INVALID_ARGUMENT, "target='tpu'", "cpu");
  CHECK_ERR_ALL(kiln_compiler_set_option(c, "precision", "fp8"), KILN_INVALID_ARGUMENT, "precision='fp8'");
  CHECK_ERR_ALL(kiln_compiler_set_option(c, "opt-level", "7"), KILN_INVALID_ARGUMENT, "opt-level='7'", "0..1");
  CHECK_ERR_ALL(kiln_compiler_set_option(c, "threads", "-1"), KILN_INVALID_ARGUMENT, "threads='-1'");
  CHECK_ERR_ALL(kiln_compiler_set_option(c, "threads", "4x"), KILN_INVALID_ARGUMENT, "threads='4x'");
  CHECK_ERR_ALL(kiln_compiler_set_option(c, "dim", "N"), KILN_INVALID_ARGUMENT, "dim='N'", "SYMBOL=SIZE");
  CHECK_ERR_ALL(kiln_compiler_set_option(c, "fp16-arith", "maybe"), KILN_INVALID_ARGUMENT, "fp16-arith='maybe'");
  CHECK_ERR_ALL(kiln_compiler_set_option(c, "tolerance", "-1"), KILN_INVALID_ARGUMENT, "tolerance='-1'");
  CHECK_ERR_ALL(kiln_compiler_set_option(c, "loop-limit", "-5"), KILN_INVALID_ARGUMENT, "loop-limit='-5'");
  CHECK_ERR_ALL(kiln_compiler_set_option(c, "layout", "nhwc"), KILN_INVALID_ARGUMENT, "layout='nhwc'", "nchw or auto");
  CHECK_OK(kiln_compiler_set_option(c, "layout", "nchw"));
  CHECK_ERR_ALL(kiln_compiler_set_option(c, NULL, "x"), KILN_INVALID_ARGUMENT, "NULL");
  /* nothing loaded or compiled yet */
  CHECK_ERR_ALL(kiln_compiler_compile(c), KILN_INVALID_ARGUMENT, "no model loaded");
  const void* data = NULL;
  size_t n = 0;
  CHECK_ERR_ALL(kiln_compiler_module(c, &data, &n), KILN_INVALID_ARGUMENT, "nothing compiled");
  CHECK(kiln_compiler_report_count(c) == 0 && kiln_compiler_report_at(c, 0) == NULL);
  char missing[700];
  snprintf(missing, sizeof missing, "%s/missing.onnx", g_dir);
  CHECK_ERR_ALL(kiln_compiler_load_model(c, missing), KILN_NOT_FOUND, "missing.onnx");
  kiln_compiler_destroy(c);
}

static double figure(const kiln_compiler_t* c, const char* section, const char* key) {
  for (int32_t i = 0; i < kiln_compiler_report_count(c); ++i) {
    const kiln_compile_report_entry_t* e = kiln_compiler_report_at(c, i);
    if (!strcmp(e->section, section) && !strcmp(e->key, key)) return e->value;
  }
  return NAN;
}

/* Runs module bytes on the CPU with X[i] = i - 5 and checks Y = relu(X) + C. */
static void run_and_check(const void* data, size_t n, int64_t rows) {
  kiln_allocator_t al = kiln_allocator_system();
  kiln_module_t* m = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_array_t in = {0}, out = {0};
  CHECK_OK(kiln_module_load_memory(data, n, "relu_add", al, &m));
  if (!m) return;
  kiln_dtype_t dt;
  kiln_shape_t sh = kiln_module_input_shape(m, 0, &dt);
  CHECK(sh.rank == 2 && sh.dims[0] == rows && sh.dims[1] == 4 && dt == KILN_DTYPE_F32);
  if (!(sh.rank == 2 && sh.dims[0] == rows && sh.dims[1] == 4 && dt == KILN_DTYPE_F32)) {
    kiln_module_release(m);
    return;
  }
  CHECK_OK(kiln_array_alloc(al, dt, &sh, &in));
  for (int64_t i = 0; i < rows * 4; ++i) ((float*)in.data)[i] = (float)i - 5.0f;
  CHECK_OK(kiln_device_open("cpu", NULL, al, &d));
  if (d) CHECK_OK(kiln_session_create(m, d, NULL, &s));
  if (s && CHECK_OK(kiln_session_run(s, &in, &out))) {
    CHECK(out.shape.rank == 2 && out.shape.dims[0] == rows);
    for (int64_t i = 0; i < rows * 4; ++i) {
      float x = (float)i - 5.0f;
      CHECK_NEAR(((float*)out.data)[i], (x > 0 ? x : 0) + 0.5f * (float)(i % 4 + 1), 1e-6);
    }
  }
  kiln_array_free(al, &in);
  kiln_array_free(al, &out);
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
}

static void test_compile_and_run(void) {
  kiln_compiler_t* c = NULL;
  CHECK_OK(kiln_compiler_create(KILN_COMPILER_ABI_VERSION, &c));
  CHECK_OK(kiln_compiler_load_model(c, g_model));
  CHECK_OK(kiln_compiler_set_option(c, "target", "cpu"));
  CHECK_OK(kiln_compiler_set_option(c, "dim", "N=3"));
  CHECK_OK(kiln_compiler_set_option(c, "model-name", "relu+add"));
  CHECK_OK(kiln_compiler_compile(c));
  const void* data = NULL;
  size_t n = 0;
  CHECK_OK(kiln_compiler_module(c, &data, &n));
  CHECK(data && n > 64);
  run_and_check(data, n, 3);
  /* the report: figures in their sections, lines for people */
  CHECK(figure(c, "passes", "nodes_before") == 2);
  CHECK(figure(c, "fusion", "kernels_after") >= 1);
  CHECK(figure(c, "fusion", "kernels_after") <= figure(c, "fusion", "kernels_before"));
  CHECK(figure(c, "plan", "kernels") == figure(c, "fusion", "kernels_after"));
  CHECK(figure(c, "plan", "code_bytes") > 0 && figure(c, "timing", "codegen_ms") >= 0);
  bool compiled_line = false;
  for (int32_t i = 0; i < kiln_compiler_report_count(c); ++i) {
    const kiln_compile_report_entry_t* e = kiln_compiler_report_at(c, i);
    CHECK(e->section && e->key && e->text);
    compiled_line |= !strcmp(e->key, "line") && !strncmp(e->text, "compiled ", 9) && strstr(e->text, "for cpu");
  }
  CHECK(compiled_line);
  /* to a file, read back by the runtime */
  char path[700];
  snprintf(path, sizeof path, "%s/relu_add.kiln", g_dir);
  CHECK_OK(kiln_compiler_write_module(c, path));
  kiln_module_t* m = NULL;
  if (CHECK_OK(kiln_module_load_file(path, kiln_allocator_system(), &m))) {
    kiln_module_info_t info;
    kiln_module_info(m, &info);
    CHECK(!strcmp(info.model_name, "relu+add") && !strcmp(info.target, "cpu") && !strcmp(info.precision, "fp32"));
  }
  kiln_module_release(m);
  snprintf(path, sizeof path, "%s/no/such/dir/m.kiln", g_dir);
  CHECK_ERR_ALL(kiln_compiler_write_module(c, path), KILN_IO_ERROR, "no/such/dir");
  /* again, with another batch and -O0: starts from the parsed model */
  CHECK_OK(kiln_compiler_set_option(c, "dim", "N=5"));
  CHECK_OK(kiln_compiler_set_option(c, "opt-level", "0"));
  CHECK_OK(kiln_compiler_compile(c));
  CHECK(isnan(figure(c, "fusion", "kernels_after"))); /* no fusion at -O0 */
  if (CHECK_OK(kiln_compiler_module(c, &data, &n))) run_and_check(data, n, 5);
  kiln_compiler_destroy(c);
}

/* precision=int8 with calibrate: kiln quantize's calibration in memory
 * (api/quantize_graph.h), its report in section "quantize". */
static void test_int8(void) {
  bm_model_t b;
  bm_init(&b, 13);
  const char* params[2] = {"N", NULL};
  int64_t dims[2] = {0, 4};
  b.g.input[b.g.n_input++] = bm_value(&b, "X", BM_F32, 2, dims, params);
  int64_t wd[2] = {4, 3};
  bm_init_f32(&b, "W", 2, wd);
  bm_node(&b, "MatMul", "mm", "X,W", "Y");
  bm_output(&b, "Y");
  char model[700], cal[700], path[800];
  snprintf(model, sizeof model, "%s/mm.onnx", g_dir);
  CHECK(bm_write(&b, model));
  bm_free(&b);
  snprintf(cal, sizeof cal, "%s/cal8", g_dir);
  CHECK(mkdir(cal, 0755) == 0);
  kiln_array_t x;
  int64_t xd[2] = {2, 4};
  kiln_shape_t xs = kiln_shape_make(2, xd);
  if (!CHECK_OK(kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_F32, &xs, &x))) return;
  for (int i = 0; i < 8; ++i) ((float*)x.data)[i] = (float)(i % 5) * 0.25f - 0.5f;
  snprintf(path, sizeof path, "%s/X.npy", cal);
  CHECK_OK(kiln_npy_write(path, &x));
  kiln_array_free(kiln_allocator_system(), &x);

  kiln_compiler_t* c = NULL;
  CHECK_OK(kiln_compiler_create(KILN_COMPILER_ABI_VERSION, &c));
  CHECK_OK(kiln_compiler_load_model(c, model));
  CHECK_OK(kiln_compiler_set_option(c, "precision", "int8"));
  CHECK_ERR_ALL(kiln_compiler_compile(c), KILN_INVALID_ARGUMENT, "int8", "calibrate");
  snprintf(path, sizeof path, "%s/no-such-cal", g_dir);
  CHECK_OK(kiln_compiler_set_option(c, "calibrate", path));
  CHECK_ERR_ALL(kiln_compiler_compile(c), KILN_NOT_FOUND, "no-such-cal");
  CHECK_OK(kiln_compiler_set_option(c, "calibrate", cal));
  CHECK_OK(kiln_compiler_set_option(c, "dim", "N=2"));
  CHECK_OK(kiln_compiler_compile(c));
  CHECK(figure(c, "quantize", "layers") == 1 && figure(c, "quantize", "layers_float") == 0);
  bool report = false;
  for (int32_t i = 0; i < kiln_compiler_report_count(c); ++i) {
    const kiln_compile_report_entry_t* e = kiln_compiler_report_at(c, i);
    report |= !strcmp(e->section, "quantize") && !strncmp(e->text, "mm ", 3) && strstr(e->text, "MatMul");
  }
  CHECK(report);
  snprintf(path, sizeof path, "%s/mm8.kiln", g_dir);
  CHECK_OK(kiln_compiler_write_module(c, path));
  kiln_module_t* m = NULL;
  if (CHECK_OK(kiln_module_load_file(path, kiln_allocator_system(), &m))) {
    kiln_module_info_t info;
    kiln_module_info(m, &info);
    CHECK(!strcmp(info.precision, "int8"));
  }
  kiln_module_release(m);
  kiln_compiler_destroy(c);
}

static void test_compile_errors(void) {
  kiln_compiler_t* c = NULL;
  CHECK_OK(kiln_compiler_create(KILN_COMPILER_ABI_VERSION, &c));
  CHECK_OK(kiln_compiler_load_model(c, g_model));
  CHECK_OK(kiln_compiler_set_option(c, "dim", "M=2"));
  CHECK_ERR_ALL(kiln_compiler_compile(c), KILN_NOT_FOUND, "'M=2'", "no dimension named 'M'");
  const void* data = NULL;
  size_t n = 0;
  CHECK_ERR_ALL(kiln_compiler_module(c, &data, &n), KILN_INVALID_ARGUMENT, "nothing compiled");
  kiln_compiler_destroy(c);
  /* a file that is not ONNX: the parser's error names it */
  char bad[700];
  snprintf(bad, sizeof bad, "%s/bad.onnx", g_dir);
  CHECK(bm_write_bytes(bad, "\xff\xff\xff garbage", 12));
  CHECK_OK(kiln_compiler_create(KILN_COMPILER_ABI_VERSION, &c));
  kiln_status_t s = kiln_compiler_load_model(c, bad);
  CHECK(s != NULL && strstr(kiln_status_message(s), "bad.onnx"));
  kiln_status_free(s);
  CHECK_ERR_ALL(kiln_compiler_compile(c), KILN_INVALID_ARGUMENT, "no model loaded");
  kiln_compiler_destroy(c);
}

/* "cpu-target": the module carries CPU machine code (its 'NATV' section)
 * for the levels named, none without the option; an unknown level is an
 * error naming the ones there are. */
static void test_cpu_target(void) {
  for (int with = 0; with < 2; ++with) {
    kiln_compiler_t* c = NULL;
    CHECK_OK(kiln_compiler_create(KILN_COMPILER_ABI_VERSION, &c));
    CHECK_OK(kiln_compiler_load_model(c, g_model));
    if (with) CHECK_OK(kiln_compiler_set_option(c, "cpu-target", "host"));
    CHECK_OK(kiln_compiler_compile(c));
    const void* data = NULL;
    size_t n = 0;
    CHECK_OK(kiln_compiler_module(c, &data, &n));
    bool natv = data && memmem(data, n, "NATV", 4) != NULL;
    /* "host" is nothing on a CPU below every level kiln knows (x86-64
     * without AVX2 and FMA) */
    bool host_level = true;
#if defined(__x86_64__)
    __builtin_cpu_init();
    host_level = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    CHECK_MSG(natv == (with && host_level), "cpu-target %s: machine code %s", with ? "host" : "unset",
              natv ? "present" : "absent");
    kiln_compiler_destroy(c);
  }
  kiln_compiler_t* c = NULL;
  CHECK_OK(kiln_compiler_create(KILN_COMPILER_ABI_VERSION, &c));
  CHECK_OK(kiln_compiler_load_model(c, g_model));
  CHECK_OK(kiln_compiler_set_option(c, "cpu-target", "sparc"));
  CHECK_ERR_ALL(kiln_compiler_compile(c), KILN_INVALID_ARGUMENT, "'sparc'", "x86-64-v3, x86-64-v4, aarch64");
  kiln_compiler_destroy(c);
}

/* tuning-cache: a cache of another machine or with a corrupt line is never
 * fatal; the report says how many kernels ran tuned and untuned. */
static void test_tuning_cache(void) {
  char path[700];
  snprintf(path, sizeof path, "%s/tune.tsv", g_dir);
  FILE* f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs("this is not a tuning record\n", f);
  fclose(f);
  kiln_compiler_t* c = NULL;
  CHECK_OK(kiln_compiler_create(KILN_COMPILER_ABI_VERSION, &c));
  CHECK_OK(kiln_compiler_load_model(c, g_model));
  CHECK_OK(kiln_compiler_set_option(c, "tuning-cache", path));
  CHECK_OK(kiln_compiler_compile(c));
  CHECK(figure(c, "tuning", "tuned") == 0);
  CHECK(figure(c, "tuning", "untuned") >= 0);
  bool named = false;
  for (int32_t i = 0; i < kiln_compiler_report_count(c); ++i) {
    const kiln_compile_report_entry_t* e = kiln_compiler_report_at(c, i);
    named |= !strcmp(e->key, "line") && strstr(e->text, "tune.tsv") != NULL;
  }
  CHECK_MSG(named, "no report line names the tuning cache");
  const void* data = NULL;
  size_t n = 0;
  if (CHECK_OK(kiln_compiler_module(c, &data, &n))) run_and_check(data, n, 1);
  kiln_compiler_destroy(c);
}

int main(void) {
  if (!bm_tmpdir("compiler_api", g_dir, sizeof g_dir)) {
    fprintf(stderr, "cannot create a temp folder\n");
    return 1;
  }
  write_model();
  RUN(test_versions);
  RUN(test_option_errors);
  RUN(test_compile_and_run);
  RUN(test_int8);
  RUN(test_compile_errors);
  RUN(test_cpu_target);
  RUN(test_tuning_cache);
  bm_rmtree(g_dir);
  return kiln_test_finish();
}
