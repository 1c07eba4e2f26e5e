/* Is a model per-sample along a dim (see kiln_model_check_per_sample in
 * model_dims.h)? Decided on the model prepared at two values of the dim,
 * so that shape inference and the folding of shape arithmetic (Shape ->
 * Gather -> Concat -> Reshape) work on numbers: what changes with the dim
 * shows as a shape or a folded value that differs between the two. */
#include <stdio.h>
#include <string.h>

#include "api/model_dims.h"

/* Ops that mix samples while dim 0 stays the dim (so the shape rule cannot
 * see it): by an axis attribute that may be 0, or always. */
static bool mixes_along(const kiln_node_t* nd, int32_t rank) {
  static const char* const axis_last[] = {"Softmax", "LogSoftmax", "Hardmax", "LayerNormalization",
                                          "LpNormalization"};
  static const char* const axis_first[] = {"GatherElements", "ScatterElements", "Scatter"};
  static const char* const always[] = {"GatherND", "ScatterND", "Einsum", "MeanVarianceNormalization",
                                       "ReverseSequence", "If", "Loop", "Scan", "CumSum"};
  for (size_t i = 0; i < sizeof always / sizeof always[0]; ++i)
    if (!strcmp(nd->op_type, always[i])) return true;
  if (!strcmp(nd->op_type, "BatchNormalization")) {
    const kiln_attr_t* t = kiln_node_attr(nd, "training_mode");
    return t && t->i != 0;
  }
  const kiln_attr_t* a = kiln_node_attr(nd, "axis");
  for (int k = 0; k < 2; ++k) {
    const char* const* ops = k ? axis_first : axis_last;
    const size_t n = k ? sizeof axis_first / sizeof axis_first[0] : sizeof axis_last / sizeof axis_last[0];
    for (size_t i = 0; i < n; ++i) {
      if (strcmp(nd->op_type, ops[i])) continue;
      int64_t axis = a ? a->i : k ? 0 : -1;
      if (axis < 0) axis += rank;
      return axis <= 0;
    }
  }
  return false;
}

typedef enum { FIXED, PER_SAMPLE, VALUED, MOVED } kind_t;

/* How tensor |t| of the graph at 2 relates to |u| at 3. */
static kind_t kind_of(const kiln_tensor_t* t, const kiln_tensor_t* u) {
  if (t->shape.rank != u->shape.rank) return MOVED;
  bool same = true;
  for (int32_t d = 0; d < t->shape.rank; ++d) same &= t->shape.dims[d] == u->shape.dims[d];
  if (same) {
    const bool ct = (t->flags & KILN_TENSOR_CONST) != 0, cu = (u->flags & KILN_TENSOR_CONST) != 0;
    if (ct != cu) return VALUED;
    if (ct && (t->value.nbytes != u->value.nbytes ||
               (t->value.nbytes && memcmp(t->value.data, u->value.data, t->value.nbytes))))
      return VALUED;
    return FIXED;
  }
  if (t->shape.rank < 1 || t->shape.dims[0] != 2 || u->shape.dims[0] != 3) return MOVED;
  for (int32_t d = 1; d < t->shape.rank; ++d)
    if (t->shape.dims[d] != u->shape.dims[d]) return MOVED;
  return PER_SAMPLE;
}

static kiln_status_t bind_prepare(kiln_graph_t* g, const char* name, int v) {
  char spec[300];
  snprintf(spec, sizeof spec, "%s=%d", name, v);
  KILN_RETURN_IF_ERROR(kiln_model_bind_dim(g, spec));
  char rest[256];
  kiln_model_bind_rest_to_one(g, rest, sizeof rest);
  return kiln_graph_prepare(g);
}

