/* Channel dependency analysis (see prune_deps.h).
 *
 * Each activation tensor carries a layout: its channel axis and the list of
 * segments along that axis, each the channels of one "space" (a union-find
 * set; -1 for channels that cannot be pruned) times |inner| positions (1 on
 * an NCHW channel axis, H*W after a Flatten). Ops either carry the layout
 * through, join spaces (a residual Add), concatenate segments, or read the
 * channels in a way the pruned graph could not express -- which blocks the
 * spaces involved, the first reason kept. A tensor without a layout has no
 * prunable channels. */
#include "compiler/prune_deps.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/op.h"

typedef struct seg_s {
  int32_t space; /* -1: fixed channels */
  int64_t count, inner;
} seg_t;

typedef struct lay_s {
  int32_t axis;
  int32_t n; /* 0: no layout */
  seg_t* segs;
} lay_t;

typedef struct space_s {
  int32_t parent;
  int64_t channels;
  char* blocked;
} space_t;

typedef struct walk_s {
  const kiln_graph_t* g;
  lay_t* lay;          /* per tensor */
  int32_t* readers;    /* per tensor: node inputs + graph outputs reading it */
  space_t* sp;
  int32_t n_sp, cap_sp;
  int32_t* src_space;  /* per node: the space it created, -1 */
  kiln_prune_use_t* uses;
  int32_t n_uses, cap_uses;
  kiln_prune_dw_t* dw;
  int32_t n_dw, cap_dw;
  bool oom;
} walk_t;

#define GROW(arr, n, cap)                                                     \
  do {                                                                        \
    if ((n) == (cap)) {                                                       \
      int32_t nc_ = (cap) ? 2 * (cap) : 16;                                   \
      void* p_ = realloc((arr), sizeof(*(arr)) * (size_t)nc_);                \
      if (!p_) {                                                              \
        w->oom = true;                                                        \
        return -1;                                                            \
      }                                                                       \
      (arr) = p_;                                                             \
      (cap) = nc_;                                                            \
    }                                                                         \
  } while (0)

static int32_t find(walk_t* w, int32_t s) {
  while (w->sp[s].parent != s) s = w->sp[s].parent = w->sp[w->sp[s].parent].parent;
  return s;
}

static int32_t new_space(walk_t* w, int64_t channels) {
  GROW(w->sp, w->n_sp, w->cap_sp);
  w->sp[w->n_sp] = (space_t){w->n_sp, channels, NULL};
  return w->n_sp++;
}

static void block(walk_t* w, int32_t s, const char* fmt, ...) {
  if (s < 0) return;
  s = find(w, s);
  if (w->sp[s].blocked) return;
  va_list ap;
  va_start(ap, fmt);
  char buf[512];
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  w->sp[s].blocked = strdup(buf);
  if (!w->sp[s].blocked) w->oom = true;
}

static void unite(walk_t* w, int32_t a, int32_t b) {
  if (a < 0 || b < 0) return;
  a = find(w, a), b = find(w, b);
  if (a == b) return;
  w->sp[b].parent = a;
  if (!w->sp[a].blocked) w->sp[a].blocked = w->sp[b].blocked;
  else free(w->sp[b].blocked);
  w->sp[b].blocked = NULL;
}

static void block_lay(walk_t* w, const lay_t* l, const kiln_node_t* n, const char* why) {
  for (int32_t i = 0; i < l->n; ++i)
    block(w, l->segs[i].space, "%s node '%s' %s", n->op_type, n->name, why);
}

static int32_t add_use(walk_t* w, kiln_prune_use_kind_t kind, int32_t space, int32_t tensor, int32_t node,
                       int32_t axis, int64_t offset, int64_t inner) {
  GROW(w->uses, w->n_uses, w->cap_uses);
  w->uses[w->n_uses++] = (kiln_prune_use_t){kind, space, tensor, node, axis, offset, inner};
  return 0;
}

