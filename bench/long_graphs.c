/* Compile time of long and wide graphs (BAD_INPUTS row 28, issue 19).
 *
 *   kiln_bench_long_graphs [--target cpu|opencl|vulkan] [-O0|-O1]
 *                          [--kind chain|wide] [--sizes 1000,5000,10000,100000]
 *
 * Builds each graph in memory (tests/long_graphs.h: a chain of Relu / Add /
 * Mul / Sigmoid, or n/2 branches summed by a tree of Adds, on f32[1,8]) and
 * times what `kiln compile -o` does after loading: graph passes, lowering,
 * fusion (-O1), template choice and the target's code generation (no device
 * compiler: the C compiler, PoCL or the driver run when a session opens).
 * Prints per size the seconds, the seconds per 1k nodes, the kernels and the
 * process's peak RSS so far; then t(10k)/t(1k), which is 10 for linear
 * time. One process measures all sizes, smallest first (peak RSS grows
 * with the largest so far). No timing is asserted anywhere: the figures
 * depend on the machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "ir/passes.h"
#include "long_graphs.h"
#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "lowering/template.h"
#include "runtime/program.h"
#include "targets/program_build.h"
#include "targets/registry.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static kiln_status_t compile(kiln_long_kind_t kind, int32_t n, int level, const kiln_target_t* t,
                             double* out_s, int32_t* out_kernels) {
  kiln_graph_t* g = NULL;
  KILN_RETURN_IF_ERROR(kiln_long_graph(kind, n, 8, &g));
  kiln_plan_t* p = NULL;
  kiln_program_t* prog = NULL;
  double t0 = now_s();
  kiln_status_t s = kiln_graph_prepare(g);
  if (!s) s = kiln_graph_optimize(g, level, NULL);
  kiln_plan_options_t po = {t->lowering, 1, 0, 0, 0, 0};
  if (!s) s = kiln_plan_build(g, &po, kiln_allocator_system(), &p);
  if (!s && level >= 1) s = kiln_plan_fuse(p, NULL, NULL);
  kiln_template_set_t ts;
  kiln_program_templates(t, &ts);
  if (!s) s = kiln_template_choose(p, &ts);
  if (!s) s = kiln_program_build(p, t, NULL, kiln_allocator_system(), &prog);
  *out_s = now_s() - t0;
  *out_kernels = p ? p->n_kernels : 0;
  kiln_program_destroy(prog);
  kiln_plan_destroy(p);
  kiln_graph_destroy(g);
  return s;
}

int main(int argc, char** argv) {
  const char* target = "cpu";
  const char* sizes = "1000,5000,10000,100000";
  int level = 1;
  kiln_long_kind_t kind = KILN_LONG_CHAIN;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--target") && i + 1 < argc) target = argv[++i];
    else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) sizes = argv[++i];
    else if (!strcmp(argv[i], "-O0") || !strcmp(argv[i], "-O1")) level = argv[i][2] - '0';
    else if (!strcmp(argv[i], "--kind") && i + 1 < argc) {
      const char* k = argv[++i];
      if (strcmp(k, "chain") && strcmp(k, "wide")) {
        fprintf(stderr, "--kind '%s': expected chain or wide\n", k);
        return 2;
      }
      kind = !strcmp(k, "wide") ? KILN_LONG_WIDE : KILN_LONG_CHAIN;
    } else {
      fprintf(stderr, "usage: %s [--target cpu|opencl|vulkan] [-O0|-O1] [--kind chain|wide] [--sizes N,N,...]\n",
              argv[0]);
      return 2;
    }
  }
  const kiln_target_t* t = kiln_target_find(target);
  if (!t) {
    fprintf(stderr, "--target '%s': not built in\n", target);
    return 2;
  }
  double t1k = 0, t10k = 0;
  int rc = 0;
  for (const char* c = sizes; *c;) {
    char* end = NULL;
    long n = strtol(c, &end, 10);
    if (end == c || n < 1 || n > 10000000) {
      fprintf(stderr, "--sizes '%s': expected positive integers separated by commas\n", sizes);
      return 2;
    }
    c = *end == ',' ? end + 1 : end;
    double sec = 0;
    int32_t kernels = 0;
    kiln_status_t s = compile(kind, (int32_t)n, level, t, &sec, &kernels);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    if (s) {
      printf("long_graphs %s %s -O%d %7ld nodes: failed after %.3f s: %s\n", kind ? "wide" : "chain", target,
             level, n, sec, kiln_status_message(s));
      kiln_status_free(s);
      rc = 1;
      continue;
    }
    printf("long_graphs %s %s -O%d %7ld nodes: %8.3f s (%.4f s per 1k nodes), %6d kernels, peak RSS %.0f MB\n",
           kind ? "wide" : "chain", target, level, n, sec, sec * 1000.0 / (double)n, (int)kernels,
           (double)ru.ru_maxrss / 1024.0);
    fflush(stdout);
    if (n == 1000) t1k = sec;
    if (n == 10000) t10k = sec;
  }
  if (t1k > 0 && t10k > 0)
    printf("long_graphs %s %s -O%d: t(10k)/t(1k) = %.1f (10 = linear)\n", kind ? "wide" : "chain", target, level,
           t10k / t1k);
  return rc;
}
