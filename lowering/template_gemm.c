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
 * template converts them and sums in f32). Where the rules take epilogues,
 * the nodes fusion put after the GEMM are read as the template's: a bias
 * Add, a residual Add, then one activation (gemm_chain below). Anything
 * else (another epilogue, integer operands, a MatMul whose batch dims
 * broadcast, what the rules leave out) keeps the printed kernel, which is
 * always correct. */
#include <math.h>
#include <string.h>

#include "ir/op.h"
#include "ir/pass_util.h"
#include "lowering/template.h"

/* The fused nodes of a GEMM kernel as the template computes them. */
typedef struct gemm_chain_s {
  int32_t bias;    /* tensor of a bias Add ([N], leading 1s), -1: none */
  int32_t res;     /* tensor of a residual Add (Y's shape), -1: none */
  int32_t skip[2]; /* Clip's bound tensors: parameters the template leaves */
  int32_t out;     /* the chain's last tensor (the kernel's Y) */
} gemm_chain_t;

static bool same_shape(const kiln_tensor_t* a, const kiln_tensor_t* b) {
  if (a->shape.rank != b->shape.rank) return false;
  for (int32_t i = 0; i < a->shape.rank; ++i)
    if (a->shape.dims[i] != b->shape.dims[i] || a->shape.dims[i] < 0) return false;
  return true;
}

/* a row of Y's last dim: [N] with leading 1s */
static bool is_row(const kiln_tensor_t* t, const kiln_tensor_t* y) {
  const int32_t r = t->shape.rank;
  if (r < 1 || r > y->shape.rank || t->shape.dims[r - 1] != y->shape.dims[y->shape.rank - 1]) return false;
  for (int32_t i = 0; i < r - 1; ++i)
    if (t->shape.dims[i] != 1) return false;
  return true;
}

int kiln_template_gemm_chain_op(const kiln_node_t* n) {
  if (!n->op_type || (n->domain && n->domain[0])) return 0;
  if (!strcmp(n->op_type, "Add")) return 1;
  if (!strcmp(n->op_type, "Relu") || !strcmp(n->op_type, "Clip") || !strcmp(n->op_type, "Gelu")) return 2;
  return 0;
}

/* Reads plan kernel |kk|'s fused nodes after the GEMM's output |y0|: Adds
 * of a bias (where the node has no C of its own) and of a residual of Y's
 * shape, in either order (the template adds the bias first), then at most
 * one Relu, Clip with constant bounds or (|rules|->gelu) Gelu; each node's
 * output of Y's shape and f32 in the graph. Fills |c| and g's act. */
