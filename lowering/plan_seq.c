/* A range on a dim inside the kernels' shapes (see plan_seq.h): plans
 * lowered at five sizes anti-unified into one whose integers are
 * polynomials of the dim's run-time value. */
#include "lowering/plan_seq.h"

#include <string.h>

#include "ir/tir_analysis.h"
#include "lowering/plan_seq_mem.h"

/* Plan-internal (plan.c), declared where it is used as lower.c does. */
kiln_status_t kiln_plan_add_buffer(kiln_plan_t* p, const tir_buffer_t* b, kiln_plan_buffer_kind_t kind,
                                   int32_t tensor, int32_t* out_index);

enum { NS = KILN_PLAN_SEQ_SIZES, BASE = KILN_PLAN_SEQ_SIZES - 1 };

void kiln_plan_seq_sizes(int64_t lo, int64_t hi, int64_t out[KILN_PLAN_SEQ_SIZES]) {
  out[0] = lo;
  out[1] = lo + 1;
  out[2] = lo + (hi - lo) / 2;
  out[3] = hi - 1;
  out[4] = hi;
}

/* c0 + c1*n + c2*n^2 */
typedef struct poly_s {
  int64_t c[3];
} poly_t;

static __int128 poly_eval(const poly_t* p, int64_t n) {
  return (__int128)p->c[0] + (__int128)p->c[1] * n + (__int128)p->c[2] * n * n;
}

static bool poly_fit(const int64_t* x, const int64_t* y, poly_t* out) { return kiln_plan_seq_fit(x, y, out->c); }

/* A buffer of the kernel as the five plans have it, and what the unified
 * kernel uses: the same buffer, or one indexed flat with strides that are
 * polynomials of the dim. */
typedef struct bufmap_s {
  const tir_buffer_t* b[NS];
  const tir_buffer_t* to;
  bool flat;
  poly_t stride[KILN_MAX_RANK];
} bufmap_t;

typedef struct varmap_s {
  const tir_var_t* v[NS];
} varmap_t;

typedef struct seq_s {
  kiln_plan_t* const* P;
  int64_t x[NS];
  const char* dim;
  int64_t lo, hi;
  tir_ctx_t* c;
  const tir_expr_t* n; /* the dim's value: dims[0] */
  const char* node;    /* for messages */
  const char* op;
  bufmap_t* bufs;
  int32_t nbufs, capbufs;
  varmap_t* vars;
  int32_t nvars, capvars;
  const char* why; /* the first mismatch (static text) */
  /* the vectorized loops open around the statement being unified, and
   * whether an index steps with one of them by a stride that depends on
   * the dim (its lanes are then no static stride apart: the loop turns
   * serial) */
  const tir_var_t* vec[KILN_MAX_RANK * 4];
  bool vec_bad[KILN_MAX_RANK * 4];
  int32_t nvec;
} seq_t;

static kiln_status_t oom(const seq_t* S) {
  return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory making node '%s' dynamic in '%s'", S->node, S->dim);
}

static const tir_expr_t* fail(seq_t* S, const char* why) {
  if (!S->why) S->why = why;
  return NULL;
}

static const tir_expr_t* poly_expr(seq_t* S, const poly_t* p) {
  tir_ctx_t* c = S->c;
  const tir_expr_t* e = tir_int(c, p->c[0]);
  if (p->c[1]) e = tir_add(c, e, tir_mul(c, tir_int(c, p->c[1]), S->n));
  if (p->c[2]) e = tir_add(c, e, tir_mul(c, tir_int(c, p->c[2]), tir_mul(c, S->n, S->n)));
  return e;
}

/* The polynomial of values y[] (one per plan), NULL with |why| set when
 * they follow none. */
static const tir_expr_t* int_of(seq_t* S, const int64_t* y, const char* why, poly_t* out) {
  if (!poly_fit(S->x, y, out)) return fail(S, why);
  return poly_expr(S, out);
}

