/* Normalisations: BatchNormalization (inference), LayerNormalization and
 * Softmax / LogSoftmax.
 *
 * BatchNormalization with constant statistics folds into y = x * a[c] + b[c]
 * with a = scale / sqrt(var + eps) and b = B - mean * a computed at compile
 * time in double (exactly as the reference does) and stored as constants;
 * with run-time statistics the kernel computes a and b itself.
 *
 * Row reductions (LayerNormalization statistics, the Softmax max and sum)
 * over a contiguous row run 16 lanes at a time in a PRIVATE vector and then
 * across the lanes (nn_lane_reduce; rows of 64k or more block by block, for
 * accuracy), so the row loop vectorizes; reductions
 * over a strided axis (Softmax with inner > 1) instead keep a PRIVATE row of
 * the inner extent and vectorize along it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lowering/lower_nn_impl.h"
#include "lowering/plan.h"

/* ---- row reduction --------------------------------------------------------- */

/* |f| read from |base| on: one block of a long row. */
typedef struct lane_blk_s {
  nn_val_fn f;
  const void* user;
  const tir_expr_t* base;
} lane_blk_t;

static const tir_expr_t* lane_blk_val(nn_kb_t* kb, const void* u, const tir_expr_t* i) {
  const lane_blk_t* b = u;
  return b->f(kb, b->user, nn_add(kb, b->base, i));
}

/* A row of 64k or more: blocks of B (about sqrt(n), a multiple of 256, at
 * least 4096), each reduced 16 lanes wide into a partial that is then folded
 * into |dst|. Each lane and |dst| then add about sqrt(n)/16 and sqrt(n)
 * values instead of n/16, so f32 sums keep their accuracy (a Softmax over
 * 2^18 was off by 1.5e-4); the extra work is one 16-lane fold per block. */
