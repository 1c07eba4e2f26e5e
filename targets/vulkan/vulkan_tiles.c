/* The Vulkan target's tile rules as lowering's template set reads them
 * (kiln_template_set_t.tiles, lowering/template.h): every instance's
 * tiles are chosen during kiln_template_choose, from the defaults and the
 * KILN_SPIRV_{GEMM,CONV}_TILES overrides, and recorded in the descriptor;
 * the emitter reads them back here. The Vulkan templates read the
 * lowering's packed weights as they are (no weight layout of their own). */
#include "targets/vulkan/vulkan_internal.h"

/* Record orders: GEMM / conv tm,tn,tk,rm,rn,shared; depthwise wg,rw. */
static kiln_template_tiles_t record(const kiln_spirv_gemm_tiles_t* t) {
  return (kiln_template_tiles_t){.n = 6, .v = {t->tm, t->tn, t->tk, t->rm, t->rn, t->shared}};
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

void kiln_vulkan_template_tiles(kiln_template_t* t, uint32_t gpu_lacks) {
  t->tiles = (kiln_template_tiles_t){0};
  if (t->kind == KILN_TEMPLATE_GEMM) {
    const kiln_spirv_gemm_t g = kiln_vulkan_gemm_of(&t->gemm);
    const kiln_spirv_gemm_tiles_t gt = fit(kiln_spirv_gemm_default_tiles(g.M, g.N), g.M, g.N, gpu_lacks);
    t->tiles = record(&gt);
  } else if (t->kind == KILN_TEMPLATE_CONV) {
    const kiln_spirv_gemm_tiles_t ct =
        fit(kiln_spirv_conv_default_tiles(t->conv.M, t->conv.Q), t->conv.M, t->conv.Q, gpu_lacks);
    t->tiles = record(&ct);
  } else if (t->kind == KILN_TEMPLATE_DEPTHWISE) {
    /* 64 invocations a work-group, each with up to 8 outputs of a row
     * (depthwise.comp says why) */
    const int32_t rw = t->dw.ow >= 8 ? 8 : t->dw.ow > 0 ? (int32_t)t->dw.ow : 1;
    t->tiles = (kiln_template_tiles_t){.n = 2, .v = {64, rw}};
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

kiln_status_t kiln_vulkan_dw_tiles_of(const kiln_template_t* t, const char* name, int32_t* out_wg,
                                      int32_t* out_rw) {
  KILN_RETURN_IF_ERROR(want(t, 2, name));
  if (t->tiles.v[0] < 1 || t->tiles.v[0] > 1024 || t->tiles.v[1] < 1 || t->tiles.v[1] > 8)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "spirv: kernel '%s': depthwise work-group of %d, %d outputs per invocation", name,
                            (int)t->tiles.v[0], (int)t->tiles.v[1]);
  *out_wg = t->tiles.v[0];
  *out_rw = t->tiles.v[1];
  return NULL;
}
