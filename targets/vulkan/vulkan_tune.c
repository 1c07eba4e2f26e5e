/* The Vulkan templates' search spaces, as data beside their tile rules
 * (kiln_template_set_t.space / .tiles_check / .tiles_tie,
 * lowering/template.h): which values each entry of an instance's tiles
 * record may take, which points the shaders print on a device, and the
 * ties the subgroup mode puts between entries. The defaults
 * (vulkan_tiles.c) are always in the space, so `kiln tune -t vulkan`
 * starts from them and a point replaces them only after it measured
 * faster.
 *
 * Record orders (vulkan_tiles.c): GEMM / conv tm,tn,tk,rm,rn,shared and,
 * where the instance may sum in f16 (kiln_template_t.f16_sums), h;
 * depthwise wg,rw; Winograd tm,nt,wf and, with an implicit-GEMM
 * alternative, the switch wino (1 on, 0 off). */
#include <string.h>

#include "targets/vulkan/vulkan_internal.h"

/* Accumulators per invocation (floats): past this a GPU runs out of
 * registers and lavapipe spills its SIMD registers to the stack. The
 * subgroup default (32 rows x 8 columns) uses 256. */
#define REGISTER_TILE_MAX 512

/* Multiply-adds in one unrolled K step of an invocation (RM x RN x TK):
 * the shaders unroll it, and the driver's compile time grows with it
 * (lavapipe: about a minute for 64 x 8 x 16 = 8192, which no speed-up
 * pays back within a tuning budget). Four times the subgroup default. */
#define UNROLLED_STEP_MAX 2048

/* winograd.comp's sums per invocation, (WF + 2)^2 x TM x NT: F(2x2)'s
 * 8 x 4 default holds 512, F(4x4)'s 1152 (lavapipe, ResNet-18's 3x3
 * convs: F(2x2) 16 x 8, 2048 sums, ran much slower than every other
 * tile choice, its sums spilling out of L1). */
#define WINO_SUMS_MAX 1152

bool kiln_vulkan_tune_space(const kiln_template_t* t, kiln_template_space_t* out) {
  memset(out, 0, sizeof *out);
  const int32_t* d = t->tiles.v;
  switch (t->kind) {
    case KILN_TEMPLATE_GEMM:
    case KILN_TEMPLATE_CONV:
      if (t->tiles.n != (t->f16_sums ? 7 : 6)) return false;
      out->version = t->kind == KILN_TEMPLATE_GEMM ? (t->f16_sums ? "vulkan.gemm.1-h" : "vulkan.gemm.1")
                                                   : (t->f16_sums ? "vulkan.conv.1-h" : "vulkan.conv.1");
      /* 128: the GPU rules' large tiles (vulkan_tiles.c, 16 x 16
       * invocations of 8 x 8 in shared memory) */
      KILN_TEMPLATE_KNOB(out, "tm", d[0], 8, 16, 32, 64, 128);
      /* tied in the subgroup modes (LX x RN positions): every LX of 1, 2,
       * 4, 8 times every RN below is a value, so that a tied point stays
       * in the space (a one-knob step from it, a hint) */
      KILN_TEMPLATE_KNOB(out, "tn", d[1], 8, 16, 24, 32, 40, 48, 64, 80, 96, 128, 160);
      KILN_TEMPLATE_KNOB(out, "tk", d[2], 1, 2, 4, 8, 16);
      KILN_TEMPLATE_KNOB(out, "rm", d[3], 1, 2, 4, 8, 16, 32, 64);
      /* 12, 16, 20: the 1x1 convs' register tiles (vulkan_tiles.c) */
      KILN_TEMPLATE_KNOB(out, "rn", d[4], 1, 2, 4, 8, 12, 16, 20);
      /* 0 direct reads, 1 shared-memory tiles, 2 subgroup mode with 64-bit
       * pair reads, 3 subgroup mode with 32-bit reads, 4 subgroup mode with
       * vec4 texel reads and (where the output's planes are whole texels)
       * vec4 texel stores; tied to 3 where the shapes allow no texel
       * reads, refused for tiles that do not */
      KILN_TEMPLATE_KNOB(out, "shared", d[5], 0, 1, 2, 3, 4);
      /* f32 (0) or f16 (1) products and sums, modes 0 and 1 (AF16) */
      if (t->f16_sums) KILN_TEMPLATE_KNOB(out, "h", d[6], 0, 1);
      return true;
    case KILN_TEMPLATE_DEPTHWISE:
      if (t->tiles.n != 2) return false;
      out->version = "vulkan.depthwise.2"; /* .2: the rows by kiln_vulkan_dw_plane_cost */
      KILN_TEMPLATE_KNOB(out, "wg", d[0], 16, 32, 64, 128, 256);
      KILN_TEMPLATE_KNOB(out, "rw", d[1], 1, 2, 4, 8);
      return true;
    case KILN_TEMPLATE_WINOGRAD:
      if (!kiln_vulkan_wino_record(t)) return false;
      out->version = t->tiles.n == 4 ? "vulkan.winograd.2" : "vulkan.winograd.1";
      KILN_TEMPLATE_KNOB(out, "tm", d[0], 4, 8, 16, 32);
      KILN_TEMPLATE_KNOB(out, "nt", d[1], 4, 8);
      /* 2: F(2x2, 3x3), 4: F(4x4, 3x3); a point re-lays the weights
       * (kiln_vulkan_template_weight_blocks: 16 or 36 per channel pair) */
      KILN_TEMPLATE_KNOB(out, "wf", d[2], 2, 4);
      /* 1 Winograd, 0 the implicit-GEMM conv (t->alt) with its default
       * tiles and weights, the phase split back where Winograd read X */
      if (t->tiles.n == 4) KILN_TEMPLATE_KNOB(out, "wino", d[3], 0, 1);
      return true;
    case KILN_TEMPLATE_Q8:   /* its tiles follow the device (KILN_SPIRV_Q8_TILES) */
    case KILN_TEMPLATE_POOL: /* no tiles */
    case KILN_TEMPLATE_ROWS:
    case KILN_TEMPLATE_NONE:
    case KILN_TEMPLATE_MERGED: break;
  }
  return false;
}

