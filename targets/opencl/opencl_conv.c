/* Implicit-GEMM convolution instances for the OpenCL target (see
 * opencl_internal.h and kernels/opencl/conv.cl).
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
 * runtime-packed weights, f16 buffers or the lowering's transposed mode
 * keep the printed kernels, which are always correct. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/op.h"
#include "ir/ops/nn_internal.h"
#include "targets/opencl/opencl_internal.h"

kiln_opencl_conv_tiles_t kiln_opencl_conv_default_tiles(int64_t M, int64_t Q, int64_t K) {
  kiln_opencl_conv_tiles_t t = kiln_opencl_gemm_default_tiles(M, Q, K);
  const char* env = getenv("KILN_OPENCL_CONV_TILES");
  if (env && env[0]) {
    kiln_opencl_conv_tiles_t o;
    if (sscanf(env, "%d,%d,%d,%d,%d,%d,%d,%d", &o.tm, &o.tn, &o.vw, &o.wx, &o.wy, &o.bk, &o.mm,
               &o.mn) == 8 &&
        o.tm > 0 && o.tn > 0 && o.vw > 0 && o.tn % o.vw == 0 && o.wx > 0 && o.wy > 0 && o.bk > 0 &&
        o.mm > 0 && o.mn > 0)
      t = o;
  }
  return t;
}

static bool dense_f32(const tir_buffer_t* b) {
  if (!b || b->dtype != KILN_DTYPE_F32) return false;
  int64_t st = 1;
  for (int32_t i = b->rank - 1; i >= 0; --i) {
    if (b->strides[i] != st) return false;
    st *= b->shape[i];
  }
  return true;
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

bool kiln_opencl_conv_match(const kiln_plan_t* plan, int32_t k, kiln_opencl_conv_t* c) {
  memset(c, 0, sizeof *c);
  const kiln_plan_kernel_t* kk = &plan->kernels[k];
  const kiln_graph_t* gr = plan->graph;
  if (!gr || kk->node < 0 || kk->node >= gr->n_nodes || kk->n_fused_nodes > 0) return false;
  const kiln_node_t* n = &gr->nodes[kk->node];
  if (strcmp(n->op_type, "Conv") || (n->domain && n->domain[0])) return false;
  if (n->n_inputs < 2 || n->n_outputs < 1 || n->inputs[0] < 0 || n->inputs[1] < 0 || n->outputs[0] < 0)
    return false;
  const int32_t bx = plan->tensor_buffer[n->inputs[0]], by = plan->tensor_buffer[n->outputs[0]];
  const int32_t bbias = n->n_inputs > 2 && n->inputs[2] >= 0 ? plan->tensor_buffer[n->inputs[2]] : -1;
  if (bx < 0 || by < 0) return false;
  const tir_buffer_t* X = plan->buffers[bx].buf;
  const tir_buffer_t* Yt = plan->buffers[by].buf;
  if (!dense_f32(X) || !dense_f32(Yt) || X->rank < 3 || X->rank > 5 || Yt->rank != X->rank) return false;
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
  if (!dense_f32(WP) || !dense_f32(SRC) || !dense_f32(DST) || SRC->rank != 3 || DST->rank != 3) return false;
  if (jb >= 0) {
    const tir_buffer_t* B = plan->buffers[kk->args[jb]].buf;
    if (!dense_f32(B) || tir_buffer_numel(B) != Yt->shape[1]) return false;
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
  if (T > KILN_OPENCL_CONV_MAX_TAPS) return false;
  if (C == 1 && T <= 49) return false; /* the lowering's direct depthwise case */
  /* Phase planes and tap shifts (lower_nn_conv.c conv_float). */
  int64_t q3[3];
  for (int32_t d = 0; d < 3; ++d) q3[d] = a3[d].out + (a3[d].k - 1) * a3[d].d / a3[d].s;
  const int64_t PS = q3[0] * q3[1] * q3[2];
  int64_t ph[64][3];
  int32_t nph = 0;
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
  int64_t max_off = 0;
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
  const int64_t Qv = ((a3[0].out - 1) * q3[1] + a3[1].out - 1) * q3[2] + a3[2].out;
  const int64_t Qd = a3[0].out * a3[1].out * a3[2].out;
  /* The lowering's transposed mode (GEMM rows = output positions) is
   * another layout: keep it printed. */
  {
    const bool crop0 = q3[2] != a3[2].out || (a3[0].out > 1 && q3[1] != a3[1].out);
    const int64_t nr = Qv >= 32 ? 32 : 16;
    const int64_t qround = (Qv + nr - 1) / nr * nr;
    const int64_t qeff = crop0 || Qv % nr % 4 != 0 ? qround : Qv;
    if (M >= 32 && qeff * 2 >= Qd * 3) return false;
  }
  /* The grid: Y itself (a view of it) or a temp the crop kernel reads. */
  const bool dst_is_y = kiln_plan_root(plan, kk->args[jdst]) == kiln_plan_root(plan, by);
  if (DST->shape[0] != N || DST->shape[1] != M || DST->shape[2] < Qv) return false;
  const int64_t Q = DST->shape[2];
  if (dst_is_y && (Q != Qd || Qv != Qd)) return false;
  /* The planes: X itself (plain) or the phase-split temp. */
  const bool src_is_x = kiln_plan_root(plan, kk->args[jsrc]) == kiln_plan_root(plan, bx);
  if (SRC->shape[0] != N || SRC->shape[1] != C) return false;
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
    if (!src_is_x && j < k && js >= 0 && stores(o, js) && o->n_fused_nodes == 0) kphase = j;
    else if (!dst_is_y && j > k && jd >= 0 && !stores(o, jd)) kcrop = j;
    else ++others;
  }
  if (others || (!src_is_x && kphase < 0) || (!dst_is_y && kcrop < 0)) return false;
  if (kphase >= 0) {
    /* the phase kernel reads X and writes the planes, nothing else */
    const kiln_plan_kernel_t* o = &plan->kernels[kphase];
    if (o->func->n_params != 2 || param_of(o, bx) < 0) return false;
  }
  c->gemm_kernel = k;
  c->slot = dst_is_y ? k : kcrop;
  c->M = M, c->Q = Q, c->K = K, c->T = T, c->C = C, c->plane = plane, c->batch = N;
  c->pt = pt, c->kbs = kbs, c->tiles = tiles;
  c->crop = !dst_is_y;
  c->q1 = q3[1], c->q2 = q3[2];
  c->od = a3[0].out, c->oh = a3[1].out, c->ow = a3[2].out;
  c->has_bias = jb >= 0;
  /* parameters: W, X, [F], [C], Y, operands */
  int32_t p = 0;
  c->roles[p] = 'W', c->args[p++] = kk->args[jw];
  c->roles[p] = 'X', c->args[p++] = kk->args[jsrc];
  if (c->crop) c->roles[p] = 'F', c->args[p++] = kk->args[jdst];
  if (c->has_bias) c->roles[p] = 'C', c->args[p++] = kk->args[jb];
  if (c->crop) {
    /* The crop kernel: the grid, Y (or the epilogue's output) and the
     * epilogue's operands. */
    const kiln_plan_kernel_t* o = &plan->kernels[kcrop];
    if (!kiln_opencl_epi_parse(plan, kcrop, n->outputs[0], Yt->shape, Yt->rank, &c->epi)) return false;
    const int32_t bout = plan->tensor_buffer[c->epi.out_tensor];
    if (bout < 0) return false;
    const tir_buffer_t* O = plan->buffers[bout].buf;
    if (!dense_f32(O) || !same_shape(O, Yt->rank, Yt->shape)) return false;
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
  } else {
    c->epi.out_tensor = n->outputs[0];
    c->roles[p] = 'Y', c->args[p++] = kk->args[jdst];
  }
  c->n_params = p;
  c->roles[p] = 0;
  c->tiles_used = kiln_opencl_conv_default_tiles(M, Q, K);
  c->matched = true;
  return true;
}

