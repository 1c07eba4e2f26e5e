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
 * the same with the printed GEMMs (KILN_SEQ_GEMM_TEMPLATE=off).
 * --target T --ffn: a feed-forward block (MatMul + Add + Gelu, erf and tanh
 * forms, then MatMul + Add + residual Add) the same way, template on and
 * off (test_device_ffn).
 * Without arguments too: a SwiGLU block (X Wu * silu(X Wg), 32 -> 2048)
 * compiles as one range on both GPU targets (test_swiglu_range): its GEMMs
 * cross 2^20 multiply-adds inside the range, where GPU fusion's template
 * vetoes (lowering/fuse.c) would split its epilogue at some lengths only;
 * a range program's plans must fuse alike at every length. */
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
#include "compile_util.h"
#include "seq_attn_model.h" /* after testing.h: it checks */

#define W 32

static const char* g_target = NULL; /* --target T: the device part on T */
static char g_dir[512];
static char g_attn[700];
static char g_ffn[2][700]; /* the FFN block with Gelu's erf and tanh forms */

static kiln_allocator_t al(void) { return kiln_allocator_system(); }

static void write_model(void) {
  snprintf(g_attn, sizeof g_attn, "%s/attn.onnx", g_dir);
  CHECK(seq_attn_model_write(g_attn, W));
}

