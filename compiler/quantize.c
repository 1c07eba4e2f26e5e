/* Post-training quantization (see quantize.h): layer choice, calibration
 * passes through the reference executor's on_outputs hook, range methods,
 * integer weights and biases, and the QDQ simulation that measures SQNR. */
#include "compiler/quantize.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "compiler/ref_exec.h"

#define HIST_BINS 2048

void kiln_quantize_options_default(kiln_quantize_options_t* o) {
  memset(o, 0, sizeof(*o));
  o->method = KILN_QUANT_MINMAX;
  o->percentile = 99.99;
  o->act_dtype = KILN_DTYPE_U8;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- progress ------------------------------------------------------------ */

/* One line, rewritten in place on a terminal; elsewhere (logs, ctest) a
 * line per tenth of the work so the output stays short. */
typedef struct {
  FILE* f;
  bool tty;
  double t0, last;
  int64_t done, total;
  int32_t last_tenth;
} progress_t;

static void progress_step(progress_t* p, const char* phase) {
  if (!p->f) return;
  ++p->done;
  double t = now_s(), el = t - p->t0;
  double eta = el / (double)p->done * (double)(p->total - p->done);
  int32_t tenth = (int32_t)(p->done * 10 / (p->total ? p->total : 1));
  bool end = p->done == p->total;
  if (p->tty ? (t - p->last < 0.1 && !end) : (tenth == p->last_tenth && !end)) return;
  p->last = t;
  p->last_tenth = tenth;
  fprintf(p->f, "%scalibrating: %lld/%lld runs (%s), %.1f s, ETA %.1f s%s", p->tty ? "\r" : "",
          (long long)p->done, (long long)p->total, phase, el, eta, p->tty && !end ? "" : "\n");
  fflush(p->f);
}

/* ---- state --------------------------------------------------------------- */

typedef struct {
  double min, max, absmax;
  double* hist;  /* HIST_BINS of |x| over [0, absmax] (percentile, entropy) */
  /* Values are recorded clamped to [floor, ceil]: the bounds of a Relu or
   * Clip that is the tensor's only reader, which clamps the same values after
   * the DequantizeLinear, so that no integer level is spent below or above
   * them (QuantizeLinear saturates there instead, to the same result). */
  double floor, ceil;
} range_t;

typedef enum { PASS_RANGE, PASS_HIST, PASS_REF, PASS_SIM } pass_t;

typedef struct {
  kiln_graph_t* g;
  const kiln_quantize_options_t* o;
  kiln_quant_result_t* r;
  int32_t* act_of;     /* per tensor: plan.acts index, -1 */
  int32_t* layer_of;   /* per tensor: the layer whose output it is, -1 */
  range_t* range;      /* per plan.acts */
  kiln_array_t* ref;   /* per layer: fp32 output of the current sample */
  double* sig;         /* per layer: sum x^2, sum (x - x_q)^2 */
  double* noise;
  pass_t pass;
} qctx_t;

static void qrange(kiln_dtype_t dt, int32_t* lo, int32_t* hi) {
  *lo = dt == KILN_DTYPE_U8 ? 0 : -128;
  *hi = dt == KILN_DTYPE_U8 ? 255 : 127;
}

/* QuantizeLinear then DequantizeLinear, as the ONNX spec computes them
 * (round half to even, saturate). */
static void fake_quant(const kiln_qdq_act_t* a, float* x, int64_t n) {
  int32_t lo, hi;
  qrange(a->dtype, &lo, &hi);
  for (int64_t i = 0; i < n; ++i) {
    float q = rintf(x[i] / a->scale) + (float)a->zero_point;
    q = q < (float)lo ? (float)lo : q > (float)hi ? (float)hi : q;
    x[i] = (q - (float)a->zero_point) * a->scale;
  }
}

static void record(qctx_t* c, int32_t act, const kiln_array_t* v) {
  range_t* r = &c->range[act];
  const float* x = v->data;
  int64_t n = kiln_array_numel(v);
  if (c->pass == PASS_RANGE) {
    for (int64_t i = 0; i < n; ++i) {
      double d = fmin(fmax((double)x[i], r->floor), r->ceil);
      if (d < r->min) r->min = d;
      if (d > r->max) r->max = d;
      if (fabs(d) > r->absmax) r->absmax = fabs(d);
    }
  } else if (r->absmax > 0) {
    double w = r->absmax / HIST_BINS;
    for (int64_t i = 0; i < n; ++i) {
      int64_t b = (int64_t)(fabs(fmin(fmax((double)x[i], r->floor), r->ceil)) / w);
      r->hist[b >= HIST_BINS ? HIST_BINS - 1 : b] += 1;
    }
  }
}

static kiln_status_t visit(qctx_t* c, int32_t t, kiln_array_t* v) {
  int32_t a = c->act_of[t], l = c->layer_of[t];
  if (a >= 0 && (c->pass == PASS_RANGE || c->pass == PASS_HIST)) record(c, a, v);
  if (a >= 0 && c->pass == PASS_SIM) fake_quant(&c->r->plan.acts[a], v->data, kiln_array_numel(v));
  if (l >= 0 && c->pass == PASS_REF)
    KILN_RETURN_IF_ERROR(kiln_array_clone(kiln_allocator_system(), v, &c->ref[l]), "layer output '%s'",
                         c->g->tensors[t].name);
  if (l >= 0 && c->pass == PASS_SIM) {
    /* Measured after the lone Relu/Clip reader's clamp, which the int8 value
     * has already had (QuantizeLinear saturates at its bounds). */
    double lo = a >= 0 ? c->range[a].floor : -INFINITY, hi = a >= 0 ? c->range[a].ceil : INFINITY;
    const float* x = c->ref[l].data;
    const float* y = v->data;
    for (int64_t i = 0, n = kiln_array_numel(v); i < n; ++i) {
      double want = fmin(fmax((double)x[i], lo), hi), d = (double)y[i] - want;
      c->sig[l] += want * want;
      c->noise[l] += d * d;
    }
  }
  return NULL;
}

static kiln_status_t on_outputs(void* user, const kiln_graph_t* g, int32_t node,
                                kiln_array_t* const* outs) {
  qctx_t* c = user;
  const kiln_node_t* n = &g->nodes[node];
  for (int32_t j = 0; j < n->n_outputs; ++j)
    if (outs[j] && n->outputs[j] >= 0 && outs[j]->dtype == KILN_DTYPE_F32)
      KILN_RETURN_IF_ERROR(visit(c, n->outputs[j], outs[j]));
  return NULL;
}

static double sqnr_db(double sig, double noise) {
  if (noise <= 0) return INFINITY;
  if (sig <= 0) return -INFINITY;
  return 10 * log10(sig / noise);
}

/* One reference run of sample |k| in the current pass; graph inputs that are
 * quantized activations get the same treatment as node outputs. The model's
 * outputs go to |outs| (freed by the caller) when it is not NULL. */
static kiln_status_t run_one(qctx_t* c, const kiln_array_t* inputs, int32_t k, kiln_array_t* outs) {
  kiln_graph_t* g = c->g;
  kiln_allocator_t al = kiln_allocator_system();
  kiln_array_t in[64];
  kiln_array_t out[64];
  if (g->n_inputs > 64 || g->n_outputs > 64)
    return kiln_make_status(KILN_UNSUPPORTED, "kiln quantize handles up to 64 model inputs and outputs");
  memset(in, 0, sizeof in);
  memset(out, 0, sizeof out);
  kiln_status_t s = NULL;
  for (int32_t i = 0; i < g->n_inputs && !s; ++i) {
    s = kiln_array_clone(al, &inputs[(size_t)k * g->n_inputs + i], &in[i]);
    if (!s && in[i].dtype == KILN_DTYPE_F32) s = visit(c, g->inputs[i], &in[i]);
  }
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  ro.on_outputs = on_outputs;
  ro.user = c;
  if (!s) s = kiln_ref_run(g, in, &ro, out);
  for (int32_t i = 0; i < g->n_inputs; ++i) kiln_array_free(al, &in[i]);
  if (s) return kiln_status_annotate(s, "calibration sample %d", (int)k);
  for (int32_t i = 0; i < g->n_outputs; ++i) {
    if (outs) outs[i] = out[i];
    else kiln_array_free(al, &out[i]);
  }
  return NULL;
}

/* ---- layer choice -------------------------------------------------------- */

static bool is_float_act(const kiln_graph_t* g, int32_t t) {
  return t >= 0 && g->tensors[t].dtype == KILN_DTYPE_F32 && !(g->tensors[t].flags & KILN_TENSOR_CONST);
}

/* A float initializer (a tensor of the model file, not a folded value). */
static bool is_float_init(const kiln_graph_t* g, int32_t t) {
  return t >= 0 && g->tensors[t].dtype == KILN_DTYPE_F32 && (g->tensors[t].flags & KILN_TENSOR_CONST) &&
         (g->tensors[t].flags & KILN_TENSOR_INITIALIZER) && g->tensors[t].producer < 0;
}

static int64_t attr_i(const kiln_node_t* n, const char* name, int64_t dflt) {
  const kiln_attr_t* a = kiln_node_attr(n, name);
  return a && a->type == KILN_ATTR_INT ? a->i : dflt;
}
static double attr_f(const kiln_node_t* n, const char* name, double dflt) {
  const kiln_attr_t* a = kiln_node_attr(n, name);
  return a && a->type == KILN_ATTR_FLOAT ? a->f : dflt;
}

static kiln_status_t grow(void** p, int32_t n, size_t size) {
  void* q = realloc(*p, size * (size_t)(n + 1));
  if (!q) return kiln_make_status(KILN_OUT_OF_MEMORY, "kiln quantize: out of memory");
  *p = q;
  return NULL;
}

static kiln_status_t add_act(qctx_t* c, int32_t t, int32_t* out_idx) {
  kiln_qdq_plan_t* p = &c->r->plan;
  if (c->act_of[t] < 0) {
    KILN_RETURN_IF_ERROR(grow((void**)&p->acts, p->n_acts, sizeof(*p->acts)));
    p->acts[p->n_acts] = (kiln_qdq_act_t){c->g->tensors[t].name, c->o->act_dtype, 1.0f, 0};
    c->act_of[t] = p->n_acts++;
  }
  *out_idx = c->act_of[t];
  return NULL;
}

/* Registers constant |t| (filled in later) with channel |axis|; -1 when |t|
 * is already a constant of the plan with another axis. */
static kiln_status_t add_const(qctx_t* c, int32_t t, int32_t axis, int32_t* out_idx) {
  kiln_qdq_plan_t* p = &c->r->plan;
  for (int32_t i = 0; i < p->n_consts; ++i)
    if (!strcmp(p->consts[i].name, c->g->tensors[t].name)) {
      *out_idx = p->consts[i].axis == axis ? i : -1;
      return NULL;
    }
  KILN_RETURN_IF_ERROR(grow((void**)&p->consts, p->n_consts, sizeof(*p->consts)));
  memset(&p->consts[p->n_consts], 0, sizeof(*p->consts));
  p->consts[p->n_consts].name = c->g->tensors[t].name;
  p->consts[p->n_consts].axis = axis;
  *out_idx = p->n_consts++;
  return NULL;
}

static kiln_status_t skip(qctx_t* c, int32_t node, const char* why) {
  kiln_quant_result_t* r = c->r;
  KILN_RETURN_IF_ERROR(grow((void**)&r->skipped, r->n_skipped, sizeof(*r->skipped)));
  r->skipped[r->n_skipped++] = (kiln_quant_skip_t){node, why};
  return NULL;
}

/* The weight's output-channel axis for |n| (-1: per tensor). */
static int32_t weight_axis(const kiln_node_t* n, const kiln_tensor_t* w, bool per_tensor) {
  if (per_tensor || w->shape.rank < 1) return -1;
  if (!strcmp(n->op_type, "Conv")) return 0;
  if (!strcmp(n->op_type, "Gemm")) return attr_i(n, "transB", 0) ? 0 : 1;
  return w->shape.rank >= 2 ? w->shape.rank - 1 : -1;
}

/* A constant f32 scalar input |j| of |n|, else |dflt|. */
static double const_scalar(const kiln_graph_t* g, const kiln_node_t* n, int32_t j, double dflt) {
  int32_t t = j < n->n_inputs ? n->inputs[j] : -1;
  if (t < 0 || !(g->tensors[t].flags & KILN_TENSOR_CONST) || g->tensors[t].dtype != KILN_DTYPE_F32 ||
      kiln_array_numel(&g->tensors[t].value) != 1)
    return dflt;
  return ((const float*)g->tensors[t].value.data)[0];
}

/* The bounds a lone Relu or Clip reader of |t| clamps it to (see range_t). */
static void reader_bounds(const kiln_graph_t* g, int32_t t, double* lo, double* hi) {
  *lo = -INFINITY;
  *hi = INFINITY;
  const kiln_node_t* reader = NULL;
  for (int32_t ni = 0; ni < g->n_nodes; ++ni)
    for (int32_t j = 0; j < g->nodes[ni].n_inputs; ++j)
      if (g->nodes[ni].inputs[j] == t) {
        if (reader) return; /* two readers, or one reading it twice */
        reader = &g->nodes[ni];
      }
  if (!reader || reader->domain[0] || reader->inputs[0] != t) return;
  if (!strcmp(reader->op_type, "Relu")) {
    *lo = 0;
  } else if (!strcmp(reader->op_type, "Clip")) {
    /* Before opset 11 the bounds are attributes, since then inputs. */
    *lo = g->opset < 11 ? attr_f(reader, "min", -INFINITY) : const_scalar(g, reader, 1, -INFINITY);
    *hi = g->opset < 11 ? attr_f(reader, "max", INFINITY) : const_scalar(g, reader, 2, INFINITY);
    if (!(*lo <= *hi)) *lo = -INFINITY, *hi = INFINITY;
  }
}

static kiln_status_t choose_layers(qctx_t* c) {
  kiln_graph_t* g = c->g;
  kiln_quant_result_t* r = c->r;
  for (int32_t ni = 0; ni < g->n_nodes; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    bool conv = !strcmp(n->op_type, "Conv"), gemm = !strcmp(n->op_type, "Gemm");
    if (n->domain[0] || !(conv || gemm || !strcmp(n->op_type, "MatMul"))) continue;
    int32_t x = n->inputs[0], w = n->n_inputs > 1 ? n->inputs[1] : -1, y = n->outputs[0];
    if (!is_float_act(g, x) || w < 0 || g->tensors[w].dtype != KILN_DTYPE_F32 || !is_float_act(g, y)) {
      KILN_RETURN_IF_ERROR(skip(c, ni, "not a float activation input and output"));
      continue;
    }
    if (g->tensors[w].flags & KILN_TENSOR_CONST && !is_float_init(g, w)) {
      KILN_RETURN_IF_ERROR(skip(c, ni, "its weight is a computed constant, not an initializer"));
      continue;
    }
    KILN_RETURN_IF_ERROR(grow((void**)&r->layers, r->n_layers, sizeof(*r->layers)));
    kiln_quant_layer_t L = {ni, -1, -1, -1, -1, -1, 0};
    KILN_RETURN_IF_ERROR(add_act(c, x, &L.act_in));
    if (is_float_init(g, w)) {
      KILN_RETURN_IF_ERROR(add_const(c, w, weight_axis(n, &g->tensors[w], c->o->per_tensor_weights), &L.weight));
      if (L.weight < 0) {
        KILN_RETURN_IF_ERROR(skip(c, ni, "its weight is shared with a layer quantizing another axis"));
        continue;
      }
    } else {
      KILN_RETURN_IF_ERROR(add_act(c, w, &L.act_b));
    }
    if (!(g->tensors[y].flags & KILN_TENSOR_OUTPUT)) KILN_RETURN_IF_ERROR(add_act(c, y, &L.act_out));
    /* The bias in int32 at s_in * s_w[c] is what QLinearConv/QGemm fusion
     * expects: one value per output channel and no alpha/beta scaling. */
    int32_t b = (conv || gemm) && n->n_inputs > 2 ? n->inputs[2] : -1;
    const kiln_tensor_t* wt = &g->tensors[w];
    int64_t channels = conv ? wt->shape.dims[0] : gemm ? wt->shape.dims[attr_i(n, "transB", 0) ? 0 : 1] : 0;
    if (b >= 0 && L.weight >= 0 && is_float_init(g, b) && g->tensors[b].shape.rank == 1 &&
        g->tensors[b].shape.dims[0] == channels &&
        (!gemm || (attr_f(n, "alpha", 1) == 1 && attr_f(n, "beta", 1) == 1))) {
      int32_t pc = c->r->plan.consts[L.weight].axis >= 0 ? 0 : -1;
      KILN_RETURN_IF_ERROR(add_const(c, b, pc, &L.bias));
    }
    r->layers[r->n_layers++] = L;
  }
  if (!r->n_layers)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: no Conv, Gemm or MatMul with a float activation input to quantize",
                            c->g->source && c->g->source[0] ? c->g->source : "graph");
  return NULL;
}

