/* The range program's kernels in fast loop nests (see plan_seq_kern.h):
 * three rewrites of the unified plain nests, each a separate walk (the
 * GEMM's inner loops must still be plain when it is matched). */
#include "lowering/plan_seq_kern.h"

#include <stdio.h>
#include <string.h>

#include "ir/tir_analysis.h"
#include "ir/tir_visit.h"

/* Lanes of a reduction's partials and of a split map loop: what the
 * static lowering's reductions use (the printer cuts a 16-wide loop into
 * the CPU's vectors). */
enum { LANES = 16, MR_CAP = 14 };

#define MAX_PACKS 8

/* A constant B of a GEMM laid out in column panels ([N/nr][K][nr]: each
 * tile's kc x nr panel one contiguous run, as nn_pack_const lays out the
 * static GEMM's), committed when the kernel passes the verifier. */
typedef struct pack_s {
  int32_t param;            /* the kernel parameter */
  const tir_buffer_t* to;   /* its buffer in the packed layout */
  int64_t K, N, nr;
} pack_t;

typedef struct kx_s {
  tir_ctx_t* c;
  int32_t lanes, regs;
  int32_t gemms, reductions, maps;
  int64_t loop_limit; /* GPU: loop iterations per invocation (0: any) */
  int32_t split, over_limit; /* GEMMs split under it, and left above it */
  int32_t nests;             /* plain nests made parallel (GPU) */
  const kiln_plan_t* plan; /* NULL: no constants packed */
  int32_t kernel;
  const tir_func_t* f;
  pack_t packs[MAX_PACKS];
  int32_t npacks;
} kx_t;

/* ---- analysis ------------------------------------------------------------ */

typedef struct mention_s {
  const tir_var_t* v;
  const tir_buffer_t* b;
  bool found;
} mention_t;

static bool mention_pre(tir_visitor_t* vis, const tir_expr_t* e) {
  mention_t* m = vis->user;
  if ((m->v && e->kind == TIR_VARREF && e->u.var == m->v) || (m->b && e->kind == TIR_LOAD && e->u.load.buf == m->b)) {
    m->found = true;
    vis->stop = true;
  }
  return true;
}

/* Whether |e| reads variable |v| (or loads buffer |b|). */
static bool mentions(const tir_expr_t* e, const tir_var_t* v, const tir_buffer_t* b) {
  mention_t m = {v, b, false};
  tir_visitor_t vis = {.user = &m, .expr_pre = mention_pre};
  tir_visit_expr(&vis, e);
  return m.found;
}

/* e == k*v + (terms without v) with a constant k (the printer's rule for
 * a vector access, targets/cfamily/printer_vec.c). */
static bool var_coef(const tir_expr_t* e, const tir_var_t* v, int64_t* k) {
  if (!mentions(e, v, NULL)) {
    *k = 0;
    return true;
  }
  if (e->kind == TIR_VARREF) {
    *k = 1;
    return true;
  }
  if (e->kind == TIR_CAST && e->dtype == KILN_DTYPE_I64) return var_coef(e->u.cast.value, v, k);
  if (e->kind != TIR_BINARY) return false;
  int64_t ka, kb;
  const tir_expr_t *a = e->u.bin.a, *b = e->u.bin.b;
  switch (e->u.bin.op) {
    case TIR_ADD:
    case TIR_SUB:
      if (!var_coef(a, v, &ka) || !var_coef(b, v, &kb)) return false;
      *k = e->u.bin.op == TIR_ADD ? ka + kb : ka - kb;
      return true;
    case TIR_MUL:
      if (b->kind == TIR_INT && var_coef(a, v, &ka)) return (*k = ka * b->u.i), true;
      if (a->kind == TIR_INT && var_coef(b, v, &kb)) return (*k = kb * a->u.i), true;
      return false;
    default: return false;
  }
}

/* How far an access moves in memory per step of |v| (elements); false
 * when it is not affine in |v| with a constant step. */
static bool access_step(const tir_buffer_t* b, const tir_expr_t* const* idx, const tir_var_t* v, int64_t* step) {
  int64_t t = 0;
  for (int32_t d = 0; d < b->rank; ++d) {
    int64_t k;
    if (!var_coef(idx[d], v, &k)) return false;
    t += k * b->strides[d];
  }
  *step = t;
  return true;
}

static bool same_idx(const tir_buffer_t* b, const tir_expr_t* const* x, const tir_expr_t* const* y) {
  for (int32_t d = 0; d < b->rank; ++d)
    if (!tir_expr_equal(x[d], y[d])) return false;
  return true;
}

#define MAX_STORES 8

/* The stores of a loop body whose iterations are to run in another order
 * (or as vector lanes) along |v|, and the loads that must allow it. */
typedef struct deps_s {
  const tir_var_t* v;
  const tir_buffer_t* skip; /* loads the caller handles itself (a GEMM's row) */
  const tir_buffer_t* wb[MAX_STORES];
  const tir_expr_t* const* wi[MAX_STORES];
  int32_t nw;
  bool ok;
} deps_t;

/* A load is fine when it reads a buffer the body writes only at the very
 * element stored (read-modify-write of one element per iteration), or
 * moves by 0 or 1 element per step of |v| (a splat or a vector load). */
static bool deps_pre(tir_visitor_t* vis, const tir_expr_t* e) {
  deps_t* D = vis->user;
  if (e->kind != TIR_LOAD || e->u.load.buf == D->skip) return true;
  for (int32_t w = 0; w < D->nw; ++w)
    if (e->u.load.buf == D->wb[w]) {
      if (!same_idx(D->wb[w], e->u.load.idx, D->wi[w])) D->ok = false;
      return true;
    }
  int64_t s;
  if (!access_step(e->u.load.buf, e->u.load.idx, D->v, &s) || (s != 0 && s != 1)) D->ok = false;
  return true;
}

static bool deps_expr(deps_t* D, const tir_expr_t* e) {
  tir_visitor_t vis = {.user = D, .expr_pre = deps_pre};
  tir_visit_expr(&vis, e);
  return D->ok;
}

/* Collects the stores of |s| (stores and sequences of them only) into D:
 * each must be contiguous in D->v. */
static bool collect_stores(deps_t* D, const tir_stmt_t* s) {
  if (s->kind == TIR_SEQ) {
    for (int32_t i = 0; i < s->u.seq.n; ++i)
      if (!collect_stores(D, s->u.seq.items[i])) return false;
    return true;
  }
  if (s->kind != TIR_STORE || D->nw == MAX_STORES || s->u.store.buf == D->skip) return false;
  int64_t step;
  if (!access_step(s->u.store.buf, s->u.store.idx, D->v, &step) || step != 1) return false;
  D->wb[D->nw] = s->u.store.buf;
  D->wi[D->nw++] = s->u.store.idx;
  return true;
}

/* The loads of every store's index and value in |s| (collected). */
static bool deps_stmt(deps_t* D, const tir_stmt_t* s) {
  if (s->kind == TIR_SEQ) {
    for (int32_t i = 0; i < s->u.seq.n; ++i)
      if (!deps_stmt(D, s->u.seq.items[i])) return false;
    return true;
  }
  for (int32_t d = 0; d < s->u.store.buf->rank; ++d)
    if (!deps_expr(D, s->u.store.idx[d])) return false;
  return deps_expr(D, s->u.store.value);
}

static bool same_extent(const tir_stmt_t* a, const tir_stmt_t* b) {
  if (a->u.loop.extent != b->u.loop.extent) return false;
  if (!a->u.loop.dyn_extent || !b->u.loop.dyn_extent) return !a->u.loop.dyn_extent && !b->u.loop.dyn_extent;
  return tir_expr_equal(a->u.loop.dyn_extent, b->u.loop.dyn_extent);
}

/* ---- building blocks ------------------------------------------------------ */

static const tir_expr_t* I(kx_t* X, int64_t v) { return tir_int(X->c, v); }
static const tir_expr_t* V(kx_t* X, const tir_var_t* v) { return tir_ref(X->c, v); }
static const tir_expr_t* ADD(kx_t* X, const tir_expr_t* a, const tir_expr_t* b) { return tir_add(X->c, a, b); }
static const tir_expr_t* MULC(kx_t* X, const tir_expr_t* a, int64_t k) { return tir_mul(X->c, a, I(X, k)); }

static const tir_var_t* var2(kx_t* X, const char* a, const char* b) {
  char nm[96];
  snprintf(nm, sizeof nm, "%s%s", a, b);
  return tir_var(X->c, nm);
}

/* A loop like |L| (the same static or run-time extent) over |v|. */
static const tir_stmt_t* loop_like(kx_t* X, const tir_stmt_t* L, const tir_var_t* v, tir_loop_kind_t k,
                                   const tir_stmt_t* body) {
  if (L->u.loop.dyn_extent) return tir_for_dyn(X->c, v, L->u.loop.extent, L->u.loop.dyn_extent, k, body);
  return tir_for(X->c, v, L->u.loop.extent, k, body);
}

