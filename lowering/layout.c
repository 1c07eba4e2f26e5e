/* The memory-layout pass (see layout.h): which tensors are NCHWc, which
 * nodes run on blocked ports, and how many reorders that leaves. */
#include "lowering/layout.h"

#include <stdlib.h>
#include <string.h>

#include "ir/op.h"
#include "lowering/sparse_block.h"

/* Element-wise ops computed the same on any layout (the value of each
 * element depends only on the same element of each input). */
bool kiln_layout_ew_ok(const char* op) {
  static const char* const ok[] = {"Relu", "Clip", "LeakyRelu", "Add", "Sub", "Mul", "Sigmoid",
                                   "HardSigmoid", "HardSwish", "Tanh", "Neg", "Abs", "Elu", "Selu",
                                   "Softplus", "Mish", "Gelu"};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; ++i)
    if (!strcmp(op, ok[i])) return true;
  return false;
}

const char* kiln_layout_name(int32_t block, char* buf, size_t n) {
  if (block <= 0) snprintf(buf, n, "nchw");
  else snprintf(buf, n, "nchw%dc", (int)block);
  return buf;
}

/* A static 4-D f32 tensor. */
static bool f32_4d(const kiln_graph_t* g, int32_t t) {
  if (t < 0) return false;
  const kiln_tensor_t* tt = &g->tensors[t];
  return tt->dtype == KILN_DTYPE_F32 && tt->shape.rank == 4 && kiln_shape_is_static(&tt->shape) &&
         !(tt->flags & KILN_TENSOR_CONST);
}

static bool is_const(const kiln_graph_t* g, int32_t t) {
  return t >= 0 && (g->tensors[t].flags & KILN_TENSOR_CONST) && g->tensors[t].value.data;
}

static bool same_dims(const kiln_graph_t* g, int32_t a, int32_t b) {
  return kiln_shape_equal(&g->tensors[a].shape, &g->tensors[b].shape);
}

/* Weights with at least KILN_SPARSE_AUTO_MIN_ZERO of their values zero
 * (a pruned layer: a zero block needs every value zero) are left to the
 * block-sparse NCHW kernel (lowering/sparse_block.h), which the blocked
 * conv does not have. */
static bool maybe_sparse(const kiln_tensor_t* w) {
  const int64_t n = kiln_array_numel(&w->value);
  const float* v = w->value.data;
  int64_t zeros = 0;
  for (int64_t i = 0; i < n; ++i) zeros += v[i] == 0.0f;
  return n > 0 && (double)zeros >= KILN_SPARSE_AUTO_MIN_ZERO * (double)n;
}

/* A run-time [1 or N, C, 1, 1] input of an element-wise node whose output
 * is [N, C, H, W] with H * W > 1 (squeeze-excite's channel scale): blocked
 * as [.., CB, 1, 1, c] it broadcasts against the blocked output lane by
 * lane, so the node runs blocked instead of reordering the big operand to
 * NCHW and back. */
static bool chan_vector(const kiln_graph_t* g, int32_t t, int32_t y) {
  if (!f32_4d(g, t) || !f32_4d(g, y)) return false;
  const int64_t *d = g->tensors[t].shape.dims, *o = g->tensors[y].shape.dims;
  return (d[0] == 1 || d[0] == o[0]) && d[1] == o[1] && d[2] == 1 && d[3] == 1 && o[2] * o[3] > 1;
}

