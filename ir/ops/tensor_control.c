/* Control flow: If, Loop and Scan.
 *
 * Their bodies are subgraphs (kiln_attr_t.graph) that the frontend parsed
 * with the names they read from the enclosing scope appended to their inputs
 * and to the node's (ir/graph.h, n_outer): node inputs are the op's own, then
 * each GRAPH attribute's outer names in attribute order.
 *
 * infer prepares each body once at load time, with the types of the values
 * the node passes in (outer shapes with their symbolic dims made unknown:
 * symbols belong to one graph), and lifts the bodies' output shapes into the
 * parent: a dim the body cannot fix (a branch-dependent size, a Loop's trip
 * count) becomes a data-dependent dim. run executes the bodies through the
 * context's run_graph (the reference executor or the staged executor's
 * compiled subprograms) and allocates its outputs (kiln_op_sizes_outputs). */
#include <string.h>

#include "ir/ops/tensor_impl.h"

/* Loop iterations one run may take: a Loop with a huge trip count and a
 * condition that never turns false is a hang, not a model. */
#define LOOP_MAX_ITERATIONS (1ll << 24)

/* The body |name| of |n| and where its outer inputs start among n's inputs. */
static kiln_status_t body_of(const kiln_node_t* n, const char* name, kiln_graph_t** out, int32_t* out_base) {
  int32_t outer_total = 0, before = 0;
  const kiln_attr_t* found = NULL;
  for (int32_t i = 0; i < n->n_attrs; ++i) {
    const kiln_attr_t* a = &n->attrs[i];
    if (a->type != KILN_ATTR_GRAPH || !a->graph) continue;
    if (strcmp(a->name, name) == 0) {
      found = a;
      before = outer_total;
    }
    outer_total += a->graph->n_outer;
  }
  if (!found)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: attribute '%s' is missing or not a graph", n->op_type, name);
  if (outer_total > n->n_inputs)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: %d inputs, fewer than its subgraphs' %d outer names",
                            n->op_type, n->n_inputs, outer_total);
  *out = found->graph;
  *out_base = n->n_inputs - outer_total + before;
  return NULL;
}

/* Inputs of |n| that are the op's own (not outer names). */
static int32_t formal_inputs(const kiln_node_t* n) {
  int32_t k = n->n_inputs;
  for (int32_t i = 0; i < n->n_attrs; ++i)
    if (n->attrs[i].type == KILN_ATTR_GRAPH && n->attrs[i].graph) k -= n->attrs[i].graph->n_outer;
  return k;
}

static kiln_shape_t unsymbolic(kiln_shape_t s) {
  for (int32_t d = 0; d < s.rank; ++d)
    if (s.dims[d] < 0) s.dims[d] = KILN_DIM_UNKNOWN;
  return s;
}

/* Types body |sub|'s formal input |k| (when it declares none) and prepares it
 * once. |dt|/|sh|: the formal inputs' types (n_formal of them). */
static kiln_status_t prepare_body(kiln_infer_t* ctx, kiln_graph_t* sub, const char* what, int32_t base,
                                  int32_t n_formal, const kiln_dtype_t* dt, const kiln_shape_t* sh) {
  if (sub->sub_prepared || ctx->runtime) return NULL;
  if (sub->n_inputs - sub->n_outer != n_formal)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: %s takes %d inputs, the node gives it %d", ctx->node->op_type,
                            what, sub->n_inputs - sub->n_outer, n_formal);
  for (int32_t k = 0; k < n_formal; ++k) {
    kiln_tensor_t* t = &sub->tensors[sub->inputs[k]];
    if (t->dtype == KILN_DTYPE_UNDEFINED) t->dtype = dt[k];
    else if (dt[k] != KILN_DTYPE_UNDEFINED && t->dtype != dt[k])
      return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: %s input '%s' is %s, the node gives it %s", ctx->node->op_type,
                              what, t->name, kiln_dtype_name(t->dtype), kiln_dtype_name(dt[k]));
    if (t->shape.rank < 0 && sh) t->shape = unsymbolic(sh[k]);
  }
  for (int32_t k = 0; k < sub->n_outer; ++k) {
    kiln_tensor_t* t = &sub->tensors[sub->inputs[sub->n_inputs - sub->n_outer + k]];
    const kiln_tensor_t* o = ctx->in[base + k];
    if (!o) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: %s reads '%s', which is omitted", ctx->node->op_type, what, t->name);
    t->dtype = o->dtype;
    t->shape = unsymbolic(o->shape);
  }
  sub->sub_prepared = true; /* also stops a body that (wrongly) nests itself */
  KILN_RETURN_IF_ERROR(kiln_graph_prepare(sub), "%s", what);
  return NULL;
}

