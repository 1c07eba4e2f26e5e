/* Graph IR construction, lookup, topological ordering and verification. */
#include "ir/graph.h"

#include <stdlib.h>
#include <string.h>

#include "ir/op.h"

/* Internal flag: the tensor's value.data was allocated with the graph's
 * allocator and is freed with the graph. */
#define OWNED_VALUE (1u << 31)

kiln_status_t kiln_graph_create(kiln_allocator_t allocator,
                                kiln_graph_t** out_graph) {
  kiln_graph_t* g = NULL;
  KILN_RETURN_IF_ERROR(
      kiln_allocator_malloc(allocator, sizeof(*g), "graph", (void**)&g));
  g->allocator = allocator;
  kiln_arena_init(&g->arena, allocator);
  g->name = "";
  g->source = "";
  *out_graph = g;
  return NULL;
}

void kiln_graph_destroy(kiln_graph_t* g) {
  if (!g) return;
  kiln_allocator_t a = g->allocator;
  for (int32_t i = 0; i < g->n_tensors; ++i)
    if (g->tensors[i].flags & OWNED_VALUE) kiln_allocator_free(a, g->tensors[i].value.data);
  kiln_allocator_free(a, g->tensors);
  kiln_allocator_free(a, g->nodes);
  kiln_allocator_free(a, g->inputs);
  kiln_allocator_free(a, g->outputs);
  kiln_allocator_free(a, g->symbols);
  kiln_allocator_free(a, g->opsets);
  kiln_allocator_free(a, g->name_table);
  for (int32_t i = 0; i < g->n_subgraphs; ++i) kiln_graph_destroy(g->subgraphs[i]);
  kiln_allocator_free(a, g->subgraphs);
  kiln_allocator_free(a, g->datadep);
  kiln_arena_deinit(&g->arena);
  kiln_allocator_free(a, g);
}

const char* kiln_graph_strdup(kiln_graph_t* g, const char* s) {
  return kiln_arena_strndup(&g->arena, s ? s : "", s ? strlen(s) : 0);
}

/* Grows |*arr| (elements of |elem| bytes) to hold |need| elements. */
static kiln_status_t grow(kiln_graph_t* g, void** arr, int32_t* cap,
                          int32_t need, size_t elem, const char* what) {
  if (need <= *cap) return NULL;
  if (need > INT32_MAX / 2)
    return kiln_make_status(KILN_LIMIT_EXCEEDED, "too many %s", what);
  int32_t nc = *cap ? *cap : 16;
  while (nc < need) nc *= 2;
  void* p = *arr;
  if (!p) {
    KILN_RETURN_IF_ERROR(kiln_allocator_malloc(g->allocator, (size_t)nc * elem, what, &p));
  } else {
    KILN_RETURN_IF_ERROR(kiln_allocator_realloc(g->allocator, (size_t)nc * elem, what, &p));
    memset((char*)p + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
  }
  *arr = p;
  *cap = nc;
  return NULL;
}

/* ---- name table ------------------------------------------------------ */

static uint64_t hash_str(const char* s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; ++s) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static void table_insert(int32_t* table, int32_t cap, const kiln_tensor_t* ts,
                         int32_t index) {
  uint64_t h = hash_str(ts[index].name);
  for (int32_t k = 0;; ++k) {
    int32_t slot = (int32_t)((h + (uint64_t)k) & (uint64_t)(cap - 1));
    if (table[slot] < 0) {
      table[slot] = index;
      return;
    }
  }
}

static kiln_status_t table_grow(kiln_graph_t* g) {
  int32_t cap = g->name_table_cap ? g->name_table_cap * 2 : 64;
  int32_t* t = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(g->allocator, sizeof(int32_t) * (size_t)cap,
                                             "tensor name table", (void**)&t));
  for (int32_t i = 0; i < cap; ++i) t[i] = -1;
  for (int32_t i = 0; i < g->n_tensors; ++i) table_insert(t, cap, g->tensors, i);
  kiln_allocator_free(g->allocator, g->name_table);
  g->name_table = t;
  g->name_table_cap = cap;
  return NULL;
}

int32_t kiln_graph_find_tensor(const kiln_graph_t* g, const char* name) {
  if (!g->name_table_cap || !name) return -1;
  uint64_t h = hash_str(name);
  for (int32_t k = 0; k < g->name_table_cap; ++k) {
    int32_t slot = (int32_t)((h + (uint64_t)k) & (uint64_t)(g->name_table_cap - 1));
    int32_t idx = g->name_table[slot];
    if (idx < 0) return -1;
    if (strcmp(g->tensors[idx].name, name) == 0) return idx;
  }
  return -1;
}

