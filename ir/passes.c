/* Graph pass manager (the default pipeline, lookup, node removal) and the
 * small helpers the passes share (ir/pass_util.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/pass_util.h"

const kiln_graph_pass_t kiln_graph_passes[] = {
    /* first: kiln's folds would take a plugin's chain apart (pass_plugin.c) */
    {"plugin-patterns", kiln_pass_plugin_patterns},
    {"einsum-to-matmul", kiln_pass_einsum},
    {"remove-noops", kiln_pass_remove_noops},
    /* before fold-constants, which would turn the weights' DequantizeLinear
     * into f32 initializers */
    {"fold-qdq", kiln_pass_fold_qdq},
    {"fold-constants", kiln_pass_fold_constants},
    /* after fold-constants: a condition computed from shapes is known now */
    {"inline-const-if", kiln_pass_inline_const_if},
    {"fold-batchnorm", kiln_pass_fold_batchnorm},
    {"fold-reshape-chains", kiln_pass_fold_chains},
    {"recognize-patterns", kiln_pass_patterns},
    {"cse", kiln_pass_cse},
    {"dce", kiln_pass_dce},
};
const size_t kiln_graph_pass_count = sizeof(kiln_graph_passes) / sizeof(kiln_graph_passes[0]);

const kiln_graph_pass_t* kiln_graph_pass_find(const char* name) {
  if (!name) return NULL;
  for (size_t i = 0; i < kiln_graph_pass_count; ++i)
    if (strcmp(kiln_graph_passes[i].name, name) == 0) return &kiln_graph_passes[i];
  return NULL;
}

kiln_status_t kiln_graph_optimize(kiln_graph_t* g, int level, FILE* log) {
  return kiln_graph_optimize_except(g, level, NULL, log);
}

static bool skipped(const char* name, const char* const* skip) {
  for (; skip && *skip; ++skip)
    if (!strcmp(*skip, name)) return true;
  return false;
}

kiln_status_t kiln_graph_optimize_except(kiln_graph_t* g, int level, const char* const* skip, FILE* log) {
  if (level <= 0) return NULL;
  /* Level 1 runs the pipeline once; higher levels repeat it (a fold can
   * expose a new pattern) until nothing changes, at most 4 times. */
  int rounds = level >= 2 ? 4 : 1;
  for (int r = 0; r < rounds; ++r) {
    int32_t total = 0;
    for (size_t i = 0; i < kiln_graph_pass_count; ++i) {
      if (skipped(kiln_graph_passes[i].name, skip)) continue;
      kiln_pass_stats_t st = {g->n_nodes, g->n_nodes, 0};
      KILN_RETURN_IF_ERROR(kiln_graph_passes[i].fn(g, &st), "pass '%s'",
                           kiln_graph_passes[i].name);
      st.nodes_after = g->n_nodes;
      total += st.rewrites;
      if (log)
        fprintf(log, "pass %-20s rewrites %5d nodes %5d -> %5d\n", kiln_graph_passes[i].name,
                st.rewrites, st.nodes_before, st.nodes_after);
    }
    if (!total) break;
  }
  return NULL;
}

kiln_status_t kiln_graph_remove_nodes(kiln_graph_t* g, const bool* dead) {
  int32_t* remap = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(g->allocator, sizeof(int32_t) * (size_t)(g->n_nodes + 1),
                                             "node remap", (void**)&remap));
  int32_t k = 0;
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    remap[i] = dead[i] ? -1 : k;
    if (dead[i]) {
      /* Outputs of a removed node lose their producer, unless a pass already
       * handed them to another node. */
      const kiln_node_t* n = &g->nodes[i];
      for (int32_t j = 0; j < n->n_outputs; ++j) {
        int32_t t = n->outputs[j];
        if (t >= 0 && g->tensors[t].producer == i) {
          g->tensors[t].producer = -1;
          pu_clear_value(g, t);
        }
      }
      continue;
    }
    if (k != i) g->nodes[k] = g->nodes[i];
    ++k;
  }
  for (int32_t t = 0; t < g->n_tensors; ++t) {
    int32_t p = g->tensors[t].producer;
    if (p >= 0) g->tensors[t].producer = p < g->n_nodes ? remap[p] : -1;
  }
  g->n_nodes = k;
  kiln_allocator_free(g->allocator, remap);
  return kiln_graph_prepare(g);
}

/* ---- helpers --------------------------------------------------------- */

kiln_status_t pu_sync(pu_ctx_t* c) {
  kiln_allocator_t a = c->g->allocator;
  if (c->g->n_nodes > c->cap_dead) {
    int32_t nc = c->g->n_nodes * 2 + 16;
    void* p = c->dead;
    KILN_RETURN_IF_ERROR(p ? kiln_allocator_realloc(a, (size_t)nc, "pass", &p)
                           : kiln_allocator_malloc(a, (size_t)nc, "pass", &p));
    memset((char*)p + c->cap_dead, 0, (size_t)(nc - c->cap_dead));
    c->dead = p;
    c->cap_dead = nc;
  }
  if (c->g->n_tensors >= c->cap_uses) {
    int32_t nc = c->g->n_tensors * 2 + 64;
    void* p = c->uses;
    KILN_RETURN_IF_ERROR(p ? kiln_allocator_realloc(a, sizeof(int32_t) * (size_t)nc, "pass", &p)
                           : kiln_allocator_malloc(a, sizeof(int32_t) * (size_t)nc, "pass", &p));
    memset((int32_t*)p + c->cap_uses, 0, sizeof(int32_t) * (size_t)(nc - c->cap_uses));
    c->uses = p;
    c->cap_uses = nc;
  }
  return NULL;
}

