/* Lowering of the tensor op family (ir/ops/tensor*.c) to TIR.
 *
 * Reshape, Flatten, Squeeze and Unsqueeze alias their input. The others are
 * one loop nest over the output (Concat: one per input, Split: one per
 * output) whose loads are affine in the loop variables wherever the op
 * allows it:
 *   Expand, Transpose, Slice, Concat, Split: pure index maps;
 *   Pad: per axis, the source index is a clamp (edge), floor-mod (wrap) or
 *        folded floor-mod (reflect) of the output index; constant mode
 *        selects the fill value outside the kept part;
 *   Gather: the index is loaded, made non-negative and CLAMPED to the axis
 *        ([0, n-1]) so the kernel never reads out of bounds; an index
 *        outside [-n, n) still fails the run as in the reference: a check
 *        kernel before it stores a code into a status word the runtime
 *        reads (kiln_lew_check);
 *   Resize: source coordinates are computed at lowering time in double with
 *        the reference's formulas; per axis the index map becomes an affine
 *        / floordiv expression when it is one (identity, integer up- or
 *        down-sampling) and a constant i64 table otherwise; linear weights
 *        are f32 tables (the reference accumulates in double: ~1e-7
 *        relative difference).
 * Integer inputs that decide the kernel (Pad pads/axes, Slice starts/ends/
 * axes/steps, Resize scales/sizes/roi, Split sizes) must be constants; a
 * run-time value is KILN_UNSUPPORTED. Run-time data inputs (Gather
 * indices, Pad constant_value) are loaded by the kernel.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/op.h"
#include "ir/ops/resize.h"
#include "ir/ops/slice.h"
#include "lowering/lower_ew_impl.h"
#include "lowering/lower_tensor_impl.h"

#define TRY(expr)                  \
  do {                             \
    kiln_status_t try_s_ = (expr); \
    if (try_s_) return try_s_;     \
  } while (0)

#define MAX_INTS (2 * KILN_MAX_RANK)

static kiln_status_t need_io(const kiln_lower_ctx_t* ctx, const char* op) {
  if (!kiln_lew_in(ctx, 0) || !kiln_lew_out(ctx, 0))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: missing input or output", op);
  return NULL;
}

static kiln_status_t norm_axis(const char* op, int64_t axis, int32_t rank, int32_t* out) {
  if (axis < -(int64_t)rank || axis >= rank) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: axis %lld is out of range for rank %d", op,
                            (long long)axis, (int)rank);
  }
  *out = (int32_t)(axis < 0 ? axis + rank : axis);
  return NULL;
}

/* ---- aliases ------------------------------------------------------------ */

static kiln_status_t lower_alias(kiln_lower_ctx_t* ctx) {
  TRY(need_io(ctx, ctx->node->op_type));
  return kiln_lower_alias(ctx, 0, 0);
}

/* ---- Expand -------------------------------------------------------------- */

static kiln_status_t lower_expand(kiln_lower_ctx_t* ctx) {
  TRY(need_io(ctx, "Expand"));
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* x = ctx->in[0];
  const tir_buffer_t* y = ctx->out[0];
  if (x->rank > y->rank || x->dtype != y->dtype)
    return kiln_make_status(KILN_INTERNAL, "Expand: output does not match input");
  for (int32_t k = 0; k < x->rank; ++k) {
    int64_t d = x->shape[k], o = y->shape[y->rank - x->rank + k];
    if (d != o && d != 1)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "Expand: input does not broadcast to output");
  }
  if (tir_buffer_numel(y) == 0) return NULL;
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_stmt_t* body = kiln_lew_loops(c, &n, kiln_lew_store(c, &n, y, kiln_lew_bload(c, &n, x)));
  const tir_buffer_t* params[2] = {x, y};
  return kiln_lew_emit(ctx, &n, body, 2, params, true);
}

/* ---- Shape, Constant, ConstantOfShape ---------------------------------------- */

static kiln_status_t lower_shape(kiln_lower_ctx_t* ctx) {
  TRY(need_io(ctx, "Shape"));
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* x = ctx->in[0];
  const tir_buffer_t* y = ctx->out[0];
  int32_t rank = x->rank;
  int64_t start = 0, end = rank;
  TRY(kiln_attr_int(ctx->node, "start", 0, &start));
  TRY(kiln_attr_int(ctx->node, "end", rank, &end));
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = start < 0 ? 0 : (start > rank ? rank : start);
  end = end < 0 ? 0 : (end > rank ? rank : end);
  if (end < start) end = start;
  if (y->dtype != KILN_DTYPE_I64 || y->rank != 1 || y->shape[0] != end - start)
    return kiln_make_status(KILN_INTERNAL, "Shape: output does not match input");
  if (end == start) return NULL;
  const tir_stmt_t* st[KILN_MAX_RANK];
  for (int64_t k = start; k < end; ++k) {
    const tir_expr_t* i[1] = {tir_int(c, k - start)};
    st[k - start] = tir_store(c, y, i, tir_int(c, x->shape[k]));
  }
  kiln_lew_nest_t n;
  kiln_lew_nest(c, &n, 0, NULL);
  return kiln_lew_emit(ctx, &n, tir_seq(c, (int32_t)(end - start), st), 1, &y, false);
}

/* Copies |value| (a compile-time array) into output 0. */
static kiln_status_t copy_value(kiln_lower_ctx_t* ctx, const char* op, const kiln_array_t* value) {
  const tir_buffer_t* y = ctx->out[0];
  if (value->dtype != y->dtype || kiln_array_numel(value) != tir_buffer_numel(y))
    return kiln_make_status(KILN_INTERNAL, "%s: output does not match the value", op);
  if (tir_buffer_numel(y) == 0) return NULL;
  kiln_array_t copy;
  kiln_shape_t s = kiln_shape_make(y->rank, y->shape);
  TRY(kiln_array_alloc(kiln_allocator_system(), y->dtype, &s, &copy));
  memcpy(copy.data, value->data, copy.nbytes);
  const tir_buffer_t* src = NULL;
  TRY(kiln_lower_const(ctx, "value", &copy, &src));
  tir_ctx_t* c = ctx->tir;
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_stmt_t* body = kiln_lew_loops(c, &n, kiln_lew_store(c, &n, y, tir_load(c, src, n.idx)));
  const tir_buffer_t* params[2] = {y, src};
  return kiln_lew_emit(ctx, &n, body, 2, params, true);
}

