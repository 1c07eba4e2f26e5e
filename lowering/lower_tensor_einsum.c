/* Lowering of Einsum (ir/ops/einsum.h): one generic loop nest. Every
 * output element is one work-item (the output labels are the nest); the
 * summed labels are serial loops inside it that add each product of the
 * operands' elements into the output element, which is the accumulator
 * (f16 outputs accumulate in an f32 workspace, converted by a second
 * kernel). This covers every equation the reference does: the batched
 * matrix products and transposes of attention ("bhid,bhjd->bhij"), inner
 * and outer products, diagonals, sums and broadcast ellipses. It is not a
 * tuned GEMM: equations that are plain MatMuls are better exported as
 * MatMul, which kiln lowers to its GEMM templates. */
#include <stdio.h>
#include <string.h>

#include "ir/op.h"
#include "ir/ops/einsum.h"
#include "lowering/lower_ew_impl.h"
#include "lowering/lower_tensor_impl.h"

#define TRY(expr)                  \
  do {                             \
    kiln_status_t try_s_ = (expr); \
    if (try_s_) return try_s_;     \
  } while (0)

kiln_status_t kiln_lower_tensor_einsum(kiln_lower_ctx_t* ctx) {
  const tir_buffer_t* y = kiln_lew_out(ctx, 0);
  if (!y || ctx->n_in < 1 || ctx->n_in > KILN_EINSUM_MAX_INPUTS)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Einsum: missing output or bad input count");
  kiln_shape_t shp[KILN_EINSUM_MAX_INPUTS];
  const kiln_shape_t* shapes[KILN_EINSUM_MAX_INPUTS];
  for (int32_t i = 0; i < ctx->n_in; ++i) {
    const tir_buffer_t* x = kiln_lew_in(ctx, i);
    if (!x || x->dtype != y->dtype)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "Einsum: input %d is missing or not of the output's dtype", (int)i);
    shp[i] = kiln_shape_make(x->rank, x->shape);
    shapes[i] = &shp[i];
  }
  const char* eq = NULL;
  TRY(kiln_attr_string(ctx->node, "equation", NULL, &eq));
  if (!eq) return kiln_make_status(KILN_INVALID_ARGUMENT, "Einsum: missing required attribute 'equation'");
  kiln_einsum_t e;
  TRY(kiln_einsum_parse(eq, ctx->n_in, shapes, &e));
  bool ok = y->rank == e.out_rank;
  for (int32_t k = 0; ok && k < y->rank; ++k) ok = y->shape[k] == e.size[e.out_label[k]];
  if (!ok) return kiln_make_status(KILN_INTERNAL, "Einsum: output does not match the equation");
  if (tir_buffer_numel(y) == 0) return NULL;
  tir_ctx_t* c = ctx->tir;
  const bool f16 = y->dtype == KILN_DTYPE_F16, fl = kiln_dtype_is_float(y->dtype);
  const tir_buffer_t* acc = y;
  if (f16) TRY(kiln_lower_temp(ctx, "acc", KILN_DTYPE_F32, y->rank, y->shape, &acc));
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_expr_t* lab[KILN_EINSUM_MAX_LABELS] = {NULL};
  const tir_var_t* sv[KILN_EINSUM_MAX_LABELS];
  for (int32_t k = 0; k < e.out_rank; ++k) lab[e.out_label[k]] = n.idx[k];
  for (int32_t s = 0; s < e.n_sum; ++s) {
    char name[8];
    snprintf(name, sizeof name, "e%d", (int)s);
    sv[s] = tir_var(c, name);
    lab[e.sum_label[s]] = tir_ref(c, sv[s]);
  }
  const tir_expr_t* prod = NULL;
  const tir_buffer_t* params[KILN_EINSUM_MAX_INPUTS + 2];
  for (int32_t i = 0; i < ctx->n_in; ++i) {
    const tir_buffer_t* x = ctx->in[i];
    const tir_expr_t* idx[KILN_MAX_RANK];
    /* A dim of size 1 broadcasts: it is read at 0 whatever its label. */
    for (int32_t d = 0; d < x->rank; ++d) idx[d] = x->shape[d] == 1 ? tir_int(c, 0) : lab[e.in_label[i][d]];
    const tir_expr_t* v = tir_load(c, x, idx);
    if (fl && y->dtype != KILN_DTYPE_F64) v = kiln_lew_f32(c, v); /* f64 sums in f64 */
    prod = prod ? tir_mul(c, prod, v) : v;
    params[i] = x;
  }
  params[ctx->n_in] = acc;
  const tir_stmt_t* body;
  if (e.n_sum == 0) {
    body = tir_store(c, acc, n.idx, prod);
  } else {
    const tir_expr_t* zero = fl ? tir_const(c, y->dtype == KILN_DTYPE_F64 ? KILN_DTYPE_F64 : KILN_DTYPE_F32, 0.0)
                                : kiln_lew_imm_i(c, y->dtype, 0);
    const tir_stmt_t* s = tir_store(c, acc, n.idx, tir_add(c, tir_load(c, acc, n.idx), prod));
    for (int32_t k = e.n_sum - 1; k >= 0; --k) s = tir_for(c, sv[k], e.size[e.sum_label[k]], TIR_LOOP_SERIAL, s);
    body = tir_seq2(c, tir_store(c, acc, n.idx, zero), s);
  }
  TRY(kiln_lew_emit(ctx, &n, kiln_lew_loops(c, &n, body), ctx->n_in + 1, params, false));
  if (!f16) return NULL;
  kiln_lew_nest_buf(c, &n, y);
  const tir_stmt_t* cvt = kiln_lew_store(c, &n, y, tir_cast(c, KILN_DTYPE_F16, tir_load(c, acc, n.idx)));
  const tir_buffer_t* p2[2] = {acc, y};
  return kiln_lew_emit(ctx, &n, kiln_lew_loops(c, &n, cvt), 2, p2, true);
}