static const tir_var_t* map_var(seq_t* S, const tir_var_t* const* v) {
  for (int32_t i = 0; i < S->nvars; ++i)
    if (S->vars[i].v[BASE] == v[BASE]) {
      for (int s = 0; s < NS; ++s)
        if (S->vars[i].v[s] != v[s]) return NULL;
      return v[BASE];
    }
  return NULL;
}

static bool add_var(seq_t* S, const tir_var_t* const* v) {
  if (S->nvars == S->capvars) {
    int32_t cap = S->capvars ? 2 * S->capvars : 16;
    varmap_t* m = kiln_arena_alloc(&S->c->arena, sizeof(*m) * (size_t)cap);
    if (!m) return false;
    if (S->nvars) memcpy(m, S->vars, sizeof(*m) * (size_t)S->nvars);
    S->vars = m;
    S->capvars = cap;
  }
  memcpy(S->vars[S->nvars++].v, v, sizeof(const tir_var_t*) * NS);
  return true;
}

static const bufmap_t* find_buf(const seq_t* S, const tir_buffer_t* const* b) {
  for (int32_t i = 0; i < S->nbufs; ++i)
    if (S->bufs[i].b[BASE] == b[BASE]) {
      for (int s = 0; s < NS; ++s)
        if (S->bufs[i].b[s] != b[s]) return NULL;
      return &S->bufs[i];
    }
  return NULL;
}

/* Registers buffer b[] (a parameter or a local allocation): the same one
 * when its shape and strides do not change, else flat. NULL with |why| set
 * when it cannot be (rank, dtype or scope differ), or on OOM (|why| NULL). */
static const bufmap_t* add_buf(seq_t* S, const tir_buffer_t* const* b) {
  const tir_buffer_t* B = b[BASE];
  bool same = true;
  for (int s = 0; s < NS; ++s) {
    if (b[s]->rank != B->rank || b[s]->dtype != B->dtype || b[s]->scope != B->scope) {
      fail(S, "a buffer's rank, dtype or scope changes with the dim");
      return NULL;
    }
    for (int32_t d = 0; d < B->rank; ++d) same &= b[s]->shape[d] == B->shape[d] && b[s]->strides[d] == B->strides[d];
  }
  if (S->nbufs == S->capbufs) {
    int32_t cap = S->capbufs ? 2 * S->capbufs : 16;
    bufmap_t* m = kiln_arena_alloc(&S->c->arena, sizeof(*m) * (size_t)cap);
    if (!m) return NULL;
    if (S->nbufs) memcpy(m, S->bufs, sizeof(*m) * (size_t)S->nbufs);
    S->bufs = m;
    S->capbufs = cap;
  }
  bufmap_t* m = &S->bufs[S->nbufs];
  memset(m, 0, sizeof *m);
  memcpy(m->b, b, sizeof(const tir_buffer_t*) * NS);
  m->to = B;
  if (!same) {
    for (int32_t d = 0; d < B->rank; ++d) {
      int64_t y[NS];
      for (int s = 0; s < NS; ++s) y[s] = b[s]->strides[d];
      if (!poly_fit(S->x, y, &m->stride[d])) {
        fail(S, "a buffer's strides follow no polynomial of the dim");
        return NULL;
      }
    }
    /* the top of the range's size, flat; the same id and name, so the
     * printer spells it as before */
    tir_buffer_t* nb = kiln_arena_alloc(&S->c->arena, sizeof(*nb));
    if (!nb) return NULL;
    *nb = *B;
    const uint64_t es = kiln_dtype_size(B->dtype);
    nb->rank = 1;
    nb->shape[0] = es ? (int64_t)(tir_buffer_span_bytes(B) / es) : 0;
    nb->strides[0] = 1;
    if (nb->shape[0] < 1) {
      fail(S, "a buffer that changes with the dim is empty at the top of the range");
      return NULL;
    }
    m->to = nb;
    m->flat = true;
  }
  S->nbufs++;
  return m;
}

static const tir_expr_t* unify_expr(seq_t* S, const tir_expr_t* const* e);

/* Index |u| steps by a stride that depends on the dim: the vector loops
 * it steps with cannot stay vector loops. */
