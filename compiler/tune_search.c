/* The measured search of `kiln tune` (see tune.h for the method).
 *
 * Two kinds of build. The whole model, twice: with the default tiles
 * first (the reference outputs, each kernel's share of the model's time,
 * which orders the search hottest first, and the default session every
 * later whole-model build is timed beside), and with the chosen points at
 * the end (the model's outputs checked against the default's, and the
 * re-measurement that drops a point not faster in the model). Between
 * them every point is a program of its kernel alone (tune_micro.h), which
 * builds in about a second where the model takes a minute or two on a
 * loaded machine: a 10-minute budget then tries tens of points per kernel
 * instead of three. */
#define _GNU_SOURCE /* getloadavg */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "compiler/compare.h"
#include "compiler/pipeline.h"
#include "compiler/tune.h"
#include "compiler/tune_cpu.h"
#include "compiler/tune_dear.h"
#include "compiler/tune_micro.h"
#include "lowering/fuse.h"
#include "lowering/precision.h"
#include "runtime/device_registry.h"
#include "runtime/module_impl.h"
#include "runtime/session_impl.h"
#include "targets/program_build.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double kiln_tune_clock_s(void) { return now_s(); }

/* How busy the machine is: the 1-minute load average per online CPU, at
 * least 1 (a CPU-bound job then gets about 1/busy of a core, and its wall
 * time grows with it); 1 where the system reports neither. */
static double busy(void) {
  double l = 0;
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (getloadavg(&l, 1) != 1 || n < 1) return 1;
  return fmax(1, l / (double)n);
}

static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void kiln_tune_options_default(kiln_tune_options_t* o) {
  memset(o, 0, sizeof *o);
  o->budget_s = 600;
  o->repeats = 5;
  o->opt = 1;
}

#define KILN_TUNE_HINTS_MAX 8

/* One distinct kernel: every instance with its fingerprint. */
typedef struct {
  kiln_tune_key_t key;
  kiln_template_space_t space;
  const kiln_template_t* rep; /* first instance (the constraints read it); NULL on the CPU */
  int32_t gemm;               /* CPU: its GEMM in tuner_t.gemms; inst are then graph nodes */
  const char* name;
  int32_t n_inst, *inst;
  kiln_template_tiles_t dflt, best, cand, seed;
  bool has_seed, done;
  double t_default, t_best; /* last paired measurement, for the table */
  double q_best;            /* best time / default time, each pair in one window */
  int32_t trials, n_tried, cap_tried;
  kiln_template_tiles_t* tried;
  kiln_tune_micro_t micro; /* the kernel alone (micro_ok) */
  bool micro_ok;
  double point_s; /* what its last point cost (build and runs) */
  double setup_s; /* what its default point alone cost to build */
  double best_s;  /* what its best point cost, to plan the closing build */
  int32_t n_hints, next_hint; /* the target's points to try first (set.tiles_hints) */
  kiln_template_tiles_t hints[KILN_TUNE_HINTS_MAX];
  /* what its dearest point (or its set-up) cost: the budget plans the next
   * point at that, since a point stopped early (tune_micro.h) costs a
   * fraction of a full one */
  double point_max;
  /* the driver's part of its set-up (session and first run: what the
   * model's build pays for the kernel at its default); best_s is that of
   * its best point. Their difference is what a kept point adds to the
   * closing build: its program (SPIR-V) is reused and its runs alone are
   * not repeated (counting whole points planned ResNet-18's 10-minute
   * Vulkan tune to end at 66%) */
  double setup_driver_s;
  /* the closing pairs: in how many of them its time was below the
   * default's beside it, of |pairs| (kiln_tune_paired_keep) */
  int32_t pair_wins, pairs;
  /* random draws skipped as dear (compiler/tune_dear.h), asked again
   * silently when drawn again; |waiting|: its last draws were all dear or
   * used, so it sits out the round instead of ending its search */
  kiln_template_tiles_t* skipped;
  int32_t n_skipped, cap_skipped;
  bool waiting;
  const char* from; /* where its current point came from: "seed", "hint", "step", "random" */
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
  kiln_session_t* def_ses; /* the default build, run beside every candidate */
  kiln_module_t* def_mod;
  int32_t n_prog, *prog_kernel; /* program kernel i runs plan kernel prog_kernel[i] */
  uint64_t rng;
  /* CPU: the knobs are the GEMMs' (compiler/tune_cpu.h); a plan is built
   * with their points by the hook over |gemms| */
  bool cpu;
  kiln_tune_cpu_table_t gemms;
  kiln_plan_options_t po;
  /* the device the kernels alone run on (options.device: a second one,
   * whose points build on a worker the deadline abandons; else dev) */
  kiln_device_t* pdev;
  bool past_deadline; /* a point was stopped by the deadline: no more points */
  double closing_deadline; /* the closing build's driver part stops here (options.device; else INFINITY) */
  /* the code units the tune's builds created (the default build's, the
   * set-ups', the points'): while below KILN_TUNE_MEMO_UNITS a device that
   * shares code still holds every kept point's; -1: not known */
  int32_t units_made;
  /* an instance of the plan may sum in f16 (kiln_template_t.f16_sums, set
   * by plan_of): every output of the whole model is checked with f16's
   * tolerance (kiln_tune_tolerance) */
  bool f16_sums;
  /* what the points measured so far cost, by their knobs (the dear-draw
   * rule); the current point's deadline; the draws skipped */
  kiln_tune_costs_t costs;
  double draw_deadline;
  int32_t skipped;
  int32_t skipped_from[3]; /* of them: random draws, steps, hints */
} tuner_t;

static void count_units(tuner_t* t, int32_t n) {
  t->units_made = t->units_made < 0 || n < 0 ? -1 : t->units_made + n;
}

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

static bool push_tiles(kiln_template_tiles_t** list, int32_t* n, int32_t* cap, const kiln_template_tiles_t* x) {
  if (*n == *cap) {
    const int32_t c = *cap ? 2 * *cap : 32;
    kiln_template_tiles_t* l = realloc(*list, sizeof *l * (size_t)c);
    if (!l) return false;
    *list = l;
    *cap = c;
  }
  (*list)[(*n)++] = *x;
  return true;
}

static kiln_status_t remember(group_t* g, const kiln_template_tiles_t* x) {
  if (!push_tiles(&g->tried, &g->n_tried, &g->cap_tried, x))
    return kiln_make_status(KILN_OUT_OF_MEMORY, "tune: kernel '%s'", g->name);
  return NULL;
}

/* The target's cost features of point |x| of |g| (tiles_features); false
 * where it has none (the CPU): then no draw is dear. */
static bool features(const tuner_t* t, const group_t* g, const kiln_template_tiles_t* x, double* size, int32_t* cls) {
  if (t->cpu || !g->rep || !t->set.tiles_features) return false;
  t->set.tiles_features(g->rep, x, size, cls);
  return *size > 0;
}

static int32_t kind_of(const tuner_t* t, const group_t* g) {
  return t->cpu || !g->rep ? 0 : (int32_t)g->rep->kind;
}

/* Whether point |x| of |g|, drawn as |from| (a random draw, or a step or a
 * hint into another class than the best's: kiln_tune_draw), is too dear
 * to measure (kiln_tune_dear_why): a new skip is counted by its source
 * and, with KILN_TUNE_TRACE=1, named with its source, reason and
 * prediction; a point skipped before is asked again silently (the time
 * left per kernel grows as kernels finish). */
