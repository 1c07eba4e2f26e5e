/* Lowering of Upsample (ir/ops/tensor_upsample.c; nearest, whole-number
 * scales): one loop nest over the output reading x at each index floor-
 * divided by its axis's scale, which is the ratio of the static output and
 * input dims (inference checked the scales). */
#include "lowering/lower_ew_impl.h"
#include "lowering/lower_tensor_impl.h"

kiln_status_t kiln_lower_tensor_upsample(kiln_lower_ctx_t* ctx) {
  const tir_buffer_t* x = kiln_lew_in(ctx, 0);
  const tir_buffer_t* y = kiln_lew_out(ctx, 0);
  if (!x || !y || x->rank != y->rank || x->dtype != y->dtype)
    return kiln_make_status(KILN_INTERNAL, "Upsample: output does not match the input");
  if (tir_buffer_numel(y) == 0) return NULL;
  tir_ctx_t* c = ctx->tir;
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_expr_t* idx[KILN_MAX_RANK];
  for (int32_t k = 0; k < x->rank; ++k) {
    if (y->shape[k] % x->shape[k] != 0)
      return kiln_make_status(KILN_INTERNAL, "Upsample: output dim %d is not a multiple of the input's", (int)k);
    const int64_t s = y->shape[k] / x->shape[k];
    idx[k] = s == 1 ? n.idx[k] : tir_bin(c, TIR_FLOORDIV, n.idx[k], tir_int(c, s));
  }
  const tir_buffer_t* params[2] = {x, y};
  const int32_t r = x->rank;
  return kiln_lew_emit(ctx, &n, kiln_lew_loops(c, &n, kiln_lew_store(c, &n, y, tir_load(c, x, idx))), 2, params,
                       r == 0 || x->shape[r - 1] == y->shape[r - 1]);
}
