/* Variable substitution on the tensor IR (tir_substitute_expr/_stmt).
 *
 * Substitution is simultaneous (vars[i] -> values[i] all at once, values are
 * not substituted again) and rebuilds only the spine above a change, so
 * unchanged subtrees are shared with the input. Variables are matched by
 * identity (pointer), not by name. A loop that binds one of |vars| shadows it
 * inside its body: the mapping does not apply there. */
#include "ir/tir.h"

/* Loop variables bound between the substitution root and the current node,
 * kept as a list on the C stack so that shadowing costs no allocation. */
typedef struct shadow_s {
  const tir_var_t* var;
  const struct shadow_s* next;
} shadow_t;

typedef struct {
  tir_ctx_t* c;
  int32_t n;
  const tir_var_t* const* vars;
  const tir_expr_t* const* values;
} subst_t;

static const tir_expr_t* lookup(const subst_t* s, const shadow_t* sh, const tir_var_t* v) {
  for (const shadow_t* p = sh; p; p = p->next)
    if (p->var == v) return NULL;
  for (int32_t i = 0; i < s->n; ++i)
    if (s->vars[i] == v) return s->values[i];
  return NULL;
}

static const tir_expr_t* sub_expr(const subst_t* s, const shadow_t* sh, const tir_expr_t* e);

/* Maps |n| index expressions; *changed tells whether any differs. Returns
 * |idx| itself when nothing changed, NULL on OOM. */
static const tir_expr_t* const* sub_idx(const subst_t* s, const shadow_t* sh, int32_t n,
                                        const tir_expr_t* const* idx, bool* changed) {
  *changed = false;
  if (n == 0) return idx;
  const tir_expr_t** out = kiln_arena_alloc(&s->c->arena, sizeof(*out) * (size_t)n);
  if (!out) {
    s->c->oom = true;
    return NULL;
  }
  for (int32_t i = 0; i < n; ++i) {
    out[i] = sub_expr(s, sh, idx[i]);
    if (!out[i]) return NULL;
    if (out[i] != idx[i]) *changed = true;
  }
  return *changed ? out : idx;
}

static const tir_expr_t* sub_expr(const subst_t* s, const shadow_t* sh, const tir_expr_t* e) {
  if (!e) return NULL;
  tir_ctx_t* c = s->c;
  switch (e->kind) {
    case TIR_INT:
    case TIR_FLOAT:
      return e;
    case TIR_VARREF: {
      const tir_expr_t* v = lookup(s, sh, e->u.var);
      return v ? v : e;
    }
    case TIR_BINARY: {
      const tir_expr_t* a = sub_expr(s, sh, e->u.bin.a);
      const tir_expr_t* b = sub_expr(s, sh, e->u.bin.b);
      if (!a || !b) return NULL;
      if (a == e->u.bin.a && b == e->u.bin.b) return e;
      return tir_bin(c, e->u.bin.op, a, b);
    }
    case TIR_SELECT: {
      const tir_expr_t* k = sub_expr(s, sh, e->u.sel.cond);
      const tir_expr_t* t = sub_expr(s, sh, e->u.sel.t);
      const tir_expr_t* f = sub_expr(s, sh, e->u.sel.f);
      if (!k || !t || !f) return NULL;
      if (k == e->u.sel.cond && t == e->u.sel.t && f == e->u.sel.f) return e;
      return tir_select(c, k, t, f);
    }
    case TIR_LOAD: {
      bool changed;
      const tir_expr_t* const* idx =
          sub_idx(s, sh, e->u.load.buf->rank, e->u.load.idx, &changed);
      if (!idx) return NULL;
      return changed ? tir_load(c, e->u.load.buf, idx) : e;
    }
    case TIR_CAST: {
      const tir_expr_t* v = sub_expr(s, sh, e->u.cast.value);
      if (!v) return NULL;
      return v == e->u.cast.value ? e : tir_cast(c, e->dtype, v);
    }
    case TIR_CALL: {
      const tir_expr_t* a[3] = {NULL, NULL, NULL};
      bool changed = false;
      for (int32_t i = 0; i < e->u.call.n; ++i) {
        a[i] = sub_expr(s, sh, e->u.call.args[i]);
        if (!a[i]) return NULL;
        changed |= a[i] != e->u.call.args[i];
      }
      return changed ? tir_call(c, e->u.call.fn, e->u.call.n, a[0], a[1], a[2]) : e;
    }
  }
  return e;
}

