/* The int8 product templates' matcher (template.h, kiln_template_q8_t):
 * QLinearConv and QLinearMatMul as the GPU lowering computes them (the
 * plain loop kernels of lowering/lower_nn_quant.c, one work-item per output
 * element), so the OpenCL and Vulkan targets print an int8 implicit GEMM in
 * their place. The match reads the node's shapes and attributes and binds
 * each kernel parameter to the node input it views; what it does not
 * recognise keeps the plain kernel, which is always correct. */
#include <string.h>

#include "ir/op.h"
#include "ir/ops/nn_internal.h"
#include "ir/ops/nn_quant.h"
#include "lowering/template.h"

static bool q8_dtype(kiln_dtype_t t) { return t == KILN_DTYPE_U8 || t == KILN_DTYPE_I8; }

/* The plan buffer of graph tensor |t| (-1: none), as a memory root. */
static int32_t root_of(const kiln_plan_t* plan, int32_t t) {
  if (t < 0 || t >= plan->graph->n_tensors) return -1;
  const int32_t b = plan->tensor_buffer[t];
  return b < 0 ? -1 : kiln_plan_root(plan, b);
}

static const tir_buffer_t* buf_of(const kiln_plan_t* plan, int32_t t) {
  const int32_t b = t >= 0 && t < plan->graph->n_tensors ? plan->tensor_buffer[t] : -1;
  return b < 0 ? NULL : plan->buffers[b].buf;
}

/* The node's operands have the types and counts the template reads. */
static bool operands_ok(const kiln_plan_t* plan, const kiln_node_t* n, kiln_template_q8_t* q) {
  const tir_buffer_t* b[KILN_Q8_ROLES];
  for (int32_t r = 0; r < KILN_Q8_ROLES; ++r) {
    const int32_t t = r == KILN_Q8_Y ? n->outputs[0] : r < n->n_inputs ? n->inputs[r] : -1;
    b[r] = buf_of(plan, t);
    if (!b[r] && r != KILN_Q8_BIAS) return false;
  }
  if (!q8_dtype(b[KILN_Q8_X]->dtype) || !q8_dtype(b[KILN_Q8_W]->dtype) || !q8_dtype(b[KILN_Q8_Y]->dtype) ||
      b[KILN_Q8_XZ]->dtype != b[KILN_Q8_X]->dtype || b[KILN_Q8_WZ]->dtype != b[KILN_Q8_W]->dtype ||
      b[KILN_Q8_YZ]->dtype != b[KILN_Q8_Y]->dtype)
    return false;
  const int roles_f32[3] = {KILN_Q8_XS, KILN_Q8_WS, KILN_Q8_YS};
  for (int i = 0; i < 3; ++i)
    if (b[roles_f32[i]]->dtype != KILN_DTYPE_F32) return false;
  if (tir_buffer_numel(b[KILN_Q8_XS]) != 1 || tir_buffer_numel(b[KILN_Q8_XZ]) != 1 ||
      tir_buffer_numel(b[KILN_Q8_YS]) != 1 || tir_buffer_numel(b[KILN_Q8_YZ]) != 1)
    return false;
  const int64_t nw = tir_buffer_numel(b[KILN_Q8_WS]);
  if (tir_buffer_numel(b[KILN_Q8_WZ]) != nw || (nw != 1 && nw != q->M)) return false;
  if (b[KILN_Q8_BIAS] && (b[KILN_Q8_BIAS]->dtype != KILN_DTYPE_I32 || tir_buffer_numel(b[KILN_Q8_BIAS]) != q->M))
    return false;
  q->x_u8 = b[KILN_Q8_X]->dtype == KILN_DTYPE_U8;
  q->w_u8 = b[KILN_Q8_W]->dtype == KILN_DTYPE_U8;
  q->y_u8 = b[KILN_Q8_Y]->dtype == KILN_DTYPE_U8;
  q->w_per_chan = nw > 1;
  return true;
}

/* The GEMM view of a QLinearConv: the window as the lowering parses it. */
static bool conv_shape(const kiln_node_t* n, const tir_buffer_t* X, const tir_buffer_t* W,
                       const tir_buffer_t* Y, const kiln_shape_t* xs, const kiln_shape_t* ws, kiln_template_q8_t* q) {
  if (X->rank < 3 || X->rank > 5 || W->rank != X->rank || Y->rank != X->rank) return false;
  kiln_nn_window_t win;
  int64_t group = 1;
  kiln_shape_t out;
  kiln_status_t st = kiln_nn_conv_shape(n, n->op_type, xs, "x", ws, "w", NULL, &win, &group, &out);
  if (st) {
    kiln_status_free(st);
    return false;
  }
  kiln_nn_win3_t w3;
  kiln_nn_win3(&win, X->shape + 2, Y->shape + 2, &w3);
  q->N = X->shape[0];
  q->G = group;
  q->M = W->shape[0];
  const int64_t C = X->shape[1];
  if (group < 1 || C % group || q->M % group || W->shape[1] != C / group || Y->shape[1] != q->M ||
      Y->shape[0] != q->N)
    return false;
  q->Mg = q->M / group;
  q->Cg = C / group;
  q->K = q->Cg * w3.k[0] * w3.k[1] * w3.k[2];
  q->P = w3.out[0] * w3.out[1] * w3.out[2];
  memcpy(q->in, w3.in, sizeof q->in);
  memcpy(q->out, w3.out, sizeof q->out);
  memcpy(q->k, w3.k, sizeof q->k);
  memcpy(q->s, w3.s, sizeof q->s);
  memcpy(q->d, w3.d, sizeof q->d);
  memcpy(q->p, w3.p, sizeof q->p);
  return tir_buffer_numel(Y) == q->N * q->M * q->P;
}

