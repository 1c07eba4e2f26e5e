/* kiln structured pruning (see prune.h): importance, plans, and the
 * choices of channel counts. */
#include "compiler/prune.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/op.h"

static const kiln_tensor_t* T(const kiln_graph_t* g, int32_t t) { return &g->tensors[t]; }

/* Adds to |score| (per channel of the use's group) f(elements of channel
 * c): l1 -> mean |w|, l2 -> sqrt(mean w^2). */
static void score_use(const kiln_graph_t* g, const kiln_prune_use_t* u, int64_t channels, bool l2, double* score) {
  const kiln_array_t* a = &T(g, u->tensor)->value;
  int64_t outer = 1, rest = 1;
  for (int32_t i = 0; i < u->axis; ++i) outer *= a->shape.dims[i];
  for (int32_t i = u->axis + 1; i < a->shape.rank; ++i) rest *= a->shape.dims[i];
  int64_t len = a->shape.dims[u->axis];
  for (int64_t c = 0; c < channels; ++c) {
    double acc = 0;
    int64_t cnt = 0;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t p = u->offset + c * u->inner; p < u->offset + (c + 1) * u->inner; ++p)
        for (int64_t r = 0; r < rest; ++r) {
          double v = kiln_load_f64(a->dtype, a->data, (size_t)((o * len + p) * rest + r));
          acc += l2 ? v * v : fabs(v);
          ++cnt;
        }
    if (cnt) score[c] += l2 ? sqrt(acc / cnt) : acc / cnt;
  }
}

kiln_status_t kiln_pruner_init(kiln_pruner_t* p, const kiln_graph_t* g, kiln_prune_method_t m,
                               const char* const* keep, int32_t n_keep) {
  memset(p, 0, sizeof *p);
  p->g = g;
  KILN_RETURN_IF_ERROR(kiln_prune_deps_analyze(g, keep, n_keep, &p->deps));
  kiln_prune_cost(g, &p->params, &p->flops);
  const int32_t ng = p->deps.n_groups;
  p->importance = calloc((size_t)ng + 1, sizeof(double*));
  p->bn_fallback = calloc((size_t)ng + 1, sizeof(bool));
  if (!p->importance || !p->bn_fallback) {
    kiln_pruner_free(p);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory (channel importance)");
  }
  for (int32_t k = 0; k < ng; ++k) {
    p->importance[k] = calloc((size_t)p->deps.groups[k].channels + 1, sizeof(double));
    if (!p->importance[k]) {
      kiln_pruner_free(p);
      return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory (channel importance)");
    }
  }
  bool* has_bn = calloc((size_t)ng + 1, sizeof(bool));
  if (!has_bn) {
    kiln_pruner_free(p);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory (channel importance)");
  }
  for (int32_t u = 0; u < p->deps.n_uses; ++u) {
    const kiln_prune_use_t* use = &p->deps.uses[u];
    if (m == KILN_PRUNE_BN && use->kind == KILN_PRUNE_USE_BN_SCALE) {
      has_bn[use->group] = true;
      score_use(g, use, p->deps.groups[use->group].channels, false, p->importance[use->group]);
    }
  }
  for (int32_t u = 0; u < p->deps.n_uses; ++u) {
    const kiln_prune_use_t* use = &p->deps.uses[u];
    if (use->kind == KILN_PRUNE_USE_OUT_WEIGHT && !has_bn[use->group])
      score_use(g, use, p->deps.groups[use->group].channels, m == KILN_PRUNE_L2, p->importance[use->group]);
  }
  for (int32_t k = 0; k < ng; ++k) p->bn_fallback[k] = m == KILN_PRUNE_BN && !has_bn[k];
  free(has_bn);
  return NULL;
}

void kiln_pruner_free(kiln_pruner_t* p) {
  if (!p) return;
  for (int32_t k = 0; p->importance && k < p->deps.n_groups; ++k) free(p->importance[k]);
  free(p->importance);
  free(p->bn_fallback);
  if (p->want)
    for (int64_t i = 0; i < (int64_t)p->n * p->g->n_outputs; ++i) kiln_array_free(kiln_allocator_system(), &p->want[i]);
  free(p->want);
  kiln_prune_deps_free(&p->deps);
  memset(p, 0, sizeof *p);
}

