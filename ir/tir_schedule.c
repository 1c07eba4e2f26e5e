/* Schedule primitives on the tensor IR (see ir/tir_schedule.h).
 *
 * Every primitive is a pure tree rewrite: it locates its loop(s) or buffer
 * in the current kernel body, builds the replacement subtree and rebuilds
 * the spine above it (nodes are immutable, unchanged subtrees are shared).
 * Steps run in order; the first failing step stops the schedule and its
 * status reads "schedule step <i> <step>: <reason>" with <i> counted from 0
 * (the index into tir_schedule_t.steps).
 *
 * Region analysis (cache_read/cache_write/compute_at) works per buffer dim:
 * each index expression is flattened into an affine form  c + sum(k * atom);
 * atoms that use no loop inside the chosen loop form the "base" (the part
 * fixed for one iteration of the loop), the rest is bounded with interval
 * arithmetic over the loop ranges. All accesses must agree on the base,
 * otherwise (or when a part cannot be bounded) the dim falls back to the
 * whole buffer extent, which is always correct, just not smaller.
 */
#include "ir/tir_schedule.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ir/tir_analysis.h"
#include "ir/tir_visit.h"

/* tir_simplify_func is H-tir's (ir/tir_simplify.c). Set to 0 to build the
 * schedule code without it. */
#ifndef KILN_SCHED_SIMPLIFY
#define KILN_SCHED_SIMPLIFY 1
#endif

#define MAX_DEPTH 256

/* ==== schedule builders =============================================== */

tir_schedule_t* tir_schedule_new(tir_ctx_t* c) {
  tir_schedule_t* s = kiln_arena_alloc(&c->arena, sizeof(*s));
  if (!s) c->oom = true;
  return s;
}

static const char* dup(tir_ctx_t* c, const char* str) {
  if (!str) return NULL;
  char* d = kiln_arena_strndup(&c->arena, str, strlen(str));
  if (!d) c->oom = true;
  return d;
}

/* Appends a zeroed step; NULL (and ctx->oom) when memory runs out. */
static tir_sched_step_t* push(tir_ctx_t* c, tir_schedule_t* s, tir_sched_kind_t kind) {
  if (!s) return NULL;
  if (s->n == s->cap) {
    int32_t cap = s->cap ? s->cap * 2 : 8;
    tir_sched_step_t* v = kiln_arena_alloc(&c->arena, sizeof(*v) * (size_t)cap);
    if (!v) {
      c->oom = true;
      return NULL;
    }
    if (s->n) memcpy(v, s->steps, sizeof(*v) * (size_t)s->n);
    s->steps = v;
    s->cap = cap;
  }
  tir_sched_step_t* st = &s->steps[s->n++];
  memset(st, 0, sizeof(*st));
  st->kind = kind;
  return st;
}

void tir_sched_split(tir_ctx_t* c, tir_schedule_t* s, const char* loop, int64_t factor) {
  tir_sched_step_t* st = push(c, s, TIR_SCHED_SPLIT);
  if (!st) return;
  st->loop = dup(c, loop);
  st->factor = factor;
}

void tir_sched_reorder(tir_ctx_t* c, tir_schedule_t* s, int32_t n, const char* const* loops) {
  tir_sched_step_t* st = push(c, s, TIR_SCHED_REORDER);
  if (!st) return;
  /* More than TIR_SCHED_MAX_LOOPS names: keep the count so apply reports it. */
  st->n_loops = n;
  for (int32_t i = 0; i < n && i < TIR_SCHED_MAX_LOOPS; ++i) st->loops[i] = dup(c, loops[i]);
}

void tir_sched_tile(tir_ctx_t* c, tir_schedule_t* s, const char* a, const char* b, int64_t fa,
                    int64_t fb) {
  tir_sched_step_t* st = push(c, s, TIR_SCHED_TILE);
  if (!st) return;
  st->loop = dup(c, a);
  st->loop2 = dup(c, b);
  st->factor = fa;
  st->factor2 = fb;
}

void tir_sched_fuse(tir_ctx_t* c, tir_schedule_t* s, const char* a, const char* b) {
  tir_sched_step_t* st = push(c, s, TIR_SCHED_FUSE);
  if (!st) return;
  st->loop = dup(c, a);
  st->loop2 = dup(c, b);
}

static void one_loop(tir_ctx_t* c, tir_schedule_t* s, tir_sched_kind_t k, const char* loop) {
  tir_sched_step_t* st = push(c, s, k);
  if (st) st->loop = dup(c, loop);
}

void tir_sched_vectorize(tir_ctx_t* c, tir_schedule_t* s, const char* loop) {
  one_loop(c, s, TIR_SCHED_VECTORIZE, loop);
}
void tir_sched_unroll(tir_ctx_t* c, tir_schedule_t* s, const char* loop) {
  one_loop(c, s, TIR_SCHED_UNROLL, loop);
}
void tir_sched_parallel(tir_ctx_t* c, tir_schedule_t* s, const char* loop) {
  one_loop(c, s, TIR_SCHED_PARALLEL, loop);
}

void tir_sched_bind(tir_ctx_t* c, tir_schedule_t* s, const char* loop, tir_thread_tag_t tag) {
  tir_sched_step_t* st = push(c, s, TIR_SCHED_BIND);
  if (!st) return;
  st->loop = dup(c, loop);
  st->tag = tag;
}

static void cache(tir_ctx_t* c, tir_schedule_t* s, tir_sched_kind_t k, const char* buffer,
                  const char* loop, tir_scope_t scope) {
  tir_sched_step_t* st = push(c, s, k);
  if (!st) return;
  st->buffer = dup(c, buffer);
  st->loop = dup(c, loop);
  st->scope = scope;
}

void tir_sched_cache_read(tir_ctx_t* c, tir_schedule_t* s, const char* buffer, const char* loop,
                          tir_scope_t scope) {
  cache(c, s, TIR_SCHED_CACHE_READ, buffer, loop, scope);
}
void tir_sched_cache_write(tir_ctx_t* c, tir_schedule_t* s, const char* buffer, const char* loop,
                           tir_scope_t scope) {
  cache(c, s, TIR_SCHED_CACHE_WRITE, buffer, loop, scope);
}

void tir_sched_compute_inline(tir_ctx_t* c, tir_schedule_t* s, const char* buffer) {
  tir_sched_step_t* st = push(c, s, TIR_SCHED_COMPUTE_INLINE);
  if (st) st->buffer = dup(c, buffer);
}

void tir_sched_compute_at(tir_ctx_t* c, tir_schedule_t* s, const char* buffer, const char* loop) {
  tir_sched_step_t* st = push(c, s, TIR_SCHED_COMPUTE_AT);
  if (!st) return;
  st->buffer = dup(c, buffer);
  st->loop = dup(c, loop);
}

/* ==== printing ========================================================= */

static const char* tag_name(tir_thread_tag_t t) {
  static const char* const names[] = {"none",     "block.x",  "block.y", "block.z",
                                      "thread.x", "thread.y", "thread.z"};
  return (t >= 0 && t <= TIR_THREAD_Z) ? names[t] : "?";
}

static const char* scope_name(tir_scope_t s) {
  switch (s) {
    case TIR_SCOPE_GLOBAL: return "global";
    case TIR_SCOPE_LOCAL: return "local";
    case TIR_SCOPE_PRIVATE: return "private";
  }
  return "?";
}

/* snprintf that appends at *pos and never overflows |n|. */
static void app(char* out, size_t n, size_t* pos, const char* fmt, ...) KILN_PRINTF(4, 5);
static void app(char* out, size_t n, size_t* pos, const char* fmt, ...) {
  if (*pos >= n) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(out + *pos, n - *pos, fmt, ap);
  va_end(ap);
  if (k > 0) *pos += (size_t)k;
  if (*pos >= n) *pos = n - 1;
}

#define NM(x) ((x) ? (x) : "?")

