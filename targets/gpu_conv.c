/* The program rewrite of the conv template instances shared by the GPU
 * targets (see gpu_conv.h). */
#include "targets/gpu_conv.h"

/* The conv instance kernel |k| runs, or NULL. */
static const kiln_template_conv_t* instance(const kiln_plan_t* plan, int32_t k) {
  const kiln_template_t* t = plan->kernels[k].tmpl;
  return t && (t->kind == KILN_TEMPLATE_CONV || t->kind == KILN_TEMPLATE_WINOGRAD) ? &t->conv : NULL;
}

static bool merged(const kiln_plan_t* plan, int32_t k) {
  return plan->kernels[k].tmpl && plan->kernels[k].tmpl->kind == KILN_TEMPLATE_MERGED;
}

bool kiln_gpu_conv_any(const kiln_plan_t* plan) {
  for (int32_t k = 0; k < plan->n_kernels; ++k)
    if (instance(plan, k)) return true;
  return false;
}

/* Lifetimes are recomputed the way targets/program_build.c computes them
 * (an input of the phase split now lives until the slot, the output is
 * born there). */
kiln_status_t kiln_gpu_conv_rewrite(kiln_program_t* prog, const kiln_plan_t* plan, int32_t* keep) {
  kiln_allocator_t al = prog->allocator;
  const int32_t n = prog->n_kernels;
  if (n != plan->n_kernels)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "conv rewrite: the program has %d kernels, the plan %d", (int)n,
                            (int)plan->n_kernels);
  int32_t kept = 0;
  for (int32_t k = 0; k < n; ++k) kept += !merged(plan, k);
  kiln_program_kernel_t* nk = NULL;
  int32_t** nargs = NULL;
  uint8_t** nacc = NULL;
  kiln_status_t s = kiln_allocator_malloc(al, sizeof *nk * (size_t)(kept + 1), "conv rewrite: kernels", (void**)&nk);
  if (!s) s = kiln_allocator_malloc(al, sizeof *nargs * (size_t)(n + 1), "conv rewrite: kernels", (void**)&nargs);
  if (!s) s = kiln_allocator_malloc(al, sizeof *nacc * (size_t)(n + 1), "conv rewrite: kernels", (void**)&nacc);
  if (!s) {
    for (int32_t k = 0; k < n; ++k) nargs[k] = NULL, nacc[k] = NULL;
    for (int32_t k = 0; k < n && !s; ++k) {
      const kiln_template_conv_t* c = instance(plan, k);
      if (!c) continue;
      s = kiln_allocator_malloc(al, sizeof(int32_t) * (size_t)c->n_params, "conv rewrite: arguments", (void**)&nargs[k]);
      if (!s) s = kiln_allocator_malloc(al, (size_t)c->n_params, "conv rewrite: access", (void**)&nacc[k]);
    }
  }
  if (s) {
    for (int32_t k = 0; nargs && nacc && k < n; ++k) {
      kiln_allocator_free(al, nargs[k]);
      kiln_allocator_free(al, nacc[k]);
    }
    kiln_allocator_free(al, nk);
    kiln_allocator_free(al, nargs);
    kiln_allocator_free(al, nacc);
    return s;
  }
  int32_t o = 0;
  for (int32_t k = 0; k < n; ++k) {
    kiln_program_kernel_t* pk = &prog->kernels[k];
    if (merged(plan, k)) {
      kiln_allocator_free(al, pk->name);
      kiln_allocator_free(al, pk->node_name);
      kiln_allocator_free(al, pk->op_type);
      kiln_allocator_free(al, pk->args);
      kiln_allocator_free(al, pk->access);
      continue;
    }
    const kiln_template_conv_t* c = instance(plan, k);
    if (c) {
      if (c->gemm_kernel != k) pk->flops += prog->kernels[c->gemm_kernel].flops;
      kiln_allocator_free(al, pk->args);
      kiln_allocator_free(al, pk->access);
      pk->args = nargs[k];
      pk->access = nacc[k];
      pk->n_args = c->n_params;
      pk->bytes = 0;
      for (int32_t j = 0; j < c->n_params; ++j) {
        const char r = c->roles[j];
        pk->args[j] = c->args[j];
        pk->access[j] = (uint8_t)(KILN_ARG_READ | (r == 'F' || r == 'Y' ? KILN_ARG_WRITE : 0));
        if (r != 'D') /* a placeholder, never read (kiln_template_set_t.winograd_epi_slot) */
          pk->bytes += (int64_t)prog->buffers[c->args[j]].bytes * (r == 'F' || r == 'Y' ? 2 : 1);
      }
      pk->inplace_in = pk->inplace_out = -1;
    }
    if (keep) keep[o] = k;
    nk[o++] = *pk;
  }
  kiln_allocator_free(al, prog->kernels);
  kiln_allocator_free(al, nargs);
  kiln_allocator_free(al, nacc);
  prog->kernels = nk;
  prog->n_kernels = kept;
  for (int32_t i = 0; i < prog->n_buffers; ++i) prog->buffers[i].first_use = prog->buffers[i].last_use = -1;
  for (int32_t k = 0; k < kept; ++k)
    for (int32_t j = 0; j < nk[k].n_args; ++j) {
      const int32_t bs[2] = {nk[k].args[j], kiln_program_root(prog, nk[k].args[j])};
      for (int t = 0; t < 2; ++t) {
        kiln_program_buffer_t* b = &prog->buffers[bs[t]];
        if (b->first_use < 0) b->first_use = k;
        b->last_use = k;
      }
    }
  return NULL;
}
