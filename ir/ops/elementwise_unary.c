/* One-input elementwise ops: activations and math maps (Relu .. Abs, Not,
 * Elu .. Mish, Sign, rounding, trigonometric and hyperbolic maps), IsNaN and
 * IsInf (float in, bool out), Clip, and the data-moving Identity and Dropout
 * (inference only).
 *
 * Each map is a kernel over a flat run of elements, generated per dtype by
 * the *_CASES macros so the f32 loop is a plain loop the compiler can
 * vectorise; f16 is widened to f32, computed and rounded once. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "ir/ops/elementwise_impl.h"

typedef struct uparams_s {
  float alpha, beta;
} uparams_t;

/* Returns false when the kernel has no case for |t|. */
typedef bool (*ukernel_t)(kiln_dtype_t t, const void* x, void* y, int64_t n,
                          const uparams_t* p);

#define F_CASES(expr)                                         \
  case KILN_DTYPE_F32: {                                      \
    const float* xs = x;                                      \
    float* ys = y;                                            \
    for (int64_t i = 0; i < n; ++i) {                         \
      const float v = xs[i];                                  \
      ys[i] = (expr);                                         \
    }                                                         \
    return true;                                              \
  }                                                           \
  case KILN_DTYPE_F16: {                                      \
    const uint16_t* xs = x;                                   \
    uint16_t* ys = y;                                         \
    for (int64_t i = 0; i < n; ++i) {                         \
      const float v = kiln_f16_to_f32(xs[i]);                 \
      ys[i] = kiln_f32_to_f16(expr);                          \
    }                                                         \
    return true;                                              \
  }

/* f32/f16 cases plus an f64 case computing |dexpr| in double (the f64
 * spelling of |expr|: double libm calls and the helpers' _d forms). */
#define FD_CASES(expr, dexpr)                                 \
  F_CASES(expr)                                               \
  case KILN_DTYPE_F64: {                                      \
    const double* xs = x;                                     \
    double* ys = y;                                           \
    for (int64_t i = 0; i < n; ++i) {                         \
      const double v = xs[i];                                 \
      ys[i] = (dexpr);                                        \
    }                                                         \
    return true;                                              \
  }

#define I_CASE(KT, T, expr)                                   \
  case KT: {                                                  \
    const T* xs = x;                                          \
    T* ys = y;                                                \
    for (int64_t i = 0; i < n; ++i) {                         \
      const T v = xs[i];                                      \
      ys[i] = (T)(expr);                                      \
    }                                                         \
    return true;                                              \
  }
/* Signed integers; |expr| may compute in uint64 to wrap like C. */
#define SI_CASES(expr)                                        \
  I_CASE(KILN_DTYPE_I8, int8_t, expr)                         \
  I_CASE(KILN_DTYPE_I16, int16_t, expr)                       \
  I_CASE(KILN_DTYPE_I32, int32_t, expr)                       \
  I_CASE(KILN_DTYPE_I64, int64_t, expr)
#define U_CASES(expr)                                         \
  I_CASE(KILN_DTYPE_U8, uint8_t, expr)                        \
  I_CASE(KILN_DTYPE_U16, uint16_t, expr)                      \
  I_CASE(KILN_DTYPE_U32, uint32_t, expr)                      \
  I_CASE(KILN_DTYPE_U64, uint64_t, expr)

#define KERNEL(name, cases)                                                  \
  static bool k_##name(kiln_dtype_t t, const void* x, void* y, int64_t n,    \
                       const uparams_t* p) {                                 \
    (void)p;                                                                 \
    switch (t) {                                                             \
      cases                                                                  \
      default:                                                               \
        return false;                                                        \
    }                                                                        \
  }

/* exp of a non-positive number only, so large |v| never overflows. */
static inline float sigm(float v) {
  if (v >= 0.0f) return 1.0f / (1.0f + expf(-v));
  float e = expf(v);
  return e / (1.0f + e);
}
static inline double sigm_d(double v) {
  if (v >= 0.0) return 1.0 / (1.0 + exp(-v));
  double e = exp(v);
  return e / (1.0 + e);
}
/* Comparisons rather than fminf/fmaxf so NaN stays NaN (numpy clip). */
static inline float clamp01(float v) {
  return v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
}
static inline double clamp01_d(double v) {
  return v < 0.0 ? 0.0 : (v > 1.0 ? 1.0 : v);
}
static inline float gelu_erf(float v) {
  return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}