/* ---- ranges and scales --------------------------------------------------- */

/* TensorRT's entropy calibration: the clipping bin count i (in [levels,
 * HIST_BINS]) whose histogram, with the clipped mass folded into its last
 * bin (P), is closest in KL divergence to the same counts merged into
 * |levels| bins and spread back over the non-empty bins (Q). As NVIDIA's
 * pytorch-quantization does, the first bin's count is replaced by the
 * second's: the exact zeros of a ReLU (or of a Relu reader's clamp) would
 * otherwise dominate P and make clipping the tail look cheap. */
static double entropy_threshold(const double* counts, double absmax, int32_t levels) {
  double best = INFINITY;
  int32_t best_i = HIST_BINS;
  double* q = malloc(sizeof(double) * HIST_BINS * 2);
  if (!q) return absmax; /* no clipping: minmax, never a failure */
  double* hist = q + HIST_BINS;
  memcpy(hist, counts, sizeof(double) * HIST_BINS);
  hist[0] = hist[1];
  double above = 0;
  for (int32_t i = HIST_BINS; i >= levels; --i) {
    if (i < HIST_BINS) above += hist[i];
    double psum = 0;
    for (int32_t j = 0; j < i; ++j) psum += hist[j];
    psum += above;
    if (psum <= 0) continue;
    int32_t merged = i / levels;
    double qsum = 0;
    for (int32_t k = 0; k < levels; ++k) {
      int32_t a = k * merged, b = k == levels - 1 ? i : a + merged;
      double sum = 0;
      int32_t nz = 0;
      for (int32_t j = a; j < b; ++j) {
        sum += hist[j];
        nz += hist[j] != 0;
      }
      for (int32_t j = a; j < b; ++j) q[j] = hist[j] != 0 ? sum / nz : 0;
      qsum += sum;
    }
    if (qsum <= 0) continue;
    double kl = 0;
    for (int32_t j = 0; j < i; ++j) {
      double p = (hist[j] + (j == i - 1 ? above : 0)) / psum;
      if (p <= 0) continue;
      double qq = q[j] / qsum;
      kl += p * log(p / (qq > 0 ? qq : 1e-12));
    }
    if (kl < best) {
      best = kl;
      best_i = i;
    }
  }
  free(q);
  return absmax * best_i / HIST_BINS;
}

