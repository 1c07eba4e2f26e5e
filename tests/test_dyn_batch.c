/* Dynamic batch (kiln compile --dim NAME=LO..HI): one per-sample CPU module
 * run at several batch sizes against the reference executor at each, the
 * session's range errors, the memory plan at each size against its lower
 * bound, the module file round trip of the dims (section DYNS) and the
 * compile-time check that refuses models that mix samples. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/model_dims.h"
#include "compiler/pipeline.h"
#include "compiler/ref_exec.h"
#include "ir/graph.h"
#include "ir/tir.h"
#include "ir/tir_interp.h"
#include "kiln/runtime.h"
#include "runtime/module_file.h"
#include "runtime/module_impl.h"
#include "runtime/planner.h"
#include "runtime/program.h"
#include "targets/registry.h"
#include "testing.h"

static kiln_allocator_t al(void) { return kiln_allocator_system(); }

/* Deterministic values in [-1, 1). */
static kiln_array_t filled(int rank, const int64_t* dims, uint32_t seed) {
  kiln_array_t a;
  memset(&a, 0, sizeof a);
  kiln_shape_t s = kiln_shape_make(rank, dims);
  if (!CHECK_OK(kiln_array_alloc(al(), KILN_DTYPE_F32, &s, &a))) return a;
  float* f = a.data;
  for (size_t i = 0; i < a.nbytes / 4; ++i) {
    seed = seed * 1664525u + 1013904223u;
    f[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
  }
  return a;
}

static bool init(kiln_graph_t* g, const char* name, int rank, const int64_t* dims, uint32_t seed) {
  kiln_array_t a = filled(rank, dims, seed);
  return a.data && CHECK_OK(kiln_graph_add_initializer(g, name, &a, NULL));
}

static bool node(kiln_graph_t* g, const char* op, const char* name, int n_in, const char* const* in, const char* out,
                 int n_attrs, const kiln_attr_t* attrs) {
  return CHECK_OK(kiln_graph_add_node(g, op, name, n_in, in, 1, (const char*[]){out}, n_attrs, attrs, NULL));
}

/* A residual CNN (ResNet's basic block at a tiny scale) whose input is
 * [batch,3,8,8]: batch >= 1 a size, 0 the symbol "batch". */
static kiln_graph_t* cnn(int64_t batch) {
  kiln_graph_t* g = NULL;
  if (!CHECK_OK(kiln_graph_create(al(), &g))) return NULL;
  bool ok = CHECK_OK(kiln_graph_set_opset(g, "", 17));
  int64_t x[4] = {batch, 3, 8, 8};
  if (!batch) {
    int32_t sym = 0;
    ok = ok && CHECK_OK(kiln_graph_symbol(g, "batch", &sym));
    x[0] = kiln_dim_from_symbol(sym);
  }
  kiln_shape_t xs = kiln_shape_make(4, x);
  ok = ok && CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &xs, NULL));
  ok = ok && init(g, "w1", 4, (const int64_t[]){8, 3, 3, 3}, 1) && init(g, "b1", 1, (const int64_t[]){8}, 2) &&
       init(g, "w2", 4, (const int64_t[]){8, 8, 3, 3}, 3) && init(g, "w3", 2, (const int64_t[]){8, 5}, 4) &&
       init(g, "b3", 1, (const int64_t[]){5}, 5);
  const int64_t pads[4] = {1, 1, 1, 1};
  kiln_attr_t pa = kiln_attr_make_ints("pads", 4, pads);
  const kiln_attr_t pool[2] = {kiln_attr_make_ints("kernel_shape", 2, (const int64_t[]){2, 2}),
                               kiln_attr_make_ints("strides", 2, (const int64_t[]){2, 2})};
  ok = ok && node(g, "Conv", "conv1", 3, (const char*[]){"x", "w1", "b1"}, "c1", 1, &pa) &&
       node(g, "Relu", "relu1", 1, (const char*[]){"c1"}, "r1", 0, NULL) &&
       node(g, "Conv", "conv2", 2, (const char*[]){"r1", "w2"}, "c2", 1, &pa) &&
       node(g, "Add", "add", 2, (const char*[]){"c2", "r1"}, "a", 0, NULL) &&
       node(g, "Relu", "relu2", 1, (const char*[]){"a"}, "r2", 0, NULL) &&
       node(g, "MaxPool", "pool", 1, (const char*[]){"r2"}, "p", 2, pool) &&
       node(g, "GlobalAveragePool", "gap", 1, (const char*[]){"p"}, "gp", 0, NULL) &&
       node(g, "Flatten", "flat", 1, (const char*[]){"gp"}, "f", 0, NULL) &&
       node(g, "Gemm", "fc", 3, (const char*[]){"f", "w3", "b3"}, "y", 0, NULL);
  ok = ok && CHECK_OK(kiln_graph_add_output(g, "y"));
  if (!ok) {
    kiln_graph_destroy(g);
    return NULL;
  }
  return g;
}

