/* The OpenCL templates under --precision fp16 (fp16 storage, f32 sums; PoCL
 * has no cl_khr_fp16) end to end on device 0: Conv / depthwise Conv /
 * MatMul / Gemm graphs are planned, fused, put through the precision pass
 * (lowering/precision.h: weights, activations and workspaces turn f16;
 * model inputs and outputs stay f32), emitted, run kernel by kernel and
 * compared with the reference executor at the fp16 tolerance (rtol 1e-2,
 * atol 1e-3 x max(1, max |reference|), graph_harness.h).
 *
 * Every graph puts its template kernels between an f16 producer and an f16
 * consumer where it can (x -> Relu -> op -> ... -> op -> output), so the
 * instances read f16 planes, weights, biases and epilogue operands and
 * write f16 outputs, and the last one writes the f32 model output. Feeds and
 * weights hold f16 values exactly (gb_t.f16_exact), so the reference is what
 * fp16 storage should give but for the rounding of activations.
 *
 * Checked per graph: the number of template kernels under fp16 is the
 * number under fp32 (the templates do not fall back to the printed kernels
 * because buffers turned f16) and the expected one; the instances are f16
 * ones (their f16 flags in the source); the outputs are within tolerance
 * with the templates and with every kernel printed.
 *
 * Partial sums between K slices: the "cancelling" cases use weights whose
 * first half of input channels is positive and second half negative, on
 * non-negative inputs, so the partial sums grow to ~K/8 and cancel back to
 * O(sqrt K); rounded to f16 once per slice they put the outputs outside the
 * tolerance. Measured by making the private arrays round through f16 (a
 * one-line change to conv.cl / gemm.cl, not kept): 1x1 K 384 (3 slices,
 * the f16 Y the template keeps private) 1.15x the tolerance, 3x3 K 2304 with
 * all partial sums private 5.1x, MatMul K 512 1.5x -- against 0.36, 0.12
 * and 0.21 with f32 partial sums. Private f32 partial sums are the
 * default; the f32 grid cases with memory_conv_sums check the other path:
 * where the printed GEMM accumulates in memory the precision pass keeps the
 * grid (or Y) f32, which the template may then keep using. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "graph_harness.h"
#include "ir/graph.h"
#include "kiln/runtime.h"
#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "lowering/precision.h"
#include "runtime/opencl/opencl_device.h"
#include "compiler/ref_exec.h"
#include "targets/opencl/opencl_internal.h"
#include "targets/opencl/opencl_target.h"
#include "targets/program_build.h"
#include "testing.h"

static kiln_allocator_t A(void) { return kiln_allocator_system(); }
static kiln_device_t* dev;


static void scalar_const(gb_t* b, const char* name, float v) {
  gb_const_values(b, name, 0, NULL, &v);
}

/* Template kernels, Winograd instances and the emitted source of |plan|
 * built for OpenCL with the templates |to| allows (*out_prog: the
 * program, or NULL on error). */
static void emit(kiln_plan_t* plan, const char* what, const kiln_opencl_template_options_t* to,
                 int32_t* n_templ, int32_t* n_wino, kiln_program_t** out_prog) {
  *out_prog = NULL;
  *n_templ = *n_wino = -1;
  kiln_program_t* prog = NULL;
  kiln_program_build_options_t bo = {.model_name = what, .no_code = true};
  if (!CHECK_OK(choose_opencl_templates(plan, to)) ||
      !CHECK_OK(kiln_program_build(plan, kiln_target_find("opencl"), &bo, A(), &prog)))
    return;
  kiln_opencl_emit_options_t o = {.n_templated = n_templ, .n_winograd = n_wino};
  if (!CHECK_OK(kiln_opencl_emit_ex(plan, prog, &o)) || !CHECK_OK(kiln_program_validate(prog))) {
    kiln_program_destroy(prog);
    return;
  }
  *out_prog = prog;
}

