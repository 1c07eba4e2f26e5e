/* The quantized ONNX ops: QuantizeLinear, DequantizeLinear,
 * DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger and
 * QLinearConv. Shape/type inference with the quantization checks of
 * BAD_INPUTS row 29 (a zero, negative or non-finite constant scale, a zero
 * point whose dtype is not its data's, an axis outside the rank, a
 * per-channel count that differs from the channel count), and reference
 * kernels with ONNX's integer semantics:
 *   quantize    q = saturate(round_half_even(x / scale) + zero_point)
 *   dequantize  y = (f32(x) - f32(zero_point)) * scale
 *   products    int32 sums of (a - a_zp) * (b - b_zp), zero points
 *               subtracted before the multiply; the QLinear ops requantize
 *               with the f32 multiplier (a_scale * b_scale) / y_scale.
 * The division x / scale is a true division (a reciprocal multiply moves
 * ties). The lowering (lowering/lower_nn_quant.c) computes the same
 * expressions in the same order, in f32 and i32, so every target matches
 * the reference bit for bit. */
#include <math.h>
#include <string.h>

#include "ir/f8.h"
#include "ir/ops/nn_quant.h"

/* ---- parameters ----------------------------------------------------------- */

bool kiln_nn_quant_range(kiln_dtype_t t, int64_t* lo, int64_t* hi) {
  switch (t) {
    case KILN_DTYPE_U8: *lo = 0, *hi = 255; return true;
    case KILN_DTYPE_I8: *lo = -128, *hi = 127; return true;
    case KILN_DTYPE_U16: *lo = 0, *hi = 65535; return true;
    case KILN_DTYPE_I16: *lo = -32768, *hi = 32767; return true;
    case KILN_DTYPE_I32: *lo = INT32_MIN, *hi = INT32_MAX; return true;
    case KILN_DTYPE_U4: *lo = 0, *hi = 15; return true;
    case KILN_DTYPE_I4: *lo = -8, *hi = 7; return true;
    default: return false;
  }
}

kiln_status_t kiln_nn_qp_setup(const char* op, const kiln_shape_t* x, const char* xname,
                               const kiln_shape_t* p, const char* pname, int64_t axis,
                               int64_t block, kiln_nn_qp_t* out) {
  memset(out, 0, sizeof *out);
  const int64_t pn = kiln_shape_count(p);
  char xs[96], ps[96];
  kiln_shape_format(x, xs, sizeof xs);
  kiln_shape_format(p, ps, sizeof ps);
  if (block < 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: block_size is %lld, must be >= 0", op,
                            (long long)block);
  }
  if (pn == 1 && p->rank <= 1 && block == 0) return NULL; /* per tensor */
  int32_t a;
  if (axis < -x->rank || axis >= x->rank) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: axis %lld is outside the rank %d of '%s' %s (per-axis '%s' %s)",
                            op, (long long)axis, (int)x->rank, xname, xs, pname, ps);
  }
  a = (int32_t)(axis < 0 ? axis + x->rank : axis);
  out->axis = a;
  out->dim = x->dims[a];
  out->inner = kiln_nn_prod(x, a + 1, x->rank);
  if (block == 0) {
    if (p->rank != 1 || p->dims[0] != x->dims[a]) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: '%s' has shape %s; per-axis parameters need %lld elements "
                              "(dim %d of '%s' %s)",
                              op, pname, ps, (long long)x->dims[a], (int)a, xname, xs);
    }
    out->kind = KILN_NN_QP_AXIS;
    return NULL;
  }
  bool fits = p->rank == x->rank;
  const int64_t nb = (x->dims[a] + block - 1) / block;
  for (int32_t i = 0; fits && i < x->rank; ++i)
    fits = p->dims[i] == (i == a ? nb : x->dims[i]);
  if (!fits) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: '%s' has shape %s, which does not block '%s' %s along axis %d "
                            "in blocks of %lld",
                            op, pname, ps, xname, xs, (int)a, (long long)block);
  }
  out->kind = KILN_NN_QP_BLOCK;
  out->block = block;
  out->nb = nb;
  return NULL;
}

/* A constant scale (an initializer, or folded at load) must be positive
 * and finite in every element: zero or NaN would make a NaN model. */
static kiln_status_t check_scale_values(const kiln_infer_t* ctx, const char* op, int32_t si) {
  if (ctx->runtime || !kiln_infer_has_value(ctx, si)) return NULL;
  const kiln_array_t* v = &ctx->in[si]->value;
  const int64_t n = kiln_array_numel(v);
  for (int64_t i = 0; i < n; ++i) {
    const double d = kiln_load_f64(v->dtype, v->data, (size_t)i);
    if (!(d > 0.0) || !isfinite(d)) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: scale '%s' element %lld is %g; a scale must be positive and "
                              "finite",
                              op, kiln_nn_in_name(ctx, si), (long long)i, d);
    }
  }
  return NULL;
}

/* Checks the scale |si| and zero point |zi| (may be absent) of data |xi|:
 * dtypes (a float scale; a zero point of dtype |zt|), matching shapes, the
 * per-axis/blocked layout when shapes are static (|axis|, |block|), and the
 * values of constant scales. */
