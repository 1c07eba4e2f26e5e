/* Tensor ops driven by an index tensor: GatherElements, GatherND,
 * ScatterElements (and its opset-9 name Scatter) and ScatterND.
 *
 * Every index is checked against the extent of the axis it addresses
 * (negative values count from the end, as Gather's); a bad index fails the
 * run with KILN_OUT_OF_RANGE before anything is written, and a constant
 * bad index fails at load. Index tensors whose non-indexed dims exceed the
 * data's are shape errors at inference, so the kernels below never leave
 * their buffers whatever the index values are. */
#include <string.h>

#include "ir/ops/tensor_impl.h"
#include "ir/ops/tensor_index.h"

static int64_t prod(const int64_t* dims, int32_t from, int32_t to) {
  int64_t p = 1;
  for (int32_t k = from; k < to; ++k) p *= dims[k];
  return p;
}

/* Index |k| of |idx| normalised into [0, n), or OUT_OF_RANGE naming |op|. */
static kiln_status_t index_at(const char* op, const kiln_array_t* idx, int64_t k, int64_t n,
                              int32_t axis, int64_t* out) {
  int64_t i = kiln_load_i64(idx->dtype, idx->data, (size_t)k);
  if (i < -n || i >= n) {
    return kiln_make_status(KILN_OUT_OF_RANGE,
                            "%s: index %lld out of range [%lld, %lld) on axis %d", op,
                            (long long)i, (long long)-n, (long long)n, (int)axis);
  }
  *out = i < 0 ? i + n : i;
  return NULL;
}

static kiln_status_t index_dtype(const char* op, const kiln_tensor_t* t) {
  if (t->dtype == KILN_DTYPE_UNDEFINED || t->dtype == KILN_DTYPE_I64 || t->dtype == KILN_DTYPE_I32)
    return NULL;
  return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: indices '%s' have dtype %s, expected i32 or i64",
                          op, t->name, kiln_dtype_name(t->dtype));
}

/* Coordinates of flat element |o| of |dims| (row-major). */
static void unravel(int64_t o, int32_t r, const int64_t* dims, int64_t* coord) {
  for (int32_t k = r - 1; k >= 0; --k) {
    coord[k] = dims[k] ? o % dims[k] : 0;
    o = dims[k] ? o / dims[k] : 0;
  }
}

/* ---- element-wise index ops (GatherElements, ScatterElements) ------------ */

/* Shared shape rules: indices of the data's rank whose dims other than
 * |axis| fit inside the data's. */
static kiln_status_t elements_shapes(const kiln_infer_t* ctx, const char* op, const kiln_shape_t* xs,
                                     const kiln_shape_t* is, int32_t* out_axis) {
  if (xs->rank == 0) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: data is a scalar", op);
  if (is->rank != xs->rank) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: indices have rank %d, data has rank %d", op,
                            (int)is->rank, (int)xs->rank);
  }
  int64_t a = 0;
  KILN_TRY(kiln_attr_int(ctx->node, "axis", 0, &a));
  KILN_TRY(kiln_tensor_axis(op, "axis", a, xs->rank, out_axis));
  for (int32_t k = 0; k < xs->rank; ++k) {
    if (k == *out_axis || !kiln_dim_known(is->dims[k]) || !kiln_dim_known(xs->dims[k])) continue;
    if (is->dims[k] > xs->dims[k]) {
      char b1[160], b2[160];
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: indices of shape %s do not fit data of shape %s in dim %d", op,
                              kiln_tensor_fmt(ctx, is, b1, sizeof b1),
                              kiln_tensor_fmt(ctx, xs, b2, sizeof b2), (int)k);
    }
  }
  return NULL;
}

/* Constant indices are checked at load so a bad model fails early. */
static kiln_status_t check_const_indices(const kiln_infer_t* ctx, const char* op, int32_t i,
                                         int64_t n, int32_t axis) {
  const kiln_array_t* v = kiln_tensor_value(ctx, i);
  if (!v || !kiln_dim_known(n)) return NULL;
  int64_t cnt = kiln_array_numel(v), tmp;
  for (int64_t k = 0; k < cnt; ++k) KILN_TRY(index_at(op, v, k, n, axis, &tmp));
  return NULL;
}

