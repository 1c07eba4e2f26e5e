/* One template instance alone: the tuner's cheap measurement (tune.h).
 *
 * A round of whole-model builds costs what building the model costs (a
 * minute or two of PoCL on a loaded 2-core machine for MobileNetV2); a
 * program holding just the instance under test (plus the Conv GEMM kernel
 * merged into it, which leaves the program) builds in about a second. The
 * instance reads its own buffers, filled with seeded data (floats in
 * [-1, 1): the same data for every point of the kernel), and writes its
 * output, which the default point's program computed first: a candidate
 * whose output differs (rtol 1e-3, atol 1e-4; the tiles change the order
 * of the f32 sums) is rejected. Each point is timed beside the default
 * point's program, run for run (default, candidate, default, ...), and
 * ranked by the ratio of the two medians, which a busy machine moves far
 * less than either time.
 *
 * Not thread-safe; the plan must hold the lowering's packed weights
 * (kiln_template_weights_restore) while points are built. */
#ifndef KILN_COMPILER_TUNE_MICRO_H_
#define KILN_COMPILER_TUNE_MICRO_H_

#include <stdio.h>

#include "ir/tir.h"
#include "kiln/runtime.h"
#include "lowering/template.h"
#include "targets/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_TUNE_MICRO_IO 16

struct kiln_tune_cpu_table_s;

typedef struct kiln_tune_micro_s {
  const kiln_plan_t* plan;
  const kiln_target_t* target;
  const kiln_template_set_t* set;
  kiln_device_t* dev;
  int32_t threads;
  int32_t k; /* the plan kernel of the instance */
  int32_t n_in, n_out;
  int32_t in[KILN_TUNE_MICRO_IO], out[KILN_TUNE_MICRO_IO]; /* plan buffers (roots) */
  kiln_array_t inputs[KILN_TUNE_MICRO_IO];
  kiln_array_t ref[KILN_TUNE_MICRO_IO]; /* the default point's outputs */
  kiln_module_t* def_mod;
  kiln_session_t* def_ses;
  tir_ctx_t tir; /* the weight buffers laid out for a point */
  bool tir_ready;
  const char* what; /* the kernel, for messages */
  /* the program of the kernel at a point, its inputs and outputs m->in and
   * m->out in that order */
  kiln_status_t (*build)(struct kiln_tune_micro_s* m, const kiln_template_tiles_t* tiles, kiln_program_t** out);
  /* CPU (tune_micro_cpu.c): a point is a plan of the graph with the GEMM's
   * knobs, of which the node's kernels make the program */
  const kiln_graph_t* graph;
  kiln_plan_options_t po;
  int32_t opt, gemm, node;
  struct kiln_tune_cpu_table_s* table;
  char* in_name[KILN_TUNE_MICRO_IO];
  char* out_name[KILN_TUNE_MICRO_IO];
  /* CPU with one thread: a run's time is the process's CPU time around
   * it, not its dispatches' wall stamps (on a machine shared with other
   * jobs the wall time of a 1 ms kernel moves 2-10x with the load, the
   * CPU time it takes far less) */
  bool cpu_time;
  /* kiln_tune_micro_measure_by: a point's session is built (the driver's
   * compile: PoCL's clBuildProgram, lavapipe's pipelines, the CPU's C
   * compiler) and warmed up on a worker thread the caller stops waiting
   * for at its deadline (async; m->dev then must be a device no other
   * thread uses while the worker runs). An abandoned worker is joined by
   * kiln_tune_micro_join / kiln_tune_micro_free, its result discarded. */
  bool async;
  struct kiln_tune_build_job_s* pending;
  /* test hook: the next point's build sleeps this long (on the worker,
   * where the deadline cannot stop it), then 0 */
  double test_sleep_s;
  /* what the last point's (or the set-up's) build cost: the program
   * (lowering, printing, SPIR-V) and the driver's part (its session and
   * warm-up run), seconds of wall time */
  double program_s, driver_s;
  /* the set-up's and the points' sessions are made with reuse_code
   * (kiln_tune_code_shared: OpenCL, Vulkan), so the whole-model builds on the
   * tuner's first device take their code: the set-up the default build's,
   * the closing build a kept point's */
  bool reuse_code;
  /* the code units (Vulkan's pipelines, OpenCL's program units) the last
   * build (set-up or point) created rather than took from earlier builds
   * (kiln_device_api_t.executable_units); -1 where the device does not
   * count them or the build was abandoned */
  int32_t units_new;
} kiln_tune_micro_t;

/* Sets |m| up for instance kernel |k| of |plan| (its tiles as they are
 * are the default point): finds its buffers, fills its inputs from
 * |seed|, builds the default point's program and runs it once for the
 * reference outputs. Errors: INVALID_ARGUMENT when the instance has more
 * buffers than KILN_TUNE_MICRO_IO, the build's or run's errors (naming the
 * kernel), OUT_OF_MEMORY. kiln_tune_micro_free afterwards in every case. */
