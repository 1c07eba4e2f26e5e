/* Symbolic dimension binding (see model_dims.h). */
#include "api/model_dims.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kiln_status_t kiln_model_bind_dim(kiln_graph_t* g, const char* spec) {
  const char* eq = strchr(spec, '=');
  char* end = NULL;
  errno = 0;
  long long v = eq ? strtoll(eq + 1, &end, 10) : -1;
  if (!eq || !end || end == eq + 1 || *end || v < 0 || errno == ERANGE)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "--dim '%s': expected SYMBOL=SIZE with SIZE in 0..%lld", spec,
                            (long long)INT64_MAX);
  int32_t sym = 0;
  for (int32_t k = 1; k <= g->n_symbols; ++k)
    if (strlen(g->symbols[k]) == (size_t)(eq - spec) && strncmp(g->symbols[k], spec, (size_t)(eq - spec)) == 0)
      sym = k;
  if (!sym)
    return kiln_make_status(KILN_NOT_FOUND, "--dim '%s': the model has no dimension named '%.*s'", spec,
                            (int)(eq - spec), spec);
  for (int32_t k = 0; k < g->n_inputs; ++k) {
    kiln_tensor_t* t = &g->tensors[g->inputs[k]];
    for (int32_t d = 0; d < t->shape.rank; ++d)
      if (kiln_dim_symbol(t->shape.dims[d]) == sym) t->shape.dims[d] = v;
  }
  return NULL;
}

int32_t kiln_model_bind_rest_to_one(kiln_graph_t* g, char* names, size_t n) {
  int32_t bound = 0;
  size_t at = 0;
  if (n) names[0] = '\0';
  for (int32_t k = 0; k < g->n_inputs; ++k) {
    kiln_tensor_t* t = &g->tensors[g->inputs[k]];
    for (int32_t d = 0; d < t->shape.rank; ++d) {
      int32_t sym = kiln_dim_symbol(t->shape.dims[d]);
      if (!sym) continue;
      if (at < n) at += (size_t)snprintf(names + at, n - at, " %s", g->symbols[sym]);
      t->shape.dims[d] = 1;
      ++bound;
    }
  }
  return bound;
}

kiln_status_t kiln_model_dim_range(const char* spec, char* name, size_t n, int64_t* out_lo, int64_t* out_hi,
                                   bool* out_is_range) {
  *out_is_range = false;
  const char* eq = strchr(spec, '=');
  const char* dots = eq ? strstr(eq + 1, "..") : NULL;
  if (!dots) return NULL;
  *out_is_range = true;
  char* end = NULL;
  errno = 0;
  long long lo = strtoll(eq + 1, &end, 10);
  bool ok = end == dots && end != eq + 1 && errno != ERANGE;
  long long hi = ok ? strtoll(dots + 2, &end, 10) : 0;
  ok = ok && end != dots + 2 && !*end && errno != ERANGE && eq != spec;
  if (!ok || lo < 1 || hi < lo || hi > (1ll << 20))
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "--dim '%s': expected NAME=LO..HI with 1 <= LO <= HI <= %lld (a dynamic dim)", spec,
                            1ll << 20);
  snprintf(name, n, "%.*s", (int)(eq - spec), spec);
  *out_lo = lo;
  *out_hi = hi;
  return NULL;
}

/* Ops that mix samples while dim 0 stays the dim (so the shape rule below
 * cannot see it): by an axis attribute that may be 0, or always. */
static bool mixes_along(const kiln_node_t* nd, int32_t rank) {
  static const char* const axis_ops[] = {"Softmax", "LogSoftmax", "Hardmax", "LayerNormalization", "CumSum",
                                         "LpNormalization", "GatherElements", "ScatterElements", "Scatter"};
  static const char* const always[] = {"GatherND", "ScatterND", "Einsum", "MeanVarianceNormalization",
                                       "ReverseSequence", "If", "Loop", "Scan"};
  for (size_t i = 0; i < sizeof always / sizeof always[0]; ++i)
    if (!strcmp(nd->op_type, always[i])) return true;
  if (!strcmp(nd->op_type, "BatchNormalization")) {
    const kiln_attr_t* t = kiln_node_attr(nd, "training_mode");
    return t && t->i != 0;
  }
  for (size_t i = 0; i < sizeof axis_ops / sizeof axis_ops[0]; ++i) {
    if (strcmp(nd->op_type, axis_ops[i])) continue;
    const kiln_attr_t* a = kiln_node_attr(nd, "axis");
    int64_t axis = a ? a->i : (!strcmp(nd->op_type, "Softmax") || !strcmp(nd->op_type, "LogSoftmax") ||
                               !strcmp(nd->op_type, "Hardmax") || !strcmp(nd->op_type, "LayerNormalization") ||
                               !strcmp(nd->op_type, "LpNormalization"))
                                  ? -1
                                  : 0;
    if (!strcmp(nd->op_type, "CumSum")) return true; /* its axis is an input */
    if (axis < 0) axis += rank;
    return axis <= 0;
  }
  return false;
}

