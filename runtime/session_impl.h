/* Private parts of a session, shared by runtime/session.c (create, runs)
 * and runtime/profile.c (tables and traces). */
#ifndef KILN_RUNTIME_SESSION_IMPL_H_
#define KILN_RUNTIME_SESSION_IMPL_H_

#include <stdio.h>

#include "kiln/runtime.h"
#include "runtime/device.h"
#include "runtime/planner.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One run in flight at a time per slot: its own arena, buffer views and a
 * command buffer recorded once at session creation. */
typedef struct kiln_session_slot_s {
  kiln_device_buffer_t* arena;
  kiln_device_buffer_t** views; /* per program buffer (NULL: none needed) */
  kiln_device_cmd_t* cmd;
  bool busy;
  uint64_t run;
  /* Dynamic dims: the value the views and the command buffer are recorded
   * for (0: none recorded), and the arena's size, which only grows (the
   * largest value this slot has run). */
  int64_t n;
  uint64_t arena_bytes;
} kiln_session_slot_t;

typedef struct kiln_hetero_s kiln_hetero_t;

struct kiln_session_s {
  kiln_module_t* module;
  const kiln_program_t* p;
  kiln_device_t* dev;
  kiln_session_options_t opts;
  kiln_device_executable_t* exe;
  kiln_memory_plan_t mp; /* the plan at dim value mp_n */
  int64_t mp_n;          /* 1 without dynamic dims */
  int32_t dims_buffer;   /* the KILN_PB_DIMS buffer, or -1 */
  uint64_t alignment;
  kiln_device_buffer_t* weights;
  uint64_t weights_bytes;
  kiln_device_buffer_t** weight_views; /* per program buffer: CONST views */
  uint8_t* barrier_before;             /* per kernel, at mp_n: a barrier is recorded before it */
  /* Run-time checks (KILN_PB_STATUS words): the word's buffer and the
   * kernel that writes it, in kernel order. */
  int32_t n_checks;
  int32_t* check_buffer;
  int32_t* check_kernel;
  int32_t n_barriers;
  kiln_session_slot_t* slots;
  int32_t n_slots;
  uint64_t next_run;
  /* profiling (opts.profile) */
  kiln_profile_entry_t* prof;
  uint64_t* ts;
  int32_t prof_runs;
  bool prof_first_dropped; /* the warm-up run left the totals */
  double last_run_s; /* device time of the last profiled run */
  /* Heterogeneous programs (kernels on the host CPU too): the segments and
   * their sessions (runtime/session_hetero.c); then |exe|, |slots| and the
   * other per-device fields above stay empty. NULL otherwise. */
  kiln_hetero_t* het;
  /* Shape buckets (runtime/session_buckets.c): one session per bucket of
   * the module, bucket 0's made with this one, the others at their first
   * run; |last_bucket| ran last and is the one whose memory figures and
   * profile this session reports. NULL without buckets (then nothing here
   * is used); with them, every other per-device field stays empty. */
  kiln_session_t** buckets;
  int32_t n_buckets, last_bucket;
  /* A bucket's own session: its weights keep the module's layout, and a
   * blob equal to |weights_of|'s (the first bucket's session, which
   * outlives it) is viewed there rather than copied (|weights_borrowed|). */
  bool bucket_weights, weights_borrowed;
  const kiln_session_t* weights_of;
  /* A staged module (runtime/session_staged.c): the stages' sessions and
   * the runs in flight; every per-device field above stays empty. NULL
   * otherwise. */
  struct kiln_staged_session_s* stg;
};

/* Runs that a session made of other sessions (heterogeneous, staged) ran
 * whole at enqueue: their outputs wait here for kiln_session_wait. */
typedef struct kiln_done_run_s {
  bool busy;
  uint64_t run;
  kiln_array_t* outputs; /* the program's n_outputs, owned until taken */
} kiln_done_run_t;
typedef struct kiln_done_runs_s {
  kiln_done_run_t* runs;
  int32_t n;
} kiln_done_runs_t;

/* |slots| runs of |s|'s outputs; kiln_done_runs_free undoes it, also after
 * a failure. Errors: OUT_OF_MEMORY naming the model. */
