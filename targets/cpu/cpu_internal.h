/* Private parts of the CPU backend, shared by its files:
 *   cpu_codegen.c  plan -> one C translation unit (through the C-family printer)
 *   cpu_exec.c     kiln_cpu_compile, buffer allocation, kiln_cpu_run
 *   cpu_share.c    kernels equal up to integer constants: one shared body
 * Compiling and loading the C (compiler, cached .so, dlopen/dlsym) is the
 * runtime's CPU loader, runtime/cpu/cpu_loader.h.
 */
#ifndef KILN_TARGETS_CPU_INTERNAL_H_
#define KILN_TARGETS_CPU_INTERNAL_H_

#include "targets/cfamily/printer.h"
#include "targets/cpu/cpu_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Follows alias_of to the buffer owning the memory; -1 on a cycle or an
 * index out of range. */
int32_t kiln_cpu_root(const kiln_plan_t* p, int32_t b);

/* The plan as one C translation unit: prelude | unit 0 | unit 1 | ... |
 * epilogue, where a unit is one distinct kernel followed by alias
 * declarations for the kernels that print identically to it (dedup: same
 * canonical text, see kiln_cf_kernel_info_t.canonical). |parts| slices
 * |text| the way a module's code section does (kiln_program_code_t: [0]
 * prelude, [1..n_parts-2] units, [n_parts-1] epilogue), so the loader
 * (runtime/cpu/cpu_loader.h) can compile the units as parts in parallel. */
typedef struct kiln_cpu_source_s {
  kiln_cf_out_t text;
  int32_t n_parts;
  uint64_t* parts;          /* 2 * n_parts: offset, length */
  int32_t n_aliases;        /* kernels emitted as aliases of an identical one */
  int32_t n_shared;         /* kernels emitted as calls of a shared body (cpu_share.c) */
  int32_t n_bodies;         /* ... and the shared bodies they call */
} kiln_cpu_source_t;

kiln_status_t kiln_cpu_codegen(const kiln_plan_t* plan, kiln_cpu_source_t* out);
/* As kiln_cpu_codegen, with vector types of at most |lanes| f32 lanes (4,
 * 8 or 16) instead of this CPU's: the ahead-of-time build for another ISA
 * level (targets/cpu/cpu_aot.c; NEON is 4). */
kiln_status_t kiln_cpu_codegen_lanes(const kiln_plan_t* plan, int32_t lanes, kiln_cpu_source_t* out);
/* `kiln compile --cpu-target LIST`: compiles the plan's C for each ISA level
 * in |list| (comma-separated names from runtime/cpu/cpu_native.h, "host"
 * for this CPU's best, "none" for nothing) and stores the shared objects in
 * prog->code.native. Errors: INVALID_ARGUMENT naming an unknown level,
 * NOT_FOUND when a level's compiler is missing, the compiler's errors. */
kiln_status_t kiln_cpu_aot_build(const kiln_plan_t* plan, kiln_program_t* prog, const char* list);
/* Whether every level of |list| can compile the program's own C (the C
 * printed for this machine's vector lanes), so the native code can be
 * built from the program alone, after the plan is gone. */
bool kiln_cpu_aot_from_code_ok(const char* list);
/* Builds the native code of the levels in |list| from prog->code (each must
 * pass kiln_cpu_aot_from_code_ok), as kiln_cpu_aot_build does from the
 * plan; the compile's seconds, parts and jobs go into |stats| (or NULL). */
kiln_status_t kiln_cpu_aot_build_code(kiln_program_t* prog, const char* list, kiln_cpu_compile_stats_t* stats);
void kiln_cpu_source_free(kiln_cpu_source_t* s);

/* Shape sharing (cpu_share.c, see its header comment): kernels whose
 * canonical texts are equal up to integer literals print one body that
 * reads the literals that differ from an array its callers pass.
 * $KILN_CPU_SHARE=0 turns it off (for comparisons). */
typedef struct kiln_cpu_shape_s {
  char* skel;       /* the text, each literal that may vary replaced by \x01 */
  size_t skel_len;
  uint64_t hash;    /* of skel */
  int32_t* lits;    /* the literals' values, in text order */
  int32_t n_lits;
} kiln_cpu_shape_t;

/* The shape of a canonical kernel text. Errors: OUT_OF_MEMORY. */
kiln_status_t kiln_cpu_shape_of(const char* text, size_t len, kiln_cpu_shape_t* out);
bool kiln_cpu_shape_same(const kiln_cpu_shape_t* a, const kiln_cpu_shape_t* b);
void kiln_cpu_shape_free(kiln_cpu_shape_t* s);
/* Defines KILN_SHARED; printed once before the first shared body. */
extern const char kiln_cpu_shared_macro[];
/* Prints `kiln_shared_<group>`, the body of |text| (a member's own print,
 * whose literals are |lits|, n_lits of them) with literal i read from
 * parameter kc[param_of[i]] where that is >= 0 (n_params of them, numbered
 * in the order of their first literal; literals with the same values in
 * every member share one). False, printing nothing, when the text does not
 * have those literals. */
bool kiln_cpu_print_shared_body(kiln_cf_out_t* o, int32_t group, const char* text, size_t len,
                                const int32_t* lits, const int32_t* param_of, int32_t n_lits,
                                int32_t n_params);
/* Prints kernel |name| as a call of kiln_shared_<group> passing its
 * literals |lits| as the parameters |param_of| maps them to. */
void kiln_cpu_print_shared_call(kiln_cf_out_t* o, const char* name, int32_t group,
                                const int32_t* lits, const int32_t* param_of, int32_t n_lits);

#ifdef __cplusplus
}
#endif
#endif
