/* The depthwise convolution shader (kernels/vulkan/depthwise.comp): the
 * GLSL of an instance from lowering's depthwise descriptor. */
#include "targets/vulkan/vulkan_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows of RW outputs per invocation (depthwise.comp's RH): RH rows read
 * (RH-1)*SH + (KH-1)*DH + 1 input row segments instead of RH*KH, and on
 * lavapipe every segment is a few texel fetches (a loop over the lanes
 * each). The rows (4, 2 or 1) with the least work a plane by
 * kiln_vulkan_dw_plane_cost, none where RW*RH would make the unrolled body
 * long. KILN_SPIRV_DW_RH=1|2|4 overrides it (when the rule allows rows). */
int32_t kiln_vulkan_dw_rows(const kiln_template_dw_t* d, int32_t wg, int32_t rw) {
  if (d->oh < 2 || d->kh * d->kw > 25) return 1;
  const char* env = getenv("KILN_SPIRV_DW_RH");
  if (env && (!strcmp(env, "1") || !strcmp(env, "2") || !strcmp(env, "4"))) return (int32_t)atoi(env);
  int32_t best = 1;
  for (int32_t rh = 2; rh <= 4; rh *= 2)
    if (kiln_vulkan_dw_plane_cost(d, wg, rw, rh) <= kiln_vulkan_dw_plane_cost(d, wg, rw, best)) best = rh;
  return best;
}

/* A plane's work in the row form, in units of a row segment's reads (or a
 * row's sums and stores) for 8 invocations: lavapipe runs every SIMD batch
 * of 8 of a work-group, the idle ones too, so each group costs all of its
 * batches, each batch an invocation's segments plus its rows, and a group
 * one unit more (its start). Measured on lavapipe, 10 chained 192-channel
 * 28x28 depthwise convs: 4 rows in groups of 32 (4 batches a plane, 7 of
 * 8 lanes busy in the last) 3.1 ms against 4.4 for 1 row in 2 groups of 56
 * and 4.9 for 1 row in 2 groups of 64 (the 64-invocation rule before);
 * their costs here 41, 57, 65. */
int64_t kiln_vulkan_dw_plane_cost(const kiln_template_dw_t* d, int32_t wg, int32_t rw, int32_t rh) {
  const int64_t n = (d->oh + rh - 1) / rh * ((d->ow + rw - 1) / rw);
  const int64_t seg = (int64_t)(rh - 1) * d->sh + (d->kh - 1) * d->dh + 1;
  return (n + wg - 1) / wg * (((int64_t)wg + 7) / 8 * (seg + rh) + 1);
}

bool kiln_vulkan_dw_flat(const kiln_template_dw_t* d, int32_t wg, int32_t rw) {
  bool f16 = d->f16_x || d->f16_w || d->f16_c || d->f16_y;
  for (int32_t i = 0; i < d->epi.n_operands; ++i) f16 = f16 || d->f16_e[i];
  const int64_t pl = d->oh * d->ow, total = d->N * d->M * pl;
  if (f16 || d->sh != 1 || d->sw != 1 || d->ih != d->oh || d->iw != d->ow || d->Mg != 1 || d->C != d->M ||
      d->ow % 4 == 0 || rw < 4 || rw % 4 != 0 || pl < rw || total % rw != 0 || wg < 1)
    return false;
  return (total / rw + wg - 1) / wg <= 65535;
}

int32_t kiln_vulkan_dw_flat_rows(const kiln_template_dw_t* d) {
  if (d->ow < 1) return 0;
  for (int64_t rw = d->ow; rw <= 32; rw += d->ow)
    if (rw % 4 == 0 && (d->oh * d->ow) % rw == 0) return kiln_vulkan_dw_flat(d, 64, (int32_t)rw) ? (int32_t)rw : 0;
  return 0;
}

/* The lowering's direct depthwise kernel (kiln_template_dw_t, lowering/template.h):
 * the kernel keeps its parameters, the shader takes its place
 * (kernels/vulkan/depthwise.comp). */
kiln_status_t kiln_vulkan_dw_source(const kiln_template_dw_t* d, int32_t wg, int32_t rw, bool texels_fit,
                                    bool w_texels_fit, bool y_texels_fit, const char* name, char** out_glsl,
                                    int64_t groups[3], int64_t local[3]) {
  return kiln_vulkan_dw_source_int64(d, wg, rw, texels_fit, w_texels_fit, y_texels_fit, false, name, out_glsl,
                                     groups, local);
}

