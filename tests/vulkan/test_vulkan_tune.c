/* Auto-tuning on the Vulkan device (targets/vulkan/vulkan_tune.c through
 * compiler/tune.h). Without a device: each template's default tiles are in
 * its space and pass the constraints; every point of a conv's and a GEMM's
 * space that the constraints accept (after the subgroup-mode ties) prints
 * as GLSL, and a spread of them compiles to valid SPIR-V; the constraints
 * refuse what the shaders or the device cannot take (untied subgroup
 * points, missing ballot or shaderInt64, the loop limit, oversized
 * unrolled steps and work-groups); the same for the Winograd instance's
 * tm x nt x F(2x2)/F(4x4) space. On lavapipe: `kiln tune` of a small
 * model measures its hints and random points, every candidate checked
 * against the default's output (none rejected), within its budget, once
 * with the conv as the implicit-GEMM template and once as Winograd (its
 * default F(4x4), its first hint an F(2x2) point with re-laid weights); Winograd on or off
 * as a knob: the implicit-GEMM alternative alone and from a cache record
 * computes what the Winograd default does. */
#include "../bad_model_util.h" /* first: it defines _GNU_SOURCE */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "compiler/compare.h"
#include "compiler/tune.h"
#include "compiler/tune_micro.h"
#include "frontend/onnx.h"
#include "ir/passes.h"
#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "lowering/precision.h"
#include "kiln/runtime.h"
#include "runtime/device.h"
#include "runtime/device_registry.h"
#include "runtime/module_impl.h"
#include "runtime/session_impl.h"
#include "targets/program_build.h"
#include "targets/registry.h"
#include "targets/vulkan/vulkan_internal.h"
#include "testing.h"
#include "tune_points_util.h"
#include "../tune_model_util.h"

static kiln_allocator_t A(void) { return kiln_allocator_system(); }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The tuning tests' model (tune_model_util.h), the depthwise conv unpadded. */
static bool write_model(const char* path) { return tune_write_model(path, false); }

static kiln_status_t load(const char* path, kiln_graph_t** g) {
  KILN_RETURN_IF_ERROR(kiln_onnx_parse_model(path, NULL, A(), g));
  KILN_RETURN_IF_ERROR(kiln_graph_prepare(*g));
  return kiln_graph_optimize(*g, 1, NULL);
}

static bool in_space(const kiln_template_space_t* sp, const kiln_template_tiles_t* x) {
  int32_t idx[KILN_TEMPLATE_TILES_MAX];
  return kiln_template_space_index(sp, x, idx);
}

/* Every point of |t|'s space: the constraints and the emitter agree on
 * the tied ones; every |stride|-th accepted point compiles and validates. */
static void sweep(const kiln_template_set_t* set, const kiln_template_t* t, const kiln_template_limits_t* lim,
                  int32_t stride) {
  kiln_template_space_t sp;
  const bool has = set->space(t, &sp);
  CHECK(has);
  if (!has) return;
  int64_t total = 1, accepted = 0, compiled = 0, texel = 0, split = 0;
  for (int32_t i = 0; i < sp.n_knobs; ++i) total *= sp.knobs[i].n;
  kiln_vulkan_cc_t cc;
  if (!CHECK_OK(kiln_vulkan_cc_init(&cc))) return;
  for (int64_t p = 0; p < total; ++p) {
    kiln_template_tiles_t x = {.n = sp.n_knobs};
    int64_t r = p;
    for (int32_t i = 0; i < sp.n_knobs; ++i) {
      x.v[i] = sp.knobs[i].v[r % sp.knobs[i].n];
      r /= sp.knobs[i].n;
    }
    const kiln_template_tiles_t drawn = x;
    set->tiles_tie(t, &x);
    /* each tied point once: as drawn with its ties already in place */
    if (memcmp(&drawn, &x, sizeof x) || set->tiles_check(t, &x, lim)) continue;
    char* glsl = NULL;
    int64_t dims[6], trips = 0;
    kiln_status_t s;
    if (t->kind == KILN_TEMPLATE_GEMM) {
      kiln_spirv_gemm_t g = kiln_vulkan_gemm_of(&t->gemm);
      g.tiles = (kiln_spirv_gemm_tiles_t){x.v[0], x.v[1], x.v[2], x.v[3], x.v[4], x.v[5], x.n > 6 ? x.v[6] : 0};
      s = kiln_spirv_gemm_source(&g, &glsl, dims, dims + 3);
    } else if (t->kind == KILN_TEMPLATE_CONV) {
      /* the conv as the emitter prints it: its weights in the Vulkan panels */
      const kiln_spirv_gemm_tiles_t ct = {x.v[0], x.v[1], x.v[2], x.v[3], x.v[4], x.v[5], x.n > 6 ? x.v[6] : 0};
      kiln_template_conv_t c;
      s = kiln_vulkan_conv_weights(t, "sweep", &c);
      if (!s) s = kiln_vulkan_conv_source(&c, &ct, true, true, "sweep", &glsl, dims, dims + 3, &trips);
    } else {
      s = kiln_vulkan_dw_source(&t->dw, x.v[0], x.v[1], true, true, true, "sweep", &glsl, dims, dims + 3);
    }
    CHECK_MSG(s == NULL, "%s point %d,%d,%d,%d,%d,%d accepted but not printed: %s", kiln_template_kind_name(t->kind),
              x.v[0], x.v[1], x.v[2], x.v[3], x.v[4], x.v[5], s ? kiln_status_message(s) : "");
    if (s) {
      kiln_status_free(s);
      continue;
    }
    /* an accepted texel-mode point prints the texel shader (else it would
     * be mode 3's, measured twice) */
    if (t->kind != KILN_TEMPLATE_DEPTHWISE && x.v[5] == 4) {
      texel++;
      CHECK_MSG(strstr(glsl, "#define TEXEL 1\n") != NULL, "%s point %d,%d,%d,%d,%d,4 accepted but prints no texel reads",
                kiln_template_kind_name(t->kind), x.v[0], x.v[1], x.v[2], x.v[3], x.v[4]);
    }
    /* an accepted split point (a conv's texel mode, TM = LY x RM) prints
     * its RM channel groups as drawn, not tiles the emitter falls back to */
    bool compile = accepted++ % stride == 0;
    if (t->kind == KILN_TEMPLATE_CONV && x.v[5] == 4 && x.v[3] != x.v[0]) {
      char rm[32];
      snprintf(rm, sizeof rm, "#define RM %d\n", (int)x.v[3]);
      CHECK_MSG(strstr(glsl, rm) != NULL && strstr(glsl, "#define TEXEL 1\n") != NULL,
                "conv split point %d,%d,%d,%d,%d,4 accepted but printed other tiles", x.v[0], x.v[1], x.v[2], x.v[3],
                x.v[4]);
      compile = compile || split % 16 == 0; /* a spread of them compiles */
      split++;
    }
    if (compile) {
      uint8_t* spv = NULL;
      uint64_t len = 0;
      s = kiln_vulkan_cc_compile(&cc, "sweep", glsl, A(), &spv, &len);
      CHECK_MSG(s == NULL, "%s point %d,%d,%d,%d,%d,%d: %s", kiln_template_kind_name(t->kind), x.v[0], x.v[1],
                x.v[2], x.v[3], x.v[4], x.v[5], s ? kiln_status_message(s) : "");
      kiln_status_free(s);
      if (spv) A().free(A().self, spv);
      compiled++;
    }
    free(glsl);
  }
  kiln_vulkan_cc_free(&cc);
  printf("  %s: %lld points, %lld accepted (%lld in the texel mode, %lld split), %lld compiled\n",
         kiln_template_kind_name(t->kind), (long long)total, (long long)accepted, (long long)texel, (long long)split,
         (long long)compiled);
  CHECK(accepted >= 4);
  CHECK(t->kind != KILN_TEMPLATE_CONV || split >= 4);
  CHECK(t->kind == KILN_TEMPLATE_DEPTHWISE || texel >= 4);
}

