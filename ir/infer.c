/* Attribute accessors, inference helpers and the graph-wide inference
 * driver (which also folds small constant subgraphs). */
#include <stdlib.h>
#include <string.h>

#include "ir/op.h"

#define OWNED_VALUE (1u << 31) /* keep in sync with graph.c */
/* Constant subgraph outputs up to this many elements are computed at load
 * time, so shape arithmetic (Shape->Gather->Concat->Reshape) becomes static.
 * Larger constant computations are left to run time. */
#define FOLD_MAX_ELEMENTS 65536

/* ---- attributes ------------------------------------------------------ */

static const char* attr_type_name(kiln_attr_type_t t) {
  static const char* n[] = {"undefined", "float",  "int",     "string",  "tensor", "graph",
                            "floats",    "ints",   "strings", "tensors", "graphs"};
  return (unsigned)t < sizeof(n) / sizeof(n[0]) ? n[t] : "?";
}

static kiln_status_t wrong_type(const kiln_node_t* n, const kiln_attr_t* a,
                                const char* want) {
  return kiln_make_status(KILN_INVALID_ARGUMENT, "attribute '%s' is %s, expected %s", a->name,
                          attr_type_name(a->type), want);
}

kiln_status_t kiln_attr_int(const kiln_node_t* n, const char* name, int64_t def,
                            int64_t* out) {
  const kiln_attr_t* a = kiln_node_attr(n, name);
  if (!a) {
    *out = def;
    return NULL;
  }
  if (a->type != KILN_ATTR_INT) return wrong_type(n, a, "int");
  *out = a->i;
  return NULL;
}

kiln_status_t kiln_attr_int_required(const kiln_node_t* n, const char* name,
                                     int64_t* out) {
  const kiln_attr_t* a = kiln_node_attr(n, name);
  if (!a)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "required attribute '%s' is missing", name);
  if (a->type != KILN_ATTR_INT) return wrong_type(n, a, "int");
  *out = a->i;
  return NULL;
}

kiln_status_t kiln_attr_float(const kiln_node_t* n, const char* name, float def,
                              float* out) {
  const kiln_attr_t* a = kiln_node_attr(n, name);
  if (!a) {
    *out = def;
    return NULL;
  }
  if (a->type == KILN_ATTR_INT) { /* some exporters write integral floats as ints */
    *out = (float)a->i;
    return NULL;
  }
  if (a->type != KILN_ATTR_FLOAT) return wrong_type(n, a, "float");
  *out = a->f;
  return NULL;
}

kiln_status_t kiln_attr_string(const kiln_node_t* n, const char* name, const char* def,
                               const char** out) {
  const kiln_attr_t* a = kiln_node_attr(n, name);
  if (!a) {
    *out = def;
    return NULL;
  }
  if (a->type != KILN_ATTR_STRING) return wrong_type(n, a, "string");
  *out = a->s ? a->s : "";
  return NULL;
}

kiln_status_t kiln_attr_ints(const kiln_node_t* n, const char* name, const int64_t** out,
                             int64_t* out_count) {
  const kiln_attr_t* a = kiln_node_attr(n, name);
  *out = NULL;
  *out_count = -1;
  if (!a) return NULL;
  if (a->type != KILN_ATTR_INTS) return wrong_type(n, a, "ints");
  *out = a->ints;
  *out_count = a->count;
  return NULL;
}

kiln_status_t kiln_attr_floats(const kiln_node_t* n, const char* name, const float** out,
                               int64_t* out_count) {
  const kiln_attr_t* a = kiln_node_attr(n, name);
  *out = NULL;
  *out_count = -1;
  if (!a) return NULL;
  if (a->type != KILN_ATTR_FLOATS) return wrong_type(n, a, "floats");
  *out = a->floats;
  *out_count = a->count;
  return NULL;
}

/* ---- inference helpers ----------------------------------------------- */

