/* Tensor-IR printer: readable pseudo-code for debugging, tests and error
 * messages (targets have their own printers).
 *
 *   kernel conv_0(X: f32[1,3,8,8] global, W: f32[4,3,3,3] global, Y: f32[1,4,6,6] global) {
 *     parallel for (oc: 0..4) {
 *       for (h: 0..6) {
 *         vectorized for (w: 0..6) {
 *           Y[0, oc, h, w] = 0.0f
 *           ...
 *
 * Every binary operation is parenthesised, so the text is unambiguous:
 * `//` and `%` are floor division and floor modulo (index arithmetic), `/` is
 * true division for floats and C division for integer values. I64 immediates
 * print bare, other integer types as `i32(5)`, bools as true/false, f32 as
 * `1.5f`, f16 as `f16(1.5)`; casts as `f32(x)`. Variables and buffers print
 * by name, or name_id when two different objects share a name in one kernel.
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir/tir_analysis.h"
#include "ir/tir_visit.h"

/* Output goes either to a FILE or to a bounded string. */
typedef struct sink_s {
  FILE* f;
  char* buf;
  size_t cap, len;
  bool truncated;
  /* Objects whose names clash in this kernel (print as name_id). */
  int32_t n_dup;
  const void** dup;
} sink_t;

static void put(sink_t* s, const char* fmt, ...) KILN_PRINTF(2, 3);
static void put(sink_t* s, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (s->f) {
    vfprintf(s->f, fmt, ap);
  } else if (s->len + 1 < s->cap) {
    int n = vsnprintf(s->buf + s->len, s->cap - s->len, fmt, ap);
    if (n < 0) n = 0;
    if ((size_t)n >= s->cap - s->len) {
      s->len = s->cap - 1;
      s->truncated = true;
    } else {
      s->len += (size_t)n;
    }
  } else {
    s->truncated = true;
  }
  va_end(ap);
}

static bool is_dup(const sink_t* s, const void* p) {
  for (int32_t i = 0; i < s->n_dup; ++i)
    if (s->dup[i] == p) return true;
  return false;
}

static void put_var(sink_t* s, const tir_var_t* v) {
  if (is_dup(s, v)) put(s, "%s_%d", v->name, v->id);
  else put(s, "%s", v->name);
}

static void put_buf(sink_t* s, const tir_buffer_t* b) {
  if (is_dup(s, b)) put(s, "%s_%d", b->name, b->id);
  else put(s, "%s", b->name);
}

static const char* binop_sym(tir_binop_t op) {
  static const char* const k[TIR_BINOP_COUNT_] = {
      [TIR_ADD] = "+",  [TIR_SUB] = "-",  [TIR_MUL] = "*",  [TIR_DIV] = "/",
      [TIR_FLOORDIV] = "//", [TIR_FLOORMOD] = "%", [TIR_MIN] = "min", [TIR_MAX] = "max",
      [TIR_EQ] = "==", [TIR_NE] = "!=", [TIR_LT] = "<",  [TIR_LE] = "<=",
      [TIR_GT] = ">",  [TIR_GE] = ">=", [TIR_AND] = "&&", [TIR_OR] = "||",
      [TIR_BAND] = "&", [TIR_BOR] = "|", [TIR_BXOR] = "^",
  };
  return (op >= 0 && op < TIR_BINOP_COUNT_ && k[op]) ? k[op] : "?";
}

static const char* intrin_name(tir_intrin_t fn) {
  static const char* const k[TIR_INTRIN_COUNT_] = {
      [TIR_EXP] = "exp",     [TIR_LOG] = "log",       [TIR_SQRT] = "sqrt",
      [TIR_RSQRT] = "rsqrt", [TIR_TANH] = "tanh",     [TIR_ERF] = "erf",
      [TIR_FABS] = "fabs",   [TIR_FLOOR] = "floor",   [TIR_CEIL] = "ceil",
      [TIR_ROUND_EVEN] = "round_even", [TIR_POW] = "pow", [TIR_NEG] = "neg",
      [TIR_NOT] = "not",     [TIR_SIGMOID] = "sigmoid", [TIR_FMA] = "fma",
      [TIR_SIN] = "sin", [TIR_COS] = "cos", [TIR_TAN] = "tan", [TIR_ASIN] = "asin",
      [TIR_ACOS] = "acos", [TIR_ATAN] = "atan", [TIR_SINH] = "sinh", [TIR_COSH] = "cosh",
      [TIR_ASINH] = "asinh", [TIR_ACOSH] = "acosh", [TIR_ATANH] = "atanh", [TIR_FMOD] = "fmod",
      [TIR_DOT2_I16] = "dot2_i16", [TIR_WIDEN_I8X2] = "widen_i8x2", [TIR_SILU] = "silu",
      [TIR_DOT4_U8I8] = "dot4_u8i8", [TIR_F8_DECODE] = "f8_decode", [TIR_F8_ENCODE] = "f8_encode",
      [TIR_SOFTPLUS] = "softplus",
  };
  return (fn >= 0 && fn < TIR_INTRIN_COUNT_ && k[fn]) ? k[fn] : "?";
}

