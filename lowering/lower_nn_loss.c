/* Lowering of the losses (ir/ops/nn_loss.c): NegativeLogLikelihoodLoss and
 * SoftmaxCrossEntropyLoss.
 *
 * Scores are viewed as [N][C][D] (D the product of the trailing dims),
 * targets as [N][D]. Targets are data: a check kernel first stores
 * KILN_CHECK_INDEX_RANGE into the node's status word for any target outside
 * [0, C) other than ignore_index (the run then fails naming the node, as the
 * reference does), and the loss kernel reads the score at the target
 * CLAMPED into [0, C), so no value sends a load out of bounds.
 *
 * reduction "none" runs one work-item per (n, d) position; "sum" and "mean"
 * accumulate the losses and the weights in one serial loop (the outputs are
 * scalars and the inputs small; a tree reduction would pay off only for
 * batches far beyond what losses see at inference). SoftmaxCrossEntropyLoss
 * first emits the LogSoftmax kernel along C (nn_softmax_emit) into its
 * second output, or into a temp when that output is absent.
 */
#include <string.h>

#include "lowering/lower_nn_impl.h"
#include "lowering/plan.h"

typedef struct loss_s {
  kiln_nn_loss_t l;
  const tir_buffer_t *x, *t, *w, *y; /* x [N,C] or [N,C,D]; t [N,D]; w [C]; y [N,D] or [1] */
  int64_t N, C, D;
} loss_t;

/* Score (n, c, d) as f32, for both view ranks. */
static const tir_expr_t* score(nn_kb_t* kb, const loss_t* s, const tir_expr_t* n, const tir_expr_t* c,
                               const tir_expr_t* d) {
  return s->x->rank == 2 ? nn_ldf(kb, s->x, NN_IDX(n, c)) : nn_ldf(kb, s->x, NN_IDX(n, c, d));
}

/* Target (n, d) as I64. */
static const tir_expr_t* target(nn_kb_t* kb, const loss_t* s, const tir_expr_t* n, const tir_expr_t* d) {
  return tir_cast(kb->t, KILN_DTYPE_I64, tir_load(kb->t, s->t, NN_IDX(n, d)));
}

static kiln_status_t emit_check(kiln_lower_ctx_t* ctx, const loss_t* s) {
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  tir_ctx_t* t = kb.t;
  const tir_buffer_t* word = NULL;
  KILN_RETURN_IF_ERROR(kiln_lower_status(ctx, &word));
  tir_var_t *vn = nn_var(&kb, "n"), *vd = nn_var(&kb, "d");
  const tir_expr_t* v = target(&kb, s, nn_v(&kb, vn), nn_v(&kb, vd));
  const tir_expr_t* bad = tir_bin(t, TIR_OR, tir_bin(t, TIR_LT, v, nn_i(&kb, 0)), tir_bin(t, TIR_GE, v, nn_i(&kb, s->C)));
  if (s->l.has_ignore) bad = tir_bin(t, TIR_AND, bad, tir_bin(t, TIR_NE, v, nn_i(&kb, s->l.ignore)));
  const tir_stmt_t* flag =
      tir_store(t, word, NN_IDX(nn_i(&kb, 0)), tir_const(t, KILN_DTYPE_I32, (double)KILN_CHECK_INDEX_RANGE));
  const tir_stmt_t* body = nn_for(&kb, vn, s->N, nn_for(&kb, vd, s->D, tir_if(t, bad, flag, NULL)));
  if (s->N > 1) nn_parallel(&kb, vn);
  return nn_emit(&kb, body);
}

/* The loss of (n, d) into *loss and its weight into *wt (both f32, 0 when
 * ignored). */
static void elem_loss(nn_kb_t* kb, const loss_t* s, const tir_expr_t* n, const tir_expr_t* d,
                      const tir_expr_t** loss, const tir_expr_t** wt) {
  tir_ctx_t* t = kb->t;
  const tir_expr_t* v = target(kb, s, n, d);
  const tir_expr_t* c = nn_clamp(kb, v, 0, s->C - 1);
  const tir_expr_t* w = s->w ? nn_ldf(kb, s->w, NN_IDX(c)) : nn_f(kb, 1.0);
  *loss = tir_mul(t, tir_call(t, TIR_NEG, 1, score(kb, s, n, c, d), NULL, NULL), w);
  *wt = w;
  if (s->l.has_ignore) {
    const tir_expr_t* ign = tir_bin(t, TIR_EQ, v, nn_i(kb, s->l.ignore));
    *loss = tir_select(t, ign, nn_f(kb, 0.0), *loss);
    *wt = tir_select(t, ign, nn_f(kb, 0.0), w);
  }
}

