/* The Vulkan target's tile rules as lowering's template set reads them
 * (kiln_template_set_t.tiles, lowering/template.h): every instance's
 * tiles are chosen during kiln_template_choose, from the defaults and the
 * KILN_SPIRV_{GEMM,CONV}_TILES overrides, and recorded in the descriptor;
 * the emitter reads them back here. The Vulkan templates read the
 * lowering's packed weights as they are (no weight layout of their own). */
#include "targets/vulkan/vulkan_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Record orders: GEMM / conv tm,tn,tk,rm,rn,shared[,h]; depthwise wg,rw. */
static kiln_template_tiles_t record(const kiln_spirv_gemm_tiles_t* t) {
  return (kiln_template_tiles_t){.n = 6, .v = {t->tm, t->tn, t->tk, t->rm, t->rn, t->shared}};
}

/* A GEMM / conv instance's record from its tiles |g|: where it may sum in
 * f16 (t->f16_sums) a seventh entry, h: the override's (|env|'s seventh
 * value, 0 when it has six), else 1 under the GPU rules in the
 * shared-memory and direct modes (a mobile GPU runs f16 arithmetic at up
 * to twice its f32 rate, and the compile's --fp16-accumulate asked for
 * it), 0 elsewhere: lavapipe has no f16 arithmetic of its own (LLVM
 * widens it to f32 with conversions around every operation: printed
 * kernels with --fp16-accumulate ran a 64 -> 64 3x3 conv in 276 ms
 * against 145 ms with f32 sums, a 256 x 512 x 512 MatMul in 112 against
 * 46 ms). The tuner tries the other value (vulkan_tune.c). */
static void put_record(kiln_template_t* t, const kiln_spirv_gemm_tiles_t* g, const char* env, bool gpu) {
  t->tiles = record(g);
  if (!t->f16_sums) return;
  kiln_spirv_gemm_tiles_t e;
  const int32_t h = kiln_vulkan_tiles_from_env(env, &e) ? e.h : gpu && g->shared <= 1;
  t->tiles.v[t->tiles.n++] = h;
}

/* |t| (M x N outputs) as the device can run it: the subgroup mode needs
 * ballot operations in compute shaders (else the shared-memory tiles of
 * 64 x 64 x 16, 8 x 8 per invocation, smaller for narrow problems) and its
 * 64-bit pair reads need shaderInt64 (else mode 3, 32-bit reads). */
static kiln_spirv_gemm_tiles_t fit(kiln_spirv_gemm_tiles_t t, int64_t M, int64_t N, uint32_t lacks) {
  if (t.shared >= 2 && (lacks & KILN_GPU_LACKS_SUBGROUP)) {
    t.shared = 1;
    t.tm = M >= 64 ? 64 : M >= 32 ? 32 : 16;
    t.tn = N >= 64 ? 64 : N >= 32 ? 32 : 16;
    t.tk = 16;
    t.rm = t.tm / 8;
    t.rn = t.tn / 8;
  } else if (t.shared == 2 && (lacks & KILN_GPU_LACKS_INT64)) {
    t.shared = 3;
  }
  return t;
}

/* conv.comp reads vec4 texels (mode 4) for f32 weights and input (f16
 * ones too where the device binds rgba16f texel buffers), weights
 * in panels of a multiple of 4 channels (the Vulkan panels where the
 * weights are the conv's own) and 16 or 32 channels a work-group */
static bool texel_ok(const kiln_template_t* t, const kiln_spirv_gemm_tiles_t* d) {
  const kiln_template_conv_t* c = &t->conv;
  return kiln_vulkan_conv_texel_types(t) && d->tm % 16 == 0 && d->rn % 4 == 0 &&
         (t->weights.layout == KILN_TEMPLATE_W_TILED || c->pt % 4 == 0);
}

bool kiln_vulkan_conv_texel_types(const kiln_template_t* t) {
  const kiln_template_conv_t* c = &t->conv;
  const bool f16_texels = !(t->device.gpu_lacks & KILN_GPU_LACKS_TEXEL_F16);
  for (int32_t j = 0; j < c->n_params; ++j)
    if ((c->roles[j] == 'W' || c->roles[j] == 'X') && c->f16[j] && !f16_texels) return false;
  return true;
}