/* Output |i| of the node from body output shape |s| (dims it cannot fix are
 * data-dependent; |bound| for them, -1 none). */
static kiln_status_t lift(kiln_infer_t* ctx, int32_t i, kiln_dtype_t dt, kiln_shape_t s, int64_t bound) {
  char what[32];
  for (int32_t d = 0; d < s.rank; ++d) {
    if (s.dims[d] >= 0) continue;
    snprintf(what, sizeof what, "out%d.%d", i, d);
    KILN_TRY(kiln_infer_datadep(ctx, i, what, bound, &s.dims[d]));
  }
  if (s.rank < 0 && i < ctx->n_out && ctx->out[i] && !ctx->runtime) ctx->out[i]->flags |= KILN_TENSOR_DATADEP;
  kiln_infer_set(ctx, i, dt, &s);
  return NULL;
}

static const kiln_tensor_t* body_out(const kiln_graph_t* g, int32_t k) { return &g->tensors[g->outputs[k]]; }

/* Moves a run's |n| output arrays into the node's outputs (omitted ones
 * are freed). */
static void hand_over(const kiln_ref_ctx_t* ctx, kiln_array_t* outs, int32_t first, int32_t n, int32_t to) {
  for (int32_t k = 0; k < n; ++k) {
    int32_t j = to + k;
    if (j < ctx->n_out && ctx->out[j]) {
      *ctx->out[j] = outs[first + k];
      memset(&outs[first + k], 0, sizeof outs[first + k]);
    } else {
      kiln_array_free(ctx->allocator, &outs[first + k]);
    }
  }
}

static kiln_status_t no_runner(const kiln_ref_ctx_t* ctx) {
  return kiln_make_status(KILN_UNSUPPORTED, "%s: nothing here runs subgraphs (constant folding)", ctx->node->op_type);
}

/* ---- If ------------------------------------------------------------------------ */

kiln_status_t kiln_tensor_if_infer(kiln_infer_t* ctx) {
  kiln_graph_t *tb, *eb;
  int32_t tbase, ebase;
  KILN_TRY(body_of(ctx->node, "then_branch", &tb, &tbase));
  KILN_TRY(body_of(ctx->node, "else_branch", &eb, &ebase));
  if (formal_inputs(ctx->node) != 1)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "If: takes one input (cond), has %d", formal_inputs(ctx->node));
  const kiln_tensor_t* c = ctx->in[0];
  if (c->dtype != KILN_DTYPE_BOOL)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "If: cond '%s' is %s, not bool", c->name, kiln_dtype_name(c->dtype));
  if (tb->n_outputs != ctx->n_out || eb->n_outputs != ctx->n_out)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "If: %d outputs, then_branch has %d and else_branch %d", ctx->n_out,
                            tb->n_outputs, eb->n_outputs);
  /* A known condition prepares only the branch taken: ONNX functions guard
   * a branch that does not fit these shapes (a rank test) with one. */
  const kiln_array_t* cv = kiln_tensor_value(ctx, 0);
  const int known = cv && kiln_array_numel(cv) == 1 ? (((const uint8_t*)cv->data)[0] != 0) : -1;
  if (known != 0) KILN_TRY(prepare_body(ctx, tb, "then_branch", tbase, 0, NULL, NULL));
  if (known != 1) KILN_TRY(prepare_body(ctx, eb, "else_branch", ebase, 0, NULL, NULL));
  for (int32_t i = 0; i < ctx->n_out; ++i) {
    const kiln_tensor_t *a = body_out(tb, i), *b = body_out(eb, i);
    if (a->dtype != b->dtype && a->dtype != KILN_DTYPE_UNDEFINED && b->dtype != KILN_DTYPE_UNDEFINED)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "If: output %d is %s in then_branch and %s in else_branch", i,
                              kiln_dtype_name(a->dtype), kiln_dtype_name(b->dtype));
    kiln_shape_t s = unsymbolic(a->shape);
    if (known >= 0) {
      s = unsymbolic(known ? a->shape : b->shape);
    } else if (a->shape.rank != b->shape.rank) {
      s = kiln_shape_unknown();
    } else {
      for (int32_t d = 0; d < s.rank; ++d)
        if (a->shape.dims[d] != b->shape.dims[d]) s.dims[d] = KILN_DIM_UNKNOWN;
    }
    kiln_dtype_t dt = known == 0 ? b->dtype : a->dtype != KILN_DTYPE_UNDEFINED ? a->dtype : b->dtype;
    KILN_TRY(lift(ctx, i, dt, s, -1));
  }
  return NULL;
}

