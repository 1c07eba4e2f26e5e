/* MaxPool (with the optional Indices output), AveragePool and
 * LpPool, GlobalAveragePool and GlobalMaxPool over 1 to 3 spatial dims.
 *
 * AveragePool follows the ONNX reference implementation (which generated the
 * backend tests): with count_include_pad=1 the divisor is the full kernel
 * size, including window taps that ceil_mode pushes past the end padding.
 */
#include <math.h>
#include <string.h>

#include "ir/ops/nn_internal.h"

typedef struct pool_s {
  kiln_nn_window_t win;
  int64_t ceil_mode;
  int64_t count_include_pad; /* AveragePool */
  int64_t storage_order;     /* MaxPool */
  kiln_shape_t out;
} pool_t;

static kiln_status_t pool_setup(const kiln_node_t* node, const char* op,
                                int64_t opset, const kiln_shape_t* x,
                                const char* xname, pool_t* p) {
  memset(p, 0, sizeof(*p));
  const int64_t* ks = NULL;
  int64_t kn = -1;
  KILN_RETURN_IF_ERROR(kiln_attr_ints(node, "kernel_shape", &ks, &kn));
  if (kn < 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: required attribute kernel_shape is missing",
                            op);
  }
  if (x->rank >= 0 && x->rank < 3) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: input '%s' has rank %d, expected >= 3 "
                            "(N, C, spatial...)",
                            op, xname, (int)x->rank);
  }
  int32_t nsp = x->rank >= 0 ? x->rank - 2 : (int32_t)kn;
  if (nsp > KILN_NN_MAX_SPATIAL) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "%s: %d spatial dims are not supported (at most %d)",
                            op, (int)nsp, KILN_NN_MAX_SPATIAL);
  }
  KILN_RETURN_IF_ERROR(kiln_nn_window_parse(node, op, nsp, true, &p->win));
  KILN_RETURN_IF_ERROR(kiln_attr_int(node, "ceil_mode", 0, &p->ceil_mode));
  KILN_RETURN_IF_ERROR(
      kiln_attr_int(node, "count_include_pad", 0, &p->count_include_pad));
  KILN_RETURN_IF_ERROR(
      kiln_attr_int(node, "storage_order", 0, &p->storage_order));
  if (p->storage_order != 0 && p->storage_order != 1) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: storage_order is %lld, must be 0 or 1", op,
                            (long long)p->storage_order);
  }
  p->out.rank = nsp + 2;
  p->out.dims[0] = x->rank >= 0 ? x->dims[0] : KILN_DIM_UNKNOWN;
  p->out.dims[1] = x->rank >= 0 ? x->dims[1] : KILN_DIM_UNKNOWN;
  for (int32_t i = 0; i < nsp; ++i) {
    int64_t in = x->rank >= 0 ? x->dims[2 + i] : KILN_DIM_UNKNOWN;
    if (!kiln_dim_known(in)) {
      p->out.dims[2 + i] = KILN_DIM_UNKNOWN;
      continue;
    }
    KILN_RETURN_IF_ERROR(kiln_nn_window_out(&p->win, op, i, in,
                                            p->ceil_mode != 0,
                                            &p->out.dims[2 + i]));
  }
  return NULL;
}

static kiln_status_t pool_dtype(const kiln_infer_t* ctx, const char* op,
                                bool ints_ok) {
  kiln_dtype_t t = ctx->in[0]->dtype;
  if (t == KILN_DTYPE_UNDEFINED || t == KILN_DTYPE_F32 || t == KILN_DTYPE_F16) return NULL;
  if (ints_ok && (t == KILN_DTYPE_I8 || t == KILN_DTYPE_U8)) return NULL;
  return kiln_make_status(KILN_UNSUPPORTED,
                          "%s: input '%s' has dtype %s; %s supports %s", op,
                          kiln_nn_in_name(ctx, 0), kiln_dtype_name(t), op,
                          ints_ok ? "f32, f16, i8 and u8" : "f32 and f16");
}

static int64_t pool_flops(const kiln_infer_t* ctx) {
  if (!ctx->out[0] || !kiln_shape_is_static(&ctx->out[0]->shape)) return 0;
  const int64_t* ks = NULL;
  int64_t kn = -1;
  kiln_status_t st = kiln_attr_ints(ctx->node, "kernel_shape", &ks, &kn);
  if (st) {
    kiln_status_free(st);
    return 0;
  }
  int64_t taps = 1;
  for (int64_t i = 0; i < kn; ++i) taps = kiln_nn_mul_sat(taps, ks[i]);
  return kiln_nn_mul_sat(kiln_shape_count(&ctx->out[0]->shape), taps);
}

