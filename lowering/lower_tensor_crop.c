/* Lowering of CenterCropPad (ir/ops/tensor_crop.c): one loop nest over the
 * output; each output element reads the input at its index minus the axis
 * offset (kiln_center_crop_offset, from the static input and output dims),
 * or is 0 where that falls outside the input (the read index is clamped,
 * so no load leaves the input). */
#include "ir/ops/crop.h"
#include "lowering/lower_ew_impl.h"
#include "lowering/lower_tensor_impl.h"

kiln_status_t kiln_lower_tensor_center_crop_pad(kiln_lower_ctx_t* ctx) {
  const tir_buffer_t* x = kiln_lew_in(ctx, 0);
  const tir_buffer_t* y = kiln_lew_out(ctx, 0);
  if (!x || !y || x->rank != y->rank || x->dtype != y->dtype)
    return kiln_make_status(KILN_INTERNAL, "CenterCropPad: output does not match the input");
  if (tir_buffer_numel(y) == 0) return NULL;
  tir_ctx_t* c = ctx->tir;
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_expr_t* idx[KILN_MAX_RANK];
  const tir_expr_t* inside = NULL;
  bool empty = false;
  for (int32_t k = 0; k < x->rank; ++k) {
    const int64_t off = kiln_center_crop_offset(x->shape[k], y->shape[k]);
    empty = empty || x->shape[k] == 0;
    if (off == 0 && x->shape[k] >= y->shape[k]) {
      idx[k] = n.idx[k];
      continue;
    }
    const tir_expr_t* i = tir_sub(c, n.idx[k], tir_int(c, off));
    const tir_expr_t* ok = tir_bin(c, TIR_AND, tir_bin(c, TIR_GE, i, tir_int(c, 0)),
                                   tir_bin(c, TIR_LT, i, tir_int(c, x->shape[k])));
    inside = inside ? tir_bin(c, TIR_AND, inside, ok) : ok;
    idx[k] = kiln_lew_clamp(c, i, 0, x->shape[k] - 1);
  }
  if (empty) return kiln_lew_fill(ctx, y, kiln_lew_imm(c, y->dtype, 0.0));
  const tir_expr_t* v = tir_load(c, x, idx);
  if (inside) v = tir_select(c, inside, v, kiln_lew_imm(c, y->dtype, 0.0));
  const tir_buffer_t* params[2] = {x, y};
  return kiln_lew_emit(ctx, &n, kiln_lew_loops(c, &n, kiln_lew_store(c, &n, y, v)), 2, params, false);
}
