/* compute_inline / compute_at: move a producer stage into its consumers.
 * See ir/tir_schedule.h. */
#include "ir/tir_schedule_impl.h"

/* ==== compute_inline ==================================================== */

typedef struct {
  const tir_buffer_t* buf;
  int32_t count;
  tir_sch_path_t* first; /* path of the first store (optional) */
  tir_sch_path_t* lca;   /* common ancestors of all stores (optional) */
  int32_t lca_n;
} stores_t;

static bool stores_cb(tir_sch_visitor_t* v, const tir_stmt_t* s) {
  stores_t* t = v->ud;
  if (s->kind != TIR_STORE || s->u.store.buf != t->buf) return true;
  if (t->count++ == 0) {
    if (t->first) *t->first = v->p;
    if (t->lca) *t->lca = v->p;
    t->lca_n = v->p.n;
  } else if (t->lca) {
    int32_t k = 0;
    while (k < t->lca_n && k < v->p.n && t->lca->s[k] == v->p.s[k] &&
           t->lca->child[k] == v->p.child[k])
      ++k;
    t->lca_n = k;
  }
  return true;
}

/* Buffers loaded by an expression, appended to |out|. */
static bool collect_load_cb(const tir_expr_t* e, const void* out) {
  if (e->kind == TIR_LOAD && tir_sch_list_find(out, e->u.load.buf) < 0)
    tir_sch_list_push((tir_sch_list_t*)out, e->u.load.buf, 0);
  return false;
}

typedef struct {
  const tir_sch_list_t* bufs;
  const tir_buffer_t* hit;
  const tir_buffer_t* except; /* ignored */
} writes_t;

static bool writes_cb(tir_sch_visitor_t* v, const tir_stmt_t* s) {
  writes_t* w = v->ud;
  if (s->kind == TIR_STORE && s->u.store.buf != w->except && !w->hit &&
      tir_sch_list_find(w->bufs, s->u.store.buf) >= 0)
    w->hit = s->u.store.buf;
  return true;
}

/* The first buffer of |bufs| that |root| stores to, or NULL. */
static kiln_status_t find_write(const tir_stmt_t* root, const tir_sch_list_t* bufs,
                                const tir_buffer_t* except, const tir_buffer_t** hit) {
  writes_t w = {bufs, NULL, except};
  tir_sch_visitor_t v = {.on_stmt = writes_cb, .ud = &w};
  KILN_RETURN_IF_ERROR(tir_sch_visit(&v, root));
  *hit = w.hit;
  return NULL;
}

typedef struct {
  const tir_buffer_t* buf;
  const tir_sch_path_t* sp;    /* the store */
  int32_t j;                   /* index of the stage root in sp */
  const tir_sch_list_t* extra; /* variables of the value outside the nest */
  kiln_status_t err;
} inline_check_t;

/* Every read of the buffer must come after the producer in program order,
 * inside every loop the value depends on beyond the nest's own. */
static void inline_load_cb(tir_sch_visitor_t* v, const tir_expr_t* e) {
  inline_check_t* ic = v->ud;
  if (ic->err || e->u.load.buf != ic->buf) return;
  const tir_sch_path_t* lp = &v->p;
  const tir_sch_path_t* sp = ic->sp;
  int32_t m = 0;
  while (m < lp->n && m < sp->n && lp->s[m] == sp->s[m] && lp->child[m] == sp->child[m]) ++m;
  if (m == 0 || m >= lp->n || m > ic->j || lp->s[m - 1]->kind != TIR_SEQ ||
      lp->child[m] < sp->child[m]) {
    ic->err = kiln_make_status(KILN_INVALID_ARGUMENT,
                               "buffer '%s' is read before the statement that writes it",
                               ic->buf->name);
    return;
  }
  for (int32_t i = 0; i < ic->extra->n; ++i) {
    bool bound = false;
    for (int32_t k = 0; k < m && !bound; ++k)
      bound = sp->s[k]->kind == TIR_FOR && sp->s[k]->u.loop.var == ic->extra->v[i];
    if (!bound) {
      ic->err = kiln_make_status(
          KILN_UNSUPPORTED,
          "the value stored into '%s' uses loop '%s', which does not enclose a read of '%s'",
          ic->buf->name, ((const tir_var_t*)ic->extra->v[i])->name, ic->buf->name);
      return;
    }
  }
}

