/* A range on a dim inside the kernels' shapes on a GPU target (kiln compile
 * -t opencl|vulkan --dim seq=4..24, lowering/plan_seq.h, targets/gpu_bind_seq.h):
 * an attention block with a residual and a LayerNormalization, written
 * here as ONNX and compiled ONCE through the compiler API.
 *
 * Without arguments: the program (no device): one program, no buckets,
 * the dim's axis on the input and output, sizes per length (DYNM), every
 * kernel's grid one slice of the length (groups[2] 1, the device launches
 * dim 2 once per value), and the printed kernels read the slice from dim 2;
 * the projections in the GEMM template with M read at run time (OpenCL
 * GRT_M, Vulkan RT_M), none with KILN_SEQ_GEMM_TEMPLATE=off.
 * --target opencl|vulkan: the module loaded back from its bytes and run on the
 * target's device 0 at lengths of the range (both ends, up and down,
 * lengths no compile saw) against the reference interpreter at each, the
 * arena of each run within 1.05x of its lower bound, and lengths outside
 * the range refused naming the input, axis, dim, value and range; then
 * the same with the printed GEMMs (KILN_SEQ_GEMM_TEMPLATE=off). */
#include "bad_model_util.h" /* first: it defines _GNU_SOURCE */

#include <math.h>
#include <string.h>

#include "api/model_dims.h"
#include "compiler/ref_exec.h"
#include "frontend/onnx.h"
#include "kiln/compiler.h"
#include "kiln/runtime.h"
#include "runtime/module_file.h"
#include "runtime/program.h"
#include "targets/registry.h"
#include "testing.h"
#include "seq_attn_model.h" /* after testing.h: it checks */

#define W 32

static const char* g_target = NULL; /* --target T: the device part on T */
static char g_dir[512];
static char g_attn[700];

static kiln_allocator_t al(void) { return kiln_allocator_system(); }

static void write_model(void) {
  snprintf(g_attn, sizeof g_attn, "%s/attn.onnx", g_dir);
  CHECK(seq_attn_model_write(g_attn, W));
}

/* The module bytes (malloc'd) of the model compiled for |target| with |dim|. */
static kiln_status_t compile(const char* target, const char* dim, uint8_t** out, size_t* out_len) {
  kiln_compiler_t* c = NULL;
  *out = NULL;
  kiln_status_t s = kiln_compiler_create(KILN_COMPILER_ABI_VERSION, &c);
  if (!s) s = kiln_compiler_load_model(c, g_attn);
  if (!s) s = kiln_compiler_set_option(c, "target", target);
  if (!s) s = kiln_compiler_set_option(c, "dim", dim);
  if (!s) s = kiln_compiler_compile(c);
  const void* data = NULL;
  size_t len = 0;
  if (!s) s = kiln_compiler_module(c, &data, &len);
  if (!s) {
    *out = malloc(len);
    if (*out) memcpy(*out, data, len);
    *out_len = len;
  }
  kiln_compiler_destroy(c);
  return s;
}

static kiln_array_t filled(int64_t seq, uint32_t seed) { return seq_attn_input(seq, W, seed); }

/* The session at |seq| against the reference executor on the model bound
 * to it, and the run's arena against its lower bound. */
static void check_run(kiln_session_t* s, int64_t seq) {
  seq_attn_check_run(s, g_attn, seq, W, 7u * (uint32_t)seq + 1u, true);
}

