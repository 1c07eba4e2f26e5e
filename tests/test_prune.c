/* kiln prune's library side (compiler/prune.h, compiler/prune_deps.h) and
 * its ONNX writer (frontend/onnx_prune.h) on models built here whose least
 * important channels are dead by construction (zero filters, zero biases,
 * BatchNormalization that maps 0 to 0): removing exactly those channels must
 * leave the outputs unchanged, so a wrong mask, a channel group not tied, a
 * wrong Concat offset or Flatten block shows as an output difference.
 * Also: the groups (residual ties, the graph output left whole), a Reshape
 * that mixes channels left unpruned naming it, the MatMul path, and the
 * errors (--keep, budgets, counts). The onnxruntime side is
 * tests/models/test_digits_prune.py. */
#include "bad_model_util.h" /* first: it defines _GNU_SOURCE */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/calibrate.h"
#include "compiler/prune.h"
#include "compiler/ref_exec.h"
#include "frontend/onnx.h"
#include "frontend/onnx_prune.h"
#include "testing.h"

static char g_dir[256];

static float* fill(bm_model_t* b, int64_t n, uint32_t seed) {
  float* v = bm_alloc(b, sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    float r = (float)((double)(seed >> 8) / (double)(1u << 24) * 2.0 - 1.0);
    v[i] = r >= 0 ? 0.3f + r : r - 0.3f; /* |v| >= 0.3: every live filter beats a dead one */
  }
  return v;
}

/* Zeroes channel |c| of axis 0 (|per| elements each). */
static void zero_ch(float* v, int64_t c, int64_t per) { memset(v + c * per, 0, sizeof(float) * (size_t)per); }

/* x[1,3,6,6] -> convA(8) -> BN -> Relu = a; convB(a, 1x1, 8) = b; Add(a, b)
 * ties A and B; depthwise 3x3 (group 8) = d; convC(x, 1x1, 4, no bias) = e;
 * Concat(d, e) = 12 channels; Mul by a per-channel constant; Flatten; Gemm
 * to y[1,10]. Dead: channels 1 and 5 of A/B, channel 2 of C. */
static void write_residual(const char* path) {
  bm_model_t b;
  bm_init(&b, 13);
  int64_t xd[] = {1, 3, 6, 6}, wa[] = {8, 3, 3, 3}, c8[] = {8}, wb[] = {8, 8, 1, 1}, wd[] = {8, 1, 3, 3},
          wc[] = {4, 3, 1, 1}, kd[] = {1, 12, 1, 1}, wg[] = {10, 432}, c10[] = {10};
  bm_input(&b, "x", BM_F32, 4, xd);
  float *WA = fill(&b, 216, 1), *BA = fill(&b, 8, 2), *WB = fill(&b, 64, 3), *BB = fill(&b, 8, 4);
  float *WD = fill(&b, 72, 5), *BD = fill(&b, 8, 6), *WC = fill(&b, 12, 7), *K = fill(&b, 12, 8);
  float *WG = fill(&b, 4320, 9), *BG = fill(&b, 10, 10);
  float *sc = fill(&b, 8, 11), *sh = fill(&b, 8, 12), *mean = fill(&b, 8, 13), *var = fill(&b, 8, 14);
  for (int i = 0; i < 8; ++i) var[i] = fabsf(var[i]) + 0.5f, sc[i] = fabsf(sc[i]) + 0.5f;
  int dead[] = {1, 5};
  for (int k = 0; k < 2; ++k) {
    int c = dead[k];
    zero_ch(WA, c, 27), zero_ch(BA, c, 1), zero_ch(WB, c, 8), zero_ch(BB, c, 1), zero_ch(BD, c, 1);
    sc[c] = 0.01f, sh[c] = 0, mean[c] = 0, var[c] = 1;
  }
  zero_ch(WC, 2, 3);
  bm_initializer(&b, "WA", BM_F32, 4, wa, WA, 216 * 4);
  bm_initializer(&b, "BA", BM_F32, 1, c8, BA, 32);
  bm_initializer(&b, "bn_s", BM_F32, 1, c8, sc, 32);
  bm_initializer(&b, "bn_b", BM_F32, 1, c8, sh, 32);
  bm_initializer(&b, "bn_m", BM_F32, 1, c8, mean, 32);
  bm_initializer(&b, "bn_v", BM_F32, 1, c8, var, 32);
  bm_initializer(&b, "WB", BM_F32, 4, wb, WB, 64 * 4);
  bm_initializer(&b, "BB", BM_F32, 1, c8, BB, 32);
  bm_initializer(&b, "WD", BM_F32, 4, wd, WD, 72 * 4);
  bm_initializer(&b, "BD", BM_F32, 1, c8, BD, 32);
  bm_initializer(&b, "WC", BM_F32, 4, wc, WC, 12 * 4);
  bm_initializer(&b, "K", BM_F32, 4, kd, K, 12 * 4);
  bm_initializer(&b, "WG", BM_F32, 2, wg, WG, 4320 * 4);
  bm_initializer(&b, "BG", BM_F32, 1, c10, BG, 40);
  int64_t pads[] = {1, 1, 1, 1};
  Onnx__NodeProto* n = bm_node(&b, "Conv", "convA", "x,WA,BA", "a0");
  bm_attr_ints(&b, n, "pads", 4, pads);
  bm_node(&b, "BatchNormalization", "bn", "a0,bn_s,bn_b,bn_m,bn_v", "a1");
  bm_node(&b, "Relu", "relu", "a1", "a");
  bm_node(&b, "Conv", "convB", "a,WB,BB", "bconv");
  bm_node(&b, "Add", "add", "a,bconv", "c");
  n = bm_node(&b, "Conv", "dw", "c,WD,BD", "d");
  bm_attr_ints(&b, n, "pads", 4, pads);
  bm_attr_int(&b, n, "group", 8);
  bm_node(&b, "Conv", "convC", "x,WC", "e");
  n = bm_node(&b, "Concat", "cat", "d,e", "f");
  bm_attr_int(&b, n, "axis", 1);
  bm_node(&b, "Mul", "mul", "f,K", "h");
  bm_node(&b, "Flatten", "flat", "h", "fl");
  n = bm_node(&b, "Gemm", "gemm", "fl,WG,BG", "y");
  bm_attr_int(&b, n, "transB", 1);
  bm_output(&b, "y");
  CHECK(bm_write(&b, path));
  bm_free(&b);
}

