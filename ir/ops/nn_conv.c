/* Conv and ConvTranspose: shape inference with hard attribute validation
 * (BAD_INPUTS rows 10 and 12) and im2col/col2im + blocked GEMM reference
 * kernels over 1 to 3 spatial dims.
 */
#include <string.h>

#include "ir/ops/nn_quant.h"

typedef struct conv_s {
  kiln_nn_window_t win;
  int64_t group;
  kiln_shape_t out;  /* may hold unknown dims at load time */
} conv_t;

static bool known(int64_t d) { return kiln_dim_known(d); }

/* Validates the attributes and shapes shared by Conv and ConvTranspose and
 * parses the window. *nsp_out = -1 when the rank is unknown (output shape
 * unknown, nothing else to check). */
static kiln_status_t conv_common(const kiln_node_t* node, const char* op,
                                 const kiln_shape_t* x, const char* xname,
                                 const kiln_shape_t* w, const char* wname,
                                 conv_t* c, int32_t* nsp_out) {
  *nsp_out = -1;
  int32_t rank = x->rank >= 0 ? x->rank : w->rank;
  if (x->rank >= 0 && x->rank < 3) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: input '%s' has rank %d, expected >= 3 "
                            "(N, C, spatial...)",
                            op, xname, (int)x->rank);
  }
  if (w->rank >= 0 && w->rank < 3) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: weight '%s' has rank %d, expected >= 3", op,
                            wname, (int)w->rank);
  }
  if (x->rank >= 0 && w->rank >= 0 && x->rank != w->rank) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: weight '%s' has rank %d but input '%s' has "
                            "rank %d",
                            op, wname, (int)w->rank, xname, (int)x->rank);
  }
  KILN_RETURN_IF_ERROR(kiln_attr_int(node, "group", 1, &c->group));
  if (c->group < 1) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: group is %lld, must be >= 1", op,
                            (long long)c->group);
  }
  /* More groups than channels (possible with 0 channels) would only make
   * the kernels loop over empty groups. */
  if (x->rank >= 2 && known(x->dims[1]) && c->group > 1 &&
      c->group > x->dims[1]) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: group %lld exceeds the %lld input channels of "
                            "'%s'",
                            op, (long long)c->group, (long long)x->dims[1],
                            xname);
  }
  if (rank < 0) {
    /* Rank from kernel_shape when the attribute is there. */
    const int64_t* ks = NULL;
    int64_t kn = -1;
    KILN_RETURN_IF_ERROR(kiln_attr_ints(node, "kernel_shape", &ks, &kn));
    if (kn < 0) return NULL;
    rank = (int32_t)kn + 2;
  }
  int32_t nsp = rank - 2;
  if (nsp > KILN_NN_MAX_SPATIAL) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "%s: %d spatial dims are not supported (at most %d)",
                            op, (int)nsp, KILN_NN_MAX_SPATIAL);
  }
  KILN_RETURN_IF_ERROR(kiln_nn_window_parse(node, op, nsp, false, &c->win));

  /* kernel_shape must agree with the weight's spatial dims (row 10). */
  if (w->rank >= 0) {
    bool all_known = true;
    for (int32_t i = 0; i < nsp; ++i) {
      int64_t d = w->dims[2 + i];
      if (!known(d)) { all_known = false; continue; }
      if (d == 0 || d >= ((int64_t)1 << 31)) {
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "%s: weight '%s' spatial dim %d is %lld, must "
                                "be in [1, 2^31)",
                                op, wname, (int)i, (long long)d);
      }
    }
    if (c->win.has_kernel) {
      for (int32_t i = 0; i < nsp; ++i) {
        int64_t d = w->dims[2 + i];
        if (known(d) && d != c->win.kernel[i]) {
          char a[128], b[128];
          int64_t wsp[KILN_MAX_RANK];
          for (int32_t j = 0; j < nsp; ++j) wsp[j] = w->dims[2 + j];
          kiln_nn_fmt_ints(c->win.kernel, nsp, a, sizeof a);
          if (all_known) {
            kiln_nn_fmt_ints(wsp, nsp, b, sizeof b);
            return kiln_make_status(KILN_INVALID_ARGUMENT,
                                    "%s: kernel_shape %s disagrees with weight "
                                    "'%s' spatial dims %s",
                                    op, a, wname, b);
          }
          return kiln_make_status(KILN_INVALID_ARGUMENT,
                                  "%s: kernel_shape %s disagrees with weight "
                                  "'%s' spatial dim %d = %lld",
                                  op, a, wname, (int)i, (long long)d);
        }
      }
    } else {
      for (int32_t i = 0; i < nsp; ++i) c->win.kernel[i] = w->dims[2 + i];
    }
  } else if (!c->win.has_kernel) {
    for (int32_t i = 0; i < nsp; ++i) c->win.kernel[i] = KILN_DIM_UNKNOWN;
  }
  *nsp_out = nsp;
  return NULL;
}

