/* The dynamic batcher (include/kiln/batcher.h).
 *
 * A request lives on its caller's stack: kiln_batcher_run validates it,
 * links it at the tail of the queue and sleeps on its own condition
 * variable until the worker (or a shutdown) marks it done. The worker takes
 * up to max_batch requests from the head once that many wait or the head has
 * waited max_delay_us, and runs them with the lock released, so callers keep
 * queueing the next batch meanwhile. One mutex guards the queue, the flags
 * and the figures; a request's fields are written by the worker only after
 * it left the queue and read by its caller only after `done`, both under
 * the mutex, so no request is touched by two threads at once. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/batcher.h"

#define MAX_DELAY_US_CAP 60000000ll

typedef struct request_s {
  struct request_s* next;
  const kiln_array_t* inputs;
  kiln_array_t* outputs;
  kiln_status_t status;
  bool done;
  pthread_cond_t cv;
  struct timespec arrived;
} request_t;

/* One module input or output: its batched shape and the bytes of one row. */
typedef struct port_s {
  const char* name;
  kiln_dtype_t dtype;
  kiln_shape_t shape; /* dim 0 = the module's batch */
  size_t row_bytes;
} port_t;

struct kiln_batcher_s {
  kiln_session_t* session;
  kiln_module_t* module;
  kiln_device_t* device;
  const char* model;
  int32_t n_in, n_out;
  port_t* in;
  port_t* out;
  kiln_array_t* batch_in;  /* module-batch-sized input arrays, reused */
  kiln_array_t* batch_out; /* one run's outputs (the session allocates them) */
  request_t** taken;       /* the batch being run */
  int32_t module_batch, max_batch;
  int32_t dyn_lo; /* a module compiled for a batch range: its lowest value; 0: a fixed batch */
  int64_t max_delay_us;

  pthread_mutex_t mu;
  pthread_cond_t work; /* the worker: a request arrived, or shutdown */
  pthread_cond_t idle; /* destroy: the last caller left */
  pthread_t worker;
  bool worker_started, stopping;
  request_t* head;
  request_t* tail;
  int32_t n_waiting;
  int32_t callers; /* threads inside kiln_batcher_run */
  kiln_batcher_stats_t stats;
};

void kiln_batcher_options_default(kiln_batcher_options_t* o) {
  memset(o, 0, sizeof(*o));
  o->max_delay_us = 2000;
}

static double seconds_between(const struct timespec* a, const struct timespec* b) {
  return (double)(b->tv_sec - a->tv_sec) + 1e-9 * (double)(b->tv_nsec - a->tv_nsec);
}

static struct timespec plus_us(struct timespec t, int64_t us) {
  t.tv_sec += (time_t)(us / 1000000);
  t.tv_nsec += (long)(us % 1000000) * 1000;
  if (t.tv_nsec >= 1000000000) {
    t.tv_sec += 1;
    t.tv_nsec -= 1000000000;
  }
  return t;
}

/* The rows a batch of |n| requests runs as. A module compiled for a batch
 * range (kiln compile --dim batch=LO..HI) runs exactly n (at least LO);
 * a fixed-shape module runs its own batch, the rows past n padded with
 * copies of the first request (their compute is the cost, counted in the
 * stats). */
static int32_t batch_rows(const kiln_batcher_t* b, int32_t n) {
  if (b->dyn_lo) return n > b->dyn_lo ? n : b->dyn_lo;
  return b->module_batch;
}

/* ---- creation --------------------------------------------------------- */

