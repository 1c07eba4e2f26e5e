/* `kiln compile -o` on a target that builds native code (the CPU's C
 * compiled ahead of time): the build runs on a thread of its own from the
 * program's code while this thread writes the rest of the module, which
 * waits for it only before the native code's section (the last). On two
 * cores the C compiler's jobs and the module's 100 MB of weights then
 * overlap instead of following each other. */
#ifndef KILN_TOOLS_COMPILE_NATIVE_H
#define KILN_TOOLS_COMPILE_NATIVE_H

#include <stdbool.h>

#include "runtime/program.h"
#include "targets/registry.h"

typedef struct kiln_cli_native_job_s kiln_cli_native_job_t;

/* Whether |t| can build the native code of |levels| from the program's own
 * code, after the compile (so the compile itself is asked for none). */
bool kiln_cli_native_async_ok(const kiln_target_t* t, const char* levels);

/* Whether |prog| takes that build: a plain program (no stages, buckets,
 * host kernels or device binaries, whose code is elsewhere). */
bool kiln_cli_native_async_fits(const kiln_program_t* prog);

/* Starts building |levels| for |prog| (the job is malloc'd into *out). */
kiln_status_t kiln_cli_native_start(const kiln_target_t* t, kiln_program_t* prog, const char* levels,
                                    kiln_cli_native_job_t** out);

/* kiln_module_wait_fn for the job: waits for the build and hands its
 * native code to the program. */
kiln_status_t kiln_cli_native_wait(void* job);

/* The build's figures once waited for; frees the job (waiting first if
 * nobody did). */
void kiln_cli_native_finish(kiln_cli_native_job_t* job, kiln_native_build_stats_t* stats);

#endif
