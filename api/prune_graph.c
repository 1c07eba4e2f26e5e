/* kiln prune's device side (see prune_graph.h). */
#include "api/prune_graph.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/driver.h"
#include "kiln/runtime.h"
#include "runtime/module_impl.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

kiln_status_t kiln_graph_session_open(const kiln_driver_request_t* rq, kiln_graph_t* g, bool profile,
                                      kiln_graph_session_t* out) {
  memset(out, 0, sizeof *out);
  kiln_compile_log_t log = {0};
  kiln_program_t* prog = NULL;
  kiln_status_t s = kiln_driver_compile(rq, g, &log, &prog);
  kiln_compile_log_free(&log);
  if (!s && (s = kiln_module_wrap(prog, &out->module))) kiln_program_destroy(prog);
  if (!s) {
    kiln_device_open_options_t oo = {rq->threads, true, NULL};
    s = kiln_device_open(rq->device ? rq->device : rq->target->name, &oo, kiln_allocator_system(), &out->device);
  }
  if (!s) {
    kiln_session_options_t so;
    kiln_session_options_default(&so);
    so.threads = rq->threads;
    so.profile = profile;
    so.slots = 1;
    s = kiln_session_create(out->module, out->device, &so, &out->session);
  }
  if (s) kiln_graph_session_close(out);
  return s;
}

