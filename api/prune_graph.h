/* What `kiln prune` measures on a device: a pruned graph compiled for the
 * target and timed in a session (per model and per channel group, from the
 * session's per-dispatch profile), latency-aware channel rounding, the
 * --latency-ms budget, and the --analyze table. compiler/prune.h does the
 * rest, which needs no device.
 *
 * Latency-aware rounding: each prunable group's channel count c (from
 * --ratio, --flops or --tolerance) gets candidates c and c rounded up to
 * multiples of 4, 8, 16 and 32 (below the group's channel count: never a
 * deeper cut than asked). Candidate i of every group is compiled together
 * (one compile and timing per candidate index, not per group), and each
 * group takes the most channels whose layers -- its source Conv/Gemm/MatMul
 * nodes, as the session's profile names them -- cost no more than its
 * fastest candidate (3% for timer noise): channels the kernels' tiles pay
 * for anyway are kept. A group whose candidates are all more than 3% slower
 * than its unpruned layers stays unpruned (a cut never makes a layer
 * slower). Under a FLOP budget (--flops) the candidates also include c
 * rounded down to multiples of 8, 16 and 32 -- the budget, not the ratio,
 * is what was asked, and a count fitted exactly to it rarely tiles well --
 * and a larger candidate is taken only while the model stays within it.
 *
 * Thread-compatible.
 */
#ifndef KILN_API_PRUNE_GRAPH_H_
#define KILN_API_PRUNE_GRAPH_H_

#include <stdio.h>

#include "api/driver.h"
#include "compiler/prune.h"
#include "kiln/runtime.h"
#include "targets/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A compiled graph in a session of its own (one slot): what `kiln prune`
 * times and `kiln eval` measures. */
typedef struct kiln_graph_session_s {
  kiln_module_t* module;
  kiln_device_t* device;
  kiln_session_t* session;
} kiln_graph_session_t;

/* Compiles parsed |g| (consumed either way) as |rq| says, opens rq->device
 * (NULL: the target's name; no CPU fallback) and a session on it, with
 * per-dispatch profiling when |profile|. Close with kiln_graph_session_close
 * (on error nothing is left open). */
KILN_MUST_USE kiln_status_t kiln_graph_session_open(const kiln_driver_request_t* rq, kiln_graph_t* g, bool profile,
                                                    kiln_graph_session_t* out);
void kiln_graph_session_close(kiln_graph_session_t* gs);

typedef struct kiln_prune_bench_s {
  const kiln_target_t* target;
  const char* device;         /* NULL: the target's name */
  int32_t threads;            /* CPU threads (0: all cores) */
  int32_t reps;               /* timed runs after two warm-ups (<= 0: 20) */
  const kiln_array_t* inputs; /* one sample: g->n_inputs arrays */
} kiln_prune_bench_t;

/* Compiles the graph |counts| makes of p->g for b->target and runs it:
 * |out_s| the median wall time of a run; |out_group_s| (may be NULL;
 * n_groups entries) each group's source layers' time per run from the
 * profile. Errors name the target. */
KILN_MUST_USE kiln_status_t kiln_prune_measure(const kiln_pruner_t* p, const kiln_prune_bench_t* b,
                                               const int64_t* counts, double* out_s, double* out_group_s);

/* Latency-aware rounding of |counts| in place (see above); |max_flops| > 0
 * caps the model's FLOPs; |log| (may be NULL) gets a line per group. */
KILN_MUST_USE kiln_status_t kiln_prune_round_latency(const kiln_pruner_t* p, const kiln_prune_bench_t* b,
                                                     double max_flops, int64_t* counts, FILE* log);

/* --latency-ms: the smallest uniform ratio (bisection, 8 measured steps)
 * whose model runs in at most |ms|, rounded as above. An error naming the
 * budget when even one channel per group is slower. */
KILN_MUST_USE kiln_status_t kiln_prune_fit_latency(const kiln_pruner_t* p, const kiln_prune_bench_t* b, double ms,
                                                   int64_t* counts, FILE* log);

/* --analyze: per prunable group its parameters, FLOPs, measured latency
 * and the output error (needs samples) with that group alone at each of
 * |n_ratios| ratios; printed to |out| and, with |csv| (may be NULL),
 * written as CSV (group,channels,params,flops,latency_ms,ratio,error,agree). */
KILN_MUST_USE kiln_status_t kiln_prune_analyze(const kiln_pruner_t* p, const kiln_prune_bench_t* b,
                                               const double* ratios, int32_t n_ratios, FILE* out, FILE* csv);

#ifdef __cplusplus
}
#endif
#endif /* KILN_API_PRUNE_GRAPH_H_ */
