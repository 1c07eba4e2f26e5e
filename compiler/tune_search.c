/* The measured search of `kiln tune` (see tune.h for the method).
 *
 * Why rounds of whole-model builds and not one kernel at a time: the
 * instances read the model's own buffers, epilogue operands and weight
 * layouts, and the program, memory plan and session already know how to
 * set those up and time every dispatch; a round gives every distinct
 * kernel a new point for the price of one build (PoCL builds ResNet-18 in
 * about half a second), and the model's outputs check every candidate of
 * the round against the default build's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compiler/compare.h"
#include "compiler/tune.h"
#include "lowering/fuse.h"
#include "runtime/module_impl.h"
#include "runtime/session_impl.h"
#include "targets/program_build.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void kiln_tune_options_default(kiln_tune_options_t* o) {
  memset(o, 0, sizeof *o);
  o->budget_s = 600;
  o->repeats = 5;
  o->opt = 1;
}

/* One distinct kernel: every instance with its fingerprint. */
typedef struct {
  kiln_tune_key_t key;
  kiln_template_space_t space;
  const kiln_template_t* rep; /* first instance (the constraints read it) */
  const char* name;
  int32_t n_inst, *inst;
  kiln_template_tiles_t dflt, best, cand, seed;
  bool has_seed, has_cand, done;
  double t_default, t_best, t_cand;
  int32_t trials, n_tried, cap_tried;
  kiln_template_tiles_t* tried;
} group_t;

typedef struct {
  kiln_graph_t* g;
  kiln_plan_t* plan;
  const kiln_target_t* target;
  kiln_template_set_t set;
  kiln_device_t* dev;
  kiln_tune_device_t where;
  const kiln_tune_options_t* o;
  int32_t n_groups;
  group_t* groups;
  int32_t* group_of; /* plan kernel -> group (-1) */
  kiln_array_t* in;
  kiln_array_t* ref; /* the default build's outputs */
  uint64_t rng;
} tuner_t;

static uint64_t rnd(tuner_t* t) {
  t->rng ^= t->rng << 13;
  t->rng ^= t->rng >> 7;
  t->rng ^= t->rng << 17;
  return t->rng;
}

static bool tiles_eq(const kiln_template_tiles_t* a, const kiln_template_tiles_t* b) {
  if (a->n != b->n) return false;
  for (int32_t i = 0; i < a->n; ++i)
    if (a->v[i] != b->v[i]) return false;
  return true;
}

static bool tried(const group_t* g, const kiln_template_tiles_t* x) {
  for (int32_t i = 0; i < g->n_tried; ++i)
    if (tiles_eq(&g->tried[i], x)) return true;
  return false;
}

static kiln_status_t remember(group_t* g, const kiln_template_tiles_t* x) {
  if (g->n_tried == g->cap_tried) {
    int32_t cap = g->cap_tried ? 2 * g->cap_tried : 32;
    kiln_template_tiles_t* n = realloc(g->tried, sizeof *n * (size_t)cap);
    if (!n) return kiln_make_status(KILN_OUT_OF_MEMORY, "tune: kernel '%s'", g->name);
    g->tried = n;
    g->cap_tried = cap;
  }
  g->tried[g->n_tried++] = *x;
  return NULL;
}

static bool usable(const tuner_t* t, const group_t* g, const kiln_template_tiles_t* x) {
  return !tried(g, x) && (!t->set.tiles_check || !t->set.tiles_check(g->rep, x, &t->where.limits));
}

/* The next point for |g|: the cache's seed first, then random points,
 * then one knob of the best one step up or down; false when none is left
 * that is untried and valid after a bounded number of draws. */
