/* Schedule primitives on the tensor IR.
 *
 * A schedule is data: an ordered list of steps, each naming the loops (by
 * their variable name, unique within a kernel) or buffers it acts on. Lowering
 * records the default schedule it used next to the naive kernel, so later
 * passes and the auto-tuner can enumerate alternatives and re-apply them.
 *
 * Naming: split(L, f) makes loops "L.o" (extent ceil(E/f)) and "L.i"
 * (extent f); fuse(A, B) makes "A.B"; cache_read makes buffer "<buf>.local"
 * (or ".shared"/".private" by scope) with copy loops "<buf>.c0", ".c1", ...
 *
 * Steps (fields used):
 *   SPLIT(loop, factor)            non-divisible extents get a guard
 *   REORDER(loops[n])              listed loops are permuted in place within
 *                                  their perfect nest (outermost first)
 *   TILE(loop, loop2, factor, factor2)  split both, reorder to o,o,i,i
 *   FUSE(loop, loop2)              loop2 must be loop's entire body
 *   VECTORIZE(loop) UNROLL(loop) PARALLEL(loop)   set the loop kind
 *   BIND(loop, tag)                bind to a GPU work-group/work-item id
 *   CACHE_READ(buffer, loop, scope)  stage the region of |buffer| read inside
 *                                  |loop| into a new LOCAL/PRIVATE buffer at
 *                                  the top of |loop|'s body; loads rewritten
 *   CACHE_WRITE(buffer, loop, scope) accumulate into a local buffer inside
 *                                  |loop| and write the region back after it
 *   COMPUTE_INLINE(buffer)         the stage that writes |buffer| (an
 *                                  injective nest: buffer[v...] = f(v...))
 *                                  is substituted into every load of it and
 *                                  removed; |buffer| must not be a param
 *                                  that something outside reads
 *   COMPUTE_AT(buffer, loop)       the stage writing |buffer| moves inside
 *                                  |loop| of its consumer, computing only the
 *                                  region that iteration reads
 * Errors name the step, the loop/buffer and the reason (unknown loop, not a
 * perfect nest, factor <= 0, ...).
 */
#ifndef KILN_IR_TIR_SCHEDULE_H_
#define KILN_IR_TIR_SCHEDULE_H_

#include "ir/tir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tir_sched_kind_e {
  TIR_SCHED_SPLIT,
  TIR_SCHED_REORDER,
  TIR_SCHED_TILE,
  TIR_SCHED_FUSE,
  TIR_SCHED_VECTORIZE,
  TIR_SCHED_UNROLL,
  TIR_SCHED_PARALLEL,
  TIR_SCHED_BIND,
  TIR_SCHED_CACHE_READ,
  TIR_SCHED_CACHE_WRITE,
  TIR_SCHED_COMPUTE_INLINE,
  TIR_SCHED_COMPUTE_AT,
} tir_sched_kind_t;

#define TIR_SCHED_MAX_LOOPS 16

typedef struct tir_sched_step_s {
  tir_sched_kind_t kind;
  const char* loop;
  const char* loop2;
  const char* loops[TIR_SCHED_MAX_LOOPS]; /* REORDER */
  int32_t n_loops;
  int64_t factor, factor2;
  tir_thread_tag_t tag;
  const char* buffer;
  tir_scope_t scope;
} tir_sched_step_t;

typedef struct tir_schedule_s {
  int32_t n, cap;
  tir_sched_step_t* steps; /* arena-allocated by the builders below */
} tir_schedule_t;

/* Builders append a step (strings are copied into the ctx arena). */
tir_schedule_t* tir_schedule_new(tir_ctx_t* c);
void tir_sched_split(tir_ctx_t* c, tir_schedule_t* s, const char* loop, int64_t factor);
void tir_sched_reorder(tir_ctx_t* c, tir_schedule_t* s, int32_t n, const char* const* loops);
void tir_sched_tile(tir_ctx_t* c, tir_schedule_t* s, const char* a, const char* b, int64_t fa,
                    int64_t fb);
void tir_sched_fuse(tir_ctx_t* c, tir_schedule_t* s, const char* a, const char* b);
void tir_sched_vectorize(tir_ctx_t* c, tir_schedule_t* s, const char* loop);
void tir_sched_unroll(tir_ctx_t* c, tir_schedule_t* s, const char* loop);
void tir_sched_parallel(tir_ctx_t* c, tir_schedule_t* s, const char* loop);
void tir_sched_bind(tir_ctx_t* c, tir_schedule_t* s, const char* loop, tir_thread_tag_t tag);
void tir_sched_cache_read(tir_ctx_t* c, tir_schedule_t* s, const char* buffer, const char* loop,
                          tir_scope_t scope);
void tir_sched_cache_write(tir_ctx_t* c, tir_schedule_t* s, const char* buffer, const char* loop,
                           tir_scope_t scope);
void tir_sched_compute_inline(tir_ctx_t* c, tir_schedule_t* s, const char* buffer);
void tir_sched_compute_at(tir_ctx_t* c, tir_schedule_t* s, const char* buffer, const char* loop);

/* Applies every step of |s| to |f| in order, then simplifies. On error
 * nothing is returned and the status names the failing step. */
kiln_status_t tir_schedule_apply(tir_ctx_t* c, const tir_func_t* f, const tir_schedule_t* s,
                                 tir_func_t** out);
/* One line per step, e.g. "split(oh, 4); reorder(oc.o, oh.o, ...)". */
void tir_schedule_print(const tir_schedule_t* s, FILE* out);

#ifdef __cplusplus
}
#endif
#endif
