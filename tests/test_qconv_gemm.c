/* QLinearConv with constant weights through Conv's GEMM lowering
 * (nn_conv_quantized, lowering/lower_nn_conv.c): every path of that
 * lowering (implicit GEMM with and without the crop, the transposed
 * orientation of tiny outputs, the im2col of many stride classes, groups,
 * 1x1) with u8 and i8 activations, per-tensor and per-channel weights,
 * with and without the i32 bias, on seeded random integers, compiled for
 * the target against the reference executor bit for bit. On the CPU the
 * implicit-GEMM paths are the int8 GEMM (i16 channel pairs, i32 sums,
 * dot2_i16); the im2col one sums the integer products in f32 (exact below
 * 2^24). Weights fed at run time take the plain
 * loop lowering and must agree too. QLinearMatMul with a constant B takes
 * the int8 GEMM as well (odd K, batched A, per-column B parameters, one row).
 * ConvInteger and MatMulInteger with constant weights take it too, their
 * i32 sums stored as they are (test_integer).
 * The GEMM path is the CPU target's; on --target opencl|vulkan the same
 * cases check the int8 templates (kernels/opencl/q8.cl,
 * kernels/vulkan/q8.comp), which must be chosen for every case (the code
 * is searched for them), plus u8 weights, dilation and a y type other
 * than x's; twice: compiled for a device with the 4x8-bit dot product
 * (vulkan: OpSDotKHR, which lavapipe has; opencl: q8.cl's work-item
 * kernel, dot() where the compiler has it, PoCL does not), then for one
 * without it (vulkan: plain int sums, every third conv case; opencl: the
 * row-vector conv kernel).
 *
 *   test_qconv_gemm [--target cpu|opencl|vulkan] */
#include "target_graph_util.h"

static uint64_t rng = 1;
/* every case, or every third (vulkan's second pass: lavapipe compiles each
 * shader for seconds) */
static size_t g_case_stride = 1;
static int32_t rnd(int32_t lo, int32_t hi) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (int32_t)((rng >> 33) % (uint64_t)(hi - lo + 1));
}

typedef struct qcv_s {
  const char* what;
  int64_t C, M, H, W, k, s, p, group;
  bool u8;        /* u8 activations (else i8) */
  bool per_chan;  /* one weight scale and zero point per output channel */
  bool bias;
  bool const_w;   /* weights as initializers (the GEMM path) */
  bool sym;       /* weight zero points 0 (the int8 GEMM stores such weights one byte each) */
  bool w_u8;      /* u8 weights (else i8) */
  int64_t dil;    /* dilation (0: 1) */
  bool y_other;   /* y of the other 8-bit type than x */
} qcv_t;

/* Array of dtype |t| filled with random integers in [lo, hi]. */
static kiln_array_t rand_arr(kiln_dtype_t t, int rank, const int64_t* dims, int32_t lo, int32_t hi) {
  kiln_array_t a = arr(t, rank, dims);
  for (int64_t e = 0; a.data && e < kiln_array_numel(&a); ++e)
    kiln_store_f64(t, a.data, (size_t)e, rnd(lo, hi));
  return a;
}

static void add_const(kiln_graph_t* g, const char* name, kiln_array_t* a) {
  CHECK_OK(kiln_graph_add_initializer(g, name, a, NULL));
}

/* On a GPU target: the program of |g| holds the int8 template, and on
 * vulkan its packed dot product exactly when the compile may use it
 * (QLinearConv / QLinearMatMul: MatMulInteger and ConvInteger have none). */