static const tir_stmt_t* lane_reduce_blocked(nn_kb_t* kb, const tir_buffer_t* dst, tir_binop_t op,
                                             const tir_expr_t* ident, int64_t n, nn_val_fn f,
                                             const void* user) {
  tir_ctx_t* t = kb->t;
  int64_t B = 256;
  while (B * B < n) B += 256;
  if (B < 4096) B = 4096;
  const int64_t nb = n / B, rem = n - nb * B, one = 1;
  const tir_expr_t* z = nn_i(kb, 0);
  const tir_buffer_t* part = tir_buffer(t, "lpart", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_stmt_t* fold =
      tir_store(t, dst, NN_IDX(z), tir_bin(t, op, tir_load(t, dst, NN_IDX(z)), tir_load(t, part, NN_IDX(z))));
  tir_var_t* vb = nn_var(kb, "rb");
  lane_blk_t blk = {f, user, nn_mulc(kb, nn_v(kb, vb), B)};
  const tir_stmt_t* items[3] = {tir_store(t, dst, NN_IDX(z), ident), NULL, NULL};
  items[1] = nn_for(kb, vb, nb, tir_alloc(t, part, tir_seq2(t, nn_lane_reduce(kb, part, op, ident, B, lane_blk_val, &blk), fold)));
  if (rem) {
    lane_blk_t tail = {f, user, nn_i(kb, nb * B)};
    items[2] = tir_alloc(t, part, tir_seq2(t, nn_lane_reduce(kb, part, op, ident, rem, lane_blk_val, &tail), fold));
  }
  return tir_seq(t, 3, items);
}

const tir_stmt_t* nn_lane_reduce(nn_kb_t* kb, const tir_buffer_t* dst, tir_binop_t op,
                                 const tir_expr_t* ident, int64_t n, nn_val_fn f,
                                 const void* user) {
  tir_ctx_t* t = kb->t;
  /* a plan of plain loops (kiln_plan_build_plain) reduces one element at a
   * time: its lanes and tail would depend on n */
  const bool plain = kb->ctx->plan && kb->ctx->plan->plain_loops;
  const bool lanes_ok = dst->dtype == KILN_DTYPE_F32 && n >= 64 && !plain;
  if (lanes_ok && n >= 65536) return lane_reduce_blocked(kb, dst, op, ident, n, f, user);
  const int64_t L = lanes_ok ? 16 : 1;
  const tir_expr_t* z = nn_i(kb, 0);
  const tir_stmt_t* items[5] = {NULL, NULL, NULL, NULL, NULL};
  if (L == 1) {
    tir_var_t* vi = nn_var(kb, "ri");
    items[0] = tir_store(t, dst, NN_IDX(z), ident);
    items[1] = nn_for(kb, vi, n,
                      tir_store(t, dst, NN_IDX(z),
                                tir_bin(t, op, tir_load(t, dst, NN_IDX(z)), f(kb, user, nn_v(kb, vi)))));
    return tir_seq(t, 2, items);
  }
  const tir_buffer_t* lanes = tir_buffer(t, "lanes", KILN_DTYPE_F32, 1, &L, TIR_SCOPE_PRIVATE);
  {
    tir_var_t* vl = nn_var(kb, "rl");
    items[0] = nn_for(kb, vl, L, tir_store(t, lanes, NN_IDX(nn_v(kb, vl)), ident));
    nn_vectorize(kb, vl);
  }
  const int64_t full = n / L;
  {
    tir_var_t* vi = nn_var(kb, "ri");
    tir_var_t* vl = nn_var(kb, "rl");
    const tir_expr_t* l = nn_v(kb, vl);
    const tir_expr_t* e = nn_add(kb, nn_mulc(kb, nn_v(kb, vi), L), l);
    const tir_stmt_t* s = tir_store(t, lanes, NN_IDX(l),
                                    tir_bin(t, op, tir_load(t, lanes, NN_IDX(l)), f(kb, user, e)));
    items[1] = nn_for(kb, vi, full, nn_for(kb, vl, L, s));
    nn_vectorize(kb, vl);
  }
  items[2] = tir_store(t, dst, NN_IDX(z), tir_load(t, lanes, NN_IDX(z)));
  {
    tir_var_t* vl = nn_var(kb, "rl");
    const tir_expr_t* l = nn_addc(kb, nn_v(kb, vl), 1);
    items[3] = nn_for(kb, vl, L - 1,
                      tir_store(t, dst, NN_IDX(z),
                                tir_bin(t, op, tir_load(t, dst, NN_IDX(z)), tir_load(t, lanes, NN_IDX(l)))));
  }
  if (n % L) {
    tir_var_t* vr = nn_var(kb, "rr");
    const tir_expr_t* e = nn_addc(kb, nn_v(kb, vr), full * L);
    items[4] = nn_for(kb, vr, n % L,
                      tir_store(t, dst, NN_IDX(z),
                                tir_bin(t, op, tir_load(t, dst, NN_IDX(z)), f(kb, user, e))));
  }
  return tir_alloc(t, lanes, tir_seq(t, 5, items));
}

static const tir_stmt_t* lane_reduce(nn_kb_t* kb, const tir_buffer_t* dst, tir_binop_t op,
                                     double ident, int64_t n, nn_val_fn f, const void* user) {
  return nn_lane_reduce(kb, dst, op, nn_f(kb, ident), n, f, user);
}

/* A row loop over i < n for a store built from the index (|mk|): on GPU
 * plans whose element-wise nests take lanes (kiln_lower_ctx_t.ew_lanes,
 * n a multiple of them) a loop over groups of lanes around a VECTORIZED
 * lane loop, i = g * lanes + l, so the Vulkan printer reads and writes the
 * row as vec4 texels (a row of y stored only so becomes an image); else
 * one VECTORIZED loop over n. */
typedef const tir_stmt_t* (*row_body_fn)(nn_kb_t* kb, void* u, const tir_expr_t* i);
static const tir_stmt_t* row_loop(nn_kb_t* kb, int64_t n, row_body_fn mk, void* u) {
  const int64_t L = kb->ctx->target == KILN_TARGET_CLASS_GPU ? kb->ctx->ew_lanes : 0;
  tir_var_t* vi = nn_var(kb, "i");
  if (L > 1 && n % L == 0) {
    tir_var_t* vl = nn_var(kb, "il");
    const tir_expr_t* i = nn_add(kb, nn_mulc(kb, nn_v(kb, vi), L), nn_v(kb, vl));
    const tir_stmt_t* s = nn_for(kb, vi, n / L, nn_for(kb, vl, L, mk(kb, u, i)));
    nn_vectorize(kb, vl);
    return s;
  }
  const tir_stmt_t* s = nn_for(kb, vi, n, mk(kb, u, nn_v(kb, vi)));
  nn_vectorize(kb, vi);
  return s;
}

/* ---- BatchNormalization ------------------------------------------------------ */

/* Per-channel a = scale / sqrt(var + eps) and b = B - mean * a of constant
 * statistics, |len| >= C floats each (zeros past C). */
static kiln_status_t batchnorm_affine(kiln_lower_ctx_t* ctx, int64_t C, int64_t len, float eps, float** out_a,
                                      float** out_b) {
  float* prm[5] = {NULL};
  kiln_status_t st = NULL;
  for (int32_t i = 1; i < 5 && !st; ++i) st = nn_const_input_f32(ctx, i, &prm[i]);
  float *av = NULL, *bv = NULL;
  if (!st) st = nn_alloc_f32(len, "BatchNormalization scale", &av);
  if (!st) st = nn_alloc_f32(len, "BatchNormalization shift", &bv);
  if (!st) {
    memset(av, 0, sizeof(float) * (size_t)len);
    memset(bv, 0, sizeof(float) * (size_t)len);
    for (int64_t k = 0; k < C; ++k) {
      double s = (double)prm[1][k] / sqrt((double)prm[4][k] + (double)eps);
      av[k] = (float)s;
      bv[k] = (float)((double)prm[2][k] - (double)prm[3][k] * s);
    }
  }
  for (int32_t i = 1; i < 5; ++i) free(prm[i]);
  if (st) {
    free(av);
    free(bv);
    return st;
  }
  *out_a = av;
  *out_b = bv;
  return NULL;
}

/* On NCHWc (lowering/layout.c: constant statistics only): per (image,
 * channel block) and position, a c-lane vector y = x * a + b with a and b
 * padded to whole blocks. */
static kiln_status_t batchnorm_blocked(kiln_lower_ctx_t* ctx, nn_kb_t* kb, float eps) {
  tir_ctx_t* t = kb->t;
  const tir_buffer_t *x = ctx->in[0], *y = ctx->out[0];
  const int64_t c = ctx->in_block[0];
  if (x->rank != 5 || !ctx->out_block || ctx->out_block[0] != c || !ctx->in_tensor[0])
    return kiln_make_status(KILN_INTERNAL, "BatchNormalization: the blocked layout takes NCHWc in and out");
  for (int32_t i = 1; i < 5; ++i)
    if (!nn_is_const(ctx, i))
      return kiln_make_status(KILN_INTERNAL, "BatchNormalization: the blocked layout needs constant statistics");
  const int64_t N = x->shape[0], CB = x->shape[1], P = x->shape[2] * x->shape[3];
  const int64_t C = ctx->in_tensor[0]->shape.dims[1], len = CB * c;
  for (int32_t i = 1; i < 5; ++i)
    if (tir_buffer_numel(ctx->in[i]) != C)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "BatchNormalization: input %d has %lld elements, expected %lld",
                              (int)i, (long long)tir_buffer_numel(ctx->in[i]), (long long)C);
  if (N * CB * P == 0) return NULL;
  float *av = NULL, *bv = NULL;
  KILN_RETURN_IF_ERROR(batchnorm_affine(ctx, C, len, eps, &av, &bv));
  const tir_buffer_t *ab = NULL, *bb = NULL;
  kiln_status_t st = nn_const_f32(ctx, "scale_blk", 1, &len, av, &ab);
  av = NULL;
  if (!st) st = nn_const_f32(ctx, "shift_blk", 1, &len, bv, &bb);
  else free(bv);
  KILN_RETURN_IF_ERROR(st);
  const tir_buffer_t *xv, *yv;
  int64_t vs[3] = {N * CB, P, c};
  KILN_RETURN_IF_ERROR(nn_view(ctx, x, "xblk", 3, vs, &xv));
  KILN_RETURN_IF_ERROR(nn_view(ctx, y, "yblk", 3, vs, &yv));
  tir_var_t* vp = nn_var(kb, "ncb");
  tir_var_t* vi = nn_var(kb, "i");
  tir_var_t* vl = nn_var(kb, "l");
  const tir_expr_t *p = nn_v(kb, vp), *i = nn_v(kb, vi), *l = nn_v(kb, vl);
  const tir_expr_t* ch = nn_add(kb, nn_mulc(kb, nn_modc(kb, p, CB), c), l);
  const tir_expr_t* v = tir_add(t, tir_mul(t, nn_ldf(kb, xv, NN_IDX(p, i, l)), tir_load(t, ab, NN_IDX(ch))),
                                tir_load(t, bb, NN_IDX(ch)));
  const tir_stmt_t* s = nn_stf(kb, yv, NN_IDX(p, i, l), v);
  s = nn_for(kb, vp, N * CB, nn_for(kb, vi, P, nn_for(kb, vl, c, s)));
  nn_vectorize(kb, vl);
  if (N * CB > 1 && N * CB * P * c >= 4096) nn_parallel(kb, vp);
  return nn_emit(kb, s);
}

