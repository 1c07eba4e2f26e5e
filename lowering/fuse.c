/* Kernel fusion on a lowered plan (see fuse.h): epilogue fusion of
 * element-wise consumers into their producer's stores, and inlining of
 * injective producers into their consumer's loads.
 *
 * Both rewrite tensor-IR kernels that are already scheduled: the kernel that
 * survives keeps its loops, tiling and vector/parallel annotations, and only
 * the stores (epilogue) or loads (inlining) of the eliminated buffer change.
 * Legality is decided on the plan: which kernels load and store which memory
 * roots (aliases resolved), and where the fused kernel may run so that every
 * buffer it reads is ready and nothing in between sees a difference. */
#include "lowering/fuse.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph.h"
#include "ir/op.h"

/* ---- op patterns ----------------------------------------------------- */

kiln_op_pattern_t kiln_op_pattern(const char* op_type) {
  const kiln_op_schema_t* schema = kiln_op_lookup(NULL, op_type);
  return schema ? schema->pattern : KILN_PATTERN_OPAQUE;
}

const char* kiln_op_pattern_name(kiln_op_pattern_t p) {
  switch (p) {
    case KILN_PATTERN_ELEMWISE: return "elemwise";
    case KILN_PATTERN_BROADCAST: return "broadcast";
    case KILN_PATTERN_INJECTIVE: return "injective";
    case KILN_PATTERN_REDUCTION: return "reduction";
    case KILN_PATTERN_OUT_ELEMWISE_FUSABLE: return "out-elemwise-fusable";
    case KILN_PATTERN_OPAQUE: return "opaque";
  }
  return "?";
}

/* ---- access summaries ------------------------------------------------- */

enum { ACC_LOAD = TIR_ACCESS_LOAD, ACC_STORE = TIR_ACCESS_STORE };

/* Per kernel: the access flags of every plan buffer root it touches. */
typedef struct acc_s {
  uint8_t* flags; /* [n_kernels * n_buffers] */
  int32_t nk, nb;
} acc_t;

static kiln_status_t acc_build(const kiln_plan_t* p, acc_t* a) {
  free(a->flags);
  a->nk = p->n_kernels;
  a->nb = p->n_buffers;
  a->flags = calloc((size_t)(a->nk ? a->nk : 1) * (size_t)(a->nb ? a->nb : 1), 1);
  if (!a->flags) return kiln_make_status(KILN_OUT_OF_MEMORY, "fuse: out of memory");
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    uint8_t* row = a->flags + (size_t)k * (size_t)a->nb;
    const tir_func_t* f = p->kernels[k].func;
    for (int32_t i = 0; i < f->n_params; ++i)
      row[kiln_plan_root(p, p->kernels[k].args[i])] |= (uint8_t)tir_func_buffer_access(f, f->params[i]);
    /* A parameter nobody loads or stores still counts as read (conservative). */
    for (int32_t i = 0; i < f->n_params; ++i) {
      int32_t r = kiln_plan_root(p, p->kernels[k].args[i]);
      if (!row[r]) row[r] = ACC_LOAD;
    }
  }
  return NULL;
}

static inline uint8_t acc_get(const acc_t* a, int32_t k, int32_t b) {
  return a->flags[(size_t)k * (size_t)a->nb + (size_t)b];
}

/* Intermediate traffic: bytes of INTERMEDIATE roots each kernel loads plus
 * bytes it stores (a buffer written once and read by two kernels costs 3x). */
static int64_t traffic(const kiln_plan_t* p, const acc_t* a) {
  int64_t t = 0;
  for (int32_t k = 0; k < a->nk; ++k)
    for (int32_t b = 0; b < a->nb; ++b) {
      uint8_t f = acc_get(a, k, b);
      if (!f || p->buffers[b].kind != KILN_PLAN_INTERMEDIATE) continue;
      int64_t bytes = tir_buffer_numel(p->buffers[b].buf) *
                      (int64_t)kiln_dtype_size(p->buffers[b].buf->dtype);
      t += bytes * (((f & ACC_LOAD) ? 1 : 0) + ((f & ACC_STORE) ? 1 : 0));
    }
  return t;
}

/* ---- expression rewriting -------------------------------------------- */

/* Replaces every load of |buf| by repl(load) (NULL from repl = OOM). */
typedef const tir_expr_t* (*load_fn)(void* user, const tir_expr_t* load);

typedef struct rw_s {
  tir_ctx_t* c;
  const tir_buffer_t* buf;
  load_fn fn;
  void* user;
} rw_t;

