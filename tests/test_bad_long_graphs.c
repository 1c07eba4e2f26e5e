/* BAD_INPUTS row 28: very long and very wide graphs. A 20k-node element-wise
 * chain and a wide graph (10k branches summed) compile at -O0 and -O1 for
 * every built target and compute what the reference interpreter computes
 * (the output and two tapped nodes, run through the tensor-IR interpreter on
 * the fused plan); a 100k-node chain compiles for the CPU. Nothing recurses
 * with the graph's length, so all of it runs on the default 8 MB stack, and
 * under ASan (bigger frames) too. No timing is asserted here (that is
 * bench/long_graphs.c); a quadratic pass would make this test crawl, not
 * fail, so it also checks what keeps the fused kernels small: no kernel
 * computes more than 64 graph nodes. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/ref_exec.h"
#include "ir/passes.h"
#include "ir/tir_interp.h"
#include "long_graphs.h"
#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "lowering/template.h"
#include "runtime/program.h"
#include "targets/program_build.h"
#include "targets/registry.h"
#include "testing.h"

#define MAX_NODES_PER_KERNEL 64

static kiln_allocator_t A(void) { return kiln_allocator_system(); }

/* Runs the plan's kernels in order through the tensor-IR interpreter on host
 * memory (one allocation per memory root) and copies out graph output |o|. */
static kiln_status_t interp_plan(const kiln_plan_t* p, const kiln_array_t* x, int32_t n_out,
                                 kiln_array_t* outs) {
  void** mem = calloc((size_t)p->n_buffers + 1, sizeof(void*));
  bool* owned = calloc((size_t)p->n_buffers + 1, sizeof(bool));
  kiln_status_t s = NULL;
  if (!mem || !owned) s = kiln_make_status(KILN_OUT_OF_MEMORY, "interp_plan: out of memory");
  for (int32_t b = 0; b < p->n_buffers && !s; ++b) {
    const kiln_plan_buffer_t* pb = &p->buffers[b];
    if (pb->alias_of >= 0) continue;
    if (pb->kind == KILN_PLAN_CONST) {
      mem[b] = pb->value.data;
    } else if (b == p->inputs[0]) {
      mem[b] = x->data;
    } else {
      mem[b] = calloc(1, (size_t)tir_buffer_span_bytes(pb->buf) + 1);
      owned[b] = true;
      if (!mem[b]) s = kiln_make_status(KILN_OUT_OF_MEMORY, "interp_plan: out of memory");
    }
  }
  void* args[512];
  for (int32_t k = 0; k < p->n_kernels && !s; ++k) {
    const kiln_plan_kernel_t* kk = &p->kernels[k];
    if (kk->func->n_params > 512) {
      s = kiln_make_status(KILN_INTERNAL, "kernel %s: too many parameters", kk->func->name);
      break;
    }
    for (int32_t i = 0; i < kk->func->n_params; ++i) args[i] = mem[kiln_plan_root(p, kk->args[i])];
    s = tir_interp_run(kk->func, args, NULL, A());
  }
  for (int32_t o = 0; o < n_out && !s; ++o) {
    const kiln_plan_buffer_t* pb = &p->buffers[p->outputs[o]];
    kiln_shape_t sh = kiln_shape_make(pb->buf->rank, pb->buf->shape);
    s = kiln_array_alloc(A(), pb->buf->dtype, &sh, &outs[o]);
    if (!s) memcpy(outs[o].data, mem[kiln_plan_root(p, p->outputs[o])], outs[o].nbytes);
  }
  for (int32_t b = 0; mem && owned && b < p->n_buffers; ++b)
    if (owned[b]) free(mem[b]);
  free(mem);
  free(owned);
  return s;
}

static double max_rel_err(const kiln_array_t* got, const kiln_array_t* want) {
  if (got->nbytes != want->nbytes) return INFINITY;
  double err = 0;
  int64_t n = kiln_array_numel(want);
  for (int64_t i = 0; i < n; ++i) {
    double g = ((const float*)got->data)[i], w = ((const float*)want->data)[i];
    double e = fabs(g - w) / (fabs(w) > 1 ? fabs(w) : 1);
    if (!(e <= err)) err = e; /* NaN sticks */
  }
  return err;
}

typedef struct case_s {
  kiln_long_kind_t kind;
  int32_t n;
  int level;
  const char* target;
  bool run; /* compare with the reference interpreter */
} case_t;

