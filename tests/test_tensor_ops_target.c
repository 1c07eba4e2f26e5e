/* Tensor ops whose ONNX node tests kiln cannot run (they are f64 only) or
 * do not reach the corners, compiled for one target and checked bit for
 * bit against the reference executor:
 *
 *   test_tensor_ops_target [--target cpu|opencl|vulkan]   (default cpu)
 *
 *   - CumSum over f32 and i32, every axis position, exclusive and reverse;
 *   - TopK largest and smallest, on either axis, with ties (broken by the
 *     lower index) and NaN (above every number), values and indices, with
 *     K near the axis and far below it (the reference's heap);
 *   - ReverseSequence with run-time lengths on both axis orders; a length
 *     outside [0, T] fails the run on both naming the node, and the session
 *     runs clean again afterwards;
 *   - Einsum: attention's batched products, transposes, inner products,
 *     diagonals, implicit outputs and broadcast ellipses, f32 within 1e-5
 *     (the reference sums in double) and i32 exactly;
 *   - Range and the Hann / Hamming / Blackman windows too large to fold at
 *     load, computed by a kernel; OneHot with
 *     float indices (NaN, out of depth, negative);
 *   - MelWeightMatrix of 4097 x 64 from constant inputs (computed at
 *     compile time, copied by a kernel), exactly the reference's;
 *   - Det of a batch of 6 x 6 matrices needing row swaps, one singular,
 *     within 1e-4 relative of the reference (LU in double);
 *   - chains the fusion pass rewrites (the injective index ops inlined into
 *     their consumers, element-wise ops after a scatter) against the
 *     reference, exactly.
 */
#include <math.h>

#include "target_graph_util.h"

/* x[2,5,3] (f32 or i32) of mixed signs; a constant axis input. */
static void cumsum_case(kiln_dtype_t t, int64_t axis, int64_t exclusive, int64_t reverse) {
  kiln_graph_t* g = graph_new();
  if (!g) return;
  int64_t d[3] = {2, 5, 3}, one[1] = {1};
  kiln_array_t ax = arr(KILN_DTYPE_I64, 1, one);
  if (ax.data) ((int64_t*)ax.data)[0] = axis;
  kiln_attr_t at[2] = {kiln_attr_make_int("exclusive", exclusive), kiln_attr_make_int("reverse", reverse)};
  bool ok = ax.data && input(g, "x", t, 3, d) && CHECK_OK(kiln_graph_add_initializer(g, "axis", &ax, NULL)) &&
            node1(g, "CumSum", "cumsum", 2, (const char*[]){"x", "axis"}, "y", 2, at) &&
            CHECK_OK(kiln_graph_add_output(g, "y")) && CHECK_OK(kiln_graph_prepare(g)) &&
            CHECK_OK(kiln_graph_optimize(g, 1, NULL));
  kiln_module_t* m = ok ? compile(g) : NULL;
  kiln_session_t* s = session(m);
  CHECK_MSG(s != NULL, "%s: CumSum axis %lld did not compile", g_target_name, (long long)axis);
  kiln_array_t in = arr(t, 3, d);
  for (int64_t i = 0; in.data && i < 30; ++i) kiln_store_f64(t, in.data, (size_t)i, (double)((i * 7) % 11) * 0.37 - 1.5);
  if (in.data && s) both_agree(g, s, &in);
  kiln_array_free(al(), &in);
  kiln_array_free(al(), &ax);
  kiln_session_destroy(s);
  kiln_module_release(m);
  kiln_graph_destroy(g);
}

static void test_cumsum(void) {
  for (int64_t axis = -1; axis < 3; ++axis)
    for (int e = 0; e < 2; ++e)
      for (int r = 0; r < 2; ++r) cumsum_case(KILN_DTYPE_F32, axis, e, r);
  cumsum_case(KILN_DTYPE_I32, 1, 0, 0);
  cumsum_case(KILN_DTYPE_I32, 2, 1, 1);
}

/* x f32[4,cols] with repeated values and NaNs; K = |k| on |axis| (the
 * reference takes a heap of the K best where 8 K < the axis). */
