/* ArgMax and ArgMin: the i64 index of the largest / smallest element along
 * one axis (attribute axis, default 0), the axis kept as size 1 or removed
 * (keepdims), the first of equal elements or the last (select_last_index,
 * opset 12). A NaN counts as the extreme, as numpy's argmax does (the
 * reference implementation behind the ONNX tests). Every numeric dtype; the
 * axis must not be empty (there is no index to return).
 */
#include <math.h>
#include <string.h>

#include "ir/ops/nn_internal.h"

typedef struct am_s {
  int32_t axis;
  bool keepdims, last;
  kiln_shape_t out;
} am_t;

static kiln_status_t am_setup(const kiln_node_t* node, const char* op,
                              const kiln_shape_t* x, am_t* a) {
  memset(a, 0, sizeof(*a));
  int64_t axis = 0, keep = 1, last = 0;
  KILN_RETURN_IF_ERROR(kiln_attr_int(node, "axis", 0, &axis));
  KILN_RETURN_IF_ERROR(kiln_attr_int(node, "keepdims", 1, &keep));
  KILN_RETURN_IF_ERROR(kiln_attr_int(node, "select_last_index", 0, &last));
  a->keepdims = keep != 0;
  a->last = last != 0;
  if (x->rank < 0) {
    a->out = kiln_shape_unknown();
    return NULL;
  }
  const int64_t r = x->rank;
  if (axis < -r || axis >= r) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: axis %lld is out of range for rank %d", op,
                            (long long)axis, (int)r);
  }
  a->axis = (int32_t)(axis < 0 ? axis + r : axis);
  if (x->dims[a->axis] == 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: axis %d has size 0, so there is no index to "
                            "return",
                            op, (int)a->axis);
  }
  a->out.rank = 0;
  for (int32_t i = 0; i < x->rank; ++i) {
    if (i != a->axis) a->out.dims[a->out.rank++] = x->dims[i];
    else if (a->keepdims) a->out.dims[a->out.rank++] = 1;
  }
  return NULL;
}

static kiln_status_t am_infer(kiln_infer_t* ctx, const char* op) {
  const kiln_dtype_t t = ctx->in[0]->dtype;
  if (t == KILN_DTYPE_BOOL) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "%s: input '%s' has dtype bool, which %s does not "
                            "support",
                            op, kiln_nn_in_name(ctx, 0), op);
  }
  am_t a;
  KILN_RETURN_IF_ERROR(am_setup(ctx->node, op, &ctx->in[0]->shape, &a));
  kiln_infer_set(ctx, 0, KILN_DTYPE_I64, &a.out);
  return NULL;
}

static int64_t am_flops(const kiln_infer_t* ctx) {
  const kiln_shape_t* x = &ctx->in[0]->shape;
  return kiln_shape_is_static(x) ? kiln_shape_count(x) : 0;
}

/* Whether element |v| replaces the best so far |b| (see the header). */
static bool am_better(double v, double b, bool is_min, bool last) {
  if (isnan(v)) return last || !isnan(b);
  if (isnan(b)) return false;
  if (last) return is_min ? v <= b : v >= b;
  return is_min ? v < b : v > b;
}

static kiln_status_t am_run(const kiln_ref_ctx_t* ctx, const char* op,
                            bool is_min) {
  const kiln_array_t* X = ctx->in[0];
  kiln_array_t* Y = ctx->out[0];
  am_t a;
  KILN_RETURN_IF_ERROR(am_setup(ctx->node, op, &X->shape, &a));
  const int64_t outer = kiln_nn_prod(&X->shape, 0, a.axis);
  const int64_t n = X->shape.dims[a.axis];
  const int64_t inner = kiln_nn_prod(&X->shape, a.axis + 1, X->shape.rank);
  const bool is_float = kiln_dtype_is_float(X->dtype);
  int64_t* y = (int64_t*)Y->data;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const size_t base = (size_t)(o * n * inner + i);
      int64_t best = 0;
      if (is_float) {
        double b = kiln_load_f64(X->dtype, X->data, base);
        for (int64_t k = 1; k < n; ++k) {
          double v = kiln_load_f64(X->dtype, X->data, base + (size_t)(k * inner));
          if (am_better(v, b, is_min, a.last)) b = v, best = k;
        }
      } else {
        int64_t b = kiln_load_i64(X->dtype, X->data, base);
        for (int64_t k = 1; k < n; ++k) {
          int64_t v = kiln_load_i64(X->dtype, X->data, base + (size_t)(k * inner));
          bool better = a.last ? (is_min ? v <= b : v >= b) : (is_min ? v < b : v > b);
          if (better) b = v, best = k;
        }
      }
      y[o * inner + i] = best;
    }
  }
  return NULL;
}

kiln_status_t kiln_nn_argmax_infer(kiln_infer_t* ctx) { return am_infer(ctx, "ArgMax"); }
kiln_status_t kiln_nn_argmax_run(const kiln_ref_ctx_t* ctx) { return am_run(ctx, "ArgMax", false); }
int64_t kiln_nn_argmax_flops(const kiln_infer_t* ctx) { return am_flops(ctx); }
kiln_status_t kiln_nn_argmin_infer(kiln_infer_t* ctx) { return am_infer(ctx, "ArgMin"); }
kiln_status_t kiln_nn_argmin_run(const kiln_ref_ctx_t* ctx) { return am_run(ctx, "ArgMin", true); }
int64_t kiln_nn_argmin_flops(const kiln_infer_t* ctx) { return am_flops(ctx); }