static void test_space(void) {
  char path[128];
  snprintf(path, sizeof path, "/tmp/kiln_test_vulkan_tune_%ld.onnx", (long)getpid());
  const bool written = write_model(path);
  CHECK(written);
  if (!written) return;
  kiln_graph_t* g = NULL;
  kiln_plan_t* plan = NULL;
  const kiln_target_t* target = kiln_target_find("vulkan");
  kiln_template_set_t set;
  kiln_program_templates(target, &set);
  CHECK(set.space && set.tiles_check && set.tiles_tie && set.tiles_hints);
  kiln_plan_options_t po = {KILN_TARGET_CLASS_GPU, 0, 65535, 0, 0, 0};
  kiln_fusion_report_t fr;
  if (!CHECK_OK(load(path, &g)) || !CHECK_OK(kiln_plan_build(g, &po, A(), &plan)) ||
      !CHECK_OK(kiln_plan_fuse(plan, &fr, NULL)) || !CHECK_OK(kiln_template_select(plan, &set)) ||
      !CHECK_OK(kiln_template_weights_lay_out(plan)))
    goto out;
  const kiln_template_limits_t lim = {.max_workgroup_size = 1024, .local_mem_bytes = 32768, .loop_limit = 65535};
  int32_t kinds = 0;
  for (int32_t k = 0; k < plan->n_kernels; ++k) {
    const kiln_template_t* t = plan->kernels[k].tmpl;
    kiln_template_space_t sp;
    if (!t || !set.space(t, &sp)) continue;
    kinds |= 1 << t->kind;
    CHECK_MSG(in_space(&sp, &t->tiles), "kernel %d's default outside its space", (int)k);
    CHECK_MSG(set.tiles_check(t, &t->tiles, &lim) == NULL, "kernel %d's default refused: %s", (int)k,
              set.tiles_check(t, &t->tiles, &lim));
    kiln_template_tiles_t h[8];
    const int32_t nh = set.tiles_hints(t, h, 8);
    int32_t ok = 0;
    for (int32_t i = 0; i < nh; ++i) {
      set.tiles_tie(t, &h[i]);
      ok += in_space(&sp, &h[i]) && !set.tiles_check(t, &h[i], &lim);
    }
    CHECK_MSG(ok >= 2, "kernel %d: %d of %d hints usable", (int)k, (int)ok, (int)nh);
    sweep(&set, t, &lim, t->kind == KILN_TEMPLATE_DEPTHWISE ? 5 : 1000);
    if (t->kind == KILN_TEMPLATE_DEPTHWISE) continue;
    /* GEMM / conv: the default is a subgroup mode on a device with all
     * features (4: vec4 texel reads, where the shapes allow them) */
    CHECK(t->tiles.v[5] == 2 || t->tiles.v[5] == 4);
    kiln_template_tiles_t x = t->tiles;
    x.v[3] = x.v[0] / 2; /* RM != TM in the subgroup mode */
    CHECK(set.tiles_check(t, &x, &lim) != NULL);
    set.tiles_tie(t, &x);
    if (t->kind == KILN_TEMPLATE_CONV && x.v[5] == 4) {
      /* a conv's texel mode: TM = 2 RM is the split work-group, 4 position
       * groups x 2 channel groups (conv.comp, LY 2) */
      CHECK(x.v[3] == x.v[0] / 2 && x.v[1] == 4 * x.v[4] && set.tiles_check(t, &x, &lim) == NULL);
      kiln_template_tiles_t sp8 = x;
      sp8.v[1] = 8 * sp8.v[4]; /* 16 invocations: refused */
      CHECK(set.tiles_check(t, &sp8, &lim) != NULL);
      sp8 = x;
      sp8.v[5] = 3; /* no split outside the texel mode */
      CHECK(set.tiles_check(t, &sp8, &lim) != NULL);
      sp8 = (kiln_template_tiles_t){.n = 6, .v = {32, 40, 2, 16, 10, 4}}; /* RN off whole texels */
      CHECK(set.tiles_check(t, &sp8, &lim) != NULL);
      sp8 = (kiln_template_tiles_t){.n = 6, .v = {16, 8, 2, 2, 8, 4}}; /* RM 2: no split, tied to RM = TM */
      set.tiles_tie(t, &sp8);
      CHECK(sp8.v[3] == 16 && sp8.v[1] == 64 && set.tiles_check(t, &sp8, &lim) == NULL);
      /* the 1x1 convs' split default on small grids: 2 x 16 channels, 4 x
       * 20 positions; and 8 channel groups of 4 x 16 positions */
      const kiln_template_tiles_t s20 = {.n = 6, .v = {32, 80, 2, 16, 20, 4}}, s8 = {.n = 6, .v = {32, 16, 2, 4, 16, 4}};
      CHECK_MSG(in_space(&sp, &s20) && set.tiles_check(t, &s20, &lim) == NULL, "32,80,2,16,20,4 refused: %s",
                set.tiles_check(t, &s20, &lim));
      CHECK(in_space(&sp, &s8) && set.tiles_check(t, &s8, &lim) == NULL);
      x = t->tiles;
      x.v[3] = x.v[0];
      set.tiles_tie(t, &x);
    } else if (t->kind == KILN_TEMPLATE_GEMM) {
      kiln_template_tiles_t sp8 = {.n = 6, .v = {32, 32, 2, 16, 8, 4}}; /* gemm.comp has no split */
      CHECK(set.tiles_check(t, &sp8, &lim) != NULL);
    }
    CHECK(x.v[3] == x.v[0] && x.v[1] == 8 * x.v[4] && set.tiles_check(t, &x, &lim) == NULL);
    kiln_template_limits_t no = lim;
    no.gpu_lacks = KILN_GPU_LACKS_INT64;
    x = t->tiles;
    x.v[5] = 2;
    CHECK(set.tiles_check(t, &x, &no) != NULL); /* mode 2 reads 64-bit words */
    x.v[5] = 4;
    CHECK(set.tiles_check(t, &x, &no) == NULL); /* mode 4 reads none */
    x.v[5] = 3;
    CHECK(set.tiles_check(t, &x, &no) == NULL);
    /* mode 4 with 2 columns per invocation would print mode 3's shader */
    kiln_template_tiles_t y = t->tiles;
    y.v[5] = 4, y.v[4] = 2, y.v[1] = 16;
    CHECK(set.tiles_check(t, &y, &lim) != NULL);
    y.v[5] = 3;
    CHECK(set.tiles_check(t, &y, &lim) == NULL);
    /* mode 2 reads B's columns in pairs: one column an invocation is
     * refused (it computed half a GEMM's outputs wrong), mode 3 takes it */
    kiln_template_tiles_t z = {.n = 6, .v = {32, 8, 2, 32, 1, 2}};
    CHECK(set.tiles_check(t, &z, &lim) != NULL);
    z.v[5] = 3;
    CHECK_MSG(set.tiles_check(t, &z, &lim) == NULL, "32,8,2,32,1,3 refused: %s", set.tiles_check(t, &z, &lim));
    /* the 1x1 convs' default on large grids, 16 channels x 16 positions
     * per invocation in the texel mode, is a point too */
    if (t->kind == KILN_TEMPLATE_CONV) {
      const kiln_template_tiles_t p16 = {.n = 6, .v = {16, 128, 2, 16, 16, 4}};
      CHECK_MSG(set.tiles_check(t, &p16, &lim) == NULL, "16,128,2,16,16,4 refused: %s", set.tiles_check(t, &p16, &lim));
    }
    no.gpu_lacks = KILN_GPU_LACKS_SUBGROUP;
    CHECK(set.tiles_check(t, &x, &no) != NULL);
    no = lim;
    no.loop_limit = 4; /* K / TK slices past it */
    CHECK(set.tiles_check(t, &t->tiles, &no) != NULL);
    x = t->tiles;
    x.v[0] = x.v[3] = 64, x.v[4] = 8, x.v[1] = 64, x.v[2] = 16; /* 8192 unrolled multiply-adds */
    CHECK(set.tiles_check(t, &x, &lim) != NULL);
    x = (kiln_template_tiles_t){.n = 6, .v = {64, 64, 16, 2, 2, 1}}; /* 1024 invocations */
    no.loop_limit = 0;
    no.max_workgroup_size = 256;
    CHECK(set.tiles_check(t, &x, &no) != NULL);
    no.max_workgroup_size = 1024;
    no.local_mem_bytes = 1024; /* 16 x (64 + 64) floats of shared memory */
    CHECK(set.tiles_check(t, &x, &no) != NULL);
    /* 128 x 128 x 16 (one buffer: 16 x 256 floats, 16 KiB) fits Vulkan's
     * minimum exactly (gemm.comp / conv.comp take a second buffer only
     * within it) */
    x = (kiln_template_tiles_t){.n = 6, .v = {128, 128, 16, 8, 8, 1}};
    no = lim;
    no.local_mem_bytes = 16384;
    CHECK_MSG(set.tiles_check(t, &x, &no) == NULL, "128,128,16,8,8,1 in 16 KiB refused: %s", set.tiles_check(t, &x, &no));
    no.local_mem_bytes = 16383;
    CHECK(set.tiles_check(t, &x, &no) != NULL);
  }
  CHECK_MSG(kinds == ((1 << KILN_TEMPLATE_GEMM) | (1 << KILN_TEMPLATE_CONV) | (1 << KILN_TEMPLATE_DEPTHWISE)),
            "template kinds %#x", (unsigned)kinds);
out:
  kiln_plan_destroy(plan);
  kiln_graph_destroy(g);
  unlink(path);
}

