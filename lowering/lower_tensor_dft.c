/* Lowering of DFT and STFT (ir/ops/tensor_dft.c) to TIR: one loop nest over the
 * output [..., bins, 2]; per element a serial loop over the used samples
 * sums x[n] * e^(-+ 2 pi i k n / L) into a private f32 accumulator. The
 * twiddles come from constant cos/sin tables of L entries computed in
 * double at lowering time, indexed by (k * n) mod L, so no angle is
 * rounded in f32. A direct O(L^2) transform per signal: fine for the short
 * signals of the node tests and audio frames, slow for long ones (no FFT
 * yet). */
#include <math.h>
#include <string.h>

#include "ir/ops/dft.h"
#include "lowering/lower_ew_impl.h"
#include "lowering/lower_tensor_impl.h"

#define TRY(expr)                  \
  do {                             \
    kiln_status_t try_s_ = (expr); \
    if (try_s_) return try_s_;     \
  } while (0)

/* A constant f32 table of |n| values. */
static kiln_status_t table(kiln_lower_ctx_t* ctx, const char* name, int64_t n, const float* v,
                           const tir_buffer_t** out) {
  kiln_array_t arr;
  kiln_shape_t s = kiln_shape_make(1, &n);
  TRY(kiln_array_alloc(kiln_allocator_system(), KILN_DTYPE_F32, &s, &arr));
  memcpy(arr.data, v, arr.nbytes);
  return kiln_lower_const(ctx, name, &arr, out);
}

/* Constant twiddle tables cos(2 pi m / L) and -+sin(2 pi m / L), m < L. */
static kiln_status_t twiddles(kiln_lower_ctx_t* ctx, int64_t L, bool inverse, const tir_buffer_t** tc,
                              const tir_buffer_t** ts) {
  tir_ctx_t* c = ctx->tir;
  float* cs = kiln_arena_alloc(&c->arena, sizeof(float) * (size_t)L);
  float* sn = kiln_arena_alloc(&c->arena, sizeof(float) * (size_t)L);
  if (!cs || !sn) return kiln_make_status(KILN_OUT_OF_MEMORY, "DFT: twiddle tables");
  const double sg = inverse ? 1.0 : -1.0;
  for (int64_t m = 0; m < L; ++m) {
    double th = 2.0 * M_PI * (double)m / (double)L;
    cs[m] = (float)cos(th);
    sn[m] = (float)(sg * sin(th));
  }
  TRY(table(ctx, "dft_cos", L, cs, tc));
  return table(ctx, "dft_sin", L, sn, ts);
}

/* acc = 0; for n < n_in: acc += (real or imaginary part, by |part| == 0)
 * of (xr + i xim) * twiddle((k * n) mod L). xr and xim (NULL: real input)
 * are loads in terms of loop variable |nv|. Returns the statements; the
 * private accumulator in |*acc| (the caller allocates its scope). */