static void topk_case(int64_t axis, int64_t largest, int64_t cols, int64_t k) {
  kiln_graph_t* g = graph_new();
  if (!g) return;
  int64_t d[2] = {4, cols}, one[1] = {1};
  kiln_array_t kk = arr(KILN_DTYPE_I64, 1, one);
  if (kk.data) ((int64_t*)kk.data)[0] = k;
  kiln_attr_t at[2] = {kiln_attr_make_int("axis", axis), kiln_attr_make_int("largest", largest)};
  bool ok = kk.data && input(g, "x", KILN_DTYPE_F32, 2, d) && CHECK_OK(kiln_graph_add_initializer(g, "k", &kk, NULL)) &&
            CHECK_OK(kiln_graph_add_node(g, "TopK", "topk", 2, (const char*[]){"x", "k"}, 2,
                                         (const char*[]){"v", "i"}, 2, at, NULL)) &&
            CHECK_OK(kiln_graph_add_output(g, "v")) && CHECK_OK(kiln_graph_add_output(g, "i")) &&
            CHECK_OK(kiln_graph_prepare(g)) && CHECK_OK(kiln_graph_optimize(g, 1, NULL));
  kiln_module_t* m = ok ? compile(g) : NULL;
  kiln_session_t* s = session(m);
  CHECK_MSG(s != NULL, "%s: TopK did not compile", g_target_name);
  kiln_array_t in = arr(KILN_DTYPE_F32, 2, d);
  for (int i = 0; in.data && i < 4 * cols; ++i) {
    float v = (float)((i * 5) % 7) - 3.0f + (float)((i * 7919) % 61) * 0.125f; /* many ties */
    if (i % 10 == 4) v = __builtin_nanf("");
    ((float*)in.data)[i] = v;
  }
  if (in.data && s) both_agree_n(g, s, &in, 2);
  kiln_array_free(al(), &in);
  kiln_array_free(al(), &kk);
  kiln_session_destroy(s);
  kiln_module_release(m);
  kiln_graph_destroy(g);
}

static void test_topk(void) {
  for (int64_t axis = -1; axis <= 0; ++axis)
    for (int64_t l = 0; l < 2; ++l) topk_case(axis, l, 9, axis == 0 ? 3 : 4);
  for (int64_t l = 0; l < 2; ++l) {
    topk_case(-1, l, 301, 5);
    topk_case(-1, l, 301, 37);
  }
}

/* x f32[5,3,2] as [T, B, 2] (time_axis 0) or [B, T, 2] read as such. */
static void reverse_sequence_case(int64_t batch_axis) {
  kiln_graph_t* g = graph_new();
  if (!g) return;
  const int64_t T = batch_axis == 1 ? 5 : 3, B = batch_axis == 1 ? 3 : 5;
  int64_t d[3] = {5, 3, 2}, nb[1] = {B};
  kiln_attr_t at[2] = {kiln_attr_make_int("batch_axis", batch_axis), kiln_attr_make_int("time_axis", 1 - batch_axis)};
  bool ok = input(g, "x", KILN_DTYPE_F32, 3, d) && input(g, "lens", KILN_DTYPE_I64, 1, nb) &&
            node1(g, "ReverseSequence", "revseq", 2, (const char*[]){"x", "lens"}, "y", 2, at) &&
            CHECK_OK(kiln_graph_add_output(g, "y")) && CHECK_OK(kiln_graph_prepare(g)) &&
            CHECK_OK(kiln_graph_optimize(g, 1, NULL));
  kiln_module_t* m = ok ? compile(g) : NULL;
  kiln_session_t* s = session(m);
  CHECK_MSG(s != NULL, "%s: ReverseSequence did not compile", g_target_name);
  kiln_array_t in[2] = {arr(KILN_DTYPE_F32, 3, d), arr(KILN_DTYPE_I64, 1, nb)};
  if (in[0].data && in[1].data && s) {
    for (int i = 0; i < 30; ++i) ((float*)in[0].data)[i] = (float)i;
    for (int64_t b = 0; b < B; ++b) ((int64_t*)in[1].data)[b] = (b * 2) % (T + 1);
    both_agree(g, s, in);
    ((int64_t*)in[1].data)[B - 1] = T + 1;
    both_fail(g, s, in, KILN_OUT_OF_RANGE, "revseq", "sequence length out of range");
    ((int64_t*)in[1].data)[B - 1] = -1;
    both_fail(g, s, in, KILN_OUT_OF_RANGE, "revseq", "sequence length out of range");
    ((int64_t*)in[1].data)[B - 1] = T;
    both_agree(g, s, in);
  }
  free_arrays(in, 2);
  kiln_session_destroy(s);
  kiln_module_release(m);
  kiln_graph_destroy(g);
}