static void check_template(const kiln_graph_t* g, const char* what) {
  if (g_target->lowering != KILN_TARGET_CLASS_GPU) return;
  bool qlinear = false;
  for (int32_t i = 0; i < g->n_nodes; ++i) qlinear |= !strncmp(g->nodes[i].op_type, "QLinear", 7);
  if (!qlinear) return;
  kiln_plan_options_t po = {g_target->lowering, 2, g_device ? g_device->info.loop_limit : 0, 0, 0, g_target->ew_lanes};
  kiln_plan_t* plan = NULL;
  kiln_program_t* prog = NULL;
  kiln_template_set_t templates;
  kiln_program_templates(g_target, &templates);
  templates.gpu_lacks = g_gpu_lacks;
  if (CHECK_OK(kiln_plan_build(g, &po, al(), &plan)) && CHECK_OK(kiln_plan_fuse(plan, NULL, NULL)) &&
      CHECK_OK(kiln_template_choose(plan, &templates)))
    CHECK_OK(kiln_program_build(plan, g_target, NULL, al(), &prog));
  const char* text = prog && prog->code.text ? prog->code.text : "";
  CHECK_MSG(strstr(text, "kiln int8") != NULL, "%s: %s did not take the int8 template", g_target_name, what);
  if (!strcmp(g_target_name, "vulkan")) {
    const bool dot = strstr(text, "spirv_instruction") != NULL, want = !(g_gpu_lacks & KILN_GPU_LACKS_IDOT);
    CHECK_MSG(dot == want, "vulkan: %s: dot product %s, expected %s", what, dot ? "used" : "not used",
              want ? "used" : "not");
  }
  kiln_program_destroy(prog);
  kiln_plan_destroy(plan);
}

/* Output y, compile for the target, compare with the reference on |feed|
 * (naming the case when they differ); frees the feed and the graph. */
static void finish_case(kiln_graph_t* g, bool ok, const char* what, kiln_array_t* feed, int n_feed) {
  ok = ok && CHECK_OK(kiln_graph_add_output(g, "y")) && CHECK_OK(kiln_graph_prepare(g));
  if (ok) check_template(g, what);
  kiln_module_t* m = ok ? compile(g) : NULL;
  kiln_session_t* s = session(m);
  CHECK_MSG(s != NULL, "%s: %s did not compile", g_target_name, what);
  if (s) {
    const int before = kiln_test_failures;
    both_agree(g, s, feed);
    if (kiln_test_failures != before) fprintf(stderr, "  (case %s)\n", what);
  }
  kiln_session_destroy(s);
  kiln_module_release(m);
  free_arrays(feed, n_feed);
  kiln_graph_destroy(g);
}

static void run_case(const qcv_t* c) {
  kiln_graph_t* g = graph_new();
  if (!g) return;
  CHECK_OK(kiln_graph_set_opset(g, "", 21));
  rng = 1234;
  const kiln_dtype_t xt = c->u8 ? KILN_DTYPE_U8 : KILN_DTYPE_I8;
  const kiln_dtype_t wt = c->w_u8 ? KILN_DTYPE_U8 : KILN_DTYPE_I8;
  const bool yu8 = c->u8 != c->y_other;
  const kiln_dtype_t yt = yu8 ? KILN_DTYPE_U8 : KILN_DTYPE_I8;
  const int32_t xlo = c->u8 ? 0 : -128, xhi = c->u8 ? 255 : 127;
  const int64_t xd[4] = {1, c->C, c->H, c->W}, wd[4] = {c->M, c->C / c->group, c->k, c->k};
  const int64_t nch = c->per_chan ? c->M : 1;
  input(g, "x", xt, 4, xd);
  kiln_array_t x = rand_arr(xt, 4, xd, xlo, xhi);
  kiln_array_t w = rand_arr(wt, 4, wd, c->w_u8 ? 0 : -127, c->w_u8 ? 255 : 127);
  /* scales keep |acc * mult| near the output range so most values land
   * inside it and rounding is exercised, not only saturation */
  const float sx = 0.02f, sy = 0.5f;
  kiln_array_t a[8];
  a[0] = arr(KILN_DTYPE_F32, 0, NULL), *(float*)a[0].data = sx;
  a[1] = rand_arr(xt, 0, NULL, c->u8 ? 100 : -20, c->u8 ? 140 : 20);
  a[2] = arr(KILN_DTYPE_F32, nch > 1 ? 1 : 0, &nch);
  for (int64_t i = 0; i < nch; ++i) ((float*)a[2].data)[i] = 0.004f + 0.001f * (float)rnd(0, 8);
  a[3] = rand_arr(wt, nch > 1 ? 1 : 0, &nch, c->w_u8 ? 125 : c->sym ? 0 : -3, c->w_u8 ? 131 : c->sym ? 0 : 3);
  a[4] = arr(KILN_DTYPE_F32, 0, NULL), *(float*)a[4].data = sy;
  a[5] = rand_arr(yt, 0, NULL, yu8 ? 0 : -10, yu8 ? 20 : 10);
  a[6] = rand_arr(KILN_DTYPE_I32, 1, &c->M, -20000, 20000);
  const char* names[9] = {"x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"};
  kiln_array_t* consts[8] = {&a[0], &a[1], &w, &a[2], &a[3], &a[4], &a[5], &a[6]};
  kiln_array_t feed[2] = {x, {0}};
  int n_feed = 1;
  for (int i = 0; i < 8; ++i) {
    if (i == 2 && !c->const_w) {
      input(g, "w", wt, 4, wd);
      feed[n_feed++] = w;
      continue;
    }
    add_const(g, names[i + 1], consts[i]);
  }
  const int64_t pads[4] = {c->p, c->p, c->p, c->p}, strides[2] = {c->s, c->s};
  const int64_t dil[2] = {c->dil ? c->dil : 1, c->dil ? c->dil : 1};
  const kiln_attr_t at[4] = {kiln_attr_make_ints("pads", 4, pads), kiln_attr_make_ints("strides", 2, strides),
                             kiln_attr_make_int("group", c->group), kiln_attr_make_ints("dilations", 2, dil)};
  bool ok = node1(g, "QLinearConv", c->what, c->bias ? 9 : 8, names, "y", 4, at);
  finish_case(g, ok, c->what, feed, n_feed);
}

