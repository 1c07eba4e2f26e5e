/* kiln program builder: a lowered (and usually fused) plan -> a program.
 *
 * The compiler's last step before the runtime: buffers with their
 * lifetimes, kernels with argument access flags and in-place candidates,
 * constants packed into one weights blob (64-byte aligned), and the target
 * code -- the CPU C unit (split into compile units), OpenCL C source or one
 * SPIR-V binary per kernel -- all owned by the program, so the plan, graph
 * and tensor IR can be freed afterwards. The result passes
 * kiln_program_validate. */
#ifndef KILN_TARGETS_PROGRAM_BUILD_H_
#define KILN_TARGETS_PROGRAM_BUILD_H_

#include "lowering/template.h"
#include "runtime/program.h"
#include "targets/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_program_build_options_s {
  const char* model_name; /* default: the graph's source */
  const char* precision;  /* default "fp32" */
  const char* options;    /* compile options as text (recorded only) */
  /* Buffers, kernels and I/O only, no target code and no validation: the
   * caller runs the target's emitter itself (with its own options). */
  bool no_code;
  /* Ahead-of-time machine code for these ISA levels (the target's
   * emit_native; NULL or "": none). A target without emit_native refuses a
   * non-empty list. */
  const char* cpu_targets;
} kiln_program_build_options_t;

/* |target| from the registry (kiln_target_find). Errors: the emitter's
 * (naming the kernel), OUT_OF_MEMORY. |options| may be NULL. */
kiln_status_t kiln_program_build(const kiln_plan_t* plan, const kiln_target_t* target,
                                 const kiln_program_build_options_t* options,
                                 kiln_allocator_t allocator, kiln_program_t** out_program);

/* Emits a heterogeneous program (some plan kernels host, from
 * targets/partition.h): |target| prints the device kernels into
 * prog->code, the CPU target the host kernels into prog->host_code, and
 * prog's kernels come back in plan order marked with their device.
 * kiln_program_build calls it when the plan has host kernels. */
KILN_MUST_USE kiln_status_t kiln_program_emit_hetero(const kiln_plan_t* plan, const kiln_target_t* target, kiln_program_t* prog);

/* The templates |target| has (lowering/template.h), for the caller to pass
 * to kiln_template_choose after fusion and the precision pass: the
 * target's own set (kiln_opencl_templates, kiln_spirv_templates), none for
 * the CPU or a target not built in. Thread-safe. */
void kiln_program_templates(const kiln_target_t* target, kiln_template_set_t* out);

#ifdef __cplusplus
}
#endif
#endif /* KILN_TARGETS_PROGRAM_BUILD_H_ */
