/* One custom-op plugin registry per process: libkiln.so carries a private
 * copy of the runtime, and this test links the static library too, yet a
 * plugin loaded once -- through the compiler API (kiln_compiler_load_plugin)
 * or the runtime's (kiln_plugin_load) -- serves both: libkiln compiles a
 * model using its ops and libkiln_rt runs the module, and every copy sees
 * the same registry (libkiln_rt's, asked here by dlsym). The plugin's path
 * comes from the environment (tests/plugin_tests.cmake). */
#include "bad_model_util.h" /* first: it defines _GNU_SOURCE */

#include <dlfcn.h>
#include <math.h>
#include <string.h>

#include "kiln/compiler.h"
#include "kiln/custom_op.h"
#include "kiln/runtime.h"
#include "testing.h"

static char g_dir[512];
static char g_model[600]; /* Y = ScaledSwishFn(X), X [3,4] */

typedef const kiln_custom_op_t* (*find_fn)(const char*, const char*);
typedef int32_t (*count_fn)(void);

/* libkiln_rt's own registry functions, not this binary's copy. */
static find_fn rt_find;
static count_fn rt_count;

static void open_rt(void) {
  void* h = dlopen(KILN_RT_SONAME, RTLD_LAZY | RTLD_NOLOAD);
  CHECK_MSG(h != NULL, "libkiln_rt is not loaded: %s", dlerror());
  if (!h) return;
  void* f = dlsym(h, "kiln_custom_op_find");
  void* c = dlsym(h, "kiln_custom_op_count");
  CHECK(f && c && f != (void*)kiln_custom_op_find); /* a copy of its own in this binary */
  memcpy(&rt_find, &f, sizeof f);
  memcpy(&rt_count, &c, sizeof c);
}

static void write_model(void) {
  bm_model_t b;
  bm_init(&b, 17);
  bm_opset(&b, "com.kiln.example", 1);
  int64_t dims[2] = {3, 4};
  b.g.input[b.g.n_input++] = bm_value(&b, "X", BM_F32, 2, dims, NULL);
  Onnx__NodeProto* n = bm_node(&b, "ScaledSwishFn", "swish", "X", "Y");
  n->domain = bm_str(&b, "com.kiln.example");
  bm_output(&b, "Y");
  snprintf(g_model, sizeof g_model, "%s/swish.onnx", g_dir);
  CHECK(bm_write(&b, g_model));
  bm_free(&b);
}

/* Compiles the model with libkiln and runs it with libkiln_rt. */
static void compile_and_run(void) {
  kiln_compiler_t* c = NULL;
  CHECK_OK(kiln_compiler_create(KILN_COMPILER_ABI_VERSION, &c));
  CHECK_OK(kiln_compiler_load_model(c, g_model));
  CHECK_OK(kiln_compiler_set_option(c, "target", "cpu"));
  const void* data = NULL;
  size_t n = 0;
  kiln_allocator_t al = kiln_allocator_system();
  kiln_module_t* m = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_array_t in = {0}, out = {0};
  if (CHECK_OK(kiln_compiler_compile(c)) && CHECK_OK(kiln_compiler_module(c, &data, &n)))
    CHECK_OK(kiln_module_load_memory(data, n, "swish", al, &m));
  if (m) {
    kiln_shape_t sh = kiln_shape_make(2, (const int64_t[]){3, 4});
    CHECK_OK(kiln_array_alloc(al, KILN_DTYPE_F32, &sh, &in));
    for (int i = 0; i < 12; ++i) ((float*)in.data)[i] = (float)i - 5.5f;
    CHECK_OK(kiln_device_open("cpu", NULL, al, &d));
    if (d) CHECK_OK(kiln_session_create(m, d, NULL, &s));
    if (s && CHECK_OK(kiln_session_run(s, &in, &out)))
      for (int i = 0; i < 12; ++i) {
        const float x = (float)i - 5.5f;
        CHECK_NEAR(((float*)out.data)[i], x / (1.0f + expf(-x)), 1e-6);
      }
  }
  kiln_array_free(al, &in);
  kiln_array_free(al, &out);
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
  kiln_compiler_destroy(c);
}

static void test_through_the_compiler(void) {
  const char* p = getenv("KILN_EXAMPLE_PLUGIN");
  CHECK_MSG(p && p[0], "KILN_EXAMPLE_PLUGIN is not set (run through ctest)");
  if (!p || !rt_find) return;
  CHECK(rt_find("com.kiln.example", "ScaledSwishFn") == NULL);
  CHECK_OK(kiln_compiler_load_plugin(p));
  /* the runtime's registry has it, and so does this binary's copy */
  CHECK(rt_find("com.kiln.example", "ScaledSwishFn") != NULL);
  CHECK(kiln_custom_op_find("com.kiln.example", "ScaledSwishFn") == rt_find("com.kiln.example", "ScaledSwishFn"));
  compile_and_run();
}

static void test_through_the_runtime(void) {
  kiln_plugin_unload_all(); /* this copy forwards: the runtime's registry empties */
  CHECK(rt_count && rt_count() == 0);
  /* the compiler does not know the op now */
  kiln_compiler_t* c = NULL;
  CHECK_OK(kiln_compiler_create(KILN_COMPILER_ABI_VERSION, &c));
  CHECK_OK(kiln_compiler_load_model(c, g_model));
  CHECK_ERR_ALL(kiln_compiler_compile(c), KILN_UNSUPPORTED, "ScaledSwishFn");
  kiln_compiler_destroy(c);
  CHECK_OK(kiln_plugin_load(getenv("KILN_EXAMPLE_PLUGIN")));
  CHECK(rt_count() == 4);
  compile_and_run();
}

int main(void) {
  if (!bm_tmpdir("plugin_registry", g_dir, sizeof g_dir)) {
    fprintf(stderr, "cannot create a temp folder\n");
    return 1;
  }
  open_rt();
  write_model();
  RUN(test_through_the_compiler);
  RUN(test_through_the_runtime);
  kiln_plugin_unload_all();
  bm_rmtree(g_dir);
  return kiln_test_finish();
}
