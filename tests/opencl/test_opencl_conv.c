/* The OpenCL convolution templates (kernels/opencl/conv.cl, dwconv.cl via
 * targets/opencl/opencl_conv.c) end to end on device 0: small Conv graphs
 * with constant weights, lowered with the GPU schedules, fused, built into
 * an OpenCL program and run kernel by kernel, compared with the reference
 * executor (rtol 1e-4, atol 1e-5 x the largest output) -- strides 1/2, pads (asymmetric too),
 * dilation, 1x1/3x3/5x5/7x7, odd sizes that no tile divides, batches,
 * bias, fused Relu/Clip/residual Add epilogues, depthwise. Each graph also
 * runs with the templates off (every kernel printed), with the partial
 * sums between K slices through the grid instead of a private array
 * (memory_conv_sums; the source's CPSUM is checked), and the number of
 * template instances is checked: grouped convs (groups > 1, not depthwise)
 * must keep the printed kernels. 3x3 stride-1 convs that become Winograd
 * F(2x2, 3x3) instances (kernels/opencl/winograd.cl) run once more with
 * Winograd off, and the number of Winograd instances is checked. */
#include <math.h>
#include <stdint.h>

#include "ir/graph.h"
#include "kiln/runtime.h"
#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "runtime/opencl/opencl_device.h"
#include "compiler/ref_exec.h"
#include "targets/opencl/opencl_internal.h"
#include "targets/opencl/opencl_target.h"
#include "targets/program_build.h"
#include "testing.h"
#include "graph_harness.h"

static kiln_allocator_t A(void) { return kiln_allocator_system(); }
static kiln_device_t* dev;

static kiln_status_t run_on_device(const kiln_program_t* p, const kiln_array_t* feeds,
                                   kiln_array_t* outs) {
  return run_on(dev, p, feeds, outs);
}

/* Plans, fuses, emits, runs and compares |b|'s graph three times
 * (templates on, off, and on reading the lowering's packed weights); with
 * templates on exactly |templated| kernels must be template instances
 * (-1: any). */
static int expect_shared = -1; /* instances printed once for an identical earlier one (-1: any) */
static int expect_min_shared = 0; /* at least this many of them (template variants) */
static const char* expect_text = NULL; /* in the source of every template variant (NULL: any) */
static const char* refuse_text = NULL; /* in none of them (NULL: any) */
/* the output tile, in the source of every variant with a Winograd
 * instance: "F(2x2" or "F(4x4" (NULL: any) */
static const char* wino_tile = NULL;
static int expect_printed_shared = -1; /* printed kernels calling an earlier one of the same text (-1: any) */

/* atol of the comparisons (x the largest output): F(4x4)'s transforms'
 * points +-2 scale the f32 rounding up (1e-4, as the Vulkan F(4x4) tests;
 * a wrong tile or mask is off by the outputs' scale) */
static double check_atol = 1e-5;

