/* "fold-qdq": QDQ-form quantized Conv/MatMul become one QLinearConv /
 * QLinearMatMul, so the plan stays in int8 between consecutive quantized
 * ops instead of dequantizing to f32, computing in f32 and quantizing back.
 *
 * The pattern (what onnxruntime's quantize_static and `kiln quantize` write):
 *
 *   xq -> DequantizeLinear(xs, xzp) --\
 *   wq -> DequantizeLinear(ws, wzp) ---> Conv | MatMul -> [Relu | Clip]
 *   bq -> DequantizeLinear(bs, 0)   --/         -> QuantizeLinear(ys, yzp) -> yq
 *
 * becomes QLinearConv(xq, xs, xzp, wq, ws, wzp, ys, yzp, bq) -> yq (or
 * QLinearMatMul without the bias). Conditions, each checked so the fold
 * never changes what the model means:
 *  - xq is i8/u8 with one scale and one zero point (per tensor);
 *  - wq is a constant i8/u8 weight, per tensor or per output channel (Conv:
 *    DequantizeLinear axis 0; MatMul: a [K,N] matrix with axis 1, one scale
 *    per column), zero points present;
 *  - the bias (Conv only) is a constant i32 DequantizeLinear with zero
 *    points 0 and scale s_x * s_w per channel (as ONNX QLinearConv defines
 *    its bias), to a relative 1e-6; any other bias leaves the Conv alone;
 *  - the Conv/MatMul output (and the Relu/Clip's) feeds only the
 *    QuantizeLinear, whose scale and zero point are per tensor;
 *  - Relu / Clip(lo, hi) with constant bounds folds only when the
 *    requantization's saturation already implies it: quantization is
 *    monotonic, so Q(clip(y, lo, hi)) = clamp(Q(y), Q(lo), Q(hi)), and that
 *    equals Q(y) when Q(lo) <= qmin and Q(hi) >= qmax (Relu: zero point at
 *    the type's low end, which calibration gives a post-Relu tensor).
 *    QLinearConv has no clamp of its own, so any other Relu/Clip stays, and
 *    with it the f32 Conv.
 *
 * Numerics (tests/test_pass_qdq.c checks them): the folded op sums
 * (xq - xzp) * (wq - wzp) exactly in i32 and requantizes
 * round_even(f32(acc) * (s_x * s_w / s_y)) + y_zp, where the graph as
 * written sums the dequantized values in f32 and divides by s_y. The two
 * agree except where the f32 sum's rounding moves a value across a .5
 * boundary of the output grid: the results are within one quantization
 * step of each other (most elements are identical).
 *
 * The rest of a quantized network folds too, so the tensors stay int8 from
 * the first layer to the logits (fold_move, fold_add, fold_gap, fold_gemm
 * below):
 *  - DQ -> MaxPool | Flatten | Reshape -> Q with the same scale and zero
 *    point on both sides: the op on the integers (exact);
 *  - DQ(a), DQ(b) -> Add -> [Relu | Clip implied] -> Q: QLinearAdd (the
 *    contrib op; the same f32 expression, exact);
 *  - DQ -> GlobalAveragePool -> Q: QLinearGlobalAveragePool (an integer
 *    sum: within one step);
 *  - DQ -> Gemm (transA 0, alpha 1, beta 1, i32 bias) -> [Relu | Clip
 *    implied] -> Q: Reshape -> 1x1 QLinearConv -> Reshape, which takes the
 *    int8 GEMM and keeps the classifier's weights one byte each.
 * AveragePool is not folded (no model here has it between Q/DQ nodes).
 * The DequantizeLinear nodes left without readers go to "dce". */
#include <float.h>
#include <math.h>
#include <string.h>

#include "ir/pass_util.h"

/* A DequantizeLinear's operands: its integer input, scale and zero point. */
typedef struct dq_s {
  int32_t q, s, zp;
  int64_t axis;
} dq_t;

static bool is_q8(kiln_dtype_t t) { return t == KILN_DTYPE_I8 || t == KILN_DTYPE_U8; }