static bool next_point(tuner_t* t, group_t* g, kiln_template_tiles_t* out) {
  const kiln_template_space_t* sp = &g->space;
  if (g->has_seed) {
    g->has_seed = false;
    if (usable(t, g, &g->seed)) {
      *out = g->seed;
      return true;
    }
  }
  int32_t idx[KILN_TEMPLATE_TILES_MAX];
  const bool local = g->trials >= 3 && kiln_template_space_index(sp, &g->best, idx);
  for (int attempt = 0; attempt < 200; ++attempt) {
    kiln_template_tiles_t x = {.n = sp->n_knobs};
    if (local && attempt < 100) {
      for (int32_t i = 0; i < sp->n_knobs; ++i) x.v[i] = g->best.v[i];
      const int32_t i = (int32_t)(rnd(t) % (uint64_t)sp->n_knobs);
      const int32_t j = idx[i] + ((rnd(t) & 1) ? 1 : -1);
      if (j < 0 || j >= sp->knobs[i].n) continue;
      x.v[i] = sp->knobs[i].v[j];
    } else {
      for (int32_t i = 0; i < sp->n_knobs; ++i) x.v[i] = sp->knobs[i].v[rnd(t) % (uint64_t)sp->knobs[i].n];
    }
    if (usable(t, g, &x)) {
      *out = x;
      return true;
    }
  }
  return false;
}

/* Every instance of every group at its candidate (or |best| / default),
 * weights laid out for them. */
static kiln_status_t set_tiles(tuner_t* t, int which /* 0 default, 1 candidate, 2 best */) {
  kiln_template_weights_restore(t->plan);
  for (int32_t gi = 0; gi < t->n_groups; ++gi) {
    const group_t* g = &t->groups[gi];
    const kiln_template_tiles_t* x = which == 0 ? &g->dflt : which == 2 ? &g->best : g->has_cand ? &g->cand : &g->best;
    for (int32_t i = 0; i < g->n_inst; ++i) {
      kiln_template_t* d = t->plan->kernels[g->inst[i]].tmpl;
      d->tiles = *x;
      if (d->weights.layout != KILN_TEMPLATE_W_PACKED && t->set.weight_blocks) t->set.weight_blocks(d);
    }
  }
  return kiln_template_weights_lay_out(t->plan);
}

