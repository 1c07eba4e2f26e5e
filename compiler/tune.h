/* Auto-tuning of the template instances' tiles (docs/TUNING.md).
 *
 * kiln_tune_choose is kiln_template_choose with a tuning cache: the tiles
 * of every instance whose fingerprint has a record measured on this
 * device, driver, kiln version and knob space replace the defaults, after
 * the target's constraints accept them; everything else keeps its
 * defaults, and the log says which kernels ran untuned.
 *
 * kiln_tune_model measures: it builds the model once with the defaults
 * (the reference outputs, each kernel's time, the default session), then
 * every point of every distinct kernel (deduplicated by fingerprint) as a
 * program of that kernel alone on seeded buffers (tune_micro.h), timed run
 * for run beside the kernel's default program and checked against its
 * outputs (rtol 1e-3, atol 1e-4), in rounds of one point per kernel,
 * hottest first. The candidates are random points of the space first,
 * then neighbours of the best (one knob one step away). At the end the best
 * points are built into the model and measured beside the default build; a
 * kernel whose point is not faster there keeps the default ("never
 * slower"), and outputs that differ from the default build's keep nothing.
 * A point is tried while it and the closing build fit the budget. On the
 * CPU the knobs are the GEMMs' schedules (tune_cpu.h).
 *
 * Thread-compatible; |stop| may be set from a signal handler. */
#ifndef KILN_COMPILER_TUNE_H_
#define KILN_COMPILER_TUNE_H_

#include <signal.h>
#include <stdio.h>

#include "compiler/tune_cache.h"
#include "ir/graph.h"
#include "kiln/runtime.h"
#include "lowering/template.h"
#include "runtime/program.h"
#include "targets/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where a point is measured: the key fields of the device and its limits. */
typedef struct kiln_tune_device_s {
  const char* target; /* "opencl" */
  char device[KILN_TUNE_NAME_MAX];
  char driver[KILN_TUNE_NAME_MAX];
  kiln_template_limits_t limits;
} kiln_tune_device_t;

/* The key fields of an open device (names made printable, tabs dropped). */
void kiln_tune_device_of(kiln_device_t* dev, kiln_tune_device_t* out);

typedef struct kiln_tune_use_report_s {
  int32_t instances; /* tunable instances in the plan */
  int32_t tuned;     /* tiles from a record */
  int32_t kept;      /* a record that kept the default (it was not faster) */
  int32_t untuned;   /* no record for this device, driver and kiln version */
  int32_t stale;     /* of those, a record for another device, driver or kiln version */
  int32_t refused;   /* a record the target's constraints refuse */
} kiln_tune_use_report_t;

/* kiln_template_select, the tiles of |cache|'s exact records, then the
 * weights laid out for them. Warnings and the untuned kernels go to |log|
 * (NULL: none). Errors: those of kiln_template_choose. */
KILN_MUST_USE kiln_status_t kiln_tune_choose(kiln_plan_t* plan, const kiln_template_set_t* set,
                                             const kiln_tune_cache_t* cache, const kiln_tune_device_t* dev,
                                             FILE* log, kiln_tune_use_report_t* out);

/* `--tuning-cache FILE` at compile time: reads |path| (bad lines skipped),
 * takes the device key from |dev| or, when NULL, from device |target|
 * opened without fallback, and runs kiln_tune_choose. Never fatal for the
 * cache or the device: when either cannot be used the default tiles are
 * chosen (kiln_template_choose). Lines for people go to |notes| (NULL:
 * none), each starting "warning: " or "note: "; *out gets the counts.
 * Errors: those of kiln_template_choose, OUT_OF_MEMORY. */
KILN_MUST_USE kiln_status_t kiln_tune_choose_file(kiln_plan_t* plan, const kiln_template_set_t* set, const char* path,
                                                  kiln_device_t* dev, const char* target, int32_t threads,
                                                  FILE* notes, kiln_tune_use_report_t* out);

/* Records in |prog| (built from |plan|) the point of every instance whose
 * tiles kiln_tune_choose took from a record (kiln_program_kernel_t.tuned,
 * matched by kernel name). OUT_OF_MEMORY. */
KILN_MUST_USE kiln_status_t kiln_tune_mark_program(const kiln_plan_t* plan, kiln_program_t* prog);