static kiln_layout_role_t role_of(const kiln_graph_t* g, const kiln_node_t* n, int32_t block) {
  const int32_t q8 = kiln_layout_q8_role(g, n); /* the int8 ops: layout_q8.c */
  if (q8 >= 0) return (kiln_layout_role_t)q8;
  if (n->domain && n->domain[0]) return KILN_LAYOUT_PLAIN_ONLY;
  if (n->n_outputs < 1 || !f32_4d(g, n->outputs[0])) return KILN_LAYOUT_PLAIN_ONLY;
  for (int32_t j = 1; j < n->n_outputs; ++j)
    if (n->outputs[j] >= 0) return KILN_LAYOUT_PLAIN_ONLY;
  if (!strcmp(n->op_type, "Conv")) {
    if (n->n_inputs < 2 || !f32_4d(g, n->inputs[0]) || !is_const(g, n->inputs[1])) return KILN_LAYOUT_PLAIN_ONLY;
    if (n->n_inputs > 2 && n->inputs[2] >= 0 && !is_const(g, n->inputs[2])) return KILN_LAYOUT_PLAIN_ONLY;
    const kiln_tensor_t* w = &g->tensors[n->inputs[1]];
    if (w->dtype != KILN_DTYPE_F32 || w->shape.rank != 4 || maybe_sparse(w)) return KILN_LAYOUT_PLAIN_ONLY;
    int64_t G = 1;
    kiln_status_t s = kiln_attr_int(n, "group", 1, &G);
    if (s) {
      kiln_status_free(s);
      return KILN_LAYOUT_PLAIN_ONLY;
    }
    const int64_t C = g->tensors[n->inputs[0]].shape.dims[1], M = w->shape.dims[0];
    if (G == 1) return KILN_LAYOUT_CONV;
    if (G == C && M == C && w->shape.dims[1] == 1 && w->shape.dims[2] * w->shape.dims[3] <= 49)
      return KILN_LAYOUT_DEPTHWISE;
    return KILN_LAYOUT_PLAIN_ONLY;
  }
  if (!strcmp(n->op_type, "MaxPool") || !strcmp(n->op_type, "AveragePool")) {
    return n->n_inputs == 1 && f32_4d(g, n->inputs[0]) ? KILN_LAYOUT_POOL : KILN_LAYOUT_PLAIN_ONLY;
  }
  if (!strcmp(n->op_type, "Concat")) {
    /* axis 1 as written (the lowering normalises a negative axis against
     * the blocked buffer's rank); every offset a whole number of blocks */
    int64_t axis = 0;
    kiln_status_t s = kiln_attr_int(n, "axis", 0, &axis);
    if (s) kiln_status_free(s);
    if (s || axis != 1 || n->n_inputs < 1) return KILN_LAYOUT_PLAIN_ONLY;
    for (int32_t j = 0; j < n->n_inputs; ++j) {
      if (!f32_4d(g, n->inputs[j])) return KILN_LAYOUT_PLAIN_ONLY;
      if (j + 1 < n->n_inputs && g->tensors[n->inputs[j]].shape.dims[1] % block) return KILN_LAYOUT_PLAIN_ONLY;
    }
    return KILN_LAYOUT_CONCAT;
  }
  if (!strcmp(n->op_type, "GlobalAveragePool")) {
    return n->n_inputs == 1 && f32_4d(g, n->inputs[0]) ? KILN_LAYOUT_GAP : KILN_LAYOUT_PLAIN_ONLY;
  }
  if (!strcmp(n->op_type, "BatchNormalization")) {
    /* inference with constant statistics: y = x * a[c] + b[c], per channel
     * like an element-wise op with channel vectors (DenseNet's norm after
     * each Concat, which no conv absorbs) */
    int64_t training = 0;
    kiln_status_t s = kiln_attr_int(n, "training_mode", 0, &training);
    if (s) kiln_status_free(s);
    if (s || training || n->n_inputs != 5 || !f32_4d(g, n->inputs[0]) || !same_dims(g, n->inputs[0], n->outputs[0]))
      return KILN_LAYOUT_PLAIN_ONLY;
    const int64_t C = g->tensors[n->inputs[0]].shape.dims[1];
    for (int32_t j = 1; j < 5; ++j)
      if (!is_const(g, n->inputs[j]) || g->tensors[n->inputs[j]].dtype != KILN_DTYPE_F32 ||
          kiln_shape_count(&g->tensors[n->inputs[j]].shape) != C)
        return KILN_LAYOUT_PLAIN_ONLY;
    return KILN_LAYOUT_EW;
  }
  if (kiln_layout_ew_ok(n->op_type)) {
    bool full = false;
    for (int32_t j = 0; j < n->n_inputs; ++j) {
      int32_t t = n->inputs[j];
      if (t < 0) continue;
      const kiln_tensor_t* tt = &g->tensors[t];
      if (tt->dtype != KILN_DTYPE_F32 || !kiln_shape_is_static(&tt->shape)) return KILN_LAYOUT_PLAIN_ONLY;
      if (f32_4d(g, t) && same_dims(g, t, n->outputs[0])) full = true;
      else if (!chan_vector(g, t, n->outputs[0]) && kiln_shape_count(&tt->shape) != 1) return KILN_LAYOUT_PLAIN_ONLY;
    }
    return full ? KILN_LAYOUT_EW : KILN_LAYOUT_PLAIN_ONLY;
  }
  return KILN_LAYOUT_PLAIN_ONLY;
}

