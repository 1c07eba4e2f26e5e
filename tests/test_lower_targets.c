/* Shapes the compiled targets once refused or ran badly (issue 20), on one
 * target per process, each graph at -O0 and -O1 against the reference:
 *
 *   test_lower_targets [--target cpu|opencl|vulkan]   (default cpu)
 *
 * Graphs are built in code and compiled as `kiln run` does (graph passes and
 * fusion at -O1 only, templates, program, module, session on the device
 * opened strictly: a missing GPU fails the test, never passes it):
 *   - patchify and other many-phase convs (kernel 16 stride 16 on 224x224:
 *     256 stride residue classes; with padding, dilation, groups, 1-D, 3-D,
 *     run-time weights, a fused Relu), and few-phase strided convs beside
 *     them;
 *   - MatMul with a B shared by all batches ([197,1,768] x [768,2304], run-
 *     time B, B with batch dims of 1), and on the CPU the structure of the
 *     lowered kernel: one GEMM over the 197 stacked rows, no loop over the
 *     197 batches;
 *   - Identity nodes on a shared initializer (two feeding MatMuls, one a
 *     graph output): buffers that alias a constant;
 *   - a MatMul whose weight columns are all equal ([1,2048] x [2048,1000]:
 *     31 tiles of 32 columns and an 8-column edge on the CPU): every column
 *     of the output bit for bit the same (VGG-19 on the onnx runner's
 *     weights: its edge tile once summed with other roundings, and Softmax
 *     turned 1,000 equal logits into 8 of 0.125).
 * Tolerance: |got - want| <= 1e-4 |want| + 2e-5 max(1, max |want|).
 */
#include <math.h>

#include "ir/tir_visit.h"
#include "target_graph_util.h"

