/* Tests for kernel fusion (lowering/fuse.c): small graphs are lowered,
 * fused and run on the CPU backend, and compared with the reference
 * executor and with the unfused plan; structure checks cover kernel counts,
 * the fusion report, fused node lists, buffer lifetimes and the cases that
 * must not fuse. KILN_TEST_NO_CPU=1 skips the native runs. The template
 * choice that reads the fused kernels (lowering/template_choose.c) is
 * checked here too: descriptors, the fused epilogue as data, and the
 * target's rules as data. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ir/op.h"
#include "ir/tir_visit.h"
#include "lowering/fuse.h"
#include "lowering/plan.h"
#include "lowering/template.h"
#include "compiler/ref_exec.h"
#include "targets/cpu/cpu_backend.h"
#include "testing.h"

#define F32 KILN_DTYPE_F32
#define F16 KILN_DTYPE_F16
#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define DIMS(...) (int64_t[]){__VA_ARGS__}
#define NAMES(...) (const char*[]){__VA_ARGS__}

static kiln_allocator_t A(void) { return kiln_allocator_system(); }
static bool use_cpu = true;

static uint64_t rng_state = 88172645463325252ull;
static double rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (double)(rng_state >> 11) / (double)(1ull << 52) - 1.0;
}

static kiln_array_t rand_array(kiln_dtype_t t, int rank, const int64_t* dims) {
  kiln_array_t a;
  kiln_shape_t s = kiln_shape_make(rank, dims);
  kiln_status_t st = kiln_array_alloc(A(), t, &s, &a);
  KILN_ASSERT(!st);
  int64_t n = kiln_array_numel(&a);
  for (int64_t i = 0; i < n; ++i) kiln_store_f64(t, a.data, (size_t)i, rnd());
  return a;
}

/* ---- graph building -------------------------------------------------------- */

#define MAX_FEEDS 4
typedef struct tg_s {
  kiln_graph_t* g;
  kiln_array_t feeds[MAX_FEEDS];
  int n_feeds;
  bool ok;
} tg_t;

static void tg_init(tg_t* t) {
  memset(t, 0, sizeof(*t));
  t->ok = CHECK_OK(kiln_graph_create(A(), &t->g));
  if (t->ok) t->ok = CHECK_OK(kiln_graph_set_opset(t->g, "", 17));
}

static void tg_input(tg_t* t, const char* name, kiln_dtype_t dt, int rank, const int64_t* d) {
  if (!t->ok) return;
  KILN_ASSERT(t->n_feeds < MAX_FEEDS);
  t->feeds[t->n_feeds] = rand_array(dt, rank, d);
  t->ok = CHECK_OK(kiln_graph_add_input(t->g, name, dt, &t->feeds[t->n_feeds].shape, NULL));
  t->n_feeds++;
}

static void tg_const(tg_t* t, const char* name, kiln_dtype_t dt, int rank, const int64_t* d) {
  if (!t->ok) return;
  kiln_array_t a = rand_array(dt, rank, d);
  t->ok = CHECK_OK(kiln_graph_add_initializer(t->g, name, &a, NULL));
}

static void tg_scalar(tg_t* t, const char* name, kiln_dtype_t dt, double v) {
  if (!t->ok) return;
  kiln_array_t a;
  kiln_shape_t s = kiln_shape_make(0, NULL);
  KILN_ASSERT(!kiln_array_alloc(A(), dt, &s, &a));
  kiln_store_f64(dt, a.data, 0, v);
  t->ok = CHECK_OK(kiln_graph_add_initializer(t->g, name, &a, NULL));
}

static void tg_node(tg_t* t, const char* op, const char* name, int n_in, const char* const* in,
                    const char* out, int n_attrs, const kiln_attr_t* attrs) {
  if (!t->ok) return;
  t->ok = CHECK_OK(kiln_graph_add_node(t->g, op, name, n_in, in, 1, (const char*[]){out}, n_attrs,
                                       attrs, NULL));
}

static void tg_output(tg_t* t, const char* name) {
  if (t->ok) t->ok = CHECK_OK(kiln_graph_add_output(t->g, name));
}

static void tg_free(tg_t* t) {
  for (int i = 0; i < t->n_feeds; ++i) kiln_array_free(A(), &t->feeds[i]);
  kiln_graph_destroy(t->g);
}

/* ---- running ---------------------------------------------------------------- */

static double rel_err(const kiln_array_t* got, const kiln_array_t* want) {
  if (got->dtype != want->dtype || !kiln_shape_equal(&got->shape, &want->shape)) return INFINITY;
  int64_t n = kiln_array_numel(want);
  double scale = 1.0, err = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    double w = kiln_load_f64(want->dtype, want->data, (size_t)i);
    if (isfinite(w) && fabs(w) > scale) scale = fabs(w);
  }
  for (int64_t i = 0; i < n; ++i) {
    double g = kiln_load_f64(got->dtype, got->data, (size_t)i);
    double w = kiln_load_f64(want->dtype, want->data, (size_t)i);
    if (isnan(w) != isnan(g)) return INFINITY;
    if (isnan(w)) continue;
    double e = fabs(g - w) / scale;
    if (e > err) err = e;
  }
  return err;
}

static kiln_status_t cpu_plan(const kiln_plan_t* p, const kiln_array_t* feeds, kiln_array_t* outs) {
  kiln_cpu_options_t o;
  kiln_cpu_options_default(&o);
  o.threads = 2;
  kiln_cpu_exec_t* e = NULL;
  KILN_RETURN_IF_ERROR(kiln_cpu_compile(p, &o, &e, NULL));
  kiln_status_t st = kiln_cpu_run(e, feeds, outs, NULL, NULL);
  kiln_cpu_exec_destroy(e);
  return st;
}

typedef struct result_s {
  int32_t before, after; /* kernels */
  kiln_fusion_report_t rep;
  kiln_plan_t* plan;     /* fused plan (caller destroys) */
} result_t;

/* Prepares |t|'s graph, fuses its plan, runs both plans on the CPU and
 * compares every output with the reference (tolerance |tol| relative). */
