/* Staged execution: graphs whose shapes depend on values, and control flow,
 * on a compiled target.
 *
 * A compiled program has fixed buffer sizes, so a node whose output size
 * depends on data (NonZero, Compress, Unique, NonMaxSuppression, a TopK whose
 * K is computed at run time) or on a subgraph (If, Loop, Scan) cannot sit
 * inside one. The staged executor splits the graph at such nodes
 * (kiln_op_is_host_only): the runs of nodes between them are stages, each
 * compiled as a program of its own for the target and run by a session on
 * the device; the split nodes run on the host on their reference kernels,
 * which size their outputs after they ran. A stage is compiled when it first
 * runs, for the shapes (and dtypes) its inputs then have -- the real ones,
 * after the data-dependent nodes before it -- and the compiled stage is
 * cached under those shapes, so the next run with the same sizes reuses its
 * program, memory plan and session; other sizes compile another. Each stage's
 * memory is planned by its own session for its exact shapes: nothing is
 * planned from a guess, so the arena is neither overrun nor oversized.
 *
 * Small integer inputs of a stage that decide shapes (a Reshape target, a
 * TopK K computed from a shape before the stage) are bound as constants when
 * the stage would not compile to static shapes without them; their values
 * then join the cache key. A stage that asks for more than
 * max_specializations such variants runs on the reference kernels from then
 * on (counted in the stats) instead of compiling on every run.
 *
 * If, Loop and Scan run their bodies through the same executor (one child
 * per subgraph, compiled stage by stage in the same way), so a Loop body is
 * compiled once per body shape, not once per iteration.
 *
 * On a GPU target the host nodes are the CPU fallback of heterogeneous
 * execution: kiln_staged_log names each ("fallback: node ... runs on the
 * cpu"), and options.strict refuses the graph at creation naming the first.
 *
 * Thread-compatible: one run at a time per executor. The graph must outlive
 * it and stay unchanged. */
#ifndef KILN_COMPILER_STAGED_H_
#define KILN_COMPILER_STAGED_H_

#include "compiler/pipeline.h"
#include "ir/graph.h"
#include "kiln/runtime.h"
#include "runtime/device.h"
#include "targets/registry.h"

typedef struct kiln_staged_s kiln_staged_t;

typedef struct kiln_staged_options_s {
  const kiln_target_t* target; /* compiles the stages */
  kiln_device_t* device;       /* runs them (borrowed; outlives the executor) */
  int opt;                     /* graph passes and fusion, as -O */
  int threads;
  int64_t loop_limit;          /* kiln_compile_config_t.loop_limit */
  bool strict;                 /* a host node on a GPU target is an error */
  int32_t max_specializations; /* per stage; <= 0: 16 */
  /* The stages' precision (fp16: kiln_compile_program's; int8 and auto,
   * which calibrate the whole graph, are refused); NULL: fp32. Copied (its
   * pointers -- policy file, device name -- borrowed). */
  const kiln_compile_precision_t* precision;
} kiln_staged_options_t;

typedef struct kiln_staged_stats_s {
  int32_t stages;        /* of the top graph */
  int32_t host_nodes;    /* nodes of the top graph run on the host */
  int32_t compiles;      /* stage programs compiled so far (subgraphs too) */
  int32_t reuses;        /* stage runs that found their program cached */
  int32_t on_reference;  /* stages that ran on the reference kernels */
  double host_s;         /* time in host nodes (their subgraphs included) */
  double compile_s;      /* time compiling stages and creating their sessions */
} kiln_staged_stats_t;

/* True when |g| has a node that must run between compiled stages. */
bool kiln_graph_needs_staging(const kiln_graph_t* g);

/* Splits prepared |g| into stages (nothing is compiled yet). Errors: strict
 * on a GPU target (UNSUPPORTED naming the node and why it runs on the host),
 * OUT_OF_MEMORY. */
KILN_MUST_USE kiln_status_t kiln_staged_create(const kiln_graph_t* g, const kiln_staged_options_t* options,
                                               kiln_staged_t** out);
void kiln_staged_destroy(kiln_staged_t* st); /* NULL: no-op */

/* Runs |g| on |inputs| (g->n_inputs, checked like the reference executor
 * checks them); |outputs| (g->n_outputs) receive arrays of the real shapes,
 * allocated with the system allocator. On failure nothing is returned and
 * the error names the node or the stage. */
KILN_MUST_USE kiln_status_t kiln_staged_run(kiln_staged_t* st, const kiln_array_t* inputs, kiln_array_t* outputs);

void kiln_staged_stats(const kiln_staged_t* st, kiln_staged_stats_t* out);

/* One line per host node into |log| ("fallback" section on a GPU target:
 * "fallback: node 'n' (NonZero) runs on the cpu: ...", "staged" section on
 * the CPU), plus the stage count. */
KILN_MUST_USE kiln_status_t kiln_staged_log(const kiln_graph_t* g, const kiln_target_t* target,
                                            kiln_compile_log_t* log);

/* ---- the segments, for the module form (api/driver_staged.c) ---- */

typedef struct kiln_staged_segment_info_s {
  bool host;              /* one host node; else a stage */
  int32_t a, b;           /* nodes [a, b) of the graph (folded ones among them skipped) */
  int32_t n_in;
  const int32_t* in;      /* tensors of the graph it reads (no constants), in its inputs' order */
  int32_t n_out;
  const int32_t* out;     /* tensors it makes that later segments or the outputs read */
} kiln_staged_segment_info_t;

int32_t kiln_staged_segment_count(const kiln_staged_t* st);
void kiln_staged_segment_info(const kiln_staged_t* st, int32_t si, kiln_staged_segment_info_t* out);
/* Stage |si| as a prepared graph of its own (as a run compiles it): its
 * inputs of the dtypes and shapes of |vals| (indexed by tensor; only those
 * fields are read), the constants it reads as initializers, its outputs
 * those of the info. Caller destroys it. */
KILN_MUST_USE kiln_status_t kiln_staged_segment_graph(const kiln_staged_t* st, int32_t si, const kiln_array_t* vals,
                                                      kiln_graph_t** out);

#endif /* KILN_COMPILER_STAGED_H_ */