static const char* wino_check(const kiln_template_t* t, const int32_t* v) {
  const int32_t tm = v[0], nt = v[1], wf = v[2];
  if (tm != 4 && tm != 8 && tm != 16 && tm != 32) return "winograd: TM is 4, 8, 16 or 32 channels";
  if (nt != 4 && nt != 8) return "winograd: NT is 4 or 8 tiles";
  if (wf != 2 && wf != 4) return "winograd: WF is 2 (F(2x2, 3x3)) or 4 (F(4x4, 3x3))";
  if ((int64_t)(wf + 2) * (wf + 2) * tm * nt > WINO_SUMS_MAX)
    return "winograd: (WF + 2)^2 x TM x NT sums past the register budget";
  /* blocks past the output channels or groups past a row of tiles are
   * zeros and idle invocations (the defaults, 8 x 4, always pass) */
  if (tm > 8 && tm > t->conv.M) return "winograd: TM past the output channels";
  const kiln_vulkan_wino_tiles_t wt = {tm, nt, wf};
  if (nt > 4 && nt / kiln_vulkan_wino_tile_rows(&t->conv, &wt) > (t->conv.ow + wf - 1) / wf)
    return "winograd: NT past a row of tiles (of two rows of NT / 2 where that form is taken)";
  return NULL;
}

/* Whether the shapes and dtypes of |t| let mode 4 read vec4 texels
 * (vulkan_gemm.c / vulkan_conv.c: else they print mode 3's shader): a
 * GEMM's K and B rows on whole texels, a conv's f32 weights and input in
 * panels of a multiple of 4 channels. */
static bool texel_shapes(const kiln_template_t* t) {
  if (t->kind == KILN_TEMPLATE_GEMM) {
    const kiln_spirv_gemm_t g = kiln_vulkan_gemm_of(&t->gemm);
    return !g.f16_a && !g.f16_b && g.K % 4 == 0 &&
           (g.b_mode == 1 || (g.b_mode == 0 && g.N % 4 == 0) || (g.b_mode == 2 && (g.pt > 0 ? g.pt : 1) % 4 == 0));
  }
  return kiln_vulkan_conv_texel_types(t) && (t->weights.layout == KILN_TEMPLATE_W_TILED || t->conv.pt % 4 == 0);
}

/* LY, the channel groups of a conv's split texel work-group (conv.comp,
 * TEXEL and LY > 1: 8 invocations as 8/LY position groups x LY channel
 * groups of RM channels each), where |v| (mode 4) asks for one the shader
 * prints: TM = LY x RM with LY 2, 4 or 8, RM a multiple of 4; else 1 (the
 * subgroup mode's one row of 8 invocations). */
