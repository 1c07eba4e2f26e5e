/* kiln CPU backend: tensor IR -> C -> shared object -> run.
 *
 * Kernels of a plan are printed as one C translation unit through the shared
 * C-family printer (targets/cfamily/printer.h, C dialect), compiled with the
 * system compiler ($KILN_CC or "cc"; flags $KILN_CPU_FLAGS or "-O3
 * -march=native -fopenmp -fno-math-errno") into a shared object -- large
 * units are split into parts compiled in parallel ($KILN_CPU_JOBS),
 * kernels that print identically share one body, and kernels equal up to
 * integer constants one body taking the constants (cpu_share.c,
 * $KILN_CPU_SHARE=0 turns that off) -- which is cached on disk
 * in the code cache's cpu folder ($KILN_CACHE_DIR/cpu, see
 * runtime/code_cache.h) by a hash of the source, compiler, flags, compiler
 * version and CPU, and loaded
 * with dlopen. $KILN_CPU_DUMP names a folder that receives the source. Each kernel is `void name(void* const* args)` with args in
 * tir_func param order. PARALLEL loops run on OpenMP threads (thread count
 * from the options; default = cores).
 *
 * Thread-compatible: one executable per thread at a time (runs are
 * sequential on one executable).
 */
#ifndef KILN_TARGETS_CPU_BACKEND_H_
#define KILN_TARGETS_CPU_BACKEND_H_

#include "lowering/plan.h"
#include "runtime/cpu/cpu_loader.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kiln_cpu_options_t, kiln_cpu_options_default and kiln_cpu_compile_stats_t
 * come from the loader (runtime/cpu/cpu_loader.h). */
typedef struct kiln_cpu_exec_s kiln_cpu_exec_t;

/* Prints, compiles (or finds in the cache) and loads the plan's kernels, and
 * allocates the buffers. A compiler failure returns an error with the
 * compiler's output and the kernel source path. |plan| must outlive the
 * executable. */
kiln_status_t kiln_cpu_compile(const kiln_plan_t* plan, const kiln_cpu_options_t* options,
                               kiln_cpu_exec_t** out_exec, kiln_cpu_compile_stats_t* out_stats);
void kiln_cpu_exec_destroy(kiln_cpu_exec_t* e);

typedef void (*kiln_cpu_kernel_cb)(void* user, int32_t kernel, double seconds);

/* Runs the plan on |inputs| (one per graph input, static shapes as planned;
 * a different shape is an error naming the input and both shapes) and
 * returns newly allocated outputs (caller frees with the system allocator). */
kiln_status_t kiln_cpu_run(kiln_cpu_exec_t* e, const kiln_array_t* inputs, kiln_array_t* outputs,
                           kiln_cpu_kernel_cb on_kernel, void* user);

/* The generated C source of the plan (malloc'd), for --dump and tests. */
kiln_status_t kiln_cpu_generate_source(const kiln_plan_t* plan, char** out_source,
                                       size_t* out_len);

#ifdef __cplusplus
}
#endif
#endif
