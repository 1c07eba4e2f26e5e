/* Unit tests for the recurrent layers (ir/ops/nn_rnn.c, lowering/lower_nn_rnn.c):
 * the reference kernel on values computed here step by step (an RNN with
 * sequence_lens in both directions; an LSTM with peepholes), the errors for
 * bad attributes, shapes and sequence lengths (each naming the node), and
 * the lowering's kernel count: one projection GEMM and one step kernel per
 * node, for CPU and GPU plans, whatever the sequence length. The values of
 * the compiled kernels are checked against onnxruntime by the model tests
 * (tests/models/export_rnn.py) and the ONNX node tests. */
#include <math.h>
#include <string.h>

#include "compiler/ref_exec.h"
#include "ir/op.h"
#include "lowering/plan.h"
#include "testing.h"

#define F32 KILN_DTYPE_F32
#define I32 KILN_DTYPE_I32
#define MAX_IN 8

static kiln_allocator_t A(void) { return kiln_allocator_system(); }

typedef struct in_s {
  const char* name; /* "" or NULL: omitted */
  kiln_dtype_t dtype;
  int rank;
  int64_t dims[4];
  const void* data;
  bool is_const;
} in_t;

static const char* const out_names[] = {"Y", "Y_h", "Y_c"};

static kiln_array_t arr(const in_t* in) {
  kiln_array_t a;
  memset(&a, 0, sizeof a);
  a.dtype = in->dtype;
  a.shape = kiln_shape_make(in->rank, in->dims);
  a.data = (void*)in->data;
  a.nbytes = (size_t)kiln_shape_count(&a.shape) * kiln_dtype_size(in->dtype);
  return a;
}

/* A one-node graph; outputs |n_out| of Y, Y_h, Y_c. */
static kiln_status_t build(const char* op, int n_in, const in_t* in, int n_out, int n_attrs,
                           const kiln_attr_t* attrs, kiln_graph_t** out) {
  kiln_graph_t* g = NULL;
  KILN_RETURN_IF_ERROR(kiln_graph_create(A(), &g));
  kiln_status_t s = kiln_graph_set_opset(g, "", 14);
  const char* names[MAX_IN];
  for (int i = 0; i < n_in && !s; ++i) {
    names[i] = in[i].name ? in[i].name : "";
    if (!names[i][0]) continue;
    kiln_array_t a = arr(&in[i]);
    if (in[i].is_const) {
      kiln_array_t c;
      s = kiln_array_clone(A(), &a, &c);
      if (!s) s = kiln_graph_add_initializer(g, names[i], &c, NULL);
    } else {
      s = kiln_graph_add_input(g, names[i], a.dtype, &a.shape, NULL);
    }
  }
  if (!s) s = kiln_graph_add_node(g, op, "rnn0", n_in, names, n_out, out_names, n_attrs, attrs, NULL);
  for (int o = 0; o < n_out && !s; ++o) s = kiln_graph_add_output(g, out_names[o]);
  if (!s) s = kiln_graph_prepare(g);
  if (s) {
    kiln_graph_destroy(g);
    return s;
  }
  *out = g;
  return NULL;
}

static kiln_status_t run(const char* op, int n_in, const in_t* in, int n_out, int n_attrs,
                         const kiln_attr_t* attrs, kiln_array_t* outs) {
  kiln_graph_t* g = NULL;
  KILN_RETURN_IF_ERROR(build(op, n_in, in, n_out, n_attrs, attrs, &g));
  kiln_array_t feeds[MAX_IN];
  int nf = 0;
  for (int i = 0; i < n_in; ++i)
    if (in[i].name && in[i].name[0] && !in[i].is_const) feeds[nf++] = arr(&in[i]);
  kiln_ref_options_t o;
  kiln_ref_options_default(&o);
  kiln_status_t s = kiln_ref_run(g, feeds, &o, outs);
  kiln_graph_destroy(g);
  return s;
}

static void check_vals(const kiln_array_t* a, const float* want, int64_t n, const char* what) {
  CHECK_MSG(a->dtype == F32 && kiln_array_numel(a) == n, "%s: %lld elements, want %lld", what,
            (long long)kiln_array_numel(a), (long long)n);
  if (a->dtype != F32 || kiln_array_numel(a) != n) return;
  for (int64_t i = 0; i < n; ++i) {
    float got = ((const float*)a->data)[i];
    CHECK_MSG(fabsf(got - want[i]) <= 1e-6f, "%s[%lld]: got %.8g, want %.8g", what, (long long)i,
              got, want[i]);
  }
}

/* ---- values ----------------------------------------------------------- */

/* RNN, H = I = 1, bidirectional, Relu, batch 2 with lengths 3 and 1:
 * h_t = relu(w x_t + r h_{t-1} + wb + rb), forward from t = 0 and reverse from
 * t = len-1; Y past a batch's length is 0 and Y_h is the last step's h. */
