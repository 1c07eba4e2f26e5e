/* Plugin kernels in the targets' code (include/kiln/custom_op.h): the one
 * place the three targets print a plugin op's source -- the C function of
 * the CPU unit, the OpenCL C kernel, the GLSL compute shader -- with kiln's
 * function header, typed tensor variables, shape/attribute/launch macros
 * and a #line naming the plugin and the op. */
#ifndef KILN_TARGETS_CUSTOM_KERNEL_H_
#define KILN_TARGETS_CUSTOM_KERNEL_H_

#include "lowering/lower_custom.h"
#include "lowering/plan.h"
#include "targets/cfamily/printer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The plugin's kernel for |target| ("cpu", "opencl", "vulkan"), or
 * UNSUPPORTED naming the op, its plugin, the node and the target (a GPU
 * target's partition asks first and runs such a node on the CPU, unless
 * --strict: targets/partition.h). */
KILN_MUST_USE kiln_status_t kiln_custom_kernel_of(const kiln_custom_instance_t* ci, const char* target,
                                                  const kiln_custom_kernel_t** out);
/* Appends plan kernel |k|'s (a plugin kernel) code for |target| to |out|
 * under symbol |name| (the GLSL shader's entry is main), and its launch:
 * work-groups and work-group size (1s on the CPU). Errors name the op. */
KILN_MUST_USE kiln_status_t kiln_custom_print(const kiln_plan_t* plan, int32_t k, const char* target,
                                              const char* name, kiln_cf_out_t* out, int64_t groups[3],
                                              int64_t local[3]);

/* The loop iterations one work-item of plan kernel |k|'s (a plugin
 * kernel) GLSL body runs, as its op's glsl_loop_trips declares (0 when it
 * declares none), for the program's loop_trips; UNSUPPORTED naming the op
 * when above the plan's loop_limit (a device that cuts invocations short). */
KILN_MUST_USE kiln_status_t kiln_custom_glsl_trips(const kiln_plan_t* plan, int32_t k, int64_t* out_trips);
/* True for a CPU plan kernel that calls its plugin's cpu_fn. */
bool kiln_custom_calls_cpu_fn(const kiln_plan_kernel_t* pk);
/* Appends to a CPU unit's epilogue, when |plan| has kernels that call a
 * plugin's cpu_fn, the exported `int kiln_plugin_bind(resolve, host)` the
 * loader calls to set their function pointers (runtime/cpu/cpu_loader.h);
 * nothing otherwise. */
void kiln_custom_print_bind(const kiln_plan_t* plan, kiln_cf_out_t* out);

#ifdef __cplusplus
}
#endif
#endif /* KILN_TARGETS_CUSTOM_KERNEL_H_ */