static int64_t numel(const kiln_graph_t* g, int32_t t) {
  return kiln_shape_count(&g->tensors[t].shape);
}

/* |t| is the output of a live, plain DequantizeLinear (no blocked layout). */
static bool dq_of(const pu_ctx_t* c, int32_t t, dq_t* d) {
  const kiln_graph_t* g = c->g;
  int32_t p = pu_producer(c, t);
  if (p < 0 || !pu_op(&g->nodes[p], "DequantizeLinear")) return false;
  const kiln_node_t* n = &g->nodes[p];
  if (n->n_inputs < 2 || n->n_inputs > 3 || n->inputs[0] < 0 || n->inputs[1] < 0) return false;
  int64_t block = 0, axis = 1;
  if (kiln_attr_int(n, "block_size", 0, &block) || block != 0) return false;
  if (kiln_attr_int(n, "axis", 1, &axis)) return false;
  d->q = n->inputs[0];
  d->s = n->inputs[1];
  d->zp = n->n_inputs == 3 ? n->inputs[2] : -1;
  const int32_t rank = g->tensors[d->q].shape.rank;
  d->axis = axis < 0 ? axis + rank : axis;
  if (!pu_is_const(g, d->s) || g->tensors[d->s].dtype != KILN_DTYPE_F32) return false;
  return d->zp < 0 || pu_is_const(g, d->zp);
}

/* Per-tensor activation operand: i8/u8 with one scale and one zero point. */
static bool act_operand(const pu_ctx_t* c, int32_t t, dq_t* d) {
  const kiln_graph_t* g = c->g;
  return dq_of(c, t, d) && is_q8(g->tensors[d->q].dtype) && d->zp >= 0 &&
         numel(g, d->s) == 1 && numel(g, d->zp) == 1;
}

/* Constant weight operand, one scale or one per channel of |axis|. */
static bool weight_operand(const pu_ctx_t* c, int32_t t, int64_t axis, dq_t* d) {
  const kiln_graph_t* g = c->g;
  if (!dq_of(c, t, d) || !pu_is_const(g, d->q) || !is_q8(g->tensors[d->q].dtype) || d->zp < 0)
    return false;
  const kiln_shape_t* ws = &g->tensors[d->q].shape;
  const int64_t ns = numel(g, d->s);
  if (numel(g, d->zp) != ns) return false;
  if (ns == 1) return true;
  return d->axis == axis && axis < ws->rank && ws->dims[axis] == ns &&
         g->tensors[d->s].shape.rank == 1;
}

static float at_f32(const kiln_graph_t* g, int32_t t, int64_t i) {
  const kiln_array_t* v = &g->tensors[t].value;
  return (float)kiln_load_f64(v->dtype, v->data, (size_t)(kiln_array_numel(v) == 1 ? 0 : i));
}

/* The Conv bias |t| is DequantizeLinear(i32 bq, s_x * s_w, 0) over the
 * output channels (|m| of them): then bq is QLinearConv's bias as is. */
static bool bias_operand(const pu_ctx_t* c, int32_t t, const dq_t* x, const dq_t* w, int64_t m,
                         int32_t* bq) {
  const kiln_graph_t* g = c->g;
  dq_t d;
  if (!dq_of(c, t, &d) || !pu_is_const(g, d.q) || g->tensors[d.q].dtype != KILN_DTYPE_I32)
    return false;
  const kiln_shape_t* bs = &g->tensors[d.q].shape;
  if (bs->rank != 1 || bs->dims[0] != m) return false;
  const int64_t ns = numel(g, d.s);
  if (ns != 1 && (ns != m || d.axis != 0)) return false;
  if (d.zp >= 0 && !pu_const_all(g, d.zp, 0.0, 0.0)) return false;
  const float sx = at_f32(g, x->s, 0);
  for (int64_t k = 0; k < m; ++k) {
    const double want = (double)(sx * at_f32(g, w->s, k));
    if (!(fabs((double)at_f32(g, d.s, k) - want) <= 1e-6 * want)) return false;
  }
  *bq = d.q;
  return true;
}

