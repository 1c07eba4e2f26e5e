/* Auto-tuning on OpenCL device 0 (compiler/tune.h, targets/opencl/
 * opencl_tune.c): a quick `kiln tune` of a small model (a Winograd conv,
 * an implicit-GEMM conv and a GEMM) with a tiny budget writes one record
 * per distinct kernel, none slower than its default; the cache, written,
 * merged with another machine's and read back as a fresh machine would,
 * gives every instance its tiles; a program built with tuned tiles (the
 * search's, and for every kernel a non-default point of its space)
 * computes what the default program computes; records for another driver
 * are not trusted, points the constraints refuse are not used; Winograd
 * on or off per conv is a knob whose off point computes the same. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compiler/tune.h"
#include "compiler/tune_dear.h"
#include "compiler/tune_micro.h"
#include "graph_harness.h"
#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "runtime/module_impl.h"
#include "runtime/opencl/opencl_device.h"
#include "runtime/session_impl.h"
#include "targets/opencl/opencl_internal.h"
#include "targets/program_build.h"
#include "targets/registry.h"
#include "testing.h"
#include "tune_points_util.h"

static kiln_allocator_t A(void) { return kiln_allocator_system(); }

/* x [1,16,14,14] -> Conv 3x3 (32) -> Relu -> Conv 1x1 stride 2 (32) ->
 * Relu -> Flatten -> MatMul [1568, 10] -> z */
static bool model(gb_t* b) {
  gb_init(b);
  input(b, "x", DIMS(1, 16, 14, 14));
  konst(b, "w1", DIMS(32, 16, 3, 3));
  konst(b, "w2", DIMS(32, 32, 1, 1));
  konst(b, "wf", DIMS(1568, 10));
  kiln_attr_t pads[1] = {kiln_attr_make_ints("pads", 4, (int64_t[]){1, 1, 1, 1})};
  kiln_attr_t strides[1] = {kiln_attr_make_ints("strides", 2, (int64_t[]){2, 2})};
  node(b, "Conv", IN("x", "w1"), "c1", 1, pads);
  node(b, "Relu", IN("c1"), "r1", 0, NULL);
  node(b, "Conv", IN("r1", "w2"), "c2", 1, strides);
  node(b, "Relu", IN("c2"), "r2", 0, NULL);
  node(b, "Flatten", IN("r2"), "f", 0, NULL);
  node(b, "MatMul", IN("f", "wf"), "z", 0, NULL);
  return CHECK_OK(b->st) && CHECK_OK(kiln_graph_add_output(b->g, "z")) && CHECK_OK(kiln_graph_prepare(b->g));
}

static kiln_status_t plan_of(gb_t* b, kiln_plan_t** out) {
  kiln_plan_options_t po = {KILN_TARGET_CLASS_GPU, 0, 0, 0, 0, 0};
  KILN_RETURN_IF_ERROR(kiln_plan_build(b->g, &po, A(), out));
  kiln_fusion_report_t rep;
  return kiln_plan_fuse(*out, &rep, NULL);
}

/* Builds |plan| (templates chosen) and runs it on |dev| into out[0]. */
static bool run_plan(kiln_device_t* dev, gb_t* b, kiln_plan_t* plan, kiln_array_t* out) {
  kiln_program_t* prog = NULL;
  kiln_program_build_options_t bo = {.model_name = "tune"};
  bool ok = CHECK_OK(kiln_program_build(plan, kiln_target_find("opencl"), &bo, A(), &prog)) &&
            CHECK_OK(run_on(dev, prog, b->feeds, out));
  kiln_program_destroy(prog);
  return ok;
}

