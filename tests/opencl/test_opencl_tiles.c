/* Tiles and weight layouts of the OpenCL template instances, decided in
 * lowering (lowering/template_choose.c, lowering/template_weights.c) from
 * the OpenCL target's rules (targets/opencl/opencl_tiles.c): the tiles in
 * each descriptor are the target's defaults or its KILN_OPENCL_*_TILES
 * overrides (invalid ones ignored, as before), the conv constants are laid
 * out in the plan for those tiles (the Winograd transform checked element
 * by element), the program's weights are the plan's, choosing again starts
 * from the packed weights, a tuner's flow (select, new tiles, lay out)
 * works, and the emitter refuses tiles that are not the OpenCL rules' or
 * weights not laid out for them. No device: plans and programs only. */
#include <stdlib.h>
#include <string.h>

#include "graph_harness.h"
#include "ir/graph.h"
#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "lowering/template.h"
#include "targets/opencl/opencl_internal.h"
#include "targets/opencl/opencl_target.h"
#include "targets/program_build.h"
#include "targets/registry.h"
#include "testing.h"

static kiln_allocator_t A(void) { return kiln_allocator_system(); }

/* CHECK_MSG that also says whether it held. */
static bool expect(bool c, const char* what) {
  CHECK_MSG(c, "%s", what);
  return c;
}

typedef struct {
  gb_t b;
  kiln_plan_t* plan;
} fixture_t;

/* x [1,16,14,14] -> Conv(w [m,16,k,k], same padding) -> Relu -> y, planned
 * for the GPU and fused (the templates are chosen by the caller). */
static bool conv_fixture(fixture_t* f, int64_t m, int64_t k) {
  memset(f, 0, sizeof *f);
  gb_init(&f->b);
  input(&f->b, "x", DIMS(1, 16, 14, 14));
  konst(&f->b, "w", DIMS(m, 16, k, k));
  const int64_t p = k / 2;
  kiln_attr_t at[1] = {kiln_attr_make_ints("pads", 4, (int64_t[]){p, p, p, p})};
  node(&f->b, "Conv", IN("x", "w"), "c", 1, at);
  node(&f->b, "Relu", IN("c"), "y", 0, NULL);
  if (!CHECK_OK(f->b.st) || !CHECK_OK(kiln_graph_add_output(f->b.g, "y")) || !CHECK_OK(kiln_graph_prepare(f->b.g)))
    return false;
  kiln_plan_options_t po = {KILN_TARGET_CLASS_GPU, 0, 0, 0, 0, 0};
  if (!CHECK_OK(kiln_plan_build(f->b.g, &po, A(), &f->plan))) return false;
  kiln_fusion_report_t rep;
  return CHECK_OK(kiln_plan_fuse(f->plan, &rep, NULL));
}

static void fixture_free(fixture_t* f) {
  kiln_plan_destroy(f->plan);
  for (int i = 0; i < f->b.n_feeds; ++i) kiln_array_free(A(), &f->b.feeds[i]);
  kiln_graph_destroy(f->b.g);
}

/* The plan's descriptor of |kind| (NULL when there is none). */
static kiln_template_t* find(const kiln_plan_t* p, kiln_template_kind_t kind) {
  for (int32_t k = 0; k < p->n_kernels; ++k)
    if (p->kernels[k].tmpl && p->kernels[k].tmpl->kind == kind) return p->kernels[k].tmpl;
  return NULL;
}

static kiln_status_t choose(kiln_plan_t* p, const kiln_opencl_template_options_t* o) {
  kiln_template_set_t set;
  kiln_opencl_templates(o, &set);
  return kiln_template_choose(p, &set);
}

static bool same_tiles(const kiln_template_tiles_t* t, int32_t n, const int32_t* v) {
  if (t->n != n) return false;
  for (int32_t i = 0; i < n; ++i)
    if (t->v[i] != v[i]) return false;
  return true;
}

/* The program built from |p| holds the plan's constant |w| as it is. */
static void check_program_weights(const kiln_plan_t* p, int32_t w, const char* what) {
  kiln_program_t* prog = NULL;
  kiln_program_build_options_t bo = {.model_name = what};
  if (!CHECK_OK(kiln_program_build(p, kiln_target_find("opencl"), &bo, A(), &prog))) return;
  const kiln_program_buffer_t* b = &prog->buffers[w];
  const kiln_array_t* v = &p->buffers[w].value;
  CHECK_MSG(b->bytes == v->nbytes && b->rank == p->buffers[w].buf->rank && b->const_offset + b->bytes <= prog->weights_len &&
                !memcmp(prog->weights + b->const_offset, v->data, v->nbytes),
            "%s: the program's weights '%s' (%llu bytes) are not the plan's (%zu)", what, b->name,
            (unsigned long long)b->bytes, v->nbytes);
  kiln_program_destroy(prog);
}

