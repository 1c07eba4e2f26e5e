/* The int8 product shader (kernels/vulkan/q8.comp): the GLSL of a
 * QLinearConv / QLinearMatMul instance from lowering's kiln_template_q8_t. */
#include "targets/vulkan/vulkan_internal.h"

#include <stdlib.h>
#include <string.h>

#include "ir/ops/nn_quant.h"

/* OpSDotKHR (SPV_KHR_integer_dot_product, opcode 4450) on two 32-bit words
 * of 4 packed signed bytes (PackedVectorFormat4x8Bit, 0), declared through
 * GL_EXT_spirv_intrinsics: the glslang here has no
 * GL_EXT_integer_dot_product. Capabilities DotProduct (6019) and
 * DotProductInput4x8BitPacked (6018). */
static const char kSdot[] =
    "#extension GL_EXT_spirv_intrinsics : require\n"
    "spirv_instruction(extensions = [\"SPV_KHR_integer_dot_product\"], capabilities = [6019, 6018], id = 4450)\n"
    "int kiln_sdot4(int a, int b, spirv_literal int fmt);\n";

kiln_status_t kiln_vulkan_q8_source(const kiln_template_q8_t* q, const kiln_template_tiles_t* tiles, const char* name,
                                    char** out_glsl, int64_t groups[3], int64_t local[3], int64_t* out_trips) {
  if (tiles->n != 4)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "spirv: kernel '%s': its int8 template has %d tile parameters, the Vulkan one reads 4 "
                            "(choose the templates with the Vulkan set, kiln_spirv_templates)",
                            name, (int)tiles->n);
  const int32_t tm = tiles->v[0], tp = tiles->v[1], wg = tiles->v[2], idot = tiles->v[3];
  if ((tm != 1 && tm != 2 && tm != 4 && tm != 8) || (tp != 1 && tp != 2 && tp != 4 && tp != 8) || wg < 1 || wg > 1024 ||
      (idot & ~1))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "spirv: int8 kernel '%s': bad tiles %d x %d, work-group %d", name,
                            (int)tm, (int)tp, (int)wg);
  kiln_vulkan_sb_t b = {0};
  const char* rest = NULL;
  kiln_status_t hs = kiln_vulkan_shader_head(&b, kiln_vk_q8, "kernels/vulkan/q8.comp", false, &rest);
  if (hs) return hs;
  kiln_vulkan_sb_printf(&b, "#extension GL_EXT_shader_8bit_storage : require\n"
                            "#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require\n%s",
                        idot ? kSdot : "");
  kiln_vulkan_sb_printf(&b, "// kiln int8 %s '%s': %lld outputs x %lld positions, K %lld, %lld group(s)\n",
                        q->matmul ? "matmul" : "conv", name, (long long)q->M, (long long)q->P, (long long)q->K,
                        (long long)q->G);
  static const char* const role_names[KILN_Q8_ROLES] = {"x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias", "y"};
  const char* x8 = q->x_u8 ? "uint8_t" : "int8_t";
  const char* w8 = q->w_u8 ? "uint8_t" : "int8_t";
  const char* y8 = q->y_u8 ? "uint8_t" : "int8_t";
  const char* role_types[KILN_Q8_ROLES] = {x8, "float", x8, w8, "float", w8, "float", y8, "int", y8};
  for (int32_t r = 0; r < KILN_Q8_ROLES; ++r)
    if (q->bind[r] >= 0)
      kiln_vulkan_sb_printf(&b, "layout(std430, set = 0, binding = %d) restrict %sbuffer Buf_%s { %s %s[]; };\n",
                            (int)q->bind[r], r == KILN_Q8_Y ? "writeonly " : "readonly ", role_names[r],
                            role_types[r], role_names[r]);
  int64_t lo = 0, hi = 0;
  kiln_nn_quant_range(q->y_u8 ? KILN_DTYPE_U8 : KILN_DTYPE_I8, &lo, &hi);
  kiln_vulkan_sb_printf(&b, "#define TY %s\n#define XU8 %d\n#define WU8 %d\n"
                            "#define YLO %lld.0\n#define YHI %lld.0\n#define MATMUL %d\n",
                        y8, q->x_u8, q->w_u8, (long long)lo, (long long)hi, q->matmul);
  kiln_vulkan_sb_printf(&b, "#define CN %lld\n#define CG %lld\n#define CM %lld\n#define CMG %lld\n#define CCG %lld\n"
                            "#define CK %lld\n#define CP %lld\n",
                        (long long)q->N, (long long)q->G, (long long)q->M, (long long)q->Mg, (long long)q->Cg,
                        (long long)q->K, (long long)q->P);
  static const char axes[] = "DHW";
  for (int i = 0; i < 3; ++i)
    kiln_vulkan_sb_printf(&b, "#define I%c %lld\n#define O%c %lld\n#define K%c %lld\n#define S%c %lld\n"
                              "#define D%c %lld\n#define P%c %lld\n",
                          axes[i], (long long)q->in[i], axes[i], (long long)q->out[i], axes[i], (long long)q->k[i],
                          axes[i], (long long)q->s[i], axes[i], (long long)q->d[i], axes[i], (long long)q->p[i]);
  kiln_vulkan_sb_printf(&b, "#define WPC %d\n#define HAS_BIAS %d\n#define TM %d\n#define TP %d\n#define WG %d\n"
                            "#define IDOT %d\n",
                        q->w_per_chan, q->bind[KILN_Q8_BIAS] >= 0, (int)tm, (int)tp, (int)wg, (int)idot);
  kiln_vulkan_sb_printf(&b, "%s", rest);
  if (b.oom) {
    free(b.p);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "int8 '%s': shader text", name);
  }
  groups[0] = ((q->P + tp - 1) / tp + wg - 1) / wg;
  groups[1] = q->N * q->G * ((q->Mg + tm - 1) / tm); /* past the device's counts: folded (vulkan_grid.c) */
  *out_glsl = b.p;
  groups[2] = 1;
  local[0] = wg;
  local[1] = local[2] = 1;
  *out_trips = kiln_template_q8_trips(q);
  return NULL;
}
