/* Tests of the elementwise and tensor lowerings (lowering/lower_elementwise.c,
 * lowering/lower_tensor.c).
 *
 * Each case is a one-node graph. It is lowered into a plan for the CPU and
 * the GPU target class (which checks every naive and scheduled kernel with
 * tir_verify), then the plan is executed by the tensor-IR interpreter
 * (ir/tir_interp.h: loops run serially, every load and store is
 * bounds-checked) once
 * with the naive kernels and once with the scheduled ones, and the outputs
 * are compared with kiln_ref_run on the same random inputs. The CPU plan is
 * also compiled and run with the CPU backend (targets/cpu) and compared the
 * same way. Error cases check the messages of variants that have no
 * lowering. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ir/op.h"
#include "ir/tir_interp.h"
#include "lowering/plan.h"
#include "compiler/ref_exec.h"
#include "testing.h"
#include "targets/cpu/cpu_backend.h"

/* ---- graph building --------------------------------------------------- */

#define N_OF(T, ...) ((int32_t)(sizeof((T[]){__VA_ARGS__}) / sizeof(T)))
#define SHAPE(...) kiln_shape_make(N_OF(int64_t, __VA_ARGS__), (int64_t[]){__VA_ARGS__})
#define SCALAR kiln_shape_make(0, NULL)
#define NAMES(...) N_OF(const char*, __VA_ARGS__), (const char*[]){__VA_ARGS__}
#define ATTRS(...) N_OF(kiln_attr_t, __VA_ARGS__), (kiln_attr_t[]){__VA_ARGS__}
#define NO_ATTRS 0, NULL
#define I64S(...) N_OF(int64_t, __VA_ARGS__), (int64_t[]){__VA_ARGS__}

static kiln_allocator_t sys(void) { return kiln_allocator_system(); }

static kiln_graph_t* graph(int64_t opset) {
  kiln_graph_t* g = NULL;
  CHECK_OK(kiln_graph_create(sys(), &g));
  CHECK_OK(kiln_graph_set_opset(g, "", opset));
  return g;
}

static void input(kiln_graph_t* g, const char* name, kiln_dtype_t dt, kiln_shape_t s) {
  CHECK_OK(kiln_graph_add_input(g, name, dt, &s, NULL));
}

static void init(kiln_graph_t* g, const char* name, kiln_dtype_t dt, kiln_shape_t s,
                 const void* data) {
  kiln_array_t a;
  memset(&a, 0, sizeof a);
  CHECK_OK(kiln_array_alloc(sys(), dt, &s, &a));
  if (data && a.nbytes) memcpy(a.data, data, a.nbytes);
  CHECK_OK(kiln_graph_add_initializer(g, name, &a, NULL));
}

static void init_i64(kiln_graph_t* g, const char* name, int32_t n, const int64_t* v) {
  init(g, name, KILN_DTYPE_I64, kiln_shape_make(1, (int64_t[]){n}), v);
}

static void init_f32(kiln_graph_t* g, const char* name, kiln_shape_t s, const float* v) {
  init(g, name, KILN_DTYPE_F32, s, v);
}

static void node(kiln_graph_t* g, const char* op, int32_t n_in, const char* const* in,
                 int32_t n_out, const char* const* out, int32_t n_attr,
                 const kiln_attr_t* attrs) {
  CHECK_OK(kiln_graph_add_node(g, op, op, n_in, in, n_out, out, n_attr, attrs, NULL));
  for (int32_t i = 0; i < n_out; ++i)
    if (out[i][0]) CHECK_OK(kiln_graph_add_output(g, out[i]));
}

/* ---- random inputs ------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static double urand(double lo, double hi) {
  return lo + (hi - lo) * (double)(rnd() >> 11) / 9007199254740992.0;
}

/* How inputs are drawn (tests set it before check()). */
typedef struct gen_s {
  double lo, hi;       /* float range */
  int64_t ilo, ihi;    /* integer range (clamped to the dtype) */
  bool specials;       /* sprinkle NaN, +-inf, -0, huge values into floats */
  bool nonzero;        /* no zeros (integer divisors) */
} gen_t;

static gen_t gen;

static void gen_default(void) {
  gen.lo = -3.0;
  gen.hi = 3.0;
  gen.ilo = -100;
  gen.ihi = 100;
  gen.specials = false;
  gen.nonzero = false;
}

static void dtype_range(kiln_dtype_t t, int64_t* lo, int64_t* hi) {
  switch (t) {
    case KILN_DTYPE_I8: *lo = INT8_MIN; *hi = INT8_MAX; break;
    case KILN_DTYPE_U8: *lo = 0; *hi = UINT8_MAX; break;
    case KILN_DTYPE_I32: *lo = INT32_MIN; *hi = INT32_MAX; break;
    case KILN_DTYPE_BOOL: *lo = 0; *hi = 1; break;
    default: *lo = INT64_MIN; *hi = INT64_MAX; break;
  }
}

static void fill_random(kiln_array_t* a) {
  int64_t n = kiln_array_numel(a);
  for (int64_t i = 0; i < n; ++i) {
    if (kiln_dtype_is_float(a->dtype)) {
      double v = urand(gen.lo, gen.hi);
      if (gen.specials && rnd() % 6 == 0) {
        static const double sp[] = {NAN, INFINITY, -INFINITY, -0.0, 1e30, -1e30, 3e9, -5e18, 0.5, -2.5};
        v = sp[rnd() % (sizeof sp / sizeof sp[0])];
      }
      kiln_store_f64(a->dtype, a->data, (size_t)i, v);
    } else {
      int64_t lo, hi;
      dtype_range(a->dtype, &lo, &hi);
      if (gen.ilo > lo) lo = gen.ilo;
      if (gen.ihi < hi) hi = gen.ihi;
      int64_t v;
      do {
        uint64_t span = (uint64_t)hi - (uint64_t)lo + 1;
        v = (int64_t)((uint64_t)lo + (span ? rnd() % span : rnd()));
      } while (gen.nonzero && v == 0);
      kiln_store_i64(a->dtype, a->data, (size_t)i, v);
    }
  }
}

/* Runs every kernel of |p| (naive or scheduled) on |inputs|; outputs are
 * allocated into |outs|. Returns false (with a failed check) on an
 * interpreter error such as an out-of-bounds access. */
static bool interpret_plan(const kiln_plan_t* p, const kiln_array_t* inputs, bool naive,
                           kiln_array_t* outs) {
  void** mem = calloc((size_t)p->n_buffers + 1, sizeof(void*));
  bool* owned = calloc((size_t)p->n_buffers + 1, sizeof(bool));
  for (int32_t b = 0; b < p->n_buffers; ++b) {
    int32_t root = kiln_plan_root(p, b);
    if (mem[root]) continue;
    const kiln_plan_buffer_t* pb = &p->buffers[root];
    size_t bytes = (size_t)tir_buffer_numel(pb->buf) * kiln_dtype_size(pb->buf->dtype);
    if (pb->kind == KILN_PLAN_CONST) {
      mem[root] = pb->value.data;
      continue;
    }
    mem[root] = calloc(bytes + 8, 1);
    owned[root] = true;
    if (pb->kind == KILN_PLAN_INPUT) {
      for (int32_t i = 0; i < p->graph->n_inputs; ++i)
        if (kiln_plan_root(p, p->inputs[i]) == root) memcpy(mem[root], inputs[i].data, bytes);
    }
  }
  bool ok = true;
  for (int32_t k = 0; k < p->n_kernels && ok; ++k) {
    const kiln_plan_kernel_t* kk = &p->kernels[k];
    const tir_func_t* f = naive ? kk->naive : kk->func;
    void* args[512];
    for (int32_t a = 0; a < f->n_params; ++a) args[a] = mem[kiln_plan_root(p, kk->args[a])];
    kiln_status_t st = tir_interp_run(f, args, NULL, sys());
    if (st) {
      CHECK_MSG(false, "%s (%s)", kiln_status_message(st), naive ? "naive" : "scheduled");
      kiln_status_free(st);
      ok = false;
    }
  }
  for (int32_t i = 0; i < p->graph->n_outputs; ++i) {
    const tir_buffer_t* b = p->buffers[p->outputs[i]].buf;
    kiln_shape_t s = kiln_shape_make(b->rank, b->shape);
    memset(&outs[i], 0, sizeof outs[i]);
    CHECK_OK(kiln_array_alloc(sys(), b->dtype, &s, &outs[i]));
    void* src = mem[kiln_plan_root(p, p->outputs[i])];
    if (outs[i].nbytes && src) memcpy(outs[i].data, src, outs[i].nbytes);
  }
  for (int32_t b = 0; b < p->n_buffers; ++b)
    if (owned[b]) free(mem[b]);
  free(mem);
  free(owned);
  return ok;
}

/* ---- comparison ------------------------------------------------------------- */

static const char* current_case = "";

/* Compares |got| with |want| element by element (NaN matches NaN). */
static bool same_arrays(const kiln_array_t* got, const kiln_array_t* want, double tol,
                        const char* what) {
  char b1[96], b2[96];
  if (got->dtype != want->dtype || !kiln_shape_equal(&got->shape, &want->shape)) {
    CHECK_MSG(false, "%s [%s]: got %s%s, expected %s%s", current_case, what,
              kiln_dtype_name(got->dtype), kiln_shape_format(&got->shape, b1, sizeof b1),
              kiln_dtype_name(want->dtype), kiln_shape_format(&want->shape, b2, sizeof b2));
    return false;
  }
  int64_t n = kiln_array_numel(want);
  for (int64_t i = 0; i < n; ++i) {
    bool ok;
    double g = 0, w = 0;
    if (kiln_dtype_is_float(want->dtype)) {
      g = kiln_load_f64(got->dtype, got->data, (size_t)i);
      w = kiln_load_f64(want->dtype, want->data, (size_t)i);
      ok = (g != g && w != w) || g == w || fabs(g - w) <= tol * (1.0 + fabs(w));
    } else {
      int64_t gi = kiln_load_i64(got->dtype, got->data, (size_t)i);
      int64_t wi = kiln_load_i64(want->dtype, want->data, (size_t)i);
      ok = gi == wi;
      g = (double)gi;
      w = (double)wi;
    }
    if (!ok) {
      CHECK_MSG(false, "%s [%s]: element %lld is %.9g, expected %.9g", current_case, what,
                (long long)i, g, w);
      return false;
    }
  }
  ++kiln_test_checks;
  return true;
}