static bool set_lay(walk_t* w, int32_t t, int32_t axis, int32_t n, const seg_t* segs) {
  if (t < 0 || n <= 0) return true;
  seg_t* s = malloc(sizeof(seg_t) * (size_t)n);
  if (!s) return !(w->oom = true);
  memcpy(s, segs, sizeof(seg_t) * (size_t)n);
  free(w->lay[t].segs);
  w->lay[t] = (lay_t){axis, n, s};
  return true;
}

static const kiln_tensor_t* T(walk_t* w, int32_t t) { return &w->g->tensors[t]; }

/* A weight or per-channel constant the plan may rewrite: an initializer
 * read by this node only. */
static bool own_init(walk_t* w, int32_t t) {
  return t >= 0 && (T(w, t)->flags & KILN_TENSOR_INITIALIZER) && !(T(w, t)->flags & KILN_TENSOR_INPUT) &&
         w->readers[t] == 1;
}

/* Uses of layout |l|'s channels on |tensor|'s axis |axis|; false (and
 * |l| blocked) when the axis length disagrees with the layout's or an
 * inner block is not allowed there. */
static bool uses_from(walk_t* w, const lay_t* l, kiln_prune_use_kind_t kind, int32_t tensor, int32_t node,
                      int32_t axis, bool inner_ok) {
  const kiln_node_t* n = &w->g->nodes[node];
  int64_t pos = 0;
  for (int32_t i = 0; i < l->n; ++i) {
    if (!inner_ok && l->segs[i].inner != 1) {
      block_lay(w, l, n, "reads flattened channels where it cannot");
      return false;
    }
    pos += l->segs[i].count * l->segs[i].inner;
  }
  const kiln_shape_t* s = &T(w, tensor)->shape;
  if (axis < 0 || axis >= s->rank || s->dims[axis] != pos) {
    block_lay(w, l, n, "has a per-channel constant whose size does not match the channels");
    return false;
  }
  pos = 0;
  for (int32_t i = 0; i < l->n; ++i) {
    if (l->segs[i].space >= 0)
      add_use(w, kind, l->segs[i].space, tensor, node, axis, pos, l->segs[i].inner);
    pos += l->segs[i].count * l->segs[i].inner;
  }
  return true;
}

/* A Conv/Gemm/MatMul's output channels: a new space, the weight's (and
 * bias') output axis its uses; blocked when the weight cannot be rewritten. */
static int32_t source(walk_t* w, int32_t node, int32_t out_t, int32_t out_axis, int32_t wt, int32_t w_axis,
                      int32_t bias, int32_t b_axis) {
  const kiln_node_t* n = &w->g->nodes[node];
  int64_t C = T(w, out_t)->shape.dims[out_axis];
  int32_t s = new_space(w, C);
  if (s < 0) return -1;
  w->src_space[node] = s;
  seg_t seg = {s, C, 1};
  set_lay(w, out_t, out_axis, 1, &seg);
  if (!own_init(w, wt)) {
    block(w, s, "%s node '%s': its weight '%s' is not an initializer read by it alone", n->op_type, n->name,
          T(w, wt)->name);
    return s;
  }
  add_use(w, KILN_PRUNE_USE_OUT_WEIGHT, s, wt, node, w_axis, 0, 1);
  if (bias >= 0) {
    const kiln_shape_t* bs = &T(w, bias)->shape;
    bool per_channel = bs->rank > 0 && bs->dims[b_axis] == C && C != 1;
    if (per_channel && own_init(w, bias)) add_use(w, KILN_PRUNE_USE_OUT_BIAS, s, bias, node, b_axis, 0, 1);
    else if (per_channel)
      block(w, s, "%s node '%s': its bias '%s' is not an initializer read by it alone", n->op_type, n->name,
            T(w, bias)->name);
  }
  return s;
}

