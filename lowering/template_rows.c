/* Row-reduction template instances (see template.h): a Softmax or
 * LogSoftmax over contiguous f32 rows whose plan kernel is the lowering's
 * printed row kernel (lowering/lower_nn_norm.c): it reads X (or a flat
 * view of it) and writes Y (or a flat view) and nothing else. A strided
 * axis, f16, a fused producer or consumer keep the printed kernel, which
 * is always correct. */
#include "lowering/template.h"

#include <string.h>

#include "ir/op.h"

bool kiln_template_rows_match(const kiln_plan_t* plan, int32_t k, kiln_template_rows_t* q) {
  memset(q, 0, sizeof *q);
  const kiln_plan_kernel_t* kk = &plan->kernels[k];
  const kiln_graph_t* g = plan->graph;
  if (!g || kk->node < 0 || kk->node >= g->n_nodes || kk->n_fused_nodes > 0 || kk->func->n_params != 2) return false;
  const kiln_node_t* n = &g->nodes[kk->node];
  if (!n->op_type || (n->domain && n->domain[0]) || n->n_inputs != 1 || n->n_outputs != 1 || n->inputs[0] < 0 ||
      n->outputs[0] < 0)
    return false;
  q->log = !strcmp(n->op_type, "LogSoftmax");
  if (!q->log && strcmp(n->op_type, "Softmax")) return false;
  const int32_t bx = plan->tensor_buffer[n->inputs[0]], by = plan->tensor_buffer[n->outputs[0]];
  if (bx < 0 || by < 0) return false;
  const tir_buffer_t *X = plan->buffers[bx].buf, *Y = plan->buffers[by].buf;
  if (!kiln_template_dense_float(X, false) || !kiln_template_dense_float(Y, false) || X->rank < 1) return false;
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
  /* the kernel's two parameters: X (or its flat view) read, Y written */
  q->bind_x = q->bind_y = -1;
  for (int32_t j = 0; j < 2; ++j) {
    const int32_t a = kk->args[j], rt = kiln_plan_root(plan, a);
    const tir_buffer_t* b = plan->buffers[a].buf;
    const bool writes = (tir_func_buffer_access(kk->func, kk->func->params[j]) & TIR_ACCESS_STORE) != 0;
    if (!kiln_template_dense_float(b, false) || tir_buffer_numel(b) != q->rows * q->n) return false;
    if (writes && rt == kiln_plan_root(plan, by) && q->bind_y < 0) q->bind_y = j;
    else if (!writes && rt == kiln_plan_root(plan, bx) && q->bind_x < 0) q->bind_x = j;
  }
  return q->bind_x >= 0 && q->bind_y >= 0 && kiln_plan_root(plan, bx) != kiln_plan_root(plan, by);
}
