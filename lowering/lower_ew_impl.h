/* Private to lowering/lower_elementwise.c and lowering/lower_tensor.c: the
 * helpers both families use to build one loop nest per output element and
 * its default schedules (defined in lower_elementwise.c).
 *
 * A "nest" is one loop per output dim, named "d0".."dN-1", outermost
 * first. Kernels are built bottom-up: the caller forms the value of one
 * output element from loads indexed by the nest's variables (broadcasting
 * loads drop size-1 dims), wraps the store(s) in the loops with
 * kiln_lew_loops and emits it with kiln_lew_emit, which adds the default
 * schedule for the context's target:
 *   CPU: the outer dims fused into one loop ("d0.d1..."), PARALLEL when the
 *        output has >= KILN_LEW_PARALLEL_MIN elements; the innermost loop,
 *        when the caller says it is contiguous, split by 16, 8 or 4
 *        (whichever divides it: no guard) with the inner part VECTORIZED, or
 *        VECTORIZED whole when none divides. When the threads need the inner
 *        dim (rank 1, or fewer outer iterations than 2 x threads) it is cut
 *        into chunks of its smallest divisor >= 16 whose outer part joins
 *        the parallel loop (no divisor: the inner loop itself is PARALLEL).
 *        CPU schedules never need a guard.
 *   GPU: every dim fused, split by 256, outer part bound to BLOCK_X, inner
 *        part to THREAD_X.
 * Value expressions follow the reference kernels' numeric rules (see
 * ir/ops/elementwise_impl.h): float math in f32, f16 widened on load and
 * rounded once on store, integer arithmetic wrapping at the element width.
 */
#ifndef KILN_LOWERING_LOWER_EW_IMPL_H_
#define KILN_LOWERING_LOWER_EW_IMPL_H_

#include "lowering/lower.h"
#include "lowering/plan.h"

/* 32k: a 4 x 64 x 128 Transpose (24 us on one core) ran serial at 64k,
 * and the OpenMP threads, idle longer than their spin, slept until the
 * next kernel woke them (the transformer encoder block: 9% of a run). */
#define KILN_LEW_PARALLEL_MIN 32768

typedef struct kiln_lew_nest_s {
  int32_t rank;
  int64_t shape[KILN_MAX_RANK];
  const tir_var_t* var[KILN_MAX_RANK];
  const tir_expr_t* idx[KILN_MAX_RANK]; /* tir_ref(var[k]) */
} kiln_lew_nest_t;

/* Loop variables "d0".. over |shape| (rank 0 is fine: no loops). */
void kiln_lew_nest(tir_ctx_t* c, kiln_lew_nest_t* n, int32_t rank, const int64_t* shape);
/* Nest over the shape of buffer |b|. */
void kiln_lew_nest_buf(tir_ctx_t* c, kiln_lew_nest_t* n, const tir_buffer_t* b);
/* Load of |b| broadcast (numpy, right-aligned) to the nest: dims of size 1
 * read index 0. |b| rank <= nest rank. */
const tir_expr_t* kiln_lew_bload(tir_ctx_t* c, const kiln_lew_nest_t* n, const tir_buffer_t* b);
/* Load of |b| with every index 0 (a scalar or one-element tensor). */
const tir_expr_t* kiln_lew_load0(tir_ctx_t* c, const tir_buffer_t* b);
/* Store of |v| into |b| at the nest's indices (|b| has the nest's rank). */
const tir_stmt_t* kiln_lew_store(tir_ctx_t* c, const kiln_lew_nest_t* n, const tir_buffer_t* b,
                                 const tir_expr_t* v);
/* Wraps |body| in the nest's loops (serial). */
const tir_stmt_t* kiln_lew_loops(tir_ctx_t* c, const kiln_lew_nest_t* n, const tir_stmt_t* body);

/* ---- value helpers ------------------------------------------------------ */

/* |e| as f32 (f16 widened, ints converted); f64 stays f64. */
const tir_expr_t* kiln_lew_f32(tir_ctx_t* c, const tir_expr_t* e);
/* Typed immediate; i64 values are exact (tir_const goes through double). */
const tir_expr_t* kiln_lew_imm(tir_ctx_t* c, kiln_dtype_t t, double v);
const tir_expr_t* kiln_lew_imm_i(tir_ctx_t* c, kiln_dtype_t t, int64_t v);
/* Float |v| (f32) converted to integer dtype |t| like kiln_ew_f2i + wrap:
 * truncate, saturate to the int64 range, NaN -> 0, wrap to the width. */
const tir_expr_t* kiln_lew_f2i(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v);
/* min(max(e, lo), hi) in I64. */
const tir_expr_t* kiln_lew_clamp(tir_ctx_t* c, const tir_expr_t* e, int64_t lo, int64_t hi);

/* ---- kernels -------------------------------------------------------------- */

/* Builds kernel(params) with body |body| (already wrapped in the nest's
 * loops) and emits it with the default schedule for ctx->target over |n|.
 * |inner_contig|: the innermost dim is contiguous in the buffers it touches
 * (enables VECTORIZED). |vectorize|=false also when the body has inner
 * loops that must stay serial. */
kiln_status_t kiln_lew_emit(kiln_lower_ctx_t* ctx, const kiln_lew_nest_t* n,
                            const tir_stmt_t* body, int32_t n_params,
                            const tir_buffer_t* const* params, bool vectorize);