static void put_float(sink_t* s, double v, kiln_dtype_t t) {
  char num[64];
  if (isnan(v)) snprintf(num, sizeof num, "nan");
  else if (isinf(v)) snprintf(num, sizeof num, v < 0 ? "-inf" : "inf");
  else {
    snprintf(num, sizeof num, t == KILN_DTYPE_F64 ? "%.17g" : "%.9g", v);
    if (!strpbrk(num, ".e")) strncat(num, ".0", sizeof num - strlen(num) - 1);
  }
  if (t == KILN_DTYPE_F32) put(s, "%s%s", num, isfinite(v) ? "f" : "");
  else put(s, "%s(%s)", kiln_dtype_name(t), num);
}

static void put_expr(sink_t* s, const tir_expr_t* e, bool top);

static void put_idx(sink_t* s, const tir_buffer_t* b, const tir_expr_t* const* idx) {
  put_buf(s, b);
  put(s, "[");
  for (int32_t i = 0; i < b->rank; ++i) {
    if (i) put(s, ", ");
    put_expr(s, idx[i], true);
  }
  put(s, "]");
}

/* |top|: drop the outermost parentheses (if conditions, indices). */
static void put_expr(sink_t* s, const tir_expr_t* e, bool top) {
  if (!e) {
    put(s, "<null>");
    return;
  }
  switch (e->kind) {
    case TIR_INT:
      if (e->dtype == KILN_DTYPE_I64) put(s, "%lld", (long long)e->u.i);
      else if (e->dtype == KILN_DTYPE_BOOL) put(s, "%s", e->u.i ? "true" : "false");
      else put(s, "%s(%lld)", kiln_dtype_name(e->dtype), (long long)e->u.i);
      break;
    case TIR_FLOAT: put_float(s, e->u.f, e->dtype); break;
    case TIR_VARREF: put_var(s, e->u.var); break;
    case TIR_BINARY:
      if (e->u.bin.op == TIR_MIN || e->u.bin.op == TIR_MAX) {
        put(s, "%s(", binop_sym(e->u.bin.op));
        put_expr(s, e->u.bin.a, true);
        put(s, ", ");
        put_expr(s, e->u.bin.b, true);
        put(s, ")");
      } else {
        if (!top) put(s, "(");
        put_expr(s, e->u.bin.a, false);
        put(s, " %s ", binop_sym(e->u.bin.op));
        put_expr(s, e->u.bin.b, false);
        if (!top) put(s, ")");
      }
      break;
    case TIR_SELECT:
      put(s, "select(");
      put_expr(s, e->u.sel.cond, true);
      put(s, ", ");
      put_expr(s, e->u.sel.t, true);
      put(s, ", ");
      put_expr(s, e->u.sel.f, true);
      put(s, ")");
      break;
    case TIR_LOAD: put_idx(s, e->u.load.buf, e->u.load.idx); break;
    case TIR_CAST:
      put(s, "%s(", kiln_dtype_name(e->dtype));
      put_expr(s, e->u.cast.value, true);
      put(s, ")");
      break;
    case TIR_CALL:
      if (e->u.call.fn == TIR_NEG || e->u.call.fn == TIR_NOT) {
        put(s, "%s", e->u.call.fn == TIR_NEG ? "-" : "!");
        put_expr(s, e->u.call.args[0], false);
        break;
      }
      put(s, "%s(", intrin_name(e->u.call.fn));
      for (int32_t i = 0; i < e->u.call.n; ++i) {
        if (i) put(s, ", ");
        put_expr(s, e->u.call.args[i], true);
      }
      put(s, ")");
      break;
  }
}

const char* tir_thread_tag_name(tir_thread_tag_t t) {
  switch (t) {
    case TIR_BLOCK_X: return "blockIdx.x";
    case TIR_BLOCK_Y: return "blockIdx.y";
    case TIR_BLOCK_Z: return "blockIdx.z";
    case TIR_THREAD_X: return "threadIdx.x";
    case TIR_THREAD_Y: return "threadIdx.y";
    case TIR_THREAD_Z: return "threadIdx.z";
    case TIR_TAG_NONE: return "none";
    default: return "?";
  }
}

