/* Schedule primitives on loops with a run-time trip count (tir_for_dyn,
 * ir/tir_schedule_dyn.c): split into full tiles plus a remainder, kinds,
 * fuse and reorder keep the count; what cannot keep it is refused by name.
 *
 * Each scheduled kernel runs on the tensor-IR interpreter at every count
 * 0..max against the unscheduled kernel, with the output prefilled, so an
 * iteration past the count (a write to a row it must not touch) or one
 * missing shows up. Then one kernel goes through the CPU target's C printer
 * and compiler: the full tiles print as vectors, the remainder as a scalar
 * loop, at counts around the tile size. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph.h"
#include "ir/tir.h"
#include "ir/tir_interp.h"
#include "ir/tir_schedule.h"
#include "lowering/plan.h"
#include "targets/cpu/cpu_backend.h"
#include "testing.h"

static kiln_allocator_t al(void) { return kiln_allocator_system(); }

#define ROWS 37
#define COLS 8

/* C[i, j] = A[i, j] * 2 + 1 for i < n[0] (at most ROWS), j < COLS; params
 * (n, A, C). */
static tir_func_t* rows_kernel(tir_ctx_t* c) {
  const int64_t one = 1, sh[2] = {ROWS, COLS};
  const tir_buffer_t* n = tir_buffer(c, "n", KILN_DTYPE_I64, 1, &one, TIR_SCOPE_GLOBAL);
  const tir_buffer_t* A = tir_buffer(c, "A", KILN_DTYPE_F32, 2, sh, TIR_SCOPE_GLOBAL);
  const tir_buffer_t* C = tir_buffer(c, "C", KILN_DTYPE_F32, 2, sh, TIR_SCOPE_GLOBAL);
  tir_var_t* i = tir_var(c, "i");
  tir_var_t* j = tir_var(c, "j");
  const tir_expr_t* idx[2] = {tir_ref(c, i), tir_ref(c, j)};
  const tir_expr_t* zero = tir_int(c, 0);
  const tir_expr_t* v =
      tir_add(c, tir_mul(c, tir_load(c, A, idx), tir_const(c, KILN_DTYPE_F32, 2.0)), tir_const(c, KILN_DTYPE_F32, 1.0));
  const tir_stmt_t* body = tir_for(c, j, COLS, TIR_LOOP_SERIAL, tir_store(c, C, idx, v));
  body = tir_for_dyn(c, i, ROWS, tir_load(c, n, &zero), TIR_LOOP_SERIAL, body);
  const tir_buffer_t* params[3] = {n, A, C};
  return tir_func(c, "rows", 3, params, body);
}

/* S[r] += A[r, j] for j < n[0] + r (a trip count that its outer loop
 * sets, as a block-sparse tile's count of blocks does); params (n, A, S). */
static tir_func_t* tri_kernel(tir_ctx_t* c) {
  const int64_t one = 1, four = 4, sh[2] = {4, ROWS + 3};
  const tir_buffer_t* n = tir_buffer(c, "n", KILN_DTYPE_I64, 1, &one, TIR_SCOPE_GLOBAL);
  const tir_buffer_t* A = tir_buffer(c, "A", KILN_DTYPE_F32, 2, sh, TIR_SCOPE_GLOBAL);
  const tir_buffer_t* S = tir_buffer(c, "S", KILN_DTYPE_F32, 1, &four, TIR_SCOPE_GLOBAL);
  tir_var_t* r = tir_var(c, "r");
  tir_var_t* j = tir_var(c, "j");
  const tir_expr_t* rr = tir_ref(c, r);
  const tir_expr_t* idx[2] = {rr, tir_ref(c, j)};
  const tir_expr_t* zero = tir_int(c, 0);
  const tir_stmt_t* acc = tir_store(c, S, &rr, tir_add(c, tir_load(c, S, &rr), tir_load(c, A, idx)));
  const tir_stmt_t* loop =
      tir_for_dyn(c, j, ROWS + 3, tir_add(c, tir_load(c, n, &zero), rr), TIR_LOOP_SERIAL, acc);
  const tir_stmt_t* body = tir_for(c, r, 4, TIR_LOOP_SERIAL, loop);
  const tir_buffer_t* params[3] = {n, A, S};
  return tir_func(c, "tri", 3, params, body);
}