/* The model's 3x3 conv as a Winograd instance: its default (F(4x4),
 * 20 columns being 5 of its tiles a row, 8 channels x 4 tiles, weights
 * laid out for it) in its space and valid; every accepted point of
 * tm x nt x wf, with its weights laid out for it (F(4x4) re-lays them),
 * prints (the smallest compiles; all with "winograd"); the constraints refuse too many sums, a group of
 * tiles past the row, values the shader does not take and a record of
 * the old length. */
static void test_winograd_space_run(bool compile_all) {
  char path[128];
  snprintf(path, sizeof path, "/tmp/kiln_test_vulkan_tune_w_%ld.onnx", (long)getpid());
  const bool written = write_model(path);
  CHECK(written);
  if (!written) return;
  kiln_graph_t* g = NULL;
  kiln_plan_t* plan = NULL;
  kiln_template_set_t set;
  kiln_program_templates(kiln_target_find("vulkan"), &set);
  kiln_plan_options_t po = {KILN_TARGET_CLASS_GPU, 0, 65535, 0, 0, 0};
  kiln_fusion_report_t fr;
  kiln_vulkan_cc_t cc;
  bool cc_ok = false;
  if (!CHECK_OK(load(path, &g)) || !CHECK_OK(kiln_plan_build(g, &po, A(), &plan)) ||
      !CHECK_OK(kiln_plan_fuse(plan, &fr, NULL)) || !CHECK_OK(kiln_template_select(plan, &set)) ||
      !CHECK_OK(kiln_vulkan_cc_init(&cc)))
    goto out;
  cc_ok = true;
  const kiln_template_limits_t lim = {.max_workgroup_size = 1024, .local_mem_bytes = 32768, .loop_limit = 65535};
  const kiln_template_t* w = NULL;
  for (int32_t k = 0; k < plan->n_kernels; ++k)
    if (plan->kernels[k].tmpl && plan->kernels[k].tmpl->kind == KILN_TEMPLATE_WINOGRAD) w = plan->kernels[k].tmpl;
  CHECK(w != NULL);
  if (!w) goto out;
  kiln_template_space_t sp;
  CHECK(set.space(w, &sp) && sp.n_knobs == 4 && !strcmp(sp.version, "vulkan.winograd.2"));
  CHECK(w->tiles.n == 4 && w->tiles.v[0] == 8 && w->tiles.v[1] == 4 && w->tiles.v[2] == 4 && w->tiles.v[3] == 1);
  CHECK(w->weights.layout == KILN_TEMPLATE_W_WINOGRAD4);
  CHECK(in_space(&sp, &w->tiles) && set.tiles_check(w, &w->tiles, &lim) == NULL);
  const uint64_t fp = kiln_template_fingerprint(w);
  int32_t accepted = 0, f4 = 0, compiled = 0;
  for (int32_t a = 0; a < sp.knobs[0].n; ++a)
    for (int32_t b = 0; b < sp.knobs[1].n; ++b)
      for (int32_t c = 0; c < sp.knobs[2].n; ++c) {
        kiln_template_t x = *w;
        x.tiles = (kiln_template_tiles_t){.n = 4, .v = {sp.knobs[0].v[a], sp.knobs[1].v[b], sp.knobs[2].v[c], 1}};
        if (set.tiles_check(&x, &x.tiles, &lim)) continue;
        accepted++;
        set.weight_blocks(&x);
        /* the weight layout follows the point; the kernel's key does not */
        CHECK(x.weights.layout == (x.tiles.v[2] == 4 ? KILN_TEMPLATE_W_WINOGRAD4 : KILN_TEMPLATE_W_WINOGRAD));
        CHECK(x.weights.block == x.tiles.v[0] && kiln_template_fingerprint(&x) == fp);
        f4 += x.tiles.v[2] == 4;
        x.weights.laid_out = true; /* as kiln_template_weights_lay_out leaves it */
        kiln_vulkan_wino_tiles_t wt;
        char* glsl = NULL;
        int64_t dims[6], trips = 0;
        kiln_status_t s = kiln_vulkan_wino_tiles_of(&x, "sweep", &wt);
        if (!s) s = kiln_vulkan_wino_source(&x.conv, &wt, true, true, "sweep", &glsl, dims, dims + 3, &trips);
        uint8_t* spv = NULL;
        uint64_t len = 0;
        /* glslang takes seconds on the larger points (F(4x4) 8 x 4: 20 s
         * on the loaded machine): the smallest unless asked for all */
        const bool smallest = x.tiles.v[0] == 4 && x.tiles.v[1] == 4 && x.tiles.v[2] == 2;
        if (!s && (compile_all || smallest)) {
          s = kiln_vulkan_cc_compile(&cc, "sweep", glsl, A(), &spv, &len);
          compiled++;
        }
        CHECK_MSG(s == NULL, "winograd point %d,%d,%d: %s", x.tiles.v[0], x.tiles.v[1], x.tiles.v[2],
                  s ? kiln_status_message(s) : "");
        kiln_status_free(s);
        if (spv) A().free(A().self, spv);
        free(glsl);
      }
  printf("  winograd: %d points, %d accepted (%d F(4x4)), %d compiled\n", 4 * 2 * 2, (int)accepted, (int)f4,
         (int)compiled);
  CHECK(accepted >= 5 && f4 >= 2 && compiled >= (compile_all ? accepted : 1));
  /* refused before anything is built */
  const kiln_template_tiles_t bad[] = {
      {.n = 4, .v = {16, 8, 2, 1}}, /* 2048 sums */
      {.n = 4, .v = {16, 4, 4, 1}}, /* 2304 */
      {.n = 4, .v = {4, 8, 4, 1}},  /* 20 x 20 outputs: 5 F(4x4) tiles a row */
      {.n = 4, .v = {8, 4, 3, 1}},  {.n = 4, .v = {12, 4, 2, 1}}, {.n = 4, .v = {8, 6, 2, 1}},
      {.n = 4, .v = {-8, 4, 2, 1}}, {.n = 2, .v = {8, 4}},
      {.n = 3, .v = {8, 4, 2}},     /* without the switch */
      {.n = 4, .v = {8, 4, 2, 2}},  {.n = 4, .v = {8, 4, 2, -1}},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i)
    CHECK_MSG(set.tiles_check(w, &bad[i], &lim) != NULL, "bad winograd point %d refused", (int)i);
  /* on a 14x14 plane (4 F(4x4) tiles a row) 8 tiles an invocation are 2
   * tile rows of 4 (kiln_vulkan_wino_tile_rows): accepted; on a 7x7 one
   * (2 a row) refused, where the default's 4 are 2 rows of 2 */
  {
    kiln_template_t y = *w;
    y.conv.oh = y.conv.ow = 14;
    const kiln_template_tiles_t p48 = {.n = 4, .v = {4, 8, 4, 1}};
    const kiln_vulkan_wino_tiles_t t48 = {4, 8, 4}, t84 = {8, 4, 4};
    CHECK_MSG(set.tiles_check(&y, &p48, &lim) == NULL, "4,8,4 on 14x14 refused: %s", set.tiles_check(&y, &p48, &lim));
    CHECK(kiln_vulkan_wino_tile_rows(&y.conv, &t48) == 2 && kiln_vulkan_wino_tile_rows(&y.conv, &t84) == 1);
    y.conv.oh = y.conv.ow = 7;
    CHECK(set.tiles_check(&y, &p48, &lim) != NULL);
    CHECK(set.tiles_check(&y, &(kiln_template_tiles_t){.n = 4, .v = {8, 4, 4, 1}}, &lim) == NULL);
    CHECK(kiln_vulkan_wino_tile_rows(&y.conv, &t84) == 2);
  }
  /* a point the tiles and the weights disagree on is not printed */
  kiln_template_t x = *w;
  x.tiles.v[2] = 2;
  x.weights.laid_out = true;
  kiln_vulkan_wino_tiles_t wt;
  kiln_status_t s = kiln_vulkan_wino_tiles_of(&x, "mismatch", &wt);
  CHECK(s != NULL);
  kiln_status_free(s);
  kiln_template_tiles_t h[8];
  const int32_t nh = set.tiles_hints(w, h, 8);
  int32_t ok = 0;
  for (int32_t i = 0; i < nh; ++i) ok += in_space(&sp, &h[i]) && !set.tiles_check(w, &h[i], &lim);
  /* the first hint: the other transform */
  CHECK_MSG(ok >= 4 && h[0].v[2] == 2, "%d of %d winograd hints usable", (int)ok, (int)nh);
out:
  if (cc_ok) kiln_vulkan_cc_free(&cc);
  kiln_plan_destroy(plan);
  kiln_graph_destroy(g);
  unlink(path);
}

