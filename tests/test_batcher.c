/* The dynamic batcher (include/kiln/batcher.h) on the CPU target, with a
 * small model built here at batch 1 and at batch 4 from the same weights:
 *
 *   x[B,4,6,6] -> Conv(3x3, pad 1) -> Relu -> Flatten -> Gemm -> y[B,10]
 *   t[B,5] -> Mul(t, t) -> z[B,5]
 *
 *   - outputs through the batcher equal, bit for bit, the batch-1 module's
 *     for the same sample, with 8 threads sending 20 requests each; the
 *     figures add up (requests, rows run = requests + padded rows);
 *   - one client and a max delay: a lone request waits about max_delay,
 *     then runs as a padded batch; max_delay 0 runs it at once;
 *   - shutdown and destroy with requests waiting: each gets CANCELLED,
 *     later runs too, and destroy returns once the callers have left;
 *   - a request of the wrong shape, dtype or size is an error naming the
 *     input and both shapes; bad options and a module without a batch dim
 *     are errors naming what is wrong;
 *   - a module compiled for batches 1..4 runs each batch at its request
 *     count (nothing padded), bit for bit the module's run of each sample;
 *   - a batch whose run fails (integer division by zero in one request)
 *     fails every request of that batch with the run's error, and the
 *     batcher goes on serving.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "compiler/pipeline.h"
#include "kiln/batcher.h"
#include "target_graph_util.h"

#define BATCH 4
#define THREADS 8
#define PER_THREAD 20

static uint64_t seed_state;
static float rnd(void) {
  seed_state ^= seed_state << 13;
  seed_state ^= seed_state >> 7;
  seed_state ^= seed_state << 17;
  return (float)((double)(seed_state >> 11) / (double)(1ull << 52) - 1.0);
}

static kiln_array_t random_f32(int rank, const int64_t* dims) {
  kiln_array_t a = arr(KILN_DTYPE_F32, rank, dims);
  for (int64_t i = 0; a.data && i < kiln_array_numel(&a); ++i) ((float*)a.data)[i] = rnd();
  return a;
}

static bool weight(kiln_graph_t* g, const char* name, int rank, const int64_t* dims) {
  kiln_array_t w = random_f32(rank, dims);
  return w.data && CHECK_OK(kiln_graph_add_initializer(g, name, &w, NULL));
}

/* The model's graph at batch |b|; the same weights for every b (a fixed
 * seed). Prepared, and optimised when |optimize|. */
static kiln_graph_t* model_graph(int64_t b, bool optimize) {
  seed_state = 0x9E3779B97F4A7C15ull;
  kiln_graph_t* g = graph_new();
  if (!g) return NULL;
  kiln_attr_t conv[2] = {kiln_attr_make_ints("pads", 4, (int64_t[]){1, 1, 1, 1}),
                         kiln_attr_make_ints("kernel_shape", 2, (int64_t[]){3, 3})};
  bool ok = input(g, "x", KILN_DTYPE_F32, 4, (int64_t[]){b, 4, 6, 6}) &&
            input(g, "t", KILN_DTYPE_F32, 2, (int64_t[]){b, 5}) && weight(g, "w", 4, (int64_t[]){6, 4, 3, 3}) &&
            weight(g, "wg", 2, (int64_t[]){216, 10}) && weight(g, "bg", 1, (int64_t[]){10}) &&
            node1(g, "Conv", "conv", 2, (const char*[]){"x", "w"}, "c", 2, conv) &&
            node1(g, "Relu", "relu", 1, (const char*[]){"c"}, "r", 0, NULL) &&
            node1(g, "Flatten", "flat", 1, (const char*[]){"r"}, "f", 0, NULL) &&
            node1(g, "Gemm", "fc", 3, (const char*[]){"f", "wg", "bg"}, "y", 0, NULL) &&
            node1(g, "Mul", "square", 2, (const char*[]){"t", "t"}, "z", 0, NULL) &&
            CHECK_OK(kiln_graph_add_output(g, "y")) && CHECK_OK(kiln_graph_add_output(g, "z")) &&
            CHECK_OK(kiln_graph_prepare(g)) && (!optimize || CHECK_OK(kiln_graph_optimize(g, 1, NULL)));
  if (!ok) kiln_graph_destroy(g);
  return ok ? g : NULL;
}

