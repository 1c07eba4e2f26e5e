/* DFT (opsets 17 and 20) and STFT (opset 17): discrete Fourier transform along one axis of a
 * real [..., 1] or complex [..., 2] signal, forward or inverse (scaled by
 * 1/L), onesided (forward only: the first L/2 + 1 bins), with dft_length
 * truncating or zero-padding the signal. A direct O(L^2) sum per output
 * bin, in double here; no FFT yet. dft_length and (opset 20) axis must be
 * known at load time. STFT is the same sum over each window-weighted
 * frame; frame_step and frame_length must be known at load time. */
#include <math.h>
#include <string.h>

#include "ir/ops/dft.h"
#include "ir/ops/tensor_impl.h"

kiln_status_t kiln_dft_params(const kiln_node_t* node, int64_t opset, const kiln_shape_t* xs,
                              const kiln_array_t* len, const kiln_array_t* axis, dft_t* d) {
  memset(d, 0, sizeof *d);
  int64_t inv = 0, one = 0, ax = opset >= 20 ? -2 : 1, n = 0;
  KILN_TRY(kiln_attr_int(node, "inverse", 0, &inv));
  KILN_TRY(kiln_attr_int(node, "onesided", 0, &one));
  if (opset < 20) {
    KILN_TRY(kiln_attr_int(node, "axis", 1, &ax));
  } else if (axis) {
    KILN_TRY(kiln_tensor_read_ints("DFT", "axis", axis, &ax, 1, &n));
    if (n != 1) return kiln_make_status(KILN_INVALID_ARGUMENT, "DFT: 'axis' must hold one value");
  }
  int32_t r = xs->rank;
  if (r < 2) return kiln_make_status(KILN_INVALID_ARGUMENT, "DFT: input has rank %d, expected >= 2", (int)r);
  if (ax < -r || ax > r - 2 || ax == -1) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "DFT: axis %lld is outside [-%d, -2] and [0, %d]", (long long)ax, (int)r,
                            (int)(r - 2));
  }
  d->axis = (int32_t)(ax < 0 ? ax + r : ax);
  int64_t last = xs->dims[r - 1], size = xs->dims[d->axis];
  if (last != 1 && last != 2) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "DFT: the input's last dim is %lld, expected 1 (real) or 2 (complex)",
                            (long long)last);
  }
  d->complex_in = last == 2;
  d->length = size;
  if (len) {
    KILN_TRY(kiln_tensor_read_ints("DFT", "dft_length", len, &d->length, 1, &n));
    if (n != 1) return kiln_make_status(KILN_INVALID_ARGUMENT, "DFT: 'dft_length' must hold one value");
  }
  if (d->length < 1 || d->length > ((int64_t)1 << 24)) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "DFT: length %lld is out of range [1, 2^24]",
                            (long long)d->length);
  }
  d->inverse = inv != 0;
  if (one && d->inverse) {
    return kiln_make_status(KILN_UNSUPPORTED, "DFT: onesided inverse transforms are not supported");
  }
  d->n_out = one ? d->length / 2 + 1 : d->length;
  d->n_in = size < d->length ? size : d->length;
  return NULL;
}

/* dft_length is input 1; axis is input 2 from opset 20. */
static const kiln_array_t* opt_value(const kiln_infer_t* ctx, int32_t i) {
  return kiln_tensor_in(ctx, i) ? kiln_tensor_value(ctx, i) : NULL;
}

kiln_status_t kiln_tensor_dft_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  if (x->dtype != KILN_DTYPE_UNDEFINED && x->dtype != KILN_DTYPE_F32 && x->dtype != KILN_DTYPE_F16) {
    return kiln_make_status(KILN_UNSUPPORTED, "DFT: input of %s is not supported",
                            kiln_dtype_name(x->dtype));
  }
  int32_t r = x->shape.rank;
  if (r < 0) {
    kiln_infer_set(ctx, 0, x->dtype, &x->shape);
    return NULL;
  }
  for (int32_t i = 1; i <= (ctx->opset >= 20 ? 2 : 1); ++i) {
    if (kiln_tensor_in(ctx, i) && !kiln_tensor_value(ctx, i)) {
      /* dft_length or axis known only at run time: the output's dims are
       * unknown (the lowering needs them constant). */
      kiln_shape_t out = kiln_tensor_unknown_rank(r);
      out.dims[r - 1] = 2;
      kiln_infer_set(ctx, 0, x->dtype, &out);
      return NULL;
    }
  }
  dft_t d;
  KILN_TRY(kiln_dft_params(ctx->node, ctx->opset, &x->shape, opt_value(ctx, 1),
                           ctx->opset >= 20 ? opt_value(ctx, 2) : NULL, &d));
  kiln_shape_t out = x->shape;
  out.dims[d.axis] = d.n_out;
  out.dims[r - 1] = 2;
  kiln_infer_set(ctx, 0, x->dtype, &out);
  return NULL;
}

