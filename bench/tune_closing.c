/* What kiln tune's closing build costs on OpenCL or Vulkan with its kept
 * points' code shared or not (docs/TUNING.md, "The closing build reuses ...").
 *
 *   kiln_bench_tune_closing MODEL.onnx [K [TARGET [hint]]]   (K kernels at
 *   another point, default 8; TARGET opencl (default) or vulkan; "hint":
 *   each kernel's first hint, the tuner's first point, instead of one knob
 *   away: on lavapipe the Winograd convs' other F, the dearest shaders)
 *
 * Plans MODEL as `kiln tune -t TARGET` does, builds the default program on
 * device A with reuse_code (the tune's default build), then for the K
 * hottest-first (plan order) template kernels a point one knob away from
 * the default (the first the constraints accept) built and run alone on a
 * second device B (the tune's points), then the model with those points on
 * A with reuse_code (the closing build: program, session, a warm-up run).
 * Twice, in this order: the points alone with reuse_code (this tree's
 * tune: B shares A's OpenCL units or Vulkan pipelines, KILN_TUNE_REUSE on) and without (the points'
 * code kept to themselves, as before), on fresh devices each time. Prints
 * per pass the closing build's wall time and its units reused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/driver.h"
#include "compiler/pipeline.h"
#include "compiler/tune.h"
#include "compiler/tune_micro.h"
#include "frontend/onnx.h"
#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "lowering/template.h"
#include "runtime/module_impl.h"
#include "runtime/device_registry.h"
#include "runtime/session_impl.h"
#include "targets/program_build.h"
#include "targets/registry.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(kiln_status_t s, const char* what) {
  fprintf(stderr, "kiln_bench_tune_closing: %s: %s\n", what, kiln_status_message(s));
  kiln_status_free(s);
  return 1;
}

/* |plan| as kiln tune builds it, into a session on |dev| with reuse_code,
 * run once on |in|: the wall time, its units and those reused. */
