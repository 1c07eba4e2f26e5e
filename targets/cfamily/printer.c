/* The C-family printer: one expression/statement printer for C, OpenCL C
 * and GLSL, configured by the dialect tables at the end of this file.
 *
 * Printing is a single recursive walk that appends to a kiln_cf_out_t. The
 * first error is kept in the printer state and the walk keeps going (cheaply)
 * so callers check one status at the end. Expressions are printed with C
 * precedence so parentheses appear only where needed (integer index + and *
 * are treated as associative; float operations never are). */
#include "targets/cfamily/printer.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- output buffer ---------------------------------------------------- */

void kiln_cf_out_init(kiln_cf_out_t* o) { memset(o, 0, sizeof(*o)); }

void kiln_cf_out_free(kiln_cf_out_t* o) {
  free(o->data);
  memset(o, 0, sizeof(*o));
}

static bool out_reserve(kiln_cf_out_t* o, size_t extra) {
  if (o->oom) return false;
  if (o->len + extra + 1 <= o->cap) return true;
  size_t nc = o->cap ? o->cap : 4096;
  while (nc < o->len + extra + 1) nc *= 2;
  char* q = realloc(o->data, nc);
  if (!q) {
    o->oom = true;
    return false;
  }
  o->data = q;
  o->cap = nc;
  return true;
}

static void out_write(kiln_cf_out_t* o, const char* s, size_t n) {
  if (!out_reserve(o, n)) return;
  memcpy(o->data + o->len, s, n);
  o->len += n;
  o->data[o->len] = 0;
}

void kiln_cf_out_puts(kiln_cf_out_t* o, const char* s) { out_write(o, s, strlen(s)); }