kiln_status_t kiln_infer_broadcast(const kiln_shape_t* a, const kiln_shape_t* b,
                                   kiln_shape_t* out) {
  if (a->rank < 0 || b->rank < 0) {
    *out = kiln_shape_unknown();
    return NULL;
  }
  int32_t r = a->rank > b->rank ? a->rank : b->rank;
  kiln_shape_t o = kiln_shape_unknown();
  o.rank = r;
  for (int32_t i = 0; i < r; ++i) {
    int32_t ia = i - (r - a->rank), ib = i - (r - b->rank);
    int64_t da = ia >= 0 ? a->dims[ia] : 1;
    int64_t db = ib >= 0 ? b->dims[ib] : 1;
    int64_t d;
    if (da == db) d = da;
    else if (da == 1) d = db;
    else if (db == 1) d = da;
    else if (da >= 0 && db >= 0) {
      char sa[160], sb[160];
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "shapes %s and %s cannot be broadcast (dim %d: %lld vs %lld)",
                              kiln_shape_format(a, sa, sizeof sa),
                              kiln_shape_format(b, sb, sizeof sb), i, (long long)da,
                              (long long)db);
    } else if (da >= 0) d = da; /* the symbolic side must be 1 or equal */
    else if (db >= 0) d = db;
    else d = KILN_DIM_UNKNOWN;  /* two different symbols */
    o.dims[i] = d;
  }
  *out = o;
  return NULL;
}

kiln_status_t kiln_infer_axis(int64_t axis, int32_t rank, int32_t* out_axis) {
  if (axis < -(int64_t)rank || axis >= rank)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "axis %lld is out of range for rank %d",
                            (long long)axis, rank);
  *out_axis = (int32_t)(axis < 0 ? axis + rank : axis);
  return NULL;
}

bool kiln_infer_has_value(const kiln_infer_t* ctx, int32_t i) {
  return i < ctx->n_in && ctx->in[i] && (ctx->in[i]->flags & KILN_TENSOR_CONST) &&
         ctx->in[i]->value.data;
}

kiln_status_t kiln_infer_read_ints(const kiln_infer_t* ctx, int32_t i, int64_t* out,
                                   int64_t cap, int64_t* out_count) {
  if (!kiln_infer_has_value(ctx, i))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "input %d has no known value", i);
  const kiln_tensor_t* t = ctx->in[i];
  if (t->value.shape.rank > 1)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "input '%s' must be 1-D, has rank %d",
                            t->name, t->value.shape.rank);
  if (!kiln_dtype_is_int(t->value.dtype))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "input '%s' must be an integer tensor, is %s",
                            t->name, kiln_dtype_name(t->value.dtype));
  int64_t n = kiln_shape_count(&t->value.shape);
  if (n > cap)
    return kiln_make_status(KILN_LIMIT_EXCEEDED, "input '%s' has %lld elements, at most %lld",
                            t->name, (long long)n, (long long)cap);
  for (int64_t k = 0; k < n; ++k) out[k] = kiln_load_i64(t->value.dtype, t->value.data, (size_t)k);
  *out_count = n;
  return NULL;
}

void kiln_infer_set(kiln_infer_t* ctx, int32_t i, kiln_dtype_t dtype,
                    const kiln_shape_t* shape) {
  if (i >= ctx->n_out || !ctx->out[i]) return;
  ctx->out[i]->dtype = dtype;
  ctx->out[i]->shape = *shape;
}

static kiln_status_t store_value(kiln_graph_t* g, kiln_tensor_t* t, const kiln_array_t* v) {
  kiln_array_t copy;
  KILN_RETURN_IF_ERROR(kiln_array_clone(g->allocator, v, &copy));
  if (t->flags & OWNED_VALUE) kiln_allocator_free(g->allocator, t->value.data);
  t->value = copy;
  t->dtype = v->dtype;
  t->shape = v->shape;
  t->flags |= KILN_TENSOR_CONST | OWNED_VALUE;
  return NULL;
}

kiln_status_t kiln_infer_set_value(kiln_infer_t* ctx, int32_t i, const kiln_array_t* value) {
  if (i >= ctx->n_out || !ctx->out[i]) return NULL;
  kiln_tensor_t* t = ctx->out[i];
  t->dtype = value->dtype;
  t->shape = value->shape;
  if (ctx->runtime || !ctx->graph) return NULL; /* the kernel computes it anyway */
  return store_value(ctx->graph, t, value);
}

void kiln_broadcast_strides(const kiln_shape_t* s, const kiln_shape_t* out,
                            int64_t* strides) {
  int32_t off = out->rank - s->rank;
  int64_t st = 1;
  for (int32_t i = out->rank - 1; i >= 0; --i) {
    int32_t k = i - off;
    if (k < 0) {
      strides[i] = 0;
      continue;
    }
    strides[i] = (s->dims[k] == 1 && out->dims[i] != 1) ? 0 : st;
    st *= s->dims[k];
  }
}

