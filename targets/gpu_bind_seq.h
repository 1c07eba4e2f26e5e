/* The kernels of a range program (a dim inside the shapes, lowering/
 * plan_seq.h) on a GPU target: their grids follow the run's value of the
 * dim (see gpu_bind_seq.c), shared by the OpenCL and SPIR-V targets. */
#ifndef KILN_TARGETS_GPU_BIND_SEQ_H_
#define KILN_TARGETS_GPU_BIND_SEQ_H_

#include "targets/gpu_bind.h"

#ifdef __cplusplus
extern "C" {
#endif

/* |f|, a unified kernel of a range program over [lo, hi], with the grid's
 * dim 2 (BLOCK_Z, static extent hi) taking the dim's value n: the device
 * launches dim 2 n times (the per-sample launch, device.h cmd_dim; the
 * caller sets the program's groups[2] to 1). Its outermost PARALLEL loop,
 * of extent E(n) (a run-time extent or a static one), is cut into n slices
 * of C = max over the range of ceil(E(n) / n) iterations, each slice bound
 * to work-groups x work-items as |how| says; an iteration past E(n) does
 * nothing. A kernel without such a loop runs in slice 0 only. UNSUPPORTED
 * naming the kernel for bound loops, barriers or LOCAL allocations already
 * in it, or an extent that is no integer expression of the dims buffer. */
kiln_status_t kiln_gpu_bind_seq(tir_ctx_t* c, const tir_func_t* f, int64_t lo, int64_t hi, const kiln_gpu_bind_t* how,
                                const tir_func_t** out);

#ifdef __cplusplus
}
#endif
#endif