void kiln_cf_out_printf(kiln_cf_out_t* o, const char* fmt, ...) {
  char small[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof small) {
    out_write(o, small, (size_t)n);
    return;
  }
  if (!out_reserve(o, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(o->data + o->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  o->len += (size_t)n;
}

/* ---- printer state ---------------------------------------------------- */

enum { /* C operator precedence, higher binds tighter */
  P_ANY = 0, P_COND = 3, P_LOR = 4, P_LAND = 5, P_BOR = 6, P_BXOR = 7, P_BAND = 8,
  P_EQ = 9, P_REL = 10, P_SHIFT = 11, P_ADD = 12, P_MUL = 13, P_UNARY = 14, P_PRIMARY = 16,
};

#define MAX_DEPTH 64
#define MAX_SEEN 2048

typedef struct pr_s {
  const kiln_cf_dialect_t* d;
  const tir_func_t* f;
  kiln_cf_out_t* o;
  kiln_status_t err;
  int32_t ind;
  bool in_par;  /* inside a loop printed with the parallel pragma */
  bool in_simd; /* inside a loop printed with the simd pragma */
  /* loop variable ranges, innermost last (bounds analysis) */
  const tir_var_t* vars[MAX_DEPTH];
  int64_t lo[MAX_DEPTH], hi[MAX_DEPTH];
  int32_t nv;
  /* scoped buffers in scope (params are checked separately) */
  const tir_buffer_t* scoped[MAX_DEPTH];
  int32_t ns;
  /* vector mode: the lane variable and lane count */
  const tir_var_t* lane;
  int32_t w;
  /* launch dims (GPU dialects) for guarding bound loops */
  int64_t groups[3], local[3];
  /* canonical naming: objects numbered in order of first appearance */
  bool canon;
  const void* seen[MAX_SEEN];
  int32_t nseen;
} pr_t;

static void fail(pr_t* p, kiln_status_code_t code, const char* fmt, ...) KILN_PRINTF(3, 4);
static void fail(pr_t* p, kiln_status_code_t code, const char* fmt, ...) {
  if (p->err) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  p->err = kiln_make_status(code, "%s kernel '%s': %s", p->d->name, p->f ? p->f->name : "?", msg);
}

static void put(pr_t* p, const char* s) { kiln_cf_out_puts(p->o, s); }
#define putf(p, ...) kiln_cf_out_printf((p)->o, __VA_ARGS__)

static void line(pr_t* p) {
  for (int32_t i = 0; i < p->ind; ++i) put(p, "  ");
}

/* Identifier text: [A-Za-z0-9_] kept, others '_', a leading digit gets 'v'. */
static void put_ident(pr_t* p, const char* name) {
  char buf[56];
  size_t n = 0;
  if (!name || !*name) name = "t";
  if (name[0] >= '0' && name[0] <= '9') buf[n++] = 'v';
  for (const char* c = name; *c && n < 48; ++c) {
    char ch = *c;
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
    buf[n++] = ok ? ch : '_';
  }
  buf[n] = 0;
  put(p, buf);
}

/* Canonical number of a var/buffer; -1 when the table is full (the kernel
 * then prints its real names and simply never matches another). */
static int32_t seen_index(pr_t* p, const void* obj) {
  for (int32_t i = 0; i < p->nseen; ++i)
    if (p->seen[i] == obj) return i;
  if (p->nseen >= MAX_SEEN) return -1;
  p->seen[p->nseen] = obj;
  return p->nseen++;
}

static void put_var(pr_t* p, const tir_var_t* v) {
  int32_t k = p->canon ? seen_index(p, v) : -1;
  if (k >= 0) {
    putf(p, "v%d", (int)k);
    return;
  }
  put_ident(p, v->name);
  putf(p, "_%d", (int)v->id);
}

static void put_buf(pr_t* p, const tir_buffer_t* b) {
  int32_t k = p->canon ? seen_index(p, b) : -1;
  if (k >= 0) {
    putf(p, "p%d", (int)k);
    return;
  }
  put_ident(p, b->name);
  putf(p, "_b%d", (int)b->id);
}

static bool is_param(const pr_t* p, const tir_buffer_t* b) {
  for (int32_t i = 0; i < p->f->n_params; ++i)
    if (p->f->params[i] == b) return true;
  return false;
}

static bool in_scope(const pr_t* p, const tir_buffer_t* b) {
  if (b->scope == TIR_SCOPE_GLOBAL) return is_param(p, b);
  for (int32_t i = 0; i < p->ns; ++i)
    if (p->scoped[i] == b) return true;
  return false;
}

static void check_buf(pr_t* p, const tir_buffer_t* b) {
  if (in_scope(p, b)) return;
  if (b->scope == TIR_SCOPE_GLOBAL)
    fail(p, KILN_INVALID_ARGUMENT, "buffer '%s' is used but is not a kernel parameter", b->name);
  else
    fail(p, KILN_INVALID_ARGUMENT, "buffer '%s' is used outside its allocation", b->name);
}

static bool push_var(pr_t* p, const tir_var_t* v, int64_t extent) {
  if (p->nv >= MAX_DEPTH) {
    fail(p, KILN_LIMIT_EXCEEDED, "loops nested deeper than %d", MAX_DEPTH);
    return false;
  }
  p->vars[p->nv] = v;
  p->lo[p->nv] = 0;
  p->hi[p->nv] = extent - 1;
  p->nv++;
  return true;
}

static const char* vtype(const pr_t* p, kiln_dtype_t t) {
  const char* s = (t > 0 && t < KILN_DTYPE_COUNT_) ? p->d->value_types[t] : NULL;
  return s ? s : "int";
}
static const char* stype(const pr_t* p, kiln_dtype_t t) {
  const char* s = (t > 0 && t < KILN_DTYPE_COUNT_) ? p->d->types[t] : NULL;
  return s ? s : "int";
}
static bool is_narrow(kiln_dtype_t t) {
  return t == KILN_DTYPE_I8 || t == KILN_DTYPE_U8 || t == KILN_DTYPE_BOOL;
}

/* ---- analysis --------------------------------------------------------- */

/* Non-negative over the enclosing loop ranges? (H-tir's interval analysis;
 * decides whether floor div/mod can print as plain / and %.) */
static bool nonneg(const pr_t* p, const tir_expr_t* e) {
  int64_t lo, hi;
  return tir_expr_bounds(e, p->nv, p->vars, p->lo, p->hi, &lo, &hi) && lo >= 0;
}

static bool has_load(const tir_expr_t* e) {
  switch (e->kind) {
    case TIR_LOAD: return true;
    case TIR_BINARY: return has_load(e->u.bin.a) || has_load(e->u.bin.b);
    case TIR_SELECT:
      return has_load(e->u.sel.cond) || has_load(e->u.sel.t) || has_load(e->u.sel.f);
    case TIR_CAST: return has_load(e->u.cast.value);
    case TIR_CALL:
      for (int32_t i = 0; i < e->u.call.n; ++i)
        if (has_load(e->u.call.args[i])) return true;
      return false;
    default: return false;
  }
}

static bool mentions(const tir_expr_t* e, const tir_var_t* v) {
  switch (e->kind) {
    case TIR_VARREF: return e->u.var == v;
    case TIR_BINARY: return mentions(e->u.bin.a, v) || mentions(e->u.bin.b, v);
    case TIR_SELECT:
      return mentions(e->u.sel.cond, v) || mentions(e->u.sel.t, v) || mentions(e->u.sel.f, v);
    case TIR_CAST: return mentions(e->u.cast.value, v);
    case TIR_CALL:
      for (int32_t i = 0; i < e->u.call.n; ++i)
        if (mentions(e->u.call.args[i], v)) return true;
      return false;
    case TIR_LOAD:
      for (int32_t i = 0; i < e->u.load.buf->rank; ++i)
        if (mentions(e->u.load.idx[i], v)) return true;
      return false;
    default: return false;
  }
}

/* e == c*v + (terms without v), with c a constant? */
static bool affine(const tir_expr_t* e, const tir_var_t* v, int64_t* c) {
  if (!mentions(e, v)) {
    *c = 0;
    return true;
  }
  if (e->kind == TIR_VARREF) {
    *c = 1;
    return true;
  }
  if (e->kind != TIR_BINARY) return false;
  int64_t ca, cb;
  const tir_expr_t* a = e->u.bin.a;
  const tir_expr_t* b = e->u.bin.b;
  switch (e->u.bin.op) {
    case TIR_ADD:
      if (!affine(a, v, &ca) || !affine(b, v, &cb)) return false;
      *c = ca + cb;
      return true;
    case TIR_SUB:
      if (!affine(a, v, &ca) || !affine(b, v, &cb)) return false;
      *c = ca - cb;
      return true;
    case TIR_MUL:
      if (b->kind == TIR_INT && affine(a, v, &ca)) {
        *c = ca * b->u.i;
        return true;
      }
      if (a->kind == TIR_INT && affine(b, v, &cb)) {
        *c = cb * a->u.i;
        return true;
      }
      return false;
    default:
      return false;
  }
}

/* How an access moves with the lane variable: 0 invariant, 1 contiguous,
 * -1 anything else (gather/scatter, non-affine). */
static int access_class(const tir_buffer_t* b, const tir_expr_t* const* idx, const tir_var_t* v) {
  int64_t total = 0;
  for (int32_t k = 0; k < b->rank; ++k) {
    int64_t c;
    if (!affine(idx[k], v, &c)) return -1;
    total += c * b->strides[k];
  }
  return total == 0 ? 0 : total == 1 ? 1 : -1;
}

/* Does the value of |e| differ between lanes? */
static bool varies(const pr_t* p, const tir_expr_t* e) {
  if (!p->lane) return false;
  switch (e->kind) {
    case TIR_VARREF: return e->u.var == p->lane;
    case TIR_LOAD: return access_class(e->u.load.buf, e->u.load.idx, p->lane) != 0;
    case TIR_BINARY: return varies(p, e->u.bin.a) || varies(p, e->u.bin.b);
    case TIR_SELECT:
      return varies(p, e->u.sel.cond) || varies(p, e->u.sel.t) || varies(p, e->u.sel.f);
    case TIR_CAST: return varies(p, e->u.cast.value);
    case TIR_CALL:
      for (int32_t i = 0; i < e->u.call.n; ++i)
        if (varies(p, e->u.call.args[i])) return true;
      return false;
    default: return false;
  }
}

static bool vok_expr(const pr_t* p, const tir_expr_t* e) {
  if (!varies(p, e)) return true;
  switch (e->kind) {
    case TIR_LOAD:
      return e->dtype == KILN_DTYPE_F32 &&
             access_class(e->u.load.buf, e->u.load.idx, p->lane) == 1;
    case TIR_BINARY: {
      kiln_dtype_t t = e->u.bin.a->dtype;
      tir_binop_t op = e->u.bin.op;
      bool arith = op == TIR_ADD || op == TIR_SUB || op == TIR_MUL || op == TIR_DIV ||
                   op == TIR_MIN || op == TIR_MAX;
      bool cmp = op >= TIR_EQ && op <= TIR_GE;
      bool logic = op == TIR_AND || op == TIR_OR;
      if (!((arith || cmp) && t == KILN_DTYPE_F32) && !(logic && t == KILN_DTYPE_BOOL))
        return false;
      return vok_expr(p, e->u.bin.a) && vok_expr(p, e->u.bin.b);
    }
    case TIR_SELECT:
      return e->dtype == KILN_DTYPE_F32 && vok_expr(p, e->u.sel.cond) &&
             vok_expr(p, e->u.sel.t) && vok_expr(p, e->u.sel.f);
    case TIR_CAST: {
      const tir_expr_t* v = e->u.cast.value;
      /* f32(f16 load), contiguous along the lane: a widening vector load */
      if (e->dtype == KILN_DTYPE_F32 && v->kind == TIR_LOAD && v->dtype == KILN_DTYPE_F16 &&
          p->d->vload_half)
        return access_class(v->u.load.buf, v->u.load.idx, p->lane) == 1;
      return e->dtype == KILN_DTYPE_F32 && v->dtype == KILN_DTYPE_BOOL && vok_expr(p, v);
    }
    case TIR_CALL: {
      tir_intrin_t fn = e->u.call.fn;
      bool ok = (e->dtype == KILN_DTYPE_F32 &&
                 (fn == TIR_NEG || fn == TIR_FABS || fn == TIR_FMA)) ||
                (e->dtype == KILN_DTYPE_BOOL && fn == TIR_NOT);
      if (!ok) return false;
      for (int32_t i = 0; i < e->u.call.n; ++i)
        if (!vok_expr(p, e->u.call.args[i])) return false;
      return true;
    }
    default:
      return false; /* the lane variable used as a value */
  }
}

static bool vok_stmt(const pr_t* p, const tir_stmt_t* s) {
  switch (s->kind) {
    case TIR_STORE: {
      const tir_expr_t* v = s->u.store.value;
      if (access_class(s->u.store.buf, s->u.store.idx, p->lane) != 1) return false;
      if (s->u.store.buf->dtype == KILN_DTYPE_F32) return vok_expr(p, v);
      /* f16 <- f32(...) narrowed by the vector store */
      return s->u.store.buf->dtype == KILN_DTYPE_F16 && p->d->vstore_half && v->kind == TIR_CAST &&
             v->u.cast.value->dtype == KILN_DTYPE_F32 && vok_expr(p, v->u.cast.value);
    }
    case TIR_SEQ:
      for (int32_t i = 0; i < s->u.seq.n; ++i)
        if (!vok_stmt(p, s->u.seq.items[i])) return false;
      return true;
    case TIR_IF:
      return !varies(p, s->u.cond.cond) && vok_stmt(p, s->u.cond.then_s) &&
             (!s->u.cond.else_s || vok_stmt(p, s->u.cond.else_s));
    case TIR_FOR:
      return s->u.loop.kind != TIR_LOOP_VECTORIZED && s->u.loop.kind != TIR_LOOP_BOUND &&
             vok_stmt(p, s->u.loop.body);
    default:
      return false;
  }
}

/* ---- templates -------------------------------------------------------- */

typedef enum { A_NONE, A_EXPR, A_VEXPR, A_TEXT } arg_kind_t;
typedef struct targ_s {
  arg_kind_t kind;
  const tir_expr_t* e;
  const char* text;
} targ_t;

typedef struct tctx_s {
  targ_t a[3];
  const tir_buffer_t* buf;        /* $B */
  const tir_expr_t* const* idx;   /* $I */
  targ_t v;                       /* $V */
  const char* t;                  /* $T */
  const char* u;                  /* $U */
  int64_t n;                      /* $W / $N */
} tctx_t;

static void ex(pr_t* p, const tir_expr_t* e, int need);
static void vex(pr_t* p, const tir_expr_t* e, int need);
static void put_index(pr_t* p, const tir_buffer_t* b, const tir_expr_t* const* idx);

static void put_arg(pr_t* p, const targ_t* a) {
  switch (a->kind) {
    case A_EXPR: ex(p, a->e, P_COND); break;
    case A_VEXPR: vex(p, a->e, P_COND); break;
    case A_TEXT: put(p, a->text); break;
    default: break;
  }
}

static void tpl(pr_t* p, const char* fmt, const tctx_t* c) {
  if (!fmt) {
    fail(p, KILN_INTERNAL, "dialect has no template for this construct");
    return;
  }
  const char* s = fmt;
  while (*s) {
    const char* dollar = strchr(s, '$');
    if (!dollar) {
      put(p, s);
      return;
    }
    kiln_cf_out_printf(p->o, "%.*s", (int)(dollar - s), s);
    char k = dollar[1];
    switch (k) {
      case '1': case '2': case '3': put_arg(p, &c->a[k - '1']); break;
      case 'B': put_buf(p, c->buf); break;
      case 'I': put_index(p, c->buf, c->idx); break;
      case 'V': put_arg(p, &c->v); break;
      case 'T': put(p, c->t ? c->t : ""); break;
      case 'U': put(p, c->u ? c->u : ""); break;
      case 'W': case 'N': putf(p, "%lld", (long long)c->n); break;
      default: putf(p, "$%c", k); break;
    }
    s = dollar + (k ? 2 : 1);
  }
}

static targ_t aex(const tir_expr_t* e) { return (targ_t){A_EXPR, e, NULL}; }
static targ_t avex(const tir_expr_t* e) { return (targ_t){A_VEXPR, e, NULL}; }
static targ_t atext(const char* s) { return (targ_t){A_TEXT, NULL, s}; }

static void tpl1(pr_t* p, const char* fmt, targ_t a) {
  tctx_t c = {.a = {a}};
  tpl(p, fmt, &c);
}
static void tpl2(pr_t* p, const char* fmt, targ_t a, targ_t b) {
  tctx_t c = {.a = {a, b}};
  tpl(p, fmt, &c);
}

/* ---- scalar expressions ----------------------------------------------- */

static bool open_p(pr_t* p, int own, int need) {
  if (own < need) put(p, "(");
  return own < need;
}
static void close_p(pr_t* p, bool opened) {
  if (opened) put(p, ")");
}

static void put_int(pr_t* p, int64_t v, kiln_dtype_t t, int need) {
  if (t == KILN_DTYPE_BOOL) {
    put(p, p->d->bool_is_native ? (v ? "true" : "false") : (v ? "1" : "0"));
    return;
  }
  /* a leading '-' must not meet another unary operator ("--5") */
  bool o = v < 0 && need >= P_UNARY && open_p(p, P_UNARY, P_UNARY + 1);
  if (v == INT64_MIN) {
    putf(p, "(-9223372036854775807%s - 1)", p->d->int64_suffix);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    putf(p, "%lld", (long long)v);
  } else {
    putf(p, "%lld%s", (long long)v, t == KILN_DTYPE_I64 ? p->d->int64_suffix : "");
  }
  close_p(p, o);
}

static void put_float_literal(pr_t* p, float f, int need);

static void put_float(pr_t* p, double v, kiln_dtype_t t, int need) {
  float f = (float)v;
  if (t == KILN_DTYPE_F16) f = kiln_f16_to_f32(kiln_f32_to_f16(f));
  if (t == KILN_DTYPE_F16 && p->d->half_literal) {
    const char* h = p->d->half_literal;
    const char* at = strstr(h, "$1");
    kiln_cf_out_printf(p->o, "%.*s", (int)(at - h), h);
    put_float_literal(p, f, P_ANY);
    put(p, at + 2);
    return;
  }
  put_float_literal(p, f, need);
}

static void put_float_literal(pr_t* p, float f, int need) {
  if (isnan(f)) {
    put(p, p->d->nan_literal);
    return;
  }
  if (isinf(f)) {
    bool o = f < 0 && need >= P_UNARY && open_p(p, P_UNARY, P_UNARY + 1);
    putf(p, "%s%s", f < 0 ? "-" : "", p->d->inf_literal);
    close_p(p, o);
    return;
  }
  char buf[48];
  snprintf(buf, sizeof buf, "%.9g", (double)f);
  if (!strpbrk(buf, ".e")) strcat(buf, ".0");
  bool o = buf[0] == '-' && need >= P_UNARY && open_p(p, P_UNARY, P_UNARY + 1);
  putf(p, "%s%s", buf, p->d->float_suffix);
  close_p(p, o);
}

/* C-style cast or constructor of |type| around |e|. */
static void put_cast(pr_t* p, const char* type, const tir_expr_t* e, int need) {
  if (p->d->constructor_casts) {
    putf(p, "%s(", type);
    ex(p, e, P_ANY);
    put(p, ")");
    return;
  }
  bool o = open_p(p, P_UNARY, need);
  putf(p, "(%s)", type);
  ex(p, e, P_UNARY);
  close_p(p, o);
}

static void put_load(pr_t* p, const tir_buffer_t* b, const tir_expr_t* const* idx, int need) {
  check_buf(p, b);
  tctx_t c = {.buf = b, .idx = idx};
  if (b->dtype == KILN_DTYPE_F16) {
    tpl(p, p->d->half_load, &c);
    return;
  }
  bool conv = p->d->constructor_casts && strcmp(stype(p, b->dtype), vtype(p, b->dtype)) != 0;
  if (conv) putf(p, "%s(", vtype(p, b->dtype));
  tpl(p, "$B[$I]", &c);
  if (conv) put(p, ")");
  (void)need;
}

/* Index expressions need the dialect's index type; in GLSL an I64 value
 * (a load from an int64 buffer) must be converted explicitly. */
static void ex_index(pr_t* p, const tir_expr_t* e, int need) {
  if (p->d->constructor_casts && has_load(e)) {
    putf(p, "%s(", p->d->index_type);
    ex(p, e, P_ANY);
    put(p, ")");
    return;
  }
  ex(p, e, need);
}

/* GLSL private/shared arrays of rank >= 2 with dense row-major strides are
 * declared with their shape (float acc[8][32]) and indexed per dimension.
 * Why: it reads like the tensor IR and keeps the compiler's view of the
 * array's shape. (It was first written while chasing wrong sums on Mesa
 * lavapipe that turned out to be its per-invocation loop limit, see
 * runtime/vulkan/vulkan_device.c loop_limit, not the array's form.) */
static bool md_array(const pr_t* p, const tir_buffer_t* b) {
  if (p->d->lang != KILN_CF_LANG_GLSL || b->scope == TIR_SCOPE_GLOBAL || b->rank < 2) return false;
  int64_t st = 1;
  for (int32_t k = b->rank - 1; k >= 0; --k) {
    if (b->shape[k] <= 0 || b->strides[k] != st) return false;
    st *= b->shape[k];
  }
  return true;
}

static void put_index(pr_t* p, const tir_buffer_t* b, const tir_expr_t* const* idx) {
  if (md_array(p, b)) {
    /* Inside the template's "[...]": "i][j][k". */
    for (int32_t k = 0; k < b->rank; ++k) {
      if (k) put(p, "][");
      ex_index(p, idx[k], P_ANY);
    }
    return;
  }
  int64_t c = 0;
  bool any = false;
  for (int32_t k = 0; k < b->rank; ++k) {
    int64_t st = b->strides[k];
    const tir_expr_t* e = idx[k];
    if (st == 0) continue;
    if (e->kind == TIR_INT) {
      c += e->u.i * st;
      continue;
    }
    if (any) put(p, " + ");
    if (st == 1) {
      ex_index(p, e, P_ADD);
    } else {
      ex_index(p, e, P_MUL);
      putf(p, " * %lld", (long long)st);
    }
    any = true;
  }
  if (!any) {
    putf(p, "%lld", (long long)c);
  } else if (c > 0) {
    putf(p, " + %lld", (long long)c);
  } else if (c < 0) {
    putf(p, " - %lld", (long long)-c);
  }
}

static bool is_float(kiln_dtype_t t) { return t == KILN_DTYPE_F32 || t == KILN_DTYPE_F16; }

/* F16 values are the language's half type (kiln_cf_dialect_native_half),
 * not floats on the half grid. */
static bool half_native(const pr_t* p) {
  return strcmp(vtype(p, KILN_DTYPE_F16), vtype(p, KILN_DTYPE_F32)) != 0;
}

/* Wraps an F16-typed float result back onto the half grid. */
static void half_round_open(pr_t* p, kiln_dtype_t t, bool* wrapped, int* need) {
  *wrapped = t == KILN_DTYPE_F16;
  if (*wrapped) {
    const char* h = p->d->half_round;
    const char* d = strstr(h, "$1");
    kiln_cf_out_printf(p->o, "%.*s", (int)(d - h), h);
    *need = P_ANY;
  }
}
static void half_round_close(pr_t* p, bool wrapped) {
  if (wrapped) put(p, strstr(p->d->half_round, "$1") + 2);
}

static const char* binop_text(tir_binop_t op) {
  static const char* t[TIR_BINOP_COUNT_] = {
      [TIR_ADD] = "+", [TIR_SUB] = "-", [TIR_MUL] = "*", [TIR_DIV] = "/",
      [TIR_EQ] = "==", [TIR_NE] = "!=", [TIR_LT] = "<", [TIR_LE] = "<=",
      [TIR_GT] = ">", [TIR_GE] = ">=", [TIR_AND] = "&&", [TIR_OR] = "||"};
  return t[op];
}

static int binop_prec(tir_binop_t op) {
  switch (op) {
    case TIR_ADD: case TIR_SUB: return P_ADD;
    case TIR_MUL: case TIR_DIV: return P_MUL;
    case TIR_EQ: case TIR_NE: return P_EQ;
    case TIR_LT: case TIR_LE: case TIR_GT: case TIR_GE: return P_REL;
    case TIR_AND: return P_LAND;
    case TIR_OR: return P_LOR;
    default: return P_PRIMARY;
  }
}

/* a OP b with C precedence; |assoc| (integer + and *) lets a right operand
 * that is itself a + / - (for +) or a * (for *) go without parentheses. */
static void infix(pr_t* p, const tir_expr_t* a, const char* op, const tir_expr_t* b, int own,
                  bool assoc, int need, bool vector) {
  if (assoc) {
    tir_binop_t bop = b->kind == TIR_BINARY ? b->u.bin.op : TIR_BINOP_COUNT_;
    bool plus = op[0] == '+';
    assoc = plus ? (bop == TIR_ADD || bop == TIR_SUB) : bop == TIR_MUL;
  }
  bool o = open_p(p, own, need);
  if (vector) vex(p, a, own); else ex(p, a, own);
  putf(p, " %s ", op);
  if (vector) vex(p, b, assoc ? own : own + 1); else ex(p, b, assoc ? own : own + 1);
  close_p(p, o);
}

/* "convert to dtype t, wrapping": (T)( ... ) in C, VT(ST( ... )) in GLSL. */
static void conv_open(pr_t* p, kiln_dtype_t t) {
  bool differ = strcmp(vtype(p, t), stype(p, t)) != 0;
  if (p->d->constructor_casts) {
    if (differ) putf(p, "%s(%s(", vtype(p, t), stype(p, t));
    else putf(p, "%s(", vtype(p, t));
  } else {
    putf(p, "(%s)(", is_narrow(t) ? stype(p, t) : vtype(p, t));
  }
}
static void conv_close(pr_t* p, kiln_dtype_t t) {
  bool differ = strcmp(vtype(p, t), stype(p, t)) != 0;
  put(p, p->d->constructor_casts && differ ? "))" : ")");
}

static int64_t wrap_fold(tir_binop_t op, int64_t a, int64_t b, bool* ok) {
  uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
  *ok = true;
  switch (op) {
    case TIR_ADD: return (int64_t)(ua + ub);
    case TIR_SUB: return (int64_t)(ua - ub);
    case TIR_MUL: return (int64_t)(ua * ub);
    case TIR_MIN: return a < b ? a : b;
    case TIR_MAX: return a > b ? a : b;
    default: *ok = false; return 0;
  }
}

static int ilog2_exact(int64_t v) {
  if (v <= 0 || (v & (v - 1))) return -1;
  return __builtin_ctzll((unsigned long long)v);
}

static void ex_int_binary(pr_t* p, const tir_expr_t* e, int need) {
  const tir_expr_t* a = e->u.bin.a;
  const tir_expr_t* b = e->u.bin.b;
  kiln_dtype_t t = a->dtype;
  tir_binop_t op = e->u.bin.op;
  const kiln_cf_dialect_t* d = p->d;
  if (a->kind == TIR_INT && b->kind == TIR_INT && t == KILN_DTYPE_I64) {
    bool ok;
    int64_t v = wrap_fold(op, a->u.i, b->u.i, &ok);
    if (ok) {
      put_int(p, v, t, need);
      return;
    }
  }
  switch (op) {
    case TIR_ADD: case TIR_SUB: case TIR_MUL: {
      bool value = t != KILN_DTYPE_I64 || has_load(e);
      const char* ut = d->unsigned_types[t];
      if (is_narrow(t)) {
        /* int8/uint8 arithmetic cannot overflow int; wrap the result. */
        bool o = open_p(p, P_UNARY, need);
        conv_open(p, t);
        infix(p, a, binop_text(op), b, binop_prec(op), false, P_ANY, false);
        conv_close(p, t);
        close_p(p, o);
      } else if (value && ut) {
        /* two's-complement wrap instead of signed-overflow UB */
        bool o = open_p(p, P_UNARY, need);
        putf(p, "(%s)((%s)", vtype(p, t), ut);
        ex(p, a, P_UNARY);
        putf(p, " %s (%s)", binop_text(op), ut);
        ex(p, b, P_UNARY);
        put(p, ")");
        close_p(p, o);
      } else {
        infix(p, a, binop_text(op), b, binop_prec(op), op != TIR_SUB, need, false);
      }
      return;
    }
    case TIR_DIV: {
      bool wide = t == KILN_DTYPE_I64;
      if (b->kind == TIR_INT && b->u.i != 0 && b->u.i != -1) {
        infix(p, a, "/", b, P_MUL, false, need, false);
      } else {
        tpl2(p, wide ? d->idiv64 : d->idiv32, aex(a), aex(b));
      }
      return;
    }
    case TIR_FLOORDIV: case TIR_FLOORMOD: {
      bool div = op == TIR_FLOORDIV;
      int64_t k = b->kind == TIR_INT ? b->u.i : 0;
      if (k > 0 && nonneg(p, a)) {
        infix(p, a, div ? "/" : "%", b, P_MUL, false, need, false);
        return;
      }
      int sh = ilog2_exact(k);
      if (sh >= 0 && t == KILN_DTYPE_I64) {
        /* floor semantics for any sign: arithmetic shift and mask */
        bool o = open_p(p, div ? P_SHIFT : P_BAND, need);
        ex(p, a, div ? P_SHIFT + 1 : P_BAND + 1);
        if (div) putf(p, " >> %d", sh);
        else putf(p, " & %lld", (long long)(k - 1));
        close_p(p, o);
        return;
      }
      const char* h = div ? d->floordiv : d->floormod;
      if (t != KILN_DTYPE_I64 && !d->constructor_casts) {
        bool o = open_p(p, P_UNARY, need);
        putf(p, "(%s)", vtype(p, t));
        tpl2(p, h, aex(a), aex(b));
        close_p(p, o);
      } else {
        tpl2(p, h, aex(a), aex(b));
      }
      return;
    }
    case TIR_MIN:
      tpl2(p, d->imin, aex(a), aex(b));
      return;
    case TIR_MAX:
      tpl2(p, d->imax, aex(a), aex(b));
      return;
    default:
      break;
  }
  fail(p, KILN_INTERNAL, "unexpected integer operator %d", (int)op);
}

static void ex_binary(pr_t* p, const tir_expr_t* e, int need) {
  const tir_expr_t* a = e->u.bin.a;
  const tir_expr_t* b = e->u.bin.b;
  tir_binop_t op = e->u.bin.op;
  kiln_dtype_t t = a->dtype;
  if (op >= TIR_EQ && op <= TIR_OR) {
    int own = binop_prec(op);
    bool logic = op == TIR_AND || op == TIR_OR;
    bool o = open_p(p, own, need);
    ex(p, a, logic ? own : own + 1);
    putf(p, " %s ", binop_text(op));
    ex(p, b, own + 1);
    close_p(p, o);
    return;
  }
  if (!is_float(t)) {
    ex_int_binary(p, e, need);
    return;
  }
  /* native halves: + - * / of two half operands is half arithmetic as it is */
  const bool infix_op = op == TIR_ADD || op == TIR_SUB || op == TIR_MUL || op == TIR_DIV;
  bool hr = false;
  if (!(infix_op && half_native(p))) half_round_open(p, t, &hr, &need);
  switch (op) {
    case TIR_ADD: case TIR_SUB: case TIR_MUL: case TIR_DIV:
      infix(p, a, binop_text(op), b, binop_prec(op), false, need, false);
      break;
    case TIR_FLOORDIV:
      tpl2(p, p->d->ffloordiv, aex(a), aex(b));
      break;
    case TIR_FLOORMOD:
      tpl2(p, p->d->ffloormod, aex(a), aex(b));
      break;
    case TIR_MIN:
      tpl2(p, p->d->fmin_f, aex(a), aex(b));
      break;
    case TIR_MAX:
      tpl2(p, p->d->fmax_f, aex(a), aex(b));
      break;
    default:
      fail(p, KILN_INTERNAL, "unexpected float operator %d", (int)op);
  }
  half_round_close(p, hr);
}

static void ex_cast(pr_t* p, const tir_expr_t* e, int need) {
  const tir_expr_t* v = e->u.cast.value;
  kiln_dtype_t s = v->dtype, t = e->dtype;
  const kiln_cf_dialect_t* d = p->d;
  if (s == t) {
    ex(p, v, need);
    return;
  }
  if (t == KILN_DTYPE_BOOL) {
    bool o = open_p(p, P_EQ, need);
    ex(p, v, P_EQ + 1);
    if (is_float(s)) putf(p, " != 0.0%s", d->float_suffix);
    else put(p, " != 0");
    close_p(p, o);
    return;
  }
  if (is_float(s) && is_float(t)) {
    if (t == KILN_DTYPE_F16) tpl1(p, d->half_round, aex(v));
    else if (half_native(p)) put_cast(p, vtype(p, t), v, need); /* f32 math over halves */
    else ex(p, v, need); /* an F16 value is already an exact float */
    return;
  }
  if (is_float(t)) { /* int / bool -> float */
    if (t == KILN_DTYPE_F16) {
      const char* h = d->half_round;
      const char* at = strstr(h, "$1");
      kiln_cf_out_printf(p->o, "%.*s", (int)(at - h), h);
      put_cast(p, vtype(p, KILN_DTYPE_F32), v, P_ANY);
      put(p, at + 2);
    } else {
      put_cast(p, vtype(p, t), v, need);
    }
    return;
  }
  if (is_float(s)) { /* float -> int: truncate, saturate to int64, wrap */
    if (t == KILN_DTYPE_I64) {
      tpl1(p, d->f2i64, aex(v));
    } else if (d->constructor_casts) {
      putf(p, "%s(", vtype(p, t));
      if (strcmp(vtype(p, t), stype(p, t))) putf(p, "%s(", stype(p, t));
      tpl1(p, d->f2i64, aex(v));
      if (strcmp(vtype(p, t), stype(p, t))) put(p, ")");
      put(p, ")");
    } else {
      bool o = open_p(p, P_UNARY, need);
      putf(p, "(%s)", stype(p, t));
      tpl1(p, d->f2i64, aex(v));
      close_p(p, o);
    }
    return;
  }
  /* int/bool -> int: wrap to the target width */
  if (d->constructor_casts && strcmp(vtype(p, t), stype(p, t))) {
    putf(p, "%s(%s(", vtype(p, t), stype(p, t));
    ex(p, v, P_ANY);
    put(p, "))");
    return;
  }
  put_cast(p, is_narrow(t) ? stype(p, t) : vtype(p, t), v, need);
}

static void ex_call(pr_t* p, const tir_expr_t* e, int need) {
  tir_intrin_t fn = e->u.call.fn;
  const tir_expr_t* a = e->u.call.args[0];
  kiln_dtype_t t = e->dtype;
  const kiln_cf_dialect_t* d = p->d;
  if (fn == TIR_NOT) {
    bool o = open_p(p, P_UNARY, need);
    put(p, "!");
    ex(p, a, P_UNARY + 1);
    close_p(p, o);
    return;
  }
  if (!is_float(t)) {
    const char* ut = d->unsigned_types[t];
    if (fn == TIR_FABS) {
      if (t == KILN_DTYPE_I64) {
        tpl1(p, d->iabs, aex(a));
        return;
      }
      bool o = open_p(p, P_UNARY, need);
      conv_open(p, t);
      tpl1(p, d->iabs, aex(a));
      conv_close(p, t);
      close_p(p, o);
      return;
    }
    if (fn == TIR_NEG) {
      bool wrap = is_narrow(t) || ut;
      bool o = open_p(p, wrap ? P_UNARY : P_UNARY, need);
      if (wrap) conv_open(p, t);
      if (ut && !is_narrow(t)) {
        putf(p, "0 - (%s)", ut);
        ex(p, a, P_UNARY);
      } else {
        put(p, "-");
        ex(p, a, P_UNARY + 1);
      }
      if (wrap) conv_close(p, t);
      close_p(p, o);
      return;
    }
    fail(p, KILN_UNSUPPORTED, "intrinsic %d on %s values", (int)fn, kiln_dtype_name(t));
    return;
  }
  if (fn == TIR_NEG) {
    bool o = open_p(p, P_UNARY, need);
    put(p, "-");
    ex(p, a, P_UNARY + 1);
    close_p(p, o);
    return;
  }
  bool hr;
  half_round_open(p, t, &hr, &need);
  if (fn == TIR_FMA) {
    bool o = open_p(p, P_ADD, need);
    ex(p, a, P_MUL);
    put(p, " * ");
    ex(p, e->u.call.args[1], P_MUL + 1);
    put(p, " + ");
    ex(p, e->u.call.args[2], P_ADD + 1);
    close_p(p, o);
  } else if (fn >= 0 && fn < TIR_INTRIN_COUNT_ && d->math[fn]) {
    tctx_t c = {.a = {aex(a)}};
    if (e->u.call.n > 1) c.a[1] = aex(e->u.call.args[1]);
    if (e->u.call.n > 2) c.a[2] = aex(e->u.call.args[2]);
    tpl(p, d->math[fn], &c);
  } else {
    fail(p, KILN_UNSUPPORTED, "intrinsic %d has no spelling in this dialect", (int)fn);
  }
  half_round_close(p, hr);
}

static void ex(pr_t* p, const tir_expr_t* e, int need) {
  if (!e) {
    fail(p, KILN_INVALID_ARGUMENT, "NULL expression");
    return;
  }
  switch (e->kind) {
    case TIR_INT: put_int(p, e->u.i, e->dtype, need); return;
    case TIR_FLOAT: put_float(p, e->u.f, e->dtype, need); return;
    case TIR_VARREF: put_var(p, e->u.var); return;
    case TIR_LOAD: put_load(p, e->u.load.buf, e->u.load.idx, need); return;
    case TIR_BINARY: ex_binary(p, e, need); return;
    case TIR_SELECT: {
      bool o = open_p(p, P_COND, need);
      ex(p, e->u.sel.cond, P_LOR);
      put(p, " ? ");
      ex(p, e->u.sel.t, P_COND);
      put(p, " : ");
      ex(p, e->u.sel.f, P_COND);
      close_p(p, o);
      return;
    }
    case TIR_CAST: ex_cast(p, e, need); return;
    case TIR_CALL: ex_call(p, e, need); return;
  }
  fail(p, KILN_INVALID_ARGUMENT, "unknown expression kind %d", (int)e->kind);
}

/* ---- vector expressions ----------------------------------------------- */

/* A template with only $1 (text) and $W, expanded into |buf|. */
static void expand1(const char* fmt, const char* arg, int32_t w, char* buf, size_t n) {
  size_t o = 0;
  for (const char* s = fmt; *s && o + 1 < n; ++s) {
    if (s[0] == '$' && (s[1] == '1' || s[1] == 'W')) {
      int k = s[1] == '1' ? snprintf(buf + o, n - o, "%s", arg) : snprintf(buf + o, n - o, "%d", (int)w);
      o += k > 0 ? (size_t)k : 0;
      if (o >= n) o = n - 1;
      ++s;
    } else {
      buf[o++] = *s;
    }
  }
  buf[o] = 0;
}

static void vtpl(pr_t* p, const char* fmt, targ_t a, targ_t b, targ_t c) {
  tctx_t t = {.a = {a, b, c}, .n = p->w};
  tpl(p, fmt, &t);
}

/* |e| passed vok_expr; prints a W-lane f32 vector or lane mask. */
static void vex(pr_t* p, const tir_expr_t* e, int need) {
  const kiln_cf_dialect_t* d = p->d;
  if (!varies(p, e)) {
    /* f32(f16 load) broadcast: widen once in the vector unit */
    if (e->kind == TIR_CAST && e->dtype == KILN_DTYPE_F32 && e->u.cast.value->kind == TIR_LOAD &&
        e->u.cast.value->dtype == KILN_DTYPE_F16 && d->vsplat_half) {
      const tir_expr_t* v = e->u.cast.value;
      check_buf(p, v->u.load.buf);
      tctx_t c = {.buf = v->u.load.buf, .idx = v->u.load.idx, .n = p->w};
      tpl(p, d->vsplat_half, &c);
      return;
    }
    vtpl(p, e->dtype == KILN_DTYPE_BOOL ? d->vmask : d->vsplat, aex(e), (targ_t){0}, (targ_t){0});
    return;
  }
  switch (e->kind) {
    case TIR_LOAD: {
      check_buf(p, e->u.load.buf);
      tctx_t c = {.buf = e->u.load.buf, .idx = e->u.load.idx, .n = p->w};
      tpl(p, d->vload, &c);
      return;
    }
    case TIR_BINARY: {
      tir_binop_t op = e->u.bin.op;
      const tir_expr_t* a = e->u.bin.a;
      const tir_expr_t* b = e->u.bin.b;
      if (op == TIR_MIN || op == TIR_MAX) {
        vtpl(p, op == TIR_MIN ? d->vmin : d->vmax, avex(a), avex(b), (targ_t){0});
      } else if (op == TIR_AND || op == TIR_OR) {
        infix(p, a, op == TIR_AND ? "&" : "|", b, op == TIR_AND ? P_BAND : P_BOR, false, need,
              true);
      } else {
        infix(p, a, binop_text(op), b, binop_prec(op), false, need, true);
      }
      return;
    }
    case TIR_SELECT:
      if (varies(p, e->u.sel.cond)) {
        vtpl(p, d->vsel, avex(e->u.sel.cond), avex(e->u.sel.t), avex(e->u.sel.f));
      } else {
        bool o = open_p(p, P_COND, need);
        ex(p, e->u.sel.cond, P_LOR);
        put(p, " ? ");
        vex(p, e->u.sel.t, P_COND);
        put(p, " : ");
        vex(p, e->u.sel.f, P_COND);
        close_p(p, o);
      }
      return;
    case TIR_CAST: { /* f32(f16 load), or a bool mask -> 1.0 / 0.0 */
      const tir_expr_t* v = e->u.cast.value;
      if (v->kind == TIR_LOAD && v->dtype == KILN_DTYPE_F16) {
        check_buf(p, v->u.load.buf);
        tctx_t c = {.buf = v->u.load.buf, .idx = v->u.load.idx, .n = p->w};
        tpl(p, d->vload_half, &c);
        return;
      }
      char one[96], zero[96];
      expand1(d->vsplat, d->float_suffix[0] ? "1.0f" : "1.0", p->w, one, sizeof one);
      expand1(d->vsplat, d->float_suffix[0] ? "0.0f" : "0.0", p->w, zero, sizeof zero);
      vtpl(p, d->vsel, avex(e->u.cast.value), atext(one), atext(zero));
      return;
    }
    case TIR_CALL: {
      tir_intrin_t fn = e->u.call.fn;
      if (fn == TIR_NEG || fn == TIR_NOT) {
        bool o = open_p(p, P_UNARY, need);
        put(p, fn == TIR_NEG ? "-" : "~");
        vex(p, e->u.call.args[0], P_UNARY + 1);
        close_p(p, o);
      } else if (fn == TIR_FABS) {
        vtpl(p, d->vabs, avex(e->u.call.args[0]), (targ_t){0}, (targ_t){0});
      } else { /* FMA */
        bool o = open_p(p, P_ADD, need);
        vex(p, e->u.call.args[0], P_MUL);
        put(p, " * ");
        vex(p, e->u.call.args[1], P_MUL + 1);
        put(p, " + ");
        vex(p, e->u.call.args[2], P_ADD + 1);
        close_p(p, o);
      }
      return;
    }
    default:
      fail(p, KILN_INTERNAL, "expression cannot be vectorized");
  }
}

/* ---- statements ------------------------------------------------------- */

static void st(pr_t* p, const tir_stmt_t* s);

static void put_store(pr_t* p, const tir_stmt_t* s) {
  const tir_buffer_t* b = s->u.store.buf;
  const tir_expr_t* v = s->u.store.value;
  check_buf(p, b);
  line(p);
  tctx_t c = {.buf = b, .idx = s->u.store.idx};
  if (p->lane) {
    const bool half = b->dtype == KILN_DTYPE_F16;
    c.v = avex(half ? v->u.cast.value : v); /* vok_stmt: f16 <- f32(...) */
    c.n = p->w;
    tpl(p, half ? p->d->vstore_half : p->d->vstore, &c);
    put(p, ";\n");
    return;
  }
  if (b->dtype == KILN_DTYPE_F16) {
    if (v->kind == TIR_LOAD && v->dtype == KILN_DTYPE_F16 && p->d->half_copy_direct) {
      tpl(p, "$B[$I] = ", &c); /* f16 copy: keep the bits */
      check_buf(p, v->u.load.buf);
      tctx_t c2 = {.buf = v->u.load.buf, .idx = v->u.load.idx};
      tpl(p, "$B[$I]", &c2);
      put(p, ";\n");
      return;
    }
    /* a cast f32 -> f16 is rounded once by the store */
    if (v->kind == TIR_CAST && is_float(v->u.cast.value->dtype)) v = v->u.cast.value;
    if (v->dtype == KILN_DTYPE_F16 && half_native(p)) { /* already a half */
      tpl(p, "$B[$I] = ", &c);
      ex(p, v, P_ANY);
      put(p, ";\n");
      return;
    }
    c.v = aex(v);
    tpl(p, p->d->half_store, &c);
    put(p, ";\n");
    return;
  }
  tpl(p, "$B[$I] = ", &c);
  bool conv = p->d->constructor_casts && strcmp(stype(p, b->dtype), vtype(p, b->dtype)) != 0;
  if (conv) {
    putf(p, "%s(", stype(p, b->dtype));
    ex(p, v, P_ANY);
    put(p, ")");
  } else {
    ex(p, v, P_ANY);
  }
  put(p, ";\n");
}

static void put_for_header(pr_t* p, const tir_var_t* v, int64_t extent, int64_t step) {
  putf(p, "for (%s ", p->d->index_type);
  put_var(p, v);
  put(p, " = 0; ");
  put_var(p, v);
  putf(p, " < %lld; ", (long long)extent);
  put_var(p, v);
  if (step == 1) put(p, "++) {\n");
  else putf(p, " += %lld) {\n", (long long)step);
}

static void put_pragma(pr_t* p, const char* text, int64_t n) {
  if (!text) return;
  /* pragmas start in column 0 is not required; keep them indented */
  line(p);
  tctx_t c = {.n = n};
  tpl(p, text, &c);
  put(p, "\n");
}

static void close_block(pr_t* p) {
  p->ind--;
  line(p);
  put(p, "}\n");
}

static bool has_loop(const tir_stmt_t* s) {
  if (!s) return false;
  switch (s->kind) {
    case TIR_FOR: return true;
    case TIR_SEQ:
      for (int32_t i = 0; i < s->u.seq.n; ++i)
        if (has_loop(s->u.seq.items[i])) return true;
      return false;
    case TIR_IF: return has_loop(s->u.cond.then_s) || has_loop(s->u.cond.else_s);
    case TIR_ALLOC: return has_loop(s->u.alloc.body);
    default: return false;
  }
}

static int32_t pick_width(const pr_t* p, int64_t extent) {
  static const int32_t ws[3] = {16, 8, 4};
  for (int i = 0; i < 3; ++i)
    if ((p->d->vector_widths & ws[i]) && extent >= ws[i] && extent % ws[i] == 0) return ws[i];
  return 0;
}

static void st_loop_plain(pr_t* p, const tir_stmt_t* s) {
  const tir_var_t* v = s->u.loop.var;
  line(p);
  put_for_header(p, v, s->u.loop.extent, 1);
  p->ind++;
  if (push_var(p, v, s->u.loop.extent)) {
    st(p, s->u.loop.body);
    p->nv--;
  }
  close_block(p);
}

static void st_parallel(pr_t* p, const tir_stmt_t* s) {
  const tir_stmt_t* nest[3] = {s};
  int32_t n = 1;
  while (n < 3 && nest[n - 1]->u.loop.body->kind == TIR_FOR &&
         nest[n - 1]->u.loop.body->u.loop.kind == TIR_LOOP_PARALLEL &&
         nest[n - 1]->u.loop.body->u.loop.extent > 0 && p->d->collapse_clause)
    nest[n] = nest[n - 1]->u.loop.body, n++;
  line(p);
  tctx_t c = {.n = n};
  tpl(p, p->d->parallel_pragma, &c);
  if (n > 1) {
    put(p, " ");
    tpl(p, p->d->collapse_clause, &c);
  }
  put(p, "\n");
  int32_t pushed = 0;
  for (int32_t i = 0; i < n; ++i) {
    line(p);
    put_for_header(p, nest[i]->u.loop.var, nest[i]->u.loop.extent, 1);
    p->ind++;
    if (push_var(p, nest[i]->u.loop.var, nest[i]->u.loop.extent)) pushed++;
  }
  p->in_par = true;
  st(p, nest[n - 1]->u.loop.body);
  p->in_par = false;
  p->nv -= pushed;
  for (int32_t i = 0; i < n; ++i) close_block(p);
}

static void st_vector(pr_t* p, const tir_stmt_t* s, int32_t w) {
  const tir_var_t* v = s->u.loop.var;
  int64_t e = s->u.loop.extent;
  if (e / w > 1 && p->d->unroll_pragma) put_pragma(p, p->d->unroll_pragma, e / w <= 16 ? e / w : 4);
  line(p);
  put_for_header(p, v, e, w);
  p->ind++;
  if (push_var(p, v, e)) {
    p->lane = v;
    p->w = w;
    st(p, s->u.loop.body);
    p->lane = NULL;
    p->w = 0;
    p->nv--;
  }
  close_block(p);
}

static void st_for(pr_t* p, const tir_stmt_t* s) {
  const kiln_cf_dialect_t* d = p->d;
  int64_t e = s->u.loop.extent;
  if (e <= 0) return;
  switch (s->u.loop.kind) {
    case TIR_LOOP_PARALLEL:
      if (d->parallel_pragma && !p->in_par && !p->in_simd && !p->lane) {
        st_parallel(p, s);
        return;
      }
      break;
    case TIR_LOOP_VECTORIZED: {
      if (p->in_simd || p->lane) break;
      int32_t w = d->vec_type ? pick_width(p, e) : 0;
      if (w) {
        p->lane = s->u.loop.var; /* analysis needs the lane var */
        bool ok = vok_stmt(p, s->u.loop.body);
        p->lane = NULL;
        if (ok) {
          st_vector(p, s, w);
          return;
        }
      }
      /* omp simd only on a leaf loop: an outer one rarely vectorizes, and it
       * would stop an inner VECTORIZED loop from taking the vector path. */
      if (d->simd_pragma && !has_loop(s->u.loop.body)) {
        put_pragma(p, d->simd_pragma, e);
        p->in_simd = true;
        st_loop_plain(p, s);
        p->in_simd = false;
        return;
      }
      break;
    }
    case TIR_LOOP_UNROLLED:
      if (d->unroll_pragma) put_pragma(p, d->unroll_pragma, e <= 32 ? e : 8);
      break;
    case TIR_LOOP_BOUND: {
      int t = (int)s->u.loop.tag;
      if (t < TIR_BLOCK_X || t > TIR_THREAD_Z || !d->ids[t]) {
        fail(p, KILN_UNSUPPORTED, "loop '%s' is bound to a GPU id (tag %d); the %s dialect has none",
             s->u.loop.var->name, t, d->name);
        return;
      }
      int64_t launch = t <= TIR_BLOCK_Z ? p->groups[t - TIR_BLOCK_X] : p->local[t - TIR_THREAD_X];
      line(p);
      put(p, "{\n");
      p->ind++;
      line(p);
      putf(p, "const %s ", d->index_type);
      put_var(p, s->u.loop.var);
      putf(p, " = %s;\n", d->ids[t]);
      bool guard = launch > e;
      if (guard) {
        line(p);
        put(p, "if (");
        put_var(p, s->u.loop.var);
        putf(p, " < %lld) {\n", (long long)e);
        p->ind++;
      }
      if (push_var(p, s->u.loop.var, e)) {
        st(p, s->u.loop.body);
        p->nv--;
      }
      if (guard) close_block(p);
      close_block(p);
      return;
    }
    default:
      break;
  }
  st_loop_plain(p, s);
}

static int64_t buf_span(const tir_buffer_t* b) {
  int64_t span = 1;
  for (int32_t k = 0; k < b->rank; ++k) {
    if (b->shape[k] <= 0) return 1;
    span += (b->shape[k] - 1) * (b->strides[k] < 0 ? -b->strides[k] : b->strides[k]);
  }
  return span;
}

static void put_array_decl(pr_t* p, const char* qual, const tir_buffer_t* b, bool big) {
  line(p);
  if (big) put(p, "static _Thread_local ");
  putf(p, "%s%s ", qual ? qual : "", stype(p, b->dtype));
  put_buf(p, b);
  if (md_array(p, b)) {
    for (int32_t k = 0; k < b->rank; ++k) putf(p, "[%lld]", (long long)b->shape[k]);
    put(p, ";\n");
    return;
  }
  putf(p, "[%lld]%s;\n", (long long)buf_span(b), p->d->align_attr ? p->d->align_attr : "");
}

static void st_alloc(pr_t* p, const tir_stmt_t* s) {
  const tir_buffer_t* b = s->u.alloc.buf;
  const kiln_cf_dialect_t* d = p->d;
  if (p->ns >= MAX_DEPTH) {
    fail(p, KILN_LIMIT_EXCEEDED, "more than %d nested allocations", MAX_DEPTH);
    return;
  }
  if (b->scope == TIR_SCOPE_GLOBAL) {
    fail(p, KILN_INVALID_ARGUMENT, "allocation of buffer '%s' with global scope", b->name);
    return;
  }
  bool local = b->scope == TIR_SCOPE_LOCAL;
  bool hoisted = local && d->local_decl != KILN_CF_LOCAL_INLINE;
  p->scoped[p->ns++] = b;
  if (hoisted) {
    st(p, s->u.alloc.body);
  } else {
    int64_t bytes = buf_span(b) * (int64_t)kiln_dtype_size(b->dtype);
    bool big = d->lang == KILN_CF_LANG_C && bytes > 128 * 1024;
    line(p);
    put(p, "{\n");
    p->ind++;
    put_array_decl(p, local ? d->local_qualifier : d->private_qualifier, b, big);
    st(p, s->u.alloc.body);
    close_block(p);
  }
  p->ns--;
}

static void st(pr_t* p, const tir_stmt_t* s) {
  if (!s) {
    fail(p, KILN_INVALID_ARGUMENT, "NULL statement");
    return;
  }
  if (p->err) return;
  switch (s->kind) {
    case TIR_FOR: st_for(p, s); return;
    case TIR_STORE: put_store(p, s); return;
    case TIR_SEQ:
      for (int32_t i = 0; i < s->u.seq.n; ++i) st(p, s->u.seq.items[i]);
      return;
    case TIR_IF:
      line(p);
      put(p, "if (");
      ex(p, s->u.cond.cond, P_ANY);
      put(p, ") {\n");
      p->ind++;
      st(p, s->u.cond.then_s);
      if (s->u.cond.else_s) {
        p->ind--;
        line(p);
        put(p, "} else {\n");
        p->ind++;
        st(p, s->u.cond.else_s);
      }
      close_block(p);
      return;
    case TIR_ALLOC: st_alloc(p, s); return;
    case TIR_BARRIER:
      if (!p->d->barrier) {
        fail(p, KILN_UNSUPPORTED, "barrier: the %s dialect has no work-groups", p->d->name);
        return;
      }
      line(p);
      putf(p, "%s\n", p->d->barrier);
      return;
  }
  fail(p, KILN_INVALID_ARGUMENT, "unknown statement kind %d", (int)s->kind);
}

/* ---- kernel-level scans ----------------------------------------------- */

static bool stores_to(const tir_stmt_t* s, const tir_buffer_t* b) {
  if (!s) return false;
  switch (s->kind) {
    case TIR_STORE: return s->u.store.buf == b;
    case TIR_FOR: return stores_to(s->u.loop.body, b);
    case TIR_SEQ:
      for (int32_t i = 0; i < s->u.seq.n; ++i)
        if (stores_to(s->u.seq.items[i], b)) return true;
      return false;
    case TIR_IF: return stores_to(s->u.cond.then_s, b) || stores_to(s->u.cond.else_s, b);
    case TIR_ALLOC: return stores_to(s->u.alloc.body, b);
    default: return false;
  }
}

typedef void (*alloc_fn)(pr_t* p, const tir_buffer_t* b);

static void each_local(pr_t* p, const tir_stmt_t* s, alloc_fn fn) {
  if (!s) return;
  switch (s->kind) {
    case TIR_FOR: each_local(p, s->u.loop.body, fn); return;
    case TIR_SEQ:
      for (int32_t i = 0; i < s->u.seq.n; ++i) each_local(p, s->u.seq.items[i], fn);
      return;
    case TIR_IF:
      each_local(p, s->u.cond.then_s, fn);
      each_local(p, s->u.cond.else_s, fn);
      return;
    case TIR_ALLOC:
      if (s->u.alloc.buf->scope == TIR_SCOPE_LOCAL) fn(p, s->u.alloc.buf);
      each_local(p, s->u.alloc.body, fn);
      return;
    default: return;
  }
}

static void decl_local(pr_t* p, const tir_buffer_t* b) {
  put_array_decl(p, p->d->local_qualifier, b, false);
}

static void bound_dims(const tir_stmt_t* s, int64_t g[3], int64_t l[3]) {
  if (!s) return;
  switch (s->kind) {
    case TIR_FOR:
      if (s->u.loop.kind == TIR_LOOP_BOUND) {
        int t = (int)s->u.loop.tag;
        int64_t* slot = NULL;
        if (t >= TIR_BLOCK_X && t <= TIR_BLOCK_Z) slot = &g[t - TIR_BLOCK_X];
        if (t >= TIR_THREAD_X && t <= TIR_THREAD_Z) slot = &l[t - TIR_THREAD_X];
        if (slot && s->u.loop.extent > *slot) *slot = s->u.loop.extent;
      }
      bound_dims(s->u.loop.body, g, l);
      return;
    case TIR_SEQ:
      for (int32_t i = 0; i < s->u.seq.n; ++i) bound_dims(s->u.seq.items[i], g, l);
      return;
    case TIR_IF:
      bound_dims(s->u.cond.then_s, g, l);
      bound_dims(s->u.cond.else_s, g, l);
      return;
    case TIR_ALLOC: bound_dims(s->u.alloc.body, g, l); return;
    default: return;
  }
}

void kiln_cf_launch_dims(const tir_func_t* f, int64_t groups[3], int64_t local[3]) {
  for (int i = 0; i < 3; ++i) groups[i] = local[i] = 1;
  if (f) bound_dims(f->body, groups, local);
}

static bool uses_dtype(const tir_func_t* f, kiln_dtype_t t) {
  for (int32_t i = 0; i < f->n_params; ++i)
    if (f->params[i]->dtype == t) return true;
  return false;
}

static bool expr_f16_math(const tir_expr_t* e) {
  if (!e) return false;
  switch (e->kind) {
    case TIR_BINARY:
      return e->dtype == KILN_DTYPE_F16 || expr_f16_math(e->u.bin.a) || expr_f16_math(e->u.bin.b);
    case TIR_CALL:
      if (e->dtype == KILN_DTYPE_F16) return true;
      for (int32_t i = 0; i < e->u.call.n && i < 3; ++i)
        if (expr_f16_math(e->u.call.args[i])) return true;
      return false;
    case TIR_SELECT:
      return expr_f16_math(e->u.sel.cond) || expr_f16_math(e->u.sel.t) || expr_f16_math(e->u.sel.f);
    case TIR_CAST: return expr_f16_math(e->u.cast.value);
    case TIR_LOAD:
      for (int32_t i = 0; i < e->u.load.buf->rank; ++i)
        if (expr_f16_math(e->u.load.idx[i])) return true;
      return false;
    default: return false;
  }
}

static bool stmt_f16_math(const tir_stmt_t* s) {
  if (!s) return false;
  switch (s->kind) {
    case TIR_FOR: return stmt_f16_math(s->u.loop.body);
    case TIR_STORE:
      for (int32_t i = 0; i < s->u.store.buf->rank; ++i)
        if (expr_f16_math(s->u.store.idx[i])) return true;
      return expr_f16_math(s->u.store.value);
    case TIR_SEQ:
      for (int32_t i = 0; i < s->u.seq.n; ++i)
        if (stmt_f16_math(s->u.seq.items[i])) return true;
      return false;
    case TIR_IF:
      return expr_f16_math(s->u.cond.cond) || stmt_f16_math(s->u.cond.then_s) || stmt_f16_math(s->u.cond.else_s);
    case TIR_ALLOC: return stmt_f16_math(s->u.alloc.body);
    default: return false;
  }
}

bool kiln_cf_func_computes_f16(const tir_func_t* f) { return f && stmt_f16_math(f->body); }

/* ---- kernels ---------------------------------------------------------- */

bool kiln_cf_valid_kernel_name(const char* s) {
  static const char* const kw[] = {
      "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
      "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register",
      "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch",
      "typedef", "union", "unsigned", "void", "volatile", "while", "main", "kernel",
      "global", "local", "private", "constant", "half", "bool", "uint", "ulong", "uchar"};
  if (!s || !*s || strlen(s) > 200) return false;
  if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_')) return false;
  for (const char* c = s; *c; ++c)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          *c == '_'))
      return false;
  if (strncmp(s, "kiln_", 5) == 0 || strncmp(s, "__", 2) == 0) return false;
  for (size_t i = 0; i < sizeof kw / sizeof kw[0]; ++i)
    if (strcmp(s, kw[i]) == 0) return false;
  return true;
}

static void param_decl(pr_t* p, int32_t i, const kiln_cf_kernel_info_t* info, bool ptr) {
  const tir_buffer_t* b = p->f->params[i];
  const kiln_cf_dialect_t* d = p->d;
  bool ro = !stores_to(p->f->body, b);
  bool noalias = !info || !info->param_noalias || info->param_noalias[i];
  putf(p, "%s%s%s%s", d->buffer_qualifier, ro ? d->readonly_qualifier : "", stype(p, b->dtype),
       ptr ? "* " : " ");
  if (noalias && ptr) put(p, d->restrict_qualifier);
  put_buf(p, b);
}

static kiln_status_t check_func(pr_t* p) {
  const tir_func_t* f = p->f;
  if (!f || !f->body) return kiln_make_status(KILN_INVALID_ARGUMENT, "NULL kernel");
  if (!kiln_cf_valid_kernel_name(f->name))
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "kernel name '%s' is not a C identifier the printer accepts "
                            "(letters, digits, '_'; not a keyword; no kiln_/__ prefix)",
                            f->name ? f->name : "(null)");
  for (int32_t i = 0; i < f->n_params; ++i) {
    const tir_buffer_t* b = f->params[i];
    if (!b) return kiln_make_status(KILN_INVALID_ARGUMENT, "kernel '%s': parameter %d is NULL",
                                    f->name, (int)i);
    if (b->scope != TIR_SCOPE_GLOBAL)
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "kernel '%s': parameter '%s' is not a GLOBAL buffer", f->name,
                              b->name);
    if (b->dtype <= KILN_DTYPE_UNDEFINED || b->dtype >= KILN_DTYPE_COUNT_)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "kernel '%s': parameter '%s' has no dtype",
                              f->name, b->name);
    for (int32_t j = 0; j < i; ++j)
      if (f->params[j] == b)
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "kernel '%s': buffer '%s' is passed twice", f->name, b->name);
  }
  return NULL;
}