void kiln_pruner_counts_for_ratio(const kiln_pruner_t* p, double r, int64_t* counts) {
  for (int32_t k = 0; k < p->deps.n_groups; ++k) {
    const kiln_prune_group_t* gr = &p->deps.groups[k];
    int64_t keep = gr->channels - (int64_t)floor(gr->channels * r + 0.5);
    counts[k] = gr->blocked ? gr->channels : (keep < 1 ? 1 : keep);
  }
}

/* The |count| most important channels of group |k| (ties: lower index). */
static void select_channels(const kiln_pruner_t* p, int32_t k, int64_t count, uint8_t* keep) {
  const int64_t C = p->deps.groups[k].channels;
  const double* s = p->importance[k];
  for (int64_t c = 0; c < C; ++c) {
    int64_t rank = 0; /* channels that beat c */
    for (int64_t d = 0; d < C; ++d) rank += s[d] > s[c] || (s[d] == s[c] && d < c);
    keep[c] = rank < count;
  }
}

static kiln_prune_slice_t* slice_for(kiln_prune_plan_t* pl, const kiln_graph_t* g, int32_t t, int32_t axis,
                                     int32_t* cap) {
  for (int32_t i = 0; i < pl->n_slices; ++i)
    if (!strcmp(pl->slices[i].name, T(g, t)->name) && pl->slices[i].axis == axis) return &pl->slices[i];
  if (pl->n_slices == *cap) {
    int32_t nc = *cap ? 2 * *cap : 16;
    void* q = realloc(pl->slices, sizeof(*pl->slices) * (size_t)nc);
    if (!q) return NULL;
    pl->slices = q, *cap = nc;
  }
  int64_t len = T(g, t)->shape.dims[axis];
  uint8_t* keep = malloc((size_t)len + 1);
  if (!keep) return NULL;
  memset(keep, 1, (size_t)len);
  pl->slices[pl->n_slices] = (kiln_prune_slice_t){T(g, t)->name, axis, len, keep};
  return &pl->slices[pl->n_slices++];
}

kiln_status_t kiln_pruner_plan(const kiln_pruner_t* p, const int64_t* counts, kiln_prune_plan_t* out) {
  memset(out, 0, sizeof *out);
  const kiln_prune_deps_t* d = &p->deps;
  uint8_t** masks = calloc((size_t)d->n_groups + 1, sizeof(uint8_t*));
  kiln_status_t s = masks ? NULL : kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory (prune plan)");
  for (int32_t k = 0; !s && k < d->n_groups; ++k) {
    const kiln_prune_group_t* gr = &d->groups[k];
    if (counts[k] < 1 || counts[k] > gr->channels)
      s = kiln_make_status(KILN_INVALID_ARGUMENT, "channel group of '%s': %lld channels kept of %lld",
                           kiln_pruner_group_name(p, k), (long long)counts[k], (long long)gr->channels);
    else if (counts[k] < gr->channels && gr->blocked)
      s = kiln_make_status(KILN_INVALID_ARGUMENT, "channel group of '%s' cannot be pruned: %s",
                           kiln_pruner_group_name(p, k), gr->blocked);
    else if (counts[k] < gr->channels) {
      if (!(masks[k] = malloc((size_t)gr->channels + 1))) s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
      else select_channels(p, k, counts[k], masks[k]);
    }
  }
  int32_t cap = 0;
  for (int32_t u = 0; !s && u < d->n_uses; ++u) {
    const kiln_prune_use_t* use = &d->uses[u];
    if (!masks[use->group]) continue;
    kiln_prune_slice_t* sl = slice_for(out, p->g, use->tensor, use->axis, &cap);
    if (!sl) {
      s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory (prune plan)");
      break;
    }
    for (int64_t c = 0; c < d->groups[use->group].channels; ++c)
      if (!masks[use->group][c]) memset(&sl->keep[use->offset + c * use->inner], 0, (size_t)use->inner);
  }
  if (!s && d->n_dw) {
    out->attrs = calloc((size_t)d->n_dw, sizeof(kiln_prune_attr_t));
    if (!out->attrs) s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory (prune plan)");
  }
  for (int32_t i = 0; !s && i < d->n_dw; ++i) {
    const kiln_prune_dw_t* dw = &d->dw[i];
    int64_t total = 0, before = 0;
    for (int32_t k = 0; k < dw->n_segs; ++k) {
      before += dw->seg_count[k];
      total += dw->seg_group[k] >= 0 ? counts[dw->seg_group[k]] : dw->seg_count[k];
    }
    if (total != before) out->attrs[out->n_attrs++] = (kiln_prune_attr_t){p->g->nodes[dw->node].name, "group", total};
  }
  for (int32_t k = 0; masks && k < d->n_groups; ++k) free(masks[k]);
  free(masks);
  if (s) kiln_prune_plan_free(out);
  return s;
}