kiln_status_t kiln_graph_get_or_add_tensor(kiln_graph_t* g, const char* name,
                                           int32_t* out_index) {
  int32_t idx = kiln_graph_find_tensor(g, name);
  if (idx >= 0) {
    *out_index = idx;
    return NULL;
  }
  KILN_RETURN_IF_ERROR(grow(g, (void**)&g->tensors, &g->cap_tensors, g->n_tensors + 1,
                            sizeof(kiln_tensor_t), "tensors"));
  if ((int64_t)(g->n_tensors + 1) * 2 > g->name_table_cap) KILN_RETURN_IF_ERROR(table_grow(g));
  kiln_tensor_t* t = &g->tensors[g->n_tensors];
  memset(t, 0, sizeof(*t));
  t->name = kiln_graph_strdup(g, name);
  if (!t->name)
    return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory naming tensor");
  t->shape = kiln_shape_unknown();
  t->producer = -1;
  idx = g->n_tensors++;
  table_insert(g->name_table, g->name_table_cap, g->tensors, idx);
  *out_index = idx;
  return NULL;
}

/* Distinct dim_param names a graph may use; real models have a handful, and
 * the lookup below is linear. */
#define KILN_MAX_SYMBOLS 4096

kiln_status_t kiln_graph_symbol(kiln_graph_t* g, const char* name,
                                int32_t* out_sym) {
  for (int32_t i = 1; i <= g->n_symbols; ++i)
    if (strcmp(g->symbols[i], name) == 0) {
      *out_sym = i;
      return NULL;
    }
  if (g->n_symbols >= KILN_MAX_SYMBOLS)
    return kiln_make_status(KILN_LIMIT_EXCEEDED,
                            "more than %d distinct symbolic dimension names (dim_param '%s')",
                            KILN_MAX_SYMBOLS, name);
  KILN_RETURN_IF_ERROR(grow(g, (void**)&g->symbols, &g->cap_symbols, g->n_symbols + 2,
                            sizeof(char*), "symbols"));
  const char* s = kiln_graph_strdup(g, name);
  if (!s) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory naming a symbol");
  g->symbols[++g->n_symbols] = s;
  *out_sym = g->n_symbols;
  return NULL;
}

/* ---- building -------------------------------------------------------- */

kiln_status_t kiln_graph_add_input(kiln_graph_t* g, const char* name,
                                   kiln_dtype_t dtype, const kiln_shape_t* shape,
                                   int32_t* out_index) {
  if (!name || !name[0])
    return kiln_make_status(KILN_INVALID_ARGUMENT, "graph input with an empty name");
  if (kiln_graph_find_tensor(g, name) >= 0)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "duplicate tensor name '%s'", name);
  int32_t idx;
  KILN_RETURN_IF_ERROR(kiln_graph_get_or_add_tensor(g, name, &idx));
  KILN_RETURN_IF_ERROR(grow(g, (void**)&g->inputs, &g->cap_inputs, g->n_inputs + 1,
                            sizeof(int32_t), "graph inputs"));
  kiln_tensor_t* t = &g->tensors[idx];
  t->dtype = dtype;
  t->shape = *shape;
  t->flags |= KILN_TENSOR_INPUT;
  g->inputs[g->n_inputs++] = idx;
  if (out_index) *out_index = idx;
  return NULL;
}

kiln_status_t kiln_graph_add_initializer(kiln_graph_t* g, const char* name,
                                         kiln_array_t* value, int32_t* out_index) {
  if (!name || !name[0]) {
    kiln_array_free(g->allocator, value);
    return kiln_make_status(KILN_INVALID_ARGUMENT, "initializer with an empty name");
  }
  if (kiln_graph_find_tensor(g, name) >= 0) {
    kiln_array_free(g->allocator, value);
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "duplicate tensor name '%s' (initializer)", name);
  }
  int32_t idx;
  kiln_status_t s = kiln_graph_get_or_add_tensor(g, name, &idx);
  if (s) {
    kiln_array_free(g->allocator, value);
    return s;
  }
  kiln_tensor_t* t = &g->tensors[idx];
  t->dtype = value->dtype;
  t->shape = value->shape;
  t->value = *value;
  t->flags |= KILN_TENSOR_INITIALIZER | KILN_TENSOR_CONST | OWNED_VALUE;
  memset(value, 0, sizeof(*value));
  if (out_index) *out_index = idx;
  return NULL;
}

kiln_status_t kiln_graph_bind_input_value(kiln_graph_t* g, int32_t input_index,
                                          const kiln_array_t* value) {
  if (input_index < 0 || input_index >= g->n_inputs)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "no graph input #%d", input_index);
  kiln_tensor_t* t = &g->tensors[g->inputs[input_index]];
  if (value->dtype != t->dtype)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "input '%s': value is %s, input is %s", t->name,
                            kiln_dtype_name(value->dtype), kiln_dtype_name(t->dtype));
  kiln_array_t copy;
  KILN_RETURN_IF_ERROR(kiln_array_clone(g->allocator, value, &copy), "input '%s'", t->name);
  if (t->flags & OWNED_VALUE) kiln_allocator_free(g->allocator, t->value.data);
  t->value = copy;
  t->shape = copy.shape;
  t->flags |= KILN_TENSOR_CONST | OWNED_VALUE;
  return NULL;
}