static void kernel_c(pr_t* p, const kiln_cf_kernel_info_t* info) {
  const tir_func_t* f = p->f;
  putf(p, "%s%s(void* const* args) {\n", p->d->kernel_prefix, p->canon ? "KILN_KERNEL" : f->name);
  p->ind = 1;
  if (f->n_params == 0) put(p, "  (void)args;\n");
  for (int32_t i = 0; i < f->n_params; ++i) {
    const tir_buffer_t* b = f->params[i];
    bool ro = !stores_to(f->body, b);
    line(p);
    param_decl(p, i, info, true);
    putf(p, " = (%s%s*)args[%d];\n", ro ? p->d->readonly_qualifier : "", stype(p, b->dtype),
         (int)i);
  }
  st(p, f->body);
  put(p, "}\n\n");
}

static void kernel_opencl(pr_t* p, const kiln_cf_kernel_info_t* info) {
  const tir_func_t* f = p->f;
  bool threads = p->local[0] > 1 || p->local[1] > 1 || p->local[2] > 1;
  put(p, p->d->kernel_prefix);
  if (threads && p->d->workgroup_size_attr) {
    char a[3][24];
    for (int i = 0; i < 3; ++i) snprintf(a[i], sizeof a[i], "%lld", (long long)p->local[i]);
    tpl(p, p->d->workgroup_size_attr,
        &(tctx_t){.a = {atext(a[0]), atext(a[1]), atext(a[2])}});
    put(p, " ");
  }
  putf(p, "void %s(", p->canon ? "KILN_KERNEL" : f->name);
  for (int32_t i = 0; i < f->n_params; ++i) {
    if (i) put(p, ", ");
    param_decl(p, i, info, true);
  }
  put(p, ") {\n");
  p->ind = 1;
  each_local(p, f->body, decl_local);
  st(p, f->body);
  put(p, "}\n\n");
}

