/* Ahead-of-time CPU code (`kiln compile -t cpu --cpu-target LIST`): the
 * plan's C printed once per ISA level (vector types capped at the level's
 * registers: 4 lanes for NEON, 8 for AVX2, 16 for AVX-512), compiled with
 * the level's compiler into a shared object, stored in the module
 * (runtime/cpu/cpu_native.h loads it). The C source stays in the module as
 * the fallback for a CPU none of the objects suits.
 *
 * The compiler: $KILN_CC_<ARCH> when set (KILN_CC_X86_64, KILN_CC_AARCH64),
 * else for this machine's own architecture $KILN_CC or "cc", else Debian's
 * cross compiler (aarch64-linux-gnu-gcc from gcc-aarch64-linux-gnu). The
 * flags are the loader's defaults with -march=native replaced by the
 * level's, and -s: symbols the loader does not look up cost module bytes
 * ($KILN_CPU_AOT_FLAGS replaces "-O3 -fopenmp -fno-math-errno"). */
#include <elf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/cpu/cpu_native.h"
#include "targets/cpu/cpu_internal.h"

#if defined(__x86_64__)
#define HOST_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define HOST_MACHINE EM_AARCH64
#else
#define HOST_MACHINE EM_NONE
#endif

#define MAX_LEVELS 8

static const char* isa_compiler(const kiln_cpu_isa_t* isa) {
  const char* e = getenv(isa->cc_env);
  if (e && *e) return e;
  if (isa->elf_machine == HOST_MACHINE) {
    const char* cc = getenv("KILN_CC");
    return cc && *cc ? cc : "cc";
  }
  return isa->cross_cc;
}

/* The levels named in |list|, each once, in the order given. */
static kiln_status_t parse_levels(const char* list, const kiln_cpu_isa_t** out, int32_t* n) {
  *n = 0;
  const char* p = list;
  while (*p) {
    size_t len = strcspn(p, ",");
    char name[64];
    if (len == 0 || len >= sizeof name)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "--cpu-target '%s': empty or overlong name", list);
    memcpy(name, p, len);
    name[len] = 0;
    p += len + (p[len] == ',');
    if (strcmp(name, "none") == 0) continue;
    const kiln_cpu_isa_t* isa = strcmp(name, "host") == 0 ? kiln_cpu_isa_host() : kiln_cpu_isa_find(name);
    if (!isa && strcmp(name, "host") == 0) continue; /* a CPU below every level: C only */
    if (!isa)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "--cpu-target '%s': expected host, none or %s", name,
                              kiln_cpu_isa_names());
    bool dup = false;
    for (int32_t i = 0; i < *n; ++i) dup |= out[i] == isa;
    if (dup) continue;
    if (*n == MAX_LEVELS)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "--cpu-target '%s': more than %d levels", list, MAX_LEVELS);
    out[(*n)++] = isa;
  }
  return NULL;
}

static kiln_status_t read_whole(const char* path, kiln_allocator_t a, uint8_t** out, uint64_t* out_len) {
  FILE* f = fopen(path, "rb");
  if (!f) return kiln_make_status(KILN_IO_ERROR, "cpu: cannot read '%s': %s", path, strerror(errno));
  kiln_status_t s = NULL;
  long len = -1;
  if (fseek(f, 0, SEEK_END) == 0) len = ftell(f);
  if (len <= 0 || fseek(f, 0, SEEK_SET) != 0) s = kiln_make_status(KILN_IO_ERROR, "cpu: '%s' is empty or unreadable", path);
  void* m = NULL;
  if (!s) s = kiln_allocator_malloc(a, (size_t)len, "native code", &m);
  if (!s && fread(m, 1, (size_t)len, f) != (size_t)len) s = kiln_make_status(KILN_IO_ERROR, "cpu: reading '%s' failed", path);
  fclose(f);
  if (s) {
    kiln_allocator_free(a, m);
    return s;
  }
  *out = m;
  *out_len = (uint64_t)len;
  return NULL;
}

/* One level's object from its C |code|: compile, read back, check. */
static kiln_status_t compile_level(const kiln_program_code_t* code, kiln_program_t* prog, const kiln_cpu_isa_t* isa,
                                   kiln_program_native_t* out, kiln_cpu_compile_stats_t* stats) {
  const char* fl = getenv("KILN_CPU_AOT_FLAGS");
  char flags[512];
  /* Tuned for this machine when it is of the level's architecture: tuning
   * picks no instruction outside the level, but it steers the vectoriser
   * (and so the order of sums) as -march=native does for `kiln run MODEL`;
   * with the generic tuning the module's outputs differed from the model's
   * in the last bits (ctest cli_module_bitexact). */
  snprintf(flags, sizeof flags, "%s %s%s -s", fl && *fl ? fl : "-O3 -fopenmp -fno-math-errno", isa->march,
           isa->elf_machine == HOST_MACHINE ? " -mtune=native" : "");
  const char* tmp = getenv("TMPDIR");
  char so[1024];
  snprintf(so, sizeof so, "%s/kiln-aot-%s-XXXXXX.so", tmp && *tmp ? tmp : "/tmp", isa->name);
  int fd = mkstemps(so, 3);
  kiln_status_t s = NULL;
  if (fd < 0) s = kiln_make_status(KILN_IO_ERROR, "cpu: cannot create '%s': %s", so, strerror(errno));
  else close(fd);
  const char* cc = isa_compiler(isa);
  if (!s) s = kiln_cpu_build_object_stats(code, cc, flags, so, stats);
  if (s)
    s = kiln_status_annotate(s, "--cpu-target %s (compiler '%s'; set %s to choose another, or --cpu-target none "
                             "for a module with C source only)", isa->name, cc, isa->cc_env);
  if (!s) s = read_whole(so, prog->allocator, &out->bytes, &out->len);
  if (fd >= 0) unlink(so);
  if (!s) s = kiln_cpu_native_check(out->bytes, out->len, isa, prog->model_name);
  if (!s) s = kiln_program_strdup(prog, isa->name, &out->isa);
  return s;
}