static int32_t split_ly(const kiln_template_t* t, const int32_t* v) {
  if (t->kind != KILN_TEMPLATE_CONV || v[5] != 4 || v[3] < 4 || v[3] % 4 || v[0] % v[3] || v[0] == v[3]) return 1;
  const int32_t ly = v[0] / v[3];
  return ly == 2 || ly == 4 || ly == 8 ? ly : 1;
}

void kiln_vulkan_tune_tie(const kiln_template_t* t, kiln_template_tiles_t* x) {
  /* Winograd off: its tiles do not matter, one point stands for all */
  if (t->kind == KILN_TEMPLATE_WINOGRAD && x->n == 4 && x->v[3] == 0) {
    x->v[0] = 8, x->v[1] = 4, x->v[2] = 2;
    return;
  }
  if ((t->kind != KILN_TEMPLATE_GEMM && t->kind != KILN_TEMPLATE_CONV) || x->n < 6) return;
  int32_t* v = x->v;
  /* mode 4 where the shapes allow no texel reads is mode 3's shader: the
   * same point, measured once */
  if (v[5] == 4 && !texel_shapes(t)) v[5] = 3;
  /* the subgroup mode: a work-group is 8 invocations, each with all TM
   * rows of RN columns; a conv's texel mode may split them into LX = 8/LY
   * position groups x LY = TM/RM channel groups of RM channels */
  if (v[5] >= 2) {
    const int32_t ly = split_ly(t, v);
    if (ly > 1) {
      v[1] = 8 / ly * v[4];
    } else {
      v[3] = v[0];
      v[1] = 8 * v[4];
    }
  }
}

static const char* gemm_check(const kiln_template_t* t, const int32_t* v, const kiln_template_limits_t* lim) {
  const kiln_spirv_gemm_tiles_t g = {v[0], v[1], v[2], v[3], v[4], v[5], 0};
  if (g.tm % g.rm || g.tn % g.rn) return "RM must divide TM and RN divide TN";
  const int64_t lx = g.tn / g.rn, ly = g.tm / g.rm, nt = lx * ly;
  if ((int64_t)g.rm * g.rn > REGISTER_TILE_MAX) return "RM x RN accumulators past the register budget";
  if ((int64_t)g.rm * g.rn * g.tk > UNROLLED_STEP_MAX) return "RM x RN x TK unrolled multiply-adds past the compile budget";
  if (nt > 1024 || (lim && lim->max_workgroup_size > 0 && nt > lim->max_workgroup_size))
    return "work-group larger than the device allows";
  switch (g.shared) {
    case 0: break;
    case 1:
      if ((int64_t)g.tm * g.tk % nt || (int64_t)g.tk * g.tn % nt)
        return "shared-memory tiles: TM x TK and TK x TN must split evenly over the invocations";
      /* gemm.comp / conv.comp: TK x (TM + TN) floats, twice that (DB) only
       * within KILN_VULKAN_SHARED_BUDGET, which every device has */
      if (lim && lim->local_mem_bytes > 0 &&
          (uint64_t)g.tk * (uint64_t)(g.tm + g.tn) * 4 > lim->local_mem_bytes)
        return "shared-memory tiles larger than the device's shared memory";
      break;
    case 2:
    case 3:
    case 4:
      if (ly > 1 && lx * ly == 8 && g.shared == 4 && t->kind == KILN_TEMPLATE_CONV) {
        /* the split work-group (conv.comp, TEXEL and LY > 1), texel reads
         * only: elsewhere vulkan_conv.c prints other tiles */
        if (g.rm % 4 || g.rn % 4 || g.tm % 16 || g.tk % 2 || !texel_shapes(t))
          return "split texel work-group: RM and RN multiples of 4, TM of 16, TK even, texel shapes";
      } else if (lx != 8 || ly != 1 || g.tm % 8 || g.tk % 2) {
        return "subgroup mode: TN = 8 RN, RM = TM (a conv's texel mode also TM = LY RM, TN = (8/LY) RN, "
               "LY 2, 4 or 8), TM a multiple of 8 and TK even";
      }
      if (lim && (lim->gpu_lacks & KILN_GPU_LACKS_SUBGROUP)) return "subgroup mode: the device has no subgroup ballot";
      if (g.shared == 2 && lim && (lim->gpu_lacks & KILN_GPU_LACKS_INT64))
        return "subgroup mode 2 reads 64-bit words: the device has no shaderInt64";
      /* its B reads take two columns of an invocation's RN at a time
       * (gemm.comp's b_pair loop steps j by 2): RN 1 ran ResNet-18's
       * classifier GEMM with half its outputs wrong on lavapipe (32,8,2,32,1,2
       * and 16,8,2,16,1,2; mode 3 right), which only the tuner's output
       * check caught */
      if (g.shared == 2 && g.rn % 2) return "subgroup mode 2 reads column pairs: RN even";
      /* mode 4's texel reads take RN/4 texels of positions per K step, a
       * GEMM's 4 K steps at a time, a conv's weights 4 channels of a
       * 32-channel panel per invocation, 16 or 32 channels a work-group (as
       * vulkan_conv.c prints it and the 1x1 convs' 16-channel default
       * uses); other tiles would print mode 3's shader, a point already in
       * the space */
      if (g.shared == 4 && texel_shapes(t) &&
          (g.rn % 4 || (t->kind == KILN_TEMPLATE_GEMM ? g.tk % 4 != 0 : g.tm % 16 != 0)))
        return t->kind == KILN_TEMPLATE_GEMM ? "texel mode: RN and TK multiples of 4"
                                             : "texel mode: RN a multiple of 4 and TM of 16";
      break;
    default: return "SHARED is 0, 1, 2, 3 or 4";
  }
  /* an invocation past the device's loop limit ends early (lavapipe):
   * such a point is never built */
  const int64_t K = t->kind == KILN_TEMPLATE_GEMM ? t->gemm.K : t->conv.K;
  const bool k_unrolled = t->kind == KILN_TEMPLATE_GEMM || g.shared >= 2; /* as the emitter counts them */
  if (lim && lim->loop_limit > 0 && kiln_vulkan_trips_tiled(K, &g, k_unrolled) > lim->loop_limit)
    return "more loop iterations per invocation than the device's limit";
  return NULL;
}

