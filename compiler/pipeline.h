/* The compile pipeline: a prepared graph -> graph passes -> plan -> fused
 * plan -> precision -> program, reporting what each step did as data
 * (kiln_compile_report_entry_t, include/kiln/compiler.h) instead of
 * printing it. The public compiler API (api/compiler_api.c) and the kiln
 * command line (tools/runner.c, which prints the lines) both run it.
 *
 * A log owns its entries' text; free it with kiln_compile_log_free.
 * Thread-compatible.
 */
#ifndef KILN_COMPILER_PIPELINE_H_
#define KILN_COMPILER_PIPELINE_H_

#include <stdbool.h>
#include <stdint.h>

#include "ir/graph.h"
#include "kiln/compiler.h"
#include "lowering/precision.h"
#include "runtime/device.h"
#include "runtime/program.h"
#include "targets/registry.h"
#include "kiln/runtime.h"

typedef struct kiln_compile_log_s {
  kiln_compile_report_entry_t* entries; /* sections and keys are literals; text is owned */
  int32_t n, cap;
} kiln_compile_log_t;

void kiln_compile_log_free(kiln_compile_log_t* log);
/* A figure: |section| and |key| must be string literals. */
KILN_MUST_USE kiln_status_t kiln_compile_log_value(kiln_compile_log_t* log, const char* section, const char* key,
                                                   double value);
/* A line for people (a trailing newline is dropped). */
KILN_MUST_USE kiln_status_t kiln_compile_log_line(kiln_compile_log_t* log, const char* section, const char* fmt, ...)
    KILN_PRINTF(3, 4);

/* One line per line of |text| (a printer's output). */
KILN_MUST_USE kiln_status_t kiln_compile_log_text(kiln_compile_log_t* log, const char* section, const char* text);

/* The precision options (kiln compile --precision and its companions). */
typedef struct kiln_compile_precision_s {
  kiln_precision_mode_t mode;   /* default fp32 */
  const char* policy_path;      /* per-node rules file */
  bool fp16_accumulate;
  bool fp16_workspaces;         /* CPU GEMM workspaces in f16 too */
  bool weights_only;            /* activations stay f32 */
  const char* calibrate_dir;    /* auto: NULL for seeded random inputs; int8: required */
  int calibrate_count;          /* default 4 */
  uint64_t seed;                /* random calibration inputs */
  double tolerance;             /* auto's rtol (default 1e-2; atol 1e-3) */
  const char* write_policy;     /* write the chosen policy here */
  /* auto: the layers kiln_quantize_for_precision made int8, as `node:NAME
   * int8` rules the written policy ends with (caller-owned; may be NULL) */
  kiln_precision_policy_t* int8_rules;
  const char* report_path;      /* write the precision report here */
  bool strict;                  /* fp16 on a device without fp16 arithmetic is an error */
  bool fp16_arith;              /* the device computes in half */
  const char* device;           /* its name, for the warning */
} kiln_compile_precision_t;

void kiln_compile_precision_default(kiln_compile_precision_t* p);

