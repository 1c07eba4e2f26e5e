/* Tensor-IR verifier: the checks tir.h promises, with messages that name the
 * kernel, the access (buffer and index), and the enclosing loop ranges.
 *
 * Structure and types: every variable is bound by an enclosing loop (and no
 * loop rebinds a variable of an enclosing one); index expressions are I64;
 * operand dtypes agree; stores write the buffer's dtype; loop kinds and GPU
 * tags are consistent (no nested loops bound to the same id, no work-group
 * loop inside a work-item loop).
 *
 * Bounds (interval analysis, ir/tir_bounds.c): every index of every access
 * must lie in [0, dim) for all values of the enclosing loop variables. The
 * conditions of enclosing tir_if statements narrow the analysis: a guard
 * `E < c`, `E >= c`, `E == c` (or a comparison against any bounded
 * expression), and && chains of them, bound E and, through +, - and * by
 * constants, the variables inside E (the else branch uses the negation, e.g.
 * || chains); comparisons between two index expressions (`if (i < j)`) and
 * guards on sums are kept as linear relations, so `A[j - i - 1]` under
 * `i < j`, or `12x + 3y` under `4x + y <= 7`, are proven too. A select does
 * NOT guard loads in its branches: both branches may be evaluated (tir.h),
 * so clamp the index or use tir_if. The value of an index that is itself a
 * select is bounded per branch under that branch's condition.
 * Rule for indices that depend on loaded data (a load, or a float->int cast,
 * inside the index): when interval analysis cannot prove them in range they
 * are accepted only if an enclosing tir_if condition mentions one of those
 * loads/casts (structurally equal sub-expression), i.e. the lowering visibly
 * checked the data, and the (guard-narrowed) interval is not entirely
 * outside [0, dim); otherwise they are an error. Indices that do not depend
 * on data are an error whenever their interval leaves [0, dim). Accesses
 * that never execute -- inside a loop of extent 0, or a branch whose guard
 * facts contradict each other or the loop ranges -- are not bounds-checked.
 * Integer divisors of index arithmetic whose range includes 0 are an error.
 *
 * Scopes: GLOBAL buffers must be kernel parameters; LOCAL/PRIVATE buffers are
 * only used inside their tir_alloc. A PRIVATE (per work-item) buffer must not
 * be used inside a parallel or GPU-bound loop that lies between its alloc and
 * the use (every thread would share one copy); a LOCAL (work-group) buffer
 * must not be used inside a work-group (blockIdx) loop that lies inside its
 * alloc, nor written inside a CPU parallel loop that lies inside its alloc.
 * A LOCAL alloc may sit inside work-item (threadIdx) loops: the work-item
 * loops conventionally enclose the whole work-group body (copy, barrier,
 * compute), and the buffer is still one per work-group.
 *
 * Barriers: a barrier must not sit under a tir_if whose condition depends on
 * a work-item (threadIdx) variable.
 *
 * Races (kernels with threadIdx-bound loops only): between a store to a
 * LOCAL buffer and a load of it that can follow (in program order, or in the
 * next iteration of an enclosing serial loop) with no barrier on the way, the
 * pair races when the two accesses are done by different work-items: their
 * sets of threadIdx variables (from the indices and enclosing guards) differ,
 * or they are the same non-empty set but the index tuples are not
 * structurally identical (a work-item reading a slot another one wrote). Both
 * read-after-write and write-after-read (a load, then the next iteration's
 * store) are checked. A store whose value depends on a threadIdx variable
 * that neither its index nor an enclosing guard mentions is a write-write
 * race (several work-items write different values into one element).
 * Dtypes: neg, fabs and pow accept integers; the other intrinsics are float
 * math; arithmetic other than min/max is not defined on bool.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir/tir_analysis.h"
#include "ir/tir_visit.h"

#define MAX_LOOPS TIR_BENV_MAX_VARS
#define MAX_ALLOCS 64
#define MAX_GUARDS 128
#define STR 256
/* Propagates a status unchanged (the messages are complete already). */
#define TRY(expr)                    \
  do {                               \
    kiln_status_t try_s_ = (expr);   \
    if (try_s_) return try_s_;       \
  } while (0)

typedef struct alloc_rec_s {
  const tir_buffer_t* buf;
  int32_t depth; /* loops enclosing the alloc */
} alloc_rec_t;

typedef struct vctx_s {
  const tir_func_t* f;
  const tir_stmt_t* loops[MAX_LOOPS];
  int32_t n_loops;
  alloc_rec_t allocs[MAX_ALLOCS];
  int32_t n_allocs;
  const tir_expr_t* guards[MAX_GUARDS];
  int32_t n_guards;
  int32_t dead;             /* > 0 inside a loop of extent 0 */
  const tir_stmt_t* stmt;   /* statement being checked, for messages */
  tir_benv_t env;
} vctx_t;

static bool is_thread_tag(tir_thread_tag_t t) { return t >= TIR_THREAD_X && t <= TIR_THREAD_Z; }
static bool is_block_tag(tir_thread_tag_t t) { return t >= TIR_BLOCK_X && t <= TIR_BLOCK_Z; }
static const char* scope_name(tir_scope_t s) {
  return s == TIR_SCOPE_GLOBAL ? "global" : (s == TIR_SCOPE_LOCAL ? "local" : "private");
}

/* "n: 0..1, oc: 0..64" for the given loop stack. */
static void loops_str(const tir_stmt_t* const* loops, int32_t n, char* buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  for (int32_t i = 0; i < n && len + 1 < cap; ++i) {
    const tir_stmt_t* l = loops[i];
    int k = snprintf(buf + len, cap - len, "%s%s: 0..%lld", i ? ", " : "", l->u.loop.var->name,
                     (long long)l->u.loop.extent);
    if (k < 0) break;
    len += (size_t)k;
  }
  if (len >= cap && cap > 4) memcpy(buf + cap - 4, "...", 4);
}

