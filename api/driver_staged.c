/* `kiln compile` of a model with data-dependent output sizes: the staged
 * module (runtime/program_staged.h, docs/DESIGN.md "Data-dependent shapes
 * and control flow"). The graph is split as the staged executor splits it
 * (compiler/staged.h); each stage is compiled as kiln_driver_build compiles
 * a model, for the shapes its inputs have, and each host node is stored as
 * an op of the runtime's closed table with its integer attributes and its
 * constant inputs inline (NonZero, NonMaxSuppression, TopK with a run-time
 * K, Compress). This version stores stages whose inputs all have
 * fixed shapes: a stage that reads a data-dependent value (it would need
 * the bucket sizes of the design) and a host node outside the table are
 * refused naming the node, pointing at `kiln run` and the compiler API,
 * which compile those per shape. */
#include <stdlib.h>
#include <string.h>

#include "api/driver.h"
#include "compiler/staged.h"
#include "ir/graph.h"
#include "ir/op.h"
#include "runtime/program.h"
#include "runtime/program_staged.h"

typedef struct {
  const kiln_driver_request_t* r;
  const kiln_graph_t* g;
  const kiln_staged_t* st;
  kiln_program_t* p;   /* the shell, which owns the table */
  kiln_program_staged_t* t;
  int32_t* vid;        /* per graph tensor: its value, -1 none yet */
  int32_t cap_values, cap_segs;
  int32_t cur;         /* the segment being built */
} bld_t;

static const char* src(const bld_t* b) { return b->r->model_path ? b->r->model_path : "model"; }

static kiln_status_t oom(const bld_t* b) {
  return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: out of memory building the staged module", src(b));
}

static kiln_status_t grow(const bld_t* b, void** arr, int32_t n, int32_t* cap, size_t elem) {
  if (n < *cap) return NULL;
  int32_t nc = *cap ? *cap * 2 : 16;
  void* m = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(b->p->allocator, elem * (size_t)nc, "staged table", &m));
  memset(m, 0, elem * (size_t)nc);
  if (*arr) memcpy(m, *arr, elem * (size_t)n);
  kiln_allocator_free(b->p->allocator, *arr);
  *arr = m;
  *cap = nc;
  return NULL;
}

/* A value for graph tensor |ti| (its dtype and shape; a data-dependent
 * axis at its bound), a constant's bytes copied when |with_data|. */
static kiln_status_t add_value(bld_t* b, int32_t ti, const kiln_node_t* maker, int32_t* out) {
  const kiln_tensor_t* x = &b->g->tensors[ti];
  KILN_RETURN_IF_ERROR(grow(b, (void**)&b->t->values, b->t->n_values, &b->cap_values, sizeof(kiln_staged_value_t)));
  kiln_staged_value_t* v = &b->t->values[b->t->n_values];
  v->dtype = x->dtype;
  v->rank = x->shape.rank;
  if (v->rank < 0)
    return kiln_make_status(KILN_UNSUPPORTED, "%s: tensor '%s' has no known rank; a staged module needs one", src(b),
                            x->name);
  for (int32_t d = 0; d < v->rank; ++d) {
    const int64_t n = x->shape.dims[d];
    if (kiln_dim_known(n)) {
      v->dims[d] = n;
      continue;
    }
    const int64_t bound = kiln_graph_datadep_bound(b->g, n);
    if (bound < 0 || !maker)
      return kiln_make_status(KILN_UNSUPPORTED,
                              "%s: tensor '%s'%s%s%s has an axis with no known upper bound; a staged module stores "
                              "each data-dependent axis with its bound (run the model with `kiln run`)",
                              src(b), x->name, maker ? " (from node '" : "", maker ? maker->name : "", maker ? "')" : "");
    v->dims[d] = bound;
    v->datadep |= 1u << d;
  }
  if (x->flags & KILN_TENSOR_CONST) {
    v->nbytes = x->value.nbytes;
    KILN_RETURN_IF_ERROR(kiln_allocator_malloc(b->p->allocator, (size_t)v->nbytes + 1, "staged constant", (void**)&v->data));
    memcpy(v->data, x->value.data, (size_t)v->nbytes);
  }
  *out = b->vid[ti] = b->t->n_values++;
  return NULL;
}