static void kernel_glsl(pr_t* p, const kiln_cf_kernel_info_t* info) {
  const tir_func_t* f = p->f;
  const kiln_cf_dialect_t* d = p->d;
  bool i64 = uses_dtype(f, KILN_DTYPE_I64);
  bool i8 = uses_dtype(f, KILN_DTYPE_I8) || uses_dtype(f, KILN_DTYPE_U8) ||
            uses_dtype(f, KILN_DTYPE_BOOL);
  bool f16 = uses_dtype(f, KILN_DTYPE_F16);
  putf(p, "#version 450\n// kiln kernel %s\n", p->canon ? "KILN_KERNEL" : f->name);
  /* int64 is always enabled: I64 casts and helpers may appear in any kernel */
  put(p, "#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require\n");
  if (i8) put(p, "#extension GL_EXT_shader_8bit_storage : require\n"
                 "#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require\n");
  if (f16) put(p, "#extension GL_EXT_shader_16bit_storage : require\n"
                  "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n");
  (void)i64;
  putf(p, "layout(local_size_x = %lld, local_size_y = %lld, local_size_z = %lld) in;\n",
       (long long)p->local[0], (long long)p->local[1], (long long)p->local[2]);
  for (int32_t i = 0; i < f->n_params; ++i) {
    const tir_buffer_t* b = f->params[i];
    bool ro = !stores_to(f->body, b);
    bool noalias = !info || !info->param_noalias || info->param_noalias[i];
    putf(p, "layout(std430, set = 0, binding = %d) %s%sbuffer kiln_p%d { %s ", (int)i,
         noalias ? d->restrict_qualifier : "", ro ? d->readonly_qualifier : "", (int)i,
         stype(p, b->dtype));
    put_buf(p, b);
    put(p, "[]; };\n");
  }
  p->ind = 0;
  each_local(p, f->body, decl_local);
  put(p, d->prelude);
  put(p, "void main() {\n");
  p->ind = 1;
  st(p, f->body);
  put(p, "}\n");
}

