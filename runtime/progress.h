/* The progress line of a model's build: the devices report each step of
 * building a program's code (the CPU's compiler parts, OpenCL's program and
 * kernels, Vulkan's pipelines) as "building for DEV: PHASE, k/n steps,
 * elapsed, ETA". On a terminal the line is rewritten in place at every
 * step (a model has at most a few thousand) and ends with a newline after
 * the last one; elsewhere
 * (logs, ctest) a line per tenth of the work. A NULL file: quiet. Used by
 * `kiln compile` (OpenCL binaries) and by sessions whose options ask for it
 * (`kiln run` on a terminal). */
#ifndef KILN_RUNTIME_PROGRESS_H_
#define KILN_RUNTIME_PROGRESS_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct kiln_progress_s {
  FILE* f;            /* NULL: every call is a no-op */
  bool tty;           /* rewrite one line in place */
  const char* device; /* the name in the line (kept, not copied) */
  double t0;
  int32_t done, total, last_tenth;
  bool open; /* a terminal line without its newline yet */
} kiln_progress_t;

/* |total| steps for |device|, the line shown at once with no step done
 * (|phase|: what comes first); |f| NULL: quiet. */
void kiln_progress_start(kiln_progress_t* p, FILE* f, const char* device, int32_t total, const char* phase);
/* One step done (|phase|: what the step was). */
void kiln_progress_step(kiln_progress_t* p, const char* phase);
/* Ends an unfinished terminal line (a build that stopped early), so what
 * is printed next starts on a line of its own. */
static inline void kiln_progress_end(kiln_progress_t* p) {
  if (p->f && p->open) fputc('\n', p->f);
  p->open = false;
}
/* The line's text (no carriage return or newline) into |buf|; the ETA is
 * the elapsed time per step times the steps left. Returns snprintf's. */
int kiln_progress_format(char* buf, size_t n, const char* device, const char* phase, int32_t done,
                         int32_t total, double elapsed_s);

#endif /* KILN_RUNTIME_PROGRESS_H_ */
