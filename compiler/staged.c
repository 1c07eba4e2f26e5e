/* Staged execution (see staged.h): host nodes on the reference kernels,
 * the runs of nodes between them compiled per observed input shapes. */
#include "compiler/staged.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compiler/ref_exec.h"
#include "ir/op.h"
#include "runtime/module_impl.h"

/* Small integer stage inputs that may decide shapes (bound by value). */
#define BIND_MAX_ELEMENTS 64

/* One compiled variant of a stage: the shapes (and bound values) it was
 * compiled for, its graph (kept: outputs that folded to constants are read
 * from it) and its session. */
typedef struct entry_s {
  uint8_t* key;
  size_t key_len;
  kiln_graph_t* sg;
  kiln_module_t* mod;
  kiln_session_t* ses;
  int32_t* prog_out; /* per stage output: its index among the program's outputs, -1: a constant of sg */
  int32_t n_prog_out;
} entry_t;

typedef struct seg_s {
  bool host;
  int32_t a, b;     /* nodes [a, b) of the graph (host: b = a + 1) */
  int32_t n_in, n_out;
  int32_t* in;      /* tensors of the graph it reads (not constants) */
  int32_t* out;     /* tensors it produces that others read */
  int binds;        /* -1 not yet known; 1: small integer inputs bound by value */
  bool on_ref;      /* too many variants: the reference kernels run it */
  entry_t* entries;
  int32_t n_entries;
} seg_t;

typedef struct child_s {
  const kiln_graph_t* g;
  kiln_staged_t* st;
} child_t;

struct kiln_staged_s {
  const kiln_graph_t* g;
  kiln_staged_options_t o;
  seg_t* segs;
  int32_t n_segs;
  int32_t* last_seg; /* per tensor: last segment reading it (INT32_MAX: graph output) */
  child_t* children;
  int32_t n_children;
  kiln_staged_stats_t* stats; /* the root's */
  kiln_staged_stats_t own;
  kiln_compile_precision_t prec; /* o.precision points here when given */
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char* src_of(const kiln_graph_t* g) { return g->source && g->source[0] ? g->source : "graph"; }

bool kiln_graph_needs_staging(const kiln_graph_t* g) {
  for (int32_t i = 0; i < g->n_nodes; ++i)
    if (kiln_op_is_host_only(g, &g->nodes[i])) return true;
  return false;
}

/* Why node |n| runs on the host, for messages. */
static const char* host_reason(const kiln_node_t* n) {
  if (!strcmp(n->op_type, "If") || !strcmp(n->op_type, "Loop") || !strcmp(n->op_type, "Scan"))
    return "control flow: its subgraphs run as compiled stages called from the host";
  if (!strcmp(n->op_type, "TopK")) return "its K is known only at run time, so its output size depends on data";
  return "its output shape depends on data: sized after it runs, the stages after it compiled for that size";
}

static bool folded(const kiln_graph_t* g, const kiln_node_t* n) {
  bool all = n->n_outputs > 0;
  for (int32_t j = 0; j < n->n_outputs; ++j)
    if (n->outputs[j] >= 0 && !(g->tensors[n->outputs[j]].flags & KILN_TENSOR_CONST)) all = false;
  return all;
}

static kiln_status_t add_unique(int32_t** arr, int32_t* n, int32_t t) {
  for (int32_t i = 0; i < *n; ++i)
    if ((*arr)[i] == t) return NULL;
  int32_t* p = realloc(*arr, sizeof(int32_t) * (size_t)(*n + 1));
  if (!p) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory splitting stages");
  p[(*n)++] = t;
  *arr = p;
  return NULL;
}

/* Inputs and outputs of segment |s| (|producer_seg| per tensor). */
static kiln_status_t seg_io(kiln_staged_t* st, seg_t* s, int32_t si, const int32_t* tensor_seg) {
  const kiln_graph_t* g = st->g;
  for (int32_t ni = s->a; ni < s->b; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    if (folded(g, n)) continue;
    for (int32_t j = 0; j < n->n_inputs; ++j) {
      int32_t t = n->inputs[j];
      if (t < 0 || (g->tensors[t].flags & KILN_TENSOR_CONST) || tensor_seg[t] == si) continue;
      KILN_RETURN_IF_ERROR(add_unique(&s->in, &s->n_in, t));
    }
  }
  for (int32_t t = 0; t < g->n_tensors; ++t)
    if (tensor_seg[t] == si && st->last_seg[t] > si) KILN_RETURN_IF_ERROR(add_unique(&s->out, &s->n_out, t));
  return NULL;
}

kiln_status_t kiln_staged_log(const kiln_graph_t* g, const kiln_target_t* target, kiln_compile_log_t* log) {
  const bool gpu = target->lowering == KILN_TARGET_CLASS_GPU;
  int32_t n = 0;
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    const kiln_node_t* nd = &g->nodes[i];
    if (!kiln_op_is_host_only(g, nd)) continue;
    ++n;
    if (gpu)
      KILN_RETURN_IF_ERROR(kiln_compile_log_line(log, "fallback", "fallback: node '%s' (%s) runs on the cpu: %s", nd->name,
                                                 nd->op_type, host_reason(nd)));
    else
      KILN_RETURN_IF_ERROR(kiln_compile_log_line(log, "staged", "staged: node '%s' (%s) runs on the host: %s", nd->name,
                                                 nd->op_type, host_reason(nd)));
  }
  return kiln_compile_log_value(log, gpu ? "fallback" : "staged", "host_nodes", n);
}