static kiln_status_t describe_ports(kiln_batcher_t* b, bool outputs) {
  const kiln_module_t* m = b->module;
  int32_t n = outputs ? b->n_out : b->n_in;
  port_t* ports = calloc((size_t)n + 1, sizeof(port_t));
  if (!ports) return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory creating a batcher", b->model);
  if (outputs) b->out = ports;
  else b->in = ports;
  for (int32_t i = 0; i < n; ++i) {
    port_t* p = &ports[i];
    p->name = outputs ? kiln_module_output_name(m, i) : kiln_module_input_name(m, i);
    p->shape = outputs ? kiln_module_output_shape(m, i, &p->dtype) : kiln_module_input_shape(m, i, &p->dtype);
    /* a batch-range module describes one sample: its arrays hold the most */
    if (b->dyn_lo && p->shape.rank >= 1 && p->shape.dims[0] == 1) p->shape.dims[0] = b->module_batch;
    char sh[160];
    kiln_shape_format(&p->shape, sh, sizeof sh);
    if (p->shape.rank < 1 || p->shape.dims[0] < 1 || p->shape.dims[0] > INT32_MAX)
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: %s '%s' has shape %s, which has no batch dim 0 to batch requests along",
                              b->model, outputs ? "output" : "input", p->name, sh);
    if (!outputs && i == 0) b->module_batch = (int32_t)p->shape.dims[0];
    if (p->shape.dims[0] != b->module_batch)
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: %s '%s' has shape %s, but input '%s' has batch %d: the batcher needs one "
                              "batch dim 0 on every input and output",
                              b->model, outputs ? "output" : "input", p->name, sh, b->in[0].name,
                              (int)b->module_batch);
    int64_t numel = 0;
    KILN_RETURN_IF_ERROR(kiln_shape_numel(&p->shape, &numel), "%s: %s '%s'", b->model,
                         outputs ? "output" : "input", p->name);
    p->row_bytes = (size_t)(numel / p->shape.dims[0]) * kiln_dtype_size(p->dtype);
  }
  return NULL;
}

static kiln_status_t check_options(kiln_batcher_t* b, const kiln_batcher_options_t* o) {
  kiln_batcher_options_t d;
  kiln_batcher_options_default(&d);
  if (!o) o = &d;
  if (o->max_batch < 0 || o->max_batch > b->module_batch)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: max_batch %d is out of range: input '%s' has batch %d, so 1..%d (0: %d); "
                            "compile the module with a larger batch for more",
                            b->model, (int)o->max_batch, b->in[0].name, (int)b->module_batch,
                            (int)b->module_batch, (int)b->module_batch);
  if (o->max_delay_us < 0 || o->max_delay_us > MAX_DELAY_US_CAP)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: max_delay_us %lld is out of range 0..%lld", b->model,
                            (long long)o->max_delay_us, MAX_DELAY_US_CAP);
  b->max_batch = o->max_batch ? o->max_batch : b->module_batch;
  b->max_delay_us = o->max_delay_us;
  return NULL;
}

static kiln_status_t alloc_buffers(kiln_batcher_t* b) {
  b->batch_in = calloc((size_t)b->n_in + 1, sizeof(kiln_array_t));
  b->batch_out = calloc((size_t)b->n_out + 1, sizeof(kiln_array_t));
  b->taken = calloc((size_t)b->max_batch, sizeof(request_t*));
  if (!b->batch_in || !b->batch_out || !b->taken)
    return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory creating a batcher", b->model);
  for (int32_t i = 0; i < b->n_in; ++i)
    KILN_RETURN_IF_ERROR(kiln_array_alloc(kiln_allocator_system(), b->in[i].dtype, &b->in[i].shape, &b->batch_in[i]),
                         "%s: batched input '%s'", b->model, b->in[i].name);
  return NULL;
}

static void* worker_main(void* arg);

static kiln_status_t start_threads(kiln_batcher_t* b) {
  /* Deadlines are on the monotonic clock: a wall-clock step must not
   * flush a batch early or hold one for hours. */
  pthread_condattr_t ca;
  if (pthread_condattr_init(&ca) || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC))
    return kiln_make_status(KILN_INTERNAL, "%s: pthread_condattr_setclock(CLOCK_MONOTONIC) failed", b->model);
  int rc = pthread_cond_init(&b->work, &ca);
  pthread_condattr_destroy(&ca);
  if (rc) return kiln_make_status(KILN_INTERNAL, "%s: pthread_cond_init failed: %s", b->model, strerror(rc));
  rc = pthread_cond_init(&b->idle, NULL);
  if (rc) {
    pthread_cond_destroy(&b->work);
    return kiln_make_status(KILN_INTERNAL, "%s: pthread_cond_init failed: %s", b->model, strerror(rc));
  }
  rc = pthread_create(&b->worker, NULL, worker_main, b);
  if (rc) {
    pthread_cond_destroy(&b->work);
    pthread_cond_destroy(&b->idle);
    return kiln_make_status(KILN_INTERNAL, "%s: cannot start the batcher's worker thread: %s", b->model,
                            strerror(rc));
  }
  b->worker_started = true;
  return NULL;
}