static const tir_expr_t* rw_expr(rw_t* r, const tir_expr_t* e) {
  if (!e) return NULL;
  switch (e->kind) {
    case TIR_BINARY: {
      const tir_expr_t* a = rw_expr(r, e->u.bin.a);
      const tir_expr_t* b = rw_expr(r, e->u.bin.b);
      if (a == e->u.bin.a && b == e->u.bin.b) return e;
      return tir_bin(r->c, e->u.bin.op, a, b);
    }
    case TIR_SELECT: {
      const tir_expr_t* q = rw_expr(r, e->u.sel.cond);
      const tir_expr_t* t = rw_expr(r, e->u.sel.t);
      const tir_expr_t* f = rw_expr(r, e->u.sel.f);
      if (q == e->u.sel.cond && t == e->u.sel.t && f == e->u.sel.f) return e;
      return tir_select(r->c, q, t, f);
    }
    case TIR_LOAD: {
      const tir_buffer_t* b = e->u.load.buf;
      const tir_expr_t* idx[KILN_MAX_RANK];
      bool ch = false;
      for (int32_t i = 0; i < b->rank; ++i) {
        idx[i] = rw_expr(r, e->u.load.idx[i]);
        if (!idx[i]) return NULL;
        ch |= idx[i] != e->u.load.idx[i];
      }
      const tir_expr_t* ne = ch ? tir_load(r->c, b, idx) : e;
      if (ne && b == r->buf) return r->fn(r->user, ne);
      return ne;
    }
    case TIR_CAST: {
      const tir_expr_t* v = rw_expr(r, e->u.cast.value);
      if (v == e->u.cast.value) return e;
      return tir_cast(r->c, e->dtype, v);
    }
    case TIR_CALL: {
      const tir_expr_t* a[3] = {NULL, NULL, NULL};
      bool ch = false;
      for (int32_t i = 0; i < e->u.call.n; ++i) {
        a[i] = rw_expr(r, e->u.call.args[i]);
        if (!a[i]) return NULL;
        ch |= a[i] != e->u.call.args[i];
      }
      if (!ch) return e;
      return tir_call(r->c, e->u.call.fn, e->u.call.n, a[0], a[1], a[2]);
    }
    default: return e;
  }
}

static int64_t expr_size(const tir_expr_t* e) {
  if (!e) return 0;
  switch (e->kind) {
    case TIR_BINARY: return 1 + expr_size(e->u.bin.a) + expr_size(e->u.bin.b);
    case TIR_SELECT:
      return 1 + expr_size(e->u.sel.cond) + expr_size(e->u.sel.t) + expr_size(e->u.sel.f);
    case TIR_LOAD: {
      int64_t n = 1;
      for (int32_t i = 0; i < e->u.load.buf->rank; ++i) n += expr_size(e->u.load.idx[i]);
      return n;
    }
    case TIR_CAST: return 1 + expr_size(e->u.cast.value);
    case TIR_CALL: {
      int64_t n = 1;
      for (int32_t i = 0; i < e->u.call.n; ++i) n += expr_size(e->u.call.args[i]);
      return n;
    }
    default: return 1;
  }
}

/* Statement rewriting: stores to |buf| via a callback; loads via |rw|. */
typedef const tir_stmt_t* (*store_fn)(void* user, const tir_stmt_t* store);

typedef struct srw_s {
  tir_ctx_t* c;
  const tir_buffer_t* store_buf; /* stores of it go to sfn */
  store_fn sfn;
  rw_t* loads; /* NULL: loads unchanged */
  void* user;
  bool fail;
} srw_t;

static const tir_expr_t* srw_e(srw_t* s, const tir_expr_t* e) {
  if (!s->loads || !e) return e;
  const tir_expr_t* r = rw_expr(s->loads, e);
  if (!r) s->fail = true;
  return r;
}

static const tir_stmt_t* srw_stmt(srw_t* s, const tir_stmt_t* st) {
  if (!st || s->fail) return st;
  switch (st->kind) {
    case TIR_FOR: {
      const tir_stmt_t* b = srw_stmt(s, st->u.loop.body);
      if (b == st->u.loop.body) return st;
      if (!b) { s->fail = true; return NULL; }
      if (st->u.loop.kind == TIR_LOOP_BOUND)
        return tir_for_bound(s->c, st->u.loop.var, st->u.loop.extent, st->u.loop.tag, b);
      return tir_for(s->c, st->u.loop.var, st->u.loop.extent, st->u.loop.kind, b);
    }
    case TIR_STORE: {
      const tir_buffer_t* b = st->u.store.buf;
      const tir_expr_t* idx[KILN_MAX_RANK];
      bool ch = false;
      for (int32_t i = 0; i < b->rank; ++i) {
        idx[i] = srw_e(s, st->u.store.idx[i]);
        ch |= idx[i] != st->u.store.idx[i];
      }
      const tir_expr_t* v = srw_e(s, st->u.store.value);
      if (s->fail) return NULL;
      ch |= v != st->u.store.value;
      const tir_stmt_t* ns = ch ? tir_store(s->c, b, idx, v) : st;
      if (ns && b == s->store_buf) ns = s->sfn(s->user, ns);
      if (!ns) s->fail = true;
      return ns;
    }
    case TIR_SEQ: {
      const tir_stmt_t* items[st->u.seq.n > 0 ? st->u.seq.n : 1];
      bool ch = false;
      for (int32_t i = 0; i < st->u.seq.n; ++i) {
        items[i] = srw_stmt(s, st->u.seq.items[i]);
        ch |= items[i] != st->u.seq.items[i];
      }
      if (s->fail) return NULL;
      return ch ? tir_seq(s->c, st->u.seq.n, items) : st;
    }
    case TIR_IF: {
      const tir_expr_t* q = srw_e(s, st->u.cond.cond);
      const tir_stmt_t* t = srw_stmt(s, st->u.cond.then_s);
      const tir_stmt_t* f = srw_stmt(s, st->u.cond.else_s);
      if (s->fail) return NULL;
      if (q == st->u.cond.cond && t == st->u.cond.then_s && f == st->u.cond.else_s) return st;
      return tir_if(s->c, q, t, f);
    }
    case TIR_ALLOC: {
      const tir_stmt_t* b = srw_stmt(s, st->u.alloc.body);
      if (s->fail) return NULL;
      return b == st->u.alloc.body ? st : tir_alloc(s->c, st->u.alloc.buf, b);
    }
    default: return st;
  }
}