static result_t run_case(tg_t* t, const char* what, double tol) {
  result_t r;
  memset(&r, 0, sizeof r);
  if (!t->ok || !CHECK_OK(kiln_graph_prepare(t->g))) return r;
  kiln_graph_t* g = t->g;
  kiln_array_t want[4], got[4];
  memset(want, 0, sizeof want);
  memset(got, 0, sizeof got);
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  if (!CHECK_OK(kiln_ref_run(g, t->feeds, &ro, want))) return r;
  kiln_plan_options_t po = {KILN_TARGET_CLASS_CPU, 2, 0, 0, 0, 0};
  kiln_plan_t* unfused = NULL;
  kiln_plan_t* p = NULL;
  CHECK_OK(kiln_plan_build(g, &po, A(), &unfused));
  CHECK_OK(kiln_plan_build(g, &po, A(), &p));
  if (p && unfused) {
    FILE* log = getenv("FUSE_VERBOSE") ? stderr : NULL;
    if (CHECK_OK(kiln_plan_fuse(p, &r.rep, log))) {
      r.before = r.rep.kernels_before;
      r.after = r.rep.kernels_after;
      CHECK(r.before == unfused->n_kernels);
      CHECK(r.after == p->n_kernels);
      if (getenv("FUSE_DUMP")) kiln_plan_dump(p, stderr, true);
      for (int32_t k = 0; k < p->n_kernels; ++k)
        CHECK_MSG(!tir_verify(p->kernels[k].func), "%s: kernel %d fails verify", what, k);
      for (int pass = 0; use_cpu && pass < 2; ++pass) {
        const kiln_plan_t* pp = pass ? p : unfused;
        if (!CHECK_OK(cpu_plan(pp, t->feeds, got))) {
          fprintf(stderr, "  case %s (%s)\n", what, pass ? "fused" : "unfused");
          continue;
        }
        for (int o = 0; o < g->n_outputs; ++o) {
          double e = rel_err(&got[o], &want[o]);
          CHECK_MSG(e <= tol, "%s (%s): output %d differs from the reference: rel err %g > %g",
                    what, pass ? "fused" : "unfused", o, e, tol);
          kiln_array_free(A(), &got[o]);
        }
      }
    }
  }
  for (int o = 0; o < g->n_outputs; ++o) kiln_array_free(A(), &want[o]);
  kiln_plan_destroy(unfused);
  r.plan = p;
  return r;
}

static int32_t buffer_of(const kiln_plan_t* p, const char* tensor) {
  int32_t t = kiln_graph_find_tensor(p->graph, tensor);
  return t >= 0 ? p->tensor_buffer[t] : -1;
}

/* Number of kernels that take plan buffer |b| (or an alias of it). */
static int kernels_using(const kiln_plan_t* p, int32_t b) {
  int n = 0;
  for (int32_t k = 0; k < p->n_kernels; ++k)
    for (int32_t a = 0; a < p->kernels[k].func->n_params; ++a)
      if (kiln_plan_root(p, p->kernels[k].args[a]) == b) {
        ++n;
        break;
      }
  return n;
}

/* The kernel that computes graph node |name| (anchor or fused), or -1. */
static int32_t kernel_of_node(const kiln_plan_t* p, const char* name) {
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    int32_t nodes[64];
    int32_t n = kiln_plan_kernel_nodes(p, k, nodes, 64);
    for (int32_t i = 0; i < n && i < 64; ++i)
      if (strcmp(p->graph->nodes[nodes[i]].name, name) == 0) return k;
  }
  return -1;
}

/* Whether kernel |k| computes graph node |name| (anchor or fused). */
static bool kernel_has_node(const kiln_plan_t* p, int32_t k, const char* name) {
  int32_t nodes[64];
  int32_t n = kiln_plan_kernel_nodes(p, k, nodes, 64);
  for (int32_t i = 0; i < n && i < 64; ++i)
    if (strcmp(p->graph->nodes[nodes[i]].name, name) == 0) return true;
  return false;
}

/* ---- cases -------------------------------------------------------------------- */

static void test_patterns(void) {
  CHECK(kiln_op_pattern("Relu") == KILN_PATTERN_ELEMWISE);
  CHECK(kiln_op_pattern("Add") == KILN_PATTERN_BROADCAST);
  CHECK(kiln_op_pattern("Transpose") == KILN_PATTERN_INJECTIVE);
  CHECK(kiln_op_pattern("Pad") == KILN_PATTERN_INJECTIVE);
  CHECK(kiln_op_pattern("Softmax") == KILN_PATTERN_REDUCTION);
  CHECK(kiln_op_pattern("MaxPool") == KILN_PATTERN_REDUCTION);
  CHECK(kiln_op_pattern("Conv") == KILN_PATTERN_OUT_ELEMWISE_FUSABLE);
  CHECK(kiln_op_pattern("MatMul") == KILN_PATTERN_OUT_ELEMWISE_FUSABLE);
  CHECK(kiln_op_pattern("Shape") == KILN_PATTERN_OPAQUE);
  CHECK(kiln_op_pattern("NoSuchOp") == KILN_PATTERN_OPAQUE);
  CHECK(kiln_op_pattern(NULL) == KILN_PATTERN_OPAQUE);
  CHECK(strcmp(kiln_op_pattern_name(KILN_PATTERN_INJECTIVE), "injective") == 0);
  /* Every op kiln has gets a pattern other than opaque, except Shape and
   * the ops whose output is not one value per element computed once: the
   * scatters (a copy, then updates in order), CumSum (a running sum over
   * the output), TopK (ranks through a workspace) and the recurrent layers
   * (a time loop over their own state), Det (an LU factorization in place
   * per matrix) and the losses (a reduction that checks its targets).
   * The quantized ops stay unfused too: each reads its operands through
   * flat views with parameter indices of its own, and DynamicQuantizeLinear
   * reduces before it quantizes; grouping them is the Q/DQ folding pass's
   * work (issue 21), not the generic fuser's. The ops with data-dependent
   * output shapes and the control flow run on the host between compiled
   * stages (compiler/staged.h), never inside a kernel. */
  static const char* const opaque[] = {"Shape", "Scatter", "ScatterElements", "ScatterND", "CumSum", "TopK",
                                       "LSTM", "GRU", "RNN", "Det",
                                       "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss",
                                       "MaxUnpool" /* zeros, then a scatter */,
                                       "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
                                       "MatMulInteger", "QLinearMatMul", "ConvInteger", "QLinearConv",
                                       "QLinearAdd", "QLinearGlobalAveragePool",
                                       "NonZero", "Compress", "Unique", "NonMaxSuppression", "If", "Loop", "Scan"};
  for (size_t i = 0; i < kiln_op_count(); ++i) {
    const char* op = kiln_op_at(i)->op_type;
    bool want_opaque = false;
    for (size_t k = 0; k < sizeof opaque / sizeof opaque[0]; ++k) want_opaque |= strcmp(op, opaque[k]) == 0;
    CHECK_MSG((kiln_op_pattern(op) == KILN_PATTERN_OPAQUE) == want_opaque, "op %s: pattern %s", op,
              kiln_op_pattern_name(kiln_op_pattern(op)));
  }
}

