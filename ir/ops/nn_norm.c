/* Normalisations: BatchNormalization (inference mode), LayerNormalization,
 * Softmax, LogSoftmax and Hardmax (opset < 13 coerces to 2-D at axis, default 1;
 * opset >= 13 works on one axis, default -1).
 */
#include <math.h>
#include <string.h>

#include "ir/ops/nn_internal.h"

static bool known(int64_t d) { return kiln_dim_known(d); }

/* Loads |a| as f32 and broadcasts it (numpy rules, right-aligned) to the
 * static shape |to|, into a new scratch buffer of count(to) floats. */
static kiln_status_t expand_f32(const kiln_ref_ctx_t* ctx, const kiln_array_t* a,
                                const kiln_shape_t* to, float** out) {
  *out = NULL;
  const float* src;
  float* sc = NULL;
  KILN_RETURN_IF_ERROR(kiln_nn_f32_load(ctx, a, &src, &sc));
  float* dst = NULL;
  int64_t n = kiln_shape_count(to);
  kiln_status_t st =
      kiln_nn_scratch(ctx, n, sizeof(float), "broadcast copy", (void**)&dst);
  if (!st) {
    int64_t str[KILN_MAX_RANK];
    kiln_broadcast_strides(&a->shape, to, str);
    int64_t idx[KILN_MAX_RANK] = {0};
    int64_t off = 0;
    for (int64_t i = 0; i < n; ++i) {
      dst[i] = src[off];
      for (int32_t d = to->rank - 1; d >= 0; --d) {
        off += str[d];
        if (++idx[d] < to->dims[d]) break;
        off -= str[d] * to->dims[d];
        idx[d] = 0;
      }
    }
    *out = dst;
  }
  kiln_nn_scratch_free(ctx, sc);
  return st;
}

/* ---- BatchNormalization ------------------------------------------------ */

static const char* const bn_names[] = {"X", "scale", "B", "input_mean",
                                       "input_var"};

static kiln_status_t bn_check(const kiln_node_t* node, int64_t opset,
                              int32_t n_out, kiln_tensor_t* const* out) {
  int64_t training = 0, spatial = 1;
  KILN_RETURN_IF_ERROR(kiln_attr_int(node, "training_mode", 0, &training));
  KILN_RETURN_IF_ERROR(kiln_attr_int(node, "spatial", 1, &spatial));
  if (training) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "BatchNormalization: training_mode=1 is not "
                            "supported (kiln runs inference only)");
  }
  if (!spatial) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "BatchNormalization: spatial=0 (per-activation "
                            "statistics, opset < 9) is not supported");
  }
  for (int32_t i = 1; i < n_out; ++i) {
    if (out[i]) {
      return kiln_make_status(KILN_UNSUPPORTED,
                              "BatchNormalization: output %d (running/saved "
                              "statistics of training mode) is not supported",
                              (int)i);
    }
  }
  (void)opset;
  return NULL;
}

kiln_status_t kiln_nn_batchnorm_infer(kiln_infer_t* ctx) {
  KILN_RETURN_IF_ERROR(bn_check(ctx->node, ctx->opset, ctx->n_out, ctx->out));
  for (int32_t i = 0; i < 5 && i < ctx->n_in; ++i)
    KILN_RETURN_IF_ERROR(kiln_nn_require_float(ctx, "BatchNormalization", i));
  const kiln_shape_t* x = &ctx->in[0]->shape;
  if (x->rank >= 0 && x->rank < 2) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "BatchNormalization: input '%s' has rank %d, "
                            "expected >= 2 (N, C, ...)",
                            kiln_nn_in_name(ctx, 0), (int)x->rank);
  }
  int64_t C = x->rank >= 2 ? x->dims[1] : KILN_DIM_UNKNOWN;
  for (int32_t i = 1; i < 5 && i < ctx->n_in; ++i) {
    const kiln_shape_t* s = &ctx->in[i]->shape;
    if (s->rank < 0) continue;
    if (s->rank != 1 || (known(C) && known(s->dims[0]) && s->dims[0] != C)) {
      char b[96];
      kiln_shape_format(s, b, sizeof b);
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "BatchNormalization: %s '%s' has shape %s, "
                              "expected [%lld] (the channels of '%s')",
                              bn_names[i], kiln_nn_in_name(ctx, i), b,
                              (long long)C, kiln_nn_in_name(ctx, 0));
    }
  }
  kiln_infer_set(ctx, 0, ctx->in[0]->dtype, x);
  return NULL;
}