static inline double gelu_erf_d(double v) {
  return 0.5 * v * (1.0 + erf(v * 0.70710678118654752));
}
static inline float gelu_tanh(float v) {
  const float k = 0.79788456080286536f; /* sqrt(2/pi) */
  return 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
}
static inline double gelu_tanh_d(double v) {
  const double k = 0.79788456080286536; /* sqrt(2/pi) */
  return 0.5 * v * (1.0 + tanh(k * (v + 0.044715 * v * v * v)));
}

KERNEL(relu, FD_CASES(v < 0.0f ? 0.0f : v, v < 0.0 ? 0.0 : v) SI_CASES(v < 0 ? 0 : v))
KERNEL(leakyrelu, FD_CASES(v < 0.0f ? v * p->alpha : v, v < 0.0 ? v * p->alpha : v))
KERNEL(sigmoid, FD_CASES(sigm(v), sigm_d(v)))
KERNEL(tanh, FD_CASES(tanhf(v), tanh(v)))
KERNEL(hardsigmoid, FD_CASES(clamp01(p->alpha * v + p->beta), clamp01_d(p->alpha * v + p->beta)))
KERNEL(hardswish, FD_CASES(v * clamp01(v * (1.0f / 6.0f) + 0.5f), v * clamp01_d(v * (1.0 / 6.0) + 0.5)))
KERNEL(erf, FD_CASES(erff(v), erf(v)))
KERNEL(gelu, FD_CASES(gelu_erf(v), gelu_erf_d(v)))
KERNEL(gelu_tanh, FD_CASES(gelu_tanh(v), gelu_tanh_d(v)))
KERNEL(sqrt, FD_CASES(sqrtf(v), sqrt(v)))
KERNEL(reciprocal, FD_CASES(1.0f / v, 1.0 / v))
KERNEL(exp, FD_CASES(expf(v), exp(v)))
KERNEL(log, FD_CASES(logf(v), log(v)))
KERNEL(neg, FD_CASES(-v, -v) SI_CASES(0 - (uint64_t)v))
KERNEL(abs, FD_CASES(fabsf(v), fabs(v))
            SI_CASES(v < 0 ? 0 - (uint64_t)v : (uint64_t)v) U_CASES(v))
KERNEL(not, I_CASE(KILN_DTYPE_BOOL, uint8_t, !v))
KERNEL(bitwise_not, SI_CASES(~v) U_CASES(~v))

/* log(1 + e) for e in [0, 1] without losing a small e to the rounding of
 * 1 + e (Goldberg's log1p): the compiled kernels use the same steps, which
 * also hold when they compute in f16. */
static inline float log1p_small(float e) {
  const float u = 1.0f + e;
  return u == 1.0f ? e : logf(u) * e / (u - 1.0f);
}
static inline double log1p_small_d(double e) {
  const double u = 1.0 + e;
  return u == 1.0 ? e : log(u) * e / (u - 1.0);
}
/* log(1 + exp(x)) as max(x, 0) + log1p(exp(-|x|)): the same value where
 * exp(x) is finite, and x (not inf) where it would overflow. */
static inline float softplus(float v) {
  return (v > 0.0f ? v : 0.0f) + log1p_small(expf(-fabsf(v)));
}
static inline double softplus_d(double v) {
  return (v > 0.0 ? v : 0.0) + log1p_small_d(exp(-fabs(v)));
}
/* 1, -1 or the value itself: 0 stays 0 and NaN stays NaN (numpy sign). */
static inline float fsign(float v) { return v > 0.0f ? 1.0f : (v < 0.0f ? -1.0f : v); }
static inline double fsign_d(double v) { return v > 0.0 ? 1.0 : (v < 0.0 ? -1.0 : v); }

/* alpha/beta carry each op's attributes: Elu, Celu, ThresholdedRelu alpha;
 * Selu alpha, gamma; Shrink lambd, bias. */