/* The default schedule for a nest (NULL when there is nothing to do). */
tir_schedule_t* kiln_lew_schedule(kiln_lower_ctx_t* ctx, const kiln_lew_nest_t* n,
                                  bool vectorize);

/* A run-time check: a kernel over every element of |b| that stores |code|
 * into a new status word of the node (kiln_lower_status) where bad(element)
 * is true. Emit it before the kernels that use |b|; they must stay
 * memory-safe on bad data themselves (clamp, or divide by 1). Nothing is
 * emitted for an empty |b|. */
typedef const tir_expr_t* (*kiln_lew_bad_fn)(tir_ctx_t* c, const tir_expr_t* v, const void* user);
kiln_status_t kiln_lew_check(kiln_lower_ctx_t* ctx, const tir_buffer_t* b, kiln_lew_bad_fn bad,
                             const void* user, kiln_check_code_t code);

/* Fills output |out| with the immediate |v| (f16 given as an f32 value). */
kiln_status_t kiln_lew_fill(kiln_lower_ctx_t* ctx, const tir_buffer_t* out, const tir_expr_t* v);

/* ---- op building blocks (lower_elementwise.c) ------------------------------ */

/* One output element from the input element |v| (f16 widened to f32) of
 * input dtype |t|; a float result is f32 (rounded by the caller). */
typedef const tir_expr_t* (*kiln_lew_umap_fn)(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* v,
                                              const void* user);
/* One output element from the widened operands |a| and |b| of input dtype |t|. */
typedef const tir_expr_t* (*kiln_lew_bin_fn)(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* a,
                                             const tir_expr_t* b);
/* out = fn(in0) over out's shape; UNSUPPORTED unless in0's dtype is in |in_mask|
 * (bit 1 << dtype). */
kiln_status_t kiln_lew_map(kiln_lower_ctx_t* ctx, kiln_lew_umap_fn fn, const void* user,
                           uint32_t in_mask);
/* out = fn(in0, in1), both broadcast to out. |check_zero_b|: a 0 in B also
 * stores KILN_CHECK_DIV_ZERO into the node's status word (integer divisors
 * known only at run time). */
kiln_status_t kiln_lew_binary(kiln_lower_ctx_t* ctx, kiln_lew_bin_fn fn, uint32_t in_mask,
                              bool check_zero_b);
/* out = fn(...fn(in0, in1)..., in_n-1) in the output's dtype; |mean| then
 * divides by the input count. */
kiln_status_t kiln_lew_variadic(kiln_lower_ctx_t* ctx, kiln_lew_bin_fn fn, uint32_t in_mask,
                                bool mean);
/* Division with the reference's rules: floats divide; integers truncate and
 * never trap (a 0 divisor gives 0, x / -1 negates with wrap-around). */
const tir_expr_t* kiln_lew_div(tir_ctx_t* c, kiln_dtype_t t, const tir_expr_t* a,
                               const tir_expr_t* b);

/* ---- constant inputs ---------------------------------------------------- */

/* The known value of input |i| (present and constant), or NULL. */
const kiln_array_t* kiln_lew_const_in(const kiln_lower_ctx_t* ctx, int32_t i);
/* Reads constant input |i| as up to |cap| integers. UNSUPPORTED naming
 * |op| and |what| when the input is not a constant. */
kiln_status_t kiln_lew_read_ints(const kiln_lower_ctx_t* ctx, int32_t i, const char* op,
                                 const char* what, int64_t* out, int64_t cap, int64_t* out_n);

/* Present input |i| (buffer) or NULL. */
static inline const tir_buffer_t* kiln_lew_in(const kiln_lower_ctx_t* ctx, int32_t i) {
  return (i >= 0 && i < ctx->n_in) ? ctx->in[i] : NULL;
}
static inline const tir_buffer_t* kiln_lew_out(const kiln_lower_ctx_t* ctx, int32_t i) {
  return (i >= 0 && i < ctx->n_out) ? ctx->out[i] : NULL;
}

/* Lowerings of the element-wise math ops (lower_elementwise_math.c), named
 * by their lines in ir/ops/elementwise.def. */
kiln_lower_op_t kiln_lower_ew_elu, kiln_lower_ew_selu, kiln_lower_ew_celu,
    kiln_lower_ew_softplus, kiln_lower_ew_softsign, kiln_lower_ew_thresholdedrelu,
    kiln_lower_ew_shrink, kiln_lower_ew_mish, kiln_lower_ew_sign, kiln_lower_ew_round,
    kiln_lower_ew_floor, kiln_lower_ew_ceil, kiln_lower_ew_sin, kiln_lower_ew_cos,
    kiln_lower_ew_tan, kiln_lower_ew_asin, kiln_lower_ew_acos, kiln_lower_ew_atan,
    kiln_lower_ew_sinh, kiln_lower_ew_cosh, kiln_lower_ew_asinh, kiln_lower_ew_acosh,
    kiln_lower_ew_atanh, kiln_lower_ew_isnan, kiln_lower_ew_isinf, kiln_lower_ew_xor,
    kiln_lower_ew_bitshift, kiln_lower_ew_mod, kiln_lower_ew_sum, kiln_lower_ew_mean,
    kiln_lower_ew_bitwise_and, kiln_lower_ew_bitwise_or, kiln_lower_ew_bitwise_xor,
    kiln_lower_ew_bitwise_not;

#endif /* KILN_LOWERING_LOWER_EW_IMPL_H_ */
