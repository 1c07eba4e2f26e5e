/* Loss ops: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
 *
 * Both take scores [N, C, d1..dk] (f32/f16) and integer targets [N, d1..dk]
 * with an optional per-class weight [C]. Element (n, d) loses
 * -scores[n, t, d] * weight[t] (t = target[n, d]); a target equal to
 * ignore_index loses 0 and weighs 0. reduction "none" returns the losses
 * (target shape), "sum" their sum, "mean" their sum divided by the sum of
 * the weights of the elements counted (as the ONNX reference does).
 * SoftmaxCrossEntropyLoss first takes the log-softmax of the scores along
 * axis 1 (its optional second output). A target outside [0, C) other than
 * ignore_index fails the run with KILN_OUT_OF_RANGE, as Gather does.
 */
#include <math.h>
#include <string.h>

#include "ir/ops/nn_internal.h"

kiln_status_t kiln_nn_loss_parse(const kiln_node_t* node, const char* op, kiln_nn_loss_t* out) {
  memset(out, 0, sizeof *out);
  const char* red = NULL;
  KILN_RETURN_IF_ERROR(kiln_attr_string(node, "reduction", "mean", &red));
  if (!strcmp(red, "none")) out->reduction = KILN_NN_LOSS_NONE;
  else if (!strcmp(red, "sum")) out->reduction = KILN_NN_LOSS_SUM;
  else if (!strcmp(red, "mean")) out->reduction = KILN_NN_LOSS_MEAN;
  else
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s node '%s': reduction '%s' is not none, sum or mean", op,
                            node->name ? node->name : "", red);
  /* Absence matters (no value of ignore_index means "none"): probe with
   * two defaults. */
  int64_t a = 0, b = 0;
  KILN_RETURN_IF_ERROR(kiln_attr_int(node, "ignore_index", 0, &a));
  KILN_RETURN_IF_ERROR(kiln_attr_int(node, "ignore_index", 1, &b));
  out->has_ignore = a == b;
  out->ignore = a;
  return NULL;
}

static kiln_status_t loss_infer(kiln_infer_t* ctx, const char* op, bool sce) {
  kiln_nn_loss_t l;
  KILN_RETURN_IF_ERROR(kiln_nn_loss_parse(ctx->node, op, &l));
  KILN_RETURN_IF_ERROR(kiln_nn_require_float(ctx, op, 0));
  const kiln_tensor_t* x = ctx->in[0];
  const kiln_tensor_t* t = ctx->in[1];
  if (t->dtype != KILN_DTYPE_UNDEFINED && t->dtype != KILN_DTYPE_I64 && t->dtype != KILN_DTYPE_I32)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: target %s has dtype %s, expected i32 or i64", op,
                            kiln_nn_in_name(ctx, 1), kiln_dtype_name(t->dtype));
  if (ctx->n_in > 2 && ctx->in[2]) KILN_RETURN_IF_ERROR(kiln_nn_require_float(ctx, op, 2));
  const kiln_shape_t* xs = &x->shape;
  const kiln_shape_t* ts = &t->shape;
  if (xs->rank >= 0 && xs->rank < 2)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: scores %s have rank %d, expected [N, C, ...]", op,
                            kiln_nn_in_name(ctx, 0), (int)xs->rank);
  if (kiln_shape_is_static(xs) && kiln_shape_is_static(ts)) {
    bool ok = ts->rank == xs->rank - 1 && ts->dims[0] == xs->dims[0];
    for (int32_t k = 1; ok && k < ts->rank; ++k) ok = ts->dims[k] == xs->dims[k + 1];
    if (!ok)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: target %s does not have the scores' shape without C",
                              op, kiln_nn_in_name(ctx, 1));
    if (ctx->n_in > 2 && ctx->in[2] && kiln_shape_is_static(&ctx->in[2]->shape) &&
        (ctx->in[2]->shape.rank != 1 || ctx->in[2]->shape.dims[0] != xs->dims[1]))
      return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: weight %s is not of shape [C] = [%lld]", op,
                              kiln_nn_in_name(ctx, 2), (long long)xs->dims[1]);
  }
  if (l.reduction == KILN_NN_LOSS_NONE) {
    kiln_infer_set(ctx, 0, x->dtype, ts);
  } else {
    kiln_shape_t s;
    memset(&s, 0, sizeof s);
    kiln_infer_set(ctx, 0, x->dtype, &s);
  }
  if (sce && ctx->n_out > 1) kiln_infer_set(ctx, 1, x->dtype, xs);
  return NULL;
}