/* The pieces a rest of fewer than |t| iterations runs in: the largest
 * power of two below t, then halves down to 1. */
static int64_t first_piece(int64_t t) {
  int64_t p = 1;
  while (2 * p <= t - 1) p *= 2;
  return p;
}

/* Callback building the code for |cnt| iterations starting at |base|. */
typedef const tir_stmt_t* (*block_fn)(kx_t* X, void* u, const tir_expr_t* base, int64_t cnt);

/* Iterations 0 .. E-1 of loop |L| (static or run-time extent) in blocks
 * of |t| (run E / t times; loop kind |kind|) and then the rest in pieces
 * of p = t/2.., 1, each under `base + p - 1 < E`, true exactly when the
 * piece runs (fewer than 2p iterations are left when it is reached); a
 * static extent needs no guards. */
static const tir_stmt_t* blocked(kx_t* X, const tir_stmt_t* L, int64_t t, tir_loop_kind_t kind, const char* nm,
                                 block_fn fn, void* u) {
  tir_ctx_t* c = X->c;
  const tir_expr_t* E = L->u.loop.dyn_extent;
  const int64_t mx = L->u.loop.extent;
  const tir_stmt_t* items[2 + 16];
  int32_t n = 0;
  if (!E) {
    const int64_t full = mx / t;
    if (full > 0) {
      const tir_var_t* vo = var2(X, nm, "t");
      const tir_stmt_t* b = vo ? fn(X, u, MULC(X, V(X, vo), t), t) : NULL;
      if (!b) return NULL;
      if (!(items[n++] = tir_for(c, vo, full, kind, b))) return NULL;
    }
    int64_t off = full * t;
    for (int64_t p = first_piece(t); p >= 1 && off < mx; p /= 2)
      if (mx - off >= p) {
        if (!(items[n++] = fn(X, u, I(X, off), p))) return NULL;
        off += p;
      }
    return tir_seq(c, n, items);
  }
  const tir_expr_t* full = tir_bin(c, TIR_FLOORDIV, E, I(X, t));
  const tir_expr_t* rem = tir_bin(c, TIR_FLOORMOD, E, I(X, t));
  const tir_expr_t* base0 = MULC(X, full, t);
  if (mx / t > 0) {
    const tir_var_t* vo = var2(X, nm, "t");
    const tir_stmt_t* b = vo ? fn(X, u, MULC(X, V(X, vo), t), t) : NULL;
    if (!b || !(items[n++] = tir_for_dyn(c, vo, mx / t, full, kind, b))) return NULL;
  }
  for (int64_t p = first_piece(t); p >= 1; p /= 2) {
    if (p > mx) continue;
    /* the rows the larger pieces took: rem's bits above p */
    const tir_expr_t* base = ADD(X, base0, MULC(X, tir_bin(c, TIR_FLOORDIV, rem, I(X, 2 * p)), 2 * p));
    const tir_stmt_t* b = fn(X, u, base, p);
    const tir_expr_t* guard = tir_bin(c, TIR_LT, ADD(X, base, I(X, p - 1)), E);
    if (!b || !(items[n++] = tir_if(c, guard, b, NULL))) return NULL;
  }
  return tir_seq(c, n, items);
}

/* Iterations 0 .. E-1 of loop |L| in T = ceil(E / t) blocks of as equal
 * sizes as whole iterations allow (the static GEMM's balanced tiles: 16
 * rows in two blocks of 8, not 14 and 2): the first E % T blocks have
 * E / T + 1 iterations, the others E / T. With a run-time E, the block's
 * size is a run-time value in 1 .. t; each size has its own code, under
 * `size == R && its last iteration < E` (the second test always holds; it
 * shows the verifier the bound). Loop kind |kind| over the blocks. */
static const tir_stmt_t* balanced(kx_t* X, const tir_stmt_t* L, int64_t t, tir_loop_kind_t kind, block_fn fn,
                                  void* u) {
  tir_ctx_t* c = X->c;
  const tir_expr_t* E = L->u.loop.dyn_extent;
  const int64_t mx = L->u.loop.extent;
  if (!E) {
    const int64_t T = (mx + t - 1) / t, h = mx / T, ex = mx % T;
    const tir_stmt_t* items[2] = {NULL, NULL};
    const tir_var_t *v0 = tir_var(c, "mt"), *v1 = tir_var(c, "mt");
    if (!v0 || !v1) return NULL;
    if (ex && !(items[0] = tir_for(c, v0, ex, kind, fn(X, u, MULC(X, V(X, v0), h + 1), h + 1)))) return NULL;
    if (T - ex && !(items[1] = tir_for(c, v1, T - ex, kind, fn(X, u, ADD(X, I(X, ex * (h + 1)), MULC(X, V(X, v1), h)), h))))
      return NULL;
    return tir_seq(c, 2, items);
  }
  const tir_var_t* vt = tir_var(c, "mt");
  if (!vt) return NULL;
  const tir_expr_t* T = tir_bin(c, TIR_MAX, tir_bin(c, TIR_FLOORDIV, ADD(X, E, I(X, t - 1)), I(X, t)), I(X, 1));
  const tir_expr_t* h = tir_bin(c, TIR_FLOORDIV, E, T);
  const tir_expr_t* ex = tir_bin(c, TIR_FLOORMOD, E, T);
  const tir_expr_t* tv = V(X, vt);
  const tir_expr_t* start = ADD(X, tir_mul(c, tv, h), tir_bin(c, TIR_MIN, tv, ex));
  const tir_expr_t* H = ADD(X, h, tir_select(c, tir_bin(c, TIR_LT, tv, ex), I(X, 1), I(X, 0)));
  /* the block's start and size computed once into a PRIVATE pair: as
   * expressions inside the tiles' loops the C compiler recomputes their
   * divisions at every step */
  const int64_t two = 2;
  const tir_buffer_t* rs = tir_buffer(c, "rows", KILN_DTYPE_I64, 1, &two, TIR_SCOPE_PRIVATE);
  const tir_stmt_t** items = kiln_arena_alloc(&c->arena, sizeof(*items) * (size_t)(t + 2));
  if (!rs || !items) return NULL;
  const tir_expr_t* i0 = I(X, 0);
  const tir_expr_t* i1 = I(X, 1);
  const tir_expr_t* rstart = tir_load(c, rs, &i0);
  const tir_expr_t* rsize = tir_load(c, rs, &i1);
  int32_t n = 0;
  items[n++] = tir_store(c, rs, &i0, start);
  items[n++] = tir_store(c, rs, &i1, H);
  for (int64_t R = t; R >= 1; --R) {
    if (R > mx) continue;
    const tir_stmt_t* b = fn(X, u, rstart, R);
    const tir_expr_t* g = tir_bin(c, TIR_AND, tir_bin(c, TIR_EQ, rsize, I(X, R)),
                                  tir_bin(c, TIR_AND, tir_bin(c, TIR_GE, rstart, I(X, 0)),
                                          tir_bin(c, TIR_LT, ADD(X, rstart, I(X, R - 1)), E)));
    if (!b || !(items[n++] = tir_if(c, g, b, NULL))) return NULL;
  }
  return tir_for_dyn(c, vt, (mx + t - 1) / t, T, kind, tir_alloc(c, rs, tir_seq(c, n, items)));
}

/* ---- GEMM ------------------------------------------------------------------ */

typedef struct gemm_s {
  const tir_stmt_t* mloop;
  const tir_stmt_t* kloop;
  const tir_stmt_t* nloop; /* the update's n loop (extent of all three) */
  const tir_buffer_t* row;
  const tir_var_t *m, *n, *k, *n1;
  const tir_expr_t* P;      /* row[n] += P(m, k, n) */
  const tir_buffer_t* bc;   /* a constant B that P reads (packed), or NULL */
  const pack_t* pack;
  bool p_first;             /* written P + row[n] */
  const tir_stmt_t* epi;    /* the last loop's body, over m, n1 and row[n1] */
  int64_t mr, nr;
  const tir_stmt_t* bloop; /* a serial loop around the rows, moved inside them, or NULL */
  /* the tile being built */
  const tir_expr_t* rb;
  int64_t R;
  const tir_buffer_t* tile; /* the epilogue's copy of acc */
  const tir_var_t *ti, *tj; /* the epilogue's i and j, for the row loads */
  int64_t C;
} gemm_t;

