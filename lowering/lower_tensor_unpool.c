/* Lowering of MaxUnpool (ir/ops/tensor_unpool.c) to TIR: a fill kernel
 * zeroes Y, then a kernel over X stores each element at its flat index,
 * decomposed over the scatter shape (floordiv/floormod) into Y's indices.
 * Indices outside the scatter shape fail the run through a check kernel
 * and the status word; the scatter clamps them so it stays inside Y. Two
 * equal indices race on GPUs (ONNX leaves the winner open; MaxPool never
 * produces them). */
#include "ir/ops/unpool.h"
#include "lowering/lower_ew_impl.h"
#include "lowering/lower_tensor_impl.h"

#define TRY(expr)                  \
  do {                             \
    kiln_status_t try_s_ = (expr); \
    if (try_s_) return try_s_;     \
  } while (0)

static const tir_expr_t* flat_bad(tir_ctx_t* c, const tir_expr_t* v, const void* user) {
  const int64_t n = *(const int64_t*)user;
  return tir_bin(c, TIR_OR, tir_bin(c, TIR_LT, v, tir_int(c, 0)), tir_bin(c, TIR_GE, v, tir_int(c, n)));
}

kiln_status_t kiln_lower_tensor_max_unpool(kiln_lower_ctx_t* ctx) {
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* x = kiln_lew_in(ctx, 0);
  const tir_buffer_t* ind = kiln_lew_in(ctx, 1);
  const tir_buffer_t* y = kiln_lew_out(ctx, 0);
  if (!x || !ind || !y) return kiln_make_status(KILN_INVALID_ARGUMENT, "MaxUnpool: missing input or output");
  const int32_t r = x->rank;
  kiln_shape_t xs = kiln_shape_make(r, x->shape);
  int64_t inf[KILN_MAX_RANK], total = 1;
  TRY(kiln_max_unpool_shape(ctx->node, &xs, inf));
  if (y->rank != r || y->dtype != x->dtype || ind->rank != r || ind->dtype != KILN_DTYPE_I64)
    return kiln_make_status(KILN_INTERNAL, "MaxUnpool: X, I and Y do not match");
  for (int32_t k = 0; k < r; ++k) {
    if (y->shape[k] < inf[k]) return kiln_make_status(KILN_INVALID_ARGUMENT, "MaxUnpool: Y is smaller than the unpooled shape");
    total *= inf[k];
  }
  if (tir_buffer_numel(y) == 0) return NULL;
  TRY(kiln_lew_fill(ctx, y, kiln_lew_imm(c, y->dtype, 0.0)));
  if (tir_buffer_numel(x) == 0 || total == 0) return NULL;
  TRY(kiln_lew_check(ctx, ind, flat_bad, &total, KILN_CHECK_INDEX_RANGE));
  kiln_lew_nest_t nest;
  kiln_lew_nest_buf(c, &nest, x);
  const tir_expr_t* f = kiln_lew_clamp(c, tir_load(c, ind, nest.idx), 0, total - 1);
  const tir_expr_t* yi[KILN_MAX_RANK];
  for (int32_t k = r - 1; k >= 0; --k) {
    yi[k] = k == 0 ? f : tir_bin(c, TIR_FLOORMOD, f, tir_int(c, inf[k]));
    if (k > 0) f = tir_bin(c, TIR_FLOORDIV, f, tir_int(c, inf[k]));
  }
  const tir_stmt_t* body = kiln_lew_loops(c, &nest, tir_store(c, y, yi, tir_load(c, x, nest.idx)));
  const tir_buffer_t* params[3] = {x, ind, y};
  return kiln_lew_emit(ctx, &nest, body, 3, params, false);
}
