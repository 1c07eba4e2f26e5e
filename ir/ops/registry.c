/* Op registry: finds schemas by op type across the op families, and resolves
 * a graph's nodes, reporting every unsupported op at once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/op.h"
#include "ir/ops/custom.h"

/* Highest ai.onnx opset kiln has checked its op semantics against. */
#define KILN_MAX_ONNX_OPSET 22

static const kiln_op_family_t* const families[] = {
    &kiln_ops_elementwise,
    &kiln_ops_nn,
    &kiln_ops_tensor,
};
#define N_FAMILIES (sizeof(families) / sizeof(families[0]))

static bool is_onnx_domain(const char* d) {
  return !d || !d[0] || strcmp(d, "ai.onnx") == 0;
}

/* onnxruntime's contrib ops kiln implements (quantized models in the
 * QOperator format; "fold-qdq" makes them too, in the default domain). */
static bool is_contrib_op(const char* d, const char* op) {
  return d && strcmp(d, "com.microsoft") == 0 && op &&
         (strcmp(op, "QLinearAdd") == 0 || strcmp(op, "QLinearGlobalAveragePool") == 0);
}

const kiln_op_schema_t* kiln_op_lookup(const char* domain, const char* op_type) {
  if ((!is_onnx_domain(domain) && !is_contrib_op(domain, op_type)) || !op_type) return NULL;
  for (size_t f = 0; f < N_FAMILIES; ++f)
    for (size_t i = 0; i < families[f]->count; ++i)
      if (strcmp(families[f]->ops[i].op_type, op_type) == 0) return &families[f]->ops[i];
  return NULL;
}

uint32_t kiln_op_node_templates(const kiln_node_t* n) {
  if (!n) return 0;
  const kiln_op_schema_t* s = n->schema ? n->schema : kiln_op_lookup(n->domain, n->op_type);
  return s ? s->templates : 0;
}

size_t kiln_op_count(void) {
  size_t n = 0;
  for (size_t f = 0; f < N_FAMILIES; ++f) n += families[f]->count;
  return n;
}

const kiln_op_schema_t* kiln_op_at(size_t i) {
  for (size_t f = 0; f < N_FAMILIES; ++f) {
    if (i < families[f]->count) return &families[f]->ops[i];
    i -= families[f]->count;
  }
  return NULL;
}

static int64_t domain_opset(const kiln_graph_t* g, const char* domain) {
  if (is_onnx_domain(domain)) return g->opset;
  for (int32_t i = 0; i < g->n_opsets; ++i)
    if (strcmp(g->opsets[i].domain, domain) == 0) return g->opsets[i].version;
  return 0;
}

kiln_status_t kiln_graph_resolve_ops(kiln_graph_t* g) {
  const char* src = g->source && g->source[0] ? g->source : "graph";
  bool opset_ok = g->opset >= 1 && g->opset <= KILN_MAX_ONNX_OPSET;
  /* Collect distinct unsupported (domain, op) pairs into one message. */
  size_t cap = 1024, len = 0;
  char* msg = NULL;
  int n_bad = 0, n_bad_nodes = 0;
  bool any_bad_opset = false;
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    kiln_node_t* n = &g->nodes[i];
    bool onnx = is_onnx_domain(n->domain);
    const kiln_op_schema_t* s = (opset_ok || !onnx) ? kiln_op_lookup(n->domain, n->op_type) : NULL;
    /* plugin ops (include/kiln/custom_op.h) live in their own domains */
    if (!s && !onnx) s = kiln_custom_schema_lookup(n->domain, n->op_type, domain_opset(g, n->domain));
    if (onnx && !opset_ok) any_bad_opset = true;
    n->schema = s;
    if (s) continue;
    ++n_bad_nodes;
    bool seen = false;
    for (int32_t j = 0; j < i && !seen; ++j)
      seen = !g->nodes[j].schema && strcmp(g->nodes[j].op_type, n->op_type) == 0 &&
             strcmp(g->nodes[j].domain, n->domain) == 0;
    if (seen) continue;
    if (!msg && !(msg = malloc(cap))) break;
    char item[512];
    int k = snprintf(item, sizeof item, "%s%s (domain '%s', opset %lld) at node '%s'",
                     n_bad ? ", " : "", n->op_type, n->domain[0] ? n->domain : "ai.onnx",
                     (long long)domain_opset(g, n->domain), n->name);
    if (k < 0) k = 0;
    if ((size_t)k >= sizeof item) k = (int)sizeof item - 1;
    if (len + (size_t)k + 1 > cap) {
      char* m2 = realloc(msg, cap * 2 + (size_t)k);
      if (!m2) break;
      msg = m2;
      cap = cap * 2 + (size_t)k;
    }
    memcpy(msg + len, item, (size_t)k + 1);
    len += (size_t)k;
    ++n_bad;
  }
  if (!n_bad_nodes) {
    free(msg);
    return NULL;
  }
  kiln_status_t st;
  if (any_bad_opset && g->opset == 0)
    st = kiln_make_status(KILN_UNSUPPORTED,
                          "%s: the model imports no ai.onnx opset; unsupported op%s: %s", src,
                          n_bad > 1 ? "s" : "", msg ? msg : "");
  else if (any_bad_opset)
    st = kiln_make_status(KILN_UNSUPPORTED,
                          "%s: ai.onnx opset %lld is not supported (kiln supports 1..%d); "
                          "unsupported op%s: %s",
                          src, (long long)g->opset, KILN_MAX_ONNX_OPSET, n_bad > 1 ? "s" : "",
                          msg ? msg : "");
  else
    st = kiln_make_status(KILN_UNSUPPORTED, "%s: %d unsupported op%s (%d node%s): %s", src,
                          n_bad, n_bad > 1 ? "s" : "", n_bad_nodes, n_bad_nodes > 1 ? "s" : "",
                          msg ? msg : "");
  free(msg);
  return st;
}
