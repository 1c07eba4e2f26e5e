/* The "fold-qdq" pass (ir/pass_qdq.c): QDQ-form Conv/MatMul chains become
 * QLinearConv/QLinearMatMul with no DequantizeLinear/QuantizeLinear left
 * between them, the bias and a saturation-implied Relu/Clip folded; the
 * patterns the pass must leave alone stay; and the folded ops agree with the
 * Q/DQ nodes as written within one quantization step (most elements
 * identical), run by the reference interpreter on seeded random inputs. */
#include <math.h>
#include <stdint.h>

#include "compiler/ref_exec.h"
#include "ir/passes.h"
#include "testing.h"

static kiln_allocator_t A(void) { return kiln_allocator_system(); }

static uint64_t rng_state = 1;
static uint32_t rnd(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng_state >> 33);
}
static float frand(void) { return (float)(rnd() % 20001) / 10000.f - 1.f; } /* [-1,1] */

static void init(kiln_graph_t* g, const char* name, kiln_dtype_t dt, int32_t rank,
                 const int64_t* dims, const double* v) {
  kiln_shape_t s = kiln_shape_make(rank, dims);
  kiln_array_t a;
  CHECK_OK(kiln_array_alloc(A(), dt, &s, &a));
  for (int64_t i = 0; i < kiln_shape_count(&s); ++i) kiln_store_f64(dt, a.data, (size_t)i, v[i]);
  CHECK_OK(kiln_graph_add_initializer(g, name, &a, NULL));
}
static void scalar(kiln_graph_t* g, const char* name, kiln_dtype_t dt, double v) {
  init(g, name, dt, 0, NULL, &v);
}

static void node(kiln_graph_t* g, const char* op, int32_t n_in, const char* const* in,
                 const char* out, int32_t n_attrs, const kiln_attr_t* attrs) {
  CHECK_OK(kiln_graph_add_node(g, op, "", n_in, in, 1, &out, n_attrs, attrs, NULL));
}
#define NODE(g, op, out, ...) \
  node(g, op, sizeof((const char*[]){__VA_ARGS__}) / sizeof(char*), (const char*[]){__VA_ARGS__}, out, 0, NULL)

static int count_op(const kiln_graph_t* g, const char* op) {
  int k = 0;
  for (int32_t i = 0; i < g->n_nodes; ++i) k += strcmp(g->nodes[i].op_type, op) == 0;
  return k;
}

/* Quantized weight |name| (i8, random in [-127,127]) with its scales (|ns|
 * of them, per channel along |axis| when > 1) and zero points, and its
 * DequantizeLinear writing |name|_dq. */
static void qweight(kiln_graph_t* g, const char* name, int32_t rank, const int64_t* dims,
                    int64_t ns, int64_t axis) {
  char q[64], s[64], z[64], d[64];
  snprintf(q, sizeof q, "%s_q", name);
  snprintf(s, sizeof s, "%s_s", name);
  snprintf(z, sizeof z, "%s_zp", name);
  snprintf(d, sizeof d, "%s_dq", name);
  kiln_shape_t sh = kiln_shape_make(rank, dims);
  const int64_t n = kiln_shape_count(&sh);
  double* v = calloc((size_t)n, sizeof(double));
  for (int64_t i = 0; i < n; ++i) v[i] = (double)((int32_t)(rnd() % 255) - 127);
  init(g, q, KILN_DTYPE_I8, rank, dims, v);
  for (int64_t i = 0; i < ns; ++i) v[i] = 0.002 + 0.004 * (frand() + 1.f);
  init(g, s, KILN_DTYPE_F32, ns > 1 ? 1 : 0, &ns, v);
  for (int64_t i = 0; i < ns; ++i) v[i] = 0;
  init(g, z, KILN_DTYPE_I8, ns > 1 ? 1 : 0, &ns, v);
  free(v);
  const kiln_attr_t ax = kiln_attr_make_int("axis", axis);
  node(g, "DequantizeLinear", 3, (const char*[]){q, s, z}, d, 1, &ax);
}

/* i32 bias with scale s_x * s_w (|bad|: 1% off) for |m| channels of weight
 * |w| (per-channel scales) and activation scale |sx|. */
