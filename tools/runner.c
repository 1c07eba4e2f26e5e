/* Compile-and-run plumbing for the kiln command line (see runner.h). */
#include "tools/runner.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/module_impl.h"
#include "runtime/session_impl.h"
#include "runtime/device_registry.h"
#include "runtime/progress.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}


int32_t kiln_cli_print_log_but(const kiln_compile_log_t* log, int32_t from, const char* skip) {
  for (int32_t i = from; i < log->n; ++i) {
    if (!strcmp(log->entries[i].section, skip)) continue;
    kiln_compile_log_t one = {&log->entries[i], 1, 1};
    kiln_cli_print_log(&one, 0);
  }
  return log->n;
}

int kiln_cli_fail(kiln_status_t s) {
  fprintf(stderr, "kiln: error: %s\n", kiln_status_message(s));
  kiln_status_free(s);
  return 1;
}

void kiln_cli_print_log(const kiln_compile_log_t* log, int32_t from) {
  for (int32_t i = from; i < log->n; ++i) {
    const kiln_compile_report_entry_t* e = &log->entries[i];
    if (strcmp(e->key, "line") != 0) continue;
    if (!strcmp(e->section, "warning") || !strcmp(e->section, "note")) {
      fflush(stdout);
      fprintf(stderr, "kiln: %s: %s\n", e->section, e->text);
    } else {
      printf("%s\n", e->text);
    }
  }
}

static void human(double v, char* buf, size_t n) {
  if (v >= 1e9) snprintf(buf, n, "%.2f GB", v / 1e9);
  else if (v >= 1e6) snprintf(buf, n, "%.2f MB", v / 1e6);
  else if (v >= 1e3) snprintf(buf, n, "%.1f KB", v / 1e3);
  else snprintf(buf, n, "%.0f B", v);
}

kiln_status_t kiln_cli_first_launches(kiln_session_t* s, FILE* progress) {
  /* cpu_backed: PoCL and lavapipe; the CPU device compiles ahead of time
   * and leaves it false */
  if (!progress || !s || !s->exe || !s->slots || s->n_slots < 1 || !s->dev->info.cpu_backed) return NULL;
  const kiln_program_t* p = s->p;
  kiln_device_t* d = s->dev;
  int32_t max_args = 1;
  for (int32_t k = 0; k < p->n_kernels; ++k)
    if (p->kernels[k].n_args > max_args) max_args = p->kernels[k].n_args;
  kiln_device_buffer_t** args = calloc((size_t)max_args, sizeof *args);
  if (!args) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
  /* zeros in the arena, as the OpenCL embed's launches use: indices 0, no
   * reads outside a buffer whatever the arena held before */
  kiln_session_slot_t* sl = &s->slots[0];
  enum { CHUNK = 1 << 20 };
  void* zeros = calloc(1, CHUNK);
  kiln_status_t st = zeros ? NULL : kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
  for (uint64_t off = 0; !st && off < sl->arena_bytes; off += CHUNK) {
    const uint64_t n = sl->arena_bytes - off < CHUNK ? sl->arena_bytes - off : CHUNK;
    st = d->vt->buffer_write(d, sl->arena, off, zeros, n);
  }
  free(zeros);
  kiln_progress_t pr;
  kiln_progress_start(&pr, st ? NULL : progress, kiln_device_name(d), p->n_kernels, "first launches");
  for (int32_t k = 0; k < p->n_kernels && !st; ++k) {
    kiln_device_cmd_t* c = NULL;
    st = d->vt->cmd_create(d, s->exe, 0, &c);
    if (!st && p->n_dims && d->vt->cmd_dim) st = d->vt->cmd_dim(d, c, s->mp_n);
    kiln_session_kernel_args(s, sl, k, args);
    if (!st) st = d->vt->cmd_dispatch(d, c, k, args, p->kernels[k].n_args);
    if (!st) st = d->vt->cmd_end(d, c);
    if (!st) st = d->vt->submit(d, c);
    if (!st) st = d->vt->wait(d, c);
    if (c && d->vt->cmd_destroy) d->vt->cmd_destroy(d, c);
    if (st) st = kiln_status_annotate(st, "launching kernel '%s' once", p->kernels[k].name);
    else kiln_progress_step(&pr, "kernels compiled");
  }
  kiln_progress_end(&pr);
  free(args);
  return st;
}

FILE* kiln_cli_progress_file(bool forced, bool quiet) {
  return !quiet && (forced || isatty(fileno(stderr))) ? stderr : NULL;
}

