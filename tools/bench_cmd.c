/* `kiln bench`: kernel microbenchmarks on the CPU backend (see bench_cmd.h).
 *
 * Per case: one-node graph -> kiln_plan_build -> kiln_plan_fuse ->
 * kiln_cpu_compile -> --warmup runs -> --repeat timed runs. The time of a
 * run is the sum of its kernels' times (kiln_cpu_run's per-kernel callback):
 * inputs are 64-byte aligned so they are read in place, and what is left out
 * is the run API's allocation and zeroing of fresh output arrays, which is
 * not kernel work and would dominate the memory-bound cases. The reported
 * time is the median.
 *
 * Roofline: intensity = FLOPs / bytes (inputs incl. weights + outputs);
 * intensity >= ridge (peak FLOP/s / peak B/s) is compute-bound and measured
 * against peak FLOP/s, otherwise against peak bandwidth.
 *
 * OpenBLAS is a peer for the gemm suite when libopenblas.so.0 can be
 * dlopen'ed at run time (the CLI does not link it). */
#include "tools/bench_cmd.h"
#include "tools/cli_args.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ir/op.h"
#include "lowering/fuse.h"
#include "compiler/peak.h"
#include "targets/cpu/cpu_backend.h"
#include "targets/registry.h"
#include "tools/bench_cases.h"
#include "tools/bench_gpu.h"

#ifndef KILN_VERSION
#define KILN_VERSION "dev"
#endif

static const char* bench_help =
    "usage: kiln bench [--target cpu|opencl[:N]|vulkan[:N]] [--suite LIST] [--quick] [--threads N]\n"
    "                  [--repeat N] [--warmup N] [--filter TEXT] [--csv FILE] [--json FILE]\n"
    "\n"
    "Kernel microbenchmarks. Measures the machine's peak FLOP/s (an FMA kernel)\n"
    "and bandwidth (copy/triad over 256 MiB), both compiled by the CPU backend,\n"
    "then times one-node graphs: each line gives the shape, the median time of\n"
    "--repeat runs after --warmup runs (kernel time), GFLOP/s, GB/s (inputs,\n"
    "weights and outputs once), and the percent of peak FLOP/s (compute-bound)\n"
    "or of peak bandwidth (memory-bound), decided by the roofline ridge point.\n"
    "The bandwidth probe measures DRAM: cases whose data fits in cache can\n"
    "exceed 100%; so can any case when the machine was busy during the probe.\n"
    "\n"
    "  --suite LIST   comma-separated: gemm,conv,dwconv,elementwise,reduce,\n"
    "                 softmax,layernorm,pool (default: all; conv includes\n"
    "                 dwconv). Every case is one node, which the layout pass\n"
    "                 keeps on NCHW (models run convs and pools on NCHWc)\n"
    "  --quick        gemm up to 1024, 5 repeats (unless --repeat is given)\n"
    "  --threads N    worker threads (default: all cores)\n"
    "  --repeat N     timed runs per case (default 20)\n"
    "  --warmup N     untimed runs first (default 3)\n"
    "  --filter TEXT  only cases whose name contains TEXT\n"
    "  --csv FILE     write every row (and the machine columns) as CSV\n"
    "  --json FILE    write {\"machine\": {...}, \"cases\": [...]}\n"
    "\n"
    "OpenBLAS sgemm runs as a peer in the gemm suite when libopenblas.so.0 is\n"
    "installed.\n"
    "\n"
    "--target opencl|vulkan runs the suites on that device (no fallback): each\n"
    "case compiled as `kiln compile -O1` would, its time the device's kernel\n"
    "timestamps, checked against the reference interpreter up to 1024^3 FLOPs;\n"
    "the peak columns are the CPU's. On OpenCL each gemm case runs kiln's GEMM\n"
    "template, then CLBlast's sgemm as its peer (rows gemm/clblast; the device\n"
    "would choose between them per shape) when kiln was built with\n"
    "libclblast-dev. Exit status: 0 ok, 1 some case failed (the rest still\n"
    "run), 2 usage error.\n";