bool kiln_graph_all_static(const kiln_graph_t* g) {
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    const kiln_node_t* n = &g->nodes[i];
    for (int32_t j = 0; j < n->n_inputs; ++j)
      if (n->inputs[j] >= 0 && !kiln_shape_is_static(&g->tensors[n->inputs[j]].shape)) return false;
    for (int32_t j = 0; j < n->n_outputs; ++j)
      if (n->outputs[j] >= 0 && !kiln_shape_is_static(&g->tensors[n->outputs[j]].shape))
        return false;
  }
  return true;
}

kiln_status_t kiln_graph_add_output(kiln_graph_t* g, const char* name) {
  if (!name || !name[0])
    return kiln_make_status(KILN_INVALID_ARGUMENT, "graph output with an empty name");
  int32_t idx;
  KILN_RETURN_IF_ERROR(kiln_graph_get_or_add_tensor(g, name, &idx));
  if (g->tensors[idx].flags & KILN_TENSOR_OUTPUT)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "graph output '%s' listed twice", name);
  KILN_RETURN_IF_ERROR(grow(g, (void**)&g->outputs, &g->cap_outputs, g->n_outputs + 1,
                            sizeof(int32_t), "graph outputs"));
  g->tensors[idx].flags |= KILN_TENSOR_OUTPUT;
  g->outputs[g->n_outputs++] = idx;
  return NULL;
}

static kiln_status_t copy_attr(kiln_graph_t* g, const kiln_attr_t* src,
                               kiln_attr_t* dst) {
  kiln_arena_t* ar = &g->arena;
  *dst = *src;
  dst->name = kiln_graph_strdup(g, src->name);
  if (!dst->name) goto oom;
  if (src->s) {
    dst->s = kiln_arena_strndup(ar, src->s, src->s_len);
    if (!dst->s) goto oom;
  }
  if (src->count > 0 && src->floats) {
    float* f = kiln_arena_alloc(ar, sizeof(float) * (size_t)src->count);
    if (!f) goto oom;
    memcpy(f, src->floats, sizeof(float) * (size_t)src->count);
    dst->floats = f;
  }
  if (src->count > 0 && src->ints) {
    int64_t* v = kiln_arena_alloc(ar, sizeof(int64_t) * (size_t)src->count);
    if (!v) goto oom;
    memcpy(v, src->ints, sizeof(int64_t) * (size_t)src->count);
    dst->ints = v;
  }
  if (src->count > 0 && src->strings) {
    const char** v = kiln_arena_alloc(ar, sizeof(char*) * (size_t)src->count);
    if (!v) goto oom;
    for (int64_t i = 0; i < src->count; ++i) {
      v[i] = kiln_graph_strdup(g, src->strings[i]);
      if (!v[i]) goto oom;
    }
    dst->strings = v;
  }
  if (src->tensor) {
    int64_t n = src->type == KILN_ATTR_TENSORS ? src->count : 1;
    kiln_array_t* t = kiln_arena_alloc(ar, sizeof(kiln_array_t) * (size_t)(n ? n : 1));
    if (!t) goto oom;
    for (int64_t i = 0; i < n; ++i) {
      t[i] = src->tensor[i];
      t[i].data = kiln_arena_alloc(ar, src->tensor[i].nbytes);
      if (!t[i].data) goto oom;
      if (src->tensor[i].nbytes) memcpy(t[i].data, src->tensor[i].data, src->tensor[i].nbytes);
    }
    dst->tensor = t;
  }
  return NULL;
oom:
  return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory copying attribute '%s'",
                          src->name ? src->name : "");
}