kiln_status_t kiln_cf_print_kernel(const kiln_cf_dialect_t* d, const tir_func_t* f,
                                   const kiln_cf_kernel_info_t* info, kiln_cf_out_t* out) {
  pr_t p;
  memset(&p, 0, sizeof p);
  p.d = d;
  p.f = f;
  p.o = out;
  p.canon = info && info->canonical;
  kiln_status_t s = check_func(&p);
  if (s) return s;
  kiln_cf_launch_dims(f, p.groups, p.local);
  switch (d->params) {
    case KILN_CF_PARAMS_ARGV: kernel_c(&p, info); break;
    case KILN_CF_PARAMS_LIST: kernel_opencl(&p, info); break;
    case KILN_CF_PARAMS_BINDINGS: kernel_glsl(&p, info); break;
  }
  if (p.err) return p.err;
  if (out->oom)
    return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory printing kernel '%s'", f->name);
  return NULL;
}

kiln_status_t kiln_cf_print_prelude(const kiln_cf_dialect_t* d, kiln_cf_out_t* out) {
  if (d->params == KILN_CF_PARAMS_BINDINGS) return NULL; /* part of each shader */
  kiln_cf_out_printf(out, "/* generated by kiln (%s dialect) */\n", d->name);
  kiln_cf_out_puts(out, d->prelude);
  return out->oom ? kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory printing prelude") : NULL;
}