static kiln_status_t new_segment(bld_t* b, int32_t op, const char* name, int32_t n_in, int32_t n_out,
                                 kiln_staged_segment_t** out) {
  KILN_RETURN_IF_ERROR(grow(b, (void**)&b->t->segments, b->t->n_segments, &b->cap_segs, sizeof(kiln_staged_segment_t)));
  kiln_staged_segment_t* s = &b->t->segments[b->t->n_segments++];
  s->op = op;
  KILN_RETURN_IF_ERROR(kiln_program_strdup(b->p, name, &s->name));
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(b->p->allocator, sizeof(int32_t) * ((size_t)n_in + 1), "staged ids", (void**)&s->in));
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(b->p->allocator, sizeof(int32_t) * ((size_t)n_out + 1), "staged ids", (void**)&s->out));
  s->n_in = n_in;
  s->n_out = n_out;
  *out = s;
  return NULL;
}

/* Host node |n| has no kernel in the runtime's table. */
static kiln_status_t refuse_host(const bld_t* b, const kiln_node_t* n) {
  return kiln_make_status(KILN_UNSUPPORTED,
                          "%s: node '%s' (%s) runs on the host between stages, and staged modules have host kernels "
                          "for NonZero, NonMaxSuppression, Compress and TopK only; run the model with `kiln "
                          "run` or the compiler API's runner (kiln_compiler_runner_create), which compile it per "
                          "shape",
                          src(b), n->name, n->op_type);
}

/* Stage |in| reads tensor |ti|, whose size depends on data. */
static kiln_status_t refuse_read(const bld_t* b, const kiln_staged_segment_info_t* in, int32_t ti);

static kiln_status_t host_segment(bld_t* b, const kiln_staged_segment_info_t* in) {
  const kiln_node_t* n = &b->g->nodes[in->a];
  const int32_t op = kiln_staged_op_of(n->op_type);
  if (op == KILN_STAGED_STAGE || (n->domain && n->domain[0])) return refuse_host(b, n);
  if (n->n_outputs < 1 || n->n_outputs > KILN_STAGED_MAX_IO || n->n_inputs > KILN_STAGED_MAX_IO)
    return kiln_make_status(KILN_UNSUPPORTED, "%s: node '%s' (%s) has %d outputs", src(b), n->name, n->op_type,
                            (int)n->n_outputs);
  kiln_staged_segment_t* s = NULL;
  KILN_RETURN_IF_ERROR(new_segment(b, op, n->name, n->n_inputs, n->n_outputs, &s));
  for (int32_t j = 0; j < n->n_inputs; ++j) {
    const int32_t ti = n->inputs[j];
    int32_t v = -1;
    if (ti >= 0 && b->vid[ti] >= 0) v = b->vid[ti];
    else if (ti >= 0) KILN_RETURN_IF_ERROR(add_value(b, ti, NULL, &v)); /* a constant: inline */
    b->t->segments[b->t->n_segments - 1].in[j] = v;
  }
  s = &b->t->segments[b->t->n_segments - 1];
  for (int32_t k = 0; k < n->n_attrs; ++k) {
    if (!kiln_staged_attr_known(op, n->attrs[k].name)) continue;
    int64_t v = 0;
    KILN_RETURN_IF_ERROR(kiln_attr_int(n, n->attrs[k].name, 0, &v));
    if (!s->attrs)
      KILN_RETURN_IF_ERROR(kiln_allocator_malloc(b->p->allocator, sizeof(kiln_staged_attr_t) * KILN_STAGED_MAX_ATTRS,
                                                 "staged attributes", (void**)&s->attrs));
    if (s->n_attrs == KILN_STAGED_MAX_ATTRS) break;
    s->attrs[s->n_attrs].value = v;
    KILN_RETURN_IF_ERROR(kiln_program_strdup(b->p, n->attrs[k].name, &s->attrs[s->n_attrs++].name));
  }
  for (int32_t k = 0; k < n->n_outputs; ++k) {
    int32_t v = -1; /* an output the model does not name: made and dropped */
    if (n->outputs[k] >= 0) KILN_RETURN_IF_ERROR(add_value(b, n->outputs[k], n, &v));
    b->t->segments[b->t->n_segments - 1].out[k] = v;
  }
  return NULL;
}

/* The node of stage |in| that reads tensor |ti| first. */
static const kiln_node_t* reader_of(const bld_t* b, const kiln_staged_segment_info_t* in, int32_t ti) {
  for (int32_t ni = in->a; ni < in->b; ++ni)
    for (int32_t j = 0; j < b->g->nodes[ni].n_inputs; ++j)
      if (b->g->nodes[ni].inputs[j] == ti) return &b->g->nodes[ni];
  return &b->g->nodes[in->a];
}