/* Sum over the stores of |buf| of the iterations of their enclosing loops
 * (guards ignored: an upper bound on the elements written). */
static int64_t store_count(const tir_stmt_t* s, const tir_buffer_t* buf, int64_t mult) {
  if (!s) return 0;
  switch (s->kind) {
    case TIR_FOR: {
      int64_t m = mult;
      if (s->u.loop.extent > 0 && m < (INT64_MAX / 4) / s->u.loop.extent) m *= s->u.loop.extent;
      return store_count(s->u.loop.body, buf, m);
    }
    case TIR_STORE: return s->u.store.buf == buf ? mult : 0;
    case TIR_SEQ: {
      int64_t n = 0;
      for (int32_t i = 0; i < s->u.seq.n; ++i) n += store_count(s->u.seq.items[i], buf, mult);
      return n;
    }
    case TIR_IF:
      return store_count(s->u.cond.then_s, buf, mult) + store_count(s->u.cond.else_s, buf, mult);
    case TIR_ALLOC: return store_count(s->u.alloc.body, buf, mult);
    default: return 0;
  }
}

/* Same for loads of |buf| (how often a consumer reads it). */
static int64_t load_count_e(const tir_expr_t* e, const tir_buffer_t* buf) {
  if (!e) return 0;
  switch (e->kind) {
    case TIR_BINARY: return load_count_e(e->u.bin.a, buf) + load_count_e(e->u.bin.b, buf);
    case TIR_SELECT:
      return load_count_e(e->u.sel.cond, buf) + load_count_e(e->u.sel.t, buf) +
             load_count_e(e->u.sel.f, buf);
    case TIR_LOAD: {
      int64_t n = e->u.load.buf == buf;
      for (int32_t i = 0; i < e->u.load.buf->rank; ++i) n += load_count_e(e->u.load.idx[i], buf);
      return n;
    }
    case TIR_CAST: return load_count_e(e->u.cast.value, buf);
    case TIR_CALL: {
      int64_t n = 0;
      for (int32_t i = 0; i < e->u.call.n; ++i) n += load_count_e(e->u.call.args[i], buf);
      return n;
    }
    default: return 0;
  }
}

static int64_t load_count(const tir_stmt_t* s, const tir_buffer_t* buf, int64_t mult) {
  if (!s) return 0;
  switch (s->kind) {
    case TIR_FOR: {
      int64_t m = mult;
      if (s->u.loop.extent > 0 && m < (INT64_MAX / 4) / s->u.loop.extent) m *= s->u.loop.extent;
      return load_count(s->u.loop.body, buf, m);
    }
    case TIR_STORE: {
      int64_t n = load_count_e(s->u.store.value, buf);
      for (int32_t i = 0; i < s->u.store.buf->rank; ++i) n += load_count_e(s->u.store.idx[i], buf);
      return n * mult;
    }
    case TIR_SEQ: {
      int64_t n = 0;
      for (int32_t i = 0; i < s->u.seq.n; ++i) n += load_count(s->u.seq.items[i], buf, mult);
      return n;
    }
    case TIR_IF:
      return load_count_e(s->u.cond.cond, buf) * mult +
             load_count(s->u.cond.then_s, buf, mult) + load_count(s->u.cond.else_s, buf, mult);
    case TIR_ALLOC: return load_count(s->u.alloc.body, buf, mult);
    default: return 0;
  }
}

/* ---- element-wise nests ------------------------------------------------ */

/* A naive kernel of the form `for v0..vn-1 (serial): B[v0..vn-1] = f` over
 * B's shape. */