static bool run(const tir_func_t* f, void** data) {
  tir_interp_options_t o = {.eval_both_select_arms = true};
  kiln_status_t st = tir_interp_run(f, data, &o, al());
  if (!st) return true;
  fprintf(stderr, "  interpreter: %s\n", kiln_status_message(st));
  kiln_status_free(st);
  return false;
}

/* f and g (params n, in, out) at every count 0..hi: the outputs, prefilled
 * with the same values, must come out bit-identical. */
static void check_counts_(const tir_func_t* f, const tir_func_t* g, int64_t hi, const char* file, int line) {
  ++kiln_test_checks;
  if (!f || !g) {
    kiln_test_fail(file, line, "missing kernel");
    return;
  }
  const size_t nin = (size_t)tir_buffer_numel(f->params[1]), nout = (size_t)tir_buffer_numel(f->params[2]);
  float* in = malloc(nin * sizeof(float));
  float* o1 = malloc(nout * sizeof(float));
  float* o2 = malloc(nout * sizeof(float));
  for (size_t k = 0; k < nin; ++k) in[k] = (float)((k * 37 + 11) % 101) / 8.0f - 6.0f;
  for (int64_t n = 0; n <= hi && in && o1 && o2; ++n) {
    for (size_t k = 0; k < nout; ++k) o1[k] = o2[k] = -1000.0f - (float)k;
    int64_t count = n;
    void* a[3] = {&count, in, o1};
    void* b[3] = {&count, in, o2};
    if (!run(f, a) || !run(g, b)) {
      kiln_test_fail(file, line, "kernel failed to run at count %lld", (long long)n);
      break;
    }
    if (memcmp(o1, o2, nout * sizeof(float))) {
      size_t k = 0;
      while (o1[k] == o2[k]) ++k;
      kiln_test_fail(file, line, "count %lld: element %zu is %g scheduled, %g expected", (long long)n, k, o2[k], o1[k]);
      break;
    }
  }
  free(in);
  free(o1);
  free(o2);
}
#define CHECK_COUNTS(f, g, hi) check_counts_((f), (g), (hi), __FILE__, __LINE__)

/* The loop nest as a string: "name[max]kind(...)", '~' marking a run-time
 * count, ';' between the items of a sequence. */
static void sig_(const tir_stmt_t* s, char* out, size_t cap, size_t* p) {
  static const char* kinds[] = {"", "p", "v", "u", "b"};
  int k = 0;
  switch (s->kind) {
    case TIR_FOR:
      k = snprintf(out + *p, cap - *p, "%s[%s%lld]%s(", s->u.loop.var->name, s->u.loop.dyn_extent ? "~" : "",
                   (long long)s->u.loop.extent, kinds[s->u.loop.kind]);
      *p += k > 0 && (size_t)k < cap - *p ? (size_t)k : 0;
      sig_(s->u.loop.body, out, cap, p);
      if (*p + 1 < cap) out[(*p)++] = ')';
      break;
    case TIR_SEQ:
      for (int32_t i = 0; i < s->u.seq.n; ++i) {
        if (i && *p + 1 < cap) out[(*p)++] = ';';
        sig_(s->u.seq.items[i], out, cap, p);
      }
      break;
    case TIR_IF:
      if (*p + 2 < cap) out[(*p)++] = '?', out[(*p)++] = '(';
      sig_(s->u.cond.then_s, out, cap, p);
      if (*p + 1 < cap) out[(*p)++] = ')';
      break;
    default:
      if (*p + 1 < cap) out[(*p)++] = '.';
      break;
  }
  out[*p] = '\0';
}

static const char* sig(const tir_func_t* f) {
  static char buf[1024];
  size_t p = 0;
  buf[0] = '\0';
  if (f) sig_(f->body, buf, sizeof buf, &p);
  return buf;
}

#define STR_EQ(got, want)                                                           \
  do {                                                                              \
    const char* got_ = (got);                                                       \
    CHECK_MSG(strcmp(got_, (want)) == 0, "loops %s, expected %s", got_, (want)); \
  } while (0)