const char* kiln_vulkan_tune_check(const kiln_template_t* t, const kiln_template_tiles_t* x,
                                   const kiln_template_limits_t* lim) {
  const int32_t* v = x->v;
  for (int32_t i = 0; i < x->n; ++i)
    if (v[i] < 0 || v[i] > 4096) return "a tile outside 0..4096";
  switch (t->kind) {
    case KILN_TEMPLATE_GEMM:
    case KILN_TEMPLATE_CONV:
      if (x->n != (t->f16_sums ? 7 : 6))
        return t->f16_sums ? "this GEMM/conv record has 7 tiles (the last, h, its f16 sums)"
                           : "a GEMM/conv record has 6 tiles";
      for (int32_t i = 0; i < 5; ++i)
        if (v[i] < 1) return "TM, TN, TK, RM and RN are at least 1";
      if (x->n == 7 && v[6] > 1) return "h is 0 (f32 sums) or 1 (f16 sums)";
      if (x->n == 7 && v[6] == 1 && v[5] > 1) return "f16 sums (h 1) in the shared-memory and direct modes (0, 1) only";
      return gemm_check(t, v, lim);
    case KILN_TEMPLATE_DEPTHWISE:
      if (x->n != 2) return "a depthwise record has 2 tiles";
      if (v[0] < 1 || v[0] > 1024 || (lim && lim->max_workgroup_size > 0 && v[0] > lim->max_workgroup_size))
        return "work-group larger than the device allows";
      /* depthwise.comp unrolls the taps of RW outputs: 16 the default on
       * wide stride-1 rows, other widths past 8 only grow the driver's
       * compile (whole rows: the flat form's default) */
      if ((v[1] < 1 || v[1] > 8) && v[1] != 16 &&
          !(v[1] == kiln_vulkan_dw_flat_rows(&t->dw) && kiln_vulkan_dw_flat(&t->dw, v[0], v[1])))
        return "RW is 1..8 or 16 outputs per invocation (or whole rows in the flat form)";
      if (t->dw.N * t->dw.M > INT32_MAX) return "work-groups past int32";
      return NULL;
    case KILN_TEMPLATE_WINOGRAD:
      if (x->n != t->tiles.n || !kiln_vulkan_wino_record(t))
        return "a Winograd record has 3 tiles, and the switch where the instance has an implicit-GEMM alternative";
      if (x->n == 4 && v[3] != 0 && v[3] != 1) return "winograd: the switch is 0 (implicit GEMM) or 1 (Winograd)";
      return wino_check(t, v);
    case KILN_TEMPLATE_Q8:
    case KILN_TEMPLATE_POOL:
    case KILN_TEMPLATE_ROWS:
    case KILN_TEMPLATE_NONE:
    case KILN_TEMPLATE_MERGED: break;
  }
  return "not a tunable template";
}

