/* "recognize-patterns": decomposed Gelu (erf and tanh forms), LayerNorm and
 * HardSwish, as torch 1.13 exports them at opset 13, become one node.
 *
 * torch 1.13 F.gelu (opset 13):
 *   Mul(Mul(x, Add(Erf(Div(x, 1.4142135)), 1)), 0.5)
 * and approximate='tanh':
 *   Mul(0.5, Mul(x, Add(1, Tanh(Mul(0.7978846, Add(x, Mul(0.044715,
 *       Mul(x, Mul(x, x)))))))))
 * F.hardswish: Mul(x, HardSigmoid(x, alpha=1/6)); hand-written:
 *   x * Clip(x + 3, 0, 6) / 6.
 * LayerNorm written out: ReduceMean(x) -> Sub -> Pow 2 -> ReduceMean -> Add
 *   eps -> Sqrt -> Div [-> Mul gamma -> Add beta].
 * Commutative operands match in either order; constants are checked by value;
 * every intermediate must have no other consumer. */
#include <math.h>
#include <string.h>

#include "ir/pass_util.h"

#define TOL 1e-5

typedef struct {
  pu_ctx_t* c;
  int32_t dead[16]; /* intermediate nodes the match replaces */
  int32_t n_dead;
} match_t;

/* The live node producing |t| if it is |op| and |t| feeds only the match. */
static int32_t prod(match_t* m, int32_t t, const char* op) {
  int32_t p = pu_producer(m->c, t);
  if (p < 0 || !pu_op(&m->c->g->nodes[p], op) || m->c->g->nodes[p].n_outputs != 1) return -1;
  return p;
}

static bool take(match_t* m, int32_t t, const char* op, int32_t* out) {
  int32_t p = prod(m, t, op);
  if (p < 0 || !pu_single_use(m->c, t) || m->n_dead >= 16) return false;
  m->dead[m->n_dead++] = p;
  *out = p;
  return true;
}

/* The only consumer of |t| when it is a live |op| node, else -1. */
static int32_t cons1(pu_ctx_t* c, int32_t t, const char* op) {
  if (!pu_single_use(c, t)) return -1;
  const kiln_graph_t* g = c->g;
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    if (c->dead[i]) continue;
    const kiln_node_t* n = &g->nodes[i];
    for (int32_t j = 0; j < n->n_inputs; ++j)
      if (n->inputs[j] == t) return pu_op(n, op) && n->n_outputs == 1 ? i : -1;
  }
  return -1;
}

/* Like cons1, and the consumer joins the nodes the match replaces. */
static bool take_use(match_t* m, int32_t t, const char* op, int32_t* out) {
  int32_t i = cons1(m->c, t, op);
  if (i < 0 || m->n_dead >= 16) return false;
  m->dead[m->n_dead++] = i;
  *out = i;
  return true;
}

static const kiln_node_t* N(match_t* m, int32_t i) { return &m->c->g->nodes[i]; }

/* For binary node |ni|: whether one operand is a constant equal to |v|;
 * *other gets the other operand. */
static bool const_operand(match_t* m, int32_t ni, double v, int32_t* other) {
  const kiln_node_t* n = N(m, ni);
  if (n->n_inputs != 2) return false;
  for (int k = 0; k < 2; ++k)
    if (pu_const_all(m->c->g, n->inputs[k], v, TOL * fabs(v) + 1e-7)) {
      *other = n->inputs[1 - k];
      return true;
    }
  return false;
}

/* x/sqrt(2) as Div(x, 1.41421) or Mul(x, 0.70710) -> x. */
static bool erf_arg(match_t* m, int32_t t, int32_t* x) {
  int32_t d;
  if (take(m, t, "Div", &d)) {
    const kiln_node_t* n = N(m, d);
    if (pu_const_all(m->c->g, n->inputs[1], M_SQRT2, 1e-5)) {
      *x = n->inputs[0];
      return true;
    }
    return false;
  }
  if (take(m, t, "Mul", &d)) return const_operand(m, d, M_SQRT1_2, x);
  return false;
}