static kiln_status_t check_qparams(const kiln_infer_t* ctx, const char* op, int32_t xi,
                                   int32_t si, int32_t zi, int64_t axis, int64_t block,
                                   kiln_dtype_t zt) {
  const kiln_tensor_t* x = ctx->in[xi];
  const kiln_tensor_t* s = ctx->in[si];
  const kiln_tensor_t* z = zi < ctx->n_in ? ctx->in[zi] : NULL;
  KILN_RETURN_IF_ERROR(kiln_nn_require_float(ctx, op, si));
  if (z && z->dtype != KILN_DTYPE_UNDEFINED && zt != KILN_DTYPE_UNDEFINED && z->dtype != zt) {
    int64_t lo = 0, hi = 0;
    kiln_nn_quant_range(zt, &lo, &hi);
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: zero point '%s' has dtype %s, whose range is not the %s range "
                            "[%lld, %lld] of '%s'",
                            op, kiln_nn_in_name(ctx, zi), kiln_dtype_name(z->dtype),
                            kiln_dtype_name(zt), (long long)lo, (long long)hi,
                            kiln_nn_in_name(ctx, xi));
  }
  /* one element either way ([] beside [1], as onnxruntime writes them) is
   * per tensor for both */
  if (z && kiln_shape_is_static(&z->shape) && kiln_shape_is_static(&s->shape) &&
      !kiln_shape_equal(&z->shape, &s->shape) &&
      !(kiln_shape_count(&z->shape) == 1 && kiln_shape_count(&s->shape) == 1 &&
        z->shape.rank <= 1 && s->shape.rank <= 1)) {
    char a[96], b[96];
    kiln_shape_format(&s->shape, a, sizeof a);
    kiln_shape_format(&z->shape, b, sizeof b);
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: zero point '%s' has shape %s but scale '%s' has shape %s", op,
                            kiln_nn_in_name(ctx, zi), b, kiln_nn_in_name(ctx, si), a);
  }
  if (x->shape.rank >= 0 && (axis < -x->shape.rank || axis >= x->shape.rank) &&
      !(s->shape.rank == 0 || (kiln_shape_is_static(&s->shape) &&
                               kiln_shape_count(&s->shape) == 1 && block == 0))) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: axis %lld is outside the rank %d of '%s'",
                            op, (long long)axis, (int)x->shape.rank, kiln_nn_in_name(ctx, xi));
  }
  /* a 4-bit zero point held one value a byte (built by hand, or from a
   * .npy) can leave its 4-bit range; an ONNX file's nibbles cannot */
  if (z && kiln_dtype_is_int4(z->dtype) && !ctx->runtime && kiln_infer_has_value(ctx, zi)) {
    int64_t lo = 0, hi = 0;
    kiln_nn_quant_range(z->dtype, &lo, &hi);
    const int64_t n = kiln_array_numel(&z->value);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = kiln_load_i64(z->dtype, z->value.data, (size_t)i);
      if (v < lo || v > hi)
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "%s: zero point '%s' element %lld is %lld, outside the %s range "
                                "[%lld, %lld]",
                                op, kiln_nn_in_name(ctx, zi), (long long)i, (long long)v,
                                kiln_dtype_name(z->dtype), (long long)lo, (long long)hi);
    }
  }
  if (kiln_shape_is_static(&x->shape) && kiln_shape_is_static(&s->shape)) {
    kiln_nn_qp_t q;
    KILN_RETURN_IF_ERROR(kiln_nn_qp_setup(op, &x->shape, kiln_nn_in_name(ctx, xi), &s->shape,
                                          kiln_nn_in_name(ctx, si), axis, block, &q));
  }
  return check_scale_values(ctx, op, si);
}

/* A per-tensor parameter (scalar or [1]), or one per |count| channels
 * (1-D) when |per_channel|; |what| names the channels in the message. */
static kiln_status_t check_channel_param(const kiln_infer_t* ctx, const char* op, int32_t i,
                                         bool per_channel, int64_t count, const char* what) {
  if (i >= ctx->n_in || !ctx->in[i]) return NULL;
  const kiln_shape_t* s = &ctx->in[i]->shape;
  if (!kiln_shape_is_static(s)) return NULL;
  const int64_t n = kiln_shape_count(s);
  if (s->rank <= 1 && n == 1) return NULL;
  char ss[96];
  kiln_shape_format(s, ss, sizeof ss);
  if (!per_channel) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "%s: '%s' has shape %s; kiln supports only a per-tensor value here "
                            "(a scalar or [1])",
                            op, kiln_nn_in_name(ctx, i), ss);
  }
  if (s->rank != 1 || (count >= 0 && n != count)) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: '%s' has shape %s, expected a scalar or [%lld] (one per %s)", op,
                            kiln_nn_in_name(ctx, i), ss, (long long)count, what);
  }
  return NULL;
}

static kiln_status_t require_q8(const kiln_infer_t* ctx, const char* op, int32_t i) {
  const kiln_dtype_t t = ctx->in[i]->dtype;
  if (t == KILN_DTYPE_U8 || t == KILN_DTYPE_I8 || t == KILN_DTYPE_UNDEFINED) return NULL;
  return kiln_make_status(KILN_UNSUPPORTED, "%s: input '%s' has dtype %s; %s takes u8 or i8", op,
                          kiln_nn_in_name(ctx, i), kiln_dtype_name(t), op);
}

static const kiln_tensor_t* opt_in(const kiln_infer_t* ctx, int32_t i) {
  return i < ctx->n_in ? ctx->in[i] : NULL;
}

/* ---- QuantizeLinear / DequantizeLinear ------------------------------------ */

static kiln_status_t q_attrs(const kiln_node_t* n, int64_t* axis, int64_t* block) {
  KILN_RETURN_IF_ERROR(kiln_attr_int(n, "axis", 1, axis));
  return kiln_attr_int(n, "block_size", 0, block);
}

/* QuantizeLinear's output dtype: the zero point's, else output_dtype
 * (opset 21), else u8. */
static kiln_status_t q_out_dtype(const kiln_infer_t* ctx, kiln_dtype_t* out) {
  const char* op = "QuantizeLinear";
  int64_t od;
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "output_dtype", 0, &od));
  kiln_dtype_t t = KILN_DTYPE_U8;
  if (od) {
    const kiln_dtype_t m = od > 0 && od <= 64 ? kiln_dtype_from_onnx((int32_t)od) : KILN_DTYPE_UNDEFINED;
    int64_t lo, hi;
    if (!kiln_dtype_is_f8(m) && (!kiln_nn_quant_range(m, &lo, &hi) || m == KILN_DTYPE_I32)) {
      return kiln_make_status(KILN_UNSUPPORTED,
                              "%s: output_dtype %lld (%s) is not supported (u8, i8, u16, i16, "
                              "u4, i4, float8)",
                              op, (long long)od, kiln_onnx_dtype_name((int32_t)od));
    }
    t = m;
  }
  const kiln_tensor_t* z = opt_in(ctx, 2);
  if (z && z->dtype != KILN_DTYPE_UNDEFINED) {
    if (od && z->dtype != t) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: output_dtype %s disagrees with zero point '%s' of dtype %s",
                              op, kiln_dtype_name(t), kiln_nn_in_name(ctx, 2),
                              kiln_dtype_name(z->dtype));
    }
    t = z->dtype;
  }
  int64_t lo, hi;
  if (!kiln_dtype_is_f8(t) && (!kiln_nn_quant_range(t, &lo, &hi) || t == KILN_DTYPE_I32)) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "%s: zero point '%s' has dtype %s; kiln quantizes to u8, i8, u16, "
                            "i16, u4, i4 and the float8 types",
                            op, kiln_nn_in_name(ctx, 2), kiln_dtype_name(t));
  }
  *out = t;
  return NULL;
}