static void qbias(kiln_graph_t* g, const char* name, const char* w, int64_t m, float sx, bool bad) {
  char q[64], s[64], d[64], ws[64];
  snprintf(q, sizeof q, "%s_q", name);
  snprintf(s, sizeof s, "%s_s", name);
  snprintf(d, sizeof d, "%s_dq", name);
  snprintf(ws, sizeof ws, "%s_s", w);
  const kiln_array_t* wv = &g->tensors[kiln_graph_find_tensor(g, ws)].value;
  double qv[64], sv[64];
  for (int64_t k = 0; k < m; ++k) {
    qv[k] = (double)((int32_t)(rnd() % 2001) - 1000);
    sv[k] = (double)(sx * ((const float*)wv->data)[k]) * (bad ? 1.01 : 1.0);
  }
  init(g, q, KILN_DTYPE_I32, 1, &m, qv);
  init(g, s, KILN_DTYPE_F32, 1, &m, sv);
  const kiln_attr_t ax = kiln_attr_make_int("axis", 0);
  node(g, "DequantizeLinear", 2, (const char*[]){q, s}, d, 1, &ax);
}

/* QuantizeLinear |in| -> |name|_q (|dt|), then DequantizeLinear -> |out|. */
static void qdq(kiln_graph_t* g, const char* in, const char* name, kiln_dtype_t dt, float s,
                double zp, const char* out) {
  char q[64], sn[64], z[64];
  snprintf(q, sizeof q, "%s_q", name);
  snprintf(sn, sizeof sn, "%s_s", name);
  snprintf(z, sizeof z, "%s_zp", name);
  scalar(g, sn, KILN_DTYPE_F32, s);
  scalar(g, z, dt, zp);
  NODE(g, "QuantizeLinear", q, in, sn, z);
  NODE(g, "DequantizeLinear", out, q, sn, z);
}

static kiln_graph_t* new_graph(void) {
  kiln_graph_t* g = NULL;
  CHECK_OK(kiln_graph_create(A(), &g));
  CHECK_OK(kiln_graph_set_opset(g, "", 21));
  return g;
}

/* What each graph builder varies: the activation after conv 1, its output
 * zero point, and the bias scale. */
typedef struct {
  const char* act; /* "", "Relu" or "Clip" */
  double r1_zp;    /* conv 1 output zero point (u8) */
  float clip_hi;   /* Clip's upper bound */
  bool bad_bias;   /* bias scale 1% off s_x * s_w */
} variant_t;

/* x -> Q/DQ -> Conv(per-channel w1, bias) -> [act] -> Q/DQ -> Conv(stride 2,
 * per-tensor w2) -> Q/DQ -> Flatten -> Q/DQ -> MatMul(per-column w3) -> Q/DQ
 * -> y: a QDQ chain as onnxruntime's quantize_static writes it. The
 * quantized tensors (*_q) are graph outputs too, so the test compares each
 * layer's integers. */
static kiln_graph_t* build_chain(const variant_t* v) {
  kiln_graph_t* g = new_graph();
  rng_state = 777;
  const int64_t xd[4] = {1, 4, 6, 6}, w1d[4] = {8, 4, 3, 3}, w2d[4] = {8, 8, 3, 3},
                w3d[2] = {72, 10};
  kiln_shape_t xs = kiln_shape_make(4, xd);
  CHECK_OK(kiln_graph_add_input(g, "x", KILN_DTYPE_F32, &xs, NULL));
  const float sx = 0.025f;
  qdq(g, "x", "x", KILN_DTYPE_U8, sx, 128, "x_dq");
  qweight(g, "w1", 4, w1d, 8, 0);
  qbias(g, "b1", "w1", 8, sx, v->bad_bias);
  const int64_t pads[4] = {1, 1, 1, 1}, strides[2] = {2, 2};
  const kiln_attr_t pa = kiln_attr_make_ints("pads", 4, pads);
  node(g, "Conv", 3, (const char*[]){"x_dq", "w1_dq", "b1_dq"}, "c1", 1, &pa);
  const char* r1 = "c1";
  if (strcmp(v->act, "Relu") == 0) {
    NODE(g, "Relu", "a1", "c1");
    r1 = "a1";
  } else if (strcmp(v->act, "Clip") == 0) {
    scalar(g, "lo", KILN_DTYPE_F32, 0.0);
    scalar(g, "hi", KILN_DTYPE_F32, v->clip_hi);
    NODE(g, "Clip", "a1", "c1", "lo", "hi");
    r1 = "a1";
  }
  qdq(g, r1, "r1", KILN_DTYPE_U8, 0.02f, v->r1_zp, "r1_dq");
  qweight(g, "w2", 4, w2d, 1, 0);
  const kiln_attr_t a2[2] = {pa, kiln_attr_make_ints("strides", 2, strides)};
  node(g, "Conv", 2, (const char*[]){"r1_dq", "w2_dq"}, "c2", 2, a2);
  qdq(g, "c2", "r2", KILN_DTYPE_I8, 0.03f, -5, "r2_dq");
  NODE(g, "Flatten", "f", "r2_dq");
  qdq(g, "f", "f", KILN_DTYPE_I8, 0.03f, -5, "f_dq");
  qweight(g, "w3", 2, w3d, 10, 1);
  NODE(g, "MatMul", "m", "f_dq", "w3_dq");
  qdq(g, "m", "y", KILN_DTYPE_I8, 0.05f, 3, "y");
  const char* outs[] = {"r1_q", "r2_q", "y_q", "y"};
  for (int i = 0; i < 4; ++i) CHECK_OK(kiln_graph_add_output(g, outs[i]));
  CHECK_OK(kiln_graph_prepare(g));
  return g;
}