/* The module file of the last dyn_module() (freed at exit). */
static uint8_t* g_bytes;
static size_t g_len;

/* The per-sample module: the graph at batch 1, compiled with the dim
 * dynamic in [1, 8], through the module file and back. */
static kiln_module_t* dyn_module(void) {
  kiln_graph_t* g = cnn(1);
  kiln_program_t* prog = NULL;
  kiln_module_t* m = NULL;
  kiln_compile_log_t log = {0};
  kiln_compile_config_t cc = {.target = kiln_target_find("cpu"), .opt = 1, .threads = 2, .model_name = "cnn",
                              .dyn_dim = "batch", .dyn_lo = 1, .dyn_hi = 8};
  if (g && CHECK_OK(kiln_graph_prepare(g)) && CHECK_OK(kiln_compile_graph_passes(g, 1, cc.target, &log)) &&
      CHECK_OK(kiln_compile_program(g, &cc, &log, &prog))) {
    CHECK(prog->n_dims == 1 && !strcmp(prog->dims[0].name, "batch") && prog->dims[0].hi == 8);
    uint8_t* bytes = NULL;
    size_t len = 0;
    if (CHECK_OK(kiln_module_serialize(prog, al(), &bytes, &len)))
      CHECK_OK(kiln_module_load_memory(bytes, len, "cnn.kiln", al(), &m));
    free(g_bytes);
    g_bytes = bytes;
    g_len = len;
  }
  kiln_program_destroy(prog);
  kiln_compile_log_free(&log);
  kiln_graph_destroy(g);
  return m;
}

/* Session output at batch |n| against the reference run of the graph
 * built at |n|. */
static void check_batch(kiln_session_t* s, int64_t n) {
  kiln_graph_t* g = cnn(n);
  if (!g || !CHECK_OK(kiln_graph_prepare(g))) {
    kiln_graph_destroy(g);
    return;
  }
  kiln_array_t x = filled(4, (const int64_t[]){n, 3, 8, 8}, 100 + (uint32_t)n);
  kiln_array_t want, got;
  memset(&want, 0, sizeof want);
  memset(&got, 0, sizeof got);
  if (CHECK_OK(kiln_ref_run(g, &x, NULL, &want)) && CHECK_OK(kiln_session_run(s, &x, &got))) {
    CHECK(got.shape.rank == 2 && got.shape.dims[0] == n && got.shape.dims[1] == 5);
    double worst = 0;
    for (size_t i = 0; i < want.nbytes / 4 && got.nbytes == want.nbytes; ++i)
      worst = fmax(worst, fabs(((float*)got.data)[i] - ((float*)want.data)[i]));
    CHECK_MSG(got.nbytes == want.nbytes && worst < 1e-4, "batch %lld: max abs error %g", (long long)n, worst);
  }
  kiln_array_free(al(), &x);
  kiln_array_free(al(), &want);
  kiln_array_free(al(), &got);
  kiln_graph_destroy(g);
}