static void check_graph(gb_t* b, const char* what, int templated, int wino) {
  if (!CHECK_OK(b->st)) goto done;
  if (!CHECK_OK(kiln_graph_prepare(b->g))) goto done;
  kiln_array_t want[4], got[4];
  memset(want, 0, sizeof want);
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  if (!CHECK_OK(kiln_ref_run(b->g, b->feeds, &ro, want))) goto done;
  kiln_plan_t* plan = NULL;
  kiln_plan_options_t po = {KILN_TARGET_CLASS_GPU, 0, 0, 0, 0, 0};
  if (CHECK_OK(kiln_plan_build(b->g, &po, A(), &plan))) {
    kiln_fusion_report_t rep;
    CHECK_OK(kiln_plan_fuse(plan, &rep, NULL));
    static const char* const variants[] = {"templates", "printed", "templates, packed weights",
                                           "templates, partial sums in memory", "templates, no winograd"};
    /* the last variant only where Winograd replaces an implicit-GEMM instance */
    for (int variant = 0; variant < (wino > 0 ? 5 : 4); ++variant) {
      kiln_program_t* prog = NULL;
      /* without code, then the emitter with this variant's options */
      kiln_program_build_options_t bo = {.model_name = what, .no_code = true};
      const kiln_opencl_template_options_t to = {.no_conv_template = variant == 1, .no_conv_relayout = variant == 2,
                                                 .memory_conv_sums = variant == 3, .no_winograd = variant == 4};
      if (!CHECK_OK(choose_opencl_templates(plan, &to))) break;
      if (!CHECK_OK(kiln_program_build(plan, kiln_target_find("opencl"), &bo, A(), &prog))) break;
      int32_t n_templ = 0, n_shared = 0, n_wino = 0, n_psh = 0;
      kiln_opencl_emit_options_t eo = {
          .n_templated = &n_templ, .n_shared = &n_shared, .n_winograd = &n_wino, .n_shared_printed = &n_psh};
      if (!CHECK_OK(kiln_opencl_emit_ex(plan, prog, &eo)) || !CHECK_OK(kiln_program_validate(prog))) {
        kiln_program_destroy(prog);
        break;
      }
      if (variant != 1 && expect_shared >= 0)
        CHECK_MSG(n_shared == expect_shared, "%s: %d shared instances, expected %d", what, (int)n_shared,
                  expect_shared);
      if (expect_printed_shared >= 0)
        CHECK_MSG(n_psh == expect_printed_shared, "%s (%s): %d shared printed kernels, expected %d", what,
                  variants[variant], (int)n_psh, expect_printed_shared);
      if (variant != 1)
        CHECK_MSG(n_shared >= expect_min_shared, "%s (%s): %d shared instances, expected at least %d", what,
                  variants[variant], (int)n_shared, expect_min_shared);
      if (variant != 1 && expect_text)
        CHECK_MSG(strstr(prog->code.text, expect_text) != NULL, "%s (%s): no '%s' in the source", what,
                  variants[variant], expect_text);
      if (n_wino > 0 && wino_tile) {
        char want_tile[64], other[64];
        snprintf(want_tile, sizeof want_tile, "kiln winograd %s,3x3)", wino_tile);
        snprintf(other, sizeof other, "kiln winograd %s,3x3)", strcmp(wino_tile, "F(4x4") ? "F(4x4" : "F(2x2");
        CHECK_MSG(strstr(prog->code.text, want_tile) && !strstr(prog->code.text, other),
                  "%s (%s): not '%s' alone in the source", what, variants[variant], want_tile);
      }
      if (variant != 1 && refuse_text)
        CHECK_MSG(!strstr(prog->code.text, refuse_text), "%s (%s): '%s' in the source", what, variants[variant],
                  refuse_text);
      if (variant != 1 && templated >= 0)
        CHECK_MSG(n_templ == templated, "%s: %d template kernels, expected %d", what, (int)n_templ, templated);
      if (variant == 1) CHECK_MSG(n_templ == 0, "%s: %d template kernels with the templates off", what, (int)n_templ);
      /* Winograd needs the conv's own weights: not with packed weights, not when it is off
       * (it keeps no partial sums between slices, so memory_conv_sums leaves it) */
      const int want_wino = variant == 0 || variant == 3 ? wino : 0;
      if (want_wino >= 0)
        CHECK_MSG(n_wino == want_wino, "%s (%s): %d winograd instances, expected %d", what, variants[variant],
                  (int)n_wino, want_wino);
      CHECK_MSG((n_wino > 0) == (strstr(prog->code.text, "kiln winograd F(") != NULL),
                "%s (%s): %d winograd instances but the source %s one", what, variants[variant], (int)n_wino,
                n_wino > 0 ? "has no" : "has");
      memset(got, 0, sizeof got);
      char label[200];
      snprintf(label, sizeof label, "%s (%s, %d kernels)", what, variants[variant], (int)prog->n_kernels);
      if (variant != 1 && n_templ > 0) {
        /* the instance's weight layout is the one asked for */
        const char* want_tiled = variant != 2 ? "#define CWTILED 1" : "#define CWTILED 0";
        CHECK_MSG(!strstr(prog->code.text, "#define CWTILED") || strstr(prog->code.text, want_tiled),
                  "%s: no '%s' in the source", label, want_tiled);
        /* f32 grids: partial sums in a private array unless asked for in memory */
        const char* other_psum = variant == 3 ? "#define CPSUM 1" : "#define CPSUM 0";
        CHECK_MSG(!strstr(prog->code.text, other_psum), "%s: '%s' in the source", label, other_psum);
      }
      if (CHECK_OK(run_on_device(prog, b->feeds, got))) {
        bool ok = true;
        for (int o = 0; o < b->g->n_outputs; ++o)
          ok = close_enough_tol(&got[o], &want[o], 1e-4, check_atol, label, NULL) && ok;
        printf("  %s %s\n", ok ? "ok  " : "FAIL", label);
      } else {
        fprintf(stderr, "  case: %s\n", label);
      }
      for (int o = 0; o < b->g->n_outputs; ++o) kiln_array_free(A(), &got[o]);
      kiln_program_destroy(prog);
    }
    kiln_plan_destroy(plan);
  }
  for (int o = 0; o < 4; ++o) kiln_array_free(A(), &want[o]);
done:
  for (int i = 0; i < b->n_feeds; ++i) kiln_array_free(A(), &b->feeds[i]);
  kiln_graph_destroy(b->g);
}