static void mark_vec(seq_t* S, const tir_expr_t* u) {
  for (int32_t i = 0; i < S->nvec; ++i)
    if (tir_expr_uses_var(u, S->vec[i])) S->vec_bad[i] = true;
}

/* Indices of an access to m (the plans' idx[s][]), unified; flat when the
 * buffer is. |out| has KILN_MAX_RANK entries. */
static bool unify_idx(seq_t* S, const bufmap_t* m, const tir_expr_t* const* const* idx, const tir_expr_t** out) {
  const tir_buffer_t* B = m->b[BASE];
  const tir_expr_t* flat = tir_int(S->c, 0);
  for (int32_t d = 0; d < B->rank; ++d) {
    const tir_expr_t* ed[NS];
    for (int s = 0; s < NS; ++s) ed[s] = idx[s][d];
    const tir_expr_t* u = unify_expr(S, ed);
    if (!u) return false;
    if (m->flat) {
      if (m->stride[d].c[1] || m->stride[d].c[2]) mark_vec(S, u);
      const tir_expr_t* st = poly_expr(S, &m->stride[d]);
      flat = tir_add(S->c, flat, tir_mul(S->c, u, st));
    } else {
      out[d] = u;
    }
  }
  if (m->flat) out[0] = flat;
  return m->flat ? flat != NULL : true;
}

static const tir_expr_t* unify_expr(seq_t* S, const tir_expr_t* const* e) {
  const tir_expr_t* E = e[BASE];
  tir_ctx_t* c = S->c;
  for (int s = 0; s < NS; ++s)
    if (!e[s] || e[s]->kind != E->kind || e[s]->dtype != E->dtype) return fail(S, "an expression changes with the dim");
  const tir_expr_t* a[NS];
  const tir_expr_t* b[NS];
  const tir_expr_t* d[NS];
  switch (E->kind) {
    case TIR_INT: {
      int64_t y[NS];
      bool same = true;
      for (int s = 0; s < NS; ++s) same &= (y[s] = e[s]->u.i) == E->u.i;
      if (same) return E;
      if (E->dtype == KILN_DTYPE_BOOL) return fail(S, "a boolean constant changes with the dim");
      poly_t p;
      const tir_expr_t* r = int_of(S, y, "an integer follows no polynomial of the dim", &p);
      return r && E->dtype != KILN_DTYPE_I64 ? tir_cast(c, E->dtype, r) : r;
    }
    case TIR_FLOAT:
      for (int s = 0; s < NS; ++s)
        if (memcmp(&e[s]->u.f, &E->u.f, sizeof E->u.f)) return fail(S, "a float constant changes with the dim");
      return E;
    case TIR_VARREF: {
      const tir_var_t* v[NS];
      for (int s = 0; s < NS; ++s) v[s] = e[s]->u.var;
      return map_var(S, v) ? E : fail(S, "the loops' variables differ");
    }
    case TIR_BINARY:
      for (int s = 0; s < NS; ++s) {
        if (e[s]->u.bin.op != E->u.bin.op) return fail(S, "an operator changes with the dim");
        a[s] = e[s]->u.bin.a;
        b[s] = e[s]->u.bin.b;
      }
      {
        const tir_expr_t* ua = unify_expr(S, a);
        const tir_expr_t* ub = ua ? unify_expr(S, b) : NULL;
        return ub ? tir_bin(c, E->u.bin.op, ua, ub) : NULL;
      }
    case TIR_SELECT:
      for (int s = 0; s < NS; ++s) {
        a[s] = e[s]->u.sel.cond;
        b[s] = e[s]->u.sel.t;
        d[s] = e[s]->u.sel.f;
      }
      {
        const tir_expr_t* ua = unify_expr(S, a);
        const tir_expr_t* ub = ua ? unify_expr(S, b) : NULL;
        const tir_expr_t* ud = ub ? unify_expr(S, d) : NULL;
        return ud ? tir_select(c, ua, ub, ud) : NULL;
      }
    case TIR_CAST:
      for (int s = 0; s < NS; ++s) a[s] = e[s]->u.cast.value;
      {
        const tir_expr_t* ua = unify_expr(S, a);
        return ua ? tir_cast(c, E->dtype, ua) : NULL;
      }
    case TIR_CALL: {
      const tir_expr_t* u[3] = {NULL, NULL, NULL};
      for (int s = 0; s < NS; ++s)
        if (e[s]->u.call.fn != E->u.call.fn || e[s]->u.call.n != E->u.call.n)
          return fail(S, "an intrinsic changes with the dim");
      for (int32_t k = 0; k < E->u.call.n; ++k) {
        for (int s = 0; s < NS; ++s) a[s] = e[s]->u.call.args[k];
        if (!(u[k] = unify_expr(S, a))) return NULL;
      }
      return tir_call(c, E->u.call.fn, E->u.call.n, u[0], u[1], u[2]);
    }
    case TIR_LOAD: {
      const tir_buffer_t* bb[NS];
      const tir_expr_t* const* idx[NS];
      for (int s = 0; s < NS; ++s) {
        bb[s] = e[s]->u.load.buf;
        idx[s] = e[s]->u.load.idx;
      }
      const bufmap_t* m = find_buf(S, bb);
      if (!m) return fail(S, "the buffers a kernel reads differ");
      const tir_expr_t* out[KILN_MAX_RANK];
      if (!unify_idx(S, m, idx, out)) return NULL;
      return tir_load(c, m->to, out);
    }
  }
  return fail(S, "an unknown expression");
}