kiln_status_t kiln_lower_nn_batchnorm(kiln_lower_ctx_t* ctx) {
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  tir_ctx_t* t = kb.t;
  const tir_buffer_t *x = ctx->in[0], *y = ctx->out[0];
  int64_t training = 0;
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "training_mode", 0, &training));
  if (training || (ctx->n_out > 1 && ctx->out[1])) {
    return kiln_make_status(KILN_UNSUPPORTED, "BatchNormalization: training mode is not supported");
  }
  for (int32_t i = 0; i < 5; ++i)
    if (i >= ctx->n_in || !ctx->in[i])
      return kiln_make_status(KILN_INVALID_ARGUMENT, "BatchNormalization: input %d is missing", (int)i);
  if (!x || !y || x->rank < 2) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "BatchNormalization: input must have rank >= 2");
  }
  float eps = 1e-5f;
  KILN_RETURN_IF_ERROR(kiln_attr_float(ctx->node, "epsilon", 1e-5f, &eps));
  if (ctx->in_block && ctx->in_block[0] > 0) return batchnorm_blocked(ctx, &kb, eps);
  const int64_t N = x->shape[0], C = x->shape[1];
  int64_t plane = 1;
  for (int32_t i = 2; i < x->rank; ++i) plane *= x->shape[i];
  if (N * C * plane == 0) return NULL;
  for (int32_t i = 1; i < 5; ++i) {
    if (tir_buffer_numel(ctx->in[i]) != C) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "BatchNormalization: input %d has %lld elements, expected %lld",
                              (int)i, (long long)tir_buffer_numel(ctx->in[i]), (long long)C);
    }
  }
  const tir_buffer_t *xv, *yv;
  int64_t vs[2] = {N * C, plane};
  KILN_RETURN_IF_ERROR(nn_view(ctx, x, "xflat", 2, vs, &xv));
  KILN_RETURN_IF_ERROR(nn_view(ctx, y, "yflat", 2, vs, &yv));
  tir_var_t* vp = nn_var(&kb, "nc");
  tir_var_t* vi = nn_var(&kb, "i");
  const tir_expr_t* p = nn_v(&kb, vp);
  const tir_expr_t* c = nn_modc(&kb, p, C);
  const tir_expr_t *a, *b;
  bool all_const = true;
  for (int32_t i = 1; i < 5; ++i) all_const = all_const && nn_is_const(ctx, i);
  if (all_const) {
    float* prm[5] = {NULL};
    kiln_status_t st = NULL;
    for (int32_t i = 1; i < 5 && !st; ++i) st = nn_const_input_f32(ctx, i, &prm[i]);
    float *av = NULL, *bv = NULL;
    if (!st) st = nn_alloc_f32(C, "BatchNormalization scale", &av);
    if (!st) st = nn_alloc_f32(C, "BatchNormalization shift", &bv);
    if (!st) {
      for (int64_t k = 0; k < C; ++k) {
        double s = (double)prm[1][k] / sqrt((double)prm[4][k] + (double)eps);
        av[k] = (float)s;
        bv[k] = (float)((double)prm[2][k] - (double)prm[3][k] * s);
      }
    }
    for (int32_t i = 1; i < 5; ++i) free(prm[i]);
    const tir_buffer_t *ab = NULL, *bb = NULL;
    if (!st) st = nn_const_f32(ctx, "scale", 1, &C, av, &ab), av = NULL;
    if (!st) st = nn_const_f32(ctx, "shift", 1, &C, bv, &bb), bv = NULL;
    free(av);
    free(bv);
    KILN_RETURN_IF_ERROR(st);
    a = tir_load(t, ab, NN_IDX(c));
    b = tir_load(t, bb, NN_IDX(c));
  } else {
    const tir_expr_t* sc = nn_ldf(&kb, ctx->in[1], NN_IDX(c));
    const tir_expr_t* var = nn_ldf(&kb, ctx->in[4], NN_IDX(c));
    a = tir_bin(t, TIR_DIV, sc, tir_call(t, TIR_SQRT, 1, tir_add(t, var, nn_f(&kb, eps)), NULL, NULL));
    b = tir_sub(t, nn_ldf(&kb, ctx->in[2], NN_IDX(c)), tir_mul(t, nn_ldf(&kb, ctx->in[3], NN_IDX(c)), a));
  }
  const tir_expr_t* i = nn_v(&kb, vi);
  const tir_stmt_t* s =
      nn_stf(&kb, yv, NN_IDX(p, i), tir_add(t, tir_mul(t, nn_ldf(&kb, xv, NN_IDX(p, i)), a), b));
  s = nn_for(&kb, vp, N * C, nn_for(&kb, vi, plane, s));
  nn_vectorize(&kb, vi);
  if (N * C > 1 && N * C * plane >= 4096) nn_parallel(&kb, vp);
  return nn_emit(&kb, s);
}