void kiln_graph_session_close(kiln_graph_session_t* gs) {
  kiln_session_destroy(gs->session);
  kiln_device_release(gs->device);
  kiln_module_release(gs->module);
  memset(gs, 0, sizeof *gs);
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* The group whose source layer is named |node| (-1: none). */
static int32_t group_of_node(const kiln_pruner_t* p, const char* node) {
  if (!node) return -1;
  for (int32_t k = 0; k < p->deps.n_groups; ++k)
    for (int32_t i = 0; i < p->deps.groups[k].n_sources; ++i)
      if (!strcmp(p->g->nodes[p->deps.groups[k].sources[i]].name, node)) return k;
  return -1;
}

static kiln_status_t time_session(const kiln_pruner_t* p, kiln_session_t* se, const kiln_array_t* inputs,
                                  int32_t reps, double* out_s,
                                  double* out_group_s) {
  const int32_t no = p->g->n_outputs;
  kiln_array_t* outs = calloc((size_t)no + 1, sizeof(kiln_array_t));
  double* t = malloc(sizeof(double) * (size_t)(reps + 1));
  kiln_status_t s = outs && t ? NULL : kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
  for (int32_t r = -2; !s && r < reps; ++r) {
    double t0 = now_s();
    s = kiln_session_run(se, inputs, outs);
    if (!s && r >= 0) t[r] = now_s() - t0;
    for (int32_t o = 0; o < no; ++o) kiln_array_free(kiln_allocator_system(), &outs[o]);
  }
  if (!s) {
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    *out_s = t[reps / 2];
  }
  if (!s && out_group_s) {
    for (int32_t k = 0; k < p->deps.n_groups; ++k) out_group_s[k] = 0;
    int32_t n = 0, runs = 0;
    const kiln_profile_entry_t* e = kiln_session_profile(se, &n, &runs);
    for (int32_t i = 0; e && runs > 0 && i < n; ++i) {
      int32_t k = group_of_node(p, e[i].node);
      if (k >= 0) out_group_s[k] += e[i].total_s / runs;
    }
  }
  free(outs), free(t);
  return s;
}

kiln_status_t kiln_prune_measure(const kiln_pruner_t* p, const kiln_prune_bench_t* b, const int64_t* counts,
                                 double* out_s, double* out_group_s) {
  kiln_prune_plan_t plan;
  KILN_RETURN_IF_ERROR(kiln_pruner_plan(p, counts, &plan));
  kiln_graph_t* pg = NULL;
  kiln_status_t s = kiln_prune_apply(p->g, &plan, false, &pg);
  kiln_prune_plan_free(&plan);
  KILN_RETURN_IF_ERROR(s);
  kiln_driver_request_t rq;
  memset(&rq, 0, sizeof rq);
  rq.model_path = p->g->source && p->g->source[0] ? p->g->source : "pruned";
  rq.target = b->target;
  rq.device = b->device;
  rq.opt = 1;
  rq.threads = b->threads;
  rq.fp16_arith = 0;
  kiln_compile_precision_default(&rq.precision);
  rq.loop_limit = b->target->lowering == KILN_TARGET_CLASS_GPU ? -1 : 0;
  kiln_graph_session_t gs;
  s = kiln_graph_session_open(&rq, pg, out_group_s != NULL, &gs);
  if (!s) s = time_session(p, gs.session, b->inputs, b->reps > 0 ? b->reps : 20, out_s, out_group_s);
  kiln_graph_session_close(&gs);
  return s ? kiln_status_annotate(s, "timing the pruned model on %s", b->target->name) : NULL;
}

#define N_UP 5   /* c, and c rounded up to multiples of 4, 8, 16, 32 */
#define N_CAND 8 /* under a FLOP budget also c rounded down to multiples of 8, 16, 32 */

/* Candidate |i| of a group with |C| channels asked to keep |c| (see
 * prune_graph.h); a rounded-down count under 1 stays c. */
static int64_t candidate(int64_t c, int64_t C, int i) {
  static const int64_t q[] = {1, 4, 8, 16, 32, 8, 16, 32};
  int64_t v = i < N_UP ? ((c + q[i] - 1) / q[i]) * q[i] : (c / q[i]) * q[i];
  if (v < 1) v = c;
  return v > C ? C : v;
}

kiln_status_t kiln_prune_round_latency(const kiln_pruner_t* p, const kiln_prune_bench_t* b, double max_flops,
                                       int64_t* counts, FILE* log) {
  const int32_t ng = p->deps.n_groups;
  const int nc = max_flops > 0 ? N_CAND : N_UP; /* slot nc: the unpruned model */
  double* t = malloc(sizeof(double) * (size_t)(ng * (N_CAND + 1) + 1));
  double* gt = malloc(sizeof(double) * (size_t)(ng + 1));
  int64_t* trial = malloc(sizeof(int64_t) * (size_t)(ng + 1));
  int64_t* asked = malloc(sizeof(int64_t) * (size_t)(ng + 1));
  kiln_status_t s = t && gt && trial && asked ? NULL : kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
  double model;
  for (int32_t k = 0; !s && k < ng; ++k) asked[k] = counts[k];
  /* Slot nc: the unpruned model, every group's reference time. A
   * candidate index that changes no group is not compiled again. */
  for (int i = 0; !s && i <= nc; ++i) {
    bool differs = i == 0 || i == nc;
    for (int32_t k = 0; k < ng; ++k) {
      const int64_t C = p->deps.groups[k].channels;
      bool whole = p->deps.groups[k].blocked || asked[k] == C;
      trial[k] = i == nc || whole ? C : candidate(asked[k], C, i);
      differs = differs || (!whole && trial[k] != asked[k] && trial[k] != candidate(asked[k], C, i - 1));
    }
    if (differs) s = kiln_prune_measure(p, b, trial, &model, gt);
    for (int32_t k = 0; !s && k < ng; ++k) t[k * (N_CAND + 1) + i] = differs ? gt[k] : t[k * (N_CAND + 1) + i - 1];
  }
  for (int32_t k = 0; !s && k < ng; ++k) {
    const int64_t C = p->deps.groups[k].channels;
    if (p->deps.groups[k].blocked || asked[k] == C) continue;
    const double* tk = &t[k * (N_CAND + 1)];
    double best = INFINITY;
    for (int i = 0; i < nc; ++i)
      if (candidate(asked[k], C, i) < C) best = fmin(best, tk[i]);
    /* The most channels that cost no more than the fastest cut (3% for
     * timer noise), within the FLOP budget; none that is measurably slower
     * than the unpruned layers. */
    int64_t choice = C;
    double chosen_t = tk[nc];
    for (int i = 0; i < nc && !s; ++i) {
      int64_t v = candidate(asked[k], C, i);
      if (v >= C || tk[i] > best * 1.03 || tk[i] > tk[nc] * 1.03 || (choice < C && v <= choice)) continue;
      if (max_flops > 0) {
        int64_t params, flops, keep = counts[k];
        counts[k] = v;
        s = kiln_pruner_cost(p, counts, &params, &flops);
        counts[k] = keep;
        if (s || (double)flops > max_flops) continue;
      }
      choice = v, chosen_t = tk[i];
    }
    if (s) break;
    if (choice == C && max_flops > 0) {
      /* no candidate fits the budget with its time: the asked count */
      choice = asked[k], chosen_t = tk[0];
    }
    if (log)
      fprintf(log, "rounding %-24s %lld -> %lld channels (%.4f ms; unpruned %.4f ms)\n", kiln_pruner_group_name(p, k),
              (long long)asked[k], (long long)choice, 1e3 * chosen_t, 1e3 * tk[nc]);
    counts[k] = choice;
  }
  free(t), free(gt), free(trial), free(asked);
  return s;
}

kiln_status_t kiln_prune_fit_latency(const kiln_pruner_t* p, const kiln_prune_bench_t* b, double ms, int64_t* counts,
                                     FILE* log) {
  double sec;
  kiln_pruner_counts_for_ratio(p, 0.999, counts);
  KILN_RETURN_IF_ERROR(kiln_prune_measure(p, b, counts, &sec, NULL));
  if (1e3 * sec > ms)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "--latency-ms %.4g: below what removing every prunable channel reaches on %s (%.4g ms "
                            "with one channel left per group)",
                            ms, b->target->name, 1e3 * sec);
  double lo = 0, hi = 0.999;
  for (int it = 0; it < 8; ++it) {
    double mid = 0.5 * (lo + hi);
    kiln_pruner_counts_for_ratio(p, mid, counts);
    KILN_RETURN_IF_ERROR(kiln_prune_measure(p, b, counts, &sec, NULL));
    if (log) fprintf(log, "ratio %.3f: %.3f ms (budget %.3f)\n", mid, 1e3 * sec, ms);
    if (1e3 * sec <= ms) hi = mid;
    else lo = mid;
  }
  kiln_pruner_counts_for_ratio(p, hi, counts);
  return kiln_prune_round_latency(p, b, 0, counts, log);
}