static void on_conv(walk_t* w, int32_t node) {
  const kiln_node_t* n = &w->g->nodes[node];
  int32_t x = n->inputs[0], wt = n->inputs[1], b = n->n_inputs > 2 ? n->inputs[2] : -1;
  const lay_t* lx = &w->lay[x];
  int64_t group = 1;
  kiln_status_t st = kiln_attr_int(n, "group", 1, &group);
  kiln_status_free(st);
  const kiln_shape_t* xs = &T(w, x)->shape;
  const kiln_shape_t* ws = &T(w, wt)->shape;
  int32_t y = n->outputs[0];
  if (group == 1) {
    if (lx->n && !(own_init(w, wt) && lx->axis == 1 && uses_from(w, lx, KILN_PRUNE_USE_IN_WEIGHT, wt, node, 1, false)))
      block_lay(w, lx, n, "reads the channels through a weight kiln cannot rewrite");
    source(w, node, y, 1, wt, 0, b, 0);
    return;
  }
  bool depthwise = xs->rank >= 3 && group == xs->dims[1] && ws->dims[0] == group && ws->dims[1] == 1;
  if (!depthwise) {
    block_lay(w, lx, n, "is a grouped convolution");
    int32_t s = source(w, node, y, 1, wt, 0, b, 0);
    block(w, s, "Conv node '%s' is a grouped convolution (group %lld)", n->name, (long long)group);
    return;
  }
  if (!lx->n) return;
  bool ok = lx->axis == 1 && own_init(w, wt) && (b < 0 || own_init(w, b));
  if (ok) ok = uses_from(w, lx, KILN_PRUNE_USE_PARAM, wt, node, 0, false);
  if (ok && b >= 0) ok = uses_from(w, lx, KILN_PRUNE_USE_PARAM, b, node, 0, false);
  if (!ok) {
    block_lay(w, lx, n, "is a depthwise convolution whose weights kiln cannot rewrite");
    return;
  }
  if (w->n_dw == w->cap_dw) {
    int32_t nc = w->cap_dw ? 2 * w->cap_dw : 8;
    void* p = realloc(w->dw, sizeof(*w->dw) * (size_t)nc);
    if (!p) {
      w->oom = true;
      return;
    }
    w->dw = p, w->cap_dw = nc;
  }
  kiln_prune_dw_t* d = &w->dw[w->n_dw];
  d->node = node;
  d->n_segs = lx->n;
  d->seg_group = malloc(sizeof(int32_t) * (size_t)lx->n);
  d->seg_count = malloc(sizeof(int64_t) * (size_t)lx->n);
  if (!d->seg_group || !d->seg_count) {
    free(d->seg_group), free(d->seg_count);
    w->oom = true;
    return;
  }
  for (int32_t i = 0; i < lx->n; ++i) d->seg_group[i] = lx->segs[i].space, d->seg_count[i] = lx->segs[i].count;
  ++w->n_dw;
  set_lay(w, y, 1, lx->n, lx->segs);
}

/* Gemm (transA 0) and MatMul with a 2-D weight: the input's channels on
 * the weight's input axis (flattened blocks allowed), a new space out. */
static void on_dense(walk_t* w, int32_t node, bool gemm) {
  const kiln_node_t* n = &w->g->nodes[node];
  int32_t a = n->inputs[0], wt = n->inputs[1], y = n->outputs[0];
  const lay_t* la = &w->lay[a];
  int64_t ta = 0, tb = 0;
  if (gemm) {
    kiln_status_free(kiln_attr_int(n, "transA", 0, &ta));
    kiln_status_free(kiln_attr_int(n, "transB", 0, &tb));
  }
  const kiln_shape_t* ws = &T(w, wt)->shape;
  int32_t ra = T(w, a)->shape.rank, ry = T(w, y)->shape.rank;
  if (ta || ws->rank != 2 || !(T(w, wt)->flags & KILN_TENSOR_CONST)) {
    block_lay(w, la, n, "reads the channels in a way kiln does not prune through");
    return;
  }
  int32_t in_axis = tb ? 1 : 0, out_axis = tb ? 0 : 1;
  if (la->n && !(own_init(w, wt) && la->axis == ra - 1 &&
                 uses_from(w, la, KILN_PRUNE_USE_IN_WEIGHT, wt, node, in_axis, true)))
    block_lay(w, la, n, "reads the channels through a weight kiln cannot rewrite");
  int32_t bias = -1, b_axis = 0;
  if (gemm && n->n_inputs > 2 && n->inputs[2] >= 0) {
    bias = n->inputs[2];
    b_axis = T(w, bias)->shape.rank - 1;
  }
  source(w, node, y, ry - 1, wt, out_axis, bias, b_axis);
}