KERNEL(elu, FD_CASES(v < 0.0f ? p->alpha * (expf(v) - 1.0f) : v, v < 0.0 ? p->alpha * (exp(v) - 1.0) : v))
KERNEL(selu, FD_CASES(v > 0.0f ? p->beta * v : p->beta * (p->alpha * expf(v) - p->alpha), v > 0.0 ? p->beta * v : p->beta * (p->alpha * exp(v) - p->alpha)))
KERNEL(celu, FD_CASES(v > 0.0f ? v : p->alpha * (expf(v / p->alpha) - 1.0f), v > 0.0 ? v : p->alpha * (exp(v / p->alpha) - 1.0)))
KERNEL(softplus, FD_CASES(softplus(v), softplus_d(v)))
KERNEL(softsign, FD_CASES(v / (1.0f + fabsf(v)), v / (1.0 + fabs(v))))
KERNEL(thresholdedrelu, FD_CASES(v > p->alpha ? v : 0.0f, v > p->alpha ? v : 0.0))
KERNEL(shrink, FD_CASES(v < -p->alpha ? v + p->beta : (v > p->alpha ? v - p->beta : 0.0f), v < -p->alpha ? v + p->beta : (v > p->alpha ? v - p->beta : 0.0)))
KERNEL(mish, FD_CASES(v * tanhf(softplus(v)), v * tanh(softplus_d(v))))
KERNEL(sign, FD_CASES(fsign(v), fsign_d(v)) SI_CASES(v > 0 ? 1 : (v < 0 ? -1 : 0)) U_CASES(v > 0 ? 1 : 0))
KERNEL(round, FD_CASES(nearbyintf(v), nearbyint(v)))
KERNEL(floor, FD_CASES(floorf(v), floor(v)))
KERNEL(ceil, FD_CASES(ceilf(v), ceil(v)))
KERNEL(sin, FD_CASES(sinf(v), sin(v)))
KERNEL(cos, FD_CASES(cosf(v), cos(v)))
KERNEL(tan, FD_CASES(tanf(v), tan(v)))
KERNEL(asin, FD_CASES(asinf(v), asin(v)))
KERNEL(acos, FD_CASES(acosf(v), acos(v)))
KERNEL(atan, FD_CASES(atanf(v), atan(v)))
KERNEL(sinh, FD_CASES(sinhf(v), sinh(v)))
KERNEL(cosh, FD_CASES(coshf(v), cosh(v)))
KERNEL(asinh, FD_CASES(asinhf(v), asinh(v)))
KERNEL(acosh, FD_CASES(acoshf(v), acosh(v)))
KERNEL(atanh, FD_CASES(atanhf(v), atanh(v)))

/* ---- shared infer/run ------------------------------------------------ */

static const char* opn(const kiln_node_t* n) {
  return n && n->op_type ? n->op_type : "elementwise";
}

/* Output 0 takes input 0's dtype and shape. */
static kiln_status_t infer_map(kiln_infer_t* ctx, const char* in_name,
                               uint32_t mask,
                               kiln_status_t (*run)(const kiln_ref_ctx_t*)) {
  KILN_RETURN_IF_ERROR(kiln_ew_check_dtype(ctx, 0, in_name, mask));
  const kiln_tensor_t* x = ctx->in[0];
  kiln_infer_set(ctx, 0, x->dtype, &x->shape);
  return kiln_ew_fold(ctx, run);
}

static kiln_status_t run_map(const kiln_ref_ctx_t* ctx, ukernel_t k,
                             const uparams_t* p) {
  const char* op = opn(ctx->node);
  const kiln_array_t* x = kiln_ew_arr(ctx, 0);
  kiln_array_t* y = kiln_ew_out(ctx, 0);
  if (!x) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: missing input", op);
  int64_t n = kiln_array_numel(x);
  KILN_RETURN_IF_ERROR(kiln_ew_check_out(op, y, x->dtype, n));
  if (n > 0 && !k(x->dtype, x->data, y->data, n, p)) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "%s: input dtype %s is not supported", op,
                            kiln_dtype_name(x->dtype));
  }
  return NULL;
}

#define SIMPLE_MAP(name, in_name, mask)                                  \
  kiln_status_t kiln_ew_run_##name(const kiln_ref_ctx_t* ctx) {          \
    return run_map(ctx, k_##name, NULL);                                 \
  }                                                                      \
  kiln_status_t kiln_ew_infer_##name(kiln_infer_t* ctx) {                \
    return infer_map(ctx, in_name, mask, kiln_ew_run_##name);            \
  }

