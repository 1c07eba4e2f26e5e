/* Sessions of a module with shape buckets (runtime/program_buckets.c): one
 * ordinary session per bucket, each with its own code, plan, arenas and
 * command buffers, so a run at a bucket's size costs what a module compiled
 * for that size alone costs. Bucket 0's session is made with this one (a
 * module whose code does not build fails at creation); the others at their
 * first run, so sizes a process never runs cost it no memory; a bucket whose
 * weights equal the first's views the first's device copy (session.c,
 * upload_weights). Run ids carry the bucket in their low bits. */
#include <stdlib.h>

#include "runtime/module_impl.h"
#include "runtime/session_impl.h"

enum { BUCKET_BITS = 5 }; /* KILN_PROGRAM_MAX_BUCKETS fits */

static const char* mname(const kiln_session_t* s) {
  return s->p->model_name && s->p->model_name[0] ? s->p->model_name : "module";
}

static kiln_status_t open_bucket(kiln_session_t* s, int32_t k) {
  if (s->buckets[k]) return NULL;
  kiln_module_t* bm = NULL;
  KILN_RETURN_IF_ERROR(kiln_module_bucket_module(s->module, k, &bm));
  kiln_status_t st = kiln_session_create_bucket(bm, s->dev, &s->opts, true, k ? s->buckets[0] : NULL, &s->buckets[k]);
  kiln_module_release(bm); /* the session holds its own reference */
  if (st)
    return kiln_status_annotate(st, "%s: shape bucket %s=%lld", mname(s), s->p->bucket_dim,
                                (long long)s->p->bucket_values[k]);
  return NULL;
}

kiln_status_t kiln_buckets_session_create(kiln_session_t* s) {
  s->buckets = calloc((size_t)s->p->n_buckets, sizeof(kiln_session_t*));
  if (!s->buckets) return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory creating a session", mname(s));
  s->n_buckets = s->p->n_buckets;
  s->last_bucket = 0;
  return open_bucket(s, 0);
}

void kiln_buckets_destroy(kiln_session_t* s) {
  /* bucket 0's last: the others may view its weights */
  for (int32_t k = s->n_buckets - 1; s->buckets && k >= 0; --k) kiln_session_destroy(s->buckets[k]);
  free(s->buckets);
  s->buckets = NULL;
}

kiln_status_t kiln_buckets_enqueue(kiln_session_t* s, const kiln_array_t* inputs, uint64_t* out_run) {
  int32_t k = 0;
  KILN_RETURN_IF_ERROR(kiln_program_bucket_select(s->p, inputs, mname(s), &k));
  KILN_RETURN_IF_ERROR(open_bucket(s, k));
  uint64_t run = 0;
  KILN_RETURN_IF_ERROR(kiln_session_enqueue(s->buckets[k], inputs, &run));
  s->last_bucket = k;
  *out_run = run << BUCKET_BITS | (uint64_t)k;
  return NULL;
}

kiln_status_t kiln_buckets_wait(kiln_session_t* s, uint64_t run, kiln_array_t* outputs) {
  const int32_t k = (int32_t)(run & ((1u << BUCKET_BITS) - 1));
  if (k >= s->n_buckets || !s->buckets[k])
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: run %llu is not in flight", mname(s), (unsigned long long)run);
  return kiln_session_wait(s->buckets[k], run >> BUCKET_BITS, outputs);
}

const kiln_session_t* kiln_session_current(const kiln_session_t* s) {
  return s->buckets && s->buckets[s->last_bucket] ? s->buckets[s->last_bucket] : s;
}
