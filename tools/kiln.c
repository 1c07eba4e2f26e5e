/* The `kiln` command line: info, run, dot, dump and ops.
 *
 * Every subcommand prints its own --help. Errors go to stderr as
 * "kiln: error: <message>" and exit 1; usage errors exit 2; `kiln run
 * --compare` exits 3 when outputs are outside tolerance. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "frontend/onnx.h"
#include "ir/op.h"
#include "ir/passes.h"
#include "lowering/fuse.h"
#include "runtime/compare.h"
#include "runtime/npy.h"
#include "runtime/ref_exec.h"
#include "targets/cpu/cpu_backend.h"
#include "tools/bench_cmd.h"
#include "tools/cli_args.h"

#define MAX_ARGS 64

static int fail(kiln_status_t s) {
  fprintf(stderr, "kiln: error: %s\n", kiln_status_message(s));
  kiln_status_free(s);
  return 1;
}

static int usage_error(const char* cmd, const char* fmt, const char* arg) {
  fprintf(stderr, "kiln %s: ", cmd);
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nTry 'kiln %s --help'.\n", cmd);
  return 2;
}

/* ---- shared option handling ------------------------------------------ */

typedef struct {
  const char* model;
  const char* dims[MAX_ARGS]; /* SYM=VALUE */
  int n_dims;
  bool bind_rest_to_one;      /* symbols without --dim become 1 (kiln info) */
  bool no_prepare;            /* parse and bind --dim only (kiln run binds the rest) */
} load_opts_t;

/* Parses the model, binds --dim symbols in the input shapes, prepares. */
static kiln_status_t load(const load_opts_t* lo, kiln_graph_t** out) {
  kiln_graph_t* g = NULL;
  KILN_RETURN_IF_ERROR(kiln_onnx_parse_model(lo->model, NULL, kiln_allocator_system(), &g));
  for (int i = 0; i < lo->n_dims; ++i) {
    const char* eq = strchr(lo->dims[i], '=');
    char* end = NULL;
    long long v = eq ? strtoll(eq + 1, &end, 10) : -1;
    if (!eq || !end || *end || v < 0) {
      kiln_graph_destroy(g);
      return kiln_make_status(KILN_INVALID_ARGUMENT, "--dim '%s': expected SYMBOL=SIZE", lo->dims[i]);
    }
    int32_t sym = 0;
    for (int32_t k = 1; k <= g->n_symbols; ++k)
      if (strlen(g->symbols[k]) == (size_t)(eq - lo->dims[i]) &&
          strncmp(g->symbols[k], lo->dims[i], (size_t)(eq - lo->dims[i])) == 0)
        sym = k;
    if (!sym) {
      kiln_graph_destroy(g);
      return kiln_make_status(KILN_NOT_FOUND, "--dim '%s': the model has no dimension named '%.*s'",
                              lo->dims[i], (int)(eq - lo->dims[i]), lo->dims[i]);
    }
    for (int32_t k = 0; k < g->n_inputs; ++k) {
      kiln_tensor_t* t = &g->tensors[g->inputs[k]];
      for (int32_t d = 0; d < t->shape.rank; ++d)
        if (kiln_dim_symbol(t->shape.dims[d]) == sym) t->shape.dims[d] = v;
    }
  }
  if (lo->bind_rest_to_one) {
    bool any = false;
    for (int32_t k = 0; k < g->n_inputs; ++k) {
      kiln_tensor_t* t = &g->tensors[g->inputs[k]];
      for (int32_t d = 0; d < t->shape.rank; ++d) {
        int32_t sym = kiln_dim_symbol(t->shape.dims[d]);
        if (!sym) continue;
        if (!any) printf("note: symbolic dims bound to 1 for costs (set with --dim):");
        printf(" %s", g->symbols[sym]);
        t->shape.dims[d] = 1;
        any = true;
      }
    }
    if (any) printf("\n");
  }
  if (lo->no_prepare) {
    *out = g;
    return NULL;
  }
  kiln_status_t s = kiln_graph_prepare(g);
  if (s) {
    kiln_graph_destroy(g);
    return s;
  }
  *out = g;
  return NULL;
}