/* Conv output shape and checks. x/w/b shapes may be partially unknown. */
static kiln_status_t conv_setup(const kiln_node_t* node, const char* op,
                                const kiln_shape_t* x, const char* xname,
                                const kiln_shape_t* w, const char* wname,
                                const kiln_shape_t* b, conv_t* c) {
  int32_t nsp;
  KILN_RETURN_IF_ERROR(conv_common(node, op, x, xname, w, wname, c, &nsp));
  if (nsp < 0) {
    c->out = kiln_shape_unknown();
    return NULL;
  }
  int64_t C = x->rank >= 0 ? x->dims[1] : KILN_DIM_UNKNOWN;
  int64_t M = w->rank >= 0 ? w->dims[0] : KILN_DIM_UNKNOWN;
  int64_t Cg = w->rank >= 0 ? w->dims[1] : KILN_DIM_UNKNOWN;
  int64_t G = c->group;
  if (known(C) && C % G != 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: group %lld does not divide the %lld input "
                            "channels of '%s'",
                            op, (long long)G, (long long)C, xname);
  }
  if (known(M) && M % G != 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: group %lld does not divide the %lld output "
                            "channels (dim 0) of weight '%s'",
                            op, (long long)G, (long long)M, wname);
  }
  if (known(C) && known(Cg) && Cg * G != C) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: weight '%s' has %lld input channels (dim 1), "
                            "expected %lld = input '%s' channels %lld / group "
                            "%lld",
                            op, wname, (long long)Cg, (long long)(C / G), xname,
                            (long long)C, (long long)G);
  }
  if (b && b->rank >= 0) {
    if (b->rank != 1 || (known(b->dims[0]) && known(M) && b->dims[0] != M)) {
      char bs[64];
      kiln_shape_format(b, bs, sizeof bs);
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: bias has shape %s, expected [%lld] (the "
                              "output channels of weight '%s')",
                              op, bs, (long long)M, wname);
    }
  }
  c->out.rank = nsp + 2;
  c->out.dims[0] = x->rank >= 0 ? x->dims[0] : KILN_DIM_UNKNOWN;
  c->out.dims[1] = M;
  for (int32_t i = 0; i < nsp; ++i) {
    int64_t in = x->rank >= 0 ? x->dims[2 + i] : KILN_DIM_UNKNOWN;
    bool same = c->win.auto_pad == KILN_NN_PAD_SAME_UPPER ||
                c->win.auto_pad == KILN_NN_PAD_SAME_LOWER;
    if (known(in) && (known(c->win.kernel[i]) || same)) {
      if (!known(c->win.kernel[i])) c->win.kernel[i] = 1; /* pads unused */
      KILN_RETURN_IF_ERROR(
          kiln_nn_window_out(&c->win, op, i, in, false, &c->out.dims[2 + i]));
    } else {
      c->out.dims[2 + i] = KILN_DIM_UNKNOWN;
    }
  }
  return NULL;
}

kiln_status_t kiln_nn_conv_shape(const kiln_node_t* node, const char* op, const kiln_shape_t* x,
                                 const char* xname, const kiln_shape_t* w, const char* wname,
                                 const kiln_shape_t* b, kiln_nn_window_t* win, int64_t* group,
                                 kiln_shape_t* out) {
  conv_t c;
  memset(&c, 0, sizeof c);
  KILN_RETURN_IF_ERROR(conv_setup(node, op, x, xname, w, wname, b, &c));
  *win = c.win;
  *group = c.group;
  *out = c.out;
  return NULL;
}

