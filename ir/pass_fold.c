/* "fold-constants" (constant nodes become initializers) and
 * "fold-batchnorm" (BatchNormalization folded into Conv/Gemm/MatMul). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/pass_util.h"

/* ---- fold-constants -------------------------------------------------- */

/* Largest output (elements) computed at compile time: weights transposed
 * or reshaped by the exporter fit; nothing model-sized is materialised. */
#define FOLD_CAP_ELEMENTS (16 << 20)

/* Computes node |ni|'s outputs into their tensors (like infer's folding, but
 * with the larger cap). False when the node cannot be folded. */
static kiln_status_t compute(kiln_graph_t* g, int32_t ni, bool* ok) {
  kiln_node_t* n = &g->nodes[ni];
  *ok = false;
  if (!n->schema || !n->schema->run || n->n_outputs > KILN_MAX_NODE_OUTPUTS ||
      n->n_inputs > KILN_MAX_NODE_INPUTS || kiln_op_sizes_outputs(n)) /* If/Loop need an executor */
    return NULL;
  for (int32_t j = 0; j < n->n_outputs; ++j) {
    int32_t t = n->outputs[j];
    if (t < 0) continue;
    const kiln_tensor_t* tt = &g->tensors[t];
    if (!kiln_shape_is_static(&tt->shape) || !kiln_dtype_size(tt->dtype)) return NULL;
    int64_t numel = 0;
    kiln_status_t ns = kiln_shape_numel(&tt->shape, &numel);
    if (ns) {
      kiln_status_free(ns);
      return NULL;
    }
    if (numel > FOLD_CAP_ELEMENTS && !pu_is_const(g, t)) return NULL;
  }
  kiln_array_t outs[KILN_MAX_NODE_OUTPUTS];
  kiln_array_t* outp[KILN_MAX_NODE_OUTPUTS];
  const kiln_array_t* inp[KILN_MAX_NODE_INPUTS];
  memset(outs, 0, sizeof(kiln_array_t) * (size_t)n->n_outputs);
  kiln_status_t s = NULL;
  bool need = false;
  for (int32_t j = 0; j < n->n_outputs && !s; ++j) {
    int32_t t = n->outputs[j];
    outp[j] = NULL;
    if (t < 0) continue;
    if (!pu_is_const(g, t)) need = true;
    s = kiln_array_alloc(g->allocator, g->tensors[t].dtype, &g->tensors[t].shape, &outs[j]);
    outp[j] = &outs[j];
  }
  for (int32_t j = 0; j < n->n_inputs; ++j)
    inp[j] = n->inputs[j] >= 0 ? &g->tensors[n->inputs[j]].value : NULL;
  if (!s && need) {
    kiln_ref_ctx_t rc = {n, g->opset, n->n_inputs, inp, n->n_outputs, outp, g->allocator, NULL, NULL};
    s = n->schema->run(&rc);
  }
  for (int32_t j = 0; j < n->n_outputs && !s; ++j) {
    int32_t t = n->outputs[j];
    if (t < 0 || pu_is_const(g, t)) continue;
    kiln_tensor_t* tt = &g->tensors[t];
    tt->value = outs[j];
    tt->flags |= KILN_TENSOR_CONST | PU_OWNED_VALUE;
    outs[j].data = NULL;
  }
  for (int32_t j = 0; j < n->n_outputs; ++j) kiln_array_free(g->allocator, &outs[j]);
  if (!s) *ok = true;
  return s;
}

kiln_status_t kiln_pass_fold_constants(kiln_graph_t* g, kiln_pass_stats_t* st) {
  pu_ctx_t c;
  KILN_RETURN_IF_ERROR(pu_begin(&c, g));
  kiln_status_t s = NULL;
  for (int32_t i = 0; i < g->n_nodes && !s; ++i) {
    kiln_node_t* n = &g->nodes[i];
    bool all = n->n_outputs > 0;
    for (int32_t j = 0; j < n->n_inputs && all; ++j)
      if (n->inputs[j] >= 0 && !pu_is_const(g, n->inputs[j])) all = false;
    /* Outputs inference already knows (Shape/Size of a static tensor) fold
     * whatever the inputs are; the executor skips such nodes too. */
    bool known = n->n_outputs > 0;
    for (int32_t j = 0; j < n->n_outputs && known; ++j)
      if (n->outputs[j] >= 0 && !pu_is_const(g, n->outputs[j])) known = false;
    all |= known;
    /* A graph output stays produced by a node: targets expect outputs to be
     * computed, and an output that is a weight is an odd model anyway. */
    for (int32_t j = 0; j < n->n_outputs && all; ++j)
      if (n->outputs[j] >= 0 && pu_is_output(g, n->outputs[j])) all = false;
    if (!all) continue;
    bool ok = false;
    s = compute(g, i, &ok);
    if (s) {
      /* The node would fail at run time too; leave it there, where the
       * error names the inputs it was given. */
      kiln_status_free(s);
      s = NULL;
      continue;
    }
    if (!ok) continue;
    for (int32_t j = 0; j < n->n_outputs; ++j) {
      int32_t t = n->outputs[j];
      if (t < 0) continue;
      g->tensors[t].producer = -1;
      g->tensors[t].flags |= KILN_TENSOR_INITIALIZER;
    }
    c.dead[i] = true;
    ++st->rewrites;
  }
  return pu_end(&c, s);
}