static kiln_graph_t* load(const char* path) {
  kiln_graph_t* g = NULL;
  CHECK_OK(kiln_onnx_load_model(path, NULL, kiln_allocator_system(), &g));
  return g;
}

static int32_t group_named(const kiln_pruner_t* p, const char* name) {
  for (int32_t k = 0; k < p->deps.n_groups; ++k)
    if (!strcmp(kiln_pruner_group_name(p, k), name)) return k;
  return -1;
}

/* Largest |a - b| between the outputs of two graphs on |n| samples. */
static double max_diff(const kiln_graph_t* a, const kiln_graph_t* b, const kiln_array_t* in, int32_t n) {
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  double worst = 0;
  for (int32_t k = 0; k < n; ++k) {
    kiln_array_t ya, yb;
    if (!CHECK_OK(kiln_ref_run(a, &in[k], &ro, &ya))) continue;
    if (!CHECK_OK(kiln_ref_run(b, &in[k], &ro, &yb))) {
      kiln_array_free(ro.allocator, &ya);
      continue;
    }
    CHECK(kiln_shape_equal(&ya.shape, &yb.shape));
    for (int64_t i = 0; i < kiln_shape_count(&ya.shape); ++i)
      worst = fmax(worst, fabs(((float*)ya.data)[i] - ((float*)yb.data)[i]));
    kiln_array_free(ro.allocator, &ya);
    kiln_array_free(ro.allocator, &yb);
  }
  return worst;
}