/* The model compiled for batch |b|. */
static kiln_module_t* model(int64_t b) {
  kiln_graph_t* g = model_graph(b, true);
  kiln_module_t* m = g ? compile(g) : NULL;
  kiln_graph_destroy(g);
  return m;
}

/* The model compiled once for batches 1..BATCH (kiln compile --dim
 * batch=1..4): a batch-range module the batcher runs at exactly n rows. */
static kiln_module_t* dyn_model(void) {
  kiln_graph_t* g = model_graph(1, false);
  kiln_program_t* prog = NULL;
  kiln_module_t* m = NULL;
  kiln_compile_log_t log = {0};
  kiln_compile_config_t cc = {.target = kiln_target_find("cpu"), .opt = 1, .threads = 2, .model_name = "ranged",
                              .dyn_dim = "batch", .dyn_lo = 1, .dyn_hi = BATCH};
  if (g && CHECK_OK(kiln_compile_graph_passes(g, 1, cc.target, &log)) &&
      CHECK_OK(kiln_compile_program(g, &cc, &log, &prog)))
    CHECK_OK(kiln_module_wrap(prog, &m)); /* owns prog, even on failure */
  kiln_compile_log_free(&log);
  kiln_graph_destroy(g);
  return m;
}

static kiln_device_t* open_cpu(void) {
  kiln_device_open_options_t oo = {2, true, stderr};
  kiln_device_t* d = NULL;
  if (!CHECK_OK(kiln_device_open("cpu", &oo, al(), &d))) return NULL;
  return d;
}

