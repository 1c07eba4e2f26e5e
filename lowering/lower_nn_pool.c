/* MaxPool (with the optional Indices output), AveragePool, LpPool and
 * GlobalAveragePool / GlobalMaxPool.
 *
 * Window pools run one output row at a time (PARALLEL over the N*C planes):
 * a PRIVATE accumulator row is updated tap by tap, each tap as a loop over
 * the output row split into the interior, where every tap lies inside the
 * input (no guard, a plain vector loop for stride 1), and the two borders,
 * where the input column is clamped and the tap masked with a select.
 * Taps whose input row or depth is outside the input are skipped by an if
 * on the row (the load index stays clamped, so it is in bounds regardless).
 *
 * MaxPool keeps the reference's tie and NaN rules exactly: the first valid
 * tap of a window is always taken, later ones when strictly greater (a
 * per-element "seen" flag makes that a select, so it still vectorizes).
 * AveragePool divides by the full kernel size with count_include_pad (as the
 * reference and the ONNX tests do, even for taps past the end padding) and
 * by the number of valid taps otherwise (0/0 = NaN for an all-padding
 * window, as in the reference). LpPool sums |x|^p over the valid taps and
 * takes the p-th root.
 */
#include <math.h>
#include <string.h>

#include "lowering/lower_nn_impl.h"

typedef enum { POOL_MAX, POOL_AVG, POOL_LP } pool_kind_t;

typedef struct pl_s {
  pool_kind_t kind;
  const tir_buffer_t *x, *y, *ind;
  int32_t nsp;
  nn_axis_t a3[3];
  int64_t planes;
  bool include_pad;
  int64_t storage_order;
  int64_t lp; /* LpPool's p */
  /* PRIVATE rows of one output row */
  const tir_buffer_t *acc, *aux, *at; /* aux: seen flag (max) or count (avg) */
} pl_t;

static void pad3(int32_t nsp, const nn_axis_t* ax, nn_axis_t* a3) {
  for (int32_t d = 0; d < 3; ++d) {
    int32_t i = d - (3 - nsp);
    a3[d] = i < 0 ? (nn_axis_t){.in = 1, .out = 1, .k = 1, .s = 1, .d = 1, .p = 0} : ax[i];
  }
}

static void sp_idx(int32_t nsp, const tir_expr_t* n, const tir_expr_t* c,
                   const tir_expr_t* const* s3, const tir_expr_t** idx) {
  idx[0] = n;
  idx[1] = c;
  for (int32_t i = 0; i < nsp; ++i) idx[2 + i] = s3[3 - nsp + i];
}

/* Tap update of element ow (I64 expr, position in the row) for input
 * coordinates (id, ih, iw); |valid| NULL when the tap is known valid. */
