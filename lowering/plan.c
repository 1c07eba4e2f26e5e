/* Whole-graph lowering into a plan: one plan buffer per graph tensor that
 * lives at run time (plus workspaces and compile-time constants), and the
 * kernels of every node in execution order. */
#include "lowering/plan.h"

#include "ir/ops/custom.h"
#include "lowering/lower_custom.h"


#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir/op.h"
#include "ir/tir_visit.h"
#include "lowering/fuse.h"
#include "lowering/layout.h"

static kiln_status_t grow(kiln_plan_t* p, void** arr, int32_t* cap, int32_t need, size_t elem,
                          const char* what) {
  if (need <= *cap) return NULL;
  int32_t nc = *cap ? *cap * 2 : 32;
  while (nc < need) nc *= 2;
  void* q = *arr;
  if (!q) {
    KILN_RETURN_IF_ERROR(kiln_allocator_malloc(p->allocator, (size_t)nc * elem, what, &q));
  } else {
    KILN_RETURN_IF_ERROR(kiln_allocator_realloc(p->allocator, (size_t)nc * elem, what, &q));
    memset((char*)q + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
  }
  *arr = q;
  *cap = nc;
  return NULL;
}

static uint32_t ptr_hash(const void* q) {
  uint64_t x = (uint64_t)(uintptr_t)q;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (uint32_t)x;
}

/* Puts plan buffer |i| in the index (a later buffer with the same tir
 * buffer wins, as the scan from the end did). */
static void index_put(kiln_plan_t* p, int32_t i) {
  uint32_t mask = (uint32_t)p->buffer_index_cap - 1;
  const tir_buffer_t* b = p->buffers[i].buf;
  for (uint32_t h = ptr_hash(b) & mask;; h = (h + 1) & mask) {
    int32_t e = p->buffer_index[h];
    if (e == 0 || p->buffers[e - 1].buf == b) {
      p->buffer_index[h] = i + 1;
      return;
    }
  }
}

/* Keeps the index at most half full; on failure the index is dropped and
 * lookups scan (slower, never wrong). */
static void index_add(kiln_plan_t* p, int32_t i) {
  if (p->buffer_index_n != i) return; /* not trusted: stays a scan */
  if (2 * (int64_t)(i + 1) > p->buffer_index_cap) {
    int32_t cap = p->buffer_index_cap ? p->buffer_index_cap * 2 : 64;
    while (2 * (int64_t)(i + 1) > cap) cap *= 2;
    void* q = NULL;
    kiln_status_t s = kiln_allocator_malloc(p->allocator, sizeof(int32_t) * (size_t)cap, "plan index", &q);
    if (s) {
      kiln_status_free(s);
      kiln_allocator_free(p->allocator, p->buffer_index);
      p->buffer_index = NULL;
      p->buffer_index_cap = 0;
      p->buffer_index_n = -1;
      return;
    }
    memset(q, 0, sizeof(int32_t) * (size_t)cap);
    kiln_allocator_free(p->allocator, p->buffer_index);
    p->buffer_index = q;
    p->buffer_index_cap = cap;
    for (int32_t j = 0; j < i; ++j) index_put(p, j);
  }
  index_put(p, i);
  p->buffer_index_n = i + 1;
}

kiln_status_t kiln_plan_add_buffer(kiln_plan_t* p, const tir_buffer_t* b,
                                   kiln_plan_buffer_kind_t kind, int32_t tensor,
                                   int32_t* out_index) {
  KILN_RETURN_IF_ERROR(grow(p, (void**)&p->buffers, &p->cap_buffers, p->n_buffers + 1,
                            sizeof(kiln_plan_buffer_t), "plan buffers"));
  kiln_plan_buffer_t* pb = &p->buffers[p->n_buffers];
  memset(pb, 0, sizeof(*pb));
  pb->buf = b;
  pb->kind = kind;
  pb->tensor = tensor;
  pb->alias_of = -1;
  pb->first_use = pb->last_use = -1;
  if (out_index) *out_index = p->n_buffers;
  p->n_buffers++;
  index_add(p, p->n_buffers - 1);
  return NULL;
}

int32_t kiln_plan_find_buffer(const kiln_plan_t* p, const tir_buffer_t* b) {
  if (p->buffer_index && p->buffer_index_n == p->n_buffers) {
    uint32_t mask = (uint32_t)p->buffer_index_cap - 1;
    for (uint32_t h = ptr_hash(b) & mask;; h = (h + 1) & mask) {
      int32_t e = p->buffer_index[h];
      if (e == 0) return -1;
      if (p->buffers[e - 1].buf == b) return e - 1;
    }
  }
  for (int32_t i = p->n_buffers - 1; i >= 0; --i)
    if (p->buffers[i].buf == b) return i;
  return -1;
}

kiln_status_t kiln_plan_add_kernel(kiln_plan_t* p, int32_t node, tir_func_t* func,
                                   const tir_func_t* naive, const tir_schedule_t* sched) {
  KILN_RETURN_IF_ERROR(grow(p, (void**)&p->kernels, &p->cap_kernels, p->n_kernels + 1,
                            sizeof(kiln_plan_kernel_t), "plan kernels"));
  int32_t* args = kiln_arena_alloc(&p->tir.arena, sizeof(int32_t) * (size_t)(func->n_params + 1));
  if (!args) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory recording kernel args");
  for (int32_t i = 0; i < func->n_params; ++i) {
    args[i] = kiln_plan_find_buffer(p, func->params[i]);
    if (args[i] < 0)
      return kiln_make_status(KILN_INTERNAL, "kernel %s: parameter '%s' is not a plan buffer",
                              func->name, func->params[i]->name);
  }
  kiln_plan_kernel_t* k = &p->kernels[p->n_kernels++];
  memset(k, 0, sizeof(*k));
  k->func = func;
  k->naive = naive;
  k->schedule = sched;
  k->node = node;
  k->args = args;
  return NULL;
}

int32_t kiln_plan_root(const kiln_plan_t* p, int32_t b) {
  for (int32_t guard = 0; b >= 0 && p->buffers[b].alias_of >= 0 && guard < p->n_buffers; ++guard)
    b = p->buffers[b].alias_of;
  return b;
}

const char* kiln_plan_kernel_node_name(const kiln_plan_t* p, const kiln_plan_kernel_t* kk) {
  const kiln_graph_t* g = p->graph;
  return g && kk->node >= 0 && kk->node < g->n_nodes ? g->nodes[kk->node].name : kk->func->name;
}

const char* kiln_plan_kernel_node_op(const kiln_plan_t* p, const kiln_plan_kernel_t* kk) {
  const kiln_graph_t* g = p->graph;
  return g && kk->node >= 0 && kk->node < g->n_nodes ? g->nodes[kk->node].op_type : "?";
}

static const char* src_of(const kiln_graph_t* g) {
  return g->source && g->source[0] ? g->source : "graph";
}

/* Plan buffer for graph tensor |t|, created on first use. */
static kiln_status_t tensor_buffer(kiln_plan_t* p, int32_t t, int32_t* out) {
  if (p->tensor_buffer[t] >= 0) {
    *out = p->tensor_buffer[t];
    return NULL;
  }
  const kiln_graph_t* g = p->graph;
  const kiln_tensor_t* tt = &g->tensors[t];
  if (!kiln_shape_is_static(&tt->shape)) {
    char b[256];
    /* A node whose inputs all have static shapes but whose output does not
     * sizes it from run-time values (a Range of graph inputs, a Reshape to
     * a computed shape): kiln compiles static shapes only. */
    const kiln_node_t* pn = tt->producer >= 0 ? &g->nodes[tt->producer] : NULL;
    bool from_values = pn != NULL;
    for (int32_t j = 0; pn && j < pn->n_inputs; ++j)
      if (pn->inputs[j] >= 0 && !kiln_shape_is_static(&g->tensors[pn->inputs[j]].shape)) from_values = false;
    if (from_values)
      return kiln_make_status(KILN_UNSUPPORTED,
                              "%s: node '%s' (%s): output '%s' has shape %s, which depends on input values "
                              "known only at run time; kiln compiles static shapes only (make those inputs "
                              "constants)",
                              src_of(g), pn->name, pn->op_type, tt->name,
                              kiln_graph_format_shape(g, &tt->shape, b, sizeof b));
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: tensor '%s' has shape %s, not static; bind the symbolic dims of "
                            "the inputs (kiln run binds them from the input arrays, --dim N=...)",
                            src_of(g), tt->name, kiln_graph_format_shape(g, &tt->shape, b, sizeof b));
  }
  char name[96];
  size_t o = 0;
  for (const char* c = tt->name; *c && o < sizeof name - 1; ++c)
    name[o++] = isalnum((unsigned char)*c) ? *c : '_';
  name[o] = 0;
  const int32_t blk = p->layout ? p->layout->tensor_block[t] : 0;
  const tir_buffer_t* b;
  if (blk > 0) {
    /* NCHWc: [N][ceil(C/c)][H][W][c] (lowering/layout.h) */
    const int64_t* d = tt->shape.dims;
    const int64_t shape[5] = {d[0], (d[1] + blk - 1) / blk, d[2], d[3], blk};
    b = tir_buffer(&p->tir, name, kiln_dtype_storage(tt->dtype), 5, shape, TIR_SCOPE_GLOBAL);
  } else {
    /* float8 / int4 tensors are byte buffers to the kernels
     * (kiln_dtype_storage); the program's buffer keeps the tensor's dtype */
    b = tir_buffer(&p->tir, name, kiln_dtype_storage(tt->dtype), tt->shape.rank, tt->shape.dims,
                   TIR_SCOPE_GLOBAL);
  }
  if (!b) return tir_ctx_status(&p->tir);
  kiln_plan_buffer_kind_t kind = KILN_PLAN_INTERMEDIATE;
  if (tt->flags & KILN_TENSOR_CONST) kind = KILN_PLAN_CONST;
  else if (tt->flags & KILN_TENSOR_INPUT) kind = KILN_PLAN_INPUT;
  else if (tt->flags & KILN_TENSOR_OUTPUT) kind = KILN_PLAN_OUTPUT;
  int32_t idx;
  KILN_RETURN_IF_ERROR(kiln_plan_add_buffer(p, b, kind, t, &idx));
  if (kind == KILN_PLAN_CONST) p->buffers[idx].value = tt->value; /* not owned */
  p->tensor_buffer[t] = idx;
  *out = idx;
  return NULL;
}