/* sqrt(2/pi)*(x + 0.044715*x^3) -> x. */
static bool tanh_arg(match_t* m, int32_t t, int32_t* x) {
  int32_t a, inner, cube, sq, k;
  if (!take(m, t, "Mul", &a) || !const_operand(m, a, sqrt(2.0 / M_PI), &inner)) return false;
  if (!take(m, inner, "Add", &a)) return false;
  for (int s = 0; s < 2; ++s) {
    int32_t xc = N(m, a)->inputs[s], cb = N(m, a)->inputs[1 - s];
    int save = m->n_dead;
    if (take(m, cb, "Mul", &k) && const_operand(m, k, 0.044715, &cube)) {
      int32_t p;
      if (take(m, cube, "Pow", &p)) {
        if (N(m, p)->inputs[0] == xc && pu_const_all(m->c->g, N(m, p)->inputs[1], 3.0, 0)) {
          *x = xc;
          return true;
        }
      } else if (take(m, cube, "Mul", &p)) {
        int32_t o = pu_other(N(m, p), xc);
        if (o >= 0 && take(m, N(m, p)->inputs[o], "Mul", &sq) && N(m, sq)->inputs[0] == xc &&
            N(m, sq)->inputs[1] == xc) {
          *x = xc;
          return true;
        }
      }
    }
    m->n_dead = save;
  }
  return false;
}

/* Result of the match: node |last| (kept as the anchor) is replaced by
 * |op|(x) writing its output. */
static kiln_status_t replace(match_t* m, int32_t last, const char* op, int32_t n_in,
                             const int32_t* in, int32_t n_attrs, const kiln_attr_t* attrs) {
  pu_ctx_t* c = m->c;
  int32_t y = c->g->nodes[last].outputs[0];
  const char* name = c->g->nodes[last].name;
  for (int32_t k = 0; k < m->n_dead; ++k) {
    c->dead[m->dead[k]] = true;
    const kiln_node_t* n = &c->g->nodes[m->dead[k]];
    for (int32_t j = 0; j < n->n_inputs; ++j)
      if (n->inputs[j] >= 0) c->uses[n->inputs[j]]--;
  }
  pu_detach(c, y);
  c->dead[last] = true;
  const kiln_node_t* ln = &c->g->nodes[last];
  for (int32_t j = 0; j < ln->n_inputs; ++j)
    if (ln->inputs[j] >= 0) c->uses[ln->inputs[j]]--;
  return pu_add_node(c, op, name, n_in, in, y, n_attrs, attrs, NULL);
}

/* Gelu anchored at the Erf/Tanh node |ei|. */
static kiln_status_t gelu(pu_ctx_t* c, int32_t ei, bool* done) {
  match_t m = {c, {0}, 0};
  *done = false;
  const kiln_graph_t* g = c->g;
  bool tanh_form = pu_op(&g->nodes[ei], "Tanh");
  int32_t x;
  int32_t e_in = g->nodes[ei].inputs[0];
  if (!(tanh_form ? tanh_arg(&m, e_in, &x) : erf_arg(&m, e_in, &x))) return NULL;
  m.dead[m.n_dead++] = ei;
  int32_t a, m1, m2, other, tmp;
  if (!take_use(&m, g->nodes[ei].outputs[0], "Add", &a) || !const_operand(&m, a, 1.0, &tmp)) return NULL;
  int32_t a_out = g->nodes[a].outputs[0];
  if (!take_use(&m, a_out, "Mul", &m1)) return NULL;
  int32_t o = pu_other(&g->nodes[m1], a_out);
  if (o < 0) return NULL;
  other = g->nodes[m1].inputs[o];
  int32_t m1_out = g->nodes[m1].outputs[0];
  int32_t last = -1, mh;
  if (other == x) {
    /* (x * (1+erf)) * 0.5 */
    m2 = cons1(c, m1_out, "Mul");
    if (m2 < 0 || !const_operand(&m, m2, 0.5, &tmp)) return NULL;
    last = m2;
  } else if (pu_const_all(g, other, 0.5, 1e-7)) {
    /* x * ((1+erf) * 0.5) */
    m2 = cons1(c, m1_out, "Mul");
    if (m2 < 0 || pu_other(&g->nodes[m2], m1_out) < 0 ||
        g->nodes[m2].inputs[pu_other(&g->nodes[m2], m1_out)] != x)
      return NULL;
    last = m2;
  } else if (take(&m, other, "Mul", &mh) && const_operand(&m, mh, 0.5, &tmp) && tmp == x) {
    /* (x * 0.5) * (1+erf) */
    last = m1;
    m.n_dead--; /* m1 is the anchor, mh stays dead */
    for (int32_t k = 0; k < m.n_dead; ++k)
      if (m.dead[k] == m1) m.dead[k] = mh;
  } else {
    return NULL;
  }
  if (g->tensors[x].dtype != KILN_DTYPE_F32 && g->tensors[x].dtype != KILN_DTYPE_F16) return NULL;
  kiln_attr_t ap = {.name = "approximate", .type = KILN_ATTR_STRING, .s = "tanh", .s_len = 4};
  *done = true;
  return replace(&m, last, "Gelu", 1, &x, tanh_form ? 1 : 0, &ap);
}