typedef struct nest_s {
  int32_t rank;
  const tir_var_t* var[KILN_MAX_RANK];
  const tir_stmt_t* store;
} nest_t;

static bool match_nest(const tir_func_t* f, nest_t* n) {
  const tir_stmt_t* s = f->body;
  n->rank = 0;
  int64_t ext[KILN_MAX_RANK];
  while (s && s->kind == TIR_FOR) {
    if (n->rank >= KILN_MAX_RANK || s->u.loop.kind == TIR_LOOP_BOUND) return false;
    ext[n->rank] = s->u.loop.extent;
    n->var[n->rank++] = s->u.loop.var;
    s = s->u.loop.body;
  }
  if (s && s->kind == TIR_SEQ && s->u.seq.n == 1) s = s->u.seq.items[0];
  if (!s || s->kind != TIR_STORE) return false;
  const tir_buffer_t* b = s->u.store.buf;
  if (b->rank != n->rank) return false;
  for (int32_t i = 0; i < n->rank; ++i) {
    if (ext[i] != b->shape[i]) return false;
    const tir_expr_t* e = s->u.store.idx[i];
    if (e->kind != TIR_VARREF || e->u.var != n->var[i]) return false;
    for (int32_t j = 0; j < i; ++j)
      if (n->var[j] == n->var[i]) return false;
  }
  n->store = s;
  return true;
}

/* Every load of |buf| in |e| is buf[v0..vn-1] (identity index). */
static bool identity_loads(const tir_expr_t* e, const tir_buffer_t* buf, const nest_t* n) {
  if (!e) return true;
  switch (e->kind) {
    case TIR_BINARY:
      return identity_loads(e->u.bin.a, buf, n) && identity_loads(e->u.bin.b, buf, n);
    case TIR_SELECT:
      return identity_loads(e->u.sel.cond, buf, n) && identity_loads(e->u.sel.t, buf, n) &&
             identity_loads(e->u.sel.f, buf, n);
    case TIR_LOAD:
      if (e->u.load.buf == buf) {
        if (buf->rank != n->rank) return false;
        for (int32_t i = 0; i < n->rank; ++i)
          if (e->u.load.idx[i]->kind != TIR_VARREF || e->u.load.idx[i]->u.var != n->var[i])
            return false;
        return true;
      }
      for (int32_t i = 0; i < e->u.load.buf->rank; ++i)
        if (!identity_loads(e->u.load.idx[i], buf, n)) return false;
      return true;
    case TIR_CAST: return identity_loads(e->u.cast.value, buf, n);
    case TIR_CALL:
      for (int32_t i = 0; i < e->u.call.n; ++i)
        if (!identity_loads(e->u.call.args[i], buf, n)) return false;
      return true;
    default: return true;
  }
}

/* ---- the pass ---------------------------------------------------------- */

typedef struct fz_s {
  kiln_plan_t* p;
  acc_t acc;
  FILE* log;
  kiln_fusion_report_t* rep;
} fz_t;

/* Kernels that touch root |b|: counts and the first two. */
static int32_t users(const fz_t* z, int32_t b, int32_t* k0, int32_t* k1) {
  int32_t n = 0;
  *k0 = *k1 = -1;
  for (int32_t k = 0; k < z->acc.nk; ++k)
    if (acc_get(&z->acc, k, b)) {
      if (n == 0) *k0 = k;
      else if (n == 1) *k1 = k;
      ++n;
    }
  return n;
}

/* |x| is an intermediate whose memory nobody else can see. */
static bool private_intermediate(const fz_t* z, int32_t x) {
  const kiln_plan_t* p = z->p;
  const kiln_plan_buffer_t* xb = &p->buffers[x];
  if (xb->kind != KILN_PLAN_INTERMEDIATE || xb->alias_of >= 0) return false;
  for (int32_t o = 0; o < p->graph->n_outputs; ++o)
    if (kiln_plan_root(p, p->outputs[o]) == x) return false;
  for (int32_t b = 0; b < p->n_buffers; ++b) {
    if (b == x || kiln_plan_root(p, b) != x) continue;
    if (p->buffers[b].kind == KILN_PLAN_OUTPUT) return false;
    for (int32_t k = 0; k < p->n_kernels; ++k)
      for (int32_t a = 0; a < p->kernels[k].func->n_params; ++a)
        if (p->kernels[k].args[a] == b) return false; /* used through a view */
  }
  return true;
}

static const tir_buffer_t* param_of(const kiln_plan_t* p, const kiln_plan_kernel_t* k,
                                    int32_t b) {
  for (int32_t i = 0; i < k->func->n_params; ++i)
    if (k->args[i] == b) return k->func->params[i];
  return NULL;
}

/* Writers of any root in |reads| (a row) strictly between kernels lo and hi. */
static bool written_between(const fz_t* z, const uint8_t* row, int32_t lo, int32_t hi) {
  for (int32_t k = lo + 1; k < hi; ++k)
    for (int32_t b = 0; b < z->acc.nb; ++b)
      if (row[b] && (acc_get(&z->acc, k, b) & ACC_STORE)) return true;
  return false;
}

