/* The pruned graph in memory (see prune.h): a copy of the graph with the
 * plan's initializers sliced and attributes set, prepared again so that
 * shapes -- and constants folded from shapes -- follow the new channel
 * counts. Also its cost and its error against the original. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/prune.h"
#include "compiler/ref_exec.h"
#include "ir/op.h"

/* Keeps the positions of |a|'s axis |axis| whose |keep| byte is 1. */
static kiln_status_t slice(kiln_allocator_t al, const kiln_array_t* a, int32_t axis, const uint8_t* keep,
                           kiln_array_t* out) {
  kiln_shape_t s = a->shape;
  int64_t len = s.dims[axis], kept = 0;
  for (int64_t i = 0; i < len; ++i) kept += keep[i];
  s.dims[axis] = kept;
  KILN_RETURN_IF_ERROR(kiln_array_alloc(al, a->dtype, &s, out));
  size_t es = kiln_dtype_size(a->dtype);
  int64_t outer = 1, inner = 1;
  for (int32_t i = 0; i < axis; ++i) outer *= a->shape.dims[i];
  for (int32_t i = axis + 1; i < a->shape.rank; ++i) inner *= a->shape.dims[i];
  size_t row = (size_t)inner * es;
  const uint8_t* src = a->data;
  uint8_t* dst = out->data;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < len; ++i, src += row)
      if (keep[i]) memcpy(dst, src, row), dst += row;
  return NULL;
}

static kiln_status_t copy_init(kiln_graph_t* dst, const kiln_tensor_t* t, const kiln_prune_plan_t* p) {
  kiln_array_t cur;
  KILN_RETURN_IF_ERROR(kiln_array_clone(dst->allocator, &t->value, &cur), "initializer '%s'", t->name);
  for (int32_t i = 0; i < p->n_slices; ++i) {
    const kiln_prune_slice_t* sl = &p->slices[i];
    if (strcmp(sl->name, t->name)) continue;
    if (sl->axis >= cur.shape.rank || cur.shape.dims[sl->axis] != sl->len) {
      kiln_array_free(dst->allocator, &cur);
      return kiln_make_status(KILN_INTERNAL, "prune plan: initializer '%s' axis %d does not have %lld entries",
                              t->name, sl->axis, (long long)sl->len);
    }
    kiln_array_t next;
    kiln_status_t s = slice(dst->allocator, &cur, sl->axis, sl->keep, &next);
    kiln_array_free(dst->allocator, &cur);
    KILN_RETURN_IF_ERROR(s, "initializer '%s'", t->name);
    cur = next;
  }
  return kiln_graph_add_initializer(dst, t->name, &cur, NULL);
}

static kiln_status_t copy_node(kiln_graph_t* dst, const kiln_graph_t* g, const kiln_node_t* n,
                               const kiln_prune_plan_t* p) {
  const char* ins[KILN_MAX_NODE_INPUTS];
  const char* outs[KILN_MAX_NODE_OUTPUTS];
  for (int32_t j = 0; j < n->n_inputs; ++j) ins[j] = n->inputs[j] >= 0 ? g->tensors[n->inputs[j]].name : "";
  for (int32_t j = 0; j < n->n_outputs; ++j) outs[j] = n->outputs[j] >= 0 ? g->tensors[n->outputs[j]].name : "";
  kiln_attr_t* attrs = n->n_attrs ? malloc(sizeof(kiln_attr_t) * (size_t)n->n_attrs) : NULL;
  if (n->n_attrs && !attrs) return kiln_make_status(KILN_OUT_OF_MEMORY, "node '%s': out of memory", n->name);
  for (int32_t j = 0; j < n->n_attrs; ++j) {
    attrs[j] = n->attrs[j];
    for (int32_t k = 0; k < p->n_attrs; ++k)
      if (!strcmp(p->attrs[k].node, n->name) && !strcmp(p->attrs[k].attr, attrs[j].name)) attrs[j].i = p->attrs[k].value;
  }
  int32_t idx = -1;
  kiln_status_t s =
      kiln_graph_add_node(dst, n->op_type, n->name, n->n_inputs, ins, n->n_outputs, outs, n->n_attrs, attrs, &idx);
  free(attrs);
  KILN_RETURN_IF_ERROR(s);
  dst->nodes[idx].domain = kiln_graph_strdup(dst, n->domain);
  if (!dst->nodes[idx].domain) return kiln_make_status(KILN_OUT_OF_MEMORY, "node '%s': out of memory", n->name);
  return NULL;
}