kiln_status_t kiln_nn_quantize_linear_infer(kiln_infer_t* ctx) {
  const char* op = "QuantizeLinear";
  int64_t axis, block;
  KILN_RETURN_IF_ERROR(q_attrs(ctx->node, &axis, &block));
  int64_t sat;
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "saturate", 1, &sat));
  (void)sat; /* read for its type check; the kernels apply it */
  KILN_RETURN_IF_ERROR(kiln_nn_require_float(ctx, op, 0));
  kiln_dtype_t t = KILN_DTYPE_U8;
  KILN_RETURN_IF_ERROR(q_out_dtype(ctx, &t));
  KILN_RETURN_IF_ERROR(check_qparams(ctx, op, 0, 1, 2, axis, block, t));
  kiln_infer_set(ctx, 0, t, &ctx->in[0]->shape);
  return NULL;
}

kiln_status_t kiln_nn_quantize_linear_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t *x = ctx->in[0], *s = ctx->in[1];
  const kiln_array_t* z = ctx->n_in > 2 ? ctx->in[2] : NULL;
  kiln_array_t* y = ctx->out[0];
  int64_t axis, block, lo, hi;
  KILN_RETURN_IF_ERROR(q_attrs(ctx->node, &axis, &block));
  kiln_nn_qp_t q;
  KILN_RETURN_IF_ERROR(
      kiln_nn_qp_setup("QuantizeLinear", &x->shape, "x", &s->shape, "y_scale", axis, block, &q));
  int64_t sat;
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "saturate", 1, &sat));
  const int64_t n = kiln_array_numel(x);
  if (kiln_dtype_is_f8(y->dtype)) {
    /* x / scale (+ the zero point, 0 in practice) rounded to the float8 */
    for (int64_t e = 0; e < n; ++e) {
      const int64_t p = kiln_nn_qp_at(&q, e);
      float v = (float)kiln_load_f64(x->dtype, x->data, (size_t)e) /
                (float)kiln_load_f64(s->dtype, s->data, (size_t)p);
      if (z) v += (float)kiln_load_f64(z->dtype, z->data, (size_t)p);
      ((uint8_t*)y->data)[e] = kiln_f32_to_f8(y->dtype, v, sat != 0);
    }
    return NULL;
  }
  kiln_nn_quant_range(y->dtype, &lo, &hi);
  for (int64_t e = 0; e < n; ++e) {
    const int64_t p = kiln_nn_qp_at(&q, e);
    float v = (float)kiln_load_f64(x->dtype, x->data, (size_t)e) /
              (float)kiln_load_f64(s->dtype, s->data, (size_t)p);
    v = nearbyintf(v);
    if (z) v += (float)kiln_load_i64(z->dtype, z->data, (size_t)p);
    /* NaN saturates low, as the targets' clamp order gives */
    const int64_t r = !(v > (float)lo) ? lo : v >= (float)hi ? hi : (int64_t)v;
    kiln_store_i64(y->dtype, y->data, (size_t)e, r);
  }
  return NULL;
}

kiln_status_t kiln_nn_dequantize_linear_infer(kiln_infer_t* ctx) {
  const char* op = "DequantizeLinear";
  int64_t axis, block, lo, hi;
  KILN_RETURN_IF_ERROR(q_attrs(ctx->node, &axis, &block));
  const kiln_dtype_t xt = ctx->in[0]->dtype;
  if (xt != KILN_DTYPE_UNDEFINED && !kiln_dtype_is_f8(xt) && !kiln_nn_quant_range(xt, &lo, &hi)) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "%s: input '%s' has dtype %s; kiln dequantizes u8, i8, u16, i16, "
                            "i32, u4, i4 and the float8 types",
                            op, kiln_nn_in_name(ctx, 0), kiln_dtype_name(xt));
  }
  KILN_RETURN_IF_ERROR(check_qparams(ctx, op, 0, 1, 2, axis, block, xt));
  kiln_infer_set(ctx, 0, ctx->in[1]->dtype, &ctx->in[0]->shape);
  return NULL;
}

kiln_status_t kiln_nn_dequantize_linear_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t *x = ctx->in[0], *s = ctx->in[1];
  const kiln_array_t* z = ctx->n_in > 2 ? ctx->in[2] : NULL;
  kiln_array_t* y = ctx->out[0];
  int64_t axis, block;
  KILN_RETURN_IF_ERROR(q_attrs(ctx->node, &axis, &block));
  kiln_nn_qp_t q;
  KILN_RETURN_IF_ERROR(
      kiln_nn_qp_setup("DequantizeLinear", &x->shape, "x", &s->shape, "x_scale", axis, block, &q));
  const int64_t n = kiln_array_numel(x);
  for (int64_t e = 0; e < n; ++e) {
    const int64_t p = kiln_nn_qp_at(&q, e);
    /* float8: its value (exact in f32); integers: exact up to 2^24 as f32 */
    float d = kiln_dtype_is_f8(x->dtype) ? (float)kiln_load_f64(x->dtype, x->data, (size_t)e)
                                         : (float)kiln_load_i64(x->dtype, x->data, (size_t)e);
    if (z)
      d -= kiln_dtype_is_f8(z->dtype) ? (float)kiln_load_f64(z->dtype, z->data, (size_t)p)
                                      : (float)kiln_load_i64(z->dtype, z->data, (size_t)p);
    const float v = d * (float)kiln_load_f64(s->dtype, s->data, (size_t)p);
    kiln_store_f64(y->dtype, y->data, (size_t)e, v);
  }
  return NULL;
}

/* ---- DynamicQuantizeLinear ------------------------------------------------ */

