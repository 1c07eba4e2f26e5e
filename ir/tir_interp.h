/* The tensor-IR interpreter: runs a kernel (tir_func_t) on host memory.
 *
 * It is the executable meaning of the IR, for tests and debugging: every
 * statement and expression kind, every dtype the IR has (f32, f16, i8, u8,
 * i32, i64, bool), with the arithmetic a target is expected to produce:
 *   - float values are rounded to their dtype after every operation (f16
 *     through IEEE half, round to nearest even); intrinsics run in float;
 *     min/max propagate NaN;
 *   - integer results wrap to their dtype's width; TIR_DIV truncates,
 *     TIR_FLOORDIV / TIR_FLOORMOD floor; division by zero is an error;
 *   - float -> integer casts truncate and saturate (NaN gives 0), casts to
 *     bool test != 0.
 * Loops of every kind run serially in order, so bound (GPU id) loops are
 * one work-item after the other and barriers do nothing: exact for kernels
 * whose barriers separate whole thread-loop nests, which is the shape the
 * schedule primitives produce. Scoped (LOCAL/PRIVATE) buffers start filled
 * with NaN (floats) or 0xA5 bytes (integers), so a kernel that reads an
 * element it never wrote shows up in its outputs.
 *
 * Every load and store is bounds-checked per dimension against the buffer's
 * shape; a variable used outside its loop, a loop rebinding a variable in
 * scope, a store whose value dtype differs from the buffer's, a buffer with
 * no memory are errors too. Errors are statuses naming the kernel, the
 * access ("load A[i, j + 1]"), the dimension and the index value; the run
 * stops at the first one (stores done before it stay done).
 *
 * Usage:
 *   void* args[] = {x.data, w.data, y.data};   // one per f->params[i]
 *   KILN_RETURN_IF_ERROR(tir_interp_run(f, args, NULL, allocator));
 *
 * Thread-safety: reentrant; concurrent runs must not write the same memory.
 */
#ifndef KILN_IR_TIR_INTERP_H_
#define KILN_IR_TIR_INTERP_H_

#include "ir/tir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tir_interp_options_s {
  /* Evaluate both arms of every select, as the IR allows targets to, so an
   * arm that would fault (out-of-bounds load, division by zero) is an error
   * even when its value is not chosen. Default false: only the chosen arm,
   * like C's ?:. */
  bool eval_both_select_arms;
} tir_interp_options_t;

/* Runs |f| with args[i] the memory of f->params[i]: an array of that
 * buffer's dtype laid out by its strides (tir_buffer_span_bytes long).
 * |options| may be NULL (defaults). Scoped buffers and the variable table
 * come from |allocator| and are freed before returning. Returns NULL, or
 * KILN_OUT_OF_RANGE (out-of-bounds access), KILN_INVALID_ARGUMENT (malformed
 * kernel, division by zero, missing memory), KILN_OUT_OF_MEMORY. */
KILN_MUST_USE kiln_status_t tir_interp_run(const tir_func_t* f, void* const* args,
                                           const tir_interp_options_t* options,
                                           kiln_allocator_t allocator);

/* A value: |f| for float dtypes, |i| for integer and bool dtypes. */
typedef struct tir_value_s {
  double f;
  int64_t i;
} tir_value_t;

/* Evaluates |e| with vars[i] = values[i] and no buffers (a load is an
 * error), only the chosen arm of a select. Writes *out on success; errors
 * as tir_interp_run. */
KILN_MUST_USE kiln_status_t tir_interp_eval_expr(const tir_expr_t* e, int32_t n,
                                                 const tir_var_t* const* vars,
                                                 const int64_t* values, tir_value_t* out);

#ifdef __cplusplus
}
#endif
#endif /* KILN_IR_TIR_INTERP_H_ */