static tir_func_t* apply(tir_ctx_t* c, const tir_func_t* f, const tir_schedule_t* s) {
  tir_func_t* out = NULL;
  if (!CHECK_OK(tir_schedule_apply(c, f, s, &out))) return NULL;
  if (out) CHECK_OK(tir_verify(out));
  return out;
}

static void test_split(void) {
  tir_ctx_t c;
  tir_ctx_init(&c, al());
  tir_func_t* f = rows_kernel(&c);
  const int64_t factors[] = {1, 4, 6, 8, ROWS, 64};
  for (size_t t = 0; t < sizeof factors / sizeof *factors; ++t) {
    tir_schedule_t* s = tir_schedule_new(&c);
    tir_sched_split(&c, s, "i", factors[t]);
    tir_sched_parallel(&c, s, "i.o");
    tir_sched_vectorize(&c, s, "j");
    tir_func_t* g = apply(&c, f, s);
    CHECK_COUNTS(f, g, ROWS);
    if (factors[t] == 4) /* full tiles, then the remainder with its loops renamed */
      STR_EQ(sig(g), "i.o[~9]p(i.i[4](j[8]v(.)));i.r[~3](?(j.i.r[8](.)))");
    if (factors[t] == 1) STR_EQ(sig(g), "i.o[~37]p(j[8]v(.))"); /* no remainder */
  }
  /* a remainder split again: its loops took other names */
  tir_schedule_t* s = tir_schedule_new(&c);
  tir_sched_split(&c, s, "i", 8);
  tir_sched_split(&c, s, "i.r", 3);
  tir_sched_unroll(&c, s, "i.r.i");
  tir_func_t* g = apply(&c, f, s);
  STR_EQ(sig(g), "i.o[~4](i.i[8](j[8](.)));i.r.o[~2](i.r.i[3]u(?(j.i.r[8](.))));i.r.r[~2](?(?(j.i.r.i.r.r[8](.))))");
  CHECK_COUNTS(f, g, ROWS);
  /* a trip count its outer loop sets, split by the vector width */
  tir_func_t* t = tri_kernel(&c);
  s = tir_schedule_new(&c);
  tir_sched_split(&c, s, "j", 8);
  tir_sched_unroll(&c, s, "j.i");
  CHECK_COUNTS(t, apply(&c, t, s), ROWS);
  tir_ctx_deinit(&c);
}

static void test_fuse_reorder_kinds(void) {
  tir_ctx_t c;
  tir_ctx_init(&c, al());
  tir_func_t* f = rows_kernel(&c);
  /* fused: n * COLS iterations, then tiled by 16 */
  tir_schedule_t* s = tir_schedule_new(&c);
  tir_sched_fuse(&c, s, "i", "j");
  tir_sched_split(&c, s, "i.j", 16);
  tir_sched_vectorize(&c, s, "i.j.i");
  tir_sched_parallel(&c, s, "i.j.o");
  tir_func_t* g = apply(&c, f, s);
  STR_EQ(sig(g), "i.j.o[~18]p(i.j.i[16]v(.));i.j.r[~15](?(.))");
  CHECK_COUNTS(f, g, ROWS);
  /* the static loop outside, the run-time one inside */
  s = tir_schedule_new(&c);
  tir_sched_reorder(&c, s, 2, (const char*[]){"j", "i"});
  tir_sched_unroll(&c, s, "i");
  g = apply(&c, f, s);
  STR_EQ(sig(g), "j[8](i[~37]u(.))");
  CHECK_COUNTS(f, g, ROWS);
  s = tir_schedule_new(&c);
  tir_sched_parallel(&c, s, "i");
  g = apply(&c, f, s);
  STR_EQ(sig(g), "i[~37]p(j[8](.))");
  CHECK_COUNTS(f, g, ROWS);
  tir_ctx_deinit(&c);
}

static void expect_refused(tir_ctx_t* c, const tir_func_t* f, const tir_schedule_t* s, int code,
                           const char* msg) {
  tir_func_t* out = NULL;
  CHECK_ERR(tir_schedule_apply(c, f, s, &out), code, msg);
  CHECK(out == NULL);
}