/* A batcher of |m| on a device of its own (the worker is its one user). */
static kiln_batcher_t* batcher(kiln_module_t* m, int32_t max_batch, int64_t max_delay_us) {
  kiln_device_t* d = open_cpu();
  kiln_batcher_options_t bo;
  kiln_batcher_options_default(&bo);
  bo.max_batch = max_batch;
  bo.max_delay_us = max_delay_us;
  kiln_batcher_t* b = NULL;
  if (m && d && !CHECK_OK(kiln_batcher_create(m, d, NULL, &bo, &b))) b = NULL;
  kiln_device_release(d);
  return b;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One sample: x[1,4,6,6], t[1,5]. */
static void sample(kiln_array_t in[2]) {
  in[0] = random_f32(4, (int64_t[]){1, 4, 6, 6});
  in[1] = random_f32(2, (int64_t[]){1, 5});
}

/* ---- many threads, bit for bit ---------------------------------------- */

/* What the batcher computes for one request on its own: the batch-B
 * module with every row a copy of the sample; row 0 of the outputs. */
static kiln_status_t run_alone(kiln_session_t* s, const kiln_array_t* in, kiln_array_t* out) {
  kiln_array_t rows[2];
  memset(rows, 0, sizeof rows);
  kiln_status_t st = NULL;
  for (int k = 0; k < 2 && !st; ++k) {
    kiln_shape_t sh = in[k].shape;
    sh.dims[0] = BATCH;
    st = kiln_array_alloc(al(), in[k].dtype, &sh, &rows[k]);
    for (int r = 0; r < BATCH && !st; ++r) memcpy((char*)rows[k].data + (size_t)r * in[k].nbytes, in[k].data, in[k].nbytes);
  }
  if (!st) st = kiln_session_run(s, rows, out);
  free_arrays(rows, 2);
  return st;
}

typedef struct client_s {
  kiln_batcher_t* b;
  kiln_array_t in[PER_THREAD][2];
  kiln_array_t out[PER_THREAD][2];
  int failures;
  char first_error[512];
} client_t;

/* No CHECKs here: the test counters are not thread-safe; main checks. */
static void* client_main(void* arg) {
  client_t* c = arg;
  for (int k = 0; k < PER_THREAD; ++k) {
    kiln_status_t st = kiln_batcher_run(c->b, c->in[k], c->out[k]);
    if (st && !c->failures++) snprintf(c->first_error, sizeof c->first_error, "%s", kiln_status_message(st));
    kiln_status_free(st);
  }
  return NULL;
}

static void test_threads_bit_exact(void) {
  kiln_module_t* m1 = model(1);
  kiln_module_t* m4 = model(BATCH);
  kiln_session_t* s1 = session(m1);
  kiln_session_t* s4 = session(m4);
  kiln_batcher_t* b = batcher(m4, 0, 5000);
  static client_t clients[THREADS];
  memset(clients, 0, sizeof clients);
  seed_state = 42;
  for (int c = 0; c < THREADS; ++c) {
    clients[c].b = b;
    for (int k = 0; k < PER_THREAD; ++k) sample(clients[c].in[k]);
  }
  pthread_t th[THREADS];
  int started = 0;
  for (int c = 0; c < THREADS && b && s1; ++c, ++started)
    if (pthread_create(&th[c], NULL, client_main, &clients[c])) break;
  CHECK(!b || !s1 || started == THREADS);
  for (int c = 0; c < started; ++c) pthread_join(th[c], NULL);
  int compared = 0, differ = 0;
  double worst = 0;
  for (int c = 0; c < started; ++c) {
    CHECK_MSG(clients[c].failures == 0, "client %d: %d failed requests, first: %s", c, clients[c].failures,
              clients[c].first_error);
    for (int k = 0; k < PER_THREAD && !clients[c].failures; ++k) {
      kiln_array_t alone[2], one[2];
      memset(alone, 0, sizeof alone);
      memset(one, 0, sizeof one);
      if (CHECK_OK(run_alone(s4, clients[c].in[k], alone)) && CHECK_OK(kiln_session_run(s1, clients[c].in[k], one)))
        for (int o = 0; o < 2; ++o) {
          const kiln_array_t* got = &clients[c].out[k][o];
          CHECK(got->shape.rank == one[o].shape.rank && got->shape.dims[0] == 1 && got->nbytes == one[o].nbytes);
          differ += got->nbytes > alone[o].nbytes || memcmp(got->data, alone[o].data, got->nbytes) != 0;
          compared++;
          for (int64_t i = 0; got->nbytes == one[o].nbytes && i < kiln_array_numel(got); ++i) {
            double e = fabs((double)((const float*)got->data)[i] - ((const float*)one[o].data)[i]);
            if (e > worst) worst = e;
          }
        }
      free_arrays(alone, 2);
      free_arrays(one, 2);
    }
  }
  CHECK_MSG(differ == 0, "%d of %d outputs differ from the same module's run of the sample alone", differ, compared);
  /* The batch-1 module is another program (the GEMM over the batch is
   * tiled differently), so its sums may round differently. */
  printf("  batched vs the batch-1 module: max |difference| %.3g\n", worst);
  CHECK_MSG(worst <= 1e-4, "batched vs the batch-1 module: max |difference| %g", worst);
  kiln_batcher_stats_t st;
  kiln_batcher_stats(b, &st);
  printf("  %d threads x %d requests: %llu batches (%llu full), %llu rows run, %llu padded, "
         "%.2f ms per batch, longest wait %.2f ms\n",
         THREADS, PER_THREAD, (unsigned long long)st.batches, (unsigned long long)st.full_batches,
         (unsigned long long)st.rows_run, (unsigned long long)st.padded_rows,
         st.batches ? 1e3 * st.run_s / (double)st.batches : 0.0, 1e3 * st.max_wait_s);
  if (b && s1) {
    CHECK(st.requests == THREADS * PER_THREAD && st.failed == 0 && st.rejected == 0);
    CHECK(st.rows_run == st.batches * BATCH && st.rows_run == st.requests + st.padded_rows);
    CHECK(st.batches < st.requests); /* 8 threads, 5 ms: requests did share batches */
    CHECK(st.module_batch == BATCH && st.max_batch == BATCH && st.max_delay_us == 5000);
  }
  for (int c = 0; c < THREADS; ++c)
    for (int k = 0; k < PER_THREAD; ++k) {
      free_arrays(clients[c].in[k], 2);
      free_arrays(clients[c].out[k], 2);
    }
  kiln_batcher_destroy(b);
  kiln_session_destroy(s1);
  kiln_session_destroy(s4);
  kiln_module_release(m1);
  kiln_module_release(m4);
}

/* ---- a batch-range module ---------------------------------------------- */

/* Batches run at exactly their request count: a lone request is one row
 * (nothing padded), and 8 clients' outputs equal, bit for bit, the same
 * module run on each sample alone (a session at batch 1). */
static void test_range_module(void) {
  kiln_module_t* m = dyn_model();
  kiln_session_t* s = session(m);
  kiln_batcher_t* b = batcher(m, 0, 5000);
  static client_t clients[THREADS];
  memset(clients, 0, sizeof clients);
  kiln_array_t in[2], out[2];
  memset(out, 0, sizeof out);
  seed_state = 7;
  sample(in);
  if (b && s && CHECK_OK(kiln_batcher_run(b, in, out))) {
    kiln_batcher_stats_t st;
    kiln_batcher_stats(b, &st);
    CHECK(st.module_batch == BATCH && st.batches == 1 && st.rows_run == 1 && st.padded_rows == 0);
    free_arrays(out, 2);
  }
  free_arrays(in, 2);
  for (int c = 0; c < THREADS; ++c) {
    clients[c].b = b;
    for (int k = 0; k < PER_THREAD; ++k) sample(clients[c].in[k]);
  }
  pthread_t th[THREADS];
  int started = 0;
  for (int c = 0; c < THREADS && b && s; ++c, ++started)
    if (pthread_create(&th[c], NULL, client_main, &clients[c])) break;
  for (int c = 0; c < started; ++c) pthread_join(th[c], NULL);
  int differ = 0;
  for (int c = 0; c < started; ++c) {
    CHECK_MSG(clients[c].failures == 0, "client %d: %s", c, clients[c].first_error);
    for (int k = 0; k < PER_THREAD && !clients[c].failures; ++k) {
      kiln_array_t alone[2];
      memset(alone, 0, sizeof alone);
      if (CHECK_OK(kiln_session_run(s, clients[c].in[k], alone)))
        for (int o = 0; o < 2; ++o)
          differ += clients[c].out[k][o].nbytes != alone[o].nbytes ||
                    memcmp(clients[c].out[k][o].data, alone[o].data, alone[o].nbytes) != 0;
      free_arrays(alone, 2);
    }
  }
  CHECK_MSG(differ == 0, "%d outputs differ from the module's run of the sample alone", differ);
  kiln_batcher_stats_t st;
  kiln_batcher_stats(b, &st);
  printf("  batch range 1..%d, %d threads: %llu batches, %llu rows, %llu padded\n", BATCH, THREADS,
         (unsigned long long)st.batches, (unsigned long long)st.rows_run, (unsigned long long)st.padded_rows);
  if (b && s) CHECK(st.padded_rows == 0 && st.rows_run == st.requests && st.batches < st.requests);
  for (int c = 0; c < THREADS; ++c)
    for (int k = 0; k < PER_THREAD; ++k) {
      free_arrays(clients[c].in[k], 2);
      free_arrays(clients[c].out[k], 2);
    }
  kiln_batcher_destroy(b);
  kiln_session_destroy(s);
  kiln_module_release(m);
}

/* ---- max delay with one client ---------------------------------------- */

static void lone_request(kiln_module_t* m, int64_t delay_us) {
  kiln_batcher_t* b = batcher(m, 0, delay_us);
  if (!b) return;
  kiln_array_t in[2], out[2];
  sample(in);
  /* the first run also builds nothing (the session is ready), but warm it
   * so the timed one measures the wait, not first-touch page faults */
  if (CHECK_OK(kiln_batcher_run(b, in, out))) free_arrays(out, 2);
  double t0 = now_s();
  bool ok = CHECK_OK(kiln_batcher_run(b, in, out));
  double waited = now_s() - t0;
  kiln_batcher_stats_t st;
  kiln_batcher_stats(b, &st);
  printf("  max_delay %lld us, one client: %.2f ms (one batch runs in %.2f ms)\n", (long long)delay_us,
         1e3 * waited, 1e3 * st.max_run_s);
  /* It ran alone, as a padded batch, after the delay and not much later
   * (a loaded CI machine gets a generous second). */
  CHECK(ok && out[0].shape.dims[0] == 1 && out[1].shape.dims[0] == 1);
  CHECK(st.batches == 2 && st.full_batches == 0 && st.padded_rows == 2 * (BATCH - 1));
  CHECK_MSG(waited >= 1e-6 * (double)delay_us * 0.95, "waited %.3f ms, max delay %lld us", 1e3 * waited,
            (long long)delay_us);
  CHECK_MSG(waited <= 1e-6 * (double)delay_us + st.max_run_s + 1.0, "waited %.3f ms", 1e3 * waited);
  if (ok) free_arrays(out, 2);
  free_arrays(in, 2);
  kiln_batcher_destroy(b);
}

static void test_max_delay_flush(void) {
  kiln_module_t* m = model(BATCH);
  lone_request(m, 30000);
  lone_request(m, 0);
  kiln_module_release(m);
}

/* ---- shutdown --------------------------------------------------------- */

typedef struct waiter_s {
  kiln_batcher_t* b;
  kiln_array_t in[2], out[2];
  kiln_status_code_t code;
  char message[512];
} waiter_t;

static void* waiter_main(void* arg) {
  waiter_t* w = arg;
  kiln_status_t st = kiln_batcher_run(w->b, w->in, w->out);
  w->code = kiln_status_code(st);
  snprintf(w->message, sizeof w->message, "%s", kiln_status_message(st));
  kiln_status_free(st);
  return NULL;
}

/* Starts |n| requests on a batcher that will not run them for a minute
 * (max_batch 4 > n, max_delay 60 s) and waits until they are queued. */
static int start_waiters(kiln_batcher_t* b, waiter_t* w, pthread_t* th, int n) {
  int started = 0;
  for (int i = 0; i < n; ++i) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].b = b;
    sample(w[i].in);
    if (pthread_create(&th[i], NULL, waiter_main, &w[i])) break;
    started++;
  }
  kiln_batcher_stats_t st;
  double t0 = now_s();
  do {
    usleep(1000);
    kiln_batcher_stats(b, &st);
  } while (st.waiting < started && now_s() - t0 < 10);
  CHECK(st.waiting == started);
  return started;
}

