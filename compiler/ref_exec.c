/* Reference executor: shape inference and a reference kernel per node, in
 * topological order, freeing each intermediate after its last reader. */
#include "compiler/ref_exec.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

void kiln_ref_options_default(kiln_ref_options_t* o) {
  memset(o, 0, sizeof(*o));
  o->allocator = kiln_allocator_system();
  o->max_tensor_bytes = (int64_t)16 << 30;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char* src_of(const kiln_graph_t* g) {
  return g->source && g->source[0] ? g->source : "graph";
}

kiln_status_t kiln_check_input(const kiln_graph_t* g, int32_t input, const kiln_array_t* arr,
                               int64_t* sym_val) {
  const kiln_tensor_t* t = &g->tensors[g->inputs[input]];
  char want[256], got[256];
  if (!arr->data && arr->nbytes)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "input '%s' has no data", t->name);
  bool ok = arr->dtype == t->dtype;
  if (t->shape.rank >= 0 && arr->shape.rank != t->shape.rank) ok = false;
  for (int32_t i = 0; ok && t->shape.rank >= 0 && i < t->shape.rank; ++i) {
    int64_t d = t->shape.dims[i], a = arr->shape.dims[i];
    int32_t sym = kiln_dim_symbol(d);
    if (d >= 0 && d != a) ok = false;
    if (sym) {
      if (sym_val[sym] < 0) sym_val[sym] = a;
      else if (sym_val[sym] != a) ok = false;
    }
  }
  if (!ok)
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: input '%s': expected %s%s, got %s%s", src_of(g), t->name,
                            kiln_dtype_name(t->dtype),
                            kiln_graph_format_shape(g, &t->shape, want, sizeof want),
                            kiln_dtype_name(arr->dtype),
                            kiln_shape_format(&arr->shape, got, sizeof got));
  size_t need = (size_t)kiln_shape_count(&arr->shape) * kiln_dtype_size(arr->dtype);
  if (arr->nbytes < need)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "input '%s': %zu bytes of data, shape needs %zu",
                            t->name, arr->nbytes, need);
  return NULL;
}

/* kiln_ref_ctx_t.run_graph: a subgraph (If branch, Loop/Scan body) on the
 * reference kernels, with the same options. */
static kiln_status_t run_subgraph(void* user, const kiln_graph_t* g, const kiln_array_t* inputs,
                                  kiln_array_t* outputs) {
  return kiln_ref_run(g, inputs, (const kiln_ref_options_t*)user, outputs);
}

/* After a kernel that sized its outputs: each present output allocated and
 * within the tensor limit; marks them owned. */
static kiln_status_t check_sized(const kiln_node_t* n, kiln_array_t* const* aout, const kiln_ref_options_t* o,
                                 uint8_t* owned) {
  kiln_status_t s = NULL;
  for (int32_t j = 0; j < n->n_outputs; ++j) {
    if (!aout[j]) continue;
    owned[n->outputs[j]] = 1;
    size_t want = (size_t)kiln_shape_count(&aout[j]->shape) * kiln_dtype_size(aout[j]->dtype);
    if (!s && (!kiln_dtype_size(aout[j]->dtype) || aout[j]->nbytes < want))
      s = kiln_make_status(KILN_INTERNAL, "output %d was not sized by the kernel", j);
    else if (!s && (int64_t)aout[j]->nbytes > o->max_tensor_bytes)
      s = kiln_make_status(KILN_LIMIT_EXCEEDED, "output %d: %zu bytes exceed the %lld-byte tensor limit", j,
                           aout[j]->nbytes, (long long)o->max_tensor_bytes);
  }
  return s;
}