static bool match_gemm(const tir_stmt_t* s, gemm_t* G) {
  memset(G, 0, sizeof *G);
  if (s->kind != TIR_FOR || s->u.loop.kind == TIR_LOOP_BOUND) return false;
  const tir_stmt_t* a = s->u.loop.body;
  if (a->kind != TIR_ALLOC) return false;
  const tir_buffer_t* row = a->u.alloc.buf;
  if (row->scope != TIR_SCOPE_PRIVATE || row->dtype != KILN_DTYPE_F32 || row->rank != 1) return false;
  const tir_stmt_t* q = a->u.alloc.body;
  if (q->kind != TIR_SEQ || q->u.seq.n != 3) return false;
  const tir_stmt_t *Z = q->u.seq.items[0], *U = q->u.seq.items[1], *Ep = q->u.seq.items[2];
  if (Z->kind != TIR_FOR || U->kind != TIR_FOR || Ep->kind != TIR_FOR) return false;
  const tir_stmt_t* N = U->u.loop.body;
  if (N->kind != TIR_FOR || !same_extent(Z, N) || !same_extent(N, Ep)) return false;
  /* row[n0] = 0 */
  const tir_stmt_t* zs = Z->u.loop.body;
  if (zs->kind != TIR_STORE || zs->u.store.buf != row || zs->u.store.idx[0]->kind != TIR_VARREF ||
      zs->u.store.idx[0]->u.var != Z->u.loop.var || zs->u.store.value->kind != TIR_FLOAT || zs->u.store.value->u.f != 0)
    return false;
  /* row[n] = row[n] + P */
  const tir_stmt_t* us = N->u.loop.body;
  if (us->kind != TIR_STORE || us->u.store.buf != row || us->u.store.idx[0]->kind != TIR_VARREF ||
      us->u.store.idx[0]->u.var != N->u.loop.var)
    return false;
  const tir_expr_t* v = us->u.store.value;
  if (v->kind != TIR_BINARY || v->u.bin.op != TIR_ADD) return false;
  const tir_expr_t* self = v->u.bin.a;
  G->P = v->u.bin.b;
  if (!(self->kind == TIR_LOAD && self->u.load.buf == row)) {
    self = v->u.bin.b;
    G->P = v->u.bin.a;
    G->p_first = true;
  }
  if (self->kind != TIR_LOAD || self->u.load.buf != row || !tir_expr_equal(self->u.load.idx[0], us->u.store.idx[0]) ||
      mentions(G->P, NULL, row))
    return false;
  G->mloop = s, G->kloop = U, G->nloop = N, G->row = row, G->epi = Ep->u.loop.body;
  G->m = s->u.loop.var, G->k = U->u.loop.var, G->n = N->u.loop.var, G->n1 = Ep->u.loop.var;
  /* the tiles run K and N outside any one row: their extents must not
   * follow the row (or the k loop) */
  const tir_expr_t* ek = U->u.loop.dyn_extent;
  const tir_expr_t* en = N->u.loop.dyn_extent;
  if ((ek && mentions(ek, G->m, NULL)) || (en && (mentions(en, G->m, NULL) || mentions(en, G->k, NULL)))) return false;
  /* the epilogue: stores contiguous in n1, loads of row at n1 only */
  deps_t D = {.v = G->n1, .skip = row, .ok = true};
  if (!collect_stores(&D, G->epi) || !deps_stmt(&D, G->epi)) return false;
  /* P: what the epilogue writes is not read; the rest moves by 0 or 1 per n */
  deps_t DP = {.v = G->n, .ok = true};
  for (int32_t w = 0; w < D.nw; ++w)
    if (mentions(G->P, NULL, D.wb[w])) return false;
  return deps_expr(&DP, G->P);
}

typedef struct rowload_s {
  gemm_t* G;
  bool bad;
} rowload_t;

/* row[n1] in the epilogue -> acc[i * C + j] */
static const tir_expr_t* rowload_post(tir_mutator_t* m, const tir_expr_t* e) {
  rowload_t* r = m->user;
  gemm_t* G = r->G;
  if (e->kind != TIR_LOAD || e->u.load.buf != G->row) return e;
  if (e->u.load.idx[0]->kind != TIR_VARREF || e->u.load.idx[0]->u.var != G->n1) {
    r->bad = true;
    return e;
  }
  tir_ctx_t* c = m->ctx;
  const tir_expr_t* ix = tir_add(c, tir_mul(c, tir_ref(c, G->ti), tir_int(c, G->C)), tir_ref(c, G->tj));
  return tir_load(c, G->tile, &ix);
}

typedef struct packed_s {
  const tir_buffer_t *from, *to;
  const tir_expr_t* idx[3];
} packed_t;

/* B[k, n] -> Bp[n / nr, k, n % nr] for the tile's (nt, k, j) */
static const tir_expr_t* packed_post(tir_mutator_t* m, const tir_expr_t* e) {
  const packed_t* pk = m->user;
  if (e->kind != TIR_LOAD || e->u.load.buf != pk->from) return e;
  return tir_load(m->ctx, pk->to, pk->idx);
}

typedef struct count_s {
  const tir_buffer_t* b;
  int32_t n;
} count_t;

static bool count_pre(tir_visitor_t* v, const tir_expr_t* e) {
  count_t* c = v->user;
  if (e->kind == TIR_LOAD && e->u.load.buf == c->b) c->n++;
  return true;
}

typedef struct findld_s {
  const tir_buffer_t* b;
  const tir_expr_t* at;
} findld_t;

static bool findld_pre(tir_visitor_t* v, const tir_expr_t* e) {
  findld_t* f = v->user;
  if (e->kind == TIR_LOAD && e->u.load.buf == f->b && !f->at) {
    f->at = e;
    v->stop = true;
  }
  return true;
}

static const tir_expr_t* find_load(const tir_expr_t* e, const tir_buffer_t* b) {
  findld_t f = {b, NULL};
  tir_visitor_t v = {.user = &f, .expr_pre = findld_pre};
  tir_visit_expr(&v, e);
  return f.at;
}

/* Whether the B that P reads is a constant only this GEMM reads, dense
 * [K][N] and read as B[k][n]: then it is laid out in the tiles' panels
 * (the plain nest read its rows N floats apart, which at N = 1024 puts
 * a tile's whole panel into a few L1 sets and a page per row). */
static void try_pack(kx_t* X, gemm_t* G) {
  const kiln_plan_t* P = X->plan;
  const tir_func_t* f = X->f;
  const tir_stmt_t *K = G->kloop, *N = G->nloop;
  if (!P || K->u.loop.dyn_extent || N->u.loop.dyn_extent || X->npacks == MAX_PACKS) return;
  const int64_t kk = K->u.loop.extent, nn = N->u.loop.extent;
  if (nn % G->nr || kk < 1) return;
  for (int32_t j = 0; j < f->n_params; ++j) {
    const tir_buffer_t* b = f->params[j];
    const int32_t pb = P->kernels[X->kernel].args[j];
    if (pb < 0 || pb >= P->n_buffers || P->buffers[pb].kind != KILN_PLAN_CONST || b->dtype != KILN_DTYPE_F32 ||
        P->buffers[pb].value.dtype != KILN_DTYPE_F32 || !P->buffers[pb].value.data ||
        P->buffers[pb].value.nbytes != (size_t)(kk * nn) * 4 || tir_buffer_numel(b) != kk * nn ||
        !mentions(G->P, NULL, b))
      continue;
    /* dense row-major */
    int64_t st = 1;
    bool dense = true;
    for (int32_t d = b->rank - 1; d >= 0; --d) {
      dense &= b->strides[d] == st;
      st *= b->shape[d];
    }
    /* read once in the kernel (this P), by no other kernel */
    count_t cnt = {b, 0};
    tir_visitor_t v = {.user = &cnt, .expr_pre = count_pre};
    tir_visit_stmt(&v, f->body);
    int32_t users = 0;
    for (int32_t k = 0; k < P->n_kernels; ++k)
      for (int32_t a = 0; a < P->kernels[k].func->n_params; ++a) users += P->kernels[k].args[a] == pb;
    if (!dense || cnt.n != 1 || users != 1) return;
    /* the one load: offset k * N + n exactly */
    const tir_expr_t* ld = find_load(G->P, b);
    if (!ld) return;
    int64_t sk, sn;
    if (!access_step(b, ld->u.load.idx, G->k, &sk) || !access_step(b, ld->u.load.idx, G->n, &sn) || sk != nn || sn != 1)
      return;
    const tir_expr_t* zero = tir_int(X->c, 0);
    const tir_var_t* kn[2] = {G->k, G->n};
    const tir_expr_t* z2[2] = {zero, zero};
    for (int32_t d = 0; d < b->rank; ++d) {
      const tir_expr_t* e = tir_simplify_expr(X->c, tir_substitute_expr(X->c, ld->u.load.idx[d], 2, kn, z2));
      if (!e || e->kind != TIR_INT || e->u.i != 0) return;
    }
    tir_buffer_t* nb = kiln_arena_alloc(&X->c->arena, sizeof *nb);
    if (!nb) return;
    *nb = *b; /* the same id and name: the printer spells it as before */
    nb->rank = 3;
    nb->shape[0] = nn / G->nr, nb->shape[1] = kk, nb->shape[2] = G->nr;
    nb->strides[0] = kk * G->nr, nb->strides[1] = G->nr, nb->strides[2] = 1;
    pack_t* pk = &X->packs[X->npacks++];
    *pk = (pack_t){j, nb, kk, nn, G->nr};
    G->bc = b;
    G->pack = pk;
    return;
  }
}