static kiln_status_t emit_loss(kiln_lower_ctx_t* ctx, const loss_t* s) {
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  tir_ctx_t* t = kb.t;
  tir_var_t *vn = nn_var(&kb, "n"), *vd = nn_var(&kb, "d");
  const tir_expr_t *n = nn_v(&kb, vn), *d = nn_v(&kb, vd);
  const tir_expr_t *loss, *wt;
  elem_loss(&kb, s, n, d, &loss, &wt);
  if (s->l.reduction == KILN_NN_LOSS_NONE) {
    const tir_stmt_t* body = nn_for(&kb, vn, s->N, nn_for(&kb, vd, s->D, nn_stf(&kb, s->y, NN_IDX(n, d), loss)));
    if (s->N > 1) nn_parallel(&kb, vn);
    return nn_emit(&kb, body);
  }
  const int64_t two = 2;
  const tir_buffer_t* acc = tir_buffer(t, "acc", KILN_DTYPE_F32, 1, &two, TIR_SCOPE_PRIVATE);
  const tir_expr_t *i0 = nn_i(&kb, 0), *i1 = nn_i(&kb, 1);
  const tir_stmt_t* add[2] = {tir_store(t, acc, NN_IDX(i0), tir_add(t, tir_load(t, acc, NN_IDX(i0)), loss)),
                              tir_store(t, acc, NN_IDX(i1), tir_add(t, tir_load(t, acc, NN_IDX(i1)), wt))};
  const tir_expr_t* sum = tir_load(t, acc, NN_IDX(i0));
  const tir_expr_t* res =
      s->l.reduction == KILN_NN_LOSS_SUM ? sum : tir_bin(t, TIR_DIV, sum, tir_load(t, acc, NN_IDX(i1)));
  const tir_stmt_t* items[4] = {tir_store(t, acc, NN_IDX(i0), nn_f(&kb, 0.0)),
                                tir_store(t, acc, NN_IDX(i1), nn_f(&kb, 0.0)),
                                nn_for(&kb, vn, s->N, nn_for(&kb, vd, s->D, tir_seq(t, 2, add))),
                                nn_stf(&kb, s->y, NN_IDX(i0), res)};
  return nn_emit(&kb, tir_alloc(t, acc, tir_seq(t, 4, items)));
}

static kiln_status_t lower_loss(kiln_lower_ctx_t* ctx, bool sce) {
  const char* op = ctx->node->op_type;
  loss_t s;
  memset(&s, 0, sizeof s);
  KILN_RETURN_IF_ERROR(kiln_nn_loss_parse(ctx->node, op, &s.l));
  const tir_buffer_t *x = ctx->in[0], *tg = ctx->in[1], *y = ctx->out[0];
  if (!x || !tg || !y || x->rank < 2)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: missing operand or scores of rank < 2", op);
  if (tg->dtype != KILN_DTYPE_I64 && tg->dtype != KILN_DTYPE_I32)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: target has dtype %s", op, kiln_dtype_name(tg->dtype));
  s.N = x->shape[0];
  s.C = x->shape[1];
  s.D = 1;
  for (int32_t k = 2; k < x->rank; ++k) s.D *= x->shape[k];
  if (s.N * s.D == 0 || s.C == 0) {
    /* No (n, d) positions, or no class a target could name. */
    return kiln_make_status(KILN_UNSUPPORTED, "%s: empty scores [N=%lld, C=%lld, D=%lld]", op, (long long)s.N,
                            (long long)s.C, (long long)s.D);
  }
  s.w = ctx->n_in > 2 ? ctx->in[2] : NULL;
  const int64_t xs[3] = {s.N, s.C, s.D}, ts[2] = {s.N, s.D}, one = 1;
  const int32_t xr = s.D == 1 ? 2 : 3;
  const tir_buffer_t* xv;
  KILN_RETURN_IF_ERROR(nn_view(ctx, x, "scores", xr, xs, &xv));
  KILN_RETURN_IF_ERROR(nn_view(ctx, tg, "targets", 2, ts, &s.t));
  if (s.l.reduction == KILN_NN_LOSS_NONE) KILN_RETURN_IF_ERROR(nn_view(ctx, y, "losses", 2, ts, &s.y));
  else KILN_RETURN_IF_ERROR(nn_view(ctx, y, "loss", 1, &one, &s.y));
  s.x = xv;
  if (sce) {
    const tir_buffer_t* lp;
    if (ctx->n_out > 1 && ctx->out[1]) KILN_RETURN_IF_ERROR(nn_view(ctx, ctx->out[1], "logprob", xr, xs, &lp));
    else KILN_RETURN_IF_ERROR(kiln_lower_temp(ctx, "logprob", KILN_DTYPE_F32, xr, xs, &lp));
    KILN_RETURN_IF_ERROR(nn_softmax_emit(ctx, xv, lp, s.N, s.C, s.D, true));
    s.x = lp;
  }
  /* Constant targets are checked at run time too: the scores may not be
   * constant, so nothing else would catch a bad one. */
  KILN_RETURN_IF_ERROR(emit_check(ctx, &s));
  return emit_loss(ctx, &s);
}

kiln_status_t kiln_lower_nn_nll_loss(kiln_lower_ctx_t* ctx) { return lower_loss(ctx, false); }
kiln_status_t kiln_lower_nn_sce_loss(kiln_lower_ctx_t* ctx) { return lower_loss(ctx, true); }
