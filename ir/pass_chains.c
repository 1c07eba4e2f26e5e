/* "fold-reshape-chains": Reshape/Flatten/Squeeze/Unsqueeze chains become
 * one Reshape; Transpose chains one Transpose (or nothing); a Transpose that
 * moves only axes of size 1 a Reshape. */
#include <string.h>

#include "ir/pass_util.h"

static bool reshape_like(const kiln_node_t* n) {
  return (pu_op(n, "Reshape") || pu_op(n, "Flatten") || pu_op(n, "Squeeze") ||
          pu_op(n, "Unsqueeze")) &&
         n->n_outputs == 1 && n->outputs[0] >= 0;
}

static bool same_shape(const kiln_shape_t* a, const kiln_shape_t* b) {
  if (a->rank < 0 || a->rank != b->rank) return false;
  for (int32_t i = 0; i < a->rank; ++i)
    if (a->dims[i] == KILN_DIM_UNKNOWN || a->dims[i] != b->dims[i]) return false;
  return true;
}

/* Reshape target for |s|: known dims as they are, one unknown/symbolic dim
 * as -1. False when that cannot express |s| (two non-static dims, a zero). */
static bool target_of(const kiln_shape_t* s, int64_t* dims) {
  if (s->rank < 0) return false;
  int unknown = 0;
  for (int32_t i = 0; i < s->rank; ++i) {
    if (s->dims[i] == 0) return false; /* 0 means "copy" to Reshape */
    if (s->dims[i] < 0) {
      ++unknown;
      dims[i] = -1;
    } else {
      dims[i] = s->dims[i];
    }
  }
  return unknown <= 1;
}

static void perm_of(const kiln_node_t* n, int32_t rank, int64_t* p) {
  const kiln_attr_t* a = kiln_node_attr(n, "perm");
  for (int32_t i = 0; i < rank; ++i)
    p[i] = a && a->type == KILN_ATTR_INTS && a->count == rank ? a->ints[i] : rank - 1 - i;
}

/* Node |bi| becomes Reshape(x) -> y (its output |y| as it is, the target
 * from y's shape); *done stays false where target_of cannot express it. */
static kiln_status_t to_reshape(pu_ctx_t* c, int32_t bi, int32_t x, int32_t y, bool* done) {
  kiln_graph_t* g = c->g;
  int64_t dims[KILN_MAX_RANK];
  if (!target_of(&g->tensors[y].shape, dims)) return NULL;
  int32_t shape_t;
  KILN_RETURN_IF_ERROR(pu_add_i64(c, g->tensors[y].name, dims, g->tensors[y].shape.rank, &shape_t));
  const char* name = g->nodes[bi].name;
  pu_detach(c, y);
  c->dead[bi] = true;
  KILN_RETURN_IF_ERROR(pu_add_node(c, "Reshape", name, 2, (int32_t[]){x, shape_t}, y, 0, NULL, NULL));
  *done = true;
  return NULL;
}

static kiln_status_t fold_reshape(pu_ctx_t* c, int32_t bi, bool* done) {
  kiln_graph_t* g = c->g;
  *done = false;
  const kiln_node_t* b = &g->nodes[bi];
  int32_t ai = pu_producer(c, b->inputs[0]);
  if (ai < 0 || !reshape_like(&g->nodes[ai])) return NULL;
  int32_t x = g->nodes[ai].inputs[0], y = b->outputs[0];
  if (x < 0) return NULL;
  if (same_shape(&g->tensors[x].shape, &g->tensors[y].shape)) {
    *done = pu_forward(c, bi, y, x);
    return NULL;
  }
  return to_reshape(c, bi, x, y, done);
}

