/* Hand-built programs (runtime/program.h) for the module and planner tests:
 * allocation helpers that abort the test on OOM, and one-call buffer and
 * kernel setters. */
#ifndef KILN_TESTS_PROGRAM_UTIL_H_
#define KILN_TESTS_PROGRAM_UTIL_H_

#include <stdlib.h>
#include <string.h>

#include "runtime/module_file.h"
#include "runtime/program.h"
#include "testing.h"

static inline void* pu_alloc(kiln_program_t* p, size_t n) {
  void* m = NULL;
  if (!CHECK_OK(kiln_allocator_malloc(p->allocator, n, "test", &m))) abort();
  return m;
}

static inline char* pu_str(kiln_program_t* p, const char* s) {
  char* out = NULL;
  if (!CHECK_OK(kiln_program_strdup(p, s, &out))) abort();
  return out;
}

/* Buffer |i|: dense bytes from dtype and dims. */
static inline void pu_buffer(kiln_program_t* p, int32_t i, const char* name, kiln_dtype_t dt,
                             kiln_program_buffer_kind_t kind, int32_t rank, const int64_t* dims, int32_t alias,
                             int32_t first, int32_t last, uint64_t const_offset) {
  kiln_program_buffer_t* b = &p->buffers[i];
  b->name = pu_str(p, name);
  b->dtype = dt;
  b->kind = kind;
  b->rank = rank;
  uint64_t n = 1;
  for (int32_t k = 0; k < rank; ++k) {
    b->shape[k] = dims[k];
    n *= (uint64_t)dims[k];
  }
  b->bytes = n * kiln_dtype_size(dt);
  b->alias_of = alias;
  b->first_use = first;
  b->last_use = last;
  b->const_offset = const_offset;
}

/* Kernel |k| with a 1x1x1 launch and in-place pair (in, out) (-1: none). */
static inline void pu_kernel(kiln_program_t* p, int32_t k, const char* name, const char* node, const char* op,
                             int32_t n_args, const int32_t* args, const uint8_t* access, int32_t in, int32_t out) {
  kiln_program_kernel_t* kk = &p->kernels[k];
  kk->name = pu_str(p, name);
  kk->node_name = pu_str(p, node);
  kk->op_type = pu_str(p, op);
  kk->n_args = n_args;
  kk->args = pu_alloc(p, sizeof(int32_t) * (size_t)(n_args ? n_args : 1));
  kk->access = pu_alloc(p, (size_t)(n_args ? n_args : 1));
  memcpy(kk->args, args, sizeof(int32_t) * (size_t)n_args);
  memcpy(kk->access, access, (size_t)n_args);
  for (int d = 0; d < 3; ++d) kk->groups[d] = kk->local[d] = 1;
  kk->inplace_in = in;
  kk->inplace_out = out;
}

/* Offset of the payload of section |tag| in a module's bytes (the layout of
 * runtime/module_file.h: 16-byte section heads, 8-byte aligned), or 0. */
static inline size_t pu_find_section(const uint8_t* b, size_t n, uint32_t tag, uint64_t* out_len) {
  size_t off = KILN_MODULE_HEADER_LEN;
  while (off + 16 <= n) {
    uint32_t t;
    uint64_t len;
    memcpy(&t, b + off, 4);
    memcpy(&len, b + off + 8, 8);
    if (t == tag) {
      if (out_len) *out_len = len;
      return off + 16;
    }
    off += 16 + (size_t)len;
    off += (8 - off % 8) % 8;
  }
  return 0;
}

#endif /* KILN_TESTS_PROGRAM_UTIL_H_ */
