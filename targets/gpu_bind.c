/* GPU binding of CPU-style schedules (OpenCL and SPIR-V targets).
 *
 * The GEMM, convolution, pooling, normalisation and reduction lowerings
 * schedule for CPU threads even in a GPU plan: their outermost loop is
 * PARALLEL (independent iterations, by the PARALLEL contract) and nothing is
 * bound, so printed as is the whole kernel would run on one work-item. Here
 * that loop becomes work-groups x work-items:
 *   for v in [0, E) PARALLEL: S(v)
 *     ->  for g in [0, G) BLOCK_X: for l in [0, L) THREAD_X:
 *           if (g * L + l < E) S(g * L + l)
 * with L = 1 for small E and L = how->lanes otherwise. Only kernels without
 * bound loops or barriers are touched, so no barrier ends up under the
 * guard. Scoped allocations around the loop stay where they are (PRIVATE is
 * per work-item anyway; LOCAL ones would be shared, so a kernel with a LOCAL
 * alloc outside the loop is left alone). */
#include "targets/gpu_bind.h"

#include "ir/tir_visit.h"

void kiln_gpu_bind_scan(const tir_stmt_t* s, bool local_bad, bool* bad) {
  if (!s || *bad) return;
  switch (s->kind) {
    case TIR_FOR:
      if (s->u.loop.kind == TIR_LOOP_BOUND) *bad = true;
      kiln_gpu_bind_scan(s->u.loop.body, local_bad, bad);
      return;
    case TIR_SEQ:
      for (int32_t i = 0; i < s->u.seq.n; ++i) kiln_gpu_bind_scan(s->u.seq.items[i], local_bad, bad);
      return;
    case TIR_IF:
      kiln_gpu_bind_scan(s->u.cond.then_s, local_bad, bad);
      kiln_gpu_bind_scan(s->u.cond.else_s, local_bad, bad);
      return;
    case TIR_ALLOC:
      if (local_bad && s->u.alloc.buf->scope == TIR_SCOPE_LOCAL) *bad = true;
      kiln_gpu_bind_scan(s->u.alloc.body, local_bad, bad);
      return;
    case TIR_BARRIER:
      *bad = true;
      return;
    case TIR_STORE:
    case TIR_PREFETCH:
      return;
  }
}

/* Rebuilds the ALLOC chain above the PARALLEL loop around |inner|. */
static const tir_stmt_t* rewrap(tir_ctx_t* c, const tir_stmt_t* s, const tir_stmt_t* inner) {
  if (s->kind != TIR_ALLOC) return inner;
  return tir_alloc(c, s->u.alloc.buf, rewrap(c, s->u.alloc.body, inner));
}

kiln_status_t kiln_gpu_bind_parallel(tir_ctx_t* c, const tir_func_t* f, const kiln_gpu_bind_t* how,
                                     const tir_func_t** out) {
  *out = NULL;
  bool bad = false;
  kiln_gpu_bind_scan(f->body, false, &bad);
  if (bad) return NULL;
  const tir_stmt_t* s = f->body;
  while (s && s->kind == TIR_ALLOC) {
    if (s->u.alloc.buf->scope == TIR_SCOPE_LOCAL) return NULL;
    s = s->u.alloc.body;
  }
  if (!s || s->kind != TIR_FOR || s->u.loop.kind != TIR_LOOP_PARALLEL) return NULL;
  const int64_t E = s->u.loop.extent;
  if (E <= 1) return NULL;
  const int64_t L = E <= how->small_extent || how->lanes < 2 ? 1 : how->lanes;
  const int64_t G = (E + L - 1) / L;
  tir_var_t* vg = tir_var(c, "wg");
  tir_var_t* vl = L > 1 ? tir_var(c, "wi") : NULL;
  if (!vg || (L > 1 && !vl)) return tir_ctx_status(c);
  const tir_expr_t* idx = tir_ref(c, vg);
  if (L > 1) idx = tir_add(c, tir_mul(c, idx, tir_int(c, L)), tir_ref(c, vl));
  const tir_var_t* v = s->u.loop.var;
  const tir_stmt_t* body = tir_substitute_stmt(c, s->u.loop.body, 1, &v, &idx);
  if (G * L != E) body = tir_if(c, tir_bin(c, TIR_LT, idx, tir_int(c, E)), body, NULL);
  if (L > 1) body = tir_for_bound(c, vl, L, TIR_THREAD_X, body);
  body = tir_for_bound(c, vg, G, TIR_BLOCK_X, body);
  body = rewrap(c, f->body, body);
  tir_func_t* nf = body ? tir_func(c, f->name, f->n_params, f->params, body) : NULL;
  if (!nf) return tir_ctx_status(c);
  *out = nf;
  return NULL;
}

/* ---- grids past a device's work-group count ------------------------------ */

