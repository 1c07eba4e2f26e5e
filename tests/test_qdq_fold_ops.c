/* The rest of a quantized network under "fold-qdq" (ir/pass_qdq.c): Q/DQ
 * around MaxPool, Flatten and Reshape (same parameters on both sides) fold
 * to the op on the integers; DQ -> Add -> [Relu] -> Q to QLinearAdd;
 * DQ -> GlobalAveragePool -> Q to QLinearGlobalAveragePool; DQ -> Gemm ->
 * [Relu] -> Q to a 1x1 QLinearConv between Reshapes (transB 0 and 1, per
 * tensor and per column weights, with and without the int32 bias).
 *
 * Each small graph reads integers as its input, so the graph as written and
 * the folded one see the same values: the reference executor must give the
 * same integers bit for bit for the moves and QLinearAdd, and within one
 * step (most elements identical) for the average (an integer sum against
 * f32 sums) and the Gemm (integer products against f32 ones, as for Conv).
 * Then the folded graph, compiled for the target, must match the reference
 * bit for bit (the CPU's int8 GEMM for the Gemm, the new ops' kernels).
 * Patterns whose fold would change the results stay, and the new ops'
 * malformed inputs are errors naming the node (BAD_INPUTS row 29).
 *
 *   test_qdq_fold_ops [--target cpu|opencl|vulkan] */
#include <math.h>

#include "target_graph_util.h"

static uint64_t rng = 1;
static int32_t rnd(int32_t lo, int32_t hi) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (int32_t)((rng >> 33) % (uint64_t)(hi - lo + 1));
}

static void cst(kiln_graph_t* g, const char* name, kiln_dtype_t t, int rank, const int64_t* dims,
                const double* v) {
  kiln_array_t a = arr(t, rank, dims);
  for (int64_t i = 0; a.data && i < kiln_array_numel(&a); ++i) kiln_store_f64(t, a.data, (size_t)i, v[i]);
  CHECK_OK(kiln_graph_add_initializer(g, name, &a, NULL));
}
static void scal(kiln_graph_t* g, const char* name, kiln_dtype_t t, double v) { cst(g, name, t, 0, NULL, &v); }

#define N(g, op, out, ...) \
  node1(g, op, out, sizeof((const char*[]){__VA_ARGS__}) / sizeof(char*), (const char*[]){__VA_ARGS__}, out, 0, NULL)

/* Parameters |p|_s, |p|_zp (dtype |t|) and DequantizeLinear(|q|) -> |out|. */
static void dq(kiln_graph_t* g, const char* q, const char* p, kiln_dtype_t t, double s, double zp,
               const char* out) {
  char sn[64], zn[64];
  snprintf(sn, sizeof sn, "%s_s", p);
  snprintf(zn, sizeof zn, "%s_zp", p);
  if (kiln_graph_find_tensor(g, sn) < 0) {
    scal(g, sn, KILN_DTYPE_F32, s);
    scal(g, zn, t, zp);
  }
  N(g, "DequantizeLinear", out, q, sn, zn);
}
static void qz(kiln_graph_t* g, const char* x, const char* p, kiln_dtype_t t, double s, double zp,
               const char* out) {
  char sn[64], zn[64];
  snprintf(sn, sizeof sn, "%s_s", p);
  snprintf(zn, sizeof zn, "%s_zp", p);
  if (kiln_graph_find_tensor(g, sn) < 0) {
    scal(g, sn, KILN_DTYPE_F32, s);
    scal(g, zn, t, zp);
  }
  N(g, "QuantizeLinear", out, x, sn, zn);
}

static kiln_array_t rand_q(kiln_dtype_t t, int rank, const int64_t* dims) {
  kiln_array_t a = arr(t, rank, dims);
  const int32_t lo = t == KILN_DTYPE_U8 ? 0 : -128, hi = t == KILN_DTYPE_U8 ? 255 : 127;
  for (int64_t e = 0; a.data && e < kiln_array_numel(&a); ++e) kiln_store_f64(t, a.data, (size_t)e, rnd(lo, hi));
  return a;
}

