/* Lowering of the elementwise math ops that came after the core set
 * (lower_elementwise.c): the activations Elu .. Mish, Sign, rounding, the
 * trigonometric and hyperbolic maps, IsNaN / IsInf, Xor, the Bitwise ops,
 * BitShift, Mod and
 * the variadic Sum / Mean. They are built from the same blocks
 * (kiln_lew_map, kiln_lew_binary, kiln_lew_variadic in lower_ew_impl.h) and
 * mirror the reference kernels (ir/ops/elementwise_unary.c and
 * elementwise_binary.c) operation by operation:
 *   - floats compute in f32, f16 widened on load and rounded once on store;
 *   - Softplus is max(x, 0) + log1p(exp(-|x|)) on both sides (no overflow
 *     to inf for large x; log1p by Goldberg's trick, exact enough in f16);
 *   - IsNaN / IsInf are comparisons (x != x, x == +-inf). The C target is
 *     compiled without -ffast-math and OpenCL without
 *     -cl-finite-math-only, so NaN and inf compare as IEEE says; GLSL's
 *     comparisons follow the same rule on the drivers kiln tests on;
 *   - integer Mod with a zero divisor fails the run like Div (status word
 *     for a run-time divisor, a load-time error for a constant one);
 *     float Mod is C fmod (TIR_FMOD), computed as a - b * trunc(a / b) in
 *     GLSL, which lacks it.
 */
#include <math.h>
#include <string.h>

#include "ir/op.h"
#include "lowering/lower_ew_impl.h"

#define BIT(t) (1u << (unsigned)(t))
/* As in lower_elementwise.c: M_F64 only where nothing is f32-typed. */
#define M_FLOAT (BIT(KILN_DTYPE_F32) | BIT(KILN_DTYPE_F16))
#define M_F64 BIT(KILN_DTYPE_F64)
#define M_INT (BIT(KILN_DTYPE_I8) | BIT(KILN_DTYPE_U8) | BIT(KILN_DTYPE_I32) | BIT(KILN_DTYPE_I64) | \
               BIT(KILN_DTYPE_I16) | BIT(KILN_DTYPE_U16) | BIT(KILN_DTYPE_U32))
#define M_NUM (M_FLOAT | M_INT)

static const tir_expr_t* f32c(tir_ctx_t* c, double v) {
  return tir_const(c, KILN_DTYPE_F32, (double)(float)v);
}
static const tir_expr_t* call1(tir_ctx_t* c, tir_intrin_t fn, const tir_expr_t* v) {
  return tir_call(c, fn, 1, v, NULL, NULL);
}
static const tir_expr_t* lt(tir_ctx_t* c, const tir_expr_t* a, const tir_expr_t* b) {
  return tir_bin(c, TIR_LT, a, b);
}
static const tir_expr_t* gt(tir_ctx_t* c, const tir_expr_t* a, const tir_expr_t* b) {
  return tir_bin(c, TIR_GT, a, b);
}

/* ---- activations ------------------------------------------------------------ */

/* Each op's two float attributes (see the reference's uparams_t). */
typedef struct ab_s {
  float a, b;
} ab_t;

static const tir_expr_t* u_elu(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v, const void* u) {
  const ab_t* p = u;
  (void)t;
  const tir_expr_t* neg = tir_mul(c, f32c(c, p->a), tir_sub(c, call1(c, TIR_EXP, v), f32c(c, 1.0)));
  return tir_select(c, lt(c, v, f32c(c, 0.0)), neg, v);
}
/* a = alpha, b = gamma */
static const tir_expr_t* u_selu(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v, const void* u) {
  const ab_t* p = u;
  (void)t;
  const tir_expr_t* g = f32c(c, p->b);
  const tir_expr_t* neg =
      tir_sub(c, tir_mul(c, f32c(c, p->a), call1(c, TIR_EXP, v)), f32c(c, p->a));
  return tir_select(c, gt(c, v, f32c(c, 0.0)), tir_mul(c, g, v), tir_mul(c, g, neg));
}
static const tir_expr_t* u_celu(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v, const void* u) {
  const ab_t* p = u;
  (void)t;
  const tir_expr_t* e = call1(c, TIR_EXP, tir_bin(c, TIR_DIV, v, f32c(c, p->a)));
  const tir_expr_t* neg = tir_mul(c, f32c(c, p->a), tir_sub(c, e, f32c(c, 1.0)));
  return tir_select(c, gt(c, v, f32c(c, 0.0)), v, neg);
}
/* max(v, 0) + log1p(exp(-|v|)), log1p as the reference's log1p_small:
 * u = 1 + e, then u == 1 ? e : log(u) * e / (u - 1). */
