/* MaxUnpool (opsets 9, 11, 22): scatters X into zeros at the flat indices
 * MaxPool returned. The indices address the flattened inferred shape
 * [N, C, (in - 1) * stride - pads + kernel ...]; with output_shape (which
 * must cover it) that block sits at the output's origin and the rest stays
 * zero, as in the ONNX reference. An index outside the inferred shape is an
 * error (the compiled kernel reports it through the status word). */
#include <string.h>

#include "ir/ops/tensor_impl.h"
#include "ir/ops/unpool.h"

/* The inferred (scatter) shape from X's shape and the attributes. */
kiln_status_t kiln_max_unpool_shape(const kiln_node_t* node, const kiln_shape_t* xs, int64_t* dims) {
  int32_t r = xs->rank, n = r - 2;
  const int64_t *ks = NULL, *pads = NULL, *st = NULL;
  int64_t nk = 0, np = 0, ns = 0;
  KILN_TRY(kiln_attr_ints(node, "kernel_shape", &ks, &nk));
  KILN_TRY(kiln_attr_ints(node, "pads", &pads, &np));
  KILN_TRY(kiln_attr_ints(node, "strides", &st, &ns));
  if (r < 3 || nk != n || (np > 0 && np != 2 * n) || (ns > 0 && ns != n)) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "MaxUnpool: X of rank %d needs %d kernel_shape values (got %lld), "
                            "%d pads and %d strides",
                            (int)r, (int)n, (long long)nk, 2 * n, n);
  }
  dims[0] = xs->dims[0];
  dims[1] = xs->dims[1];
  for (int32_t k = 0; k < n; ++k) {
    int64_t s = ns > 0 ? st[k] : 1, p = np > 0 ? pads[k] + pads[n + k] : 0, d = xs->dims[2 + k];
    if (ks[k] < 1 || s < 1 || p < 0 || ks[k] > (1 << 20) || s > (1 << 20) || p > ((int64_t)1 << 31)) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "MaxUnpool: kernel %lld, stride %lld, pads %lld are out of range",
                              (long long)ks[k], (long long)s, (long long)p);
    }
    if (!kiln_dim_known(d)) {
      dims[2 + k] = KILN_DIM_UNKNOWN;
      continue;
    }
    dims[2 + k] = (d - 1) * s - p + ks[k];
    if (d < 1 || dims[2 + k] < 0 || d > ((int64_t)1 << 31)) {
      return kiln_make_status(KILN_INVALID_ARGUMENT, "MaxUnpool: spatial dim %d gives size %lld",
                              (int)k, (long long)dims[2 + k]);
    }
  }
  return NULL;
}

kiln_status_t kiln_tensor_max_unpool_infer(kiln_infer_t* ctx) {
  const kiln_tensor_t* x = ctx->in[0];
  const kiln_tensor_t* ind = ctx->in[1];
  if (x->dtype != KILN_DTYPE_UNDEFINED && !kiln_dtype_is_float(x->dtype)) {
    return kiln_make_status(KILN_UNSUPPORTED, "MaxUnpool: X of %s is not supported", kiln_dtype_name(x->dtype));
  }
  if (ind->dtype != KILN_DTYPE_UNDEFINED && ind->dtype != KILN_DTYPE_I64) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "MaxUnpool: I has dtype %s, expected int64",
                            kiln_dtype_name(ind->dtype));
  }
  int32_t r = x->shape.rank;
  if (r < 0) {
    kiln_infer_set(ctx, 0, x->dtype, &x->shape);
    return NULL;
  }
  if (ind->shape.rank >= 0 && !kiln_shape_equal(&ind->shape, &x->shape) && kiln_shape_is_static(&ind->shape) &&
      kiln_shape_is_static(&x->shape)) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "MaxUnpool: I's shape differs from X's");
  }
  kiln_shape_t out = kiln_tensor_unknown_rank(r);
  KILN_TRY(kiln_max_unpool_shape(ctx->node, &x->shape, out.dims));
  if (kiln_tensor_in(ctx, 2)) {
    const kiln_array_t* os = kiln_tensor_value(ctx, 2);
    int64_t want[KILN_MAX_RANK], n = 0;
    if (!os) {
      out = kiln_tensor_unknown_rank(r);
    } else {
      KILN_TRY(kiln_tensor_read_ints("MaxUnpool", "output_shape", os, want, KILN_MAX_RANK, &n));
      if (n != r) {
        return kiln_make_status(KILN_INVALID_ARGUMENT, "MaxUnpool: output_shape has %lld values, expected %d",
                                (long long)n, (int)r);
      }
      for (int32_t k = 0; k < r; ++k) {
        if (kiln_dim_known(out.dims[k]) && want[k] < out.dims[k]) {
          return kiln_make_status(KILN_INVALID_ARGUMENT,
                                  "MaxUnpool: output_shape[%d] = %lld is smaller than the unpooled %lld",
                                  (int)k, (long long)want[k], (long long)out.dims[k]);
        }
        out.dims[k] = want[k];
      }
    }
  }
  kiln_infer_set(ctx, 0, x->dtype, &out);
  return NULL;
}

kiln_status_t kiln_tensor_max_unpool_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  const kiln_array_t* ind = ctx->in[1];
  kiln_array_t* y = ctx->out[0];
  int32_t r = x->shape.rank;
  int64_t inf[KILN_MAX_RANK];
  KILN_TRY(kiln_max_unpool_shape(ctx->node, &x->shape, inf));
  if (ind->dtype != KILN_DTYPE_I64 || !kiln_shape_equal(&ind->shape, &x->shape) || y->shape.rank != r ||
      y->dtype != x->dtype) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "MaxUnpool: X, I and Y do not match");
  }
  int64_t total = 1, ys[KILN_MAX_RANK];
  for (int32_t k = 0; k < r; ++k) {
    if (y->shape.dims[k] < inf[k]) return kiln_make_status(KILN_INVALID_ARGUMENT, "MaxUnpool: Y is too small");
    total *= inf[k];
  }
  kiln_tensor_strides(&y->shape, ys);
  memset(y->data, 0, y->nbytes);
  size_t esz = kiln_dtype_size(x->dtype);
  int64_t n = kiln_array_numel(x);
  for (int64_t e = 0; e < n; ++e) {
    int64_t f = ((const int64_t*)ind->data)[e];
    if (f < 0 || f >= total) {
      return kiln_make_status(KILN_INVALID_ARGUMENT, "MaxUnpool: I[%lld] = %lld is outside [0, %lld)",
                              (long long)e, (long long)f, (long long)total);
    }
    int64_t off = 0;
    for (int32_t k = r - 1; k >= 0; --k) {
      off += (f % inf[k]) * ys[k];
      f /= inf[k];
    }
    memcpy((char*)y->data + off * (int64_t)esz, (const char*)x->data + e * (int64_t)esz, esz);
  }
  return NULL;
}
