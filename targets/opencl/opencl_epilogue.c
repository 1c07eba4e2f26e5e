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

static void operand_ref(const kiln_template_epi_t* e, const bool* f16, int32_t i, const char* prefix,
                        kiln_cf_out_t* out) {
  const kiln_template_epi_operand_t* o = &e->operands[i];
  const bool h = f16 && f16[i];
  if (o->sp)
    kiln_cf_out_printf(out, "%s(%s%d + (long)(b) * %lld + (long)(m) * %lld + (p))", h ? "LDH" : "LD", prefix,
                       (int)i, (long long)o->sn, (long long)o->sm);
  else
    kiln_cf_out_printf(out, "kepi_%s%d", prefix, (int)i);
}

/* The value of broadcast operand i for image b, channel m. */
static void operand_pre(const kiln_template_epi_t* e, const bool* f16, int32_t i, const char* prefix,
                        kiln_cf_out_t* out) {
  const kiln_template_epi_operand_t* o = &e->operands[i];
  if (f16 && f16[i])
    kiln_cf_out_printf(out, " const float kepi_%s%d = vload_half((long)(b) * %lld + (long)(m) * %lld, %s%d);", prefix,
                       (int)i, (long long)o->sn, (long long)o->sm, prefix, (int)i);
  else
    kiln_cf_out_printf(out, " const float kepi_%s%d = %s%d[(long)(b) * %lld + (long)(m) * %lld];", prefix, (int)i,
                       prefix, (int)i, (long long)o->sn, (long long)o->sm);
}

void kiln_opencl_epi_print(const kiln_template_epi_t* e, const bool* f16, const char* macro, const char* prefix,
                           kiln_cf_out_t* out) {
  kiln_cf_out_printf(out, "#define %s_PRE(b, m)", macro);
  for (int32_t i = 0; i < e->n_operands; ++i)
    if (!e->operands[i].sp) operand_pre(e, f16, i, prefix, out);
  kiln_cf_out_puts(out, "\n");
  kiln_cf_out_printf(out, "#define %s(v, b, m, p, LD, LDH) do {", macro);
  for (int32_t i = 0; i < e->n_ops; ++i) {
    const kiln_template_epi_op_t* op = &e->ops[i];
    kiln_cf_out_puts(out, " ");
    switch (op->op) {
      case 'r': kiln_cf_out_puts(out, "v = fmax(v, 0.0f);"); break;
      case 's': kiln_cf_out_puts(out, "v = 1.0f / (1.0f + exp(-v));"); break;
      case 'l':
        kiln_cf_out_printf(out, "v = fmax(v, 0.0f) + %.9ef * fmin(v, 0.0f);", (double)op->alpha);
        break;
      case 'c':
        kiln_cf_out_puts(out, "v = fmin(fmax(v, ");
        if (op->a >= 0) operand_ref(e, f16, op->a, prefix, out);
        else if (isinf(op->lo)) kiln_cf_out_puts(out, op->lo < 0 ? "-INFINITY" : "INFINITY");
        else kiln_cf_out_printf(out, "%.9ef", (double)op->lo);
        kiln_cf_out_puts(out, "), ");
        if (op->b >= 0) operand_ref(e, f16, op->b, prefix, out);
        else if (isinf(op->hi)) kiln_cf_out_puts(out, op->hi < 0 ? "-INFINITY" : "INFINITY");
        else kiln_cf_out_printf(out, "%.9ef", (double)op->hi);
        kiln_cf_out_puts(out, ");");
        break;
      default:
        if (op->swap) {
          kiln_cf_out_puts(out, "v = ");
          operand_ref(e, f16, op->a, prefix, out);
          kiln_cf_out_printf(out, " %c v;", op->op);
        } else {
          kiln_cf_out_printf(out, "v = v %c ", op->op);
          operand_ref(e, f16, op->a, prefix, out);
          kiln_cf_out_puts(out, ";");
        }
        break;
    }
  }
  kiln_cf_out_puts(out, " } while (0)\n");
}