kiln_status_t kiln_graph_add_node(kiln_graph_t* g, const char* op_type,
                                  const char* name, int32_t n_inputs,
                                  const char* const* inputs, int32_t n_outputs,
                                  const char* const* outputs, int32_t n_attrs,
                                  const kiln_attr_t* attrs, int32_t* out_node) {
  if (!op_type || !op_type[0])
    return kiln_make_status(KILN_INVALID_ARGUMENT, "node '%s' has no op_type",
                            name ? name : "");
  KILN_RETURN_IF_ERROR(grow(g, (void**)&g->nodes, &g->cap_nodes, g->n_nodes + 1,
                            sizeof(kiln_node_t), "nodes"));
  int32_t ni = g->n_nodes;
  kiln_node_t* n = &g->nodes[ni];
  memset(n, 0, sizeof(*n));
  n->op_type = kiln_graph_strdup(g, op_type);
  n->domain = kiln_graph_strdup(g, "");
  if (name && name[0]) {
    n->name = kiln_graph_strdup(g, name);
  } else {
    char buf[96];
    snprintf(buf, sizeof buf, "%.60s_%d", op_type, ni);
    n->name = kiln_graph_strdup(g, buf);
  }
  if (!n->op_type || !n->name || !n->domain)
    return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory adding node");
  void* p;
  KILN_RETURN_IF_ERROR(kiln_arena_calloc(&g->arena, (size_t)(n_inputs + 1), sizeof(int32_t),
                                         "node inputs", &p));
  n->inputs = p;
  KILN_RETURN_IF_ERROR(kiln_arena_calloc(&g->arena, (size_t)(n_outputs + 1), sizeof(int32_t),
                                         "node outputs", &p));
  n->outputs = p;
  KILN_RETURN_IF_ERROR(kiln_arena_calloc(&g->arena, (size_t)(n_attrs + 1), sizeof(kiln_attr_t),
                                         "node attributes", &p));
  n->attrs = p;
  for (int32_t i = 0; i < n_attrs; ++i) {
    for (int32_t j = 0; j < i; ++j)
      if (strcmp(attrs[i].name, attrs[j].name) == 0)
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "node '%s' (%s): attribute '%s' given twice", n->name,
                                n->op_type, attrs[i].name);
    KILN_RETURN_IF_ERROR(copy_attr(g, &attrs[i], &n->attrs[i]));
  }
  n->n_attrs = n_attrs;
  for (int32_t i = 0; i < n_inputs; ++i) {
    if (!inputs[i] || !inputs[i][0]) {
      n->inputs[i] = -1;
      continue;
    }
    KILN_RETURN_IF_ERROR(kiln_graph_get_or_add_tensor(g, inputs[i], &n->inputs[i]));
  }
  n->n_inputs = n_inputs;
  for (int32_t i = 0; i < n_outputs; ++i) {
    if (!outputs[i] || !outputs[i][0]) {
      n->outputs[i] = -1;
      continue;
    }
    int32_t t;
    KILN_RETURN_IF_ERROR(kiln_graph_get_or_add_tensor(g, outputs[i], &t));
    for (int32_t j = 0; j < i; ++j)
      if (n->outputs[j] == t)
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "duplicate tensor name: node '%s' (%s) lists output '%s' twice",
                                n->name, n->op_type, outputs[i]);
    kiln_tensor_t* tt = &g->tensors[t];
    if (tt->producer >= 0 || (tt->flags & (KILN_TENSOR_INPUT | KILN_TENSOR_INITIALIZER)))
      return kiln_make_status(
          KILN_INVALID_ARGUMENT,
          "duplicate tensor name: node '%s' (%s) output '%s' is already %s", n->name,
          n->op_type, outputs[i],
          tt->producer >= 0 ? "produced by another node"
          : (tt->flags & KILN_TENSOR_INPUT) ? "a graph input" : "an initializer");
    tt->producer = ni;
    n->outputs[i] = t;
  }
  n->n_outputs = n_outputs;
  g->n_nodes++;
  if (out_node) *out_node = ni;
  return NULL;
}

kiln_status_t kiln_graph_set_opset(kiln_graph_t* g, const char* domain, int64_t version) {
  if (!domain) domain = "";
  bool onnx = !domain[0] || strcmp(domain, "ai.onnx") == 0;
  for (int32_t i = 0; i < g->n_opsets; ++i)
    if (strcmp(g->opsets[i].domain, domain) == 0) {
      g->opsets[i].version = version;
      if (onnx) g->opset = version;
      return NULL;
    }
  KILN_RETURN_IF_ERROR(grow(g, (void**)&g->opsets, &g->cap_opsets, g->n_opsets + 1,
                            sizeof(kiln_opset_t), "opset imports"));
  g->opsets[g->n_opsets].domain = kiln_graph_strdup(g, domain);
  if (!g->opsets[g->n_opsets].domain)
    return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory recording opsets");
  g->opsets[g->n_opsets].version = version;
  g->n_opsets++;
  if (onnx) g->opset = version;
  return NULL;
}

kiln_status_t kiln_graph_adopt_subgraph(kiln_graph_t* g, kiln_graph_t* sub) {
  kiln_status_t s = grow(g, (void**)&g->subgraphs, &g->cap_subgraphs, g->n_subgraphs + 1, sizeof(kiln_graph_t*),
                         "subgraphs");
  if (s) {
    kiln_graph_destroy(sub);
    return s;
  }
  g->subgraphs[g->n_subgraphs++] = sub;
  return NULL;
}

