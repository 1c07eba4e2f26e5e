/* Lowering of the index-driven tensor ops (ir/ops/tensor_index.c):
 * GatherElements, GatherND, ScatterElements / Scatter and ScatterND.
 *
 * Indices are data, loaded by the kernels. As for Gather (lower_tensor.c),
 * every loaded index is made non-negative and CLAMPED into its axis, so no
 * kernel reads or writes out of bounds whatever the values; an index
 * outside [-n, n) still fails the run as in the reference: a check kernel
 * before the others stores KILN_CHECK_INDEX_RANGE into the node's status
 * word (constant indices were checked at load instead).
 *
 * The scatters copy the data into the output, then apply the updates in
 * the reference's order. Updates to one output element must not race, so
 * the loops over the scattered positions stay serial inside each
 * work-item: ScatterElements runs one work-item per position of the
 * non-scattered dims (each owns its output line along the axis),
 * ScatterND one per element of a slice (each owns that element of every
 * slice). Duplicate indices then apply in order, as the reference does. */
#include <stdio.h>
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

static bool int_index(const tir_buffer_t* b) {
  return b && (b->dtype == KILN_DTYPE_I64 || b->dtype == KILN_DTYPE_I32);
}

const tir_expr_t* kiln_ltx_safe_index(tir_ctx_t* c, const tir_expr_t* v, int64_t n) {
  if (v->dtype == KILN_DTYPE_I32 && n <= INT32_MAX) {
    /* i32 indices are made non-negative and clamped as i32 and widened
     * only then: lavapipe widens a negative GLSL int to int64_t wrongly
     * (found by tests/test_bad_runtime_arith). */
    const tir_expr_t* z = kiln_lew_imm_i(c, KILN_DTYPE_I32, 0);
    const tir_expr_t* j =
        tir_select(c, tir_bin(c, TIR_LT, v, z), tir_add(c, v, kiln_lew_imm_i(c, KILN_DTYPE_I32, n)), v);
    j = tir_bin(c, TIR_MIN, tir_bin(c, TIR_MAX, j, z), kiln_lew_imm_i(c, KILN_DTYPE_I32, n - 1));
    return tir_cast(c, KILN_DTYPE_I64, j);
  }
  const tir_expr_t* j = tir_cast(c, KILN_DTYPE_I64, v);
  j = tir_select(c, tir_bin(c, TIR_LT, j, tir_int(c, 0)), tir_add(c, j, tir_int(c, n)), j);
  return kiln_lew_clamp(c, j, 0, n - 1);
}

kiln_status_t kiln_ltx_check_indices(kiln_lower_ctx_t* ctx, const tir_buffer_t* ind, const int64_t* bound,
                                     int32_t nb) {
  tir_ctx_t* c = ctx->tir;
  if (tir_buffer_numel(ind) == 0) return NULL;
  bool narrow = ind->dtype == KILN_DTYPE_I32;
  for (int32_t k = 0; k < nb; ++k) narrow &= bound[k] <= INT32_MAX;
  const kiln_dtype_t dt = narrow ? KILN_DTYPE_I32 : KILN_DTYPE_I64;
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, ind);
  /* With several bounds the last dim of |ind| picks one (GatherND tuples). */
  const tir_expr_t* lim = kiln_lew_imm_i(c, dt, bound[nb - 1]);
  for (int32_t k = nb - 2; k >= 0; --k)
    lim = tir_select(c, tir_bin(c, TIR_EQ, n.idx[ind->rank - 1], tir_int(c, k)), kiln_lew_imm_i(c, dt, bound[k]),
                     lim);
  const tir_expr_t* v = tir_load(c, ind, n.idx);
  if (v->dtype != dt) v = tir_cast(c, dt, v);
  const tir_expr_t* neg = tir_sub(c, kiln_lew_imm_i(c, dt, 0), lim);
  const tir_expr_t* bad = tir_bin(c, TIR_OR, tir_bin(c, TIR_LT, v, neg), tir_bin(c, TIR_GE, v, lim));
  const tir_buffer_t* word = NULL;
  TRY(kiln_lower_status(ctx, &word));
  const tir_expr_t* at0[1] = {tir_int(c, 0)};
  const tir_stmt_t* flag = tir_store(c, word, at0, tir_const(c, KILN_DTYPE_I32, (double)KILN_CHECK_INDEX_RANGE));
  const tir_buffer_t* params[2] = {ind, word};
  return kiln_lew_emit(ctx, &n, kiln_lew_loops(c, &n, tir_if(c, bad, flag, NULL)), 2, params, false);
}