static double percentile_threshold(const double* hist, double absmax, double pct) {
  double total = 0, cum = 0;
  for (int32_t i = 0; i < HIST_BINS; ++i) total += hist[i];
  for (int32_t i = 0; i < HIST_BINS; ++i) {
    cum += hist[i];
    if (cum >= total * pct / 100.0) return absmax * (i + 1) / HIST_BINS;
  }
  return absmax;
}

static void set_scale(kiln_qdq_act_t* a, double lo, double hi) {
  lo = lo < 0 ? lo : 0;
  hi = hi > 0 ? hi : 0;
  int32_t qlo, qhi;
  qrange(a->dtype, &qlo, &qhi);
  double scale = (hi - lo) / (qhi - qlo);
  /* A tensor that is always 0: any scale represents it exactly. */
  if (!(scale > 0) || !isfinite(scale)) scale = 1;
  a->scale = (float)scale;
  double zp = rint(qlo - lo / a->scale);
  a->zero_point = (int32_t)(zp < qlo ? qlo : zp > qhi ? qhi : zp);
}

static void finish_ranges(qctx_t* c) {
  for (int32_t i = 0; i < c->r->plan.n_acts; ++i) {
    range_t* rg = &c->range[i];
    double lo = rg->min, hi = rg->max;
    if (c->o->method != KILN_QUANT_MINMAX && rg->absmax > 0) {
      double t = c->o->method == KILN_QUANT_PERCENTILE
                     ? percentile_threshold(rg->hist, rg->absmax, c->o->percentile)
                     : entropy_threshold(rg->hist, rg->absmax, rg->min >= 0 ? 255 : 128);
      if (lo < -t) lo = -t;
      if (hi > t) hi = t;
    }
    c->r->act_min[i] = lo;
    c->r->act_max[i] = hi;
    set_scale(&c->r->plan.acts[i], lo, hi);
  }
}

