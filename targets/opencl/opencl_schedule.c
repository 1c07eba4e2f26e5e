/* GPU binding of CPU-style schedules for the OpenCL target: the shared
 * rewrite of targets/gpu_bind.c with PoCL-friendly sizes. Small PARALLEL
 * extents (<= 256, few heavy chunks) get one work-item per group, so a CPU
 * device spreads them over its cores; larger ones groups of 64 items. */
#include "targets/gpu_bind.h"
#include "targets/opencl/opencl_internal.h"

kiln_status_t kiln_opencl_bind_parallel(tir_ctx_t* ctx, const tir_func_t* f, const tir_func_t** out) {
  const kiln_gpu_bind_t how = {.small_extent = 256, .lanes = 64};
  return kiln_gpu_bind_parallel(ctx, f, &how, out);
}