/* The one live node reading |t|, or -1. */
static int32_t only_reader(const pu_ctx_t* c, int32_t t) {
  if (!pu_single_use(c, t)) return -1;
  for (int32_t i = 0; i < c->g->n_nodes; ++i) {
    if (c->dead[i]) continue;
    const kiln_node_t* n = &c->g->nodes[i];
    for (int32_t j = 0; j < n->n_inputs; ++j)
      if (n->inputs[j] == t) return i;
  }
  return -1;
}

/* round_even(v / s) + zp, as QuantizeLinear computes it (before saturation). */
static double quantize(double v, double s, double zp) { return nearbyint(v / s) + zp; }

/* Relu/Clip node |ai| may be dropped before QuantizeLinear |qi|: the
 * requantization saturation already clamps at least as tightly. */
static bool clamp_implied(const pu_ctx_t* c, int32_t ai, const dq_t* y, kiln_dtype_t yt) {
  const kiln_graph_t* g = c->g;
  const kiln_node_t* a = &g->nodes[ai];
  double lo = 0, hi = INFINITY;
  if (pu_op(a, "Clip")) {
    if (a->n_inputs < 2 || a->inputs[1] < 0 || !pu_const_scalar(g, a->inputs[1], &lo)) return false;
    if (a->n_inputs < 3 || a->inputs[2] < 0 || !pu_const_scalar(g, a->inputs[2], &hi)) return false;
  } else if (!pu_op(a, "Relu")) {
    return false;
  }
  const double s = at_f32(g, y->s, 0), zp = at_f32(g, y->zp, 0);
  const double qmin = yt == KILN_DTYPE_U8 ? 0 : -128, qmax = yt == KILN_DTYPE_U8 ? 255 : 127;
  return quantize(lo, s, zp) <= qmin && (isinf(hi) || quantize(hi, s, zp) >= qmax);
}

/* The QuantizeLinear ending the pattern after anchor |ai| (through one
 * foldable Relu/Clip): its node in *qi, the Relu/Clip (or -1) in *act. */
static bool requant_of(const pu_ctx_t* c, int32_t ai, int32_t* qi, int32_t* act, dq_t* y) {
  const kiln_graph_t* g = c->g;
  *act = -1;
  int32_t r = only_reader(c, g->nodes[ai].outputs[0]);
  if (r >= 0 && (pu_op(&g->nodes[r], "Relu") || pu_op(&g->nodes[r], "Clip"))) {
    *act = r;
    r = only_reader(c, g->nodes[r].outputs[0]);
  }
  if (r < 0 || !pu_op(&g->nodes[r], "QuantizeLinear")) return false;
  const kiln_node_t* q = &g->nodes[r];
  if (q->n_inputs != 3 || q->inputs[2] < 0 || q->n_outputs != 1) return false;
  y->s = q->inputs[1];
  y->zp = q->inputs[2];
  if (!pu_is_const(g, y->s) || g->tensors[y->s].dtype != KILN_DTYPE_F32 ||
      !pu_is_const(g, y->zp) || numel(g, y->s) != 1 || numel(g, y->zp) != 1)
    return false;
  const kiln_dtype_t yt = g->tensors[q->outputs[0]].dtype;
  if (!is_q8(yt)) return false;
  if (*act >= 0 && !clamp_implied(c, *act, y, yt)) return false;
  *qi = r;
  return true;
}