typedef struct {
  const tir_expr_t* value;
  int32_t rank;
  const tir_var_t* vars[KILN_MAX_RANK]; /* the nest variable indexing dim d */
} inline_ud_t;

static const tir_expr_t* inline_load(tir_sch_mapper_t* m, const tir_expr_t* const* idx) {
  inline_ud_t* u = m->ud;
  return tir_substitute_expr(m->c, u->value, u->rank, u->vars, idx);
}

static bool collect_var_cb(const tir_expr_t* e, const void* out) {
  if (e->kind == TIR_VARREF && tir_sch_list_find(out, e->u.var) < 0)
    tir_sch_list_push((tir_sch_list_t*)out, e->u.var, 0);
  return false;
}

kiln_status_t tir_sch_apply_inline(tir_sch_state_t* S, const char* bname) {
  tir_ctx_t* c = S->c;
  const tir_buffer_t* buf;
  KILN_RETURN_IF_ERROR(tir_sch_find_buffer(S, bname, &buf));
  tir_sch_path_t* sp = kiln_arena_alloc(&c->arena, sizeof(*sp));
  if (!sp) {
    c->oom = true;
    return NULL;
  }
  stores_t st = {buf, 0, sp, NULL, 0};
  tir_sch_visitor_t v = {.on_stmt = stores_cb, .ud = &st};
  KILN_RETURN_IF_ERROR(tir_sch_visit(&v, S->body));
  if (st.count == 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "no statement writes buffer '%s'", bname);
  if (st.count > 1)
    return kiln_make_status(KILN_UNSUPPORTED,
                            "buffer '%s' is written by %d stores; compute_inline needs one",
                            bname, st.count);
  const tir_stmt_t* store = sp->s[sp->n - 1];
  const tir_expr_t* const* idx = store->u.store.idx;
  /* The nest: loops directly around the store whose variables index it. */
  int32_t j = sp->n - 1;
  while (j > 0) {
    const tir_stmt_t* p = sp->s[j - 1];
    bool indexes = false;
    if (p->kind == TIR_FOR && p->u.loop.body == sp->s[j])
      for (int32_t d = 0; d < buf->rank; ++d) indexes |= tir_sch_is_var(idx[d], p->u.loop.var);
    if (!indexes) break;
    --j;
  }
  inline_ud_t u = {store->u.store.value, buf->rank, {NULL}};
  tir_sch_list_t nest = {.c = c};
  for (int32_t k = j; k < sp->n - 1; ++k) tir_sch_list_push(&nest, sp->s[k]->u.loop.var, 0);
  for (int32_t d = 0; d < buf->rank; ++d) {
    const tir_expr_t* e = idx[d];
    int32_t k = e->kind == TIR_VARREF ? tir_sch_list_find(&nest, e->u.var) : -1;
    if (k < 0)
      return kiln_make_status(KILN_UNSUPPORTED,
                              "the store to '%s' is not an injective nest with identity "
                              "indices: index %d is not a loop directly around it",
                              bname, (int)d);
    const tir_stmt_t* l = sp->s[j + k];
    if (l->u.loop.extent != buf->shape[d])
      return kiln_make_status(KILN_UNSUPPORTED,
                              "loop '%s' writing '%s' has extent %lld but dim %d has size %lld",
                              l->u.loop.var->name, bname, (long long)l->u.loop.extent, (int)d,
                              (long long)buf->shape[d]);
    for (int32_t q = 0; q < d; ++q)
      if (u.vars[q] == e->u.var)
        return kiln_make_status(KILN_UNSUPPORTED, "loop '%s' indexes two dims of '%s'",
                                e->u.var->name, bname);
    u.vars[d] = e->u.var;
  }
  if (tir_sch_expr_any(u.value, tir_sch_is_load, buf))
    return kiln_make_status(KILN_UNSUPPORTED, "the value stored into '%s' reads '%s'", bname,
                            bname);
  /* Inlining moves the reads of the value to the consumers: nothing may
   * change those buffers in the kernel. */
  tir_sch_list_t reads = {.c = c};
  tir_sch_expr_any(u.value, collect_load_cb, &reads);
  const tir_buffer_t* hit;
  KILN_RETURN_IF_ERROR(find_write(S->body, &reads, NULL, &hit));
  if (hit)
    return kiln_make_status(KILN_UNSUPPORTED,
                            "the value stored into '%s' reads '%s', which the kernel writes",
                            bname, hit->name);
  tir_sch_list_t vars = {.c = c}, extra = {.c = c};
  tir_sch_expr_any(u.value, collect_var_cb, &vars);
  for (int32_t i = 0; i < vars.n; ++i)
    if (tir_sch_list_find(&nest, vars.v[i]) < 0) tir_sch_list_push(&extra, vars.v[i], 0);
  inline_check_t ic = {buf, sp, j, &extra, NULL};
  tir_sch_visitor_t lv = {.on_load = inline_load_cb, .ud = &ic};
  KILN_RETURN_IF_ERROR(tir_sch_visit(&lv, S->body));
  if (ic.err) return ic.err;
  if (c->oom) return NULL;

  const tir_stmt_t* body = tir_sch_replace(c, S->body, sp->s[j], NULL);
  if (!body) body = tir_sch_empty(c);
  tir_sch_mapper_t m = {c, buf, inline_load, NULL, true, &u};
  if (body) S->body = tir_sch_map_stmt(&m, body);
  return NULL;
}

