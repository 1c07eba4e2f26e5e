/* The sample loop of a per-sample kernel on a GPU target (see
 * gpu_bind_dyn.c), shared by the OpenCL and SPIR-V targets. */
#ifndef KILN_TARGETS_GPU_BIND_DYN_H_
#define KILN_TARGETS_GPU_BIND_DYN_H_

#include "ir/tir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A target's binding of one sample's body (its PARALLEL loop to work-groups
 * and work-items): *out NULL leaves the body as it is. */
typedef kiln_status_t (*kiln_gpu_bind_fn)(tir_ctx_t* c, const tir_func_t* f, const tir_func_t** out);

/* |f|, a kernel that lowering/plan_dyn.c made loop over the samples (a
 * tir_for_dyn loop at the top of its body), with that loop bound to the
 * grid's dim 2 (BLOCK_Z, static extent the top of the range) and its body
 * bound by |bind| (NULL: as it is). The device launches dim 2 once per
 * sample of the run (the program's groups[2] is per sample: the caller sets
 * it to 1), so no work-item loops over the samples and the dims buffer the
 * kernel still takes goes unread. UNSUPPORTED naming the kernel when |f|
 * has no sample loop or one sample's body uses dim 2 itself. */
kiln_status_t kiln_gpu_bind_samples(tir_ctx_t* c, const tir_func_t* f, kiln_gpu_bind_fn bind, const tir_func_t** out);

#ifdef __cplusplus
}
#endif
#endif
