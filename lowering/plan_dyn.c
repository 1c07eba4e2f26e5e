/* Dynamic outer dims (see plan_dyn.h): a one-sample plan made to loop over
 * the samples at run time. */
#include "lowering/plan_dyn.h"

#include <string.h>

#include "ir/tir_visit.h"
#include "lowering/template.h"

/* Plan-internal (plan.c), declared where it is used as lower.c does. */
kiln_status_t kiln_plan_add_buffer(kiln_plan_t* p, const tir_buffer_t* b, kiln_plan_buffer_kind_t kind,
                                   int32_t tensor, int32_t* out_index);

/* A kernel's per-sample parameter: the buffer it had, the one it gets (dim
 * 0 grown to cover every sample, so the verifier's bounds hold for all of
 * them) and how far apart samples lie in units of dim 0. */
typedef struct repl_s {
  const tir_buffer_t* from;
  const tir_buffer_t* to;
  int64_t step;
} repl_t;

typedef struct wrap_s {
  const tir_var_t* n; /* the sample */
  repl_t* r;
  int32_t nr;
} wrap_t;

static const repl_t* find(const wrap_t* w, const tir_buffer_t* b) {
  for (int32_t i = 0; i < w->nr; ++i)
    if (w->r[i].from == b) return &w->r[i];
  return NULL;
}

/* idx with idx[0] + n * step, into |out|. */
static bool shift(tir_ctx_t* c, const wrap_t* w, const repl_t* r, const tir_expr_t* const* idx,
                  const tir_expr_t** out) {
  for (int32_t d = 0; d < r->to->rank; ++d) out[d] = idx[d];
  out[0] = tir_add(c, idx[0], tir_mul(c, tir_ref(c, w->n), tir_int(c, r->step)));
  return out[0] != NULL;
}

static const tir_expr_t* on_expr(tir_mutator_t* m, const tir_expr_t* e) {
  const wrap_t* w = m->user;
  const repl_t* r = e->kind == TIR_LOAD ? find(w, e->u.load.buf) : NULL;
  if (!r) return e;
  const tir_expr_t* idx[KILN_MAX_RANK];
  if (!shift(m->ctx, w, r, e->u.load.idx, idx)) return NULL;
  return tir_load(m->ctx, r->to, idx);
}

static const tir_stmt_t* on_stmt(tir_mutator_t* m, const tir_stmt_t* s) {
  const wrap_t* w = m->user;
  const repl_t* r = s->kind == TIR_STORE ? find(w, s->u.store.buf) : NULL;
  if (!r) return s;
  const tir_expr_t* idx[KILN_MAX_RANK];
  if (!shift(m->ctx, w, r, s->u.store.idx, idx)) return NULL;
  return tir_store(m->ctx, r->to, idx, s->u.store.value);
}

static bool par_pre(tir_visitor_t* v, const tir_stmt_t* s) {
  if (s->kind == TIR_FOR && s->u.loop.kind == TIR_LOOP_PARALLEL) {
    *(bool*)v->user = true;
    v->stop = true;
  }
  return true;
}

static bool has_parallel(const tir_stmt_t* s) {
  bool found = false;
  tir_visitor_t v = {.user = &found, .stmt_pre = par_pre};
  tir_visit_stmt(&v, s);
  return found;
}

bool kiln_plan_dyn_per_sample(const kiln_plan_t* p, int32_t b) {
  switch (p->buffers[kiln_plan_root(p, b)].kind) {
    case KILN_PLAN_INPUT:
    case KILN_PLAN_OUTPUT:
    case KILN_PLAN_INTERMEDIATE:
    case KILN_PLAN_TEMP:
      return true;
    default:
      return false;
  }
}

/* The replacement of parameter |b| (plan buffer |pb|): samples lie its
 * root's bytes apart, which must be a whole number of dim-0 steps. */