KILN_MUST_USE kiln_status_t kiln_tune_micro_init(kiln_tune_micro_t* m, const kiln_plan_t* plan, int32_t k,
                                                 const kiln_target_t* target, const kiln_template_set_t* set,
                                                 kiln_device_t* dev, int32_t threads, uint64_t seed);

/* The tolerance a point's outputs are checked with against the default's
 * (|ref|): rtol 1e-3, atol 1e-4 (the points change the order of the f32
 * sums), or, with |f16_sums| (an instance that may sum in f16,
 * kiln_template_t.f16_sums: the compile's --fp16-accumulate, so a point and
 * the default may differ in f16 rounding of sums over K), rtol 2e-2 and
 * atol 2e-2 of |ref|'s largest magnitude. */
void kiln_tune_tolerance(bool f16_sums, const kiln_array_t* ref, double* rtol, double* atol);

/* Whether point |tiles| of tunable instance |t| runs sums in f16, so its
 * outputs take kiln_tune_tolerance's f16 bound: |t|'s f16_sums, or for a
 * Winograd point with its switch entry 0 (last) the implicit-GEMM
 * alternative's, which runs in its place (with --fp16-accumulate under the
 * GPU rules that one sums in f16 and Winograd in f32). False for NULL. */
bool kiln_tune_point_f16_sums(const kiln_template_t* t, const kiln_template_tiles_t* tiles);

/* Builds the instance with |tiles| and times it |repeats| times (after a
 * warm-up run), each run right after one of the default point's:
 * *t and *t_def the medians of the instance's dispatch times, seconds;
 * *match whether every output equals the default's within tolerance (a
 * mismatch is described on |log|, NULL: quiet). A point more than 1.25x
 * slower than the default after 5 pairs stops there (the medians are of
 * the pairs run). Errors: the build's or
 * run's (a point the driver refuses), OUT_OF_MEMORY. */
KILN_MUST_USE kiln_status_t kiln_tune_micro_measure(kiln_tune_micro_t* m, const kiln_template_tiles_t* tiles,
                                                    int32_t repeats, double* t, double* t_def, bool* match,
                                                    FILE* log);

/* kiln_tune_micro_measure that stops at |deadline| (kiln_tune_clock_s's
 * clock): a build not finished by then is abandoned (m->async: its worker
 * goes on and is joined later), pairs stop there; *late is then true and
 * *t, *t_def, *match are not set, unless at least 5 pairs ran (their
 * medians count, *late false). Without m->async the build itself cannot be
 * stopped (the pairs still are). */
KILN_MUST_USE kiln_status_t kiln_tune_micro_measure_by(kiln_tune_micro_t* m, const kiln_template_tiles_t* tiles,
                                                       int32_t repeats, double deadline, double* t, double* t_def,
                                                       bool* match, bool* late, FILE* log);

/* Waits for an abandoned build of |m| (if any) and frees what it made.
 * Returns whether there was one. kiln_tune_micro_free does not wait: it
 * hands the build to the process's list of abandoned builds, each holding
 * its own module, inputs and device reference. */
bool kiln_tune_micro_join(kiln_tune_micro_t* m);

/* A session of |mod| on |dev| (|threads|, profiling, no code cache) made
 * and warmed up with one run on |inputs| (copied; |n_out| outputs) on a
 * worker thread, waited for until |deadline|: then *ses. Takes |mod|'s
 * reference. Past the deadline *late: the build goes on to the process's
 * list of abandoned builds, which also takes |after_ses| and |after_mod|
 * (NULL: none) to destroy once it is done (a session on the same device,
 * which must not be destroyed while another thread builds on it).
 * |test_sleep_s|: the test hook, the build that much longer. */
KILN_MUST_USE kiln_status_t kiln_tune_session_by(kiln_module_t* mod, kiln_device_t* dev, int32_t threads,
                                                 const kiln_array_t* inputs, int32_t n_in, int32_t n_out,
                                                 double deadline, kiln_session_t* after_ses, kiln_module_t* after_mod,
                                                 double test_sleep_s, kiln_session_t** ses, bool* late);

/* |m|'s default session and module (a kernel alone on the same device as
 * |owner|'s abandoned build) go with that build, destroyed once it is done
 * (a device serves one thread at a time). False when |owner| has none or
 * memory is short (then kiln_tune_micro_free destroys them at once). */
bool kiln_tune_micro_defer(kiln_tune_micro_t* owner, kiln_tune_micro_t* m);

/* Waits for every abandoned build in that list and frees them; how many.
 * A process may instead exit without it (kiln tune does, when one is
 * still running: a driver's compile it would wait for). */
int32_t kiln_tune_join_abandoned(void);
/* Waits until every one of those is done or |deadline| (kiln_tune_clock_s's
 * clock) has passed; how many are still running. Thread-safe, as is the
 * join. */
int32_t kiln_tune_abandoned_wait(double deadline);