static void check_cancelled(waiter_t* w, pthread_t* th, int n) {
  for (int i = 0; i < n; ++i) {
    pthread_join(th[i], NULL);
    CHECK_MSG(w[i].code == KILN_CANCELLED && strstr(w[i].message, "shut down"), "waiter %d: %s", i, w[i].message);
    CHECK(w[i].out[0].data == NULL && w[i].out[1].data == NULL);
    free_arrays(w[i].in, 2);
    free_arrays(w[i].out, 2);
  }
}

static void test_shutdown_pending(void) {
  kiln_module_t* m = model(BATCH);
  waiter_t w[3];
  pthread_t th[3];
  /* shutdown first: the waiting requests and a later one are cancelled */
  kiln_batcher_t* b = batcher(m, 0, 60000000);
  if (b) {
    int n = start_waiters(b, w, th, 3);
    kiln_batcher_shutdown(b);
    check_cancelled(w, th, n);
    kiln_array_t in[2], out[2];
    sample(in);
    CHECK_ERR(kiln_batcher_run(b, in, out), KILN_CANCELLED, "shut down");
    free_arrays(in, 2);
    kiln_batcher_stats_t st;
    kiln_batcher_stats(b, &st);
    CHECK(st.batches == 0 && st.rejected == (uint64_t)n + 1 && st.waiting == 0);
    kiln_batcher_destroy(b);
  }
  /* destroy with callers still inside kiln_batcher_run: they are woken,
   * and destroy waits for them to leave before it frees anything */
  b = batcher(m, 0, 60000000);
  if (b) {
    int n = start_waiters(b, w, th, 3);
    double t0 = now_s();
    kiln_batcher_destroy(b);
    CHECK(now_s() - t0 < 5);
    check_cancelled(w, th, n);
  }
  kiln_batcher_destroy(NULL);
  kiln_module_release(m);
}