void kiln_plan_destroy(kiln_plan_t* p) {
  if (!p) return;
  kiln_allocator_t a = p->allocator;
  for (int32_t i = 0; i < p->n_buffers; ++i) {
    if (p->buffers[i].owned) kiln_array_free(kiln_allocator_system(), &p->buffers[i].value);
    if (p->buffers[i].before_layout.owned) kiln_array_free(kiln_allocator_system(), &p->buffers[i].before_layout.value);
  }
  kiln_allocator_free(a, p->buffers);
  kiln_allocator_free(a, p->kernels);
  kiln_allocator_free(a, p->inputs);
  kiln_allocator_free(a, p->outputs);
  kiln_allocator_free(a, p->tensor_buffer);
  kiln_allocator_free(a, p->buffer_index);
  free(p->sparse_notes);
  kiln_layout_free(p->layout);
  free(p->layout);
  free(p->reorder_buf);
  tir_ctx_deinit(&p->tir);
  kiln_allocator_free(a, p);
}

static int32_t default_threads(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int32_t)n : 1;
}

/* Plugin ops lower through kiln_lower_custom, whatever their type. */
static kiln_lower_fn lower_fn_of(const kiln_node_t* n) {
  if (kiln_op_schema_is_custom(n->schema)) return kiln_lower_custom;
  return kiln_lower_lookup(n->op_type);
}