kiln_status_t kiln_nn_dynamic_quantize_linear_infer(kiln_infer_t* ctx) {
  const char* op = "DynamicQuantizeLinear";
  const kiln_dtype_t t = ctx->in[0]->dtype;
  if (t != KILN_DTYPE_UNDEFINED && t != KILN_DTYPE_F32) {
    return kiln_make_status(KILN_UNSUPPORTED, "%s: input '%s' has dtype %s; %s takes f32", op,
                            kiln_nn_in_name(ctx, 0), kiln_dtype_name(t), op);
  }
  const kiln_shape_t scalar = kiln_shape_make(0, NULL);
  kiln_infer_set(ctx, 0, KILN_DTYPE_U8, &ctx->in[0]->shape);
  kiln_infer_set(ctx, 1, KILN_DTYPE_F32, &scalar);
  kiln_infer_set(ctx, 2, KILN_DTYPE_U8, &scalar);
  return NULL;
}

kiln_status_t kiln_nn_dynamic_quantize_linear_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* X = ctx->in[0];
  const float* x = X->data;
  const int64_t n = kiln_array_numel(X);
  /* NaN propagates into the range, as numpy's max does: the scale is NaN,
   * the zero point and every value 0 */
  float mx = 0.0f, mn = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    mx = x[i] > mx || isnan(x[i]) ? x[i] : mx;
    mn = x[i] < mn || isnan(x[i]) ? x[i] : mn;
  }
  const float scale = (mx == mn ? 1.0f : mx - mn) / 255.0f;
  float zp = nearbyintf(0.0f - mn / scale);
  zp = !(zp > 0.0f) ? 0.0f : zp > 255.0f ? 255.0f : zp;
  uint8_t* y = ctx->out[0]->data;
  for (int64_t i = 0; i < n; ++i) {
    const float v = nearbyintf(x[i] / scale) + zp;
    y[i] = (uint8_t)(!(v > 0.0f) ? 0.0f : v >= 255.0f ? 255.0f : v);
  }
  if (ctx->out[1]) *(float*)ctx->out[1]->data = scale;
  if (ctx->out[2]) *(uint8_t*)ctx->out[2]->data = (uint8_t)zp;
  return NULL;
}

/* ---- MatMulInteger / QLinearMatMul ---------------------------------------- */

/* [..., M, K] x [..., K, N] -> [..., M, N] with broadcast batch dims. */
static kiln_status_t mm_shape(const kiln_infer_t* ctx, const char* op, int32_t ai, int32_t bi,
                              kiln_shape_t* out) {
  const kiln_shape_t *a = &ctx->in[ai]->shape, *b = &ctx->in[bi]->shape;
  if (a->rank < 0 || b->rank < 0) {
    *out = kiln_shape_unknown();
    return NULL;
  }
  if (a->rank < 2 || b->rank < 2) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "%s: '%s' has rank %d and '%s' rank %d; kiln takes matrices (rank "
                            ">= 2) here",
                            op, kiln_nn_in_name(ctx, ai), (int)a->rank, kiln_nn_in_name(ctx, bi),
                            (int)b->rank);
  }
  const int64_t ka = a->dims[a->rank - 1], kb = b->dims[b->rank - 2];
  if (kiln_dim_known(ka) && kiln_dim_known(kb) && ka != kb) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: '%s' has %lld columns but '%s' has %lld rows", op,
                            kiln_nn_in_name(ctx, ai), (long long)ka, kiln_nn_in_name(ctx, bi),
                            (long long)kb);
  }
  kiln_shape_t ab = *a, bb = *b;
  ab.rank -= 2, bb.rank -= 2;
  KILN_RETURN_IF_ERROR(kiln_infer_broadcast(&ab, &bb, out));
  out->dims[out->rank++] = a->dims[a->rank - 2];
  out->dims[out->rank++] = b->dims[b->rank - 1];
  return NULL;
}

static int64_t n_rows(const kiln_infer_t* ctx, int32_t ai) {
  const kiln_shape_t* a = &ctx->in[ai]->shape;
  return a->rank >= 2 ? a->dims[a->rank - 2] : KILN_DIM_UNKNOWN;
}

static int64_t n_cols(const kiln_infer_t* ctx, int32_t bi) {
  const kiln_shape_t* b = &ctx->in[bi]->shape;
  return b->rank >= 2 ? b->dims[b->rank - 1] : KILN_DIM_UNKNOWN;
}

static kiln_status_t zp_dtype(const kiln_infer_t* ctx, const char* op, int32_t xi, int32_t zi) {
  const kiln_tensor_t* z = opt_in(ctx, zi);
  if (!z || z->dtype == KILN_DTYPE_UNDEFINED || z->dtype == ctx->in[xi]->dtype) return NULL;
  return kiln_make_status(KILN_INVALID_ARGUMENT,
                          "%s: zero point '%s' has dtype %s, whose range is not the %s range of "
                          "'%s'",
                          op, kiln_nn_in_name(ctx, zi), kiln_dtype_name(z->dtype),
                          kiln_dtype_name(ctx->in[xi]->dtype), kiln_nn_in_name(ctx, xi));
}

kiln_status_t kiln_nn_matmul_integer_infer(kiln_infer_t* ctx) {
  const char* op = "MatMulInteger";
  KILN_RETURN_IF_ERROR(require_q8(ctx, op, 0));
  KILN_RETURN_IF_ERROR(require_q8(ctx, op, 1));
  KILN_RETURN_IF_ERROR(zp_dtype(ctx, op, 0, 2));
  KILN_RETURN_IF_ERROR(zp_dtype(ctx, op, 1, 3));
  KILN_RETURN_IF_ERROR(check_channel_param(ctx, op, 2, true, n_rows(ctx, 0), "row of A"));
  KILN_RETURN_IF_ERROR(check_channel_param(ctx, op, 3, true, n_cols(ctx, 1), "column of B"));
  kiln_shape_t out;
  KILN_RETURN_IF_ERROR(mm_shape(ctx, op, 0, 1, &out));
  kiln_infer_set(ctx, 0, KILN_DTYPE_I32, &out);
  return NULL;
}

/* The scales of a QLinear op (inputs si[k], each followed by its zero
 * point): a float dtype, valid values, and per tensor unless what[k] names
 * the channels of a per-channel one (count[k] of them; -1: unknown). */