static void test_reverse_sequence(void) {
  reverse_sequence_case(1);
  reverse_sequence_case(0);
}

/* Einsum |eq| over f32 (or i32) operands of the given shapes. */
static kiln_graph_t* einsum_graph(const char* eq, kiln_dtype_t t, int n_in, const int* ranks,
                                  const int64_t (*dims)[4], int opt) {
  kiln_graph_t* g = graph_new();
  if (!g) return NULL;
  static const char* const names[3] = {"a", "b", "c"};
  kiln_attr_t at = kiln_attr_make_string("equation", eq);
  bool ok = true;
  for (int i = 0; i < n_in; ++i) ok = ok && input(g, names[i], t, ranks[i], dims[i]);
  ok = ok && node1(g, "Einsum", "einsum", n_in, names, "y", 1, &at) && CHECK_OK(kiln_graph_add_output(g, "y")) &&
       CHECK_OK(kiln_graph_prepare(g)) && CHECK_OK(kiln_graph_optimize(g, opt, NULL));
  if (!ok) {
    kiln_graph_destroy(g);
    return NULL;
  }
  return g;
}

/* Compiled at -O0 (the generic Einsum kernel) and -O1 (where |matmul|, the
 * einsum-to-matmul pass must have made it a MatMul) against the reference
 * run of the graph as built. */
static void einsum_case_at(const char* eq, kiln_dtype_t t, int n_in, const int* ranks, const int64_t (*dims)[4],
                           int opt, bool matmul) {
  kiln_graph_t* g0 = einsum_graph(eq, t, n_in, ranks, dims, 0);
  kiln_graph_t* g = einsum_graph(eq, t, n_in, ranks, dims, opt);
  int32_t n_matmul = 0;
  for (int32_t i = 0; g && i < g->n_nodes; ++i) n_matmul += !strcmp(g->nodes[i].op_type, "MatMul");
  CHECK_MSG(!g || n_matmul == (opt && matmul ? 1 : 0), "Einsum '%s' at -O%d: %d MatMul nodes", eq, opt, (int)n_matmul);
  kiln_module_t* m = g && g0 ? compile(g) : NULL;
  kiln_session_t* s = session(m);
  CHECK_MSG(s != NULL, "%s: Einsum '%s' did not compile", g_target_name, eq);
  kiln_array_t in[3];
  memset(in, 0, sizeof in);
  bool have = true;
  for (int i = 0; i < n_in; ++i) {
    in[i] = arr(t, ranks[i], dims[i]);
    have = have && in[i].data;
    for (int64_t q = 0; in[i].data && q < kiln_array_numel(&in[i]); ++q)
      kiln_store_f64(t, in[i].data, (size_t)q, (double)(((q + 3 * i) * 7) % 13 - 6) * (t == KILN_DTYPE_F32 ? 0.31 : 1.0));
  }
  kiln_array_t want[1], got[1];
  memset(want, 0, sizeof want);
  memset(got, 0, sizeof got);
  if (s && have && CHECK_OK(kiln_ref_run(g0, in, NULL, want)) && CHECK_OK(kiln_session_run(s, in, got))) {
    CHECK_MSG(got[0].nbytes == want[0].nbytes && got[0].dtype == want[0].dtype, "%s: Einsum '%s': output shape",
              g_target_name, eq);
    for (int64_t q = 0; got[0].nbytes == want[0].nbytes && q < kiln_array_numel(&want[0]); ++q) {
      double w = kiln_load_f64(t, want[0].data, (size_t)q), v = kiln_load_f64(t, got[0].data, (size_t)q);
      double tol = t == KILN_DTYPE_F32 ? 1e-5 * (1.0 + fabs(w)) : 0.0;
      CHECK_MSG(fabs(v - w) <= tol, "%s: Einsum '%s' element %lld: %.9g, reference %.9g", g_target_name, eq,
                (long long)q, v, w);
    }
  }
  free_arrays(want, 1);
  free_arrays(got, 1);
  free_arrays(in, n_in);
  kiln_session_destroy(s);
  kiln_module_release(m);
  kiln_graph_destroy(g);
  kiln_graph_destroy(g0);
}