/* ---- the GPU rules (KILN_GPU_CLASS_GPU) ----------------------------------
 * A real GPU runs a work-group's invocations as subgroups of 32 (NVIDIA),
 * 64 (AMD, Adreno), 16 (Intel, Mali) lanes and keeps many work-groups
 * resident per core: lavapipe's 8-invocation work-groups (one SIMD of 8
 * lanes there) would fill a quarter of an NVIDIA warp. So on a GPU the
 * templates take work-groups of 64-256 invocations: GEMM and conv in the
 * shared-memory mode (gemm.comp / conv.comp SHARED 1, the usual desktop
 * GPU GEMM: a work-group stages TM x TK of A and TK x TN of B in shared
 * memory, each invocation 8 x 8 or 4 x 4 outputs, as CLBlast's and ncnn's
 * defaults do), depthwise, pool and Winograd work-groups of 64. NOT
 * MEASURED ON A GPU YET (no session had one): starting points for
 * `kiln tune` there, only checked for correctness on lavapipe with
 * KILN_VULKAN_RULES=gpu. Every size here is a multiple of 64 invocations
 * (any subgroup size up to 64 divides it) and at most 256 (every desktop
 * and mobile Vulkan GPU allows 256; the spec's minimum is 128); the shared
 * tiles stay under 16 KiB (the spec's minimum). */

/* A GEMM of M x N outputs (the same rule serves the implicit-GEMM conv,
 * M channels x N positions): 128 x 128 tiles with 16 x 16 invocations of
 * 8 x 8 outputs (TK 8: two buffers of 8 x 256 floats, 16 KiB, gemm.comp
 * DB) where they give 128 work-groups or more and the device runs 256
 * invocations a work-group (|dev|'s max_workgroup_size: Vulkan's minimum is
 * 128; unknown, 0, counts as less) (a wave on a GPU of 100-132 SMs: an H100 has
 * 132, so a 1024 x 1024 product's 64 such tiles would leave half of them
 * idle, capping it at 48% of the peak; NOT MEASURED, device_check.sh's
 * sgemm sizes show it); else 64 x 64
 * with 8 x 8 invocations of 8 x 8; where that leaves fewer than 64
 * work-groups, 32 x 32 tiles of 8 x 8 invocations of 4 x 4 (more
 * work-groups for the small layers of a batch-1 CNN); rows or columns
 * under 32 take 16 (8 x 8 invocations of 2 x 2 there). */
static kiln_spirv_gemm_tiles_t gpu_gemm_tiles(int64_t M, int64_t N, const kiln_template_limits_t* dev) {
  const int64_t g128 = ((M + 127) / 128) * ((N + 127) / 128), g64 = ((M + 63) / 64) * ((N + 63) / 64);
  if (M >= 128 && N >= 128 && g128 >= 128 && dev->max_workgroup_size >= 256)
    return (kiln_spirv_gemm_tiles_t){.tm = 128, .tn = 128, .tk = 8, .rm = 8, .rn = 8, .shared = 1};
  kiln_spirv_gemm_tiles_t t = {.tk = 16, .shared = 1};
  t.tm = M >= 64 && g64 >= 64 ? 64 : M >= 32 ? 32 : 16;
  t.tn = N >= 64 && g64 >= 64 ? 64 : N >= 32 ? 32 : 16;
  t.rm = t.tm / 8;
  t.rn = t.tn / 8;
  return t;
}

kiln_spirv_gemm_tiles_t kiln_spirv_gemm_gpu_tiles(int64_t M, int64_t N, const kiln_template_limits_t* dev) {
  kiln_spirv_gemm_tiles_t g;
  if (!kiln_vulkan_tiles_from_env("KILN_SPIRV_GEMM_TILES", &g)) g = gpu_gemm_tiles(M, N, dev);
  return fit(g, M, N, dev->gpu_lacks);
}

bool kiln_vulkan_gpu_rules(uint32_t gpu_lacks) { return (gpu_lacks & KILN_GPU_CLASS_GPU) != 0; }

