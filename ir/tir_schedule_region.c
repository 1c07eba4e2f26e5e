/* What the schedule primitives share (see ir/tir_schedule_impl.h): tree
 * rewriting by node identity, the ancestor-path visitor, loop and buffer
 * lookup by name, the one-buffer mapper, access collection and the region
 * analysis on affine forms bounded by ir/tir_bounds.c. */
#include "ir/tir_schedule_impl.h"

/* ==== tree utilities =================================================== */

const tir_stmt_t* tir_sch_for(tir_ctx_t* c, const tir_var_t* v, int64_t extent, tir_loop_kind_t k,
                              tir_thread_tag_t tag, const tir_stmt_t* body) {
  if (k == TIR_LOOP_BOUND) return tir_for_bound(c, v, extent, tag, body);
  return tir_for(c, v, extent, k, body);
}

const tir_stmt_t* tir_sch_for_like(tir_ctx_t* c, const tir_stmt_t* l, const tir_stmt_t* body) {
  /* a loop with a run-time trip count keeps it when a primitive rewrites
   * inside it (the block-sparse GEMM's loop over a tile's blocks) */
  if (l->u.loop.dyn_extent && l->u.loop.kind != TIR_LOOP_BOUND)
    return tir_for_dyn(c, l->u.loop.var, l->u.loop.extent, l->u.loop.dyn_extent, l->u.loop.kind, body);
  return tir_sch_for(c, l->u.loop.var, l->u.loop.extent, l->u.loop.kind, l->u.loop.tag, body);
}

const tir_stmt_t* tir_sch_empty(tir_ctx_t* c) { return tir_seq(c, 0, NULL); }

static bool is_empty(const tir_stmt_t* s) { return s->kind == TIR_SEQ && s->u.seq.n == 0; }

const tir_stmt_t* tir_sch_rewrite(tir_ctx_t* c, const tir_stmt_t* s, int32_t n,
                                  const tir_stmt_t* const* tg, const tir_stmt_t* const* rp) {
  for (int32_t i = 0; i < n; ++i)
    if (s == tg[i]) return (rp[i] && is_empty(rp[i])) ? NULL : rp[i];
  switch (s->kind) {
    case TIR_FOR: {
      const tir_stmt_t* b = tir_sch_rewrite(c, s->u.loop.body, n, tg, rp);
      if (b == s->u.loop.body) return s;
      return b ? tir_sch_for_like(c, s, b) : NULL;
    }
    case TIR_SEQ: {
      int32_t k = s->u.seq.n;
      if (!k) return s;
      const tir_stmt_t** items = kiln_arena_alloc(&c->arena, sizeof(*items) * (size_t)k);
      if (!items) {
        c->oom = true;
        return NULL;
      }
      bool changed = false;
      int32_t live = 0;
      for (int32_t i = 0; i < k; ++i) {
        items[i] = tir_sch_rewrite(c, s->u.seq.items[i], n, tg, rp);
        changed |= items[i] != s->u.seq.items[i];
        live += items[i] != NULL;
      }
      if (!changed) return s;
      return live ? tir_seq(c, k, items) : NULL;
    }
    case TIR_IF: {
      const tir_stmt_t* t = tir_sch_rewrite(c, s->u.cond.then_s, n, tg, rp);
      const tir_stmt_t* e =
          s->u.cond.else_s ? tir_sch_rewrite(c, s->u.cond.else_s, n, tg, rp) : NULL;
      if (t == s->u.cond.then_s && e == s->u.cond.else_s) return s;
      if (!t && !e) return NULL;
      return tir_if(c, s->u.cond.cond, t ? t : tir_sch_empty(c), e);
    }
    case TIR_ALLOC: {
      const tir_stmt_t* b = tir_sch_rewrite(c, s->u.alloc.body, n, tg, rp);
      if (b == s->u.alloc.body) return s;
      return b ? tir_alloc(c, s->u.alloc.buf, b) : NULL;
    }
    case TIR_STORE:
    case TIR_BARRIER:
    case TIR_PREFETCH:
      return s;
  }
  return s;
}

const tir_stmt_t* tir_sch_replace(tir_ctx_t* c, const tir_stmt_t* root, const tir_stmt_t* tg,
                                  const tir_stmt_t* rp) {
  return tir_sch_rewrite(c, root, 1, &tg, &rp);
}

