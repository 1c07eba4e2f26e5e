/* Fused element-wise epilogues of the template kernels (see template.h):
 * the graph nodes that epilogue fusion (lowering/fuse.h) folded into a
 * Conv/Gemm kernel, read back as a chain from the anchor's output into
 * data (kiln_template_epi_t) that each target prints in its store.
 *
 * Only what is known exactly is accepted: element-wise ops whose semantics
 * are printed below, f32 operands that are plan buffers and broadcast along
 * the output in the [n][m][p] pattern the templates index. Anything else
 * makes the caller keep the printed kernel, which is always correct. */
#include <math.h>
#include <string.h>

#include "ir/op.h"
#include "ir/pass_util.h"
#include "lowering/template.h"

static bool dense_float(const tir_buffer_t* b, bool f16_ok) {
  if (!(b->dtype == KILN_DTYPE_F32 || (f16_ok && b->dtype == KILN_DTYPE_F16))) return false;
  int64_t st = 1;
  for (int32_t i = b->rank - 1; i >= 0; --i) {
    if (b->strides[i] != st && b->shape[i] != 1) return false;
    st *= b->shape[i];
  }
  return true;
}

/* Broadcast strides of tensor |t| against the output [n][m][p...]. */
static bool operand_of(const kiln_plan_t* plan, int32_t t, const int64_t* shape, int32_t rank,
                       kiln_template_epi_t* e, int32_t* out_idx) {
  if (t < 0 || !plan->tensor_buffer) return false;
  const int32_t pb = plan->tensor_buffer[t];
  if (pb < 0) return false;
  for (int32_t i = 0; i < e->n_operands; ++i)
    if (e->operands[i].buffer == pb) {
      *out_idx = i;
      return true;
    }
  if (e->n_operands >= KILN_TEMPLATE_EPI_MAX) return false;
  const tir_buffer_t* b = plan->buffers[pb].buf;
  if (!b || !dense_float(b, e->f16_ok) || b->rank > rank) return false;
  int64_t st[KILN_MAX_RANK], dst[KILN_MAX_RANK];
  int64_t run = 1;
  for (int32_t i = b->rank - 1; i >= 0; --i) dst[i] = run, run *= b->shape[i];
  for (int32_t i = 0; i < rank; ++i) {
    const int32_t j = i - (rank - b->rank);
    if (j < 0 || shape[i] == 1) st[i] = 0;
    else if (b->shape[j] == shape[i]) st[i] = dst[j];
    else if (b->shape[j] == 1) st[i] = 0;
    else return false;
  }
  kiln_template_epi_operand_t* o = &e->operands[e->n_operands];
  const int32_t p0 = rank >= 3 ? 2 : 1;
  o->buffer = pb;
  o->sn = rank >= 3 ? st[0] : 0;
  o->sm = rank >= 2 ? st[p0 - 1] : 0;
  bool all0 = true;
  for (int32_t i = p0; i < rank; ++i) all0 = all0 && st[i] == 0;
  if (all0) {
    o->sp = 0;
  } else {
    int64_t want = 1;
    for (int32_t i = rank - 1; i >= p0; --i) {
      if (shape[i] != 1 && st[i] != want) return false;
      want *= shape[i];
    }
    o->sp = 1;
  }
  *out_idx = e->n_operands++;
  return true;
}

/* The ops kiln_template_epi_parse prints (a SiLU is a Sigmoid and a Mul);
 * kiln_template_epilogue_fits reads the same list. */
static bool epi_op_printed(const kiln_node_t* n) {
  static const char* const ops[] = {"Relu", "Sigmoid", "LeakyRelu", "Clip", "Add", "Sub", "Mul", "Div"};
  if (!n->op_type || (n->domain && n->domain[0])) return false;
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; ++i)
    if (!strcmp(n->op_type, ops[i])) return true;
  return false;
}

/* Where |n| (picked at chain value |cur|) is half of a SiLU, the fused-list
 * index of the other half (unused): a Sigmoid(cur) and a Mul of cur by that
 * Sigmoid's output; else -1. */
