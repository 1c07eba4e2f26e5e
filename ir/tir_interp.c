/* The tensor-IR interpreter (see ir/tir_interp.h).
 *
 * A tree walk over host memory. The first error is kept in the run state
 * and every evaluation after it returns at once, so deep recursion unwinds
 * without checking a status at every node. */
#include "ir/f8.h"
#include "ir/tir_interp.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ir/tir_analysis.h"

typedef struct bind_s {
  const tir_buffer_t* buf;
  void* data;
} bind_t;

typedef struct run_s {
  kiln_allocator_t allocator;
  bool both_arms;
  const char* kernel; /* for messages; NULL for a bare expression */
  bind_t* binds;      /* params, then scoped buffers innermost last */
  int32_t n_binds, cap_binds;
  int64_t* vars;      /* by variable id */
  bool* bound;
  int32_t cap_vars;
  /* tir_interp_eval_expr's variables: searched instead of a table, which
   * would cost an allocation per evaluation. */
  int32_t n_given;
  const tir_var_t* const* given;
  const int64_t* given_values;
  kiln_status_t err;
} run_t;

/* Keeps the first error; the message gets the kernel name in front. */
static void fail(run_t* r, kiln_status_code_t code, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(run_t* r, kiln_status_code_t code, const char* fmt, ...) {
  if (r->err) return;
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  r->err = r->kernel ? kiln_make_status(code, "kernel %s: %s", r->kernel, msg)
                     : kiln_make_status(code, "%s", msg);
}

static void oom(run_t* r, kiln_status_t s) {
  if (!r->err) r->err = s;
  else kiln_status_free(s);
}

/* Makes variable id |id| addressable. */
static bool var_slot(run_t* r, int32_t id) {
  if (id < 0) {
    fail(r, KILN_INVALID_ARGUMENT, "variable with negative id %d", id);
    return false;
  }
  if (id < r->cap_vars) return true;
  int32_t cap = r->cap_vars ? r->cap_vars : 64;
  while (cap <= id) cap *= 2;
  kiln_status_t s = kiln_allocator_realloc(r->allocator, sizeof(int64_t) * (size_t)cap,
                                           "interpreter variables", (void**)&r->vars);
  if (!s)
    s = kiln_allocator_realloc(r->allocator, sizeof(bool) * (size_t)cap, "interpreter variables",
                               (void**)&r->bound);
  if (s) {
    oom(r, s);
    return false;
  }
  memset(r->bound + r->cap_vars, 0, sizeof(bool) * (size_t)(cap - r->cap_vars));
  r->cap_vars = cap;
  return true;
}

static bool push_bind(run_t* r, const tir_buffer_t* b, void* data) {
  if (r->n_binds == r->cap_binds) {
    int32_t cap = r->cap_binds ? r->cap_binds * 2 : 16;
    kiln_status_t s = kiln_allocator_realloc(r->allocator, sizeof(bind_t) * (size_t)cap,
                                             "interpreter buffers", (void**)&r->binds);
    if (s) {
      oom(r, s);
      return false;
    }
    r->cap_binds = cap;
  }
  r->binds[r->n_binds].buf = b;
  r->binds[r->n_binds++].data = data;
  return true;
}

/* ---- values ----------------------------------------------------------- */

/* kiln_dtype_is_float, inlined: asked at nearly every node. */
static inline bool is_float(kiln_dtype_t t) {
  return t == KILN_DTYPE_F32 || t == KILN_DTYPE_F16 || t == KILN_DTYPE_F64;
}

static int64_t wrap(kiln_dtype_t t, int64_t v) {
  switch (t) {
    case KILN_DTYPE_I8: return (int8_t)(uint8_t)(uint64_t)v;
    case KILN_DTYPE_U8: return (uint8_t)(uint64_t)v;
    case KILN_DTYPE_I32: return (int32_t)(uint32_t)(uint64_t)v;
    case KILN_DTYPE_I16: return (int16_t)(uint16_t)(uint64_t)v;
    case KILN_DTYPE_U16: return (uint16_t)(uint64_t)v;
    case KILN_DTYPE_U32: return (uint32_t)(uint64_t)v;
    case KILN_DTYPE_BOOL: return v != 0;
    default: return v; /* i64, and u64 as its bit pattern */
  }
}

static double round_to(kiln_dtype_t t, double v) {
  if (t == KILN_DTYPE_F16) return kiln_f16_to_f32(kiln_f32_to_f16((float)v));
  if (t == KILN_DTYPE_F64) return v;
  return (float)v;
}

/* Float -> integer as targets do it without trapping: truncate, saturate,
 * NaN to 0. */
static int64_t f2i(double v) {
  if (v != v) return 0;
  if (v >= 9223372036854775808.0) return INT64_MAX;
  if (v <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)v;
}

static tir_value_t load_elem(kiln_dtype_t t, const void* data, int64_t off) {
  tir_value_t v = {0, 0};
  if (t == KILN_DTYPE_F32) v.f = ((const float*)data)[off];
  else if (t == KILN_DTYPE_F16) v.f = kiln_f16_to_f32(((const uint16_t*)data)[off]);
  else if (t == KILN_DTYPE_F64) v.f = ((const double*)data)[off];
  else v.i = kiln_load_i64(t, data, (size_t)off);
  return v;
}

static void store_elem(kiln_dtype_t t, void* data, int64_t off, tir_value_t v) {
  if (t == KILN_DTYPE_F32) ((float*)data)[off] = (float)v.f;
  else if (t == KILN_DTYPE_F16) ((uint16_t*)data)[off] = kiln_f32_to_f16((float)v.f);
  else if (t == KILN_DTYPE_F64) ((double*)data)[off] = v.f;
  else kiln_store_i64(t, data, (size_t)off, wrap(t, v.i));
}

/* ---- expressions ------------------------------------------------------ */

static tir_value_t eval(run_t* r, const tir_expr_t* e);

static void* buffer_data(run_t* r, const tir_buffer_t* b, const char* what) {
  for (int32_t k = r->n_binds - 1; k >= 0; --k)
    if (r->binds[k].buf == b) {
      if (!r->binds[k].data) break;
      return r->binds[k].data;
    }
  fail(r, KILN_INVALID_ARGUMENT, "%s of buffer '%s', which has no memory here", what, b->name);
  return NULL;
}

/* Element offset of an access, or -1 after an error naming the access. */
static int64_t offset_of(run_t* r, const tir_buffer_t* b, const tir_expr_t* const* idx,
                         bool is_store) {
  int64_t off = 0;
  for (int32_t d = 0; d < b->rank; ++d) {
    int64_t i = eval(r, idx[d]).i;
    if (r->err) return -1;
    if (i < 0 || i >= b->shape[d]) {
      char acc[256];
      fail(r, KILN_OUT_OF_RANGE, "%s %s: index %d is %lld, outside [0, %lld) of buffer '%s'",
           is_store ? "store" : "load", tir_access_to_str(b, idx, acc, sizeof acc), (int)d,
           (long long)i, (long long)b->shape[d], b->name);
      return -1;
    }
    off += i * b->strides[d];
  }
  return off;
}

static int64_t floordiv(int64_t a, int64_t b) {
  if (b == -1) return (int64_t)(0 - (uint64_t)a); /* INT64_MIN / -1 wraps */
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static tir_value_t eval_binary(run_t* r, const tir_expr_t* e) {
  tir_value_t v = {0, 0};
  const bool of = is_float(e->u.bin.a->dtype);
  tir_value_t a = eval(r, e->u.bin.a), b = eval(r, e->u.bin.b);
  if (r->err) return v;
  const double x = a.f, y = b.f;
  const int64_t p = a.i, q = b.i;
  /* u64 values live in int64 as their bit pattern: order and divide them
   * unsigned (other unsigned types fit int64 and need nothing). */
  if (e->u.bin.a->dtype == KILN_DTYPE_U64) {
    const uint64_t up = (uint64_t)p, uq = (uint64_t)q;
    switch (e->u.bin.op) {
      case TIR_DIV:
        if (uq == 0) fail(r, KILN_INVALID_ARGUMENT, "integer division by zero");
        else v.i = (int64_t)(up / uq);
        return v;
      case TIR_MIN: v.i = (int64_t)(up < uq ? up : uq); return v;
      case TIR_MAX: v.i = (int64_t)(up > uq ? up : uq); return v;
      case TIR_LT: v.i = up < uq; return v;
      case TIR_LE: v.i = up <= uq; return v;
      case TIR_GT: v.i = up > uq; return v;
      case TIR_GE: v.i = up >= uq; return v;
      default: break;
    }
  }
  switch (e->u.bin.op) {
    case TIR_ADD: if (of) v.f = x + y; else v.i = (int64_t)((uint64_t)p + (uint64_t)q); break;
    case TIR_SUB: if (of) v.f = x - y; else v.i = (int64_t)((uint64_t)p - (uint64_t)q); break;
    case TIR_MUL: if (of) v.f = x * y; else v.i = (int64_t)((uint64_t)p * (uint64_t)q); break;
    case TIR_DIV:
      if (of) v.f = x / y;
      else if (q == 0) fail(r, KILN_INVALID_ARGUMENT, "integer division by zero");
      else v.i = q == -1 ? (int64_t)(0 - (uint64_t)p) : p / q;
      break;
    case TIR_FLOORDIV:
    case TIR_FLOORMOD:
      if (q == 0) {
        fail(r, KILN_INVALID_ARGUMENT, "floor division or modulo by zero");
      } else {
        int64_t d = floordiv(p, q);
        v.i = e->u.bin.op == TIR_FLOORDIV ? d : (int64_t)((uint64_t)p - (uint64_t)d * (uint64_t)q);
      }
      break;
    case TIR_MIN:
      if (of) v.f = (x != x || y != y) ? NAN : (x < y ? x : y);
      else v.i = p < q ? p : q;
      break;
    case TIR_MAX:
      if (of) v.f = (x != x || y != y) ? NAN : (x > y ? x : y);
      else v.i = p > q ? p : q;
      break;
    case TIR_EQ: v.i = of ? x == y : p == q; break;
    case TIR_NE: v.i = of ? x != y : p != q; break;
    case TIR_LT: v.i = of ? x < y : p < q; break;
    case TIR_LE: v.i = of ? x <= y : p <= q; break;
    case TIR_GT: v.i = of ? x > y : p > q; break;
    case TIR_GE: v.i = of ? x >= y : p >= q; break;
    case TIR_AND: v.i = p && q; break;
    case TIR_OR: v.i = p || q; break;
    case TIR_BAND: v.i = p & q; break;
    case TIR_BOR: v.i = p | q; break;
    case TIR_BXOR: v.i = p ^ q; break;
    default: fail(r, KILN_INVALID_ARGUMENT, "binary operator %d unknown", (int)e->u.bin.op); break;
  }
  if (is_float(e->dtype)) v.f = round_to(e->dtype, v.f);
  else v.i = wrap(e->dtype, v.i);
  return v;
}

static tir_value_t eval_call(run_t* r, const tir_expr_t* e) {
  tir_value_t v = {0, 0}, a[3] = {{0, 0}, {0, 0}, {0, 0}};
  for (int32_t k = 0; k < e->u.call.n && k < 3; ++k) a[k] = eval(r, e->u.call.args[k]);
  if (r->err) return v;
  const bool fl = is_float(e->dtype);
  const float x = (float)a[0].f;
  /* f64 calls compute in double (M1/M2 pick fn or fnf), never in float. */
  const bool dbl = e->dtype == KILN_DTYPE_F64 ||
                   (e->u.call.n > 0 && e->u.call.args[0]->dtype == KILN_DTYPE_F64);
#define M1(fn) (dbl ? fn(a[0].f) : (double)fn##f(x))
#define M2(fn) (dbl ? fn(a[0].f, a[1].f) : (double)fn##f(x, (float)a[1].f))
  switch (e->u.call.fn) {
    case TIR_EXP: v.f = M1(exp); break;
    case TIR_LOG: v.f = M1(log); break;
    case TIR_SQRT: v.f = M1(sqrt); break;
    case TIR_RSQRT: v.f = 1.0 / M1(sqrt); break;
    case TIR_TANH: v.f = M1(tanh); break;
    case TIR_ERF: v.f = M1(erf); break;
    case TIR_FABS:
      if (fl) v.f = M1(fabs);
      else v.i = a[0].i < 0 ? (int64_t)(0 - (uint64_t)a[0].i) : a[0].i;
      break;
    case TIR_FLOOR: v.f = M1(floor); break;
    case TIR_CEIL: v.f = M1(ceil); break;
    case TIR_ROUND_EVEN: v.f = M1(nearbyint); break;
    case TIR_POW: v.f = M2(pow); break;
    case TIR_NEG:
      if (fl) v.f = dbl ? -a[0].f : -x;
      else v.i = (int64_t)(0 - (uint64_t)a[0].i);
      break;
    case TIR_NOT: v.i = !a[0].i; break;
    case TIR_SIGMOID: v.f = dbl ? 1.0 / (1.0 + exp(-a[0].f)) : 1.0f / (1.0f + expf(-x)); break;
    case TIR_FMA: v.f = dbl ? fma(a[0].f, a[1].f, a[2].f) : fmaf(x, (float)a[1].f, (float)a[2].f); break;
    case TIR_SIN: v.f = M1(sin); break;
    case TIR_COS: v.f = M1(cos); break;
    case TIR_TAN: v.f = M1(tan); break;
    case TIR_ASIN: v.f = M1(asin); break;
    case TIR_ACOS: v.f = M1(acos); break;
    case TIR_ATAN: v.f = M1(atan); break;
    case TIR_SINH: v.f = M1(sinh); break;
    case TIR_COSH: v.f = M1(cosh); break;
    case TIR_ASINH: v.f = M1(asinh); break;
    case TIR_ACOSH: v.f = M1(acosh); break;
    case TIR_ATANH: v.f = M1(atanh); break;
    case TIR_FMOD: v.f = M2(fmod); break;
    case TIR_WIDEN_I8X2: {
      const uint32_t lo = (uint16_t)(int16_t)(int8_t)(uint8_t)(uint64_t)a[0].i;
      const uint32_t hi = (uint16_t)(int16_t)(int8_t)(uint8_t)((uint64_t)a[0].i >> 8);
      v.i = (int32_t)(lo | hi << 16);
      break;
    }
    case TIR_DOT2_I16: {
      const int64_t a0 = (int16_t)(uint16_t)(uint64_t)a[1].i, a1 = (int16_t)(uint16_t)((uint64_t)a[1].i >> 16);
      const int64_t b0 = (int16_t)(uint16_t)(uint64_t)a[2].i, b1 = (int16_t)(uint16_t)((uint64_t)a[2].i >> 16);
      v.i = (int32_t)(uint32_t)((uint64_t)a[0].i + (uint64_t)(a0 * b0 + a1 * b1));
      break;
    }
    case TIR_DOT4_U8I8: {
      int64_t s = 0;
      for (int k = 0; k < 4; ++k)
        s += (int64_t)(uint8_t)((uint64_t)a[1].i >> (8 * k)) * (int8_t)(uint8_t)((uint64_t)a[2].i >> (8 * k));
      v.i = (int32_t)(uint32_t)((uint64_t)a[0].i + (uint64_t)s);
      break;
    }
    case TIR_F8_DECODE:
      v.f = kiln_f8_to_f32((kiln_dtype_t)(KILN_DTYPE_F8E4M3FN + a[1].i), (uint8_t)a[0].i);
      break;
    case TIR_F8_ENCODE:
      v.i = kiln_f32_to_f8((kiln_dtype_t)(KILN_DTYPE_F8E4M3FN + a[1].i / 2), x, (a[1].i & 1) != 0);
      break;
    case TIR_SOFTPLUS:
      v.f = dbl ? fmax(a[0].f, 0.0) + log1p(exp(-fabs(a[0].f)))
                : (double)(fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))));
      if (isnan(a[0].f)) v.f = a[0].f;
      break;
    case TIR_SILU: v.f = dbl ? a[0].f / (1.0 + exp(-a[0].f)) : x * (1.0f / (1.0f + expf(-x))); break;
    default: fail(r, KILN_INVALID_ARGUMENT, "intrinsic %d unknown", (int)e->u.call.fn); break;
  }
