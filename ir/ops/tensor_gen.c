/* Tensor ops that generate or re-arrange by an index map: Tile, Range,
 * Trilu, EyeLike, Size, OneHot, DepthToSpace and SpaceToDepth.
 *
 * Each output element reads at most one input element chosen by its own
 * coordinates (OneHot: by the index at its coordinates), so the runs below
 * are plain loops over the output; the lowering builds the same maps in
 * TIR (lowering/lower_tensor_gen.c). */
#include <math.h>
#include <string.h>

#include "ir/ops/tensor_impl.h"
#include "ir/ops/tensor_index.h"

/* Coordinates of flat element |o| of |dims| (row-major). */
static void unravel(int64_t o, int32_t r, const int64_t* dims, int64_t* coord) {
  for (int32_t k = r - 1; k >= 0; --k) {
    coord[k] = dims[k] ? o % dims[k] : 0;
    o = dims[k] ? o / dims[k] : 0;
  }
}

static kiln_status_t shape_mismatch(const char* op) {
  return kiln_make_status(KILN_INTERNAL, "%s: output does not match the inputs", op);
}

/* ---- Tile ------------------------------------------------------------------- */

static kiln_status_t tile_repeats(const kiln_array_t* v, int32_t r, int64_t* rep) {
  int64_t n = 0;
  KILN_TRY(kiln_tensor_read_ints("Tile", "repeats", v, rep, KILN_MAX_RANK, &n));
  if (n != r) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Tile: repeats has %lld entries, input has rank %d",
                            (long long)n, (int)r);
  }
  for (int32_t k = 0; k < r; ++k)
    if (rep[k] < 0)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "Tile: repeats[%d] is %lld, must be >= 0", (int)k,
                              (long long)rep[k]);
  return NULL;
}

kiln_status_t kiln_tensor_tile_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  KILN_TRY(kiln_tensor_int_input(ctx, "Tile", 1, "repeats"));
  const int32_t r = x->shape.rank;
  kiln_shape_t out = kiln_tensor_unknown_rank(r);
  const kiln_array_t* v = kiln_tensor_value(ctx, 1);
  if (r >= 0 && v) {
    int64_t rep[KILN_MAX_RANK];
    KILN_TRY(tile_repeats(v, r, rep));
    for (int32_t k = 0; k < r; ++k) {
      int64_t d = x->shape.dims[k];
      if (!kiln_dim_known(d)) continue;
      if (__builtin_mul_overflow(d, rep[k], &out.dims[k]))
        return kiln_make_status(KILN_LIMIT_EXCEEDED, "Tile: dim %d (%lld x %lld) overflows", (int)k,
                                (long long)d, (long long)rep[k]);
    }
  }
  kiln_infer_set(ctx, 0, x->dtype, &out);
  return NULL;
}

kiln_status_t kiln_tensor_tile_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  kiln_array_t* y = ctx->out[0];
  const int32_t r = x->shape.rank;
  int64_t rep[KILN_MAX_RANK];
  KILN_TRY(tile_repeats(ctx->in[1], r, rep));
  if (y->dtype != x->dtype || y->shape.rank != r) return shape_mismatch("Tile");
  for (int32_t k = 0; k < r; ++k)
    if (y->shape.dims[k] != x->shape.dims[k] * rep[k]) return shape_mismatch("Tile");
  int64_t xs[KILN_MAX_RANK], c[KILN_MAX_RANK];
  kiln_tensor_strides(&x->shape, xs);
  const size_t esz = kiln_dtype_size(x->dtype);
  const int64_t n = kiln_array_numel(y);
  for (int64_t o = 0; o < n; ++o) {
    unravel(o, r, y->shape.dims, c);
    int64_t off = 0;
    for (int32_t k = 0; k < r; ++k) off += (c[k] % x->shape.dims[k]) * xs[k];
    memcpy((char*)y->data + (size_t)o * esz, (const char*)x->data + (size_t)off * esz, esz);
  }
  return NULL;
}

