/* kiln's post-training quantization (compiler/quantize.h) and the QDQ
 * writer (frontend/onnx_qdq.h) on a small Conv -> Relu -> Flatten -> Gemm
 * model built here: scales and zero points against values computed from the
 * samples, per-channel and per-tensor integer weights, int32 biases at
 * s_in * s_w, clipping by percentile and entropy, the SQNR report, the
 * written model's nodes and initializers, and the errors. The onnxruntime
 * side (the QDQ model's accuracy) is tests/models/test_digits_quant.py. */
#include "bad_model_util.h" /* first: it defines _GNU_SOURCE */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compiler/quantize.h"
#include "frontend/onnx_qdq.h"
#include "testing.h"

#define NS 24   /* calibration samples */
#define OUTLIER 40.0f

static char g_dir[256];
static char g_model[512];

/* Conv(2->3, 3x3, pad 1, bias) -> Relu -> Flatten -> Gemm(48->5, transB, bias).
 * Each conv channel's weights have their own magnitude (per-channel scales
 * differ by 4x). */
static void write_model(const char* path, int64_t opset) {
  bm_model_t b;
  bm_init(&b, opset);
  int64_t xd[] = {1, 2, 4, 4}, wd[] = {3, 2, 3, 3}, bd[] = {3}, w2d[] = {5, 48}, b2d[] = {5};
  bm_input(&b, "x", BM_F32, 4, xd);
  float w[54], bias[3], w2[240], b2[5];
  for (int i = 0; i < 54; ++i) w[i] = (float)((i % 7) - 3) * 0.1f * (float)(1 + i / 18);
  for (int i = 0; i < 3; ++i) bias[i] = 0.05f * (float)(i + 1);
  for (int i = 0; i < 240; ++i) w2[i] = (float)((i * 5 % 11) - 5) * 0.02f;
  for (int i = 0; i < 5; ++i) b2[i] = -0.1f * (float)i;
  bm_initializer(&b, "W", BM_F32, 4, wd, w, sizeof w);
  bm_initializer(&b, "B", BM_F32, 1, bd, bias, sizeof bias);
  bm_initializer(&b, "W2", BM_F32, 2, w2d, w2, sizeof w2);
  bm_initializer(&b, "B2", BM_F32, 1, b2d, b2, sizeof b2);
  Onnx__NodeProto* c = bm_node(&b, "Conv", "conv", "x,W,B", "c");
  int64_t pads[] = {1, 1, 1, 1};
  bm_attr_ints(&b, c, "pads", 4, pads);
  bm_node(&b, "Relu", "relu", "c", "r");
  bm_node(&b, "Flatten", "flat", "r", "f");
  Onnx__NodeProto* gm = bm_node(&b, "Gemm", "gemm", "f,W2,B2", "y");
  bm_attr_int(&b, gm, "transB", 1);
  bm_output(&b, "y");
  CHECK(bm_write(&b, path));
  bm_free(&b);
}

/* Samples in [-1, 1) from a fixed LCG; sample 5 holds one outlier. */
static kiln_array_t* make_inputs(double* out_min, double* out_max) {
  kiln_array_t* in = calloc(NS, sizeof(*in));
  int64_t d[] = {1, 2, 4, 4};
  kiln_shape_t s = kiln_shape_make(4, d);
  uint32_t r = 12345;
  *out_min = INFINITY;
  *out_max = -INFINITY;
  for (int k = 0; k < NS; ++k) {
    CHECK_OK(kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_F32, &s, &in[k]));
    float* x = in[k].data;
    for (int i = 0; i < 32; ++i) {
      r = r * 1664525u + 1013904223u;
      x[i] = (float)((double)(r >> 8) / (double)(1u << 24) * 2.0 - 1.0);
      if (k == 5 && i == 7) x[i] = OUTLIER;
      if (x[i] < *out_min) *out_min = x[i];
      if (x[i] > *out_max) *out_max = x[i];
    }
  }
  return in;
}

static void free_inputs(kiln_array_t* in) {
  for (int k = 0; k < NS; ++k) kiln_array_free(kiln_allocator_system(), &in[k]);
  free(in);
}

