/* kiln kernel fusion on the tensor IR (plan level).
 *
 * Op classes in the spirit of TVM's op patterns decide what may fuse:
 *   ELEMWISE (Relu, Add, Clip, ...), BROADCAST (Add with a smaller operand),
 *   INJECTIVE (Transpose, Pad, Concat, Slice, Gather...), REDUCTION,
 *   OUT_ELEMWISE_FUSABLE (Conv, ConvTranspose, Gemm, MatMul), OPAQUE; each
 *   op's schema (ir/op.h) carries its pattern.
 *
 * Two transformations, both on kernels already lowered and scheduled:
 *  - epilogue fusion ("reverse compute-inline"): a consumer kernel whose naive
 *    form is `for d...: Y[d] = f(X[d], other loads)` (identity index into X)
 *    is folded into the producer kernel that writes X: every store
 *    `X[e] = v` becomes `Y[e] = f(v, other loads with d := e)`. The producer
 *    keeps its schedule (tiling, vectorization); X is no longer written or
 *    read. Applies when X is an intermediate with that one consumer, the
 *    producer never loads X, and stores each X element once (the final
 *    value). Chains fuse repeatedly (Conv -> Add(bias) -> Add(residual) -> Relu).
 *  - producer inlining (compute-inline): an injective producer kernel
 *    `for d: X[d] = g(d, loads)` whose X has one consumer is substituted into
 *    that consumer's loads of X (Pad / Transpose feeding a kernel).
 *
 * Limits that keep fusion linear in the graph and its kernels compilable: a
 * fused kernel computes at most 64 graph nodes, and its stored expression is
 * at most 4096 tree nodes (a value read twice counts twice) while it holds up
 * to 4 graph nodes, 1024 beyond that; a fusion past a limit is not done (the
 * chain continues in the next kernel).
 *
 * The report records kernels before/after, which ops went into which kernel,
 * and the intermediate bytes no longer written to and read from memory.
 */
#ifndef KILN_LOWERING_FUSE_H_
#define KILN_LOWERING_FUSE_H_

#include "ir/op.h"
#include "lowering/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The pattern of |op_type|'s schema (ir/op.h); OPAQUE without one. */
kiln_op_pattern_t kiln_op_pattern(const char* op_type);
const char* kiln_op_pattern_name(kiln_op_pattern_t p);

typedef struct kiln_fusion_report_s {
  int32_t kernels_before, kernels_after;
  int32_t epilogues_fused, producers_inlined;
  int64_t bytes_saved;      /* intermediate bytes no longer written + read */
  int64_t bytes_before;     /* intermediate bytes written + read without fusion */
} kiln_fusion_report_t;

/* Fuses kernels of |p| in place (kernels are replaced, dead intermediates
 * get no memory: their first_use stays -1). Every fused kernel is verified
 * with tir_verify. |log| (may be NULL) gets one line per fusion. */
kiln_status_t kiln_plan_fuse(kiln_plan_t* p, kiln_fusion_report_t* report, FILE* log);

/* Slice folding (lowering/fuse_slice.c; CPU plans, run by kiln_plan_fuse
 * after the fusions): a kernel copying an intermediate into a sub-box of a
 * conv's zero-padded workspace is dropped and the intermediate lives in
 * that sub-box (its producers store there, its readers load there).
 * |folded| (may be NULL) gets how many copies went. */
kiln_status_t kiln_plan_fold_slices(kiln_plan_t* p, int32_t* folded);

/* Per kernel of a fused plan: the graph nodes it computes (the anchor node
 * is kernels[k].node; the others are listed here). */
int32_t kiln_plan_kernel_nodes(const kiln_plan_t* p, int32_t kernel, int32_t* nodes, int32_t cap);

#ifdef __cplusplus
}
#endif
#endif
