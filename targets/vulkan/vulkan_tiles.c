/* The Vulkan target's tile rules as lowering's template set reads them
 * (kiln_template_set_t.tiles, lowering/template.h): every instance's
 * tiles are chosen during kiln_template_choose, from the defaults and the
 * KILN_SPIRV_{GEMM,CONV}_TILES overrides, and recorded in the descriptor;
 * the emitter reads them back here. The Vulkan templates read the
 * lowering's packed weights as they are (no weight layout of their own). */
#include "targets/vulkan/vulkan_internal.h"

/* Record orders: GEMM / conv tm,tn,tk,rm,rn,shared; depthwise wg. */
static kiln_template_tiles_t record(const kiln_spirv_gemm_tiles_t* t) {
  return (kiln_template_tiles_t){.n = 6, .v = {t->tm, t->tn, t->tk, t->rm, t->rn, t->shared}};
}

void kiln_vulkan_template_tiles(kiln_template_t* t) {
  t->tiles = (kiln_template_tiles_t){0};
  if (t->kind == KILN_TEMPLATE_GEMM) {
    const kiln_spirv_gemm_t g = kiln_vulkan_gemm_of(&t->gemm);
    const kiln_spirv_gemm_tiles_t gt = kiln_spirv_gemm_default_tiles(g.M, g.N);
    t->tiles = record(&gt);
  } else if (t->kind == KILN_TEMPLATE_CONV) {
    const kiln_spirv_gemm_tiles_t ct = kiln_spirv_conv_default_tiles(t->conv.M, t->conv.Q);
    t->tiles = record(&ct);
  } else if (t->kind == KILN_TEMPLATE_DEPTHWISE) {
    /* one output position per invocation, 64 a work-group (not tuned) */
    t->tiles = (kiln_template_tiles_t){.n = 1, .v = {64}};
  }
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
  KILN_RETURN_IF_ERROR(want(t, 6, name));
  const int32_t* v = t->tiles.v;
  *out = (kiln_spirv_gemm_tiles_t){v[0], v[1], v[2], v[3], v[4], v[5]};
  return NULL;
}

kiln_status_t kiln_vulkan_dw_tiles_of(const kiln_template_t* t, const char* name, int32_t* out_wg) {
  KILN_RETURN_IF_ERROR(want(t, 1, name));
  if (t->tiles.v[0] < 1 || t->tiles.v[0] > 1024)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "spirv: kernel '%s': depthwise work-group of %d", name,
                            (int)t->tiles.v[0]);
  *out_wg = t->tiles.v[0];
  return NULL;
}