static bool dear(tuner_t* t, group_t* g, const kiln_template_tiles_t* x, const char* from) {
  double size = 0;
  int32_t cls = 0;
  if (!features(t, g, x, &size, &cls)) return false;
  int32_t active = 0;
  for (int32_t gi = 0; gi < t->n_groups; ++gi) active += !t->groups[gi].done;
  const double left = fmax(0, t->draw_deadline - now_s()) / (active > 0 ? active : 1);
  double pred = -1;
  int32_t by = -1;
  const char* why = kiln_tune_dear_why(&t->costs, (int32_t)(g - t->groups), kind_of(t, g), cls, size, left, &pred, &by);
  if (!why) return false;
  for (int32_t i = 0; i < g->n_skipped; ++i)
    if (tiles_eq(&g->skipped[i], x)) return true;
  if (!push_tiles(&g->skipped, &g->n_skipped, &g->cap_skipped, x)) return true; /* not listed: named again */
  t->skipped++;
  t->skipped_from[!strcmp(from, "step") ? 1 : !strcmp(from, "hint") ? 2 : 0]++;
  const char* trace = getenv("KILN_TUNE_TRACE");
  if (trace && !strcmp(trace, "1") && t->o->log) {
    char tiles[128], other[160] = "";
    kiln_tune_tiles_format(x, tiles, sizeof tiles);
    if (by >= 0) {
      const kiln_tune_cost_t* c = &t->costs.e[by];
      char bt[128];
      kiln_tune_tiles_format(&c->tiles, bt, sizeof bt);
      snprintf(other, sizeof other, "; %s measured %.2fx in %.1f s", bt, isfinite(c->q) ? 1 / c->q : 0.0, c->cost_s);
    }
    fprintf(t->o->log, "\ntune: trace: kernel '%s' %s %s skipped, %s: predicted %.1f s (size %.0f, class %d), %.1f s "
                       "left for each of %d kernels%s\n", g->name, !strcmp(from, "random") ? "draw" : from, tiles, why, pred,
            size, (int)cls, left, (int)active, other);
  }
  return true;
}

/* The cost of the point just measured, for the predictions. */
static void note_cost(tuner_t* t, group_t* g, const kiln_template_tiles_t* x, double q) {
  kiln_tune_cost_t c = {.group = (int32_t)(g - t->groups), .kind = kind_of(t, g), .cost_s = g->point_s, .q = q,
                        .tiles = *x};
  if (!features(t, g, x, &c.size, &c.cls)) return;
  kiln_status_free(kiln_tune_costs_add(&t->costs, &c)); /* out of memory: predicted from fewer */
}

static bool usable(const tuner_t* t, const group_t* g, const kiln_template_tiles_t* x) {
  if (tried(g, x)) return false;
  if (t->cpu) return !kiln_tune_cpu_check(&t->gemms.e[g->gemm].problem, x);
  return !t->set.tiles_check || !t->set.tiles_check(g->rep, x, &t->where.limits);
}

/* kiln_tune_draw's view of one kernel. */
typedef struct {
  tuner_t* t;
  group_t* g;
} draw_ctx_t;

static bool draw_usable(void* c, const kiln_template_tiles_t* x) {
  const draw_ctx_t* d = c;
  return usable(d->t, d->g, x);
}

static void draw_tie(void* c, kiln_template_tiles_t* x) {
  const draw_ctx_t* d = c;
  d->t->set.tiles_tie(d->g->rep, x);
}

static bool draw_dear(void* c, const kiln_template_tiles_t* x, const char* from) {
  const draw_ctx_t* d = c;
  return dear(d->t, d->g, x, from);
}

static bool draw_cls(void* c, const kiln_template_tiles_t* x, int32_t* cls) {
  const draw_ctx_t* d = c;
  double size = 0;
  return features(d->t, d->g, x, &size, cls);
}

/* The next point for |g|: the cache's seed first, then the hints, then
 * random points, and after three points one knob of the best one step up
 * or down first (kiln_tune_draw); a random draw predicted too dear is
 * drawn again, a hint or a step too where it leaves the best point's
 * class. False when none is left that is untried and valid after a
 * bounded number of draws (g->waiting where dear draws were all it found). */
static bool next_point(tuner_t* t, group_t* g, kiln_template_tiles_t* out) {
  draw_ctx_t c = {t, g};
  const kiln_tune_draw_t d = {.space = &g->space, .seed = &g->seed, .has_seed = &g->has_seed,
                              .hints = g->hints, .n_hints = g->n_hints,
                              .next_hint = &g->next_hint, .best = &g->best, .local = g->trials >= 3, .rng = &t->rng,
                              .ctx = &c, .usable = draw_usable,
                              .tie = !t->cpu && t->set.tiles_tie ? draw_tie : NULL, .dear = draw_dear,
                              .cls = draw_cls, .from = &g->from};
  const kiln_tune_drawn_t r = kiln_tune_draw(&d, out);
  g->waiting = r == KILN_TUNE_ONLY_DEAR;
  return r == KILN_TUNE_DRAWN;
}

/* Every instance of every group at its default or best point, weights
 * laid out for them. */
static kiln_status_t plan_of(tuner_t* t);

/* Program kernel i runs plan kernel prog_kernel[i]: the plan's order
 * without the kernels MERGED into an instance (a Winograd switch moves a
 * phase split in or out); a phase split that runs for an implicit-GEMM
 * conv standing in for a Winograd instance counts for that group. */
static void prog_map(tuner_t* t) {
  const kiln_plan_t* p = t->plan;
  t->n_prog = 0;
  for (int32_t k = 0; k < p->n_kernels; ++k)
    if (!p->kernels[k].tmpl || p->kernels[k].tmpl->kind != KILN_TEMPLATE_MERGED) t->prog_kernel[t->n_prog++] = k;
  for (int32_t gi = 0; gi < t->n_groups; ++gi)
    for (int32_t i = 0; i < t->groups[gi].n_inst; ++i) {
      const kiln_template_t* w = kiln_template_tunable_of(p, t->groups[gi].inst[i]);
      if (w && w->phase_merged && w->conv.phase_kernel >= 0)
        t->group_of[w->conv.phase_kernel] = p->kernels[w->conv.phase_kernel].tmpl ? -1 : gi;
    }
}

static kiln_status_t set_tiles(tuner_t* t, bool best) {
  if (t->cpu) { /* the GEMMs' points, then the plan again */
    for (int32_t gi = 0; gi < t->n_groups; ++gi) {
      const group_t* g = &t->groups[gi];
      kiln_tune_cpu_gemm_t* e = &t->gemms.e[g->gemm];
      e->has_point = best && !tiles_eq(&g->best, &g->dflt);
      e->point = g->best;
    }
    return plan_of(t);
  }
  kiln_template_weights_restore(t->plan);
  for (int32_t gi = 0; gi < t->n_groups; ++gi) {
    const group_t* g = &t->groups[gi];
    const kiln_template_tiles_t* x = best ? &g->best : &g->dflt;
    for (int32_t i = 0; i < g->n_inst; ++i) {
      kiln_template_t* d = kiln_template_tunable_of(t->plan, g->inst[i]);
      d->tiles = *x;
      /* a Winograd point with the switch off: the implicit-GEMM conv */
      d = kiln_template_switch(t->plan, g->inst[i]);
      if (d && d->weights.layout != KILN_TEMPLATE_W_PACKED && t->set.weight_blocks) t->set.weight_blocks(d);
    }
  }
  prog_map(t);
  return kiln_template_weights_lay_out(t->plan);
}

/* A point's time over its default's below which it may lead its kernel
 * (alone) and stay in the model (the closing pairs). */
#define KILN_TUNE_KEEP_RATIO 0.97

double kiln_tune_kept_cost_s(bool shared, int32_t units_made, double again_s, double best_driver_s, double setup_s,
                             double setup_driver_s) {
  if (shared && units_made >= 0 && units_made < KILN_TUNE_MEMO_UNITS) return 0;
  const double c = shared ? best_driver_s : again_s >= 0 ? fmax(best_driver_s, setup_s) : best_driver_s - setup_driver_s;
  return fmax(0, c);
}

bool kiln_tune_paired_keep(double tuned, double def, int32_t wins, int32_t pairs) {
  if (!(tuned < KILN_TUNE_KEEP_RATIO * def)) return false;
  return pairs > 0 && 4 * wins >= 3 * pairs;
}

static double median(double* v, int32_t n) { return kiln_tune_median(v, n); }

/* One run of |ses|: its wall time into wall[r], the process's CPU time
 * into cpu[r] and each group's summed dispatch times into
 * per[group * R + r] (r < 0: a warm-up, not kept). */