/* Gathers body inputs: |formal| arrays, then the node's outer inputs. */
static kiln_status_t body_inputs(const kiln_ref_ctx_t* ctx, const kiln_graph_t* sub, int32_t base,
                                 const kiln_array_t* formal, int32_t n_formal, kiln_array_t** out) {
  KILN_TRY(kiln_allocator_malloc(ctx->allocator, sizeof(kiln_array_t) * (size_t)(sub->n_inputs + 1), ctx->node->op_type,
                                 (void**)out));
  for (int32_t k = 0; k < n_formal; ++k) (*out)[k] = formal[k];
  for (int32_t k = 0; k < sub->n_outer; ++k) {
    const kiln_array_t* a = ctx->in[base + k];
    if (!a) {
      kiln_allocator_free(ctx->allocator, *out);
      return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: outer input %d is omitted", ctx->node->op_type, k);
    }
    (*out)[n_formal + k] = *a;
  }
  return NULL;
}

kiln_status_t kiln_tensor_if_run(const kiln_ref_ctx_t* ctx) {
  if (!ctx->run_graph) return no_runner(ctx);
  const kiln_array_t* c = ctx->in[0];
  if (c->dtype != KILN_DTYPE_BOOL || kiln_array_numel(c) != 1)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "If: cond must be one bool, has %lld elements of %s",
                            (long long)kiln_array_numel(c), kiln_dtype_name(c->dtype));
  kiln_graph_t* b;
  int32_t base;
  KILN_TRY(body_of(ctx->node, ((const uint8_t*)c->data)[0] ? "then_branch" : "else_branch", &b, &base));
  if (b->n_outputs != ctx->n_out)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "If: branch has %d outputs, the node %d", b->n_outputs, ctx->n_out);
  kiln_array_t *ins = NULL, *outs = NULL;
  KILN_TRY(body_inputs(ctx, b, base, NULL, 0, &ins));
  kiln_status_t s = kiln_allocator_malloc(ctx->allocator, sizeof(kiln_array_t) * (size_t)(b->n_outputs + 1), "If",
                                          (void**)&outs);
  if (!s) {
    memset(outs, 0, sizeof(kiln_array_t) * (size_t)(b->n_outputs + 1));
    s = ctx->run_graph(ctx->run_graph_user, b, ins, outs);
  }
  if (!s) hand_over(ctx, outs, 0, b->n_outputs, 0);
  kiln_allocator_free(ctx->allocator, ins);
  kiln_allocator_free(ctx->allocator, outs);
  return s;
}

/* ---- Loop ---------------------------------------------------------------------- */