/* HardSwish anchored at a HardSigmoid or Clip node |hi|. */
static kiln_status_t hardswish(pu_ctx_t* c, int32_t hi, bool* done) {
  match_t m = {c, {0}, 0};
  *done = false;
  kiln_graph_t* g = c->g;
  const kiln_node_t* h = &g->nodes[hi];
  int32_t x = -1, tmp;
  bool clip = pu_op(h, "Clip");
  if (!clip) {
    float alpha = 0.2f, beta = 0.5f;
    const kiln_attr_t* a = kiln_node_attr(h, "alpha");
    const kiln_attr_t* b = kiln_node_attr(h, "beta");
    if (a && a->type == KILN_ATTR_FLOAT) alpha = a->f;
    if (b && b->type == KILN_ATTR_FLOAT) beta = b->f;
    if (fabs(alpha - 1.0 / 6) > 1e-6 || fabs(beta - 0.5) > 1e-6) return NULL;
    x = h->inputs[0];
  } else {
    /* Clip(x + 3, 0, 6): bounds as inputs (opset >= 11) or attributes. */
    double lo = NAN, hi_v = NAN;
    if (g->opset >= 11) {
      if (h->n_inputs < 3 || !pu_const_scalar(g, h->inputs[1], &lo) ||
          !pu_const_scalar(g, h->inputs[2], &hi_v))
        return NULL;
    } else {
      const kiln_attr_t* a = kiln_node_attr(h, "min");
      const kiln_attr_t* b = kiln_node_attr(h, "max");
      if (!a || !b) return NULL;
      lo = a->f;
      hi_v = b->f;
    }
    if (lo != 0 || hi_v != 6) return NULL;
    int32_t ad;
    if (!take(&m, h->inputs[0], "Add", &ad) || !const_operand(&m, ad, 3.0, &x)) return NULL;
  }
  m.dead[m.n_dead++] = hi;
  int32_t h_out = h->outputs[0], mi, last, di;
  if (clip) {
    /* x * c / 6, x * (c / 6), (x * c) * (1/6), ... */
    if (take_use(&m, h_out, "Div", &di) || take_use(&m, h_out, "Mul", &di)) {
      const kiln_node_t* d = &g->nodes[di];
      bool scaled = pu_op(d, "Div") ? d->inputs[0] == h_out && pu_const_all(g, d->inputs[1], 6, 1e-6)
                                    : const_operand(&m, di, 1.0 / 6, &tmp);
      if (scaled) {
        int32_t d_out = d->outputs[0];
        int32_t mm = cons1(c, d_out, "Mul");
        if (mm >= 0 && pu_other(&g->nodes[mm], d_out) >= 0 &&
            g->nodes[mm].inputs[pu_other(&g->nodes[mm], d_out)] == x) {
          *done = true;
          return replace(&m, mm, "HardSwish", 1, &x, 0, NULL);
        }
      }
      /* Not a scale: maybe x * c first. */
      m.n_dead--;
      if (!pu_op(d, "Mul") || pu_other(d, h_out) < 0 || d->inputs[pu_other(d, h_out)] != x)
        return NULL;
      mi = di;
    } else {
      return NULL;
    }
    m.dead[m.n_dead++] = mi;
    int32_t p_out = g->nodes[mi].outputs[0];
    int32_t s = cons1(c, p_out, "Div");
    if (s >= 0 && g->nodes[s].inputs[0] == p_out &&
        pu_const_all(g, g->nodes[s].inputs[1], 6, 1e-6))
      last = s;
    else if ((s = cons1(c, p_out, "Mul")) >= 0 &&
             const_operand(&m, s, 1.0 / 6, &tmp))
      last = s;
    else
      return NULL;
  } else {
    mi = cons1(c, h_out, "Mul");
    if (mi < 0 || pu_other(&g->nodes[mi], h_out) < 0 ||
        g->nodes[mi].inputs[pu_other(&g->nodes[mi], h_out)] != x)
      return NULL;
    last = mi;
  }
  *done = true;
  return replace(&m, last, "HardSwish", 1, &x, 0, NULL);
}