/* Where lavapipe's speed lies (measured on ResNet-18 and MobileNetV2
 * convs): the subgroup mode with more rows and columns per invocation than
 * the defaults, which keep them small for the driver's compile time, and
 * longer unrolled K steps; then the other subgroup read width. A tuner
 * tries these before random points (each still checked). */
int32_t kiln_vulkan_tune_hints(const kiln_template_t* t, kiln_template_tiles_t* out, int32_t cap) {
  int32_t n = 0;
  const kiln_template_tiles_t d = t->tiles;
#define HINT(...)                                                            \
  do {                                                                       \
    if (n < cap) out[n++] = (kiln_template_tiles_t){.n = d.n, .v = {__VA_ARGS__}}; \
  } while (0)
  if (t->kind == KILN_TEMPLATE_CONV && d.n >= 6 && split_ly(t, d.v) > 1) {
    /* a split 1x1 conv (vulkan_tiles.c: 4 position groups x 2 channel
     * groups of 16): the other register tiles of the split, then the
     * subgroup mode's single row (16 x 16 and 32 x 8 per invocation) */
    const int32_t tk = d.v[2], rm = d.v[3], rn = d.v[4];
    HINT(32, 4 * (rn == 16 ? 20 : 16), tk, 16, rn == 16 ? 20 : 16, 4);
    HINT(32, 2 * rn, tk, 8, rn, 4);
    HINT(rm * 4, 2 * rn, tk, rm, rn, 4);
    HINT(16, 128, tk, 16, 16, 4);
    HINT(32, 64, tk, 32, 8, 4);
    HINT(d.v[0], d.v[1], 2 * tk, rm, rn, 4);
    HINT(32, 4 * (rn == 12 ? 20 : 12), tk, 16, rn == 12 ? 20 : 12, 4);
  } else if ((t->kind == KILN_TEMPLATE_GEMM || t->kind == KILN_TEMPLATE_CONV) && d.n >= 6 && d.v[5] == 4) {
    /* mode 4's defaults are already its larger register tiles: first the
     * points lavapipe compiles fastest (half the columns, the 64-bit
     * subgroup mode), then more rows and a longer K step */
    const int32_t tm = d.v[0], tk = d.v[2], rn = d.v[4];
    const int32_t rnh = rn > 4 ? rn / 2 : rn, tm2 = tm < 64 ? 2 * tm : tm;
    HINT(tm, 8 * rnh, tk, tm, rnh, 4);
    HINT(tm, 8 * rn, tk, tm, rn, 2);
    HINT(tm2, 8 * rn, tk, tm2, rn, 4);
    HINT(tm, 8 * rn, 2 * tk, tm, rn, 4);
    /* a conv's split work-group: 2 channel groups of 16 x 4 groups of 16
     * positions (1x1 convs on small grids and 17-31 channels take it by
     * default) */
    if (t->kind == KILN_TEMPLATE_CONV) HINT(32, 64, tk, 16, 16, 4);
  } else if ((t->kind == KILN_TEMPLATE_GEMM || t->kind == KILN_TEMPLATE_CONV) && d.n >= 6 && d.v[5] >= 2) {
    const int32_t tm = d.v[0], tk = d.v[2], rn = d.v[4], sh = d.v[5];
    const int32_t tm2 = tm < 64 ? 2 * tm : tm, rn2 = rn < 8 ? 2 * rn : rn;
    HINT(tm2, 8 * rn2, tk, tm2, rn2, sh);
    HINT(tm, 8 * rn2, tk, tm, rn2, sh);
    HINT(tm2, 8 * rn, tk, tm2, rn, sh);
    HINT(tm, 8 * rn2, 4 * tk, tm, rn2, sh);
    HINT(tm, 8 * rn, 4 * tk, tm, rn, sh);
    HINT(tm2, 8 * rn2, tk, tm2, rn2, sh == 2 ? 3 : 2);
  } else if ((t->kind == KILN_TEMPLATE_GEMM || t->kind == KILN_TEMPLATE_CONV) && d.n >= 6 && d.v[5] == 1) {
    /* the shared-memory tiles (the GPU rules' default, or a device without
     * subgroup ballot): GPU-sized neighbours, not lavapipe's register
     * tiles. 64 x 64 with 16 x 16 invocations of 4 x 4, 128 x 64 and
     * 64 x 128 with 128 invocations of 8 x 8, 128 x 128 with TK 16, the
     * default's TK halved and doubled (CLBlast's and ncnn's desktop points
     * lie among these; none measured on a GPU yet) */
    const int32_t tm = d.v[0], tn = d.v[1], tk = d.v[2], rm = d.v[3], rn = d.v[4];
    HINT(64, 64, 16, 4, 4, 1);
    HINT(128, 64, 8, 8, 8, 1);
    HINT(64, 128, 8, 8, 8, 1);
    HINT(128, 128, 16, 8, 8, 1);
    HINT(tm, tn, tk > 4 ? tk / 2 : 2 * tk, rm, rn, 1);
    HINT(tm, tn, 2 * tk, rm, rn, 1);
    HINT(32, 32, 16, 4, 4, 1);
  } else if (t->kind == KILN_TEMPLATE_DEPTHWISE && d.n == 2) {
    HINT(2 * d.v[0], d.v[1]);
    /* (the default's smallest work-group, 8 for small planes, has no half) */
    HINT(d.v[0] >= 16 ? d.v[0] / 2 : 4 * d.v[0], d.v[1]);
    HINT(d.v[0], d.v[1] > 1 ? d.v[1] / 2 : 1);
  }
  if ((t->kind == KILN_TEMPLATE_GEMM || t->kind == KILN_TEMPLATE_CONV) && d.n == 7) {
    /* f16 sums allowed: every hint at the default's h, then the default
     * with the other one (in the modes that have it: else the GPU rules'
     * 64 x 64 shared-memory tiles with f16 sums) */
    for (int32_t i = 0; i < n; ++i) out[i].v[6] = d.v[6];
    if (d.v[5] <= 1) HINT(d.v[0], d.v[1], d.v[2], d.v[3], d.v[4], d.v[5], !d.v[6]);
    else HINT(64, 64, 16, 4, 4, 1, 1);
  }
  if (t->kind == KILN_TEMPLATE_WINOGRAD && kiln_vulkan_wino_record(t)) {
    /* lavapipe, ResNet-18's 3x3 convs a layer (README, Vulkan row): F(4x4)
     * 8 x 4 2.4-2.8 ms against F(2x2) 8 x 4's 2.8-3.6 (3.7-3.9 on 7x7
     * planes, with three times the driver's compile); F(2x2) 8 x 8
     * 2.8-3.8, 16 x 4 3.0-4.6, 4 x 8 3.1-4.8 */
    const int32_t wf = d.v[2] == 2 ? 4 : 2;
    HINT(8, 4, wf, 1);
    HINT(8, 8, 2, 1);
    HINT(16, 4, 2, 1);
    HINT(4, 4, 4, 1);
    HINT(4, 8, 2, 1);
    /* the implicit-GEMM conv (5.8-6.9 ms a ResNet-18 layer on lavapipe,
     * against F(2x2)'s 3.0-3.6: last) */
    if (d.n == 4) HINT(8, 4, 2, 0);
  }
#undef HINT
  return n;
}