void kiln_prune_plan_free(kiln_prune_plan_t* plan) {
  if (!plan) return;
  for (int32_t i = 0; i < plan->n_slices; ++i) free(plan->slices[i].keep);
  free(plan->slices);
  free(plan->attrs);
  memset(plan, 0, sizeof *plan);
}

kiln_status_t kiln_pruner_fit_flops(const kiln_pruner_t* p, double budget, int64_t* counts) {
  int64_t params, flops;
  const int32_t ng = p->deps.n_groups;
  for (int32_t k = 0; k < ng; ++k) counts[k] = p->deps.groups[k].blocked ? p->deps.groups[k].channels : 1;
  KILN_RETURN_IF_ERROR(kiln_pruner_cost(p, counts, &params, &flops));
  if ((double)flops > budget)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "--flops %.4g: below what removing every prunable channel reaches (%lld FLOPs, "
                            "one channel left per group; the model has %lld)",
                            budget, (long long)flops, (long long)p->flops);
  /* Monotone in the ratio up to rounding: bisection on it, 20 steps. */
  double lo = 0, hi = 1;
  for (int it = 0; it < 20; ++it) {
    double mid = 0.5 * (lo + hi);
    kiln_pruner_counts_for_ratio(p, mid, counts);
    KILN_RETURN_IF_ERROR(kiln_pruner_cost(p, counts, &params, &flops));
    if ((double)flops <= budget) hi = mid;
    else lo = mid;
  }
  kiln_pruner_counts_for_ratio(p, hi, counts);
  KILN_RETURN_IF_ERROR(kiln_pruner_cost(p, counts, &params, &flops));
  if ((double)flops > budget)
    for (int32_t k = 0; k < ng; ++k) counts[k] = p->deps.groups[k].blocked ? p->deps.groups[k].channels : 1;
  return NULL;
}

#define N_SENS 9 /* ratios 0.1 .. 0.9 */

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* Counts for per-group error budget |e|: each group at the largest ratio
 * whose error alone, and every smaller ratio's, stays within |e|. */
static void counts_for_budget(const kiln_pruner_t* p, const double* sens, double e, int64_t* counts) {
  for (int32_t k = 0; k < p->deps.n_groups; ++k) {
    const kiln_prune_group_t* gr = &p->deps.groups[k];
    counts[k] = gr->channels;
    if (gr->blocked) continue;
    for (int j = 0; j < N_SENS && sens[k * N_SENS + j] <= e; ++j) {
      int64_t keep = gr->channels - (int64_t)floor(gr->channels * 0.1 * (j + 1) + 0.5);
      counts[k] = keep < 1 ? 1 : keep;
    }
  }
}

