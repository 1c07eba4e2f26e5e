/* Run-time extents against static ones, one kernel through the same C
 * printer: P[h, i, j] = exp(X[h, i, j] - X[h, i, 0]) over [4, n, n] (the
 * shape of attention scores at sequence length n), its j loop split by 8
 * and the tile vectorized. The dynamic kernel reads n when it runs (loops
 * with run-time trip counts, strides n*n and n, the split's remainder
 * peeled: ir/tir_schedule_dyn.c); the static one is compiled for each n.
 *
 *   kiln_bench_dyn_extent [N ...]   (default 64 77 128; at most 256)
 *
 * Prints per n the median kernel time of each (401 rounds of 10 runs, the
 * two interleaved; the kernel alone, as the runner's per-kernel callback
 * times it) and their ratio. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph.h"
#include "ir/tir.h"
#include "ir/tir_schedule.h"
#include "lowering/plan.h"
#include "targets/cpu/cpu_backend.h"

#define H 4
#define TOP 256
#define ROUNDS 401
#define REPS 10

typedef struct kern_s {
  kiln_plan_t p;
  kiln_graph_t* g;
  kiln_plan_buffer_t b[3];
  kiln_plan_kernel_t k;
  int32_t ins[2], outs[1], args[3];
  kiln_cpu_exec_t* e;
} kern_t;

static kiln_allocator_t al(void) { return kiln_allocator_system(); }

static int fail(kiln_status_t s, const char* what) {
  fprintf(stderr, "kiln_bench_dyn_extent: %s: %s\n", what, kiln_status_message(s));
  kiln_status_free(s);
  return 1;
}

/* n > 0: static loops and strides at n; 0: n read at run time. */
static kiln_status_t build(kern_t* k, int64_t n_static) {
  memset(k, 0, sizeof *k);
  k->p.allocator = al();
  tir_ctx_init(&k->p.tir, al());
  KILN_RETURN_IF_ERROR(kiln_graph_create(al(), &k->g));
  k->p.graph = k->g;
  k->p.target = KILN_TARGET_CLASS_CPU;
  tir_ctx_t* c = &k->p.tir;
  const int64_t one = 1, numel = H * TOP * TOP;
  const tir_buffer_t* n = tir_buffer(c, "n", KILN_DTYPE_I64, 1, &one, TIR_SCOPE_GLOBAL);
  const tir_buffer_t* X = tir_buffer(c, "X", KILN_DTYPE_F32, 1, &numel, TIR_SCOPE_GLOBAL);
  const tir_buffer_t* P = tir_buffer(c, "P", KILN_DTYPE_F32, 1, &numel, TIR_SCOPE_GLOBAL);
  kiln_shape_t s1 = kiln_shape_make(1, &one), s2 = kiln_shape_make(1, &numel);
  KILN_RETURN_IF_ERROR(kiln_graph_add_input(k->g, "n", KILN_DTYPE_I64, &s1, NULL));
  KILN_RETURN_IF_ERROR(kiln_graph_add_input(k->g, "X", KILN_DTYPE_F32, &s2, NULL));
  KILN_RETURN_IF_ERROR(kiln_graph_add_output(k->g, "P"));
  const tir_buffer_t* bufs[3] = {n, X, P};
  for (int32_t i = 0; i < 3; ++i) {
    k->b[i] = (kiln_plan_buffer_t){.buf = bufs[i], .kind = i < 2 ? KILN_PLAN_INPUT : KILN_PLAN_OUTPUT,
                                   .tensor = -1, .alias_of = -1};
    k->args[i] = i;
  }
  k->ins[0] = 0, k->ins[1] = 1, k->outs[0] = 2;
  tir_var_t* h = tir_var(c, "h");
  tir_var_t* i = tir_var(c, "i");
  tir_var_t* j = tir_var(c, "j");
  const tir_expr_t* zero = tir_int(c, 0);
  const tir_expr_t* nn = n_static ? tir_int(c, n_static) : tir_load(c, n, &zero);
  const tir_expr_t* row = tir_add(c, tir_mul(c, tir_ref(c, h), tir_mul(c, nn, nn)), tir_mul(c, tir_ref(c, i), nn));
  const tir_expr_t* at = tir_add(c, row, tir_ref(c, j));
  const tir_expr_t* v = tir_call(c, TIR_EXP, 1, tir_sub(c, tir_load(c, X, &at), tir_load(c, X, &row)), NULL, NULL);
  const tir_stmt_t* body = tir_store(c, P, &at, v);
  if (n_static) {
    body = tir_for(c, i, n_static, TIR_LOOP_SERIAL, tir_for(c, j, n_static, TIR_LOOP_SERIAL, body));
  } else {
    body = tir_for_dyn(c, j, TOP, nn, TIR_LOOP_SERIAL, body);
    body = tir_for_dyn(c, i, TOP, nn, TIR_LOOP_SERIAL, body);
  }
  body = tir_for(c, h, H, TIR_LOOP_SERIAL, body);
  tir_func_t* f = tir_func(c, "scores", 3, bufs, body);
  tir_schedule_t* s = tir_schedule_new(c);
  tir_sched_split(c, s, "j", 8);
  tir_sched_vectorize(c, s, "j.i");
  if (!f || !s) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory building the kernel");
  tir_func_t* g = NULL;
  KILN_RETURN_IF_ERROR(tir_schedule_apply(c, f, s, &g));
  k->k = (kiln_plan_kernel_t){.func = g, .naive = f, .node = -1, .args = k->args};
  k->p.buffers = k->b;
  k->p.n_buffers = 3;
  k->p.kernels = &k->k;
  k->p.n_kernels = 1;
  k->p.inputs = k->ins;
  k->p.outputs = k->outs;
  kiln_cpu_options_t o;
  kiln_cpu_options_default(&o);
  o.cache_dir = ""; /* compiled fresh, nothing left behind */
  return kiln_cpu_compile(&k->p, &o, &k->e, NULL);
}

