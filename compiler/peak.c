/* Peak FLOP/s and bandwidth probes (see peak.h).
 *
 * The probes are not graphs: no ONNX op expresses "spin on FMAs", so the
 * kernels are written directly in tensor IR and wrapped in a hand-made plan
 * (graph NULL, no graph inputs/outputs; every buffer is backend-allocated
 * and zeroed, which also faults the bandwidth probe's pages in before the
 * first timed run). kiln_cpu_compile/kiln_cpu_run then treat them like any
 * other plan, so the compiler, flags, cache and OpenMP runtime are the ones
 * the real kernels use. */
#include "compiler/peak.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Independent accumulators per thread: FMA latency (4) x ports (2) needs
 * >= 8 vectors in flight; 16 fits in 32 zmm registers with room to spare. */
#define PEAK_ACC 16
#define PEAK_LANES 16
/* Iterations per thread: 2^21 x 16 x 16 x 2 = 1.07 GFLOP per thread, ~5-10
 * ms on a modern core: long enough to swamp the OpenMP fork/join. */
#define PEAK_ITERS (1 << 21)
/* Elements per parallel row block of the bandwidth kernels. */
#define BW_BLOCK 4096

void kiln_peak_options_default(kiln_peak_options_t* o) {
  memset(o, 0, sizeof(*o));
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void kiln_peak_cpu_model(char* buf, size_t n) {
  if (!n) return;
  snprintf(buf, n, "unknown");
  FILE* f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) != 0) continue;
    const char* c = strchr(line, ':');
    if (!c) continue;
    ++c;
    while (*c && isspace((unsigned char)*c)) ++c;
    size_t len = strlen(c);
    while (len && isspace((unsigned char)c[len - 1])) --len;
    snprintf(buf, n, "%.*s", (int)len, c);
    break;
  }
  fclose(f);
}

/* ---- hand-made plans ---------------------------------------------------- */

static kiln_status_t plan_new(kiln_plan_t** out) {
  kiln_allocator_t a = kiln_allocator_system();
  kiln_plan_t* p = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(a, sizeof(*p), "peak plan", (void**)&p));
  p->allocator = a;
  p->target = KILN_TARGET_CLASS_CPU;
  tir_ctx_init(&p->tir, a);
  kiln_status_t s = kiln_allocator_malloc(a, 8 * sizeof(kiln_plan_buffer_t), "peak plan",
                                          (void**)&p->buffers);
  if (!s) s = kiln_allocator_malloc(a, 4 * sizeof(kiln_plan_kernel_t), "peak plan",
                                    (void**)&p->kernels);
  if (s) {
    kiln_plan_destroy(p);
    return s;
  }
  p->cap_buffers = 8;
  p->cap_kernels = 4;
  *out = p;
  return NULL;
}

/* Adds a GLOBAL buffer; kind INPUT so the backend allocates (and zeroes) it
 * although no graph names it. */
static int32_t add_buf(kiln_plan_t* p, const tir_buffer_t* b) {
  KILN_ASSERT(p->n_buffers < p->cap_buffers);
  kiln_plan_buffer_t* pb = &p->buffers[p->n_buffers];
  memset(pb, 0, sizeof(*pb));
  pb->buf = b;
  pb->kind = KILN_PLAN_INPUT;
  pb->tensor = -1;
  pb->alias_of = -1;
  pb->first_use = 0;
  pb->last_use = 0;
  return p->n_buffers++;
}

static kiln_status_t add_kernel(kiln_plan_t* p, tir_func_t* f, const int32_t* args,
                                int64_t flops) {
  KILN_ASSERT(p->n_kernels < p->cap_kernels);
  KILN_RETURN_IF_ERROR(tir_ctx_status(&p->tir), "peak probe");
  KILN_RETURN_IF_ERROR(tir_verify(f), "peak probe");
  int32_t* a = NULL;
  KILN_RETURN_IF_ERROR(kiln_arena_calloc(&p->tir.arena, (size_t)(f->n_params ? f->n_params : 1),
                                         sizeof(int32_t), "peak args", (void**)&a));
  memcpy(a, args, sizeof(int32_t) * (size_t)f->n_params);
  kiln_plan_kernel_t* k = &p->kernels[p->n_kernels++];
  memset(k, 0, sizeof(*k));
  k->func = f;
  k->naive = f;
  k->node = -1;
  k->args = a;
  k->flops = flops;
  return NULL;
}

/* for v in [0, n) of |kind| */
static const tir_stmt_t* loop(tir_ctx_t* c, const tir_var_t* v, int64_t n, tir_loop_kind_t kind,
                              const tir_stmt_t* body) {
  return tir_for(c, v, n, kind, body);
}

/* acc[k][j] <- value for k UNROLLED, j VECTORIZED (16 lanes): the shape the
 * printer keeps in vector registers. |make| builds the value from k, j. */
typedef const tir_expr_t* (*val_fn)(tir_ctx_t* c, const tir_expr_t* k, const tir_expr_t* j,
                                    const void* user);