/* ---- MaxPool ------------------------------------------------------------ */

kiln_status_t kiln_nn_maxpool_infer(kiln_infer_t* ctx) {
  KILN_RETURN_IF_ERROR(pool_dtype(ctx, "MaxPool", true));
  pool_t p;
  KILN_RETURN_IF_ERROR(pool_setup(ctx->node, "MaxPool", ctx->opset,
                                  &ctx->in[0]->shape, kiln_nn_in_name(ctx, 0),
                                  &p));
  kiln_infer_set(ctx, 0, ctx->in[0]->dtype, &p.out);
  if (ctx->n_out > 1) kiln_infer_set(ctx, 1, KILN_DTYPE_I64, &p.out);
  return NULL;
}

int64_t kiln_nn_maxpool_flops(const kiln_infer_t* ctx) { return pool_flops(ctx); }

/* Taps [lo, hi) of each kernel dim whose input index o*s + k*d - p lies
 * inside the input, so the work is bounded by the input, not by the kernel
 * attribute (a huge kernel_shape must not turn into a hang). */
static void tap_range(const kiln_nn_win3_t* w, int32_t j, int64_t o,
                      int64_t* lo, int64_t* hi) {
  kiln_nn_valid_range(o * w->s[j] - w->p[j], w->d[j], w->in[j], w->k[j], lo,
                      hi);
}

static void maxpool(const float* x, const kiln_nn_win3_t* w, int64_t planes,
                    int64_t storage_order, float* y, int64_t* ind) {
  const int64_t in_plane = w->in[0] * w->in[1] * w->in[2];
  const int64_t out_plane = w->out[0] * w->out[1] * w->out[2];
  for (int64_t nc = 0; nc < planes; ++nc) {
    const float* xp = x + nc * in_plane;
    for (int64_t od = 0; od < w->out[0]; ++od)
      for (int64_t oh = 0; oh < w->out[1]; ++oh)
        for (int64_t ow = 0; ow < w->out[2]; ++ow) {
          int64_t d0, d1, h0, h1, w0, w1;
          tap_range(w, 0, od, &d0, &d1);
          tap_range(w, 1, oh, &h0, &h1);
          tap_range(w, 2, ow, &w0, &w1);
          float best = -INFINITY;
          int64_t at = -1;
          for (int64_t kd = d0; kd < d1; ++kd) {
            int64_t id = od * w->s[0] + kd * w->d[0] - w->p[0];
            for (int64_t kh = h0; kh < h1; ++kh) {
              int64_t ih = oh * w->s[1] + kh * w->d[1] - w->p[1];
              for (int64_t kw = w0; kw < w1; ++kw) {
                int64_t iw = ow * w->s[2] + kw * w->d[2] - w->p[2];
                int64_t idx = (id * w->in[1] + ih) * w->in[2] + iw;
                float v = xp[idx];
                if (at < 0 || v > best) {
                  best = v;
                  at = storage_order
                           ? id + (ih + iw * w->in[1]) * w->in[0]
                           : idx;
                }
              }
            }
          }
          int64_t o = nc * out_plane + (od * w->out[1] + oh) * w->out[2] + ow;
          y[o] = best;
          if (ind) ind[o] = at < 0 ? -1 : nc * in_plane + at;
        }
  }
}

kiln_status_t kiln_nn_maxpool_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* X = ctx->in[0];
  kiln_array_t* Y = ctx->out[0];
  kiln_array_t* I = ctx->n_out > 1 ? ctx->out[1] : NULL;
  pool_t p;
  KILN_RETURN_IF_ERROR(pool_setup(ctx->node, "MaxPool", ctx->opset, &X->shape,
                                  "X", &p));
  kiln_nn_win3_t w3;
  kiln_nn_win3(&p.win, X->shape.dims + 2, p.out.dims + 2, &w3);
  const float* x;
  float *xs = NULL, *y, *ys = NULL;
  kiln_status_t st = kiln_nn_f32_load(ctx, X, &x, &xs);
  if (!st) st = kiln_nn_f32_dest(ctx, Y, &y, &ys);
  if (!st) {
    maxpool(x, &w3, X->shape.dims[0] * X->shape.dims[1], p.storage_order, y,
            I ? (int64_t*)I->data : NULL);
    kiln_nn_f32_store(ctx, Y, ys);
  }
  kiln_nn_scratch_free(ctx, xs);
  return st;
}

/* ---- AveragePool -------------------------------------------------------- */

