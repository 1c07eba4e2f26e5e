/* The one GEMM matcher of the template kernels (see template.h): which
 * MatMul/Gemm plan kernels a GEMM template computes, with which operand
 * roles, strides and B layout.
 *
 * A plan kernel is replaced only when every parameter has a known role:
 * the node's A, Y and optional bias C as they are in the graph, B either
 * as it is or packed by the lowering (a rank-4/5 buffer named <node>_bpack,
 * whose layout is fixed by nn_pack_const / nn_pack_runtime), and the
 * lowering's own L-panel workspace (<node>_lpack, unused by the template).
 * A MatMul whose B is one matrix for all batches is one GEMM over the
 * stacked rows of A and Y (dense, so [B, M, K] is [B*M, K]) on every
 * target, batched rules or not.
 * Operands may be f32 or f16 where the target's rules say so (storage: the
 * template converts them and sums in f32). Anything else (a fused
 * epilogue, integer operands, a MatMul whose batch dims broadcast, what the
 * rules leave out) keeps the printed kernel, which is always correct. */
#include <string.h>

#include "ir/op.h"
#include "lowering/template.h"

/* f32 or f16 (when |f16|), row-major and dense. */
static bool is_dense(const tir_buffer_t* b, bool f16) { return kiln_template_dense_float(b, f16); }