int64_t kiln_nn_batchnorm_flops(const kiln_infer_t* ctx) {
  const kiln_shape_t* x = &ctx->in[0]->shape;
  return kiln_shape_is_static(x) ? 2 * kiln_shape_count(x) : 0;
}

kiln_status_t kiln_nn_batchnorm_run(const kiln_ref_ctx_t* ctx) {
  KILN_RETURN_IF_ERROR(bn_check(ctx->node, ctx->opset, 0, NULL));
  float eps = 1e-5f;
  KILN_RETURN_IF_ERROR(kiln_attr_float(ctx->node, "epsilon", 1e-5f, &eps));
  const kiln_array_t* X = ctx->in[0];
  const int64_t N = X->shape.dims[0], C = X->shape.dims[1];
  const int64_t plane = kiln_nn_prod(&X->shape, 2, X->shape.rank);
  const float* p[5];
  float* sc[5] = {NULL};
  float *y, *ys = NULL, *ab = NULL;
  kiln_status_t st = NULL;
  for (int32_t i = 0; i < 5 && !st; ++i) {
    st = kiln_nn_f32_load(ctx, ctx->in[i], &p[i], &sc[i]);
    if (!st && i > 0 && kiln_array_numel(ctx->in[i]) != C) {
      st = kiln_make_status(KILN_INVALID_ARGUMENT,
                            "BatchNormalization: %s has %lld elements, "
                            "expected %lld",
                            bn_names[i], (long long)kiln_array_numel(ctx->in[i]),
                            (long long)C);
    }
  }
  if (!st) st = kiln_nn_scratch(ctx, 2 * C, sizeof(float), "BatchNormalization",
                                (void**)&ab);
  if (!st) st = kiln_nn_f32_dest(ctx, ctx->out[0], &y, &ys);
  if (!st) {
    /* y = x * a + b with a = scale / sqrt(var + eps), b = B - mean * a. */
    for (int64_t c = 0; c < C; ++c) {
      double a = (double)p[1][c] / sqrt((double)p[4][c] + (double)eps);
      ab[c] = (float)a;
      ab[C + c] = (float)((double)p[2][c] - (double)p[3][c] * a);
    }
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) {
        const float* xp = p[0] + (n * C + c) * plane;
        float* yp = y + (n * C + c) * plane;
        const float a = ab[c], b = ab[C + c];
        for (int64_t i = 0; i < plane; ++i) yp[i] = xp[i] * a + b;
      }
    kiln_nn_f32_store(ctx, ctx->out[0], ys);
  }
  for (int32_t i = 0; i < 5; ++i) kiln_nn_scratch_free(ctx, sc[i]);
  kiln_nn_scratch_free(ctx, ab);
  return st;
}

/* ---- LayerNormalization ------------------------------------------------ */

typedef struct ln_s {
  int32_t axis;
  float eps;
} ln_t;

/* |s| (Scale or B) must broadcast into the normalised dims x[axis:]. */
static kiln_status_t ln_check_param(const kiln_shape_t* x, int32_t axis,
                                    const kiln_shape_t* s, const char* what,
                                    const char* name) {
  if (s->rank < 0 || x->rank < 0) return NULL;
  int32_t nr = x->rank - axis;
  bool ok = true;
  for (int32_t i = 0; i < s->rank && ok; ++i) {
    int32_t xi = x->rank - s->rank + i;
    int64_t d = s->dims[i];
    if (xi < axis) {
      ok = !known(d) || d == 1; /* leading 1s are harmless */
    } else if (known(d) && d != 1 && known(x->dims[xi]) && d != x->dims[xi]) {
      ok = false;
    }
  }
  if (!ok) {
    char a[96], b[96];
    kiln_shape_format(s, a, sizeof a);
    kiln_shape_format(x, b, sizeof b);
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "LayerNormalization: %s '%s' of shape %s does not "
                            "broadcast to the last %d dims of input %s (axis "
                            "%d)",
                            what, name, a, (int)nr, b, (int)axis);
  }
  return NULL;
}

