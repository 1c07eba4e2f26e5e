/* Printing of fused epilogues (targets/gpu_conv.h) as OpenCL C macros for
 * the conv templates: LD loads a value of the accumulator's vector type from
 * a float operand, LDH from a half one (f16 storage: OpenCL C 1.2 without
 * cl_khr_fp16 reads half only through vload_half[n]); the arithmetic is f32.
 *
 * Operands that broadcast along the position (a per-channel scale, Clip's
 * bounds) are loaded once per image and channel by <macro>_PRE, which the
 * templates place where the channel is fixed: in the epilogue itself they
 * were loaded again for every output, and for f16 operands the compiler
 * does not hoist the vload_half out of the store loops (a 960-channel 1x1
 * conv with Clip(f16 bounds) on PoCL: 0.30 -> 0.22 ms, the f32 time). */
#include <math.h>

#include "targets/opencl/opencl_internal.h"

/* Operand i's stride along n (which 0) or m (1): the number, or with
 * run-time shapes (ks >= 0) its slot of the instance's KS parameter. */
static void stride(const kiln_template_epi_t* e, int32_t i, int which, int32_t ks, kiln_cf_out_t* out) {
  const kiln_template_epi_operand_t* o = &e->operands[i];
  if (ks >= 0) kiln_cf_out_printf(out, "KS[%d]", (int)(ks + 2 * i + which));
  else kiln_cf_out_printf(out, "%lld", (long long)(which ? o->sm : o->sn));
}

static void operand_ref(const kiln_template_epi_t* e, const bool* f16, int32_t i, const char* prefix, int32_t ks,
                        kiln_cf_out_t* out) {
  const kiln_template_epi_operand_t* o = &e->operands[i];
  const bool h = f16 && f16[i];
  if (o->sp) {
    kiln_cf_out_printf(out, "%s(%s%d + (long)(b) * ", h ? "LDH" : "LD", prefix, (int)i);
    stride(e, i, 0, ks, out);
    kiln_cf_out_puts(out, " + (long)(m) * ");
    stride(e, i, 1, ks, out);
    kiln_cf_out_puts(out, " + (p))");
  } else {
    kiln_cf_out_printf(out, "kepi_%s%d", prefix, (int)i);
  }
}

/* The value of broadcast operand i for image b, channel m. */
static void operand_pre(const kiln_template_epi_t* e, const bool* f16, int32_t i, const char* prefix, int32_t ks,
                        kiln_cf_out_t* out) {
  const bool h = f16 && f16[i];
  if (h) kiln_cf_out_printf(out, " const float kepi_%s%d = vload_half((long)(b) * ", prefix, (int)i);
  else kiln_cf_out_printf(out, " const float kepi_%s%d = %s%d[(long)(b) * ", prefix, (int)i, prefix, (int)i);
  stride(e, i, 0, ks, out);
  kiln_cf_out_puts(out, " + (long)(m) * ");
  stride(e, i, 1, ks, out);
  if (h) kiln_cf_out_printf(out, ", %s%d);", prefix, (int)i);
  else kiln_cf_out_puts(out, "];");
}

void kiln_opencl_epi_print(const kiln_template_epi_t* e, const bool* f16, const char* macro, const char* prefix,
                           kiln_cf_out_t* out) {
  kiln_opencl_epi_print_ks(e, f16, macro, prefix, -1, out);
}

void kiln_opencl_epi_print_ks(const kiln_template_epi_t* e, const bool* f16, const char* macro, const char* prefix,
                              int32_t ks, kiln_cf_out_t* out) {
  kiln_cf_out_printf(out, "#define %s_PRE(b, m)", macro);
  for (int32_t i = 0; i < e->n_operands; ++i)
    if (!e->operands[i].sp) operand_pre(e, f16, i, prefix, ks, out);
  kiln_cf_out_puts(out, "\n");
  kiln_cf_out_printf(out, "#define %s(v, b, m, p, LD, LDH) do {", macro);
  for (int32_t i = 0; i < e->n_ops; ++i) {
    const kiln_template_epi_op_t* op = &e->ops[i];
    kiln_cf_out_puts(out, " ");
    switch (op->op) {
      case 'r': kiln_cf_out_puts(out, "v = fmax(v, 0.0f);"); break;
      case 's': kiln_cf_out_puts(out, "v = 1.0f / (1.0f + exp(-v));"); break;
      case 'w': kiln_cf_out_puts(out, "v = v / (1.0f + exp(-v));"); break;
      case 'l':
        kiln_cf_out_printf(out, "v = fmax(v, 0.0f) + %.9ef * fmin(v, 0.0f);", (double)op->alpha);
        break;
      case 'c':
        kiln_cf_out_puts(out, "v = fmin(fmax(v, ");
        if (op->a >= 0) operand_ref(e, f16, op->a, prefix, ks, out);
        else if (isinf(op->lo)) kiln_cf_out_puts(out, op->lo < 0 ? "-INFINITY" : "INFINITY");
        else kiln_cf_out_printf(out, "%.9ef", (double)op->lo);
        kiln_cf_out_puts(out, "), ");
        if (op->b >= 0) operand_ref(e, f16, op->b, prefix, ks, out);
        else if (isinf(op->hi)) kiln_cf_out_puts(out, op->hi < 0 ? "-INFINITY" : "INFINITY");
        else kiln_cf_out_printf(out, "%.9ef", (double)op->hi);
        kiln_cf_out_puts(out, ");");
        break;
      default:
        if (op->swap) {
          kiln_cf_out_puts(out, "v = ");
          operand_ref(e, f16, op->a, prefix, ks, out);
          kiln_cf_out_printf(out, " %c v;", op->op);
        } else {
          kiln_cf_out_printf(out, "v = v %c ", op->op);
          operand_ref(e, f16, op->a, prefix, ks, out);
          kiln_cf_out_puts(out, ";");
        }
        break;
    }
  }
  kiln_cf_out_puts(out, " } while (0)\n");
}
