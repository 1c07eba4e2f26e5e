/* GEMMs with few rows (M = 1..4, static) on the GPU targets: the GEMV
 * template (kernels/opencl/gemv.cl; targets/opencl/opencl_gemm.c's
 * kiln_opencl_gemv_*) takes them in the GEMM template's place, with the
 * same fused epilogues and f16 storage.
 *
 * Each model (MatMul, or Gemm with transB; a bias, a Relu, a Clip, an erf
 * GELU or a residual Add fused) is compiled through the compiler API in
 * fp32 or fp16, its program text checked for the GEMV instance (or, with
 * the switch off, the GEMM one), then run on device 0 against the
 * reference interpreter. Odd N and K (1001, 7; 1281, 3) leave partial
 * column blocks, partial vectors and packed panels; a run-time B (a second
 * input) goes through the lowering's pack kernel; KILN_OPENCL_GEMV_TILES
 * covers the other vector widths, a K split across work-items (partial
 * sums through __local memory) and the switch off.
 * On Vulkan (--target vulkan) the same models run gemm.comp with the
 * few-row tiles (kiln_spirv_gemv_tiles: 16 columns an invocation) from
 * 128 columns on, the validation layer on.
 * Usage: test_gpu_gemv [--target opencl|vulkan]; skipped where the target
 * is not built. */
#include "bad_model_util.h" /* first: it defines _GNU_SOURCE */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/ref_exec.h"
#include "frontend/onnx.h"
#include "kiln/compiler.h"
#include "kiln/runtime.h"
#include "runtime/module_file.h"
#include "runtime/program.h"
#include "targets/registry.h"
#include "testing.h"
#include "compile_util.h"

static const char* g_target = "opencl";
static char g_dir[512];

static kiln_allocator_t al(void) { return kiln_allocator_system(); }

