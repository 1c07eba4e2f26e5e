/* ReduceMean, ReduceSum and ReduceMax.
 *
 * The axes (attribute, or a constant input from ReduceSum-13 / ReduceMean-18
 * / ReduceMax-18 on) split the input dims into runs of kept and reduced
 * dims; size-1 dims are dropped and each run is merged into one dim, so the
 * kernel works on a flat view such as [kept][reduced] or
 * [kept][reduced][kept]. When the last run is reduced, every output element
 * reduces a contiguous row (16 lanes at a time for f32, nn_lane_reduce);
 * when it is kept, a PRIVATE row of that extent accumulates and the loop
 * along it vectorizes. A row of 64k elements or more is reduced in blocks
 * by two kernels (reduce_blocked: accurate and parallel). Floats accumulate
 * in f32 (the reference uses double: the difference is fp32 reassociation
 * error), integers in i64 wrapping like
 * the reference; Mean divides by the group size (0/0 = NaN for floats, 0 for
 * integers, as in the reference), Max starts from -inf / the dtype's lowest.
 * noop_with_empty_axes with no axes aliases the output to the input.
 */
#include <math.h>
#include <string.h>

#include "lowering/lower_nn_impl.h"

typedef enum { RED_MEAN, RED_SUM, RED_MAX } red_kind_t;

typedef struct rd_s {
  const tir_buffer_t* xv;
  int32_t ng;
  int64_t gdim[KILN_MAX_RANK];
  bool gred[KILN_MAX_RANK];
  const tir_expr_t* gidx[KILN_MAX_RANK]; /* loop index per group (last: set by the row) */
  kiln_dtype_t acc_t;
} rd_t;

static const tir_expr_t* rd_val(nn_kb_t* kb, const rd_t* r, const tir_expr_t* const* idx) {
  const tir_expr_t* v = tir_load(kb->t, r->xv, idx);
  return tir_cast(kb->t, r->acc_t, v);
}

static const tir_expr_t* rd_row(nn_kb_t* kb, const void* u, const tir_expr_t* i) {
  const rd_t* r = u;
  const tir_expr_t* idx[KILN_MAX_RANK];
  for (int32_t g = 0; g < r->ng; ++g) idx[g] = g == r->ng - 1 ? i : r->gidx[g];
  return rd_val(kb, r, idx);
}

static const tir_expr_t* lowest(nn_kb_t* kb, kiln_dtype_t xt, kiln_dtype_t acc_t) {
  if (acc_t == KILN_DTYPE_F32 || acc_t == KILN_DTYPE_F64) return tir_const(kb->t, acc_t, -INFINITY);
  switch (xt) {
    case KILN_DTYPE_I8: return nn_i(kb, -128);
    case KILN_DTYPE_U8:
    case KILN_DTYPE_BOOL: return nn_i(kb, 0);
    case KILN_DTYPE_I32: return nn_i(kb, INT32_MIN);
    default: return nn_i(kb, INT64_MIN);
  }
}

/* ---- long rows: two kernels over blocks ------------------------------------
 *
 * One accumulator per lane summing a whole row loses everything past 2^24
 * times the lane's element size (a sum of 7e8 ones came out 2.7e8) and, on a
 * GPU, runs in one work-item. A row of at least SPLIT_MIN elements is cut
 * into blocks of B (about sqrt(row), a multiple of 256, at least 4096): the
 * first kernel reduces every (row, block) pair into a workspace in parallel,
 * the second reduces each row's partials and the row's tail. Each level adds
 * about sqrt(row)/16 values per lane, so the error grows with sqrt(row) terms
 * instead of row terms, and one work-item never loops over more than about
 * sqrt(row) elements. */
enum { SPLIT_MIN = 65536 };

typedef struct blk_s {
  const rd_t* r;
  const tir_expr_t* row; /* kept index (NULL: one row) */
  const tir_expr_t* base;
  const tir_buffer_t* part;
} blk_t;

static const tir_expr_t* blk_x(nn_kb_t* kb, const void* u, const tir_expr_t* i) {
  const blk_t* b = u;
  const tir_expr_t* idx[2];
  int32_t n = 0;
  if (b->row) idx[n++] = b->row;
  idx[n++] = nn_add(kb, b->base, i);
  return rd_val(kb, b->r, idx);
}

static const tir_expr_t* blk_part(nn_kb_t* kb, const void* u, const tir_expr_t* i) {
  const blk_t* b = u;
  return tir_load(kb->t, b->part, NN_IDX(nn_add(kb, b->base, i)));
}