/* The mr x nr register tile at rows rb.., columns cb.. (G->rb, G->R). */
static const tir_stmt_t* gemm_tile(kx_t* X, void* u, const tir_expr_t* cb, int64_t C) {
  gemm_t* G = u;
  tir_ctx_t* c = X->c;
  const int64_t R = G->R, RC = R * C;
  const tir_buffer_t* acc = tir_buffer(c, "acc", KILN_DTYPE_F32, 1, &RC, TIR_SCOPE_PRIVATE);
  G->tile = tir_buffer(c, "tile", KILN_DTYPE_F32, 1, &RC, TIR_SCOPE_PRIVATE);
  if (!G->tile) return NULL;
  const tir_loop_kind_t jk = C % 4 == 0 ? TIR_LOOP_VECTORIZED : TIR_LOOP_UNROLLED;
  const tir_var_t *i0 = tir_var(c, "i"), *j0 = tir_var(c, "j"), *i1 = tir_var(c, "i"), *j1 = tir_var(c, "j");
  const tir_var_t *i2 = tir_var(c, "i"), *j2 = tir_var(c, "j"), *kv = tir_var(c, G->k->name);
  if (!acc || !i0 || !j0 || !i1 || !j1 || !i2 || !j2 || !kv) return NULL;
  const tir_expr_t* a0 = ADD(X, MULC(X, V(X, i0), C), V(X, j0));
  const tir_stmt_t* init =
      tir_for(c, i0, R, TIR_LOOP_UNROLLED, tir_for(c, j0, C, jk, tir_store(c, acc, &a0, tir_const(c, KILN_DTYPE_F32, 0))));
  const tir_expr_t* a1 = ADD(X, MULC(X, V(X, i1), C), V(X, j1));
  const tir_var_t* from[3] = {G->m, G->n, G->k};
  const tir_expr_t* to[3] = {ADD(X, G->rb, V(X, i1)), ADD(X, cb, V(X, j1)), V(X, kv)};
  const tir_expr_t* p = tir_substitute_expr(c, G->P, 3, from, to);
  if (G->pack) {
    const tir_expr_t* nt = tir_simplify_expr(c, tir_bin(c, TIR_FLOORDIV, cb, I(X, G->pack->nr)));
    packed_t pk = {G->bc, G->pack->to, {nt, V(X, kv), V(X, j1)}};
    tir_mutator_t mp = {.ctx = c, .user = &pk, .expr_post = packed_post};
    p = nt ? tir_mutate_expr(&mp, p) : NULL;
  }
  const tir_expr_t* cur = tir_load(c, acc, &a1);
  const tir_stmt_t* upd = tir_store(c, acc, &a1, G->p_first ? tir_add(c, p, cur) : tir_add(c, cur, p));
  upd = tir_for(c, i1, R, TIR_LOOP_UNROLLED, tir_for(c, j1, C, jk, upd));
  upd = loop_like(X, G->kloop, kv, TIR_LOOP_SERIAL, upd);
  G->ti = i2, G->tj = j2, G->C = C;
  rowload_t rl = {G, false};
  tir_mutator_t mu = {.ctx = c, .user = &rl, .expr_post = rowload_post};
  const tir_stmt_t* ep = tir_mutate_stmt(&mu, G->epi);
  if (rl.bad) return NULL; /* checked by match_gemm: cannot happen */
  const tir_var_t* from2[2] = {G->m, G->n1};
  const tir_expr_t* to2[2] = {ADD(X, G->rb, V(X, i2)), ADD(X, cb, V(X, j2))};
  ep = ep ? tir_substitute_stmt(c, ep, 2, from2, to2) : NULL;
  /* the epilogue reads a copy of the tile in a loop over its rows: one
   * copy of its code per tile size (a GELU's erf is long), while the
   * accumulators, indexed by constants only, stay in registers */
  const tir_var_t *i3 = tir_var(c, "i"), *j3 = tir_var(c, "j");
  if (!ep || !i3 || !j3) return NULL;
  const tir_expr_t* a3 = ADD(X, MULC(X, V(X, i3), C), V(X, j3));
  const tir_stmt_t* copy =
      tir_for(c, i3, R, TIR_LOOP_UNROLLED, tir_for(c, j3, C, jk, tir_store(c, G->tile, &a3, tir_load(c, acc, &a3))));
  ep = tir_for(c, i2, R, TIR_LOOP_SERIAL, tir_for(c, j2, C, jk, ep));
  const tir_stmt_t* items[3] = {init, upd, copy};
  if (!init || !upd || !copy || !ep) return NULL;
  return tir_alloc(c, G->tile, tir_seq2(c, tir_alloc(c, acc, tir_seq(c, 3, items)), ep));
}

/* Every column tile of the rows rb .. rb + R - 1. */
static const tir_stmt_t* gemm_rows(kx_t* X, void* u, const tir_expr_t* rb, int64_t R) {
  gemm_t* G = u;
  const tir_expr_t* save_rb = G->rb;
  const int64_t save_R = G->R;
  G->rb = rb, G->R = R;
  const tir_stmt_t* s = blocked(X, G->nloop, G->nr, TIR_LOOP_SERIAL, "nt", gemm_tile, G);
  G->rb = save_rb, G->R = save_R;
  if (s && G->bloop) {
    /* the rows of every batch: one parallel loop over the row tiles, not
     * one parallel region per batch */
    const tir_var_t* ob = G->bloop->u.loop.var;
    const tir_var_t* nb = tir_var(X->c, ob->name);
    const tir_expr_t* r = nb ? V(X, nb) : NULL;
    s = r ? tir_substitute_stmt(X->c, s, 1, &ob, &r) : NULL;
    s = s ? tir_for(X->c, nb, G->bloop->u.loop.extent, TIR_LOOP_SERIAL, s) : NULL;
  }
  return s;
}

typedef struct dimsub_s {
  const tir_buffer_t* dims;
  int64_t n;
} dimsub_t;

static const tir_expr_t* dimsub_post(tir_mutator_t* m, const tir_expr_t* e) {
  const dimsub_t* d = m->user;
  return e->kind == TIR_LOAD && e->u.load.buf == d->dims ? tir_int(m->ctx, d->n) : e;
}

/* |e| with the dim's run-time value |n| in place of its loads. */
static const tir_expr_t* at_n(kx_t* X, const tir_expr_t* e, int64_t n) {
  dimsub_t d = {X->f->params[X->f->n_params - 1], n};
  tir_mutator_t m = {.ctx = X->c, .user = &d, .expr_post = dimsub_post};
  const tir_expr_t* r = tir_mutate_expr(&m, e);
  return r ? tir_simplify_expr(X->c, r) : NULL;
}

static bool extent_at(kx_t* X, const tir_stmt_t* L, int64_t n, int64_t* out) {
  if (!L->u.loop.dyn_extent) return (*out = L->u.loop.extent), true;
  const tir_expr_t* e = at_n(X, L->u.loop.dyn_extent, n);
  if (!e || e->kind != TIR_INT) return false;
  *out = e->u.i;
  return true;
}

/* Whether the iterations of serial loop |B| around the GEMM's rows write
 * disjoint elements (then the row tiles may run every batch, in parallel):
 * for every value of the dim, the interval each batch's epilogue stores
 * span (over its rows and columns) lies above the previous batch's. The
 * rows of one batch are independent already (their loop is parallel),
 * the GEMM reads nothing its epilogue writes, and the epilogue reads what
 * it writes only at the element it stores (match_gemm). */