kiln_status_t kiln_staged_create(const kiln_graph_t* g, const kiln_staged_options_t* options, kiln_staged_t** out) {
  if (options->strict && options->target->lowering == KILN_TARGET_CLASS_GPU)
    for (int32_t i = 0; i < g->n_nodes; ++i)
      if (kiln_op_is_host_only(g, &g->nodes[i]))
        return kiln_make_status(KILN_UNSUPPORTED, "%s: node '%s' (%s) cannot run on the %s target (--strict): %s",
                                src_of(g), g->nodes[i].name, g->nodes[i].op_type, options->target->name,
                                host_reason(&g->nodes[i]));
  if (options->precision && options->precision->mode != KILN_PRECISION_FP32 &&
      options->precision->mode != KILN_PRECISION_FP16)
    return kiln_make_status(KILN_UNSUPPORTED, "%s: --precision %s calibrates the whole graph; a graph run in stages "
                            "(data-dependent shapes, control flow) takes fp32 or fp16", src_of(g),
                            kiln_precision_mode_name(options->precision->mode));
  kiln_staged_t* st = calloc(1, sizeof *st);
  int32_t* tensor_seg = NULL;
  kiln_status_t s = NULL;
  if (!st) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory creating the staged executor");
  st->g = g;
  st->o = *options;
  if (options->precision) {
    st->prec = *options->precision;
    st->o.precision = &st->prec;
  }
  if (st->o.max_specializations <= 0) st->o.max_specializations = 16;
  st->stats = &st->own;
  st->segs = calloc((size_t)g->n_nodes + 1, sizeof(seg_t));
  st->last_seg = calloc((size_t)g->n_tensors + 1, sizeof(int32_t));
  tensor_seg = calloc((size_t)g->n_tensors + 1, sizeof(int32_t));
  if (!st->segs || !st->last_seg || !tensor_seg) {
    s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory creating the staged executor");
    goto done;
  }
  for (int32_t t = 0; t < g->n_tensors; ++t) st->last_seg[t] = tensor_seg[t] = -1;
  /* segments: each host node alone, the runs between them together */
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    const kiln_node_t* n = &g->nodes[i];
    if (folded(g, n)) continue;
    bool host = kiln_op_is_host_only(g, n);
    seg_t* last = st->n_segs ? &st->segs[st->n_segs - 1] : NULL;
    if (!host && last && !last->host) {
      last->b = i + 1;
    } else {
      seg_t* sg = &st->segs[st->n_segs++];
      sg->host = host;
      sg->a = i;
      sg->b = i + 1;
      sg->binds = -1;
      if (host) st->own.host_nodes++;
    }
    for (int32_t j = 0; j < n->n_outputs; ++j)
      if (n->outputs[j] >= 0) tensor_seg[n->outputs[j]] = st->n_segs - 1;
    for (int32_t j = 0; j < n->n_inputs; ++j)
      if (n->inputs[j] >= 0) st->last_seg[n->inputs[j]] = st->n_segs - 1;
  }
  for (int32_t i = 0; i < g->n_outputs; ++i) st->last_seg[g->outputs[i]] = INT32_MAX;
  st->own.stages = st->n_segs;
  for (int32_t si = 0; si < st->n_segs && !s; ++si) s = seg_io(st, &st->segs[si], si, tensor_seg);
done:
  free(tensor_seg);
  if (s) {
    kiln_staged_destroy(st);
    return s;
  }
  *out = st;
  return NULL;
}

