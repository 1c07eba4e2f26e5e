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
