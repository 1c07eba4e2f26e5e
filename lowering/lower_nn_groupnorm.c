/* InstanceNormalization and GroupNormalization (see ir/ops/nn_groupnorm.c).
 *
 * x [N, C, spatial...] is viewed as rows [N*G][C/G][plane]: each row (one
 * (n, group) block, contiguous in memory) is one iteration of a loop that is
 * PARALLEL when there is enough work. Its mean and then its biased variance
 * come from two nn_lane_reduce passes over the row (16 lanes, blocked past
 * 64k elements, so the f32 sums keep their accuracy), like
 * LayerNormalization; the output loop runs channel by channel so the
 * per-channel scale and bias are loaded once per channel and the plane loop
 * vectorizes.
 */
#include <string.h>

#include "lowering/lower_nn_impl.h"

typedef struct gn_s {
  const tir_buffer_t* xv; /* [rows][R] */
  const tir_expr_t* row;
  const tir_buffer_t* mean;
} gn_t;

static const tir_expr_t* gn_x(nn_kb_t* kb, const void* u, const tir_expr_t* i) {
  const gn_t* g = u;
  return nn_ldf(kb, g->xv, NN_IDX(g->row, i));
}

static const tir_expr_t* gn_dev2(nn_kb_t* kb, const void* u, const tir_expr_t* i) {
  return nn_sqdev(kb, gn_x(kb, u, i), ((const gn_t*)u)->mean);
}

static kiln_status_t group_norm(kiln_lower_ctx_t* ctx, bool instance) {
  const char* op = instance ? "InstanceNormalization" : "GroupNormalization";
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  tir_ctx_t* t = kb.t;
  const tir_buffer_t *x = ctx->in[0], *y = ctx->out[0];
  if (!x || !y || ctx->n_in < 3 || !ctx->in[1] || !ctx->in[2] || x->rank < 2) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: missing operand", op);
  }
  float eps = 1e-5f;
  KILN_RETURN_IF_ERROR(kiln_attr_float(ctx->node, "epsilon", 1e-5f, &eps));
  const int64_t N = x->shape[0], C = x->shape[1];
  int64_t G = C;
  if (!instance) KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "num_groups", -1, &G));
  if (G <= 0 || C % G) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: bad num_groups %lld", op, (long long)G);
  const bool per_group = !instance && ctx->opset < 21;
  int64_t plane = 1;
  for (int32_t d = 2; d < x->rank; ++d) plane *= x->shape[d];
  const int64_t cpg = C / G, R = cpg * plane, rows = N * G, plen = per_group ? G : C;
  if (rows * R == 0) return NULL;
  if (tir_buffer_numel(ctx->in[1]) != plen || tir_buffer_numel(ctx->in[2]) != plen) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: scale and bias must have %lld elements", op,
                            (long long)plen);
  }
  gn_t g = {NULL, NULL, NULL};
  const tir_buffer_t *yv, *sv, *bv;
  const int64_t xs[2] = {rows, R}, ys[3] = {rows, cpg, plane};
  KILN_RETURN_IF_ERROR(nn_view(ctx, x, "xflat", 2, xs, &g.xv));
  KILN_RETURN_IF_ERROR(nn_view(ctx, y, "yflat", 3, ys, &yv));
  KILN_RETURN_IF_ERROR(nn_view(ctx, ctx->in[1], "scaleflat", 1, &plen, &sv));
  KILN_RETURN_IF_ERROR(nn_view(ctx, ctx->in[2], "biasflat", 1, &plen, &bv));
  const int64_t one = 1;
  g.mean = tir_buffer(t, "mean", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_buffer_t* inv = tir_buffer(t, "inv", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_buffer_t* ab = tir_buffer(t, "ab", KILN_DTYPE_F32, 1, (const int64_t[]){2}, TIR_SCOPE_PRIVATE);
  tir_var_t* vr = nn_var(&kb, "row");
  g.row = nn_v(&kb, vr);
  const tir_expr_t *z = nn_i(&kb, 0), *o1 = nn_i(&kb, 1);
  const tir_expr_t* rf = nn_f(&kb, (double)R);
  const tir_stmt_t* items[5] = {NULL};
  items[0] = tir_seq2(t, nn_lane_reduce(&kb, g.mean, TIR_ADD, nn_f(&kb, 0.0), R, gn_x, &g),
                      tir_store(t, g.mean, NN_IDX(z), tir_bin(t, TIR_DIV, tir_load(t, g.mean, NN_IDX(z)), rf)));
  const tir_expr_t* var = tir_bin(t, TIR_DIV, tir_load(t, inv, NN_IDX(z)), rf);
  items[1] = tir_seq2(t, nn_lane_reduce(&kb, inv, TIR_ADD, nn_f(&kb, 0.0), R, gn_dev2, &g),
                      tir_store(t, inv, NN_IDX(z),
                                tir_call(t, TIR_RSQRT, 1, tir_add(t, var, nn_f(&kb, eps)), NULL, NULL)));
  /* per channel: y = x * a + b with a = inv * scale, b = bias - mean * a */
  tir_var_t* vc = nn_var(&kb, "c");
  tir_var_t* vp = nn_var(&kb, "p");
  const tir_expr_t *c = nn_v(&kb, vc), *p = nn_v(&kb, vp);
  const tir_expr_t* grp = nn_modc(&kb, g.row, G);
  const tir_expr_t* pi = per_group ? grp : nn_add(&kb, nn_mulc(&kb, grp, cpg), c);
  const tir_expr_t* a = tir_mul(t, tir_load(t, inv, NN_IDX(z)), nn_ldf(&kb, sv, NN_IDX(pi)));
  const tir_stmt_t* set_ab = tir_seq2(
      t, tir_store(t, ab, NN_IDX(z), a),
      tir_store(t, ab, NN_IDX(o1),
                tir_sub(t, nn_ldf(&kb, bv, NN_IDX(pi)),
                        tir_mul(t, tir_load(t, g.mean, NN_IDX(z)), tir_load(t, ab, NN_IDX(z))))));
  const tir_expr_t* v = tir_call(t, TIR_FMA, 3, gn_x(&kb, &g, nn_add(&kb, nn_mulc(&kb, c, plane), p)),
                                 tir_load(t, ab, NN_IDX(z)), tir_load(t, ab, NN_IDX(o1)));
  const tir_stmt_t* per_p = nn_for(&kb, vp, plane, nn_stf(&kb, yv, NN_IDX(g.row, c, p), v));
  nn_vectorize(&kb, vp);
  items[2] = nn_for(&kb, vc, cpg, tir_seq2(t, set_ab, per_p));
  const tir_stmt_t* s = tir_alloc(t, g.mean, tir_alloc(t, inv, tir_alloc(t, ab, tir_seq(t, 3, items))));
  s = nn_for(&kb, vr, rows, s);
  if (rows > 1 && rows * R >= 4096) nn_parallel(&kb, vr);
  return nn_emit(&kb, s);
}

kiln_status_t kiln_lower_nn_instancenorm(kiln_lower_ctx_t* ctx) { return group_norm(ctx, true); }
kiln_status_t kiln_lower_nn_groupnorm(kiln_lower_ctx_t* ctx) { return group_norm(ctx, false); }