static bool v_load(tir_visitor_t* tv, const tir_expr_t* e) {
  tir_sch_visitor_t* v = tv->user;
  if (e->kind == TIR_LOAD) v->on_load(v, e);
  return true;
}

/* The expressions of a statement are walked by the tensor-IR visitor: only
 * the statements need the path. */
static void v_expr(tir_sch_visitor_t* v, const tir_expr_t* e) {
  if (!v->on_load) return;
  tir_visitor_t tv = {.user = v, .expr_pre = v_load};
  tir_visit_expr(&tv, e);
}

static void v_stmt(tir_sch_visitor_t* v, const tir_stmt_t* s, int32_t child) {
  if (v->p.n >= TIR_SCH_MAX_DEPTH) {
    v->too_deep = true;
    return;
  }
  v->p.s[v->p.n] = s;
  v->p.child[v->p.n] = child;
  v->p.n++;
  if (!v->on_stmt || v->on_stmt(v, s)) {
    switch (s->kind) {
      case TIR_FOR: v_stmt(v, s->u.loop.body, 0); break;
      case TIR_STORE:
        for (int32_t i = 0; i < s->u.store.buf->rank; ++i) v_expr(v, s->u.store.idx[i]);
        v_expr(v, s->u.store.value);
        break;
      case TIR_SEQ:
        for (int32_t i = 0; i < s->u.seq.n; ++i) v_stmt(v, s->u.seq.items[i], i);
        break;
      case TIR_IF:
        v_expr(v, s->u.cond.cond);
        v_stmt(v, s->u.cond.then_s, 0);
        if (s->u.cond.else_s) v_stmt(v, s->u.cond.else_s, 1);
        break;
      case TIR_ALLOC: v_stmt(v, s->u.alloc.body, 0); break;
      case TIR_BARRIER: break;
      case TIR_PREFETCH:
        for (int32_t i = 0; i < s->u.store.buf->rank; ++i) v_expr(v, s->u.store.idx[i]);
        break;
    }
  }
  v->p.n--;
}

kiln_status_t tir_sch_visit(tir_sch_visitor_t* v, const tir_stmt_t* root) {
  v->p.n = 0;
  v->too_deep = false;
  v_stmt(v, root, 0);
  return v->too_deep ? kiln_make_status(KILN_LIMIT_EXCEEDED,
                                        "kernel nests deeper than %d statements", TIR_SCH_MAX_DEPTH)
                     : NULL;
}

void tir_sch_list_push(tir_sch_list_t* l, const void* p, int64_t ext) {
  if (l->n == l->cap) {
    int32_t cap = l->cap ? l->cap * 2 : 16;
    const void** v = kiln_arena_alloc(&l->c->arena, sizeof(*v) * (size_t)cap);
    int64_t* e = kiln_arena_alloc(&l->c->arena, sizeof(*e) * (size_t)cap);
    if (!v || !e) {
      l->c->oom = true;
      return;
    }
    if (l->n) {
      memcpy(v, l->v, sizeof(*v) * (size_t)l->n);
      memcpy(e, l->ext, sizeof(*e) * (size_t)l->n);
    }
    l->v = v;
    l->ext = e;
    l->cap = cap;
  }
  l->v[l->n] = p;
  l->ext[l->n] = ext;
  l->n++;
}

int32_t tir_sch_list_find(const tir_sch_list_t* l, const void* p) {
  for (int32_t i = 0; i < l->n; ++i)
    if (l->v[i] == p) return i;
  return -1;
}

static bool loops_cb(tir_sch_visitor_t* v, const tir_stmt_t* s) {
  if (s->kind == TIR_FOR) tir_sch_list_push(v->ud, s->u.loop.var, s->u.loop.extent);
  return true;
}

kiln_status_t tir_sch_collect_loops(tir_ctx_t* c, const tir_stmt_t* root, tir_sch_list_t* out) {
  memset(out, 0, sizeof(*out));
  out->c = c;
  tir_sch_visitor_t v = {.on_stmt = loops_cb, .ud = out};
  return tir_sch_visit(&v, root);
}

