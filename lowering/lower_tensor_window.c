/* Lowering of HannWindow, HammingWindow and BlackmanWindow
 * (ir/ops/tensor_window.c): one loop over the output computing
 * a0 - a1 cos(w i) + a2 cos(2 w i) in f32 with w = 2 pi / M folded at
 * compile time. The output's length is static here (size was a constant at
 * load: windows small enough fold there and never get here). */
#include <math.h>
#include <string.h>

#include "ir/ops/window.h"
#include "lowering/lower_ew_impl.h"
#include "lowering/lower_tensor_impl.h"

static kiln_status_t lower_window(kiln_lower_ctx_t* ctx) {
  const char* op = ctx->node->op_type;
  const tir_buffer_t* y = kiln_lew_out(ctx, 0);
  if (!y || y->rank != 1 || !kiln_dtype_is_float(y->dtype))
    return kiln_make_status(KILN_INTERNAL, "%s: output is not a 1-D float tensor", op);
  const int64_t n = y->shape[0];
  if (n == 0) return NULL;
  double a[3], m;
  KILN_RETURN_IF_ERROR(kiln_window_coeffs(op, ctx->node, n, a, &m));
  tir_ctx_t* c = ctx->tir;
  kiln_lew_nest_t nest;
  kiln_lew_nest_buf(c, &nest, y);
  const tir_expr_t* wi =
      tir_mul(c, tir_cast(c, KILN_DTYPE_F32, nest.idx[0]), kiln_lew_imm(c, KILN_DTYPE_F32, 2.0 * M_PI / m));
  const tir_expr_t* v =
      tir_sub(c, kiln_lew_imm(c, KILN_DTYPE_F32, a[0]),
              tir_mul(c, kiln_lew_imm(c, KILN_DTYPE_F32, a[1]), tir_call(c, TIR_COS, 1, wi, NULL, NULL)));
  if (a[2] != 0.0) {
    const tir_expr_t* w2 = tir_mul(c, wi, kiln_lew_imm(c, KILN_DTYPE_F32, 2.0));
    v = tir_add(c, v, tir_mul(c, kiln_lew_imm(c, KILN_DTYPE_F32, a[2]), tir_call(c, TIR_COS, 1, w2, NULL, NULL)));
  }
  if (v->dtype != y->dtype) v = tir_cast(c, y->dtype, v);
  const tir_buffer_t* params[1] = {y};
  return kiln_lew_emit(ctx, &nest, kiln_lew_loops(c, &nest, kiln_lew_store(c, &nest, y, v)), 1, params, true);
}

kiln_status_t kiln_lower_tensor_hann_window(kiln_lower_ctx_t* ctx) { return lower_window(ctx); }
kiln_status_t kiln_lower_tensor_hamming_window(kiln_lower_ctx_t* ctx) { return lower_window(ctx); }
kiln_status_t kiln_lower_tensor_blackman_window(kiln_lower_ctx_t* ctx) { return lower_window(ctx); }

/* MelWeightMatrix: its shape needs all five inputs' values, so they are
 * constants here; the matrix is computed at compile time (the reference's
 * arithmetic, kiln_mel_weights) into a constant that one kernel copies to
 * the output (matrices small enough fold at load and never get here). */
kiln_status_t kiln_lower_tensor_mel_weight_matrix(kiln_lower_ctx_t* ctx) {
  const tir_buffer_t* y = kiln_lew_out(ctx, 0);
  const kiln_array_t* in[5];
  for (int32_t k = 0; k < 5; ++k)
    if (!(in[k] = kiln_lew_const_in(ctx, k)))
      return kiln_make_status(KILN_UNSUPPORTED, "MelWeightMatrix: input %d is not a constant", (int)k);
  int64_t dims[2];
  KILN_RETURN_IF_ERROR(kiln_mel_weights(ctx->node, in, dims, NULL));
  if (!y || y->rank != 2 || y->shape[0] != dims[0] || y->shape[1] != dims[1] || !kiln_dtype_is_float(y->dtype))
    return kiln_make_status(KILN_INTERNAL, "MelWeightMatrix: output is not [%lld, %lld] floats", (long long)dims[0],
                            (long long)dims[1]);
  const kiln_allocator_t al = kiln_allocator_system();
  double* m = NULL;
  KILN_RETURN_IF_ERROR(
      kiln_allocator_malloc(al, sizeof(double) * (size_t)(dims[0] * dims[1]), "MelWeightMatrix", (void**)&m));
  kiln_array_t v;
  memset(&v, 0, sizeof v);
  kiln_shape_t s;
  memset(&s, 0, sizeof s);
  s.rank = 2;
  s.dims[0] = dims[0];
  s.dims[1] = dims[1];
  kiln_status_t st = kiln_mel_weights(ctx->node, in, dims, m);
  if (!st) st = kiln_array_alloc(al, y->dtype, &s, &v);
  for (int64_t i = 0; !st && i < dims[0] * dims[1]; ++i) kiln_store_f64(v.dtype, v.data, (size_t)i, m[i]);
  kiln_allocator_free(al, m);
  const tir_buffer_t* cb = NULL;
  if (!st) st = kiln_lower_const(ctx, "mel", &v, &cb);
  kiln_array_free(al, &v);
  KILN_RETURN_IF_ERROR(st);
  tir_ctx_t* c = ctx->tir;
  kiln_lew_nest_t nest;
  kiln_lew_nest_buf(c, &nest, y);
  const tir_buffer_t* params[2] = {cb, y};
  return kiln_lew_emit(ctx, &nest, kiln_lew_loops(c, &nest, kiln_lew_store(c, &nest, y, tir_load(c, cb, nest.idx))),
                       2, params, true);
}