static kiln_status_t check_scales(const kiln_infer_t* ctx, const char* op, const int32_t* si,
                                  const int64_t* count, const char* const* what) {
  for (int32_t k = 0; k < 3; ++k) {
    const int32_t i = si[k];
    KILN_RETURN_IF_ERROR(kiln_nn_require_float(ctx, op, i));
    KILN_RETURN_IF_ERROR(check_channel_param(ctx, op, i, what[k] != NULL, count[k], what[k]));
    KILN_RETURN_IF_ERROR(check_channel_param(ctx, op, i + 1, what[k] != NULL, count[k], what[k]));
    KILN_RETURN_IF_ERROR(check_scale_values(ctx, op, i));
  }
  return NULL;
}

kiln_status_t kiln_nn_qlinear_matmul_infer(kiln_infer_t* ctx) {
  const char* op = "QLinearMatMul";
  KILN_RETURN_IF_ERROR(require_q8(ctx, op, 0));
  KILN_RETURN_IF_ERROR(require_q8(ctx, op, 3));
  KILN_RETURN_IF_ERROR(require_q8(ctx, op, 7));
  KILN_RETURN_IF_ERROR(zp_dtype(ctx, op, 0, 2));
  KILN_RETURN_IF_ERROR(zp_dtype(ctx, op, 3, 5));
  const int32_t scales[3] = {1, 4, 6};
  const int64_t counts[3] = {n_rows(ctx, 0), n_cols(ctx, 3), 1};
  const char* const what[3] = {"row of a", "column of b", NULL};
  KILN_RETURN_IF_ERROR(check_scales(ctx, op, scales, counts, what));
  kiln_shape_t out;
  KILN_RETURN_IF_ERROR(mm_shape(ctx, op, 0, 3, &out));
  kiln_infer_set(ctx, 0, ctx->in[7]->dtype, &out);
  return NULL;
}

int64_t kiln_nn_matmul_integer_flops(const kiln_infer_t* ctx) {
  const kiln_shape_t* a = &ctx->in[0]->shape;
  if (!ctx->out[0] || !kiln_shape_is_static(&ctx->out[0]->shape) || a->rank < 1 ||
      !kiln_dim_known(a->dims[a->rank - 1]))
    return 0;
  return kiln_nn_mul_sat(2 * kiln_shape_count(&ctx->out[0]->shape), a->dims[a->rank - 1]);
}

int64_t kiln_nn_qlinear_matmul_flops(const kiln_infer_t* ctx) {
  return kiln_nn_matmul_integer_flops(ctx);
}

/* Broadcast batch offsets: the matrix of operand |s| that output batch |b|
 * (dims ob[0..nob)) reads. */
static int64_t mm_batch(const kiln_shape_t* s, const int64_t* ob, int32_t nob, int64_t b) {
  const int32_t sb = s->rank - 2;
  int64_t off = 0, mul = 1;
  for (int32_t i = nob - 1; i >= 0; --i) {
    const int64_t idx = b % ob[i];
    b /= ob[i];
    const int32_t j = i - (nob - sb);
    if (j < 0) continue;
    if (s->dims[j] != 1) off += idx * mul;
    mul *= s->dims[j];
  }
  return off;
}

static int64_t ld_or0(const kiln_array_t* a, int64_t i) {
  if (!a) return 0;
  return kiln_load_i64(a->dtype, a->data, (size_t)(kiln_array_numel(a) == 1 ? 0 : i));
}

static float ldf_at(const kiln_array_t* a, int64_t i) {
  return (float)kiln_load_f64(a->dtype, a->data, (size_t)(kiln_array_numel(a) == 1 ? 0 : i));
}

/* acc[b][m][n] = sum_k (A - azp[m]) * (B - bzp[n]) in wrapping int32. */
static void mm_int(const kiln_array_t* A, const kiln_array_t* B, const kiln_array_t* az,
                   const kiln_array_t* bz, const kiln_shape_t* ys, int32_t* acc) {
  const int32_t nob = ys->rank - 2;
  const int64_t M = ys->dims[nob], N = ys->dims[nob + 1], K = A->shape.dims[A->shape.rank - 1];
  const int64_t batch = kiln_nn_prod(ys, 0, nob);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t ao = mm_batch(&A->shape, ys->dims, nob, b) * M * K;
    const int64_t bo = mm_batch(&B->shape, ys->dims, nob, b) * K * N;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        const int64_t azp = ld_or0(az, m), bzp = ld_or0(bz, n);
        uint32_t s = 0;
        for (int64_t k = 0; k < K; ++k) {
          const int64_t av = kiln_load_i64(A->dtype, A->data, (size_t)(ao + m * K + k)) - azp;
          const int64_t bv = kiln_load_i64(B->dtype, B->data, (size_t)(bo + k * N + n)) - bzp;
          s += (uint32_t)(av * bv);
        }
        acc[(b * M + m) * N + n] = (int32_t)s;
      }
  }
}

kiln_status_t kiln_nn_matmul_integer_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* az = ctx->n_in > 2 ? ctx->in[2] : NULL;
  const kiln_array_t* bz = ctx->n_in > 3 ? ctx->in[3] : NULL;
  mm_int(ctx->in[0], ctx->in[1], az, bz, &ctx->out[0]->shape, ctx->out[0]->data);
  return NULL;
}

/* Requantizes an int32 sum: saturate(round_half_even(f32(acc) * mult) +
 * zp) with mult = (s1 * s2) / s3 in f32. */
static int64_t requant(int32_t acc, float mult, int64_t zp, int64_t lo, int64_t hi) {
  const float v = nearbyintf((float)acc * mult) + (float)zp;
  return !(v > (float)lo) ? lo : v >= (float)hi ? hi : (int64_t)v;
}

kiln_status_t kiln_nn_qlinear_matmul_run(const kiln_ref_ctx_t* ctx) {
  kiln_array_t* Y = ctx->out[0];
  const int64_t n_all = kiln_array_numel(Y);
  int32_t* acc = NULL;
  KILN_RETURN_IF_ERROR(
      kiln_nn_scratch(ctx, n_all ? n_all : 1, sizeof(int32_t), "QLinearMatMul sums", (void**)&acc));
  mm_int(ctx->in[0], ctx->in[3], ctx->in[2], ctx->in[5], &Y->shape, acc);
  int64_t lo, hi;
  kiln_nn_quant_range(Y->dtype, &lo, &hi);
  const int64_t M = Y->shape.dims[Y->shape.rank - 2], N = Y->shape.dims[Y->shape.rank - 1];
  const float ys = ldf_at(ctx->in[6], 0);
  const int64_t yz = ld_or0(ctx->in[7], 0);
  for (int64_t e = 0; e < n_all; ++e) {
    const float mult = ldf_at(ctx->in[1], (e / N) % M) * ldf_at(ctx->in[4], e % N) / ys;
    kiln_store_i64(Y->dtype, Y->data, (size_t)e, requant(acc[e], mult, yz, lo, hi));
  }
  kiln_nn_scratch_free(ctx, acc);
  return NULL;
}

