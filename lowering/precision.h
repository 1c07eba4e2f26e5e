/* kiln mixed precision: fp16 storage (and arithmetic where the device has
 * it) on a fused plan, guided by a per-op / per-node policy.
 *
 * Run kiln_plan_set_precision on a plan after kiln_plan_fuse and before
 * kiln_program_build:
 *
 *   kiln_precision_options_t po = {KILN_PRECISION_FP16, dev_info.fp16_arith, false, &policy};
 *   KILN_RETURN_IF_ERROR(kiln_plan_set_precision(plan, &po, &report));
 *
 * What fp16 does
 *   A kernel is "fp16" when the policy puts every graph node it computes
 *   (kiln_plan_kernel_nodes) in fp16. Then
 *   - every f32 INTERMEDIATE/TEMP buffer whose writers are all fp16 kernels
 *     becomes an f16 buffer (the precision of a tensor is its producer's);
 *   - every f32 CONST read only by fp16 kernels becomes f16 (round to
 *     nearest even, into an array the plan owns);
 *   - model inputs and outputs keep their dtype (users feed and get f32);
 *     an alias follows its root, and a root with an INPUT/OUTPUT member
 *     stays as it is;
 *   - a global buffer that one kernel both loads and stores (an accumulator
 *     kept in memory, e.g. `Y[i] = Y[i] + ...`) stays f32 unless
 *     fp16_accumulate.
 *   Kernels are rewritten: a load of a converted buffer becomes
 *   cast<f32>(load) and a store becomes store(cast<f16>(value)), so the
 *   arithmetic stays f32 ("fp16 storage, fp32 arithmetic"; the CPU prints
 *   F16C/_Float16 conversions, OpenCL vload_half/vstore_half_rte, GLSL
 *   float16_t storage). With fp16_arith, fp16 kernels whose nodes are all
 *   element-wise or broadcast (kiln_op_pattern) compute in f16 instead:
 *   every float value of the kernel is retyped to F16. Accumulators
 *   (PRIVATE/LOCAL scoped buffers, reductions, GEMM/conv, Softmax,
 *   LayerNorm, pooling) stay f32 unless fp16_accumulate, which converts
 *   scoped f32 buffers of fp16 kernels to f16 too and (with fp16_arith)
 *   retypes every fp16 kernel. Integer and bool buffers never change, so
 *   exact ops (ArgMax, Gather indices, comparisons' outputs) stay exact.
 *   Every rewritten kernel is re-verified with tir_verify.
 *
 * Policy files (text): one rule per line `NAME fp16|fp32`, `#` starts a
 * comment, blank lines are ignored.
 *   op:Conv fp32       every node whose op type is Conv
 *   node:conv1 fp16    the node named conv1
 *   Softmax fp32       a plain name: the node of that name if the graph has
 *                      one, otherwise every node of that op type
 * Later rules win over earlier ones; nodes no rule names get the mode's
 * default (fp16 in FP16 mode). Errors name the file and line.
 *
 * Thread-compatible: a plan is rewritten by one thread.
 */
#ifndef KILN_LOWERING_PRECISION_H_
#define KILN_LOWERING_PRECISION_H_

#include <stdio.h>

#include "lowering/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_precision_mode_e {
  KILN_PRECISION_FP32 = 0,
  KILN_PRECISION_FP16,
  KILN_PRECISION_AUTO, /* resolved by kiln_calibrate_precision into a policy + FP16 */
  KILN_PRECISION_INT8, /* the graph is quantized before its passes (api/quantize_graph.h);
                          the plan keeps its float tensors in fp32 */
} kiln_precision_mode_t;

/* "fp32", "fp16", "auto", "int8" -> mode; false for anything else. */
bool kiln_precision_parse_mode(const char* s, kiln_precision_mode_t* out);
const char* kiln_precision_mode_name(kiln_precision_mode_t m);

typedef enum kiln_precision_match_e {
  KILN_MATCH_NAME = 0, /* plain: node name, else op type */
  KILN_MATCH_OP,       /* op:NAME */
  KILN_MATCH_NODE,     /* node:NAME */
} kiln_precision_match_t;

typedef struct kiln_precision_rule_s {
  kiln_precision_match_t match;
  char* name; /* owned */
  bool fp16;
  int32_t line; /* 1-based line in the file it came from, 0 if added in code */
  bool int8;    /* "int8": the layer quantized under --precision auto (api/quantize_graph.h);
                   says nothing about fp16 (its float parts follow the other rules) */
} kiln_precision_rule_t;

/* An ordered rule list; zero-initialise, free with _free. */
typedef struct kiln_precision_policy_s {
  kiln_precision_rule_t* rules;
  int32_t n, cap;
} kiln_precision_policy_t;