/* ---- bad requests and options ----------------------------------------- */

static void test_bad_requests(void) {
  kiln_module_t* m = model(BATCH);
  kiln_batcher_t* b = batcher(m, 0, 0);
  kiln_array_t in[2], out[2];
  sample(in);
  if (b) {
    kiln_array_t wide[2] = {random_f32(4, (int64_t[]){BATCH, 4, 6, 6}), in[1]};
    CHECK_ERR(kiln_batcher_run(b, wide, out), KILN_INVALID_ARGUMENT,
              "request input 'x' has shape [4,4,6,6]; a batcher request is one sample, shape [1,4,6,6]");
    CHECK(out[0].data == NULL);
    kiln_array_free(al(), &wide[0]);
    kiln_array_t ints[2] = {in[0], arr(KILN_DTYPE_I32, 2, (int64_t[]){1, 5})};
    CHECK_ERR(kiln_batcher_run(b, ints, out), KILN_INVALID_ARGUMENT, "request input 't' has dtype i32");
    kiln_array_free(al(), &ints[1]);
    kiln_array_t short_x[2] = {in[0], in[1]};
    short_x[0].nbytes = 16;
    CHECK_ERR(kiln_batcher_run(b, short_x, out), KILN_INVALID_ARGUMENT, "request input 'x' holds 16 bytes");
    CHECK_ERR(kiln_batcher_run(b, NULL, out), KILN_INVALID_ARGUMENT, "NULL");
    /* and good requests still run */
    if (CHECK_OK(kiln_batcher_run(b, in, out))) free_arrays(out, 2);
    kiln_batcher_stats_t st;
    kiln_batcher_stats(b, &st);
    CHECK(st.rejected == 3 && st.requests == 1);
  }
  kiln_batcher_destroy(b);
  free_arrays(in, 2);

  kiln_device_t* d = open_cpu();
  kiln_batcher_options_t bo;
  kiln_batcher_options_default(&bo);
  kiln_batcher_t* none = NULL;
  bo.max_batch = BATCH + 1;
  CHECK_ERR(kiln_batcher_create(m, d, NULL, &bo, &none), KILN_INVALID_ARGUMENT,
            "max_batch 5 is out of range: input 'x' has batch 4");
  bo.max_batch = -1;
  CHECK_ERR(kiln_batcher_create(m, d, NULL, &bo, &none), KILN_INVALID_ARGUMENT, "max_batch -1");
  bo.max_batch = 2;
  bo.max_delay_us = -5;
  CHECK_ERR(kiln_batcher_create(m, d, NULL, &bo, &none), KILN_INVALID_ARGUMENT, "max_delay_us -5");
  CHECK_ERR(kiln_batcher_create(NULL, d, NULL, &bo, &none), KILN_INVALID_ARGUMENT, "NULL");
  CHECK(none == NULL);
  kiln_module_release(m);

  /* An output with another dim 0 than the inputs (a sum over the batch)
   * cannot be scattered back: named at creation. */
  kiln_graph_t* g = graph_new();
  kiln_attr_t keep = kiln_attr_make_int("keepdims", 0);
  bool ok = g && input(g, "x", KILN_DTYPE_F32, 2, (int64_t[]){BATCH, 3}) &&
            node1(g, "ReduceSum", "total", 1, (const char*[]){"x"}, "s", 1, &keep) &&
            CHECK_OK(kiln_graph_add_output(g, "s")) && CHECK_OK(kiln_graph_prepare(g));
  kiln_module_t* mr = ok ? compile(g) : NULL;
  if (mr)
    CHECK_ERR(kiln_batcher_create(mr, d, NULL, NULL, &none), KILN_INVALID_ARGUMENT,
              "output 's' has shape [], which has no batch dim 0");
  kiln_module_release(mr);
  kiln_graph_destroy(g);
  kiln_device_release(d);
}