static bool gemm_chain(const kiln_plan_t* plan, const kiln_plan_kernel_t* kk, int32_t y0, bool has_c,
                       const kiln_template_gemm_rules_t* rules, gemm_chain_t* c, kiln_template_gemm_t* g) {
  const kiln_graph_t* gr = plan->graph;
  c->bias = c->res = c->skip[0] = c->skip[1] = -1;
  c->out = y0;
  g->act = KILN_TEMPLATE_ACT_NONE;
  g->act_lo = -INFINITY;
  g->act_hi = INFINITY;
  const int32_t nf = kk->n_fused_nodes;
  if (y0 < 0 || nf > 8) return false;
  const kiln_tensor_t* yt = &gr->tensors[y0];
  bool used[8] = {false};
  for (int32_t step = 0; step < nf; ++step) {
    int32_t pick = -1;
    for (int32_t i = 0; i < nf && pick < 0; ++i) {
      const int32_t ni = kk->fused_nodes[i];
      if (ni < 0 || ni >= gr->n_nodes) return false;
      for (int32_t j = 0; !used[i] && j < gr->nodes[ni].n_inputs; ++j)
        if (gr->nodes[ni].inputs[j] == c->out) pick = i;
    }
    /* an activation ends the chain */
    if (pick < 0 || g->act != KILN_TEMPLATE_ACT_NONE) return false;
    used[pick] = true;
    const kiln_node_t* n = &gr->nodes[kk->fused_nodes[pick]];
    if (!kiln_template_gemm_chain_op(n) || n->n_outputs < 1 || n->outputs[0] < 0) return false;
    const kiln_tensor_t* ot = &gr->tensors[n->outputs[0]];
    if (ot->dtype != KILN_DTYPE_F32 || !same_shape(ot, yt)) return false;
    const char* op = n->op_type;
    kiln_status_t s = NULL;
    if (!strcmp(op, "Add")) {
      if (n->n_inputs != 2 || n->inputs[0] == n->inputs[1] || n->inputs[0] < 0 || n->inputs[1] < 0) return false;
      const int32_t other = n->inputs[0] == c->out ? n->inputs[1] : n->inputs[0];
      const kiln_tensor_t* t = &gr->tensors[other];
      if (t->dtype != KILN_DTYPE_F32) return false;
      if (c->res < 0 && same_shape(t, yt)) c->res = other;
      else if (c->bias < 0 && !has_c && is_row(t, yt)) c->bias = other;
      else return false;
    } else if (!strcmp(op, "Relu")) {
      if (n->n_inputs != 1) return false;
      g->act = KILN_TEMPLATE_ACT_RELU;
    } else if (!strcmp(op, "Clip")) {
      if (n->n_inputs < 1 || n->inputs[0] != c->out) return false;
      s = kiln_attr_float(n, "min", -INFINITY, &g->act_lo);
      if (!s) s = kiln_attr_float(n, "max", INFINITY, &g->act_hi);
      for (int32_t q = 1; !s && q < 3 && q < n->n_inputs; ++q) {
        double v = 0;
        if (n->inputs[q] < 0) continue;
        if (!pu_const_scalar(gr, n->inputs[q], &v) || isnan(v)) return false;
        if (q == 1) g->act_lo = (float)v;
        else g->act_hi = (float)v;
        c->skip[q - 1] = n->inputs[q];
      }
      g->act = KILN_TEMPLATE_ACT_CLIP;
    } else if (!strcmp(op, "Gelu") && rules->gelu) {
      const char* ap = NULL;
      if (n->n_inputs != 1) return false;
      s = kiln_attr_string(n, "approximate", "none", &ap);
      if (!s) {
        g->act = !strcmp(ap, "none") ? KILN_TEMPLATE_ACT_GELU : !strcmp(ap, "tanh") ? KILN_TEMPLATE_ACT_GELU_TANH : -1;
        if (g->act < 0) return false;
      }
    } else {
      return false;
    }
    if (s) {
      kiln_status_free(s);
      return false;
    }
    c->out = n->outputs[0];
  }
  return true;
}

/* f32 or f16 (when |f16|), row-major and dense. */
static bool is_dense(const tir_buffer_t* b, bool f16) { return kiln_template_dense_float(b, f16); }