static void einsum_case(const char* eq, kiln_dtype_t t, int n_in, const int* ranks, const int64_t (*dims)[4],
                        bool matmul) {
  einsum_case_at(eq, t, n_in, ranks, dims, 0, matmul);
  einsum_case_at(eq, t, n_in, ranks, dims, 1, matmul);
}

static void test_einsum(void) {
  const kiln_dtype_t F = KILN_DTYPE_F32;
  einsum_case("bhid,bhjd->bhij", F, 2, (const int[]){4, 4}, (const int64_t[][4]){{2, 2, 3, 8}, {2, 2, 5, 8}}, true);
  einsum_case("bhij,bhjd->bhid", F, 2, (const int[]){4, 4}, (const int64_t[][4]){{2, 2, 3, 5}, {2, 2, 5, 8}}, true);
  einsum_case("bsd,de->bse", F, 2, (const int[]){3, 2}, (const int64_t[][4]){{2, 7, 16}, {16, 6}}, true);
  einsum_case("ij->ji", F, 1, (const int[]){2}, (const int64_t[][4]){{3, 5}}, false);
  einsum_case("i,i", F, 2, (const int[]){1, 1}, (const int64_t[][4]){{9}, {9}}, false);
  einsum_case("i,j->ij", F, 2, (const int[]){1, 1}, (const int64_t[][4]){{4}, {3}}, true);
  einsum_case("...ii->...i", F, 1, (const int[]){3}, (const int64_t[][4]){{2, 3, 3}}, false);
  einsum_case("ij->", F, 1, (const int[]){2}, (const int64_t[][4]){{3, 4}}, false);
  einsum_case("bij,bjk", F, 2, (const int[]){3, 3}, (const int64_t[][4]){{2, 3, 4}, {2, 4, 5}}, true);
  einsum_case("...ij,...jk->...ik", F, 2, (const int[]){4, 3}, (const int64_t[][4]){{2, 1, 3, 4}, {5, 4, 2}}, false);
  einsum_case("...ij,...jk->...ik", F, 2, (const int[]){3, 3}, (const int64_t[][4]){{2, 3, 4}, {2, 4, 5}}, true);
  einsum_case("bqhd,bkhd->bhqk", F, 2, (const int[]){4, 4}, (const int64_t[][4]){{2, 3, 2, 8}, {2, 5, 2, 8}}, true);
  einsum_case("ij,jk,kl->il", F, 3, (const int[]){2, 2, 2}, (const int64_t[][4]){{2, 3}, {3, 4}, {4, 2}}, false);
  einsum_case("ij,jk->ik", KILN_DTYPE_I32, 2, (const int[]){2, 2}, (const int64_t[][4]){{3, 4}, {4, 5}}, false);
}

/* Range of graph inputs: its size depends on their values, which kiln
 * cannot compile; the plan says so naming the node. Constant inputs fold. */
static void test_range_runtime_unsupported(void) {
  kiln_graph_t* g = graph_new();
  if (!g) return;
  bool ok = input(g, "a", KILN_DTYPE_I64, 0, NULL) && input(g, "b", KILN_DTYPE_I64, 0, NULL) &&
            input(g, "d", KILN_DTYPE_I64, 0, NULL) &&
            node1(g, "Range", "range", 3, (const char*[]){"a", "b", "d"}, "y", 0, NULL) &&
            CHECK_OK(kiln_graph_add_output(g, "y")) && CHECK_OK(kiln_graph_prepare(g));
  kiln_plan_options_t po = {g_target->lowering, 2, 0, 0, 0, g_target->ew_lanes};
  kiln_plan_t* plan = NULL;
  if (ok) {
    kiln_status_t st = kiln_plan_build(g, &po, al(), &plan);
    CHECK_MSG(st && strstr(kiln_status_message(st), "node 'range' (Range)"), "expected an error naming the Range node");
    CHECK_ERR(st, KILN_UNSUPPORTED, "depends on input values known only at run time");
  }
  kiln_plan_destroy(plan);
  kiln_graph_destroy(g);
}

