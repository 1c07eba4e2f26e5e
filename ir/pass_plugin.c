/* Plugin patterns (kiln_custom_pattern_t): a chain of ai.onnx nodes
 * replaced by the plugin's op, so a user brings a fused kernel without
 * editing the model; then element-wise activations fused into the plugin
 * nodes whose op declares epilogue (kiln_custom_op_t.epilogue).
 *
 * Why it runs first among the passes: kiln's own folds would otherwise
 * take the chain apart first (BatchNormalization after a Conv is folded
 * into the Conv's weights by fold-batchnorm).
 *
 * A pattern given as a graph (API version 2) is matched from its last
 * node backwards through the inputs it binds to earlier pattern nodes; a
 * slot bound at several places must be one tensor there (a fan-in).
 *
 * Why an attribute the op does not declare blocks the match: the op could
 * not honour it (a Conv with auto_pad, say), so rewriting would change the
 * model's meaning; the chain then stays as it is. */
#include <string.h>

#include "ir/ops/custom.h"
#include "ir/pass_util.h"

#define MAX_CHAIN 8

static bool declared(const kiln_custom_op_t* op, const char* name) {
  for (int32_t i = 0; i < op->n_attrs; ++i)
    if (!strcmp(op->attrs[i].name, name)) return true;
  return false;
}

/* The chain of |p| starting at node |head| into chain[], or false. */
static bool match(const pu_ctx_t* c, const int32_t* consumer, const kiln_custom_pattern_t* p,
                  const kiln_custom_op_t* op, int32_t head, int32_t* chain) {
  const kiln_graph_t* g = c->g;
  int32_t cur = head;
  for (int32_t k = 0; k < p->n_nodes; ++k) {
    const kiln_node_t* n = &g->nodes[cur];
    if (c->dead[cur] || !pu_op(n, p->ops[k])) return false;
    /* the inputs it brings must fit its slots (input 0 of later nodes is the chain) */
    const int32_t first = k ? 1 : 0;
    for (int32_t j = first + p->slots[k]; j < n->n_inputs; ++j)
      if (n->inputs[j] >= 0) return false;
    for (int32_t j = 0; j < n->n_attrs; ++j)
      if (!declared(op, n->attrs[j].name)) return false;
    for (int32_t j = 1; j < n->n_outputs; ++j)
      if (n->outputs[j] >= 0) return false;
    chain[k] = cur;
    if (k + 1 == p->n_nodes) break;
    const int32_t t = n->n_outputs >= 1 ? n->outputs[0] : -1;
    if (t < 0 || !pu_single_use(c, t) || consumer[t] < 0) return false;
    cur = consumer[t];
    if (g->nodes[cur].n_inputs < 1 || g->nodes[cur].inputs[0] != t) return false;
  }
  return op->n_outputs == 1;
}

/* Nodes |dead| go; one node of |op| named |name| reads |in_t| and writes
 * |y| (the output of the last one that went). */
static kiln_status_t replace_nodes(pu_ctx_t* c, const kiln_custom_op_t* op, const int32_t* dead, int32_t n_dead,
                                   const char* name, int32_t n_in, const int32_t* in_t, const char* const* in_names,
                                   int32_t n_attrs, const kiln_attr_t* attrs, int32_t y, const char* out_name) {
  kiln_graph_t* g = c->g;
  for (int32_t k = 0; k < n_dead; ++k) {
    c->dead[dead[k]] = true;
    const kiln_node_t* n = &g->nodes[dead[k]];
    for (int32_t j = 0; j < n->n_inputs; ++j)
      if (n->inputs[j] >= 0) c->uses[n->inputs[j]]--;
  }
  pu_detach(c, y);
  int32_t ni;
  KILN_RETURN_IF_ERROR(kiln_graph_add_node(g, op->name, name, n_in, in_names, 1, &out_name, n_attrs, attrs, &ni));
  g->nodes[ni].domain = kiln_graph_strdup(g, op->domain);
  if (!g->nodes[ni].domain) return kiln_make_status(KILN_OUT_OF_MEMORY, "node '%s'", name);
  KILN_RETURN_IF_ERROR(pu_sync(c));
  c->dead[ni] = false;
  for (int32_t i = 0; i < n_in; ++i)
    if (in_t[i] >= 0) c->uses[in_t[i]]++;
  /* the model may not import the plugin's domain: it does now */
  bool imported = false;
  for (int32_t i = 0; i < g->n_opsets && !imported; ++i) imported = !strcmp(g->opsets[i].domain, op->domain);
  if (!imported) KILN_RETURN_IF_ERROR(kiln_graph_set_opset(g, op->domain, op->since_version));
  return NULL;
}

