/* Slice folding (CPU plans, after fusion): a kernel that only copies an
 * intermediate X into a sub-box of a conv's zero-padded temp S
 * (`for v: S[v + off] = X[v]`, lowering/lower_nn_conv_blocked.c's
 * bc_pad_interior) is dropped, and X lives in that sub-box instead: every
 * other kernel that stores X (its producers) stores S[idx + off], every one
 * that loads X (the residual Add, a strided 1x1 downsample, ...) loads
 * S[idx + off]. The conv's border kernel zeroes the rest of S, so the conv
 * reads its padded input without a copy of X.
 *
 * Taken when X is an intermediate nobody views (no alias, not a graph
 * output), S is a workspace of the copy's Conv node (only that node's
 * kernels touch it, the border kernel writing outside the sub-box), the
 * copy is the whole of X into S with dim 0 (the images) unshifted, and
 * every other kernel touching X is a printed kernel (no template, no
 * plugin) that names X once through a buffer of X's own shape (a kernel
 * touching S as well only reads X: the conv with X in its epilogue, whose
 * X parameter then goes). Where X has one reader, the copy was already folded into X's
 * producer by epilogue fusion (a Concat part's store); this pass covers
 * the tensors read by the conv and others too (ResNet's block outputs,
 * read by the next block's first conv and its residual Add or
 * downsample). */
#include <stdlib.h>
#include <string.h>

#include "ir/tir_visit.h"
#include "lowering/fuse.h"

typedef struct sl_s {
  const tir_buffer_t *x, *s; /* X as the kernel names it, S as the copy does */
  const int64_t* off;
} sl_t;

static const tir_expr_t* const* sl_idx(tir_ctx_t* c, const sl_t* u, const tir_expr_t* const* idx) {
  const tir_expr_t** out = kiln_arena_alloc(&c->arena, sizeof(*out) * (size_t)u->s->rank);
  if (!out) return NULL;
  for (int32_t i = 0; i < u->s->rank; ++i) out[i] = u->off[i] ? tir_add(c, idx[i], tir_int(c, u->off[i])) : idx[i];
  return out;
}

static const tir_expr_t* sl_expr(tir_mutator_t* m, const tir_expr_t* e) {
  const sl_t* u = m->user;
  if (e->kind != TIR_LOAD || e->u.load.buf != u->x) return e;
  const tir_expr_t* const* idx = sl_idx(m->ctx, u, e->u.load.idx);
  return idx ? tir_load(m->ctx, u->s, idx) : NULL;
}

static const tir_stmt_t* sl_stmt(tir_mutator_t* m, const tir_stmt_t* s) {
  const sl_t* u = m->user;
  if ((s->kind != TIR_STORE && s->kind != TIR_PREFETCH) || s->u.store.buf != u->x) return s;
  const tir_expr_t* const* idx = sl_idx(m->ctx, u, s->u.store.idx);
  if (!idx) return NULL;
  return s->kind == TIR_STORE ? tir_store(m->ctx, u->s, idx, s->u.store.value) : tir_prefetch(m->ctx, u->s, idx);
}

/* |f| with X's loads, stores and prefetches moved into S's sub-box; X's
 * parameter becomes S, or goes where |f| has S already (the conv reading
 * S whose epilogue reads X too). The matching args (|args|, |s| for S) go
 * to *out_args (NULL: not wanted). */
static tir_func_t* sl_func(tir_ctx_t* c, const tir_func_t* f, const sl_t* u, bool has_s, const int32_t* args,
                           int32_t s, int32_t** out_args) {
  sl_t uu = *u;
  tir_mutator_t m = {.ctx = c, .user = &uu, .stmt_post = sl_stmt, .expr_post = sl_expr};
  const tir_stmt_t* body = tir_mutate_stmt(&m, f->body);
  if (!body) return NULL;
  const tir_buffer_t** params = kiln_arena_alloc(&c->arena, sizeof(*params) * (size_t)(f->n_params + 1));
  int32_t* as = out_args ? kiln_arena_alloc(&c->arena, sizeof(*as) * (size_t)(f->n_params + 1)) : NULL;
  if (!params || (out_args && !as)) return NULL;
  int32_t n = 0;
  for (int32_t i = 0; i < f->n_params; ++i) {
    if (f->params[i] == u->x && has_s) continue;
    if (as) as[n] = f->params[i] == u->x ? s : args[i];
    params[n++] = f->params[i] == u->x ? u->s : f->params[i];
  }
  if (out_args) *out_args = as;
  return tir_func(c, f->name, n, params, body);
}

