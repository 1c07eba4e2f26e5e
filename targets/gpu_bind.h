/* GPU binding of CPU-style PARALLEL loops, shared by the OpenCL and SPIR-V
 * targets (see gpu_bind.c). */
#ifndef KILN_TARGETS_GPU_BIND_H_
#define KILN_TARGETS_GPU_BIND_H_

#include "ir/tir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a PARALLEL loop of extent E becomes work-groups x work-items: one item
 * per group while E <= small_extent (few heavy iterations: one group each, so
 * the device spreads them over its cores), else groups of |lanes| items. */
typedef struct kiln_gpu_bind_s {
  int64_t small_extent;
  int64_t lanes;
} kiln_gpu_bind_t;

/* *out: |f| with its outermost PARALLEL loop bound to BLOCK_X (x THREAD_X),
 * or NULL when the kernel is left as it is (no such loop, bound loops or
 * barriers already, a LOCAL allocation around the loop). */
kiln_status_t kiln_gpu_bind_parallel(tir_ctx_t* c, const tir_func_t* f, const kiln_gpu_bind_t* how,
                                     const tir_func_t** out);

/* Sets *bad when |s| holds a loop over a bound (GPU) index or a barrier,
 * or, with |local_bad|, a LOCAL allocation: the kernels the PARALLEL-loop
 * bindings leave alone. */
void kiln_gpu_bind_scan(const tir_stmt_t* s, bool local_bad, bool* bad);

/* *out: |f| with every BLOCK_X loop of more than |max| work-groups folded
 * into BLOCK_Y (or BLOCK_Z, when Y is taken and |z_free|): the group index
 * becomes gy * Gx + gx, guarded where Gx * Gy passes the loop's extent.
 * |f| itself when nothing passes |max|. A Vulkan device may launch no more
 * than 65535 groups a dimension (the spec's minimum of
 * maxComputeWorkGroupCount; lavapipe's too). */
kiln_status_t kiln_gpu_fold_grid(tir_ctx_t* c, const tir_func_t* f, int64_t max, bool z_free,
                                 const tir_func_t** out);

#ifdef __cplusplus
}
#endif
#endif