static kiln_status_t ln_setup(const kiln_node_t* node, int32_t rank, ln_t* l) {
  int64_t axis = -1, stash = 1;
  KILN_RETURN_IF_ERROR(kiln_attr_int(node, "axis", -1, &axis));
  KILN_RETURN_IF_ERROR(kiln_attr_float(node, "epsilon", 1e-5f, &l->eps));
  KILN_RETURN_IF_ERROR(kiln_attr_int(node, "stash_type", 1, &stash));
  if (stash != 1) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "LayerNormalization: stash_type %lld is not "
                            "supported (only 1 = float)",
                            (long long)stash);
  }
  l->axis = 0;
  if (rank >= 0) {
    kiln_status_t st = kiln_infer_axis(axis, rank, &l->axis);
    if (st) return kiln_status_annotate(st, "LayerNormalization");
  }
  return NULL;
}

kiln_status_t kiln_nn_layernorm_infer(kiln_infer_t* ctx) {
  for (int32_t i = 0; i < 3 && i < ctx->n_in; ++i)
    KILN_RETURN_IF_ERROR(kiln_nn_require_float(ctx, "LayerNormalization", i));
  const kiln_shape_t* x = &ctx->in[0]->shape;
  ln_t l;
  KILN_RETURN_IF_ERROR(ln_setup(ctx->node, x->rank, &l));
  static const char* const what[] = {"X", "Scale", "B"};
  for (int32_t i = 1; i < 3 && i < ctx->n_in; ++i) {
    if (!ctx->in[i]) continue;
    KILN_RETURN_IF_ERROR(ln_check_param(x, l.axis, &ctx->in[i]->shape, what[i],
                                        kiln_nn_in_name(ctx, i)));
  }
  kiln_infer_set(ctx, 0, ctx->in[0]->dtype, x);
  kiln_shape_t st = *x;
  if (x->rank >= 0)
    for (int32_t i = l.axis; i < x->rank; ++i) st.dims[i] = 1;
  kiln_infer_set(ctx, 1, KILN_DTYPE_F32, &st);
  kiln_infer_set(ctx, 2, KILN_DTYPE_F32, &st);
  return NULL;
}

int64_t kiln_nn_layernorm_flops(const kiln_infer_t* ctx) {
  const kiln_shape_t* x = &ctx->in[0]->shape;
  return kiln_shape_is_static(x) ? 8 * kiln_shape_count(x) : 0;
}