/* Builds |plan| for Vulkan, checks that its text holds |want| (|present|)
 * or not (NULL: no check) and runs it on |dev| with |in| (the model's
 * inputs) into out[0..1]. */
static bool run_plan_text(kiln_device_t* dev, kiln_plan_t* plan, const kiln_array_t* in, kiln_array_t* out,
                          const char* want, bool present) {
  kiln_program_t* prog = NULL;
  kiln_module_t* mod = NULL;
  kiln_session_t* ses = NULL;
  kiln_program_build_options_t bo = {.model_name = "tune", .precision = "fp32", .options = "-O1"};
  kiln_status_t s = kiln_program_build(plan, kiln_target_find("vulkan"), &bo, A(), &prog);
  if (!s && want) {
    const bool has = prog->code.text && strstr(prog->code.text, want);
    CHECK_MSG(has == present, "program text %s '%s'", present ? "lacks" : "holds", want);
  }
  if (!s) {
    s = kiln_module_wrap(prog, &mod);
    prog = NULL;
  }
  kiln_session_options_t so;
  kiln_session_options_default(&so);
  so.cache_dir = "";
  if (!s) s = kiln_session_create(mod, dev, &so, &ses);
  if (!s) s = kiln_session_run(ses, in, out);
  const bool ok = CHECK_OK(s);
  kiln_session_destroy(ses);
  kiln_module_release(mod);
  kiln_program_destroy(prog);
  return ok;
}

static bool run_plan(kiln_device_t* dev, kiln_plan_t* plan, const kiln_array_t* in, kiln_array_t* out) {
  return run_plan_text(dev, plan, in, out, NULL, false);
}

/* write_model's two inputs (32x96 and 1x16x20x20) into in[], element e
 * ((e * |a| + |b|) % |m|) / |d| - 1 */
static bool model_inputs(kiln_array_t in[2], size_t a, size_t b, size_t m, float d) {
  for (int32_t i = 0; i < 2; ++i) {
    const kiln_shape_t sh = i == 0 ? (kiln_shape_t){.rank = 2, .dims = {32, 96}}
                                   : (kiln_shape_t){.rank = 4, .dims = {1, 16, 20, 20}};
    if (!CHECK_OK(kiln_array_alloc(A(), KILN_DTYPE_F32, &sh, &in[i]))) return false;
    float* f = in[i].data;
    for (size_t e = 0; e < in[i].nbytes / sizeof(float); ++e) f[e] = (float)((e * a + b) % m) / d - 1.0f;
  }
  return true;
}

/* Winograd on or off per conv (kiln_template_set_t.winograd_switch) on
 * the device: the conv's Winograd instance (which reads X itself, its
 * phase split MERGED) has the implicit-GEMM conv as its alternative;
 * an off point is one point whatever its other tiles, and the last hint;
 * alone it matches the default (Winograd) program's outputs, with the
 * phase split before it; a cache record with the switch off puts the
 * conv and the phase split in the plan, whose outputs match the
 * default's, and the program records the Winograd record and the conv's
 * tiles; on again, the phase split leaves. */