static void test_tune_and_use(void) {
  kiln_device_t* dev = open_opencl_device_0();
  CHECK(dev != NULL);
  if (!dev) return;
  gb_t b;
  if (!model(&b)) return;
  const kiln_target_t* target = kiln_target_find("opencl");
  kiln_template_set_t set;
  kiln_program_templates(target, &set);
  kiln_tune_device_t where;
  kiln_tune_device_of(dev, &where);

  /* the search, with a tiny budget */
  kiln_tune_options_t o;
  kiln_tune_options_default(&o);
  /* --trials ends the search once every kernel has its points (seconds
   * on an idle machine); the budget is the cap for a loaded one: at load
   * 13 a 100 s budget left its first point (a kernel's set-up alone costs
   * 5-10 s of PoCL on a loaded 2-core machine, a point up to 47 s) to the
   * deadline, 1 trial where 3 are wanted */
  o.budget_s = 300;
  o.trials = 2;
  o.repeats = 2;
  o.log = stdout;
  o.device = "opencl:0"; /* as the CLI: the kernels alone on a second device, sharing its code */
  kiln_tune_cache_t cache = {0};
  kiln_tune_summary_t sum;
  if (!CHECK_OK(kiln_tune_model(b.g, target, dev, &o, &cache, &sum))) goto out;
  printf("\n");
  CHECK_MSG(sum.kernels == 3 && sum.instances == 3, "%d kernels, %d instances", (int)sum.kernels, (int)sum.instances);
  CHECK_MSG(sum.elapsed_s < 1.1 * o.budget_s, "a %.0f s budget took %.1f s", o.budget_s, sum.elapsed_s);
  /* a closing build (a point changed) compiles nothing: its kept points'
   * kernels were built alone on the second device, the rest by the
   * default build */
  CHECK_MSG(sum.closing_units == sum.closing_units_reused, "the closing build reused %d of its %d units",
            (int)sum.closing_units_reused, (int)sum.closing_units);
  /* never slower as a whole: a model slower than the default beside it
   * keeps nothing (model_reverted), else the kept points make it faster */
  CHECK_MSG(sum.model_reverted ? sum.improved == 0 : sum.improved == 0 || sum.tuned_ms <= sum.default_ms,
            "tuned %.3f ms vs default %.3f ms with %d kernels kept (reverted as a whole: %d)", sum.tuned_ms,
            sum.default_ms, (int)sum.improved, (int)sum.model_reverted);
  CHECK_MSG(cache.n == sum.kernels && sum.trials >= 3 && sum.rejected == 0, "%d records, %d trials, %d rejected",
            (int)cache.n, (int)sum.trials, (int)sum.rejected);
  for (int32_t i = 0; i < cache.n; ++i) {
    CHECK_MSG(cache.r[i].tuned_us <= cache.r[i].default_us, "record %d slower than its default", (int)i);
    CHECK(!strcmp(cache.r[i].key.target, "opencl") && !strcmp(cache.r[i].key.device, where.device));
  }

  /* the cache goes through its file and a merge with another machine's */
  char dir[128], mine[200], theirs[200], merged[200];
  snprintf(dir, sizeof dir, "/tmp/kiln_test_opencl_tune_%ld", (long)getpid());
  snprintf(mine, sizeof mine, "%s.mine.tsv", dir);
  snprintf(theirs, sizeof theirs, "%s.theirs.tsv", dir);
  snprintf(merged, sizeof merged, "%s.merged.tsv", dir);
  kiln_tune_cache_t other = {0}, fresh = {0};
  for (int32_t i = 0; i < cache.n; ++i) {
    kiln_tune_record_t r = cache.r[i];
    snprintf(r.key.device, sizeof r.key.device, "another GPU");
    CHECK_OK(kiln_tune_cache_put(&other, &r, false));
  }
  CHECK_OK(kiln_tune_cache_write(&cache, mine));
  CHECK_OK(kiln_tune_cache_write(&other, theirs));
  CHECK_OK(kiln_tune_cache_read(&fresh, theirs, stderr));
  CHECK_OK(kiln_tune_cache_read(&fresh, mine, stderr));
  CHECK_OK(kiln_tune_cache_write(&fresh, merged));
  kiln_tune_cache_free(&fresh);
  CHECK_OK(kiln_tune_cache_read(&fresh, merged, stderr));
  CHECK(fresh.n == 2 * cache.n && fresh.skipped == 0);

  /* the default program's outputs */
  kiln_plan_t *pd = NULL, *pt = NULL;
  kiln_array_t want[1] = {{0}}, got[1] = {{0}};
  if (!CHECK_OK(plan_of(&b, &pd)) || !CHECK_OK(choose_opencl_templates(pd, NULL)) || !run_plan(dev, &b, pd, want))
    goto done;

  /* the merged cache on a fresh plan: every instance found */
  kiln_tune_use_report_t rep;
  if (!CHECK_OK(plan_of(&b, &pt)) || !CHECK_OK(kiln_tune_choose(pt, &set, &fresh, &where, stderr, &rep))) goto done;
  CHECK_MSG(rep.instances == 3 && rep.tuned + rep.kept == 3 && rep.untuned == 0 && rep.refused == 0,
            "instances %d tuned %d kept %d untuned %d refused %d", (int)rep.instances, (int)rep.tuned, (int)rep.kept,
            (int)rep.untuned, (int)rep.refused);
  if (run_plan(dev, &b, pt, got)) CHECK(close_enough(&got[0], &want[0], "the search's tiles vs the defaults"));
  kiln_array_free(A(), &got[0]);

  /* every kernel at a non-default point from a cache: the descriptors
   * take it, the weights are laid out for it, the results stay */
  kiln_tune_cache_t forced = {0};
  CHECK_OK(kiln_template_select(pt, &set));
  for (int32_t k = 0; k < pt->n_kernels; ++k) {
    const kiln_template_t* t = pt->kernels[k].tmpl;
    kiln_template_space_t sp;
    if (!t || !set.space(t, &sp)) continue;
    kiln_tune_record_t r = {.default_us = 100, .tuned_us = 50};
    r.key.fingerprint = kiln_template_fingerprint(t);
    snprintf(r.key.target, sizeof r.key.target, "opencl");
    snprintf(r.key.space, sizeof r.key.space, "%s", sp.version);
    snprintf(r.key.device, sizeof r.key.device, "%s", where.device);
    snprintf(r.key.driver, sizeof r.key.driver, "%s", where.driver);
    snprintf(r.key.kiln, sizeof r.key.kiln, "%s", KILN_VERSION);
    CHECK(tp_nth_point(&set, t, &where, 0, &r.tiles));
    CHECK_OK(kiln_tune_cache_put(&forced, &r, false));
  }
  CHECK(forced.n == 3);
  if (CHECK_OK(kiln_tune_choose(pt, &set, &forced, &where, stderr, &rep))) {
    CHECK(rep.tuned == 3);
    for (int32_t k = 0; k < pt->n_kernels; ++k) {
      const kiln_template_t* t = pt->kernels[k].tmpl;
      kiln_template_space_t sp;
      if (!t || !set.space(t, &sp)) continue;
      kiln_tune_key_t key = forced.r[0].key;
      key.fingerprint = kiln_template_fingerprint(t);
      snprintf(key.space, sizeof key.space, "%s", sp.version);
      const kiln_tune_record_t* r = kiln_tune_cache_find(&forced, &key);
      CHECK(r && memcmp(r->tiles.v, t->tiles.v, sizeof(int32_t) * (size_t)r->tiles.n) == 0);
      CHECK(t->weights.layout == KILN_TEMPLATE_W_PACKED || t->weights.laid_out);
    }
    if (run_plan(dev, &b, pt, got)) CHECK(close_enough(&got[0], &want[0], "non-default tiles vs the defaults"));
    kiln_array_free(A(), &got[0]);
  }

  /* another driver's records: not trusted (untuned, stale); a point the
   * constraints refuse: not used */
  kiln_tune_device_t elsewhere = where;
  snprintf(elsewhere.driver, sizeof elsewhere.driver, "driver 0.0");
  if (CHECK_OK(kiln_tune_choose(pt, &set, &forced, &elsewhere, NULL, &rep)))
    CHECK(rep.tuned == 0 && rep.untuned == 3 && rep.stale == 3);
  for (int32_t i = 0; i < forced.n; ++i) forced.r[i].tiles.v[0] = 4097;
  if (CHECK_OK(kiln_tune_choose(pt, &set, &forced, &where, NULL, &rep))) CHECK(rep.tuned == 0 && rep.refused == 3);
  kiln_tune_cache_free(&forced);

  /* the constraints: the defaults fit this device; a work-group or __local
   * tiles past its limits do not */
  for (int32_t k = 0; k < pt->n_kernels; ++k) {
    const kiln_template_t* t = pt->kernels[k].tmpl;
    if (!t || t->kind != KILN_TEMPLATE_GEMM) continue;
    CHECK(set.tiles_check(t, &t->tiles, &where.limits) == NULL);
    kiln_template_tiles_t x = t->tiles;
    if (t->tiles.n == 4) {
      /* a GEMM of few rows, gemv.cl's record vw,nc,wk,on: one work-item a
       * group by default (no __local), a K split of 64 items needs
       * 64 x M x nc floats of it; vw 3 is refused */
      const kiln_template_limits_t small = {.max_workgroup_size = 256, .local_mem_bytes = 1024};
      CHECK(set.tiles_check(t, &t->tiles, &small) == NULL);
      x.v[2] = 64;
      CHECK(set.tiles_check(t, &x, &small) != NULL);
      CHECK(set.tiles_check(t, &x, &where.limits) == NULL);
      x = t->tiles;
      x.v[0] = 3;
      CHECK(set.tiles_check(t, &x, &where.limits) != NULL);
      continue;
    }
    x.v[3] = x.v[4] = 64;
    const kiln_template_limits_t small = {.max_workgroup_size = 256, .local_mem_bytes = 1024};
    CHECK(set.tiles_check(t, &x, &small) != NULL);
    CHECK(set.tiles_check(t, &t->tiles, &small) != NULL); /* __local */
    x = t->tiles;
    x.v[2] = 3; /* vw */
    CHECK(set.tiles_check(t, &x, &where.limits) != NULL);
  }
done:
  kiln_array_free(A(), &want[0]);
  kiln_plan_destroy(pd);
  kiln_plan_destroy(pt);
  kiln_tune_cache_free(&other);
  kiln_tune_cache_free(&fresh);
  unlink(mine);
  unlink(theirs);
  unlink(merged);
out:
  kiln_tune_cache_free(&cache);
  for (int i = 0; i < b.n_feeds; ++i) kiln_array_free(A(), &b.feeds[i]);
  kiln_graph_destroy(b.g);
  kiln_device_release(dev);
}

