/* kiln-rt-run --clients N: N threads each send single-sample requests, one
 * at a time, for a count or a time, in two phases of the same run:
 *
 *   unbatched  every client has its own device and session of the sample
 *              module (the model at batch 1) -- one session per thread, as
 *              the runtime's threading rules say;
 *   batched    every client calls one kiln_batcher_t of MODULE, which runs
 *              up to --max-batch requests at once after at most
 *              --max-delay-us.
 *
 * Both phases start with one untimed request per client (first-touch page
 * faults, lazy driver work), then the clients start together at a barrier.
 * Latency is per request, from the call to its return; throughput is the
 * phase's requests over its wall time. Each client's inputs are the same in
 * both phases, so its last outputs are compared across them. */
#include "tools/rt/rt_clients.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/batcher.h"

#define MAX_LATENCIES (1 << 24)

typedef struct phase_s phase_t;

typedef struct client_s {
  phase_t* ph;
  int32_t index;
  kiln_array_t* in;   /* one sample per module input */
  kiln_array_t* last; /* this phase's last outputs */
  double* lat;
  int64_t n_lat, cap_lat;
  kiln_status_t error;
} client_t;

struct phase_s {
  const rt_clients_options_t* o;
  kiln_module_t* sample;   /* unbatched: each client's session runs it */
  kiln_batcher_t* batcher; /* batched */
  int32_t n_in, n_out;
  /* The start gate: clients check in when set up and warm, and start
   * timing together when the main thread opens it. */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int32_t ready;
  bool go, abandon;
  kiln_batcher_stats_t warm; /* the batcher's figures when the timing began */
};

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void free_arrays(kiln_array_t* a, int32_t n) {
  for (int32_t i = 0; a && i < n; ++i) kiln_array_free(kiln_allocator_system(), &a[i]);
}

static kiln_status_t one_request(client_t* c, kiln_session_t* s, kiln_array_t* out) {
  free_arrays(out, c->ph->n_out);
  return c->ph->batcher ? kiln_batcher_run(c->ph->batcher, c->in, out) : kiln_session_run(s, c->in, out);
}

static kiln_status_t keep_latency(client_t* c, double dt) {
  if (c->n_lat == c->cap_lat) {
    if (c->cap_lat >= MAX_LATENCIES)
      return kiln_make_status(KILN_LIMIT_EXCEEDED, "client %d: more than %d requests in one phase", (int)c->index,
                              MAX_LATENCIES);
    int64_t cap = c->cap_lat ? 2 * c->cap_lat : 1024;
    double* p = realloc(c->lat, (size_t)cap * sizeof(double));
    if (!p) return kiln_make_status(KILN_OUT_OF_MEMORY, "client %d: out of memory for latencies", (int)c->index);
    c->lat = p;
    c->cap_lat = cap;
  }
  c->lat[c->n_lat++] = dt;
  return NULL;
}

/* A client thread. It always checks in at the gate, so that a client that
 * fails to set up cannot leave the main thread waiting for it. */