kiln_status_t kiln_graph_collect_outer(kiln_graph_t* sub) {
  int32_t nt = sub->n_tensors;
  uint8_t* used = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(sub->allocator, (size_t)nt + 1, "subgraph", (void**)&used));
  memset(used, 0, (size_t)nt + 1);
  for (int32_t i = 0; i < sub->n_nodes; ++i)
    for (int32_t j = 0; j < sub->nodes[i].n_inputs; ++j)
      if (sub->nodes[i].inputs[j] >= 0) used[sub->nodes[i].inputs[j]] = 1;
  kiln_status_t s = NULL;
  for (int32_t t = 0; t < nt && !s; ++t) {
    kiln_tensor_t* tt = &sub->tensors[t];
    if (tt->producer >= 0 || (tt->flags & (KILN_TENSOR_INPUT | KILN_TENSOR_INITIALIZER))) continue;
    if (!used[t] && !(tt->flags & KILN_TENSOR_OUTPUT)) continue;
    s = grow(sub, (void**)&sub->inputs, &sub->cap_inputs, sub->n_inputs + 1, sizeof(int32_t), "inputs");
    if (s) break;
    sub->tensors[t].flags |= KILN_TENSOR_INPUT;
    sub->inputs[sub->n_inputs++] = t;
    sub->n_outer++;
  }
  kiln_allocator_free(sub->allocator, used);
  return s;
}

kiln_status_t kiln_graph_datadep_dim(kiln_graph_t* g, const char* node, const char* what, int64_t bound,
                                     int64_t* out_dim) {
  char name[256];
  snprintf(name, sizeof name, "%.180s:%.60s", node, what);
  int32_t sym;
  KILN_RETURN_IF_ERROR(kiln_graph_symbol(g, name, &sym));
  int32_t k = 0;
  while (k < g->n_datadep && g->datadep[k].sym != sym) ++k;
  if (k == g->n_datadep) {
    KILN_RETURN_IF_ERROR(grow(g, (void**)&g->datadep, &g->cap_datadep, g->n_datadep + 1,
                              sizeof(kiln_datadep_dim_t), "data-dependent dims"));
    g->datadep[g->n_datadep++].sym = sym;
  }
  g->datadep[k].bound = bound;
  *out_dim = kiln_dim_from_symbol(sym);
  return NULL;
}

int64_t kiln_graph_datadep_bound(const kiln_graph_t* g, int64_t dim) {
  int32_t sym = kiln_dim_symbol(dim);
  for (int32_t k = 0; sym && k < g->n_datadep; ++k)
    if (g->datadep[k].sym == sym) return g->datadep[k].bound;
  return -1;
}

const kiln_attr_t* kiln_node_attr(const kiln_node_t* n, const char* name) {
  for (int32_t i = 0; i < n->n_attrs; ++i)
    if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
  return NULL;
}

/* ---- ordering and checks --------------------------------------------- */

static const char* src_prefix(const kiln_graph_t* g) {
  return g->source && g->source[0] ? g->source : "graph";
}