kiln_status_t kiln_pruner_fit_tolerance(const kiln_pruner_t* p, double tol, int64_t* counts, FILE* log) {
  const int32_t ng = p->deps.n_groups;
  double* sens = malloc(sizeof(double) * (size_t)(ng * N_SENS + 1));
  double* sorted = malloc(sizeof(double) * (size_t)(ng * N_SENS + 1));
  int64_t* trial = malloc(sizeof(int64_t) * (size_t)(ng + 1));
  kiln_status_t s = sens && sorted && trial ? NULL : kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
  int32_t ns = 0;
  for (int32_t k = 0; !s && k < ng; ++k) {
    const kiln_prune_group_t* gr = &p->deps.groups[k];
    for (int j = 0; j < N_SENS; ++j) sens[k * N_SENS + j] = INFINITY;
    if (gr->blocked) continue;
    if (log) fprintf(log, "sensitivity %-24s", kiln_pruner_group_name(p, k));
    for (int j = 0; !s && j < N_SENS; ++j) {
      for (int32_t i = 0; i < ng; ++i) trial[i] = p->deps.groups[i].channels;
      int64_t keep = gr->channels - (int64_t)floor(gr->channels * 0.1 * (j + 1) + 0.5);
      trial[k] = keep < 1 ? 1 : keep;
      s = kiln_pruner_error(p, trial, &sens[k * N_SENS + j], NULL);
      if (!s) sorted[ns++] = sens[k * N_SENS + j];
      if (!s && log) fprintf(log, " %.2g", sens[k * N_SENS + j]);
    }
    if (log) fputc('\n', log);
  }
  for (int32_t k = 0; k < ng; ++k) counts[k] = p->deps.groups[k].channels;
  if (!s && ns) {
    qsort(sorted, (size_t)ns, sizeof(double), cmp_double);
    int32_t lo = -1, hi = ns; /* sorted[lo] passes (lo = -1: nothing pruned); sorted[hi] fails */
    while (hi - lo > 1 && !s) {
      int32_t mid = (lo + hi) / 2;
      counts_for_budget(p, sens, sorted[mid], trial);
      double err;
      s = kiln_pruner_error(p, trial, &err, NULL);
      if (!s && log) fprintf(log, "per-group budget %.3g: error together %.3g (tolerance %.3g)\n", sorted[mid], err, tol);
      if (!s && err <= tol) lo = mid;
      else hi = mid;
    }
    if (!s && lo >= 0) counts_for_budget(p, sens, sorted[lo], counts);
  }
  free(sens), free(sorted), free(trial);
  return s;
}

const char* kiln_pruner_group_name(const kiln_pruner_t* p, int32_t k) {
  const kiln_prune_group_t* gr = &p->deps.groups[k];
  return gr->n_sources ? p->g->nodes[gr->sources[0]].name : "?";
}

void kiln_pruner_group_cost(const kiln_pruner_t* p, int32_t k, int64_t* out_params, int64_t* out_flops) {
  const kiln_graph_t* g = p->g;
  const kiln_prune_group_t* gr = &p->deps.groups[k];
  int64_t params = 0, flops = 0;
  kiln_tensor_t* in[KILN_MAX_NODE_INPUTS];
  kiln_tensor_t* outs[KILN_MAX_NODE_OUTPUTS];
  for (int32_t i = 0; i < gr->n_sources; ++i) {
    const kiln_node_t* n = &g->nodes[gr->sources[i]];
    for (int32_t j = 0; j < n->n_inputs; ++j) {
      in[j] = n->inputs[j] >= 0 ? &g->tensors[n->inputs[j]] : NULL;
      if (in[j] && (in[j]->flags & KILN_TENSOR_INITIALIZER)) params += kiln_shape_count(&in[j]->shape);
    }
    for (int32_t j = 0; j < n->n_outputs; ++j) outs[j] = n->outputs[j] >= 0 ? &g->tensors[n->outputs[j]] : NULL;
    kiln_infer_t ic = {(kiln_graph_t*)g, n, g->opset, n->n_inputs, in, n->n_outputs, outs, g->allocator, false};
    if (n->schema && n->schema->flops) flops += n->schema->flops(&ic);
  }
  *out_params = params;
  *out_flops = flops;
}

void kiln_pruner_report_print(const kiln_pruner_t* p, const int64_t* counts, FILE* out) {
  fprintf(out, "%-28s %5s %9s %9s  %s\n", "group (first layer)", "layers", "channels", "kept", "note");
  for (int32_t k = 0; k < p->deps.n_groups; ++k) {
    const kiln_prune_group_t* gr = &p->deps.groups[k];
    char note[600] = "";
    if (gr->blocked) snprintf(note, sizeof note, "unpruned: %s", gr->blocked);
    else if (p->bn_fallback[k]) snprintf(note, sizeof note, "l1 (no BatchNormalization in the group)");
    else if (gr->n_sources > 1) {
      size_t o = (size_t)snprintf(note, sizeof note, "tied:");
      for (int32_t i = 0; i < gr->n_sources && o < sizeof note; ++i)
        o += (size_t)snprintf(note + o, sizeof note - o, " %s", p->g->nodes[gr->sources[i]].name);
    }
    fprintf(out, "%-28s %5d %9lld %9lld  %s\n", kiln_pruner_group_name(p, k), gr->n_sources,
            (long long)gr->channels, (long long)counts[k], note);
  }
}