static void entry_free(entry_t* e) {
  kiln_session_destroy(e->ses);
  kiln_module_release(e->mod);
  kiln_graph_destroy(e->sg);
  free(e->key);
  free(e->prog_out);
}

void kiln_staged_destroy(kiln_staged_t* st) {
  if (!st) return;
  for (int32_t i = 0; st->segs && i < st->n_segs; ++i) {
    seg_t* s = &st->segs[i];
    for (int32_t k = 0; k < s->n_entries; ++k) entry_free(&s->entries[k]);
    free(s->entries);
    free(s->in);
    free(s->out);
  }
  for (int32_t i = 0; i < st->n_children; ++i) kiln_staged_destroy(st->children[i].st);
  free(st->children);
  free(st->segs);
  free(st->last_seg);
  free(st);
}

void kiln_staged_stats(const kiln_staged_t* st, kiln_staged_stats_t* out) {
  *out = *st->stats;
  out->stages = st->own.stages;
  out->host_nodes = st->own.host_nodes;
}

/* ---- compiled stages ---------------------------------------------------- */

static bool bindable(const kiln_array_t* v) {
  return (v->dtype == KILN_DTYPE_I64 || v->dtype == KILN_DTYPE_I32) && kiln_array_numel(v) <= BIND_MAX_ELEMENTS;
}

/* The cache key of segment |s| on |vals|: each input's dtype and shape, and
 * with |binds| the values of the bindable ones. */
static kiln_status_t make_key(const seg_t* s, const kiln_array_t* vals, bool binds, uint8_t** out, size_t* out_len) {
  size_t len = 0;
  for (int32_t k = 0; k < s->n_in; ++k) {
    const kiln_array_t* v = &vals[s->in[k]];
    len += sizeof(int32_t) * 2 + sizeof(int64_t) * (size_t)v->shape.rank;
    if (binds && bindable(v)) len += v->nbytes;
  }
  uint8_t* key = malloc(len + 1);
  if (!key) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory keying a stage");
  size_t at = 0;
  for (int32_t k = 0; k < s->n_in; ++k) {
    const kiln_array_t* v = &vals[s->in[k]];
    int32_t head[2] = {(int32_t)v->dtype, v->shape.rank};
    memcpy(key + at, head, sizeof head);
    at += sizeof head;
    memcpy(key + at, v->shape.dims, sizeof(int64_t) * (size_t)v->shape.rank);
    at += sizeof(int64_t) * (size_t)v->shape.rank;
    if (binds && bindable(v) && v->nbytes) {
      memcpy(key + at, v->data, v->nbytes);
      at += v->nbytes;
    }
  }
  *out = key;
  *out_len = at;
  return NULL;
}

/* Segment |s| as a graph of its own: its inputs typed as |vals| holds them
 * (bound by value with |binds|), the constants it reads as initializers,
 * its outputs those later segments read. Prepared. */
static kiln_status_t stage_graph(const kiln_staged_t* st, const seg_t* s, const kiln_array_t* vals, bool binds,
                                 kiln_graph_t** out) {
  const kiln_graph_t* g = st->g;
  kiln_graph_t* sg = NULL;
  KILN_RETURN_IF_ERROR(kiln_graph_create(kiln_allocator_system(), &sg));
  kiln_status_t s2 = NULL;
  sg->source = kiln_graph_strdup(sg, g->source);
  for (int32_t i = 0; i < g->n_opsets && !s2; ++i) s2 = kiln_graph_set_opset(sg, g->opsets[i].domain, g->opsets[i].version);
  for (int32_t k = 0; k < s->n_in && !s2; ++k) {
    const kiln_tensor_t* t = &g->tensors[s->in[k]];
    const kiln_array_t* v = &vals[s->in[k]];
    s2 = kiln_graph_add_input(sg, t->name, v->dtype, &v->shape, NULL);
    if (!s2 && binds && bindable(v)) s2 = kiln_graph_bind_input_value(sg, k, v);
  }
  const char* ins[KILN_MAX_NODE_INPUTS];
  const char* outs[KILN_MAX_NODE_OUTPUTS];
  for (int32_t ni = s->a; ni < s->b && !s2; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    if (folded(g, n)) continue;
    for (int32_t j = 0; j < n->n_inputs && !s2; ++j) {
      int32_t t = n->inputs[j];
      ins[j] = t >= 0 ? g->tensors[t].name : "";
      if (t < 0 || !(g->tensors[t].flags & KILN_TENSOR_CONST) || kiln_graph_find_tensor(sg, ins[j]) >= 0) continue;
      kiln_array_t c;
      s2 = kiln_array_clone(sg->allocator, &g->tensors[t].value, &c);
      if (!s2) s2 = kiln_graph_add_initializer(sg, ins[j], &c, NULL);
    }
    for (int32_t j = 0; j < n->n_outputs; ++j) outs[j] = n->outputs[j] >= 0 ? g->tensors[n->outputs[j]].name : "";
    int32_t added;
    if (!s2) s2 = kiln_graph_add_node(sg, n->op_type, n->name, n->n_inputs, ins, n->n_outputs, outs, n->n_attrs, n->attrs, &added);
    if (!s2 && n->domain && n->domain[0]) sg->nodes[added].domain = kiln_graph_strdup(sg, n->domain);
  }
  for (int32_t k = 0; k < s->n_out && !s2; ++k) s2 = kiln_graph_add_output(sg, g->tensors[s->out[k]].name);
  if (!s2) s2 = kiln_graph_prepare(sg);
  if (s2) {
    kiln_graph_destroy(sg);
    return s2;
  }
  *out = sg;
  return NULL;
}