static int count_op(const kiln_graph_t* g, const char* op) {
  int k = 0;
  for (int32_t i = 0; i < g->n_nodes; ++i) k += strcmp(g->nodes[i].op_type, op) == 0;
  return k;
}

/* Runs fold-qdq then dce on |g| (prepared); returns the fold's rewrites. */
static int fold(kiln_graph_t* g) {
  kiln_pass_stats_t st = {g->n_nodes, g->n_nodes, 0}, st2 = st;
  const kiln_graph_pass_t* p = kiln_graph_pass_find("fold-qdq");
  const kiln_graph_pass_t* d = kiln_graph_pass_find("dce");
  CHECK(p && d);
  if (!p || !d || !CHECK_OK(p->fn(g, &st)) || !CHECK_OK(d->fn(g, &st2))) return -1;
  CHECK_OK(kiln_graph_verify(g));
  return st.rewrites;
}

/* ---- the graphs --------------------------------------------------------- */

typedef enum { G_MOVE, G_ADD, G_ADD_I8, G_ADD_BCAST, G_GAP, G_GEMM_T, G_GEMM_N, G_GEMM_RELU } kind_t;

typedef struct {
  kind_t kind;
  const char* what;
  int want_rw;   /* fold-qdq rewrites */
  double tol;    /* steps the folded graph may differ by (0: exact) */
} case_t;

/* The graph of |c| with its integer inputs (xq, and bq for the adds) and
 * output y (the quantized integers); |bad| breaks the pattern so it must
 * stay: different Q parameters, mixed dtypes, alpha 2, a bias scale off. */