/* The GPU rules' tiles for |t| (kiln_vulkan_template_tiles on a GPU); the
 * KILN_SPIRV_{GEMM,CONV,WINO}_TILES overrides still apply. */
static void gpu_tiles(kiln_template_t* t, uint32_t lacks) {
  kiln_spirv_gemm_tiles_t g;
  if (t->kind == KILN_TEMPLATE_GEMM) {
    g = kiln_spirv_gemm_gpu_tiles(t->gemm.M, t->gemm.N, &t->device);
    put_record(t, &g, "KILN_SPIRV_GEMM_TILES", true);
  } else if (t->kind == KILN_TEMPLATE_CONV) {
    if (!kiln_vulkan_tiles_from_env("KILN_SPIRV_CONV_TILES", &g)) g = gpu_gemm_tiles(t->conv.M, t->conv.Q, &t->device);
    g = fit(g, t->conv.M, t->conv.Q, lacks);
    put_record(t, &g, "KILN_SPIRV_CONV_TILES", true);
  } else if (t->kind == KILN_TEMPLATE_WINOGRAD) {
    /* 4 channels x 4 tiles an invocation (F(2x2): 256 sums, F(4x4) where
     * the weights were laid out for it: 576), the fewest registers in the
     * space: lavapipe's 8 x 4 F(4x4) holds 1152 sums, past a GPU
     * invocation's registers; 64 invocations a work-group (emit) */
    kiln_vulkan_wino_tiles_t w = kiln_vulkan_wino_default_tiles(t);
    if (!getenv("KILN_SPIRV_WINO_TILES")) w.tm = 4, w.nt = 4;
    if (t->weights.layout != KILN_TEMPLATE_W_WINOGRAD4) w.wf = 2;
    t->tiles = (kiln_template_tiles_t){.n = 3, .v = {w.tm, w.nt, w.wf}};
  } else if (t->kind == KILN_TEMPLATE_DEPTHWISE) {
    /* 64 invocations of up to 8 outputs of a row (16 in the flat form) */
    int32_t rw = t->dw.ow >= 8 ? 8 : t->dw.ow > 0 ? (int32_t)t->dw.ow : 1;
    if (kiln_vulkan_dw_flat(&t->dw, 64, KILN_VULKAN_DW_FLAT_RW)) rw = KILN_VULKAN_DW_FLAT_RW;
    t->tiles = (kiln_template_tiles_t){.n = 2, .v = {64, rw}};
  }
}

