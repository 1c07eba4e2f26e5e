/* The fast kernels of a range program (lowering/plan_seq_kern.h): an
 * encoder block whose widths are partly off the register tile (d 40,
 * a 32-wide column tile and an 8-wide piece; FFN 64: whole tiles over a
 * constant B laid out in panels), compiled ONCE for
 * seq=3..72 and run at EVERY length of the range against the reference
 * executor, so that every row-tile height (1..14 on AVX-512, 1..6 on AVX2),
 * the attention's row tiles over both heads (the head loop moved inside),
 * every split of a run-time column count into full tiles and pieces, and
 * every rest of a lane reduction and of a split vector loop runs; the
 * compile report says which rewrites were made, and none was refused by
 * the verifier. */
#include "bad_model_util.h" /* first: it defines _GNU_SOURCE */

#include <math.h>
#include <string.h>

#include "api/model_dims.h"
#include "compiler/ref_exec.h"
#include "frontend/onnx.h"
#include "kiln/compiler.h"
#include "kiln/runtime.h"
#include "testing.h"

enum { D = 40, F = 64, LO = 3, HI = 72 };

static char g_dir[512];
static char g_model[700];

static kiln_allocator_t al(void) { return kiln_allocator_system(); }

static uint32_t g_seed = 12345u;

static float rnd(float scale) {
  g_seed = g_seed * 1664525u + 1013904223u;
  return scale * ((float)((g_seed >> 8) & 0xffff) / 32768.0f - 1.0f);
}

static void weight(bm_model_t* b, const char* name, int rank, const int64_t* dims, float scale) {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  float* v = bm_alloc(b, sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; ++i) v[i] = rnd(scale);
  bm_initializer(b, name, BM_F32, rank, dims, v, sizeof(float) * (size_t)n);
}

/* X [1,seq,D] -> Y = Relu(LN(attention(X) + X) W1 + b1) W2, the attention
 * softmax(Q K^T / 4) V in two heads */
static void write_model(void) {
  bm_model_t b;
  bm_init(&b, 17);
  const char* params[3] = {NULL, "seq", NULL};
  int64_t xd[3] = {1, 0, D};
  b.g.input[b.g.n_input++] = bm_value(&b, "X", BM_F32, 3, xd, params);
  const int64_t wd[2] = {D, D}, w1[2] = {D, F}, w2[2] = {F, D}, d1 = D, f1 = F, one = 1;
  weight(&b, "Wq", 2, wd, 0.3f);
  weight(&b, "Wk", 2, wd, 0.3f);
  weight(&b, "Wv", 2, wd, 0.3f);
  weight(&b, "W1", 2, w1, 0.3f);
  weight(&b, "b1", 1, &f1, 0.1f);
  weight(&b, "W2", 2, w2, 0.3f);
  weight(&b, "gamma", 1, &d1, 1.0f);
  weight(&b, "beta", 1, &d1, 0.5f);
  float* sc = bm_alloc(&b, sizeof(float));
  *sc = 0.25f;
  bm_initializer(&b, "scale", BM_F32, 1, &one, sc, sizeof(float));
  /* two heads of 20: the attention GEMMs batched over the heads */
  const int64_t four = 4, three = 3;
  bm_init_i64(&b, "heads_shape", 1, &four, (const int64_t[]){1, -1, 2, D / 2});
  bm_init_i64(&b, "flat_shape", 1, &three, (const int64_t[]){1, -1, D});
  bm_node(&b, "MatMul", "q", "X,Wq", "Q0");
  bm_node(&b, "MatMul", "k", "X,Wk", "K0");
  bm_node(&b, "MatMul", "v", "X,Wv", "V0");
  bm_node(&b, "Reshape", "qh", "Q0,heads_shape", "Q1");
  bm_node(&b, "Reshape", "kh", "K0,heads_shape", "K1");
  bm_node(&b, "Reshape", "vh", "V0,heads_shape", "V1");
  Onnx__NodeProto* tq = bm_node(&b, "Transpose", "qt", "Q1", "Q");
  bm_attr_ints(&b, tq, "perm", 4, (const int64_t[]){0, 2, 1, 3});
  Onnx__NodeProto* kt = bm_node(&b, "Transpose", "kt", "K1", "Kt");
  bm_attr_ints(&b, kt, "perm", 4, (const int64_t[]){0, 2, 3, 1});
  Onnx__NodeProto* tv = bm_node(&b, "Transpose", "vt", "V1", "V");
  bm_attr_ints(&b, tv, "perm", 4, (const int64_t[]){0, 2, 1, 3});
  bm_node(&b, "MatMul", "scores", "Q,Kt", "S");
  bm_node(&b, "Mul", "scaled", "S,scale", "S2");
  Onnx__NodeProto* sm = bm_node(&b, "Softmax", "softmax", "S2", "P");
  bm_attr_int(&b, sm, "axis", -1);
  bm_node(&b, "MatMul", "mix", "P,V", "H0");
  Onnx__NodeProto* th = bm_node(&b, "Transpose", "ht", "H0", "H1");
  bm_attr_ints(&b, th, "perm", 4, (const int64_t[]){0, 2, 1, 3});
  bm_node(&b, "Reshape", "hflat", "H1,flat_shape", "H");
  bm_node(&b, "Add", "residual", "H,X", "R");
  Onnx__NodeProto* ln = bm_node(&b, "LayerNormalization", "ln", "R,gamma,beta", "L");
  bm_attr_int(&b, ln, "axis", -1);
  bm_node(&b, "MatMul", "ff1", "L,W1", "F1");
  bm_node(&b, "Add", "ff1_bias", "F1,b1", "F2");
  bm_node(&b, "Relu", "relu", "F2", "F3");
  bm_node(&b, "MatMul", "ff2", "F3,W2", "Y");
  bm_output(&b, "Y");
  snprintf(g_model, sizeof g_model, "%s/enc.onnx", g_dir);
  CHECK(bm_write(&b, g_model));
  bm_free(&b);
}