static kiln_status_t build(kiln_graph_t* dst, const kiln_graph_t* g, const kiln_prune_plan_t* p) {
  dst->name = kiln_graph_strdup(dst, g->name ? g->name : "");
  dst->source = kiln_graph_strdup(dst, g->source ? g->source : "");
  for (int32_t i = 0; i < g->n_opsets; ++i)
    KILN_RETURN_IF_ERROR(kiln_graph_set_opset(dst, g->opsets[i].domain, g->opsets[i].version));
  for (int32_t i = 1; i <= g->n_symbols; ++i) {
    int32_t sym;
    KILN_RETURN_IF_ERROR(kiln_graph_symbol(dst, g->symbols[i], &sym));
  }
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    const kiln_tensor_t* t = &g->tensors[g->inputs[i]];
    KILN_RETURN_IF_ERROR(kiln_graph_add_input(dst, t->name, t->dtype, &t->shape, NULL));
    if (t->flags & KILN_TENSOR_CONST) KILN_RETURN_IF_ERROR(kiln_graph_bind_input_value(dst, i, &t->value));
  }
  for (int32_t i = 0; i < g->n_tensors; ++i) {
    const kiln_tensor_t* t = &g->tensors[i];
    if ((t->flags & KILN_TENSOR_INITIALIZER) && !(t->flags & KILN_TENSOR_INPUT))
      KILN_RETURN_IF_ERROR(copy_init(dst, t, p));
  }
  for (int32_t i = 0; i < g->n_nodes; ++i) KILN_RETURN_IF_ERROR(copy_node(dst, g, &g->nodes[i], p));
  for (int32_t i = 0; i < g->n_outputs; ++i)
    KILN_RETURN_IF_ERROR(kiln_graph_add_output(dst, g->tensors[g->outputs[i]].name));
  return NULL;
}

kiln_status_t kiln_prune_apply(const kiln_graph_t* g, const kiln_prune_plan_t* plan, bool prepare,
                               kiln_graph_t** out) {
  kiln_graph_t* dst = NULL;
  KILN_RETURN_IF_ERROR(kiln_graph_create(g->allocator, &dst));
  kiln_status_t s = build(dst, g, plan);
  if (!s && prepare) s = kiln_graph_prepare(dst);
  if (s) {
    kiln_graph_destroy(dst);
    return kiln_status_annotate(s, "the pruned graph");
  }
  *out = dst;
  return NULL;
}

void kiln_prune_cost(const kiln_graph_t* g, int64_t* out_params, int64_t* out_flops) {
  int64_t params = 0, flops = 0;
  for (int32_t i = 0; i < g->n_tensors; ++i)
    if (g->tensors[i].flags & KILN_TENSOR_INITIALIZER) params += kiln_shape_count(&g->tensors[i].shape);
  kiln_tensor_t* in[KILN_MAX_NODE_INPUTS];
  kiln_tensor_t* outs[KILN_MAX_NODE_OUTPUTS];
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    const kiln_node_t* n = &g->nodes[i];
    bool ok = n->schema && n->schema->flops;
    for (int32_t j = 0; j < n->n_inputs; ++j) {
      in[j] = n->inputs[j] >= 0 ? &g->tensors[n->inputs[j]] : NULL;
      if (in[j] && !kiln_shape_is_static(&in[j]->shape)) ok = false;
    }
    for (int32_t j = 0; j < n->n_outputs; ++j) {
      outs[j] = n->outputs[j] >= 0 ? &g->tensors[n->outputs[j]] : NULL;
      if (outs[j] && !kiln_shape_is_static(&outs[j]->shape)) ok = false;
    }
    if (!ok) continue;
    kiln_infer_t ic = {(kiln_graph_t*)g, n, g->opset, n->n_inputs, in, n->n_outputs, outs, g->allocator, false};
    int64_t f = n->schema->flops(&ic);
    if (f > 0) flops += f;
  }
  *out_params = params;
  *out_flops = flops;
}

