/* The build progress line (runtime/progress.h). */
#include "runtime/progress.h"

#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int kiln_progress_format(char* buf, size_t n, const char* device, const char* phase, int32_t done,
                         int32_t total, double elapsed_s) {
  /* no step done yet: no rate to tell an ETA from */
  char eta[32] = "-";
  if (done > 0) snprintf(eta, sizeof eta, "%.1f s", total > done ? elapsed_s / done * (total - done) : 0.0);
  return snprintf(buf, n, "building for %s: %s, %d/%d steps, %.1f s, ETA %s", device, phase, (int)done, (int)total,
                  elapsed_s, eta);
}

static void show(kiln_progress_t* p, const char* phase, bool force) {
  const double t = now_s();
  const bool end = p->done >= p->total;
  const int32_t tenth = (int32_t)((int64_t)p->done * 10 / p->total);
  /* a terminal gets every step: a step skipped for being soon after the
   * last one would leave the line behind while the next one takes minutes */
  if (!force && !p->tty && tenth == p->last_tenth && !end) return;
  p->last_tenth = tenth;
  char line[256];
  kiln_progress_format(line, sizeof line, p->device, phase, p->done, p->total, t - p->t0);
  /* the spaces cover a longer line before this one */
  p->open = p->tty && !end;
  fprintf(p->f, "%s%s%s", p->tty ? "\r" : "", line, p->open ? "   " : "\n");
  fflush(p->f);
}

void kiln_progress_start(kiln_progress_t* p, FILE* f, const char* device, int32_t total, const char* phase) {
  p->f = f;
  p->tty = f && isatty(fileno(f));
  p->device = device ? device : "?";
  p->t0 = now_s();
  p->done = 0;
  p->total = total > 0 ? total : 1;
  p->last_tenth = -1;
  p->open = false;
  if (f) show(p, phase, true);
}

void kiln_progress_step(kiln_progress_t* p, const char* phase) {
  if (!p->f) return;
  ++p->done;
  show(p, phase, false);
}