static const tir_expr_t* softplus(tir_ctx_t* c, const tir_expr_t* v) {
  const tir_expr_t* pos = tir_select(c, gt(c, v, f32c(c, 0.0)), v, f32c(c, 0.0));
  const tir_expr_t* e = call1(c, TIR_EXP, call1(c, TIR_NEG, call1(c, TIR_FABS, v)));
  const tir_expr_t* u = tir_add(c, f32c(c, 1.0), e);
  const tir_expr_t* l = tir_bin(c, TIR_DIV, tir_mul(c, call1(c, TIR_LOG, u), e), tir_sub(c, u, f32c(c, 1.0)));
  return tir_add(c, pos, tir_select(c, tir_bin(c, TIR_EQ, u, f32c(c, 1.0)), e, l));
}
/* |u| non-NULL: softplus as one prelude function (TIR_SOFTPLUS: one exp,
 * one log, one division per element, vectorised on the CPU); printed from
 * the composite form above, the C repeated exp(-|v|) in each of its four
 * uses. f64 keeps the composite (no double form in the preludes). */
static const tir_expr_t* u_softplus(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                                    const void* u) {
  return u && t != KILN_DTYPE_F64 ? call1(c, TIR_SOFTPLUS, v) : softplus(c, v);
}
static const tir_expr_t* u_softsign(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                                    const void* u) {
  (void)t, (void)u;
  return tir_bin(c, TIR_DIV, v, tir_add(c, f32c(c, 1.0), call1(c, TIR_FABS, v)));
}
static const tir_expr_t* u_mish(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v, const void* u) {
  (void)t, (void)u;
  return tir_mul(c, v, call1(c, TIR_TANH, softplus(c, v)));
}
static const tir_expr_t* u_thresholded(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                                       const void* u) {
  const ab_t* p = u;
  (void)t;
  return tir_select(c, gt(c, v, f32c(c, p->a)), v, f32c(c, 0.0));
}
/* a = lambd, b = bias */
static const tir_expr_t* u_shrink(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                                  const void* u) {
  const ab_t* p = u;
  (void)t;
  const tir_expr_t* hi = tir_select(c, gt(c, v, f32c(c, p->a)), tir_sub(c, v, f32c(c, p->b)),
                                    f32c(c, 0.0));
  return tir_select(c, lt(c, v, f32c(c, -p->a)), tir_add(c, v, f32c(c, p->b)), hi);
}
/* 1, -1, or (floats) the value itself so 0 and NaN pass through. */
static const tir_expr_t* u_sign(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v, const void* u) {
  (void)u;
  const kiln_dtype_t vt = v->dtype; /* f32 for f16 inputs */
  const tir_expr_t* zero = tir_const(c, vt, 0.0);
  const tir_expr_t* rest = kiln_dtype_is_float(t) ? v : zero;
  if (t != KILN_DTYPE_U8) rest = tir_select(c, lt(c, v, zero), tir_const(c, vt, -1.0), rest);
  return tir_select(c, gt(c, v, zero), tir_const(c, vt, 1.0), rest);
}

static kiln_status_t attrs(kiln_lower_ctx_t* ctx, const char* a, float da, const char* b, float db,
                           ab_t* p) {
  kiln_status_t s = kiln_attr_float(ctx->node, a, da, &p->a);
  if (!s && b) s = kiln_attr_float(ctx->node, b, db, &p->b);
  return s;
}

#define ATTR_OP(name, fn, a, da, b, db)                  \
  kiln_status_t name(kiln_lower_ctx_t* ctx) {     \
    ab_t p = {0, 0};                                     \
    kiln_status_t s = attrs(ctx, a, da, b, db, &p);      \
    return s ? s : kiln_lew_map(ctx, fn, &p, M_FLOAT);   \
  }

