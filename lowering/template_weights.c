/* Weight layouts of the conv template instances (see template.h): the
 * lowering's packed weight constant re-laid out in the order an instance's
 * micro-kernel reads it (TILED), or Winograd-transformed (WINOGRAD), with
 * the geometry the instance's tiles give. Done here, at compile time and
 * once, so that the plan's constants are what the device reads and the
 * targets print instances without rewriting the program's weights. */
#include <string.h>

#include "lowering/template.h"

/* The W parameter's dtype; false when the instance has none. */
static bool weights_param(const kiln_template_conv_t* c, bool* f16) {
  for (int32_t j = 0; j < c->n_params; ++j)
    if (c->roles[j] == 'W') {
      *f16 = c->f16[j];
      return true;
    }
  return false;
}

/* Element offset of (m, k) in the lowering's packed layout, split into an
 * m part and a k part (both layouts below split the same way). */
static int64_t packed_m(const kiln_template_conv_t* c, int64_t m) { return (m / c->pt) * c->kbs * c->pt + m % c->pt; }
static int64_t packed_k(const kiln_template_conv_t* c, int64_t k) {
  return (k / c->kbs) * c->tiles * c->kbs * c->pt + (k % c->kbs) * c->pt;
}

static kiln_status_t tiled(const kiln_template_conv_t* c, const kiln_template_weights_t* l, size_t es,
                           const uint8_t* src, uint8_t* dst) {
  const int64_t bm = l->block, bk = l->slice, tm = l->panel;
  const int64_t nks = (c->K + bk - 1) / bk;
  int64_t* offs = NULL;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(kiln_allocator_system(), sizeof(int64_t) * (size_t)(2 * (c->M + c->K)),
                                             "conv weights", (void**)&offs));
  int64_t *src_m = offs, *dst_m = offs + c->M, *src_k = offs + 2 * c->M, *dst_k = src_k + c->K;
  for (int64_t m = 0; m < c->M; ++m) {
    const int64_t mm = m % bm;
    src_m[m] = packed_m(c, m);
    dst_m[m] = (m / bm) * nks * bm * bk + (mm / tm) * bk * tm + mm % tm;
  }
  for (int64_t k = 0; k < c->K; ++k) {
    src_k[k] = packed_k(c, k);
    dst_k[k] = (k / bk) * bm * bk + (k % bk) * tm;
  }
  /* a plain copy of elements of either width (the padding: +0.0, all zero
   * bits in both) */
  for (int64_t k = 0; k < c->K; ++k)
    for (int64_t m = 0; m < c->M; ++m)
      memcpy(dst + (size_t)(dst_k[k] + dst_m[m]) * es, src + (size_t)(src_k[k] + src_m[m]) * es, es);
  kiln_allocator_free(kiln_allocator_system(), offs);
  return NULL;
}

/* U = G g G^T, n x n positions for each output channel m and input channel
 * ch, laid out [m / panel][position][ch, padded to the slice][m % panel];
 * F(4x4) (n 6): [m / panel][ch][position][m % panel].
 * f16 weights: U is computed in f32 from the f16 values (its error there,
 * 2^-24 relative, is nothing next to f16's) and rounded to f16 once, so
 * the constant keeps half the bytes (the transform already makes it 16/9
 * of the weights). That rounding is a second relative error of at most
 * 2^-11 per U element, the size of the one the weights got when they
 * turned f16; the tests bound the outputs' error at the fp16 tolerance
 * (tests/opencl/test_opencl_fp16.c). */
