/* Tensor ops whose ONNX node tests kiln cannot run (they are f64 only) or
 * do not reach the corners, compiled for one target and checked bit for
 * bit against the reference executor:
 *
 *   test_tensor_ops_target [--target cpu|opencl|vulkan]   (default cpu)
 *
 *   - CumSum over f32 and i32, every axis position, exclusive and reverse;
 *   - TopK largest and smallest, on either axis, with ties (broken by the
 *     lower index) and NaN (above every number), values and indices;
 *   - ReverseSequence with run-time lengths on both axis orders; a length
 *     outside [0, T] fails the run on both naming the node, and the session
 *     runs clean again afterwards.
 */
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

/* x f32[4,9] with repeated values and NaNs; K = 4 on |axis|. */
static void topk_case(int64_t axis, int64_t largest) {
  kiln_graph_t* g = graph_new();
  if (!g) return;
  int64_t d[2] = {4, 9}, one[1] = {1};
  kiln_array_t kk = arr(KILN_DTYPE_I64, 1, one);
  if (kk.data) ((int64_t*)kk.data)[0] = axis == 0 ? 3 : 4;
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
  for (int i = 0; in.data && i < 36; ++i) {
    float v = (float)((i * 5) % 7) - 3.0f; /* many ties */
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
    for (int64_t l = 0; l < 2; ++l) topk_case(axis, l);
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

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--target") && i + 1 < argc) {
      g_target_name = argv[++i];
    } else {
      fprintf(stderr, "usage: %s [--target cpu|opencl|vulkan]\n", argv[0]);
      return 2;
    }
  }
  g_target = kiln_target_find(g_target_name);
  kiln_device_open_options_t oo = {2, true, stderr};
  if (!g_target || !CHECK_OK(kiln_device_open(g_target_name, &oo, al(), &g_device))) {
    fprintf(stderr, "no target or device '%s'\n", g_target_name);
    return 1;
  }
  RUN(test_cumsum);
  RUN(test_topk);
  RUN(test_reverse_sequence);
  kiln_device_release(g_device);
  return kiln_test_finish();
}
