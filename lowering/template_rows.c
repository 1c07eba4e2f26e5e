/* Row-reduction template instances (see template.h): a Softmax or
 * LogSoftmax over contiguous f32 or f16 rows whose plan kernel is the lowering's
 * printed row kernel (lowering/lower_nn_norm.c): it reads X (or a flat
 * view of it) and writes Y (or a flat view) and nothing else; or an f32
 * LayerNormalization whose kernel reads X, its scale and bias as [n]
 * parameters and writes Y. A strided axis, a fused producer or consumer,
 * a broadcast run-time scale keep the printed kernel, which is always
 * correct. */
#include "lowering/template.h"

#include <math.h>
#include <string.h>

#include "ir/op.h"

/* The graph's constant f32 value of tensor |t| when it holds |n| values. */
static const float* const_f32(const kiln_graph_t* g, int32_t t, int64_t n) {
  if (t < 0 || t >= g->n_tensors) return NULL;
  const kiln_tensor_t* v = &g->tensors[t];
  if (!(v->flags & KILN_TENSOR_CONST) || !v->value.data || v->value.dtype != KILN_DTYPE_F32 ||
      kiln_array_numel(&v->value) != n)
    return NULL;
  return v->value.data;
}

/* Which of scale (0) / bias (1) plan buffer |a| is: a view of the node's
 * input tensor |ts| / |tb| (holding n values), or the lowering's [n]
 * constant holding that input's values (ln_input expands a constant that
 * has n values to the same n values); -1 neither. |taken| masks the roles
 * already bound (a scale and a bias of equal values are either). */
static int ln_role(const kiln_plan_t* plan, int32_t a, int32_t ts, int32_t tb, int64_t n, int taken) {
  const kiln_graph_t* g = plan->graph;
  const kiln_plan_buffer_t* pb = &plan->buffers[a];
  const int32_t r = kiln_plan_root(plan, a);
  for (int role = 0; role < 2; ++role) {
    const int32_t t = role ? tb : ts;
    if ((taken >> role & 1) || t < 0) continue;
    const int32_t bt = plan->tensor_buffer[t];
    if (bt >= 0 && kiln_plan_root(plan, bt) == r && tir_buffer_numel(plan->buffers[bt].buf) == n) return role;
    const float* v = const_f32(g, t, n);
    if (v && pb->kind == KILN_PLAN_CONST && pb->tensor < 0 && pb->value.data && pb->value.dtype == KILN_DTYPE_F32 &&
        kiln_array_numel(&pb->value) == n && !memcmp(pb->value.data, v, sizeof(float) * (size_t)n))
      return role;
  }
  return -1;
}

static bool ln_match(const kiln_plan_t* plan, int32_t k, const kiln_node_t* n, kiln_template_rows_t* q) {
  const kiln_plan_kernel_t* kk = &plan->kernels[k];
  if (n->n_inputs < 2 || n->inputs[0] < 0 || n->inputs[1] < 0 || n->n_outputs < 1 || n->outputs[0] < 0) return false;
  for (int32_t o = 1; o < n->n_outputs; ++o)
    if (n->outputs[o] >= 0) return false; /* Mean / InvStdDev: the printed kernel */
  const int32_t ts = n->inputs[1], tb = n->n_inputs > 2 ? n->inputs[2] : -1;
  const int32_t bx = plan->tensor_buffer[n->inputs[0]], by = plan->tensor_buffer[n->outputs[0]];
  if (bx < 0 || by < 0) return false;
  const tir_buffer_t *X = plan->buffers[bx].buf, *Y = plan->buffers[by].buf;
  if (!kiln_template_dense_float(X, false) || !kiln_template_dense_float(Y, false) || X->rank < 1) return false;
  const int32_t rx = kiln_plan_root(plan, bx), ry = kiln_plan_root(plan, by);
  if (rx == ry) return false;
  int64_t axis = -1, stash = 1;
  float eps = 1e-5f;
  kiln_status_t s = kiln_attr_int(n, "axis", -1, &axis);
  if (!s) s = kiln_attr_float(n, "epsilon", 1e-5f, &eps);
  if (!s) s = kiln_attr_int(n, "stash_type", 1, &stash);
  if (s) {
    kiln_status_free(s);
    return false;
  }
  if (axis < 0) axis += X->rank;
  if (stash != 1 || axis < 0 || axis >= X->rank || !isfinite(eps)) return false;
  q->ln = true, q->eps = eps, q->rows = 1, q->n = 1;
  for (int32_t d = 0; d < X->rank; ++d) {
    if (d < axis) q->rows *= X->shape[d];
    else q->n *= X->shape[d];
  }
  if (q->rows < 1 || q->n < 1 || q->n > KILN_TEMPLATE_ROWS_MAX_N || q->rows * q->n > INT32_MAX ||
      tir_buffer_numel(Y) != q->rows * q->n)
    return false;
  const int32_t np = kk->func->n_params;
  if (np != (tb >= 0 ? 4 : 3)) return false;
  q->bind_x = q->bind_y = q->bind_s = q->bind_b = -1;
  int taken = 0;
  for (int32_t j = 0; j < np; ++j) {
    const int32_t a = kk->args[j], r = kiln_plan_root(plan, a);
    const tir_buffer_t* b = plan->buffers[a].buf;
    if (!kiln_template_dense_float(b, false)) return false;
    if (tir_func_buffer_access(kk->func, kk->func->params[j]) & TIR_ACCESS_STORE) {
      if (r != ry || tir_buffer_numel(b) != q->rows * q->n || q->bind_y >= 0) return false;
      q->bind_y = j;
    } else if (r == rx && tir_buffer_numel(b) == q->rows * q->n && q->bind_x < 0) {
      q->bind_x = j;
    } else {
      const int role = r == ry ? -1 : ln_role(plan, a, ts, tb, q->n, taken);
      if (role < 0) return false;
      taken |= 1 << role;
      if (role) q->bind_b = j;
      else q->bind_s = j;
    }
  }
  return q->bind_x >= 0 && q->bind_y >= 0 && q->bind_s >= 0 && (tb < 0 || q->bind_b >= 0);
}

bool kiln_template_rows_match(const kiln_plan_t* plan, int32_t k, kiln_template_rows_t* q) {
  memset(q, 0, sizeof *q);
  {
    const kiln_plan_kernel_t* kk = &plan->kernels[k];
    const kiln_graph_t* g = plan->graph;
    if (g && kk->node >= 0 && kk->node < g->n_nodes && kk->n_fused_nodes == 0 && !kk->custom) {
      const kiln_node_t* n = &g->nodes[kk->node];
      if (n->op_type && !strcmp(n->op_type, "LayerNormalization") && !(n->domain && n->domain[0]))
        return ln_match(plan, k, n, q);
    }
  }
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
