/* Template grids past the device's work-group counts (issue 23): the GPU
 * targets' GEMM, conv, Winograd, depthwise, pool and int8 templates on
 * grids a Vulkan device cannot launch in one dimension, against the
 * reference executor.
 *
 *   test_gpu_template_grids [--target cpu|opencl|vulkan] [--real | --refuse]
 *
 * Small cases, each with more work-groups in some dimension than
 * KILN_VULKAN_FEATURES=groups=32 leaves a Vulkan device (the ctest entry
 * sets it): 1x1 convs with bias + Relu (150 position tiles in x) and
 * without (1,560, past 32 x 32: folded into three dimensions), a Gemm with
 * bias (97 row tiles in y), a depthwise 3x3 conv (48 planes in y), a 3x3
 * stride-1 conv on two images that Vulkan runs as Winograd (tiles in x,
 * images in z), a 3x3 MaxPool and a 1x1 QLinearConv; the Vulkan target
 * folds each into a grid of at most 32 a dimension, guarded where the
 * count is not the physical grid's (the lines printed name the grids, as
 * the tiles the device's defaults chose give them). With --real, grids
 * past the 65,535 every Vulkan device has: a 1x1 conv over 1x2x4096x2100
 * (67,200 tiles of 128 positions, lavapipe's 1x1 tiles) and a MatMul of
 * 2,097,157 x 4 by 4 x 8
 * (65,537 row tiles of 32). On cpu and opencl the same graphs run as they
 * are (OpenCL's global sizes are size_t). Float cases within 1e-4 of the reference (relative
 * past 1), the int8 and pool ones exact. On vulkan every case checks that
 * the program holds the template it is about (its shader's text) and that
 * every launch fits the device. --refuse: what still cannot launch is
 * refused naming the node and the numbers (refusal_case). */
#include <math.h>

#include "target_graph_util.h"

static uint64_t rng = 1;
static float rndf(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((rng >> 40) % 2001) / 1000.0f - 1.0f;
}

static kiln_array_t rand_f32(int rank, const int64_t* dims) {
  kiln_array_t a = arr(KILN_DTYPE_F32, rank, dims);
  float* p = a.data;
  for (int64_t i = 0; p && i < kiln_array_numel(&a); ++i) p[i] = rndf();
  return a;
}

static bool add_const(kiln_graph_t* g, const char* name, kiln_array_t a) {
  const bool ok = a.data && CHECK_OK(kiln_graph_add_initializer(g, name, &a, NULL));
  kiln_array_free(al(), &a);
  return ok;
}

/* On vulkan: the program of |g| holds the shader whose text has |marker|
 * (the template was chosen, so its grid is the one this test is about). */
static void check_template(const kiln_graph_t* g, const char* what, const char* marker) {
  if (strcmp(g_target_name, "vulkan")) return;
  kiln_plan_options_t po = {g_target->lowering, 2, g_device ? g_device->info.loop_limit : 0, 0, 0, 0};
  kiln_plan_t* plan = NULL;
  kiln_program_t* prog = NULL;
  kiln_template_set_t templates;
  kiln_program_templates(g_target, &templates);
  if (CHECK_OK(kiln_plan_build(g, &po, al(), &plan)) && CHECK_OK(kiln_plan_fuse(plan, NULL, NULL)) &&
      CHECK_OK(kiln_template_choose(plan, &templates))) {
    for (int j = 0; j < 3; ++j) plan->max_groups[j] = g_device->info.max_groups[j];
    CHECK_OK(kiln_program_build(plan, g_target, NULL, al(), &prog));
  }
  const char* text = prog && prog->code.text ? prog->code.text : "";
  CHECK_MSG(strstr(text, marker) != NULL, "vulkan: %s did not take its template ('%s')", what, marker);
  /* a grid past the device's counts is folded, and the launch fits */
  for (int32_t k = 0; prog && k < prog->n_kernels; ++k)
    for (int j = 0; j < 3; ++j)
      CHECK_MSG((uint64_t)prog->kernels[k].groups[j] <= g_device->info.max_groups[j],
                "vulkan: %s: kernel '%s' launches %lld work-groups in dimension %d (device: %llu)", what,
                prog->kernels[k].name, (long long)prog->kernels[k].groups[j], j,
                (unsigned long long)g_device->info.max_groups[j]);
  const char* fold = strstr(text, "// kiln grid ");
  const char* eol = fold ? strchr(fold, '\n') : NULL;
  printf("%s %s: %.*s%s\n", g_target_name, what, eol ? (int)(eol - fold - 8) : 13, eol ? fold + 8 : "grid as it is",
         strstr(text, "KILN_WG_GUARD if") ? ", guarded" : "");
  kiln_program_destroy(prog);
  kiln_plan_destroy(plan);
}