/* The copy form: perfect serial nest v0..vr-1 over X's shape whose one
 * statement is S[v + off] = X[v] (f32, same rank, dim 0 unshifted, the
 * box inside S and smaller than it). */
static bool sl_match(const tir_func_t* f, const tir_buffer_t** X, const tir_buffer_t** S, int64_t* off) {
  const tir_var_t* var[KILN_MAX_RANK];
  int64_t ext[KILN_MAX_RANK];
  int32_t r = 0;
  const tir_stmt_t* s = f->body;
  while (s && s->kind == TIR_FOR) {
    if (r >= KILN_MAX_RANK || s->u.loop.kind != TIR_LOOP_SERIAL || s->u.loop.dyn_extent) return false;
    ext[r] = s->u.loop.extent;
    var[r++] = s->u.loop.var;
    s = s->u.loop.body;
  }
  if (s && s->kind == TIR_SEQ && s->u.seq.n == 1) s = s->u.seq.items[0];
  if (!s || s->kind != TIR_STORE) return false;
  const tir_buffer_t* y = s->u.store.buf;
  const tir_expr_t* v = s->u.store.value;
  if (v->kind != TIR_LOAD) return false;
  const tir_buffer_t* x = v->u.load.buf;
  if (x == y || x->rank != r || y->rank != r || x->dtype != KILN_DTYPE_F32 || y->dtype != KILN_DTYPE_F32) return false;
  bool shifted = false;
  for (int32_t i = 0; i < r; ++i) {
    if (ext[i] != x->shape[i]) return false;
    for (int32_t j = 0; j < i; ++j)
      if (var[j] == var[i]) return false;
    const tir_expr_t* xi = v->u.load.idx[i];
    if (xi->kind != TIR_VARREF || xi->u.var != var[i]) return false;
    const tir_expr_t* e = s->u.store.idx[i];
    off[i] = 0;
    if (e->kind == TIR_BINARY && e->u.bin.op == TIR_ADD && e->u.bin.b->kind == TIR_INT) {
      off[i] = e->u.bin.b->u.i;
      e = e->u.bin.a;
    }
    if (e->kind != TIR_VARREF || e->u.var != var[i]) return false;
    if (off[i] < 0 || off[i] + ext[i] > y->shape[i] || (i == 0 && off[i] != 0)) return false;
    shifted |= off[i] != 0 || ext[i] != y->shape[i]; /* a box at offset 0 too (pads only bottom / right) */
  }
  *X = x;
  *S = y;
  return shifted;
}

static bool row_major(const tir_buffer_t* b) {
  int64_t st = 1;
  for (int32_t i = b->rank - 1; i >= 0; --i) {
    if (b->shape[i] > 1 && b->strides[i] != st) return false;
    st *= b->shape[i];
  }
  return true;
}

static bool same_shape(const tir_buffer_t* a, const tir_buffer_t* b) {
  if (a->rank != b->rank || a->dtype != b->dtype || !row_major(a)) return false;
  for (int32_t i = 0; i < a->rank; ++i)
    if (a->shape[i] != b->shape[i]) return false;
  return true;
}

/* The parameter of kernel |k| naming root |b| (NULL: none; *twice when
 * two do). */
static const tir_buffer_t* param_for(const kiln_plan_t* p, const kiln_plan_kernel_t* k, int32_t b, bool* twice) {
  const tir_buffer_t* found = NULL;
  for (int32_t i = 0; i < k->func->n_params; ++i)
    if (kiln_plan_root(p, k->args[i]) == b) {
      if (found) *twice = true;
      found = k->func->params[i];
    }
  return found;
}

static bool viewed(const kiln_plan_t* p, int32_t b) {
  for (int32_t i = 0; i < p->n_buffers; ++i)
    if (i != b && kiln_plan_root(p, i) == b) return true;
  for (int32_t i = 0; i < p->graph->n_outputs; ++i)
    if (p->outputs && p->outputs[i] >= 0 && kiln_plan_root(p, p->outputs[i]) == b) return true;
  return false;
}

