/* Memory of a range inside the shapes (see pipeline_seq.h): the buffers'
 * sizes per value of the dim into the program, and the arena at both ends
 * of the range against the lower bound at each. */
#include <stdio.h>

#include "compiler/pipeline_seq.h"
#include "lowering/plan_seq_mem.h"
#include "runtime/planner.h"

/* The planner's figures for |p| with its dim at |n|. */
static kiln_status_t plan_at(const kiln_program_t* p, int64_t n, uint64_t alignment, uint64_t* arena,
                             uint64_t* bound) {
  kiln_program_t at;
  kiln_memory_plan_t mp = {0};
  KILN_RETURN_IF_ERROR(kiln_program_at(p, n, kiln_allocator_system(), &at));
  kiln_status_t s = kiln_memory_plan(&at, alignment, kiln_allocator_system(), &mp);
  kiln_program_at_free(kiln_allocator_system(), &at);
  *arena = mp.arena_bytes;
  *bound = mp.lower_bound_bytes;
  kiln_memory_plan_free(kiln_allocator_system(), &mp);
  return s;
}

kiln_status_t kiln_seq_memory_text(const kiln_program_t* p, uint64_t alignment, char* buf, size_t len) {
  if (!p->n_dims || !p->dim_axis) return kiln_make_status(KILN_INVALID_ARGUMENT, "no dim inside the shapes");
  const kiln_program_dim_t* d = &p->dims[0];
  uint64_t a[2], b[2];
  KILN_RETURN_IF_ERROR(plan_at(p, d->lo, alignment, &a[0], &b[0]));
  KILN_RETURN_IF_ERROR(plan_at(p, d->hi, alignment, &a[1], &b[1]));
  snprintf(buf, len, "arena %.3f MB at %s=%lld (lower bound %.3f MB), %.3f MB at %s=%lld (lower bound %.3f MB)",
           (double)a[0] / 1e6, d->name, (long long)d->lo, (double)b[0] / 1e6, (double)a[1] / 1e6, d->name,
           (long long)d->hi, (double)b[1] / 1e6);
  return NULL;
}

kiln_status_t kiln_compile_seq_memory(kiln_plan_t* const* plans, const char* name, int64_t lo, int64_t hi,
                                      kiln_compile_log_t* log, kiln_program_t* p) {
  int64_t* sizes = NULL;
  int32_t kept = 0, varies = 0;
  bool unverified = false;
  KILN_RETURN_IF_ERROR(kiln_plan_seq_bytes(plans, lo, hi, p->allocator, &sizes, &kept, &unverified));
  for (int32_t i = 0; i < p->n_buffers; ++i) {
    const bool v = sizes[3 * i + 1] || sizes[3 * i + 2];
    varies += v;
    if (!v) sizes[3 * i] = (int64_t)p->buffers[i].bytes; /* unused constants carry none */
  }
  p->dim_bytes = sizes;
  KILN_RETURN_IF_ERROR(kiln_program_validate(p), "sizes per value of dim '%s'", name);
  char text[300];
  KILN_RETURN_IF_ERROR(kiln_seq_memory_text(p, 64, text, sizeof text));
  if (unverified)
    KILN_RETURN_IF_ERROR(kiln_compile_log_line(log, "memory", "dim '%s': %lld..%lld is too long a range to check "
                                               "every kernel at every length (more than %lld checks): every buffer "
                                               "keeps the top of the range's size", name, (long long)lo,
                                               (long long)hi, (long long)KILN_PLAN_SEQ_MEM_CHECKS));
  return kiln_compile_log_line(log, "memory", "dim '%s': %d buffers sized per value (%d roots that change keep the "
                               "top of the range's size); %s", name, (int)varies, (int)kept, text);
}
