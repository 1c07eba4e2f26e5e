/* The compile-and-run path shared by `kiln run`, `kiln compile` and
 * `kiln devices`: a prepared graph -> plan -> fused plan -> program ->
 * module, and a module -> device -> session. */
#ifndef KILN_TOOLS_RUNNER_H_
#define KILN_TOOLS_RUNNER_H_

#include <stdio.h>

#include "ir/graph.h"
#include "kiln/runtime.h"
#include "lowering/precision.h"
#include "runtime/program.h"
#include "targets/registry.h"

/* --precision and its companions (kiln compile / kiln run). */
typedef struct kiln_cli_precision_s {
  kiln_precision_mode_t mode;   /* default fp32 */
  const char* policy_path;      /* --precision-policy FILE */
  bool fp16_accumulate;         /* --fp16-accumulate */
  bool fp16_workspaces;         /* --fp16-workspaces: CPU GEMM workspaces in f16 too */
  bool weights_only;            /* --fp16-weights-only: activations stay f32 */
  const char* calibrate_dir;    /* --calibrate DIR (auto); NULL: seeded random inputs */
  int calibrate_count;          /* --calibrate-count N (default 4) */
  uint64_t seed;                /* random calibration inputs */
  double tolerance;             /* --tolerance R: auto's rtol (default 1e-2; atol 1e-3) */
  const char* write_policy;     /* --write-policy FILE */
  const char* report_path;      /* --precision-report FILE */
  bool strict;                  /* fp16 on a device without fp16 arithmetic is an error */
  bool fp16_arith;              /* the device computes in half (set by the caller) */
  const char* device;           /* its name, for the warning */
} kiln_cli_precision_t;

void kiln_cli_precision_default(kiln_cli_precision_t* p);

typedef struct kiln_cli_compile_s {
  const kiln_target_t* target; /* from the registry (kiln_target_find) */
  int opt;              /* -O level: >= 1 fuses kernels */
  int threads;
  const char* dump_dir; /* plan and generated source */
  const char* model_name;
  const kiln_cli_precision_t* precision; /* NULL: fp32 */
  int64_t loop_limit;   /* the device's (kiln_device_info_t.loop_limit); 0 = none */
} kiln_cli_compile_t;

/* Lowers, fuses, applies the precision (calibrating first for auto) and
 * builds the program of a prepared graph, printing what each step did
 * ("fused ...", "precision: ...", "compiled N kernels ..."). fp16 or auto
 * on a device without fp16 arithmetic warns on stderr (fp16 storage with
 * fp32 arithmetic) or, with precision->strict, fails. */
kiln_status_t kiln_cli_compile(kiln_graph_t* g, const kiln_cli_compile_t* c, kiln_program_t** out);

/* Opens a device by name ("cpu", "opencl:1", ...); without its driver it
 * falls back to the CPU with the reason on stderr, unless |strict|. */
kiln_status_t kiln_cli_open_device(const char* name, bool strict, int threads, kiln_device_t** out);

/* Creates a session of |m| on |dev|; prints the memory plan and the build
 * time of the device code. */
kiln_status_t kiln_cli_session(kiln_module_t* m, kiln_device_t* dev, const kiln_session_options_t* so,
                               kiln_session_t** out_session);

/* `kiln devices`. */
int kiln_cmd_devices(int argc, char** argv);

#endif