static bool batches_disjoint(kx_t* X, const tir_stmt_t* B, const gemm_t* G) {
  const kiln_plan_t* P = X->plan;
  if (!P || P->n_dims != 1 || P->dims[0].hi - P->dims[0].lo > 4096) return false;
  deps_t D = {.v = G->n1, .skip = G->row, .ok = true};
  if (!collect_stores(&D, G->epi)) return false;
  for (int32_t w = 0; w < D.nw; ++w)
    for (int32_t x = 0; x < w; ++x)
      if (D.wb[w] == D.wb[x]) return false;
  const tir_var_t* vars[3] = {B->u.loop.var, G->m, G->n1};
  for (int64_t n = P->dims[0].lo; n <= P->dims[0].hi; ++n) {
    int64_t M, N;
    if (!extent_at(X, G->mloop, n, &M) || !extent_at(X, G->nloop, n, &N)) return false;
    if (M < 1 || N < 1) continue;
    for (int32_t w = 0; w < D.nw; ++w) {
      const tir_expr_t* F = tir_int(X->c, 0);
      for (int32_t d = 0; d < D.wb[w]->rank; ++d)
        F = ADD(X, F, MULC(X, D.wi[w][d], D.wb[w]->strides[d]));
      F = at_n(X, F, n);
      if (!F) return false;
      int64_t prev = -1;
      for (int64_t b = 0; b < B->u.loop.extent; ++b) {
        const int64_t lo[3] = {b, 0, 0}, hi[3] = {b, M - 1, N - 1};
        int64_t l, h;
        if (!tir_expr_bounds(F, 3, vars, lo, hi, &l, &h) || l <= prev) return false;
        prev = h;
      }
    }
  }
  return true;
}

static const tir_stmt_t* gemm_build(kx_t* X, const tir_stmt_t* s, const tir_stmt_t* bloop);

/* The GEMM's parallel row loop when |s| is a serial batch loop (static
 * extent >= 2) around it whose batches write disjoint elements and whose
 * variable no extent of the GEMM's loops reads; NULL otherwise. */
static const tir_stmt_t* batched_gemm(kx_t* X, const tir_stmt_t* s) {
  gemm_t G;
  if (s->kind != TIR_FOR || s->u.loop.kind != TIR_LOOP_SERIAL || s->u.loop.dyn_extent || s->u.loop.extent < 2)
    return NULL;
  const tir_stmt_t* r = s->u.loop.body;
  if (r->kind != TIR_FOR || r->u.loop.kind != TIR_LOOP_PARALLEL || !match_gemm(r, &G)) return NULL;
  if ((r->u.loop.dyn_extent && mentions(r->u.loop.dyn_extent, s->u.loop.var, NULL)) ||
      (G.nloop->u.loop.dyn_extent && mentions(G.nloop->u.loop.dyn_extent, s->u.loop.var, NULL)) ||
      (G.kloop->u.loop.dyn_extent && mentions(G.kloop->u.loop.dyn_extent, s->u.loop.var, NULL)) ||
      !batches_disjoint(X, s, &G))
    return NULL;
  return r;
}

/* A serial batch loop whose body is a GEMM's parallel row loop: the rows
 * tiled with the batch loop inside them (one parallel region, not one per
 * batch), where the batches write disjoint elements. */
static bool gemm_pre(tir_mutator_t* m, const tir_stmt_t* s, const tir_stmt_t** out) {
  kx_t* X = m->user;
  const tir_stmt_t* r = batched_gemm(X, s);
  if (!r) return false;
  *out = gemm_build(X, r, s);
  return true;
}

static const tir_stmt_t* gemm_post(tir_mutator_t* m, const tir_stmt_t* s) {
  return gemm_build(m->user, s, NULL);
}

static const tir_stmt_t* gemm_build(kx_t* X, const tir_stmt_t* s, const tir_stmt_t* bloop) {
  gemm_t G;
  if (s->kind != TIR_FOR || !match_gemm(s, &G)) return s;
  G.bloop = bloop;
  const int64_t N = G.nloop->u.loop.extent, L = X->lanes;
  if (N < 1 || s->u.loop.extent < 1) return bloop ? tir_for_with_body(X->c, bloop, s) : s;
  /* nn_gemm_tiles' register tile */
  G.nr = N >= 2 * L ? 2 * L : N >= L ? L : N;
  const int64_t vecs = (G.nr + L - 1) / L;
  G.mr = (X->regs - 4) / vecs;
  if (G.mr > MR_CAP) G.mr = MR_CAP;
  if (G.mr < 1) G.mr = 1;
  try_pack(X, &G);
  const tir_loop_kind_t mk = s->u.loop.kind == TIR_LOOP_PARALLEL ? TIR_LOOP_PARALLEL : TIR_LOOP_SERIAL;
  /* tiles of balanced heights where a tile's columns are one static nest
   * (a code per height); over a run-time N, full tiles and halving pieces
   * (fewer codes: each height times each column piece) */
  const tir_stmt_t* r = G.nloop->u.loop.dyn_extent ? blocked(X, s, G.mr, mk, "mt", gemm_rows, &G)
                                                   : balanced(X, s, G.mr, mk, gemm_rows, &G);
  if (r) X->gemms++;
  return r;
}

/* ---- GEMM on a GPU: blocks of rows, a row of sums each ----------------------- */

/* row[n1] in the epilogue -> acc[i * N + n1] */
typedef struct rowblk_s {
  const tir_buffer_t *row, *acc;
  const tir_expr_t* base; /* i * N */
  bool bad;
} rowblk_t;

static const tir_expr_t* rowblk_post(tir_mutator_t* m, const tir_expr_t* e) {
  rowblk_t* r = m->user;
  if (e->kind != TIR_LOAD || e->u.load.buf != r->row) return e;
  const tir_expr_t* ix = tir_add(m->ctx, r->base, e->u.load.idx[0]);
  return tir_load(m->ctx, r->acc, &ix);
}

/* Loop iterations one run of |st| may take, counted as a device with a
 * loop limit would at most (every loop but a short unrolled one counts
 * its extent times one more than its body's; a branch its longer side). */
static int64_t trips_upper(const tir_stmt_t* st) {
  enum { CAP = 1 << 30 };
  if (!st) return 0;
  int64_t t = 0;
  switch (st->kind) {
    case TIR_FOR: {
      const int64_t b = trips_upper(st->u.loop.body), e = st->u.loop.extent > 0 ? st->u.loop.extent : 0;
      if (st->u.loop.kind == TIR_LOOP_BOUND) return b;
      t = st->u.loop.kind == TIR_LOOP_UNROLLED && e <= 32 ? e * b : e * (1 + b);
      break;
    }
    case TIR_SEQ:
      for (int32_t i = 0; i < st->u.seq.n; ++i) t += trips_upper(st->u.seq.items[i]);
      break;
    case TIR_IF: {
      const int64_t a = trips_upper(st->u.cond.then_s), b = trips_upper(st->u.cond.else_s);
      t = a > b ? a : b;
      break;
    }
    case TIR_ALLOC: return trips_upper(st->u.alloc.body);
    default: return 0;
  }
  return t > CAP ? CAP : t;
}

/* One parallel iteration of the GEMM row nest |G| (at |s|) on a GPU:
 * rows row0 .. row0 + R - 1 and columns col0 .. col0 + NC - 1 (|col0|
 * NULL: every column, the nest's own n loop), a row of sums each, the
 * serial batch loop |bloop| (or NULL) inside. Loads past the run's M (N)
 * read row M - 1 (column N - 1); the epilogue stores nothing there. */