static int cmp_d(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static double median(double* v, int32_t n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n ? v[n / 2] : 0;
}

/* Builds and runs the plan as its tiles stand: one warm-up run, then
 * o->repeats timed runs; per group the median of its dispatches' summed
 * times (into *times, seconds), the model's median wall time, and whether
 * the outputs match |t->ref| (when set; else they become it). */
static kiln_status_t measure(tuner_t* t, double* times, double* model_s, bool* match) {
  kiln_program_t* prog = NULL;
  kiln_module_t* mod = NULL;
  kiln_session_t* ses = NULL;
  const int32_t R = t->o->repeats > 0 ? t->o->repeats : 1;
  const int32_t n_out = t->g->n_outputs;
  double* per = calloc((size_t)(t->n_groups + 1) * (size_t)R, sizeof(double));
  double* wall = calloc((size_t)R + 1, sizeof(double));
  kiln_array_t* out = calloc((size_t)n_out + 1, sizeof(kiln_array_t));
  int32_t* prog_kernel = malloc(sizeof(int32_t) * (size_t)(t->plan->n_kernels + 1));
  kiln_status_t s = per && wall && out && prog_kernel ? NULL : kiln_make_status(KILN_OUT_OF_MEMORY, "tune: measure");
  kiln_program_build_options_t bo = {"tune", "fp32", "-O1 tune", false};
  if (!s) s = kiln_program_build(t->plan, t->target, &bo, kiln_allocator_system(), &prog);
  /* program kernel i runs plan kernel prog_kernel[i]: the plan's order
   * without the conv GEMMs merged into their instances (targets/gpu_conv.c) */
  int32_t np = 0;
  for (int32_t k = 0; !s && k < t->plan->n_kernels; ++k)
    if (!t->plan->kernels[k].tmpl || t->plan->kernels[k].tmpl->kind != KILN_TEMPLATE_MERGED) prog_kernel[np++] = k;
  if (!s && np != prog->n_kernels)
    s = kiln_make_status(KILN_INTERNAL, "tune: the program has %d kernels, the plan %d to run", (int)prog->n_kernels,
                         (int)np);
  if (!s) {
    s = kiln_module_wrap(prog, &mod);
    prog = NULL;
  }
  kiln_session_options_t so;
  kiln_session_options_default(&so);
  so.profile = true;
  so.threads = t->o->threads;
  so.cache_dir = ""; /* every round's code is new: keep it out of the code cache */
  if (!s) s = kiln_session_create(mod, t->dev, &so, &ses);
  for (int32_t r = -1; r < R && !s; ++r) {
    for (int32_t k = 0; k < n_out; ++k) kiln_array_free(kiln_allocator_system(), &out[k]);
    const double t0 = now_s();
    s = kiln_session_run(ses, t->in, out);
    if (s || r < 0) continue;
    wall[r] = now_s() - t0;
    int32_t n = 0, runs = 0;
    const kiln_profile_entry_t* e = kiln_session_profile(ses, &n, &runs);
    for (int32_t i = 0; e && i < n && i < np; ++i) {
      const int32_t gi = t->group_of[prog_kernel[i]];
      if (gi >= 0) per[(size_t)gi * (size_t)R + (size_t)r] += e[i].last_s;
    }
  }
  if (!s) {
    for (int32_t gi = 0; gi < t->n_groups; ++gi) times[gi] = median(per + (size_t)gi * (size_t)R, R);
    *model_s = median(wall, R);
    *match = true;
    for (int32_t k = 0; k < n_out && t->ref; ++k) {
      kiln_compare_result_t cr;
      kiln_compare(&out[k], &t->ref[k], 1e-3, 1e-4, &cr);
      if (!cr.ok) {
        *match = false;
        if (t->o->log) fprintf(t->o->log, "\ntune: outputs differ from the default build's: %s\n", cr.message);
      }
    }
    if (!t->ref) {
      t->ref = out;
      out = NULL;
    }
  }
  for (int32_t k = 0; out && k < n_out; ++k) kiln_array_free(kiln_allocator_system(), &out[k]);
  free(out);
  kiln_session_destroy(ses);
  kiln_module_release(mod);
  kiln_program_destroy(prog);
  free(per);
  free(wall);
  free(prog_kernel);
  return s;
}

/* Seeded inputs: floats in [-1, 1), integers in [0, 4). */
static kiln_status_t make_inputs(tuner_t* t) {
  const kiln_graph_t* g = t->g;
  t->in = calloc((size_t)g->n_inputs + 1, sizeof(kiln_array_t));
  if (!t->in) return kiln_make_status(KILN_OUT_OF_MEMORY, "tune: inputs");
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    const kiln_tensor_t* x = &g->tensors[g->inputs[i]];
    for (int32_t d = 0; d < x->shape.rank; ++d)
      if (x->shape.dims[d] < 0)
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "tune: input '%s' has a dynamic dim %d; give its size with --dim", x->name, (int)d);
    KILN_RETURN_IF_ERROR(kiln_array_alloc(kiln_allocator_system(), x->dtype, &x->shape, &t->in[i]));
    const int64_t n = kiln_shape_count(&x->shape);
    for (int64_t e = 0; e < n; ++e) {
      const uint64_t r = rnd(t);
      if (x->dtype == KILN_DTYPE_F32) ((float*)t->in[i].data)[e] = (float)((double)(r >> 11) / 4503599627370496.0 - 1.0);
      else if (x->dtype == KILN_DTYPE_I64) ((int64_t*)t->in[i].data)[e] = (int64_t)(r % 4);
      else if (x->dtype == KILN_DTYPE_I32) ((int32_t*)t->in[i].data)[e] = (int32_t)(r % 4);
    }
  }
  return NULL;
}