/* ---- LayerNormalization -------------------------------------------------------- */

typedef struct ln_s {
  const tir_buffer_t *xv, *yv, *sv, *bv; /* x, y [outer][inner]; scale, bias [inner] */
  const tir_buffer_t *sraw, *braw;        /* run-time scale/bias needing a broadcast */
  const tir_expr_t* row;
  const tir_buffer_t *mean, *inv;         /* PRIVATE [1]: the row's mean, 1 / std */
  int32_t nrank;                          /* normalised dims */
  int64_t ndims[KILN_MAX_RANK];
} ln_t;

static const tir_expr_t* ln_x(nn_kb_t* kb, const void* u, const tir_expr_t* i) {
  const ln_t* l = u;
  return nn_ldf(kb, l->xv, NN_IDX(l->row, i));
}

static const tir_expr_t* ln_dev2(nn_kb_t* kb, const void* u, const tir_expr_t* i) {
  const ln_t* l = u;
  return nn_sqdev(kb, nn_ldf(kb, l->xv, NN_IDX(l->row, i)), l->mean);
}

/* Element i of the normalised block of a run-time Scale/B that broadcasts
 * (numpy rules, right-aligned) to the normalised dims. */
static const tir_expr_t* ln_param(nn_kb_t* kb, const ln_t* l, const tir_buffer_t* p,
                                  const tir_expr_t* i) {
  const tir_expr_t* idx[KILN_MAX_RANK];
  int64_t stride = 1;
  for (int32_t d = l->nrank - 1; d >= 0; --d) {
    int32_t pd = p->rank - (l->nrank - d);
    if (pd >= 0) idx[pd] = p->shape[pd] == 1 ? nn_i(kb, 0) : nn_modc(kb, nn_divc(kb, i, stride), l->ndims[d]);
    stride *= l->ndims[d];
  }
  for (int32_t pd = 0; pd < p->rank - l->nrank; ++pd) idx[pd] = nn_i(kb, 0);
  return nn_ldf(kb, p, idx);
}

/* Scale/B: a compile-time constant expanded to [inner], a view when it has
 * exactly the normalised shape, or |raw| read through the broadcast. */
static kiln_status_t ln_input(kiln_lower_ctx_t* ctx, ln_t* l, int32_t in, int64_t inner,
                              const tir_buffer_t** flat, const tir_buffer_t** raw) {
  *flat = *raw = NULL;
  const tir_buffer_t* p = ctx->in[in];
  if (!p) return NULL;
  if (nn_is_const(ctx, in)) {
    float* v;
    KILN_RETURN_IF_ERROR(nn_const_input_f32(ctx, in, &v));
    float* e;
    kiln_status_t st = nn_alloc_f32(inner, "LayerNormalization parameter", &e);
    if (!st) {
      for (int64_t i = 0; i < inner; ++i) {
        int64_t off = 0, rest = i, stride = 1;
        for (int32_t d = l->nrank - 1; d >= 0; --d) {
          int64_t k = rest % l->ndims[d];
          rest /= l->ndims[d];
          int32_t pd = p->rank - (l->nrank - d);
          if (pd >= 0 && p->shape[pd] != 1) off += k * stride;
          if (pd >= 0) stride *= p->shape[pd];
        }
        e[i] = v[off];
      }
    }
    free(v);
    if (!st) st = nn_const_f32(ctx, in == 1 ? "scale" : "bias", 1, &inner, e, flat);
    return st;
  }
  if (tir_buffer_numel(p) == inner) {
    return nn_view(ctx, p, in == 1 ? "scaleflat" : "biasflat", 1, &inner, flat);
  }
  *raw = p;
  return NULL;
}

/* y = (x - mean) * inv * scale (+ bias) at |i| of the row */
static const tir_stmt_t* ln_out(nn_kb_t* kb, void* u, const tir_expr_t* i) {
  const ln_t* l = u;
  tir_ctx_t* t = kb->t;
  const tir_expr_t* z = nn_i(kb, 0);
  const tir_expr_t* v = tir_mul(
      t, tir_sub(t, nn_ldf(kb, l->xv, NN_IDX(l->row, i)), tir_load(t, l->mean, NN_IDX(z))),
      tir_load(t, l->inv, NN_IDX(z)));
  v = tir_mul(t, v, l->sv ? tir_load(t, l->sv, NN_IDX(i)) : ln_param(kb, l, l->sraw, i));
  if (l->bv || l->braw) v = tir_add(t, v, l->bv ? tir_load(t, l->bv, NN_IDX(i)) : ln_param(kb, l, l->braw, i));
  return nn_stf(kb, l->yv, NN_IDX(l->row, i), v);
}