static kiln_status_t make_repl(kiln_plan_t* p, const kiln_plan_kernel_t* kk, const tir_buffer_t* b, int32_t pb,
                               const char* dim, int64_t hi, repl_t* out) {
  tir_ctx_t* c = &p->tir;
  const uint64_t root_bytes = tir_buffer_span_bytes(p->buffers[kiln_plan_root(p, pb)].buf);
  const uint64_t esize = kiln_dtype_size(b->dtype);
  const int64_t stride0 = b->rank > 0 ? b->strides[0] : 0;
  if (b->rank < 1 || stride0 <= 0 || !esize || root_bytes % esize || (root_bytes / esize) % (uint64_t)stride0)
    return kiln_make_status(KILN_UNSUPPORTED,
                            "node '%s' (%s): dim '%s' cannot be dynamic: its kernel's buffer '%s' (rank %d) cannot "
                            "step from one sample to the next along its dim 0",
                            kiln_plan_kernel_node_name(p, kk), kiln_plan_kernel_node_op(p, kk), dim, b->name,
                            (int)b->rank);
  const int64_t step = (int64_t)(root_bytes / esize) / stride0;
  tir_buffer_t* nb = kiln_arena_alloc(&c->arena, sizeof(*nb));
  if (!nb) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory making '%s' dynamic", b->name);
  *nb = *b; /* same id and name: the printer spells it as before */
  int64_t grow;
  if (__builtin_mul_overflow(hi - 1, step, &grow) || __builtin_add_overflow(nb->shape[0], grow, &nb->shape[0]))
    return kiln_make_status(KILN_LIMIT_EXCEEDED, "buffer '%s' at %s=%lld overflows 64 bits", b->name, dim,
                            (long long)hi);
  *out = (repl_t){b, nb, step};
  return NULL;
}

static kiln_status_t wrap_kernel(kiln_plan_t* p, int32_t k, const tir_buffer_t* dims, int32_t dims_index,
                                 const char* dim, int64_t hi, const kiln_template_set_t* set) {
  kiln_plan_kernel_t* kk = &p->kernels[k];
  tir_ctx_t* c = &p->tir;
  if (kk->host)
    return kiln_make_status(KILN_UNSUPPORTED,
                            "node '%s' (%s): dim '%s' cannot be dynamic: the node runs on the host CPU beside the GPU "
                            "target (a fallback), which takes no run-time batch yet",
                            kiln_plan_kernel_node_name(p, kk), kiln_plan_kernel_node_op(p, kk), dim);
  if (kk->tmpl) {
    bool printed = false; /* a template that hands the kernel back to its tensor IR */
    KILN_RETURN_IF_ERROR(kiln_plan_dyn_template(p, k, dim, set, &printed));
    if (!printed) return NULL;
  }
  if (kk->custom)
    return kiln_make_status(KILN_UNSUPPORTED,
                            "node '%s' (%s): dim '%s' cannot be dynamic: the node runs as a %s, which takes no "
                            "run-time extent yet",
                            kiln_plan_kernel_node_name(p, kk), kiln_plan_kernel_node_op(p, kk), dim, "plugin kernel");
  const tir_func_t* f = kk->func;
  const int32_t np = f->n_params + 1;
  const tir_buffer_t** params = kiln_arena_alloc(&c->arena, sizeof(*params) * (size_t)np);
  int32_t* args = kiln_arena_alloc(&c->arena, sizeof(*args) * (size_t)np);
  repl_t* repl = kiln_arena_alloc(&c->arena, sizeof(*repl) * (size_t)np);
  if (!params || !args || !repl) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory making '%s' dynamic", f->name);
  wrap_t w = {tir_var(c, "sample"), repl, 0};
  if (!w.n) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory making '%s' dynamic", f->name);
  for (int32_t j = 0; j < f->n_params; ++j) {
    params[j] = f->params[j];
    args[j] = kk->args[j];
    if (!kiln_plan_dyn_per_sample(p, kk->args[j])) continue;
    KILN_RETURN_IF_ERROR(make_repl(p, kk, f->params[j], kk->args[j], dim, hi, &repl[w.nr]));
    params[j] = repl[w.nr++].to;
  }
  params[np - 1] = dims;
  args[np - 1] = dims_index;
  tir_mutator_t m = {.ctx = c, .user = &w, .stmt_post = on_stmt, .expr_post = on_expr};
  const tir_stmt_t* body = tir_mutate_stmt(&m, f->body);
  /* A parallel loop at the top collapses with the sample loop; one deeper
   * down would be nested inside a parallel region, so the samples then run
   * one after another. */
  const bool top_par = body && body->kind == TIR_FOR && body->u.loop.kind == TIR_LOOP_PARALLEL;
  const tir_loop_kind_t kind = top_par || !has_parallel(body) ? TIR_LOOP_PARALLEL : TIR_LOOP_SERIAL;
  const tir_expr_t* zero = tir_int(c, 0);
  const tir_expr_t* extent = tir_load(c, dims, &zero);
  body = tir_for_dyn(c, w.n, hi, extent, kind, body);
  tir_func_t* nf = body ? tir_func(c, f->name, np, params, body) : NULL;
  if (!nf) return tir_ctx_status(c) ? tir_ctx_status(c) : kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
  kiln_status_t s = tir_verify(nf);
  if (s)
    return kiln_status_annotate(s, "node '%s': kernel over dynamic dim '%s'", kiln_plan_kernel_node_name(p, kk), dim);
  kk->func = nf;
  kk->args = args;
  return NULL;
}