kiln_status_t kiln_prune_analyze(const kiln_pruner_t* p, const kiln_prune_bench_t* b, const double* ratios,
                                 int32_t n_ratios, FILE* out, FILE* csv) {
  const int32_t ng = p->deps.n_groups;
  int64_t* counts = malloc(sizeof(int64_t) * (size_t)(ng + 1));
  double* gt = malloc(sizeof(double) * (size_t)(ng + 1));
  kiln_status_t s = counts && gt ? NULL : kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
  double model = 0;
  for (int32_t k = 0; !s && k < ng; ++k) counts[k] = p->deps.groups[k].channels;
  if (!s) s = kiln_prune_measure(p, b, counts, &model, gt);
  if (!s) {
    fprintf(out, "model: %lld params, %lld FLOPs, %.3f ms on %s\n", (long long)p->params, (long long)p->flops,
            1e3 * model, b->target->name);
    fprintf(out, "%-28s %8s %10s %12s %10s", "group (first layer)", "channels", "params", "FLOPs", "ms");
    for (int32_t r = 0; r < n_ratios; ++r) fprintf(out, "  err@%.2f", ratios[r]);
    fputc('\n', out);
    if (csv) fprintf(csv, "group,channels,params,flops,latency_ms,ratio,error,agree\n");
  }
  for (int32_t k = 0; !s && k < ng; ++k) {
    const kiln_prune_group_t* gr = &p->deps.groups[k];
    int64_t params, flops;
    kiln_pruner_group_cost(p, k, &params, &flops);
    fprintf(out, "%-28s %8lld %10lld %12lld %10.4f", kiln_pruner_group_name(p, k), (long long)gr->channels,
            (long long)params, (long long)flops, 1e3 * gt[k]);
    if (gr->blocked) {
      fprintf(out, "  unpruned: %s\n", gr->blocked);
      continue;
    }
    for (int32_t r = 0; !s && r < n_ratios; ++r) {
      for (int32_t i = 0; i < ng; ++i) counts[i] = p->deps.groups[i].channels;
      int64_t keep = gr->channels - (int64_t)floor(gr->channels * ratios[r] + 0.5);
      counts[k] = keep < 1 ? 1 : keep;
      double err, agree;
      s = kiln_pruner_error(p, counts, &err, &agree);
      if (s) break;
      fprintf(out, "  %8.3g", err);
      if (csv)
        fprintf(csv, "%s,%lld,%lld,%lld,%.6f,%.3f,%.6g,%.4f\n", kiln_pruner_group_name(p, k), (long long)gr->channels,
                (long long)params, (long long)flops, 1e3 * gt[k], ratios[r], err, agree);
    }
    fputc('\n', out);
  }
  free(counts), free(gt);
  return s;
}