kiln_status_t kiln_tensor_gather_elements_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  const kiln_tensor_t* ind = ctx->in[1];
  KILN_TRY(index_dtype("GatherElements", ind));
  if (x->shape.rank < 0 || ind->shape.rank < 0) {
    kiln_shape_t s = kiln_tensor_unknown_rank(ind->shape.rank >= 0 ? ind->shape.rank : x->shape.rank);
    kiln_infer_set(ctx, 0, x->dtype, &s);
    return NULL;
  }
  int32_t axis;
  KILN_TRY(elements_shapes(ctx, "GatherElements", &x->shape, &ind->shape, &axis));
  KILN_TRY(check_const_indices(ctx, "GatherElements", 1, x->shape.dims[axis], axis));
  kiln_infer_set(ctx, 0, x->dtype, &ind->shape);
  return NULL;
}

/* Validates every index of |ind| against data axis |axis| of |xs|. */
static kiln_status_t check_all(const char* op, const kiln_array_t* ind, int64_t n, int32_t axis) {
  int64_t cnt = kiln_array_numel(ind), tmp;
  for (int64_t k = 0; k < cnt; ++k) KILN_TRY(index_at(op, ind, k, n, axis, &tmp));
  return NULL;
}

/* The data offset that element |o| of the indices addresses. */
static int64_t elements_offset(const kiln_array_t* ind, int64_t o, const int64_t* xstr, int32_t axis,
                               int64_t n) {
  int64_t coord[KILN_MAX_RANK];
  unravel(o, ind->shape.rank, ind->shape.dims, coord);
  int64_t i = kiln_load_i64(ind->dtype, ind->data, (size_t)o);
  coord[axis] = i < 0 ? i + n : i;
  int64_t off = 0;
  for (int32_t k = 0; k < ind->shape.rank; ++k) off += coord[k] * xstr[k];
  return off;
}

kiln_status_t kiln_tensor_gather_elements_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  const kiln_array_t* ind = ctx->in[1];
  kiln_array_t* y = ctx->out[0];
  const int32_t r = x->shape.rank;
  int64_t a = 0;
  int32_t axis;
  KILN_TRY(kiln_attr_int(ctx->node, "axis", 0, &a));
  KILN_TRY(kiln_tensor_axis("GatherElements", "axis", a, r, &axis));
  bool ok = ind->shape.rank == r && y->dtype == x->dtype && kiln_array_numel(y) == kiln_array_numel(ind);
  for (int32_t k = 0; ok && k < r; ++k) ok = k == axis || ind->shape.dims[k] <= x->shape.dims[k];
  if (!ok) return kiln_make_status(KILN_INTERNAL, "GatherElements: shapes do not match");
  const int64_t n = x->shape.dims[axis];
  KILN_TRY(check_all("GatherElements", ind, n, axis));
  int64_t xstr[KILN_MAX_RANK];
  kiln_tensor_strides(&x->shape, xstr);
  const size_t esz = kiln_dtype_size(x->dtype);
  const int64_t cnt = kiln_array_numel(ind);
  for (int64_t o = 0; o < cnt; ++o) {
    int64_t off = elements_offset(ind, o, xstr, axis, n);
    memcpy((char*)y->data + (size_t)o * esz, (const char*)x->data + (size_t)off * esz, esz);
  }
  return NULL;
}

/* ---- reductions of the scatter ops --------------------------------------- */

