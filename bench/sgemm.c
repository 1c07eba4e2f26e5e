/* sgemm benchmark: kiln's CPU backend against OpenBLAS in the same process.
 *
 *   kiln_bench_sgemm [--sizes 256,512,1024,2048] [--threads N] [--repeat R]
 *
 * For each size N it builds a one-node ONNX graph Y = MatMul(A, B) with
 * both operands as runtime inputs (what cblas_sgemm computes: no compile-time
 * packing advantage), and a second graph where B is a constant initializer
 * (the model case: weights pre-packed at compile time). Each is compiled
 * with the CPU backend, checked against OpenBLAS on the same data, and timed
 * (median of R runs after a warm-up); OpenBLAS runs with the same thread
 * count. Prints one line per case with GFLOP/s and the ratio to OpenBLAS. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ir/op.h"
#include "lowering/plan.h"
#include "compiler/compare.h"
#include "targets/cpu/cpu_backend.h"

extern void openblas_set_num_threads(int num_threads);

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static int die(kiln_status_t s) {
  fprintf(stderr, "kiln_bench_sgemm: %s\n", kiln_status_message(s));
  kiln_status_free(s);
  return 1;
}

static void fill(float* p, int64_t n, uint32_t seed) {
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
}

/* Builds Y = MatMul(A, B) for N x N; B constant when |const_b|. */
static kiln_status_t build(int64_t n, bool const_b, const float* bdata, kiln_graph_t** out) {
  kiln_graph_t* g = NULL;
  KILN_RETURN_IF_ERROR(kiln_graph_create(kiln_allocator_system(), &g));
  int64_t dims[2] = {n, n};
  kiln_shape_t sh = kiln_shape_make(2, dims);
  kiln_status_t s = kiln_graph_set_opset(g, "", 13);
  if (!s) s = kiln_graph_add_input(g, "A", KILN_DTYPE_F32, &sh, NULL);
  if (!s && const_b) {
    kiln_array_t b;
    s = kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_F32, &sh, &b);
    if (!s) {
      memcpy(b.data, bdata, b.nbytes);
      s = kiln_graph_add_initializer(g, "B", &b, NULL);
    }
  } else if (!s) {
    s = kiln_graph_add_input(g, "B", KILN_DTYPE_F32, &sh, NULL);
  }
  const char* ins[2] = {"A", "B"};
  const char* outs[1] = {"Y"};
  if (!s) s = kiln_graph_add_node(g, "MatMul", "mm", 2, ins, 1, outs, 0, NULL, NULL);
  if (!s) s = kiln_graph_add_output(g, "Y");
  if (!s) s = kiln_graph_prepare(g);
  if (s) {
    kiln_graph_destroy(g);
    return s;
  }
  *out = g;
  return NULL;
}