/* Symmetric i8 per channel (or per tensor) for weight constant |k|. */
static kiln_status_t quantize_weight(kiln_qdq_const_t* k, const kiln_tensor_t* t) {
  const float* w = t->value.data;
  int64_t n = kiln_array_numel(&t->value);
  int64_t ch = k->axis >= 0 ? t->shape.dims[k->axis] : 1, inner = 1;
  for (int32_t d = k->axis + 1; k->axis >= 0 && d < t->shape.rank; ++d) inner *= t->shape.dims[d];
  k->n_scales = (int32_t)ch;
  k->scales = calloc((size_t)ch + 1, sizeof(float));
  if (!k->scales) return kiln_make_status(KILN_OUT_OF_MEMORY, "weight '%s': out of memory", k->name);
  KILN_RETURN_IF_ERROR(kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_I8, &t->shape, &k->q),
                       "weight '%s'", k->name);
  double* amax = calloc((size_t)ch + 1, sizeof(double));
  if (!amax) return kiln_make_status(KILN_OUT_OF_MEMORY, "weight '%s': out of memory", k->name);
  for (int64_t i = 0; i < n; ++i) {
    int64_t cc = k->axis >= 0 ? (i / inner) % ch : 0;
    if (fabs((double)w[i]) > amax[cc]) amax[cc] = fabs((double)w[i]);
  }
  for (int64_t cc = 0; cc < ch; ++cc) k->scales[cc] = amax[cc] > 0 ? (float)(amax[cc] / 127.0) : 1.0f;
  free(amax);
  int8_t* q = k->q.data;
  for (int64_t i = 0; i < n; ++i) {
    float v = rintf(w[i] / k->scales[k->axis >= 0 ? (i / inner) % ch : 0]);
    q[i] = (int8_t)(v < -127 ? -127 : v > 127 ? 127 : v);
  }
  return NULL;
}

