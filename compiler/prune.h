/* kiln structured pruning: `kiln prune`.
 *
 * A pruner holds a prepared graph with static shapes, its channel groups
 * (compiler/prune_deps.h) and each group's channel importance:
 *   l1   mean |w| of each output filter, summed over the group's sources
 *   l2   root mean square of each output filter, summed likewise
 *   bn   |scale| of the BatchNormalization(s) the channels pass through,
 *        summed; a group without one falls back to l1 (the report says so)
 * A choice is a kept channel count per group (the group's channel count
 * where it is not pruned); the kept channels are the most important ones,
 * in their original order. From a choice it makes the plan
 * (ir/prune_plan.h) that frontend/onnx_prune.h writes into the model file,
 * and the pruned graph in memory, whose parameters and FLOPs it counts and
 * whose outputs it measures against the original's in the reference
 * executor on calibration samples (error: the largest |got - want| over
 * every output and sample, divided by the largest |want|).
 *
 * The choices:
 *   --ratio R     every prunable group keeps max(1, round(C (1 - R)))
 *   --flops F     the largest uniform ratio (bisection) whose pruned graph
 *                 has at most F FLOPs; an error when even one channel per
 *                 group is above F
 *   --tolerance T per-group ratios by measured sensitivity: each group's
 *                 error alone at ratios 0.1 .. 0.9, then the largest
 *                 per-group error e (bisection over the measured errors)
 *                 for which every group at the largest ratio whose error
 *                 alone stays within e gives an error within T together
 * Latency-aware rounding (it needs the devices) is api/prune_graph.h's.
 *
 * Thread-compatible.
 */
#ifndef KILN_COMPILER_PRUNE_H_
#define KILN_COMPILER_PRUNE_H_

#include <stdio.h>

#include "compiler/prune_deps.h"
#include "ir/prune_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_prune_method_e {
  KILN_PRUNE_L1 = 0,
  KILN_PRUNE_L2,
  KILN_PRUNE_BN,
} kiln_prune_method_t;

typedef struct kiln_pruner_s {
  const kiln_graph_t* g;     /* borrowed; prepared, static shapes */
  kiln_prune_deps_t deps;
  double** importance;       /* per group: |channels| scores */
  bool* bn_fallback;         /* per group: --method bn fell back to l1 */
  int64_t params, flops;     /* of |g| */
  /* Calibration (kiln_pruner_set_samples): */
  const kiln_array_t* inputs; /* n samples of g->n_inputs arrays (borrowed) */
  int32_t n;
  kiln_array_t* want;        /* n samples of g->n_outputs arrays (owned) */
} kiln_pruner_t;

/* Analyses |g| (see kiln_prune_deps_analyze for |keep|'s errors) and scores
 * the channels. Free with kiln_pruner_free. */
KILN_MUST_USE kiln_status_t kiln_pruner_init(kiln_pruner_t* p, const kiln_graph_t* g, kiln_prune_method_t m,
                                             const char* const* keep, int32_t n_keep);
void kiln_pruner_free(kiln_pruner_t* p);

/* Runs the original graph on |n| samples (borrowed until free) for the
 * error measurements. Errors name the sample. */
KILN_MUST_USE kiln_status_t kiln_pruner_set_samples(kiln_pruner_t* p, const kiln_array_t* inputs, int32_t n);

/* |counts| (n_groups entries): every prunable group at ratio |r| in
 * [0, 1), the others at their channel count. */
void kiln_pruner_counts_for_ratio(const kiln_pruner_t* p, double r, int64_t* counts);
/* Fills |out| (free with kiln_prune_plan_free) for |counts|. */
KILN_MUST_USE kiln_status_t kiln_pruner_plan(const kiln_pruner_t* p, const int64_t* counts, kiln_prune_plan_t* out);
/* The graph |plan| makes of p->g: a new graph, prepared when |prepare|
 * (else parsed-like, for the compile driver). */
KILN_MUST_USE kiln_status_t kiln_prune_apply(const kiln_graph_t* g, const kiln_prune_plan_t* plan, bool prepare,
                                             kiln_graph_t** out);
/* Parameters (initializer elements) and FLOPs of prepared |g|. */
void kiln_prune_cost(const kiln_graph_t* g, int64_t* out_params, int64_t* out_flops);
/* Parameters and FLOPs of the graph |counts| makes. */
KILN_MUST_USE kiln_status_t kiln_pruner_cost(const kiln_pruner_t* p, const int64_t* counts, int64_t* out_params,
                                             int64_t* out_flops);
/* Error (see above) and top-1 agreement of output 0 (fraction of samples)
 * of the graph |counts| makes; needs samples. */
KILN_MUST_USE kiln_status_t kiln_pruner_error(const kiln_pruner_t* p, const int64_t* counts, double* out_err,
                                              double* out_agree);

/* --flops: |budget| FLOPs (absolute). */
KILN_MUST_USE kiln_status_t kiln_pruner_fit_flops(const kiln_pruner_t* p, double budget, int64_t* counts);
/* --tolerance: per-group ratios (needs samples); |log| (may be NULL) gets a
 * line per group with its sensitivity. */
KILN_MUST_USE kiln_status_t kiln_pruner_fit_tolerance(const kiln_pruner_t* p, double tol, int64_t* counts,
                                                      FILE* log);

/* A group's name for reports: its first source node. */
const char* kiln_pruner_group_name(const kiln_pruner_t* p, int32_t group);
/* Parameters and FLOPs of group |k|'s sources in p->g. */
void kiln_pruner_group_cost(const kiln_pruner_t* p, int32_t k, int64_t* out_params, int64_t* out_flops);

/* Report: per group its sources, channels before and after, and the groups
 * left unpruned with the reason. */
void kiln_pruner_report_print(const kiln_pruner_t* p, const int64_t* counts, FILE* out);

void kiln_prune_plan_free(kiln_prune_plan_t* plan);

#ifdef __cplusplus
}
#endif
#endif /* KILN_COMPILER_PRUNE_H_ */