KILN_MUST_USE kiln_status_t kiln_done_runs_init(const kiln_session_t* s, kiln_done_runs_t* d, int32_t slots);
void kiln_done_runs_free(const kiln_session_t* s, kiln_done_runs_t* d);
/* A free run to fill (LIMIT_EXCEEDED when all hold one), then, once it is
 * filled, kiln_done_runs_keep gives it the session's next run id. */
KILN_MUST_USE kiln_status_t kiln_done_runs_slot(const kiln_session_t* s, kiln_done_runs_t* d, kiln_done_run_t** out);
void kiln_done_runs_keep(kiln_session_t* s, kiln_done_run_t* r, uint64_t* out_run);
/* Moves run |run|'s outputs to |outputs|; INVALID_ARGUMENT when it is not
 * held. */
KILN_MUST_USE kiln_status_t kiln_done_runs_take(const kiln_session_t* s, kiln_done_runs_t* d, uint64_t run,
                                                kiln_array_t* outputs);

/* runtime/session_hetero.c: |s| has module, p, dev and opts set. Errors
 * name the model and the segment; kiln_session_destroy cleans up. */
KILN_MUST_USE kiln_status_t kiln_hetero_session_create(kiln_session_t* s);
void kiln_hetero_destroy(kiln_session_t* s);
/* The device buffers of kernel |k|'s arguments in slot |sl|, as its
 * command buffer binds them (one per argument into |args|). */
void kiln_session_kernel_args(const kiln_session_t* s, const kiln_session_slot_t* sl, int32_t k,
                              kiln_device_buffer_t** args);
KILN_MUST_USE kiln_status_t kiln_hetero_enqueue(kiln_session_t* s, const kiln_array_t* inputs, uint64_t* out_run);
KILN_MUST_USE kiln_status_t kiln_hetero_wait(kiln_session_t* s, uint64_t run, kiln_array_t* outputs);
void kiln_hetero_memory(const kiln_session_t* s, kiln_session_memory_t* out);

/* kiln_session_create for a shape bucket's module (session_buckets.c):
 * |bucket| keeps the weights in the module's layout; |weights_of| (NULL:
 * none) is a session whose equal weights it shares. */
KILN_MUST_USE kiln_status_t kiln_session_create_bucket(kiln_module_t* module, kiln_device_t* device,
                                                       const kiln_session_options_t* options, bool bucket,
                                                       const kiln_session_t* weights_of, kiln_session_t** out_session);

/* runtime/session_buckets.c: |s| has module, p, dev and opts set. */
KILN_MUST_USE kiln_status_t kiln_buckets_session_create(kiln_session_t* s);
void kiln_buckets_destroy(kiln_session_t* s);
KILN_MUST_USE kiln_status_t kiln_buckets_enqueue(kiln_session_t* s, const kiln_array_t* inputs, uint64_t* out_run);
KILN_MUST_USE kiln_status_t kiln_buckets_wait(kiln_session_t* s, uint64_t run, kiln_array_t* outputs);
/* runtime/session_staged.c: |s| has module, p, dev and opts set. */
KILN_MUST_USE kiln_status_t kiln_staged_session_create(kiln_session_t* s);
void kiln_staged_session_destroy(kiln_session_t* s);
KILN_MUST_USE kiln_status_t kiln_staged_enqueue(kiln_session_t* s, const kiln_array_t* inputs, uint64_t* out_run);
KILN_MUST_USE kiln_status_t kiln_staged_wait(kiln_session_t* s, uint64_t run, kiln_array_t* outputs);
/* The stages' sessions' figures, summed. */
void kiln_staged_memory(const kiln_session_t* s, kiln_session_memory_t* out);
/* Adds |part|'s memory figures (arenas, weights, barriers, dispatches) to
 * |out|: a session made of the sessions of its parts. */
void kiln_session_memory_add(kiln_session_memory_t* out, const kiln_session_t* part);
/* The session whose figures |s| reports: the bucket that ran last, or |s|. */
const kiln_session_t* kiln_session_current(const kiln_session_t* s);
/* Lines on the segments, their transfers and (profiled) their time. */
void kiln_hetero_print(const kiln_session_t* s, FILE* out);

#ifdef __cplusplus
}
#endif
#endif /* KILN_RUNTIME_SESSION_IMPL_H_ */
