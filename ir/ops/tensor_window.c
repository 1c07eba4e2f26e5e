/* The window generators HannWindow, HammingWindow and BlackmanWindow
 * (opset 17): y[i] = a0 - a1 cos(2 pi i / M) + a2 cos(4 pi i / M) for i in
 * [0, size), M = size when periodic (the default), size - 1 when not.
 * size is an integer scalar input; the output's length is its value, so it
 * must be known at load (a constant: small windows then fold there). The
 * output dtype is output_datatype (an ONNX dtype, default float); kiln
 * generates float windows only (an integer window is 0s and 1s, no use).
 */
#include <math.h>
#include <string.h>

#include "ir/ops/tensor_impl.h"
#include "ir/ops/window.h"

kiln_status_t kiln_window_coeffs(const char* op, const kiln_node_t* node, int64_t size, double* a,
                                 double* m) {
  int64_t periodic = 1;
  KILN_TRY(kiln_attr_int(node, "periodic", 1, &periodic));
  if (!strcmp(op, "HannWindow")) a[0] = 0.5, a[1] = 0.5, a[2] = 0.0;
  else if (!strcmp(op, "HammingWindow")) a[0] = 25.0 / 46.0, a[1] = 1.0 - 25.0 / 46.0, a[2] = 0.0;
  else a[0] = 0.42, a[1] = 0.5, a[2] = 0.08;
  *m = (double)(periodic ? size : size - 1);
  return NULL;
}

static kiln_status_t out_dtype(const kiln_node_t* node, const char* op, kiln_dtype_t* out) {
  int64_t dt = 1;
  KILN_TRY(kiln_attr_int(node, "output_datatype", 1, &dt));
  *out = kiln_dtype_from_onnx((int32_t)dt);
  if (!kiln_dtype_is_float(*out))
    return kiln_make_status(KILN_UNSUPPORTED, "%s node '%s': output_datatype %lld is not a float dtype kiln has",
                            op, node->name ? node->name : "", (long long)dt);
  return NULL;
}

static kiln_status_t size_of(const char* op, const kiln_array_t* s, int64_t* out) {
  if (kiln_array_numel(s) != 1 || (s->dtype != KILN_DTYPE_I64 && s->dtype != KILN_DTYPE_I32))
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: size must be an i32 or i64 scalar", op);
  *out = kiln_load_i64(s->dtype, s->data, 0);
  if (*out < 0 || *out > INT32_MAX)
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: size %lld is negative or too large", op, (long long)*out);
  return NULL;
}

static kiln_status_t window_infer(kiln_infer_t* ctx, const char* op) {
  kiln_dtype_t dt;
  KILN_TRY(out_dtype(ctx->node, op, &dt));
  KILN_TRY(kiln_tensor_int_input(ctx, op, 0, "size"));
  kiln_shape_t out = kiln_tensor_unknown_rank(1);
  const kiln_array_t* v = kiln_tensor_value(ctx, 0);
  if (v) KILN_TRY(size_of(op, v, &out.dims[0]));
  kiln_infer_set(ctx, 0, dt, &out);
  return NULL;
}

static kiln_status_t window_run(const kiln_ref_ctx_t* ctx, const char* op) {
  int64_t n = 0;
  KILN_TRY(size_of(op, ctx->in[0], &n));
  kiln_array_t* y = ctx->out[0];
  if (kiln_array_numel(y) != n || !kiln_dtype_is_float(y->dtype))
    return kiln_make_status(KILN_INTERNAL, "%s: output does not hold %lld floats", op, (long long)n);
  double a[3], m;
  KILN_TRY(kiln_window_coeffs(op, ctx->node, n, a, &m));
  for (int64_t i = 0; i < n; ++i) {
    const double w = 2.0 * M_PI * (double)i / m;
    kiln_store_f64(y->dtype, y->data, (size_t)i, a[0] - a[1] * cos(w) + a[2] * cos(2.0 * w));
  }
  return NULL;
}

#define WINDOW(stem, name)                                                                        \
  kiln_status_t kiln_tensor_##stem##_infer(kiln_infer_t* ctx) { return window_infer(ctx, name); } \
  kiln_status_t kiln_tensor_##stem##_run(const kiln_ref_ctx_t* ctx) { return window_run(ctx, name); }

WINDOW(hann_window, "HannWindow")
WINDOW(hamming_window, "HammingWindow")
WINDOW(blackman_window, "BlackmanWindow")