typedef struct fold_s {
  int64_t max;
  tir_thread_tag_t into; /* BLOCK_Y or BLOCK_Z */
  const char* fail;      /* set when a loop cannot fold */
} fold_t;

/* The grid dimensions |s|'s bound loops take and its widest BLOCK_X loop
 * (0: none), in one walk. */
typedef struct grid_scan_s {
  bool used[TIR_THREAD_Z + 1];
  int64_t widest_x;
} grid_scan_t;

static bool grid_pre(tir_visitor_t* v, const tir_stmt_t* s) {
  grid_scan_t* g = v->user;
  if (s->kind == TIR_FOR && s->u.loop.kind == TIR_LOOP_BOUND && s->u.loop.tag <= TIR_THREAD_Z) {
    g->used[s->u.loop.tag] = true;
    if (s->u.loop.tag == TIR_BLOCK_X && s->u.loop.extent > g->widest_x) g->widest_x = s->u.loop.extent;
  }
  return true;
}

/*   for g in [0, G) BLOCK_X: S(g)
 *   ->  for gy in [0, Gy) INTO: for gx in [0, Gx) BLOCK_X:
 *         if (gy * Gx + gx < G) S(gy * Gx + gx)
 * with Gx, Gy <= max; Gy divides G where a divisor near G / max does (no
 * guard then). The guard only depends on the work-group's ids, so barriers
 * under it stay in uniform control flow. */
static bool fold_pre(tir_mutator_t* m, const tir_stmt_t* s, const tir_stmt_t** out) {
  fold_t* fo = m->user;
  if (s->kind != TIR_FOR || s->u.loop.kind != TIR_LOOP_BOUND || s->u.loop.tag != TIR_BLOCK_X ||
      s->u.loop.extent <= fo->max)
    return false;
  tir_ctx_t* c = m->ctx;
  const int64_t G = s->u.loop.extent;
  if (s->u.loop.dyn_extent || G > fo->max * fo->max) {
    fo->fail = s->u.loop.dyn_extent ? "a run-time extent" : "more than max^2 work-groups";
    *out = NULL;
    return true;
  }
  int64_t gy = (G + fo->max - 1) / fo->max, gx = (G + gy - 1) / gy;
  for (int64_t d = gy; d <= gy + 256 && d <= fo->max; ++d)
    if (G % d == 0 && G / d <= fo->max) {
      gy = d;
      gx = G / d;
      break;
    }
  tir_var_t* vy = tir_var(c, "wgy");
  tir_var_t* vx = tir_var(c, "wgx");
  const tir_expr_t* idx = tir_add(c, tir_mul(c, tir_ref(c, vy), tir_int(c, gx)), tir_ref(c, vx));
  const tir_var_t* v = s->u.loop.var;
  const tir_stmt_t* body = tir_substitute_stmt(c, s->u.loop.body, 1, &v, &idx);
  if (gx * gy != G) body = tir_if(c, tir_bin(c, TIR_LT, idx, tir_int(c, G)), body, NULL);
  body = tir_for_bound(c, vx, gx, TIR_BLOCK_X, body);
  *out = tir_for_bound(c, vy, gy, fo->into, body);
  return true;
}

kiln_status_t kiln_gpu_fold_grid(tir_ctx_t* c, const tir_func_t* f, int64_t max, bool z_free,
                                 const tir_func_t** out) {
  *out = f;
  if (!f || max < 1) return NULL;
  grid_scan_t scan = {{false}, 0};
  tir_visitor_t v = {.user = &scan, .stmt_pre = grid_pre};
  tir_visit_stmt(&v, f->body);
  if (scan.widest_x <= max) return NULL;
  fold_t fo = {max, TIR_BLOCK_Y, NULL};
  if (scan.used[TIR_BLOCK_Y]) {
    if (scan.used[TIR_BLOCK_Z] || !z_free)
      return kiln_make_status(KILN_UNSUPPORTED,
                              "kernel '%s' launches %lld work-groups in dimension 0 (at most %lld) and its other "
                              "grid dimensions are taken",
                              f->name, (long long)scan.widest_x, (long long)max);
    fo.into = TIR_BLOCK_Z;
  }
  tir_mutator_t m = {.ctx = c, .user = &fo, .stmt_pre = fold_pre};
  const tir_stmt_t* body = tir_mutate_stmt(&m, f->body);
  if (fo.fail)
    return kiln_make_status(KILN_UNSUPPORTED, "kernel '%s' launches %lld work-groups in dimension 0 (at most %lld): %s",
                            f->name, (long long)scan.widest_x, (long long)max, fo.fail);
  tir_func_t* nf = body ? tir_func(c, f->name, f->n_params, f->params, body) : NULL;
  if (!nf) return tir_ctx_status(c);
  *out = nf;
  return NULL;
}