kiln_status_t kiln_tensor_loop_infer(kiln_infer_t* ctx) {
  kiln_graph_t* body;
  int32_t base;
  KILN_TRY(body_of(ctx->node, "body", &body, &base));
  int32_t nf = formal_inputs(ctx->node), N = nf - 2;
  if (N < 0) return kiln_make_status(KILN_INVALID_ARGUMENT, "Loop: needs inputs M and cond (may be empty), has %d", nf);
  int32_t K = ctx->n_out - N;
  if (K < 0) return kiln_make_status(KILN_INVALID_ARGUMENT, "Loop: %d outputs for %d loop-carried values", ctx->n_out, N);
  const kiln_tensor_t* m = ctx->in[0];
  const kiln_tensor_t* c = ctx->in[1];
  if (m && (!kiln_dtype_is_int(m->dtype) || (m->shape.rank > 0 && kiln_shape_is_static(&m->shape) &&
                                             kiln_shape_count(&m->shape) != 1)))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Loop: trip count M '%s' must be one integer, is %s", m->name,
                            kiln_dtype_name(m->dtype));
  if (c && c->dtype != KILN_DTYPE_BOOL)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Loop: cond '%s' must be bool, is %s", c->name, kiln_dtype_name(c->dtype));
  kiln_dtype_t dt[KILN_MAX_NODE_INPUTS];
  kiln_shape_t sh[KILN_MAX_NODE_INPUTS];
  if (nf > KILN_MAX_NODE_INPUTS) return kiln_make_status(KILN_LIMIT_EXCEEDED, "Loop: %d inputs", nf);
  dt[0] = KILN_DTYPE_I64, sh[0] = kiln_shape_make(0, NULL);
  dt[1] = KILN_DTYPE_BOOL, sh[1] = kiln_shape_make(0, NULL);
  for (int32_t k = 0; k < N; ++k) {
    if (!ctx->in[2 + k]) return kiln_make_status(KILN_INVALID_ARGUMENT, "Loop: loop-carried input %d is omitted", k);
    dt[2 + k] = ctx->in[2 + k]->dtype;
    sh[2 + k] = kiln_shape_unknown(); /* may change from one iteration to the next */
  }
  KILN_TRY(prepare_body(ctx, body, "body", base, nf, dt, sh));
  if (body->n_outputs != 1 + N + K)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Loop: body has %d outputs, needs 1 + %d carried + %d scan",
                            body->n_outputs, N, K);
  int64_t trips = -1, mv[1], cnt = 0;
  const kiln_array_t* mval = kiln_tensor_value(ctx, 0);
  if (mval && !kiln_tensor_read_ints("Loop", "M", mval, mv, 1, &cnt) && cnt == 1)
    trips = mv[0] < 0 ? 0 : mv[0];
  for (int32_t k = 0; k < N; ++k) {
    const kiln_tensor_t* o = body_out(body, 1 + k);
    kiln_shape_t s = unsymbolic(o->shape);
    if (!kiln_shape_equal(&s, &ctx->in[2 + k]->shape)) s = kiln_tensor_unknown_rank(s.rank);
    KILN_TRY(lift(ctx, k, ctx->in[2 + k]->dtype, s, -1));
  }
  for (int32_t k = 0; k < K; ++k) {
    const kiln_tensor_t* o = body_out(body, 1 + N + k);
    kiln_shape_t s = kiln_shape_unknown();
    if (o->shape.rank >= 0 && o->shape.rank < KILN_MAX_RANK) {
      s.rank = o->shape.rank + 1;
      s.dims[0] = KILN_DIM_UNKNOWN;
      for (int32_t d = 0; d < o->shape.rank; ++d) s.dims[d + 1] = o->shape.dims[d] < 0 ? KILN_DIM_UNKNOWN : o->shape.dims[d];
    }
    KILN_TRY(lift(ctx, N + k, o->dtype, s, trips));
  }
  return NULL;
}

/* A growing stack of same-shaped arrays (a scan output). */
typedef struct {
  kiln_array_t one; /* shape and dtype of one entry (no data) */
  char* data;
  int64_t n, cap;
  bool set;
} scan_stack_t;

static kiln_status_t stack_push(kiln_allocator_t a, scan_stack_t* st, const kiln_array_t* v, const char* op, int32_t k) {
  if (!st->set) {
    st->one = *v;
    st->one.data = NULL;
    st->set = true;
  } else if (v->dtype != st->one.dtype || !kiln_shape_equal(&v->shape, &st->one.shape)) {
    char x[128], y[128];
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: scan output %d changes from %s%s to %s%s between iterations", op, k,
                            kiln_dtype_name(st->one.dtype), kiln_shape_format(&st->one.shape, x, sizeof x),
                            kiln_dtype_name(v->dtype), kiln_shape_format(&v->shape, y, sizeof y));
  }
  size_t sz = (size_t)kiln_array_numel(v) * kiln_dtype_size(v->dtype);
  if (st->n == st->cap) {
    int64_t nc = st->cap ? st->cap * 2 : 8;
    void* p = st->data;
    KILN_TRY(p ? kiln_allocator_realloc(a, sz * (size_t)nc + 1, op, &p) : kiln_allocator_malloc(a, sz * (size_t)nc + 1, op, &p));
    st->data = p;
    st->cap = nc;
  }
  if (sz) memcpy(st->data + sz * (size_t)st->n, v->data, sz);
  st->n++;
  return NULL;
}

/* The stacked output: [n, one...] with entry t at position |at(t)| along
 * |axis| (Scan's output axes and directions; Loop: axis 0, forward). */