static kiln_status_t whole(kiln_device_t* dev, const kiln_target_t* tg, const kiln_plan_t* plan,
                           const kiln_array_t* in, int32_t n_out, double* secs, int32_t* units, int32_t* reused) {
  const double t0 = now_s();
  kiln_program_t* prog = NULL;
  kiln_module_t* mod = NULL;
  kiln_session_t* ses = NULL;
  kiln_array_t* out = calloc((size_t)n_out + 1, sizeof *out);
  kiln_status_t s = kiln_tune_whole_program(plan, tg, &prog);
  if (!s) s = kiln_module_wrap(prog, &mod);
  else kiln_program_destroy(prog);
  kiln_session_options_t so;
  kiln_tune_session_options(&so, 0, true);
  if (!s) s = kiln_session_create(mod, dev, &so, &ses);
  if (!s) s = kiln_session_run(ses, in, out);
  *secs = now_s() - t0;
  const kiln_device_api_t* api = kiln_device_api_find(tg->name);
  *units = *reused = 0;
  if (ses && api && api->executable_units) api->executable_units(ses->exe, units, reused);
  for (int32_t i = 0; i < n_out; ++i) kiln_array_free(kiln_allocator_system(), &out[i]);
  free(out);
  kiln_session_destroy(ses);
  kiln_module_release(mod);
  return s;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: kiln_bench_tune_closing MODEL.onnx [K [opencl|vulkan]]\n");
    return 2;
  }
  const int32_t want = argc > 2 ? atoi(argv[2]) : 8;
  const char* target = argc > 3 ? argv[3] : "opencl";
  const bool hint = argc > 4 && !strcmp(argv[4], "hint");
  const kiln_target_t* tg = kiln_target_find(target);
  if (!tg) return fail(kiln_make_status(KILN_NOT_FOUND, "no %s target in this build", target), "target");
  setenv("POCL_KERNEL_CACHE", "0", 0); /* as kiln tune */
  kiln_graph_t* g = NULL;
  kiln_status_t s = kiln_onnx_parse_model(argv[1], NULL, kiln_allocator_system(), &g);
  for (int32_t k = 0; !s && k < g->n_inputs; ++k) {
    kiln_tensor_t* t = &g->tensors[g->inputs[k]];
    for (int32_t d = 0; d < t->shape.rank; ++d)
      if (t->shape.dims[d] < 0) t->shape.dims[d] = 1;
  }
  if (!s) s = kiln_graph_prepare(g);
  kiln_compile_log_t plog = {0};
  if (!s) s = kiln_compile_graph_passes_except(g, 1, tg, NULL, &plog);
  kiln_compile_log_free(&plog);
  if (s) return fail(s, argv[1]);
  kiln_array_t* in = calloc((size_t)g->n_inputs + 1, sizeof *in);
  for (int32_t i = 0; i < g->n_inputs && !s; ++i) {
    const kiln_tensor_t* x = &g->tensors[g->inputs[i]];
    s = kiln_array_alloc(kiln_allocator_system(), x->dtype, &x->shape, &in[i]); /* zeros */
  }
  for (int pass = 0; pass < 2 && !s; ++pass) {
    if (pass == 1) setenv("KILN_TUNE_REUSE", "off", 1); /* the points alone keep their code */
    kiln_device_t *a = NULL, *b = NULL;
    kiln_device_open_options_t oo = {0, true, NULL};
    s = kiln_device_open(target, &oo, kiln_allocator_system(), &a);
    if (!s) s = kiln_device_open(target, &oo, kiln_allocator_system(), &b);
    kiln_tune_device_t where;
    if (!s) kiln_tune_device_of(a, &where);
    kiln_template_set_t set;
    kiln_program_templates(tg, &set);
    set.gpu_lacks = s ? 0 : where.limits.gpu_lacks;
    kiln_plan_options_t po = {tg->lowering, 0, s ? 0 : where.limits.loop_limit, 0, 0, tg->ew_lanes};
    kiln_plan_t* plan = NULL;
    kiln_fusion_report_t fr;
    if (!s) s = kiln_plan_build(g, &po, kiln_allocator_system(), &plan);
    if (!s) s = kiln_plan_fuse(plan, &fr, NULL);
    if (!s) s = kiln_template_select(plan, &set);
    if (!s) s = kiln_template_weights_lay_out(plan);
    double t_def = 0, t_close = 0, t_points = 0;
    int32_t units = 0, reused = 0, n = 0;
    if (!s) s = whole(a, tg, plan, in, g->n_outputs, &t_def, &units, &reused);
    if (!s) kiln_template_weights_restore(plan);
    kiln_tune_micro_t* m = calloc((size_t)want + 1, sizeof *m);
    kiln_template_tiles_t* pts = calloc((size_t)plan->n_kernels + 1, sizeof *pts);
    bool* moved = calloc((size_t)plan->n_kernels + 1, sizeof *moved);
    const double tp = now_s();
    for (int32_t k = 0; !s && k < plan->n_kernels && n < want; ++k) {
      const kiln_template_t* t = kiln_template_tunable_of(plan, k);
      kiln_template_space_t sp;
      if (!t || !set.space(t, &sp)) continue;
      bool found = false;
      kiln_template_tiles_t hs[8];
      for (int32_t i = 0, nh = hint && set.tiles_hints ? set.tiles_hints(t, hs, 8) : 0; i < nh && !found; ++i)
        if (!set.tiles_check(t, &hs[i], &where.limits)) pts[k] = hs[i], found = true;
      for (int32_t i = 0; i < sp.n_knobs && !found && !hint; ++i)
        for (int32_t j = 0; j < sp.knobs[i].n && !found; ++j) {
          kiln_template_tiles_t x = t->tiles;
          x.v[i] = sp.knobs[i].v[j];
          if (x.v[i] != t->tiles.v[i] && !set.tiles_check(t, &x, &where.limits)) pts[k] = x, found = true;
        }
      if (!found) continue;
      double tc, td;
      bool match = false;
      kiln_status_t ms = kiln_tune_micro_init(&m[n], plan, k, tg, &set, b, 0, 7);
      ++n;
      if (!ms) ms = kiln_tune_micro_measure(&m[n - 1], &pts[k], 1, &tc, &td, &match, NULL);
      if (ms) {
        fprintf(stderr, "kernel %d: %s (skipped)\n", (int)k, kiln_status_message(ms));
        kiln_status_free(ms);
        continue;
      }
      moved[k] = true;
    }
    t_points = now_s() - tp;
    /* the points in the plan and its weights laid out for them, as the
     * tune's closing build does (tune_search.c's set_tiles) */
    int32_t n_moved = 0;
    for (int32_t k = 0; !s && k < plan->n_kernels; ++k) {
      kiln_template_t* t = kiln_template_tunable_of(plan, k);
      if (!t || !moved[k]) continue;
      t->tiles = pts[k];
      ++n_moved;
      t = kiln_template_switch(plan, k);
      if (t && t->weights.layout != KILN_TEMPLATE_W_PACKED && set.weight_blocks) set.weight_blocks(t);
    }
    if (!s) s = kiln_template_weights_lay_out(plan);
    if (!s) s = whole(a, tg, plan, in, g->n_outputs, &t_close, &units, &reused);
    if (!s)
      printf("%s: default build %.1f s; %d kernels at another point built alone on a second device %.1f s; the "
             "model with them (the closing build) %.1f s, %d of its %d units reused\n",
             pass == 0 ? "points' code shared (this tree)" : "points' code not shared (KILN_TUNE_REUSE=off for them)",
             t_def, (int)n_moved, t_points, t_close, (int)reused, (int)units);
    for (int32_t i = 0; i < n; ++i) kiln_tune_micro_free(&m[i]);
    free(m);
    free(pts);
    free(moved);
    kiln_plan_destroy(plan);
    kiln_device_release(b);
    kiln_device_release(a);
  }
  unsetenv("KILN_TUNE_REUSE");
  for (int32_t i = 0; i < g->n_inputs; ++i) kiln_array_free(kiln_allocator_system(), &in[i]);
  free(in);
  kiln_graph_destroy(g);
  return s ? fail(s, "bench") : 0;
}