static kiln_graph_t* folded(const variant_t* v, int* rewrites) {
  kiln_graph_t* g = build_chain(v);
  const kiln_graph_pass_t* p = kiln_graph_pass_find("fold-qdq");
  CHECK(p != NULL);
  kiln_pass_stats_t st = {g->n_nodes, g->n_nodes, 0};
  if (p) CHECK_OK(p->fn(g, &st));
  CHECK_OK(kiln_graph_verify(g));
  *rewrites = st.rewrites;
  return g;
}

/* The node writing tensor |name|, or NULL. */
static const kiln_node_t* producer(const kiln_graph_t* g, const char* name) {
  int32_t t = kiln_graph_find_tensor(g, name);
  return t >= 0 && g->tensors[t].producer >= 0 ? &g->nodes[g->tensors[t].producer] : NULL;
}

static void test_structure(void) {
  int rw = 0;
  const variant_t v = {"Relu", 0, 0, false};
  kiln_graph_t* g = folded(&v, &rw);
  CHECK(rw == 4); /* and the Flatten, on r2's integers */
  CHECK(count_op(g, "QLinearConv") == 2);
  CHECK(count_op(g, "QLinearMatMul") == 1);
  CHECK(count_op(g, "Conv") == 0 && count_op(g, "MatMul") == 0 && count_op(g, "Relu") == 0);
  /* conv 1 reads x's integers and writes r1's; conv 2 reads r1's directly */
  const kiln_node_t* c1 = producer(g, "r1_q");
  const kiln_node_t* c2 = producer(g, "r2_q");
  CHECK(c1 && strcmp(c1->op_type, "QLinearConv") == 0 && c1->n_inputs == 9);
  CHECK(c2 && strcmp(c2->op_type, "QLinearConv") == 0 && c2->n_inputs == 8);
  if (c1 && c2) {
    CHECK(strcmp(g->tensors[c1->inputs[0]].name, "x_q") == 0);
    CHECK(strcmp(g->tensors[c1->inputs[8]].name, "b1_q") == 0);
    CHECK(strcmp(g->tensors[c2->inputs[0]].name, "r1_q") == 0);
    CHECK(kiln_node_attr(c2, "strides") != NULL && kiln_node_attr(c1, "pads") != NULL);
  }
  const kiln_node_t* m = producer(g, "y_q");
  CHECK(m && strcmp(m->op_type, "QLinearMatMul") == 0);
  const kiln_node_t* fl = producer(g, "f_q");
  CHECK(fl && strcmp(fl->op_type, "Flatten") == 0 &&
        strcmp(g->tensors[fl->inputs[0]].name, "r2_q") == 0);
  kiln_graph_destroy(g);

  /* Clip(0, 6) at s = 0.02, zp 0: Q(6) = 300 >= 255, implied by saturation */
  const variant_t clip = {"Clip", 0, 6.f, false};
  g = folded(&clip, &rw);
  CHECK(rw == 4 && count_op(g, "Clip") == 0);
  kiln_graph_destroy(g);
}