kiln_status_t kiln_lower_nn_layernorm(kiln_lower_ctx_t* ctx) {
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  tir_ctx_t* t = kb.t;
  const tir_buffer_t *x = ctx->in[0], *y = ctx->out[0];
  if (!x || !y || ctx->n_in < 2 || !ctx->in[1]) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "LayerNormalization: missing operand");
  }
  int64_t axis = -1, stash = 1;
  float eps = 1e-5f;
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "axis", -1, &axis));
  KILN_RETURN_IF_ERROR(kiln_attr_float(ctx->node, "epsilon", 1e-5f, &eps));
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "stash_type", 1, &stash));
  if (stash != 1) {
    return kiln_make_status(KILN_UNSUPPORTED, "LayerNormalization: stash_type %lld is not supported",
                            (long long)stash);
  }
  if (axis < 0) axis += x->rank;
  if (axis < 0 || axis >= x->rank) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "LayerNormalization: axis out of range");
  }
  ln_t l;
  memset(&l, 0, sizeof l);
  int64_t outer = 1, inner = 1;
  for (int32_t d = 0; d < x->rank; ++d) {
    if (d < axis) {
      outer *= x->shape[d];
    } else {
      inner *= x->shape[d];
      l.ndims[l.nrank++] = x->shape[d];
    }
  }
  if (outer * inner == 0) return NULL;
  int64_t vs[2] = {outer, inner};
  KILN_RETURN_IF_ERROR(nn_view(ctx, x, "xflat", 2, vs, &l.xv));
  KILN_RETURN_IF_ERROR(nn_view(ctx, y, "yflat", 2, vs, &l.yv));
  KILN_RETURN_IF_ERROR(ln_input(ctx, &l, 1, inner, &l.sv, &l.sraw));
  if (ctx->n_in > 2) KILN_RETURN_IF_ERROR(ln_input(ctx, &l, 2, inner, &l.bv, &l.braw));
  const tir_buffer_t *mo = NULL, *io = NULL;
  if (ctx->n_out > 1 && ctx->out[1]) KILN_RETURN_IF_ERROR(nn_view(ctx, ctx->out[1], "meanflat", 1, &outer, &mo));
  if (ctx->n_out > 2 && ctx->out[2]) KILN_RETURN_IF_ERROR(nn_view(ctx, ctx->out[2], "invflat", 1, &outer, &io));

  int64_t one = 1;
  l.mean = tir_buffer(t, "mean", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_buffer_t* inv = tir_buffer(t, "inv", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE);
  tir_var_t* vo = nn_var(&kb, "o");
  l.row = nn_v(&kb, vo);
  const tir_expr_t* z = nn_i(&kb, 0);
  const tir_stmt_t* items[7] = {NULL};
  items[0] = lane_reduce(&kb, l.mean, TIR_ADD, 0.0, inner, ln_x, &l);
  items[1] = tir_store(t, l.mean, NN_IDX(z), tir_bin(t, TIR_DIV, tir_load(t, l.mean, NN_IDX(z)),
                                                    nn_f(&kb, (double)inner)));
  items[2] = lane_reduce(&kb, inv, TIR_ADD, 0.0, inner, ln_dev2, &l);
  items[3] = tir_store(
      t, inv, NN_IDX(z),
      tir_bin(t, TIR_DIV, nn_f(&kb, 1.0),
              tir_call(t, TIR_SQRT, 1,
                       tir_add(t, tir_bin(t, TIR_DIV, tir_load(t, inv, NN_IDX(z)), nn_f(&kb, (double)inner)),
                               nn_f(&kb, eps)),
                       NULL, NULL)));
  l.inv = inv;
  items[4] = row_loop(&kb, inner, ln_out, &l);
  if (mo) items[5] = nn_stf(&kb, mo, NN_IDX(l.row), tir_load(t, l.mean, NN_IDX(z)));
  if (io) items[6] = nn_stf(&kb, io, NN_IDX(l.row), tir_load(t, inv, NN_IDX(z)));
  const tir_stmt_t* s = tir_alloc(t, l.mean, tir_alloc(t, inv, tir_seq(t, 7, items)));
  s = nn_for(&kb, vo, outer, s);
  if (outer > 1 && outer * inner >= 4096) nn_parallel(&kb, vo);
  return nn_emit(&kb, s);
}

/* ---- Softmax / LogSoftmax -------------------------------------------------------- */

typedef struct sm_s {
  const tir_buffer_t *xv, *mx;
  const tir_expr_t* row;
} sm_t;

static const tir_expr_t* sm_x(nn_kb_t* kb, const void* u, const tir_expr_t* i) {
  const sm_t* s = u;
  return nn_ldf(kb, s->xv, NN_IDX(s->row, i));
}

static const tir_expr_t* sm_exp(nn_kb_t* kb, const void* u, const tir_expr_t* i) {
  const sm_t* s = u;
  return tir_call(kb->t, TIR_EXP, 1,
                  tir_sub(kb->t, nn_ldf(kb, s->xv, NN_IDX(s->row, i)),
                          tir_load(kb->t, s->mx, NN_IDX(nn_i(kb, 0)))),
                  NULL, NULL);
}

static kiln_status_t softmax(kiln_lower_ctx_t* ctx, bool log_form) {
  const char* op = log_form ? "LogSoftmax" : "Softmax";
  const tir_buffer_t *x = ctx->in[0], *y = ctx->out[0];
  if (!x || !y) return kiln_make_status(KILN_INTERNAL, "%s: missing operand", op);
  const bool legacy = ctx->opset > 0 && ctx->opset < 13;
  int64_t axis;
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "axis", legacy ? 1 : -1, &axis));
  const int64_t r = x->rank, top = legacy ? r : r - 1;
  if (axis < -r || axis > top) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: axis %lld is out of range for rank %d", op,
                            (long long)axis, (int)r);
  }
  if (axis < 0) axis += r;
  int64_t outer = 1, n = 1, inner = 1;
  for (int32_t d = 0; d < r; ++d) {
    if (d < axis) outer *= x->shape[d];
    else if (d == axis || legacy) n *= x->shape[d];
    else inner *= x->shape[d];
  }
  if (outer * n * inner == 0) return NULL;
  const tir_buffer_t *xv, *yv;
  int64_t vs[3] = {outer, n, inner};
  const int32_t vr = inner == 1 ? 2 : 3;
  KILN_RETURN_IF_ERROR(nn_view(ctx, x, vr == 2 ? "xrows" : "xflat", vr, vs, &xv));
  KILN_RETURN_IF_ERROR(nn_view(ctx, y, vr == 2 ? "yrows" : "yflat", vr, vs, &yv));
  return nn_softmax_emit(ctx, xv, yv, outer, n, inner, log_form);
}