/* True when the op's shape function accepts the chain's inputs and
 * attributes: a chain the plugin cannot compute (a 1-D Conv for a 2-D
 * kernel) stays as it is rather than failing the model. */
static bool op_accepts(const kiln_graph_t* g, const kiln_custom_op_t* op, const char* name, const int32_t* in_t,
                       int32_t n_in, const kiln_attr_t* attrs, int32_t n_attrs) {
  kiln_node_t tmp = {.name = name, .op_type = op->name, .domain = op->domain, .n_attrs = n_attrs,
                     .attrs = (kiln_attr_t*)attrs};
  kiln_custom_attr_t vals[KILN_CUSTOM_MAX_ATTRS];
  kiln_status_t s = kiln_custom_node_attrs(op, &tmp, vals);
  if (s) {
    kiln_status_free(s);
    return false;
  }
  kiln_custom_tensor_t in[KILN_CUSTOM_MAX_IO], out[KILN_CUSTOM_MAX_IO];
  memset(in, 0, sizeof in);
  memset(out, 0, sizeof out);
  for (int32_t i = 0; i < n_in; ++i) {
    if (in_t[i] < 0) {
      if (!op->inputs[i].optional) return false;
      continue;
    }
    const kiln_tensor_t* t = &g->tensors[in_t[i]];
    if (t->shape.rank < 0 || !(op->inputs[i].dtypes & KILN_CUSTOM_DTYPE(t->dtype))) return false;
    in[i].dtype = t->dtype;
    in[i].rank = t->shape.rank;
    for (int32_t d = 0; d < t->shape.rank; ++d) in[i].dims[d] = t->shape.dims[d];
  }
  char err[256] = "";
  kiln_custom_ctx_t cx = {.node = name, .n_in = n_in, .in = in, .n_out = op->n_outputs, .out = out,
                          .n_attrs = op->n_attrs, .attrs = vals, .error = err, .error_cap = sizeof err};
  return op->shape(&cx) == 0;
}

/* The op's inputs of a matched chain: node by node, its slots' inputs. */
static int32_t chain_inputs(const kiln_graph_t* g, const kiln_custom_pattern_t* p, const int32_t* chain,
                            int32_t* in_t) {
  int32_t n_in = 0;
  for (int32_t k = 0; k < p->n_nodes; ++k) {
    const kiln_node_t* n = &g->nodes[chain[k]];
    const int32_t first = k ? 1 : 0;
    for (int32_t s = 0; s < p->slots[k]; ++s) {
      const int32_t j = first + s;
      in_t[n_in++] = j < n->n_inputs ? n->inputs[j] : -1;
    }
  }
  return n_in;
}

/* ---- patterns given as graphs (kiln_custom_pattern_t.inputs) ----------- */

typedef struct gmatch_s {
  int32_t node[MAX_CHAIN];          /* graph node of pattern node k, -1: not yet */
  int32_t slot[KILN_CUSTOM_MAX_IO]; /* tensor bound to the op's input i, -2: not yet */
} gmatch_t;

/* Pattern node |k| at graph node |gi|, and what its inputs bind,
 * recursively (the nodes it reads come before it). */
static bool match_node(const pu_ctx_t* c, const kiln_custom_pattern_t* p, const kiln_custom_op_t* op, int32_t k,
                       int32_t gi, gmatch_t* m) {
  const kiln_graph_t* g = c->g;
  if (m->node[k] >= 0) return m->node[k] == gi; /* read twice: the same node */
  for (int32_t q = 0; q < p->n_nodes; ++q)
    if (m->node[q] == gi) return false; /* one graph node per pattern node */
  const kiln_node_t* n = &g->nodes[gi];
  if (c->dead[gi] || !pu_op(n, p->ops[k]) || n->n_inputs > p->n_node_inputs[k]) return false;
  for (int32_t j = 0; j < n->n_attrs; ++j)
    if (!declared(op, n->attrs[j].name)) return false;
  for (int32_t j = 1; j < n->n_outputs; ++j)
    if (n->outputs[j] >= 0) return false;
  m->node[k] = gi;
  for (int32_t j = 0; j < p->n_node_inputs[k]; ++j) {
    const int32_t b = p->inputs[k][j], t = j < n->n_inputs ? n->inputs[j] : -1;
    if (b == KILN_PATTERN_NONE) {
      if (t >= 0) return false;
    } else if (b >= 0) {
      if (m->slot[b] == -2) m->slot[b] = t;
      else if (m->slot[b] != t) return false; /* a fan-in reads one tensor */
    } else {
      const int32_t pr = t >= 0 ? g->tensors[t].producer : -1;
      if (pr < 0 || g->nodes[pr].n_outputs < 1 || g->nodes[pr].outputs[0] != t ||
          !match_node(c, p, op, KILN_PATTERN_NODE(0) - b, pr, m))
        return false;
    }
  }
  return true;
}