/* Winograd on or off per conv (kiln_template_set_t.winograd_switch): the
 * model's 3x3 conv is a Winograd instance whose record ends in the switch
 * (space opencl.winograd.3, knob "f" 2/4 the output tile before it, knob
 * "wino" 0/1, 1 the default); switch values other than 0 and 1 and tiles
 * other than 2 and 4 are refused; an off point is tied to one point, the
 * first hint, the other output tile the second (the GPU rules' tiles
 * for an instance whose device is a GPU); a
 * cache record with the switch off puts the implicit-GEMM conv (its
 * default tiles, its own weight layout) in the kernel's place, whose
 * program computes what the default's does, and the module records the
 * Winograd record with the conv's tiles; the instance alone at the off
 * point matches its default program's outputs. */
static void test_winograd_switch(void) {
  kiln_device_t* dev = open_opencl_device_0();
  CHECK(dev != NULL);
  if (!dev) return;
  gb_t b;
  if (!model(&b)) return;
  const kiln_target_t* target = kiln_target_find("opencl");
  kiln_template_set_t set;
  kiln_program_templates(target, &set);
  kiln_tune_device_t where;
  kiln_tune_device_of(dev, &where);
  kiln_plan_t *pd = NULL, *pt = NULL;
  kiln_array_t want[1] = {{0}}, got[1] = {{0}};
  kiln_tune_cache_t forced = {0};
  kiln_program_t* prog = NULL;
  if (!CHECK_OK(plan_of(&b, &pd)) || !CHECK_OK(choose_opencl_templates(pd, NULL)) || !run_plan(dev, &b, pd, want))
    goto out;
  if (!CHECK_OK(plan_of(&b, &pt)) || !CHECK_OK(kiln_template_select(pt, &set))) goto out;
  int32_t wk = -1;
  for (int32_t k = 0; k < pt->n_kernels; ++k)
    if (pt->kernels[k].tmpl && pt->kernels[k].tmpl->kind == KILN_TEMPLATE_WINOGRAD) wk = k;
  CHECK(wk >= 0);
  if (wk < 0) goto out;
  const kiln_template_t* w = pt->kernels[wk].tmpl;
  kiln_template_space_t sp;
  CHECK(set.space(w, &sp) && sp.n_knobs == 7 && !strcmp(sp.version, "opencl.winograd.3"));
  CHECK(!strcmp(sp.knobs[6].name, "wino") && sp.knobs[6].n == 2 && w->tiles.v[6] == 1);
  CHECK(!strcmp(sp.knobs[5].name, "f") && sp.knobs[5].n == 2 && (w->tiles.v[5] == 2 || w->tiles.v[5] == 4));
  CHECK(w->alt && w->alt->kind == KILN_TEMPLATE_CONV && w->alt->alt == w && w->alt->tiles.n == 8);
  CHECK(set.tiles_check(w, &w->tiles, &where.limits) == NULL);
  kiln_template_tiles_t x = w->tiles;
  x.v[6] = 2;
  CHECK(set.tiles_check(w, &x, &where.limits) != NULL);
  x.v[6] = -1;
  CHECK(set.tiles_check(w, &x, &where.limits) != NULL);
  x = w->tiles;
  x.v[5] = 3;
  CHECK(set.tiles_check(w, &x, &where.limits) != NULL);
  /* F(4x4) with F(2x2)'s largest private tile: 36 x 16 x 16 sums */
  x.v[5] = 4, x.v[0] = 16, x.v[1] = 16;
  CHECK(set.tiles_check(w, &x, &where.limits) != NULL);
  x = w->tiles;
  x.n = 6;
  CHECK(set.tiles_check(w, &x, &where.limits) != NULL);
  /* off: one point for every tile choice, the first hint */
  kiln_template_tiles_t off = w->tiles, off2 = w->tiles;
  off.v[6] = off2.v[6] = 0;
  off2.v[0] = off2.v[0] == 4 ? 8 : 4;
  off2.v[5] = off2.v[5] == 4 ? 2 : 4;
  set.tiles_tie(w, &off);
  set.tiles_tie(w, &off2);
  CHECK(memcmp(off.v, off2.v, sizeof off.v) == 0 && set.tiles_check(w, &off, &where.limits) == NULL);
  kiln_template_tiles_t h[4];
  CHECK(set.tiles_hints(w, h, 4) == 2 && memcmp(h[0].v, off.v, sizeof off.v) == 0);
  CHECK(h[1].n == 7 && h[1].v[6] == 1 && h[1].v[5] == (w->tiles.v[5] == 4 ? 2 : 4) &&
        set.tiles_check(w, &h[1], &where.limits) == NULL);
  /* the same instance chosen under the GPU rules (its device a GPU): the
   * off point ties to the GPU rules' default tiles and the other output
   * tile's hint is the GPU rules' point, not PoCL's one-item groups */
  {
    kiln_template_t wg = *w;
    wg.device = where.limits;
    wg.device.gpu_lacks |= KILN_GPU_CLASS_GPU;
    kiln_template_tiles_t offg = w->tiles;
    offg.v[6] = 0;
    set.tiles_tie(&wg, &offg);
    const kiln_opencl_wino_tiles_t dg = kiln_opencl_wino_default_tiles(&wg.conv, true, &wg.device);
    CHECK(offg.v[0] == dg.tm && offg.v[1] == dg.tn && offg.v[2] == dg.wx && offg.v[3] == dg.wy &&
          offg.v[4] == dg.cb && offg.v[5] == dg.f && offg.v[6] == 0);
    CHECK(offg.v[2] * offg.v[3] >= 64 && set.tiles_check(&wg, &offg, &where.limits) == NULL);
    kiln_template_tiles_t hg[4];
    CHECK(set.tiles_hints(&wg, hg, 4) == 2 && memcmp(hg[0].v, offg.v, sizeof offg.v) == 0);
    const int32_t of = w->tiles.v[5] == 4 ? 2 : 4;
    const kiln_opencl_wino_tiles_t og = kiln_opencl_wino_gpu_tiles(&wg.conv, of, &wg.device);
    CHECK(hg[1].n == 7 && hg[1].v[0] == og.tm && hg[1].v[1] == og.tn && hg[1].v[2] == og.wx &&
          hg[1].v[3] == og.wy && hg[1].v[4] == og.cb && hg[1].v[5] == of && hg[1].v[6] == 1);
    CHECK(hg[1].v[2] * hg[1].v[3] >= 64 && set.tiles_check(&wg, &hg[1], &where.limits) == NULL);
    /* on the CPU rules' instance the hint is PoCL's (one group of 1 x 4) */
    CHECK(h[1].v[2] * h[1].v[3] < 64);
  }

  /* the instance alone, off against its default (on) */
  kiln_tune_micro_t m;
  kiln_status_t ms = kiln_tune_micro_init(&m, pt, wk, target, &set, dev, 0, 7);
  double tp = 0, td = 0;
  bool match = false;
  if (CHECK_OK(ms) && CHECK_OK(kiln_tune_micro_measure(&m, &off, 2, &tp, &td, &match, stdout)))
    CHECK_MSG(match && tp > 0 && td > 0, "the implicit-GEMM conv alone: match %d, %.3f vs %.3f ms", (int)match,
              1e3 * tp, 1e3 * td);
  kiln_tune_micro_free(&m);

  /* a cache record with the switch off */
  kiln_tune_record_t r = {.default_us = 100, .tuned_us = 80, .tiles = off};
  r.key.fingerprint = kiln_template_fingerprint(w);
  snprintf(r.key.target, sizeof r.key.target, "opencl");
  snprintf(r.key.space, sizeof r.key.space, "%s", sp.version);
  snprintf(r.key.device, sizeof r.key.device, "%s", where.device);
  snprintf(r.key.driver, sizeof r.key.driver, "%s", where.driver);
  snprintf(r.key.kiln, sizeof r.key.kiln, "%s", KILN_VERSION);
  CHECK_OK(kiln_tune_cache_put(&forced, &r, false));
  kiln_tune_use_report_t rep;
  if (!CHECK_OK(kiln_tune_choose(pt, &set, &forced, &where, stderr, &rep))) goto out;
  CHECK(rep.tuned == 1);
  const kiln_template_t* c = pt->kernels[wk].tmpl;
  CHECK(c->kind == KILN_TEMPLATE_CONV && c->alt && c->weights.layout == KILN_TEMPLATE_W_TILED && c->weights.laid_out);
  CHECK(kiln_template_tunable_of(pt, wk)->kind == KILN_TEMPLATE_WINOGRAD);
  if (run_plan(dev, &b, pt, got)) CHECK(close_enough(&got[0], &want[0], "Winograd off vs on"));
  kiln_array_free(A(), &got[0]);
  kiln_program_build_options_t bo = {.model_name = "tune"};
  if (CHECK_OK(kiln_program_build(pt, target, &bo, A(), &prog)) && CHECK_OK(kiln_tune_mark_program(pt, prog))) {
    int32_t marked = 0;
    for (int32_t j = 0; j < prog->n_kernels; ++j)
      if (prog->kernels[j].tuned) {
        marked++;
        CHECK_MSG(!strncmp(prog->kernels[j].tuned, "winograd ", 9) && strstr(prog->kernels[j].tuned, ",0 (off: conv "),
                  "recorded: %s", prog->kernels[j].tuned);
      }
    CHECK_MSG(marked == 1, "%d kernels marked tuned", (int)marked);
  }
  /* and on again: the Winograd instance back, the same outputs */
  forced.r[0].tiles = w->tiles;
  forced.r[0].tiles.v[0] = w->tiles.v[0] == 8 ? 4 : 8;
  if (CHECK_OK(kiln_tune_choose(pt, &set, &forced, &where, stderr, &rep))) {
    CHECK(rep.tuned == 1 && pt->kernels[wk].tmpl->kind == KILN_TEMPLATE_WINOGRAD);
    if (run_plan(dev, &b, pt, got)) CHECK(close_enough(&got[0], &want[0], "Winograd at another point"));
    kiln_array_free(A(), &got[0]);
  }
out:
  kiln_program_destroy(prog);
  kiln_tune_cache_free(&forced);
  kiln_array_free(A(), &want[0]);
  kiln_plan_destroy(pd);
  kiln_plan_destroy(pt);
  for (int i = 0; i < b.n_feeds; ++i) kiln_array_free(A(), &b.feeds[i]);
  kiln_graph_destroy(b.g);
  kiln_device_release(dev);
}

