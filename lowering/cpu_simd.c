/* The vector unit of the CPU this process runs on (see lower.h). Read at
 * run time, never from the compiler's predefined macros: kiln may be built
 * on one machine (or for a generic x86-64) and run on another, and the CPU
 * target compiles its C on the machine that runs it, with -march=native.
 * The lowering sizes GEMM/conv register tiles from it and the CPU printer
 * caps its vector types at it. */
#include "lowering/lower.h"

kiln_cpu_simd_t kiln_cpu_simd(void) {
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  /* __builtin_cpu_supports checks CPUID and that the OS saves the state
   * (XCR0), so AVX-512 disabled by the kernel or a hypervisor reads as
   * absent. Without AVX-512, GCC lowers a 64-byte vector type into pieces
   * shuffled through general registers and the stack: 16-lane code is then
   * several times slower than 8-lane code. */
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return (kiln_cpu_simd_t){16, 32};
  if (__builtin_cpu_supports("avx")) return (kiln_cpu_simd_t){8, 16};
  return (kiln_cpu_simd_t){4, 16};
#elif defined(__aarch64__)
  return (kiln_cpu_simd_t){4, 32}; /* NEON (and the 128-bit SVE minimum) */
#else
  return (kiln_cpu_simd_t){4, 16};
#endif
}
