/* LpNormalization, MeanVarianceNormalization and LRN (see
 * ir/ops/nn_norm_more.c).
 *
 * LpNormalization and MVN normalise over a set of axes: the dims split into
 * runs of kept and reduced dims (nn_dim_runs) and each kept position is one
 * iteration of a flat loop (PARALLEL with enough work) that reduces its
 * elements with nn_lane_reduce (16 lanes, blocked past 64k) and then writes
 * them; an element's address is rebuilt from the kept and reduced flat
 * indices by div/mod per run (folded away for a single run). MVN takes the
 * mean, then the biased variance from the deviations (two passes: never
 * negative, unlike E[x^2] - E[x]^2 in f32).
 *
 * LRN is element-wise over [N*C][plane] rows with the channel window
 * unrolled into the expression (size <= 32; larger windows are refused),
 * out-of-range channels selected away, so the plane loop vectorizes.
 */
#include <string.h>

#include "lowering/lower_nn_impl.h"

typedef struct an_s {
  const tir_buffer_t* xv; /* the runs as dims */
  int32_t ng;
  int64_t gdim[KILN_MAX_RANK];
  bool gred[KILN_MAX_RANK];
  const tir_expr_t* k; /* kept flat index */
  const tir_buffer_t* mean;
  int64_t p; /* LpNormalization: 1 or 2; MVN: 0 */
} an_t;

/* Indices of element (k, r) per run: the last run of each kind varies
 * fastest. */
static void an_index(nn_kb_t* kb, const an_t* a, const tir_expr_t* r, const tir_expr_t** idx) {
  int64_t ks = 1, rs = 1;
  for (int32_t g = a->ng - 1; g >= 0; --g) {
    const tir_expr_t* flat = a->gred[g] ? r : a->k;
    int64_t* st = a->gred[g] ? &rs : &ks;
    idx[g] = nn_modc(kb, nn_divc(kb, flat, *st), a->gdim[g]);
    *st *= a->gdim[g];
  }
}

static const tir_expr_t* an_x(nn_kb_t* kb, const an_t* a, const tir_expr_t* r) {
  const tir_expr_t* idx[KILN_MAX_RANK];
  an_index(kb, a, r, idx);
  return nn_ldf(kb, a->xv, idx);
}

/* The value pass 1 sums: x (MVN), |x| or x^2. */
static const tir_expr_t* an_sum1(nn_kb_t* kb, const void* u, const tir_expr_t* r) {
  const an_t* a = u;
  const tir_expr_t* v = an_x(kb, a, r);
  if (a->p == 1) return tir_call(kb->t, TIR_FABS, 1, v, NULL, NULL);
  return a->p == 2 ? tir_mul(kb->t, v, v) : v;
}

static const tir_expr_t* an_dev2(nn_kb_t* kb, const void* u, const tir_expr_t* r) {
  const an_t* a = u;
  return nn_sqdev(kb, an_x(kb, a, r), a->mean);
}

static kiln_status_t axes_norm(kiln_lower_ctx_t* ctx, bool mvn) {
  const char* op = mvn ? "MeanVarianceNormalization" : "LpNormalization";
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  tir_ctx_t* t = kb.t;
  const tir_buffer_t *x = ctx->in[0], *y = ctx->out[0];
  if (!x || !y) return kiln_make_status(KILN_INTERNAL, "%s: missing operand", op);
  bool red[KILN_MAX_RANK] = {false};
  an_t a;
  memset(&a, 0, sizeof a);
  if (mvn) {
    static const int64_t def[3] = {0, 2, 3};
    const int64_t* v = NULL;
    int64_t n = -1;
    KILN_RETURN_IF_ERROR(kiln_attr_ints(ctx->node, "axes", &v, &n));
    if (n < 0) v = def, n = 3;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t ax = v[i] < 0 ? v[i] + x->rank : v[i];
      if (ax < 0 || ax >= x->rank) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: axis out of range", op);
      red[ax] = true;
    }
  } else {
    int64_t axis = -1;
    KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "axis", -1, &axis));
    KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "p", 2, &a.p));
    if (axis < 0) axis += x->rank;
    if (axis < 0 || axis >= x->rank) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: axis out of range", op);
    red[axis] = true;
  }
  if (tir_buffer_numel(x) == 0) return NULL;
  a.ng = nn_dim_runs(x, red, a.gdim, a.gred);
  int64_t K = 1, R = 1;
  for (int32_t g = 0; g < a.ng; ++g) *(a.gred[g] ? &R : &K) *= a.gdim[g];
  const tir_buffer_t* yv;
  KILN_RETURN_IF_ERROR(nn_view(ctx, x, "xv", a.ng, a.gdim, &a.xv));
  KILN_RETURN_IF_ERROR(nn_view(ctx, y, "yv", a.ng, a.gdim, &yv));
  const int64_t one = 1;
  a.mean = tir_buffer(t, "s1", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_buffer_t* den = tir_buffer(t, "den", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE);
  tir_var_t* vk = nn_var(&kb, "k");
  a.k = nn_v(&kb, vk);
  const tir_expr_t* z = nn_i(&kb, 0);
  const tir_expr_t* s1 = tir_load(t, a.mean, NN_IDX(z));
  const tir_stmt_t* items[4] = {nn_lane_reduce(&kb, a.mean, TIR_ADD, nn_f(&kb, 0.0), R, an_sum1, &a), NULL,
                                NULL, NULL};
  if (mvn) {
    const tir_expr_t* rf = nn_f(&kb, (double)R);
    items[1] = tir_seq2(t, tir_store(t, a.mean, NN_IDX(z), tir_bin(t, TIR_DIV, s1, rf)),
                        nn_lane_reduce(&kb, den, TIR_ADD, nn_f(&kb, 0.0), R, an_dev2, &a));
    const tir_expr_t* sd = tir_call(t, TIR_SQRT, 1, tir_bin(t, TIR_DIV, tir_load(t, den, NN_IDX(z)), rf), NULL, NULL);
    items[2] = tir_store(t, den, NN_IDX(z), tir_add(t, sd, nn_f(&kb, 1e-9)));
  } else {
    items[2] = tir_store(t, den, NN_IDX(z), a.p == 1 ? s1 : tir_call(t, TIR_SQRT, 1, s1, NULL, NULL));
  }
  tir_var_t* vr = nn_var(&kb, "r");
  const tir_expr_t* r = nn_v(&kb, vr);
  const tir_expr_t* v = an_x(&kb, &a, r);
  if (mvn) v = tir_sub(t, v, s1);
  const tir_expr_t* idx[KILN_MAX_RANK];
  an_index(&kb, &a, r, idx);
  items[3] = nn_for(&kb, vr, R, nn_stf(&kb, yv, idx, tir_bin(t, TIR_DIV, v, tir_load(t, den, NN_IDX(z)))));
  if (a.gred[a.ng - 1]) nn_vectorize(&kb, vr);
  const tir_stmt_t* s = tir_alloc(t, a.mean, tir_alloc(t, den, tir_seq(t, 4, items)));
  s = nn_for(&kb, vk, K, s);
  if (K > 1 && K * R >= 4096) nn_parallel(&kb, vk);
  return nn_emit(&kb, s);
}