static int usage(const char* fmt, const char* arg) {
  fprintf(stderr, "kiln bench: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nTry 'kiln bench --help'.\n");
  return 2;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_d(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static double median(double* v, int32_t n) {
  qsort(v, (size_t)n, sizeof(double), cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- options -------------------------------------------------------------- */

typedef struct opts_s {
  uint32_t suites;
  bool quick;
  int32_t threads, repeat, warmup;
  int32_t max_cases;        /* hidden --cases N: stop after N cases (tests) */
  int64_t peak_bytes;       /* hidden --peak-mb M: bandwidth probe footprint */
  bool no_peer;             /* hidden --no-peer */
  const char* filter;
  const char* target; /* NULL: the CPU backend */
  const char* csv;
  const char* json;
} opts_t;

static int parse_opts(int argc, char** argv, opts_t* o, bool* help) {
  memset(o, 0, sizeof(*o));
  o->repeat = -1;
  o->warmup = 3;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      *help = true;
      return 0;
    }
    if (!strcmp(a, "--quick")) {
      o->quick = true;
      continue;
    }
    if (!strcmp(a, "--no-peer")) {
      o->no_peer = true;
      continue;
    }
    bool takes = !strcmp(a, "--target") || !strcmp(a, "--suite") || !strcmp(a, "--threads") ||
                 !strcmp(a, "--repeat") || !strcmp(a, "--warmup") || !strcmp(a, "--csv") ||
                 !strcmp(a, "--json") || !strcmp(a, "--filter") || !strcmp(a, "--cases") ||
                 !strcmp(a, "--peak-mb");
    if (!takes) return usage("unknown option '%s'", a);
    if (i + 1 >= argc) return usage("option '%s' needs a value", a);
    const char* v = argv[++i];
    long long n = 0;
    if (!strcmp(a, "--target")) {
      if (!strncmp(v, "opencl", 6) || !strncmp(v, "vulkan", 6))
        o->target = v;
      else if (strcmp(v, "cpu") != 0)
        return usage("unsupported target '%s' (kiln bench has: cpu, opencl[:N], vulkan[:N])", v);
    } else if (!strcmp(a, "--suite")) {
      char buf[256];
      if (strlen(v) >= sizeof buf) return usage("--suite '%s' is too long", v);
      snprintf(buf, sizeof buf, "%s", v);
      for (char* tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        uint32_t bit = bench_suite_bit(tok);
        if (!bit) {
          fprintf(stderr, "kiln bench: unknown suite '%s' (suites: %s)\n", tok, bench_suite_names);
          fprintf(stderr, "Try 'kiln bench --help'.\n");
          return 2;
        }
        o->suites |= bit;
      }
      if (!o->suites) return usage("--suite '%s' names no suite", v);
    } else if (!strcmp(a, "--threads")) {
      if (!parse_int(v, 1, 4096, &n)) return usage("--threads '%s': expected 1..4096", v);
      o->threads = (int32_t)n;
    } else if (!strcmp(a, "--repeat")) {
      if (!parse_int(v, 1, 1000000, &n)) return usage("--repeat '%s': expected 1..1000000", v);
      o->repeat = (int32_t)n;
    } else if (!strcmp(a, "--warmup")) {
      if (!parse_int(v, 0, 1000000, &n)) return usage("--warmup '%s': expected 0..1000000", v);
      o->warmup = (int32_t)n;
    } else if (!strcmp(a, "--cases")) {
      if (!parse_int(v, 1, 1000000, &n)) return usage("--cases '%s': expected a count >= 1", v);
      o->max_cases = (int32_t)n;
    } else if (!strcmp(a, "--peak-mb")) {
      if (!parse_int(v, 1, 1 << 20, &n)) return usage("--peak-mb '%s': expected 1..1048576", v);
      o->peak_bytes = (int64_t)n << 20;
    } else if (!strcmp(a, "--csv")) {
      o->csv = v;
    } else if (!strcmp(a, "--json")) {
      o->json = v;
    } else {
      o->filter = v;
    }
  }
  if (!o->suites) o->suites = BENCH_SUITE_ALL;
  if (o->repeat < 0) o->repeat = o->quick ? 5 : 20;
  return 0;
}

/* ---- OpenBLAS peer -------------------------------------------------------- */

typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha,
                         const float* a, int lda, const float* b, int ldb, float beta, float* c,
                         int ldc);

typedef struct blas_s {
  void* handle;
  sgemm_fn sgemm;
} blas_t;

static void blas_open(blas_t* b, int32_t threads) {
  memset(b, 0, sizeof(*b));
  b->handle = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!b->handle) return;
  b->sgemm = (sgemm_fn)(uintptr_t)dlsym(b->handle, "cblas_sgemm");
  void (*set)(int) = (void (*)(int))(uintptr_t)dlsym(b->handle, "openblas_set_num_threads");
  if (!b->sgemm) {
    dlclose(b->handle);
    b->handle = NULL;
    return;
  }
  if (set) set(threads);
}