static int32_t silu_partner(const kiln_graph_t* g, const kiln_plan_kernel_t* kk, const bool* used,
                            const kiln_node_t* n, int32_t cur) {
  const bool sig = !strcmp(n->op_type, "Sigmoid"), mul = !strcmp(n->op_type, "Mul");
  if (!(sig && n->n_inputs == 1 && n->inputs[0] == cur) && !(mul && n->n_inputs == 2)) return -1;
  for (int32_t i = 0; i < kk->n_fused_nodes; ++i) {
    const int32_t ni = kk->fused_nodes[i];
    if (used[i] || ni < 0 || ni >= g->n_nodes) continue;
    const kiln_node_t* m = &g->nodes[ni];
    if (m == n || (m->domain && m->domain[0]) || m->n_outputs < 1 || m->outputs[0] < 0) continue;
    const kiln_node_t* s = sig ? n : m;
    const kiln_node_t* x = sig ? m : n;
    if (strcmp(s->op_type, "Sigmoid") || strcmp(x->op_type, "Mul") || s->n_inputs != 1 || s->inputs[0] != cur ||
        x->n_inputs != 2)
      continue;
    const int32_t so = s->outputs[0];
    if ((x->inputs[0] == cur && x->inputs[1] == so) || (x->inputs[1] == cur && x->inputs[0] == so)) return i;
  }
  return -1;
}

bool kiln_template_epi_parse(const kiln_plan_t* plan, int32_t k, int32_t start, const int64_t* shape,
                        int32_t rank, bool f16_ok, kiln_template_epi_t* e) {
  memset(e, 0, sizeof *e);
  e->f16_ok = f16_ok;
  e->out_tensor = start;
  const kiln_plan_kernel_t* kk = &plan->kernels[k];
  const kiln_graph_t* g = plan->graph;
  const int32_t nf = kk->n_fused_nodes;
  if (nf > KILN_TEMPLATE_EPI_MAX || rank < 2 || rank > KILN_MAX_RANK) return false;
  bool used[KILN_TEMPLATE_EPI_MAX] = {false};
  int32_t cur = start;
  for (int32_t n_used = 0; n_used < nf; ++n_used) {
    int32_t pick = -1;
    for (int32_t i = 0; i < nf && pick < 0; ++i) {
      if (used[i]) continue;
      const int32_t ni = kk->fused_nodes[i];
      if (ni < 0 || ni >= g->n_nodes) return false;
      const kiln_node_t* n = &g->nodes[ni];
      for (int32_t j = 0; j < n->n_inputs; ++j)
        if (n->inputs[j] == cur) pick = i;
    }
    if (pick < 0) return false;
    used[pick] = true;
    const kiln_node_t* n = &g->nodes[kk->fused_nodes[pick]];
    if (!epi_op_printed(n) || n->n_outputs < 1 || n->outputs[0] < 0) return false;
    if (g->tensors[n->outputs[0]].dtype != KILN_DTYPE_F32) return false;
    kiln_template_epi_op_t* op = &e->ops[e->n_ops++];
    op->a = op->b = -1;
    const char* t = n->op_type;
    kiln_status_t s = NULL;
    /* SiLU (YOLO's, EfficientNet's): Sigmoid(v) and Mul(v, that), in
     * either order in the list; the Mul's output is the chain's */
    const int32_t other = silu_partner(g, kk, used, n, cur);
    if (other >= 0) {
      used[other] = true;
      ++n_used;
      const kiln_node_t* m = &g->nodes[kk->fused_nodes[other]];
      if (!strcmp(t, "Sigmoid")) n = m; /* the Mul: its output goes on */
      if (g->tensors[n->outputs[0]].dtype != KILN_DTYPE_F32) return false;
      op->op = 'w';
    } else if (!strcmp(t, "Relu") || !strcmp(t, "Sigmoid")) {
      if (n->n_inputs != 1) return false;
      op->op = t[0] == 'R' ? 'r' : 's';
    } else if (!strcmp(t, "LeakyRelu")) {
      if (n->n_inputs != 1) return false;
      op->op = 'l';
      s = kiln_attr_float(n, "alpha", 0.01f, &op->alpha);
    } else if (!strcmp(t, "Clip")) {
      if (n->n_inputs < 1 || n->inputs[0] != cur) return false;
      op->op = 'c';
      s = kiln_attr_float(n, "min", -INFINITY, &op->lo);
      if (!s) s = kiln_attr_float(n, "max", INFINITY, &op->hi);
      op->has_lo = op->has_hi = true;
      /* a bound that is a constant scalar (Relu6's 0 and 6 as
       * initializers) keeps its operand (the kernel's parameter) and has
       * its value too (has_lo / has_hi with a / b >= 0): the Vulkan
       * printer prints the value, where an operand is a buffer load per
       * output that lavapipe runs as a loop over its 8 lanes */
      double cv = 0;
      if (!s && n->n_inputs > 1 && n->inputs[1] >= 0) {
        if (!operand_of(plan, n->inputs[1], shape, rank, e, &op->a)) return false;
        op->has_lo = pu_const_scalar(g, n->inputs[1], &cv) && !isnan(cv);
        op->lo = op->has_lo ? (float)cv : op->lo;
      }
      if (!s && n->n_inputs > 2 && n->inputs[2] >= 0) {
        if (!operand_of(plan, n->inputs[2], shape, rank, e, &op->b)) return false;
        op->has_hi = pu_const_scalar(g, n->inputs[2], &cv) && !isnan(cv);
        op->hi = op->has_hi ? (float)cv : op->hi;
      }
      /* scalar bounds only */
      for (int32_t q = 0; q < 2; ++q) {
        const int32_t oi = q ? op->b : op->a;
        if (oi >= 0 && (e->operands[oi].sn || e->operands[oi].sm || e->operands[oi].sp)) return false;
      }
    } else if (!strcmp(t, "Add") || !strcmp(t, "Sub") || !strcmp(t, "Mul") || !strcmp(t, "Div")) {
      if (n->n_inputs != 2 || n->inputs[0] == n->inputs[1]) return false;
      op->op = t[0] == 'A' ? '+' : t[0] == 'S' ? '-' : t[0] == 'M' ? '*' : '/';
      op->swap = n->inputs[1] == cur;
      if (!operand_of(plan, n->inputs[op->swap ? 0 : 1], shape, rank, e, &op->a)) return false;
      /* the chain value keeps the output's shape: an operand may not widen it */
    } else {
      return false;
    }
    if (s) {
      kiln_status_free(s);
      return false;
    }
    /* The node's output must have the anchor's shape (no broadcast of the
     * chain value itself). */
    const kiln_tensor_t* ot = &g->tensors[n->outputs[0]];
    if (ot->shape.rank != rank) return false;
    for (int32_t i = 0; i < rank; ++i)
      if (ot->shape.dims[i] != shape[i]) return false;
    cur = n->outputs[0];
  }
  e->out_tensor = cur;
  return true;
}