static void test_rnn_seq_lens_values(void) {
  const float x[3 * 2] = {1, 2, 0.5f, 9, -1, 9}; /* [T=3][B=2][1]; b=1 uses t=0 only */
  const float w[2] = {0.5f, 2.0f}, r[2] = {0.25f, -0.5f};
  const float b[2 * 2] = {0.1f, 0.2f, 0.0f, 0.3f}; /* [D][Wb, Rb] */
  const int32_t lens[2] = {3, 1};
  const float h0[2 * 2] = {1, 0, 0.5f, 2}; /* [D][B] */
  in_t in[6] = {{"X", F32, 3, {3, 2, 1}, x, false},      {"W", F32, 3, {2, 1, 1}, w, true},
                {"R", F32, 3, {2, 1, 1}, r, true}, {"B", F32, 2, {2, 2}, b, true},
                {"L", I32, 1, {2}, lens, false},          {"H0", F32, 3, {2, 2, 1}, h0, false}};
  const char* acts[2] = {"Relu", "Relu"};
  kiln_attr_t at[3] = {kiln_attr_make_int("hidden_size", 1),
                       kiln_attr_make_string("direction", "bidirectional"),
                       {.name = "activations", .type = KILN_ATTR_STRINGS, .count = 2,
                        .strings = acts}};
  float y[3][2][2] = {{{0}}}, yh[2][2];
  for (int d = 0; d < 2; ++d) {
    for (int bb = 0; bb < 2; ++bb) {
      float h = h0[d * 2 + bb];
      for (int s = 0; s < lens[bb]; ++s) {
        int t = d ? lens[bb] - 1 - s : s;
        float v = w[d] * x[t * 2 + bb] + r[d] * h + b[d * 2] + b[d * 2 + 1];
        h = v > 0 ? v : 0;
        y[t][d][bb] = h;
      }
      yh[d][bb] = h;
    }
  }
  kiln_array_t outs[2];
  memset(outs, 0, sizeof outs);
  if (CHECK_OK(run("RNN", 6, in, 2, 3, at, outs))) {
    check_vals(&outs[0], &y[0][0][0], 12, "Y");
    check_vals(&outs[1], &yh[0][0], 4, "Y_h");
    CHECK(((const float*)outs[0].data)[(2 * 2 + 0) * 2 + 1] == 0.0f); /* t=2, d=0, b=1 */
  }
  for (int o = 0; o < 2; ++o) kiln_array_free(A(), &outs[o]);
}

static float sig(float v) { return 1.f / (1.f + expf(-v)); }

/* LSTM, H = I = 1, one step, peepholes: gates in W/R/B order i, o, f, c,
 * P order i, o, f; the o gate sees the new cell. */
static void test_lstm_peephole_values(void) {
  const float x[1] = {0.7f}, w[4] = {0.1f, 0.2f, 0.3f, 0.4f}, r[4] = {0.5f, -0.5f, 0.25f, 1};
  const float p[3] = {0.3f, -0.2f, 0.1f}, h0[1] = {0.4f}, c0[1] = {-0.6f};
  in_t in[8] = {{"X", F32, 3, {1, 1, 1}, x, false},        {"W", F32, 3, {1, 4, 1}, w, true},
                {"R", F32, 3, {1, 4, 1}, r, true},  {NULL, F32, 0, {0}, NULL, false},
                {NULL, F32, 0, {0}, NULL, false},                             {"H0", F32, 3, {1, 1, 1}, h0, false},
                {"C0", F32, 3, {1, 1, 1}, c0, false},      {"P", F32, 2, {1, 3}, p, true}};
  kiln_attr_t at[1] = {kiln_attr_make_int("hidden_size", 1)};
  float i = sig(w[0] * x[0] + r[0] * h0[0] + p[0] * c0[0]);
  float f = sig(w[2] * x[0] + r[2] * h0[0] + p[2] * c0[0]);
  float g = tanhf(w[3] * x[0] + r[3] * h0[0]);
  float c = f * c0[0] + i * g;
  float o = sig(w[1] * x[0] + r[1] * h0[0] + p[1] * c);
  float h = o * tanhf(c);
  kiln_array_t outs[3];
  memset(outs, 0, sizeof outs);
  if (CHECK_OK(run("LSTM", 8, in, 3, 1, at, outs))) {
    check_vals(&outs[0], &h, 1, "Y");
    check_vals(&outs[1], &h, 1, "Y_h");
    check_vals(&outs[2], &c, 1, "Y_c");
  }
  for (int o2 = 0; o2 < 3; ++o2) kiln_array_free(A(), &outs[o2]);
}

/* ---- bad inputs -------------------------------------------------------- */

static const float zeros[64];

static kiln_status_t load_gru(int n_attrs, const kiln_attr_t* at, int64_t wrows) {
  in_t in[3] = {{"X", F32, 3, {2, 1, 2}, zeros, false}, {"W", F32, 3, {1, wrows, 2}, zeros, true},
                {"R", F32, 3, {1, 6, 2}, zeros, true}};
  kiln_graph_t* g = NULL;
  kiln_status_t s = build("GRU", 3, in, 1, n_attrs, at, &g);
  kiln_graph_destroy(g);
  return s;
}