static kiln_status_t lower_constant(kiln_lower_ctx_t* ctx) {
  if (!kiln_lew_out(ctx, 0) || !ctx->out_tensor[0])
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Constant: missing output");
  const kiln_tensor_t* t = ctx->out_tensor[0];
  if (!(t->flags & KILN_TENSOR_CONST))
    return kiln_make_status(KILN_INTERNAL, "Constant: output value unknown after inference");
  return copy_value(ctx, "Constant", &t->value);
}

/* Immediate of dtype |t| holding element 0 of |a| (same dtype). */
static const tir_expr_t* imm_of(tir_ctx_t* c, kiln_dtype_t t, const void* data) {
  if (kiln_dtype_is_float(t)) return kiln_lew_imm(c, t, kiln_load_f64(t, data, 0));
  return kiln_lew_imm_i(c, t, kiln_load_i64(t, data, 0));
}

static bool finite_elem(kiln_dtype_t t, const void* data) {
  return !kiln_dtype_is_float(t) || isfinite(kiln_load_f64(t, data, 0));
}

static kiln_status_t lower_constant_of_shape(kiln_lower_ctx_t* ctx) {
  TRY(need_io(ctx, "ConstantOfShape"));
  const tir_buffer_t* y = ctx->out[0];
  const kiln_attr_t* a = kiln_node_attr(ctx->node, "value");
  unsigned char zero[8] = {0};
  const void* elem = zero;
  if (a) {
    if (a->type != KILN_ATTR_TENSOR || !a->tensor || a->tensor->dtype != y->dtype ||
        kiln_array_numel(a->tensor) != 1)
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "ConstantOfShape: attribute 'value' is not a one-element %s tensor",
                              kiln_dtype_name(y->dtype));
    elem = a->tensor->data;
  }
  if (!finite_elem(y->dtype, elem)) {
    /* inf/NaN fill: copy from a one-element constant instead of an
     * immediate the printer would have to spell. */
    if (tir_buffer_numel(y) == 0) return NULL;
    kiln_array_t v;
    kiln_shape_t s = kiln_shape_make(0, NULL);
    TRY(kiln_array_alloc(kiln_allocator_system(), y->dtype, &s, &v));
    memcpy(v.data, elem, v.nbytes);
    const tir_buffer_t* src = NULL;
    TRY(kiln_lower_const(ctx, "value", &v, &src));
    tir_ctx_t* c = ctx->tir;
    kiln_lew_nest_t n;
    kiln_lew_nest_buf(c, &n, y);
    const tir_stmt_t* body = kiln_lew_loops(c, &n, kiln_lew_store(c, &n, y, kiln_lew_load0(c, src)));
    const tir_buffer_t* params[2] = {y, src};
    return kiln_lew_emit(ctx, &n, body, 2, params, true);
  }
  return kiln_lew_fill(ctx, y, imm_of(ctx->tir, y->dtype, elem));
}

/* ---- Transpose --------------------------------------------------------------- */

static kiln_status_t lower_transpose(kiln_lower_ctx_t* ctx) {
  TRY(need_io(ctx, "Transpose"));
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* x = ctx->in[0];
  const tir_buffer_t* y = ctx->out[0];
  int32_t r = x->rank, perm[KILN_MAX_RANK];
  const int64_t* p = NULL;
  int64_t np = -1;
  TRY(kiln_attr_ints(ctx->node, "perm", &p, &np));
  bool seen[KILN_MAX_RANK] = {false};
  for (int32_t k = 0; k < r; ++k) {
    perm[k] = np < 0 ? r - 1 - k : (k < np ? (int32_t)p[k] : -1);
    if ((np >= 0 && np != r) || perm[k] < 0 || perm[k] >= r || seen[perm[k]])
      return kiln_make_status(KILN_INVALID_ARGUMENT, "Transpose: perm is not a permutation of %d axes",
                              (int)r);
    seen[perm[k]] = true;
    if (y->shape[k] != x->shape[perm[k]])
      return kiln_make_status(KILN_INTERNAL, "Transpose: output shape mismatch");
  }
  if (tir_buffer_numel(y) == 0) return NULL;
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_expr_t* idx[KILN_MAX_RANK];
  for (int32_t k = 0; k < r; ++k) idx[perm[k]] = n.idx[k];
  const tir_stmt_t* body = kiln_lew_loops(c, &n, kiln_lew_store(c, &n, y, tir_load(c, x, idx)));
  const tir_buffer_t* params[2] = {x, y};
  /* SIMD only pays when the input is contiguous along the inner dim too. */
  return kiln_lew_emit(ctx, &n, body, 2, params, r == 0 || perm[r - 1] == r - 1);
}

/* ---- Concat / Split ------------------------------------------------------------ */

static kiln_status_t lower_concat(kiln_lower_ctx_t* ctx) {
  if (!kiln_lew_out(ctx, 0)) return kiln_make_status(KILN_INVALID_ARGUMENT, "Concat: missing output");
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* y = ctx->out[0];
  int64_t a = 1;
  if (ctx->opset >= 4) TRY(kiln_attr_int_required(ctx->node, "axis", &a));
  else TRY(kiln_attr_int(ctx->node, "axis", 1, &a));
  int32_t axis = 0;
  if (y->rank == 0) return kiln_make_status(KILN_INVALID_ARGUMENT, "Concat: inputs are scalars");
  TRY(norm_axis("Concat", a, y->rank, &axis));
  int64_t off = 0;
  for (int32_t i = 0; i < ctx->n_in; ++i) {
    const tir_buffer_t* x = ctx->in[i];
    if (!x || x->rank != y->rank || x->dtype != y->dtype)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "Concat: input %d does not match the output",
                              (int)i);
    for (int32_t k = 0; k < y->rank; ++k)
      if (k != axis && x->shape[k] != y->shape[k])
        return kiln_make_status(KILN_INVALID_ARGUMENT, "Concat: input %d does not match the output",
                                (int)i);
    if (off + x->shape[axis] > y->shape[axis])
      return kiln_make_status(KILN_INTERNAL, "Concat: output axis too small");
    if (tir_buffer_numel(x) > 0) {
      kiln_lew_nest_t n;
      kiln_lew_nest_buf(c, &n, x);
      const tir_expr_t* idx[KILN_MAX_RANK];
      for (int32_t k = 0; k < y->rank; ++k)
        idx[k] = k == axis ? tir_add(c, n.idx[k], tir_int(c, off)) : n.idx[k];
      const tir_stmt_t* body = kiln_lew_loops(c, &n, tir_store(c, y, idx, tir_load(c, x, n.idx)));
      const tir_buffer_t* params[2] = {x, y};
      TRY(kiln_lew_emit(ctx, &n, body, 2, params, true));
    }
    off += x->shape[axis];
  }
  if (off != y->shape[axis]) return kiln_make_status(KILN_INTERNAL, "Concat: output axis size mismatch");
  return NULL;
}

