/* CPU machine code from a module (see cpu_native.h): pick the object for
 * this CPU, check it, load it from memory. */
#define _GNU_SOURCE
#include "runtime/cpu/cpu_native.h"

#include <elf.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The levels, best last within an architecture. x86-64-v3 is AVX2 + FMA
 * (Haswell, Zen), x86-64-v4 adds AVX-512 F/BW/CD/DQ/VL (Skylake-SP, Zen 4);
 * aarch64 is ARMv8-A with NEON, which every AArch64 CPU has. The vector
 * lanes cap the C printer's vector types (lower.h's kiln_cpu_simd): wider
 * types than the registers are split by the compiler through the stack. */
static const kiln_cpu_isa_t isas[] = {
    {"x86-64-v3", EM_X86_64, "-march=x86-64-v3", "x86_64-linux-gnu-gcc", "KILN_CC_X86_64", 8},
    {"x86-64-v4", EM_X86_64, "-march=x86-64-v4", "x86_64-linux-gnu-gcc", "KILN_CC_X86_64", 16},
    {"aarch64", EM_AARCH64, "-march=armv8-a", "aarch64-linux-gnu-gcc", "KILN_CC_AARCH64", 4},
};
enum { N_ISAS = sizeof isas / sizeof isas[0] };

const kiln_cpu_isa_t* kiln_cpu_isa_find(const char* name) {
  for (int i = 0; name && i < N_ISAS; ++i)
    if (strcmp(isas[i].name, name) == 0) return &isas[i];
  return NULL;
}

static char isa_names[128];
static pthread_once_t isa_names_once = PTHREAD_ONCE_INIT;

static void list_isa_names(void) {
  size_t used = 0;
  for (int i = 0; i < N_ISAS && used < sizeof isa_names; ++i)
    used += (size_t)snprintf(isa_names + used, sizeof isa_names - used, "%s%s", i ? ", " : "", isas[i].name);
}

const char* kiln_cpu_isa_names(void) {
  pthread_once(&isa_names_once, list_isa_names);
  return isa_names;
}

int32_t kiln_cpu_isa_rank(const kiln_cpu_isa_t* isa) {
  if (!isa) return 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (isa->elf_machine != EM_X86_64) return 0;
  /* __builtin_cpu_supports reads CPUID and the OS's saved state (XCR0), so
   * AVX-512 turned off by the kernel or a hypervisor reads as absent. */
  __builtin_cpu_init();
  bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
            __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
            __builtin_cpu_supports("avx") && __builtin_cpu_supports("sse4.2");
  bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
            __builtin_cpu_supports("avx512vl");
  if (strcmp(isa->name, "x86-64-v4") == 0) return v4 ? 2 : 0;
  if (strcmp(isa->name, "x86-64-v3") == 0) return v3 ? 1 : 0;
  return 0;
#elif defined(__aarch64__)
  return isa->elf_machine == EM_AARCH64 ? 1 : 0;
#else
  return 0;
#endif
}

const kiln_cpu_isa_t* kiln_cpu_isa_host(void) {
  const kiln_cpu_isa_t* best = NULL;
  int32_t best_rank = 0;
  for (int i = 0; i < N_ISAS; ++i) {
    int32_t r = kiln_cpu_isa_rank(&isas[i]);
    if (r > best_rank) {
      best = &isas[i];
      best_rank = r;
    }
  }
  return best;
}

/* ---- checking an object ------------------------------------------------ */

static kiln_status_t bad(const char* what, const char* isa, const char* why, unsigned long long a,
                         unsigned long long b) {
  return kiln_make_status(KILN_PARSE_ERROR, "%s: the %s machine code is not a loadable shared object: %s (%llu, %llu)",
                          what, isa, why, a, b);
}

/* |off| + |n| inside |len|, overflow-safe. */
static bool inside(uint64_t off, uint64_t n, uint64_t len) { return off <= len && n <= len - off; }

kiln_status_t kiln_cpu_native_check(const uint8_t* b, uint64_t len, const kiln_cpu_isa_t* isa,
                                    const char* what) {
  const char* nm = isa ? isa->name : "?";
  Elf64_Ehdr eh;
  if (!b || len < sizeof eh) return bad(what, nm, "shorter than an ELF header", len, sizeof eh);
  memcpy(&eh, b, sizeof eh); /* the bytes may be unaligned */
  if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) return bad(what, nm, "no ELF magic", 0, 0);
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB)
    return bad(what, nm, "not 64-bit little-endian ELF (class, data)", eh.e_ident[EI_CLASS],
               eh.e_ident[EI_DATA]);
  if (eh.e_type != ET_DYN) return bad(what, nm, "not a shared object (type, expected)", eh.e_type, ET_DYN);
  if (!isa || eh.e_machine != isa->elf_machine)
    return bad(what, nm, "built for another machine (ELF machine, expected)", eh.e_machine,
               isa ? isa->elf_machine : 0);
  if (eh.e_ehsize != sizeof eh || eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 ||
      eh.e_phnum == 0xffff)
    return bad(what, nm, "odd header sizes (program header size, count)", eh.e_phentsize, eh.e_phnum);
  if (!inside(eh.e_phoff, (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr), len))
    return bad(what, nm, "program headers past the end (offset, object bytes)", eh.e_phoff, len);
  if (eh.e_shnum && (eh.e_shentsize != sizeof(Elf64_Shdr) ||
                     !inside(eh.e_shoff, (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr), len)))
    return bad(what, nm, "section headers past the end (offset, object bytes)", eh.e_shoff, len);
  bool load = false, dyn = false;
  for (uint16_t i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    memcpy(&ph, b + eh.e_phoff + (uint64_t)i * sizeof ph, sizeof ph);
    if (ph.p_type != PT_LOAD && ph.p_type != PT_DYNAMIC) continue;
    if (!inside(ph.p_offset, ph.p_filesz, len))
      return bad(what, nm, "a segment runs past the end, truncated? (segment end, object bytes)",
                 ph.p_offset + ph.p_filesz, len);
    if (ph.p_type == PT_LOAD && ph.p_filesz > ph.p_memsz)
      return bad(what, nm, "a segment is larger on file than in memory (file, memory)", ph.p_filesz,
                 ph.p_memsz);
    load |= ph.p_type == PT_LOAD;
    dyn |= ph.p_type == PT_DYNAMIC;
  }
  if (!load || !dyn) return bad(what, nm, "no loadable or no dynamic segment (load, dynamic)", load, dyn);
  return NULL;
}