static bool is_help(const char* a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

/* Strict number parsing for options: the whole string must be a number. */
static bool parse_double(const char* s, double* out) {
  char* end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (!s[0] || *end || errno || !isfinite(v) || v < 0) return false;
  *out = v;
  return true;
}

/* ---- kiln info ------------------------------------------------------- */

static const char* info_help =
    "usage: kiln info MODEL.onnx [--dim SYMBOL=SIZE ...] [--symbolic] [--fused]\n"
    "\n"
    "Prints the model's inputs and outputs, an op histogram, and one line per\n"
    "node with its output shape, parameter count, FLOPs and bytes moved (inputs\n"
    "read + outputs written), then totals. Symbolic dims (dim_param) are bound\n"
    "to 1 for the costs unless set with --dim, e.g. --dim N=8; --symbolic keeps\n"
    "them symbolic (costs that depend on them print as '?').\n"
    "--fused also runs the graph passes, lowering and kernel fusion and prints the\n"
    "fusion report: kernels before/after, the ops each kernel computes, and the\n"
    "intermediate bytes no longer written to and read from memory.\n";

static void human(double v, char* buf, size_t n) {
  const char* u[] = {"", "K", "M", "G", "T"};
  int k = 0;
  while (fabs(v) >= 1000 && k < 4) {
    v /= 1000;
    ++k;
  }
  snprintf(buf, n, k ? "%.2f%s" : "%.0f%s", v, u[k]);
}

static int64_t tensor_bytes(const kiln_tensor_t* t) {
  if (!kiln_shape_is_static(&t->shape)) return -1;
  return kiln_shape_count(&t->shape) * (int64_t)kiln_dtype_size(t->dtype);
}

/* kiln info --fused: runs the passes, lowers and fuses, and prints which
 * graph nodes each kernel computes and the memory traffic fusion saved. */
static kiln_status_t print_fusion(kiln_graph_t* g) {
  int32_t before = g->n_nodes;
  KILN_RETURN_IF_ERROR(kiln_graph_optimize(g, 1, NULL));
  kiln_plan_options_t po = {KILN_TARGET_CLASS_CPU, 0};
  kiln_plan_t* p = NULL;
  KILN_RETURN_IF_ERROR(kiln_plan_build(g, &po, kiln_allocator_system(), &p));
  kiln_fusion_report_t rep;
  memset(&rep, 0, sizeof rep);
  kiln_status_t s = kiln_plan_fuse(p, &rep, NULL);
  if (s) {
    kiln_plan_destroy(p);
    return s;
  }
  printf("fusion (graph passes: %d -> %d nodes):\n", before, g->n_nodes);
  printf("  kernels: %d before fusion, %d after (%d epilogues fused, %d producers inlined)\n",
         rep.kernels_before, rep.kernels_after, rep.epilogues_fused, rep.producers_inlined);
  printf("  intermediate traffic: %.2f MB without fusion, %.2f MB no longer written/read "
         "(%.1f%% less)\n",
         (double)rep.bytes_before / 1e6, (double)rep.bytes_saved / 1e6,
         rep.bytes_before ? 100.0 * (double)rep.bytes_saved / (double)rep.bytes_before : 0.0);
  printf("  %-4s %-36s %s\n", "#", "kernel", "ops (anchor first)");
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    const kiln_plan_kernel_t* kk = &p->kernels[k];
    printf("  %-4d %-36.36s %s", k, kk->func->name, g->nodes[kk->node].op_type);
    int32_t nodes[64];
    int32_t n = kiln_plan_kernel_nodes(p, k, nodes, 64);
    for (int32_t j = 0; j < n && j < 64; ++j)
      if (nodes[j] != kk->node) printf(" + %s", g->nodes[nodes[j]].op_type);
    printf("\n");
  }
  kiln_plan_destroy(p);
  return NULL;
}

static int cmd_info(int argc, char** argv) {
  load_opts_t lo = {0};
  lo.bind_rest_to_one = true;
  bool fused = false;
  for (int i = 0; i < argc; ++i) {
    if (is_help(argv[i])) {
      fputs(info_help, stdout);
      return 0;
    } else if (!strcmp(argv[i], "--symbolic")) {
      lo.bind_rest_to_one = false;
    } else if (!strcmp(argv[i], "--fused")) {
      fused = true;
    } else if (!strcmp(argv[i], "--dim") && i + 1 < argc) {
      if (lo.n_dims < MAX_ARGS) lo.dims[lo.n_dims++] = argv[++i];
    } else if (argv[i][0] == '-') {
      return usage_error("info", "unknown option '%s'", argv[i]);
    } else if (!lo.model) {
      lo.model = argv[i];
    } else {
      return usage_error("info", "unexpected argument '%s'", argv[i]);
    }
  }
  if (!lo.model) return usage_error("info", "%sno model given", "");
  kiln_graph_t* g = NULL;
  kiln_status_t s = load(&lo, &g);
  if (s) return fail(s);
  char b[256], b2[64], b3[64], b4[64];
  printf("model: %s  (graph '%s', ai.onnx opset %lld, %d nodes)\n", lo.model, g->name,
         (long long)g->opset, g->n_nodes);
  printf("inputs:\n");
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    const kiln_tensor_t* t = &g->tensors[g->inputs[i]];
    printf("  %-24s %-5s %s\n", t->name, kiln_dtype_name(t->dtype),
           kiln_graph_format_shape(g, &t->shape, b, sizeof b));
  }
  printf("outputs:\n");
  for (int32_t i = 0; i < g->n_outputs; ++i) {
    const kiln_tensor_t* t = &g->tensors[g->outputs[i]];
    printf("  %-24s %-5s %s\n", t->name, kiln_dtype_name(t->dtype),
           kiln_graph_format_shape(g, &t->shape, b, sizeof b));
  }
  /* Op histogram in first-seen order. */
  printf("ops:\n");
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    bool seen = false;
    for (int32_t j = 0; j < i && !seen; ++j) seen = !strcmp(g->nodes[j].op_type, g->nodes[i].op_type);
    if (seen) continue;
    int count = 0;
    for (int32_t j = i; j < g->n_nodes; ++j) count += !strcmp(g->nodes[j].op_type, g->nodes[i].op_type);
    printf("  %-24s %d\n", g->nodes[i].op_type, count);
  }
  printf("layers:\n  %-4s %-32s %-18s %-20s %10s %10s %10s\n", "#", "node", "op", "output shape",
         "params", "FLOPs", "bytes");
  int64_t tot_params = 0, tot_flops = 0, tot_bytes = 0;
  bool flops_unknown = false, bytes_unknown = false;
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    const kiln_node_t* n = &g->nodes[i];
    int64_t params = 0, bytes = 0;
    bool bknown = true, static_out = true;
    kiln_tensor_t* in[KILN_MAX_NODE_INPUTS];
    kiln_tensor_t* out[KILN_MAX_NODE_OUTPUTS];
    for (int32_t j = 0; j < n->n_inputs; ++j) {
      int32_t t = n->inputs[j];
      in[j] = t >= 0 ? &g->tensors[t] : NULL;
      if (t < 0) continue;
      if (g->tensors[t].flags & KILN_TENSOR_INITIALIZER)
        params += kiln_shape_count(&g->tensors[t].shape);
      int64_t tb = tensor_bytes(&g->tensors[t]);
      if (tb < 0) bknown = false;
      else bytes += tb;
    }
    for (int32_t j = 0; j < n->n_outputs; ++j) {
      int32_t t = n->outputs[j];
      out[j] = t >= 0 ? &g->tensors[t] : NULL;
      if (t < 0) continue;
      int64_t tb = tensor_bytes(&g->tensors[t]);
      if (tb < 0) bknown = false, static_out = false;
      else bytes += tb;
    }
    int64_t flops = -1;
    bool all_static = static_out;
    for (int32_t j = 0; j < n->n_inputs; ++j)
      if (in[j] && !kiln_shape_is_static(&in[j]->shape)) all_static = false;
    if (all_static) {
      kiln_infer_t ic = {g, n, g->opset, n->n_inputs, in, n->n_outputs, out, g->allocator, false};
      if (n->schema->flops) flops = n->schema->flops(&ic);
      else flops = n->n_outputs && out[0] ? kiln_shape_count(&out[0]->shape) : 0;
    }
    const kiln_tensor_t* o0 = n->n_outputs && n->outputs[0] >= 0 ? &g->tensors[n->outputs[0]] : NULL;
    human((double)params, b2, sizeof b2);
    if (flops >= 0) human((double)flops, b3, sizeof b3);
    else snprintf(b3, sizeof b3, "?");
    if (bknown) human((double)bytes, b4, sizeof b4);
    else snprintf(b4, sizeof b4, "?");
    printf("  %-4d %-32.32s %-18.18s %-20s %10s %10s %10s\n", i, n->name, n->op_type,
           o0 ? kiln_graph_format_shape(g, &o0->shape, b, sizeof b) : "-", b2, b3, b4);
    tot_params += params;
    if (flops >= 0) tot_flops += flops;
    else flops_unknown = true;
    if (bknown) tot_bytes += bytes;
    else bytes_unknown = true;
  }
  int64_t weight_bytes = 0;
  int64_t all_params = 0;
  for (int32_t t = 0; t < g->n_tensors; ++t)
    if (g->tensors[t].flags & KILN_TENSOR_INITIALIZER) {
      all_params += kiln_shape_count(&g->tensors[t].shape);
      weight_bytes += tensor_bytes(&g->tensors[t]);
    }
  human((double)all_params, b2, sizeof b2);
  human((double)tot_flops, b3, sizeof b3);
  human((double)tot_bytes, b4, sizeof b4);
  printf("total: %s parameters (%lld, %.2f MB of weights), %s%s FLOPs, %s%s bytes moved\n", b2,
         (long long)all_params, (double)weight_bytes / 1e6, b3, flops_unknown ? "+?" : "", b4,
         bytes_unknown ? "+?" : "");
  if (fused) {
    kiln_status_t fs = print_fusion(g);
    if (fs) {
      kiln_graph_destroy(g);
      return fail(fs);
    }
  }
  kiln_graph_destroy(g);
  return 0;
}