/* Sizes of Split's parts along an axis of size |dim| (as the reference). */
static kiln_status_t split_sizes(const kiln_lower_ctx_t* ctx, int64_t dim, int64_t* sizes) {
  const int32_t n_out = ctx->n_out;
  int64_t n_list = -1;
  const int64_t* attr = NULL;
  if (kiln_lew_in(ctx, 1)) {
    const kiln_array_t* v = kiln_lew_const_in(ctx, 1);
    if (!v)
      return kiln_make_status(KILN_UNSUPPORTED,
                              "Split: input 'split' computed at run time is not supported");
    n_list = kiln_array_numel(v);
    if (n_list == n_out)
      for (int32_t i = 0; i < n_out; ++i) sizes[i] = kiln_load_i64(v->dtype, v->data, (size_t)i);
  } else if (ctx->opset < 13) {
    TRY(kiln_attr_ints(ctx->node, "split", &attr, &n_list));
    if (n_list == n_out)
      for (int32_t i = 0; i < n_out; ++i) sizes[i] = attr[i];
  }
  if (n_list > 0) {
    if (n_list != n_out)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "Split: 'split' has %lld entries for %d outputs",
                              (long long)n_list, (int)n_out);
    return NULL;
  }
  int64_t chunk = ctx->opset >= 18 ? (dim + n_out - 1) / n_out : dim / n_out;
  for (int32_t i = 0; i < n_out; ++i) sizes[i] = i == n_out - 1 ? dim - chunk * (n_out - 1) : chunk;
  return NULL;
}

static kiln_status_t lower_split(kiln_lower_ctx_t* ctx) {
  if (!kiln_lew_in(ctx, 0)) return kiln_make_status(KILN_INVALID_ARGUMENT, "Split: missing input");
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* x = ctx->in[0];
  int64_t a = 0;
  int32_t axis = 0;
  TRY(kiln_attr_int(ctx->node, "axis", 0, &a));
  TRY(norm_axis("Split", a, x->rank, &axis));
  int64_t* sizes = kiln_arena_alloc(&c->arena, sizeof(int64_t) * (size_t)(ctx->n_out + 1));
  if (!sizes) return kiln_make_status(KILN_OUT_OF_MEMORY, "Split: out of memory");
  /* Present outputs carry their sizes; the plan is needed for gaps only. */
  bool all = true;
  for (int32_t i = 0; i < ctx->n_out; ++i) {
    if (ctx->out[i]) sizes[i] = ctx->out[i]->shape[axis];
    else all = false;
  }
  if (!all) TRY(split_sizes(ctx, x->shape[axis], sizes));
  int64_t off = 0;
  for (int32_t i = 0; i < ctx->n_out; ++i) {
    const tir_buffer_t* y = ctx->out[i];
    if (y) {
      bool ok = y->rank == x->rank && y->dtype == x->dtype && off + y->shape[axis] <= x->shape[axis];
      for (int32_t k = 0; ok && k < x->rank; ++k) ok = k == axis || y->shape[k] == x->shape[k];
      if (!ok) return kiln_make_status(KILN_INTERNAL, "Split: output %d shape mismatch", (int)i);
      if (tir_buffer_numel(y) > 0) {
        kiln_lew_nest_t n;
        kiln_lew_nest_buf(c, &n, y);
        const tir_expr_t* idx[KILN_MAX_RANK];
        for (int32_t k = 0; k < x->rank; ++k)
          idx[k] = k == axis ? tir_add(c, n.idx[k], tir_int(c, off)) : n.idx[k];
        const tir_stmt_t* body =
            kiln_lew_loops(c, &n, kiln_lew_store(c, &n, y, tir_load(c, x, idx)));
        const tir_buffer_t* params[2] = {x, y};
        TRY(kiln_lew_emit(ctx, &n, body, 2, params, true));
      }
    }
    off += sizes[i];
  }
  return NULL;
}

/* ---- Slice ------------------------------------------------------------------ */

/* Arguments: attributes before opset 10, else the constant inputs (their
 * values decide the kernel); parsing and the plan are the reference's. */
static kiln_status_t slice_args(const kiln_lower_ctx_t* ctx, slice_args_t* a) {
  if (ctx->opset < 10) return kiln_slice_args_attr(ctx->node, a);
  static const char* const names[] = {"starts", "ends", "axes", "steps"};
  const kiln_array_t* v[4] = {NULL, NULL, NULL, NULL};
  for (int32_t k = 0; k < 4; ++k) {
    if (!kiln_lew_in(ctx, k + 1)) continue;
    v[k] = kiln_lew_const_in(ctx, k + 1);
    if (!v[k])
      return kiln_make_status(KILN_UNSUPPORTED,
                              "Slice: input '%s' is computed at run time; kiln compiles only a "
                              "constant '%s' (its values decide the kernel)",
                              names[k], names[k]);
  }
  return kiln_slice_args_arrays(v, a);
}

static kiln_status_t lower_slice(kiln_lower_ctx_t* ctx) {
  TRY(need_io(ctx, "Slice"));
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* x = ctx->in[0];
  const tir_buffer_t* y = ctx->out[0];
  const int32_t r = x->rank;
  slice_args_t a;
  TRY(slice_args(ctx, &a));
  int64_t start[KILN_MAX_RANK], step[KILN_MAX_RANK], count[KILN_MAX_RANK];
  kiln_shape_t xshape = kiln_shape_make(r, x->shape);
  TRY(kiln_slice_plan(&a, &xshape, start, step, count));
  if (y->rank != r || y->dtype != x->dtype)
    return kiln_make_status(KILN_INTERNAL, "Slice: output does not match input");
  for (int32_t k = 0; k < r; ++k)
    if (y->shape[k] != count[k]) return kiln_make_status(KILN_INTERNAL, "Slice: output shape mismatch");
  if (tir_buffer_numel(y) == 0) return NULL;
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_expr_t* idx[KILN_MAX_RANK];
  for (int32_t k = 0; k < r; ++k) {
    /* A one-element axis keeps step 1 so a huge step cannot overflow. */
    int64_t st = count[k] > 1 ? step[k] : 1;
    const tir_expr_t* e = n.idx[k];
    if (st != 1) e = tir_mul(c, e, tir_int(c, st));
    if (start[k] != 0) e = tir_add(c, e, tir_int(c, start[k]));
    idx[k] = e;
  }
  const tir_stmt_t* body = kiln_lew_loops(c, &n, kiln_lew_store(c, &n, y, tir_load(c, x, idx)));
  const tir_buffer_t* params[2] = {x, y};
  return kiln_lew_emit(ctx, &n, body, 2, params, r == 0 || step[r - 1] == 1);
}

