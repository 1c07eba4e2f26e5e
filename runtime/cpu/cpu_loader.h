/* kiln CPU loader: a module's C unit -> the system compiler -> a cached
 * shared object -> dlopen'd kernels.
 *
 * This is the piece of the CPU backend that libkiln_rt ships: the CPU
 * device (runtime/cpu/cpu_device.c) loads a module's code section with it,
 * and the compile side (targets/cpu: kiln_cpu_compile) loads the unit it
 * just printed with it. The input is the code section as a module holds it
 * (kiln_program_code_t: one C translation unit plus (offset, length) parts
 * [0] prelude, [1..n-2] units, [n-1] epilogue), so large units compile as
 * parts in parallel: up to 3 parts per job, at most $KILN_CPU_JOBS (default:
 * the cores) compilers at once, each starting the next part as it ends. Compiler $KILN_CC, else
 * clang where it is on PATH and links OpenMP code, else "cc"; flags
 * $KILN_CPU_FLAGS or "-O3 -march=native -fopenmp -fno-math-errno";
 * $KILN_CPU_DUMP names a folder that receives the source. Objects are cached
 * by a hash of the source, compiler, flags, compiler version and CPU, and so
 * are the parts' objects (by their own text): a unit that differs from a
 * cached one in a few kernels compiles only the parts holding those (a unit
 * goes to the part its kernel's name hashes to) and links the others.
 *
 * Thread-safe: concurrent loads (threads or processes, same key or not) are
 * fine; a loaded module is used by one thread at a time.
 */
#ifndef KILN_RUNTIME_CPU_LOADER_H_
#define KILN_RUNTIME_CPU_LOADER_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kiln/status.h"
#include "runtime/program.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_cpu_options_s {
  const char* compiler;   /* default: $KILN_CC, or NULL: clang when usable, else "cc" */
  const char* flags;      /* default: $KILN_CPU_FLAGS or "-O3 -march=native -fopenmp -fno-math-errno" */
  const char* cache_dir;  /* default: see above; "" disables the cache */
  int32_t threads;        /* 0 = number of cores (the executors' setting; loading ignores it) */
  bool keep_source;       /* also write <hash>.c next to the .so */
  const char* dump_dir;   /* when set, write the generated C there too */
  FILE* progress;         /* a compile's progress line (runtime/progress.h; NULL: quiet) */
} kiln_cpu_options_t;

/* Fills |o| from the environment (KILN_CC, KILN_CPU_FLAGS, KILN_CPU_DUMP). */
void kiln_cpu_options_default(kiln_cpu_options_t* o);

/* Timings of a compile. kiln_cpu_module_load fills compile_s, load_s,
 * cache_hit, so_path and, when it ran the compiler, compiler_cpu_s (the
 * compilers' and the linker's CPU seconds, all parts together), parts (the
 * translation units the code was split into), parts_reused, jobs (compilers
 * run at once) and compiler; kiln_cpu_compile adds codegen_s and source_bytes. */
typedef struct kiln_cpu_compile_stats_s {
  double codegen_s, compile_s, load_s;
  double compiler_cpu_s;
  int32_t parts, jobs;
  int32_t parts_reused; /* of the parts, those whose object came from the code cache */
  bool cache_hit;
  size_t source_bytes;
  char so_path[1024];
  char compiler[64]; /* the compiler that ran (a miss only) */
} kiln_cpu_compile_stats_t;

/* What every generated kernel is: arguments in the kernel's parameter order. */
typedef void (*kiln_cpu_kernel_fn)(void* const* args);

/* A loaded shared object and its kernels. */
typedef struct kiln_cpu_module_s {
  void* handle;                  /* dlopen handle */
  kiln_cpu_kernel_fn* fns;       /* one per requested symbol (malloc'd) */
  void (*set_threads)(int);      /* kiln_set_threads from the .so */
  /* A module's machine code loaded from an anonymous memory file: the file
   * stays open while the object is loaded, because the dynamic loader
   * knows the object by its name, /proc/self/fd/N, and hands an object
   * already loaded under a name back for a new dlopen of that name; with
   * the descriptor closed, the next module's memory file could get N, and
   * its dlopen the first module's code. */
  bool owns_fd;
  int fd;
} kiln_cpu_module_t;

/* Compiles |code| (or finds it in the cache), loads it and resolves |names|
 * (n of them). |code| must have passed kiln_program_validate's checks (at
 * least two parts, all inside the text); it is only read. |options| NULL =
 * defaults; |stats| may be NULL. On success *out owns the handle
 * (kiln_cpu_module_unload). Errors: NOT_FOUND (no compiler, missing symbol),
 * DEVICE_ERROR with the compiler's output, the failing kernel and where the
 * source was kept, IO_ERROR, OUT_OF_MEMORY. */
kiln_status_t kiln_cpu_module_load(const kiln_program_code_t* code,
                                   const kiln_cpu_options_t* options, const char* const* names,
                                   int32_t n, kiln_cpu_module_t* out,
                                   kiln_cpu_compile_stats_t* stats);

/* dlopens the shared object at |path| and resolves |names| (n of them),
 * kiln_set_threads and kiln_abi_version (which must be 1) into |out|, which
 * it fills whole (fd and owns_fd cleared). Errors: IO_ERROR with the dynamic loader's reason, NOT_FOUND naming a
 * missing symbol. */
kiln_status_t kiln_cpu_module_load_so(const char* path, const char* const* names, int32_t n,
                                      kiln_cpu_module_t* out);

/* Compiles |code| with |cc| and |flags| (split on whitespace) into the
 * shared object |so_path| without loading it or touching the cache: the
 * ahead-of-time build of `kiln compile --cpu-target` (targets/cpu/cpu_aot.c).
 * Large units compile as parts in parallel, as kiln_cpu_module_load does.
 * Errors: as kiln_cpu_module_load's compile errors. */
kiln_status_t kiln_cpu_build_object(const kiln_program_code_t* code, const char* cc, const char* flags,
                                    const char* so_path);
/* The same, adding the compile's wall and compiler CPU seconds to |stats|
 * (when not NULL) and setting its parts, jobs and compiler. */
kiln_status_t kiln_cpu_build_object_stats(const kiln_program_code_t* code, const char* cc, const char* flags,
                                          const char* so_path, kiln_cpu_compile_stats_t* stats);

/* Promotes every OpenMP runtime loaded in the process to RTLD_NODELETE: its
 * worker threads outlive a parallel region, so it must outlive the object
 * that pulled it in (a kernel object, a plugin). Call after each dlopen of
 * code that may use OpenMP. */
void kiln_cpu_pin_openmp(void);

/* Unloads and zeroes |m|; a zeroed module is a no-op. */
void kiln_cpu_module_unload(kiln_cpu_module_t* m);

/* CLOCK_MONOTONIC in seconds. */
double kiln_cpu_now(void);

#ifdef __cplusplus
}
#endif
#endif /* KILN_RUNTIME_CPU_LOADER_H_ */
