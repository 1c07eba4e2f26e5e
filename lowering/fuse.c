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
#include "ir/tir_analysis.h"
#include "ir/tir_visit.h"
#include "lowering/lower_custom.h"
#include "lowering/template.h"

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

/* Fused kernels beyond this many graph nodes take no more: a long chain of
 * element-wise ops splits into kernels of at most this size instead of one
 * kernel whose expression (and compile time in the C compiler, PoCL or
 * glslc, and the recursion depth of every tree walk) grows with the graph.
 * Models fuse a handful of nodes per kernel (conv + bias + residual + relu),
 * far below it. */
#define FUSE_MAX_NODES 64

/* Expression budget of a fused kernel, in tree nodes (a value read twice
 * counts twice: that is what the printers write out). An anchor with its
 * first few epilogues gets the full budget (a padded conv's value with a
 * Clip reading it four times is ~2.6k nodes in MobileNet); past that the
 * budget shrinks, because a chain of ops that each read their input twice
 * (Relu, Sigmoid) doubles the expression per node and would otherwise pack
 * 4k-node expressions into every kernel, which every later pass, printer and
 * device compiler walks in full. */
#define FUSE_FULL_BUDGET_NODES 4
#define FUSE_MAX_EXPR 4096
#define FUSE_MAX_EXPR_CHAIN 1024

/* Per kernel, the plan buffer roots it touches, sorted by root, with the
 * access flags (a sparse row: a dense kernels x buffers table is quadratic
 * in the graph). */
typedef struct ent_s {
  int32_t root;
  uint8_t flags;
} ent_t;

typedef struct row_s {
  ent_t* e;
  int32_t n;
} row_t;

/* Kernels that touched a root when their row was built. Entries go stale
 * (the kernel was fused away, or its new row lacks the root) and are
 * filtered where the list is read. */
typedef struct ilist_s {
  int32_t* v;
  int32_t n, cap;
} ilist_t;

typedef struct acc_s {
  row_t* rows;      /* [nk] by kernel position; fused-away kernels keep none */
  uint8_t* dead;    /* [nk] fused away: dropped when the plan is compacted */
  ilist_t* users;   /* [nb] kernels that load or store the root */
  ilist_t* writers; /* [nb] kernels that store it */
  int32_t nk, nb;
  /* pointer -> first parameter index, for kernels with many parameters */
  const tir_buffer_t** hkey;
  int32_t* hval;
  uint32_t hcap;
} acc_t;

static kiln_status_t oom(void) { return kiln_make_status(KILN_OUT_OF_MEMORY, "fuse: out of memory"); }

static kiln_status_t ilist_push(ilist_t* l, int32_t k) {
  if (l->n == l->cap) {
    int32_t cap = l->cap ? 2 * l->cap : 4;
    int32_t* v = realloc(l->v, sizeof(int32_t) * (size_t)cap);
    if (!v) return oom();
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = k;
  return NULL;
}

static int ent_cmp(const void* a, const void* b) {
  int32_t x = ((const ent_t*)a)->root, y = ((const ent_t*)b)->root;
  return x < y ? -1 : x > y;
}

static uint8_t row_get(const row_t* r, int32_t b) {
  int32_t lo = 0, hi = r->n;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (r->e[mid].root < b) lo = mid + 1;
    else hi = mid;
  }
  return lo < r->n && r->e[lo].root == b ? r->e[lo].flags : 0;
}

static inline uint8_t acc_get(const acc_t* a, int32_t k, int32_t b) {
  return a->dead[k] ? 0 : row_get(&a->rows[k], b);
}

typedef struct scan_s {
  acc_t* a;
  const tir_func_t* f;
  uint8_t* flags; /* per parameter index */
} scan_t;

static int32_t param_index(acc_t* a, const tir_func_t* f, const tir_buffer_t* b) {
  if (f->n_params <= 16) {
    for (int32_t i = 0; i < f->n_params; ++i)
      if (f->params[i] == b) return i;
    return -1;
  }
  uint32_t mask = a->hcap - 1;
  for (uint32_t h = (uint32_t)(((uintptr_t)b >> 4) * 2654435761u) & mask; a->hkey[h]; h = (h + 1) & mask)
    if (a->hkey[h] == b) return a->hval[h];
  return -1;
}

static bool scan_stmt(tir_visitor_t* v, const tir_stmt_t* s) {
  scan_t* c = v->user;
  if (s->kind == TIR_STORE) {
    int32_t i = param_index(c->a, c->f, s->u.store.buf);
    if (i >= 0) c->flags[i] |= ACC_STORE;
  }
  return true;
}

static bool scan_expr(tir_visitor_t* v, const tir_expr_t* e) {
  scan_t* c = v->user;
  if (e->kind == TIR_LOAD) {
    int32_t i = param_index(c->a, c->f, e->u.load.buf);
    if (i >= 0) c->flags[i] |= ACC_LOAD;
  }
  return true;
}

/* Builds kernel |k|'s row in one walk of its body (tir_func_buffer_access
 * per parameter would walk it once per parameter) and records the kernel
 * in the users / writers lists of roots |k| did not touch before. */
static kiln_status_t row_build(const kiln_plan_t* p, acc_t* a, int32_t k) {
  const tir_func_t* f = p->kernels[k].func;
  int32_t np = f->n_params;
  if (np > 16) { /* index the parameters: first index per buffer */
    uint32_t cap = 32;
    while (cap < 2u * (uint32_t)np) cap <<= 1;
    if (cap > a->hcap) {
      const tir_buffer_t** hk = realloc(a->hkey, sizeof(*hk) * cap);
      if (hk) a->hkey = hk;
      int32_t* hv = realloc(a->hval, sizeof(*hv) * cap);
      if (hv) a->hval = hv;
      if (!hk || !hv) return oom();
      a->hcap = cap;
    }
    memset(a->hkey, 0, sizeof(*a->hkey) * a->hcap);
    uint32_t mask = a->hcap - 1;
    for (int32_t i = 0; i < np; ++i) {
      const tir_buffer_t* b = f->params[i];
      uint32_t h = (uint32_t)(((uintptr_t)b >> 4) * 2654435761u) & mask;
      while (a->hkey[h] && a->hkey[h] != b) h = (h + 1) & mask;
      if (!a->hkey[h]) {
        a->hkey[h] = b;
        a->hval[h] = i;
      }
    }
  }
  uint8_t* pf = calloc((size_t)(np ? np : 1), 1);
  ent_t* e = malloc(sizeof(ent_t) * (size_t)(np ? np : 1));
  if (!pf || !e) {
    free(pf);
    free(e);
    return oom();
  }
  scan_t sc = {a, f, pf};
  tir_visitor_t v = {.user = &sc, .stmt_pre = scan_stmt, .expr_pre = scan_expr};
  tir_visit_stmt(&v, f->body);
  int32_t n = 0;
  for (int32_t i = 0; i < np; ++i) {
    uint8_t fl = pf[param_index(a, f, f->params[i])];
    /* A parameter nobody loads or stores still counts as read (conservative). */
    e[n++] = (ent_t){kiln_plan_root(p, p->kernels[k].args[i]), fl ? fl : (uint8_t)ACC_LOAD};
  }
  free(pf);
  qsort(e, (size_t)n, sizeof(ent_t), ent_cmp);
  int32_t m = 0; /* one entry per root: two parameters on one memory merge */
  for (int32_t i = 0; i < n; ++i) {
    if (m > 0 && e[m - 1].root == e[i].root) e[m - 1].flags |= e[i].flags;
    else e[m++] = e[i];
  }
  row_t old = a->rows[k];
  kiln_status_t s = NULL;
  for (int32_t i = 0; i < m && !s; ++i) {
    uint8_t was = old.e ? row_get(&old, e[i].root) : 0;
    if (!was) s = ilist_push(&a->users[e[i].root], k);
    if (!s && (e[i].flags & ACC_STORE) && !(was & ACC_STORE)) s = ilist_push(&a->writers[e[i].root], k);
  }
  free(old.e);
  a->rows[k] = (row_t){e, m};
  return s;
}