static int32_t find_act(const kiln_quant_result_t* r, const char* name) {
  for (int32_t i = 0; i < r->plan.n_acts; ++i)
    if (!strcmp(r->plan.acts[i].name, name)) return i;
  return -1;
}
static const kiln_qdq_const_t* find_const(const kiln_quant_result_t* r, const char* name) {
  for (int32_t i = 0; i < r->plan.n_consts; ++i)
    if (!strcmp(r->plan.consts[i].name, name)) return &r->plan.consts[i];
  return NULL;
}

static kiln_status_t quantize(kiln_graph_t* g, const kiln_array_t* in, kiln_quant_method_t m,
                              bool per_tensor, kiln_dtype_t act, kiln_quant_result_t* r) {
  kiln_quantize_options_t o;
  kiln_quantize_options_default(&o);
  o.method = m;
  o.percentile = 99; /* the one outlier is 1/768 of the values */
  o.per_tensor_weights = per_tensor;
  o.act_dtype = act;
  return kiln_quantize(g, in, NS, &o, r);
}

/* The model loaded and its samples, shared by the tests below. */
typedef struct {
  kiln_graph_t* g;
  kiln_array_t* in;
  double lo, hi;  /* over all samples */
} fix_t;

static bool fix_open(fix_t* f) {
  memset(f, 0, sizeof(*f));
  CHECK_OK(kiln_onnx_load_model(g_model, NULL, kiln_allocator_system(), &f->g));
  if (!f->g) return false;
  f->in = make_inputs(&f->lo, &f->hi);
  return true;
}

static void fix_close(fix_t* f) {
  if (f->in) free_inputs(f->in);
  kiln_graph_destroy(f->g);
}

static void test_minmax_per_channel(void) {
  fix_t fx;
  if (!fix_open(&fx)) return;
  kiln_graph_t* g = fx.g;
  kiln_array_t* in = fx.in;
  kiln_quant_result_t r;
  CHECK_OK(quantize(g, in, KILN_QUANT_MINMAX, false, KILN_DTYPE_U8, &r));
  CHECK(r.n_layers == 2 && r.samples == NS);
  /* Activations: the input, the conv output, the Gemm input; y is a model
   * output and stays float. */
  int32_t ax = find_act(&r, "x"), ac = find_act(&r, "c"), af = find_act(&r, "f");
  CHECK(ax >= 0 && ac >= 0 && af >= 0 && find_act(&r, "y") < 0 && r.plan.n_acts == 3);
  CHECK(r.layers[1].act_out == -1);
  if (ax >= 0) {
    const kiln_qdq_act_t* a = &r.plan.acts[ax];
    CHECK_NEAR(r.act_max[ax], OUTLIER, 0);
    CHECK_NEAR(a->scale, (fx.hi - fx.lo) / 255.0, 1e-6);
    CHECK(a->zero_point == (int32_t)rint(-fx.lo / a->scale) && a->dtype == KILN_DTYPE_U8);
  }
  if (af >= 0) CHECK(r.plan.acts[af].zero_point == 0); /* after Relu: [0, max] */
  /* The conv output's only reader is the Relu: its range starts at 0 too,
   * and its SQNR is measured after the clamp. */
  if (ac >= 0) CHECK(r.act_min[ac] == 0 && r.plan.acts[ac].zero_point == 0 && r.act_max[ac] > 0);
  const kiln_qdq_const_t* w = find_const(&r, "W");
  const kiln_qdq_const_t* b = find_const(&r, "B");
  CHECK(w && b && find_const(&r, "W2") && find_const(&r, "B2"));
  if (w && b && ax >= 0) {
    CHECK(w->axis == 0 && w->n_scales == 3 && w->q.dtype == KILN_DTYPE_I8);
    const kiln_tensor_t* wt = &g->tensors[kiln_graph_find_tensor(g, "W")];
    const float* wf = wt->value.data;
    const int8_t* q = w->q.data;
    for (int c = 0; c < 3; ++c) {
      double amax = 0;
      int qmax = 0;
      for (int i = c * 18; i < (c + 1) * 18; ++i) {
        amax = fmax(amax, fabs(wf[i]));
        qmax = abs(q[i]) > qmax ? abs(q[i]) : qmax;
        CHECK(q[i] == (int8_t)rintf(wf[i] / w->scales[c]));
      }
      CHECK_NEAR(w->scales[c], amax / 127, 1e-7);
      CHECK(qmax == 127);
    }
    CHECK(w->scales[2] > 2.5 * w->scales[0]);
    CHECK(b->axis == 0 && b->n_scales == 3 && b->q.dtype == KILN_DTYPE_I32);
    const float* bf = g->tensors[kiln_graph_find_tensor(g, "B")].value.data;
    for (int c = 0; c < 3; ++c) {
      CHECK(b->scales[c] == r.plan.acts[ax].scale * w->scales[c]); /* in float, as stored */
      CHECK(((const int32_t*)b->q.data)[c] == (int32_t)rint(bf[c] / b->scales[c]));
    }
  }
  /* The simulation's error is small and the weights are back as they were. */
  for (int i = 0; i < r.n_layers; ++i) CHECK_MSG(r.layers[i].sqnr_db > 15 && isfinite(r.layers[i].sqnr_db), "layer %d: %g dB", i, r.layers[i].sqnr_db);
  CHECK(r.output_sqnr_db[0] > 15);
  CHECK(((const float*)g->tensors[kiln_graph_find_tensor(g, "W")].value.data)[1] == -0.2f);
  char* buf = NULL;
  size_t n = 0;
  FILE* f = open_memstream(&buf, &n);
  kiln_quant_report_print(g, &r, f);
  fclose(f);
  CHECK(buf && strstr(buf, "conv") && strstr(buf, "gemm") && strstr(buf, "float (model output)") &&
        strstr(buf, "model output y"));
  free(buf);
  kiln_quant_result_free(&r);
  fix_close(&fx);
}