static const tir_stmt_t* sub_stmt(const subst_t* s, const shadow_t* sh, const tir_stmt_t* st) {
  if (!st) return NULL;
  tir_ctx_t* c = s->c;
  switch (st->kind) {
    case TIR_FOR: {
      shadow_t inner = {st->u.loop.var, sh};
      const tir_stmt_t* body = sub_stmt(s, &inner, st->u.loop.body);
      if (!body) return NULL;
      if (body == st->u.loop.body) return st;
      if (st->u.loop.kind == TIR_LOOP_BOUND)
        return tir_for_bound(c, st->u.loop.var, st->u.loop.extent, st->u.loop.tag, body);
      return tir_for(c, st->u.loop.var, st->u.loop.extent, st->u.loop.kind, body);
    }
    case TIR_STORE: {
      bool changed;
      const tir_expr_t* const* idx =
          sub_idx(s, sh, st->u.store.buf->rank, st->u.store.idx, &changed);
      const tir_expr_t* v = sub_expr(s, sh, st->u.store.value);
      if (!idx || !v) return NULL;
      if (!changed && v == st->u.store.value) return st;
      return tir_store(c, st->u.store.buf, idx, v);
    }
    case TIR_SEQ: {
      int32_t n = st->u.seq.n;
      if (n == 0) return st;
      const tir_stmt_t** items = kiln_arena_alloc(&c->arena, sizeof(*items) * (size_t)n);
      if (!items) {
        c->oom = true;
        return NULL;
      }
      bool changed = false;
      for (int32_t i = 0; i < n; ++i) {
        items[i] = sub_stmt(s, sh, st->u.seq.items[i]);
        if (!items[i]) return NULL;
        changed |= items[i] != st->u.seq.items[i];
      }
      return changed ? tir_seq(c, n, items) : st;
    }
    case TIR_IF: {
      const tir_expr_t* k = sub_expr(s, sh, st->u.cond.cond);
      const tir_stmt_t* t = sub_stmt(s, sh, st->u.cond.then_s);
      const tir_stmt_t* f = st->u.cond.else_s ? sub_stmt(s, sh, st->u.cond.else_s) : NULL;
      if (!k || !t || (st->u.cond.else_s && !f)) return NULL;
      if (k == st->u.cond.cond && t == st->u.cond.then_s && f == st->u.cond.else_s) return st;
      return tir_if(c, k, t, f);
    }
    case TIR_ALLOC: {
      const tir_stmt_t* body = sub_stmt(s, sh, st->u.alloc.body);
      if (!body) return NULL;
      return body == st->u.alloc.body ? st : tir_alloc(c, st->u.alloc.buf, body);
    }
    case TIR_BARRIER:
      return st;
  }
  return st;
}

const tir_expr_t* tir_substitute_expr(tir_ctx_t* c, const tir_expr_t* e, int32_t n,
                                      const tir_var_t* const* vars,
                                      const tir_expr_t* const* values) {
  subst_t s = {c, n, vars, values};
  return sub_expr(&s, NULL, e);
}

const tir_stmt_t* tir_substitute_stmt(tir_ctx_t* c, const tir_stmt_t* st, int32_t n,
                                      const tir_var_t* const* vars,
                                      const tir_expr_t* const* values) {
  subst_t s = {c, n, vars, values};
  return sub_stmt(&s, NULL, st);
}