/* ---- the check ---------------------------------------------------------------- */

static int32_t cases_run = 0;
/* KILN_TEST_NO_BACKEND=1 skips compiling with the CPU backend (interpreter
 * only, much faster). */
static bool use_backend = true;

/* Prepares |g|, runs it with the reference executor and through the plan
 * (CPU naive + scheduled, GPU scheduled, and the CPU backend when built in)
 * on the same random inputs, and compares. Destroys |g|. */
static void check_tol(kiln_graph_t* g, const char* label, double tol) {
  current_case = label;
  kiln_status_t st = kiln_graph_prepare(g);
  if (st) {
    CHECK_MSG(false, "%s: prepare: %s", label, kiln_status_message(st));
    kiln_status_free(st);
    kiln_graph_destroy(g);
    return;
  }
  ++cases_run;
  kiln_array_t ins[8], want[8], got[8];
  memset(ins, 0, sizeof ins);
  KILN_ASSERT(g->n_inputs <= 8 && g->n_outputs <= 8);
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    const kiln_tensor_t* t = &g->tensors[g->inputs[i]];
    CHECK_OK(kiln_array_alloc(sys(), t->dtype, &t->shape, &ins[i]));
    fill_random(&ins[i]);
  }
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  st = kiln_ref_run(g, ins, &ro, want);
  if (st) {
    CHECK_MSG(false, "%s: reference: %s", label, kiln_status_message(st));
    kiln_status_free(st);
    goto done_inputs;
  }
  for (int t = 0; t < 2; ++t) {
    kiln_plan_options_t po = {t ? KILN_TARGET_CLASS_GPU : KILN_TARGET_CLASS_CPU, 4, 0, 0, 0, 0};
    kiln_plan_t* p = NULL;
    st = kiln_plan_build(g, &po, sys(), &p);
    if (st) {
      CHECK_MSG(false, "%s: plan (%s): %s", label, t ? "gpu" : "cpu", kiln_status_message(st));
      kiln_status_free(st);
      continue;
    }
    for (int32_t k = 0; k < p->n_kernels; ++k) {
      CHECK_OK(tir_verify(p->kernels[k].naive));
      CHECK_OK(tir_verify(p->kernels[k].func));
    }
    for (int naive = t ? 0 : 1; naive >= 0; --naive) {
      char what[64];
      snprintf(what, sizeof what, "%s %s", t ? "gpu" : "cpu", naive ? "naive" : "scheduled");
      if (interpret_plan(p, ins, naive, got)) {
        for (int32_t o = 0; o < g->n_outputs; ++o) same_arrays(&got[o], &want[o], tol, what);
      }
      for (int32_t o = 0; o < g->n_outputs; ++o) kiln_array_free(sys(), &got[o]);
    }
    if (t == 0 && use_backend) {
      kiln_cpu_options_t co;
      kiln_cpu_options_default(&co);
      co.threads = 2;
      kiln_cpu_exec_t* e = NULL;
      st = kiln_cpu_compile(p, &co, &e, NULL);
      if (st) {
        CHECK_MSG(false, "%s: cpu compile: %s", label, kiln_status_message(st));
        kiln_status_free(st);
      } else {
        st = kiln_cpu_run(e, ins, got, NULL, NULL);
        if (st) {
          CHECK_MSG(false, "%s: cpu run: %s", label, kiln_status_message(st));
          kiln_status_free(st);
        } else {
          for (int32_t o = 0; o < g->n_outputs; ++o) {
            same_arrays(&got[o], &want[o], tol, "cpu backend");
            kiln_array_free(sys(), &got[o]);
          }
        }
        kiln_cpu_exec_destroy(e);
      }
    }
    kiln_plan_destroy(p);
  }
  for (int32_t o = 0; o < g->n_outputs; ++o) kiln_array_free(sys(), &want[o]);
done_inputs:
  for (int32_t i = 0; i < g->n_inputs; ++i) kiln_array_free(sys(), &ins[i]);
  kiln_graph_destroy(g);
}

static void check(kiln_graph_t* g, const char* label) { check_tol(g, label, 2e-6); }

/* Expects planning |g| to fail with |code| and |needle| in the message. */
static void check_plan_err(kiln_graph_t* g, int code, const char* needle) {
  CHECK_OK(kiln_graph_prepare(g));
  kiln_plan_t* p = NULL;
  kiln_plan_options_t po = {KILN_TARGET_CLASS_CPU, 2, 0, 0, 0, 0};
  CHECK_ERR(kiln_plan_build(g, &po, sys(), &p), code, needle);
  kiln_graph_destroy(g);
}

/* ---- builders for common shapes ---------------------------------------------- */

static void unary(const char* op, kiln_dtype_t dt, kiln_shape_t s, int32_t n_attr,
                  const kiln_attr_t* attrs, int64_t opset) {
  kiln_graph_t* g = graph(opset);
  input(g, "x", dt, s);
  node(g, op, NAMES("x"), NAMES("y"), n_attr, attrs);
  char label[96];
  snprintf(label, sizeof label, "%s %s", op, kiln_dtype_name(dt));
  check_tol(g, label, dt == KILN_DTYPE_F16 ? 1e-3 : 2e-6);
}

static void binary(const char* op, kiln_dtype_t dt, kiln_shape_t sa, kiln_shape_t sb) {
  kiln_graph_t* g = graph(17);
  input(g, "a", dt, sa);
  input(g, "b", dt, sb);
  node(g, op, NAMES("a", "b"), NAMES("y"), NO_ATTRS);
  char label[160], b1[64], b2[64];
  snprintf(label, sizeof label, "%s %s %s %s", op, kiln_dtype_name(dt),
           kiln_shape_format(&sa, b1, sizeof b1), kiln_shape_format(&sb, b2, sizeof b2));
  check_tol(g, label, dt == KILN_DTYPE_F16 ? 1e-3 : 2e-6);
}

/* ======================================================================
 * Elementwise
 * ====================================================================== */

static void test_unary_float(void) {
  gen_default();
  static const char* const ops[] = {"Relu", "Sigmoid", "Tanh", "HardSwish", "Erf", "Sqrt",
                                    "Reciprocal", "Exp", "Log", "Neg", "Abs"};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; ++i) {
    gen.specials = false;
    unary(ops[i], KILN_DTYPE_F32, SHAPE(2, 3, 37), NO_ATTRS, 17);
    unary(ops[i], KILN_DTYPE_F16, SHAPE(5, 7), NO_ATTRS, 17);
    gen.specials = true;
    unary(ops[i], KILN_DTYPE_F32, SHAPE(64), NO_ATTRS, 17);
  }
  gen.specials = false;
  gen.lo = -100;
  gen.hi = 100; /* Sigmoid's tails */
  unary("Sigmoid", KILN_DTYPE_F32, SHAPE(300), NO_ATTRS, 17);
  unary("Sigmoid", KILN_DTYPE_F32, SCALAR, NO_ATTRS, 17);
}

static void test_unary_attrs(void) {
  gen_default();
  unary("LeakyRelu", KILN_DTYPE_F32, SHAPE(4, 33), NO_ATTRS, 17);
  unary("LeakyRelu", KILN_DTYPE_F32, SHAPE(4, 33), ATTRS(kiln_attr_make_float("alpha", 0.3f)), 17);
  unary("LeakyRelu", KILN_DTYPE_F16, SHAPE(9), ATTRS(kiln_attr_make_float("alpha", 0.3f)), 17);
  unary("HardSigmoid", KILN_DTYPE_F32, SHAPE(3, 20), NO_ATTRS, 17);
  unary("HardSigmoid", KILN_DTYPE_F32, SHAPE(3, 20),
        ATTRS(kiln_attr_make_float("alpha", 0.5f), kiln_attr_make_float("beta", 0.25f)), 17);
  unary("Gelu", KILN_DTYPE_F32, SHAPE(2, 50), NO_ATTRS, 20);
  unary("Gelu", KILN_DTYPE_F32, SHAPE(2, 50), ATTRS(kiln_attr_make_string("approximate", "tanh")), 20);
  unary("Gelu", KILN_DTYPE_F16, SHAPE(17), ATTRS(kiln_attr_make_string("approximate", "tanh")), 20);
}

static void test_unary_int(void) {
  gen_default();
  gen.ilo = INT64_MIN;
  gen.ihi = INT64_MAX; /* includes the most negative values: Neg/Abs wrap */
  static const kiln_dtype_t sint[] = {KILN_DTYPE_I8, KILN_DTYPE_I32, KILN_DTYPE_I64};
  for (int k = 0; k < 3; ++k) {
    unary("Relu", sint[k], SHAPE(3, 40), NO_ATTRS, 17);
    unary("Neg", sint[k], SHAPE(3, 40), NO_ATTRS, 17);
    unary("Abs", sint[k], SHAPE(3, 40), NO_ATTRS, 17);
  }
  unary("Abs", KILN_DTYPE_U8, SHAPE(50), NO_ATTRS, 17);
  unary("Not", KILN_DTYPE_BOOL, SHAPE(2, 21), NO_ATTRS, 17);
  /* Explicit extremes. */
  kiln_graph_t* g = graph(17);
  int8_t v[4] = {-128, 127, 0, -1};
  init(g, "c", KILN_DTYPE_I8, SHAPE(4), v);
  input(g, "x", KILN_DTYPE_I8, SHAPE(4));
  node(g, "Add", NAMES("x", "c"), NAMES("s"), NO_ATTRS);
  node(g, "Neg", NAMES("c"), NAMES("n"), NO_ATTRS);
  node(g, "Abs", NAMES("s"), NAMES("y"), NO_ATTRS);
  check(g, "i8 extremes");
}