static void* client_main(void* arg) {
  client_t* c = arg;
  phase_t* ph = c->ph;
  const rt_clients_options_t* o = ph->o;
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_status_t st = NULL;
  if (!ph->batcher) {
    kiln_module_info_t mi;
    kiln_module_info(ph->sample, &mi);
    kiln_session_options_t so;
    kiln_session_options_default(&so);
    so.slots = 1;
    st = kiln_device_open(o->device ? o->device : mi.target, NULL, kiln_allocator_system(), &d);
    if (!st) st = kiln_session_create(ph->sample, d, &so, &s);
  }
  if (!st) st = one_request(c, s, c->last); /* warm-up, untimed */
  pthread_mutex_lock(&ph->mu);
  ph->ready++;
  pthread_cond_broadcast(&ph->cv);
  while (!ph->go) pthread_cond_wait(&ph->cv, &ph->mu);
  const bool abandon = ph->abandon;
  pthread_mutex_unlock(&ph->mu);
  const double t0 = now_s();
  for (int64_t k = 0; !st && !abandon; ++k) {
    if (o->seconds > 0 ? now_s() - t0 >= o->seconds : k >= o->requests) break;
    const double t = now_s();
    st = one_request(c, s, c->last);
    if (!st) st = keep_latency(c, now_s() - t);
  }
  kiln_session_destroy(s);
  kiln_device_release(d);
  c->error = st ? kiln_status_annotate(st, "client %d", (int)c->index) : NULL;
  return NULL;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of the sorted |v|. */
static double percentile(const double* v, int64_t n, double p) {
  if (n <= 0) return 0;
  int64_t r = (int64_t)ceil(p * (double)n) - 1;
  return v[r < 0 ? 0 : r >= n ? n - 1 : r];
}

typedef struct result_s {
  int64_t requests;
  double wall_s, cpu_s, p50_s, p99_s;
} result_t;

/* CPU time of the whole process (every thread): with other work on the
 * machine, wall-clock throughput mostly says how many runnable threads a
 * phase has against the rest (8 sessions' threads get more of a shared
 * CPU than one batcher's), while CPU time per request is what a request
 * costs -- spinning OpenMP threads included. */
static double cpu_now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Runs one phase with |clients| (their inputs set) and gathers the figures. */
static kiln_status_t run_phase(phase_t* ph, client_t* clients, result_t* res) {
  const int32_t n = ph->o->clients;
  memset(res, 0, sizeof(*res));
  ph->ready = 0;
  ph->go = ph->abandon = false;
  pthread_t* th = calloc((size_t)n, sizeof(pthread_t));
  int32_t started = 0;
  kiln_status_t st = th ? NULL : kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
  for (; started < n && !st; ++started) {
    clients[started].ph = ph;
    clients[started].n_lat = 0;
    if (pthread_create(&th[started], NULL, client_main, &clients[started])) {
      st = kiln_make_status(KILN_INTERNAL, "cannot start client thread %d", (int)started);
      break;
    }
  }
  pthread_mutex_lock(&ph->mu);
  while (!st && ph->ready < n) pthread_cond_wait(&ph->cv, &ph->mu);
  ph->go = true;
  ph->abandon = st != NULL;
  kiln_batcher_stats(ph->batcher, &ph->warm);
  pthread_cond_broadcast(&ph->cv);
  pthread_mutex_unlock(&ph->mu);
  const double t0 = now_s(), c0 = cpu_now_s();
  for (int32_t i = 0; i < started; ++i) pthread_join(th[i], NULL);
  res->wall_s = now_s() - t0;
  res->cpu_s = cpu_now_s() - c0;
  free(th);
  for (int32_t i = 0; i < started; ++i) {
    if (clients[i].error && !st) st = clients[i].error;
    else kiln_status_free(clients[i].error);
    clients[i].error = NULL;
    res->requests += clients[i].n_lat;
  }
  if (st) return st;
  double* all = malloc((size_t)(res->requests ? res->requests : 1) * sizeof(double));
  if (!all) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory sorting latencies");
  int64_t at = 0;
  for (int32_t i = 0; i < n; ++i) {
    memcpy(all + at, clients[i].lat, (size_t)clients[i].n_lat * sizeof(double));
    at += clients[i].n_lat;
  }
  qsort(all, (size_t)at, sizeof(double), cmp_double);
  res->p50_s = percentile(all, at, 0.50);
  res->p99_s = percentile(all, at, 0.99);
  free(all);
  return NULL;
}

/* The sample module's inputs and outputs are the module's with dim 0 = 1. */
static kiln_status_t check_sample(const kiln_module_t* m, const kiln_module_t* s, const char* path,
                                  const char* spath) {
  kiln_module_info_t mi, si;
  kiln_module_info(m, &mi);
  kiln_module_info(s, &si);
  if (mi.n_inputs != si.n_inputs || mi.n_outputs != si.n_outputs)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s has %d inputs and %d outputs, %s has %d and %d", spath,
                            (int)si.n_inputs, (int)si.n_outputs, path, (int)mi.n_inputs, (int)mi.n_outputs);
  for (int t = 0; t < 2; ++t)
    for (int32_t i = 0; i < (t ? mi.n_outputs : mi.n_inputs); ++i) {
      kiln_dtype_t dm, ds;
      kiln_shape_t a = t ? kiln_module_output_shape(m, i, &dm) : kiln_module_input_shape(m, i, &dm);
      kiln_shape_t b = t ? kiln_module_output_shape(s, i, &ds) : kiln_module_input_shape(s, i, &ds);
      if (a.rank >= 1) a.dims[0] = 1;
      if (dm != ds || !kiln_shape_equal(&a, &b)) {
        char sa[160], sb[160];
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "%s '%s' of %s is %s %s; one sample of %s's is %s %s", t ? "output" : "input",
                                t ? kiln_module_output_name(s, i) : kiln_module_input_name(s, i), spath,
                                kiln_dtype_name(ds), kiln_shape_format(&b, sb, sizeof sb), path,
                                kiln_dtype_name(dm), kiln_shape_format(&a, sa, sizeof sa));
      }
    }
  return NULL;
}

/* Seeded samples: floats uniform in [-1, 1), other types zero (valid
 * indices and lengths for any model). */