/* i32 bias at scale s_in * s_w[c] (zero point 0). */
static kiln_status_t quantize_bias(kiln_qdq_const_t* k, const kiln_tensor_t* t,
                                   const kiln_qdq_act_t* in, const kiln_qdq_const_t* w) {
  const float* b = t->value.data;
  int64_t n = kiln_array_numel(&t->value);
  k->n_scales = k->axis >= 0 ? (int32_t)n : 1;
  k->scales = calloc((size_t)k->n_scales + 1, sizeof(float));
  if (!k->scales) return kiln_make_status(KILN_OUT_OF_MEMORY, "bias '%s': out of memory", k->name);
  KILN_RETURN_IF_ERROR(kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_I32, &t->shape, &k->q),
                       "bias '%s'", k->name);
  for (int32_t i = 0; i < k->n_scales; ++i) k->scales[i] = in->scale * w->scales[w->n_scales > 1 ? i : 0];
  int32_t* q = k->q.data;
  for (int64_t i = 0; i < n; ++i) {
    double v = rint((double)b[i] / k->scales[k->axis >= 0 ? i : 0]);
    q[i] = (int32_t)(v < -2147483647.0 ? -2147483647.0 : v > 2147483647.0 ? 2147483647.0 : v);
  }
  return NULL;
}

