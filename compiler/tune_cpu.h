/* CPU schedule knobs for the tuner (docs/TUNING.md, "CPU").
 *
 * The CPU target prints every kernel from its tensor IR; what a person
 * picked by hand there is the GEMM generator's register tile mr x nr, its
 * K block kc and which loop the threads split (lowering/lower_nn_gemm.c,
 * shared by Conv, MatMul, Gemm and the RNNs). A plan built with a gemm
 * hook (kiln_plan_build_hooked) lets these choose them per GEMM:
 *
 *   space "cpu.gemm.1", tiles record {mr, nr, kc, split}: mr 1-14 rows,
 *   nr half a vector to 4 vectors of columns, kc 64-512 k steps (only
 *   where the GEMM blocks K), split 1 heuristic, 2 one thread, 3 batches,
 *   4 M tiles, 5 N tiles; the heuristic's point always a candidate.
 *   Valid: the mr x nr/L accumulators, nr/L loads and a broadcast fit the
 *   vector registers; a forced split has two or more pieces to split.
 *
 * A GEMM's fingerprint hashes what reaches its kernel besides the knobs:
 * the node's op type, batch, M, N, K, taps, K blocking, operand kinds and
 * the machine's vector width, registers and thread count. Thread-compatible. */
#ifndef KILN_COMPILER_TUNE_CPU_H_
#define KILN_COMPILER_TUNE_CPU_H_

#include <stdio.h>

#include "compiler/tune_cache.h"
#include "kiln/runtime.h"
#include "lowering/plan.h"
#include "lowering/template.h"
#include "runtime/program.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_TUNE_CPU_SPACE "cpu.gemm.1"
/* The NCHWc conv's GEMM (lowering/lower_nn_conv_blocked.c; problem block
 * > 0), tiles {mr, nr, kc, split, nblock_kb}: mr 1-14 rows, nr one or two
 * channel blocks, kc input channels per K block (the input's block times
 * a power of two dividing C, or C), split as above, nblock_kb 32-2048 KB
 * of one K block's weights per N block; the lowering's point always a
 * candidate. Valid: the registers as above, nr two blocks only where they
 * divide the output channels, kc dividing C. */
#define KILN_TUNE_CPU_SPACE_NCHWC "cpu.conv_nchwc.1"
/* The NCHWc conv that can run Winograd (problem wino_tiles != 0: 3x3,
 * stride 1, 16+ channels; lowering/lower_nn_conv_wino.c), tiles {mr, nr,
 * kc, split, nblock_kb, wino}: the five above, and wino 1 (the direct
 * conv), 2 or 4 (F(2x2, 3x3), F(4x4, 3x3)); the GEMM knobs that differ
 * from the direct conv's default apply to the Winograd GEMMs too. */
#define KILN_TUNE_CPU_SPACE_WINO "cpu.conv_wino.1"
/* The NCHWc depthwise conv's direct window kernel (problem dw[0] > 0),
 * tiles {cols, rgroups, split}: cols 1-16 output vectors of a row per
 * register tile of the interior, rgroups 1-8 row groups per (image,
 * channel block) plane (more parallel pieces), split 1 the threads over
 * planes and row groups, 2 one thread; the lowering's point always a
 * candidate. Valid: the tile's accumulators, a weight and an input vector
 * fit the registers; cols <= the output columns, rgroups <= the rows. */
#define KILN_TUNE_CPU_SPACE_DW "cpu.dw_nchwc.1"

/* The space a problem's records are under (KILN_TUNE_CPU_SPACE, _NCHWC, _WINO or _DW). */
const char* kiln_tune_cpu_space_name(const kiln_gemm_problem_t* p);

struct kiln_tune_use_report_s; /* compiler/tune.h */

uint64_t kiln_tune_cpu_fingerprint(const kiln_gemm_problem_t* p);
/* The knobs of |p| around its default point |d|. */
void kiln_tune_cpu_space(const kiln_gemm_problem_t* p, const kiln_gemm_knobs_t* d, kiln_template_space_t* out);
/* NULL when point |x| is valid for |p|, else why not (static text). */
const char* kiln_tune_cpu_check(const kiln_gemm_problem_t* p, const kiln_template_tiles_t* x);
void kiln_tune_cpu_knobs_of(const kiln_template_tiles_t* x, kiln_gemm_knobs_t* out);
void kiln_tune_cpu_tiles_of(const kiln_gemm_knobs_t* k, kiln_template_tiles_t* out);

/* The distinct GEMMs of a plan, and the points a plan is built with. */
typedef struct kiln_tune_cpu_gemm_s {
  uint64_t fingerprint;
  kiln_gemm_problem_t problem;
  kiln_gemm_knobs_t dflt;
  int32_t n_nodes, *nodes; /* graph nodes lowered with it */
  bool has_point;          /* apply |point| instead of the default */
  kiln_template_tiles_t point;
} kiln_tune_cpu_gemm_t;

typedef struct kiln_tune_cpu_table_s {
  int32_t n, cap;
  kiln_tune_cpu_gemm_t* e;
  bool oom; /* an entry could not be added (the hook cannot fail) */
} kiln_tune_cpu_table_t;

/* The gemm hook over a table (user = the table): records every GEMM it
 * has not seen (first node, problem, default knobs, nodes) and applies the
 * point of those with one. */
void kiln_tune_cpu_hook(void* user, int32_t node, const kiln_gemm_problem_t* p, kiln_gemm_knobs_t* k);
void kiln_tune_cpu_table_free(kiln_tune_cpu_table_t* t);
kiln_tune_cpu_gemm_t* kiln_tune_cpu_table_find(kiln_tune_cpu_table_t* t, uint64_t fingerprint);

/* `kiln compile|run` on the CPU with a tuning cache: builds the plan of
 * |g| twice when the cache has records for its GEMMs on this machine
 * (once to find them, once with their points; a record must pass
 * kiln_tune_cpu_check), else once with the defaults, and says on |notes|
 * what it used (lines as kiln_tune_choose_file's; NULL: quiet; |quiet|:
 * |dev| is the CPU device whose records apply (NULL: the cpu device is
 * opened to ask its name);
 * no note per untuned GEMM; *report gets the counts). *table keeps the GEMMs for
 * kiln_tune_cpu_mark_program. Never fatal for the cache: errors are the
 * plan build's. */
KILN_MUST_USE kiln_status_t kiln_tune_cpu_plan_build(const kiln_graph_t* g, const kiln_plan_options_t* po,
                                                     const char* path, kiln_device_t* dev, FILE* notes,
                                                     bool quiet, kiln_tune_cpu_table_t* table,
                                                     struct kiln_tune_use_report_s* report, kiln_plan_t** out);

/* Records the point of every tuned GEMM of |table| on the program
 * kernels of its nodes (kiln_program_kernel_t.tuned). OUT_OF_MEMORY. */
KILN_MUST_USE kiln_status_t kiln_tune_cpu_mark_program(const kiln_graph_t* g, const kiln_tune_cpu_table_t* table,
                                                       kiln_program_t* prog);

#ifdef __cplusplus
}
#endif
#endif