/* The graph pattern |p| with its last node at graph node |root|. */
static bool match_graph(const pu_ctx_t* c, const kiln_custom_pattern_t* p, const kiln_custom_op_t* op,
                        int32_t root, gmatch_t* m) {
  for (int32_t k = 0; k < MAX_CHAIN; ++k) m->node[k] = -1;
  for (int32_t i = 0; i < KILN_CUSTOM_MAX_IO; ++i) m->slot[i] = -2;
  if (op->n_outputs != 1 || !match_node(c, p, op, p->n_nodes - 1, root, m)) return false;
  /* every intermediate read by the pattern's nodes only (as often as they read it) */
  for (int32_t k = 0; k + 1 < p->n_nodes; ++k) {
    if (m->node[k] < 0) return false;
    const int32_t t = c->g->nodes[m->node[k]].outputs[0];
    int32_t reads = 0;
    for (int32_t q = k + 1; q < p->n_nodes; ++q)
      for (int32_t j = 0; j < p->n_node_inputs[q]; ++j) reads += p->inputs[q][j] == KILN_PATTERN_NODE(k);
    if (c->uses[t] != reads || pu_is_output(c->g, t)) return false;
  }
  return true;
}

/* The op node replacing |nodes| (the pattern's, in its order: the first
 * node with an attribute the op declares gives it), reading |in_t|, or
 * nothing when the op's shape function refuses them (*done false). */
static kiln_status_t rewrite(pu_ctx_t* c, const kiln_custom_pattern_t* p, const kiln_custom_op_t* op,
                             const int32_t* chain, const int32_t* in_t, int32_t n_in, bool* done) {
  kiln_graph_t* g = c->g;
  const char* in_names[KILN_CUSTOM_MAX_IO];
  for (int32_t i = 0; i < n_in; ++i) in_names[i] = in_t[i] >= 0 ? g->tensors[in_t[i]].name : "";
  kiln_attr_t attrs[KILN_CUSTOM_MAX_ATTRS];
  int32_t n_attrs = 0;
  for (int32_t i = 0; i < op->n_attrs; ++i)
    for (int32_t k = 0; k < p->n_nodes; ++k) {
      const kiln_node_t* n = &g->nodes[chain[k]];
      const kiln_attr_t* a = NULL;
      for (int32_t j = 0; j < n->n_attrs && !a; ++j)
        if (!strcmp(n->attrs[j].name, op->attrs[i].name)) a = &n->attrs[j];
      if (a) {
        attrs[n_attrs++] = *a;
        break;
      }
    }
  const kiln_node_t* last = &g->nodes[chain[p->n_nodes - 1]];
  const int32_t y = last->outputs[0];
  const char* out_name = g->tensors[y].name;
  char name[256];
  snprintf(name, sizeof name, "%.200s__%s", last->name, op->name);
  *done = false;
  if (!op_accepts(g, op, name, in_t, n_in, attrs, n_attrs)) return NULL;
  *done = true;
  return replace_nodes(c, op, chain, p->n_nodes, name, n_in, in_t, in_names, n_attrs, attrs, y, out_name);
}

/* An element-wise activation kiln may fuse into an op that declares
 * epilogue (kiln_custom_node_epilogue gives it back). */
static const char* epilogue_kind(const kiln_node_t* n) {
  static const char* const kinds[] = {"Relu", "LeakyRelu", "Sigmoid", "Tanh"};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; ++k)
    if (pu_op(n, kinds[k])) return kinds[k];
  return NULL;
}

/* Plugin node |ni| with its output's one consumer, an activation, fused
 * into it: the activation's node goes, the plugin node writes its output. */
