/* Det: the determinant of each square matrix in the last two dims of X
 * ([..., M, M] -> [...]), by LU factorisation with partial pivoting (the
 * row of the largest magnitude in the column becomes the pivot, as LAPACK's
 * getrf behind numpy.linalg.det does). The reference works in double. */
#include <math.h>
#include <string.h>

#include "ir/ops/nn_internal.h"

kiln_status_t kiln_nn_det_infer(kiln_infer_t* ctx) {
  KILN_RETURN_IF_ERROR(kiln_nn_require_float(ctx, "Det", 0));
  const kiln_shape_t* x = &ctx->in[0]->shape;
  if (x->rank < 0) {
    kiln_shape_t u = kiln_shape_unknown();
    kiln_infer_set(ctx, 0, ctx->in[0]->dtype, &u);
    return NULL;
  }
  if (x->rank < 2)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Det: input %s has rank %d, expected [..., M, M]",
                            kiln_nn_in_name(ctx, 0), (int)x->rank);
  const int64_t a = x->dims[x->rank - 2], b = x->dims[x->rank - 1];
  if (a >= 0 && b >= 0 && a != b)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Det: input %s has matrices of %lld x %lld, not square",
                            kiln_nn_in_name(ctx, 0), (long long)a, (long long)b);
  kiln_shape_t out = *x;
  out.rank = x->rank - 2;
  kiln_infer_set(ctx, 0, ctx->in[0]->dtype, &out);
  return NULL;
}

kiln_status_t kiln_nn_det_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* X = ctx->in[0];
  const int64_t m = X->shape.dims[X->shape.rank - 1];
  const int64_t batch = kiln_nn_prod(&X->shape, 0, X->shape.rank - 2);
  const float* x;
  float* xs = NULL;
  double* a = NULL;
  kiln_status_t st = kiln_nn_f32_load(ctx, X, &x, &xs);
  if (!st) st = kiln_nn_scratch(ctx, m * m > 0 ? m * m : 1, sizeof(double), "Det matrix", (void**)&a);
  for (int64_t b = 0; !st && b < batch; ++b) {
    for (int64_t i = 0; i < m * m; ++i) a[i] = x[b * m * m + i];
    double det = 1.0;
    for (int64_t k = 0; k < m; ++k) {
      int64_t p = k;
      for (int64_t i = k + 1; i < m; ++i)
        if (fabs(a[i * m + k]) > fabs(a[p * m + k])) p = i;
      if (p != k) {
        det = -det;
        for (int64_t j = 0; j < m; ++j) {
          const double t = a[k * m + j];
          a[k * m + j] = a[p * m + j];
          a[p * m + j] = t;
        }
      }
      det *= a[k * m + k];
      if (a[k * m + k] == 0.0) break;
      for (int64_t i = k + 1; i < m; ++i) {
        const double f = a[i * m + k] / a[k * m + k];
        for (int64_t j = k + 1; j < m; ++j) a[i * m + j] -= f * a[k * m + j];
      }
    }
    kiln_store_f64(ctx->out[0]->dtype, ctx->out[0]->data, (size_t)b, det);
  }
  kiln_nn_scratch_free(ctx, xs);
  kiln_nn_scratch_free(ctx, a);
  return st;
}

int64_t kiln_nn_det_flops(const kiln_infer_t* ctx) {
  const kiln_shape_t* x = &ctx->in[0]->shape;
  if (!kiln_shape_is_static(x) || x->rank < 2) return 0;
  const int64_t m = x->dims[x->rank - 1];
  /* about 2/3 m^3 per matrix */
  return kiln_nn_mul_sat(kiln_nn_prod(x, 0, x->rank - 2), kiln_nn_mul_sat(2 * m, m * m) / 3);
}