/* A plan buffer (no graph tensor) holding tensor |t| in block |blk|, named
 * after it. */
static kiln_status_t layout_buffer(kiln_plan_t* p, int32_t t, int32_t blk, int32_t* out) {
  const kiln_tensor_t* tt = &p->graph->tensors[t];
  char name[112], ln[24];
  size_t o = 0;
  for (const char* c = tt->name; *c && o < 80; ++c) name[o++] = isalnum((unsigned char)*c) ? *c : '_';
  snprintf(name + o, sizeof name - o, "_%s", kiln_layout_name(blk, ln, sizeof ln));
  const int64_t* d = tt->shape.dims;
  const int64_t shape[5] = {d[0], blk > 0 ? (d[1] + blk - 1) / blk : d[1], d[2], d[3], blk};
  const tir_buffer_t* b =
      tir_buffer(&p->tir, name, kiln_dtype_storage(tt->dtype), blk > 0 ? 5 : 4, shape, TIR_SCOPE_GLOBAL);
  if (!b) return tir_ctx_status(&p->tir);
  return kiln_plan_add_buffer(p, b, KILN_PLAN_INTERMEDIATE, -1, out);
}

/* Names the reorder kernel just emitted after what it does. */
static void name_reorder(kiln_plan_t* p, int32_t first, int32_t blk) {
  char ln[24], buf[128];
  for (int32_t k = first; k < p->n_kernels; ++k) {
    snprintf(buf, sizeof buf, "%s_reorder_%s", p->kernels[k].func->name, kiln_layout_name(blk, ln, sizeof ln));
    const char* nm = kiln_arena_strndup(&p->tir.arena, buf, strlen(buf));
    if (nm) p->kernels[k].func->name = nm;
  }
}