static void test_runs_at_each_batch(void) {
  kiln_module_t* m = dyn_module();
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_session_options_t so;
  kiln_session_options_default(&so);
  so.slots = 1;
  if (m && CHECK_OK(kiln_device_open("cpu", NULL, al(), &d)) && CHECK_OK(kiln_session_create(m, d, &so, &s))) {
    const char* name = NULL;
    int64_t lo = 0, hi = 0, v = 0;
    CHECK(kiln_module_dim_count(m) == 1);
    CHECK(!kiln_module_dim(m, 0, &name, &lo, &hi) && !strcmp(name, "batch") && lo == 1 && hi == 8);
    /* up, down (the arena stays) and up again, each against the reference */
    const int64_t order[] = {1, 8, 3, 1, 5};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; ++i) check_batch(s, order[i]);
    /* the plan at each value: linear sizes, verified, at its lower bound */
    kiln_session_memory_t m1, m8;
    if (CHECK_OK(kiln_session_memory_at(s, 1, &m1)) && CHECK_OK(kiln_session_memory_at(s, 8, &m8))) {
      CHECK(m1.arena_bytes >= m1.lower_bound_bytes && m8.arena_bytes >= m8.lower_bound_bytes);
      CHECK(m8.lower_bound_bytes > 7 * m1.lower_bound_bytes);
      printf("arena at batch 1: %llu bytes (lower bound %llu); at 8: %llu (lower bound %llu)\n",
             (unsigned long long)m1.arena_bytes, (unsigned long long)m1.lower_bound_bytes,
             (unsigned long long)m8.arena_bytes, (unsigned long long)m8.lower_bound_bytes);
    }
    const kiln_program_t* p = kiln_module_program(m);
    for (int64_t n = 1; n <= 8; ++n) {
      kiln_program_t at;
      kiln_memory_plan_t mp;
      memset(&mp, 0, sizeof mp);
      if (CHECK_OK(kiln_program_at(p, n, al(), &at))) {
        if (CHECK_OK(kiln_memory_plan(&at, 64, al(), &mp))) CHECK_OK(kiln_memory_plan_verify(&at, &mp, 64));
        kiln_memory_plan_free(al(), &mp);
        kiln_program_at_free(al(), &at);
      }
    }
    CHECK_ERR(kiln_session_memory_at(s, 9, &m1), KILN_INVALID_ARGUMENT, "outside the module's range 1..8");
    /* outside the range, a wrong other dim: errors naming the input */
    kiln_array_t out;
    memset(&out, 0, sizeof out);
    kiln_array_t x9 = filled(4, (const int64_t[]){9, 3, 8, 8}, 9);
    CHECK_ERR(kiln_session_run(s, &x9, &out), KILN_INVALID_ARGUMENT,
              "input 'x' dim 0 ('batch') is 9, outside the module's range 1..8");
    kiln_array_t x0 = filled(4, (const int64_t[]){0, 3, 8, 8}, 9);
    CHECK_ERR(kiln_session_run(s, &x0, &out), KILN_INVALID_ARGUMENT, "is 0, outside the module's range 1..8");
    kiln_array_t xw = filled(4, (const int64_t[]){2, 3, 8, 7}, 9);
    CHECK_ERR(kiln_session_run(s, &xw, &out), KILN_INVALID_ARGUMENT,
            "input 'x' has shape [2,3,8,7], but the module takes [2,3,8,8] with dim 0 ('batch') any of 1..8");
    CHECK(out.data == NULL);
    kiln_array_free(al(), &x9);
    kiln_array_free(al(), &x0);
    kiln_array_free(al(), &xw);
    /* --dim parsing against the module */
    CHECK(!kiln_module_dim_parse(m, "batch=4", &v) && v == 4);
    CHECK_ERR(kiln_module_dim_parse(m, "batch=0", &v), KILN_INVALID_ARGUMENT, "takes a value in 1..8");
    CHECK_ERR(kiln_module_dim_parse(m, "batch=4x", &v), KILN_INVALID_ARGUMENT, "'batch'");
    CHECK_ERR(kiln_module_dim_parse(m, "N=4", &v), KILN_NOT_FOUND, "dynamic dim is 'batch' (1..8)");
  }
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
}