/* Conv -> Add(bias, broadcast) -> Relu: both fold into the conv's last kernel. */
/* x [1, 16, 14, 14] -> 3x3 Conv "conv" (32 channels, pads 1) -> Add "addb"
 * of a per-channel bias -> Relu "relu" -> output y. */
static void conv_bias_relu(tg_t* t) {
  tg_input(t, "x", F32, 4, DIMS(1, 16, 14, 14));
  tg_const(t, "w", F32, 4, DIMS(32, 16, 3, 3));
  tg_const(t, "b", F32, 3, DIMS(32, 1, 1));
  kiln_attr_t pads = kiln_attr_make_ints("pads", 4, DIMS(1, 1, 1, 1));
  tg_node(t, "Conv", "conv", 2, NAMES("x", "w"), "c", 1, &pads);
  tg_node(t, "Add", "addb", 2, NAMES("c", "b"), "cb", 0, NULL);
  tg_node(t, "Relu", "relu", 1, NAMES("cb"), "y", 0, NULL);
  tg_output(t, "y");
}

static void test_conv_bias_relu(void) {
  tg_t t;
  tg_init(&t);
  conv_bias_relu(&t);
  result_t r = run_case(&t, "conv+bias+relu", 1e-5);
  if (r.plan) {
    CHECK(r.rep.epilogues_fused == 2);
    CHECK(r.after == r.before - 2);
    /* c and cb: written once and read once each, 1*32*14*14*4 bytes. */
    int64_t sz = 32 * 14 * 14 * 4;
    CHECK(r.rep.bytes_saved == 4 * sz);
    CHECK(r.rep.bytes_before >= r.rep.bytes_saved);
    int32_t c = buffer_of(r.plan, "c"), cb = buffer_of(r.plan, "cb");
    CHECK(c >= 0 && cb >= 0 && kernels_using(r.plan, c) == 0 && kernels_using(r.plan, cb) == 0);
    CHECK(c >= 0 && r.plan->buffers[c].first_use == -1);
    int32_t k = kernel_of_node(r.plan, "relu");
    CHECK(k >= 0 && k == kernel_of_node(r.plan, "addb"));
    CHECK(k >= 0 && strcmp(r.plan->graph->nodes[r.plan->kernels[k].node].name, "conv") == 0);
    CHECK(k >= 0 && r.plan->kernels[k].n_fused_nodes == 2);
    int32_t nodes[1];
    CHECK(kiln_plan_kernel_nodes(r.plan, k, nodes, 1) == 3); /* count beyond cap */
    int32_t y = buffer_of(r.plan, "y");
    CHECK(y >= 0 && r.plan->buffers[y].first_use >= 0);
  }
  kiln_plan_destroy(r.plan);
  tg_free(&t);
}

/* Conv -> Add(bias) -> Add(residual from a conv computed AFTER it) -> Relu:
 * the fused kernel has to move to the consumer's position. */
static void test_conv_residual(void) {
  tg_t t;
  tg_init(&t);
  tg_input(&t, "x", F32, 4, DIMS(1, 8, 12, 12));
  tg_const(&t, "w", F32, 4, DIMS(16, 8, 3, 3));
  tg_const(&t, "w2", F32, 4, DIMS(16, 8, 1, 1));
  tg_const(&t, "b", F32, 3, DIMS(16, 1, 1));
  kiln_attr_t pads = kiln_attr_make_ints("pads", 4, DIMS(1, 1, 1, 1));
  tg_node(&t, "Conv", "conv", 2, NAMES("x", "w"), "c", 1, &pads);
  tg_node(&t, "Conv", "down", 2, NAMES("x", "w2"), "r", 0, NULL);
  tg_node(&t, "Add", "addb", 2, NAMES("c", "b"), "cb", 0, NULL);
  tg_node(&t, "Add", "addr", 2, NAMES("cb", "r"), "s", 0, NULL);
  tg_node(&t, "Relu", "relu", 1, NAMES("s"), "y", 0, NULL);
  tg_output(&t, "y");
  result_t r = run_case(&t, "conv+bias+residual+relu", 1e-5);
  if (r.plan) {
    CHECK(r.rep.epilogues_fused >= 3);
    int32_t k = kernel_of_node(r.plan, "relu");
    CHECK(k >= 0 && k == kernel_of_node(r.plan, "addr") && k == kernel_of_node(r.plan, "addb"));
    /* the residual add went into one of the convs, which must run after r */
    int32_t s = buffer_of(r.plan, "s");
    CHECK(s >= 0 && kernels_using(r.plan, s) == 0);
  }
  kiln_plan_destroy(r.plan);
  tg_free(&t);
}