void kiln_vulkan_template_tiles(kiln_template_t* t) {
  const uint32_t gpu_lacks = t->device.gpu_lacks;
  t->tiles = (kiln_template_tiles_t){0};
  if (kiln_vulkan_gpu_rules(gpu_lacks) && t->kind != KILN_TEMPLATE_Q8) {
    gpu_tiles(t, gpu_lacks);
    return;
  }
  if (t->kind == KILN_TEMPLATE_GEMM) {
    const kiln_spirv_gemm_t g = kiln_vulkan_gemm_of(&t->gemm);
    kiln_spirv_gemm_tiles_t d = kiln_spirv_gemm_default_tiles_k(g.M, g.N, g.K), env;
    /* few static rows (gemv): their own columns an invocation */
    if (!g.m_a && !kiln_vulkan_tiles_from_env("KILN_SPIRV_GEMM_TILES", &env)) kiln_spirv_gemv_tiles(g.M, g.N, &d);
    const kiln_spirv_gemm_tiles_t gt = fit(d, g.M, g.N, gpu_lacks);
    put_record(t, &gt, "KILN_SPIRV_GEMM_TILES", false);
  } else if (t->kind == KILN_TEMPLATE_CONV) {
    kiln_spirv_gemm_tiles_t d = kiln_spirv_conv_default_tiles(t->conv.M, t->conv.Q), env;
    if (d.shared == 4 && !texel_ok(t, &d)) { /* mode 2 with 4 positions (compile time) */
      d.shared = 2;
      d.rn = d.rn > 4 ? 4 : d.rn;
      d.tn = 8 * d.rn;
      if (t->conv.M <= 16 && d.tm == 32) d.tm = d.rm = 16; /* mode 2 loads every row of its tile */
    }
    /* 1x1 convs on grids of 128 positions or more: 16 channels x 16
     * positions per invocation (lavapipe: the same weight texels serve
     * twice the positions and half as many sums stay on the stack;
     * MobileNetV2's 1x1 convs on 14x14 to 112x112 planes about 10% faster
     * than 32 x 8; on 7x7 grids a work-group of 128 positions idles half) */
    if (d.shared == 4 && t->conv.T == 1 && t->conv.Q >= 128 && !kiln_vulkan_tiles_from_env("KILN_SPIRV_CONV_TILES", &env)) {
      d.tm = d.rm = 16;
      d.rn = 16;
      d.tn = 8 * d.rn;
    }
    /* 1x1 convs in mode 4: 4 K steps a loop trip, each sum taking its 4
     * products in a row (conv.comp KREUSE; lavapipe, MobileNetV2's 1x1
     * convs in all, --profile: TK 2 about 19% less time than the previous
     * order, TK 4 about 23%, TK 8 about 15%) */
    if (d.shared == 4 && t->conv.T == 1 && !kiln_vulkan_tiles_from_env("KILN_SPIRV_CONV_TILES", &env)) d.tk = 4;
    /* 1x1 convs on grids under 512 positions (MobileNetV2's 14x14 and 7x7
     * planes): the work-group split into 4 position groups x 2 channel
     * groups of 16 (conv.comp, LY > 1), RN (12-20) chosen so that 4 RN
     * covers the grid with the fewest idle positions (49: 16, 196: 20 ->
     * 240 of them against 256 for 8 x 16); an invocation's 16 x RN tile
     * needs 4 + RN/4 texel fetches per K step where 32 x 8 needed 10
     * (lavapipe fetches a texel per lane, the weights' too: most of such a
     * conv's time). RN 28 (196 -> 224) ran MobileNetV2's 14x14 1x1 convs
     * ~13% faster against ~3% for 20, but its 448 sums made the model's
     * cold compile + first run 27% longer (26-27 s against 20.5-21).
     * KILN_SPIRV_CONV_SPLIT=off keeps the tiles above, =all takes the
     * split for every 1x1 conv (the same within the noise elsewhere). */
    const char* split = getenv("KILN_SPIRV_CONV_SPLIT");
    /* 17-31 channels on grids of 512 positions or more (MobileNetV2's 96
     * -> 24 and 144 -> 24 56x56 project convs): one tile of 32 channels,
     * each invocation all of them (conv.comp reads and sums only the
     * ceil(M/4)*4 below M where one tile holds M) x 16 positions, where the
     * split's two channel groups of 16 computed 32 (a third of them past M
     * for 24) and read each position's X twice: per 16 positions and K
     * step 6 + 4 texel fetches and 384 products against 8 + 8 and 512 */
    if (d.shared == 4 && texel_ok(t, &d) && t->conv.T == 1 && t->conv.Q >= 512 && t->conv.M > 16 &&
        t->conv.M < 32 && !(split && (!strcmp(split, "all") || !strcmp(split, "off"))) &&
        !kiln_vulkan_tiles_from_env("KILN_SPIRV_CONV_TILES", &env)) {
      d.tm = d.rm = 32;
      d.rn = 16;
      d.tn = 8 * d.rn;
    }
    if (d.shared == 4 && texel_ok(t, &d) && t->conv.T == 1 &&
        (t->conv.Q < 512 || (split && !strcmp(split, "all"))) &&
        !(split && !strcmp(split, "off")) &&
        !kiln_vulkan_tiles_from_env("KILN_SPIRV_CONV_TILES", &env)) {
      int64_t best = 0;
      for (int32_t rn = 12; rn <= 20; rn += 4) {
        const int64_t cover = (t->conv.Q + 4 * rn - 1) / (4 * rn) * (4 * rn);
        if (!best || cover <= best) best = cover, d.rn = rn;
      }
      d.rm = 16;
      d.tm = 32;
      d.tn = 4 * d.rn;
      /* grids under 128 positions (MobileNetV2's 7x7 planes: 49) where 2
       * position groups x 4 channel groups of 8 (RN up to 28) cover the
       * grid with fewer idle positions: 49 in 56 (8 x 28, 224 sums) where 4
       * x 16 computed 64 (16 x 16, 256 sums); lavapipe, three chained 7x7
       * 1x1 convs (160 -> 960 -> 320 -> 1280): 9-13% less time each. On
       * 14x14 (224 against 240) no faster: the 8-channel tile needs 2 weight
       * texels for 7 X texels a K step, so it stays with 4 x 2 there */
      int64_t cover2 = 0;
      int32_t rn2 = 0;
      for (int32_t rn = 12; rn <= 28; rn += 4) {
        const int64_t cover = (t->conv.Q + 2 * rn - 1) / (2 * rn) * (2 * rn);
        if (!cover2 || cover < cover2) cover2 = cover, rn2 = rn;
      }
      if (t->conv.Q < 128 && cover2 < best) {
        d.rm = 8;
        d.rn = rn2;
        d.tn = 2 * rn2;
      }
    }
    /* convs reading X itself with 9 taps and 128 channels or more: a
     * channel's taps a K step (conv.comp then shifts by constants; lavapipe,
     * ResNet-18's 3x3 stride-2 convs 128 -> 256 and 256 -> 512: 3.9 -> 3.4 /
     * 3.5 ms; 64 -> 128 the same; the 3-channel stems slower: MobileNetV2's
     * 0.77 -> 0.84 ms, ResNet-18's 7x7 6.7 -> 7.6 ms with 50 s of shaderc) */
    if (d.shared >= 2 && t->conv.x_direct && t->conv.T == 9 && t->conv.C >= 128 &&
        !kiln_vulkan_tiles_from_env("KILN_SPIRV_CONV_TILES", &env))
      d.tk = 9;
    const kiln_spirv_gemm_tiles_t ct = fit(d, t->conv.M, t->conv.Q, gpu_lacks);
    put_record(t, &ct, "KILN_SPIRV_CONV_TILES", false);
  } else if (t->kind == KILN_TEMPLATE_WINOGRAD) {
    const kiln_vulkan_wino_tiles_t w = kiln_vulkan_wino_default_tiles(t);
    t->tiles = (kiln_template_tiles_t){.n = 3, .v = {w.tm, w.nt, w.wf}};
  } else if (t->kind == KILN_TEMPLATE_DEPTHWISE) {
    /* up to 8 outputs of a row an invocation (depthwise.comp says why),
     * 16 on stride-1 rows of 48 or more whole pairs of texels (the same
     * weights and a longer shared segment for twice the outputs; lavapipe,
     * chains of 10 depthwise convs: 144 channels 56x56 4.57 -> 3.90 ms, 32
     * channels 112x112 3.75 -> 3.34; stride 2 and 28x28 rows the same) */
    int32_t rw = t->dw.ow >= 8 ? 8 : t->dw.ow > 0 ? (int32_t)t->dw.ow : 1;
    if (t->dw.sw == 1 && t->dw.ow >= 48 && t->dw.ow % 8 == 0) rw = 16;
    int32_t wg = 64;
    /* rows of 14 or 7 outputs (MobileNetV2's 14x14 and 7x7 planes): 16
     * outputs of Y seen flat, two u64vec4 stores where those rows stored
     * floats one by one (depthwise.comp's FLAT; 64 a work-group: the
     * invocations run across planes; lavapipe, MobileNetV2's 9 such convs
     * in all, --profile: 8 outputs ~2.05 ms, 16 ~1.73, 32 ~1.95) */
    /* whole rows where they are texels and divide a plane (14x14: 2 rows
     * of 14, one plane an invocation: the columns are constants, so the
     * per-output column masks and the second plane's taps and bias the
     * 16-output form selects per tap fold away) */
    const int32_t rows_rw = kiln_vulkan_dw_flat_rows(&t->dw);
    if (rows_rw) {
      rw = rows_rw, wg = 64;
    } else if (kiln_vulkan_dw_flat(&t->dw, 64, KILN_VULKAN_DW_FLAT_RW)) {
      rw = KILN_VULKAN_DW_FLAT_RW, wg = 64;
    } else if (kiln_vulkan_dw_flat(&t->dw, 64, 8)) { /* Y's size a multiple of 8, not 16 */
      rw = 8, wg = 64;
    } else {
      /* the row form: the work-group (a multiple of 8 up to 64) and rows
       * an invocation (kiln_vulkan_dw_rows for that group) with the least
       * work a plane (kiln_vulkan_dw_plane_cost): lavapipe runs every
       * invocation of a work-group, the idle ones too (960 channels of
       * 7x7, 7 invocations each: 8 a group, 0.47 -> 0.19 ms). Before, the
       * smallest power of two from 8 up to 64 holding a plane's one-row
       * invocations, and the most rows still filling it: 28x28 planes took
       * 1 row in groups of 64, where 4 rows in groups of 32 run 1.6x
       * faster; 56x56 ones 4 rows in 2 groups of 64 for 98 invocations,
       * where 2 groups of 56 leave 14 idle */
      int64_t best = 0;
      for (int32_t g = 64; g >= 8; g -= 8) {
        const int64_t cost = kiln_vulkan_dw_plane_cost(&t->dw, g, rw, kiln_vulkan_dw_rows(&t->dw, g, rw));
        if (!best || cost < best) best = cost, wg = g;
      }
    }
    t->tiles = (kiln_template_tiles_t){.n = 2, .v = {wg, rw}};
  } else if (t->kind == KILN_TEMPLATE_Q8) {
    /* 4 channels (fewer where a group has fewer) x 4 positions per
     * invocation, 64 a work-group (lavapipe, 128 -> 128 channels 28x28:
     * 4x4 and 4x8 fastest, 8x1 / 4x1 / 2x4 2-3.5x slower); packed dot
     * products where the device has them. KILN_SPIRV_Q8_TILES="tm,tp,wg"
     * overrides them when valid. */
    int32_t tm = 4, tp = 4, wg = 64;
    const char* env = getenv("KILN_SPIRV_Q8_TILES");
    int32_t o[3];
    if (env && sscanf(env, "%d,%d,%d", &o[0], &o[1], &o[2]) == 3 && (o[0] == 1 || o[0] == 2 || o[0] == 4 || o[0] == 8) &&
        (o[1] == 1 || o[1] == 2 || o[1] == 4 || o[1] == 8) && o[2] >= 1 && o[2] <= 1024)
      tm = o[0], tp = o[1], wg = o[2];
    while (tm > 1 && tm > t->q8.Mg) tm /= 2;
    t->tiles = (kiln_template_tiles_t){.n = 4, .v = {tm, tp, wg, (gpu_lacks & KILN_GPU_LACKS_IDOT) ? 0 : 1}};
  }
}