static kiln_status_t refuse_read(const bld_t* b, const kiln_staged_segment_info_t* in, int32_t ti) {
  const kiln_node_t* rn = reader_of(b, in, ti);
  const kiln_node_t* mk = b->g->tensors[ti].producer >= 0 ? &b->g->nodes[b->g->tensors[ti].producer] : NULL;
  return kiln_make_status(KILN_UNSUPPORTED,
                          "%s: node '%s' (%s) reads '%s', whose size depends on data%s%s%s; `kiln compile` stores "
                          "only stages whose inputs have fixed sizes (the bucketed stages of docs/DESIGN.md are not "
                          "built yet): run the model with `kiln run` or the compiler API's runner "
                          "(kiln_compiler_runner_create), which compile it per shape",
                          src(b), rn->name, rn->op_type, b->g->tensors[ti].name, mk ? " (made by node '" : "",
                          mk ? mk->name : "", mk ? "')" : "");
}

/* What this version does not store, found before any stage is compiled (a
 * detector's backbone takes seconds to compile; its refusal should not). */
static kiln_status_t precheck(const bld_t* b) {
  uint8_t* from_host = calloc((size_t)b->g->n_tensors + 1, 1);
  if (!from_host) return oom(b);
  kiln_status_t st = NULL;
  for (int32_t si = 0; si < kiln_staged_segment_count(b->st) && !st; ++si) {
    kiln_staged_segment_info_t in;
    kiln_staged_segment_info(b->st, si, &in);
    const kiln_node_t* n = &b->g->nodes[in.a];
    if (in.host && (kiln_staged_op_of(n->op_type) == KILN_STAGED_STAGE || (n->domain && n->domain[0])))
      st = refuse_host(b, n);
    for (int32_t k = 0; !st && !in.host && k < in.n_in; ++k)
      if (from_host[in.in[k]]) st = refuse_read(b, &in, in.in[k]);
    for (int32_t k = 0; in.host && k < n->n_outputs; ++k)
      if (n->outputs[k] >= 0 && !kiln_shape_is_static(&b->g->tensors[n->outputs[k]].shape))
        from_host[n->outputs[k]] = 1; /* a data-dependent size */
  }
  free(from_host);
  return st;
}

