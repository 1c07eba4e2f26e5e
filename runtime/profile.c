/* Profiles of a session: the per-kernel table and a Chrome-trace JSON.
 *
 * Times come from the device's timestamps around each dispatch (recorded in
 * the command buffer when the session was created with profile = true), so
 * they measure the kernels on the device, not the host's view of them. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/session_impl.h"

const kiln_profile_entry_t* kiln_session_profile(const kiln_session_t* s, int32_t* out_n,
                                                 int32_t* out_runs) {
  if (s) s = kiln_session_current(s);
  if (!s || !s->prof) return NULL;
  if (out_n) *out_n = s->p->n_kernels;
  if (out_runs) *out_runs = s->prof_runs;
  return s->prof;
}

void kiln_profile_print_table(const kiln_session_t* s, FILE* out, int32_t max_rows) {
  if (s) s = kiln_session_current(s);
  int32_t n = 0, runs = 0;
  const kiln_profile_entry_t* e = kiln_session_profile(s, &n, &runs);
  if (!e || runs == 0) {
    fprintf(out, "profile: no profiled runs\n");
    return;
  }
  int32_t* order = malloc(sizeof(int32_t) * (size_t)(n + 1));
  if (!order) return;
  double total = 0;
  int64_t flops = 0, bytes = 0;
  for (int32_t k = 0; k < n; ++k) {
    order[k] = k;
    total += e[k].total_s;
    flops += e[k].flops;
    bytes += e[k].bytes;
  }
  for (int32_t a = 1; a < n; ++a) /* insertion sort, slowest first */
    for (int32_t b = a; b > 0 && e[order[b]].total_s > e[order[b - 1]].total_s; --b) {
      int32_t t = order[b];
      order[b] = order[b - 1];
      order[b - 1] = t;
    }
  double per_run = total / runs;
  fprintf(out, "profile (%s, %s): %d kernels, %d barriers, %d runs, %.3f ms/run in kernels, %.2f GFLOP/s, %.2f GB/s\n",
          s->dev->info.api, s->dev->info.name, (int)n, (int)s->n_barriers, (int)runs, per_run * 1e3,
          per_run > 0 ? (double)flops / per_run * 1e-9 : 0.0, per_run > 0 ? (double)bytes / per_run * 1e-9 : 0.0);
  /* Rows name the graph node first: several program kernels may call one
   * symbol (the OpenCL emitter prints identical template instances once), and
   * a node's kernels (phase split, GEMM) share its name; the symbol, last,
   * tells them apart and finds the code in a --dump. */
  /* a kernel compiled with a tuning-cache point says so after its symbol */
  int32_t n_tuned = 0;
  for (int32_t i = 0; i < n; ++i) n_tuned += s->p->kernels[i].tuned != NULL;
  if (n_tuned) fprintf(out, "  %d kernels tuned (their point after the symbol; docs/TUNING.md)\n", (int)n_tuned);
  fprintf(out, "  %-36s %-14s %10s %7s %9s %8s  %s\n", "node", "op", "ms/run", "share", "GFLOP/s", "GB/s",
          s->het ? "kernel [device]" : "kernel");
  int32_t rows = max_rows > 0 && max_rows < n ? max_rows : n;
  for (int32_t i = 0; i < rows; ++i) {
    const kiln_profile_entry_t* k = &e[order[i]];
    double t = k->total_s / runs;
    /* a long node name keeps its tail (the layer), not its common prefix */
    const char* node = k->node ? k->node : "";
    const size_t nl = strlen(node);
    const char* tuned = s->p->kernels[order[i]].tuned;
    fprintf(out, "  %s%-*s %-14.14s %10.3f %6.1f%% %9.2f %8.2f  %s", nl > 36 ? "~" : "", nl > 36 ? 35 : 36,
            nl > 36 ? node + nl - 35 : node, k->op, t * 1e3, total > 0 ? 100 * k->total_s / total : 0.0,
            t > 0 ? (double)k->flops / t * 1e-9 : 0.0, t > 0 ? (double)k->bytes / t * 1e-9 : 0.0, k->kernel);
    if (s->het) fprintf(out, " [%s]", k->device ? k->device : "?");
    if (tuned) fprintf(out, "  [tuned: %s]", tuned);
    fputc('\n', out);
  }
  if (rows < n) fprintf(out, "  ... %d more kernels\n", (int)(n - rows));
  kiln_hetero_print(s, out);
  free(order);
}

/* JSON string body: quotes, backslashes and control characters escaped. */
static void json_str(FILE* f, const char* s) {
  fputc('"', f);
  for (const unsigned char* c = (const unsigned char*)(s ? s : ""); *c; ++c) {
    if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
    else if (*c < 0x20) fprintf(f, "\\u%04x", *c);
    else fputc(*c, f);
  }
  fputc('"', f);
}

kiln_status_t kiln_profile_write_trace(const kiln_session_t* s, const char* path) {
  if (s) s = kiln_session_current(s);
  int32_t n = 0, runs = 0;
  const kiln_profile_entry_t* e = kiln_session_profile(s, &n, &runs);
  if (!e || runs == 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: no profiled run to trace (profile was off)", path);
  FILE* f = fopen(path, "w");
  if (!f) return kiln_make_status(KILN_IO_ERROR, "%s: cannot create: %s", path, strerror(errno));
  fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"device\":");
  json_str(f, s->dev->info.name);
  fprintf(f, ",\"model\":");
  json_str(f, s->p->model_name);
  fprintf(f, "},\"traceEvents\":[\n");
  fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":");
  json_str(f, s->dev->info.api);
  fprintf(f, "}},\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{\"name\":\"queue\"}}");
  for (int32_t k = 0; k < n; ++k) {
    const kiln_profile_entry_t* x = &e[k];
    fprintf(f, ",\n{\"name\":");
    json_str(f, x->kernel);
    fprintf(f, ",\"cat\":");
    json_str(f, x->op);
    fprintf(f, ",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"node\":", x->start_s * 1e6,
            x->last_s * 1e6);
    json_str(f, x->node);
    fprintf(f, ",\"flops\":%lld,\"bytes\":%lld,\"gflops\":%.3f,\"gbps\":%.3f,\"barrier_before\":%s}}",
            (long long)x->flops, (long long)x->bytes, x->last_s > 0 ? (double)x->flops / x->last_s * 1e-9 : 0.0,
            x->last_s > 0 ? (double)x->bytes / x->last_s * 1e-9 : 0.0, s->barrier_before && s->barrier_before[k] ? "true" : "false");
  }
  fprintf(f, "\n]}\n");
  if (ferror(f) | (fclose(f) != 0))
    return kiln_make_status(KILN_IO_ERROR, "%s: write failed", path);
  return NULL;
}