static void test_winograd_switch(void) {
  char path[128];
  snprintf(path, sizeof path, "/tmp/kiln_test_vulkan_tune_s_%ld.onnx", (long)getpid());
  const bool written = write_model(path);
  CHECK(written);
  if (!written) return;
  kiln_graph_t* g = NULL;
  kiln_plan_t *pd = NULL, *pt = NULL;
  kiln_device_t* dev = NULL;
  kiln_tune_cache_t forced = {0};
  kiln_array_t in[2] = {{0}}, want[2] = {{0}}, got[2] = {{0}};
  kiln_program_t* prog = NULL;
  const kiln_target_t* target = kiln_target_find("vulkan");
  kiln_template_set_t set;
  kiln_program_templates(target, &set);
  kiln_device_open_options_t oo = {0, true, stderr};
  kiln_plan_options_t po = {KILN_TARGET_CLASS_GPU, 0, 65535, 0, 0, 0};
  kiln_fusion_report_t fr;
  if (!CHECK_OK(kiln_device_open("vulkan", &oo, A(), &dev)) || !CHECK_OK(load(path, &g))) goto out;
  if (!model_inputs(in, 37, 11, 101, 50)) goto out;
  kiln_tune_device_t where;
  kiln_tune_device_of(dev, &where);
  if (!CHECK_OK(kiln_plan_build(g, &po, A(), &pd)) || !CHECK_OK(kiln_plan_fuse(pd, &fr, NULL)) ||
      !CHECK_OK(kiln_template_choose(pd, &set)) || !run_plan(dev, pd, in, want))
    goto out;
  if (!CHECK_OK(kiln_plan_build(g, &po, A(), &pt)) || !CHECK_OK(kiln_plan_fuse(pt, &fr, NULL)) ||
      !CHECK_OK(kiln_template_select(pt, &set)))
    goto out;
  int32_t wk = -1;
  for (int32_t k = 0; k < pt->n_kernels; ++k)
    if (pt->kernels[k].tmpl && pt->kernels[k].tmpl->kind == KILN_TEMPLATE_WINOGRAD) wk = k;
  CHECK(wk >= 0);
  if (wk < 0) goto out;
  const kiln_template_t* w = pt->kernels[wk].tmpl;
  const int32_t phase = w->conv.phase_kernel;
  CHECK(w->alt && w->alt->kind == KILN_TEMPLATE_CONV && w->alt->tiles.n == 6 && w->conv.x_direct && phase >= 0 &&
        w->phase_merged && pt->kernels[phase].tmpl == w->phase_merged);
  kiln_template_tiles_t off = w->tiles, off2 = w->tiles;
  off.v[3] = off2.v[3] = 0;
  off2.v[0] = 16, off2.v[2] = 4;
  set.tiles_tie(w, &off);
  set.tiles_tie(w, &off2);
  const kiln_template_limits_t lim = {.max_workgroup_size = 1024, .local_mem_bytes = 32768, .loop_limit = 65535};
  CHECK(memcmp(off.v, off2.v, sizeof off.v) == 0 && set.tiles_check(w, &off, &lim) == NULL);
  kiln_template_tiles_t h[8];
  const int32_t nh = set.tiles_hints(w, h, 8);
  CHECK(nh >= 1 && h[nh - 1].v[3] == 0);

  /* alone, off against the default */
  kiln_tune_micro_t m;
  double tp = 0, td = 0;
  bool match = false;
  if (CHECK_OK(kiln_tune_micro_init(&m, pt, wk, target, &set, dev, 0, 7)) &&
      CHECK_OK(kiln_tune_micro_measure(&m, &off, 2, &tp, &td, &match, stdout)))
    CHECK_MSG(match && tp > 0 && td > 0, "the implicit-GEMM conv alone: match %d, %.3f vs %.3f ms", (int)match,
              1e3 * tp, 1e3 * td);
  kiln_tune_micro_free(&m);

  /* from a cache record */
  kiln_tune_record_t r = {.default_us = 100, .tuned_us = 80, .tiles = off};
  kiln_template_space_t sp;
  CHECK(set.space(w, &sp));
  r.key.fingerprint = kiln_template_fingerprint(w);
  snprintf(r.key.target, sizeof r.key.target, "vulkan");
  snprintf(r.key.space, sizeof r.key.space, "%s", sp.version);
  snprintf(r.key.device, sizeof r.key.device, "%s", where.device);
  snprintf(r.key.driver, sizeof r.key.driver, "%s", where.driver);
  snprintf(r.key.kiln, sizeof r.key.kiln, "%s", KILN_VERSION);
  CHECK_OK(kiln_tune_cache_put(&forced, &r, false));
  kiln_tune_use_report_t rep;
  if (!CHECK_OK(kiln_tune_choose(pt, &set, &forced, &where, stderr, &rep))) goto out;
  const kiln_template_t* c = pt->kernels[wk].tmpl;
  CHECK(rep.tuned == 1 && c->kind == KILN_TEMPLATE_CONV && c->weights.laid_out && pt->kernels[phase].tmpl == NULL);
  if (run_plan(dev, pt, in, got))
    for (int32_t i = 0; i < 2; ++i) {
      kiln_compare_result_t cr;
      kiln_compare(&got[i], &want[i], 1e-3, 1e-4, &cr);
      CHECK_MSG(cr.ok, "output %d, Winograd off vs on: %s", (int)i, cr.message);
    }
  kiln_program_build_options_t bo = {.model_name = "tune", .precision = "fp32", .options = "-O1"};
  if (CHECK_OK(kiln_program_build(pt, target, &bo, A(), &prog)) && CHECK_OK(kiln_tune_mark_program(pt, prog))) {
    int32_t marked = 0;
    for (int32_t j = 0; j < prog->n_kernels; ++j)
      if (prog->kernels[j].tuned) {
        marked++;
        CHECK_MSG(!strncmp(prog->kernels[j].tuned, "winograd 8,4,2,0 (off: conv ", 28), "recorded: %s",
                  prog->kernels[j].tuned);
      }
    CHECK_MSG(marked == 1, "%d kernels marked tuned", (int)marked);
  }
  forced.r[0].tiles.v[3] = 1;
  if (CHECK_OK(kiln_tune_choose(pt, &set, &forced, &where, stderr, &rep)))
    CHECK(pt->kernels[wk].tmpl->kind == KILN_TEMPLATE_WINOGRAD && pt->kernels[phase].tmpl &&
          pt->kernels[phase].tmpl->kind == KILN_TEMPLATE_MERGED); /* (new descriptors: the choice selects again) */
out:
  for (int32_t i = 0; i < 2; ++i) {
    kiln_array_free(A(), &in[i]);
    kiln_array_free(A(), &want[i]);
    kiln_array_free(A(), &got[i]);
  }
  kiln_program_destroy(prog);
  kiln_tune_cache_free(&forced);
  kiln_plan_destroy(pd);
  kiln_plan_destroy(pt);
  kiln_graph_destroy(g);
  kiln_device_release(dev);
  unlink(path);
}

/* |plan| built as kiln tune builds a whole model, into a session on |dev|
 * with reuse_code, run once into |out|; its pipelines and those reused. */
static bool closing_like(kiln_device_t* dev, kiln_plan_t* plan, const kiln_array_t* in, kiln_array_t* out,
                         int32_t* units, int32_t* reused) {
  kiln_program_t* prog = NULL;
  kiln_module_t* mod = NULL;
  kiln_session_t* ses = NULL;
  kiln_session_options_t so;
  kiln_tune_session_options(&so, 0, true);
  bool ok = CHECK_OK(kiln_tune_whole_program(plan, kiln_target_find("vulkan"), &prog)) &&
            CHECK_OK(kiln_module_wrap(prog, &mod));
  if (!ok) kiln_program_destroy(prog);
  ok = ok && CHECK_OK(kiln_session_create(mod, dev, &so, &ses)) && CHECK_OK(kiln_session_run(ses, in, out));
  *units = *reused = 0;
  if (ses) kiln_device_api_find("vulkan")->executable_units(ses->exe, units, reused);
  kiln_session_destroy(ses);
  kiln_module_release(mod);
  return ok;
}