bool kiln_template_epilogue_fits(const kiln_plan_t* plan, int32_t p, int32_t c) {
  const kiln_graph_t* g = plan->graph;
  const kiln_plan_kernel_t* kp = &plan->kernels[p];
  const kiln_plan_kernel_t* kc = &plan->kernels[c];
  if (!g || kp->node < 0 || kp->node >= g->n_nodes || kc->node < 0 || kc->node >= g->n_nodes) return true;
  /* a range program's plans: no conv templates there, and their GEMMs
   * fuse as they always did (kiln_template_gemm_candidate) */
  if (plan->plain_loops) return true;
  const kiln_node_t* a = &g->nodes[kp->node];
  if (!a->op_type || (a->domain && a->domain[0])) return true;
  const bool gemm = !strcmp(a->op_type, "MatMul") || !strcmp(a->op_type, "Gemm");
  bool conv = !strcmp(a->op_type, "Conv");
  if (conv) {
    int64_t group = 1;
    kiln_status_t s = kiln_attr_int(a, "group", 1, &group);
    conv = !s && group == 1;
    kiln_status_free(s);
  }
  if (!gemm && !conv) return true;
  /* the chain: the producer's fused nodes, then the consumer's anchor and
   * its fused nodes (epilogues in the order they run; a producer inlined
   * into the consumer, listed after its anchor, is no op of either chain,
   * so it refuses wherever it stands) */
  const int32_t n = kp->n_fused_nodes + 1 + kc->n_fused_nodes;
  bool fits = !conv || n <= KILN_TEMPLATE_EPI_MAX;
  int adds = 0;
  bool act = false;
  for (int32_t i = 0; i < n && fits; ++i) {
    const int32_t ni = i < kp->n_fused_nodes ? kp->fused_nodes[i]
                       : i == kp->n_fused_nodes ? kc->node
                                                : kc->fused_nodes[i - kp->n_fused_nodes - 1];
    if (ni < 0 || ni >= g->n_nodes) {
      fits = false;
      break;
    }
    const kiln_node_t* e = &g->nodes[ni];
    if (conv) {
      fits = epi_op_printed(e);
      continue;
    }
    const int k = kiln_template_gemm_chain_op(e);
    fits = k != 0 && !act && !(k == 1 && ++adds > 2);
    act = k == 2;
  }
  /* a GEMM no GPU target's template takes as it is keeps its fusions (the
   * matcher runs only where the ops alone do not fit) */
  return fits || (gemm && !kiln_template_gemm_candidate(plan, p));
}