/* What a graph must show under fp16. */
typedef struct expect_s {
  int templated;                /* template kernels */
  int fp16_only;                /* of which the fp32 plan prints (stride-1 depthwise) */
  int wino;                     /* of which Winograd instances */
  const char* has[4];           /* strings the fp16 source must hold (NULL ends) */
  kiln_opencl_template_options_t to; /* switches of the "templates" variant */
  bool also_no_winograd;        /* one more run with Winograd off */
} expect_t;

/* Worst error / tolerance of the template runs, over all graphs. */
static double worst_ratio;

static void check_graph(gb_t* b, const char* what, const expect_t* ex) {
  kiln_array_t want[4];
  memset(want, 0, sizeof want);
  kiln_plan_t *p32 = NULL, *p16 = NULL;
  if (!CHECK_OK(b->st) || !CHECK_OK(kiln_graph_prepare(b->g))) goto done;
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  if (!CHECK_OK(kiln_ref_run(b->g, b->feeds, &ro, want))) goto done;
  kiln_plan_options_t po = {KILN_TARGET_CLASS_GPU, 0, 0, 0, 0, 0};
  if (!CHECK_OK(kiln_plan_build(b->g, &po, A(), &p32)) || !CHECK_OK(kiln_plan_fuse(p32, NULL, NULL))) goto done;
  if (!CHECK_OK(kiln_plan_build(b->g, &po, A(), &p16)) || !CHECK_OK(kiln_plan_fuse(p16, NULL, NULL))) goto done;
  /* what `kiln run --precision fp16` does on a device without fp16 arithmetic */
  kiln_precision_options_t pr = {KILN_PRECISION_FP16, false, false, NULL, false, false};
  kiln_precision_report_t rep;
  if (!CHECK_OK(kiln_plan_set_precision(p16, &pr, &rep))) goto done;
  CHECK_MSG(rep.kernels_fp16 == rep.n_kernels && rep.buffers_converted > 0, "%s: %d of %d kernels fp16", what,
            (int)rep.kernels_fp16, (int)rep.n_kernels);
  kiln_precision_report_free(&rep);
  /* the fp32 count: the same switches, same graph */
  int32_t t32 = -1, w32 = -1;
  kiln_program_t* prog = NULL;
  emit(p32, what, &ex->to, &t32, &w32, &prog);
  kiln_program_destroy(prog);
  static const char* const names[] = {"fp16 templates", "fp16 printed", "fp16 templates, no winograd"};
  for (int variant = 0; variant < (ex->also_no_winograd ? 3 : 2); ++variant) {
    kiln_opencl_template_options_t to = ex->to;
    if (variant == 1) to = (kiln_opencl_template_options_t){.no_gemm_template = true, .no_conv_template = true,
                                                            .no_dw_template = true};
    if (variant == 2) to.no_winograd = true;
    char label[240];
    snprintf(label, sizeof label, "%s (%s)", what, names[variant]);
    int32_t n_templ = -1, n_wino = -1;
    emit(p16, label, &to, &n_templ, &n_wino, &prog);
    if (!prog) break;
    if (variant == 0) {
      CHECK_MSG(n_templ == ex->templated && t32 == ex->templated - ex->fp16_only,
                "%s: %d template kernels under fp16, %d under fp32, expected %d and %d", label, (int)n_templ,
                (int)t32, ex->templated, ex->templated - ex->fp16_only);
      CHECK_MSG(n_wino == ex->wino && w32 == ex->wino, "%s: %d winograd instances under fp16, %d under fp32, expected %d",
                label, (int)n_wino, (int)w32, ex->wino);
      for (int i = 0; i < 4 && ex->has[i]; ++i)
        CHECK_MSG(strstr(prog->code.text, ex->has[i]) != NULL, "%s: no '%s' in the source", label, ex->has[i]);
    } else if (variant == 1) {
      CHECK_MSG(n_templ == 0, "%s: %d template kernels with the templates off", label, (int)n_templ);
    } else {
      CHECK_MSG(n_wino == 0 && n_templ == ex->templated, "%s: %d template kernels, %d winograd", label,
                (int)n_templ, (int)n_wino);
    }
    kiln_array_t got[4];
    memset(got, 0, sizeof got);
    if (CHECK_OK(run_on(dev, prog, b->feeds, got))) {
      bool ok = true;
      double ratio = 0;
      for (int o = 0; o < b->g->n_outputs; ++o) {
        double r = 0;
        ok = close_enough_tol(&got[o], &want[o], 1e-2, 1e-3, label, &r) && ok;
        if (!(r <= ratio)) ratio = r;
      }
      if (variant != 1 && !(ratio <= worst_ratio)) worst_ratio = ratio;
      printf("  %s %s: error %.3f of the tolerance\n", ok ? "ok  " : "FAIL", label, ratio);
    }
    for (int o = 0; o < b->g->n_outputs; ++o) kiln_array_free(A(), &got[o]);
    kiln_program_destroy(prog);
  }
done:
  kiln_plan_destroy(p32);
  kiln_plan_destroy(p16);
  for (int o = 0; o < 4; ++o) kiln_array_free(A(), &want[o]);
  for (int i = 0; i < b->n_feeds; ++i) kiln_array_free(A(), &b->feeds[i]);
  kiln_graph_destroy(b->g);
}