/* ==== compute_at ========================================================= */

/* Buffers loaded / stored anywhere in |root|. */
typedef struct {
  tir_sch_list_t* loads;
  tir_sch_list_t* stores;
} bufsets_t;

static bool bufsets_stmt(tir_sch_visitor_t* v, const tir_stmt_t* s) {
  bufsets_t* b = v->ud;
  if (s->kind == TIR_STORE && tir_sch_list_find(b->stores, s->u.store.buf) < 0)
    tir_sch_list_push(b->stores, s->u.store.buf, 0);
  return true;
}
static void bufsets_load(tir_sch_visitor_t* v, const tir_expr_t* e) {
  bufsets_t* b = v->ud;
  if (tir_sch_list_find(b->loads, e->u.load.buf) < 0) tir_sch_list_push(b->loads, e->u.load.buf, 0);
}
static kiln_status_t collect_buffers(const tir_stmt_t* root, tir_sch_list_t* loads,
                                     tir_sch_list_t* stores) {
  bufsets_t b = {loads, stores};
  tir_sch_visitor_t v = {.on_stmt = bufsets_stmt, .on_load = bufsets_load, .ud = &b};
  return tir_sch_visit(&v, root);
}

typedef struct {
  const tir_buffer_t* buf;
  const tir_sch_path_t* lca; /* stage root at index k */
  int32_t k;
  const tir_sch_path_t* lp; /* the consumer loop, last */
  bool outside;
} at_reads_t;

static bool same_prefix(const tir_sch_path_t* a, const tir_sch_path_t* b, int32_t n) {
  if (a->n < n || b->n < n) return false;
  for (int32_t i = 0; i < n; ++i)
    if (a->s[i] != b->s[i] || a->child[i] != b->child[i]) return false;
  return true;
}

static void at_reads_cb(tir_sch_visitor_t* v, const tir_expr_t* e) {
  at_reads_t* r = v->ud;
  if (e->u.load.buf != r->buf) return;
  if (same_prefix(&v->p, r->lca, r->k + 1)) return;                     /* inside the stage */
  if (v->p.n > r->lp->n && same_prefix(&v->p, r->lp, r->lp->n)) return; /* inside the loop */
  r->outside = true;
}

typedef struct {
  tir_ctx_t* c;
  const tir_sch_region_t* R;
  tir_sch_list_t* loops; /* all loops, for guard bounds; gains the new variables */
  tir_sch_list_t map;    /* stage loop var -> dim it indexes (ext = dim) */
  const tir_buffer_t* buf;
} at_ud_t;

/* Restricts each stage loop that indexes a dim of the buffer to the region
 * of that dim: v = base + lo + v', v' in [0, extent), guarded to stay in the
 * loop's old range. */