kiln_status_t kiln_graph_toposort(kiln_graph_t* g) {
  int32_t nn = g->n_nodes;
  if (!nn) return NULL;
  int32_t *indeg = NULL, *order = NULL, *queue = NULL;
  kiln_node_t* sorted = NULL;
  kiln_status_t s = NULL;
  kiln_allocator_t a = g->allocator;
  size_t ni = (size_t)nn * sizeof(int32_t);
  if ((s = kiln_allocator_malloc(a, ni, "toposort", (void**)&indeg)) ||
      (s = kiln_allocator_malloc(a, ni, "toposort", (void**)&order)) ||
      (s = kiln_allocator_malloc(a, ni, "toposort", (void**)&queue)) ||
      (s = kiln_allocator_malloc(a, (size_t)nn * sizeof(kiln_node_t), "toposort",
                                 (void**)&sorted)))
    goto done;
  /* In-degree = number of inputs produced by nodes; undefined inputs fail. */
  for (int32_t i = 0; i < nn; ++i) {
    kiln_node_t* n = &g->nodes[i];
    for (int32_t j = 0; j < n->n_inputs; ++j) {
      int32_t t = n->inputs[j];
      if (t < 0) continue;
      const kiln_tensor_t* tt = &g->tensors[t];
      if (tt->producer >= 0) {
        indeg[i]++;
      } else if (!(tt->flags & (KILN_TENSOR_INPUT | KILN_TENSOR_INITIALIZER))) {
        s = kiln_make_status(KILN_INVALID_ARGUMENT,
                             "%s: node '%s' (%s) input '%s' does not exist (no node, graph "
                             "input or initializer produces it)",
                             src_prefix(g), n->name, n->op_type, tt->name);
        goto done;
      }
    }
  }
  /* Consumers via a CSR built on the fly would be faster; graphs are small
   * enough that scanning outputs per popped node (O(N*E)) is avoided by
   * building a consumer list. */
  int32_t *cons_start = NULL, *cons = NULL;
  size_t ne = 0;
  for (int32_t i = 0; i < nn; ++i) ne += (size_t)g->nodes[i].n_inputs;
  if ((s = kiln_allocator_malloc(a, sizeof(int32_t) * (size_t)(g->n_tensors + 1), "toposort",
                                 (void**)&cons_start)) ||
      (s = kiln_allocator_malloc(a, sizeof(int32_t) * (ne + 1), "toposort", (void**)&cons))) {
    kiln_allocator_free(a, cons_start);
    goto done;
  }
  for (int32_t i = 0; i < nn; ++i)
    for (int32_t j = 0; j < g->nodes[i].n_inputs; ++j)
      if (g->nodes[i].inputs[j] >= 0) cons_start[g->nodes[i].inputs[j] + 1]++;
  for (int32_t t = 0; t < g->n_tensors; ++t) cons_start[t + 1] += cons_start[t];
  {
    int32_t* fill = indeg; /* reuse after copying degrees */
    int32_t* deg = order;
    memcpy(deg, indeg, ni);
    memset(fill, 0, ni);
    int32_t* pos = NULL;
    if ((s = kiln_allocator_malloc(a, sizeof(int32_t) * (size_t)(g->n_tensors + 1), "toposort",
                                   (void**)&pos))) {
      kiln_allocator_free(a, cons_start);
      kiln_allocator_free(a, cons);
      goto done;
    }
    memcpy(pos, cons_start, sizeof(int32_t) * (size_t)g->n_tensors);
    for (int32_t i = 0; i < nn; ++i)
      for (int32_t j = 0; j < g->nodes[i].n_inputs; ++j)
        if (g->nodes[i].inputs[j] >= 0) cons[pos[g->nodes[i].inputs[j]]++] = i;
    kiln_allocator_free(a, pos);
    int32_t head = 0, tail = 0, done_n = 0;
    for (int32_t i = 0; i < nn; ++i)
      if (deg[i] == 0) queue[tail++] = i;
    while (head < tail) {
      int32_t i = queue[head++];
      fill[done_n++] = i;
      const kiln_node_t* n = &g->nodes[i];
      for (int32_t o = 0; o < n->n_outputs; ++o) {
        int32_t t = n->outputs[o];
        if (t < 0) continue;
        for (int32_t c = cons_start[t]; c < cons_start[t + 1]; ++c)
          if (--deg[cons[c]] == 0) queue[tail++] = cons[c];
      }
    }
    if (done_n < nn) {
      int32_t bad = -1;
      for (int32_t i = 0; i < nn && bad < 0; ++i)
        if (deg[i] > 0) bad = i;
      /* |bad| may only sit behind a cycle: walk producers of unfinished
       * inputs; after nn steps the walk is on the cycle itself. */
      for (int32_t step = 0; step < nn; ++step) {
        const kiln_node_t* bn = &g->nodes[bad];
        int32_t next = -1;
        for (int32_t j = 0; j < bn->n_inputs && next < 0; ++j) {
          int32_t t = bn->inputs[j];
          if (t >= 0 && g->tensors[t].producer >= 0 && deg[g->tensors[t].producer] > 0)
            next = g->tensors[t].producer;
        }
        if (next < 0) break;
        bad = next;
      }
      s = kiln_make_status(KILN_INVALID_ARGUMENT,
                           "%s: graph has a cycle: node '%s' (%s) depends on its own output "
                           "(%d nodes are on or behind cycles)",
                           src_prefix(g), g->nodes[bad].name, g->nodes[bad].op_type,
                           nn - done_n);
    } else {
      for (int32_t k = 0; k < nn; ++k) sorted[k] = g->nodes[fill[k]];
      memcpy(g->nodes, sorted, sizeof(kiln_node_t) * (size_t)nn);
      for (int32_t k = 0; k < nn; ++k)
        for (int32_t o = 0; o < g->nodes[k].n_outputs; ++o)
          if (g->nodes[k].outputs[o] >= 0) g->tensors[g->nodes[k].outputs[o]].producer = k;
    }
  }
  kiln_allocator_free(a, cons_start);
  kiln_allocator_free(a, cons);
done:
  kiln_allocator_free(a, indeg);
  kiln_allocator_free(a, order);
  kiln_allocator_free(a, queue);
  kiln_allocator_free(a, sorted);
  return s;
}