typedef struct ccase_s {
  const char* what;
  int64_t n, c, m, h, w, k, s, d;
  int64_t pads[4]; /* top, left, bottom, right */
  int64_t group;
  bool bias;
  int epi; /* 0 none, 1 Relu, 2 Clip(0, 6), 3 Add(residual) + Relu, 4 Mul(per-channel) + Add,
            * 5 Gelu (no conv template prints it: a kernel of its own after the template),
            * 6 SiLU as exported (Sigmoid, then Mul of y by it: the templates' 'w') */
  int templated;
  int wino; /* Winograd instances expected with the templates on */
} ccase_t;

static void conv_case(const ccase_t* c) {
  gb_t b;
  gb_init(&b);
  input(&b, "x", DIMS(c->n, c->c, c->h, c->w));
  konst(&b, "w", DIMS(c->m, c->c / c->group, c->k, c->k));
  if (c->bias) konst(&b, "bias", DIMS(c->m));
  kiln_attr_t ca[5] = {kiln_attr_make_ints("pads", 4, (int64_t[]){c->pads[0], c->pads[1], c->pads[2], c->pads[3]}),
                       kiln_attr_make_ints("kernel_shape", 2, (int64_t[]){c->k, c->k}),
                       kiln_attr_make_ints("strides", 2, (int64_t[]){c->s, c->s}),
                       kiln_attr_make_ints("dilations", 2, (int64_t[]){c->d, c->d}),
                       kiln_attr_make_int("group", c->group)};
  const char* out = c->epi ? "y" : "out";
  if (c->bias) node(&b, "Conv", IN("x", "w", "bias"), out, 5, ca);
  else node(&b, "Conv", IN("x", "w"), out, 5, ca);
  const int64_t oh = (c->h + c->pads[0] + c->pads[2] - c->d * (c->k - 1) - 1) / c->s + 1;
  const int64_t ow = (c->w + c->pads[1] + c->pads[3] - c->d * (c->k - 1) - 1) / c->s + 1;
  if (c->epi == 1) {
    node(&b, "Relu", IN("y"), "out", 0, NULL);
  } else if (c->epi == 2) {
    kiln_array_t lo, hi;
    kiln_shape_t s0 = kiln_shape_make(0, NULL);
    KILN_ASSERT(!kiln_array_alloc(A(), KILN_DTYPE_F32, &s0, &lo));
    KILN_ASSERT(!kiln_array_alloc(A(), KILN_DTYPE_F32, &s0, &hi));
    *(float*)lo.data = 0.0f;
    *(float*)hi.data = 0.5f;
    if (!b.st) b.st = kiln_graph_add_initializer(b.g, "lo", &lo, NULL);
    if (!b.st) b.st = kiln_graph_add_initializer(b.g, "hi", &hi, NULL);
    node(&b, "Clip", IN("y", "lo", "hi"), "out", 0, NULL);
  } else if (c->epi == 3) {
    input(&b, "res", DIMS(c->n, c->m, oh, ow));
    node(&b, "Add", IN("res", "y"), "t", 0, NULL);
    node(&b, "Relu", IN("t"), "out", 0, NULL);
  } else if (c->epi == 4) {
    konst(&b, "scale", DIMS(c->m, 1, 1));
    konst(&b, "shift", DIMS(1, c->m, 1, 1));
    node(&b, "Mul", IN("y", "scale"), "t", 0, NULL);
    node(&b, "Add", IN("t", "shift"), "out", 0, NULL);
  } else if (c->epi == 5) {
    node(&b, "Gelu", IN("y"), "out", 0, NULL);
  } else if (c->epi == 6) {
    node(&b, "Sigmoid", IN("y"), "sg", 0, NULL);
    node(&b, "Mul", IN("y", "sg"), "out", 0, NULL);
  }
  kiln_graph_add_output(b.g, "out");
  check_graph(&b, c->what, c->templated, c->wino);
}