/* ---- Range ------------------------------------------------------------------- */

/* Element count of Range(start, limit, delta): max(ceil((limit - start) /
 * delta), 0), in exact integer arithmetic for integer types. */
static kiln_status_t range_count(const kiln_array_t* const* v, int64_t* out) {
  kiln_dtype_t dt = v[0]->dtype;
  for (int k = 0; k < 3; ++k) {
    if (v[k]->dtype != dt || kiln_array_numel(v[k]) != 1) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Range: start, limit and delta must be scalars of one dtype");
    }
  }
  if (kiln_dtype_is_float(dt)) {
    double s = kiln_load_f64(dt, v[0]->data, 0), l = kiln_load_f64(dt, v[1]->data, 0);
    double d = kiln_load_f64(dt, v[2]->data, 0);
    double n = ceil((l - s) / d);
    if (d == 0.0 || !(n == n) || n > (double)INT32_MAX) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Range: start %g, limit %g, delta %g give no finite element count", s, l, d);
    }
    *out = n > 0 ? (int64_t)n : 0;
    return NULL;
  }
  if (dt != KILN_DTYPE_I32 && dt != KILN_DTYPE_I64) {
    return kiln_make_status(KILN_UNSUPPORTED, "Range: dtype %s is not supported", kiln_dtype_name(dt));
  }
  int64_t s = kiln_load_i64(dt, v[0]->data, 0), l = kiln_load_i64(dt, v[1]->data, 0);
  int64_t d = kiln_load_i64(dt, v[2]->data, 0);
  if (d == 0) return kiln_make_status(KILN_INVALID_ARGUMENT, "Range: delta is 0");
  __int128 span = (__int128)l - s;
  __int128 n = span / d + ((span % d != 0) && ((span > 0) == (d > 0)) ? 1 : 0);
  if (n > INT32_MAX) return kiln_make_status(KILN_LIMIT_EXCEEDED, "Range: %lld elements is too many", (long long)n);
  *out = n > 0 ? (int64_t)n : 0;
  return NULL;
}

kiln_status_t kiln_tensor_range_infer(kiln_infer_t* ctx) {
  const kiln_array_t* v[3];
  bool known = true;
  for (int32_t k = 0; k < 3; ++k) {
    const kiln_tensor_t* t = ctx->in[k];
    if (t->shape.rank > 0 && kiln_shape_count(&t->shape) != 1)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "Range: input %d '%s' is not a scalar", (int)k, t->name);
    v[k] = kiln_tensor_value(ctx, k);
    if (!v[k]) known = false;
  }
  KILN_TRY(kiln_tensor_same_dtype(ctx, "Range", 0, 2));
  kiln_shape_t out = kiln_tensor_unknown_rank(1);
  if (known) KILN_TRY(range_count(v, &out.dims[0]));
  kiln_infer_set(ctx, 0, ctx->in[0]->dtype, &out);
  return NULL;
}

kiln_status_t kiln_tensor_range_run(const kiln_ref_ctx_t* ctx) {
  kiln_array_t* y = ctx->out[0];
  int64_t n;
  KILN_TRY(range_count(ctx->in, &n));
  const kiln_dtype_t dt = ctx->in[0]->dtype;
  if (y->dtype != dt || kiln_array_numel(y) != n) return shape_mismatch("Range");
  for (int64_t i = 0; i < n; ++i) {
    if (kiln_dtype_is_float(dt)) {
      double s = kiln_load_f64(dt, ctx->in[0]->data, 0), d = kiln_load_f64(dt, ctx->in[2]->data, 0);
      kiln_store_f64(dt, y->data, (size_t)i, s + (double)i * d);
    } else {
      int64_t s = kiln_load_i64(dt, ctx->in[0]->data, 0), d = kiln_load_i64(dt, ctx->in[2]->data, 0);
      kiln_store_i64(dt, y->data, (size_t)i, (int64_t)((uint64_t)s + (uint64_t)i * (uint64_t)d));
    }
  }
  return NULL;
}