/* ---- ConvInteger / QLinearConv -------------------------------------------- */

/* Shape of an integer convolution with data |xi|, weight |wi|, bias |bi|
 * (-1: none) and the weight's zero point |wzi| per output channel. */
static kiln_status_t iconv_infer(kiln_infer_t* ctx, const char* op, int32_t xi, int32_t wi,
                                 int32_t bi, kiln_shape_t* out) {
  const kiln_tensor_t* b = bi >= 0 ? opt_in(ctx, bi) : NULL;
  if (b && b->dtype != KILN_DTYPE_UNDEFINED && b->dtype != KILN_DTYPE_I32) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: bias '%s' has dtype %s, expected i32", op,
                            kiln_nn_in_name(ctx, bi), kiln_dtype_name(b->dtype));
  }
  kiln_nn_window_t win;
  int64_t group;
  return kiln_nn_conv_shape(ctx->node, op, &ctx->in[xi]->shape, kiln_nn_in_name(ctx, xi),
                            &ctx->in[wi]->shape, kiln_nn_in_name(ctx, wi), b ? &b->shape : NULL,
                            &win, &group, out);
}

static int64_t out_channels(const kiln_infer_t* ctx, int32_t wi) {
  const kiln_shape_t* w = &ctx->in[wi]->shape;
  return w->rank >= 1 ? w->dims[0] : KILN_DIM_UNKNOWN;
}

kiln_status_t kiln_nn_conv_integer_infer(kiln_infer_t* ctx) {
  const char* op = "ConvInteger";
  KILN_RETURN_IF_ERROR(require_q8(ctx, op, 0));
  KILN_RETURN_IF_ERROR(require_q8(ctx, op, 1));
  KILN_RETURN_IF_ERROR(zp_dtype(ctx, op, 0, 2));
  KILN_RETURN_IF_ERROR(zp_dtype(ctx, op, 1, 3));
  KILN_RETURN_IF_ERROR(check_channel_param(ctx, op, 2, false, 1, "tensor"));
  KILN_RETURN_IF_ERROR(
      check_channel_param(ctx, op, 3, true, out_channels(ctx, 1), "output channel"));
  kiln_shape_t out;
  KILN_RETURN_IF_ERROR(iconv_infer(ctx, op, 0, 1, -1, &out));
  kiln_infer_set(ctx, 0, KILN_DTYPE_I32, &out);
  return NULL;
}

kiln_status_t kiln_nn_qlinear_conv_infer(kiln_infer_t* ctx) {
  const char* op = "QLinearConv";
  KILN_RETURN_IF_ERROR(require_q8(ctx, op, 0));
  KILN_RETURN_IF_ERROR(require_q8(ctx, op, 3));
  KILN_RETURN_IF_ERROR(zp_dtype(ctx, op, 0, 2));
  KILN_RETURN_IF_ERROR(zp_dtype(ctx, op, 3, 5));
  if (opt_in(ctx, 7)) KILN_RETURN_IF_ERROR(require_q8(ctx, op, 7));
  const int32_t scales[3] = {1, 4, 6};
  const int64_t counts[3] = {1, out_channels(ctx, 3), 1};
  const char* const what[3] = {NULL, "output channel", NULL};
  KILN_RETURN_IF_ERROR(check_scales(ctx, op, scales, counts, what));
  kiln_shape_t out;
  KILN_RETURN_IF_ERROR(iconv_infer(ctx, op, 0, 3, 8, &out));
  const kiln_tensor_t* yz = opt_in(ctx, 7);
  kiln_infer_set(ctx, 0, yz ? yz->dtype : ctx->in[0]->dtype, &out);
  return NULL;
}

int64_t kiln_nn_conv_integer_flops(const kiln_infer_t* ctx) {
  const kiln_shape_t* w = &ctx->in[1]->shape;
  if (!ctx->out[0] || !kiln_shape_is_static(&ctx->out[0]->shape) || !kiln_shape_is_static(w))
    return 0;
  return kiln_nn_mul_sat(2 * kiln_shape_count(&ctx->out[0]->shape), kiln_nn_prod(w, 1, w->rank));
}

int64_t kiln_nn_qlinear_conv_flops(const kiln_infer_t* ctx) {
  const kiln_shape_t* w = &ctx->in[3]->shape;
  if (!ctx->out[0] || !kiln_shape_is_static(&ctx->out[0]->shape) || !kiln_shape_is_static(w))
    return 0;
  return kiln_nn_mul_sat(2 * kiln_shape_count(&ctx->out[0]->shape), kiln_nn_prod(w, 1, w->rank));
}

/* acc[n][m][o] = sum over the group's channels and the taps inside the
 * input of (x - xzp) * (w - wzp[m]): padding contributes zero after the
 * zero point is subtracted, as ONNX's reference pads X - x_zero_point. */
