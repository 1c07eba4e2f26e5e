/* Private to the elementwise op family (ir/ops/elementwise*.c): shared
 * helpers and the infer/run entry points that ir/ops/elementwise.c gathers
 * into kiln_ops_elementwise.
 *
 * The family is split by concept:
 *   elementwise.c         family table, dtype checks, load-time folding,
 *                         the broadcast iterator
 *   elementwise_unary.c   one-input maps: Relu .. Abs, Clip, Not, Identity,
 *                         Dropout, Elu .. Mish, Sign, Round/Floor/Ceil, the
 *                         trigonometric and hyperbolic maps, IsNaN/IsInf
 *   elementwise_binary.c  broadcasting ops: arithmetic, Pow, Mod, BitShift,
 *                         comparisons, And/Or/Xor, PRelu, Max/Min/Sum/Mean,
 *                         Where
 *   elementwise_cast.c    Cast, CastLike
 *
 * Numeric rules shared by every kernel:
 *   - float math runs in f32; f16 inputs are widened, the result is rounded
 *     to f16 once;
 *   - integer Add/Sub/Mul/Neg/Abs wrap like two's complement (computed in
 *     uint64 and truncated), integer Div truncates toward zero; integer Div
 *     and Mod fail the run on a zero divisor;
 *   - float -> integer conversions truncate, saturate to the int64 range
 *     (NaN -> 0) and then wrap to the target width, so they are defined for
 *     every value.
 * Every run re-derives its parameters from the arrays it is given and checks
 * them against the output, so it never trusts that infer saw the same values.
 */
#ifndef KILN_IR_OPS_ELEMENTWISE_IMPL_H_
#define KILN_IR_OPS_ELEMENTWISE_IMPL_H_

#include "ir/op.h"

/* ---- dtype sets ------------------------------------------------------ */

#define KILN_EW_BIT(t) (1u << (unsigned)(t))
/* f64 computes in double in every kernel these masks admit. */
#define KILN_EW_FLOAT                                                  \
  (KILN_EW_BIT(KILN_DTYPE_F32) | KILN_EW_BIT(KILN_DTYPE_F16) |         \
   KILN_EW_BIT(KILN_DTYPE_F64))
#define KILN_EW_SINT                                                   \
  (KILN_EW_BIT(KILN_DTYPE_I8) | KILN_EW_BIT(KILN_DTYPE_I32) |          \
   KILN_EW_BIT(KILN_DTYPE_I64) | KILN_EW_BIT(KILN_DTYPE_I16))
#define KILN_EW_UINT                                                   \
  (KILN_EW_BIT(KILN_DTYPE_U8) | KILN_EW_BIT(KILN_DTYPE_U16) |          \
   KILN_EW_BIT(KILN_DTYPE_U32) | KILN_EW_BIT(KILN_DTYPE_U64))
#define KILN_EW_INT (KILN_EW_SINT | KILN_EW_UINT)
#define KILN_EW_NUM (KILN_EW_FLOAT | KILN_EW_INT)
#define KILN_EW_BOOL KILN_EW_BIT(KILN_DTYPE_BOOL)
#define KILN_EW_ALL (KILN_EW_NUM | KILN_EW_BOOL)

/* ---- input access ---------------------------------------------------- */

/* Input |i| of an infer call, or NULL when it is omitted. */
static inline kiln_tensor_t* kiln_ew_in(const kiln_infer_t* ctx, int32_t i) {
  return (i >= 0 && i < ctx->n_in) ? ctx->in[i] : NULL;
}
/* Input |i| of a run call, or NULL when it is omitted. */
static inline const kiln_array_t* kiln_ew_arr(const kiln_ref_ctx_t* ctx,
                                              int32_t i) {
  return (i >= 0 && i < ctx->n_in) ? ctx->in[i] : NULL;
}
/* Output |i| of a run call, or NULL when it is omitted. */
static inline kiln_array_t* kiln_ew_out(const kiln_ref_ctx_t* ctx, int32_t i) {
  return (i >= 0 && i < ctx->n_out) ? ctx->out[i] : NULL;
}