kiln_status_t kiln_nn_layernorm_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* X = ctx->in[0];
  ln_t l;
  KILN_RETURN_IF_ERROR(ln_setup(ctx->node, X->shape.rank, &l));
  const int64_t outer = kiln_nn_prod(&X->shape, 0, l.axis);
  const int64_t inner = kiln_nn_prod(&X->shape, l.axis, X->shape.rank);
  kiln_shape_t norm = {.rank = X->shape.rank - l.axis};
  for (int32_t i = 0; i < norm.rank; ++i) norm.dims[i] = X->shape.dims[l.axis + i];
  const kiln_array_t* S = ctx->in[1];
  const kiln_array_t* B = ctx->n_in > 2 ? ctx->in[2] : NULL;
  /* Scale/B may carry leading 1s beyond the normalised rank: drop them. */
  kiln_array_t sv = *S, bv = {0};
  if (B) bv = *B;
  while (sv.shape.rank > norm.rank) {
    memmove(sv.shape.dims, sv.shape.dims + 1, sizeof(int64_t) * (size_t)--sv.shape.rank);
  }
  while (B && bv.shape.rank > norm.rank) {
    memmove(bv.shape.dims, bv.shape.dims + 1, sizeof(int64_t) * (size_t)--bv.shape.rank);
  }
  const float* x;
  float *xs = NULL, *scale = NULL, *bias = NULL, *y, *ys = NULL;
  kiln_status_t st = kiln_nn_f32_load(ctx, X, &x, &xs);
  if (!st) st = expand_f32(ctx, &sv, &norm, &scale);
  if (!st && B) st = expand_f32(ctx, &bv, &norm, &bias);
  if (!st) st = kiln_nn_f32_dest(ctx, ctx->out[0], &y, &ys);
  if (!st) {
    float* mean_out = ctx->n_out > 1 && ctx->out[1] ? (float*)ctx->out[1]->data : NULL;
    float* inv_out = ctx->n_out > 2 && ctx->out[2] ? (float*)ctx->out[2]->data : NULL;
    for (int64_t o = 0; o < outer; ++o) {
      const float* xr = x + o * inner;
      float* yr = y + o * inner;
      double sum = 0.0;
      for (int64_t i = 0; i < inner; ++i) sum += xr[i];
      double mean = inner ? sum / (double)inner : 0.0;
      double sq = 0.0;
      for (int64_t i = 0; i < inner; ++i) {
        double dv = xr[i] - mean;
        sq += dv * dv;
      }
      double var = inner ? sq / (double)inner : 0.0;
      float inv = (float)(1.0 / sqrt(var + (double)l.eps));
      float m = (float)mean;
      for (int64_t i = 0; i < inner; ++i) {
        float v = (xr[i] - m) * inv * scale[i];
        yr[i] = bias ? v + bias[i] : v;
      }
      if (mean_out) mean_out[o] = m;
      if (inv_out) inv_out[o] = inv;
    }
    kiln_nn_f32_store(ctx, ctx->out[0], ys);
  }
  kiln_nn_scratch_free(ctx, xs);
  kiln_nn_scratch_free(ctx, scale);
  kiln_nn_scratch_free(ctx, bias);
  return st;
}

/* ---- Softmax / LogSoftmax ---------------------------------------------- */

/* Views the input as [outer, n, inner] with the reduction over n. */
static kiln_status_t sm_setup(const kiln_node_t* node, const char* op,
                              int64_t opset, const kiln_shape_t* x,
                              int64_t* outer, int64_t* n, int64_t* inner) {
  bool legacy = opset > 0 && opset < 13;
  int64_t axis;
  KILN_RETURN_IF_ERROR(kiln_attr_int(node, "axis", legacy ? 1 : -1, &axis));
  if (x->rank < 0) return NULL;
  /* The legacy form coerces to 2-D [prod(d[:axis]), prod(d[axis:])], where
   * axis == rank is harmless (an empty trailing product of 1). */
  const int64_t r = x->rank, top = legacy ? r : r - 1;
  if (axis < -r || axis > top) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: axis %lld is out of range for rank %d", op,
                            (long long)axis, (int)x->rank);
  }
  const int32_t ax = (int32_t)(axis < 0 ? axis + r : axis);
  if (!kiln_shape_is_static(x)) return NULL;
  *outer = kiln_nn_prod(x, 0, ax);
  if (legacy) {
    *n = kiln_nn_prod(x, ax, x->rank);
    *inner = 1;
  } else {
    *n = x->dims[ax];
    *inner = kiln_nn_prod(x, ax + 1, x->rank);
  }
  return NULL;
}

static kiln_status_t sm_infer(kiln_infer_t* ctx, const char* op) {
  KILN_RETURN_IF_ERROR(kiln_nn_require_float(ctx, op, 0));
  int64_t a, b, c;
  KILN_RETURN_IF_ERROR(
      sm_setup(ctx->node, op, ctx->opset, &ctx->in[0]->shape, &a, &b, &c));
  kiln_infer_set(ctx, 0, ctx->in[0]->dtype, &ctx->in[0]->shape);
  return NULL;
}

typedef enum { SM_SOFT, SM_LOG, SM_HARD } sm_form_t;

