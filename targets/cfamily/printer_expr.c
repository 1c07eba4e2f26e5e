/* The C-family printer's scalar expressions (see printer_impl.h): literals,
 * loads, casts, operators and intrinsic calls, printed with C precedence so
 * parentheses appear only where needed (integer index + and * are treated
 * as associative; float operations never are). Integer arithmetic of value
 * dtypes wraps, floor division / modulo keep floor semantics, F16-typed
 * values are rounded to the half grid after every operation (unless the
 * dialect computes in a native half type). */
#include <math.h>

#include "ir/tir_analysis.h"
#include "targets/cfamily/printer_impl.h"

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

static void tpl1(pr_t* p, const char* fmt, targ_t a) {
  tctx_t c = {.a = {a}};
  kiln_cf_tpl(p, fmt, &c);
}
static void tpl2(pr_t* p, const char* fmt, targ_t a, targ_t b) {
  tctx_t c = {.a = {a, b}};
  kiln_cf_tpl(p, fmt, &c);
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

static void put_double_literal(pr_t* p, double v, int need) {
  char buf[48];
  if (!isfinite(v)) { /* inf/nan: the float spellings convert exactly */
    put_float_literal(p, (float)v, need);
    return;
  }
  snprintf(buf, sizeof buf, "%.17g", v);
  if (!strpbrk(buf, ".e")) strcat(buf, ".0");
  bool o = buf[0] == '-' && need >= P_UNARY && open_p(p, P_UNARY, P_UNARY + 1);
  putf(p, "%s", buf); /* no suffix: a double literal in C and OpenCL C */
  close_p(p, o);
}

static void put_float(pr_t* p, double v, kiln_dtype_t t, int need) {
  if (t == KILN_DTYPE_F64) {
    put_double_literal(p, v, need);
    return;
  }
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
    kiln_cf_expr(p, e, P_ANY);
    put(p, ")");
    return;
  }
  bool o = open_p(p, P_UNARY, need);
  putf(p, "(%s)", type);
  kiln_cf_expr(p, e, P_UNARY);
  close_p(p, o);
}

static void put_load(pr_t* p, const tir_buffer_t* b, const tir_expr_t* const* idx, int need) {
  kiln_cf_check_buf(p, b);
  tctx_t c = {.buf = b, .idx = idx};
  const int32_t ti = kiln_cf_texel_param(p, b);
  if (ti >= 0) { /* a texel view's float (vec_texels; an f16 one is an image) */
    kiln_cf_tpl(p, (p->stexel >> ti & 1) || b->dtype == KILN_DTYPE_F16 ? p->d->tex_iload1 : p->d->tex_load1, &c);
    return;
  }
  if (b->dtype == KILN_DTYPE_F16) {
    kiln_cf_tpl(p, p->d->half_load, &c);
    return;
  }
  if (kiln_cf_texel_private(p, b)) { /* a float of a vec4 row (vec_texels) */
    kiln_cf_tpl(p, p->d->tex_pload1, &c);
    return;
  }
  bool conv = p->d->constructor_casts && strcmp(stype(p, b->dtype), vtype(p, b->dtype)) != 0;
  if (conv) putf(p, "%s(", vtype(p, b->dtype));
  kiln_cf_tpl(p, "$B[$I]", &c);
  if (conv) put(p, ")");
  (void)need;
}

/* Index expressions need the dialect's index type; in GLSL an I64 value
 * (a load from an int64 buffer) must be converted explicitly. */
static void ex_index(pr_t* p, const tir_expr_t* e, int need) {
  if (p->d->constructor_casts && has_load(e)) {
    putf(p, "%s(", p->d->index_type);
    kiln_cf_expr(p, e, P_ANY);
    put(p, ")");
    return;
  }
  kiln_cf_expr(p, e, need);
}

/* GLSL private/shared arrays of rank >= 2 with dense row-major strides are
 * declared with their shape (float acc[8][32]) and indexed per dimension.
 * Why: it reads like the tensor IR and keeps the compiler's view of the
 * array's shape. (It was first written while chasing wrong sums on Mesa
 * lavapipe that turned out to be its per-invocation loop limit, see
 * runtime/vulkan/vulkan_device_internal.h loop_limit, not the array's form.) */