SIMPLE_MAP(relu, "X", KILN_EW_FLOAT | KILN_EW_SINT)
SIMPLE_MAP(sigmoid, "X", KILN_EW_FLOAT)
SIMPLE_MAP(tanh, "input", KILN_EW_FLOAT)
SIMPLE_MAP(hardswish, "X", KILN_EW_FLOAT)
SIMPLE_MAP(erf, "input", KILN_EW_FLOAT)
SIMPLE_MAP(sqrt, "X", KILN_EW_FLOAT)
SIMPLE_MAP(reciprocal, "X", KILN_EW_FLOAT)
SIMPLE_MAP(exp, "input", KILN_EW_FLOAT)
SIMPLE_MAP(log, "input", KILN_EW_FLOAT)
SIMPLE_MAP(neg, "X", KILN_EW_FLOAT | KILN_EW_SINT)
SIMPLE_MAP(abs, "X", KILN_EW_NUM)
SIMPLE_MAP(not, "X", KILN_EW_BOOL)
SIMPLE_MAP(bitwise_not, "X", KILN_EW_INT)
SIMPLE_MAP(softplus, "X", KILN_EW_FLOAT)
SIMPLE_MAP(softsign, "input", KILN_EW_FLOAT)
SIMPLE_MAP(mish, "X", KILN_EW_FLOAT)
SIMPLE_MAP(sign, "input", KILN_EW_NUM)
SIMPLE_MAP(round, "X", KILN_EW_FLOAT)
SIMPLE_MAP(floor, "X", KILN_EW_FLOAT)
SIMPLE_MAP(ceil, "X", KILN_EW_FLOAT)
SIMPLE_MAP(sin, "input", KILN_EW_FLOAT)
SIMPLE_MAP(cos, "input", KILN_EW_FLOAT)
SIMPLE_MAP(tan, "input", KILN_EW_FLOAT)
SIMPLE_MAP(asin, "input", KILN_EW_FLOAT)
SIMPLE_MAP(acos, "input", KILN_EW_FLOAT)
SIMPLE_MAP(atan, "input", KILN_EW_FLOAT)
SIMPLE_MAP(sinh, "input", KILN_EW_FLOAT)
SIMPLE_MAP(cosh, "input", KILN_EW_FLOAT)
SIMPLE_MAP(asinh, "input", KILN_EW_FLOAT)
SIMPLE_MAP(acosh, "input", KILN_EW_FLOAT)
SIMPLE_MAP(atanh, "input", KILN_EW_FLOAT)

/* A map whose attributes |params| reads into uparams_t (and validates, so
 * a bad attribute fails at load). */
#define ATTR_MAP(name, in_name, params)                                  \
  kiln_status_t kiln_ew_run_##name(const kiln_ref_ctx_t* ctx) {          \
    uparams_t p;                                                         \
    KILN_RETURN_IF_ERROR(params(ctx->node, &p));                         \
    return run_map(ctx, k_##name, &p);                                   \
  }                                                                      \
  kiln_status_t kiln_ew_infer_##name(kiln_infer_t* ctx) {                \
    uparams_t p;                                                         \
    KILN_RETURN_IF_ERROR(params(ctx->node, &p));                         \
    return infer_map(ctx, in_name, KILN_EW_FLOAT, kiln_ew_run_##name);   \
  }

static kiln_status_t alpha1_params(const kiln_node_t* n, uparams_t* p) {
  p->beta = 0.0f;
  return kiln_attr_float(n, "alpha", 1.0f, &p->alpha);
}
static kiln_status_t selu_params(const kiln_node_t* n, uparams_t* p) {
  KILN_RETURN_IF_ERROR(kiln_attr_float(n, "alpha", 1.67326319217681884765625f, &p->alpha));
  return kiln_attr_float(n, "gamma", 1.05070102214813232421875f, &p->beta);
}
/* Celu divides by alpha: 0 would turn every negative input into NaN. */
static kiln_status_t celu_params(const kiln_node_t* n, uparams_t* p) {
  KILN_RETURN_IF_ERROR(alpha1_params(n, p));
  if (p->alpha == 0.0f)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Celu: attribute 'alpha' must not be 0");
  return NULL;
}
static kiln_status_t shrink_params(const kiln_node_t* n, uparams_t* p) {
  KILN_RETURN_IF_ERROR(kiln_attr_float(n, "lambd", 0.5f, &p->alpha));
  return kiln_attr_float(n, "bias", 0.0f, &p->beta);
}

ATTR_MAP(elu, "X", alpha1_params)
ATTR_MAP(selu, "X", selu_params)
ATTR_MAP(celu, "X", celu_params)
ATTR_MAP(thresholdedrelu, "X", alpha1_params)
ATTR_MAP(shrink, "input", shrink_params)

/* ---- IsNaN / IsInf: float in, bool out ------------------------------- */

/* IsInf's detect_negative / detect_positive, as flags. */
typedef struct isinf_s {
  bool neg, pos;
} isinf_t;

static kiln_status_t isinf_params(const kiln_node_t* n, isinf_t* q) {
  int64_t neg = 1, pos = 1;
  if (n && n->op_type && strcmp(n->op_type, "IsInf") == 0) {
    KILN_RETURN_IF_ERROR(kiln_attr_int(n, "detect_negative", 1, &neg));
    KILN_RETURN_IF_ERROR(kiln_attr_int(n, "detect_positive", 1, &pos));
  }
  q->neg = neg != 0;
  q->pos = pos != 0;
  return NULL;
}