/* Tensor |t| in block |blk| for a consumer lowered with |ctx|: the
 * tensor's buffer, or (emitted once per tensor) a reorder's output. */
static kiln_status_t layout_input(kiln_plan_t* p, kiln_lower_ctx_t* ctx, int32_t t, int32_t blk,
                                  const tir_buffer_t** out) {
  int32_t b = p->tensor_buffer[t];
  const int32_t have = p->layout->tensor_block[t];
  if (blk == have) {
    *out = p->buffers[b].buf;
    return NULL;
  }
  if (p->reorder_buf[t] < 0) {
    int32_t rb;
    KILN_RETURN_IF_ERROR(layout_buffer(p, t, blk, &rb));
    const int32_t first = p->n_kernels;
    /* the buffer index may move while the reorder is emitted */
    const tir_buffer_t *src = p->buffers[b].buf, *dst = p->buffers[rb].buf;
    KILN_RETURN_IF_ERROR(kiln_layout_emit_reorder(ctx, src, have, dst, blk, p->graph->tensors[t].shape.dims));
    name_reorder(p, first, blk);
    p->reorder_buf[t] = rb;
  }
  *out = p->buffers[p->reorder_buf[t]].buf;
  return NULL;
}

static kiln_status_t lower_node(kiln_plan_t* p, int32_t ni, const kiln_plan_options_t* o, kiln_plan_host_t* h) {
  const kiln_graph_t* g = p->graph;
  const kiln_node_t* n = &g->nodes[ni];
  const tir_buffer_t* in[KILN_MAX_NODE_INPUTS];
  const kiln_tensor_t* in_t[KILN_MAX_NODE_INPUTS];
  const tir_buffer_t* out[KILN_MAX_NODE_OUTPUTS];
  const kiln_tensor_t* out_t[KILN_MAX_NODE_OUTPUTS];
  for (int32_t j = 0; j < n->n_inputs; ++j) {
    in[j] = NULL;
    in_t[j] = NULL;
    if (n->inputs[j] < 0) continue;
    int32_t b;
    KILN_RETURN_IF_ERROR(tensor_buffer(p, n->inputs[j], &b));
    in[j] = p->buffers[b].buf;
    in_t[j] = &g->tensors[n->inputs[j]];
  }
  for (int32_t j = 0; j < n->n_outputs; ++j) {
    out[j] = NULL;
    out_t[j] = NULL;
    if (n->outputs[j] < 0) continue;
    int32_t b;
    KILN_RETURN_IF_ERROR(tensor_buffer(p, n->outputs[j], &b));
    out[j] = p->buffers[b].buf;
    out_t[j] = &g->tensors[n->outputs[j]];
  }
  kiln_lower_fn fn = lower_fn_of(n);
  if (!fn)
    return kiln_make_status(KILN_UNSUPPORTED, "%s: node '%s': op %s has no lowering for this target",
                            src_of(g), n->name, n->op_type);
  const bool gpu = o->target == KILN_TARGET_CLASS_GPU;
  const bool host = gpu && h && h->nodes && h->nodes[ni];
  kiln_lower_ctx_t ctx = {&p->tir, g, n, ni, g->opset, host ? KILN_TARGET_CLASS_CPU : o->target,
                          o->threads > 0 ? o->threads : default_threads(),
                          n->n_inputs, in, in_t, n->n_outputs, out, out_t, p,
                          gpu && !host ? o->loop_limit : 0, NULL, NULL, gpu && !host ? p->ew_lanes : 0};
  /* Layouts: inputs whose tensor is in another layout than the node reads
   * come through a reorder; an output the node writes in another layout
   * than its tensor's goes through one after the node. */
  int32_t in_blk[KILN_MAX_NODE_INPUTS], out_blk[KILN_MAX_NODE_OUTPUTS];
  int32_t out_fix[KILN_MAX_NODE_OUTPUTS];
  if (p->layout) {
    for (int32_t j = 0; j < n->n_inputs; ++j) {
      in_blk[j] = n->inputs[j] >= 0 ? kiln_layout_in_port(p->layout, g, ni, j) : 0;
      if (n->inputs[j] >= 0) KILN_RETURN_IF_ERROR(layout_input(p, &ctx, n->inputs[j], in_blk[j], &in[j]));
    }
    for (int32_t j = 0; j < n->n_outputs; ++j) {
      out_blk[j] = n->outputs[j] >= 0 ? kiln_layout_out_port(p->layout, g, ni, j) : 0;
      out_fix[j] = -1;
      if (n->outputs[j] >= 0 && out_blk[j] != p->layout->tensor_block[n->outputs[j]]) {
        KILN_RETURN_IF_ERROR(layout_buffer(p, n->outputs[j], out_blk[j], &out_fix[j]));
        out[j] = p->buffers[out_fix[j]].buf;
      }
    }
    ctx.in_block = in_blk;
    ctx.out_block = out_blk;
  }
  const int32_t first = p->n_kernels;
  kiln_status_t s = fn(&ctx);
  if (s && kiln_status_code(s) == KILN_UNSUPPORTED && gpu && !host && h && h->fallback && h->nodes) {
    /* The GPU lowering refused this node: lower it for the CPU instead
     * (heterogeneous execution). Kernels it emitted before refusing go;
     * buffers it added stay unused (no kernel touches them). */
    p->n_kernels = first;
    h->nodes[ni] = 1;
    if (h->reasons && !h->reasons[ni]) h->reasons[ni] = strdup(kiln_status_message(s));
    kiln_status_free(s);
    ctx.target = KILN_TARGET_CLASS_CPU;
    ctx.loop_limit = 0;
    ctx.ew_lanes = 0;
    s = fn(&ctx);
  }
  KILN_RETURN_IF_ERROR(s, "%s: node '%s' (%s)", src_of(g), n->name, n->op_type);
  for (int32_t j = 0; p->layout && j < n->n_outputs; ++j) {
    if (out_fix[j] < 0) continue;
    const int32_t t = n->outputs[j], k0 = p->n_kernels;
    const tir_buffer_t* dst = p->buffers[p->tensor_buffer[t]].buf;
    KILN_RETURN_IF_ERROR(kiln_layout_emit_reorder(&ctx, p->buffers[out_fix[j]].buf, out_blk[j], dst,
                                                  p->layout->tensor_block[t], g->tensors[t].shape.dims),
                         "%s: node '%s' (%s): output reorder", src_of(g), n->name, n->op_type);
    name_reorder(p, k0, p->layout->tensor_block[t]);
  }
  for (int32_t k = first; gpu && k < p->n_kernels; ++k) p->kernels[k].host = h && h->nodes && h->nodes[ni];
  return NULL;
}