static kiln_status_t absorb(pu_ctx_t* c, const int32_t* consumer, int32_t ni, bool* done) {
  kiln_graph_t* g = c->g;
  *done = false;
  const kiln_node_t* n = &g->nodes[ni];
  const kiln_custom_op_t* op = kiln_custom_op_of(n);
  float alpha;
  if (c->dead[ni] || !op || !op->epilogue || n->n_outputs != 1 || n->outputs[0] < 0 ||
      kiln_custom_node_epilogue(n, &alpha) || n->n_inputs > KILN_CUSTOM_MAX_IO ||
      n->n_attrs > KILN_CUSTOM_MAX_ATTRS)
    return NULL;
  const int32_t t = n->outputs[0];
  const kiln_dtype_t dt = g->tensors[t].dtype;
  if (!pu_single_use(c, t) || consumer[t] < 0 || c->dead[consumer[t]] || (dt != KILN_DTYPE_F32 && dt != KILN_DTYPE_F16))
    return NULL;
  const int32_t ci = consumer[t];
  const kiln_node_t* a = &g->nodes[ci];
  const char* kind = epilogue_kind(a);
  if (!kind || a->n_inputs != 1 || a->inputs[0] != t || a->n_outputs != 1 || a->outputs[0] < 0) return NULL;
  alpha = 0.01f;
  if (!strcmp(kind, "LeakyRelu")) {
    kiln_status_t s = kiln_attr_float(a, "alpha", 0.01f, &alpha);
    if (s) {
      kiln_status_free(s);
      return NULL;
    }
  }
  const char* in_names[KILN_CUSTOM_MAX_IO];
  int32_t in_t[KILN_CUSTOM_MAX_IO];
  for (int32_t i = 0; i < n->n_inputs; ++i) {
    in_t[i] = n->inputs[i];
    in_names[i] = in_t[i] >= 0 ? g->tensors[in_t[i]].name : "";
  }
  kiln_attr_t attrs[KILN_CUSTOM_MAX_ATTRS + 2];
  int32_t n_attrs = n->n_attrs;
  memcpy(attrs, n->attrs, sizeof(kiln_attr_t) * (size_t)n_attrs);
  attrs[n_attrs++] = kiln_attr_make_string(KILN_CUSTOM_EPILOGUE_ATTR, kind);
  attrs[n_attrs++] = kiln_attr_make_float(KILN_CUSTOM_EPILOGUE_ALPHA_ATTR, alpha);
  const int32_t y = a->outputs[0];
  char name[256];
  snprintf(name, sizeof name, "%.200s__%s", a->name, op->name);
  const int32_t pair[2] = {ni, ci};
  *done = true;
  return replace_nodes(c, op, pair, 2, name, n->n_inputs, in_t, in_names, n_attrs, attrs, y, g->tensors[y].name);
}

kiln_status_t kiln_pass_plugin_patterns(kiln_graph_t* g, kiln_pass_stats_t* st) {
  const int32_t np = kiln_custom_pattern_count();
  bool epilogues = false;
  for (int32_t i = 0; i < kiln_custom_op_count() && !epilogues; ++i) epilogues = kiln_custom_op_at(i)->epilogue;
  if (!np && !epilogues) return NULL; /* nothing to do: no re-prepare either */
  pu_ctx_t c;
  KILN_RETURN_IF_ERROR(pu_begin(&c, g));
  kiln_status_t s = NULL;
  int32_t* consumer = NULL;
  /* The one reader of each tensor read once (pu_single_use checks the
   * count); chains do not overlap, so rewrites leave it valid. */
  s = kiln_allocator_malloc(g->allocator, sizeof(int32_t) * (size_t)(g->n_tensors + 1), "plugin patterns",
                            (void**)&consumer);
  const int32_t n0 = g->n_nodes;
  if (!s) {
    for (int32_t t = 0; t < g->n_tensors; ++t) consumer[t] = -1;
    for (int32_t i = 0; i < n0; ++i)
      for (int32_t j = 0; j < g->nodes[i].n_inputs; ++j)
        if (g->nodes[i].inputs[j] >= 0) consumer[g->nodes[i].inputs[j]] = i;
  }
  for (int32_t pi = 0; pi < np && !s; ++pi) {
    const kiln_custom_pattern_t* p = kiln_custom_pattern_at(pi);
    const kiln_custom_op_t* op = p ? kiln_custom_op_find(p->domain, p->name) : NULL;
    if (!op || p->n_nodes > MAX_CHAIN) continue;
    for (int32_t i = 0; i < n0 && !s; ++i) {
      int32_t chain[MAX_CHAIN], in_t[KILN_CUSTOM_MAX_IO], n_in;
      if (p->inputs) {
        gmatch_t m;
        if (!match_graph(&c, p, op, i, &m)) continue;
        memcpy(chain, m.node, sizeof chain);
        n_in = op->n_inputs;
        for (int32_t k = 0; k < n_in; ++k) in_t[k] = m.slot[k];
      } else {
        if (!match(&c, consumer, p, op, i, chain)) continue;
        n_in = chain_inputs(g, p, chain, in_t);
      }
      bool done = false;
      s = rewrite(&c, p, op, chain, in_t, n_in, &done);
      if (!s && done) ++st->rewrites;
    }
  }
  /* then activations into the plugin nodes that take them, the new ones too */
  for (int32_t i = 0; i < g->n_nodes && !s && epilogues; ++i) {
    bool done = false;
    s = absorb(&c, consumer, i, &done);
    if (!s && done) ++st->rewrites;
  }
  kiln_allocator_free(g->allocator, consumer);
  return pu_end(&c, s);
}