/* ---- implicit-GEMM and Winograd convolutions ----------------------------- */

typedef struct ccase_s {
  const char* what;
  int64_t n, c, m, h, w, k, s;
  int64_t pads[4]; /* top, left, bottom, right */
  bool bias;
  int epi;     /* 0 none, 1 Relu, 2 Clip(0, 0.5), 3 Add(residual) + Relu, 4 Mul(per-channel) + Add */
  bool cancel; /* weights of the first half of the channels > 0, of the second < 0 */
  int64_t m2;  /* output channels of the 1x1 conv after it (its input and output f16 / f32) */
  expect_t ex;
} ccase_t;

/* Conv attributes; the arrays the attributes point to live in |v|. */
typedef struct cattrs_s {
  int64_t pads[4], kernel[2], strides[2];
  kiln_attr_t a[4];
} cattrs_t;

static void conv_attrs(cattrs_t* v, int64_t k, int64_t s, const int64_t* pads, int64_t group) {
  memcpy(v->pads, pads, sizeof v->pads);
  v->kernel[0] = v->kernel[1] = k;
  v->strides[0] = v->strides[1] = s;
  v->a[0] = kiln_attr_make_ints("pads", 4, v->pads);
  v->a[1] = kiln_attr_make_ints("kernel_shape", 2, v->kernel);
  v->a[2] = kiln_attr_make_ints("strides", 2, v->strides);
  v->a[3] = kiln_attr_make_int("group", group);
}

/* Conv(xr, w[, bias]) (k x k, stride s, group) -> the epilogue -> h ->
 * Conv 1x1 to m2 channels -> out, the model output. Epilogues: 1 Relu;
 * 2 Clip(0, clip_hi); 3 an f16 residual, a 1x1 conv of xr (stride 1 convs:
 * the output plane is the input's), added (on the left when residual_left)
 * then Relu; 4 a per-channel Mul and a broadcast Add. */
static void conv_tail(gb_t* b, int64_t c, int64_t m, int64_t k, int64_t s, const int64_t pads[4], int64_t group,
                      bool bias, int epi, float clip_hi, bool residual_left, int64_t m2) {
  if (bias) konst(b, "bias", DIMS(m));
  cattrs_t ca;
  conv_attrs(&ca, k, s, pads, group);
  const char* y = epi ? "y" : "h";
  if (bias) node(b, "Conv", IN("xr", "w", "bias"), y, 4, ca.a);
  else node(b, "Conv", IN("xr", "w"), y, 4, ca.a);
  cattrs_t c1;
  conv_attrs(&c1, 1, 1, (int64_t[]){0, 0, 0, 0}, 1);
  if (epi == 1) {
    node(b, "Relu", IN("y"), "h", 0, NULL);
  } else if (epi == 2) {
    scalar_const(b, "lo", 0.0f);
    scalar_const(b, "hi", clip_hi);
    node(b, "Clip", IN("y", "lo", "hi"), "h", 0, NULL);
  } else if (epi == 3) {
    konst(b, "wr", DIMS(m, c, 1, 1));
    node(b, "Conv", IN("xr", "wr"), "rr", 4, c1.a);
    if (residual_left) node(b, "Add", IN("rr", "y"), "t", 0, NULL);
    else node(b, "Add", IN("y", "rr"), "t", 0, NULL);
    node(b, "Relu", IN("t"), "h", 0, NULL);
  } else if (epi == 4) {
    konst(b, "scale", DIMS(m, 1, 1));
    konst(b, "shift", DIMS(1, m, 1, 1));
    node(b, "Mul", IN("y", "scale"), "t", 0, NULL);
    node(b, "Add", IN("t", "shift"), "h", 0, NULL);
  }
  konst(b, "w2", DIMS(m2, m, 1, 1));
  node(b, "Conv", IN("h", "w2"), "out", 4, c1.a);
  kiln_graph_add_output(b->g, "out");
}