/* Compiles segment |s| for |vals| into |e| (key set by the caller). */
static kiln_status_t compile_entry(kiln_staged_t* st, seg_t* s, const kiln_array_t* vals, entry_t* e) {
  if (s->binds < 0) { /* first time: do the shapes need values? */
    kiln_graph_t* probe = NULL;
    KILN_RETURN_IF_ERROR(stage_graph(st, s, vals, false, &probe));
    s->binds = kiln_graph_all_static(probe) ? 0 : 1;
    kiln_graph_destroy(probe);
  }
  KILN_RETURN_IF_ERROR(stage_graph(st, s, vals, s->binds == 1, &e->sg));
  kiln_graph_t* sg = e->sg;
  e->prog_out = calloc((size_t)s->n_out + 1, sizeof(int32_t));
  if (!e->prog_out) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory compiling a stage");
  /* outputs that folded to constants are served from sg; the program
   * computes the others */
  int32_t np = 0;
  for (int32_t k = 0; k < s->n_out; ++k) {
    int32_t t = sg->outputs[k];
    if (sg->tensors[t].flags & KILN_TENSOR_CONST) {
      e->prog_out[k] = -1;
      sg->tensors[t].flags &= ~(uint32_t)KILN_TENSOR_OUTPUT;
    } else {
      e->prog_out[k] = np;
      sg->outputs[np++] = t;
    }
  }
  sg->n_outputs = np;
  e->n_prog_out = np;
  if (np == 0) return NULL;
  kiln_compile_log_t log = {0};
  kiln_compile_precision_t prec;
  if (st->o.precision) prec = *st->o.precision;
  else kiln_compile_precision_default(&prec);
  prec.strict = st->o.strict;
  kiln_compile_config_t cc = {0};
  cc.target = st->o.target;
  cc.opt = st->o.opt;
  cc.threads = st->o.threads;
  cc.model_name = src_of(st->g);
  cc.precision = &prec;
  cc.loop_limit = st->o.loop_limit;
  cc.tuning_device = st->o.device; /* its limits (texels, bindings); no tuning cache is read */
  cc.gpu_lacks = st->o.target->lowering == KILN_TARGET_CLASS_GPU ? kiln_compile_gpu_lacks(&st->o.device->info) : 0;
  kiln_status_t s2 = st->o.opt >= 1 ? kiln_compile_graph_passes(sg, st->o.opt, st->o.target, &log) : NULL;
  kiln_program_t* prog = NULL;
  if (!s2) s2 = kiln_compile_program(sg, &cc, &log, &prog);
  kiln_compile_log_free(&log);
  if (!s2) s2 = kiln_module_wrap(prog, &e->mod);
  kiln_session_options_t so;
  kiln_session_options_default(&so);
  so.slots = 1;
  if (!s2) s2 = kiln_session_create(e->mod, st->o.device, &so, &e->ses);
  if (!s2) st->stats->compiles++;
  return s2;
}

/* Runs compiled segment |si| (or on the reference kernels once it has too
 * many variants), its outputs into |vals| / |owned|. */
static kiln_status_t run_stage(kiln_staged_t* st, int32_t si, kiln_array_t* vals, uint8_t* owned);

static kiln_status_t run_host(kiln_staged_t* st, int32_t ni, kiln_array_t* vals, uint8_t* owned);