static void test_identity_dropout(void) {
  gen_default();
  unary("Identity", KILN_DTYPE_F32, SHAPE(3, 4), NO_ATTRS, 17);
  unary("Identity", KILN_DTYPE_I64, SHAPE(5), NO_ATTRS, 17);
  unary("Dropout", KILN_DTYPE_F32, SHAPE(3, 4), NO_ATTRS, 13);
  unary("Dropout", KILN_DTYPE_F32, SHAPE(3, 4), ATTRS(kiln_attr_make_float("ratio", 0.3f)), 7);
  /* Mask output: bool from opset 10, the data dtype before. */
  for (int o = 0; o < 2; ++o) {
    kiln_graph_t* g = graph(o ? 13 : 7);
    input(g, "x", KILN_DTYPE_F32, SHAPE(6, 5));
    node(g, "Dropout", NAMES("x"), NAMES("y", "mask"), NO_ATTRS);
    check(g, o ? "Dropout mask bool" : "Dropout mask f32");
  }
  /* training_mode constant false, and true with ratio 0. */
  kiln_graph_t* g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(7));
  uint8_t t = 1;
  float r0 = 0.0f;
  init(g, "tm", KILN_DTYPE_BOOL, SCALAR, &t);
  init(g, "ratio", KILN_DTYPE_F32, SCALAR, &r0);
  node(g, "Dropout", NAMES("x", "ratio", "tm"), NAMES("y", "mask"), NO_ATTRS);
  check(g, "Dropout training ratio 0");
}

static void clip_case(kiln_dtype_t dt, const double* lo, const double* hi, bool runtime,
                      const char* label) {
  kiln_graph_t* g = graph(13);
  input(g, "x", dt, SHAPE(4, 19));
  const char* names[3] = {"x", "", ""};
  unsigned char buf[8];
  const double* b[2] = {lo, hi};
  static const char* const bn[2] = {"lo", "hi"};
  for (int k = 0; k < 2; ++k) {
    if (!b[k]) continue;
    names[k + 1] = bn[k];
    if (runtime) {
      input(g, bn[k], dt, SCALAR);
    } else {
      kiln_store_f64(dt, buf, 0, *b[k]);
      init(g, bn[k], dt, SCALAR, buf);
    }
  }
  int32_t n = hi ? 3 : lo ? 2 : 1;
  node(g, "Clip", n, names, NAMES("y"), NO_ATTRS);
  check_tol(g, label, dt == KILN_DTYPE_F16 ? 1e-3 : 0);
}

static void test_clip(void) {
  gen_default();
  gen.specials = true;
  double zero = 0.0, six = 6.0, m1 = -1.0, big = 1e3, ninf = -INFINITY, pinf = INFINITY;
  double nan_ = NAN;
  clip_case(KILN_DTYPE_F32, &zero, &six, false, "Clip f32 [0,6]");
  clip_case(KILN_DTYPE_F32, &m1, NULL, false, "Clip f32 min only");
  {
    kiln_graph_t* g = graph(13);
    input(g, "x", KILN_DTYPE_F32, SHAPE(33));
    init(g, "hi", KILN_DTYPE_F32, SCALAR, (const float[]){0.25f});
    node(g, "Clip", NAMES("x", "", "hi"), NAMES("y"), NO_ATTRS);
    check(g, "Clip f32 max only");
  }
  clip_case(KILN_DTYPE_F32, NULL, NULL, false, "Clip f32 no bounds");
  clip_case(KILN_DTYPE_F32, &six, &zero, false, "Clip f32 lo > hi");
  clip_case(KILN_DTYPE_F32, &ninf, &pinf, false, "Clip f32 infinite bounds");
  clip_case(KILN_DTYPE_F32, &pinf, NULL, false, "Clip f32 min +inf");
  clip_case(KILN_DTYPE_F32, &nan_, &big, false, "Clip f32 NaN min");
  clip_case(KILN_DTYPE_F16, &m1, &six, false, "Clip f16");
  clip_case(KILN_DTYPE_F32, &m1, &six, true, "Clip f32 run-time bounds");
  gen.specials = false;
  gen.ilo = -200;
  gen.ihi = 200;
  double ilo = -5, ihi = 70;
  clip_case(KILN_DTYPE_I32, &ilo, &ihi, false, "Clip i32");
  clip_case(KILN_DTYPE_I8, &ilo, &ihi, false, "Clip i8");
  clip_case(KILN_DTYPE_U8, &six, &ihi, false, "Clip u8");
  clip_case(KILN_DTYPE_I64, &ilo, NULL, true, "Clip i64 run-time min");
  /* Opset 6: attributes. */
  gen.specials = true;
  unary("Clip", KILN_DTYPE_F32, SHAPE(40), ATTRS(kiln_attr_make_float("min", -0.5f), kiln_attr_make_float("max", 0.5f)), 6);
  unary("Clip", KILN_DTYPE_F32, SHAPE(40), NO_ATTRS, 6);
  unary("Clip", KILN_DTYPE_F16, SHAPE(40), ATTRS(kiln_attr_make_float("max", 1.5f)), 6);
}

static void test_binary_float(void) {
  gen_default();
  static const char* const ops[] = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; ++i) {
    if (strcmp(ops[i], "Pow") == 0) {
      gen.lo = 0.1;
      gen.hi = 3.0;
    } else {
      gen_default();
    }
    binary(ops[i], KILN_DTYPE_F32, SHAPE(2, 3, 20), SHAPE(2, 3, 20));
    binary(ops[i], KILN_DTYPE_F32, SHAPE(2, 3, 20), SHAPE(20));
    binary(ops[i], KILN_DTYPE_F32, SHAPE(2, 1, 20), SHAPE(3, 1));
    binary(ops[i], KILN_DTYPE_F32, SCALAR, SHAPE(4, 5));
    binary(ops[i], KILN_DTYPE_F32, SHAPE(1, 3, 1, 1), SHAPE(2, 1, 5, 17));
    binary(ops[i], KILN_DTYPE_F16, SHAPE(3, 4), SHAPE(4));
  }
  /* NaN and infinities through Max/Min and arithmetic. */
  gen_default();
  gen.specials = true;
  binary("Max", KILN_DTYPE_F32, SHAPE(64), SHAPE(64));
  binary("Min", KILN_DTYPE_F32, SHAPE(64), SHAPE(64));
  binary("Max", KILN_DTYPE_F16, SHAPE(64), SHAPE(64));
  binary("Div", KILN_DTYPE_F32, SHAPE(64), SHAPE(64));
  /* Big enough for the parallel schedule (fused outer loop, guarded tail). */
  gen_default();
  binary("Add", KILN_DTYPE_F32, SHAPE(3, 130, 170), SHAPE(170));
  binary("Mul", KILN_DTYPE_F32, SHAPE(70000), SHAPE(1));
  binary("Add", KILN_DTYPE_F32, SHAPE(1, 2, 70000), SHAPE(2, 1));
}

static void test_binary_int(void) {
  gen_default();
  static const char* const ops[] = {"Add", "Sub", "Mul", "Max", "Min"};
  static const kiln_dtype_t dts[] = {KILN_DTYPE_I8, KILN_DTYPE_U8, KILN_DTYPE_I32, KILN_DTYPE_I64};
  gen.ilo = INT64_MIN;
  gen.ihi = INT64_MAX;
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; ++i)
    for (size_t k = 0; k < 4; ++k) binary(ops[i], dts[k], SHAPE(3, 17), SHAPE(17));
  gen.nonzero = true;
  for (size_t k = 0; k < 4; ++k) binary("Div", dts[k], SHAPE(3, 17), SHAPE(3, 17));
  gen.ilo = -3;
  gen.ihi = 3; /* many -1 divisors */
  binary("Div", KILN_DTYPE_I32, SHAPE(40), SHAPE(40));
  /* INT_MIN / -1 wraps. */
  kiln_graph_t* g = graph(17);
  int32_t a[3] = {INT32_MIN, 7, -7}, b[3] = {-1, -2, 2};
  init(g, "a", KILN_DTYPE_I32, SHAPE(3), a);
  init(g, "b", KILN_DTYPE_I32, SHAPE(3), b);
  input(g, "x", KILN_DTYPE_I32, SHAPE(3));
  node(g, "Div", NAMES("a", "b"), NAMES("q"), NO_ATTRS);
  node(g, "Add", NAMES("q", "x"), NAMES("y"), NO_ATTRS);
  check(g, "Div i32 INT_MIN / -1");
}

static void test_pow_mixed(void) {
  gen_default();
  gen.ilo = -4;
  gen.ihi = 9;
  gen.lo = 0.2;
  gen.hi = 2.5;
  kiln_graph_t* g;
  static const kiln_dtype_t bases[] = {KILN_DTYPE_F32, KILN_DTYPE_I32, KILN_DTYPE_I64,
                                       KILN_DTYPE_F16, KILN_DTYPE_I8};
  static const kiln_dtype_t expos[] = {KILN_DTYPE_I64, KILN_DTYPE_F32, KILN_DTYPE_I64,
                                       KILN_DTYPE_F32, KILN_DTYPE_I32};
  for (int k = 0; k < 5; ++k) {
    g = graph(15);
    input(g, "a", bases[k], SHAPE(3, 11));
    input(g, "b", expos[k], SHAPE(11));
    node(g, "Pow", NAMES("a", "b"), NAMES("y"), NO_ATTRS);
    char label[64];
    snprintf(label, sizeof label, "Pow %s ^ %s", kiln_dtype_name(bases[k]), kiln_dtype_name(expos[k]));
    check_tol(g, label, 1e-3);
  }
  /* Wrapping integer powers and negative exponents. */
  gen.ilo = -70;
  gen.ihi = 70;
  binary("Pow", KILN_DTYPE_I64, SHAPE(200), SHAPE(200));
  binary("Pow", KILN_DTYPE_I32, SHAPE(200), SHAPE(200));
}

