/* DeformConv (opsets 19, 22), 2-D: a convolution whose kernel taps are
 * moved by per-output offsets [N, offset_group * kH * kW * 2, oH, oW]
 * (dy, dx per tap) and scaled by an optional mask; each tap reads X
 * bilinearly at (oh * sh - ph + kh * dh + dy, ow * sw - pw + kw * dw + dx)
 * with zeros outside (the ONNX reference's GridSample with align_corners
 * and zeros padding). Output [N, oC, oH, oW] takes oH, oW from offset. */
#include <math.h>
#include <string.h>

#include "ir/ops/deform_conv.h"
#include "ir/ops/nn_internal.h"

static kiln_status_t ints2(const kiln_node_t* node, const char* name, int64_t want, int64_t dflt, int64_t* out) {
  const int64_t* v = NULL;
  int64_t n = 0;
  KILN_RETURN_IF_ERROR(kiln_attr_ints(node, name, &v, &n));
  if (n <= 0) {
    for (int64_t k = 0; k < want; ++k) out[k] = dflt;
    return NULL;
  }
  if (n != want) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "DeformConv: '%s' has %lld values, expected %lld", name,
                            (long long)n, (long long)want);
  }
  memcpy(out, v, (size_t)n * sizeof *out);
  return NULL;
}

kiln_status_t kiln_deform_geometry(const kiln_node_t* node, const kiln_shape_t* x, const kiln_shape_t* w,
                                   const kiln_shape_t* offset, const kiln_shape_t* mask, deform_t* g) {
  memset(g, 0, sizeof *g);
  if (x->rank != 4 || w->rank != 4 || offset->rank != 4) {
    return kiln_make_status(KILN_UNSUPPORTED, "DeformConv: only 2-D (4-D X, W and offset) is supported");
  }
  int64_t st[2], dl[2], pd[4], ks[2];
  KILN_RETURN_IF_ERROR(ints2(node, "strides", 2, 1, st));
  KILN_RETURN_IF_ERROR(ints2(node, "dilations", 2, 1, dl));
  KILN_RETURN_IF_ERROR(ints2(node, "pads", 4, 0, pd));
  KILN_RETURN_IF_ERROR(ints2(node, "kernel_shape", 2, 0, ks));
  KILN_RETURN_IF_ERROR(kiln_attr_int(node, "group", 1, &g->group));
  KILN_RETURN_IF_ERROR(kiln_attr_int(node, "offset_group", 1, &g->offset_group));
  g->n = x->dims[0];
  g->ic = x->dims[1];
  g->ih = x->dims[2];
  g->iw = x->dims[3];
  g->oc = w->dims[0];
  g->kh = w->dims[2];
  g->kw = w->dims[3];
  g->oh = offset->dims[2];
  g->ow = offset->dims[3];
  g->sh = st[0];
  g->sw = st[1];
  g->dh = dl[0];
  g->dw = dl[1];
  g->ph = pd[0];
  g->pw = pd[1];
  if ((ks[0] && ks[0] != g->kh) || (ks[1] && ks[1] != g->kw) || g->group < 1 || g->offset_group < 1 ||
      st[0] < 1 || st[1] < 1 || dl[0] < 1 || dl[1] < 1 || pd[0] < 0 || pd[1] < 0 || pd[2] < 0 || pd[3] < 0 ||
      g->ic % g->group != 0 || g->oc % g->group != 0 || g->ic % g->offset_group != 0 ||
      w->dims[1] * g->group != g->ic) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "DeformConv: X has %lld channels, W is [%lld, %lld, %lld, %lld], group %lld, "
                            "offset_group %lld: inconsistent (or bad strides/dilations/pads)",
                            (long long)g->ic, (long long)w->dims[0], (long long)w->dims[1], (long long)g->kh,
                            (long long)g->kw, (long long)g->group, (long long)g->offset_group);
  }
  int64_t taps = g->kh * g->kw;
  int64_t eh = (g->ih + pd[0] + pd[2] - ((g->kh - 1) * g->dh + 1)) / g->sh + 1;
  int64_t ew = (g->iw + pd[1] + pd[3] - ((g->kw - 1) * g->dw + 1)) / g->sw + 1;
  if (offset->dims[0] != g->n || offset->dims[1] != g->offset_group * taps * 2 || g->oh != eh || g->ow != ew) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "DeformConv: offset is [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld, %lld]",
                            (long long)offset->dims[0], (long long)offset->dims[1], (long long)g->oh,
                            (long long)g->ow, (long long)g->n, (long long)(g->offset_group * taps * 2),
                            (long long)eh, (long long)ew);
  }
  if (mask && (mask->rank != 4 || mask->dims[0] != g->n || mask->dims[1] != g->offset_group * taps ||
               mask->dims[2] != g->oh || mask->dims[3] != g->ow)) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "DeformConv: mask shape does not match offset");
  }
  g->icpg = g->ic / g->group;
  g->ocpg = g->oc / g->group;
  g->icpog = g->ic / g->offset_group;
  return NULL;
}

