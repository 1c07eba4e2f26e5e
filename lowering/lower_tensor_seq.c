/* Lowering of the tensor ops along one axis (ir/ops/tensor_seq.c).
 *
 *   CumSum: one work-item per line along the axis (the other dims); a
 *        serial loop adds each element to the previous output element,
 *        which is the running sum (TIR has no scalar variables, and the
 *        output is the accumulator the reference uses too). The axis must
 *        be a constant.
 *   TopK: K is the output's extent (a constant K; a run-time K would give
 *        a data-dependent shape). Two kernels: every element counts the
 *        elements of its line that come before it (value order, NaN above
 *        every number, ties by the lower index: a total order, so the
 *        counts are distinct ranks), into an i64 workspace; then every
 *        element whose rank is below K stores itself and its index at that
 *        rank. O(n^2) per line, parallel over all n elements of all lines.
 *   ReverseSequence: an index map through the loaded length, clamped into
 *        the axis; a length outside [0, T] fails the run through a check
 *        kernel as index ops do. */
#include <string.h>

#include "ir/op.h"
#include "ir/ops/tensor_index.h"
#include "lowering/lower_ew_impl.h"
#include "lowering/lower_tensor_impl.h"

#define TRY(expr)                  \
  do {                             \
    kiln_status_t try_s_ = (expr); \
    if (try_s_) return try_s_;     \
  } while (0)

/* A nest over every dim of |shape| but |axis|, and the |r| coordinates of
 * an element of the line with |at| on the axis. */
static void line_nest(tir_ctx_t* c, kiln_lew_nest_t* n, int32_t r, const int64_t* shape, int32_t axis) {
  int64_t other[KILN_MAX_RANK];
  for (int32_t k = 0, j = 0; k < r; ++k)
    if (k != axis) other[j++] = shape[k];
  kiln_lew_nest(c, n, r - 1, other);
}

static void line_at(const kiln_lew_nest_t* n, int32_t r, int32_t axis, const tir_expr_t* at,
                    const tir_expr_t** idx) {
  for (int32_t k = 0, j = 0; k < r; ++k) idx[k] = k == axis ? at : n->idx[j++];
}

/* ---- CumSum ----------------------------------------------------------------- */

static const tir_expr_t* add_as(tir_ctx_t* c, const tir_expr_t* a, const tir_expr_t* b) {
  if (a->dtype != KILN_DTYPE_F16) return tir_add(c, a, b);
  return tir_cast(c, KILN_DTYPE_F16, tir_add(c, kiln_lew_f32(c, a), kiln_lew_f32(c, b)));
}

kiln_status_t kiln_lower_tensor_cumsum(kiln_lower_ctx_t* ctx) {
  const tir_buffer_t* x = kiln_lew_in(ctx, 0);
  const tir_buffer_t* y = kiln_lew_out(ctx, 0);
  if (!x || !y || x->dtype != y->dtype || tir_buffer_numel(x) != tir_buffer_numel(y) || x->rank != y->rank)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "CumSum: missing or mismatched input or output");
  const kiln_array_t* av = kiln_lew_const_in(ctx, 1);
  if (!av)
    return kiln_make_status(KILN_UNSUPPORTED, "CumSum: input 'axis' computed at run time is not supported; kiln "
                            "compiles only a constant axis");
  int32_t axis;
  int64_t excl = 0, rev = 0;
  TRY(kiln_tensor_cumsum_axis(av, x->rank, &axis));
  TRY(kiln_attr_int(ctx->node, "exclusive", 0, &excl));
  TRY(kiln_attr_int(ctx->node, "reverse", 0, &rev));
  if (tir_buffer_numel(y) == 0) return NULL;
  tir_ctx_t* c = ctx->tir;
  const int32_t r = x->rank;
  const int64_t n = x->shape[axis];
  kiln_lew_nest_t nest;
  line_nest(c, &nest, r, x->shape, axis);
  const tir_var_t* a = tir_var(c, "a");
  const tir_expr_t* av_ = tir_ref(c, a);
  const tir_expr_t* pos = rev ? tir_sub(c, tir_int(c, n - 1), av_) : av_;
  const tir_expr_t* prev = kiln_lew_clamp(c, rev ? tir_add(c, pos, tir_int(c, 1)) : tir_sub(c, pos, tir_int(c, 1)), 0, n - 1);
  const tir_expr_t *at[KILN_MAX_RANK], *pat[KILN_MAX_RANK];
  line_at(&nest, r, axis, pos, at);
  line_at(&nest, r, axis, prev, pat);
  const tir_expr_t* first = tir_bin(c, TIR_EQ, av_, tir_int(c, 0));
  const tir_expr_t* v =
      excl ? tir_select(c, first, kiln_lew_imm(c, y->dtype, 0.0), add_as(c, tir_load(c, y, pat), tir_load(c, x, pat)))
           : tir_select(c, first, tir_load(c, x, at), add_as(c, tir_load(c, y, pat), tir_load(c, x, at)));
  const tir_stmt_t* line = tir_for(c, a, n, TIR_LOOP_SERIAL, tir_store(c, y, at, v));
  const tir_buffer_t* params[2] = {x, y};
  return kiln_lew_emit(ctx, &nest, kiln_lew_loops(c, &nest, line), 2, params, false);
}

