/* "cse" (common subexpressions) and "dce" (dead nodes). */
#include <stdlib.h>
#include <string.h>

#include "ir/pass_util.h"

/* ---- cse ------------------------------------------------------------- */

/* Small constants are compared by value, so two Constant scalars 0.5 make
 * their consumers equal. Larger ones only by identity (weights are unique). */
#define CSE_CONST_MAX_BYTES 256

static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 1099511628211ull; }

static uint64_t hash_str(uint64_t h, const char* s) {
  for (; *s; ++s) h = mix(h, (unsigned char)*s);
  return h;
}

static bool attr_equal(const kiln_attr_t* a, const kiln_attr_t* b) {
  if (strcmp(a->name, b->name) != 0 || a->type != b->type) return false;
  switch (a->type) {
    case KILN_ATTR_FLOAT: return memcmp(&a->f, &b->f, sizeof(float)) == 0;
    case KILN_ATTR_INT: return a->i == b->i;
    case KILN_ATTR_STRING: return a->s_len == b->s_len && memcmp(a->s, b->s, a->s_len) == 0;
    case KILN_ATTR_INTS:
      return a->count == b->count &&
             (!a->count || memcmp(a->ints, b->ints, sizeof(int64_t) * (size_t)a->count) == 0);
    case KILN_ATTR_FLOATS:
      return a->count == b->count &&
             (!a->count || memcmp(a->floats, b->floats, sizeof(float) * (size_t)a->count) == 0);
    case KILN_ATTR_STRINGS:
      if (a->count != b->count) return false;
      for (int64_t i = 0; i < a->count; ++i)
        if (strcmp(a->strings[i], b->strings[i]) != 0) return false;
      return true;
    case KILN_ATTR_TENSOR:
      return a->tensor->dtype == b->tensor->dtype &&
             kiln_shape_equal(&a->tensor->shape, &b->tensor->shape) &&
             a->tensor->nbytes == b->tensor->nbytes &&
             memcmp(a->tensor->data, b->tensor->data, a->tensor->nbytes) == 0;
    default: return false; /* graphs, tensor lists: never merged */
  }
}

static bool attrs_equal(const kiln_node_t* a, const kiln_node_t* b) {
  if (a->n_attrs != b->n_attrs) return false;
  for (int32_t i = 0; i < a->n_attrs; ++i) {
    const kiln_attr_t* o = kiln_node_attr(b, a->attrs[i].name);
    if (!o || !attr_equal(&a->attrs[i], o)) return false;
  }
  return true;
}

static bool mergeable(const kiln_node_t* n) {
  /* Random ops differ on every evaluation. */
  return n->n_outputs >= 1 && strncmp(n->op_type, "Random", 6) != 0 &&
         !pu_op(n, "Multinomial") && !pu_op(n, "Bernoulli");
}

static bool nodes_equal(const kiln_node_t* a, const kiln_node_t* b) {
  if (strcmp(a->op_type, b->op_type) || strcmp(a->domain, b->domain) ||
      a->n_inputs != b->n_inputs || a->n_outputs != b->n_outputs)
    return false;
  for (int32_t j = 0; j < a->n_inputs; ++j)
    if (a->inputs[j] != b->inputs[j]) return false;
  for (int32_t j = 0; j < a->n_outputs; ++j)
    if ((a->outputs[j] < 0) != (b->outputs[j] < 0)) return false;
  return attrs_equal(a, b);
}

static uint64_t node_hash(const kiln_node_t* n) {
  uint64_t h = hash_str(1469598103934665603ull, n->op_type);
  for (int32_t j = 0; j < n->n_inputs; ++j) h = mix(h, (uint64_t)(uint32_t)n->inputs[j]);
  return mix(h, (uint64_t)n->n_attrs);
}

/* Maps |n|'s inputs through canon[], keeping the use counts right. */
static void canon_inputs(pu_ctx_t* c, const int32_t* canon, kiln_node_t* n) {
  for (int32_t j = 0; j < n->n_inputs; ++j) {
    int32_t t = n->inputs[j];
    if (t < 0 || canon[t] == t) continue;
    n->inputs[j] = canon[t];
    c->uses[t]--;
    c->uses[canon[t]]++;
  }
}

static bool small_const(const kiln_graph_t* g, int32_t t) {
  return pu_is_const(g, t) && (g->tensors[t].flags & KILN_TENSOR_INITIALIZER) &&
         g->tensors[t].value.nbytes <= CSE_CONST_MAX_BYTES;
}