static const tir_stmt_t* gemm_gpu_block(kx_t* X, const tir_stmt_t* s, const gemm_t* G, const tir_stmt_t* bloop,
                                        const tir_expr_t* row0, int64_t R, const tir_expr_t* col0, int64_t NC) {
  tir_ctx_t* c = X->c;
  const int64_t Nt = G->nloop->u.loop.extent, W = col0 ? NC : Nt, RN = R * W;
  const tir_var_t *i0 = tir_var(c, "i"), *i1 = tir_var(c, "i"), *i2 = tir_var(c, "i");
  const tir_var_t *n0 = tir_var(c, "n"), *n1 = tir_var(c, "n"), *kv = tir_var(c, G->k->name);
  const tir_buffer_t* acc = tir_buffer(c, "acc", KILN_DTYPE_F32, 1, &RN, TIR_SCOPE_PRIVATE);
  if (!i0 || !i1 || !i2 || !n0 || !n1 || !kv || !acc) return NULL;
  const tir_expr_t* Mx = s->u.loop.dyn_extent ? s->u.loop.dyn_extent : I(X, s->u.loop.extent);
  const tir_expr_t* Nx = G->nloop->u.loop.dyn_extent ? G->nloop->u.loop.dyn_extent : I(X, Nt);
  /* columns past N in a block: loads clamped, stores guarded */
  const bool cguard = col0 && (G->nloop->u.loop.dyn_extent || Nt % NC);
  /* a loop over the block's columns: the nest's own (its extent) or NC */
  const tir_stmt_t* Zl = G->mloop->u.loop.body->u.alloc.body->u.seq.items[0];
  const tir_stmt_t* El = G->mloop->u.loop.body->u.alloc.body->u.seq.items[2];
#define COLS(L, v, k, body) (col0 ? tir_for(c, (v), NC, cguard ? TIR_LOOP_SERIAL : (k), (body)) : loop_like(X, (L), (v), (k), (body)))
  /* acc[i * W + n] = 0 */
  const tir_expr_t* a0 = ADD(X, MULC(X, V(X, i0), W), V(X, n0));
  const tir_stmt_t* init = tir_store(c, acc, &a0, tir_const(c, KILN_DTYPE_F32, 0));
  init = tir_for(c, i0, R, TIR_LOOP_UNROLLED, COLS(Zl, n0, Zl->u.loop.kind, init));
  /* acc[i * W + n] += P(min(row0 + i, M - 1), k, col(n)) */
  const tir_expr_t* mi = tir_bin(c, TIR_MIN, ADD(X, row0, V(X, i1)), tir_sub(c, Mx, I(X, 1)));
  const tir_expr_t* ni = V(X, n1);
  if (col0) ni = ADD(X, col0, ni);
  if (cguard) ni = tir_bin(c, TIR_MIN, ni, tir_sub(c, Nx, I(X, 1)));
  const tir_var_t* from[3] = {G->m, G->n, G->k};
  const tir_expr_t* to[3] = {mi, ni, V(X, kv)};
  const tir_expr_t* p = tir_substitute_expr(c, G->P, 3, from, to);
  const tir_expr_t* a1 = ADD(X, MULC(X, V(X, i1), W), V(X, n1));
  const tir_expr_t* cur = tir_load(c, acc, &a1);
  const tir_stmt_t* upd = tir_store(c, acc, &a1, G->p_first ? tir_add(c, p, cur) : tir_add(c, cur, p));
  upd = tir_for(c, i1, R, TIR_LOOP_UNROLLED, COLS(G->nloop, n1, G->nloop->u.loop.kind, upd));
  upd = loop_like(X, G->kloop, kv, TIR_LOOP_SERIAL, upd);
  /* if (row0 + i < M) EPI(row0 + i, n1, acc[i * W + n1 - col0]) over the
   * block's columns */
  rowblk_t rb = {G->row, acc, MULC(X, V(X, i2), W), false};
  if (col0) rb.base = tir_sub(c, rb.base, col0);
  tir_mutator_t mu = {.ctx = c, .user = &rb, .expr_post = rowblk_post};
  const tir_stmt_t* ep = NULL;
  if (!col0) {
    ep = tir_mutate_stmt(&mu, El);
  } else {
    const tir_stmt_t* eb = tir_mutate_stmt(&mu, El->u.loop.body);
    const tir_var_t* jv = tir_var(c, "j");
    const tir_expr_t* at = jv ? ADD(X, col0, V(X, jv)) : NULL;
    const tir_var_t* from1[1] = {G->n1};
    eb = eb && at ? tir_substitute_stmt(c, eb, 1, from1, &at) : NULL;
    if (eb && cguard) eb = tir_if(c, tir_bin(c, TIR_LT, at, Nx), eb, NULL);
    ep = eb ? tir_for(c, jv, NC, cguard ? TIR_LOOP_SERIAL : El->u.loop.kind, eb) : NULL;
  }
#undef COLS
  const tir_var_t* from2[1] = {G->m};
  const tir_expr_t* to2[1] = {ADD(X, row0, V(X, i2))};
  ep = ep ? tir_substitute_stmt(c, ep, 1, from2, to2) : NULL;
  ep = tir_for(c, i2, R, TIR_LOOP_SERIAL, tir_if(c, tir_bin(c, TIR_LT, ADD(X, row0, V(X, i2)), Mx), ep, NULL));
  const tir_stmt_t* items[3] = {init, upd, ep};
  if (!init || !upd || !ep) return NULL;
  const tir_stmt_t* body = tir_alloc(c, acc, tir_seq(c, 3, items));
  if (bloop) body = tir_for_with_body(c, bloop, body);
  return body;
}

/* The GEMM row nest at |s| as blocks of R rows per parallel iteration, a
 * row of sums each (R rows read each element of B once: a work-item
 * streams B once per block, not per row), with the serial batch loop
 * |bloop| (or NULL) inside a block, so that the block loop is the
 * kernel's parallel loop that a GPU target binds to its grid. The rows of
 * the last block past the run's M read row M - 1 and store nothing. Under
 * a loop limit (X->loop_limit > 0) a block whose loops would run more
 * iterations per invocation (trips_upper, at the top of the range) takes
 * fewer rows and columns: blocks of R x NC, the parallel loop over the
 * row blocks times the column blocks (columns past N as the rows). NULL
 * when |s| is no such nest. */
static const tir_stmt_t* gemm_gpu_build(kx_t* X, const tir_stmt_t* s, const tir_stmt_t* bloop) {
  gemm_t G;
  if (s->kind != TIR_FOR || s->u.loop.kind != TIR_LOOP_PARALLEL || !match_gemm(s, &G)) return NULL;
  tir_ctx_t* c = X->c;
  const int64_t Nt = G.nloop->u.loop.extent, Mt = s->u.loop.extent;
  if (Nt < 1 || Mt < 1) return NULL;
  int64_t R = 4096 / Nt;
  if (R > 4) R = 4;
  if (R < 1) R = 1;
  if (R > Mt) R = Mt;
  const tir_var_t* mb = tir_var(c, "mb");
  if (!mb) return NULL;
  const tir_expr_t* Mx = s->u.loop.dyn_extent ? s->u.loop.dyn_extent : I(X, Mt);
  const tir_stmt_t* body = gemm_gpu_block(X, s, &G, bloop, MULC(X, V(X, mb), R), R, NULL, Nt);
  if (!body) return NULL;
  int64_t NC = Nt;
  if (X->loop_limit > 0 && trips_upper(body) > X->loop_limit) {
    /* the most sums per block under the limit (ties: wider columns) */
    const tir_stmt_t* best = NULL;
    int64_t bR = 0, bC = 0;
    for (int64_t nc = Nt; nc >= 1; nc = nc > 1 ? (nc + 1) / 2 : 0)
      for (int64_t r = R; r >= 1; r /= 2) {
        if (r * nc < bR * bC || (r * nc == bR * bC && nc <= bC)) continue;
        const int64_t nb = (Nt + nc - 1) / nc;
        const tir_expr_t* row0 = MULC(X, tir_bin(c, TIR_FLOORDIV, V(X, mb), I(X, nb)), r);
        const tir_expr_t* col0 = nb > 1 ? MULC(X, tir_bin(c, TIR_FLOORMOD, V(X, mb), I(X, nb)), nc) : NULL;
        const tir_stmt_t* b = gemm_gpu_block(X, s, &G, bloop, row0, r, col0, nc);
        if (!b) return NULL;
        if (trips_upper(b) > X->loop_limit) continue;
        best = b, bR = r, bC = nc;
      }
    if (best) {
      body = best, R = bR, NC = bC;
      X->split++;
    } else {
      X->over_limit++;
    }
  }
  const int64_t nb = (Nt + NC - 1) / NC, top = (Mt + R - 1) / R * nb;
  if (s->u.loop.dyn_extent)
    return tir_for_dyn(c, mb, top, tir_mul(c, tir_bin(c, TIR_FLOORDIV, ADD(X, Mx, I(X, R - 1)), I(X, R)), I(X, nb)),
                       TIR_LOOP_PARALLEL, body);
  return tir_for(c, mb, top, TIR_LOOP_PARALLEL, body);
}

static bool gemm_gpu_pre(tir_mutator_t* m, const tir_stmt_t* s, const tir_stmt_t** out) {
  kx_t* X = m->user;
  const tir_stmt_t* r = batched_gemm(X, s);
  if (!r) return false;
  const tir_stmt_t* g = gemm_gpu_build(X, r, s);
  if (!g) return false;
  X->gemms++;
  *out = g;
  return true;
}

static const tir_stmt_t* gemm_gpu_post(tir_mutator_t* m, const tir_stmt_t* s) {
  kx_t* X = m->user;
  const tir_stmt_t* g = s->kind == TIR_FOR && s->u.loop.kind == TIR_LOOP_PARALLEL ? gemm_gpu_build(X, s, NULL) : NULL;
  if (!g) return s;
  X->gemms++;
  return g;
}

/* ---- a plain nest over the grid (GPU) ------------------------------------------ */

enum { NEST_MAX = 8 };

/* A kernel body that is a nest of serial loops around one store (the
 * Transposes' naive nests) with its loops' iterations independent: the
 * store's flat index one-to-one over the nest at every value of the dim
 * (at n its coefficients are constants, each larger than what the loops
 * of smaller ones span) and no load of the stored buffer. The loop over
 * the length (else the outermost) then goes outermost and parallel, so
 * that the kernel spreads over the grid instead of running in one work-
 * item (whose loops a device with a loop limit would cut short). NULL
 * when |s| is no such nest. */