kiln_status_t kiln_batcher_create(kiln_module_t* module, kiln_device_t* device,
                                  const kiln_session_options_t* session_options,
                                  const kiln_batcher_options_t* options, kiln_batcher_t** out_batcher) {
  if (!module || !device || !out_batcher)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_batcher_create: NULL argument");
  kiln_batcher_t* b = calloc(1, sizeof(*b));
  if (!b) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory creating a batcher");
  if (pthread_mutex_init(&b->mu, NULL)) {
    free(b);
    return kiln_make_status(KILN_INTERNAL, "kiln_batcher_create: pthread_mutex_init failed");
  }
  kiln_module_info_t mi;
  kiln_module_info(module, &mi);
  b->module = module;
  b->device = device;
  kiln_module_retain(module);
  kiln_device_retain(device);
  b->model = mi.model_name && mi.model_name[0] ? mi.model_name : "module";
  b->n_in = mi.n_inputs;
  b->n_out = mi.n_outputs;
  kiln_status_t st = NULL;
  if (b->n_in < 1)
    st = kiln_make_status(KILN_INVALID_ARGUMENT, "%s: a module without inputs has nothing to batch", b->model);
  if (!st && kiln_module_dim_count(module) > 0) {
    /* the one dynamic dim is the outermost: the batch */
    const char* name = NULL;
    int64_t lo = 0, hi = 0;
    st = kiln_module_dim(module, 0, &name, &lo, &hi);
    int32_t ax = -1;
    for (int32_t i = 0; i < b->n_in && ax <= 0; ++i) ax = kiln_module_dim_axis(module, false, i);
    if (!st && (lo < 1 || hi > INT32_MAX || ax > 0))
      st = kiln_make_status(KILN_INVALID_ARGUMENT, "%s: dim '%s' range %lld..%lld is not a batch range", b->model,
                            name, (long long)lo, (long long)hi);
    if (!st) {
      b->dyn_lo = (int32_t)lo;
      b->module_batch = (int32_t)hi;
    }
  }
  if (!st) st = describe_ports(b, false);
  if (!st) st = describe_ports(b, true);
  if (!st) st = check_options(b, options);
  if (!st) st = alloc_buffers(b);
  if (!st) {
    /* One run at a time: the worker waits for each batch, so a second
     * slot would only hold a second arena. */
    kiln_session_options_t so;
    kiln_session_options_default(&so);
    so.slots = 1;
    st = kiln_session_create(module, device, session_options ? session_options : &so, &b->session);
  }
  if (!st) st = start_threads(b);
  if (st) {
    kiln_batcher_destroy(b);
    return kiln_status_annotate(st, "creating a batcher");
  }
  b->stats.module_batch = b->module_batch;
  b->stats.max_batch = b->max_batch;
  b->stats.max_delay_us = b->max_delay_us;
  *out_batcher = b;
  return NULL;
}

/* ---- shutdown --------------------------------------------------------- */

void kiln_batcher_shutdown(kiln_batcher_t* b) {
  if (!b) return;
  pthread_mutex_lock(&b->mu);
  if (!b->stopping) {
    b->stopping = true;
    for (request_t* r = b->head; r; r = r->next) {
      r->status = kiln_make_status(KILN_CANCELLED, "%s: the batcher was shut down before the request ran",
                                   b->model);
      r->done = true;
      b->stats.rejected++;
      pthread_cond_signal(&r->cv);
    }
    b->head = b->tail = NULL;
    b->n_waiting = 0;
  }
  pthread_cond_broadcast(&b->work);
  pthread_mutex_unlock(&b->mu);
}

void kiln_batcher_destroy(kiln_batcher_t* b) {
  if (!b) return;
  if (b->worker_started) {
    kiln_batcher_shutdown(b);
    pthread_join(b->worker, NULL);
    /* Callers woken by the shutdown still have to reacquire the mutex to
     * leave kiln_batcher_run; freeing it under them would be a
     * use-after-free. */
    pthread_mutex_lock(&b->mu);
    while (b->callers) pthread_cond_wait(&b->idle, &b->mu);
    pthread_mutex_unlock(&b->mu);
    pthread_cond_destroy(&b->work);
    pthread_cond_destroy(&b->idle);
  }
  pthread_mutex_destroy(&b->mu);
  kiln_session_destroy(b->session);
  for (int32_t i = 0; b->batch_in && i < b->n_in; ++i) kiln_array_free(kiln_allocator_system(), &b->batch_in[i]);
  free(b->batch_in);
  free(b->batch_out);
  free(b->taken);
  free(b->in);
  free(b->out);
  kiln_device_release(b->device);
  kiln_module_release(b->module);
  free(b);
}