static void on_bn(walk_t* w, int32_t node) {
  const kiln_node_t* n = &w->g->nodes[node];
  const lay_t* lx = &w->lay[n->inputs[0]];
  if (!lx->n) return;
  bool ok = lx->axis == 1 && n->n_inputs >= 5;
  for (int32_t i = 1; ok && i < 5; ++i) ok = own_init(w, n->inputs[i]);
  for (int32_t i = 1; ok && i < 5; ++i)
    ok = uses_from(w, lx, i == 1 ? KILN_PRUNE_USE_BN_SCALE : KILN_PRUNE_USE_PARAM, n->inputs[i], node, 0, false);
  if (!ok) {
    block_lay(w, lx, n, "has statistics kiln cannot rewrite");
    return;
  }
  set_lay(w, n->outputs[0], 1, lx->n, lx->segs);
}

static bool same_segs(const lay_t* a, const lay_t* b) {
  if (a->n != b->n) return false;
  for (int32_t i = 0; i < a->n; ++i)
    if (a->segs[i].count != b->segs[i].count || a->segs[i].inner != b->segs[i].inner) return false;
  return true;
}

/* Element-wise ops of any arity: layouts aligned on the output's axes join;
 * a constant with the channel dim is sliced; anything else that has the
 * channel dim blocks. */
static void on_elementwise(walk_t* w, int32_t node) {
  const kiln_node_t* n = &w->g->nodes[node];
  int32_t y = n->outputs[0];
  int32_t ry = T(w, y)->shape.rank;
  const lay_t* first = NULL;
  int32_t axis = -1;
  bool ok = true;
  for (int32_t i = 0; i < n->n_inputs; ++i) {
    int32_t t = n->inputs[i];
    if (t < 0 || !w->lay[t].n) continue;
    int32_t ax = w->lay[t].axis + (ry - T(w, t)->shape.rank);
    if (!first) first = &w->lay[t], axis = ax;
    else if (ax != axis || !same_segs(first, &w->lay[t])) ok = false;
  }
  if (!first) return;
  int64_t C = T(w, y)->shape.dims[axis];
  for (int32_t i = 0; ok && i < n->n_inputs; ++i) {
    int32_t t = n->inputs[i];
    if (t < 0 || w->lay[t].n) continue;
    const kiln_shape_t* s = &T(w, t)->shape;
    int32_t ax = axis - (ry - s->rank);
    if (ax < 0 || s->dims[ax] == 1) continue;
    if (s->dims[ax] != C || !own_init(w, t) || !uses_from(w, first, KILN_PRUNE_USE_PARAM, t, node, ax, true))
      ok = false;
  }
  if (!ok) {
    for (int32_t i = 0; i < n->n_inputs; ++i)
      if (n->inputs[i] >= 0) block_lay(w, &w->lay[n->inputs[i]], n, "combines channels that cannot be matched");
    return;
  }
  for (int32_t i = 0; i < n->n_inputs; ++i) {
    int32_t t = n->inputs[i];
    if (t < 0 || !w->lay[t].n || &w->lay[t] == first) continue;
    for (int32_t k = 0; k < first->n; ++k) {
      int32_t a = first->segs[k].space, b = w->lay[t].segs[k].space;
      if (a >= 0 && b >= 0) unite(w, a, b);
      else if (a >= 0 || b >= 0)
        block(w, a >= 0 ? a : b, "%s node '%s' adds these channels to channels that cannot be pruned (%s)",
              n->op_type, n->name, a >= 0 ? T(w, t)->name : T(w, n->inputs[0])->name);
    }
  }
  set_lay(w, y, axis, first->n, first->segs);
}