static const tir_stmt_t* tile_store(tir_ctx_t* c, const tir_buffer_t* dst, const tir_expr_t* lead,
                                    val_fn make, const void* user, const char* tag) {
  char kn[16], jn[16];
  snprintf(kn, sizeof kn, "k%s", tag);
  snprintf(jn, sizeof jn, "j%s", tag);
  tir_var_t* k = tir_var(c, kn);
  tir_var_t* j = tir_var(c, jn);
  const tir_expr_t* ke = tir_ref(c, k);
  const tir_expr_t* je = tir_ref(c, j);
  const tir_expr_t* idx[3];
  int32_t r = 0;
  if (lead) idx[r++] = lead;
  idx[r++] = ke;
  idx[r++] = je;
  const tir_stmt_t* st = tir_store(c, dst, idx, make(c, ke, je, user));
  return loop(c, k, PEAK_ACC, TIR_LOOP_UNROLLED, loop(c, j, PEAK_LANES, TIR_LOOP_VECTORIZED, st));
}

typedef struct {
  const tir_buffer_t* src;
  const tir_expr_t* lead; /* extra leading index or NULL */
} ld_t;

static const tir_expr_t* v_load(tir_ctx_t* c, const tir_expr_t* k, const tir_expr_t* j,
                                const void* user) {
  const ld_t* l = user;
  const tir_expr_t* idx[3];
  int32_t r = 0;
  if (l->lead) idx[r++] = l->lead;
  idx[r++] = k;
  idx[r++] = j;
  return tir_load(c, l->src, idx);
}

static const tir_expr_t* v_fma(tir_ctx_t* c, const tir_expr_t* k, const tir_expr_t* j,
                               const void* user) {
  const tir_buffer_t* acc = user;
  const tir_expr_t* idx[2] = {k, j};
  /* acc * m + c converges to 1 (no overflow, no denormals) and cannot be
   * folded: acc starts from a runtime buffer. */
  return tir_call(c, TIR_FMA, 3, tir_load(c, acc, idx), tir_const(c, KILN_DTYPE_F32, 0.9999),
                  tir_const(c, KILN_DTYPE_F32, 1e-4));
}

/* out[t][k][j] after PEAK_ITERS FMAs per lane on thread t. */
static kiln_status_t flops_kernel(kiln_plan_t* p, int32_t threads) {
  tir_ctx_t* c = &p->tir;
  int64_t so[3] = {threads, PEAK_ACC, PEAK_LANES};
  int64_t ss[2] = {PEAK_ACC, PEAK_LANES};
  tir_buffer_t* out = tir_buffer(c, "out", KILN_DTYPE_F32, 3, so, TIR_SCOPE_GLOBAL);
  tir_buffer_t* seed = tir_buffer(c, "seed", KILN_DTYPE_F32, 2, ss, TIR_SCOPE_GLOBAL);
  tir_buffer_t* acc = tir_buffer(c, "acc", KILN_DTYPE_F32, 2, ss, TIR_SCOPE_PRIVATE);
  KILN_RETURN_IF_ERROR(tir_ctx_status(c), "peak probe");
  tir_var_t* t = tir_var(c, "t");
  tir_var_t* it = tir_var(c, "it");
  ld_t from_seed = {seed, NULL};
  ld_t from_acc = {acc, NULL};
  const tir_stmt_t* body[3] = {
      tile_store(c, acc, NULL, v_load, &from_seed, "0"),
      loop(c, it, PEAK_ITERS, TIR_LOOP_SERIAL, tile_store(c, acc, NULL, v_fma, acc, "1")),
      tile_store(c, out, tir_ref(c, t), v_load, &from_acc, "2"),
  };
  const tir_stmt_t* s =
      loop(c, t, threads, TIR_LOOP_PARALLEL, tir_alloc(c, acc, tir_seq(c, 3, body)));
  const tir_buffer_t* params[2] = {seed, out};
  tir_func_t* f = tir_func(c, "peak_fma", 2, params, s);
  int32_t args[2] = {add_buf(p, seed), add_buf(p, out)};
  int64_t flops = (int64_t)threads * PEAK_ITERS * PEAK_ACC * PEAK_LANES * 2;
  return add_kernel(p, f, args, flops);
}