static void winograd_n(const kiln_template_conv_t* c, const kiln_template_weights_t* l, bool f16, const void* src,
                       void* dst, int n, const float (*G)[3]) {
  const float* s32 = src;
  const uint16_t* s16 = src;
  float* d32 = dst;
  uint16_t* d16 = dst;
  const int64_t tm = l->panel, cp = (c->C + l->slice - 1) / l->slice * l->slice;
  for (int64_t m = 0; m < c->M; ++m) {
    const int64_t src_m = packed_m(c, m);
    for (int64_t ch = 0; ch < c->C; ++ch) {
      float g[3][3], gg[6][3];
      for (int tap = 0; tap < 9; ++tap) {
        const int64_t at = packed_k(c, ch * 9 + tap) + src_m;
        g[tap / 3][tap % 3] = f16 ? kiln_f16_to_f32(s16[at]) : s32[at];
      }
      for (int i = 0; i < n; ++i) /* G g */
        for (int j = 0; j < 3; ++j) gg[i][j] = G[i][0] * g[0][j] + G[i][1] * g[1][j] + G[i][2] * g[2][j];
      for (int i = 0; i < n; ++i) /* (G g) G^T */
        for (int j = 0; j < n; ++j) {
          const int xi = i * n + j;
          /* F(4x4): a channel's 36 positions together (the shader's
           * offsets of them are constants while its sizes are run-time) */
          const int64_t at = n == 6 ? ((((m / tm) * cp + ch) * n * n + xi) * tm + m % tm)
                                    : (((m / tm) * n * n + xi) * cp + ch) * tm + m % tm;
          const float u = gg[i][0] * G[j][0] + gg[i][1] * G[j][1] + gg[i][2] * G[j][2];
          if (f16) d16[at] = kiln_f32_to_f16(u);
          else d32[at] = u;
        }
    }
  }
}

/* F(2x2, 3x3): G of the points 0, 1, -1 and infinity, 16 positions per
 * output and input channel. */
static void winograd(const kiln_template_conv_t* c, const kiln_template_weights_t* l, bool f16, const void* src,
                     void* dst) {
  static const float G[4][3] = {{1, 0, 0}, {0.5f, 0.5f, 0.5f}, {0.5f, -0.5f, 0.5f}, {0, 0, 1}};
  winograd_n(c, l, f16, src, dst, 4, G);
}

/* F(4x4, 3x3): the 6x3 G of the points 0, 1, -1, 2, -2 and infinity, 36
 * positions per output and input channel. */
bool kiln_template_epi_residual_relu(const kiln_template_conv_t* c) {
  const kiln_template_epi_t* e = &c->epi;
  if (e->n_ops != 2 || e->n_operands != 1 || e->ops[0].op != '+' || e->ops[0].a != 0 || e->ops[0].b >= 0 ||
      e->ops[1].op != 'r')
    return false;
  const kiln_template_epi_operand_t* o = &e->operands[0];
  const int64_t cp = c->oh * c->ow;
  bool role = false;
  for (int32_t j = 0; j < c->n_params; ++j) role = role || c->roles[j] == '0';
  return role && c->od == 1 && o->sp == 1 && o->sm == cp && (o->sn == c->M * cp || c->batch <= 1);
}

bool kiln_template_wino4_sizes(const kiln_template_conv_t* c, float out[KILN_TEMPLATE_WINO4_SIZES]) {
  const int64_t add = kiln_template_epi_residual_relu(c);
  const int64_t relu = (c->epi.n_ops == 1 && c->epi.ops[0].op == 'r') || add;
  const int64_t v[KILN_TEMPLATE_WINO4_SIZES] = {c->M, c->C, c->oh, c->ow, c->ih, c->iw, c->plane, c->q2, relu, add, 0, 0};
  bool exact = true;
  for (int i = 0; i < KILN_TEMPLATE_WINO4_SIZES; ++i) {
    exact = exact && v[i] >= 0 && v[i] <= (1 << 24);
    out[i] = (float)v[i];
  }
  return exact;
}

static void winograd4(const kiln_template_conv_t* c, const kiln_template_weights_t* l, bool f16, const void* src,
                      void* dst) {
  static const float G[6][3] = {{0.25f, 0, 0},
                                {-1.0f / 6, -1.0f / 6, -1.0f / 6},
                                {-1.0f / 6, 1.0f / 6, -1.0f / 6},
                                {1.0f / 24, 1.0f / 12, 1.0f / 6},
                                {1.0f / 24, -1.0f / 12, 1.0f / 6},
                                {0, 0, 1}};
  /* the conv's sizes first (kiln_template_wino4_sizes), then U */
  float sz[KILN_TEMPLATE_WINO4_SIZES];
  kiln_template_wino4_sizes(c, sz);
  for (int i = 0; i < KILN_TEMPLATE_WINO4_SIZES; ++i)
    if (f16) ((uint16_t*)dst)[i] = 0;
    else ((float*)dst)[i] = sz[i];
  winograd_n(c, l, f16, src, (char*)dst + (f16 ? 2 : 4) * KILN_TEMPLATE_WINO4_SIZES, 6, G);
}