static kiln_status_t stack_take(kiln_allocator_t a, scan_stack_t* st, const kiln_shape_t* fallback, kiln_dtype_t fdt, int32_t axis,
                                bool reverse, kiln_array_t* out) {
  kiln_shape_t one = st->set ? st->one.shape : *fallback;
  kiln_dtype_t dt = st->set ? st->one.dtype : fdt;
  if (one.rank < 0 || !kiln_shape_is_static(&one)) one = kiln_shape_make(0, NULL);
  if (one.rank >= KILN_MAX_RANK) return kiln_make_status(KILN_LIMIT_EXCEEDED, "scan output rank %d too high", one.rank);
  if (axis < 0) axis += one.rank + 1;
  if (axis < 0 || axis > one.rank) return kiln_make_status(KILN_INVALID_ARGUMENT, "scan output axis %d out of range", axis);
  kiln_shape_t s;
  s.rank = one.rank + 1;
  for (int32_t d = 0, j = 0; d < s.rank; ++d) s.dims[d] = d == axis ? st->n : one.dims[j++];
  KILN_TRY(kiln_array_alloc(a, dt, &s, out));
  int64_t outer = 1, inner = 1;
  for (int32_t d = 0; d < axis; ++d) outer *= one.dims[d];
  for (int32_t d = axis; d < one.rank; ++d) inner *= one.dims[d];
  size_t esz = kiln_dtype_size(dt);
  for (int64_t t = 0; t < st->n; ++t) {
    int64_t p = reverse ? st->n - 1 - t : t;
    for (int64_t o = 0; o < outer; ++o)
      memcpy((char*)out->data + (size_t)((o * st->n + p) * inner) * esz,
             st->data + (size_t)(t * outer * inner + o * inner) * esz, (size_t)inner * esz);
  }
  return NULL;
}

static void free_arrays(kiln_allocator_t a, kiln_array_t* v, int32_t n) {
  for (int32_t i = 0; v && i < n; ++i) kiln_array_free(a, &v[i]);
}

kiln_status_t kiln_tensor_loop_run(const kiln_ref_ctx_t* ctx) {
  if (!ctx->run_graph) return no_runner(ctx);
  kiln_graph_t* body;
  int32_t base;
  KILN_TRY(body_of(ctx->node, "body", &body, &base));
  kiln_allocator_t al = ctx->allocator;
  int32_t nf = formal_inputs(ctx->node), N = nf - 2, K = ctx->n_out - N;
  if (N < 0 || K < 0 || body->n_outputs != 1 + N + K || body->n_inputs - body->n_outer != 2 + N)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Loop: body signature does not fit the node");
  int64_t trips = INT64_MAX;
  bool cond = true;
  const kiln_array_t* m = ctx->in[0];
  if (m) {
    if (!kiln_dtype_is_int(m->dtype) || kiln_array_numel(m) != 1)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "Loop: trip count M must be one integer, has %lld elements of %s",
                              (long long)kiln_array_numel(m), kiln_dtype_name(m->dtype));
    trips = kiln_load_i64(m->dtype, m->data, 0);
  }
  if (ctx->in[1]) {
    if (ctx->in[1]->dtype != KILN_DTYPE_BOOL || kiln_array_numel(ctx->in[1]) != 1)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "Loop: cond must be one bool");
    cond = ((const uint8_t*)ctx->in[1]->data)[0] != 0;
  }
  if (!m && !ctx->in[1])
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Loop: neither a trip count nor a condition: it would never end");
  kiln_array_t* state = NULL; /* [iter, cond, carried N] */
  kiln_array_t* outs = NULL;
  scan_stack_t* scans = NULL;
  kiln_status_t s = kiln_allocator_malloc(al, sizeof(kiln_array_t) * (size_t)(2 + N + 1), "Loop", (void**)&state);
  if (!s) s = kiln_allocator_malloc(al, sizeof(kiln_array_t) * (size_t)(1 + N + K + 1), "Loop", (void**)&outs);
  if (!s) s = kiln_allocator_malloc(al, sizeof(scan_stack_t) * (size_t)(K + 1), "Loop", (void**)&scans);
  if (s) goto done;
  memset(state, 0, sizeof(kiln_array_t) * (size_t)(2 + N + 1));
  memset(outs, 0, sizeof(kiln_array_t) * (size_t)(1 + N + K + 1));
  memset(scans, 0, sizeof(scan_stack_t) * (size_t)(K + 1));
  kiln_shape_t scalar = kiln_shape_make(0, NULL);
  if ((s = kiln_array_alloc(al, KILN_DTYPE_I64, &scalar, &state[0])) || (s = kiln_array_alloc(al, KILN_DTYPE_BOOL, &scalar, &state[1])))
    goto done;
  for (int32_t k = 0; k < N && !s; ++k) {
    if (!ctx->in[2 + k]) s = kiln_make_status(KILN_INVALID_ARGUMENT, "Loop: loop-carried input %d is omitted", k);
    else s = kiln_array_clone(al, ctx->in[2 + k], &state[2 + k]);
  }
  int64_t it = 0;
  for (; !s && cond && it < trips; ++it) {
    if (it >= LOOP_MAX_ITERATIONS) {
      s = kiln_make_status(KILN_LIMIT_EXCEEDED, "Loop: more than %lld iterations", (long long)LOOP_MAX_ITERATIONS);
      break;
    }
    ((int64_t*)state[0].data)[0] = it;
    ((uint8_t*)state[1].data)[0] = cond;
    kiln_array_t* ins = NULL;
    if ((s = body_inputs(ctx, body, base, state, 2 + N, &ins))) break;
    s = ctx->run_graph(ctx->run_graph_user, body, ins, outs);
    kiln_allocator_free(al, ins);
    if (s) break;
    if (outs[0].dtype != KILN_DTYPE_BOOL || kiln_array_numel(&outs[0]) != 1)
      s = kiln_make_status(KILN_INVALID_ARGUMENT, "Loop: body's condition output is not one bool");
    else
      cond = ((const uint8_t*)outs[0].data)[0] != 0;
    for (int32_t k = 0; k < N && !s; ++k) {
      kiln_array_free(al, &state[2 + k]);
      state[2 + k] = outs[1 + k];
      memset(&outs[1 + k], 0, sizeof outs[1 + k]);
    }
    for (int32_t k = 0; k < K && !s; ++k) s = stack_push(al, &scans[k], &outs[1 + N + k], "Loop", k);
    free_arrays(al, outs, 1 + N + K);
  }
  if (s) goto done;
  hand_over(ctx, state, 2, N, 0);
  for (int32_t k = 0; k < K && !s; ++k) {
    int32_t j = N + k;
    const kiln_tensor_t* o = body_out(body, 1 + N + k);
    kiln_array_t v = {0};
    if ((s = stack_take(al, &scans[k], &o->shape, o->dtype, 0, false, &v))) break;
    if (j < ctx->n_out && ctx->out[j]) *ctx->out[j] = v;
    else kiln_array_free(al, &v);
  }
