/* FNV-1a, 64-bit: the one hash the printers, the CPU code sharing and the
 * SPIR-V memo key their texts by (a table lookup, never trusted alone:
 * callers compare the texts). runtime/code_cache.c keeps its own copy
 * (runtime/ may not include ir/; its trailer format fixes the function). */
#ifndef KILN_IR_FNV_H_
#define KILN_IR_FNV_H_

#include <stddef.h>
#include <stdint.h>

static inline uint64_t kiln_fnv1a(const void* data, size_t n) {
  const unsigned char* p = data;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

#endif  // KILN_IR_FNV_H_