/* One level: print, compile, read the object back, check it. */
static kiln_status_t build_level(const kiln_plan_t* plan, kiln_program_t* prog, const kiln_cpu_isa_t* isa,
                                 kiln_program_native_t* out) {
  kiln_cpu_source_t src;
  KILN_RETURN_IF_ERROR(kiln_cpu_codegen_lanes(plan, isa->vector_lanes, &src));
  kiln_program_code_t code = {.text = src.text.data, .text_len = src.text.len, .n_parts = src.n_parts,
                              .parts = src.parts};
  kiln_status_t s = compile_level(&code, prog, isa, out, NULL);
  kiln_cpu_source_free(&src);
  return s;
}

/* |n| zeroed native-code slots, owned by |prog| from here: its destroy
 * frees what was built (prog->code.n_native counts the slots filled). */
static kiln_status_t native_slots(kiln_program_t* prog, int32_t n) {
  void* m = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(prog->allocator, sizeof(kiln_program_native_t) * (size_t)n,
                                             "native code", &m));
  memset(m, 0, sizeof(kiln_program_native_t) * (size_t)n);
  prog->code.native = m;
  return NULL;
}

kiln_status_t kiln_cpu_aot_build(const kiln_plan_t* plan, kiln_program_t* prog, const char* list) {
  if (!plan || !prog || !list) return kiln_make_status(KILN_INVALID_ARGUMENT, "cpu aot: NULL argument");
  const kiln_cpu_isa_t* levels[MAX_LEVELS];
  int32_t n = 0;
  KILN_RETURN_IF_ERROR(parse_levels(list, levels, &n));
  if (n == 0) return NULL;
  KILN_RETURN_IF_ERROR(native_slots(prog, n));
  for (int32_t i = 0; i < n; ++i) {
    prog->code.n_native = i + 1;
    KILN_RETURN_IF_ERROR(build_level(plan, prog, levels[i], &prog->code.native[i]));
  }
  return NULL;
}

/* The program's own C is what kiln_cpu_codegen prints: the vector lanes of
 * this machine (kiln_cpu_simd), so a level with those lanes compiles it as
 * it is; a level with other lanes needs the plan printed again. */
static bool level_prints_same(const kiln_cpu_isa_t* isa) { return isa->vector_lanes == kiln_cpu_simd().lanes; }

bool kiln_cpu_aot_from_code_ok(const char* list) {
  const kiln_cpu_isa_t* levels[MAX_LEVELS];
  int32_t n = 0;
  kiln_status_t s = parse_levels(list ? list : "", levels, &n);
  if (s) {
    kiln_status_free(s);
    return false;
  }
  for (int32_t i = 0; i < n; ++i)
    if (!level_prints_same(levels[i])) return false;
  return true;
}

kiln_status_t kiln_cpu_aot_build_code(kiln_program_t* prog, const char* list, kiln_cpu_compile_stats_t* stats) {
  if (!prog || !list) return kiln_make_status(KILN_INVALID_ARGUMENT, "cpu aot: NULL argument");
  const kiln_cpu_isa_t* levels[MAX_LEVELS];
  int32_t n = 0;
  KILN_RETURN_IF_ERROR(parse_levels(list, levels, &n));
  if (n == 0) return NULL;
  for (int32_t i = 0; i < n; ++i)
    if (!level_prints_same(levels[i]))
      return kiln_make_status(KILN_INTERNAL, "cpu aot: --cpu-target %s needs %d-lane C, the program has %d-lane C",
                              levels[i]->name, (int)levels[i]->vector_lanes, (int)kiln_cpu_simd().lanes);
  if (prog->code.native)
    return kiln_make_status(KILN_INTERNAL, "cpu aot: the program has native code already");
  KILN_RETURN_IF_ERROR(native_slots(prog, n));
  for (int32_t i = 0; i < n; ++i) {
    prog->code.n_native = i + 1;
    KILN_RETURN_IF_ERROR(compile_level(&prog->code, prog, levels[i], &prog->code.native[i], stats));
  }
  return NULL;
}