static void test_residual_dead_channels(void) {
  const char* path = bm_path(g_dir, "res.onnx");
  write_residual(path);
  kiln_graph_t* g = load(path);
  if (!g) return;
  kiln_array_t* in = NULL;
  int32_t n = 0;
  kiln_calibrate_options_t co;
  kiln_calibrate_options_default(&co);
  co.count = 3;
  CHECK_OK(kiln_calibrate_inputs(g, &co, &in, &n));
  const kiln_prune_method_t methods[] = {KILN_PRUNE_L1, KILN_PRUNE_L2, KILN_PRUNE_BN};
  for (int m = 0; m < 3; ++m) {
    kiln_pruner_t p;
    if (!CHECK_OK(kiln_pruner_init(&p, g, methods[m], NULL, 0))) continue;
    CHECK(p.deps.n_groups == 3);
    int32_t ab = group_named(&p, "convA"), c = group_named(&p, "convC"), gm = group_named(&p, "gemm");
    CHECK(ab >= 0 && c >= 0 && gm >= 0);
    if (ab < 0 || c < 0 || gm < 0) {
      kiln_pruner_free(&p);
      continue;
    }
    CHECK(p.deps.groups[ab].n_sources == 2 && !p.deps.groups[ab].blocked);
    CHECK(!p.deps.groups[c].blocked);
    CHECK(p.deps.groups[gm].blocked && strstr(p.deps.groups[gm].blocked, "graph output 'y'"));
    CHECK(p.bn_fallback[c] == (methods[m] == KILN_PRUNE_BN) && !p.bn_fallback[ab]);
    int64_t counts[3];
    kiln_pruner_counts_for_ratio(&p, 0.25, counts);
    CHECK(counts[ab] == 6 && counts[c] == 3 && counts[gm] == 10);
    CHECK_OK(kiln_pruner_set_samples(&p, in, n));
    double err = 1, agree = 0;
    CHECK_OK(kiln_pruner_error(&p, counts, &err, &agree));
    CHECK_MSG(err < 1e-5, "method %d: dead channels removed changed the outputs by %g", m, err);
    CHECK(agree == 1.0);
    /* One live channel more: the outputs must move. */
    counts[c] = 2;
    CHECK_OK(kiln_pruner_error(&p, counts, &err, NULL));
    CHECK_MSG(err > 1e-3, "removing a live channel left the outputs unchanged (%g)", err);
    counts[c] = 3;
    int64_t params, flops;
    CHECK_OK(kiln_pruner_cost(&p, counts, &params, &flops));
    CHECK(params < p.params && flops < p.flops);
    kiln_prune_plan_t plan;
    if (CHECK_OK(kiln_pruner_plan(&p, counts, &plan))) {
      CHECK(plan.n_attrs == 1 && !strcmp(plan.attrs[0].node, "dw") && plan.attrs[0].value == 6);
      const char* out = bm_path(g_dir, "res.pruned.onnx");
      CHECK_OK(kiln_onnx_write_pruned(path, &plan, out));
      kiln_graph_t* pg = load(out);
      if (pg) {
        int32_t t = kiln_graph_find_tensor(pg, "WG");
        CHECK(t >= 0 && pg->tensors[t].shape.dims[1] == 9 * 36);
        t = kiln_graph_find_tensor(pg, "K");
        CHECK(t >= 0 && pg->tensors[t].shape.dims[1] == 9);
        double d = max_diff(g, pg, in, n);
        CHECK_MSG(d < 1e-4, "the written model differs from the original by %g", d);
        kiln_graph_destroy(pg);
      }
      kiln_prune_plan_free(&plan);
    }
    kiln_pruner_free(&p);
  }
  kiln_calibrate_inputs_free(g, in, n);
  kiln_graph_destroy(g);
}

/* x[1,16] -> MatMul(16x8) + B -> Relu -> MatMul(8x4) = y; column 3 dead. */
static void test_matmul(void) {
  bm_model_t b;
  bm_init(&b, 13);
  int64_t xd[] = {1, 16}, w1d[] = {16, 8}, b1d[] = {8}, w2d[] = {8, 4};
  bm_input(&b, "x", BM_F32, 2, xd);
  float *W1 = fill(&b, 128, 21), *B1 = fill(&b, 8, 22), *W2 = fill(&b, 32, 23);
  for (int r = 0; r < 16; ++r) W1[r * 8 + 3] = 0;
  B1[3] = 0;
  bm_initializer(&b, "W1", BM_F32, 2, w1d, W1, 512);
  bm_initializer(&b, "B1", BM_F32, 1, b1d, B1, 32);
  bm_initializer(&b, "W2", BM_F32, 2, w2d, W2, 128);
  bm_node(&b, "MatMul", "mm1", "x,W1", "h0");
  bm_node(&b, "Add", "add", "h0,B1", "h1");
  bm_node(&b, "Relu", "relu", "h1", "h");
  bm_node(&b, "MatMul", "mm2", "h,W2", "y");
  bm_output(&b, "y");
  const char* path = bm_path(g_dir, "mlp.onnx");
  CHECK(bm_write(&b, path));
  bm_free(&b);
  kiln_graph_t* g = load(path);
  if (!g) return;
  kiln_pruner_t p;
  if (CHECK_OK(kiln_pruner_init(&p, g, KILN_PRUNE_L1, NULL, 0))) {
    int32_t k = group_named(&p, "mm1");
    CHECK(k >= 0 && !p.deps.groups[k].blocked && p.deps.groups[k].channels == 8);
    kiln_array_t* in = NULL;
    int32_t n = 0;
    kiln_calibrate_options_t co;
    kiln_calibrate_options_default(&co);
    CHECK_OK(kiln_calibrate_inputs(g, &co, &in, &n));
    CHECK_OK(kiln_pruner_set_samples(&p, in, n));
    int64_t counts[2];
    kiln_pruner_counts_for_ratio(&p, 0.125, counts);
    double err = 1;
    CHECK_OK(kiln_pruner_error(&p, counts, &err, NULL));
    CHECK_MSG(err < 1e-5, "MatMul: dead column removed changed the outputs by %g", err);
    kiln_pruner_free(&p);
    kiln_calibrate_inputs_free(g, in, n);
  }
  kiln_graph_destroy(g);
}

/* conv(8) -> Reshape [1, 4, -1] (pairs of channels into rows) -> output; and
 * conv2(3) -> Add with the graph input (channels that cannot be pruned). */
