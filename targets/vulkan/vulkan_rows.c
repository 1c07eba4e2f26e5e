/* The Softmax / LogSoftmax / LayerNorm / reduction row shader
 * (kernels/vulkan/rows.comp): the GLSL of an instance from lowering's row descriptor (kiln_template_rows_t). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "targets/vulkan/vulkan_internal.h"

kiln_status_t kiln_vulkan_rows_source(const kiln_template_rows_t* q, bool texels_fit, const char* name,
                                      char** out_glsl, int64_t groups[3], int64_t local[3], int64_t* trips) {
  if (q->rows < 1 || q->n < 1 || q->rows * q->n > INT32_MAX)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "rows '%s': %lld rows of %lld", name, (long long)q->rows,
                            (long long)q->n);
  static const char* const reds[] = {"", "sum", "mean", "max", "min", "sumsquare", "l2", "l1", "logsum", "logsumexp"};
  if (q->red < 0 || q->red > KILN_ROWS_LSE || (q->red == KILN_ROWS_LSE && q->bind_s < 0))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "rows '%s': reduction %d", name, (int)q->red);
  /* vec4 steps where the rows are whole vec4s (the views start on
   * kiln_device_info_t.buffer_alignment, at least 16 bytes) */
  const bool vec4 = q->n % 4 == 0;
  const int64_t ne = vec4 ? q->n / 4 : q->n;
  /* a subgroup a row; the loop trips below (two passes a row) count
   * subgroups of at least 4 lanes (lavapipe 8, GPUs 16-64): a work-group
   * takes 4 rows where their trips fit lavapipe's limit, else one */
  const int32_t wg = 32;
  const int64_t per_row = (q->red ? 1 : 2) * ((ne + 3) / 4); /* a reduction: one pass */
  const int32_t rb = 4 * per_row <= 65535 ? 4 : 1;
  kiln_vulkan_sb_t b = {0};
  const char* rest = NULL;
  kiln_status_t hs = kiln_vulkan_shader_head(&b, kiln_vk_rows, "kernels/vulkan/rows.comp", false, &rest);
  if (hs) return hs;
  char what[32];
  snprintf(what, sizeof what, "reduce-%s", reds[q->red]);
  kiln_vulkan_sb_printf(&b, "// kiln rows '%s': %s, %lld rows of %lld%s%s\n", name,
                        q->red ? what : q->ln ? "LayerNormalization" : q->log ? "LogSoftmax" : "Softmax",
                        (long long)q->rows, (long long)q->n, q->hx ? ", f16 x" : "", q->hy ? ", f16 y" : "");
  kiln_vulkan_sb_printf(&b, "#define BIND_X %d\n#define BIND_Y %d\n#define ROWS %lld\n#define N %lld\n#define WG %d\n"
                            "#define RB %d\n#define VEC4 %d\n#define LOG %d\n#define HX %d\n#define HY %d\n",
                        (int)q->bind_x, (int)q->bind_y, (long long)q->rows, (long long)q->n, (int)wg, (int)rb,
                        vec4 ? 1 : 0, q->log ? 1 : 0, q->hx ? 1 : 0, q->hy ? 1 : 0);
  /* a reduction's vec4 steps read X as rgba32f texels where X's view
   * fits the device's texel count (lavapipe: a storage-buffer load whose
   * address differs between lanes is a loop over the lanes) */
  kiln_vulkan_sb_printf(&b, "#define LN %d\n#define RED %d\n#define TEXEL %d\n", q->ln ? 1 : 0, (int)q->red,
                        q->red && vec4 && !q->hx && texels_fit ? 1 : 0);
  if (q->red == KILN_ROWS_LSE) kiln_vulkan_sb_printf(&b, "#define BIND_S %d\n", (int)q->bind_s);
  if (q->ln) {
    /* eps by its bits: the node's float exactly */
    uint32_t e;
    memcpy(&e, &q->eps, sizeof e);
    kiln_vulkan_sb_printf(&b, "#define BIND_S %d\n#define BIAS %d\n#define BIND_B %d\n#define EPS uintBitsToFloat(0x%08xu)\n",
                          (int)q->bind_s, q->bind_b >= 0 ? 1 : 0, (int)(q->bind_b >= 0 ? q->bind_b : 0), (unsigned)e);
  }
  kiln_vulkan_sb_printf(&b, "%s", rest);
  if (b.oom) {
    free(b.p);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "rows '%s': shader text", name);
  }
  *out_glsl = b.p;
  groups[0] = (q->rows + rb - 1) / rb;
  groups[1] = groups[2] = 1;
  local[0] = wg;
  local[1] = local[2] = 1;
  *trips = rb * per_row;
  return NULL;
}
