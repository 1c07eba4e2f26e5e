/* The sample loop of a per-sample kernel on a GPU target (see
 * gpu_bind_dyn.h): the samples become the grid's dim 2, which the device
 * scales by the run's batch at enqueue time, instead of a serial loop in
 * every work-item (which would also count against a device's per-
 * invocation loop limit, lavapipe's 65,535 iterations). */
#include "targets/gpu_bind_dyn.h"

#include "targets/cfamily/printer.h"

kiln_status_t kiln_gpu_bind_samples(tir_ctx_t* c, const tir_func_t* f, kiln_gpu_bind_fn bind, const tir_func_t** out) {
  *out = NULL;
  const tir_stmt_t* s = f->body;
  if (!s || s->kind != TIR_FOR || !s->u.loop.dyn_extent)
    return kiln_make_status(KILN_UNSUPPORTED, "kernel '%s' has no sample loop at its top (a per-sample plan's kernel "
                            "loops over the samples first)", f->name);
  const tir_var_t* n = s->u.loop.var;
  const int64_t hi = s->u.loop.extent;
  const tir_func_t* one = tir_func(c, f->name, f->n_params, f->params, s->u.loop.body);
  if (!one) return tir_ctx_status(c) ? tir_ctx_status(c) : kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
  if (bind) {
    const tir_func_t* g = NULL;
    KILN_RETURN_IF_ERROR(bind(c, one, &g));
    if (g) one = g;
  }
  int64_t groups[3], local[3];
  kiln_cf_launch_dims(one, groups, local);
  if (groups[2] > 1 || local[2] > 1)
    return kiln_make_status(KILN_UNSUPPORTED, "kernel '%s': one sample's body uses the grid's dim 2 (%lld groups x %lld "
                            "items), which a dynamic dim takes for the samples", f->name, (long long)groups[2],
                            (long long)local[2]);
  const tir_stmt_t* body = tir_for_bound(c, n, hi, TIR_BLOCK_Z, one->body);
  tir_func_t* nf = body ? tir_func(c, f->name, f->n_params, f->params, body) : NULL;
  if (!nf) return tir_ctx_status(c) ? tir_ctx_status(c) : kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
  *out = nf;
  return NULL;
}