/* MatMul -> Add(bias) -> x*sigmoid(1.702x) (t has two consumers). */
static void test_matmul_gelu_chain(void) {
  tg_t t;
  tg_init(&t);
  tg_input(&t, "a", F32, 2, DIMS(64, 48));
  tg_const(&t, "w", F32, 2, DIMS(48, 40));
  tg_const(&t, "bias", F32, 1, DIMS(40));
  tg_scalar(&t, "k", F32, 1.702);
  tg_node(&t, "MatMul", "mm", 2, NAMES("a", "w"), "m", 0, NULL);
  tg_node(&t, "Add", "addb", 2, NAMES("m", "bias"), "tt", 0, NULL);
  tg_node(&t, "Mul", "scale", 2, NAMES("tt", "k"), "u", 0, NULL);
  tg_node(&t, "Sigmoid", "sig", 1, NAMES("u"), "s", 0, NULL);
  tg_node(&t, "Mul", "gate", 2, NAMES("tt", "s"), "y", 0, NULL);
  tg_output(&t, "y");
  result_t r = run_case(&t, "matmul+bias+sigmoid-gelu", 1e-5);
  if (r.plan) {
    CHECK(kernel_of_node(r.plan, "addb") == kernel_of_node(r.plan, "mm"));
    /* tt has two readers, scale and gate; once scale, sig and gate are one
     * kernel it has one reader (loaded twice at the identity index) and
     * that kernel folds into the matmul too. */
    int32_t tt = buffer_of(r.plan, "tt");
    CHECK(tt >= 0 && kernels_using(r.plan, tt) == 0);
    int32_t k = kernel_of_node(r.plan, "gate");
    CHECK(k >= 0 && k == kernel_of_node(r.plan, "sig") && k == kernel_of_node(r.plan, "scale"));
    CHECK(k == kernel_of_node(r.plan, "mm"));
    CHECK(r.rep.epilogues_fused == 4);
    CHECK(r.after == r.before - 4);
  }
  kiln_plan_destroy(r.plan);
  tg_free(&t);
}

/* Gemm with transB + Gelu op. */
static void test_gemm_gelu(void) {
  tg_t t;
  tg_init(&t);
  kiln_graph_set_opset(t.g, "", 20);
  tg_input(&t, "a", F32, 2, DIMS(33, 70));
  tg_const(&t, "w", F32, 2, DIMS(50, 70));
  tg_const(&t, "c", F32, 1, DIMS(50));
  kiln_attr_t tb = kiln_attr_make_int("transB", 1);
  tg_node(&t, "Gemm", "gemm", 3, NAMES("a", "w", "c"), "g", 1, &tb);
  tg_node(&t, "Gelu", "gelu", 1, NAMES("g"), "y", 0, NULL);
  tg_output(&t, "y");
  result_t r = run_case(&t, "gemm+gelu", 1e-5);
  if (r.plan) {
    CHECK(r.rep.epilogues_fused == 1);
    CHECK(kernel_of_node(r.plan, "gelu") == kernel_of_node(r.plan, "gemm"));
  }
  kiln_plan_destroy(r.plan);
  tg_free(&t);
}

/* x [1, 24, 15, 15] -> depthwise 3x3 stride-2 conv "dw" -> Clip "clip"
 * (min/max as inputs) -> |out| [1, 24, 8, 8]. */
static void depthwise_clip(tg_t* t, const char* out) {
  tg_input(t, "x", F32, 4, DIMS(1, 24, 15, 15));
  tg_const(t, "w", F32, 4, DIMS(24, 1, 3, 3));
  tg_scalar(t, "lo", F32, 0.0);
  tg_scalar(t, "hi", F32, 0.5);
  kiln_attr_t at[3] = {kiln_attr_make_ints("pads", 4, DIMS(1, 1, 1, 1)), kiln_attr_make_int("group", 24),
                       kiln_attr_make_ints("strides", 2, DIMS(2, 2))};
  tg_node(t, "Conv", "dw", 2, NAMES("x", "w"), "c", 3, at);
  tg_node(t, "Clip", "clip", 3, NAMES("c", "lo", "hi"), out, 0, NULL);
}

/* Depthwise conv -> Clip(0, 0.5) (min/max as inputs). */
static void test_depthwise_clip(void) {
  tg_t t;
  tg_init(&t);
  depthwise_clip(&t, "y");
  tg_output(&t, "y");
  result_t r = run_case(&t, "depthwise+clip", 1e-5);
  if (r.plan) {
    CHECK(r.rep.epilogues_fused == 1);
    CHECK(r.after == r.before - 1);
    CHECK(kernel_of_node(r.plan, "clip") == kernel_of_node(r.plan, "dw"));
  }
  kiln_plan_destroy(r.plan);
  tg_free(&t);
}

/* Does |e| call |fn| anywhere? */
typedef struct find_call_s {
  tir_intrin_t fn;
  bool found;
} find_call_t;
static bool find_call_pre(tir_visitor_t* v, const tir_expr_t* e) {
  find_call_t* f = v->user;
  if (e->kind == TIR_CALL && e->u.call.fn == f->fn) f->found = true;
  return !f->found;
}
static bool kernel_calls(const kiln_plan_kernel_t* k, tir_intrin_t fn) {
  find_call_t f = {fn, false};
  tir_visitor_t v = {.user = &f, .expr_pre = find_call_pre};
  tir_visit_stmt(&v, k->func->body);
  return f.found;
}

/* SiLU as torch exports it, Mul(c, Sigmoid(c)) after a depthwise conv (both
 * operand orders): one kernel, whose value is TIR_SILU of the conv's sum
 * (the sum evaluated once, not in the product and again in the sigmoid),
 * matching the reference on values that reach the sigmoid's both branches. */
static void test_depthwise_silu(void) {
  for (int order = 0; order < 2; ++order) {
    tg_t t;
    tg_init(&t);
    tg_input(&t, "x", F32, 4, DIMS(1, 24, 15, 15));
    tg_const(&t, "w", F32, 4, DIMS(24, 1, 3, 3));
    kiln_attr_t at[2] = {kiln_attr_make_ints("pads", 4, DIMS(1, 1, 1, 1)), kiln_attr_make_int("group", 24)};
    tg_node(&t, "Conv", "dw", 2, NAMES("x", "w"), "c", 2, at);
    tg_node(&t, "Sigmoid", "sig", 1, NAMES("c"), "s", 0, NULL);
    tg_node(&t, "Mul", "mul", 2, order ? NAMES("s", "c") : NAMES("c", "s"), "y", 0, NULL);
    tg_output(&t, "y");
    result_t r = run_case(&t, "depthwise+silu", 1e-5);
    if (r.plan) {
      CHECK(r.after == 1);
      CHECK(kernel_of_node(r.plan, "mul") == kernel_of_node(r.plan, "dw"));
      CHECK(r.plan->n_kernels == 1 && kernel_calls(&r.plan->kernels[0], TIR_SILU));
      CHECK(r.plan->n_kernels == 1 && !kernel_calls(&r.plan->kernels[0], TIR_SIGMOID));
    }
    kiln_plan_destroy(r.plan);
    tg_free(&t);
  }
}