/* x -> Relu -> Conv (k x k, bias, epilogue) -> h -> Conv 1x1 -> out: the
 * first conv reads and writes f16, the second reads f16 and writes the f32
 * model output. */
static void conv_case(const ccase_t* c) {
  gb_t b;
  gb_init(&b);
  b.f16_exact = true;
  input(&b, "x", DIMS(c->n, c->c, c->h, c->w));
  node(&b, "Relu", IN("x"), "xr", 0, NULL);
  const int64_t kk = c->k * c->k, nw = c->m * c->c * kk;
  float* wv = malloc(sizeof(float) * (size_t)nw);
  for (int64_t i = 0; i < nw; ++i) {
    const float r = rnd();
    if (!c->cancel) {
      wv[i] = r;
    } else {
      /* |w| in [0.5, 1), + for the first half of the input channels */
      const int64_t ch = i / kk % c->c;
      wv[i] = (ch < c->c / 2 ? 1.0f : -1.0f) * (0.75f + 0.25f * r);
    }
  }
  gb_const_values(&b, "w", 4, (int64_t[]){c->m, c->c, c->k, c->k}, wv);
  free(wv);
  conv_tail(&b, c->c, c->m, c->k, c->s, c->pads, 1, c->bias, c->epi, 0.5f, true, c->m2);
  check_graph(&b, c->what, &c->ex);
}

#define F16_CONV "#define CW_F16 1\n#define CX_F16 1"