static kiln_status_t fold_one(pu_ctx_t* c, int32_t ai, bool* done) {
  kiln_graph_t* g = c->g;
  *done = false;
  const kiln_node_t* a = &g->nodes[ai];
  const bool conv = pu_op(a, "Conv");
  if (!conv && !pu_op(a, "MatMul")) return NULL;
  if (a->n_outputs != 1 || a->n_inputs < 2) return NULL;
  dq_t x, w, y;
  if (!act_operand(c, a->inputs[0], &x)) return NULL;
  const kiln_shape_t* ws = &g->tensors[a->inputs[1]].shape;
  if (!conv && ws->rank != 2) return NULL;
  if (!weight_operand(c, a->inputs[1], conv ? 0 : 1, &w)) return NULL;
  int32_t bq = -1;
  if (conv && a->n_inputs > 2 && a->inputs[2] >= 0 &&
      !bias_operand(c, a->inputs[2], &x, &w, ws->dims[0], &bq))
    return NULL;
  int32_t qi, act;
  if (!requant_of(c, ai, &qi, &act, &y)) return NULL;

  const int32_t out = g->nodes[qi].outputs[0];
  int32_t in[9] = {x.q, x.s, x.zp, w.q, w.s, w.zp, y.s, y.zp, bq};
  const int32_t n_in = bq >= 0 ? 9 : 8;
  const char* name = g->nodes[ai].name;
  const int32_t n_attrs = conv ? g->nodes[ai].n_attrs : 0;
  const kiln_attr_t* attrs = conv ? g->nodes[ai].attrs : NULL;
  c->dead[qi] = c->dead[ai] = true;
  if (act >= 0) c->dead[act] = true;
  pu_detach(c, out);
  KILN_RETURN_IF_ERROR(pu_add_node(c, conv ? "QLinearConv" : "QLinearMatMul", name, n_in, in, out,
                                   n_attrs, attrs, NULL));
  pu_count_uses(c);
  *done = true;
  return NULL;
}

/* ---- the rest of a quantized network ------------------------------------ */

/* Q(x)'s scale |s| and zero point |zp| equal DQ |x|'s, element for element,
 * and the scale is a normal f32 with 255 * scale finite: then
 * Q(DQ(q)) == q for every q of the type (|q - zp| <= 255 needs 8 bits, the
 * scale 24: the product and the quotient are each within half an ulp, so
 * the quotient rounds back to q - zp). */
static bool same_params(const kiln_graph_t* g, const dq_t* x, int32_t s, int32_t zp) {
  const float xs = at_f32(g, x->s, 0);
  if (at_f32(g, s, 0) != xs || !(xs >= FLT_MIN) || !(xs <= FLT_MAX / 256.0f)) return false;
  return kiln_load_i64(g->tensors[zp].value.dtype, g->tensors[zp].value.data, 0) ==
         kiln_load_i64(g->tensors[x->zp].value.dtype, g->tensors[x->zp].value.data, 0);
}

/* Replaces anchor |ai| (and the Relu/Clip |act| the requantization
 * implies, and QuantizeLinear |qi|) by |op|(in...) writing qi's output. */
static kiln_status_t replace(pu_ctx_t* c, int32_t ai, int32_t act, int32_t qi, const char* op,
                             int32_t n_in, const int32_t* in, int32_t n_attrs,
                             const kiln_attr_t* attrs) {
  kiln_graph_t* g = c->g;
  const int32_t out = g->nodes[qi].outputs[0];
  const char* name = g->nodes[ai].name;
  c->dead[qi] = c->dead[ai] = true;
  if (act >= 0) c->dead[act] = true;
  pu_detach(c, out);
  KILN_RETURN_IF_ERROR(pu_add_node(c, op, name, n_in, in, out, n_attrs, attrs, NULL));
  pu_count_uses(c);
  return NULL;
}

/* DQ -> MaxPool | Flatten | Reshape -> Q with the same parameters on both
 * sides: the op on the integers, exactly (max commutes with the increasing
 * dequantization, and Q(DQ(q)) == q by same_params). */
static kiln_status_t fold_move(pu_ctx_t* c, int32_t ai, bool* done) {
  const kiln_graph_t* g = c->g;
  const kiln_node_t* a = &g->nodes[ai];
  const bool pool = pu_op(a, "MaxPool");
  if (!pool && !pu_op(a, "Flatten") && !pu_op(a, "Reshape")) return NULL;
  if (a->n_outputs != 1 || a->n_inputs < 1) return NULL; /* MaxPool's indices: stay f32 */
  dq_t x, y;
  int32_t qi, act;
  if (!act_operand(c, a->inputs[0], &x) || !requant_of(c, ai, &qi, &act, &y)) return NULL;
  if (g->tensors[g->nodes[qi].outputs[0]].dtype != g->tensors[x.q].dtype ||
      !same_params(g, &x, y.s, y.zp))
    return NULL;
  int32_t in[2] = {x.q, a->n_inputs > 1 ? a->inputs[1] : -1};
  KILN_RETURN_IF_ERROR(replace(c, ai, act, qi, a->op_type, a->n_inputs > 1 ? 2 : 1, in,
                               a->n_attrs, a->attrs));
  *done = true;
  return NULL;
}