void pu_count_uses(pu_ctx_t* c) {
  kiln_graph_t* g = c->g;
  memset(c->uses, 0, sizeof(int32_t) * (size_t)c->cap_uses);
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    if (c->dead[i]) continue;
    const kiln_node_t* n = &g->nodes[i];
    for (int32_t j = 0; j < n->n_inputs; ++j)
      if (n->inputs[j] >= 0) c->uses[n->inputs[j]]++;
  }
}

kiln_status_t pu_begin(pu_ctx_t* c, kiln_graph_t* g) {
  memset(c, 0, sizeof(*c));
  c->g = g;
  KILN_RETURN_IF_ERROR(pu_sync(c));
  pu_count_uses(c);
  return NULL;
}

kiln_status_t pu_end(pu_ctx_t* c, kiln_status_t s) {
  kiln_graph_t* g = c->g;
  bool any = false;
  for (int32_t i = 0; i < g->n_nodes && !s; ++i) any |= c->dead[i];
  if (!s) s = any ? kiln_graph_remove_nodes(g, c->dead) : kiln_graph_prepare(g);
  kiln_allocator_free(g->allocator, c->uses);
  kiln_allocator_free(g->allocator, c->dead);
  memset(c, 0, sizeof(*c));
  return s;
}

int32_t pu_producer(const pu_ctx_t* c, int32_t t) {
  if (t < 0) return -1;
  int32_t p = c->g->tensors[t].producer;
  return p >= 0 && !c->dead[p] ? p : -1;
}

bool pu_single_use(const pu_ctx_t* c, int32_t t) {
  return t >= 0 && c->uses[t] == 1 && !pu_is_output(c->g, t);
}

bool pu_const_scalar(const kiln_graph_t* g, int32_t t, double* out) {
  if (!pu_is_const(g, t)) return false;
  const kiln_array_t* v = &g->tensors[t].value;
  if (kiln_array_numel(v) != 1 || v->dtype == KILN_DTYPE_BOOL) return false;
  *out = kiln_load_f64(v->dtype, v->data, 0);
  return true;
}

bool pu_const_all(const kiln_graph_t* g, int32_t t, double want, double tol) {
  if (!pu_is_const(g, t)) return false;
  const kiln_array_t* v = &g->tensors[t].value;
  int64_t n = kiln_array_numel(v);
  if (n < 1 || v->dtype == KILN_DTYPE_BOOL) return false;
  for (int64_t i = 0; i < n; ++i)
    if (!(fabs(kiln_load_f64(v->dtype, v->data, (size_t)i) - want) <= tol)) return false;
  return true;
}

bool pu_op(const kiln_node_t* n, const char* op) {
  return strcmp(n->op_type, op) == 0 && (!n->domain[0] || strcmp(n->domain, "ai.onnx") == 0);
}

int32_t pu_other(const kiln_node_t* n, int32_t t) {
  if (n->n_inputs != 2) return -1;
  if (n->inputs[0] == t) return 1;
  if (n->inputs[1] == t) return 0;
  return -1;
}

void pu_clear_value(kiln_graph_t* g, int32_t t) {
  kiln_tensor_t* tt = &g->tensors[t];
  if (tt->flags & (KILN_TENSOR_INITIALIZER | KILN_TENSOR_INPUT)) return;
  if (tt->flags & PU_OWNED_VALUE) kiln_allocator_free(g->allocator, tt->value.data);
  memset(&tt->value, 0, sizeof(tt->value));
  tt->flags &= ~(KILN_TENSOR_CONST | PU_OWNED_VALUE);
}

void pu_rewire(pu_ctx_t* c, int32_t from, int32_t to) {
  kiln_graph_t* g = c->g;
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    if (c->dead[i]) continue;
    kiln_node_t* n = &g->nodes[i];
    for (int32_t j = 0; j < n->n_inputs; ++j)
      if (n->inputs[j] == from) {
        n->inputs[j] = to;
        c->uses[from]--;
        c->uses[to]++;
      }
  }
}

bool pu_forward(pu_ctx_t* c, int32_t ni, int32_t old, int32_t repl) {
  kiln_graph_t* g = c->g;
  if (!pu_is_output(g, old)) {
    pu_rewire(c, old, repl);
    c->dead[ni] = true;
    return true;
  }
  /* |old| names a graph output: let the producer of |repl| write it. */
  int32_t p = pu_producer(c, repl);
  if (p < 0 || pu_is_output(g, repl) || (g->tensors[repl].flags & KILN_TENSOR_INPUT))
    return false;
  kiln_node_t* pn = &g->nodes[p];
  for (int32_t j = 0; j < pn->n_outputs; ++j)
    if (pn->outputs[j] == repl) pn->outputs[j] = old;
  pu_rewire(c, repl, old);
  g->tensors[repl].producer = -1;
  pu_clear_value(g, repl);
  g->tensors[old].producer = p;
  pu_clear_value(g, old);
  c->dead[ni] = true;
  return true;
}