static const kiln_array_t* opt_arr(const kiln_ref_ctx_t* ctx, int32_t i) {
  return kiln_tensor_arr(ctx, i);
}

kiln_status_t kiln_tensor_dft_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  kiln_array_t* y = ctx->out[0];
  dft_t d;
  KILN_TRY(kiln_dft_params(ctx->node, ctx->opset, &x->shape, opt_arr(ctx, 1),
                           ctx->opset >= 20 ? opt_arr(ctx, 2) : NULL, &d));
  int32_t r = x->shape.rank;
  if (y->shape.rank != r || y->dtype != x->dtype || y->shape.dims[d.axis] != d.n_out ||
      y->shape.dims[r - 1] != 2) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "DFT: output shape mismatch");
  }
  /* [outer, axis, inner, last] views of input and output. */
  int64_t outer = 1, inner = 1;
  for (int32_t k = 0; k < d.axis; ++k) outer *= x->shape.dims[k];
  for (int32_t k = d.axis + 1; k < r - 1; ++k) inner *= x->shape.dims[k];
  const int64_t size = x->shape.dims[d.axis], lx = d.complex_in ? 2 : 1, L = d.length;
  const double sg = d.inverse ? 1.0 : -1.0, scale = d.inverse ? 1.0 / (double)L : 1.0;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      for (int64_t k = 0; k < d.n_out; ++k) {
        double re = 0.0, im = 0.0;
        for (int64_t n = 0; n < d.n_in; ++n) {
          int64_t src = ((o * size + n) * inner + i) * lx;
          double xr = kiln_load_f64(x->dtype, x->data, (size_t)src);
          double xi = d.complex_in ? kiln_load_f64(x->dtype, x->data, (size_t)src + 1) : 0.0;
          double th = 2.0 * M_PI * (double)((k * n) % L) / (double)L;
          double cs = cos(th), sn = sg * sin(th);
          re += xr * cs - xi * sn;
          im += xr * sn + xi * cs;
        }
        int64_t dst = ((o * d.n_out + k) * inner + i) * 2;
        kiln_store_f64(y->dtype, y->data, (size_t)dst, re * scale);
        kiln_store_f64(y->dtype, y->data, (size_t)dst + 1, im * scale);
      }
    }
  }
  return NULL;
}

/* ---- STFT ------------------------------------------------------------------ */

kiln_status_t kiln_stft_params(const kiln_node_t* node, const kiln_shape_t* xs, const kiln_array_t* step,
                               const kiln_shape_t* window, const kiln_array_t* flen, stft_t* p) {
  memset(p, 0, sizeof *p);
  int64_t one = 1, n = 0;
  KILN_TRY(kiln_attr_int(node, "onesided", 1, &one));
  if (xs->rank != 3 || (xs->dims[2] != 1 && xs->dims[2] != 2)) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "STFT: signal must be [batch, length, 1 or 2]");
  }
  p->complex_in = xs->dims[2] == 2;
  KILN_TRY(kiln_tensor_read_ints("STFT", "frame_step", step, &p->step, 1, &n));
  if (n != 1 || p->step < 1) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "STFT: frame_step must be one value >= 1");
  }
  p->length = xs->dims[1];
  if (window) {
    if (window->rank != 1) return kiln_make_status(KILN_INVALID_ARGUMENT, "STFT: window must be 1-D");
    p->length = window->dims[0];
  }
  if (flen) {
    KILN_TRY(kiln_tensor_read_ints("STFT", "frame_length", flen, &p->length, 1, &n));
    if (n != 1) return kiln_make_status(KILN_INVALID_ARGUMENT, "STFT: frame_length must be one value");
    if (window && window->dims[0] != p->length) {
      return kiln_make_status(KILN_INVALID_ARGUMENT, "STFT: window has %lld values, frame_length is %lld",
                              (long long)window->dims[0], (long long)p->length);
    }
  }
  if (p->length < 1 || p->length > xs->dims[1] || p->length > ((int64_t)1 << 24)) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "STFT: frame length %lld is outside [1, %lld]",
                            (long long)p->length, (long long)xs->dims[1]);
  }
  p->frames = 1 + (xs->dims[1] - p->length) / p->step;
  p->bins = one ? p->length / 2 + 1 : p->length;
  return NULL;
}