kiln_status_t kiln_ref_node_run(const kiln_graph_t* g, int32_t ni, kiln_array_t* vals, uint8_t* owned,
                                const kiln_ref_options_t* options,
                                kiln_status_t (*run_graph)(void*, const kiln_graph_t*, const kiln_array_t*,
                                                           kiln_array_t*),
                                void* run_graph_user, kiln_array_t** aout, double* out_seconds) {
  const kiln_node_t* n = &g->nodes[ni];
  kiln_allocator_t a = options->allocator;
  kiln_status_t s = NULL;
  kiln_tensor_t tin[KILN_MAX_NODE_INPUTS], tout[KILN_MAX_NODE_OUTPUTS];
  kiln_tensor_t* pin[KILN_MAX_NODE_INPUTS];
  kiln_tensor_t* pout[KILN_MAX_NODE_OUTPUTS];
  const kiln_array_t* ain[KILN_MAX_NODE_INPUTS];
  for (int32_t j = 0; j < n->n_inputs; ++j) {
    int32_t t = n->inputs[j];
    pin[j] = NULL;
    ain[j] = NULL;
    if (t < 0) continue;
    memset(&tin[j], 0, sizeof tin[j]);
    tin[j].name = g->tensors[t].name;
    tin[j].dtype = vals[t].dtype;
    tin[j].shape = vals[t].shape;
    tin[j].producer = g->tensors[t].producer;
    tin[j].flags = KILN_TENSOR_CONST;
    tin[j].value = vals[t];
    pin[j] = &tin[j];
    ain[j] = &vals[t];
  }
  for (int32_t j = 0; j < n->n_outputs; ++j) {
    pout[j] = NULL;
    aout[j] = NULL;
    if (n->outputs[j] < 0) continue;
    memset(&tout[j], 0, sizeof tout[j]);
    tout[j].name = g->tensors[n->outputs[j]].name;
    tout[j].shape = kiln_shape_unknown();
    tout[j].producer = ni;
    pout[j] = &tout[j];
  }
  kiln_infer_t ic = {(kiln_graph_t*)g, n, g->opset, n->n_inputs, pin, n->n_outputs, pout, a, true};
  if ((s = n->schema->infer(&ic))) {
    s = kiln_status_annotate(s, "%s: node '%s' (%s)", src_of(g), n->name, n->op_type);
    return s;
  }
  /* Outputs sized by values or by a subgraph: the kernel allocates them
   * once it knows (kiln_op_sizes_outputs). */
  const bool sizes = kiln_op_sizes_outputs(n);
  for (int32_t j = 0; j < n->n_outputs; ++j) {
    int32_t t = n->outputs[j];
    if (t < 0) continue;
    if (sizes) {
      memset(&vals[t], 0, sizeof vals[t]);
      aout[j] = &vals[t];
      continue;
    }
    if (!kiln_shape_is_static(&tout[j].shape)) {
      s = kiln_make_status(KILN_INTERNAL, "%s: node '%s' (%s): output '%s' shape not static at run time",
                           src_of(g), n->name, n->op_type, tout[j].name);
      return s;
    }
    int64_t numel = 0;
    if ((s = kiln_shape_numel(&tout[j].shape, &numel)) ||
        (numel > options->max_tensor_bytes / (int64_t)kiln_dtype_size(tout[j].dtype) &&
         (s = kiln_make_status(KILN_LIMIT_EXCEEDED,
                               "%lld elements of %s exceed the %lld-byte tensor limit",
                               (long long)numel, kiln_dtype_name(tout[j].dtype),
                               (long long)options->max_tensor_bytes))) ||
        (s = kiln_array_alloc(a, tout[j].dtype, &tout[j].shape, &vals[t]))) {
      s = kiln_status_annotate(s, "%s: node '%s' (%s) output '%s'", src_of(g), n->name,
                               n->op_type, tout[j].name);
      return s;
    }
    owned[t] = 1;
    aout[j] = &vals[t];
  }
  kiln_ref_ctx_t rc = {n, g->opset, n->n_inputs, ain, n->n_outputs, aout, a, run_graph, run_graph_user};
  double t0 = now_s();
  s = n->schema->run(&rc);
  *out_seconds = now_s() - t0;
  if (!s && sizes) s = check_sized(n, aout, options, owned);
  if (s) {
    s = kiln_status_annotate(s, "%s: node '%s' (%s)", src_of(g), n->name, n->op_type);
    return s;
  }
  return NULL;
}