static void test_conv_shapes(void) {
  setenv("KILN_OPENCL_WINOGRAD", "f2", 1); /* F(2x2)'s edges; F(4x4) in test_winograd4 */
  static const ccase_t cases[] = {
      /* what, n, c, m, h, w, k, s, d, pads, group, bias, epi, templated, wino */
      {"3x3 s1 p1 bias relu", 1, 16, 32, 14, 14, 3, 1, 1, {1, 1, 1, 1}, 1, true, 1, 1, 1},
      {"3x3 s2 p1 odd 15x17", 1, 8, 24, 15, 17, 3, 2, 1, {1, 1, 1, 1}, 1, false, 0, 1, 0},
      {"3x3 s1 p0 no crop needed", 1, 8, 8, 10, 10, 3, 1, 1, {0, 0, 0, 0}, 1, true, 0, 1, 0},
      {"1x1 s1 7x7 (grid padded)", 1, 32, 40, 7, 7, 1, 1, 1, {0, 0, 0, 0}, 1, true, 1, 1, 0},
      {"1x1 s1 16x16 plain", 1, 16, 16, 16, 16, 1, 1, 1, {0, 0, 0, 0}, 1, true, 0, 1, 0},
      {"1x1 s2 downsample", 1, 16, 32, 14, 14, 1, 2, 1, {0, 0, 0, 0}, 1, false, 0, 1, 0},
      {"7x7 s2 p3 stem", 1, 3, 16, 32, 32, 7, 2, 1, {3, 3, 3, 3}, 1, true, 1, 1, 0},
      {"5x5 s1 p2 residual", 1, 8, 12, 11, 13, 5, 1, 1, {2, 2, 2, 2}, 1, true, 3, 1, 0},
      {"3x3 residual relu", 2, 16, 16, 9, 9, 3, 1, 1, {1, 1, 1, 1}, 1, true, 3, 1, 1},
      {"3x3 dilation 2", 1, 6, 10, 12, 12, 3, 1, 2, {2, 2, 2, 2}, 1, false, 1, 1, 0},
      {"3x3 asymmetric pads s2", 1, 5, 7, 13, 10, 3, 2, 1, {0, 1, 2, 0}, 1, true, 0, 1, 0},
      {"3x3 clip", 1, 8, 20, 8, 8, 3, 1, 1, {1, 1, 1, 1}, 1, true, 2, 1, 0},
      {"3x3 mul add per channel", 1, 8, 20, 8, 8, 3, 1, 1, {1, 1, 1, 1}, 1, true, 4, 1, 0},
      {"3x3 s2 gelu", 1, 16, 24, 9, 41, 3, 2, 1, {0, 0, 0, 0}, 1, false, 5, 1, 0},
      {"1x1 silu", 1, 16, 40, 14, 14, 1, 1, 1, {0, 0, 0, 0}, 1, true, 6, 1, 0},
      {"3x3 s1 silu (winograd)", 1, 32, 32, 14, 14, 3, 1, 1, {1, 1, 1, 1}, 1, true, 6, 1, 1},
      {"3x3 K = 576 batch 2", 2, 64, 72, 12, 12, 3, 1, 1, {1, 1, 1, 1}, 1, true, 1, 1, 1},
      /* Winograd F(2x2, 3x3) edges: odd output rows and columns (partial
       * tiles, tile rows padded to groups of four), channels that fill no
       * whole slice or group, no padding (X read as it is), asymmetric pads
       * (3x3 s1 cases with 16 tiles or fewer and few channels stay implicit GEMM) */
      {"winograd 3x3 odd 15x13 residual", 1, 40, 40, 15, 13, 3, 1, 1, {1, 1, 1, 1}, 1, true, 3, 1, 1},
      {"winograd 3x3 C 40 M 72 30x30 clip", 1, 40, 72, 30, 30, 3, 1, 1, {1, 1, 1, 1}, 1, true, 2, 1, 1},
      {"winograd 3x3 p0 11x11 batch 2", 2, 128, 24, 11, 11, 3, 1, 1, {0, 0, 0, 0}, 1, false, 0, 1, 1},
      {"winograd 3x3 asymmetric pads", 1, 32, 32, 14, 13, 3, 1, 1, {0, 1, 1, 0}, 1, true, 4, 1, 1},
      {"winograd 3x3 C 256 M 256 7x7", 1, 256, 256, 7, 7, 3, 1, 1, {1, 1, 1, 1}, 1, false, 1, 1, 1},
      /* the last block runs past the grid (gd = 1): its tail must not land
       * in the next channel (ResNet-18 layer2.0 conv1 at 16 channels) */
      {"3x3 s2 p1 56x56 grid tail", 1, 16, 32, 56, 56, 3, 2, 1, {1, 1, 1, 1}, 1, true, 1, 1, 0},
      {"3x3 groups 2 (printed)", 1, 8, 8, 10, 10, 3, 1, 1, {1, 1, 1, 1}, 2, true, 1, 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) conv_case(&cases[i]);
  unsetenv("KILN_OPENCL_WINOGRAD");
}

/* A nearest 2x Resize before a 3x3 conv (unet's up block): fusion inlines
 * the Resize into the conv's phase split, so X is never in memory; the
 * templates still read the planes that printed kernel writes (one
 * instance: Winograd F(2x2) from the planes, and the implicit GEMM with
 * Winograd off), never X itself. */
static void test_inlined_producer(void) {
  gb_t b;
  gb_init(&b);
  input(&b, "x", DIMS(1, 16, 9, 11));
  konst(&b, "w", DIMS(24, 16, 3, 3));
  konst(&b, "bias", DIMS(24));
  kiln_array_t sc;
  kiln_shape_t s4 = kiln_shape_make(1, (int64_t[]){4});
  KILN_ASSERT(!kiln_array_alloc(A(), KILN_DTYPE_F32, &s4, &sc));
  const float scales[4] = {1.f, 1.f, 2.f, 2.f};
  memcpy(sc.data, scales, sizeof scales);
  if (!b.st) b.st = kiln_graph_add_initializer(b.g, "scales", &sc, NULL);
  kiln_attr_t ra[2] = {kiln_attr_make_string("mode", "nearest"),
                       kiln_attr_make_string("coordinate_transformation_mode", "asymmetric")};
  node(&b, "Resize", IN("x", "", "scales"), "up", 2, ra);
  kiln_attr_t ca[2] = {kiln_attr_make_ints("pads", 4, (int64_t[]){1, 1, 1, 1}),
                       kiln_attr_make_ints("kernel_shape", 2, (int64_t[]){3, 3})};
  node(&b, "Conv", IN("up", "w", "bias"), "y", 2, ca);
  node(&b, "Relu", IN("y"), "out", 0, NULL);
  kiln_graph_add_output(b.g, "out");
  check_graph(&b, "resize inlined into the phase split, 3x3 conv", 1, 1);
}

/* Two convs reading one weight initializer: each instance's layout must
 * hold for the other's reads too (or the constant stays shared as it is). */
/* F(4x4, 3x3) (KILN_OPENCL_WINOGRAD=f4: every Winograd instance, U the
 * W_WINOGRAD4 constant lowering makes for Vulkan): planes of whole and
 * partial 4x4 tiles (56x56, 14x14, 7x7, 5x5, 13x11, 11x11 unpadded),
 * batch 2, bias, residual Add + Relu, Clip. */
static void test_winograd4(void) {
  static const ccase_t cases[] = {
      /* what, n, c, m, h, w, k, s, d, pads, group, bias, epi, templated, wino */
      {"F(4x4) 56x56 bias relu", 1, 16, 24, 56, 56, 3, 1, 1, {1, 1, 1, 1}, 1, true, 1, 1, 1},
      {"F(4x4) 14x14 batch 2 residual", 2, 32, 40, 14, 14, 3, 1, 1, {1, 1, 1, 1}, 1, true, 3, 1, 1},
      {"F(4x4) 7x7 C 256 M 256 residual", 1, 256, 256, 7, 7, 3, 1, 1, {1, 1, 1, 1}, 1, true, 3, 1, 1},
      /* (this 5x5 conv gets no conv template on the GPU plan here: printed, any) */
      {"F(4x4) 5x5 C 256 M 256 residual", 1, 256, 256, 5, 5, 3, 1, 1, {1, 1, 1, 1}, 1, true, 3, -1, -1},
      {"F(4x4) 13x11 batch 2 residual", 2, 24, 20, 13, 11, 3, 1, 1, {1, 1, 1, 1}, 1, true, 3, 1, 1},
      {"F(4x4) 13x11 C 40 M 72 clip", 1, 40, 72, 13, 11, 3, 1, 1, {1, 1, 1, 1}, 1, false, 2, 1, 1},
      {"F(4x4) p0 11x11 batch 2", 2, 128, 24, 11, 11, 3, 1, 1, {0, 0, 0, 0}, 1, false, 0, 1, 1},
  };
  setenv("KILN_OPENCL_WINOGRAD", "f4", 1);
  wino_tile = "F(4x4";
  check_atol = 1e-4;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) conv_case(&cases[i]);
  /* and F(2x2) asked for: none of F(4x4) */
  setenv("KILN_OPENCL_WINOGRAD", "f2", 1);
  wino_tile = "F(2x2";
  check_atol = 1e-5;
  conv_case(&cases[0]);
  unsetenv("KILN_OPENCL_WINOGRAD");
  /* the default rule (opencl_winograd.c): F(4x4) on planes of 28 x 28 and
   * more, F(2x2) below */
  static const ccase_t rule[] = {
      {"rule: 28x28 F(4x4)", 1, 16, 24, 28, 28, 3, 1, 1, {1, 1, 1, 1}, 1, true, 1, 1, 1},
      {"rule: 28x27 F(2x2)", 1, 16, 24, 28, 27, 3, 1, 1, {1, 1, 1, 1}, 1, true, 1, 1, 1},
      {"rule: 14x14 F(2x2)", 1, 256, 256, 14, 14, 3, 1, 1, {1, 1, 1, 1}, 1, true, 1, 1, 1},
  };
  wino_tile = "F(4x4";
  check_atol = 1e-4;
  conv_case(&rule[0]);
  wino_tile = "F(2x2";
  check_atol = 1e-5;
  conv_case(&rule[1]);
  conv_case(&rule[2]);
  wino_tile = NULL;
}