ATTR_OP(kiln_lower_ew_elu, u_elu, "alpha", 1.0f, NULL, 0.0f)
ATTR_OP(kiln_lower_ew_selu, u_selu, "alpha", 1.67326319217681884765625f, "gamma", 1.05070102214813232421875f)
ATTR_OP(kiln_lower_ew_thresholdedrelu, u_thresholded, "alpha", 1.0f, NULL, 0.0f)
ATTR_OP(kiln_lower_ew_shrink, u_shrink, "lambd", 0.5f, "bias", 0.0f)

kiln_status_t kiln_lower_ew_celu(kiln_lower_ctx_t* ctx) {
  ab_t p = {0, 0};
  kiln_status_t s = attrs(ctx, "alpha", 1.0f, NULL, 0.0f, &p);
  if (s) return s;
  if (p.a == 0.0f) return kiln_make_status(KILN_INVALID_ARGUMENT, "Celu: attribute 'alpha' must not be 0");
  return kiln_lew_map(ctx, u_celu, &p, M_FLOAT);
}
kiln_status_t kiln_lower_ew_softplus(kiln_lower_ctx_t* ctx) {
  static const bool kPrelude = true;
  /* every target's prelude has it (kiln_softplusf: C, OpenCL C and GLSL) */
  return kiln_lew_map(ctx, u_softplus, &kPrelude, M_FLOAT);
}
kiln_status_t kiln_lower_ew_softsign(kiln_lower_ctx_t* ctx) { return kiln_lew_map(ctx, u_softsign, NULL, M_FLOAT); }
kiln_status_t kiln_lower_ew_mish(kiln_lower_ctx_t* ctx) { return kiln_lew_map(ctx, u_mish, NULL, M_FLOAT); }
kiln_status_t kiln_lower_ew_sign(kiln_lower_ctx_t* ctx) { return kiln_lew_map(ctx, u_sign, NULL, M_NUM); }

/* ---- one intrinsic per element --------------------------------------------- */

static const tir_expr_t* u_intrin(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                                  const void* u) {
  (void)t;
  return call1(c, *(const tir_intrin_t*)u, v);
}

#define INTRIN_OP(name, fn)                                    \
  kiln_status_t name(kiln_lower_ctx_t* ctx) {           \
    static const tir_intrin_t f = fn;                          \
    return kiln_lew_map(ctx, u_intrin, &f, M_FLOAT | M_F64);   \
  }

INTRIN_OP(kiln_lower_ew_round, TIR_ROUND_EVEN)
INTRIN_OP(kiln_lower_ew_floor, TIR_FLOOR)
INTRIN_OP(kiln_lower_ew_ceil, TIR_CEIL)
INTRIN_OP(kiln_lower_ew_sin, TIR_SIN)
INTRIN_OP(kiln_lower_ew_cos, TIR_COS)
INTRIN_OP(kiln_lower_ew_tan, TIR_TAN)
INTRIN_OP(kiln_lower_ew_asin, TIR_ASIN)
INTRIN_OP(kiln_lower_ew_acos, TIR_ACOS)
INTRIN_OP(kiln_lower_ew_atan, TIR_ATAN)
INTRIN_OP(kiln_lower_ew_sinh, TIR_SINH)
INTRIN_OP(kiln_lower_ew_cosh, TIR_COSH)
INTRIN_OP(kiln_lower_ew_asinh, TIR_ASINH)
INTRIN_OP(kiln_lower_ew_acosh, TIR_ACOSH)
INTRIN_OP(kiln_lower_ew_atanh, TIR_ATANH)

/* ---- IsNaN / IsInf ------------------------------------------------------------ */

static const tir_expr_t* u_isnan(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                                 const void* u) {
  (void)t, (void)u;
  return tir_bin(c, TIR_NE, v, v);
}
/* a: detect_positive, b: detect_negative (0 or 1). */
static const tir_expr_t* u_isinf(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                                 const void* u) {
  const ab_t* p = u;
  (void)t;
  const tir_expr_t* pos = tir_bin(c, TIR_EQ, v, f32c(c, INFINITY));
  const tir_expr_t* neg = tir_bin(c, TIR_EQ, v, f32c(c, -INFINITY));
  if (p->a != 0.0f && p->b != 0.0f) return tir_bin(c, TIR_OR, pos, neg);
  if (p->a != 0.0f) return pos;
  if (p->b != 0.0f) return neg;
  return tir_const(c, KILN_DTYPE_BOOL, 0.0);
}

