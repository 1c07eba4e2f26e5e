/* kiln CPU machine code carried in a module (ahead-of-time compiled).
 *
 * `kiln compile -t cpu --cpu-target x86-64-v3,x86-64-v4,aarch64` compiles
 * the module's C once per ISA level into an ELF shared object and stores
 * them in the module ('NATV', runtime/module_file.h). At load, the CPU
 * device (runtime/cpu/cpu_device.c) asks this file for the best object the
 * running CPU executes -- read from CPUID at run time, never from how
 * libkiln_rt was built -- checks it is a well-formed shared object for this
 * machine before the dynamic loader sees it, and loads it from memory
 * (memfd; a private temporary file where there is none). No compiler runs
 * and nothing is cached: a phone has no `cc`.
 *
 * The ISA table is shared with the compile side (targets/cpu/cpu_aot.c):
 * the same names select what to build and what to load.
 *
 * Thread-safe: reentrant, no global state besides the CPU feature probe.
 */
#ifndef KILN_RUNTIME_CPU_NATIVE_H_
#define KILN_RUNTIME_CPU_NATIVE_H_

#include <stddef.h>
#include <stdint.h>

#include "kiln/status.h"
#include "runtime/cpu/cpu_loader.h"
#include "runtime/program.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One ISA level kiln can compile for and load. */
typedef struct kiln_cpu_isa_s {
  const char* name;      /* --cpu-target name, and the module's */
  uint16_t elf_machine;  /* EM_X86_64, EM_AARCH64 */
  const char* march;     /* compiler flags selecting the level */
  const char* cross_cc;  /* the Debian cross compiler for it from another arch */
  const char* cc_env;    /* environment variable naming its compiler */
  int32_t vector_lanes;  /* widest f32 vector the C printer may use */
} kiln_cpu_isa_t;

/* The level named |name|, NULL when kiln knows none by that name. */
const kiln_cpu_isa_t* kiln_cpu_isa_find(const char* name);

/* The known names, comma-separated (for messages and --help). */
const char* kiln_cpu_isa_names(void);

/* How well the running CPU executes |isa|: 0 not at all (another machine,
 * or features it lacks), higher is better (x86-64-v4 above x86-64-v3). */
int32_t kiln_cpu_isa_rank(const kiln_cpu_isa_t* isa);

/* The best level the running CPU executes, NULL when none is known. */
const kiln_cpu_isa_t* kiln_cpu_isa_host(void);

/* Checks that |len| bytes at |bytes| are an ELF64 little-endian shared
 * object for |isa|'s machine whose headers and loadable segments all lie
 * inside the bytes, so the dynamic loader never reads past them (a
 * truncated or corrupted object is refused here, not faulted on later).
 * Errors: PARSE_ERROR naming |what| and the first defect. */
kiln_status_t kiln_cpu_native_check(const uint8_t* bytes, uint64_t len, const kiln_cpu_isa_t* isa,
                                    const char* what);

/* Loads the best native object of |code| the running CPU executes and
 * resolves |names| (n of them) into |out| (kiln_cpu_module_unload). |what|
 * (the module's name) starts every message; *out_isa is the level loaded.
 * Errors: NOT_FOUND when no object suits this CPU (naming those there
 * are and this CPU's level), PARSE_ERROR for a malformed object,
 * IO_ERROR / NOT_FOUND from the dynamic loader and the symbol lookup. */
kiln_status_t kiln_cpu_native_load(const kiln_program_code_t* code, const char* what,
                                   const char* const* names, int32_t n, kiln_cpu_module_t* out,
                                   const char** out_isa);

#ifdef __cplusplus
}
#endif
#endif /* KILN_RUNTIME_CPU_NATIVE_H_ */