kiln_status_t kiln_graph_verify(const kiln_graph_t* g) {
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    const kiln_node_t* n = &g->nodes[i];
    for (int32_t j = 0; j < n->n_inputs; ++j) {
      int32_t t = n->inputs[j];
      if (t < -1 || t >= g->n_tensors)
        return kiln_make_status(KILN_INTERNAL, "node '%s' input %d index out of range",
                                n->name, j);
      if (t >= 0 && g->tensors[t].producer >= i)
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "%s: node '%s' (%s) uses '%s' before it is produced",
                                src_prefix(g), n->name, n->op_type, g->tensors[t].name);
      if (t >= 0 && g->tensors[t].producer < 0 &&
          !(g->tensors[t].flags & (KILN_TENSOR_INPUT | KILN_TENSOR_INITIALIZER)))
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "%s: node '%s' (%s) input '%s' does not exist", src_prefix(g),
                                n->name, n->op_type, g->tensors[t].name);
    }
    for (int32_t j = 0; j < n->n_outputs; ++j) {
      int32_t t = n->outputs[j];
      if (t >= 0 && g->tensors[t].producer != i)
        return kiln_make_status(KILN_INTERNAL, "node '%s' output '%s' has producer %d",
                                n->name, g->tensors[t].name, g->tensors[t].producer);
    }
  }
  for (int32_t i = 0; i < g->n_outputs; ++i) {
    const kiln_tensor_t* t = &g->tensors[g->outputs[i]];
    if (t->producer < 0 && !(t->flags & (KILN_TENSOR_INPUT | KILN_TENSOR_INITIALIZER)))
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: graph output '%s' is not produced by any node",
                              src_prefix(g), t->name);
    if (t->dtype == KILN_DTYPE_UNDEFINED)
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: graph output '%s' has an undefined element type",
                              src_prefix(g), t->name);
  }
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    const kiln_tensor_t* t = &g->tensors[g->inputs[i]];
    if (t->dtype == KILN_DTYPE_UNDEFINED)
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: graph input '%s' has an undefined element type",
                              src_prefix(g), t->name);
  }
  return NULL;
}

kiln_status_t kiln_graph_prepare(kiln_graph_t* g) {
  KILN_RETURN_IF_ERROR(kiln_graph_resolve_ops(g));
  KILN_RETURN_IF_ERROR(kiln_graph_toposort(g));
  KILN_RETURN_IF_ERROR(kiln_graph_infer(g));
  return kiln_graph_verify(g);
}

/* ---- printing -------------------------------------------------------- */

char* kiln_graph_format_shape(const kiln_graph_t* g, const kiln_shape_t* s,
                              char* buf, size_t n) {
  if (!n) return buf;
  if (s->rank < 0) {
    snprintf(buf, n, "[?]");
    return buf;
  }
  size_t o = 0;
  buf[0] = 0;
#define PUT(...)                                              \
  do {                                                        \
    if (o < n) o += (size_t)snprintf(buf + o, n - o, __VA_ARGS__); \
  } while (0)
  PUT("[");
  for (int32_t i = 0; i < s->rank; ++i) {
    int64_t d = s->dims[i];
    const char* sep = i ? "," : "";
    int32_t sym = kiln_dim_symbol(d);
    if (d >= 0)
      PUT("%s%lld", sep, (long long)d);
    else if (sym && g && sym <= g->n_symbols)
      PUT("%s%s", sep, g->symbols[sym]);
    else
      PUT("%s?", sep);
  }
  PUT("]");
#undef PUT
  return buf;
}

static void dump_attr(FILE* f, const kiln_attr_t* a) {
  fprintf(f, "%s=", a->name);
  switch (a->type) {
    case KILN_ATTR_FLOAT: fprintf(f, "%g", a->f); break;
    case KILN_ATTR_INT: fprintf(f, "%lld", (long long)a->i); break;
    case KILN_ATTR_STRING: fprintf(f, "\"%s\"", a->s ? a->s : ""); break;
    case KILN_ATTR_INTS:
      fputc('[', f);
      for (int64_t i = 0; i < a->count && i < 16; ++i)
        fprintf(f, "%s%lld", i ? "," : "", (long long)a->ints[i]);
      fprintf(f, "%s]", a->count > 16 ? ",..." : "");
      break;
    case KILN_ATTR_FLOATS:
      fputc('[', f);
      for (int64_t i = 0; i < a->count && i < 16; ++i)
        fprintf(f, "%s%g", i ? "," : "", a->floats[i]);
      fprintf(f, "%s]", a->count > 16 ? ",..." : "");
      break;
    case KILN_ATTR_TENSOR: {
      char b[128];
      fprintf(f, "tensor<%s%s>", kiln_dtype_name(a->tensor->dtype),
              kiln_shape_format(&a->tensor->shape, b, sizeof b));
      break;
    }
    case KILN_ATTR_STRINGS:
      fputc('[', f);
      for (int64_t i = 0; i < a->count && i < 16; ++i)
        fprintf(f, "%s\"%s\"", i ? "," : "", a->strings[i]);
      fprintf(f, "%s]", a->count > 16 ? ",..." : "");
      break;
    case KILN_ATTR_TENSORS: fprintf(f, "tensors<%lld>", (long long)a->count); break;
    case KILN_ATTR_GRAPH: fputs("<graph>", f); break;
    case KILN_ATTR_GRAPHS: fputs("<graphs>", f); break;
    default: fputs("<undefined>", f); break;
  }
}

