/* Convolution template instances: implicit GEMM (and the Winograd
 * F(2x2, 3x3) instances among them) and depthwise (see template.h).
 *
 * lowering/lower_nn_conv.c lowers a Conv ("plain GEMM" and "implicit GEMM"
 * cases) to up to three kernels: a phase split of the input into zero-
 * padded stride-phase planes (absent when the input is read as it is), a
 * GEMM over those planes into an output grid (Y itself, or a flat temp
 * with garbage columns), and a crop of the grid into Y, where fusion puts
 * the epilogue (Relu, residual Add, Clip...). The template computes the
 * GEMM, the crop and the epilogue in one kernel; the phase split stays as
 * printed (one cheap pass that gives the GEMM contiguous, guard-free rows).
 *
 * The match rebuilds the lowering's layout (tap shifts, phase planes, grid
 * pitch) from the node's attributes with the same formulas, then checks it
 * against every buffer shape the plan has (planes, grid, packed weights);
 * any disagreement, any parameter without a known role, groups > 1,
 * runtime-packed weights, f16 buffers (unless the target takes them) or
 * the lowering's transposed mode keep the printed kernels, which are always correct. */
#include "lowering/template.h"

#include <string.h>

#include "ir/op.h"
#include "ir/ops/nn_internal.h"

bool kiln_template_dense_float(const tir_buffer_t* b, bool f16_ok) {
  if (!b || !(b->dtype == KILN_DTYPE_F32 || (f16_ok && b->dtype == KILN_DTYPE_F16))) return false;
  int64_t st = 1;
  for (int32_t i = b->rank - 1; i >= 0; --i) {
    if (b->strides[i] != st) return false;
    st *= b->shape[i];
  }
  return true;
}

const kiln_node_t* kiln_template_lone_unary(const kiln_plan_t* plan, int32_t k, bool f16_ok, const tir_buffer_t** X,
                                            const tir_buffer_t** Y, int32_t* bind_x, int32_t* bind_y) {
  const kiln_plan_kernel_t* kk = &plan->kernels[k];
  const kiln_graph_t* g = plan->graph;
  if (!g || kk->node < 0 || kk->node >= g->n_nodes || kk->n_fused_nodes > 0 || kk->func->n_params != 2) return NULL;
  const kiln_node_t* n = &g->nodes[kk->node];
  if (!n->op_type || (n->domain && n->domain[0]) || n->n_inputs != 1 || n->n_outputs != 1 || n->inputs[0] < 0 ||
      n->outputs[0] < 0)
    return NULL;
  const int32_t bx = plan->tensor_buffer[n->inputs[0]], by = plan->tensor_buffer[n->outputs[0]];
  if (bx < 0 || by < 0) return NULL;
  *X = plan->buffers[bx].buf, *Y = plan->buffers[by].buf;
  if (!kiln_template_dense_float(*X, f16_ok) || !kiln_template_dense_float(*Y, f16_ok)) return NULL;
  const int32_t rx = kiln_plan_root(plan, bx), ry = kiln_plan_root(plan, by);
  if (rx == ry) return NULL;
  *bind_x = *bind_y = -1;
  for (int32_t j = 0; j < 2; ++j) {
    const int32_t a = kk->args[j], r = kiln_plan_root(plan, a);
    const tir_buffer_t* b = plan->buffers[a].buf;
    const bool writes = (tir_func_buffer_access(kk->func, kk->func->params[j]) & TIR_ACCESS_STORE) != 0;
    if (!kiln_template_dense_float(b, f16_ok) || b->dtype != (writes ? *Y : *X)->dtype) return NULL;
    if (writes && r == ry && tir_buffer_numel(b) == tir_buffer_numel(*Y) && *bind_y < 0)
      *bind_y = j;
    else if (!writes && r == rx && tir_buffer_numel(b) == tir_buffer_numel(*X) && *bind_x < 0)
      *bind_x = j;
  }
  return *bind_x >= 0 && *bind_y >= 0 ? n : NULL;
}