static kiln_status_t run_once(tuner_t* t, kiln_session_t* ses, kiln_array_t* out, int32_t r, int32_t R, double* per,
                              double* wall, double* cpu) {
  for (int32_t k = 0; k < t->g->n_outputs; ++k) kiln_array_free(kiln_allocator_system(), &out[k]);
  const double t0 = now_s(), c0 = cpu_s();
  KILN_RETURN_IF_ERROR(kiln_session_run(ses, t->in, out));
  if (r < 0) return NULL;
  cpu[r] = cpu_s() - c0;
  wall[r] = now_s() - t0;
  int32_t n = 0, runs = 0;
  const kiln_profile_entry_t* e = kiln_session_profile(ses, &n, &runs);
  for (int32_t i = 0; e && i < n && i < t->n_prog; ++i) {
    const int32_t gi = t->group_of[t->prog_kernel[i]];
    if (gi >= 0) per[(size_t)gi * (size_t)R + (size_t)r] += e[i].last_s;
  }
  return NULL;
}

/* Every kernel's program alone freed; a point's build the deadline
 * abandoned goes on to the process's list (kiln_tune_join_abandoned),
 * holding what it uses. */
static void free_micros(tuner_t* t) {
  /* the kernels' sessions share the abandoned build's device: they go
   * with it */
  for (int32_t gi = 0; gi < t->n_groups; ++gi)
    if (t->groups[gi].micro_ok && t->groups[gi].micro.pending)
      for (int32_t gj = 0; gj < t->n_groups; ++gj)
        if (t->groups[gj].micro_ok) kiln_tune_micro_defer(&t->groups[gi].micro, &t->groups[gj].micro);
  for (int32_t gi = 0; gi < t->n_groups; ++gi) {
    if (t->groups[gi].micro_ok) kiln_tune_micro_free(&t->groups[gi].micro);
    t->groups[gi].micro_ok = false;
  }
}

/* The module of the plan as its tiles stand (kiln_tune_whole_program);
 * *program_s what building its program took. */
static kiln_status_t whole_module(tuner_t* t, kiln_module_t** mod, double* program_s) {
  kiln_program_t* prog = NULL;
  const double t0 = now_s();
  kiln_status_t s = kiln_tune_whole_program(t->plan, t->target, &prog);
  if (program_s) *program_s = now_s() - t0;
  if (!s && t->n_prog != prog->n_kernels)
    s = kiln_make_status(KILN_INTERNAL, "tune: the program has %d kernels, the plan %d to run", (int)prog->n_kernels,
                         (int)t->n_prog);
  if (s) {
    kiln_program_destroy(prog);
    return s;
  }
  return kiln_module_wrap(prog, mod);
}

/* What one whole-model measurement found (measure). */
typedef struct {
  double model_s, def_model_s; /* median wall time per run: this build's, the default's beside it */
  double cpu_s, def_cpu_s;     /* median process CPU time per run, likewise */
  double build_s;              /* wall: the program, its session and the warm-up run(s) */
  double program_s;            /* of which the program (lowering, printing, SPIR-V) */
  double runs_s;               /* wall: the timed runs (both builds' when paired) */
  bool match;                  /* the outputs match the default build's */
  bool late;                   /* the session's build passed t->closing_deadline: nothing measured */
  int32_t units, units_reused; /* its code units, those from earlier builds (kiln_device_api_t.executable_units) */
} measured_t;

/* Builds the plan as its tiles stand and runs it: one warm-up run, then
 * R timed runs, each right after a run of the default build's session
 * (kept from the first call, which builds it), so both see the same load
 * on a busy machine. Per group the median of its dispatches' summed times
 * (*times) and of the default's in the same window (*def_times), the
 * model's medians, what the build and the runs cost, and whether the
 * outputs match the default build's (the first call's outputs become
 * them). */
static kiln_status_t measure(tuner_t* t, int32_t R, double* times, double* def_times, measured_t* m) {
  kiln_module_t* mod = NULL;
  kiln_session_t* ses = NULL;
  memset(m, 0, sizeof *m);
  const double t0 = now_s();
  const int32_t n_out = t->g->n_outputs;
  const size_t nper = (size_t)(t->n_groups + 1) * (size_t)R;
  double* per = calloc(2 * nper, sizeof(double));
  double* wall = calloc(4 * (size_t)R + 4, sizeof(double));
  double* cpu = wall + 2 * (size_t)R + 2;
  kiln_array_t* out = calloc(2 * (size_t)n_out + 2, sizeof(kiln_array_t));
  kiln_status_t s = per && wall && out ? NULL : kiln_make_status(KILN_OUT_OF_MEMORY, "tune: measure");
  if (!s) s = whole_module(t, &mod, &m->program_s);
  kiln_session_options_t so; /* the closing build takes the default build's unchanged kernels */
  kiln_tune_session_options(&so, t->o->threads, kiln_tune_reuse_code());
  /* A whole-model build's driver part (PoCL's build, lavapipe's
   * pipelines, the C compiler) on a worker that is abandoned at the
   * budget's 5% margin: the closing build's takes the default build's
   * session with it, destroyed once it is done (both are on |dev|). */
  if (!s && isfinite(t->closing_deadline)) {
    kiln_module_retain(mod); /* the worker's reference */
    /* the test hook's point 0: the default build */
    const double sleep_s = !t->def_ses && t->o->test_sleep_point == 0 ? t->o->test_sleep_s : 0;
    s = kiln_tune_session_by(mod, t->dev, t->o->threads, t->in, t->g->n_inputs, n_out, t->closing_deadline,
                             t->def_ses, t->def_mod, sleep_s, &ses, &m->late);
    if (m->late) {
      t->def_ses = NULL;
      t->def_mod = NULL;
    }
  } else if (!s) {
    s = kiln_session_create(mod, t->dev, &so, &ses);
  }
  if (!s && ses && ses->exe) {
    const kiln_device_api_t* api = kiln_device_api_find(t->dev->info.api);
    if (api && api->executable_units) api->executable_units(ses->exe, &m->units, &m->units_reused);
  }
  /* the closing build overlapped a point's build the deadline abandoned;
   * its runs are timed without it */
  if (t->def_ses || m->late) free_micros(t);
  kiln_session_t* def = t->def_ses ? t->def_ses : ses;
  double t1 = now_s();
  for (int32_t r = -1; r < R && !s && !m->late; ++r) {
    if (def != ses) s = run_once(t, def, out + n_out, r, R, per + nper, wall + R, cpu + R);
    if (!s) s = run_once(t, ses, out, r, R, per, wall, cpu);
    if (r < 0) t1 = now_s(); /* the warm-up builds what a driver builds at the first launch */
  }
  m->build_s = t1 - t0;
  m->runs_s = now_s() - t1;
  if (!s && !m->late) {
    const bool first = def == ses;
    for (int32_t gi = 0; gi < t->n_groups; ++gi) {
      /* pair by pair, before the medians sort the runs */
      group_t* g = &t->groups[gi];
      g->pairs = first ? 0 : R;
      g->pair_wins = 0;
      for (int32_t r = 0; r < R && !first; ++r)
        g->pair_wins += per[(size_t)gi * (size_t)R + (size_t)r] < per[nper + (size_t)gi * (size_t)R + (size_t)r];
      times[gi] = median(per + (size_t)gi * (size_t)R, R);
      def_times[gi] = first ? times[gi] : median(per + nper + (size_t)gi * (size_t)R, R);
    }
    m->model_s = median(wall, R);
    m->def_model_s = first ? m->model_s : median(wall + R, R);
    m->cpu_s = median(cpu, R);
    m->def_cpu_s = first ? m->cpu_s : median(cpu + R, R);
    m->match = true;
    for (int32_t k = 0; k < n_out && !first; ++k) {
      kiln_compare_result_t cr;
      double rtol, atol;
      kiln_tune_tolerance(t->f16_sums, &t->ref[k], &rtol, &atol);
      kiln_compare(&out[k], &t->ref[k], rtol, atol, &cr);
      if (!cr.ok) {
        m->match = false;
        if (t->o->log) fprintf(t->o->log, "\ntune: outputs differ from the default build's: %s\n", cr.message);
      }
    }
    if (first) { /* the default build: its session and outputs stay */
      t->def_ses = ses;
      t->def_mod = mod;
      ses = NULL;
      mod = NULL;
      memcpy(t->ref, out, sizeof *out * (size_t)n_out);
      memset(out, 0, sizeof *out * (size_t)n_out);
    }
  }
  for (int32_t k = 0; out && k < 2 * n_out; ++k) kiln_array_free(kiln_allocator_system(), &out[k]);
  free(out);
  kiln_session_destroy(ses);
  kiln_module_release(mod);
  free(per);
  free(wall);
  return s;
}

