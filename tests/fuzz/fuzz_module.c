/* libFuzzer harness: the .kiln module loader (runtime/module_file.c and
 * runtime/module.c) -- parsing and validation only: nothing is compiled or
 * run (the CPU section is C built at session creation, which is code by the
 * trust model and out of scope here). Each input is parsed twice: loaded
 * from memory (weights copied) and as a mapped file is (weights in place).
 *
 * A forger recomputes checksums, so the harness does too: when the input
 * holds a header, its total-length field is set to the input's length and
 * both CRCs are resealed, so mutations reach the section parsers and the
 * validator instead of stopping at the checksum. Inputs of odd length are
 * left as they are, so the checksum and length checks are fuzzed as well. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/runtime.h"
#include "runtime/module_file.h"

static void store_le64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint8_t* copy = malloc(size ? size : 1);
  if (!copy) return 0;
  if (size) memcpy(copy, data, size);
  if (size >= KILN_MODULE_HEADER_LEN && size % 2 == 0) {
    store_le64(copy + KILN_MODULE_OFF_TOTAL_LEN, size);
    kiln_module_reseal(copy, size);
  }
  kiln_module_t* m = NULL;
  kiln_status_t s = kiln_module_load_memory(copy, size, "fuzz.kiln", kiln_allocator_system(), &m);
  if (!s) {
    /* The accessors an application calls right after loading. */
    kiln_module_info_t mi;
    kiln_module_info(m, &mi);
    for (int32_t i = 0; i < mi.n_inputs; ++i) {
      kiln_dtype_t dt;
      kiln_shape_t sh = kiln_module_input_shape(m, i, &dt);
      (void)sh;
      (void)kiln_module_input_name(m, i);
    }
    for (int32_t i = 0; i < mi.n_outputs; ++i) {
      kiln_dtype_t dt;
      kiln_shape_t sh = kiln_module_output_shape(m, i, &dt);
      (void)sh;
      (void)kiln_module_output_name(m, i);
    }
  }
  kiln_status_free(s);
  kiln_module_release(m);
  /* The parse a mapped module file gets: weights left in the bytes. */
  kiln_program_t* p = NULL;
  s = kiln_module_parse_borrowing(copy, size, "fuzz.kiln", kiln_allocator_system(), &p);
  kiln_status_free(s);
  kiln_program_destroy(p);
  free(copy);
  return 0;
}