static void test_paths(void) {
  static const qcv_t cases[] = {
      /* what          C   M   H   W  k  s  p  g  u8     pc     bias   const  sym    w_u8  dil y_other */
      {"pad3x3",       8, 16, 10, 10, 3, 1, 1, 1, true, true, true, true, false, false, 1, false},
      {"stride2",      6, 12, 11, 9, 3, 2, 1, 1, false, false, true, true, false, false, 1, false},
      {"tiny_trans",  16, 40, 4, 4, 3, 2, 1, 1, true, true, true, true, false, false, 1, false},
      {"pointwise",   16, 24, 7, 7, 1, 1, 0, 1, false, true, false, true, false, false, 1, false},
      {"grouped",      8, 12, 6, 6, 3, 1, 1, 4, true, true, true, true, false, false, 1, false},
      {"patchify",     3, 8, 18, 18, 9, 9, 0, 1, true, false, true, true, false, false, 1, false},
      {"runtime_w",    8, 16, 10, 10, 3, 1, 1, 1, true, true, true, false, false, false, 1, false},
      /* the int8 GEMM's channel pairs: an odd channel count (its last
       * pair half empty), per group too, M and N remainders, a deep K */
      {"odd_c",        5, 13, 9, 7, 3, 1, 1, 1, true, true, true, true, false, false, 1, false},
      {"odd_grouped",  9, 6, 6, 6, 3, 1, 1, 3, false, true, true, true, false, false, 1, false},
      {"odd_trans",    7, 40, 3, 3, 3, 1, 1, 1, false, false, false, true, false, false, 1, false},
      {"deep",        96, 20, 6, 6, 3, 1, 1, 1, true, true, true, true, false, false, 1, false},
      {"stem7x7",      3, 16, 20, 20, 7, 2, 3, 1, true, true, true, true, false, false, 1, false},
      /* symmetric weights: int8 storage, widened where the GEMM reads them */
      {"sym_pad3x3",   8, 16, 10, 10, 3, 1, 1, 1, true, true, true, true, true, false, 1, false},
      {"sym_odd_c",    5, 13, 9, 7, 3, 1, 1, 1, false, true, true, true, true, false, 1, false},
      {"sym_trans",   16, 40, 4, 4, 3, 2, 1, 1, true, true, true, true, true, false, 1, false},
      {"sym_grouped",  9, 6, 6, 6, 3, 1, 1, 3, true, false, true, true, true, false, 1, false},
      {"sym_deep",    96, 20, 6, 6, 3, 1, 1, 1, false, true, true, true, true, false, 1, false},
      /* depthwise (one input channel per group): on the CPU the direct kernel
       * with exact f32 sums (stride 1 rows as vectors of widened u8/i8 loads
       * and narrowed stores), channel multiplier 2, stride 2 */
      {"depthwise",   12, 12, 9, 11, 3, 1, 1, 12, true, true, true, true, false, false, 1, false},
      {"dw_i8_wide",   8, 8, 6, 30, 3, 1, 1, 8, false, true, true, true, false, false, 1, false},
      {"dw_stride2",  10, 10, 9, 9, 3, 2, 1, 10, false, false, true, true, false, false, 1, false},
      {"dw_mult2",     6, 12, 8, 8, 5, 1, 2, 6, true, true, false, true, true, false, 1, false},
      /* u8 weights (zero points near 128), dilation, y of the other type */
      {"u8_weights",   7, 10, 9, 8, 3, 1, 1, 1, false, true, true, true, false, true, 1, false},
      {"dilated",      6, 9, 12, 11, 3, 1, 2, 1, true, false, true, true, false, false, 2, false},
      {"y_other",      5, 6, 7, 7, 3, 2, 1, 1, true, true, false, true, false, true, 1, true},
      {"i8_to_u8",     4, 8, 6, 6, 1, 1, 0, 2, false, false, true, true, true, false, 1, true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i += g_case_stride) run_case(&cases[i]);
}

/* QLinearMatMul with a constant 2-D B: the int8 GEMM too (A's rows read as
 * i16 pairs, B packed; one byte per element when b - b_zp fits int8). */
typedef struct qmm_case_s {
  const char* what;
  int64_t batch, M, K, N;
  bool u8, per_col, sym;
  bool w_u8; /* u8 B (else i8) */
} qmm_case_t;

static void run_mm(const qmm_case_t* c) {
  kiln_graph_t* g = graph_new();
  if (!g) return;
  CHECK_OK(kiln_graph_set_opset(g, "", 21));
  rng = 99;
  const kiln_dtype_t at = c->u8 ? KILN_DTYPE_U8 : KILN_DTYPE_I8;
  const int64_t ad3[3] = {c->batch, c->M, c->K}, bd[2] = {c->K, c->N};
  const int64_t* ad = c->batch > 1 ? ad3 : ad3 + 1;
  const int arank = c->batch > 1 ? 3 : 2;
  const int64_t nb = c->per_col ? c->N : 1;
  input(g, "a", at, arank, ad);
  kiln_array_t a = rand_arr(at, arank, ad, c->u8 ? 0 : -128, c->u8 ? 255 : 127);
  const kiln_dtype_t bt = c->w_u8 ? KILN_DTYPE_U8 : KILN_DTYPE_I8;
  kiln_array_t b = rand_arr(bt, 2, bd, c->w_u8 ? 0 : -127, c->w_u8 ? 255 : 127);
  kiln_array_t k[7];
  k[0] = arr(KILN_DTYPE_F32, 0, NULL), *(float*)k[0].data = 0.02f;
  k[1] = rand_arr(at, 0, NULL, c->u8 ? 100 : -20, c->u8 ? 140 : 20);
  k[2] = arr(KILN_DTYPE_F32, nb > 1 ? 1 : 0, &nb);
  for (int64_t i = 0; i < nb; ++i) ((float*)k[2].data)[i] = 0.004f + 0.001f * (float)rnd(0, 8);
  k[3] = rand_arr(bt, nb > 1 ? 1 : 0, &nb, c->w_u8 ? 120 : c->sym ? 0 : -3, c->w_u8 ? 136 : c->sym ? 0 : 3);
  k[4] = arr(KILN_DTYPE_F32, 0, NULL), *(float*)k[4].data = 0.5f;
  k[5] = rand_arr(at, 0, NULL, c->u8 ? 0 : -10, c->u8 ? 20 : 10);
  const char* names[8] = {"a", "as", "az", "b", "bs", "bz", "ys", "yz"};
  kiln_array_t* consts[7] = {&k[0], &k[1], &b, &k[2], &k[3], &k[4], &k[5]};
  for (int i = 0; i < 7; ++i) add_const(g, names[i + 1], consts[i]);
  bool ok = node1(g, "QLinearMatMul", c->what, 8, names, "y", 0, NULL);
  kiln_array_t feed[1] = {a};
  finish_case(g, ok, c->what, feed, 1);
}

static void test_matmul(void) {
  static const qmm_case_t cases[] = {
      /* what       batch  M   K   N   u8     per_col sym */
      {"mm_even",      1, 13, 64, 40, true,  true,  false, false},
      {"mm_odd_k",     1,  7, 33, 19, false, false, false, false},
      {"mm_batched",   3,  5, 18, 24, true,  true,  true, false},
      {"mm_row",       1,  1, 512, 100, true, true, true, false},
      {"mm_u8_b",      2,  3, 10, 6, true, true, false, true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) run_mm(&cases[i]);
}

/* ConvInteger and MatMulInteger with constant weights: the same int8 GEMM,
 * the i32 sums stored as they are (exact, also past 2^24: a deep K of
 * 255 * 127 products); zero points absent, per tensor, or per output
 * channel / column. The patchify case takes the im2col path, whose f32 sums
 * the lowering allows only while no sum can reach 2^24. */
typedef struct int_case_s {
  const char* what;
  bool conv;
  int64_t C, M, H, k, s, p, group; /* conv; matmul: M rows, C = K, H = N */
  bool u8, zps;                     /* x/a dtype; zero points present */
} int_case_t;

static void run_integer(const int_case_t* c) {
  kiln_graph_t* g = graph_new();
  if (!g) return;
  CHECK_OK(kiln_graph_set_opset(g, "", 21));
  rng = 777;
  const kiln_dtype_t xt = c->u8 ? KILN_DTYPE_U8 : KILN_DTYPE_I8;
  const int32_t xlo = c->u8 ? 0 : -128, xhi = c->u8 ? 255 : 127;
  const int64_t xd[4] = {1, c->C, c->H, c->H}, wd[4] = {c->M, c->C / c->group, c->k, c->k};
  const int64_t ad[2] = {c->M, c->C}, bd[2] = {c->C, c->H};
  const int64_t nz = c->conv ? c->M : c->H;
  input(g, "x", xt, c->conv ? 4 : 2, c->conv ? xd : ad);
  kiln_array_t x = rand_arr(xt, c->conv ? 4 : 2, c->conv ? xd : ad, xlo, xhi);
  kiln_array_t w = rand_arr(KILN_DTYPE_I8, c->conv ? 4 : 2, c->conv ? wd : bd, -127, 127);
  add_const(g, "w", &w);
  const char* names[4] = {"x", "w", "xz", "wz"};
  if (c->zps) {
    kiln_array_t xz = rand_arr(xt, 0, NULL, c->u8 ? 100 : -20, c->u8 ? 140 : 20);
    kiln_array_t wz = rand_arr(KILN_DTYPE_I8, 1, &nz, -3, 3);
    add_const(g, "xz", &xz);
    add_const(g, "wz", &wz);
  }
  const int64_t pads[4] = {c->p, c->p, c->p, c->p}, strides[2] = {c->s, c->s};
  const kiln_attr_t at[3] = {kiln_attr_make_ints("pads", 4, pads),
                             kiln_attr_make_ints("strides", 2, strides),
                             kiln_attr_make_int("group", c->group)};
  bool ok = node1(g, c->conv ? "ConvInteger" : "MatMulInteger", c->what, c->zps ? 4 : 2, names, "y",
                  c->conv ? 3 : 0, at);
  kiln_array_t feed[1] = {x};
  finish_case(g, ok, c->what, feed, 1);
}

static void test_integer(void) {
  static const int_case_t cases[] = {
      /* what          conv   C   M   H  k  s  p  g  u8     zps */
      {"ci_pad3x3",    true,  8, 16, 10, 3, 1, 1, 1, true,  true},
      {"ci_no_zp",     true,  6, 12, 9,  3, 2, 1, 1, false, false},
      {"ci_depthwise", true, 12, 12, 9,  3, 1, 1, 12, true, true},
      {"ci_patchify",  true,  3, 8, 18,  9, 9, 0, 1, true,  true},
      {"ci_deep",      true, 600, 8, 3,  3, 1, 1, 1, true,  false},
      {"mi_even",      false, 64, 13, 40, 0, 0, 0, 1, true, true},
      {"mi_odd_k",     false, 33, 7, 19, 0, 0, 0, 1, false, false},
      {"mi_deep",      false, 1030, 2, 24, 0, 0, 0, 1, true, false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) run_integer(&cases[i]);
}

int main(int argc, char** argv) {
  int rc = target_open(argc, argv);
  if (rc) return rc;
  RUN(test_paths);
  RUN(test_matmul);
  RUN(test_integer);
  if (g_target->lowering == KILN_TARGET_CLASS_GPU) { /* again for a device without the dot product */
    g_gpu_lacks = KILN_GPU_LACKS_IDOT;
    g_case_stride = strcmp(g_target_name, "vulkan") ? 1 : 3;
    RUN(test_paths);
    RUN(test_matmul);
  }
  kiln_device_release(g_device);
  return kiln_test_finish();
}
