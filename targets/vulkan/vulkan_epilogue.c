/* Shader text: a growing buffer for the headers the templates get, and
 * the fused element-wise epilogue (lowering's kiln_template_epi_t) printed
 * as the GLSL the conv and depthwise shaders apply in their stores. */
#include "targets/vulkan/vulkan_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kiln_vulkan_sb_printf(kiln_vulkan_sb_t* b, const char* fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = true;
      return;
    }
    if (b->p && b->len + (size_t)n < b->cap) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)n;
    char* q = realloc(b->p, cap);
    if (!q) {
      b->oom = true;
      return;
    }
    b->p = q;
    b->cap = cap;
  }
}

kiln_status_t kiln_vulkan_shader_head(kiln_vulkan_sb_t* b, const char* src, const char* file, bool f16,
                                      const char** rest) {
  const char* nl = strstr(src, "#extension");
  nl = nl ? strchr(nl, '\n') : NULL;
  if (!nl) return kiln_make_status(KILN_INTERNAL, "%s has no #extension line", file);
  kiln_vulkan_sb_printf(b, "%.*s", (int)(nl - src) + 1, src);
  *rest = nl + 1;
  if (f16)
    kiln_vulkan_sb_printf(b, "#extension GL_EXT_shader_16bit_storage : require\n"
                             "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n");
  return NULL;
}

/* a stride as printed: with run-time sizes (|m|, |p| > 0: the shader's CM
 * and CP) the products of them by name, so the text is the same for every
 * conv of a kind */
static void epi_stride(kiln_vulkan_sb_t* b, int64_t v, int64_t m, int64_t p) {
  if (p > 0 && v == m * p && v > 0) kiln_vulkan_sb_printf(b, "(CM * CP)");
  else if (p > 0 && v == p) kiln_vulkan_sb_printf(b, "CP");
  else if (m > 0 && v == m) kiln_vulkan_sb_printf(b, "CM");
  else kiln_vulkan_sb_printf(b, "%lld", (long long)v);
}

/* operand |o|'s index at image b, channel m and position |pos| */
static void epi_index(kiln_vulkan_sb_t* b, const kiln_template_epi_operand_t* o, int64_t m, int64_t p,
                      const char* pos) {
  kiln_vulkan_sb_printf(b, "(b) * ");
  epi_stride(b, o->sn, m, p);
  kiln_vulkan_sb_printf(b, " + (m) * ");
  epi_stride(b, o->sm, m, p);
  if (o->sp) kiln_vulkan_sb_printf(b, " + %s", pos);
}

/* operand |i| at image b, channel m and the position |pos| prints: a float
 * of its storage buffer; with its bit in |texels| a component of
 * samplerBuffer teI (an rgba16f image with its KILN_VULKAN_EPI_HALF bit):
 * with its bit in |quads| too (KC_EPI4: laid out as Y,
 * position stride 1) component e of the texel holding positions q .. q + 3,
 * one fetch for the 4 outputs of a stored texel, else the component of the
 * position's own texel */
static void epi_operand(kiln_vulkan_sb_t* b, const kiln_template_epi_t* e, int32_t i, int64_t m, int64_t p,
                        const char* pos, uint32_t texels, uint32_t quads) {
  const kiln_template_epi_operand_t* o = &e->operands[i];
  const char* fetch = (texels & KILN_VULKAN_EPI_HALF(i)) ? "imageLoad" : "texelFetch";
  if ((quads >> i) & 1u) {
    kiln_vulkan_sb_printf(b, "%s(te%d, (", fetch, (int)i);
    epi_index(b, o, m, p, "(q)");
    kiln_vulkan_sb_printf(b, ") >> 2)[e]");
  } else if ((texels >> i) & 1u) {
    kiln_vulkan_sb_printf(b, "%s(te%d, (", fetch, (int)i);
    epi_index(b, o, m, p, pos);
    kiln_vulkan_sb_printf(b, ") >> 2)[(");
    epi_index(b, o, m, p, pos);
    kiln_vulkan_sb_printf(b, ") & 3]");
  } else {
    kiln_vulkan_sb_printf(b, "float(e%d[", (int)i);
    epi_index(b, o, m, p, pos);
    kiln_vulkan_sb_printf(b, "])");
  }
}

/* a bound operand whose constant value lowering knows (|known|) is printed
 * as that value: lavapipe runs a buffer load as a loop over the 8 lanes
 * (MobileNetV2's Relu6 bounds: its 1x1 and depthwise convs ~8% faster) */