static bool same_shape(const tir_buffer_t* b, int32_t rank, const int64_t* shape) {
  if (b->rank != rank) return false;
  for (int32_t i = 0; i < rank; ++i)
    if (b->shape[i] != shape[i]) return false;
  return true;
}

static bool stores(const kiln_plan_kernel_t* kk, int32_t j) {
  return (tir_func_buffer_access(kk->func, kk->func->params[j]) & TIR_ACCESS_STORE) != 0;
}

/* Parameter of kernel |kk| bound to plan buffer |pb|, or -1. */
static int32_t param_of(const kiln_plan_kernel_t* kk, int32_t pb) {
  for (int32_t j = 0; j < kk->func->n_params; ++j)
    if (kk->args[j] == pb) return j;
  return -1;
}

typedef struct axis_s {
  int64_t in, out, k, s, d, p;
} axis_t;

bool kiln_template_conv_match(const kiln_plan_t* plan, int32_t k, bool grid_param, bool f16_ok, kiln_template_conv_t* c) {
  memset(c, 0, sizeof *c);
  const kiln_plan_kernel_t* kk = &plan->kernels[k];
  const kiln_graph_t* gr = plan->graph;
  if (!gr || kk->node < 0 || kk->node >= gr->n_nodes) return false;
  const kiln_node_t* n = &gr->nodes[kk->node];
  if (!(kiln_op_node_templates(n) & KILN_OP_TMPL_CONV) || (n->domain && n->domain[0])) return false;
  if (n->n_inputs < 2 || n->n_outputs < 1 || n->inputs[0] < 0 || n->inputs[1] < 0 || n->outputs[0] < 0)
    return false;
  const int32_t bx = plan->tensor_buffer[n->inputs[0]], by = plan->tensor_buffer[n->outputs[0]];
  const int32_t bbias = n->n_inputs > 2 && n->inputs[2] >= 0 ? plan->tensor_buffer[n->inputs[2]] : -1;
  if (bx < 0 || by < 0) return false;
  const tir_buffer_t* X = plan->buffers[bx].buf;
  const tir_buffer_t* Yt = plan->buffers[by].buf;
  if (!kiln_template_dense_float(X, f16_ok) || !kiln_template_dense_float(Yt, f16_ok) || X->rank < 3 || X->rank > 5 || Yt->rank != X->rank) return false;
  /* An epilogue fused into the GEMM kernel itself (fuse.c's view case: a
   * grid that is Y, written through a view that becomes the epilogue
   * output's): its operands are parameters of the GEMM kernel. */
  int32_t bepi = -1;
  if (kk->n_fused_nodes > 0) {
    if (!kiln_template_epi_parse(plan, k, n->outputs[0], Yt->shape, Yt->rank, f16_ok, &c->epi)) return false;
    bepi = plan->tensor_buffer[c->epi.out_tensor];
    if (bepi < 0 || !kiln_template_dense_float(plan->buffers[bepi].buf, f16_ok) ||
        !same_shape(plan->buffers[bepi].buf, Yt->rank, Yt->shape))
      return false;
  }
  int64_t group = 1;
  {
    kiln_status_t s = kiln_attr_int(n, "group", 1, &group);
    if (s) {
      kiln_status_free(s);
      return false;
    }
  }
  if (group != 1) return false;
  /* The GEMM kernel's parameters: packed weights (a derived constant),
   * bias, the planes it reads and the grid it writes. */
  const int32_t np = kk->func->n_params;
  int32_t jw = -1, jb = -1, jsrc = -1, jdst = -1;
  for (int32_t j = 0; j < np; ++j) {
    const int32_t pb = kk->args[j];
    const kiln_plan_buffer_t* b = &plan->buffers[pb];
    bool operand = false;
    for (int32_t i = 0; i < c->epi.n_operands && bepi >= 0; ++i) operand = operand || c->epi.operands[i].buffer == pb;
    if (operand) {
      if (stores(kk, j)) return false;
      continue;
    }
    if (pb == bbias && jb < 0) jb = j;
    else if (stores(kk, j)) {
      if (jdst >= 0) return false;
      jdst = j;
    } else if (b->kind == KILN_PLAN_CONST && b->tensor < 0 && jw < 0 &&
               (b->buf->rank == 4 || b->buf->rank == 5)) {
      jw = j;
    } else if (jsrc < 0) {
      jsrc = j;
    } else {
      return false;
    }
  }
  if (jw < 0 || jsrc < 0 || jdst < 0 || (bbias >= 0 && jb < 0)) return false;
  const tir_buffer_t* WP = plan->buffers[kk->args[jw]].buf;
  const tir_buffer_t* SRC = plan->buffers[kk->args[jsrc]].buf;
  const tir_buffer_t* DST = plan->buffers[kk->args[jdst]].buf;
  if (!kiln_template_dense_float(WP, f16_ok) || !kiln_template_dense_float(SRC, f16_ok) || !kiln_template_dense_float(DST, f16_ok) || SRC->rank != 3 || DST->rank != 3) return false;
  if (jb >= 0) {
    const tir_buffer_t* B = plan->buffers[kk->args[jb]].buf;
    if (!kiln_template_dense_float(B, f16_ok) || tir_buffer_numel(B) != Yt->shape[1]) return false;
  }
  /* The window, as the lowering resolves it (3 spatial axes, leading 1s). */
  const int32_t nsp = X->rank - 2;
  kiln_nn_window_t w;
  {
    kiln_status_t s = kiln_nn_window_parse(n, "Conv", nsp, false, &w);
    if (s) {
      kiln_status_free(s);
      return false;
    }
  }
  const kiln_tensor_t* wten = &gr->tensors[n->inputs[1]];
  if (wten->shape.rank != X->rank) return false;
  axis_t a3[3];
  for (int32_t d = 0; d < 3; ++d) a3[d] = (axis_t){1, 1, 1, 1, 1, 0};
  for (int32_t i = 0; i < nsp; ++i) {
    w.kernel[i] = wten->shape.dims[2 + i];
    int64_t o = 0;
    kiln_status_t s = kiln_nn_window_out(&w, "Conv", i, X->shape[2 + i], false, &o);
    if (s) {
      kiln_status_free(s);
      return false;
    }
    if (o != Yt->shape[2 + i]) return false;
    a3[3 - nsp + i] = (axis_t){X->shape[2 + i], o, w.kernel[i], w.stride[i], w.dilation[i], w.pad_begin[i]};
  }
  const int64_t N = X->shape[0], C = X->shape[1], M = Yt->shape[1];
  if (wten->shape.dims[0] != M || wten->shape.dims[1] != C) return false;
  int64_t T = 1;
  for (int32_t d = 0; d < 3; ++d) T *= a3[d].k;
  if (T > KILN_TEMPLATE_CONV_MAX_TAPS) return false;
  if (C == 1 && T <= 49) return false; /* the lowering's direct depthwise case */
  /* Past 64 stride residue classes the lowering gathers the patches
   * (lower_nn_conv.c conv_im2col): planes [N][C*T][Qd] that the template
   * reads as a 1x1 conv over C*T channels on the dense output grid. */
  int64_t classes = 1;
  for (int32_t d = 0; d < 3; ++d) classes *= a3[d].s < a3[d].k ? a3[d].s : a3[d].k;
  const bool patches = classes > 64;
  /* Phase planes and tap shifts (lower_nn_conv.c conv_float). */
  int64_t q3[3];
  for (int32_t d = 0; d < 3; ++d) q3[d] = patches ? a3[d].out : a3[d].out + (a3[d].k - 1) * a3[d].d / a3[d].s;
  const int64_t PS = q3[0] * q3[1] * q3[2];
  int64_t ph[64][3];
  int32_t nph = patches ? 1 : 0;
  int64_t max_off = 0;
  if (patches) {
    c->toff[0] = 0;
  } else {
    for (int64_t ad = 0; ad < a3[0].s && ad < a3[0].k; ++ad)
      for (int64_t ah = 0; ah < a3[1].s && ah < a3[1].k; ++ah)
        for (int64_t aw = 0; aw < a3[2].s && aw < a3[2].k; ++aw) {
          const int64_t a[3] = {ad, ah, aw};
          int64_t phase[3];
          for (int32_t d = 0; d < 3; ++d) phase[d] = a[d] * a3[d].d % a3[d].s;
          int32_t p = 0;
          while (p < nph && !(ph[p][0] == phase[0] && ph[p][1] == phase[1] && ph[p][2] == phase[2])) ++p;
          if (p == nph) {
            if (nph == 64) return false;
            memcpy(ph[nph++], phase, sizeof phase);
          }
        }
    for (int64_t kd = 0; kd < a3[0].k; ++kd)
      for (int64_t kh = 0; kh < a3[1].k; ++kh)
        for (int64_t kw = 0; kw < a3[2].k; ++kw) {
          const int64_t kv[3] = {kd, kh, kw};
          int64_t phase[3], off[3];
          for (int32_t d = 0; d < 3; ++d) {
            const int64_t a = kv[d] % a3[d].s, k1 = kv[d] / a3[d].s;
            phase[d] = a * a3[d].d % a3[d].s;
            off[d] = a * a3[d].d / a3[d].s + k1 * a3[d].d;
          }
          int32_t p = 0;
          while (p < nph && !(ph[p][0] == phase[0] && ph[p][1] == phase[1] && ph[p][2] == phase[2])) ++p;
          if (p == nph) return false;
          const int64_t o = p * PS + (off[0] * q3[1] + off[1]) * q3[2] + off[2];
          if (o > INT32_MAX) return false;
          c->toff[(kd * a3[1].k + kh) * a3[2].k + kw] = (int32_t)o;
          if (o > max_off) max_off = o;
        }
  }
  const int64_t Qv = ((a3[0].out - 1) * q3[1] + a3[1].out - 1) * q3[2] + a3[2].out;
  const int64_t Qd = a3[0].out * a3[1].out * a3[2].out;
  /* The lowering's transposed mode (GEMM rows = output positions) is
   * another layout: keep it printed. */
  {
    const bool crop0 = q3[2] != a3[2].out || (a3[0].out > 1 && q3[1] != a3[1].out);
    const int64_t nr = Qv >= 32 ? 32 : 16;
    const int64_t qround = (Qv + nr - 1) / nr * nr;
    const int64_t qeff = crop0 || Qv % nr % 4 != 0 ? qround : Qv;
    if (!patches && M >= 32 && qeff * 2 >= Qd * 3) return false;
  }
  /* The grid: Y itself (a view of it) or a temp the crop kernel reads. */
  const bool dst_is_y = kiln_plan_root(plan, kk->args[jdst]) == kiln_plan_root(plan, bepi >= 0 ? bepi : by);
  if (bepi >= 0 && !dst_is_y) return false;
  if (DST->shape[0] != N || DST->shape[1] != M || DST->shape[2] < Qv) return false;
  const int64_t Q = DST->shape[2];
  if (dst_is_y && (Q != Qd || Qv != Qd)) return false;
  /* The planes: X itself (plain) or the phase-split temp. */
  const bool src_is_x = kiln_plan_root(plan, kk->args[jsrc]) == kiln_plan_root(plan, bx);
  if (SRC->shape[0] != N || SRC->shape[1] != (patches ? C * T : C)) return false;
  const int64_t plane = SRC->shape[2];
  if (src_is_x ? (nph != 1 || plane != PS) : plane < nph * PS) return false;
  if (max_off + Q > plane) return false; /* the last tile's reads must stay inside */
  /* Packed weights [1][tiles][K][t] or [1][nkb][tiles][kbs][t]. */
  const int64_t K = C * T;
  if (WP->shape[0] != 1) return false;
  const int64_t pt = WP->shape[WP->rank - 1], kbs = WP->shape[WP->rank - 2],
                tiles = WP->shape[WP->rank - 3], nkb = WP->rank == 5 ? WP->shape[1] : 1;
  if (pt < 1 || tiles * pt < M || nkb * kbs < K || (WP->rank == 4 && kbs != K)) return false;
  if (nkb > 1 && (nkb - 1) * kbs >= K) return false;

  /* The other kernels of the node: the phase split before (when the
   * planes are a temp), the crop after (when the grid is one). */
  int32_t kphase = -1, kcrop = -1, others = 0;
  for (int32_t j = 0; j < plan->n_kernels; ++j) {
    if (j == k || plan->kernels[j].node != kk->node) continue;
    const kiln_plan_kernel_t* o = &plan->kernels[j];
    const int32_t js = param_of(o, kk->args[jsrc]), jd = param_of(o, kk->args[jdst]);
    if (!src_is_x && j < k && js >= 0 && stores(o, js) && kphase < 0) kphase = j;
    else if (!dst_is_y && j > k && jd >= 0 && !stores(o, jd)) kcrop = j;
    else ++others;
  }
  if (others || (!src_is_x && kphase < 0) || (!dst_is_y && kcrop < 0)) return false;
  int32_t x_mem = bx;
  if (kphase >= 0) {
    const kiln_plan_kernel_t* o = &plan->kernels[kphase];
    if (o->n_fused_nodes == 0) {
      /* the phase kernel reads X and writes the planes, nothing else */
      if (o->func->n_params != 2 || param_of(o, bx) < 0) return false;
    } else {
      /* a producer inlined into the phase split (unet's nearest Resize
       * before its up conv): X is never in memory, so the modes that read
       * X in place of the planes (Winograd, CDIRECT) are out; the planes
       * are the one buffer the printed phase kernel writes */
      const int32_t js = param_of(o, kk->args[jsrc]);
      for (int32_t j = 0; j < o->func->n_params; ++j)
        if (j != js && stores(o, j)) return false;
      x_mem = -1;
    }
  }
  c->gemm_kernel = k;
  c->slot = dst_is_y ? k : kcrop;
  c->M = M, c->Q = Q, c->K = K, c->T = patches ? 1 : T, c->C = patches ? K : C, c->plane = plane, c->batch = N;
  c->pt = pt, c->kbs = kbs, c->tiles = tiles;
  c->crop = !dst_is_y;
  c->q1 = q3[1], c->q2 = q3[2];
  c->od = a3[0].out, c->oh = a3[1].out, c->ow = a3[2].out;
  c->has_bias = jb >= 0;
  c->phase_kernel = kphase, c->x_buffer = x_mem;
  c->ih = a3[1].in, c->iw = a3[2].in, c->pad_h = a3[1].p, c->pad_w = a3[2].p;
  c->kh = a3[1].k, c->kw = a3[2].k, c->sh = a3[1].s, c->sw = a3[2].s, c->dh = a3[1].d, c->dw = a3[2].d;
  /* parameters: W, X, [F], [C], Y, operands */
  int32_t p = 0;
  c->roles[p] = 'W', c->args[p++] = kk->args[jw];
  c->roles[p] = 'X', c->args[p++] = kk->args[jsrc];
  if (c->crop && grid_param) c->roles[p] = 'F', c->args[p++] = kk->args[jdst];
  if (c->has_bias) c->roles[p] = 'C', c->args[p++] = kk->args[jb];
  if (c->crop) {
    /* The crop kernel: the grid, Y (or the epilogue's output) and the
     * epilogue's operands. */
    const kiln_plan_kernel_t* o = &plan->kernels[kcrop];
    if (!kiln_template_epi_parse(plan, kcrop, n->outputs[0], Yt->shape, Yt->rank, f16_ok, &c->epi)) return false;
    const int32_t bout = plan->tensor_buffer[c->epi.out_tensor];
    if (bout < 0) return false;
    const tir_buffer_t* O = plan->buffers[bout].buf;
    if (!kiln_template_dense_float(O, f16_ok) || !same_shape(O, Yt->rank, Yt->shape)) return false;
    for (int32_t j = 0; j < o->func->n_params; ++j) {
      const int32_t pb = o->args[j];
      if (pb == kk->args[jdst]) {
        if (stores(o, j)) return false;
        continue;
      }
      if (pb == bout) {
        if (!stores(o, j)) return false;
        continue;
      }
      bool known = false;
      for (int32_t i = 0; i < c->epi.n_operands; ++i) known = known || c->epi.operands[i].buffer == pb;
      if (!known || stores(o, j)) return false;
    }
    if (param_of(o, bout) < 0) return false;
    for (int32_t i = 0; i < c->epi.n_operands; ++i) {
      if (param_of(o, c->epi.operands[i].buffer) < 0) return false;
      /* the template writes partial sums nowhere near Y's operands, but an
       * operand sharing Y's memory would be read after Y is written */
      if (kiln_plan_root(plan, c->epi.operands[i].buffer) == kiln_plan_root(plan, bout)) return false;
    }
    c->roles[p] = 'Y', c->args[p++] = bout;
    for (int32_t i = 0; i < c->epi.n_operands; ++i)
      c->roles[p] = (char)('0' + i), c->args[p++] = c->epi.operands[i].buffer;
  } else if (bepi >= 0) {
    for (int32_t i = 0; i < c->epi.n_operands; ++i) {
      if (param_of(kk, c->epi.operands[i].buffer) < 0) return false;
      if (kiln_plan_root(plan, c->epi.operands[i].buffer) == kiln_plan_root(plan, bepi)) return false;
    }
    c->roles[p] = 'Y', c->args[p++] = kk->args[jdst];
    for (int32_t i = 0; i < c->epi.n_operands; ++i)
      c->roles[p] = (char)('0' + i), c->args[p++] = c->epi.operands[i].buffer;
  } else {
    c->epi.out_tensor = n->outputs[0];
    c->roles[p] = 'Y', c->args[p++] = kk->args[jdst];
  }
  c->n_params = p;
  c->roles[p] = 0;
  for (int32_t j = 0; j < p; ++j) c->f16[j] = plan->buffers[c->args[j]].buf->dtype == KILN_DTYPE_F16;
  return true;
}