/* Five element-wise ops with broadcasts become one kernel. */
static void test_elementwise_chain(void) {
  tg_t t;
  tg_init(&t);
  tg_input(&t, "x", F32, 4, DIMS(2, 3, 4, 16));
  tg_input(&t, "z", F32, 4, DIMS(2, 3, 4, 16));
  tg_const(&t, "b", F32, 3, DIMS(3, 1, 1));
  tg_const(&t, "s", F32, 1, DIMS(16));
  tg_const(&t, "d", F32, 4, DIMS(1, 1, 4, 1));
  tg_node(&t, "Add", "e1", 2, NAMES("x", "b"), "t1", 0, NULL);
  tg_node(&t, "Mul", "e2", 2, NAMES("t1", "s"), "t2", 0, NULL);
  tg_node(&t, "Sub", "e3", 2, NAMES("t2", "z"), "t3", 0, NULL);
  tg_node(&t, "Tanh", "e4", 1, NAMES("t3"), "t4", 0, NULL);
  tg_node(&t, "Add", "e5", 2, NAMES("d", "t4"), "y", 0, NULL);
  tg_output(&t, "y");
  result_t r = run_case(&t, "elementwise chain", 1e-5);
  if (r.plan) {
    CHECK(r.before == 5);
    CHECK(r.after == 1);
    CHECK(r.rep.epilogues_fused == 4);
    CHECK(r.plan->kernels[0].n_fused_nodes == 4);
    int64_t sz = 2 * 3 * 4 * 16 * 4;
    CHECK(r.rep.bytes_before == 8 * sz && r.rep.bytes_saved == 8 * sz);
  }
  kiln_plan_destroy(r.plan);
  tg_free(&t);
}

/* f16: Add -> Relu -> Mul chain with casts in the value expressions. */
static void test_f16_chain(void) {
  tg_t t;
  tg_init(&t);
  tg_input(&t, "x", F16, 3, DIMS(4, 8, 16));
  tg_const(&t, "b", F16, 1, DIMS(16));
  tg_node(&t, "Add", "e1", 2, NAMES("x", "b"), "t1", 0, NULL);
  tg_node(&t, "Relu", "e2", 1, NAMES("t1"), "t2", 0, NULL);
  tg_node(&t, "Mul", "e3", 2, NAMES("t2", "x"), "y", 0, NULL);
  tg_output(&t, "y");
  result_t r = run_case(&t, "f16 chain", 1e-3);
  if (r.plan) CHECK(r.after == 1);
  kiln_plan_destroy(r.plan);
  tg_free(&t);
}

/* Cases that must not fuse: an intermediate that is also a graph output,
 * and one with two consumers. */
static void test_no_fuse(void) {
  tg_t t;
  tg_init(&t);
  tg_input(&t, "x", F32, 4, DIMS(1, 8, 10, 10));
  tg_const(&t, "w", F32, 4, DIMS(8, 8, 1, 1));
  tg_node(&t, "Conv", "conv", 2, NAMES("x", "w"), "c", 0, NULL);
  tg_node(&t, "Relu", "relu", 1, NAMES("c"), "y", 0, NULL);
  tg_output(&t, "y");
  tg_output(&t, "c"); /* c is visible: must stay */
  result_t r = run_case(&t, "output not fused", 1e-5);
  if (r.plan) {
    CHECK(r.rep.epilogues_fused == 0);
    CHECK(r.after == r.before);
    CHECK(r.rep.bytes_saved == 0);
  }
  kiln_plan_destroy(r.plan);
  tg_free(&t);

  tg_init(&t);
  tg_input(&t, "x", F32, 2, DIMS(16, 32));
  tg_node(&t, "Exp", "exp", 1, NAMES("x"), "e", 0, NULL);
  tg_node(&t, "Relu", "relu", 1, NAMES("e"), "y1", 0, NULL);
  tg_node(&t, "Neg", "neg", 1, NAMES("e"), "y2", 0, NULL);
  tg_output(&t, "y1");
  tg_output(&t, "y2");
  r = run_case(&t, "two consumers", 1e-5);
  if (r.plan) {
    CHECK(r.rep.epilogues_fused == 0);
    CHECK(r.after == 3);
  }
  kiln_plan_destroy(r.plan);
  tg_free(&t);

  /* Broadcasting consumer: X is read at non-identity indices. */
  tg_init(&t);
  tg_input(&t, "x", F32, 2, DIMS(1, 32));
  tg_input(&t, "z", F32, 2, DIMS(16, 32));
  tg_node(&t, "Exp", "exp", 1, NAMES("x"), "e", 0, NULL);
  tg_node(&t, "Add", "add", 2, NAMES("e", "z"), "y", 0, NULL);
  tg_output(&t, "y");
  r = run_case(&t, "broadcast consumer", 1e-5);
  if (r.plan) CHECK(r.rep.epilogues_fused == 0);
  kiln_plan_destroy(r.plan);
  tg_free(&t);
}

/* Injective producers inlined: Transpose -> Add, Pad -> Relu. */
static void test_inline_injective(void) {
  tg_t t;
  tg_init(&t);
  tg_input(&t, "x", F32, 3, DIMS(8, 16, 5));
  tg_input(&t, "z", F32, 3, DIMS(5, 8, 16));
  kiln_attr_t perm = kiln_attr_make_ints("perm", 3, DIMS(2, 0, 1));
  tg_node(&t, "Transpose", "tr", 1, NAMES("x"), "xt", 1, &perm);
  tg_node(&t, "Add", "add", 2, NAMES("xt", "z"), "y", 0, NULL);
  tg_output(&t, "y");
  result_t r = run_case(&t, "transpose+add", 1e-6);
  if (r.plan) {
    CHECK(r.after == 1);
    CHECK(r.rep.producers_inlined + r.rep.epilogues_fused == 1);
  }
  kiln_plan_destroy(r.plan);
  tg_free(&t);

  tg_init(&t);
  tg_input(&t, "x", F32, 4, DIMS(1, 3, 6, 7));
  tg_const(&t, "pads", KILN_DTYPE_I64, 1, DIMS(8));
  /* overwrite the random pads with real ones */
  if (t.ok) {
    const kiln_tensor_t* pt = &t.g->tensors[kiln_graph_find_tensor(t.g, "pads")];
    int64_t* pv = (int64_t*)pt->value.data;
    const int64_t v[8] = {0, 0, 1, 2, 0, 0, 2, 1};
    memcpy(pv, v, sizeof v);
  }
  tg_node(&t, "Pad", "pad", 2, NAMES("x", "pads"), "xp", 0, NULL);
  tg_node(&t, "Relu", "relu", 1, NAMES("xp"), "r", 0, NULL);
  kiln_attr_t perm4 = kiln_attr_make_ints("perm", 4, DIMS(0, 2, 3, 1));
  tg_node(&t, "Transpose", "tr", 1, NAMES("r"), "y", 1, &perm4);
  tg_output(&t, "y");
  r = run_case(&t, "pad+relu+transpose", 1e-6);
  if (r.plan) CHECK(r.after == 1);
  kiln_plan_destroy(r.plan);
  tg_free(&t);
}