/* Parses policy text (|len| bytes, need not be NUL-terminated) and appends
 * its rules to |policy|. |file| names the source in errors:
 * "p.txt:3: 'fp61': expected fp16, fp32 or int8". */
kiln_status_t kiln_precision_policy_parse(const char* text, size_t len, const char* file,
                                          kiln_precision_policy_t* policy);
kiln_status_t kiln_precision_policy_read(const char* path, kiln_precision_policy_t* policy);
/* Appends a rule (|name| copied). */
kiln_status_t kiln_precision_policy_add(kiln_precision_policy_t* policy, kiln_precision_match_t match,
                                        const char* name, bool fp16);
/* Writes the rules in the file format, after |header| comment lines (may be
 * NULL; each line gets a "# " prefix). A rule whose name is empty or holds
 * whitespace or '#' cannot be written (INVALID_ARGUMENT, nothing written). */
kiln_status_t kiln_precision_policy_write(const kiln_precision_policy_t* policy, const char* header,
                                          const char* path);
void kiln_precision_policy_free(kiln_precision_policy_t* policy);

/* Whether node |node| of |g| is fp16 under |policy| (may be NULL) when the
 * default is |default_fp16|. */
/* What the last rule naming node |node| says of int8: 1 int8, 0 fp16 or
 * fp32 (stays float), -1 no rule. */
int kiln_precision_node_int8(const kiln_precision_policy_t* policy, const kiln_graph_t* g, int32_t node);

bool kiln_precision_node_fp16(const kiln_precision_policy_t* policy, const kiln_graph_t* g,
                              int32_t node, bool default_fp16);

typedef struct kiln_precision_options_s {
  kiln_precision_mode_t mode;  /* FP32 leaves the plan alone; AUTO is rejected */
  bool fp16_arith;             /* the device computes in half (kiln_device_info_t) */
  bool fp16_accumulate;        /* accumulators in f16 too */
  const kiln_precision_policy_t* policy; /* may be NULL: every node fp16 */
  /* TEMP workspaces that a reduction kernel reads (im2col / phase matrices
   * under a GEMM) stay f32; those only written by one (the GEMM's output
   * panel, read by the crop and epilogue) still turn f16, which costs one
   * narrowing per output element. For the C target: the GEMM micro-kernels
   * read their input workspace along the vector lane in every K step, and
   * an f16 one adds a conversion to each of those loads (ResNet-18 on the
   * CPU: 52 -> 95 ms). Costs arena bytes only (workspaces live for one
   * node), no weight bytes. */
  bool f32_workspaces;
  /* Only constants (weights) turn f16; activations and workspaces keep
   * their dtype. On the C target the weights are read lane-invariant in the
   * GEMM loops (broadcast), so this halves the weights without leaving the
   * vector path; the arena does not shrink. */
  bool weights_only;
} kiln_precision_options_t;

enum {
  KILN_KERNEL_FP32 = 0,
  KILN_KERNEL_FP16_STORAGE = 1, /* f16 buffers, f32 arithmetic */
  KILN_KERNEL_FP16_ARITH = 2,   /* computes in f16 */
};

typedef struct kiln_precision_report_s {
  int32_t n_kernels;
  uint8_t* kernel_precision;   /* per kernel, KILN_KERNEL_* (owned; _report_free) */
  int32_t kernels_fp16, kernels_fp16_arith;
  int32_t buffers_converted;
  int32_t accumulators_kept;   /* buffers kept f32 because a kernel reads and writes them */
  int64_t weight_bytes_before, weight_bytes_after;             /* CONSTs the kernels read */
  int64_t intermediate_bytes_before, intermediate_bytes_after; /* INTERMEDIATE + TEMP roots, unplanned */
} kiln_precision_report_t;

/* Rewrites |plan| (fused or not) in place. |out_report| may be NULL; when
 * given it is filled on success (free with kiln_precision_report_free).
 * Errors: INVALID_ARGUMENT for mode AUTO, tir_verify's error naming the
 * kernel, OUT_OF_MEMORY. On error the plan may be partly rewritten and
 * should be destroyed. */
kiln_status_t kiln_plan_set_precision(kiln_plan_t* plan, const kiln_precision_options_t* o,
                                      kiln_precision_report_t* out_report);
void kiln_precision_report_free(kiln_precision_report_t* r);
/* One summary line, then (|per_kernel|) one line per kernel. */
void kiln_precision_report_print(const kiln_plan_t* plan, const kiln_precision_report_t* r,
                                 bool per_kernel, FILE* out);

#ifdef __cplusplus
}
#endif
#endif /* KILN_LOWERING_PRECISION_H_ */
