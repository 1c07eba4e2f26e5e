/* The code of a heterogeneous program (targets/partition.h): the GPU
 * target prints its kernels, the CPU target the host kernels, each from a
 * view of the plan that holds only its own, so neither emitter knows the
 * other exists. The two kernel lists come back in plan order, each kernel
 * marked with its device, and the lifetimes are recomputed over the result
 * (a conv template drops its GEMM kernel from the target's list). */
#include <string.h>

#include "targets/program_build.h"

typedef struct part_s {
  kiln_plan_t view;
  kiln_plan_kernel_t* kernels; /* the view's */
  kiln_template_t* tmpls;      /* remapped copies of the templates that name kernels */
  int32_t* orig;               /* plan kernel of each view kernel */
  kiln_program_t* prog;        /* buffers borrowed from the whole program */
} part_t;

static int32_t remap(const int32_t* index, int32_t n, int32_t k) { return k >= 0 && k < n ? index[k] : -1; }

/* The view of |plan| with the kernels whose host flag is |host|; |index|
 * maps plan kernels to view kernels (-1: not in the view). */
static kiln_status_t make_view(const kiln_plan_t* plan, bool host, int32_t* index, part_t* pt) {
  kiln_allocator_t al = plan->allocator;
  const int32_t n = plan->n_kernels;
  int32_t m = 0;
  for (int32_t k = 0; k < n; ++k) index[k] = plan->kernels[k].host == host ? m++ : -1;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(al, sizeof(kiln_plan_kernel_t) * (size_t)(m + 1), "plan view",
                                             (void**)&pt->kernels));
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(al, sizeof(kiln_template_t) * (size_t)(m + 1), "plan view",
                                             (void**)&pt->tmpls));
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(al, sizeof(int32_t) * (size_t)(m + 1), "plan view", (void**)&pt->orig));
  for (int32_t k = 0; k < n; ++k) {
    const int32_t v = index[k];
    if (v < 0) continue;
    pt->kernels[v] = plan->kernels[k];
    pt->orig[v] = k;
    const kiln_template_t* t = plan->kernels[k].tmpl;
    if (!t) continue;
    /* Conv instances and merged GEMMs name plan kernels: name view ones. */
    pt->tmpls[v] = *t;
    if (t->kind == KILN_TEMPLATE_CONV || t->kind == KILN_TEMPLATE_WINOGRAD) {
      pt->tmpls[v].conv.gemm_kernel = remap(index, n, t->conv.gemm_kernel);
      pt->tmpls[v].conv.slot = remap(index, n, t->conv.slot);
      if (t->conv.phase_kernel >= 0) pt->tmpls[v].conv.phase_kernel = remap(index, n, t->conv.phase_kernel);
    } else if (t->kind == KILN_TEMPLATE_MERGED) {
      pt->tmpls[v].into = remap(index, n, t->into);
    }
    pt->kernels[v].tmpl = &pt->tmpls[v];
  }
  pt->view = *plan;
  pt->view.kernels = pt->kernels;
  pt->view.n_kernels = pt->view.cap_kernels = m;
  return NULL;
}

/* A program holding the whole program's buffers (borrowed) and, moved out
 * of it, the kernels of the view, for |target|'s emitter. */
static kiln_status_t make_part_program(kiln_program_t* prog, const part_t* pt, const char* target,
                                       kiln_program_t** out) {
  kiln_program_t* q = NULL;
  KILN_RETURN_IF_ERROR(kiln_program_create(prog->allocator, &q));
  q->target = target;
  q->buffers = prog->buffers;
  q->n_buffers = prog->n_buffers;
  q->weights = prog->weights;
  q->weights_len = prog->weights_len;
  kiln_status_t s = kiln_allocator_malloc(prog->allocator, sizeof(kiln_program_kernel_t) *
                                          (size_t)(pt->view.n_kernels + 1), "program view", (void**)&q->kernels);
  if (s) {
    q->buffers = NULL;
    q->weights = NULL;
    kiln_program_destroy(q);
    return s;
  }
  for (int32_t v = 0; v < pt->view.n_kernels; ++v) {
    q->kernels[v] = prog->kernels[pt->orig[v]];
    memset(&prog->kernels[pt->orig[v]], 0, sizeof(kiln_program_kernel_t)); /* moved */
  }
  q->n_kernels = pt->view.n_kernels;
  *out = q;
  return NULL;
}

/* Frees the part; its program's kernels and code are already moved out
 * unless |s| failed (then they go with it). */