#undef M1
#undef M2
  if (fl) v.f = round_to(e->dtype, v.f);
  else v.i = wrap(e->dtype, v.i);
  return v;
}

static tir_value_t eval_cast(run_t* r, const tir_expr_t* e) {
  tir_value_t v = {0, 0};
  const tir_expr_t* src = e->u.cast.value;
  tir_value_t s = eval(r, src);
  const bool from_f = is_float(src->dtype);
  const double si = src->dtype == KILN_DTYPE_U64 ? (double)(uint64_t)s.i : (double)s.i;
  if (is_float(e->dtype)) v.f = round_to(e->dtype, from_f ? s.f : si);
  else if (e->dtype == KILN_DTYPE_BOOL) v.i = from_f ? s.f != 0.0 : s.i != 0;
  else v.i = wrap(e->dtype, from_f ? f2i(s.f) : s.i);
  return v;
}

static tir_value_t eval(run_t* r, const tir_expr_t* e) {
  tir_value_t v = {0, 0};
  if (r->err) return v;
  switch (e->kind) {
    case TIR_INT: v.i = e->u.i; return v;
    case TIR_FLOAT: v.f = round_to(e->dtype, e->u.f); return v;
    case TIR_VARREF: {
      const tir_var_t* var = e->u.var;
      for (int32_t i = 0; i < r->n_given; ++i)
        if (r->given[i] == var) {
          v.i = r->given_values[i];
          return v;
        }
      if (var->id < 0 || var->id >= r->cap_vars || !r->bound[var->id]) {
        fail(r, KILN_INVALID_ARGUMENT, "variable '%s' (id %d) used outside its loop", var->name,
             var->id);
        return v;
      }
      v.i = r->vars[var->id];
      return v;
    }
    case TIR_BINARY: return eval_binary(r, e);
    case TIR_SELECT: {
      tir_value_t c = eval(r, e->u.sel.cond);
      if (!r->both_arms) return eval(r, c.i ? e->u.sel.t : e->u.sel.f);
      tir_value_t t = eval(r, e->u.sel.t), f = eval(r, e->u.sel.f);
      return c.i ? t : f;
    }
    case TIR_LOAD: {
      const tir_buffer_t* b = e->u.load.buf;
      void* data = buffer_data(r, b, "load");
      int64_t off = data ? offset_of(r, b, e->u.load.idx, false) : -1;
      return off >= 0 ? load_elem(b->dtype, data, off) : v;
    }
    case TIR_CAST: return eval_cast(r, e);
    case TIR_CALL: return eval_call(r, e);
  }
  fail(r, KILN_INVALID_ARGUMENT, "expression of unknown kind %d", (int)e->kind);
  return v;
}

