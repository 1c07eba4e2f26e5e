/* CenterCropPad (opset 18): each axis in |axes| (default all) is cropped or
 * zero-padded to the length the 1-D integer input |shape| gives, keeping
 * the input centred: a crop drops (in - out) / 2 leading elements, a pad
 * adds (out - in) / 2 leading zeros (both rounded down, as the ONNX
 * reference does). The output shape is |shape|'s value, so it must be
 * known at load for the compiled targets. */
#include <string.h>

#include "ir/ops/crop.h"
#include "ir/ops/tensor_impl.h"

/* Output dims of X (rank r, dims xd) given the shape input |s|. */
static kiln_status_t ccp_dims(const kiln_node_t* node, int32_t r, const int64_t* xd, const kiln_array_t* s,
                              int64_t* out) {
  int64_t want[KILN_MAX_RANK], nw = 0;
  KILN_TRY(kiln_tensor_read_ints("CenterCropPad", "shape", s, want, KILN_MAX_RANK, &nw));
  const int64_t* axes = NULL;
  int64_t na = -1;
  KILN_TRY(kiln_attr_ints(node, "axes", &axes, &na));
  if (na < 0) na = r;
  if (nw != na)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "CenterCropPad: shape has %lld entries for %lld axes",
                            (long long)nw, (long long)na);
  memcpy(out, xd, sizeof(int64_t) * (size_t)r);
  bool seen[KILN_MAX_RANK] = {false};
  for (int64_t k = 0; k < na; ++k) {
    int64_t a = axes ? axes[k] : k;
    if (a < 0) a += r;
    if (a < 0 || a >= r || seen[a])
      return kiln_make_status(KILN_INVALID_ARGUMENT, "CenterCropPad: axis %lld is out of range or repeated",
                              (long long)(axes ? axes[k] : k));
    seen[a] = true;
    if (want[k] < 0)
      return kiln_make_status(KILN_INVALID_ARGUMENT, "CenterCropPad: shape entry %lld is negative", (long long)want[k]);
    out[a] = want[k];
  }
  return NULL;
}

kiln_status_t kiln_tensor_center_crop_pad_infer(kiln_infer_t* ctx) {
  KILN_TRY(kiln_tensor_int_input(ctx, "CenterCropPad", 1, "shape"));
  const kiln_shape_t* xs = &ctx->in[0]->shape;
  const kiln_array_t* v = kiln_tensor_value(ctx, 1);
  kiln_shape_t out = xs->rank >= 0 ? kiln_tensor_unknown_rank(xs->rank) : kiln_shape_unknown();
  if (v && xs->rank >= 0) {
    /* unknown input dims stay unknown unless the shape input names them */
    int64_t xd[KILN_MAX_RANK];
    for (int32_t k = 0; k < xs->rank; ++k) xd[k] = xs->dims[k];
    KILN_TRY(ccp_dims(ctx->node, xs->rank, xd, v, out.dims));
  }
  kiln_infer_set(ctx, 0, ctx->in[0]->dtype, &out);
  return NULL;
}

kiln_status_t kiln_tensor_center_crop_pad_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* x = ctx->in[0];
  kiln_array_t* y = ctx->out[0];
  const int32_t r = x->shape.rank;
  int64_t od[KILN_MAX_RANK], off[KILN_MAX_RANK];
  KILN_TRY(ccp_dims(ctx->node, r, x->shape.dims, ctx->in[1], od));
  for (int32_t k = 0; k < r; ++k) {
    if (y->shape.dims[k] != od[k])
      return kiln_make_status(KILN_INTERNAL, "CenterCropPad: output dim %d is %lld, expected %lld", (int)k,
                              (long long)y->shape.dims[k], (long long)od[k]);
    off[k] = kiln_center_crop_offset(x->shape.dims[k], od[k]);
  }
  const size_t esz = kiln_dtype_size(x->dtype);
  const int64_t n = kiln_array_numel(y);
  memset(y->data, 0, (size_t)n * esz);
  for (int64_t o = 0; o < n; ++o) {
    int64_t rest = o, src = 0, stride = 1;
    bool in = true;
    for (int32_t k = r - 1; k >= 0; --k) {
      const int64_t i = rest % od[k] - off[k];
      rest /= od[k];
      in = in && i >= 0 && i < x->shape.dims[k];
      src += i * stride;
      stride *= x->shape.dims[k];
    }
    if (in) memcpy((char*)y->data + (size_t)o * esz, (const char*)x->data + (size_t)src * esz, esz);
  }
  return NULL;
}