/* Panels of 32 channels (whole blocks, zero-padded past M) over all of K:
 * the subgroup mode's vec4 texel reads take 4 channels of one panel per
 * invocation (a panel of the lowering's width, 14 in ResNet-18, has no
 * aligned groups of 4), and channels past M read zeros. */
void kiln_vulkan_template_weight_blocks(kiln_template_t* t) {
  kiln_template_weights_t* w = &t->weights;
  w->block = w->slice = w->panel = 0;
  if (w->layout == KILN_TEMPLATE_W_TILED && t->kind == KILN_TEMPLATE_CONV && t->conv.K > 0) {
    w->block = w->panel = KILN_VULKAN_W_PANEL;
    w->slice = t->conv.K;
  } else if ((w->layout == KILN_TEMPLATE_W_WINOGRAD || w->layout == KILN_TEMPLATE_W_WINOGRAD4) &&
             t->kind == KILN_TEMPLATE_WINOGRAD && kiln_vulkan_wino_record(t) && t->tiles.v[0] > 0) {
    /* winograd.comp: U in blocks of TM channels, 4 of them a texel; F(2x2)
     * or F(4x4) as the tiles say (a tuned point may change it) */
    w->block = w->panel = t->tiles.v[0];
    w->slice = 1;
    if (t->tiles.v[2] == 2 || t->tiles.v[2] == 4)
      w->layout = t->tiles.v[2] == 4 ? KILN_TEMPLATE_W_WINOGRAD4 : KILN_TEMPLATE_W_WINOGRAD;
  }
}