kiln_status_t kiln_plan_make_dynamic(kiln_plan_t* p, const char* name, int64_t lo, int64_t hi) {
  return kiln_plan_make_dynamic_set(p, name, lo, hi, NULL);
}

kiln_status_t kiln_plan_make_dynamic_set(kiln_plan_t* p, const char* name, int64_t lo, int64_t hi,
                                         const kiln_template_set_t* set) {
  if (!p || !name || !name[0]) return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_plan_make_dynamic: no plan or dim");
  if (p->n_dims) return kiln_make_status(KILN_UNSUPPORTED, "dim '%s': the plan is dynamic in '%s' already (one dim so far)",
                                         name, p->dims[0].name);
  if (lo < 1 || hi < lo || hi > (1ll << 20))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "dim '%s': range %lld..%lld is not within 1..%lld", name,
                            (long long)lo, (long long)hi, 1ll << 20);
  const kiln_graph_t* g = p->graph;
  for (int32_t t = 0; t < 2; ++t) {
    const int32_t n = t ? g->n_outputs : g->n_inputs;
    const int32_t* io = t ? p->outputs : p->inputs;
    for (int32_t i = 0; i < n; ++i) {
      const tir_buffer_t* b = p->buffers[io[i]].buf;
      if (!kiln_plan_dyn_per_sample(p, io[i])) continue;
      if (b->rank < 1 || b->shape[0] != 1)
        return kiln_make_status(KILN_UNSUPPORTED, "dim '%s' cannot be dynamic: %s '%s' does not have it as dim 0", name,
                                t ? "output" : "input", b->name);
    }
  }
  tir_ctx_t* c = &p->tir;
  const int64_t one = 1;
  const tir_buffer_t* dims = tir_buffer(c, "kiln_dims", KILN_DTYPE_I64, 1, &one, TIR_SCOPE_GLOBAL);
  const char* copy = kiln_arena_strndup(&c->arena, name, strlen(name));
  if (!dims || !copy) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory making dim '%s' dynamic", name);
  int32_t di = -1;
  KILN_RETURN_IF_ERROR(kiln_plan_add_buffer(p, dims, KILN_PLAN_DIMS, -1, &di));
  for (int32_t k = 0; k < p->n_kernels; ++k) KILN_RETURN_IF_ERROR(wrap_kernel(p, k, dims, di, name, hi, set));
  p->buffers[di].first_use = 0;
  p->buffers[di].last_use = p->n_kernels - 1;
  p->dims[0] = (kiln_plan_dim_t){copy, lo, hi};
  p->n_dims = 1;
  return NULL;
}