static kiln_status_t check_same_dtype(const kiln_infer_t* ctx, const char* op,
                                      int32_t i) {
  if (i >= ctx->n_in || !ctx->in[i]) return NULL;
  kiln_dtype_t a = ctx->in[0]->dtype, b = ctx->in[i]->dtype;
  if (a != KILN_DTYPE_UNDEFINED && b != KILN_DTYPE_UNDEFINED && a != b) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: input '%s' has dtype %s but '%s' has %s", op,
                            kiln_nn_in_name(ctx, i), kiln_dtype_name(b),
                            kiln_nn_in_name(ctx, 0), kiln_dtype_name(a));
  }
  return NULL;
}

kiln_status_t kiln_nn_conv_infer(kiln_infer_t* ctx) {
  for (int32_t i = 0; i < ctx->n_in && i < 3; ++i) {
    KILN_RETURN_IF_ERROR(kiln_nn_require_float(ctx, "Conv", i));
    KILN_RETURN_IF_ERROR(check_same_dtype(ctx, "Conv", i));
  }
  const kiln_tensor_t* b = ctx->n_in > 2 ? ctx->in[2] : NULL;
  conv_t c;
  KILN_RETURN_IF_ERROR(conv_setup(ctx->node, "Conv", &ctx->in[0]->shape,
                                  kiln_nn_in_name(ctx, 0), &ctx->in[1]->shape,
                                  kiln_nn_in_name(ctx, 1),
                                  b ? &b->shape : NULL, &c));
  kiln_infer_set(ctx, 0, ctx->in[0]->dtype, &c.out);
  return NULL;
}

int64_t kiln_nn_conv_flops(const kiln_infer_t* ctx) {
  const kiln_shape_t* w = &ctx->in[1]->shape;
  if (!ctx->out[0] || !kiln_shape_is_static(&ctx->out[0]->shape) ||
      !kiln_shape_is_static(w)) {
    return 0;
  }
  /* 2 * MACs: every output element takes C/group * prod(kernel) MACs. */
  return kiln_nn_mul_sat(2 * kiln_shape_count(&ctx->out[0]->shape),
                         kiln_nn_prod(w, 1, w->rank));
}

/* im2col for one group of one image: col[(c, kd, kh, kw)][od, oh, ow]. */
static void im2col(const float* x, int64_t channels, const kiln_nn_win3_t* w,
                   float* col) {
  const int64_t P = w->out[0] * w->out[1] * w->out[2];
  const int64_t in_plane = w->in[0] * w->in[1] * w->in[2];
  float* row = col;
  for (int64_t c = 0; c < channels; ++c) {
    const float* xc = x + c * in_plane;
    for (int64_t kd = 0; kd < w->k[0]; ++kd)
      for (int64_t kh = 0; kh < w->k[1]; ++kh)
        for (int64_t kw = 0; kw < w->k[2]; ++kw, row += P) {
          const int64_t offw = kw * w->d[2] - w->p[2];
          int64_t lo, hi;
          kiln_nn_valid_range(offw, w->s[2], w->in[2], w->out[2], &lo, &hi);
          for (int64_t od = 0; od < w->out[0]; ++od) {
            const int64_t id = od * w->s[0] + kd * w->d[0] - w->p[0];
            for (int64_t oh = 0; oh < w->out[1]; ++oh) {
              const int64_t ih = oh * w->s[1] + kh * w->d[1] - w->p[1];
              float* dst = row + (od * w->out[1] + oh) * w->out[2];
              if (id < 0 || id >= w->in[0] || ih < 0 || ih >= w->in[1]) {
                memset(dst, 0, sizeof(float) * (size_t)w->out[2]);
                continue;
              }
              const float* src = xc + (id * w->in[1] + ih) * w->in[2];
              const int64_t sw = w->s[2];
              for (int64_t ow = 0; ow < lo; ++ow) dst[ow] = 0.0f;
              if (sw == 1) {
                for (int64_t ow = lo; ow < hi; ++ow) dst[ow] = src[ow + offw];
              } else {
                for (int64_t ow = lo; ow < hi; ++ow)
                  dst[ow] = src[ow * sw + offw];
              }
              for (int64_t ow = hi; ow < w->out[2]; ++ow) dst[ow] = 0.0f;
            }
          }
        }
  }
}