static kiln_status_t iconv_run(const kiln_ref_ctx_t* ctx, const char* op, const kiln_array_t* X,
                               const kiln_array_t* W, const kiln_array_t* xz,
                               const kiln_array_t* wz, const kiln_shape_t* ys, int32_t* acc) {
  kiln_nn_window_t win;
  int64_t group;
  kiln_shape_t out;
  KILN_RETURN_IF_ERROR(kiln_nn_conv_shape(ctx->node, op, &X->shape, "x", &W->shape, "w", NULL,
                                          &win, &group, &out));
  if (!kiln_shape_equal(&out, ys))
    return kiln_make_status(KILN_INTERNAL, "%s: output shape mismatch", op);
  kiln_nn_win3_t w;
  kiln_nn_win3(&win, X->shape.dims + 2, out.dims + 2, &w);
  const int64_t N = X->shape.dims[0], C = X->shape.dims[1], M = W->shape.dims[0];
  const int64_t Cg = C / group, Mg = M / group;
  const int64_t xzp = ld_or0(xz, 0);
  int64_t e = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) {
      const int64_t wzp = ld_or0(wz, m), g = m / Mg;
      for (int64_t od = 0; od < w.out[0]; ++od)
        for (int64_t oh = 0; oh < w.out[1]; ++oh)
          for (int64_t ow = 0; ow < w.out[2]; ++ow, ++e) {
            uint32_t s = 0;
            for (int64_t c = 0; c < Cg; ++c)
              for (int64_t kd = 0; kd < w.k[0]; ++kd)
                for (int64_t kh = 0; kh < w.k[1]; ++kh)
                  for (int64_t kw = 0; kw < w.k[2]; ++kw) {
                    const int64_t id = od * w.s[0] + kd * w.d[0] - w.p[0];
                    const int64_t ih = oh * w.s[1] + kh * w.d[1] - w.p[1];
                    const int64_t iw = ow * w.s[2] + kw * w.d[2] - w.p[2];
                    if (id < 0 || id >= w.in[0] || ih < 0 || ih >= w.in[1] || iw < 0 ||
                        iw >= w.in[2])
                      continue;
                    const int64_t xi =
                        (((n * C + g * Cg + c) * w.in[0] + id) * w.in[1] + ih) * w.in[2] + iw;
                    const int64_t wi = (((m * Cg + c) * w.k[0] + kd) * w.k[1] + kh) * w.k[2] + kw;
                    const int64_t xv = kiln_load_i64(X->dtype, X->data, (size_t)xi) - xzp;
                    const int64_t wv = kiln_load_i64(W->dtype, W->data, (size_t)wi) - wzp;
                    s += (uint32_t)(xv * wv);
                  }
            acc[e] = (int32_t)s;
          }
    }
  return NULL;
}

kiln_status_t kiln_nn_conv_integer_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* xz = ctx->n_in > 2 ? ctx->in[2] : NULL;
  const kiln_array_t* wz = ctx->n_in > 3 ? ctx->in[3] : NULL;
  return iconv_run(ctx, "ConvInteger", ctx->in[0], ctx->in[1], xz, wz, &ctx->out[0]->shape,
                   ctx->out[0]->data);
}

kiln_status_t kiln_nn_qlinear_conv_run(const kiln_ref_ctx_t* ctx) {
  kiln_array_t* Y = ctx->out[0];
  const int64_t n_all = kiln_array_numel(Y);
  int32_t* acc = NULL;
  KILN_RETURN_IF_ERROR(
      kiln_nn_scratch(ctx, n_all ? n_all : 1, sizeof(int32_t), "QLinearConv sums", (void**)&acc));
  kiln_status_t st =
      iconv_run(ctx, "QLinearConv", ctx->in[0], ctx->in[3], ctx->in[2], ctx->in[5], &Y->shape, acc);
  const kiln_array_t* B = ctx->n_in > 8 ? ctx->in[8] : NULL;
  const kiln_array_t* yz = ctx->n_in > 7 ? ctx->in[7] : NULL;
  int64_t lo, hi;
  kiln_nn_quant_range(Y->dtype, &lo, &hi);
  const int64_t M = Y->shape.dims[1], P = kiln_nn_prod(&Y->shape, 2, Y->shape.rank);
  const float xs = ldf_at(ctx->in[1], 0), ys = ldf_at(ctx->in[6], 0);
  for (int64_t e = 0; !st && e < n_all; ++e) {
    const int64_t m = (e / P) % M;
    const float mult = xs * ldf_at(ctx->in[4], m) / ys;
    const int32_t a = (int32_t)((uint32_t)acc[e] + (uint32_t)ld_or0(B, m));
    kiln_store_i64(Y->dtype, Y->data, (size_t)e, requant(a, mult, ld_or0(yz, 0), lo, hi));
  }
  kiln_nn_scratch_free(ctx, acc);
  return st;
}

/* ---- QLinearAdd / QLinearGlobalAveragePool -------------------------------- */

/* onnxruntime's contrib ops (domain com.microsoft), which "fold-qdq" makes
 * of DequantizeLinear -> Add | GlobalAveragePool -> QuantizeLinear so the
 * tensors between quantized layers stay int8. Every scale and zero point is
 * per tensor; A, B and the output share one dtype (u8 or i8).
 *
 * QLinearAdd(A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp), numpy
 * broadcasting, computes what the graph it replaces computes, in the same
 * f32 operations and order, so the fold is exact:
 *   a = (f32(A) - f32(A_zp)) * A_scale,  b likewise,
 *   C = saturate(round_even((a + b) / C_scale) + C_zp).
 *
 * QLinearGlobalAveragePool(X, x_scale, x_zp, y_scale, y_zp) sums the plane
 * exactly in int32, s = sum(X - x_zp), and computes
 *   Y = saturate(round_even(((f32(s) * x_scale) / f32(plane)) / y_scale) + y_zp).
 * The graph it replaces sums the dequantized f32 values (in double, in the
 * reference) before dividing; the two means differ by a few ulps, so the
 * results agree except where the mean lies within those ulps of a .5 tie of
 * the output grid, and then by one step (tests/test_pass_qdq.c). */

static kiln_status_t same_q8(const kiln_infer_t* ctx, const char* op, int32_t a, int32_t b) {
  const kiln_dtype_t ta = ctx->in[a]->dtype, tb = ctx->in[b]->dtype;
  if (ta == KILN_DTYPE_UNDEFINED || tb == KILN_DTYPE_UNDEFINED || ta == tb) return NULL;
  return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: '%s' has dtype %s but '%s' has dtype %s",
                          op, kiln_nn_in_name(ctx, a), kiln_dtype_name(ta),
                          kiln_nn_in_name(ctx, b), kiln_dtype_name(tb));
}

/* Scale |si| and zero point |si| + 1 of data |xi|: per tensor, valid. */
static kiln_status_t tensor_qparams(const kiln_infer_t* ctx, const char* op, int32_t xi,
                                    int32_t si) {
  KILN_RETURN_IF_ERROR(kiln_nn_require_float(ctx, op, si));
  KILN_RETURN_IF_ERROR(check_channel_param(ctx, op, si, false, 1, "tensor"));
  KILN_RETURN_IF_ERROR(check_channel_param(ctx, op, si + 1, false, 1, "tensor"));
  if (xi >= 0) KILN_RETURN_IF_ERROR(zp_dtype(ctx, op, xi, si + 1));
  return check_scale_values(ctx, op, si);
}

