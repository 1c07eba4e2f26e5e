/* Internal helpers shared by the tensor-IR analysis files (H-tir):
 * ir/tir_bounds.c, ir/tir_verify.c, ir/tir_simplify.c, ir/tir_print.c,
 * ir/tir_schedule*.c (regions), ir/tir_interp.c (messages).
 * NOT part of the public tensor-IR contract (ir/tir.h); other modules should
 * use tir_expr_bounds / tir_print_* instead.
 *
 * Intervals: [lo, hi] over int64 where lo == TIR_NEG_INF / hi == TIR_POS_INF
 * mean "unbounded on that side". Arithmetic saturates to the infinities, so
 * an overflowing bound becomes unbounded rather than wrong.
 *
 * A bounds environment (tir_benv_t) holds the ranges of the loop variables in
 * scope and "facts": expressions known to lie in a range because an enclosing
 * tir_if (or select branch) tested them. Evaluating an expression intersects
 * the natural interval of every sub-expression with the facts about a
 * structurally equal expression, so `if (h + 1 < 224) ... X[h + 1]` bounds the
 * index by the guard. Comparisons of I64 expressions also record linear
 * relations (a - b in a range), which bound sums that are affine images of
 * the tested one (`if (i < j)` bounds j - i; a guard on 4x + y bounds
 * 12x + 3y), so guards keep working after the simplifier rewrote the index.
 * Contradictory facts give empty intervals (lo > hi): the code they guard
 * never runs (tir_benv_infeasible).
 *
 * Size: a tir_benv_t is ~30 KB; keep it on the heap.
 */
#ifndef KILN_IR_TIR_ANALYSIS_H_
#define KILN_IR_TIR_ANALYSIS_H_

#include "ir/tir.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TIR_NEG_INF INT64_MIN
#define TIR_POS_INF INT64_MAX
#define TIR_BENV_MAX_VARS 128
#define TIR_BENV_MAX_FACTS 256

typedef struct tir_ival_s {
  int64_t lo, hi;
} tir_ival_t;

typedef struct tir_fact_s {
  const tir_expr_t* e;
  int64_t lo, hi;
  /* From a select / && / || operand rather than control flow: it bounds the
   * value of the guarded operand but must not be used for the indices of
   * loads inside it (both select branches may be evaluated). */
  bool value_only;
} tir_fact_t;

/* Linear forms of I64 expressions: sum of k[i] * t[i] + c where the terms t
 * are non-additive sub-expressions (vars, divisions, loads, products of
 * non-constants...), merged by structural equality. ok is false when a
 * coefficient overflowed or there were more than TIR_LIN_MAX terms. */
#define TIR_LIN_MAX 16
typedef struct tir_lin_s {
  int32_t n;
  bool ok;
  int64_t c;
  const tir_expr_t* t[TIR_LIN_MAX];
  int64_t k[TIR_LIN_MAX];
} tir_lin_t;

/* A relation from a comparison of two I64 expressions: the linear form
 * (a - b, divided by the gcd of its coefficients, constant folded into the
 * range) lies in [lo, hi]. Lets `if (i < j)` bound j - i, and a guard on
 * `x*4 + y` bound `x*12 + y*3`. */
#define TIR_BENV_MAX_LFACTS 64
typedef struct tir_lfact_s {
  tir_lin_t L;
  int64_t lo, hi;
  bool value_only;
} tir_lfact_t;

typedef struct tir_benv_s {
  int32_t n_vars;
  const tir_var_t* vars[TIR_BENV_MAX_VARS];
  int64_t lo[TIR_BENV_MAX_VARS], hi[TIR_BENV_MAX_VARS];
  int32_t n_facts;
  tir_fact_t facts[TIR_BENV_MAX_FACTS];
  int32_t n_lfacts;
  tir_lfact_t lfacts[TIR_BENV_MAX_LFACTS];
  bool value_mode; /* facts added now are value_only */
  bool hide_value; /* ignore value_only facts (inside load indices) */
  int32_t depth;   /* > 0 while relations are being applied (no recursion) */
} tir_benv_t;

static inline void tir_benv_init(tir_benv_t* env) {
  env->n_vars = 0;
  env->n_facts = 0;
  env->n_lfacts = 0;
  env->value_mode = false;
  env->hide_value = false;
  env->depth = 0;
}

/* Scopes of facts: take a mark before adding a guard's facts, restore it when
 * leaving the guarded code. */
typedef struct tir_benv_mark_s {
  int32_t n_facts, n_lfacts;
} tir_benv_mark_t;