/* kiln tune's closing build creates no kept point's pipeline again: the
 * kernels alone run on a second device of the same name (set-ups and
 * points with reuse_code, kiln_tune_code_shared), which shares the first's
 * VkDevice and pipelines. Each template kernel at a point built alone on
 * the second device, then the model with those points on the first: every
 * pipeline reused, the default build's outputs. With KILN_TUNE_REUSE=off
 * the points alone keep their pipelines, and the model creates the
 * changed kernels' (other points than the first pass's). */
static void test_closing_reuses_points(void) {
  char path[128];
  snprintf(path, sizeof path, "/tmp/kiln_test_vulkan_tune_c_%ld.onnx", (long)getpid());
  const bool written = write_model(path);
  CHECK(written);
  if (!written) return;
  kiln_graph_t* g = NULL;
  kiln_plan_t *pd = NULL, *pt = NULL;
  kiln_device_t *dev = NULL, *dev2 = NULL;
  kiln_array_t in[2] = {{0}}, want[2] = {{0}}, got[2] = {{0}};
  kiln_tune_micro_t m[8];
  int32_t n_m = 0, units = 0, reused = 0;
  const kiln_target_t* target = kiln_target_find("vulkan");
  kiln_template_set_t set;
  kiln_program_templates(target, &set);
  kiln_device_open_options_t oo = {0, true, stderr};
  kiln_plan_options_t po = {KILN_TARGET_CLASS_GPU, 0, 65535, 0, 0, 0};
  kiln_fusion_report_t fr;
  if (!CHECK_OK(kiln_device_open("vulkan", &oo, A(), &dev)) || !CHECK_OK(kiln_device_open("vulkan", &oo, A(), &dev2)) ||
      !CHECK_OK(load(path, &g)))
    goto out;
  CHECK(kiln_tune_code_shared(dev));
  if (!model_inputs(in, 29, 5, 97, 48)) goto out;
  kiln_tune_device_t where;
  kiln_tune_device_of(dev, &where);
  set.gpu_lacks = where.limits.gpu_lacks;
  /* the default build (kiln tune's first whole-model build) */
  if (!CHECK_OK(kiln_plan_build(g, &po, A(), &pd)) || !CHECK_OK(kiln_plan_fuse(pd, &fr, NULL)) ||
      !CHECK_OK(kiln_template_select(pd, &set)) || !CHECK_OK(kiln_template_weights_lay_out(pd)) ||
      !closing_like(dev, pd, in, want, &units, &reused))
    goto out;
  CHECK_MSG(units >= 3 && reused == 0, "default build: %d of %d pipelines reused", (int)reused, (int)units);
  kiln_template_weights_restore(pd); /* as kiln tune: the points' layouts are made from the packed weights */
  /* a set-up on the second device takes the default build's pipeline:
   * none created (kiln tune's count of the memo's units,
   * kiln_tune_kept_cost_s) */
  for (int32_t k = 0; k < pd->n_kernels; ++k) {
    const kiln_template_t* t = kiln_template_tunable_of(pd, k);
    kiln_template_space_t sp;
    if (!t || !set.space(t, &sp)) continue;
    kiln_tune_micro_t* mk = &m[n_m++];
    if (CHECK_OK(kiln_tune_micro_init(mk, pd, k, target, &set, dev2, 0, 7)))
      CHECK_MSG(mk->units_new == 0, "kernel %d set up: %d pipelines created", (int)k, (int)mk->units_new);
    break;
  }
  kiln_template_tiles_t pts[64];
  CHECK(pd->n_kernels <= 64);
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) setenv("KILN_TUNE_REUSE", "off", 1); /* the points alone keep their pipelines */
    const int32_t first = n_m;
    const int32_t changed = tp_points_alone(pd, target, &set, &where, dev2, pass, m, &n_m, 8, pts, 64);
    CHECK_MSG(changed == 3, "%d kernels moved", (int)changed);
    for (int32_t i = first; i < n_m; ++i) {
      /* a point's pipeline is new (counted where shared); the closing
       * build's plan: a shared point is free (its pipeline is in the
       * memo), one built apart costs its compile */
      if (pass == 0) CHECK_MSG(m[i].units_new >= 1, "point %d: %d pipelines created", (int)i, (int)m[i].units_new);
      const double kept = kiln_tune_kept_cost_s(m[i].reuse_code, 64, 0.1, m[i].driver_s, 0.1, 0.1);
      CHECK_MSG(pass == 0 ? kept == 0 : kept > 0, "pass %d: a kept point planned at %.3f s", pass, kept);
    }
    /* the points in a fresh plan, weights laid out for them (as the tune's
     * closing build) */
    kiln_plan_destroy(pt);
    pt = NULL;
    if (!CHECK_OK(kiln_plan_build(g, &po, A(), &pt)) || !CHECK_OK(kiln_plan_fuse(pt, &fr, NULL)) ||
        !CHECK_OK(kiln_template_select(pt, &set)))
      break;
    for (int32_t k = 0; k < pt->n_kernels && k < 64; ++k) {
      kiln_template_t* t = kiln_template_tunable_of(pt, k);
      if (!t || !memcmp(pts[k].v, t->tiles.v, sizeof pts[k].v)) continue;
      t->tiles = pts[k];
      t = kiln_template_switch(pt, k);
      if (t && t->weights.layout != KILN_TEMPLATE_W_PACKED && set.weight_blocks) set.weight_blocks(t);
    }
    if (CHECK_OK(kiln_template_weights_lay_out(pt)) && closing_like(dev, pt, in, got, &units, &reused)) {
      for (int32_t i = 0; i < 2; ++i) {
        kiln_compare_result_t cr;
        kiln_compare(&got[i], &want[i], 1e-3, 1e-4, &cr);
        CHECK_MSG(cr.ok, "output %d, the points' model vs the default's: %s", (int)i, cr.message);
      }
      if (pass == 0)
        CHECK_MSG(units >= 3 && reused == units, "points shared: the model reused %d of %d pipelines", (int)reused,
                  (int)units);
      else /* the changed kernels' pipelines created, the rest reused */
        CHECK_MSG(units >= 3 && reused == units - changed, "points not shared: the model reused %d of %d pipelines",
                  (int)reused, (int)units);
    }
    for (int32_t i = 0; i < 2; ++i) kiln_array_free(A(), &got[i]);
  }
  unsetenv("KILN_TUNE_REUSE");
out:
  for (int32_t i = 0; i < n_m; ++i) kiln_tune_micro_free(&m[i]);
  for (int32_t i = 0; i < 2; ++i) {
    kiln_array_free(A(), &in[i]);
    kiln_array_free(A(), &want[i]);
  }
  kiln_plan_destroy(pd);
  kiln_plan_destroy(pt);
  kiln_graph_destroy(g);
  kiln_device_release(dev2);
  kiln_device_release(dev);
  unlink(path);
}

/* The model planned as a compile with --precision fp16 [--fp16-accumulate]
 * on a device with f16 arithmetic makes it, templates chosen with |set|. */
static bool plan_fp16(const kiln_graph_t* g, const kiln_template_set_t* set, bool accumulate, kiln_plan_t** out) {
  kiln_plan_options_t po = {KILN_TARGET_CLASS_GPU, 0, 65535, 0, 0, 4};
  kiln_fusion_report_t fr;
  kiln_precision_options_t pr = {.mode = KILN_PRECISION_FP16, .fp16_arith = true, .fp16_accumulate = accumulate};
  kiln_precision_report_t rep;
  memset(&rep, 0, sizeof rep);
  const bool ok = CHECK_OK(kiln_plan_build(g, &po, A(), out)) && CHECK_OK(kiln_plan_fuse(*out, &fr, NULL)) &&
                  CHECK_OK(kiln_plan_set_precision(*out, &pr, &rep)) && CHECK_OK(kiln_template_select(*out, set)) &&
                  CHECK_OK(kiln_template_weights_lay_out(*out));
  kiln_precision_report_free(&rep);
  return ok;
}