/* The fused kernel's parameter list: |a|'s params without |drop|, then |b|'s
 * params not yet present (and not |drop|). */
static kiln_status_t merge_params(fz_t* z, const kiln_plan_kernel_t* a,
                                  const kiln_plan_kernel_t* b, const tir_buffer_t* drop,
                                  const tir_buffer_t*** out_params, int32_t** out_args,
                                  int32_t* out_n) {
  kiln_plan_t* p = z->p;
  int32_t cap = a->func->n_params + b->func->n_params;
  const tir_buffer_t** ps = kiln_arena_alloc(&p->tir.arena, sizeof(*ps) * (size_t)(cap + 1));
  int32_t* as = kiln_arena_alloc(&p->tir.arena, sizeof(*as) * (size_t)(cap + 1));
  if (!ps || !as) return kiln_make_status(KILN_OUT_OF_MEMORY, "fuse: out of memory");
  int32_t n = 0;
  const kiln_plan_kernel_t* ks[2] = {a, b};
  for (int32_t q = 0; q < 2; ++q)
    for (int32_t i = 0; i < ks[q]->func->n_params; ++i) {
      const tir_buffer_t* t = ks[q]->func->params[i];
      if (t == drop) continue;
      bool dup = false;
      for (int32_t j = 0; j < n && !dup; ++j) dup = ps[j] == t;
      if (dup) continue;
      ps[n] = t;
      as[n++] = ks[q]->args[i];
    }
  *out_params = ps;
  *out_args = as;
  *out_n = n;
  return NULL;
}

/* |into| also computes |from|'s anchor and fused nodes. */
static kiln_status_t merge_nodes(fz_t* z, kiln_plan_kernel_t* into, const kiln_plan_kernel_t* from) {
  int32_t cap = into->n_fused_nodes + from->n_fused_nodes + 1;
  int32_t* nn = kiln_arena_alloc(&z->p->tir.arena, sizeof(int32_t) * (size_t)cap);
  if (!nn) return kiln_make_status(KILN_OUT_OF_MEMORY, "fuse: out of memory");
  int32_t n = 0;
  for (int32_t i = 0; i < into->n_fused_nodes; ++i) nn[n++] = into->fused_nodes[i];
  for (int32_t i = -1; i < from->n_fused_nodes; ++i) {
    int32_t node = i < 0 ? from->node : from->fused_nodes[i];
    bool seen = node == into->node;
    for (int32_t j = 0; j < n && !seen; ++j) seen = nn[j] == node;
    if (!seen) nn[n++] = node;
  }
  into->fused_nodes = nn;
  into->n_fused_nodes = n;
  return NULL;
}

/* Replaces kernels |a| < |b| by |nk| placed at position |at| (a or b). */
static void replace_two(kiln_plan_t* p, int32_t a, int32_t b, int32_t at,
                        const kiln_plan_kernel_t* nk) {
  kiln_plan_kernel_t* K = p->kernels;
  int32_t drop = at == a ? b : a;
  K[at] = *nk;
  memmove(&K[drop], &K[drop + 1], sizeof(*K) * (size_t)(p->n_kernels - drop - 1));
  p->n_kernels--;
}

/* ---- epilogue fusion ----------------------------------------------------- */

typedef struct epi_s {
  tir_ctx_t* c;
  const tir_buffer_t* x;     /* eliminated buffer */
  const tir_buffer_t* y;     /* consumer output */
  const nest_t* nest;        /* consumer nest */
  const tir_expr_t* f;       /* consumer value */
  const tir_expr_t* v;       /* producer value being stored (per store) */
  int64_t max_size;
  bool too_big;
} epi_t;

static const tir_expr_t* epi_load(void* user, const tir_expr_t* load) {
  (void)load;
  return ((epi_t*)user)->v;
}

static const tir_stmt_t* epi_store(void* user, const tir_stmt_t* st) {
  epi_t* E = user;
  const tir_expr_t* vals[KILN_MAX_RANK];
  for (int32_t i = 0; i < E->nest->rank; ++i) vals[i] = st->u.store.idx[i];
  /* f with v_i := e_i, then X[e...] := v. */
  const tir_expr_t* f1 = tir_substitute_expr(E->c, E->f, E->nest->rank, E->nest->var, vals);
  if (!f1) return NULL;
  E->v = st->u.store.value;
  rw_t r = {E->c, E->x, epi_load, E};
  const tir_expr_t* f2 = rw_expr(&r, f1);
  if (!f2) return NULL;
  if (expr_size(f2) > E->max_size) E->too_big = true;
  return tir_store(E->c, E->y, st->u.store.idx, f2);
}