static kiln_status_t conv_compute(const kiln_ref_ctx_t* ctx, const conv_t* c,
                                  const kiln_shape_t* xs, const float* x,
                                  const kiln_shape_t* ws, const float* wt,
                                  const float* bias, float* y) {
  const int32_t nsp = xs->rank - 2;
  kiln_nn_win3_t w3;
  kiln_nn_win3(&c->win, xs->dims + 2, c->out.dims + 2, &w3);
  const int64_t N = xs->dims[0], C = xs->dims[1], M = ws->dims[0];
  const int64_t G = c->group, Cg = C / G, Mg = M / G;
  const int64_t ks = kiln_nn_prod(ws, 2, ws->rank);
  const int64_t Kc = Cg * ks;
  const int64_t P = kiln_nn_prod(&c->out, 2, c->out.rank);
  const int64_t in_plane = kiln_nn_prod(xs, 2, xs->rank);

  /* A 1x1 kernel with unit stride and no padding reads the input as is. */
  bool direct = true;
  for (int32_t i = 0; i < nsp; ++i) {
    if (c->win.kernel[i] != 1 || c->win.stride[i] != 1 ||
        c->win.pad_begin[i] != 0 || c->win.pad_end[i] != 0)
      direct = false;
  }
  float* col = NULL;
  if (!direct && P > 0 && Kc > INT64_MAX / P) {
    return kiln_make_status(KILN_LIMIT_EXCEEDED,
                            "Conv: im2col buffer of %lld x %lld elements is "
                            "too large",
                            (long long)Kc, (long long)P);
  }
  if (!direct && P > 0 && Kc > 0) {
    KILN_RETURN_IF_ERROR(kiln_nn_scratch(ctx, Kc * P, sizeof(float),
                                         "Conv im2col buffer", (void**)&col));
  }
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t g = 0; g < G; ++g) {
      const float* xg = x + (n * C + g * Cg) * in_plane;
      float* yg = y + (n * M + g * Mg) * P;
      for (int64_t m = 0; m < Mg; ++m) {
        float bv = bias ? bias[g * Mg + m] : 0.0f;
        float* yr = yg + m * P;
        for (int64_t p = 0; p < P; ++p) yr[p] = bv;
      }
      if (P == 0 || Kc == 0) continue;
      const float* bmat = xg;
      if (!direct) {
        im2col(xg, Cg, &w3, col);
        bmat = col;
      }
      kiln_nn_sgemm(Mg, P, Kc, wt + g * Mg * Kc, Kc, 1, bmat, P, yg, P);
    }
  }
  kiln_nn_scratch_free(ctx, col);
  return NULL;
}

typedef kiln_status_t (*conv_compute_fn)(const kiln_ref_ctx_t* ctx, const conv_t* c,
                                         const kiln_shape_t* xs, const float* x,
                                         const kiln_shape_t* ws, const float* wt,
                                         const float* bias, float* y);

/* Loads X, W and B as f32 (converting where they are stored otherwise), runs
 * `compute` into the output and stores it back; every scratch copy is freed
 * on every path. Conv and ConvTranspose share it. */
static kiln_status_t conv_run_f32(const kiln_ref_ctx_t* ctx, const conv_t* c,
                                  conv_compute_fn compute) {
  const kiln_array_t* X = ctx->in[0];
  const kiln_array_t* W = ctx->in[1];
  const kiln_array_t* B = ctx->n_in > 2 ? ctx->in[2] : NULL;
  const float *x, *w, *b = NULL;
  float *xs = NULL, *wsc = NULL, *bs = NULL, *y = NULL, *ys = NULL;
  kiln_status_t st = kiln_nn_f32_load(ctx, X, &x, &xs);
  if (!st) st = kiln_nn_f32_load(ctx, W, &w, &wsc);
  if (!st && B) st = kiln_nn_f32_load(ctx, B, &b, &bs);
  if (!st) st = kiln_nn_f32_dest(ctx, ctx->out[0], &y, &ys);
  if (!st) st = compute(ctx, c, &X->shape, x, &W->shape, w, b, y);
  if (!st) {
    kiln_nn_f32_store(ctx, ctx->out[0], ys);
  } else {
    kiln_nn_scratch_free(ctx, ys);
  }
  kiln_nn_scratch_free(ctx, xs);
  kiln_nn_scratch_free(ctx, wsc);
  kiln_nn_scratch_free(ctx, bs);
  return st;
}

kiln_status_t kiln_nn_conv_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* X = ctx->in[0];
  const kiln_array_t* W = ctx->in[1];
  const kiln_array_t* B = ctx->n_in > 2 ? ctx->in[2] : NULL;
  conv_t c;
  KILN_RETURN_IF_ERROR(conv_setup(ctx->node, "Conv", &X->shape, "X", &W->shape, "W",
                                  B ? &B->shape : NULL, &c));
  if (!kiln_shape_equal(&c.out, &ctx->out[0]->shape)) {
    return kiln_make_status(KILN_INTERNAL, "Conv: output shape mismatch");
  }
  return conv_run_f32(ctx, &c, conv_compute);
}