/* Packed element (m, k) of the lowering's layout (lowering/template.h). */
static float packed_at(const kiln_template_conv_t* c, const float* w, int64_t m, int64_t k) {
  return w[(((k / c->kbs) * c->tiles + m / c->pt) * c->kbs + k % c->kbs) * c->pt + m % c->pt];
}

static void test_winograd(void) {
  unsetenv("KILN_OPENCL_WINO_TILES");
  setenv("KILN_OPENCL_WINOGRAD", "f2", 1); /* F(2x2)'s U below; F(4x4) in test_winograd4 */
  fixture_t f;
  if (conv_fixture(&f, 32, 3) && CHECK_OK(choose(f.plan, NULL))) {
    kiln_template_t* t = find(f.plan, KILN_TEMPLATE_WINOGRAD);
    if (expect(t != NULL, "no Winograd instance for a 16 -> 32 channel 3x3 conv at 14x14")) {
      const kiln_opencl_wino_tiles_t d = kiln_opencl_wino_default_tiles(&t->conv, false, NULL);
      CHECK(same_tiles(&t->tiles, 7, (const int32_t[]){d.tm, d.tn, d.wx, d.wy, d.cb, d.f, 1}));
      CHECK(t->weights.layout == KILN_TEMPLATE_W_WINOGRAD && t->weights.laid_out);
      CHECK(t->weights.block == (int64_t)d.tm * d.wy && t->weights.slice == d.cb && t->weights.panel == d.tm);
      const int32_t w = t->weights.buffer;
      const kiln_plan_buffer_t* pb = &f.plan->buffers[w];
      const int64_t tm = t->weights.panel, mp = (32 + t->weights.block - 1) / t->weights.block * t->weights.block;
      const int64_t cp = (16 + t->weights.slice - 1) / t->weights.slice * t->weights.slice;
      CHECK(pb->buf->rank == 1 && pb->buf->shape[0] == mp * 16 * cp && pb->value.nbytes == (size_t)(mp * 16 * cp * 4));
      /* U = G g G^T from the packed weights kept aside: U[0][0] = g[0][0],
       * U[1][1] = the sum of the nine taps / 4, U[3][3] = g[2][2] */
      const float* g = pb->before_layout.value.data;
      const float* u = pb->value.data;
      CHECK(pb->before_layout.buf && g && strcmp(pb->before_layout.buf->name, pb->buf->name) == 0);
      for (int64_t m = 0; g && m < 32; m += 7)
        for (int64_t ch = 0; ch < 16; ch += 5) {
          float sum = 0;
          for (int tap = 0; tap < 9; ++tap) sum += packed_at(&t->conv, g, m, ch * 9 + tap);
          const int64_t base = ((m / tm) * 16 * cp + ch) * tm + m % tm;
          CHECK_NEAR(u[base + 0 * cp * tm], packed_at(&t->conv, g, m, ch * 9 + 0), 1e-6);
          CHECK_NEAR(u[base + 5 * cp * tm], sum / 4, 1e-5);
          CHECK_NEAR(u[base + 15 * cp * tm], packed_at(&t->conv, g, m, ch * 9 + 8), 1e-6);
        }
      check_program_weights(f.plan, w, "winograd");
      /* choosing again starts from the packed weights: the same U, and
       * the packed constant itself when the layout is not wanted */
      float first = u[0];
      const tir_buffer_t* packed = pb->before_layout.buf;
      if (CHECK_OK(choose(f.plan, NULL))) {
        const kiln_template_t* t2 = find(f.plan, KILN_TEMPLATE_WINOGRAD);
        CHECK(t2 && t2->weights.laid_out && f.plan->buffers[w].value.nbytes == (size_t)(mp * 16 * cp * 4) &&
              ((const float*)f.plan->buffers[w].value.data)[0] == first);
      }
      const kiln_opencl_template_options_t packed_opts = {.no_conv_relayout = true};
      if (CHECK_OK(choose(f.plan, &packed_opts))) {
        const kiln_template_t* c = find(f.plan, KILN_TEMPLATE_CONV);
        CHECK(c && c->weights.layout == KILN_TEMPLATE_W_PACKED && !c->weights.laid_out);
        CHECK(f.plan->buffers[w].buf == packed && !f.plan->buffers[w].before_layout.buf);
        check_program_weights(f.plan, w, "packed");
      }
    }
  }
  fixture_free(&f);
  /* the override, as "tm,tn,wx,wy,cb"; an invalid one (tn 3) is ignored */
  setenv("KILN_OPENCL_WINO_TILES", "8,8,1,2,16", 1);
  if (conv_fixture(&f, 32, 3) && CHECK_OK(choose(f.plan, NULL))) {
    const kiln_template_t* t = find(f.plan, KILN_TEMPLATE_WINOGRAD);
    CHECK(t && same_tiles(&t->tiles, 7, (const int32_t[]){8, 8, 1, 2, 16, 2, 1}) && t->weights.block == 16 &&
          t->weights.slice == 16 && t->weights.panel == 8);
    if (t) check_program_weights(f.plan, t->weights.buffer, "winograd, tiles from the environment");
  }
  fixture_free(&f);
  setenv("KILN_OPENCL_WINO_TILES", "8,3,1,2,16", 1);
  if (conv_fixture(&f, 32, 3) && CHECK_OK(choose(f.plan, NULL))) {
    const kiln_template_t* t = find(f.plan, KILN_TEMPLATE_WINOGRAD);
    unsetenv("KILN_OPENCL_WINO_TILES");
    if (expect(t != NULL, "no instance")) {
      const kiln_opencl_wino_tiles_t d = kiln_opencl_wino_default_tiles(&t->conv, false, NULL);
      CHECK(same_tiles(&t->tiles, 7, (const int32_t[]){d.tm, d.tn, d.wx, d.wy, d.cb, d.f, 1}));
    }
  }
  unsetenv("KILN_OPENCL_WINO_TILES");
  unsetenv("KILN_OPENCL_WINOGRAD");
  fixture_free(&f);
}