static const tir_stmt_t* nest_parallel(kx_t* X, const tir_stmt_t* s) {
  const tir_stmt_t* L[NEST_MAX];
  int32_t nl = 0;
  const tir_stmt_t* b = s;
  while (b->kind == TIR_FOR && nl < NEST_MAX) {
    if (b->u.loop.kind != TIR_LOOP_SERIAL) return NULL;
    L[nl++] = b;
    b = b->u.loop.body;
  }
  if (!nl || b->kind != TIR_STORE) return NULL;
  const tir_buffer_t* w = b->u.store.buf;
  if (mentions(b->u.store.value, NULL, w)) return NULL;
  const tir_expr_t* F = I(X, 0);
  for (int32_t d = 0; d < w->rank; ++d) {
    if (mentions(b->u.store.idx[d], NULL, w)) return NULL;
    F = ADD(X, F, MULC(X, b->u.store.idx[d], w->strides[d]));
  }
  int32_t par = 0;
  for (int32_t i = nl - 1; i >= 0; --i) {
    const tir_expr_t* E = L[i]->u.loop.dyn_extent;
    for (int32_t j = 0; E && j < nl; ++j)
      if (mentions(E, L[j]->u.loop.var, NULL)) return NULL;
    if (E) par = i;
  }
  const kiln_plan_t* P = X->plan;
  if (!P || P->n_dims != 1 || P->dims[0].hi - P->dims[0].lo > 4096) return NULL;
  for (int64_t n = P->dims[0].lo; n <= P->dims[0].hi; ++n) {
    const tir_expr_t* Fn = at_n(X, F, n);
    if (!Fn) return NULL;
    int64_t k[NEST_MAX], e[NEST_MAX];
    bool used[NEST_MAX] = {false};
    for (int32_t i = 0; i < nl; ++i) {
      if (!extent_at(X, L[i], n, &e[i]) || !var_coef(Fn, L[i]->u.loop.var, &k[i])) return NULL;
      if (k[i] < 0) k[i] = -k[i];
      if (e[i] < 2) used[i] = true; /* one iteration: nothing to tell apart */
    }
    /* the loops by growing coefficient: each past the span of the others */
    int64_t span = 0;
    for (int32_t t = 0; t < nl; ++t) {
      int32_t m = -1;
      for (int32_t i = 0; i < nl; ++i)
        if (!used[i] && (m < 0 || k[i] < k[m])) m = i;
      if (m < 0) break;
      if (k[m] <= span) return NULL;
      used[m] = true;
      span += k[m] * (e[m] - 1);
    }
  }
  const tir_stmt_t* body = b;
  for (int32_t i = nl - 1; i >= 0; --i)
    if (i != par && !(body = tir_for_with_body(X->c, L[i], body))) return NULL;
  const tir_stmt_t* Lp = L[par];
  return loop_like(X, Lp, Lp->u.loop.var, TIR_LOOP_PARALLEL, body);
}

/* |body| (a kernel's) with nest_parallel applied under its allocations. */
static const tir_stmt_t* nests_parallel(kx_t* X, const tir_stmt_t* body) {
  if (body->kind == TIR_ALLOC) {
    const tir_stmt_t* in = nests_parallel(X, body->u.alloc.body);
    return in == body->u.alloc.body || !in ? in : tir_alloc(X->c, body->u.alloc.buf, in);
  }
  const tir_stmt_t* r = nest_parallel(X, body);
  if (!r) return body;
  X->nests++;
  return r;
}

/* ---- reductions ------------------------------------------------------------- */

/* items[0] `d[c] = ident` and items[1] `for r: d[c] = op(d[c], f(r))` as
 * a 16-lane reduction; NULL with *matched false when they are not one. */
static const tir_stmt_t* lane_reduce(kx_t* X, const tir_stmt_t* init, const tir_stmt_t* L, bool* matched) {
  *matched = false;
  tir_ctx_t* c = X->c;
  if (init->kind != TIR_STORE || L->kind != TIR_FOR || L->u.loop.kind != TIR_LOOP_SERIAL) return NULL;
  const tir_buffer_t* d = init->u.store.buf;
  if (d->scope != TIR_SCOPE_PRIVATE || d->dtype != KILN_DTYPE_F32 || init->u.store.value->kind != TIR_FLOAT) return NULL;
  for (int32_t i = 0; i < d->rank; ++i)
    if (init->u.store.idx[i]->kind != TIR_INT) return NULL;
  const tir_stmt_t* st = L->u.loop.body;
  if (st->kind != TIR_STORE || st->u.store.buf != d || !same_idx(d, st->u.store.idx, init->u.store.idx)) return NULL;
  const tir_expr_t* v = st->u.store.value;
  if (v->kind != TIR_BINARY || (v->u.bin.op != TIR_ADD && v->u.bin.op != TIR_MAX && v->u.bin.op != TIR_MIN))
    return NULL;
  const tir_binop_t op = v->u.bin.op;
  const tir_expr_t *self = v->u.bin.a, *f = v->u.bin.b;
  if (!(self->kind == TIR_LOAD && self->u.load.buf == d)) self = v->u.bin.b, f = v->u.bin.a;
  if (self->kind != TIR_LOAD || self->u.load.buf != d || !same_idx(d, self->u.load.idx, init->u.store.idx) ||
      mentions(f, NULL, d))
    return NULL;
  const tir_var_t* r = L->u.loop.var;
  deps_t D = {.v = r, .ok = true};
  if (!deps_expr(&D, f)) return NULL;
  const tir_expr_t* E = L->u.loop.dyn_extent;
  const int64_t mx = L->u.loop.extent;
  if (mx < (E ? LANES : 2 * LANES)) return NULL;
  *matched = true;
  const int64_t nl = LANES;
  const tir_buffer_t* lanes = tir_buffer(c, "lanes", KILN_DTYPE_F32, 1, &nl, TIR_SCOPE_PRIVATE);
  const tir_var_t *l0 = tir_var(c, "rl"), *l1 = tir_var(c, "rl"), *l2 = tir_var(c, "rl");
  const tir_var_t *ro = var2(X, r->name, "o"), *rr = var2(X, r->name, "r");
  if (!lanes || !l0 || !l1 || !l2 || !ro || !rr) return NULL;
  const tir_expr_t* const* di = init->u.store.idx;
  const tir_expr_t* z = I(X, 0);
  const tir_stmt_t* items[5];
  const tir_expr_t* x0 = V(X, l0);
  items[0] = tir_for(c, l0, LANES, TIR_LOOP_VECTORIZED, tir_store(c, lanes, &x0, init->u.store.value));
  const tir_expr_t* x1 = V(X, l1);
  const tir_expr_t* at = ADD(X, MULC(X, V(X, ro), LANES), x1);
  const tir_expr_t* f1 = tir_substitute_expr(c, f, 1, &r, &at);
  const tir_stmt_t* body = tir_for(c, l1, LANES, TIR_LOOP_VECTORIZED,
                                   tir_store(c, lanes, &x1, tir_bin(c, op, tir_load(c, lanes, &x1), f1)));
  const tir_expr_t* full = E ? tir_bin(c, TIR_FLOORDIV, E, I(X, LANES)) : NULL;
  items[1] = E ? tir_for_dyn(c, ro, mx / LANES, full, TIR_LOOP_SERIAL, body) : tir_for(c, ro, mx / LANES, TIR_LOOP_SERIAL, body);
  items[2] = tir_store(c, d, di, tir_load(c, lanes, &z));
  const tir_expr_t* x2 = ADD(X, V(X, l2), I(X, 1));
  items[3] = tir_for(c, l2, LANES - 1, TIR_LOOP_SERIAL,
                     tir_store(c, d, di, tir_bin(c, op, tir_load(c, d, di), tir_load(c, lanes, &x2))));
  items[4] = NULL;
  if (E) {
    const tir_expr_t* xr = ADD(X, MULC(X, full, LANES), V(X, rr));
    const tir_expr_t* fr = tir_substitute_expr(c, f, 1, &r, &xr);
    const tir_stmt_t* t = tir_store(c, d, di, tir_bin(c, op, tir_load(c, d, di), fr));
    t = tir_if(c, tir_bin(c, TIR_LT, xr, E), t, NULL);
    items[4] = tir_for_dyn(c, rr, mx < LANES - 1 ? mx : LANES - 1, tir_bin(c, TIR_FLOORMOD, E, I(X, LANES)),
                           TIR_LOOP_SERIAL, t);
    if (!items[4]) return NULL;
  } else if (mx % LANES) {
    const tir_expr_t* xr = ADD(X, I(X, mx / LANES * LANES), V(X, rr));
    const tir_expr_t* fr = tir_substitute_expr(c, f, 1, &r, &xr);
    items[4] = tir_for(c, rr, mx % LANES, TIR_LOOP_SERIAL,
                       tir_store(c, d, di, tir_bin(c, op, tir_load(c, d, di), fr)));
    if (!items[4]) return NULL;
  }
  for (int i = 0; i < 4; ++i)
    if (!items[i]) return NULL;
  X->reductions++;
  return tir_alloc(c, lanes, tir_seq(c, 5, items));
}