/* x [1,16,14,14] -> depthwise 3x3 pad 1 -> Relu -> depthwise 3x3 stride 2
 * pad 1 -> z */
static bool dw_model(gb_t* b) {
  gb_init(b);
  input(b, "x", DIMS(1, 16, 14, 14));
  konst(b, "d1", DIMS(16, 1, 3, 3));
  konst(b, "d2", DIMS(16, 1, 3, 3));
  kiln_attr_t a1[2] = {kiln_attr_make_ints("pads", 4, (int64_t[]){1, 1, 1, 1}), kiln_attr_make_int("group", 16)};
  kiln_attr_t a2[3] = {kiln_attr_make_ints("pads", 4, (int64_t[]){1, 1, 1, 1}), kiln_attr_make_int("group", 16),
                       kiln_attr_make_ints("strides", 2, (int64_t[]){2, 2})};
  node(b, "Conv", IN("x", "d1"), "c1", 2, a1);
  node(b, "Relu", IN("c1"), "r1", 0, NULL);
  node(b, "Conv", IN("r1", "d2"), "z", 3, a2);
  return CHECK_OK(b->st) && CHECK_OK(kiln_graph_add_output(b->g, "z")) && CHECK_OK(kiln_graph_prepare(b->g));
}

/* The depthwise template or the printed kernel per conv
 * (kiln_template_set_t.depthwise_switch): the stride-1 conv runs printed
 * (its instance waits in tmpl_off, switch 0), the stride-2 one as the
 * template (switch 1), both in space opencl.depthwise.2; switch values
 * other than 0 and 1 are refused; the printed point ties to one, each
 * kernel's first hint is the other choice; alone, each kernel at the
 * other choice matches its default's outputs; from cache records the
 * stride-1 conv runs as the template and the stride-2 one printed, the
 * model's outputs match the default build's and the program records
 * both points. */