/* The outlier sets minmax's range; percentile and entropy clip it. */
static void test_methods_clip(void) {
  fix_t fx;
  if (!fix_open(&fx)) return;
  kiln_graph_t* g = fx.g;
  kiln_array_t* in = fx.in;
  kiln_quant_method_t ms[] = {KILN_QUANT_PERCENTILE, KILN_QUANT_ENTROPY};
  for (int m = 0; m < 2; ++m) {
    kiln_quant_result_t r;
    CHECK_OK(quantize(g, in, ms[m], false, KILN_DTYPE_U8, &r));
    int32_t ax = find_act(&r, "x");
    CHECK(ax >= 0);
    if (ax < 0) continue;
    CHECK_MSG(r.act_max[ax] < OUTLIER / 4 && r.act_max[ax] >= 0.5, "method %d: max %g", m, r.act_max[ax]);
    CHECK(r.act_min[ax] >= fx.lo && r.act_min[ax] <= -0.5);
    CHECK(r.plan.acts[ax].scale < 0.2f * (float)((fx.hi - fx.lo) / 255.0));
    kiln_quant_result_free(&r);
  }
  fix_close(&fx);
}

static void test_per_tensor_i8(void) {
  fix_t fx;
  if (!fix_open(&fx)) return;
  kiln_graph_t* g = fx.g;
  kiln_array_t* in = fx.in;
  kiln_quant_result_t r;
  CHECK_OK(quantize(g, in, KILN_QUANT_MINMAX, true, KILN_DTYPE_I8, &r));
  const kiln_qdq_const_t* w = find_const(&r, "W");
  const kiln_qdq_const_t* b = find_const(&r, "B");
  CHECK(w && w->axis == -1 && w->n_scales == 1 && b && b->axis == -1 && b->n_scales == 1);
  int32_t ax = find_act(&r, "x");
  if (ax >= 0) {
    const kiln_qdq_act_t* a = &r.plan.acts[ax];
    CHECK(a->dtype == KILN_DTYPE_I8 && a->zero_point == (int32_t)rint(-128 - fx.lo / a->scale));
    CHECK(a->zero_point >= -128 && a->zero_point <= 127);
  }
  kiln_quant_result_free(&r);
  fix_close(&fx);
}