static void on_concat(walk_t* w, int32_t node) {
  const kiln_node_t* n = &w->g->nodes[node];
  int32_t y = n->outputs[0];
  int64_t axis = 0;
  kiln_status_free(kiln_attr_int(n, "axis", 0, &axis));
  int32_t ry = T(w, y)->shape.rank;
  if (axis < 0) axis += ry;
  bool any = false, ok = true;
  int32_t total = 0;
  for (int32_t i = 0; i < n->n_inputs; ++i) {
    const lay_t* l = &w->lay[n->inputs[i]];
    if (l->n) any = true, ok = ok && l->axis == axis, total += l->n;
    else total += 1;
  }
  if (!any) return;
  if (!ok) {
    for (int32_t i = 0; i < n->n_inputs; ++i)
      block_lay(w, &w->lay[n->inputs[i]], n, "concatenates along another axis than the channels");
    return;
  }
  seg_t* segs = malloc(sizeof(seg_t) * (size_t)total);
  if (!segs) {
    w->oom = true;
    return;
  }
  int32_t k = 0;
  for (int32_t i = 0; i < n->n_inputs; ++i) {
    const lay_t* l = &w->lay[n->inputs[i]];
    if (l->n) memcpy(&segs[k], l->segs, sizeof(seg_t) * (size_t)l->n), k += l->n;
    else segs[k++] = (seg_t){-1, T(w, n->inputs[i])->shape.dims[axis], 1};
  }
  set_lay(w, y, (int32_t)axis, total, segs);
  free(segs);
}

/* Flatten (axis 1), or a Reshape to [N, -1] whose target is a constant:
 * each channel becomes |inner| consecutive features. */
static void on_flatten(walk_t* w, int32_t node, bool reshape) {
  const kiln_node_t* n = &w->g->nodes[node];
  int32_t x = n->inputs[0], y = n->outputs[0];
  const lay_t* lx = &w->lay[x];
  if (!lx->n) return;
  const kiln_shape_t* xs = &T(w, x)->shape;
  const kiln_shape_t* ys = &T(w, y)->shape;
  bool ok = lx->axis == 1 && ys->rank == 2 && xs->dims[0] == ys->dims[0];
  if (ok && reshape) {
    const kiln_tensor_t* st = T(w, n->inputs[1]);
    ok = (st->flags & KILN_TENSOR_CONST) && kiln_shape_count(&st->value.shape) == 2 &&
         kiln_load_i64(st->value.dtype, st->value.data, 1) == -1;
  } else if (ok) {
    int64_t a = 1;
    kiln_status_free(kiln_attr_int(n, "axis", 1, &a));
    ok = a == 1;
  }
  if (!ok) {
    block_lay(w, lx, n, reshape ? "mixes channels (a Reshape kiln cannot follow the channels through)"
                                : "flattens across the channel axis");
    return;
  }
  int64_t m = 1;
  for (int32_t i = 2; i < xs->rank; ++i) m *= xs->dims[i];
  seg_t* segs = malloc(sizeof(seg_t) * (size_t)lx->n);
  if (!segs) {
    w->oom = true;
    return;
  }
  for (int32_t i = 0; i < lx->n; ++i) segs[i] = lx->segs[i], segs[i].inner *= m;
  set_lay(w, y, 1, lx->n, segs);
  free(segs);
}

/* Ops that keep every axis' meaning: the layout of input 0 carries through
 * when the channel dim is unchanged. */