typedef struct kiln_compile_config_s {
  const kiln_target_t* target; /* from the registry (kiln_target_find) */
  int opt;                     /* -O level: >= 1 fuses kernels */
  int threads;
  const char* dump_dir;        /* plan and generated source; NULL: none */
  const char* model_name;
  const kiln_compile_precision_t* precision; /* NULL: fp32 */
  /* Ahead-of-time CPU machine code for these ISA levels
   * (kiln_program_build_options_t.cpu_targets); NULL: none. */
  const char* cpu_targets;
  /* A tuning cache `kiln tune` wrote (NULL: the default tiles) and the
   * device whose records apply (NULL: the target's device, opened without
   * fallback to ask): compiler/tune.h, kiln_tune_choose_file. */
  const char* tuning_path;
  kiln_device_t* tuning_device;
  /* Loop iterations one invocation of the target device may run in all
   * (kiln_device_info_t.loop_limit; 0: no limit): lowering splits kernels
   * over more invocations to stay under it. */
  int64_t loop_limit;
  /* A dynamic outer dim (kiln compile --dim NAME=LO..HI): the graph was
   * prepared with it at 1 and the plan becomes per-sample
   * (lowering/plan_dyn.h). NULL: static shapes. */
  const char* dyn_dim;
  int64_t dyn_lo, dyn_hi;
  /* tuning_path is the cache folder's default file (`kiln compile|run`
   * without --tuning-cache): the kernels it has no record for are counted,
   * not noted one by one (a cache holds the models someone tuned) */
  bool tuning_default;
  /* Shader features the target device lacks (KILN_GPU_LACKS_*,
   * lowering/template.h; 0: it has all): the Vulkan GEMM/conv shaders then
   * avoid 64-bit words and the subgroup mode. */
  uint32_t gpu_lacks;
  /* CPU: where convolutions with constant weights run block-sparse
   * (kiln_sparse_mode_t, lowering/sparse_block.h; 0 = AUTO, the measured
   * rule). The compile report has a "sparse" line per layer it looked at. */
  int32_t sparse;
  /* Memory layouts on the CPU target (lowering/layout.h): NCHWc where the
   * layout pass chooses it, at -O1 (-O0 keeps NCHW, and so do auto
   * precision and dynamic dims; `kiln tune` plans in the same layout, so
   * a tuning cache's records fit it). DEFAULT: the environment's
   * KILN_LAYOUT (nchw|auto), else auto. */
  int layout; /* kiln_layout_mode_t */
} kiln_compile_config_t;

typedef enum kiln_layout_mode_e {
  KILN_LAYOUT_MODE_DEFAULT = 0,
  KILN_LAYOUT_MODE_NCHW = 1,
  KILN_LAYOUT_MODE_AUTO = 2,
} kiln_layout_mode_t;

/* "nchw" / "auto" -> the mode; -1 for anything else. */
int kiln_compile_layout_parse(const char* s);
/* The block (floats per channel block; 0: NCHW) a compile with |c| uses. */
int32_t kiln_compile_layout_block(const kiln_compile_config_t* c);

/* The KILN_GPU_LACKS_* flags (kiln_compile_config_t.gpu_lacks) of a
 * device; NULL (no device to ask): all of them, the conservative shaders.
 * With them the device class KILN_GPU_CLASS_GPU (a device that is not
 * cpu_backed; none for NULL), which the variable of the device's target
 * forces (kiln_target_t.rules_env: KILN_OPENCL_RULES, KILN_VULKAN_RULES
 * =gpu|cpu; for NULL, whichever target's is set). */
uint32_t kiln_compile_gpu_lacks(const kiln_device_info_t* info);

/* The limits a template instance's tiles fit on |info|'s device
 * (kiln_template_limits_t: work-group size, __local memory, loop limit,
 * kiln_compile_gpu_lacks, warp width, compute units), for the template
 * set's rules (kiln_template_set_t.limits) and a tuner's checks. */
void kiln_compile_device_limits(const kiln_device_info_t* info, kiln_template_limits_t* out);

/* Runs the graph passes of level |opt| on prepared |g| in place, logging
 * the passes ("passes" section). */
KILN_MUST_USE kiln_status_t kiln_compile_graph_passes(kiln_graph_t* g, int opt, const kiln_target_t* target,
                                                      kiln_compile_log_t* log);
/* The same, also leaving out the pass named |extra_skip| (NULL: none). */
KILN_MUST_USE kiln_status_t kiln_compile_graph_passes_except(kiln_graph_t* g, int opt, const kiln_target_t* target,
                                                             const char* extra_skip, kiln_compile_log_t* log);

/* Lowers, fuses, applies the precision (calibrating first for auto) and
 * builds the program of a prepared (and optimized) graph, logging each
 * step. fp16 or auto on a device without fp16 arithmetic logs a warning
 * (fp16 storage with fp32 arithmetic) or, with precision->strict, fails.
 * For a GPU device with a binding limit (c->tuning_device's
 * max_binding_bytes), the GEMMs of |g| whose weights exceed it are split
 * in place first (kiln_graph_split_wide_gemms), one "plan" line each. */
KILN_MUST_USE kiln_status_t kiln_compile_program(kiln_graph_t* g, const kiln_compile_config_t* c,
                                                 kiln_compile_log_t* log, kiln_program_t** out);

#endif