static kiln_graph_t* build(const case_t* c, bool bad, kiln_array_t* feed, int* n_feed) {
  kiln_graph_t* g = graph_new();
  if (!g) return NULL;
  CHECK_OK(kiln_graph_set_opset(g, "", 21));
  rng = 4242;
  *n_feed = 1;
  const kiln_dtype_t U8 = KILN_DTYPE_U8, I8 = KILN_DTYPE_I8;
  switch (c->kind) {
    case G_MOVE: {
      const int64_t xd[4] = {1, 3, 7, 7};
      input(g, "xq", U8, 4, xd);
      feed[0] = rand_q(U8, 4, xd);
      dq(g, "xq", "x", U8, 0.0271, 3, "x");
      const int64_t k[2] = {3, 3}, s[2] = {2, 2}, p[4] = {1, 1, 1, 1};
      const kiln_attr_t pa[3] = {kiln_attr_make_ints("kernel_shape", 2, k),
                                 kiln_attr_make_ints("strides", 2, s), kiln_attr_make_ints("pads", 4, p)};
      node1(g, "MaxPool", "mp", 1, (const char*[]){"x"}, "m", 3, pa);
      const char* p2 = bad ? "xb" : "x"; /* bad: requantized to another scale */
      qz(g, "m", p2, U8, 0.0272, 3, "mq");
      dq(g, "mq", p2, U8, 0, 0, "md");
      N(g, "Flatten", "f", "md");
      qz(g, "f", p2, U8, 0, 0, "fq");
      dq(g, "fq", p2, U8, 0, 0, "fd");
      const double shp[4] = {-1, 3, 4, 4};
      cst(g, "shape", KILN_DTYPE_I64, 1, (int64_t[]){4}, shp);
      N(g, "Reshape", "r", "fd", "shape");
      qz(g, "r", p2, U8, 0, 0, "y");
      break;
    }
    case G_ADD:
    case G_ADD_I8:
    case G_ADD_BCAST: {
      const kiln_dtype_t t = c->kind == G_ADD_I8 ? I8 : U8;
      const kiln_dtype_t bt = bad ? (t == U8 ? I8 : U8) : t;
      const int64_t ad[4] = {1, 4, 5, 5}, bd[4] = {1, 4, 1, 1};
      const bool bc = c->kind == G_ADD_BCAST;
      input(g, "xq", t, 4, ad);
      input(g, "bq", bt, 4, bc ? bd : ad);
      feed[0] = rand_q(t, 4, ad);
      feed[1] = rand_q(bt, 4, bc ? bd : ad);
      *n_feed = 2;
      dq(g, "xq", "a", t, 0.0512, t == U8 ? 134 : 6, "a");
      dq(g, "bq", "b", bt, 0.0271, bt == U8 ? 0 : -3, "b");
      N(g, "Add", "s", "a", "b");
      const char* r = "s";
      if (c->kind == G_ADD) { /* Relu implied by the zero point at the low end */
        N(g, "Relu", "sr", "s");
        r = "sr";
      }
      qz(g, r, "y", t, 0.0385, t == U8 ? 0 : -128, "y");
      break;
    }
    case G_GAP: {
      const int64_t xd[4] = {4, 16, 7, 7};
      input(g, "xq", U8, 4, xd);
      feed[0] = rand_q(U8, 4, xd);
      dq(g, "xq", "x", U8, 0.0376, 0, "x");
      N(g, "GlobalAveragePool", "p", "x");
      qz(g, "p", "y", bad ? I8 : U8, 0.00691, bad ? -128 : 0, "y");
      break;
    }
    case G_GEMM_T:
    case G_GEMM_N:
    case G_GEMM_RELU: {
      const bool tb = c->kind != G_GEMM_N, per_col = c->kind != G_GEMM_N;
      const int64_t M = 3, K = 20, Nn = 10, xd[2] = {M, K};
      input(g, "xq", U8, 2, xd);
      feed[0] = rand_q(U8, 2, xd);
      const double sx = 0.0069;
      dq(g, "xq", "x", U8, sx, 0, "x");
      const int64_t wd[2] = {tb ? Nn : K, tb ? K : Nn}, ns = per_col ? Nn : 1;
      double w[200], ws[10], wz[10], b[10], bs[10];
      for (int i = 0; i < 200; ++i) w[i] = rnd(-127, 127);
      for (int i = 0; i < 10; ++i) {
        ws[i] = 0.002 + 0.0005 * rnd(0, 8), wz[i] = 0, b[i] = rnd(-3000, 3000);
      }
      cst(g, "wq", I8, 2, wd, w);
      cst(g, "w_s", KILN_DTYPE_F32, per_col ? 1 : 0, &ns, ws);
      cst(g, "w_zp", I8, per_col ? 1 : 0, &ns, wz);
      const kiln_attr_t ax = kiln_attr_make_int("axis", tb ? 0 : 1);
      node1(g, "DequantizeLinear", "wdq", 3, (const char*[]){"wq", "w_s", "w_zp"}, "w", 1, &ax);
      const char* gin[3] = {"x", "w", "b"};
      int n_in = 2;
      if (c->kind != G_GEMM_N) {
        for (int i = 0; i < 10; ++i) bs[i] = (double)((float)sx * (float)ws[per_col ? i : 0]);
        if (bad) bs[3] *= 1.01;
        const int64_t nb = Nn;
        cst(g, "bq", KILN_DTYPE_I32, 1, &nb, b);
        cst(g, "b_s", KILN_DTYPE_F32, 1, &nb, bs);
        const kiln_attr_t a0 = kiln_attr_make_int("axis", 0);
        node1(g, "DequantizeLinear", "bdq", 2, (const char*[]){"bq", "b_s"}, "b", 1, &a0);
        n_in = 3;
      }
      kiln_attr_t ga[2] = {kiln_attr_make_int("transB", tb), kiln_attr_make_float("alpha", 1.0f)};
      if (bad && c->kind == G_GEMM_N) ga[1] = kiln_attr_make_float("alpha", 2.0f);
      node1(g, "Gemm", "gemm", n_in, gin, "gy", 2, ga);
      const char* r = "gy";
      if (c->kind == G_GEMM_RELU) {
        N(g, "Relu", "gr", "gy");
        r = "gr";
      }
      qz(g, r, "y", U8, 0.0122, c->kind == G_GEMM_RELU ? 0 : 125, "y");
      break;
    }
  }
  if (!CHECK_OK(kiln_graph_add_output(g, "y")) || !CHECK_OK(kiln_graph_prepare(g))) {
    kiln_graph_destroy(g);
    return NULL;
  }
  return g;
}