/* ReduceMean over the trailing axes (attribute axes, opset < 18, or the
 * constant axes input) with keepdims: number of axes, or 0. */
static int32_t trailing_mean(const kiln_graph_t* g, const kiln_node_t* n, int32_t rank) {
  const kiln_attr_t* kd = kiln_node_attr(n, "keepdims");
  if ((kd && !kd->i) || rank <= 0) return 0;
  int64_t ax[KILN_MAX_RANK];
  int64_t cnt = 0;
  const kiln_attr_t* a = kiln_node_attr(n, "axes");
  if (a && a->type == KILN_ATTR_INTS && a->count <= KILN_MAX_RANK) {
    cnt = a->count;
    memcpy(ax, a->ints, sizeof(int64_t) * (size_t)cnt);
  } else if (n->n_inputs > 1 && pu_is_const(g, n->inputs[1])) {
    const kiln_array_t* v = &g->tensors[n->inputs[1]].value;
    cnt = kiln_array_numel(v);
    if (cnt > KILN_MAX_RANK || !kiln_dtype_is_int(v->dtype)) return 0;
    for (int64_t i = 0; i < cnt; ++i) ax[i] = kiln_load_i64(v->dtype, v->data, (size_t)i);
  } else {
    return 0;
  }
  if (cnt < 1 || cnt > rank) return 0;
  bool seen[KILN_MAX_RANK] = {0};
  for (int64_t i = 0; i < cnt; ++i) {
    int64_t v = ax[i] < 0 ? ax[i] + rank : ax[i];
    if (v < rank - cnt || v >= rank || seen[v]) return 0;
    seen[v] = true;
  }
  return (int32_t)cnt;
}

/* Whether |p| (a Mul/Add parameter) only spans the trailing |k| dims of a
 * rank-|r| input, so LayerNormalization can take it as Scale/B. */
static bool ln_param(const kiln_graph_t* g, int32_t p, int32_t r, int32_t k) {
  const kiln_tensor_t* t = &g->tensors[p];
  if (t->dtype != KILN_DTYPE_F32 || t->shape.rank < 0 || t->shape.rank > r) return false;
  for (int32_t i = 0; i < t->shape.rank - k; ++i)
    if (t->shape.dims[i] != 1) return false;
  return true;
}

