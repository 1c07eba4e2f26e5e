/* Interval analysis of tensor-IR integer expressions.
 *
 * Every node maps to an interval [lo, hi] of int64 where the extremes
 * (TIR_NEG_INF / TIR_POS_INF) mean "unbounded". All arithmetic widens to the
 * infinities on overflow, so the result is always sound: the true value of
 * the expression, for every assignment of the variables inside their ranges,
 * lies in the interval. Precision is the usual interval-arithmetic precision
 * (x - x is [lo-hi, hi-lo], not 0): the simplifier cancels such terms itself
 * before asking for bounds.
 *
 * Facts (see tir_analysis.h) refine the interval of any sub-expression that
 * an enclosing guard tested; they are found by structural equality, which is
 * cheap because guards and indices are usually built by the same code.
 * Guards are also pushed backwards (x + c < n bounds x; x // 4 < 2 bounds x)
 * and kept as linear relations, applied to sums and variables: for a
 * relation F in [lo, hi] and an expression E sharing a term with it,
 * q*E = p*F + (q*E - p*F) bounds E by the remainder's interval. Relations are
 * applied one level deep (env->depth) so evaluation never recurses on them.
 */
#include <stdlib.h>
#include <string.h>

#include "ir/tir_analysis.h"
#include "ir/tir_visit.h"

#define NEG TIR_NEG_INF
#define POS TIR_POS_INF

static tir_ival_t iv(int64_t lo, int64_t hi) {
  tir_ival_t r = {lo, hi};
  return r;
}
static tir_ival_t unbounded(void) { return iv(NEG, POS); }