/* ScatterElements-16 / ScatterND-16 add reductions; "none" replaces. */
kiln_status_t kiln_tensor_scatter_reduction(const kiln_node_t* node, const char* op,
                                            kiln_dtype_t dt, int* out) {
  static const char* const names[] = {"none", "add", "mul", "max", "min"};
  const char* s = "none";
  KILN_TRY(kiln_attr_string(node, "reduction", "none", &s));
  for (int k = 0; k < 5; ++k) {
    if (strcmp(s, names[k]) != 0) continue;
    if (k != KILN_SCATTER_NONE && dt == KILN_DTYPE_BOOL) {
      return kiln_make_status(KILN_UNSUPPORTED, "%s: reduction '%s' on bool data is not supported",
                              op, s);
    }
    *out = k;
    return NULL;
  }
  return kiln_make_status(KILN_INVALID_ARGUMENT,
                          "%s: reduction '%s' is not one of none, add, mul, max, min", op, s);
}

/* out[o] = reduce(out[o], upd[u]); floats in double (rounded once on store),
 * integers in int64 wrapping at the element width on store. */
static void reduce_elem(kiln_dtype_t dt, int red, void* out, int64_t o, const void* upd, int64_t u) {
  if (red == KILN_SCATTER_NONE) {
    size_t esz = kiln_dtype_size(dt);
    memcpy((char*)out + (size_t)o * esz, (const char*)upd + (size_t)u * esz, esz);
    return;
  }
  if (kiln_dtype_is_float(dt)) {
    double a = kiln_load_f64(dt, out, (size_t)o), b = kiln_load_f64(dt, upd, (size_t)u);
    double v = red == KILN_SCATTER_ADD ? a + b
             : red == KILN_SCATTER_MUL ? a * b
             : red == KILN_SCATTER_MAX ? (a > b ? a : b)
                                       : (a < b ? a : b);
    kiln_store_f64(dt, out, (size_t)o, v);
    return;
  }
  int64_t a = kiln_load_i64(dt, out, (size_t)o), b = kiln_load_i64(dt, upd, (size_t)u);
  int64_t v = red == KILN_SCATTER_ADD ? (int64_t)((uint64_t)a + (uint64_t)b)
            : red == KILN_SCATTER_MUL ? (int64_t)((uint64_t)a * (uint64_t)b)
            : red == KILN_SCATTER_MAX ? (a > b ? a : b)
                                      : (a < b ? a : b);
  kiln_store_i64(dt, out, (size_t)o, v);
}

static kiln_status_t scatter_common_infer(kiln_infer_t* ctx, const char* op) {
  const kiln_tensor_t* x = ctx->in[0];
  KILN_TRY(index_dtype(op, ctx->in[1]));
  const kiln_tensor_t* u = ctx->in[2];
  if (u->dtype != KILN_DTYPE_UNDEFINED && x->dtype != KILN_DTYPE_UNDEFINED && u->dtype != x->dtype) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: updates '%s' have dtype %s, data has %s", op,
                            u->name, kiln_dtype_name(u->dtype), kiln_dtype_name(x->dtype));
  }
  int red;
  KILN_TRY(kiln_tensor_scatter_reduction(ctx->node, op, x->dtype, &red));
  kiln_infer_set(ctx, 0, x->dtype, &x->shape);
  return NULL;
}

static bool same_known(const kiln_shape_t* a, const kiln_shape_t* b) {
  if (a->rank < 0 || b->rank < 0) return true;
  if (a->rank != b->rank) return false;
  for (int32_t k = 0; k < a->rank; ++k)
    if (kiln_dim_known(a->dims[k]) && kiln_dim_known(b->dims[k]) && a->dims[k] != b->dims[k])
      return false;
  return true;
}

kiln_status_t kiln_tensor_scatter_elements_infer(kiln_infer_t* ctx) {
  const char* op = ctx->node->op_type;
  KILN_TRY(scatter_common_infer(ctx, op));
  const kiln_tensor_t* x = ctx->in[0];
  const kiln_tensor_t* ind = ctx->in[1];
  if (!same_known(&ind->shape, &ctx->in[2]->shape)) {
    char b1[160], b2[160];
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: updates of shape %s differ from indices %s",
                            op, kiln_tensor_fmt(ctx, &ctx->in[2]->shape, b1, sizeof b1),
                            kiln_tensor_fmt(ctx, &ind->shape, b2, sizeof b2));
  }
  if (x->shape.rank < 0 || ind->shape.rank < 0) return NULL;
  int32_t axis;
  KILN_TRY(elements_shapes(ctx, op, &x->shape, &ind->shape, &axis));
  return check_const_indices(ctx, op, 1, x->shape.dims[axis], axis);
}