/* ==== expression utilities ============================================ */

static bool idx_eq(int32_t rank, const tir_expr_t* const* a, const tir_expr_t* const* b) {
  for (int32_t i = 0; i < rank; ++i)
    if (!tir_expr_equal(a[i], b[i])) return false;
  return true;
}

/* Calls |fn| on every variable reference and load in |e| (a load before its
 * indices); stops and returns true as soon as |fn| does. */
typedef struct any_s {
  bool (*fn)(const tir_expr_t* e, const void* ud);
  const void* ud;
  bool hit;
} any_t;

static bool any_pre(tir_visitor_t* v, const tir_expr_t* e) {
  any_t* a = v->user;
  if ((e->kind == TIR_VARREF || e->kind == TIR_LOAD) && a->fn(e, a->ud)) {
    a->hit = true;
    v->stop = true;
  }
  return true;
}

bool tir_sch_expr_any(const tir_expr_t* e, bool (*fn)(const tir_expr_t* e, const void* ud),
                      const void* ud) {
  any_t a = {fn, ud, false};
  tir_visitor_t v = {.user = &a, .expr_pre = any_pre};
  tir_visit_expr(&v, e);
  return a.hit;
}

bool tir_sch_is_var(const tir_expr_t* e, const void* var) {
  return e->kind == TIR_VARREF && e->u.var == var;
}
/* A load, or a variable in |set| (a tir_sch_list_t of vars). */
static bool load_or_in(const tir_expr_t* e, const void* set) {
  return e->kind == TIR_LOAD || tir_sch_list_find(set, e->u.var) >= 0;
}
bool tir_sch_is_load(const tir_expr_t* e, const void* buf) {
  return e->kind == TIR_LOAD && (!buf || e->u.load.buf == buf);
}

/* ---- interval bounds over loop ranges ---- */

/* The tensor-IR bounds analysis (ir/tir_bounds.c) gets the ranges of the
 * variables |e| uses: every loop var v of |t| in [0, extent-1]. */
typedef struct {
  const tir_sch_list_t* t;
  int32_t n;
  const tir_var_t* vars[TIR_BENV_MAX_VARS];
  int64_t lo[TIR_BENV_MAX_VARS], hi[TIR_BENV_MAX_VARS];
  bool bad; /* a variable that is not a loop of |t|, or too many */
} bvars_t;

static bool bvars_cb(const tir_expr_t* e, const void* ud) {
  bvars_t* b = (bvars_t*)ud;
  if (e->kind != TIR_VARREF) return false;
  for (int32_t i = 0; i < b->n; ++i)
    if (b->vars[i] == e->u.var) return false;
  int32_t i = tir_sch_list_find(b->t, e->u.var);
  if (i < 0 || b->t->ext[i] < 1 || b->n == TIR_BENV_MAX_VARS) {
    b->bad = true;
    return true;
  }
  b->vars[b->n] = e->u.var;
  b->lo[b->n] = 0;
  b->hi[b->n] = b->t->ext[i] - 1;
  b->n++;
  return false;
}

bool tir_sch_bounds(const tir_sch_list_t* t, const tir_expr_t* e, int64_t* lo, int64_t* hi) {
  bvars_t b;
  b.t = t;
  b.n = 0;
  b.bad = false;
  tir_sch_expr_any(e, bvars_cb, &b);
  return !b.bad && tir_expr_bounds(e, b.n, b.vars, b.lo, b.hi, lo, hi);
}

/* ---- affine forms (tir_lin_t): c + sum(k_i * atom_i) ---- */

void tir_sch_lin_of(tir_lin_t* a, const tir_expr_t* e) {
  tir_lin_init(a);
  tir_lin_collect(a, e, 1);
}

void tir_sch_lin_split(const tir_lin_t* a, const tir_sch_list_t* inner, tir_lin_t* out,
                       tir_lin_t* in) {
  tir_lin_init(out);
  tir_lin_init(in);
  in->c = a->c;
  for (int32_t i = 0; i < a->n; ++i) {
    if (a->k[i] == 0) continue;
    tir_lin_t* d = tir_sch_expr_any(a->t[i], load_or_in, inner) ? in : out;
    d->t[d->n] = a->t[i];
    d->k[d->n++] = a->k[i];
  }
}