static void test_depthwise_switch(void) {
  kiln_device_t* dev = open_opencl_device_0();
  CHECK(dev != NULL);
  if (!dev) return;
  gb_t b;
  if (!dw_model(&b)) return;
  const kiln_target_t* target = kiln_target_find("opencl");
  kiln_template_set_t set;
  kiln_program_templates(target, &set);
  kiln_tune_device_t where;
  kiln_tune_device_of(dev, &where);
  kiln_plan_t *pd = NULL, *pt = NULL;
  kiln_array_t want[1] = {{0}}, got[1] = {{0}};
  kiln_tune_cache_t forced = {0};
  kiln_program_t* prog = NULL;
  if (!CHECK_OK(plan_of(&b, &pd)) || !CHECK_OK(choose_opencl_templates(pd, NULL)) || !run_plan(dev, &b, pd, want))
    goto out;
  if (!CHECK_OK(plan_of(&b, &pt)) || !CHECK_OK(kiln_template_select(pt, &set))) goto out;
  int32_t k1 = -1, k2 = -1;
  for (int32_t k = 0; k < pt->n_kernels; ++k) {
    const kiln_template_t* d = pt->kernels[k].tmpl_off;
    if (!d || d->kind != KILN_TEMPLATE_DEPTHWISE) continue;
    if (d->dw.sh == 1) k1 = k;
    if (d->dw.sh == 2) k2 = k;
  }
  CHECK(k1 >= 0 && k2 >= 0);
  if (k1 < 0 || k2 < 0) goto out;
  const kiln_template_t* d1 = pt->kernels[k1].tmpl_off;
  const kiln_template_t* d2 = pt->kernels[k2].tmpl_off;
  CHECK(pt->kernels[k1].tmpl == NULL && d1->tiles.n == 4 && d1->tiles.v[3] == 0);
  CHECK(pt->kernels[k2].tmpl == d2 && d2->tiles.n == 4 && d2->tiles.v[3] == 1);
  CHECK(kiln_template_tunable_of(pt, k1) == d1 && kiln_template_tunable_of(pt, k2) == d2);
  kiln_template_space_t sp;
  CHECK(set.space(d1, &sp) && sp.n_knobs == 4 && !strcmp(sp.version, "opencl.depthwise.2") &&
        !strcmp(sp.knobs[3].name, "tmpl"));
  kiln_template_tiles_t x = d1->tiles;
  x.v[3] = 2;
  CHECK(set.tiles_check(d1, &x, &where.limits) != NULL);
  x.n = 3;
  CHECK(set.tiles_check(d1, &x, &where.limits) != NULL);
  kiln_template_tiles_t p1 = d1->tiles, p1b = d1->tiles;
  p1b.v[2] = p1b.v[2] == 64 ? 128 : 64;
  set.tiles_tie(d1, &p1);
  set.tiles_tie(d1, &p1b);
  CHECK(memcmp(p1.v, p1b.v, sizeof p1.v) == 0);
  kiln_template_tiles_t h1[4], h2[4];
  const int32_t n1 = set.tiles_hints(d1, h1, 4), n2 = set.tiles_hints(d2, h2, 4);
  CHECK(n1 >= 1 && h1[0].v[3] == 1 && n2 >= 1 && h2[0].v[3] == 0);
  CHECK(set.tiles_check(d1, &h1[0], &where.limits) == NULL && set.tiles_check(d2, &h2[0], &where.limits) == NULL);

  /* alone, each at the other choice */
  const int32_t ks[2] = {k1, k2};
  const kiln_template_tiles_t* pts[2] = {&h1[0], &h2[0]};
  for (int32_t i = 0; i < 2; ++i) {
    kiln_tune_micro_t m;
    double tp = 0, td = 0;
    bool match = false;
    if (CHECK_OK(kiln_tune_micro_init(&m, pt, ks[i], target, &set, dev, 0, 7)) &&
        CHECK_OK(kiln_tune_micro_measure(&m, pts[i], 2, &tp, &td, &match, stdout)))
      CHECK_MSG(match && tp > 0 && td > 0, "depthwise %d alone at the other choice: match %d", (int)i, (int)match);
    kiln_tune_micro_free(&m);
  }

  /* from cache records: the stride-1 conv as the template, the stride-2
   * one printed */
  for (int32_t i = 0; i < 2; ++i) {
    const kiln_template_t* d = i ? d2 : d1;
    kiln_tune_record_t r = {.default_us = 100, .tuned_us = 80, .tiles = *pts[i]};
    r.key.fingerprint = kiln_template_fingerprint(d);
    snprintf(r.key.target, sizeof r.key.target, "opencl");
    snprintf(r.key.space, sizeof r.key.space, "%s", sp.version);
    snprintf(r.key.device, sizeof r.key.device, "%s", where.device);
    snprintf(r.key.driver, sizeof r.key.driver, "%s", where.driver);
    snprintf(r.key.kiln, sizeof r.key.kiln, "%s", KILN_VERSION);
    CHECK_OK(kiln_tune_cache_put(&forced, &r, false));
  }
  kiln_tune_use_report_t rep;
  if (!CHECK_OK(kiln_tune_choose(pt, &set, &forced, &where, stderr, &rep))) goto out;
  CHECK_MSG(rep.tuned == 2 && rep.instances == 2, "tuned %d of %d", (int)rep.tuned, (int)rep.instances);
  CHECK(pt->kernels[k1].tmpl && pt->kernels[k1].tmpl->kind == KILN_TEMPLATE_DEPTHWISE && !pt->kernels[k2].tmpl);
  if (run_plan(dev, &b, pt, got)) CHECK(close_enough(&got[0], &want[0], "depthwise switched vs the defaults"));
  kiln_array_free(A(), &got[0]);
  kiln_program_build_options_t bo = {.model_name = "tune"};
  if (CHECK_OK(kiln_program_build(pt, target, &bo, A(), &prog)) && CHECK_OK(kiln_tune_mark_program(pt, prog))) {
    int32_t on = 0, off = 0;
    for (int32_t j = 0; j < prog->n_kernels; ++j) {
      const char* tt = prog->kernels[j].tuned;
      if (!tt) continue;
      CHECK_MSG(!strncmp(tt, "depthwise ", 10), "recorded: %s", tt);
      off += strstr(tt, ",0 (off: the printed kernel)") != NULL;
      on += strstr(tt, ",1, ") != NULL;
    }
    CHECK_MSG(on == 1 && off == 1, "%d on, %d off recorded", (int)on, (int)off);
  }
out:
  kiln_program_destroy(prog);
  kiln_tune_cache_free(&forced);
  kiln_array_free(A(), &want[0]);
  kiln_plan_destroy(pd);
  kiln_plan_destroy(pt);
  for (int i = 0; i < b.n_feeds; ++i) kiln_array_free(A(), &b.feeds[i]);
  kiln_graph_destroy(b.g);
  kiln_device_release(dev);
}