static void test_refused(void) {
  tir_ctx_t c;
  tir_ctx_init(&c, al());
  tir_func_t* f = rows_kernel(&c);
  tir_func_t* t = tri_kernel(&c);
  tir_schedule_t* s = tir_schedule_new(&c);
  tir_sched_vectorize(&c, s, "i");
  expect_refused(&c, f, s, KILN_UNSUPPORTED, "loop 'i' has a run-time trip count: split it by the vector width first");
  s = tir_schedule_new(&c);
  tir_sched_bind(&c, s, "i", TIR_BLOCK_X);
  expect_refused(&c, f, s, KILN_UNSUPPORTED, "cannot be bound to a GPU id");
  s = tir_schedule_new(&c);
  tir_sched_fuse(&c, s, "r", "j");
  expect_refused(&c, t, s, KILN_UNSUPPORTED, "loop 'j' has a run-time trip count: fused as the inner loop");
  s = tir_schedule_new(&c);
  tir_sched_reorder(&c, s, 2, (const char*[]){"j", "r"});
  expect_refused(&c, t, s, KILN_INVALID_ARGUMENT, "loop 'j' runs a trip count that loop 'r' sets");
  /* splits of splits: the copies' loops keep distinct names */
  s = tir_schedule_new(&c);
  tir_sched_split(&c, s, "i", 4);
  tir_sched_split(&c, s, "i.o", 2);
  tir_sched_split(&c, s, "j.i.r", 2); /* the remainder's j: static, guarded */
  tir_sched_split(&c, s, "i.o.o", 2);
  tir_sched_split(&c, s, "j", 2);
  tir_func_t* g = apply(&c, f, s);
  CHECK_COUNTS(f, g, ROWS);
  /* a loop a split replaced is gone */
  s = tir_schedule_new(&c);
  tir_sched_split(&c, s, "i", 4);
  tir_sched_split(&c, s, "i.o", 2);
  tir_sched_split(&c, s, "i", 2);
  expect_refused(&c, f, s, KILN_NOT_FOUND, "no loop named 'i'");
  tir_ctx_deinit(&c);
}

/* ---- strides of a run-time size ------------------------------------------ */

#define SQ 19

/* P[h, i, j] = X[h, i, j] - X[h, i, 0] over [4, n, n] stored dense at the
 * run's n (flat: strides n * n and n, as attention scores at a sequence
 * length), params (n, X, P). */
static tir_func_t* square_kernel(tir_ctx_t* c) {
  const int64_t one = 1, numel = 4 * SQ * SQ;
  const tir_buffer_t* n = tir_buffer(c, "n", KILN_DTYPE_I64, 1, &one, TIR_SCOPE_GLOBAL);
  const tir_buffer_t* X = tir_buffer(c, "X", KILN_DTYPE_F32, 1, &numel, TIR_SCOPE_GLOBAL);
  const tir_buffer_t* P = tir_buffer(c, "P", KILN_DTYPE_F32, 1, &numel, TIR_SCOPE_GLOBAL);
  tir_var_t* h = tir_var(c, "h");
  tir_var_t* i = tir_var(c, "i");
  tir_var_t* j = tir_var(c, "j");
  const tir_expr_t* zero = tir_int(c, 0);
  const tir_expr_t* nn = tir_load(c, n, &zero);
  const tir_expr_t* row = tir_add(c, tir_mul(c, tir_ref(c, h), tir_mul(c, nn, nn)), tir_mul(c, tir_ref(c, i), nn));
  const tir_expr_t* at = tir_add(c, row, tir_ref(c, j));
  const tir_stmt_t* body = tir_store(c, P, &at, tir_sub(c, tir_load(c, X, &at), tir_load(c, X, &row)));
  body = tir_for_dyn(c, j, SQ, nn, TIR_LOOP_SERIAL, body);
  body = tir_for_dyn(c, i, SQ, nn, TIR_LOOP_SERIAL, body);
  body = tir_for(c, h, 4, TIR_LOOP_SERIAL, body);
  const tir_buffer_t* params[3] = {n, X, P};
  return tir_func(c, "square", 3, params, body);
}