static void test_shared_weights(void) {
  gb_t b;
  gb_init(&b);
  input(&b, "x", DIMS(1, 16, 12, 12));
  konst(&b, "w", DIMS(16, 16, 3, 3));
  kiln_attr_t ca[2] = {kiln_attr_make_ints("pads", 4, (int64_t[]){1, 1, 1, 1}),
                       kiln_attr_make_ints("kernel_shape", 2, (int64_t[]){3, 3})};
  node(&b, "Conv", IN("x", "w"), "y1", 2, ca);
  node(&b, "Relu", IN("y1"), "r1", 0, NULL);
  node(&b, "Conv", IN("r1", "w"), "out", 2, ca);
  kiln_graph_add_output(b.g, "out");
  check_graph(&b, "two 3x3 convs sharing weights", 2, 2);
}

/* Two convs of the same shape and epilogue, different weights: the second
 * calls the first one's kernel (printed once) and both results hold. */
static void test_identical_instances(void) {
  gb_t b;
  gb_init(&b);
  input(&b, "x", DIMS(1, 16, 10, 10));
  konst(&b, "w1", DIMS(16, 16, 3, 3));
  konst(&b, "w2", DIMS(16, 16, 3, 3));
  konst(&b, "b1", DIMS(16));
  konst(&b, "b2", DIMS(16));
  kiln_attr_t ca[2] = {kiln_attr_make_ints("pads", 4, (int64_t[]){1, 1, 1, 1}),
                       kiln_attr_make_ints("kernel_shape", 2, (int64_t[]){3, 3})};
  node(&b, "Conv", IN("x", "w1", "b1"), "y1", 2, ca);
  node(&b, "Relu", IN("y1"), "r1", 0, NULL);
  node(&b, "Conv", IN("r1", "w2", "b2"), "y2", 2, ca);
  node(&b, "Relu", IN("y2"), "out", 0, NULL);
  kiln_graph_add_output(b.g, "out");
  expect_shared = 1;
  check_graph(&b, "two identical 3x3 conv + relu", 2, 2);
  expect_shared = -1;
}