int main(int argc, char** argv) {
  int64_t sizes[16] = {256, 512, 1024, 2048};
  int n_sizes = 4, threads = 0, repeat = 10;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
      n_sizes = 0;
      for (char* tok = strtok(argv[++i], ","); tok && n_sizes < 16; tok = strtok(NULL, ","))
        sizes[n_sizes++] = atoll(tok);
    } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) {
      repeat = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: kiln_bench_sgemm [--sizes 256,512,...] [--threads N] [--repeat R]\n");
      return 2;
    }
  }
  if (repeat < 1) repeat = 1;
  int nthreads = threads > 0 ? threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
  openblas_set_num_threads(nthreads);
  printf("sgemm C[N,N] = A[N,N] x B[N,N], f32, %d threads, median of %d runs\n", nthreads, repeat);
  printf("%-6s %-10s %10s %10s %12s %8s %10s\n", "N", "B", "kiln ms", "kiln GF/s", "OpenBLAS GF/s",
         "ratio", "compile s");
  for (int si = 0; si < n_sizes; ++si) {
    int64_t n = sizes[si];
    size_t bytes = (size_t)(n * n) * sizeof(float);
    /* 64-byte aligned, so kiln_cpu_run reads them in place (zero copy). */
    float* a = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    float* b = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    float* c = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!a || !b || !c) return die(kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory"));
    fill(a, n * n, 1);
    fill(b, n * n, 2);
    double flops = 2.0 * (double)n * (double)n * (double)n;
    double* ts = calloc((size_t)repeat, sizeof(double));
    /* The reference result (OpenBLAS), then kiln timed while OpenBLAS's
     * threads sleep, then OpenBLAS timed: its worker threads spin for a while
     * after each call and would steal the cores from kiln's OpenMP threads. */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, a, (int)n, b,
                (int)n, 0.0f, c, (int)n);
    usleep(300000);
    double kiln_ms[2], kiln_gf[2], compile_s[2];
    for (int variant = 0; variant < 2; ++variant) {
      bool const_b = variant == 1;
      kiln_graph_t* g = NULL;
      kiln_status_t s = build(n, const_b, b, &g);
      if (s) return die(s);
      double c0 = now_s();
      kiln_plan_t* plan = NULL;
      kiln_plan_options_t po = {KILN_TARGET_CLASS_CPU, threads, 0, 0, 0, 0};
      if ((s = kiln_plan_build(g, &po, kiln_allocator_system(), &plan))) return die(s);
      kiln_cpu_options_t co;
      kiln_cpu_options_default(&co);
      co.threads = threads;
      kiln_cpu_exec_t* ex = NULL;
      kiln_cpu_compile_stats_t st;
      if ((s = kiln_cpu_compile(plan, &co, &ex, &st))) return die(s);
      compile_s[variant] = now_s() - c0;
      kiln_array_t in[2], out[1];
      int64_t dims[2] = {n, n};
      kiln_shape_t sh = kiln_shape_make(2, dims);
      in[0] = (kiln_array_t){KILN_DTYPE_F32, sh, a, bytes};
      in[1] = (kiln_array_t){KILN_DTYPE_F32, sh, b, bytes};
      if ((s = kiln_cpu_run(ex, in, out, NULL, NULL))) return die(s);
      kiln_array_t want = {KILN_DTYPE_F32, sh, c, bytes};
      kiln_compare_result_t cr;
      kiln_compare(&out[0], &want, 1e-4, 1e-4, &cr);
      kiln_array_free(kiln_allocator_system(), &out[0]);
      if (!cr.ok) {
        fprintf(stderr, "N=%lld %s: kiln disagrees with OpenBLAS: %s\n", (long long)n,
                const_b ? "const" : "input", cr.message);
        return 1;
      }
      for (int r = 0; r < repeat; ++r) {
        double t0 = now_s();
        if ((s = kiln_cpu_run(ex, in, out, NULL, NULL))) return die(s);
        ts[r] = now_s() - t0;
        kiln_array_free(kiln_allocator_system(), &out[0]);
      }
      qsort(ts, (size_t)repeat, sizeof(double), cmp_d);
      kiln_ms[variant] = ts[repeat / 2] * 1e3;
      kiln_gf[variant] = flops / ts[repeat / 2] * 1e-9;
      kiln_cpu_exec_destroy(ex);
      kiln_plan_destroy(plan);
      kiln_graph_destroy(g);
    }
    for (int r = 0; r < repeat; ++r) {
      double t0 = now_s();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, a, (int)n,
                  b, (int)n, 0.0f, c, (int)n);
      ts[r] = now_s() - t0;
    }
    qsort(ts, (size_t)repeat, sizeof(double), cmp_d);
    double blas_gf = flops / ts[repeat / 2] * 1e-9;
    usleep(300000);
    for (int variant = 0; variant < 2; ++variant) {
      printf("%-6lld %-10s %10.3f %10.1f %12.1f %7.2fx %10.2f\n", (long long)n,
             variant ? "constant" : "input", kiln_ms[variant], kiln_gf[variant], blas_gf,
             kiln_gf[variant] / blas_gf, compile_s[variant]);
    }
    fflush(stdout);
    free(ts);
    free(a);
    free(b);
    free(c);
  }
  return 0;
}