static void weights(bm_model_t* b, const char* name, int rank, const int64_t* d, int64_t K, uint32_t seed) {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= d[i];
  float* v = bm_alloc(b, sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    v[i] = ((float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f) / sqrtf((float)K);
  }
  bm_initializer(b, name, BM_F32, rank, d, v, sizeof(float) * (size_t)n);
}

/* epilogues */
enum { EPI_NONE, EPI_BIAS, EPI_RELU, EPI_CLIP, EPI_GELU, EPI_RES };
static const char* const epi_name[] = {"none", "bias", "bias+relu", "bias+clip", "bias+gelu", "bias+residual"};

typedef struct gemv_case_s {
  int M, N, K;
  bool tb;  /* Gemm with transB (B stored N x K), else MatMul */
  int epi;  /* EPI_* */
  bool rt;  /* W a second graph input (run-time B, read as stored), else a
             * constant (the lowering packs it in panels of columns) */
} gemv_case_t;

/* Y = EPI(X op(W) + b): a Gemm carries the bias as its C (Relu / Clip /
 * Gelu after it); a MatMul gets it as an Add. EPI_RES adds X V (a second
 * MatMul, also a GEMV) after the bias. */
static bool model_write(const char* path, const gemv_case_t* c) {
  bm_model_t b;
  bm_init(&b, 20);
  const int64_t xd[2] = {c->M, c->K};
  b.g.input[b.g.n_input++] = bm_value(&b, "X", BM_F32, 2, xd, NULL);
  const int64_t wd[2] = {c->tb ? c->N : c->K, c->tb ? c->K : c->N}, bd[1] = {c->N}, vd[2] = {c->K, c->N};
  if (c->rt) b.g.input[b.g.n_input++] = bm_value(&b, "W", BM_F32, 2, wd, NULL);
  else weights(&b, "W", 2, wd, c->K, 11);
  weights(&b, "B", 1, bd, c->K, 12);
  const char* h = c->epi == EPI_NONE ? "Y" : c->epi == EPI_BIAS ? "Y" : "H1";
  if (c->tb) {
    Onnx__NodeProto* g = bm_node(&b, "Gemm", "gemm", c->epi == EPI_NONE ? "X,W" : "X,W,B", h);
    bm_attr_int(&b, g, "transB", 1);
  } else if (c->epi == EPI_NONE) {
    bm_node(&b, "MatMul", "mm", "X,W", h);
  } else {
    bm_node(&b, "MatMul", "mm", "X,W", "H");
    bm_node(&b, "Add", "bias", "H,B", h);
  }
  if (c->epi == EPI_RELU) bm_node(&b, "Relu", "relu", "H1", "Y");
  if (c->epi == EPI_CLIP) {
    float lo = 0.0f, hi = 0.25f;
    bm_initializer(&b, "lo", BM_F32, 0, NULL, &lo, sizeof lo);
    bm_initializer(&b, "hi", BM_F32, 0, NULL, &hi, sizeof hi);
    bm_node(&b, "Clip", "clip", "H1,lo,hi", "Y");
  }
  if (c->epi == EPI_GELU) {
    Onnx__NodeProto* ge = bm_node(&b, "Gelu", "gelu", "H1", "Y");
    Onnx__AttributeProto* a = bm_attr(&b, ge, "approximate", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    a->has_s = 1;
    a->s.len = 4;
    a->s.data = (uint8_t*)bm_str(&b, "none");
  }
  if (c->epi == EPI_RES) {
    weights(&b, "V", 2, vd, c->K, 13);
    bm_node(&b, "MatMul", "mm_res", "X,V", "R");
    bm_node(&b, "Add", "res", "H1,R", "Y");
  }
  bm_output(&b, "Y");
  const bool ok = bm_write(&b, path);
  bm_free(&b);
  return ok;
}

/* Case |c|'s activation is fused: the kernel text |t| defines macro
 * |name| (ACT in gemm.comp, GACT in gemm.cl / gemv.cl) as its code */
static void check_act(const char* t, const char* name, const gemv_case_t* c, const char* what) {
  static const int act[] = {0, 0, 3, 4, 1, 0}; /* by epi: none, bias, Relu, Clip, GELU, residual */
  if (!act[c->epi]) return;
  char want[32];
  snprintf(want, sizeof want, "#define %s %d\n", name, act[c->epi]);
  CHECK_MSG(strstr(t, want) != NULL, "%s: the activation fused", what);
}

/* |gemv|: the program holds the GEMV instance and no GEMM one (else the
 * GEMM template, the switch off) */
static void check_case(const gemv_case_t* c, const char* precision, bool gemv) {
  char path[700], what[160];
  static int n_model = 0;
  snprintf(path, sizeof path, "%s/gemv%d.onnx", g_dir, n_model++);
  snprintf(what, sizeof what, "%d x %d x %d%s%s %s %s (tiles %s)", c->M, c->N, c->K, c->tb ? " transB" : "",
           c->rt ? " run-time B" : "",
           epi_name[c->epi], precision, getenv("KILN_OPENCL_GEMV_TILES") ? getenv("KILN_OPENCL_GEMV_TILES") : "default");
  const bool written = model_write(path, c);
  CHECK_MSG(written, "%s: model written", what);
  if (!written) return;
  uint8_t* bytes = NULL;
  size_t len = 0;
  const char* const opts[] = {"target", g_target, "precision", precision, NULL};
  if (!CHECK_OK(tc_compile(path, opts, &bytes, &len)) || !bytes) return;
  const bool f16 = !strcmp(precision, "fp16");
  kiln_program_t* p = NULL;
  const bool vk = !strcmp(g_target, "vulkan");
  if (vk && CHECK_OK(kiln_module_parse(bytes, len, "gemv.kiln", al(), &p)) && !f16) {
    /* Vulkan: gemm.comp with the few-row tiles (kiln_spirv_gemv_tiles)
     * from 128 columns on; f16 only above 2^25 multiply-adds (printed
     * here) */
    const char* t = p->code.text ? p->code.text : "";
    const bool few = strstr(t, "#define TM 8\n#define TN 128\n#define TK 4\n#define RM 8\n#define RN 16\n") != NULL;
    CHECK_MSG(strstr(t, "#define B_MODE") != NULL, "%s: the GEMM template", what);
    CHECK_MSG(few == (c->N >= 128), "%s: the few-row tiles %s", what, c->N >= 128 ? "taken" : "not taken");
    check_act(t, "ACT", c, what);
    CHECK_MSG((strstr(t, "#define HAS_RES 1") != NULL) == (c->epi == EPI_RES), "%s: the residual fused", what);
  } else if (!vk && CHECK_OK(kiln_module_parse(bytes, len, "gemv.kiln", al(), &p))) {
    const char* t = p->code.text ? p->code.text : "";
    CHECK_MSG((strstr(t, "kiln GEMV template") != NULL) == gemv, "%s: the GEMV template %s", what,
              gemv ? "taken" : "switched off");
    CHECK_MSG((strstr(t, "kiln GEMM template") != NULL) == !gemv, "%s: the GEMM template %s", what,
              gemv ? "not there" : "there");
    check_act(t, "GACT", c, what);
    CHECK_MSG((strstr(t, "#define GHAS_RES 1") != NULL) == (c->epi == EPI_RES), "%s: the residual fused", what);
    if (f16) CHECK_MSG(strstr(t, "__global const half* restrict B") != NULL, "%s: f16 weights", what);
    /* a run-time B stored N x K: packed by a kernel first (gemv.cl reads
     * the panels) */
    if (gemv && c->rt && c->tb)
      CHECK_MSG(strstr(t, "#define GTRANS_B 0\n#define GPACK_T ") != NULL && !strstr(t, "#define GPACK_T 0\n"),
                "%s: B packed", what);
  }
  kiln_program_destroy(p);
  kiln_module_t* m = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_graph_t* g = NULL;
  kiln_device_open_options_t o = {0, true, NULL};
  kiln_array_t x[2], want, got;
  memset(x, 0, sizeof x);
  memset(&want, 0, sizeof want);
  memset(&got, 0, sizeof got);
  const kiln_shape_t xs[2] = {kiln_shape_make(2, (const int64_t[]){c->M, c->K}),
                              kiln_shape_make(2, c->tb ? (const int64_t[]){c->N, c->K} : (const int64_t[]){c->K, c->N})};
  bool filled = true;
  for (int i = 0; i < (c->rt ? 2 : 1); ++i) {
    if (!CHECK_OK(kiln_array_alloc(al(), KILN_DTYPE_F32, &xs[i], &x[i]))) {
      filled = false;
      continue;
    }
    uint32_t seed = 5u + (uint32_t)(c->M * 7 + c->N + c->K + i);
    for (size_t j = 0; j < x[i].nbytes / 4; ++j) {
      seed = seed * 1664525u + 1013904223u;
      ((float*)x[i].data)[j] = ((float)((seed >> 8) & 0xffff) / 16384.0f - 2.0f) / (i ? sqrtf((float)c->K) : 1.0f);
    }
  }
  if (filled && CHECK_OK(kiln_module_load_memory(bytes, len, "gemv.kiln", al(), &m)) &&
      CHECK_OK(kiln_device_open(g_target, &o, al(), &d)) && CHECK_OK(kiln_session_create(m, d, NULL, &s)) &&
      CHECK_OK(kiln_onnx_parse_model(path, NULL, al(), &g)) && CHECK_OK(kiln_graph_prepare(g)) &&
      CHECK_OK(kiln_ref_run(g, x, NULL, &want)) && CHECK_OK(kiln_session_run(s, x, &got))) {
    double worst = 0;
    const bool same = got.nbytes == want.nbytes && got.nbytes == (size_t)c->M * c->N * 4;
    for (size_t i = 0; same && i < want.nbytes / 4; ++i) {
      const double w = ((float*)want.data)[i], e = fabs(((float*)got.data)[i] - w) / (1.0 + fabs(w));
      if (!(e <= worst)) worst = e; /* NaN counts */
    }
    /* fp16: weights, input and output stored as half (11-bit significand) */
    const double tol = f16 ? 1e-2 : 1e-5;
    CHECK_MSG(same && worst <= tol, "%s: max error %g (tolerance %g)", what, worst, tol);
  }
  kiln_graph_destroy(g);
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
  kiln_array_free(al(), &x[0]);
  kiln_array_free(al(), &x[1]);
  kiln_array_free(al(), &want);
  kiln_array_free(al(), &got);
  free(bytes);
}

/* (fusion puts an activation or a residual into the GEMM where the
 * lowering's kernel has one K block, K up to 256 here: past that its
 * partial sums go through Y and the epilogue stays a kernel of its own;
 * a Clip or a Gelu only after a MatMul + Add, not after a Gemm) */
static const gemv_case_t kCases[] = {
    {1, 1000, 1280, true, EPI_BIAS, false},  /* MobileNetV2's classifier */
    {2, 1001, 1281, false, EPI_NONE, false}, /* a partial vector, a partial column block */
    {3, 7, 3, true, EPI_RELU, false},        /* a K shorter than a vector */
    {4, 1001, 1281, true, EPI_BIAS, true},
    {1, 1001, 255, false, EPI_GELU, false},
    {4, 1000, 3, false, EPI_RES, false},
    {3, 1000, 129, false, EPI_CLIP, false},
    {2, 7, 1280, true, EPI_NONE, true},      /* fewer columns than a vector */
    {4, 1001, 255, true, EPI_RELU, false},
    {1, 33, 3, true, EPI_NONE, true},
};
#define N_CASES (sizeof kCases / sizeof kCases[0])

/* every case at the default tiles, fp32 */
static void test_default_fp32(void) {
  for (size_t i = 0; i < N_CASES; ++i) check_case(&kCases[i], "fp32", true);
}

/* f16 storage: A, B, the bias and Y as half, f32 sums */
static void test_default_fp16(void) {
  for (size_t i = 0; i < N_CASES; ++i)
    if (i % 2 == 0 || kCases[i].epi == EPI_RES) check_case(&kCases[i], "fp16", true);
}

/* other tiles: vw 4 and 8, a K split over 4 and 8 work-items (partial
 * sums reduced in __local memory), and the switch off (gemm.cl) */
static void test_tiles(void) {
  static const char* const tiles[] = {"4,8,4,1", "8,16,8,1", "16,32,2,1"};
  for (size_t t = 0; t < sizeof tiles / sizeof tiles[0]; ++t) {
    setenv("KILN_OPENCL_GEMV_TILES", tiles[t], 1);
    for (size_t i = t % 2; i < N_CASES; i += 2) check_case(&kCases[i], "fp32", true);
    check_case(&kCases[3], "fp16", true);
    check_case(&kCases[4], "fp16", true);
  }
  setenv("KILN_OPENCL_GEMV_TILES", "16,64,1,0", 1);
  check_case(&kCases[0], "fp32", false);
  check_case(&kCases[1], "fp32", false);
  unsetenv("KILN_OPENCL_GEMV_TILES");
}

/* a record the template does not take: a compile error naming the tiles */
static void test_bad_tiles(void) {
  setenv("KILN_OPENCL_GEMV_TILES", "4,6,1,1", 1); /* vw must divide nc */
  char path[700];
  snprintf(path, sizeof path, "%s/gemv_bad.onnx", g_dir);
  const gemv_case_t c = {2, 100, 64, false, EPI_NONE, false};
  const bool written = model_write(path, &c);
  CHECK_MSG(written, "bad tiles: model written");
  if (written) {
    const char* const opts[] = {"target", g_target, NULL};
    kiln_status_t s = tc_compile(path, opts, NULL, NULL);
    CHECK_MSG(s && strstr(kiln_status_message(s), "vw must divide nc") != NULL, "bad tiles refused: %s",
              s ? kiln_status_message(s) : "compiled");
    kiln_status_free(s);
  }
  unsetenv("KILN_OPENCL_GEMV_TILES");
}

int main(int argc, char** argv) {
  if (argc >= 3 && !strcmp(argv[1], "--target")) g_target = argv[2];
  if (!kiln_target_find(g_target)) {
    printf("SKIP: the %s target is not built\n", g_target);
    return 0;
  }
  if (!bm_tmpdir("gpu_gemv", g_dir, sizeof g_dir)) return 1;
  RUN(test_default_fp32);
  RUN(test_default_fp16);
  if (!strcmp(g_target, "opencl")) { /* gemv.cl's tiles */
    RUN(test_tiles);
    RUN(test_bad_tiles);
  }
  bm_rmtree(g_dir);
  return kiln_test_finish();
}
