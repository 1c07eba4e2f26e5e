/* Upsample (opsets 7 and 9, deprecated by Resize): kiln supports what the
 * ONNX reference implements, mode "nearest" with whole-number scales >= 1,
 * where each element repeats scale times along each axis:
 * y[o] = x[o / scale] per axis. The scales are the attribute (opset 7) or
 * the f32 input (opset 9, which must be known at load: it sets the output
 * shape). Other modes and fractional scales are UNSUPPORTED, naming the
 * node (Resize covers them). */
#include <math.h>
#include <string.h>

#include "ir/ops/tensor_impl.h"

/* Integer scales of an Upsample node with an input of rank |r|, from the
 * attribute (|sv| NULL) or the scales input |sv|. */
static kiln_status_t up_scales(const kiln_node_t* node, int64_t opset, int32_t r, const kiln_array_t* sv,
                               int64_t* out) {
  const char* nm = node->name ? node->name : "";
  const char* mode = NULL;
  KILN_TRY(kiln_attr_string(node, "mode", "nearest", &mode));
  if (strcmp(mode, "nearest") != 0)
    return kiln_make_status(KILN_UNSUPPORTED, "Upsample node '%s': mode '%s' is not supported (use Resize)", nm,
                            mode);
  double s[KILN_MAX_RANK];
  int64_t n = 0;
  if (opset < 9) {
    const float* f = NULL;
    KILN_TRY(kiln_attr_floats(node, "scales", &f, &n));
    if (n < 0) return kiln_make_status(KILN_INVALID_ARGUMENT, "Upsample node '%s': attribute scales is missing", nm);
    for (int64_t k = 0; k < n && k < KILN_MAX_RANK; ++k) s[k] = f[k];
  } else {
    if (!sv || (sv->dtype != KILN_DTYPE_F32 && sv->dtype != KILN_DTYPE_F16) || sv->shape.rank != 1)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "Upsample node '%s': scales must be a 1-D float tensor", nm);
    n = kiln_array_numel(sv);
    for (int64_t k = 0; k < n && k < KILN_MAX_RANK; ++k) s[k] = kiln_load_f64(sv->dtype, sv->data, (size_t)k);
  }
  if (n != r)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Upsample node '%s': %lld scales for an input of rank %d", nm,
                            (long long)n, (int)r);
  for (int32_t k = 0; k < r; ++k) {
    if (!(s[k] >= 1.0 && s[k] <= 1e6) || s[k] != floor(s[k]))
      return kiln_make_status(KILN_UNSUPPORTED,
                              "Upsample node '%s': scale %g on axis %d is not a whole number >= 1 (use Resize)", nm,
                              s[k], (int)k);
    out[k] = (int64_t)s[k];
  }
  return NULL;
}

kiln_status_t kiln_tensor_upsample_infer(kiln_infer_t* ctx) {
  const kiln_shape_t* xs = &ctx->in[0]->shape;
  const kiln_array_t* sv = ctx->opset >= 9 && ctx->n_in > 1 ? kiln_tensor_value(ctx, 1) : NULL;
  if (ctx->opset >= 9 && (ctx->n_in < 2 || !ctx->in[1]))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Upsample: input 'scales' is missing");
  kiln_shape_t out = xs->rank >= 0 ? kiln_tensor_unknown_rank(xs->rank) : kiln_shape_unknown();
  if (xs->rank >= 0 && (ctx->opset < 9 || sv)) {
    int64_t s[KILN_MAX_RANK];
    KILN_TRY(up_scales(ctx->node, ctx->opset, xs->rank, sv, s));
    for (int32_t k = 0; k < xs->rank; ++k) out.dims[k] = xs->dims[k] >= 0 ? xs->dims[k] * s[k] : -1;
  }
  kiln_infer_set(ctx, 0, ctx->in[0]->dtype, &out);
  return NULL;
}

kiln_status_t kiln_tensor_upsample_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  kiln_array_t* y = ctx->out[0];
  const int32_t r = x->shape.rank;
  int64_t s[KILN_MAX_RANK];
  KILN_TRY(up_scales(ctx->node, ctx->opset, r, ctx->opset >= 9 ? ctx->in[1] : NULL, s));
  for (int32_t k = 0; k < r; ++k)
    if (y->shape.dims[k] != x->shape.dims[k] * s[k])
      return kiln_make_status(KILN_INTERNAL, "Upsample: output dim %d does not match", (int)k);
  const size_t esz = kiln_dtype_size(x->dtype);
  const int64_t n = kiln_array_numel(y);
  for (int64_t o = 0; o < n; ++o) {
    int64_t rest = o, src = 0, stride = 1;
    for (int32_t k = r - 1; k >= 0; --k) {
      src += (rest % y->shape.dims[k]) / s[k] * stride;
      rest /= y->shape.dims[k];
      stride *= x->shape.dims[k];
    }
    memcpy((char*)y->data + (size_t)o * esz, (const char*)x->data + (size_t)src * esz, esz);
  }
  return NULL;
}