static kiln_status_t quantize_consts(qctx_t* c) {
  kiln_qdq_plan_t* p = &c->r->plan;
  for (int32_t i = 0; i < c->r->n_layers; ++i) {
    const kiln_quant_layer_t* L = &c->r->layers[i];
    const kiln_node_t* n = &c->g->nodes[L->node];
    kiln_qdq_const_t* w = L->weight >= 0 ? &p->consts[L->weight] : NULL;
    if (w && !w->scales)
      KILN_RETURN_IF_ERROR(quantize_weight(w, &c->g->tensors[n->inputs[1]]), "node '%s'", n->name);
    /* A bias shared by two layers with different input scales keeps the
     * first layer's scale; the second reads it dequantized all the same. */
    if (L->bias >= 0 && !p->consts[L->bias].scales)
      KILN_RETURN_IF_ERROR(quantize_bias(&p->consts[L->bias], &c->g->tensors[n->inputs[2]],
                                         &p->acts[L->act_in], w),
                           "node '%s'", n->name);
  }
  return NULL;
}

/* ---- the passes ----------------------------------------------------------- */

static kiln_status_t pass(qctx_t* c, pass_t which, const kiln_array_t* inputs, int32_t n,
                          progress_t* pr, const char* phase) {
  c->pass = which;
  for (int32_t k = 0; k < n; ++k) {
    KILN_RETURN_IF_ERROR(run_one(c, inputs, k, NULL));
    progress_step(pr, phase);
  }
  return NULL;
}

/* Dequantized copies of every plan constant, swapped into the graph (|swap|
 * then holds the float originals, swapped back by the same call with
 * |restore|). */
static kiln_status_t swap_consts(qctx_t* c, kiln_array_t* swap, bool restore) {
  kiln_qdq_plan_t* p = &c->r->plan;
  for (int32_t i = 0; i < p->n_consts; ++i) {
    const kiln_qdq_const_t* k = &p->consts[i];
    int32_t t = kiln_graph_find_tensor(c->g, k->name);
    kiln_array_t* v = &c->g->tensors[t].value;
    if (restore) {
      if (!swap[i].data) continue;
      kiln_array_t dq = *v;
      *v = swap[i];
      kiln_array_free(kiln_allocator_system(), &dq);
      memset(&swap[i], 0, sizeof swap[i]);
      continue;
    }
    kiln_array_t dq;
    KILN_RETURN_IF_ERROR(kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_F32, &v->shape, &dq));
    float* x = dq.data;
    int64_t n = kiln_array_numel(&dq), inner = 1;
    for (int32_t d = k->axis + 1; k->axis >= 0 && d < v->shape.rank; ++d) inner *= v->shape.dims[d];
    for (int64_t e = 0; e < n; ++e) {
      float s = k->scales[k->axis >= 0 ? (e / inner) % k->n_scales : 0];
      x[e] = (float)kiln_load_f64(k->q.dtype, k->q.data, (size_t)e) * s;
    }
    swap[i] = *v;
    *v = dq;
  }
  return NULL;
}

/* fp32 and QDQ runs of every sample, side by side: per-layer and per-output
 * signal and noise. */