/* ---- statements ------------------------------------------------------- */

static void exec(run_t* r, const tir_stmt_t* s);

static void exec_loop(run_t* r, const tir_stmt_t* s) {
  const tir_var_t* var = s->u.loop.var;
  if (!var_slot(r, var->id)) return;
  if (r->bound[var->id]) {
    fail(r, KILN_INVALID_ARGUMENT, "loop rebinds variable '%s' (id %d) inside its own loop",
         var->name, var->id);
    return;
  }
  int64_t n = s->u.loop.extent;
  if (s->u.loop.dyn_extent) {
    tir_value_t d = eval(r, s->u.loop.dyn_extent);
    if (r->err) return;
    if (d.i < 0 || d.i > n) {
      fail(r, KILN_OUT_OF_RANGE, "loop '%s' runs %lld times, above its bound %lld", var->name, (long long)d.i,
           (long long)n);
      return;
    }
    n = d.i;
  }
  r->bound[var->id] = true;
  for (int64_t i = 0; i < n && !r->err; ++i) {
    r->vars[var->id] = i;
    exec(r, s->u.loop.body);
  }
  r->bound[var->id] = false;
}

static void exec_store(run_t* r, const tir_stmt_t* s) {
  const tir_buffer_t* b = s->u.store.buf;
  if (s->u.store.value->dtype != b->dtype) {
    fail(r, KILN_INVALID_ARGUMENT, "store of a %s value into %s buffer '%s'",
         kiln_dtype_name(s->u.store.value->dtype), kiln_dtype_name(b->dtype), b->name);
    return;
  }
  void* data = buffer_data(r, b, "store");
  if (!data) return;
  int64_t off = offset_of(r, b, s->u.store.idx, true);
  tir_value_t v = eval(r, s->u.store.value);
  if (off >= 0 && !r->err) store_elem(b->dtype, data, off, v);
}