/* ---- results -------------------------------------------------------------- */

typedef struct row_s {
  const bench_case_t* c;
  bool ok;
  char* error;       /* malloc'd message when !ok */
  double ms, gflops, gbs, pct, intensity;
  double flops, bytes;
  const char* bound; /* "compute" | "memory" */
  double wall_s;     /* compile + all runs */
} row_t;

typedef struct machine_s {
  kiln_peak_t peak;
  char cpu[160];
  double ridge;
} machine_t;

static void classify(row_t* r, const machine_t* m) {
  double t = r->ms * 1e-3;
  r->gflops = t > 0 ? r->flops / t * 1e-9 : 0;
  r->gbs = t > 0 ? r->bytes / t * 1e-9 : 0;
  r->intensity = r->bytes > 0 ? r->flops / r->bytes : 0;
  bool compute = r->intensity >= m->ridge;
  r->bound = compute ? "compute" : "memory";
  double peak = compute ? m->peak.gflops : m->peak.gbs;
  r->pct = peak > 0 ? 100.0 * (compute ? r->gflops : r->gbs) / peak : 0;
}

typedef struct timer_s {
  double sum;
} timer_t_;

static void on_kernel(void* user, int32_t k, double seconds) {
  (void)k;
  ((timer_t_*)user)->sum += seconds;
}

static int64_t tensor_bytes(const kiln_tensor_t* t) {
  if (!kiln_shape_is_static(&t->shape)) return 0;
  return kiln_shape_count(&t->shape) * (int64_t)kiln_dtype_size(t->dtype);
}

/* Allocates 64-byte-aligned random inputs for every graph input. */
static kiln_status_t make_inputs(const kiln_graph_t* g, kiln_array_t* in) {
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    const kiln_tensor_t* t = &g->tensors[g->inputs[i]];
    size_t bytes = (size_t)tensor_bytes(t);
    void* m = NULL;
    if (posix_memalign(&m, 64, bytes ? (bytes + 63) & ~(size_t)63 : 64) != 0 || !m)
      return kiln_make_status(KILN_OUT_OF_MEMORY, "cannot allocate %zu bytes for input '%s'",
                              bytes, t->name);
    bench_fill(m, (int64_t)(bytes / sizeof(float)), 7u + (uint32_t)i);
    in[i] = (kiln_array_t){t->dtype, t->shape, m, bytes};
  }
  return NULL;
}

