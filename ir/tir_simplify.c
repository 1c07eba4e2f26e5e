/* Tensor-IR simplifier.
 *
 * Expressions are rewritten bottom-up under an environment of loop-variable
 * ranges and guard facts (ir/tir_analysis.h):
 *  - constants fold in their dtype (narrow ints wrap, f32/f16 round, int64
 *    overflow and division by zero are left unfolded);
 *  - I64 sums are normalised to a linear form `t0*k0 + t1*k1 + ... + c`
 *    (terms merged, zero terms dropped, (x // a) * a + x % a -> x), rebuilt
 *    with the terms in order of first appearance and the constant last, so
 *    index code after split/fuse reads `h.o * 8 + h.i - 1`;
 *  - floordiv / floormod by a constant k: a remainder whose bounds stay
 *    within one period folds ((a*k + b) // k -> a, (a*k + b) % k -> b for
 *    0 <= b < k), multiples of k vanish under % and other coefficients
 *    shrink mod k, a single term's factor common with k cancels,
 *    (x // a) // b -> x // (a*b), (x % a) % b -> x % b when b divides a,
 *    (x // a) % b drops the terms of x that are multiples of a*b. A
 *    dividend is otherwise kept whole (not split into M + R // k): guards of
 *    split loops bound it, and the verifier must still see that;
 *  - a sum that the guards pin to one value becomes that constant;
 *  - comparisons, min, max and selects decided by interval analysis (on the
 *    difference of the operands, so x + 1 > x folds);
 *  - identities: x*1, x/1, x-0, x+0 and x*0 (ints), !!x, select(c, x, x),
 *    && / || with constants.
 * Statements: loops of extent <= 0 are removed, extent-1 loops (not bound to
 * GPU ids) are replaced by their body with the variable set to 0, ifs whose
 * condition is decided (constants, loop ranges, enclosing guards and their
 * linear relations, e.g. `if (i < j) { if (j > i) ... }`) keep one branch,
 * as do selects, empty bodies disappear, nested sequences are flattened.
 * Bound loops of extent 1 stay (they define the launch geometry); their
 * variable still folds to 0 through its [0, 0] range.
 *
 * Unchanged subtrees are shared with the input. Facts that come from select
 * or &&/|| operands are "value-only": they are not used inside the indices
 * of loads, because select may evaluate both branches and the rewrite must
 * not turn a clamped index into an unclamped one.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/tir_analysis.h"

typedef struct sctx_s {
  tir_ctx_t* c;
  tir_benv_t env;
  int32_t n_zero; /* variables of inlined extent-1 loops: replaced by 0 */
  const tir_var_t* zero[TIR_BENV_MAX_VARS];
} sctx_t;

static const tir_expr_t* simp(sctx_t* s, const tir_expr_t* e);

/* ---- constants ---------------------------------------------------------- */

static bool is_i64(const tir_expr_t* e) { return e->dtype == KILN_DTYPE_I64; }
static bool is_int_t(kiln_dtype_t t) { return kiln_dtype_is_int(t); }
static bool is_intlike(kiln_dtype_t t) { return kiln_dtype_is_int(t) || t == KILN_DTYPE_BOOL; }
static bool is_c(const tir_expr_t* e, int64_t v) { return e->kind == TIR_INT && e->u.i == v; }
static bool is_fc(const tir_expr_t* e, double v) { return e->kind == TIR_FLOAT && e->u.f == v; }

static int64_t wrap(kiln_dtype_t t, int64_t v) {
  switch (t) {
    case KILN_DTYPE_I8: return (int8_t)(uint8_t)v;
    case KILN_DTYPE_U8: return (uint8_t)v;
    case KILN_DTYPE_I32: return (int32_t)(uint32_t)v;
    case KILN_DTYPE_I16: return (int16_t)(uint16_t)v;
    case KILN_DTYPE_U16: return (uint16_t)v;
    case KILN_DTYPE_U32: return (uint32_t)v;
    case KILN_DTYPE_BOOL: return v != 0;
    default: return v;
  }
}

static const tir_expr_t* mk_int(sctx_t* s, kiln_dtype_t t, int64_t v) {
  if (t == KILN_DTYPE_I64) return tir_int(s->c, v);
  return tir_const(s->c, t, (double)wrap(t, v));
}
static const tir_expr_t* mk_bool(sctx_t* s, bool b) { return tir_const(s->c, KILN_DTYPE_BOOL, b); }

static double round_to(kiln_dtype_t t, double v) {
  if (t == KILN_DTYPE_F32) return (double)(float)v;
  if (t == KILN_DTYPE_F16) return (double)kiln_f16_to_f32(kiln_f32_to_f16((float)v));
  return v;
}
static const tir_expr_t* mk_float(sctx_t* s, kiln_dtype_t t, double v) {
  return tir_const(s->c, t, round_to(t, v));
}

/* Reuses |orig| when nothing changed. */
static const tir_expr_t* mk_bin(sctx_t* s, const tir_expr_t* orig, tir_binop_t op,
                                const tir_expr_t* a, const tir_expr_t* b) {
  if (orig && orig->kind == TIR_BINARY && orig->u.bin.op == op && orig->u.bin.a == a &&
      orig->u.bin.b == b)
    return orig;
  return tir_bin(s->c, op, a, b);
}

static bool cmp_i(tir_binop_t op, int64_t a, int64_t b) {
  switch (op) {
    case TIR_EQ: return a == b;
    case TIR_NE: return a != b;
    case TIR_LT: return a < b;
    case TIR_LE: return a <= b;
    case TIR_GT: return a > b;
    default: return a >= b;
  }
}
static bool cmp_f(tir_binop_t op, double a, double b) {
  switch (op) {
    case TIR_EQ: return a == b;
    case TIR_NE: return a != b;
    case TIR_LT: return a < b;
    case TIR_LE: return a <= b;
    case TIR_GT: return a > b;
    default: return a >= b;
  }
}

/* Folds an integer binary op of dtype |t| (comparisons give 0/1); false
 * when it must stay: int64 overflow, division by zero. Narrow types wrap. */