static const char* scope_name(tir_scope_t sc) {
  switch (sc) {
    case TIR_SCOPE_GLOBAL: return "global";
    case TIR_SCOPE_LOCAL: return "local";
    case TIR_SCOPE_PRIVATE: return "private";
  }
  return "?";
}

static void put_type(sink_t* s, const tir_buffer_t* b) {
  put(s, "%s[", kiln_dtype_name(b->dtype));
  for (int32_t i = 0; i < b->rank; ++i) put(s, i ? ",%lld" : "%lld", (long long)b->shape[i]);
  put(s, "]");
}

static void put_stmt(sink_t* s, const tir_stmt_t* st, int indent) {
  if (!st) return;
  if (st->kind == TIR_SEQ) {
    for (int32_t i = 0; i < st->u.seq.n; ++i) put_stmt(s, st->u.seq.items[i], indent);
    return;
  }
  put(s, "%*s", indent, "");
  switch (st->kind) {
    case TIR_FOR: {
      switch (st->u.loop.kind) {
        case TIR_LOOP_PARALLEL: put(s, "parallel "); break;
        case TIR_LOOP_VECTORIZED: put(s, "vectorized "); break;
        case TIR_LOOP_UNROLLED: put(s, "unrolled "); break;
        case TIR_LOOP_BOUND: put(s, "bound(%s) ", tir_thread_tag_name(st->u.loop.tag)); break;
        default: break;
      }
      put(s, "for (");
      put_var(s, st->u.loop.var);
      if (st->u.loop.dyn_extent) {
        put(s, ": 0..");
        put_expr(s, st->u.loop.dyn_extent, true);
        put(s, " <= %lld) {\n", (long long)st->u.loop.extent);
      } else {
        put(s, ": 0..%lld) {\n", (long long)st->u.loop.extent);
      }
      put_stmt(s, st->u.loop.body, indent + 2);
      put(s, "%*s}\n", indent, "");
      break;
    }
    case TIR_STORE:
      put_idx(s, st->u.store.buf, st->u.store.idx);
      put(s, " = ");
      put_expr(s, st->u.store.value, false);
      put(s, "\n");
      break;
    case TIR_IF:
      put(s, "if (");
      put_expr(s, st->u.cond.cond, true);
      put(s, ") {\n");
      put_stmt(s, st->u.cond.then_s, indent + 2);
      if (st->u.cond.else_s) {
        put(s, "%*s} else {\n", indent, "");
        put_stmt(s, st->u.cond.else_s, indent + 2);
      }
      put(s, "%*s}\n", indent, "");
      break;
    case TIR_ALLOC:
      put(s, "alloc %s ", scope_name(st->u.alloc.buf->scope));
      put_buf(s, st->u.alloc.buf);
      put(s, ": ");
      put_type(s, st->u.alloc.buf);
      put(s, " {\n");
      put_stmt(s, st->u.alloc.body, indent + 2);
      put(s, "%*s}\n", indent, "");
      break;
    case TIR_BARRIER: put(s, "barrier\n"); break;
    case TIR_PREFETCH:
      put(s, "prefetch ");
      put_idx(s, st->u.store.buf, st->u.store.idx);
      put(s, "\n");
      break;
    default: put(s, "<bad stmt>\n"); break;
  }
}

/* ---- name clashes ------------------------------------------------------ */

/* Distinct objects (vars or buffers) seen in a kernel, with their names. */
typedef struct names_s {
  int32_t n, cap;
  const void** obj;
  const char** name;
  bool* is_var;
  bool oom;
} names_t;

static void names_add2(names_t* ns, const void* p, const char* name, bool is_var) {
  for (int32_t i = 0; i < ns->n; ++i)
    if (ns->obj[i] == p) return;
  if (ns->n == ns->cap) {
    int32_t cap = ns->cap ? ns->cap * 2 : 32;
    const void** o = realloc(ns->obj, sizeof(*o) * (size_t)cap);
    if (o) ns->obj = o;
    const char** nm = realloc(ns->name, sizeof(*nm) * (size_t)cap);
    if (nm) ns->name = nm;
    bool* iv = realloc(ns->is_var, sizeof(*iv) * (size_t)cap);
    if (iv) ns->is_var = iv;
    if (!o || !nm || !iv) {
      ns->oom = true; /* printing still works, just without name_id */
      return;
    }
    ns->cap = cap;
  }
  ns->obj[ns->n] = p;
  ns->name[ns->n] = name;
  ns->is_var[ns->n] = is_var;
  ns->n++;
}