/* ---- Trilu, EyeLike ------------------------------------------------------------ */

kiln_status_t kiln_tensor_trilu_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  if (x->shape.rank >= 0 && x->shape.rank < 2)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Trilu: input '%s' has rank %d, expected >= 2", x->name,
                            (int)x->shape.rank);
  const kiln_tensor_t* k = kiln_tensor_in(ctx, 1);
  if (k && ((k->dtype != KILN_DTYPE_UNDEFINED && k->dtype != KILN_DTYPE_I64) ||
            (k->shape.rank > 0 && kiln_shape_count(&k->shape) != 1)))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Trilu: k '%s' must be an i64 scalar", k->name);
  kiln_infer_set(ctx, 0, x->dtype, &x->shape);
  return NULL;
}

kiln_status_t kiln_tensor_trilu_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  kiln_array_t* y = ctx->out[0];
  int64_t upper = 1, k = 0;
  KILN_TRY(kiln_attr_int(ctx->node, "upper", 1, &upper));
  const kiln_array_t* ka = kiln_tensor_arr(ctx, 1);
  if (ka) {
    if (ka->dtype != KILN_DTYPE_I64 || kiln_array_numel(ka) != 1)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "Trilu: k must be an i64 scalar");
    k = kiln_load_i64(ka->dtype, ka->data, 0);
  }
  const int32_t r = x->shape.rank;
  if (r < 2 || y->dtype != x->dtype || !kiln_shape_equal(&x->shape, &y->shape)) return shape_mismatch("Trilu");
  const int64_t rows = x->shape.dims[r - 2], cols = x->shape.dims[r - 1];
  const size_t esz = kiln_dtype_size(x->dtype);
  const int64_t n = kiln_array_numel(y);
  for (int64_t o = 0; o < n; ++o) {
    int64_t j = o % cols, i = (o / cols) % rows;
    /* j - i compared with k, without overflow for any k. */
    bool keep = upper ? (__int128)j - i >= k : (__int128)j - i <= k;
    if (keep) memcpy((char*)y->data + (size_t)o * esz, (const char*)x->data + (size_t)o * esz, esz);
    else memset((char*)y->data + (size_t)o * esz, 0, esz);
  }
  return NULL;
}

/* EyeLike's output dtype: the 'dtype' attribute or the input's. */
kiln_status_t kiln_tensor_eye_like_dtype(const kiln_node_t* node, kiln_dtype_t in, kiln_dtype_t* out) {
  int64_t d = 0;
  KILN_TRY(kiln_attr_int(node, "dtype", 0, &d));
  if (!kiln_node_attr(node, "dtype")) {
    *out = in;
    return NULL;
  }
  *out = (d > 0 && d <= INT32_MAX) ? kiln_dtype_from_onnx((int32_t)d) : KILN_DTYPE_UNDEFINED;
  if (*out == KILN_DTYPE_UNDEFINED)
    return kiln_make_status(KILN_UNSUPPORTED, "EyeLike: dtype %s is not supported",
                            kiln_onnx_dtype_name((int32_t)d));
  return NULL;
}

kiln_status_t kiln_tensor_eye_like_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  if (x->shape.rank >= 0 && x->shape.rank != 2)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "EyeLike: input '%s' has rank %d, expected 2", x->name,
                            (int)x->shape.rank);
  kiln_dtype_t dt;
  KILN_TRY(kiln_tensor_eye_like_dtype(ctx->node, x->dtype, &dt));
  kiln_shape_t s = x->shape.rank < 0 ? kiln_tensor_unknown_rank(2) : x->shape;
  kiln_infer_set(ctx, 0, dt, &s);
  return NULL;
}