kiln_status_t kiln_tensor_scatter_elements_run(const kiln_ref_ctx_t* ctx) {
  const char* op = ctx->node->op_type;
  const kiln_array_t* x = ctx->in[0];
  const kiln_array_t* ind = ctx->in[1];
  const kiln_array_t* u = ctx->in[2];
  kiln_array_t* y = ctx->out[0];
  const int32_t r = x->shape.rank;
  int64_t a = 0;
  int32_t axis;
  int red;
  KILN_TRY(kiln_attr_int(ctx->node, "axis", 0, &a));
  KILN_TRY(kiln_tensor_axis(op, "axis", a, r, &axis));
  KILN_TRY(kiln_tensor_scatter_reduction(ctx->node, op, x->dtype, &red));
  bool ok = ind->shape.rank == r && u->dtype == x->dtype && y->dtype == x->dtype &&
            kiln_array_numel(y) == kiln_array_numel(x) && same_known(&u->shape, &ind->shape);
  for (int32_t k = 0; ok && k < r; ++k) ok = k == axis || ind->shape.dims[k] <= x->shape.dims[k];
  if (!ok) return kiln_make_status(KILN_INTERNAL, "%s: shapes do not match", op);
  const int64_t n = x->shape.dims[axis];
  KILN_TRY(check_all(op, ind, n, axis));
  memcpy(y->data, x->data, y->nbytes);
  int64_t xstr[KILN_MAX_RANK];
  kiln_tensor_strides(&x->shape, xstr);
  const int64_t cnt = kiln_array_numel(ind);
  for (int64_t o = 0; o < cnt; ++o)
    reduce_elem(x->dtype, red, y->data, elements_offset(ind, o, xstr, axis, n), u->data, o);
  return NULL;
}

/* ---- GatherND / ScatterND ---------------------------------------------------- */

/* The shape plan of GatherND's indexing: |b| batch dims, tuples of |k|
 * indices into data dims b..b+k-1. */
typedef struct {
  int32_t b, k;
} nd_plan_t;

static kiln_status_t nd_plan(const char* op, const kiln_node_t* node, const kiln_shape_t* xs,
                             const kiln_shape_t* is, nd_plan_t* p) {
  int64_t b = 0;
  if (strcmp(op, "GatherND") == 0) KILN_TRY(kiln_attr_int(node, "batch_dims", 0, &b));
  const int32_t r = xs->rank, q = is->rank;
  if (r < 1 || q < 1) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: data or indices is a scalar", op);
  if (b < 0 || b >= r || b >= q) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: batch_dims %lld must be below the ranks of data (%d) and indices (%d)",
                            op, (long long)b, (int)r, (int)q);
  }
  int64_t k = is->dims[q - 1];
  if (kiln_dim_known(k) && (k < 1 || k > r - b)) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: the last indices dim is %lld, it must be in [1, %lld]", op,
                            (long long)k, (long long)(r - b));
  }
  for (int32_t d = 0; d < b; ++d) {
    if (kiln_dim_known(xs->dims[d]) && kiln_dim_known(is->dims[d]) && xs->dims[d] != is->dims[d]) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: batch dim %d is %lld in data and %lld in indices", op, (int)d,
                              (long long)xs->dims[d], (long long)is->dims[d]);
    }
  }
  p->b = (int32_t)b;
  p->k = kiln_dim_known(k) ? (int32_t)k : -1;
  return NULL;
}

/* Indices rank q, data rank r: output (GatherND) / updates (ScatterND)
 * shape = indices.shape[:-1] + data.shape[b+k:]. */