static const tir_stmt_t* at_xform(at_ud_t* u, const tir_stmt_t* s) {
  tir_ctx_t* c = u->c;
  switch (s->kind) {
    case TIR_FOR: {
      const tir_stmt_t* b = at_xform(u, s->u.loop.body);
      if (!b) return NULL;
      int32_t i = tir_sch_list_find(&u->map, s->u.loop.var);
      int32_t d = i >= 0 ? (int32_t)u->map.ext[i] : -1;
      if (d < 0 || u->R->d[d].full || u->R->ext[d] >= s->u.loop.extent)
        return b == s->u.loop.body ? s : tir_sch_for_like(c, s, b);
      const tir_var_t* nv = tir_var(c, s->u.loop.var->name);
      tir_sch_list_push(u->loops, nv, u->R->ext[d]);
      const tir_expr_t* x = tir_sch_region_source_index(c, &u->R->d[d], tir_ref(c, nv));
      const tir_expr_t* cond = NULL;
      if (x) tir_sch_range_guard(c, u->loops, x, s->u.loop.extent, &cond);
      b = tir_substitute_stmt(c, b, 1, &s->u.loop.var, &x);
      if (cond) b = tir_if(c, cond, b, NULL);
      return tir_sch_for(c, nv, u->R->ext[d], s->u.loop.kind, s->u.loop.tag, b);
    }
    case TIR_SEQ: {
      int32_t n = s->u.seq.n;
      if (!n) return s;
      const tir_stmt_t** items = kiln_arena_alloc(&c->arena, sizeof(*items) * (size_t)n);
      if (!items) {
        c->oom = true;
        return NULL;
      }
      for (int32_t i = 0; i < n; ++i)
        if (!(items[i] = at_xform(u, s->u.seq.items[i]))) return NULL;
      return tir_seq(c, n, items);
    }
    case TIR_IF: {
      const tir_stmt_t* t = at_xform(u, s->u.cond.then_s);
      const tir_stmt_t* e = s->u.cond.else_s ? at_xform(u, s->u.cond.else_s) : NULL;
      return tir_if(c, s->u.cond.cond, t, e);
    }
    case TIR_ALLOC: return tir_alloc(c, s->u.alloc.buf, at_xform(u, s->u.alloc.body));
    default: return s;
  }
}