/* Whether |s| (unified) has a loop with a run-time trip count. */
static bool has_dyn_loop(const tir_stmt_t* s) {
  if (!s) return false;
  switch (s->kind) {
    case TIR_FOR: return s->u.loop.dyn_extent != NULL || has_dyn_loop(s->u.loop.body);
    case TIR_SEQ:
      for (int32_t i = 0; i < s->u.seq.n; ++i)
        if (has_dyn_loop(s->u.seq.items[i])) return true;
      return false;
    case TIR_IF: return has_dyn_loop(s->u.cond.then_s) || has_dyn_loop(s->u.cond.else_s);
    case TIR_ALLOC: return has_dyn_loop(s->u.alloc.body);
    default: return false;
  }
}

static const tir_stmt_t* sfail(seq_t* S, const char* why) {
  fail(S, why);
  return NULL;
}

static const tir_stmt_t* unify_stmt(seq_t* S, const tir_stmt_t* const* t, const tir_buffer_t* dims) {
  const tir_stmt_t* T = t[BASE];
  tir_ctx_t* c = S->c;
  for (int s = 0; s < NS; ++s)
    if (!t[s] || t[s]->kind != T->kind) return sfail(S, "the loop nest changes with the dim");
  const tir_stmt_t* u[NS];
  switch (T->kind) {
    case TIR_FOR: {
      const tir_var_t* v[NS];
      int64_t y[NS];
      bool same = true;
      for (int s = 0; s < NS; ++s) {
        const tir_stmt_t* L = t[s];
        /* a schedule that parallelizes or vectorizes a loop only from some
         * size on: what it does at the top of the range is legal at every
         * size (the loop's dependences do not change with its extent) */
        const bool bound = L->u.loop.kind == TIR_LOOP_BOUND || T->u.loop.kind == TIR_LOOP_BOUND;
        if ((bound && L->u.loop.kind != T->u.loop.kind) || L->u.loop.tag != T->u.loop.tag || L->u.loop.dyn_extent)
          return sfail(S, "a loop's kind changes with the dim");
        v[s] = L->u.loop.var;
        same &= (y[s] = L->u.loop.extent) == T->u.loop.extent;
        u[s] = L->u.loop.body;
      }
      if (!add_var(S, v)) return NULL;
      tir_loop_kind_t k = T->u.loop.kind;
      const bool vec = same && k == TIR_LOOP_VECTORIZED && S->nvec < (int32_t)(sizeof S->vec / sizeof S->vec[0]);
      if (vec) {
        S->vec[S->nvec] = T->u.loop.var;
        S->vec_bad[S->nvec++] = false;
      }
      const tir_stmt_t* body = unify_stmt(S, u, dims);
      bool bad = false;
      if (vec) bad = S->vec_bad[--S->nvec];
      if (!body) return NULL;
      if (same) {
        if (k == TIR_LOOP_BOUND) return tir_for_bound(c, T->u.loop.var, T->u.loop.extent, T->u.loop.tag, body);
        /* a vector loop whose lanes an index steps through by a stride of
         * the dim, or with a run-time loop inside, stays scalar */
        if (k == TIR_LOOP_VECTORIZED && (bad || has_dyn_loop(body))) k = TIR_LOOP_SERIAL;
        return tir_for(c, T->u.loop.var, T->u.loop.extent, k, body);
      }
      if (k == TIR_LOOP_BOUND) return sfail(S, "a loop bound to a GPU id changes its extent with the dim");
      poly_t p;
      const tir_expr_t* ext = int_of(S, y, "a loop's extent follows no polynomial of the dim", &p);
      if (!ext) return NULL;
      __int128 mx = 0;
      for (int64_t n = S->lo; n <= S->hi; ++n) {
        __int128 vn = poly_eval(&p, n);
        if (vn < 0) return sfail(S, "a loop's extent is negative inside the range");
        if (vn > mx) mx = vn;
      }
      if (mx > INT64_MAX / 4) return sfail(S, "a loop's extent overflows inside the range");
      if (k != TIR_LOOP_PARALLEL) k = TIR_LOOP_SERIAL;
      return tir_for_dyn(c, T->u.loop.var, (int64_t)mx, ext, k, body);
    }
    case TIR_STORE: {
      const tir_buffer_t* bb[NS];
      const tir_expr_t* const* idx[NS];
      const tir_expr_t* val[NS];
      for (int s = 0; s < NS; ++s) {
        bb[s] = t[s]->u.store.buf;
        idx[s] = t[s]->u.store.idx;
        val[s] = t[s]->u.store.value;
      }
      const bufmap_t* m = find_buf(S, bb);
      if (!m) return sfail(S, "the buffers a kernel writes differ");
      const tir_expr_t* out[KILN_MAX_RANK];
      if (!unify_idx(S, m, idx, out)) return NULL;
      const tir_expr_t* uv = unify_expr(S, val);
      return uv ? tir_store(c, m->to, out, uv) : NULL;
    }
    case TIR_SEQ: {
      const int32_t n = T->u.seq.n;
      for (int s = 0; s < NS; ++s)
        if (t[s]->u.seq.n != n) return sfail(S, "a kernel's statements change with the dim");
      const tir_stmt_t** items = kiln_arena_alloc(&c->arena, sizeof(*items) * (size_t)(n ? n : 1));
      if (!items) return NULL;
      for (int32_t i = 0; i < n; ++i) {
        for (int s = 0; s < NS; ++s) u[s] = t[s]->u.seq.items[i];
        if (!(items[i] = unify_stmt(S, u, dims))) return NULL;
      }
      return tir_seq(c, n, items);
    }
    case TIR_IF: {
      const tir_expr_t* ce[NS];
      const tir_stmt_t* el[NS];
      bool has_else = T->u.cond.else_s != NULL;
      for (int s = 0; s < NS; ++s) {
        ce[s] = t[s]->u.cond.cond;
        u[s] = t[s]->u.cond.then_s;
        el[s] = t[s]->u.cond.else_s;
        if ((el[s] != NULL) != has_else) return sfail(S, "a kernel's branches change with the dim");
      }
      const tir_expr_t* uc = unify_expr(S, ce);
      const tir_stmt_t* ut = uc ? unify_stmt(S, u, dims) : NULL;
      if (!ut) return NULL;
      const tir_stmt_t* ue = has_else ? unify_stmt(S, el, dims) : NULL;
      if (has_else && !ue) return NULL;
      return tir_if(c, uc, ut, ue);
    }
    case TIR_ALLOC: {
      const tir_buffer_t* bb[NS];
      for (int s = 0; s < NS; ++s) {
        bb[s] = t[s]->u.alloc.buf;
        u[s] = t[s]->u.alloc.body;
      }
      const bufmap_t* m = add_buf(S, bb);
      if (!m) return NULL;
      const tir_buffer_t* to = m->to; /* |m| moves as buffers are added */
      const tir_stmt_t* body = unify_stmt(S, u, dims);
      return body ? tir_alloc(c, to, body) : NULL;
    }
    case TIR_BARRIER: return tir_barrier(c);
    case TIR_PREFETCH: { /* as a load's index */
      const tir_buffer_t* bb[NS];
      const tir_expr_t* const* idx[NS];
      for (int s = 0; s < NS; ++s) {
        bb[s] = t[s]->u.store.buf;
        idx[s] = t[s]->u.store.idx;
      }
      const bufmap_t* m = find_buf(S, bb);
      if (!m) return sfail(S, "the buffers a kernel reads differ");
      const tir_expr_t* out[KILN_MAX_RANK];
      if (!unify_idx(S, m, idx, out)) return NULL;
      return tir_prefetch(c, m->to, out);
    }
  }
  return sfail(S, "an unknown statement");
}

