/* Lowering of Col2Im (ir/ops/tensor_col2im.c) to TIR, as a gather: one
 * loop nest over the output [N, C, image...]; per pixel, serial loops over
 * the block offsets find the block position l_k = (p_k + pad_k - b_k *
 * dil_k) / stride_k on each dim, and the pixel adds input [n, c * B + b, l]
 * when every l_k is whole and inside. No scatter, so no write races on the
 * GPU targets; indices are clamped before the load. */
#include <stdio.h>

#include "ir/ops/col2im.h"
#include "lowering/lower_ew_impl.h"
#include "lowering/lower_tensor_impl.h"

#define TRY(expr)                  \
  do {                             \
    kiln_status_t try_s_ = (expr); \
    if (try_s_) return try_s_;     \
  } while (0)

kiln_status_t kiln_lower_tensor_col2im(kiln_lower_ctx_t* ctx) {
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* x = kiln_lew_in(ctx, 0);
  const tir_buffer_t* y = kiln_lew_out(ctx, 0);
  if (!x || !y) return kiln_make_status(KILN_INVALID_ARGUMENT, "Col2Im: missing input or output");
  const kiln_array_t* iv = kiln_lew_const_in(ctx, 1);
  const kiln_array_t* bv = kiln_lew_const_in(ctx, 2);
  if (!iv || !bv)
    return kiln_make_status(KILN_UNSUPPORTED, "Col2Im: image_shape and block_shape computed at run time are not supported");
  if (x->rank != 3) return kiln_make_status(KILN_INTERNAL, "Col2Im: input is not 3-D");
  col2im_t g;
  TRY(kiln_col2im_geometry(ctx->node, iv, bv, x->shape[1], x->shape[2], &g));
  if (y->rank != g.n + 2 || y->dtype != x->dtype) return kiln_make_status(KILN_INTERNAL, "Col2Im: output mismatch");
  if (tir_buffer_numel(y) == 0) return NULL;
  const int64_t one = 1;
  const tir_buffer_t* acc = tir_buffer(c, "c2i_acc", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_expr_t* z[1] = {tir_int(c, 0)};
  kiln_lew_nest_t nest;
  kiln_lew_nest_buf(c, &nest, y);
  const tir_expr_t* ok = NULL;
  const tir_expr_t* b = tir_int(c, 0);
  const tir_expr_t* l = tir_int(c, 0);
  const tir_var_t* kv[KILN_COL2IM_MAX_DIMS];
  for (int32_t k = 0; k < g.n; ++k) {
    char name[16];
    snprintf(name, sizeof name, "kb%d", (int)k);
    kv[k] = tir_var(c, name);
    const tir_expr_t* q = tir_sub(c, tir_add(c, nest.idx[2 + k], tir_int(c, g.pad[k])),
                                  tir_mul(c, tir_ref(c, kv[k]), tir_int(c, g.dil[k])));
    const tir_expr_t* s = tir_int(c, g.stride[k]);
    const tir_expr_t* lk = tir_bin(c, TIR_FLOORDIV, q, s);
    const tir_expr_t* in = tir_bin(c, TIR_AND, tir_bin(c, TIR_GE, q, tir_int(c, 0)),
                                   tir_bin(c, TIR_LT, lk, tir_int(c, g.blocks[k])));
    if (g.stride[k] != 1)
      in = tir_bin(c, TIR_AND, in, tir_bin(c, TIR_EQ, tir_bin(c, TIR_FLOORMOD, q, s), tir_int(c, 0)));
    ok = ok ? tir_bin(c, TIR_AND, ok, in) : in;
    b = tir_add(c, tir_mul(c, b, tir_int(c, g.block[k])), tir_ref(c, kv[k]));
    l = tir_add(c, tir_mul(c, l, tir_int(c, g.blocks[k])), kiln_lew_clamp(c, lk, 0, g.blocks[k] - 1));
  }
  const tir_expr_t* xi[3] = {nest.idx[0], tir_add(c, tir_mul(c, nest.idx[1], tir_int(c, g.block_size)), b), l};
  const tir_expr_t* v = tir_select(c, ok, kiln_lew_f32(c, tir_load(c, x, xi)), tir_const(c, KILN_DTYPE_F32, 0.0));
  const tir_stmt_t* inner = tir_store(c, acc, z, tir_add(c, tir_load(c, acc, z), v));
  for (int32_t k = g.n - 1; k >= 0; --k) inner = tir_for(c, kv[k], g.block[k], TIR_LOOP_SERIAL, inner);
  const tir_expr_t* res = tir_load(c, acc, z);
  if (y->dtype != KILN_DTYPE_F32) res = tir_cast(c, y->dtype, res);
  const tir_stmt_t* seq[3] = {tir_store(c, acc, z, tir_const(c, KILN_DTYPE_F32, 0.0)), inner,
                              kiln_lew_store(c, &nest, y, res)};
  const tir_stmt_t* body = kiln_lew_loops(c, &nest, tir_alloc(c, acc, tir_seq(c, 3, seq)));
  const tir_buffer_t* params[2] = {x, y};
  return kiln_lew_emit(ctx, &nest, body, 2, params, false);
}