typedef struct kiln_tune_options_s {
  double budget_s;   /* wall-clock budget of the whole search (> 0) */
  int32_t trials;    /* candidates per kernel at most (0: until the budget) */
  int32_t repeats;   /* timed runs per measurement (default 5) */
  int32_t threads;
  int32_t opt;       /* -O level of the plan */
  /* the plan's precision as `kiln compile --precision fp16
   * [--fp16-accumulate]` makes it (GPU targets; fp32: none), with the
   * device's fp16 arithmetic: the kernels tuned are those the fp16 compile
   * runs (f16 operands, and f16 sums where |fp16_accumulate|: the Vulkan
   * GEMM / conv records' h) */
  bool fp16;
  bool fp16_accumulate;
  uint64_t seed;
  bool resume;       /* start each kernel from its exact record in the cache */
  volatile sig_atomic_t* stop; /* set: finish after the current round */
  FILE* log;         /* progress and the final table (NULL: quiet) */
  /* when the budget began, on kiln_tune_clock_s's clock (0: when
   * kiln_tune_model is called); a command line sets it at its start so
   * that reading the model and the graph passes count too */
  double start_s;
  /* the device's name as kiln_device_open takes it ("opencl:0"): the tuner
   * opens a second one for the kernels alone, whose points' driver builds
   * then run on a worker thread it stops waiting for at the budget's
   * deadline (NULL: on |dev|, a build the deadline cannot stop) */
  const char* device;
  /* test hook: point number |test_sleep_point| (1-based, of the whole
   * search; 0: the default whole-model build) builds |test_sleep_s|
   * longer, past the deadline's reach (with |device| only) */
  double test_sleep_s;
  int32_t test_sleep_point;
} kiln_tune_options_t;

/* Seconds on the monotonic clock the budget is kept by. */
double kiln_tune_clock_s(void);

void kiln_tune_options_default(kiln_tune_options_t* o);

typedef struct kiln_tune_summary_s {
  int32_t kernels, instances, improved, rounds, trials, rejected, reverted;
  double default_ms, tuned_ms; /* whole model, median wall time per run */
  double elapsed_s;   /* since options.start_s: what the budget is held to */
  /* where the budget went (seconds of wall time): before the search
   * (options.start_s to the default build: the model, graph passes,
   * planning), the default whole-model build (program, session, warm-up
   * run) and its timed runs, the kernels' set-ups (kernels_set_up of
   * them), the points, and the closing whole-model build and its runs
   * paired with the default's (0 when no point changed) */
  double prepare_s, default_build_s, default_runs_s, setup_s, points_s, closing_build_s, closing_runs_s;
  int32_t kernels_set_up;
  /* CPU with one thread: the whole model's process CPU time per run,
   * medians of the closing pairs (of the default build's runs when no
   * point changed); 0 elsewhere. A point is kept only where the tuned
   * model is not slower by it. */
  double default_cpu_ms, tuned_cpu_ms;
  bool cpu_reverted; /* the tuned model was slower by CPU time: nothing kept */
  double closing_planned_s; /* what the search left for the closing build and its runs */
  /* Elsewhere (a GPU, or the CPU with several threads): the tuned model was
   * slower by wall time per run, medians of the closing pairs run
   * alternately with the default build's: nothing kept. */
  bool model_reverted;
  /* points whose build or runs the deadline stopped (their results
   * discarded; the search ends there) */
  int32_t abandoned;
  /* the default build's program (lowering, printing, SPIR-V: part of
   * default_build_s) and, where that was most of the build, the same
   * program built again (what the closing build is planned with: a
   * target's memo of compiled shaders makes it cheap) */
  double default_program_s, program_again_s;
  /* GPU targets: the default build made again with its code reused
   * (kiln_session_options_t.reuse_code: program, session and a warm-up run,
   * no driver compile), what the closing build costs before its kept
   * points' kernels; 0 where not measured (the CPU) */
  double build_again_s;
  /* with options.device: the closing build's driver part was not done by
   * the budget + 5%; it was abandoned and nothing kept */
  bool closing_abandoned;
  /* likewise the default build: nothing tuned, no record */
  bool default_abandoned;
  /* the closing build's units of code (OpenCL: its program's kernels, each
   * printed once) and how many it took from earlier builds' code (the
   * default build's, the kept points' alone) instead of compiling them;
   * 0, 0 where the device does not count them or nothing was built */
  int32_t closing_units, closing_units_reused;
  /* random draws skipped as too dear to measure (compiler/tune_dear.h) */
  int32_t skipped;
} kiln_tune_summary_t;

/* Tunes the template instances of prepared, optimised graph |g| for
 * |target| on |dev| and adds a record per distinct kernel to |cache|.
 * Errors: a build or run failure of the default program (naming it);
 * INVALID_ARGUMENT when the target has no search space or an input has a
 * dynamic shape. A candidate that fails to build or run is rejected and
 * noted, never fatal. */
KILN_MUST_USE kiln_status_t kiln_tune_model(kiln_graph_t* g, const kiln_target_t* target, kiln_device_t* dev,
                                            const kiln_tune_options_t* o, kiln_tune_cache_t* cache,
                                            kiln_tune_summary_t* out);

#ifdef __cplusplus
}
#endif
#endif