/* Two slots in flight at different batches: each its own plan, views and
 * command buffer; both results right. */
static void test_two_slots_two_batches(void) {
  kiln_module_t* m = dyn_module();
  kiln_device_t* d = NULL;
  kiln_session_t* s = NULL;
  kiln_session_options_t so;
  kiln_session_options_default(&so);
  so.slots = 2;
  if (m && CHECK_OK(kiln_device_open("cpu", NULL, al(), &d)) && CHECK_OK(kiln_session_create(m, d, &so, &s))) {
    kiln_array_t x3 = filled(4, (const int64_t[]){3, 3, 8, 8}, 103), x8 = filled(4, (const int64_t[]){8, 3, 8, 8}, 108);
    kiln_array_t y3, y8, r3, r8;
    memset(&y3, 0, sizeof y3);
    memset(&y8, 0, sizeof y8);
    memset(&r3, 0, sizeof r3);
    memset(&r8, 0, sizeof r8);
    uint64_t a = 0, b = 0;
    if (CHECK_OK(kiln_session_enqueue(s, &x3, &a)) && CHECK_OK(kiln_session_enqueue(s, &x8, &b)) &&
        CHECK_OK(kiln_session_wait(s, b, &y8)) && CHECK_OK(kiln_session_wait(s, a, &y3))) {
      /* the same batches one at a time, for the expected values */
      if (CHECK_OK(kiln_session_run(s, &x3, &r3)) && CHECK_OK(kiln_session_run(s, &x8, &r8))) {
        CHECK(y3.shape.dims[0] == 3 && y8.shape.dims[0] == 8);
        CHECK(y3.nbytes == r3.nbytes && !memcmp(y3.data, r3.data, r3.nbytes));
        CHECK(y8.nbytes == r8.nbytes && !memcmp(y8.data, r8.data, r8.nbytes));
      }
    }
    kiln_array_t* all[] = {&x3, &x8, &y3, &y8, &r3, &r8};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) kiln_array_free(al(), all[i]);
  }
  kiln_session_destroy(s);
  kiln_device_release(d);
  kiln_module_release(m);
}

/* The tensor IR's run-time extent: y[i] = 1 for i < n[0] (n[0] <= 4), run
 * by the interpreter, verified, printed, and refused past its bound. */
static void test_tir_dyn_loop(void) {
  tir_ctx_t c;
  tir_ctx_init(&c, al());
  const int64_t four = 4, one = 1;
  const tir_buffer_t* y = tir_buffer(&c, "y", KILN_DTYPE_F32, 1, &four, TIR_SCOPE_GLOBAL);
  const tir_buffer_t* n = tir_buffer(&c, "n", KILN_DTYPE_I64, 1, &one, TIR_SCOPE_GLOBAL);
  tir_var_t* i = tir_var(&c, "i");
  const tir_expr_t* zero = tir_int(&c, 0);
  const tir_expr_t* idx = tir_ref(&c, i);
  const tir_stmt_t* body = tir_store(&c, y, &idx, tir_const(&c, KILN_DTYPE_F32, 1.0));
  const tir_stmt_t* loop = tir_for_dyn(&c, i, 4, tir_load(&c, n, &zero), TIR_LOOP_SERIAL, body);
  const tir_buffer_t* params[2] = {y, n};
  tir_func_t* f = tir_func(&c, "dyn", 2, params, loop);
  CHECK(tir_for_dyn(&c, i, 4, NULL, TIR_LOOP_SERIAL, body) == NULL);
  CHECK(f != NULL);
  if (f) {
    CHECK_OK(tir_verify(f));
    CHECK(tir_func_buffer_access(f, n) == TIR_ACCESS_LOAD); /* the extent reads it */
    tir_func_t* simple = tir_simplify_func(&c, f);
    CHECK(simple && simple->body->kind == TIR_FOR && simple->body->u.loop.dyn_extent != NULL);
    float out[4] = {0, 0, 0, 0};
    int64_t count = 3;
    void* args[2] = {out, &count};
    if (CHECK_OK(tir_interp_run(f, args, NULL, al()))) CHECK(out[0] == 1 && out[2] == 1 && out[3] == 0);
    count = 5;
    CHECK_ERR(tir_interp_run(f, args, NULL, al()), KILN_OUT_OF_RANGE, "runs 5 times, above its bound 4");
    /* a float extent is malformed */
    const tir_expr_t* fe = tir_const(&c, KILN_DTYPE_F32, 2.0);
    tir_func_t* bad = tir_func(&c, "bad", 2, params, tir_for_dyn(&c, i, 4, fe, TIR_LOOP_SERIAL, body));
    CHECK(bad != NULL);
    if (bad) CHECK_ERR(tir_verify(bad), KILN_INVALID_ARGUMENT, "run-time extent that is not I64");
  }
  tir_ctx_deinit(&c);
}