kiln_status_t kiln_cli_embed_binaries(kiln_program_t* prog, const char* target, int32_t device, int threads,
                                      FILE* progress) {
  const kiln_device_api_t* api = kiln_device_api_find(target);
  if (!api || !api->embed_binaries || device == KILN_CLI_NO_DEVICE) return NULL;
  char name[64];
  snprintf(name, sizeof name, "%s:%d", target, device < 0 ? 0 : (int)device);
  kiln_device_open_options_t oo = {threads, true, NULL};
  kiln_device_t* dev = NULL;
  double t0 = now_s();
  kiln_status_t s = kiln_device_open(name, &oo, kiln_allocator_system(), &dev);
  uint64_t before = 0;
  for (int32_t i = 0; i < prog->code.n_devbin; ++i) before += prog->code.devbin[i].len;
  if (!s) s = api->embed_binaries(dev, prog, progress);
  if (!s) {
    uint64_t after = 0;
    for (int32_t i = 0; i < prog->code.n_devbin; ++i) after += prog->code.devbin[i].len;
    printf("embedded the %s program binary for %s (%.1f KB, built in %.1f s): used at load on the same device "
           "and driver\n",
           name, kiln_device_name(dev), (double)(after - before) / 1e3, now_s() - t0);
  } else if (device < 0) {
    /* Not asked for a device: a module for elsewhere still is one. */
    fflush(stdout);
    fprintf(stderr, "kiln: note: no %s program binary embedded (%s); the module carries the source only, built at "
                    "load\n",
            name, kiln_status_message(s));
    kiln_status_free(s);
    s = NULL;
  } else {
    s = kiln_status_annotate(s, "--device %d", (int)device);
  }
  kiln_device_release(dev);
  return s;
}

kiln_status_t kiln_cli_open_device(const char* name, bool strict, int threads, kiln_device_t** out) {
  kiln_device_open_options_t oo = {threads, strict, stderr};
  return kiln_device_open(name, &oo, kiln_allocator_system(), out);
}

kiln_status_t kiln_cli_session(kiln_module_t* m, kiln_device_t* dev, const kiln_session_options_t* so,
                               kiln_session_t** out_session) {
  double t0 = now_s();
  kiln_session_t* s = NULL;
  KILN_RETURN_IF_ERROR(kiln_session_create(m, dev, so, &s));
  kiln_session_memory_t mem;
  kiln_session_memory(s, &mem);
  char a[32], lb[32], nv[32], w[32];
  human((double)mem.arena_bytes, a, sizeof a);
  human((double)mem.lower_bound_bytes, lb, sizeof lb);
  human((double)mem.naive_bytes, nv, sizeof nv);
  human((double)mem.weights_bytes, w, sizeof w);
  printf("session on %s (%s): built in %.1f ms; arena %s x %d slots (lower bound %s, naive %s), weights %s, "
         "%d dispatches, %d barriers\n",
         kiln_device_name(dev), kiln_device_api(dev), (now_s() - t0) * 1e3, a, (int)mem.slots, lb, nv, w,
         (int)mem.dispatches, (int)mem.barriers);
  const kiln_device_api_t* api = kiln_device_api_find(kiln_device_api(dev));
  if (api && api->executable_report && s->exe) api->executable_report(s->exe, stdout); /* heterogeneous: none */
  *out_session = s;
  return NULL;
}

int kiln_cmd_devices(int argc, char** argv) {
  char names[256];
  if (argc > 0 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
    printf("usage: kiln devices\n\nLists the devices kiln can run on, per device API, with their features\n"
           "(use them as --target %s).\n", kiln_device_api_names("[:N]", names, sizeof names));
    return 0;
  }
  if (argc > 0) {
    fprintf(stderr, "kiln devices: unexpected argument '%s'\n", argv[0]);
    return 2;
  }
  /* Every API this kiln has, in registry order; one without a driver or
   * device says why and the rest are still listed. */
  int rc = 0;
  for (int32_t i = 0; i < kiln_device_api_count(); ++i) {
    const kiln_device_api_t* api = kiln_device_api_at(i);
    printf("%s:\n", api->name);
    fflush(stdout);
    kiln_status_t s = api->list(stdout);
    if (s) {
      printf("  none: %s\n", kiln_status_message(s));
      if (i == 0) rc = 1; /* no CPU device: something is badly wrong */
      kiln_status_free(s);
    }
  }
  return rc;
}