/* A full-shape data input of an element-wise node (not a scalar). */
static bool ew_full(const kiln_graph_t* g, const kiln_node_t* n, int32_t j) {
  if (kiln_layout_q8_full(g, n, j)) return true;
  return n->inputs[j] >= 0 && f32_4d(g, n->inputs[j]) && same_dims(g, n->inputs[j], n->outputs[0]);
}

/* An input a blocked element-wise node reads blocked: full-shape or a
 * channel vector (chan_vector). */
static bool ew_blocked_in(const kiln_graph_t* g, const kiln_node_t* n, int32_t j) {
  return ew_full(g, n, j) || (n->inputs[j] >= 0 && chan_vector(g, n->inputs[j], n->outputs[0]));
}

int32_t kiln_layout_in_port(const kiln_layout_t* l, const kiln_graph_t* g, int32_t ni, int32_t j) {
  if (!l || l->block <= 0 || !l->node_blocked[ni]) return 0;
  const kiln_node_t* n = &g->nodes[ni];
  if (j >= n->n_inputs || n->inputs[j] < 0) return 0;
  switch ((kiln_layout_role_t)l->role[ni]) {
    case KILN_LAYOUT_CONV: return j == 0 ? l->tensor_block[n->inputs[0]] : 0; /* reads either */
    case KILN_LAYOUT_DEPTHWISE:
    case KILN_LAYOUT_POOL:
    case KILN_LAYOUT_GAP: return j == 0 ? l->block : 0;
    case KILN_LAYOUT_EW: return ew_blocked_in(g, n, j) ? l->block : 0;
    case KILN_LAYOUT_CONCAT: return l->block;
    default: return 0;
  }
}

int32_t kiln_layout_out_port(const kiln_layout_t* l, const kiln_graph_t* g, int32_t ni, int32_t j) {
  (void)g;
  if (!l || l->block <= 0 || !l->node_blocked[ni] || j != 0) return 0;
  return l->role[ni] == KILN_LAYOUT_GAP ? 0 : l->block;
}

void kiln_layout_free(kiln_layout_t* l) {
  if (!l) return;
  free(l->tensor_block);
  free(l->node_blocked);
  free(l->role);
  memset(l, 0, sizeof *l);
}

/* Counts the reorders the ports need: distinct (tensor, layout) pairs. */
static int32_t count_reorders(const kiln_layout_t* l, const kiln_graph_t* g, uint8_t* seen) {
  memset(seen, 0, (size_t)g->n_tensors);
  int32_t n = 0;
  for (int32_t ni = 0; ni < g->n_nodes; ++ni) {
    const kiln_node_t* nd = &g->nodes[ni];
    for (int32_t j = 0; j < nd->n_inputs; ++j) {
      int32_t t = nd->inputs[j];
      if (t < 0 || kiln_layout_in_port(l, g, ni, j) == l->tensor_block[t] || seen[t]) continue;
      seen[t] = 1;
      ++n;
    }
    for (int32_t j = 0; j < nd->n_outputs; ++j) {
      int32_t t = nd->outputs[j];
      if (t >= 0 && kiln_layout_out_port(l, g, ni, j) != l->tensor_block[t]) ++n;
    }
  }
  return n;
}