static kiln_status_t make_inputs(const kiln_module_t* m, int32_t n_in, client_t* c) {
  uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(c->index + 1);
  for (int32_t i = 0; i < n_in; ++i) {
    kiln_dtype_t dt;
    kiln_shape_t sh = kiln_module_input_shape(m, i, &dt);
    if (sh.rank >= 1) sh.dims[0] = 1;
    KILN_RETURN_IF_ERROR(kiln_array_alloc(kiln_allocator_system(), dt, &sh, &c->in[i]), "input '%s'",
                         kiln_module_input_name(m, i));
    for (int64_t e = 0; dt == KILN_DTYPE_F32 && e < kiln_array_numel(&c->in[i]); ++e) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      ((float*)c->in[i].data)[e] = (float)((double)(x >> 11) / (double)(1ull << 52) - 1.0);
    }
  }
  return NULL;
}

/* Largest |a - b| over the f32 outputs; -1 when shapes differ. */
static double max_difference(const kiln_array_t* a, const kiln_array_t* b, int32_t n) {
  double worst = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (a[i].dtype != b[i].dtype || a[i].nbytes != b[i].nbytes) return -1;
    if (a[i].dtype != KILN_DTYPE_F32) {
      if (memcmp(a[i].data, b[i].data, a[i].nbytes)) worst = INFINITY;
      continue;
    }
    for (int64_t e = 0; e < kiln_array_numel(&a[i]); ++e) {
      double d = fabs((double)((const float*)a[i].data)[e] - ((const float*)b[i].data)[e]);
      if (d > worst || d != d) worst = d;
    }
  }
  return worst;
}

static void print_result(const char* what, const result_t* r) {
  printf("%-10s %lld requests in %.2f s: %.1f requests/s, latency p50 %.2f ms, p99 %.2f ms; "
         "%.1f ms of CPU per request\n",
         what, (long long)r->requests, r->wall_s, r->wall_s > 0 ? (double)r->requests / r->wall_s : 0.0,
         1e3 * r->p50_s, 1e3 * r->p99_s, r->requests ? 1e3 * r->cpu_s / (double)r->requests : 0.0);
}

static kiln_status_t both_phases(kiln_module_t* module, const char* path, kiln_module_t* sample,
                                 const rt_clients_options_t* o, client_t* cl, int32_t n_in, int32_t n_out) {
  kiln_module_info_t mi;
  kiln_module_info(module, &mi);
  phase_t ph = {.o = o, .sample = sample, .n_in = n_in, .n_out = n_out, .mu = PTHREAD_MUTEX_INITIALIZER,
                .cv = PTHREAD_COND_INITIALIZER};
  result_t unb, bat;
  kiln_array_t* keep = calloc((size_t)o->clients * (size_t)(n_out ? n_out : 1), sizeof(kiln_array_t));
  if (!keep) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
  /* The batcher first, so that its options are checked before anything
   * runs; its worker sleeps through the unbatched phase. */
  kiln_device_t* d = NULL;
  kiln_batcher_t* b = NULL;
  kiln_batcher_options_t bo = {o->max_batch, o->max_delay_us};
  kiln_status_t st = kiln_device_open(o->device ? o->device : mi.target, NULL, kiln_allocator_system(), &d);
  if (!st) st = kiln_batcher_create(module, d, NULL, &bo, &b);
  kiln_device_release(d);
  if (!st) st = run_phase(&ph, cl, &unb);
  for (int32_t i = 0; i < o->clients && !st; ++i)
    for (int32_t k = 0; k < n_out; ++k) {
      keep[(size_t)i * (size_t)n_out + (size_t)k] = cl[i].last[k];
      memset(&cl[i].last[k], 0, sizeof(kiln_array_t));
    }
  ph.batcher = b;
  if (!st) st = run_phase(&ph, cl, &bat);
  /* The timed requests' figures: the warm-up batches taken out (the
   * longest batch may still be one of them). */
  kiln_batcher_stats_t bs;
  kiln_batcher_stats(b, &bs);
  kiln_batcher_destroy(b);
  bs.requests -= ph.warm.requests;
  bs.batches -= ph.warm.batches;
  bs.full_batches -= ph.warm.full_batches;
  bs.rows_run -= ph.warm.rows_run;
  bs.padded_rows -= ph.warm.padded_rows;
  bs.run_s -= ph.warm.run_s;
  if (!st) {
    char label[64];
    print_result("unbatched", &unb);
    snprintf(label, sizeof label, "batched");
    print_result(label, &bat);
    const double mean_run = bs.batches ? bs.run_s / (double)bs.batches : 0;
    printf("batcher: max batch %d (module batch %d), max delay %lld us: %llu batches (%llu full), "
           "%.2f requests/batch, %llu padded rows of %llu run (%.1f%%), one batch %.2f ms (mean), %.2f ms (max)\n",
           (int)bs.max_batch, (int)bs.module_batch, (long long)bs.max_delay_us, (unsigned long long)bs.batches,
           (unsigned long long)bs.full_batches, bs.batches ? (double)bs.requests / (double)bs.batches : 0.0,
           (unsigned long long)bs.padded_rows, (unsigned long long)bs.rows_run,
           bs.rows_run ? 100.0 * (double)bs.padded_rows / (double)bs.rows_run : 0.0, 1e3 * mean_run,
           1e3 * bs.max_run_s);
    const double tu = unb.wall_s > 0 ? (double)unb.requests / unb.wall_s : 0;
    const double tb = bat.wall_s > 0 ? (double)bat.requests / bat.wall_s : 0;
    const double cu = unb.requests ? unb.cpu_s / (double)unb.requests : 0,
                 cb = bat.requests ? bat.cpu_s / (double)bat.requests : 0;
    printf("throughput batched / unbatched: %.2fx (wall), %.2fx (CPU per request); batched p99 %.2f ms vs max "
           "delay + one batch %.2f ms (mean batch), %.2f ms (longest)\n",
           tu > 0 ? tb / tu : 0.0, cb > 0 ? cu / cb : 0.0, 1e3 * bat.p99_s,
           1e-3 * (double)bs.max_delay_us + 1e3 * mean_run, 1e-3 * (double)bs.max_delay_us + 1e3 * bs.max_run_s);
    double worst = 0;
    for (int32_t i = 0; i < o->clients; ++i) {
      double w = max_difference(&keep[(size_t)i * (size_t)n_out], cl[i].last, n_out);
      if (w < 0 || w > worst || w != w) worst = w < 0 ? INFINITY : w;
    }
    printf("outputs: batched vs unbatched, max |difference| %.3g (each client's last request)\n", worst);
  }
  for (int32_t i = 0; i < o->clients * n_out; ++i) kiln_array_free(kiln_allocator_system(), &keep[i]);
  free(keep);
  return st;
}