/* Output y of |g| against the reference on |feed|: exact, or within 1e-4
 * (relative past 1). Frees the graph and the feed. */
static void finish(kiln_graph_t* g, bool ok, const char* what, const char* marker, kiln_array_t* feed, bool exact) {
  ok = ok && CHECK_OK(kiln_graph_add_output(g, "y")) && CHECK_OK(kiln_graph_prepare(g)) &&
       CHECK_OK(kiln_graph_optimize(g, 1, NULL));
  if (ok) check_template(g, what, marker);
  kiln_module_t* m = ok ? compile(g) : NULL;
  kiln_session_t* s = session(m);
  CHECK_MSG(s != NULL, "%s: %s did not compile", g_target_name, what);
  kiln_array_t want, got;
  memset(&want, 0, sizeof want);
  memset(&got, 0, sizeof got);
  if (s && CHECK_OK(kiln_ref_run(g, feed, NULL, &want)) && CHECK_OK(kiln_session_run(s, feed, &got))) {
    CHECK_MSG(got.dtype == want.dtype && got.nbytes == want.nbytes, "%s: %s: output of another type or size",
              g_target_name, what);
    if (got.nbytes == want.nbytes && exact) {
      CHECK_MSG(!memcmp(got.data, want.data, want.nbytes), "%s: %s differs from the reference", g_target_name, what);
    } else if (got.nbytes == want.nbytes && got.dtype == KILN_DTYPE_F32) {
      const float *w = want.data, *y = got.data;
      const int64_t n = (int64_t)(want.nbytes / 4);
      int64_t worst = 0;
      double err = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double e = fabs((double)y[i] - w[i]) / (1.0 + fabs((double)w[i]));
        if (!(e <= err)) err = e, worst = i; /* NaN counts as worst */
      }
      CHECK_MSG(err <= 1e-4, "%s: %s: error %.3g at %lld (%.9g, reference %.9g)", g_target_name, what, err,
                (long long)worst, y[worst], w[worst]);
    }
  }
  kiln_array_free(al(), &want);
  kiln_array_free(al(), &got);
  kiln_session_destroy(s);
  kiln_module_release(m);
  kiln_array_free(al(), feed);
  kiln_graph_destroy(g);
}

/* x [n, c, h, w] -> Conv (m channels, k x k, stride 1, pad k / 2, |dw|:
 * one group a channel) + bias [-> Relu] -> y */
static void conv_case(const char* what, const char* marker, int64_t n, int64_t c, int64_t h, int64_t w, int64_t m,
                      int64_t k, bool dw, bool relu) {
  rng = 7;
  kiln_graph_t* g = graph_new();
  const int64_t xd[4] = {n, c, h, w}, wd[4] = {m, dw ? 1 : c, k, k};
  const int64_t pads[4] = {k / 2, k / 2, k / 2, k / 2}, ks[2] = {k, k};
  kiln_attr_t attrs[3] = {kiln_attr_make_ints("kernel_shape", 2, ks), kiln_attr_make_ints("pads", 4, pads),
                          kiln_attr_make_int("group", dw ? c : 1)};
  bool ok = g && input(g, "x", KILN_DTYPE_F32, 4, xd) && add_const(g, "w", rand_f32(4, wd)) &&
            add_const(g, "b", rand_f32(1, &m)) &&
            node1(g, "Conv", "conv", 3, (const char*[]){"x", "w", "b"}, relu ? "h" : "y", 3, attrs) &&
            (!relu || node1(g, "Relu", "relu", 1, (const char*[]){"h"}, "y", 0, NULL));
  kiln_array_t x = rand_f32(4, xd);
  finish(g, ok && x.data, what, marker, &x, false);
}

/* x [m, k] -> Gemm by a constant [k, n] + bias [n] (or MatMul) -> y */
static void gemm_case(const char* what, int64_t m, int64_t k, int64_t n, bool bias) {
  rng = 11;
  kiln_graph_t* g = graph_new();
  const int64_t xd[2] = {m, k}, bd[2] = {k, n};
  bool ok = g && input(g, "x", KILN_DTYPE_F32, 2, xd) && add_const(g, "b", rand_f32(2, bd)) &&
            (!bias || add_const(g, "c", rand_f32(1, &n))) &&
            node1(g, bias ? "Gemm" : "MatMul", "gemm", bias ? 3 : 2, (const char*[]){"x", "b", "c"}, "y", 0, NULL);
  kiln_array_t x = rand_f32(2, xd);
  finish(g, ok && x.data, what, "kiln tiled SGEMM", &x, false);
}