/* Where |sym| sits in |sh|: 1 when only as dim 0, 0 when absent, -1 when
 * elsewhere too or when a dim is unknown (the dim may be folded into it). */
static int where_dim(const kiln_shape_t* sh, int32_t sym) {
  if (sh->rank < 0) return -1;
  int at0 = 0, other = 0, unknown = 0;
  for (int32_t d = 0; d < sh->rank; ++d) {
    int32_t s = kiln_dim_symbol(sh->dims[d]);
    if (s == sym && d == 0) at0++;
    else if (s == sym) other++;
    else if (sh->dims[d] == KILN_DIM_UNKNOWN) unknown++;
  }
  if (other || (unknown && !at0) || (at0 && unknown)) return -1;
  return at0;
}

kiln_status_t kiln_model_check_per_sample(kiln_graph_t* g, const char* name) {
  int32_t sym = 0;
  for (int32_t k = 1; k <= g->n_symbols; ++k)
    if (!strcmp(g->symbols[k], name)) sym = k;
  if (!sym) return kiln_make_status(KILN_NOT_FOUND, "--dim %s=..: the model has no dimension named '%s'", name, name);
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    const kiln_tensor_t* t = &g->tensors[g->inputs[i]];
    if (where_dim(&t->shape, sym) != 1)
      return kiln_make_status(KILN_UNSUPPORTED,
                              "dim '%s' cannot be dynamic: input '%s' does not have it as its dim 0 alone (a "
                              "dynamic dim is the outermost dim of every input and output so far)",
                              name, t->name);
  }
  KILN_RETURN_IF_ERROR(kiln_graph_prepare(g), "checking dynamic dim '%s'", name);
  for (int32_t n = 0; n < g->n_nodes; ++n) {
    const kiln_node_t* nd = &g->nodes[n];
    bool reads = false;
    int32_t rank = 0;
    for (int32_t i = 0; i < nd->n_inputs; ++i) {
      if (nd->inputs[i] < 0) continue;
      const kiln_tensor_t* t = &g->tensors[nd->inputs[i]];
      int w = where_dim(&t->shape, sym);
      if (w < 0 && t->shape.rank >= 0)
        return kiln_make_status(KILN_UNSUPPORTED, "node '%s' (%s): dim '%s' cannot be dynamic: input '%s' has it "
                                "beyond dim 0 or has an unknown dim", nd->name, nd->op_type, name, t->name);
      if (w == 1 && !reads) rank = t->shape.rank;
      reads |= w == 1;
    }
    if (!reads) continue;
    if (nd->domain && nd->domain[0] && strcmp(nd->domain, "ai.onnx") && strcmp(nd->domain, "com.microsoft"))
      return kiln_make_status(KILN_UNSUPPORTED, "node '%s' (%s/%s): dim '%s' cannot be dynamic through a plugin op",
                              nd->name, nd->domain, nd->op_type, name);
    if (mixes_along(nd, rank))
      return kiln_make_status(KILN_UNSUPPORTED,
                              "node '%s' (%s): dim '%s' cannot be dynamic: the op mixes samples along dim 0", nd->name,
                              nd->op_type, name);
    for (int32_t o = 0; o < nd->n_outputs; ++o) {
      if (nd->outputs[o] < 0) continue;
      const kiln_tensor_t* t = &g->tensors[nd->outputs[o]];
      if (where_dim(&t->shape, sym) != 1)
        return kiln_make_status(KILN_UNSUPPORTED,
                                "node '%s' (%s): dim '%s' cannot be dynamic: its output '%s' does not keep the dim "
                                "as its dim 0 alone (the op reads, moves or resizes it)",
                                nd->name, nd->op_type, name, t->name);
    }
  }
  for (int32_t i = 0; i < g->n_outputs; ++i) {
    const kiln_tensor_t* t = &g->tensors[g->outputs[i]];
    if (where_dim(&t->shape, sym) != 1)
      return kiln_make_status(KILN_UNSUPPORTED, "dim '%s' cannot be dynamic: output '%s' does not have it as dim 0",
                              name, t->name);
  }
  return NULL;
}