/* True when |st| allocates a scoped buffer (an accumulator). */
static bool alloc_pre(tir_visitor_t* v, const tir_stmt_t* st) {
  if (st->kind == TIR_ALLOC) {
    *(bool*)v->user = true;
    v->stop = true;
  }
  return true;
}

static bool stmt_allocates(const tir_stmt_t* st) {
  bool found = false;
  tir_visitor_t v = {.user = &found, .stmt_pre = alloc_pre};
  tir_visit_stmt(&v, st);
  return found;
}

/* A kernel that sums: it accumulates in a scoped buffer or reads back what
 * it writes. Copies, pads and element-wise kernels do neither. */
static bool kernel_reduces(const tir_func_t* f) {
  if (!f) return false;
  if (stmt_allocates(f->body)) return true;
  for (int32_t i = 0; i < f->n_params; ++i) {
    int acc = tir_func_buffer_access(f, f->params[i]);
    if ((acc & TIR_ACCESS_LOAD) && (acc & TIR_ACCESS_STORE)) return true;
  }
  return false;
}

kiln_status_t kiln_plan_build(const kiln_graph_t* g, const kiln_plan_options_t* options,
                              kiln_allocator_t allocator, kiln_plan_t** out_plan) {
  return kiln_plan_build_host(g, options, NULL, allocator, out_plan);
}