static kiln_status_t need_ind(const kiln_lower_ctx_t* ctx, const char* op, int32_t n_in) {
  for (int32_t i = 0; i < n_in; ++i)
    if (!kiln_lew_in(ctx, i)) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: missing input %d", op, (int)i);
  if (!kiln_lew_out(ctx, 0)) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: missing output", op);
  if (!int_index(ctx->in[1]))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: indices have dtype %s", op,
                            kiln_dtype_name(ctx->in[1]->dtype));
  if (ctx->in[0]->dtype != ctx->out[0]->dtype)
    return kiln_make_status(KILN_INTERNAL, "%s: output dtype differs from the data's", op);
  return NULL;
}

static kiln_status_t elements_axis(const kiln_lower_ctx_t* ctx, const char* op, int32_t* axis) {
  const tir_buffer_t* x = ctx->in[0];
  const tir_buffer_t* ind = ctx->in[1];
  int64_t a = 0;
  TRY(kiln_attr_int(ctx->node, "axis", 0, &a));
  if (x->rank == 0 || a < -(int64_t)x->rank || a >= x->rank || ind->rank != x->rank)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: axis %lld or indices rank %d do not fit data rank %d", op,
                            (long long)a, (int)ind->rank, (int)x->rank);
  *axis = (int32_t)(a < 0 ? a + x->rank : a);
  for (int32_t k = 0; k < x->rank; ++k)
    if (k != *axis && ind->shape[k] > x->shape[k])
      return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: indices do not fit the data in dim %d", op, (int)k);
  return NULL;
}

/* Emits the run-time check of indices input 1 unless it is a constant. */
static kiln_status_t check_unless_const(kiln_lower_ctx_t* ctx, const int64_t* bound, int32_t nb) {
  if (kiln_lew_const_in(ctx, 1)) return NULL;
  return kiln_ltx_check_indices(ctx, ctx->in[1], bound, nb);
}

/* ---- GatherElements ------------------------------------------------------------ */

kiln_status_t kiln_lower_tensor_gather_elements(kiln_lower_ctx_t* ctx) {
  TRY(need_ind(ctx, "GatherElements", 2));
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* x = ctx->in[0];
  const tir_buffer_t* ind = ctx->in[1];
  const tir_buffer_t* y = ctx->out[0];
  int32_t axis;
  TRY(elements_axis(ctx, "GatherElements", &axis));
  if (y->rank != ind->rank || tir_buffer_numel(y) != tir_buffer_numel(ind))
    return kiln_make_status(KILN_INTERNAL, "GatherElements: output shape differs from the indices'");
  if (tir_buffer_numel(y) == 0) return NULL;
  const int64_t nax = x->shape[axis];
  TRY(check_unless_const(ctx, &nax, 1));
  if (nax == 0) return kiln_lew_fill(ctx, y, kiln_lew_imm(c, y->dtype, 0.0));
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_expr_t* idx[KILN_MAX_RANK];
  for (int32_t k = 0; k < x->rank; ++k) idx[k] = n.idx[k];
  idx[axis] = kiln_ltx_safe_index(c, tir_load(c, ind, n.idx), nax);
  const tir_stmt_t* body = kiln_lew_loops(c, &n, kiln_lew_store(c, &n, y, tir_load(c, x, idx)));
  const tir_buffer_t* params[3] = {x, ind, y};
  return kiln_lew_emit(ctx, &n, body, 3, params, false);
}

/* ---- GatherND -------------------------------------------------------------------- */