/* ---- checks ---------------------------------------------------------- */

/* Checks that input |i| (named |what| in messages, e.g. "A") is present with
 * a dtype in |mask|: absent or UNDEFINED -> INVALID_ARGUMENT, a kiln dtype the
 * op does not take -> UNSUPPORTED ("Relu: input 'X' has dtype bool, which is
 * not supported"). */
kiln_status_t kiln_ew_check_dtype(const kiln_infer_t* ctx, int32_t i,
                                  const char* what, uint32_t mask);
/* INVALID_ARGUMENT naming both dtypes when inputs |i| and |j| differ. */
kiln_status_t kiln_ew_same_dtype(const kiln_infer_t* ctx, int32_t i,
                                 const char* what_i, int32_t j,
                                 const char* what_j);
/* Run-time guard: INTERNAL unless |out| holds |numel| elements of |dtype|. */
kiln_status_t kiln_ew_check_out(const char* op, const kiln_array_t* out,
                                kiln_dtype_t dtype, int64_t numel);
/* "[2,N,?]" for messages, spelling symbols when the graph is known. */
char* kiln_ew_shape_str(const kiln_infer_t* ctx, const kiln_shape_t* s,
                        char* buf, size_t n);

/* ---- load-time folding ----------------------------------------------- */

/* Outputs with at most this many elements are computed at load time when
 * every input value is known, so shape arithmetic (Shape -> Mul -> Concat ->
 * Reshape) yields constants. */
#define KILN_EW_FOLD_MAX_ELEMS 65536

/* After infer has set every output's dtype and shape: when not at run time,
 * every present input is constant and every output small and static, runs
 * |run| and stores the results with kiln_infer_set_value. Otherwise a no-op. */
kiln_status_t kiln_ew_fold(kiln_infer_t* ctx,
                           kiln_status_t (*run)(const kiln_ref_ctx_t*));

/* ---- scalar conversions ---------------------------------------------- */

/* Truncates toward zero and saturates to the int64 range; NaN -> 0. */
static inline int64_t kiln_ew_f2i(double v) {
  if (v != v) return 0;
  if (v >= 9223372036854775808.0) return INT64_MAX;
  if (v <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)v;
}
/* Element |i| of |data| as double (floats exact, ints exact up to 2^53). */
static inline double kiln_ew_ld_f(kiln_dtype_t t, const void* data, int64_t i) {
  return kiln_load_f64(t, data, (size_t)i);
}
/* Element |i| of an integer or bool array as int64 (exact). */
static inline int64_t kiln_ew_ld_i(kiln_dtype_t t, const void* data, int64_t i) {
  return kiln_load_i64(t, data, (size_t)i);
}
/* Stores an int64 into an integer/bool element, wrapping to its width. */
void kiln_ew_st_i(kiln_dtype_t t, void* data, int64_t i, int64_t v);
/* Stores a double into any element with kiln's conversion rules (float:
 * rounded; int: kiln_ew_f2i then wrapped; bool: != 0). */
void kiln_ew_st_f(kiln_dtype_t t, void* data, int64_t i, double v);

/* ---- broadcast iterator ---------------------------------------------- */

#define KILN_EW_MAX_OPERANDS 4 /* output + up to 3 inputs (Where) */

/* Inner-loop kernel: p[0] is the output (contiguous), p[1..] the inputs,
 * s[k] the element stride of operand k along the loop (0 = broadcast). */
typedef void (*kiln_ew_kernel_t)(char* const* p, const int64_t* s, int64_t n,
                                 const void* params);

/* Applies |kernel| over |out| (static shape, allocated) with |n_in| inputs
 * broadcast to it. Dims of size 1 are dropped and contiguous runs merged so
 * the common cases (same shape, scalar, bias over the inner dim) reach the
 * kernel as long runs. INTERNAL when an input does not broadcast to |out|
 * (infer should have rejected it). */