static void step_str(const tir_sched_step_t* st, char* out, size_t n) {
  size_t p = 0;
  out[0] = '\0';
  switch (st->kind) {
    case TIR_SCHED_SPLIT:
      app(out, n, &p, "split(%s, %lld)", NM(st->loop), (long long)st->factor);
      break;
    case TIR_SCHED_REORDER:
      app(out, n, &p, "reorder(");
      for (int32_t i = 0; i < st->n_loops && i < TIR_SCHED_MAX_LOOPS; ++i)
        app(out, n, &p, "%s%s", i ? ", " : "", NM(st->loops[i]));
      if (st->n_loops > TIR_SCHED_MAX_LOOPS) app(out, n, &p, ", ...");
      app(out, n, &p, ")");
      break;
    case TIR_SCHED_TILE:
      app(out, n, &p, "tile(%s, %s, %lld, %lld)", NM(st->loop), NM(st->loop2),
          (long long)st->factor, (long long)st->factor2);
      break;
    case TIR_SCHED_FUSE: app(out, n, &p, "fuse(%s, %s)", NM(st->loop), NM(st->loop2)); break;
    case TIR_SCHED_VECTORIZE: app(out, n, &p, "vectorize(%s)", NM(st->loop)); break;
    case TIR_SCHED_UNROLL: app(out, n, &p, "unroll(%s)", NM(st->loop)); break;
    case TIR_SCHED_PARALLEL: app(out, n, &p, "parallel(%s)", NM(st->loop)); break;
    case TIR_SCHED_BIND:
      app(out, n, &p, "bind(%s, %s)", NM(st->loop), tag_name(st->tag));
      break;
    case TIR_SCHED_CACHE_READ:
    case TIR_SCHED_CACHE_WRITE:
      app(out, n, &p, "%s(%s, %s, %s)",
          st->kind == TIR_SCHED_CACHE_READ ? "cache_read" : "cache_write", NM(st->buffer),
          NM(st->loop), scope_name(st->scope));
      break;
    case TIR_SCHED_COMPUTE_INLINE: app(out, n, &p, "compute_inline(%s)", NM(st->buffer)); break;
    case TIR_SCHED_COMPUTE_AT:
      app(out, n, &p, "compute_at(%s, %s)", NM(st->buffer), NM(st->loop));
      break;
    default: app(out, n, &p, "step kind %d", (int)st->kind); break;
  }
}

void tir_schedule_print(const tir_schedule_t* s, FILE* out) {
  if (!s) return;
  char buf[1024];
  for (int32_t i = 0; i < s->n; ++i) {
    step_str(&s->steps[i], buf, sizeof(buf));
    fprintf(out, "%s;\n", buf);
  }
}

/* ==== tree utilities =================================================== */

static const tir_stmt_t* mk_for(tir_ctx_t* c, const tir_var_t* v, int64_t extent,
                                tir_loop_kind_t k, tir_thread_tag_t tag,
                                const tir_stmt_t* body) {
  if (k == TIR_LOOP_BOUND) return tir_for_bound(c, v, extent, tag, body);
  return tir_for(c, v, extent, k, body);
}

/* Same loop (var, extent, kind, tag) around a new body. */
static const tir_stmt_t* for_like(tir_ctx_t* c, const tir_stmt_t* l, const tir_stmt_t* body) {
  return mk_for(c, l->u.loop.var, l->u.loop.extent, l->u.loop.kind, l->u.loop.tag, body);
}

static const tir_stmt_t* empty_stmt(tir_ctx_t* c) { return tir_seq(c, 0, NULL); }

static bool is_empty(const tir_stmt_t* s) { return s->kind == TIR_SEQ && s->u.seq.n == 0; }

/* Rebuilds |s| with the nodes tg[i] (by identity) replaced by rp[i]. A NULL
 * replacement deletes the node; loops, allocs and ifs left without a body
 * disappear with it. Returns NULL when everything is deleted (or on OOM:
 * callers check ctx->oom). */
static const tir_stmt_t* rewrite(tir_ctx_t* c, const tir_stmt_t* s, int32_t n,
                                 const tir_stmt_t* const* tg, const tir_stmt_t* const* rp) {
  for (int32_t i = 0; i < n; ++i)
    if (s == tg[i]) return (rp[i] && is_empty(rp[i])) ? NULL : rp[i];
  switch (s->kind) {
    case TIR_FOR: {
      const tir_stmt_t* b = rewrite(c, s->u.loop.body, n, tg, rp);
      if (b == s->u.loop.body) return s;
      return b ? for_like(c, s, b) : NULL;
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
        items[i] = rewrite(c, s->u.seq.items[i], n, tg, rp);
        changed |= items[i] != s->u.seq.items[i];
        live += items[i] != NULL;
      }
      if (!changed) return s;
      return live ? tir_seq(c, k, items) : NULL;
    }
    case TIR_IF: {
      const tir_stmt_t* t = rewrite(c, s->u.cond.then_s, n, tg, rp);
      const tir_stmt_t* e = s->u.cond.else_s ? rewrite(c, s->u.cond.else_s, n, tg, rp) : NULL;
      if (t == s->u.cond.then_s && e == s->u.cond.else_s) return s;
      if (!t && !e) return NULL;
      return tir_if(c, s->u.cond.cond, t ? t : empty_stmt(c), e);
    }
    case TIR_ALLOC: {
      const tir_stmt_t* b = rewrite(c, s->u.alloc.body, n, tg, rp);
      if (b == s->u.alloc.body) return s;
      return b ? tir_alloc(c, s->u.alloc.buf, b) : NULL;
    }
    case TIR_STORE:
    case TIR_BARRIER:
      return s;
  }
  return s;
}

static const tir_stmt_t* replace1(tir_ctx_t* c, const tir_stmt_t* root, const tir_stmt_t* tg,
                                  const tir_stmt_t* rp) {
  return rewrite(c, root, 1, &tg, &rp);
}

/* ---- visitor with the path of ancestors ---- */

typedef struct {
  int32_t n;
  const tir_stmt_t* s[MAX_DEPTH];
  int32_t child[MAX_DEPTH]; /* index of s[i] among the children of s[i-1] */
} path_t;

typedef struct visit_s visit_t;
struct visit_s {
  path_t p;
  /* Pre-order; the node is p.s[p.n-1]. Return false to skip its children. */
  bool (*on_stmt)(visit_t* v, const tir_stmt_t* s);
  /* Every load, nested ones included; p.s[p.n-1] is the statement holding it. */
  void (*on_load)(visit_t* v, const tir_expr_t* e);
  void* ud;
  bool too_deep;
};

static void v_expr(visit_t* v, const tir_expr_t* e) {
  if (!e) return;
  switch (e->kind) {
    case TIR_BINARY:
      v_expr(v, e->u.bin.a);
      v_expr(v, e->u.bin.b);
      break;
    case TIR_SELECT:
      v_expr(v, e->u.sel.cond);
      v_expr(v, e->u.sel.t);
      v_expr(v, e->u.sel.f);
      break;
    case TIR_LOAD:
      if (v->on_load) v->on_load(v, e);
      for (int32_t i = 0; i < e->u.load.buf->rank; ++i) v_expr(v, e->u.load.idx[i]);
      break;
    case TIR_CAST: v_expr(v, e->u.cast.value); break;
    case TIR_CALL:
      for (int32_t i = 0; i < e->u.call.n; ++i) v_expr(v, e->u.call.args[i]);
      break;
    default: break;
  }
}

static void v_stmt(visit_t* v, const tir_stmt_t* s, int32_t child) {
  if (v->p.n >= MAX_DEPTH) {
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
    }
  }
  v->p.n--;
}

static kiln_status_t visit(visit_t* v, const tir_stmt_t* root) {
  v->p.n = 0;
  v->too_deep = false;
  v_stmt(v, root, 0);
  return v->too_deep ? kiln_make_status(KILN_LIMIT_EXCEEDED,
                                        "kernel nests deeper than %d statements", MAX_DEPTH)
                     : NULL;
}

/* ---- small sets and tables ---- */

typedef struct {
  tir_ctx_t* c;
  int32_t n, cap;
  const void** v;
  int64_t* ext; /* loop tables: extent of v[i] */
} list_t;