/* An overflowed computation may leave lo == +inf or hi == -inf; widen. */
static tir_ival_t fix(tir_ival_t r) {
  if (r.lo == POS) r.lo = NEG;
  if (r.hi == NEG) r.hi = POS;
  return r;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Bitwise ops on non-negative operands stay non-negative: a & b is at most
 * the smaller operand, a | b and a ^ b set no bit above the larger one's
 * highest. Anything else (a negative operand, u64 bit patterns) is
 * unbounded. */
static tir_ival_t ival_bitwise(tir_binop_t op, kiln_dtype_t t, tir_ival_t a, tir_ival_t b) {
  if (t == KILN_DTYPE_U64 || a.lo < 0 || b.lo < 0) return unbounded();
  if (op == TIR_BAND) return iv(0, min64(a.hi, b.hi));
  uint64_t m = (uint64_t)max64(a.hi, b.hi);
  m |= m >> 1, m |= m >> 2, m |= m >> 4, m |= m >> 8, m |= m >> 16, m |= m >> 32;
  return iv(0, (int64_t)m);
}

int64_t tir_floordiv_i64(int64_t a, int64_t b) {
  if (b == -1) return a == INT64_MIN ? INT64_MIN : -a;
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t tir_floormod_i64(int64_t a, int64_t b) {
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

/* Lower-bound and upper-bound flavours of + and -: an infinity (or an
 * overflow) on the side being computed makes that side unbounded. */
static int64_t add_lo(int64_t a, int64_t b) {
  int64_t r;
  if (a == NEG || b == NEG || a == POS || b == POS) return NEG;
  return __builtin_add_overflow(a, b, &r) ? NEG : r;
}
static int64_t add_hi(int64_t a, int64_t b) {
  int64_t r;
  if (a == NEG || b == NEG || a == POS || b == POS) return POS;
  return __builtin_add_overflow(a, b, &r) ? POS : r;
}
static int64_t sub_lo(int64_t a, int64_t b) {
  int64_t r;
  if (a == NEG || b == NEG || a == POS || b == POS) return NEG;
  return __builtin_sub_overflow(a, b, &r) ? NEG : r;
}
static int64_t sub_hi(int64_t a, int64_t b) {
  int64_t r;
  if (a == NEG || b == NEG || a == POS || b == POS) return POS;
  return __builtin_sub_overflow(a, b, &r) ? POS : r;
}

static int sgn(int64_t a) { return a > 0 ? 1 : (a < 0 ? -1 : 0); }
static int64_t neg_x(int64_t a) { return a == NEG ? POS : (a == POS ? NEG : -a); }

/* Extended product: 0 * inf is 0 (the finite factor really is 0). */
static int64_t mul_x(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  int s = sgn(a) * sgn(b);
  int64_t r;
  if (a == NEG || a == POS || b == NEG || b == POS || __builtin_mul_overflow(a, b, &r))
    return s > 0 ? POS : NEG;
  return r;
}

static tir_ival_t corners(int64_t c0, int64_t c1, int64_t c2, int64_t c3) {
  return fix(iv(min64(min64(c0, c1), min64(c2, c3)), max64(max64(c0, c1), max64(c2, c3))));
}

static tir_ival_t ival_mul(tir_ival_t a, tir_ival_t b) {
  return corners(mul_x(a.lo, b.lo), mul_x(a.lo, b.hi), mul_x(a.hi, b.lo), mul_x(a.hi, b.hi));
}

/* Floor / truncating division with an infinite dividend and a finite
 * non-zero divisor. */
static int64_t fdiv_x(int64_t a, int64_t b) {
  if (a == NEG) return b > 0 ? NEG : POS;
  if (a == POS) return b > 0 ? POS : NEG;
  return tir_floordiv_i64(a, b);
}
static int64_t tdiv_x(int64_t a, int64_t b) {
  if (a == NEG) return b > 0 ? NEG : POS;
  if (a == POS) return b > 0 ? POS : NEG;
  if (b == -1) return -a; /* a != INT64_MIN: that is NEG */
  return a / b;
}

/* Division whose divisor excludes 0. Both floor and truncating division are
 * monotonic in each argument separately, so the extremes are at corners;
 * an unbounded divisor (|b| >= 1) only shrinks magnitudes. */
static tir_ival_t ival_div(tir_ival_t a, tir_ival_t b, bool floor_div) {
  if (b.lo > b.hi || a.lo > a.hi) return iv(1, 0); /* contradictory facts: dead code */
  if (b.lo <= 0 && b.hi >= 0) return unbounded();
  if (!tir_ival_finite(b)) {
    /* floor(a/b) == floor(-a/-b), same for truncation: make b >= 1. */
    if (b.hi < 0) a = iv(neg_x(a.hi), neg_x(a.lo));
    int64_t lo = min64(a.lo, 0);
    int64_t hi = floor_div ? (a.hi >= 0 ? a.hi : -1) : max64(a.hi, 0);
    return fix(iv(lo, hi));
  }
  int64_t (*d)(int64_t, int64_t) = floor_div ? fdiv_x : tdiv_x;
  return corners(d(a.lo, b.lo), d(a.lo, b.hi), d(a.hi, b.lo), d(a.hi, b.hi));
}

static tir_ival_t ival_floormod(tir_ival_t a, tir_ival_t b) {
  if (b.lo > 0) {
    if (b.lo == b.hi && tir_ival_finite(a) &&
        tir_floordiv_i64(a.lo, b.lo) == tir_floordiv_i64(a.hi, b.lo))
      return iv(tir_floormod_i64(a.lo, b.lo), tir_floormod_i64(a.hi, b.lo));
    if (a.lo >= 0 && a.hi < b.lo) return a;
    int64_t hi = b.hi == POS ? POS : b.hi - 1;
    if (a.lo >= 0) hi = min64(hi, a.hi);
    return iv(0, hi);
  }
  if (b.hi < 0) {
    if (a.hi <= 0 && a.lo > b.hi) return a;
    int64_t lo = b.lo == NEG ? NEG : b.lo + 1;
    if (a.hi <= 0) lo = max64(lo, a.lo);
    return iv(lo, 0);
  }
  return unbounded();
}

static tir_ival_t dtype_range(kiln_dtype_t t) {
  switch (t) {
    case KILN_DTYPE_BOOL: return iv(0, 1);
    case KILN_DTYPE_U8: return iv(0, 255);
    case KILN_DTYPE_I8: return iv(-128, 127);
    case KILN_DTYPE_I32: return iv(INT32_MIN, INT32_MAX);
    case KILN_DTYPE_I16: return iv(INT16_MIN, INT16_MAX);
    case KILN_DTYPE_U16: return iv(0, UINT16_MAX);
    case KILN_DTYPE_U32: return iv(0, UINT32_MAX);
    default: return unbounded();
  }
}

static bool is_intlike(kiln_dtype_t t) { return kiln_dtype_is_int(t) || t == KILN_DTYPE_BOOL; }

static tir_ival_t clamp_bool(tir_ival_t r) {
  int64_t lo = r.lo >= 1 ? 1 : 0, hi = r.hi <= 0 ? 0 : 1;
  if (r.lo > 0 || r.hi < 0) lo = hi = 1; /* every value non-zero */
  return iv(lo, hi);
}

tir_ival_t tir_ival_add(tir_ival_t a, tir_ival_t b) {
  return iv(add_lo(a.lo, b.lo), add_hi(a.hi, b.hi));
}
tir_ival_t tir_ival_mul(tir_ival_t a, tir_ival_t b) { return ival_mul(a, b); }

tir_ival_t tir_ival_cmp(tir_binop_t op, tir_ival_t a, tir_ival_t b) {
  bool t = false, f = false;
  switch (op) {
    case TIR_LT: t = a.hi < b.lo; f = a.lo >= b.hi; break;
    case TIR_LE: t = a.hi <= b.lo; f = a.lo > b.hi; break;
    case TIR_GT: t = a.lo > b.hi; f = a.hi <= b.lo; break;
    case TIR_GE: t = a.lo >= b.hi; f = a.hi < b.lo; break;
    case TIR_EQ:
      t = a.lo == a.hi && b.lo == b.hi && a.lo == b.lo && tir_ival_finite(a);
      f = a.hi < b.lo || b.hi < a.lo;
      break;
    case TIR_NE:
      f = a.lo == a.hi && b.lo == b.hi && a.lo == b.lo && tir_ival_finite(a);
      t = a.hi < b.lo || b.hi < a.lo;
      break;
    default: break;
  }
  return t ? iv(1, 1) : (f ? iv(0, 0) : iv(0, 1));
}

bool tir_benv_push_var(tir_benv_t* env, const tir_var_t* v, int64_t lo, int64_t hi) {
  if (env->n_vars >= TIR_BENV_MAX_VARS) return false;
  env->vars[env->n_vars] = v;
  env->lo[env->n_vars] = lo;
  env->hi[env->n_vars] = hi;
  env->n_vars++;
  return true;
}

static tir_ival_t eval_node(tir_benv_t* env, const tir_expr_t* e);
static bool is_additive(const tir_expr_t* e);
static void lin_compact(tir_lin_t* L);
static void add_lin_fact(tir_benv_t* env, const tir_lin_t* D0, int64_t lo, int64_t hi);
static void push_fact(tir_benv_t* env, const tir_expr_t* x, int64_t lo, int64_t hi, int depth);

static tir_ival_t affine_facts(tir_benv_t* env, const tir_lin_t* E, tir_ival_t r);

tir_ival_t tir_bounds_eval(tir_benv_t* env, const tir_expr_t* e) {
  tir_ival_t r = eval_node(env, e);
  if (env->n_facts == 0 && env->n_lfacts == 0) return r;
  for (int32_t i = 0; i < env->n_facts; ++i) {
    const tir_fact_t* f = &env->facts[i];
    if (f->value_only && env->hide_value) continue;
    /* Contradictory facts: the code they guard never runs. */
    if (f->lo > f->hi) return iv(1, 0);
    if (f->e->kind != e->kind || !tir_expr_equal(f->e, e)) continue;
    r.lo = max64(r.lo, f->lo);
    r.hi = min64(r.hi, f->hi);
  }
  if (env->n_lfacts > 0 && env->depth == 0 && r.lo <= r.hi &&
      (e->kind == TIR_VARREF || is_additive(e))) {
    tir_lin_t L;
    tir_lin_init(&L);
    tir_lin_collect(&L, e, 1);
    if (L.ok && L.n >= 1) r = affine_facts(env, &L, r);
  }
  return r;
}

static tir_ival_t eval_node(tir_benv_t* env, const tir_expr_t* e) {
  switch (e->kind) {
    case TIR_INT: return iv(e->u.i, e->u.i);
    case TIR_FLOAT: return unbounded();
    case TIR_VARREF:
      for (int32_t i = env->n_vars - 1; i >= 0; --i)
        if (env->vars[i] == e->u.var) return iv(env->lo[i], env->hi[i]);
      return unbounded();
    case TIR_LOAD: return dtype_range(e->dtype);
    case TIR_BINARY: {
      tir_binop_t op = e->u.bin.op;
      const tir_expr_t* ea = e->u.bin.a;
      const tir_expr_t* eb = e->u.bin.b;
      if (!is_intlike(ea->dtype) || !is_intlike(eb->dtype))
        return e->dtype == KILN_DTYPE_BOOL ? iv(0, 1) : unbounded();
      tir_ival_t a = tir_bounds_eval(env, ea);
      tir_ival_t b = tir_bounds_eval(env, eb);
      tir_ival_t r;
      /* An empty operand (contradictory facts) means dead code: stay empty. */
      if (a.lo > a.hi || b.lo > b.hi) return iv(1, 0);
      switch (op) {
        case TIR_ADD: r = iv(add_lo(a.lo, b.lo), add_hi(a.hi, b.hi)); break;
        case TIR_SUB: r = iv(sub_lo(a.lo, b.hi), sub_hi(a.hi, b.lo)); break;
        case TIR_MUL: r = ival_mul(a, b); break;
        case TIR_DIV: r = ival_div(a, b, false); break;
        case TIR_FLOORDIV: r = ival_div(a, b, true); break;
        case TIR_FLOORMOD: r = ival_floormod(a, b); break;
        case TIR_MIN: r = iv(min64(a.lo, b.lo), min64(a.hi, b.hi)); break;
        case TIR_MAX: r = iv(max64(a.lo, b.lo), max64(a.hi, b.hi)); break;
        case TIR_AND:
          a = clamp_bool(a), b = clamp_bool(b);
          return iv(a.lo && b.lo, a.hi && b.hi);
        case TIR_OR:
          a = clamp_bool(a), b = clamp_bool(b);
          return iv(a.lo || b.lo, a.hi || b.hi);
        case TIR_BAND:
        case TIR_BOR:
        case TIR_BXOR:
          return ival_bitwise(op, ea->dtype, a, b);
        default: {
          tir_ival_t c = tir_ival_cmp(op, a, b);
          if (c.lo == c.hi || ea->dtype != KILN_DTYPE_I64 || env->depth) return c;
          /* Decide on a - b: shared terms cancel (x + 1 > x) and relations
           * between the operands apply. */
          tir_lin_t D;
          tir_lin_init(&D);
          tir_lin_collect(&D, ea, 1);
          tir_lin_collect(&D, eb, -1);
          lin_compact(&D);
          if (!D.ok) return c;
          tir_ival_t d = tir_lin_bounds(env, &D);
          if (d.lo > d.hi) return d;
          return tir_ival_cmp(op, d, iv(0, 0));
        }
      }
      r = fix(r);
      /* Narrow ints wrap: a result outside the type's range means the
       * interval says nothing. */
      if (e->dtype != KILN_DTYPE_I64) {
        tir_ival_t t = dtype_range(e->dtype);
        if (r.lo < t.lo || r.hi > t.hi) r = t;
      }
      return r;
    }
    case TIR_SELECT: {
      tir_ival_t c = tir_bounds_eval(env, e->u.sel.cond);
      if (c.lo > c.hi) return c;
      if (c.lo >= 1 || c.hi < 0) return tir_bounds_eval(env, e->u.sel.t);
      if (c.lo == 0 && c.hi == 0) return tir_bounds_eval(env, e->u.sel.f);
      if (!is_intlike(e->dtype)) return unbounded();
      /* The branch value only matters when the condition (or its negation)
       * holds, so each branch is bounded under that fact. */
      tir_benv_mark_t mark = tir_benv_mark(env);
      bool mode = env->value_mode;
      env->value_mode = true;
      tir_benv_add_cond_facts(env, e->u.sel.cond, false);
      tir_ival_t t = tir_benv_infeasible(env, mark, e->u.sel.cond, false)
                         ? iv(1, 0)
                         : tir_bounds_eval(env, e->u.sel.t);
      tir_benv_restore(env, mark);
      tir_benv_add_cond_facts(env, e->u.sel.cond, true);
      tir_ival_t f = tir_benv_infeasible(env, mark, e->u.sel.cond, true)
                         ? iv(1, 0)
                         : tir_bounds_eval(env, e->u.sel.f);
      tir_benv_restore(env, mark);
      env->value_mode = mode;
      /* An empty branch (contradictory facts) contributes nothing. */
      if (t.lo > t.hi) return f;
      if (f.lo > f.hi) return t;
      return iv(min64(t.lo, f.lo), max64(t.hi, f.hi));
    }
    case TIR_CAST: {
      const tir_expr_t* v = e->u.cast.value;
      if (!is_intlike(e->dtype)) return unbounded();
      if (!is_intlike(v->dtype)) return dtype_range(e->dtype);
      tir_ival_t r = tir_bounds_eval(env, v);
      if (r.lo > r.hi) return r;
      if (e->dtype == KILN_DTYPE_BOOL) return clamp_bool(r);
      tir_ival_t t = dtype_range(e->dtype);
      return (r.lo < t.lo || r.hi > t.hi) ? t : r;
    }
    case TIR_CALL: {
      if (!is_intlike(e->dtype)) return unbounded();
      tir_ival_t a = tir_bounds_eval(env, e->u.call.args[0]);
      tir_ival_t r;
      if (a.lo > a.hi) return a;
      switch (e->u.call.fn) {
        case TIR_NEG: r = iv(neg_x(a.hi), neg_x(a.lo)); break;
        case TIR_FABS:
          if (a.lo >= 0) r = a;
          else if (a.hi <= 0) r = iv(neg_x(a.hi), neg_x(a.lo));
          else r = iv(0, max64(neg_x(a.lo), a.hi));
          break;
        case TIR_NOT:
          a = clamp_bool(a);
          return iv(1 - a.hi, 1 - a.lo);
        default: return dtype_range(e->dtype);
      }
      if (e->dtype != KILN_DTYPE_I64) {
        tir_ival_t t = dtype_range(e->dtype);
        if (r.lo < t.lo || r.hi > t.hi) r = t;
      }
      return r;
    }
  }
  return unbounded();
}

/* ---- linear forms --------------------------------------------------------- */

void tir_lin_init(tir_lin_t* L) {
  L->n = 0;
  L->ok = true;
  L->c = 0;
}

void tir_lin_term(tir_lin_t* L, const tir_expr_t* t, int64_t k) {
  if (!L->ok || k == 0) return;
  if (t->kind == TIR_INT) {
    int64_t p;
    if (__builtin_mul_overflow(t->u.i, k, &p) || __builtin_add_overflow(L->c, p, &L->c))
      L->ok = false;
    return;
  }
  for (int32_t i = 0; i < L->n; ++i)
    if (tir_expr_equal(L->t[i], t)) {
      if (__builtin_add_overflow(L->k[i], k, &L->k[i])) L->ok = false;
      return;
    }
  if (L->n == TIR_LIN_MAX) {
    L->ok = false;
    return;
  }
  L->t[L->n] = t;
  L->k[L->n] = k;
  L->n++;
}

void tir_lin_collect(tir_lin_t* L, const tir_expr_t* e, int64_t k) {
  if (!L->ok) return;
  if (e->kind == TIR_BINARY && e->dtype == KILN_DTYPE_I64) {
    const tir_expr_t* a = e->u.bin.a;
    const tir_expr_t* b = e->u.bin.b;
    int64_t k2;
    switch (e->u.bin.op) {
      case TIR_ADD:
        tir_lin_collect(L, a, k);
        tir_lin_collect(L, b, k);
        return;
      case TIR_SUB:
        if (k == INT64_MIN) break;
        tir_lin_collect(L, a, k);
        tir_lin_collect(L, b, -k);
        return;
      case TIR_MUL:
        if (b->kind == TIR_INT && !__builtin_mul_overflow(k, b->u.i, &k2)) {
          tir_lin_collect(L, a, k2);
          return;
        }
        if (a->kind == TIR_INT && !__builtin_mul_overflow(k, a->u.i, &k2)) {
          tir_lin_collect(L, b, k2);
          return;
        }
        break;
      default: break;
    }
  }
  tir_lin_term(L, e, k);
}

bool tir_lin_equal(const tir_lin_t* a, const tir_lin_t* b) {
  if (a->c != b->c || a->n != b->n) return false;
  for (int32_t i = 0; i < a->n; ++i) {
    int32_t j = 0;
    while (j < b->n && !tir_expr_equal(a->t[i], b->t[j])) ++j;
    if (j == b->n || a->k[i] != b->k[j]) return false;
  }
  return true;
}

const tir_expr_t* tir_lin_to_expr(tir_ctx_t* c, const tir_lin_t* L) {
  const tir_expr_t* e = NULL;
  for (int32_t i = 0; i < L->n; ++i) {
    const tir_expr_t* t = L->t[i];
    int64_t k = L->k[i];
    if (k == 0) continue;
    if (k == -1 && e) {
      e = tir_sub(c, e, t);
      continue;
    }
    if (k != 1) t = tir_mul(c, t, tir_int(c, k));
    e = e ? tir_add(c, e, t) : t;
  }
  if (!e) return tir_int(c, L->c);
  if (L->c > 0) return tir_add(c, e, tir_int(c, L->c));
  if (L->c < 0) return tir_sub(c, e, tir_int(c, -L->c));
  return e;
}

/* Drops terms whose coefficients cancelled to 0. */
static void lin_compact(tir_lin_t* L) {
  int32_t k = 0;
  for (int32_t i = 0; i < L->n; ++i)
    if (L->k[i] != 0) {
      L->t[k] = L->t[i];
      L->k[k] = L->k[i];
      k++;
    }
  L->n = k;
}

static bool is_additive(const tir_expr_t* e) {
  if (e->kind != TIR_BINARY || e->dtype != KILN_DTYPE_I64) return false;
  tir_binop_t op = e->u.bin.op;
  return op == TIR_ADD || op == TIR_SUB ||
         (op == TIR_MUL && (e->u.bin.a->kind == TIR_INT || e->u.bin.b->kind == TIR_INT));
}

static int64_t gcd_pos(int64_t a, int64_t b) {
  a = a < 0 ? -a : a;
  b = b < 0 ? -b : b;
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* Sum of the term intervals (no facts about sums). */
static tir_ival_t lin_terms(tir_benv_t* env, const tir_lin_t* L) {
  tir_ival_t r = iv(L->c, L->c);
  for (int32_t i = 0; i < L->n; ++i)
    r = tir_ival_add(r, ival_mul(tir_bounds_eval(env, L->t[i]), iv(L->k[i], L->k[i])));
  return r;
}

/* Relations: for each relation F in [lo, hi] sharing a term t with E, with
 * p/q the ratio of t's coefficients, q*E = p*F + (q*E - p*F) where t cancels
 * in the remainder; r is narrowed by every such bound. */
static tir_ival_t affine_facts_g(tir_benv_t* env, const tir_lin_t* E, tir_ival_t r);

/* E = g*E' + c with g the gcd of its coefficients: bounding the integer E'
 * rounds better (x*4 + y*4 <= 7 means x + y <= 1, so E <= 4). */
static tir_ival_t affine_facts(tir_benv_t* env, const tir_lin_t* E0, tir_ival_t r) {
  tir_lin_t E = *E0;
  lin_compact(&E);
  int64_t g = 0;
  for (int32_t i = 0; i < E.n; ++i) g = gcd_pos(g, E.k[i] == INT64_MIN ? 1 : E.k[i]);
  if (g <= 1) return affine_facts_g(env, &E, r);
  int64_t c = E.c;
  for (int32_t i = 0; i < E.n; ++i) E.k[i] /= g;
  E.c = 0;
  tir_ival_t e = affine_facts_g(env, &E, iv(NEG, POS));
  e = tir_ival_add(ival_mul(e, iv(g, g)), iv(c, c));
  r.lo = max64(r.lo, e.lo);
  r.hi = min64(r.hi, e.hi);
  return r;
}

static tir_ival_t affine_facts_g(tir_benv_t* env, const tir_lin_t* E, tir_ival_t r) {
  env->depth++;
  for (int32_t f = 0; f < env->n_lfacts; ++f) {
    const tir_lfact_t* lf = &env->lfacts[f];
    if (lf->value_only && env->hide_value) continue;
    if (lf->lo > lf->hi) {
      r = iv(1, 0);
      break;
    }
    const tir_lin_t* F = &lf->L;
    /* Pair a term of F with the same term of E to fix the ratio p/q. */
    int32_t j = E->n, fi = 0;
    for (; fi < F->n && j == E->n; ++fi)
      for (j = 0; j < E->n && !(E->k[j] != 0 && tir_expr_equal(E->t[j], F->t[fi])); ++j) {
      }
    if (j == E->n) continue;
    --fi;
    if (E->k[j] == INT64_MIN || F->k[fi] == INT64_MIN) continue;
    int64_t h = gcd_pos(E->k[j], F->k[fi]), p = E->k[j] / h, q = F->k[fi] / h;
    if (q < 0) p = -p, q = -q;
    /* D = q*E - p*F */
    tir_lin_t D;
    tir_lin_init(&D);
    int64_t m;
    for (int32_t i = 0; i < E->n && D.ok; ++i) {
      if (__builtin_mul_overflow(E->k[i], q, &m)) D.ok = false;
      else tir_lin_term(&D, E->t[i], m);
    }
    if (__builtin_mul_overflow(E->c, q, &m) || __builtin_add_overflow(D.c, m, &D.c)) D.ok = false;
    for (int32_t i = 0; i < F->n && D.ok; ++i) {
      if (__builtin_mul_overflow(F->k[i], -p, &m)) D.ok = false;
      else tir_lin_term(&D, F->t[i], m);
    }
    if (!D.ok) continue;
    lin_compact(&D);
    /* Sound for any D; useful when D's terms are bounded (often fewer). */
    tir_ival_t qe = tir_ival_add(ival_mul(iv(lf->lo, lf->hi), iv(p, p)), lin_terms(env, &D));
    if (qe.lo > qe.hi) {
      r = iv(1, 0);
      break;
    }
    /* E in [ceil(lo / q), floor(hi / q)] */
    int64_t lo = qe.lo == NEG ? NEG : -tir_floordiv_i64(-qe.lo, q);
    int64_t hi = qe.hi == POS ? POS : tir_floordiv_i64(qe.hi, q);
    r.lo = max64(r.lo, lo);
    r.hi = min64(r.hi, hi);
  }
  env->depth--;
  return r;
}

tir_ival_t tir_lin_bounds(tir_benv_t* env, const tir_lin_t* L) {
  tir_ival_t r = lin_terms(env, L);
  return env->n_lfacts > 0 && env->depth == 0 && L->n >= 1 ? affine_facts(env, L, r) : r;
}

/* ---- facts ------------------------------------------------------------ */

static int64_t cdiv_x(int64_t a, int64_t k) { /* ceil(a / k), k > 0 */
  if (a == NEG || a == POS) return a;
  return -tir_floordiv_i64(-a, k);
}

/* Records "x in [lo, hi]" and pushes the range backwards through +, - and
 * multiplication by constants (bounded depth keeps it linear). */
static void push_fact(tir_benv_t* env, const tir_expr_t* x, int64_t lo, int64_t hi, int depth) {
  if (lo == NEG && hi == POS) return;
  if (x->kind == TIR_INT || !is_intlike(x->dtype)) return;
  if (env->n_facts >= TIR_BENV_MAX_FACTS) return;
  if (is_additive(x)) {
    /* Also as a relation (its gcd normalisation also finds empty ranges:
     * x*8 + y*2 == 1 never holds). */
    tir_lin_t L;
    tir_lin_init(&L);
    tir_lin_collect(&L, x, 1);
    int32_t before = env->n_lfacts;
    add_lin_fact(env, &L, lo, hi);
    if (env->n_lfacts > before && env->lfacts[before].lo > env->lfacts[before].hi) lo = 1, hi = 0;
  }
  tir_fact_t* f = &env->facts[env->n_facts++];
  f->e = x;
  f->lo = lo;
  f->hi = hi;
  f->value_only = env->value_mode;
  if (depth >= 4 || x->kind != TIR_BINARY || x->dtype != KILN_DTYPE_I64) {
    if (depth < 4 && x->kind == TIR_CAST && is_intlike(x->u.cast.value->dtype)) {
      /* Widening casts preserve the value. */
      tir_ival_t s = dtype_range(x->u.cast.value->dtype), t = dtype_range(x->dtype);
      if (s.lo >= t.lo && s.hi <= t.hi) push_fact(env, x->u.cast.value, lo, hi, depth + 1);
    }
    return;
  }
  const tir_expr_t* a = x->u.bin.a;
  const tir_expr_t* b = x->u.bin.b;
  switch (x->u.bin.op) {
    case TIR_ADD: {
      tir_ival_t av = tir_bounds_eval(env, a), bv = tir_bounds_eval(env, b);
      push_fact(env, a, sub_lo(lo, bv.hi), sub_hi(hi, bv.lo), depth + 1);
      push_fact(env, b, sub_lo(lo, av.hi), sub_hi(hi, av.lo), depth + 1);
      break;
    }
    case TIR_SUB: {
      tir_ival_t av = tir_bounds_eval(env, a), bv = tir_bounds_eval(env, b);
      push_fact(env, a, add_lo(lo, bv.lo), add_hi(hi, bv.hi), depth + 1);
      push_fact(env, b, sub_lo(av.lo, hi), sub_hi(av.hi, lo), depth + 1);
      break;
    }
    case TIR_MUL: {
      const tir_expr_t* y = a;
      int64_t k = 0;
      if (b->kind == TIR_INT) k = b->u.i;
      else if (a->kind == TIR_INT) k = a->u.i, y = b;
      if (k > 0) push_fact(env, y, cdiv_x(lo, k), fdiv_x(hi, k), depth + 1);
      else if (k < 0 && k != INT64_MIN)
        push_fact(env, y, cdiv_x(neg_x(hi), -k), fdiv_x(neg_x(lo), -k), depth + 1);
      break;
    }
    case TIR_FLOORDIV:
      /* y // k in [lo, hi] (k > 0): y in [lo*k, hi*k + k - 1] */
      if (b->kind == TIR_INT && b->u.i > 0) {
        int64_t k = b->u.i;
        int64_t l2 = mul_x(lo, k), h2 = mul_x(hi, k);
        if (l2 == POS || lo == NEG) l2 = NEG;
        if (h2 != NEG && h2 != POS && hi != POS) h2 = add_hi(h2, k - 1);
        else h2 = POS;
        push_fact(env, a, l2, h2, depth + 1);
      }
      break;
    default: break;
  }
}

/* Records "D in [lo, hi]" for a linear form of >= 2 terms, normalised by the
 * gcd of its coefficients (with the constant folded into the range). */
static void add_lin_fact(tir_benv_t* env, const tir_lin_t* D0, int64_t lo, int64_t hi) {
  if (env->n_lfacts >= TIR_BENV_MAX_LFACTS || (lo == NEG && hi == POS)) return;
  tir_lfact_t* lf = &env->lfacts[env->n_lfacts];
  tir_lin_t* D = &lf->L;
  *D = *D0;
  lin_compact(D);
  if (!D->ok) return;
  if (D->n == 0) {
    /* Terms cancelled (y - y < 0): a constant either in range or not. */
    if ((lo != NEG && D->c < lo) || (hi != POS && D->c > hi)) {
      lf->lo = 1, lf->hi = 0, lf->value_only = env->value_mode;
      env->n_lfacts++;
    }
    return;
  }
  if (D->n == 1) {
    /* k*t + c in [lo, hi]: a fact on t (y >= y*3 gives -2y >= 0: y <= 0). */
    int64_t k = D->k[0], l2 = sub_lo(lo, D->c), h2 = sub_hi(hi, D->c);
    if (k == INT64_MIN) return;
    if (k < 0) {
      int64_t t = l2;
      l2 = neg_x(h2), h2 = neg_x(t), k = -k;
    }
    push_fact(env, D->t[0], l2 == NEG ? NEG : -tir_floordiv_i64(-l2, k),
              h2 == POS ? POS : tir_floordiv_i64(h2, k), 2);
    return;
  }
  /* D = g*D' + c: D' in [ceil((lo-c)/g), floor((hi-c)/g)] */
  int64_t g = 0;
  for (int32_t i = 0; i < D->n; ++i) g = gcd_pos(g, D->k[i] == INT64_MIN ? 1 : D->k[i]);
  if (g < 1) g = 1;
  lo = sub_lo(lo, D->c);
  hi = sub_hi(hi, D->c);
  lf->lo = lo == NEG ? NEG : -tir_floordiv_i64(-lo, g);
  lf->hi = hi == POS ? POS : tir_floordiv_i64(hi, g);
  for (int32_t i = 0; i < D->n; ++i) D->k[i] /= g;
  D->c = 0;
  lf->value_only = env->value_mode;
  env->n_lfacts++;
}

/* Records "a op b" as a relation on the linear form a - b. */
static void add_lfact(tir_benv_t* env, const tir_expr_t* a, tir_binop_t op, const tir_expr_t* b) {
  tir_lin_t D;
  tir_lin_init(&D);
  tir_lin_collect(&D, a, 1);
  tir_lin_collect(&D, b, -1);
  int64_t lo = NEG, hi = POS;
  switch (op) {
    case TIR_LT: hi = -1; break;
    case TIR_LE: hi = 0; break;
    case TIR_GT: lo = 1; break;
    case TIR_GE: lo = 0; break;
    case TIR_EQ: lo = hi = 0; break;
    default: return;
  }
  add_lin_fact(env, &D, lo, hi);
}

static tir_binop_t invert_cmp(tir_binop_t op) {
  switch (op) {
    case TIR_LT: return TIR_GE;
    case TIR_LE: return TIR_GT;
    case TIR_GT: return TIR_LE;
    case TIR_GE: return TIR_LT;
    case TIR_EQ: return TIR_NE;
    default: return TIR_EQ;
  }
}

static tir_binop_t mirror_cmp(tir_binop_t op) {
  switch (op) {
    case TIR_LT: return TIR_GT;
    case TIR_LE: return TIR_GE;
    case TIR_GT: return TIR_LT;
    case TIR_GE: return TIR_LE;
    default: return op;
  }
}

/* "x op y" holds: bound x by y's interval. */
static void add_cmp(tir_benv_t* env, const tir_expr_t* x, tir_binop_t op, const tir_expr_t* y) {
  if (x->kind == TIR_INT) return;
  tir_ival_t yv = tir_bounds_eval(env, y);
  switch (op) {
    case TIR_LT:
      if (yv.hi == NEG) push_fact(env, x, 1, 0, 0); /* x < INT64_MIN: never */
      else if (yv.hi != POS) push_fact(env, x, NEG, yv.hi - 1, 0);
      break;
    case TIR_LE: push_fact(env, x, NEG, yv.hi, 0); break;
    case TIR_GT:
      if (yv.lo == POS) push_fact(env, x, 1, 0, 0); /* x > INT64_MAX: never */
      else if (yv.lo != NEG) push_fact(env, x, yv.lo + 1, POS, 0);
      break;
    case TIR_GE: push_fact(env, x, yv.lo, POS, 0); break;
    case TIR_EQ: push_fact(env, x, yv.lo, yv.hi, 0); break;
    default: break;
  }
}

void tir_benv_add_cond_facts(tir_benv_t* env, const tir_expr_t* cond, bool negate) {
  if (!cond) return;
  if (cond->kind == TIR_CALL && cond->u.call.fn == TIR_NOT) {
    tir_benv_add_cond_facts(env, cond->u.call.args[0], !negate);
    return;
  }
  if (cond->kind == TIR_BINARY) {
    tir_binop_t op = cond->u.bin.op;
    const tir_expr_t* a = cond->u.bin.a;
    const tir_expr_t* b = cond->u.bin.b;
    if ((op == TIR_AND && !negate) || (op == TIR_OR && negate)) {
      tir_benv_add_cond_facts(env, a, negate);
      tir_benv_add_cond_facts(env, b, negate);
      return;
    }
    if (op >= TIR_EQ && op <= TIR_GE && is_intlike(a->dtype) && is_intlike(b->dtype)) {
      if (negate) op = invert_cmp(op);
      if (op != TIR_NE && a->dtype == KILN_DTYPE_I64) add_lfact(env, a, op, b);
      if (op != TIR_NE) {
        /* Two rounds: facts found in the first (x == 3 from 4x + y == 12)
         * sharpen the second (then y == 0). */
        for (int round = 0; round < 2; ++round) {
          int32_t before = env->n_facts;
          add_cmp(env, a, op, b);
          add_cmp(env, b, mirror_cmp(op), a);
          if (env->n_facts == before) break;
        }
      }
    }
  }
  /* The condition itself is known (lets nested identical tests fold). */
  if (cond->dtype == KILN_DTYPE_BOOL && cond->kind != TIR_INT &&
      env->n_facts < TIR_BENV_MAX_FACTS) {
    tir_fact_t* f = &env->facts[env->n_facts++];
    f->e = cond;
    f->lo = f->hi = negate ? 0 : 1;
    f->value_only = env->value_mode;
  }
}

/* The value of a condition from its comparisons (not from the facts about
 * the condition itself, which say it holds). */
static tir_ival_t cond_natural(tir_benv_t* env, const tir_expr_t* c) {
  if (c->kind == TIR_CALL && c->u.call.fn == TIR_NOT) {
    tir_ival_t a = cond_natural(env, c->u.call.args[0]);
    return a.lo > a.hi ? a : iv(1 - a.hi, 1 - a.lo);
  }
  if (c->kind == TIR_BINARY && (c->u.bin.op == TIR_AND || c->u.bin.op == TIR_OR)) {
    tir_ival_t a = cond_natural(env, c->u.bin.a);
    tir_ival_t b = cond_natural(env, c->u.bin.b);
    if (a.lo > a.hi) return a;
    if (b.lo > b.hi) return b;
    a = clamp_bool(a), b = clamp_bool(b);
    if (c->u.bin.op == TIR_AND) return iv(a.lo && b.lo, a.hi && b.hi);
    return iv(a.lo || b.lo, a.hi || b.hi);
  }
  return eval_node(env, c);
}

bool tir_benv_infeasible(tir_benv_t* env, tir_benv_mark_t m, const tir_expr_t* cond,
                         bool negate) {
  for (int32_t i = m.n_facts; i < env->n_facts; ++i) {
    const tir_fact_t* f = &env->facts[i];
    if (f->lo > f->hi) return true;
    if (f->e->kind == TIR_VARREF) {
      tir_ival_t v = tir_bounds_eval(env, f->e);
      if (v.lo > v.hi) return true;
    }
  }
  for (int32_t i = m.n_lfacts; i < env->n_lfacts; ++i)
    if (env->lfacts[i].lo > env->lfacts[i].hi) return true;
  tir_ival_t c = cond_natural(env, cond);
  if (c.lo > c.hi) return true;
  return negate ? c.lo >= 1 : (c.lo == 0 && c.hi == 0);
}

/* ---- structural queries ------------------------------------------------ */

bool tir_expr_equal(const tir_expr_t* a, const tir_expr_t* b) {
  if (a == b) return true;
  if (!a || !b || a->kind != b->kind || a->dtype != b->dtype) return false;
  switch (a->kind) {
    case TIR_INT: return a->u.i == b->u.i;
    case TIR_FLOAT: return memcmp(&a->u.f, &b->u.f, sizeof(double)) == 0;
    case TIR_VARREF: return a->u.var == b->u.var;
    case TIR_BINARY:
      return a->u.bin.op == b->u.bin.op && tir_expr_equal(a->u.bin.a, b->u.bin.a) &&
             tir_expr_equal(a->u.bin.b, b->u.bin.b);
    case TIR_SELECT:
      return tir_expr_equal(a->u.sel.cond, b->u.sel.cond) &&
             tir_expr_equal(a->u.sel.t, b->u.sel.t) && tir_expr_equal(a->u.sel.f, b->u.sel.f);
    case TIR_LOAD:
      if (a->u.load.buf != b->u.load.buf) return false;
      for (int32_t i = 0; i < a->u.load.buf->rank; ++i)
        if (!tir_expr_equal(a->u.load.idx[i], b->u.load.idx[i])) return false;
      return true;
    case TIR_CAST: return tir_expr_equal(a->u.cast.value, b->u.cast.value);
    case TIR_CALL:
      if (a->u.call.fn != b->u.call.fn || a->u.call.n != b->u.call.n) return false;
      for (int32_t i = 0; i < a->u.call.n; ++i)
        if (!tir_expr_equal(a->u.call.args[i], b->u.call.args[i])) return false;
      return true;
  }
  return false;
}

/* Searches for the first node that |match| accepts; stops there. */
typedef struct find_s {
  const void* key;
  bool (*match)(const tir_expr_t* e, const void* key);
  bool found;
} find_t;

static bool find_pre(tir_visitor_t* v, const tir_expr_t* e) {
  find_t* f = v->user;
  if (f->match(e, f->key)) {
    f->found = true;
    v->stop = true;
  }
  return true;
}

static bool find_expr(const tir_expr_t* e, bool (*match)(const tir_expr_t*, const void*),
                      const void* key) {
  find_t f = {key, match, false};
  tir_visitor_t v = {.user = &f, .expr_pre = find_pre};
  tir_visit_expr(&v, e);
  return f.found;
}

static bool is_equal(const tir_expr_t* e, const void* needle) {
  const tir_expr_t* n = needle;
  return e->kind == n->kind && tir_expr_equal(e, n);
}

static bool is_var(const tir_expr_t* e, const void* var) {
  return e->kind == TIR_VARREF && e->u.var == var;
}

bool tir_expr_contains(const tir_expr_t* hay, const tir_expr_t* needle) {
  return find_expr(hay, is_equal, needle);
}

bool tir_expr_uses_var(const tir_expr_t* e, const tir_var_t* v) {
  return find_expr(e, is_var, v);
}

/* ---- public entry ------------------------------------------------------ */

bool tir_expr_bounds(const tir_expr_t* e, int32_t n, const tir_var_t* const* vars,
                     const int64_t* lo, const int64_t* hi, int64_t* out_lo, int64_t* out_hi) {
  if (!e || n < 0 || n > TIR_BENV_MAX_VARS) return false;
  for (int32_t i = 0; i < n; ++i)
    /* An empty or unbounded range makes every bound meaningless. */
    if (lo[i] > hi[i] || lo[i] == NEG || hi[i] == POS) return false;
  tir_benv_t* env = malloc(sizeof(*env)); /* ~30 KB: not on the stack */
  if (!env) return false;
  tir_benv_init(env);
  for (int32_t i = 0; i < n; ++i) tir_benv_push_var(env, vars[i], lo[i], hi[i]);
  tir_ival_t r = tir_bounds_eval(env, e);
  free(env);
  if (!tir_ival_finite(r) || r.lo > r.hi) return false;
  *out_lo = r.lo;
  *out_hi = r.hi;
  return true;
}
