/* LRN, LpNormalization and MeanVarianceNormalization (float only).
 *
 * LRN (across channels): y = x / (bias + alpha / size * sum x'^2)^beta, the
 * sum over channels [c - floor((size-1)/2), c + ceil((size-1)/2)] clipped to
 * the input. LpNormalization divides by the p-norm (p = 1 or 2) along one
 * axis, with no epsilon, as the ONNX reference (a zero vector gives NaN).
 * MeanVarianceNormalization (axes, default [0, 2, 3]) computes
 * (x - mean) / (sqrt(var) + 1e-9) over the axes, var the biased variance,
 * as the op's function body does. Sums are in double here.
 */
#include <math.h>
#include <string.h>

#include "ir/ops/nn_internal.h"

static int64_t elem_flops(const kiln_infer_t* ctx, int64_t per) {
  const kiln_shape_t* x = &ctx->in[0]->shape;
  return kiln_shape_is_static(x) ? kiln_nn_mul_sat(per, kiln_shape_count(x)) : 0;
}

static kiln_status_t same_shape_infer(kiln_infer_t* ctx, const char* op) {
  KILN_RETURN_IF_ERROR(kiln_nn_require_float(ctx, op, 0));
  kiln_infer_set(ctx, 0, ctx->in[0]->dtype, &ctx->in[0]->shape);
  return NULL;
}

/* ---- LRN ---------------------------------------------------------------- */

typedef struct lrn_s {
  float alpha, beta, bias;
  int64_t size;
} lrn_t;

static kiln_status_t lrn_setup(const kiln_node_t* node, int32_t rank, lrn_t* l) {
  KILN_RETURN_IF_ERROR(kiln_attr_float(node, "alpha", 1e-4f, &l->alpha));
  KILN_RETURN_IF_ERROR(kiln_attr_float(node, "beta", 0.75f, &l->beta));
  KILN_RETURN_IF_ERROR(kiln_attr_float(node, "bias", 1.0f, &l->bias));
  KILN_RETURN_IF_ERROR(kiln_attr_int(node, "size", 0, &l->size));
  if (l->size <= 0 || l->size > INT32_MAX) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "LRN: attribute size must be given and in [1, "
                            "2^31) (got %lld)",
                            (long long)l->size);
  }
  if (rank >= 0 && rank < 2) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "LRN: input has rank %d, expected >= 2 (N, C, ...)",
                            (int)rank);
  }
  return NULL;
}

kiln_status_t kiln_nn_lrn_infer(kiln_infer_t* ctx) {
  lrn_t l;
  KILN_RETURN_IF_ERROR(lrn_setup(ctx->node, ctx->in[0]->shape.rank, &l));
  return same_shape_infer(ctx, "LRN");
}

int64_t kiln_nn_lrn_flops(const kiln_infer_t* ctx) {
  lrn_t l = {0};
  if (lrn_setup(ctx->node, -1, &l)) return 0;
  return elem_flops(ctx, 2 * l.size + 4);
}

kiln_status_t kiln_nn_lrn_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* X = ctx->in[0];
  lrn_t l;
  KILN_RETURN_IF_ERROR(lrn_setup(ctx->node, X->shape.rank, &l));
  const int64_t N = X->shape.dims[0], C = X->shape.dims[1];
  const int64_t plane = kiln_nn_prod(&X->shape, 2, X->shape.rank);
  const int64_t lo = (l.size - 1) / 2, hi = l.size - 1 - lo;
  const float* x;
  float *xs = NULL, *y, *ys = NULL;
  kiln_status_t st = kiln_nn_f32_load(ctx, X, &x, &xs);
  if (!st) st = kiln_nn_f32_dest(ctx, ctx->out[0], &y, &ys);
  if (!st) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t p = 0; p < plane; ++p) {
          double sq = 0.0;
          const int64_t c0 = c - lo < 0 ? 0 : c - lo;
          const int64_t c1 = c + hi > C - 1 ? C - 1 : c + hi;
          for (int64_t k = c0; k <= c1; ++k) {
            const double v = x[(n * C + k) * plane + p];
            sq += v * v;
          }
          const int64_t i = (n * C + c) * plane + p;
          y[i] = (float)(x[i] / pow((double)l.bias + (double)l.alpha / (double)l.size * sq,
                                    (double)l.beta));
        }
    kiln_nn_f32_store(ctx, ctx->out[0], ys);
  }
  kiln_nn_scratch_free(ctx, xs);
  return st;
}

/* ---- LpNormalization, MeanVarianceNormalization ------------------------- */

/* The axes of |n| for an input of |rank| into |red|: LpNormalization's one
 * axis (default -1) or MVN's list (default [0, 2, 3]). */