/* ---- requests --------------------------------------------------------- */

/* A request's input |i| is one row of the module's: same dtype, rank and
 * dims but dim 0 = 1, with the bytes to read. */
static kiln_status_t check_request(const kiln_batcher_t* b, int32_t i, const kiln_array_t* a) {
  const port_t* p = &b->in[i];
  kiln_shape_t want = p->shape;
  want.dims[0] = 1;
  char got[160], exp[160];
  kiln_shape_format(&a->shape, got, sizeof got);
  kiln_shape_format(&want, exp, sizeof exp);
  if (a->dtype != p->dtype)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: request input '%s' has dtype %s, the module takes %s",
                            b->model, p->name, kiln_dtype_name(a->dtype), kiln_dtype_name(p->dtype));
  if (!kiln_shape_equal(&a->shape, &want))
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: request input '%s' has shape %s; a batcher request is one sample, shape %s "
                            "(the module runs %s)",
                            b->model, p->name, got, exp, kiln_shape_format(&p->shape, got, sizeof got));
  if (a->nbytes < p->row_bytes || (p->row_bytes && !a->data))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: request input '%s' holds %zu bytes, needs %zu", b->model,
                            p->name, a->nbytes, p->row_bytes);
  return NULL;
}

kiln_status_t kiln_batcher_run(kiln_batcher_t* b, const kiln_array_t* inputs, kiln_array_t* outputs) {
  if (!b || !inputs || (b->n_out > 0 && !outputs))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln_batcher_run: NULL argument");
  for (int32_t i = 0; i < b->n_out; ++i) memset(&outputs[i], 0, sizeof(outputs[i]));
  kiln_status_t bad = NULL;
  for (int32_t i = 0; i < b->n_in && !bad; ++i) bad = check_request(b, i, &inputs[i]);
  request_t r;
  memset(&r, 0, sizeof r);
  r.inputs = inputs;
  r.outputs = outputs;
  const bool cv_ok = !bad && !pthread_cond_init(&r.cv, NULL);
  if (!bad && !cv_ok) bad = kiln_make_status(KILN_INTERNAL, "%s: pthread_cond_init failed for a request", b->model);
  pthread_mutex_lock(&b->mu);
  if (!bad && b->stopping)
    bad = kiln_make_status(KILN_CANCELLED, "%s: the batcher is shut down", b->model);
  if (bad) {
    b->stats.rejected++;
    pthread_mutex_unlock(&b->mu);
    if (cv_ok) pthread_cond_destroy(&r.cv);
    return bad;
  }
  b->callers++;
  clock_gettime(CLOCK_MONOTONIC, &r.arrived);
  if (b->tail) b->tail->next = &r;
  else b->head = &r;
  b->tail = &r;
  b->n_waiting++;
  /* The worker sleeps until the queue is non-empty, then until the batch
   * is full or the head's deadline: both need only a first and a
   * max_batch-th arrival, but signalling every one is as cheap. */
  pthread_cond_signal(&b->work);
  while (!r.done) pthread_cond_wait(&r.cv, &b->mu);
  kiln_status_t st = r.status;
  if (--b->callers == 0 && b->stopping) pthread_cond_broadcast(&b->idle);
  pthread_mutex_unlock(&b->mu);
  pthread_cond_destroy(&r.cv);
  return st;
}

/* ---- the worker ------------------------------------------------------- */

/* A copy of |st| for each request of a failed batch: statuses are owned
 * values and every caller frees its own. */
static kiln_status_t batch_error(const kiln_batcher_t* b, kiln_status_t st, int32_t n) {
  return kiln_make_status(kiln_status_code(st), "%s: the batch of %d request%s failed: %s", b->model, (int)n,
                          n == 1 ? "" : "s", kiln_status_message(st));
}

/* Copies the |n| requests' rows in (padding to |rows| with copies of the
 * first), runs the session and copies each request's output rows out.
 * Called without the lock: the requests have left the queue and their
 * callers only read them after `done`. */