/* DQ(a), DQ(b) -> Add -> [Relu | Clip implied] -> Q: QLinearAdd, which
 * computes the same f32 expression (ir/ops/nn_quant.c), so exactly. */
static kiln_status_t fold_add(pu_ctx_t* c, int32_t ai, bool* done) {
  const kiln_graph_t* g = c->g;
  const kiln_node_t* a = &g->nodes[ai];
  if (!pu_op(a, "Add") || a->n_inputs != 2 || a->n_outputs != 1) return NULL;
  dq_t x, w, y;
  int32_t qi, act;
  if (!act_operand(c, a->inputs[0], &x) || !act_operand(c, a->inputs[1], &w) ||
      !requant_of(c, ai, &qi, &act, &y))
    return NULL;
  const kiln_dtype_t t = g->tensors[x.q].dtype;
  if (g->tensors[w.q].dtype != t || g->tensors[g->nodes[qi].outputs[0]].dtype != t) return NULL;
  const int32_t in[8] = {x.q, x.s, x.zp, w.q, w.s, w.zp, y.s, y.zp};
  KILN_RETURN_IF_ERROR(replace(c, ai, act, qi, "QLinearAdd", 8, in, 0, NULL));
  *done = true;
  return NULL;
}

/* DQ -> GlobalAveragePool -> Q: QLinearGlobalAveragePool (an exact integer
 * sum; within one step of the f32 graph, see ir/ops/nn_quant.c). */
static kiln_status_t fold_gap(pu_ctx_t* c, int32_t ai, bool* done) {
  const kiln_graph_t* g = c->g;
  const kiln_node_t* a = &g->nodes[ai];
  if (!pu_op(a, "GlobalAveragePool") || a->n_inputs != 1 || a->n_outputs != 1) return NULL;
  dq_t x, y;
  int32_t qi, act;
  if (!act_operand(c, a->inputs[0], &x) || g->tensors[x.q].shape.rank < 3 ||
      !requant_of(c, ai, &qi, &act, &y))
    return NULL;
  if (g->tensors[g->nodes[qi].outputs[0]].dtype != g->tensors[x.q].dtype) return NULL;
  const int32_t in[5] = {x.q, x.s, x.zp, y.s, y.zp};
  KILN_RETURN_IF_ERROR(replace(c, ai, act, qi, "QLinearGlobalAveragePool", 5, in, 0, NULL));
  *done = true;
  return NULL;
}

/* Gemm(A [M,K], B, C) with transA 0 and alpha = beta = 1 over DQ operands
 * (B constant, per tensor or per output column; C the int32 bias at
 * s_a * s_b) -> Q: a 1x1 QLinearConv of A seen as [M,K,1,1] with B as
 * [N,K,1,1] (transposed when transB is 0), reshaped back to [M,N]. The
 * QLinearConv folds exactly as the Conv pattern above does. */