void kiln_graph_dump(const kiln_graph_t* g, FILE* f) {
  char b[256];
  fprintf(f, "graph %s (opset %lld, %d nodes, %d tensors)\n", g->name[0] ? g->name : "<unnamed>",
          (long long)g->opset, g->n_nodes, g->n_tensors);
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    const kiln_tensor_t* t = &g->tensors[g->inputs[i]];
    fprintf(f, "  input  %s: %s%s\n", t->name, kiln_dtype_name(t->dtype),
            kiln_graph_format_shape(g, &t->shape, b, sizeof b));
  }
  for (int32_t i = 0; i < g->n_tensors; ++i) {
    const kiln_tensor_t* t = &g->tensors[i];
    if (t->flags & KILN_TENSOR_INITIALIZER)
      fprintf(f, "  const  %s: %s%s\n", t->name, kiln_dtype_name(t->dtype),
              kiln_graph_format_shape(g, &t->shape, b, sizeof b));
  }
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    const kiln_node_t* n = &g->nodes[i];
    fprintf(f, "  %%%d %s = %s(", i, n->name, n->op_type);
    for (int32_t j = 0; j < n->n_inputs; ++j)
      fprintf(f, "%s%s", j ? ", " : "", n->inputs[j] >= 0 ? g->tensors[n->inputs[j]].name : "<none>");
    fputc(')', f);
    if (n->n_attrs) {
      fputs(" {", f);
      for (int32_t j = 0; j < n->n_attrs; ++j) {
        if (j) fputs(", ", f);
        dump_attr(f, &n->attrs[j]);
      }
      fputc('}', f);
    }
    fputs(" -> ", f);
    for (int32_t j = 0; j < n->n_outputs; ++j) {
      int32_t t = n->outputs[j];
      if (t < 0) {
        fprintf(f, "%s<none>", j ? ", " : "");
        continue;
      }
      fprintf(f, "%s%s: %s%s", j ? ", " : "", g->tensors[t].name,
              kiln_dtype_name(g->tensors[t].dtype),
              kiln_graph_format_shape(g, &g->tensors[t].shape, b, sizeof b));
    }
    fputc('\n', f);
  }
  for (int32_t i = 0; i < g->n_outputs; ++i) {
    const kiln_tensor_t* t = &g->tensors[g->outputs[i]];
    fprintf(f, "  output %s: %s%s\n", t->name, kiln_dtype_name(t->dtype),
            kiln_graph_format_shape(g, &t->shape, b, sizeof b));
  }
}

static void dot_escape(FILE* f, const char* s) {
  for (; *s; ++s) {
    if (*s == '"' || *s == '\\') fputc('\\', f);
    fputc(*s, f);
  }
}

void kiln_graph_write_dot(const kiln_graph_t* g, FILE* f) {
  char b[256];
  fprintf(f, "digraph kiln {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n");
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    const kiln_tensor_t* t = &g->tensors[g->inputs[i]];
    fprintf(f, "  t%d [shape=oval, style=filled, fillcolor=\"#cde8ff\", label=\"", g->inputs[i]);
    dot_escape(f, t->name);
    fprintf(f, "\\n%s%s\"];\n", kiln_dtype_name(t->dtype),
            kiln_graph_format_shape(g, &t->shape, b, sizeof b));
  }
  for (int32_t i = 0; i < g->n_outputs; ++i) {
    const kiln_tensor_t* t = &g->tensors[g->outputs[i]];
    fprintf(f, "  t%d [shape=oval, style=filled, fillcolor=\"#d5f5d5\", label=\"", g->outputs[i]);
    dot_escape(f, t->name);
    fprintf(f, "\\n%s%s\"];\n", kiln_dtype_name(t->dtype),
            kiln_graph_format_shape(g, &t->shape, b, sizeof b));
  }
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    const kiln_node_t* n = &g->nodes[i];
    fprintf(f, "  n%d [shape=box, style=rounded, label=\"", i);
    dot_escape(f, n->op_type);
    fputs("\\n", f);
    dot_escape(f, n->name);
    fputs("\"];\n", f);
  }
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    const kiln_node_t* n = &g->nodes[i];
    for (int32_t j = 0; j < n->n_inputs; ++j) {
      int32_t t = n->inputs[j];
      if (t < 0) continue;
      const kiln_tensor_t* tt = &g->tensors[t];
      if (tt->flags & KILN_TENSOR_INITIALIZER) continue; /* weights clutter the picture */
      if (tt->producer >= 0)
        fprintf(f, "  n%d -> n%d [label=\"%s\"];\n", tt->producer, i,
                kiln_graph_format_shape(g, &tt->shape, b, sizeof b));
      else
        fprintf(f, "  t%d -> n%d;\n", t, i);
    }
  }
  for (int32_t i = 0; i < g->n_outputs; ++i) {
    const kiln_tensor_t* t = &g->tensors[g->outputs[i]];
    if (t->producer >= 0) fprintf(f, "  n%d -> t%d;\n", t->producer, g->outputs[i]);
  }
  fputs("}\n", f);
}
