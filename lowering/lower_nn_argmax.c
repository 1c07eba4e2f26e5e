/* ArgMax, ArgMin and Hardmax: a scan along one axis for the index of the
 * extreme element.
 *
 * The input is viewed as [outer][n][inner]; each (outer, inner) position is
 * one iteration of a flat loop (PARALLEL when there is enough work, one
 * work-item each on a GPU) that walks the n elements keeping the best value
 * and its index in PRIVATE scalars. Values compare in f32 (floats) or i64
 * (integers), both exact for the input. As in the reference
 * (ir/ops/nn_argmax.c) a NaN counts as the extreme: the first one wins, or
 * the last with select_last_index. ArgMax/ArgMin store the index (i64);
 * Hardmax (always the first maximum) stores 1 there and 0 elsewhere.
 */
#include <string.h>

#include "lowering/lower_nn_impl.h"

typedef struct scan_s {
  const tir_buffer_t* xv; /* [outer][n][inner] */
  int64_t outer, n, inner;
  bool is_min, last;
  kiln_dtype_t cmp_t;
} scan_t;

/* Whether |v| replaces the best so far |b| (BOOL expression). */
static const tir_expr_t* better(nn_kb_t* kb, const scan_t* s, const tir_expr_t* v, const tir_expr_t* b) {
  tir_ctx_t* t = kb->t;
  tir_binop_t cmp = s->is_min ? (s->last ? TIR_LE : TIR_LT) : (s->last ? TIR_GE : TIR_GT);
  const tir_expr_t* c = tir_bin(t, cmp, v, b);
  if (!kiln_dtype_is_float(s->cmp_t)) return c;
  const tir_expr_t* v_nan = tir_bin(t, TIR_NE, v, v);
  const tir_expr_t* b_num = tir_bin(t, TIR_EQ, b, b);
  /* first: (v is NaN and b is not) or v beats b; last: v is NaN, or b is a
   * number that v ties or beats */
  return s->last ? tir_bin(t, TIR_OR, v_nan, tir_bin(t, TIR_AND, b_num, c))
                 : tir_bin(t, TIR_OR, tir_bin(t, TIR_AND, v_nan, b_num), c);
}