/* Kernel |k|'s functions f[] (scheduled or naive forms of the five plans)
 * unified into *out; *out NULL with S->why set when they do not unify. */
static kiln_status_t unify_func(seq_t* S, const tir_func_t* const* f, const tir_buffer_t* dims, tir_func_t** out) {
  *out = NULL;
  S->nbufs = S->nvars = 0;
  S->why = NULL;
  const tir_func_t* F = f[BASE];
  for (int s = 0; s < NS; ++s)
    if (!f[s] || f[s]->n_params != F->n_params) {
      S->why = "the kernel's parameters change with the dim";
      return NULL;
    }
  const int32_t np = F->n_params + 1;
  const tir_buffer_t** params = kiln_arena_alloc(&S->c->arena, sizeof(*params) * (size_t)np);
  if (!params) return oom(S);
  for (int32_t j = 0; j < F->n_params; ++j) {
    const tir_buffer_t* bb[NS];
    for (int s = 0; s < NS; ++s) bb[s] = f[s]->params[j];
    const bufmap_t* m = add_buf(S, bb);
    if (!m) return S->why ? NULL : oom(S);
    params[j] = m->to;
  }
  params[np - 1] = dims;
  const tir_stmt_t* body[NS];
  for (int s = 0; s < NS; ++s) body[s] = f[s]->body;
  const tir_stmt_t* ub = unify_stmt(S, body, dims);
  if (!ub) return S->why ? NULL : (tir_ctx_status(S->c) ? tir_ctx_status(S->c) : oom(S));
  tir_func_t* nf = tir_func(S->c, F->name, np, params, ub);
  if (!nf) return oom(S);
  *out = nf;
  return NULL;
}