/* ---- fold-batchnorm -------------------------------------------------- */

typedef struct bn_s {
  int64_t c; /* channels */
  float *mul, *add; /* y = x * mul + add per channel */
} bn_t;

/* Per-channel affine form of BatchNormalization node |bi| when its
 * parameters are constants. */
static kiln_status_t bn_affine(pu_ctx_t* c, int32_t bi, bn_t* b, bool* ok) {
  kiln_graph_t* g = c->g;
  const kiln_node_t* n = &g->nodes[bi];
  *ok = false;
  memset(b, 0, sizeof(*b));
  if (n->n_inputs != 5) return NULL;
  for (int32_t j = 1; j < n->n_outputs; ++j)
    if (n->outputs[j] >= 0) return NULL;
  const kiln_attr_t* tm = kiln_node_attr(n, "training_mode");
  if (tm && tm->i) return NULL;
  float eps = 1e-5f;
  const kiln_attr_t* ea = kiln_node_attr(n, "epsilon");
  if (ea && ea->type == KILN_ATTR_FLOAT) eps = ea->f;
  int64_t ch = -1;
  for (int32_t j = 1; j < 5; ++j) {
    if (!pu_is_const(g, n->inputs[j])) return NULL;
    const kiln_array_t* v = &g->tensors[n->inputs[j]].value;
    if (v->shape.rank != 1 || !kiln_dtype_is_float(v->dtype)) return NULL;
    if (ch >= 0 && v->shape.dims[0] != ch) return NULL;
    ch = v->shape.dims[0];
  }
  float *p[4] = {0};
  kiln_status_t s = NULL;
  for (int32_t j = 0; j < 4 && !s; ++j) s = pu_read_f32(c, n->inputs[j + 1], &p[j]);
  if (!s) {
    /* scale, B, mean, var -> mul = scale/sqrt(var+eps), add = B - mean*mul */
    for (int64_t k = 0; k < ch; ++k) {
      float m = p[0][k] / sqrtf(p[3][k] + eps);
      p[0][k] = m;
      p[1][k] = p[1][k] - p[2][k] * m;
    }
    b->c = ch;
    b->mul = p[0];
    b->add = p[1];
    p[0] = p[1] = NULL;
    *ok = true;
  }
  for (int32_t j = 0; j < 4; ++j) kiln_allocator_free(g->allocator, p[j]);
  return s;
}

/* Scales weight |w| along output channels: |axis| is 0 for [C,...] (Conv,
 * Gemm transB) and 1 for [K,C] (Gemm, MatMul). New initializer in *out. */
static kiln_status_t scale_weight(pu_ctx_t* c, int32_t w, int axis, const bn_t* b,
                                  int32_t* out) {
  kiln_graph_t* g = c->g;
  const kiln_array_t* v = &g->tensors[w].value;
  float* f = NULL;
  KILN_RETURN_IF_ERROR(pu_read_f32(c, w, &f));
  int64_t n = kiln_array_numel(v);
  kiln_shape_t shape = v->shape;
  if (axis == 0) {
    int64_t inner = n / b->c;
    for (int64_t k = 0; k < b->c; ++k)
      for (int64_t i = 0; i < inner; ++i) f[k * inner + i] *= b->mul[k];
  } else {
    for (int64_t i = 0; i < n; ++i) f[i] *= b->mul[i % b->c];
  }
  kiln_status_t s = pu_add_f32(c, g->tensors[w].name, &shape, f, out);
  kiln_allocator_free(g->allocator, f);
  return s;
}

/* New bias = bias*mul + add (|bias| may be -1: zero); |scale| multiplies the
 * old bias first (Gemm's beta). */