/* The program without a device: one range program, grids per slice. */
static void test_program(void) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  if (!CHECK_OK(compile("opencl", "seq=4..24", &bytes, &len)) || !bytes) return;
  kiln_program_t* p = NULL;
  if (CHECK_OK(kiln_module_parse(bytes, len, "attn.kiln", al(), &p))) {
    CHECK(p->n_dims == 1 && p->dim_axis && p->dim_bytes && p->n_buckets == 0);
    CHECK(p->dims[0].lo == 4 && p->dims[0].hi == 24 && !strcmp(p->dims[0].name, "seq"));
    CHECK(p->dim_axis[0] == 1 && p->dim_axis[1] == 1);
    for (int32_t k = 0; k < p->n_kernels; ++k)
      CHECK_MSG(p->kernels[k].groups[2] == 1, "kernel '%s': groups[2] %lld", p->kernels[k].name,
                (long long)p->kernels[k].groups[2]);
    CHECK(p->code.text && strstr(p->code.text, "get_group_id(2)"));
    /* the projections (X x W, M the length) in the GEMM template with M
     * read at run time (kernels/opencl/gemm.cl GRT_M) */
    CHECK(p->code.text && strstr(p->code.text, "#define GRT_M 1") && strstr(p->code.text, "restrict DIMS"));
  }
  kiln_program_destroy(p);
  free(bytes);
  /* the same on Vulkan (compiled without a device: shaderc only): the
   * projections in gemm.comp with M read from the dims buffer (RT_M) */
  if (kiln_target_find("vulkan")) {
    p = NULL;
    if (CHECK_OK(compile("vulkan", "seq=4..24", &bytes, &len)) && bytes &&
        CHECK_OK(kiln_module_parse(bytes, len, "attn.kiln", al(), &p))) {
      for (int32_t k = 0; k < p->n_kernels; ++k)
        CHECK_MSG(p->kernels[k].groups[2] == 1 && p->kernels[k].groups[1] == 1, "kernel '%s': groups %lld x %lld",
                  p->kernels[k].name, (long long)p->kernels[k].groups[1], (long long)p->kernels[k].groups[2]);
      CHECK(p->code.text && strstr(p->code.text, "#define RT_M 1") && strstr(p->code.text, "#define M kg_m"));
    }
    kiln_program_destroy(p);
    free(bytes);
    bytes = NULL;
  }
  /* KILN_SEQ_GEMM_TEMPLATE=off: the printed GEMMs only, on both targets */
  setenv("KILN_SEQ_GEMM_TEMPLATE", "off", 1);
  const char* targets[] = {"opencl", "vulkan"};
  for (int t = 0; t < 2; ++t) {
    if (!kiln_target_find(targets[t])) continue;
    p = NULL;
    if (CHECK_OK(compile(targets[t], "seq=4..24", &bytes, &len)) && bytes &&
        CHECK_OK(kiln_module_parse(bytes, len, "attn.kiln", al(), &p)))
      CHECK_MSG(p->code.text && !strstr(p->code.text, "#define GRT_M 1") && !strstr(p->code.text, "#define RT_M 1"),
                "%s: a GEMM template with KILN_SEQ_GEMM_TEMPLATE=off", targets[t]);
    kiln_program_destroy(p);
    free(bytes);
    bytes = NULL;
  }
  unsetenv("KILN_SEQ_GEMM_TEMPLATE");
}

/* The module of |g_target| compiled with the GEMM template (|tmpl|) or
 * without (KILN_SEQ_GEMM_TEMPLATE=off), run at lengths of the range. */
static void device_run(bool tmpl) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  if (!tmpl) setenv("KILN_SEQ_GEMM_TEMPLATE", "off", 1);
  kiln_status_t cs = compile(g_target, "seq=4..24", &bytes, &len);
  if (!tmpl) unsetenv("KILN_SEQ_GEMM_TEMPLATE");
  if (!CHECK_OK(cs) || !bytes) return;
  {
    kiln_program_t* p = NULL;
    if (CHECK_OK(kiln_module_parse(bytes, len, "attn.kiln", al(), &p))) {
      const bool has = p->code.text && (strstr(p->code.text, "#define GRT_M 1") || strstr(p->code.text, "#define RT_M 1"));
      CHECK_MSG(has == tmpl, "%s: GEMM template %s", g_target, has ? "present" : "absent");
    }
    kiln_program_destroy(p);
  }
  kiln_module_t* m = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_device_open_options_t o = {0, true, NULL};
  if (CHECK_OK(kiln_module_load_memory(bytes, len, "attn.kiln", al(), &m)) &&
      CHECK_OK(kiln_device_open(g_target, &o, al(), &d)) && CHECK_OK(kiln_session_create(m, d, NULL, &s))) {
    CHECK(kiln_module_dim_count(m) == 1 && kiln_module_bucket_count(m) == 0);
    /* the ends, down and up again, lengths the compile lowered at (5, 14, 23) and ones it did not */
    const int64_t seqs[] = {4, 24, 7, 13, 5, 19, 14, 23, 4};
    for (size_t i = 0; i < sizeof seqs / sizeof seqs[0]; ++i) check_run(s, seqs[i]);
    kiln_array_t x = filled(25, 1), y[1];
    CHECK_ERR_ALL(kiln_session_run(s, &x, y), KILN_INVALID_ARGUMENT, "input 'X' dim 1 ('seq') is 25",
                  "range 4..24");
    kiln_array_free(al(), &x);
    x = filled(3, 1);
    CHECK_ERR_ALL(kiln_session_run(s, &x, y), KILN_INVALID_ARGUMENT, "('seq') is 3", "range 4..24");
    kiln_array_free(al(), &x);
    check_run(s, 17); /* a refused run leaves the session as it was */
  }
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
  free(bytes);
}

static void test_device(void) { device_run(true); }
/* the printed GEMMs (row blocks) at the same lengths */
static void test_device_printed(void) { device_run(false); }

int main(int argc, char** argv) {
  if (argc == 3 && !strcmp(argv[1], "--target")) g_target = argv[2];
  if (!kiln_target_find("opencl")) {
    printf("SKIP: the opencl target is not built\n");
    return 0;
  }
  if (!bm_tmpdir("dyn_seq_gpu", g_dir, sizeof g_dir)) return 1;
  write_model();
  if (g_target) {
    RUN(test_device);
    RUN(test_device_printed);
  }
  else RUN(test_program);
  bm_rmtree(g_dir);
  return kiln_test_finish();
}