/* Range of |a| over the loops of |t|: each term bounded by the engine. */
static bool lin_range(const tir_sch_list_t* t, const tir_lin_t* a, int64_t* lo, int64_t* hi) {
  tir_ival_t r = {a->c, a->c};
  for (int32_t i = 0; i < a->n; ++i) {
    tir_ival_t x, k = {a->k[i], a->k[i]};
    if (!tir_sch_bounds(t, a->t[i], &x.lo, &x.hi)) return false;
    r = tir_ival_add(r, tir_ival_mul(k, x));
  }
  if (!tir_ival_finite(r)) return false;
  *lo = r.lo;
  *hi = r.hi;
  return true;
}

typedef struct {
  const char* name;
  int32_t count;
  const tir_stmt_t* loop;
  tir_sch_path_t* path; /* of the first match, when non-NULL */
} find_loop_t;

static bool find_loop_cb(tir_sch_visitor_t* v, const tir_stmt_t* s) {
  find_loop_t* f = v->ud;
  if (s->kind == TIR_FOR && strcmp(s->u.loop.var->name, f->name) == 0) {
    if (f->count++ == 0) {
      f->loop = s;
      if (f->path) *f->path = v->p;
    }
  }
  return true;
}

int32_t tir_sch_count_loops(const tir_sch_state_t* S, const char* name) {
  find_loop_t f = {name, 0, NULL, NULL};
  tir_sch_visitor_t v = {.on_stmt = find_loop_cb, .ud = &f};
  kiln_status_free(tir_sch_visit(&v, S->body));
  return f.count;
}

kiln_status_t tir_sch_find_loop(const tir_sch_state_t* S, const char* name, const tir_stmt_t** out,
                                tir_sch_path_t* path) {
  if (!name || !*name) return kiln_make_status(KILN_INVALID_ARGUMENT, "missing loop name");
  find_loop_t f = {name, 0, NULL, path};
  tir_sch_visitor_t v = {.on_stmt = find_loop_cb, .ud = &f};
  KILN_RETURN_IF_ERROR(tir_sch_visit(&v, S->body));
  if (f.count == 0)
    return kiln_make_status(KILN_NOT_FOUND, "no loop named '%s' in kernel '%s'", name, S->f->name);
  if (f.count > 1)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "loop name '%s' is used by %d loops in kernel '%s'", name, f.count,
                            S->f->name);
  *out = f.loop;
  return NULL;
}

kiln_status_t tir_sch_check_new_loop(const tir_sch_state_t* S, const char* name) {
  if (tir_sch_count_loops(S, name))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "loop name '%s' already exists in kernel '%s'",
                            name, S->f->name);
  return NULL;
}

const char* tir_sch_join(tir_ctx_t* c, const char* a, const char* sep, const char* b) {
  char buf[512];
  snprintf(buf, sizeof(buf), "%s%s%s", a, sep, b);
  return tir_sch_strdup(c, buf);
}

static void fb_add(tir_sch_find_buf_t* f, const tir_buffer_t* b) {
  if (strcmp(b->name, f->name) == 0 && tir_sch_list_find(&f->found, b) < 0)
    tir_sch_list_push(&f->found, b, 0);
}
static bool fb_stmt(tir_sch_visitor_t* v, const tir_stmt_t* s) {
  if (s->kind == TIR_STORE) fb_add(v->ud, s->u.store.buf);
  if (s->kind == TIR_ALLOC) fb_add(v->ud, s->u.alloc.buf);
  return true;
}
static void fb_load(tir_sch_visitor_t* v, const tir_expr_t* e) { fb_add(v->ud, e->u.load.buf); }

kiln_status_t tir_sch_count_buffers(const tir_sch_state_t* S, const char* name,
                                    tir_sch_find_buf_t* f) {
  memset(f, 0, sizeof(*f));
  f->name = name;
  f->found.c = S->c;
  for (int32_t i = 0; i < S->f->n_params; ++i) fb_add(f, S->f->params[i]);
  tir_sch_visitor_t v = {.on_stmt = fb_stmt, .on_load = fb_load, .ud = f};
  return tir_sch_visit(&v, S->body);
}