static kiln_status_t new_bias(pu_ctx_t* c, int32_t bias, float scale, const bn_t* b,
                              const char* base, int32_t* out) {
  kiln_graph_t* g = c->g;
  float* f = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(g->allocator, sizeof(float) * (size_t)b->c, "pass",
                                             (void**)&f));
  float* old = NULL;
  kiln_status_t s = bias >= 0 ? pu_read_f32(c, bias, &old) : NULL;
  if (!s) {
    int64_t nb = bias >= 0 ? kiln_array_numel(&g->tensors[bias].value) : 0;
    for (int64_t k = 0; k < b->c; ++k) {
      float o = nb == 0 ? 0.f : old[nb == 1 ? 0 : k] * scale;
      f[k] = o * b->mul[k] + b->add[k];
    }
    kiln_shape_t shape = kiln_shape_make(1, (int64_t[]){b->c});
    s = pu_add_f32(c, base, &shape, f, out);
  }
  kiln_allocator_free(g->allocator, old);
  kiln_allocator_free(g->allocator, f);
  return s;
}

/* A bias of shape [C], [1,C] or one element broadcasts the same value to
 * every row. */
static bool row_bias(const kiln_graph_t* g, int32_t t, int64_t ch) {
  if (!pu_is_const(g, t) || !kiln_dtype_is_float(g->tensors[t].value.dtype)) return false;
  const kiln_shape_t* s = &g->tensors[t].value.shape;
  int64_t n = kiln_shape_count(s);
  if (n == 1) return true;
  if (n != ch || s->rank < 1 || s->dims[s->rank - 1] != ch) return false;
  return true;
}

static bool f32_weight(const kiln_graph_t* g, int32_t t) {
  return pu_is_const(g, t) && g->tensors[t].value.dtype == KILN_DTYPE_F32;
}

/* Replaces the input array of node |ni| with a copy that has room for |n|. */
static kiln_status_t widen_inputs(kiln_graph_t* g, int32_t ni, int32_t n) {
  kiln_node_t* node = &g->nodes[ni];
  if (node->n_inputs >= n) return NULL;
  void* p;
  KILN_RETURN_IF_ERROR(kiln_arena_calloc(&g->arena, (size_t)n + 1, sizeof(int32_t), "inputs", &p));
  int32_t* in = p;
  for (int32_t j = 0; j < n; ++j) in[j] = j < node->n_inputs ? node->inputs[j] : -1;
  node->inputs = in;
  node->n_inputs = n;
  return NULL;
}

/* Producer node |pi| now computes BN node |bi|'s output. */
static void take_output(pu_ctx_t* c, int32_t pi, int32_t bi) {
  kiln_graph_t* g = c->g;
  int32_t old = g->nodes[pi].outputs[0], y = g->nodes[bi].outputs[0];
  g->nodes[bi].outputs[0] = -1;
  g->nodes[pi].outputs[0] = y;
  g->tensors[y].producer = pi;
  pu_clear_value(g, y);
  g->tensors[old].producer = -1;
  pu_clear_value(g, old);
  c->uses[old] = 0;
  c->dead[bi] = true;
}