kiln_status_t kiln_vulkan_dw_source_int64(const kiln_template_dw_t* d, int32_t wg, int32_t rw, bool texels_fit,
                                          bool w_texels_fit, bool y_texels_fit, bool int64, const char* name,
                                          char** out_glsl, int64_t groups[3], int64_t local[3]) {
  bool f16 = d->f16_x || d->f16_w || d->f16_c || d->f16_y;
  for (int32_t i = 0; i < d->epi.n_operands; ++i) f16 = f16 || d->f16_e[i];
  kiln_vulkan_sb_t b = {0};
  const char* rest = NULL;
  kiln_status_t hs = kiln_vulkan_shader_head(&b, kiln_vk_depthwise, "kernels/vulkan/depthwise.comp", f16, &rest);
  if (hs) return hs;
  /* vec4 texel stores of f32 Y: whole texels of a row; through a storage
   * buffer, in pairs where the rows are whole pairs (MobileNetV2's
   * depthwise convs: kiln_vulkan_y_store) */
  const bool flat = kiln_vulkan_dw_flat(d, wg, rw) && texels_fit && w_texels_fit && y_texels_fit;
  const bool texel_y = flat || (!d->f16_y && y_texels_fit && d->ow % 4 == 0 && rw % 4 == 0);
  const int y_vec4 = kiln_vulkan_y_store(&b, texel_y, int64, flat ? rw % 8 == 0 : d->ow % 8 == 0 && rw % 8 == 0);
  const int32_t rh = flat ? 1 : kiln_vulkan_dw_rows(d, wg, rw);
  kiln_vulkan_sb_printf(&b, "// kiln depthwise '%s': %lld channels, %lldx%lld taps\n#define RH %d\n#define FLAT %d\n", name,
            (long long)d->M, (long long)d->kh, (long long)d->kw, (int)rh, flat ? 1 : 0);
#define DW_T(f) ((f) ? "float16_t" : "float")
  kiln_vulkan_sb_printf(&b, "#define TX %s\n#define TW %s\n#define TC %s\n#define TY %s\n", DW_T(d->f16_x), DW_T(d->f16_w),
            DW_T(d->f16_c), DW_T(d->f16_y));
  for (int32_t i = 0; i < d->epi.n_operands; ++i)
    kiln_vulkan_sb_printf(&b, "layout(std430, set = 0, binding = %d) restrict readonly buffer BufE%d { %s e%d[]; };\n",
              (int)d->bind_e[i], (int)i, DW_T(d->f16_e[i]), (int)i);
#undef DW_T
  kiln_vulkan_sb_printf(&b,
            "#define BIND_X %d\n#define BIND_W %d\n#define BIND_C %d\n#define BIND_Y %d\n"
            "#define CN %lld\n#define CM %lld\n#define CC %lld\n#define MG %lld\n"
            "#define IH %lld\n#define IW %lld\n#define OH %lld\n#define OW %lld\n"
            "#define KH %lld\n#define KW %lld\n#define SH %lld\n#define SW %lld\n"
            "#define DH %lld\n#define DW %lld\n#define PH %lld\n#define PW %lld\n"
            "#define CHAS_BIAS %d\n#define WG %d\n#define RW %d\n#define TEXEL %d\n#define TEXEL_W %d\n"
            "#define TEXEL_Y %d\n#define Y_VEC4 %d\n",
            (int)d->bind_x, (int)d->bind_w, d->bind_c < 0 ? 0 : (int)d->bind_c, (int)d->bind_y, (long long)d->N,
            (long long)d->M, (long long)d->C, (long long)d->Mg, (long long)d->ih, (long long)d->iw,
            (long long)d->oh, (long long)d->ow, (long long)d->kh, (long long)d->kw, (long long)d->sh,
            (long long)d->sw, (long long)d->dh, (long long)d->dw, (long long)d->ph, (long long)d->pw,
            d->bind_c >= 0 ? 1 : 0, wg, (int)rw, texels_fit ? 1 : 0 /* vec4 texel reads of X */,
            w_texels_fit ? 1 : 0 /* of W */, texel_y ? 1 : 0, y_vec4);
  /* f16 X and W: the texels are rgba16f (depthwise.comp TEXEL_X16) */
  kiln_vulkan_sb_printf(&b, "#define TEXEL_X16 %d\n#define TEXEL_W16 %d\n", texels_fit && d->f16_x,
                        w_texels_fit && d->f16_w);
  kiln_vulkan_epi_print(&b, &d->epi);
  kiln_vulkan_sb_printf(&b, "%s", rest);
  if (b.oom) {
    free(b.p);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "depthwise '%s': shader text", name);
  }
  *out_glsl = b.p;
  if (flat) {
    groups[0] = (d->N * d->M * d->oh * d->ow / rw + wg - 1) / wg;
    groups[1] = 1;
  } else {
    groups[0] = ((d->oh + rh - 1) / rh * ((d->ow + rw - 1) / rw) + wg - 1) / wg;
    groups[1] = d->N * d->M;
  }
  groups[2] = 1;
  local[0] = wg;
  local[1] = local[2] = 1;
  return NULL;
}
