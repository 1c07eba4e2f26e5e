/* Heterogeneous execution, compile side: which nodes of a model a GPU
 * target cannot run, lowered for the CPU device of the same session.
 *
 * The target is asked, not caught failing: its lowering refuses a node
 * with UNSUPPORTED (kiln_plan_options_t.host_fallback lowers that node for
 * the CPU class instead), and its kernel_check slot (targets/registry.h)
 * says for each lowered kernel whether it can print it, with the reason (a
 * dtype its dialect lacks -- f64 and the wide unsigned types in GLSL --, a
 * plugin op without a kernel for it). The refused nodes are lowered again
 * for the CPU class; fusion keeps host and device kernels apart, so a run
 * of refused nodes that fusion joins becomes one CPU kernel. The program
 * builder (targets/program_build.c) then prints the host kernels with the
 * CPU target and records which kernel runs where; the session
 * (runtime/session_hetero.c) runs the program's device segments in order
 * with the transfers between them.
 *
 * --strict makes any fallback an error naming the node, the target and the
 * reason. Thread-compatible.
 */
#ifndef KILN_TARGETS_PARTITION_H_
#define KILN_TARGETS_PARTITION_H_

#include "lowering/plan.h"
#include "targets/cfamily/printer.h"
#include "targets/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The nodes that fell back to the CPU: graph node index and why (owned). */
typedef struct kiln_partition_report_s {
  int32_t n;
  int32_t* nodes;
  char** reasons;
} kiln_partition_report_t;

void kiln_partition_report_free(kiln_partition_report_t* r);

/* kiln_plan_build for |target| with heterogeneous execution: nodes the GPU
 * target refuses are lowered for the CPU and their kernels marked host.
 * CPU targets (nothing to fall back to) build the plain plan. |strict|:
 * the first refusal is an UNSUPPORTED error naming the node, its op, the
 * target and the reason. |gpu_lacks|: what the device lacks
 * (KILN_GPU_LACKS_*, kiln_compile_gpu_lacks), and |max_binding|: the most
 * bytes one kernel argument may span on it (kiln_device_info_t.
 * max_binding_bytes; 0: no limit), kept in the plan for the target's
 * kernel_check. |report| (may be NULL) lists the fallbacks; free
 * it with kiln_partition_report_free, also after an error. */
KILN_MUST_USE kiln_status_t kiln_partition_plan_build(const kiln_graph_t* g, const kiln_plan_options_t* options,
                                                      const kiln_target_t* target, bool strict, uint32_t gpu_lacks,
                                                      uint64_t max_binding, kiln_allocator_t allocator, kiln_partition_report_t* report,
                                                      kiln_plan_t** out_plan);

/* The kernel_check of a GPU target printing tensor IR in |dialect| and
 * plugin kernels under |target| ("opencl", "vulkan"): UNSUPPORTED when a
 * plugin op has no kernel for it or the dialect lacks a dtype the kernel
 * uses. Template instances are the target's own and pass. */
KILN_MUST_USE kiln_status_t kiln_partition_gpu_check(const kiln_plan_t* plan, int32_t k, const char* target,
                                                     const kiln_cf_dialect_t* dialect);

#ifdef __cplusplus
}
#endif
#endif /* KILN_TARGETS_PARTITION_H_ */