static kiln_status_t run_on_ref(kiln_staged_t* st, const seg_t* s, kiln_array_t* vals, uint8_t* owned) {
  for (int32_t ni = s->a; ni < s->b; ++ni)
    if (!folded(st->g, &st->g->nodes[ni])) KILN_RETURN_IF_ERROR(run_host(st, ni, vals, owned));
  return NULL;
}

static kiln_status_t run_stage(kiln_staged_t* st, int32_t si, kiln_array_t* vals, uint8_t* owned) {
  seg_t* s = &st->segs[si];
  if (s->on_ref) {
    st->stats->on_reference++;
    return run_on_ref(st, s, vals, owned);
  }
  uint8_t* key = NULL;
  size_t key_len = 0;
  entry_t* e = NULL;
  if (s->binds >= 0) {
    KILN_RETURN_IF_ERROR(make_key(s, vals, s->binds == 1, &key, &key_len));
    for (int32_t k = 0; k < s->n_entries && !e; ++k)
      if (s->entries[k].key_len == key_len && !memcmp(s->entries[k].key, key, key_len)) e = &s->entries[k];
  }
  if (e) {
    free(key);
    st->stats->reuses++;
  } else {
    if (s->n_entries >= st->o.max_specializations) {
      free(key);
      s->on_ref = true;
      st->stats->on_reference++;
      return run_on_ref(st, s, vals, owned);
    }
    entry_t* grown = realloc(s->entries, sizeof(entry_t) * (size_t)(s->n_entries + 1));
    if (!grown) {
      free(key);
      return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory caching a stage");
    }
    s->entries = grown;
    e = &s->entries[s->n_entries];
    memset(e, 0, sizeof *e);
    double t0 = now_s();
    kiln_status_t cs = compile_entry(st, s, vals, e);
    st->stats->compile_s += now_s() - t0;
    if (!cs && !key) cs = make_key(s, vals, s->binds == 1, &key, &key_len);
    if (cs) {
      free(key);
      entry_free(e);
      return kiln_status_annotate(cs, "%s: stage of nodes '%s'..'%s'", src_of(st->g), st->g->nodes[s->a].name,
                                  st->g->nodes[s->b - 1].name);
    }
    e->key = key;
    e->key_len = key_len;
    s->n_entries++;
  }
  kiln_array_t* ins = calloc((size_t)s->n_in + 1, sizeof(kiln_array_t));
  kiln_array_t* outs = calloc((size_t)e->n_prog_out + 1, sizeof(kiln_array_t));
  kiln_status_t rs = NULL;
  if (!ins || !outs) rs = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory running a stage");
  for (int32_t k = 0; k < s->n_in && !rs; ++k) ins[k] = vals[s->in[k]];
  if (!rs && e->ses) rs = kiln_session_run(e->ses, ins, outs);
  for (int32_t k = 0; k < s->n_out && !rs; ++k) {
    int32_t t = s->out[k];
    if (e->prog_out[k] >= 0) {
      vals[t] = outs[e->prog_out[k]];
      memset(&outs[e->prog_out[k]], 0, sizeof(kiln_array_t));
    } else {
      int32_t c = kiln_graph_find_tensor(e->sg, st->g->tensors[t].name);
      rs = kiln_array_clone(kiln_allocator_system(), &e->sg->tensors[c].value, &vals[t]);
    }
    if (!rs) owned[t] = 1;
  }
  for (int32_t k = 0; outs && k < e->n_prog_out; ++k) kiln_array_free(kiln_allocator_system(), &outs[k]);
  free(ins);
  free(outs);
  if (rs)
    rs = kiln_status_annotate(rs, "%s: stage of nodes '%s'..'%s'", src_of(st->g), st->g->nodes[s->a].name,
                              st->g->nodes[s->b - 1].name);
  return rs;
}

/* ---- host nodes and subgraphs ------------------------------------------- */

static kiln_status_t run_graph_on(kiln_staged_t* st, const kiln_array_t* inputs, kiln_array_t* outputs);

/* kiln_ref_ctx_t.run_graph of host nodes: a subgraph through a child
 * executor of its own (created on first use, kept with its stages). */