/* A program whose dims do not fit is refused before anything runs. */
static void test_bad_dims_in_program(void) {
  kiln_module_t* m = dyn_module();
  if (!m) return;
  kiln_program_t* p = (kiln_program_t*)kiln_module_program(m);
  const int64_t hi = p->dims[0].hi;
  p->dims[0].hi = 0;
  CHECK_ERR(kiln_program_validate(p), KILN_PARSE_ERROR, "dynamic dim 'batch'");
  p->dims[0].hi = KILN_PROGRAM_MAX_DIM_VALUE + 1;
  CHECK_ERR(kiln_program_validate(p), KILN_PARSE_ERROR, "1 <= lo <= hi <= 1048576");
  p->dims[0].hi = hi;
  p->n_dims = 2;
  CHECK_ERR(kiln_program_validate(p), KILN_PARSE_ERROR, "2 dynamic dims");
  p->n_dims = 0;
  CHECK_ERR(kiln_program_validate(p), KILN_PARSE_ERROR, "dims buffer 'kiln_dims' in a program without dynamic dims");
  p->n_dims = 1;
  int32_t in = p->inputs[0];
  p->buffers[in].shape[0] = 2;
  CHECK_ERR(kiln_program_validate(p), KILN_PARSE_ERROR, "buffer 'x' spans 768 bytes");
  p->buffers[in].shape[0] = 1;
  CHECK_OK(kiln_program_validate(p));
  kiln_module_release(m);
}

/* Every cut of a module with a DYNS section is a clean parse error. */
static void test_truncated_module(void) {
  if (!g_bytes) return;
  for (size_t cut = 0; cut < g_len; cut += cut < 256 ? 1 : 97) {
    kiln_module_t* m = NULL;
    kiln_status_t s = kiln_module_load_memory(g_bytes, cut, "cut.kiln", al(), &m);
    CHECK_MSG(s && kiln_status_code(s) == KILN_PARSE_ERROR, "cut at %zu: %s", cut, s ? kiln_status_message(s) : "loaded");
    kiln_status_free(s);
    kiln_module_release(m);
  }
}

/* The compile-time check: the model symbolic, at 2 and at 3, with node
 * |op| (if any) reading y into z, an output. */
static kiln_status_t check_with(const char* op, int n_in, const char* const* ins, int n_attrs,
                                const kiln_attr_t* attrs, const char* dim) {
  kiln_graph_t* g[3] = {cnn(0), cnn(0), cnn(0)};
  kiln_status_t s = NULL;
  for (int k = 0; k < 3 && !s; ++k) {
    if (!g[k]) s = kiln_make_status(KILN_OUT_OF_MEMORY, "graph");
    if (!s && op) s = kiln_graph_add_node(g[k], op, "mixer", n_in, ins, 1, (const char*[]){"z"}, n_attrs, attrs, NULL);
    if (!s && op) s = kiln_graph_add_output(g[k], "z");
  }
  if (!s) s = kiln_model_check_per_sample(dim, g[0], g[1], g[2]);
  for (int k = 0; k < 3; ++k) kiln_graph_destroy(g[k]);
  return s;
}