static kiln_status_t reduce_blocked(nn_kb_t* kb, const rd_t* r, const tir_buffer_t* yv, red_kind_t kind,
                                    tir_binop_t bop, const tir_expr_t* ident) {
  tir_ctx_t* t = kb->t;
  const int64_t R = r->gdim[r->ng - 1], rows = r->ng == 2 ? r->gdim[0] : 1;
  int64_t B = 256;
  while (B * B < R) B += 256;
  if (B < 4096) B = 4096;
  const int64_t P = R / B, tail = R - P * B, np = rows * P;
  const tir_buffer_t* part;
  KILN_RETURN_IF_ERROR(kiln_lower_temp(kb->ctx, "part", r->acc_t, 1, &np, &part));
  const int64_t one = 1;
  const tir_expr_t* z = nn_i(kb, 0);
  /* kernel 1: part[q] for q = row * P + block, in parallel over q */
  {
    tir_var_t* vq = nn_var(kb, "q");
    const tir_expr_t* q = nn_v(kb, vq);
    const tir_buffer_t* acc = tir_buffer(t, "acc", r->acc_t, 1, &one, TIR_SCOPE_PRIVATE);
    blk_t b = {r, r->ng == 2 ? nn_divc(kb, q, P) : NULL, nn_mulc(kb, nn_modc(kb, q, P), B), NULL};
    const tir_stmt_t* body = tir_seq2(t, nn_lane_reduce(kb, acc, bop, ident, B, blk_x, &b),
                                      tir_store(t, part, NN_IDX(q), tir_load(t, acc, NN_IDX(z))));
    const tir_stmt_t* s = nn_for(kb, vq, np, tir_alloc(t, acc, body));
    nn_parallel(kb, vq);
    KILN_RETURN_IF_ERROR(nn_emit(kb, s));
  }
  /* kernel 2: per row, the partials, then the tail */
  tir_var_t* vk = nn_var(kb, "k");
  const tir_expr_t* k = rows > 1 ? nn_v(kb, vk) : z;
  const tir_buffer_t* acc = tir_buffer(t, "acc", r->acc_t, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_buffer_t* rest = tir_buffer(t, "rest", r->acc_t, 1, &one, TIR_SCOPE_PRIVATE);
  blk_t bp = {r, NULL, nn_mulc(kb, k, P), part};
  const tir_stmt_t* items[3] = {nn_lane_reduce(kb, acc, bop, ident, P, blk_part, &bp), NULL, NULL};
  if (tail) {
    blk_t bt = {r, r->ng == 2 ? k : NULL, nn_i(kb, P * B), NULL};
    const tir_stmt_t* ts = tir_seq2(
        t, nn_lane_reduce(kb, rest, bop, ident, tail, blk_x, &bt),
        tir_store(t, acc, NN_IDX(z), tir_bin(t, bop, tir_load(t, acc, NN_IDX(z)), tir_load(t, rest, NN_IDX(z)))));
    items[1] = tir_alloc(t, rest, ts);
  }
  const tir_expr_t* v = tir_load(t, acc, NN_IDX(z));
  if (kind == RED_MEAN) v = tir_bin(t, TIR_DIV, v, tir_const(t, r->acc_t, (double)R));
  items[2] = tir_store(t, yv, NN_IDX(k), tir_cast(t, yv->dtype, v));
  const tir_stmt_t* s = tir_alloc(t, acc, tir_seq(t, 3, items));
  if (rows > 1) {
    s = nn_for(kb, vk, rows, s);
    if (rows * P >= 256) nn_parallel(kb, vk);
  }
  return nn_emit(kb, s);
}

static kiln_status_t reduce(kiln_lower_ctx_t* ctx, red_kind_t kind) {
  const char* op = kind == RED_MEAN ? "ReduceMean" : kind == RED_SUM ? "ReduceSum" : "ReduceMax";
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  tir_ctx_t* t = kb.t;
  const tir_buffer_t *x = ctx->in[0], *y = ctx->out[0];
  if (!x || !y) return kiln_make_status(KILN_INTERNAL, "%s: missing operand", op);
  int64_t keep = 1, noop = 0;
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "keepdims", 1, &keep));
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "noop_with_empty_axes", 0, &noop));
  const bool from_input = kind == RED_SUM ? ctx->opset >= 13 : ctx->opset >= 18;
  int64_t axes[KILN_MAX_RANK];
  int64_t count = 0;
  if (from_input && ctx->n_in > 1 && ctx->in[1]) {
    /* An empty axes input is empty whatever its (run-time) values. */
    if (tir_buffer_numel(ctx->in[1]) > 0) {
      if (!nn_is_const(ctx, 1)) {
        return kiln_make_status(KILN_UNSUPPORTED, "%s: axes must be a compile-time constant", op);
      }
      const kiln_array_t* a = &ctx->in_tensor[1]->value;
      count = kiln_array_numel(a);
      if (count > KILN_MAX_RANK) {
        return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: %lld axes", op, (long long)count);
      }
      for (int64_t i = 0; i < count; ++i) axes[i] = kiln_load_i64(a->dtype, a->data, (size_t)i);
    }
  } else if (!from_input) {
    const int64_t* v = NULL;
    int64_t n = -1;
    KILN_RETURN_IF_ERROR(kiln_attr_ints(ctx->node, "axes", &v, &n));
    if (n > KILN_MAX_RANK) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: %lld axes", op, (long long)n);
    for (int64_t i = 0; i < n; ++i) axes[i] = v[i];
    count = n < 0 ? 0 : n;
  }
  if (count == 0 && noop) return kiln_lower_alias(ctx, 0, 0);
  bool red[KILN_MAX_RANK] = {false};
  for (int32_t d = 0; d < x->rank; ++d) red[d] = count == 0;
  for (int64_t i = 0; i < count; ++i) {
    int64_t a = axes[i] < 0 ? axes[i] + x->rank : axes[i];
    if (a < 0 || a >= x->rank) {
      return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: axis %lld out of range", op,
                              (long long)axes[i]);
    }
    red[a] = true;
  }
  if (tir_buffer_numel(y) == 0) return NULL;
  /* Runs of kept / reduced dims, size-1 dims dropped. */
  rd_t r;
  memset(&r, 0, sizeof r);
  for (int32_t d = 0; d < x->rank; ++d) {
    if (x->shape[d] == 1) continue;
    if (r.ng > 0 && r.gred[r.ng - 1] == red[d]) {
      r.gdim[r.ng - 1] *= x->shape[d];
    } else {
      r.gdim[r.ng] = x->shape[d];
      r.gred[r.ng++] = red[d];
    }
  }
  if (r.ng == 0) r.gdim[r.ng] = 1, r.gred[r.ng++] = false;
  int64_t nout = 1, group = 1;
  int64_t yshape[KILN_MAX_RANK];
  int32_t ny = 0;
  for (int32_t g = 0; g < r.ng; ++g) {
    if (r.gred[g]) group *= r.gdim[g];
    else nout *= (yshape[ny++] = r.gdim[g]);
  }
  if (ny == 0) yshape[ny++] = 1;
  const tir_buffer_t* yv;
  KILN_RETURN_IF_ERROR(nn_view(ctx, x, "xflat", r.ng, r.gdim, &r.xv));
  KILN_RETURN_IF_ERROR(nn_view(ctx, y, "yflat", ny, yshape, &yv));
  const bool is_float = kiln_dtype_is_float(x->dtype);
  /* f64 accumulates in f64, other floats in f32 */
  r.acc_t = x->dtype == KILN_DTYPE_F64 ? KILN_DTYPE_F64 : is_float ? KILN_DTYPE_F32 : KILN_DTYPE_I64;
  const tir_binop_t bop = kind == RED_MAX ? TIR_MAX : TIR_ADD;
  const tir_expr_t* ident =
      kind == RED_MAX ? lowest(&kb, x->dtype, r.acc_t) : tir_const(t, r.acc_t, 0.0);

  /* Loop variables: kept groups outermost (in order), then reduced ones;
   * when the last group is kept it becomes the innermost row loop. */
  const bool last_kept = !r.gred[r.ng - 1];
  /* [row] or [kept][row] with a long row: blocked, in two kernels. */
  if (!last_kept && r.gdim[r.ng - 1] >= SPLIT_MIN && (r.ng == 1 || (r.ng == 2 && !r.gred[0])))
    return reduce_blocked(&kb, &r, yv, kind, bop, ident);
  tir_var_t* gv[KILN_MAX_RANK];
  for (int32_t g = 0; g < r.ng; ++g) {
    gv[g] = nn_var(&kb, r.gred[g] ? "r" : "k");
    r.gidx[g] = nn_v(&kb, gv[g]);
  }
  const tir_expr_t* yi[KILN_MAX_RANK];
  int32_t nyi = 0;
  for (int32_t g = 0; g < r.ng; ++g)
    if (!r.gred[g]) yi[nyi++] = r.gidx[g];
  if (nyi == 0) yi[nyi++] = nn_i(&kb, 0);
  const tir_stmt_t* s;
  if (!last_kept) {
    int64_t one = 1;
    const tir_buffer_t* acc = tir_buffer(t, "acc", r.acc_t, 1, &one, TIR_SCOPE_PRIVATE);
    const tir_expr_t* z = nn_i(&kb, 0);
    /* reduced groups other than the last: serial loops around a row
     * reduction into a partial, folded into acc */
    const tir_buffer_t* part = tir_buffer(t, "part", r.acc_t, 1, &one, TIR_SCOPE_PRIVATE);
    const tir_stmt_t* row = tir_seq2(
        t, nn_lane_reduce(&kb, part, bop, ident, r.gdim[r.ng - 1], rd_row, &r),
        tir_store(t, acc, NN_IDX(z),
                  tir_bin(t, bop, tir_load(t, acc, NN_IDX(z)), tir_load(t, part, NN_IDX(z)))));
    row = tir_alloc(t, part, row);
    for (int32_t g = r.ng - 2; g >= 0; --g)
      if (r.gred[g]) row = nn_for(&kb, gv[g], r.gdim[g], row);
    const tir_expr_t* v = tir_load(t, acc, NN_IDX(z));
    if (kind == RED_MEAN) v = tir_bin(t, TIR_DIV, v, tir_const(t, r.acc_t, (double)group));
    const tir_stmt_t* items[3] = {tir_store(t, acc, NN_IDX(z), ident), row,
                                  tir_store(t, yv, yi, tir_cast(t, y->dtype, v))};
    s = tir_alloc(t, acc, tir_seq(t, 3, items));
    for (int32_t g = r.ng - 1; g >= 0; --g)
      if (!r.gred[g]) s = nn_for(&kb, gv[g], r.gdim[g], s);
  } else {
    const int64_t L = r.gdim[r.ng - 1];
    const tir_buffer_t* acc = tir_buffer(t, "acc", r.acc_t, 1, &L, TIR_SCOPE_PRIVATE);
    const tir_expr_t* l = r.gidx[r.ng - 1];
    const tir_expr_t* xi[KILN_MAX_RANK];
    for (int32_t g = 0; g < r.ng; ++g) xi[g] = r.gidx[g];
    /* init and finalize loops need their own variables */
    tir_var_t* vi0 = nn_var(&kb, "l");
    tir_var_t* vi1 = nn_var(&kb, "l");
    const tir_expr_t* l0 = nn_v(&kb, vi0);
    const tir_expr_t* l1 = nn_v(&kb, vi1);
    const tir_stmt_t* init = nn_for(&kb, vi0, L, tir_store(t, acc, NN_IDX(l0), ident));
    const tir_stmt_t* upd = tir_store(
        t, acc, NN_IDX(l), tir_bin(t, bop, tir_load(t, acc, NN_IDX(l)), rd_val(&kb, &r, xi)));
    upd = nn_for(&kb, gv[r.ng - 1], L, upd);
    for (int32_t g = r.ng - 2; g >= 0; --g)
      if (r.gred[g]) upd = nn_for(&kb, gv[g], r.gdim[g], upd);
    const tir_expr_t* v = tir_load(t, acc, NN_IDX(l1));
    if (kind == RED_MEAN) v = tir_bin(t, TIR_DIV, v, tir_const(t, r.acc_t, (double)group));
    yi[nyi - 1] = l1;
    const tir_stmt_t* fin = nn_for(&kb, vi1, L, tir_store(t, yv, yi, tir_cast(t, y->dtype, v)));
    if (is_float) {
      nn_vectorize(&kb, vi0);
      nn_vectorize(&kb, gv[r.ng - 1]);
      nn_vectorize(&kb, vi1);
    }
    const tir_stmt_t* items[3] = {init, upd, fin};
    s = tir_alloc(t, acc, tir_seq(t, 3, items));
    for (int32_t g = r.ng - 2; g >= 0; --g)
      if (!r.gred[g]) s = nn_for(&kb, gv[g], r.gdim[g], s);
  }
  /* Parallel over the outermost kept group when there is enough work. */
  if (!r.gred[0] && (r.ng > 1 || !last_kept) && r.gdim[0] > 1 &&
      tir_buffer_numel(x) >= 16384) {
    nn_parallel(&kb, gv[0]);
  }
  (void)nout;
  return nn_emit(&kb, s);
}

kiln_status_t kiln_lower_nn_reduce_mean(kiln_lower_ctx_t* ctx) { return reduce(ctx, RED_MEAN); }
kiln_status_t kiln_lower_nn_reduce_sum(kiln_lower_ctx_t* ctx) { return reduce(ctx, RED_SUM); }
kiln_status_t kiln_lower_nn_reduce_max(kiln_lower_ctx_t* ctx) { return reduce(ctx, RED_MAX); }