/* Describes the statement being checked: "store Y[n, h]" / "if (cond)". */
static void stmt_str(const tir_stmt_t* s, char* buf, size_t cap) {
  char t[STR];
  if (!s) snprintf(buf, cap, "kernel body");
  else if (s->kind == TIR_STORE)
    snprintf(buf, cap, "store %s", tir_access_to_str(s->u.store.buf, s->u.store.idx, t, sizeof t));
  else if (s->kind == TIR_IF)
    snprintf(buf, cap, "if (%s)", tir_expr_to_str(s->u.cond.cond, t, sizeof t));
  else if (s->kind == TIR_FOR)
    snprintf(buf, cap, "loop '%s'", s->u.loop.var->name);
  else if (s->kind == TIR_ALLOC)
    snprintf(buf, cap, "alloc '%s'", s->u.alloc.buf->name);
  else
    snprintf(buf, cap, "barrier");
}

static kiln_status_t fail(vctx_t* c, kiln_status_code_t code, const char* fmt, ...)
    KILN_PRINTF(3, 4);
static kiln_status_t fail(vctx_t* c, kiln_status_code_t code, const char* fmt, ...) {
  char msg[1024], loops[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  loops_str(c->loops, c->n_loops, loops, sizeof loops);
  if (c->n_loops)
    return kiln_make_status(code, "kernel %s: %s (loops: %s)", c->f->name, msg, loops);
  return kiln_make_status(code, "kernel %s: %s", c->f->name, msg);
}

/* ---- expressions -------------------------------------------------------- */

static bool is_float(kiln_dtype_t t) { return kiln_dtype_is_float(t); }
static bool is_int(kiln_dtype_t t) { return kiln_dtype_is_int(t); }

static int32_t intrin_arity(tir_intrin_t fn) {
  return (fn == TIR_POW || fn == TIR_FMOD || fn == TIR_F8_DECODE || fn == TIR_F8_ENCODE) ? 2 : (fn == TIR_FMA || fn == TIR_DOT2_I16 || fn == TIR_DOT4_U8I8 ? 3 : 1);
}

static const char* binop_name(tir_binop_t op) {
  static const char* const k[TIR_BINOP_COUNT_] = {
      "+", "-", "*", "/", "//", "%", "min", "max", "==", "!=", "<", "<=", ">", ">=", "&&", "||",
      "&", "|", "^"};
  return (op >= 0 && op < TIR_BINOP_COUNT_) ? k[op] : "?";
}

/* Data-dependent leaves of an index: loads and float->int casts. */
typedef struct leaves_s {
  const tir_expr_t** out;
  int32_t n, cap;
} leaves_t;

static bool leaf_pre(tir_visitor_t* v, const tir_expr_t* e) {
  leaves_t* l = v->user;
  if (l->n >= l->cap) {
    v->stop = true;
    return false;
  }
  bool leaf = e->kind == TIR_LOAD ||
              (e->kind == TIR_CAST && !is_int(e->u.cast.value->dtype) &&
               e->u.cast.value->dtype != KILN_DTYPE_BOOL);
  if (leaf) l->out[l->n++] = e;
  return !leaf;
}

static int32_t data_leaves(const tir_expr_t* e, const tir_expr_t** out, int32_t n, int32_t cap) {
  leaves_t l = {out, n, cap};
  tir_visitor_t v = {.user = &l, .expr_pre = leaf_pre};
  tir_visit_expr(&v, e);
  return l.n;
}

static bool has_data(const tir_expr_t* e) {
  const tir_expr_t* leaf[1];
  return data_leaves(e, leaf, 0, 1) > 0;
}

static kiln_status_t check_expr(vctx_t* c, const tir_expr_t* e, bool in_select);

/* "store B[i]" / "load A[i] in store B[i]": built only for error messages. */
static const char* where_str(vctx_t* c, const tir_buffer_t* b, const tir_expr_t* const* idx,
                             bool is_store, char* buf, size_t n) {
  char acc[STR], st[STR + 16];
  tir_access_to_str(b, idx, acc, sizeof acc);
  if (is_store) {
    snprintf(buf, n, "store %s", acc);
  } else {
    stmt_str(c->stmt, st, sizeof st);
    snprintf(buf, n, "load %s in %s", acc, st);
  }
  return buf;
}

#define WHERE where_str(c, b, idx, is_store, where, sizeof where)

static kiln_status_t check_buffer_use(vctx_t* c, const tir_buffer_t* b,
                                      const tir_expr_t* const* idx, bool is_store) {
  char where[2 * STR + 32];
  for (int32_t d = 0; d < b->rank; ++d)
    if (b->shape[d] < 0)
      return fail(c, KILN_INVALID_ARGUMENT, "%s: buffer '%s' has negative dim %d (%lld)", WHERE,
                  b->name, d, (long long)b->shape[d]);
  if (b->scope == TIR_SCOPE_GLOBAL) {
    for (int32_t i = 0; i < c->f->n_params; ++i)
      if (c->f->params[i] == b) return NULL;
    return fail(c, KILN_INVALID_ARGUMENT,
                "%s: global buffer '%s' is not a parameter of the kernel", WHERE, b->name);
  }
  int32_t a = c->n_allocs - 1;
  while (a >= 0 && c->allocs[a].buf != b) --a;
  if (a < 0)
    return fail(c, KILN_INVALID_ARGUMENT, "%s: %s buffer '%s' is used outside its alloc", WHERE,
                scope_name(b->scope), b->name);
  for (int32_t i = c->allocs[a].depth; i < c->n_loops; ++i) {
    const tir_stmt_t* l = c->loops[i];
    tir_loop_kind_t k = l->u.loop.kind;
    if (b->scope == TIR_SCOPE_PRIVATE && (k == TIR_LOOP_PARALLEL || k == TIR_LOOP_BOUND))
      return fail(c, KILN_INVALID_ARGUMENT,
                  "%s: private buffer '%s' is allocated outside loop '%s' (%s) but used inside "
                  "it; every thread would share one copy: allocate it inside that loop",
                  WHERE, b->name, l->u.loop.var->name,
                  k == TIR_LOOP_PARALLEL ? "parallel" : tir_thread_tag_name(l->u.loop.tag));
    if (b->scope == TIR_SCOPE_LOCAL && k == TIR_LOOP_BOUND && is_block_tag(l->u.loop.tag))
      return fail(c, KILN_INVALID_ARGUMENT,
                  "%s: local buffer '%s' is allocated outside loop '%s' (%s) but used inside "
                  "it; work-group memory cannot be shared between work-groups",
                  WHERE, b->name, l->u.loop.var->name, tir_thread_tag_name(l->u.loop.tag));
    if (b->scope == TIR_SCOPE_LOCAL && k == TIR_LOOP_PARALLEL && is_store)
      return fail(c, KILN_INVALID_ARGUMENT,
                  "%s: local buffer '%s' is written inside parallel loop '%s' but allocated "
                  "outside it (all threads would write one copy)",
                  WHERE, b->name, l->u.loop.var->name);
  }
  return NULL;
}

static kiln_status_t check_access(vctx_t* c, const tir_buffer_t* b, const tir_expr_t* const* idx,
                                  bool is_store, bool in_select) {
  char where[2 * STR + 32], e[STR], lo[32], hi[32];
  if (!b) return fail(c, KILN_INVALID_ARGUMENT, "access to a NULL buffer");
  if (!idx && b->rank > 0)
    return fail(c, KILN_INVALID_ARGUMENT, "access to '%s' has no indices", b->name);
  for (int32_t d = 0; d < b->rank; ++d)
    if (!idx[d])
      return fail(c, KILN_INVALID_ARGUMENT, "access to '%s': index %d is NULL", b->name, d);
  TRY(check_buffer_use(c, b, idx, is_store));
  for (int32_t d = 0; d < b->rank; ++d) {
    if (idx[d]->dtype != KILN_DTYPE_I64)
      return fail(c, KILN_INVALID_ARGUMENT, "%s: index %d (%s) has dtype %s, expected i64", WHERE,
                  d, tir_expr_to_str(idx[d], e, sizeof e), kiln_dtype_name(idx[d]->dtype));
    TRY(check_expr(c, idx[d], false));
  }
  if (c->dead) return NULL;
  for (int32_t d = 0; d < b->rank; ++d) {
    tir_ival_t r = tir_bounds_eval(&c->env, idx[d]);
    if (r.lo > r.hi) continue; /* contradictory guards: never executed */
    if (tir_ival_finite(r) && r.lo >= 0 && r.hi < b->shape[d]) continue;
    const tir_expr_t* leaves[16];
    int32_t nl = data_leaves(idx[d], leaves, 0, 16);
    bool mentioned = false;
    for (int32_t g = 0; g < c->n_guards && !mentioned; ++g)
      for (int32_t i = 0; i < nl && !mentioned; ++i)
        mentioned = tir_expr_contains(c->guards[g], leaves[i]);
    bool always_out = r.hi < 0 || r.lo >= b->shape[d];
    if (mentioned && !always_out) continue;
    const char* hint = in_select
                           ? "; a select does not guard the loads in its branches (both may be "
                             "evaluated): clamp the index or use an enclosing if"
                           : "";
    tir_expr_to_str(idx[d], e, sizeof e);
    if (tir_ival_finite(r))
      return fail(c, KILN_OUT_OF_RANGE,
                  "%s: index %d (%s) ranges over [%lld, %lld], outside [0, %lld) of buffer "
                  "'%s'%s",
                  WHERE, d, e, (long long)r.lo, (long long)r.hi, (long long)b->shape[d],
                  b->name, hint);
    if (nl > 0)
      return fail(c, KILN_OUT_OF_RANGE,
                  "%s: index %d (%s) depends on loaded data and cannot be bounded, and no "
                  "enclosing if tests it; guard it or clamp it into [0, %lld)%s",
                  WHERE, d, e, (long long)b->shape[d], hint);
    if (r.lo == TIR_NEG_INF) snprintf(lo, sizeof lo, "-inf");
    else snprintf(lo, sizeof lo, "%lld", (long long)r.lo);
    if (r.hi == TIR_POS_INF) snprintf(hi, sizeof hi, "+inf");
    else snprintf(hi, sizeof hi, "%lld", (long long)r.hi);
    return fail(c, KILN_OUT_OF_RANGE,
                "%s: index %d (%s) cannot be bounded (range [%s, %s]) for a dim of size %lld",
                WHERE, d, e, lo, hi, (long long)b->shape[d]);
  }
  return NULL;
}

static kiln_status_t check_expr(vctx_t* c, const tir_expr_t* e, bool in_select) {
  char s[STR], st[STR + 16];
  if (!e) {
    stmt_str(c->stmt, st, sizeof st);
    return fail(c, KILN_INVALID_ARGUMENT, "%s: NULL expression", st);
  }
  switch (e->kind) {
    case TIR_INT:
      if (!is_int(e->dtype) && e->dtype != KILN_DTYPE_BOOL) goto bad_dtype;
      return NULL;
    case TIR_FLOAT:
      if (!is_float(e->dtype)) goto bad_dtype;
      return NULL;
    case TIR_VARREF:
      if (e->dtype != KILN_DTYPE_I64) goto bad_dtype;
      for (int32_t i = c->n_loops - 1; i >= 0; --i)
        if (c->loops[i]->u.loop.var == e->u.var) return NULL;
      stmt_str(c->stmt, st, sizeof st);
      return fail(c, KILN_INVALID_ARGUMENT,
                  "%s: variable '%s' (id %d) is not bound by an enclosing loop", st,
                  e->u.var->name, e->u.var->id);
    case TIR_BINARY: {
      const tir_expr_t* a = e->u.bin.a;
      const tir_expr_t* b = e->u.bin.b;
      tir_binop_t op = e->u.bin.op;
      TRY(check_expr(c, a, in_select));
      TRY(check_expr(c, b, in_select));
      if (op < 0 || op >= TIR_BINOP_COUNT_) goto bad_dtype;
      if (a->dtype != b->dtype) {
        stmt_str(c->stmt, st, sizeof st);
        return fail(c, KILN_INVALID_ARGUMENT,
                    "%s: operands of '%s' have different dtypes %s and %s in %s (use tir_cast)",
                    st, binop_name(op), kiln_dtype_name(a->dtype), kiln_dtype_name(b->dtype),
                    tir_expr_to_str(e, s, sizeof s));
      }
      if (op >= TIR_EQ && op <= TIR_OR) {
        if (e->dtype != KILN_DTYPE_BOOL) goto bad_dtype;
        if ((op == TIR_AND || op == TIR_OR) && a->dtype != KILN_DTYPE_BOOL) goto bad_dtype;
        return NULL;
      }
      if (e->dtype != a->dtype) goto bad_dtype;
      if (a->dtype == KILN_DTYPE_BOOL && op != TIR_MIN && op != TIR_MAX) goto bad_dtype;
      if ((op == TIR_FLOORDIV || op == TIR_FLOORMOD) && !is_int(a->dtype)) goto bad_dtype;
      if ((op == TIR_BAND || op == TIR_BOR || op == TIR_BXOR) && !is_int(a->dtype)) goto bad_dtype;
      if ((op == TIR_FLOORDIV || op == TIR_FLOORMOD || op == TIR_DIV) && is_int(a->dtype) &&
          !c->dead && !has_data(b)) {
        tir_ival_t r = tir_bounds_eval(&c->env, b);
        if (r.lo <= 0 && r.hi >= 0 && r.lo <= r.hi) {
          stmt_str(c->stmt, st, sizeof st);
          return fail(c, KILN_INVALID_ARGUMENT, "%s: divisor of %s can be zero", st,
                      tir_expr_to_str(e, s, sizeof s));
        }
      }
      return NULL;
    }
    case TIR_SELECT:
      TRY(check_expr(c, e->u.sel.cond, in_select));
      TRY(check_expr(c, e->u.sel.t, true));
      TRY(check_expr(c, e->u.sel.f, true));
      if (e->u.sel.cond->dtype != KILN_DTYPE_BOOL || e->u.sel.t->dtype != e->dtype ||
          e->u.sel.f->dtype != e->dtype)
        goto bad_dtype;
      return NULL;
    case TIR_LOAD:
      if (e->u.load.buf && e->dtype != e->u.load.buf->dtype) goto bad_dtype;
      return check_access(c, e->u.load.buf, e->u.load.idx, false, in_select);
    case TIR_CAST: return check_expr(c, e->u.cast.value, in_select);
    case TIR_CALL: {
      tir_intrin_t fn = e->u.call.fn;
      if (fn < 0 || fn >= TIR_INTRIN_COUNT_ || e->u.call.n != intrin_arity(fn)) goto bad_dtype;
      if (fn == TIR_F8_DECODE || fn == TIR_F8_ENCODE) {
        const tir_expr_t *v = e->u.call.args[0], *k = e->u.call.args[1];
        TRY(check_expr(c, v, in_select));
        const bool dec = fn == TIR_F8_DECODE;
        if (v->dtype != (dec ? KILN_DTYPE_I32 : KILN_DTYPE_F32) ||
            e->dtype != (dec ? KILN_DTYPE_F32 : KILN_DTYPE_I32) || k->kind != TIR_INT ||
            k->dtype != KILN_DTYPE_I32 || k->u.i < 0 || k->u.i >= (dec ? 4 : 8))
          return fail(c, KILN_INVALID_ARGUMENT, "%s: operands or variant out of place",
                      dec ? "f8_decode" : "f8_encode");
        return NULL;
      }
      for (int32_t i = 0; i < e->u.call.n; ++i) {
        const tir_expr_t* a = e->u.call.args[i];
        TRY(check_expr(c, a, in_select));
        const kiln_dtype_t want = fn == TIR_NOT ? KILN_DTYPE_BOOL : fn == TIR_WIDEN_I8X2 ? KILN_DTYPE_I16 : e->dtype;
        if (a->dtype != want) goto bad_dtype;
      }
      if (fn == TIR_WIDEN_I8X2) {
        if (e->dtype != KILN_DTYPE_I32) goto bad_dtype;
        return NULL;
      }
      if (fn == TIR_NOT) {
        if (e->dtype != KILN_DTYPE_BOOL) goto bad_dtype;
        return NULL;
      }
      if (fn == TIR_DOT2_I16 || fn == TIR_DOT4_U8I8)
        return e->dtype == KILN_DTYPE_I32 ? NULL
                                          : fail(c, KILN_INVALID_ARGUMENT, "%s on %s values",
                                                 fn == TIR_DOT2_I16 ? "dot2_i16" : "dot4_u8i8", kiln_dtype_name(e->dtype));
      /* neg, fabs and pow also work on integers; the others are float math. */
      if (fn != TIR_NEG && fn != TIR_FABS && fn != TIR_POW && !is_float(e->dtype)) goto bad_dtype;
      if (e->dtype == KILN_DTYPE_BOOL) goto bad_dtype;
      return NULL;
    }
  }
bad_dtype:
  stmt_str(c->stmt, st, sizeof st);
  return fail(c, KILN_INVALID_ARGUMENT, "%s: ill-typed expression %s (dtype %s)", st,
              tir_expr_to_str(e, s, sizeof s), kiln_dtype_name(e->dtype));
}

/* ---- statements --------------------------------------------------------- */

static kiln_status_t check_stmt(vctx_t* c, const tir_stmt_t* s);

static kiln_status_t check_loop(vctx_t* c, const tir_stmt_t* s) {
  const tir_var_t* v = s->u.loop.var;
  c->stmt = s;
  if (!v) return fail(c, KILN_INVALID_ARGUMENT, "loop without a variable");
  if (!s->u.loop.body) return fail(c, KILN_INVALID_ARGUMENT, "loop '%s' has no body", v->name);
  if (s->u.loop.extent < 0)
    return fail(c, KILN_INVALID_ARGUMENT, "loop '%s' has negative extent %lld", v->name,
                (long long)s->u.loop.extent);
  tir_loop_kind_t k = s->u.loop.kind;
  tir_thread_tag_t tag = s->u.loop.tag;
  if (k < TIR_LOOP_SERIAL || k > TIR_LOOP_BOUND)
    return fail(c, KILN_INVALID_ARGUMENT, "loop '%s' has invalid kind %d", v->name, (int)k);
  if (k == TIR_LOOP_BOUND && !is_thread_tag(tag) && !is_block_tag(tag))
    return fail(c, KILN_INVALID_ARGUMENT, "loop '%s' is bound but has no GPU id tag", v->name);
  if (k != TIR_LOOP_BOUND && tag != TIR_TAG_NONE)
    return fail(c, KILN_INVALID_ARGUMENT, "loop '%s' has tag %s but is not a bound loop",
                v->name, tir_thread_tag_name(tag));
  for (int32_t i = 0; i < c->n_loops; ++i) {
    const tir_stmt_t* o = c->loops[i];
    if (o->u.loop.var == v)
      return fail(c, KILN_INVALID_ARGUMENT, "loop variable '%s' is bound by two nested loops",
                  v->name);
    if (k == TIR_LOOP_BOUND && o->u.loop.kind == TIR_LOOP_BOUND) {
      if (o->u.loop.tag == tag)
        return fail(c, KILN_INVALID_ARGUMENT,
                    "loops '%s' and '%s' are nested but both bound to %s", o->u.loop.var->name,
                    v->name, tir_thread_tag_name(tag));
      if (is_block_tag(tag) && is_thread_tag(o->u.loop.tag))
        return fail(c, KILN_INVALID_ARGUMENT,
                    "loop '%s' bound to %s is inside loop '%s' bound to %s (work-group loops "
                    "must enclose work-item loops)",
                    v->name, tir_thread_tag_name(tag), o->u.loop.var->name, tir_thread_tag_name(o->u.loop.tag));
    }
  }
  if (c->n_loops >= MAX_LOOPS)
    return fail(c, KILN_LIMIT_EXCEEDED, "loops nested deeper than %d", MAX_LOOPS);
  if (s->u.loop.dyn_extent) { /* read before the loop binds its variable */
    if (s->u.loop.dyn_extent->dtype != KILN_DTYPE_I64)
      return fail(c, KILN_INVALID_ARGUMENT, "loop '%s' has a run-time extent that is not I64", v->name);
    KILN_RETURN_IF_ERROR(check_expr(c, s->u.loop.dyn_extent, false));
  }
  /* A run-time extent bounds the variable tighter than the static one when
   * the dims' facts bound it (tir_verify_dims at one value of a dim): the
   * launch guarantees it is at most the static extent. */
  int64_t ext = s->u.loop.extent;
  if (s->u.loop.dyn_extent) {
    const tir_ival_t r = tir_bounds_eval(&c->env, s->u.loop.dyn_extent);
    if (r.hi != TIR_POS_INF && r.hi < ext) ext = r.hi > 0 ? r.hi : 0;
  }
  c->loops[c->n_loops++] = s;
  tir_benv_push_var(&c->env, v, 0, ext > 0 ? ext - 1 : 0);
  if (ext == 0) c->dead++;
  kiln_status_t st = check_stmt(c, s->u.loop.body);
  if (ext == 0) c->dead--;
  c->env.n_vars--;
  c->n_loops--;
  return st;
}

static bool uses_thread_var(const vctx_t* c, const tir_expr_t* e, const tir_stmt_t** which) {
  for (int32_t i = 0; i < c->n_loops; ++i) {
    const tir_stmt_t* l = c->loops[i];
    if (l->u.loop.kind == TIR_LOOP_BOUND && is_thread_tag(l->u.loop.tag) &&
        tir_expr_uses_var(e, l->u.loop.var)) {
      *which = l;
      return true;
    }
  }
  return false;
}

static kiln_status_t check_stmt(vctx_t* c, const tir_stmt_t* s) {
  char t[STR];
  if (!s) return fail(c, KILN_INVALID_ARGUMENT, "NULL statement");
  switch (s->kind) {
    case TIR_FOR: return check_loop(c, s);
    case TIR_STORE: {
      c->stmt = s;
      const tir_buffer_t* b = s->u.store.buf;
      TRY(check_access(c, b, s->u.store.idx, true, false));
      if (!s->u.store.value)
        return fail(c, KILN_INVALID_ARGUMENT, "store %s has no value",
                    tir_access_to_str(b, s->u.store.idx, t, sizeof t));
      TRY(check_expr(c, s->u.store.value, false));
      if (s->u.store.value->dtype != b->dtype)
        return fail(c, KILN_INVALID_ARGUMENT,
                    "store %s: value has dtype %s but buffer '%s' is %s (use tir_cast)",
                    tir_access_to_str(b, s->u.store.idx, t, sizeof t),
                    kiln_dtype_name(s->u.store.value->dtype), b->name, kiln_dtype_name(b->dtype));
      return NULL;
    }
    case TIR_SEQ:
      if (s->u.seq.n > 0 && !s->u.seq.items)
        return fail(c, KILN_INVALID_ARGUMENT, "sequence without items");
      for (int32_t i = 0; i < s->u.seq.n; ++i) TRY(check_stmt(c, s->u.seq.items[i]));
      return NULL;
    case TIR_IF: {
      c->stmt = s;
      const tir_expr_t* cond = s->u.cond.cond;
      TRY(check_expr(c, cond, false));
      if (cond->dtype != KILN_DTYPE_BOOL)
        return fail(c, KILN_INVALID_ARGUMENT, "if (%s): condition has dtype %s, expected bool",
                    tir_expr_to_str(cond, t, sizeof t), kiln_dtype_name(cond->dtype));
      if (!s->u.cond.then_s) return fail(c, KILN_INVALID_ARGUMENT, "if without a then branch");
      if (c->n_guards >= MAX_GUARDS)
        return fail(c, KILN_LIMIT_EXCEEDED, "ifs nested deeper than %d", MAX_GUARDS);
      c->guards[c->n_guards++] = cond;
      /* A branch whose guard is infeasible never runs: its accesses are not
       * bounds-checked (like a loop of extent 0). */
      tir_benv_mark_t mark = tir_benv_mark(&c->env);
      tir_benv_add_cond_facts(&c->env, cond, false);
      int32_t dead = tir_benv_infeasible(&c->env, mark, cond, false);
      c->dead += dead;
      kiln_status_t st = check_stmt(c, s->u.cond.then_s);
      c->dead -= dead;
      tir_benv_restore(&c->env, mark);
      if (!st && s->u.cond.else_s) {
        tir_benv_add_cond_facts(&c->env, cond, true);
        dead = tir_benv_infeasible(&c->env, mark, cond, true);
        c->dead += dead;
        st = check_stmt(c, s->u.cond.else_s);
        c->dead -= dead;
        tir_benv_restore(&c->env, mark);
      }
      c->n_guards--;
      return st;
    }
    case TIR_ALLOC: {
      c->stmt = s;
      const tir_buffer_t* b = s->u.alloc.buf;
      if (!b || !s->u.alloc.body)
        return fail(c, KILN_INVALID_ARGUMENT, "alloc without buffer or body");
      if (b->scope != TIR_SCOPE_LOCAL && b->scope != TIR_SCOPE_PRIVATE)
        return fail(c, KILN_INVALID_ARGUMENT,
                    "alloc of buffer '%s' with %s scope (only local/private buffers are "
                    "allocated inside a kernel)",
                    b->name, scope_name(b->scope));
      for (int32_t i = 0; i < c->n_allocs; ++i)
        if (c->allocs[i].buf == b)
          return fail(c, KILN_INVALID_ARGUMENT, "buffer '%s' is allocated twice (nested allocs)",
                      b->name);
      for (int32_t d = 0; d < b->rank; ++d)
        if (b->shape[d] < 0)
          return fail(c, KILN_INVALID_ARGUMENT, "alloc '%s': negative dim %d (%lld)", b->name, d,
                      (long long)b->shape[d]);
      if (c->n_allocs >= MAX_ALLOCS)
        return fail(c, KILN_LIMIT_EXCEEDED, "allocs nested deeper than %d", MAX_ALLOCS);
      c->allocs[c->n_allocs].buf = b;
      c->allocs[c->n_allocs].depth = c->n_loops;
      c->n_allocs++;
      kiln_status_t st = check_stmt(c, s->u.alloc.body);
      c->n_allocs--;
      return st;
    }
    case TIR_BARRIER:
      c->stmt = s;
      for (int32_t g = 0; g < c->n_guards; ++g) {
        const tir_stmt_t* l = NULL;
        if (uses_thread_var(c, c->guards[g], &l))
          return fail(c, KILN_INVALID_ARGUMENT,
                      "barrier inside 'if (%s)' whose condition depends on work-item id '%s' "
                      "(%s): every work-item of the group must reach the barrier",
                      tir_expr_to_str(c->guards[g], t, sizeof t), l->u.loop.var->name,
                      tir_thread_tag_name(l->u.loop.tag));
      }
      return NULL;
    case TIR_PREFETCH:
      c->stmt = s;
      return check_access(c, s->u.store.buf, s->u.store.idx, false, false);
  }
  return fail(c, KILN_INVALID_ARGUMENT, "statement of unknown kind %d", (int)s->kind);
}

/* ---- race check ----------------------------------------------------------- */

typedef struct acc_s {
  const tir_buffer_t* buf;
  const tir_expr_t* const* idx;
  const tir_stmt_t* stmt; /* the store statement (or if) containing it */
  uint64_t tmask;         /* threadIdx vars it depends on */
  bool store;
} acc_t;

typedef struct accs_s {
  int32_t n, cap;
  acc_t* v;
} accs_t;

/* F: accesses reachable from the entry without a barrier; L: accesses from
 * which the exit is reachable without a barrier; T: some path crosses the
 * statement without a barrier. */
typedef struct eff_s {
  accs_t F, L;
  bool T;
} eff_t;

typedef struct rctx_s {
  const tir_func_t* f;
  int32_t n_tvars;
  const tir_var_t* tvars[64];
  uint64_t guard_mask; /* thread vars of the enclosing guards */
  bool oom;
} rctx_t;

static void accs_free(accs_t* a) {
  free(a->v);
  memset(a, 0, sizeof(*a));
}
static void eff_free(eff_t* e) {
  accs_free(&e->F);
  accs_free(&e->L);
}
static void eff_empty(eff_t* e) {
  memset(e, 0, sizeof(*e));
  e->T = true;
}

static bool same_idx(const acc_t* a, const acc_t* b) {
  if (a->buf != b->buf) return false;
  for (int32_t i = 0; i < a->buf->rank; ++i)
    if (!tir_expr_equal(a->idx[i], b->idx[i])) return false;
  return true;
}

static void accs_add(rctx_t* r, accs_t* a, const acc_t* x) {
  for (int32_t i = 0; i < a->n; ++i) {
    const acc_t* y = &a->v[i];
    if (y->store == x->store && y->tmask == x->tmask && same_idx(x, y)) return;
  }
  if (a->n == a->cap) {
    int32_t cap = a->cap ? a->cap * 2 : 8;
    acc_t* v = realloc(a->v, sizeof(*v) * (size_t)cap);
    if (!v) {
      r->oom = true;
      return;
    }
    a->v = v;
    a->cap = cap;
  }
  a->v[a->n++] = *x;
}

static void accs_union(rctx_t* r, accs_t* dst, const accs_t* src) {
  for (int32_t i = 0; i < src->n; ++i) accs_add(r, dst, &src->v[i]);
}

static uint64_t tmask_of(const rctx_t* r, const tir_expr_t* e) {
  uint64_t m = 0;
  for (int32_t i = 0; i < r->n_tvars; ++i)
    if (tir_expr_uses_var(e, r->tvars[i])) m |= (uint64_t)1 << i;
  return m;
}

static bool races(const acc_t* a, const acc_t* b) {
  if (a->buf != b->buf || a->store == b->store) return false;
  if (a->tmask != b->tmask) return true;
  return a->tmask != 0 && !same_idx(a, b);
}

/* Finds the loops enclosing |target| (first occurrence) for messages. */
typedef struct path_s {
  const tir_stmt_t* target;
  const tir_stmt_t** loops;
  int32_t depth; /* loops entered; the first MAX_LOOPS are kept */
} path_t;

static bool path_pre(tir_visitor_t* v, const tir_stmt_t* s) {
  path_t* p = v->user;
  if (s == p->target) {
    v->stop = true;
    return false;
  }
  if (s->kind == TIR_FOR && p->depth++ < MAX_LOOPS) p->loops[p->depth - 1] = s;
  return true;
}

static void path_post(tir_visitor_t* v, const tir_stmt_t* s) {
  if (s->kind == TIR_FOR) ((path_t*)v->user)->depth--;
}

static void find_path(const tir_stmt_t* s, const tir_stmt_t* target, const tir_stmt_t** path,
                      int32_t* n) {
  path_t p = {target, path, 0};
  tir_visitor_t v = {.user = &p, .stmt_pre = path_pre, .stmt_post = path_post};
  tir_visit_stmt(&v, s);
  *n = v.stop ? (p.depth < MAX_LOOPS ? p.depth : MAX_LOOPS) : 0;
}

static kiln_status_t race_error(rctx_t* r, const acc_t* a, const acc_t* b, const char* how) {
  const acc_t* st = a->store ? a : b;
  const acc_t* ld = a->store ? b : a;
  char s1[STR], s2[STR], l1[512], l2[512];
  const tir_stmt_t* path[MAX_LOOPS];
  int32_t n = 0;
  find_path(r->f->body, st->stmt, path, &n);
  loops_str(path, n, l1, sizeof l1);
  n = 0;
  find_path(r->f->body, ld->stmt, path, &n);
  loops_str(path, n, l2, sizeof l2);
  return kiln_make_status(
      KILN_INVALID_ARGUMENT,
      "kernel %s: race on local buffer '%s': store %s (loops: %s) and load %s (loops: %s) are "
      "done by different work-items with no barrier in between (%s)",
      r->f->name, st->buf->name, tir_access_to_str(st->buf, st->idx, s1, sizeof s1), l1,
      tir_access_to_str(ld->buf, ld->idx, s2, sizeof s2), l2, how);
}

static kiln_status_t conflict_error(rctx_t* r, const acc_t* a, uint64_t extra) {
  int32_t v = 0;
  while (v < 63 && !(extra & ((uint64_t)1 << v))) ++v;
  char s1[STR], l1[512];
  const tir_stmt_t* path[MAX_LOOPS];
  int32_t n = 0;
  find_path(r->f->body, a->stmt, path, &n);
  loops_str(path, n, l1, sizeof l1);
  return kiln_make_status(
      KILN_INVALID_ARGUMENT,
      "kernel %s: race on local buffer '%s': store %s (loops: %s) is done by work-items that "
      "differ in '%s' and write different values to the same element (the index does not "
      "depend on '%s'); index the buffer by it or let one work-item write",
      r->f->name, a->buf->name, tir_access_to_str(a->buf, a->idx, s1, sizeof s1), l1,
      r->tvars[v]->name, r->tvars[v]->name);
}

static kiln_status_t check_pairs(rctx_t* r, const accs_t* before, const accs_t* after,
                                 const char* how) {
  for (int32_t i = 0; i < before->n; ++i)
    for (int32_t j = 0; j < after->n; ++j)
      if (races(&before->v[i], &after->v[j]))
        return race_error(r, &before->v[i], &after->v[j], how);
  return NULL;
}

/* Sequential composition a; b into a (b is consumed). */
static kiln_status_t eff_seq(rctx_t* r, eff_t* a, eff_t* b) {
  kiln_status_t st = check_pairs(r, &a->L, &b->F, "one follows the other");
  if (!st) {
    if (a->T) accs_union(r, &a->F, &b->F);
    if (b->T) accs_union(r, &b->L, &a->L);
    accs_free(&a->L);
    a->L = b->L;
    b->L.v = NULL;
    b->L.n = b->L.cap = 0;
    a->T = a->T && b->T;
  }
  eff_free(b);
  if (!st && r->oom) st = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory in race check");
  return st;
}

/* Loads of LOCAL buffers in |e|, as accesses by |stmt|. */
typedef struct loads_s {
  rctx_t* r;
  const tir_stmt_t* stmt;
  accs_t* out;
} loads_t;

static bool local_load_pre(tir_visitor_t* v, const tir_expr_t* e) {
  loads_t* l = v->user;
  if (e->kind != TIR_LOAD || e->u.load.buf->scope != TIR_SCOPE_LOCAL) return true;
  const tir_buffer_t* b = e->u.load.buf;
  acc_t a = {b, e->u.load.idx, l->stmt, l->r->guard_mask, false};
  for (int32_t i = 0; i < b->rank; ++i) a.tmask |= tmask_of(l->r, e->u.load.idx[i]);
  accs_add(l->r, l->out, &a);
  return true;
}

static void local_loads(rctx_t* r, const tir_expr_t* e, const tir_stmt_t* stmt, accs_t* out) {
  loads_t l = {r, stmt, out};
  tir_visitor_t v = {.user = &l, .expr_pre = local_load_pre};
  tir_visit_expr(&v, e);
}

static kiln_status_t race_stmt(rctx_t* r, const tir_stmt_t* s, eff_t* out) {
  eff_empty(out);
  switch (s->kind) {
    case TIR_BARRIER: out->T = false; return NULL;
    case TIR_PREFETCH: return NULL; /* reads nothing the kernel sees */
    case TIR_STORE: {
      const tir_buffer_t* b = s->u.store.buf;
      for (int32_t i = 0; i < b->rank; ++i) local_loads(r, s->u.store.idx[i], s, &out->F);
      local_loads(r, s->u.store.value, s, &out->F);
      if (b->scope == TIR_SCOPE_LOCAL) {
        acc_t a = {b, s->u.store.idx, s, r->guard_mask, true};
        for (int32_t i = 0; i < b->rank; ++i) a.tmask |= tmask_of(r, s->u.store.idx[i]);
        /* Work-items that differ only in a variable the index ignores write
         * the same element; with a value depending on it, they conflict. */
        uint64_t extra = tmask_of(r, s->u.store.value) & ~a.tmask;
        if (extra) {
          eff_free(out);
          return conflict_error(r, &a, extra);
        }
        accs_t one = {1, 1, &a};
        kiln_status_t st = check_pairs(r, &out->F, &one, "read and written by one statement");
        if (st) {
          eff_free(out);
          return st;
        }
        accs_add(r, &out->F, &a);
      }
      accs_union(r, &out->L, &out->F);
      break;
    }
    case TIR_SEQ:
      for (int32_t i = 0; i < s->u.seq.n; ++i) {
        eff_t e;
        kiln_status_t st = race_stmt(r, s->u.seq.items[i], &e);
        if (!st) st = eff_seq(r, out, &e);
        if (st) {
          eff_free(out);
          return st;
        }
      }
      break;
    case TIR_IF: {
      local_loads(r, s->u.cond.cond, s, &out->F);
      accs_union(r, &out->L, &out->F);
      uint64_t saved = r->guard_mask;
      r->guard_mask |= tmask_of(r, s->u.cond.cond);
      eff_t a, b;
      kiln_status_t st = race_stmt(r, s->u.cond.then_s, &a);
      if (st) {
        r->guard_mask = saved;
        eff_free(out);
        return st;
      }
      if (s->u.cond.else_s) {
        st = race_stmt(r, s->u.cond.else_s, &b);
        if (st) {
          r->guard_mask = saved;
          eff_free(&a);
          eff_free(out);
          return st;
        }
      } else {
        eff_empty(&b);
      }
      r->guard_mask = saved;
      accs_union(r, &a.F, &b.F);
      accs_union(r, &a.L, &b.L);
      a.T = a.T || b.T;
      eff_free(&b);
      st = eff_seq(r, out, &a);
      if (st) {
        eff_free(out);
        return st;
      }
      break;
    }
    case TIR_ALLOC: return race_stmt(r, s->u.alloc.body, out);
    case TIR_FOR: {
      if (s->u.loop.extent <= 0) return NULL;
      eff_free(out);
      kiln_status_t st = race_stmt(r, s->u.loop.body, out);
      if (st) return st;
      bool parallel_ids = s->u.loop.kind == TIR_LOOP_BOUND;
      if (!parallel_ids && s->u.loop.extent > 1) {
        st = check_pairs(r, &out->L, &out->F, "across iterations of the enclosing serial loop");
        if (st) {
          eff_free(out);
          return st;
        }
      }
      break;
    }
  }
  if (r->oom) {
    eff_free(out);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory in race check");
  }
  return NULL;
}

/* The loop variables bound to work-item ids (up to 64). */
static bool tvar_pre(tir_visitor_t* v, const tir_stmt_t* s) {
  rctx_t* r = v->user;
  if (s->kind == TIR_FOR && s->u.loop.kind == TIR_LOOP_BOUND && is_thread_tag(s->u.loop.tag) &&
      r->n_tvars < 64)
    r->tvars[r->n_tvars++] = s->u.loop.var;
  return true;
}

static void collect_tvars(rctx_t* r, const tir_stmt_t* s) {
  tir_visitor_t v = {.user = r, .stmt_pre = tvar_pre};
  tir_visit_stmt(&v, s);
}

/* ---- entry ------------------------------------------------------------- */

/* The values of dims[i] (what tir_verify_dims knows), as facts the interval
 * engine matches structurally against the kernel's loads of them. */
typedef struct dim_facts_s {
  tir_expr_t idx[TIR_VERIFY_MAX_DIMS];
  const tir_expr_t* pidx[TIR_VERIFY_MAX_DIMS];
  tir_expr_t load[TIR_VERIFY_MAX_DIMS];
} dim_facts_t;

static kiln_status_t verify(const tir_func_t* f, const tir_buffer_t* dims, int32_t n_dims, const int64_t* lo,
                            const int64_t* hi) {
  if (!f || !f->body)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "tir_verify: kernel %s has no body",
                            f && f->name ? f->name : "(null)");
  vctx_t* c = calloc(1, sizeof(*c));
  if (!c) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory verifying kernel %s", f->name);
  c->f = f;
  kiln_status_t st = NULL;
  dim_facts_t* df = n_dims > 0 ? calloc(1, sizeof(*df)) : NULL;
  if (n_dims > 0 && !df) st = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory verifying kernel %s", f->name);
  for (int32_t i = 0; i < n_dims && !st; ++i) {
    df->idx[i] = (tir_expr_t){.kind = TIR_INT, .dtype = KILN_DTYPE_I64, .u.i = i};
    df->pidx[i] = &df->idx[i];
    df->load[i] = (tir_expr_t){.kind = TIR_LOAD, .dtype = dims->dtype, .u.load = {dims, &df->pidx[i]}};
    c->env.facts[c->env.n_facts++] = (tir_fact_t){&df->load[i], lo[i], hi[i], false};
  }
  for (int32_t i = 0; i < f->n_params && !st; ++i) {
    const tir_buffer_t* b = f->params[i];
    if (!b) st = fail(c, KILN_INVALID_ARGUMENT, "parameter %d is NULL", i);
    else if (b->scope != TIR_SCOPE_GLOBAL)
      st = fail(c, KILN_INVALID_ARGUMENT, "parameter '%s' has %s scope, expected global", b->name,
                scope_name(b->scope));
    for (int32_t j = 0; j < i && !st; ++j)
      if (f->params[j] == b)
        st = fail(c, KILN_INVALID_ARGUMENT, "parameter '%s' is listed twice", b->name);
  }
  if (!st) st = check_stmt(c, f->body);
  free(c);
  free(df);
  if (st) return st;

  rctx_t r;
  memset(&r, 0, sizeof r);
  r.f = f;
  collect_tvars(&r, f->body);
  if (r.n_tvars == 0) return NULL;
  eff_t e;
  st = race_stmt(&r, f->body, &e);
  if (!st) eff_free(&e);
  return st;
}

kiln_status_t tir_verify(const tir_func_t* f) { return verify(f, NULL, 0, NULL, NULL); }

kiln_status_t tir_verify_dims(const tir_func_t* f, const tir_buffer_t* dims, int32_t n, const int64_t* lo,
                              const int64_t* hi) {
  if (n < 0 || n > TIR_VERIFY_MAX_DIMS || (n && (!dims || dims->rank != 1 || dims->shape[0] < n || !lo || !hi)))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "tir_verify_dims: %d dims (at most %d) in buffer '%s'", (int)n,
                            TIR_VERIFY_MAX_DIMS, dims ? dims->name : "(null)");
  for (int32_t i = 0; i < n; ++i)
    if (lo[i] > hi[i])
      return kiln_make_status(KILN_INVALID_ARGUMENT, "tir_verify_dims: dim %d range %lld..%lld is empty", (int)i,
                              (long long)lo[i], (long long)hi[i]);
  return verify(f, dims, n, lo, hi);
}