static void test_unresolvable(void) {
  bm_model_t b;
  bm_init(&b, 13);
  int64_t xd[] = {1, 3, 4, 4}, wd[] = {8, 3, 1, 1}, w2d[] = {3, 3, 1, 1}, sd[] = {3}, shape[] = {1, 4, -1};
  bm_input(&b, "x", BM_F32, 4, xd);
  bm_initializer(&b, "W", BM_F32, 4, wd, fill(&b, 24, 31), 96);
  bm_initializer(&b, "W2", BM_F32, 4, w2d, fill(&b, 9, 32), 36);
  bm_init_i64(&b, "shape", 1, sd, shape);
  bm_node(&b, "Conv", "conv", "x,W", "c");
  bm_node(&b, "Reshape", "mix", "c,shape", "r");
  bm_node(&b, "Relu", "relu", "r", "y");
  bm_node(&b, "Conv", "conv2", "x,W2", "c2");
  bm_node(&b, "Add", "res", "c2,x", "y2");
  bm_output(&b, "y");
  bm_output(&b, "y2");
  const char* path = bm_path(g_dir, "mix.onnx");
  CHECK(bm_write(&b, path));
  bm_free(&b);
  kiln_graph_t* g = load(path);
  if (!g) return;
  kiln_pruner_t p;
  if (CHECK_OK(kiln_pruner_init(&p, g, KILN_PRUNE_L1, NULL, 0))) {
    int32_t k = group_named(&p, "conv"), k2 = group_named(&p, "conv2");
    CHECK(k >= 0 && p.deps.groups[k].blocked && strstr(p.deps.groups[k].blocked, "Reshape node 'mix'"));
    CHECK(k2 >= 0 && p.deps.groups[k2].blocked && strstr(p.deps.groups[k2].blocked, "Add node 'res'"));
    int64_t counts[2];
    kiln_pruner_counts_for_ratio(&p, 0.5, counts);
    CHECK(counts[k] == 8 && counts[k2] == 3); /* left whole */
    counts[k] = 4;
    kiln_prune_plan_t plan;
    CHECK_ERR(kiln_pruner_plan(&p, counts, &plan), KILN_INVALID_ARGUMENT, "Reshape node 'mix'");
    /* nothing prunable: no budget is reachable below the model's FLOPs */
    CHECK_ERR(kiln_pruner_fit_flops(&p, 0.5 * (double)p.flops, counts), KILN_INVALID_ARGUMENT, "below what removing");
    kiln_pruner_free(&p);
  }
  kiln_graph_destroy(g);
}

static void test_bad_options(void) {
  const char* path = bm_path(g_dir, "res.onnx");
  write_residual(path);
  kiln_graph_t* g = load(path);
  if (!g) return;
  kiln_pruner_t p;
  const char* unknown[] = {"nosuch"};
  CHECK_ERR(kiln_pruner_init(&p, g, KILN_PRUNE_L1, unknown, 1), KILN_NOT_FOUND, "no node named 'nosuch'");
  const char* relu[] = {"relu"};
  CHECK_ERR(kiln_pruner_init(&p, g, KILN_PRUNE_L1, relu, 1), KILN_INVALID_ARGUMENT, "'relu' (Relu) is not a prunable");
  const char* keep[] = {"convB"};
  if (CHECK_OK(kiln_pruner_init(&p, g, KILN_PRUNE_L1, keep, 1))) {
    int32_t ab = group_named(&p, "convA");
    CHECK(ab >= 0 && p.deps.groups[ab].blocked && strstr(p.deps.groups[ab].blocked, "--keep convB"));
    int64_t counts[3];
    kiln_pruner_counts_for_ratio(&p, 0.5, counts);
    CHECK(counts[ab] == 8);
    CHECK_ERR(kiln_pruner_fit_flops(&p, 1.0, counts), KILN_INVALID_ARGUMENT, "below what removing every prunable");
    CHECK_OK(kiln_pruner_fit_flops(&p, 0.95 * (double)p.flops, counts));
    int64_t params, flops;
    CHECK_OK(kiln_pruner_cost(&p, counts, &params, &flops));
    CHECK(flops <= 0.95 * (double)p.flops);
    counts[ab] = 0;
    kiln_prune_plan_t plan;
    CHECK_ERR(kiln_pruner_plan(&p, counts, &plan), KILN_INVALID_ARGUMENT, "0 channels kept of 8");
    kiln_pruner_free(&p);
  }
  kiln_graph_destroy(g);
}

int main(void) {
  if (!bm_tmpdir("prune", g_dir, sizeof g_dir)) return 1;
  RUN(test_residual_dead_channels);
  RUN(test_matmul);
  RUN(test_unresolvable);
  RUN(test_bad_options);
  bm_rmtree(g_dir);
  return kiln_test_finish();
}