/* ---- TopK ------------------------------------------------------------------- */

/* Element (value |a|, index |j|) comes before (|b|, |i|): the reference's
 * topk_before. Floats compare in f32; NaN is above every number. */
static const tir_expr_t* before(tir_ctx_t* c, const tir_expr_t* a, const tir_expr_t* j, const tir_expr_t* b,
                                const tir_expr_t* i, bool largest) {
  const tir_expr_t* tie = tir_bin(c, TIR_LT, j, i);
  if (!kiln_dtype_is_float(a->dtype)) {
    const tir_expr_t* strict = tir_bin(c, largest ? TIR_GT : TIR_LT, a, b);
    return tir_bin(c, TIR_OR, strict, tir_bin(c, TIR_AND, tir_bin(c, TIR_EQ, a, b), tie));
  }
  a = kiln_lew_f32(c, a);
  b = kiln_lew_f32(c, b);
  const tir_expr_t* na = tir_bin(c, TIR_NE, a, a);
  const tir_expr_t* nb = tir_bin(c, TIR_NE, b, b);
  const tir_expr_t* a_num = tir_bin(c, TIR_EQ, a, a);
  const tir_expr_t* b_num = tir_bin(c, TIR_EQ, b, b);
  /* largest: a NaN beats a number; smallest: a number beats a NaN. */
  const tir_expr_t* nan_wins = largest ? tir_bin(c, TIR_AND, na, b_num) : tir_bin(c, TIR_AND, a_num, nb);
  const tir_expr_t* strict = tir_bin(c, TIR_OR, nan_wins, tir_bin(c, largest ? TIR_GT : TIR_LT, a, b));
  const tir_expr_t* eq = tir_bin(c, TIR_OR, tir_bin(c, TIR_EQ, a, b), tir_bin(c, TIR_AND, na, nb));
  return tir_bin(c, TIR_OR, strict, tir_bin(c, TIR_AND, eq, tie));
}