/* Classification by comparison (x != x, |x| == inf), which needs no libm
 * and is exact for f16 widened to f32. */
static kiln_status_t run_classify(const kiln_ref_ctx_t* ctx, bool nan) {
  const char* op = opn(ctx->node);
  const kiln_array_t* x = kiln_ew_arr(ctx, 0);
  kiln_array_t* y = kiln_ew_out(ctx, 0);
  if (!x || !kiln_dtype_is_float(x->dtype))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: missing or non-float input", op);
  isinf_t q;
  KILN_RETURN_IF_ERROR(isinf_params(ctx->node, &q));
  int64_t n = kiln_array_numel(x);
  KILN_RETURN_IF_ERROR(kiln_ew_check_out(op, y, KILN_DTYPE_BOOL, n));
  uint8_t* o = y->data;
  for (int64_t i = 0; i < n; ++i) {
    double v = kiln_ew_ld_f(x->dtype, x->data, i); /* exact for f64 too */
    o[i] = nan ? v != v : ((q.pos && v == INFINITY) || (q.neg && v == -INFINITY));
  }
  return NULL;
}

static kiln_status_t infer_classify(kiln_infer_t* ctx,
                                    kiln_status_t (*run)(const kiln_ref_ctx_t*)) {
  isinf_t q;
  KILN_RETURN_IF_ERROR(isinf_params(ctx->node, &q));
  KILN_RETURN_IF_ERROR(kiln_ew_check_dtype(ctx, 0, "X", KILN_EW_FLOAT));
  kiln_infer_set(ctx, 0, KILN_DTYPE_BOOL, &ctx->in[0]->shape);
  return kiln_ew_fold(ctx, run);
}

kiln_status_t kiln_ew_run_isnan(const kiln_ref_ctx_t* ctx) { return run_classify(ctx, true); }
kiln_status_t kiln_ew_infer_isnan(kiln_infer_t* ctx) {
  return infer_classify(ctx, kiln_ew_run_isnan);
}
kiln_status_t kiln_ew_run_isinf(const kiln_ref_ctx_t* ctx) { return run_classify(ctx, false); }
kiln_status_t kiln_ew_infer_isinf(kiln_infer_t* ctx) {
  return infer_classify(ctx, kiln_ew_run_isinf);
}

/* ---- maps with attributes -------------------------------------------- */

static kiln_status_t leaky_params(const kiln_node_t* n, uparams_t* p) {
  p->beta = 0.0f;
  return kiln_attr_float(n, "alpha", 0.01f, &p->alpha);
}

kiln_status_t kiln_ew_run_leakyrelu(const kiln_ref_ctx_t* ctx) {
  uparams_t p;
  KILN_RETURN_IF_ERROR(leaky_params(ctx->node, &p));
  return run_map(ctx, k_leakyrelu, &p);
}

kiln_status_t kiln_ew_infer_leakyrelu(kiln_infer_t* ctx) {
  uparams_t p;
  KILN_RETURN_IF_ERROR(leaky_params(ctx->node, &p));
  return infer_map(ctx, "X", KILN_EW_FLOAT, kiln_ew_run_leakyrelu);
}

static kiln_status_t hardsigmoid_params(const kiln_node_t* n, uparams_t* p) {
  KILN_RETURN_IF_ERROR(kiln_attr_float(n, "alpha", 0.2f, &p->alpha));
  return kiln_attr_float(n, "beta", 0.5f, &p->beta);
}

kiln_status_t kiln_ew_run_hardsigmoid(const kiln_ref_ctx_t* ctx) {
  uparams_t p;
  KILN_RETURN_IF_ERROR(hardsigmoid_params(ctx->node, &p));
  return run_map(ctx, k_hardsigmoid, &p);
}

kiln_status_t kiln_ew_infer_hardsigmoid(kiln_infer_t* ctx) {
  uparams_t p;
  KILN_RETURN_IF_ERROR(hardsigmoid_params(ctx->node, &p));
  return infer_map(ctx, "X", KILN_EW_FLOAT, kiln_ew_run_hardsigmoid);
}

/* Gelu's 'approximate' picks the kernel: "none" (erf) or "tanh". */
static kiln_status_t gelu_kernel(const kiln_node_t* n, ukernel_t* out) {
  const char* a = NULL;
  KILN_RETURN_IF_ERROR(kiln_attr_string(n, "approximate", "none", &a));
  if (strcmp(a, "none") == 0) {
    *out = k_gelu;
  } else if (strcmp(a, "tanh") == 0) {
    *out = k_gelu_tanh;
  } else {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Gelu: attribute 'approximate' is '%s', must be "
                            "'none' or 'tanh'",
                            a);
  }
  return NULL;
}