kiln_status_t kiln_lower_tensor_gather_nd(kiln_lower_ctx_t* ctx) {
  TRY(need_ind(ctx, "GatherND", 2));
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* x = ctx->in[0];
  const tir_buffer_t* ind = ctx->in[1];
  const tir_buffer_t* y = ctx->out[0];
  int64_t b = 0;
  TRY(kiln_attr_int(ctx->node, "batch_dims", 0, &b));
  const int32_t r = x->rank, q = ind->rank;
  const int64_t k = q > 0 ? ind->shape[q - 1] : 0;
  if (b < 0 || b >= q || b >= r || k < 1 || k > r - b || y->rank != q - 1 + r - b - k)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "GatherND: indices of rank %d (last dim %lld) do not fit data of "
                            "rank %d with batch_dims %lld", (int)q, (long long)k, (int)r, (long long)b);
  if (tir_buffer_numel(y) == 0) return NULL;
  int64_t bound[KILN_MAX_RANK];
  bool empty_axis = false;
  for (int64_t j = 0; j < k; ++j) {
    bound[j] = x->shape[b + j];
    empty_axis |= bound[j] == 0;
  }
  TRY(check_unless_const(ctx, bound, (int32_t)k));
  if (empty_axis) return kiln_lew_fill(ctx, y, kiln_lew_imm(c, y->dtype, 0.0));
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_expr_t* idx[KILN_MAX_RANK];
  const tir_expr_t* tup[KILN_MAX_RANK];
  for (int32_t d = 0; d < q - 1; ++d) tup[d] = n.idx[d];
  for (int32_t d = 0; d < b; ++d) idx[d] = n.idx[d];
  for (int32_t j = 0; j < k; ++j) {
    tup[q - 1] = tir_int(c, j);
    idx[b + j] = kiln_ltx_safe_index(c, tir_load(c, ind, tup), bound[j]);
  }
  for (int32_t d = (int32_t)(b + k); d < r; ++d) idx[d] = n.idx[q - 1 + d - b - k];
  const tir_stmt_t* body = kiln_lew_loops(c, &n, kiln_lew_store(c, &n, y, tir_load(c, x, idx)));
  const tir_buffer_t* params[3] = {x, ind, y};
  return kiln_lew_emit(ctx, &n, body, 3, params, r - b - k > 0);
}

/* ---- scatters ------------------------------------------------------------------- */

/* reduce(old, upd) in the reference's arithmetic: floats in f32 (f16 widened
 * and rounded once), integers at their width. */
static const tir_expr_t* combine(tir_ctx_t* c, int red, const tir_expr_t* old, const tir_expr_t* upd) {
  if (red == KILN_SCATTER_NONE) return upd;
  const kiln_dtype_t dt = old->dtype;
  if (dt == KILN_DTYPE_F16) {
    old = tir_cast(c, KILN_DTYPE_F32, old);
    upd = tir_cast(c, KILN_DTYPE_F32, upd);
  }
  static const tir_binop_t ops[] = {TIR_ADD, TIR_ADD, TIR_MUL, TIR_MAX, TIR_MIN};
  const tir_expr_t* v = tir_bin(c, ops[red], old, upd);
  return dt == KILN_DTYPE_F16 ? tir_cast(c, KILN_DTYPE_F16, v) : v;
}

/* Kernel 1 of a scatter: the output starts as a copy of the data. */
static kiln_status_t copy_data(kiln_lower_ctx_t* ctx, const tir_buffer_t* x, const tir_buffer_t* y) {
  tir_ctx_t* c = ctx->tir;
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_buffer_t* params[2] = {x, y};
  return kiln_lew_emit(ctx, &n, kiln_lew_loops(c, &n, kiln_lew_store(c, &n, y, tir_load(c, x, n.idx))), 2,
                       params, true);
}

static kiln_status_t scatter_setup(kiln_lower_ctx_t* ctx, const char* op, int* red) {
  TRY(need_ind(ctx, op, 3));
  const tir_buffer_t* x = ctx->in[0];
  const tir_buffer_t* y = ctx->out[0];
  if (ctx->in[2]->dtype != x->dtype || y->rank != x->rank || tir_buffer_numel(y) != tir_buffer_numel(x))
    return kiln_make_status(KILN_INTERNAL, "%s: output or updates do not match the data", op);
  return kiln_tensor_scatter_reduction(ctx->node, op, x->dtype, red);
}