done:
  if (s)
    for (int32_t j = 0; j < ctx->n_out; ++j)
      if (ctx->out[j]) kiln_array_free(al, ctx->out[j]);
  free_arrays(al, state, state ? 2 + N : 0);
  free_arrays(al, outs, outs ? 1 + N + K : 0);
  for (int32_t k = 0; scans && k < K; ++k) kiln_allocator_free(al, scans[k].data);
  kiln_allocator_free(al, state);
  kiln_allocator_free(al, outs);
  kiln_allocator_free(al, scans);
  return s;
}

/* ---- Scan (opset 9+) ------------------------------------------------------------ */

typedef struct {
  int32_t N, M, K;
  const int64_t* in_axes;   /* M or NULL */
  const int64_t* in_dirs;
  const int64_t* out_axes;  /* K or NULL */
  const int64_t* out_dirs;
} scan_attrs_t;

static kiln_status_t scan_attrs(const kiln_node_t* n, int64_t opset, int32_t nf, int32_t n_out, scan_attrs_t* a) {
  if (opset < 9) return kiln_make_status(KILN_UNSUPPORTED, "Scan: opset %lld (batched, with sequence_lens) is not supported", (long long)opset);
  int64_t m, cnt;
  KILN_TRY(kiln_attr_int_required(n, "num_scan_inputs", &m));
  if (m < 1 || m > nf) return kiln_make_status(KILN_INVALID_ARGUMENT, "Scan: num_scan_inputs = %lld of %d inputs", (long long)m, nf);
  a->M = (int32_t)m;
  a->N = nf - a->M;
  a->K = n_out - a->N;
  if (a->K < 0) return kiln_make_status(KILN_INVALID_ARGUMENT, "Scan: %d outputs for %d states", n_out, a->N);
  struct { const char* name; const int64_t** v; int32_t want; } lists[] = {
      {"scan_input_axes", &a->in_axes, a->M}, {"scan_input_directions", &a->in_dirs, a->M},
      {"scan_output_axes", &a->out_axes, a->K}, {"scan_output_directions", &a->out_dirs, a->K}};
  for (int i = 0; i < 4; ++i) {
    KILN_TRY(kiln_attr_ints(n, lists[i].name, lists[i].v, &cnt));
    if (cnt >= 0 && cnt != lists[i].want)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "Scan: %s has %lld entries, needs %d", lists[i].name, (long long)cnt,
                              lists[i].want);
  }
  return NULL;
}