static kiln_status_t refuse(const seq_t* S, const char* fmt, const char* what) {
  char msg[800];
  snprintf(msg, sizeof msg, fmt, what);
  return kiln_make_status(KILN_UNSUPPORTED,
                          "node '%s' (%s): dim '%s' cannot be a range (%lld..%lld): %s; compile a set of its sizes "
                          "instead (--dim %s=16,64,128: one static program each)",
                          S->node, S->op, S->dim, (long long)S->lo, (long long)S->hi, msg, S->dim);
}

static kiln_status_t unify_kernel(seq_t* S, int32_t k, const tir_buffer_t* dims) {
  kiln_plan_t* B = S->P[BASE];
  kiln_plan_kernel_t* kk = &B->kernels[k];
  S->node = kiln_plan_kernel_node_name(B, kk);
  S->op = kiln_plan_kernel_node_op(B, kk);
  for (int s = 0; s < NS; ++s) {
    const kiln_plan_kernel_t* ks = &S->P[s]->kernels[k];
    if (ks->tmpl || ks->custom || ks->host)
      return refuse(S, "%s takes no run-time extent yet",
                    ks->tmpl ? "it runs as a template kernel" : ks->custom ? "it runs as a plugin kernel"
                                                                          : "it runs on the host");
    if (ks->node != kk->node || ks->func->n_params != kk->func->n_params)
      return refuse(S, "%s", "the plans at different sizes do not have the same kernels");
    for (int32_t j = 0; j < kk->func->n_params; ++j)
      if (ks->args[j] != kk->args[j]) return refuse(S, "%s", "its kernel's arguments change with the dim");
  }
  const tir_func_t* f[NS];
  for (int s = 0; s < NS; ++s) f[s] = S->P[s]->kernels[k].func;
  tir_func_t* nf = NULL;
  KILN_RETURN_IF_ERROR(unify_func(S, f, dims, &nf));
  const char* why_sched = S->why;
  bool naive = false;
  if (!nf) {
    /* tiles and remainders fixed per size: the naive form, from the shapes */
    for (int s = 0; s < NS; ++s) f[s] = S->P[s]->kernels[k].naive;
    KILN_RETURN_IF_ERROR(unify_func(S, f, dims, &nf));
    if (!nf) return refuse(S, "%s", S->why ? S->why : why_sched);
    naive = true;
  }
  tir_func_t* sf = tir_simplify_func(S->c, nf); /* 0 * stride(n) and the like */
  if (!sf) return oom(S);
  nf = sf;
  const int64_t lo = S->lo, hi = S->hi;
  kiln_status_t st = tir_verify_dims(nf, dims, 1, &lo, &hi);
  if (st) return kiln_status_annotate(st, "node '%s' (%s): kernel over a range of dim '%s'", S->node, S->op, S->dim);
  kk->func = nf;
  if (naive) kk->schedule = NULL;
  return NULL;
}