static const tir_stmt_t* reduce_post(tir_mutator_t* m, const tir_stmt_t* s) {
  kx_t* X = m->user;
  if (s->kind != TIR_SEQ) return s;
  const int32_t n = s->u.seq.n;
  const tir_stmt_t** items = kiln_arena_alloc(&X->c->arena, sizeof(*items) * (size_t)(n ? n : 1));
  if (!items) return NULL;
  int32_t k = 0;
  bool any = false;
  for (int32_t i = 0; i < n; ++i) {
    bool matched = false;
    const tir_stmt_t* r = i + 1 < n ? lane_reduce(X, s->u.seq.items[i], s->u.seq.items[i + 1], &matched) : NULL;
    if (matched && !r) return NULL;
    if (matched) {
      items[k++] = r;
      ++i;
      any = true;
    } else {
      items[k++] = s->u.seq.items[i];
    }
  }
  return any ? tir_seq(X->c, k, items) : s;
}

/* ---- maps ---------------------------------------------------------------------- */

static const tir_stmt_t* map_post(tir_mutator_t* m, const tir_stmt_t* s) {
  kx_t* X = m->user;
  tir_ctx_t* c = X->c;
  if (s->kind != TIR_FOR || s->u.loop.kind != TIR_LOOP_SERIAL) return s;
  const tir_stmt_t* st = s->u.loop.body;
  if (st->kind != TIR_STORE || st->u.store.buf->dtype != KILN_DTYPE_F32) return s;
  const tir_var_t* v = s->u.loop.var;
  deps_t D = {.v = v, .ok = true};
  if (!collect_stores(&D, st) || !deps_stmt(&D, st)) return s;
  const tir_expr_t* E = s->u.loop.dyn_extent;
  const int64_t mx = s->u.loop.extent;
  if (!E) {
    if (mx < 4 || mx % 4) return s;
    X->maps++;
    return tir_for(c, v, mx, TIR_LOOP_VECTORIZED, st);
  }
  if (mx < LANES) return s;
  const tir_var_t *vo = var2(X, v->name, "o"), *vi = var2(X, v->name, "i"), *vr = var2(X, v->name, "r");
  if (!vo || !vi || !vr) return NULL;
  const tir_expr_t* full = tir_bin(c, TIR_FLOORDIV, E, I(X, LANES));
  const tir_expr_t* x = ADD(X, MULC(X, V(X, vo), LANES), V(X, vi));
  const tir_stmt_t* main = tir_for(c, vi, LANES, TIR_LOOP_VECTORIZED, tir_substitute_stmt(c, st, 1, &v, &x));
  main = tir_for_dyn(c, vo, mx / LANES, full, TIR_LOOP_SERIAL, main);
  const tir_expr_t* xr = ADD(X, MULC(X, full, LANES), V(X, vr));
  const tir_stmt_t* rest = tir_if(c, tir_bin(c, TIR_LT, xr, E), tir_substitute_stmt(c, st, 1, &v, &xr), NULL);
  rest = tir_for_dyn(c, vr, LANES - 1, tir_bin(c, TIR_FLOORMOD, E, I(X, LANES)), TIR_LOOP_SERIAL, rest);
  if (!main || !rest) return NULL;
  X->maps++;
  return tir_seq2(c, main, rest);
}

/* ---- driver ---------------------------------------------------------------------- */

/* Lays constant B out in its tile panels (checked by try_pack: dense
 * [K][N] f32, N a multiple of nr) and gives its plan buffer the packed
 * buffer. */
static kiln_status_t commit_pack(kiln_plan_t* plan, int32_t k, const pack_t* pk) {
  kiln_plan_buffer_t* pb = &plan->buffers[plan->kernels[k].args[pk->param]];
  kiln_shape_t shape = kiln_shape_make(3, pk->to->shape);
  kiln_array_t v;
  KILN_RETURN_IF_ERROR(kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_F32, &shape, &v),
                       "packing constant '%s' of kernel '%s'", pk->to->name, plan->kernels[k].func->name);
  const float* src = pb->value.data;
  float* dst = v.data;
  for (int64_t t = 0; t < pk->N / pk->nr; ++t)
    for (int64_t kk = 0; kk < pk->K; ++kk)
      memcpy(dst + (t * pk->K + kk) * pk->nr, src + kk * pk->N + t * pk->nr, sizeof(float) * (size_t)pk->nr);
  if (pb->owned) kiln_array_free(kiln_allocator_system(), &pb->value);
  pb->value = v;
  pb->owned = true;
  pb->buf = pk->to;
  return NULL;
}

static const tir_stmt_t* walk(kx_t* X, const tir_stmt_t* s, const tir_stmt_t* (*post)(tir_mutator_t*, const tir_stmt_t*)) {
  tir_mutator_t m = {.ctx = X->c, .user = X, .stmt_post = post};
  if (post == gemm_post) m.stmt_pre = gemm_pre;
  if (post == gemm_gpu_post) m.stmt_pre = gemm_gpu_pre;
  return tir_mutate_stmt(&m, s);
}

static kiln_status_t kernels_fast(kiln_plan_t* plan, int32_t lanes, int32_t regs, bool gemms, int64_t loop_limit,
                                  kiln_plan_seq_kern_report_t* out) {
  memset(out, 0, sizeof *out);
  if (!plan || plan->n_dims != 1)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_plan_seq_kernels_fast: not a plan over a range of one dim");
  tir_ctx_t* c = &plan->tir;
  const int64_t lo = plan->dims[0].lo, hi = plan->dims[0].hi;
  for (int32_t k = 0; k < plan->n_kernels; ++k) {
    kiln_plan_kernel_t* kk = &plan->kernels[k];
    const tir_func_t* f = kk->func;
    if (kk->tmpl || kk->custom || kk->host || f->n_params < 1) continue;
    const tir_buffer_t* dims = f->params[f->n_params - 1];
    kx_t X;
    memset(&X, 0, sizeof X);
    X.c = c, X.lanes = lanes > 0 ? lanes : 4, X.regs = regs > 0 ? regs : 16;
    X.plan = plan, X.kernel = k, X.f = f, X.loop_limit = loop_limit;
    const tir_stmt_t* b = gemms ? f->body : nests_parallel(&X, f->body);
    if (b) b = walk(&X, b, gemms ? gemm_post : gemm_gpu_post);
    if (b) b = walk(&X, b, reduce_post);
    if (b) b = walk(&X, b, map_post);
    const tir_buffer_t** params = kiln_arena_alloc(&c->arena, sizeof(*params) * (size_t)f->n_params);
    if (params) {
      memcpy(params, f->params, sizeof(*params) * (size_t)f->n_params);
      for (int32_t i = 0; i < X.npacks; ++i) params[X.packs[i].param] = X.packs[i].to;
    }
    tir_func_t* nf = b && params ? tir_func(c, f->name, f->n_params, params, b) : NULL;
    if (nf) nf = tir_simplify_func(c, nf);
    if (!nf) {
      kiln_status_t st = tir_ctx_status(c);
      return st ? kiln_status_annotate(st, "making kernel '%s' fast over a range", f->name)
                : kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory making kernel '%s' fast over a range", f->name);
    }
    if (b == f->body) continue;
    kiln_status_t st = tir_verify_dims(nf, dims, 1, &lo, &hi);
    if (st) {
      /* a rewrite the verifier cannot follow: the plain form stays */
      if (!out->kept) {
        out->kept_kernel = f->name;
        out->kept_why = kiln_arena_strndup(&c->arena, kiln_status_message(st), strlen(kiln_status_message(st)));
      }
      out->kept++;
      kiln_status_free(st);
      continue;
    }
    for (int32_t i = 0; i < X.npacks; ++i)
      KILN_RETURN_IF_ERROR(commit_pack(plan, k, &X.packs[i]));
    kk->func = nf;
    out->gemms += X.gemms;
    out->reductions += X.reductions;
    out->maps += X.maps;
    out->packed += X.npacks;
    out->split += X.split;
    out->over_limit += X.over_limit;
    out->nests += X.nests;
  }
  return NULL;
}

kiln_status_t kiln_plan_seq_kernels_fast(kiln_plan_t* plan, int32_t lanes, int32_t regs,
                                         kiln_plan_seq_kern_report_t* out) {
  return kernels_fast(plan, lanes, regs, true, 0, out);
}

kiln_status_t kiln_plan_seq_kernels_lanes(kiln_plan_t* plan, int32_t lanes, int64_t loop_limit,
                                          kiln_plan_seq_kern_report_t* out) {
  return kernels_fast(plan, lanes, 0, false, loop_limit, out);
}