kiln_status_t kiln_tensor_eye_like_run(const kiln_ref_ctx_t* ctx) {
  kiln_array_t* y = ctx->out[0];
  int64_t k = 0;
  KILN_TRY(kiln_attr_int(ctx->node, "k", 0, &k));
  if (y->shape.rank != 2 || !kiln_shape_equal(&y->shape, &ctx->in[0]->shape)) return shape_mismatch("EyeLike");
  const int64_t cols = y->shape.dims[1], n = kiln_array_numel(y);
  for (int64_t o = 0; o < n; ++o)
    kiln_store_i64(y->dtype, y->data, (size_t)o, (__int128)(o % cols) - o / cols == k ? 1 : 0);
  return NULL;
}

/* ---- Size ------------------------------------------------------------------------ */

kiln_status_t kiln_tensor_size_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  kiln_shape_t s = kiln_shape_make(0, NULL);
  kiln_infer_set(ctx, 0, KILN_DTYPE_I64, &s);
  if (ctx->runtime || !kiln_shape_is_static(&x->shape)) return NULL;
  int64_t n = kiln_shape_count(&x->shape);
  kiln_array_t v = {KILN_DTYPE_I64, s, &n, sizeof n};
  return kiln_infer_set_value(ctx, 0, &v);
}

kiln_status_t kiln_tensor_size_run(const kiln_ref_ctx_t* ctx) {
  kiln_array_t* y = ctx->out[0];
  if (y->dtype != KILN_DTYPE_I64 || kiln_array_numel(y) != 1) return shape_mismatch("Size");
  *(int64_t*)y->data = kiln_array_numel(ctx->in[0]);
  return NULL;
}

/* ---- OneHot ----------------------------------------------------------------------- */

/* depth: a one-element numeric tensor, truncated to an integer >= 1. */
kiln_status_t kiln_tensor_one_hot_depth(const kiln_array_t* d, int64_t* out) {
  if (kiln_array_numel(d) != 1 || d->dtype == KILN_DTYPE_BOOL)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "OneHot: depth must be a one-element number");
  double v = kiln_dtype_is_float(d->dtype) ? kiln_load_f64(d->dtype, d->data, 0)
                                           : (double)kiln_load_i64(d->dtype, d->data, 0);
  if (!(v >= 1.0) || v > (double)INT32_MAX)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "OneHot: depth %g is not in [1, 2^31)", v);
  *out = (int64_t)v;
  return NULL;
}

kiln_status_t kiln_tensor_one_hot_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* ind = ctx->in[0];
  const kiln_tensor_t* val = ctx->in[2];
  if (val->shape.rank >= 0 && (val->shape.rank != 1 || (kiln_dim_known(val->shape.dims[0]) && val->shape.dims[0] != 2)))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "OneHot: values '%s' must hold 2 elements [off, on]",
                            val->name);
  if (ind->dtype == KILN_DTYPE_BOOL)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "OneHot: indices '%s' are bool", ind->name);
  const int32_t q = ind->shape.rank;
  if (q < 0) {
    kiln_shape_t s = kiln_shape_unknown();
    kiln_infer_set(ctx, 0, val->dtype, &s);
    return NULL;
  }
  KILN_TRY(kiln_tensor_check_rank("OneHot", (int64_t)q + 1));
  int64_t a = -1;
  int32_t axis;
  KILN_TRY(kiln_attr_int(ctx->node, "axis", -1, &a));
  KILN_TRY(kiln_tensor_axis("OneHot", "axis", a, q + 1, &axis));
  int64_t depth = KILN_DIM_UNKNOWN;
  const kiln_array_t* dv = kiln_tensor_value(ctx, 1);
  if (dv) KILN_TRY(kiln_tensor_one_hot_depth(dv, &depth));
  kiln_shape_t out = kiln_tensor_unknown_rank(q + 1);
  for (int32_t k = 0, j = 0; k <= q; ++k) out.dims[k] = k == axis ? depth : ind->shape.dims[j++];
  kiln_infer_set(ctx, 0, val->dtype, &out);
  return NULL;
}

