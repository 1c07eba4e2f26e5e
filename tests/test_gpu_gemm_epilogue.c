/* GEMMs with fused epilogues (MatMul + bias + erf GELU, MatMul + bias,
 * Gemm with a C row and Relu, MatMul + bias + a residual Add, MatMul +
 * bias + Clip to [0, 6] with constant bounds, MatMul + bias + Relu at 256
 * x 264 x 512): the GPU GEMM templates take them (lowering/template_gemm.c's
 * epilogue chain: kernels/vulkan/gemm.comp, kernels/opencl/gemm.cl), in fp32
 * and with f16 storage -- on Vulkan only above 2^25 multiply-adds (the big
 * one); the small ones stay printed there in fp16, with lowering/
 * lower_nn_gemm.c's GPU tile of at most 4 x 8 outputs an invocation.
 *
 * On Vulkan (or --target opencl): each model compiled through the compiler
 * API in fp32 and fp16, its program text checked for the template instance
 * with the epilogue's defines and no printed GEMM, then run on device 0
 * against the reference interpreter. The shapes leave partial tiles
 * along both M and N, N crosses B's 32-wide packed panels, and the
 * second panel is partial. Skipped where the target is not built. */
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

/* the GEMM's size (check_model sets it per model) */
static int M = 30, K = 40, N = 50;

static const char* g_target = "vulkan";
static char g_dir[512];

static kiln_allocator_t al(void) { return kiln_allocator_system(); }