/* The default program built again into a session on t->dev with
 * reuse_code, and run once: every kernel's code comes from the default
 * build (nothing for the driver to compile), so its time is what the
 * closing build costs before its changed kernels. */
static kiln_status_t build_again(tuner_t* t) {
  kiln_module_t* mod = NULL;
  kiln_session_t* ses = NULL;
  const int32_t n_out = t->g->n_outputs;
  kiln_array_t* out = calloc((size_t)n_out + 1, sizeof(kiln_array_t));
  kiln_status_t s = out ? NULL : kiln_make_status(KILN_OUT_OF_MEMORY, "tune: the default build again");
  if (!s) s = whole_module(t, &mod, NULL);
  kiln_session_options_t so;
  kiln_tune_session_options(&so, t->o->threads, true);
  if (!s) s = kiln_session_create(mod, t->dev, &so, &ses);
  if (!s) s = kiln_session_run(ses, t->in, out);
  for (int32_t k = 0; out && k < n_out; ++k) kiln_array_free(kiln_allocator_system(), &out[k]);
  free(out);
  kiln_session_destroy(ses);
  kiln_module_release(mod);
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

/* Group |g|, new: its key, space and default, the cache's seed, room for
 * |cap| instances. */
static kiln_status_t new_group(tuner_t* t, group_t* g, uint64_t fp, const kiln_template_space_t* sp,
                               const kiln_template_tiles_t* dflt, const char* name, int32_t cap,
                               const kiln_tune_cache_t* cache) {
  g->key.fingerprint = fp;
  snprintf(g->key.target, sizeof g->key.target, "%s", t->where.target);
  snprintf(g->key.space, sizeof g->key.space, "%s", sp->version);
  snprintf(g->key.device, sizeof g->key.device, "%s", t->where.device);
  snprintf(g->key.driver, sizeof g->key.driver, "%s", t->where.driver);
  snprintf(g->key.kiln, sizeof g->key.kiln, "%s", KILN_VERSION);
  g->space = *sp;
  g->name = name;
  g->dflt = g->best = *dflt;
  g->inst = malloc(sizeof(int32_t) * (size_t)(cap + 1));
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
  return NULL;
}

/* The target's first points for |g| (set.tiles_hints), kept in the space. */
static void hints_of(const tuner_t* t, group_t* g) {
  g->n_hints = g->next_hint = 0;
  if (t->cpu || !t->set.tiles_hints || !g->rep) return;
  kiln_template_tiles_t h[KILN_TUNE_HINTS_MAX];
  const int32_t n = t->set.tiles_hints(g->rep, h, KILN_TUNE_HINTS_MAX);
  int32_t idx[KILN_TEMPLATE_TILES_MAX];
  for (int32_t i = 0; i < n && i < KILN_TUNE_HINTS_MAX; ++i)
    if (kiln_template_space_index(&g->space, &h[i], idx)) g->hints[g->n_hints++] = h[i];
}

/* The distinct tunable instances of the plan, grouped by fingerprint. */
static kiln_status_t make_groups(tuner_t* t, const kiln_tune_cache_t* cache) {
  kiln_plan_t* p = t->plan;
  t->groups = calloc((size_t)p->n_kernels + 1, sizeof(group_t));
  if (!t->groups) return kiln_make_status(KILN_OUT_OF_MEMORY, "tune: groups");
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    t->group_of[k] = -1;
    kiln_template_t* d = kiln_template_tunable_of(p, k);
    kiln_template_space_t sp;
    if (!d || !t->set.space || !t->set.space(d, &sp)) continue;
    const uint64_t fp = kiln_template_fingerprint(d);
    int32_t gi = 0;
    while (gi < t->n_groups && t->groups[gi].key.fingerprint != fp) ++gi;
    group_t* g = &t->groups[gi];
    if (gi == t->n_groups) {
      t->n_groups++;
      g->rep = d;
      KILN_RETURN_IF_ERROR(new_group(t, g, fp, &sp, &d->tiles, p->kernels[k].func->name, p->n_kernels, cache));
      hints_of(t, g);
    }
    g->inst[g->n_inst++] = k;
    t->group_of[k] = gi;
  }
  return NULL;
}

/* CPU: a group per distinct GEMM, its instances the graph nodes lowered
 * with it. */
static kiln_status_t make_cpu_groups(tuner_t* t, const kiln_tune_cache_t* cache) {
  if (t->gemms.oom) return kiln_make_status(KILN_OUT_OF_MEMORY, "tune: GEMMs");
  t->groups = calloc((size_t)t->gemms.n + 1, sizeof(group_t));
  if (!t->groups) return kiln_make_status(KILN_OUT_OF_MEMORY, "tune: groups");
  for (int32_t i = 0; i < t->gemms.n; ++i) {
    const kiln_tune_cpu_gemm_t* e = &t->gemms.e[i];
    group_t* g = &t->groups[t->n_groups++];
    kiln_template_space_t sp;
    kiln_template_tiles_t dflt;
    kiln_tune_cpu_space(&e->problem, &e->dflt, &sp);
    kiln_tune_cpu_tiles_of(&e->dflt, &dflt);
    const int32_t node = e->n_nodes ? e->nodes[0] : -1;
    g->gemm = i;
    KILN_RETURN_IF_ERROR(new_group(t, g, e->fingerprint, &sp, &dflt,
                                   node >= 0 && node < t->g->n_nodes ? t->g->nodes[node].name : "?", e->n_nodes,
                                   cache));
    for (int32_t n = 0; n < e->n_nodes; ++n) g->inst[g->n_inst++] = e->nodes[n];
  }
  return NULL;
}

/* The plan (again on the CPU, with the GEMMs' points as they stand) and
 * what maps its kernels: program kernel i runs plan kernel prog_kernel[i]
 * (the plan's order without the conv GEMMs merged into their instances,
 * targets/gpu_conv.c; tiles never change which), plan kernel k's time
 * counts for group group_of[k] (on the CPU: every kernel of a node lowered
 * with the group's GEMM). */
static kiln_status_t plan_of(tuner_t* t) {
  kiln_plan_destroy(t->plan);
  t->plan = NULL;
  kiln_status_t s = t->cpu ? kiln_plan_build_hooked(t->g, &t->po, kiln_tune_cpu_hook, &t->gemms,
                                                    kiln_allocator_system(), &t->plan)
                           : kiln_plan_build(t->g, &t->po, kiln_allocator_system(), &t->plan);
  kiln_fusion_report_t fr;
  if (!s && t->o->opt >= 1) s = kiln_plan_fuse(t->plan, &fr, NULL);
  if (!s && t->o->fp16 && !t->cpu) { /* as the compile's precision pass (compiler/pipeline.c) */
    kiln_precision_options_t po = {KILN_PRECISION_FP16, t->dev && t->dev->info.fp16_arith, t->o->fp16_accumulate,
                                   NULL, t->target->fp16_keeps_f32_workspaces, false};
    kiln_precision_report_t rep;
    memset(&rep, 0, sizeof rep);
    s = kiln_plan_set_precision(t->plan, &po, &rep);
    kiln_precision_report_free(&rep);
  }
  if (!s && !t->cpu) s = kiln_template_select(t->plan, &t->set);
  if (s) return s;
  const int32_t n = t->plan->n_kernels;
  free(t->prog_kernel);
  free(t->group_of);
  t->prog_kernel = malloc(sizeof(int32_t) * (size_t)(n + 1));
  t->group_of = malloc(sizeof(int32_t) * (size_t)(n + 1));
  if (!t->prog_kernel || !t->group_of) return kiln_make_status(KILN_OUT_OF_MEMORY, "tune");
  t->n_prog = 0;
  t->f16_sums = false;
  for (int32_t k = 0; k < n; ++k) {
    if (!t->plan->kernels[k].tmpl || t->plan->kernels[k].tmpl->kind != KILN_TEMPLATE_MERGED)
      t->prog_kernel[t->n_prog++] = k;
    const kiln_template_t* d = t->cpu ? NULL : kiln_template_tunable_of(t->plan, k);
    /* a Winograd instance's alternative too: a point may switch it in */
    t->f16_sums = t->f16_sums || (d && (d->f16_sums || (d->alt && d->alt->f16_sums)));
    t->group_of[k] = -1;
    for (int32_t gi = 0; t->cpu && gi < t->n_groups && t->group_of[k] < 0; ++gi)
      for (int32_t i = 0; i < t->groups[gi].n_inst; ++i)
        if (t->groups[gi].inst[i] == t->plan->kernels[k].node) t->group_of[k] = gi;
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
    best += g->t_default * g->q_best * g->n_inst; /* the best speed-up measured beside the default */
    active += !g->done;
    if (g->q_best > 0 && 1 / g->q_best > top) top = 1 / g->q_best;
  }
  const double el = now_s() - t0;
  fprintf(f, "\rtune: round %d, %d of %d kernels searching, %d trials, kernels %.2f -> %.2f ms (best kernel %.2fx), "
             "model %.2f ms, %d dear points skipped, %.0f s, ETA %.0f s   ",
          (int)round, (int)active, (int)t->n_groups, (int)trials, def * 1e3, best * 1e3, top, model_ms, (int)t->skipped, el,
          budget - el > 0 ? budget - el : 0);
  fflush(f);
}