/* The distinct tunable instances of the plan, grouped by fingerprint. */
static kiln_status_t make_groups(tuner_t* t, const kiln_tune_cache_t* cache) {
  kiln_plan_t* p = t->plan;
  t->groups = calloc((size_t)p->n_kernels + 1, sizeof(group_t));
  t->group_of = malloc(sizeof(int32_t) * (size_t)(p->n_kernels + 1));
  if (!t->groups || !t->group_of) return kiln_make_status(KILN_OUT_OF_MEMORY, "tune: groups");
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    t->group_of[k] = -1;
    kiln_template_t* d = p->kernels[k].tmpl;
    kiln_template_space_t sp;
    if (!d || !t->set.space || !t->set.space(d, &sp)) continue;
    const uint64_t fp = kiln_template_fingerprint(d);
    int32_t gi = 0;
    while (gi < t->n_groups && t->groups[gi].key.fingerprint != fp) ++gi;
    group_t* g = &t->groups[gi];
    if (gi == t->n_groups) {
      t->n_groups++;
      g->key.fingerprint = fp;
      snprintf(g->key.target, sizeof g->key.target, "%s", t->where.target);
      snprintf(g->key.space, sizeof g->key.space, "%s", sp.version);
      snprintf(g->key.device, sizeof g->key.device, "%s", t->where.device);
      snprintf(g->key.driver, sizeof g->key.driver, "%s", t->where.driver);
      snprintf(g->key.kiln, sizeof g->key.kiln, "%s", KILN_VERSION);
      g->space = sp;
      g->rep = d;
      g->name = p->kernels[k].func->name;
      g->dflt = g->best = d->tiles;
      g->inst = malloc(sizeof(int32_t) * (size_t)(p->n_kernels + 1));
      if (!g->inst) return kiln_make_status(KILN_OUT_OF_MEMORY, "tune: groups");
      KILN_RETURN_IF_ERROR(remember(g, &g->dflt));
      /* --resume: this machine's record first; another machine's or
       * version's is only a starting point either way */
      const kiln_tune_record_t* mine = kiln_tune_cache_find(cache, &g->key);
      const kiln_tune_record_t* rec = t->o->resume ? mine : NULL;
      if (!rec) rec = kiln_tune_cache_find_near(cache, &g->key);
      if (rec == mine && !t->o->resume) rec = NULL; /* without --resume a search starts afresh here */
      if (rec && rec->tiles.n == g->dflt.n) {
        g->seed = rec->tiles;
        g->has_seed = true;
      }
    }
    g->inst[g->n_inst++] = k;
    t->group_of[k] = gi;
  }
  return NULL;
}

static int by_default_time(const void* a, const void* b) {
  const group_t *x = a, *y = b;
  return x->t_default > y->t_default ? -1 : x->t_default < y->t_default;
}

static void progress(const tuner_t* t, int32_t round, int32_t trials, double t0, double budget, double model_ms) {
  FILE* f = t->o->log;
  if (!f) return;
  double def = 0, best = 0, top = 1;
  int32_t active = 0;
  for (int32_t gi = 0; gi < t->n_groups; ++gi) {
    const group_t* g = &t->groups[gi];
    def += g->t_default * g->n_inst;
    best += g->t_best * g->n_inst;
    active += !g->done;
    if (g->t_best > 0 && g->t_default / g->t_best > top) top = g->t_default / g->t_best;
  }
  const double el = now_s() - t0;
  fprintf(f, "\rtune: round %d, %d of %d kernels searching, %d trials, kernels %.2f -> %.2f ms (best kernel %.2fx), "
             "model %.2f ms, %.0f s, ETA %.0f s   ",
          (int)round, (int)active, (int)t->n_groups, (int)trials, def * 1e3, best * 1e3, top, model_ms, el,
          budget - el > 0 ? budget - el : 0);
  fflush(f);
}

/* One round: a candidate per group still searching, measured together
 * (*ran false when no group had one left). */
