/* See compile_native.h. */
#include "tools/compile_native.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct kiln_cli_native_job_s {
  const kiln_target_t* target;
  kiln_program_t* prog;
  /* The build's own view of the program: the same code and allocator,
   * native code of its own, so this thread may read |prog| meanwhile. */
  kiln_program_t shadow;
  const char* levels;
  kiln_native_build_stats_t stats;
  kiln_status_t status;
  pthread_t thread;
  bool threaded, waited;
};

bool kiln_cli_native_async_ok(const kiln_target_t* t, const char* levels) {
  return t && levels && levels[0] && t->emit_native_code && t->native_from_code_ok && t->native_from_code_ok(levels);
}

bool kiln_cli_native_async_fits(const kiln_program_t* p) {
  return p && !p->staged && p->n_buckets == 0 && p->code.n_devbin == 0 && p->code.n_native == 0 &&
         !kiln_program_kernels_on(p, KILN_KERNEL_ON_HOST) && p->code.text;
}

static void* run(void* arg) {
  kiln_cli_native_job_t* j = arg;
  j->status = j->target->emit_native_code(&j->shadow, j->levels, &j->stats);
  return NULL;
}

kiln_status_t kiln_cli_native_start(const kiln_target_t* t, kiln_program_t* prog, const char* levels,
                                    kiln_cli_native_job_t** out) {
  kiln_cli_native_job_t* j = calloc(1, sizeof *j);
  if (!j) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
  j->target = t;
  j->prog = prog;
  j->shadow = *prog;
  j->shadow.code.native = NULL;
  j->shadow.code.n_native = 0;
  j->levels = levels;
  j->threaded = pthread_create(&j->thread, NULL, run, j) == 0;
  if (!j->threaded) run(j); /* no thread: built here, before the write */
  *out = j;
  return NULL;
}

kiln_status_t kiln_cli_native_wait(void* arg) {
  kiln_cli_native_job_t* j = arg;
  if (j->waited) return NULL;
  j->waited = true;
  if (j->threaded) pthread_join(j->thread, NULL);
  /* the program owns what was built, whole or not (its destroy frees it) */
  j->prog->code.native = j->shadow.code.native;
  j->prog->code.n_native = j->shadow.code.n_native;
  kiln_status_t s = j->status;
  j->status = NULL;
  return s;
}

void kiln_cli_native_finish(kiln_cli_native_job_t* j, kiln_native_build_stats_t* stats) {
  if (!j) return;
  kiln_status_free(kiln_cli_native_wait(j));
  if (stats) *stats = j->stats;
  free(j);
}
