/* The implicit-GEMM convolution shader (kernels/vulkan/conv.comp): tiles
 * and the GLSL of an instance from lowering's conv descriptor. */
#include "targets/vulkan/vulkan_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kiln_spirv_gemm_tiles_t kiln_spirv_conv_default_tiles(int64_t M, int64_t Q) {
  kiln_spirv_gemm_tiles_t t;
  if (kiln_vulkan_tiles_from_env("KILN_SPIRV_CONV_TILES", &t)) return t;
  /* the subgroup mode as for GEMM (kiln_spirv_gemm_default_tiles): all
   * TM channels of 8 x RN grid positions per 8 invocations; mode 4 (vec4
   * texel reads, 32 channels a work-group) with 8 positions each
   * (lavapipe, 64 -> 64 channels 56x56 and 256 -> 256 14x14 with 3x3
   * taps: 1.4-2x faster than 4 positions, for about 2.5x the driver's cold
   * compile of the shader). For M <= 16 too: conv.comp then reads only the
   * channels below M (in 4s) and folds the rest of its one tile away
   * (MobileNetV2's 32 -> 16 1x1 conv on 112x112 on lavapipe, alone: 1.9-2.2
   * -> 0.48 ms against mode 2 with 16 x 4). Where mode 4 does not apply,
   * kiln_vulkan_template_tiles falls back to mode 2 with 4 positions (16
   * channels for M <= 16): its store (crop + fused epilogue) is unrolled
   * per output, and 32 x 8 of them made LLVM's compile in lavapipe minutes
   * long for a few percent of speed */
  t.shared = 4;
  t.tm = 32;
  t.rm = t.tm;
  t.rn = 8;
  t.tn = 8 * t.rn;
  t.tk = 2; /* TK steps are unrolled: longer bodies only cost LLVM compile time */
  return t;
}

kiln_status_t kiln_vulkan_conv_params(kiln_vulkan_sb_t* b, const kiln_template_conv_t* c, const char* what,
                                      const char* name, int bind[4], const char* type[4]) {
  return kiln_vulkan_conv_params_texel(b, c, what, name, bind, type, 0);
}

uint32_t kiln_vulkan_epi_texels(const kiln_template_conv_t* c, uint32_t texel_epi) {
  uint32_t ops = 0;
  for (int32_t j = 0; j < c->n_params; ++j) {
    const char r = c->roles[j] == 'D' ? '0' : c->roles[j];
    if (r >= '0' && r < '0' + KILN_TEMPLATE_EPI_MAX && (texel_epi >> (r - '0') & 1u) &&
        (!c->f16[j] || (texel_epi & KILN_VULKAN_EPI_F16)))
      ops |= (1u << (r - '0')) | (c->f16[j] ? KILN_VULKAN_EPI_HALF(r - '0') : 0u);
  }
  return ops;
}

kiln_status_t kiln_vulkan_conv_params_texel(kiln_vulkan_sb_t* b, const kiln_template_conv_t* c, const char* what,
                                            const char* name, int bind[4], const char* type[4], uint32_t texel_epi) {
  for (int32_t j = 0; j < c->n_params; ++j) {
    /* a placeholder where operand 0 would be (winograd_epi_slot): declared
     * as that operand is, so the two instances print one text */
    const char r = c->roles[j] == 'D' ? '0' : c->roles[j];
    const char* at = strchr("WXCY", r);
    if (at) {
      bind[at - "WXCY"] = j;
      type[at - "WXCY"] = c->f16[j] ? "float16_t" : "float";
    } else if (r >= '0' && r < '0' + KILN_TEMPLATE_EPI_MAX && (texel_epi >> (r - '0') & 1) && !c->f16[j]) {
      kiln_vulkan_sb_printf(b, "layout(set = 0, binding = %d) uniform samplerBuffer te%c;\n", (int)j, r);
    } else if (r >= '0' && r < '0' + KILN_TEMPLATE_EPI_MAX && (texel_epi >> (r - '0') & 1) &&
               (texel_epi & KILN_VULKAN_EPI_F16)) {
      /* a sampled buffer has no format in SPIR-V: f16 texels are images */
      kiln_vulkan_sb_printf(b, "layout(set = 0, binding = %d, rgba16f) uniform restrict readonly imageBuffer te%c;\n",
                            (int)j, r);
    } else if (r >= '0' && r < '0' + KILN_TEMPLATE_EPI_MAX) {
      kiln_vulkan_sb_printf(b, "layout(std430, set = 0, binding = %d) restrict readonly buffer BufE%c { %s e%c[]; };\n",
                            (int)j, r, c->f16[j] ? "float16_t" : "float", r);
    } else {
      return kiln_make_status(KILN_INTERNAL, "%s '%s': parameter %d has role '%c'", what, name, (int)j, r);
    }
  }
  if (bind[0] < 0 || bind[1] < 0 || bind[3] < 0 || (c->has_bias && bind[2] < 0))
    return kiln_make_status(KILN_INTERNAL, "%s '%s': weights, input or output missing", what, name);
  return NULL;
}