static void run_case(const case_t* c) {
  char what[96];
  snprintf(what, sizeof what, "%s %d nodes -O%d %s", c->kind == KILN_LONG_CHAIN ? "chain" : "wide",
           (int)c->n, c->level, c->target);
  const kiln_target_t* t = kiln_target_find(c->target);
  if (!t) {
    printf("  skip %s: target not built\n", what);
    return;
  }
  kiln_graph_t* g = NULL;
  if (!CHECK_OK(kiln_long_graph(c->kind, c->n, 8, &g))) return;
  kiln_array_t x = {0}, want[3], got[3];
  memset(want, 0, sizeof want);
  memset(got, 0, sizeof got);
  int32_t n_out = g->n_outputs;
  kiln_plan_t* p = NULL;
  kiln_program_t* prog = NULL;
  int64_t dims[2] = {1, 8};
  kiln_shape_t xs = kiln_shape_make(2, dims);
  if (!CHECK_OK(kiln_graph_prepare(g))) goto done;
  if (c->run) {
    if (!CHECK_OK(kiln_array_alloc(A(), KILN_DTYPE_F32, &xs, &x))) goto done;
    for (int i = 0; i < 8; ++i) ((float*)x.data)[i] = (float)(i - 4) * 0.4f;
    kiln_ref_options_t ro;
    kiln_ref_options_default(&ro);
    if (!CHECK_OK(kiln_ref_run(g, &x, &ro, want))) goto done;
  }
  if (!CHECK_OK(kiln_graph_optimize(g, c->level, NULL))) goto done;
  kiln_plan_options_t po = {t->lowering, 1, 0, 0, 0, 0};
  if (!CHECK_OK(kiln_plan_build(g, &po, A(), &p))) goto done;
  kiln_fusion_report_t rep;
  if (c->level >= 1 && !CHECK_OK(kiln_plan_fuse(p, &rep, NULL))) goto done;
  kiln_template_set_t ts;
  kiln_program_templates(t, &ts);
  if (!CHECK_OK(kiln_template_choose(p, &ts))) goto done;
  int32_t biggest = 0;
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    int32_t nn = kiln_plan_kernel_nodes(p, k, NULL, 0);
    if (nn > biggest) biggest = nn;
  }
  CHECK_MSG(biggest <= MAX_NODES_PER_KERNEL, "%s: a kernel computes %d nodes", what, (int)biggest);
  if (c->level >= 1 && c->kind == KILN_LONG_CHAIN)
    CHECK_MSG(p->n_kernels < c->n / 2, "%s: %d kernels, the chain did not fuse", what, (int)p->n_kernels);
  kiln_program_build_options_t bo = {.model_name = what};
  if (!CHECK_OK(kiln_program_build(p, t, &bo, A(), &prog))) goto done;
  CHECK(prog->code.text_len > 0);
  if (c->run && CHECK_OK(interp_plan(p, &x, n_out, got)))
    for (int32_t o = 0; o < n_out; ++o) {
      double e = max_rel_err(&got[o], &want[o]);
      CHECK_MSG(e <= 1e-5, "%s: output %d differs from the reference: rel err %g", what, (int)o, e);
    }
  printf("  %s: %d kernels, at most %d nodes each\n", what, (int)p->n_kernels, (int)biggest);
done:
  for (int32_t o = 0; o < 3; ++o) {
    kiln_array_free(A(), &want[o]);
    kiln_array_free(A(), &got[o]);
  }
  kiln_array_free(A(), &x);
  kiln_program_destroy(prog);
  kiln_plan_destroy(p);
  kiln_graph_destroy(g);
}

static void test_chain_20k(void) {
  for (int level = 0; level <= 1; ++level)
    run_case(&(case_t){KILN_LONG_CHAIN, 20000, level, "cpu", true});
}

static void test_chain_gpu_targets(void) {
  /* the GPU emitters print every kernel (no dedup of identical text) */
  run_case(&(case_t){KILN_LONG_CHAIN, 4000, 1, "opencl", true});
  run_case(&(case_t){KILN_LONG_CHAIN, 4000, 1, "vulkan", true});
}

static void test_wide_20k(void) {
  for (int level = 0; level <= 1; ++level)
    run_case(&(case_t){KILN_LONG_WIDE, 20000, level, "cpu", true});
}

static void test_chain_100k(void) {
  run_case(&(case_t){KILN_LONG_CHAIN, 100000, 1, "cpu", false});
}

int main(void) {
  RUN(test_chain_20k);
  RUN(test_chain_gpu_targets);
  RUN(test_wide_20k);
  RUN(test_chain_100k);
  return kiln_test_finish();
}
