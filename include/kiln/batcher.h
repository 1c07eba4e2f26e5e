/* kiln batcher: many threads' single-sample requests run as one batch.
 *
 * A server thread per client calls kiln_batcher_run with one sample (every
 * input's dim 0 is 1); a worker thread owned by the batcher gathers the
 * requests waiting, up to max_batch of them or until the oldest has waited
 * max_delay_us, copies them into the rows of one batched input, runs its
 * session once and copies each caller's rows of the outputs back to it.
 *
 *   kiln_batcher_options_t bo;  kiln_batcher_options_default(&bo);
 *   bo.max_batch = 8;  bo.max_delay_us = 2000;
 *   kiln_batcher_t* b;  KILN_RETURN_IF_ERROR(kiln_batcher_create(m, d, NULL, &bo, &b));
 *   ...on any number of threads: kiln_batcher_run(b, one_sample, outputs)...
 *   kiln_batcher_destroy(b);
 *
 * The model: dim 0 of every input and output is the batch, and row r of
 * each output depends only on row r of the inputs (true of inference CNNs,
 * encoders, MLPs; not of a model that reduces or sorts across dim 0).
 *
 * Batch size: the batcher asks one function how many rows to run n waiting
 * requests at (batch_rows in runtime/batcher.c). A module compiled for a
 * fixed batch B runs every batch at B: a partial batch (a max_delay flush)
 * is padded with copies of its first request, which costs the compute of
 * the padded rows -- kiln_batcher_stats reports them (padded_rows against
 * rows_run). A module compiled for a batch range (kiln compile --dim
 * batch=LO..HI) runs each batch at exactly n rows (at least LO), so nothing
 * is padded above LO. max_batch may not exceed a fixed module's B or a
 * range's HI.
 *
 * Threads: kiln_batcher_run is thread-safe; kiln_batcher_stats and
 * kiln_batcher_shutdown may be called from any thread at any time. The
 * batcher owns its session: the module and device are retained, and the
 * device must not be used by anything else while the batcher lives (a
 * device serves one thread at a time; the worker is that thread).
 */
#ifndef KILN_BATCHER_H_
#define KILN_BATCHER_H_

#include <stdint.h>

#include "kiln/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_batcher_s kiln_batcher_t;

typedef struct kiln_batcher_options_s {
  /* Requests per session run, 1 .. the module's batch (0: the module's
   * batch). */
  int32_t max_batch;
  /* How long the oldest waiting request waits for others before a partial
   * batch runs, in microseconds, 0 .. 60 s (0: run what is waiting at once,
   * which still batches the requests that queued during the last run). */
  int64_t max_delay_us;
} kiln_batcher_options_t;

/* max_batch 0 (the module's batch), max_delay_us 2000. */
KILN_API void kiln_batcher_options_default(kiln_batcher_options_t* o);

/* Creates a session of |module| on |device| (|session_options| NULL: one
 * slot, the defaults otherwise) and starts the worker thread. Errors:
 * INVALID_ARGUMENT for a module without inputs, an input or output of rank
 * 0 or whose dim 0 differs from the first input's (naming it and its
 * shape), max_batch above a fixed module's batch or out of range, a
 * max_delay_us out of range; whatever kiln_session_create returns; an
 * INTERNAL error naming the call when a thread cannot be started. */
KILN_API KILN_MUST_USE kiln_status_t kiln_batcher_create(kiln_module_t* module, kiln_device_t* device,
                                                         const kiln_session_options_t* session_options,
                                                         const kiln_batcher_options_t* options,
                                                         kiln_batcher_t** out_batcher);

/* Runs one sample: |inputs| has one array per module input, in order, each
 * with the module's dtype and shape but dim 0 = 1. Blocks until the batch
 * that holds it has run, then fills |outputs| (one per module output, dim 0
 * = 1, allocated with the system allocator: free with kiln_array_free);
 * on error they are zeroed. Errors: INVALID_ARGUMENT for a request whose
 * input has another dtype, shape or too few bytes (naming the input, both
 * shapes), checked before it is queued; the error of the session run that
 * held the request (every request of a failed batch gets it, saying how
 * many shared the batch); CANCELLED when the batcher was shut
 * down before the request ran (kiln_batcher_shutdown/_destroy). Thread-safe. */
KILN_API KILN_MUST_USE kiln_status_t kiln_batcher_run(kiln_batcher_t* b, const kiln_array_t* inputs,
                                                      kiln_array_t* outputs);

/* Stops taking requests: every request still waiting and every later
 * kiln_batcher_run returns CANCELLED at once; a batch already
 * running finishes and its callers get their outputs. Does not wait.
 * Idempotent; any thread. */
KILN_API void kiln_batcher_shutdown(kiln_batcher_t* b);

/* Shuts down, waits for the running batch and for every caller still
 * inside kiln_batcher_run to leave it, stops the worker and frees
 * everything (the session; the module and device are released). No call
 * on |b| may start after this returns. NULL: no-op. */
KILN_API void kiln_batcher_destroy(kiln_batcher_t* b);

/* What the batcher has done so far. */
typedef struct kiln_batcher_stats_s {
  uint64_t requests;      /* requests that ran (successfully or not) */
  uint64_t failed;        /* of those, requests whose batch failed */
  uint64_t rejected;      /* requests refused: bad shape, shut down */
  uint64_t batches;       /* session runs */
  uint64_t full_batches;  /* runs started because max_batch requests waited */
  uint64_t rows_run;      /* rows the session computed, padding included */
  uint64_t padded_rows;   /* rows computed for no request (fixed-batch module) */
  double run_s;           /* time in batches: copies in, session run, copies out */
  double max_run_s;       /* the longest batch */
  double max_wait_s;      /* the longest a request waited before its batch ran */
  int32_t waiting;        /* requests queued now, not yet in a batch */
  int32_t module_batch;   /* dim 0 of the module's inputs */
  int32_t max_batch;      /* the option in effect */
  int64_t max_delay_us;   /* the option in effect */
} kiln_batcher_stats_t;

/* A consistent snapshot of the figures. NULL |b|: zeros. Thread-safe. */
KILN_API void kiln_batcher_stats(kiln_batcher_t* b, kiln_batcher_stats_t* out);

#ifdef __cplusplus
}
#endif
#endif /* KILN_BATCHER_H_ */