static kiln_status_t simulate(qctx_t* c, const kiln_array_t* inputs, int32_t n, progress_t* pr) {
  kiln_graph_t* g = c->g;
  kiln_allocator_t al = kiln_allocator_system();
  int32_t no = g->n_outputs, nl = c->r->n_layers;
  kiln_array_t want[64], got[64];
  double* osig = calloc((size_t)no + 1, sizeof(double));
  double* onoise = calloc((size_t)no + 1, sizeof(double));
  kiln_array_t* swap = calloc((size_t)c->r->plan.n_consts + 1, sizeof(*swap));
  kiln_status_t s = NULL;
  if (!osig || !onoise || !swap) s = kiln_make_status(KILN_OUT_OF_MEMORY, "kiln quantize: out of memory");
  for (int32_t k = 0; k < n && !s; ++k) {
    memset(want, 0, sizeof want);
    memset(got, 0, sizeof got);
    c->pass = PASS_REF;
    s = run_one(c, inputs, k, want);
    if (s) break;
    progress_step(pr, "fp32 vs int8");
    c->pass = PASS_SIM;
    s = swap_consts(c, swap, false);
    if (!s) s = run_one(c, inputs, k, got);
    kiln_status_t s2 = swap_consts(c, swap, true);
    if (!s) s = s2;
    else kiln_status_free(s2);
    for (int32_t i = 0; i < no && !s; ++i) {
      if (want[i].dtype != KILN_DTYPE_F32) continue;
      const float* x = want[i].data;
      const float* y = got[i].data;
      for (int64_t e = 0, m = kiln_array_numel(&want[i]); e < m; ++e) {
        osig[i] += (double)x[e] * x[e];
        onoise[i] += ((double)y[e] - x[e]) * ((double)y[e] - x[e]);
      }
    }
    for (int32_t i = 0; i < no; ++i) {
      kiln_array_free(al, &want[i]);
      kiln_array_free(al, &got[i]);
    }
    for (int32_t l = 0; l < nl; ++l) kiln_array_free(al, &c->ref[l]);
    if (!s) progress_step(pr, "fp32 vs int8");
  }
  for (int32_t l = 0; l < nl; ++l) {
    kiln_array_free(al, &c->ref[l]);
    c->r->layers[l].sqnr_db = sqnr_db(c->sig[l], c->noise[l]);
  }
  for (int32_t i = 0; i < no && c->r->output_sqnr_db; ++i)
    c->r->output_sqnr_db[i] = sqnr_db(osig[i], onoise[i]);
  free(osig);
  free(onoise);
  free(swap);
  return s;
}

/* ---- entry points ---------------------------------------------------------- */

void kiln_quant_result_free(kiln_quant_result_t* r) {
  if (!r) return;
  for (int32_t i = 0; i < r->plan.n_consts; ++i) {
    kiln_array_free(kiln_allocator_system(), &r->plan.consts[i].q);
    free(r->plan.consts[i].scales);
  }
  free(r->plan.consts);
  free(r->plan.acts);
  free(r->layers);
  free(r->skipped);
  free(r->output_sqnr_db);
  free(r->act_min);
  free(r->act_max);
  memset(r, 0, sizeof(*r));
}

kiln_status_t kiln_quantize(kiln_graph_t* g, const kiln_array_t* inputs, int32_t n,
                            const kiln_quantize_options_t* o, kiln_quant_result_t* out) {
  memset(out, 0, sizeof(*out));
  if (n <= 0) return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln quantize: no calibration samples");
  if (o->act_dtype != KILN_DTYPE_U8 && o->act_dtype != KILN_DTYPE_I8)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln quantize: activations must be u8 or i8, not %s",
                            kiln_dtype_name(o->act_dtype));
  if (o->method == KILN_QUANT_PERCENTILE && !(o->percentile >= 50 && o->percentile <= 100))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "kiln quantize: percentile %g is outside [50, 100]",
                            o->percentile);
  double t0 = now_s();
  qctx_t c = {.g = g, .o = o, .r = out};
  int32_t nt = g->n_tensors;
  kiln_status_t s = NULL;
  c.act_of = malloc(sizeof(int32_t) * (size_t)(nt + 1));
  c.layer_of = malloc(sizeof(int32_t) * (size_t)(nt + 1));
  if (!c.act_of || !c.layer_of) s = kiln_make_status(KILN_OUT_OF_MEMORY, "kiln quantize: out of memory");
  for (int32_t t = 0; t < nt && !s; ++t) c.act_of[t] = c.layer_of[t] = -1;
  if (!s) s = choose_layers(&c);
  int32_t na = out->plan.n_acts, nl = out->n_layers;
  if (!s) {
    c.range = calloc((size_t)na + 1, sizeof(*c.range));
    c.ref = calloc((size_t)nl + 1, sizeof(*c.ref));
    c.sig = calloc((size_t)nl + 1, sizeof(double));
    c.noise = calloc((size_t)nl + 1, sizeof(double));
    out->act_min = calloc((size_t)na + 1, sizeof(double));
    out->act_max = calloc((size_t)na + 1, sizeof(double));
    out->output_sqnr_db = calloc((size_t)g->n_outputs + 1, sizeof(double));
    if (!c.range || !c.ref || !c.sig || !c.noise || !out->act_min || !out->act_max || !out->output_sqnr_db)
      s = kiln_make_status(KILN_OUT_OF_MEMORY, "kiln quantize: out of memory");
  }
  for (int32_t a = 0; a < na && !s; ++a) {
    c.range[a] = (range_t){INFINITY, -INFINITY, 0, NULL, -INFINITY, INFINITY};
    reader_bounds(g, kiln_graph_find_tensor(g, out->plan.acts[a].name), &c.range[a].floor, &c.range[a].ceil);
  }
  for (int32_t l = 0; l < nl && !s; ++l) c.layer_of[g->nodes[out->layers[l].node].outputs[0]] = l;
  bool hist = o->method != KILN_QUANT_MINMAX;
  progress_t pr = {o->progress, o->progress && isatty(fileno(o->progress)), t0, t0, 0,
                   (int64_t)n * (hist ? 4 : 3), -1};
  if (!s) s = pass(&c, PASS_RANGE, inputs, n, &pr, "ranges");
  for (int32_t a = 0; a < na && !s && hist; ++a)
    if (!(c.range[a].hist = calloc(HIST_BINS, sizeof(double))))
      s = kiln_make_status(KILN_OUT_OF_MEMORY, "kiln quantize: out of memory");
  if (!s && hist) s = pass(&c, PASS_HIST, inputs, n, &pr, "histograms");
  if (!s) {
    finish_ranges(&c);
    s = quantize_consts(&c);
  }
  if (!s) s = simulate(&c, inputs, n, &pr);
  for (int32_t a = 0; c.range && a < na; ++a) free(c.range[a].hist);
  free(c.range);
  free(c.ref);
  free(c.sig);
  free(c.noise);
  free(c.act_of);
  free(c.layer_of);
  if (s) {
    kiln_quant_result_free(out);
    return s;
  }
  out->samples = n;
  out->seconds = now_s() - t0;
  return NULL;
}