/* x [1, c, h, w] -> MaxPool 3x3 stride 2 pad 1 -> y (exact) */
static void pool_case(const char* what, int64_t c, int64_t h, int64_t w) {
  rng = 13;
  kiln_graph_t* g = graph_new();
  const int64_t xd[4] = {1, c, h, w}, ks[2] = {3, 3}, st[2] = {2, 2}, pads[4] = {1, 1, 1, 1};
  kiln_attr_t attrs[3] = {kiln_attr_make_ints("kernel_shape", 2, ks), kiln_attr_make_ints("strides", 2, st),
                          kiln_attr_make_ints("pads", 4, pads)};
  bool ok = g && input(g, "x", KILN_DTYPE_F32, 4, xd) &&
            node1(g, "MaxPool", "pool", 1, (const char*[]){"x"}, "y", 3, attrs);
  kiln_array_t x = rand_f32(4, xd);
  finish(g, ok && x.data, what, "kiln 2-D window pool", &x, true);
}

/* x u8 [1, c, h, w] -> 1x1 QLinearConv (i8 weights, per-tensor, i32 bias)
 * to m u8 channels -> y (exact) */
static void q8_case(const char* what, int64_t c, int64_t h, int64_t w, int64_t m) {
  rng = 17;
  kiln_graph_t* g = graph_new();
  if (g) CHECK_OK(kiln_graph_set_opset(g, "", 21));
  const int64_t xd[4] = {1, c, h, w}, wd[4] = {m, c, 1, 1};
  kiln_array_t x = arr(KILN_DTYPE_U8, 4, xd), wq = arr(KILN_DTYPE_I8, 4, wd), b = arr(KILN_DTYPE_I32, 1, &m);
  for (int64_t i = 0; x.data && i < kiln_array_numel(&x); ++i) ((uint8_t*)x.data)[i] = (uint8_t)(rng = rng * 69069 + 1) >> 3;
  for (int64_t i = 0; wq.data && i < kiln_array_numel(&wq); ++i) ((int8_t*)wq.data)[i] = (int8_t)(rndf() * 127);
  for (int64_t i = 0; b.data && i < m; ++i) ((int32_t*)b.data)[i] = (int32_t)(rndf() * 2000);
  kiln_array_t sc[3], zp[3];
  const float scales[3] = {0.02f, 0.005f, 0.25f};
  const kiln_dtype_t zt[3] = {KILN_DTYPE_U8, KILN_DTYPE_I8, KILN_DTYPE_U8};
  const uint8_t zv[3] = {120, 0, 10};
  for (int i = 0; i < 3; ++i) {
    sc[i] = arr(KILN_DTYPE_F32, 0, NULL);
    zp[i] = arr(zt[i], 0, NULL);
    if (sc[i].data) *(float*)sc[i].data = scales[i];
    if (zp[i].data) *(uint8_t*)zp[i].data = zv[i];
  }
  bool ok = g && input(g, "x", KILN_DTYPE_U8, 4, xd) && add_const(g, "xs", sc[0]) && add_const(g, "xz", zp[0]) &&
            add_const(g, "w", wq) && add_const(g, "ws", sc[1]) && add_const(g, "wz", zp[1]) &&
            add_const(g, "ys", sc[2]) && add_const(g, "yz", zp[2]) && add_const(g, "b", b) &&
            node1(g, "QLinearConv", "qconv", 9, (const char*[]){"x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"}, "y",
                  0, NULL);
  finish(g, ok && x.data, what, "kiln int8", &x, true);
}

/* --refuse: launches the device cannot take, refused naming the node and
 * the numbers. Vulkan under KILN_VULKAN_FEATURES=groups=32: a 1x1 conv
 * over 4096x1100 (35,200 tiles, past 32^3) does not fold, refused by the
 * compile. OpenCL under KILN_OPENCL_FEATURES=items=4: a Relu's
 * work-groups of 256 work-items, refused when the session makes the
 * executable. */