bool kiln_cf_md_array(const pr_t* p, const tir_buffer_t* b) {
  if (p->d->lang != KILN_CF_LANG_GLSL || b->scope == TIR_SCOPE_GLOBAL || b->rank < 2) return false;
  int64_t st = 1;
  for (int32_t k = b->rank - 1; k >= 0; --k) {
    if (b->shape[k] <= 0 || b->strides[k] != st) return false;
    st *= b->shape[k];
  }
  return true;
}

void kiln_cf_put_index(pr_t* p, const tir_buffer_t* b, const tir_expr_t* const* idx) {
  if (kiln_cf_md_array(p, b)) {
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

const char* kiln_cf_binop_text(tir_binop_t op) {
  static const char* t[TIR_BINOP_COUNT_] = {
      [TIR_ADD] = "+", [TIR_SUB] = "-", [TIR_MUL] = "*", [TIR_DIV] = "/",
      [TIR_EQ] = "==", [TIR_NE] = "!=", [TIR_LT] = "<", [TIR_LE] = "<=",
      [TIR_GT] = ">", [TIR_GE] = ">=", [TIR_AND] = "&&", [TIR_OR] = "||",
      [TIR_BAND] = "&", [TIR_BOR] = "|", [TIR_BXOR] = "^"};
  return t[op];
}

int kiln_cf_binop_prec(tir_binop_t op) {
  switch (op) {
    case TIR_ADD: case TIR_SUB: return P_ADD;
    case TIR_MUL: case TIR_DIV: return P_MUL;
    case TIR_EQ: case TIR_NE: return P_EQ;
    case TIR_LT: case TIR_LE: case TIR_GT: case TIR_GE: return P_REL;
    case TIR_AND: return P_LAND;
    case TIR_OR: return P_LOR;
    case TIR_BAND: return P_BAND;
    case TIR_BOR: return P_BOR;
    case TIR_BXOR: return P_BXOR;
    default: return P_PRIMARY;
  }
}

/* An operand of an operator that prints the same for scalars and vectors. */
static void operand(pr_t* p, const tir_expr_t* e, int need, bool vector) {
  if (vector) kiln_cf_vexpr(p, e, need);
  else kiln_cf_expr(p, e, need);
}

/* a OP b with C precedence; |assoc| (integer + and *) lets a right operand
 * that is itself a + / - (for +) or a * (for *) go without parentheses. */
void kiln_cf_infix(pr_t* p, const tir_expr_t* a, const char* op, const tir_expr_t* b, int own,
                   bool assoc, int need, bool vector) {
  if (assoc) {
    tir_binop_t bop = b->kind == TIR_BINARY ? b->u.bin.op : TIR_BINOP_COUNT_;
    bool plus = op[0] == '+';
    assoc = plus ? (bop == TIR_ADD || bop == TIR_SUB) : bop == TIR_MUL;
  }
  bool o = open_p(p, own, need);
  operand(p, a, own, vector);
  putf(p, " %s ", op);
  operand(p, b, assoc ? own : own + 1, vector);
  close_p(p, o);
}

/* cond ? t : f; with |vector| the arms are vector expressions (under a
 * condition that is the same in every lane). */
void kiln_cf_select(pr_t* p, const tir_expr_t* e, int need, bool vector) {
  bool o = open_p(p, P_COND, need);
  kiln_cf_expr(p, e->u.sel.cond, P_LOR);
  put(p, " ? ");
  operand(p, e->u.sel.t, P_COND, vector);
  put(p, " : ");
  operand(p, e->u.sel.f, P_COND, vector);
  close_p(p, o);
}

/* FMA(a, b, c): the dialect's fused form for f32 where it has one, else
 * a * b + c (the compiler contracts it or not: -ffp-contract). */
void kiln_cf_fma(pr_t* p, const tir_expr_t* e, int need, bool vector) {
  const char* fused = e->dtype != KILN_DTYPE_F32 ? NULL : vector ? p->d->vfma : p->d->fma_f;
  if (fused) {
    const tir_expr_t* const* a = e->u.call.args;
    tctx_t c = {.a = {vector ? avex(a[0]) : aex(a[0]), vector ? avex(a[1]) : aex(a[1]),
                      vector ? avex(a[2]) : aex(a[2])},
                .n = p->w};
    kiln_cf_tpl(p, fused, &c);
    return;
  }
  bool o = open_p(p, P_ADD, need);
  operand(p, e->u.call.args[0], P_MUL, vector);
  put(p, " * ");
  operand(p, e->u.call.args[1], P_MUL + 1, vector);
  put(p, " + ");
  operand(p, e->u.call.args[2], P_ADD + 1, vector);
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
        kiln_cf_infix(p, a, kiln_cf_binop_text(op), b, kiln_cf_binop_prec(op), false, P_ANY, false);
        conv_close(p, t);
        close_p(p, o);
      } else if (value && ut) {
        /* two's-complement wrap instead of signed-overflow UB */
        bool o = open_p(p, P_UNARY, need);
        putf(p, "(%s)((%s)", vtype(p, t), ut);
        kiln_cf_expr(p, a, P_UNARY);
        putf(p, " %s (%s)", kiln_cf_binop_text(op), ut);
        kiln_cf_expr(p, b, P_UNARY);
        put(p, ")");
        close_p(p, o);
      } else {
        kiln_cf_infix(p, a, kiln_cf_binop_text(op), b, kiln_cf_binop_prec(op), op != TIR_SUB,
                      need, false);
      }
      return;
    }
    case TIR_DIV: {
      bool wide = t == KILN_DTYPE_I64;
      if (b->kind == TIR_INT && b->u.i != 0 && b->u.i != -1) {
        kiln_cf_infix(p, a, "/", b, P_MUL, false, need, false);
      } else {
        tpl2(p, wide ? d->idiv64 : d->idiv32, aex(a), aex(b));
      }
      return;
    }
    case TIR_FLOORDIV: case TIR_FLOORMOD: {
      bool div = op == TIR_FLOORDIV;
      int64_t k = b->kind == TIR_INT ? b->u.i : 0;
      if (k > 0 && nonneg(p, a)) {
        kiln_cf_infix(p, a, div ? "/" : "%", b, P_MUL, false, need, false);
        return;
      }
      int sh = ilog2_exact(k);
      if (sh >= 0 && t == KILN_DTYPE_I64) {
        /* floor semantics for any sign: arithmetic shift and mask */
        bool o = open_p(p, div ? P_SHIFT : P_BAND, need);
        kiln_cf_expr(p, a, div ? P_SHIFT + 1 : P_BAND + 1);
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
    case TIR_BAND: case TIR_BOR: case TIR_BXOR:
      /* The bits of in-range operands give an in-range result (the narrow
       * types promote to int sign- or zero-extended), so no wrap is needed;
       * the operator groups with itself. */
      kiln_cf_infix(p, a, kiln_cf_binop_text(op), b, kiln_cf_binop_prec(op), false, need, false);
      return;
    default:
      break;
  }
  kiln_cf_fail(p, KILN_INTERNAL, "unexpected integer operator %d", (int)op);
}

static void ex_binary(pr_t* p, const tir_expr_t* e, int need) {
  const tir_expr_t* a = e->u.bin.a;
  const tir_expr_t* b = e->u.bin.b;
  tir_binop_t op = e->u.bin.op;
  kiln_dtype_t t = a->dtype;
  if (op >= TIR_EQ && op <= TIR_OR) {
    int own = kiln_cf_binop_prec(op);
    bool logic = op == TIR_AND || op == TIR_OR;
    bool o = open_p(p, own, need);
    kiln_cf_expr(p, a, logic ? own : own + 1);
    putf(p, " %s ", kiln_cf_binop_text(op));
    kiln_cf_expr(p, b, own + 1);
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
      kiln_cf_infix(p, a, kiln_cf_binop_text(op), b, kiln_cf_binop_prec(op), false, need, false);
      break;
    case TIR_FLOORDIV:
      tpl2(p, fsel(t, p->d->ffloordiv, p->d->dfloordiv), aex(a), aex(b));
      break;
    case TIR_FLOORMOD:
      tpl2(p, fsel(t, p->d->ffloormod, p->d->dfloormod), aex(a), aex(b));
      break;
    case TIR_MIN:
      tpl2(p, fsel(t, p->d->fmin_f, p->d->fmin_d), aex(a), aex(b));
      break;
    case TIR_MAX:
      tpl2(p, fsel(t, p->d->fmax_f, p->d->fmax_d), aex(a), aex(b));
      break;
    default:
      kiln_cf_fail(p, KILN_INTERNAL, "unexpected float operator %d", (int)op);
  }
  half_round_close(p, hr);
}

/* Is f32 |e| never NaN, with its value in [*lo, *hi] (bounds may be
 * infinite)? Recognises what the quantized ops' saturation builds:
 * min(max(select(x == x, x, c), lo), hi). */
static bool nonnan_range(const tir_expr_t* e, double* lo, double* hi) {
  double l1, h1, l2, h2;
  switch (e->kind) {
    case TIR_FLOAT:
      if (!isfinite(e->u.f)) return false;
      *lo = *hi = e->u.f;
      return true;
    case TIR_BINARY: {
      const tir_binop_t op = e->u.bin.op;
      if ((op != TIR_MIN && op != TIR_MAX) || !nonnan_range(e->u.bin.a, &l1, &h1) ||
          !nonnan_range(e->u.bin.b, &l2, &h2))
        return false;
      *lo = op == TIR_MIN ? fmin(l1, l2) : fmax(l1, l2);
      *hi = op == TIR_MIN ? fmin(h1, h2) : fmax(h1, h2);
      return true;
    }
    case TIR_SELECT: {
      const tir_expr_t* c = e->u.sel.cond;
      /* x == x ? x : f: x where it is not NaN, else f */
      if (c->kind != TIR_BINARY || c->u.bin.op != TIR_EQ || !tir_expr_equal(c->u.bin.a, c->u.bin.b) ||
          !tir_expr_equal(c->u.bin.a, e->u.sel.t) || !nonnan_range(e->u.sel.f, &l2, &h2))
        return false;
      *lo = -INFINITY, *hi = INFINITY;
      return true;
    }
    default:
      return false;
  }
}

static void ex_cast(pr_t* p, const tir_expr_t* e, int need) {
  const tir_expr_t* v = e->u.cast.value;
  kiln_dtype_t s = v->dtype, t = e->dtype;
  const kiln_cf_dialect_t* d = p->d;
  if (s == t) {
    kiln_cf_expr(p, v, need);
    return;
  }
  if (t == KILN_DTYPE_BOOL) {
    bool o = open_p(p, P_EQ, need);
    kiln_cf_expr(p, v, P_EQ + 1);
    if (is_float(s)) putf(p, " != 0.0%s", d->float_suffix);
    else put(p, " != 0");
    close_p(p, o);
    return;
  }
  const tir_expr_t *ma, *mb;
  if (d->mulr && kiln_cf_f32_product(e, &ma, &mb)) { /* the f32 product, kept unfused */
    tpl2(p, d->mulr, aex(ma), aex(mb));
    return;
  }
  if (is_float(s) && is_float(t)) {
    /* to or from double: an explicit conversion, so f32 arithmetic never
     * widens silently and f64 arithmetic never narrows */
    if ((s == KILN_DTYPE_F64 || t == KILN_DTYPE_F64) && t != KILN_DTYPE_F16) put_cast(p, vtype(p, t), v, need);
    else if (t == KILN_DTYPE_F16) tpl1(p, d->half_round, aex(v));
    else if (half_native(p)) put_cast(p, vtype(p, t), v, need); /* f32 math over halves */
    else kiln_cf_expr(p, v, need); /* an F16 value is already an exact float */
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
  double lo, hi;
  if (s == KILN_DTYPE_F32 && !d->constructor_casts && kiln_dtype_size(t) <= 4 && nonnan_range(v, &lo, &hi) &&
      lo > -2147483648.0 && hi < 2147483647.0) {
    /* in the int32 range and never NaN (quantized outputs): a plain
     * conversion, which vectorizes (cvttps2dq), where kiln_f2i's int64
     * saturation kept the requantization epilogues scalar */
    bool o = open_p(p, P_UNARY, need);
    putf(p, "(%s)(%s)", stype(p, t), stype(p, KILN_DTYPE_I32));
    kiln_cf_expr(p, v, P_UNARY);
    close_p(p, o);
    return;
  }
  if (is_float(s)) { /* float -> int: truncate, saturate to int64, wrap */
    const char* f2i = fsel(s, d->f2i64, d->d2i64);
    if (t == KILN_DTYPE_I64) {
      tpl1(p, f2i, aex(v));
    } else if (d->constructor_casts) {
      putf(p, "%s(", vtype(p, t));
      if (strcmp(vtype(p, t), stype(p, t))) putf(p, "%s(", stype(p, t));
      tpl1(p, f2i, aex(v));
      if (strcmp(vtype(p, t), stype(p, t))) put(p, ")");
      put(p, ")");
    } else {
      bool o = open_p(p, P_UNARY, need);
      putf(p, "(%s)", stype(p, t));
      tpl1(p, f2i, aex(v));
      close_p(p, o);
    }
    return;
  }
  /* int/bool -> int: wrap to the target width */
  if (d->constructor_casts && strcmp(vtype(p, t), stype(p, t))) {
    putf(p, "%s(%s(", vtype(p, t), stype(p, t));
    kiln_cf_expr(p, v, P_ANY);
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
    kiln_cf_expr(p, a, P_UNARY + 1);
    close_p(p, o);
    return;
  }
  if (fn == TIR_DOT2_I16 || fn == TIR_DOT4_U8I8 || fn == TIR_WIDEN_I8X2 || fn == TIR_F8_DECODE ||
      fn == TIR_F8_ENCODE) {
    if (!d->math[fn]) {
      kiln_cf_fail(p, KILN_UNSUPPORTED, "intrinsic %s has no spelling in this dialect",
                   fn == TIR_DOT2_I16 ? "dot2_i16" : fn == TIR_DOT4_U8I8 ? "dot4_u8i8"
                   : fn == TIR_WIDEN_I8X2 ? "widen_i8x2" : fn == TIR_F8_DECODE ? "f8_decode" : "f8_encode");
      return;
    }
    tctx_t c = {.a = {aex(a)}};
    if (fn != TIR_WIDEN_I8X2) c.a[1] = aex(e->u.call.args[1]);
    if (fn == TIR_DOT2_I16 || fn == TIR_DOT4_U8I8) c.a[2] = aex(e->u.call.args[2]);
    kiln_cf_tpl(p, d->math[fn], &c);
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
        kiln_cf_expr(p, a, P_UNARY);
      } else {
        put(p, "-");
        kiln_cf_expr(p, a, P_UNARY + 1);
      }
      if (wrap) conv_close(p, t);
      close_p(p, o);
      return;
    }
    kiln_cf_fail(p, KILN_UNSUPPORTED, "intrinsic %d on %s values", (int)fn, kiln_dtype_name(t));
    return;
  }
  if (fn == TIR_NEG) {
    bool o = open_p(p, P_UNARY, need);
    put(p, "-");
    kiln_cf_expr(p, a, P_UNARY + 1);
    close_p(p, o);
    return;
  }
  bool hr;
  half_round_open(p, t, &hr, &need);
  if (fn == TIR_FMA) {
    kiln_cf_fma(p, e, need, false);
  } else if (fn >= 0 && fn < TIR_INTRIN_COUNT_ && fsel(t, d->math[fn], d->math_f64[fn])) {
    tctx_t c = {.a = {aex(a)}};
    if (e->u.call.n > 1) c.a[1] = aex(e->u.call.args[1]);
    if (e->u.call.n > 2) c.a[2] = aex(e->u.call.args[2]);
    kiln_cf_tpl(p, fsel(t, d->math[fn], d->math_f64[fn]), &c);
  } else {
    kiln_cf_fail(p, KILN_UNSUPPORTED, "intrinsic %d has no spelling in this dialect", (int)fn);
  }
  half_round_close(p, hr);
}

void kiln_cf_expr(pr_t* p, const tir_expr_t* e, int need) {
  if (!e) {
    kiln_cf_fail(p, KILN_INVALID_ARGUMENT, "NULL expression");
    return;
  }
  switch (e->kind) {
    case TIR_INT: put_int(p, e->u.i, e->dtype, need); return;
    case TIR_FLOAT: put_float(p, e->u.f, e->dtype, need); return;
    case TIR_VARREF: kiln_cf_put_var(p, e->u.var); return;
    case TIR_LOAD: put_load(p, e->u.load.buf, e->u.load.idx, need); return;
    case TIR_BINARY: ex_binary(p, e, need); return;
    case TIR_SELECT: kiln_cf_select(p, e, need, false); return;
    case TIR_CAST: ex_cast(p, e, need); return;
    case TIR_CALL: ex_call(p, e, need); return;
  }
  kiln_cf_fail(p, KILN_INVALID_ARGUMENT, "unknown expression kind %d", (int)e->kind);
}