/* Run-time shapes (conv.cl / winograd.cl CRT 1): two Winograd convs and two
 * strided implicit-GEMM convs, all of different shapes, each pair with the
 * same tiles and epilogue, share one kernel per pair (their shapes in a
 * constant each); with KILN_OPENCL_SHAPES=static every instance has its
 * own kernel with its shapes as numbers. Both against the reference. */
static void rt_shapes_graph(gb_t* b) {
  gb_init(b);
  input(b, "x", DIMS(1, 32, 16, 16));
  konst(b, "w1", DIMS(64, 32, 3, 3));
  konst(b, "w2", DIMS(64, 64, 3, 3));
  konst(b, "w3", DIMS(32, 64, 3, 3));
  konst(b, "w4", DIMS(48, 64, 3, 3));
  const char* bn[4] = {"b1", "b2", "b3", "b4"};
  const int64_t bm[4] = {64, 64, 32, 48};
  for (int i = 0; i < 4; ++i) konst(b, bn[i], DIMS(bm[i]));
  kiln_attr_t p1[2] = {kiln_attr_make_ints("pads", 4, (int64_t[]){1, 1, 1, 1}),
                       kiln_attr_make_ints("kernel_shape", 2, (int64_t[]){3, 3})};
  kiln_attr_t p0[1] = {kiln_attr_make_ints("kernel_shape", 2, (int64_t[]){3, 3})};
  kiln_attr_t s2[3] = {kiln_attr_make_ints("pads", 4, (int64_t[]){1, 1, 1, 1}),
                       kiln_attr_make_ints("kernel_shape", 2, (int64_t[]){3, 3}),
                       kiln_attr_make_ints("strides", 2, (int64_t[]){2, 2})};
  node(b, "Conv", IN("x", "w1", "b1"), "c1", 2, p1); /* Winograd, 16x16 */
  node(b, "Relu", IN("c1"), "y1", 0, NULL);
  node(b, "Conv", IN("y1", "w2", "b2"), "c2", 1, p0); /* Winograd, 14x14 */
  node(b, "Relu", IN("c2"), "y2", 0, NULL);
  node(b, "Conv", IN("y2", "w3", "b3"), "c3", 3, s2); /* implicit GEMM, 32 channels */
  node(b, "Relu", IN("c3"), "out1", 0, NULL);
  node(b, "Conv", IN("y2", "w4", "b4"), "c4", 3, s2); /* implicit GEMM, 48 channels */
  node(b, "Relu", IN("c4"), "out2", 0, NULL);
  kiln_graph_add_output(b->g, "out1");
  kiln_graph_add_output(b->g, "out2");
}