/* A Fire module (SqueezeNet): a 1x1 and a 3x3 conv, each with its Relu, read
 * the same input and are concatenated on the channels with the input itself:
 * the convs store into the Concat's slices (its copies of them are gone);
 * the input's part stays a copy, and so does a part read by another node too. */
static void test_concat_slices(void) {
  tg_t t;
  tg_init(&t);
  tg_input(&t, "x", F32, 4, DIMS(1, 8, 10, 10));
  tg_const(&t, "w1", F32, 4, DIMS(16, 8, 1, 1));
  tg_const(&t, "w3", F32, 4, DIMS(16, 8, 3, 3));
  kiln_attr_t pads = kiln_attr_make_ints("pads", 4, DIMS(1, 1, 1, 1));
  tg_node(&t, "Conv", "e1", 2, NAMES("x", "w1"), "c1", 0, NULL);
  tg_node(&t, "Relu", "r1", 1, NAMES("c1"), "c1r", 0, NULL);
  tg_node(&t, "Conv", "e3", 2, NAMES("x", "w3"), "c3", 1, &pads);
  tg_node(&t, "Relu", "r3", 1, NAMES("c3"), "c3r", 0, NULL);
  kiln_attr_t axis = kiln_attr_make_int("axis", 1);
  tg_node(&t, "Concat", "cat", 3, NAMES("c1r", "x", "c3r"), "y", 1, &axis);
  tg_output(&t, "y");
  result_t r = run_case(&t, "fire concat", 1e-5);
  if (r.plan) {
    int32_t c1 = buffer_of(r.plan, "c1r"), c3 = buffer_of(r.plan, "c3r"), y = buffer_of(r.plan, "y");
    CHECK(c1 >= 0 && kernels_using(r.plan, c1) == 0);
    CHECK(c3 >= 0 && kernels_using(r.plan, c3) == 0);
    /* y: the two convs and the copy of x */
    CHECK(y >= 0 && kernels_using(r.plan, y) == 3);
    /* the Concat's parts went into the 1x1 conv's Relu (its own kernel
     * here: the GEMM writes c1 through a view) and the 3x3 conv */
    int32_t k1 = kernel_of_node(r.plan, "r1"), k3 = kernel_of_node(r.plan, "r3");
    CHECK(k1 >= 0 && kernel_has_node(r.plan, k1, "cat"));
    CHECK(k3 >= 0 && kernel_has_node(r.plan, k3, "e3") && kernel_has_node(r.plan, k3, "cat") && k3 != k1);
  }
  kiln_plan_destroy(r.plan);
  tg_free(&t);

  /* c1r also feeds an Add after the Concat: its copy stays */
  tg_init(&t);
  tg_input(&t, "x", F32, 4, DIMS(1, 8, 6, 6));
  tg_const(&t, "w1", F32, 4, DIMS(8, 8, 1, 1));
  tg_node(&t, "Conv", "e1", 2, NAMES("x", "w1"), "c1", 0, NULL);
  tg_node(&t, "Relu", "r1", 1, NAMES("c1"), "c1r", 0, NULL);
  kiln_attr_t axis2 = kiln_attr_make_int("axis", 2);
  tg_node(&t, "Concat", "cat", 2, NAMES("x", "c1r"), "y", 1, &axis2);
  tg_node(&t, "Add", "add", 2, NAMES("c1r", "x"), "z", 0, NULL);
  tg_output(&t, "y");
  tg_output(&t, "z");
  r = run_case(&t, "concat part read twice", 1e-5);
  if (r.plan) {
    int32_t c1 = buffer_of(r.plan, "c1r");
    CHECK(c1 >= 0 && kernels_using(r.plan, c1) >= 2);
  }
  kiln_plan_destroy(r.plan);
  tg_free(&t);
}

/* ---- template choice (lowering/template.h) ------------------------------------ */

/* |t|'s graph lowered for a GPU and fused (*out NULL on error). */
static kiln_plan_t* gpu_plan(tg_t* t) {
  kiln_plan_t* p = NULL;
  kiln_plan_options_t po = {KILN_TARGET_CLASS_GPU, 0, 0, 0, 0, 0};
  if (!t->ok || !CHECK_OK(kiln_graph_prepare(t->g)) || !CHECK_OK(kiln_plan_build(t->g, &po, A(), &p))) return NULL;
  if (!CHECK_OK(kiln_plan_fuse(p, NULL, NULL))) {
    kiln_plan_destroy(p);
    return NULL;
  }
  return p;
}

/* Kernels of |p| whose descriptor is of |kind|; *at: the last one. */
static int count_kind(const kiln_plan_t* p, kiln_template_kind_t kind, int32_t* at) {
  int n = 0;
  for (int32_t k = 0; k < p->n_kernels; ++k)
    if (p->kernels[k].tmpl && p->kernels[k].tmpl->kind == kind) ++n, *at = k;
  return n;
}

static bool has_role(const kiln_template_conv_t* c, char r) { return strchr(c->roles, r) != NULL; }