static kiln_status_t run_child(void* user, const kiln_graph_t* g, const kiln_array_t* inputs, kiln_array_t* outputs) {
  kiln_staged_t* st = user;
  kiln_staged_t* child = NULL;
  for (int32_t i = 0; i < st->n_children && !child; ++i)
    if (st->children[i].g == g) child = st->children[i].st;
  if (!child) {
    child_t* grown = realloc(st->children, sizeof(child_t) * (size_t)(st->n_children + 1));
    if (!grown) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory running a subgraph");
    st->children = grown;
    kiln_staged_options_t o = st->o;
    o.strict = false; /* refused at the top already */
    KILN_RETURN_IF_ERROR(kiln_staged_create(g, &o, &child));
    child->stats = st->stats;
    st->children[st->n_children++] = (child_t){g, child};
  }
  return run_graph_on(child, inputs, outputs);
}

static kiln_status_t run_host(kiln_staged_t* st, int32_t ni, kiln_array_t* vals, uint8_t* owned) {
  kiln_ref_options_t ro;
  kiln_ref_options_default(&ro);
  kiln_array_t* aout[KILN_MAX_NODE_OUTPUTS];
  double dt;
  return kiln_ref_node_run(st->g, ni, vals, owned, &ro, run_child, st, aout, &dt);
}

static kiln_status_t run_graph_on(kiln_staged_t* st, const kiln_array_t* inputs, kiln_array_t* outputs) {
  const kiln_graph_t* g = st->g;
  int32_t nt = g->n_tensors;
  kiln_array_t* vals = calloc((size_t)nt + 1, sizeof(kiln_array_t));
  uint8_t* owned = calloc((size_t)nt + 1, 1);
  int64_t* sym_val = calloc((size_t)g->n_symbols + 2, sizeof(int64_t));
  kiln_allocator_t a = kiln_allocator_system();
  kiln_status_t s = NULL;
  if (!vals || !owned || !sym_val) {
    s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory running a staged graph");
    goto done;
  }
  for (int32_t i = 0; i <= g->n_symbols; ++i) sym_val[i] = -1;
  for (int32_t t = 0; t < nt; ++t)
    if (g->tensors[t].flags & KILN_TENSOR_CONST) vals[t] = g->tensors[t].value;
  for (int32_t i = 0; i < g->n_inputs && !s; ++i) {
    if ((s = kiln_check_input(g, i, &inputs[i], sym_val))) break;
    vals[g->inputs[i]] = inputs[i];
  }
  for (int32_t si = 0; si < st->n_segs && !s; ++si) {
    const seg_t* sg = &st->segs[si];
    if (sg->host) {
      double t0 = now_s(), c0 = st->stats->compile_s;
      s = run_host(st, sg->a, vals, owned);
      st->stats->host_s += now_s() - t0 - (st->stats->compile_s - c0); /* its bodies' compiles apart */
    } else {
      s = run_stage(st, si, vals, owned);
    }
    for (int32_t t = 0; t < nt; ++t)
      if (owned[t] && st->last_seg[t] <= si) {
        kiln_array_free(a, &vals[t]);
        owned[t] = 0;
      }
  }
  for (int32_t i = 0; i < g->n_outputs && !s; ++i) {
    int32_t t = g->outputs[i];
    if (owned[t]) {
      outputs[i] = vals[t];
      owned[t] = 0;
      memset(&vals[t], 0, sizeof vals[t]);
    } else if ((s = kiln_array_clone(a, &vals[t], &outputs[i]))) {
      for (int32_t k = 0; k < i; ++k) kiln_array_free(a, &outputs[k]);
    }
  }
done:
  for (int32_t t = 0; owned && t < nt; ++t)
    if (owned[t]) kiln_array_free(a, &vals[t]);
  free(vals);
  free(owned);
  free(sym_val);
  return s;
}

kiln_status_t kiln_staged_run(kiln_staged_t* st, const kiln_array_t* inputs, kiln_array_t* outputs) {
  return run_graph_on(st, inputs, outputs);
}

/* ---- the segments, for the module form (api/driver_staged.c) ---- */

int32_t kiln_staged_segment_count(const kiln_staged_t* st) { return st->n_segs; }

void kiln_staged_segment_info(const kiln_staged_t* st, int32_t si, kiln_staged_segment_info_t* out) {
  const seg_t* s = &st->segs[si];
  *out = (kiln_staged_segment_info_t){s->host, s->a, s->b, s->n_in, s->in, s->n_out, s->out};
}

kiln_status_t kiln_staged_segment_graph(const kiln_staged_t* st, int32_t si, const kiln_array_t* vals,
                                        kiln_graph_t** out) {
  return stage_graph(st, &st->segs[si], vals, false, out);
}