/* Softmax over contiguous rows of fewer than 64k f32 values (the common
 * case: logits, attention scores). Two passes read x, one writes y: the max
 * (32 lanes: two vectors, so two dependency chains), then y = exp(x - max)
 * stored and summed in the same loop, then y scaled by 1 / sum while the row
 * is still in L1. Each pass runs 32 lanes at a time and the rest (n % 32)
 * in pieces of 16, 8 and 4 lanes into the first lanes, so only n % 4
 * elements are scalar; the lanes are folded 32 -> 16 as vectors, then
 * across. The sums are lane-wise like nn_lane_reduce's (rows of 64k or more
 * keep its blocked form for accuracy). */
#define SMR_LANES 32

typedef struct smr_s {
  const tir_buffer_t *xv, *yv, *mx, *lanes;
  const tir_expr_t* row;
  const tir_expr_t* base; /* element of lane 0 */
  bool sum_pass;          /* false: max */
} smr_t;

/* Lane |l| takes element base + l. */
static const tir_stmt_t* smr_elem(nn_kb_t* kb, void* u, const tir_expr_t* l) {
  const smr_t* s = u;
  tir_ctx_t* t = kb->t;
  const tir_expr_t* e = nn_add(kb, s->base, l);
  const tir_expr_t* acc = tir_load(t, s->lanes, NN_IDX(l));
  const tir_expr_t* x = nn_ldf(kb, s->xv, NN_IDX(s->row, e));
  if (!s->sum_pass) return tir_store(t, s->lanes, NN_IDX(l), tir_bin(t, TIR_MAX, acc, x));
  const tir_expr_t* d = tir_sub(t, x, tir_load(t, s->mx, NN_IDX(nn_i(kb, 0))));
  const tir_stmt_t* st = tir_store(t, s->yv, NN_IDX(s->row, e), tir_call(t, TIR_EXP, 1, d, NULL, NULL));
  return tir_seq2(t, st, tir_store(t, s->lanes, NN_IDX(l), tir_add(t, acc, tir_load(t, s->yv, NN_IDX(s->row, e)))));
}

