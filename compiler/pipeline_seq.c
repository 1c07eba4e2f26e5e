/* A range on a dim inside the kernels' shapes (see pipeline_seq.h). */
#include "compiler/pipeline_seq.h"

#include <stdio.h>
#include <string.h>

#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "lowering/plan_seq_kern.h"
#include "targets/program_build.h"

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
  /* NCHW (no layout pass) and no template kernels: both fix sizes */
  kiln_plan_options_t po = {c->target->lowering, c->threads, 0, c->sparse, 0};
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
  if (!s) s = kiln_plan_seq_unify(plans, name, lo, hi);
  int32_t naive = 0;
  for (int32_t k = 0; !s && k < plan->n_kernels; ++k) naive += plan->kernels[k].schedule == NULL;
  if (!s)
    s = kiln_compile_log_line(log, "plan", "dynamic dim '%s' = %lld..%lld inside the shapes: %d kernels run to its "
                              "value at run time (%d in their naive form), lowered at %s=%lld,%lld,%lld,%lld,%lld",
                              name, (long long)lo, (long long)hi, plan->n_kernels, naive, name, (long long)x[0],
                              (long long)x[1], (long long)x[2], (long long)x[3], (long long)x[4]);
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