static const case_t kCases[] = {
    {G_MOVE, "MaxPool/Flatten/Reshape", 3, 0},
    {G_ADD, "Add+Relu u8", 1, 0},
    {G_ADD_I8, "Add i8", 1, 0},
    {G_ADD_BCAST, "Add broadcast", 1, 0},
    {G_GAP, "GlobalAveragePool", 1, 1},
    {G_GEMM_T, "Gemm transB per column, bias", 1, 1},
    {G_GEMM_N, "Gemm per tensor, no bias", 1, 1},
    {G_GEMM_RELU, "Gemm+Relu", 1, 1},
};

/* Folded against as written (reference executor), then the folded graph on
 * the target against the reference. */
static void run_case(const case_t* c) {
  kiln_array_t feed[2], f2[2];
  int nf = 0, nf2 = 0;
  kiln_graph_t* ref = build(c, false, feed, &nf);
  kiln_graph_t* g = build(c, false, f2, &nf2);
  free_arrays(f2, nf2);
  if (!ref || !g) goto done;
  CHECK_MSG(fold(g) == c->want_rw, "%s: fold-qdq rewrites", c->what);
  static const char* const f32_ops[] = {"Add", "Gemm", "GlobalAveragePool", "DequantizeLinear",
                                        "QuantizeLinear", "Relu"};
  for (size_t i = 0; i < sizeof f32_ops / sizeof *f32_ops; ++i)
    CHECK_MSG(count_op(g, f32_ops[i]) == 0, "%s: %s left after the fold", c->what, f32_ops[i]);
  kiln_array_t want = {0}, got = {0};
  if (CHECK_OK(kiln_ref_run(ref, feed, NULL, &want)) && CHECK_OK(kiln_ref_run(g, feed, NULL, &got)) &&
      want.dtype == got.dtype && kiln_array_numel(&want) == kiln_array_numel(&got)) {
    int64_t same = 0, n = kiln_array_numel(&want);
    for (int64_t i = 0; i < n; ++i) {
      const double a = kiln_load_f64(want.dtype, want.data, (size_t)i);
      const double b = kiln_load_f64(got.dtype, got.data, (size_t)i);
      CHECK_MSG(fabs(a - b) <= c->tol, "%s: y[%lld] %g folded vs %g as written", c->what, (long long)i, b, a);
      same += a == b;
    }
    printf("%-30s %lld of %lld identical to the graph as written\n", c->what, (long long)same, (long long)n);
    CHECK(same * 100 >= n * 95);
  }
  kiln_array_free(al(), &want);
  kiln_array_free(al(), &got);
  kiln_module_t* m = compile(g);
  kiln_session_t* s = session(m);
  CHECK_MSG(s != NULL, "%s: %s did not compile", g_target_name, c->what);
  if (s) {
    const int before = kiln_test_failures;
    both_agree(g, s, feed);
    if (kiln_test_failures != before) fprintf(stderr, "  (case %s)\n", c->what);
  }
  kiln_session_destroy(s);
  kiln_module_release(m);
done:
  free_arrays(feed, nf);
  kiln_graph_destroy(ref);
  kiln_graph_destroy(g);
}