static void test_conv(void) {
  static const ccase_t cases[] = {
      /* what, n, c, m, h, w, k, s, pads, bias, epi, cancel, m2,
       * {templated, fp16_only, wino, has, to, no_wino} */
      {"3x3 s1 p1 bias relu 16 -> 32 14x14", 1, 16, 32, 14, 14, 3, 1, {1, 1, 1, 1}, true, 1, false, 8,
       {2, 0, 1, {"kiln winograd", "#define CY_F16 1", F16_CONV}, {0}, true}},
      {"3x3 s2 p1 odd 15x17 clip", 1, 8, 24, 15, 17, 3, 2, {1, 1, 1, 1}, true, 2, false, 5,
       {2, 0, 0, {"cropped", F16_CONV, "#define CY_F16 1"}, {0}, false}},
      {"5x5 s1 p2 11x13 residual relu", 1, 8, 12, 11, 13, 5, 1, {2, 2, 2, 2}, true, 3, false, 7,
       {3, 0, 0, {"LDH(E", F16_CONV}, {0}, false}},
      {"3x3 mul add per channel 8x8", 1, 8, 20, 8, 8, 3, 1, {1, 1, 1, 1}, true, 4, false, 4,
       {2, 0, 0, {"vload_half((long)(b)", F16_CONV}, {0}, false}},
      {"1x1 s1 16x16 plain (f16 Y, no crop)", 1, 16, 16, 16, 16, 1, 1, {0, 0, 0, 0}, true, 0, false, 3,
       {2, 0, 0, {"private partial sums", F16_CONV, "#define CY_F16 1"}, {0}, false}},
      {"1x1 s2 downsample 14x14", 1, 16, 32, 14, 14, 1, 2, {0, 0, 0, 0}, false, 1, false, 8,
       {2, 0, 0, {F16_CONV}, {0}, false}},
      {"7x7 s2 p3 stem 32x32", 1, 3, 16, 32, 32, 7, 2, {3, 3, 3, 3}, true, 1, false, 8,
       {2, 0, 0, {F16_CONV}, {0}, false}},
      {"3x3 asymmetric pads s2 13x10", 1, 5, 7, 13, 10, 3, 2, {0, 1, 2, 0}, true, 0, false, 3,
       {2, 0, 0, {F16_CONV}, {0}, false}},
      {"3x3 K 576 batch 2 12x12 relu", 2, 64, 72, 12, 12, 3, 1, {1, 1, 1, 1}, true, 1, false, 16,
       {2, 0, 1, {"kiln winograd", F16_CONV}, {0}, true}},
      {"winograd 3x3 odd 15x13 residual", 1, 40, 40, 15, 13, 3, 1, {1, 1, 1, 1}, true, 3, false, 8,
       {3, 0, 1, {"kiln winograd", "LDH(E"}, {0}, true}},
      {"winograd 3x3 p0 11x11 batch 2 (X read as it is)", 2, 128, 24, 11, 11, 3, 1, {0, 0, 0, 0}, false, 0, false,
       8, {2, 0, 1, {"kiln winograd", F16_CONV}, {0}, true}},
      {"winograd 3x3 asymmetric pads 14x13 mul add", 1, 32, 32, 14, 13, 3, 1, {0, 1, 1, 0}, true, 4, false, 8,
       {2, 0, 1, {"kiln winograd", "vload_half((long)(b)"}, {0}, true}},
      {"3x3 512 -> 512 7x7 (K 4608)", 1, 512, 512, 7, 7, 3, 1, {1, 1, 1, 1}, true, 1, false, 16,
       {2, 0, 1, {"kiln winograd", F16_CONV}, {0}, true}},
      /* partial sums over many K slices, cancelling (see the top) */
      {"1x1 K 384 14x14 cancelling, f16 Y (private partial sums, 3 slices)", 1, 384, 64, 14, 14, 1, 1,
       {0, 0, 0, 0}, true, 0, true, 8,
       {2, 0, 0, {"run-time shapes, private partial sums */", F16_CONV, "#define CY_F16 1"}, {0}, false}},
      /* f32 grids may keep the memory path (memory_conv_sums; the default is private sums) */
      {"1x1 K 1024 16x16 cancelling (f32 Y: the precision pass keeps the printed GEMM's accumulator)", 1, 1024,
       64, 16, 16, 1, 1, {0, 0, 0, 0}, true, 0, true, 8,
       {2, 0, 0, {"run-time shapes */", F16_CONV, "#define CY_F16 0\n#define CPSUM 0"}, {.memory_conv_sums = true},
        false}},
      {"1x1 K 1024 7x7 cancelling (f32 grid)", 1, 1024, 64, 7, 7, 1, 1, {0, 0, 0, 0}, true, 0, true, 8,
       {2, 0, 0, {"run-time shapes, cropped */", "__global float* restrict YF", F16_CONV}, {.memory_conv_sums = true},
        false}},
      {"3x3 512 -> 128 7x7 cancelling (K 4608, implicit GEMM)", 1, 512, 128, 7, 7, 3, 1, {1, 1, 1, 1}, true, 1,
       true, 16,
       {2, 0, 0, {"run-time shapes, cropped */", F16_CONV}, {.no_winograd = true, .memory_conv_sums = true}, false}},
      {"3x3 512 -> 128 7x7 cancelling (K 4608), private partial sums", 1, 512, 128, 7, 7, 3, 1, {1, 1, 1, 1}, true,
       1, true, 16, {2, 0, 0, {"run-time shapes, cropped, private partial sums */", F16_CONV}, {.no_winograd = true},
       false}},
      {"3x3 s2 256 -> 64 14x14 cancelling (K 2304)", 1, 256, 64, 14, 14, 3, 2, {1, 1, 1, 1}, false, 1, true, 8,
       {2, 0, 0, {"cropped", F16_CONV}, {0}, false}},
      {"3x3 s1 256 -> 96 14x14 cancelling, private partial sums", 1, 256, 96, 14, 14, 3, 1, {1, 1, 1, 1},
       true, 1, true, 8,
       {2, 0, 0, {"cropped, private partial sums", F16_CONV}, {.no_winograd = true}, false}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) conv_case(&cases[i]);
}

/* ---- depthwise convolutions ---------------------------------------------- */

typedef struct dcase_s {
  const char* what;
  int64_t n, c, mult, h, w, k, s;
  int64_t pads[4];
  bool bias;
  int epi; /* as ccase_t; Clip(0, 6) */
  int templated;
  bool all; /* the template wherever it matches (as under fp32 it is not at stride 1) */
} dcase_t;

/* x -> Relu -> depthwise Conv (+ epilogue) -> h -> Conv 1x1 -> out */
static void dw_case(const dcase_t* c) {
  const int64_t m = c->c * c->mult;
  gb_t b;
  gb_init(&b);
  b.f16_exact = true;
  input(&b, "x", DIMS(c->n, c->c, c->h, c->w));
  node(&b, "Relu", IN("x"), "xr", 0, NULL);
  konst(&b, "w", DIMS(m, 1, c->k, c->k));
  conv_tail(&b, c->c, m, c->k, c->s, c->pads, c->c, c->bias, c->epi, 6.0f, false, 8);
  /* the depthwise instance and the 1x1 convs' */
  const bool s1 = c->templated && c->s == 1 && !c->all; /* the template under fp16 only */
  expect_t ex = {c->templated + (c->epi == 3 ? 2 : 1), s1 ? 1 : 0, 0,
                 {"kiln depthwise template", "#define CX_F16 1\n#define CW_F16 1"}, {0}, false};
  ex.to.all_dw_template = c->all;
  if (!c->templated) ex.has[0] = ex.has[1] = NULL;
  check_graph(&b, c->what, &ex);
}

static void test_depthwise(void) {
  static const dcase_t cases[] = {
      /* what, n, c, mult, h, w, k, s, pads, bias, epi, templated, all */
      {"dw 3x3 s2 p1 clip6 15x13", 1, 12, 1, 15, 13, 3, 2, {1, 1, 1, 1}, true, 2, 1, false},
      {"dw 3x3 s2 p1 56x56 batch 2 relu", 2, 16, 1, 56, 56, 3, 2, {1, 1, 1, 1}, true, 1, 1, false},
      {"dw 3x3 multiplier 2 s2 no bias 11x20", 2, 5, 2, 11, 20, 3, 2, {1, 1, 1, 1}, false, 0, 1, false},
      {"dw 3x3 s2 mul add per channel 17x17", 1, 8, 1, 17, 17, 3, 2, {1, 1, 1, 1}, true, 4, 1, false},
      {"dw 3x3 s1 residual add relu 20x21 (template forced)", 2, 8, 1, 20, 21, 3, 1, {1, 1, 1, 1}, true, 3, 1, true},
      {"dw 5x5 s1 p2 relu 19x37 (template forced)", 1, 8, 1, 19, 37, 5, 1, {2, 2, 2, 2}, true, 1, 1, true},
      /* stride 1: the template too when the input is f16 (opencl_depthwise.c) */
      {"dw 3x3 s1 clip6 14x14", 1, 16, 1, 14, 14, 3, 1, {1, 1, 1, 1}, true, 2, 1, false},
      {"dw 3x3 s1 p1 relu 7x7", 1, 16, 1, 7, 7, 3, 1, {1, 1, 1, 1}, true, 1, 1, false},
      /* 81 taps: the lowering's GEMM path, no template */
      {"dw 9x9 (printed)", 1, 4, 1, 12, 12, 9, 1, {4, 4, 4, 4}, true, 0, 0, false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) dw_case(&cases[i]);
}

/* ---- MatMul / Gemm ----------------------------------------------------------- */

/* x [13, 512] -> Relu -> MatMul W1 [512, 70] -> h (f16; 4 K slices of 128:
 * the template's private partial sums) -> Gemm (transB, bias) -> out f32.
 * (At K 600 the lowering blocks K and the precision pass keeps h f32.) */
static void test_gemm(void) {
  gb_t b;
  gb_init(&b);
  b.f16_exact = true;
  input(&b, "x", DIMS(13, 512));
  node(&b, "Relu", IN("x"), "xr", 0, NULL);
  /* cancelling along K, as the conv cases */
  float* wv = malloc(sizeof(float) * 512 * 70);
  for (int k = 0; k < 512; ++k)
    for (int n = 0; n < 70; ++n) wv[k * 70 + n] = (k < 256 ? 1.0f : -1.0f) * (0.75f + 0.25f * rnd());
  gb_const_values(&b, "w1", 2, (int64_t[]){512, 70}, wv);
  free(wv);
  node(&b, "MatMul", IN("xr", "w1"), "h", 0, NULL);
  konst(&b, "w2", DIMS(33, 70));
  konst(&b, "c2", DIMS(33));
  kiln_attr_t ga[1] = {kiln_attr_make_int("transB", 1)};
  node(&b, "Gemm", IN("h", "w2", "c2"), "out", 1, ga);
  kiln_graph_add_output(b.g, "out");
  expect_t ex = {2, 0, 0, {"#define GA_F16 1\n#define GB_F16 1", "#define GY_F16 1\n#define GPSUM 1", "#define GC_F16 1"},
                 {0}, false};
  check_graph(&b, "MatMul 13x512x70 cancelling -> Gemm transB bias", &ex);
}

/* ---- refused instances ------------------------------------------------------ */

/* The printer refuses partial sums in an f16 buffer or in a grid the
 * instance does not have (the weight layouts' refusals are lowering's:
 * test_opencl_tiles.c). */
static void test_refused(void) {
  kiln_template_conv_t c;
  memset(&c, 0, sizeof c);
  c.M = 8, c.Q = 16, c.K = 8, c.T = 1, c.C = 8, c.plane = 16, c.batch = 1;
  c.pt = 8, c.kbs = 8, c.tiles = 1, c.q1 = 1, c.q2 = 16, c.od = c.oh = 1, c.ow = 16;
  c.n_params = 3;
  memcpy(c.roles, "WXY", 4);
  c.args[0] = 0, c.args[1] = 1, c.args[2] = 2;
  c.f16[0] = c.f16[1] = c.f16[2] = true;
  const kiln_opencl_conv_tiles_t t = kiln_opencl_conv_default_tiles(c.M, c.Q, c.K);
  kiln_cf_out_t out;
  kiln_cf_out_init(&out);
  CHECK(kiln_template_conv_sums_f16(&c));
  CHECK_ERR(kiln_opencl_conv_print(&c, &t, true, false, "k_f16y", &out), KILN_INVALID_ARGUMENT,
            "'k_f16y': partial sums in an f16 buffer");
  CHECK_OK(kiln_opencl_conv_print(&c, &t, true, true, "k_f16y_private", &out));
  CHECK(strstr(out.data, "#define CPSUM 1") && strstr(out.data, "__global half* restrict Y"));
  c.crop = true; /* cropped, matched without the grid */
  CHECK_ERR(kiln_opencl_conv_print(&c, &t, true, false, "k_nogrid", &out), KILN_INVALID_ARGUMENT,
            "'k_nogrid': no grid for the partial sums");
  kiln_cf_out_free(&out);
}

int main(void) {
  if (!(dev = open_opencl_device_0())) return 1;
  RUN(test_refused);
  RUN(test_conv);
  RUN(test_depthwise);
  RUN(test_gemm);
  printf("worst template error: %.3f of the fp16 tolerance\n", worst_ratio);
  kiln_device_release(dev);
  return kiln_test_finish();
}