static kiln_status_t nd_slice_shape(const char* op, const kiln_shape_t* xs, const kiln_shape_t* is,
                                    const nd_plan_t* p, kiln_shape_t* out) {
  const int32_t q = is->rank, r = xs->rank;
  KILN_TRY(kiln_tensor_check_rank(op, (int64_t)q - 1 + r - p->b - p->k));
  *out = kiln_tensor_unknown_rank(q - 1 + r - p->b - p->k);
  int32_t j = 0;
  for (int32_t d = 0; d < q - 1; ++d) out->dims[j++] = is->dims[d];
  for (int32_t d = p->b + p->k; d < r; ++d) out->dims[j++] = xs->dims[d];
  return NULL;
}

/* Checks the tuples of constant indices (|v|) against the data dims. */
static kiln_status_t nd_check(const char* op, const kiln_array_t* v, const kiln_shape_t* xs,
                              const nd_plan_t* p) {
  int64_t cnt = kiln_array_numel(v), tmp;
  for (int64_t e = 0; e < cnt; ++e) {
    int32_t d = p->b + (int32_t)(e % p->k);
    if (!kiln_dim_known(xs->dims[d])) continue;
    KILN_TRY(index_at(op, v, e, xs->dims[d], d, &tmp));
  }
  return NULL;
}

kiln_status_t kiln_tensor_gather_nd_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  const kiln_tensor_t* ind = ctx->in[1];
  KILN_TRY(index_dtype("GatherND", ind));
  kiln_shape_t out = kiln_shape_unknown();
  if (x->shape.rank >= 0 && ind->shape.rank >= 0) {
    nd_plan_t p;
    KILN_TRY(nd_plan("GatherND", ctx->node, &x->shape, &ind->shape, &p));
    if (p.k > 0) {
      KILN_TRY(nd_slice_shape("GatherND", &x->shape, &ind->shape, &p, &out));
      const kiln_array_t* v = kiln_tensor_value(ctx, 1);
      if (v) KILN_TRY(nd_check("GatherND", v, &x->shape, &p));
    }
  }
  kiln_infer_set(ctx, 0, x->dtype, &out);
  return NULL;
}

/* Walks the index tuples: for tuple t (of |n_tuples|) the data offset of
 * its slice, each index normalised; the caller checked them. */
static int64_t nd_offset(const kiln_array_t* ind, int64_t t, int64_t tuples_per_batch,
                         const kiln_shape_t* xs, const int64_t* xstr, const nd_plan_t* p) {
  int64_t batch = t / tuples_per_batch, off = 0;
  /* Batch index -> data coordinates of the first b dims (same as indices'). */
  int64_t coord[KILN_MAX_RANK];
  unravel(batch, p->b, xs->dims, coord);
  for (int32_t d = 0; d < p->b; ++d) off += coord[d] * xstr[d];
  for (int32_t j = 0; j < p->k; ++j) {
    int64_t n = xs->dims[p->b + j];
    int64_t i = kiln_load_i64(ind->dtype, ind->data, (size_t)(t * p->k + j));
    off += (i < 0 ? i + n : i) * xstr[p->b + j];
  }
  return off;
}

/* The plan of a GatherND/ScatterND run over arrays, checked against the
 * slice-shaped array |sl| (GatherND's output, ScatterND's updates). */
static kiln_status_t nd_run_plan(const char* op, const kiln_node_t* node, const kiln_array_t* x,
                                 const kiln_array_t* ind, const kiln_array_t* sl, nd_plan_t* p,
                                 int64_t* n_tuples, int64_t* slice) {
  if (ind->dtype != KILN_DTYPE_I64 && ind->dtype != KILN_DTYPE_I32)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: indices dtype %s", op, kiln_dtype_name(ind->dtype));
  KILN_TRY(nd_plan(op, node, &x->shape, &ind->shape, p));
  if (p->k < 1) return kiln_make_status(KILN_INTERNAL, "%s: empty index tuples", op);
  kiln_shape_t want;
  KILN_TRY(nd_slice_shape(op, &x->shape, &ind->shape, p, &want));
  if (sl->dtype != x->dtype || !kiln_shape_equal(&want, &sl->shape))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: %s do not have the shape the indices give", op,
                            strcmp(op, "GatherND") == 0 ? "output" : "updates");
  for (int32_t d = 0; d < p->b; ++d)
    if (x->shape.dims[d] != ind->shape.dims[d])
      return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: batch dims differ", op);
  KILN_TRY(nd_check(op, ind, &x->shape, p));
  *n_tuples = prod(ind->shape.dims, 0, ind->shape.rank - 1);
  *slice = prod(x->shape.dims, p->b + p->k, x->shape.rank);
  return NULL;
}