kiln_status_t kiln_nn_qlinear_add_infer(kiln_infer_t* ctx) {
  const char* op = "QLinearAdd";
  KILN_RETURN_IF_ERROR(require_q8(ctx, op, 0));
  KILN_RETURN_IF_ERROR(require_q8(ctx, op, 3));
  KILN_RETURN_IF_ERROR(same_q8(ctx, op, 0, 3));
  KILN_RETURN_IF_ERROR(tensor_qparams(ctx, op, 0, 1));
  KILN_RETURN_IF_ERROR(tensor_qparams(ctx, op, 3, 4));
  KILN_RETURN_IF_ERROR(tensor_qparams(ctx, op, 0, 6));
  kiln_shape_t out;
  KILN_RETURN_IF_ERROR(kiln_infer_broadcast(&ctx->in[0]->shape, &ctx->in[3]->shape, &out));
  kiln_infer_set(ctx, 0, ctx->in[0]->dtype, &out);
  return NULL;
}

int64_t kiln_nn_qlinear_add_flops(const kiln_infer_t* ctx) {
  if (!ctx->out[0] || !kiln_shape_is_static(&ctx->out[0]->shape)) return 0;
  return kiln_shape_count(&ctx->out[0]->shape);
}

/* round_even(v) + zp, saturated to [lo, hi] (NaN gives lo), as
 * QuantizeLinear's reference computes it. */
static int64_t sat_round(float v, int64_t zp, int64_t lo, int64_t hi) {
  v = nearbyintf(v) + (float)zp;
  return !(v > (float)lo) ? lo : v >= (float)hi ? hi : (int64_t)v;
}

kiln_status_t kiln_nn_qlinear_add_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t *A = ctx->in[0], *B = ctx->in[3];
  kiln_array_t* Y = ctx->out[0];
  const kiln_shape_t* ys = &Y->shape;
  int64_t sa[KILN_MAX_RANK], sb[KILN_MAX_RANK], lo, hi;
  kiln_broadcast_strides(&A->shape, ys, sa);
  kiln_broadcast_strides(&B->shape, ys, sb);
  kiln_nn_quant_range(Y->dtype, &lo, &hi);
  const float as = ldf_at(ctx->in[1], 0), bs = ldf_at(ctx->in[4], 0), cs = ldf_at(ctx->in[6], 0);
  const float az = (float)ld_or0(ctx->in[2], 0), bz = (float)ld_or0(ctx->in[5], 0);
  const int64_t cz = ctx->n_in > 7 ? ld_or0(ctx->in[7], 0) : 0;
  const int64_t n = kiln_array_numel(Y);
  for (int64_t e = 0; e < n; ++e) {
    int64_t ia = 0, ib = 0, r = e;
    for (int32_t d = ys->rank - 1; d >= 0; --d) {
      const int64_t i = r % ys->dims[d];
      r /= ys->dims[d];
      ia += i * sa[d], ib += i * sb[d];
    }
    /* each product exact in double, then rounded once to f32: a f32
     * product beside the add may be contracted into an FMA by the compiler */
    const float a = (float)((double)((float)kiln_load_i64(A->dtype, A->data, (size_t)ia) - az) * as);
    const float b = (float)((double)((float)kiln_load_i64(B->dtype, B->data, (size_t)ib) - bz) * bs);
    kiln_store_i64(Y->dtype, Y->data, (size_t)e, sat_round((a + b) / cs, cz, lo, hi));
  }
  return NULL;
}

kiln_status_t kiln_nn_qlinear_global_avgpool_infer(kiln_infer_t* ctx) {
  const char* op = "QLinearGlobalAveragePool";
  int64_t cl = 0;
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "channels_last", 0, &cl));
  if (cl != 0) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "%s: channels_last=%lld; kiln takes channels first (NCHW) only", op,
                            (long long)cl);
  }
  KILN_RETURN_IF_ERROR(require_q8(ctx, op, 0));
  KILN_RETURN_IF_ERROR(tensor_qparams(ctx, op, 0, 1));
  KILN_RETURN_IF_ERROR(tensor_qparams(ctx, op, 0, 3));
  const kiln_shape_t* x = &ctx->in[0]->shape;
  if (x->rank >= 0 && x->rank < 3) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: input '%s' has rank %d, expected >= 3",
                            op, kiln_nn_in_name(ctx, 0), (int)x->rank);
  }
  kiln_shape_t out = *x;
  for (int32_t i = 2; i < out.rank; ++i) out.dims[i] = 1;
  kiln_infer_set(ctx, 0, ctx->in[0]->dtype, &out);
  return NULL;
}

int64_t kiln_nn_qlinear_global_avgpool_flops(const kiln_infer_t* ctx) {
  const kiln_shape_t* x = &ctx->in[0]->shape;
  return kiln_shape_is_static(x) ? kiln_shape_count(x) : 0;
}

kiln_status_t kiln_nn_qlinear_global_avgpool_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* X = ctx->in[0];
  kiln_array_t* Y = ctx->out[0];
  const int64_t planes = X->shape.dims[0] * X->shape.dims[1];
  const int64_t plane = kiln_nn_prod(&X->shape, 2, X->shape.rank);
  int64_t lo, hi;
  kiln_nn_quant_range(Y->dtype, &lo, &hi);
  const int64_t xz = ld_or0(ctx->in[2], 0), yz = ctx->n_in > 4 ? ld_or0(ctx->in[4], 0) : 0;
  const float xs = ldf_at(ctx->in[1], 0), ys = ldf_at(ctx->in[3], 0);
  for (int64_t p = 0; p < planes; ++p) {
    uint32_t s = 0;
    for (int64_t i = 0; i < plane; ++i)
      s += (uint32_t)(kiln_load_i64(X->dtype, X->data, (size_t)(p * plane + i)) - xz);
    const float mean = ((float)(int32_t)s * xs) / (float)plane;
    kiln_store_i64(Y->dtype, Y->data, (size_t)p, sat_round(mean / ys, yz, lo, hi));
  }
  return NULL;
}