static void test_runtime_shapes(void) {
  gb_t b;
  rt_shapes_graph(&b);
  expect_min_shared = 2;
  expect_text = "__global const int* restrict KS";
  check_graph(&b, "four convs, run-time shapes", 4, 2);
  rt_shapes_graph(&b);
  setenv("KILN_OPENCL_SHAPES", "static", 1);
  expect_min_shared = 0;
  expect_shared = 0;
  expect_text = NULL;
  refuse_text = "restrict KS";
  check_graph(&b, "four convs, static shapes", 4, 2);
  unsetenv("KILN_OPENCL_SHAPES");
  expect_shared = -1;
  refuse_text = NULL;
}

/* Printed kernels (no template) whose canonical text is the same -- two
 * Concats' copies of equal-sized inputs at the same offsets, the Relus
 * before them -- call the first one's kernel; both outputs right. */
static void test_printed_shared(void) {
  gb_t b;
  gb_init(&b);
  input(&b, "a", DIMS(1, 8, 5, 5));
  input(&b, "b", DIMS(1, 8, 5, 5));
  input(&b, "c", DIMS(1, 8, 5, 5));
  node(&b, "Relu", IN("a"), "ra", 0, NULL);
  node(&b, "Relu", IN("b"), "rb", 0, NULL);
  kiln_attr_t ax[1] = {kiln_attr_make_int("axis", 1)};
  node(&b, "Concat", IN("ra", "c"), "out1", 1, ax);
  node(&b, "Concat", IN("rb", "c"), "out2", 1, ax);
  kiln_graph_add_output(b.g, "out1");
  kiln_graph_add_output(b.g, "out2");
  expect_printed_shared = 3;
  check_graph(&b, "two relu + concat pairs", 0, 0);
  expect_printed_shared = -1;
}

int main(void) {
  if (!(dev = open_opencl_device_0())) return 1;
  RUN(test_printed_shared);
  RUN(test_runtime_shapes);
  RUN(test_conv_shapes);
  RUN(test_inlined_producer);
  RUN(test_winograd4);
  RUN(test_shared_weights);
  RUN(test_identical_instances);
  kiln_device_release(dev);
  return kiln_test_finish();
}