static kiln_status_t plan_build(const kiln_graph_t* g, const kiln_plan_options_t* options, kiln_plan_host_t* host,
                                kiln_gemm_hook_fn hook, void* user, bool plain, kiln_allocator_t allocator,
                                kiln_plan_t** out_plan);

kiln_status_t kiln_plan_build_hooked(const kiln_graph_t* g, const kiln_plan_options_t* options, kiln_gemm_hook_fn hook,
                                     void* user, kiln_allocator_t allocator, kiln_plan_t** out_plan) {
  return plan_build(g, options, NULL, hook, user, false, allocator, out_plan);
}

kiln_status_t kiln_plan_build_plain(const kiln_graph_t* g, const kiln_plan_options_t* options,
                                    kiln_allocator_t allocator, kiln_plan_t** out_plan) {
  return plan_build(g, options, NULL, NULL, NULL, true, allocator, out_plan);
}

kiln_status_t kiln_plan_build_host(const kiln_graph_t* g, const kiln_plan_options_t* options,
                                   kiln_plan_host_t* host, kiln_allocator_t allocator, kiln_plan_t** out_plan) {
  return plan_build(g, options, host, NULL, NULL, false, allocator, out_plan);
}

static kiln_status_t plan_build(const kiln_graph_t* g, const kiln_plan_options_t* options, kiln_plan_host_t* host,
                                kiln_gemm_hook_fn hook, void* user, bool plain, kiln_allocator_t allocator,
                                kiln_plan_t** out_plan) {
  kiln_plan_options_t defaults = {KILN_TARGET_CLASS_CPU, 0, 0, 0, 0, 0};
  if (!options) options = &defaults;
  kiln_plan_t* p = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(allocator, sizeof(*p), "plan", (void**)&p));
  p->allocator = allocator;
  p->graph = g;
  p->target = options->target;
  p->loop_limit = options->target == KILN_TARGET_CLASS_GPU ? options->loop_limit : 0;
  p->ew_lanes = options->target == KILN_TARGET_CLASS_GPU ? options->ew_lanes : 0;
  p->gemm_hook = options->target == KILN_TARGET_CLASS_CPU ? hook : NULL;
  p->gemm_hook_user = user;
  p->sparse_mode = options->sparse;
  p->plain_loops = plain;
  p->sparse_notes = NULL;
  p->n_sparse_notes = p->cap_sparse_notes = 0;
  tir_ctx_init(&p->tir, allocator);
  kiln_status_t s = NULL;
  if ((s = kiln_allocator_malloc(allocator, sizeof(int32_t) * (size_t)(g->n_tensors + 1), "plan",
                                 (void**)&p->tensor_buffer)) ||
      (s = kiln_allocator_malloc(allocator, sizeof(int32_t) * (size_t)(g->n_inputs + 1), "plan",
                                 (void**)&p->inputs)) ||
      (s = kiln_allocator_malloc(allocator, sizeof(int32_t) * (size_t)(g->n_outputs + 1), "plan",
                                 (void**)&p->outputs)))
    goto fail;
  for (int32_t t = 0; t < g->n_tensors; ++t) p->tensor_buffer[t] = -1;
  if (options->target == KILN_TARGET_CLASS_CPU && options->layout_block > 0 && !host) {
    p->layout = calloc(1, sizeof *p->layout);
    p->reorder_buf = malloc(sizeof(int32_t) * ((size_t)g->n_tensors + 1));
    if (!p->layout || !p->reorder_buf) {
      s = kiln_make_status(KILN_OUT_OF_MEMORY, "plan: out of memory for the layouts");
      goto fail;
    }
    for (int32_t t = 0; t < g->n_tensors; ++t) p->reorder_buf[t] = -1;
    if ((s = kiln_layout_choose(g, options->layout_block, p->layout))) goto fail;
  }
  for (int32_t i = 0; i < g->n_inputs; ++i)
    if ((s = tensor_buffer(p, g->inputs[i], &p->inputs[i]))) goto fail;

  /* Lower every node; collect the ops without a lowering into one error. */
  char missing[1024] = "";
  int n_missing = 0;
  for (int32_t ni = 0; ni < g->n_nodes; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    bool folded = n->n_outputs > 0;
    for (int32_t j = 0; j < n->n_outputs; ++j)
      if (n->outputs[j] >= 0 && !(g->tensors[n->outputs[j]].flags & KILN_TENSOR_CONST)) folded = false;
    if (folded) continue; /* computed at load time */
    if (!lower_fn_of(n)) {
      if (!strstr(missing, n->op_type)) {
        size_t l = strlen(missing);
        snprintf(missing + l, sizeof missing - l, "%s%s (node '%s')", n_missing ? ", " : "",
                 n->op_type, n->name);
      }
      ++n_missing;
      continue;
    }
    if ((s = lower_node(p, ni, options, host))) goto fail;
  }
  if (n_missing) {
    s = kiln_make_status(KILN_UNSUPPORTED, "%s: no lowering for: %s", src_of(g), missing);
    goto fail;
  }
  for (int32_t i = 0; i < g->n_outputs; ++i)
    if ((s = tensor_buffer(p, g->outputs[i], &p->outputs[i]))) goto fail;

  /* Lifetimes, per memory root, in kernel indices. */
  for (int32_t k = 0; k < p->n_kernels; ++k)
    for (int32_t a = 0; a < p->kernels[k].func->n_params; ++a) {
      int32_t b = kiln_plan_root(p, p->kernels[k].args[a]);
      if (p->buffers[b].first_use < 0) p->buffers[b].first_use = k;
      p->buffers[b].last_use = k;
    }
  /* Kernel FLOPs: the node's count split over its kernels that reduce
   * (a Conv's GEMM, not its phase split or crop), or over all of them
   * when none does. */
  /* A node's kernels are contiguous (lower_node adds them in one go), so
   * each run is counted once: linear in the plan. */
  int32_t run_end = 0, same = 0, reducing = 0;
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    const kiln_node_t* n = &g->nodes[p->kernels[k].node];
    if (k >= run_end) {
      same = reducing = 0;
      for (run_end = k; run_end < p->n_kernels && p->kernels[run_end].node == p->kernels[k].node; ++run_end) {
        ++same;
        reducing += kernel_reduces(p->kernels[run_end].func);
      }
    }
    bool mine = reducing == 0 || kernel_reduces(p->kernels[k].func);
    int32_t share = reducing ? reducing : same;
    kiln_tensor_t* in[KILN_MAX_NODE_INPUTS];
    kiln_tensor_t* outp[KILN_MAX_NODE_OUTPUTS];
    for (int32_t j = 0; j < n->n_inputs; ++j)
      in[j] = n->inputs[j] >= 0 ? (kiln_tensor_t*)&g->tensors[n->inputs[j]] : NULL;
    for (int32_t j = 0; j < n->n_outputs; ++j)
      outp[j] = n->outputs[j] >= 0 ? (kiln_tensor_t*)&g->tensors[n->outputs[j]] : NULL;
    kiln_infer_t ic = {(kiln_graph_t*)g, n, g->opset, n->n_inputs, in, n->n_outputs, outp,
                       allocator, false};
    int64_t fl = n->schema && n->schema->flops ? n->schema->flops(&ic)
                 : (outp[0] ? kiln_shape_count(&outp[0]->shape) : 0);
    p->kernels[k].flops = !mine ? 0 : share ? fl / share : fl;
  }
  *out_plan = p;
  return NULL;