bool kiln_vulkan_wino_record(const kiln_template_t* t) {
  return t->tiles.n == 3 || (t->tiles.n == 4 && t->alt != NULL);
}

kiln_status_t kiln_vulkan_wino_tiles_of(const kiln_template_t* t, const char* name, kiln_vulkan_wino_tiles_t* out) {
  const kiln_template_weights_t* w = &t->weights;
  const bool f4 = w->layout == KILN_TEMPLATE_W_WINOGRAD4;
  if (t->kind != KILN_TEMPLATE_WINOGRAD || !kiln_vulkan_wino_record(t) || (t->tiles.n == 4 && t->tiles.v[3] != 1) ||
      (w->layout != KILN_TEMPLATE_W_WINOGRAD && !f4) ||
      t->tiles.v[2] != (f4 ? 4 : 2) || !w->laid_out || w->block != t->tiles.v[0] || w->panel != t->tiles.v[0] ||
      w->slice != 1)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "spirv: kernel '%s': its Winograd instance has no Vulkan tiles or its weights are not "
                            "laid out for them (kiln_spirv_templates, kiln_template_weights_lay_out)",
                            name);
  *out = (kiln_vulkan_wino_tiles_t){t->tiles.v[0], t->tiles.v[1], f4 ? 4 : 2};
  return NULL;
}