static void list_push(list_t* l, const void* p, int64_t ext) {
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

static int32_t list_find(const list_t* l, const void* p) {
  for (int32_t i = 0; i < l->n; ++i)
    if (l->v[i] == p) return i;
  return -1;
}

static bool loops_cb(visit_t* v, const tir_stmt_t* s) {
  if (s->kind == TIR_FOR) list_push(v->ud, s->u.loop.var, s->u.loop.extent);
  return true;
}

/* Every loop variable bound in |root| with its extent. */
static kiln_status_t collect_loops(tir_ctx_t* c, const tir_stmt_t* root, list_t* out) {
  memset(out, 0, sizeof(*out));
  out->c = c;
  visit_t v = {.on_stmt = loops_cb, .ud = out};
  return visit(&v, root);
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

static bool expr_any(const tir_expr_t* e, bool (*fn)(const tir_expr_t* e, const void* ud),
                     const void* ud) {
  any_t a = {fn, ud, false};
  tir_visitor_t v = {.user = &a, .expr_pre = any_pre};
  tir_visit_expr(&v, e);
  return a.hit;
}

static bool is_var(const tir_expr_t* e, const void* var) {
  return e->kind == TIR_VARREF && e->u.var == var;
}
/* A load, or a variable in |set| (a list_t of vars). */
static bool load_or_in(const tir_expr_t* e, const void* set) {
  return e->kind == TIR_LOAD || list_find(set, e->u.var) >= 0;
}
static bool is_load(const tir_expr_t* e, const void* buf) {
  return e->kind == TIR_LOAD && (!buf || e->u.load.buf == buf);
}

/* ---- interval bounds over loop ranges ---- */

/* The tensor-IR bounds analysis (ir/tir_bounds.c) gets the ranges of the
 * variables |e| uses: every loop var v of |t| in [0, extent-1]. */
typedef struct {
  const list_t* t;
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
  int32_t i = list_find(b->t, e->u.var);
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

/* [lo, hi] of integer expression |e| with every loop var v of |t| in
 * [0, extent-1]. False when it cannot tell (unknown vars, unbounded...). */
static bool bounds(const list_t* t, const tir_expr_t* e, int64_t* lo, int64_t* hi) {
  bvars_t b;
  b.t = t;
  b.n = 0;
  b.bad = false;
  expr_any(e, bvars_cb, &b);
  return !b.bad && tir_expr_bounds(e, b.n, b.vars, b.lo, b.hi, lo, hi);
}

/* ---- affine forms (tir_lin_t): c + sum(k_i * atom_i) ---- */

static void lin_of(tir_lin_t* a, const tir_expr_t* e) {
  tir_lin_init(a);
  tir_lin_collect(a, e, 1);
}

/* Splits |a| into the terms that use a loop of |inner| (or a load: those
 * values may change inside the loop) and the rest; the constant goes to
 * |in|. Zero terms are dropped. */
static void lin_split(const tir_lin_t* a, const list_t* inner, tir_lin_t* out, tir_lin_t* in) {
  tir_lin_init(out);
  tir_lin_init(in);
  in->c = a->c;
  for (int32_t i = 0; i < a->n; ++i) {
    if (a->k[i] == 0) continue;
    tir_lin_t* d = expr_any(a->t[i], load_or_in, inner) ? in : out;
    d->t[d->n] = a->t[i];
    d->k[d->n++] = a->k[i];
  }
}

/* Range of |a| over the loops of |t|: each term bounded by the engine. */
static bool lin_range(const list_t* t, const tir_lin_t* a, int64_t* lo, int64_t* hi) {
  tir_ival_t r = {a->c, a->c};
  for (int32_t i = 0; i < a->n; ++i) {
    tir_ival_t x, k = {a->k[i], a->k[i]};
    if (!bounds(t, a->t[i], &x.lo, &x.hi)) return false;
    r = tir_ival_add(r, tir_ival_mul(k, x));
  }
  if (!tir_ival_finite(r)) return false;
  *lo = r.lo;
  *hi = r.hi;
  return true;
}

/* ==== scheduling state and lookups ===================================== */

typedef struct {
  tir_ctx_t* c;
  const tir_func_t* f;
  const tir_stmt_t* body;
} sched_t;

typedef struct {
  const char* name;
  int32_t count;
  const tir_stmt_t* loop;
  path_t* path; /* of the first match, when non-NULL */
} find_loop_t;

static bool find_loop_cb(visit_t* v, const tir_stmt_t* s) {
  find_loop_t* f = v->ud;
  if (s->kind == TIR_FOR && strcmp(s->u.loop.var->name, f->name) == 0) {
    if (f->count++ == 0) {
      f->loop = s;
      if (f->path) *f->path = v->p;
    }
  }
  return true;
}

static int32_t count_loops(const sched_t* S, const char* name) {
  find_loop_t f = {name, 0, NULL, NULL};
  visit_t v = {.on_stmt = find_loop_cb, .ud = &f};
  kiln_status_free(visit(&v, S->body));
  return f.count;
}

/* The unique loop named |name|; |path| (optional) gets its ancestors, the
 * loop itself last. */
static kiln_status_t find_loop(const sched_t* S, const char* name, const tir_stmt_t** out,
                               path_t* path) {
  if (!name || !*name) return kiln_make_status(KILN_INVALID_ARGUMENT, "missing loop name");
  find_loop_t f = {name, 0, NULL, path};
  visit_t v = {.on_stmt = find_loop_cb, .ud = &f};
  KILN_RETURN_IF_ERROR(visit(&v, S->body));
  if (f.count == 0)
    return kiln_make_status(KILN_NOT_FOUND, "no loop named '%s' in kernel '%s'", name,
                            S->f->name);
  if (f.count > 1)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "loop name '%s' is used by %d loops in kernel '%s'", name, f.count,
                            S->f->name);
  *out = f.loop;
  return NULL;
}

/* A new loop name must not collide with an existing one. */
static kiln_status_t check_new_loop(const sched_t* S, const char* name) {
  if (count_loops(S, name))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "loop name '%s' already exists in kernel '%s'",
                            name, S->f->name);
  return NULL;
}

static const char* join(tir_ctx_t* c, const char* a, const char* sep, const char* b) {
  char buf[512];
  snprintf(buf, sizeof(buf), "%s%s%s", a, sep, b);
  return dup(c, buf);
}

typedef struct {
  const char* name;
  list_t found; /* distinct buffers with that name */
} find_buf_t;

static void fb_add(find_buf_t* f, const tir_buffer_t* b) {
  if (strcmp(b->name, f->name) == 0 && list_find(&f->found, b) < 0) list_push(&f->found, b, 0);
}
static bool fb_stmt(visit_t* v, const tir_stmt_t* s) {
  if (s->kind == TIR_STORE) fb_add(v->ud, s->u.store.buf);
  if (s->kind == TIR_ALLOC) fb_add(v->ud, s->u.alloc.buf);
  return true;
}
static void fb_load(visit_t* v, const tir_expr_t* e) { fb_add(v->ud, e->u.load.buf); }

static kiln_status_t count_buffers(const sched_t* S, const char* name, find_buf_t* f) {
  memset(f, 0, sizeof(*f));
  f->name = name;
  f->found.c = S->c;
  for (int32_t i = 0; i < S->f->n_params; ++i) fb_add(f, S->f->params[i]);
  visit_t v = {.on_stmt = fb_stmt, .on_load = fb_load, .ud = f};
  return visit(&v, S->body);
}

static kiln_status_t find_buffer(const sched_t* S, const char* name, const tir_buffer_t** out) {
  if (!name || !*name) return kiln_make_status(KILN_INVALID_ARGUMENT, "missing buffer name");
  find_buf_t f;
  KILN_RETURN_IF_ERROR(count_buffers(S, name, &f));
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

/* ==== expression/statement mapper for one buffer ======================= */

typedef struct mapper_s mapper_t;
struct mapper_s {
  tir_ctx_t* c;
  const tir_buffer_t* buf;
  /* Replacement of a load of |buf| given its (already mapped) indices. */
  const tir_expr_t* (*on_load)(mapper_t* m, const tir_expr_t* const* idx);
  /* Replacement of a store to |buf|; NULL callback keeps the store. */
  const tir_stmt_t* (*on_store)(mapper_t* m, const tir_expr_t* const* idx,
                                const tir_expr_t* value);
  bool unwrap_alloc; /* drop the tir_alloc of |buf| (keep its body) */
  void* ud;
};

static const tir_expr_t* map_expr(mapper_t* m, const tir_expr_t* e);

static const tir_expr_t* const* map_idx(mapper_t* m, int32_t n, const tir_expr_t* const* idx,
                                        bool* changed) {
  *changed = false;
  const tir_expr_t** out = kiln_arena_alloc(&m->c->arena, sizeof(*out) * (size_t)(n ? n : 1));
  if (!out) {
    m->c->oom = true;
    return NULL;
  }
  for (int32_t i = 0; i < n; ++i) {
    out[i] = map_expr(m, idx[i]);
    if (!out[i]) return NULL;
    *changed |= out[i] != idx[i];
  }
  return out;
}

static const tir_expr_t* map_expr(mapper_t* m, const tir_expr_t* e) {
  tir_ctx_t* c = m->c;
  switch (e->kind) {
    case TIR_BINARY: {
      const tir_expr_t* a = map_expr(m, e->u.bin.a);
      const tir_expr_t* b = map_expr(m, e->u.bin.b);
      if (a == e->u.bin.a && b == e->u.bin.b) return e;
      return tir_bin(c, e->u.bin.op, a, b);
    }
    case TIR_SELECT: {
      const tir_expr_t* k = map_expr(m, e->u.sel.cond);
      const tir_expr_t* t = map_expr(m, e->u.sel.t);
      const tir_expr_t* f = map_expr(m, e->u.sel.f);
      if (k == e->u.sel.cond && t == e->u.sel.t && f == e->u.sel.f) return e;
      return tir_select(c, k, t, f);
    }
    case TIR_LOAD: {
      bool changed;
      const tir_expr_t* const* idx = map_idx(m, e->u.load.buf->rank, e->u.load.idx, &changed);
      if (!idx) return NULL;
      if (e->u.load.buf == m->buf) return m->on_load(m, idx);
      return changed ? tir_load(c, e->u.load.buf, idx) : e;
    }
    case TIR_CAST: {
      const tir_expr_t* v = map_expr(m, e->u.cast.value);
      return v == e->u.cast.value ? e : tir_cast(c, e->dtype, v);
    }
    case TIR_CALL: {
      const tir_expr_t* a[3] = {NULL, NULL, NULL};
      bool changed = false;
      for (int32_t i = 0; i < e->u.call.n; ++i) {
        a[i] = map_expr(m, e->u.call.args[i]);
        changed |= a[i] != e->u.call.args[i];
      }
      return changed ? tir_call(c, e->u.call.fn, e->u.call.n, a[0], a[1], a[2]) : e;
    }
    default: return e;
  }
}

/* NULL only on OOM (the ctx is marked). */
static const tir_stmt_t* map_stmt(mapper_t* m, const tir_stmt_t* s) {
  tir_ctx_t* c = m->c;
  switch (s->kind) {
    case TIR_FOR: {
      const tir_stmt_t* b = map_stmt(m, s->u.loop.body);
      return b == s->u.loop.body ? s : for_like(c, s, b);
    }
    case TIR_STORE: {
      bool changed;
      const tir_expr_t* const* idx = map_idx(m, s->u.store.buf->rank, s->u.store.idx, &changed);
      const tir_expr_t* v = map_expr(m, s->u.store.value);
      if (!idx || !v) return NULL;
      if (s->u.store.buf == m->buf && m->on_store) return m->on_store(m, idx, v);
      if (!changed && v == s->u.store.value) return s;
      return tir_store(c, s->u.store.buf, idx, v);
    }
    case TIR_SEQ: {
      int32_t n = s->u.seq.n;
      if (!n) return s;
      const tir_stmt_t** items = kiln_arena_alloc(&c->arena, sizeof(*items) * (size_t)n);
      if (!items) {
        c->oom = true;
        return NULL;
      }
      bool changed = false;
      for (int32_t i = 0; i < n; ++i) {
        items[i] = map_stmt(m, s->u.seq.items[i]);
        if (!items[i]) return NULL;
        changed |= items[i] != s->u.seq.items[i];
      }
      return changed ? tir_seq(c, n, items) : s;
    }
    case TIR_IF: {
      const tir_expr_t* k = map_expr(m, s->u.cond.cond);
      const tir_stmt_t* t = map_stmt(m, s->u.cond.then_s);
      const tir_stmt_t* e = s->u.cond.else_s ? map_stmt(m, s->u.cond.else_s) : NULL;
      if (k == s->u.cond.cond && t == s->u.cond.then_s && e == s->u.cond.else_s) return s;
      return tir_if(c, k, t, e);
    }
    case TIR_ALLOC: {
      const tir_stmt_t* b = map_stmt(m, s->u.alloc.body);
      if (m->unwrap_alloc && s->u.alloc.buf == m->buf) return b;
      return b == s->u.alloc.body ? s : tir_alloc(c, s->u.alloc.buf, b);
    }
    case TIR_BARRIER: return s;
  }
  return s;
}

/* ---- access collection for one buffer inside a subtree ---- */

typedef struct {
  const tir_expr_t* const* idx;
  bool store;
  bool under_if;    /* store: an if (or a loop that may not run) lies between
                     * the subtree root and it */
  bool covered;     /* load: an earlier statement of an enclosing seq stores
                     * the same element (same index expressions) */
} access_t;

typedef struct {
  tir_ctx_t* c;
  const tir_buffer_t* buf;
  int32_t n, cap;
  access_t* a;
  bool allocated_inside; /* the tir_alloc of |buf| is inside the subtree */
} accesses_t;

static void acc_push(accesses_t* A, access_t x) {
  if (A->n == A->cap) {
    int32_t cap = A->cap ? A->cap * 2 : 16;
    access_t* v = kiln_arena_alloc(&A->c->arena, sizeof(*v) * (size_t)cap);
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

static bool acc_stmt(visit_t* v, const tir_stmt_t* s) {
  accesses_t* A = v->ud;
  if (s->kind == TIR_ALLOC && s->u.alloc.buf == A->buf) A->allocated_inside = true;
  if (s->kind == TIR_STORE && s->u.store.buf == A->buf) {
    access_t x = {s->u.store.idx, true, false, false};
    for (int32_t i = 0; i + 1 < v->p.n; ++i) {
      const tir_stmt_t* a = v->p.s[i];
      x.under_if |= a->kind == TIR_IF || (a->kind == TIR_FOR && a->u.loop.extent < 1);
    }
    acc_push(A, x);
  }
  return true;
}

static void acc_load(visit_t* v, const tir_expr_t* e) {
  accesses_t* A = v->ud;
  if (e->u.load.buf != A->buf) return;
  access_t x = {e->u.load.idx, false, false, false};
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

static kiln_status_t collect_accesses(tir_ctx_t* c, const tir_stmt_t* root,
                                      const tir_buffer_t* buf, accesses_t* out) {
  memset(out, 0, sizeof(*out));
  out->c = c;
  out->buf = buf;
  visit_t v = {.on_stmt = acc_stmt, .on_load = acc_load, .ud = out};
  return visit(&v, root);
}

/* ---- regions ---- */

typedef struct {
  bool full;      /* whole buffer dim: local index = original index */
  tir_lin_t base; /* terms fixed for one iteration of the loop */
  int64_t lo, hi; /* range of the rest */
} dimreg_t;

typedef struct {
  int32_t n_acc;
  dimreg_t d[KILN_MAX_RANK];
  int64_t ext[KILN_MAX_RANK];
} region_t;

static void region_add(region_t* r, const tir_buffer_t* b, const tir_expr_t* const* idx,
                       const list_t* inner, const list_t* loops) {
  for (int32_t d = 0; d < b->rank; ++d) {
    dimreg_t* dr = &r->d[d];
    if (dr->full) continue;
    tir_lin_t a, out, in;
    lin_of(&a, idx[d]);
    int64_t lo, hi;
    if (!a.ok) {
      dr->full = true;
      continue;
    }
    lin_split(&a, inner, &out, &in);
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

static void region_finish(region_t* r, const tir_buffer_t* b) {
  for (int32_t d = 0; d < b->rank; ++d) {
    dimreg_t* dr = &r->d[d];
    if (!dr->full && dr->hi - dr->lo + 1 >= b->shape[d]) dr->full = true;
    r->ext[d] = dr->full ? b->shape[d] : dr->hi - dr->lo + 1;
  }
}

/* Index into the staged region of an access with original index |e|. */
static const tir_expr_t* region_local_index(tir_ctx_t* c, const dimreg_t* dr,
                                            const tir_expr_t* e, const list_t* inner) {
  if (dr->full) return e;
  tir_lin_t a, out, in;
  lin_of(&a, e);
  lin_split(&a, inner, &out, &in);
  in.c -= dr->lo;
  return tir_lin_to_expr(c, &in);
}

/* Original index of region position |pos| (an expression). */
static const tir_expr_t* region_source_index(tir_ctx_t* c, const dimreg_t* dr,
                                             const tir_expr_t* pos) {
  if (dr->full || !pos) return pos; /* NULL pos: out of memory */
  tir_lin_t a = dr->base;
  a.c = dr->lo;
  tir_lin_term(&a, pos, 1);
  return tir_lin_to_expr(c, &a);
}

/* Conjunction of "0 <= e" / "e < limit" checks that |loops| cannot prove;
 * *cond stays as is when both hold. */
static void add_range_guard(tir_ctx_t* c, const list_t* loops, const tir_expr_t* e,
                            int64_t limit, const tir_expr_t** cond) {
  int64_t lo, hi;
  bool known = bounds(loops, e, &lo, &hi);
  const tir_expr_t* parts[2] = {NULL, NULL};
  if (!known || lo < 0) parts[0] = tir_bin(c, TIR_GE, e, tir_int(c, 0));
  if (!known || hi >= limit) parts[1] = tir_bin(c, TIR_LT, e, tir_int(c, limit));
  for (int i = 0; i < 2; ++i)
    if (parts[i]) *cond = *cond ? tir_bin(c, TIR_AND, *cond, parts[i]) : parts[i];
}

/* ==== split / reorder / tile / fuse / loop kinds ======================= */

/* Loop kinds after a split: threads and GPU ids stay on the outer loop, SIMD
 * lanes and unrolling on the inner one. */
static kiln_status_t do_split(sched_t* S, const char* name, int64_t factor) {
  tir_ctx_t* c = S->c;
  if (factor < 1) return kiln_make_status(KILN_INVALID_ARGUMENT, "factor must be >= 1");
  const tir_stmt_t* L;
  KILN_RETURN_IF_ERROR(find_loop(S, name, &L, NULL));
  const char* no = join(c, name, "", ".o");
  const char* ni = join(c, name, "", ".i");
  if (!no || !ni) return NULL; /* OOM: reported by the caller */
  KILN_RETURN_IF_ERROR(check_new_loop(S, no));
  KILN_RETURN_IF_ERROR(check_new_loop(S, ni));
  int64_t e = L->u.loop.extent;
  /* A factor above the extent only adds a guard: clamp it. */
  int64_t f = (e > 0 && factor > e) ? e : factor;
  int64_t outer = e > 0 ? (e + f - 1) / f : 0;
  const tir_var_t* vo = tir_var(c, no);
  const tir_var_t* vi = tir_var(c, ni);
  const tir_expr_t* x = tir_add(c, tir_mul(c, tir_ref(c, vo), tir_int(c, f)), tir_ref(c, vi));
  const tir_stmt_t* body = tir_substitute_stmt(c, L->u.loop.body, 1, &L->u.loop.var, &x);
  if (e % f) body = tir_if(c, tir_bin(c, TIR_LT, x, tir_int(c, e)), body, NULL);
  tir_loop_kind_t k = L->u.loop.kind;
  bool outer_keeps = k == TIR_LOOP_PARALLEL || k == TIR_LOOP_BOUND;
  bool inner_keeps = k == TIR_LOOP_VECTORIZED || k == TIR_LOOP_UNROLLED;
  const tir_stmt_t* in = mk_for(c, vi, f, inner_keeps ? k : TIR_LOOP_SERIAL, TIR_TAG_NONE, body);
  const tir_stmt_t* out = mk_for(c, vo, outer, outer_keeps ? k : TIR_LOOP_SERIAL,
                                 outer_keeps ? L->u.loop.tag : TIR_TAG_NONE, in);
  if (out) S->body = replace1(c, S->body, L, out);
  return NULL;
}

/* Names the innermost loop at or above path index |k| (for messages). */
static const char* loop_above(const path_t* p, int32_t k) {
  for (; k >= 0; --k)
    if (p->s[k]->kind == TIR_FOR) return p->s[k]->u.loop.var->name;
  return "?";
}

/* Listed loops take each other's places in their perfect nest (the first
 * listed goes to the outermost of their positions); unlisted loops between
 * them stay. Guards (ifs without else, left by split/fuse) inside the nest
 * are moved to just inside the innermost loop whose variable they use, which
 * keeps the same iterations executing. */
static kiln_status_t do_reorder(sched_t* S, int32_t n, const char* const* names) {
  tir_ctx_t* c = S->c;
  if (n < 1) return kiln_make_status(KILN_INVALID_ARGUMENT, "reorder needs at least one loop");
  if (n > TIR_SCHED_MAX_LOOPS)
    return kiln_make_status(KILN_LIMIT_EXCEEDED, "reorder of %d loops, at most %d", n,
                            TIR_SCHED_MAX_LOOPS);
  for (int32_t i = 0; i < n; ++i)
    for (int32_t j = 0; j < i; ++j)
      if (names[i] && names[j] && strcmp(names[i], names[j]) == 0)
        return kiln_make_status(KILN_INVALID_ARGUMENT, "loop '%s' is listed twice", names[i]);
  path_t* paths = kiln_arena_alloc(&c->arena, sizeof(path_t) * (size_t)n);
  if (!paths) {
    c->oom = true;
    return NULL;
  }
  const tir_stmt_t* loops[TIR_SCHED_MAX_LOOPS];
  int32_t deep = 0;
  for (int32_t i = 0; i < n; ++i) {
    KILN_RETURN_IF_ERROR(find_loop(S, names[i], &loops[i], &paths[i]));
    if (paths[i].n > paths[deep].n) deep = i;
  }
  const path_t* P = &paths[deep];
  int32_t top = P->n - 1, bot = P->n - 1;
  for (int32_t i = 0; i < n; ++i) {
    int32_t d = paths[i].n - 1;
    if (P->s[d] != loops[i])
      return kiln_make_status(KILN_INVALID_ARGUMENT, "loops '%s' and '%s' are not in one loop nest",
                              names[i < deep ? i : deep], names[i < deep ? deep : i]);
    if (d < top) top = d;
  }
  /* The chain top..bot must be loops and guards only. */
  const tir_stmt_t* chain[MAX_DEPTH];
  const tir_expr_t* guard[MAX_DEPTH];
  int32_t gpos[MAX_DEPTH];
  int32_t m = 0, ng = 0;
  for (int32_t k = top; k <= bot; ++k) {
    const tir_stmt_t* s = P->s[k];
    if (s->kind == TIR_FOR) {
      chain[m++] = s;
      continue;
    }
    if (s->kind == TIR_IF && !s->u.cond.else_s) {
      guard[ng] = s->u.cond.cond;
      gpos[ng++] = m - 1;
      continue;
    }
    if (s->kind == TIR_SEQ && s->u.seq.n == 1) continue;
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "loops %s..%s are not a perfect nest: loop '%s' holds %s",
                            P->s[top]->u.loop.var->name, P->s[bot]->u.loop.var->name,
                            loop_above(P, k),
                            s->kind == TIR_ALLOC ? "an allocation" :
                            s->kind == TIR_IF    ? "an if/else" :
                                                   "several statements");
  }
  /* Listed loops fill their own positions, in the listed order. */
  int32_t pos[TIR_SCHED_MAX_LOOPS];
  for (int32_t i = 0; i < n; ++i) {
    pos[i] = 0;
    while (chain[pos[i]] != loops[i]) ++pos[i];
  }
  for (int32_t i = 1; i < n; ++i) /* sort positions (insertion) */
    for (int32_t j = i; j > 0 && pos[j - 1] > pos[j]; --j) {
      int32_t t = pos[j];
      pos[j] = pos[j - 1];
      pos[j - 1] = t;
    }
  const tir_stmt_t* order[MAX_DEPTH];
  for (int32_t t = 0; t < m; ++t) order[t] = chain[t];
  for (int32_t i = 0; i < n; ++i) order[pos[i]] = loops[i];
  for (int32_t g = 0; g < ng; ++g) {
    gpos[g] = -1;
    for (int32_t t = 0; t < m; ++t)
      if (tir_expr_uses_var(guard[g], order[t]->u.loop.var)) gpos[g] = t;
  }
  const tir_stmt_t* body = P->s[bot]->u.loop.body;
  for (int32_t t = m - 1; t >= -1; --t) {
    for (int32_t g = ng - 1; g >= 0; --g)
      if (gpos[g] == t) body = tir_if(c, guard[g], body, NULL);
    if (t >= 0) body = for_like(c, order[t], body);
  }
  if (body) S->body = replace1(c, S->body, P->s[top], body);
  return NULL;
}

static kiln_status_t do_tile(sched_t* S, const char* a, const char* b, int64_t fa, int64_t fb) {
  if (a && b && strcmp(a, b) == 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "tile needs two different loops");
  /* Resolve both names before changing anything, for clear messages. */
  const tir_stmt_t* la;
  const tir_stmt_t* lb;
  KILN_RETURN_IF_ERROR(find_loop(S, a, &la, NULL));
  KILN_RETURN_IF_ERROR(find_loop(S, b, &lb, NULL));
  if (fa < 1 || fb < 1)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "factor must be >= 1");
  KILN_RETURN_IF_ERROR(do_split(S, a, fa), "split(%s, %lld)", a, (long long)fa);
  KILN_RETURN_IF_ERROR(do_split(S, b, fb), "split(%s, %lld)", b, (long long)fb);
  tir_ctx_t* c = S->c;
  const char* names[4] = {join(c, a, "", ".o"), join(c, b, "", ".o"), join(c, a, "", ".i"),
                          join(c, b, "", ".i")};
  if (c->oom) return NULL;
  return do_reorder(S, 4, names);
}

static kiln_status_t do_fuse(sched_t* S, const char* a, const char* b) {
  tir_ctx_t* c = S->c;
  const tir_stmt_t* la;
  const tir_stmt_t* lb;
  KILN_RETURN_IF_ERROR(find_loop(S, a, &la, NULL));
  KILN_RETURN_IF_ERROR(find_loop(S, b, &lb, NULL));
  /* Guards between the two loops can only use |a|'s variable (or outer
   * ones): they move inside the fused loop. */
  const tir_expr_t* guard[MAX_DEPTH];
  int32_t ng = 0;
  const tir_stmt_t* s = la->u.loop.body;
  while (s != lb && ng < MAX_DEPTH) {
    if (s->kind == TIR_IF && !s->u.cond.else_s) {
      guard[ng++] = s->u.cond.cond;
      s = s->u.cond.then_s;
    } else if (s->kind == TIR_SEQ && s->u.seq.n == 1) {
      s = s->u.seq.items[0];
    } else {
      break;
    }
  }
  if (s != lb)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "loop '%s' is not the entire body of loop '%s'",
                            b, a);
  const char* name = join(c, a, ".", b);
  if (!name) return NULL;
  KILN_RETURN_IF_ERROR(check_new_loop(S, name));
  int64_t ea = la->u.loop.extent, eb = lb->u.loop.extent;
  if (ea > 0 && eb > INT64_MAX / ea)
    return kiln_make_status(KILN_LIMIT_EXCEEDED, "fused extent %lld x %lld overflows",
                            (long long)ea, (long long)eb);
  const tir_var_t* vf = tir_var(c, name);
  const tir_expr_t* div = tir_int(c, eb > 0 ? eb : 1);
  const tir_var_t* vars[2] = {la->u.loop.var, lb->u.loop.var};
  const tir_expr_t* vals[2] = {tir_bin(c, TIR_FLOORDIV, tir_ref(c, vf), div),
                               tir_bin(c, TIR_FLOORMOD, tir_ref(c, vf), div)};
  const tir_stmt_t* body = lb->u.loop.body;
  for (int32_t g = ng - 1; g >= 0; --g) body = tir_if(c, guard[g], body, NULL);
  body = tir_substitute_stmt(c, body, 2, vars, vals);
  bool same = la->u.loop.kind == lb->u.loop.kind && la->u.loop.tag == lb->u.loop.tag;
  const tir_stmt_t* out = mk_for(c, vf, ea * eb, same ? la->u.loop.kind : TIR_LOOP_SERIAL,
                                 same ? la->u.loop.tag : TIR_TAG_NONE, body);
  if (out) S->body = replace1(c, S->body, la, out);
  return NULL;
}

static kiln_status_t do_kind(sched_t* S, const char* name, tir_loop_kind_t k,
                             tir_thread_tag_t tag) {
  const tir_stmt_t* L;
  KILN_RETURN_IF_ERROR(find_loop(S, name, &L, NULL));
  const tir_stmt_t* out =
      mk_for(S->c, L->u.loop.var, L->u.loop.extent, k, tag, L->u.loop.body);
  if (out) S->body = replace1(S->c, S->body, L, out);
  return NULL;
}

/* ==== cache_read / cache_write ========================================== */

typedef struct {
  const region_t* R;
  const list_t* inner;
  const tir_buffer_t* local;
} cache_ud_t;

static const tir_expr_t* const* cache_idx(mapper_t* m, const tir_expr_t* const* idx) {
  cache_ud_t* u = m->ud;
  const tir_expr_t** li =
      kiln_arena_alloc(&m->c->arena, sizeof(*li) * (size_t)(m->buf->rank ? m->buf->rank : 1));
  if (!li) {
    m->c->oom = true;
    return NULL;
  }
  for (int32_t d = 0; d < m->buf->rank; ++d)
    li[d] = region_local_index(m->c, &u->R->d[d], idx[d], u->inner);
  return li;
}

static const tir_expr_t* cache_load(mapper_t* m, const tir_expr_t* const* idx) {
  const tir_expr_t* const* li = cache_idx(m, idx);
  return li ? tir_load(m->c, ((cache_ud_t*)m->ud)->local, li) : NULL;
}

static const tir_stmt_t* cache_store(mapper_t* m, const tir_expr_t* const* idx,
                                     const tir_expr_t* value) {
  const tir_expr_t* const* li = cache_idx(m, idx);
  return li ? tir_store(m->c, ((cache_ud_t*)m->ud)->local, li, value) : NULL;
}

/* Copy loops "<prefix><tag><d>" over the region: local <- src when |in|,
 * else src <- local; positions outside |src| are skipped. |loops| gains the
 * copy variables (for the guard's bounds). */
static const tir_stmt_t* copy_nest(tir_ctx_t* c, const region_t* R, const tir_buffer_t* src,
                                   const tir_buffer_t* local, const char* prefix,
                                   const char* tag, bool in, list_t* loops) {
  int32_t r = src->rank;
  const tir_var_t* cv[KILN_MAX_RANK];
  const tir_expr_t* li[KILN_MAX_RANK];
  const tir_expr_t* si[KILN_MAX_RANK];
  for (int32_t d = 0; d < r; ++d) {
    char nm[32];
    snprintf(nm, sizeof(nm), "%s%d", tag, (int)d);
    cv[d] = tir_var(c, join(c, prefix, "", nm));
    li[d] = tir_ref(c, cv[d]);
    list_push(loops, cv[d], R->ext[d]);
    si[d] = region_source_index(c, &R->d[d], li[d]);
  }
  const tir_expr_t* cond = NULL;
  for (int32_t d = 0; d < r; ++d)
    if (!R->d[d].full && si[d]) add_range_guard(c, loops, si[d], src->shape[d], &cond);
  const tir_stmt_t* body = in ? tir_store(c, local, li, tir_load(c, src, si))
                              : tir_store(c, src, si, tir_load(c, local, li));
  if (cond) body = tir_if(c, cond, body, NULL);
  for (int32_t d = r - 1; d >= 0; --d) body = tir_for(c, cv[d], R->ext[d], TIR_LOOP_SERIAL, body);
  return body;
}

/* cache_write can skip loading the region first when the loop body writes
 * every element of it before reading it: every load repeats a store made
 * earlier in an enclosing sequence, and every store covers the whole region
 * (no guard above it, each dim a distinct inner loop + constant spanning the
 * region, or a constant). Otherwise the write-back would store elements the
 * body never wrote, so the region is copied in first. */
static bool write_needs_init(const accesses_t* A, const region_t* R, const tir_buffer_t* b,
                             const list_t* inner) {
  for (int32_t i = 0; i < A->n; ++i) {
    const access_t* x = &A->a[i];
    if (!x->store) {
      if (!x->covered) return true;
      continue;
    }
    if (x->under_if) return true;
    const void* used[KILN_MAX_RANK];
    int32_t nu = 0;
    for (int32_t d = 0; d < b->rank; ++d) {
      if (R->d[d].full) return true;
      tir_lin_t a, out, in;
      lin_of(&a, x->idx[d]);
      lin_split(&a, inner, &out, &in);
      int64_t lo = in.c, hi = in.c;
      if (in.n == 1) {
        const tir_expr_t* at = in.t[0];
        if (in.k[0] != 1 || at->kind != TIR_VARREF) return true;
        int32_t j = list_find(inner, at->u.var);
        if (j < 0) return true;
        for (int32_t u = 0; u < nu; ++u)
          if (used[u] == at->u.var) return true;
        used[nu++] = at->u.var;
        hi = lo + inner->ext[j] - 1;
      } else if (in.n > 1) {
        return true;
      }
      if (lo != R->d[d].lo || hi != R->d[d].hi) return true;
    }
  }
  return false;
}

static const char* scope_suffix(tir_scope_t s) {
  return s == TIR_SCOPE_LOCAL ? ".local" : ".private";
}

/* "<buf>.local" (or ".private"), numbered when taken. */
static kiln_status_t local_name(const sched_t* S, const tir_buffer_t* buf, tir_scope_t scope,
                                const char** out) {
  for (int i = 0; i < 100; ++i) {
    char nm[32];
    if (i)
      snprintf(nm, sizeof(nm), "%s%d", scope_suffix(scope), i);
    else
      snprintf(nm, sizeof(nm), "%s", scope_suffix(scope));
    const char* name = join(S->c, buf->name, "", nm);
    if (!name) return NULL;
    find_buf_t f;
    KILN_RETURN_IF_ERROR(count_buffers(S, name, &f));
    if (f.found.n == 0) {
      *out = name;
      return NULL;
    }
  }
  return kiln_make_status(KILN_LIMIT_EXCEEDED, "too many cached copies of buffer '%s'",
                          buf->name);
}

/* Copy loops are "<buf>.c<d>" (cache_write's copy-in, when it needs one:
 * "<buf>.in<d>"); when taken (the buffer was cached before) they are named
 * after the new buffer instead. */
static kiln_status_t copy_prefix(const sched_t* S, const tir_buffer_t* buf,
                                 const tir_buffer_t* local, const char** out) {
  const char* cand[2] = {buf->name, local->name};
  for (int i = 0; i < 2; ++i) {
    bool free_ = true;
    for (int32_t d = 0; d < buf->rank && free_; ++d) {
      for (int t = 0; t < 2 && free_; ++t) {
        char nm[32];
        snprintf(nm, sizeof(nm), "%s%d", t ? ".in" : ".c", (int)d);
        const char* name = join(S->c, cand[i], "", nm);
        if (!name) return NULL;
        free_ = count_loops(S, name) == 0;
      }
    }
    if (free_) {
      *out = cand[i];
      return NULL;
    }
  }
  return kiln_make_status(KILN_INVALID_ARGUMENT, "loop names '%s.c0'... already exist",
                          local->name);
}

/* The staged region lives in a tir_alloc just inside |loop|: copy-in at the
 * top of the body (cache_read, and cache_write when needed), write-back at
 * the end (cache_write). LOCAL (work-group shared) copies get barriers so
 * that work-items see each other's copies and the next iteration does not
 * overwrite what others still read. */
static kiln_status_t do_cache(sched_t* S, const tir_sched_step_t* st, bool write) {
  tir_ctx_t* c = S->c;
  const tir_buffer_t* buf;
  const tir_stmt_t* L;
  KILN_RETURN_IF_ERROR(find_buffer(S, st->buffer, &buf));
  if (st->scope != TIR_SCOPE_LOCAL && st->scope != TIR_SCOPE_PRIVATE)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "scope must be local or private, not %s",
                            scope_name(st->scope));
  KILN_RETURN_IF_ERROR(find_loop(S, st->loop, &L, NULL));
  accesses_t A;
  KILN_RETURN_IF_ERROR(collect_accesses(c, L->u.loop.body, buf, &A));
  if (A.allocated_inside)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "buffer '%s' is allocated inside loop '%s'",
                            buf->name, st->loop);
  int32_t loads = 0, stores = 0;
  for (int32_t i = 0; i < A.n; ++i) *(A.a[i].store ? &stores : &loads) += 1;
  if (!write && stores)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "buffer '%s' is written inside loop '%s' (use cache_write)",
                            buf->name, st->loop);
  if (!write && !loads)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "buffer '%s' is not read inside loop '%s'",
                            buf->name, st->loop);
  if (write && !stores)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "buffer '%s' is not written inside loop '%s'",
                            buf->name, st->loop);
  list_t inner, loops;
  KILN_RETURN_IF_ERROR(collect_loops(c, L->u.loop.body, &inner));
  KILN_RETURN_IF_ERROR(collect_loops(c, S->body, &loops));
  region_t R;
  memset(&R, 0, sizeof(R));
  for (int32_t i = 0; i < A.n; ++i) region_add(&R, buf, A.a[i].idx, &inner, &loops);
  region_finish(&R, buf);
  bool copy_in = !write || write_needs_init(&A, &R, buf, &inner);

  const char* lname = NULL;
  const char* prefix = NULL;
  KILN_RETURN_IF_ERROR(local_name(S, buf, st->scope, &lname));
  if (!lname) return NULL;
  const tir_buffer_t* local = tir_buffer(c, lname, buf->dtype, buf->rank, R.ext, st->scope);
  if (!local) return NULL;
  KILN_RETURN_IF_ERROR(copy_prefix(S, buf, local, &prefix));
  if (!prefix) return NULL;

  cache_ud_t u = {&R, &inner, local};
  mapper_t m = {c, buf, cache_load, write ? cache_store : NULL, false, &u};
  const tir_stmt_t* body = map_stmt(&m, L->u.loop.body);
  bool shared = st->scope == TIR_SCOPE_LOCAL;
  const tir_stmt_t* items[7];
  int32_t n = 0;
  if (copy_in) {
    items[n++] = copy_nest(c, &R, buf, local, prefix, write ? ".in" : ".c", true, &loops);
    if (shared) items[n++] = tir_barrier(c);
  }
  items[n++] = body;
  if (shared) items[n++] = tir_barrier(c);
  if (write) {
    items[n++] = copy_nest(c, &R, buf, local, prefix, ".c", false, &loops);
    if (shared) items[n++] = tir_barrier(c);
  }
  for (int32_t i = 0; i < n; ++i)
    if (!items[i]) return NULL;
  const tir_stmt_t* out = for_like(c, L, tir_alloc(c, local, tir_seq(c, n, items)));
  if (out) S->body = replace1(c, S->body, L, out);
  return NULL;
}