fail:
  kiln_plan_destroy(p);
  return s;
}

static const char* kind_name(kiln_plan_buffer_kind_t k) {
  switch (k) {
    case KILN_PLAN_INPUT: return "input";
    case KILN_PLAN_OUTPUT: return "output";
    case KILN_PLAN_INTERMEDIATE: return "intermediate";
    case KILN_PLAN_CONST: return "const";
    case KILN_PLAN_TEMP: return "temp";
    case KILN_PLAN_STATUS: return "status";
    case KILN_PLAN_DIMS: return "dims";
  }
  return "?";
}

void kiln_plan_dump(const kiln_plan_t* p, FILE* out, bool verbose) {
  fprintf(out, "plan: %d buffers, %d kernels\n", p->n_buffers, p->n_kernels);
  if (p->layout) kiln_layout_dump(p->layout, p->graph, out);
  for (int32_t i = 0; i < p->n_buffers; ++i) {
    const kiln_plan_buffer_t* b = &p->buffers[i];
    char sh[160];
    kiln_shape_t s = kiln_shape_make(b->buf->rank, b->buf->shape);
    fprintf(out, "  buffer %-3d %-12s %-32s %s%s", i, kind_name(b->kind), b->buf->name,
            kiln_dtype_name(b->buf->dtype), kiln_shape_format(&s, sh, sizeof sh));
    if (b->buf->rank == 5 && b->tensor >= 0 && p->layout && p->layout->tensor_block[b->tensor] > 0)
      fprintf(out, "  layout nchw%dc", (int)p->layout->tensor_block[b->tensor]);
    if (b->alias_of >= 0) fprintf(out, "  alias of %d", b->alias_of);
    if (b->first_use >= 0) fprintf(out, "  live %d..%d", b->first_use, b->last_use);
    fputc('\n', out);
  }
  for (int32_t k = 0; k < p->n_kernels; ++k) {
    const kiln_plan_kernel_t* kk = &p->kernels[k];
    fprintf(out, "  kernel %-3d %-32s node '%s' (%s)\n", k, kk->func->name,
            p->graph->nodes[kk->node].name, p->graph->nodes[kk->node].op_type);
    if (verbose) {
      if (kk->schedule && kk->schedule->n) {
        fputs("    schedule: ", out);
        tir_schedule_print(kk->schedule, out);
      }
      tir_print_func(kk->func, out);
    }
  }
}