kiln_status_t kiln_tensor_scan_infer(kiln_infer_t* ctx) {
  kiln_graph_t* body;
  int32_t base;
  KILN_TRY(body_of(ctx->node, "body", &body, &base));
  int32_t nf = formal_inputs(ctx->node);
  scan_attrs_t a;
  KILN_TRY(scan_attrs(ctx->node, ctx->opset, nf, ctx->n_out, &a));
  if (nf > KILN_MAX_NODE_INPUTS) return kiln_make_status(KILN_LIMIT_EXCEEDED, "Scan: %d inputs", nf);
  kiln_dtype_t dt[KILN_MAX_NODE_INPUTS];
  kiln_shape_t sh[KILN_MAX_NODE_INPUTS];
  for (int32_t k = 0; k < nf; ++k) {
    const kiln_tensor_t* t = ctx->in[k];
    if (!t) return kiln_make_status(KILN_INVALID_ARGUMENT, "Scan: input %d is omitted", k);
    dt[k] = t->dtype;
    sh[k] = t->shape;
    if (k >= a.N && t->shape.rank >= 0) { /* a slice: the scan axis removed */
      int32_t ax;
      KILN_TRY(kiln_tensor_axis("Scan", "scan_input_axes", a.in_axes ? a.in_axes[k - a.N] : 0, t->shape.rank, &ax));
      for (int32_t d = ax; d + 1 < t->shape.rank; ++d) sh[k].dims[d] = t->shape.dims[d + 1];
      sh[k].rank--;
    }
  }
  KILN_TRY(prepare_body(ctx, body, "body", base, nf, dt, sh));
  if (body->n_outputs != a.N + a.K)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Scan: body has %d outputs, needs %d", body->n_outputs, a.N + a.K);
  for (int32_t k = 0; k < a.N; ++k) KILN_TRY(lift(ctx, k, dt[k], unsymbolic(body_out(body, k)->shape), -1));
  int64_t len = -1;
  const kiln_tensor_t* x0 = ctx->in[a.N];
  if (x0->shape.rank > 0) {
    int32_t ax;
    KILN_TRY(kiln_tensor_axis("Scan", "scan_input_axes", a.in_axes ? a.in_axes[0] : 0, x0->shape.rank, &ax));
    if (x0->shape.dims[ax] >= 0) len = x0->shape.dims[ax];
  }
  for (int32_t k = 0; k < a.K; ++k) {
    const kiln_tensor_t* o = body_out(body, a.N + k);
    kiln_shape_t s = kiln_shape_unknown();
    if (o->shape.rank >= 0 && o->shape.rank < KILN_MAX_RANK) {
      int32_t ax;
      KILN_TRY(kiln_tensor_axis("Scan", "scan_output_axes", a.out_axes ? a.out_axes[k] : 0, o->shape.rank + 1, &ax));
      s.rank = o->shape.rank + 1;
      for (int32_t d = 0, j = 0; d < s.rank; ++d) s.dims[d] = d == ax ? len : o->shape.dims[j++];
      s = unsymbolic(s);
    }
    KILN_TRY(lift(ctx, a.N + k, o->dtype, s, -1));
  }
  return NULL;
}

