/* Lowering of Det (ir/ops/nn_det.c): one work-item per matrix (PARALLEL
 * over the batch) factorises a copy of it in a GLOBAL f32 workspace
 * [batch][M][M] by LU with partial pivoting, as the reference does, keeping
 * the determinant in a PRIVATE scalar: each column's pivot is the row of
 * the largest magnitude at or below the diagonal (a swap negates the
 * determinant), the determinant takes the pivot, and the rows below lose
 * their multiple of the pivot row (skipped when the pivot is 0: the
 * determinant is 0 then and stays so). The pivot row is data, so its index
 * is clamped into [0, M) before use. Loops run over the whole matrix with
 * the triangular bounds as conditions (TIR loops start at 0). */
#include "lowering/lower_nn_impl.h"

kiln_status_t kiln_lower_nn_det(kiln_lower_ctx_t* ctx) {
  const tir_buffer_t *x = ctx->in[0], *y = ctx->out[0];
  if (!x || !y || x->rank < 2 || x->shape[x->rank - 1] != x->shape[x->rank - 2])
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Det: input is not a stack of square matrices");
  const int64_t m = x->shape[x->rank - 1];
  int64_t batch = 1;
  for (int32_t k = 0; k < x->rank - 2; ++k) batch *= x->shape[k];
  if (batch == 0) return NULL;
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  tir_ctx_t* t = kb.t;
  const tir_buffer_t *yv, *xv, *lu;
  const int64_t one = 1, ys[1] = {batch}, ls[3] = {batch, m, m};
  KILN_RETURN_IF_ERROR(nn_view(ctx, y, "dets", 1, ys, &yv));
  if (m == 0) {
    /* the determinant of an empty matrix is 1 */
    tir_var_t* vb = nn_var(&kb, "b");
    return nn_emit(&kb, nn_for(&kb, vb, batch, nn_stf(&kb, yv, NN_IDX(nn_v(&kb, vb)), nn_f(&kb, 1.0))));
  }
  KILN_RETURN_IF_ERROR(nn_view(ctx, x, "mats", 3, ls, &xv));
  KILN_RETURN_IF_ERROR(kiln_lower_temp(ctx, "lu", KILN_DTYPE_F32, 3, ls, &lu));
  const tir_buffer_t* det = tir_buffer(t, "det", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_buffer_t* piv = tir_buffer(t, "piv", KILN_DTYPE_I64, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_buffer_t* tmp = tir_buffer(t, "tmp", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_expr_t* z = nn_i(&kb, 0);
  tir_var_t *vb = nn_var(&kb, "b"), *vk = nn_var(&kb, "k");
  const tir_expr_t *b = nn_v(&kb, vb), *k = nn_v(&kb, vk);
#define LU(r, c) tir_load(t, lu, NN_IDX(b, (r), (c)))
#define ABS(e) tir_call(t, TIR_FABS, 1, (e), NULL, NULL)
  const tir_stmt_t* copy;
  {
    tir_var_t *vi = nn_var(&kb, "i"), *vj = nn_var(&kb, "j");
    const tir_expr_t *i = nn_v(&kb, vi), *j = nn_v(&kb, vj);
    copy = nn_for(&kb, vi, m, nn_for(&kb, vj, m, tir_store(t, lu, NN_IDX(b, i, j), nn_ldf(&kb, xv, NN_IDX(b, i, j)))));
  }
  const tir_stmt_t* col[5];
  col[0] = tir_store(t, piv, NN_IDX(z), k);
  const tir_expr_t* p = nn_clamp(&kb, tir_load(t, piv, NN_IDX(z)), 0, m - 1);
  {
    tir_var_t* vi = nn_var(&kb, "i");
    const tir_expr_t* i = nn_v(&kb, vi);
    const tir_expr_t* better =
        tir_bin(t, TIR_AND, tir_bin(t, TIR_GT, i, k), tir_bin(t, TIR_GT, ABS(LU(i, k)), ABS(LU(p, k))));
    col[1] = nn_for(&kb, vi, m, tir_if(t, better, tir_store(t, piv, NN_IDX(z), i), NULL));
  }
  {
    tir_var_t* vj = nn_var(&kb, "j");
    const tir_expr_t* j = nn_v(&kb, vj);
    const tir_stmt_t* sw[3] = {tir_store(t, tmp, NN_IDX(z), LU(k, j)), tir_store(t, lu, NN_IDX(b, k, j), LU(p, j)),
                               tir_store(t, lu, NN_IDX(b, p, j), tir_load(t, tmp, NN_IDX(z)))};
    const tir_stmt_t* swap[2] = {
        tir_store(t, det, NN_IDX(z), tir_call(t, TIR_NEG, 1, tir_load(t, det, NN_IDX(z)), NULL, NULL)),
        nn_for(&kb, vj, m, tir_seq(t, 3, sw))};
    col[2] = tir_if(t, tir_bin(t, TIR_NE, p, k), tir_seq(t, 2, swap), NULL);
  }
  col[3] = tir_store(t, det, NN_IDX(z), tir_mul(t, tir_load(t, det, NN_IDX(z)), LU(k, k)));
  {
    tir_var_t *vi = nn_var(&kb, "i"), *vj = nn_var(&kb, "j");
    const tir_expr_t *i = nn_v(&kb, vi), *j = nn_v(&kb, vj);
    const tir_expr_t* upd = tir_sub(t, LU(i, j), tir_mul(t, tir_bin(t, TIR_DIV, LU(i, k), LU(k, k)), LU(k, j)));
    const tir_stmt_t* row = nn_for(&kb, vj, m, tir_if(t, tir_bin(t, TIR_GT, j, k), tir_store(t, lu, NN_IDX(b, i, j), upd), NULL));
    const tir_stmt_t* rows = nn_for(&kb, vi, m, tir_if(t, tir_bin(t, TIR_GT, i, k), row, NULL));
    col[4] = tir_if(t, tir_bin(t, TIR_NE, LU(k, k), nn_f(&kb, 0.0)), rows, NULL);
  }
#undef LU
#undef ABS
  const tir_stmt_t* body[4] = {copy, tir_store(t, det, NN_IDX(z), nn_f(&kb, 1.0)), nn_for(&kb, vk, m, tir_seq(t, 5, col)),
                               nn_stf(&kb, yv, NN_IDX(b), tir_load(t, det, NN_IDX(z)))};
  const tir_stmt_t* s =
      nn_for(&kb, vb, batch, tir_alloc(t, det, tir_alloc(t, piv, tir_alloc(t, tmp, tir_seq(t, 4, body)))));
  if (batch > 1) nn_parallel(&kb, vb);
  return nn_emit(&kb, s);
}