static kiln_status_t fold_transpose(pu_ctx_t* c, int32_t bi, bool* done) {
  kiln_graph_t* g = c->g;
  *done = false;
  const kiln_node_t* b = &g->nodes[bi];
  int32_t ai = pu_producer(c, b->inputs[0]);
  if (ai < 0 || !pu_op(&g->nodes[ai], "Transpose") || b->n_outputs != 1) return NULL;
  int32_t x = g->nodes[ai].inputs[0], y = b->outputs[0];
  int32_t rank = g->tensors[x].shape.rank;
  if (rank < 0 || rank > KILN_MAX_RANK || y < 0) return NULL;
  int64_t p1[KILN_MAX_RANK], p2[KILN_MAX_RANK], p[KILN_MAX_RANK];
  perm_of(&g->nodes[ai], rank, p1);
  perm_of(b, rank, p2);
  bool ident = true;
  for (int32_t j = 0; j < rank; ++j) {
    if (p2[j] < 0 || p2[j] >= rank) return NULL;
    p[j] = p1[p2[j]]; /* out[j] = mid[p2[j]] = x[p1[p2[j]]] */
    ident &= p[j] == j;
  }
  if (ident) {
    *done = pu_forward(c, bi, y, x);
    return NULL;
  }
  kiln_attr_t perm = {.name = "perm", .type = KILN_ATTR_INTS, .count = rank, .ints = p};
  const char* name = g->nodes[bi].name;
  pu_detach(c, y);
  c->dead[bi] = true;
  KILN_RETURN_IF_ERROR(pu_add_node(c, "Transpose", name, 1, &x, y, 1, &perm, NULL));
  *done = true;
  return NULL;
}

/* A Transpose whose axes of other sizes than 1 keep their order moves
 * nothing in memory: it is a Reshape (an alias, where the Transpose was a
 * copy or a producer inlined into the next kernel, which then no template
 * matched: torch's MultiheadAttention turns [1, S, E] into [S, 1, E] before
 * its input projection). Dims not known to be 1 keep their order. */
static kiln_status_t transpose_as_reshape(pu_ctx_t* c, int32_t bi, bool* done) {
  kiln_graph_t* g = c->g;
  *done = false;
  const kiln_node_t* b = &g->nodes[bi];
  if (b->n_inputs < 1 || b->n_outputs != 1) return NULL;
  int32_t x = b->inputs[0], y = b->outputs[0];
  if (x < 0 || y < 0) return NULL;
  const int32_t rank = g->tensors[x].shape.rank;
  if (rank < 2 || rank > KILN_MAX_RANK || g->tensors[y].shape.rank != rank) return NULL;
  int64_t p[KILN_MAX_RANK];
  perm_of(b, rank, p);
  int64_t last = -1;
  bool moved = false;
  for (int32_t j = 0; j < rank; ++j) {
    if (p[j] < 0 || p[j] >= rank) return NULL;
    moved |= p[j] != j;
    if (g->tensors[x].shape.dims[p[j]] == 1) continue;
    if (p[j] < last) return NULL;
    last = p[j];
  }
  return moved ? to_reshape(c, bi, x, y, done) : NULL;
}

kiln_status_t kiln_pass_fold_chains(kiln_graph_t* g, kiln_pass_stats_t* st) {
  /* Each round shortens every chain by one link; new nodes are visited in
   * the next round, after re-preparing puts them in order. */
  for (int round = 0; round < 64; ++round) {
    pu_ctx_t c;
    KILN_RETURN_IF_ERROR(pu_begin(&c, g));
    kiln_status_t s = NULL;
    int32_t n0 = g->n_nodes, changed = 0;
    for (int32_t i = 0; i < n0 && !s; ++i) {
      if (c.dead[i]) continue;
      const kiln_node_t* n = &g->nodes[i];
      bool done = false;
      if (reshape_like(n) && n->inputs[0] >= 0) s = fold_reshape(&c, i, &done);
      else if (pu_op(n, "Transpose")) {
        s = fold_transpose(&c, i, &done);
        if (!s && !done) s = transpose_as_reshape(&c, i, &done);
      }
      if (done) ++changed;
    }
    /* The first link of a folded chain is dead now unless used elsewhere. */
    if (!s && changed) {
      pu_count_uses(&c);
      for (int32_t i = g->n_nodes - 1; i >= 0; --i) {
        const kiln_node_t* n = &g->nodes[i];
        if (c.dead[i] || !(reshape_like(n) || pu_op(n, "Transpose")) || n->n_outputs != 1)
          continue;
        int32_t t = n->outputs[0];
        if (t >= 0 && c.uses[t] == 0 && !pu_is_output(g, t)) {
          c.dead[i] = true;
          for (int32_t j = 0; j < n->n_inputs; ++j)
            if (n->inputs[j] >= 0) c.uses[n->inputs[j]]--;
        }
      }
    }
    st->rewrites += changed;
    KILN_RETURN_IF_ERROR(pu_end(&c, s));
    if (!changed) break;
  }
  return NULL;
}
