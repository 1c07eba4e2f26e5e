/* The window pool shader (kernels/vulkan/pool.comp): the GLSL of an
 * instance from lowering's pool descriptor (kiln_template_pool_t). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "targets/vulkan/vulkan_internal.h"

kiln_status_t kiln_vulkan_pool_source(const kiln_template_pool_t* q, bool texels_fit, bool y_texels_fit,
                                      const char* name, char** out_glsl, int64_t groups[3], int64_t local[3]) {
  return kiln_vulkan_pool_source_int64(q, texels_fit, y_texels_fit, false, 8, name, out_glsl, groups, local);
}

kiln_status_t kiln_vulkan_pool_source_int64(const kiln_template_pool_t* q, bool texels_fit, bool y_texels_fit,
                                            bool int64, int32_t wg, const char* name, char** out_glsl,
                                            int64_t groups[3], int64_t local[3]) {
  if (wg < 1 || wg > 1024)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "pool '%s': a work-group of %d invocations", name, (int)wg);
  if (q->kh * q->kw > KILN_TEMPLATE_POOL_MAX_TAPS || q->planes < 1 || q->planes > KILN_TEMPLATE_POOL_MAX_PLANES ||
      q->oh < 1 || q->ow < 1)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "pool '%s': %lld planes of %lldx%lld, %lldx%lld taps", name,
                            (long long)q->planes, (long long)q->oh, (long long)q->ow, (long long)q->kh,
                            (long long)q->kw);
  /* outputs per invocation: 8 (a row segment's texels serve them all),
   * fewer on narrow planes */
  const int32_t rw = q->ow >= 8 ? 8 : q->ow >= 4 ? 4 : 1;
  /* every lane busy: the planes folded into dim x where the work-groups
   * fit it (MobileNetV2's 7x7 GlobalAveragePool, one invocation a plane:
   * 0.18-0.29 ms with a work-group a plane, most lanes idle) */
  const int64_t per_plane = q->oh * ((q->ow + rw - 1) / rw);
  const char* env = getenv("KILN_SPIRV_POOL"); /* =planes: a work-group row per plane (tests) */
  const bool flat = (q->planes * per_plane + wg - 1) / wg <= 65535 && !(env && !strcmp(env, "planes"));
  kiln_vulkan_sb_t b = {0};
  const char* rest = NULL;
  kiln_status_t hs = kiln_vulkan_shader_head(&b, kiln_vk_pool, "kernels/vulkan/pool.comp", q->hx || q->hy, &rest);
  if (hs) return hs;
  /* texel stores where the rows are whole texels, through a storage buffer,
   * in pairs where they are whole pairs (kiln_vulkan_y_store); f16 Y: 4
   * halves a store (f16vec4, no pairs; without the vec4 form scalars) */
  bool texel_y = y_texels_fit && rw % 4 == 0 && q->ow % 4 == 0;
  const char* ys = getenv("KILN_SPIRV_YSTORE");
  if (q->hy && ys && !strcmp(ys, "image")) texel_y = false;
  const int y_vec4 = kiln_vulkan_y_store(&b, texel_y, int64 && !q->hy, !q->hy && rw % 8 == 0 && q->ow % 8 == 0);
  kiln_vulkan_sb_printf(&b, "// kiln pool '%s': %s, %lld planes %lldx%lld -> %lldx%lld\n", name,
                        q->max ? "max" : "average", (long long)q->planes, (long long)q->ih, (long long)q->iw,
                        (long long)q->oh, (long long)q->ow);
  kiln_vulkan_sb_printf(&b,
                        "#define BIND_X %d\n#define BIND_Y %d\n#define CP %lld\n#define IH %lld\n#define IW %lld\n"
                        "#define OH %lld\n#define OW %lld\n#define KH %lld\n#define KW %lld\n#define SH %lld\n"
                        "#define SW %lld\n#define PH %lld\n#define PW %lld\n#define MAX %d\n#define COUNT_PAD %d\n"
                        "#define RW %d\n#define TEXEL %d\n#define TEXEL_Y %d\n#define FLAT %d\n#define Y_VEC4 %d\n"
                        "#define HX %d\n#define HY %d\n",
                        (int)q->bind_x, (int)q->bind_y, (long long)q->planes, (long long)q->ih, (long long)q->iw,
                        (long long)q->oh, (long long)q->ow, (long long)q->kh, (long long)q->kw, (long long)q->sh,
                        (long long)q->sw, (long long)q->ph, (long long)q->pw, q->max ? 1 : 0, q->count_pad ? 1 : 0,
                        (int)rw, texels_fit ? 1 : 0, texel_y ? 1 : 0, flat ? 1 : 0, y_vec4, q->hx ? 1 : 0,
                        q->hy ? 1 : 0);
  if (wg != 8) kiln_vulkan_sb_printf(&b, "#define WG %d\n", (int)wg); /* (lavapipe's 8: the text unchanged) */
  kiln_vulkan_sb_printf(&b, "%s", rest);
  if (b.oom) {
    free(b.p);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "pool '%s': shader text", name);
  }
  *out_glsl = b.p;
  groups[0] = flat ? (q->planes * per_plane + wg - 1) / wg : (per_plane + wg - 1) / wg;
  groups[1] = flat ? 1 : q->planes;
  groups[2] = 1;
  local[0] = wg;
  local[1] = local[2] = 1;
  return NULL;
}