static void test_run_time_strides(void) {
  tir_ctx_t c;
  tir_ctx_init(&c, al());
  tir_func_t* f = square_kernel(&c);
  if (!f) {
    CHECK(f != NULL);
    tir_ctx_deinit(&c);
    return;
  }
  const tir_buffer_t* dims = f->params[0];
  const int64_t lo = 1, hi = SQ, over = SQ + 1;
  /* without the range the flat index is unbounded data */
  CHECK_ERR(tir_verify(f), KILN_OUT_OF_RANGE, "depends on loaded data and cannot be bounded");
  CHECK_OK(tir_verify_dims(f, dims, 1, &lo, &hi));
  /* one past the top: 4 * 20 * 20 elements do not fit 4 * 19 * 19 */
  CHECK_ERR(tir_verify_dims(f, dims, 1, &lo, &over), KILN_OUT_OF_RANGE,
            "ranges over [0, 1578], outside [0, 1444) of buffer 'P'");
  CHECK_ERR(tir_verify_dims(f, dims, 1, &hi, &lo), KILN_INVALID_ARGUMENT, "range 19..1 is empty");
  CHECK_ERR(tir_verify_dims(f, dims, 2, &lo, &hi), KILN_INVALID_ARGUMENT, "2 dims");
  tir_schedule_t* s = tir_schedule_new(&c);
  tir_sched_parallel(&c, s, "h");
  tir_sched_split(&c, s, "j", 8);
  tir_sched_vectorize(&c, s, "j.i");
  tir_func_t* g = NULL;
  if (CHECK_OK(tir_schedule_apply(&c, f, s, &g))) {
    STR_EQ(sig(g), "h[4]p(i[~19](j.o[~2](j.i[8]v(.));j.r[~7](?(.))))");
    CHECK_OK(tir_verify_dims(g, dims, 1, &lo, &hi));
    CHECK_COUNTS(f, g, SQ);
  }
  tir_ctx_deinit(&c);
}

/* ---- through the CPU target's C printer and compiler ------------------- */

#define W 40

/* E[r, j] = exp(A[r, j] - 1) for r < 3, j < n[0] (a row of run-time length,
 * as a softmax's last pass over a sequence), split by 8: the full tiles
 * vectorize, the remainder runs scalar. */