static void weights(bm_model_t* b, const char* name, int rank, const int64_t* d, uint32_t seed) {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= d[i];
  float* v = bm_alloc(b, sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    v[i] = ((float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f) / sqrtf((float)K);
  }
  bm_initializer(b, name, BM_F32, rank, d, v, sizeof(float) * (size_t)n);
}

/* kind 0: Gelu(X W + b) (erf); 1: X W + b; 2: Relu(Gemm(X2, W, c)) with a C row;
 * 3: (X W + b) + X V (a residual Add: the second MatMul's output); 4: Clip(X W + b, 0, 6);
 * 5: Relu(X W + b) at 256 x 264 x 512 (more work than Vulkan's f16 floor);
 * 6: (X W) * silu(X V) (llama's SwiGLU: no template prints a Mul by another
 * tensor or a SiLU, so fusion leaves both MatMuls templates of their own
 * and the Sigmoid and Muls an element-wise kernel);
 * 7: X X^T over 3 batches (attention's scores: one B per batch, the
 * Transpose a kernel of its own, not inlined into the GEMM: gemm.comp
 * BATCHED, gemm.cl GBATCH) */
static bool model_write(const char* path, int kind) {
  bm_model_t b;
  bm_init(&b, 20);
  int64_t xd3[3] = {kind == 7 ? 3 : 1, M, K}, xd2[2] = {M, K};
  b.g.input[b.g.n_input++] = bm_value(&b, "X", BM_F32, kind == 2 ? 2 : 3, kind == 2 ? xd2 : xd3, NULL);
  const int64_t wd[2] = {K, N}, bd[1] = {N};
  weights(&b, "W", 2, wd, 11);
  weights(&b, "B", 1, bd, 12);
  if (kind == 2) {
    bm_node(&b, "Gemm", "gemm", "X,W,B", "H");
    bm_node(&b, "Relu", "relu", "H", "Y");
  } else if (kind == 3) {
    const int64_t vd[2] = {K, N};
    weights(&b, "V", 2, vd, 13);
    bm_node(&b, "MatMul", "mm_res", "X,V", "R");
    bm_node(&b, "MatMul", "mm", "X,W", "H");
    bm_node(&b, "Add", "bias", "H,B", "H1");
    bm_node(&b, "Add", "res", "H1,R", "Y");
  } else if (kind == 5) {
    bm_node(&b, "MatMul", "mm", "X,W", "H");
    bm_node(&b, "Add", "bias", "H,B", "H1");
    bm_node(&b, "Relu", "relu", "H1", "Y");
  } else if (kind == 7) {
    Onnx__NodeProto* tr = bm_node(&b, "Transpose", "xt", "X", "XT");
    Onnx__AttributeProto* a = bm_attr(&b, tr, "perm", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    static int64_t perm[3] = {0, 2, 1};
    a->n_ints = 3;
    a->ints = perm;
    bm_node(&b, "MatMul", "scores", "X,XT", "Y");
  } else if (kind == 6) {
    const int64_t vd[2] = {K, N};
    weights(&b, "V", 2, vd, 13);
    bm_node(&b, "MatMul", "gate", "X,V", "G");
    bm_node(&b, "Sigmoid", "sig", "G", "S");
    bm_node(&b, "Mul", "silu", "G,S", "SG");
    bm_node(&b, "MatMul", "up", "X,W", "H");
    bm_node(&b, "Mul", "swiglu", "H,SG", "Y");
  } else if (kind == 4) {
    float lo = 0.0f, hi = 6.0f;
    bm_initializer(&b, "lo", BM_F32, 0, NULL, &lo, sizeof lo);
    bm_initializer(&b, "hi", BM_F32, 0, NULL, &hi, sizeof hi);
    bm_node(&b, "MatMul", "mm", "X,W", "H");
    bm_node(&b, "Add", "bias", "H,B", "H1");
    bm_node(&b, "Clip", "clip", "H1,lo,hi", "Y");
  } else {
    bm_node(&b, "MatMul", "mm", "X,W", "H");
    if (kind == 0) {
      bm_node(&b, "Add", "bias", "H,B", "H1");
      Onnx__NodeProto* ge = bm_node(&b, "Gelu", "gelu", "H1", "Y");
      Onnx__AttributeProto* a = bm_attr(&b, ge, "approximate", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
      a->has_s = 1;
      a->s.len = 4;
      a->s.data = (uint8_t*)bm_str(&b, "none");
    } else {
      bm_node(&b, "Add", "bias", "H,B", "Y");
    }
  }
  bm_output(&b, "Y");
  const bool ok = bm_write(&b, path);
  bm_free(&b);
  return ok;
}

static kiln_status_t compile_model(const char* model, const char* precision, uint8_t** out, size_t* out_len) {
  const char* const opts[] = {"target", g_target, "precision", precision, NULL};
  return tc_compile(model, opts, out, out_len);
}

/* The largest private 2-D float array of the shaders (the printed GEMM's
 * accumulator: "float pN[R][C];"): *rows, *cols of the largest R * C. */
static void largest_acc(const char* text, int* rows, int* cols) {
  *rows = *cols = 0;
  for (const char* p = text; (p = strstr(p, "float p")) != NULL; ++p) {
    int id = 0, r = 0, c = 0, used = 0;
    if (sscanf(p, "float p%d[%d][%d];%n", &id, &r, &c, &used) == 3 && used > 0 && r * c > *rows * *cols)
      *rows = r, *cols = c;
  }
}

/* The epilogue's marks in a template instance: the activation (gemm.comp's
 * ACT, gemm.cl's GACT) and the residual. */
static const int kind_act[8] = {1, 0, 3, 0, 4, 3, 0, 0};

static bool has_fmt(const char* t, const char* fmt, int v) {
  char want[64];
  snprintf(want, sizeof want, fmt, v);
  return strstr(t, want) != NULL;
}

static void check_model(int kind, const char* precision) {
  /* 6 and 7 above 2^20 multiply-adds (kiln_template_gemm_candidate: below,
   * fusion keeps the epilogue and the inlined Transpose) */
  M = kind == 5 ? 256 : kind >= 6 ? 66 : 30;
  K = kind == 5 ? 512 : kind >= 6 ? 128 : 40;
  N = kind == 5 ? 264 : kind == 7 ? M : kind == 6 ? 130 : 50;
  const int64_t nb = kind == 7 ? 3 : 1; /* batches */
  char path[700];
  snprintf(path, sizeof path, "%s/gemm_epi%d.onnx", g_dir, kind);
  const bool written = model_write(path, kind);
  CHECK_MSG(written, "model %d: written", kind);
  if (!written) return;
  uint8_t* bytes = NULL;
  size_t len = 0;
  if (!CHECK_OK(compile_model(path, precision, &bytes, &len)) || !bytes) return;
  const bool f16 = !strcmp(precision, "fp16");
  kiln_program_t* p = NULL;
  if (CHECK_OK(kiln_module_parse(bytes, len, "epi.kiln", al(), &p))) {
    const char* t = p->code.text ? p->code.text : "";
    int r = 0, c = 0;
    largest_acc(t, &r, &c);
    const bool vk = !strcmp(g_target, "vulkan");
    if (vk && f16 && kind != 5) {
      /* Vulkan's f16 template only above 2^25 multiply-adds: the printed
       * GEMM with its GPU tile */
      CHECK_MSG(r >= 1 && c >= 1 && r <= 4 && c <= 8, "model %d %s: accumulator %d x %d", kind, precision, r, c);
      if (kind == 0) CHECK_MSG(strstr(t, "kiln_erf(") != NULL, "model 0 %s: the erf GELU fused", precision);
    } else {
      /* the template with the epilogue, no printed GEMM (its accumulator);
       * with f16 storage, its f16 weights */
      if (vk && f16) CHECK_MSG(strstr(t, "#define B_T float16_t") != NULL, "model %d fp16: f16 weights", kind);
      CHECK_MSG(r * c == 0, "model %d %s: a printed GEMM (accumulator %d x %d)", kind, precision, r, c);
      CHECK_MSG(strstr(t, vk ? "#define B_MODE" : "kiln GEMM template") != NULL, "model %d %s: the GEMM template",
                kind, precision);
      if (kind_act[kind])
        CHECK_MSG(has_fmt(t, vk ? "#define ACT %d\n" : "#define GACT %d\n", kind_act[kind]),
                  "model %d %s: activation %d in the template", kind, precision, kind_act[kind]);
      else
        for (int a = 1; a <= 4; ++a) /* gemm.comp has its own default "#define ACT 0" */
          CHECK_MSG(!has_fmt(t, vk ? "#define ACT %d\n" : "#define GACT %d\n", a),
                    "model %d %s: no activation in the template", kind, precision);
      CHECK_MSG((strstr(t, vk ? "#define HAS_RES 1" : "#define GHAS_RES 1") != NULL) == (kind == 3),
                "model %d %s: the residual in the template", kind, precision);
      if (kind == 4)
        CHECK_MSG(strstr(t, vk ? "#define ACT_HI 6.0" : "#define GACT_HI 6.0") != NULL, "model 4 %s: Clip's bound",
                  precision);
      if (kind == 7)
        CHECK_MSG(strstr(t, vk ? "#define BATCHED 1" : "#define GBATCH 3") != NULL, "model 7 %s: the batches",
                  precision);
    }
  }
  kiln_program_destroy(p);
  kiln_module_t* m = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_graph_t* g = NULL;
  kiln_device_open_options_t o = {0, true, NULL};
  kiln_array_t x, want, got;
  memset(&x, 0, sizeof x);
  memset(&want, 0, sizeof want);
  memset(&got, 0, sizeof got);
  kiln_shape_t xs = kind == 2 ? kiln_shape_make(2, (const int64_t[]){M, K}) : kiln_shape_make(3, (const int64_t[]){nb, M, K});
  if (CHECK_OK(kiln_array_alloc(al(), KILN_DTYPE_F32, &xs, &x))) {
    uint32_t seed = 5u + (uint32_t)kind;
    for (size_t i = 0; i < x.nbytes / 4; ++i) {
      seed = seed * 1664525u + 1013904223u;
      ((float*)x.data)[i] = (float)((seed >> 8) & 0xffff) / 16384.0f - 2.0f;
    }
  }
  if (x.data && CHECK_OK(kiln_module_load_memory(bytes, len, "epi.kiln", al(), &m)) &&
      CHECK_OK(kiln_device_open(g_target, &o, al(), &d)) && CHECK_OK(kiln_session_create(m, d, NULL, &s)) &&
      CHECK_OK(kiln_onnx_parse_model(path, NULL, al(), &g)) && CHECK_OK(kiln_graph_prepare(g)) &&
      CHECK_OK(kiln_ref_run(g, &x, NULL, &want)) && CHECK_OK(kiln_session_run(s, &x, &got))) {
    double worst = 0;
    const bool same = got.nbytes == want.nbytes && got.nbytes == (size_t)(nb * M * N * 4);
    for (size_t i = 0; same && i < want.nbytes / 4; ++i) {
      const double w = ((float*)want.data)[i], e = fabs(((float*)got.data)[i] - w) / (1.0 + fabs(w));
      if (!(e <= worst)) worst = e; /* NaN counts */
    }
    /* fp16: weights, input and output stored as half (11-bit significand) */
    const double tol = f16 ? 1e-2 : 1e-5;
    CHECK_MSG(same && worst <= tol, "model %d %s: max error %g (tolerance %g)", kind, precision, worst, tol);
  }
  kiln_graph_destroy(g);
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
  kiln_array_free(al(), &x);
  kiln_array_free(al(), &want);
  kiln_array_free(al(), &got);
  free(bytes);
}

static void test_bias_gelu(void) {
  check_model(0, "fp32");
  check_model(0, "fp16");
}

static void test_bias(void) {
  check_model(1, "fp32");
  check_model(1, "fp16");
}

static void test_gemm_relu(void) {
  check_model(2, "fp32");
  check_model(2, "fp16");
}

static void test_residual(void) {
  check_model(3, "fp32");
  check_model(3, "fp16");
}

static void test_clip(void) {
  check_model(4, "fp32");
  check_model(4, "fp16");
}

static void test_swiglu(void) {
  check_model(6, "fp32");
  check_model(6, "fp16");
}

static void test_batched(void) {
  check_model(7, "fp32");
}

static void test_big_relu(void) {
  check_model(5, "fp32");
  check_model(5, "fp16");
}

int main(int argc, char** argv) {
  if (argc >= 3 && !strcmp(argv[1], "--target")) g_target = argv[2];
  if (!kiln_target_find(g_target)) {
    printf("SKIP: the %s target is not built\n", g_target);
    return 0;
  }
  if (!bm_tmpdir("gpu_gemm_epi", g_dir, sizeof g_dir)) return 1;
  RUN(test_bias_gelu);
  RUN(test_bias);
  RUN(test_gemm_relu);
  RUN(test_residual);
  RUN(test_clip);
  RUN(test_big_relu);
  RUN(test_swiglu);
  RUN(test_batched);
  bm_rmtree(g_dir);
  return kiln_test_finish();
}