static kiln_status_t run_kiln(const bench_case_t* c, const opts_t* o, row_t* r) {
  kiln_graph_t* g = NULL;
  kiln_plan_t* plan = NULL;
  kiln_cpu_exec_t* ex = NULL;
  kiln_array_t in[4];
  memset(in, 0, sizeof in);
  double* ts = NULL;
  kiln_status_t s = bench_build_graph(c, &g);
  if (s) goto done;
  if (g->n_inputs > 4) {
    s = kiln_make_status(KILN_INTERNAL, "bench graph has %d inputs", (int)g->n_inputs);
    goto done;
  }
  kiln_plan_options_t po = {KILN_TARGET_CLASS_CPU, o->threads, 0, 0, 0, 0};
  if ((s = kiln_plan_build(g, &po, kiln_allocator_system(), &plan))) goto done;
  if ((s = kiln_plan_fuse(plan, NULL, NULL))) goto done;
  r->flops = 0;
  for (int32_t k = 0; k < plan->n_kernels; ++k) r->flops += (double)plan->kernels[k].flops;
  r->bytes = bench_graph_bytes(g);
  kiln_cpu_options_t co;
  kiln_cpu_options_default(&co);
  co.threads = o->threads;
  if ((s = kiln_cpu_compile(plan, &co, &ex, NULL))) goto done;
  if ((s = make_inputs(g, in))) goto done;
  ts = calloc((size_t)o->repeat, sizeof(double));
  if (!ts) {
    s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  for (int32_t i = 0; i < o->warmup + o->repeat && !s; ++i) {
    kiln_array_t out[1];
    memset(out, 0, sizeof out);
    timer_t_ tm = {0};
    s = kiln_cpu_run(ex, in, out, on_kernel, &tm);
    kiln_array_free(kiln_allocator_system(), &out[0]);
    if (!s && i >= o->warmup) ts[i - o->warmup] = tm.sum;
  }
  if (!s) r->ms = median(ts, o->repeat) * 1e3;
done:
  free(ts);
  for (int32_t i = 0; i < 4; ++i) free(in[i].data);
  kiln_cpu_exec_destroy(ex);
  kiln_plan_destroy(plan);
  kiln_graph_destroy(g);
  return s;
}

static kiln_status_t run_openblas(const bench_case_t* c, const opts_t* o, const blas_t* b,
                                  row_t* r) {
  int64_t m = c->p[0], k = c->p[1], n = c->p[2];
  size_t sa = (size_t)(m * k) * 4, sb = (size_t)(k * n) * 4, sc = (size_t)(m * n) * 4;
  float* A = aligned_alloc(64, (sa + 63) & ~(size_t)63);
  float* B = aligned_alloc(64, (sb + 63) & ~(size_t)63);
  float* C = aligned_alloc(64, (sc + 63) & ~(size_t)63);
  double* ts = calloc((size_t)o->repeat, sizeof(double));
  kiln_status_t s = NULL;
  if (!A || !B || !C || !ts) {
    s = kiln_make_status(KILN_OUT_OF_MEMORY, "openblas peer: out of memory");
  } else {
    bench_fill(A, m * k, 7);
    bench_fill(B, k * n, 2);
    for (int32_t i = 0; i < o->warmup + o->repeat; ++i) {
      double t0 = now_s();
      b->sgemm(101 /* RowMajor */, 111 /* NoTrans */, 111, (int)m, (int)n, (int)k, 1.0f, A, (int)k,
               B, (int)n, 0.0f, C, (int)n);
      if (i >= o->warmup) ts[i - o->warmup] = now_s() - t0;
    }
    r->ms = median(ts, o->repeat) * 1e3;
    r->flops = 2.0 * (double)m * (double)k * (double)n;
    r->bytes = (double)(sa + sb + sc);
  }
  free(A);
  free(B);
  free(C);
  free(ts);
  return s;
}

/* ---- output ------------------------------------------------------------- */

static void json_str(FILE* f, const char* s) {
  fputc('"', f);
  for (; s && *s; ++s) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch == '\n') fputs("\\n", f);
    else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
    else fputc(ch, f);
  }
  fputc('"', f);
}

static void json_num(FILE* f, double v) {
  if (isfinite(v)) fprintf(f, "%.6g", v);
  else fputs("null", f);
}

static void csv_str(FILE* f, const char* s) {
  fputc('"', f);
  for (; s && *s; ++s) {
    if (*s == '"') fputc('"', f);
    fputc(*s == '\n' ? ' ' : *s, f);
  }
  fputc('"', f);
}

/* `, "key": value` */
static void json_key_num(FILE* f, const char* key, double v) {
  fprintf(f, ", \"%s\": ", key);
  json_num(f, v);
}
static void json_key_str(FILE* f, const char* key, const char* v) {
  fprintf(f, ", \"%s\": ", key);
  if (v) json_str(f, v);
  else fputs("null", f);
}

