/* kiln peak probe: the machine's measured f32 FLOP/s and memory bandwidth.
 *
 * Both probes are tensor-IR kernels compiled through the CPU backend
 * (targets/cpu), so they get exactly the compiler, flags and OpenMP runtime
 * the real kernels get -- "percent of peak" then compares like with like.
 *
 *   FLOP/s     one PARALLEL loop over the threads; each thread keeps K
 *              independent accumulator vectors in a PRIVATE buffer
 *              acc[K][16] (UNROLLED over K, VECTORIZED 16 wide) and runs
 *              acc = fma(acc, m, c) many times: the printer turns that into
 *              register-resident vector FMAs. 2 FLOP per lane per FMA.
 *   bandwidth  a STREAM-like copy (dst = src) and triad (a = b + s*c) over a
 *              large footprint (default 256 MiB in all), PARALLEL over row
 *              blocks, VECTORIZED inside; bytes = reads + writes (no
 *              write-allocate traffic counted, as STREAM does). The better of
 *              the two is reported.
 * Each probe runs |repeat| times after one warm-up; the best run counts
 * (a peak is a maximum, not a typical value).
 *
 * Usage:
 *   kiln_peak_options_t o; kiln_peak_options_default(&o); o.threads = 2;
 *   kiln_peak_t pk; KILN_RETURN_IF_ERROR(kiln_peak_measure(&o, &pk));
 *   printf("%.1f GFLOP/s %.1f GB/s\n", pk.gflops, pk.gbs);
 * Thread-compatible. Errors: compiler failures (with the compiler output)
 * and out-of-memory from the backend.
 */
#ifndef KILN_COMPILER_PEAK_H_
#define KILN_COMPILER_PEAK_H_

#include <stddef.h>

#include "targets/cpu/cpu_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_peak_options_s {
  int32_t threads;          /* 0 = number of online cores */
  int64_t bandwidth_bytes;  /* footprint of the bandwidth probe; 0 = 256 MiB */
  int32_t repeat;           /* timed runs per probe (best counts); 0 = 15 */
  const kiln_cpu_options_t* cpu; /* compiler/cache settings; NULL = defaults */
} kiln_peak_options_t;

void kiln_peak_options_default(kiln_peak_options_t* o);

typedef struct kiln_peak_s {
  double gflops;       /* f32 GFLOP/s (1e9) */
  double gbs;          /* GB/s (1e9 bytes) */
  double copy_gbs, triad_gbs;
  int32_t threads;
  double seconds;      /* wall time the probe took, compile included */
} kiln_peak_t;

/* Measures both peaks. *out is written only on success. */
kiln_status_t kiln_peak_measure(const kiln_peak_options_t* options, kiln_peak_t* out);

/* "model name" of the first CPU in /proc/cpuinfo ("unknown" if absent),
 * whitespace-trimmed, into buf (always NUL-terminated). */
void kiln_peak_cpu_model(char* buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* KILN_COMPILER_PEAK_H_ */