kiln_status_t kiln_cf_print_unit(const kiln_cf_dialect_t* d, const tir_func_t* const* funcs,
                                 int32_t n, const kiln_cf_kernel_info_t* infos,
                                 kiln_cf_out_t* out) {
  if (d->params == KILN_CF_PARAMS_BINDINGS && n != 1)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: one kernel per shader, got %d", d->name, (int)n);
  for (int32_t i = 0; i < n; ++i) {
    if (!funcs[i] || !funcs[i]->name)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "kernel %d is NULL", (int)i);
    for (int32_t j = 0; j < i; ++j)
      if (strcmp(funcs[i]->name, funcs[j]->name) == 0)
        return kiln_make_status(KILN_INVALID_ARGUMENT, "two kernels are named '%s'",
                                funcs[i]->name);
  }
  KILN_RETURN_IF_ERROR(kiln_cf_print_prelude(d, out));
  if (d->params != KILN_CF_PARAMS_BINDINGS) kiln_cf_out_puts(out, "\n");
  for (int32_t i = 0; i < n; ++i)
    KILN_RETURN_IF_ERROR(kiln_cf_print_kernel(d, funcs[i], infos ? &infos[i] : NULL, out));
  if (d->epilogue) kiln_cf_out_puts(out, d->epilogue);
  return out->oom ? kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory printing source") : NULL;
}