static void test_prelu(void) {
  gen_default();
  kiln_graph_t* g = graph(16);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3, 4, 5));
  input(g, "s", KILN_DTYPE_F32, SHAPE(3, 1, 1));
  node(g, "PRelu", NAMES("x", "s"), NAMES("y"), NO_ATTRS);
  check(g, "PRelu channel slope");
  g = graph(16);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3, 4, 5));
  input(g, "s", KILN_DTYPE_F32, SHAPE(5));
  node(g, "PRelu", NAMES("x", "s"), NAMES("y"), NO_ATTRS);
  check(g, "PRelu last-dim slope");
  g = graph(6);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3, 4));
  input(g, "s", KILN_DTYPE_F32, SHAPE(3));
  node(g, "PRelu", NAMES("x", "s"), NAMES("y"), NO_ATTRS);
  check(g, "PRelu-6 channel-wise");
  g = graph(16);
  input(g, "x", KILN_DTYPE_I32, SHAPE(2, 7));
  input(g, "s", KILN_DTYPE_I32, SHAPE(7));
  node(g, "PRelu", NAMES("x", "s"), NAMES("y"), NO_ATTRS);
  check(g, "PRelu i32");
  g = graph(16);
  input(g, "x", KILN_DTYPE_F16, SHAPE(2, 7));
  input(g, "s", KILN_DTYPE_F16, SCALAR);
  node(g, "PRelu", NAMES("x", "s"), NAMES("y"), NO_ATTRS);
  check_tol(g, "PRelu f16", 1e-3);
}

static void test_variadic(void) {
  gen_default();
  for (int op = 0; op < 2; ++op) {
    const char* name = op ? "Min" : "Max";
    for (int k = 1; k <= 4; ++k) {
      kiln_graph_t* g = graph(13);
      const char* in[4] = {"a", "b", "c", "d"};
      input(g, "a", KILN_DTYPE_F32, SHAPE(3, 1, 8));
      if (k > 1) input(g, "b", KILN_DTYPE_F32, SHAPE(5, 8));
      if (k > 2) input(g, "c", KILN_DTYPE_F32, SCALAR);
      if (k > 3) input(g, "d", KILN_DTYPE_F32, SHAPE(3, 5, 1));
      node(g, name, k, in, NAMES("y"), NO_ATTRS);
      char label[64];
      snprintf(label, sizeof label, "%s of %d", name, k);
      gen.specials = k == 3;
      check(g, label);
    }
    kiln_graph_t* g = graph(13);
    input(g, "a", KILN_DTYPE_I64, SHAPE(6));
    input(g, "b", KILN_DTYPE_I64, SHAPE(6));
    input(g, "c", KILN_DTYPE_I64, SHAPE(1));
    node(g, name, NAMES("a", "b", "c"), NAMES("y"), NO_ATTRS);
    check(g, "Max/Min i64");
    g = graph(13);
    input(g, "a", KILN_DTYPE_F16, SHAPE(6));
    input(g, "b", KILN_DTYPE_F16, SHAPE(6));
    node(g, name, NAMES("a", "b", "a"), NAMES("y"), NO_ATTRS);
    check(g, "Max/Min f16 repeated input");
  }
}

static void test_compare_logic(void) {
  gen_default();
  static const char* const cmp[] = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"};
  gen.ilo = -3;
  gen.ihi = 3;
  for (int i = 0; i < 5; ++i) {
    binary(cmp[i], KILN_DTYPE_F32, SHAPE(4, 9), SHAPE(9));
    binary(cmp[i], KILN_DTYPE_I32, SHAPE(4, 9), SHAPE(4, 1));
    binary(cmp[i], KILN_DTYPE_U8, SHAPE(12), SHAPE(12));
    binary(cmp[i], KILN_DTYPE_F16, SHAPE(12), SCALAR);
  }
  gen.specials = true;
  binary("Equal", KILN_DTYPE_F32, SHAPE(64), SHAPE(64));
  binary("Equal", KILN_DTYPE_BOOL, SHAPE(3, 8), SHAPE(8));
  binary("And", KILN_DTYPE_BOOL, SHAPE(3, 8), SHAPE(8));
  binary("Or", KILN_DTYPE_BOOL, SHAPE(3, 8), SHAPE(3, 1));
  kiln_graph_t* g = graph(16);
  input(g, "c", KILN_DTYPE_BOOL, SHAPE(4, 1));
  input(g, "x", KILN_DTYPE_F32, SHAPE(4, 6));
  input(g, "y", KILN_DTYPE_F32, SHAPE(6));
  node(g, "Where", NAMES("c", "x", "y"), NAMES("out"), NO_ATTRS);
  check(g, "Where f32 broadcast");
  g = graph(16);
  input(g, "c", KILN_DTYPE_BOOL, SHAPE(10));
  input(g, "x", KILN_DTYPE_F16, SHAPE(10));
  input(g, "y", KILN_DTYPE_F16, SCALAR);
  node(g, "Where", NAMES("c", "x", "y"), NAMES("out"), NO_ATTRS);
  check(g, "Where f16");
  g = graph(16);
  input(g, "c", KILN_DTYPE_BOOL, SHAPE(2, 10));
  input(g, "x", KILN_DTYPE_I64, SHAPE(10));
  input(g, "y", KILN_DTYPE_I64, SHAPE(2, 1));
  node(g, "Where", NAMES("c", "x", "y"), NAMES("out"), NO_ATTRS);
  check(g, "Where i64");
}

static void test_cast(void) {
  static const kiln_dtype_t dts[] = {KILN_DTYPE_F32, KILN_DTYPE_F16, KILN_DTYPE_I8, KILN_DTYPE_U8,
                                     KILN_DTYPE_I32, KILN_DTYPE_I64, KILN_DTYPE_BOOL};
  for (int special = 0; special < 2; ++special) {
    gen_default();
    gen.lo = -300;
    gen.hi = 300;
    gen.specials = special;
    gen.ilo = special ? INT64_MIN : -1000;
    gen.ihi = special ? INT64_MAX : 1000;
    for (int a = 0; a < 7; ++a) {
      for (int b = 0; b < 7; ++b) {
        kiln_graph_t* g = graph(13);
        input(g, "x", dts[a], SHAPE(5, 13));
        node(g, "Cast", NAMES("x"), NAMES("y"), ATTRS(kiln_attr_make_int("to", kiln_dtype_to_onnx(dts[b]))));
        char label[64];
        snprintf(label, sizeof label, "Cast %s -> %s%s", kiln_dtype_name(dts[a]),
                 kiln_dtype_name(dts[b]), special ? " (specials)" : "");
        check_tol(g, label, 0);
      }
    }
  }
}

/* ======================================================================
 * Tensor ops
 * ====================================================================== */

static void test_aliases(void) {
  gen_default();
  kiln_graph_t* g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3, 4));
  init_i64(g, "shape", 2, (int64_t[]){6, -1});
  init_i64(g, "axes", 1, (int64_t[]){0});
  node(g, "Reshape", NAMES("x", "shape"), NAMES("r"), NO_ATTRS);
  node(g, "Unsqueeze", NAMES("r", "axes"), NAMES("u"), NO_ATTRS);
  node(g, "Squeeze", NAMES("u", "axes"), NAMES("s"), NO_ATTRS);
  node(g, "Flatten", NAMES("s"), NAMES("f"), ATTRS(kiln_attr_make_int("axis", 0)));
  node(g, "Relu", NAMES("f"), NAMES("y"), NO_ATTRS);
  check(g, "alias chain");
  /* Aliases and copies of constants (weights reshaped / transposed). */
  g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(4, 3));
  float w[12];
  for (int k = 0; k < 12; ++k) w[k] = (float)k - 5.5f;
  init_f32(g, "w", SHAPE(3, 4), w);
  init_i64(g, "shape", 2, (int64_t[]){4, 3});
  node(g, "Reshape", NAMES("w", "shape"), NAMES("wr"), NO_ATTRS);
  node(g, "Transpose", NAMES("w"), NAMES("wt"), NO_ATTRS);
  node(g, "Add", NAMES("x", "wr"), NAMES("s"), NO_ATTRS);
  node(g, "Mul", NAMES("s", "wt"), NAMES("y"), NO_ATTRS);
  check(g, "constants through Reshape and Transpose");
  /* An input that is also an output, through Identity. */
  g = graph(13);
  input(g, "x", KILN_DTYPE_I32, SHAPE(5));
  node(g, "Identity", NAMES("x"), NAMES("y"), NO_ATTRS);
  node(g, "Neg", NAMES("y"), NAMES("z"), NO_ATTRS);
  check(g, "Identity output feeding another node");
}

static void test_expand_shape_fill(void) {
  gen_default();
  kiln_graph_t* g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(3, 1));
  init_i64(g, "shape", 3, (int64_t[]){2, 1, 6});
  node(g, "Expand", NAMES("x", "shape"), NAMES("y"), NO_ATTRS);
  check(g, "Expand");
  g = graph(13);
  input(g, "x", KILN_DTYPE_I8, SHAPE(4));
  init_i64(g, "shape", 2, (int64_t[]){3, 1});
  node(g, "Expand", NAMES("x", "shape"), NAMES("y"), NO_ATTRS);
  check(g, "Expand i8");

  /* Shape and ConstantOfShape fold at load time when static, so they are
   * lowered here by calling the lowering on a graph where the input is a
   * graph input (Shape of it is still folded: the plan skips it). */
  g = graph(15);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3, 4));
  node(g, "Shape", NAMES("x"), NAMES("s"), ATTRS(kiln_attr_make_int("start", 1)));
  check(g, "Shape (folded)");

  float v = 2.5f;
  kiln_array_t t = {KILN_DTYPE_F32, kiln_shape_make(1, (int64_t[]){1}), &v, sizeof v};
  g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3));
  init_i64(g, "shape", 2, (int64_t[]){2, 3});
  node(g, "ConstantOfShape", NAMES("shape"), NAMES("c"), ATTRS(kiln_attr_make_tensor("value", &t)));
  node(g, "Add", NAMES("x", "c"), NAMES("y"), NO_ATTRS);
  check(g, "ConstantOfShape + Add");
}