/* y * float(Size(y)) and y reshaped to [Shape(y)[0], -1]: the dim as a
 * value in arithmetic (refused) and as a Reshape's target (per sample). */
static kiln_status_t check_valued(bool arithmetic) {
  kiln_graph_t* g[3] = {cnn(0), cnn(0), cnn(0)};
  kiln_status_t s = NULL;
  const kiln_attr_t to = kiln_attr_make_int("to", KILN_DTYPE_F32);
  for (int k = 0; k < 3 && !s; ++k) {
    if (!g[k]) return kiln_make_status(KILN_OUT_OF_MEMORY, "graph");
    kiln_graph_t* x = g[k];
    if (arithmetic) {
      s = kiln_graph_add_node(x, "Size", "size", 1, (const char*[]){"y"}, 1, (const char*[]){"n"}, 0, NULL, NULL);
      if (!s) s = kiln_graph_add_node(x, "Cast", "cast", 1, (const char*[]){"n"}, 1, (const char*[]){"nf"}, 1, &to, NULL);
      if (!s) s = kiln_graph_add_node(x, "Mul", "mixer", 2, (const char*[]){"y", "nf"}, 1, (const char*[]){"z"}, 0, NULL, NULL);
    } else {
      kiln_array_t i0, m1;
      memset(&i0, 0, sizeof i0);
      memset(&m1, 0, sizeof m1);
      kiln_shape_t one = kiln_shape_make(1, (const int64_t[]){1});
      s = kiln_array_alloc(al(), KILN_DTYPE_I64, &one, &i0);
      if (!s) s = kiln_array_alloc(al(), KILN_DTYPE_I64, &one, &m1);
      if (!s) {
        ((int64_t*)i0.data)[0] = 0;
        ((int64_t*)m1.data)[0] = -1;
        s = kiln_graph_add_initializer(x, "i0", &i0, NULL);
      }
      if (!s) s = kiln_graph_add_initializer(x, "m1", &m1, NULL);
      const kiln_attr_t ax = kiln_attr_make_int("axis", 0);
      if (!s) s = kiln_graph_add_node(x, "Shape", "shape", 1, (const char*[]){"y"}, 1, (const char*[]){"sh"}, 0, NULL, NULL);
      if (!s) s = kiln_graph_add_node(x, "Gather", "g0", 2, (const char*[]){"sh", "i0"}, 1, (const char*[]){"n"}, 0, NULL, NULL);
      if (!s) s = kiln_graph_add_node(x, "Concat", "cat", 2, (const char*[]){"n", "m1"}, 1, (const char*[]){"t"}, 1, &ax, NULL);
      if (!s) s = kiln_graph_add_node(x, "Reshape", "mixer", 2, (const char*[]){"y", "t"}, 1, (const char*[]){"z"}, 0, NULL, NULL);
    }
    if (!s) s = kiln_graph_add_output(x, "z");
  }
  if (!s) s = kiln_model_check_per_sample("batch", g[0], g[1], g[2]);
  for (int k = 0; k < 3; ++k) kiln_graph_destroy(g[k]);
  return s;
}

static void expect_refused(const char* op, int n_in, const char* const* ins, int n_attrs, const kiln_attr_t* attrs,
                           const char* needle) {
  kiln_status_t s = check_with(op, n_in, ins, n_attrs, attrs, "batch");
  CHECK_MSG(s && strstr(kiln_status_message(s), "node 'mixer'") && strstr(kiln_status_message(s), "'batch'"),
            "%s: %s", op, s ? kiln_status_message(s) : "accepted");
  CHECK_ERR(s, KILN_UNSUPPORTED, needle);
}