static const tir_stmt_t* sum_loop(tir_ctx_t* c, const tir_buffer_t* tc, const tir_buffer_t* ts, int64_t L,
                                  const tir_expr_t* k, const tir_var_t* nv, int64_t n_in, const tir_expr_t* xr,
                                  const tir_expr_t* xim, const tir_expr_t* part, const tir_buffer_t** acc) {
  const int64_t one = 1;
  *acc = tir_buffer(c, "dft_acc", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_expr_t* z[1] = {tir_int(c, 0)};
  const tir_expr_t* m = tir_bin(c, TIR_FLOORMOD, tir_mul(c, k, tir_ref(c, nv)), tir_int(c, L));
  const tir_expr_t* cv = tir_load(c, tc, &m);
  const tir_expr_t* sv = tir_load(c, ts, &m);
  const tir_expr_t* re = tir_mul(c, xr, cv);
  const tir_expr_t* im = tir_mul(c, xr, sv);
  if (xim) {
    re = tir_sub(c, re, tir_mul(c, xim, sv));
    im = tir_add(c, im, tir_mul(c, xim, cv));
  }
  const tir_expr_t* is_re = tir_bin(c, TIR_EQ, part, tir_int(c, 0));
  const tir_stmt_t* step = tir_store(c, *acc, z, tir_add(c, tir_load(c, *acc, z), tir_select(c, is_re, re, im)));
  return tir_seq2(c, tir_store(c, *acc, z, tir_const(c, KILN_DTYPE_F32, 0.0)),
                  tir_for(c, nv, n_in, TIR_LOOP_SERIAL, step));
}

kiln_status_t kiln_lower_tensor_dft(kiln_lower_ctx_t* ctx) {
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* x = kiln_lew_in(ctx, 0);
  const tir_buffer_t* y = kiln_lew_out(ctx, 0);
  if (!x || !y) return kiln_make_status(KILN_INVALID_ARGUMENT, "DFT: missing input or output");
  const kiln_array_t* lv = NULL;
  const kiln_array_t* av = NULL;
  if (kiln_lew_in(ctx, 1) && !(lv = kiln_lew_const_in(ctx, 1)))
    return kiln_make_status(KILN_UNSUPPORTED, "DFT: input 'dft_length' computed at run time is not supported");
  if (ctx->opset >= 20 && kiln_lew_in(ctx, 2) && !(av = kiln_lew_const_in(ctx, 2)))
    return kiln_make_status(KILN_UNSUPPORTED, "DFT: input 'axis' computed at run time is not supported");
  kiln_shape_t xs = kiln_shape_make(x->rank, x->shape);
  dft_t d;
  TRY(kiln_dft_params(ctx->node, ctx->opset, &xs, lv, av, &d));
  const int32_t r = x->rank;
  if (y->rank != r || y->dtype != x->dtype || y->shape[d.axis] != d.n_out || y->shape[r - 1] != 2)
    return kiln_make_status(KILN_INTERNAL, "DFT: output shape mismatch");
  if (tir_buffer_numel(y) == 0) return NULL;
  const int64_t L = d.length;
  const tir_buffer_t *tc, *ts;
  TRY(twiddles(ctx, L, d.inverse, &tc, &ts));
  kiln_lew_nest_t nest;
  kiln_lew_nest_buf(c, &nest, y);
  const tir_var_t* nv = tir_var(c, "n");
  const tir_expr_t* xi[KILN_MAX_RANK];
  for (int32_t k = 0; k < r; ++k) xi[k] = nest.idx[k];
  xi[d.axis] = tir_ref(c, nv);
  xi[r - 1] = tir_int(c, 0);
  const tir_expr_t* xr = kiln_lew_f32(c, tir_load(c, x, xi));
  const tir_expr_t* xim = NULL;
  if (d.complex_in) {
    xi[r - 1] = tir_int(c, 1);
    xim = kiln_lew_f32(c, tir_load(c, x, xi));
  }
  const tir_buffer_t* acc;
  const tir_stmt_t* inner = sum_loop(c, tc, ts, L, nest.idx[d.axis], nv, d.n_in, xr, xim, nest.idx[r - 1], &acc);
  const tir_expr_t* z[1] = {tir_int(c, 0)};
  const tir_expr_t* res = tir_load(c, acc, z);
  if (d.inverse) res = tir_mul(c, res, tir_const(c, KILN_DTYPE_F32, 1.0 / (double)L));
  if (y->dtype != KILN_DTYPE_F32) res = tir_cast(c, y->dtype, res);
  const tir_stmt_t* body =
      kiln_lew_loops(c, &nest, tir_alloc(c, acc, tir_seq2(c, inner, kiln_lew_store(c, &nest, y, res))));
  const tir_buffer_t* params[4] = {x, tc, ts, y};
  return kiln_lew_emit(ctx, &nest, body, 4, params, false);
}

/* STFT: the same sum over frame f's samples x[b, f * step + n] times the
 * window (a run-time input, loaded per sample) into [b, f, bin, 2]. */
kiln_status_t kiln_lower_tensor_stft(kiln_lower_ctx_t* ctx) {
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* x = kiln_lew_in(ctx, 0);
  const tir_buffer_t* w = kiln_lew_in(ctx, 2);
  const tir_buffer_t* y = kiln_lew_out(ctx, 0);
  if (!x || !y) return kiln_make_status(KILN_INVALID_ARGUMENT, "STFT: missing input or output");
  const kiln_array_t* sv = kiln_lew_const_in(ctx, 1);
  const kiln_array_t* lv = NULL;
  if (!sv || (kiln_lew_in(ctx, 3) && !(lv = kiln_lew_const_in(ctx, 3))))
    return kiln_make_status(KILN_UNSUPPORTED, "STFT: frame_step and frame_length computed at run time are not supported");
  kiln_shape_t xs = kiln_shape_make(x->rank, x->shape);
  kiln_shape_t ws = w ? kiln_shape_make(w->rank, w->shape) : xs;
  stft_t p;
  TRY(kiln_stft_params(ctx->node, &xs, sv, w ? &ws : NULL, lv, &p));
  if (y->rank != 4 || y->dtype != x->dtype || y->shape[1] != p.frames || y->shape[2] != p.bins || (w && w->dtype != x->dtype))
    return kiln_make_status(KILN_INTERNAL, "STFT: output shape mismatch");
  if (tir_buffer_numel(y) == 0) return NULL;
  const tir_buffer_t *tc, *ts;
  TRY(twiddles(ctx, p.length, false, &tc, &ts));
  kiln_lew_nest_t nest;
  kiln_lew_nest_buf(c, &nest, y);
  const tir_var_t* nv = tir_var(c, "n");
  const tir_expr_t* n = tir_ref(c, nv);
  const tir_expr_t* xi[3] = {nest.idx[0], tir_add(c, tir_mul(c, nest.idx[1], tir_int(c, p.step)), n), tir_int(c, 0)};
  const tir_expr_t* wv = w ? kiln_lew_f32(c, tir_load(c, w, &n)) : NULL;
  const tir_expr_t* xr = kiln_lew_f32(c, tir_load(c, x, xi));
  if (wv) xr = tir_mul(c, wv, xr);
  const tir_expr_t* xim = NULL;
  if (p.complex_in) {
    xi[2] = tir_int(c, 1);
    xim = kiln_lew_f32(c, tir_load(c, x, xi));
    if (wv) xim = tir_mul(c, wv, xim);
  }
  const tir_buffer_t* acc;
  const tir_stmt_t* inner = sum_loop(c, tc, ts, p.length, nest.idx[2], nv, p.length, xr, xim, nest.idx[3], &acc);
  const tir_expr_t* z[1] = {tir_int(c, 0)};
  const tir_expr_t* res = tir_load(c, acc, z);
  if (y->dtype != KILN_DTYPE_F32) res = tir_cast(c, y->dtype, res);
  const tir_stmt_t* body =
      kiln_lew_loops(c, &nest, tir_alloc(c, acc, tir_seq2(c, inner, kiln_lew_store(c, &nest, y, res))));
  const tir_buffer_t* params[5] = {x, tc, ts, y, w};
  return kiln_lew_emit(ctx, &nest, body, w ? 5 : 4, params, false);
}
