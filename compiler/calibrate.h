/* kiln precision calibration: `--precision auto`.
 *
 * Given a fused plan (its graph must have static shapes), calibration
 *  1. runs the fp32 graph on calibration inputs (a folder of .npy files or
 *     seeded random ones) and records every float tensor's range (min,
 *     max, largest magnitude, smallest non-zero magnitude);
 *  2. forces fp32 for every fused group (kernels sharing graph nodes) that
 *     the base policy puts in fp32, that stores a value beyond the f16
 *     range (|x| > 65504) in memory (a materialized intermediate; model
 *     outputs stay f32 and values inside a fused kernel are f32), or a tensor whose
 *     magnitudes all lie below the
 *     smallest normal half (6.1e-5, where f16 keeps few bits or flushes to
 *     zero), or that reads such a weight;
 *  3. tries the remaining groups in fp16, largest benefit (bytes of f32
 *     weights and intermediates turned f16) first: all at once, and when
 *     that misses the tolerance, greedily one by one on top of the groups
 *     already kept; a group stays fp16 only when every model output of every
 *     calibration input stays within |got - want| <= atol + rtol * |want|
 *     of the fp32 result, with a 10% margin for the compiled code's
 *     different summation order.
 *
 * The fp16 model is emulated in the reference executor instead of compiled:
 * the pass keeps arithmetic in f32 and only rounds what goes through memory,
 * so rounding each fp16 node's materialized outputs (tensors that are plan
 * buffers some kernel writes, not fused away, not model outputs) and its
 * weights to f16 reproduces the compiled model's values up to summation
 * order, at the cost of one reference run per trial, with no code
 * generation or C compiler invocation per group.
 *
 * The resulting policy lists the base rules, then one `node:NAME fp16|fp32`
 * rule per node of every group (later rules win), for
 * kiln_plan_set_precision in mode FP16.
 *
 * Thread-compatible.
 */
#ifndef KILN_COMPILER_CALIBRATE_H_
#define KILN_COMPILER_CALIBRATE_H_

#include <stdio.h>

#include "lowering/precision.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_calibrate_options_s {
  /* Folder of calibration inputs: NAME.npy per graph input (one sample), or
   * subfolders each holding NAME.npy per input (one sample each, in name
   * order). NULL: |count| seeded random samples. */
  const char* input_dir;
  int32_t count;        /* random samples (default 4 when <= 0) */
  uint64_t seed;        /* random samples: floats ~ N(0,1), ints in [0,4) */
  double rtol, atol;    /* defaults 1e-2, 1e-3 when negative */
  const kiln_precision_policy_t* base; /* user rules applied first (may be NULL) */
  FILE* log;            /* one line per trial (may be NULL) */
} kiln_calibrate_options_t;

void kiln_calibrate_options_default(kiln_calibrate_options_t* o);

typedef struct kiln_calibrate_group_s {
  int32_t n_nodes;
  int32_t* nodes;       /* graph nodes (owned) */
  int32_t n_kernels;
  bool fp16;
  const char* reason;   /* "fp16", "policy", "overflow", "underflow", "weight range", "error" */
  double min, max;      /* range of the group's outputs over all samples */
  double max_abs;
  double min_nonzero;   /* smallest non-zero magnitude (INFINITY if none) */
  int64_t bytes;        /* f32 bytes that fp16 would halve */
  double err_ratio;     /* worst |got-want| / (atol + rtol|want|) when tried (-1: not tried) */
  double max_abs_err, max_rel_err;
} kiln_calibrate_group_t;

typedef struct kiln_calibrate_report_s {
  int32_t n_groups;
  kiln_calibrate_group_t* groups;
  int32_t samples, trials;
  double rtol, atol;
  /* The chosen policy, emulated: */
  double err_ratio, max_abs_err, max_rel_err;
} kiln_calibrate_report_t;

/* The calibration samples: |*out_n| samples of g->n_inputs arrays each,
 * sample-major in one newly allocated array (free with
 * kiln_calibrate_inputs_free). Errors name the folder or file. */
kiln_status_t kiln_calibrate_inputs(const kiln_graph_t* g, const kiln_calibrate_options_t* o,
                                    kiln_array_t** out_inputs, int32_t* out_n);
void kiln_calibrate_inputs_free(const kiln_graph_t* g, kiln_array_t* inputs, int32_t n);

/* Chooses per-group precisions for |plan| (fused; not yet rewritten by
 * kiln_plan_set_precision). Appends the rules to |out_policy|; fills
 * |out_report| (may be NULL; free with kiln_calibrate_report_free). */
kiln_status_t kiln_calibrate_precision(const kiln_plan_t* plan, const kiln_calibrate_options_t* o,
                                       kiln_precision_policy_t* out_policy,
                                       kiln_calibrate_report_t* out_report);
/* Text report: a summary line, then per group its precision, reason,
 * range, bytes and error. */
void kiln_calibrate_report_print(const kiln_plan_t* plan, const kiln_calibrate_report_t* r, FILE* out);
void kiln_calibrate_report_free(kiln_calibrate_report_t* r);

#ifdef __cplusplus
}
#endif
#endif /* KILN_COMPILER_CALIBRATE_H_ */