/* Uniform in [-1, 1), one fixed sequence per process. */
static float rnd(void) {
  static uint64_t s = 0x9E3779B97F4A7C15ull;
  s = s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((s >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

static kiln_array_t rand_arr(int rank, const int64_t* dims, float scale) {
  kiln_array_t a = arr(KILN_DTYPE_F32, rank, dims);
  for (size_t i = 0; a.data && i < a.nbytes / sizeof(float); ++i) ((float*)a.data)[i] = scale * rnd();
  return a;
}

/* A graph under construction: the inputs come with random feeds. */
typedef struct gb_s {
  kiln_graph_t* g;
  bool ok;
  kiln_array_t feeds[2];
  int n_feeds;
} gb_t;

static void gb_init(gb_t* b) {
  memset(b, 0, sizeof *b);
  b->ok = CHECK_OK(kiln_graph_create(al(), &b->g)) && CHECK_OK(kiln_graph_set_opset(b->g, "", 17));
}

static void gb_free(gb_t* b) {
  for (int i = 0; i < b->n_feeds; ++i) kiln_array_free(al(), &b->feeds[i]);
  kiln_graph_destroy(b->g);
}

static void gb_input(gb_t* b, const char* name, int rank, const int64_t* dims) {
  if (!b->ok || b->n_feeds == 2) return;
  kiln_shape_t s = kiln_shape_make(rank, dims);
  b->feeds[b->n_feeds++] = rand_arr(rank, dims, 1.0f);
  b->ok = CHECK_OK(kiln_graph_add_input(b->g, name, KILN_DTYPE_F32, &s, NULL));
}

/* A random initializer (values in [-scale, scale)). */
static void gb_const(gb_t* b, const char* name, int rank, const int64_t* dims, float scale) {
  if (!b->ok) return;
  kiln_array_t a = rand_arr(rank, dims, scale);
  kiln_array_t v;
  memset(&v, 0, sizeof v);
  kiln_shape_t s = kiln_shape_make(rank, dims);
  /* the graph takes memory from its own allocator */
  b->ok = a.data && CHECK_OK(kiln_array_alloc(b->g->allocator, KILN_DTYPE_F32, &s, &v));
  if (b->ok) memcpy(v.data, a.data, a.nbytes);
  kiln_array_free(al(), &a);
  b->ok = b->ok && CHECK_OK(kiln_graph_add_initializer(b->g, name, &v, NULL));
}

static void gb_node(gb_t* b, const char* op, int n_in, const char* const* in, const char* out, int n_attrs,
                    const kiln_attr_t* attrs) {
  if (!b->ok) return;
  b->ok = CHECK_OK(kiln_graph_add_node(b->g, op, out, n_in, in, 1, (const char*[]){out}, n_attrs, attrs, NULL));
}

static bool close_enough(const kiln_array_t* got, const kiln_array_t* want, const char* what) {
  if (got->dtype != want->dtype || got->nbytes != want->nbytes || !got->data) {
    kiln_test_fail(__FILE__, __LINE__, "%s: output of another dtype or size", what);
    return false;
  }
  const float* g = got->data;
  const float* w = want->data;
  const size_t n = want->nbytes / sizeof(float);
  double scale = 1.0, worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < n; ++i) scale = fmax(scale, fabs(w[i]));
  for (size_t i = 0; i < n; ++i) {
    double r = fabs((double)g[i] - w[i]) / (1e-4 * fabs(w[i]) + 2e-5 * scale);
    if (!(r <= worst)) worst = r, at = i; /* NaN counts as worst */
  }
  CHECK_MSG(worst <= 1.0, "%s (%s): element %zu is %g, reference %g (%.2fx the tolerance)", what, g_target_name, at,
            (double)g[at], (double)w[at], worst);
  return worst <= 1.0;
}

/* Prepares |b|'s graph, then at -O0 and -O1 compiles it for the target
 * and checks every output against the reference interpreter. */
static void check_graph(gb_t* b, const char* what) {
  if (!b->ok || !CHECK_OK(kiln_graph_prepare(b->g))) return;
  const int n_out = b->g->n_outputs;
  kiln_array_t want[4], got[4];
  memset(want, 0, sizeof want);
  if (n_out > 4 || !CHECK_OK(kiln_ref_run(b->g, b->feeds, NULL, want))) return;
  for (int opt = 0; opt <= 1; ++opt) {
    if (opt == 1 && !CHECK_OK(kiln_graph_optimize(b->g, 1, NULL))) break;
    kiln_module_t* m = compile_fused(b->g, opt >= 1);
    kiln_session_t* s = session(m);
    memset(got, 0, sizeof got);
    if (s && CHECK_OK(kiln_session_run(s, b->feeds, got))) {
      for (int i = 0; i < n_out; ++i) {
        char name[128];
        snprintf(name, sizeof name, "%s -O%d output %d", what, opt, i);
        close_enough(&got[i], &want[i], name);
      }
    } else {
      kiln_test_fail(__FILE__, __LINE__, "%s -O%d did not run on %s", what, opt, g_target_name);
    }
    free_arrays(got, n_out);
    kiln_session_destroy(s);
    kiln_module_release(m);
  }
  free_arrays(want, n_out);
}

/* ---- Conv -------------------------------------------------------------- */

typedef struct conv_case_s {
  const char* what;
  int nsp;
  int64_t n, c, m, group;
  int64_t in[3], k[3], s[3], d[3], pads[6];
  bool bias, relu, runtime_w;
} conv_case_t;

static void conv_case(const conv_case_t* cc) {
  gb_t b;
  gb_init(&b);
  const int r = cc->nsp + 2;
  int64_t xd[5] = {cc->n, cc->c}, wd[5] = {cc->m, cc->c / cc->group};
  for (int i = 0; i < cc->nsp; ++i) xd[2 + i] = cc->in[i], wd[2 + i] = cc->k[i];
  gb_input(&b, "x", r, xd);
  if (cc->runtime_w) {
    gb_input(&b, "w", r, wd);
  } else {
    gb_const(&b, "w", r, wd, 0.1f);
  }
  if (cc->bias) gb_const(&b, "bias", 1, (int64_t[]){cc->m}, 1.0f);
  kiln_attr_t at[5] = {
      kiln_attr_make_ints("kernel_shape", cc->nsp, cc->k), kiln_attr_make_ints("strides", cc->nsp, cc->s),
      kiln_attr_make_ints("dilations", cc->nsp, cc->d), kiln_attr_make_ints("pads", 2 * cc->nsp, cc->pads),
      kiln_attr_make_int("group", cc->group)};
  gb_node(&b, "Conv", cc->bias ? 3 : 2, (const char*[]){"x", "w", "bias"}, cc->relu ? "c" : "y", 5, at);
  if (cc->relu) gb_node(&b, "Relu", 1, (const char*[]){"c"}, "y", 0, NULL);
  b.ok = b.ok && CHECK_OK(kiln_graph_add_output(b.g, "y"));
  check_graph(&b, cc->what);
  gb_free(&b);
}

/* Window of a 2-D conv: kernel kn, stride st, dilation dl, pads (top,
 * left, bottom, right). */
#define WIN2(kn, st, dl, ...) .k = {kn, kn}, .s = {st, st}, .d = {dl, dl}, .pads = {__VA_ARGS__}

/* ViT-B/16's patch embedding with 64 output channels. */
static void test_conv_patch16(void) {
  conv_case(&(conv_case_t){.what = "patch16", .nsp = 2, .n = 1, .c = 3, .m = 64, .group = 1, .in = {224, 224},
                           WIN2(16, 16, 1, 0), .bias = true});
}

/* Kernel 4 stride 4 (16 classes: the implicit GEMM) and kernel 7 stride 5
 * with padding (25 classes), batch 2. */
static void test_conv_few_phases(void) {
  conv_case(&(conv_case_t){.what = "patch4", .nsp = 2, .n = 2, .c = 3, .m = 32, .group = 1, .in = {32, 32},
                           WIN2(4, 4, 1, 0), .bias = true});
  conv_case(&(conv_case_t){.what = "k7s5pad", .nsp = 2, .n = 1, .c = 3, .m = 16, .group = 1, .in = {40, 40},
                           WIN2(7, 5, 1, 3, 2, 3, 2), .bias = true});
}

/* Past 64 classes with padding (taps reading zeros on every side), with
 * dilation, a fused Relu, groups, run-time weights, 1-D and 3-D. */
static void test_conv_many_phases(void) {
  conv_case(&(conv_case_t){.what = "k9s9pad_relu", .nsp = 2, .n = 2, .c = 4, .m = 24, .group = 1, .in = {50, 50},
                           WIN2(9, 9, 1, 2, 1, 3, 2), .bias = true, .relu = true});
  conv_case(&(conv_case_t){.what = "k10s9d2pad", .nsp = 2, .n = 1, .c = 3, .m = 20, .group = 1, .in = {61, 61},
                           WIN2(10, 9, 2, 3, 3, 1, 2)});
  conv_case(&(conv_case_t){.what = "k9s9g2", .nsp = 2, .n = 2, .c = 4, .m = 16, .group = 2, .in = {36, 36},
                           WIN2(9, 9, 1, 0), .bias = true, .relu = true});
  conv_case(&(conv_case_t){.what = "patch16_runtime_w", .nsp = 2, .n = 1, .c = 3, .m = 8, .group = 1,
                           .in = {64, 48}, WIN2(16, 16, 1, 0), .runtime_w = true});
  conv_case(&(conv_case_t){.what = "k100s100_1d", .nsp = 1, .n = 2, .c = 2, .m = 8, .group = 1, .in = {1000},
                           .k = {100}, .s = {100}, .d = {1}, .bias = true});
  conv_case(&(conv_case_t){.what = "patch_3d", .nsp = 3, .n = 1, .c = 3, .m = 6, .group = 1, .in = {4, 32, 32},
                           .k = {2, 8, 8}, .s = {2, 8, 8}, .d = {1, 1, 1}});
}

/* ---- MatMul with a shared B ---------------------------------------------- */

static bool on_loop(tir_visitor_t* v, const tir_stmt_t* s) {
  if (s->kind == TIR_FOR && s->u.loop.extent == 197) *(int*)v->user += 1;
  return true;
}

/* On the CPU the MatMul's kernel has no loop over the 197 batches (one
 * GEMM over the stacked rows, not 197 vector products). */
static void check_one_gemm(kiln_graph_t* g) {
  kiln_plan_options_t po = {g_target->lowering, 2, 0, 0, 0, g_target->ew_lanes};
  kiln_plan_t* plan = NULL;
  if (!CHECK_OK(kiln_plan_build(g, &po, al(), &plan))) return;
  int found = 0, batch_loops = 0;
  for (int32_t k = 0; k < plan->n_kernels; ++k) {
    const kiln_plan_kernel_t* kk = &plan->kernels[k];
    if (kk->node < 0 || strcmp(g->nodes[kk->node].op_type, "MatMul")) continue;
    ++found;
    tir_visitor_t v = {.user = &batch_loops, .stmt_pre = on_loop};
    tir_visit_stmt(&v, kk->func->body);
  }
  CHECK_MSG(found > 0, "no MatMul kernel in the plan");
  CHECK_MSG(batch_loops == 0, "the MatMul kernel has %d loops over the 197 batches", batch_loops);
  kiln_plan_destroy(plan);
}

static void test_matmul_shared_b(void) {
  gb_t b;
  gb_init(&b);
  gb_input(&b, "x", 3, (int64_t[]){197, 1, 768});
  gb_const(&b, "w", 2, (int64_t[]){768, 2304}, 0.05f);
  gb_const(&b, "bias", 1, (int64_t[]){2304}, 1.0f);
  gb_node(&b, "MatMul", 2, (const char*[]){"x", "w"}, "t", 0, NULL);
  gb_node(&b, "Add", 2, (const char*[]){"t", "bias"}, "y", 0, NULL);
  b.ok = b.ok && CHECK_OK(kiln_graph_add_output(b.g, "y"));
  if (b.ok && !strcmp(g_target_name, "cpu") && CHECK_OK(kiln_graph_prepare(b.g))) check_one_gemm(b.g);
  check_graph(&b, "qkv_197x1x768");
  gb_free(&b);
}

/* Run-time B (read in place, or packed by a kernel), B with leading batch
 * dims of 1 (a higher-rank output). */
static void matmul_runtime(const char* what, int ra, const int64_t* ad, int rb, const int64_t* bd) {
  gb_t b;
  gb_init(&b);
  gb_input(&b, "x", ra, ad);
  gb_input(&b, "w", rb, bd);
  gb_node(&b, "MatMul", 2, (const char*[]){"x", "w"}, "y", 0, NULL);
  b.ok = b.ok && CHECK_OK(kiln_graph_add_output(b.g, "y"));
  check_graph(&b, what);
  gb_free(&b);
}

static void test_matmul_runtime_b(void) {
  matmul_runtime("2x3x5x16_16x24", 4, (int64_t[]){2, 3, 5, 16}, 2, (int64_t[]){16, 24});
  matmul_runtime("6x20x64_1x64x300", 3, (int64_t[]){6, 20, 64}, 3, (int64_t[]){1, 64, 300});
  matmul_runtime("5x9x33_1x1x33x17", 3, (int64_t[]){5, 9, 33}, 4, (int64_t[]){1, 1, 33, 17});
}

/* ---- Identity on a shared initializer -------------------------------------- */

/* As a BERT export has them: W1 = Identity(W), W2 = Identity(W) feeding
 * MatMuls, and Identity(W) as a graph output. Big enough that no graph pass
 * folds the Identity nodes into new constants, so at -O0 their outputs are
 * buffers aliasing the constant. */
static void test_identity_shared_initializer(void) {
  for (int with_output = 0; with_output <= 1; ++with_output) {
    gb_t b;
    gb_init(&b);
    gb_input(&b, "x", 2, (int64_t[]){4, 256});
    gb_const(&b, "W", 2, (int64_t[]){256, 300}, 0.1f);
    gb_node(&b, "Identity", 1, (const char*[]){"W"}, "W1", 0, NULL);
    gb_node(&b, "Identity", 1, (const char*[]){"W"}, "W2", 0, NULL);
    gb_node(&b, "MatMul", 2, (const char*[]){"x", "W1"}, "a", 0, NULL);
    gb_node(&b, "MatMul", 2, (const char*[]){"x", "W2"}, "c", 0, NULL);
    gb_node(&b, "Add", 2, (const char*[]){"a", "c"}, "y", 0, NULL);
    b.ok = b.ok && CHECK_OK(kiln_graph_add_output(b.g, "y"));
    if (with_output) {
      gb_node(&b, "Identity", 1, (const char*[]){"W"}, "wout", 0, NULL);
      b.ok = b.ok && CHECK_OK(kiln_graph_add_output(b.g, "wout"));
    }
    check_graph(&b, with_output ? "identity_shared_w_and_output" : "identity_shared_w");
    gb_free(&b);
  }
}

/* ---- Equal weight columns ----------------------------------------------- */

static void test_matmul_equal_columns(void) {
  enum { M = 1, K = 2048, N = 1000 };
  gb_t b;
  gb_init(&b);
  gb_input(&b, "x", 2, (int64_t[]){M, K});
  kiln_array_t w;
  memset(&w, 0, sizeof w);
  kiln_shape_t ws = kiln_shape_make(2, (int64_t[]){K, N});
  b.ok = b.ok && CHECK_OK(kiln_array_alloc(b.g->allocator, KILN_DTYPE_F32, &ws, &w));
  for (int k = 0; b.ok && k < K; ++k) {
    const float v = rnd();
    for (int n = 0; n < N; ++n) ((float*)w.data)[(size_t)k * N + n] = v;
  }
  b.ok = b.ok && CHECK_OK(kiln_graph_add_initializer(b.g, "w", &w, NULL));
  gb_node(&b, "MatMul", 2, (const char*[]){"x", "w"}, "y", 0, NULL);
  b.ok = b.ok && CHECK_OK(kiln_graph_add_output(b.g, "y"));
  if (!b.ok || !CHECK_OK(kiln_graph_prepare(b.g))) {
    gb_free(&b);
    return;
  }
  for (int opt = 0; opt <= 1; ++opt) {
    if (opt == 1 && !CHECK_OK(kiln_graph_optimize(b.g, 1, NULL))) break;
    kiln_module_t* m = compile_fused(b.g, opt >= 1);
    kiln_session_t* s = session(m);
    kiln_array_t got;
    memset(&got, 0, sizeof got);
    if (s && CHECK_OK(kiln_session_run(s, b.feeds, &got))) {
      const float* y = got.data;
      CHECK(got.nbytes == sizeof(float) * M * N);
      for (int i = 0; i < M && got.nbytes == sizeof(float) * M * N; ++i) {
        int n = 1;
        while (n < N && !memcmp(&y[i * N + n], &y[i * N], sizeof(float))) ++n;
        CHECK_MSG(n == N, "%s -O%d row %d: column %d is %.9g, column 0 %.9g (equal weight columns)", g_target_name,
                  opt, i, n, n < N ? (double)y[i * N + n] : 0.0, (double)y[i * N]);
      }
    }
    kiln_array_free(al(), &got);
    kiln_session_destroy(s);
    kiln_module_release(m);
  }
  gb_free(&b);
}

int main(int argc, char** argv) {
  int rc = target_open(argc, argv);
  if (rc) return rc;
  RUN(test_conv_patch16);
  RUN(test_conv_few_phases);
  RUN(test_conv_many_phases);
  RUN(test_matmul_shared_b);
  RUN(test_matmul_runtime_b);
  RUN(test_identity_shared_initializer);
  RUN(test_matmul_equal_columns);
  kiln_device_release(g_device);
  return kiln_test_finish();
}
