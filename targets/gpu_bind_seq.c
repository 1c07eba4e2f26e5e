/* A range program's kernel on a GPU target (see gpu_bind_seq.h):
 *   for v in [0, E(n)) PARALLEL: S(v)
 *     ->  for z in [0, hi) BLOCK_Z: for g in [0, G) BLOCK_X: for l in [0, L) THREAD_X:
 *           x = g * L + l; v = z * C + x
 *           if (x < C && v < E(n)) S(v)
 * The device launches z only to the run's n, so the grid follows the run's
 * length with no grid sizes in the module: a kernel whose loop is C rows of
 * the length per slice (an activation's rows, a GEMM's rows) launches
 * exactly its work at every n. A slice of fewer iterations than a work-group
 * of a large loop takes whole work-groups of them instead (the slices past
 * E(n) then launch and do nothing). */
#include "targets/gpu_bind_seq.h"

#include "ir/tir_analysis.h"

/* |e| with every load (of the dims buffer: a run-time extent loads only
 * kernel parameters, which in a range program is the dims buffer) at |n|. */
static bool eval_at(const tir_expr_t* e, int64_t n, int64_t* out) {
  int64_t a, b;
  switch (e->kind) {
    case TIR_INT:
      *out = e->u.i;
      return true;
    case TIR_LOAD:
      *out = n;
      return true;
    case TIR_CAST:
      return eval_at(e->u.cast.value, n, out);
    case TIR_BINARY:
      if (!eval_at(e->u.bin.a, n, &a) || !eval_at(e->u.bin.b, n, &b)) return false;
      switch (e->u.bin.op) {
        case TIR_ADD: *out = a + b; return true;
        case TIR_SUB: *out = a - b; return true;
        case TIR_MUL: *out = a * b; return true;
        case TIR_MIN: *out = a < b ? a : b; return true;
        case TIR_MAX: *out = a > b ? a : b; return true;
        case TIR_FLOORDIV:
          if (!b) return false;
          *out = tir_floordiv_i64(a, b);
          return true;
        default: return false;
      }
    default: return false;
  }
}

static const tir_stmt_t* rewrap(tir_ctx_t* c, const tir_stmt_t* s, const tir_stmt_t* inner) {
  if (s->kind != TIR_ALLOC) return inner;
  return tir_alloc(c, s->u.alloc.buf, rewrap(c, s->u.alloc.body, inner));
}

static kiln_status_t oom(tir_ctx_t* c) {
  kiln_status_t s = tir_ctx_status(c);
  return s ? s : kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory binding a range kernel");
}

kiln_status_t kiln_gpu_bind_seq(tir_ctx_t* c, const tir_func_t* f, int64_t lo, int64_t hi, const kiln_gpu_bind_t* how,
                                const tir_func_t** out) {
  *out = NULL;
  bool bad = false;
  kiln_gpu_bind_scan(f->body, true, &bad);
  if (bad)
    return kiln_make_status(KILN_UNSUPPORTED, "kernel '%s' of a range program is bound to the grid or shares work-group "
                            "memory already (its grid cannot follow the run's length)", f->name);
  const tir_stmt_t* s = f->body;
  while (s && s->kind == TIR_ALLOC) s = s->u.alloc.body;
  tir_var_t* vz = tir_var(c, "wz");
  if (!vz) return oom(c);
  const tir_expr_t* z = tir_ref(c, vz);
  const tir_stmt_t* body = NULL;
  if (s && s->kind == TIR_FOR && s->u.loop.kind == TIR_LOOP_PARALLEL) {
    const tir_expr_t* dyn = s->u.loop.dyn_extent;
    const int64_t top = s->u.loop.extent;
    int64_t C = 1;
    bool exact = true; /* E(n) == C * n at every n: no guard on v */
    for (int64_t n = lo; n <= hi; ++n) {
      int64_t e = top;
      if (dyn && !eval_at(dyn, n, &e))
        return kiln_make_status(KILN_UNSUPPORTED, "kernel '%s': its parallel loop's run-time extent is not an integer "
                                "expression of the dims", f->name);
      if (e < 0 || e > top)
        return kiln_make_status(KILN_INTERNAL, "kernel '%s': run-time extent %lld at %lld outside 0..%lld", f->name,
                                (long long)e, (long long)n, (long long)top);
      const int64_t per = (e + n - 1) / n;
      if (per > C) C = per;
    }
    for (int64_t n = lo; n <= hi && exact; ++n) {
      int64_t e = top;
      if (dyn) (void)eval_at(dyn, n, &e);
      exact = e == C * n;
    }
    /* few iterations per slice of a large loop (a softmax's rows, heads x
     * the length): slices of whole work-groups of them, the slices past
     * E(n) empty, rather than work-groups of a few items */
    const bool wide = top > how->small_extent && how->lanes >= 2;
    if (wide && C < how->lanes) {
      C *= (how->lanes + C - 1) / C;
      exact = false;
    }
    const int64_t L = !wide ? 1 : (how->lanes < C ? how->lanes : C);
    const int64_t G = (C + L - 1) / L;
    tir_var_t* vg = tir_var(c, "wg");
    tir_var_t* vl = L > 1 ? tir_var(c, "wi") : NULL;
    if (!vg || (L > 1 && !vl)) return oom(c);
    const tir_expr_t* x = tir_ref(c, vg);
    if (L > 1) x = tir_add(c, tir_mul(c, x, tir_int(c, L)), tir_ref(c, vl));
    const tir_expr_t* idx = tir_add(c, tir_mul(c, z, tir_int(c, C)), x);
    const tir_var_t* v = s->u.loop.var;
    body = tir_substitute_stmt(c, s->u.loop.body, 1, &v, &idx);
    const tir_expr_t* cond = NULL;
    if (!exact) cond = tir_bin(c, TIR_LT, idx, dyn ? dyn : tir_int(c, top));
    if (G * L != C) {
      const tir_expr_t* in = tir_bin(c, TIR_LT, x, tir_int(c, C));
      cond = cond ? tir_bin(c, TIR_AND, in, cond) : in;
    }
    if (cond) body = tir_if(c, cond, body, NULL);
    if (L > 1) body = tir_for_bound(c, vl, L, TIR_THREAD_X, body);
    body = tir_for_bound(c, vg, G, TIR_BLOCK_X, body);
  } else {
    /* no parallel loop: one work-item, in the first slice */
    body = tir_if(c, tir_bin(c, TIR_EQ, z, tir_int(c, 0)), s, NULL);
  }
  body = tir_for_bound(c, vz, hi, TIR_BLOCK_Z, body);
  body = rewrap(c, f->body, body);
  tir_func_t* nf = body ? tir_func(c, f->name, f->n_params, f->params, body) : NULL;
  if (!nf) return oom(c);
  *out = nf;
  return NULL;
}