static bool fold_int(tir_binop_t op, kiln_dtype_t t, int64_t a, int64_t b, int64_t* out) {
  int64_t r;
  bool wide = t == KILN_DTYPE_I64;
  uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
  /* u64 holds its bit pattern: only the wrapping ops fold the same way. */
  if (t == KILN_DTYPE_U64 && op != TIR_ADD && op != TIR_SUB && op != TIR_MUL && op != TIR_BAND &&
      op != TIR_BOR && op != TIR_BXOR)
    return false;
  switch (op) {
    case TIR_ADD:
      if (wide && __builtin_add_overflow(a, b, &r)) return false;
      r = (int64_t)(ua + ub);
      break;
    case TIR_SUB:
      if (wide && __builtin_sub_overflow(a, b, &r)) return false;
      r = (int64_t)(ua - ub);
      break;
    case TIR_MUL:
      if (wide && __builtin_mul_overflow(a, b, &r)) return false;
      r = (int64_t)(ua * ub);
      break;
    case TIR_DIV:
      if (b == 0 || (a == INT64_MIN && b == -1)) return false;
      r = a / b;
      break;
    case TIR_FLOORDIV:
      if (b == 0 || (a == INT64_MIN && b == -1)) return false;
      r = tir_floordiv_i64(a, b);
      break;
    case TIR_FLOORMOD:
      if (b == 0) return false;
      r = tir_floormod_i64(a, b);
      break;
    case TIR_MIN: r = a < b ? a : b; break;
    case TIR_MAX: r = a > b ? a : b; break;
    case TIR_AND: *out = (a != 0) && (b != 0); return true;
    case TIR_OR: *out = (a != 0) || (b != 0); return true;
    case TIR_BAND: r = a & b; break;
    case TIR_BOR: r = a | b; break;
    case TIR_BXOR: r = a ^ b; break;
    default: *out = cmp_i(op, a, b); return true;
  }
  *out = wrap(t, r);
  return true;
}

/* Float binary op folded in the dtype's precision; false to keep it. */
static bool fold_float(tir_binop_t op, kiln_dtype_t t, double a, double b, double* out) {
  double r;
  switch (op) {
    case TIR_ADD: r = a + b; break;
    case TIR_SUB: r = a - b; break;
    case TIR_MUL: r = a * b; break;
    case TIR_DIV: r = a / b; break;
    case TIR_MIN:
    case TIR_MAX:
      if (isnan(a) || isnan(b)) return false; /* target min/max NaN rules differ */
      r = (op == TIR_MIN) == (a < b) ? a : b;
      break;
    default: return false;
  }
  *out = round_to(t, r);
  return true;
}

/* f32/f16 calls fold in float as targets compute them; f64 in double. */
static bool fold_call(tir_intrin_t fn, kiln_dtype_t t, const double* a, double* out) {
  const bool dbl = t == KILN_DTYPE_F64;
  float x = (float)a[0];
  double r;
#define M1(fn) (dbl ? fn(a[0]) : (double)fn##f(x))
#define M2(fn) (dbl ? fn(a[0], a[1]) : (double)fn##f(x, (float)a[1]))
  switch (fn) {
    case TIR_EXP: r = M1(exp); break;
    case TIR_LOG: r = M1(log); break;
    case TIR_SQRT: r = M1(sqrt); break;
    case TIR_RSQRT: r = 1.0 / M1(sqrt); break;
    case TIR_TANH: r = M1(tanh); break;
    case TIR_ERF: r = M1(erf); break;
    case TIR_FABS: r = M1(fabs); break;
    case TIR_FLOOR: r = M1(floor); break;
    case TIR_CEIL: r = M1(ceil); break;
    case TIR_ROUND_EVEN: r = M1(nearbyint); break;
    case TIR_POW: r = M2(pow); break;
    case TIR_NEG: r = -a[0]; break;
    case TIR_SIGMOID: r = dbl ? 1.0 / (1.0 + exp(-a[0])) : 1.0f / (1.0f + expf(-x)); break;
    case TIR_FMA: r = dbl ? fma(a[0], a[1], a[2]) : fmaf(x, (float)a[1], (float)a[2]); break;
    case TIR_SIN: r = M1(sin); break;
    case TIR_COS: r = M1(cos); break;
    case TIR_TAN: r = M1(tan); break;
    case TIR_ASIN: r = M1(asin); break;
    case TIR_ACOS: r = M1(acos); break;
    case TIR_ATAN: r = M1(atan); break;
    case TIR_SINH: r = M1(sinh); break;
    case TIR_COSH: r = M1(cosh); break;
    case TIR_ASINH: r = M1(asinh); break;
    case TIR_ACOSH: r = M1(acosh); break;
    case TIR_ATANH: r = M1(atanh); break;
    case TIR_FMOD: r = M2(fmod); break;
    case TIR_SOFTPLUS:
      r = isnan(a[0]) ? a[0] : dbl ? fmax(a[0], 0.0) + log1p(exp(-fabs(a[0]))) : fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x)));
      break;
    case TIR_SILU: r = dbl ? a[0] / (1.0 + exp(-a[0])) : x * (1.0f / (1.0f + expf(-x))); break;
    default: return false;
  }
#undef M1
#undef M2
  *out = r;
  return true;
}

/* ---- linear forms (I64) -------------------------------------------------- */

/* The linear-form core lives in ir/tir_bounds.c (the bounds evaluator uses
 * it for guard facts on sums); these are the simplifier's short names. */
typedef tir_lin_t lin_t;
#define lin_init tir_lin_init
#define lin_term tir_lin_term
#define lin_collect tir_lin_collect

static void lin_drop(lin_t* L, int32_t i) {
  for (int32_t j = i + 1; j < L->n; ++j) {
    L->t[j - 1] = L->t[j];
    L->k[j - 1] = L->k[j];
  }
  L->n--;
}

/* Drops zero terms and folds (x // a) * (m*a) + (x % a) * m into x * m. */
static void lin_normalize(lin_t* L) {
  for (int32_t i = 0; i < L->n;)
    if (L->k[i] == 0) lin_drop(L, i);
    else ++i;
  bool again = true;
  for (int guard = 0; again && guard < TIR_LIN_MAX && L->ok; ++guard) {
    again = false;
    for (int32_t i = 0; i < L->n && !again; ++i) {
      const tir_expr_t* m = L->t[i];
      if (m->kind != TIR_BINARY || m->u.bin.op != TIR_FLOORMOD || m->u.bin.b->kind != TIR_INT)
        continue;
      int64_t a = m->u.bin.b->u.i, want;
      if (a <= 0 || __builtin_mul_overflow(L->k[i], a, &want)) continue;
      for (int32_t j = 0; j < L->n; ++j) {
        const tir_expr_t* d = L->t[j];
        if (j == i || L->k[j] != want || d->kind != TIR_BINARY ||
            d->u.bin.op != TIR_FLOORDIV || !is_c(d->u.bin.b, a) ||
            !tir_expr_equal(d->u.bin.a, m->u.bin.a))
          continue;
        int64_t k = L->k[i];
        const tir_expr_t* x = m->u.bin.a;
        lin_drop(L, i > j ? i : j);
        lin_drop(L, i > j ? j : i);
        lin_collect(L, x, k);
        for (int32_t q = 0; q < L->n;)
          if (L->k[q] == 0) lin_drop(L, q);
          else ++q;
        again = true;
        break;
      }
    }
  }
}