kiln_status_t kiln_ew_run_gelu(const kiln_ref_ctx_t* ctx) {
  ukernel_t k = NULL;
  KILN_RETURN_IF_ERROR(gelu_kernel(ctx->node, &k));
  return run_map(ctx, k, NULL);
}

kiln_status_t kiln_ew_infer_gelu(kiln_infer_t* ctx) {
  ukernel_t k = NULL;
  KILN_RETURN_IF_ERROR(gelu_kernel(ctx->node, &k));
  return infer_map(ctx, "X", KILN_EW_FLOAT, kiln_ew_run_gelu);
}

/* ---- Clip ------------------------------------------------------------ */

/* Before opset 11 the bounds are float attributes (default: the float
 * range); from 11 they are optional scalar inputs of the input's dtype
 * (default: no bound). */
typedef struct clip_bounds_s {
  double flo, fhi; /* an f64 Clip's bounds keep their double value */
  int64_t ilo, ihi;
} clip_bounds_t;

static void int_range(kiln_dtype_t t, int64_t* lo, int64_t* hi) {
  switch (t) {
    case KILN_DTYPE_I8: *lo = INT8_MIN; *hi = INT8_MAX; break;
    case KILN_DTYPE_U8: *lo = 0; *hi = UINT8_MAX; break;
    case KILN_DTYPE_I32: *lo = INT32_MIN; *hi = INT32_MAX; break;
    case KILN_DTYPE_I16: *lo = INT16_MIN; *hi = INT16_MAX; break;
    case KILN_DTYPE_U16: *lo = 0; *hi = UINT16_MAX; break;
    case KILN_DTYPE_U32: *lo = 0; *hi = UINT32_MAX; break;
    default: *lo = INT64_MIN; *hi = INT64_MAX; break;
  }
}

/* Reads the optional bound |b| (input |name|) of a Clip on |dtype|. */
static kiln_status_t clip_read(const kiln_array_t* b, const char* name,
                               kiln_dtype_t dtype, double* f, int64_t* i) {
  if (!b) return NULL;
  if (b->dtype != dtype) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Clip: inputs 'input' and '%s' must have the same "
                            "dtype, got %s and %s",
                            name, kiln_dtype_name(dtype),
                            kiln_dtype_name(b->dtype));
  }
  if (kiln_array_numel(b) != 1) {
    char buf[96];
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Clip: input '%s' must be a scalar, got shape %s",
                            name, kiln_shape_format(&b->shape, buf, sizeof buf));
  }
  if (kiln_dtype_is_float(dtype))
    *f = kiln_ew_ld_f(b->dtype, b->data, 0);
  else
    *i = kiln_ew_ld_i(b->dtype, b->data, 0);
  return NULL;
}

static kiln_status_t clip_bounds(const kiln_ref_ctx_t* ctx, kiln_dtype_t dtype,
                                 clip_bounds_t* cb) {
  int_range(dtype, &cb->ilo, &cb->ihi);
  if (ctx->opset < 11) {
    float lo, hi;
    KILN_RETURN_IF_ERROR(kiln_attr_float(ctx->node, "min", -FLT_MAX, &lo));
    KILN_RETURN_IF_ERROR(kiln_attr_float(ctx->node, "max", FLT_MAX, &hi));
    cb->flo = lo, cb->fhi = hi;
    return NULL;
  }
  cb->flo = -INFINITY;
  cb->fhi = INFINITY;
  KILN_RETURN_IF_ERROR(
      clip_read(kiln_ew_arr(ctx, 1), "min", dtype, &cb->flo, &cb->ilo));
  return clip_read(kiln_ew_arr(ctx, 2), "max", dtype, &cb->fhi, &cb->ihi);
}

/* min(max(x, lo), hi): with lo > hi every element becomes hi, as ONNX
 * specifies; NaN passes through. */