/* |plan| built as kiln tune builds a whole model, into a session on |dev|
 * with reuse_code, run once into out[0]; its units and those reused. */
static bool closing_like(kiln_device_t* dev, gb_t* b, kiln_plan_t* plan, kiln_array_t* out, int32_t* units,
                         int32_t* reused) {
  kiln_program_t* prog = NULL;
  kiln_module_t* mod = NULL;
  kiln_session_t* ses = NULL;
  kiln_program_build_options_t bo = {.model_name = "tune", .precision = "fp32", .options = "-O1 tune"};
  kiln_session_options_t so;
  kiln_session_options_default(&so);
  so.cache_dir = "";
  so.reuse_code = true;
  bool ok = CHECK_OK(kiln_program_build(plan, kiln_target_find("opencl"), &bo, A(), &prog)) &&
            CHECK_OK(kiln_module_wrap(prog, &mod));
  if (!ok) kiln_program_destroy(prog);
  ok = ok && CHECK_OK(kiln_session_create(mod, dev, &so, &ses)) && CHECK_OK(kiln_session_run(ses, b->feeds, out));
  *units = *reused = 0;
  if (ses) {
    kiln_opencl_build_stats_t st;
    kiln_opencl_executable_stats(ses->exe, &st);
    *units = st.units;
    *reused = st.units_reused;
  }
  kiln_session_destroy(ses);
  kiln_module_release(mod);
  return ok;
}

/* A cache whose record for every template kernel of |pd| is its point
 * pts[k]. */
static void cache_of(const kiln_plan_t* pd, const kiln_template_set_t* set, const kiln_tune_device_t* where,
                     const kiln_template_tiles_t* pts, kiln_tune_cache_t* c) {
  for (int32_t k = 0; k < pd->n_kernels; ++k) {
    const kiln_template_t* t = kiln_template_tunable_of(pd, k);
    kiln_template_space_t sp;
    if (!t || !set->space(t, &sp)) continue;
    kiln_tune_record_t r = {.default_us = 100, .tuned_us = 50, .tiles = pts[k]};
    r.key.fingerprint = kiln_template_fingerprint(t);
    snprintf(r.key.target, sizeof r.key.target, "opencl");
    snprintf(r.key.space, sizeof r.key.space, "%s", sp.version);
    snprintf(r.key.device, sizeof r.key.device, "%s", where->device);
    snprintf(r.key.driver, sizeof r.key.driver, "%s", where->driver);
    snprintf(r.key.kiln, sizeof r.key.kiln, "%s", KILN_VERSION);
    CHECK_OK(kiln_tune_cache_put(c, &r, false));
  }
}