/* ---- kiln run -------------------------------------------------------- */

static const char* run_help =
    "usage: kiln run MODEL.onnx [options]\n"
    "\n"
    "Runs the model and prints a summary of each output.\n"
    "  --target cpu|ref        'cpu': compile to C, build with the system compiler and\n"
    "                          run (default); 'ref': the reference interpreter\n"
    "  --threads N             CPU threads (default: all cores)\n"
    "  --dump DIR              write the generated source and the plan to DIR\n"
    "  --input NAME=FILE.npy   input array (repeatable); inputs not given get seeded\n"
    "                          random values (floats ~ N(0,1), ints in [0,4))\n"
    "  --seed N                seed for random inputs (default 0)\n"
    "  --dim SYMBOL=SIZE       size of a symbolic dim for random inputs (default 1)\n"
    "  --output DIR            write every output to DIR/<name>.npy\n"
    "  --compare [NAME=]FILE.npy  expected output (repeatable; without NAME, outputs in\n"
    "                          order); exit status 3 when any output is outside tolerance\n"
    "  --rtol R --atol A       tolerance for --compare (default 1e-4 / 1e-5)\n"
    "  --repeat N              run N more times after one warm-up and print\n"
    "                          'latency: median X ms, min Y ms over N runs'\n"
    "  --profile               print per-kernel times (slowest first; GFLOP/s for cpu)\n"
    "  -O0 | -O1               graph passes and kernel fusion off / on (default -O1)\n"
    "  --check-ref             also run the reference interpreter on the same inputs and\n"
    "                          compare every output with it (--rtol/--atol); exit 3 on a\n"
    "                          mismatch\n";

typedef struct {
  double* t;
  int32_t n;
} prof_t;

static void on_node(void* user, const kiln_graph_t* g, int32_t node, double seconds) {
  prof_t* p = user;
  p->t[node] += seconds;
}

