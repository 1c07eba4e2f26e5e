/* The layout pass's quantized ops (layout.h): which int8 nodes may run on
 * the blocked NCHWc layout, so an int8 graph (what the "fold-qdq" pass
 * makes of a QDQ model) stays blocked from its first conv to its last, as
 * the float graph does. u8/i8 tensors take the float graph's block c
 * (c bytes a position), which is one vector of c i32 accumulators in the
 * int8 kernels (lowering/lower_nn_qconv_blocked.c).
 *
 *   QLinearConv  2-D, constant weights and weight zero points, per-tensor
 *                x / y parameters, a constant bias or none: group 1 as
 *                Conv (reads either layout), depthwise (one channel per
 *                group, up to 7x7) from NCHWc;
 *   QLinearAdd   both data inputs of the output's shape, per-tensor
 *                parameters: element-wise (its flat loop is the same on
 *                two buffers of one blocked shape);
 *   MaxPool      on u8/i8 (no Indices) as on f32, blocked when its input
 *                is (the f32 window kernel: a maximum of bytes is exact),
 *                so ResNet's stem output needs no reorder copy around it.
 * Everything else (QuantizeLinear at the model input, the GlobalAveragePool,
 * the classifier) stays NCHW behind the plan's reorders. */
#include <string.h>

#include "ir/op.h"
#include "lowering/layout.h"

static bool q8_type(kiln_dtype_t t) { return t == KILN_DTYPE_U8 || t == KILN_DTYPE_I8; }

/* A static 4-D u8/i8 activation. */
static bool q8_4d(const kiln_graph_t* g, int32_t t) {
  if (t < 0) return false;
  const kiln_tensor_t* tt = &g->tensors[t];
  return q8_type(tt->dtype) && tt->shape.rank == 4 && kiln_shape_is_static(&tt->shape) &&
         !(tt->flags & KILN_TENSOR_CONST);
}

static bool has_value(const kiln_graph_t* g, int32_t t) {
  return t >= 0 && (g->tensors[t].flags & KILN_TENSOR_CONST) && g->tensors[t].value.data;
}

/* A per-tensor parameter: one element, static. */
static bool scalar(const kiln_graph_t* g, int32_t t) {
  return t >= 0 && kiln_shape_is_static(&g->tensors[t].shape) && kiln_shape_count(&g->tensors[t].shape) == 1;
}

static kiln_layout_role_t qconv_role(const kiln_graph_t* g, const kiln_node_t* n) {
  if (n->n_inputs < 8) return KILN_LAYOUT_PLAIN_ONLY;
  for (int32_t j = 0; j < 8; ++j)
    if (n->inputs[j] < 0) return KILN_LAYOUT_PLAIN_ONLY;
  const int32_t x = n->inputs[0], w = n->inputs[3];
  if (!q8_4d(g, x) || !has_value(g, w) || !has_value(g, n->inputs[5])) return KILN_LAYOUT_PLAIN_ONLY;
  if (!scalar(g, n->inputs[1]) || !scalar(g, n->inputs[2]) || !scalar(g, n->inputs[6]) || !scalar(g, n->inputs[7]))
    return KILN_LAYOUT_PLAIN_ONLY;
  const kiln_tensor_t* wt = &g->tensors[w];
  if (!q8_type(wt->dtype) || wt->shape.rank != 4) return KILN_LAYOUT_PLAIN_ONLY;
  const int64_t C = g->tensors[x].shape.dims[1], M = wt->shape.dims[0];
  if (n->n_inputs > 8 && n->inputs[8] >= 0) {
    const int32_t b = n->inputs[8];
    if (!has_value(g, b) || g->tensors[b].dtype != KILN_DTYPE_I32 || kiln_shape_count(&g->tensors[b].shape) != M)
      return KILN_LAYOUT_PLAIN_ONLY;
  }
  int64_t G = 1;
  kiln_status_t s = kiln_attr_int(n, "group", 1, &G);
  if (s) {
    kiln_status_free(s);
    return KILN_LAYOUT_PLAIN_ONLY;
  }
  if (G == 1 && wt->shape.dims[1] == C) return KILN_LAYOUT_CONV;
  if (G == C && M == C && wt->shape.dims[1] == 1 && wt->shape.dims[2] * wt->shape.dims[3] <= 49)
    return KILN_LAYOUT_DEPTHWISE;
  return KILN_LAYOUT_PLAIN_ONLY;
}

int32_t kiln_layout_q8_role(const kiln_graph_t* g, const kiln_node_t* n) {
  const bool conv = !strcmp(n->op_type, "QLinearConv"), add = !strcmp(n->op_type, "QLinearAdd");
  if (!strcmp(n->op_type, "MaxPool") && n->n_inputs == 1 && n->n_outputs == 1 && q8_4d(g, n->inputs[0]) &&
      !(n->domain && n->domain[0]))
    return q8_4d(g, n->outputs[0]) ? KILN_LAYOUT_POOL : KILN_LAYOUT_PLAIN_ONLY;
  if (!conv && !add) return -1;
  if ((n->domain && n->domain[0] && strcmp(n->domain, "com.microsoft")) || n->n_outputs != 1 ||
      !q8_4d(g, n->outputs[0]))
    return KILN_LAYOUT_PLAIN_ONLY;
  if (conv) return qconv_role(g, n);
  if (n->n_inputs < 7) return KILN_LAYOUT_PLAIN_ONLY;
  for (int32_t j = 0; j < n->n_inputs; ++j) {
    const int32_t t = n->inputs[j];
    if (j == 0 || j == 3) {
      if (!q8_4d(g, t) || !kiln_shape_equal(&g->tensors[t].shape, &g->tensors[n->outputs[0]].shape))
        return KILN_LAYOUT_PLAIN_ONLY;
    } else if (t >= 0 && !scalar(g, t)) {
      return KILN_LAYOUT_PLAIN_ONLY;
    }
  }
  return KILN_LAYOUT_EW;
}

bool kiln_layout_q8_full(const kiln_graph_t* g, const kiln_node_t* n, int32_t j) {
  return !strcmp(n->op_type, "QLinearAdd") && (j == 0 || j == 3) && q8_4d(g, n->inputs[j]);
}
