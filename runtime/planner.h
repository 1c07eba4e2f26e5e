/* kiln memory planner: one arena for every intermediate of a program.
 *
 * Input: a program (runtime/program.h). Every root buffer (alias_of == -1)
 * that is an INPUT, OUTPUT, INTERMEDIATE or TEMP and is used by some kernel,
 * or is a model input/output, gets an offset in one arena; CONST buffers
 * live in the weights and are not planned. Aliases take their root's offset.
 *
 * Lifetimes come from the kernel steps: a root is live from its first_use to
 * its last_use (inclusive). Model inputs are live for the whole run and model
 * outputs from their first write to the last step, so neither is ever
 * overwritten. Placement is best-fit: each root goes to the smallest gap
 * among the already placed roots whose lifetimes overlap that holds it, else
 * the end, offsets rounded up to |alignment|. The order roots are placed in
 * matters (greedy by size alone leaves ~10% slack on ResNet-50), so the same
 * best-fit runs under four orders -- decreasing size, fullest step first,
 * size x lifetime, longest-lived first -- and the smallest arena wins (ties:
 * the earlier order). In place: when kernel k has an in-place pair, the
 * input's root dies at k (last_use == k, not a model input or output, at
 * least as many bytes) and the output's root starts at k (and is not a model
 * input), the output root shares the input's offset; such chains are merged
 * into one interval before placement.
 *
 * Reports: arena bytes, the naive size (sum of all planned roots, each
 * aligned) and the lower bound (the largest total of live bytes at any step,
 * with in-place pairs counted once). Thread-safe (no global state).
 */
#ifndef KILN_RUNTIME_PLANNER_H_
#define KILN_RUNTIME_PLANNER_H_

#include "runtime/program.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_memory_plan_s {
  int32_t n_buffers;
  /* Per program buffer: offset in the arena (aliases: their root's);
   * UINT64_MAX for constants and buffers that get no memory. */
  uint64_t* offsets;
  uint64_t arena_bytes;
  uint64_t naive_bytes;
  uint64_t lower_bound_bytes;
  int32_t n_planned;  /* roots placed */
  int32_t n_inplace;  /* roots that reuse a dying input's memory */
} kiln_memory_plan_t;

/* Plans |p| (which must validate) for a device whose buffer views must start
 * at multiples of |alignment| (a power of two >= 1). *out is filled; free it
 * with kiln_memory_plan_free. Errors: OUT_OF_MEMORY, INVALID_ARGUMENT (bad
 * alignment), LIMIT_EXCEEDED (arena size overflows). */
kiln_status_t kiln_memory_plan(const kiln_program_t* p, uint64_t alignment,
                               kiln_allocator_t allocator, kiln_memory_plan_t* out);
void kiln_memory_plan_free(kiln_allocator_t allocator, kiln_memory_plan_t* mp);

/* Checks a plan: every two planned roots whose lifetimes overlap occupy
 * disjoint byte ranges unless they are an allowed in-place pair, offsets are
 * aligned and inside the arena. For tests and --verify; errors name both
 * buffers. */
kiln_status_t kiln_memory_plan_verify(const kiln_program_t* p, const kiln_memory_plan_t* mp,
                                      uint64_t alignment);

#ifdef __cplusplus
}
#endif
#endif /* KILN_RUNTIME_PLANNER_H_ */