/* ---- ConvTranspose ------------------------------------------------------ */

static int64_t floor_half(int64_t a) { return a >= 0 ? a / 2 : -((1 - a) / 2); }

static kiln_status_t convt_setup(const kiln_node_t* node,
                                 const kiln_shape_t* x, const char* xname,
                                 const kiln_shape_t* w, const char* wname,
                                 const kiln_shape_t* b, conv_t* c) {
  const char* op = "ConvTranspose";
  int32_t nsp;
  KILN_RETURN_IF_ERROR(conv_common(node, op, x, xname, w, wname, c, &nsp));
  if (nsp < 0) {
    c->out = kiln_shape_unknown();
    return NULL;
  }
  int64_t C = x->rank >= 0 ? x->dims[1] : KILN_DIM_UNKNOWN;
  int64_t WC = w->rank >= 0 ? w->dims[0] : KILN_DIM_UNKNOWN;
  int64_t Mg = w->rank >= 0 ? w->dims[1] : KILN_DIM_UNKNOWN;
  int64_t G = c->group;
  if (known(C) && C % G != 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "ConvTranspose: group %lld does not divide the "
                            "%lld input channels of '%s'",
                            (long long)G, (long long)C, xname);
  }
  if (known(C) && known(WC) && WC != C) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "ConvTranspose: weight '%s' has %lld input channels "
                            "(dim 0) but input '%s' has %lld",
                            wname, (long long)WC, xname, (long long)C);
  }
  int64_t M = known(Mg) ? Mg * G : KILN_DIM_UNKNOWN;
  if (b && b->rank >= 0) {
    if (b->rank != 1 || (known(b->dims[0]) && known(M) && b->dims[0] != M)) {
      char bs[64];
      kiln_shape_format(b, bs, sizeof bs);
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "ConvTranspose: bias has shape %s, expected "
                              "[%lld] (weight '%s' dim 1 * group)",
                              bs, (long long)M, wname);
    }
  }
  /* output_padding and output_shape. */
  int64_t opad[KILN_MAX_RANK] = {0};
  const int64_t* v = NULL;
  int64_t n = -1;
  KILN_RETURN_IF_ERROR(kiln_attr_ints(node, "output_padding", &v, &n));
  if (n >= 0) {
    if (n != nsp) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "ConvTranspose: output_padding has %lld values, "
                              "expected %d",
                              (long long)n, (int)nsp);
    }
    for (int32_t i = 0; i < nsp; ++i) {
      if (v[i] < 0 || v[i] >= ((int64_t)1 << 31)) {
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "ConvTranspose: output_padding[%d] is %lld, "
                                "must be in [0, 2^31)",
                                (int)i, (long long)v[i]);
      }
      opad[i] = v[i];
    }
  }
  const int64_t* oshape = NULL;
  int64_t on = -1;
  KILN_RETURN_IF_ERROR(kiln_attr_ints(node, "output_shape", &oshape, &on));
  if (on >= 0) {
    /* Some exporters spell the full N, C, spatial... shape. */
    if (on == nsp + 2) oshape += 2, on = nsp;
    if (on != nsp) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "ConvTranspose: output_shape has %lld values, "
                              "expected %d",
                              (long long)on, (int)nsp);
    }
    for (int32_t i = 0; i < nsp; ++i) {
      if (oshape[i] < 1 || oshape[i] >= ((int64_t)1 << 31)) {
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "ConvTranspose: output_shape[%d] is %lld, "
                                "must be in [1, 2^31)",
                                (int)i, (long long)oshape[i]);
      }
    }
  }
  c->out.rank = nsp + 2;
  c->out.dims[0] = x->rank >= 0 ? x->dims[0] : KILN_DIM_UNKNOWN;
  c->out.dims[1] = M;
  bool same = c->win.auto_pad == KILN_NN_PAD_SAME_UPPER ||
              c->win.auto_pad == KILN_NN_PAD_SAME_LOWER;
  for (int32_t i = 0; i < nsp; ++i) {
    int64_t in = x->rank >= 0 ? x->dims[2 + i] : KILN_DIM_UNKNOWN;
    int64_t k = c->win.kernel[i], s = c->win.stride[i], d = c->win.dilation[i];
    int64_t o;
    if (!known(in) || !known(k)) {
      c->out.dims[2 + i] = on >= 0 ? oshape[i]
                           : (same && known(in)) ? in * s : KILN_DIM_UNKNOWN;
      continue;
    }
    if (in >= ((int64_t)1 << 31)) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "ConvTranspose: input '%s' spatial dim %d is "
                              "%lld, too large",
                              xname, (int)i, (long long)in);
    }
    int64_t full = s * (in - 1) + opad[i] + (k - 1) * d + 1;
    if (on >= 0 || same) {
      /* Pads follow from the requested output size (ONNX spec). */
      o = on >= 0 ? oshape[i] : in * s;
      if (on >= 0 || !c->win.has_pads) {
        int64_t total = full - o;
        if (!same && total < 0) {
          /* A larger output_shape leaves the extra elements at the end
           * (bias only), as in the ONNX reference and onnxruntime. */
          total = 0;
        }
        /* SAME splits a negative total too (the full result is centred in
         * the in*stride output), rounding like the ONNX reference. */
        int64_t half = floor_half(total);
        if (c->win.auto_pad == KILN_NN_PAD_SAME_UPPER) {
          c->win.pad_begin[i] = half;
          c->win.pad_end[i] = total - half;
        } else {
          c->win.pad_begin[i] = total - half;
          c->win.pad_end[i] = half;
        }
      }
    } else {
      if (c->win.auto_pad == KILN_NN_PAD_VALID)
        c->win.pad_begin[i] = c->win.pad_end[i] = 0;
      o = full - c->win.pad_begin[i] - c->win.pad_end[i];
    }
    if (o <= 0) {
      return kiln_make_status(
          KILN_INVALID_ARGUMENT,
          "ConvTranspose: output spatial dim %d would be %lld (input %lld, "
          "kernel %lld, dilation %lld, stride %lld, pads %lld+%lld)",
          (int)i, (long long)o, (long long)in, (long long)k, (long long)d,
          (long long)s, (long long)c->win.pad_begin[i],
          (long long)c->win.pad_end[i]);
    }
    c->out.dims[2 + i] = o;
  }
  return NULL;
}