/* The GEMM view of a QLinearMatMul with a 2-D B: A's rows stacked. */
static bool matmul_shape(const tir_buffer_t* A, const tir_buffer_t* B, const tir_buffer_t* Y, kiln_template_q8_t* q) {
  if (A->rank < 2 || B->rank != 2 || Y->rank != A->rank || A->shape[A->rank - 1] != B->shape[0]) return false;
  q->matmul = true;
  q->N = q->G = 1;
  q->K = B->shape[0];
  q->M = q->Mg = B->shape[1];
  q->Cg = q->K;
  q->P = q->M > 0 ? tir_buffer_numel(Y) / q->M : 0;
  for (int i = 0; i < 3; ++i) q->in[i] = q->out[i] = q->k[i] = q->s[i] = q->d[i] = 1, q->p[i] = 0;
  return Y->shape[Y->rank - 1] == q->M && q->P * q->K == tir_buffer_numel(A);
}

int64_t kiln_template_q8_trips(const kiln_template_q8_t* q) {
  const int64_t taps = q->k[0] * q->k[1] * q->k[2];
  return taps * ((q->Cg + 3) / 4 + 1);
}

bool kiln_template_q8_match(const kiln_plan_t* plan, int32_t k, int64_t max_trips, kiln_template_q8_t* q) {
  memset(q, 0, sizeof *q);
  const kiln_plan_kernel_t* kk = &plan->kernels[k];
  const kiln_graph_t* g = plan->graph;
  if (!g || kk->node < 0 || kk->node >= g->n_nodes || kk->n_fused_nodes > 0 || kk->custom || kk->host) return false;
  const kiln_node_t* n = &g->nodes[kk->node];
  const bool conv = !strcmp(n->op_type, "QLinearConv"), mm = !strcmp(n->op_type, "QLinearMatMul");
  if ((!conv && !mm) || (n->domain && n->domain[0]) || n->n_inputs < 8 || n->n_outputs < 1 || n->outputs[0] < 0)
    return false;
  for (int32_t i = 0; i < 8; ++i)
    if (n->inputs[i] < 0) return false;
  for (int32_t j = 0; j < plan->n_kernels; ++j)
    if (j != k && plan->kernels[j].node == kk->node) return false; /* not the one-kernel lowering */
  const tir_buffer_t *X = buf_of(plan, n->inputs[0]), *W = buf_of(plan, n->inputs[3]), *Y = buf_of(plan, n->outputs[0]);
  if (!X || !W || !Y) return false;
  bool shaped = conv ? conv_shape(n, X, W, Y, &g->tensors[n->inputs[0]].shape, &g->tensors[n->inputs[3]].shape, q)
                     : matmul_shape(X, W, Y, q);
  if (!shaped || q->P < 1 || q->M < 1 || q->K < 1 || !operands_ok(plan, n, q)) return false;
  if (max_trips > 0 && kiln_template_q8_trips(q) > max_trips) return false;
  /* the templates index in int (a 2-D launch past a Vulkan device's
   * work-group counts folds: targets/vulkan/vulkan_grid.c) */
  if (tir_buffer_numel(X) > INT32_MAX / 2 || tir_buffer_numel(W) > INT32_MAX / 2 ||
      tir_buffer_numel(Y) > INT32_MAX / 2)
    return false;
  /* every parameter views one role's tensor (two roles may share a
   * constant: either parameter then reads the same bytes) */
  for (int32_t r = 0; r < KILN_Q8_ROLES; ++r) q->bind[r] = -1;
  for (int32_t j = 0; j < kk->func->n_params; ++j) {
    const int32_t a = kiln_plan_root(plan, kk->args[j]);
    const bool writes = (tir_func_buffer_access(kk->func, kk->func->params[j]) & TIR_ACCESS_STORE) != 0;
    int32_t role = -1;
    for (int32_t r = 0; r < KILN_Q8_ROLES && role < 0; ++r) {
      const int32_t t = r == KILN_Q8_Y ? n->outputs[0] : r < n->n_inputs ? n->inputs[r] : -1;
      if (q->bind[r] < 0 && t >= 0 && root_of(plan, t) == a && writes == (r == KILN_Q8_Y)) role = r;
    }
    if (role < 0) return false;
    q->bind[role] = j;
  }
  for (int32_t r = 0; r < KILN_Q8_ROLES; ++r)
    if (q->bind[r] < 0 && !(r == KILN_Q8_BIAS && (n->n_inputs < 9 || n->inputs[8] < 0))) return false;
  /* the output is written while X is read */
  return root_of(plan, n->outputs[0]) != root_of(plan, n->inputs[0]);
}