/* Broken patterns stay as written (the fold would change the results). */
static void test_left_alone(void) {
  static const struct {
    kind_t kind;
    const char* what;
    const char* stays;
    int rw;
  } cases[] = {
      {G_MOVE, "MaxPool requantized to another scale", "MaxPool", 2}, /* Flatten, Reshape still fold */
      {G_ADD_I8, "Add of i8 and u8", "Add", 0},
      {G_GAP, "GlobalAveragePool quantized to another dtype", "GlobalAveragePool", 0},
      {G_GEMM_T, "Gemm with a bias scale off s_x * s_w", "Gemm", 0},
      {G_GEMM_N, "Gemm with alpha 2", "Gemm", 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; ++i) {
    const case_t c = {cases[i].kind, cases[i].what, 0, 0};
    kiln_array_t feed[2];
    int nf = 0;
    kiln_graph_t* g = build(&c, true, feed, &nf);
    free_arrays(feed, nf);
    if (!g) continue;
    CHECK_MSG(fold(g) == cases[i].rw, "%s: rewrites", cases[i].what);
    CHECK_MSG(count_op(g, cases[i].stays) == 1, "%s: %s folded", cases[i].what, cases[i].stays);
    kiln_graph_destroy(g);
  }
}

/* The new ops' bad parameters: an error naming the node, never a result. */
static void test_bad_inputs(void) {
  /* QOperator models name them in onnxruntime's domain; only these two */
  CHECK(kiln_op_lookup("com.microsoft", "QLinearAdd") != NULL);
  CHECK(kiln_op_lookup("com.microsoft", "QLinearGlobalAveragePool") != NULL);
  CHECK(kiln_op_lookup("com.microsoft", "QLinearConv") == NULL);
  const int64_t xd[4] = {1, 2, 3, 3}, two[1] = {2};
  const double s2[2] = {0.1, 0.2}, z2[2] = {0, 0};
  for (int k = 0; k < 5; ++k) {
    kiln_graph_t* g = graph_new();
    if (!g) continue;
    CHECK_OK(kiln_graph_set_opset(g, "", 21));
    input(g, "a", KILN_DTYPE_U8, 4, xd);
    input(g, "b", k == 1 ? KILN_DTYPE_I8 : KILN_DTYPE_U8, 4, xd);
    scal(g, "s", KILN_DTYPE_F32, k == 0 ? 0.0 : 0.1);
    scal(g, "z", KILN_DTYPE_U8, 0);
    cst(g, "s2", KILN_DTYPE_F32, 1, two, s2);
    cst(g, "z2", KILN_DTYPE_U8, 1, two, z2);
    const char* needle;
    if (k < 3) {
      needle = k == 0 ? "positive" : k == 1 ? "dtype" : "per-tensor";
      node1(g, "QLinearAdd", "qadd", 8, (const char*[]){"a", "s", "z", "b", k == 2 ? "s2" : "s", k == 2 ? "z2" : "z", "s", "z"},
            "y", 0, NULL);
    } else {
      const kiln_attr_t cl = kiln_attr_make_int("channels_last", 1);
      needle = k == 3 ? "channels_last" : "zero point";
      scal(g, "zi", KILN_DTYPE_I8, 0);
      node1(g, "QLinearGlobalAveragePool", "qgap", 5, (const char*[]){"a", "s", k == 4 ? "zi" : "z", "s", "z"}, "y",
            k == 3 ? 1 : 0, &cl);
    }
    CHECK_OK(kiln_graph_add_output(g, "y"));
    kiln_status_t st = kiln_graph_prepare(g);
    CHECK_MSG(st && strstr(kiln_status_message(st), k < 3 ? "qadd" : "qgap"), "case %d: expected an error naming the node, got %s", k,
              st ? kiln_status_message(st) : "success");
    CHECK_MSG(st && strstr(kiln_status_message(st), needle), "case %d: '%s' not in %s", k, needle,
              st ? kiln_status_message(st) : "success");
    kiln_status_free(st);
    kiln_graph_destroy(g);
  }
}

int main(int argc, char** argv) {
  int rc = target_open(argc, argv);
  if (rc) return rc;
  for (size_t i = 0; i < sizeof kCases / sizeof *kCases; ++i) run_case(&kCases[i]);
  RUN(test_left_alone);
  RUN(test_bad_inputs);
  kiln_device_release(g_device);
  return kiln_test_finish();
}