/* f16 sums as a knob (gemm.comp / conv.comp AF16): with --fp16-accumulate
 * (the kernels the GEMM and conv instances replace keep f16 accumulators)
 * their records gain h, in a space of its own and with another
 * fingerprint; lavapipe's rules keep f32 sums (h 0), the GPU rules take
 * f16 ones in their shared-memory tiles; h 1 is refused outside modes 0
 * and 1 and offered as a hint; without --fp16-accumulate nothing changes.
 * On the device, both instances with h 1 print AF16, run, and match the
 * f32 sums within kiln_tune_tolerance's f16 bound (and not within the f32
 * one, which shows the sums really are f16). */
static void test_f16_sums(void) {
  char path[128];
  snprintf(path, sizeof path, "/tmp/kiln_test_vulkan_tune_h_%ld.onnx", (long)getpid());
  const bool written = write_model(path);
  CHECK(written);
  if (!written) return;
  kiln_graph_t* g = NULL;
  kiln_plan_t *p32 = NULL, *ph = NULL, *pg = NULL;
  kiln_device_t* dev = NULL;
  kiln_array_t in[2] = {{0}}, o0[2] = {{0}}, o1[2] = {{0}};
  kiln_template_set_t set;
  kiln_program_templates(kiln_target_find("vulkan"), &set);
  CHECK(set.f16_sums);
  set.gemm_rules.f16_min_work = 0; /* the model's small f16 MatMul as the GEMM template too */
  const kiln_template_limits_t lim = {.max_workgroup_size = 1024, .local_mem_bytes = 32768, .loop_limit = 65535};
  if (!CHECK_OK(load(path, &g)) || !plan_fp16(g, &set, false, &p32) || !plan_fp16(g, &set, true, &ph)) goto out;
  kiln_template_set_t gset = set;
  gset.gpu_lacks |= KILN_GPU_CLASS_GPU;
  if (!plan_fp16(g, &gset, true, &pg)) goto out;
  int32_t seen = 0;
  for (int32_t k = 0; k < ph->n_kernels; ++k) {
    kiln_template_t* t = ph->kernels[k].tmpl;
    const kiln_template_t* t32 = p32->kernels[k].tmpl;
    const kiln_template_t* tg = pg->kernels[k].tmpl;
    if (!t || (t->kind != KILN_TEMPLATE_GEMM && t->kind != KILN_TEMPLATE_CONV)) continue;
    ++seen;
    CHECK_MSG(t->f16_sums && t->tiles.n == 7 && t->tiles.v[6] == 0, "kernel %d: f16 sums %d, %d tiles, h %d", (int)k,
              (int)t->f16_sums, (int)t->tiles.n, (int)t->tiles.v[6]);
    CHECK(t32 && t32->kind == t->kind && !t32->f16_sums && t32->tiles.n == 6);
    CHECK(t32 && kiln_template_fingerprint(t32) != kiln_template_fingerprint(t));
    CHECK_MSG(tg && tg->f16_sums && tg->tiles.n == 7 && tg->tiles.v[5] == 1 && tg->tiles.v[6] == 1,
              "kernel %d: the GPU rules' default is not f16 sums in shared memory", (int)k);
    kiln_template_space_t sp;
    const bool has_space = set.space(t, &sp);
    CHECK(has_space);
    if (!has_space) continue;
    CHECK(strstr(sp.version, "-h") != NULL && sp.n_knobs == 7 && !strcmp(sp.knobs[6].name, "h"));
    CHECK(in_space(&sp, &t->tiles) && set.tiles_check(t, &t->tiles, &lim) == NULL);
    kiln_template_tiles_t x = t->tiles;
    x.v[6] = 1; /* in a subgroup mode: refused */
    CHECK(x.v[5] >= 2 && set.tiles_check(t, &x, &lim) != NULL);
    x = (kiln_template_tiles_t){.n = 7, .v = {16, 16, 8, 4, 4, 1, 1}};
    CHECK_MSG(set.tiles_check(t, &x, &lim) == NULL, "kernel %d: %s", (int)k, set.tiles_check(t, &x, &lim));
    x.v[6] = 2;
    CHECK(set.tiles_check(t, &x, &lim) != NULL);
    x.n = 6;
    CHECK(set.tiles_check(t, &x, &lim) != NULL); /* the record has 7 entries here */
    kiln_template_tiles_t hs[12];
    const int32_t nh = set.tiles_hints(t, hs, 12);
    int32_t with_h = 0;
    for (int32_t i = 0; i < nh; ++i) {
      set.tiles_tie(t, &hs[i]);
      with_h += hs[i].n == 7 && hs[i].v[6] == 1 && in_space(&sp, &hs[i]) && !set.tiles_check(t, &hs[i], &lim);
    }
    CHECK_MSG(with_h >= 1, "kernel %d: no usable hint with f16 sums", (int)k);
    /* the device run below: this instance in mode 1 with f16 sums */
    t->tiles = (kiln_template_tiles_t){.n = 7, .v = {16, 16, 8, 4, 4, 1, 1}};
  }
  CHECK_MSG(seen == 2, "%d GEMM / conv instances", (int)seen);
  {
    /* a Winograd instance (f32 sums) whose implicit-GEMM alternative sums
     * in f16: its switched-off points are checked with the f16 bound */
    kiln_template_t a = {.kind = KILN_TEMPLATE_CONV, .f16_sums = true};
    kiln_template_t w = {.kind = KILN_TEMPLATE_WINOGRAD, .alt = &a, .tiles = {.n = 5, .v = {8, 4, 2, 0, 1}}};
    a.alt = &w;
    kiln_template_tiles_t on = w.tiles, off = w.tiles;
    off.v[4] = 0;
    CHECK(!kiln_tune_point_f16_sums(&w, &on) && kiln_tune_point_f16_sums(&w, &off));
    a.f16_sums = false;
    CHECK(!kiln_tune_point_f16_sums(&w, &off) && !kiln_tune_point_f16_sums(NULL, &off));
    CHECK(kiln_tune_point_f16_sums(&(kiln_template_t){.kind = KILN_TEMPLATE_CONV, .f16_sums = true}, &on));
  }
  kiln_device_open_options_t oo = {0, true, stderr};
  kiln_status_t s = kiln_device_open("vulkan", &oo, A(), &dev);
  if (s) {
    printf("no Vulkan device: %s\n", kiln_status_message(s));
    kiln_status_free(s);
    goto out;
  }
  if (!dev->info.fp16_arith) {
    printf("the Vulkan device has no f16 arithmetic: device part skipped\n");
    goto out;
  }
  if (!model_inputs(in, 7, 3, 23, 11.0f)) goto out;
  /* f32 sums (lavapipe's default tiles), then f16 ones at 16,16,8,4,4,1,1 */
  if (!CHECK_OK(kiln_template_weights_lay_out(ph))) goto out;
  if (!run_plan_text(dev, p32, in, o0, "#define AF16 1", false) ||
      !run_plan_text(dev, ph, in, o1, "#define AF16 1", true))
    goto out;
  bool any = false;
  for (int32_t k = 0; k < ph->n_kernels; ++k) any = any || (ph->kernels[k].tmpl && ph->kernels[k].tmpl->f16_sums);
  for (int32_t i = 0; i < 2; ++i) {
    double rtol, atol;
    kiln_tune_tolerance(any, &o0[i], &rtol, &atol);
    CHECK(rtol > 1e-3);
    kiln_compare_result_t cr;
    kiln_compare(&o1[i], &o0[i], rtol, atol, &cr);
    CHECK_MSG(cr.ok, "output %d, f16 sums against f32 sums: %s", (int)i, cr.message);
    printf("output %d, f16 sums against f32 sums: %s\n", (int)i, cr.message);
    kiln_tune_tolerance(false, &o0[i], &rtol, &atol);
    kiln_compare(&o1[i], &o0[i], rtol, atol, &cr);
    CHECK_MSG(!cr.ok, "output %d: f16 sums within the f32 sums' tolerance (f32 arithmetic?)", (int)i);
  }
out:
  for (int32_t i = 0; i < 2; ++i) {
    kiln_array_free(A(), &in[i]);
    kiln_array_free(A(), &o0[i]);
    kiln_array_free(A(), &o1[i]);
  }
  kiln_plan_destroy(p32);
  kiln_plan_destroy(ph);
  kiln_plan_destroy(pg);
  kiln_graph_destroy(g);
  kiln_device_release(dev);
  unlink(path);
}