kiln_status_t kiln_nn_conv_transpose_infer(kiln_infer_t* ctx) {
  for (int32_t i = 0; i < ctx->n_in && i < 3; ++i) {
    KILN_RETURN_IF_ERROR(kiln_nn_require_float(ctx, "ConvTranspose", i));
    KILN_RETURN_IF_ERROR(check_same_dtype(ctx, "ConvTranspose", i));
  }
  const kiln_tensor_t* b = ctx->n_in > 2 ? ctx->in[2] : NULL;
  conv_t c;
  KILN_RETURN_IF_ERROR(convt_setup(ctx->node, &ctx->in[0]->shape,
                                   kiln_nn_in_name(ctx, 0), &ctx->in[1]->shape,
                                   kiln_nn_in_name(ctx, 1),
                                   b ? &b->shape : NULL, &c));
  kiln_infer_set(ctx, 0, ctx->in[0]->dtype, &c.out);
  return NULL;
}

int64_t kiln_nn_conv_transpose_flops(const kiln_infer_t* ctx) {
  const kiln_shape_t* x = &ctx->in[0]->shape;
  const kiln_shape_t* w = &ctx->in[1]->shape;
  if (!kiln_shape_is_static(x) || !kiln_shape_is_static(w)) return 0;
  /* Every input element feeds M/group * prod(kernel) MACs. */
  return kiln_nn_mul_sat(2 * kiln_shape_count(x), kiln_nn_prod(w, 1, w->rank));
}

/* Adds col[(m, kd, kh, kw)][id, ih, iw] into y[m][od, oh, ow] where
 * o = i*stride + k*dilation - pad_begin (the transpose of im2col). */