/* ---- a failing batch -------------------------------------------------- */

typedef struct div_client_s {
  kiln_batcher_t* b;
  int32_t divisor;
  kiln_array_t in[2], out[1];
  kiln_status_code_t code;
  char message[512];
} div_client_t;

static void* div_main(void* arg) {
  div_client_t* c = arg;
  kiln_status_t st = kiln_batcher_run(c->b, c->in, c->out);
  c->code = kiln_status_code(st);
  snprintf(c->message, sizeof c->message, "%s", kiln_status_message(st));
  kiln_status_free(st);
  return NULL;
}

static void test_failed_batch(void) {
  kiln_graph_t* g = graph_new();
  bool ok = g && input(g, "a", KILN_DTYPE_I32, 2, (int64_t[]){BATCH, 3}) &&
            input(g, "b", KILN_DTYPE_I32, 2, (int64_t[]){BATCH, 3}) &&
            node1(g, "Div", "div", 2, (const char*[]){"a", "b"}, "q", 0, NULL) &&
            CHECK_OK(kiln_graph_add_output(g, "q")) && CHECK_OK(kiln_graph_prepare(g));
  kiln_module_t* m = ok ? compile(g) : NULL;
  kiln_graph_destroy(g);
  /* max_batch 4 requests, a minute's delay: the four run as one batch */
  kiln_batcher_t* b = batcher(m, BATCH, 60000000);
  div_client_t c[BATCH];
  pthread_t th[BATCH];
  int started = 0;
  for (int i = 0; i < BATCH && b; ++i) {
    memset(&c[i], 0, sizeof c[i]);
    c[i].b = b;
    for (int k = 0; k < 2; ++k) c[i].in[k] = arr(KILN_DTYPE_I32, 2, (int64_t[]){1, 3});
    for (int j = 0; j < 3 && c[i].in[1].data; ++j) {
      ((int32_t*)c[i].in[0].data)[j] = 100 * (i + 1) + j;
      ((int32_t*)c[i].in[1].data)[j] = i == 2 && j == 1 ? 0 : j + 1; /* request 2 divides by zero */
    }
    if (pthread_create(&th[i], NULL, div_main, &c[i])) break;
    started++;
  }
  for (int i = 0; i < started; ++i) {
    pthread_join(th[i], NULL);
    CHECK_MSG(c[i].code == KILN_INVALID_ARGUMENT && strstr(c[i].message, "batch of 4 requests failed") &&
                  strstr(c[i].message, "node 'div'") && strstr(c[i].message, "division by zero"),
              "request %d: %s", i, c[i].message);
    CHECK(c[i].out[0].data == NULL);
  }
  CHECK(!b || started == BATCH);
  /* the batcher goes on: request 0 alone (delay 0 now would need a new
   * batcher; a full batch of good requests is as good) */
  for (int i = 0; i < started; ++i) ((int32_t*)c[i].in[1].data)[1] = 7;
  started = 0;
  for (int i = 0; i < BATCH && b; ++i, ++started)
    if (pthread_create(&th[i], NULL, div_main, &c[i])) break;
  for (int i = 0; i < started; ++i) {
    pthread_join(th[i], NULL);
    CHECK_MSG(c[i].code == KILN_OK, "request %d: %s", i, c[i].message);
    const int32_t* q = c[i].out[0].data;
    CHECK(q && q[0] == 100 * (i + 1) && q[1] == (100 * (i + 1) + 1) / 7 && q[2] == (100 * (i + 1) + 2) / 3);
    free_arrays(c[i].out, 1);
  }
  for (int i = 0; i < BATCH && b; ++i) free_arrays(c[i].in, 2);
  kiln_batcher_stats_t st;
  kiln_batcher_stats(b, &st);
  CHECK(!b || (st.batches == 2 && st.failed == BATCH && st.requests == 2 * BATCH && st.padded_rows == 0));
  kiln_batcher_destroy(b);
  kiln_module_release(m);
}

int main(int argc, char** argv) {
  int rc = target_open(argc, argv);
  if (rc) return rc;
  RUN(test_threads_bit_exact);
  RUN(test_max_delay_flush);
  RUN(test_range_module);
  RUN(test_shutdown_pending);
  RUN(test_bad_requests);
  RUN(test_failed_batch);
  kiln_device_release(g_device);
  return kiln_test_finish();
}