kiln_status_t kiln_pruner_cost(const kiln_pruner_t* p, const int64_t* counts, int64_t* out_params,
                               int64_t* out_flops) {
  kiln_prune_plan_t plan;
  KILN_RETURN_IF_ERROR(kiln_pruner_plan(p, counts, &plan));
  kiln_graph_t* pg = NULL;
  kiln_status_t s = kiln_prune_apply(p->g, &plan, true, &pg);
  kiln_prune_plan_free(&plan);
  KILN_RETURN_IF_ERROR(s);
  kiln_prune_cost(pg, out_params, out_flops);
  kiln_graph_destroy(pg);
  return NULL;
}

kiln_status_t kiln_pruner_set_samples(kiln_pruner_t* p, const kiln_array_t* inputs, int32_t n) {
  const kiln_graph_t* g = p->g;
  p->want = calloc((size_t)n * (size_t)g->n_outputs + 1, sizeof(kiln_array_t));
  if (!p->want) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory (calibration outputs)");
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  p->inputs = inputs;
  p->n = n;
  for (int32_t k = 0; k < n; ++k)
    KILN_RETURN_IF_ERROR(kiln_ref_run(g, &inputs[(size_t)k * g->n_inputs], &ro, &p->want[(size_t)k * g->n_outputs]),
                         "calibration sample %d", k);
  return NULL;
}

static int64_t argmax(const kiln_array_t* a) {
  int64_t n = kiln_shape_count(&a->shape), best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (kiln_load_f64(a->dtype, a->data, (size_t)i) > kiln_load_f64(a->dtype, a->data, (size_t)best)) best = i;
  return best;
}

kiln_status_t kiln_pruner_error(const kiln_pruner_t* p, const int64_t* counts, double* out_err, double* out_agree) {
  if (!p->n) return kiln_make_status(KILN_INVALID_ARGUMENT, "measuring the pruned outputs needs calibration samples");
  kiln_prune_plan_t plan;
  KILN_RETURN_IF_ERROR(kiln_pruner_plan(p, counts, &plan));
  kiln_graph_t* pg = NULL;
  kiln_status_t s = kiln_prune_apply(p->g, &plan, true, &pg);
  kiln_prune_plan_free(&plan);
  KILN_RETURN_IF_ERROR(s);
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  const int32_t no = p->g->n_outputs;
  kiln_array_t* got = calloc((size_t)no + 1, sizeof(kiln_array_t));
  if (!got) s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory");
  double worst = 0, scale = 0;
  int32_t agree = 0;
  for (int32_t k = 0; !s && k < p->n; ++k) {
    s = kiln_ref_run(pg, &p->inputs[(size_t)k * p->g->n_inputs], &ro, got);
    if (s) {
      s = kiln_status_annotate(s, "the pruned graph on calibration sample %d", k);
      break;
    }
    for (int32_t o = 0; o < no; ++o) {
      const kiln_array_t* w = &p->want[(size_t)k * no + o];
      int64_t m = kiln_shape_count(&w->shape);
      if (kiln_dtype_is_float(w->dtype) && kiln_shape_count(&got[o].shape) == m)
        for (int64_t i = 0; i < m; ++i) {
          double a = kiln_load_f64(got[o].dtype, got[o].data, (size_t)i), b = kiln_load_f64(w->dtype, w->data, (size_t)i);
          worst = fmax(worst, fabs(a - b));
          scale = fmax(scale, fabs(b));
        }
      if (o == 0) agree += argmax(&got[0]) == argmax(w);
      kiln_array_free(ro.allocator, &got[o]);
    }
  }
  free(got);
  kiln_graph_destroy(pg);
  KILN_RETURN_IF_ERROR(s);
  *out_err = scale > 0 ? worst / scale : worst;
  if (out_agree) *out_agree = (double)agree / p->n;
  return NULL;
}