static kiln_status_t fold_one(pu_ctx_t* c, int32_t bi, bool* done) {
  kiln_graph_t* g = c->g;
  *done = false;
  const kiln_node_t* bn = &g->nodes[bi];
  int32_t x = bn->inputs[0];
  int32_t pi = pu_producer(c, x);
  if (pi < 0 || !pu_single_use(c, x) || g->tensors[x].dtype != KILN_DTYPE_F32) return NULL;
  const kiln_node_t* p = &g->nodes[pi];
  if (p->n_outputs != 1) return NULL;
  bool conv = pu_op(p, "Conv"), gemm = pu_op(p, "Gemm"), mm = pu_op(p, "MatMul"),
       add = pu_op(p, "Add");
  if (!conv && !gemm && !mm && !add) return NULL;
  /* Gemm/MatMul: BN's channel axis (1) must be the last, i.e. rank 2. */
  if (!conv && g->tensors[x].shape.rank != 2) return NULL;
  int32_t mi = -1, bias = -1;
  if (add) { /* MatMul + Add(bias) */
    for (int32_t k = 0; k < 2 && mi < 0; ++k) {
      int32_t q = pu_producer(c, p->inputs[k]);
      if (q >= 0 && pu_op(&g->nodes[q], "MatMul") && pu_single_use(c, p->inputs[k])) {
        mi = q;
        bias = p->inputs[1 - k];
      }
    }
    if (mi < 0) return NULL;
  }
  bn_t b;
  bool ok;
  KILN_RETURN_IF_ERROR(bn_affine(c, bi, &b, &ok));
  if (!ok) return NULL;
  kiln_status_t s = NULL;
  int32_t nw = -1, nb = -1;
  const char* base = g->tensors[bn->outputs[0]].name;
  if (conv) {
    int32_t w = p->inputs[1];
    bias = p->n_inputs > 2 ? p->inputs[2] : -1;
    const kiln_shape_t* ws = &g->tensors[w].shape;
    if (f32_weight(g, w) && ws->rank >= 1 && ws->dims[0] == b.c &&
        (bias < 0 || (f32_weight(g, bias) && kiln_array_numel(&g->tensors[bias].value) == b.c))) {
      if (!(s = scale_weight(c, w, 0, &b, &nw)) && !(s = new_bias(c, bias, 1.f, &b, base, &nb)) &&
          !(s = widen_inputs(g, pi, 3))) {
        g->nodes[pi].inputs[1] = nw;
        g->nodes[pi].inputs[2] = nb;
        take_output(c, pi, bi);
        *done = true;
      }
    }
  } else if (gemm) {
    int32_t w = p->inputs[1];
    bias = p->n_inputs > 2 ? p->inputs[2] : -1;
    const kiln_attr_t* tb = kiln_node_attr(p, "transB");
    int axis = tb && tb->i ? 0 : 1;
    const kiln_attr_t* be = kiln_node_attr(p, "beta");
    float beta = be && be->type == KILN_ATTR_FLOAT ? be->f : 1.f;
    const kiln_shape_t* ws = &g->tensors[w].shape;
    if (f32_weight(g, w) && ws->rank == 2 && ws->dims[axis] == b.c &&
        (bias < 0 || row_bias(g, bias, b.c))) {
      if (!(s = scale_weight(c, w, axis, &b, &nw)) &&
          !(s = new_bias(c, bias, beta, &b, base, &nb)) && !(s = widen_inputs(g, pi, 3))) {
        kiln_node_t* pn = &g->nodes[pi];
        pn->inputs[1] = nw;
        pn->inputs[2] = nb;
        for (int32_t k = 0; k < pn->n_attrs; ++k)
          if (strcmp(pn->attrs[k].name, "beta") == 0) pn->attrs[k].f = 1.f; /* folded in */
        take_output(c, pi, bi);
        *done = true;
      }
    }
  } else {
    /* MatMul(x, W[K,C]) [+ Add(bias)] */
    int32_t m = mm ? pi : mi;
    int32_t w = g->nodes[m].inputs[1];
    const kiln_shape_t* ws = &g->tensors[w].shape;
    if (f32_weight(g, w) && ws->rank == 2 && ws->dims[1] == b.c &&
        (bias < 0 || row_bias(g, bias, b.c))) {
      if (!(s = scale_weight(c, w, 1, &b, &nw)) &&
          !(s = new_bias(c, bias, 1.f, &b, base, &nb))) {
        g->nodes[m].inputs[1] = nw;
        if (add) {
          kiln_node_t* an = &g->nodes[pi];
          for (int32_t k = 0; k < 2; ++k)
            if (an->inputs[k] == bias) an->inputs[k] = nb;
          take_output(c, pi, bi);
        } else {
          /* MatMul -> BN becomes MatMul -> Add(b'). */
          int32_t y = g->nodes[bi].outputs[0];
          int32_t mo = g->nodes[m].outputs[0];
          pu_detach(c, y);
          c->dead[bi] = true;
          s = pu_add_node(c, "Add", g->nodes[bi].name, 2, (int32_t[]){mo, nb}, y, 0, NULL, NULL);
        }
        *done = !s;
      }
    }
  }
  kiln_allocator_free(g->allocator, b.mul);
  kiln_allocator_free(g->allocator, b.add);
  return s;
}

kiln_status_t kiln_pass_fold_batchnorm(kiln_graph_t* g, kiln_pass_stats_t* st) {
  pu_ctx_t c;
  KILN_RETURN_IF_ERROR(pu_begin(&c, g));
  kiln_status_t s = NULL;
  int32_t n0 = g->n_nodes;
  for (int32_t i = 0; i < n0 && !s; ++i) {
    if (c.dead[i] || !pu_op(&g->nodes[i], "BatchNormalization")) continue;
    bool done = false;
    s = fold_one(&c, i, &done);
    if (done) ++st->rewrites;
  }
  return pu_end(&c, s);
}