/* Patterns whose fold would change the results stay as they are. */
static void test_left_alone(void) {
  int rw = 0;
  const variant_t relu_zp = {"Relu", 100, 0, false}; /* Relu clamps above the type's low end */
  kiln_graph_t* g = folded(&relu_zp, &rw);
  CHECK(rw == 3 && count_op(g, "Relu") == 1 && count_op(g, "Conv") == 1);
  kiln_graph_destroy(g);
  const variant_t clip_lo = {"Clip", 0, 1.f, false}; /* Q(1) = 50 < 255 */
  g = folded(&clip_lo, &rw);
  CHECK(rw == 3 && count_op(g, "Clip") == 1);
  kiln_graph_destroy(g);
  const variant_t bias = {"", 0, 0, true}; /* bias scale is not s_x * s_w */
  g = folded(&bias, &rw);
  CHECK(rw == 3 && count_op(g, "Conv") == 1);
  kiln_graph_destroy(g);
}

/* The quantized outputs of the folded graph within one step of the graph as
 * written, on seeded random inputs; most elements identical. Only the first
 * layer reads the same integers in both graphs for sure; a later layer is
 * compared when its inputs agree (a 1-step difference upstream may move it
 * further, as it would in any int8 runtime). */
static void test_numerics(void) {
  const variant_t vs[2] = {{"Relu", 0, 0, false}, {"", 128, 0, false}};
  int64_t total = 0, same = 0;
  for (int k = 0; k < 2; ++k) {
    kiln_graph_t* ref = build_chain(&vs[k]);
    int rw = 0;
    kiln_graph_t* opt = folded(&vs[k], &rw);
    CHECK(rw == 4);
    kiln_ref_options_t o;
    kiln_ref_options_default(&o);
    for (uint64_t seed = 0; seed < 8; ++seed) {
      rng_state = seed * 7919 + 3;
      kiln_array_t in;
      const int64_t xd[4] = {1, 4, 6, 6};
      kiln_shape_t xs = kiln_shape_make(4, xd);
      CHECK_OK(kiln_array_alloc(A(), KILN_DTYPE_F32, &xs, &in));
      for (int64_t i = 0; i < kiln_array_numel(&in); ++i) ((float*)in.data)[i] = 3.f * frand();
      kiln_array_t want[4] = {{0}}, got[4] = {{0}};
      if (CHECK_OK(kiln_ref_run(ref, &in, &o, want)) && CHECK_OK(kiln_ref_run(opt, &in, &o, got))) {
        /* r1_q: the first layer reads the same integers in both graphs */
        const int64_t n = kiln_array_numel(&want[0]);
        CHECK(kiln_array_numel(&got[0]) == n && got[0].dtype == want[0].dtype);
        for (int64_t i = 0; i < n; ++i) {
          const double a = kiln_load_f64(want[0].dtype, want[0].data, (size_t)i);
          const double b = kiln_load_f64(got[0].dtype, got[0].data, (size_t)i);
          CHECK_MSG(fabs(a - b) <= 1, "r1_q[%lld]: %g vs %g", (long long)i, a, b);
          same += a == b;
          ++total;
        }
        /* later layers: identical whenever their inputs are */
        const bool r1_same = memcmp(want[0].data, got[0].data, (size_t)n) == 0;
        for (int j = 1; j < 3 && r1_same; ++j) {
          const int64_t m = kiln_array_numel(&want[j]);
          for (int64_t i = 0; i < m; ++i) {
            const double a = kiln_load_f64(want[j].dtype, want[j].data, (size_t)i);
            const double b = kiln_load_f64(got[j].dtype, got[j].data, (size_t)i);
            CHECK_MSG(fabs(a - b) <= 1, "output %d [%lld]: %g vs %g", j, (long long)i, a, b);
            same += a == b;
            ++total;
          }
        }
      }
      for (int j = 0; j < 4; ++j) {
        kiln_array_free(A(), &want[j]);
        kiln_array_free(A(), &got[j]);
      }
      kiln_array_free(A(), &in);
    }
    kiln_graph_destroy(ref);
    kiln_graph_destroy(opt);
  }
  printf("fold-qdq numerics: %lld of %lld quantized elements identical, the rest 1 step\n",
         (long long)same, (long long)total);
  CHECK(total > 0 && same * 100 >= total * 99);
}

int main(void) {
  RUN(test_structure);
  RUN(test_left_alone);
  RUN(test_numerics);
  return kiln_test_finish();
}