static void test_winograd_space(void) { test_winograd_space_run(false); }
static void test_winograd_space_all(void) { test_winograd_space_run(true); }

static void test_tune_on_device(void) {
  char path[128];
  snprintf(path, sizeof path, "/tmp/kiln_test_vulkan_tune_d_%ld.onnx", (long)getpid());
  const bool written = write_model(path);
  CHECK(written);
  if (!written) return;
  kiln_graph_t* g = NULL;
  kiln_device_t* dev = NULL;
  kiln_tune_cache_t cache = {0};
  const kiln_target_t* target = kiln_target_find("vulkan");
  kiln_device_open_options_t oo = {0, true, stderr};
  kiln_status_t s = kiln_device_open("vulkan", &oo, A(), &dev);
  if (s) {
    printf("no Vulkan device: %s\n", kiln_status_message(s));
    kiln_status_free(s);
    CHECK(false);
    goto out;
  }
  if (!CHECK_OK(load(path, &g))) goto out;
  kiln_tune_options_t o;
  kiln_tune_options_default(&o);
  const bool wino = getenv("KILN_SPIRV_WINOGRAD") == NULL;
  o.budget_s = wino ? 600 : 120;
  /* the first hint of each kernel (the Winograd instance's: F(2x2)
   * where the default is F(4x4), its weights re-laid out) */
  o.trials = 1;
  o.repeats = 2;
  o.log = stdout;
  kiln_tune_summary_t sum;
  if (!CHECK_OK(kiln_tune_model(g, target, dev, &o, &cache, &sum))) goto out;
  printf("\n");
  CHECK_MSG(sum.kernels == 3, "%d kernels", (int)sum.kernels);
  CHECK_MSG(sum.elapsed_s < 1.05 * o.budget_s, "a %.0f s budget took %.1f s", o.budget_s, sum.elapsed_s);
  /* every candidate matched the default's output */
  CHECK_MSG(sum.trials >= (wino ? 1 : 2) && sum.rejected == 0, "%d trials, %d rejected", (int)sum.trials, (int)sum.rejected);
  CHECK(cache.n == sum.kernels);
  for (int32_t i = 0; i < cache.n; ++i) {
    CHECK(!strcmp(cache.r[i].key.target, "vulkan") && !strncmp(cache.r[i].key.space, "vulkan.", 7));
    CHECK_MSG(cache.r[i].tuned_us <= cache.r[i].default_us, "record %d slower than its default", (int)i);
  }
out:
  kiln_tune_cache_free(&cache);
  kiln_graph_destroy(g);
  kiln_device_release(dev);
  unlink(path);
}

/* The SPIR-V of a GLSL text compiled before in the process
 * (vulkan_compile.c, which `kiln tune`'s repeated builds of the same
 * shaders take): the same text gives the same blob as a fresh compile
 * with the memo off, another text its own, and a text that fails still
 * fails the second time (failures are not kept). */
static void test_spirv_memo(void) {
  static const char* ok1 = "#version 450\nlayout(local_size_x = 8) in;\n"
                           "layout(std430, binding = 0) buffer B { float b[]; };\n"
                           "void main() { b[gl_GlobalInvocationID.x] *= 2.0; }\n";
  static const char* ok2 = "#version 450\nlayout(local_size_x = 8) in;\n"
                           "layout(std430, binding = 0) buffer B { float b[]; };\n"
                           "void main() { b[gl_GlobalInvocationID.x] += 3.0; }\n";
  static const char* bad = "#version 450\nlayout(local_size_x = 8) in;\nvoid main() { undefined_name = 1; }\n";
  uint8_t *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  uint64_t la = 0, lb = 0, lc = 0, ld = 0;
  setenv("KILN_SPIRV_MEMO", "off", 1);
  CHECK_OK(kiln_spirv_compile_glsl("memo", ok1, A(), &d, &ld));
  unsetenv("KILN_SPIRV_MEMO");
  CHECK_OK(kiln_spirv_compile_glsl("memo", ok1, A(), &a, &la));
  CHECK_OK(kiln_spirv_compile_glsl("memo2", ok1, A(), &b, &lb));
  CHECK_OK(kiln_spirv_compile_glsl("memo", ok2, A(), &c, &lc));
  CHECK(a && b && c && d && la == lb && la == ld && !memcmp(a, b, la) && !memcmp(a, d, la));
  CHECK(a && c && (la != lc || memcmp(a, c, la)));
  for (int i = 0; i < 2; ++i) {
    uint8_t* e = NULL;
    uint64_t le = 0;
    kiln_status_t s = kiln_spirv_compile_glsl("memo_bad", bad, A(), &e, &le);
    CHECK(s != NULL && e == NULL);
    kiln_status_free(s);
  }
  uint8_t* p[4] = {a, b, c, d};
  for (int i = 0; i < 4; ++i)
    if (p[i]) A().free(A().self, p[i]);
}

/* Argument "winograd" (ctest test_vulkan_tune_winograd, label slow:
 * glslang and lavapipe compile an F(4x4) shader for tens of seconds on a
 * loaded machine): every accepted Winograd point compiled, and the tune on
 * the device with the conv as a Winograd instance. */
int main(int argc, char** argv) {
  const double t0 = now_s();
  if (argc > 1 && !strcmp(argv[1], "winograd")) {
    RUN(test_winograd_space_all);
    RUN(test_tune_on_device);
    printf("winograd tune %.1f s\n", now_s() - t0);
    return kiln_test_finish();
  }
  RUN(test_winograd_space);
  RUN(test_winograd_switch);
  RUN(test_spirv_memo);
  /* the model's 3x3 conv as the implicit-GEMM conv template (by default
   * a Winograd instance, searched by the Winograd cases) */
  setenv("KILN_SPIRV_WINOGRAD", "off", 1);
  const double t1 = now_s();
  RUN(test_closing_reuses_points);
  RUN(test_space);
  RUN(test_f16_sums);
  const double t2 = now_s();
  RUN(test_tune_on_device);
  printf("winograd space %.1f s, space %.1f s, tune %.1f s\n", t1 - t0, t2 - t1, now_s() - t2);
  return kiln_test_finish();
}