static void test_transpose(void) {
  gen_default();
  static const int64_t perms[][4] = {{0, 2, 3, 1}, {3, 2, 1, 0}, {1, 0, 2, 3}, {0, 1, 2, 3}};
  for (int k = 0; k < 4; ++k) {
    kiln_graph_t* g = graph(13);
    input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3, 5, 17));
    node(g, "Transpose", NAMES("x"), NAMES("y"), ATTRS(kiln_attr_make_ints("perm", 4, perms[k])));
    check(g, "Transpose");
  }
  kiln_graph_t* g = graph(13);
  input(g, "x", KILN_DTYPE_F16, SHAPE(4, 6));
  node(g, "Transpose", NAMES("x"), NAMES("y"), NO_ATTRS);
  check(g, "Transpose f16 default perm");
  g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(64, 40, 30));
  node(g, "Transpose", NAMES("x"), NAMES("y"), ATTRS(kiln_attr_make_ints("perm", 3, (int64_t[]){2, 0, 1})));
  check(g, "Transpose big (parallel)");
}

static void test_concat_split(void) {
  gen_default();
  for (int axis = -3; axis < 3; ++axis) {
    kiln_graph_t* g = graph(13);
    int64_t sa[3] = {2, 3, 4}, sb[3] = {2, 3, 4}, sc[3] = {2, 3, 4};
    int32_t ax = axis < 0 ? axis + 3 : axis;
    sb[ax] = 1;
    sc[ax] = 5;
    input(g, "a", KILN_DTYPE_F32, kiln_shape_make(3, sa));
    input(g, "b", KILN_DTYPE_F32, kiln_shape_make(3, sb));
    input(g, "c", KILN_DTYPE_F32, kiln_shape_make(3, sc));
    node(g, "Concat", NAMES("a", "b", "c"), NAMES("y"), ATTRS(kiln_attr_make_int("axis", axis)));
    check(g, "Concat");
  }
  kiln_graph_t* g = graph(13);
  input(g, "a", KILN_DTYPE_I64, SHAPE(2));
  input(g, "b", KILN_DTYPE_I64, SHAPE(0));
  input(g, "c", KILN_DTYPE_I64, SHAPE(1));
  node(g, "Concat", NAMES("a", "b", "c", "a"), NAMES("y"), ATTRS(kiln_attr_make_int("axis", 0)));
  check(g, "Concat with empty and repeated input");

  g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 7, 3));
  init_i64(g, "split", 3, (int64_t[]){2, 4, 1});
  node(g, "Split", NAMES("x", "split"), NAMES("p", "q", "r"), ATTRS(kiln_attr_make_int("axis", 1)));
  check(g, "Split sizes input");
  g = graph(11);
  input(g, "x", KILN_DTYPE_F32, SHAPE(6, 2));
  node(g, "Split", NAMES("x"), NAMES("p", "q", "r"), NO_ATTRS);
  check(g, "Split-11 equal");
  g = graph(11);
  input(g, "x", KILN_DTYPE_F32, SHAPE(6, 5));
  node(g, "Split", NAMES("x"), NAMES("p", "q"), ATTRS(kiln_attr_make_int("axis", -1), kiln_attr_make_ints("split", 2, (int64_t[]){1, 4})));
  check(g, "Split-11 attribute");
  g = graph(18);
  input(g, "x", KILN_DTYPE_U8, SHAPE(7, 2));
  node(g, "Split", NAMES("x"), NAMES("p", "q", "r"), ATTRS(kiln_attr_make_int("num_outputs", 3)));
  check(g, "Split-18 uneven");
}

static void slice_case(kiln_shape_t xs, int32_t n, const int64_t* starts, const int64_t* ends,
                       const int64_t* axes, const int64_t* steps, const char* label) {
  kiln_graph_t* g = graph(13);
  input(g, "x", KILN_DTYPE_F32, xs);
  init_i64(g, "starts", n, starts);
  init_i64(g, "ends", n, ends);
  const char* in[5] = {"x", "starts", "ends", "", ""};
  int32_t n_in = 3;
  if (axes) {
    init_i64(g, "axes", n, axes);
    in[3] = "axes";
    n_in = 4;
  }
  if (steps) {
    init_i64(g, "steps", n, steps);
    in[4] = "steps";
    n_in = 5;
  }
  node(g, "Slice", n_in, in, NAMES("y"), NO_ATTRS);
  check(g, label);
}

static void test_slice(void) {
  gen_default();
  slice_case(SHAPE(5, 6, 7), 2, (int64_t[]){1, 2}, (int64_t[]){4, 100}, NULL, NULL, "Slice basic");
  slice_case(SHAPE(5, 6, 7), 2, (int64_t[]){-1, 0}, (int64_t[]){-100, 7}, (int64_t[]){0, 2},
             (int64_t[]){-2, 3}, "Slice negative steps");
  slice_case(SHAPE(5, 6, 7), 1, (int64_t[]){INT64_MAX}, (int64_t[]){INT64_MIN}, (int64_t[]){-1},
             (int64_t[]){-1}, "Slice reverse all");
  slice_case(SHAPE(5, 6, 7), 1, (int64_t[]){3}, (int64_t[]){3}, (int64_t[]){1}, NULL, "Slice empty");
  slice_case(SHAPE(5, 6), 1, (int64_t[]){2}, (int64_t[]){3}, (int64_t[]){0}, (int64_t[]){INT64_MAX},
             "Slice huge step");
  /* Big, strided inner dim: parallel over chunks of the inner loop. */
  slice_case(SHAPE(1, 140001), 1, (int64_t[]){1}, (int64_t[]){INT64_MAX}, (int64_t[]){1},
             (int64_t[]){2}, "Slice big strided");
  slice_case(SHAPE(1, 140008), 1, (int64_t[]){1}, (int64_t[]){INT64_MAX}, (int64_t[]){1},
             (int64_t[]){2}, "Slice big strided, 70004 wide");
  slice_case(SHAPE(1, 140003), 1, (int64_t[]){1}, (int64_t[]){INT64_MAX}, (int64_t[]){1},
             (int64_t[]){2}, "Slice big strided, prime extent");
  slice_case(SHAPE(2, 3, 80), 1, (int64_t[]){3}, (int64_t[]){-2}, (int64_t[]){2}, NULL,
             "Slice inner offset (75 wide)");
  kiln_graph_t* g = graph(9);
  input(g, "x", KILN_DTYPE_I32, SHAPE(4, 9));
  node(g, "Slice", NAMES("x"), NAMES("y"),
       ATTRS(kiln_attr_make_ints("starts", 1, (int64_t[]){1}), kiln_attr_make_ints("ends", 1, (int64_t[]){-1}),
             kiln_attr_make_ints("axes", 1, (int64_t[]){1})));
  check(g, "Slice-9 attributes");
}

static void test_gather(void) {
  gen_default();
  for (int axis = -1; axis < 3; ++axis) {
    kiln_graph_t* g = graph(13);
    input(g, "x", KILN_DTYPE_F32, SHAPE(4, 5, 6));
    int32_t ax = axis < 0 ? axis + 3 : axis;
    int64_t n = ax == 0 ? 4 : ax == 1 ? 5 : 6;
    int64_t idx[6] = {0, n - 1, -1, -n, 1, 2};
    init(g, "i", KILN_DTYPE_I64, SHAPE(2, 3), idx);
    node(g, "Gather", NAMES("x", "i"), NAMES("y"), ATTRS(kiln_attr_make_int("axis", axis)));
    check(g, "Gather const indices");
  }
  /* Run-time indices (in range, both signs), i32 and i64, scalar index. */
  gen.ilo = -5;
  gen.ihi = 4;
  kiln_graph_t* g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(5, 8));
  input(g, "i", KILN_DTYPE_I32, SHAPE(7));
  node(g, "Gather", NAMES("x", "i"), NAMES("y"), NO_ATTRS);
  check(g, "Gather run-time i32 indices");
  g = graph(13);
  input(g, "x", KILN_DTYPE_I64, SHAPE(5, 8));
  input(g, "i", KILN_DTYPE_I64, SCALAR);
  node(g, "Gather", NAMES("x", "i"), NAMES("y"), NO_ATTRS);
  check(g, "Gather scalar index");
  g = graph(13);
  input(g, "x", KILN_DTYPE_F16, SHAPE(3, 5));
  input(g, "i", KILN_DTYPE_I64, SHAPE(2, 2));
  node(g, "Gather", NAMES("x", "i"), NAMES("y"), ATTRS(kiln_attr_make_int("axis", 1)));
  check(g, "Gather f16 axis 1");
}

/* Out-of-range run-time indices: the reference fails, the lowered kernel
 * clamps and stays in bounds (the interpreter bounds-checks every load). */