static tir_ival_t lin_bounds(sctx_t* s, const lin_t* L) { return tir_lin_bounds(&s->env, L); }

static const tir_expr_t* scaled(sctx_t* s, const tir_expr_t* t, int64_t k) {
  return k == 1 ? t : tir_mul(s->c, t, tir_int(s->c, k));
}

/* Builds the canonical expression: first positive term, the other terms in
 * order (subtracting negative ones), the constant last (or first, as in
 * `5 - x`, when no term is positive). */
static const tir_expr_t* lin_build(sctx_t* s, const lin_t* L) {
  if (L->n == 0) return tir_int(s->c, L->c);
  int32_t first = -1;
  for (int32_t i = 0; i < L->n && first < 0; ++i)
    if (L->k[i] > 0) first = i;
  bool c_first = first < 0 && L->c > 0;
  const tir_expr_t* acc;
  if (first >= 0) {
    acc = scaled(s, L->t[first], L->k[first]);
  } else if (c_first) {
    acc = tir_int(s->c, L->c);
  } else {
    first = 0;
    acc = tir_mul(s->c, L->t[0], tir_int(s->c, L->k[0]));
  }
  for (int32_t i = 0; i < L->n; ++i) {
    if (i == first) continue;
    int64_t k = L->k[i];
    if (k > 0) acc = tir_add(s->c, acc, scaled(s, L->t[i], k));
    else if (k != INT64_MIN) acc = tir_sub(s->c, acc, scaled(s, L->t[i], -k));
    else acc = tir_add(s->c, acc, tir_mul(s->c, L->t[i], tir_int(s->c, k)));
  }
  if (!c_first && L->c != 0) {
    if (L->c > 0) acc = tir_add(s->c, acc, tir_int(s->c, L->c));
    else if (L->c != INT64_MIN) acc = tir_sub(s->c, acc, tir_int(s->c, -L->c));
    else acc = tir_add(s->c, acc, tir_int(s->c, L->c));
  }
  return acc;
}

/* ---- expressions --------------------------------------------------------- */