bool kiln_template_gemm_match(const kiln_plan_t* plan, int32_t k, const kiln_template_gemm_rules_t* rules,
                              kiln_template_gemm_t* g) {
  memset(g, 0, sizeof *g);
  const kiln_plan_kernel_t* kk = &plan->kernels[k];
  const kiln_graph_t* gr = plan->graph;
  if (!gr || kk->node < 0 || kk->node >= gr->n_nodes || (kk->n_fused_nodes > 0 && !rules->epilogue))
    return false;
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
  gemm_chain_t ch = {-1, -1, {-1, -1}, n->outputs[0]};
  g->act_lo = -INFINITY;
  g->act_hi = INFINITY;
  if (kk->n_fused_nodes > 0 && !gemm_chain(plan, kk, n->outputs[0], bc >= 0, rules, &ch, g)) return false;
  if (ch.out >= 0) by = plan->tensor_buffer[ch.out];
  if (ch.bias >= 0) bc = plan->tensor_buffer[ch.bias];
  const int32_t br = ch.res >= 0 ? plan->tensor_buffer[ch.res] : -1;
  int32_t bskip[2] = {-1, -1};
  for (int32_t q = 0; q < 2; ++q)
    if (ch.skip[q] >= 0) bskip[q] = plan->tensor_buffer[ch.skip[q]];
  if (ba < 0 || bb < 0 || by < 0 || (bc >= 0 && !rules->bias) || (ch.bias >= 0 && bc < 0) || (ch.res >= 0 && br < 0))
    return false;
  const tir_buffer_t *A = NULL, *B = NULL, *C = NULL, *Y = NULL, *P = NULL, *R = NULL;
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
    else if (pb == br && br >= 0 && !R) r = 'R', R = b;
    else if (pb >= 0 && (pb == bskip[0] || pb == bskip[1])) r = '-';
    else if (!P && derived && strstr(b->name, "bpack") && (b->rank == 4 || b->rank == 5) &&
             (b->dtype == KILN_DTYPE_F32 || (rules->f16 && b->dtype == KILN_DTYPE_F16)))
      r = 'B', P = b;
    else if (derived && plan->buffers[pb].kind == KILN_PLAN_TEMP && strstr(b->name, "lpack")) r = '-';
    else return false;
    g->roles[j] = r;
    g->f16[j] = b->dtype == KILN_DTYPE_F16;
  }
  g->n_params = f->n_params;
  if (!A || !Y || (!B && !P) || (B && P) || (bc >= 0 && !C) || (br >= 0 && !R)) return false;
  if (R && (!is_dense(R, rules->f16) || R->rank != Y->rank)) return false;
  for (int32_t i = 0; R && i < R->rank; ++i)
    if (R->shape[i] != Y->shape[i]) return false;
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
  g->has_res = R != NULL;
  /* the templates read the residual at Y's index without a batch stride */
  if (R && g->batch != 1) return false;
  if (C && ch.bias >= 0) {
    /* a bias Add: [N] (leading 1s) along the rows, added as it is */
    if (C->dtype != KILN_DTYPE_F32 && (!rules->f16 || C->dtype != KILN_DTYPE_F16)) return false;
    g->has_bias = true;
    g->beta = 1.0f;
    g->bias_sm = 0;
    g->bias_sn = g->N != 1 ? 1 : 0;
  } else if (C) {
    if ((C->dtype != KILN_DTYPE_F32 && (!rules->f16 || C->dtype != KILN_DTYPE_F16)) || C->rank > 2) return false;
    /* Right-aligned broadcast of C against [M, N]. */
    int64_t c0 = C->rank == 2 ? C->shape[0] : 1, c1 = C->rank >= 1 ? C->shape[C->rank - 1] : 1;
    if ((c0 != 1 && c0 != g->M) || (c1 != 1 && c1 != g->N)) return false;
    g->has_bias = beta != 0.0f;
    g->bias_sm = c0 == g->M && g->M != 1 ? c1 : 0;
    g->bias_sn = c1 == g->N && g->N != 1 ? 1 : 0;
  }
  bool f16 = false;
  for (int32_t j = 0; j < g->n_params; ++j) f16 = f16 || (g->f16[j] && g->roles[j] != '-');
  if (f16 && rules->f16_min_work > 0 && g->batch * g->M * g->N * g->K <= rules->f16_min_work) return false;
  return true;
}

bool kiln_template_gemm_candidate(const kiln_plan_t* plan, int32_t k) {
  static const kiln_template_gemm_rules_t any = {
      .f16 = true, .batched = true, .bias = true, .scaled = true, .gelu = true, .epilogue = true};
  kiln_template_gemm_t g;
  /* not in a range program's plans (kiln_plan_build_plain: lowered at
   * several sizes of the dim, which must fuse alike, so no answer may
   * depend on the size; their GEMMs fuse as they always did); below 2^20
   * multiply-adds the kernels fusion would add cost more than the
   * template saves (gpt2's attention, 4 x 32 x 32 x 32: its Transposes
   * and Div as kernels of their own made the model 3% slower on PoCL; the
   * encoder's, 4 x 128 x 128 x 64, ran 3x faster as templates) */
  if (plan->plain_loops) return false;
  return kiln_template_gemm_match(plan, k, &any, &g) && g.batch * g.M * g.N * g.K >= ((int64_t)1 << 20);
}