static void epi_bound(kiln_vulkan_sb_t* b, const kiln_template_epi_t* e, int32_t operand, float value, bool known,
                      bool lower, int64_t m, int64_t p, const char* pos, uint32_t texels, uint32_t quads) {
  kiln_vulkan_sb_printf(b, " v = %s(v, ", lower ? "max" : "min");
  if (operand >= 0 && !known) epi_operand(b, e, operand, m, p, pos, texels, quads);
  else kiln_vulkan_sb_printf(b, "%.9e", (double)value);
  kiln_vulkan_sb_printf(b, ");");
}

static void epi_body(kiln_vulkan_sb_t* b, const kiln_template_epi_t* e, int64_t m, int64_t p, const char* pos,
                     uint32_t texels, uint32_t quads) {
  for (int32_t i = 0; i < e->n_ops; ++i) {
    const kiln_template_epi_op_t* op = &e->ops[i];
    switch (op->op) {
      case 'r': kiln_vulkan_sb_printf(b, " v = max(v, 0.0);"); break;
      case 's': kiln_vulkan_sb_printf(b, " v = 1.0 / (1.0 + exp(-v));"); break;
      case 'w': kiln_vulkan_sb_printf(b, " v = v / (1.0 + exp(-v));"); break;
      case 'l': kiln_vulkan_sb_printf(b, " v = max(v, 0.0) + %.9e * min(v, 0.0);", (double)op->alpha); break;
      case 'c':
        /* an infinite bound (an attribute's or a constant operand's) clips nothing */
        if (op->has_lo ? !isinf(op->lo) : op->a >= 0) epi_bound(b, e, op->a, op->lo, op->has_lo, true, m, p, pos, texels, quads);
        if (op->has_hi ? !isinf(op->hi) : op->b >= 0) epi_bound(b, e, op->b, op->hi, op->has_hi, false, m, p, pos, texels, quads);
        break;
      default:
        if (op->swap) {
          kiln_vulkan_sb_printf(b, " v = ");
          epi_operand(b, e, op->a, m, p, pos, texels, quads);
          kiln_vulkan_sb_printf(b, " %c v;", op->op);
        } else {
          kiln_vulkan_sb_printf(b, " v = v %c ", op->op);
          epi_operand(b, e, op->a, m, p, pos, texels, quads);
          kiln_vulkan_sb_printf(b, ";");
        }
        break;
    }
  }
  kiln_vulkan_sb_printf(b, " }\n");
}

/* "#define KC_EPI(v, b, m, p) ..." in GLSL. */
void kiln_vulkan_epi_print(kiln_vulkan_sb_t* b, const kiln_template_epi_t* e) {
  kiln_vulkan_epi_print_sized(b, e, 0, 0);
}

void kiln_vulkan_epi_print_sized(kiln_vulkan_sb_t* b, const kiln_template_epi_t* e, int64_t m, int64_t p) {
  kiln_vulkan_epi_print_texel(b, e, m, p, 0);
}

void kiln_vulkan_epi_print_texel(kiln_vulkan_sb_t* b, const kiln_template_epi_t* e, int64_t m, int64_t p,
                                 uint32_t texel) {
  kiln_vulkan_sb_printf(b, "#define KC_EPI(v, b, m, p) {");
  epi_body(b, e, m, p, "(p)", texel, 0);
}

bool kiln_vulkan_epi_texel_ok(const kiln_template_epi_t* e, int32_t i, bool f16, int64_t M, int64_t cp,
                              int64_t batch) {
  const kiln_template_epi_operand_t* o = &e->operands[i];
  return !f16 && cp % 4 == 0 && o->sp == 1 && o->sm == cp && (o->sn == M * cp || batch <= 1);
}

void kiln_vulkan_epi_print_quad(kiln_vulkan_sb_t* b, const kiln_template_epi_t* e, uint32_t texels, uint32_t quads) {
  kiln_vulkan_sb_printf(b, "#define KC_EPI4(v, b, m, q, e) {");
  epi_body(b, e, 0, 0, "((q) + (e))", texels, quads);
}

/* lavapipe (Mesa 22.3) runs an imageStore as a loop over the 8 lanes per
 * component, a storage-buffer store of a vector as one loop for all of it
 * (kiln_vulkan_conv_source_int64 has the figures for conv.comp) */
int kiln_vulkan_y_store(kiln_vulkan_sb_t* b, bool texel_y, bool int64, bool pairs) {
  const char* env = getenv("KILN_SPIRV_YSTORE");
  if (!texel_y || (env && !strcmp(env, "image"))) return 0;
  if (!int64 || !pairs || (env && !strcmp(env, "vec4"))) return 1;
  kiln_vulkan_sb_printf(b, "#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require\n");
  return 2;
}