static void test_cpu_printed(void) {
  kiln_plan_t p;
  memset(&p, 0, sizeof p);
  p.allocator = al();
  tir_ctx_init(&p.tir, al());
  kiln_graph_t* g = NULL;
  if (!CHECK_OK(kiln_graph_create(al(), &g))) return;
  p.graph = g;
  p.target = KILN_TARGET_CLASS_CPU;
  tir_ctx_t* c = &p.tir;
  const int64_t one = 1, sh[2] = {3, W};
  const tir_buffer_t* n = tir_buffer(c, "n", KILN_DTYPE_I64, 1, &one, TIR_SCOPE_GLOBAL);
  const tir_buffer_t* A = tir_buffer(c, "A", KILN_DTYPE_F32, 2, sh, TIR_SCOPE_GLOBAL);
  const tir_buffer_t* E = tir_buffer(c, "E", KILN_DTYPE_F32, 2, sh, TIR_SCOPE_GLOBAL);
  kiln_shape_t s1 = kiln_shape_make(1, &one), s2 = kiln_shape_make(2, sh);
  CHECK_OK(kiln_graph_add_input(g, "n", KILN_DTYPE_I64, &s1, NULL));
  CHECK_OK(kiln_graph_add_input(g, "A", KILN_DTYPE_F32, &s2, NULL));
  CHECK_OK(kiln_graph_add_output(g, "E"));
  kiln_plan_buffer_t bufs[3] = {{.buf = n, .kind = KILN_PLAN_INPUT, .tensor = -1, .alias_of = -1},
                                {.buf = A, .kind = KILN_PLAN_INPUT, .tensor = -1, .alias_of = -1},
                                {.buf = E, .kind = KILN_PLAN_OUTPUT, .tensor = -1, .alias_of = -1}};
  int32_t ins[2] = {0, 1}, outs[1] = {2}, args[3] = {0, 1, 2};
  tir_var_t* r = tir_var(c, "r");
  tir_var_t* j = tir_var(c, "j");
  const tir_expr_t* idx[2] = {tir_ref(c, r), tir_ref(c, j)};
  const tir_expr_t* zero = tir_int(c, 0);
  const tir_expr_t* v =
      tir_call(c, TIR_EXP, 1, tir_sub(c, tir_load(c, A, idx), tir_const(c, KILN_DTYPE_F32, 1.0)), NULL, NULL);
  const tir_stmt_t* body = tir_for_dyn(c, j, W, tir_load(c, n, &zero), TIR_LOOP_SERIAL, tir_store(c, E, idx, v));
  body = tir_for(c, r, 3, TIR_LOOP_PARALLEL, body);
  tir_func_t* naive = tir_func(c, "rowexp", 3, (const tir_buffer_t*[]){n, A, E}, body);
  tir_schedule_t* s = tir_schedule_new(c);
  tir_sched_split(c, s, "j", 8);
  tir_sched_vectorize(c, s, "j.i");
  tir_func_t* f = naive ? apply(c, naive, s) : NULL;
  kiln_plan_kernel_t k = {.func = f, .naive = naive, .node = -1, .args = args};
  p.buffers = bufs;
  p.n_buffers = 3;
  p.kernels = &k;
  p.n_kernels = f ? 1 : 0;
  p.inputs = ins;
  p.outputs = outs;
  char* src = NULL;
  if (f && CHECK_OK(kiln_cpu_generate_source(&p, &src, NULL))) {
    CHECK(strstr(src, "kiln_v") != NULL); /* the full tiles as vectors */
    /* the remainder's count as the right operand of '<', in parentheses
     * (the loop's guard would hide extra iterations from the run below) */
    CHECK(strstr(src, "< (n_b0[0] & 7);") != NULL);
  }
  free(src);
  kiln_cpu_options_t o;
  kiln_cpu_options_default(&o);
  o.cache_dir = "";                      /* nothing left behind */
  o.dump_dir = getenv("KILN_TEST_DUMP"); /* write the generated C there */
  kiln_cpu_exec_t* e = NULL;
  if (f) CHECK_OK(kiln_cpu_compile(&p, &o, &e, NULL));
  kiln_array_t in[2];
  memset(in, 0, sizeof in);
  CHECK_OK(kiln_array_alloc(al(), KILN_DTYPE_I64, &s1, &in[0]));
  CHECK_OK(kiln_array_alloc(al(), KILN_DTYPE_F32, &s2, &in[1]));
  float* a = in[1].data;
  for (int i = 0; a && i < 3 * W; ++i) a[i] = (float)(i % 13) / 7.0f - 0.5f;
  const int64_t counts[] = {0, 1, 7, 8, 9, 23, 39, W};
  for (size_t t = 0; e && in[0].data && a && t < sizeof counts / sizeof *counts; ++t) {
    *(int64_t*)in[0].data = counts[t];
    kiln_array_t out[1];
    if (!CHECK_OK(kiln_cpu_run(e, in, out, NULL, NULL))) break;
    const float* y = out[0].data;
    int bad = 0;
    for (int rr = 0; rr < 3; ++rr)
      for (int jj = 0; jj < counts[t]; ++jj) {
        const float want = expf(a[rr * W + jj] - 1.0f);
        bad += !(fabsf(y[rr * W + jj] - want) <= 1e-5f * want);
      }
    CHECK_MSG(bad == 0, "count %lld: %d wrong values", (long long)counts[t], bad);
    kiln_array_free(al(), &out[0]);
  }
  kiln_cpu_exec_destroy(e);
  kiln_array_free(al(), &in[0]);
  kiln_array_free(al(), &in[1]);
  kiln_graph_destroy(g);
  tir_ctx_deinit(&p.tir);
}

int main(void) {
  RUN(test_split);
  RUN(test_fuse_reorder_kinds);
  RUN(test_refused);
  RUN(test_run_time_strides);
  RUN(test_cpu_printed);
  return kiln_test_finish();
}