bool kiln_template_gemm_match(const kiln_plan_t* plan, int32_t k, const kiln_template_gemm_rules_t* rules,
                              kiln_template_gemm_t* g) {
  memset(g, 0, sizeof *g);
  const kiln_plan_kernel_t* kk = &plan->kernels[k];
  const kiln_graph_t* gr = plan->graph;
  if (!gr || kk->node < 0 || kk->node >= gr->n_nodes || kk->n_fused_nodes > 0) return false;
  const kiln_node_t* n = &gr->nodes[kk->node];
  const uint32_t tmpl = kiln_op_node_templates(n);
  if (!(tmpl & KILN_OP_TMPL_GEMM)) return false;
  const bool is_gemm = (tmpl & KILN_OP_TMPL_GEMM_ATTRS) != 0;
  if (n->domain && n->domain[0]) return false;
  const tir_func_t* f = kk->func;
  if (f->n_params > (int32_t)sizeof g->roles - 1 || n->n_outputs < 1 || n->n_inputs < 2) return false;
  int32_t ba = -1, bb = -1, bc = -1, by = -1;
  if (n->inputs[0] >= 0) ba = plan->tensor_buffer[n->inputs[0]];
  if (n->inputs[1] >= 0) bb = plan->tensor_buffer[n->inputs[1]];
  if (is_gemm && n->n_inputs > 2 && n->inputs[2] >= 0) bc = plan->tensor_buffer[n->inputs[2]];
  if (n->outputs[0] >= 0) by = plan->tensor_buffer[n->outputs[0]];
  if (ba < 0 || bb < 0 || by < 0 || (bc >= 0 && !rules->bias)) return false;
  const tir_buffer_t *A = NULL, *B = NULL, *C = NULL, *Y = NULL, *P = NULL;
  for (int32_t j = 0; j < f->n_params; ++j) {
    const int32_t pb = kk->args[j];
    const tir_buffer_t* b = f->params[j];
    /* buffers the lowering made (named <node>_bpack / <node>_lpack) */
    const bool derived = plan->buffers[pb].tensor < 0 && (plan->buffers[pb].kind == KILN_PLAN_TEMP ||
                                                          plan->buffers[pb].kind == KILN_PLAN_CONST);
    char r = 0;
    if (pb == ba && !A) r = 'A', A = b;
    else if (pb == bb && !B) r = 'B', B = b;
    else if (pb == bc && bc >= 0 && !C) r = 'C', C = b;
    else if (pb == by && !Y) r = 'Y', Y = b;
    else if (!P && derived && strstr(b->name, "bpack") && (b->rank == 4 || b->rank == 5) &&
             (b->dtype == KILN_DTYPE_F32 || (rules->f16 && b->dtype == KILN_DTYPE_F16)))
      r = 'B', P = b;
    else if (derived && plan->buffers[pb].kind == KILN_PLAN_TEMP && strstr(b->name, "lpack")) r = '-';
    else return false;
    g->roles[j] = r;
    g->f16[j] = b->dtype == KILN_DTYPE_F16;
  }
  g->n_params = f->n_params;
  if (!A || !Y || (!B && !P) || (B && P) || (bc >= 0 && !C)) return false;
  if (!is_dense(A, rules->f16) || !is_dense(Y, rules->f16) || A->rank < 2 || Y->rank < 2 ||
      (B && (!is_dense(B, rules->f16) || B->rank < 2)))
    return false;
  if (is_gemm && (A->rank != 2 || Y->rank != 2 || (B && B->rank != 2))) return false;
  int64_t ta = 0, tb = 0;
  float alpha = 1.0f, beta = 1.0f;
  if (is_gemm) {
    kiln_status_t s = kiln_attr_int(n, "transA", 0, &ta);
    if (!s) s = kiln_attr_int(n, "transB", 0, &tb);
    if (!s) s = kiln_attr_float(n, "alpha", 1.0f, &alpha);
    if (!s) s = kiln_attr_float(n, "beta", 1.0f, &beta);
    if (s) {
      kiln_status_free(s);
      return false;
    }
  }
  if (!rules->scaled && (ta != 0 || alpha != 1.0f)) return false;
  g->trans_a = ta != 0;
  g->trans_b = P ? false : tb != 0;
  const int32_t ra = A->rank, ry = Y->rank;
  g->M = Y->shape[ry - 2];
  g->N = Y->shape[ry - 1];
  g->K = A->shape[g->trans_a ? ra - 2 : ra - 1];
  if (A->shape[g->trans_a ? ra - 1 : ra - 2] != g->M || g->M <= 0 || g->N <= 0 || g->K <= 0)
    return false;
  /* Batches: A and Y must share their batch dims exactly; B is either one
   * matrix for all (then A's batches are just more rows: A and Y are
   * dense, so they stack) or one per batch. Broadcast batch dims of A keep
   * the printed kernel. */
  if (ra != ry) return false;
  int64_t batch = 1;
  for (int32_t i = 0; i < ra - 2; ++i) {
    if (A->shape[i] != Y->shape[i]) return false;
    batch *= A->shape[i];
  }
  int64_t bbatch = 1, bmat = 0;
  if (P) {
    /* {nb, tiles, K, t} or {nb, nkb, tiles, kbs, t} */
    bbatch = P->shape[0];
    g->pack_t = P->shape[P->rank - 1];
    g->pack_kbs = P->shape[P->rank - 2];
    g->pack_tiles = P->shape[P->rank - 3];
    g->pack_nkb = P->rank == 5 ? P->shape[1] : 1;
    if (g->pack_tiles * g->pack_t < g->N || g->pack_nkb * g->pack_kbs < g->K) return false;
    if (P->rank == 4 && g->pack_kbs != g->K) return false;
    /* the lowering's panels: no whole tile or K block of padding */
    if (g->pack_tiles != (g->N + g->pack_t - 1) / g->pack_t || (g->pack_nkb - 1) * g->pack_kbs >= g->K)
      return false;
    bmat = g->pack_nkb * g->pack_tiles * g->pack_kbs * g->pack_t;
  } else {
    const int32_t rb = B->rank;
    if (B->shape[g->trans_b ? rb - 1 : rb - 2] != g->K || B->shape[g->trans_b ? rb - 2 : rb - 1] != g->N)
      return false;
    for (int32_t i = 0; i < rb - 2; ++i) bbatch *= B->shape[i];
    if (bbatch > 1) {
      if (rb != ra) return false;
      for (int32_t i = 0; i < rb - 2; ++i)
        if (B->shape[i] != A->shape[i]) return false;
    }
    g->ldb = B->shape[rb - 1];
    bmat = g->K * g->N;
  }
  g->lda = A->shape[ra - 1];
  g->ldy = Y->shape[ry - 1];
  g->batch = 1;
  if (bbatch == 1) {
    if (batch > 1 && g->trans_a) return false; /* transposed rows do not stack */
    g->M *= batch;
  } else if (bbatch == batch && rules->batched) {
    /* one B per batch: only templates with batch strides */
    g->batch = batch;
    g->sa = g->M * g->K;
    g->sb = bmat;
    g->sy = g->M * g->N;
  } else {
    return false;
  }
  g->alpha = alpha;
  g->beta = beta;
  if (C) {
    if ((C->dtype != KILN_DTYPE_F32 && (!rules->f16 || C->dtype != KILN_DTYPE_F16)) || C->rank > 2) return false;
    /* Right-aligned broadcast of C against [M, N]. */
    int64_t c0 = C->rank == 2 ? C->shape[0] : 1, c1 = C->rank >= 1 ? C->shape[C->rank - 1] : 1;
    if ((c0 != 1 && c0 != g->M) || (c1 != 1 && c1 != g->N)) return false;
    g->has_bias = beta != 0.0f;
    g->bias_sm = c0 == g->M && g->M != 1 ? c1 : 0;
    g->bias_sn = c1 == g->N && g->N != 1 ? 1 : 0;
  }
  return true;
}