/* ---- loading ----------------------------------------------------------- */

/* The object as a file the dynamic loader can open: an anonymous memory
 * file (nothing on disk, gone with the last reference), else a private
 * temporary file unlinked after dlopen. */
static kiln_status_t load_bytes(const kiln_program_native_t* nv, const char* what, const char* const* names,
                                int32_t n, kiln_cpu_module_t* out) {
  char path[1100];
  bool unlink_after = false;
  int fd = -1;
#ifdef MFD_CLOEXEC
  fd = memfd_create("kiln-cpu", MFD_CLOEXEC);
  if (fd >= 0) snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  if (fd >= 0 && access(path, R_OK) != 0) { /* no /proc: use a file */
    close(fd);
    fd = -1;
  }
#endif
  if (fd < 0) {
    const char* tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/kiln-cpu-XXXXXX.so", tmp && *tmp ? tmp : "/tmp");
    fd = mkstemps(path, 3);
    if (fd < 0)
      return kiln_make_status(KILN_IO_ERROR, "%s: cannot create a file for the %s machine code: %s", what,
                              nv->isa, strerror(errno));
    unlink_after = true;
  }
  const uint8_t* p = nv->bytes;
  uint64_t left = nv->len;
  kiln_status_t s = NULL;
  while (left && !s) {
    ssize_t k = write(fd, p, left > (1u << 30) ? (1u << 30) : (size_t)left);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0)
      s = kiln_make_status(KILN_IO_ERROR, "%s: writing the %s machine code failed: %s", what, nv->isa,
                           k < 0 ? strerror(errno) : "no progress");
    else {
      p += k;
      left -= (uint64_t)k;
    }
  }
  if (!s) s = kiln_cpu_module_load_so(path, names, n, out);
  /* A temporary file's name is unique: the mapping outlives its
   * descriptor and name. A memory file's /proc/self/fd name is unique
   * only while the descriptor is open (kiln_cpu_module_t.owns_fd). */
  if (!s && !unlink_after) {
    out->owns_fd = true;
    out->fd = fd;
  } else {
    close(fd);
  }
  if (unlink_after) unlink(path);
  if (s) return kiln_status_annotate(s, "%s: the %s machine code", what, nv->isa);
  return NULL;
}

kiln_status_t kiln_cpu_native_load(const kiln_program_code_t* code, const char* what,
                                   const char* const* names, int32_t n, kiln_cpu_module_t* out,
                                   const char** out_isa) {
  memset(out, 0, sizeof *out);
  /* Best first (a v4 object on an AVX-512 CPU before its v3 object); a
   * broken one gives way to the next, and the first failure is reported
   * when none loads. */
  kiln_status_t first = NULL;
  bool tried[64] = {false}; /* more objects than kiln has levels are never tried */
  for (;;) {
    int32_t best = -1, best_rank = 0;
    for (int32_t i = 0; i < code->n_native && i < 64; ++i) {
      int32_t r = tried[i] ? 0 : kiln_cpu_isa_rank(kiln_cpu_isa_find(code->native[i].isa));
      if (r > best_rank) {
        best = i;
        best_rank = r;
      }
    }
    if (best < 0) break;
    tried[best] = true;
    const kiln_program_native_t* nv = &code->native[best];
    const kiln_cpu_isa_t* isa = kiln_cpu_isa_find(nv->isa);
    kiln_status_t s = kiln_cpu_native_check(nv->bytes, nv->len, isa, what);
    if (!s) s = load_bytes(nv, what, names, n, out);
    if (!s) {
      kiln_status_free(first);
      if (out_isa) *out_isa = isa->name;
      return NULL;
    }
    if (first) kiln_status_free(s);
    else first = s;
  }
  if (first) return first;
  char have[256] = "";
  size_t used = 0;
  for (int32_t i = 0; i < code->n_native && used + 2 < sizeof have; ++i)
    used += (size_t)snprintf(have + used, sizeof have - used, "%s%.63s", i ? ", " : "", code->native[i].isa);
  const kiln_cpu_isa_t* host = kiln_cpu_isa_host();
  return kiln_make_status(KILN_NOT_FOUND, "%s: the module has machine code for %s; this CPU runs %s", what,
                          have[0] ? have : "no ISA", host ? host->name : "none of kiln's levels");
}