static void acc_free(acc_t* a) {
  for (int32_t k = 0; k < a->nk; ++k) free(a->rows[k].e);
  for (int32_t b = 0; b < a->nb; ++b) {
    free(a->users[b].v);
    free(a->writers[b].v);
  }
  free(a->rows);
  free(a->dead);
  free(a->users);
  free(a->writers);
  free(a->hkey);
  free(a->hval);
  memset(a, 0, sizeof(*a));
}

static kiln_status_t acc_build(const kiln_plan_t* p, acc_t* a) {
  a->nk = p->n_kernels;
  a->nb = p->n_buffers;
  a->rows = calloc((size_t)(a->nk ? a->nk : 1), sizeof(row_t));
  a->dead = calloc((size_t)(a->nk ? a->nk : 1), 1);
  a->users = calloc((size_t)(a->nb ? a->nb : 1), sizeof(ilist_t));
  a->writers = calloc((size_t)(a->nb ? a->nb : 1), sizeof(ilist_t));
  if (!a->rows || !a->dead || !a->users || !a->writers) return oom();
  for (int32_t k = 0; k < p->n_kernels; ++k) KILN_RETURN_IF_ERROR(row_build(p, a, k));
  return NULL;
}

/* A live kernel strictly between lo and hi in |l| that still has |b| with
 * any of |mask| in its row. Stale entries are dropped on the way. */
static bool any_between(const acc_t* a, ilist_t* l, int32_t b, uint8_t mask, int32_t lo, int32_t hi) {
  bool found = false;
  int32_t m = 0;
  for (int32_t i = 0; i < l->n; ++i) {
    int32_t k = l->v[i];
    uint8_t f = acc_get(a, k, b);
    if (!f) continue;
    l->v[m++] = k;
    if ((f & mask) && k > lo && k < hi) found = true;
  }
  l->n = m;
  return found;
}

/* Intermediate traffic: bytes of INTERMEDIATE roots each kernel loads plus
 * bytes it stores (a buffer written once and read by two kernels costs 3x). */
static int64_t traffic(const kiln_plan_t* p, const acc_t* a) {
  int64_t t = 0;
  for (int32_t k = 0; k < a->nk; ++k) {
    if (a->dead[k]) continue;
    const row_t* r = &a->rows[k];
    for (int32_t i = 0; i < r->n; ++i) {
      int32_t b = r->e[i].root;
      uint8_t f = r->e[i].flags;
      if (p->buffers[b].kind != KILN_PLAN_INTERMEDIATE) continue;
      int64_t bytes = tir_buffer_numel(p->buffers[b].buf) *
                      (int64_t)kiln_dtype_size(p->buffers[b].buf->dtype);
      t += bytes * (((f & ACC_LOAD) ? 1 : 0) + ((f & ACC_STORE) ? 1 : 0));
    }
  }
  return t;
}

/* ---- rewriting and counting -------------------------------------------- */

/* Rebuilds a tree with the loads of |load_buf| replaced by load_fn(load)
 * and the stores to |store_buf| by store_fn(store), each called on the node
 * already rebuilt over its rewritten children (NULL from a callback = OOM).
 * A NULL callback leaves those nodes alone. */
typedef struct rw_s {
  const tir_buffer_t* load_buf;
  const tir_expr_t* (*load_fn)(void* user, const tir_expr_t* load);
  const tir_buffer_t* store_buf;
  const tir_stmt_t* (*store_fn)(void* user, const tir_stmt_t* store);
  void* user;
} rw_t;

static const tir_expr_t* rw_load(tir_mutator_t* m, const tir_expr_t* e) {
  const rw_t* r = m->user;
  return e->kind == TIR_LOAD && e->u.load.buf == r->load_buf ? r->load_fn(r->user, e) : e;
}

static const tir_stmt_t* rw_store(tir_mutator_t* m, const tir_stmt_t* s) {
  const rw_t* r = m->user;
  return s->kind == TIR_STORE && s->u.store.buf == r->store_buf ? r->store_fn(r->user, s) : s;
}

static tir_mutator_t rw_mutator(tir_ctx_t* c, rw_t* r) {
  tir_mutator_t m = {.ctx = c, .user = r};
  if (r->load_fn) m.expr_post = rw_load;
  if (r->store_fn) m.stmt_post = rw_store;
  return m;
}

static const tir_expr_t* rw_expr(tir_ctx_t* c, rw_t* r, const tir_expr_t* e) {
  tir_mutator_t m = rw_mutator(c, r);
  return tir_mutate_expr(&m, e);
}

static const tir_stmt_t* rw_stmt(tir_ctx_t* c, rw_t* r, const tir_stmt_t* s) {
  tir_mutator_t m = rw_mutator(c, r);
  return tir_mutate_stmt(&m, s);
}

typedef struct size_s {
  int64_t n, limit;
} size_t_;

static bool count_node(tir_visitor_t* v, const tir_expr_t* e) {
  (void)e;
  size_t_* c = v->user;
  if (++c->n > c->limit) v->stop = true;
  return true;
}

/* Number of nodes of |e| as a tree (shared subtrees count each time they
 * are reached), counted up to |limit| + 1: the caller only asks whether it
 * is over the limit, and a tree with shared subtrees can be exponentially
 * larger than its memory. */