/* F(4x4, 3x3) (tiles "...,4"): lowering's W_WINOGRAD4 constant, the conv's
 * sizes first, then U with a channel's 36 positions together: U[0] =
 * g[0][0] / 16, U[35] = g[2][2]; the tiles' f picks the layout. */
static void test_winograd4(void) {
  setenv("KILN_OPENCL_WINO_TILES", "8,8,1,2,16,4", 1);
  fixture_t f;
  if (conv_fixture(&f, 32, 3) && CHECK_OK(choose(f.plan, NULL))) {
    kiln_template_t* t = find(f.plan, KILN_TEMPLATE_WINOGRAD);
    if (expect(t != NULL, "no Winograd instance for a 16 -> 32 channel 3x3 conv at 14x14")) {
      CHECK(same_tiles(&t->tiles, 7, (const int32_t[]){8, 8, 1, 2, 16, 4, 1}));
      CHECK(t->weights.layout == KILN_TEMPLATE_W_WINOGRAD4 && t->weights.laid_out);
      CHECK(t->weights.block == 16 && t->weights.slice == 16 && t->weights.panel == 8);
      const kiln_plan_buffer_t* pb = &f.plan->buffers[t->weights.buffer];
      const int64_t tm = 8, mp = 32, cp = 16, u0 = KILN_TEMPLATE_WINO4_SIZES;
      CHECK(pb->buf->rank == 1 && pb->buf->shape[0] == mp * 36 * cp + u0);
      const float* g = pb->before_layout.value.data;
      const float* u = pb->value.data;
      CHECK(g && u && u[0] == 32 && u[1] == 16 && u[2] == 14 && u[3] == 14); /* M C oh ow */
      for (int64_t m = 0; g && m < 32; m += 7)
        for (int64_t ch = 0; ch < 16; ch += 5) {
          const int64_t base = u0 + (((m / tm) * cp + ch) * 36) * tm + m % tm;
          CHECK_NEAR(u[base], packed_at(&t->conv, g, m, ch * 9 + 0) / 16, 1e-6);
          CHECK_NEAR(u[base + 35 * tm], packed_at(&t->conv, g, m, ch * 9 + 8), 1e-6);
        }
      check_program_weights(f.plan, t->weights.buffer, "winograd F(4x4)");
    }
  }
  fixture_free(&f);
  /* the default rule: F(4x4) on f32 planes of 28 x 28 and more */
  unsetenv("KILN_OPENCL_WINO_TILES");
  kiln_template_conv_t c = {.M = 64, .C = 64, .oh = 28, .ow = 28, .batch = 1, .n_params = 3};
  CHECK(kiln_opencl_wino_default_tiles(&c, false, NULL).f == 4);
  c.ow = 27;
  CHECK(kiln_opencl_wino_default_tiles(&c, false, NULL).f == 2);
  c.ow = 56, c.f16[1] = true; /* an f16 buffer: F(2x2) */
  CHECK(kiln_opencl_wino_default_tiles(&c, false, NULL).f == 2);
  setenv("KILN_OPENCL_WINOGRAD", "f4", 1);
  CHECK(kiln_opencl_wino_default_tiles(&c, false, NULL).f == 4);
  unsetenv("KILN_OPENCL_WINOGRAD");
  /* f 3 is no output tile: the override is ignored */
  setenv("KILN_OPENCL_WINO_TILES", "8,8,1,2,16,3", 1);
  if (conv_fixture(&f, 32, 3) && CHECK_OK(choose(f.plan, NULL))) {
    const kiln_template_t* t = find(f.plan, KILN_TEMPLATE_WINOGRAD);
    CHECK(t && !(t->tiles.v[0] == 8 && t->tiles.v[1] == 8 && t->tiles.v[4] == 16));
  }
  unsetenv("KILN_OPENCL_WINO_TILES");
  fixture_free(&f);
}

