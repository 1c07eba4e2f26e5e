/* inline-const-if: an If whose condition is known at compile time (a
 * constant, or a value inference folded from shapes) is replaced by the
 * nodes of the branch it takes, so the compiled targets see plain nodes
 * instead of a host node between stages (compiler/staged.h).
 *
 * The branch's nodes are copied into the graph with the tensors they define
 * renamed "<if node>/<name>" (its initializers too); the names it reads from
 * the enclosing scope are the graph's own tensors already. Each If output is
 * then written by an Identity of the branch output, which remove-noops and
 * the alias lowering make free. Subgraphs of copied nodes keep pointing at
 * the graphs they had: the If's branches stay owned by the graph. */
#include <stdio.h>
#include <string.h>

#include "ir/pass_util.h"

/* The graph name of branch tensor |t|: its own name when it comes from the
 * enclosing scope, else prefixed. */
static const char* mapped(const kiln_graph_t* br, int32_t t, const char* prefix, char* buf, size_t n) {
  const kiln_tensor_t* tt = &br->tensors[t];
  for (int32_t k = br->n_inputs - br->n_outer; k < br->n_inputs; ++k)
    if (br->inputs[k] == t) return tt->name;
  snprintf(buf, n, "%.200s/%.200s", prefix, tt->name);
  return buf;
}

static kiln_status_t copy_branch(pu_ctx_t* c, int32_t ni, const kiln_graph_t* br, const char* prefix,
                                 char (*buf)[416]);

static kiln_status_t inline_if(pu_ctx_t* c, int32_t ni, const kiln_graph_t* br) {
  kiln_graph_t* g = c->g;
  const char* prefix = g->nodes[ni].name;
  char(*buf)[416] = NULL; /* one name per node input and output */
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(g->allocator, sizeof *buf * (KILN_MAX_NODE_INPUTS + KILN_MAX_NODE_OUTPUTS),
                                             "inline-const-if", (void**)&buf));
  kiln_status_t s = copy_branch(c, ni, br, prefix, buf);
  kiln_allocator_free(g->allocator, buf);
  return s;
}

static kiln_status_t copy_branch(pu_ctx_t* c, int32_t ni, const kiln_graph_t* br, const char* prefix, char (*buf)[416]) {
  kiln_graph_t* g = c->g;
  /* initializers and folded constants the branch reads */
  for (int32_t t = 0; t < br->n_tensors; ++t) {
    const kiln_tensor_t* tt = &br->tensors[t];
    if (!(tt->flags & KILN_TENSOR_CONST) || (tt->flags & KILN_TENSOR_INPUT) || !tt->value.data) continue;
    const char* name = mapped(br, t, prefix, buf[0], sizeof buf[0]);
    if (kiln_graph_find_tensor(g, name) >= 0) continue;
    kiln_array_t v;
    KILN_RETURN_IF_ERROR(kiln_array_clone(g->allocator, &tt->value, &v));
    KILN_RETURN_IF_ERROR(kiln_graph_add_initializer(g, name, &v, NULL));
  }
  for (int32_t i = 0; i < br->n_nodes; ++i) {
    const kiln_node_t* n = &br->nodes[i];
    bool all_const = n->n_outputs > 0;
    for (int32_t j = 0; j < n->n_outputs; ++j)
      if (n->outputs[j] >= 0 && !(br->tensors[n->outputs[j]].flags & KILN_TENSOR_CONST)) all_const = false;
    if (all_const) continue; /* its values are initializers now */
    const char* ins[KILN_MAX_NODE_INPUTS];
    const char* outs[KILN_MAX_NODE_OUTPUTS];
    for (int32_t j = 0; j < n->n_inputs; ++j)
      ins[j] = n->inputs[j] < 0 ? "" : mapped(br, n->inputs[j], prefix, buf[j], sizeof buf[0]);
    for (int32_t j = 0; j < n->n_outputs; ++j)
      outs[j] = n->outputs[j] < 0 ? "" : mapped(br, n->outputs[j], prefix, buf[n->n_inputs + j], sizeof buf[0]);
    char nname[416];
    snprintf(nname, sizeof nname, "%.200s/%.200s", prefix, n->name);
    int32_t added;
    KILN_RETURN_IF_ERROR(kiln_graph_add_node(g, n->op_type, nname, n->n_inputs, ins, n->n_outputs, outs, n->n_attrs,
                                             n->attrs, &added));
    g->nodes[added].domain = n->domain;
  }
  /* the If's outputs, written by Identities of the branch's */
  for (int32_t j = 0; j < g->nodes[ni].n_outputs; ++j) {
    int32_t t = g->nodes[ni].outputs[j];
    if (t < 0) continue;
    const char* src = mapped(br, br->outputs[j], prefix, buf[0], sizeof buf[0]);
    char oname[416];
    snprintf(oname, sizeof oname, "%.200s/out%d", prefix, j);
    pu_detach(c, t);
    const char* out = g->tensors[t].name;
    KILN_RETURN_IF_ERROR(kiln_graph_add_node(g, "Identity", oname, 1, &src, 1, &out, 0, NULL, NULL));
  }
  KILN_RETURN_IF_ERROR(pu_sync(c));
  c->dead[ni] = true;
  return NULL;
}

kiln_status_t kiln_pass_inline_const_if(kiln_graph_t* g, kiln_pass_stats_t* st) {
  pu_ctx_t c;
  KILN_RETURN_IF_ERROR(pu_begin(&c, g));
  kiln_status_t s = NULL;
  int32_t n0 = g->n_nodes;
  for (int32_t i = 0; i < n0 && !s; ++i) {
    const kiln_node_t* n = &g->nodes[i];
    if (!pu_op(n, "If") || c.dead[i] || n->n_inputs < 1) continue;
    int32_t ct = n->inputs[0];
    if (!pu_is_const(g, ct) || g->tensors[ct].value.dtype != KILN_DTYPE_BOOL ||
        kiln_array_numel(&g->tensors[ct].value) != 1)
      continue;
    bool cond = ((const uint8_t*)g->tensors[ct].value.data)[0] != 0;
    const kiln_attr_t* a = kiln_node_attr(n, cond ? "then_branch" : "else_branch");
    if (!a || a->type != KILN_ATTR_GRAPH || !a->graph || a->graph->n_outputs != n->n_outputs) continue;
    s = inline_if(&c, i, a->graph);
    if (!s) st->rewrites++;
  }
  return pu_end(&c, s);
}