/* kiln tune's closing build compiles no kept point's kernel again: the
 * kernels alone are built on a second device of the same name (their
 * set-ups and points with reuse_code, kiln_tune_code_shared), whose units
 * the closing build on the first device takes (OpenCL: one context per
 * device in a process). Every kernel at a point built alone on the second
 * device, then the model with those points on the first: every unit
 * reused, the default build's outputs. With KILN_TUNE_REUSE=off the points
 * alone keep their code to themselves, and the model compiles them. */
static void test_closing_reuses_points(void) {
  kiln_device_t* dev = open_opencl_device_0();
  kiln_device_t* dev2 = open_opencl_device_0();
  CHECK(dev && dev2 && dev != dev2);
  gb_t b;
  if (!dev || !dev2 || !model(&b)) {
    kiln_device_release(dev);
    kiln_device_release(dev2);
    return;
  }
  const kiln_target_t* target = kiln_target_find("opencl");
  kiln_template_set_t set;
  kiln_program_templates(target, &set);
  kiln_tune_device_t where;
  kiln_tune_device_of(dev, &where);
  CHECK(kiln_tune_code_shared(dev));
  kiln_plan_t *pd = NULL, *pt = NULL;
  kiln_array_t want[1] = {{0}}, got[1] = {{0}};
  kiln_tune_micro_t m[8];
  int32_t n_m = 0, units = 0, reused = 0;
  kiln_template_tiles_t pts[64];
  if (!CHECK_OK(plan_of(&b, &pd)) || !CHECK_OK(choose_opencl_templates(pd, NULL))) goto done;
  CHECK(pd->n_kernels <= 64);
  if (pd->n_kernels > 64) goto done;
  /* the default build (kiln tune's first whole-model build) */
  if (!closing_like(dev, &b, pd, want, &units, &reused)) goto done;
  CHECK_MSG(units >= 3 && reused == 0, "default build: %d of %d units reused", (int)reused, (int)units);
  kiln_template_weights_restore(pd); /* as kiln tune: the points' layouts are made from the packed weights */
  for (int pass = 0; pass < 2; ++pass) {
    /* pass 1: the code of the points alone not shared */
    if (pass == 1) setenv("KILN_TUNE_REUSE", "off", 1);
    const int32_t changed = tp_points_alone(pd, target, &set, &where, dev2, pass, m, &n_m, 8, pts, 64);
    CHECK(changed == 3);
    kiln_tune_cache_t c = {0};
    kiln_tune_use_report_t rep;
    cache_of(pd, &set, &where, pts, &c);
    kiln_plan_destroy(pt);
    pt = NULL;
    if (CHECK_OK(plan_of(&b, &pt)) && CHECK_OK(kiln_tune_choose(pt, &set, &c, &where, stderr, &rep)) &&
        closing_like(dev, &b, pt, got, &units, &reused)) {
      CHECK(rep.tuned == 3);
      CHECK(close_enough(&got[0], &want[0], "the points' model vs the default's"));
      if (pass == 0)
        CHECK_MSG(units >= 3 && reused == units, "points shared: the model reused %d of %d units", (int)reused,
                  (int)units);
      else /* the three changed kernels compiled, the rest reused */
        CHECK_MSG(units >= 3 && reused == units - changed, "points not shared: the model reused %d of %d units",
                  (int)reused, (int)units);
    }
    kiln_array_free(A(), &got[0]);
    kiln_tune_cache_free(&c);
  }
  unsetenv("KILN_TUNE_REUSE");
done:
  for (int32_t i = 0; i < n_m; ++i) kiln_tune_micro_free(&m[i]);
  kiln_array_free(A(), &want[0]);
  kiln_plan_destroy(pd);
  kiln_plan_destroy(pt);
  for (int i = 0; i < b.n_feeds; ++i) kiln_array_free(A(), &b.feeds[i]);
  kiln_graph_destroy(b.g);
  kiln_device_release(dev2);
  kiln_device_release(dev);
}

/* The dear-draw skip on OpenCL (kiln_template_set_t.tiles_features,
 * compiler/tune_dear.h): a point's size and class from its knobs (GEMM /
 * conv accumulators a work-group, class 1 past 512; Winograd off and the
 * printed depthwise kernel classes of their own), and the draw that asks
 * the dear rule of a step from the best point's class into the
 * 1024-accumulator one, skips it where that class's point cost PoCL 10 s,
 * and measures a step within the class unasked. */
typedef struct {
  const kiln_tune_costs_t* book;
  const kiln_template_t* t;
  const kiln_template_tiles_t* allowed;
  double left_s;
  int32_t asked, skipped;
} ocl_draws_t;

static bool ocl_usable(void* c, const kiln_template_tiles_t* x) {
  const ocl_draws_t* d = c;
  return x->n == d->allowed->n && !memcmp(x->v, d->allowed->v, sizeof(int32_t) * (size_t)x->n) &&
         !kiln_opencl_tune_check(d->t, x, NULL);
}

static bool ocl_cls(void* c, const kiln_template_tiles_t* x, int32_t* cls) {
  const ocl_draws_t* d = c;
  double size = 0;
  kiln_opencl_tune_features(d->t, x, &size, cls);
  return size > 0;
}

static bool ocl_dear(void* c, const kiln_template_tiles_t* x, const char* from) {
  ocl_draws_t* d = c;
  double size = 0, pred = 0;
  int32_t cls = 0, by = -1;
  kiln_opencl_tune_features(d->t, x, &size, &cls);
  d->asked++;
  const bool dear = kiln_tune_dear_why(d->book, 0, d->t->kind, cls, size, d->left_s, &pred, &by) != NULL;
  d->skipped += dear;
  (void)from;
  return dear;
}