/* LayerNorm anchored at the first ReduceMean |ri|. */
static kiln_status_t layernorm(pu_ctx_t* c, int32_t ri, bool* done) {
  match_t m = {c, {0}, 0};
  *done = false;
  kiln_graph_t* g = c->g;
  const kiln_node_t* r0 = &g->nodes[ri];
  int32_t x = r0->inputs[0], mean = r0->outputs[0];
  const kiln_shape_t* xs = &g->tensors[x].shape;
  if (g->tensors[x].dtype != KILN_DTYPE_F32 || xs->rank < 1) return NULL;
  int32_t k = trailing_mean(g, r0, xs->rank);
  if (!k || !pu_single_use(c, mean)) return NULL;
  /* mean's single consumer: Sub(x, mean). */
  int32_t sub = -1;
  for (int32_t i = 0; i < g->n_nodes && sub < 0; ++i)
    if (!c->dead[i] && pu_op(&g->nodes[i], "Sub") && g->nodes[i].n_inputs == 2 &&
        g->nodes[i].inputs[0] == x && g->nodes[i].inputs[1] == mean)
      sub = i;
  if (sub < 0) return NULL;
  m.dead[m.n_dead++] = ri;
  m.dead[m.n_dead++] = sub;
  int32_t d = g->nodes[sub].outputs[0];
  if (pu_is_output(g, d) || c->uses[d] != 2) return NULL;
  /* d's two consumers: Pow(d, 2) (or Mul(d, d), then one consumer) and Div(d, ...). */
  int32_t pw = -1, dv = -1;
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    const kiln_node_t* n = &g->nodes[i];
    if (c->dead[i] || n->n_inputs != 2) continue;
    if (pu_op(n, "Pow") && n->inputs[0] == d && pu_const_all(g, n->inputs[1], 2.0, 0)) pw = i;
    if (pu_op(n, "Div") && n->inputs[0] == d) dv = i;
  }
  if (pw < 0 || dv < 0) return NULL;
  m.dead[m.n_dead++] = pw;
  int32_t r1, ad, sq, tmp;
  double eps;
  if (!take_use(&m, g->nodes[pw].outputs[0], "ReduceMean", &r1) ||
      trailing_mean(g, &g->nodes[r1], xs->rank) != k ||
      !take_use(&m, g->nodes[r1].outputs[0], "Add", &ad))
    return NULL;
  const kiln_node_t* an = &g->nodes[ad];
  int32_t ei = an->inputs[0] == g->nodes[r1].outputs[0] ? 1 : 0;
  if (!pu_const_scalar(g, an->inputs[ei], &eps) || !(eps >= 0)) return NULL;
  if (!take_use(&m, an->outputs[0], "Sqrt", &sq) || g->nodes[dv].inputs[1] != g->nodes[sq].outputs[0] ||
      !pu_single_use(c, g->nodes[sq].outputs[0]))
    return NULL;
  (void)tmp;
  /* Optional affine: Mul(gamma) then Add(beta). */
  int32_t last = dv, scale = -1, bias = -1, out = g->nodes[dv].outputs[0];
  int32_t mg = cons1(c, out, "Mul");
  if (mg >= 0) {
    int32_t o = pu_other(&g->nodes[mg], out);
    if (o >= 0 && ln_param(g, g->nodes[mg].inputs[o], xs->rank, k)) {
      m.dead[m.n_dead++] = dv;
      scale = g->nodes[mg].inputs[o];
      last = mg;
      out = g->nodes[mg].outputs[0];
      int32_t ab = cons1(c, out, "Add");
      if (ab >= 0) {
        int32_t o2 = pu_other(&g->nodes[ab], out);
        if (o2 >= 0 && ln_param(g, g->nodes[ab].inputs[o2], xs->rank, k)) {
          m.dead[m.n_dead++] = mg;
          bias = g->nodes[ab].inputs[o2];
          last = ab;
        }
      }
    }
  }
  /* The output must have x's shape (gamma/beta must not broadcast it). */
  if (!kiln_shape_equal(&g->tensors[g->nodes[last].outputs[0]].shape, xs)) return NULL;
  if (scale < 0) {
    /* No affine part: Scale of ones over the normalised dims. */
    kiln_shape_t ps = {.rank = k};
    int64_t cnt = 1;
    for (int32_t i = 0; i < k; ++i) {
      ps.dims[i] = xs->dims[xs->rank - k + i];
      if (ps.dims[i] < 0) return NULL;
      cnt *= ps.dims[i];
    }
    float* ones = NULL;
    KILN_RETURN_IF_ERROR(kiln_allocator_malloc(g->allocator, sizeof(float) * (size_t)(cnt + 1),
                                               "pass", (void**)&ones));
    for (int64_t i = 0; i < cnt; ++i) ones[i] = 1.f;
    kiln_status_t s = pu_add_f32(c, g->tensors[x].name, &ps, ones, &scale);
    kiln_allocator_free(g->allocator, ones);
    KILN_RETURN_IF_ERROR(s);
  }
  kiln_attr_t attrs[2] = {
      {.name = "axis", .type = KILN_ATTR_INT, .i = xs->rank - k},
      {.name = "epsilon", .type = KILN_ATTR_FLOAT, .f = (float)eps},
  };
  *done = true;
  return replace(&m, last, "LayerNormalization", bias >= 0 ? 3 : 2,
                 (int32_t[]){x, scale, bias}, 2, attrs);
}

kiln_status_t kiln_pass_patterns(kiln_graph_t* g, kiln_pass_stats_t* st) {
  pu_ctx_t c;
  KILN_RETURN_IF_ERROR(pu_begin(&c, g));
  kiln_status_t s = NULL;
  int32_t n0 = g->n_nodes;
  for (int32_t i = 0; i < n0 && !s; ++i) {
    if (c.dead[i]) continue;
    const kiln_node_t* n = &g->nodes[i];
    if (n->n_inputs < 1 || n->inputs[0] < 0 || n->n_outputs != 1 || n->outputs[0] < 0) continue;
    bool done = false;
    if (pu_op(n, "Erf") || pu_op(n, "Tanh")) s = gelu(&c, i, &done);
    else if (pu_op(n, "HardSigmoid") || pu_op(n, "Clip")) s = hardswish(&c, i, &done);
    else if (pu_op(n, "ReduceMean")) s = layernorm(&c, i, &done);
    if (done) ++st->rewrites;
  }
  return pu_end(&c, s);
}