static kiln_status_t write_json(const char* path, const machine_t* m, const opts_t* o,
                                const row_t* rows, int32_t n) {
  FILE* f = fopen(path, "w");
  if (!f) return kiln_make_status(KILN_IO_ERROR, "cannot write '%s': %s", path, strerror(errno));
  fprintf(f, "{\"machine\": {\"target\": ");
  json_str(f, o->target ? o->target : "cpu");
  json_key_str(f, "cpu", m->cpu);
  fprintf(f, ", \"threads\": %d", (int)m->peak.threads);
  json_key_num(f, "peak_gflops", m->peak.gflops);
  json_key_num(f, "peak_gbs", m->peak.gbs);
  json_key_num(f, "copy_gbs", m->peak.copy_gbs);
  json_key_num(f, "triad_gbs", m->peak.triad_gbs);
  json_key_num(f, "ridge_flop_per_byte", m->ridge);
  fprintf(f, ", \"repeat\": %d, \"warmup\": %d", (int)o->repeat, (int)o->warmup);
  json_key_str(f, "kiln_version", KILN_VERSION);
#ifdef KILN_GIT_COMMIT
  json_key_str(f, "kiln_commit", KILN_GIT_COMMIT);
#else
  json_key_str(f, "kiln_commit", NULL);
#endif
  fprintf(f, "},\n \"cases\": [");
  for (int32_t i = 0; i < n; ++i) {
    const row_t* r = &rows[i];
    fprintf(f, "%s\n  {\"suite\": ", i ? "," : "");
    json_str(f, r->c->suite);
    json_key_str(f, "name", r->c->name);
    json_key_str(f, "peer", r->c->peer);
    json_key_str(f, "shape", r->c->shape);
    if (!r->ok) {
      json_key_str(f, "error", r->error);
      fputs("}", f);
      continue;
    }
    json_key_num(f, "ms", r->ms);
    json_key_num(f, "gflops", r->gflops);
    json_key_num(f, "gbs", r->gbs);
    json_key_num(f, "pct_peak", r->pct);
    json_key_str(f, "bound", r->bound);
    json_key_num(f, "intensity", r->intensity);
    json_key_num(f, "flops", r->flops);
    json_key_num(f, "bytes", r->bytes);
    fputs("}", f);
  }
  fprintf(f, "\n]}\n");
  bool bad = ferror(f) != 0;
  if (fclose(f) != 0 || bad)
    return kiln_make_status(KILN_IO_ERROR, "error writing '%s': %s", path, strerror(errno));
  return NULL;
}

static kiln_status_t write_csv(const char* path, const machine_t* m, const row_t* rows,
                               int32_t n) {
  FILE* f = fopen(path, "w");
  if (!f) return kiln_make_status(KILN_IO_ERROR, "cannot write '%s': %s", path, strerror(errno));
  fprintf(f, "suite,name,peer,shape,ms,gflops,gbs,pct_peak,bound,intensity,flops,bytes,error,"
             "peak_gflops,peak_gbs,threads,cpu,kiln_version\n");
  for (int32_t i = 0; i < n; ++i) {
    const row_t* r = &rows[i];
    fprintf(f, "%s,", r->c->suite);
    csv_str(f, r->c->name);
    fprintf(f, ",%s,", r->c->peer ? r->c->peer : "kiln");
    csv_str(f, r->c->shape);
    if (r->ok)
      fprintf(f, ",%.6g,%.6g,%.6g,%.6g,%s,%.6g,%.6g,%.6g,", r->ms, r->gflops, r->gbs, r->pct,
              r->bound, r->intensity, r->flops, r->bytes);
    else
      fprintf(f, ",,,,,,,,,");
    csv_str(f, r->ok ? "" : r->error);
    fprintf(f, ",%.6g,%.6g,%d,", m->peak.gflops, m->peak.gbs, (int)m->peak.threads);
    csv_str(f, m->cpu);
    fprintf(f, ",%s\n", KILN_VERSION);
  }
  bool bad = ferror(f) != 0;
  if (fclose(f) != 0 || bad)
    return kiln_make_status(KILN_IO_ERROR, "error writing '%s': %s", path, strerror(errno));
  return NULL;
}

/* ---- driver -------------------------------------------------------------- */

/* Predicted seconds of a case (compile overhead + runs at the roofline), only
 * used to share the measured elapsed time out into an ETA. */
static double predict(const bench_case_t* c, const machine_t* m, const opts_t* o) {
  double t = 0;
  if (m->peak.gflops > 0) t += c->est_flops / (m->peak.gflops * 1e9);
  if (m->peak.gbs > 0) t += c->est_bytes / (m->peak.gbs * 1e9);
  return 0.3 + (double)(o->warmup + o->repeat) * t * 3.0;
}

static bool wanted(const bench_case_t* c, const opts_t* o) {
  return !o->filter || strstr(c->name, o->filter) != NULL;
}