static void test_gather_out_of_range(void) {
  kiln_graph_t* g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(3, 2));
  input(g, "i", KILN_DTYPE_I64, SHAPE(4));
  node(g, "Gather", NAMES("x", "i"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_prepare(g));
  kiln_plan_t* p = NULL;
  kiln_plan_options_t po = {KILN_TARGET_CLASS_CPU, 2, 0, 0, 0, 0};
  CHECK_OK(kiln_plan_build(g, &po, sys(), &p));
  if (p) {
    float xd[6] = {1, 2, 3, 4, 5, 6};
    int64_t id[4] = {7, -9, 1, -1};
    kiln_array_t in[2] = {{KILN_DTYPE_F32, SHAPE(3, 2), xd, sizeof xd},
                          {KILN_DTYPE_I64, SHAPE(4), id, sizeof id}};
    kiln_array_t out[1];
    kiln_ref_options_t ro;
    kiln_ref_options_default(&ro);
    CHECK_ERR(kiln_ref_run(g, in, &ro, out), KILN_OUT_OF_RANGE, "out of range");
    for (int naive = 0; naive < 2; ++naive) {
      if (interpret_plan(p, in, naive, out)) {
        const float* y = out[0].data;
        const float want[8] = {5, 6, 1, 2, 3, 4, 5, 6}; /* 7 -> 2, -9 -> 0 */
        for (int k = 0; k < 8; ++k) CHECK(y[k] == want[k]);
      }
      kiln_array_free(sys(), &out[0]);
    }
    kiln_plan_destroy(p);
  }
  kiln_graph_destroy(g);
}

static void pad_case(const char* mode, kiln_dtype_t dt, kiln_shape_t xs, int32_t n,
                     const int64_t* pads, const int64_t* axes, int32_t n_axes, bool cv_runtime,
                     const char* label) {
  kiln_graph_t* g = graph(n_axes ? 18 : 13);
  input(g, "x", dt, xs);
  init_i64(g, "pads", n, pads);
  const char* in[4] = {"x", "pads", "", ""};
  int32_t n_in = 2;
  if (strcmp(mode, "constant") == 0) {
    if (cv_runtime) {
      input(g, "cv", dt, SCALAR);
    } else {
      unsigned char b[8];
      kiln_store_f64(dt, b, 0, 1.5);
      init(g, "cv", dt, SCALAR, b);
    }
    in[2] = "cv";
    n_in = 3;
  }
  if (n_axes) {
    init_i64(g, "axes", n_axes, axes);
    in[3] = "axes";
    n_in = 4;
  }
  node(g, "Pad", n_in, in, NAMES("y"), ATTRS(kiln_attr_make_string("mode", mode)));
  check(g, label);
}

static void test_pad(void) {
  gen_default();
  static const char* const modes[] = {"constant", "reflect", "edge", "wrap"};
  for (int m = 0; m < 4; ++m) {
    char label[64];
    snprintf(label, sizeof label, "Pad %s", modes[m]);
    pad_case(modes[m], KILN_DTYPE_F32, SHAPE(2, 3, 4, 5), 8, (int64_t[]){0, 0, 1, 2, 0, 0, 3, 1},
             NULL, 0, false, label);
    pad_case(modes[m], KILN_DTYPE_F32, SHAPE(3, 4), 4, (int64_t[]){5, 7, 6, 9}, NULL, 0, false,
             label); /* pads wider than the axis */
    pad_case(modes[m], KILN_DTYPE_I32, SHAPE(5, 6), 4, (int64_t[]){-1, 2, 1, -2}, NULL, 0, false,
             label); /* crop and pad */
    pad_case(modes[m], KILN_DTYPE_F32, SHAPE(2, 4, 5), 4, (int64_t[]){1, -1, 2, 3},
             (int64_t[]){1, -1}, 2, false, label);
    pad_case(modes[m], KILN_DTYPE_F16, SHAPE(1, 6), 4, (int64_t[]){0, 2, 0, 3}, NULL, 0, false,
             label);
    pad_case(modes[m], KILN_DTYPE_F32, SHAPE(3, 1), 4, (int64_t[]){1, 2, 1, 3}, NULL, 0, false,
             label); /* one-element axis */
  }
  pad_case("constant", KILN_DTYPE_F32, SHAPE(3, 4), 4, (int64_t[]){1, 1, 1, 1}, NULL, 0, true,
           "Pad run-time constant_value");
  pad_case("constant", KILN_DTYPE_F32, SHAPE(3, 4), 4, (int64_t[]){0, -4, 1, 1}, NULL, 0, false,
           "Pad crop everything then pad");
  /* Opset 2 attributes, opset 10 with value. */
  kiln_graph_t* g = graph(2);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3));
  node(g, "Pad", NAMES("x"), NAMES("y"),
       ATTRS(kiln_attr_make_ints("pads", 4, (int64_t[]){1, 0, 0, 2}), kiln_attr_make_float("value", -2.0f)));
  check(g, "Pad-2 attributes");
  g = graph(10);
  input(g, "x", KILN_DTYPE_F32, SHAPE(2, 3));
  node(g, "Pad", NAMES("x"), NAMES("y"),
       ATTRS(kiln_attr_make_ints("pads", 4, (int64_t[]){1, 1, 1, 1}), kiln_attr_make_string("mode", "reflect")));
  check(g, "Pad-10 reflect");
}

static void resize_case(int64_t opset, kiln_shape_t xs, int32_t n, const float* scales,
                        const int64_t* sizes, const float* roi, int32_t n_attr,
                        const kiln_attr_t* attrs, const char* label) {
  kiln_graph_t* g = graph(opset);
  input(g, "x", KILN_DTYPE_F32, xs);
  if (opset < 11) {
    init_f32(g, "scales", kiln_shape_make(1, (int64_t[]){n}), scales);
    node(g, "Resize", NAMES("x", "scales"), NAMES("y"), n_attr, attrs);
  } else {
    const char* in[4] = {"x", "", "", ""};
    if (roi) {
      init_f32(g, "roi", kiln_shape_make(1, (int64_t[]){2 * n}), roi);
      in[1] = "roi";
    }
    if (scales) {
      init_f32(g, "scales", kiln_shape_make(1, (int64_t[]){n}), scales);
      in[2] = "scales";
    } else {
      init_i64(g, "sizes", n, sizes);
      in[3] = "sizes";
    }
    node(g, "Resize", scales ? 3 : 4, in, NAMES("y"), n_attr, attrs);
  }
  check_tol(g, label, 1e-5);
}

static void test_resize(void) {
  gen_default();
  static const char* const coords[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                                       "align_corners", "asymmetric", "tf_half_pixel_for_nn"};
  static const char* const nearest[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  const float up2[4] = {1, 1, 2, 2}, odd[4] = {1, 1, 1.7f, 0.6f}, up3[4] = {1, 1, 3, 3};
  for (int c = 0; c < 6; ++c) {
    for (int m = 0; m < 4; ++m) {
      char label[128];
      snprintf(label, sizeof label, "Resize nearest %s %s", coords[c], nearest[m]);
      resize_case(13, SHAPE(1, 2, 4, 5), 4, up2, NULL, NULL,
                  ATTRS(kiln_attr_make_string("coordinate_transformation_mode", coords[c]),
                        kiln_attr_make_string("nearest_mode", nearest[m])),
                  label);
      resize_case(13, SHAPE(1, 2, 4, 5), 4, odd, NULL, NULL,
                  ATTRS(kiln_attr_make_string("coordinate_transformation_mode", coords[c]),
                        kiln_attr_make_string("nearest_mode", nearest[m])),
                  label);
    }
    if (c == 5) continue; /* tf_half_pixel_for_nn is for nearest only */
    char label[128];
    snprintf(label, sizeof label, "Resize linear %s", coords[c]);
    resize_case(13, SHAPE(1, 2, 4, 5), 4, up2, NULL, NULL,
                ATTRS(kiln_attr_make_string("mode", "linear"), kiln_attr_make_string("coordinate_transformation_mode", coords[c])),
                label);
    resize_case(13, SHAPE(2, 3, 5), 3, (const float[]){1, 0.5f, 2.6f}, NULL, NULL,
                ATTRS(kiln_attr_make_string("mode", "linear"), kiln_attr_make_string("coordinate_transformation_mode", coords[c])),
                label);
    resize_case(13, SHAPE(1, 1, 3, 4), 4, NULL, (int64_t[]){1, 1, 7, 1}, NULL,
                ATTRS(kiln_attr_make_string("mode", "linear"), kiln_attr_make_string("coordinate_transformation_mode", coords[c])),
                label);
  }
  resize_case(13, SHAPE(1, 3, 8, 8), 4, up3, NULL, NULL, NO_ATTRS, "Resize nearest x3 default");
  resize_case(10, SHAPE(1, 1, 3, 3), 4, up2, NULL, NULL, NO_ATTRS, "Resize-10 nearest");
  resize_case(10, SHAPE(1, 1, 3, 3), 4, (const float[]){1, 1, 0.6f, 2.5f}, NULL, NULL, NO_ATTRS,
              "Resize-10 nearest odd");
  resize_case(10, SHAPE(1, 1, 3, 3), 4, up2, NULL, NULL, ATTRS(kiln_attr_make_string("mode", "linear")),
              "Resize-10 linear");
  const float roi[8] = {0, 0, 0.2f, 0.1f, 1, 1, 0.9f, 1.3f};
  resize_case(13, SHAPE(1, 1, 4, 5), 4, NULL, (int64_t[]){1, 1, 3, 6}, roi,
              ATTRS(kiln_attr_make_string("coordinate_transformation_mode", "tf_crop_and_resize"),
                    kiln_attr_make_float("extrapolation_value", -7.0f)),
              "Resize crop nearest");
  resize_case(13, SHAPE(1, 1, 4, 5), 4, NULL, (int64_t[]){1, 1, 3, 6}, roi,
              ATTRS(kiln_attr_make_string("mode", "linear"),
                    kiln_attr_make_string("coordinate_transformation_mode", "tf_crop_and_resize")),
              "Resize crop linear");
  resize_case(18, SHAPE(1, 1, 4, 6), 2, NULL, (int64_t[]){8, 9}, NULL,
              ATTRS(kiln_attr_make_ints("axes", 2, (int64_t[]){2, 3}),
                    kiln_attr_make_string("keep_aspect_ratio_policy", "not_larger")),
              "Resize-18 axes not_larger");
  resize_case(18, SHAPE(1, 1, 4, 6), 2, NULL, (int64_t[]){8, 9}, NULL,
              ATTRS(kiln_attr_make_ints("axes", 2, (int64_t[]){2, 3}), kiln_attr_make_string("mode", "linear"),
                    kiln_attr_make_string("keep_aspect_ratio_policy", "not_smaller")),
              "Resize-18 axes not_smaller linear");
  /* Rank 5, every axis interpolating (32 corners per element). */
  resize_case(13, kiln_shape_make(5, (int64_t[]){2, 3, 2, 3, 2}), 5,
              (const float[]){1.5f, 1.5f, 1.5f, 1.5f, 1.5f}, NULL, NULL,
              ATTRS(kiln_attr_make_string("mode", "linear")), "Resize rank-5 linear");
  /* Integer data, nearest, and f16 linear. */
  kiln_graph_t* g = graph(13);
  input(g, "x", KILN_DTYPE_U8, SHAPE(1, 2, 3, 3));
  init_f32(g, "scales", SHAPE(4), up2);
  node(g, "Resize", NAMES("x", "", "scales"), NAMES("y"), NO_ATTRS);
  check(g, "Resize u8 nearest");
  g = graph(13);
  input(g, "x", KILN_DTYPE_F16, SHAPE(1, 2, 3, 3));
  init_f32(g, "scales", SHAPE(4), up2);
  node(g, "Resize", NAMES("x", "", "scales"), NAMES("y"), ATTRS(kiln_attr_make_string("mode", "linear")));
  check_tol(g, "Resize f16 linear", 1e-3);
}

/* ---- errors --------------------------------------------------------------------- */

static void test_errors(void) {
  /* Pad whose pads are a graph input: the output shape depends on values
   * known only at run time, so the plan refuses it as unsupported, naming
   * the node (before the lowering could). */
  kiln_graph_t* g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(3));
  input(g, "pads", KILN_DTYPE_I64, SHAPE(2));
  node(g, "Pad", NAMES("x", "pads"), NAMES("y"), NO_ATTRS);
  check_plan_err(g, KILN_UNSUPPORTED, "depends on input values known only at run time");
  /* Resize antialias with mode nearest is rejected at load. */
  g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(1, 1, 2, 2));
  init_f32(g, "scales", SHAPE(4), (const float[]){1, 1, 2, 2});
  CHECK_OK(kiln_graph_add_node(g, "Resize", "r", NAMES("x", "", "scales"), NAMES("y"),
                               ATTRS(kiln_attr_make_int("antialias", 1)), NULL));
  CHECK_OK(kiln_graph_add_output(g, "y"));
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "antialias");
  kiln_graph_destroy(g);
}

