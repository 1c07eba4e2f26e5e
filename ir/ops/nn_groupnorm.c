/* Channel-group normalisations: InstanceNormalization and
 * GroupNormalization, which normalise x [N, C, spatial...] over each
 * (n, group) block of C/G channels times the spatial size (G = C for
 * InstanceNormalization), y = (x - mean) / sqrt(var + epsilon) * scale + bias
 * with the biased variance. scale and bias are per channel [C], except in
 * GroupNormalization before opset 21, where they are per group [G]
 * (opset 21 deprecated that form because it could not express per-channel
 * affine parameters). Statistics are computed in double here.
 */
#include <math.h>
#include <string.h>

#include "ir/ops/nn_internal.h"

typedef struct gn_s {
  const char* op;
  int64_t groups;     /* G; 0 when unknown (C unknown for InstanceNorm) */
  int64_t param_len;  /* expected length of scale/bias: C or G, 0 = unknown */
  float eps;
} gn_t;

static kiln_status_t gn_setup(const kiln_node_t* node, int64_t opset,
                              bool instance, const kiln_shape_t* x, gn_t* g) {
  memset(g, 0, sizeof(*g));
  g->op = instance ? "InstanceNormalization" : "GroupNormalization";
  KILN_RETURN_IF_ERROR(kiln_attr_float(node, "epsilon", 1e-5f, &g->eps));
  const int64_t C = x->rank >= 2 ? x->dims[1] : KILN_DIM_UNKNOWN;
  if (instance) {
    g->groups = kiln_dim_known(C) ? C : 0;
    g->param_len = g->groups;
  } else {
    int64_t stash = 1;
    KILN_RETURN_IF_ERROR(kiln_attr_int(node, "num_groups", -1, &g->groups));
    KILN_RETURN_IF_ERROR(kiln_attr_int(node, "stash_type", 1, &stash));
    if (g->groups <= 0) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "GroupNormalization: num_groups must be given "
                              "and positive (got %lld)",
                              (long long)g->groups);
    }
    if (stash != 1) {
      return kiln_make_status(KILN_UNSUPPORTED,
                              "GroupNormalization: stash_type %lld is not "
                              "supported (statistics are computed in f32)",
                              (long long)stash);
    }
    if (kiln_dim_known(C) && C % g->groups) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "GroupNormalization: %lld channels do not split "
                              "into %lld groups",
                              (long long)C, (long long)g->groups);
    }
    g->param_len = opset >= 21 ? (kiln_dim_known(C) ? C : 0) : g->groups;
  }
  if (x->rank >= 0 && x->rank < 2) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "%s: input has rank %d, expected >= 2 (N, C, ...)",
                            g->op, (int)x->rank);
  }
  return NULL;
}

static kiln_status_t gn_infer(kiln_infer_t* ctx, bool instance) {
  gn_t g;
  KILN_RETURN_IF_ERROR(
      gn_setup(ctx->node, ctx->opset, instance, &ctx->in[0]->shape, &g));
  for (int32_t i = 0; i < 3; ++i)
    KILN_RETURN_IF_ERROR(kiln_nn_require_float(ctx, g.op, i));
  for (int32_t i = 1; i < 3; ++i) {
    const kiln_shape_t* s = &ctx->in[i]->shape;
    if (s->rank < 0) continue;
    if (s->rank != 1 || (g.param_len && kiln_dim_known(s->dims[0]) &&
                         s->dims[0] != g.param_len)) {
      char b[96];
      kiln_shape_format(s, b, sizeof b);
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: %s '%s' has shape %s, expected [%lld]",
                              g.op, i == 1 ? "scale" : "bias",
                              kiln_nn_in_name(ctx, i), b,
                              (long long)g.param_len);
    }
  }
  kiln_infer_set(ctx, 0, ctx->in[0]->dtype, &ctx->in[0]->shape);
  return NULL;
}

static int64_t gn_flops(const kiln_infer_t* ctx) {
  const kiln_shape_t* x = &ctx->in[0]->shape;
  return kiln_shape_is_static(x) ? kiln_nn_mul_sat(5, kiln_shape_count(x)) : 0;
}

static kiln_status_t gn_run(const kiln_ref_ctx_t* ctx, bool instance) {
  const kiln_array_t* X = ctx->in[0];
  gn_t g;
  KILN_RETURN_IF_ERROR(gn_setup(ctx->node, ctx->opset, instance, &X->shape, &g));
  const int64_t N = X->shape.dims[0], C = X->shape.dims[1];
  const int64_t plane = kiln_nn_prod(&X->shape, 2, X->shape.rank);
  const int64_t G = g.groups, cpg = C / G, R = cpg * plane;
  const bool per_group = !instance && ctx->opset < 21;
  for (int32_t i = 1; i < 3; ++i) {
    /* infer checked the shapes it knew; these are the values */
    if (kiln_array_numel(ctx->in[i]) != (per_group ? G : C)) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: %s has %lld elements, expected %lld", g.op,
                              i == 1 ? "scale" : "bias",
                              (long long)kiln_array_numel(ctx->in[i]),
                              (long long)(per_group ? G : C));
    }
  }
  const float *x, *sc, *bi;
  float *xs = NULL, *ss = NULL, *bs = NULL, *y, *ys = NULL;
  kiln_status_t st = kiln_nn_f32_load(ctx, X, &x, &xs);
  if (!st) st = kiln_nn_f32_load(ctx, ctx->in[1], &sc, &ss);
  if (!st) st = kiln_nn_f32_load(ctx, ctx->in[2], &bi, &bs);
  if (!st) st = kiln_nn_f32_dest(ctx, ctx->out[0], &y, &ys);
  if (!st) {
    for (int64_t row = 0; row < N * G; ++row) {
      const float* xr = x + row * R;
      double mean = 0.0, var = 0.0;
      for (int64_t i = 0; i < R; ++i) mean += xr[i];
      mean = R ? mean / (double)R : 0.0;
      for (int64_t i = 0; i < R; ++i) var += (xr[i] - mean) * (xr[i] - mean);
      var = R ? var / (double)R : 0.0;
      const double inv = 1.0 / sqrt(var + (double)g.eps);
      const int64_t grp = row % G;
      for (int64_t i = 0; i < R; ++i) {
        const int64_t p = per_group ? grp : grp * cpg + i / (plane ? plane : 1);
        y[row * R + i] = (float)((xr[i] - mean) * inv * sc[p] + bi[p]);
      }
    }
    kiln_nn_f32_store(ctx, ctx->out[0], ys);
  }
  kiln_nn_scratch_free(ctx, xs);
  kiln_nn_scratch_free(ctx, ss);
  kiln_nn_scratch_free(ctx, bs);
  return st;
}

kiln_status_t kiln_nn_instancenorm_infer(kiln_infer_t* ctx) { return gn_infer(ctx, true); }
kiln_status_t kiln_nn_instancenorm_run(const kiln_ref_ctx_t* ctx) { return gn_run(ctx, true); }
int64_t kiln_nn_instancenorm_flops(const kiln_infer_t* ctx) { return gn_flops(ctx); }
kiln_status_t kiln_nn_groupnorm_infer(kiln_infer_t* ctx) { return gn_infer(ctx, false); }
kiln_status_t kiln_nn_groupnorm_run(const kiln_ref_ctx_t* ctx) { return gn_run(ctx, false); }
int64_t kiln_nn_groupnorm_flops(const kiln_infer_t* ctx) { return gn_flops(ctx); }