static void test_dear_features(void) {
  const kiln_template_set_t* set = NULL;
  kiln_template_set_t s;
  kiln_program_templates(kiln_target_find("opencl"), &s);
  set = &s;
  CHECK(set->tiles_features == kiln_opencl_tune_features);
  /* a MobileNetV2 1x1 conv's best point on PoCL: 8 x 32 accumulators a
   * work-item, 2 work-items */
  kiln_template_t conv = {.kind = KILN_TEMPLATE_CONV, .tiles = {.n = 8, .v = {8, 32, 16, 2, 1, 96, 2, 4}}};
  double size = 0;
  int32_t cls = -1;
  kiln_opencl_tune_features(&conv, &conv.tiles, &size, &cls);
  CHECK(size == 512 && cls == 0);
  kiln_template_tiles_t big = conv.tiles, small = conv.tiles;
  big.v[0] = 16;  /* tm: 16 x 32 x 2 */
  small.v[3] = 1; /* wx: 8 x 32 x 1 */
  kiln_opencl_tune_features(&conv, &big, &size, &cls);
  CHECK(size == 1024 && cls == 1);
  kiln_opencl_tune_features(&conv, &small, &size, &cls);
  CHECK(size == 256 && cls == 0);
  /* Winograd: one size whatever the tiles (PoCL's cost does not grow with
   * them); on class 0, off class 2 */
  kiln_template_t alt = {.kind = KILN_TEMPLATE_CONV, .tiles = {.n = 8, .v = {4, 32, 8, 2, 2, 64, 1, 1}}};
  kiln_template_t wino = {.kind = KILN_TEMPLATE_WINOGRAD, .alt = &alt, .tiles = {.n = 6, .v = {16, 8, 2, 2, 16, 1}}};
  kiln_opencl_tune_features(&wino, &wino.tiles, &size, &cls);
  CHECK(size == 1 && cls == 0);
  kiln_template_tiles_t wbig = wino.tiles, off = wino.tiles;
  wbig.v[0] = 32;
  wbig.v[3] = 4;
  kiln_opencl_tune_features(&wino, &wbig, &size, &cls);
  CHECK(size == 1 && cls == 0);
  off.v[5] = 0;
  kiln_opencl_tune_features(&wino, &off, &size, &cls);
  CHECK(size == 1 && cls == 2);
  /* so a Winograd point of a kernel whose one point cost 1 s is predicted
   * at 1 s, not extrapolated in its tiles */
  kiln_tune_costs_t wb = {0};
  kiln_tune_cost_t wc = {.group = 0, .kind = KILN_TEMPLATE_WINOGRAD, .cls = 0, .size = 1, .cost_s = 1.0, .q = 1.1,
                         .tiles = wino.tiles};
  CHECK_OK(kiln_tune_costs_add(&wb, &wc));
  CHECK_NEAR(kiln_tune_predict_cost(&wb, 0, KILN_TEMPLATE_WINOGRAD, 0, 1), 1.0, 1e-9);
  kiln_tune_costs_free(&wb);
  /* depthwise: one size; the printed kernel a class of its own */
  kiln_template_t dw = {.kind = KILN_TEMPLATE_DEPTHWISE, .tiles = {.n = 4, .v = {8, 2, 64, 1}}};
  kiln_opencl_tune_features(&dw, &dw.tiles, &size, &cls);
  CHECK(size == 1 && cls == 0);
  kiln_template_tiles_t printed = dw.tiles;
  printed.v[3] = 0;
  kiln_opencl_tune_features(&dw, &printed, &size, &cls);
  CHECK(cls == 1);

  /* the book of a PoCL tune: class-0 points about half a second, one
   * 1024-accumulator point 10 s and slower than the default */
  kiln_tune_costs_t b = {0};
  const double c0[4][2] = {{128, 0.5}, {256, 0.4}, {256, 0.5}, {128, 0.45}};
  for (int32_t i = 0; i < 4; ++i) {
    kiln_tune_cost_t c = {.group = 0, .kind = KILN_TEMPLATE_CONV, .cls = 0, .size = c0[i][0], .cost_s = c0[i][1],
                          .q = 1.05, .tiles = conv.tiles};
    CHECK_OK(kiln_tune_costs_add(&b, &c));
  }
  kiln_tune_cost_t c1 = {.group = 0, .kind = KILN_TEMPLATE_CONV, .cls = 1, .size = 1024, .cost_s = 10.0, .q = 1.47,
                         .tiles = big};
  c1.tiles.v[5] = 128;
  CHECK_OK(kiln_tune_costs_add(&b, &c1));
  kiln_template_space_t sp;
  CHECK(kiln_opencl_tune_space(&conv, &sp));
  int32_t next = 0;
  uint64_t rng = 88172645463325252ull;
  ocl_draws_t d = {.book = &b, .t = &conv, .allowed = &big, .left_s = 8};
  const char* from = NULL;
  kiln_tune_draw_t dr = {.space = &sp, .next_hint = &next, .best = &conv.tiles, .local = true, .rng = &rng,
                         .ctx = &d, .usable = ocl_usable, .dear = ocl_dear, .cls = ocl_cls, .from = &from};
  kiln_template_tiles_t x;
  /* the step into class 1 (tm 8 -> 16): asked, and dear */
  CHECK(kiln_tune_draw(&dr, &x) == KILN_TUNE_ONLY_DEAR);
  CHECK(d.asked > 0 && d.skipped == d.asked);
  /* measured once its class's point was faster and time allows */
  b.e[4].q = 0.9;
  d.left_s = 1000;
  d.asked = d.skipped = 0;
  CHECK(kiln_tune_draw(&dr, &x) == KILN_TUNE_DRAWN);
  CHECK(x.v[0] == 16 && from && !strcmp(from, "step") && d.skipped == 0);
  /* a step within the default's class: drawn unasked, however dear */
  b.e[4].q = 1.47;
  d.left_s = 0.01;
  d.allowed = &small;
  d.asked = d.skipped = 0;
  CHECK(kiln_tune_draw(&dr, &x) == KILN_TUNE_DRAWN);
  CHECK(x.v[3] == 1 && from && !strcmp(from, "step") && d.asked == 0);
  kiln_tune_costs_free(&b);
}

int main(void) {
  RUN(test_dear_features);
  RUN(test_closing_reuses_points);
  RUN(test_winograd_switch);
  RUN(test_depthwise_switch);
  RUN(test_tune_and_use);
  return kiln_test_finish();
}