kiln_status_t kiln_lower_ew_isnan(kiln_lower_ctx_t* ctx) { return kiln_lew_map(ctx, u_isnan, NULL, M_FLOAT); }

kiln_status_t kiln_lower_ew_isinf(kiln_lower_ctx_t* ctx) {
  int64_t pos = 1, neg = 1;
  kiln_status_t s = kiln_attr_int(ctx->node, "detect_positive", 1, &pos);
  if (!s) s = kiln_attr_int(ctx->node, "detect_negative", 1, &neg);
  if (s) return s;
  const ab_t p = {pos != 0, neg != 0};
  return kiln_lew_map(ctx, u_isinf, &p, M_FLOAT);
}

/* ---- Xor, Bitwise*, BitShift, Mod ----------------------------------------------------------- */

static const tir_expr_t* b_xor(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* a,
                               const tir_expr_t* b) {
  (void)t;
  const tir_expr_t* a1 = tir_bin(c, TIR_NE, a, tir_const(c, a->dtype, 0.0));
  const tir_expr_t* b1 = tir_bin(c, TIR_NE, b, tir_const(c, b->dtype, 0.0));
  return tir_bin(c, TIR_NE, a1, b1);
}
kiln_status_t kiln_lower_ew_xor(kiln_lower_ctx_t* ctx) {
  return kiln_lew_binary(ctx, b_xor, BIT(KILN_DTYPE_BOOL), false);
}

/* BitwiseAnd / Or / Xor / Not on every integer dtype (u64 too: the bits
 * need no unsigned order). Not is x ^ all-ones: -1 for the signed types and
 * u64 (whose bit pattern is all ones), the width's mask for u8/u16/u32 so
 * the value stays in the dtype's range as the printers expect. */
#define M_BITS (M_INT | BIT(KILN_DTYPE_U64))
#define BITWISE(name, op)                                                                     \
  static const tir_expr_t* b_##name(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* a,        \
                                    const tir_expr_t* b) {                                    \
    (void)t;                                                                                  \
    return tir_bin(c, op, a, b);                                                              \
  }                                                                                           \
  kiln_status_t kiln_lower_ew_##name(kiln_lower_ctx_t* ctx) {                                 \
    return kiln_lew_binary(ctx, b_##name, M_BITS, false);                                     \
  }
BITWISE(bitwise_and, TIR_BAND)
BITWISE(bitwise_or, TIR_BOR)
BITWISE(bitwise_xor, TIR_BXOR)

static const tir_expr_t* u_bitwise_not(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                                       const void* u) {
  (void)u;
  int64_t ones = -1;
  if (t == KILN_DTYPE_U8) ones = 0xff;
  else if (t == KILN_DTYPE_U16) ones = 0xffff;
  else if (t == KILN_DTYPE_U32) ones = 0xffffffffll;
  return tir_bin(c, TIR_BXOR, v, kiln_lew_imm_i(c, t, ones));
}
kiln_status_t kiln_lower_ew_bitwise_not(kiln_lower_ctx_t* ctx) {
  return kiln_lew_map(ctx, u_bitwise_not, NULL, M_BITS);
}

/* 2^s for a shift |s| of 0..7 (u8), as a chain of selects: TIR has no shift
 * operator, and u8 multiplication / division by it wraps and truncates like
 * << and >>. Shifts of 8 or more give 0, as in the reference. */