/* The axis of graph input/output buffer |b| that is the dim (-1: none). */
static kiln_status_t io_axis(seq_t* S, int32_t pb, const char* what, int32_t* out) {
  *out = -1;
  const tir_buffer_t* B = S->P[BASE]->buffers[pb].buf;
  for (int s = 0; s < NS; ++s) {
    const tir_buffer_t* b = S->P[s]->buffers[pb].buf;
    if (b->rank != B->rank) return refuse(S, "%s's rank changes with the dim", what);
    for (int32_t d = 0; d < B->rank; ++d) {
      if (b->shape[d] == B->shape[d]) continue;
      if (*out >= 0 && *out != d) return refuse(S, "%s has the dim in more than one axis", what);
      *out = d;
    }
  }
  if (*out < 0) return NULL;
  for (int s = 0; s < NS; ++s)
    if (S->P[s]->buffers[pb].buf->shape[*out] != S->x[s])
      return refuse(S, "%s has an axis that changes with the dim but is not the dim itself", what);
  return NULL;
}

kiln_status_t kiln_plan_seq_unify(kiln_plan_t* const* plans, const char* name, int64_t lo, int64_t hi) {
  if (!plans || !name || !name[0]) return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_plan_seq_unify: no plans");
  if (lo < 1 || hi - lo < NS - 1 || hi > (1ll << 20))
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "dim '%s': a range inside the shapes needs at least %d values within 1..%lld (got "
                            "%lld..%lld); compile a set of sizes instead (--dim %s=%lld,%lld)",
                            name, NS, 1ll << 20, (long long)lo, (long long)hi, name, (long long)lo, (long long)hi);
  kiln_plan_t* B = plans[BASE];
  seq_t S;
  memset(&S, 0, sizeof S);
  S.P = plans;
  S.dim = name;
  S.lo = lo;
  S.hi = hi;
  S.c = &B->tir;
  S.node = "(graph)";
  S.op = "-";
  kiln_plan_seq_sizes(lo, hi, S.x);
  if (B->n_dims) return kiln_make_status(KILN_UNSUPPORTED, "dim '%s': the plan is dynamic in '%s' already", name,
                                         B->dims[0].name);
  const kiln_graph_t* g = B->graph;
  for (int s = 0; s < NS; ++s) {
    const kiln_plan_t* p = plans[s];
    if (p->n_kernels != B->n_kernels || p->n_buffers != B->n_buffers || p->graph->n_inputs != g->n_inputs ||
        p->graph->n_outputs != g->n_outputs) {
      char why[200];
      snprintf(why, sizeof why, "the model lowers to %d kernels over %d buffers at %lld, %d over %d at %lld",
               (int)p->n_kernels, (int)p->n_buffers, (long long)S.x[s], (int)B->n_kernels, (int)B->n_buffers,
               (long long)hi);
      return refuse(&S, "%s", why);
    }
    for (int32_t i = 0; i < B->n_buffers; ++i) {
      const kiln_plan_buffer_t* a = &p->buffers[i];
      const kiln_plan_buffer_t* b = &B->buffers[i];
      if (a->kind != b->kind || a->alias_of != b->alias_of || a->buf->dtype != b->buf->dtype)
        return refuse(&S, "%s", "the model lowers to different buffers at different sizes");
      /* a shape's constant (a Reshape target) no kernel reads may differ */
      if (b->kind == KILN_PLAN_CONST && b->first_use >= 0 &&
          (a->value.nbytes != b->value.nbytes || (b->value.nbytes && memcmp(a->value.data, b->value.data, b->value.nbytes)))) {
        S.node = b->buf->name;
        return refuse(&S, "%s", "a constant is computed from the dim");
      }
    }
  }
  int32_t* axes = kiln_arena_alloc(&S.c->arena, sizeof(int32_t) * (size_t)(g->n_inputs + g->n_outputs + 1));
  if (!axes) return oom(&S);
  bool any = false;
  for (int32_t i = 0; i < g->n_inputs + g->n_outputs; ++i) {
    const bool in = i < g->n_inputs;
    const int32_t pb = in ? B->inputs[i] : B->outputs[i - g->n_inputs];
    const char* tname = B->buffers[pb].buf->name;
    char what[300];
    snprintf(what, sizeof what, "%s '%s'", in ? "input" : "output", tname);
    S.node = tname;
    S.op = in ? "input" : "output";
    KILN_RETURN_IF_ERROR(io_axis(&S, pb, what, &axes[i]));
    any |= in && axes[i] >= 0;
  }
  if (!any)
    return kiln_make_status(KILN_UNSUPPORTED, "dim '%s': no model input has it in its shape (nothing to read its "
                            "value from at run time)", name);
  tir_ctx_t* c = S.c;
  const int64_t one = 1;
  const tir_buffer_t* dims = tir_buffer(c, "kiln_dims", KILN_DTYPE_I64, 1, &one, TIR_SCOPE_GLOBAL);
  const char* copy = kiln_arena_strndup(&c->arena, name, strlen(name));
  const tir_expr_t* zero = tir_int(c, 0);
  S.n = dims && zero ? tir_load(c, dims, &zero) : NULL;
  if (!S.n || !copy) return oom(&S);
  int32_t di = -1;
  KILN_RETURN_IF_ERROR(kiln_plan_add_buffer(B, dims, KILN_PLAN_DIMS, -1, &di));
  for (int32_t k = 0; k < B->n_kernels; ++k) {
    KILN_RETURN_IF_ERROR(unify_kernel(&S, k, dims));
    kiln_plan_kernel_t* kk = &B->kernels[k];
    const int32_t np = kk->func->n_params;
    int32_t* a = kiln_arena_alloc(&c->arena, sizeof(int32_t) * (size_t)np);
    if (!a) return oom(&S);
    memcpy(a, kk->args, sizeof(int32_t) * (size_t)(np - 1));
    a[np - 1] = di;
    kk->args = a;
  }
  B->buffers[di].first_use = B->n_kernels ? 0 : -1;
  B->buffers[di].last_use = B->n_kernels - 1;
  B->dims[0] = (kiln_plan_dim_t){copy, lo, hi};
  B->n_dims = 1;
  B->dim_axis = axes;
  return NULL;
}