/* ---- Gather ----------------------------------------------------------------- */

/* An index outside [-n, n) (n = *user, the axis' extent). */
static const tir_expr_t* index_bad(tir_ctx_t* c, const tir_expr_t* v, const void* user) {
  const int64_t n = *(const int64_t*)user;
  /* i32 indices compare as i32 (no widening in the kernel) when n fits. */
  if (v->dtype == KILN_DTYPE_I32 && n <= INT32_MAX)
    return tir_bin(c, TIR_OR, tir_bin(c, TIR_LT, v, kiln_lew_imm_i(c, v->dtype, -n)),
                   tir_bin(c, TIR_GE, v, kiln_lew_imm_i(c, v->dtype, n)));
  const tir_expr_t* j = tir_cast(c, KILN_DTYPE_I64, v);
  return tir_bin(c, TIR_OR, tir_bin(c, TIR_LT, j, tir_int(c, -n)), tir_bin(c, TIR_GE, j, tir_int(c, n)));
}

static kiln_status_t lower_gather(kiln_lower_ctx_t* ctx) {
  TRY(need_io(ctx, "Gather"));
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* x = ctx->in[0];
  const tir_buffer_t* ind = kiln_lew_in(ctx, 1);
  const tir_buffer_t* y = ctx->out[0];
  if (!ind) return kiln_make_status(KILN_INVALID_ARGUMENT, "Gather: missing input 'indices'");
  if (ind->dtype != KILN_DTYPE_I64 && ind->dtype != KILN_DTYPE_I32)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Gather: indices have dtype %s",
                            kiln_dtype_name(ind->dtype));
  if (x->rank == 0) return kiln_make_status(KILN_INVALID_ARGUMENT, "Gather: data is a scalar");
  int64_t a = 0;
  int32_t axis = 0;
  TRY(kiln_attr_int(ctx->node, "axis", 0, &a));
  TRY(norm_axis("Gather", a, x->rank, &axis));
  const int32_t q = ind->rank;
  if (y->rank != q + x->rank - 1 || y->dtype != x->dtype)
    return kiln_make_status(KILN_INTERNAL, "Gather: output shape mismatch");
  if (tir_buffer_numel(y) == 0) return NULL;
  const int64_t nax = x->shape[axis];
  /* Run-time indices are checked like the reference does; constant ones
   * were checked at load (ir/ops/tensor_move.c). */
  if (!kiln_lew_const_in(ctx, 1)) TRY(kiln_lew_check(ctx, ind, index_bad, &nax, KILN_CHECK_INDEX_RANGE));
  if (nax == 0) return kiln_lew_fill(ctx, y, kiln_lew_imm(c, y->dtype, 0.0));
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_expr_t* j = tir_load(c, ind, &n.idx[axis]);
  if (ind->dtype == KILN_DTYPE_I32 && nax <= INT32_MAX) {
    /* i32 indices are made non-negative and clamped as i32 and widened
     * only then: lavapipe widens a negative GLSL int to int64_t wrongly
     * (found by tests/test_bad_runtime_arith). */
    const tir_expr_t* z = kiln_lew_imm_i(c, KILN_DTYPE_I32, 0);
    j = tir_select(c, tir_bin(c, TIR_LT, j, z), tir_add(c, j, kiln_lew_imm_i(c, KILN_DTYPE_I32, nax)), j);
    j = tir_bin(c, TIR_MIN, tir_bin(c, TIR_MAX, j, z), kiln_lew_imm_i(c, KILN_DTYPE_I32, nax - 1));
    j = tir_cast(c, KILN_DTYPE_I64, j);
  } else {
    j = tir_cast(c, KILN_DTYPE_I64, j);
    j = tir_select(c, tir_bin(c, TIR_LT, j, tir_int(c, 0)), tir_add(c, j, tir_int(c, nax)), j);
    j = kiln_lew_clamp(c, j, 0, nax - 1);
  }
  const tir_expr_t* idx[KILN_MAX_RANK];
  for (int32_t k = 0; k < x->rank; ++k)
    idx[k] = k < axis ? n.idx[k] : k == axis ? j : n.idx[k + q - 1];
  const tir_stmt_t* body = kiln_lew_loops(c, &n, kiln_lew_store(c, &n, y, tir_load(c, x, idx)));
  const tir_buffer_t* params[3] = {x, ind, y};
  return kiln_lew_emit(ctx, &n, body, 3, params, axis < x->rank - 1);
}

/* ---- Pad -------------------------------------------------------------------- */

enum { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE, PAD_WRAP };

