/* Cast between kiln dtypes.
 *
 * Conversions (ONNX leaves out-of-range float -> int undefined; kiln picks
 * one defined answer so every target can match the reference):
 *   float -> float   f32 -> f16 rounds to nearest even, f16 -> f32 is exact
 *   float -> int     truncate toward zero, saturate to int64 (NaN -> 0),
 *                    then wrap to the target width
 *   int   -> int     wrap to the target width (two's complement)
 *   int   -> float   nearest representable value
 *   any   -> bool    x != 0 (NaN is true); bool -> any: 0 or 1
 * float8 and int4 (ONNX's Cast definitions and reference):
 *   -> float8        through f32, rounded to nearest even; out of range
 *                    (and infinities) per 'saturate' (default 1): the
 *                    largest finite value, else infinity (e5m2) or NaN
 *                    (kiln_f32_to_f8)
 *   float8 ->        its exact f32 value, then as a float above
 *   -> int4 / uint4  clipped to [-8, 7] / [0, 15], then rounded to nearest
 *                    even (from any dtype, as the ONNX reference does);
 *                    NaN -> 0
 *   int4 / uint4 ->  its value, as an integer above */
#include <math.h>
#include <string.h>

#include "ir/f8.h"
#include "ir/ops/elementwise_impl.h"

/* Resolves the 'to' attribute into a kiln dtype. */
/* Cast's dtypes: every one (CastLike's too; no other element-wise op takes
 * float8 or int4). */
#define CAST_DTYPES                                                                           \
  (KILN_EW_ALL | KILN_EW_BIT(KILN_DTYPE_F8E4M3FN) | KILN_EW_BIT(KILN_DTYPE_F8E4M3FNUZ) |     \
   KILN_EW_BIT(KILN_DTYPE_F8E5M2) | KILN_EW_BIT(KILN_DTYPE_F8E5M2FNUZ) |                    \
   KILN_EW_BIT(KILN_DTYPE_I4) | KILN_EW_BIT(KILN_DTYPE_U4))

static kiln_status_t cast_target(const kiln_node_t* n, kiln_dtype_t* out) {
  int64_t to = 0;
  KILN_RETURN_IF_ERROR(kiln_attr_int_required(n, "to", &to));
  kiln_dtype_t t =
      (to > 0 && to <= INT32_MAX) ? kiln_dtype_from_onnx((int32_t)to) : KILN_DTYPE_UNDEFINED;
  if (t != KILN_DTYPE_UNDEFINED) {
    *out = t;
    return NULL;
  }
  /* ONNX TensorProto.DataType runs 1..23 (FLOAT4E2M1 in onnx 1.18); a
   * value in that range is a real type kiln lacks, anything else is not a
   * type at all. */
  if (to >= 1 && to <= 23) {
    return kiln_make_status(KILN_UNSUPPORTED, "Cast: to %s is not supported",
                            kiln_onnx_dtype_name((int32_t)to));
  }
  return kiln_make_status(KILN_INVALID_ARGUMENT,
                          "Cast: attribute 'to' is %lld, which is not an ONNX "
                          "data type",
                          (long long)to);
}

static void cast_f32_to_f16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = kiln_f32_to_f16(x[i]);
}

static void cast_f16_to_f32(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = kiln_f16_to_f32(x[i]);
}

/* Per-element path for every other pair. Integers and bools go through
 * int64 (exact) so large i64 values round once when they become float;
 * floats go through double (exact for f32 and f16). */
static void cast_generic(kiln_dtype_t from, const void* x, kiln_dtype_t to,
                         void* y, int64_t n, bool sat) {
  if (kiln_dtype_is_f8(to)) {
    for (int64_t i = 0; i < n; ++i)
      ((uint8_t*)y)[i] = kiln_f32_to_f8(to, (float)kiln_load_f64(from, x, (size_t)i), sat);
    return;
  }
  if (kiln_dtype_is_int4(to)) {
    const double lo = to == KILN_DTYPE_I4 ? -8.0 : 0.0, hi = to == KILN_DTYPE_I4 ? 7.0 : 15.0;
    for (int64_t i = 0; i < n; ++i) {
      const double v = kiln_load_f64(from, x, (size_t)i);
      kiln_store_i64(to, y, (size_t)i, isnan(v) ? 0 : (int64_t)nearbyint(v < lo ? lo : v > hi ? hi : v));
    }
    return;
  }
  if (kiln_dtype_is_f8(from)) {
    for (int64_t i = 0; i < n; ++i) kiln_ew_st_f(to, y, i, kiln_load_f64(from, x, (size_t)i));
    return;
  }
  /* u64 above INT64_MAX has no int64 value: it goes to float via double */
  if (kiln_dtype_is_float(from) || (from == KILN_DTYPE_U64 && kiln_dtype_is_float(to))) {
    for (int64_t i = 0; i < n; ++i) kiln_ew_st_f(to, y, i, kiln_ew_ld_f(from, x, i));
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = kiln_ew_ld_i(from, x, i);
    switch (to) {
      case KILN_DTYPE_F32: ((float*)y)[i] = (float)v; break;
      case KILN_DTYPE_F16: ((uint16_t*)y)[i] = kiln_f32_to_f16((float)v); break;
      default: kiln_ew_st_i(to, y, i, v); break;
    }
  }
}