static void on_passthrough(walk_t* w, int32_t node) {
  const kiln_node_t* n = &w->g->nodes[node];
  const lay_t* lx = &w->lay[n->inputs[0]];
  if (!lx->n) return;
  int32_t y = n->outputs[0];
  const kiln_shape_t* ys = &T(w, y)->shape;
  const kiln_shape_t* xs = &T(w, n->inputs[0])->shape;
  for (int32_t i = 1; i < n->n_inputs; ++i)
    if (n->inputs[i] >= 0) block_lay(w, &w->lay[n->inputs[i]], n, "reads the channels as a parameter");
  if (ys->rank != xs->rank || ys->dims[lx->axis] != xs->dims[lx->axis]) {
    block_lay(w, lx, n, "changes the channel dim");
    return;
  }
  set_lay(w, y, lx->axis, lx->n, lx->segs);
}

/* Softmax-like ops: fine unless they work along the channel axis. */
static void on_axis_op(walk_t* w, int32_t node) {
  const kiln_node_t* n = &w->g->nodes[node];
  const lay_t* lx = &w->lay[n->inputs[0]];
  if (!lx->n) return;
  int64_t axis = -1;
  kiln_status_free(kiln_attr_int(n, "axis", w->g->opset >= 13 ? -1 : 1, &axis));
  int32_t r = T(w, n->inputs[0])->shape.rank;
  if (axis < 0) axis += r;
  if (axis == lx->axis || (w->g->opset < 13 && axis <= lx->axis)) {
    block_lay(w, lx, n, "normalises across the channels");
    return;
  }
  on_passthrough(w, node);
}

/* Shape of a pruned tensor: harmless when every reader Gathers dims other
 * than the channel axis. */
static void on_shape(walk_t* w, int32_t node) {
  const kiln_node_t* n = &w->g->nodes[node];
  const lay_t* lx = &w->lay[n->inputs[0]];
  if (!lx->n) return;
  int32_t out = n->outputs[0];
  bool ok = w->readers[out] > 0;
  for (int32_t i = 0; ok && i < w->g->n_nodes; ++i) {
    const kiln_node_t* r = &w->g->nodes[i];
    for (int32_t j = 0; ok && j < r->n_inputs; ++j) {
      if (r->inputs[j] != out) continue;
      ok = !strcmp(r->op_type, "Gather") && j == 0 && r->n_inputs == 2 &&
           (T(w, r->inputs[1])->flags & KILN_TENSOR_CONST);
      if (!ok) break;
      const kiln_array_t* v = &T(w, r->inputs[1])->value;
      int64_t k = kiln_shape_count(&v->shape);
      for (int64_t e = 0; ok && e < k; ++e) ok = kiln_load_i64(v->dtype, v->data, (size_t)e) != lx->axis;
    }
  }
  for (int32_t i = 0; ok && i < w->g->n_outputs; ++i) ok = w->g->outputs[i] != out;
  if (!ok) block_lay(w, lx, n, "reads the channel count");
}

static bool in_list(const char* op, const char* const* list) {
  for (; *list; ++list)
    if (!strcmp(op, *list)) return true;
  return false;
}

static const char* const k_elementwise[] = {
    "Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean", "PRelu", "Pow", "Relu", "LeakyRelu", "Sigmoid",
    "Tanh", "Clip", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Neg", "Abs",
    "Exp", "Log", "Sqrt", "Erf", "Gelu", "Mish", "Identity", "Floor", "Ceil", "Round", "Sign", "Reciprocal",
    "ThresholdedRelu", "Sin", "Cos", "Swish", "SiLU", NULL};
static const char* const k_passthrough[] = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
                                            "Dropout", "LpPool", "Resize", "Upsample", NULL};

