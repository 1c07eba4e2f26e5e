/* Row-reduction template instances (see template.h): a Softmax or
 * LogSoftmax over contiguous f32 or f16 rows whose plan kernel is the lowering's
 * printed row kernel (lowering/lower_nn_norm.c): it reads X (or a flat
 * view of it) and writes Y (or a flat view) and nothing else. A strided
 * axis, a fused producer or consumer keep the printed kernel, which
 * is always correct. */
#include "lowering/template.h"

#include <string.h>

#include "ir/op.h"

bool kiln_template_rows_match(const kiln_plan_t* plan, int32_t k, kiln_template_rows_t* q) {
  memset(q, 0, sizeof *q);
  const tir_buffer_t *X = NULL, *Y = NULL;
  const kiln_node_t* n = kiln_template_lone_unary(plan, k, true, &X, &Y, &q->bind_x, &q->bind_y);
  if (!n) return false;
  q->hx = X->dtype == KILN_DTYPE_F16, q->hy = Y->dtype == KILN_DTYPE_F16;
  const kiln_graph_t* g = plan->graph;
  q->log = !strcmp(n->op_type, "LogSoftmax");
  if (!q->log && strcmp(n->op_type, "Softmax")) return false;
  if (X->rank < 1) return false;
  /* the rows as the lowering reads them: the axes from |axis| on (opset
   * < 13 flattens them), else the last axis only */
  const bool legacy = g->opset > 0 && g->opset < 13;
  int64_t axis = 0;
  kiln_status_t s = kiln_attr_int(n, "axis", legacy ? 1 : -1, &axis);
  if (s) {
    kiln_status_free(s);
    return false;
  }
  const int64_t r = X->rank;
  if (axis < -r || axis >= r) return false;
  if (axis < 0) axis += r;
  if (!legacy && axis != r - 1) return false;
  q->rows = 1, q->n = 1;
  for (int32_t d = 0; d < r; ++d) {
    if (d < axis) q->rows *= X->shape[d];
    else q->n *= X->shape[d];
  }
  if (q->rows < 1 || q->n < 1 || q->n > KILN_TEMPLATE_ROWS_MAX_N || q->rows * q->n > INT32_MAX || tir_buffer_numel(Y) != q->rows * q->n) return false;
  return true;
}