/* weights [rows, cols] in [-1, 1) / sqrt(rows) from |seed| */
static void ffn_weights(bm_model_t* b, const char* name, int64_t rows, int64_t cols, uint32_t seed) {
  const int64_t d[2] = {rows, cols};
  const int64_t n = rows * cols;
  float* v = bm_alloc(b, sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    v[i] = ((float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f) / sqrtf((float)rows);
  }
  bm_initializer(b, name, BM_F32, cols == 1 ? 1 : 2, cols == 1 ? &rows : d, v, sizeof(float) * (size_t)n);
}

/* A transformer's feed-forward block over the length:
 *   X [1,seq,W] -> Gelu(X W1 + b1) W2 + b2 + X
 * (Gelu with |approx| "none" or "tanh"): a range program's MatMul + Add +
 * Gelu and MatMul + Add + Add, the GEMM template's GELU and residual. */
static bool ffn_model_write(const char* path, const char* approx) {
  bm_model_t b;
  bm_init(&b, 20);
  const char* params[3] = {NULL, "seq", NULL};
  int64_t xd[3] = {1, 0, W};
  b.g.input[b.g.n_input++] = bm_value(&b, "X", BM_F32, 3, xd, params);
  ffn_weights(&b, "W1", W, 2 * W, 11);
  ffn_weights(&b, "b1", 2 * W, 1, 12);
  ffn_weights(&b, "W2", 2 * W, W, 13);
  ffn_weights(&b, "b2", W, 1, 14);
  bm_node(&b, "MatMul", "ff1", "X,W1", "H");
  bm_node(&b, "Add", "ff1_bias", "H,b1", "H1");
  Onnx__NodeProto* ge = bm_node(&b, "Gelu", "gelu", "H1", "G");
  Onnx__AttributeProto* a = bm_attr(&b, ge, "approximate", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
  a->has_s = 1;
  a->s.len = strlen(approx);
  a->s.data = (uint8_t*)bm_str(&b, approx);
  bm_node(&b, "MatMul", "ff2", "G,W2", "F");
  bm_node(&b, "Add", "ff2_bias", "F,b2", "F1");
  bm_node(&b, "Add", "residual", "F1,X", "Y");
  bm_output(&b, "Y");
  const bool ok = bm_write(&b, path);
  bm_free(&b);
  return ok;
}

/* X [1,seq,W] -> (X Wu) * silu(X Wg), 2048 wide (llama's SwiGLU). */
static char g_swiglu[700];
static bool swiglu_model_write(const char* path) {
  bm_model_t b;
  bm_init(&b, 12);
  const char* params[3] = {NULL, "seq", NULL};
  int64_t xd[3] = {1, 0, W};
  b.g.input[b.g.n_input++] = bm_value(&b, "X", BM_F32, 3, xd, params);
  ffn_weights(&b, "Wg", W, 2048, 21);
  ffn_weights(&b, "Wu", W, 2048, 22);
  bm_node(&b, "MatMul", "gate", "X,Wg", "G");
  bm_node(&b, "Sigmoid", "sig", "G", "S");
  bm_node(&b, "Mul", "silu", "G,S", "GS");
  bm_node(&b, "MatMul", "up", "X,Wu", "U");
  bm_node(&b, "Mul", "swiglu", "U,GS", "Y");
  bm_output(&b, "Y");
  const bool ok = bm_write(&b, path);
  bm_free(&b);
  return ok;
}

/* The module bytes (malloc'd) of the model at |model| compiled for |target| with |dim|. */
static kiln_status_t compile_model(const char* model, const char* target, const char* dim, uint8_t** out,
                                   size_t* out_len) {
  const char* const opts[] = {"target", target, "dim", dim, NULL};
  return tc_compile(model, opts, out, out_len);
}

static kiln_status_t compile(const char* target, const char* dim, uint8_t** out, size_t* out_len) {
  return compile_model(g_attn, target, dim, out, out_len);
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

/* The FFN blocks on |g_target|: both GEMMs in the template (ff1 with its
 * GELU: OpenCL GACT 1 / 2, Vulkan ACT 1 / 2; ff2 with the residual), at
 * lengths of the range against the reference, then with
 * KILN_SEQ_GEMM_TEMPLATE=off. */
static void test_device_ffn(void) {
  const bool cl = !strcmp(g_target, "opencl");
  for (int f = 0; f < 2; ++f)
    for (int tmpl = 1; tmpl >= 0; --tmpl) {
      uint8_t* bytes = NULL;
      size_t len = 0;
      if (!tmpl) setenv("KILN_SEQ_GEMM_TEMPLATE", "off", 1);
      kiln_status_t cs = compile_model(g_ffn[f], g_target, "seq=4..24", &bytes, &len);
      if (!tmpl) unsetenv("KILN_SEQ_GEMM_TEMPLATE");
      if (!CHECK_OK(cs) || !bytes) continue;
      kiln_program_t* p = NULL;
      if (CHECK_OK(kiln_module_parse(bytes, len, "ffn.kiln", al(), &p))) {
        const char* t = p->code.text ? p->code.text : "";
        if (cl && tmpl) {
          CHECK_MSG(strstr(t, f ? "#define GACT 2" : "#define GACT 1") && strstr(t, "#define GHAS_RES 1"),
                    "ffn %d: ff1 with its GELU and ff2 with the residual in the template", f);
        } else if (tmpl) {
          CHECK_MSG(strstr(t, f ? "#define ACT 2" : "#define ACT 1") && strstr(t, "#define HAS_RES 1") &&
                        strstr(t, "#define RT_M 1"),
                    "ffn %d: ff1 with its GELU and ff2 with the residual in gemm.comp", f);
        } else {
          CHECK_MSG(!strstr(t, "#define GRT_M 1") && !strstr(t, "#define RT_M 1"), "ffn %d: a template", f);
        }
      }
      kiln_program_destroy(p);
      kiln_module_t* m = NULL;
      kiln_device_t* d = NULL;
      kiln_session_t* s = NULL;
      kiln_device_open_options_t o = {0, true, NULL};
      if (CHECK_OK(kiln_module_load_memory(bytes, len, "ffn.kiln", al(), &m)) &&
          CHECK_OK(kiln_device_open(g_target, &o, al(), &d)) && CHECK_OK(kiln_session_create(m, d, NULL, &s))) {
        const int64_t seqs[] = {24, 4, 9, 17};
        for (size_t i = 0; i < sizeof seqs / sizeof seqs[0]; ++i)
          /* (at 4 the buffers are a few hundred bytes: the arena's alignment
           * is 6% of its bound there) */
          seq_attn_check_run(s, g_ffn[f], seqs[i], W, 3u * (uint32_t)seqs[i] + 5u, seqs[i] >= 9);
      }
      kiln_session_destroy(s);
      kiln_device_release(d);
      kiln_module_release(m);
      free(bytes);
    }
}

static void test_swiglu_range(void) {
  static const char* const targets[] = {"opencl", "vulkan"};
  for (int i = 0; i < 2; ++i) {
    if (!kiln_target_find(targets[i])) continue;
    uint8_t* bytes = NULL;
    size_t len = 0;
    kiln_status_t s = compile_model(g_swiglu, targets[i], "seq=4..24", &bytes, &len);
    CHECK_MSG(s == NULL, "swiglu on %s: %s", targets[i], s ? kiln_status_message(s) : "");
    kiln_status_free(s);
    free(bytes);
  }
}

static void test_device(void) { device_run(true); }
/* the printed GEMMs (row blocks) at the same lengths */
static void test_device_printed(void) { device_run(false); }

int main(int argc, char** argv) {
  bool ffn = false; /* --ffn: the FFN blocks only (test_device_ffn) */
  if (argc >= 3 && !strcmp(argv[1], "--target")) g_target = argv[2];
  if (argc == 4 && !strcmp(argv[3], "--ffn")) ffn = true;
  if (!kiln_target_find("opencl")) {
    printf("SKIP: the opencl target is not built\n");
    return 0;
  }
  if (!bm_tmpdir("dyn_seq_gpu", g_dir, sizeof g_dir)) return 1;
  write_model();
  snprintf(g_ffn[0], sizeof g_ffn[0], "%s/ffn_erf.onnx", g_dir);
  snprintf(g_ffn[1], sizeof g_ffn[1], "%s/ffn_tanh.onnx", g_dir);
  CHECK(ffn_model_write(g_ffn[0], "none") && ffn_model_write(g_ffn[1], "tanh"));
  snprintf(g_swiglu, sizeof g_swiglu, "%s/swiglu.onnx", g_dir);
  CHECK(swiglu_model_write(g_swiglu));
  if (g_target && ffn) {
    RUN(test_device_ffn);
  } else if (g_target) {
    RUN(test_device);
    RUN(test_device_printed);
  }
  else {
    RUN(test_program);
    RUN(test_swiglu_range);
  }
  bm_rmtree(g_dir);
  return kiln_test_finish();
}