/* On lavapipe a point's cost is the driver's compile of its unrolled body
 * (32,128,4,32,16 took 25-33 s in the 32-bit subgroup mode and 1.1 s in
 * the texel mode): the tuner learns each class's law from the points it
 * measures (compiler/tune_dear.h). */
void kiln_vulkan_tune_features(const kiln_template_t* t, const kiln_template_tiles_t* x, double* size, int32_t* cls) {
  const int32_t* v = x->v;
  *size = 1;
  *cls = 0;
  if ((t->kind == KILN_TEMPLATE_GEMM || t->kind == KILN_TEMPLATE_CONV) && x->n >= 6) {
    *size = (double)v[3] * (double)v[4] * (double)(v[2] > 0 ? v[2] : 1);
    *cls = v[5] + (x->n == 7 && v[6] ? 5 : 0); /* f16 sums: a class of their own */
  } else if (t->kind == KILN_TEMPLATE_DEPTHWISE && x->n == 2) {
    *size = v[1] > 0 ? v[1] : 1;
  } else if (t->kind == KILN_TEMPLATE_WINOGRAD && x->n >= 3) {
    const double w = v[2] + 2;
    *size = w * w * (double)(v[0] > 0 ? v[0] : 1) * (double)(v[1] > 0 ? v[1] : 1);
    *cls = x->n == 4 && v[3] == 0 ? 0 : v[2];
  }
}