static void run_batch(kiln_batcher_t* b, request_t** req, int32_t n, int32_t rows) {
  for (int32_t i = 0; i < b->n_in; ++i) {
    const port_t* p = &b->in[i];
    kiln_array_t* a = &b->batch_in[i];
    a->shape.dims[0] = rows;
    a->nbytes = (size_t)rows * p->row_bytes;
    uint8_t* dst = a->data;
    for (int32_t j = 0; j < rows; ++j)
      memcpy(dst + (size_t)j * p->row_bytes, req[j < n ? j : 0]->inputs[i].data, p->row_bytes);
  }
  kiln_status_t st = kiln_session_run(b->session, b->batch_in, b->batch_out);
  for (int32_t i = 0; i < b->n_out && !st; ++i)
    if (b->batch_out[i].shape.rank < 1 || b->batch_out[i].shape.dims[0] != rows)
      st = kiln_make_status(KILN_INTERNAL, "%s: output '%s' came back without %d rows", b->model, b->out[i].name,
                            (int)rows);
  for (int32_t j = 0; j < n; ++j) {
    request_t* r = req[j];
    kiln_status_t rs = st ? batch_error(b, st, n) : NULL;
    for (int32_t i = 0; i < b->n_out && !rs; ++i) {
      const port_t* p = &b->out[i];
      kiln_shape_t sh = b->batch_out[i].shape;
      sh.dims[0] = 1;
      rs = kiln_array_alloc(kiln_allocator_system(), p->dtype, &sh, &r->outputs[i]);
      if (rs) rs = kiln_status_annotate(rs, "%s: output '%s' of a request", b->model, p->name);
      else memcpy(r->outputs[i].data, (const uint8_t*)b->batch_out[i].data + (size_t)j * p->row_bytes, p->row_bytes);
    }
    if (rs)
      for (int32_t i = 0; i < b->n_out; ++i) kiln_array_free(kiln_allocator_system(), &r->outputs[i]);
    r->status = rs;
  }
  for (int32_t i = 0; i < b->n_out; ++i) kiln_array_free(kiln_allocator_system(), &b->batch_out[i]);
  kiln_status_free(st);
}

/* Waits (lock held) for a batch to be due: max_batch requests, or the head
 * has waited max_delay_us. False when shutting down. */
static bool wait_for_batch(kiln_batcher_t* b) {
  while (!b->stopping && !b->head) pthread_cond_wait(&b->work, &b->mu);
  if (b->stopping) return false;
  const struct timespec deadline = plus_us(b->head->arrived, b->max_delay_us);
  while (!b->stopping && b->n_waiting < b->max_batch)
    if (pthread_cond_timedwait(&b->work, &b->mu, &deadline) == ETIMEDOUT) break;
  return !b->stopping;
}

static void* worker_main(void* arg) {
  kiln_batcher_t* b = arg;
  pthread_mutex_lock(&b->mu);
  while (wait_for_batch(b)) {
    int32_t n = 0;
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (b->head && n < b->max_batch) {
      request_t* r = b->head;
      b->head = r->next;
      r->next = NULL;
      b->taken[n++] = r;
      double waited = seconds_between(&r->arrived, &start);
      if (waited > b->stats.max_wait_s) b->stats.max_wait_s = waited;
    }
    if (!b->head) b->tail = NULL;
    b->n_waiting -= n;
    const int32_t rows = batch_rows(b, n);
    pthread_mutex_unlock(&b->mu);

    run_batch(b, b->taken, n, rows);
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);

    pthread_mutex_lock(&b->mu);
    double dt = seconds_between(&start, &end);
    kiln_batcher_stats_t* s = &b->stats;
    s->batches++;
    s->full_batches += n == b->max_batch;
    s->rows_run += (uint64_t)rows;
    s->padded_rows += (uint64_t)(rows - n);
    s->run_s += dt;
    if (dt > s->max_run_s) s->max_run_s = dt;
    for (int32_t j = 0; j < n; ++j) {
      request_t* r = b->taken[j];
      s->requests++;
      s->failed += r->status != NULL;
      r->done = true;
      pthread_cond_signal(&r->cv);
    }
  }
  pthread_mutex_unlock(&b->mu);
  return NULL;
}

void kiln_batcher_stats(kiln_batcher_t* b, kiln_batcher_stats_t* out) {
  memset(out, 0, sizeof(*out));
  if (!b) return;
  pthread_mutex_lock(&b->mu);
  *out = b->stats;
  out->waiting = b->n_waiting;
  pthread_mutex_unlock(&b->mu);
}