kiln_status_t kiln_pass_cse(kiln_graph_t* g, kiln_pass_stats_t* st) {
  pu_ctx_t c;
  KILN_RETURN_IF_ERROR(pu_begin(&c, g));
  kiln_status_t s = NULL;
  int32_t* canon = NULL; /* tensor -> the equal tensor that replaces it */
  int32_t* table = NULL;
  int32_t* ctable = NULL; /* small constants by content */
  int32_t cap = 16;
  while (cap < g->n_nodes * 2 + 2) cap *= 2;
  if ((s = kiln_allocator_malloc(g->allocator, sizeof(int32_t) * (size_t)(g->n_tensors + 1),
                                 "cse", (void**)&canon)) ||
      (s = kiln_allocator_malloc(g->allocator, sizeof(int32_t) * (size_t)cap, "cse",
                                 (void**)&table)))
    goto done;
  /* Equal small constants, found through a hash of their bytes (a long
   * graph may carry one scalar per node: a pairwise scan is quadratic). */
  int32_t ccap = 16;
  while (ccap < g->n_tensors * 2 + 2) ccap *= 2;
  if ((s = kiln_allocator_malloc(g->allocator, sizeof(int32_t) * (size_t)ccap, "cse",
                                 (void**)&ctable)))
    goto done;
  for (int32_t k = 0; k < ccap; ++k) ctable[k] = -1;
  for (int32_t t = 0; t < g->n_tensors; ++t) {
    canon[t] = t;
    if (!small_const(g, t)) continue;
    const kiln_tensor_t* a = &g->tensors[t];
    uint64_t h = mix(1469598103934665603ull, (uint64_t)a->value.dtype);
    for (int32_t d = 0; d < a->value.shape.rank; ++d) h = mix(h, (uint64_t)a->value.shape.dims[d]);
    for (size_t b = 0; b < a->value.nbytes; ++b) h = mix(h, ((const unsigned char*)a->value.data)[b]);
    for (int32_t k = 0;; ++k) {
      int32_t slot = (int32_t)((h + (uint64_t)k) & (uint64_t)(ccap - 1));
      int32_t o = ctable[slot];
      if (o < 0) {
        ctable[slot] = t;
        break;
      }
      const kiln_tensor_t* b = &g->tensors[o];
      if (a->value.dtype == b->value.dtype && kiln_shape_equal(&a->value.shape, &b->value.shape) &&
          a->value.nbytes == b->value.nbytes &&
          memcmp(a->value.data, b->value.data, a->value.nbytes) == 0) {
        canon[t] = o;
        break;
      }
    }
  }
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    kiln_node_t* n = &g->nodes[i];
    for (int32_t j = 0; j < n->n_inputs; ++j)
      if (n->inputs[j] >= 0 && canon[n->inputs[j]] != n->inputs[j]) {
        n->inputs[j] = canon[n->inputs[j]];
      }
  }
  pu_count_uses(&c);
  for (int32_t k = 0; k < cap; ++k) table[k] = -1;
  /* Topological order: a node's readers come after it, so the outputs of a
   * merged node are forwarded lazily: canon[] maps them to the survivor's,
   * and each node's inputs are mapped when the walk reaches it (rewiring
   * every reader at once scans the whole graph per merge: quadratic). */
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    kiln_node_t* n = &g->nodes[i];
    if (!c.dead[i]) canon_inputs(&c, canon, n);
    if (!mergeable(n)) continue;
    uint64_t h = node_hash(n);
    for (int32_t k = 0;; ++k) {
      int32_t slot = (int32_t)((h + (uint64_t)k) & (uint64_t)(cap - 1));
      int32_t o = table[slot];
      if (o < 0) {
        table[slot] = i;
        break;
      }
      const kiln_node_t* m = &g->nodes[o];
      if (!nodes_equal(m, n)) continue;
      /* Forward each output; a graph output that cannot move keeps the node. */
      bool ok = true;
      for (int32_t j = 0; j < n->n_outputs && ok; ++j)
        if (n->outputs[j] >= 0 && pu_is_output(g, n->outputs[j])) ok = false;
      if (!ok && n->n_outputs == 1 && !pu_is_output(g, m->outputs[0])) {
        /* Let |m| write the graph output instead. */
        int32_t mo = m->outputs[0];
        /* pu_forward rewires by scanning: pending forwards first (rare). */
        for (int32_t k = i + 1; k < g->n_nodes; ++k)
          if (!c.dead[k]) canon_inputs(&c, canon, &g->nodes[k]);
        if (pu_forward(&c, i, n->outputs[0], mo)) ++st->rewrites;
        break;
      }
      if (!ok) break;
      for (int32_t j = 0; j < n->n_outputs; ++j)
        if (n->outputs[j] >= 0) canon[n->outputs[j]] = m->outputs[j];
      c.dead[i] = true;
      ++st->rewrites;
      break;
    }
  }
done:
  kiln_allocator_free(g->allocator, canon);
  kiln_allocator_free(g->allocator, table);
  kiln_allocator_free(g->allocator, ctable);
  return pu_end(&c, s);
}

/* ---- dce ------------------------------------------------------------- */

kiln_status_t kiln_pass_dce(kiln_graph_t* g, kiln_pass_stats_t* st) {
  pu_ctx_t c;
  KILN_RETURN_IF_ERROR(pu_begin(&c, g));
  bool* needed = NULL;
  kiln_status_t s = kiln_allocator_malloc(g->allocator, (size_t)g->n_tensors + 1, "dce",
                                          (void**)&needed);
  if (!s) {
    memset(needed, 0, (size_t)g->n_tensors + 1);
    for (int32_t i = 0; i < g->n_outputs; ++i) needed[g->outputs[i]] = true;
    for (int32_t i = g->n_nodes - 1; i >= 0; --i) {
      const kiln_node_t* n = &g->nodes[i];
      bool live = false;
      for (int32_t j = 0; j < n->n_outputs && !live; ++j)
        live = n->outputs[j] >= 0 && needed[n->outputs[j]];
      if (!live) {
        c.dead[i] = true;
        ++st->rewrites;
        continue;
      }
      for (int32_t j = 0; j < n->n_inputs; ++j)
        if (n->inputs[j] >= 0) needed[n->inputs[j]] = true;
    }
  }
  kiln_allocator_free(g->allocator, needed);
  return pu_end(&c, s);
}