/* The written model: Q/DQ nodes, integer initializers, readers rewired. */
static void test_write_qdq(void) {
  fix_t fx;
  if (!fix_open(&fx)) return;
  kiln_graph_t* g = fx.g;
  kiln_array_t* in = fx.in;
  kiln_quant_result_t r;
  CHECK_OK(quantize(g, in, KILN_QUANT_MINMAX, false, KILN_DTYPE_U8, &r));
  char out[600];
  snprintf(out, sizeof out, "%s/q.onnx", g_dir);
  CHECK_OK(kiln_onnx_write_qdq(g_model, &r.plan, out));
  kiln_graph_t* q = NULL;
  CHECK_OK(kiln_onnx_parse_model(out, NULL, kiln_allocator_system(), &q));
  if (q) {
    int nq = 0, ndq = 0;
    for (int32_t i = 0; i < q->n_nodes; ++i) {
      nq += !strcmp(q->nodes[i].op_type, "QuantizeLinear");
      ndq += !strcmp(q->nodes[i].op_type, "DequantizeLinear");
      if (!strcmp(q->nodes[i].name, "conv"))
        CHECK(!strcmp(q->tensors[q->nodes[i].inputs[0]].name, "x_dequantized") &&
              !strcmp(q->tensors[q->nodes[i].inputs[1]].name, "W"));
    }
    CHECK(nq == 3 && ndq == 3 + 4);
    int32_t t = kiln_graph_find_tensor(q, "W_quantized");
    const kiln_qdq_const_t* w = find_const(&r, "W");
    CHECK(t >= 0 && w);
    if (t >= 0 && w)
      CHECK(q->tensors[t].value.dtype == KILN_DTYPE_I8 && q->tensors[t].value.nbytes == 54 &&
            !memcmp(q->tensors[t].value.data, w->q.data, 54));
    t = kiln_graph_find_tensor(q, "W_scale");
    CHECK(t >= 0 && q->tensors[t].value.shape.rank == 1 && q->tensors[t].value.shape.dims[0] == 3);
    t = kiln_graph_find_tensor(q, "B2_quantized");
    CHECK(t >= 0 && q->tensors[t].value.dtype == KILN_DTYPE_I32);
    t = kiln_graph_find_tensor(q, "x_zero_point");
    CHECK(t >= 0 && q->tensors[t].value.dtype == KILN_DTYPE_U8 && q->tensors[t].value.shape.rank == 0);
    /* The float weights are gone from the initializers. */
    t = kiln_graph_find_tensor(q, "W");
    CHECK(t >= 0 && !(q->tensors[t].flags & KILN_TENSOR_INITIALIZER));
    kiln_graph_destroy(q);
  }
  /* A plan naming what the file lacks, and an old opset: errors naming the
   * file and the tensor, and no file written. */
  char bad[600];
  snprintf(bad, sizeof bad, "%s/bad.onnx", g_dir);
  const char* saved = r.plan.consts[0].name;
  r.plan.consts[0].name = "no_such_weight";
  CHECK_ERR(kiln_onnx_write_qdq(g_model, &r.plan, bad), KILN_NOT_FOUND, "no_such_weight");
  r.plan.consts[0].name = saved;
  const char* saved_act = r.plan.acts[0].name;
  r.plan.acts[0].name = "no_such_tensor";
  CHECK_ERR(kiln_onnx_write_qdq(g_model, &r.plan, bad), KILN_NOT_FOUND, "no_such_tensor");
  r.plan.acts[0].name = saved_act;
  char old[600];
  snprintf(old, sizeof old, "%s/opset12.onnx", g_dir);
  write_model(old, 12);
  CHECK_ERR(kiln_onnx_write_qdq(old, &r.plan, bad), KILN_UNSUPPORTED, "opset12.onnx: opset 12");
  CHECK(access(bad, F_OK) != 0);
  kiln_quant_result_free(&r);
  fix_close(&fx);
}

/* MatMul: a constant [K, N] weight is quantized per output column (axis
 * 1), has no bias, and a non-constant second operand is an activation. */
