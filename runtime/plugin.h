/* The runtime's side of custom-op plugins (include/kiln/custom_op.h is the
 * public API; runtime/plugin.c the loader and registry). Internal. */
#ifndef KILN_RUNTIME_PLUGIN_H_
#define KILN_RUNTIME_PLUGIN_H_

#include "kiln/custom_op.h"
#include "runtime/program.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NOT_FOUND naming every plugin op |p| records (kiln_program_t.plugin_ops)
 * that no loaded plugin provides at the recorded version; |name| is the
 * module's name for the message. */
KILN_MUST_USE kiln_status_t kiln_plugin_check_program(const kiln_program_t* p, const char* name);

/* Calls a loaded CPU unit's exported kiln_plugin_bind (|bind|, its
 * address), which asks for the cpu_fn of each plugin op its kernels call
 * (targets/custom_kernel.c prints both sides). NOT_FOUND naming the op,
 * its version, the node and the plugin when no loaded plugin provides the
 * op at that version with a cpu_fn. */
KILN_MUST_USE kiln_status_t kiln_plugin_bind_cpu_fns(void* bind);

#ifdef __cplusplus
}
#endif
#endif /* KILN_RUNTIME_PLUGIN_H_ */