/* Fills idx[0] (I64, PRIVATE) with the index of the extreme of row (o, i). */
static const tir_stmt_t* scan_row(nn_kb_t* kb, const scan_t* s, const tir_expr_t* o,
                                  const tir_expr_t* i, const tir_buffer_t* idx) {
  tir_ctx_t* t = kb->t;
  const int64_t one = 1;
  const tir_buffer_t* best = tir_buffer(t, "best", s->cmp_t, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_expr_t* z = nn_i(kb, 0);
  tir_var_t* vk = nn_var(kb, "k");
  const tir_expr_t* k = nn_addc(kb, nn_v(kb, vk), 1);
  const tir_expr_t* v = tir_cast(t, s->cmp_t, tir_load(t, s->xv, NN_IDX(o, k, i)));
  const tir_expr_t* b = tir_load(t, best, NN_IDX(z));
  const tir_expr_t* c = better(kb, s, v, b);
  const tir_stmt_t* step =
      tir_seq2(t, tir_store(t, idx, NN_IDX(z), tir_select(t, c, k, tir_load(t, idx, NN_IDX(z)))),
               tir_store(t, best, NN_IDX(z), tir_select(t, c, v, b)));
  const tir_stmt_t* items[3] = {
      tir_store(t, best, NN_IDX(z), tir_cast(t, s->cmp_t, tir_load(t, s->xv, NN_IDX(o, z, i)))),
      tir_store(t, idx, NN_IDX(z), z), nn_for(kb, vk, s->n - 1, step)};
  return tir_alloc(t, best, tir_seq(t, 3, items));
}

typedef enum { SCAN_ARGMAX, SCAN_ARGMIN, SCAN_HARDMAX } scan_kind_t;

static kiln_status_t scan(kiln_lower_ctx_t* ctx, scan_kind_t kind) {
  const char* op = kind == SCAN_ARGMAX ? "ArgMax" : kind == SCAN_ARGMIN ? "ArgMin" : "Hardmax";
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  tir_ctx_t* t = kb.t;
  const tir_buffer_t *x = ctx->in[0], *y = ctx->out[0];
  if (!x || !y) return kiln_make_status(KILN_INTERNAL, "%s: missing operand", op);
  scan_t s = {NULL, 1, 1, 1, kind == SCAN_ARGMIN, false, KILN_DTYPE_F32};
  int64_t axis = 0, last = 0;
  const bool legacy = kind == SCAN_HARDMAX && ctx->opset < 13;
  /* defaults: 0 for ArgMax/ArgMin, -1 for Hardmax-13, 1 for the legacy
   * Hardmax, which flattens [axis, rank) into the scanned dim */
  const int64_t def = kind != SCAN_HARDMAX ? 0 : legacy ? 1 : -1;
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "axis", def, &axis));
  if (kind != SCAN_HARDMAX) KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "select_last_index", 0, &last));
  s.last = last != 0;
  if (axis < 0) axis += x->rank;
  if (axis < 0 || axis >= x->rank + (legacy ? 1 : 0)) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: axis out of range for rank %d", op, (int)x->rank);
  }
  for (int32_t d = 0; d < x->rank; ++d) {
    if (d < axis) s.outer *= x->shape[d];
    else if (d == axis || legacy) s.n *= x->shape[d];
    else s.inner *= x->shape[d];
  }
  if (s.outer * s.inner == 0) return NULL;
  if (s.n == 0) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: the axis is empty", op);
  if (!kiln_dtype_is_float(x->dtype)) s.cmp_t = KILN_DTYPE_I64;
  if (x->dtype == KILN_DTYPE_F64) s.cmp_t = KILN_DTYPE_F64; /* compared in double, not f32 */
  const tir_buffer_t* yv;
  const int64_t xs[3] = {s.outer, s.n, s.inner};
  KILN_RETURN_IF_ERROR(nn_view(ctx, x, "xv", 3, xs, &s.xv));
  const int64_t ys[3] = {s.outer, kind == SCAN_HARDMAX ? s.n : 1, s.inner};
  KILN_RETURN_IF_ERROR(nn_view(ctx, y, "yv", 3, ys, &yv));
  const int64_t rows = s.outer * s.inner, one = 1;
  tir_var_t* vq = nn_var(&kb, "q");
  const tir_expr_t* q = nn_v(&kb, vq);
  const tir_expr_t* o = nn_divc(&kb, q, s.inner);
  const tir_expr_t* i = nn_modc(&kb, q, s.inner);
  const tir_expr_t* z = nn_i(&kb, 0);
  const tir_buffer_t* idx = tir_buffer(t, "idx", KILN_DTYPE_I64, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_expr_t* best = tir_load(t, idx, NN_IDX(z));
  const tir_stmt_t* out;
  if (kind == SCAN_HARDMAX) {
    tir_var_t* vk = nn_var(&kb, "j");
    const tir_expr_t* k = nn_v(&kb, vk);
    const tir_expr_t* hot = tir_select(t, tir_bin(t, TIR_EQ, k, best), nn_f(&kb, 1.0), nn_f(&kb, 0.0));
    out = nn_for(&kb, vk, s.n, nn_stf(&kb, yv, NN_IDX(o, k, i), hot));
  } else {
    out = tir_store(t, yv, NN_IDX(o, z, i), best);
  }
  const tir_stmt_t* body = nn_for(&kb, vq, rows, tir_alloc(t, idx, tir_seq2(t, scan_row(&kb, &s, o, i, idx), out)));
  if (rows > 1 && rows * s.n >= 4096) nn_parallel(&kb, vq);
  return nn_emit(&kb, body);
}

kiln_status_t kiln_lower_nn_argmax(kiln_lower_ctx_t* ctx) { return scan(ctx, SCAN_ARGMAX); }
kiln_status_t kiln_lower_nn_argmin(kiln_lower_ctx_t* ctx) { return scan(ctx, SCAN_ARGMIN); }
kiln_status_t kiln_lower_nn_hardmax(kiln_lower_ctx_t* ctx) { return scan(ctx, SCAN_HARDMAX); }