static void visit(walk_t* w, int32_t i) {
  const kiln_node_t* n = &w->g->nodes[i];
  const char* op = n->op_type;
  bool std = !n->domain[0] || !strcmp(n->domain, "ai.onnx");
  if (std && !strcmp(op, "Conv") && n->n_inputs >= 2 && T(w, n->inputs[1])->shape.rank >= 3)
    on_conv(w, i);
  else if (std && !strcmp(op, "Gemm")) on_dense(w, i, true);
  else if (std && !strcmp(op, "MatMul") && T(w, n->inputs[1])->shape.rank == 2 &&
           (T(w, n->inputs[1])->flags & KILN_TENSOR_INITIALIZER))
    on_dense(w, i, false);
  else if (std && !strcmp(op, "BatchNormalization")) on_bn(w, i);
  else if (std && in_list(op, k_elementwise)) on_elementwise(w, i);
  else if (std && in_list(op, k_passthrough)) on_passthrough(w, i);
  else if (std && (!strcmp(op, "Softmax") || !strcmp(op, "LogSoftmax"))) on_axis_op(w, i);
  else if (std && !strcmp(op, "Concat")) on_concat(w, i);
  else if (std && !strcmp(op, "Flatten")) on_flatten(w, i, false);
  else if (std && !strcmp(op, "Reshape")) on_flatten(w, i, true);
  else if (std && !strcmp(op, "Shape")) on_shape(w, i);
  else
    for (int32_t j = 0; j < n->n_inputs; ++j)
      if (n->inputs[j] >= 0) block_lay(w, &w->lay[n->inputs[j]], n, "reads the channels (an op kiln does not prune through)");
}

static kiln_status_t check_shapes(const kiln_graph_t* g) {
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    const kiln_node_t* n = &g->nodes[i];
    for (int32_t j = 0; j < n->n_inputs + n->n_outputs; ++j) {
      int32_t t = j < n->n_inputs ? n->inputs[j] : n->outputs[j - n->n_inputs];
      if (t >= 0 && !kiln_shape_is_static(&g->tensors[t].shape))
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "%s: tensor '%s' of node '%s' has no static shape; pruning needs every "
                                "shape known (bind the symbolic dims)",
                                g->source ? g->source : "", g->tensors[t].name, n->name);
    }
  }
  return NULL;
}

static kiln_status_t apply_keep(walk_t* w, const char* const* keep, int32_t n_keep) {
  for (int32_t k = 0; k < n_keep; ++k) {
    int32_t node = -1;
    for (int32_t i = 0; i < w->g->n_nodes && node < 0; ++i)
      if (!strcmp(w->g->nodes[i].name, keep[k])) node = i;
    if (node < 0) return kiln_make_status(KILN_NOT_FOUND, "--keep: the model has no node named '%s'", keep[k]);
    if (w->src_space[node] < 0)
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "--keep: node '%s' (%s) is not a prunable layer (a Conv, Gemm or MatMul with "
                              "constant weights)",
                              keep[k], w->g->nodes[node].op_type);
    block(w, w->src_space[node], "kept (--keep %s)", keep[k]);
  }
  return NULL;
}

/* Turns the union-find roots into groups and the uses' spaces into group
 * indices. */
static kiln_status_t finish(walk_t* w, kiln_prune_deps_t* out) {
  int32_t* gid = malloc(sizeof(int32_t) * (size_t)(w->n_sp + 1));
  if (!gid) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory (prune analysis)");
  int32_t ng = 0;
  for (int32_t s = 0; s < w->n_sp; ++s) gid[s] = find(w, s) == s ? ng++ : -1;
  out->groups = calloc((size_t)ng + 1, sizeof(kiln_prune_group_t));
  if (!out->groups) {
    free(gid);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory (prune analysis)");
  }
  out->n_groups = ng;
  for (int32_t s = 0; s < w->n_sp; ++s)
    if (gid[s] >= 0) {
      out->groups[gid[s]].channels = w->sp[s].channels;
      out->groups[gid[s]].blocked = w->sp[s].blocked;
      w->sp[s].blocked = NULL;
    }
  for (int32_t i = 0; i < w->g->n_nodes; ++i)
    if (w->src_space[i] >= 0) ++out->groups[gid[find(w, w->src_space[i])]].n_sources;
  for (int32_t k = 0; k < ng; ++k) {
    out->groups[k].sources = malloc(sizeof(int32_t) * (size_t)(out->groups[k].n_sources + 1));
    if (!out->groups[k].sources) {
      free(gid);
      return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory (prune analysis)");
    }
    out->groups[k].n_sources = 0;
  }
  for (int32_t i = 0; i < w->g->n_nodes; ++i)
    if (w->src_space[i] >= 0) {
      kiln_prune_group_t* gr = &out->groups[gid[find(w, w->src_space[i])]];
      gr->sources[gr->n_sources++] = i;
    }
  for (int32_t u = 0; u < w->n_uses; ++u) w->uses[u].group = gid[find(w, w->uses[u].group)];
  for (int32_t d = 0; d < w->n_dw; ++d)
    for (int32_t k = 0; k < w->dw[d].n_segs; ++k)
      if (w->dw[d].seg_group[k] >= 0) w->dw[d].seg_group[k] = gid[find(w, w->dw[d].seg_group[k])];
  free(gid);
  out->uses = w->uses, out->n_uses = w->n_uses, w->uses = NULL;
  out->dw = w->dw, out->n_dw = w->n_dw, w->dw = NULL, w->n_dw = 0;
  return NULL;
}