static void test_templates_conv(void) {
  tg_t t;
  tg_init(&t);
  conv_bias_relu(&t);
  kiln_plan_t* p = gpu_plan(&t);
  if (p) {
    int32_t slot = -1, gemm = -1;
    /* no templates: every kernel printed from its tensor IR */
    const kiln_template_set_t none = {0};
    CHECK_OK(kiln_template_choose(p, &none));
    for (int32_t k = 0; k < p->n_kernels; ++k) CHECK(p->kernels[k].tmpl == NULL);
    /* Winograd wherever it covers: the crop kernel runs it, the GEMM merges */
    kiln_template_set_t set = {.conv = true, .conv_grid = true, .conv_private_sums = true,
                               .conv_tiled_weights = true, .winograd = true};
    CHECK_OK(kiln_template_choose(p, &set));
    CHECK(count_kind(p, KILN_TEMPLATE_WINOGRAD, &slot) == 1 && count_kind(p, KILN_TEMPLATE_MERGED, &gemm) == 1);
    if (slot >= 0 && gemm >= 0) {
      const kiln_template_t* d = p->kernels[slot].tmpl;
      CHECK(p->kernels[gemm].tmpl->into == slot && d->conv.gemm_kernel == gemm && d->conv.slot == slot);
      CHECK(d->weights.layout == KILN_TEMPLATE_W_WINOGRAD && d->conv.crop && !has_role(&d->conv, 'F'));
      /* no tile rules in the set: no tiles, the weights stay packed */
      CHECK(d->tiles.n == 0 && !d->weights.laid_out);
      CHECK(d->conv.M == 32 && d->conv.C == 16 && d->conv.T == 9 && d->conv.oh == 14 && d->conv.ow == 14);
      /* the fused bias and Relu as data: one per-channel operand */
      CHECK(d->conv.epi.n_ops == 2 && d->conv.epi.ops[0].op == '+' && d->conv.epi.ops[1].op == 'r');
      CHECK(d->conv.epi.n_operands == 1 && d->conv.epi.operands[0].sm == 1 && d->conv.epi.operands[0].sp == 0);
      CHECK(has_role(&d->conv, '0') && has_role(&d->conv, 'W') && has_role(&d->conv, 'X'));
    }
    /* the target's rule says no: the implicit-GEMM template, sums private */
    set.winograd_min_channels = 17;
    CHECK_OK(kiln_template_choose(p, &set));
    CHECK(count_kind(p, KILN_TEMPLATE_WINOGRAD, &slot) == 0 && count_kind(p, KILN_TEMPLATE_CONV, &slot) == 1);
    CHECK(slot >= 0 && p->kernels[slot].tmpl->psum_private && !has_role(&p->kernels[slot].tmpl->conv, 'F'));
    /* partial sums through the grid: the instance keeps it as 'F' */
    set.conv_private_sums = false;
    set.conv_tiled_weights = false;
    CHECK_OK(kiln_template_choose(p, &set));
    CHECK(count_kind(p, KILN_TEMPLATE_CONV, &slot) == 1);
    CHECK(slot >= 0 && !p->kernels[slot].tmpl->psum_private && p->kernels[slot].tmpl->weights.layout == KILN_TEMPLATE_W_PACKED &&
          has_role(&p->kernels[slot].tmpl->conv, 'F'));
  }
  kiln_plan_destroy(p);
  tg_free(&t);
}

static void test_templates_depthwise_gemm(void) {
  tg_t t;
  tg_init(&t);
  depthwise_clip(&t, "d");
  /* [1, 24, 8, 8] as three batches of a 64 x 8 matrix */
  const int64_t shape[3] = {3, 64, 8};
  kiln_array_t sa;
  kiln_shape_t ss = kiln_shape_make(1, DIMS(3));
  KILN_ASSERT(!kiln_array_alloc(A(), KILN_DTYPE_I64, &ss, &sa));
  memcpy(sa.data, shape, sizeof shape);
  if (t.ok) t.ok = CHECK_OK(kiln_graph_add_initializer(t.g, "shape", &sa, NULL));
  tg_node(&t, "Reshape", "flat", 2, NAMES("d", "shape"), "f", 0, NULL);
  tg_const(&t, "wm", F32, 2, DIMS(8, 10));
  tg_node(&t, "MatMul", "mm", 2, NAMES("f", "wm"), "y", 0, NULL);
  tg_output(&t, "y");
  /* and one B per batch */
  tg_const(&t, "wb", F32, 3, DIMS(3, 8, 10));
  tg_node(&t, "MatMul", "mmb", 2, NAMES("f", "wb"), "yb", 0, NULL);
  tg_output(&t, "yb");
  kiln_plan_t* p = gpu_plan(&t);
  if (p) {
    int32_t k = -1;
    kiln_template_set_t set = {.depthwise = true, .depthwise_min_stride = 2, .gemm = true};
    CHECK_OK(kiln_template_choose(p, &set));
    CHECK(count_kind(p, KILN_TEMPLATE_DEPTHWISE, &k) == 1);
    if (k >= 0) {
      const kiln_template_dw_t* d = &p->kernels[k].tmpl->dw;
      CHECK(d->sh == 2 && d->sw == 2 && d->kh == 3 && d->M == 24 && d->Mg == 1 && d->oh == 8);
      CHECK(d->epi.n_ops == 1 && d->epi.ops[0].op == 'c');
    }
    /* B shared by the batches: their rows stack into one product, which
     * needs no batch rule; one B per batch only where the rules take
     * batches */
    CHECK(count_kind(p, KILN_TEMPLATE_GEMM, &k) == 1);
    CHECK(k >= 0 && p->kernels[k].tmpl->gemm.M == 3 * 64 && p->kernels[k].tmpl->gemm.N == 10 &&
          p->kernels[k].tmpl->gemm.K == 8 && p->kernels[k].tmpl->gemm.batch == 1);
    set.depthwise_min_stride = 3;
    set.gemm_rules.batched = true;
    CHECK_OK(kiln_template_choose(p, &set));
    CHECK(count_kind(p, KILN_TEMPLATE_DEPTHWISE, &k) == 0 && count_kind(p, KILN_TEMPLATE_GEMM, &k) == 2);
    CHECK(k >= 0 && p->kernels[k].tmpl->gemm.M == 64 && p->kernels[k].tmpl->gemm.batch == 3);
  }
  kiln_plan_destroy(p);
  tg_free(&t);
}

