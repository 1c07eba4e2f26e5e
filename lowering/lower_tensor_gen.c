/* Lowering of the generator and index-map tensor ops (ir/ops/tensor_gen.c):
 * one loop nest over the output each.
 *   Tile: x[o mod d] per axis;
 *   Trilu / EyeLike: a select on the column minus the row against k (Trilu's
 *        k may be a run-time scalar: the kernel loads it);
 *   OneHot: the index at the output's other coordinates (made non-negative)
 *        equal to the position on the axis picks values[1], else values[0];
 *        indices outside the depth give "off", as in the reference;
 *   DepthToSpace / SpaceToDepth: floordiv / floormod of the output's
 *        spatial coordinates by the block size;
 *   Size: a fill with the element count.
 *   Range: start + i * delta. Its size must be known, so its inputs are
 *        constants (the plan refuses run-time ones as UNSUPPORTED, naming
 *        the node); small outputs are folded at load and never get here. */
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

static kiln_status_t io(const kiln_lower_ctx_t* ctx, const char* op, const tir_buffer_t** x,
                        const tir_buffer_t** y) {
  *x = kiln_lew_in(ctx, 0);
  *y = kiln_lew_out(ctx, 0);
  if (!*x || !*y) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: missing input or output", op);
  return NULL;
}

static kiln_status_t mismatch(const char* op) {
  return kiln_make_status(KILN_INTERNAL, "%s: output does not match the input", op);
}

/* ---- Tile ------------------------------------------------------------------- */

kiln_status_t kiln_lower_tensor_tile(kiln_lower_ctx_t* ctx) {
  const tir_buffer_t *x, *y;
  TRY(io(ctx, "Tile", &x, &y));
  tir_ctx_t* c = ctx->tir;
  if (y->rank != x->rank || y->dtype != x->dtype) return mismatch("Tile");
  for (int32_t k = 0; k < x->rank; ++k)
    if (x->shape[k] == 0 ? y->shape[k] != 0 : y->shape[k] % x->shape[k] != 0) return mismatch("Tile");
  if (tir_buffer_numel(y) == 0) return NULL;
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_expr_t* idx[KILN_MAX_RANK];
  for (int32_t k = 0; k < x->rank; ++k)
    idx[k] = x->shape[k] == y->shape[k] ? n.idx[k] : tir_bin(c, TIR_FLOORMOD, n.idx[k], tir_int(c, x->shape[k]));
  const tir_stmt_t* body = kiln_lew_loops(c, &n, kiln_lew_store(c, &n, y, tir_load(c, x, idx)));
  const tir_buffer_t* params[2] = {x, y};
  const int32_t r = x->rank;
  return kiln_lew_emit(ctx, &n, body, 2, params, r == 0 || x->shape[r - 1] == y->shape[r - 1]);
}

/* ---- Range --------------------------------------------------------------------- */

/* Only a Range whose size is known gets here (constant inputs; a larger
 * output than inference folds): y[i] = start + i * delta, start and delta
 * loaded (floats in f32, integers in i64 wrapping to the width). */
kiln_status_t kiln_lower_tensor_range(kiln_lower_ctx_t* ctx) {
  const tir_buffer_t *s, *y;
  TRY(io(ctx, "Range", &s, &y));
  const tir_buffer_t* d = kiln_lew_in(ctx, 2);
  if (!d || y->rank != 1 || s->dtype != y->dtype || d->dtype != y->dtype || tir_buffer_numel(s) != 1 ||
      tir_buffer_numel(d) != 1)
    return mismatch("Range");
  if (tir_buffer_numel(y) == 0) return NULL;
  tir_ctx_t* c = ctx->tir;
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_expr_t* v;
  if (kiln_dtype_is_float(y->dtype)) {
    v = tir_add(c, kiln_lew_f32(c, kiln_lew_load0(c, s)),
                tir_mul(c, tir_cast(c, y->dtype == KILN_DTYPE_F64 ? KILN_DTYPE_F64 : KILN_DTYPE_F32, n.idx[0]),
                        kiln_lew_f32(c, kiln_lew_load0(c, d))));
  } else {
    v = tir_add(c, tir_cast(c, KILN_DTYPE_I64, kiln_lew_load0(c, s)),
                tir_mul(c, n.idx[0], tir_cast(c, KILN_DTYPE_I64, kiln_lew_load0(c, d))));
  }
  if (v->dtype != y->dtype) v = tir_cast(c, y->dtype, v);
  const tir_buffer_t* params[3] = {s, d, y};
  return kiln_lew_emit(ctx, &n, kiln_lew_loops(c, &n, kiln_lew_store(c, &n, y, v)), 3, params, true);
}

/* ---- Trilu / EyeLike --------------------------------------------------------------- */

/* column - row of the last two nest dims, compared with |k| (I64). */
static const tir_expr_t* diag_cmp(tir_ctx_t* c, const kiln_lew_nest_t* n, tir_binop_t op, const tir_expr_t* k) {
  const int32_t r = n->rank;
  return tir_bin(c, op, tir_sub(c, n->idx[r - 1], n->idx[r - 2]), k);
}