static kiln_status_t lower_pad(kiln_lower_ctx_t* ctx) {
  TRY(need_io(ctx, "Pad"));
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* x = ctx->in[0];
  const tir_buffer_t* y = ctx->out[0];
  const int32_t r = x->rank;
  const kiln_dtype_t dt = x->dtype;
  const char* mode_name = NULL;
  TRY(kiln_attr_string(ctx->node, "mode", "constant", &mode_name));
  static const char* const modes[] = {"constant", "reflect", "edge", "wrap"};
  int mode = -1;
  for (int k = 0; k < 4; ++k)
    if (strcmp(mode_name, modes[k]) == 0) mode = k;
  if (mode < 0) return kiln_make_status(KILN_INVALID_ARGUMENT, "Pad: mode '%s' is unknown", mode_name);

  int64_t pads[MAX_INTS], axes[KILN_MAX_RANK], n_pads = 0, n_axes = -1;
  const tir_expr_t* fill = kiln_lew_imm(c, dt, 0.0);
  const tir_buffer_t* fill_buf = NULL;
  if (ctx->opset < 11) {
    const int64_t* p = NULL;
    TRY(kiln_attr_ints(ctx->node, ctx->opset < 2 ? "paddings" : "pads", &p, &n_pads));
    if (n_pads < 0 || n_pads > MAX_INTS)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "Pad: missing or oversized pads attribute");
    memcpy(pads, p, sizeof(int64_t) * (size_t)n_pads);
    float value = 0.0f;
    TRY(kiln_attr_float(ctx->node, "value", 0.0f, &value));
    unsigned char e[8] = {0};
    kiln_store_f64(dt, e, 0, value);
    fill = finite_elem(dt, e) ? imm_of(c, dt, e) : kiln_lew_imm(c, dt, value);
  } else {
    if (!kiln_lew_in(ctx, 1)) return kiln_make_status(KILN_INVALID_ARGUMENT, "Pad: missing input 'pads'");
    TRY(kiln_lew_read_ints(ctx, 1, "Pad", "pads", pads, MAX_INTS, &n_pads));
    if (kiln_lew_in(ctx, 3)) TRY(kiln_lew_read_ints(ctx, 3, "Pad", "axes", axes, KILN_MAX_RANK, &n_axes));
    const tir_buffer_t* cv = kiln_lew_in(ctx, 2);
    if (cv && tir_buffer_numel(cv) > 0) {
      if (cv->dtype != dt)
        return kiln_make_status(KILN_INVALID_ARGUMENT, "Pad: constant_value has dtype %s, data has %s",
                                kiln_dtype_name(cv->dtype), kiln_dtype_name(dt));
      const kiln_array_t* v = kiln_lew_const_in(ctx, 2);
      if (v && finite_elem(dt, v->data)) {
        fill = imm_of(c, dt, v->data);
      } else {
        fill = kiln_lew_load0(c, cv); /* run-time or non-finite value */
        fill_buf = cv;
      }
    }
  }
  /* Spread the pads over the axes. */
  int64_t begin[KILN_MAX_RANK] = {0}, end[KILN_MAX_RANK] = {0};
  int32_t norm[KILN_MAX_RANK];
  if (n_axes < 0) {
    n_axes = r;
    for (int32_t k = 0; k < r; ++k) norm[k] = k;
  } else {
    bool seen[KILN_MAX_RANK] = {false};
    for (int64_t k = 0; k < n_axes; ++k) {
      TRY(norm_axis("Pad", axes[k], r, &norm[k]));
      if (seen[norm[k]]) return kiln_make_status(KILN_INVALID_ARGUMENT, "Pad: axis repeated");
      seen[norm[k]] = true;
    }
  }
  if (n_pads != 2 * n_axes)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Pad: pads has %lld entries, expected %lld",
                            (long long)n_pads, (long long)(2 * n_axes));
  for (int64_t k = 0; k < n_axes; ++k) {
    begin[norm[k]] = pads[k];
    end[norm[k]] = pads[n_axes + k];
  }
  if (y->rank != r || y->dtype != dt)
    return kiln_make_status(KILN_INTERNAL, "Pad: output does not match input");
  for (int32_t k = 0; k < r; ++k)
    if (y->shape[k] != x->shape[k] + begin[k] + end[k])
      return kiln_make_status(KILN_INTERNAL, "Pad: output shape mismatch");
  if (tir_buffer_numel(y) == 0) return NULL;

  kiln_lew_nest_t n;
  kiln_lew_nest_buf(c, &n, y);
  const tir_expr_t* idx[KILN_MAX_RANK];
  const tir_expr_t* inside = NULL; /* constant mode: within the kept part */
  bool all_fill = false;
  for (int32_t k = 0; k < r; ++k) {
    int64_t d = x->shape[k], b = begin[k], e = end[k];
    int64_t lo = b < 0 ? -b : 0;
    int64_t m = d - lo - (e < 0 ? -e : 0); /* elements kept after cropping */
    int64_t shift = b > 0 ? b : 0;
    if (b <= 0 && e <= 0) { /* no padding, maybe cropping: o + lo */
      idx[k] = lo ? tir_add(c, n.idx[k], tir_int(c, lo)) : n.idx[k];
      continue;
    }
    if (m <= 0) {
      if (mode != PAD_CONSTANT)
        return kiln_make_status(KILN_INVALID_ARGUMENT, "Pad: mode '%s' cannot pad empty axis %d",
                                mode_name, (int)k);
      all_fill = true;
      break;
    }
    const tir_expr_t* j = tir_sub(c, n.idx[k], tir_int(c, shift)); /* position in kept part */
    const tir_expr_t* f = j;
    if (mode == PAD_WRAP) {
      f = tir_bin(c, TIR_FLOORMOD, j, tir_int(c, m));
    } else if (mode == PAD_REFLECT) {
      if (m == 1) {
        f = tir_int(c, 0);
      } else {
        const tir_expr_t* t = tir_bin(c, TIR_FLOORMOD, j, tir_int(c, 2 * (m - 1)));
        f = tir_select(c, tir_bin(c, TIR_GE, t, tir_int(c, m)), tir_sub(c, tir_int(c, 2 * (m - 1)), t), t);
      }
    } else if (mode == PAD_CONSTANT) {
      const tir_expr_t* in_k = tir_bin(c, TIR_AND, tir_bin(c, TIR_GE, j, tir_int(c, 0)),
                                       tir_bin(c, TIR_LT, j, tir_int(c, m)));
      inside = inside ? tir_bin(c, TIR_AND, inside, in_k) : in_k;
    }
    /* The clamp is the edge rule, and keeps every mode's load provably in
     * bounds (the values it changes are the fill lanes of constant mode). */
    f = kiln_lew_clamp(c, f, 0, m - 1);
    idx[k] = lo ? tir_add(c, f, tir_int(c, lo)) : f;
  }
  const tir_expr_t* v;
  if (all_fill || tir_buffer_numel(x) == 0) {
    v = fill;
  } else {
    v = tir_load(c, x, idx);
    if (inside) v = tir_select(c, inside, v, fill);
  }
  const tir_stmt_t* body = kiln_lew_loops(c, &n, kiln_lew_store(c, &n, y, v));
  const tir_buffer_t* params[3] = {x, fill_buf, y};
  return kiln_lew_emit(ctx, &n, body, 3, params, true);
}

/* ---- Resize ------------------------------------------------------------------ */

/* Attributes, output sizes and source coordinates come from the same code as
 * the reference kernel (ir/ops/resize.h); the coordinates are computed here,
 * once per output index, in double, and baked into index/weight tables. */