static void destroy(kern_t* k) {
  kiln_cpu_exec_destroy(k->e);
  kiln_graph_destroy(k->g);
  tir_ctx_deinit(&k->p.tir);
}

static int cmp(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static void on_kernel(void* user, int32_t kernel, double seconds) {
  (void)kernel;
  *(double*)user += seconds;
}

/* REPS runs of |k| on |in|: the kernel's seconds (the runner times it
 * alone, without the output allocation around it). */
static kiln_status_t time_runs(kern_t* k, const kiln_array_t* in, double* out) {
  *out = 0;
  for (int q = 0; q < REPS; ++q) {
    kiln_array_t y[1];
    KILN_RETURN_IF_ERROR(kiln_cpu_run(k->e, in, y, on_kernel, out));
    kiln_array_free(al(), &y[0]);
  }
  return NULL;
}

int main(int argc, char** argv) {
  int64_t ns[16] = {64, 77, 128};
  int nn = argc > 1 ? 0 : 3;
  for (int a = 1; a < argc && nn < 16; ++a) {
    ns[nn] = strtoll(argv[a], NULL, 10);
    if (ns[nn] < 1 || ns[nn] > TOP) {
      fprintf(stderr, "kiln_bench_dyn_extent: n '%s' is not within 1..%d\n", argv[a], TOP);
      return 2;
    }
    nn++;
  }
  kern_t dyn, st;
  kiln_status_t s = build(&dyn, 0);
  if (s) return fail(s, "the run-time kernel");
  const int64_t one = 1, numel = H * TOP * TOP;
  kiln_shape_t s1 = kiln_shape_make(1, &one), s2 = kiln_shape_make(1, &numel);
  kiln_array_t in[2];
  memset(in, 0, sizeof in);
  s = kiln_array_alloc(al(), KILN_DTYPE_I64, &s1, &in[0]);
  if (!s) s = kiln_array_alloc(al(), KILN_DTYPE_F32, &s2, &in[1]);
  if (s) return fail(s, "inputs");
  for (int64_t q = 0; q < numel; ++q) ((float*)in[1].data)[q] = (float)(q % 17) * 0.01f;
  int rc = 0;
  for (int t = 0; t < nn && !rc; ++t) {
    s = build(&st, ns[t]);
    *(int64_t*)in[0].data = ns[t];
    double td[ROUNDS], ts[ROUNDS];
    for (int r = 0; r < ROUNDS && !s; ++r) {
      s = time_runs(&dyn, in, &td[r]);
      if (!s) s = time_runs(&st, in, &ts[r]);
    }
    if (s) {
      rc = fail(s, "a run");
    } else {
      qsort(td, ROUNDS, sizeof(double), cmp);
      qsort(ts, ROUNDS, sizeof(double), cmp);
      printf("n=%lld: run-time n %.1f us, static n %.1f us, ratio %.3f\n", (long long)ns[t],
             td[ROUNDS / 2] / REPS * 1e6, ts[ROUNDS / 2] / REPS * 1e6, td[ROUNDS / 2] / ts[ROUNDS / 2]);
    }
    destroy(&st);
  }
  destroy(&dyn);
  kiln_array_free(al(), &in[0]);
  kiln_array_free(al(), &in[1]);
  return rc;
}