/* What the kept points add to the closing build's plan: the driver's part
 * of each kernel whose best point is not its default. |again_s|: the
 * default program's rebuild with its code reused (< 0: not made). */
static double kept_extra(const tuner_t* t, double again_s) {
  double extra = 0;
  for (int32_t j = 0; j < t->n_groups; ++j) {
    const group_t* h = &t->groups[j];
    /* with the code reused, the kernel is compiled afresh: the
     * dearer of its best point's driver part alone and its set-up
     * (program, driver, runs). PoCL's closing builds of 10 and 14
     * kept kernels took 14.3 and 20.2 s where the points' driver
     * parts alone planned 4.4 and 3.1 s; in test_opencl_tune (the
     * defaults in PoCL's cache) 3 took 18.0 s where the set-ups
     * planned 4.5 s. Lavapipe's of 15 took 3.1 s (the points' shaders
     * in Mesa's cache), planned at 35 s: an overestimate costs points,
     * an underestimate the closing build's deadline (nothing kept).
     * Where the kernels alone share their code with the first device
     * (micro.reuse_code: OpenCL's units, Vulkan's pipelines), the closing build takes a
     * kept point's code from its build alone and the unchanged
     * kernels' from the default build, a unit matched whatever its
     * kernel's name (ResNet-18, 10 kernels moved: 25 of 25 units
     * reused, 0.1 s, against 20 of 25 and 2.8 s with the points' code
     * not shared). So a kept point shared costs nothing while the
     * memo holds it (the units the tune made are counted): its driver
     * part counted planned lavapipe's ResNet-18 closing build at 26-30 s
     * where it took 0.7-2.2 s (19 of 19 pipelines reused). */
    const double over =
        kiln_tune_kept_cost_s(h->micro.reuse_code, t->units_made, again_s, h->best_s, h->setup_s, h->setup_driver_s);
    if (!tiles_eq(&h->best, &h->dflt)) extra += over;
  }
  return extra;
}

/* One point of |g|: built alone and timed beside its default. False in
 * *ran when the kernel has no point left. */
static void point_once(tuner_t* t, group_t* g, kiln_tune_summary_t* sum, double deadline, bool* ran) {
  *ran = false;
  t->draw_deadline = deadline;
  g->waiting = false;
  if ((t->o->trials > 0 && g->trials >= t->o->trials) || !next_point(t, g, &g->cand)) {
    g->done = !g->waiting; /* only dear draws left: it waits for a round with more time per kernel */
    return;
  }
  *ran = true;
  if (remember(g, &g->cand)) { /* out of memory for the list: this kernel stops */
    g->done = true;
    return;
  }
  g->trials++;
  sum->trials++;
  const double t0 = now_s();
  double tc = 0, td = 0;
  bool match = false, late = false;
  const int32_t R = 3 * (t->o->repeats > 0 ? t->o->repeats : 1); /* runs of one kernel cost little */
  if (t->o->test_sleep_s > 0 && sum->trials == t->o->test_sleep_point) g->micro.test_sleep_s = t->o->test_sleep_s;
  kiln_status_t s = kiln_tune_micro_measure_by(&g->micro, &g->cand, R, deadline, &tc, &td, &match, &late, t->o->log);
  /* an abandoned build's units are not known yet; the search ends with it
   * (only the budget line's plan reads the count after) */
  if (!late) count_units(t, g->micro.units_new);
  g->point_s = now_s() - t0;
  g->point_max = fmax(g->point_max, g->point_s);
  sum->points_s += g->point_s;
  if (!s && late) { /* the deadline: this point is not measured, and the search ends */
    sum->abandoned++;
    t->past_deadline = true;
    if (t->o->log) {
      char tiles[128];
      kiln_tune_tiles_format(&g->cand, tiles, sizeof tiles);
      fprintf(t->o->log, "\ntune: kernel '%s' point %s stopped at the deadline after %.1f s (%s); the search ends\n",
              g->name, tiles, g->point_s,
              g->micro.pending ? "its build goes on beside the closing build, result discarded" : "too few runs");
    }
    return;
  }
  if (s) { /* a point the driver refuses: dropped, not the search */
    if (t->o->log) fprintf(t->o->log, "\ntune: a point of kernel '%s' refused: %s\n", g->name, kiln_status_message(s));
    kiln_status_free(s);
  }
  if (s || !match) {
    note_cost(t, g, &g->cand, INFINITY);
    sum->rejected++;
    return;
  }
  /* at least 3% faster alone: below that a busy machine's noise picks winners */
  const double q = td > 0 ? tc / td : 1;
  note_cost(t, g, &g->cand, q);
  /* KILN_TUNE_TRACE=1: every point's paired medians (docs/TUNING.md) */
  const char* trace = getenv("KILN_TUNE_TRACE");
  if (trace && !strcmp(trace, "1") && t->o->log) {
    char tiles[128];
    kiln_tune_tiles_format(&g->cand, tiles, sizeof tiles);
    /* where a point's time goes: its program (lowering, printing, the
     * shader compiler), the driver (session, pipelines and the first run,
     * where lavapipe compiles the shader), the paired runs */
    fprintf(t->o->log,
            "\ntune: trace: kernel '%s' point %s (%s): %.1f us, default %.1f us beside it (%.2fx), %.1f s (program "
            "%.1f s, driver %.1f s, runs %.1f s)\n",
            g->name, tiles, g->from ? g->from : "?", tc * 1e6, td * 1e6, tc > 0 ? td / tc : 0.0, g->point_s, g->micro.program_s,
            g->micro.driver_s, fmax(0, g->point_s - g->micro.program_s - g->micro.driver_s));
  }
  if (q < g->q_best && q < KILN_TUNE_KEEP_RATIO) {
    g->q_best = q;
    g->best = g->cand;
    g->best_s = g->micro.driver_s; /* what the closing build pays for it: the driver's part */
  }
}

static void table(const tuner_t* t, FILE* f) {
  fprintf(f, "\n  %-44s %-9s %4s %10s %10s %8s  %s\n", "kernel (first instance)", "template", "inst", "default us",
          "tuned us", "speed-up", "tiles");
  for (int32_t gi = 0; gi < t->n_groups; ++gi) {
    const group_t* g = &t->groups[gi];
    char tiles[128];
    kiln_tune_tiles_format(&g->best, tiles, sizeof tiles);
    fprintf(f, "  %-44.44s %-9s %4d %10.1f %10.1f %7.2fx  %s%s\n", g->name,
            g->rep ? kiln_template_kind_name(g->rep->kind) : t->gemms.e[g->gemm].problem.op,
            (int)g->n_inst, g->t_default * 1e6, g->t_best * 1e6, g->t_best > 0 ? g->t_default / g->t_best : 1.0, tiles,
            tiles_eq(&g->best, &g->dflt) ? " (default)" : "");
  }
}

/* Points each kernel set up should get at least (the first of them are
 * the target's hints or random draws, then neighbours of the best). */
#define TUNE_MIN_POINTS 3