static kiln_status_t fold_gemm(pu_ctx_t* c, int32_t ai, bool* done) {
  kiln_graph_t* g = c->g;
  const kiln_node_t* a = &g->nodes[ai];
  if (!pu_op(a, "Gemm") || a->n_inputs < 2 || a->n_outputs != 1) return NULL;
  int64_t ta = 0, tb = 0;
  float alpha = 1.0f, beta = 1.0f;
  if (kiln_attr_int(a, "transA", 0, &ta) || kiln_attr_int(a, "transB", 0, &tb) ||
      kiln_attr_float(a, "alpha", 1.0f, &alpha) || kiln_attr_float(a, "beta", 1.0f, &beta))
    return NULL;
  const bool has_c = a->n_inputs > 2 && a->inputs[2] >= 0;
  if (ta != 0 || alpha != 1.0f || (has_c && beta != 1.0f)) return NULL;
  dq_t x, w, y;
  if (!act_operand(c, a->inputs[0], &x)) return NULL;
  const kiln_shape_t* xs = &g->tensors[x.q].shape;
  const kiln_shape_t* ws = &g->tensors[a->inputs[1]].shape;
  if (xs->rank != 2 || ws->rank != 2 || !kiln_shape_is_static(ws) || !kiln_dim_known(xs->dims[1]))
    return NULL;
  const int64_t K = tb ? ws->dims[1] : ws->dims[0], N = tb ? ws->dims[0] : ws->dims[1];
  if (K != xs->dims[1] || !weight_operand(c, a->inputs[1], tb ? 0 : 1, &w)) return NULL;
  int32_t bq = -1, qi, act;
  if (has_c && !bias_operand(c, a->inputs[2], &x, &w, N, &bq)) return NULL;
  if (!requant_of(c, ai, &qi, &act, &y)) return NULL;

  /* the weights as [N, K, 1, 1], one byte each */
  const kiln_array_t* wv = &g->tensors[w.q].value;
  uint8_t* w4 = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(g->allocator, (size_t)(N * K) + 1, "fold-qdq", (void**)&w4));
  const uint8_t* src = wv->data;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) w4[n * K + k] = tb ? src[n * K + k] : src[k * N + n];
  const kiln_shape_t s4 = kiln_shape_make(4, (int64_t[]){N, K, 1, 1});
  int32_t wt, shape_in, shape_out, xr, y4;
  const char* base = g->tensors[a->outputs[0]].name;
  kiln_status_t s = pu_add_const(c, g->tensors[w.q].name, wv->dtype, &s4, w4, &wt);
  kiln_allocator_free(g->allocator, w4);
  KILN_RETURN_IF_ERROR(s);
  KILN_RETURN_IF_ERROR(pu_add_i64(c, base, (int64_t[]){-1, K, 1, 1}, 4, &shape_in));
  KILN_RETURN_IF_ERROR(pu_add_i64(c, base, (int64_t[]){-1, N}, 2, &shape_out));
  KILN_RETURN_IF_ERROR(pu_new_tensor(c, base, "qx", &xr));
  KILN_RETURN_IF_ERROR(pu_new_tensor(c, base, "qy", &y4));
  a = &g->nodes[ai]; /* the graph's arrays may have moved */
  char name[256];
  pu_name(c, a->name, "in", name, sizeof name);
  KILN_RETURN_IF_ERROR(pu_add_node(c, "Reshape", name, 2, (int32_t[]){x.q, shape_in}, xr, 0, NULL, NULL));
  const int32_t in[9] = {xr, x.s, x.zp, wt, w.s, w.zp, y.s, y.zp, bq};
  pu_name(c, g->nodes[ai].name, "conv", name, sizeof name);
  KILN_RETURN_IF_ERROR(pu_add_node(c, "QLinearConv", name, bq >= 0 ? 9 : 8, in, y4, 0, NULL, NULL));
  const int32_t rin[2] = {y4, shape_out};
  KILN_RETURN_IF_ERROR(replace(c, ai, act, qi, "Reshape", 2, rin, 0, NULL));
  *done = true;
  return NULL;
}

kiln_status_t kiln_pass_fold_qdq(kiln_graph_t* g, kiln_pass_stats_t* st) {
  pu_ctx_t c;
  KILN_RETURN_IF_ERROR(pu_begin(&c, g));
  kiln_status_t s = NULL;
  const int32_t n0 = g->n_nodes;
  for (int32_t i = 0; i < n0 && !s; ++i) {
    if (c.dead[i]) continue;
    bool done = false;
    s = fold_one(&c, i, &done);
    if (!s && !done) s = fold_gemm(&c, i, &done);
    if (!s && !done) s = fold_add(&c, i, &done);
    if (!s && !done) s = fold_gap(&c, i, &done);
    if (!s && !done) s = fold_move(&c, i, &done);
    if (done) st->rewrites++;
  }
  return pu_end(&c, s);
}