static void test_bad_attributes(void) {
  const char* swish[2] = {"Sigmoid", "Swish"};
  const char* one[1] = {"Tanh"};
  kiln_attr_t hs = kiln_attr_make_int("hidden_size", 2);
  kiln_attr_t a1[2] = {hs, {.name = "activations", .type = KILN_ATTR_STRINGS, .count = 2,
                            .strings = swish}};
  CHECK_ERR(load_gru(2, a1, 6), KILN_UNSUPPORTED, "activation 'Swish'");
  CHECK_ERR(load_gru(2, a1, 6), KILN_UNSUPPORTED, "rnn0");
  kiln_attr_t a2[2] = {hs, {.name = "activations", .type = KILN_ATTR_STRINGS, .count = 1,
                            .strings = one}};
  CHECK_ERR(load_gru(2, a2, 6), KILN_INVALID_ARGUMENT, "1 activations, expected 2");
  kiln_attr_t a3[2] = {hs, kiln_attr_make_string("direction", "sideways")};
  CHECK_ERR(load_gru(2, a3, 6), KILN_INVALID_ARGUMENT, "direction 'sideways'");
  kiln_attr_t a4[2] = {hs, kiln_attr_make_float("clip", -1.0f)};
  CHECK_ERR(load_gru(2, a4, 6), KILN_INVALID_ARGUMENT, "clip");
  kiln_attr_t a5[2] = {hs, kiln_attr_make_int("layout", 2)};
  CHECK_ERR(load_gru(2, a5, 6), KILN_INVALID_ARGUMENT, "layout 2");
  kiln_attr_t a6[1] = {kiln_attr_make_int("hidden_size", 0)};
  CHECK_ERR(load_gru(1, a6, 6), KILN_INVALID_ARGUMENT, "hidden_size 0");
  /* W with 5 rows where 3 gates x hidden 2 = 6. */
  CHECK_ERR(load_gru(1, &hs, 5), KILN_INVALID_ARGUMENT, "W 'W' has shape [1,5,2]");
  CHECK_OK(load_gru(1, &hs, 6));
}

static void test_bad_sequence_lens(void) {
  const int32_t lens[1] = {3}; /* T is 2 */
  const int64_t lens64[1] = {1};
  in_t in[5] = {{"X", F32, 3, {2, 1, 2}, zeros, false},      {"W", F32, 3, {1, 2, 2}, zeros, true},
                {"R", F32, 3, {1, 2, 2}, zeros, true}, {NULL, F32, 0, {0}, NULL, false},
                {"L", I32, 1, {1}, lens, false}};
  kiln_attr_t hs = kiln_attr_make_int("hidden_size", 2);
  kiln_array_t outs[1];
  memset(outs, 0, sizeof outs);
  CHECK_ERR(run("RNN", 5, in, 1, 1, &hs, outs), KILN_INVALID_ARGUMENT,
            "sequence_lens[0] = 3 is outside [0, 2]");
  kiln_array_free(A(), &outs[0]);
  in[4] = (in_t){"L", KILN_DTYPE_I64, 1, {1}, lens64, false};
  kiln_graph_t* g = NULL;
  CHECK_ERR(build("RNN", 5, in, 1, 1, &hs, &g), KILN_INVALID_ARGUMENT, "expected i32");
  kiln_graph_destroy(g);
}

/* ---- lowering ----------------------------------------------------------- */

/* Two kernels per node (projection GEMM and step loop) for a sequence of 50
 * steps, bidirectional, on both target classes. */
static void test_kernel_count(void) {
  static float w[2 * 16 * 3], r[2 * 16 * 4];
  in_t in[3] = {{"X", F32, 3, {50, 2, 3}, zeros, false}, {"W", F32, 3, {2, 16, 3}, w, true},
                {"R", F32, 3, {2, 16, 4}, r, true}};
  kiln_attr_t at[2] = {kiln_attr_make_int("hidden_size", 4),
                       kiln_attr_make_string("direction", "bidirectional")};
  for (int cls = 0; cls < 2; ++cls) {
    kiln_graph_t* g = NULL;
    if (!CHECK_OK(build("LSTM", 3, in, 3, 2, at, &g))) return;
    kiln_plan_options_t po = {cls ? KILN_TARGET_CLASS_GPU : KILN_TARGET_CLASS_CPU, 2, 0, 0, 0, 0};
    kiln_plan_t* p = NULL;
    if (CHECK_OK(kiln_plan_build(g, &po, A(), &p)))
      CHECK_MSG(p->n_kernels == 2, "class %d: %d kernels, want 2", cls, (int)p->n_kernels);
    kiln_plan_destroy(p);
    kiln_graph_destroy(g);
  }
}

int main(void) {
  RUN(test_rnn_seq_lens_values);
  RUN(test_lstm_peephole_values);
  RUN(test_bad_attributes);
  RUN(test_bad_sequence_lens);
  RUN(test_kernel_count);
  return kiln_test_finish();
}