static void test_matmul(void) {
  char path[600];
  snprintf(path, sizeof path, "%s/mm.onnx", g_dir);
  bm_model_t b;
  bm_init(&b, 13);
  int64_t xd[] = {1, 8}, wd[] = {8, 6};
  bm_input(&b, "x", BM_F32, 2, xd);
  float w[48];
  for (int i = 0; i < 48; ++i) w[i] = (float)((i % 5) - 2) * 0.1f * (float)(1 + i % 6);
  bm_initializer(&b, "Wm", BM_F32, 2, wd, w, sizeof w);
  bm_node(&b, "MatMul", "mm", "x,Wm", "h");
  bm_node(&b, "Transpose", "tr", "h", "ht");
  bm_node(&b, "MatMul", "gram", "ht,h", "y");
  bm_output(&b, "y");
  CHECK(bm_write(&b, path));
  bm_free(&b);
  kiln_graph_t* g = NULL;
  CHECK_OK(kiln_onnx_load_model(path, NULL, kiln_allocator_system(), &g));
  if (!g) return;
  kiln_array_t in[NS];
  int64_t d[] = {1, 8};
  kiln_shape_t s = kiln_shape_make(2, d);
  for (int k = 0; k < NS; ++k) {
    CHECK_OK(kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_F32, &s, &in[k]));
    for (int i = 0; i < 8; ++i) ((float*)in[k].data)[i] = (float)((k * 3 + i) % 9) * 0.25f - 1.0f;
  }
  kiln_quant_result_t r;
  kiln_quantize_options_t o;
  kiln_quantize_options_default(&o);
  CHECK_OK(kiln_quantize(g, in, NS, &o, &r));
  const kiln_qdq_const_t* wm = find_const(&r, "Wm");
  CHECK(r.n_layers == 2 && r.plan.n_consts == 1 && wm && wm->axis == 1 && wm->n_scales == 6);
  CHECK(r.n_layers == 2 && r.layers[1].weight == -1 && r.layers[1].act_b >= 0 && r.layers[0].bias == -1);
  CHECK(find_act(&r, "ht") >= 0 && find_act(&r, "h") >= 0 && find_act(&r, "y") < 0);
  CHECK(r.output_sqnr_db[0] > 20);
  kiln_quant_result_free(&r);
  for (int k = 0; k < NS; ++k) kiln_array_free(kiln_allocator_system(), &in[k]);
  kiln_graph_destroy(g);
}

static void test_bad_options(void) {
  fix_t fx;
  if (!fix_open(&fx)) return;
  kiln_graph_t* g = fx.g;
  kiln_array_t* in = fx.in;
  kiln_quantize_options_t o;
  kiln_quantize_options_default(&o);
  kiln_quant_result_t r;
  CHECK_ERR(kiln_quantize(g, in, 0, &o, &r), KILN_INVALID_ARGUMENT, "no calibration samples");
  o.method = KILN_QUANT_PERCENTILE;
  o.percentile = 10;
  CHECK_ERR(kiln_quantize(g, in, NS, &o, &r), KILN_INVALID_ARGUMENT, "percentile 10");
  kiln_quantize_options_default(&o);
  o.act_dtype = KILN_DTYPE_F32;
  CHECK_ERR(kiln_quantize(g, in, NS, &o, &r), KILN_INVALID_ARGUMENT, "u8 or i8");
  /* A sample of the wrong shape: the error names the sample and input. */
  kiln_quantize_options_default(&o);
  int64_t d[] = {1, 2, 4, 5};
  kiln_shape_t s = kiln_shape_make(4, d);
  kiln_array_free(kiln_allocator_system(), &in[3]);
  CHECK_OK(kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_F32, &s, &in[3]));
  CHECK_ERR(kiln_quantize(g, in, NS, &o, &r), KILN_INVALID_ARGUMENT, "calibration sample 3");
  CHECK(r.plan.n_acts == 0 && r.layers == NULL);
  fix_close(&fx);
}

int main(void) {
  if (!bm_tmpdir("quantize", g_dir, sizeof g_dir)) {
    fprintf(stderr, "cannot create a temp folder\n");
    return 1;
  }
  snprintf(g_model, sizeof g_model, "%s/m.onnx", g_dir);
  write_model(g_model, 13);
  RUN(test_minmax_per_channel);
  RUN(test_methods_clip);
  RUN(test_per_tensor_i8);
  RUN(test_write_qdq);
  RUN(test_matmul);
  RUN(test_bad_options);
  bm_rmtree(g_dir);
  return kiln_test_finish();
}