/* Where the budget went, in one line. */
static void budget_line(const tuner_t* t, const kiln_tune_summary_t* sum) {
  FILE* f = t->o->log;
  if (!f) return;
  char units[160] = "";
  if (sum->closing_units > 0)
    snprintf(units, sizeof units, "; %d of its %d code units from earlier builds", (int)sum->closing_units_reused,
             (int)sum->closing_units);
  if (t->units_made >= 0) /* what the plan counted kept points' code as free by */
    snprintf(units + strlen(units), sizeof units - strlen(units), "; the tune's builds made %d code units",
             (int)t->units_made);
  fprintf(f, "tune: budget %.0f s, used %.1f s (%.0f%%): before the search %.1f s, default build %.1f s (program "
             "%.1f s) + runs %.1f s, its %s again %.1f s, %d kernel set-ups %.1f s, %d points %.1f s (%d stopped at "
             "the deadline, %d dear points skipped: %d random draws, %d steps, %d hints), closing build %.1f s + runs %.1f s (planned %.1f s%s)\n",
          t->o->budget_s, sum->elapsed_s, 100 * sum->elapsed_s / t->o->budget_s, sum->prepare_s, sum->default_build_s,
          sum->default_program_s, sum->default_runs_s, sum->build_again_s > 0 ? "build (code reused)" : "program",
          sum->build_again_s > 0 ? sum->build_again_s : sum->program_again_s, (int)sum->kernels_set_up, sum->setup_s,
          (int)sum->trials, sum->points_s, (int)sum->abandoned, (int)sum->skipped,
          (int)t->skipped_from[0], (int)t->skipped_from[1], (int)t->skipped_from[2], sum->closing_build_s, sum->closing_runs_s,
          sum->closing_planned_s, units);
}

/* The search; the budget runs from |t0| (kiln_tune_clock_s). */
/* Every group back to its default point; the count of those that had
 * another. */
static int32_t keep_defaults(tuner_t* t) {
  int32_t n = 0;
  for (int32_t gi = 0; gi < t->n_groups; ++gi) {
    group_t* g = &t->groups[gi];
    n += !tiles_eq(&g->best, &g->dflt);
    g->best = g->dflt;
  }
  return n;
}