static const tir_stmt_t* tap_update(nn_kb_t* kb, const pl_t* pl, const tir_expr_t* n,
                                    const tir_expr_t* c, const tir_expr_t* ow,
                                    const tir_expr_t* const* i3, const tir_expr_t* valid) {
  tir_ctx_t* t = kb->t;
  const tir_expr_t* xi[KILN_MAX_RANK];
  sp_idx(pl->nsp, n, c, i3, xi);
  const tir_expr_t* v = nn_ldf(kb, pl->x, xi);
  const tir_expr_t* a = tir_load(t, pl->acc, NN_IDX(ow));
  const tir_expr_t* x = tir_load(t, pl->aux, NN_IDX(ow));
  const tir_expr_t* one = nn_f(kb, 1.0);
  if (pl->kind != POOL_MAX) {
    if (pl->kind == POOL_LP) {
      const tir_expr_t* av = tir_call(t, TIR_FABS, 1, v, NULL, NULL);
      v = pl->lp == 1 ? av : pl->lp == 2 ? tir_mul(t, v, v)
                                         : tir_call(t, TIR_POW, 2, av, nn_f(kb, (double)pl->lp), NULL);
    }
    const tir_expr_t* add = valid ? tir_select(t, valid, v, nn_f(kb, 0.0)) : v;
    const tir_expr_t* inc = valid ? tir_select(t, valid, one, nn_f(kb, 0.0)) : one;
    const tir_stmt_t* s0 = tir_store(t, pl->acc, NN_IDX(ow), tir_add(t, a, add));
    const tir_stmt_t* s1 =
        pl->include_pad ? NULL : tir_store(t, pl->aux, NN_IDX(ow), tir_add(t, x, inc));
    return tir_seq2(t, s0, s1);
  }
  /* max: take = valid && (!seen || v > acc) */
  const tir_expr_t* take =
      tir_bin(t, TIR_OR, tir_bin(t, TIR_EQ, x, nn_f(kb, 0.0)), tir_bin(t, TIR_GT, v, a));
  if (valid) take = tir_bin(t, TIR_AND, valid, take);
  /* The index first: |take| reads acc and seen, which the others update. */
  const tir_stmt_t* items[3];
  items[0] = NULL;
  items[1] = tir_store(t, pl->acc, NN_IDX(ow), tir_select(t, take, v, a));
  items[2] = tir_store(t, pl->aux, NN_IDX(ow), valid ? tir_select(t, valid, one, x) : one);
  if (pl->at) {
    /* index of the tap in the input plane (storage_order 1: column major) */
    const nn_axis_t* a3 = pl->a3;
    const tir_expr_t* pos;
    if (pl->storage_order) {
      pos = nn_add(kb, i3[0], nn_mulc(kb, nn_add(kb, i3[1], nn_mulc(kb, i3[2], a3[1].in)), a3[0].in));
    } else {
      pos = nn_add(kb, nn_mulc(kb, nn_add(kb, nn_mulc(kb, i3[0], a3[1].in), i3[1]), a3[2].in), i3[2]);
    }
    const tir_expr_t* plane = nn_add(kb, nn_mulc(kb, n, pl->x->shape[1]), c);
    pos = nn_add(kb, pos, nn_mulc(kb, plane, a3[0].in * a3[1].in * a3[2].in));
    items[0] = tir_store(t, pl->at, NN_IDX(ow),
                         tir_select(t, take, pos, tir_load(t, pl->at, NN_IDX(ow))));
  }
  return tir_seq(t, 3, items);
}

/* Everything for output element ow of row (n, c, od, oh): init, every tap
 * in order (masked when |guarded|), finalize. The running values live in
 * PRIVATE rows indexed by ow, so a vector loop over ow keeps them in
 * registers across the taps. */
typedef struct pe_s {
  pl_t* pl;
  const tir_expr_t *n, *c, *od, *oh;
  bool rows_guarded, cols_guarded;
} pe_t;

/* One tap of output element ow: the input position of tap |kk| (per axis,
 * constant or a loop variable), clamped and masked where the element's
 * window may leave the input. */
static const tir_stmt_t* pool_tap(nn_kb_t* kb, const pe_t* e, const tir_expr_t* ow,
                                  const tir_expr_t* const* o3, const tir_expr_t* const* kk) {
  const pl_t* pl = e->pl;
  tir_ctx_t* t = kb->t;
  const nn_axis_t* a3 = pl->a3;
  const tir_expr_t* i3[3];
  const tir_expr_t* valid = NULL;
  for (int32_t a = 0; a < 3; ++a) {
    const tir_expr_t* x =
        kk[a]->kind == TIR_INT
            ? nn_addc(kb, nn_mulc(kb, o3[a], a3[a].s), kk[a]->u.i * a3[a].d - a3[a].p)
            : nn_add(kb, nn_addc(kb, nn_mulc(kb, o3[a], a3[a].s), -a3[a].p), nn_mulc(kb, kk[a], a3[a].d));
    if (a < 2 ? e->rows_guarded : e->cols_guarded) {
      const tir_expr_t* ok = tir_bin(t, TIR_AND, tir_bin(t, TIR_GE, x, nn_i(kb, 0)),
                                     tir_bin(t, TIR_LT, x, nn_i(kb, a3[a].in)));
      valid = valid ? tir_bin(t, TIR_AND, valid, ok) : ok;
      x = nn_clamp(kb, x, 0, a3[a].in - 1);
    }
    i3[a] = x;
  }
  return tap_update(kb, pl, e->n, e->c, ow, i3, valid);
}

/* Windows of up to this many taps are unrolled (the running values stay in
 * registers across them); larger ones (a 60x80 MaxPool in the onnx suites)
 * loop over the taps, since every unrolled tap nests one statement deeper. */
