/* kiln arena: bump allocation for per-graph/per-compile IR.
 *
 * Everything allocated from an arena is freed at once by kiln_arena_reset
 * or kiln_arena_deinit. Blocks come from the arena's allocator; requests
 * larger than the block size get a block of their own. Not thread-safe.
 */
#ifndef KILN_IR_ARENA_H_
#define KILN_IR_ARENA_H_

#include <stddef.h>

#include "kiln/array.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_arena_block_s kiln_arena_block_t;

typedef struct kiln_arena_s {
  kiln_allocator_t allocator;
  kiln_arena_block_t* head;
  size_t block_size;
  size_t total; /* bytes handed out, for reporting */
} kiln_arena_t;

void kiln_arena_init(kiln_arena_t* arena, kiln_allocator_t allocator);
void kiln_arena_deinit(kiln_arena_t* arena);
/* Zeroed memory aligned to 16, or NULL when the allocator fails. */
void* kiln_arena_alloc(kiln_arena_t* arena, size_t size);
/* Like kiln_arena_alloc but returns an OUT_OF_MEMORY status naming |what|. */
kiln_status_t kiln_arena_calloc(kiln_arena_t* arena, size_t count, size_t size,
                                const char* what, void** out_ptr);
/* Copies |n| bytes of |s| and adds a NUL; NULL on failure. */
char* kiln_arena_strndup(kiln_arena_t* arena, const char* s, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* KILN_IR_ARENA_H_ */