bool kiln_template_conv_sums_f16(const kiln_template_conv_t* c) {
  const char r = c->crop ? 'F' : 'Y';
  for (int32_t j = 0; j < c->n_params; ++j)
    if (c->roles[j] == r) return c->f16[j];
  return false;
}

bool kiln_template_winograd_direct(const kiln_plan_t* plan, kiln_template_conv_t* c) {
  if (c->x_direct) return true;
  if (c->phase_kernel < 0 || c->x_buffer < 0 || !kiln_template_winograd_covers(c)) return false;
  const tir_buffer_t* X = plan->buffers[c->x_buffer].buf;
  /* a 2-D f32 or f16 image; stride 1: the plane is X with pad_h rows and
   * pad_w columns before it (lower_nn_conv.c phase_split) */
  if ((X->dtype != KILN_DTYPE_F32 && X->dtype != KILN_DTYPE_F16) || X->rank != 4 || c->ih < 1 || c->iw < 1 ||
      c->pad_h < 0 || c->pad_w < 0 ||
      c->pad_h + c->ih > c->oh + 2 || c->pad_w + c->iw > c->ow + 2 || c->batch * c->C * c->ih * c->iw > INT32_MAX)
    return false;
  for (int32_t j = 0; j < c->n_params; ++j)
    if (c->roles[j] == 'X') {
      c->args[j] = c->x_buffer, c->f16[j] = X->dtype == KILN_DTYPE_F16;
      c->x_direct = true;
    }
  return c->x_direct;
}