kiln_status_t rt_clients_run(kiln_module_t* module, const char* path, const rt_clients_options_t* o) {
  kiln_module_info_t mi;
  kiln_module_info(module, &mi);
  kiln_module_t* sample = NULL;
  kiln_status_t st = NULL;
  if (o->sample_module) {
    kiln_module_load_options_t lo = {.verify_key_file = o->verify_key};
    st = kiln_module_load_file_opts(o->sample_module, &lo, kiln_allocator_system(), &sample);
    if (!st) st = check_sample(module, sample, path, o->sample_module);
  } else {
    kiln_dtype_t dt;
    kiln_shape_t sh = mi.n_inputs > 0 ? kiln_module_input_shape(module, 0, &dt) : kiln_shape_unknown();
    if (sh.rank >= 1 && sh.dims[0] == 1) {
      sample = module;
      kiln_module_retain(module);
    } else {
      st = kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s runs a batch of %lld; the unbatched clients need the model at batch 1: "
                            "--sample-module M1.kiln",
                            path, (long long)(sh.rank >= 1 ? sh.dims[0] : 0));
    }
  }
  client_t* cl = st ? NULL : calloc((size_t)o->clients, sizeof(client_t));
  if (!st && !cl) st = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
  for (int32_t i = 0; cl && i < o->clients && !st; ++i) {
    cl[i].index = i;
    cl[i].in = calloc((size_t)mi.n_inputs + 1, sizeof(kiln_array_t));
    cl[i].last = calloc((size_t)mi.n_outputs + 1, sizeof(kiln_array_t));
    if (!cl[i].in || !cl[i].last) st = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
    else st = make_inputs(module, mi.n_inputs, &cl[i]);
  }
  if (!st) {
    printf("%s: %d clients, %s each phase; unbatched clients run %s\n", path, (int)o->clients,
           o->seconds > 0 ? "a fixed time" : "a fixed count of requests", o->sample_module ? o->sample_module : path);
    st = both_phases(module, path, sample, o, cl, mi.n_inputs, mi.n_outputs);
  }
  for (int32_t i = 0; cl && i < o->clients; ++i) {
    free_arrays(cl[i].in, mi.n_inputs);
    free_arrays(cl[i].last, mi.n_outputs);
    free(cl[i].in);
    free(cl[i].last);
    free(cl[i].lat);
  }
  free(cl);
  kiln_module_release(sample);
  return st;
}
