/* The OpenCL depthwise convolution template (kernels/opencl/depthwise.cl
 * via targets/opencl/opencl_depthwise.c) end to end on device 0: depthwise
 * Conv graphs (group = input channels) with constant weights, lowered with
 * the GPU schedules, fused, run kernel by kernel and compared with the
 * reference executor (graph_harness.h's tolerance) -- 3x3 stride 1, 2 and
 * 3, pad 1 and asymmetric pads, channel multiplier 1 and 2, dilation 2,
 * 5x5, 1x7, 7x7 outputs, odd sizes, 112x112 x 32 channels (MobileNetV2's
 * first depthwise), batch 2, bias, fused Relu / Clip(0, 6) / residual Add /
 * per-channel Mul+Add epilogues. Each graph runs three times: as the
 * emitter chooses (the template for strided convs only, where it measured
 * faster on PoCL), with the template wherever it matches, and with it off
 * (the kernel printed from its tensor IR). The number of template
 * instances and the template's comment in the program text are checked;
 * more than 49 taps is the lowering's GEMM path, never the template. */
#include <stdint.h>
#include <string.h>

#include "graph_harness.h"
#include "ir/graph.h"
#include "kiln/runtime.h"
#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "runtime/opencl/opencl_device.h"
#include "compiler/ref_exec.h"
#include "targets/opencl/opencl_target.h"
#include "targets/program_build.h"
#include "testing.h"

static kiln_allocator_t A(void) { return kiln_allocator_system(); }
static kiln_device_t* dev;


/* |chosen|: template instances expected as the emitter chooses; |matched|:
 * with the template wherever it matches. */
static void check_graph(gb_t* b, const char* what, int chosen, int matched) {
  kiln_array_t want[4];
  memset(want, 0, sizeof want);
  if (!CHECK_OK(b->st) || !CHECK_OK(kiln_graph_prepare(b->g))) goto done;
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  if (!CHECK_OK(kiln_ref_run(b->g, b->feeds, &ro, want))) goto done;
  kiln_plan_t* plan = NULL;
  kiln_plan_options_t po = {KILN_TARGET_CLASS_GPU, 0, 0, 0, 0, 0};
  if (CHECK_OK(kiln_plan_build(b->g, &po, A(), &plan))) {
    kiln_fusion_report_t rep;
    CHECK_OK(kiln_plan_fuse(plan, &rep, NULL));
    static const char* const variants[] = {"as chosen", "template wherever it matches", "printed"};
    const int expect[] = {chosen, matched, 0};
    for (int variant = 0; variant < 3; ++variant) {
      kiln_program_t* prog = NULL;
      kiln_program_build_options_t bo = {.model_name = what, .no_code = true};
      const kiln_opencl_template_options_t to = {.no_dw_template = variant == 2, .all_dw_template = variant == 1};
      if (!CHECK_OK(choose_opencl_templates(plan, &to))) break;
      if (!CHECK_OK(kiln_program_build(plan, kiln_target_find("opencl"), &bo, A(), &prog))) break;
      int32_t n_templ = 0;
      kiln_opencl_emit_options_t eo = {.n_templated = &n_templ};
      if (!CHECK_OK(kiln_opencl_emit_ex(plan, prog, &eo)) || !CHECK_OK(kiln_program_validate(prog))) {
        kiln_program_destroy(prog);
        break;
      }
      char label[200];
      snprintf(label, sizeof label, "%s (%s)", what, variants[variant]);
      CHECK_MSG(n_templ == expect[variant], "%s: %d template kernels, expected %d", label, (int)n_templ,
                expect[variant]);
      CHECK_MSG((strstr(prog->code.text, "kiln depthwise template") != NULL) == (expect[variant] > 0),
                "%s: the template's comment %s the source", label, expect[variant] > 0 ? "is not in" : "is in");
      run_and_check(dev, prog, b->feeds, want, b->g->n_outputs, label);
      kiln_program_destroy(prog);
    }
    kiln_plan_destroy(plan);
  }
done:
  for (int o = 0; o < 4; ++o) kiln_array_free(A(), &want[o]);
  for (int i = 0; i < b->n_feeds; ++i) kiln_array_free(A(), &b->feeds[i]);
  kiln_graph_destroy(b->g);
}

typedef struct dcase_s {
  const char* what;
  int64_t n, c, mult, h, w;
  int64_t kh, kw, sh, sw, dh, dw;
  int64_t pads[4]; /* top, left, bottom, right */
  bool bias;
  int epi; /* 0 none, 1 Relu, 2 Clip(0, 6), 3 Add(residual) + Relu, 4 Mul(per-channel) + Add */
  int templated; /* 1: the template matches (the lowering's direct kernel) */
} dcase_t;

static void scalar_const(gb_t* b, const char* name, float v) {
  kiln_array_t a;
  kiln_shape_t s0 = kiln_shape_make(0, NULL);
  KILN_ASSERT(!kiln_array_alloc(A(), KILN_DTYPE_F32, &s0, &a));
  *(float*)a.data = v;
  if (!b->st) b->st = kiln_graph_add_initializer(b->g, name, &a, NULL);
}