kiln_status_t kiln_tensor_one_hot_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* ind = ctx->in[0];
  const kiln_array_t* val = ctx->in[2];
  kiln_array_t* y = ctx->out[0];
  int64_t depth, a = -1;
  int32_t axis;
  KILN_TRY(kiln_tensor_one_hot_depth(ctx->in[1], &depth));
  const int32_t q = ind->shape.rank;
  KILN_TRY(kiln_attr_int(ctx->node, "axis", -1, &a));
  KILN_TRY(kiln_tensor_axis("OneHot", "axis", a, q + 1, &axis));
  if (kiln_array_numel(val) != 2 || y->dtype != val->dtype || y->shape.rank != q + 1 ||
      y->shape.dims[axis] != depth || kiln_array_numel(y) != kiln_array_numel(ind) * depth)
    return shape_mismatch("OneHot");
  int64_t after = 1;
  for (int32_t k = axis + 1; k <= q; ++k) after *= y->shape.dims[k];
  const size_t esz = kiln_dtype_size(y->dtype);
  const int64_t n = kiln_array_numel(y);
  for (int64_t o = 0; o < n; ++o) {
    int64_t pos = (o / after) % depth;
    int64_t src = (o / (after * depth)) * after + o % after; /* the index element */
    int64_t i = depth; /* matches no position */
    if (kiln_dtype_is_float(ind->dtype)) {
      double f = kiln_load_f64(ind->dtype, ind->data, (size_t)src);
      if (f > -2.0 * (double)depth && f < 2.0 * (double)depth) i = (int64_t)f;
    } else {
      i = kiln_load_i64(ind->dtype, ind->data, (size_t)src);
    }
    if (i < 0) i += depth;
    memcpy((char*)y->data + (size_t)o * esz, (const char*)val->data + (i == pos ? esz : 0), esz);
  }
  return NULL;
}

/* ---- DepthToSpace / SpaceToDepth ------------------------------------------------- */

/* Blocksize and, for DepthToSpace, whether the mode is CRD. */
kiln_status_t kiln_tensor_d2s_attrs(const kiln_node_t* node, const char* op, int64_t* b, bool* crd) {
  KILN_TRY(kiln_attr_int_required(node, "blocksize", b));
  if (*b < 1 || *b > 65536)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: blocksize %lld is not in [1, 65536]", op, (long long)*b);
  *crd = false;
  if (strcmp(op, "DepthToSpace") != 0) return NULL;
  const char* mode = "DCR";
  KILN_TRY(kiln_attr_string(node, "mode", "DCR", &mode));
  if (strcmp(mode, "DCR") != 0 && strcmp(mode, "CRD") != 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "DepthToSpace: mode '%s' is not DCR or CRD", mode);
  *crd = strcmp(mode, "CRD") == 0;
  return NULL;
}

/* Output shape of DepthToSpace (|d2s|) or SpaceToDepth on [N, C, H, W]. */
static kiln_status_t d2s_shape(const char* op, bool d2s, int64_t b, const kiln_shape_t* x, kiln_shape_t* out) {
  if (x->rank != 4)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: input has rank %d, expected 4", op, (int)x->rank);
  *out = *x;
  const int64_t bb = b * b, c = x->dims[1], h = x->dims[2], w = x->dims[3];
  if (d2s) {
    if (kiln_dim_known(c) && c % bb != 0)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: %lld channels do not divide by blocksize^2 %lld", op,
                              (long long)c, (long long)bb);
    out->dims[1] = kiln_dim_known(c) ? c / bb : KILN_DIM_UNKNOWN;
    out->dims[2] = kiln_dim_known(h) ? h * b : KILN_DIM_UNKNOWN;
    out->dims[3] = kiln_dim_known(w) ? w * b : KILN_DIM_UNKNOWN;
    return NULL;
  }
  if ((kiln_dim_known(h) && h % b != 0) || (kiln_dim_known(w) && w % b != 0))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: height %lld and width %lld must divide by blocksize %lld",
                            op, (long long)h, (long long)w, (long long)b);
  out->dims[1] = kiln_dim_known(c) ? c * bb : KILN_DIM_UNKNOWN;
  out->dims[2] = kiln_dim_known(h) ? h / b : KILN_DIM_UNKNOWN;
  out->dims[3] = kiln_dim_known(w) ? w / b : KILN_DIM_UNKNOWN;
  return NULL;
}