/* Range with constant inputs too large to fold at load (2^17 elements):
 * computed by a kernel; f32 within 1e-6 relative (the reference computes
 * start + i * delta in double), i32 exactly. */
static void range_case(kiln_dtype_t t, double start, double delta) {
  kiln_graph_t* g = graph_new();
  if (!g) return;
  const int64_t n = 1 << 17;
  kiln_array_t v[3] = {arr(t, 0, NULL), arr(t, 0, NULL), arr(t, 0, NULL)};
  const double vals[3] = {start, start + delta * (double)n, delta};
  static const char* const names[3] = {"start", "limit", "delta"};
  bool ok = true;
  for (int k = 0; k < 3; ++k) {
    ok = ok && v[k].data;
    if (v[k].data) kiln_store_f64(t, v[k].data, 0, vals[k]);
    ok = ok && CHECK_OK(kiln_graph_add_initializer(g, names[k], &v[k], NULL));
  }
  ok = ok && node1(g, "Range", "range_big", 3, names, "y", 0, NULL) && CHECK_OK(kiln_graph_add_output(g, "y")) &&
       CHECK_OK(kiln_graph_prepare(g));
  kiln_module_t* m = ok ? compile(g) : NULL;
  kiln_session_t* s = session(m);
  CHECK_MSG(s != NULL, "%s: a large constant Range did not compile", g_target_name);
  kiln_array_t want[1], got[1];
  memset(want, 0, sizeof want);
  memset(got, 0, sizeof got);
  if (s && CHECK_OK(kiln_ref_run(g, NULL, NULL, want)) && CHECK_OK(kiln_session_run(s, NULL, got))) {
    CHECK(got[0].nbytes == want[0].nbytes && kiln_array_numel(&got[0]) == n);
    for (int64_t i = 0; got[0].nbytes == want[0].nbytes && i < n; ++i) {
      double w = kiln_load_f64(t, want[0].data, (size_t)i), x = kiln_load_f64(t, got[0].data, (size_t)i);
      double tol = t == KILN_DTYPE_F32 ? 1e-6 * (1.0 + fabs(w)) : 0.0;
      if (fabs(x - w) > tol) {
        CHECK_MSG(false, "%s: Range element %lld: %.9g, reference %.9g", g_target_name, (long long)i, x, w);
        break;
      }
    }
  }
  free_arrays(want, 1);
  free_arrays(got, 1);
  free_arrays(v, 3);
  kiln_session_destroy(s);
  kiln_module_release(m);
  kiln_graph_destroy(g);
}

/* A window of a constant size too large to fold at load (2^17), periodic or
 * symmetric: computed by a kernel in f32, within 2e-6 of the reference
 * (double). */