static void dw_case(const dcase_t* c) {
  const int64_t m = c->c * c->mult;
  gb_t b;
  gb_init(&b);
  input(&b, "x", DIMS(c->n, c->c, c->h, c->w));
  konst(&b, "w", DIMS(m, 1, c->kh, c->kw));
  if (c->bias) konst(&b, "bias", DIMS(m));
  kiln_attr_t ca[5] = {kiln_attr_make_ints("pads", 4, (int64_t[]){c->pads[0], c->pads[1], c->pads[2], c->pads[3]}),
                       kiln_attr_make_ints("kernel_shape", 2, (int64_t[]){c->kh, c->kw}),
                       kiln_attr_make_ints("strides", 2, (int64_t[]){c->sh, c->sw}),
                       kiln_attr_make_ints("dilations", 2, (int64_t[]){c->dh, c->dw}),
                       kiln_attr_make_int("group", c->c)};
  const char* out = c->epi ? "y" : "out";
  if (c->bias) node(&b, "Conv", IN("x", "w", "bias"), out, 5, ca);
  else node(&b, "Conv", IN("x", "w"), out, 5, ca);
  const int64_t oh = (c->h + c->pads[0] + c->pads[2] - c->dh * (c->kh - 1) - 1) / c->sh + 1;
  const int64_t ow = (c->w + c->pads[1] + c->pads[3] - c->dw * (c->kw - 1) - 1) / c->sw + 1;
  if (c->epi == 1) {
    node(&b, "Relu", IN("y"), "out", 0, NULL);
  } else if (c->epi == 2) {
    /* random taps sum to within +-9 * 1.x: both bounds clip something */
    scalar_const(&b, "lo", 0.0f);
    scalar_const(&b, "hi", 6.0f);
    node(&b, "Clip", IN("y", "lo", "hi"), "out", 0, NULL);
  } else if (c->epi == 3) {
    input(&b, "res", DIMS(c->n, m, oh, ow));
    node(&b, "Add", IN("y", "res"), "t", 0, NULL);
    node(&b, "Relu", IN("t"), "out", 0, NULL);
  } else if (c->epi == 4) {
    konst(&b, "scale", DIMS(m, 1, 1));
    konst(&b, "shift", DIMS(1, m, 1, 1));
    node(&b, "Mul", IN("y", "scale"), "t", 0, NULL);
    node(&b, "Add", IN("t", "shift"), "out", 0, NULL);
  }
  kiln_graph_add_output(b.g, "out");
  const bool strided = c->sh > 1 || c->sw > 1;
  check_graph(&b, c->what, c->templated && strided ? 1 : 0, c->templated);
}

static void test_dw_shapes(void) {
  static const dcase_t cases[] = {
      /* what, n, c, mult, h, w, kh, kw, sh, sw, dh, dw, pads, bias, epi, templated */
      {"3x3 s1 p1 16x16 bias", 1, 8, 1, 16, 16, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}, true, 0, 1},
      {"3x3 s1 p1 relu 7x7", 1, 16, 1, 7, 7, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}, true, 1, 1},
      {"3x3 s2 p1 clip6 15x13", 1, 12, 1, 15, 13, 3, 3, 2, 2, 1, 1, {1, 1, 1, 1}, true, 2, 1},
      {"3x3 s2 p1 clip6 14x14 -> 7x7", 1, 24, 1, 14, 14, 3, 3, 2, 2, 1, 1, {1, 1, 1, 1}, true, 2, 1},
      {"3x3 s1 p1 clip6 112x112 x32", 1, 32, 1, 112, 112, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}, true, 2, 1},
      {"3x3 s2 p1 clip6 56x56 batch 2", 2, 16, 1, 56, 56, 3, 3, 2, 2, 1, 1, {1, 1, 1, 1}, true, 2, 1},
      {"3x3 multiplier 2 relu 15x13", 1, 6, 2, 15, 13, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}, true, 1, 1},
      {"3x3 multiplier 2 s2 no bias", 2, 5, 2, 11, 20, 3, 3, 2, 2, 1, 1, {1, 1, 1, 1}, false, 0, 1},
      {"3x3 dilation 2 pad 2 33x40", 1, 8, 1, 33, 40, 3, 3, 1, 1, 2, 2, {2, 2, 2, 2}, true, 1, 1},
      {"5x5 s1 p2 relu 19x37", 1, 8, 1, 19, 37, 5, 5, 1, 1, 1, 1, {2, 2, 2, 2}, true, 1, 1},
      {"5x5 s2 p2 28x28", 1, 8, 1, 28, 28, 5, 5, 2, 2, 1, 1, {2, 2, 2, 2}, false, 0, 1},
      {"3x3 s1 p0 no padding 9x70", 1, 4, 1, 9, 70, 3, 3, 1, 1, 1, 1, {0, 0, 0, 0}, true, 0, 1},
      {"asymmetric s(2,1) d(2,1) pads", 2, 6, 2, 13, 16, 3, 3, 2, 1, 2, 1, {2, 1, 2, 1}, true, 1, 1},
      {"3x3 s3 p1 stride 3 23x23", 1, 4, 1, 23, 23, 3, 3, 3, 3, 1, 1, {1, 1, 1, 1}, true, 0, 1},
      {"1x7 taps", 1, 4, 1, 12, 30, 1, 7, 1, 1, 1, 1, {0, 3, 0, 3}, true, 1, 1},
      {"3x3 residual add relu 20x21", 2, 8, 1, 20, 21, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}, true, 3, 1},
      {"3x3 mul add per channel", 1, 8, 2, 17, 17, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}, true, 4, 1},
      {"3x3 s2 p1 7x7 -> 4x4 (4-wide runs)", 2, 16, 1, 7, 7, 3, 3, 2, 2, 1, 1, {1, 1, 1, 1}, true, 2, 1},
      {"1x1 s1 depthwise 3x5", 1, 8, 1, 3, 5, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, 0, 1},
      /* 81 taps: the lowering's GEMM path, not the direct kernel */
      {"9x9 depthwise (printed)", 1, 4, 1, 12, 12, 9, 9, 1, 1, 1, 1, {4, 4, 4, 4}, true, 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) dw_case(&cases[i]);
}

int main(void) {
  if (!(dev = open_opencl_device_0())) return 1;
  RUN(test_dw_shapes);
  kiln_device_release(dev);
  return kiln_test_finish();
}