static kiln_status_t run_cast_to(const kiln_ref_ctx_t* ctx, kiln_dtype_t to) {
  int64_t sat = 1;
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "saturate", 1, &sat));
  const kiln_array_t* x = kiln_ew_arr(ctx, 0);
  kiln_array_t* y = kiln_ew_out(ctx, 0);
  if (!x) return kiln_make_status(KILN_INVALID_ARGUMENT, "Cast: missing input");
  if (x->dtype <= KILN_DTYPE_UNDEFINED || x->dtype >= KILN_DTYPE_COUNT_) {
    return kiln_make_status(KILN_UNSUPPORTED, "Cast: input dtype %s is not supported",
                            kiln_dtype_name(x->dtype));
  }
  int64_t n = kiln_array_numel(x);
  KILN_RETURN_IF_ERROR(kiln_ew_check_out("Cast", y, to, n));
  if (n == 0) return NULL;
  if (x->dtype == to) {
    memcpy(y->data, x->data, (size_t)n * kiln_dtype_size(to));
  } else if (x->dtype == KILN_DTYPE_F32 && to == KILN_DTYPE_F16) {
    cast_f32_to_f16(x->data, y->data, n);
  } else if (x->dtype == KILN_DTYPE_F16 && to == KILN_DTYPE_F32) {
    cast_f16_to_f32(x->data, y->data, n);
  } else {
    cast_generic(x->dtype, x->data, to, y->data, n, sat != 0);
  }
  return NULL;
}

kiln_status_t kiln_ew_run_cast(const kiln_ref_ctx_t* ctx) {
  kiln_dtype_t to = KILN_DTYPE_UNDEFINED;
  KILN_RETURN_IF_ERROR(cast_target(ctx->node, &to));
  return run_cast_to(ctx, to);
}

kiln_status_t kiln_ew_infer_cast(kiln_infer_t* ctx) {
  kiln_dtype_t to = KILN_DTYPE_UNDEFINED;
  KILN_RETURN_IF_ERROR(cast_target(ctx->node, &to));
  int64_t sat = 1;
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "saturate", 1, &sat));
  (void)sat; /* read for its type check; run_cast_to applies it */
  KILN_RETURN_IF_ERROR(kiln_ew_check_dtype(ctx, 0, "input", CAST_DTYPES));
  kiln_infer_set(ctx, 0, to, &ctx->in[0]->shape);
  return kiln_ew_fold(ctx, kiln_ew_run_cast);
}

/* CastLike: Cast to the dtype of input 'target_type' (its values unused). */
kiln_status_t kiln_ew_run_castlike(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* like = kiln_ew_arr(ctx, 1);
  if (!like) return kiln_make_status(KILN_INVALID_ARGUMENT, "CastLike: missing input 'target_type'");
  return run_cast_to(ctx, like->dtype);
}

/* Folding CastLike: the target dtype is the output's (set by infer). */
static kiln_status_t run_cast_as_out(const kiln_ref_ctx_t* ctx) {
  kiln_array_t* y = kiln_ew_out(ctx, 0);
  if (!y) return kiln_make_status(KILN_INVALID_ARGUMENT, "CastLike: missing output");
  return run_cast_to(ctx, y->dtype);
}

kiln_status_t kiln_ew_infer_castlike(kiln_infer_t* ctx) {
  int64_t sat = 1;
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "saturate", 1, &sat));
  (void)sat;
  KILN_RETURN_IF_ERROR(kiln_ew_check_dtype(ctx, 0, "input", CAST_DTYPES));
  KILN_RETURN_IF_ERROR(kiln_ew_check_dtype(ctx, 1, "target_type", CAST_DTYPES));
  kiln_infer_set(ctx, 0, ctx->in[1]->dtype, &ctx->in[0]->shape);
  /* The values come from 'input' alone: fold when it is constant, whether
   * or not 'target_type' is (it usually is a run-time tensor). */
  kiln_infer_t one = *ctx;
  one.n_in = 1;
  return kiln_ew_fold(&one, run_cast_as_out);
}