/* Elements of |c|'s weights in layout |l| (TILED, WINOGRAD or WINOGRAD4). */
static int64_t laid_out_numel(const kiln_template_conv_t* c, const kiln_template_weights_t* l) {
  const bool wino4 = l->layout == KILN_TEMPLATE_W_WINOGRAD4;
  if (l->layout == KILN_TEMPLATE_W_WINOGRAD || wino4) {
    const int64_t mp = (c->M + l->block - 1) / l->block * l->block, cp = (c->C + l->slice - 1) / l->slice * l->slice;
    return mp * (wino4 ? 36 : 16) * cp + (wino4 ? KILN_TEMPLATE_WINO4_SIZES : 0);
  }
  return (c->M + l->block - 1) / l->block * l->block * ((c->K + l->slice - 1) / l->slice * l->slice);
}

uint64_t kiln_template_weights_bytes(const kiln_template_t* t) {
  bool f16 = false;
  if (!t || (t->kind != KILN_TEMPLATE_CONV && t->kind != KILN_TEMPLATE_WINOGRAD) ||
      t->weights.layout == KILN_TEMPLATE_W_PACKED || t->weights.block < 1 || t->weights.slice < 1 ||
      !weights_param(&t->conv, &f16))
    return 0;
  return (uint64_t)laid_out_numel(&t->conv, &t->weights) * (f16 ? 2u : 4u);
}

kiln_status_t kiln_template_weights_convert(const kiln_template_t* t, const kiln_plan_buffer_t* w, kiln_array_t* out) {
  memset(out, 0, sizeof *out);
  const kiln_template_conv_t* c = &t->conv;
  const kiln_template_weights_t* l = &t->weights;
  const bool wino4 = l->layout == KILN_TEMPLATE_W_WINOGRAD4;
  const bool wino = l->layout == KILN_TEMPLATE_W_WINOGRAD || wino4;
  const char* what = wino ? "winograd weights" : "conv weights";
  const char* name = w && w->buf ? w->buf->name : "?";
  bool f16 = false;
  if ((t->kind != KILN_TEMPLATE_CONV && t->kind != KILN_TEMPLATE_WINOGRAD) ||
      (l->layout != KILN_TEMPLATE_W_TILED && !wino) || (wino && (t->kind != KILN_TEMPLATE_WINOGRAD || c->T != 9)))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s '%s': no layout to convert to", what, name);
  if (l->block < 1 || l->slice < 1 || l->panel < 1 || l->block % l->panel)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s '%s': bad geometry block %lld slice %lld panel %lld", what,
                            name, (long long)l->block, (long long)l->slice, (long long)l->panel);
  const kiln_dtype_t dt = weights_param(c, &f16) && f16 ? KILN_DTYPE_F16 : KILN_DTYPE_F32;
  if (!w || !w->buf || w->kind != KILN_PLAN_CONST || w->buf->dtype != dt || w->value.dtype != dt)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: the weights are not an %s constant", what,
                            f16 ? "f16" : "f32");
  /* the packed source holds every (m, k) of the lowering's layout */
  const int64_t es = f16 ? 2 : 4;
  const int64_t src_n = ((c->K + c->kbs - 1) / (c->kbs > 0 ? c->kbs : 1)) * c->tiles * c->kbs * c->pt;
  if (c->pt < 1 || c->kbs < 1 || c->tiles * c->pt < c->M || (uint64_t)(src_n * es) > w->value.nbytes ||
      (w->value.nbytes && !w->value.data))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: weights '%s' hold %llu bytes, the packed layout needs %lld",
                            what, name, (unsigned long long)w->value.nbytes, (long long)(src_n * es));
  const int64_t n = laid_out_numel(c, l);
  kiln_shape_t shape = kiln_shape_make(1, &n);
  KILN_RETURN_IF_ERROR(kiln_array_alloc(kiln_allocator_system(), dt, &shape, out), "%s '%s'", what, name);
  if (wino) {
    float sz[KILN_TEMPLATE_WINO4_SIZES];
    if (wino4 && !kiln_template_wino4_sizes(c, sz)) {
      kiln_array_free(kiln_allocator_system(), out);
      return kiln_make_status(KILN_UNSUPPORTED, "%s '%s': the conv's sizes are not exact in f32", what, name);
    }
    (wino4 ? winograd4 : winograd)(c, l, f16, w->value.data, out->data);
    return NULL;
  }
  kiln_status_t s = tiled(c, l, (size_t)es, w->value.data, out->data);
  if (s) kiln_array_free(kiln_allocator_system(), out);
  return s;
}