kiln_status_t tir_sch_find_buffer(const tir_sch_state_t* S, const char* name,
                                  const tir_buffer_t** out) {
  if (!name || !*name) return kiln_make_status(KILN_INVALID_ARGUMENT, "missing buffer name");
  tir_sch_find_buf_t f;
  KILN_RETURN_IF_ERROR(tir_sch_count_buffers(S, name, &f));
  if (f.found.n == 0)
    return kiln_make_status(KILN_NOT_FOUND, "no buffer named '%s' in kernel '%s'", name,
                            S->f->name);
  if (f.found.n > 1)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "buffer name '%s' is used by %d buffers in kernel '%s'", name,
                            f.found.n, S->f->name);
  *out = f.found.v[0];
  return NULL;
}

/* ---- the one-buffer mapper, on the tensor-IR mutator ---- */

static const tir_expr_t* map_load(tir_mutator_t* mu, const tir_expr_t* e) {
  tir_sch_mapper_t* m = mu->user;
  return e->kind == TIR_LOAD && e->u.load.buf == m->buf ? m->on_load(m, e->u.load.idx) : e;
}

static const tir_stmt_t* map_node(tir_mutator_t* mu, const tir_stmt_t* s) {
  tir_sch_mapper_t* m = mu->user;
  if (s->kind == TIR_STORE && s->u.store.buf == m->buf && m->on_store)
    return m->on_store(m, s->u.store.idx, s->u.store.value);
  if (s->kind == TIR_ALLOC && m->unwrap_alloc && s->u.alloc.buf == m->buf) return s->u.alloc.body;
  return s;
}

const tir_stmt_t* tir_sch_map_stmt(tir_sch_mapper_t* m, const tir_stmt_t* s) {
  tir_mutator_t mu = {.ctx = m->c, .user = m, .stmt_post = map_node, .expr_post = map_load};
  return tir_mutate_stmt(&mu, s);
}

static void acc_push(tir_sch_accesses_t* A, tir_sch_access_t x) {
  if (A->n == A->cap) {
    int32_t cap = A->cap ? A->cap * 2 : 16;
    tir_sch_access_t* v = kiln_arena_alloc(&A->c->arena, sizeof(*v) * (size_t)cap);
    if (!v) {
      A->c->oom = true;
      return;
    }
    if (A->n) memcpy(v, A->a, sizeof(*v) * (size_t)A->n);
    A->a = v;
    A->cap = cap;
  }
  A->a[A->n++] = x;
}

static bool acc_stmt(tir_sch_visitor_t* v, const tir_stmt_t* s) {
  tir_sch_accesses_t* A = v->ud;
  if (s->kind == TIR_ALLOC && s->u.alloc.buf == A->buf) A->allocated_inside = true;
  if (s->kind == TIR_STORE && s->u.store.buf == A->buf) {
    tir_sch_access_t x = {s->u.store.idx, true, false, false};
    for (int32_t i = 0; i + 1 < v->p.n; ++i) {
      const tir_stmt_t* a = v->p.s[i];
      x.under_if |= a->kind == TIR_IF || (a->kind == TIR_FOR && a->u.loop.extent < 1);
    }
    acc_push(A, x);
  }
  return true;
}

static void acc_load(tir_sch_visitor_t* v, const tir_expr_t* e) {
  tir_sch_accesses_t* A = v->ud;
  if (e->u.load.buf != A->buf) return;
  tir_sch_access_t x = {e->u.load.idx, false, false, false};
  for (int32_t i = v->p.n - 1; i >= 1 && !x.covered; --i) {
    const tir_stmt_t* parent = v->p.s[i - 1];
    if (parent->kind != TIR_SEQ) continue;
    for (int32_t j = 0; j < v->p.child[i]; ++j) {
      const tir_stmt_t* it = parent->u.seq.items[j];
      if (it->kind == TIR_STORE && it->u.store.buf == A->buf &&
          idx_eq(A->buf->rank, it->u.store.idx, e->u.load.idx))
        x.covered = true;
    }
  }
  acc_push(A, x);
}