/* One pass over the row into the lanes, then folded into dst[0]. */
static const tir_stmt_t* smr_pass(nn_kb_t* kb, smr_t* s, int64_t n, const tir_buffer_t* dst, double ident) {
  tir_ctx_t* t = kb->t;
  const int64_t L = SMR_LANES, H = L / 2, full = n / L, rem = n % L;
  const tir_binop_t op = s->sum_pass ? TIR_ADD : TIR_MAX;
  const tir_expr_t* z = nn_i(kb, 0);
  const tir_stmt_t* items[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
  tir_var_t* vl = nn_var(kb, "rl");
  items[0] = nn_for(kb, vl, L, tir_store(t, s->lanes, NN_IDX(nn_v(kb, vl)), nn_f(kb, ident)));
  nn_vectorize(kb, vl);
  tir_var_t* vi = nn_var(kb, "ri");
  vl = nn_var(kb, "rl");
  s->base = nn_mulc(kb, nn_v(kb, vi), L);
  items[1] = nn_for(kb, vi, full, nn_for(kb, vl, L, smr_elem(kb, s, nn_v(kb, vl))));
  nn_vectorize(kb, vl);
  if (rem) {
    s->base = nn_i(kb, full * L);
    items[2] = nn_vec_run(kb, 0, rem, true, smr_elem, s);
  }
  /* lanes folded in halves as vectors down to 4, then across */
  for (int64_t h = H; h >= 4; h /= 2) {
    vl = nn_var(kb, "rl");
    const tir_expr_t* l = nn_v(kb, vl);
    items[3] = tir_seq2(t, items[3],
                        nn_for(kb, vl, h, tir_store(t, s->lanes, NN_IDX(l),
                                                    tir_bin(t, op, tir_load(t, s->lanes, NN_IDX(l)),
                                                            tir_load(t, s->lanes, NN_IDX(nn_addc(kb, l, h)))))));
    nn_vectorize(kb, vl);
  }
  items[4] = tir_store(t, dst, NN_IDX(z), tir_load(t, s->lanes, NN_IDX(z)));
  vl = nn_var(kb, "rl");
  const tir_expr_t* l = nn_addc(kb, nn_v(kb, vl), 1);
  items[5] = nn_for(kb, vl, 3,
                    tir_store(t, dst, NN_IDX(z), tir_bin(t, op, tir_load(t, dst, NN_IDX(z)), tir_load(t, s->lanes, NN_IDX(l)))));
  return tir_seq(t, 6, items);
}

static const tir_stmt_t* smr_scale(nn_kb_t* kb, void* u, const tir_expr_t* i) {
  const smr_t* s = u;
  tir_ctx_t* t = kb->t;
  return tir_store(t, s->yv, NN_IDX(s->row, i),
                   tir_mul(t, tir_load(t, s->yv, NN_IDX(s->row, i)), tir_load(t, s->mx, NN_IDX(nn_i(kb, 0)))));
}

/* The row body for row |o| of xv / yv ([outer, n], y f32). */
static const tir_stmt_t* smr_row(nn_kb_t* kb, const tir_buffer_t* xv, const tir_buffer_t* yv,
                                 const tir_expr_t* o, int64_t n) {
  tir_ctx_t* t = kb->t;
  const int64_t one = 1, L = SMR_LANES;
  smr_t s = {.xv = xv, .yv = yv, .row = o};
  s.mx = tir_buffer(t, "mx", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_buffer_t* sum = tir_buffer(t, "sum", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE);
  s.lanes = tir_buffer(t, "lanes", KILN_DTYPE_F32, 1, &L, TIR_SCOPE_PRIVATE);
  const tir_expr_t* z = nn_i(kb, 0);
  const tir_stmt_t* items[4];
  s.sum_pass = false;
  items[0] = smr_pass(kb, &s, n, s.mx, -INFINITY);
  s.sum_pass = true;
  items[1] = smr_pass(kb, &s, n, sum, 0.0);
  /* mx now holds 1 / sum for the scale pass */
  items[2] = tir_store(t, s.mx, NN_IDX(z), tir_bin(t, TIR_DIV, nn_f(kb, 1.0), tir_load(t, sum, NN_IDX(z))));
  items[3] = nn_vec_run(kb, 0, n, true, smr_scale, &s);
  return tir_alloc(t, s.mx, tir_alloc(t, sum, tir_alloc(t, s.lanes, tir_seq(t, 4, items))));
}

typedef struct sm_rows_s {
  const tir_buffer_t *xr, *yr, *mx, *sum;
  const tir_expr_t* o;
  bool log_form;
} sm_rows_t;

/* y = exp(x - max) / sum, or the log form (x - max - log(sum)) */
static const tir_stmt_t* sm_out(nn_kb_t* kb, void* u, const tir_expr_t* i) {
  const sm_rows_t* r = u;
  tir_ctx_t* t = kb->t;
  const tir_expr_t* z = nn_i(kb, 0);
  const tir_expr_t* d = tir_sub(t, nn_ldf(kb, r->xr, NN_IDX(r->o, i)), tir_load(t, r->mx, NN_IDX(z)));
  const tir_expr_t* v =
      r->log_form ? tir_sub(t, d, tir_call(t, TIR_LOG, 1, tir_load(t, r->sum, NN_IDX(z)), NULL, NULL))
                  : tir_bin(t, TIR_DIV, tir_call(t, TIR_EXP, 1, d, NULL, NULL), tir_load(t, r->sum, NN_IDX(z)));
  return nn_stf(kb, r->yr, NN_IDX(r->o, i), v);
}
/* y = exp(x - max) */
static const tir_stmt_t* sm_exp_row(nn_kb_t* kb, void* u, const tir_expr_t* i) {
  const sm_rows_t* r = u;
  tir_ctx_t* t = kb->t;
  const tir_expr_t* d = tir_sub(t, nn_ldf(kb, r->xr, NN_IDX(r->o, i)), tir_load(t, r->mx, NN_IDX(nn_i(kb, 0))));
  return tir_store(t, r->yr, NN_IDX(r->o, i), tir_call(t, TIR_EXP, 1, d, NULL, NULL));
}
/* y *= 1 / sum (the reciprocal in sum[0]) */
static const tir_stmt_t* sm_scale_row(nn_kb_t* kb, void* u, const tir_expr_t* i) {
  const sm_rows_t* r = u;
  tir_ctx_t* t = kb->t;
  return tir_store(t, r->yr, NN_IDX(r->o, i),
                   tir_mul(t, tir_load(t, r->yr, NN_IDX(r->o, i)), tir_load(t, r->sum, NN_IDX(nn_i(kb, 0)))));
}

/* The strided-axis Softmax of row |o| over columns |ib| + [0, ext) of the
 * inner extent (|ib| NULL: from 0): PRIVATE rows of ext for the max and the
 * sum, three passes over the axis, each vectorized along the columns. */
static const tir_stmt_t* sm_strided(nn_kb_t* kb, const tir_buffer_t* xv, const tir_buffer_t* yv, const tir_expr_t* o,
                                    const tir_expr_t* ib, int64_t n, int64_t ext, bool log_form) {
  tir_ctx_t* t = kb->t;
  const tir_buffer_t* mx = tir_buffer(t, "mx", KILN_DTYPE_F32, 1, &ext, TIR_SCOPE_PRIVATE);
  const tir_buffer_t* sum = tir_buffer(t, "sum", KILN_DTYPE_F32, 1, &ext, TIR_SCOPE_PRIVATE);
  const tir_stmt_t* items[4];
  tir_var_t *va, *vi;
  const tir_expr_t *a, *i, *c;
#define SM_LOOP(stmt_expr)                                                                            \
  (va = nn_var(kb, "a"), vi = nn_var(kb, "i"), a = nn_v(kb, va), i = nn_v(kb, vi),                   \
   c = ib ? nn_add(kb, ib, i) : i, nn_vectorize(kb, vi), nn_for(kb, va, n, nn_for(kb, vi, ext, (stmt_expr))))
  {
    tir_var_t* vj = nn_var(kb, "i");
    const tir_expr_t* j = nn_v(kb, vj);
    const tir_stmt_t* two[2] = {tir_store(t, mx, NN_IDX(j), nn_f(kb, -INFINITY)),
                                tir_store(t, sum, NN_IDX(j), nn_f(kb, 0.0))};
    items[0] = nn_for(kb, vj, ext, tir_seq(t, 2, two));
    nn_vectorize(kb, vj);
  }
  items[1] = SM_LOOP(tir_store(t, mx, NN_IDX(i),
                               tir_bin(t, TIR_MAX, tir_load(t, mx, NN_IDX(i)), nn_ldf(kb, xv, NN_IDX(o, a, c)))));
  items[2] = SM_LOOP(tir_store(
      t, sum, NN_IDX(i),
      tir_add(t, tir_load(t, sum, NN_IDX(i)),
              tir_call(t, TIR_EXP, 1, tir_sub(t, nn_ldf(kb, xv, NN_IDX(o, a, c)), tir_load(t, mx, NN_IDX(i))), NULL,
                       NULL))));
  const tir_expr_t* d;
  items[3] = SM_LOOP(nn_stf(
      kb, yv, NN_IDX(o, a, c),
      (d = tir_sub(t, nn_ldf(kb, xv, NN_IDX(o, a, c)), tir_load(t, mx, NN_IDX(i))),
       log_form ? tir_sub(t, d, tir_call(t, TIR_LOG, 1, tir_load(t, sum, NN_IDX(i)), NULL, NULL))
                : tir_bin(t, TIR_DIV, tir_call(t, TIR_EXP, 1, d, NULL, NULL), tir_load(t, sum, NN_IDX(i))))));
#undef SM_LOOP
  return tir_alloc(t, mx, tir_alloc(t, sum, tir_seq(t, 4, items)));
}

kiln_status_t nn_softmax_emit(kiln_lower_ctx_t* ctx, const tir_buffer_t* xv, const tir_buffer_t* yv,
                              int64_t outer, int64_t n, int64_t inner, bool log_form) {
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  tir_ctx_t* t = kb.t;
  tir_var_t* vo = nn_var(&kb, "o");
  const tir_expr_t* o = nn_v(&kb, vo);
  const tir_expr_t* z = nn_i(&kb, 0);
  const tir_stmt_t* body;
  /* the CPU's vector rows (GPU dialects keep the form below) */
  const bool plain = ctx->plan && ctx->plan->plain_loops;
  if (inner == 1 && !log_form && yv->dtype == KILN_DTYPE_F32 && n >= 16 && n < 65536 && !plain &&
      ctx->target == KILN_TARGET_CLASS_CPU) {
    body = smr_row(&kb, xv, yv, o, n);
  } else if (inner == 1) {
    /* contiguous rows: lane reductions */
    const tir_buffer_t *xr = xv, *yr = yv;
    int64_t one = 1;
    sm_t s = {.xv = xr, .row = o};
    s.mx = tir_buffer(t, "mx", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE);
    const tir_buffer_t* sum = tir_buffer(t, "sum", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE);
    sm_rows_t rows = {xr, yr, s.mx, sum, o, log_form};
    const tir_stmt_t* items[4] = {lane_reduce(&kb, s.mx, TIR_MAX, -INFINITY, n, sm_x, &s), NULL, NULL, NULL};
    /* Plans whose rows are vec4 texels (Vulkan: ew_lanes) take the sum of
     * exp from x and store y once, exp twice an element: lavapipe's image
     * stores and loads of y cost more than the second exp (kiln bench
     * --target vulkan --suite softmax, 4 alternated rounds at load 9-10:
     * 8192x1000 33-38 -> 15-28 ms, 65536x128 33-40 -> 12-28 ms); on PoCL
     * the form below was as fast or faster (7-13 vs 8-22 ms) */
    const bool exp_twice = ctx->target == KILN_TARGET_CLASS_GPU && ctx->ew_lanes > 1;
    if (log_form || yr->dtype != KILN_DTYPE_F32 || exp_twice) {
      items[1] = lane_reduce(&kb, sum, TIR_ADD, 0.0, n, sm_exp, &s);
      items[2] = row_loop(&kb, n, sm_out, &rows);
    } else {
      /* exp once per element: stored into the row of y, summed from there
       * and scaled by 1 / sum (the row is in L1 for the last two passes) */
      items[1] = row_loop(&kb, n, sm_exp_row, &rows);
      sm_t ys = {.xv = yr, .row = o};
      items[2] = lane_reduce(&kb, sum, TIR_ADD, 0.0, n, sm_x, &ys);
      const tir_expr_t* r = tir_bin(t, TIR_DIV, nn_f(&kb, 1.0), tir_load(t, sum, NN_IDX(z)));
      items[3] = tir_seq2(t, tir_store(t, sum, NN_IDX(z), r), row_loop(&kb, n, sm_scale_row, &rows));
    }
    body = tir_alloc(t, s.mx, tir_alloc(t, sum, tir_seq(t, 4, items)));
  } else if (ctx->target == KILN_TARGET_CLASS_GPU && (ctx->ew_lanes > 1 || ctx->loop_limit > 0)) {
    /* strided axis on Vulkan (lanes) or a device with a loop limit: an
     * invocation per L adjacent columns of the inner extent (L the plan's
     * lanes where they divide it: vec4 texels on Vulkan; else 1), looping
     * over the softmax axis; the CPU form below gives an invocation a whole
     * [n][inner] slab (2 x 50 x 4096 over axis 1: 618,646 loop iterations,
     * refused by lavapipe's limit). PoCL keeps that form: over axis 1 of
     * 4 x 21 x 64 x 64 it ran 0.9 ms, this one 24 ms */
    const int64_t L = ctx->ew_lanes > 1 && inner % ctx->ew_lanes == 0 ? ctx->ew_lanes : 1, nb = inner / L;
    tir_var_t* vq = nn_var(&kb, "q");
    const tir_expr_t* q = nn_v(&kb, vq);
    /* q = row * nb + column block */
    const tir_expr_t* oq = outer == 1 ? nn_i(&kb, 0) : nb > 1 ? nn_divc(&kb, q, nb) : q;
    const tir_expr_t* ib = nb == 1 ? NULL : nn_mulc(&kb, outer > 1 ? nn_modc(&kb, q, nb) : q, L);
    const tir_stmt_t* s = nn_for(&kb, vq, outer * nb, sm_strided(&kb, xv, yv, oq, ib, n, L, log_form));
    if (outer * nb > 1) nn_parallel(&kb, vq);
    return nn_emit(&kb, s);
  } else {
    /* strided axis: PRIVATE rows over the inner extent */
    body = sm_strided(&kb, xv, yv, o, NULL, n, inner, log_form);
  }
  const tir_stmt_t* s = nn_for(&kb, vo, outer, body);
  if (outer > 1 && outer * n * inner >= 4096) nn_parallel(&kb, vo);
  return nn_emit(&kb, s);
}

kiln_status_t kiln_lower_nn_softmax(kiln_lower_ctx_t* ctx) { return softmax(ctx, false); }
kiln_status_t kiln_lower_nn_log_softmax(kiln_lower_ctx_t* ctx) { return softmax(ctx, true); }