/* ---- the inference driver ------------------------------------------- */

static const char* src_of(const kiln_graph_t* g) {
  return g->source && g->source[0] ? g->source : "graph";
}

/* Computes the outputs of node |ni| with its reference kernel when every
 * input is a known constant and the outputs are small. */
static kiln_status_t try_fold(kiln_graph_t* g, int32_t ni) {
  kiln_node_t* n = &g->nodes[ni];
  /* kernels that size their outputs fold in their own infer, and subgraphs
   * need an executor */
  if (!n->schema->run || n->n_outputs == 0 || kiln_op_sizes_outputs(n)) return NULL;
  for (int32_t j = 0; j < n->n_inputs; ++j) {
    int32_t t = n->inputs[j];
    if (t >= 0 && !((g->tensors[t].flags & KILN_TENSOR_CONST) && g->tensors[t].value.data))
      return NULL;
  }
  bool all_known = true;
  for (int32_t j = 0; j < n->n_outputs; ++j) {
    int32_t t = n->outputs[j];
    if (t < 0) continue;
    kiln_tensor_t* tt = &g->tensors[t];
    if (!(tt->flags & KILN_TENSOR_CONST)) all_known = false;
    int64_t numel = 0;
    if (!kiln_shape_is_static(&tt->shape) || !kiln_dtype_size(tt->dtype)) return NULL;
    kiln_status_t ns = kiln_shape_numel(&tt->shape, &numel);
    if (ns) {
      kiln_status_free(ns); /* too big to fold; run time reports the size */
      return NULL;
    }
    if (numel > FOLD_MAX_ELEMENTS) return NULL;
  }
  if (all_known) return NULL;
  kiln_array_t outs[KILN_MAX_NODE_OUTPUTS];
  kiln_array_t* outp[KILN_MAX_NODE_OUTPUTS];
  const kiln_array_t* inp[KILN_MAX_NODE_INPUTS];
  if (n->n_outputs > KILN_MAX_NODE_OUTPUTS || n->n_inputs > KILN_MAX_NODE_INPUTS) return NULL;
  memset(outs, 0, sizeof outs);
  kiln_status_t s = NULL;
  for (int32_t j = 0; j < n->n_outputs && !s; ++j) {
    int32_t t = n->outputs[j];
    outp[j] = NULL;
    if (t < 0) continue;
    s = kiln_array_alloc(g->allocator, g->tensors[t].dtype, &g->tensors[t].shape, &outs[j]);
    outp[j] = &outs[j];
  }
  for (int32_t j = 0; j < n->n_inputs; ++j)
    inp[j] = n->inputs[j] >= 0 ? &g->tensors[n->inputs[j]].value : NULL;
  if (!s) {
    kiln_ref_ctx_t rc = {n, g->opset, n->n_inputs, inp, n->n_outputs, outp, g->allocator, NULL, NULL};
    s = n->schema->run(&rc);
  }
  for (int32_t j = 0; j < n->n_outputs && !s; ++j) {
    int32_t t = n->outputs[j];
    if (t < 0 || (g->tensors[t].flags & KILN_TENSOR_CONST)) continue;
    kiln_tensor_t* tt = &g->tensors[t];
    tt->value = outs[j];
    tt->flags |= KILN_TENSOR_CONST | OWNED_VALUE;
    outs[j].data = NULL;
  }
  for (int32_t j = 0; j < n->n_outputs; ++j) kiln_array_free(g->allocator, &outs[j]);
  return s;
}

/* True when the known dims of |sh| (symbols count as 1) times the element
 * size overflow int64: such a tensor can never be allocated. */
static bool bytes_overflow(const kiln_shape_t* sh, kiln_dtype_t dt) {
  int64_t n = (int64_t)(kiln_dtype_size(dt) ? kiln_dtype_size(dt) : 1);
  for (int32_t d = 0; d < sh->rank; ++d)
    if (sh->dims[d] >= 0 && __builtin_mul_overflow(n, sh->dims[d], &n)) return true;
  return false;
}