kiln_status_t tir_sch_apply_compute_at(tir_sch_state_t* S, const char* bname, const char* lname) {
  tir_ctx_t* c = S->c;
  const tir_buffer_t* buf;
  const tir_stmt_t* L;
  KILN_RETURN_IF_ERROR(tir_sch_find_buffer(S, bname, &buf));
  tir_sch_path_t* lp = kiln_arena_alloc(&c->arena, sizeof(*lp));
  tir_sch_path_t* lca = kiln_arena_alloc(&c->arena, sizeof(*lca));
  if (!lp || !lca) {
    c->oom = true;
    return NULL;
  }
  KILN_RETURN_IF_ERROR(tir_sch_find_loop(S, lname, &L, lp));

  /* The stage: the statement of a sequence that holds every store. */
  stores_t st = {buf, 0, NULL, lca, 0};
  tir_sch_visitor_t v = {.on_stmt = stores_cb, .ud = &st};
  KILN_RETURN_IF_ERROR(tir_sch_visit(&v, S->body));
  if (st.count == 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "no statement writes buffer '%s'", bname);
  /* The stage is the statement, in the sequence where the stores and the
   * loop part ways, that holds every store; the loop must be in a later
   * statement of that sequence. */
  int32_t k = 0;
  while (k < st.lca_n && k < lp->n && lca->s[k] == lp->s[k] && lca->child[k] == lp->child[k]) ++k;
  if (k == st.lca_n)
    return kiln_make_status(KILN_UNSUPPORTED,
                            "the stores to '%s' are not all in one statement before loop '%s'",
                            bname, lname);
  if (k == 0 || k == lp->n || lca->s[k - 1]->kind != TIR_SEQ || lp->child[k] <= lca->child[k])
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "loop '%s' is not in a statement after the one that writes '%s'",
                            lname, bname);
  const tir_stmt_t* stage = lca->s[k];

  at_reads_t rd = {buf, lca, k, lp, false};
  tir_sch_visitor_t rv = {.on_load = at_reads_cb, .ud = &rd};
  KILN_RETURN_IF_ERROR(tir_sch_visit(&rv, S->body));
  if (rd.outside)
    return kiln_make_status(KILN_UNSUPPORTED, "buffer '%s' is also read outside loop '%s'", bname,
                            lname);
  /* Moving the stage later is only safe if it writes nothing else and what it
   * reads does not change in between. */
  tir_sch_list_t stage_loads = {.c = c}, stage_stores = {.c = c};
  KILN_RETURN_IF_ERROR(collect_buffers(stage, &stage_loads, &stage_stores));
  for (int32_t i = 0; i < stage_stores.n; ++i)
    if (stage_stores.v[i] != buf)
      return kiln_make_status(KILN_UNSUPPORTED, "the stage writing '%s' also writes '%s'", bname,
                              ((const tir_buffer_t*)stage_stores.v[i])->name);
  const tir_stmt_t* seq = lca->s[k - 1];
  for (int32_t i = lca->child[k] + 1; i <= lp->child[k]; ++i) {
    const tir_buffer_t* hit;
    KILN_RETURN_IF_ERROR(find_write(seq->u.seq.items[i], &stage_loads, buf, &hit));
    if (hit)
      return kiln_make_status(KILN_UNSUPPORTED,
                              "the stage writing '%s' reads '%s', which is written between "
                              "it and loop '%s'",
                              bname, hit->name, lname);
  }

  /* Region of the buffer one iteration of |L| reads. */
  tir_sch_accesses_t A;
  tir_sch_list_t inner, loops;
  KILN_RETURN_IF_ERROR(tir_sch_collect_accesses(c, L->u.loop.body, buf, &A));
  if (A.n == 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "buffer '%s' is not read inside loop '%s'",
                            bname, lname);
  tir_sch_region_t R;
  KILN_RETURN_IF_ERROR(tir_sch_loop_region(S, L, &A, &inner, &loops, &R));

  /* Which dim each stage loop indexes: the same plain variable in every
   * store, or in none. */
  at_ud_t u = {c, &R, &loops, {.c = c}, buf};
  tir_sch_accesses_t W;
  tir_sch_list_t stage_loops;
  KILN_RETURN_IF_ERROR(tir_sch_collect_accesses(c, stage, buf, &W));
  KILN_RETURN_IF_ERROR(tir_sch_collect_loops(c, stage, &stage_loops));
  for (int32_t i = 0; i < stage_loops.n; ++i) {
    const tir_var_t* lv = stage_loops.v[i];
    int32_t dim = -2;
    for (int32_t a = 0; a < W.n; ++a) {
      if (!W.a[a].store) continue;
      int32_t here = -1;
      for (int32_t d = 0; d < buf->rank; ++d) {
        const tir_expr_t* e = W.a[a].idx[d];
        if (tir_sch_is_var(e, lv) && here < 0) {
          here = d;
        } else if (tir_expr_uses_var(e, lv)) {
          return kiln_make_status(KILN_UNSUPPORTED,
                                  "index %d of a store to '%s' uses loop '%s' in an expression; "
                                  "compute_at needs plain loop variables",
                                  (int)d, bname, lv->name);
        }
      }
      if (dim != -2 && dim != here)
        return kiln_make_status(KILN_UNSUPPORTED,
                                "stores to '%s' use loop '%s' for different dims", bname,
                                lv->name);
      dim = here;
    }
    if (dim >= 0) tir_sch_list_push(&u.map, lv, dim);
  }
  const tir_stmt_t* moved = at_xform(&u, stage);
  if (!moved) return NULL;
  const tir_stmt_t* nl = tir_sch_for_like(c, L, tir_seq2(c, moved, L->u.loop.body));
  const tir_stmt_t* tg[2] = {stage, L};
  const tir_stmt_t* rp[2] = {NULL, nl};
  if (nl) S->body = tir_sch_rewrite(c, S->body, 2, tg, rp);
  return NULL;
}