#define POOL_MAX_UNROLLED_TAPS 64

static bool pool_taps_looped(const pl_t* pl) {
  return pl->a3[0].k * pl->a3[1].k * pl->a3[2].k > POOL_MAX_UNROLLED_TAPS;
}

/* The taps as three serial loops, in the unrolled order (row-major over
 * the window, which MaxPool's first-maximum index relies on). */
static const tir_stmt_t* pool_tap_loops(nn_kb_t* kb, const pe_t* e, const tir_expr_t* ow,
                                        const tir_expr_t* const* o3) {
  static const char* const names[3] = {"kd", "kh", "kw"};
  tir_var_t* v[3];
  const tir_expr_t* kk[3];
  for (int32_t a = 0; a < 3; ++a) {
    v[a] = nn_var(kb, names[a]);
    kk[a] = nn_v(kb, v[a]);
  }
  const tir_stmt_t* s = pool_tap(kb, e, ow, o3, kk);
  for (int32_t a = 2; a >= 0; --a) s = nn_for(kb, v[a], e->pl->a3[a].k, s);
  return s;
}

static const tir_stmt_t* pool_elem(nn_kb_t* kb, void* u, const tir_expr_t* ow) {
  const pe_t* e = u;
  const pl_t* pl = e->pl;
  tir_ctx_t* t = kb->t;
  const nn_axis_t* a3 = pl->a3;
  const tir_stmt_t* body = NULL;
  body = tir_seq2(t, body, tir_store(t, pl->acc, NN_IDX(ow),
                                     nn_f(kb, pl->kind == POOL_MAX ? -INFINITY : 0.0)));
  body = tir_seq2(t, body, tir_store(t, pl->aux, NN_IDX(ow), nn_f(kb, 0.0)));
  if (pl->at) body = tir_seq2(t, body, tir_store(t, pl->at, NN_IDX(ow), nn_i(kb, -1)));
  const tir_expr_t* o3[3] = {e->od, e->oh, ow};
  if (pool_taps_looped(pl)) {
    body = tir_seq2(t, body, pool_tap_loops(kb, e, ow, o3));
  } else {
    for (int64_t kd = 0; kd < a3[0].k; ++kd)
      for (int64_t kh = 0; kh < a3[1].k; ++kh)
        for (int64_t kw = 0; kw < a3[2].k; ++kw) {
          const tir_expr_t* kk[3] = {nn_i(kb, kd), nn_i(kb, kh), nn_i(kb, kw)};
          body = tir_seq2(t, body, pool_tap(kb, e, ow, o3, kk));
        }
  }
  const tir_expr_t* yi[KILN_MAX_RANK];
  sp_idx(pl->nsp, e->n, e->c, o3, yi);
  const tir_expr_t* r = tir_load(t, pl->acc, NN_IDX(ow));
  if (pl->kind == POOL_LP && pl->lp > 1) {
    r = pl->lp == 2 ? tir_call(t, TIR_SQRT, 1, r, NULL, NULL)
                    : tir_call(t, TIR_POW, 2, r, nn_f(kb, 1.0 / (double)pl->lp), NULL);
  }
  if (pl->kind == POOL_AVG) {
    double taps = (double)a3[0].k * (double)a3[1].k * (double)a3[2].k;
    r = tir_bin(t, TIR_DIV, r, pl->include_pad ? nn_f(kb, taps) : tir_load(t, pl->aux, NN_IDX(ow)));
  }
  body = tir_seq2(t, body, nn_stf(kb, pl->y, yi, r));
  if (pl->ind) {
    body = tir_seq2(t, body, tir_store(t, pl->ind, yi,
                                       tir_cast(t, pl->ind->dtype, tir_load(t, pl->at, NN_IDX(ow)))));
  }
  return body;
}

/* All output rows of plane (n, c): row segments (interior rows need no
 * row mask) times column segments (the interior runs as vector code). */
