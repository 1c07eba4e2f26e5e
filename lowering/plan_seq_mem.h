/* Memory for a range inside the shapes: every buffer's size as a
 * polynomial of the dim's value, so that a run at n is planned at n.
 *
 * kiln_plan_seq_unify (plan_seq.h) keeps every buffer at the top of the
 * range and indexes the ones that change dense at the run's value. Their
 * byte sizes at the five values the plans were lowered at are fitted here
 * with a polynomial of degree <= 2 (integer coefficients, checked on all
 * five), and each unified kernel is verified at every value n of the range
 * with its flat buffers cut to their size at n (tir_verify_dims with the
 * dim fixed to n): what a kernel touches at n lies inside what the session
 * gives it at n. A buffer whose sizes follow no such polynomial, leave
 * 0..its top size, outgrow its root's, or that some kernel's check at some
 * n rejects keeps its top size, with its root and every view of it. The
 * runtime evaluates the polynomials (kiln_program_bytes_at) and plans the
 * arena with the same planner at each new value. */
#ifndef KILN_LOWERING_PLAN_SEQ_MEM_H_
#define KILN_LOWERING_PLAN_SEQ_MEM_H_

#include "lowering/plan_seq.h"

/* The polynomial c[0] + c[1] n + c[2] n^2 with integer coefficients through
 * (x[i], y[i]), i < KILN_PLAN_SEQ_SIZES, fitted on points 0, 2 and 4 and
 * checked on all; false when there is none (or a coefficient is too large
 * to evaluate in 64 bits over 1..2^20). */
bool kiln_plan_seq_fit(const int64_t* x, const int64_t* y, int64_t c[3]);

/* The most kernel checks (a kernel at one value; about 10 us each) the
 * sizes may take: above it (a long range over many kernels) every buffer
 * keeps the top of the range's size. */
#define KILN_PLAN_SEQ_MEM_CHECKS (1ll << 22)

/* Sizes per value of the dim for plans[KILN_PLAN_SEQ_SIZES - 1] after
 * kiln_plan_seq_unify (same arguments): *out (from |a|, 3 i64 per buffer of
 * that plan, kiln_program_t.dim_bytes' layout); *out_kept the root buffers
 * whose size changes with the dim that keep the top of the range's;
 * *out_unverified true when the checks would pass KILN_PLAN_SEQ_MEM_CHECKS
 * (then every buffer keeps it). The kernels are left as they were.
 * OUT_OF_MEMORY, or a verifier error other than a bound. */
KILN_MUST_USE kiln_status_t kiln_plan_seq_bytes(kiln_plan_t* const* plans, int64_t lo, int64_t hi, kiln_allocator_t a,
                                                int64_t** out, int32_t* out_kept, bool* out_unverified);

#endif