kiln_status_t kiln_prune_deps_analyze(const kiln_graph_t* g, const char* const* keep, int32_t n_keep,
                                      kiln_prune_deps_t* out) {
  memset(out, 0, sizeof *out);
  KILN_RETURN_IF_ERROR(check_shapes(g));
  walk_t w;
  memset(&w, 0, sizeof w);
  w.g = g;
  w.lay = calloc((size_t)g->n_tensors + 1, sizeof(lay_t));
  w.readers = calloc((size_t)g->n_tensors + 1, sizeof(int32_t));
  w.src_space = malloc(sizeof(int32_t) * (size_t)(g->n_nodes + 1));
  kiln_status_t s = NULL;
  if (!w.lay || !w.readers || !w.src_space) s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory (prune analysis)");
  for (int32_t i = 0; !s && i < g->n_nodes; ++i) {
    w.src_space[i] = -1;
    for (int32_t j = 0; j < g->nodes[i].n_inputs; ++j)
      if (g->nodes[i].inputs[j] >= 0) ++w.readers[g->nodes[i].inputs[j]];
  }
  for (int32_t i = 0; !s && i < g->n_outputs; ++i) ++w.readers[g->outputs[i]];
  for (int32_t i = 0; !s && i < g->n_nodes && !w.oom; ++i) visit(&w, i);
  for (int32_t i = 0; !s && i < g->n_outputs; ++i) {
    const lay_t* l = &w.lay[g->outputs[i]];
    for (int32_t k = 0; k < l->n; ++k)
      block(&w, l->segs[k].space, "its channels are graph output '%s'", g->tensors[g->outputs[i]].name);
  }
  if (!s && w.oom) s = kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory (prune analysis)");
  if (!s) s = apply_keep(&w, keep, n_keep);
  if (!s) s = finish(&w, out);
  for (int32_t t = 0; w.lay && t < g->n_tensors; ++t) free(w.lay[t].segs);
  for (int32_t k = 0; k < w.n_sp; ++k) free(w.sp[k].blocked);
  for (int32_t d = 0; d < w.n_dw; ++d) free(w.dw[d].seg_group), free(w.dw[d].seg_count);
  free(w.lay), free(w.readers), free(w.src_space), free(w.sp), free(w.uses), free(w.dw);
  if (s) kiln_prune_deps_free(out);
  return s;
}

void kiln_prune_deps_free(kiln_prune_deps_t* d) {
  if (!d) return;
  for (int32_t k = 0; k < d->n_groups; ++k) free(d->groups[k].sources), free((char*)d->groups[k].blocked);
  for (int32_t k = 0; k < d->n_dw; ++k) free(d->dw[k].seg_group), free(d->dw[k].seg_count);
  free(d->groups), free(d->uses), free(d->dw);
  memset(d, 0, sizeof *d);
}