static const tir_stmt_t* pool_plane(nn_kb_t* kb, pl_t* pl, const tir_expr_t* n,
                                    const tir_expr_t* c) {
  const nn_axis_t* a3 = pl->a3;
  int64_t lo[3], hi[3];
  for (int32_t a = 0; a < 3; ++a) nn_axis_interior(&a3[a], &lo[a], &hi[a]);
  pe_t e = {.pl = pl, .n = n, .c = c};
  const int64_t segd[4] = {0, lo[0], hi[0], a3[0].out}, segh[4] = {0, lo[1], hi[1], a3[1].out};
  const int64_t segw[4] = {0, lo[2], hi[2], a3[2].out};
  const tir_stmt_t* body = NULL;
  for (int sd = 0; sd < 3; ++sd)
    for (int sh = 0; sh < 3; ++sh) {
      int64_t nd = segd[sd + 1] - segd[sd], nh = segh[sh + 1] - segh[sh];
      if (nd <= 0 || nh <= 0) continue;
      tir_var_t* vd = nn_var(kb, "od");
      tir_var_t* vh = nn_var(kb, "oh");
      e.od = nn_addc(kb, nn_v(kb, vd), segd[sd]);
      e.oh = nn_addc(kb, nn_v(kb, vh), segh[sh]);
      e.rows_guarded = sd != 1 || sh != 1;
      const tir_stmt_t* row = NULL;
      for (int sw = 0; sw < 3; ++sw) {
        int64_t nw = segw[sw + 1] - segw[sw];
        if (nw <= 0) continue;
        e.cols_guarded = sw != 1;
        row = tir_seq2(kb->t, row,
                       nn_vec_run(kb, segw[sw], nw, sw == 1 && !pl->at && !pool_taps_looped(pl), pool_elem, &e));
      }
      body = tir_seq2(kb->t, body, nn_for(kb, vd, nd, nn_for(kb, vh, nh, row)));
    }
  const tir_stmt_t* s = body;
  if (pl->at) s = tir_alloc(kb->t, pl->at, s);
  s = tir_alloc(kb->t, pl->aux, s);
  return tir_alloc(kb->t, pl->acc, s);
}

static kiln_status_t pool_lower(kiln_lower_ctx_t* ctx, pool_kind_t kind) {
  const char* op = kind == POOL_MAX ? "MaxPool" : kind == POOL_AVG ? "AveragePool" : "LpPool";
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  pl_t pl;
  memset(&pl, 0, sizeof pl);
  pl.kind = kind;
  pl.x = ctx->in[0], pl.y = ctx->out[0];
  pl.ind = kind == POOL_MAX && ctx->n_out > 1 ? ctx->out[1] : NULL;
  if (!pl.x || !pl.y) return kiln_make_status(KILN_INTERNAL, "%s: missing operand", op);
  pl.nsp = pl.x->rank - 2;
  if (pl.nsp < 1 || pl.nsp > 3) {
    return kiln_make_status(KILN_UNSUPPORTED, "%s: rank %d is not supported (1 to 3 spatial dims)",
                            op, (int)pl.x->rank);
  }
  int64_t ceil_mode = 0, cip = 0;
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "ceil_mode", 0, &ceil_mode));
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "count_include_pad", 0, &cip));
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "storage_order", 0, &pl.storage_order));
  /* LpPool sums every tap, padding as zeros: no count to keep */
  pl.include_pad = cip != 0 || kind == POOL_LP;
  if (kind == POOL_LP) KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "p", 2, &pl.lp));
  nn_axis_t ax[3];
  KILN_RETURN_IF_ERROR(nn_window(ctx->node, op, pl.nsp, pl.x->shape + 2, pl.y->shape + 2, NULL,
                                 ceil_mode != 0, ax));
  pad3(pl.nsp, ax, pl.a3);
  pl.planes = pl.x->shape[0] * pl.x->shape[1];
  if (tir_buffer_numel(pl.y) == 0) return NULL;
  const int64_t Wo = pl.a3[2].out;
  pl.acc = tir_buffer(kb.t, "acc", KILN_DTYPE_F32, 1, &Wo, TIR_SCOPE_PRIVATE);
  pl.aux = tir_buffer(kb.t, pl.kind == POOL_MAX ? "seen" : "cnt", KILN_DTYPE_F32, 1, &Wo,
                      TIR_SCOPE_PRIVATE);
  if (pl.ind) pl.at = tir_buffer(kb.t, "at", KILN_DTYPE_I64, 1, &Wo, TIR_SCOPE_PRIVATE);
  tir_var_t* vnc = nn_var(&kb, "nc");
  const tir_expr_t* nc = nn_v(&kb, vnc);
  const int64_t C = pl.x->shape[1];
  const tir_stmt_t* s = pool_plane(&kb, &pl, nn_divc(&kb, nc, C), nn_modc(&kb, nc, C));
  s = nn_for(&kb, vnc, pl.planes, s);
  if (pl.planes > 1) nn_parallel(&kb, vnc);
  return nn_emit(&kb, s);
}