static kiln_status_t d2s_infer(kiln_infer_t* ctx, const char* op, bool d2s) {
  const kiln_tensor_t* x = ctx->in[0];
  int64_t b;
  bool crd;
  KILN_TRY(kiln_tensor_d2s_attrs(ctx->node, op, &b, &crd));
  kiln_shape_t out = kiln_tensor_unknown_rank(4);
  if (x->shape.rank >= 0) KILN_TRY(d2s_shape(op, d2s, b, &x->shape, &out));
  kiln_infer_set(ctx, 0, x->dtype, &out);
  return NULL;
}

kiln_status_t kiln_tensor_depth_to_space_infer(kiln_infer_t* ctx) {
  return d2s_infer(ctx, "DepthToSpace", true);
}
kiln_status_t kiln_tensor_space_to_depth_infer(kiln_infer_t* ctx) {
  return d2s_infer(ctx, "SpaceToDepth", false);
}

/* Source strides of the 6-d view both ops are: the output read as
 * [N, C', H, b, W, b] (DepthToSpace) or [N, b, b, C, H', W'] (SpaceToDepth). */
void kiln_tensor_d2s_view(bool d2s, bool crd, int64_t b, const int64_t* xd, int64_t* dims, int64_t* st) {
  const int64_t C = xd[1], H = xd[2], W = xd[3], HW = H * W;
  if (d2s) {
    const int64_t c = C / (b * b);
    const int64_t d[6] = {xd[0], c, H, b, W, b};
    const int64_t s_dcr[6] = {C * HW, HW, W, b * c * HW, 1, c * HW};
    const int64_t s_crd[6] = {C * HW, b * b * HW, W, b * HW, 1, HW};
    memcpy(dims, d, sizeof d);
    memcpy(st, crd ? s_crd : s_dcr, sizeof s_dcr);
    return;
  }
  const int64_t d[6] = {xd[0], b, b, C, H / b, W / b};
  const int64_t s[6] = {C * HW, W, 1, HW, b * W, b};
  memcpy(dims, d, sizeof d);
  memcpy(st, s, sizeof s);
}

static kiln_status_t d2s_run(const kiln_ref_ctx_t* ctx, const char* op, bool d2s) {
  const kiln_array_t* x = ctx->in[0];
  kiln_array_t* y = ctx->out[0];
  int64_t b;
  bool crd;
  KILN_TRY(kiln_tensor_d2s_attrs(ctx->node, op, &b, &crd));
  kiln_shape_t want;
  KILN_TRY(d2s_shape(op, d2s, b, &x->shape, &want));
  if (y->dtype != x->dtype || !kiln_shape_equal(&want, &y->shape)) return shape_mismatch(op);
  int64_t dims[6], st[6];
  kiln_tensor_d2s_view(d2s, crd, b, x->shape.dims, dims, st);
  kiln_tensor_strided_copy(y->data, x->data, kiln_dtype_size(x->dtype), 6, dims, st, 0);
  return NULL;
}

kiln_status_t kiln_tensor_depth_to_space_run(const kiln_ref_ctx_t* ctx) {
  return d2s_run(ctx, "DepthToSpace", true);
}
kiln_status_t kiln_tensor_space_to_depth_run(const kiln_ref_ctx_t* ctx) {
  return d2s_run(ctx, "SpaceToDepth", false);
}