static int64_t expr_size_upto(const tir_expr_t* e, int64_t limit) {
  size_t_ c = {0, limit};
  tir_visitor_t v = {.user = &c, .expr_pre = count_node};
  tir_visit_expr(&v, e);
  return c.n;
}

/* Accesses of |buf| weighted by the iterations of their enclosing loops
 * (guards ignored: an upper bound). */
typedef struct count_s {
  const tir_buffer_t* buf;
  bool stores;  /* count stores (else loads) */
  int64_t mult; /* iterations of the loops entered */
  int64_t n;
} count_t;

static bool count_loop(tir_visitor_t* v, const tir_stmt_t* s) {
  count_t* k = v->user;
  if (s->kind == TIR_FOR) {
    /* The body is walked here so that the multiplier is scoped to it. */
    int64_t saved = k->mult;
    if (s->u.loop.extent > 0 && k->mult < (INT64_MAX / 4) / s->u.loop.extent)
      k->mult *= s->u.loop.extent;
    tir_visit_stmt(v, s->u.loop.body);
    k->mult = saved;
    return false;
  }
  if (s->kind == TIR_STORE && k->stores && s->u.store.buf == k->buf) k->n += k->mult;
  return true;
}

static bool count_load(tir_visitor_t* v, const tir_expr_t* e) {
  count_t* k = v->user;
  if (e->kind == TIR_LOAD && e->u.load.buf == k->buf) k->n += k->mult;
  return true;
}

/* Stores of |buf| in |s| (how many elements it writes, at most). */
static int64_t store_count(const tir_stmt_t* s, const tir_buffer_t* buf) {
  count_t k = {buf, true, 1, 0};
  tir_visitor_t v = {.user = &k, .stmt_pre = count_loop};
  tir_visit_stmt(&v, s);
  return k.n;
}

/* Loads of |buf| in |s| (how often a consumer reads it). */
static int64_t load_count(const tir_stmt_t* s, const tir_buffer_t* buf) {
  count_t k = {buf, false, 1, 0};
  tir_visitor_t v = {.user = &k, .stmt_pre = count_loop, .expr_pre = count_load};
  tir_visit_stmt(&v, s);
  return k.n;
}

static int64_t load_count_e(const tir_expr_t* e, const tir_buffer_t* buf) {
  count_t k = {buf, false, 1, 0};
  tir_visitor_t v = {.user = &k, .expr_pre = count_load};
  tir_visit_expr(&v, e);
  return k.n;
}

/* ---- element-wise nests ------------------------------------------------ */

/* A naive kernel of the form `for v0..vn-1 (serial): B[v0..vn-1] = f` over
 * B's shape. */
typedef struct nest_s {
  int32_t rank;
  const tir_var_t* var[KILN_MAX_RANK];
  const tir_stmt_t* store;
} nest_t;

/* |f|'s body as serial loops around one store: the loops' variables into
 * |n|, their extents into |ext|; the store, or NULL where the body is
 * another form. */
static const tir_stmt_t* nest_loops(const tir_func_t* f, nest_t* n, int64_t* ext) {
  const tir_stmt_t* s = f->body;
  n->rank = 0;
  while (s && s->kind == TIR_FOR) {
    if (n->rank >= KILN_MAX_RANK || s->u.loop.kind == TIR_LOOP_BOUND) return NULL;
    ext[n->rank] = s->u.loop.extent;
    n->var[n->rank++] = s->u.loop.var;
    s = s->u.loop.body;
  }
  if (s && s->kind == TIR_SEQ && s->u.seq.n == 1) s = s->u.seq.items[0];
  return s && s->kind == TIR_STORE ? s : NULL;
}

