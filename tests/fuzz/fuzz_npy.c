/* libFuzzer harness: the .npy reader (runtime/npy.c, part of libkiln_rt).
 * Each input is a file; what reads back is written out again and read a
 * second time, which must give the same dtype, shape and bytes (float64
 * input comes back as float32). The array cap is 64 MiB so that a header
 * cannot ask for more than the fuzzer's memory limit. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "kiln/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static char in[256], again[256];
  if (!in[0]) {
    fz_path(in, sizeof in, "in.npy");
    fz_path(again, sizeof again, "again.npy");
  }
  fz_write(in, data, size);
  kiln_allocator_t al = kiln_allocator_system();
  kiln_npy_read_options_t o = {.max_bytes = 64u << 20, .refuse_f64 = size & 1};
  kiln_array_t a, b;
  bool f64 = false;
  kiln_status_t s = kiln_npy_read_with(in, &o, al, &a, &f64);
  if (s) {
    kiln_status_free(s);
    return 0;
  }
  s = kiln_npy_write(again, &a);
  if (!s) s = kiln_npy_read(again, al, &b);
  if (!s) {
    if (b.dtype != a.dtype || b.shape.rank != a.shape.rank || b.nbytes != a.nbytes ||
        (a.nbytes && memcmp(a.data, b.data, a.nbytes) != 0))
      abort(); /* the writer and the reader disagree */
    kiln_array_free(al, &b);
  }
  kiln_status_free(s);
  kiln_array_free(al, &a);
  return 0;
}
