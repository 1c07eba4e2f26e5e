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

/* ---- MelWeightMatrix --------------------------------------------------------- */

kiln_status_t kiln_mel_weights(const kiln_node_t* node, const kiln_array_t* const* in, int64_t* dims,
                               double* out) {
  const char* nm = node->name ? node->name : "";
  for (int k = 0; k < 5; ++k)
    if (!in[k] || kiln_array_numel(in[k]) != 1 || (k < 3 && !kiln_dtype_is_int(in[k]->dtype)) ||
        (k >= 3 && !kiln_dtype_is_float(in[k]->dtype)))
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "MelWeightMatrix node '%s': input %d must be a scalar (integer for the first three, "
                              "float for the edges)",
                              nm, k);
  const int64_t bins = kiln_load_i64(in[0]->dtype, in[0]->data, 0);
  const int64_t dft = kiln_load_i64(in[1]->dtype, in[1]->data, 0);
  const int64_t rate = kiln_load_i64(in[2]->dtype, in[2]->data, 0);
  const float lo = (float)kiln_load_f64(in[3]->dtype, in[3]->data, 0);
  const float hi = (float)kiln_load_f64(in[4]->dtype, in[4]->data, 0);
  if (bins <= 0 || bins > (1 << 20) || dft <= 0 || dft > (1 << 24) || rate <= 0 || !(lo >= 0.0f) || !(hi >= lo))
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "MelWeightMatrix node '%s': num_mel_bins %lld, dft_length %lld, sample_rate %lld, "
                            "edges %g..%g are not positive or not ordered",
                            nm, (long long)bins, (long long)dft, (long long)rate, lo, hi);
  dims[0] = dft / 2 + 1;
  dims[1] = bins;
  if (!out) return NULL;
  /* The reference's arithmetic: the edge mels in f32 (f32 scalar inputs),
   * the bin frequencies in double, floored to whole spectrogram bins. */
  const float lo_mel = 2595.0f * log10f(1.0f + lo / 700.0f);
  const float hi_mel = 2595.0f * log10f(1.0f + hi / 700.0f);
  const float step = (hi_mel - lo_mel) / (float)(bins + 2);
  memset(out, 0, sizeof(double) * (size_t)(dims[0] * dims[1]));
  int64_t f[3];
  for (int64_t i = 0; i < bins; ++i) {
    for (int k = 0; k < 3; ++k) {
      const double hz = 700.0 * (pow(10.0, ((double)(i + k) * (double)step + (double)lo_mel) / 2595.0) - 1.0);
      f[k] = (int64_t)floor((double)(dft + 1) * hz / (double)rate);
      if (f[k] < 0 || f[k] >= dims[0])
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "MelWeightMatrix node '%s': upper_edge_hertz %g lies past the spectrogram's %lld "
                                "bins at sample_rate %lld",
                                nm, hi, (long long)dims[0], (long long)rate);
    }
    if (f[1] == f[0]) out[f[1] * bins + i] = 1.0;
    else
      for (int64_t j = f[0]; j <= f[1]; ++j) out[j * bins + i] = (double)(j - f[0]) / (double)(f[1] - f[0]);
    for (int64_t j = f[1]; j < f[2]; ++j) out[j * bins + i] = (double)(f[2] - j) / (double)(f[2] - f[1]);
  }
  return NULL;
}

kiln_status_t kiln_tensor_mel_weight_matrix_infer(kiln_infer_t* ctx) {
  kiln_dtype_t dt;
  KILN_TRY(out_dtype(ctx->node, "MelWeightMatrix", &dt));
  const kiln_array_t* v[5];
  bool known = true;
  for (int32_t k = 0; k < 5; ++k) known = (v[k] = kiln_tensor_value(ctx, k)) != NULL && known;
  kiln_shape_t out = kiln_tensor_unknown_rank(2);
  if (known) KILN_TRY(kiln_mel_weights(ctx->node, v, out.dims, NULL));
  kiln_infer_set(ctx, 0, dt, &out);
  return NULL;
}

kiln_status_t kiln_tensor_mel_weight_matrix_run(const kiln_ref_ctx_t* ctx) {
  int64_t dims[2];
  KILN_TRY(kiln_mel_weights(ctx->node, ctx->in, dims, NULL));
  kiln_array_t* y = ctx->out[0];
  if (kiln_array_numel(y) != dims[0] * dims[1] || !kiln_dtype_is_float(y->dtype))
    return kiln_make_status(KILN_INTERNAL, "MelWeightMatrix: output does not hold %lld floats",
                            (long long)(dims[0] * dims[1]));
  double* m = NULL;
  KILN_TRY(kiln_allocator_malloc(ctx->allocator, sizeof(double) * (size_t)(dims[0] * dims[1]), "MelWeightMatrix",
                                 (void**)&m));
  kiln_status_t st = kiln_mel_weights(ctx->node, ctx->in, dims, m);
  for (int64_t i = 0; !st && i < dims[0] * dims[1]; ++i) kiln_store_f64(y->dtype, y->data, (size_t)i, m[i]);
  kiln_allocator_free(ctx->allocator, m);
  return st;
}

#define WINDOW(stem, name)                                                                        \
  kiln_status_t kiln_tensor_##stem##_infer(kiln_infer_t* ctx) { return window_infer(ctx, name); } \
  kiln_status_t kiln_tensor_##stem##_run(const kiln_ref_ctx_t* ctx) { return window_run(ctx, name); }

WINDOW(hann_window, "HannWindow")
WINDOW(hamming_window, "HammingWindow")
WINDOW(blackman_window, "BlackmanWindow")
