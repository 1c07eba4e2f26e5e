/* The tensor-IR visitor and mutator (see ir/tir_visit.h). */
#include "ir/tir_visit.h"

/* ---- visitor ------------------------------------------------------------ */

void tir_visit_expr(tir_visitor_t* v, const tir_expr_t* e) {
  if (!e || v->stop) return;
  if (v->expr_pre && !v->expr_pre(v, e)) return;
  switch (e->kind) {
    case TIR_INT:
    case TIR_FLOAT:
    case TIR_VARREF:
      break;
    case TIR_BINARY:
      tir_visit_expr(v, e->u.bin.a);
      tir_visit_expr(v, e->u.bin.b);
      break;
    case TIR_SELECT:
      tir_visit_expr(v, e->u.sel.cond);
      tir_visit_expr(v, e->u.sel.t);
      tir_visit_expr(v, e->u.sel.f);
      break;
    case TIR_LOAD:
      for (int32_t i = 0; i < e->u.load.buf->rank; ++i) tir_visit_expr(v, e->u.load.idx[i]);
      break;
    case TIR_CAST:
      tir_visit_expr(v, e->u.cast.value);
      break;
    case TIR_CALL:
      for (int32_t i = 0; i < e->u.call.n; ++i) tir_visit_expr(v, e->u.call.args[i]);
      break;
  }
  if (v->expr_post && !v->stop) v->expr_post(v, e);
}

void tir_visit_stmt(tir_visitor_t* v, const tir_stmt_t* s) {
  if (!s || v->stop) return;
  if (v->stmt_pre && !v->stmt_pre(v, s)) return;
  /* Statement-only walks (no expression callback) skip the expressions:
   * most of a kernel's nodes are there. */
  const bool exprs = v->expr_pre || v->expr_post;
  switch (s->kind) {
    case TIR_FOR:
      if (exprs && s->u.loop.dyn_extent) tir_visit_expr(v, s->u.loop.dyn_extent);
      tir_visit_stmt(v, s->u.loop.body);
      break;
    case TIR_STORE:
      if (exprs) {
        for (int32_t i = 0; i < s->u.store.buf->rank; ++i) tir_visit_expr(v, s->u.store.idx[i]);
        tir_visit_expr(v, s->u.store.value);
      }
      break;
    case TIR_SEQ:
      for (int32_t i = 0; i < s->u.seq.n; ++i) tir_visit_stmt(v, s->u.seq.items[i]);
      break;
    case TIR_IF:
      if (exprs) tir_visit_expr(v, s->u.cond.cond);
      tir_visit_stmt(v, s->u.cond.then_s);
      tir_visit_stmt(v, s->u.cond.else_s);
      break;
    case TIR_ALLOC:
      tir_visit_stmt(v, s->u.alloc.body);
      break;
    case TIR_BARRIER:
      break;
    case TIR_PREFETCH:
      if (exprs)
        for (int32_t i = 0; i < s->u.store.buf->rank; ++i) tir_visit_expr(v, s->u.store.idx[i]);
      break;
  }
  if (v->stmt_post && !v->stop) v->stmt_post(v, s);
}

/* ---- mutator ------------------------------------------------------------ */

const tir_stmt_t* tir_for_with_body(tir_ctx_t* c, const tir_stmt_t* loop, const tir_stmt_t* body) {
  if (!body) return NULL;
  if (body == loop->u.loop.body) return loop;
  if (loop->u.loop.dyn_extent)
    return tir_for_dyn(c, loop->u.loop.var, loop->u.loop.extent, loop->u.loop.dyn_extent, loop->u.loop.kind, body);
  if (loop->u.loop.kind == TIR_LOOP_BOUND)
    return tir_for_bound(c, loop->u.loop.var, loop->u.loop.extent, loop->u.loop.tag, body);
  return tir_for(c, loop->u.loop.var, loop->u.loop.extent, loop->u.loop.kind, body);
}

/* Mutates |n| index expressions into |out| (KILN_MAX_RANK entries). False on
 * failure; *changed tells whether any differs. */
static bool mutate_idx(tir_mutator_t* m, int32_t n, const tir_expr_t* const* idx,
                       const tir_expr_t** out, bool* changed) {
  *changed = false;
  for (int32_t i = 0; i < n; ++i) {
    out[i] = tir_mutate_expr(m, idx[i]);
    if (!out[i]) return false;
    *changed |= out[i] != idx[i];
  }
  return true;
}

/* |e| over mutated children: |e| itself when none changed, NULL on failure. */
static const tir_expr_t* rebuild_expr(tir_mutator_t* m, const tir_expr_t* e) {
  tir_ctx_t* c = m->ctx;
  switch (e->kind) {
    case TIR_INT:
    case TIR_FLOAT:
    case TIR_VARREF:
      return e;
    case TIR_BINARY: {
      const tir_expr_t* a = tir_mutate_expr(m, e->u.bin.a);
      const tir_expr_t* b = a ? tir_mutate_expr(m, e->u.bin.b) : NULL;
      if (!a || !b) return NULL;
      if (a == e->u.bin.a && b == e->u.bin.b) return e;
      return tir_bin(c, e->u.bin.op, a, b);
    }
    case TIR_SELECT: {
      const tir_expr_t* k = tir_mutate_expr(m, e->u.sel.cond);
      const tir_expr_t* t = k ? tir_mutate_expr(m, e->u.sel.t) : NULL;
      const tir_expr_t* f = t ? tir_mutate_expr(m, e->u.sel.f) : NULL;
      if (!f) return NULL;
      if (k == e->u.sel.cond && t == e->u.sel.t && f == e->u.sel.f) return e;
      return tir_select(c, k, t, f);
    }
    case TIR_LOAD: {
      const tir_expr_t* idx[KILN_MAX_RANK];
      bool changed;
      if (!mutate_idx(m, e->u.load.buf->rank, e->u.load.idx, idx, &changed)) return NULL;
      return changed ? tir_load(c, e->u.load.buf, idx) : e;
    }
    case TIR_CAST: {
      const tir_expr_t* v = tir_mutate_expr(m, e->u.cast.value);
      if (!v) return NULL;
      return v == e->u.cast.value ? e : tir_cast(c, e->dtype, v);
    }
    case TIR_CALL: {
      const tir_expr_t* a[3] = {NULL, NULL, NULL};
      bool changed = false;
      for (int32_t i = 0; i < e->u.call.n; ++i) {
        a[i] = tir_mutate_expr(m, e->u.call.args[i]);
        if (!a[i]) return NULL;
        changed |= a[i] != e->u.call.args[i];
      }
      return changed ? tir_call(c, e->u.call.fn, e->u.call.n, a[0], a[1], a[2]) : e;
    }
  }
  return e;
}

