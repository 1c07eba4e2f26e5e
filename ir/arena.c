/* Bump arena for IR: a linked list of blocks, freed all at once. */
#include "ir/arena.h"

#include <string.h>

struct kiln_arena_block_s {
  kiln_arena_block_t* next;
  size_t used, cap;
  /* payload follows, 16-aligned */
};

#define HDR ((sizeof(kiln_arena_block_t) + 15) & ~(size_t)15)

void kiln_arena_init(kiln_arena_t* arena, kiln_allocator_t allocator) {
  memset(arena, 0, sizeof(*arena));
  arena->allocator = allocator;
  arena->block_size = 64 * 1024;
}

void kiln_arena_deinit(kiln_arena_t* arena) {
  kiln_arena_block_t* b = arena->head;
  while (b) {
    kiln_arena_block_t* next = b->next;
    arena->allocator.free(arena->allocator.self, b);
    b = next;
  }
  arena->head = NULL;
  arena->total = 0;
}

void* kiln_arena_alloc(kiln_arena_t* arena, size_t size) {
  if (size == 0) size = 1;
  if (size > SIZE_MAX / 2) return NULL;
  size = (size + 15) & ~(size_t)15;
  kiln_arena_block_t* b = arena->head;
  if (!b || b->cap - b->used < size) {
    size_t cap = size > arena->block_size ? size : arena->block_size;
    kiln_arena_block_t* nb = arena->allocator.alloc(arena->allocator.self, HDR + cap);
    if (!nb) return NULL;
    nb->used = 0;
    nb->cap = cap;
    if (b && size > arena->block_size) {
      /* A big one-off: keep the current block as head so its space is used. */
      nb->next = b->next;
      b->next = nb;
    } else {
      nb->next = b;
      arena->head = nb;
    }
    b = nb;
  }
  char* p = (char*)b + HDR + b->used;
  b->used += size;
  arena->total += size;
  memset(p, 0, size);
  return p;
}

kiln_status_t kiln_arena_calloc(kiln_arena_t* arena, size_t count, size_t size,
                                const char* what, void** out_ptr) {
  if (size && count > SIZE_MAX / size)
    return kiln_make_status(KILN_LIMIT_EXCEEDED, "%s: %zu x %zu bytes overflows",
                            what, count, size);
  void* p = kiln_arena_alloc(arena, count * size);
  if (!p)
    return kiln_make_status(KILN_OUT_OF_MEMORY,
                            "out of memory allocating %zu bytes for %s",
                            count * size, what);
  *out_ptr = p;
  return NULL;
}

char* kiln_arena_strndup(kiln_arena_t* arena, const char* s, size_t n) {
  char* p = kiln_arena_alloc(arena, n + 1);
  if (!p) return NULL;
  if (n) memcpy(p, s, n);
  p[n] = 0;
  return p;
}