kiln_status_t kiln_lower_tensor_topk(kiln_lower_ctx_t* ctx) {
  const tir_buffer_t* x = kiln_lew_in(ctx, 0);
  const tir_buffer_t* yv = kiln_lew_out(ctx, 0);
  const tir_buffer_t* yi = kiln_lew_out(ctx, 1);
  const tir_buffer_t* y = yv ? yv : yi;
  if (!x || !y) return kiln_make_status(KILN_INVALID_ARGUMENT, "TopK: missing input or outputs");
  int32_t axis;
  bool largest;
  TRY(kiln_tensor_topk_attrs(ctx->node, x->rank, &axis, &largest));
  const int32_t r = x->rank;
  const int64_t n = x->shape[axis], k = y->shape[axis];
  bool ok = y->rank == r && k <= n && (!yv || yv->dtype == x->dtype) && (!yi || yi->dtype == KILN_DTYPE_I64);
  for (int32_t d = 0; ok && d < r; ++d) ok = d == axis || y->shape[d] == x->shape[d];
  if (!ok) return kiln_make_status(KILN_INTERNAL, "TopK: outputs do not match the input");
  if (tir_buffer_numel(y) == 0) return NULL;
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* rank = NULL;
  TRY(kiln_lower_temp(ctx, "rank", KILN_DTYPE_I64, r, x->shape, &rank));
  /* Kernel 1: rank[e] = the number of elements of e's line before it. */
  kiln_lew_nest_t nest;
  kiln_lew_nest_buf(c, &nest, x);
  const tir_var_t* j = tir_var(c, "j");
  const tir_expr_t* jr = tir_ref(c, j);
  const tir_expr_t* other[KILN_MAX_RANK];
  for (int32_t d = 0; d < r; ++d) other[d] = d == axis ? jr : nest.idx[d];
  const tir_expr_t* beats = before(c, tir_load(c, x, other), jr, tir_load(c, x, nest.idx), nest.idx[axis], largest);
  const tir_expr_t* inc = tir_add(c, tir_load(c, rank, nest.idx), tir_select(c, beats, tir_int(c, 1), tir_int(c, 0)));
  const tir_stmt_t* count = tir_seq2(c, tir_store(c, rank, nest.idx, tir_int(c, 0)),
                                     tir_for(c, j, n, TIR_LOOP_SERIAL, tir_store(c, rank, nest.idx, inc)));
  const tir_buffer_t* p1[2] = {x, rank};
  TRY(kiln_lew_emit(ctx, &nest, kiln_lew_loops(c, &nest, count), 2, p1, false));
  /* Kernel 2: elements ranked below K store themselves at their rank. */
  kiln_lew_nest_buf(c, &nest, x);
  const tir_expr_t* rk = tir_load(c, rank, nest.idx);
  const tir_expr_t* dst[KILN_MAX_RANK];
  for (int32_t d = 0; d < r; ++d) dst[d] = d == axis ? kiln_lew_clamp(c, rk, 0, k - 1) : nest.idx[d];
  const tir_stmt_t* st[2] = {yv ? tir_store(c, yv, dst, tir_load(c, x, nest.idx)) : NULL,
                             yi ? tir_store(c, yi, dst, nest.idx[axis]) : NULL};
  const tir_stmt_t* body = tir_if(c, tir_bin(c, TIR_LT, rk, tir_int(c, k)), tir_seq(c, 2, st), NULL);
  const tir_buffer_t* p2[4] = {x, rank, yv, yi};
  return kiln_lew_emit(ctx, &nest, kiln_lew_loops(c, &nest, body), 4, p2, false);
}

/* ---- ReverseSequence ------------------------------------------------------------ */

/* A length outside [0, T] (T = *user). */
static const tir_expr_t* len_bad(tir_ctx_t* c, const tir_expr_t* v, const void* user) {
  const int64_t t = *(const int64_t*)user;
  return tir_bin(c, TIR_OR, tir_bin(c, TIR_LT, v, tir_int(c, 0)), tir_bin(c, TIR_GT, v, tir_int(c, t)));
}

kiln_status_t kiln_lower_tensor_reverse_sequence(kiln_lower_ctx_t* ctx) {
  const tir_buffer_t* x = kiln_lew_in(ctx, 0);
  const tir_buffer_t* lens = kiln_lew_in(ctx, 1);
  const tir_buffer_t* y = kiln_lew_out(ctx, 0);
  if (!x || !lens || !y) return kiln_make_status(KILN_INVALID_ARGUMENT, "ReverseSequence: missing input or output");
  int32_t b, t;
  TRY(kiln_tensor_revseq_axes(ctx->node, x->rank, &b, &t));
  const int64_t nt = x->shape[t];
  if (lens->dtype != KILN_DTYPE_I64 || tir_buffer_numel(lens) != x->shape[b] || y->dtype != x->dtype ||
      tir_buffer_numel(y) != tir_buffer_numel(x) || y->rank != x->rank)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "ReverseSequence: shapes or dtypes do not match");
  if (tir_buffer_numel(y) == 0) return NULL;
  tir_ctx_t* c = ctx->tir;
  if (!kiln_lew_const_in(ctx, 1)) TRY(kiln_lew_check(ctx, lens, len_bad, &nt, KILN_CHECK_LENGTH_RANGE));
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_expr_t* ti = n.idx[t];
  const tir_expr_t* len = tir_load(c, lens, &n.idx[b]);
  const tir_expr_t* rev = kiln_lew_clamp(c, tir_sub(c, tir_sub(c, len, tir_int(c, 1)), ti), 0, nt - 1);
  const tir_expr_t* idx[KILN_MAX_RANK];
  for (int32_t d = 0; d < x->rank; ++d) idx[d] = n.idx[d];
  idx[t] = tir_select(c, tir_bin(c, TIR_LT, ti, len), rev, ti);
  const tir_stmt_t* body = kiln_lew_loops(c, &n, kiln_lew_store(c, &n, y, tir_load(c, x, idx)));
  const tir_buffer_t* params[3] = {x, lens, y};
  return kiln_lew_emit(ctx, &n, body, 3, params, x->rank > 2);
}