static void exec_alloc(run_t* r, const tir_stmt_t* s) {
  const tir_buffer_t* b = s->u.alloc.buf;
  size_t bytes = (size_t)tir_buffer_span_bytes(b);
  void* data = NULL;
  kiln_status_t st = kiln_allocator_malloc(r->allocator, bytes, b->name, &data);
  if (st) {
    oom(r, st);
    return;
  }
  if (b->dtype == KILN_DTYPE_F32) {
    for (size_t i = 0; i < bytes / sizeof(float); ++i) ((float*)data)[i] = NAN;
  } else if (b->dtype == KILN_DTYPE_F16) {
    for (size_t i = 0; i < bytes / sizeof(uint16_t); ++i) ((uint16_t*)data)[i] = 0x7e00;
  } else if (b->dtype == KILN_DTYPE_F64) {
    for (size_t i = 0; i < bytes / sizeof(double); ++i) ((double*)data)[i] = NAN;
  } else {
    memset(data, 0xA5, bytes);
  }
  if (push_bind(r, b, data)) {
    exec(r, s->u.alloc.body);
    r->n_binds--;
  }
  kiln_allocator_free(r->allocator, data);
}

static void exec(run_t* r, const tir_stmt_t* s) {
  if (r->err || !s) return;
  switch (s->kind) {
    case TIR_FOR: exec_loop(r, s); return;
    case TIR_STORE: exec_store(r, s); return;
    case TIR_SEQ:
      for (int32_t i = 0; i < s->u.seq.n && !r->err; ++i) exec(r, s->u.seq.items[i]);
      return;
    case TIR_IF: {
      tir_value_t c = eval(r, s->u.cond.cond);
      if (!r->err) exec(r, c.i ? s->u.cond.then_s : s->u.cond.else_s);
      return;
    }
    case TIR_ALLOC: exec_alloc(r, s); return;
    case TIR_BARRIER: return; /* work-items run one after the other */
    case TIR_PREFETCH: return;  /* a hint: nothing to compute */
  }
  fail(r, KILN_INVALID_ARGUMENT, "statement of unknown kind %d", (int)s->kind);
}