static uint64_t rng_next(uint64_t* s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static kiln_status_t random_input(const kiln_graph_t* g, const kiln_tensor_t* t, uint64_t seed,
                                  const int64_t* sym_val, kiln_array_t* out) {
  kiln_shape_t sh = t->shape;
  if (sh.rank < 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "input '%s' has unknown rank; pass it with --input", t->name);
  for (int32_t d = 0; d < sh.rank; ++d)
    if (sh.dims[d] < 0) {
      int32_t sym = kiln_dim_symbol(sh.dims[d]);
      sh.dims[d] = sym && sym_val[sym] >= 0 ? sym_val[sym] : 1;
    }
  KILN_RETURN_IF_ERROR(kiln_array_alloc(kiln_allocator_system(), t->dtype, &sh, out));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x1234567;
  for (const char* c = t->name; *c; ++c) s = (s ^ (unsigned char)*c) * 0x100000001B3ull;
  if (!s) s = 1;
  int64_t n = kiln_shape_count(&sh);
  for (int64_t i = 0; i < n; ++i) {
    if (kiln_dtype_is_float(t->dtype)) {
      double u1 = ((double)(rng_next(&s) >> 11) + 1.0) / 9007199254740993.0;
      double u2 = (double)(rng_next(&s) >> 11) / 9007199254740992.0;
      kiln_store_f64(t->dtype, out->data, (size_t)i, sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
    } else {
      kiln_store_i64(t->dtype, out->data, (size_t)i, (int64_t)(rng_next(&s) % 4));
    }
  }
  return NULL;
}

static void summarize(const char* name, const kiln_array_t* a) {
  char b[256];
  int64_t n = kiln_shape_count(&a->shape);
  double mn = INFINITY, mx = -INFINITY, sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    double v = kiln_load_f64(a->dtype, a->data, (size_t)i);
    if (v < mn) mn = v;
    if (v > mx) mx = v;
    sum += v;
  }
  printf("output %s: %s%s", name, kiln_dtype_name(a->dtype), kiln_shape_format(&a->shape, b, sizeof b));
  if (n) printf("  min %.6g max %.6g mean %.6g", mn, mx, sum / (double)n);
  printf("\n  [");
  for (int64_t i = 0; i < n && i < 8; ++i) printf("%s%.6g", i ? ", " : "", kiln_load_f64(a->dtype, a->data, (size_t)i));
  printf("%s]\n", n > 8 ? ", ..." : "");
  if (n > 1 && kiln_dtype_is_float(a->dtype) && a->shape.rank >= 1) {
    int64_t arg = 0;
    for (int64_t i = 1; i < n; ++i)
      if (kiln_load_f64(a->dtype, a->data, (size_t)i) > kiln_load_f64(a->dtype, a->data, (size_t)arg)) arg = i;
    printf("  argmax %lld\n", (long long)arg);
  }
}

static int cmp_double_asc(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One executor behind `kiln run`: the reference interpreter or the compiled
 * CPU plan. */
typedef struct {
  kiln_graph_t* g;
  bool cpu;
  kiln_ref_options_t* ro;
  kiln_plan_t* plan;
  kiln_cpu_exec_t* exec;
  int threads;
  const char* dump_dir;
  double* kernel_times; /* per plan kernel, accumulated when profiling */
  int opt;              /* -O level: >= 1 fuses kernels */
  kiln_fusion_report_t fusion;
} runner_t;

static void on_kernel(void* user, int32_t k, double seconds) {
  runner_t* r = user;
  if (r->kernel_times) r->kernel_times[k] += seconds;
}

static kiln_status_t runner_compile(runner_t* r) {
  kiln_plan_options_t po = {KILN_TARGET_CLASS_CPU, r->threads};
  double t0 = now_s();
  KILN_RETURN_IF_ERROR(kiln_plan_build(r->g, &po, kiln_allocator_system(), &r->plan));
  if (r->opt >= 1) KILN_RETURN_IF_ERROR(kiln_plan_fuse(r->plan, &r->fusion, NULL));
  double t1 = now_s();
  kiln_cpu_options_t co;
  kiln_cpu_options_default(&co);
  co.threads = r->threads;
  co.dump_dir = r->dump_dir;
  kiln_cpu_compile_stats_t st;
  memset(&st, 0, sizeof st);
  KILN_RETURN_IF_ERROR(kiln_cpu_compile(r->plan, &co, &r->exec, &st));
  if (r->opt >= 1)
    printf("fused %d kernels into %d (%d epilogues, %d producers inlined), %.1f MB less "
           "intermediate traffic\n",
           r->fusion.kernels_before, r->fusion.kernels_after, r->fusion.epilogues_fused,
           r->fusion.producers_inlined, (double)r->fusion.bytes_saved / 1e6);
  printf("compiled %d kernels: lowering %.1f ms, codegen %.1f ms, %s %.1f ms, load %.1f ms\n",
         r->plan->n_kernels, (t1 - t0) * 1e3, st.codegen_s * 1e3,
         st.cache_hit ? "cache hit" : "cc", st.compile_s * 1e3, st.load_s * 1e3);
  if (r->dump_dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/plan.txt", r->dump_dir);
    FILE* f = fopen(path, "w");
    if (f) {
      kiln_plan_dump(r->plan, f, true);
      fclose(f);
      printf("wrote %s\n", path);
    }
  }
  r->kernel_times = calloc((size_t)r->plan->n_kernels + 1, sizeof(double));
  if (!r->kernel_times) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
  return NULL;
}

static kiln_status_t runner_run(runner_t* r, const kiln_array_t* in, kiln_array_t* out) {
  if (!r->cpu) return kiln_ref_run(r->g, in, r->ro, out);
  return kiln_cpu_run(r->exec, in, out, r->ro->on_node ? on_kernel : NULL, r);
}

static void runner_destroy(runner_t* r) {
  kiln_cpu_exec_destroy(r->exec);
  kiln_plan_destroy(r->plan);
  free(r->kernel_times);
  memset(r, 0, sizeof(*r));
}

static void print_cpu_profile(const runner_t* r, int runs) {
  const kiln_plan_t* p = r->plan;
  int32_t n = p->n_kernels;
  int32_t* order = malloc(sizeof(int32_t) * (size_t)(n + 1));
  if (!order) return;
  double total = 0;
  for (int32_t k = 0; k < n; ++k) {
    order[k] = k;
    total += r->kernel_times[k];
  }
  for (int32_t a = 1; a < n; ++a)
    for (int32_t b = a; b > 0 && r->kernel_times[order[b]] > r->kernel_times[order[b - 1]]; --b) {
      int32_t t = order[b];
      order[b] = order[b - 1];
      order[b - 1] = t;
    }
  printf("profile (cpu kernels, %d runs, total %.3f ms/run):\n  %-36s %-18s %10s %7s %9s\n", runs,
         total * 1e3 / runs, "kernel", "op", "ms/run", "share", "GFLOP/s");
  for (int32_t i = 0; i < n && i < 40; ++i) {
    const kiln_plan_kernel_t* k = &p->kernels[order[i]];
    double t = r->kernel_times[order[i]] / runs;
    printf("  %-36.36s %-18.18s %10.3f %6.1f%% %9.2f\n", k->func->name,
           p->graph->nodes[k->node].op_type, t * 1e3,
           total > 0 ? 100 * r->kernel_times[order[i]] / total : 0,
           t > 0 ? (double)k->flops / t * 1e-9 : 0.0);
  }
  free(order);
}

static int cmd_run(int argc, char** argv) {
  load_opts_t lo = {0};
  const char* inputs[MAX_ARGS];
  const char* compares[MAX_ARGS];
  int n_inputs = 0, n_compares = 0, repeat = 0;
  const char* outdir = NULL;
  const char* target = "cpu";
  const char* dump_dir = NULL;
  int threads = 0;
  runner_t R;
  memset(&R, 0, sizeof R);
  double rtol = 1e-4, atol = 1e-5;
  uint64_t seed = 0;
  bool profile = false;
  bool check_ref = false;
  int opt = 1;
  for (int i = 0; i < argc; ++i) {
    const char* a = argv[i];
    bool has = i + 1 < argc;
    if (is_help(a)) {
      fputs(run_help, stdout);
      return 0;
    } else if (!strcmp(a, "--input") && has) {
      if (n_inputs < MAX_ARGS) inputs[n_inputs++] = argv[++i];
    } else if (!strcmp(a, "--compare") && has) {
      if (n_compares < MAX_ARGS) compares[n_compares++] = argv[++i];
    } else if (!strcmp(a, "--dim") && has) {
      if (lo.n_dims < MAX_ARGS) lo.dims[lo.n_dims++] = argv[++i];
    } else if (!strcmp(a, "--output") && has) {
      outdir = argv[++i];
    } else if ((!strcmp(a, "--target") || !strcmp(a, "-t")) && has) {
      target = argv[++i];
    } else if (!strcmp(a, "--rtol") && has) {
      if (!parse_double(argv[++i], &rtol))
        return usage_error("run", "--rtol '%s': expected a non-negative number", argv[i]);
    } else if (!strcmp(a, "--atol") && has) {
      if (!parse_double(argv[++i], &atol))
        return usage_error("run", "--atol '%s': expected a non-negative number", argv[i]);
    } else if (!strcmp(a, "--seed") && has) {
      long long v;
      if (!parse_int(argv[++i], 0, INT64_MAX, &v))
        return usage_error("run", "--seed '%s': expected a non-negative integer", argv[i]);
      seed = (uint64_t)v;
    } else if (!strcmp(a, "--repeat") && has) {
      long long v;
      if (!parse_int(argv[++i], 0, 1000000, &v))
        return usage_error("run", "--repeat '%s': expected an integer in 0..1000000", argv[i]);
      repeat = (int)v;
    } else if (!strcmp(a, "--profile")) {
      profile = true;
    } else if (!strcmp(a, "--check-ref")) {
      check_ref = true;
    } else if (!strcmp(a, "-O0") || !strcmp(a, "-O1")) {
      opt = a[2] - '0';
    } else if (!strcmp(a, "--threads") && has) {
      long long v;
      if (!parse_int(argv[++i], 0, 1024, &v))
        return usage_error("run", "--threads '%s': expected an integer in 0..1024", argv[i]);
      threads = (int)v;
    } else if (!strcmp(a, "--dump") && has) {
      dump_dir = argv[++i];
    } else if (a[0] == '-') {
      return usage_error("run", "unknown option or missing value: '%s'", a);
    } else if (!lo.model) {
      lo.model = a;
    } else {
      return usage_error("run", "unexpected argument '%s'", a);
    }
  }
  if (!lo.model) return usage_error("run", "%sno model given", "");
  bool use_cpu = !strcmp(target, "cpu");
  if (!use_cpu && strcmp(target, "ref") != 0)
    return usage_error("run", "--target '%s': expected 'cpu' or 'ref'", target);
  kiln_allocator_t al = kiln_allocator_system();
  kiln_graph_t* g = NULL;
  lo.no_prepare = true;
  kiln_status_t s = load(&lo, &g);
  if (s) return fail(s);
  int rc = 0;
  kiln_array_t* in = calloc((size_t)g->n_inputs + 1, sizeof(kiln_array_t));
  kiln_array_t* out = calloc((size_t)g->n_outputs + 1, sizeof(kiln_array_t));
  int64_t* sym_val = malloc(sizeof(int64_t) * (size_t)(g->n_symbols + 1));
  double* ptimes = calloc((size_t)g->n_nodes + 1, sizeof(double));
  if (!in || !out || !sym_val || !ptimes) {
    s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  for (int32_t k = 0; k <= g->n_symbols; ++k) sym_val[k] = -1;
  for (int i = 0; i < n_inputs; ++i) {
    const char* eq = strchr(inputs[i], '=');
    if (!eq) {
      s = kiln_make_status(KILN_INVALID_ARGUMENT, "--input '%s': expected NAME=FILE.npy", inputs[i]);
      goto done;
    }
    int32_t found = -1;
    for (int32_t k = 0; k < g->n_inputs; ++k) {
      const char* nm = g->tensors[g->inputs[k]].name;
      if (strlen(nm) == (size_t)(eq - inputs[i]) && !strncmp(nm, inputs[i], (size_t)(eq - inputs[i])))
        found = k;
    }
    if (found < 0) {
      s = kiln_make_status(KILN_NOT_FOUND, "--input '%s': the model has no input named '%.*s'",
                           inputs[i], (int)(eq - inputs[i]), inputs[i]);
      goto done;
    }
    kiln_array_free(al, &in[found]);
    if ((s = kiln_npy_read(eq + 1, al, &in[found]))) goto done;
  }
  /* Check the given inputs against the declarations (binding symbols from
   * them); the other symbols (for random inputs) are 1 unless --dim set
   * them. Then shapes are static and the graph is prepared. */
  for (int32_t k = 0; k < g->n_inputs; ++k)
    if (in[k].data && (s = kiln_check_input(g, k, &in[k], sym_val))) goto done;
  for (int32_t k = 0; k < g->n_inputs; ++k)
    if (!in[k].data && (s = random_input(g, &g->tensors[g->inputs[k]], seed, sym_val, &in[k]))) goto done;
  for (int32_t k = 0; k < g->n_inputs; ++k) {
    kiln_tensor_t* t = &g->tensors[g->inputs[k]];
    if (t->shape.rank < 0 && in[k].data) t->shape = in[k].shape;
    for (int32_t d = 0; d < t->shape.rank && d < in[k].shape.rank; ++d)
      if (t->shape.dims[d] < 0) t->shape.dims[d] = in[k].shape.dims[d];
  }
  if ((s = kiln_graph_prepare(g))) goto done;
  if ((s = kiln_graph_optimize(g, opt, NULL))) goto done;

  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  prof_t prof = {ptimes, g->n_nodes};
  if (profile) {
    ro.on_node = on_node;
    ro.user = &prof;
  }
  R.g = g;
  R.cpu = use_cpu;
  R.ro = &ro;
  R.threads = threads;
  R.dump_dir = dump_dir;
  R.opt = opt;
  R.kernel_times = NULL;
  if (use_cpu && (s = runner_compile(&R))) goto done;
  double t0 = now_s();
  if ((s = runner_run(&R, in, out))) goto done;
  double first = now_s() - t0;
  printf("ran %s on target %s in %.2f ms\n", lo.model, target, first * 1e3);
  if (repeat > 0) {
    double* ts = calloc((size_t)repeat, sizeof(double));
    if (!ts) {
      s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
      goto done;
    }
    for (int r = 0; r < repeat && !s; ++r) {
      kiln_array_t* tmp = calloc((size_t)g->n_outputs + 1, sizeof(kiln_array_t));
      double a0 = now_s();
      s = tmp ? runner_run(&R, in, tmp) : kiln_make_status(KILN_OUT_OF_MEMORY, "oom");
      ts[r] = now_s() - a0;
      for (int32_t k = 0; tmp && !s && k < g->n_outputs; ++k) kiln_array_free(al, &tmp[k]);
      free(tmp);
    }
    if (!s) {
      qsort(ts, (size_t)repeat, sizeof(double), cmp_double_asc);
      printf("latency: median %.3f ms, min %.3f ms over %d runs\n", ts[repeat / 2] * 1e3, ts[0] * 1e3,
             repeat);
    }
    free(ts);
    if (s) goto done;
  }
  if (profile && R.cpu) print_cpu_profile(&R, 1 + repeat);
  if (profile && !R.cpu) {
    int32_t* order = malloc(sizeof(int32_t) * (size_t)(g->n_nodes + 1));
    double total = 0;
    for (int32_t k = 0; k < g->n_nodes; ++k) total += ptimes[k];
    if (order) {
      for (int32_t k = 0; k < g->n_nodes; ++k) order[k] = k;
      for (int32_t a = 1; a < g->n_nodes; ++a) /* insertion sort, slowest first */
        for (int32_t b = a; b > 0 && ptimes[order[b]] > ptimes[order[b - 1]]; --b) {
          int32_t tmp = order[b];
          order[b] = order[b - 1];
          order[b - 1] = tmp;
        }
      printf("profile (reference kernels, %d runs):\n  %-32s %-18s %10s %7s\n", 1 + repeat, "node", "op",
             "ms/run", "share");
      for (int32_t k = 0; k < g->n_nodes && k < 40; ++k) {
        const kiln_node_t* n = &g->nodes[order[k]];
        printf("  %-32.32s %-18.18s %10.3f %6.1f%%\n", n->name, n->op_type,
               ptimes[order[k]] * 1e3 / (1 + repeat), total > 0 ? 100 * ptimes[order[k]] / total : 0);
      }
      free(order);
    }
  }
  for (int32_t k = 0; k < g->n_outputs; ++k) summarize(g->tensors[g->outputs[k]].name, &out[k]);
  if (outdir) {
    mkdir(outdir, 0777);
    for (int32_t k = 0; k < g->n_outputs; ++k) {
      char path[4096], safe[256];
      const char* nm = g->tensors[g->outputs[k]].name;
      size_t j = 0;
      for (; nm[j] && j < sizeof safe - 1; ++j)
        safe[j] = (nm[j] == '/' || nm[j] == '\\' || (nm[j] == '.' && j == 0)) ? '_' : nm[j];
      safe[j] = 0;
      snprintf(path, sizeof path, "%s/%s.npy", outdir, safe);
      if ((s = kiln_npy_write(path, &out[k]))) goto done;
      printf("wrote %s\n", path);
    }
  }
  if (check_ref && R.cpu) {
    kiln_array_t* ref = calloc((size_t)g->n_outputs + 1, sizeof(kiln_array_t));
    if (!ref) {
      s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
      goto done;
    }
    if ((s = kiln_ref_run(g, in, NULL, ref))) {
      free(ref);
      goto done;
    }
    for (int32_t k = 0; k < g->n_outputs; ++k) {
      kiln_compare_result_t cr;
      kiln_compare(&out[k], &ref[k], rtol, atol, &cr);
      printf("check %s vs reference interpreter: %s\n", g->tensors[g->outputs[k]].name, cr.message);
      if (!cr.ok) rc = 3;
      kiln_array_free(al, &ref[k]);
    }
    free(ref);
  }
  for (int i = 0; i < n_compares; ++i) {
    const char* spec = compares[i];
    const char* eq = strchr(spec, '=');
    int32_t k = i;
    const char* file = spec;
    if (eq) {
      k = -1;
      for (int32_t j = 0; j < g->n_outputs; ++j) {
        const char* nm = g->tensors[g->outputs[j]].name;
        if (strlen(nm) == (size_t)(eq - spec) && !strncmp(nm, spec, (size_t)(eq - spec))) k = j;
      }
      file = eq + 1;
      if (k < 0) {
        s = kiln_make_status(KILN_NOT_FOUND, "--compare '%s': the model has no output named '%.*s'",
                             spec, (int)(eq - spec), spec);
        goto done;
      }
    } else if (k >= g->n_outputs) {
      s = kiln_make_status(KILN_INVALID_ARGUMENT, "--compare '%s': the model has only %d outputs",
                           spec, g->n_outputs);
      goto done;
    }
    kiln_array_t want;
    if ((s = kiln_npy_read(file, al, &want))) goto done;
    kiln_compare_result_t cr;
    kiln_compare(&out[k], &want, rtol, atol, &cr);
    printf("compare %s vs %s: %s\n", g->tensors[g->outputs[k]].name, file, cr.message);
    if (!cr.ok) rc = 3;
    kiln_array_free(al, &want);
  }
done:
  if (s) rc = fail(s);
  for (int32_t k = 0; in && k < g->n_inputs; ++k) kiln_array_free(al, &in[k]);
  for (int32_t k = 0; out && k < g->n_outputs; ++k) kiln_array_free(al, &out[k]);
  free(in);
  free(out);
  free(sym_val);
  free(ptimes);
  runner_destroy(&R);
  kiln_graph_destroy(g);
  return rc;
}

/* ---- kiln compile ---------------------------------------------------- */

static const char* compile_help =
    "usage: kiln compile MODEL.onnx [-O0|-O1] [--dim SYMBOL=SIZE ...] [--threads N]\n"
    "                    [--dump-graph DIR] [--dump DIR]\n"
    "\n"
    "Runs the graph passes, lowers every node to the tensor IR, fuses kernels and\n"
    "compiles them for the CPU (filling the compile cache), printing what each step\n"
    "did. Symbolic dims are bound to 1 unless set with --dim.\n"
    "  --dump-graph DIR   write the graph before and after the passes:\n"
    "                     DIR/graph.before.{txt,dot}, DIR/graph.after.{txt,dot}\n"
    "  --dump DIR         write the plan (kernels, schedules, tensor IR) and the C source\n";

static kiln_status_t write_graph_files(const kiln_graph_t* g, const char* dir, const char* tag) {
  char path[4096];
  mkdir(dir, 0777);
  for (int k = 0; k < 2; ++k) {
    snprintf(path, sizeof path, "%s/graph.%s.%s", dir, tag, k ? "dot" : "txt");
    FILE* f = fopen(path, "w");
    if (!f) return kiln_make_status(KILN_IO_ERROR, "%s: cannot create: %s", path, strerror(errno));
    if (k) kiln_graph_write_dot(g, f);
    else kiln_graph_dump(g, f);
    if (fclose(f) != 0) return kiln_make_status(KILN_IO_ERROR, "%s: write failed", path);
    printf("wrote %s\n", path);
  }
  return NULL;
}

static int cmd_compile(int argc, char** argv) {
  load_opts_t lo = {0};
  lo.bind_rest_to_one = true;
  lo.no_prepare = true;
  const char* graph_dir = NULL;
  const char* dump_dir = NULL;
  int opt = 1, threads = 0;
  for (int i = 0; i < argc; ++i) {
    const char* a = argv[i];
    bool has = i + 1 < argc;
    if (is_help(a)) {
      fputs(compile_help, stdout);
      return 0;
    } else if (!strcmp(a, "-O0") || !strcmp(a, "-O1")) {
      opt = a[2] - '0';
    } else if (!strcmp(a, "--dim") && has) {
      if (lo.n_dims < MAX_ARGS) lo.dims[lo.n_dims++] = argv[++i];
    } else if (!strcmp(a, "--dump-graph") && has) {
      graph_dir = argv[++i];
    } else if (!strcmp(a, "--dump") && has) {
      dump_dir = argv[++i];
    } else if (!strcmp(a, "--threads") && has) {
      long long v;
      if (!parse_int(argv[++i], 0, 1024, &v))
        return usage_error("compile", "--threads '%s': expected an integer in 0..1024", argv[i]);
      threads = (int)v;
    } else if (a[0] == '-') {
      return usage_error("compile", "unknown option or missing value: '%s'", a);
    } else if (!lo.model) {
      lo.model = a;
    } else {
      return usage_error("compile", "unexpected argument '%s'", a);
    }
  }
  if (!lo.model) return usage_error("compile", "%sno model given", "");
  kiln_graph_t* g = NULL;
  kiln_status_t s = load(&lo, &g);
  if (s) return fail(s);
  runner_t R;
  memset(&R, 0, sizeof R);
  if ((s = kiln_graph_prepare(g))) goto done;
  if (graph_dir && (s = write_graph_files(g, graph_dir, "before"))) goto done;
  {
    int32_t before = g->n_nodes;
    double t0 = now_s();
    if ((s = kiln_graph_optimize(g, opt, stdout))) goto done;
    printf("graph passes (-O%d): %d -> %d nodes in %.1f ms\n", opt, before, g->n_nodes,
           (now_s() - t0) * 1e3);
  }
  if (graph_dir && (s = write_graph_files(g, graph_dir, "after"))) goto done;
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  R.g = g;
  R.cpu = true;
  R.ro = &ro;
  R.threads = threads;
  R.dump_dir = dump_dir;
  R.opt = opt;
  s = runner_compile(&R);
done:
  runner_destroy(&R);
  kiln_graph_destroy(g);
  return s ? fail(s) : 0;
}

/* ---- kiln dot / dump / ops ------------------------------------------- */

static int cmd_graph_print(const char* cmd, int argc, char** argv) {
  load_opts_t lo = {0};
  const char* outpath = NULL;
  for (int i = 0; i < argc; ++i) {
    if (is_help(argv[i])) {
      if (!strcmp(cmd, "dot"))
        printf("usage: kiln dot MODEL.onnx [-o FILE.dot] [--dim SYMBOL=SIZE ...]\n\n"
               "Writes the graph as Graphviz dot (stdout by default); render with\n"
               "  dot -Tsvg FILE.dot -o graph.svg\n");
      else
        printf("usage: kiln dump MODEL.onnx [-o FILE] [--dim SYMBOL=SIZE ...]\n\n"
               "Writes the graph IR as text after shape inference: inputs, weights,\n"
               "one line per node with attributes and inferred output types.\n");
      return 0;
    } else if (!strcmp(argv[i], "-o") && i + 1 < argc) {
      outpath = argv[++i];
    } else if (!strcmp(argv[i], "--dim") && i + 1 < argc) {
      if (lo.n_dims < MAX_ARGS) lo.dims[lo.n_dims++] = argv[++i];
    } else if (argv[i][0] == '-') {
      return usage_error(cmd, "unknown option '%s'", argv[i]);
    } else if (!lo.model) {
      lo.model = argv[i];
    } else {
      return usage_error(cmd, "unexpected argument '%s'", argv[i]);
    }
  }
  if (!lo.model) return usage_error(cmd, "%sno model given", "");
  kiln_graph_t* g = NULL;
  kiln_status_t s = load(&lo, &g);
  if (s) return fail(s);
  FILE* f = outpath ? fopen(outpath, "w") : stdout;
  if (!f) {
    kiln_graph_destroy(g);
    return fail(kiln_make_status(KILN_IO_ERROR, "%s: cannot create: %s", outpath, strerror(errno)));
  }
  if (!strcmp(cmd, "dot")) kiln_graph_write_dot(g, f);
  else kiln_graph_dump(g, f);
  int rc = 0;
  if (outpath && fclose(f) != 0)
    rc = fail(kiln_make_status(KILN_IO_ERROR, "%s: write failed", outpath));
  kiln_graph_destroy(g);
  return rc;
}

static int cmd_ops(int argc, char** argv) {
  if (argc && is_help(argv[0])) {
    printf("usage: kiln ops\n\nLists the ONNX ops (domain ai.onnx) kiln supports.\n");
    return 0;
  }
  if (argc) return usage_error("ops", "unexpected argument '%s'", argv[0]);
  for (size_t i = 0; i < kiln_op_count(); ++i) printf("%s\n", kiln_op_at(i)->op_type);
  return 0;
}

static const char* main_help =
    "usage: kiln COMMAND [args]\n"
    "\n"
    "kiln compiles and runs ONNX models.\n"
    "\n"
    "commands:\n"
    "  info MODEL.onnx   inputs/outputs, op histogram, per-layer shapes, params, FLOPs, bytes\n"
    "  run MODEL.onnx    compile and run the model (random or .npy inputs), compare\n"
    "  compile MODEL.onnx  graph passes, lowering, fusion and CPU compile, with dumps\n"
    "  bench             kernel microbenchmarks (GFLOP/s, GB/s, % of measured peak)\n"
    "  dot MODEL.onnx    Graphviz dot of the graph\n"
    "  dump MODEL.onnx   text dump of the graph IR after shape inference\n"
    "  ops               list supported ONNX ops\n"
    "\n"
    "'kiln COMMAND --help' describes each command.\n";

int main(int argc, char** argv) {
  if (argc < 2 || is_help(argv[1])) {
    fputs(main_help, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const char* cmd = argv[1];
  if (!strcmp(cmd, "info")) return cmd_info(argc - 2, argv + 2);
  if (!strcmp(cmd, "run")) return cmd_run(argc - 2, argv + 2);
  if (!strcmp(cmd, "dot") || !strcmp(cmd, "dump")) return cmd_graph_print(cmd, argc - 2, argv + 2);
  if (!strcmp(cmd, "ops")) return cmd_ops(argc - 2, argv + 2);
  if (!strcmp(cmd, "compile")) return cmd_compile(argc - 2, argv + 2);
  if (!strcmp(cmd, "bench")) return kiln_cmd_bench(argc - 1, argv + 1);
  fprintf(stderr, "kiln: unknown command '%s'\n\n%s", cmd, main_help);
  return 2;
}