static inline tir_benv_mark_t tir_benv_mark(const tir_benv_t* env) {
  tir_benv_mark_t m = {env->n_facts, env->n_lfacts};
  return m;
}
static inline void tir_benv_restore(tir_benv_t* env, tir_benv_mark_t m) {
  env->n_facts = m.n_facts;
  env->n_lfacts = m.n_lfacts;
}

static inline bool tir_ival_finite(tir_ival_t v) {
  return v.lo != TIR_NEG_INF && v.hi != TIR_POS_INF;
}

/* Pushes a variable range (innermost wins on lookup). False when full. */
bool tir_benv_push_var(tir_benv_t* env, const tir_var_t* v, int64_t lo, int64_t hi);

/* Interval of an integer or bool expression under |env| (vars not in |env|
 * are unbounded; float-valued nodes are unbounded). Comparisons evaluate to
 * [1,1] / [0,0] when the operand intervals decide them. |env| is used as
 * scratch (select branches push facts) and restored before returning. */
tir_ival_t tir_bounds_eval(tir_benv_t* env, const tir_expr_t* e);

/* Interval helpers (saturating). tir_ival_cmp gives [1,1] when |op| holds
 * for every pair of values, [0,0] when it never holds, else [0,1]. */
tir_ival_t tir_ival_add(tir_ival_t a, tir_ival_t b);
tir_ival_t tir_ival_mul(tir_ival_t a, tir_ival_t b);
tir_ival_t tir_ival_cmp(tir_binop_t op, tir_ival_t a, tir_ival_t b);

void tir_lin_init(tir_lin_t* L);
/* Adds k * t for a term (an INT adds to the constant). */
void tir_lin_term(tir_lin_t* L, const tir_expr_t* t, int64_t k);
/* Adds k * e, decomposing +, - and * by constants of I64 nodes. */
void tir_lin_collect(tir_lin_t* L, const tir_expr_t* e, int64_t k);
/* Same constant and the same terms with the same coefficients, in any
 * order (terms compared structurally). */
bool tir_lin_equal(const tir_lin_t* a, const tir_lin_t* b);
/* The form as an I64 expression built in |c|: terms in order (k = 1 as is,
 * k = -1 subtracted after the first, else multiplied), then the constant;
 * zero terms skipped. NULL on OOM. */
const tir_expr_t* tir_lin_to_expr(tir_ctx_t* c, const tir_lin_t* L);
/* Interval of the form: term intervals, refined by guard facts on sums that
 * the form is an affine image of (a fact `x*4 + y <= 8` bounds x*12 + y*3
 * and x*8 + y*2 + z). */
tir_ival_t tir_lin_bounds(tir_benv_t* env, const tir_lin_t* L);

/* Adds the facts implied by |cond| holding (or, with |negate|, failing):
 * comparisons of integer expressions against bounded expressions, && chains
 * (|| chains when negated), NOT; facts are also propagated backwards through
 * +, -, * by a constant, so `w.o * 16 + w.i < 50` narrows w.o too. Facts that
 * do not fit are dropped (sound: fewer facts only widens intervals). */
void tir_benv_add_cond_facts(tir_benv_t* env, const tir_expr_t* cond, bool negate);

/* True when the facts added since |m| (for |cond|, or its negation) cannot
 * all hold: the guarded code never runs. Sound but incomplete. */
bool tir_benv_infeasible(tir_benv_t* env, tir_benv_mark_t m, const tir_expr_t* cond, bool negate);

/* Structural equality (same vars, buffers, ops, dtypes and immediates). */
bool tir_expr_equal(const tir_expr_t* a, const tir_expr_t* b);
/* True when |needle| occurs (structurally) as a sub-expression of |hay|. */
bool tir_expr_contains(const tir_expr_t* hay, const tir_expr_t* needle);
/* True when |e| references |v|. */
bool tir_expr_uses_var(const tir_expr_t* e, const tir_var_t* v);

/* Floor division / modulo for b != 0 (no overflow checks beyond INT64_MIN/-1). */
int64_t tir_floordiv_i64(int64_t a, int64_t b);
int64_t tir_floormod_i64(int64_t a, int64_t b);

/* Prints |e| into |buf| (NUL-terminated, truncated with "..." when it does not
 * fit); returns |buf|. Variables print as their plain names. */
char* tir_expr_to_str(const tir_expr_t* e, char* buf, size_t n);
/* "B[i, j + 1]" for an access. */
char* tir_access_to_str(const tir_buffer_t* b, const tir_expr_t* const* idx, char* buf,
                        size_t n);

#ifdef __cplusplus
}
#endif
/* "blockIdx.x", "threadIdx.y", ..., "none" (tir_print.c). */
const char* tir_thread_tag_name(tir_thread_tag_t t);

#endif /* KILN_IR_TIR_ANALYSIS_H_ */
