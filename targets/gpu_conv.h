/* The program rewrite that follows the conv template instances lowering
 * chose (lowering/template.h), shared by the GPU targets (OpenCL and
 * SPIR-V): an instance runs in its slot kernel with its own parameter
 * list (weights, input planes, bias, output, epilogue operands), and the
 * Conv's GEMM kernel MERGED into it leaves the program. Each target prints
 * its own template (kernels/opencl/conv.cl, kernels/vulkan/conv.comp). */
#ifndef KILN_TARGETS_GPU_CONV_H_
#define KILN_TARGETS_GPU_CONV_H_

#include "lowering/template.h"
#include "runtime/program.h"

#ifdef __cplusplus
extern "C" {
#endif

/* True when a kernel of |plan| runs a conv instance (CONV or WINOGRAD):
 * the program's kernel list then needs kiln_gpu_conv_rewrite. */
bool kiln_gpu_conv_any(const kiln_plan_t* plan);

/* Rewrites |prog|'s kernel list (one kernel per kernel of |plan|, same
 * order) for |plan|'s conv instances: a MERGED kernel goes, a slot gets
 * its instance's parameters and both kernels' flops; buffer lifetimes are
 * recomputed from the new argument lists. |keep|, when not NULL, receives
 * for each kept kernel its old index (the caller moves per-kernel data the
 * same way). All allocations happen before |prog| changes. Errors:
 * INVALID_ARGUMENT when the kernel counts differ, OUT_OF_MEMORY. */
KILN_MUST_USE kiln_status_t kiln_gpu_conv_rewrite(kiln_program_t* prog, const kiln_plan_t* plan, int32_t* keep);

#ifdef __cplusplus
}
#endif
#endif