static kiln_status_t loss_run(const kiln_ref_ctx_t* ctx, const char* op, bool sce) {
  kiln_nn_loss_t l;
  KILN_RETURN_IF_ERROR(kiln_nn_loss_parse(ctx->node, op, &l));
  const kiln_array_t* X = ctx->in[0];
  const kiln_array_t* T = ctx->in[1];
  const kiln_array_t* W = ctx->n_in > 2 ? ctx->in[2] : NULL;
  const int64_t N = X->shape.dims[0], C = X->shape.dims[1];
  const int64_t D = kiln_nn_prod(&X->shape, 2, X->shape.rank);
  const float *x, *w = NULL;
  float *xs = NULL, *ws = NULL, *lp = NULL, *lps = NULL, *y = NULL, *ys = NULL;
  kiln_status_t st = kiln_nn_f32_load(ctx, X, &x, &xs);
  if (!st && W) st = kiln_nn_f32_load(ctx, W, &w, &ws);
  kiln_array_t* LP = sce && ctx->n_out > 1 ? ctx->out[1] : NULL;
  if (!st && sce) {
    if (LP) st = kiln_nn_f32_dest(ctx, LP, &lp, &lps);
    else st = kiln_nn_scratch(ctx, N * C * D, sizeof(float), "log-probabilities", (void**)&lps), lp = lps;
  }
  if (!st) st = kiln_nn_f32_dest(ctx, ctx->out[0], &y, &ys);
  for (int64_t k = 0; !st && k < N * D; ++k) {
    int64_t t = kiln_load_i64(T->dtype, T->data, (size_t)k);
    if ((!l.has_ignore || t != l.ignore) && (t < 0 || t >= C))
      st = kiln_make_status(KILN_OUT_OF_RANGE, "%s: target %lld at element %lld is out of range [0, %lld)", op,
                            (long long)t, (long long)k, (long long)C);
  }
  if (!st && sce) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t d = 0; d < D; ++d) {
        const float* xr = x + n * C * D + d;
        float* lr = lp + n * C * D + d;
        float mx = -INFINITY;
        for (int64_t c = 0; c < C; ++c) mx = xr[c * D] > mx ? xr[c * D] : mx;
        double sum = 0.0;
        for (int64_t c = 0; c < C; ++c) sum += exp((double)(xr[c * D] - mx));
        const float ls = (float)log(sum);
        for (int64_t c = 0; c < C; ++c) lr[c * D] = xr[c * D] - mx - ls;
      }
    x = lp;
  }
  if (!st) {
    double num = 0.0, den = 0.0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t d = 0; d < D; ++d) {
        const int64_t t = kiln_load_i64(T->dtype, T->data, (size_t)(n * D + d));
        const bool ign = l.has_ignore && t == l.ignore;
        const float wt = ign ? 0.0f : w ? w[t] : 1.0f;
        const float v = ign ? 0.0f : -x[(n * C + t) * D + d] * wt;
        if (l.reduction == KILN_NN_LOSS_NONE) y[n * D + d] = v;
        num += v;
        den += wt;
      }
    if (l.reduction == KILN_NN_LOSS_SUM) y[0] = (float)num;
    if (l.reduction == KILN_NN_LOSS_MEAN) y[0] = (float)(num / den);
    kiln_nn_f32_store(ctx, ctx->out[0], ys);
    if (LP) kiln_nn_f32_store(ctx, LP, lps), lps = NULL;
  }
  kiln_nn_scratch_free(ctx, xs);
  kiln_nn_scratch_free(ctx, ws);
  kiln_nn_scratch_free(ctx, lps);
  return st;
}

static int64_t loss_flops(const kiln_infer_t* ctx, int64_t per) {
  const kiln_shape_t* x = &ctx->in[0]->shape;
  return kiln_shape_is_static(x) ? kiln_nn_mul_sat(per, kiln_shape_count(x)) : 0;
}

kiln_status_t kiln_nn_nll_loss_infer(kiln_infer_t* ctx) {
  return loss_infer(ctx, "NegativeLogLikelihoodLoss", false);
}
kiln_status_t kiln_nn_nll_loss_run(const kiln_ref_ctx_t* ctx) {
  return loss_run(ctx, "NegativeLogLikelihoodLoss", false);
}
int64_t kiln_nn_nll_loss_flops(const kiln_infer_t* ctx) {
  /* a multiply and an add per target element */
  const kiln_shape_t* t = &ctx->in[1]->shape;
  return kiln_shape_is_static(t) ? kiln_nn_mul_sat(2, kiln_shape_count(t)) : 0;
}
kiln_status_t kiln_nn_sce_loss_infer(kiln_infer_t* ctx) {
  return loss_infer(ctx, "SoftmaxCrossEntropyLoss", true);
}
kiln_status_t kiln_nn_sce_loss_run(const kiln_ref_ctx_t* ctx) {
  return loss_run(ctx, "SoftmaxCrossEntropyLoss", true);
}
int64_t kiln_nn_sce_loss_flops(const kiln_infer_t* ctx) {
  return loss_flops(ctx, 4);
}
