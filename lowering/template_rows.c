/* Row-reduction template instances (see template.h): a Softmax or
 * LogSoftmax over contiguous f32 or f16 rows whose plan kernel is the lowering's
 * printed row kernel (lowering/lower_nn_norm.c): it reads X (or a flat
 * view of it) and writes Y (or a flat view) and nothing else; or an f32
 * LayerNormalization whose kernel reads X, its scale and bias as [n]
 * parameters and writes Y; or an f32 reduction over the last axes or a
 * global pool (lowering/lower_nn_reduce.c, lower_nn_pool.c) whose kernel
 * reads X and writes Y (LogSumExp: its two kernels). A strided axis, a fused producer or consumer,
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

/* The reductions: op, kind, the opset from which the axes are an input
 * (0: a global pool, the axes from 2 on) */
static const struct {
  const char* op;
  kiln_rows_red_t red;
  int64_t axes_input;
} k_reds[] = {
    {"ReduceSum", KILN_ROWS_SUM, 13},       {"ReduceMean", KILN_ROWS_MEAN, 18},
    {"ReduceMax", KILN_ROWS_MAX, 18},       {"ReduceMin", KILN_ROWS_MIN, 18},
    {"ReduceSumSquare", KILN_ROWS_SUMSQ, 18}, {"ReduceL2", KILN_ROWS_L2, 18},
    {"ReduceL1", KILN_ROWS_L1, 18},         {"ReduceLogSum", KILN_ROWS_LOGSUM, 18},
    {"ReduceLogSumExp", KILN_ROWS_LSE, 18}, {"GlobalAveragePool", KILN_ROWS_MEAN, 0},
    {"GlobalMaxPool", KILN_ROWS_MAX, 0},
};

/* Which of X's dims node |n| reduces (|r| entry of k_reds) into |red|;
 * false where the axes are not known at compile time or there is nothing
 * to reduce (noop_with_empty_axes: the lowering aliases Y to X). */
static bool red_axes(const kiln_graph_t* g, const kiln_node_t* n, int32_t r, int32_t rank, bool* red) {
  if (k_reds[r].axes_input == 0) {
    for (int32_t d = 0; d < rank; ++d) red[d] = d >= 2;
    return rank >= 3;
  }
  int64_t noop = 0, axes[KILN_MAX_RANK], count = 0;
  kiln_status_t s = kiln_attr_int(n, "noop_with_empty_axes", 0, &noop);
  if (!s && g->opset >= k_reds[r].axes_input) {
    if (n->n_inputs > 1 && n->inputs[1] >= 0) {
      const kiln_tensor_t* t = &g->tensors[n->inputs[1]];
      if (!(t->flags & KILN_TENSOR_CONST) || !t->value.data) return false;
      count = kiln_array_numel(&t->value);
      if (count > KILN_MAX_RANK) return false;
      for (int64_t i = 0; i < count; ++i) axes[i] = kiln_load_i64(t->value.dtype, t->value.data, (size_t)i);
    }
  } else if (!s) {
    const int64_t* v = NULL;
    int64_t c = -1;
    s = kiln_attr_ints(n, "axes", &v, &c);
    if (!s && c > KILN_MAX_RANK) return false;
    for (int64_t i = 0; !s && i < c; ++i) axes[i] = v[i];
    count = c < 0 ? 0 : c;
  }
  if (s) {
    kiln_status_free(s);
    return false;
  }
  if (count == 0 && noop) return false;
  for (int32_t d = 0; d < rank; ++d) red[d] = count == 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
    if (a < 0 || a >= rank) return false;
    red[a] = true;
  }
  return true;
}

/* A reduction kernel of node |n| (k_reds entry |r|) over rows of its last
 * axes: the lowering's one kernel (X -> Y), or for LogSumExp its max
 * kernel (X -> the temp: a MAX row) or its sum (X, the temp -> Y). */