/* ==== compute_inline ==================================================== */

typedef struct {
  const tir_buffer_t* buf;
  int32_t count;
  path_t* first;   /* path of the first store (optional) */
  path_t* lca;     /* common ancestors of all stores (optional) */
  int32_t lca_n;
} stores_t;

static bool stores_cb(visit_t* v, const tir_stmt_t* s) {
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
  if (e->kind == TIR_LOAD && list_find(out, e->u.load.buf) < 0)
    list_push((list_t*)out, e->u.load.buf, 0);
  return false;
}

typedef struct {
  const list_t* bufs;
  const tir_buffer_t* hit;
  const tir_buffer_t* except; /* ignored */
} writes_t;

static bool writes_cb(visit_t* v, const tir_stmt_t* s) {
  writes_t* w = v->ud;
  if (s->kind == TIR_STORE && s->u.store.buf != w->except && !w->hit &&
      list_find(w->bufs, s->u.store.buf) >= 0)
    w->hit = s->u.store.buf;
  return true;
}

/* The first buffer of |bufs| that |root| stores to, or NULL. */
static kiln_status_t find_write(const tir_stmt_t* root, const list_t* bufs,
                                const tir_buffer_t* except, const tir_buffer_t** hit) {
  writes_t w = {bufs, NULL, except};
  visit_t v = {.on_stmt = writes_cb, .ud = &w};
  KILN_RETURN_IF_ERROR(visit(&v, root));
  *hit = w.hit;
  return NULL;
}