const tir_expr_t* tir_mutate_expr(tir_mutator_t* m, const tir_expr_t* e) {
  if (!e) return NULL;
  const tir_expr_t* out = NULL;
  if (m->expr_pre && m->expr_pre(m, e, &out)) return out;
  const tir_expr_t* r = rebuild_expr(m, e);
  if (!r || !m->expr_post) return r;
  return m->expr_post(m, r);
}

static const tir_stmt_t* rebuild_seq(tir_mutator_t* m, const tir_stmt_t* s) {
  tir_ctx_t* c = m->ctx;
  const int32_t n = s->u.seq.n;
  if (n == 0) return s;
  /* In the arena rather than on the stack: sequences can be long. */
  const tir_stmt_t** items = kiln_arena_alloc(&c->arena, sizeof(*items) * (size_t)n);
  if (!items) {
    c->oom = true;
    return NULL;
  }
  bool changed = false;
  for (int32_t i = 0; i < n; ++i) {
    items[i] = tir_mutate_stmt(m, s->u.seq.items[i]);
    if (!items[i]) return NULL;
    changed |= items[i] != s->u.seq.items[i];
  }
  return changed ? tir_seq(c, n, items) : s;
}

/* |s| over mutated children: |s| itself when none changed, NULL on failure. */
static const tir_stmt_t* rebuild_stmt(tir_mutator_t* m, const tir_stmt_t* s) {
  tir_ctx_t* c = m->ctx;
  /* Without expression callbacks every expression comes back unchanged. */
  const bool exprs = m->expr_pre || m->expr_post;
  switch (s->kind) {
    case TIR_FOR: {
      /* a run-time trip count may use enclosing loops' variables (the
       * block-sparse GEMM's per-tile block count): mutated like the body */
      const tir_expr_t* dyn = s->u.loop.dyn_extent;
      if (exprs && dyn && !(dyn = tir_mutate_expr(m, dyn))) return NULL;
      const tir_stmt_t* body = tir_mutate_stmt(m, s->u.loop.body);
      if (!body) return NULL;
      if (dyn == s->u.loop.dyn_extent) return tir_for_with_body(c, s, body);
      return tir_for_dyn(c, s->u.loop.var, s->u.loop.extent, dyn, s->u.loop.kind, body);
    }
    case TIR_STORE: {
      if (!exprs) return s;
      const tir_expr_t* idx[KILN_MAX_RANK];
      bool changed;
      if (!mutate_idx(m, s->u.store.buf->rank, s->u.store.idx, idx, &changed)) return NULL;
      const tir_expr_t* v = tir_mutate_expr(m, s->u.store.value);
      if (!v) return NULL;
      if (!changed && v == s->u.store.value) return s;
      return tir_store(c, s->u.store.buf, idx, v);
    }
    case TIR_SEQ:
      return rebuild_seq(m, s);
    case TIR_IF: {
      const tir_expr_t* k = exprs ? tir_mutate_expr(m, s->u.cond.cond) : s->u.cond.cond;
      const tir_stmt_t* t = k ? tir_mutate_stmt(m, s->u.cond.then_s) : NULL;
      if (!t) return NULL;
      const tir_stmt_t* f = NULL;
      if (s->u.cond.else_s && !(f = tir_mutate_stmt(m, s->u.cond.else_s))) return NULL;
      if (k == s->u.cond.cond && t == s->u.cond.then_s && f == s->u.cond.else_s) return s;
      return tir_if(c, k, t, f);
    }
    case TIR_ALLOC: {
      const tir_stmt_t* body = tir_mutate_stmt(m, s->u.alloc.body);
      if (!body) return NULL;
      return body == s->u.alloc.body ? s : tir_alloc(c, s->u.alloc.buf, body);
    }
    case TIR_BARRIER:
      return s;
    case TIR_PREFETCH: {
      if (!exprs) return s;
      const tir_expr_t* idx[KILN_MAX_RANK];
      bool changed;
      if (!mutate_idx(m, s->u.store.buf->rank, s->u.store.idx, idx, &changed)) return NULL;
      return changed ? tir_prefetch(c, s->u.store.buf, idx) : s;
    }
  }
  return s;
}

const tir_stmt_t* tir_mutate_stmt(tir_mutator_t* m, const tir_stmt_t* s) {
  if (!s) return NULL;
  const tir_stmt_t* out = NULL;
  if (m->stmt_pre && m->stmt_pre(m, s, &out)) return out;
  const tir_stmt_t* r = rebuild_stmt(m, s);
  if (!r || !m->stmt_post) return r;
  return m->stmt_post(m, r);
}
