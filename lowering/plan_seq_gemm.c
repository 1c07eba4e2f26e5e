/* A range program's MatMul kernels with a fused bias Add (and residual
 * Add) as GEMM template descriptors (see plan_seq_gemm.h). */
#include "lowering/plan_seq_gemm.h"

#include <string.h>

#include "ir/op.h"

static bool is_op(const kiln_node_t* n, const char* op) {
  return !strcmp(n->op_type, op) && !(n->domain && n->domain[0]);
}

bool kiln_plan_seq_gemm_bias_match(const kiln_plan_t* plan, int32_t k, bool gelu, kiln_template_gemm_t* g) {
  memset(g, 0, sizeof *g);
  const kiln_plan_kernel_t* kk = &plan->kernels[k];
  const kiln_graph_t* gr = plan->graph;
  if (!gr || !plan->tensor_buffer || kk->node < 0 || kk->node >= gr->n_nodes || kk->n_fused_nodes < 1 ||
      kk->n_fused_nodes > 2)
    return false;
  const kiln_node_t* mm = &gr->nodes[kk->node];
  if (!is_op(mm, "MatMul") || mm->n_inputs != 2 || mm->n_outputs < 1 || mm->inputs[0] < 0 || mm->inputs[1] < 0)
    return false;
  /* the chain MatMul -> Add(bias) [-> Add(residual) | Gelu]: each Add
   * takes the previous output and one other tensor */
  int32_t prev = mm->outputs[0], other[2] = {-1, -1};
  int32_t act = KILN_TEMPLATE_ACT_NONE;
  for (int32_t i = 0; i < kk->n_fused_nodes; ++i) {
    const int32_t fa = kk->fused_nodes[i];
    if (fa < 0 || fa >= gr->n_nodes) return false;
    const kiln_node_t* add = &gr->nodes[fa];
    if (i == 1 && gelu && is_op(add, "Gelu")) {
      const char* ap = NULL;
      if (add->n_inputs != 1 || add->inputs[0] != prev || add->n_outputs < 1 || add->outputs[0] < 0 ||
          kiln_attr_string(add, "approximate", "none", &ap))
        return false;
      act = !strcmp(ap, "none") ? KILN_TEMPLATE_ACT_GELU : !strcmp(ap, "tanh") ? KILN_TEMPLATE_ACT_GELU_TANH : -1;
      if (act < 0) return false;
      prev = add->outputs[0];
      continue;
    }
    if (!is_op(add, "Add") || add->n_inputs != 2 || add->n_outputs < 1 || add->outputs[0] < 0 || prev < 0) return false;
    other[i] = add->inputs[0] == prev ? add->inputs[1] : add->inputs[1] == prev ? add->inputs[0] : -1;
    if (other[i] < 0 || other[i] == prev) return false;
    prev = add->outputs[0];
  }
  const bool res = kk->n_fused_nodes == 2 && !act;
  const int32_t ba = plan->tensor_buffer[mm->inputs[0]], bb = plan->tensor_buffer[mm->inputs[1]];
  const int32_t bc = plan->tensor_buffer[other[0]], by = plan->tensor_buffer[prev];
  const int32_t br = res ? plan->tensor_buffer[other[1]] : -1;
  const tir_func_t* f = kk->func;
  if (ba < 0 || bb < 0 || bc < 0 || by < 0 || (res && br < 0) || f->n_params != (res ? 5 : 4)) return false;
  const tir_buffer_t *A = NULL, *B = NULL, *C = NULL, *Y = NULL, *R = NULL;
  for (int32_t j = 0; j < f->n_params; ++j) {
    const int32_t pb = kk->args[j];
    const tir_buffer_t* b = f->params[j];
    char r;
    if (pb == ba && !A) r = 'A', A = b;
    else if (pb == bb && !B) r = 'B', B = b;
    else if (pb == bc && !C) r = 'C', C = b;
    else if (pb == by && !Y) r = 'Y', Y = b;
    else if (res && pb == br && !R) r = 'R', R = b;
    else return false;
    g->roles[j] = r;
  }
  if (!A || !B || !C || !Y || (res && !R) || !kiln_template_dense_float(A, false) ||
      !kiln_template_dense_float(B, false) || !kiln_template_dense_float(C, false) ||
      !kiln_template_dense_float(Y, false) || (res && !kiln_template_dense_float(R, false)))
    return false;
  /* the residual: Y's shape exactly (no broadcast) */
  if (res) {
    if (R->rank != Y->rank) return false;
    for (int32_t i = 0; i < Y->rank; ++i)
      if (R->shape[i] != Y->shape[i]) return false;
  }
  /* A [..., M, K] x B [K, N] (one matrix: A's batches stack into rows) +
   * C [N] (or [1, ..., 1, N]) into Y [..., M, N] */
  const int32_t ra = A->rank;
  if (ra < 2 || Y->rank != ra || B->rank != 2 || C->rank < 1) return false;
  const int64_t M = A->shape[ra - 2], K = A->shape[ra - 1], N = B->shape[1];
  if (B->shape[0] != K || Y->shape[ra - 2] != M || Y->shape[ra - 1] != N || C->shape[C->rank - 1] != N) return false;
  for (int32_t i = 0; i < C->rank - 1; ++i)
    if (C->shape[i] != 1) return false;
  int64_t batch = 1;
  for (int32_t i = 0; i < ra - 2; ++i) {
    if (A->shape[i] != Y->shape[i]) return false;
    batch *= A->shape[i];
  }
  if (M < 1 || N < 1 || K < 1) return false;
  g->M = M * batch;
  g->N = N;
  g->K = K;
  g->batch = 1;
  g->lda = K;
  g->ldb = N;
  g->ldy = N;
  g->has_bias = true;
  g->bias_sm = 0;
  g->bias_sn = 1;
  g->alpha = 1.0f;
  g->beta = 1.0f;
  g->has_res = res;
  g->act = act;
  g->n_params = f->n_params;
  return true;
}
