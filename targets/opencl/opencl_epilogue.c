/* Printing of fused epilogues (targets/gpu_conv.h) as an OpenCL C macro for
 * the conv template: LD loads a value of the accumulator's vector type. */
#include <math.h>

#include "targets/opencl/opencl_internal.h"

static void operand_ref(const kiln_gpu_epi_t* e, int32_t i, const char* prefix, kiln_cf_out_t* out) {
  const kiln_gpu_epi_operand_t* o = &e->operands[i];
  if (o->sp)
    kiln_cf_out_printf(out, "LD(%s%d + (long)(b) * %lld + (long)(m) * %lld + (p))", prefix, (int)i,
                       (long long)o->sn, (long long)o->sm);
  else
    kiln_cf_out_printf(out, "%s%d[(long)(b) * %lld + (long)(m) * %lld]", prefix, (int)i,
                       (long long)o->sn, (long long)o->sm);
}

void kiln_opencl_epi_print(const kiln_gpu_epi_t* e, const char* macro, const char* prefix,
                           kiln_cf_out_t* out) {
  kiln_cf_out_printf(out, "#define %s(v, b, m, p, LD) do {", macro);
  for (int32_t i = 0; i < e->n_ops; ++i) {
    const kiln_gpu_epi_op_t* op = &e->ops[i];
    kiln_cf_out_puts(out, " ");
    switch (op->op) {
      case 'r': kiln_cf_out_puts(out, "v = fmax(v, 0.0f);"); break;
      case 's': kiln_cf_out_puts(out, "v = 1.0f / (1.0f + exp(-v));"); break;
      case 'l':
        kiln_cf_out_printf(out, "v = fmax(v, 0.0f) + %.9ef * fmin(v, 0.0f);", (double)op->alpha);
        break;
      case 'c':
        kiln_cf_out_puts(out, "v = fmin(fmax(v, ");
        if (op->a >= 0) operand_ref(e, op->a, prefix, out);
        else if (isinf(op->lo)) kiln_cf_out_puts(out, op->lo < 0 ? "-INFINITY" : "INFINITY");
        else kiln_cf_out_printf(out, "%.9ef", (double)op->lo);
        kiln_cf_out_puts(out, "), ");
        if (op->b >= 0) operand_ref(e, op->b, prefix, out);
        else if (isinf(op->hi)) kiln_cf_out_puts(out, op->hi < 0 ? "-INFINITY" : "INFINITY");
        else kiln_cf_out_printf(out, "%.9ef", (double)op->hi);
        kiln_cf_out_puts(out, ");");
        break;
      default:
        if (op->swap) {
          kiln_cf_out_puts(out, "v = ");
          operand_ref(e, op->a, prefix, out);
          kiln_cf_out_printf(out, " %c v;", op->op);
        } else {
          kiln_cf_out_printf(out, "v = v %c ", op->op);
          operand_ref(e, op->a, prefix, out);
          kiln_cf_out_puts(out, ";");
        }
        break;
    }
  }
  kiln_cf_out_puts(out, " } while (0)\n");
}