static kiln_status_t round_once(tuner_t* t, double* times, kiln_tune_summary_t* sum, bool* ran) {
  int32_t n = 0;
  for (int32_t gi = 0; gi < t->n_groups; ++gi) {
    group_t* g = &t->groups[gi];
    g->has_cand = false;
    if (g->done) continue;
    if ((t->o->trials > 0 && g->trials >= t->o->trials) || !next_point(t, g, &g->cand)) {
      g->done = true;
      continue;
    }
    KILN_RETURN_IF_ERROR(remember(g, &g->cand));
    g->has_cand = true;
    g->trials++;
    sum->trials++;
    ++n;
  }
  *ran = n > 0;
  if (!n) return NULL;
  double model_s = 0;
  bool match = false;
  kiln_status_t s = set_tiles(t, 1);
  if (!s) s = measure(t, times, &model_s, &match);
  if (s) { /* a candidate the driver refuses: the round's points are dropped, not the search */
    if (t->o->log) fprintf(t->o->log, "\ntune: round refused: %s\n", kiln_status_message(s));
    kiln_status_free(s);
    match = false;
  }
  for (int32_t gi = 0; gi < t->n_groups; ++gi) {
    group_t* g = &t->groups[gi];
    if (!g->has_cand) continue;
    if (!match) {
      sum->rejected++;
      continue;
    }
    if (times[gi] < g->t_best) {
      g->t_best = times[gi];
      g->best = g->cand;
    }
  }
  return NULL;
}

static void table(const tuner_t* t, FILE* f) {
  fprintf(f, "\n  %-44s %-9s %4s %10s %10s %8s  %s\n", "kernel (first instance)", "template", "inst", "default us",
          "tuned us", "speed-up", "tiles");
  for (int32_t gi = 0; gi < t->n_groups; ++gi) {
    const group_t* g = &t->groups[gi];
    char tiles[128];
    kiln_tune_tiles_format(&g->best, tiles, sizeof tiles);
    fprintf(f, "  %-44.44s %-9s %4d %10.1f %10.1f %7.2fx  %s%s\n", g->name, kiln_template_kind_name(g->rep->kind),
            (int)g->n_inst, g->t_default * 1e6, g->t_best * 1e6, g->t_best > 0 ? g->t_default / g->t_best : 1.0, tiles,
            tiles_eq(&g->best, &g->dflt) ? " (default)" : "");
  }
}

static kiln_status_t search(tuner_t* t, kiln_tune_cache_t* cache, kiln_tune_summary_t* sum) {
  const kiln_tune_options_t* o = t->o;
  const double t0 = now_s();
  double* times = calloc((size_t)t->n_groups + 1, sizeof(double));
  double* times2 = calloc((size_t)t->n_groups + 1, sizeof(double));
  if (!times || !times2) {
    free(times);
    free(times2);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "tune");
  }
  double model_s = 0;
  bool match = true;
  kiln_status_t s = set_tiles(t, 0);
  if (!s) s = measure(t, times, &model_s, &match); /* the defaults, and the reference outputs */
  for (int32_t gi = 0; !s && gi < t->n_groups; ++gi) t->groups[gi].t_default = t->groups[gi].t_best = times[gi];
  const double first = now_s() - t0;
  /* Rounds until the budget: each costs about what the last ones did (the
   * first about what the default's measurement did), and one more closes
   * the search: the best points measured again (a build like a round's). */
  while (!s && !(o->stop && *o->stop)) {
    const double el = now_s() - t0, per = sum->rounds ? (el - first) / sum->rounds : first;
    if (el + 2 * per > o->budget_s) break;
    int32_t active = 0;
    for (int32_t gi = 0; gi < t->n_groups; ++gi) active += !t->groups[gi].done;
    if (!active) break;
    bool ran = false;
    s = round_once(t, times, sum, &ran);
    if (!ran) break;
    sum->rounds++;
    progress(t, sum->rounds, sum->trials, t0, o->budget_s, model_s * 1e3);
  }
  /* Never slower: the best points are measured again, together, and each
   * is kept only where it beats the default's time of the first build
   * (the same method: medians of device timestamps); without a changed
   * point there is nothing to check. */
  double best_model = model_s;
  bool changed = false;
  for (int32_t gi = 0; gi < t->n_groups; ++gi) changed |= !tiles_eq(&t->groups[gi].best, &t->groups[gi].dflt);
  if (!s && changed) {
    s = set_tiles(t, 2);
    if (!s) s = measure(t, times2, &best_model, &match);
    if (!s && !match) { /* cannot happen unless the device is flaky: keep nothing */
      for (int32_t gi = 0; gi < t->n_groups; ++gi) t->groups[gi].best = t->groups[gi].dflt;
      if (o->log) fprintf(o->log, "\ntune: the best points together differ from the defaults; nothing kept\n");
    }
  }
  for (int32_t gi = 0; !s && gi < t->n_groups; ++gi) {
    group_t* g = &t->groups[gi];
    const bool moved = !tiles_eq(&g->best, &g->dflt);
    if (moved && times2[gi] >= g->t_default) {
      sum->reverted++;
      g->best = g->dflt;
    }
    g->t_best = tiles_eq(&g->best, &g->dflt) ? g->t_default : times2[gi];
    sum->improved += !tiles_eq(&g->best, &g->dflt);
    kiln_tune_record_t r = {.key = g->key, .tiles = g->best, .default_us = fmax(g->t_default * 1e6, 1e-3),
                            .tuned_us = fmax(g->t_best * 1e6, 1e-3)};
    s = kiln_tune_cache_put(cache, &r, true);
  }
  const double def_model = model_s;
  sum->default_ms = def_model * 1e3;
  sum->tuned_ms = best_model * 1e3;
  sum->elapsed_s = now_s() - t0;
  if (!s && o->log) {
    qsort(t->groups, (size_t)t->n_groups, sizeof *t->groups, by_default_time); /* hottest first */
    table(t, o->log);
  }
  free(times);
  free(times2);
  return s;
}