static kiln_status_t stage_segment(bld_t* b, kiln_driver_graph_t* dg, kiln_compile_log_t* log,
                                   const kiln_staged_segment_info_t* in) {
  kiln_array_t* vals = calloc((size_t)b->g->n_tensors + 1, sizeof(kiln_array_t));
  if (!vals) return oom(b);
  for (int32_t k = 0; k < in->n_in; ++k) {
    const int32_t ti = in->in[k], v = b->vid[ti];
    if (v < 0 || b->t->values[v].datadep) {
      free(vals);
      return refuse_read(b, in, ti);
    }
    vals[ti].dtype = b->t->values[v].dtype;
    vals[ti].shape.rank = b->t->values[v].rank;
    memcpy(vals[ti].shape.dims, b->t->values[v].dims, sizeof vals[ti].shape.dims);
  }
  kiln_graph_t* sg = NULL;
  kiln_status_t st = kiln_staged_segment_graph(b->st, b->cur, vals, &sg);
  free(vals);
  KILN_RETURN_IF_ERROR(st);
  /* outputs folded to constants are values of their own; the program
   * computes the others */
  int32_t np = 0;
  int32_t* prog_t = calloc((size_t)in->n_out + 1, sizeof(int32_t));
  if (!prog_t) st = oom(b);
  for (int32_t k = 0; k < in->n_out && !st; ++k) {
    const int32_t t = sg->outputs[k];
    if (sg->tensors[t].flags & KILN_TENSOR_CONST) {
      int32_t v;
      /* the constant's bytes are sg's: take them through the parent's tensor id */
      const kiln_tensor_t* x = &sg->tensors[t];
      st = grow(b, (void**)&b->t->values, b->t->n_values, &b->cap_values, sizeof(kiln_staged_value_t));
      if (st) break;
      kiln_staged_value_t* cv = &b->t->values[b->t->n_values];
      cv->dtype = x->dtype;
      cv->rank = x->value.shape.rank;
      memcpy(cv->dims, x->value.shape.dims, sizeof cv->dims);
      cv->nbytes = x->value.nbytes;
      st = kiln_allocator_malloc(b->p->allocator, (size_t)cv->nbytes + 1, "staged constant", (void**)&cv->data);
      if (!st) memcpy(cv->data, x->value.data, (size_t)cv->nbytes);
      v = b->t->n_values++;
      b->vid[in->out[k]] = v;
      sg->tensors[t].flags &= ~(uint32_t)KILN_TENSOR_OUTPUT;
    } else {
      prog_t[np] = in->out[k];
      sg->outputs[np++] = t;
    }
  }
  sg->n_outputs = np;
  kiln_program_t* prog = NULL;
  if (!st && np && b->r->opt >= 1) st = kiln_compile_graph_passes(sg, b->r->opt, b->r->target, log);
  if (!st && np) {
    kiln_driver_graph_t sdg = *dg;
    sdg.g = sg;
    st = kiln_driver_build(b->r, &sdg, log, &prog);
  }
  /* the program's inputs and outputs are the segment's, in its order:
   * checked by name, as two of one shape would pass the table's checks */
  for (int32_t k = 0; !st && prog && k < in->n_in; ++k)
    if (k >= prog->n_inputs || strcmp(prog->input_names[k], b->g->tensors[in->in[k]].name) != 0)
      st = kiln_make_status(KILN_INTERNAL, "%s: stage '%s': its program's input %d is not '%s'", src(b),
                            b->g->nodes[in->a].name, (int)k, b->g->tensors[in->in[k]].name);
  for (int32_t k = 0; !st && prog && k < np; ++k)
    if (k >= prog->n_outputs || strcmp(prog->output_names[k], b->g->tensors[prog_t[k]].name) != 0)
      st = kiln_make_status(KILN_INTERNAL, "%s: stage '%s': its program's output %d is not '%s'", src(b),
                            b->g->nodes[in->a].name, (int)k, b->g->tensors[prog_t[k]].name);
  kiln_staged_segment_t* seg = NULL;
  if (!st && np) st = new_segment(b, KILN_STAGED_STAGE, b->g->nodes[in->a].name, in->n_in, np, &seg);
  if (!st && np) {
    seg->prog = prog;
    prog = NULL;
    for (int32_t k = 0; k < in->n_in; ++k) seg->in[k] = b->vid[in->in[k]];
    for (int32_t k = 0; k < np && !st; ++k) {
      int32_t v;
      const kiln_node_t* mk = &b->g->nodes[in->a];
      st = add_value(b, prog_t[k], mk, &v);
      if (!st) b->t->segments[b->t->n_segments - 1].out[k] = v;
    }
  }
  kiln_program_destroy(prog);
  free(prog_t);
  kiln_graph_destroy(sg);
  return st;
}

/* The shell's buffer for model input or output |i|: value |v|'s shape. */
static kiln_status_t shell_io(bld_t* b, int32_t i, bool out, int32_t v) {
  kiln_program_t* p = b->p;
  const kiln_staged_value_t* x = &b->t->values[v];
  const int32_t bi = out ? p->n_inputs + i : i;
  kiln_program_buffer_t* buf = &p->buffers[bi];
  const int32_t ti = out ? b->g->outputs[i] : b->g->inputs[i];
  KILN_RETURN_IF_ERROR(kiln_program_strdup(p, b->g->tensors[ti].name, &buf->name));
  buf->dtype = x->dtype;
  buf->kind = out ? KILN_PB_OUTPUT : KILN_PB_INPUT;
  buf->rank = x->rank;
  memcpy(buf->shape, x->dims, sizeof buf->shape);
  buf->bytes = kiln_staged_value_bytes(x);
  buf->alias_of = buf->first_use = buf->last_use = -1;
  (out ? p->outputs : p->inputs)[i] = bi;
  (out ? b->t->model_out : b->t->model_in)[i] = v;
  return kiln_program_strdup(p, b->g->tensors[ti].name, out ? &p->output_names[i] : &p->input_names[i]);
}