kiln_status_t kiln_lower_nn_maxpool(kiln_lower_ctx_t* ctx) {
  if (ctx->in_block && ctx->in_block[0] > 0) return nn_pool_blocked(ctx, true);
  return pool_lower(ctx, POOL_MAX);
}
kiln_status_t kiln_lower_nn_avgpool(kiln_lower_ctx_t* ctx) {
  if (ctx->in_block && ctx->in_block[0] > 0) return nn_pool_blocked(ctx, false);
  return pool_lower(ctx, POOL_AVG);
}
kiln_status_t kiln_lower_nn_lppool(kiln_lower_ctx_t* ctx) { return pool_lower(ctx, POOL_LP); }

/* ---- GlobalAveragePool, GlobalMaxPool ------------------------------------ */

typedef struct gp_s {
  const tir_buffer_t* xv;
  const tir_expr_t* p;
} gp_t;

static const tir_expr_t* gp_val(nn_kb_t* kb, const void* u, const tir_expr_t* i) {
  const gp_t* g = u;
  return nn_ldf(kb, g->xv, NN_IDX(g->p, i));
}

/* Each (n, c) plane reduced as one row by nn_lane_reduce (16 lanes, blocked
 * past 64k), in parallel over planes. */
static kiln_status_t global_pool(kiln_lower_ctx_t* ctx, const char* op, bool is_max) {
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  const tir_buffer_t *x = ctx->in[0], *y = ctx->out[0];
  if (!x || !y || x->rank < 3) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: input must have rank >= 3", op);
  }
  tir_ctx_t* t = kb.t;
  const int64_t P = x->shape[0] * x->shape[1];
  int64_t plane = 1;
  for (int32_t i = 2; i < x->rank; ++i) plane *= x->shape[i];
  if (P == 0) return NULL;
  gp_t g = {NULL, NULL};
  const tir_buffer_t* yv;
  int64_t xs[2] = {P, plane}, ys[1] = {P}, one = 1;
  KILN_RETURN_IF_ERROR(nn_view(ctx, x, "xflat", 2, xs, &g.xv));
  KILN_RETURN_IF_ERROR(nn_view(ctx, y, "yflat", 1, ys, &yv));
  const tir_buffer_t* acc = tir_buffer(t, "acc", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE);
  tir_var_t* vp = nn_var(&kb, "p");
  g.p = nn_v(&kb, vp);
  const tir_stmt_t* red = nn_lane_reduce(&kb, acc, is_max ? TIR_MAX : TIR_ADD,
                                         nn_f(&kb, is_max ? -INFINITY : 0.0), plane, gp_val, &g);
  const tir_expr_t* v = tir_load(t, acc, NN_IDX(nn_i(&kb, 0)));
  if (!is_max) v = tir_bin(t, TIR_DIV, v, nn_f(&kb, (double)plane));
  const tir_stmt_t* s = nn_for(&kb, vp, P, tir_alloc(t, acc, tir_seq2(t, red, nn_stf(&kb, yv, NN_IDX(g.p), v))));
  if (P > 1 && P * plane >= 4096) nn_parallel(&kb, vp);
  return nn_emit(&kb, s);
}

kiln_status_t kiln_lower_nn_global_avgpool(kiln_lower_ctx_t* ctx) {
  if (ctx->in_block && ctx->in_block[0] > 0) return nn_global_avgpool_blocked(ctx);
  return global_pool(ctx, "GlobalAveragePool", false);
}
kiln_status_t kiln_lower_nn_global_maxpool(kiln_lower_ctx_t* ctx) {
  return global_pool(ctx, "GlobalMaxPool", true);
}