static void window_case(const char* op, int64_t periodic) {
  kiln_graph_t* g = graph_new();
  if (!g) return;
  const int64_t n = 1 << 17;
  kiln_array_t sz = arr(KILN_DTYPE_I64, 0, NULL);
  if (sz.data) ((int64_t*)sz.data)[0] = n;
  kiln_attr_t at[1] = {kiln_attr_make_int("periodic", periodic)};
  bool ok = sz.data && CHECK_OK(kiln_graph_add_initializer(g, "size", &sz, NULL)) &&
            node1(g, op, "window", 1, (const char*[]){"size"}, "y", 1, at) &&
            CHECK_OK(kiln_graph_add_output(g, "y")) && CHECK_OK(kiln_graph_prepare(g));
  kiln_module_t* m = ok ? compile(g) : NULL;
  kiln_session_t* s = session(m);
  CHECK_MSG(s != NULL, "%s: a large constant %s did not compile", g_target_name, op);
  kiln_array_t want[1], got[1];
  memset(want, 0, sizeof want);
  memset(got, 0, sizeof got);
  if (s && CHECK_OK(kiln_ref_run(g, NULL, NULL, want)) && CHECK_OK(kiln_session_run(s, NULL, got))) {
    CHECK(got[0].nbytes == want[0].nbytes && kiln_array_numel(&got[0]) == n);
    for (int64_t i = 0; got[0].nbytes == want[0].nbytes && i < n; ++i) {
      const float w = ((const float*)want[0].data)[i], x = ((const float*)got[0].data)[i];
      if (fabsf(x - w) > 2e-6f) {
        CHECK_MSG(false, "%s: %s element %lld: %.9g, reference %.9g", g_target_name, op, (long long)i, x, w);
        break;
      }
    }
  }
  free_arrays(want, 1);
  free_arrays(got, 1);
  free_arrays(&sz, 1);
  kiln_session_destroy(s);
  kiln_module_release(m);
  kiln_graph_destroy(g);
}

static void test_windows(void) {
  window_case("HannWindow", 1);
  window_case("HammingWindow", 0);
  window_case("BlackmanWindow", 1);
  window_case("BlackmanWindow", 0);
}

static void test_mel_weight_matrix(void) {
  kiln_graph_t* g = graph_new();
  if (!g) return;
  static const char* const names[5] = {"bins", "dft", "rate", "lo", "hi"};
  const kiln_dtype_t dt[5] = {KILN_DTYPE_I64, KILN_DTYPE_I64, KILN_DTYPE_I64, KILN_DTYPE_F32, KILN_DTYPE_F32};
  const double vals[5] = {64, 8192, 16000, 20, 8000};
  kiln_array_t v[5];
  bool ok = true;
  for (int k = 0; k < 5; ++k) {
    v[k] = arr(dt[k], 0, NULL);
    ok = ok && v[k].data;
    if (v[k].data) kiln_store_f64(dt[k], v[k].data, 0, vals[k]);
    ok = ok && CHECK_OK(kiln_graph_add_initializer(g, names[k], &v[k], NULL));
  }
  ok = ok && node1(g, "MelWeightMatrix", "mel", 5, names, "y", 0, NULL) && CHECK_OK(kiln_graph_add_output(g, "y")) &&
       CHECK_OK(kiln_graph_prepare(g));
  kiln_module_t* m = ok ? compile(g) : NULL;
  kiln_session_t* s = session(m);
  CHECK_MSG(s != NULL, "%s: a large MelWeightMatrix did not compile", g_target_name);
  kiln_array_t want[1], got[1];
  memset(want, 0, sizeof want);
  memset(got, 0, sizeof got);
  if (s && CHECK_OK(kiln_ref_run(g, NULL, NULL, want)) && CHECK_OK(kiln_session_run(s, NULL, got))) {
    CHECK(got[0].nbytes == want[0].nbytes && kiln_array_numel(&got[0]) == 4097 * 64);
    CHECK(got[0].nbytes == want[0].nbytes && memcmp(got[0].data, want[0].data, got[0].nbytes) == 0);
  }
  free_arrays(want, 1);
  free_arrays(got, 1);
  free_arrays(v, 5);
  kiln_session_destroy(s);
  kiln_module_release(m);
  kiln_graph_destroy(g);
}