int kiln_cmd_bench(int argc, char** argv) {
  opts_t o;
  bool help = false;
  int rc = parse_opts(argc, argv, &o, &help);
  if (rc) return rc;
  if (help) {
    fputs(bench_help, stdout);
    return 0;
  }
  if (o.threads <= 0) {
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    o.threads = nc > 0 ? (int32_t)nc : 1;
  }

  int32_t n_all = 0;
  bench_case_t* all = bench_cases(o.suites, o.quick, &n_all);
  if (!all) {
    fprintf(stderr, "kiln: error: out of memory\n");
    return 1;
  }
  kiln_device_t* gpu = NULL;
  if (o.target) {
    kiln_status_t ds = bench_gpu_open(o.target, &gpu);
    if (ds) {
      fprintf(stderr, "kiln bench: --target %s: %s\n", o.target, kiln_status_message(ds));
      kiln_status_free(ds);
      free(all);
      return 1;
    }
  }
  /* The gemm suite's peer: OpenBLAS on the CPU, CLBlast on OpenCL (the
   * device's second GEMM provider), none on Vulkan. */
  const kiln_target_t* gpu_target = gpu ? kiln_target_find(kiln_device_api(gpu)) : NULL;
  const char* gpu_peer = gpu && !o.no_peer && gpu_target && gpu_target->peer_sgemm ? gpu_target->peer_name : NULL;
  blas_t blas = {0};
  if ((o.suites & BENCH_SUITE_GEMM) && !o.no_peer && !gpu) blas_open(&blas, o.threads);

  /* Selected cases, each gemm followed by its OpenBLAS peer row. */
  bench_case_t* cases = calloc((size_t)(2 * n_all + 1), sizeof(bench_case_t));
  row_t* rows = calloc((size_t)(2 * n_all + 1), sizeof(row_t));
  if (!cases || !rows) {
    free(all);
    free(cases);
    free(rows);
    fprintf(stderr, "kiln: error: out of memory\n");
    return 1;
  }
  /* Peers run last: OpenBLAS's worker threads keep spinning after a call
   * and would slow down whatever kiln case came next. */
  int32_t n = 0, n_kiln = 0;
  for (int32_t i = 0; i < n_all; ++i) {
    if (!wanted(&all[i], &o)) continue;
    if (o.max_cases && n >= o.max_cases) break;
    cases[n++] = all[i];
  }
  n_kiln = n;
  for (int32_t i = 0; i < n_kiln && (blas.sgemm || gpu_peer); ++i) {
    /* the peers compute plain MatMuls (no transB, bias or Relu) */
    if (cases[i].kind != BENCH_GEMM || cases[i].p[3] || cases[i].p[4]) continue;
    cases[n] = cases[i];
    cases[n++].peer = gpu_peer ? gpu_peer : "openblas";
  }
  free(all);

  machine_t m;
  memset(&m, 0, sizeof m);
  kiln_peak_cpu_model(m.cpu, sizeof m.cpu);
  if (gpu)
    printf("kiln bench: target %s (%s), mean kernel time of %d runs after %d warm-up; peaks below are the CPU's "
           "(%s)\n",
           kiln_device_api(gpu), kiln_device_name(gpu), (int)o.repeat, (int)(o.warmup > 0 ? o.warmup : 1), m.cpu);
  else
    printf("kiln bench: target cpu, %s, %d threads, median of %d runs after %d warm-up\n", m.cpu, (int)o.threads,
           (int)o.repeat, (int)o.warmup);
  fflush(stdout);
  kiln_peak_options_t po;
  kiln_peak_options_default(&po);
  po.threads = o.threads;
  po.bandwidth_bytes = o.peak_bytes;
  kiln_status_t s = kiln_peak_measure(&po, &m.peak);
  if (s) {
    /* Without peaks the percentages are meaningless, but the times are not. */
    fprintf(stderr, "kiln bench: peak probe failed: %s\n", kiln_status_message(s));
    kiln_status_free(s);
    m.peak.threads = o.threads;
    rc = 1;
  }
  m.ridge = m.peak.gbs > 0 ? m.peak.gflops / m.peak.gbs : 0;
  printf("peak: %.1f GFLOP/s (FMA probe), %.1f GB/s (copy %.1f, triad %.1f), ridge %.2f FLOP/B\n",
         m.peak.gflops, m.peak.gbs, m.peak.copy_gbs, m.peak.triad_gbs, m.ridge);
  if ((o.suites & BENCH_SUITE_GEMM) && !o.no_peer && !gpu && !blas.sgemm)
    printf("note: libopenblas.so.0 not found; the gemm suite runs without its OpenBLAS peer\n");
  printf("%-9s %-12s %-34s %-38s %9s %9s %8s %7s %-7s\n", "progress", "suite", "name", "shape",
         "ms", "GFLOP/s", "GB/s", "%peak", "bound");
  fflush(stdout);

  double* pred = calloc((size_t)(n + 1), sizeof(double));
  double pred_total = 0, pred_done = 0, t_start = now_s();
  for (int32_t i = 0; i < n && pred; ++i) pred_total += pred[i] = predict(&cases[i], &m, &o);
  int32_t failed = 0;
  for (int32_t i = 0; i < n; ++i) {
    const bench_case_t* c = &cases[i];
    row_t* r = &rows[i];
    r->c = c;
    double t0 = now_s();
    /* on OpenCL kiln's rows run kiln's GEMM template (not a CLBlast call the
     * device might choose), the peer rows CLBlast */
    const int32_t gw = o.warmup > 0 ? o.warmup : 1;
    kiln_status_t cs = gpu && c->peer ? bench_gpu_peer(gpu, c, gw, o.repeat, &r->ms, &r->flops, &r->bytes)
                       : gpu          ? bench_gpu_run(gpu, c, "kiln", gw, o.repeat, &r->ms, &r->flops, &r->bytes)
                       : c->peer      ? run_openblas(c, &o, &blas, r)
                                      : run_kiln(c, &o, r);
    r->wall_s = now_s() - t0;
    r->ok = cs == NULL;
    char label[48];
    const char* peer_label = !c->peer ? NULL : gpu ? c->peer : "blas"; /* gemm/blas, gemm/clblast */
    snprintf(label, sizeof label, "%s%s%s", c->suite, peer_label ? "/" : "", peer_label ? peer_label : "");
    if (pred) pred_done += pred[i];
    double elapsed = now_s() - t_start;
    double eta = pred_done > 0 ? elapsed / pred_done * (pred_total - pred_done) : 0;
    if (r->ok) {
      classify(r, &m);
      printf("[%3d/%3d] %-12s %-34s %-38s %9.3f %9.1f %8.2f %6.1f%% %-7s ETA %.0f s\n", (int)i + 1,
             (int)n, label, c->name, c->shape, r->ms, r->gflops, r->gbs, r->pct, r->bound, eta);
    } else if (c->peer && kiln_status_code(cs) == KILN_UNSUPPORTED) {
      /* a peer the build lacks: said, not a failure of kiln's */
      const char* msg = kiln_status_message(cs);
      r->error = strdup(msg ? msg : "?");
      printf("[%3d/%3d] %-12s %-34s %-38s skipped: %s\n", (int)i + 1, (int)n, label, c->name, c->shape, msg);
      kiln_status_free(cs);
    } else {
      ++failed;
      const char* msg = kiln_status_message(cs);
      r->error = strdup(msg ? msg : "?");
      printf("[%3d/%3d] %-12s %-34s %-38s FAILED: %s  ETA %.0f s\n", (int)i + 1, (int)n, label,
             c->name, c->shape, msg, eta);
      kiln_status_free(cs);
    }
    fflush(stdout);
  }
  free(pred);
  printf("%d cases in %.1f s, %d failed\n", (int)n, now_s() - t_start, (int)failed);

  if (o.json && (s = write_json(o.json, &m, &o, rows, n))) {
    fprintf(stderr, "kiln: error: %s\n", kiln_status_message(s));
    kiln_status_free(s);
    rc = 1;
  }
  if (o.csv && (s = write_csv(o.csv, &m, rows, n))) {
    fprintf(stderr, "kiln: error: %s\n", kiln_status_message(s));
    kiln_status_free(s);
    rc = 1;
  }
  for (int32_t i = 0; i < n; ++i) free(rows[i].error);
  free(rows);
  free(cases);
  kiln_device_release(gpu);
  /* OpenBLAS stays loaded: unloading it under its idle threads can crash. */
  return failed ? 1 : rc;
}