/* dst = src (copy) or a = b + 3*c (triad) over [rows, BW_BLOCK]. */
static kiln_status_t bw_kernel(kiln_plan_t* p, bool triad, int64_t rows) {
  tir_ctx_t* c = &p->tir;
  int64_t sh[2] = {rows, BW_BLOCK};
  int32_t nb = triad ? 3 : 2;
  const tir_buffer_t* b[3];
  for (int32_t i = 0; i < nb; ++i) {
    char name[8];
    snprintf(name, sizeof name, "%c", 'a' + i);
    b[i] = tir_buffer(c, name, KILN_DTYPE_F32, 2, sh, TIR_SCOPE_GLOBAL);
  }
  KILN_RETURN_IF_ERROR(tir_ctx_status(c), "peak probe");
  tir_var_t* r = tir_var(c, "r");
  tir_var_t* e = tir_var(c, "e");
  const tir_expr_t* idx[2] = {tir_ref(c, r), tir_ref(c, e)};
  const tir_expr_t* v = tir_load(c, b[1], idx);
  if (triad)
    v = tir_add(c, v, tir_mul(c, tir_const(c, KILN_DTYPE_F32, 3.0), tir_load(c, b[2], idx)));
  const tir_stmt_t* s =
      loop(c, r, rows, TIR_LOOP_PARALLEL,
           loop(c, e, BW_BLOCK, TIR_LOOP_VECTORIZED, tir_store(c, b[0], idx, v)));
  /* params: sources first, destination last (kernel param convention) */
  const tir_buffer_t* params[3];
  int32_t args[3];
  for (int32_t i = 1; i < nb; ++i) params[i - 1] = b[i];
  params[nb - 1] = b[0];
  for (int32_t i = 0; i < nb; ++i) args[i] = add_buf(p, params[i]);
  tir_func_t* f = tir_func(c, triad ? "peak_triad" : "peak_copy", nb, params, s);
  return add_kernel(p, f, args, triad ? 2 * rows * BW_BLOCK : 0);
}

/* ---- timing ------------------------------------------------------------- */

typedef struct {
  double best[4]; /* per kernel: fastest run */
} times_t;

static void on_kernel(void* user, int32_t k, double seconds) {
  times_t* t = user;
  if (k >= 0 && k < 4 && (t->best[k] <= 0 || seconds < t->best[k])) t->best[k] = seconds;
}

static kiln_status_t time_plan(const kiln_plan_t* p, const kiln_cpu_options_t* co, int32_t repeat,
                               times_t* out) {
  kiln_cpu_exec_t* e = NULL;
  KILN_RETURN_IF_ERROR(kiln_cpu_compile(p, co, &e, NULL), "peak probe");
  kiln_status_t s = kiln_cpu_run(e, NULL, NULL, NULL, NULL); /* warm-up */
  memset(out, 0, sizeof(*out));
  for (int32_t i = 0; i < repeat && !s; ++i) s = kiln_cpu_run(e, NULL, NULL, on_kernel, out);
  kiln_cpu_exec_destroy(e);
  return s ? kiln_status_annotate(s, "peak probe") : NULL;
}

kiln_status_t kiln_peak_measure(const kiln_peak_options_t* options, kiln_peak_t* out) {
  kiln_peak_options_t defaults;
  kiln_peak_options_default(&defaults);
  const kiln_peak_options_t* o = options ? options : &defaults;
  double t0 = now_s();
  int32_t threads = o->threads;
  if (threads <= 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    threads = n > 0 ? (int32_t)n : 1;
  }
  /* Many short runs: on a shared machine some of them get every core. */
  int32_t repeat = o->repeat > 0 ? o->repeat : 15;
  int64_t bytes = o->bandwidth_bytes > 0 ? o->bandwidth_bytes : (int64_t)256 << 20;
  kiln_cpu_options_t co;
  if (o->cpu) co = *o->cpu;
  else kiln_cpu_options_default(&co);
  co.threads = threads;

  kiln_peak_t r;
  memset(&r, 0, sizeof r);
  r.threads = threads;

  /* FLOP/s */
  kiln_plan_t* p = NULL;
  KILN_RETURN_IF_ERROR(plan_new(&p));
  times_t tm;
  kiln_status_t s = flops_kernel(p, threads);
  if (!s) s = time_plan(p, &co, repeat, &tm);
  if (!s) r.gflops = (double)p->kernels[0].flops / tm.best[0] * 1e-9;
  kiln_plan_destroy(p);
  if (s) return s;

  /* Bandwidth: copy over 2 arrays and triad over 3, each |bytes| in all. */
  int64_t elems = bytes / (int64_t)sizeof(float);
  int64_t copy_rows = elems / 2 / BW_BLOCK, triad_rows = elems / 3 / BW_BLOCK;
  if (copy_rows < 1) copy_rows = 1;
  if (triad_rows < 1) triad_rows = 1;
  p = NULL;
  KILN_RETURN_IF_ERROR(plan_new(&p));
  s = bw_kernel(p, false, copy_rows);
  if (!s) s = bw_kernel(p, true, triad_rows);
  if (!s) s = time_plan(p, &co, repeat, &tm);
  if (!s) {
    r.copy_gbs = 2.0 * (double)(copy_rows * BW_BLOCK * 4) / tm.best[0] * 1e-9;
    r.triad_gbs = 3.0 * (double)(triad_rows * BW_BLOCK * 4) / tm.best[1] * 1e-9;
    r.gbs = r.copy_gbs > r.triad_gbs ? r.copy_gbs : r.triad_gbs;
  }
  kiln_plan_destroy(p);
  if (s) return s;
  r.seconds = now_s() - t0;
  *out = r;
  return NULL;
}