/* Folds copy kernel |kc| when the conditions above hold; *done tells. */
static kiln_status_t fold_one(kiln_plan_t* p, int32_t kc, bool* done) {
  *done = false;
  kiln_plan_kernel_t* K = &p->kernels[kc];
  const tir_buffer_t *X = NULL, *S = NULL;
  int64_t off[KILN_MAX_RANK];
  if (K->custom || K->tmpl || K->host || !K->naive || !sl_match(K->naive, &X, &S, off)) return NULL;
  if (K->node < 0 || K->node >= p->graph->n_nodes || strcmp(p->graph->nodes[K->node].op_type, "Conv")) return NULL;
  int32_t x = -1, s = -1, sarg = -1;
  for (int32_t i = 0; i < K->func->n_params; ++i) {
    if (K->func->params[i] == X) x = kiln_plan_root(p, K->args[i]);
    if (K->func->params[i] == S) s = kiln_plan_root(p, K->args[i]), sarg = K->args[i];
  }
  if (x < 0 || s < 0 || x == s || sarg != s) return NULL;
  if (p->buffers[x].kind != KILN_PLAN_INTERMEDIATE || p->buffers[x].alias_of >= 0 || viewed(p, x)) return NULL;
  if (p->buffers[s].kind != KILN_PLAN_TEMP || p->buffers[s].alias_of >= 0 || viewed(p, s)) return NULL;
  if (!same_shape(S, p->buffers[s].buf)) return NULL;
  /* every kernel touching S is the conv's; every other one touching X
   * names it once through a buffer of X's shape, and not S */
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    if (k == kc) continue;
    const kiln_plan_kernel_t* pk = &p->kernels[k];
    bool twice = false;
    const tir_buffer_t* xs = param_for(p, pk, x, &twice);
    const tir_buffer_t* ss = param_for(p, pk, s, &twice);
    if (ss && pk->node != K->node) return NULL;
    if (!xs) continue;
    if (twice || pk->custom || pk->tmpl || pk->host || !same_shape(xs, X) || (ss && !same_shape(ss, S))) return NULL;
    /* reading S and X (the conv with X in its epilogue), never writing X */
    if (ss && (tir_func_buffer_access(pk->func, xs) & TIR_ACCESS_STORE)) return NULL;
  }
  tir_ctx_t* c = &p->tir;
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    if (k == kc) continue;
    kiln_plan_kernel_t* pk = &p->kernels[k];
    bool twice = false;
    const tir_buffer_t* xs = param_for(p, pk, x, &twice);
    if (!xs) continue;
    const tir_buffer_t* ss = param_for(p, pk, s, &twice);
    sl_t u = {xs, ss ? ss : S, off};
    int32_t* args = NULL;
    tir_func_t* nf = sl_func(c, pk->func, &u, ss != NULL, pk->args, s, &args);
    bool naive_s = false;
    for (int32_t i = 0; ss && pk->naive && i < pk->naive->n_params; ++i) naive_s |= pk->naive->params[i] == ss;
    tir_func_t* nn = pk->naive ? sl_func(c, pk->naive, &u, naive_s, pk->args, s, NULL) : NULL;
    KILN_RETURN_IF_ERROR(tir_ctx_status(c));
    if (!nf || (pk->naive && !nn)) return kiln_make_status(KILN_OUT_OF_MEMORY, "fuse: folding %s", X->name);
    KILN_RETURN_IF_ERROR(tir_verify(nf));
    pk->func = nf;
    pk->args = args;
    if (nn) pk->naive = nn;
  }
  /* the copy is gone */
  for (int32_t k = kc; k + 1 < p->n_kernels; ++k) p->kernels[k] = p->kernels[k + 1];
  --p->n_kernels;
  *done = true;
  return NULL;
}

kiln_status_t kiln_plan_fold_slices(kiln_plan_t* p, int32_t* folded) {
  if (folded) *folded = 0;
  if (!p || p->target != KILN_TARGET_CLASS_CPU || p->n_dims > 0) return NULL;
  for (int32_t k = 0; k < p->n_kernels;) {
    bool done = false;
    KILN_RETURN_IF_ERROR(fold_one(p, k, &done));
    if (done) {
      if (folded) ++*folded;
    } else {
      ++k;
    }
  }
  return NULL;
}
