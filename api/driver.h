/* The whole compile of an ONNX model, as `kiln compile`, `kiln run` and
 * the compiler API (kiln/compiler.h) all run it: parse, bind dims,
 * prepare, int8 quantization (--precision int8|auto), graph passes, the
 * fp16 arithmetic of the target device, then the pipeline of
 * compiler/pipeline.h, everything it did going into the log. The API
 * wraps it with string options; the CLI with its flags, a hook to write
 * the graph around the passes (--dump-graph), module signing and the
 * session it makes without -o. `kiln run` takes the two halves apart
 * (kiln_driver_graph, then kiln_driver_build) because it keeps the graph
 * for the reference interpreter (-t ref, --check-ref). */
#ifndef KILN_API_DRIVER_H_
#define KILN_API_DRIVER_H_

#include "compiler/pipeline.h"

typedef struct kiln_driver_request_s {
  const char* model_path;
  const char* const* dims; /* SYMBOL=SIZE each; symbols left become 1 */
  int32_t n_dims;
  const kiln_target_t* target;
  const char* device;      /* whose fp16 arithmetic counts; NULL: the target's name */
  int opt, threads;
  int fp16_arith;          /* -1: ask the device (opened without fallback) */
  kiln_compile_precision_t precision; /* fp16_arith and device are filled in */
  const char* dump_dir;
  const char* model_name;  /* NULL: model_path */
  /* Optional: called with the prepared graph before the passes and again
   * after them (|after|); an error stops the compile. */
  kiln_status_t (*graph_hook)(void* user, const kiln_graph_t* g, bool after);
  void* hook_user;
  /* CPU machine code for these ISA levels (`--cpu-target`, the
   * "cpu-target" option); NULL or "": C source only. */
  const char* cpu_targets;
  /* `--tuning-cache FILE` (NULL: the default tiles): compiler/tune.h */
  const char* tuning_path;
  /* tuning_path is the cache folder's tuning.tsv, read without being asked
   * for: no note per kernel it has no record for */
  bool tuning_default;
  /* Loop iterations one shader invocation may run in all (0: none; -1:
   * ask the target's device when the target is a GPU one, `--loop-limit`). */
  int64_t loop_limit;
  /* CPU block-sparse convolutions (kiln_compile_config_t.sparse; 0 = AUTO) */
  int32_t sparse;
  /* The device the program will run on, already open (`kiln run`, which
   * opens it first so a GPU that falls back to the CPU gets CPU code):
   * its fp16 arithmetic (fp16_arith -1), loop limit (loop_limit -1),
   * shader features and tuning records apply, and |device| is not opened
   * again. NULL: asked by name as above. Borrowed. */
  kiln_device_t* run_device;
  /* `--layout nchw|auto` (kiln_layout_mode_t; 0: the default) */
  int layout;
} kiln_driver_request_t;

/* The first half of a compile: the graph after its passes, and what the
 * second half needs of the first. Owned by the caller's variable (not
 * movable: |prec| points into it); free with kiln_driver_graph_free. */
typedef struct kiln_driver_graph_s {
  kiln_graph_t* g;               /* prepared, quantized, optimised */
  kiln_compile_precision_t prec; /* the request's, with the int8 layers below */
  kiln_precision_policy_t int8_rules;
  char dyn[256];                 /* the dynamic dim ("" none) and its range */
  int64_t dyn_lo, dyn_hi;
  /* the GPU device the int8 fold policy opened to ask (NULL: none); the
   * build half asks it too instead of opening another */
  kiln_device_t* dev;
} kiln_driver_graph_t;

/* Parse (unless |parsed|, consumed either way), dims, prepare, quantize,
 * passes (r->target's; NULL: every pass, for the reference interpreter).
 * *out is set up even on failure (free it either way). */
KILN_MUST_USE kiln_status_t kiln_driver_graph(const kiln_driver_request_t* r, kiln_graph_t* parsed,
                                              kiln_compile_log_t* log, kiln_driver_graph_t* out);
/* The second half: the target device's answers, then kiln_compile_program
 * on dg->g (which stays dg's). */
KILN_MUST_USE kiln_status_t kiln_driver_build(const kiln_driver_request_t* r, kiln_driver_graph_t* dg,
                                              kiln_compile_log_t* log, kiln_program_t** out);
void kiln_driver_graph_free(kiln_driver_graph_t* dg);

/* Whether a GPU compile folds a QDQ graph's Q/DQ pairs into int8 ops:
 * *out_skip is "fold-qdq" (keep them around the float templates) on a
 * device that runs on the host CPU (|d|->info.cpu_backed), NULL otherwise
 * (no device |d| to ask: a real GPU is assumed); KILN_GPU_INT8_FOLD=on|off
 * decides instead. Logs a note when it leaves the pass out. kiln tune
 * asks it as the compile does, so it tunes the graph the compile builds. */
KILN_MUST_USE kiln_status_t kiln_driver_int8_fold_policy(const kiln_target_t* target, int opt,
                                                         const kiln_graph_t* g, const kiln_device_t* d,
                                                         kiln_compile_log_t* log, const char** out_skip);
bool kiln_driver_graph_has_qdq(const kiln_graph_t* g);

/* Compiles |r|. |parsed| (may be NULL: parse model_path) is a parsed,
 * unprepared graph of the model, consumed either way. Log sections beyond
 * the pipeline's: "model" (the symbols bound to 1) and "note" (a device
 * that could not be asked for its fp16 arithmetic). */
KILN_MUST_USE kiln_status_t kiln_driver_compile(const kiln_driver_request_t* r, kiln_graph_t* parsed,
                                                kiln_compile_log_t* log, kiln_program_t** out);

/* kiln_driver_compile, except that a model that must run in stages
 * (kiln_graph_needs_staging: data-dependent shapes, control flow) is not
 * built: *out stays NULL and its prepared graph is left in |*staged| (set
 * up in place, as by kiln_driver_graph; the caller frees it either way),
 * for a staged executor (compiler/staged.h). Shape buckets compile as
 * kiln_driver_compile does. */
KILN_MUST_USE kiln_status_t kiln_driver_compile_or_stage(const kiln_driver_request_t* r, kiln_graph_t* parsed,
                                                         kiln_compile_log_t* log, kiln_program_t** out,
                                                         kiln_driver_graph_t* staged);

/* The staged module of a model kiln_graph_needs_staging says must run in
 * stages (api/driver_staged.c; runtime/program_staged.h): |dg| as
 * kiln_driver_graph left it. UNSUPPORTED naming the node for what this
 * version does not store: a stage reading a data-dependent value, a host
 * node outside the runtime's table, an axis without a known bound. */
KILN_MUST_USE kiln_status_t kiln_driver_build_staged(const kiln_driver_request_t* r, kiln_driver_graph_t* dg,
                                                     kiln_compile_log_t* log, kiln_program_t** out);

/* A range on a dim inside the kernels' shapes (--dim seq=8..256 where seq
 * is not dim 0 of the inputs; api/driver_seq.c): *out_taken false when the
 * request has none (the caller compiles as before), else the compile's
 * result in |out| or the error. */
KILN_MUST_USE kiln_status_t kiln_driver_compile_seq_range(const kiln_driver_request_t* r, kiln_compile_log_t* log,
                                                          bool* out_taken, kiln_program_t** out);

#endif