void pu_detach(pu_ctx_t* c, int32_t t) {
  kiln_graph_t* g = c->g;
  int32_t p = g->tensors[t].producer;
  if (p >= 0) {
    kiln_node_t* n = &g->nodes[p];
    for (int32_t j = 0; j < n->n_outputs; ++j)
      if (n->outputs[j] == t) n->outputs[j] = -1;
  }
  g->tensors[t].producer = -1;
  pu_clear_value(g, t);
}

const char* pu_name(pu_ctx_t* c, const char* base, const char* tag, char* buf, size_t n) {
  do {
    snprintf(buf, n, "%.200s__%s_%d", base, tag, c->n_new++);
  } while (kiln_graph_find_tensor(c->g, buf) >= 0);
  return buf;
}

static kiln_status_t add_const(pu_ctx_t* c, const char* base, kiln_dtype_t dt,
                               const kiln_shape_t* shape, const void* data, int32_t* out_t) {
  kiln_array_t a;
  KILN_RETURN_IF_ERROR(kiln_array_alloc(c->g->allocator, dt, shape, &a));
  if (a.nbytes) memcpy(a.data, data, a.nbytes);
  char buf[256];
  KILN_RETURN_IF_ERROR(
      kiln_graph_add_initializer(c->g, pu_name(c, base, "c", buf, sizeof buf), &a, out_t));
  return pu_sync(c);
}

kiln_status_t pu_add_const(pu_ctx_t* c, const char* base, kiln_dtype_t dt,
                           const kiln_shape_t* shape, const void* data, int32_t* out_t) {
  return add_const(c, base, dt, shape, data, out_t);
}

kiln_status_t pu_new_tensor(pu_ctx_t* c, const char* base, const char* tag, int32_t* out_t) {
  char buf[256];
  KILN_RETURN_IF_ERROR(
      kiln_graph_get_or_add_tensor(c->g, pu_name(c, base, tag, buf, sizeof buf), out_t));
  return pu_sync(c);
}

kiln_status_t pu_add_f32(pu_ctx_t* c, const char* base, const kiln_shape_t* shape,
                         const float* data, int32_t* out_t) {
  return add_const(c, base, KILN_DTYPE_F32, shape, data, out_t);
}

kiln_status_t pu_add_i64(pu_ctx_t* c, const char* base, const int64_t* data, int32_t n,
                         int32_t* out_t) {
  kiln_shape_t s = kiln_shape_make(1, (int64_t[]){n});
  return add_const(c, base, KILN_DTYPE_I64, &s, data, out_t);
}

kiln_status_t pu_add_node(pu_ctx_t* c, const char* op, const char* name, int32_t n_in,
                          const int32_t* in, int32_t out, int32_t n_attrs,
                          const kiln_attr_t* attrs, int32_t* out_node) {
  char nb[256];
  snprintf(nb, sizeof nb, "%.200s__%s", name, op);
  return pu_add_node_named(c, op, nb, n_in, in, out, n_attrs, attrs, out_node);
}

kiln_status_t pu_add_node_named(pu_ctx_t* c, const char* op, const char* name, int32_t n_in,
                                const int32_t* in, int32_t out, int32_t n_attrs,
                                const kiln_attr_t* attrs, int32_t* out_node) {
  kiln_graph_t* g = c->g;
  const char* in_names[KILN_MAX_NODE_INPUTS];
  KILN_ASSERT(n_in <= KILN_MAX_NODE_INPUTS);
  for (int32_t i = 0; i < n_in; ++i) in_names[i] = in[i] >= 0 ? g->tensors[in[i]].name : "";
  const char* out_name = g->tensors[out].name;
  int32_t ni;
  KILN_RETURN_IF_ERROR(kiln_graph_add_node(g, op, name, n_in, in_names, 1, &out_name, n_attrs,
                                           attrs, &ni));
  KILN_RETURN_IF_ERROR(pu_sync(c));
  c->dead[ni] = false;
  for (int32_t i = 0; i < n_in; ++i)
    if (in[i] >= 0) c->uses[in[i]]++;
  if (out_node) *out_node = ni;
  return NULL;
}

kiln_status_t pu_read_f32(pu_ctx_t* c, int32_t t, float** out) {
  const kiln_array_t* v = &c->g->tensors[t].value;
  int64_t n = kiln_array_numel(v);
  float* f = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(c->g->allocator, sizeof(float) * (size_t)(n + 1),
                                             "pass", (void**)&f));
  for (int64_t i = 0; i < n; ++i) f[i] = (float)kiln_load_f64(v->dtype, v->data, (size_t)i);
  *out = f;
  return NULL;
}