kiln_status_t kiln_tune_model(kiln_graph_t* g, const kiln_target_t* target, kiln_device_t* dev,
                              const kiln_tune_options_t* o, kiln_tune_cache_t* cache, kiln_tune_summary_t* out) {
  tuner_t t;
  memset(&t, 0, sizeof t);
  memset(out, 0, sizeof *out);
  t.g = g;
  t.target = target;
  t.dev = dev;
  t.o = o;
  t.rng = o->seed * 2654435761u + 88172645463325252ull;
  kiln_tune_device_of(dev, &t.where);
  kiln_program_templates(target, &t.set);
  if (!t.set.space)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "tune: target %s has no search space to tune", target->name);
  kiln_plan_options_t po = {target->lowering, o->threads};
  kiln_status_t s = make_inputs(&t);
  if (!s) s = kiln_plan_build(g, &po, kiln_allocator_system(), &t.plan);
  kiln_fusion_report_t fr;
  if (!s && o->opt >= 1) s = kiln_plan_fuse(t.plan, &fr, NULL);
  if (!s) s = kiln_template_select(t.plan, &t.set);
  if (!s) s = make_groups(&t, cache);
  if (!s && t.n_groups == 0)
    s = kiln_make_status(KILN_INVALID_ARGUMENT, "tune: the model has no template kernels to tune on %s", target->name);
  if (!s) {
    out->kernels = t.n_groups;
    for (int32_t gi = 0; gi < t.n_groups; ++gi) out->instances += t.groups[gi].n_inst;
    if (o->log)
      fprintf(o->log, "tune: %d template instances, %d distinct kernels, on %s (%s), budget %.0f s\n",
              (int)out->instances, (int)out->kernels, t.where.device, t.where.driver, o->budget_s);
    s = search(&t, cache, out);
  }
  for (int32_t gi = 0; gi < t.n_groups; ++gi) {
    free(t.groups[gi].inst);
    free(t.groups[gi].tried);
  }
  for (int32_t i = 0; t.in && i < g->n_inputs; ++i) kiln_array_free(kiln_allocator_system(), &t.in[i]);
  for (int32_t i = 0; t.ref && i < g->n_outputs; ++i) kiln_array_free(kiln_allocator_system(), &t.ref[i]);
  free(t.in);
  free(t.ref);
  free(t.groups);
  free(t.group_of);
  kiln_plan_destroy(t.plan);
  return s;
}