/* The implicit-GEMM conv of a 1x1 conv: tiles from KILN_OPENCL_CONV_TILES
 * and its weights in blocks of TM*WY*MM, slices of BK, panels of TM. */
static void test_conv_tiles(void) {
  setenv("KILN_OPENCL_CONV_TILES", "4,16,8,1,2,64,2,2", 1);
  fixture_t f;
  if (conv_fixture(&f, 24, 1) && CHECK_OK(choose(f.plan, NULL))) {
    const kiln_template_t* t = find(f.plan, KILN_TEMPLATE_CONV);
    if (expect(t != NULL, "no conv instance for a 1x1 conv")) {
      CHECK(same_tiles(&t->tiles, 8, (const int32_t[]){4, 16, 8, 1, 2, 64, 2, 2}));
      CHECK(t->weights.layout == KILN_TEMPLATE_W_TILED && t->weights.laid_out && t->weights.block == 16 &&
            t->weights.slice == 64 && t->weights.panel == 4);
      /* 24 channels in 2 blocks of 16, K 16 in one slice of 64 */
      const kiln_plan_buffer_t* pb = &f.plan->buffers[t->weights.buffer];
      CHECK(pb->buf->rank == 1 && pb->buf->shape[0] == 32 * 64);
      /* (m, k) = (21, 5): block 1, micro-panel 1 of the block, lane 1 */
      const float* src = pb->before_layout.value.data;
      const float* dst = pb->value.data;
      if (src) CHECK(dst[1 * 64 * 16 + 1 * 64 * 4 + 5 * 4 + 1] == packed_at(&t->conv, src, 21, 5));
      check_program_weights(f.plan, t->weights.buffer, "conv, tiles from the environment");
    }
  }
  fixture_free(&f);
  setenv("KILN_OPENCL_CONV_TILES", "4,15,8,1,2,64,2,2", 1); /* tn not a multiple of vw: ignored */
  if (conv_fixture(&f, 24, 1) && CHECK_OK(choose(f.plan, NULL))) {
    const kiln_template_t* t = find(f.plan, KILN_TEMPLATE_CONV);
    unsetenv("KILN_OPENCL_CONV_TILES");
    if (expect(t != NULL, "no instance")) {
      const kiln_opencl_conv_tiles_t d = kiln_opencl_conv_default_tiles(t->conv.M, t->conv.Q, t->conv.K);
      CHECK(same_tiles(&t->tiles, 8, (const int32_t[]){d.tm, d.tn, d.vw, d.wx, d.wy, d.bk, d.mm, d.mn}));
    }
  }
  unsetenv("KILN_OPENCL_CONV_TILES");
  fixture_free(&f);
}

/* A tuner's flow: select, new tiles, the geometry, lay out; the emitter
 * refuses weights not laid out for the tiles, and tiles the OpenCL rules
 * did not write. */