kiln_status_t kiln_graph_infer(kiln_graph_t* g) {
  kiln_tensor_t* in[KILN_MAX_NODE_INPUTS];
  kiln_tensor_t* out[KILN_MAX_NODE_OUTPUTS];
  /* Graph inputs are declared, not inferred: the same size check as node
   * outputs get below, before anything sizes a buffer from them. */
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    const kiln_tensor_t* t = &g->tensors[g->inputs[i]];
    if (bytes_overflow(&t->shape, t->dtype)) {
      char b[256];
      return kiln_make_status(KILN_LIMIT_EXCEEDED,
                              "%s: graph input '%s' of shape %s is too large (its byte size "
                              "overflows int64)",
                              src_of(g), t->name, kiln_graph_format_shape(g, &t->shape, b, sizeof b));
    }
  }
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    kiln_node_t* n = &g->nodes[i];
    const kiln_op_schema_t* s = n->schema;
    if (!s)
      return kiln_make_status(KILN_INTERNAL, "node '%s' (%s) has no schema (resolve_ops first)",
                              n->name, n->op_type);
    int32_t present = n->n_inputs;
    while (present > 0 && n->inputs[present - 1] < 0) --present;
    if (present < s->min_inputs || (s->max_inputs >= 0 && n->n_inputs > s->max_inputs &&
                                    present > s->max_inputs))
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: node '%s' (%s) has %d inputs, expects %d..%d", src_of(g),
                              n->name, n->op_type, present, s->min_inputs,
                              s->max_inputs < 0 ? 9999 : s->max_inputs);
    if (n->n_outputs < s->min_outputs || (s->max_outputs >= 0 && n->n_outputs > s->max_outputs))
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: node '%s' (%s) has %d outputs, expects %d..%d", src_of(g),
                              n->name, n->op_type, n->n_outputs, s->min_outputs, s->max_outputs);
    if (n->n_inputs > KILN_MAX_NODE_INPUTS || n->n_outputs > KILN_MAX_NODE_OUTPUTS)
      return kiln_make_status(KILN_UNSUPPORTED, "%s: node '%s' (%s) has %d inputs and %d outputs; kiln allows %d and %d",
                              src_of(g), n->name, n->op_type, n->n_inputs, n->n_outputs,
                              KILN_MAX_NODE_INPUTS, KILN_MAX_NODE_OUTPUTS);
    for (int32_t j = 0; j < s->min_inputs && j < n->n_inputs; ++j)
      if (n->inputs[j] < 0)
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "%s: node '%s' (%s) is missing required input %d", src_of(g),
                                n->name, n->op_type, j);
    for (int32_t j = 0; j < n->n_inputs; ++j) {
      in[j] = n->inputs[j] >= 0 ? &g->tensors[n->inputs[j]] : NULL;
      if (in[j] && in[j]->dtype == KILN_DTYPE_UNDEFINED)
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "%s: node '%s' (%s) input '%s' has an undefined element type",
                                src_of(g), n->name, n->op_type, in[j]->name);
    }
    for (int32_t j = 0; j < n->n_outputs; ++j)
      out[j] = n->outputs[j] >= 0 ? &g->tensors[n->outputs[j]] : NULL;
    kiln_infer_t ctx = {g, n, g->opset, n->n_inputs, in, n->n_outputs, out, g->allocator, false};
    KILN_RETURN_IF_ERROR(s->infer(&ctx), "%s: node '%s' (%s)", src_of(g), n->name, n->op_type);
    for (int32_t j = 0; j < n->n_outputs; ++j) {
      if (!out[j]) continue;
      if (out[j]->dtype == KILN_DTYPE_UNDEFINED)
        return kiln_make_status(KILN_INTERNAL, "%s: node '%s' (%s): output '%s' not inferred",
                                src_of(g), n->name, n->op_type, out[j]->name);
      /* A shape whose size overflows can never be allocated: say so now. */
      if (bytes_overflow(&out[j]->shape, out[j]->dtype)) {
        char b[256];
        return kiln_make_status(KILN_LIMIT_EXCEEDED,
                                "%s: node '%s' (%s): output '%s' of shape %s is too large (its "
                                "byte size overflows int64)",
                                src_of(g), n->name, n->op_type, out[j]->name,
                                kiln_graph_format_shape(g, &out[j]->shape, b, sizeof b));
      }
    }
    KILN_RETURN_IF_ERROR(try_fold(g, i), "%s: node '%s' (%s)", src_of(g), n->name, n->op_type);
  }
  return NULL;
}