bool kiln_template_conv_direct(const kiln_plan_t* plan, kiln_template_conv_t* c) {
  if (c->x_direct) return true;
  if (c->phase_kernel < 0 || c->x_buffer < 0 || c->od != 1) return false;
  const tir_buffer_t* X = plan->buffers[c->x_buffer].buf;
  if ((X->dtype != KILN_DTYPE_F32 && X->dtype != KILN_DTYPE_F16) || X->rank != 4 || X->shape[1] != c->C ||
      c->T != c->kh * c->kw || c->ih < 1 ||
      c->iw < 1 || c->oh < 1 || c->ow < 1 || c->batch * c->C * c->ih * c->iw > INT32_MAX ||
      c->batch * c->M * c->oh * c->ow > INT32_MAX)
    return false;
  int32_t jx = -1;
  for (int32_t j = 0; j < c->n_params; ++j) {
    if (c->roles[j] == 'F') return false; /* partial sums in the grid: its pitch */
    if (c->roles[j] == 'X') jx = j;
  }
  if (jx < 0) return false;
  /* every tap's offset in X (the shader's flat reads of a 1x1 stride-1
   * unpadded conv; the others bounds-check rows and columns) */
  for (int64_t t = 0; t < c->T; ++t) {
    const int64_t o = (t / c->kw) * c->dh * c->iw + (t % c->kw) * c->dw;
    if (o > INT32_MAX) return false;
    c->toff[t] = (int32_t)o;
  }
  c->args[jx] = c->x_buffer, c->f16[jx] = X->dtype == KILN_DTYPE_F16;
  c->x_direct = true;
  c->crop = false;
  c->Q = c->oh * c->ow;
  c->q1 = c->oh, c->q2 = c->ow;
  c->plane = c->ih * c->iw;
  return true;
}

