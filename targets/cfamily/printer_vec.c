/* The C-family printer's vectorisation (see printer_impl.h and the
 * VECTORIZED loop rules in printer.h): whether a VECTORIZED loop's body can
 * print as explicit W-lane vector code (stores contiguous in the lane
 * variable, loads contiguous or invariant, f32 arithmetic, comparisons,
 * selects, min/max, abs, neg, fma, f16 and u8/i8 widening loads / narrowing
 * stores, rounded f32 products),
 * and the vector expressions inside such a loop. */
#include <math.h>
#include <stdio.h>

#include "targets/cfamily/printer_impl.h"
#include "ir/tir_analysis.h"

/* ---- lane analysis ---------------------------------------------------- */

/* e == c*v + (terms without v), with c a constant? */
static bool affine(const tir_expr_t* e, const tir_var_t* v, int64_t* c) {
  if (!tir_expr_uses_var(e, v)) {
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

/* Is |e| a multiple of 4 with the lane variable taken as 0 (a sum of
 * terms each with a factor that is a multiple of 4)? */
static bool mult4(const tir_expr_t* e, const tir_var_t* lane) {
  switch (e->kind) {
    case TIR_INT: return e->u.i % 4 == 0;
    case TIR_VARREF: return e->u.var == lane;
    case TIR_BINARY:
      switch (e->u.bin.op) {
        case TIR_ADD:
        case TIR_SUB: return mult4(e->u.bin.a, lane) && mult4(e->u.bin.b, lane);
        case TIR_MUL:
          return (e->u.bin.a->kind == TIR_INT && e->u.bin.a->u.i % 4 == 0) ||
                 (e->u.bin.b->kind == TIR_INT && e->u.bin.b->u.i % 4 == 0) || mult4(e->u.bin.a, NULL) ||
                 mult4(e->u.bin.b, NULL);
        default: return false;
      }
    default: return false;
  }
}

/* The parameter index of |b|, or -1. */
static int32_t param_of(const pr_t* p, const tir_buffer_t* b) {
  for (int32_t i = 0; i < p->f->n_params && i < 64; ++i)
    if (p->f->params[i] == b) return i;
  return -1;
}

int32_t kiln_cf_texel_param(const pr_t* p, const tir_buffer_t* b) {
  if (!p->d->vec_texels || !(p->texel | p->tex_cand)) return -1;
  const int32_t i = param_of(p, b);
  return i >= 0 && ((p->tex_scan ? p->tex_cand : p->texel) >> i & 1) ? i : -1;
}

/* A PRIVATE f32 row of whole vec4s (vec_texels dialects): a candidate while
 * scanning, else one a vector loop uses (declared vec4[n / 4]). */
static bool priv_cand(const tir_buffer_t* b) {
  return b->scope == TIR_SCOPE_PRIVATE && b->dtype == KILN_DTYPE_F32 && b->rank == 1 && b->strides[0] == 1 &&
         b->shape[0] >= 4 && b->shape[0] % 4 == 0;
}

bool kiln_cf_texel_private(const pr_t* p, const tir_buffer_t* b) {
  if (!p->d->vec_texels || !priv_cand(b)) return false;
  if (p->tex_scan) return true;
  for (int32_t i = 0; i < p->n_tpriv; ++i)
    if (p->tpriv[i] == b) return true;
  return false;
}

/* A contiguous access of a vec_texels dialect: |b| a texel parameter (or a
 * candidate, while scanning) whose lane-0 flat index is a multiple of 4. */
static bool texel_ok(const pr_t* p, const tir_buffer_t* b, const tir_expr_t* const* idx) {
  if (!p->d->vec_texels) return true;
  if (kiln_cf_texel_param(p, b) < 0 && !kiln_cf_texel_private(p, b)) return false;
  for (int32_t k = 0; k < b->rank; ++k)
    if (b->strides[k] % 4 != 0 && !mult4(idx[k], p->lane)) return false;
  return true;
}

/* F16 values in vector loops (vec_texels dialects with f16 texels): f32
 * vectors rounded onto the half grid after each operation (half_round,
 * which the dialect's prelude overloads for vectors), as the scalar
 * printer computes F16-typed expressions. */
static bool vhalf(const pr_t* p) { return p->d->vec_texels && p->tex_half && p->d->tex_hdecl && p->d->half_round; }
static bool vfloat(const pr_t* p, kiln_dtype_t t) { return t == KILN_DTYPE_F32 || (t == KILN_DTYPE_F16 && vhalf(p)); }

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

/* widen_i8x2 of an i16 load? */
static const tir_expr_t* widen_load(const tir_expr_t* e) {
  if (e->kind != TIR_CALL || e->u.call.fn != TIR_WIDEN_I8X2) return NULL;
  const tir_expr_t* a = e->u.call.args[0];
  return a->kind == TIR_LOAD ? a : NULL;
}

/* An i32 vector operand: invariant, a contiguous i32 load, or widen_i8x2
 * of an invariant or contiguous i16 load. */
static bool vok_i32(const pr_t* p, const tir_expr_t* e) {
  if (e->dtype != KILN_DTYPE_I32 || !p->d->vload_i32) return false;
  const tir_expr_t* w = widen_load(e);
  if (w) {
    if (!p->d->vwiden_i8x2 || !p->d->vsplat_i8x2) return false;
    const int ac = access_class(w->u.load.buf, w->u.load.idx, p->lane);
    return ac == 0 || ac == 1;
  }
  if (!varies(p, e)) return true;
  return e->kind == TIR_LOAD && access_class(e->u.load.buf, e->u.load.idx, p->lane) == 1;
}

/* The value of a vector i32 store: invariant, or dot2_i16 of vector
 * operands. */
static bool vok_i32_value(const pr_t* p, const tir_expr_t* e) {
  if (e->dtype != KILN_DTYPE_I32 || !p->d->vstore_i32) return false;
  if (!varies(p, e)) return true;
  if (e->kind != TIR_CALL) return false;
  if (e->u.call.fn == TIR_DOT2_I16 ? !p->d->vdot2_i16 : e->u.call.fn != TIR_DOT4_U8I8 || !p->d->vdot4_u8i8)
    return false;
  for (int32_t i = 0; i < 3; ++i)
    if (!vok_i32(p, e->u.call.args[i])) return false;
  return true;
}

/* The dialect's widening load (narrowing store) for a u8 / i8 buffer of
 * |t| (loads: also i32, converted), or NULL. */
static const char* byte_vload(const pr_t* p, kiln_dtype_t t) {
  if (t == KILN_DTYPE_I32) return p->d->vload_i32f;
  return t == KILN_DTYPE_U8 ? p->d->vload_u8 : t == KILN_DTYPE_I8 ? p->d->vload_i8 : NULL;
}
static const char* byte_vstore(const pr_t* p, kiln_dtype_t t) {
  return t == KILN_DTYPE_U8 ? p->d->vstore_u8 : t == KILN_DTYPE_I8 ? p->d->vstore_i8 : NULL;
}
static bool byte_load(const pr_t* p, const tir_expr_t* e) {
  return e->kind == TIR_LOAD && byte_vload(p, e->dtype) != NULL;
}

/* An f32 operand of kiln_cf_f32_product: f64(x) of an f32 x (x), or an
 * f64 constant f32 holds exactly (lowering's f64(f32 constant), folded). */
static const tir_expr_t* f32_operand(const tir_expr_t* x) {
  if (x->kind == TIR_CAST && x->dtype == KILN_DTYPE_F64 && x->u.cast.value->dtype == KILN_DTYPE_F32)
    return x->u.cast.value;
  if (x->kind == TIR_FLOAT && x->dtype == KILN_DTYPE_F64 && (double)(float)x->u.f == x->u.f) return x;
  return NULL;
}

/* The f64 product is exact (24 x 24 significant bits), so its one rounding
 * to f32 is the f32 product's; lowering writes it so where a product must
 * keep its rounding (QLinearAdd's dequantized operands). A C compiler
 * narrows f32(f64(a) * f64(b)) to a * b (the same value) and may then fuse
 * it into a following add, so the printers do not leave it as written. */
bool kiln_cf_f32_product(const tir_expr_t* e, const tir_expr_t** a, const tir_expr_t** b) {
  if (e->kind != TIR_CAST || e->dtype != KILN_DTYPE_F32) return false;
  const tir_expr_t* m = e->u.cast.value;
  if (m->kind != TIR_BINARY || m->u.bin.op != TIR_MUL || m->dtype != KILN_DTYPE_F64) return false;
  *a = f32_operand(m->u.bin.a), *b = f32_operand(m->u.bin.b);
  return *a && *b && !((*a)->kind == TIR_FLOAT && (*b)->kind == TIR_FLOAT);
}

static bool vok_expr(const pr_t* p, const tir_expr_t* e) {
  if (!varies(p, e)) return true;
  switch (e->kind) {
    case TIR_LOAD:
      return vfloat(p, e->dtype) && (e->dtype == KILN_DTYPE_F32 || p->d->vload_half) &&
             access_class(e->u.load.buf, e->u.load.idx, p->lane) == 1 &&
             texel_ok(p, e->u.load.buf, e->u.load.idx);
    case TIR_BINARY: {
      kiln_dtype_t t = e->u.bin.a->dtype;
      tir_binop_t op = e->u.bin.op;
      bool arith = op == TIR_ADD || op == TIR_SUB || op == TIR_MUL || op == TIR_DIV ||
                   op == TIR_MIN || op == TIR_MAX;
      bool cmp = op >= TIR_EQ && op <= TIR_GE;
      bool logic = op == TIR_AND || op == TIR_OR;
      if (!((arith || cmp) && vfloat(p, t)) && !(logic && t == KILN_DTYPE_BOOL))
        return false;
      return vok_expr(p, e->u.bin.a) && vok_expr(p, e->u.bin.b);
    }
    case TIR_SELECT:
      return vfloat(p, e->dtype) && vok_expr(p, e->u.sel.cond) &&
             vok_expr(p, e->u.sel.t) && vok_expr(p, e->u.sel.f);
    case TIR_CAST: {
      const tir_expr_t* v = e->u.cast.value;
      const tir_expr_t *fa, *fb;
      if (kiln_cf_f32_product(e, &fa, &fb)) return p->d->vmulr && vok_expr(p, fa) && vok_expr(p, fb);
      /* between f32 and F16 values (vhalf): a rounding, or nothing */
      if (vhalf(p) && vfloat(p, e->dtype) && vfloat(p, v->dtype) && e->dtype != v->dtype) return vok_expr(p, v);
      /* f32(f16 load), contiguous along the lane: a widening vector load */
      if (e->dtype == KILN_DTYPE_F32 && v->kind == TIR_LOAD && v->dtype == KILN_DTYPE_F16 &&
          p->d->vload_half)
        return access_class(v->u.load.buf, v->u.load.idx, p->lane) == 1 &&
               texel_ok(p, v->u.load.buf, v->u.load.idx);
      /* f32(u8 / i8 / i32 load), contiguous: a widening vector load */
      if (e->dtype == KILN_DTYPE_F32 && v->kind == TIR_LOAD && byte_load(p, v))
        return access_class(v->u.load.buf, v->u.load.idx, p->lane) == 1;
      return e->dtype == KILN_DTYPE_F32 && v->dtype == KILN_DTYPE_BOOL && vok_expr(p, v);
    }
    case TIR_CALL: {
      tir_intrin_t fn = e->u.call.fn;
      bool ok = (vfloat(p, e->dtype) &&
                 (fn == TIR_NEG || fn == TIR_FABS || fn == TIR_FMA ||
                  (fn >= 0 && fn < TIR_INTRIN_COUNT_ && p->d->vmath[fn]))) ||
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
      if (s->u.store.buf->dtype == KILN_DTYPE_F32)
        return v->dtype == KILN_DTYPE_F32 && texel_ok(p, s->u.store.buf, s->u.store.idx) && vok_expr(p, v);
      if (p->d->vec_texels && (s->u.store.buf->dtype != KILN_DTYPE_F16 ||
                               !texel_ok(p, s->u.store.buf, s->u.store.idx)))
        return false;
      if (s->u.store.buf->dtype == KILN_DTYPE_I32) return vok_i32_value(p, v);
      /* u8 / i8 <- u8 / i8(f32 value) narrowed by the vector store */
      if (byte_vstore(p, s->u.store.buf->dtype))
        return v->kind == TIR_CAST && v->dtype == s->u.store.buf->dtype &&
               v->u.cast.value->dtype == KILN_DTYPE_F32 && vok_expr(p, v->u.cast.value);
      /* f16 <- f32(...) narrowed by the vector store, or an F16 value (vhalf) */
      if (s->u.store.buf->dtype == KILN_DTYPE_F16 && p->d->vstore_half && v->dtype == KILN_DTYPE_F16 && vhalf(p) &&
          !(v->kind == TIR_CAST && v->u.cast.value->dtype == KILN_DTYPE_F32))
        return vok_expr(p, v);
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

/* ---- vector loops ----------------------------------------------------- */

static int32_t pick_width(const pr_t* p, int64_t extent) {
  static const int32_t ws[3] = {16, 8, 4};
  for (int i = 0; i < 3; ++i)
    if ((p->d->vector_widths & ws[i]) && extent >= ws[i] && extent % ws[i] == 0) return ws[i];
  return 0;
}

int32_t kiln_cf_vec_width(pr_t* p, const tir_stmt_t* s) {
  int32_t w = p->d->vec_type ? pick_width(p, s->u.loop.extent) : 0;
  /* texel dialects: up to 4 texels per loop (the loops lowering makes for
   * kiln_plan_options_t.ew_lanes, the row reductions' 16 lanes), printed
   * one vec4 a step */
  if (!w || (p->d->vec_texels && (s->u.loop.extent > 16 || !p->tex_max))) return 0;
  p->lane = s->u.loop.var; /* analysis needs the lane var */
  bool ok = vok_stmt(p, s->u.loop.body);
  p->lane = NULL;
  return ok ? w : 0;
}

/* ---- texel parameters (vec_texels dialects) ---------------------------- */

typedef struct tscan_s {
  uint64_t vec;    /* parameters accessed by a vector loop */
  uint64_t vst;    /* stored by a vector loop */
  uint64_t sst;    /* stored outside one (or by a loop printed scalar) */
} tscan_t;

/* Notes a PRIVATE row a vector loop uses (the printer declares it vec4). */
static void note_private(pr_t* p, const tir_buffer_t* b) {
  if (!p->lane || !priv_cand(b)) return;
  for (int32_t i = 0; i < p->n_tpriv; ++i)
    if (p->tpriv[i] == b) return;
  if (p->n_tpriv < MAX_TPRIV) p->tpriv[p->n_tpriv++] = b;
  else p->tpriv_over = true;
}

static void stores_of(pr_t* p, const tir_stmt_t* s, uint64_t* m) {
  if (!s) return;
  switch (s->kind) {
    case TIR_STORE: {
      const int32_t i = param_of(p, s->u.store.buf);
      if (i >= 0) *m |= 1ull << i;
      note_private(p, s->u.store.buf);
      return;
    }
    case TIR_FOR: stores_of(p, s->u.loop.body, m); return;
    case TIR_SEQ:
      for (int32_t i = 0; i < s->u.seq.n; ++i) stores_of(p, s->u.seq.items[i], m);
      return;
    case TIR_IF:
      stores_of(p, s->u.cond.then_s, m);
      stores_of(p, s->u.cond.else_s, m);
      return;
    case TIR_ALLOC: stores_of(p, s->u.alloc.body, m); return;
    default: return;
  }
}

static void loads_of(pr_t* p, const tir_expr_t* e, uint64_t* m) {
  switch (e->kind) {
    case TIR_LOAD: {
      const int32_t i = param_of(p, e->u.load.buf);
      if (i >= 0 && access_class(e->u.load.buf, e->u.load.idx, p->lane) == 1) *m |= 1ull << i;
      if (access_class(e->u.load.buf, e->u.load.idx, p->lane) == 1) note_private(p, e->u.load.buf);
      return;
    }
    case TIR_BINARY: loads_of(p, e->u.bin.a, m), loads_of(p, e->u.bin.b, m); return;
    case TIR_SELECT:
      loads_of(p, e->u.sel.cond, m), loads_of(p, e->u.sel.t, m), loads_of(p, e->u.sel.f, m);
      return;
    case TIR_CAST: loads_of(p, e->u.cast.value, m); return;
    case TIR_CALL:
      for (int32_t i = 0; i < e->u.call.n; ++i) loads_of(p, e->u.call.args[i], m);
      return;
    default: return;
  }
}

/* The contiguous loads of a vector loop's body (vok_stmt passed). */
static void vloads_of(pr_t* p, const tir_stmt_t* s, uint64_t* m) {
  if (!s) return;
  switch (s->kind) {
    case TIR_STORE:
      loads_of(p, s->u.store.value, m);
      return;
    case TIR_FOR: vloads_of(p, s->u.loop.body, m); return;
    case TIR_SEQ:
      for (int32_t i = 0; i < s->u.seq.n; ++i) vloads_of(p, s->u.seq.items[i], m);
      return;
    case TIR_IF:
      vloads_of(p, s->u.cond.then_s, m);
      vloads_of(p, s->u.cond.else_s, m);
      return;
    default: return;
  }
}

static void tscan(pr_t* p, const tir_stmt_t* s, tscan_t* t) {
  if (!s) return;
  switch (s->kind) {
    case TIR_STORE: stores_of(p, s, &t->sst); return;
    case TIR_FOR:
      if (s->u.loop.kind == TIR_LOOP_VECTORIZED && !s->u.loop.dyn_extent && kiln_cf_vec_width(p, s)) {
        const tir_var_t* lane = p->lane;
        p->lane = s->u.loop.var;
        stores_of(p, s->u.loop.body, &t->vst);
        vloads_of(p, s->u.loop.body, &t->vec);
        p->lane = lane;
        return;
      }
      tscan(p, s->u.loop.body, t);
      return;
    case TIR_SEQ:
      for (int32_t i = 0; i < s->u.seq.n; ++i) tscan(p, s->u.seq.items[i], t);
      return;
    case TIR_IF:
      tscan(p, s->u.cond.then_s, t);
      tscan(p, s->u.cond.else_s, t);
      return;
    case TIR_ALLOC: tscan(p, s->u.alloc.body, t); return;
    default: return;
  }
}

/* Candidates: f32 parameters whose span fits a texel view, and f16 ones
 * where the dialect has texels of halves (tex_half). A loop prints as
 * vectors only if its contiguous buffers are candidates; a candidate stored
 * outside such loops is dropped (an image store writes whole texels), which
 * may turn more loops scalar: repeat until nothing changes. */
void kiln_cf_texel_scan(pr_t* p) {
  p->texel = p->stexel = p->tex_cand = p->wtexel = 0;
  if (!p->d->vec_texels || !p->tex_max) return;
  for (int32_t i = 0; i < p->f->n_params && i < 64; ++i) {
    const tir_buffer_t* b = p->f->params[i];
    const bool half = b->dtype == KILN_DTYPE_F16 && p->tex_half && p->d->tex_hdecl;
    const uint64_t texels = (tir_buffer_span_bytes(b) + (half ? 7 : 15)) / (half ? 8 : 16);
    if ((b->dtype == KILN_DTYPE_F32 || half) && b->scope == TIR_SCOPE_GLOBAL && texels <= p->tex_max)
      p->tex_cand |= 1ull << i;
  }
  p->tex_scan = true;
  tscan_t t;
  for (int32_t round = 0; round < 65; ++round) {
    memset(&t, 0, sizeof t);
    p->n_tpriv = 0;
    p->tpriv_over = false;
    tscan(p, p->f->body, &t);
    const uint64_t drop = p->tex_cand & t.sst;
    if (!drop) break;
    p->tex_cand &= ~drop;
  }
  p->tex_scan = false;
  if (p->tpriv_over) /* more rows than the printer tracks: all scalar */
    p->tex_cand = 0, p->n_tpriv = 0, t.vec = t.vst = 0;
  p->texel = p->tex_cand & (t.vec | t.vst);
  p->stexel = p->texel & (t.vst | t.sst);
  p->tex_cand = 0;
  /* written f32 ones the kernel never loads (the dialect's tex_sdecl) */
  for (int32_t i = 0; p->d->tex_sdecl && i < p->f->n_params && i < 64; ++i) {
    const tir_buffer_t* b = p->f->params[i];
    if ((p->stexel >> i & 1) && b->dtype == KILN_DTYPE_F32 && !(tir_func_buffer_access(p->f, b) & TIR_ACCESS_LOAD))
      p->wtexel |= 1ull << i;
  }
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
  kiln_cf_tpl(p, fmt, &t);
}

/* Whether |x| is |c| or an operand of its comparisons and logic, |depth|
 * levels down. */
static bool in_cond(const tir_expr_t* c, const tir_expr_t* x, int depth) {
  if (tir_expr_equal(c, x)) return true; /* structurally: mutators copy shared nodes */
  if (depth == 0 || c->kind != TIR_BINARY) return false;
  return in_cond(c->u.bin.a, x, depth - 1) || in_cond(c->u.bin.b, x, depth - 1);
}

/* select(cond, t, f) where t or f recurs in cond (select(x > acc, x, acc)):
 * printed as a C statement expression that evaluates t and f once into
 * locals, because as a tree a chain of such selects doubles in text per
 * link (a 3x3 MaxPool printed 2^9 copies of its first load, ~120 KB of C
 * that took the compiler 0.4 s). Both operands are evaluated either way
 * (a vector select computes both). False when this does not apply. */
static bool vselect_bound(pr_t* p, const tir_expr_t* e) {
  const tir_expr_t *c = e->u.sel.cond, *t = e->u.sel.t, *f = e->u.sel.f;
  if (p->d->lang != KILN_CF_LANG_C || e->dtype != KILN_DTYPE_F32 || p->nbind + 2 > MAX_BIND ||
      !(in_cond(c, t, 3) || in_cond(c, f, 3)))
    return false;
  char vt[64];
  expand1(p->d->vec_type, "", p->w, vt, sizeof vt);
  int32_t id = p->nbound;
  p->nbound += 2;
  putf(p, "({ %s kiln_s%d = ", vt, (int)id);
  kiln_cf_vexpr(p, t, P_ANY);
  putf(p, "; %s kiln_s%d = ", vt, (int)id + 1);
  kiln_cf_vexpr(p, f, P_ANY);
  put(p, "; ");
  p->bind_e[p->nbind] = t;
  p->bind_id[p->nbind++] = id;
  p->bind_e[p->nbind] = f;
  p->bind_id[p->nbind++] = id + 1;
  char nt[32], nf[32];
  snprintf(nt, sizeof nt, "kiln_s%d", (int)id);
  snprintf(nf, sizeof nf, "kiln_s%d", (int)id + 1);
  vtpl(p, p->d->vsel, avex(c), atext(nt), atext(nf));
  p->nbind -= 2;
  put(p, "; })");
  return true;
}

/* The quantized ops' saturation min(max(select(x == x, x, f), lo), hi)
 * with constant f <= lo and hi (lowering/lower_nn_quant.c): x, where the
 * dialect prints it as one max and one min of the vector unit (vqsat;
 * those return their second operand for a NaN and for equal values, as
 * the whole expression does: NaN -> lo, and the same signed zeros), else
 * NULL. */
static const tir_expr_t* qsat_value(const pr_t* p, const tir_expr_t* e) {
  if (!p->d->vqsat || e->kind != TIR_BINARY || e->u.bin.op != TIR_MIN || e->dtype != KILN_DTYPE_F32) return NULL;
  const tir_expr_t *mx = e->u.bin.a, *hi = e->u.bin.b;
  if (hi->kind != TIR_FLOAT || !isfinite(hi->u.f) || mx->kind != TIR_BINARY || mx->u.bin.op != TIR_MAX) return NULL;
  const tir_expr_t *s = mx->u.bin.a, *lo = mx->u.bin.b;
  if (lo->kind != TIR_FLOAT || !isfinite(lo->u.f) || s->kind != TIR_SELECT) return NULL;
  const tir_expr_t *c = s->u.sel.cond, *f = s->u.sel.f;
  if (f->kind != TIR_FLOAT || !(f->u.f <= lo->u.f) || c->kind != TIR_BINARY || c->u.bin.op != TIR_EQ ||
      !tir_expr_equal(c->u.bin.a, c->u.bin.b) || !tir_expr_equal(c->u.bin.a, s->u.sel.t))
    return NULL;
  return s->u.sel.t;
}

/* half_round's text before (|at_end| false) or after its $1. */
static void hround_part(pr_t* p, bool at_end) {
  const char* h = p->d->half_round;
  const char* a = strstr(h, "$1");
  if (at_end) put(p, a + 2);
  else kiln_cf_out_printf(p->o, "%.*s", (int)(a - h), h);
}

static void vexpr_f(pr_t* p, const tir_expr_t* e, int need);

/* |e| passed vok_expr; prints a W-lane f32 vector or lane mask. An F16
 * operation's vector (vhalf) is rounded onto the half grid like the scalar
 * printer's; negation, abs, selects and loads are exact. */
void kiln_cf_vexpr(pr_t* p, const tir_expr_t* e, int need) {
  bool round = e->dtype == KILN_DTYPE_F16 && varies(p, e) &&
               (e->kind == TIR_BINARY || (e->kind == TIR_CALL && e->u.call.fn != TIR_NEG && e->u.call.fn != TIR_FABS) ||
                (e->kind == TIR_CAST && e->u.cast.value->dtype != KILN_DTYPE_F16));
  for (int32_t i = p->nbind - 1; round && i >= 0; --i)
    if (tir_expr_equal(p->bind_e[i], e)) round = false;
  if (round) hround_part(p, false);
  vexpr_f(p, e, round ? P_ANY : need);
  if (round) hround_part(p, true);
}

static void vexpr_f(pr_t* p, const tir_expr_t* e, int need) {
  const kiln_cf_dialect_t* d = p->d;
  for (int32_t i = p->nbind - 1; i >= 0; --i)
    if (tir_expr_equal(p->bind_e[i], e)) {
      putf(p, "kiln_s%d", (int)p->bind_id[i]);
      return;
    }
  const tir_expr_t* w = e->dtype == KILN_DTYPE_I32 ? widen_load(e) : NULL;
  if (w) { /* vok_i32: a widening load, or its broadcast */
    kiln_cf_check_buf(p, w->u.load.buf);
    tctx_t c = {.buf = w->u.load.buf, .idx = w->u.load.idx, .n = p->w};
    kiln_cf_tpl(p, varies(p, w) ? d->vwiden_i8x2 : d->vsplat_i8x2, &c);
    return;
  }
  if (!varies(p, e)) {
    /* f32(f16 load) broadcast: widen once in the vector unit */
    if (e->kind == TIR_CAST && e->dtype == KILN_DTYPE_F32 && e->u.cast.value->kind == TIR_LOAD &&
        e->u.cast.value->dtype == KILN_DTYPE_F16 && d->vsplat_half) {
      const tir_expr_t* v = e->u.cast.value;
      kiln_cf_check_buf(p, v->u.load.buf);
      tctx_t c = {.buf = v->u.load.buf, .idx = v->u.load.idx, .n = p->w};
      kiln_cf_tpl(p, d->vsplat_half, &c);
      return;
    }
    vtpl(p, e->dtype == KILN_DTYPE_BOOL ? d->vmask : e->dtype == KILN_DTYPE_I32 ? d->vsplat_i32 : d->vsplat,
         aex(e), (targ_t){0}, (targ_t){0});
    return;
  }
  switch (e->kind) {
    case TIR_LOAD: {
      kiln_cf_check_buf(p, e->u.load.buf);
      tctx_t c = {.buf = e->u.load.buf, .idx = e->u.load.idx, .n = p->w};
      const int32_t ti = kiln_cf_texel_param(p, e->u.load.buf);
      const char* pl = kiln_cf_texel_private(p, e->u.load.buf) ? d->tex_pload : NULL;
      kiln_cf_tpl(p, e->dtype == KILN_DTYPE_I32 ? d->vload_i32 : e->dtype == KILN_DTYPE_F16 ? d->vload_half : pl ? pl : ti >= 0 && (p->stexel >> ti & 1) ? d->tex_iload : d->vload, &c);
      return;
    }
    case TIR_BINARY: {
      tir_binop_t op = e->u.bin.op;
      const tir_expr_t* a = e->u.bin.a;
      const tir_expr_t* b = e->u.bin.b;
      const tir_expr_t* qx = op == TIR_MIN ? qsat_value(p, e) : NULL;
      if (qx) {
        vtpl(p, d->vqsat, avex(qx), avex(a->u.bin.b), avex(b));
      } else if (op == TIR_MIN || op == TIR_MAX) {
        vtpl(p, op == TIR_MIN ? d->vmin : d->vmax, avex(a), avex(b), (targ_t){0});
      } else if ((op == TIR_AND || op == TIR_OR) && d->vand) {
        vtpl(p, op == TIR_AND ? d->vand : d->vor, avex(a), avex(b), (targ_t){0});
      } else if (op >= TIR_EQ && op <= TIR_GE && d->vcmp[op - TIR_EQ]) {
        vtpl(p, d->vcmp[op - TIR_EQ], avex(a), avex(b), (targ_t){0});
      } else if (op == TIR_AND || op == TIR_OR) {
        kiln_cf_infix(p, a, op == TIR_AND ? "&" : "|", b, op == TIR_AND ? P_BAND : P_BOR, false,
                      need, true);
      } else {
        kiln_cf_infix(p, a, kiln_cf_binop_text(op), b, kiln_cf_binop_prec(op), false, need, true);
      }
      return;
    }
    case TIR_SELECT:
      if (varies(p, e->u.sel.cond)) {
        if (!vselect_bound(p, e)) vtpl(p, d->vsel, avex(e->u.sel.cond), avex(e->u.sel.t), avex(e->u.sel.f));
      } else {
        kiln_cf_select(p, e, need, true);
      }
      return;
    case TIR_CAST: { /* f32(f16 load), the rounded product, or a bool mask -> 1.0 / 0.0 */
      const tir_expr_t* v = e->u.cast.value;
      const tir_expr_t *fa, *fb;
      if (kiln_cf_f32_product(e, &fa, &fb)) {
        vtpl(p, d->vmulr, avex(fa), avex(fb), (targ_t){0});
        return;
      }
      if (vhalf(p) && vfloat(p, e->dtype) && vfloat(p, v->dtype) && e->dtype != v->dtype) {
        kiln_cf_vexpr(p, v, need); /* kiln_cf_vexpr rounds an F16 result */
        return;
      }
      if (v->kind == TIR_LOAD && (v->dtype == KILN_DTYPE_F16 || byte_load(p, v))) {
        kiln_cf_check_buf(p, v->u.load.buf);
        tctx_t c = {.buf = v->u.load.buf, .idx = v->u.load.idx, .n = p->w};
        kiln_cf_tpl(p, v->dtype == KILN_DTYPE_F16 ? d->vload_half : byte_vload(p, v->dtype), &c);
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
      if (fn == TIR_DOT2_I16 || fn == TIR_DOT4_U8I8) {
        vtpl(p, fn == TIR_DOT2_I16 ? d->vdot2_i16 : d->vdot4_u8i8, avex(e->u.call.args[0]), avex(e->u.call.args[1]), avex(e->u.call.args[2]));
      } else if (fn == TIR_NOT && d->vnot) {
        vtpl(p, d->vnot, avex(e->u.call.args[0]), (targ_t){0}, (targ_t){0});
      } else if (fn == TIR_NEG || fn == TIR_NOT) {
        bool o = open_p(p, P_UNARY, need);
        put(p, fn == TIR_NEG ? "-" : "~");
        kiln_cf_vexpr(p, e->u.call.args[0], P_UNARY + 1);
        close_p(p, o);
      } else if (fn == TIR_FABS) {
        vtpl(p, d->vabs, avex(e->u.call.args[0]), (targ_t){0}, (targ_t){0});
      } else if (fn != TIR_FMA && d->vmath[fn]) {
        vtpl(p, d->vmath[fn], avex(e->u.call.args[0]), (targ_t){0}, (targ_t){0});
      } else {
        kiln_cf_fma(p, e, need, true);
      }
      return;
    }
    default:
      kiln_cf_fail(p, KILN_INTERNAL, "expression cannot be vectorized");
  }
}

const char* kiln_cf_vstore_byte(const pr_t* p, kiln_dtype_t t) { return byte_vstore(p, t); }