typedef struct {
  const tir_buffer_t* buf;
  const path_t* sp;     /* the store */
  int32_t j;            /* index of the stage root in sp */
  const list_t* extra;  /* variables of the value outside the nest */
  kiln_status_t err;
} inline_check_t;

/* Every read of the buffer must come after the producer in program order,
 * inside every loop the value depends on beyond the nest's own. */
static void inline_load_cb(visit_t* v, const tir_expr_t* e) {
  inline_check_t* ic = v->ud;
  if (ic->err || e->u.load.buf != ic->buf) return;
  const path_t* lp = &v->p;
  const path_t* sp = ic->sp;
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

static const tir_expr_t* inline_load(mapper_t* m, const tir_expr_t* const* idx) {
  inline_ud_t* u = m->ud;
  return tir_substitute_expr(m->c, u->value, u->rank, u->vars, idx);
}

static bool collect_var_cb(const tir_expr_t* e, const void* out) {
  if (e->kind == TIR_VARREF && list_find(out, e->u.var) < 0) list_push((list_t*)out, e->u.var, 0);
  return false;
}

static kiln_status_t do_inline(sched_t* S, const char* bname) {
  tir_ctx_t* c = S->c;
  const tir_buffer_t* buf;
  KILN_RETURN_IF_ERROR(find_buffer(S, bname, &buf));
  path_t* sp = kiln_arena_alloc(&c->arena, sizeof(*sp));
  if (!sp) {
    c->oom = true;
    return NULL;
  }
  stores_t st = {buf, 0, sp, NULL, 0};
  visit_t v = {.on_stmt = stores_cb, .ud = &st};
  KILN_RETURN_IF_ERROR(visit(&v, S->body));
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
      for (int32_t d = 0; d < buf->rank; ++d) indexes |= is_var(idx[d], p->u.loop.var);
    if (!indexes) break;
    --j;
  }
  inline_ud_t u = {store->u.store.value, buf->rank, {NULL}};
  list_t nest = {.c = c};
  for (int32_t k = j; k < sp->n - 1; ++k) list_push(&nest, sp->s[k]->u.loop.var, 0);
  for (int32_t d = 0; d < buf->rank; ++d) {
    const tir_expr_t* e = idx[d];
    int32_t k = e->kind == TIR_VARREF ? list_find(&nest, e->u.var) : -1;
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
  if (expr_any(u.value, is_load, buf))
    return kiln_make_status(KILN_UNSUPPORTED, "the value stored into '%s' reads '%s'", bname,
                            bname);
  /* Inlining moves the reads of the value to the consumers: nothing may
   * change those buffers in the kernel. */
  list_t reads = {.c = c};
  expr_any(u.value, collect_load_cb, &reads);
  const tir_buffer_t* hit;
  KILN_RETURN_IF_ERROR(find_write(S->body, &reads, NULL, &hit));
  if (hit)
    return kiln_make_status(KILN_UNSUPPORTED,
                            "the value stored into '%s' reads '%s', which the kernel writes",
                            bname, hit->name);
  list_t vars = {.c = c}, extra = {.c = c};
  expr_any(u.value, collect_var_cb, &vars);
  for (int32_t i = 0; i < vars.n; ++i)
    if (list_find(&nest, vars.v[i]) < 0) list_push(&extra, vars.v[i], 0);
  inline_check_t ic = {buf, sp, j, &extra, NULL};
  visit_t lv = {.on_load = inline_load_cb, .ud = &ic};
  KILN_RETURN_IF_ERROR(visit(&lv, S->body));
  if (ic.err) return ic.err;
  if (c->oom) return NULL;

  const tir_stmt_t* body = replace1(c, S->body, sp->s[j], NULL);
  if (!body) body = empty_stmt(c);
  mapper_t m = {c, buf, inline_load, NULL, true, &u};
  if (body) S->body = map_stmt(&m, body);
  return NULL;
}

/* ==== compute_at ========================================================= */

/* Buffers loaded / stored anywhere in |root|. */
typedef struct {
  list_t* loads;
  list_t* stores;
} bufsets_t;

static bool bufsets_stmt(visit_t* v, const tir_stmt_t* s) {
  bufsets_t* b = v->ud;
  if (s->kind == TIR_STORE && list_find(b->stores, s->u.store.buf) < 0)
    list_push(b->stores, s->u.store.buf, 0);
  return true;
}
static void bufsets_load(visit_t* v, const tir_expr_t* e) {
  bufsets_t* b = v->ud;
  if (list_find(b->loads, e->u.load.buf) < 0) list_push(b->loads, e->u.load.buf, 0);
}
static kiln_status_t collect_buffers(const tir_stmt_t* root, list_t* loads, list_t* stores) {
  bufsets_t b = {loads, stores};
  visit_t v = {.on_stmt = bufsets_stmt, .on_load = bufsets_load, .ud = &b};
  return visit(&v, root);
}

typedef struct {
  const tir_buffer_t* buf;
  const path_t* lca;    /* stage root at index k */
  int32_t k;
  const path_t* lp;     /* the consumer loop, last */
  bool outside;
} at_reads_t;

static bool same_prefix(const path_t* a, const path_t* b, int32_t n) {
  if (a->n < n || b->n < n) return false;
  for (int32_t i = 0; i < n; ++i)
    if (a->s[i] != b->s[i] || a->child[i] != b->child[i]) return false;
  return true;
}

static void at_reads_cb(visit_t* v, const tir_expr_t* e) {
  at_reads_t* r = v->ud;
  if (e->u.load.buf != r->buf) return;
  if (same_prefix(&v->p, r->lca, r->k + 1)) return; /* inside the stage */
  if (v->p.n > r->lp->n && same_prefix(&v->p, r->lp, r->lp->n)) return; /* inside the loop */
  r->outside = true;
}

typedef struct {
  tir_ctx_t* c;
  const region_t* R;
  list_t* loops;   /* all loops, for guard bounds; gains the new variables */
  list_t map;      /* stage loop var -> dim it indexes (ext = dim) */
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
      int32_t i = list_find(&u->map, s->u.loop.var);
      int32_t d = i >= 0 ? (int32_t)u->map.ext[i] : -1;
      if (d < 0 || u->R->d[d].full || u->R->ext[d] >= s->u.loop.extent)
        return b == s->u.loop.body ? s : for_like(c, s, b);
      const tir_var_t* nv = tir_var(c, s->u.loop.var->name);
      list_push(u->loops, nv, u->R->ext[d]);
      const tir_expr_t* x = region_source_index(c, &u->R->d[d], tir_ref(c, nv));
      const tir_expr_t* cond = NULL;
      if (x) add_range_guard(c, u->loops, x, s->u.loop.extent, &cond);
      b = tir_substitute_stmt(c, b, 1, &s->u.loop.var, &x);
      if (cond) b = tir_if(c, cond, b, NULL);
      return mk_for(c, nv, u->R->ext[d], s->u.loop.kind, s->u.loop.tag, b);
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

static kiln_status_t do_compute_at(sched_t* S, const char* bname, const char* lname) {
  tir_ctx_t* c = S->c;
  const tir_buffer_t* buf;
  const tir_stmt_t* L;
  KILN_RETURN_IF_ERROR(find_buffer(S, bname, &buf));
  path_t* lp = kiln_arena_alloc(&c->arena, sizeof(*lp));
  path_t* lca = kiln_arena_alloc(&c->arena, sizeof(*lca));
  if (!lp || !lca) {
    c->oom = true;
    return NULL;
  }
  KILN_RETURN_IF_ERROR(find_loop(S, lname, &L, lp));

  /* The stage: the statement of a sequence that holds every store. */
  stores_t st = {buf, 0, NULL, lca, 0};
  visit_t v = {.on_stmt = stores_cb, .ud = &st};
  KILN_RETURN_IF_ERROR(visit(&v, S->body));
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
  visit_t rv = {.on_load = at_reads_cb, .ud = &rd};
  KILN_RETURN_IF_ERROR(visit(&rv, S->body));
  if (rd.outside)
    return kiln_make_status(KILN_UNSUPPORTED, "buffer '%s' is also read outside loop '%s'",
                            bname, lname);
  /* Moving the stage later is only safe if it writes nothing else and what it
   * reads does not change in between. */
  list_t stage_loads = {.c = c}, stage_stores = {.c = c};
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
  accesses_t A;
  list_t inner, loops;
  KILN_RETURN_IF_ERROR(collect_accesses(c, L->u.loop.body, buf, &A));
  if (A.n == 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "buffer '%s' is not read inside loop '%s'",
                            bname, lname);
  KILN_RETURN_IF_ERROR(collect_loops(c, L->u.loop.body, &inner));
  KILN_RETURN_IF_ERROR(collect_loops(c, S->body, &loops));
  region_t R;
  memset(&R, 0, sizeof(R));
  for (int32_t i = 0; i < A.n; ++i) region_add(&R, buf, A.a[i].idx, &inner, &loops);
  region_finish(&R, buf);

  /* Which dim each stage loop indexes: the same plain variable in every
   * store, or in none. */
  at_ud_t u = {c, &R, &loops, {.c = c}, buf};
  accesses_t W;
  list_t stage_loops;
  KILN_RETURN_IF_ERROR(collect_accesses(c, stage, buf, &W));
  KILN_RETURN_IF_ERROR(collect_loops(c, stage, &stage_loops));
  for (int32_t i = 0; i < stage_loops.n; ++i) {
    const tir_var_t* lv = stage_loops.v[i];
    int32_t dim = -2;
    for (int32_t a = 0; a < W.n; ++a) {
      if (!W.a[a].store) continue;
      int32_t here = -1;
      for (int32_t d = 0; d < buf->rank; ++d) {
        const tir_expr_t* e = W.a[a].idx[d];
        if (is_var(e, lv) && here < 0) {
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
    if (dim >= 0) list_push(&u.map, lv, dim);
  }
  const tir_stmt_t* moved = at_xform(&u, stage);
  if (!moved) return NULL;
  const tir_stmt_t* nl = for_like(c, L, tir_seq2(c, moved, L->u.loop.body));
  const tir_stmt_t* tg[2] = {stage, L};
  const tir_stmt_t* rp[2] = {NULL, nl};
  if (nl) S->body = rewrite(c, S->body, 2, tg, rp);
  return NULL;
}

/* ==== apply ============================================================== */

static kiln_status_t apply_step(sched_t* S, const tir_sched_step_t* st) {
  switch (st->kind) {
    case TIR_SCHED_SPLIT: return do_split(S, st->loop, st->factor);
    case TIR_SCHED_REORDER: return do_reorder(S, st->n_loops, st->loops);
    case TIR_SCHED_TILE: return do_tile(S, st->loop, st->loop2, st->factor, st->factor2);
    case TIR_SCHED_FUSE: return do_fuse(S, st->loop, st->loop2);
    case TIR_SCHED_VECTORIZE: return do_kind(S, st->loop, TIR_LOOP_VECTORIZED, TIR_TAG_NONE);
    case TIR_SCHED_UNROLL: return do_kind(S, st->loop, TIR_LOOP_UNROLLED, TIR_TAG_NONE);
    case TIR_SCHED_PARALLEL: return do_kind(S, st->loop, TIR_LOOP_PARALLEL, TIR_TAG_NONE);
    case TIR_SCHED_BIND:
      if (st->tag < TIR_BLOCK_X || st->tag > TIR_THREAD_Z)
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "tag must be a block or thread id (block.x .. thread.z)");
      return do_kind(S, st->loop, TIR_LOOP_BOUND, st->tag);
    case TIR_SCHED_CACHE_READ: return do_cache(S, st, false);
    case TIR_SCHED_CACHE_WRITE: return do_cache(S, st, true);
    case TIR_SCHED_COMPUTE_INLINE: return do_inline(S, st->buffer);
    case TIR_SCHED_COMPUTE_AT: return do_compute_at(S, st->buffer, st->loop);
  }
  return kiln_make_status(KILN_INVALID_ARGUMENT, "unknown step kind %d", (int)st->kind);
}

kiln_status_t tir_schedule_apply(tir_ctx_t* c, const tir_func_t* f, const tir_schedule_t* s,
                                 tir_func_t** out) {
  KILN_ASSERT(c && f && out);
  KILN_RETURN_IF_ERROR(tir_ctx_status(c), "scheduling kernel '%s'", f->name);
  sched_t S = {c, f, f->body};
  char desc[1024];
  for (int32_t i = 0; s && i < s->n; ++i) {
    const tir_sched_step_t* st = &s->steps[i];
    kiln_status_t e = apply_step(&S, st);
    if (!e && !S.body && !c->oom) S.body = empty_stmt(c);
    if (!e) e = tir_ctx_status(c);
    if (e) {
      step_str(st, desc, sizeof(desc));
      return kiln_status_annotate(e, "schedule step %d %s", (int)i, desc);
    }
  }
  tir_func_t* nf = tir_func(c, f->name, f->n_params, f->params, S.body);
#if KILN_SCHED_SIMPLIFY
  if (nf) nf = tir_simplify_func(c, nf);
#endif
  KILN_RETURN_IF_ERROR(tir_ctx_status(c), "scheduling kernel '%s'", f->name);
  if (!nf) return kiln_make_status(KILN_INTERNAL, "scheduling kernel '%s' produced no kernel",
                                   f->name);
  *out = nf;
  return NULL;
}
