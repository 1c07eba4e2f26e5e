/* A range on a dim inside the kernels' shapes (see pipeline_seq.h). */
#include "compiler/pipeline_seq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "lowering/plan_seq_kern.h"
#include "lowering/plan_seq_gemm.h"
#include "lowering/template.h"
#include "targets/program_build.h"

/* The GEMM kernels of the five plans (kiln_plan_seq_sizes) that the
 * target's GEMM template computes at every size with only M changing, M =
 * a * n + b within 1..n: ok[k] and out[k] (the descriptor at hi, with a
 * and b) for each kernel of plans[last]. Read before the unification,
 * which refuses template kernels; kiln_plan_seq_unify leaves the
 * operands' roles as they are. */
static void seq_gemm_match(kiln_plan_t* const* plans, const int64_t* x, int64_t lo, int64_t hi,
                           const kiln_template_set_t* set, bool* ok, kiln_template_gemm_t* out) {
  const kiln_plan_t* top = plans[KILN_PLAN_SEQ_SIZES - 1];
  for (int32_t k = 0; k < top->n_kernels; ++k) {
    ok[k] = false;
    kiln_template_gemm_t g[KILN_PLAN_SEQ_SIZES];
    bool all = true;
    for (int i = 0; i < KILN_PLAN_SEQ_SIZES && all; ++i)
      all = k < plans[i]->n_kernels && !plans[i]->kernels[k].tmpl && !plans[i]->kernels[k].custom &&
            !plans[i]->kernels[k].host &&
            (kiln_template_gemm_match(plans[i], k, &set->gemm_rules, &g[i]) ||
             (set->gemm_rules.bias && kiln_plan_seq_gemm_bias_match(plans[i], k, set->gemm_rules.gelu, &g[i]))) &&
            g[i].batch == 1;
    if (!all) continue;
    const int64_t dx = x[1] - x[0], dm = g[1].M - g[0].M;
    if (dx <= 0 || dm % dx) continue;
    const int64_t a = dm / dx, b = g[0].M - a * x[0];
    if (a < 1 || a * lo + b < 1 || a * hi + b > hi || a * lo + b > lo) continue;
    kiln_template_gemm_t ref = g[KILN_PLAN_SEQ_SIZES - 1];
    ref.M = 0;
    for (int i = 0; i < KILN_PLAN_SEQ_SIZES && all; ++i) {
      kiln_template_gemm_t gi = g[i];
      all = gi.M == a * x[i] + b;
      gi.M = 0;
      all = all && !memcmp(&gi, &ref, sizeof gi);
    }
    if (!all) continue;
    ok[k] = true;
    out[k] = g[KILN_PLAN_SEQ_SIZES - 1];
    out[k].m_dim_a = a;
    out[k].m_dim_b = b;
  }
}

/* Puts the GEMM descriptors seq_gemm_match found on the unified plan's
 * kernels (their last parameter now the dims buffer, role 'D'), with the
 * tiles the target's rules pick at the top of the range. */
static kiln_status_t seq_gemm_place(kiln_plan_t* plan, const kiln_template_set_t* set, const bool* ok,
                                    const kiln_template_gemm_t* g, int32_t* count) {
  *count = 0;
  for (int32_t k = 0; k < plan->n_kernels; ++k) {
    if (!ok[k]) continue;
    kiln_plan_kernel_t* kk = &plan->kernels[k];
    const int32_t np = kk->func->n_params;
    if (np != g[k].n_params + 1 || np > (int32_t)sizeof g[k].roles) continue;
    kiln_template_t* d = kiln_arena_alloc(&plan->tir.arena, sizeof *d);
    if (!d) return kiln_make_status(KILN_OUT_OF_MEMORY, "templates: kernel '%s'", kk->func->name);
    memset(d, 0, sizeof *d);
    d->kind = KILN_TEMPLATE_GEMM;
    d->weights.buffer = -1;
    d->gemm = g[k];
    d->gemm.n_params = np;
    d->gemm.roles[np - 1] = 'D';
    d->gemm.f16[np - 1] = false;
    kiln_template_set_tiles(set, d);
    kk->tmpl = d;
    ++*count;
  }
  return NULL;
}