/* Kernel under construction: the constant tables it reads (at most five
 * per axis: i0, i1, w0, w1, oob). */
typedef struct {
  kiln_lower_ctx_t* ctx;
  const tir_buffer_t* consts[5 * KILN_MAX_RANK];
  int32_t n_consts;
} rs_build_t;

/* A compile-time table of |n| values as a constant buffer. */
static kiln_status_t rs_table(rs_build_t* b, const char* name, kiln_dtype_t dt, int64_t n,
                              const void* data, const tir_buffer_t** out) {
  kiln_array_t arr;
  kiln_shape_t s = kiln_shape_make(1, &n);
  TRY(kiln_array_alloc(kiln_allocator_system(), dt, &s, &arr));
  memcpy(arr.data, data, arr.nbytes);
  TRY(kiln_lower_const(b->ctx, name, &arr, out));
  b->consts[b->n_consts++] = *out;
  return NULL;
}

/* Index expression for table |tab| (|out| entries in [0, d)) of loop index
 * |o|: affine (identity, constant, integer down-sampling) or floordiv
 * (integer up-sampling) when the table is one, else a clamped table load. */
static kiln_status_t rs_index(rs_build_t* b, const char* name, const int64_t* tab, int64_t out,
                              int64_t d, const tir_expr_t* o, const tir_expr_t** res) {
  tir_ctx_t* c = b->ctx->tir;
  if (out == 1) {
    *res = tir_int(c, tab[0]);
    return NULL;
  }
  int64_t s = tab[1] - tab[0], base = tab[0];
  bool ok = true;
  for (int64_t i = 0; ok && i < out; ++i) ok = tab[i] == base + s * i;
  if (ok) {
    const tir_expr_t* e = s == 1 ? o : tir_mul(c, o, tir_int(c, s));
    *res = base ? tir_add(c, e, tir_int(c, base)) : e;
    return NULL;
  }
  for (int64_t q = 2; q <= 16; ++q) {
    for (int64_t sh = 0; sh < q; ++sh) {
      ok = true;
      for (int64_t i = 0; ok && i < out; ++i) ok = tab[i] == (i + sh) / q;
      if (ok) {
        const tir_expr_t* e = sh ? tir_add(c, o, tir_int(c, sh)) : o;
        *res = tir_bin(c, TIR_FLOORDIV, e, tir_int(c, q));
        return NULL;
      }
    }
  }
  const tir_buffer_t* t;
  TRY(rs_table(b, name, KILN_DTYPE_I64, out, tab, &t));
  *res = kiln_lew_clamp(c, tir_load(c, t, &o), 0, d - 1);
  return NULL;
}

/* Filter taps (cubic, antialias, exclude_outside): per axis the tables of
 * kiln_resize_axis_taps become constants, an axis with one tap an index
 * expression (rs_index), and each output sums the taps of the mixing axes
 * in serial inner loops into a private f32 accumulator. */
