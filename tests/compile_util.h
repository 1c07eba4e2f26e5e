/* Test helper: an ONNX model file compiled through the public compiler API
 * into a module's bytes. Include after the kiln headers and <stdlib.h> /
 * <string.h>. */
#ifndef KILN_TESTS_COMPILE_UTIL_H
#define KILN_TESTS_COMPILE_UTIL_H

#include <stdint.h>

#include "kiln/compiler.h"

/* Compiles the model at |model| with the compiler options |opts| (name,
 * value, name, value, ..., NULL; an option may repeat, as "dim" does); the
 * status, and the module bytes in |out| (malloc'd, *out NULL when the copy
 * could not be made) when |out| is given and it compiled. */
static inline kiln_status_t tc_compile(const char* model, const char* const* opts, uint8_t** out,
                                       size_t* out_len) {
  kiln_compiler_t* c = NULL;
  if (out) *out = NULL;
  kiln_status_t s = kiln_compiler_create(KILN_COMPILER_ABI_VERSION, &c);
  if (!s) s = kiln_compiler_load_model(c, model);
  for (int i = 0; opts[i] && opts[i + 1] && !s; i += 2) s = kiln_compiler_set_option(c, opts[i], opts[i + 1]);
  if (!s) s = kiln_compiler_compile(c);
  const void* data = NULL;
  size_t len = 0;
  if (!s && out) s = kiln_compiler_module(c, &data, &len);
  if (!s && out) {
    *out = malloc(len);
    if (*out) memcpy(*out, data, len);
    *out_len = len;
  }
  kiln_compiler_destroy(c);
  return s;
}

#endif