static void test_tuner_flow(void) {
  fixture_t f;
  kiln_template_set_t set;
  kiln_opencl_templates(NULL, &set);
  if (conv_fixture(&f, 24, 1) && CHECK_OK(kiln_template_select(f.plan, &set))) {
    kiln_template_t* t = find(f.plan, KILN_TEMPLATE_CONV);
    if (expect(t != NULL && t->tiles.n == 8 && !t->weights.laid_out, "a conv instance, tiles, weights packed")) {
      kiln_program_t* prog = NULL;
      kiln_program_build_options_t bo = {.model_name = "tuner"};
      CHECK_ERR(kiln_program_build(f.plan, kiln_target_find("opencl"), &bo, A(), &prog), KILN_INVALID_ARGUMENT,
                "weights are not laid out for its tiles");
      t->tiles = (kiln_template_tiles_t){8, {8, 16, 16, 1, 1, 16, 1, 1}};
      set.weight_blocks(t);
      CHECK(t->weights.block == 8 && t->weights.slice == 16 && t->weights.panel == 8);
      if (CHECK_OK(kiln_template_weights_lay_out(f.plan))) {
        CHECK(t->weights.laid_out && f.plan->buffers[t->weights.buffer].buf->shape[0] == 24 * 16);
        check_program_weights(f.plan, t->weights.buffer, "tuned");
        /* other tiles without laying the weights out again */
        t->tiles.v[0] = 4;
        CHECK_ERR(kiln_program_build(f.plan, kiln_target_find("opencl"), &bo, A(), &prog), KILN_INVALID_ARGUMENT,
                  "weights are not laid out for its tiles");
        t->tiles.n = 0;
        CHECK_ERR(kiln_program_build(f.plan, kiln_target_find("opencl"), &bo, A(), &prog), KILN_INVALID_ARGUMENT,
                  "has 0 tile parameters, the OpenCL one reads 8");
      }
    }
  }
  fixture_free(&f);
}

/* kiln_template_weights_convert refuses a constant whose dtype is not the
 * W parameter's, one too short for the packed layout, and no geometry. */
static void test_convert_refused(void) {
  kiln_template_t t;
  memset(&t, 0, sizeof t);
  t.kind = KILN_TEMPLATE_CONV;
  kiln_template_conv_t* c = &t.conv;
  c->M = 8, c->Q = 16, c->K = 8, c->T = 1, c->C = 8, c->plane = 16, c->batch = 1;
  c->pt = 8, c->kbs = 8, c->tiles = 1;
  c->n_params = 3;
  memcpy(c->roles, "WXY", 4);
  c->f16[0] = true;
  t.weights = (kiln_template_weights_t){.layout = KILN_TEMPLATE_W_TILED, .buffer = 0, .block = 8, .slice = 8,
                                        .panel = 4};
  tir_buffer_t b = {.name = "w_packed", .dtype = KILN_DTYPE_F32, .rank = 1, .shape = {64}, .strides = {1}};
  uint16_t data[64] = {0};
  kiln_plan_buffer_t pb = {.buf = &b, .kind = KILN_PLAN_CONST, .tensor = -1, .alias_of = -1};
  pb.value = (kiln_array_t){.dtype = KILN_DTYPE_F32, .shape = kiln_shape_make(1, (int64_t[]){32}), .data = data,
                            .nbytes = 64 * 2};
  kiln_array_t out;
  CHECK_ERR(kiln_template_weights_convert(&t, &pb, &out), KILN_INVALID_ARGUMENT,
            "conv weights: the weights are not an f16 constant");
  /* f16 as said, but 32 halves for the layout's 8 x 8 */
  b.dtype = pb.value.dtype = KILN_DTYPE_F16;
  pb.value.nbytes = 32 * 2;
  CHECK_ERR(kiln_template_weights_convert(&t, &pb, &out), KILN_INVALID_ARGUMENT,
            "weights 'w_packed' hold 64 bytes, the packed layout needs 128");
  pb.value.nbytes = 64 * 2;
  t.weights.panel = 3; /* not a divisor of the block */
  CHECK_ERR(kiln_template_weights_convert(&t, &pb, &out), KILN_INVALID_ARGUMENT, "'w_packed': bad geometry");
  t.weights.panel = 4;
  t.weights.layout = KILN_TEMPLATE_W_WINOGRAD; /* a 1-tap conv */
  CHECK_ERR(kiln_template_weights_convert(&t, &pb, &out), KILN_INVALID_ARGUMENT, "no layout to convert to");
  t.weights.layout = KILN_TEMPLATE_W_TILED;
  if (CHECK_OK(kiln_template_weights_convert(&t, &pb, &out)))
    CHECK(out.dtype == KILN_DTYPE_F16 && out.shape.rank == 1 && out.nbytes == 64 * 2);
  kiln_array_free(A(), &out);
}

int main(void) {
  RUN(test_winograd);
  RUN(test_winograd4);
  RUN(test_conv_tiles);
  RUN(test_tuner_flow);
  RUN(test_convert_refused);
  return kiln_test_finish();
}