static kiln_status_t axes_setup(const kiln_node_t* node, bool mvn, int32_t rank,
                                bool* red) {
  const char* op = mvn ? "MeanVarianceNormalization" : "LpNormalization";
  int64_t one_axis = -1;
  const int64_t* v = &one_axis;
  int64_t n = 1;
  static const int64_t def[3] = {0, 2, 3};
  if (mvn) {
    KILN_RETURN_IF_ERROR(kiln_attr_ints(node, "axes", &v, &n));
    if (n < 0) v = def, n = 3;
  } else {
    int64_t p = 2;
    KILN_RETURN_IF_ERROR(kiln_attr_int(node, "axis", -1, &one_axis));
    KILN_RETURN_IF_ERROR(kiln_attr_int(node, "p", 2, &p));
    if (p != 1 && p != 2) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "LpNormalization: p must be 1 or 2 (got %lld)",
                              (long long)p);
    }
  }
  if (rank < 0) return NULL;
  for (int32_t d = 0; d < rank; ++d) red[d] = false;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t a = v[i] < 0 ? v[i] + rank : v[i];
    if (a < 0 || a >= rank || red[a]) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: axis %lld is out of range for rank %d or "
                              "repeated",
                              op, (long long)v[i], (int)rank);
    }
    red[a] = true;
  }
  return NULL;
}

static kiln_status_t axes_infer(kiln_infer_t* ctx, bool mvn) {
  bool red[KILN_MAX_RANK];
  KILN_RETURN_IF_ERROR(axes_setup(ctx->node, mvn, ctx->in[0]->shape.rank, red));
  return same_shape_infer(ctx, mvn ? "MeanVarianceNormalization" : "LpNormalization");
}

/* Walks x in order; |slot| maps every element to its statistics slot (the
 * index over the kept dims). Pass 1 sums (|x| or x^2 for Lp, x for MVN),
 * pass 2 (MVN) the squared deviations, then the output. */
static kiln_status_t axes_run(const kiln_ref_ctx_t* ctx, bool mvn) {
  const kiln_array_t* X = ctx->in[0];
  const kiln_shape_t* xs = &X->shape;
  bool red[KILN_MAX_RANK];
  KILN_RETURN_IF_ERROR(axes_setup(ctx->node, mvn, xs->rank, red));
  int64_t p = 2;
  if (!mvn) KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "p", 2, &p));
  const int64_t nin = kiln_array_numel(X);
  int64_t nslot = 1, group = 1, ostr[KILN_MAX_RANK];
  for (int32_t d = xs->rank - 1; d >= 0; --d) {
    ostr[d] = red[d] ? 0 : nslot;
    if (red[d]) group *= xs->dims[d];
    else nslot *= xs->dims[d];
  }
  const float* x;
  float *xsc = NULL, *y, *ys = NULL;
  double* acc = NULL;
  int64_t* slot = NULL;
  kiln_status_t st = kiln_nn_f32_load(ctx, X, &x, &xsc);
  if (!st) st = kiln_nn_f32_dest(ctx, ctx->out[0], &y, &ys);
  if (!st) st = kiln_nn_scratch(ctx, 2 * nslot, sizeof(double), "statistics", (void**)&acc);
  if (!st) st = kiln_nn_scratch(ctx, nin, sizeof(int64_t), "slots", (void**)&slot);
  if (!st) {
    int64_t idx[KILN_MAX_RANK] = {0}, off = 0;
    for (int64_t i = 0; i < nin; ++i) {
      slot[i] = off;
      for (int32_t d = xs->rank - 1; d >= 0; --d) {
        off += ostr[d];
        if (++idx[d] < xs->dims[d]) break;
        off -= ostr[d] * xs->dims[d];
        idx[d] = 0;
      }
    }
    double *s1 = acc, *s2 = acc + nslot;
    for (int64_t i = 0; i < nin; ++i)
      s1[slot[i]] += mvn ? x[i] : p == 1 ? fabs(x[i]) : (double)x[i] * x[i];
    if (mvn) {
      for (int64_t k = 0; k < nslot; ++k) s1[k] /= (double)group;
      for (int64_t i = 0; i < nin; ++i) {
        const double dv = x[i] - s1[slot[i]];
        s2[slot[i]] += dv * dv;
      }
      for (int64_t k = 0; k < nslot; ++k) s2[k] = sqrt(s2[k] / (double)group) + 1e-9;
    } else {
      for (int64_t k = 0; k < nslot; ++k) s2[k] = p == 1 ? s1[k] : sqrt(s1[k]);
    }
    for (int64_t i = 0; i < nin; ++i)
      y[i] = (float)((mvn ? x[i] - s1[slot[i]] : x[i]) / s2[slot[i]]);
    kiln_nn_f32_store(ctx, ctx->out[0], ys);
  }
  kiln_nn_scratch_free(ctx, slot);
  kiln_nn_scratch_free(ctx, acc);
  kiln_nn_scratch_free(ctx, xsc);
  return st;
}

kiln_status_t kiln_nn_lpnorm_infer(kiln_infer_t* ctx) { return axes_infer(ctx, false); }
kiln_status_t kiln_nn_lpnorm_run(const kiln_ref_ctx_t* ctx) { return axes_run(ctx, false); }
int64_t kiln_nn_lpnorm_flops(const kiln_infer_t* ctx) { return elem_flops(ctx, 3); }
kiln_status_t kiln_nn_mvn_infer(kiln_infer_t* ctx) { return axes_infer(ctx, true); }
kiln_status_t kiln_nn_mvn_run(const kiln_ref_ctx_t* ctx) { return axes_run(ctx, true); }
int64_t kiln_nn_mvn_flops(const kiln_infer_t* ctx) { return elem_flops(ctx, 5); }