kiln_status_t kiln_layout_choose(const kiln_graph_t* g, int32_t block, kiln_layout_t* out) {
  memset(out, 0, sizeof *out);
  kiln_layout_t l = {.block = block, .n_tensors = g->n_tensors, .n_nodes = g->n_nodes};
  l.tensor_block = calloc((size_t)g->n_tensors + 1, sizeof(int32_t));
  l.node_blocked = calloc((size_t)g->n_nodes + 1, 1);
  l.role = calloc((size_t)g->n_nodes + 1, 1);
  /* per tensor: some consumer can run blocked */
  uint8_t* blk_use = calloc((size_t)g->n_tensors + 1, 1);
  if (!l.tensor_block || !l.node_blocked || !l.role || !blk_use) {
    free(blk_use);
    kiln_layout_free(&l);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "layout: out of memory for %d tensors", (int)g->n_tensors);
  }
  if (block > 0) {
    for (int32_t ni = 0; ni < g->n_nodes; ++ni) {
      const kiln_node_t* n = &g->nodes[ni];
      l.role[ni] = (uint8_t)role_of(g, n, block);
      for (int32_t j = 0; j < n->n_inputs && l.role[ni] != KILN_LAYOUT_PLAIN_ONLY; ++j)
        if (n->inputs[j] >= 0) blk_use[n->inputs[j]] = 1;
    }
    /* The naive form: every capable node wrapped in reorders. */
    for (int32_t ni = 0; ni < g->n_nodes; ++ni) {
      const kiln_node_t* n = &g->nodes[ni];
      if (l.role[ni] == KILN_LAYOUT_PLAIN_ONLY) continue;
      for (int32_t j = 0; j < n->n_inputs; ++j)
        if (n->inputs[j] >= 0 && (j == 0 || l.role[ni] == KILN_LAYOUT_CONCAT || (l.role[ni] == KILN_LAYOUT_EW && ew_blocked_in(g, n, j))))
          ++l.n_reorders_naive;
      if (l.role[ni] != KILN_LAYOUT_GAP) ++l.n_reorders_naive;
    }
    /* Cancelling the pairs, in topological order. */
    for (int32_t ni = 0; ni < g->n_nodes; ++ni) {
      const kiln_node_t* n = &g->nodes[ni];
      bool on = false;
      switch ((kiln_layout_role_t)l.role[ni]) {
        case KILN_LAYOUT_CONV:
        case KILN_LAYOUT_DEPTHWISE:
          on = l.tensor_block[n->inputs[0]] > 0 || blk_use[n->outputs[0]];
          break;
        case KILN_LAYOUT_POOL:
        case KILN_LAYOUT_GAP: on = l.tensor_block[n->inputs[0]] > 0; break;
        case KILN_LAYOUT_EW:
          for (int32_t j = 0; j < n->n_inputs; ++j)
            if (ew_full(g, n, j) && l.tensor_block[n->inputs[j]] > 0) on = true;
          break;
        case KILN_LAYOUT_CONCAT:
          for (int32_t j = 0; j < n->n_inputs; ++j)
            if (l.tensor_block[n->inputs[j]] > 0) on = true;
          break;
        default: break;
      }
      if (!on) continue;
      l.node_blocked[ni] = 1;
      ++l.n_blocked_nodes;
      int32_t y = n->outputs[0];
      /* a model output stays NCHW (the node writes it through a reorder) */
      if (l.role[ni] != KILN_LAYOUT_GAP && !(g->tensors[y].flags & KILN_TENSOR_OUTPUT)) {
        l.tensor_block[y] = block;
        ++l.n_blocked_tensors;
      }
    }
    l.n_reorders = count_reorders(&l, g, blk_use);
  }
  free(blk_use);
  *out = l;
  return NULL;
}

void kiln_layout_dump(const kiln_layout_t* l, const kiln_graph_t* g, FILE* out) {
  char nb[32];
  fprintf(out, "layout: %s, %d of %d nodes blocked, %d tensors blocked, %d reorders (%d in the naive form)\n",
          kiln_layout_name(l->block, nb, sizeof nb), l->n_blocked_nodes, g->n_nodes, l->n_blocked_tensors,
          l->n_reorders, l->n_reorders_naive);
  for (int32_t t = 0; t < g->n_tensors; ++t)
    if (l->tensor_block[t] > 0)
      fprintf(out, "  tensor %-32s %s\n", g->tensors[t].name, kiln_layout_name(l->tensor_block[t], nb, sizeof nb));
}
