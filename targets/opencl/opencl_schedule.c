/* GPU binding of CPU-style schedules for the OpenCL target: the shared
 * rewrite of targets/gpu_bind.c with the rule set's sizes. The CPU rules
 * (PoCL): small PARALLEL extents (<= 256, few heavy chunks) get one
 * work-item per group, so a CPU device spreads them over its cores; larger
 * ones groups of 64 items. The GPU rules (not measured on a GPU yet): groups
 * of 64 items always, a one-item group would use one lane of a warp. */
#include "targets/opencl/opencl_internal.h"

kiln_gpu_bind_t kiln_opencl_bind_how(bool gpu) {
  return (kiln_gpu_bind_t){.small_extent = gpu ? 0 : 256, .lanes = 64};
}

kiln_status_t kiln_opencl_bind_parallel(tir_ctx_t* ctx, const tir_func_t* f, const tir_func_t** out) {
  const kiln_gpu_bind_t how = kiln_opencl_bind_how(false);
  return kiln_gpu_bind_parallel(ctx, f, &how, out);
}

kiln_status_t kiln_opencl_bind_parallel_gpu(tir_ctx_t* ctx, const tir_func_t* f, const tir_func_t** out) {
  const kiln_gpu_bind_t how = kiln_opencl_bind_how(true);
  return kiln_gpu_bind_parallel(ctx, f, &how, out);
}