kiln_status_t kiln_tensor_gather_nd_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  const kiln_array_t* ind = ctx->in[1];
  kiln_array_t* y = ctx->out[0];
  nd_plan_t p;
  int64_t n_tuples, slice;
  KILN_TRY(nd_run_plan("GatherND", ctx->node, x, ind, y, &p, &n_tuples, &slice));
  int64_t xstr[KILN_MAX_RANK];
  kiln_tensor_strides(&x->shape, xstr);
  const int64_t per_batch = prod(ind->shape.dims, p.b, ind->shape.rank - 1);
  const size_t esz = kiln_dtype_size(x->dtype);
  for (int64_t t = 0; t < n_tuples && slice > 0; ++t) {
    int64_t off = nd_offset(ind, t, per_batch ? per_batch : 1, &x->shape, xstr, &p);
    memcpy((char*)y->data + (size_t)(t * slice) * esz, (const char*)x->data + (size_t)off * esz,
           (size_t)slice * esz);
  }
  return NULL;
}

kiln_status_t kiln_tensor_scatter_nd_infer(kiln_infer_t* ctx) {
  KILN_TRY(scatter_common_infer(ctx, "ScatterND"));
  const kiln_tensor_t* x = ctx->in[0];
  const kiln_tensor_t* ind = ctx->in[1];
  if (x->shape.rank < 0 || ind->shape.rank < 0) return NULL;
  nd_plan_t p;
  KILN_TRY(nd_plan("ScatterND", ctx->node, &x->shape, &ind->shape, &p));
  if (p.k < 1) return NULL;
  kiln_shape_t want;
  KILN_TRY(nd_slice_shape("ScatterND", &x->shape, &ind->shape, &p, &want));
  if (!same_known(&want, &ctx->in[2]->shape)) {
    char b1[160], b2[160];
    return kiln_make_status(KILN_INVALID_ARGUMENT, "ScatterND: updates have shape %s, expected %s",
                            kiln_tensor_fmt(ctx, &ctx->in[2]->shape, b1, sizeof b1),
                            kiln_tensor_fmt(ctx, &want, b2, sizeof b2));
  }
  const kiln_array_t* v = kiln_tensor_value(ctx, 1);
  return v ? nd_check("ScatterND", v, &x->shape, &p) : NULL;
}

kiln_status_t kiln_tensor_scatter_nd_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  const kiln_array_t* ind = ctx->in[1];
  const kiln_array_t* u = ctx->in[2];
  kiln_array_t* y = ctx->out[0];
  int red;
  KILN_TRY(kiln_tensor_scatter_reduction(ctx->node, "ScatterND", x->dtype, &red));
  nd_plan_t p;
  int64_t n_tuples, slice;
  KILN_TRY(nd_run_plan("ScatterND", ctx->node, x, ind, u, &p, &n_tuples, &slice));
  if (y->dtype != x->dtype || y->nbytes != x->nbytes)
    return kiln_make_status(KILN_INTERNAL, "ScatterND: output does not match data");
  memcpy(y->data, x->data, y->nbytes);
  int64_t xstr[KILN_MAX_RANK];
  kiln_tensor_strides(&x->shape, xstr);
  const int64_t per_batch = prod(ind->shape.dims, p.b, ind->shape.rank - 1);
  for (int64_t t = 0; t < n_tuples; ++t) {
    int64_t off = nd_offset(ind, t, per_batch ? per_batch : 1, &x->shape, xstr, &p);
    for (int64_t e = 0; e < slice; ++e) reduce_elem(x->dtype, red, y->data, off + e, u->data, t * slice + e);
  }
  return NULL;
}