int64_t kiln_template_winograd_tiles(const kiln_template_conv_t* c) {
  return ((c->oh + 1) / 2) * (((c->ow + 1) / 2 + 3) / 4 * 4);
}

bool kiln_template_winograd_covers(const kiln_template_conv_t* c) {
  if (c->T != 9 || c->K != c->C * 9 || c->od != 1 || !c->crop) return false;
  if (c->q2 < c->ow + 2 || c->oh < 1 || c->ow < 1) return false;
  for (int32_t tap = 0; tap < 9; ++tap)
    if (c->toff[tap] != (tap / 3) * c->q2 + tap % 3) return false; /* stride 1, dilation 1 */
  /* the patches read rows < oh + 2, columns < ow + 2 of each plane */
  if ((c->oh + 1) * c->q2 + c->ow + 2 > c->plane) return false;
  return true;
}

/* ---- depthwise ------------------------------------------------------------- */

/* The lowering's direct depthwise kernel reads X and W as they are and
 * writes Y (or the fused chain's output) once, so the match only rebuilds
 * the window from the node and checks it against the buffer shapes; the
 * Conv node must own no other plan kernel (the GEMM paths have several). */
bool kiln_template_dw_match(const kiln_plan_t* plan, int32_t k, bool f16_ok, kiln_template_dw_t* d) {
  memset(d, 0, sizeof *d);
  const kiln_plan_kernel_t* kk = &plan->kernels[k];
  const kiln_graph_t* g = plan->graph;
  if (!g || kk->node < 0 || kk->node >= g->n_nodes) return false;
  const kiln_node_t* n = &g->nodes[kk->node];
  if (!(kiln_op_node_templates(n) & KILN_OP_TMPL_CONV) || (n->domain && n->domain[0]) || n->n_inputs < 2 ||
      n->n_outputs < 1 || n->inputs[0] < 0 || n->inputs[1] < 0 || n->outputs[0] < 0)
    return false;
  for (int32_t j = 0; j < plan->n_kernels; ++j)
    if (j != k && plan->kernels[j].node == kk->node) return false; /* not the direct case */
  const int32_t bx = plan->tensor_buffer[n->inputs[0]], bw = plan->tensor_buffer[n->inputs[1]];
  const int32_t by = plan->tensor_buffer[n->outputs[0]];
  const int32_t bb = n->n_inputs > 2 && n->inputs[2] >= 0 ? plan->tensor_buffer[n->inputs[2]] : -1;
  if (bx < 0 || bw < 0 || by < 0 || (n->n_inputs > 2 && n->inputs[2] >= 0 && bb < 0)) return false;
  const tir_buffer_t *X = plan->buffers[bx].buf, *W = plan->buffers[bw].buf, *Y = plan->buffers[by].buf;
  if (!kiln_template_dense_float(X, f16_ok) || !kiln_template_dense_float(W, f16_ok) || !kiln_template_dense_float(Y, f16_ok) ||
      X->rank != 4 || W->rank != 4 || Y->rank != 4)
    return false;
  int64_t group = 1;
  kiln_nn_window_t win;
  kiln_status_t st = kiln_attr_int(n, "group", 1, &group);
  if (!st) st = kiln_nn_window_parse(n, "Conv", 2, false, &win);
  int64_t o[2] = {0, 0};
  for (int32_t i = 0; i < 2 && !st; ++i) {
    win.kernel[i] = W->shape[2 + i];
    st = kiln_nn_window_out(&win, "Conv", i, X->shape[2 + i], false, &o[i]);
  }
  if (st) {
    kiln_status_free(st);
    return false;
  }
  d->N = X->shape[0], d->C = X->shape[1], d->M = W->shape[0];
  if (group < 1 || d->C != group || W->shape[1] != 1 || d->M % group || Y->shape[0] != d->N ||
      Y->shape[1] != d->M || Y->shape[2] != o[0] || Y->shape[3] != o[1] ||
      W->shape[2] * W->shape[3] > KILN_TEMPLATE_DW_MAX_TAPS)
    return false;
  d->Mg = d->M / group;
  d->ih = X->shape[2], d->iw = X->shape[3], d->oh = o[0], d->ow = o[1];
  d->kh = W->shape[2], d->kw = W->shape[3];
  d->sh = win.stride[0], d->sw = win.stride[1], d->dh = win.dilation[0], d->dw = win.dilation[1];
  d->ph = win.pad_begin[0], d->pw = win.pad_begin[1];
  if (bb >= 0 && (!kiln_template_dense_float(plan->buffers[bb].buf, f16_ok) ||
                  tir_buffer_numel(plan->buffers[bb].buf) != d->M))
    return false;
  if (d->N * d->C * d->ih * d->iw > INT32_MAX || d->N * d->M * d->oh * d->ow > INT32_MAX) return false;
  /* the chain the kernel ends in (fused epilogue) and its output */
  int32_t bout = by;
  if (kk->n_fused_nodes > 0) {
    if (!kiln_template_epi_parse(plan, k, n->outputs[0], Y->shape, 4, f16_ok, &d->epi)) return false;
    bout = plan->tensor_buffer[d->epi.out_tensor];
    if (bout < 0 || !kiln_template_dense_float(plan->buffers[bout].buf, f16_ok)) return false;
  }
  /* every parameter has a role */
  d->bind_x = d->bind_w = d->bind_c = d->bind_y = -1;
  for (int32_t i = 0; i < d->epi.n_operands; ++i) d->bind_e[i] = -1;
  for (int32_t j = 0; j < kk->func->n_params; ++j) {
    const int32_t a = kk->args[j];
    const bool f16 = plan->buffers[a].buf->dtype == KILN_DTYPE_F16;
    const bool writes = stores(kk, j);
    if (a == bout && writes && d->bind_y < 0) {
      d->bind_y = j, d->f16_y = f16;
      continue;
    }
    if (writes) return false;
    if (a == bx && d->bind_x < 0) d->bind_x = j, d->f16_x = f16;
    else if (a == bw && d->bind_w < 0) d->bind_w = j, d->f16_w = f16;
    else if (a == bb && d->bind_c < 0) d->bind_c = j, d->f16_c = f16;
    else {
      bool known = false;
      for (int32_t i = 0; i < d->epi.n_operands; ++i)
        if (d->epi.operands[i].buffer == a && d->bind_e[i] < 0) d->bind_e[i] = j, d->f16_e[i] = f16, known = true;
      if (!known) return false;
    }
  }
  if (d->bind_x < 0 || d->bind_w < 0 || d->bind_y < 0 || (bb >= 0 && d->bind_c < 0)) return false;
  for (int32_t i = 0; i < d->epi.n_operands; ++i) {
    if (d->bind_e[i] < 0) return false;
    /* the output is written where an operand is read: same memory breaks it */
    if (kiln_plan_root(plan, d->epi.operands[i].buffer) == kiln_plan_root(plan, bout)) return false;
  }
  if (kiln_plan_root(plan, bx) == kiln_plan_root(plan, bout)) return false;
  return true;
}