/* Calls the lowering directly with a run-time 'pads' input on a static
 * output, which inference cannot produce but the lowering must reject. */
static void test_runtime_semantic_inputs(void) {
  kiln_graph_t* g = graph(13);
  input(g, "x", KILN_DTYPE_F32, SHAPE(3));
  input(g, "pads", KILN_DTYPE_I64, SHAPE(2));
  input(g, "starts", KILN_DTYPE_I64, SHAPE(1));
  node(g, "Relu", NAMES("x"), NAMES("y"), NO_ATTRS);
  CHECK_OK(kiln_graph_prepare(g));
  kiln_plan_options_t po = {KILN_TARGET_CLASS_CPU, 2, 0, 0, 0, 0};
  kiln_plan_t* p = NULL;
  CHECK_OK(kiln_plan_build(g, &po, sys(), &p));
  if (p) {
    /* Fake a Pad node over the plan's buffers. */
    kiln_node_t n;
    memset(&n, 0, sizeof n);
    n.name = "pad";
    n.op_type = "Pad";
    n.domain = "";
    const tir_buffer_t* in[2] = {p->buffers[p->inputs[0]].buf, p->buffers[p->inputs[1]].buf};
    const kiln_tensor_t* in_t[2] = {&g->tensors[g->inputs[0]], &g->tensors[g->inputs[1]]};
    const tir_buffer_t* out[1] = {p->buffers[p->outputs[0]].buf};
    const kiln_tensor_t* out_t[1] = {&g->tensors[g->outputs[0]]};
    kiln_lower_ctx_t ctx = {&p->tir, g, &n, 0, 13, KILN_TARGET_CLASS_CPU, 2,
                            2, in, in_t, 1, out, out_t, p, 0, NULL, NULL, 0};
    kiln_lower_fn fn = kiln_lower_lookup("Pad");
    CHECK(fn != NULL);
    if (fn) CHECK_ERR(fn(&ctx), KILN_UNSUPPORTED, "'pads' is computed at run time");
    n.op_type = "Slice";
    const tir_buffer_t* sin[3] = {in[0], p->buffers[p->inputs[2]].buf, p->buffers[p->inputs[2]].buf};
    const kiln_tensor_t* sin_t[3] = {in_t[0], &g->tensors[g->inputs[2]], &g->tensors[g->inputs[2]]};
    ctx.n_in = 3;
    ctx.in = sin;
    ctx.in_tensor = sin_t;
    fn = kiln_lower_lookup("Slice");
    if (fn) CHECK_ERR(fn(&ctx), KILN_UNSUPPORTED, "'starts' is computed at run time");
    n.op_type = "Resize";
    const tir_buffer_t* rin[3] = {in[0], NULL, in[0]};
    const kiln_tensor_t* rin_t[3] = {in_t[0], NULL, in_t[0]};
    ctx.in = rin;
    ctx.in_tensor = rin_t;
    fn = kiln_lower_lookup("Resize");
    if (fn) CHECK_ERR(fn(&ctx), KILN_UNSUPPORTED, "'scales' computed at run time");
    kiln_plan_destroy(p);
  }
  kiln_graph_destroy(g);
}

/* ---- the math ops (lowering/lower_elementwise_math.c) -------------------------- */

/* Every new intrinsic and activation on f32 (plain and with NaN/inf/huge
 * values) and on f16 (widened, computed, rounded once), each over the input
 * range where it is defined. */
static void test_math_unary(void) {
  static const struct {
    const char* op;
    double lo, hi;
  } ops[] = {{"Elu", -4, 4},      {"Selu", -4, 4},     {"Celu", -4, 4},
             {"Softplus", -30, 30}, {"Softsign", -9, 9}, {"ThresholdedRelu", -3, 3},
             {"Shrink", -2, 2},   {"Mish", -20, 20},   {"Sign", -2, 2},
             {"Round", -6, 6},    {"Floor", -6, 6},    {"Ceil", -6, 6},
             {"Sin", -7, 7},      {"Cos", -7, 7},      {"Tan", -1.5, 1.5},
             {"Asin", -1, 1},     {"Acos", -1, 1},     {"Atan", -9, 9},
             {"Sinh", -5, 5},     {"Cosh", -5, 5},     {"Asinh", -9, 9},
             {"Acosh", 1, 9},     {"Atanh", -0.99, 0.99}, {"IsNaN", -1, 1},
             {"IsInf", -1, 1}};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; ++i) {
    gen_default();
    gen.lo = ops[i].lo;
    gen.hi = ops[i].hi;
    unary(ops[i].op, KILN_DTYPE_F32, SHAPE(2, 3, 37), NO_ATTRS, 18);
    unary(ops[i].op, KILN_DTYPE_F16, SHAPE(5, 7), NO_ATTRS, 18);
    gen.specials = true;
    unary(ops[i].op, KILN_DTYPE_F32, SHAPE(64), NO_ATTRS, 18);
    unary(ops[i].op, KILN_DTYPE_F16, SHAPE(64), NO_ATTRS, 18);
  }
  /* Round: halves go to even. */
  kiln_graph_t* g = graph(18);
  init_f32(g, "c", SHAPE(6), (const float[]){0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f});
  input(g, "x", KILN_DTYPE_F32, SHAPE(6));
  node(g, "Add", NAMES("x", "c"), NAMES("s"), NO_ATTRS);
  node(g, "Round", NAMES("c"), NAMES("y"), NO_ATTRS);
  check(g, "Round halves");
}

static void test_math_attrs(void) {
  gen_default();
  gen.specials = true;
  unary("Elu", KILN_DTYPE_F32, SHAPE(40), ATTRS(kiln_attr_make_float("alpha", 0.3f)), 18);
  unary("Selu", KILN_DTYPE_F16, SHAPE(40),
        ATTRS(kiln_attr_make_float("alpha", 2.0f), kiln_attr_make_float("gamma", 0.5f)), 18);
  unary("Celu", KILN_DTYPE_F32, SHAPE(40), ATTRS(kiln_attr_make_float("alpha", 2.5f)), 18);
  unary("ThresholdedRelu", KILN_DTYPE_F32, SHAPE(40), ATTRS(kiln_attr_make_float("alpha", -0.5f)), 18);
  unary("Shrink", KILN_DTYPE_F16, SHAPE(40),
        ATTRS(kiln_attr_make_float("lambd", 1.0f), kiln_attr_make_float("bias", 0.25f)), 18);
  for (int k = 0; k < 4; ++k) {
    unary("IsInf", k < 2 ? KILN_DTYPE_F32 : KILN_DTYPE_F16, SHAPE(64),
          ATTRS(kiln_attr_make_int("detect_positive", k & 1), kiln_attr_make_int("detect_negative", k >> 1)),
          18);
  }
  /* Celu divides by alpha: 0 is refused at load. */
  kiln_graph_t* g = graph(18);
  input(g, "x", KILN_DTYPE_F32, SHAPE(3));
  node(g, "Celu", NAMES("x"), NAMES("y"), ATTRS(kiln_attr_make_float("alpha", 0.0f)));
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "'alpha' must not be 0");
  kiln_graph_destroy(g);
}