static bool red_match(const kiln_plan_t* plan, int32_t k, const kiln_node_t* n, int32_t r, kiln_template_rows_t* q) {
  const kiln_plan_kernel_t* kk = &plan->kernels[k];
  if (n->n_inputs < 1 || n->inputs[0] < 0 || n->n_outputs != 1 || n->outputs[0] < 0) return false;
  const int32_t bx = plan->tensor_buffer[n->inputs[0]], by = plan->tensor_buffer[n->outputs[0]];
  if (bx < 0 || by < 0) return false;
  const tir_buffer_t *X = plan->buffers[bx].buf, *Y = plan->buffers[by].buf;
  if (!kiln_template_dense_float(X, false) || !kiln_template_dense_float(Y, false) || X->rank < 1 ||
      X->rank > KILN_MAX_RANK)
    return false;
  const int32_t rx = kiln_plan_root(plan, bx), ry = kiln_plan_root(plan, by);
  if (rx == ry) return false;
  bool red[KILN_MAX_RANK];
  if (!red_axes(plan->graph, n, r, X->rank, red)) return false;
  /* the reduced dims (but 1s) after the kept ones: contiguous rows */
  bool seen_red = false;
  q->rows = q->n = 1;
  for (int32_t d = 0; d < X->rank; ++d) {
    if (X->shape[d] == 1) continue;
    if (red[d]) seen_red = true;
    else if (seen_red) return false;
    if (red[d]) q->n *= X->shape[d];
    else q->rows *= X->shape[d];
  }
  /* rows of 2^16 or more are the lowering's blocked kernels */
  if (q->rows < 1 || q->n < 1 || q->n >= 65536 || q->n > KILN_TEMPLATE_ROWS_MAX_N || q->rows * q->n > INT32_MAX ||
      tir_buffer_numel(X) != q->rows * q->n || tir_buffer_numel(Y) != q->rows)
    return false;
  const bool lse = k_reds[r].red == KILN_ROWS_LSE;
  const int32_t np = kk->func->n_params;
  if (np != 2 && !(lse && np == 3)) return false;
  q->red = np == 2 && lse ? KILN_ROWS_MAX : k_reds[r].red;
  q->bind_x = q->bind_y = q->bind_s = q->bind_b = -1;
  for (int32_t j = 0; j < np; ++j) {
    const int32_t a = kk->args[j], ra = kiln_plan_root(plan, a);
    const tir_buffer_t* b = plan->buffers[a].buf;
    if (!kiln_template_dense_float(b, false)) return false;
    const bool writes = (tir_func_buffer_access(kk->func, kk->func->params[j]) & TIR_ACCESS_STORE) != 0;
    const int64_t nb = tir_buffer_numel(b);
    if (writes) {
      /* Y, or LogSumExp's max kernel writing its temp */
      if (q->bind_y >= 0 || nb != q->rows || ra == rx || (lse && np == 2 ? ra == ry : ra != ry)) return false;
      q->bind_y = j;
    } else if (ra == rx && nb == q->rows * q->n && q->bind_x < 0) {
      q->bind_x = j;
    } else if (np == 3 && ra != ry && nb == q->rows && q->bind_s < 0) {
      q->bind_s = j; /* the row's max */
    } else {
      return false;
    }
  }
  return q->bind_x >= 0 && q->bind_y >= 0 && (np == 2 || q->bind_s >= 0);
}

bool kiln_template_rows_match(const kiln_plan_t* plan, int32_t k, kiln_template_rows_t* q) {
  memset(q, 0, sizeof *q);
  {
    const kiln_plan_kernel_t* kk = &plan->kernels[k];
    const kiln_graph_t* g = plan->graph;
    if (g && kk->node >= 0 && kk->node < g->n_nodes && kk->n_fused_nodes == 0 && !kk->custom) {
      const kiln_node_t* n = &g->nodes[kk->node];
      if (n->op_type && !(n->domain && n->domain[0])) {
        if (!strcmp(n->op_type, "LayerNormalization")) return ln_match(plan, k, n, q);
        for (int32_t r = 0; r < (int32_t)(sizeof k_reds / sizeof k_reds[0]); ++r)
          if (!strcmp(n->op_type, k_reds[r].op)) return red_match(plan, k, n, r, q);
      }
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