/* On GPU plans a 1x1 conv's GEMM writes its output through a [N][M][H*W]
 * view of it: an Add of a [1][M][H][W] constant and a Clip (min/max as inputs) after it
 * fold into that GEMM through the view (fuse.c's view case) when a MaxPool,
 * not the graph, reads the result; the fused plan matches the reference
 * (run on the CPU device), and the conv template takes the chain as its
 * epilogue, with its operands as parameters of the GEMM kernel. */
static void test_gpu_view_epilogue(void) {
  tg_t t;
  tg_init(&t);
  tg_input(&t, "x", F32, 4, DIMS(1, 16, 8, 8));
  tg_const(&t, "w", F32, 4, DIMS(32, 16, 1, 1));
  tg_const(&t, "b", F32, 4, DIMS(1, 32, 8, 8)); /* per position: the view index split back */
  tg_scalar(&t, "lo", F32, 0.0);
  tg_scalar(&t, "hi", F32, 0.5);
  tg_node(&t, "Conv", "pw", 2, NAMES("x", "w"), "c", 0, NULL);
  tg_node(&t, "Add", "add", 2, NAMES("c", "b"), "a", 0, NULL);
  tg_node(&t, "Clip", "clip", 3, NAMES("a", "lo", "hi"), "r", 0, NULL);
  kiln_attr_t at[2] = {kiln_attr_make_ints("kernel_shape", 2, DIMS(2, 2)), kiln_attr_make_ints("strides", 2, DIMS(2, 2))};
  tg_node(&t, "MaxPool", "pool", 1, NAMES("r"), "y", 2, at);
  tg_output(&t, "y");
  kiln_plan_t* p = gpu_plan(&t);
  if (p) {
    const int32_t k = kernel_of_node(p, "pw");
    CHECK(k >= 0 && kernel_of_node(p, "add") == k && kernel_of_node(p, "clip") == k);
    for (int32_t j = 0; j < p->n_kernels; ++j)
      CHECK_MSG(!tir_verify(p->kernels[j].func), "kernel %d fails verify", j);
    kiln_array_t want = {0}, got = {0};
    kiln_ref_options_t ro;
    kiln_ref_options_default(&ro);
    if (use_cpu && CHECK_OK(kiln_ref_run(t.g, t.feeds, &ro, &want)) && CHECK_OK(cpu_plan(p, t.feeds, &got))) {
      const double e = rel_err(&got, &want);
      CHECK_MSG(e <= 1e-5, "fused through the view: rel err %g", e);
    }
    kiln_array_free(A(), &want);
    kiln_array_free(A(), &got);
    int32_t slot = -1;
    kiln_template_set_t set = {.conv = true};
    CHECK_OK(kiln_template_choose(p, &set));
    CHECK(count_kind(p, KILN_TEMPLATE_CONV, &slot) == 1 && slot == k);
    if (slot >= 0) {
      const kiln_template_conv_t* c = &p->kernels[slot].tmpl->conv;
      CHECK(!c->crop && c->gemm_kernel == slot && c->slot == slot);
      CHECK(c->epi.n_ops == 2 && c->epi.ops[0].op == '+' && c->epi.ops[1].op == 'c');
      CHECK(c->epi.n_operands == 3 && has_role(c, '0') && has_role(c, '2') && has_role(c, 'Y'));
      /* the constant scalar bounds keep their operands and have their
       * values too (the Vulkan printer prints those) */
      const kiln_template_epi_op_t* o = &c->epi.ops[1];
      CHECK(o->a >= 0 && o->b >= 0 && o->has_lo && o->lo == 0.0f && o->has_hi && o->hi == 0.5f);
    }
  }
  kiln_plan_destroy(p);
  tg_free(&t);
}

/* A Clip whose min is a graph input (not a constant) after a 1x1 conv on a
 * GPU plan (a MaxPool reads it, as above): the template's epilogue reads that bound from its operand
 * (has_lo false) and still knows the constant max. */
static void test_gpu_clip_input_bound(void) {
  tg_t t;
  tg_init(&t);
  tg_input(&t, "x", F32, 4, DIMS(1, 16, 8, 8));
  tg_input(&t, "lo", F32, 0, NULL);
  tg_const(&t, "w", F32, 4, DIMS(32, 16, 1, 1));
  tg_scalar(&t, "hi", F32, 6.0);
  tg_node(&t, "Conv", "pw", 2, NAMES("x", "w"), "c", 0, NULL);
  tg_node(&t, "Clip", "clip", 3, NAMES("c", "lo", "hi"), "r", 0, NULL);
  kiln_attr_t at[2] = {kiln_attr_make_ints("kernel_shape", 2, DIMS(2, 2)), kiln_attr_make_ints("strides", 2, DIMS(2, 2))};
  tg_node(&t, "MaxPool", "pool", 1, NAMES("r"), "y", 2, at);
  tg_output(&t, "y");
  kiln_plan_t* p = gpu_plan(&t);
  if (p) {
    int32_t slot = -1;
    kiln_template_set_t set = {.conv = true};
    CHECK_OK(kiln_template_choose(p, &set));
    CHECK(count_kind(p, KILN_TEMPLATE_CONV, &slot) == 1);
    if (slot >= 0) {
      const kiln_template_conv_t* c = &p->kernels[slot].tmpl->conv;
      CHECK(c->epi.n_ops == 1 && c->epi.ops[0].op == 'c');
      const kiln_template_epi_op_t* o = &c->epi.ops[0];
      CHECK(o->a >= 0 && !o->has_lo && o->b >= 0 && o->has_hi && o->hi == 6.0f);
    }
  }
  kiln_plan_destroy(p);
  tg_free(&t);
}

int main(void) {
  use_cpu = !getenv("KILN_TEST_NO_CPU");
  RUN(test_patterns);
  RUN(test_conv_bias_relu);
  RUN(test_conv_residual);
  RUN(test_matmul_gelu_chain);
  RUN(test_gemm_gelu);
  RUN(test_depthwise_clip);
  RUN(test_depthwise_silu);
  RUN(test_elementwise_chain);
  RUN(test_f16_chain);
  RUN(test_no_fuse);
  RUN(test_inline_injective);
  RUN(test_templates_conv);
  RUN(test_templates_depthwise_gemm);
  RUN(test_gpu_view_epilogue);
  RUN(test_concat_slices);
  RUN(test_gpu_clip_input_bound);
  return kiln_test_finish();
}