kiln_status_t kiln_lower_tensor_trilu(kiln_lower_ctx_t* ctx) {
  const tir_buffer_t *x, *y;
  TRY(io(ctx, "Trilu", &x, &y));
  tir_ctx_t* c = ctx->tir;
  if (x->rank < 2 || y->rank != x->rank || y->dtype != x->dtype || tir_buffer_numel(y) != tir_buffer_numel(x))
    return mismatch("Trilu");
  if (tir_buffer_numel(y) == 0) return NULL;
  int64_t upper = 1;
  TRY(kiln_attr_int(ctx->node, "upper", 1, &upper));
  const tir_buffer_t* kb = kiln_lew_in(ctx, 1);
  const kiln_array_t* kv = kiln_lew_const_in(ctx, 1);
  const tir_expr_t* k = tir_int(c, 0);
  if (kb && (kb->dtype != KILN_DTYPE_I64 || tir_buffer_numel(kb) != 1))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Trilu: k must be an i64 scalar");
  if (kv) k = tir_int(c, kiln_load_i64(kv->dtype, kv->data, 0));
  else if (kb) k = kiln_lew_load0(c, kb);
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_expr_t* keep = diag_cmp(c, &n, upper ? TIR_GE : TIR_LE, k);
  const tir_expr_t* v = tir_select(c, keep, tir_load(c, x, n.idx), kiln_lew_imm(c, y->dtype, 0.0));
  const tir_stmt_t* body = kiln_lew_loops(c, &n, kiln_lew_store(c, &n, y, v));
  const tir_buffer_t* params[3] = {x, kv ? NULL : kb, y};
  return kiln_lew_emit(ctx, &n, body, 3, params, true);
}

kiln_status_t kiln_lower_tensor_eye_like(kiln_lower_ctx_t* ctx) {
  const tir_buffer_t *x, *y;
  TRY(io(ctx, "EyeLike", &x, &y));
  tir_ctx_t* c = ctx->tir;
  kiln_dtype_t dt;
  TRY(kiln_tensor_eye_like_dtype(ctx->node, x->dtype, &dt));
  if (y->rank != 2 || x->rank != 2 || y->dtype != dt || y->shape[0] != x->shape[0] || y->shape[1] != x->shape[1])
    return mismatch("EyeLike");
  int64_t k = 0;
  TRY(kiln_attr_int(ctx->node, "k", 0, &k));
  if (tir_buffer_numel(y) == 0) return NULL;
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_expr_t* v = tir_select(c, diag_cmp(c, &n, TIR_EQ, tir_int(c, k)), kiln_lew_imm(c, dt, 1.0),
                                   kiln_lew_imm(c, dt, 0.0));
  const tir_stmt_t* body = kiln_lew_loops(c, &n, kiln_lew_store(c, &n, y, v));
  return kiln_lew_emit(ctx, &n, body, 1, &y, true);
}

/* ---- Size ------------------------------------------------------------------------- */

kiln_status_t kiln_lower_tensor_size(kiln_lower_ctx_t* ctx) {
  const tir_buffer_t *x, *y;
  TRY(io(ctx, "Size", &x, &y));
  if (y->dtype != KILN_DTYPE_I64 || tir_buffer_numel(y) != 1) return mismatch("Size");
  return kiln_lew_fill(ctx, y, tir_int(ctx->tir, tir_buffer_numel(x)));
}

/* ---- OneHot ----------------------------------------------------------------------- */