/* Hardmax: the first maximum of the row (a NaN counts as the maximum, as
 * numpy's argmax in the ONNX reference). */
static int64_t sm_argmax(const float* xr, int64_t n, int64_t inner) {
  int64_t best = 0;
  for (int64_t a = 1; a < n && !isnan(xr[best * inner]); ++a) {
    const float v = xr[a * inner];
    if (v > xr[best * inner] || isnan(v)) best = a;
  }
  return best;
}

static kiln_status_t sm_run(const kiln_ref_ctx_t* ctx, const char* op,
                            sm_form_t form) {
  const kiln_array_t* X = ctx->in[0];
  int64_t outer = 0, n = 0, inner = 0;
  KILN_RETURN_IF_ERROR(
      sm_setup(ctx->node, op, ctx->opset, &X->shape, &outer, &n, &inner));
  const float* x;
  float *xs = NULL, *y, *ys = NULL;
  kiln_status_t st = kiln_nn_f32_load(ctx, X, &x, &xs);
  if (!st) st = kiln_nn_f32_dest(ctx, ctx->out[0], &y, &ys);
  if (!st) {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const float* xr = x + o * n * inner + i;
        float* yr = y + o * n * inner + i;
        if (form == SM_HARD) {
          const int64_t best = sm_argmax(xr, n, inner);
          for (int64_t a = 0; a < n; ++a) yr[a * inner] = a == best ? 1.0f : 0.0f;
          continue;
        }
        float mx = -INFINITY;
        for (int64_t a = 0; a < n; ++a)
          if (xr[a * inner] > mx) mx = xr[a * inner];
        double sum = 0.0;
        for (int64_t a = 0; a < n; ++a) sum += exp((double)(xr[a * inner] - mx));
        if (form == SM_LOG) {
          float ls = (float)log(sum);
          for (int64_t a = 0; a < n; ++a) yr[a * inner] = xr[a * inner] - mx - ls;
        } else {
          for (int64_t a = 0; a < n; ++a)
            yr[a * inner] = (float)(exp((double)(xr[a * inner] - mx)) / sum);
        }
      }
    kiln_nn_f32_store(ctx, ctx->out[0], ys);
  }
  kiln_nn_scratch_free(ctx, xs);
  return st;
}

kiln_status_t kiln_nn_softmax_infer(kiln_infer_t* ctx) {
  return sm_infer(ctx, "Softmax");
}
kiln_status_t kiln_nn_softmax_run(const kiln_ref_ctx_t* ctx) {
  return sm_run(ctx, "Softmax", SM_SOFT);
}
int64_t kiln_nn_softmax_flops(const kiln_infer_t* ctx) {
  const kiln_shape_t* x = &ctx->in[0]->shape;
  return kiln_shape_is_static(x) ? 4 * kiln_shape_count(x) : 0;
}
kiln_status_t kiln_nn_log_softmax_infer(kiln_infer_t* ctx) {
  return sm_infer(ctx, "LogSoftmax");
}
kiln_status_t kiln_nn_log_softmax_run(const kiln_ref_ctx_t* ctx) {
  return sm_run(ctx, "LogSoftmax", SM_LOG);
}
int64_t kiln_nn_log_softmax_flops(const kiln_infer_t* ctx) {
  return kiln_nn_softmax_flops(ctx);
}

/* Hardmax: 1 at the first maximum of each row, 0 elsewhere; the axis rules
 * are Softmax's (2-D coercion before opset 13). */
kiln_status_t kiln_nn_hardmax_infer(kiln_infer_t* ctx) {
  return sm_infer(ctx, "Hardmax");
}
kiln_status_t kiln_nn_hardmax_run(const kiln_ref_ctx_t* ctx) {
  return sm_run(ctx, "Hardmax", SM_HARD);
}
int64_t kiln_nn_hardmax_flops(const kiln_infer_t* ctx) {
  const kiln_shape_t* x = &ctx->in[0]->shape;
  return kiln_shape_is_static(x) ? kiln_shape_count(x) : 0;
}