static bool match_nest(const tir_func_t* f, nest_t* n) {
  int64_t ext[KILN_MAX_RANK];
  const tir_stmt_t* s = nest_loops(f, n, ext);
  if (!s) return false;
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
typedef struct ident_s {
  const tir_buffer_t* buf;
  const nest_t* nest;
  bool ok;
} ident_t;

static bool ident_load(tir_visitor_t* v, const tir_expr_t* e) {
  ident_t* d = v->user;
  if (e->kind != TIR_LOAD || e->u.load.buf != d->buf) return true;
  const nest_t* n = d->nest;
  bool ok = d->buf->rank == n->rank;
  for (int32_t i = 0; i < n->rank && ok; ++i)
    ok = e->u.load.idx[i]->kind == TIR_VARREF && e->u.load.idx[i]->u.var == n->var[i];
  if (!ok) {
    d->ok = false;
    v->stop = true;
  }
  return false;
}

static bool identity_loads(const tir_expr_t* e, const tir_buffer_t* buf, const nest_t* n) {
  ident_t d = {buf, n, true};
  tir_visitor_t v = {.user = &d, .expr_pre = ident_load};
  tir_visit_expr(&v, e);
  return d.ok;
}

/* A Concat part: a naive kernel `for v0..vn-1 (serial): Y[v0 + o0, ...,
 * vn-1 + on-1] = f` over the shape of |x| (what it reads), which writes x
 * into a slice of the larger Y. Its offsets into |off| (0 where the index
 * is the variable itself). The first dim (the images, which a per-sample
 * plan steps over) is not shifted. */
static bool match_shift_nest(const tir_func_t* f, const tir_buffer_t* x, nest_t* n, int64_t* off) {
  int64_t ext[KILN_MAX_RANK];
  const tir_stmt_t* s = nest_loops(f, n, ext);
  if (!s) return false;
  const tir_buffer_t* y = s->u.store.buf;
  if (y->rank != n->rank || x->rank != n->rank || y->dtype != x->dtype) return false;
  bool shifted = false;
  for (int32_t i = 0; i < n->rank; ++i) {
    if (ext[i] != x->shape[i]) return false;
    for (int32_t j = 0; j < i; ++j)
      if (n->var[j] == n->var[i]) return false;
    const tir_expr_t* e = s->u.store.idx[i];
    const tir_expr_t* v = e;
    off[i] = 0;
    if (e->kind == TIR_BINARY && e->u.bin.op == TIR_ADD) {
      const tir_expr_t* a = e->u.bin.a;
      const tir_expr_t* b = e->u.bin.b;
      if (a->kind == TIR_INT) {
        const tir_expr_t* t = a;
        a = b;
        b = t;
      }
      if (b->kind != TIR_INT) return false;
      v = a;
      off[i] = b->u.i;
    }
    if (v->kind != TIR_VARREF || v->u.var != n->var[i]) return false;
    if (off[i] < 0 || off[i] + ext[i] > y->shape[i] || (i == 0 && off[i] != 0)) return false;
    if (off[i] == 0 && ext[i] != y->shape[i]) shifted = true; /* a slice of an unshifted dim */
    shifted |= off[i] != 0;
  }
  n->store = s;
  return shifted;
}

/* ---- the pass ---------------------------------------------------------- */

typedef struct fz_s {
  kiln_plan_t* p;
  acc_t acc;
  FILE* log;
  kiln_fusion_report_t* rep;
  uint8_t* blocked;   /* [nb] roots other code can see (precomputed): BLOCK_* */
  int32_t* node_mark; /* [graph nodes] stamp, for merge_nodes */
  int32_t stamp;
} fz_t;

/* Live kernels that touch root |b|: their count and the first two (in plan
 * order). Stale entries are dropped from the list on the way. */
static int32_t users(fz_t* z, int32_t b, int32_t* k0, int32_t* k1) {
  ilist_t* l = &z->acc.users[b];
  int32_t m = 0;
  *k0 = *k1 = -1;
  for (int32_t i = 0; i < l->n; ++i) {
    int32_t k = l->v[i];
    if (!acc_get(&z->acc, k, b)) continue;
    l->v[m++] = k;
    if (*k0 < 0 || k < *k0) {
      *k1 = *k0;
      *k0 = k;
    } else if (*k1 < 0 || k < *k1) {
      *k1 = k;
    }
  }
  l->n = m;
  return m;
}

/* Why a root is visible outside its kernels: a graph output (or an output
 * aliasing it), or a view of it that kernels use. */
enum { BLOCK_OUTPUT = 1, BLOCK_VIEW = 2 };

/* Roots that the outputs or a view make visible outside their kernels. A
 * view's users keep the view as their argument through every fusion (only
 * the eliminated root's own parameter is dropped), so this is decided once,
 * in one pass over the buffers and kernels, instead of per candidate. */
static kiln_status_t find_blocked(fz_t* z) {
  const kiln_plan_t* p = z->p;
  z->blocked = calloc((size_t)(p->n_buffers ? p->n_buffers : 1), 1);
  if (!z->blocked) return oom();
  for (int32_t o = 0; o < p->graph->n_outputs; ++o) {
    int32_t r = kiln_plan_root(p, p->outputs[o]);
    if (r >= 0) z->blocked[r] |= BLOCK_OUTPUT;
  }
  for (int32_t b = 0; b < p->n_buffers; ++b) {
    int32_t r = kiln_plan_root(p, b);
    if (b != r && r >= 0 && p->buffers[b].kind == KILN_PLAN_OUTPUT) z->blocked[r] |= BLOCK_OUTPUT;
  }
  for (int32_t k = 0; k < p->n_kernels; ++k)
    for (int32_t a = 0; a < p->kernels[k].func->n_params; ++a) {
      int32_t b = p->kernels[k].args[a], r = kiln_plan_root(p, b);
      if (b != r && r >= 0) z->blocked[r] |= BLOCK_VIEW; /* used through a view */
    }
  return NULL;
}

/* |x| is an intermediate whose memory nobody else can see. */
static bool private_intermediate(const fz_t* z, int32_t x) {
  const kiln_plan_buffer_t* xb = &z->p->buffers[x];
  return xb->kind == KILN_PLAN_INTERMEDIATE && xb->alias_of < 0 && !z->blocked[x];
}

static const tir_buffer_t* param_of(const kiln_plan_t* p, const kiln_plan_kernel_t* k,
                                    int32_t b) {
  for (int32_t i = 0; i < k->func->n_params; ++i)
    if (k->args[i] == b) return k->func->params[i];
  return NULL;
}

/* The fused kernel's parameter list: |a|'s params without |drop| (and
 * |drop2| when not NULL), then |b|'s params not yet present (nor dropped). */
static kiln_status_t merge_params(fz_t* z, const kiln_plan_kernel_t* a,
                                  const kiln_plan_kernel_t* b, const tir_buffer_t* drop,
                                  const tir_buffer_t* drop2,
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
      if (t == drop || (drop2 && t == drop2)) continue;
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

/* |into| also computes |from|'s anchor and fused nodes (kept in order, each
 * once; the stamp array makes the duplicate test O(1)). */
static kiln_status_t merge_nodes(fz_t* z, kiln_plan_kernel_t* into, const kiln_plan_kernel_t* from) {
  int32_t cap = into->n_fused_nodes + from->n_fused_nodes + 1;
  int32_t* nn = kiln_arena_alloc(&z->p->tir.arena, sizeof(int32_t) * (size_t)cap);
  if (!nn) return oom();
  int32_t nodes = z->p->graph->n_nodes;
  int32_t st = ++z->stamp;
  int32_t n = 0;
  if (into->node >= 0 && into->node < nodes) z->node_mark[into->node] = st;
  for (int32_t i = 0; i < into->n_fused_nodes; ++i) {
    nn[n++] = into->fused_nodes[i];
    if (into->fused_nodes[i] >= 0 && into->fused_nodes[i] < nodes) z->node_mark[into->fused_nodes[i]] = st;
  }
  for (int32_t i = -1; i < from->n_fused_nodes; ++i) {
    int32_t node = i < 0 ? from->node : from->fused_nodes[i];
    bool seen;
    if (node >= 0 && node < nodes) {
      seen = z->node_mark[node] == st;
      z->node_mark[node] = st;
    } else { /* not a graph node: the plain scan */
      seen = node == into->node;
      for (int32_t j = 0; j < n && !seen; ++j) seen = nn[j] == node;
    }
    if (!seen) nn[n++] = node;
  }
  into->fused_nodes = nn;
  into->n_fused_nodes = n;
  return NULL;
}

/* Replaces kernels |a| < |b| by |nk| placed at position |at| (a or b). The
 * other one is marked dead and dropped when the pass compacts the plan, so
 * kernel positions stay stable (and in plan order) while it runs. */
static kiln_status_t replace_two(fz_t* z, int32_t a, int32_t b, int32_t at,
                                 const kiln_plan_kernel_t* nk) {
  kiln_plan_t* p = z->p;
  int32_t drop = at == a ? b : a;
  p->kernels[at] = *nk;
  z->acc.dead[drop] = 1;
  free(z->acc.rows[drop].e);
  z->acc.rows[drop] = (row_t){NULL, 0};
  return row_build(p, &z->acc, at);
}

/* ---- epilogue fusion ----------------------------------------------------- */

typedef struct epi_s {
  tir_ctx_t* c;
  const tir_buffer_t* x;     /* eliminated buffer (as the consumer reads it) */
  const tir_buffer_t* y;     /* consumer output */
  const nest_t* nest;        /* consumer nest */
  const tir_expr_t* f;       /* consumer value */
  const tir_expr_t* v;       /* producer value being stored (per store) */
  int64_t max_size;
  int64_t f_loads;           /* loads of x in f (as a tree) */
  bool too_big;
  /* The producer writes x through a reshape view |xv| that only merges
   * dims (try_epilogue's view case; NULL: it writes x itself): its stores
   * go to |xv|, which becomes a view of y, and the consumer's indices are
   * the view's split back into x's dims. */
  const tir_buffer_t* xv;
  /* A Concat part (match_shift_nest): the consumer stores x's element at
   * its index plus these offsets into Y; NULL: at its own index. */
  const int64_t* off;
} epi_t;

static const tir_expr_t* epi_load(void* user, const tir_expr_t* load) {
  (void)load;
  return ((epi_t*)user)->v;
}

/* SiLU / Swish: f32 a * sigmoid(a) (either order) becomes silu(a), which
 * computes the same two roundings with |a| once. Fused into the kernel
 * before it, |a| is that kernel's value (a depthwise conv's sum, a GEMM
 * accumulator), which the product would otherwise evaluate twice. */
static const tir_expr_t* silu_post(tir_mutator_t* m, const tir_expr_t* e) {
  if (e->kind != TIR_BINARY || e->u.bin.op != TIR_MUL || e->dtype != KILN_DTYPE_F32) return e;
  for (int side = 0; side < 2; ++side) {
    const tir_expr_t* s = side ? e->u.bin.a : e->u.bin.b;
    const tir_expr_t* a = side ? e->u.bin.b : e->u.bin.a;
    if (s->kind == TIR_CALL && s->u.call.fn == TIR_SIGMOID && s->dtype == KILN_DTYPE_F32 &&
        a->dtype == KILN_DTYPE_F32 && tir_expr_equal(s->u.call.args[0], a))
      return tir_call(m->ctx, TIR_SILU, 1, a, NULL, NULL);
  }
  return e;
}

static const tir_expr_t* fold_silu(tir_ctx_t* c, const tir_expr_t* e) {
  tir_mutator_t m = {.ctx = c, .expr_post = silu_post};
  return tir_mutate_expr(&m, e);
}

/* Whether |v| is |x| reshaped by merging runs of consecutive dims (each of
 * v's dims the product of the next run of x's; dims of 1 anywhere). */
static bool merges_dims(const tir_buffer_t* x, const tir_buffer_t* v) {
  if (x->dtype != v->dtype || tir_buffer_numel(x) != tir_buffer_numel(v)) return false;
  int32_t i = 0;
  for (int32_t j = 0; j < v->rank; ++j) {
    int64_t prod = 1;
    while (i < x->rank && prod * x->shape[i] <= v->shape[j] && v->shape[j] % (prod * x->shape[i]) == 0 &&
           (prod < v->shape[j] || x->shape[i] == 1))
      prod *= x->shape[i++];
    if (prod != v->shape[j]) return false;
  }
  while (i < x->rank && x->shape[i] == 1) ++i;
  return i == x->rank;
}

/* x's indices of the element at |vidx| of its view |v| (merges_dims): each
 * view index split into its run of x's dims, (vi / inner) % extent. */
static void split_index(tir_ctx_t* c, const tir_buffer_t* x, const tir_buffer_t* v, const tir_expr_t* const* vidx,
                        const tir_expr_t** out) {
  int32_t i = 0;
  for (int32_t j = 0; j < v->rank; ++j) {
    int32_t i0 = i;
    int64_t prod = 1;
    while (i < x->rank && prod * x->shape[i] <= v->shape[j] && v->shape[j] % (prod * x->shape[i]) == 0 &&
           (prod < v->shape[j] || x->shape[i] == 1))
      prod *= x->shape[i++];
    int64_t inner = prod;
    for (int32_t k = i0; k < i; ++k) {
      inner /= x->shape[k];
      const tir_expr_t* e = vidx[j];
      if (x->shape[k] == 1) e = tir_int(c, 0);
      else if (k == i0 && inner == 1) e = vidx[j];
      else {
        if (inner > 1) e = tir_bin(c, TIR_FLOORDIV, e, tir_int(c, inner));
        if (k > i0) e = tir_bin(c, TIR_FLOORMOD, e, tir_int(c, x->shape[k]));
      }
      out[k] = e;
    }
  }
  for (; i < x->rank; ++i) out[i] = tir_int(c, 0);
}

static const tir_stmt_t* epi_store(void* user, const tir_stmt_t* st) {
  epi_t* E = user;
  /* The fused value holds f_loads copies of the stored one: when that alone
   * passes the limit, the fusion is refused without building it (merging
   * two kernels already near the limit would build trees of millions of
   * nodes only to throw them away). The store is kept; nothing uses it. */
  if (E->too_big) return st;
  if (E->f_loads * expr_size_upto(st->u.store.value, E->max_size) > E->max_size) {
    E->too_big = true;
    return st;
  }
  const tir_expr_t* vals[KILN_MAX_RANK];
  if (E->xv) split_index(E->c, E->x, E->xv, st->u.store.idx, vals);
  else
    for (int32_t i = 0; i < E->nest->rank; ++i) vals[i] = st->u.store.idx[i];
  /* f with v_i := e_i, then X[e...] := v. */
  const tir_expr_t* f1 = tir_substitute_expr(E->c, E->f, E->nest->rank, E->nest->var, vals);
  if (!f1) return NULL;
  E->v = st->u.store.value;
  rw_t r = {.load_buf = E->x, .load_fn = epi_load, .user = E};
  const tir_expr_t* f2 = fold_silu(E->c, rw_expr(E->c, &r, f1));
  if (!f2) return NULL;
  if (expr_size_upto(f2, E->max_size) > E->max_size) E->too_big = true;
  if (E->off) {
    const tir_expr_t* idx[KILN_MAX_RANK];
    for (int32_t i = 0; i < E->nest->rank; ++i)
      idx[i] = E->off[i] ? tir_add(E->c, st->u.store.idx[i], tir_int(E->c, E->off[i])) : st->u.store.idx[i];
    return tir_store(E->c, E->y, idx, f2);
  }
  return tir_store(E->c, E->xv ? E->xv : E->y, st->u.store.idx, f2);
}

static tir_func_t* epi_rewrite(fz_t* z, epi_t* E, const tir_func_t* f,
                               const tir_buffer_t* const* params, int32_t n_params) {
  rw_t r = {.store_buf = E->xv ? E->xv : E->x, .store_fn = epi_store, .user = E};
  const tir_stmt_t* body = rw_stmt(E->c, &r, f->body);
  if (!body) return NULL;
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
  KILN_RETURN_IF_ERROR(replace_two(z, P, C, at, &k));
  if (epilogue) z->rep->epilogues_fused++;
  else z->rep->producers_inlined++;
  *done = true;
  return NULL;
}

/* A plugin kernel whose op declares epilogue takes an element-wise consumer
 * of its output 0 the same way, when the consumer's value depends on that
 * element and one-element constants only: the plugin's body is source, its
 * stores are unknown to kiln, so the value goes to the plugin's
 * KILN_EPILOGUE0(v) as an expression of v (lowering/lower_custom.h), and
 * the consumer's output takes output 0's place. */
static kiln_status_t try_custom_epilogue(fz_t* z, int32_t x, int32_t P, int32_t C, bool* done) {
  kiln_plan_t* p = z->p;
  const kiln_plan_kernel_t* kp = &p->kernels[P];
  const kiln_plan_kernel_t* kc = &p->kernels[C];
  const kiln_custom_instance_t* ci = kp->custom;
  if (kc->custom || !ci->op->epilogue || kp->host != kc->host || !kc->naive || ci->n_epi == KILN_CUSTOM_MAX_EPI)
    return NULL;
  if (kp->n_fused_nodes + kc->n_fused_nodes + 2 > FUSE_MAX_NODES) return NULL;
  if (acc_get(&z->acc, C, x) != ACC_LOAD) return NULL;
  const int32_t a0 = ci->out_arg[0];
  if (a0 < 0 || kiln_plan_root(p, kp->args[a0]) != x) return NULL;
  for (int32_t i = 0; i < kp->func->n_params; ++i) /* output 0 and nothing else of the plugin's */
    if (i != a0 && kiln_plan_root(p, kp->args[i]) == x) return NULL;
  const tir_buffer_t* X = kp->func->params[a0];
  if (param_of(p, kc, x) != X) return NULL;
  nest_t nest;
  if (!match_nest(kc->naive, &nest)) return NULL;
  const tir_buffer_t* Y = nest.store->u.store.buf;
  if (Y == X || Y->dtype != X->dtype || X->rank != Y->rank) return NULL;
  for (int32_t i = 0; i < X->rank; ++i)
    if (X->shape[i] != Y->shape[i]) return NULL;
  const tir_expr_t* fval = nest.store->u.store.value;
  if (!identity_loads(fval, X, &nest) || load_count_e(fval, Y) > 0) return NULL;
  int32_t y = -1, y_arg = -1;
  for (int32_t i = 0; i < kc->func->n_params; ++i)
    if (kc->func->params[i] == Y) y = kiln_plan_root(p, y_arg = kc->args[i]);
  if (y < 0) return NULL;
  const row_t* rowc = &z->acc.rows[C];
  for (int32_t i = 0; i < rowc->n; ++i)
    if ((rowc->e[i].flags & ACC_STORE) && rowc->e[i].root != y) return NULL;
  /* the fused kernel runs at P: nothing in between may see Y */
  if (acc_get(&z->acc, P, y) || any_between(&z->acc, &z->acc.users[y], y, ACC_LOAD | ACC_STORE, P, C))
    return NULL;
  const tir_expr_t* g;
  const tir_var_t* var;
  if (!kiln_custom_epilogue_expr(&p->tir, p, kc, X, fval, nest.rank, nest.var, &g, &var)) return NULL;
  KILN_RETURN_IF_ERROR(tir_ctx_status(&p->tir));
  if (!g) return oom();
  if (expr_size_upto(g, FUSE_MAX_EXPR) > FUSE_MAX_EXPR) return NULL; /* one step, printed as one function */
  const int32_t np = kp->func->n_params;
  kiln_custom_instance_t* nci = kiln_arena_alloc(&p->tir.arena, sizeof *nci);
  const tir_buffer_t** params = kiln_arena_alloc(&p->tir.arena, sizeof(*params) * (size_t)np);
  int32_t* args = kiln_arena_alloc(&p->tir.arena, sizeof(*args) * (size_t)np);
  if (!nci || !params || !args) return oom();
  *nci = *ci;
  nci->epi_expr[nci->n_epi] = g;
  nci->epi_var[nci->n_epi++] = var;
  for (int32_t i = 0; i < np; ++i) {
    params[i] = i == a0 ? Y : kp->func->params[i];
    args[i] = i == a0 ? y_arg : kp->args[i];
  }
  tir_func_t* nf = tir_func(&p->tir, kp->func->name, np, params, kp->func->body);
  KILN_RETURN_IF_ERROR(tir_ctx_status(&p->tir));
  kiln_plan_kernel_t k = *kp;
  k.func = nf;
  k.naive = nf;
  k.args = args;
  k.custom = nci;
  k.flops = kp->flops + kc->flops;
  KILN_RETURN_IF_ERROR(merge_nodes(z, &k, kc));
  logf_(z, "fuse: epilogue %s (%s '%s') -> plugin kernel %s (%s '%s'), %s no longer in memory", kc->func->name,
        node_op(p, kc->node), node_name(p, kc->node), kp->func->name, node_op(p, kp->node), node_name(p, kp->node),
        X->name);
  KILN_RETURN_IF_ERROR(replace_two(z, P, C, P, &k));
  z->rep->epilogues_fused++;
  *done = true;
  return NULL;
}

/* The view case of an epilogue (GPU plans): the producer |kp| writes
 * intermediate |x| only through a view that merges dims (a 1x1 conv's GEMM
 * storing [N][M][H*W] into [N][M][H][W]) and the consumer |kc| reads |x|
 * itself. *out_vb: the view's plan buffer, *out_xv its tir buffer. */
static bool view_case(const fz_t* z, int32_t x, const kiln_plan_kernel_t* kp, const kiln_plan_kernel_t* kc,
                      int32_t* out_vb, const tir_buffer_t** out_xv) {
  const kiln_plan_t* p = z->p;
  const kiln_plan_buffer_t* xb = &p->buffers[x];
  if (p->target != KILN_TARGET_CLASS_GPU || xb->kind != KILN_PLAN_INTERMEDIATE || xb->alias_of >= 0 ||
      z->blocked[x] != BLOCK_VIEW)
    return false;
  int32_t vb = -1, j = -1;
  for (int32_t i = 0; i < kp->func->n_params; ++i)
    if (kiln_plan_root(p, kp->args[i]) == x) {
      if (vb >= 0 || kp->args[i] == x) return false;
      vb = kp->args[i], j = i;
    }
  if (vb < 0 || p->buffers[vb].alias_of != x || p->buffers[vb].kind != KILN_PLAN_TEMP) return false;
  for (int32_t i = 0; i < kc->func->n_params; ++i)
    if (kiln_plan_root(p, kc->args[i]) == x && kc->args[i] != x) return false;
  const tir_buffer_t* xv = kp->func->params[j];
  if (!merges_dims(xb->buf, xv)) return false;
  *out_vb = vb;
  *out_xv = xv;
  return true;
}

static kiln_status_t try_epilogue(fz_t* z, int32_t x, bool* done) {
  kiln_plan_t* p = z->p;
  *done = false;
  const bool priv = private_intermediate(z, x);
  if (!priv && z->blocked[x] != BLOCK_VIEW) return NULL;
  int32_t P, C;
  if (users(z, x, &P, &C) != 2) return NULL;
  if (p->kernels[P].custom) return priv ? try_custom_epilogue(z, x, P, C, done) : NULL;
  if (acc_get(&z->acc, P, x) != ACC_STORE || acc_get(&z->acc, C, x) != ACC_LOAD) return NULL;
  kiln_plan_kernel_t* kp = &p->kernels[P];
  kiln_plan_kernel_t* kc = &p->kernels[C];
  if (kp->n_fused_nodes + kc->n_fused_nodes + 2 > FUSE_MAX_NODES) return NULL;
  if (kp->custom || kc->custom) return NULL; /* a plugin's source, not tensor IR */
  if (kp->host != kc->host) return NULL; /* one runs on the CPU, the other on the GPU */
  /* a GPU's GEMM / conv kernel is a template's where its epilogue is one a
   * template prints: another consumer is not worth the printed kernel */
  if (p->target == KILN_TARGET_CLASS_GPU && !kp->host && !kiln_template_epilogue_fits(p, P, C)) return NULL;
  int32_t vb = -1;
  const tir_buffer_t* xv = NULL;
  if (!priv && !view_case(z, x, kp, kc, &vb, &xv)) return NULL;
  const tir_buffer_t* X = param_of(p, kc, x);
  if (!X || (priv && param_of(p, kp, x) != X) || !kc->naive) return NULL;

  nest_t nest;
  /* A Concat part's copy (CPU plans): the producer stores into Y's slice
   * directly, so the Concat's copy of |x| is gone (SqueezeNet's Fire
   * modules: both expand convs write the concatenation). */
  int64_t shift[KILN_MAX_RANK];
  bool shifted = false;
  if (!match_nest(kc->naive, &nest)) {
    if (xv || p->target != KILN_TARGET_CLASS_CPU || !match_shift_nest(kc->naive, X, &nest, shift)) return NULL;
    shifted = true;
  }
  const tir_buffer_t* Y = nest.store->u.store.buf;
  if (Y == X || X->rank != Y->rank || (xv && Y->dtype != xv->dtype)) return NULL;
  for (int32_t i = 0; i < X->rank && !shifted; ++i)
    if (X->shape[i] != Y->shape[i]) return NULL;
  const tir_expr_t* fval = nest.store->u.store.value;
  if (!identity_loads(fval, X, &nest) || load_count_e(fval, Y) > 0) return NULL;
  int32_t y = -1;
  for (int32_t i = 0; i < kc->func->n_params; ++i)
    if (kc->func->params[i] == Y) y = kiln_plan_root(p, kc->args[i]);
  if (y < 0) return NULL;
  /* the view becomes one of y: y must be a plain intermediate */
  if (xv && (p->buffers[y].kind != KILN_PLAN_INTERMEDIATE || p->buffers[y].alias_of >= 0 ||
             (z->blocked[y] & BLOCK_OUTPUT)))
    return NULL;
  /* The consumer's scheduled kernel must be only that store too. */
  const row_t* rowc = &z->acc.rows[C];
  const row_t* rowp = &z->acc.rows[P];
  for (int32_t i = 0; i < rowc->n; ++i)
    if ((rowc->e[i].flags & ACC_STORE) && rowc->e[i].root != y) return NULL;
  /* The producer must not see Y, and must not write what C reads. */
  if (acc_get(&z->acc, P, y)) return NULL;
  for (int32_t i = 0; i < rowc->n; ++i) {
    int32_t b = rowc->e[i].root;
    if (b != x && (rowc->e[i].flags & ACC_LOAD) && (row_get(rowp, b) & ACC_STORE)) return NULL;
  }
  /* Every element of X must be stored (the memory is not zero-filled). */
  if (store_count(kp->func->body, xv ? xv : X) < tir_buffer_numel(X)) return NULL;

  /* Placement: at P when C's other inputs are ready there (nothing in
   * between writes them or Y), else at C when nothing in between touches
   * what P reads or writes. Asked of the roots' writer and user lists, not
   * of every kernel in between. */
  int32_t at = -1;
  bool written = any_between(&z->acc, &z->acc.writers[y], y, ACC_STORE, P, C);
  for (int32_t i = 0; i < rowc->n && !written; ++i) {
    int32_t b = rowc->e[i].root;
    if (b != x && (rowc->e[i].flags & ACC_LOAD))
      written = any_between(&z->acc, &z->acc.writers[b], b, ACC_STORE, P, C);
  }
  if (!written) {
    /* Y read or written in between: keep order */
    bool y_seen = any_between(&z->acc, &z->acc.users[y], y, ACC_LOAD | ACC_STORE, P, C);
    if (!y_seen) at = P;
  }
  if (at < 0) {
    bool clash = false;
    for (int32_t i = 0; i < rowp->n && !clash; ++i) {
      int32_t b = rowp->e[i].root;
      uint8_t f = rowp->e[i].flags;
      if ((f & ACC_STORE) && b != x) /* sees P's outputs */
        clash = any_between(&z->acc, &z->acc.users[b], b, ACC_LOAD | ACC_STORE, P, C);
      if (!clash && (f & ACC_LOAD))
        clash = any_between(&z->acc, &z->acc.writers[b], b, ACC_STORE, P, C);
    }
    if (!clash) at = C;
  }
  if (at < 0) return NULL;

  const tir_buffer_t** params;
  int32_t* args;
  int32_t np;
  /* the view case drops y's own parameter too: the producer's stores go
   * to the view, which becomes a view of y */
  KILN_RETURN_IF_ERROR(merge_params(z, kp, kc, X, xv ? Y : NULL, &params, &args, &np));
  int32_t nodes = kp->n_fused_nodes + kc->n_fused_nodes + 2;
  int64_t budget = nodes <= FUSE_FULL_BUDGET_NODES ? FUSE_MAX_EXPR : FUSE_MAX_EXPR_CHAIN;
  epi_t E = {&p->tir, X, Y, &nest, fval, NULL, budget, load_count_e(fval, X), false, xv, shifted ? shift : NULL};
  tir_func_t* nf = epi_rewrite(z, &E, kp->func, params, np);
  tir_func_t* nn = kp->naive ? epi_rewrite(z, &E, kp->naive, params, np) : NULL;
  KILN_RETURN_IF_ERROR(tir_ctx_status(&p->tir));
  if (!nf || E.too_big) return NULL;
  if (vb >= 0) p->buffers[vb].alias_of = y; /* before the fused kernel's row is built */
  kiln_status_t s = commit_fusion(z, true, P, C, at, X, nf, nn, args, done);
  if (vb >= 0 && !*done) p->buffers[vb].alias_of = x;
  if (vb >= 0 && *done) z->blocked[y] |= BLOCK_VIEW;
  return s;
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

static tir_func_t* inl_rewrite(tir_ctx_t* c, inl_t* I, const tir_buffer_t* X, const tir_func_t* f,
                               const tir_buffer_t* const* params, int32_t n_params) {
  rw_t r = {.load_buf = X, .load_fn = inl_load, .user = I};
  const tir_stmt_t* body = rw_stmt(c, &r, f->body);
  if (!body) return NULL;
  return tir_func(c, f->name, n_params, params, body);
}

/* |g| is a copy of one element whose last index is the nest's innermost
 * variable (a Transpose or Reshape that keeps the contiguous dim): inlined
 * into a consumer that reads X many times (a GEMM reading its L in place,
 * once per N tile) it costs index arithmetic only, and reads rows as X
 * would. */
static bool inner_copy(const tir_expr_t* g, const nest_t* n) {
  if (g->kind != TIR_LOAD || n->rank < 1) return false;
  const tir_buffer_t* b = g->u.load.buf;
  const tir_expr_t* last = b->rank > 0 ? g->u.load.idx[b->rank - 1] : NULL;
  return last && last->kind == TIR_VARREF && last->u.var == n->var[n->rank - 1] && b->shape[b->rank - 1] > 1;
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
  if (kp->n_fused_nodes + kc->n_fused_nodes + 2 > FUSE_MAX_NODES) return NULL;
  if (kp->custom || kc->custom) return NULL; /* a plugin's source, not tensor IR */
  if (kp->host != kc->host) return NULL; /* one runs on the CPU, the other on the GPU */
  /* a GPU's GEMM template reads its operands from memory: a producer
   * inlined into its kernel would leave the printed GEMM */
  if (p->target == KILN_TARGET_CLASS_GPU && !kc->host && kiln_template_gemm_candidate(p, C)) return NULL;
  kiln_op_pattern_t pat = kiln_op_pattern(node_op(p, kp->node));
  /* An injective anchor with element-wise epilogues is still injective. */
  if (pat != KILN_PATTERN_INJECTIVE || !kp->naive) return NULL;
  const tir_buffer_t* X = param_of(p, kp, x);
  if (!X || X != param_of(p, kc, x)) return NULL;
  nest_t nest;
  if (!match_nest(kp->naive, &nest) || nest.store->u.store.buf != X) return NULL;
  /* P must be that one store (no other outputs). */
  const row_t* rowp = &z->acc.rows[P];
  const row_t* rowc = &z->acc.rows[C];
  for (int32_t i = 0; i < rowp->n; ++i) {
    int32_t b = rowp->e[i].root;
    uint8_t f = rowp->e[i].flags;
    if ((f & ACC_STORE) && b != x) return NULL;
    if ((f & ACC_LOAD) && (row_get(rowc, b) & ACC_STORE)) return NULL; /* g reads what C writes */
    /* g's inputs must still hold their values when C runs. */
    if ((f & ACC_LOAD) && any_between(&z->acc, &z->acc.writers[b], b, ACC_STORE, P, C)) return NULL;
  }
  const tir_expr_t* g = nest.store->u.store.value;
  /* Profitable only when C reads each element of X about once: inlining
   * into a loop that reads X many times would recompute g each time. */
  int64_t reads = load_count(kc->func->body, X);
  if ((reads > 2 * tir_buffer_numel(X) && !inner_copy(g, &nest)) || expr_size_upto(g, 256) > 256) return NULL;

  const tir_buffer_t** params;
  int32_t* args;
  int32_t np;
  KILN_RETURN_IF_ERROR(merge_params(z, kc, kp, X, NULL, &params, &args, &np));
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

/* Drops the kernels fused away, keeping the others in order. */
static void compact(kiln_plan_t* p, const acc_t* a) {
  if (!a->dead) return;
  int32_t m = 0;
  for (int32_t k = 0; k < p->n_kernels && k < a->nk; ++k)
    if (!a->dead[k]) p->kernels[m++] = p->kernels[k];
  p->n_kernels = m;
}

kiln_status_t kiln_plan_fuse(kiln_plan_t* p, kiln_fusion_report_t* report, FILE* log) {
  kiln_fusion_report_t dummy;
  if (!report) report = &dummy;
  memset(report, 0, sizeof(*report));
  if (!p) return kiln_make_status(KILN_INVALID_ARGUMENT, "fuse: NULL plan");
  fz_t z;
  memset(&z, 0, sizeof z);
  z.p = p;
  z.log = log;
  z.rep = report;
  report->kernels_before = p->n_kernels;
  /* Bookkeeping is per fusion proportional to the two kernels involved
   * (their rows, and the user lists of the roots they touch), so a graph of
   * n element-wise nodes fuses in about linear time. */
  kiln_status_t s = acc_build(p, &z.acc);
  if (!s) s = find_blocked(&z);
  if (!s && !(z.node_mark = calloc((size_t)(p->graph->n_nodes + 1), sizeof(int32_t)))) s = oom();
  if (s) {
    acc_free(&z.acc);
    free(z.blocked);
    free(z.node_mark);
    return s;
  }
  report->bytes_before = traffic(p, &z.acc);
  bool changed = true;
  for (int32_t round = 0; changed && round < 1000; ++round) {
    changed = false;
    for (int32_t x = 0; x < p->n_buffers && !s; ++x) {
      bool done = false;
      s = try_epilogue(&z, x, &done);
      if (!s && !done) s = try_inline(&z, x, &done);
      if (!s && done) changed = true;
    }
    if (s) break;
  }
  /* Each fusion is all-or-nothing, so the plan is consistent even after an
   * error (out of memory): keep its lifetimes right either way. */
  if (!s) report->bytes_saved = report->bytes_before - traffic(p, &z.acc);
  compact(p, &z.acc);
  if (!s) s = kiln_plan_fold_slices(p, NULL);
  report->kernels_after = p->n_kernels;
  recompute_lifetimes(p);
  acc_free(&z.acc);
  free(z.blocked);
  free(z.node_mark);
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