kiln_status_t kiln_ref_run(const kiln_graph_t* g, const kiln_array_t* inputs,
                           const kiln_ref_options_t* options, kiln_array_t* outputs) {
  kiln_ref_options_t defaults;
  if (!options) {
    kiln_ref_options_default(&defaults);
    options = &defaults;
  }
  kiln_allocator_t a = options->allocator;
  int32_t nt = g->n_tensors;
  kiln_array_t* vals = NULL;
  uint8_t* owned = NULL;
  int32_t* last_use = NULL;
  int64_t* sym_val = NULL;
  kiln_status_t s = NULL;
  if ((s = kiln_allocator_malloc(a, sizeof(kiln_array_t) * (size_t)(nt + 1), "executor", (void**)&vals)) ||
      (s = kiln_allocator_malloc(a, (size_t)nt + 1, "executor", (void**)&owned)) ||
      (s = kiln_allocator_malloc(a, sizeof(int32_t) * (size_t)(nt + 1), "executor", (void**)&last_use)) ||
      (s = kiln_allocator_malloc(a, sizeof(int64_t) * (size_t)(g->n_symbols + 2), "executor",
                                 (void**)&sym_val)))
    goto done;
  for (int32_t i = 0; i <= g->n_symbols; ++i) sym_val[i] = -1;
  for (int32_t t = 0; t < nt; ++t) {
    last_use[t] = -1;
    if (g->tensors[t].flags & KILN_TENSOR_CONST) vals[t] = g->tensors[t].value;
  }
  for (int32_t i = 0; i < g->n_nodes; ++i)
    for (int32_t j = 0; j < g->nodes[i].n_inputs; ++j)
      if (g->nodes[i].inputs[j] >= 0) last_use[g->nodes[i].inputs[j]] = i;
  for (int32_t i = 0; i < g->n_outputs; ++i) last_use[g->outputs[i]] = INT32_MAX;

  for (int32_t i = 0; i < g->n_inputs; ++i) {
    if ((s = kiln_check_input(g, i, &inputs[i], sym_val))) goto done;
    vals[g->inputs[i]] = inputs[i];
  }

  for (int32_t ni = 0; ni < g->n_nodes; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    bool all_const = n->n_outputs > 0;
    for (int32_t j = 0; j < n->n_outputs; ++j)
      if (n->outputs[j] >= 0 && !(g->tensors[n->outputs[j]].flags & KILN_TENSOR_CONST))
        all_const = false;
    if (all_const) continue; /* folded at load time */
    kiln_array_t* aout[KILN_MAX_NODE_OUTPUTS];
    double dt = 0;
    if ((s = kiln_ref_node_run(g, ni, vals, owned, options, run_subgraph, (void*)options, aout, &dt))) goto done;
    if (options->on_node) options->on_node(options->user, g, ni, dt);
    if (options->on_outputs && (s = options->on_outputs(options->user, g, ni, aout))) goto done;
    for (int32_t j = 0; j < n->n_inputs; ++j) {
      int32_t t = n->inputs[j];
      if (t >= 0 && owned[t] && last_use[t] == ni) {
        kiln_array_free(a, &vals[t]);
        owned[t] = 0;
      }
    }
    /* Outputs nobody reads (e.g. optional masks) go at once. */
    for (int32_t j = 0; j < n->n_outputs; ++j) {
      int32_t t = n->outputs[j];
      if (t >= 0 && owned[t] && last_use[t] < 0) {
        kiln_array_free(a, &vals[t]);
        owned[t] = 0;
      }
    }
  }
  for (int32_t i = 0; i < g->n_outputs; ++i) {
    int32_t t = g->outputs[i];
    if (owned[t]) {
      outputs[i] = vals[t];
      owned[t] = 0;
      memset(&vals[t], 0, sizeof vals[t]);
    } else if ((s = kiln_array_clone(a, &vals[t], &outputs[i]))) {
      for (int32_t k = 0; k < i; ++k) kiln_array_free(a, &outputs[k]);
      goto done;
    }
  }
done:
  if (vals && owned)
    for (int32_t t = 0; t < nt; ++t)
      if (owned[t]) kiln_array_free(a, &vals[t]);
  kiln_allocator_free(a, vals);
  kiln_allocator_free(a, owned);
  kiln_allocator_free(a, last_use);
  kiln_allocator_free(a, sym_val);
  return s;
}