/* kiln_tune_micro_init for the CPU: the kernels of graph node |node| of
 * |plan| (built from |graph| with |po| and the gemm hook over |table|,
 * fused when |opt| >= 1), the GEMM being table->e[gemm]. */
KILN_MUST_USE kiln_status_t kiln_tune_micro_init_cpu(kiln_tune_micro_t* m, const kiln_plan_t* plan,
                                                     const kiln_graph_t* graph, const kiln_plan_options_t* po,
                                                     int32_t opt, struct kiln_tune_cpu_table_s* table, int32_t gemm,
                                                     int32_t node, const kiln_target_t* target, kiln_device_t* dev,
                                                     int32_t threads, uint64_t seed);

void kiln_tune_micro_free(kiln_tune_micro_t* m);

/* Whether the whole-model builds share their code (reuse_code, the
 * default): $KILN_TUNE_REUSE=off builds each whole, for measuring one
 * against the other. */
bool kiln_tune_reuse_code(void);

/* The options of every session kiln tune makes (a kernel alone or the
 * whole model): profiling (the kernels' dispatch times), |threads|, no
 * code cache (the rounds' code is new and mostly used once), reuse_code
 * as given. */
void kiln_tune_session_options(kiln_session_options_t* so, int32_t threads, bool reuse_code);

/* The program of the whole of |plan| (its tiles as they stand) as kiln
 * tune builds it: fp32, the options' tag "-O1 tune", the model name
 * "tune" (the same text for the same kernels as the kernels alone, so
 * that their code units match). */
KILN_MUST_USE kiln_status_t kiln_tune_whole_program(const kiln_plan_t* plan, const kiln_target_t* target,
                                                    kiln_program_t** out);

/* Whether code that reuse_code builds compile on |dev| serves builds on
 * other devices of the same name in this process (kiln_device_api_t.
 * shared_code; OpenCL, Vulkan) and KILN_TUNE_REUSE is not off: then the kernels
 * alone, on the tuner's second device, are built with reuse_code too. */
bool kiln_tune_code_shared(const kiln_device_t* dev);

/* The median of |v| (sorted in place; 0 when n is 0). */
double kiln_tune_median(double* v, int32_t n);

/* The fewest code units a device that shares code (kiln_tune_code_shared)
 * keeps for reuse: Vulkan's pipeline memo holds 1,024
 * (runtime/vulkan/vulkan_device_internal.h), OpenCL's 4,096 units; past it a memo
 * starts afresh and the closing build compiles again. */
#define KILN_TUNE_MEMO_UNITS 1024

/* What a kept point adds to the closing whole-model build, seconds (the
 * driver's compile of its kernel). |shared|: its build alone was made with
 * reuse_code (kiln_tune_micro_t.reuse_code), so the closing build takes its
 * code; then nothing while |units_made| (the code units this tune's
 * builds created, the default build's included; < 0: not known) is below
 * KILN_TUNE_MEMO_UNITS, else its build alone's driver part |best_driver_s|.
 * Not shared: with the default build's code reused (|again_s| >= 0, what
 * that build cost) the kernel is compiled afresh, the dearer of
 * |best_driver_s| and its set-up |setup_s|; else |best_driver_s| beyond its
 * set-up's driver part |setup_driver_s|. Never below 0. */
double kiln_tune_kept_cost_s(bool shared, int32_t units_made, double again_s, double best_driver_s, double setup_s,
                             double setup_driver_s);

/* Whether the closing whole-model measurement keeps a point: its median
 * time |tuned| at least 3% below its default's |def| (medians of the same
 * |pairs| paired runs), and its run faster than the default's beside it in
 * at least 3 of 4 of those pairs (|wins|). The second condition is a sign
 * test (8 of 10 pairs: p 0.055 for a point no faster): the medians of a
 * noisy device (lavapipe sharing 2 cores) move by more than 3% between
 * identical builds, and a point kept on the median alone could be slower
 * in another process (compiler/tune_search.c). */
bool kiln_tune_paired_keep(double tuned, double def, int32_t wins, int32_t pairs);

/* Shared by both: seeded inputs (m->in set), the default point's session
 * and reference outputs. */
KILN_MUST_USE kiln_status_t kiln_tune_micro_start(kiln_tune_micro_t* m, const kiln_template_tiles_t* dflt,
                                                  const char* what, uint64_t seed);
/* A program of kernels |ks| of |p| whose buffers are |bufs| (a copy of
 * p->buffers the call marks: |in| inputs, |out| outputs). */
KILN_MUST_USE kiln_status_t kiln_tune_view_build(const kiln_plan_t* p, kiln_plan_kernel_t* ks, int32_t n,
                                                 kiln_plan_buffer_t* bufs, const int32_t* in, int32_t n_in,
                                                 const int32_t* out, int32_t n_out, const kiln_target_t* target,
                                                 kiln_program_t** prog);

#ifdef __cplusplus
}
#endif
#endif