static void test_per_sample_check(void) {
  CHECK_OK(check_with(NULL, 0, NULL, 0, NULL, "batch"));
  CHECK_ERR(check_with(NULL, 0, NULL, 0, NULL, "seq"), KILN_NOT_FOUND, "no dimension named 'seq'");
  const kiln_attr_t ax0 = kiln_attr_make_int("axis", 0);
  expect_refused("Softmax", 1, (const char*[]){"y"}, 1, &ax0, "mixes samples");
  expect_refused("Transpose", 1, (const char*[]){"y"}, 0, NULL, "does not keep the dim");
  const kiln_attr_t keep[2] = {kiln_attr_make_ints("axes", 1, (const int64_t[]){0}), kiln_attr_make_int("keepdims", 1)};
  expect_refused("ReduceSum", 1, (const char*[]){"y"}, 0, NULL, "does not keep the dim");
  expect_refused("ReduceMax", 1, (const char*[]){"y"}, 2, keep, "does not keep the dim");
  expect_refused("Concat", 2, (const char*[]){"y", "y"}, 1, &ax0, "does not keep the dim");
  /* the dim as a value: a Reshape's target may take it, nothing else */
  CHECK_ERR(check_with("Shape", 1, (const char*[]){"y"}, 0, NULL, "batch"), KILN_UNSUPPORTED,
            "output 'z' does not have it as dim 0");
  CHECK_ERR(check_valued(true), KILN_UNSUPPORTED, "node 'mixer' (Mul): dim 'batch' cannot be dynamic: the node computes");
  CHECK_OK(check_valued(false));
  kiln_status_t s = check_with("Reshape", 2, (const char*[]){"y", "ys"}, 0, NULL, "batch");
  CHECK_MSG(s != NULL, "Reshape to a missing tensor must fail");
  kiln_status_free(s);
  /* a Softmax along the last axis is per sample */
  const kiln_attr_t ax1 = kiln_attr_make_int("axis", -1);
  CHECK_OK(check_with("Softmax", 1, (const char*[]){"y"}, 1, &ax1, "batch"));
  /* `batch` names the symbol at dim 0 of the first input; a fixed dim 0 is refused */
  for (int fixed = 0; fixed < 2; ++fixed) {
    kiln_graph_t* x = NULL;
    int32_t sym = 0;
    char nm[64] = "batch";
    if (!CHECK_OK(kiln_graph_create(al(), &x))) continue;
    if (CHECK_OK(kiln_graph_symbol(x, "N", &sym))) {
      kiln_shape_t sh = kiln_shape_make(2, (const int64_t[]){fixed ? 1 : kiln_dim_from_symbol(sym), 4});
      CHECK_OK(kiln_graph_add_input(x, "in", KILN_DTYPE_F32, &sh, NULL));
      if (fixed) CHECK_ERR(kiln_model_batch_alias(x, nm, sizeof nm), KILN_UNSUPPORTED, "input 'in' has a fixed dim 0");
      else CHECK(!kiln_model_batch_alias(x, nm, sizeof nm) && !strcmp(nm, "N"));
    }
    kiln_graph_destroy(x);
  }
  /* --dim specs */
  char name[64];
  int64_t lo, hi;
  bool range;
  CHECK(!kiln_model_dim_range("batch=1..8", name, sizeof name, &lo, &hi, &range) && range && lo == 1 && hi == 8 &&
        !strcmp(name, "batch"));
  CHECK(!kiln_model_dim_range("batch=4", name, sizeof name, &lo, &hi, &range) && !range);
  const char* bad[] = {"batch=0..8", "batch=8..1", "batch=1..", "batch=..8", "=1..8", "batch=1..8x", "batch=1..2000000"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i)
    CHECK_ERR(kiln_model_dim_range(bad[i], name, sizeof name, &lo, &hi, &range), KILN_INVALID_ARGUMENT, bad[i]);
}

int main(void) {
  RUN(test_per_sample_check);
  RUN(test_runs_at_each_batch);
  RUN(test_tir_dyn_loop);
  RUN(test_two_slots_two_batches);
  RUN(test_bad_dims_in_program);
  RUN(test_truncated_module);
  free(g_bytes);
  return kiln_test_finish();
}