static kiln_status_t search(tuner_t* t, kiln_tune_cache_t* cache, kiln_tune_summary_t* sum, double t0) {
  const kiln_tune_options_t* o = t->o;
  const double budget = o->budget_s;
  sum->prepare_s = now_s() - t0;
  t->closing_deadline = o->device ? t0 + 1.05 * budget : INFINITY;
  sum->default_abandoned = false;
  /* times: [group] a build's, [n_groups + group] the default's beside it */
  const int32_t reps = o->repeats > 0 ? o->repeats : 1;
  double* times = calloc(2 * (size_t)t->n_groups + 1, sizeof(double));
  if (!times) return kiln_make_status(KILN_OUT_OF_MEMORY, "tune");
  double* def = times + t->n_groups;
  measured_t m0, m1;
  memset(&m0, 0, sizeof m0);
  memset(&m1, 0, sizeof m1);
  double tb = now_s();
  kiln_status_t s = set_tiles(t, false);
  if (!s) s = measure(t, reps, times, def, &m0); /* the default build, kept */
  if (!s) {
    m0.build_s = now_s() - tb - m0.runs_s; /* with the plan's tiles and weights set */
    sum->default_build_s = m0.build_s;
    sum->default_runs_s = m0.runs_s;
    t->units_made = m0.units > 0 ? m0.units - m0.units_reused : -1;
  }
  if (!s && m0.late) { /* no reference to tune against: nothing measured, no record */
    sum->default_abandoned = true;
    sum->elapsed_s = now_s() - t0;
    if (o->log) {
      fprintf(o->log, "tune: the default build was not done within the budget and its 5%% margin (%.1f s): nothing "
                      "tuned (its build goes on, result discarded)\n", m0.build_s);
      budget_line(t, sum);
    }
    free(times);
    return NULL;
  }
  for (int32_t gi = 0; !s && gi < t->n_groups; ++gi) {
    group_t* g = &t->groups[gi];
    g->t_default = g->t_best = times[gi];
    g->q_best = 1;
  }
  /* The closing whole-model build costs what the default one did (program,
   * session, warm-up), its 2 x reps timed pairs after a warm-up pair what
   * the default's runs did per run (the median: one slow run of a busy
   * machine is not the rule), a fifth more; and as much more as the
   * machine got busier since (the load average per CPU: the CPU target's
   * closing build of ResNet-18 took 2.5x the default's while the load went
   * from 14 to 20). It is planned from the start: a point is tried only
   * while it and the closing build still fit. A program of one kernel
   * costs less than the model's, unless the model is so small that
   * starting the compiler is most of it: the closing build is also planned
   * to cost at least the dearest set-up seen so far (a kernel alone at its
   * default: what the model's build costs a kernel), plus what the kept
   * points cost beyond their set-ups (|extra| below). */
  const double pairs_s = s ? 0 : (2 * reps + 1) * 2 * m0.model_s;
  /* The closing build's program comes from what this process has built
   * before (Vulkan: the SPIR-V of every shader text the default build and
   * the points compiled is reused, targets/vulkan/vulkan_compile.c), so
   * where the default build's program was a large part of it (the
   * shaders' compile), what building the same program again costs is
   * measured here and planned instead (ResNet-18 on lavapipe: the default
   * build 73 s, the closing one 3.9 s, planned from the former at 95 s). */
  double program_again = m0.program_s;
  /* GPU targets: the closing build takes the default build's code for
   * every kernel whose code it has (reuse_code: PoCL's program units,
   * lavapipe's pipelines), so it costs a build of the default program
   * with nothing to compile, measured here, plus the driver's part of its
   * kept points (|extra| below). PoCL at load 8-10: ResNet-18's default
   * build 12.1-16.1 s, this one 0.1-0.5 s; MobileNetV2's 29.8 s and 0.4 s. */
  double again_s = -1;
  if (!s && !t->cpu && kiln_tune_reuse_code()) {
    const double ta = now_s();
    kiln_status_t as = build_again(t);
    if (!as) again_s = now_s() - ta;
    else if (o->log) fprintf(o->log, "tune: the default build again (its code reused): %s\n", kiln_status_message(as));
    kiln_status_free(as);
    sum->build_again_s = now_s() - ta;
  }
  if (!s && again_s < 0 && m0.program_s > 0.2 * m0.build_s) {
    const double ta = now_s();
    kiln_program_t* again = NULL;
    kiln_status_t as = kiln_tune_whole_program(t->plan, t->target, &again);
    kiln_program_destroy(again);
    if (!as) program_again = fmin(m0.program_s, now_s() - ta);
    kiln_status_free(as);
    sum->program_again_s = now_s() - ta;
  }
  sum->default_program_s = m0.program_s;
  const double base = again_s >= 0 ? 1.2 * (again_s + pairs_s)
                                   : 1.2 * (m0.build_s - m0.program_s + program_again + pairs_s),
               busy0 = busy();
  double closing = base, at_least = base;
#define CLOSING_UPDATE(wall)                                           \
  do {                                                                 \
    at_least = fmax(at_least, 1.2 * ((wall) + pairs_s));               \
    closing = fmax(at_least, base * fmax(1, busy() / busy0));          \
  } while (0)
  /* Each kernel alone: its default point's program (the reference for its
   * candidates). The plan goes back to the packed weights the points'
   * layouts are made from. A kernel that cannot be set up alone is not
   * searched (noted), never fatal. */
  kiln_template_weights_restore(t->plan);
  int32_t* order = s ? NULL : malloc(sizeof(int32_t) * (size_t)(t->n_groups + 1));
  if (!s && !order) s = kiln_make_status(KILN_OUT_OF_MEMORY, "tune");
  for (int32_t gi = 0; !s && gi < t->n_groups; ++gi) order[gi] = gi;
  for (int32_t i = 1; !s && i < t->n_groups; ++i) /* hottest first */
    for (int32_t j = i; j > 0 && t->groups[order[j]].t_default > t->groups[order[j - 1]].t_default; --j) {
      const int32_t x = order[j];
      order[j] = order[j - 1];
      order[j - 1] = x;
    }
  /* what the last kernel's set-up cost; before the first, a guess: a
   * fifth of the whole model's build (a kernel's program is smaller, but
   * on the CPU it needs a lowering of the model and a compiler process) */
  double last = 0.2 * m0.build_s;
  int32_t n_set = 0, n_left = 0;
  bool no_room = false;
  /* with --trials the caller chose how deep; the cut then only keeps a
   * point for every kernel set up */
  const int32_t min_points = o->trials > 0 ? 1 : TUNE_MIN_POINTS;
  for (int32_t i = 0; !s && i < t->n_groups && !(o->stop && *o->stop); ++i) {
    group_t* g = &t->groups[order[i]];
    const double t1 = now_s();
    CLOSING_UPDATE(0);
    /* the set-up, a point of it and the closing build must fit */
    if (t1 - t0 + 2 * last + closing > budget) {
      no_room = n_set == 0;
      n_left = n_set > 0 ? t->n_groups - i : 0;
      break;
    }
    /* A budget too small for every kernel goes to the hottest: the next
     * set-up only while it and TUNE_MIN_POINTS points (one with --trials)
     * for each kernel set up so far (a point costs about a set-up: one
     * kernel's build and runs) still fit; the rest keep their defaults.
     * On a loaded machine a PoCL or lavapipe point costs 5-60 s, and 17
     * set-ups with one point each found nothing where 8 with three each
     * may. */
    if (n_set > 0 && t1 - t0 + closing + last * (1 + min_points * (n_set + 1)) > budget) {
      n_left = t->n_groups - i;
      break;
    }
    kiln_status_t ms = t->cpu ? kiln_tune_micro_init_cpu(&g->micro, t->plan, t->g, &t->po, o->opt, &t->gemms, g->gemm,
                                                         g->inst[0], t->target, t->pdev, o->threads,
                                                         g->key.fingerprint ^ o->seed)
                              : kiln_tune_micro_init(&g->micro, t->plan, g->inst[0], t->target, &t->set, t->pdev,
                                                     o->threads, g->key.fingerprint ^ o->seed);
    g->micro_ok = !ms;
    g->micro.async = t->pdev != t->dev;
    n_set += !ms;
    g->point_s = g->point_max = g->setup_s = last = now_s() - t1;
    g->setup_driver_s = g->micro.driver_s;
    if (!ms) count_units(t, g->micro.units_new);
    sum->setup_s += last;
    CLOSING_UPDATE(last);
    if (ms) {
      if (o->log) fprintf(o->log, "tune: kernel '%s' not searched: %s\n", g->name, kiln_status_message(ms));
      kiln_status_free(ms);
      kiln_tune_micro_free(&g->micro);
    }
  }
  sum->kernels_set_up = n_set;
  if (no_room && o->log)
    fprintf(o->log, "tune: the default build took %.1f s and its runs %.1f s: no time left in the %.0f s budget for a "
                    "kernel's points and the closing build (about %.0f s); every kernel keeps its default\n",
            m0.build_s, m0.runs_s, budget, closing);
  if (n_left && o->log)
    fprintf(o->log, "\ntune: the budget holds about %d points each for the %d hottest kernels only; the other "
                    "%d keep their defaults\n", (int)min_points, (int)n_set, (int)n_left);
  for (int32_t gi = 0; gi < t->n_groups; ++gi) t->groups[gi].done |= !t->groups[gi].micro_ok;
  /* Rounds of one point per kernel still searching, hottest first, while
   * the point (what the kernel's last one cost) and the closing whole-model
   * build fit the budget. */
  bool any = true;
  /* the dearest point so far of each template kind (the CPU's GEMMs: 0) */
  double point_max_kind[KILN_TEMPLATE_KINDS] = {0};
  while (!s && any && !(o->stop && *o->stop) && !t->past_deadline) {
    any = false;
    for (int32_t i = 0; i < t->n_groups && !(o->stop && *o->stop) && !t->past_deadline; ++i) {
      group_t* g = &t->groups[order[i]];
      if (g->done) continue;
      /* the closing build compiles the best points, which may cost more
       * than the defaults it was planned from (larger unrolled bodies):
       * the driver's part of each (the best point's over its set-up's) */
      const double extra = kept_extra(t, again_s);
      CLOSING_UPDATE(0);
      /* the next point costs what this kernel's dearest did, or any
       * kernel's of its template kind: a point the driver compiles slowly
       * (lavapipe: a larger unrolled body, 1.8 s at the default and 36 s
       * at a hint for a tinycnn conv) is a surprise once, not at every
       * kernel. A kind of its own: an F(4x4) Winograd point (34 s for
       * ResNet-18's layer1 conv at load 20) left no room for any conv's
       * point (a few seconds) when it counted for all. A kernel whose
       * next point does not fit waits; the search ends when none fits. */
      const int32_t kind = t->cpu || !g->rep || (int32_t)g->rep->kind >= KILN_TEMPLATE_KINDS ? 0 : (int32_t)g->rep->kind;
      if (now_s() - t0 + fmax(g->point_max, point_max_kind[kind]) + closing + extra > budget) continue;
      bool ran = false;
      /* the point stops where only the closing build is left */
      point_once(t, g, sum, t0 + budget - closing - extra, &ran);
      any |= ran;
      /* not at the dearest point: a point whose driver compile is slow (an
       * F(4x4) shader, 40-60 s on lavapipe) planned ResNet-18's closing
       * build at 59 s where it took 16 (the shaders' SPIR-V is reused; a
       * kept point's extra cost is |extra|), ending the search at 58% */
      if (ran) CLOSING_UPDATE(0);
      if (ran) point_max_kind[kind] = fmax(point_max_kind[kind], g->point_s);
    }
    if (any) sum->rounds++;
    progress(t, sum->rounds, sum->trials, t0, budget, m0.def_model_s * 1e3);
  }
#undef CLOSING_UPDATE
  sum->skipped = t->skipped;
  /* the plan as the search last saw it: the closing build and what the
   * kept points add to it */
  sum->closing_planned_s = closing + kept_extra(t, again_s);
  /* the kernels' programs are freed once the closing build is made (an
   * abandoned point's build overlaps it), or here without one */
  free(order);
  /* Never slower: the best points are built and measured again, together
   * and beside the default build; each is kept only where it beats the
   * default there. Without a changed point there is nothing to check. */
  m1.model_s = m1.def_model_s = m0.model_s;
  m1.cpu_s = m1.def_cpu_s = m0.cpu_s;
  bool changed = false;
  for (int32_t gi = 0; gi < t->n_groups; ++gi) changed |= !tiles_eq(&t->groups[gi].best, &t->groups[gi].dflt);
  if (!s && changed) {
    if (o->log) fprintf(o->log, "\n");
    tb = now_s();
    s = set_tiles(t, true);
    if (!s) s = measure(t, 2 * reps, times, def, &m1); /* twice the pairs: the last word */
    sum->closing_runs_s = m1.runs_s;
    free_micros(t); /* when the build failed before measure reached it */
    sum->closing_build_s = now_s() - tb - m1.runs_s;
    sum->closing_units = m1.units;
    sum->closing_units_reused = m1.units_reused;
    if (!s && m1.late) { /* the budget's margin is spent: nothing is kept unchecked */
      sum->closing_abandoned = true;
      sum->reverted += keep_defaults(t);
      m1.model_s = m1.def_model_s = m0.model_s;
      m1.cpu_s = m1.def_cpu_s = m0.cpu_s;
      if (o->log)
        fprintf(o->log, "\ntune: the closing build was not done within the budget and its 5%% margin (%.1f s); "
                        "nothing kept (its build goes on, result discarded)\n", now_s() - tb);
    }
    if (!s && !m1.late && !m1.match) { /* cannot happen unless the device is flaky: keep nothing */
      keep_defaults(t);
      if (o->log) fprintf(o->log, "\ntune: the best points together differ from the defaults; nothing kept\n");
    }
    /* On the CPU with one thread a run's CPU time is what the machine's
     * load leaves alone (its wall time and the dispatches' stamps move
     * several times over at load 20): the tuned model must not be slower
     * by it, else nothing is kept. */
    if (!s && m1.match && t->cpu && o->threads == 1 && m1.cpu_s > m1.def_cpu_s) {
      sum->cpu_reverted = true;
      sum->reverted += keep_defaults(t);
      if (o->log)
        fprintf(o->log, "tune: the tuned model is slower by process CPU time (%.3f vs %.3f ms per run, medians of %d "
                        "pairs); nothing kept\n", m1.cpu_s * 1e3, m1.def_cpu_s * 1e3, (int)(2 * reps));
    }
    /* Elsewhere the whole model's wall time per run, paired with the
     * default build's, is the check: faster kernels by their dispatch
     * stamps can still make a slower model (lavapipe: other kernels'
     * caches, a driver's scheduling), and such a model is not kept. */
    if (!s && m1.match && !(t->cpu && o->threads == 1) && m1.model_s > m1.def_model_s) {
      sum->model_reverted = true;
      sum->reverted += keep_defaults(t);
      if (o->log)
        fprintf(o->log, "tune: the tuned model is slower (%.3f vs %.3f ms per run, medians of %d pairs); nothing kept\n",
                m1.model_s * 1e3, m1.def_model_s * 1e3, (int)(2 * reps));
    }
  }
  free_micros(t);
  for (int32_t gi = 0; !s && gi < t->n_groups; ++gi) {
    group_t* g = &t->groups[gi];
    if (!tiles_eq(&g->best, &g->dflt)) {
      g->t_default = def[gi];
      g->t_best = times[gi];
      /* kept only at least 3% faster in the model too, as alone: a point
       * about even there (the kernel's stamps in the closing pairs move
       * by a few percent run to run) came out slower as often as faster
       * in separately compiled modules (OpenCL MobileNetV2: 8 of 18 kept
       * by "faster at all" were slower in bench/tune.py's re-measurement) */
      /* and faster in at least 3 of 4 of the pairs (kiln_tune_paired_keep):
       * on lavapipe at load 12-15 the default module against a copy of
       * itself read 3 of 13 nodes more than 5% slower by the bench's
       * medians of separate processes; a point whose median is 3% ahead
       * in only half the pairs is within that noise */
      if (!kiln_tune_paired_keep(times[gi], def[gi], g->pair_wins, g->pairs)) {
        if (o->log && times[gi] < KILN_TUNE_KEEP_RATIO * def[gi])
          fprintf(o->log, "tune: kernel '%s': %.2fx in the closing pairs' medians, but faster in only %d of %d pairs: "
                          "default kept\n", g->name, def[gi] / fmax(times[gi], 1e-12), (int)g->pair_wins, (int)g->pairs);
        sum->reverted++;
        g->best = g->dflt;
      }
    }
    if (tiles_eq(&g->best, &g->dflt)) g->t_best = g->t_default;
    sum->improved += !tiles_eq(&g->best, &g->dflt);
    kiln_tune_record_t r = {.key = g->key, .tiles = g->best, .default_us = fmax(g->t_default * 1e6, 1e-3),
                            .tuned_us = fmax(g->t_best * 1e6, 1e-3)};
    s = kiln_tune_cache_put(cache, &r, true);
  }
  sum->default_ms = m1.def_model_s * 1e3;
  sum->tuned_ms = (sum->improved ? m1.model_s : m1.def_model_s) * 1e3;
  if (t->cpu && o->threads == 1) {
    sum->default_cpu_ms = m1.def_cpu_s * 1e3;
    sum->tuned_cpu_ms = (sum->improved ? m1.cpu_s : m1.def_cpu_s) * 1e3;
  }
  sum->elapsed_s = now_s() - t0;
  if (!s && o->log) {
    qsort(t->groups, (size_t)t->n_groups, sizeof *t->groups, by_default_time); /* hottest first */
    table(t, o->log);
    budget_line(t, sum);
  }
  free(times);
  return s;
}

