/* Private parts of the CPU backend, shared by its files:
 *   cpu_codegen.c  plan -> one C translation unit (through the C-family printer)
 *   cpu_compile.c  C source -> compiler (posix_spawn) -> cached .so -> dlopen/dlsym
 *   cpu_exec.c     kiln_cpu_compile, buffer allocation, kiln_cpu_run
 */
#ifndef KILN_TARGETS_CPU_INTERNAL_H_
#define KILN_TARGETS_CPU_INTERNAL_H_

#include "targets/cfamily/printer.h"
#include "targets/cpu/cpu_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What every generated kernel is. */
typedef void (*kiln_cpu_kernel_fn)(void* const* args);

/* A loaded shared object and its kernels. */
typedef struct kiln_cpu_module_s {
  void* handle;                  /* dlopen handle */
  kiln_cpu_kernel_fn* fns;       /* one per requested symbol (malloc'd) */
  void (*set_threads)(int);      /* kiln_set_threads from the .so */
} kiln_cpu_module_t;

/* Follows alias_of to the buffer owning the memory; -1 on a cycle or an
 * index out of range. */
int32_t kiln_cpu_root(const kiln_plan_t* p, int32_t b);

/* The plan as one C translation unit: prelude | unit 0 | unit 1 | ... |
 * epilogue, where a unit is one distinct kernel followed by alias
 * declarations for the kernels that print identically to it (dedup: same
 * canonical text, see kiln_cf_kernel_info_t.canonical). Units are slices of
 * |text| so the compiler can split the unit into parts compiled in
 * parallel, each part = prelude + some units (+ the epilogue in part 0). */
typedef struct kiln_cpu_source_s {
  kiln_cf_out_t text;
  size_t prelude_len;       /* text[0, prelude_len) */
  size_t epilogue_off;      /* text[epilogue_off, len) */
  int32_t n_units;
  size_t* unit_off;         /* unit i = text[unit_off[i], unit_off[i] + unit_len[i]) */
  size_t* unit_len;
  int32_t n_aliases;        /* kernels emitted as aliases of an identical one */
} kiln_cpu_source_t;

kiln_status_t kiln_cpu_codegen(const kiln_plan_t* plan, kiln_cpu_source_t* out);
void kiln_cpu_source_free(kiln_cpu_source_t* s);

/* Compiles |src| (or finds it in the cache), loads it and resolves |names|
 * (n of them). Fills stats->compile_s/load_s/cache_hit/so_path. On success
 * *out owns the handle (kiln_cpu_module_unload). */
kiln_status_t kiln_cpu_module_load(const kiln_cpu_source_t* src,
                                   const kiln_cpu_options_t* options, const char* const* names,
                                   int32_t n, kiln_cpu_module_t* out,
                                   kiln_cpu_compile_stats_t* stats);
void kiln_cpu_module_unload(kiln_cpu_module_t* m);

double kiln_cpu_now(void);

#ifdef __cplusplus
}
#endif
#endif