static void col2im(const float* col, int64_t channels, const kiln_nn_win3_t* w,
                   float* y) {
  /* Here w->in is the ConvTranspose input (the "columns") and w->out its
   * output. */
  const int64_t P = w->in[0] * w->in[1] * w->in[2];
  const int64_t out_plane = w->out[0] * w->out[1] * w->out[2];
  const float* row = col;
  for (int64_t c = 0; c < channels; ++c) {
    float* yc = y + c * out_plane;
    for (int64_t kd = 0; kd < w->k[0]; ++kd)
      for (int64_t kh = 0; kh < w->k[1]; ++kh)
        for (int64_t kw = 0; kw < w->k[2]; ++kw, row += P) {
          const int64_t offw = kw * w->d[2] - w->p[2];
          int64_t lo, hi;
          /* iw range with 0 <= iw*s + offw < out[2]. */
          kiln_nn_valid_range(offw, w->s[2], w->out[2], w->in[2], &lo, &hi);
          for (int64_t id = 0; id < w->in[0]; ++id) {
            const int64_t od = id * w->s[0] + kd * w->d[0] - w->p[0];
            if (od < 0 || od >= w->out[0]) continue;
            for (int64_t ih = 0; ih < w->in[1]; ++ih) {
              const int64_t oh = ih * w->s[1] + kh * w->d[1] - w->p[1];
              if (oh < 0 || oh >= w->out[1]) continue;
              const float* src = row + (id * w->in[1] + ih) * w->in[2];
              float* dst = yc + (od * w->out[1] + oh) * w->out[2];
              const int64_t sw = w->s[2];
              for (int64_t iw = lo; iw < hi; ++iw) dst[iw * sw + offw] += src[iw];
            }
          }
        }
  }
}

static kiln_status_t convt_compute(const kiln_ref_ctx_t* ctx, const conv_t* c,
                                   const kiln_shape_t* xs, const float* x,
                                   const kiln_shape_t* ws, const float* wt,
                                   const float* bias, float* y) {
  kiln_nn_win3_t w3;
  kiln_nn_win3(&c->win, xs->dims + 2, c->out.dims + 2, &w3);
  const int64_t N = xs->dims[0], C = xs->dims[1];
  const int64_t G = c->group, Cg = C / G, Mg = ws->dims[1], M = Mg * G;
  const int64_t ks = kiln_nn_prod(ws, 2, ws->rank);
  const int64_t R = Mg * ks; /* rows of col */
  const int64_t P = kiln_nn_prod(xs, 2, xs->rank);
  const int64_t out_plane = kiln_nn_prod(&c->out, 2, c->out.rank);
  float* col = NULL;
  if (P > 0 && R > INT64_MAX / P) {
    return kiln_make_status(KILN_LIMIT_EXCEEDED,
                            "ConvTranspose: column buffer of %lld x %lld "
                            "elements is too large",
                            (long long)R, (long long)P);
  }
  if (R > 0 && P > 0) {
    KILN_RETURN_IF_ERROR(kiln_nn_scratch(ctx, R * P, sizeof(float),
                                         "ConvTranspose column buffer",
                                         (void**)&col));
  }
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t g = 0; g < G; ++g) {
      float* yg = y + (n * M + g * Mg) * out_plane;
      for (int64_t m = 0; m < Mg; ++m) {
        float bv = bias ? bias[g * Mg + m] : 0.0f;
        float* yr = yg + m * out_plane;
        for (int64_t p = 0; p < out_plane; ++p) yr[p] = bv;
      }
      if (!col || Cg == 0) continue;
      /* col[R][P] = Wg^T[R][Cg] * Xg[Cg][P], Wg = W[g*Cg : (g+1)*Cg] viewed
       * as [Cg][R]. */
      memset(col, 0, sizeof(float) * (size_t)(R * P));
      const float* wg = wt + g * Cg * R;
      const float* xg = x + (n * C + g * Cg) * P;
      kiln_nn_sgemm(R, P, Cg, wg, 1, R, xg, P, col, P);
      col2im(col, Mg, &w3, yg);
    }
  }
  kiln_nn_scratch_free(ctx, col);
  return NULL;
}

kiln_status_t kiln_nn_conv_transpose_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* X = ctx->in[0];
  const kiln_array_t* W = ctx->in[1];
  const kiln_array_t* B = ctx->n_in > 2 ? ctx->in[2] : NULL;
  conv_t c;
  KILN_RETURN_IF_ERROR(convt_setup(ctx->node, &X->shape, "X", &W->shape, "W",
                                   B ? &B->shape : NULL, &c));
  if (!kiln_shape_equal(&c.out, &ctx->out[0]->shape)) {
    return kiln_make_status(KILN_INTERNAL,
                            "ConvTranspose: output shape mismatch");
  }
  return conv_run_f32(ctx, &c, convt_compute);
}