/* ---- entry points ----------------------------------------------------- */

static void run_free(run_t* r) {
  kiln_allocator_free(r->allocator, r->binds);
  kiln_allocator_free(r->allocator, r->vars);
  kiln_allocator_free(r->allocator, r->bound);
}

kiln_status_t tir_interp_run(const tir_func_t* f, void* const* args,
                             const tir_interp_options_t* options, kiln_allocator_t allocator) {
  if (!f || !f->body || (f->n_params > 0 && !args))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "tir_interp_run: no kernel or no arguments");
  run_t r;
  memset(&r, 0, sizeof r);
  r.allocator = allocator;
  r.both_arms = options && options->eval_both_select_arms;
  r.kernel = f->name;
  for (int32_t i = 0; i < f->n_params && !r.err; ++i) push_bind(&r, f->params[i], args[i]);
  exec(&r, f->body);
  run_free(&r);
  return r.err;
}

kiln_status_t tir_interp_eval_expr(const tir_expr_t* e, int32_t n, const tir_var_t* const* vars,
                                   const int64_t* values, tir_value_t* out) {
  if (!e) return kiln_make_status(KILN_INVALID_ARGUMENT, "tir_interp_eval_expr: no expression");
  run_t r;
  memset(&r, 0, sizeof r);
  r.allocator = kiln_allocator_system();
  r.n_given = n;
  r.given = vars;
  r.given_values = values;
  tir_value_t v = eval(&r, e);
  if (!r.err) *out = v;
  return r.err;
}