static void print_db(FILE* f, double db) {
  if (isinf(db) && db > 0) fprintf(f, "%8s", "exact");
  else fprintf(f, "%8.1f", db);
}

void kiln_quant_report_print(const kiln_graph_t* g, const kiln_quant_result_t* r, FILE* f) {
  const kiln_qdq_plan_t* p = &r->plan;
  fprintf(f, "quantized %d layers on %d calibration samples in %.2f s (SQNR in dB against fp32, "
             "errors of earlier layers included)\n",
          (int)r->n_layers, (int)r->samples, r->seconds);
  fprintf(f, "%-28s %-7s %-22s %-22s %-19s %8s\n", "layer", "op", "input scale / zp", "output scale / zp",
          "weight scales", "SQNR");
  for (int32_t i = 0; i < r->n_layers; ++i) {
    const kiln_quant_layer_t* L = &r->layers[i];
    const kiln_node_t* n = &g->nodes[L->node];
    char in[40], outb[40], w[40];
    snprintf(in, sizeof in, "%.4g / %d", p->acts[L->act_in].scale, (int)p->acts[L->act_in].zero_point);
    if (L->act_out >= 0)
      snprintf(outb, sizeof outb, "%.4g / %d", p->acts[L->act_out].scale, (int)p->acts[L->act_out].zero_point);
    else
      snprintf(outb, sizeof outb, "float (model output)");
    if (L->weight >= 0) {
      const kiln_qdq_const_t* k = &p->consts[L->weight];
      float lo = k->scales[0], hi = k->scales[0];
      for (int32_t j = 1; j < k->n_scales; ++j) {
        lo = k->scales[j] < lo ? k->scales[j] : lo;
        hi = k->scales[j] > hi ? k->scales[j] : hi;
      }
      if (k->n_scales > 1) snprintf(w, sizeof w, "%.3g..%.3g (%d)", lo, hi, (int)k->n_scales);
      else snprintf(w, sizeof w, "%.3g", lo);
    } else {
      snprintf(w, sizeof w, "activation");
    }
    fprintf(f, "%-28.28s %-7s %-22s %-22s %-19s ", n->name, n->op_type, in, outb, w);
    print_db(f, L->sqnr_db);
    fprintf(f, "\n");
  }
  for (int32_t i = 0; i < r->n_skipped; ++i)
    fprintf(f, "left float: %s (%s): %s\n", g->nodes[r->skipped[i].node].name,
            g->nodes[r->skipped[i].node].op_type, r->skipped[i].reason);
  for (int32_t i = 0; i < g->n_outputs; ++i) {
    fprintf(f, "model output %-15s SQNR ", g->tensors[g->outputs[i]].name);
    print_db(f, r->output_sqnr_db[i]);
    fprintf(f, " dB\n");
  }
}