kiln_status_t kiln_vulkan_conv_source(const kiln_template_conv_t* c, const kiln_spirv_gemm_tiles_t* tiles,
                                      bool texels_fit, bool y_texels_fit, const char* name, char** out_glsl, int64_t groups[3],
                                      int64_t local[3], int64_t* out_trips) {
  return kiln_vulkan_conv_source_int64(c, tiles, texels_fit, y_texels_fit, false, name, out_glsl, groups, local,
                                       out_trips);
}

kiln_status_t kiln_vulkan_conv_source_int64(const kiln_template_conv_t* c, const kiln_spirv_gemm_tiles_t* tiles,
                                            bool texels_fit, bool y_texels_fit, bool int64, const char* name,
                                            char** out_glsl, int64_t groups[3], int64_t local[3], int64_t* out_trips) {
  kiln_spirv_gemm_tiles_t t = *tiles;
  /* mode 4's split work-group (8 invocations as TN/RN position groups x
   * TM/RM channel groups) is conv.comp's texel path only: where the texel
   * reads do not apply (below), the subgroup mode's 8 x 4 positions */
  const bool split = t.shared == 4 && t.rm > 0 && t.rn > 0 && t.tm % t.rm == 0 && t.tn % t.rn == 0 &&
                     t.tm != t.rm && (t.tn / t.rn) * (t.tm / t.rm) == 8 && t.rm % 4 == 0;
  if (split && !(texels_fit && c->pt % 4 == 0 && t.tm % 16 == 0 && t.rn % 4 == 0)) {
    t.rm = t.tm;
    t.rn = 4;
    t.tn = 8 * t.rn;
  }
  const int64_t lx = t.tn / t.rn, ly = t.tm / t.rm, nt = lx * ly;
  if (t.tm % t.rm || t.tn % t.rn || nt > 1024 || (uint32_t)t.shared > 4 ||
      (t.shared == 1 && ((int64_t)t.tm * t.tk % nt || (int64_t)t.tk * t.tn % nt)) ||
      (t.shared >= 2 && ((ly == 1 && lx != 8) || (ly != 1 && (t.shared != 4 || nt != 8 || t.rm % 4)) || t.tm % 8)))
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "conv '%s': tiles %dx%dx%d / %dx%d (mode %d) do not divide (mode 2: 8 threads, RM == TM, "
                            "TM %% 8 == 0)",
                            name, t.tm, t.tn, t.tk, t.rm, t.rn, t.shared);
  if (t.h && (t.h != 1 || t.shared > 1))
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "conv '%s': tiles %dx%dx%d / %dx%d (mode %d): f16 sums (h %d) are for the shared-memory "
                            "and direct modes (0, 1) only", name, t.tm, t.tn, t.tk, t.rm, t.rn, t.shared, t.h);
  const int64_t cp = c->od * c->oh * c->ow;
  if (c->batch * c->C * c->plane > INT32_MAX || c->batch * c->M * (c->crop ? cp : c->Q) > INT32_MAX ||
      c->T < 1 || c->T > KILN_TEMPLATE_CONV_MAX_TAPS)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "conv '%s': %lld x %lld x %lld does not fit 32-bit indices",
                            name, (long long)c->M, (long long)c->Q, (long long)c->K);
  int bind[4] = {-1, -1, -1, -1}; /* W X C Y */
  const char* type[4] = {"float", "float", "float", "float"};
  bool f16 = false;
  for (int32_t j = 0; j < c->n_params; ++j) f16 = f16 || c->f16[j];
  kiln_vulkan_sb_t b = {0};
  const char* rest = NULL;
  kiln_status_t hs = kiln_vulkan_shader_head(&b, kiln_vk_conv, "kernels/vulkan/conv.comp", f16 || t.h, &rest);
  if (hs) return hs;
  kiln_vulkan_sb_printf(&b, "// kiln conv '%s': %lld channels x %lld grid x K %lld (%lld taps)%s\n", name, (long long)c->M,
            (long long)c->Q, (long long)c->K, (long long)c->T, c->crop ? ", cropped" : "");
  /* f32 epilogue operands (a residual) as uniform texel buffers, two ways:
   * (mode 4) every one, each value a fetch of its own texel: lavapipe's
   * LLVM compiles a storage-buffer load per stored value as a loop over the
   * lanes (ResNet-18's stride-2 downsamples with their residual; an
   * operand broadcasts to Y, so it fits where Y does); and (texel Y, below)
   * those laid out as Y, where the 4 outputs of a stored texel share one
   * fetch (KC_EPI4; MobileNetV2's residual project convs). Decided before
   * the parameters are printed, from the roles' types as the texel and
   * texel-Y rules below read them. KILN_SPIRV_EPI_TEXELS=off keeps the
   * storage buffers */
  bool f16_of[4] = {false, false, false, false}; /* W X C Y */
  for (int32_t j = 0; j < c->n_params; ++j) {
    const char* at = strchr("WXCY", c->roles[j]);
    if (at && c->roles[j]) f16_of[at - "WXCY"] = c->f16[j];
  }
  const char* et = getenv("KILN_SPIRV_EPI_TEXELS");
  const bool et_on = !(et && !strcmp(et, "off"));
  const bool mode4_texels = t.shared == 4 && texels_fit && y_texels_fit && c->pt % 4 == 0 &&
                            t.tm % 16 == 0 && t.rn % 4 == 0;
  const bool texel_y_pre = mode4_texels && !f16_of[0] && !f16_of[1] && !f16_of[3] && !c->crop && cp == c->Q &&
                           cp % 4 == 0;
  uint32_t quads = 0;
  for (int32_t j = 0; j < c->n_params; ++j) {
    const char r = c->roles[j];
    if (texel_y_pre && et_on && r >= '0' && r < '0' + KILN_TEMPLATE_EPI_MAX && r - '0' < c->epi.n_operands &&
        kiln_vulkan_epi_texel_ok(&c->epi, r - '0', c->f16[j], c->M, cp, c->batch))
      quads |= 1u << (r - '0');
  }
  const uint32_t texel_epi = (mode4_texels && et_on ? ~KILN_VULKAN_EPI_F16 : 0u) | quads; /* f32 operands */
  kiln_status_t ps = kiln_vulkan_conv_params_texel(&b, c, "conv", name, bind, type, texel_epi);
  if (ps) {
    free(b.p);
    return ps;
  }
  /* mode 4: the subgroup mode reading f32 weights and input as vec4 texels
   * (conv.comp, TEXEL: 4 channels of a weight tile per invocation), f16
   * ones as rgba16f texels (TEXEL_W16 / TEXEL_X16: |texels_fit| says the
   * device binds those); elsewhere mode 3 */
  const bool w16 = !strcmp(type[0], "float16_t"), x16 = !strcmp(type[1], "float16_t");
  const int texel = t.shared == 4 && texels_fit && (w16 || !strcmp(type[0], "float")) &&
                    (x16 || !strcmp(type[1], "float")) && c->pt % 4 == 0 && t.tm % 16 == 0 && t.rn % 4 == 0;
  /* (mode 4) the output as a storage texel buffer, stored in whole vec4
   * texels: where the output is the grid itself (no crop) and its planes
   * are whole texels, so an invocation's RN positions are RN/4 aligned
   * texels; lavapipe stores a vec4 texel with one 16-byte store per lane
   * where a storage-buffer store is a loop over the lanes per float */
  const bool y16 = !strcmp(type[3], "float16_t");
  const int texel_y = texel && y_texels_fit && !c->crop && cp == c->Q && cp % 4 == 0 && (y16 || !strcmp(type[3], "float"));
  if (quads && !texel_y) {
    free(b.p);
    return kiln_make_status(KILN_INTERNAL, "conv '%s': epilogue operands as texels without texel stores", name);
  }
  /* (mode 4) every K step's input positions start on a texel: the planes
   * and the taps' offsets are whole texels (1x1 convs of planes of 4k) */
  /* (x_direct) X itself: read flat (CDIRECT 0) where every tap of every
   * output is inside it at the offset the grid gives (1x1, stride 1, no
   * padding: the output grid is X's), else bounds-checked per row and
   * column (CDIRECT 1) */
  const int direct = c->x_direct && !(c->T == 1 && c->sh == 1 && c->sw == 1 && c->pad_h == 0 && c->pad_w == 0 &&
                                      c->oh == c->ih && c->ow == c->iw);
  int xaligned = texel && !direct && c->plane % 4 == 0;
  for (int64_t i = 0; i < c->T; ++i) xaligned = xaligned && c->toff[i] % 4 == 0;
  /* (mode 4) an f32 bias as texels too (it holds fewer than the weights,
   * which fit) */
  const int texel_c = texel && c->has_bias && !strcmp(type[2], "float");
  /* (texel Y) those texels stored through a storage buffer instead:
   * lavapipe (Mesa 22.3) runs an imageStore as a loop over the 8 lanes per
   * component, a buffer store of a vector as one loop for all of it; with
   * 64-bit integers (|int64|: the device has shaderInt64) pairs of texels
   * as one u64vec4 (8 floats a lane; RN and CP multiples of 8), else vec4s
   * (MobileNetV2's 16 -> 96 112x112 and 24 -> 144 56x56 expand convs:
   * 2.85 / 1.57 ms with imageStore, 3.0 / 1.33 with vec4s, 2.53 / 1.15 with
   * u64vec4s). KILN_SPIRV_CONV_YSTORE=image|vec4 keeps the narrower ones */
  /* An f16 Y's texels are 4 halves stored as one f16vec4 through a
   * storage buffer (Y_VEC4 1, conv.comp's Y16), never an image or pairs */
  const char* yv = getenv("KILN_SPIRV_CONV_YSTORE");
  const int y_vec4 = !texel_y ? 0
                     : y16 ? 1
                     : (yv && !strcmp(yv, "image")) ? 0
                     : int64 && !(yv && !strcmp(yv, "vec4")) && cp % 8 == 0 && t.rn % 8 == 0 && t.tn % 8 == 0 ? 2
                                                                                                             : 1;
  /* (mode 4) the K loop's TK steps: their X values first, then each sum
   * takes its TK products in a row (conv.comp KREUSE); lavapipe holds an
   * invocation's sums on the stack, so a sum is loaded and stored once per
   * TK products instead of once per product (MobileNetV2's 1x1 convs with
   * TK 4: 21-30% less time). KILN_SPIRV_CONV_KREUSE=off keeps one K step
   * at a time */
  const char* kr = getenv("KILN_SPIRV_CONV_KREUSE");
  const int kreuse = texel && !(kr && !strcmp(kr, "off"));
  /* (subgroup mode) f32 weights in pairs of channels as 64-bit words */
  const int w64 = t.shared == 2 && !strcmp(type[0], "float") && c->pt % 2 == 0 && c->M % 2 == 0 && t.tm % 16 == 0;
  kiln_vulkan_sb_printf(&b, "#define TW %s\n#define TX %s\n#define TC %s\n#define TY %s\n", type[0], type[1], type[2],
            type[3]);
  kiln_vulkan_sb_printf(&b, "#define TEXEL_W16 %d\n#define TEXEL_X16 %d\n#define Y16 %d\n", texel && w16, texel && x16,
                        texel_y && y16);
  kiln_vulkan_sb_printf(&b,
            "#define BIND_W %d\n#define BIND_X %d\n#define BIND_C %d\n#define BIND_Y %d\n"
            "#define CM %lld\n#define CQ %lld\n#define CK %lld\n#define CT %lld\n#define CC %lld\n"
            "#define CPLANE %lld\n#define CBATCH %lld\n#define CPT %lld\n#define CKBS %lld\n"
            "#define CTILES %lld\n#define CCROP %d\n#define CQ1 %lld\n#define CQ2 %lld\n"
            "#define CDO %lld\n#define CHO %lld\n#define CWO %lld\n#define CHAS_BIAS %d\n"
            "#define TM %d\n#define TN %d\n#define TK %d\n#define RM %d\n#define RN %d\n#define SHARED %d\n"
            "#define W64 %d\n#define TEXEL %d\n#define TEXEL_Y %d\n#define XALIGNED %d\n#define TEXEL_C %d\n"
            "#define Y_VEC4 %d\n#define KREUSE %d\n",
            bind[0], bind[1], bind[2] < 0 ? 0 : bind[2], bind[3], (long long)c->M, (long long)c->Q,
            (long long)c->K, (long long)c->T, (long long)c->C, (long long)c->plane, (long long)c->batch,
            (long long)c->pt, (long long)c->kbs, (long long)c->tiles, c->crop ? 1 : 0, (long long)c->q1,
            (long long)c->q2, (long long)c->od, (long long)c->oh, (long long)c->ow, c->has_bias ? 1 : 0, t.tm,
            t.tn, t.tk, t.rm, t.rn, t.shared >= 2 ? 2 : t.shared, w64, texel, texel_y, xaligned, texel_c, y_vec4, kreuse);
  /* (shared-memory mode) W as vec4 of 4 channels of a panel, X as vec4 of
   * 4 positions where the planes are read flat and every K step's positions
   * start on a vec4; two shared buffers where they fit (conv.comp W4 X4 DB) */
  if (t.shared == 1) {
    const int w4 = c->pt % 4 == 0 && c->M % 4 == 0 && t.tm % 4 == 0 && (int64_t)t.tm * t.tk / 4 % nt == 0;
    int x4 = !direct && c->plane % 4 == 0 && c->Q % 4 == 0 && t.tn % 4 == 0 && (int64_t)t.tk * t.tn / 4 % nt == 0;
    for (int64_t i = 0; i < c->T; ++i) x4 = x4 && c->toff[i] % 4 == 0;
    const int db = 2 * (int64_t)t.tk * (t.tm + t.tn) * 4 <= KILN_VULKAN_SHARED_BUDGET;
    kiln_vulkan_sb_printf(&b, "#define W4 %d\n#define X4 %d\n#define DB %d\n", w4, x4, db);
    if (w4 && strcmp(type[0], "float")) kiln_vulkan_sb_printf(&b, "#define TW4 f16vec4\n");
    if (x4 && strcmp(type[1], "float")) kiln_vulkan_sb_printf(&b, "#define TX4 f16vec4\n");
  }
  if (t.h) kiln_vulkan_sb_printf(&b, "#define AF16 1\n"); /* f16 products and sums */
  kiln_vulkan_sb_printf(&b,
                        "#define CDIRECT %d\n#define CIH %lld\n#define CIW %lld\n#define CPH %lld\n#define CPW %lld\n"
                        "#define CSH %lld\n#define CSW %lld\n#define CKW %lld\n#define CDH %lld\n#define CDW %lld\n",
                        direct, (long long)c->ih, (long long)c->iw, (long long)c->pad_h, (long long)c->pad_w,
                        (long long)c->sh, (long long)c->sw, (long long)(c->kw > 0 ? c->kw : 1), (long long)c->dh,
                        (long long)c->dw);
  kiln_vulkan_sb_printf(&b, "const int TOFF[%lld] = int[%lld](", (long long)c->T, (long long)c->T);
  for (int64_t i = 0; i < c->T; ++i) kiln_vulkan_sb_printf(&b, "%s%d", i ? ", " : "", (int)c->toff[i]);
  kiln_vulkan_sb_printf(&b, ");\n");
  const uint32_t texel_ops = kiln_vulkan_epi_texels(c, texel_epi);
  kiln_vulkan_epi_print_texel(&b, &c->epi, 0, 0, texel_ops);
  if (texel_y) kiln_vulkan_epi_print_quad(&b, &c->epi, texel_ops, quads);
  kiln_vulkan_sb_printf(&b, "%s", rest);
  if (b.oom) {
    free(b.p);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "conv '%s': shader text", name);
  }
  *out_glsl = b.p;
  *out_trips = kiln_vulkan_trips_tiled(c->K, &t, t.shared >= 2); /* the subgroup mode unrolls TK */
  groups[0] = (c->Q + t.tn - 1) / t.tn;
  groups[1] = (c->M + t.tm - 1) / t.tm;
  groups[2] = c->batch > 0 ? c->batch : 1;
  local[0] = t.shared == 4 && ly > 1 ? nt : lx; /* conv.comp: a split work-group is one row */
  local[1] = t.shared == 4 && ly > 1 ? 1 : ly;
  local[2] = 1;
  return NULL;
}