static const tir_expr_t* pow2_u8(tir_ctx_t* c, const tir_expr_t* s) {
  const tir_expr_t* p = tir_const(c, KILN_DTYPE_U8, 128.0);
  for (int k = 6; k >= 0; --k)
    p = tir_select(c, tir_bin(c, TIR_EQ, s, tir_const(c, KILN_DTYPE_U8, (double)k)),
                   tir_const(c, KILN_DTYPE_U8, (double)(1 << k)), p);
  return p;
}
static const tir_expr_t* shift_u8(tir_ctx_t* c, const tir_expr_t* a, const tir_expr_t* b, bool left) {
  const tir_expr_t* p = pow2_u8(c, b);
  const tir_expr_t* v = left ? tir_mul(c, a, p) : tir_bin(c, TIR_DIV, a, p);
  const tir_expr_t* zero = tir_const(c, KILN_DTYPE_U8, 0.0);
  return tir_select(c, tir_bin(c, TIR_GE, b, tir_const(c, KILN_DTYPE_U8, 8.0)), zero, v);
}
static const tir_expr_t* b_shl(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* a,
                               const tir_expr_t* b) {
  (void)t;
  return shift_u8(c, a, b, true);
}
static const tir_expr_t* b_shr(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* a,
                               const tir_expr_t* b) {
  (void)t;
  return shift_u8(c, a, b, false);
}
kiln_status_t kiln_lower_ew_bitshift(kiln_lower_ctx_t* ctx) {
  const char* d = NULL;
  kiln_status_t s = kiln_attr_string(ctx->node, "direction", "", &d);
  if (s) return s;
  bool left = strcmp(d, "LEFT") == 0;
  if (!left && strcmp(d, "RIGHT") != 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "BitShift: attribute 'direction' is '%s', must be 'LEFT' or 'RIGHT'", d);
  }
  return kiln_lew_binary(ctx, left ? b_shl : b_shr, BIT(KILN_DTYPE_U8), false);
}

/* Truncated remainder a - (a / b) * b over kiln_lew_div (0 for b = 0 or -1,
 * never trapping), and its floor variant that takes the divisor's sign. */
static const tir_expr_t* b_tmod(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* a,
                                const tir_expr_t* b) {
  if (kiln_dtype_is_float(t)) return tir_call(c, TIR_FMOD, 2, a, b, NULL);
  const tir_expr_t* zero = tir_const(c, t, 0.0);
  const tir_expr_t* r = tir_sub(c, a, tir_mul(c, kiln_lew_div(c, t, a, b), b));
  /* b = 0: the run fails anyway; 0 rather than a keeps the reference's value */
  return tir_select(c, tir_bin(c, TIR_EQ, b, zero), zero, r);
}
static const tir_expr_t* b_pmod(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* a,
                                const tir_expr_t* b) {
  const tir_expr_t* r = b_tmod(c, t, a, b);
  if (kiln_dtype_is_unsigned(t)) return r;
  const tir_expr_t* zero = tir_const(c, t, 0.0);
  const tir_expr_t* sign_differs = tir_bin(c, TIR_NE, lt(c, r, zero), lt(c, b, zero));
  const tir_expr_t* fix = tir_bin(c, TIR_AND, tir_bin(c, TIR_NE, r, zero), sign_differs);
  return tir_select(c, fix, tir_add(c, r, b), r);
}
kiln_status_t kiln_lower_ew_mod(kiln_lower_ctx_t* ctx) {
  int64_t fm = 0;
  kiln_status_t s = kiln_attr_int(ctx->node, "fmod", 0, &fm);
  if (s) return s;
  const tir_buffer_t* a = kiln_lew_in(ctx, 0);
  const tir_buffer_t* b = kiln_lew_in(ctx, 1);
  if (!a || !b) return kiln_make_status(KILN_INVALID_ARGUMENT, "Mod: missing input");
  if ((fm != 0 && fm != 1) || (fm == 0 && kiln_dtype_is_float(a->dtype))) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Mod: attribute fmod = %lld with %s inputs (floats need fmod = 1)",
                            (long long)fm, kiln_dtype_name(a->dtype));
  }
  bool check = !kiln_dtype_is_float(b->dtype) && !kiln_lew_const_in(ctx, 1);
  return kiln_lew_binary(ctx, fm ? b_tmod : b_pmod, M_NUM | M_F64, check);
}

/* ---- Sum / Mean ---------------------------------------------------------------------- */

static const tir_expr_t* b_add(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* a,
                               const tir_expr_t* b) {
  (void)t;
  return tir_add(c, a, b);
}
kiln_status_t kiln_lower_ew_sum(kiln_lower_ctx_t* ctx) { return kiln_lew_variadic(ctx, b_add, M_FLOAT | M_F64, false); }
kiln_status_t kiln_lower_ew_mean(kiln_lower_ctx_t* ctx) { return kiln_lew_variadic(ctx, b_add, M_FLOAT, true); }