static bool k_clip(kiln_dtype_t t, const void* x, void* y, int64_t n,
                   const clip_bounds_t* b) {
  const float flo = (float)b->flo, fhi = (float)b->fhi;
  const int64_t ilo = b->ilo, ihi = b->ihi;
#define CLIP_I(KT, T)                                          \
  case KT: {                                                   \
    const T* xs = x;                                           \
    T* ys = y;                                                 \
    for (int64_t i = 0; i < n; ++i) {                          \
      int64_t v = xs[i];                                       \
      v = v < ilo ? ilo : v;                                   \
      ys[i] = (T)(v > ihi ? ihi : v);                          \
    }                                                          \
    return true;                                               \
  }
  switch (t) {
    case KILN_DTYPE_F32: {
      const float* xs = x;
      float* ys = y;
      for (int64_t i = 0; i < n; ++i) {
        float v = xs[i];
        v = v < flo ? flo : v;
        ys[i] = v > fhi ? fhi : v;
      }
      return true;
    }
    case KILN_DTYPE_F16: {
      const uint16_t* xs = x;
      uint16_t* ys = y;
      for (int64_t i = 0; i < n; ++i) {
        float v = kiln_f16_to_f32(xs[i]);
        v = v < flo ? flo : v;
        ys[i] = kiln_f32_to_f16(v > fhi ? fhi : v);
      }
      return true;
    }
    case KILN_DTYPE_F64: {
      const double* xs = x;
      double* ys = y;
      for (int64_t i = 0; i < n; ++i) {
        double v = xs[i];
        v = v < b->flo ? b->flo : v;
        ys[i] = v > b->fhi ? b->fhi : v;
      }
      return true;
    }
    CLIP_I(KILN_DTYPE_I8, int8_t)
    CLIP_I(KILN_DTYPE_U8, uint8_t)
    CLIP_I(KILN_DTYPE_I16, int16_t)
    CLIP_I(KILN_DTYPE_U16, uint16_t)
    CLIP_I(KILN_DTYPE_U32, uint32_t)
    CLIP_I(KILN_DTYPE_I32, int32_t)
    CLIP_I(KILN_DTYPE_I64, int64_t)
    default:
      return false;
  }
#undef CLIP_I
}

kiln_status_t kiln_ew_run_clip(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = kiln_ew_arr(ctx, 0);
  kiln_array_t* y = kiln_ew_out(ctx, 0);
  if (!x) return kiln_make_status(KILN_INVALID_ARGUMENT, "Clip: missing input");
  int64_t n = kiln_array_numel(x);
  KILN_RETURN_IF_ERROR(kiln_ew_check_out("Clip", y, x->dtype, n));
  clip_bounds_t cb;
  KILN_RETURN_IF_ERROR(clip_bounds(ctx, x->dtype, &cb));
  if (n > 0 && !k_clip(x->dtype, x->data, y->data, n, &cb)) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "Clip: input dtype %s is not supported",
                            kiln_dtype_name(x->dtype));
  }
  return NULL;
}

kiln_status_t kiln_ew_infer_clip(kiln_infer_t* ctx) {
  if (ctx->opset < 11) {
    float f;
    KILN_RETURN_IF_ERROR(kiln_attr_float(ctx->node, "min", -FLT_MAX, &f));
    KILN_RETURN_IF_ERROR(kiln_attr_float(ctx->node, "max", FLT_MAX, &f));
    return infer_map(ctx, "input", KILN_EW_FLOAT, kiln_ew_run_clip);
  }
  KILN_RETURN_IF_ERROR(kiln_ew_check_dtype(ctx, 0, "input", KILN_EW_NUM));
  static const char* const names[3] = {"input", "min", "max"};
  for (int32_t i = 1; i < 3; ++i) {
    const kiln_tensor_t* b = kiln_ew_in(ctx, i);
    if (!b) continue;
    KILN_RETURN_IF_ERROR(kiln_ew_same_dtype(ctx, 0, "input", i, names[i]));
    int64_t numel = 0;
    bool known = kiln_shape_is_static(&b->shape);
    if (known) {
      kiln_status_t s = kiln_shape_numel(&b->shape, &numel);
      if (s) {
        kiln_status_free(s);
        known = false;
      }
    }
    if (known && numel != 1) {
      char buf[96];
      return kiln_make_status(
          KILN_INVALID_ARGUMENT, "Clip: input '%s' must be a scalar, got shape %s",
          names[i], kiln_ew_shape_str(ctx, &b->shape, buf, sizeof buf));
    }
  }
  const kiln_tensor_t* x = ctx->in[0];
  kiln_infer_set(ctx, 0, x->dtype, &x->shape);
  return kiln_ew_fold(ctx, kiln_ew_run_clip);
}

/* ---- Identity / Dropout ---------------------------------------------- */

static kiln_status_t copy_input(const char* op, const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = kiln_ew_arr(ctx, 0);
  kiln_array_t* y = kiln_ew_out(ctx, 0);
  if (!x) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: missing input", op);
  int64_t n = kiln_array_numel(x);
  KILN_RETURN_IF_ERROR(kiln_ew_check_out(op, y, x->dtype, n));
  if (n > 0 && y->data != x->data)
    memcpy(y->data, x->data, (size_t)n * kiln_dtype_size(x->dtype));
  return NULL;
}