static tir_func_t* epi_rewrite(fz_t* z, epi_t* E, const tir_func_t* f,
                               const tir_buffer_t* const* params, int32_t n_params) {
  srw_t s = {E->c, E->x, epi_store, NULL, E, false};
  const tir_stmt_t* body = srw_stmt(&s, f->body);
  if (s.fail || !body) return NULL;
  return tir_func(E->c, f->name, n_params, params, body);
}

static void logf_(fz_t* z, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(fz_t* z, const char* fmt, ...) {
  if (!z->log) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(z->log, fmt, ap);
  va_end(ap);
  fputc('\n', z->log);
}

static const char* node_name(const kiln_plan_t* p, int32_t n) {
  return n >= 0 && n < p->graph->n_nodes ? p->graph->nodes[n].name : "?";
}
static const char* node_op(const kiln_plan_t* p, int32_t n) {
  return n >= 0 && n < p->graph->n_nodes ? p->graph->nodes[n].op_type : "?";
}

/* Tries to fold the consumer of intermediate |x| into its producer. */
/* Final step shared by both fusions: simplify and verify the merged kernel
 * |nf| (a verifier failure skips the fusion, logged), keep the merged naive
 * form |nn| only if it verifies too, then replace producer |P| and consumer
 * |C| by the merged kernel at position |at|. An epilogue keeps the producer's
 * kernel record as its base; an inline keeps the consumer's. */
static kiln_status_t commit_fusion(fz_t* z, bool epilogue, int32_t P, int32_t C, int32_t at,
                                   const tir_buffer_t* X, tir_func_t* nf, tir_func_t* nn,
                                   int32_t* args, bool* done) {
  kiln_plan_t* p = z->p;
  const kiln_plan_kernel_t* kp = &p->kernels[P];
  const kiln_plan_kernel_t* kc = &p->kernels[C];
  const kiln_plan_kernel_t* base = epilogue ? kp : kc;
  const kiln_plan_kernel_t* other = epilogue ? kc : kp;
  tir_func_t* sf = tir_simplify_func(&p->tir, nf);
  KILN_RETURN_IF_ERROR(tir_ctx_status(&p->tir));
  kiln_status_t vs = tir_verify(sf);
  if (vs) {
    logf_(z, "fuse: not %s %s into %s: %s", epilogue ? "fusing" : "inlining",
          epilogue ? kc->func->name : kp->func->name, epilogue ? kp->func->name : kc->func->name,
          kiln_status_message(vs));
    kiln_status_free(vs);
    return NULL;
  }
  if (nn && (vs = tir_verify(nn))) { /* keep the naive form consistent or drop it */
    kiln_status_free(vs);
    nn = NULL;
  }
  kiln_plan_kernel_t k = *base;
  k.func = sf;
  k.naive = nn;
  k.args = args;
  k.flops = kp->flops + kc->flops;
  KILN_RETURN_IF_ERROR(merge_nodes(z, &k, other));
  if (epilogue)
    logf_(z, "fuse: epilogue %s (%s '%s') -> %s (%s '%s'), %s no longer in memory", kc->func->name,
          node_op(p, kc->node), node_name(p, kc->node), kp->func->name, node_op(p, kp->node),
          node_name(p, kp->node), X->name);
  else
    logf_(z, "fuse: inline %s (%s '%s') into %s (%s '%s'), %s no longer in memory", kp->func->name,
          node_op(p, kp->node), node_name(p, kp->node), kc->func->name, node_op(p, kc->node),
          node_name(p, kc->node), X->name);
  replace_two(p, P, C, at, &k);
  if (epilogue) z->rep->epilogues_fused++;
  else z->rep->producers_inlined++;
  *done = true;
  return NULL;
}

static kiln_status_t try_epilogue(fz_t* z, int32_t x, bool* done) {
  kiln_plan_t* p = z->p;
  *done = false;
  if (!private_intermediate(z, x)) return NULL;
  int32_t P, C;
  if (users(z, x, &P, &C) != 2) return NULL;
  if (acc_get(&z->acc, P, x) != ACC_STORE || acc_get(&z->acc, C, x) != ACC_LOAD) return NULL;
  kiln_plan_kernel_t* kp = &p->kernels[P];
  kiln_plan_kernel_t* kc = &p->kernels[C];
  const tir_buffer_t* X = param_of(p, kp, x);
  const tir_buffer_t* Xc = param_of(p, kc, x);
  if (!X || X != Xc || !kc->naive) return NULL;

  nest_t nest;
  if (!match_nest(kc->naive, &nest)) return NULL;
  const tir_buffer_t* Y = nest.store->u.store.buf;
  if (Y == X || X->rank != Y->rank) return NULL;
  for (int32_t i = 0; i < X->rank; ++i)
    if (X->shape[i] != Y->shape[i]) return NULL;
  const tir_expr_t* fval = nest.store->u.store.value;
  if (!identity_loads(fval, X, &nest) || load_count_e(fval, Y) > 0) return NULL;
  int32_t y = -1;
  for (int32_t i = 0; i < kc->func->n_params; ++i)
    if (kc->func->params[i] == Y) y = kiln_plan_root(p, kc->args[i]);
  if (y < 0) return NULL;
  /* The consumer's scheduled kernel must be only that store too. */
  for (int32_t b = 0; b < z->acc.nb; ++b)
    if ((acc_get(&z->acc, C, b) & ACC_STORE) && b != y) return NULL;
  /* The producer must not see Y, and must not write what C reads. */
  if (acc_get(&z->acc, P, y)) return NULL;
  const uint8_t* rowc = z->acc.flags + (size_t)C * (size_t)z->acc.nb;
  const uint8_t* rowp = z->acc.flags + (size_t)P * (size_t)z->acc.nb;
  for (int32_t b = 0; b < z->acc.nb; ++b)
    if (b != x && (rowc[b] & ACC_LOAD) && (rowp[b] & ACC_STORE)) return NULL;
  /* Every element of X must be stored (the memory is not zero-filled). */
  if (store_count(kp->func->body, X, 1) < tir_buffer_numel(X)) return NULL;

  /* Placement: at P when C's other inputs are ready there, else at C when
   * nothing in between touches what P reads or writes. */
  int32_t at = -1;
  uint8_t* inputs = calloc((size_t)z->acc.nb, 1);
  if (!inputs) return kiln_make_status(KILN_OUT_OF_MEMORY, "fuse: out of memory");
  for (int32_t b = 0; b < z->acc.nb; ++b) inputs[b] = (b != x && (rowc[b] & ACC_LOAD)) || b == y;
  if (!written_between(z, inputs, P, C)) {
    bool y_seen = false; /* Y read or written in between: keep order */
    for (int32_t k = P + 1; k < C; ++k) y_seen |= acc_get(&z->acc, k, y) != 0;
    if (!y_seen) at = P;
  }
  if (at < 0) {
    bool clash = false;
    for (int32_t k = P + 1; k < C && !clash; ++k)
      for (int32_t b = 0; b < z->acc.nb && !clash; ++b) {
        uint8_t f = acc_get(&z->acc, k, b);
        if (!f) continue;
        if ((rowp[b] & ACC_STORE) && b != x) clash = true; /* sees P's outputs */
        if ((rowp[b] & ACC_LOAD) && (f & ACC_STORE)) clash = true;
      }
    if (!clash) at = C;
  }
  free(inputs);
  if (at < 0) return NULL;

  const tir_buffer_t** params;
  int32_t* args;
  int32_t np;
  KILN_RETURN_IF_ERROR(merge_params(z, kp, kc, X, &params, &args, &np));
  epi_t E = {&p->tir, X, Y, &nest, fval, NULL, 4096, false};
  tir_func_t* nf = epi_rewrite(z, &E, kp->func, params, np);
  tir_func_t* nn = kp->naive ? epi_rewrite(z, &E, kp->naive, params, np) : NULL;
  KILN_RETURN_IF_ERROR(tir_ctx_status(&p->tir));
  if (!nf || E.too_big) return NULL;
  return commit_fusion(z, true, P, C, at, X, nf, nn, args, done);
}

/* ---- producer inlining --------------------------------------------------- */

typedef struct inl_s {
  tir_ctx_t* c;
  const nest_t* nest;
  const tir_expr_t* g;
} inl_t;

static const tir_expr_t* inl_load(void* user, const tir_expr_t* load) {
  inl_t* I = user;
  return tir_substitute_expr(I->c, I->g, I->nest->rank, I->nest->var, load->u.load.idx);
}

static const tir_stmt_t* keep_store(void* user, const tir_stmt_t* st) {
  (void)user;
  return st;
}

static tir_func_t* inl_rewrite(tir_ctx_t* c, inl_t* I, const tir_buffer_t* X, const tir_func_t* f,
                               const tir_buffer_t* const* params, int32_t n_params) {
  rw_t r = {c, X, inl_load, I};
  srw_t s = {c, NULL, keep_store, &r, I, false};
  const tir_stmt_t* body = srw_stmt(&s, f->body);
  if (s.fail || !body) return NULL;
  return tir_func(c, f->name, n_params, params, body);
}

/* Tries to substitute the injective producer of |x| into its consumer. */
static kiln_status_t try_inline(fz_t* z, int32_t x, bool* done) {
  kiln_plan_t* p = z->p;
  *done = false;
  if (!private_intermediate(z, x)) return NULL;
  int32_t P, C;
  if (users(z, x, &P, &C) != 2) return NULL;
  if (acc_get(&z->acc, P, x) != ACC_STORE || acc_get(&z->acc, C, x) != ACC_LOAD) return NULL;
  kiln_plan_kernel_t* kp = &p->kernels[P];
  kiln_plan_kernel_t* kc = &p->kernels[C];
  kiln_op_pattern_t pat = kiln_op_pattern(node_op(p, kp->node));
  /* An injective anchor with element-wise epilogues is still injective. */
  if (pat != KILN_PATTERN_INJECTIVE || !kp->naive) return NULL;
  const tir_buffer_t* X = param_of(p, kp, x);
  if (!X || X != param_of(p, kc, x)) return NULL;
  nest_t nest;
  if (!match_nest(kp->naive, &nest) || nest.store->u.store.buf != X) return NULL;
  /* P must be that one store (no other outputs). */
  const uint8_t* rowp = z->acc.flags + (size_t)P * (size_t)z->acc.nb;
  const uint8_t* rowc = z->acc.flags + (size_t)C * (size_t)z->acc.nb;
  for (int32_t b = 0; b < z->acc.nb; ++b) {
    if ((rowp[b] & ACC_STORE) && b != x) return NULL;
    if ((rowp[b] & ACC_LOAD) && (rowc[b] & ACC_STORE)) return NULL; /* g reads what C writes */
    /* g's inputs must still hold their values when C runs. */
    if ((rowp[b] & ACC_LOAD))
      for (int32_t k = P + 1; k < C; ++k)
        if (acc_get(&z->acc, k, b) & ACC_STORE) return NULL;
  }
  const tir_expr_t* g = nest.store->u.store.value;
  /* Profitable only when C reads each element of X about once: inlining
   * into a loop that reads X many times would recompute g each time. */
  int64_t reads = load_count(kc->func->body, X, 1);
  if (reads > 2 * tir_buffer_numel(X) || expr_size(g) > 256) return NULL;

  const tir_buffer_t** params;
  int32_t* args;
  int32_t np;
  KILN_RETURN_IF_ERROR(merge_params(z, kc, kp, X, &params, &args, &np));
  inl_t I = {&p->tir, &nest, g};
  tir_func_t* nf = inl_rewrite(&p->tir, &I, X, kc->func, params, np);
  tir_func_t* nn = kc->naive ? inl_rewrite(&p->tir, &I, X, kc->naive, params, np) : NULL;
  KILN_RETURN_IF_ERROR(tir_ctx_status(&p->tir));
  if (!nf) return NULL;
  return commit_fusion(z, false, P, C, C, X, nf, nn, args, done);
}

/* ---- driver ---------------------------------------------------------------- */

static void recompute_lifetimes(kiln_plan_t* p) {
  for (int32_t b = 0; b < p->n_buffers; ++b) p->buffers[b].first_use = p->buffers[b].last_use = -1;
  for (int32_t k = 0; k < p->n_kernels; ++k)
    for (int32_t a = 0; a < p->kernels[k].func->n_params; ++a) {
      int32_t b = kiln_plan_root(p, p->kernels[k].args[a]);
      if (p->buffers[b].first_use < 0) p->buffers[b].first_use = k;
      p->buffers[b].last_use = k;
    }
}

kiln_status_t kiln_plan_fuse(kiln_plan_t* p, kiln_fusion_report_t* report, FILE* log) {
  kiln_fusion_report_t dummy;
  if (!report) report = &dummy;
  memset(report, 0, sizeof(*report));
  if (!p) return kiln_make_status(KILN_INVALID_ARGUMENT, "fuse: NULL plan");
  fz_t z = {p, {NULL, 0, 0}, log, report};
  report->kernels_before = p->n_kernels;
  kiln_status_t s = acc_build(p, &z.acc);
  if (s) return s;
  report->bytes_before = traffic(p, &z.acc);
  bool changed = true;
  for (int32_t round = 0; changed && round < 1000; ++round) {
    changed = false;
    for (int32_t x = 0; x < p->n_buffers && !s; ++x) {
      bool done = false;
      s = try_epilogue(&z, x, &done);
      if (!s && !done) s = try_inline(&z, x, &done);
      if (!s && done) {
        changed = true;
        s = acc_build(p, &z.acc);
      }
    }
    if (s) break;
  }
  /* Each fusion is all-or-nothing, so the plan is consistent even after an
   * error (out of memory): keep its lifetimes right either way. */
  if (!s) report->bytes_saved = report->bytes_before - traffic(p, &z.acc);
  report->kernels_after = p->n_kernels;
  recompute_lifetimes(p);
  free(z.acc.flags);
  return s;
}

int32_t kiln_plan_kernel_nodes(const kiln_plan_t* p, int32_t kernel, int32_t* nodes, int32_t cap) {
  if (!p || kernel < 0 || kernel >= p->n_kernels) return 0;
  const kiln_plan_kernel_t* k = &p->kernels[kernel];
  int32_t n = 0;
  if (n < cap && nodes) nodes[n] = k->node;
  ++n;
  for (int32_t i = 0; i < k->n_fused_nodes; ++i, ++n)
    if (n < cap && nodes) nodes[n] = k->fused_nodes[i];
  return n;
}