static void test_math_int(void) {
  gen_default();
  gen.ilo = INT64_MIN;
  gen.ihi = INT64_MAX;
  static const kiln_dtype_t dts[] = {KILN_DTYPE_I8, KILN_DTYPE_U8, KILN_DTYPE_I32, KILN_DTYPE_I64};
  for (int k = 0; k < 4; ++k) unary("Sign", dts[k], SHAPE(3, 17), NO_ATTRS, 18);
  binary("Xor", KILN_DTYPE_BOOL, SHAPE(3, 17), SHAPE(17));
  /* BitShift on u8: shifts past the width give 0. */
  for (int left = 0; left < 2; ++left) {
    gen_default();
    gen.ilo = 0;
    gen.ihi = 255;
    kiln_graph_t* g = graph(18);
    input(g, "x", KILN_DTYPE_U8, SHAPE(4, 30));
    input(g, "s", KILN_DTYPE_U8, SHAPE(30));
    node(g, "BitShift", NAMES("x", "s"), NAMES("y"),
         ATTRS(kiln_attr_make_string("direction", left ? "LEFT" : "RIGHT")));
    gen.ihi = 10;
    check(g, left ? "BitShift left" : "BitShift right"); /* both inputs in 0..10: many shifts >= 8 */
  }
  kiln_graph_t* g = graph(18);
  input(g, "x", KILN_DTYPE_U8, SHAPE(4));
  input(g, "s", KILN_DTYPE_U8, SHAPE(4));
  node(g, "BitShift", NAMES("x", "s"), NAMES("y"), ATTRS(kiln_attr_make_string("direction", "UP")));
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "'LEFT' or 'RIGHT'");
  kiln_graph_destroy(g);
}

/* BitwiseAnd / Or / Xor (broadcast) and BitwiseNot on every integer dtype over
 * its full range (negative values and the top bit included); floats are
 * refused by name. */
static void test_bitwise(void) {
  static const kiln_dtype_t dts[] = {KILN_DTYPE_I8,  KILN_DTYPE_U8,  KILN_DTYPE_I16, KILN_DTYPE_U16,
                                     KILN_DTYPE_I32, KILN_DTYPE_U32, KILN_DTYPE_I64, KILN_DTYPE_U64};
  static const char* const ops[] = {"BitwiseAnd", "BitwiseOr", "BitwiseXor"};
  for (int k = 0; k < 8; ++k) {
    gen_default();
    gen.ilo = INT64_MIN;
    gen.ihi = INT64_MAX;
    for (int o = 0; o < 3; ++o) {
      kiln_graph_t* g = graph(18);
      input(g, "a", dts[k], SHAPE(3, 17));
      input(g, "b", dts[k], SHAPE(17));
      node(g, ops[o], NAMES("a", "b"), NAMES("y"), NO_ATTRS);
      char label[96];
      snprintf(label, sizeof label, "%s %s", ops[o], kiln_dtype_name(dts[k]));
      check(g, label);
    }
    unary("BitwiseNot", dts[k], SHAPE(3, 17), NO_ATTRS, 18);
  }
  kiln_graph_t* g = graph(18);
  input(g, "a", KILN_DTYPE_F32, SHAPE(4));
  input(g, "b", KILN_DTYPE_F32, SHAPE(4));
  node(g, "BitwiseOr", NAMES("a", "b"), NAMES("y"), NO_ATTRS);
  CHECK_ERR(kiln_graph_prepare(g), KILN_UNSUPPORTED, "BitwiseOr: input 'A' has dtype f32");
  kiln_graph_destroy(g);
}

/* Mod: floor (fmod 0) and truncated (fmod 1) remainders on every integer
 * dtype, with extremes (INT_MIN % -1), and C fmod on floats. */
static void test_mod(void) {
  static const kiln_dtype_t dts[] = {KILN_DTYPE_I8, KILN_DTYPE_U8, KILN_DTYPE_I32, KILN_DTYPE_I64};
  for (int fm = 0; fm < 2; ++fm) {
    for (int k = 0; k < 4; ++k) {
      for (int wide = 0; wide < 2; ++wide) {
        gen_default();
        gen.nonzero = true;
        gen.ilo = wide ? INT64_MIN : -9;
        gen.ihi = wide ? INT64_MAX : 9;
        kiln_graph_t* g = graph(18);
        input(g, "a", dts[k], SHAPE(3, 17));
        input(g, "b", dts[k], SHAPE(17));
        node(g, "Mod", NAMES("a", "b"), NAMES("y"), ATTRS(kiln_attr_make_int("fmod", fm)));
        char label[64];
        snprintf(label, sizeof label, "Mod fmod=%d %s%s", fm, kiln_dtype_name(dts[k]), wide ? " wide" : "");
        check(g, label);
      }
    }
    kiln_graph_t* g = graph(18);
    int32_t a[4] = {INT32_MIN, 7, -7, INT32_MAX}, b[4] = {-1, -2, 2, -3};
    init(g, "a", KILN_DTYPE_I32, SHAPE(4), a);
    init(g, "b", KILN_DTYPE_I32, SHAPE(4), b);
    input(g, "x", KILN_DTYPE_I32, SHAPE(4));
    node(g, "Mod", NAMES("x", "b"), NAMES("r"), ATTRS(kiln_attr_make_int("fmod", fm)));
    node(g, "Mod", NAMES("a", "b"), NAMES("k"), ATTRS(kiln_attr_make_int("fmod", fm)));
    check(g, "Mod i32 extremes");
  }
  gen_default();
  gen.lo = -20;
  gen.hi = 20;
  for (int h = 0; h < 2; ++h) {
    kiln_graph_t* g = graph(18);
    kiln_dtype_t t = h ? KILN_DTYPE_F16 : KILN_DTYPE_F32;
    input(g, "a", t, SHAPE(2, 33));
    input(g, "b", t, SHAPE(33));
    node(g, "Mod", NAMES("a", "b"), NAMES("y"), ATTRS(kiln_attr_make_int("fmod", 1)));
    check_tol(g, h ? "Mod f16" : "Mod f32", h ? 1e-3 : 2e-6);
  }
  kiln_graph_t* g = graph(18);
  input(g, "a", KILN_DTYPE_F32, SHAPE(3));
  input(g, "b", KILN_DTYPE_F32, SHAPE(3));
  node(g, "Mod", NAMES("a", "b"), NAMES("y"), NO_ATTRS);
  CHECK_ERR(kiln_graph_prepare(g), KILN_INVALID_ARGUMENT, "need attribute fmod = 1");
  kiln_graph_destroy(g);
}

/* Sum and Mean broadcast like Max/Min; f16 rounds after each addition. */
static void test_sum_mean(void) {
  gen_default();
  for (int op = 0; op < 2; ++op) {
    const char* name = op ? "Mean" : "Sum";
    for (int k = 1; k <= 4; ++k) {
      for (int h = 0; h < 2; ++h) {
        kiln_dtype_t t = h ? KILN_DTYPE_F16 : KILN_DTYPE_F32;
        kiln_graph_t* g = graph(13);
        const char* in[4] = {"a", "b", "c", "d"};
        input(g, "a", t, SHAPE(3, 1, 8));
        if (k > 1) input(g, "b", t, SHAPE(5, 8));
        if (k > 2) input(g, "c", t, SCALAR);
        if (k > 3) input(g, "d", t, SHAPE(3, 5, 1));
        node(g, name, k, in, NAMES("y"), NO_ATTRS);
        char label[64];
        snprintf(label, sizeof label, "%s of %d %s", name, k, kiln_dtype_name(t));
        gen.specials = k == 3;
        check_tol(g, label, h ? 1e-3 : 2e-6);
      }
    }
  }
}

/* CastLike takes its dtype from the second input, whose values are unused;
 * a constant input folds, or (same dtype) is copied, never aliased. */
static void test_castlike(void) {
  gen_default();
  kiln_graph_t* g = graph(19);
  input(g, "x", KILN_DTYPE_F32, SHAPE(4, 9));
  input(g, "like", KILN_DTYPE_I32, SHAPE(1));
  node(g, "CastLike", NAMES("x", "like"), NAMES("y"), NO_ATTRS);
  check(g, "CastLike f32 -> i32");
  g = graph(19);
  init_f32(g, "c", SHAPE(3), (const float[]){1.5f, -2.0f, 3.25f});
  input(g, "x", KILN_DTYPE_F32, SHAPE(3));
  node(g, "CastLike", NAMES("c", "x"), NAMES("k"), NO_ATTRS);
  node(g, "Mul", NAMES("x", "k"), NAMES("y"), NO_ATTRS);
  check(g, "CastLike of a constant");
}

/* Every op of the elementwise and tensor families has a lowering. */
static void test_coverage(void) {
  static const kiln_op_family_t* const fams[] = {&kiln_ops_elementwise, &kiln_ops_tensor};
  for (int f = 0; f < 2; ++f)
    for (size_t i = 0; i < fams[f]->count; ++i)
      CHECK_MSG(kiln_lower_lookup(fams[f]->ops[i].op_type) != NULL, "no lowering for %s",
                fams[f]->ops[i].op_type);
}

int main(void) {
  const char* nb = getenv("KILN_TEST_NO_BACKEND");
  use_backend = !(nb && nb[0] == '1');
  RUN(test_coverage);
  RUN(test_unary_float);
  RUN(test_unary_attrs);
  RUN(test_unary_int);
  RUN(test_identity_dropout);
  RUN(test_clip);
  RUN(test_binary_float);
  RUN(test_binary_int);
  RUN(test_pow_mixed);
  RUN(test_prelu);
  RUN(test_variadic);
  RUN(test_compare_logic);
  RUN(test_cast);
  RUN(test_math_unary);
  RUN(test_math_attrs);
  RUN(test_math_int);
  RUN(test_mod);
  RUN(test_bitwise);
  RUN(test_sum_mean);
  RUN(test_castlike);
  RUN(test_aliases);
  RUN(test_expand_shape_fill);
  RUN(test_transpose);
  RUN(test_concat_split);
  RUN(test_slice);
  RUN(test_gather);
  RUN(test_gather_out_of_range);
  RUN(test_pad);
  RUN(test_resize);
  RUN(test_errors);
  RUN(test_runtime_semantic_inputs);
  printf("%d graph cases\n", (int)cases_run);
  return kiln_test_finish();
}