void kiln_opencl_conv_launch(const kiln_opencl_conv_t* c, int64_t groups[3], int64_t local[3]) {
  const kiln_opencl_conv_tiles_t* t = &c->tiles_used;
  const int64_t bm = (int64_t)t->tm * t->wy * t->mm, bn = (int64_t)t->tn * t->wx * t->mn;
  groups[0] = (c->Q + bn - 1) / bn;
  groups[1] = (c->M + bm - 1) / bm;
  groups[2] = c->batch > 0 ? c->batch : 1;
  local[0] = t->wx;
  local[1] = t->wy;
  local[2] = 1;
}

static const char* const macro_names[] = {
    "KILN_CONV_NAME", "KILN_CONV_SIGNATURE", "KC_TOFF", "KC_EPI", "CM", "CQ", "CK", "CT", "CC",
    "CPLANE", "CBATCH", "CPT", "CKBS", "CTILES", "CCROP", "CQ1", "CQ2", "CDO", "CHO", "CWO",
    "CHAS_BIAS", "TM", "TN", "VW", "WX", "WY", "BK", "MM", "MN"};

kiln_status_t kiln_opencl_conv_print(const kiln_opencl_conv_t* c, const char* name, kiln_cf_out_t* out) {
  const kiln_opencl_conv_tiles_t* t = &c->tiles_used;
  if (t->tn % t->vw || t->tm < 1 || t->wx < 1 || t->wy < 1 || t->bk < 1 || t->mm < 1 || t->mn < 1 ||
      (t->vw != 1 && t->vw != 2 && t->vw != 4 && t->vw != 8 && t->vw != 16))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl conv '%s': bad tiles tm %d tn %d vw %d", name,
                            t->tm, t->tn, t->vw);
  if (c->T < 1 || c->T > KILN_OPENCL_CONV_MAX_TAPS)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "opencl conv '%s': %lld taps", name, (long long)c->T);
  kiln_cf_out_printf(out, "/* kiln conv template: %lld channels x %lld grid x K %lld (%lld taps)%s */\n",
                     (long long)c->M, (long long)c->Q, (long long)c->K, (long long)c->T,
                     c->crop ? ", cropped" : "");
  kiln_cf_out_printf(out, "__constant int %s_toff[%lld] = {", name, (long long)c->T);
  for (int64_t i = 0; i < c->T; ++i) kiln_cf_out_printf(out, "%s%d", i ? ", " : "", (int)c->toff[i]);
  kiln_cf_out_puts(out, "};\n");
  kiln_cf_out_printf(out, "#define KILN_CONV_NAME %s\n#define KC_TOFF %s_toff\n#define KILN_CONV_SIGNATURE ",
                     name, name);
  for (int32_t j = 0; j < c->n_params; ++j) {
    const char r = c->roles[j];
    if (j) kiln_cf_out_puts(out, ", ");
    switch (r) {
      case 'W': kiln_cf_out_puts(out, "__global const float* restrict W"); break;
      case 'X': kiln_cf_out_puts(out, "__global const float* restrict XP"); break;
      case 'F': kiln_cf_out_puts(out, "__global float* restrict YF"); break;
      case 'C': kiln_cf_out_puts(out, "__global const float* restrict BIAS"); break;
      case 'Y': kiln_cf_out_puts(out, "__global float* restrict Y"); break;
      default: kiln_cf_out_printf(out, "__global const float* restrict E%c", r); break;
    }
  }
  kiln_cf_out_puts(out, "\n");
  kiln_opencl_epi_print(&c->epi, "KC_EPI", "E", out);
  kiln_cf_out_printf(out,
                     "#define CM %lld\n#define CQ %lld\n#define CK %lld\n#define CT %lld\n#define CC %lld\n"
                     "#define CPLANE %lld\n#define CBATCH %lld\n#define CPT %lld\n#define CKBS %lld\n"
                     "#define CTILES %lld\n#define CCROP %d\n#define CQ1 %lld\n#define CQ2 %lld\n"
                     "#define CDO %lld\n#define CHO %lld\n#define CWO %lld\n#define CHAS_BIAS %d\n"
                     "#define TM %d\n#define TN %d\n#define VW %d\n#define WX %d\n#define WY %d\n"
                     "#define BK %d\n#define MM %d\n#define MN %d\n",
                     (long long)c->M, (long long)c->Q, (long long)c->K, (long long)c->T, (long long)c->C,
                     (long long)c->plane, (long long)c->batch, (long long)c->pt, (long long)c->kbs,
                     (long long)c->tiles, c->crop ? 1 : 0, (long long)c->q1, (long long)c->q2,
                     (long long)c->od, (long long)c->oh, (long long)c->ow, c->has_bias ? 1 : 0, t->tm,
                     t->tn, t->vw, t->wx, t->wy, t->bk, t->mm, t->mn);
  kiln_cf_out_puts(out, kiln_cl_conv);
  for (size_t i = 0; i < sizeof macro_names / sizeof macro_names[0]; ++i)
    kiln_cf_out_printf(out, "#undef %s\n", macro_names[i]);
  kiln_cf_out_puts(out, "\n");
  return NULL;
}