static void names_add(names_t* ns, const tir_buffer_t* b, const char* name) {
  names_add2(ns, b, name, false);
}
static void names_var(names_t* ns, const tir_var_t* v) { names_add2(ns, v, v->name, true); }

static bool names_expr(tir_visitor_t* v, const tir_expr_t* e) {
  names_t* ns = v->user;
  if (e->kind == TIR_VARREF) names_var(ns, e->u.var);
  else if (e->kind == TIR_LOAD) names_add(ns, e->u.load.buf, e->u.load.buf->name);
  return true;
}

static bool names_stmt(tir_visitor_t* v, const tir_stmt_t* s) {
  names_t* ns = v->user;
  if (s->kind == TIR_FOR) names_var(ns, s->u.loop.var);
  else if (s->kind == TIR_STORE) names_add(ns, s->u.store.buf, s->u.store.buf->name);
  else if (s->kind == TIR_ALLOC) names_add(ns, s->u.alloc.buf, s->u.alloc.buf->name);
  return true;
}

/* Sets s->dup to the objects whose name another object also has. Vars and
 * buffers live in different namespaces (a loop `c` and a buffer `c` print
 * unambiguously). */
static void find_dups(sink_t* s, names_t* ns, const tir_func_t* f, const tir_stmt_t* st) {
  memset(ns, 0, sizeof(*ns));
  if (f)
    for (int32_t i = 0; i < f->n_params; ++i)
      if (f->params[i]) names_add(ns, f->params[i], f->params[i]->name);
  tir_visitor_t v = {.user = ns, .stmt_pre = names_stmt, .expr_pre = names_expr};
  tir_visit_stmt(&v, f ? f->body : st);
  const void** dup = ns->n ? malloc(sizeof(*dup) * (size_t)ns->n) : NULL;
  int32_t k = 0;
  if (dup) {
    for (int32_t i = 0; i < ns->n; ++i)
      for (int32_t j = 0; j < ns->n; ++j) {
        if (i == j || ns->is_var[i] != ns->is_var[j] || strcmp(ns->name[i], ns->name[j]) != 0)
          continue;
        dup[k++] = ns->obj[i];
        break;
      }
  }
  s->dup = dup;
  s->n_dup = k;
}

static void sink_done(sink_t* s, names_t* ns) {
  free((void*)s->dup);
  free(ns->obj);
  free(ns->name);
  free(ns->is_var);
}

/* ---- public ------------------------------------------------------------ */

void tir_print_expr(const tir_expr_t* e, FILE* out) {
  sink_t s = {0};
  s.f = out;
  put_expr(&s, e, false);
}

void tir_print_stmt(const tir_stmt_t* st, FILE* out, int indent) {
  sink_t s = {0};
  names_t ns;
  s.f = out;
  find_dups(&s, &ns, NULL, st);
  put_stmt(&s, st, indent);
  sink_done(&s, &ns);
}

void tir_print_func(const tir_func_t* f, FILE* out) {
  sink_t s = {0};
  names_t ns;
  s.f = out;
  find_dups(&s, &ns, f, NULL);
  put(&s, "kernel %s(", f->name);
  for (int32_t i = 0; i < f->n_params; ++i) {
    const tir_buffer_t* b = f->params[i];
    if (i) put(&s, ", ");
    if (!b) {
      put(&s, "<null>");
      continue;
    }
    put_buf(&s, b);
    put(&s, ": ");
    put_type(&s, b);
    put(&s, " %s", scope_name(b->scope));
  }
  put(&s, ") {\n");
  put_stmt(&s, f->body, 2);
  put(&s, "}\n");
  sink_done(&s, &ns);
}

char* tir_expr_to_str(const tir_expr_t* e, char* buf, size_t n) {
  if (!n) return buf;
  sink_t s = {0};
  s.buf = buf;
  s.cap = n;
  buf[0] = '\0';
  put_expr(&s, e, true);
  if (s.truncated && n > 4) memcpy(buf + n - 4, "...", 4);
  return buf;
}

char* tir_access_to_str(const tir_buffer_t* b, const tir_expr_t* const* idx, char* buf,
                        size_t n) {
  if (!n) return buf;
  sink_t s = {0};
  s.buf = buf;
  s.cap = n;
  buf[0] = '\0';
  put_idx(&s, b, idx);
  if (s.truncated && n > 4) memcpy(buf + n - 4, "...", 4);
  return buf;
}
