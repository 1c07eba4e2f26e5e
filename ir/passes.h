/* kiln graph passes: named, separately testable rewrites of a prepared graph.
 *
 * Each pass takes a prepared graph (toposorted, inferred) and leaves it
 * prepared: passes that change structure call kiln_graph_prepare() again (or
 * the pass manager does). A pass never changes what the graph computes (up to
 * float reassociation for folds such as BatchNorm into Conv weights).
 *
 * Passes (in default order):
 *   "einsum-to-matmul"  two-operand Einsum that is a batched matrix product
 *                       -> Transpose/Reshape, MatMul, Reshape/Transpose
 *   "remove-noops"      Identity, Dropout (inference), Cast to the same type,
 *                       Reshape/Flatten/Squeeze/Unsqueeze to the same shape,
 *                       Transpose with the identity permutation, Expand to the
 *                       same shape
 *   "fold-qdq"          DequantizeLinear operands -> Conv/MatMul -> [Relu/Clip]
 *                       -> QuantizeLinear become QLinearConv/QLinearMatMul
 *                       (ir/pass_qdq.c; results within one quantization step)
 *   "fold-constants"    every node whose inputs are all constants becomes an
 *                       initializer (Shape-driven subgraphs included), within
 *                       a size cap
 *   "fold-batchnorm"    BatchNormalization after Conv / Gemm / MatMul with
 *                       constant weights is folded into those weights and bias
 *   "fold-reshape-chains" Reshape/Flatten/Squeeze/Unsqueeze chains -> one
 *                       Reshape; Transpose chains -> one Transpose (or none)
 *   "recognize-patterns" decomposed Gelu (x*0.5*(1+erf(x/sqrt2)) and the tanh
 *                       form), LayerNormalization (ReduceMean/Sub/Pow/
 *                       ReduceMean/Add/Sqrt/Div/Mul/Add) and HardSwish
 *                       (x*HardSigmoid(x) or x*Relu6(x+3)/6) become one node
 *   "cse"               common subexpressions (same op, inputs, attributes)
 *   "dce"               nodes whose outputs nothing uses
 * Graph outputs keep their names; graph inputs are never removed.
 */
#ifndef KILN_IR_PASSES_H_
#define KILN_IR_PASSES_H_

#include "ir/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_pass_stats_s {
  int32_t nodes_before, nodes_after;
  int32_t rewrites; /* pass-specific count of changes */
} kiln_pass_stats_t;

typedef kiln_status_t (*kiln_graph_pass_fn)(kiln_graph_t* g, kiln_pass_stats_t* stats);

typedef struct kiln_graph_pass_s {
  const char* name;
  kiln_graph_pass_fn fn;
} kiln_graph_pass_t;

/* The default pipeline, in order. */
extern const kiln_graph_pass_t kiln_graph_passes[];
extern const size_t kiln_graph_pass_count;

/* Finds a pass by name (NULL if unknown). */
const kiln_graph_pass_t* kiln_graph_pass_find(const char* name);

/* Runs the default pipeline when |level| >= 1 (level 0: nothing). |log|
 * (may be NULL) gets one line per pass: name, rewrites, nodes before/after. */
kiln_status_t kiln_graph_optimize(kiln_graph_t* g, int level, FILE* log);
/* kiln_graph_optimize without the passes named in |skip| (NULL-terminated;
 * NULL: none): a target leaves out a rewrite its kernels do not profit
 * from (kiln_target_t.skip_graph_passes). */
kiln_status_t kiln_graph_optimize_except(kiln_graph_t* g, int level, const char* const* skip, FILE* log);

/* One GEMM whose weight (or bias) spans more than the binding limit:
 * split into |pieces| column slices of |cols| columns (the last one the
 * rest), or left whole (|pieces| 0) because of |why|. The strings are
 * the graph's or the split's own, valid during the call. */
typedef struct kiln_gemm_split_note_s {
  const char* node;
  const char* op;
  uint64_t bytes; /* the largest constant operand */
  uint64_t limit; /* max_binding */
  int32_t pieces;
  int64_t cols;
  const char* why;
} kiln_gemm_split_note_t;

typedef kiln_status_t (*kiln_gemm_split_fn)(void* user, const kiln_gemm_split_note_t* note);

/* Not in the default pipeline, since it depends on the device: every Gemm
 * and every MatMul with a constant 2-D B of prepared |g| whose weight or
 * bias spans more than |max_binding| bytes (a GPU's limit for one bound
 * buffer, kiln_device_info_t.max_binding_bytes; 0: nothing to do) becomes
 * GEMMs over column slices of N that fit, with sliced constant weights and
 * bias, and a Concat on the last axis writing the original output. Names
 * derive from the originals: nodes '<node>/split<i>' and '<node>/concat',
 * tensors '<weight>/split<i>'. A weight nothing else reads is dropped. A
 * weight (or bias) written by a ConstantOfShape of a constant shape is
 * sliced as ConstantOfShapes of the slices' shapes, the same value.
 * Nodes the split cannot help (a weight computed otherwise, an input or
 * output that alone exceeds the limit, one column too large) are left as
 * they are. |note| (may be NULL) hears of each node over the limit; an
 * error it returns stops the pass. Leaves |g| prepared. */
KILN_MUST_USE kiln_status_t kiln_graph_split_wide_gemms(kiln_graph_t* g, uint64_t max_binding, kiln_gemm_split_fn note, void* user);

/* Removes nodes flagged in |dead| (n_nodes entries), compacts the node
 * array, and re-prepares the graph. Used by passes. */
kiln_status_t kiln_graph_remove_nodes(kiln_graph_t* g, const bool* dead);

#ifdef __cplusplus
}
#endif
#endif