static void part_free(kiln_allocator_t al, part_t* pt) {
  if (pt->prog) {
    pt->prog->buffers = NULL;
    pt->prog->n_buffers = 0;
    pt->prog->weights = NULL;
    kiln_program_destroy(pt->prog);
  }
  kiln_allocator_free(al, pt->kernels);
  kiln_allocator_free(al, pt->tmpls);
  kiln_allocator_free(al, pt->orig);
}

kiln_status_t kiln_program_emit_hetero(const kiln_plan_t* plan, const kiln_target_t* target, kiln_program_t* prog) {
  const kiln_target_t* cpu = kiln_target_find(KILN_HOST_TARGET);
  if (!cpu) return kiln_make_status(KILN_INTERNAL, "heterogeneous program without a CPU target");
  kiln_allocator_t al = prog->allocator;
  const int32_t n = plan->n_kernels;
  if (prog->n_kernels != n)
    return kiln_make_status(KILN_INTERNAL, "heterogeneous emit: %d program kernels for %d plan kernels",
                            (int)prog->n_kernels, (int)n);
  part_t parts[2];
  memset(parts, 0, sizeof parts);
  int32_t* index = NULL;
  kiln_program_kernel_t* merged = NULL;
  kiln_status_t s = kiln_allocator_malloc(al, sizeof(int32_t) * (size_t)(n + 1), "plan view", (void**)&index);
  for (int d = 0; d < 2 && !s; ++d) {
    const kiln_target_t* t = d == KILN_KERNEL_ON_HOST ? cpu : target;
    s = make_view(plan, d == KILN_KERNEL_ON_HOST, index, &parts[d]);
    if (!s) s = make_part_program(prog, &parts[d], t->name, &parts[d].prog);
    if (!s) s = t->emit(&parts[d].view, parts[d].prog);
    if (!s) {
      /* an emitter may add constants (OpenCL's run-time shapes): the
       * buffers and weights it grew are the whole program's */
      prog->buffers = parts[d].prog->buffers;
      prog->n_buffers = parts[d].prog->n_buffers;
      prog->weights = parts[d].prog->weights;
      prog->weights_len = parts[d].prog->weights_len;
    }
    if (s) s = kiln_status_annotate(s, "the %s kernels of a heterogeneous program", d ? "host (cpu)" : target->name);
  }
  /* Back into plan order: an emitter keeps its kernels in order and only
   * drops MERGED ones (their work runs in the instance's kernel). */
  int32_t total = 0;
  for (int d = 0; d < 2 && !s; ++d) {
    int32_t kept = 0;
    for (int32_t v = 0; v < parts[d].view.n_kernels; ++v)
      kept += !(parts[d].kernels[v].tmpl && parts[d].kernels[v].tmpl->kind == KILN_TEMPLATE_MERGED);
    if (kept != parts[d].prog->n_kernels)
      s = kiln_make_status(KILN_INTERNAL, "heterogeneous emit: the %s emitter kept %d of %d kernels, expected %d",
                           d ? cpu->name : target->name, (int)parts[d].prog->n_kernels,
                           (int)parts[d].view.n_kernels, (int)kept);
    total += kept;
  }
  if (!s) s = kiln_allocator_malloc(al, sizeof(kiln_program_kernel_t) * (size_t)(total + 1), "program kernels",
                                    (void**)&merged);
  if (!s) {
    int32_t next[2] = {0, 0}, o = 0;
    for (int32_t k = 0; k < n; ++k) {
      const int d = plan->kernels[k].host ? KILN_KERNEL_ON_HOST : KILN_KERNEL_ON_TARGET;
      const kiln_template_t* t = plan->kernels[k].tmpl;
      if (t && t->kind == KILN_TEMPLATE_MERGED) continue;
      merged[o] = parts[d].prog->kernels[next[d]++];
      merged[o++].device = (uint8_t)d;
    }
    for (int d = 0; d < 2; ++d) parts[d].prog->n_kernels = 0; /* moved into |merged| */
    /* the old kernels were moved out (all zero) */
    kiln_allocator_free(al, prog->kernels);
    prog->kernels = merged;
    prog->n_kernels = total;
    merged = NULL;
    prog->code = parts[KILN_KERNEL_ON_TARGET].prog->code;
    prog->host_code = parts[KILN_KERNEL_ON_HOST].prog->code;
    memset(&parts[0].prog->code, 0, sizeof(kiln_program_code_t));
    memset(&parts[1].prog->code, 0, sizeof(kiln_program_code_t));
    kiln_program_lifetimes(prog);
  }
  kiln_allocator_free(al, merged);
  kiln_allocator_free(al, index);
  for (int d = 0; d < 2; ++d) part_free(al, &parts[d]);
  return s;
}