kiln_status_t kiln_lower_tensor_one_hot(kiln_lower_ctx_t* ctx) {
  const tir_buffer_t *ind, *y;
  TRY(io(ctx, "OneHot", &ind, &y));
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* val = kiln_lew_in(ctx, 2);
  if (!val || tir_buffer_numel(val) != 2 || val->dtype != y->dtype)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "OneHot: values must hold 2 elements of the output's dtype");
  if (ind->dtype == KILN_DTYPE_BOOL) return kiln_make_status(KILN_INVALID_ARGUMENT, "OneHot: indices are bool");
  const int32_t q = ind->rank;
  int64_t a = -1;
  TRY(kiln_attr_int(ctx->node, "axis", -1, &a));
  if (a < -(int64_t)(q + 1) || a > q) return kiln_make_status(KILN_INVALID_ARGUMENT, "OneHot: axis %lld out of range", (long long)a);
  const int32_t axis = (int32_t)(a < 0 ? a + q + 1 : a);
  if (y->rank != q + 1) return mismatch("OneHot");
  const int64_t depth = y->shape[axis];
  for (int32_t k = 0, j = 0; k <= q; ++k)
    if (k != axis && y->shape[k] != ind->shape[j++]) return mismatch("OneHot");
  if (tir_buffer_numel(y) == 0) return NULL;
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_expr_t* at[KILN_MAX_RANK];
  for (int32_t k = 0, j = 0; k <= q; ++k)
    if (k != axis) at[j++] = n.idx[k];
  const tir_expr_t* i = tir_load(c, ind, at);
  const tir_expr_t* pos = n.idx[axis];
  /* i32 indices stay i32 (see kiln_ltx_safe_index); floats truncate. */
  kiln_dtype_t dt = ind->dtype == KILN_DTYPE_I64 || kiln_dtype_is_float(ind->dtype) ? KILN_DTYPE_I64 : KILN_DTYPE_I32;
  if (kiln_dtype_is_float(ind->dtype)) i = kiln_lew_f2i(c, KILN_DTYPE_I64, kiln_lew_f32(c, i));
  else if (i->dtype != dt) i = tir_cast(c, dt, i);
  if (dt == KILN_DTYPE_I32) pos = tir_cast(c, KILN_DTYPE_I32, pos);
  const tir_expr_t* z = kiln_lew_imm_i(c, dt, 0);
  i = tir_select(c, tir_bin(c, TIR_LT, i, z), tir_add(c, i, kiln_lew_imm_i(c, dt, depth)), i);
  const tir_expr_t* on[1] = {tir_int(c, 1)};
  const tir_expr_t* off[1] = {tir_int(c, 0)};
  const tir_expr_t* hit = tir_bin(c, TIR_EQ, i, pos);
  if (kiln_dtype_is_float(ind->dtype)) { /* a NaN index matches nothing (the reference's rule) */
    const tir_expr_t* f = kiln_lew_f32(c, tir_load(c, ind, at));
    hit = tir_bin(c, TIR_AND, hit, tir_bin(c, TIR_EQ, f, f));
  }
  const tir_expr_t* v = tir_select(c, hit, tir_load(c, val, on), tir_load(c, val, off));
  const tir_stmt_t* body = kiln_lew_loops(c, &n, kiln_lew_store(c, &n, y, v));
  const tir_buffer_t* params[3] = {ind, val, y};
  return kiln_lew_emit(ctx, &n, body, 3, params, false);
}

/* ---- DepthToSpace / SpaceToDepth ---------------------------------------------------- */

static kiln_status_t lower_d2s(kiln_lower_ctx_t* ctx, const char* op, bool d2s) {
  const tir_buffer_t *x, *y;
  TRY(io(ctx, op, &x, &y));
  tir_ctx_t* c = ctx->tir;
  int64_t b;
  bool crd;
  TRY(kiln_tensor_d2s_attrs(ctx->node, op, &b, &crd));
  if (x->rank != 4 || y->rank != 4 || y->dtype != x->dtype || tir_buffer_numel(y) != tir_buffer_numel(x))
    return mismatch(op);
  const int64_t* big = d2s ? x->shape : y->shape; /* the side with C * b * b channels */
  const int64_t* small = d2s ? y->shape : x->shape;
  if (big[1] != small[1] * b * b || small[2] != big[2] * b || small[3] != big[3] * b) return mismatch(op);
  if (tir_buffer_numel(y) == 0) return NULL;
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_expr_t* B = tir_int(c, b);
  const tir_expr_t* idx[4];
  idx[0] = n.idx[0];
  if (d2s) {
    /* y[n, c, h*b+i, w*b+j] = x[n, DCR: (i*b+j)*C'+c | CRD: (c*b+i)*b+j, h, w] */
    const tir_expr_t* i = tir_bin(c, TIR_FLOORMOD, n.idx[2], B);
    const tir_expr_t* j = tir_bin(c, TIR_FLOORMOD, n.idx[3], B);
    const tir_expr_t* ch =
        crd ? tir_add(c, tir_mul(c, tir_add(c, tir_mul(c, n.idx[1], B), i), B), j)
            : tir_add(c, tir_mul(c, tir_add(c, tir_mul(c, i, B), j), tir_int(c, y->shape[1])), n.idx[1]);
    idx[1] = ch;
    idx[2] = tir_bin(c, TIR_FLOORDIV, n.idx[2], B);
    idx[3] = tir_bin(c, TIR_FLOORDIV, n.idx[3], B);
  } else {
    /* y[n, (i*b+j)*C+c, h, w] = x[n, c, h*b+i, w*b+j] */
    const tir_expr_t* C = tir_int(c, x->shape[1]);
    const tir_expr_t* ij = tir_bin(c, TIR_FLOORDIV, n.idx[1], C);
    idx[1] = tir_bin(c, TIR_FLOORMOD, n.idx[1], C);
    idx[2] = tir_add(c, tir_mul(c, n.idx[2], B), tir_bin(c, TIR_FLOORDIV, ij, B));
    idx[3] = tir_add(c, tir_mul(c, n.idx[3], B), tir_bin(c, TIR_FLOORMOD, ij, B));
  }
  const tir_stmt_t* body = kiln_lew_loops(c, &n, kiln_lew_store(c, &n, y, tir_load(c, x, idx)));
  const tir_buffer_t* params[2] = {x, y};
  return kiln_lew_emit(ctx, &n, body, 2, params, false);
}

kiln_status_t kiln_lower_tensor_depth_to_space(kiln_lower_ctx_t* ctx) {
  return lower_d2s(ctx, "DepthToSpace", true);
}
kiln_status_t kiln_lower_tensor_space_to_depth(kiln_lower_ctx_t* ctx) {
  return lower_d2s(ctx, "SpaceToDepth", false);
}