kiln_status_t kiln_tensor_scan_run(const kiln_ref_ctx_t* ctx) {
  if (!ctx->run_graph) return no_runner(ctx);
  kiln_graph_t* body;
  int32_t base;
  KILN_TRY(body_of(ctx->node, "body", &body, &base));
  kiln_allocator_t al = ctx->allocator;
  int32_t nf = formal_inputs(ctx->node);
  scan_attrs_t a;
  KILN_TRY(scan_attrs(ctx->node, ctx->opset, nf, ctx->n_out, &a));
  if (body->n_outputs != a.N + a.K || body->n_inputs - body->n_outer != nf)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Scan: body signature does not fit the node");
  int32_t ax[KILN_MAX_NODE_INPUTS];
  int64_t len = -1;
  for (int32_t k = 0; k < a.M; ++k) {
    const kiln_array_t* x = ctx->in[a.N + k];
    if (x->shape.rank < 1) return kiln_make_status(KILN_INVALID_ARGUMENT, "Scan: scan input %d is a scalar", k);
    KILN_TRY(kiln_tensor_axis("Scan", "scan_input_axes", a.in_axes ? a.in_axes[k] : 0, x->shape.rank, &ax[k]));
    if (len >= 0 && x->shape.dims[ax[k]] != len)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "Scan: scan inputs have %lld and %lld steps", (long long)len,
                              (long long)x->shape.dims[ax[k]]);
    len = x->shape.dims[ax[k]];
  }
  kiln_array_t* state = NULL; /* N states, then M slices */
  kiln_array_t* outs = NULL;
  scan_stack_t* scans = NULL;
  kiln_status_t s = kiln_allocator_malloc(al, sizeof(kiln_array_t) * (size_t)(nf + 1), "Scan", (void**)&state);
  if (!s) s = kiln_allocator_malloc(al, sizeof(kiln_array_t) * (size_t)(a.N + a.K + 1), "Scan", (void**)&outs);
  if (!s) s = kiln_allocator_malloc(al, sizeof(scan_stack_t) * (size_t)(a.K + 1), "Scan", (void**)&scans);
  if (s) goto done;
  memset(state, 0, sizeof(kiln_array_t) * (size_t)(nf + 1));
  memset(outs, 0, sizeof(kiln_array_t) * (size_t)(a.N + a.K + 1));
  memset(scans, 0, sizeof(scan_stack_t) * (size_t)(a.K + 1));
  for (int32_t k = 0; k < a.N && !s; ++k) s = kiln_array_clone(al, ctx->in[k], &state[k]);
  for (int32_t k = 0; k < a.M && !s; ++k) { /* slice buffers */
    const kiln_array_t* x = ctx->in[a.N + k];
    kiln_shape_t sl = x->shape;
    for (int32_t d = ax[k]; d + 1 < x->shape.rank; ++d) sl.dims[d] = x->shape.dims[d + 1];
    sl.rank--;
    s = kiln_array_alloc(al, x->dtype, &sl, &state[a.N + k]);
  }
  for (int64_t t = 0; !s && t < len; ++t) {
    for (int32_t k = 0; k < a.M; ++k) {
      const kiln_array_t* x = ctx->in[a.N + k];
      int64_t p = a.in_dirs && a.in_dirs[k] ? len - 1 - t : t, outer = 1, inner = 1;
      for (int32_t d = 0; d < ax[k]; ++d) outer *= x->shape.dims[d];
      for (int32_t d = ax[k] + 1; d < x->shape.rank; ++d) inner *= x->shape.dims[d];
      size_t esz = kiln_dtype_size(x->dtype);
      for (int64_t o = 0; o < outer; ++o)
        memcpy((char*)state[a.N + k].data + (size_t)(o * inner) * esz,
               (const char*)x->data + (size_t)((o * len + p) * inner) * esz, (size_t)inner * esz);
    }
    kiln_array_t* ins = NULL;
    if ((s = body_inputs(ctx, body, base, state, nf, &ins))) break;
    s = ctx->run_graph(ctx->run_graph_user, body, ins, outs);
    kiln_allocator_free(al, ins);
    if (s) break;
    for (int32_t k = 0; k < a.N; ++k) {
      kiln_array_free(al, &state[k]);
      state[k] = outs[k];
      memset(&outs[k], 0, sizeof outs[k]);
    }
    for (int32_t k = 0; k < a.K && !s; ++k) s = stack_push(al, &scans[k], &outs[a.N + k], "Scan", k);
    free_arrays(al, outs, a.N + a.K);
  }
  if (s) goto done;
  hand_over(ctx, state, 0, a.N, 0);
  for (int32_t k = 0; k < a.K && !s; ++k) {
    int32_t j = a.N + k;
    const kiln_tensor_t* o = body_out(body, a.N + k);
    kiln_array_t v = {0};
    if ((s = stack_take(al, &scans[k], &o->shape, o->dtype, a.out_axes ? (int32_t)a.out_axes[k] : 0,
                        a.out_dirs && a.out_dirs[k], &v)))
      break;
    if (j < ctx->n_out && ctx->out[j]) *ctx->out[j] = v;
    else kiln_array_free(al, &v);
  }
done:
  if (s)
    for (int32_t j = 0; j < ctx->n_out; ++j)
      if (ctx->out[j]) kiln_array_free(al, ctx->out[j]);
  free_arrays(al, state, state ? nf : 0);
  free_arrays(al, outs, outs ? a.N + a.K : 0);
  for (int32_t k = 0; scans && k < a.K; ++k) kiln_allocator_free(al, scans[k].data);
  kiln_allocator_free(al, state);
  kiln_allocator_free(al, outs);
  kiln_allocator_free(al, scans);
  return s;
}