kiln_status_t kiln_nn_deform_conv_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  const kiln_tensor_t* w = ctx->in[1];
  const kiln_tensor_t* off = ctx->in[2];
  if (x->dtype != KILN_DTYPE_UNDEFINED && x->dtype != KILN_DTYPE_F32 && x->dtype != KILN_DTYPE_F16) {
    return kiln_make_status(KILN_UNSUPPORTED, "DeformConv: X of %s is not supported", kiln_dtype_name(x->dtype));
  }
  kiln_shape_t out = {0};
  out.rank = 4;
  for (int k = 0; k < 4; ++k) out.dims[k] = KILN_DIM_UNKNOWN;
  if (kiln_shape_is_static(&x->shape) && kiln_shape_is_static(&w->shape) && kiln_shape_is_static(&off->shape)) {
    const kiln_tensor_t* m = ctx->n_in > 4 ? ctx->in[4] : NULL;
    deform_t g;
    KILN_RETURN_IF_ERROR(kiln_deform_geometry(ctx->node, &x->shape, &w->shape, &off->shape,
                                              m && kiln_shape_is_static(&m->shape) ? &m->shape : NULL, &g));
    out.dims[0] = g.n;
    out.dims[1] = g.oc;
    out.dims[2] = g.oh;
    out.dims[3] = g.ow;
  }
  kiln_infer_set(ctx, 0, x->dtype, &out);
  return NULL;
}

int64_t kiln_nn_deform_conv_flops(const kiln_infer_t* ctx) {
  const kiln_tensor_t* w = ctx->in[1];
  const kiln_tensor_t* y = ctx->out[0];
  if (!kiln_shape_is_static(&w->shape) || !kiln_shape_is_static(&y->shape)) return 0;
  /* 2 per multiply-add plus ~8 per bilinear tap. */
  return kiln_shape_count(&y->shape) * w->shape.dims[1] * w->shape.dims[2] * w->shape.dims[3] * 10;
}

static double at(const kiln_array_t* a, int64_t i) { return kiln_load_f64(a->dtype, a->data, (size_t)i); }

kiln_status_t kiln_nn_deform_conv_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  const kiln_array_t* w = ctx->in[1];
  const kiln_array_t* off = ctx->in[2];
  const kiln_array_t* b = ctx->n_in > 3 ? ctx->in[3] : NULL;
  const kiln_array_t* m = ctx->n_in > 4 ? ctx->in[4] : NULL;
  kiln_array_t* y = ctx->out[0];
  deform_t g;
  KILN_RETURN_IF_ERROR(kiln_deform_geometry(ctx->node, &x->shape, &w->shape, &off->shape, m ? &m->shape : NULL, &g));
  if (b && kiln_array_numel(b) != g.oc) return kiln_make_status(KILN_INVALID_ARGUMENT, "DeformConv: B has the wrong size");
  if (y->shape.rank != 4 || y->shape.dims[0] != g.n || y->shape.dims[1] != g.oc || y->shape.dims[2] != g.oh ||
      y->shape.dims[3] != g.ow) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "DeformConv: output shape mismatch");
  }
  const int64_t taps = g.kh * g.kw;
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t oc = 0; oc < g.oc; ++oc) {
      for (int64_t i = 0; i < g.oh; ++i) {
        for (int64_t j = 0; j < g.ow; ++j) {
          double acc = b ? at(b, oc) : 0.0;
          for (int64_t c = 0; c < g.icpg; ++c) {
            int64_t ica = (oc / g.ocpg) * g.icpg + c, og = ica / g.icpog;
            for (int64_t t = 0; t < taps; ++t) {
              int64_t kh = t / g.kw, kw = t % g.kw;
              int64_t oi = ((n * g.offset_group + og) * taps + t) * 2;
              double h = (double)(i * g.sh - g.ph + kh * g.dh) + at(off, (oi * g.oh + i) * g.ow + j);
              double ww = (double)(j * g.sw - g.pw + kw * g.dw) + at(off, ((oi + 1) * g.oh + i) * g.ow + j);
              double mk = m ? at(m, (((n * g.offset_group + og) * taps + t) * g.oh + i) * g.ow + j) : 1.0;
              double v = 0.0;
              if (h > -2.0 && h < (double)g.ih + 1.0 && ww > -2.0 && ww < (double)g.iw + 1.0) {
                double h0 = floor(h), w0 = floor(ww), lh = h - h0, lw = ww - w0;
                for (int q = 0; q < 4; ++q) {
                  int64_t hi = (int64_t)h0 + (q >> 1), wi = (int64_t)w0 + (q & 1);
                  if (hi < 0 || hi >= g.ih || wi < 0 || wi >= g.iw) continue;
                  double wt = ((q >> 1) ? lh : 1.0 - lh) * ((q & 1) ? lw : 1.0 - lw);
                  v += wt * at(x, ((n * g.ic + ica) * g.ih + hi) * g.iw + wi);
                }
              }
              acc += at(w, ((oc * g.icpg + c) * g.kh + kh) * g.kw + kw) * mk * v;
            }
          }
          kiln_store_f64(y->dtype, y->data, (size_t)(((n * g.oc + oc) * g.oh + i) * g.ow + j), acc);
        }
      }
    }
  }
  return NULL;
}