static bool pending(const kiln_template_t* t) {
  return t && (t->kind == KILN_TEMPLATE_CONV || t->kind == KILN_TEMPLATE_WINOGRAD) &&
         t->weights.layout != KILN_TEMPLATE_W_PACKED && t->weights.block > 0 && !t->weights.laid_out;
}

kiln_status_t kiln_template_weights_lay_out(kiln_plan_t* plan) {
  if (!plan) return kiln_make_status(KILN_INVALID_ARGUMENT, "templates: NULL plan");
  int32_t m = 0;
  for (int32_t k = 0; k < plan->n_kernels; ++k) m += pending(plan->kernels[k].tmpl);
  if (!m) return NULL;
  kiln_allocator_t al = kiln_allocator_system();
  kiln_array_t* vals = NULL;
  const tir_buffer_t** bufs = NULL;
  kiln_status_t s = kiln_allocator_malloc(al, sizeof *vals * (size_t)m, "templates: weights", (void**)&vals);
  if (!s) s = kiln_allocator_malloc(al, sizeof *bufs * (size_t)m, "templates: weights", (void**)&bufs);
  int32_t got = 0;
  for (int32_t k = 0; k < plan->n_kernels && !s; ++k) {
    const kiln_template_t* t = plan->kernels[k].tmpl;
    if (!pending(t)) continue;
    const int32_t b = t->weights.buffer;
    if (b < 0 || b >= plan->n_buffers) {
      s = kiln_make_status(KILN_INVALID_ARGUMENT, "templates: kernel '%s': weights buffer %d",
                           plan->kernels[k].func->name, (int)b);
      break;
    }
    s = kiln_template_weights_convert(t, &plan->buffers[b], &vals[got]);
    if (s) {
      s = kiln_status_annotate(s, "templates: kernel '%s'", plan->kernels[k].func->name);
      break;
    }
    const tir_buffer_t* old = plan->buffers[b].buf;
    bufs[got] = tir_buffer(&plan->tir, old->name, old->dtype, 1, &vals[got].shape.dims[0], old->scope);
    ++got;
    if (!bufs[got - 1]) s = tir_ctx_status(&plan->tir);
  }
  /* Commit: every conversion succeeded. */
  for (int32_t k = 0, i = 0; k < plan->n_kernels && !s; ++k) {
    kiln_template_t* t = plan->kernels[k].tmpl;
    if (!pending(t)) continue;
    kiln_plan_buffer_t* pb = &plan->buffers[t->weights.buffer];
    /* kept for kiln_template_weights_restore (a later choice may want the
     * packed layout, or other tiles) */
    pb->before_layout.buf = pb->buf;
    pb->before_layout.value = pb->value;
    pb->before_layout.owned = pb->owned;
    pb->value = vals[i];
    pb->owned = true;
    pb->buf = bufs[i];
    t->weights.laid_out = true;
    ++i;
  }
  if (s)
    for (int32_t i = 0; i < got; ++i) kiln_array_free(al, &vals[i]);
  kiln_allocator_free(al, vals);
  kiln_allocator_free(al, bufs);
  return s;
}

void kiln_template_weights_restore(kiln_plan_t* plan) {
  for (int32_t i = 0; i < plan->n_buffers; ++i) {
    kiln_plan_buffer_t* pb = &plan->buffers[i];
    if (!pb->before_layout.buf) continue;
    if (pb->owned) kiln_array_free(kiln_allocator_system(), &pb->value);
    pb->buf = pb->before_layout.buf;
    pb->value = pb->before_layout.value;
    pb->owned = pb->before_layout.owned;
    memset(&pb->before_layout, 0, sizeof pb->before_layout);
  }
  for (int32_t k = 0; k < plan->n_kernels; ++k)
    if (plan->kernels[k].tmpl) plan->kernels[k].tmpl->weights.laid_out = false;
}