static void test_det(void) {
  kiln_graph_t* g = graph_new();
  if (!g) return;
  int64_t d[3] = {4, 6, 6};
  bool ok = input(g, "x", KILN_DTYPE_F32, 3, d) && node1(g, "Det", "det", 1, (const char*[]){"x"}, "y", 0, NULL) &&
            CHECK_OK(kiln_graph_add_output(g, "y")) && CHECK_OK(kiln_graph_prepare(g));
  kiln_module_t* m = ok ? compile(g) : NULL;
  kiln_session_t* s = session(m);
  CHECK_MSG(s != NULL, "%s: Det did not compile", g_target_name);
  kiln_array_t in = arr(KILN_DTYPE_F32, 3, d), want[1], got[1];
  memset(want, 0, sizeof want);
  memset(got, 0, sizeof got);
  float* x = in.data;
  for (int i = 0; x && i < 144; ++i) x[i] = (float)((i * i * 7 + i * 13) % 29) * 0.25f - 3.5f;
  for (int j = 0; x && j < 6; ++j) x[72 + 2 * 6 + j] = x[72 + 4 * 6 + j]; /* matrix 2: rows 2 and 4 equal */
  for (int j = 0; x && j < 6; ++j) x[108 + j] = 0.0f;                      /* matrix 3: a zero first row */
  if (s && x && CHECK_OK(kiln_ref_run(g, &in, NULL, want)) && CHECK_OK(kiln_session_run(s, &in, got))) {
    for (int b = 0; b < 4; ++b) {
      const float w = ((const float*)want[0].data)[b], v = ((const float*)got[0].data)[b];
      CHECK_MSG(fabsf(v - w) <= 1e-4f * (1.0f + fabsf(w)), "%s: Det of matrix %d: %.9g, reference %.9g",
                g_target_name, b, v, w);
    }
    CHECK(fabsf(((const float*)want[0].data)[0]) > 1.0f); /* a matrix that needs its pivots */
  }
  free_arrays(want, 1);
  free_arrays(got, 1);
  free_arrays(&in, 1);
  kiln_session_destroy(s);
  kiln_module_release(m);
  kiln_graph_destroy(g);
}

static void test_range_large_constant(void) {
  range_case(KILN_DTYPE_F32, -3.5, 0.25);
  range_case(KILN_DTYPE_I32, 100, -3);
  range_case(KILN_DTYPE_I64, -7, 5);
}

/* OneHot with float indices: truncated, negative ones count from the end,
 * NaN, out-of-depth and huge ones match nothing; depth 5 on axis 1. */
static void test_one_hot_float(void) {
  kiln_graph_t* g = graph_new();
  if (!g) return;
  int64_t di[1] = {8}, two[1] = {2};
  kiln_array_t depth = arr(KILN_DTYPE_F32, 0, NULL), vals = arr(KILN_DTYPE_I32, 1, two);
  if (depth.data) ((float*)depth.data)[0] = 5.7f;
  if (vals.data) ((int32_t*)vals.data)[0] = -4, ((int32_t*)vals.data)[1] = 9;
  kiln_attr_t ax = kiln_attr_make_int("axis", 0);
  bool ok = depth.data && vals.data && input(g, "i", KILN_DTYPE_F32, 1, di) &&
            CHECK_OK(kiln_graph_add_initializer(g, "depth", &depth, NULL)) &&
            CHECK_OK(kiln_graph_add_initializer(g, "vals", &vals, NULL)) &&
            node1(g, "OneHot", "onehot", 3, (const char*[]){"i", "depth", "vals"}, "y", 1, &ax) &&
            CHECK_OK(kiln_graph_add_output(g, "y")) && CHECK_OK(kiln_graph_prepare(g)) &&
            CHECK_OK(kiln_graph_optimize(g, 1, NULL));
  kiln_module_t* m = ok ? compile(g) : NULL;
  kiln_session_t* s = session(m);
  CHECK_MSG(s != NULL, "%s: OneHot did not compile", g_target_name);
  kiln_array_t in = arr(KILN_DTYPE_F32, 1, di);
  const float iv[8] = {0.0f, 4.9f, -1.0f, -5.0f, 5.0f, __builtin_nanf(""), 1e30f, -2.5f};
  if (in.data && s) {
    memcpy(in.data, iv, sizeof iv);
    both_agree(g, s, &in);
  }
  kiln_array_free(al(), &in);
  kiln_array_free(al(), &depth);
  kiln_array_free(al(), &vals);
  kiln_session_destroy(s);
  kiln_module_release(m);
  kiln_graph_destroy(g);
}

/* x[4,6] -> Tile([2,1]) -> Trilu(k=1) -> GatherElements(idx, axis 1) -> Relu,
 * and x -> ScatterND(idx2, upd, add) -> Relu -> Neg, compiled with fusion. */
