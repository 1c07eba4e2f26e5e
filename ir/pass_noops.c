/* "remove-noops": nodes whose output equals their first input. */
#include <string.h>

#include "ir/pass_util.h"

/* Same shape for certain: every dim known or the same symbol. */
static bool same_shape(const kiln_shape_t* a, const kiln_shape_t* b) {
  if (a->rank < 0 || a->rank != b->rank) return false;
  for (int32_t i = 0; i < a->rank; ++i)
    if (a->dims[i] == KILN_DIM_UNKNOWN || a->dims[i] != b->dims[i]) return false;
  return true;
}

static bool identity_perm(const kiln_node_t* n, int32_t rank) {
  const kiln_attr_t* p = kiln_node_attr(n, "perm");
  if (!p) return rank <= 1; /* default perm reverses the dims */
  if (p->type != KILN_ATTR_INTS || p->count != rank) return false;
  for (int64_t i = 0; i < p->count; ++i)
    if (p->ints[i] != i) return false;
  return true;
}

static bool is_noop(const pu_ctx_t* c, const kiln_node_t* n) {
  const kiln_graph_t* g = c->g;
  if (n->n_inputs < 1 || n->inputs[0] < 0 || n->n_outputs < 1 || n->outputs[0] < 0) return false;
  const kiln_tensor_t* x = &g->tensors[n->inputs[0]];
  const kiln_tensor_t* y = &g->tensors[n->outputs[0]];
  if (x->dtype != y->dtype) return false;
  if (pu_op(n, "Identity")) return n->n_outputs == 1;
  if (pu_op(n, "Dropout")) {
    /* Inference Dropout is the identity; the mask output must be unused and
     * training_mode absent or a constant false. */
    if (n->n_outputs > 1 && n->outputs[1] >= 0 &&
        (c->uses[n->outputs[1]] || pu_is_output(g, n->outputs[1])))
      return false;
    double tm = 0;
    if (n->n_inputs > 2 && n->inputs[2] >= 0 && !(pu_const_scalar(g, n->inputs[2], &tm) && tm == 0))
      return false;
    return true;
  }
  if (n->n_outputs != 1) return false;
  if (pu_op(n, "Cast")) return true; /* dtypes equal, checked above */
  if (pu_op(n, "Reshape") || pu_op(n, "Flatten") || pu_op(n, "Squeeze") ||
      pu_op(n, "Unsqueeze") || pu_op(n, "Expand"))
    return same_shape(&x->shape, &y->shape);
  if (pu_op(n, "Transpose")) return x->shape.rank >= 0 && identity_perm(n, x->shape.rank);
  return false;
}

kiln_status_t kiln_pass_remove_noops(kiln_graph_t* g, kiln_pass_stats_t* st) {
  pu_ctx_t c;
  KILN_RETURN_IF_ERROR(pu_begin(&c, g));
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    const kiln_node_t* n = &g->nodes[i];
    if (!is_noop(&c, n)) continue;
    if (pu_forward(&c, i, n->outputs[0], n->inputs[0])) st->rewrites++;
  }
  return pu_end(&c, NULL);
}