kiln_status_t kiln_model_check_per_sample(const char* name, kiln_graph_t* sym, kiln_graph_t* at2,
                                          kiln_graph_t* at3) {
  int32_t s = 0;
  for (int32_t k = 1; k <= sym->n_symbols; ++k)
    if (!strcmp(sym->symbols[k], name)) s = k;
  if (!s) return kiln_make_status(KILN_NOT_FOUND, "--dim %s=..: the model has no dimension named '%s'", name, name);
  for (int32_t i = 0; i < sym->n_inputs; ++i) {
    const kiln_tensor_t* t = &sym->tensors[sym->inputs[i]];
    bool at0 = t->shape.rank >= 1 && kiln_dim_symbol(t->shape.dims[0]) == s, elsewhere = false;
    for (int32_t d = 1; d < t->shape.rank; ++d) elsewhere |= kiln_dim_symbol(t->shape.dims[d]) == s;
    int32_t where = -1;
    for (int32_t d = 1; d < t->shape.rank && where < 0; ++d)
      if (kiln_dim_symbol(t->shape.dims[d]) == s) where = d;
    if (!at0 || elsewhere)
      return kiln_make_status(KILN_UNSUPPORTED,
                              "dim '%s' cannot be dynamic: input '%s' does not have it as its dim 0 alone%s (a "
                              "range is compiled for the outermost dim of every input and output so far; a dim "
                              "inside the kernels' shapes can be compiled for a set of sizes, one static program "
                              "each: --dim %s=16,64,128)",
                              name, t->name, where > 0 ? " (it is inside the shape, where the kernels' loops and "
                              "tiles are fixed)" : "", name);
  }
  KILN_RETURN_IF_ERROR(bind_prepare(at2, name, 2), "checking dynamic dim '%s' at 2", name);
  KILN_RETURN_IF_ERROR(bind_prepare(at3, name, 3), "checking dynamic dim '%s' at 3", name);
  if (at2->n_tensors != at3->n_tensors || at2->n_nodes != at3->n_nodes)
    return kiln_make_status(KILN_UNSUPPORTED, "dim '%s' cannot be dynamic: the model's graph changes with it", name);
  for (int32_t i = 0; i < at2->n_tensors; ++i)
    if (strcmp(at2->tensors[i].name, at3->tensors[i].name))
      return kiln_make_status(KILN_UNSUPPORTED, "dim '%s' cannot be dynamic: the model's graph changes with it", name);
  for (int32_t n = 0; n < at2->n_nodes; ++n) {
    const kiln_node_t* nd = &at2->nodes[n];
    bool per_sample = false, valued = false, outputs_const = true;
    int32_t rank = 0;
    for (int32_t i = 0; i < nd->n_inputs; ++i) {
      if (nd->inputs[i] < 0) continue;
      const kiln_tensor_t* t = &at2->tensors[nd->inputs[i]];
      switch (kind_of(t, &at3->tensors[nd->inputs[i]])) {
        case MOVED:
          return kiln_make_status(KILN_UNSUPPORTED, "node '%s' (%s): dim '%s' cannot be dynamic: its input '%s' "
                                  "has it beyond dim 0", nd->name, nd->op_type, name, t->name);
        case PER_SAMPLE:
          if (!per_sample) rank = t->shape.rank;
          per_sample = true;
          break;
        /* the dim as a value: only a Reshape's target (input 1) */
        case VALUED: valued |= !(i == 1 && !strcmp(nd->op_type, "Reshape")); break;
        case FIXED: break;
      }
    }
    for (int32_t o = 0; o < nd->n_outputs; ++o)
      if (nd->outputs[o] >= 0) outputs_const &= (at2->tensors[nd->outputs[o]].flags & KILN_TENSOR_CONST) != 0;
    /* shape arithmetic folded at compile time passes the value on */
    if (valued && !outputs_const)
      return kiln_make_status(KILN_UNSUPPORTED,
                              "node '%s' (%s): dim '%s' cannot be dynamic: the node computes with its value at run "
                              "time (only a Reshape's target may use it)", nd->name, nd->op_type, name);
    if (!per_sample) {
      for (int32_t o = 0; o < nd->n_outputs; ++o)
        if (nd->outputs[o] >= 0 && kind_of(&at2->tensors[nd->outputs[o]], &at3->tensors[nd->outputs[o]]) == PER_SAMPLE &&
            (at2->tensors[nd->outputs[o]].flags & KILN_TENSOR_CONST))
          return kiln_make_status(KILN_UNSUPPORTED,
                                  "node '%s' (%s): dim '%s' cannot be dynamic: its output '%s' is a constant computed "
                                  "from the dim", nd->name, nd->op_type, name, at2->tensors[nd->outputs[o]].name);
      continue;
    }
    if (nd->domain && nd->domain[0] && strcmp(nd->domain, "ai.onnx") && strcmp(nd->domain, "com.microsoft"))
      return kiln_make_status(KILN_UNSUPPORTED, "node '%s' (%s/%s): dim '%s' cannot be dynamic through a plugin op",
                              nd->name, nd->domain, nd->op_type, name);
    if (mixes_along(nd, rank))
      return kiln_make_status(KILN_UNSUPPORTED,
                              "node '%s' (%s): dim '%s' cannot be dynamic: the op mixes samples along dim 0", nd->name,
                              nd->op_type, name);
    for (int32_t o = 0; o < nd->n_outputs; ++o) {
      if (nd->outputs[o] < 0) continue;
      kind_t k = kind_of(&at2->tensors[nd->outputs[o]], &at3->tensors[nd->outputs[o]]);
      /* Shape/Size of per-sample data folded to a value: checked where used */
      const bool folded = (at2->tensors[nd->outputs[o]].flags & KILN_TENSOR_CONST) != 0;
      if (k == PER_SAMPLE && folded)
        /* one sample's constant would serve every sample (a Range over the
         * dim differs from sample to sample) */
        return kiln_make_status(KILN_UNSUPPORTED,
                                "node '%s' (%s): dim '%s' cannot be dynamic: its output '%s' is a constant computed "
                                "from the dim", nd->name, nd->op_type, name, at2->tensors[nd->outputs[o]].name);
      if (k == PER_SAMPLE || (k == VALUED && folded)) continue;
      return kiln_make_status(KILN_UNSUPPORTED,
                              "node '%s' (%s): dim '%s' cannot be dynamic: its output '%s' does not keep the dim as "
                              "its dim 0 alone (the op reads, moves or resizes it)",
                              nd->name, nd->op_type, name, at2->tensors[nd->outputs[o]].name);
    }
  }
  for (int32_t i = 0; i < at2->n_outputs; ++i)
    if (kind_of(&at2->tensors[at2->outputs[i]], &at3->tensors[at3->outputs[i]]) != PER_SAMPLE)
      return kiln_make_status(KILN_UNSUPPORTED, "dim '%s' cannot be dynamic: output '%s' does not have it as dim 0",
                              name, at2->tensors[at2->outputs[i]].name);
  return NULL;
}