static int64_t gcd64(int64_t a, int64_t b) {
  if (a == INT64_MIN || b == INT64_MIN) return 1;
  a = a < 0 ? -a : a;
  b = b < 0 ? -b : b;
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

static bool one_period(tir_ival_t r, int64_t k, int64_t* m) {
  if (!tir_ival_finite(r) || r.lo > r.hi) return false;
  *m = tir_floordiv_i64(r.lo, k);
  return *m == tir_floordiv_i64(r.hi, k);
}

/* (g*x + r) // (g*k') == x // k' and (g*x + r) % (g*k') == g * (x % k') + r
 * for 0 <= r < g: a GEMM row mt*mr + i of a register tile (x = mt, r = i)
 * against an image width that mr divides, so the tile's rows share one
 * base (the tile's row and column) instead of a division each, which cost
 * a register (or a spill) per row. Finds the largest such g among the
 * terms' coefficients dividing k: H gets x (the terms g divides, over g),
 * S gets r (the others and the constant). */
static bool tile_split(sctx_t* s, const lin_t* R, int64_t k, lin_t* H, lin_t* S, int64_t* g_out) {
  int64_t best = 0;
  for (int32_t i = 0; i < R->n; ++i) {
    const int64_t c = R->k[i] < 0 ? -R->k[i] : R->k[i];
    if (c <= 1 || c >= k || k % c != 0 || c <= best) continue;
    lin_t h, r;
    lin_init(&h);
    lin_init(&r);
    r.c = R->c;
    for (int32_t j = 0; j < R->n; ++j) {
      if (R->k[j] % c == 0) lin_term(&h, R->t[j], R->k[j] / c);
      else lin_term(&r, R->t[j], R->k[j]);
    }
    if (!h.ok || !r.ok || r.n == 0) continue;
    const tir_ival_t b = lin_bounds(s, &r);
    if (b.lo >= 0 && b.hi < c) {
      best = c;
      *H = h;
      *S = r;
    }
  }
  *g_out = best;
  return best > 0;
}

/* floordiv / floormod of simplified operands. */
static const tir_expr_t* divmod(sctx_t* s, const tir_expr_t* orig, tir_binop_t op,
                                const tir_expr_t* a, const tir_expr_t* b) {
  if (!a || !b) return NULL;
  kiln_dtype_t t = a->dtype;
  int64_t v;
  if (a->kind == TIR_INT && b->kind == TIR_INT && fold_int(op, t, a->u.i, b->u.i, &v))
    return mk_int(s, t, v);
  if (is_c(b, 1)) return op == TIR_FLOORDIV ? a : mk_int(s, t, 0);
  if (is_c(a, 0)) return a;
  if (t != KILN_DTYPE_I64) return mk_bin(s, orig, op, a, b);
  if (b->kind != TIR_INT) {
    tir_ival_t bv = tir_bounds_eval(&s->env, b), av = tir_bounds_eval(&s->env, a);
    if (bv.lo > 0 && av.lo >= 0 && av.hi < bv.lo) return op == TIR_FLOORDIV ? tir_int(s->c, 0) : a;
    return mk_bin(s, orig, op, a, b);
  }
  int64_t k = b->u.i;
  lin_t L, M, R;
  lin_init(&L);
  lin_collect(&L, a, 1);
  if (k <= 0 || !L.ok) return mk_bin(s, orig, op, a, b);
  lin_init(&M);
  lin_init(&R);
  M.c = tir_floordiv_i64(L.c, k);
  R.c = tir_floormod_i64(L.c, k);
  for (int32_t i = 0; i < L.n; ++i) {
    lin_t* dst = L.k[i] % k == 0 ? &M : &R;
    dst->t[dst->n] = L.t[i];
    dst->k[dst->n] = dst == &M ? L.k[i] / k : L.k[i];
    dst->n++;
  }
  tir_ival_t rv = lin_bounds(s, &R);
  int64_t m, g = 0;
  for (int32_t i = 0; i < R.n; ++i) g = gcd64(g, R.k[i]);
  if (M.n == 0 && R.c == L.c) {
    /* The dividend itself may be bounded by a guard fact on it. */
    tir_ival_t av = tir_bounds_eval(&s->env, a);
    if (av.lo > rv.lo) rv.lo = av.lo;
    if (av.hi < rv.hi) rv.hi = av.hi;
  }
  if (op == TIR_FLOORDIV) {
    /* (M*k + R) // k == M + R // k, and R // k is constant within one period.
     * Outside that case the dividend is kept whole: rewriting it into
     * M + R // k (or cancelling a factor of several terms) would hide the
     * relation to the guards of split loops (`f < 384` bounds `f // 192`)
     * from interval analysis. */
    int64_t q;
    if (one_period(rv, k, &m) && !__builtin_add_overflow(M.c, m, &q)) {
      M.c = q;
      return lin_build(s, &M);
    }
    lin_t H, S;
    int64_t tg;
    if (R.n > 1 && tile_split(s, &R, k, &H, &S, &tg)) {
      const tir_expr_t* q = divmod(s, NULL, TIR_FLOORDIV, lin_build(s, &H), tir_int(s->c, k / tg));
      if (!q) return NULL;
      lin_term(&M, q, 1);
      if (M.ok) return lin_build(s, &M);
    }
    if (M.n > 0 || M.c != 0) return mk_bin(s, orig, op, a, b);
    /* From here R == L. */
    /* (g*x + c) // (g*k') == (x + c // g) // k' (one term: guard facts on
     * g*x + c still reach x) */
    if (M.n == 0 && L.n == 1 && g > 1 && k % g == 0) {
      lin_t P;
      lin_init(&P);
      lin_term(&P, L.t[0], L.k[0] / g);
      P.c = tir_floordiv_i64(L.c, g);
      return divmod(s, NULL, TIR_FLOORDIV, lin_build(s, &P), tir_int(s->c, k / g));
    }
    /* (x // a) // k == x // (a*k) */
    const tir_expr_t* x = R.n == 1 ? R.t[0] : NULL;
    int64_t ak;
    if (x && R.k[0] == 1 && R.c == 0 && x->kind == TIR_BINARY && x->u.bin.op == TIR_FLOORDIV &&
        x->u.bin.b->kind == TIR_INT && x->u.bin.b->u.i > 0 &&
        !__builtin_mul_overflow(x->u.bin.b->u.i, k, &ak))
      return divmod(s, NULL, TIR_FLOORDIV, x->u.bin.a, tir_int(s->c, ak));
    return mk_bin(s, orig, op, a, b);
  }
  /* floormod: the multiples of k vanish, other coefficients reduce mod k
   * ((y*17) % 4 == y % 4). */
  bool reduced = false;
  for (int32_t i = 0; i < R.n; ++i) {
    /* Only shrink magnitudes (17 -> 1 for k = 4; -1 stays, not 3): a
     * remainder within one period must stay within one period. */
    int64_t r = tir_floormod_i64(R.k[i], k);
    if (r != 0 && r < (R.k[i] < 0 ? -R.k[i] : R.k[i])) {
      R.k[i] = r;
      reduced = true;
    }
  }
  if (reduced) rv = lin_bounds(s, &R);
  int64_t mk, rc;
  if (one_period(rv, k, &m) && !__builtin_mul_overflow(m, k, &mk) &&
      !__builtin_sub_overflow(R.c, mk, &rc)) {
    R.c = rc;
    return lin_build(s, &R);
  }
  lin_t H, S;
  int64_t tg;
  if (R.n > 1 && tile_split(s, &R, k, &H, &S, &tg)) {
    const tir_expr_t* inner = divmod(s, NULL, TIR_FLOORMOD, lin_build(s, &H), tir_int(s->c, k / tg));
    if (!inner) return NULL;
    lin_collect(&S, inner, tg);
    if (S.ok) return lin_build(s, &S);
  }
  /* (g*P + c) % (g*k') == g * ((P + c // g) % k') + c % g */
  if (g > 1 && k % g == 0) {
    lin_t P, Q;
    lin_init(&P);
    for (int32_t i = 0; i < R.n; ++i) lin_term(&P, R.t[i], R.k[i] / g);
    P.c = tir_floordiv_i64(R.c, g);
    const tir_expr_t* inner = divmod(s, NULL, TIR_FLOORMOD, lin_build(s, &P), tir_int(s->c, k / g));
    if (!inner) return NULL;
    lin_init(&Q);
    lin_collect(&Q, inner, g);
    Q.c += tir_floormod_i64(R.c, g);
    if (Q.ok) return lin_build(s, &Q);
  }
  /* (x // a) % k: terms of x that are multiples of a*k vanish. */
  const tir_expr_t* x = R.n == 1 ? R.t[0] : NULL;
  int64_t ak;
  if (x && R.k[0] == 1 && R.c == 0 && x->kind == TIR_BINARY && x->u.bin.op == TIR_FLOORDIV &&
      x->u.bin.b->kind == TIR_INT && x->u.bin.b->u.i > 0 &&
      !__builtin_mul_overflow(x->u.bin.b->u.i, k, &ak)) {
    lin_t X, Y;
    lin_init(&X);
    lin_collect(&X, x->u.bin.a, 1);
    if (X.ok) {
      lin_init(&Y);
      Y.c = tir_floormod_i64(X.c, ak);
      for (int32_t i = 0; i < X.n; ++i)
        if (X.k[i] % ak != 0) lin_term(&Y, X.t[i], X.k[i]);
      if (Y.n != X.n || Y.c != X.c) {
        const tir_expr_t* q = divmod(s, NULL, TIR_FLOORDIV, lin_build(s, &Y), x->u.bin.b);
        return divmod(s, NULL, TIR_FLOORMOD, q, b);
      }
    }
  }
  /* (x % a) % k == x % k when k divides a */
  if (x && R.k[0] == 1 && R.c == 0 && x->kind == TIR_BINARY && x->u.bin.op == TIR_FLOORMOD &&
      x->u.bin.b->kind == TIR_INT && x->u.bin.b->u.i > 0 && x->u.bin.b->u.i % k == 0)
    return divmod(s, NULL, TIR_FLOORMOD, x->u.bin.a, b);
  if (M.n > 0 || L.c != R.c || reduced) return tir_bin(s->c, op, lin_build(s, &R), b);
  return mk_bin(s, orig, op, a, b);
}

/* Interval of a - b for I64 operands (shared terms cancel). */
static tir_ival_t diff_bounds(sctx_t* s, const tir_expr_t* a, const tir_expr_t* b, bool* exact,
                              int64_t* c) {
  lin_t D;
  lin_init(&D);
  lin_collect(&D, a, 1);
  lin_collect(&D, b, -1);
  *exact = false;
  if (!D.ok) {
    tir_ival_t av = tir_bounds_eval(&s->env, a), bv = tir_bounds_eval(&s->env, b);
    tir_ival_t m1 = {-1, -1};
    return tir_ival_add(av, tir_ival_mul(bv, m1));
  }
  lin_normalize(&D);
  if (D.n == 0) {
    *exact = true;
    *c = D.c;
  }
  return lin_bounds(s, &D);
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

static const tir_expr_t* simp_cmp(sctx_t* s, const tir_expr_t* orig, tir_binop_t op,
                                  const tir_expr_t* a, const tir_expr_t* b) {
  if (!a || !b) return NULL;
  if (a->kind == TIR_INT && b->kind == TIR_INT && a->dtype != KILN_DTYPE_U64)
    return mk_bool(s, cmp_i(op, a->u.i, b->u.i));
  if (a->kind == TIR_FLOAT && b->kind == TIR_FLOAT) return mk_bool(s, cmp_f(op, a->u.f, b->u.f));
  if (!is_intlike(a->dtype) || a->dtype == KILN_DTYPE_U64) {
    if (a->dtype == KILN_DTYPE_U64 && tir_expr_equal(a, b))
      return mk_bool(s, op == TIR_EQ || op == TIR_LE || op == TIR_GE);
    return mk_bin(s, orig, op, a, b);
  }
  if (tir_expr_equal(a, b)) return mk_bool(s, op == TIR_EQ || op == TIR_LE || op == TIR_GE);
  tir_ival_t zero = {0, 0};
  if (a->dtype == KILN_DTYPE_I64) {
    bool exact;
    int64_t c;
    tir_ival_t d = diff_bounds(s, a, b, &exact, &c);
    if (exact) return mk_bool(s, cmp_i(op, c, 0));
    tir_ival_t r = tir_ival_cmp(op, d, zero);
    if (r.lo == r.hi) return mk_bool(s, r.lo != 0);
  }
  const tir_expr_t* n = mk_bin(s, orig, op, a, b);
  if (!n) return NULL;
  tir_ival_t r = tir_bounds_eval(&s->env, n);
  if (r.lo == r.hi && r.lo >= 0 && r.lo <= 1) return mk_bool(s, r.lo != 0);
  return n;
}

static const tir_expr_t* simp_not(sctx_t* s, const tir_expr_t* orig, const tir_expr_t* a) {
  if (!a) return NULL;
  if (a->kind == TIR_INT) return mk_bool(s, a->u.i == 0);
  if (a->kind == TIR_CALL && a->u.call.fn == TIR_NOT) return a->u.call.args[0];
  /* !(a < b) == a >= b for integers (not for floats: NaN). */
  if (a->kind == TIR_BINARY && a->u.bin.op >= TIR_EQ && a->u.bin.op <= TIR_GE &&
      is_intlike(a->u.bin.a->dtype))
    return tir_bin(s->c, invert_cmp(a->u.bin.op), a->u.bin.a, a->u.bin.b);
  if (orig && orig->u.call.args[0] == a) return orig;
  return tir_call(s->c, TIR_NOT, 1, a, NULL, NULL);
}

/* Simplifies |e| assuming |cond| holds (or fails, |negate|) for its value. */
/* Simplifies |e| assuming |cond| holds (or fails, |negate|) for its value;
 * sets *dead when that assumption is infeasible (then |e| is returned as is:
 * its value is never used). */
static const tir_expr_t* simp_under(sctx_t* s, const tir_expr_t* e, const tir_expr_t* cond,
                                    bool negate, bool* dead) {
  tir_benv_mark_t mark = tir_benv_mark(&s->env);
  bool mode = s->env.value_mode;
  s->env.value_mode = true;
  tir_benv_add_cond_facts(&s->env, cond, negate);
  s->env.value_mode = mode;
  *dead = tir_benv_infeasible(&s->env, mark, cond, negate);
  const tir_expr_t* r = *dead ? e : simp(s, e);
  tir_benv_restore(&s->env, mark);
  return r;
}

static const tir_expr_t* simp_logic(sctx_t* s, const tir_expr_t* e) {
  bool is_and = e->u.bin.op == TIR_AND;
  const tir_expr_t* a = simp(s, e->u.bin.a);
  if (!a) return NULL;
  if (a->kind == TIR_INT) {
    if ((a->u.i != 0) != is_and) return a; /* false && x, true || x */
    return simp(s, e->u.bin.b);
  }
  bool dead;
  const tir_expr_t* b = simp_under(s, e->u.bin.b, a, !is_and, &dead);
  if (!b) return NULL;
  /* a && b with b unreachable (a never holds): a (false); same for ||. */
  if (dead) return mk_bool(s, !is_and);
  if (b->kind == TIR_INT) return ((b->u.i != 0) == is_and) ? a : b;
  if (tir_expr_equal(a, b)) return a;
  return mk_bin(s, e, e->u.bin.op, a, b);
}

static const tir_expr_t* simp_minmax(sctx_t* s, const tir_expr_t* e, const tir_expr_t* a,
                                     const tir_expr_t* b) {
  tir_binop_t op = e->u.bin.op;
  int64_t v;
  double f;
  if (a->kind == TIR_INT && b->kind == TIR_INT && fold_int(op, a->dtype, a->u.i, b->u.i, &v))
    return mk_int(s, a->dtype, v);
  if (a->kind == TIR_FLOAT && b->kind == TIR_FLOAT && fold_float(op, a->dtype, a->u.f, b->u.f, &f))
    return mk_float(s, a->dtype, f);
  if (tir_expr_equal(a, b)) return a;
  if (is_intlike(a->dtype)) {
    tir_ival_t d;
    if (a->dtype == KILN_DTYPE_I64) {
      bool exact;
      int64_t c;
      d = diff_bounds(s, a, b, &exact, &c);
    } else {
      tir_ival_t av = tir_bounds_eval(&s->env, a), bv = tir_bounds_eval(&s->env, b);
      tir_ival_t m1 = {-1, -1};
      d = tir_ival_add(av, tir_ival_mul(bv, m1));
    }
    if (d.hi != TIR_POS_INF && d.hi <= 0) return op == TIR_MIN ? a : b;
    if (d.lo != TIR_NEG_INF && d.lo >= 0) return op == TIR_MIN ? b : a;
  }
  return mk_bin(s, e, op, a, b);
}

/* Adds the I64 sum/difference tree |e| (scaled by k) to |L|, simplifying
 * the leaves; the tree's inner +/- nodes are not simplified on their own. */
static void gather(sctx_t* s, lin_t* L, const tir_expr_t* e, int64_t k) {
  if (!L->ok) return;
  if (e->kind == TIR_BINARY && is_i64(e) && (e->u.bin.op == TIR_ADD || e->u.bin.op == TIR_SUB)) {
    gather(s, L, e->u.bin.a, k);
    if (e->u.bin.op == TIR_ADD) gather(s, L, e->u.bin.b, k);
    else if (k != INT64_MIN) gather(s, L, e->u.bin.b, -k);
    else L->ok = false;
    return;
  }
  const tir_expr_t* se = simp(s, e);
  if (!se) {
    L->ok = false;
    return;
  }
  lin_collect(L, se, k);
}

static const tir_expr_t* finish_lin(sctx_t* s, const tir_expr_t* e, lin_t* L) {
  lin_normalize(L);
  if (L->n > 0 && (s->env.n_facts > 0 || s->env.n_lfacts > 0)) {
    /* A guard may pin the sum to one value (4x + y == 4 makes 68x + 17y 68). */
    tir_ival_t r = lin_bounds(s, L);
    if (r.lo == r.hi && tir_ival_finite(r)) return tir_int(s->c, r.lo);
  }
  const tir_expr_t* r = lin_build(s, L);
  if (r && tir_expr_equal(r, e)) return e;
  return r;
}

static const tir_expr_t* simp_arith(sctx_t* s, const tir_expr_t* e) {
  tir_binop_t op = e->u.bin.op;
  if (is_i64(e) && (op == TIR_ADD || op == TIR_SUB)) {
    lin_t L;
    lin_init(&L);
    gather(s, &L, e, 1);
    if (s->c->oom) return NULL;
    if (L.ok) return finish_lin(s, e, &L);
  }
  const tir_expr_t* a = simp(s, e->u.bin.a);
  const tir_expr_t* b = simp(s, e->u.bin.b);
  if (!a || !b) return NULL;
  kiln_dtype_t t = a->dtype;
  int64_t v;
  double f;
  if (op == TIR_FLOORDIV || op == TIR_FLOORMOD) return divmod(s, e, op, a, b);
  if (op == TIR_MIN || op == TIR_MAX) return simp_minmax(s, e, a, b);
  if (a->kind == TIR_INT && b->kind == TIR_INT && fold_int(op, t, a->u.i, b->u.i, &v))
    return mk_int(s, t, v);
  if (a->kind == TIR_FLOAT && b->kind == TIR_FLOAT && fold_float(op, t, a->u.f, b->u.f, &f))
    return mk_float(s, t, f);
  if (is_i64(e) && op == TIR_MUL && (a->kind == TIR_INT || b->kind == TIR_INT)) {
    lin_t L;
    lin_init(&L);
    lin_collect(&L, a->kind == TIR_INT ? b : a, a->kind == TIR_INT ? a->u.i : b->u.i);
    if (L.ok) return finish_lin(s, e, &L);
  }
  if (is_int_t(t)) {
    switch (op) {
      case TIR_ADD:
        if (is_c(b, 0)) return a;
        if (is_c(a, 0)) return b;
        break;
      case TIR_SUB:
        if (is_c(b, 0)) return a;
        if (tir_expr_equal(a, b)) return mk_int(s, t, 0);
        break;
      case TIR_MUL:
        if (is_c(b, 1)) return a;
        if (is_c(a, 1)) return b;
        if (is_c(a, 0) || is_c(b, 0)) return mk_int(s, t, 0);
        break;
      case TIR_DIV:
        if (is_c(b, 1)) return a;
        break;
      default: break;
    }
  } else if (kiln_dtype_is_float(t)) {
    /* Only identities exact for every float, signed zeros and NaN included. */
    switch (op) {
      case TIR_SUB:
        if (is_fc(b, 0.0) && !signbit(b->u.f)) return a;
        break;
      case TIR_ADD:
        if (is_fc(b, 0.0) && signbit(b->u.f)) return a;
        if (is_fc(a, 0.0) && signbit(a->u.f)) return b;
        break;
      case TIR_MUL:
        if (is_fc(b, 1.0)) return a;
        if (is_fc(a, 1.0)) return b;
        break;
      case TIR_DIV:
        if (is_fc(b, 1.0)) return a;
        break;
      default: break;
    }
  }
  return mk_bin(s, e, op, a, b);
}

static const tir_expr_t* simp_select(sctx_t* s, const tir_expr_t* e) {
  const tir_expr_t* c = simp(s, e->u.sel.cond);
  if (!c) return NULL;
  if (c->kind == TIR_INT) return simp(s, c->u.i ? e->u.sel.t : e->u.sel.f);
  bool t_dead, f_dead;
  const tir_expr_t* t = simp_under(s, e->u.sel.t, c, false, &t_dead);
  if (t_dead) return simp(s, e->u.sel.f); /* the condition never holds */
  const tir_expr_t* f = simp_under(s, e->u.sel.f, c, true, &f_dead);
  if (f_dead) return t; /* it always holds */
  if (!t || !f) return NULL;
  if (tir_expr_equal(t, f)) return t;
  if (c->kind == TIR_CALL && c->u.call.fn == TIR_NOT) {
    const tir_expr_t* tmp = t;
    c = c->u.call.args[0];
    t = f;
    f = tmp;
  }
  if (e->dtype == KILN_DTYPE_BOOL && t->kind == TIR_INT && f->kind == TIR_INT)
    return t->u.i ? c : simp_not(s, NULL, c); /* t != f here */
  if (c == e->u.sel.cond && t == e->u.sel.t && f == e->u.sel.f) return e;
  return tir_select(s->c, c, t, f);
}

static const tir_expr_t* simp_cast(sctx_t* s, const tir_expr_t* e) {
  const tir_expr_t* v = simp(s, e->u.cast.value);
  if (!v) return NULL;
  kiln_dtype_t t = e->dtype;
  bool to_float = kiln_dtype_is_float(t);
  if (v->kind == TIR_INT) {
    /* int64 -> float rounds once, as C's conversion does. */
    if (to_float && v->dtype == KILN_DTYPE_U64) return mk_float(s, t, (double)(uint64_t)v->u.i);
    if (to_float) return mk_float(s, t, t == KILN_DTYPE_F64 ? (double)v->u.i : (double)(float)v->u.i);
    return mk_int(s, t, v->u.i);
  }
  if (v->kind == TIR_FLOAT) {
    double x = v->u.f;
    if (to_float) return mk_float(s, t, x);
    if (t == KILN_DTYPE_BOOL) return mk_bool(s, x != 0.0);
    /* Out-of-range float->int conversion is undefined: keep it. The
     * conversion truncates, so (lo - 1, hi) maps into [lo, hi - 1]. */
    double lo = -9223372036854775808.0, hi = 9223372036854775808.0;
    if (t == KILN_DTYPE_U8) lo = 0, hi = 256;
    if (t == KILN_DTYPE_I8) lo = -128, hi = 128;
    if (t == KILN_DTYPE_I32) lo = -2147483648.0, hi = 2147483648.0;
    if (t == KILN_DTYPE_I16) lo = -32768, hi = 32768;
    if (t == KILN_DTYPE_U16) lo = 0, hi = 65536;
    if (t == KILN_DTYPE_U32) lo = 0, hi = 4294967296.0;
    if (t == KILN_DTYPE_U64) lo = 0; /* above INT64_MAX stays unfolded */
    if (!isnan(x) && x > lo - 1.0 && x < hi) return mk_int(s, t, (int64_t)x);
  }
  if (v == e->u.cast.value) return e;
  return tir_cast(s->c, t, v);
}

static const tir_expr_t* simp_call(sctx_t* s, const tir_expr_t* e) {
  tir_intrin_t fn = e->u.call.fn;
  int32_t n = e->u.call.n;
  const tir_expr_t* a[3] = {NULL, NULL, NULL};
  bool changed = false, all_float = true;
  if (fn == TIR_NOT) return simp_not(s, e, simp(s, e->u.call.args[0]));
  for (int32_t i = 0; i < n; ++i) {
    a[i] = simp(s, e->u.call.args[i]);
    if (!a[i]) return NULL;
    changed |= a[i] != e->u.call.args[i];
    all_float &= a[i]->kind == TIR_FLOAT;
  }
  double args[3], r;
  if (all_float && kiln_dtype_is_float(e->dtype)) {
    for (int32_t i = 0; i < n; ++i) args[i] = a[i]->u.f;
    if (fold_call(fn, e->dtype, args, &r)) return mk_float(s, e->dtype, r);
  }
  if (a[0]->kind == TIR_INT && is_int_t(e->dtype)) {
    int64_t x = a[0]->u.i;
    if (fn == TIR_NEG && x != INT64_MIN) return mk_int(s, e->dtype, -x);
    if (fn == TIR_FABS && x != INT64_MIN) return mk_int(s, e->dtype, x < 0 ? -x : x);
  }
  if (fn == TIR_NEG && a[0]->kind == TIR_CALL && a[0]->u.call.fn == TIR_NEG)
    return a[0]->u.call.args[0];
  if (!changed) return e;
  return tir_call(s->c, fn, n, a[0], a[1], a[2]);
}

static const tir_expr_t* simp_load(sctx_t* s, const tir_expr_t* e) {
  const tir_buffer_t* b = e->u.load.buf;
  const tir_expr_t* idx[KILN_MAX_RANK];
  bool changed = false, hide = s->env.hide_value;
  s->env.hide_value = true;
  for (int32_t i = 0; i < b->rank; ++i) {
    idx[i] = simp(s, e->u.load.idx[i]);
    if (!idx[i]) {
      s->env.hide_value = hide;
      return NULL;
    }
    changed |= idx[i] != e->u.load.idx[i];
  }
  s->env.hide_value = hide;
  return changed ? tir_load(s->c, b, idx) : e;
}

static const tir_expr_t* simp(sctx_t* s, const tir_expr_t* e) {
  if (!e) return NULL;
  switch (e->kind) {
    case TIR_INT:
    case TIR_FLOAT: return e;
    case TIR_VARREF: {
      for (int32_t i = 0; i < s->n_zero; ++i)
        if (s->zero[i] == e->u.var) return tir_int(s->c, 0);
      tir_ival_t r = tir_bounds_eval(&s->env, e);
      if (r.lo == r.hi && tir_ival_finite(r)) return tir_int(s->c, r.lo);
      return e;
    }
    case TIR_BINARY: {
      tir_binop_t op = e->u.bin.op;
      if (op == TIR_AND || op == TIR_OR) return simp_logic(s, e);
      if (op >= TIR_EQ && op <= TIR_GE)
        return simp_cmp(s, e, op, simp(s, e->u.bin.a), simp(s, e->u.bin.b));
      return simp_arith(s, e);
    }
    case TIR_SELECT: return simp_select(s, e);
    case TIR_LOAD: return simp_load(s, e);
    case TIR_CAST: return simp_cast(s, e);
    case TIR_CALL: return simp_call(s, e);
  }
  return e;
}

/* ---- statements ----------------------------------------------------------- */

/* NULL means "removed" (check s->c->oom for out of memory). */
static const tir_stmt_t* simp_stmt(sctx_t* s, const tir_stmt_t* st);

static const tir_stmt_t* simp_loop(sctx_t* s, const tir_stmt_t* st) {
  int64_t ext = st->u.loop.extent;
  if (ext <= 0) return NULL;
  /* Bound loops stay (they define the launch geometry); their variable is
   * still folded to 0 through its [0, 0] range. */
  if (ext == 1 && st->u.loop.kind != TIR_LOOP_BOUND && !st->u.loop.dyn_extent && s->n_zero < TIR_BENV_MAX_VARS) {
    s->zero[s->n_zero++] = st->u.loop.var;
    const tir_stmt_t* body = simp_stmt(s, st->u.loop.body);
    s->n_zero--;
    return body;
  }
  /* a run-time trip count is read before the loop binds its variable, and
   * may use the enclosing loops' (folded like any expression) */
  const tir_expr_t* dyn = st->u.loop.dyn_extent ? simp(s, st->u.loop.dyn_extent) : NULL;
  if (st->u.loop.dyn_extent && !dyn) return NULL;
  bool pushed = tir_benv_push_var(&s->env, st->u.loop.var, 0, ext - 1);
  const tir_stmt_t* body = simp_stmt(s, st->u.loop.body);
  if (pushed) s->env.n_vars--;
  if (!body) return NULL;
  if (body == st->u.loop.body && dyn == st->u.loop.dyn_extent) return st;
  if (dyn) return tir_for_dyn(s->c, st->u.loop.var, ext, dyn, st->u.loop.kind, body);
  if (st->u.loop.kind == TIR_LOOP_BOUND)
    return tir_for_bound(s->c, st->u.loop.var, ext, st->u.loop.tag, body);
  return tir_for(s->c, st->u.loop.var, ext, st->u.loop.kind, body);
}

static const tir_stmt_t* simp_store(sctx_t* s, const tir_stmt_t* st) {
  const tir_buffer_t* b = st->u.store.buf;
  const tir_expr_t* idx[KILN_MAX_RANK];
  bool changed = false;
  for (int32_t i = 0; i < b->rank; ++i) {
    idx[i] = simp(s, st->u.store.idx[i]);
    if (!idx[i]) return NULL;
    changed |= idx[i] != st->u.store.idx[i];
  }
  if (st->kind == TIR_PREFETCH) return changed ? tir_prefetch(s->c, b, idx) : st;
  const tir_expr_t* v = simp(s, st->u.store.value);
  if (!v) return NULL;
  if (!changed && v == st->u.store.value) return st;
  return tir_store(s->c, b, idx, v);
}

static const tir_stmt_t* simp_seq(sctx_t* s, const tir_stmt_t* st) {
  int32_t n = st->u.seq.n;
  if (n == 0) return NULL;
  const tir_stmt_t** items = kiln_arena_alloc(&s->c->arena, sizeof(*items) * (size_t)n);
  if (!items) {
    s->c->oom = true;
    return NULL;
  }
  bool changed = false;
  int32_t total = 0;
  for (int32_t i = 0; i < n; ++i) {
    items[i] = simp_stmt(s, st->u.seq.items[i]);
    if (s->c->oom) return NULL;
    changed |= items[i] != st->u.seq.items[i];
    if (items[i]) total += items[i]->kind == TIR_SEQ ? items[i]->u.seq.n : 1;
    if (items[i] && items[i]->kind == TIR_SEQ) changed = true;
  }
  if (!changed) return st;
  if (total == 0) return NULL;
  const tir_stmt_t** flat = kiln_arena_alloc(&s->c->arena, sizeof(*flat) * (size_t)total);
  if (!flat) {
    s->c->oom = true;
    return NULL;
  }
  int32_t k = 0;
  for (int32_t i = 0; i < n; ++i) {
    const tir_stmt_t* it = items[i];
    if (!it) continue;
    if (it->kind == TIR_SEQ)
      for (int32_t j = 0; j < it->u.seq.n; ++j) flat[k++] = it->u.seq.items[j];
    else
      flat[k++] = it;
  }
  return tir_seq(s->c, k, flat);
}

static const tir_stmt_t* simp_if(sctx_t* s, const tir_stmt_t* st) {
  const tir_expr_t* c = simp(s, st->u.cond.cond);
  if (!c) return NULL;
  if (c->kind == TIR_INT) {
    const tir_stmt_t* pick = c->u.i ? st->u.cond.then_s : st->u.cond.else_s;
    return pick ? simp_stmt(s, pick) : NULL;
  }
  /* A branch whose guard facts are infeasible never runs: drop it. */
  tir_benv_mark_t mark = tir_benv_mark(&s->env);
  tir_benv_add_cond_facts(&s->env, c, false);
  bool t_dead = tir_benv_infeasible(&s->env, mark, c, false);
  const tir_stmt_t* t = t_dead ? NULL : simp_stmt(s, st->u.cond.then_s);
  tir_benv_restore(&s->env, mark);
  if (s->c->oom) return NULL;
  tir_benv_add_cond_facts(&s->env, c, true);
  bool f_dead = tir_benv_infeasible(&s->env, mark, c, true);
  const tir_stmt_t* f = (f_dead || !st->u.cond.else_s) ? NULL : simp_stmt(s, st->u.cond.else_s);
  tir_benv_restore(&s->env, mark);
  if (s->c->oom) return NULL;
  if (t_dead) return f;
  if (f_dead) return t; /* the condition always holds here */
  if (!t && !f) return NULL;
  if (!t) {
    const tir_expr_t* nc = simp_not(s, NULL, c);
    return tir_if(s->c, nc, f, NULL);
  }
  if (c == st->u.cond.cond && t == st->u.cond.then_s && f == st->u.cond.else_s) return st;
  return tir_if(s->c, c, t, f);
}

static const tir_stmt_t* simp_stmt(sctx_t* s, const tir_stmt_t* st) {
  if (!st) return NULL;
  switch (st->kind) {
    case TIR_FOR: return simp_loop(s, st);
    case TIR_STORE:
    case TIR_PREFETCH: return simp_store(s, st);
    case TIR_SEQ: return simp_seq(s, st);
    case TIR_IF: return simp_if(s, st);
    case TIR_ALLOC: {
      const tir_stmt_t* body = simp_stmt(s, st->u.alloc.body);
      if (!body) return NULL;
      if (body == st->u.alloc.body) return st;
      return tir_alloc(s->c, st->u.alloc.buf, body);
    }
    case TIR_BARRIER: return st;
  }
  return st;
}

/* ---- public ---------------------------------------------------------------- */

static void sctx_init(sctx_t* s, tir_ctx_t* c) {
  s->c = c;
  s->n_zero = 0;
  tir_benv_init(&s->env);
}

/* The environment is ~30 KB: heap, not stack (callers may run on small
 * thread stacks). */
static sctx_t* sctx_new(tir_ctx_t* c) {
  sctx_t* s = malloc(sizeof(*s));
  if (!s) {
    c->oom = true;
    return NULL;
  }
  sctx_init(s, c);
  return s;
}

const tir_expr_t* tir_simplify_expr(tir_ctx_t* c, const tir_expr_t* e) {
  if (!e) return NULL;
  sctx_t* s = sctx_new(c);
  if (!s) return NULL;
  const tir_expr_t* r = simp(s, e);
  free(s);
  return c->oom ? NULL : r;
}

const tir_stmt_t* tir_simplify_stmt(tir_ctx_t* c, const tir_stmt_t* st) {
  if (!st) return NULL;
  sctx_t* s = sctx_new(c);
  if (!s) return NULL;
  const tir_stmt_t* r = simp_stmt(s, st);
  free(s);
  if (c->oom) return NULL;
  /* Everything was dead: an empty sequence, so callers always get a tree. */
  return r ? r : tir_seq(c, 0, NULL);
}

tir_func_t* tir_simplify_func(tir_ctx_t* c, const tir_func_t* f) {
  if (!f) return NULL;
  const tir_stmt_t* body = tir_simplify_stmt(c, f->body);
  if (!body) return NULL;
  return tir_func(c, f->name, f->n_params, f->params, body);
}