kiln_status_t kiln_tune_model(kiln_graph_t* g, const kiln_target_t* target, kiln_device_t* dev,
                              const kiln_tune_options_t* o, kiln_tune_cache_t* cache, kiln_tune_summary_t* out) {
  tuner_t t;
  memset(&t, 0, sizeof t);
  memset(out, 0, sizeof *out);
  const double t0 = o->start_s > 0 ? o->start_s : now_s();
  t.g = g;
  t.target = target;
  t.dev = dev;
  t.o = o;
  t.rng = o->seed * 2654435761u + 88172645463325252ull;
  kiln_tune_device_of(dev, &t.where);
  t.cpu = target->lowering == KILN_TARGET_CLASS_CPU;
  if (t.cpu && o->fp16)
    return kiln_make_status(KILN_UNSUPPORTED, "tune: --precision fp16 tunes the template kernels of the GPU targets; "
                                              "the CPU target's GEMM schedules are tuned at fp32 only");
  if (!t.cpu) kiln_program_templates(target, &t.set);
  if (!t.cpu && !t.set.space)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "tune: target %s has no search space to tune", target->name);
  /* the plan and tiles a compile for this device makes (api/driver.c):
   * its loop limit splits the work, its missing features pick the tiles */
  t.set.gpu_lacks = t.cpu ? 0 : t.where.limits.gpu_lacks;
  if (!t.cpu) t.set.limits = t.where.limits;
  /* the CPU plan in the layout a compile of the model makes (NCHWc at -O1,
   * compiler/pipeline.c), whose convs have their own space */
  kiln_compile_config_t lc;
  memset(&lc, 0, sizeof lc);
  lc.target = target;
  lc.opt = o->opt;
  t.po = (kiln_plan_options_t){target->lowering, o->threads,
                               target->lowering == KILN_TARGET_CLASS_GPU ? t.where.limits.loop_limit : 0, 0,
                               t.cpu ? kiln_compile_layout_block(&lc) : 0, target->ew_lanes};
  /* the kernels alone on a device of their own, so that a point's build
   * the deadline abandons can go on beside the closing build on |dev|
   * (a device serves one thread at a time); without one, on |dev| */
  t.pdev = dev;
  if (o->device) {
    kiln_device_open_options_t oo = {o->threads, true, NULL};
    kiln_status_t ds = kiln_device_open(o->device, &oo, kiln_allocator_system(), &t.pdev);
    if (ds) {
      if (o->log)
        fprintf(o->log, "tune: note: no second device '%s' for the kernels alone (%s): a point's build is not "
                        "stopped at the deadline\n", o->device, kiln_status_message(ds));
      kiln_status_free(ds);
      t.pdev = dev;
    }
  }
  kiln_status_t s = make_inputs(&t);
  if (!s) s = plan_of(&t);
  if (!s) s = t.cpu ? make_cpu_groups(&t, cache) : make_groups(&t, cache);
  if (!s && t.cpu) s = plan_of(&t); /* the kernels' groups, now that there are groups */
  if (!s) {
    t.ref = calloc((size_t)g->n_outputs + 1, sizeof(kiln_array_t));
    if (!t.ref) s = kiln_make_status(KILN_OUT_OF_MEMORY, "tune");
  }
  if (!s && t.n_groups == 0)
    s = kiln_make_status(KILN_INVALID_ARGUMENT, "tune: the model has no %s to tune on %s",
                         t.cpu ? "GEMMs (Conv, MatMul, Gemm)" : "template kernels", target->name);
  if (!s) {
    out->kernels = t.n_groups;
    for (int32_t gi = 0; gi < t.n_groups; ++gi) out->instances += t.groups[gi].n_inst;
    if (o->log)
      fprintf(o->log, "tune: %d %s, %d distinct kernels, on %s (%s), budget %.0f s\n",
              (int)out->instances, t.cpu ? "GEMM nodes" : "template instances", (int)out->kernels, t.where.device, t.where.driver, o->budget_s);
    s = search(&t, cache, out, t0);
  }
  for (int32_t gi = 0; gi < t.n_groups; ++gi) {
    free(t.groups[gi].inst);
    free(t.groups[gi].tried);
    free(t.groups[gi].skipped);
  }
  kiln_tune_cpu_table_free(&t.gemms);
  kiln_tune_costs_free(&t.costs);
  for (int32_t i = 0; t.in && i < g->n_inputs; ++i) kiln_array_free(kiln_allocator_system(), &t.in[i]);
  for (int32_t i = 0; t.ref && i < g->n_outputs; ++i) kiln_array_free(kiln_allocator_system(), &t.ref[i]);
  free_micros(&t); /* on an error path */
  kiln_session_destroy(t.def_ses);
  kiln_module_release(t.def_mod);
  if (t.pdev != dev) kiln_device_release(t.pdev);
  free(t.prog_kernel);
  free(t.in);
  free(t.ref);
  free(t.groups);
  free(t.group_of);
  kiln_plan_destroy(t.plan);
  return s;
}