kiln_status_t kiln_ew_run_identity(const kiln_ref_ctx_t* ctx) {
  return copy_input("Identity", ctx);
}

kiln_status_t kiln_ew_infer_identity(kiln_infer_t* ctx) {
  return infer_map(ctx, "input", KILN_EW_ALL, kiln_ew_run_identity);
}

/* kiln runs Dropout in inference mode only: Y = X and the mask is all true.
 * Training mode (opset >= 12 input 'training_mode' true) is accepted only
 * with ratio 0, where it is the same thing; a training_mode that is not a
 * load-time constant is rejected at load so results never depend on it. */
static kiln_status_t dropout_training(bool training,
                                      const kiln_array_t* ratio) {
  if (!training) return NULL;
  double r = 0.5;
  if (ratio) {
    if (kiln_array_numel(ratio) != 1 || !kiln_dtype_is_float(ratio->dtype)) {
      char buf[96];
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Dropout: input 'ratio' must be a float scalar, "
                              "got %s %s",
                              kiln_dtype_name(ratio->dtype),
                              kiln_shape_format(&ratio->shape, buf, sizeof buf));
    }
    r = kiln_ew_ld_f(ratio->dtype, ratio->data, 0);
  }
  if (r != 0.0) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "Dropout: training mode (training_mode = true, "
                            "ratio = %g) is not supported",
                            r);
  }
  return NULL;
}

static bool array_true(const kiln_array_t* a) {
  return a && kiln_array_numel(a) >= 1 && kiln_ew_ld_i(a->dtype, a->data, 0) != 0;
}

static kiln_dtype_t mask_dtype(int64_t opset, kiln_dtype_t x) {
  return opset >= 10 ? KILN_DTYPE_BOOL : x;
}

kiln_status_t kiln_ew_run_dropout(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = kiln_ew_arr(ctx, 0);
  if (ctx->opset >= 12) {
    KILN_RETURN_IF_ERROR(dropout_training(
        array_true(kiln_ew_arr(ctx, 2)), kiln_ew_arr(ctx, 1)));
  }
  KILN_RETURN_IF_ERROR(copy_input("Dropout", ctx));
  kiln_array_t* mask = kiln_ew_out(ctx, 1);
  if (mask) {
    int64_t n = kiln_array_numel(x);
    KILN_RETURN_IF_ERROR(kiln_ew_check_out(
        "Dropout", mask, mask_dtype(ctx->opset, x->dtype), n));
    for (int64_t i = 0; i < n; ++i) kiln_ew_st_i(mask->dtype, mask->data, i, 1);
  }
  return NULL;
}

kiln_status_t kiln_ew_infer_dropout(kiln_infer_t* ctx) {
  KILN_RETURN_IF_ERROR(kiln_ew_check_dtype(ctx, 0, "data", KILN_EW_FLOAT));
  if (ctx->opset >= 12) {
    const kiln_tensor_t* ratio = kiln_ew_in(ctx, 1);
    const kiln_tensor_t* tm = kiln_ew_in(ctx, 2);
    if (ratio) KILN_RETURN_IF_ERROR(kiln_ew_check_dtype(ctx, 1, "ratio", KILN_EW_FLOAT));
    if (tm) {
      KILN_RETURN_IF_ERROR(kiln_ew_check_dtype(ctx, 2, "training_mode", KILN_EW_BOOL));
      if (!kiln_infer_has_value(ctx, 2)) {
        return kiln_make_status(KILN_UNSUPPORTED,
                                "Dropout: input 'training_mode' that is not a "
                                "constant is not supported (kiln runs Dropout "
                                "in inference mode only)");
      }
      bool training = array_true(&tm->value);
      if (training && ratio && !kiln_infer_has_value(ctx, 1)) {
        return kiln_make_status(KILN_UNSUPPORTED,
                                "Dropout: training mode with a non-constant "
                                "ratio is not supported");
      }
      KILN_RETURN_IF_ERROR(dropout_training(
          training, ratio ? &ratio->value : NULL));
    }
  } else {
    float r;
    KILN_RETURN_IF_ERROR(kiln_attr_float(ctx->node, "ratio", 0.5f, &r));
  }
  const kiln_tensor_t* x = ctx->in[0];
  kiln_infer_set(ctx, 0, x->dtype, &x->shape);
  if (ctx->n_out > 1 && ctx->out[1])
    kiln_infer_set(ctx, 1, mask_dtype(ctx->opset, x->dtype), &x->shape);
  return kiln_ew_fold(ctx, kiln_ew_run_dropout);
}