static kiln_status_t lower_resize_taps(kiln_lower_ctx_t* ctx, const resize_attrs_t* a, const resize_plan_t* p,
                                       const double* roi_lo, const double* roi_hi) {
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* x = ctx->in[0];
  const tir_buffer_t* y = ctx->out[0];
  const int32_t r = x->rank;
  kiln_lew_nest_t nest;
  kiln_lew_nest_buf(c, &nest, y);
  rs_build_t bld;
  memset(&bld, 0, sizeof bld);
  bld.ctx = ctx;
  const int64_t one = 1;
  const tir_buffer_t* acc = tir_buffer(c, "rs_acc", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_expr_t* z[1] = {tir_int(c, 0)};
  const tir_expr_t* xi[KILN_MAX_RANK];
  const tir_expr_t* w = NULL;
  const tir_expr_t* oob = NULL;
  const tir_var_t* tv[KILN_MAX_RANK];
  int64_t text[KILN_MAX_RANK];
  int32_t n_mix = 0;
  for (int32_t k = 0; k < r; ++k) {
    const int64_t d = x->shape[k], out = y->shape[k];
    const size_t cap = (size_t)out * KILN_RESIZE_MAX_TAPS;
    int64_t* idx = kiln_arena_alloc(&c->arena, sizeof(int64_t) * cap);
    double* wd = kiln_arena_alloc(&c->arena, sizeof(double) * cap);
    float* wf = kiln_arena_alloc(&c->arena, sizeof(float) * cap);
    uint8_t* ob = kiln_arena_alloc(&c->arena, (size_t)out);
    if (!idx || !wd || !wf || !ob) return kiln_make_status(KILN_OUT_OF_MEMORY, "Resize: tap tables");
    int64_t kt;
    TRY(kiln_resize_axis_taps(a, p, k, d, roi_lo[k], roi_hi[k], &kt, idx, wd, ob));
    bool any_oob = false, unit = true;
    for (int64_t i = 0; i < out * kt; ++i) {
      wf[i] = (float)wd[i];
      unit &= wd[i] == 1.0;
    }
    for (int64_t o = 0; o < out; ++o) any_oob |= ob[o] != 0;
    char name[32];
    const tir_expr_t* t = nest.idx[k];
    if (kt == 1) {
      snprintf(name, sizeof name, "i_%d", (int)k);
      TRY(rs_index(&bld, name, idx, out, d, nest.idx[k], &xi[k]));
    } else {
      snprintf(name, sizeof name, "t%d", (int)k);
      tv[n_mix] = tir_var(c, name);
      text[n_mix++] = kt;
      t = tir_add(c, tir_mul(c, nest.idx[k], tir_int(c, kt)), tir_ref(c, tv[n_mix - 1]));
      const tir_buffer_t* ib;
      snprintf(name, sizeof name, "i_%d", (int)k);
      TRY(rs_table(&bld, name, KILN_DTYPE_I64, out * kt, idx, &ib));
      xi[k] = kiln_lew_clamp(c, tir_load(c, ib, &t), 0, d - 1);
    }
    if (kt > 1 || !unit) {
      const tir_buffer_t* wb;
      snprintf(name, sizeof name, "w_%d", (int)k);
      TRY(rs_table(&bld, name, KILN_DTYPE_F32, out * kt, wf, &wb));
      const tir_expr_t* wk = tir_load(c, wb, &t);
      w = w ? tir_mul(c, w, wk) : wk;
    }
    if (any_oob) {
      const tir_buffer_t* obb;
      snprintf(name, sizeof name, "oob_%d", (int)k);
      TRY(rs_table(&bld, name, KILN_DTYPE_U8, out, ob, &obb));
      const tir_expr_t* e = tir_bin(c, TIR_NE, tir_load(c, obb, &nest.idx[k]), tir_const(c, KILN_DTYPE_U8, 0));
      oob = oob ? tir_bin(c, TIR_OR, oob, e) : e;
    }
  }
  const tir_expr_t* F0 = tir_const(c, KILN_DTYPE_F32, 0.0);
  const tir_expr_t* xv = tir_cast(c, KILN_DTYPE_F32, tir_load(c, x, xi));
  const tir_expr_t* term = w ? tir_select(c, tir_bin(c, TIR_NE, w, F0), tir_mul(c, w, xv), F0) : xv;
  const tir_stmt_t* inner = tir_store(c, acc, z, tir_add(c, tir_load(c, acc, z), term));
  for (int32_t m = n_mix - 1; m >= 0; --m) inner = tir_for(c, tv[m], text[m], TIR_LOOP_SERIAL, inner);
  const tir_expr_t* v = tir_load(c, acc, z);
  if (oob) v = tir_select(c, oob, tir_const(c, KILN_DTYPE_F32, a->extrapolation), v);
  if (y->dtype == KILN_DTYPE_F16) v = tir_cast(c, KILN_DTYPE_F16, v);
  const tir_stmt_t* seq[3] = {tir_store(c, acc, z, F0), inner, kiln_lew_store(c, &nest, y, v)};
  const tir_stmt_t* body = kiln_lew_loops(c, &nest, tir_alloc(c, acc, tir_seq(c, 3, seq)));
  const tir_buffer_t* params[2 + 5 * KILN_MAX_RANK];
  int32_t np = 0;
  params[np++] = x;
  params[np++] = y;
  for (int32_t i = 0; i < bld.n_consts; ++i) params[np++] = bld.consts[i];
  return kiln_lew_emit(ctx, &nest, body, np, params, false);
}

static kiln_status_t lower_resize(kiln_lower_ctx_t* ctx) {
  TRY(need_io(ctx, "Resize"));
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* x = ctx->in[0];
  const tir_buffer_t* y = ctx->out[0];
  const int32_t r = x->rank;
  resize_attrs_t a;
  TRY(kiln_resize_parse_attrs(ctx->node, ctx->opset, &a));
  const bool linear = a.mode == MODE_LINEAR;
  if (a.mode != MODE_NEAREST && !kiln_dtype_is_float(x->dtype))
    return kiln_make_status(KILN_UNSUPPORTED, "Resize: mode linear/cubic on %s data is not supported",
                            kiln_dtype_name(x->dtype));
  /* scales / sizes: an empty tensor counts as absent; the given one must be
   * a constant (its values decide the coordinates). */
  const kiln_array_t *sv = NULL, *zv = NULL;
  const int32_t slot[2] = {a.i_scales, a.i_sizes};
  const kiln_array_t** dst[2] = {&sv, &zv};
  static const char* const what[2] = {"scales", "sizes"};
  for (int32_t k = 0; k < 2; ++k) {
    const tir_buffer_t* b = kiln_lew_in(ctx, slot[k]);
    if (!b || tir_buffer_numel(b) == 0) continue;
    *dst[k] = kiln_lew_const_in(ctx, slot[k]);
    if (!*dst[k])
      return kiln_make_status(KILN_UNSUPPORTED,
                              "Resize: input '%s' computed at run time is not supported", what[k]);
  }
  if (!sv == !zv)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Resize: exactly one of scales and sizes must be given");
  resize_plan_t p;
  kiln_shape_t xshape = kiln_shape_make(r, x->shape);
  TRY(kiln_resize_plan(&a, &xshape, sv, zv, &p));
  if (y->dtype != x->dtype || y->rank != r)
    return kiln_make_status(KILN_INTERNAL, "Resize: output does not match input");
  for (int32_t k = 0; k < r; ++k)
    if (y->shape[k] != p.out[k]) return kiln_make_status(KILN_INTERNAL, "Resize: output shape mismatch");
  if (tir_buffer_numel(y) == 0) return NULL;
  if (tir_buffer_numel(x) == 0) return kiln_make_status(KILN_INVALID_ARGUMENT, "Resize: input is empty");

  double roi_lo[KILN_MAX_RANK], roi_hi[KILN_MAX_RANK];
  for (int32_t k = 0; k < r; ++k) {
    roi_lo[k] = 0.0;
    roi_hi[k] = 1.0;
  }
  if (a.coord == CT_TF_CROP_AND_RESIZE) {
    int32_t axes[KILN_MAX_RANK], n;
    TRY(kiln_resize_axes(&a, r, axes, &n));
    const kiln_array_t* roi = kiln_lew_const_in(ctx, a.i_roi);
    if (kiln_lew_in(ctx, a.i_roi) && !roi)
      return kiln_make_status(KILN_UNSUPPORTED, "Resize: input 'roi' computed at run time is not supported");
    if (!roi || !kiln_dtype_is_float(roi->dtype) || kiln_array_numel(roi) != 2 * n)
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Resize: tf_crop_and_resize needs a float roi of %d values", (int)(2 * n));
    for (int32_t i = 0; i < n; ++i) {
      roi_lo[axes[i]] = kiln_load_f64(roi->dtype, roi->data, (size_t)i);
      roi_hi[axes[i]] = kiln_load_f64(roi->dtype, roi->data, (size_t)(n + i));
    }
  }

  if (kiln_resize_uses_taps(&a)) return lower_resize_taps(ctx, &a, &p, roi_lo, roi_hi);

  kiln_lew_nest_t nest;
  kiln_lew_nest_buf(c, &nest, y);
  rs_build_t bld;
  memset(&bld, 0, sizeof bld);
  bld.ctx = ctx;
  const tir_expr_t* i0[KILN_MAX_RANK];
  const tir_expr_t* i1[KILN_MAX_RANK];
  const tir_expr_t* w0[KILN_MAX_RANK];
  const tir_expr_t* w1[KILN_MAX_RANK];
  int32_t mix[KILN_MAX_RANK], n_mix = 0;
  const tir_expr_t* oob = NULL;
  for (int32_t k = 0; k < r; ++k) {
    const int64_t d = x->shape[k], out = y->shape[k];
    int64_t* t0 = kiln_arena_alloc(&c->arena, sizeof(int64_t) * (size_t)out);
    int64_t* t1 = kiln_arena_alloc(&c->arena, sizeof(int64_t) * (size_t)out);
    float* f0 = kiln_arena_alloc(&c->arena, sizeof(float) * (size_t)out);
    float* f1 = kiln_arena_alloc(&c->arena, sizeof(float) * (size_t)out);
    uint8_t* ob = kiln_arena_alloc(&c->arena, (size_t)out);
    if (!t0 || !t1 || !f0 || !f1 || !ob) return kiln_make_status(KILN_OUT_OF_MEMORY, "Resize: tables");
    bool mixes = false, any_oob = false;
    for (int64_t o = 0; o < out; ++o) {
      double cc = kiln_resize_source_coord(a.coord, (double)o, d, p.scale[k], p.out[k], p.out_f[k], roi_lo[k],
                           roi_hi[k]);
      ob[o] = a.coord == CT_TF_CROP_AND_RESIZE && (cc < 0.0 || cc > (double)(d - 1));
      any_oob |= ob[o] != 0;
      if (!(cc == cc)) cc = 0.0;
      if (cc > (double)d) cc = (double)d;
      if (cc < -1.0) cc = -1.0;
      if (!linear) {
        int64_t i = kiln_resize_round_nearest(a.nearest, cc, p.scale[k]);
        t0[o] = t1[o] = i < 0 ? 0 : (i >= d ? d - 1 : i);
        f0[o] = 1.0f;
        f1[o] = 0.0f;
        continue;
      }
      double f = floor(cc), w = cc - f;
      int64_t a0 = kiln_resize_clamp_index(f, d), a1 = kiln_resize_clamp_index(f + 1.0, d);
      if (w == 0.0 || a0 == a1) {
        a1 = a0;
        w = 0.0;
      }
      t0[o] = a0;
      t1[o] = a1;
      f0[o] = (float)(1.0 - w);
      f1[o] = (float)w;
      mixes |= a0 != a1;
    }
    char name[32];
    snprintf(name, sizeof name, "i0_%d", (int)k);
    TRY(rs_index(&bld, name, t0, out, d, nest.idx[k], &i0[k]));
    if (mixes) {
      const tir_buffer_t *wb0, *wb1;
      snprintf(name, sizeof name, "i1_%d", (int)k);
      TRY(rs_index(&bld, name, t1, out, d, nest.idx[k], &i1[k]));
      snprintf(name, sizeof name, "w0_%d", (int)k);
      TRY(rs_table(&bld, name, KILN_DTYPE_F32, out, f0, &wb0));
      snprintf(name, sizeof name, "w1_%d", (int)k);
      TRY(rs_table(&bld, name, KILN_DTYPE_F32, out, f1, &wb1));
      w0[k] = tir_load(c, wb0, &nest.idx[k]);
      w1[k] = tir_load(c, wb1, &nest.idx[k]);
      mix[n_mix++] = k;
    }
    if (any_oob) {
      const tir_buffer_t* obb;
      snprintf(name, sizeof name, "oob_%d", (int)k);
      TRY(rs_table(&bld, name, KILN_DTYPE_U8, out, ob, &obb));
      const tir_expr_t* e = tir_bin(c, TIR_NE, tir_load(c, obb, &nest.idx[k]), tir_const(c, KILN_DTYPE_U8, 0));
      oob = oob ? tir_bin(c, TIR_OR, oob, e) : e;
    }
  }

  const tir_expr_t* v;
  if (!linear) {
    v = tir_load(c, x, i0);
    if (oob) {
      unsigned char e[8] = {0};
      kiln_store_f64(x->dtype, e, 0, a.extrapolation);
      const tir_expr_t* ex = finite_elem(x->dtype, e) ? imm_of(c, x->dtype, e)
                                                      : kiln_lew_imm(c, x->dtype, a.extrapolation);
      v = tir_select(c, oob, ex, v);
    }
  } else {
    /* Sum over the 2^n_mix corners in the reference's order; a zero weight
     * contributes nothing (not 0 * inf). */
    v = NULL;
    for (int32_t cm = 0; cm < (1 << n_mix); ++cm) {
      const tir_expr_t* idx[KILN_MAX_RANK];
      for (int32_t k = 0; k < r; ++k) idx[k] = i0[k];
      const tir_expr_t* w = NULL;
      for (int32_t m = 0; m < n_mix; ++m) {
        int32_t k = mix[m];
        bool hi = (cm >> m) & 1;
        if (hi) idx[k] = i1[k];
        const tir_expr_t* wk = hi ? w1[k] : w0[k];
        w = w ? tir_mul(c, w, wk) : wk;
      }
      const tir_expr_t* xv = tir_cast(c, KILN_DTYPE_F32, tir_load(c, x, idx));
      const tir_expr_t* term =
          w ? tir_select(c, tir_bin(c, TIR_NE, w, tir_const(c, KILN_DTYPE_F32, 0.0)), tir_mul(c, w, xv),
                         tir_const(c, KILN_DTYPE_F32, 0.0))
            : xv;
      v = v ? tir_add(c, v, term) : term;
    }
    if (oob) v = tir_select(c, oob, tir_const(c, KILN_DTYPE_F32, a.extrapolation), v);
    if (y->dtype == KILN_DTYPE_F16) v = tir_cast(c, KILN_DTYPE_F16, v);
  }
  const tir_stmt_t* body = kiln_lew_loops(c, &nest, kiln_lew_store(c, &nest, y, v));
  const tir_buffer_t* params[2 + 5 * KILN_MAX_RANK];
  int32_t np = 0;
  params[np++] = x;
  params[np++] = y;
  for (int32_t i = 0; i < bld.n_consts; ++i) params[np++] = bld.consts[i];
  return kiln_lew_emit(ctx, &nest, body, np, params, true);
}

/* ---- table ---------------------------------------------------------------------- */

/* The lowering table: op type and lowering function of each line of the
 * family's op list (ir/ops/tensor.def, which also holds the schema). */
#define KILN_OP(type, stem, min_in, max_in, min_out, max_out, flops, pattern, tmpl, lower) \
  {type, lower},
const kiln_lower_entry_t kiln_lower_tensor[] = {
#include "ir/ops/tensor.def"
};
#undef KILN_OP
const size_t kiln_lower_tensor_count = sizeof kiln_lower_tensor / sizeof kiln_lower_tensor[0];