kiln_status_t kiln_nn_avgpool_infer(kiln_infer_t* ctx) {
  KILN_RETURN_IF_ERROR(pool_dtype(ctx, "AveragePool", false));
  pool_t p;
  KILN_RETURN_IF_ERROR(pool_setup(ctx->node, "AveragePool", ctx->opset,
                                  &ctx->in[0]->shape, kiln_nn_in_name(ctx, 0),
                                  &p));
  kiln_infer_set(ctx, 0, ctx->in[0]->dtype, &p.out);
  return NULL;
}

int64_t kiln_nn_avgpool_flops(const kiln_infer_t* ctx) { return pool_flops(ctx); }

/* AveragePool, or with |lp| > 0 LpPool: (sum of |x|^p over the valid
 * taps)^(1/p), padding counting as zeros (the reference's LpPool is an
 * average with count_include_pad times the kernel size). */
static void avgpool(const float* x, const kiln_nn_win3_t* w, int64_t planes,
                    bool include_pad, int64_t lp, float* y) {
  const int64_t in_plane = w->in[0] * w->in[1] * w->in[2];
  const int64_t out_plane = w->out[0] * w->out[1] * w->out[2];
  const double taps = (double)w->k[0] * (double)w->k[1] * (double)w->k[2];
  for (int64_t nc = 0; nc < planes; ++nc) {
    const float* xp = x + nc * in_plane;
    for (int64_t od = 0; od < w->out[0]; ++od)
      for (int64_t oh = 0; oh < w->out[1]; ++oh)
        for (int64_t ow = 0; ow < w->out[2]; ++ow) {
          int64_t d0, d1, h0, h1, w0, w1;
          tap_range(w, 0, od, &d0, &d1);
          tap_range(w, 1, oh, &h0, &h1);
          tap_range(w, 2, ow, &w0, &w1);
          double sum = 0.0;
          for (int64_t kd = d0; kd < d1; ++kd) {
            int64_t id = od * w->s[0] + kd * w->d[0] - w->p[0];
            for (int64_t kh = h0; kh < h1; ++kh) {
              int64_t ih = oh * w->s[1] + kh * w->d[1] - w->p[1];
              for (int64_t kw = w0; kw < w1; ++kw) {
                int64_t iw = ow * w->s[2] + kw * w->d[2] - w->p[2];
                const double v = xp[(id * w->in[1] + ih) * w->in[2] + iw];
                sum += lp == 0 ? v : lp == 1 ? fabs(v) : pow(fabs(v), (double)lp);
              }
            }
          }
          const int64_t count = (d1 - d0) * (h1 - h0) * (w1 - w0);
          /* A window wholly in padding averages an empty set: NaN, as in
           * the reference, rather than a made-up 0. */
          double div = include_pad ? taps : (double)count;
          y[nc * out_plane + (od * w->out[1] + oh) * w->out[2] + ow] =
              (float)(lp ? pow(sum, 1.0 / (double)lp)
                         : count || include_pad ? sum / div : NAN);
        }
  }
}

/* LpPool's p (default 2, at least 1). */
static kiln_status_t lp_order(const kiln_node_t* node, int64_t* p) {
  KILN_RETURN_IF_ERROR(kiln_attr_int(node, "p", 2, p));
  if (*p < 1 || *p > 64) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "LpPool: p is %lld, must be in [1, 64]",
                            (long long)*p);
  }
  return NULL;
}

static kiln_status_t sumpool_run(const kiln_ref_ctx_t* ctx, const char* op,
                                 bool lp_pool) {
  const kiln_array_t* X = ctx->in[0];
  kiln_array_t* Y = ctx->out[0];
  pool_t p;
  int64_t lp = 0;
  if (lp_pool) KILN_RETURN_IF_ERROR(lp_order(ctx->node, &lp));
  KILN_RETURN_IF_ERROR(pool_setup(ctx->node, op, ctx->opset, &X->shape, "X", &p));
  kiln_nn_win3_t w3;
  kiln_nn_win3(&p.win, X->shape.dims + 2, p.out.dims + 2, &w3);
  const float* x;
  float *xs = NULL, *y, *ys = NULL;
  kiln_status_t st = kiln_nn_f32_load(ctx, X, &x, &xs);
  if (!st) st = kiln_nn_f32_dest(ctx, Y, &y, &ys);
  if (!st) {
    avgpool(x, &w3, X->shape.dims[0] * X->shape.dims[1],
            p.count_include_pad != 0, lp, y);
    kiln_nn_f32_store(ctx, Y, ys);
  }
  kiln_nn_scratch_free(ctx, xs);
  return st;
}