kiln_status_t kiln_lower_tensor_scatter_elements(kiln_lower_ctx_t* ctx) {
  const char* op = ctx->node->op_type;
  int red;
  TRY(scatter_setup(ctx, op, &red));
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* x = ctx->in[0];
  const tir_buffer_t* ind = ctx->in[1];
  const tir_buffer_t* upd = ctx->in[2];
  const tir_buffer_t* y = ctx->out[0];
  int32_t axis;
  TRY(elements_axis(ctx, op, &axis));
  if (upd->rank != ind->rank || tir_buffer_numel(upd) != tir_buffer_numel(ind))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: updates and indices differ in shape", op);
  if (tir_buffer_numel(y) == 0) return NULL;
  const int64_t nax = x->shape[axis];
  TRY(check_unless_const(ctx, &nax, 1));
  TRY(copy_data(ctx, x, y));
  if (tir_buffer_numel(ind) == 0 || nax == 0) return NULL;
  /* One work-item per position of the other dims; the axis loop is serial. */
  int64_t outer[KILN_MAX_RANK];
  for (int32_t k = 0, j = 0; k < ind->rank; ++k)
    if (k != axis) outer[j++] = ind->shape[k];
  kiln_lew_nest_t n;
  kiln_lew_nest(c, &n, ind->rank - 1, outer);
  const tir_var_t* a = tir_var(c, "s");
  const tir_expr_t* at[KILN_MAX_RANK];
  for (int32_t k = 0, j = 0; k < ind->rank; ++k) at[k] = k == axis ? tir_ref(c, a) : n.idx[j++];
  const tir_expr_t* dst[KILN_MAX_RANK];
  memcpy(dst, at, sizeof(at[0]) * (size_t)ind->rank);
  dst[axis] = kiln_ltx_safe_index(c, tir_load(c, ind, at), nax);
  const tir_expr_t* v = combine(c, red, tir_load(c, y, dst), tir_load(c, upd, at));
  const tir_stmt_t* line = tir_for(c, a, ind->shape[axis], TIR_LOOP_SERIAL, tir_store(c, y, dst, v));
  const tir_buffer_t* params[3] = {ind, upd, y};
  return kiln_lew_emit(ctx, &n, kiln_lew_loops(c, &n, line), 3, params, false);
}

kiln_status_t kiln_lower_tensor_scatter_nd(kiln_lower_ctx_t* ctx) {
  int red;
  TRY(scatter_setup(ctx, "ScatterND", &red));
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* x = ctx->in[0];
  const tir_buffer_t* ind = ctx->in[1];
  const tir_buffer_t* upd = ctx->in[2];
  const tir_buffer_t* y = ctx->out[0];
  const int32_t r = x->rank, q = ind->rank;
  const int64_t k = q > 0 ? ind->shape[q - 1] : 0;
  if (r < 1 || k < 1 || k > r || upd->rank != q - 1 + r - k)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "ScatterND: indices of rank %d (last dim %lld) do not fit data "
                            "of rank %d", (int)q, (long long)k, (int)r);
  for (int32_t d = 0; d < upd->rank; ++d)
    if (upd->shape[d] != (d < q - 1 ? ind->shape[d] : x->shape[k + d - (q - 1)]))
      return kiln_make_status(KILN_INVALID_ARGUMENT, "ScatterND: updates do not have the shape the indices give");
  if (tir_buffer_numel(y) == 0) return NULL;
  int64_t bound[KILN_MAX_RANK];
  for (int64_t j = 0; j < k; ++j) bound[j] = x->shape[j];
  TRY(check_unless_const(ctx, bound, (int32_t)k));
  TRY(copy_data(ctx, x, y));
  if (tir_buffer_numel(upd) == 0) return NULL;
  /* One work-item per slice element; serial loops over the index tuples. */
  kiln_lew_nest_t n;
  kiln_lew_nest(c, &n, (int32_t)(r - k), x->shape + k);
  const tir_var_t* t[KILN_MAX_RANK];
  const tir_expr_t* tup[KILN_MAX_RANK];
  const tir_expr_t* uat[KILN_MAX_RANK];
  const tir_expr_t* dst[KILN_MAX_RANK];
  for (int32_t d = 0; d < q - 1; ++d) {
    char name[8];
    snprintf(name, sizeof name, "t%d", (int)d);
    t[d] = tir_var(c, name);
    tup[d] = uat[d] = tir_ref(c, t[d]);
  }
  for (int32_t j = 0; j < k; ++j) {
    tup[q - 1] = tir_int(c, j);
    dst[j] = kiln_ltx_safe_index(c, tir_load(c, ind, tup), bound[j]);
  }
  for (int32_t d = 0; d < r - k; ++d) dst[k + d] = uat[q - 1 + d] = n.idx[d];
  const tir_expr_t* v = combine(c, red, tir_load(c, y, dst), tir_load(c, upd, uat));
  const tir_stmt_t* s = tir_store(c, y, dst, v);
  for (int32_t d = q - 2; d >= 0; --d) s = tir_for(c, t[d], ind->shape[d], TIR_LOOP_SERIAL, s);
  const tir_buffer_t* params[3] = {ind, upd, y};
  return kiln_lew_emit(ctx, &n, kiln_lew_loops(c, &n, s), 3, params, false);
}