static void test_fused_chains(void) {
  kiln_graph_t* g = graph_new();
  if (!g) return;
  int64_t dx[2] = {4, 6}, di[2] = {8, 3}, d2[2] = {3, 1}, du[2] = {3, 6}, two[1] = {2};
  kiln_array_t rep = arr(KILN_DTYPE_I64, 1, two), k1 = arr(KILN_DTYPE_I64, 0, NULL);
  if (rep.data) ((int64_t*)rep.data)[0] = 2, ((int64_t*)rep.data)[1] = 1;
  if (k1.data) ((int64_t*)k1.data)[0] = 1;
  kiln_attr_t ax = kiln_attr_make_int("axis", 1), red = kiln_attr_make_string("reduction", "add");
  bool ok = rep.data && k1.data && input(g, "x", KILN_DTYPE_F32, 2, dx) && input(g, "idx", KILN_DTYPE_I64, 2, di) &&
            input(g, "idx2", KILN_DTYPE_I64, 2, d2) && input(g, "upd", KILN_DTYPE_F32, 2, du) &&
            CHECK_OK(kiln_graph_add_initializer(g, "rep", &rep, NULL)) &&
            CHECK_OK(kiln_graph_add_initializer(g, "k1", &k1, NULL)) &&
            node1(g, "Tile", "tile", 2, (const char*[]){"x", "rep"}, "t", 0, NULL) &&
            node1(g, "Trilu", "trilu", 2, (const char*[]){"t", "k1"}, "u", 0, NULL) &&
            node1(g, "GatherElements", "ge", 2, (const char*[]){"u", "idx"}, "v", 1, &ax) &&
            node1(g, "Relu", "relu", 1, (const char*[]){"v"}, "y", 0, NULL) &&
            node1(g, "ScatterND", "snd", 3, (const char*[]){"x", "idx2", "upd"}, "s", 1, &red) &&
            node1(g, "Relu", "relu2", 1, (const char*[]){"s"}, "r", 0, NULL) &&
            node1(g, "Neg", "neg", 1, (const char*[]){"r"}, "z", 0, NULL) && CHECK_OK(kiln_graph_add_output(g, "y")) &&
            CHECK_OK(kiln_graph_add_output(g, "z")) && CHECK_OK(kiln_graph_prepare(g)) &&
            CHECK_OK(kiln_graph_optimize(g, 1, NULL));
  kiln_module_t* m = ok ? compile(g) : NULL;
  kiln_session_t* s = session(m);
  CHECK_MSG(s != NULL, "%s: the fused chains did not compile", g_target_name);
  kiln_array_t in[4] = {arr(KILN_DTYPE_F32, 2, dx), arr(KILN_DTYPE_I64, 2, di), arr(KILN_DTYPE_I64, 2, d2),
                        arr(KILN_DTYPE_F32, 2, du)};
  if (s && in[0].data && in[1].data && in[2].data && in[3].data) {
    for (int i = 0; i < 24; ++i) ((float*)in[0].data)[i] = (float)(i % 7) - 2.5f;
    for (int i = 0; i < 24; ++i) ((int64_t*)in[1].data)[i] = (i * 5) % 12 - 6;
    const int64_t rows[3] = {2, -1, 2}; /* a repeated row adds twice */
    memcpy(in[2].data, rows, sizeof rows);
    for (int i = 0; i < 18; ++i) ((float*)in[3].data)[i] = (float)(i % 5) - 1.75f;
    both_agree_n(g, s, in, 2);
  }
  free_arrays(in, 4);
  kiln_array_free(al(), &rep);
  kiln_array_free(al(), &k1);
  kiln_session_destroy(s);
  kiln_module_release(m);
  kiln_graph_destroy(g);
}

int main(int argc, char** argv) {
  int rc = target_open(argc, argv);
  if (rc) return rc;
  RUN(test_cumsum);
  RUN(test_topk);
  RUN(test_reverse_sequence);
  RUN(test_einsum);
  RUN(test_fused_chains);
  RUN(test_range_runtime_unsupported);
  RUN(test_range_large_constant);
  RUN(test_windows);
  RUN(test_det);
  RUN(test_mel_weight_matrix);
  RUN(test_one_hot_float);
  kiln_device_release(g_device);
  return kiln_test_finish();
}