kiln_status_t tir_sch_collect_accesses(tir_ctx_t* c, const tir_stmt_t* root,
                                       const tir_buffer_t* buf, tir_sch_accesses_t* out) {
  memset(out, 0, sizeof(*out));
  out->c = c;
  out->buf = buf;
  tir_sch_visitor_t v = {.on_stmt = acc_stmt, .on_load = acc_load, .ud = out};
  return tir_sch_visit(&v, root);
}

void tir_sch_region_add(tir_sch_region_t* r, const tir_buffer_t* b, const tir_expr_t* const* idx,
                        const tir_sch_list_t* inner, const tir_sch_list_t* loops) {
  for (int32_t d = 0; d < b->rank; ++d) {
    tir_sch_dimreg_t* dr = &r->d[d];
    if (dr->full) continue;
    tir_lin_t a, out, in;
    tir_sch_lin_of(&a, idx[d]);
    int64_t lo, hi;
    if (!a.ok) {
      dr->full = true;
      continue;
    }
    tir_sch_lin_split(&a, inner, &out, &in);
    if (!lin_range(loops, &in, &lo, &hi)) {
      dr->full = true;
    } else if (r->n_acc == 0) {
      dr->base = out;
      dr->lo = lo;
      dr->hi = hi;
    } else if (!tir_lin_equal(&out, &dr->base)) {
      dr->full = true;
    } else {
      if (lo < dr->lo) dr->lo = lo;
      if (hi > dr->hi) dr->hi = hi;
    }
  }
  r->n_acc++;
}

void tir_sch_region_finish(tir_sch_region_t* r, const tir_buffer_t* b) {
  for (int32_t d = 0; d < b->rank; ++d) {
    tir_sch_dimreg_t* dr = &r->d[d];
    if (!dr->full && dr->hi - dr->lo + 1 >= b->shape[d]) dr->full = true;
    r->ext[d] = dr->full ? b->shape[d] : dr->hi - dr->lo + 1;
  }
}

kiln_status_t tir_sch_loop_region(const tir_sch_state_t* S, const tir_stmt_t* loop,
                                  const tir_sch_accesses_t* A, tir_sch_list_t* inner,
                                  tir_sch_list_t* loops, tir_sch_region_t* r) {
  KILN_RETURN_IF_ERROR(tir_sch_collect_loops(S->c, loop->u.loop.body, inner));
  KILN_RETURN_IF_ERROR(tir_sch_collect_loops(S->c, S->body, loops));
  memset(r, 0, sizeof(*r));
  for (int32_t i = 0; i < A->n; ++i) tir_sch_region_add(r, A->buf, A->a[i].idx, inner, loops);
  tir_sch_region_finish(r, A->buf);
  return NULL;
}

const tir_expr_t* tir_sch_region_local_index(tir_ctx_t* c, const tir_sch_dimreg_t* dr,
                                             const tir_expr_t* e, const tir_sch_list_t* inner) {
  if (dr->full) return e;
  tir_lin_t a, out, in;
  tir_sch_lin_of(&a, e);
  tir_sch_lin_split(&a, inner, &out, &in);
  in.c -= dr->lo;
  return tir_lin_to_expr(c, &in);
}

const tir_expr_t* tir_sch_region_source_index(tir_ctx_t* c, const tir_sch_dimreg_t* dr,
                                              const tir_expr_t* pos) {
  if (dr->full || !pos) return pos; /* NULL pos: out of memory */
  tir_lin_t a = dr->base;
  a.c = dr->lo;
  tir_lin_term(&a, pos, 1);
  return tir_lin_to_expr(c, &a);
}

void tir_sch_range_guard(tir_ctx_t* c, const tir_sch_list_t* loops, const tir_expr_t* e,
                         int64_t limit, const tir_expr_t** cond) {
  int64_t lo, hi;
  bool known = tir_sch_bounds(loops, e, &lo, &hi);
  const tir_expr_t* parts[2] = {NULL, NULL};
  if (!known || lo < 0) parts[0] = tir_bin(c, TIR_GE, e, tir_int(c, 0));
  if (!known || hi >= limit) parts[1] = tir_bin(c, TIR_LT, e, tir_int(c, limit));
  for (int i = 0; i < 2; ++i)
    if (parts[i]) *cond = *cond ? tir_bin(c, TIR_AND, *cond, parts[i]) : parts[i];
}