static bool same_geometry(const tir_buffer_t* a, const tir_buffer_t* b) {
  if (a->rank != b->rank || kiln_dtype_size(a->dtype) != kiln_dtype_size(b->dtype)) return false;
  for (int32_t d = 0; d < a->rank; ++d)
    if (a->shape[d] != b->shape[d] || a->strides[d] != b->strides[d]) return false;
  return true;
}

/* Element-wise and broadcast ops read every operand that has the output's
 * full shape at the output element's own index (numpy broadcasting). */
static bool pointwise(kiln_op_pattern_t pat) {
  return pat == KILN_PATTERN_ELEMWISE || pat == KILN_PATTERN_BROADCAST;
}

bool kiln_plan_kernel_inplace(const kiln_plan_t* p, int32_t k, int32_t* out_in, int32_t* out_out) {
  const kiln_plan_kernel_t* kk = &p->kernels[k];
  const kiln_graph_t* g = p->graph;
  if (!g || kk->custom) return false; /* a plugin's kernel promises nothing about aliasing */
  for (int32_t i = -1; i < kk->n_fused_nodes; ++i) {
    int32_t n = i < 0 ? kk->node : kk->fused_nodes[i];
    /* QLinearAdd's pattern is opaque (fusion does not know its integer
     * arithmetic) but its flat loop reads a full-shape input at the
     * output element's own index as well (lower_nn_quant.c) */
    if (n < 0 || n >= g->n_nodes ||
        !(pointwise(kiln_op_pattern(g->nodes[n].op_type)) || !strcmp(g->nodes[n].op_type, "QLinearAdd")))
      return false;
  }
  const tir_func_t* f = kk->func;
  int32_t out = -1;
  for (int32_t j = 0; j < f->n_params; ++j)
    if (tir_func_buffer_access(f, f->params[j]) & TIR_ACCESS_STORE) {
      if (out >= 0) return false; /* several outputs */
      out = j;
    }
  if (out < 0 || tir_func_buffer_access(f, f->params[out]) != TIR_ACCESS_STORE) return false;
  int32_t ro = kiln_plan_root(p, kk->args[out]);
  for (int32_t j = 0; j < f->n_params; ++j) {
    if (j == out || tir_func_buffer_access(f, f->params[j]) != TIR_ACCESS_LOAD) continue;
    if (kiln_plan_root(p, kk->args[j]) == ro || !same_geometry(f->params[j], f->params[out]))
      continue;
    *out_in = j;
    *out_out = out;
    return true;
  }
  return false;
}