kiln_status_t kiln_vulkan_conv_weights(const kiln_template_t* t, const char* name, kiln_template_conv_t* out) {
  *out = t->conv;
  if (t->weights.layout == KILN_TEMPLATE_W_PACKED) return NULL;
  kiln_template_t g = *t;
  kiln_vulkan_template_weight_blocks(&g);
  const kiln_template_weights_t* w = &t->weights;
  if (t->weights.layout != KILN_TEMPLATE_W_TILED || !w->laid_out || g.weights.block == 0 ||
      g.weights.block != w->block || g.weights.slice != w->slice || g.weights.panel != w->panel)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "spirv: kernel '%s': its conv weights are not laid out in the Vulkan panels "
                            "(kiln_template_weights_lay_out after choosing the tiles)",
                            name);
  out->pt = w->panel;
  out->kbs = w->slice;
  out->tiles = (t->conv.M + w->block - 1) / w->block * (w->block / w->panel);
  return NULL;
}

static kiln_status_t want(const kiln_template_t* t, int32_t n, const char* name) {
  if (t->tiles.n != n)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "spirv: kernel '%s': its template has %d tile parameters, the Vulkan one reads %d "
                            "(choose the templates with the Vulkan set, kiln_spirv_templates)",
                            name, (int)t->tiles.n, (int)n);
  return NULL;
}

kiln_status_t kiln_vulkan_tiles_of(const kiln_template_t* t, const char* name, kiln_spirv_gemm_tiles_t* out) {
  KILN_RETURN_IF_ERROR(want(t, t->f16_sums ? 7 : 6, name));
  const int32_t* v = t->tiles.v;
  *out = (kiln_spirv_gemm_tiles_t){v[0], v[1], v[2], v[3], v[4], v[5], t->f16_sums ? v[6] : 0};
  return NULL;
}

kiln_status_t kiln_vulkan_dw_tiles_of(const kiln_template_t* t, const char* name, int32_t* out_wg,
                                      int32_t* out_rw) {
  KILN_RETURN_IF_ERROR(want(t, 2, name));
  if (t->tiles.v[0] < 1 || t->tiles.v[0] > 1024 || t->tiles.v[1] < 1 || t->tiles.v[1] > 32)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "spirv: kernel '%s': depthwise work-group of %d, %d outputs per invocation", name,
                            (int)t->tiles.v[0], (int)t->tiles.v[1]);
  *out_wg = t->tiles.v[0];
  *out_rw = t->tiles.v[1];
  return NULL;
}