/* Compiles the model for the CPU with |dim| into malloc'd module bytes;
 * the compile report's "plan" lines go to |plan| (joined). */
static kiln_status_t compile(const char* dim, uint8_t** out, size_t* out_len, char* plan, size_t plan_cap) {
  kiln_compiler_t* c = NULL;
  kiln_status_t s = kiln_compiler_create(KILN_COMPILER_ABI_VERSION, &c);
  if (!s) s = kiln_compiler_load_model(c, g_model);
  if (!s) s = kiln_compiler_set_option(c, "threads", "2");
  if (!s) s = kiln_compiler_set_option(c, "target", "cpu");
  if (!s) s = kiln_compiler_set_option(c, "dim", dim);
  if (!s) s = kiln_compiler_compile(c);
  plan[0] = 0;
  for (int32_t i = 0; !s && i < kiln_compiler_report_count(c); ++i) {
    const kiln_compile_report_entry_t* e = kiln_compiler_report_at(c, i);
    if (e && e->text && !strcmp(e->section, "plan")) {
      strncat(plan, e->text, plan_cap - strlen(plan) - 2);
      strcat(plan, "\n");
    }
  }
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

static kiln_array_t filled(int64_t seq) {
  kiln_array_t a;
  memset(&a, 0, sizeof a);
  kiln_shape_t s = kiln_shape_make(3, (const int64_t[]){1, seq, D});
  if (!CHECK_OK(kiln_array_alloc(al(), KILN_DTYPE_F32, &s, &a))) return a;
  float* f = a.data;
  for (size_t i = 0; i < a.nbytes / 4; ++i) f[i] = rnd(1.0f);
  return a;
}

/* The session at |seq| against the reference executor; the worst error. */
static double check_run(kiln_session_t* s, int64_t seq) {
  kiln_graph_t* g = NULL;
  char q[64];
  snprintf(q, sizeof q, "seq=%lld", (long long)seq);
  kiln_array_t x = filled(seq), want, got;
  memset(&want, 0, sizeof want);
  memset(&got, 0, sizeof got);
  double worst = INFINITY;
  if (CHECK_OK(kiln_onnx_parse_model(g_model, NULL, al(), &g)) && CHECK_OK(kiln_model_bind_dim(g, q)) &&
      CHECK_OK(kiln_graph_prepare(g)) && CHECK_OK(kiln_ref_run(g, &x, NULL, &want)) &&
      CHECK_OK(kiln_session_run(s, &x, &got)) && got.nbytes == want.nbytes) {
    worst = 0;
    for (size_t i = 0; i < want.nbytes / 4; ++i) {
      const float w = ((float*)want.data)[i], v = ((float*)got.data)[i];
      worst = fmax(worst, fabs(v - w) / (1.0 + fabs(w)));
    }
  }
  kiln_graph_destroy(g);
  kiln_array_free(al(), &x);
  kiln_array_free(al(), &want);
  kiln_array_free(al(), &got);
  return worst;
}

static void test_every_length(void) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  char plan[2048], dim[64];
  snprintf(dim, sizeof dim, "seq=%d..%d", LO, HI);
  if (!CHECK_OK(compile(dim, &bytes, &len, plan, sizeof plan)) || !bytes) return;
  /* q, k, v, scores, mix, ff1, ff2: every GEMM tiled; the softmax's max
   * and sum and the LayerNorm's mean and variance in lanes */
  CHECK_MSG(strstr(plan, ": 7 GEMMs in ") != NULL, "plan report: %s", plan);
  CHECK_MSG(strstr(plan, "(1 constant Bs in tile panels)") != NULL, "plan report: %s", plan); /* ff1's W1 */
  CHECK_MSG(strstr(plan, " 4 lane reductions") != NULL, "plan report: %s", plan);
  CHECK_MSG(strstr(plan, "keep their plain loops") == NULL, "plan report: %s", plan);
  kiln_module_t* m = NULL;
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_device_open_options_t o = {0, true, NULL};
  if (CHECK_OK(kiln_module_load_memory(bytes, len, "enc.kiln", al(), &m)) &&
      CHECK_OK(kiln_device_open("cpu", &o, al(), &d)) && CHECK_OK(kiln_session_create(m, d, NULL, &s))) {
    for (int64_t seq = LO; seq <= HI; ++seq) {
      const double worst = check_run(s, seq);
      CHECK_MSG(worst < 1e-4, "seq %lld: max relative error %g", (long long)seq, worst);
    }
  }
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
  free(bytes);
}

int main(void) {
  if (!bm_tmpdir("dyn_seq_kern", g_dir, sizeof g_dir)) return 1;
  write_model();
  RUN(test_every_length);
  bm_rmtree(g_dir);
  return kiln_test_finish();
}