static kiln_status_t build(bld_t* b, kiln_driver_graph_t* dg, kiln_compile_log_t* log) {
  const kiln_graph_t* g = b->g;
  kiln_program_t* p = b->p;
  kiln_allocator_t a = p->allocator;
  const int32_t ni = g->n_inputs, no = g->n_outputs;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(a, sizeof(kiln_program_staged_t), "staged table", (void**)&b->t));
  memset(b->t, 0, sizeof *b->t);
  p->staged = b->t;
  void* m[7] = {NULL};
  const size_t sz[7] = {sizeof(kiln_program_buffer_t) * (size_t)(ni + no + 1), sizeof(int32_t) * (size_t)(ni + 1),
                        sizeof(int32_t) * (size_t)(no + 1), sizeof(char*) * (size_t)(ni + 1),
                        sizeof(char*) * (size_t)(no + 1), sizeof(int32_t) * (size_t)(ni + 1),
                        sizeof(int32_t) * (size_t)(no + 1)};
  for (int k = 0; k < 7; ++k) {
    KILN_RETURN_IF_ERROR(kiln_allocator_malloc(a, sz[k], "staged shell", &m[k]));
    memset(m[k], 0, sz[k]);
  }
  p->buffers = m[0], p->inputs = m[1], p->outputs = m[2], p->input_names = m[3], p->output_names = m[4];
  b->t->model_in = m[5];
  b->t->model_out = m[6];
  for (int32_t i = 0; i < ni; ++i) {
    int32_t v;
    KILN_RETURN_IF_ERROR(add_value(b, g->inputs[i], NULL, &v));
  }
  const int32_t n_segs = kiln_staged_segment_count(b->st);
  for (b->cur = 0; b->cur < n_segs; ++b->cur) {
    kiln_staged_segment_info_t in;
    kiln_staged_segment_info(b->st, b->cur, &in);
    KILN_RETURN_IF_ERROR(in.host ? host_segment(b, &in) : stage_segment(b, dg, log, &in));
  }
  /* the shell's buffers: inputs, then outputs (ids fixed before the
   * arrays are filled, as shell_io writes both) */
  p->n_buffers = ni + no;
  p->n_inputs = ni;
  p->n_outputs = no;
  for (int32_t i = 0; i < ni; ++i) KILN_RETURN_IF_ERROR(shell_io(b, i, false, b->vid[g->inputs[i]]));
  for (int32_t i = 0; i < no; ++i) {
    int32_t v = b->vid[g->outputs[i]];
    if (v < 0) KILN_RETURN_IF_ERROR(add_value(b, g->outputs[i], NULL, &v)); /* a constant output */
    KILN_RETURN_IF_ERROR(shell_io(b, i, true, v));
  }
  const kiln_program_t* first = NULL;
  for (int32_t i = 0; i < b->t->n_segments && !first; ++i) first = b->t->segments[i].prog;
  if (first) {
    KILN_RETURN_IF_ERROR(kiln_program_strdup(p, first->precision, &p->precision));
    KILN_RETURN_IF_ERROR(kiln_program_strdup(p, first->options, &p->options));
  }
  return NULL;
}

kiln_status_t kiln_driver_build_staged(const kiln_driver_request_t* r, kiln_driver_graph_t* dg, kiln_compile_log_t* log,
                                       kiln_program_t** out) {
  *out = NULL;
  const kiln_graph_t* g = dg->g;
  kiln_staged_options_t o = {.target = r->target, .opt = r->opt, .threads = r->threads, .strict = dg->prec.strict,
                             .precision = &dg->prec};
  kiln_staged_t* st = NULL;
  KILN_RETURN_IF_ERROR(kiln_staged_create(g, &o, &st));
  bld_t b = {.r = r, .g = g, .st = st};
  kiln_status_t s = kiln_program_create(kiln_allocator_system(), &b.p);
  if (!s) {
    b.vid = malloc(sizeof(int32_t) * ((size_t)g->n_tensors + 1));
    if (!b.vid) s = oom(&b);
    for (int32_t i = 0; !s && i < g->n_tensors; ++i) b.vid[i] = -1;
  }
  if (!s) {
    b.p->target = r->target->name;
    s = kiln_program_strdup(b.p, r->model_name ? r->model_name : r->model_path, &b.p->model_name);
  }
  if (!s) s = precheck(&b);
  if (!s) s = build(&b, dg, log);
  if (!s) s = kiln_program_validate(b.p);
  free(b.vid);
  kiln_staged_destroy(st);
  if (s) {
    kiln_program_destroy(b.p);
    return s;
  }
  *out = b.p;
  return NULL;
}