kiln_status_t kiln_ew_apply(const char* op, kiln_array_t* out, int32_t n_in,
                            const kiln_array_t* const* in,
                            kiln_ew_kernel_t kernel, const void* params);

/* ---- entry points (gathered in elementwise.c) -------------------------- */

#define KILN_EW_DECLARE(name)                                   \
  kiln_status_t kiln_ew_infer_##name(kiln_infer_t* ctx);        \
  kiln_status_t kiln_ew_run_##name(const kiln_ref_ctx_t* ctx);

/* elementwise_unary.c */
KILN_EW_DECLARE(identity)
KILN_EW_DECLARE(dropout)
KILN_EW_DECLARE(relu)
KILN_EW_DECLARE(leakyrelu)
KILN_EW_DECLARE(sigmoid)
KILN_EW_DECLARE(tanh)
KILN_EW_DECLARE(hardsigmoid)
KILN_EW_DECLARE(hardswish)
KILN_EW_DECLARE(erf)
KILN_EW_DECLARE(gelu)
KILN_EW_DECLARE(sqrt)
KILN_EW_DECLARE(reciprocal)
KILN_EW_DECLARE(exp)
KILN_EW_DECLARE(log)
KILN_EW_DECLARE(neg)
KILN_EW_DECLARE(abs)
KILN_EW_DECLARE(not)
KILN_EW_DECLARE(bitwise_not)
KILN_EW_DECLARE(clip)
KILN_EW_DECLARE(elu)
KILN_EW_DECLARE(selu)
KILN_EW_DECLARE(celu)
KILN_EW_DECLARE(softplus)
KILN_EW_DECLARE(softsign)
KILN_EW_DECLARE(thresholdedrelu)
KILN_EW_DECLARE(shrink)
KILN_EW_DECLARE(mish)
KILN_EW_DECLARE(sign)
KILN_EW_DECLARE(round)
KILN_EW_DECLARE(floor)
KILN_EW_DECLARE(ceil)
KILN_EW_DECLARE(sin)
KILN_EW_DECLARE(cos)
KILN_EW_DECLARE(tan)
KILN_EW_DECLARE(asin)
KILN_EW_DECLARE(acos)
KILN_EW_DECLARE(atan)
KILN_EW_DECLARE(sinh)
KILN_EW_DECLARE(cosh)
KILN_EW_DECLARE(asinh)
KILN_EW_DECLARE(acosh)
KILN_EW_DECLARE(atanh)
KILN_EW_DECLARE(isnan)
KILN_EW_DECLARE(isinf)
/* elementwise_binary.c */
KILN_EW_DECLARE(add)
KILN_EW_DECLARE(sub)
KILN_EW_DECLARE(mul)
KILN_EW_DECLARE(div)
KILN_EW_DECLARE(pow)
KILN_EW_DECLARE(prelu)
KILN_EW_DECLARE(max)
KILN_EW_DECLARE(min)
KILN_EW_DECLARE(equal)
KILN_EW_DECLARE(less)
KILN_EW_DECLARE(greater)
KILN_EW_DECLARE(less_equal)
KILN_EW_DECLARE(greater_equal)
KILN_EW_DECLARE(and)
KILN_EW_DECLARE(or)
KILN_EW_DECLARE(where)
KILN_EW_DECLARE(xor)
KILN_EW_DECLARE(bitshift)
KILN_EW_DECLARE(bitwise_and)
KILN_EW_DECLARE(bitwise_or)
KILN_EW_DECLARE(bitwise_xor)
KILN_EW_DECLARE(mod)
KILN_EW_DECLARE(sum)
KILN_EW_DECLARE(mean)
/* elementwise_cast.c */
KILN_EW_DECLARE(cast)
KILN_EW_DECLARE(castlike)

#endif /* KILN_IR_OPS_ELEMENTWISE_IMPL_H_ */