kiln_status_t kiln_tensor_stft_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  if (x->dtype != KILN_DTYPE_UNDEFINED && x->dtype != KILN_DTYPE_F32 && x->dtype != KILN_DTYPE_F16) {
    return kiln_make_status(KILN_UNSUPPORTED, "STFT: signal of %s is not supported", kiln_dtype_name(x->dtype));
  }
  const kiln_tensor_t* w = kiln_tensor_in(ctx, 2);
  const kiln_array_t* sv = kiln_tensor_value(ctx, 1);
  const kiln_array_t* lv = kiln_tensor_in(ctx, 3) ? kiln_tensor_value(ctx, 3) : NULL;
  kiln_shape_t out = kiln_tensor_unknown_rank(4);
  out.dims[3] = 2;
  if (x->shape.rank == 3) out.dims[0] = x->shape.dims[0];
  if (!sv || (kiln_tensor_in(ctx, 3) && !lv) || !kiln_shape_is_static(&x->shape) ||
      (w && !kiln_shape_is_static(&w->shape))) {
    kiln_infer_set(ctx, 0, x->dtype, &out); /* frames/bins known at run time */
    return NULL;
  }
  stft_t p;
  KILN_TRY(kiln_stft_params(ctx->node, &x->shape, sv, w ? &w->shape : NULL, lv, &p));
  out.dims[1] = p.frames;
  out.dims[2] = p.bins;
  kiln_infer_set(ctx, 0, x->dtype, &out);
  return NULL;
}

kiln_status_t kiln_tensor_stft_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  const kiln_array_t* w = kiln_tensor_arr(ctx, 2);
  kiln_array_t* y = ctx->out[0];
  stft_t p;
  KILN_TRY(kiln_stft_params(ctx->node, &x->shape, ctx->in[1], w ? &w->shape : NULL, kiln_tensor_arr(ctx, 3), &p));
  const int64_t B = x->shape.dims[0], len = x->shape.dims[1], lx = p.complex_in ? 2 : 1, L = p.length;
  if (y->shape.rank != 4 || y->dtype != x->dtype || y->shape.dims[0] != B || y->shape.dims[1] != p.frames ||
      y->shape.dims[2] != p.bins || y->shape.dims[3] != 2 || (w && w->dtype != x->dtype)) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "STFT: output shape mismatch");
  }
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t f = 0; f < p.frames; ++f) {
      for (int64_t k = 0; k < p.bins; ++k) {
        double re = 0.0, im = 0.0;
        for (int64_t n = 0; n < L; ++n) {
          int64_t src = (b * len + f * p.step + n) * lx;
          double wt = w ? kiln_load_f64(w->dtype, w->data, (size_t)n) : 1.0;
          double xr = wt * kiln_load_f64(x->dtype, x->data, (size_t)src);
          double xi = p.complex_in ? wt * kiln_load_f64(x->dtype, x->data, (size_t)src + 1) : 0.0;
          double th = 2.0 * M_PI * (double)((k * n) % L) / (double)L;
          double cs = cos(th), sn = -sin(th);
          re += xr * cs - xi * sn;
          im += xr * sn + xi * cs;
        }
        int64_t dst = ((b * p.frames + f) * p.bins + k) * 2;
        kiln_store_f64(y->dtype, y->data, (size_t)dst, re);
        kiln_store_f64(y->dtype, y->data, (size_t)dst + 1, im);
      }
    }
  }
  return NULL;
}