kiln_status_t kiln_compile_program_seq(kiln_graph_t* const* gs, const char* name, int64_t lo, int64_t hi,
                                       const kiln_compile_config_t* c, kiln_compile_log_t* log,
                                       kiln_program_t** out) {
  *out = NULL;
  if (!c->target || !c->target->dyn_seq)
    return kiln_make_status(KILN_UNSUPPORTED, "--dim %s=%lld..%lld: a range inside the shapes is compiled for the cpu, "
                            "opencl and vulkan targets only so far; compile a set of sizes (--dim %s=16,64,128) "
                            "for %s", name,
                            (long long)lo, (long long)hi, name, c->target ? c->target->name : "the reference");
  if (c->precision && c->precision->mode != KILN_PRECISION_FP32)
    return kiln_make_status(KILN_UNSUPPORTED, "--dim %s=%lld..%lld: a range inside the shapes is compiled in fp32 only "
                            "so far (precision %s)", name, (long long)lo, (long long)hi,
                            kiln_precision_mode_name(c->precision->mode));
  if (c->tuning_path && !c->tuning_default)
    return kiln_make_status(KILN_UNSUPPORTED, "--dim %s=%lld..%lld: a range inside the shapes takes no tuning cache "
                            "(its kernels are not tiled per size)", name, (long long)lo, (long long)hi);
  /* NCHW (no layout pass) and no template kernels: both fix sizes; one
   * element an invocation (the range's kernels bind their own loops) */
  kiln_plan_options_t po = {c->target->lowering, c->threads, 0, c->sparse, 0, 0};
  kiln_plan_t* plans[KILN_PLAN_SEQ_SIZES] = {NULL};
  kiln_status_t s = NULL;
  int64_t x[KILN_PLAN_SEQ_SIZES];
  kiln_plan_seq_sizes(lo, hi, x);
  kiln_fusion_report_t fusion;
  for (int i = 0; i < KILN_PLAN_SEQ_SIZES && !s; ++i) {
    memset(&fusion, 0, sizeof fusion);
    s = kiln_plan_build_plain(gs[i], &po, kiln_allocator_system(), &plans[i]);
    if (!s && c->opt >= 1) s = kiln_plan_fuse(plans[i], &fusion, NULL);
    if (s) s = kiln_status_annotate(s, "lowering with %s=%lld", name, (long long)x[i]);
  }
  kiln_plan_t* plan = plans[KILN_PLAN_SEQ_SIZES - 1];
  /* GEMMs whose M follows the dim: the target's template with a run-time M */
  kiln_template_set_t set;
  memset(&set, 0, sizeof set);
  bool* gm_ok = NULL;
  kiln_template_gemm_t* gm = NULL;
  int32_t n_gemm_tmpl = 0;
  const char* rtm_env = getenv("KILN_SEQ_GEMM_TEMPLATE"); /* off: printed GEMMs only (for measuring) */
  if (!s && c->target->dyn_seq_gemm && c->target->templates && !(rtm_env && !strcmp(rtm_env, "off"))) {
    c->target->templates(&set);
    set.gpu_lacks = c->gpu_lacks;
    if (c->tuning_device) kiln_compile_device_limits(&c->tuning_device->info, &set.limits);
    gm_ok = calloc((size_t)plan->n_kernels + 1, sizeof *gm_ok);
    gm = calloc((size_t)plan->n_kernels + 1, sizeof *gm);
    if (!gm_ok || !gm) s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory compiling a dim range");
    if (!s && set.gemm) seq_gemm_match(plans, x, lo, hi, &set, gm_ok, gm);
  }
  if (!s) s = kiln_plan_seq_unify(plans, name, lo, hi);
  if (!s && gm_ok && set.gemm) s = seq_gemm_place(plan, &set, gm_ok, gm, &n_gemm_tmpl);
  free(gm_ok);
  free(gm);
  int32_t naive = 0;
  for (int32_t k = 0; !s && k < plan->n_kernels; ++k) naive += plan->kernels[k].schedule == NULL;
  if (!s)
    s = kiln_compile_log_line(log, "plan", "dynamic dim '%s' = %lld..%lld inside the shapes: %d kernels run to its "
                              "value at run time (%d in their naive form), lowered at %s=%lld,%lld,%lld,%lld,%lld",
                              name, (long long)lo, (long long)hi, plan->n_kernels, naive, name, (long long)x[0],
                              (long long)x[1], (long long)x[2], (long long)x[3], (long long)x[4]);
  if (!s && n_gemm_tmpl)
    s = kiln_compile_log_line(log, "plan", "dynamic dim '%s': %d GEMMs run as the %s GEMM template with M read at "
                              "run time", name, n_gemm_tmpl, c->target->name);
  /* the plain nests into register tiles, lane reductions and vector loops
   * with run-time counts (lowering/plan_seq_kern.h) */
  kiln_plan_seq_kern_report_t fast;
  memset(&fast, 0, sizeof fast);
  const kiln_cpu_simd_t simd = kiln_cpu_simd();
  const bool cpu = c->target->lowering == KILN_TARGET_CLASS_CPU;
  if (!s && cpu) s = kiln_plan_seq_kernels_fast(plan, simd.lanes, simd.regs, &fast);
  /* a GPU target: 16 lanes, as its static reductions take */
  if (!s && !cpu) s = kiln_plan_seq_kernels_lanes(plan, 16, c->loop_limit, &fast);
  if (!s && !cpu)
    s = kiln_compile_log_line(log, "plan", "dynamic dim '%s': %d GEMMs in blocks of rows (a row of sums each), %d "
                              "lane reductions, %d vector loops, %d plain nests in parallel, with run-time counts; "
                              "the grids follow its value", name, fast.gemms, fast.reductions, fast.maps, fast.nests);
  if (!s && !cpu && (fast.split || fast.over_limit))
    s = kiln_compile_log_line(log, "plan", "dynamic dim '%s': %d GEMMs in smaller blocks of rows and columns under the "
                              "device's loop limit (%lld iterations per invocation), %d above it even so", name,
                              fast.split, (long long)c->loop_limit, fast.over_limit);
  if (!s && cpu)
    s = kiln_compile_log_line(log, "plan", "dynamic dim '%s': %d GEMMs in %d-lane register tiles (%d constant Bs in "
                              "tile panels), %d lane reductions, %d vector loops, with run-time tile counts", name,
                              fast.gemms, simd.lanes, fast.packed, fast.reductions, fast.maps);
  if (!s && fast.kept)
    s = kiln_compile_log_line(log, "plan", "dynamic dim '%s': %d kernels keep their plain loops (the first, '%s': %s)",
                              name, fast.kept, fast.kept_kernel, fast.kept_why);
  char opts[64];
  snprintf(opts, sizeof opts, "-O%d", c->opt);
  kiln_program_build_options_t bo = {.model_name = c->model_name, .precision = "fp32", .options = opts,
                                     .cpu_targets = c->cpu_targets};
  kiln_program_t* p = NULL;
  if (!s) s = kiln_program_build(plan, c->target, &bo, kiln_allocator_system(), &p);
  if (!s) s = kiln_compile_seq_memory(plans, name, lo, hi, log, p);
  /* the longest kernel per invocation (Vulkan counts them at the top of the
   * range): a device with a loop limit refuses it at session creation */
  int32_t longest = -1;
  for (int32_t k = 0; !s && k < p->n_kernels; ++k)
    if (p->kernels[k].loop_trips > 65535 && (longest < 0 || p->kernels[k].loop_trips > p->kernels[longest].loop_trips))
      longest = k;
  if (longest >= 0)
    s = kiln_compile_log_line(log, "note", "dynamic dim '%s': kernel '%s' runs about %lld loop iterations per "
                              "invocation at %s=%lld; a device that ends an invocation sooner (lavapipe: 65535) "
                              "refuses this module", name, p->kernels[longest].name,
                              (long long)p->kernels[longest].loop_trips, name, (long long)hi);
  if (!s)
    s = kiln_compile_log_line(log, "plan", "compiled %d kernels for %s: %.1f KB of code, %.1f MB of weights",
                              plan->n_kernels, c->target->name, (double)p->code.text_len / 1e3,
                              (double)p->weights_len / 1e6);
  for (int i = 0; i < KILN_PLAN_SEQ_SIZES; ++i) kiln_plan_destroy(plans[i]);
  if (s) {
    kiln_program_destroy(p);
    return s;
  }
  *out = p;
  return NULL;
}