kiln_status_t kiln_nn_avgpool_run(const kiln_ref_ctx_t* ctx) {
  return sumpool_run(ctx, "AveragePool", false);
}

/* ---- LpPool --------------------------------------------------------------- */

kiln_status_t kiln_nn_lppool_infer(kiln_infer_t* ctx) {
  KILN_RETURN_IF_ERROR(pool_dtype(ctx, "LpPool", false));
  int64_t lp;
  KILN_RETURN_IF_ERROR(lp_order(ctx->node, &lp));
  pool_t p;
  KILN_RETURN_IF_ERROR(pool_setup(ctx->node, "LpPool", ctx->opset,
                                  &ctx->in[0]->shape, kiln_nn_in_name(ctx, 0),
                                  &p));
  kiln_infer_set(ctx, 0, ctx->in[0]->dtype, &p.out);
  return NULL;
}

int64_t kiln_nn_lppool_flops(const kiln_infer_t* ctx) { return pool_flops(ctx); }

kiln_status_t kiln_nn_lppool_run(const kiln_ref_ctx_t* ctx) {
  return sumpool_run(ctx, "LpPool", true);
}

/* ---- GlobalAveragePool, GlobalMaxPool ------------------------------------ */

static kiln_status_t global_infer(kiln_infer_t* ctx, const char* op) {
  KILN_RETURN_IF_ERROR(pool_dtype(ctx, op, false));
  const kiln_shape_t* x = &ctx->in[0]->shape;
  if (x->rank < 0) {
    kiln_shape_t u = kiln_shape_unknown();
    kiln_infer_set(ctx, 0, ctx->in[0]->dtype, &u);
    return NULL;
  }
  if (x->rank < 3) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: input '%s' has rank %d, "
                            "expected >= 3 (N, C, spatial...)",
                            op, kiln_nn_in_name(ctx, 0), (int)x->rank);
  }
  kiln_shape_t out = *x;
  for (int32_t i = 2; i < out.rank; ++i) out.dims[i] = 1;
  kiln_infer_set(ctx, 0, ctx->in[0]->dtype, &out);
  return NULL;
}

static int64_t global_flops(const kiln_infer_t* ctx) {
  const kiln_shape_t* x = &ctx->in[0]->shape;
  return kiln_shape_is_static(x) ? kiln_shape_count(x) : 0;
}

/* The mean (in double) or the max (NaN wins, as in numpy) of each plane. */
static kiln_status_t global_run(const kiln_ref_ctx_t* ctx, bool is_max) {
  const kiln_array_t* X = ctx->in[0];
  kiln_array_t* Y = ctx->out[0];
  const int64_t planes = X->shape.dims[0] * X->shape.dims[1];
  const int64_t plane = kiln_nn_prod(&X->shape, 2, X->shape.rank);
  const float* x;
  float *xs = NULL, *y, *ys = NULL;
  kiln_status_t st = kiln_nn_f32_load(ctx, X, &x, &xs);
  if (!st) st = kiln_nn_f32_dest(ctx, Y, &y, &ys);
  if (!st) {
    for (int64_t nc = 0; nc < planes; ++nc) {
      double acc = is_max ? -INFINITY : 0.0;
      const float* xp = x + nc * plane;
      for (int64_t i = 0; i < plane; ++i) {
        if (!is_max) acc += xp[i];
        else if (xp[i] > acc || isnan(xp[i])) acc = xp[i];
      }
      y[nc] = (float)(is_max ? acc : acc / (double)plane);
    }
    kiln_nn_f32_store(ctx, Y, ys);
  }
  kiln_nn_scratch_free(ctx, xs);
  return st;
}

kiln_status_t kiln_nn_global_avgpool_infer(kiln_infer_t* ctx) {
  return global_infer(ctx, "GlobalAveragePool");
}
int64_t kiln_nn_global_avgpool_flops(const kiln_infer_t* ctx) { return global_flops(ctx); }
kiln_status_t kiln_nn_global_avgpool_run(const kiln_ref_ctx_t* ctx) { return global_run(ctx, false); }

kiln_status_t kiln_nn_global_maxpool_infer(kiln_infer_t* ctx) {
  return global_infer(ctx, "GlobalMaxPool");
}
int64_t kiln_nn_global_maxpool_flops(const kiln_infer_t* ctx) { return global_flops(ctx); }
kiln_status_t kiln_nn_global_maxpool_run(const kiln_ref_ctx_t* ctx) { return global_run(ctx, true); }