static void refusal_case(void) {
  const bool vk = !strcmp(g_target_name, "vulkan");
  if (vk ? g_device->info.max_groups[0] > 32 : !getenv("KILN_OPENCL_FEATURES")) {
    CHECK_MSG(false, "%s --refuse: the device's limits are not lowered (KILN_%s_FEATURES)", g_target_name,
              vk ? "VULKAN_FEATURES=groups=32" : "OPENCL_FEATURES=items=4");
    return;
  }
  kiln_graph_t* g = graph_new();
  const int64_t xd[4] = {1, 4, 4096, 1100}, wd[4] = {4, 4, 1, 1};
  kiln_attr_t ks = kiln_attr_make_ints("kernel_shape", 2, (const int64_t[]){1, 1});
  /* (OpenCL: the conv template leaves its work-group size to the driver;
   * the printed Relu has work-groups of 256) */
  const char* node = vk ? "big_conv" : "big_relu";
  bool ok = g && input(g, "x", KILN_DTYPE_F32, 4, xd) &&
            (vk ? add_const(g, "w", rand_f32(4, wd)) && node1(g, "Conv", node, 2, (const char*[]){"x", "w"}, "y", 1, &ks)
                : node1(g, "Relu", node, 1, (const char*[]){"x"}, "y", 0, NULL)) &&
            CHECK_OK(kiln_graph_add_output(g, "y")) && CHECK_OK(kiln_graph_prepare(g));
  kiln_plan_options_t po = {g_target->lowering, 2, g_device->info.loop_limit, 0, 0, 0};
  kiln_plan_t* plan = NULL;
  kiln_program_t* prog = NULL;
  kiln_module_t* m = NULL;
  kiln_session_t* ses = NULL;
  kiln_template_set_t templates;
  kiln_program_templates(g_target, &templates);
  kiln_status_t st = NULL;
  if (ok && CHECK_OK(kiln_plan_build(g, &po, al(), &plan)) && CHECK_OK(kiln_template_choose(plan, &templates))) {
    for (int j = 0; j < 3; ++j) plan->max_groups[j] = g_device->info.max_groups[j];
    st = kiln_program_build(plan, g_target, NULL, al(), &prog);
    kiln_session_options_t so;
    kiln_session_options_default(&so);
    so.slots = 1;
    if (!st && CHECK_OK(kiln_module_wrap(prog, &m))) st = kiln_session_create(m, g_device, &so, &ses);
    const char* msg = st ? kiln_status_message(st) : "";
    char quoted[32];
    snprintf(quoted, sizeof quoted, "node '%s'", node);
    CHECK_MSG(st && strstr(msg, quoted), "%s: the refusal does not name the node: %s", g_target_name,
              st ? msg : "compiled and loaded");
    printf("%s refused: %s\n", g_target_name, msg);
    CHECK_ERR(st, KILN_UNSUPPORTED, vk ? "x 1 x 1 work-groups; the device allows 32 x 32 x 32"
                                       : "work-items in dimension 0; device");
  }
  kiln_session_destroy(ses);
  kiln_module_release(m);
  kiln_plan_destroy(plan);
  kiln_graph_destroy(g);
}

int main(int argc, char** argv) {
  bool real = false, refuse = false;
  if (argc > 1 && !strcmp(argv[argc - 1], "--real")) real = true, --argc;
  if (argc > 1 && !strcmp(argv[argc - 1], "--refuse")) refuse = true, --argc;
  int rc = target_open(argc, argv);
  if (rc) return rc;
  if (refuse) {
    refusal_case();
  } else if (real) {
    conv_case("conv 1x1 2 -> 2 over 4096x2100", "kiln implicit-GEMM convolution", 1, 2, 4096, 2100, 2, 1, false,
              false);
    gemm_case("matmul 2097157x4 by 4x8", 2097157, 4, 8, false);
  } else {
    conv_case("conv 1x1 8 -> 8 over 96x200 + relu", "kiln implicit-GEMM convolution", 1, 8, 96, 200, 8, 1, false,
              true);
    conv_case("conv 1x1 4 -> 4 over 384x520", "kiln implicit-GEMM convolution", 1, 4, 384, 520, 4, 1, false, false);
    gemm_case("gemm 1547x8 by 8x40 + bias", 1547, 8, 40, true);
    conv_case("depthwise 3x3 48 channels 40x40", "kiln depthwise", 1, 48, 40, 40, 48, 3, true, false);
    conv_case("conv 3x3 16 -> 16 over 2x96x96", "kiln Winograd", 2, 16, 96, 96, 16, 3, false, true);
    pool_case("maxpool 3x3/2 32 channels 64x64", 32, 64, 64);
    q8_case("qlinearconv 1x1 8 -> 8 over 160x200", 8, 160, 200, 8);
  }
  kiln_device_release(g_device);
  return kiln_test_finish();
}