kiln_status_t kiln_lower_nn_lpnorm(kiln_lower_ctx_t* ctx) { return axes_norm(ctx, false); }
kiln_status_t kiln_lower_nn_mvn(kiln_lower_ctx_t* ctx) { return axes_norm(ctx, true); }

/* ---- LRN ---------------------------------------------------------------- */

enum { LRN_MAX_SIZE = 32 };

kiln_status_t kiln_lower_nn_lrn(kiln_lower_ctx_t* ctx) {
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  tir_ctx_t* t = kb.t;
  const tir_buffer_t *x = ctx->in[0], *y = ctx->out[0];
  if (!x || !y || x->rank < 2) return kiln_make_status(KILN_INVALID_ARGUMENT, "LRN: input must have rank >= 2");
  float alpha = 1e-4f, beta = 0.75f, bias = 1.0f;
  int64_t size = 0;
  KILN_RETURN_IF_ERROR(kiln_attr_float(ctx->node, "alpha", 1e-4f, &alpha));
  KILN_RETURN_IF_ERROR(kiln_attr_float(ctx->node, "beta", 0.75f, &beta));
  KILN_RETURN_IF_ERROR(kiln_attr_float(ctx->node, "bias", 1.0f, &bias));
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "size", 0, &size));
  if (size <= 0 || size > LRN_MAX_SIZE) {
    return kiln_make_status(KILN_UNSUPPORTED, "LRN: size %lld is not supported (1 to %d)", (long long)size,
                            LRN_MAX_SIZE);
  }
  const int64_t N = x->shape[0], C = x->shape[1];
  int64_t plane = 1;
  for (int32_t d = 2; d < x->rank; ++d) plane *= x->shape[d];
  if (N * C * plane == 0) return NULL;
  const tir_buffer_t *xv, *yv;
  const int64_t vs[3] = {N, C, plane};
  KILN_RETURN_IF_ERROR(nn_view(ctx, x, "xv", 3, vs, &xv));
  KILN_RETURN_IF_ERROR(nn_view(ctx, y, "yv", 3, vs, &yv));
  tir_var_t* vq = nn_var(&kb, "nc");
  tir_var_t* vp = nn_var(&kb, "p");
  const tir_expr_t *q = nn_v(&kb, vq), *p = nn_v(&kb, vp);
  const tir_expr_t *n = nn_divc(&kb, q, C), *c = nn_modc(&kb, q, C);
  const int64_t lo = (size - 1) / 2;
  const tir_expr_t* sq = NULL;
  for (int64_t j = 0; j < size; ++j) {
    const tir_expr_t* ch = nn_addc(&kb, c, j - lo);
    const tir_expr_t* v = nn_ldf(&kb, xv, NN_IDX(n, nn_clamp(&kb, ch, 0, C - 1), p));
    v = tir_mul(t, v, v);
    if (j != lo) {
      /* channels past either end contribute nothing */
      const tir_expr_t* in = tir_bin(t, TIR_AND, tir_bin(t, TIR_GE, ch, nn_i(&kb, 0)),
                                     tir_bin(t, TIR_LT, ch, nn_i(&kb, C)));
      v = tir_select(t, in, v, nn_f(&kb, 0.0));
    }
    sq = sq ? tir_add(t, sq, v) : v;
  }
  const tir_expr_t* base = tir_add(t, nn_f(&kb, bias), tir_mul(t, nn_f(&kb, (double)alpha / (double)size), sq));
  const tir_expr_t* v = tir_bin(t, TIR_DIV, nn_ldf(&kb, xv, NN_IDX(n, c, p)),
                                tir_call(t, TIR_POW, 2, base, nn_f(&kb, beta), NULL));
  const tir_stmt_t* s = nn_for(&kb, vq, N * C, nn_for(&kb, vp, plane, nn_stf(&kb, yv, NN_IDX(n, c, p), v)));
  nn_vectorize(&kb, vp);
  if (N * C > 1 && N * C * plane >= 4096) nn_parallel(&kb, vq);
  return nn_emit(&kb, s);
}
