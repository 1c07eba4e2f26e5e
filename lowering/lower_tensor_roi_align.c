/* Lowering of RoiAlign (ir/ops/tensor_roi_align.c) to TIR: one loop nest
 * over Y [R, C, out_h, out_w]; per bin, serial loops over the
 * sampling_ratio^2 samples compute each sample's coordinates from the roi
 * (f32, the reference's rules) into private scalars, then its four clamped
 * corner loads. sampling_ratio 0 (sample count from the roi's size, known
 * only at run time) is UNSUPPORTED here. batch_indices outside [0, N) fail
 * the run through a check kernel and the status word; the kernel clamps
 * them so it never reads outside X. */
#include "ir/ops/roi_align.h"
#include "lowering/lower_ew_impl.h"
#include "lowering/lower_tensor_impl.h"

#define TRY(expr)                  \
  do {                             \
    kiln_status_t try_s_ = (expr); \
    if (try_s_) return try_s_;     \
  } while (0)

static const tir_expr_t* batch_bad(tir_ctx_t* c, const tir_expr_t* v, const void* user) {
  const int64_t n = *(const int64_t*)user;
  const tir_expr_t* i = tir_cast(c, KILN_DTYPE_I64, v);
  return tir_bin(c, TIR_OR, tir_bin(c, TIR_LT, i, tir_int(c, 0)), tir_bin(c, TIR_GE, i, tir_int(c, n)));
}

static const tir_expr_t* fc(tir_ctx_t* c, double v) { return tir_const(c, KILN_DTYPE_F32, v); }

kiln_status_t kiln_lower_tensor_roi_align(kiln_lower_ctx_t* ctx) {
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* x = kiln_lew_in(ctx, 0);
  const tir_buffer_t* rois = kiln_lew_in(ctx, 1);
  const tir_buffer_t* bi = kiln_lew_in(ctx, 2);
  const tir_buffer_t* y = kiln_lew_out(ctx, 0);
  if (!x || !rois || !bi || !y) return kiln_make_status(KILN_INVALID_ARGUMENT, "RoiAlign: missing input or output");
  roi_align_t a;
  TRY(kiln_roi_align_attrs(ctx->node, ctx->opset, &a));
  if (a.sampling == 0)
    return kiln_make_status(KILN_UNSUPPORTED,
                            "RoiAlign: sampling_ratio 0 (samples per bin from each roi's size) is not "
                            "supported by compiled kernels");
  if (x->rank != 4 || rois->rank != 2 || bi->rank != 1 || y->rank != 4 || y->dtype != x->dtype)
    return kiln_make_status(KILN_INTERNAL, "RoiAlign: X, rois, batch_indices and Y do not match");
  if (tir_buffer_numel(y) == 0) return NULL;
  const int64_t N = x->shape[0], H = x->shape[2], W = x->shape[3], G = a.sampling;
  if (H == 0 || W == 0) return kiln_make_status(KILN_INVALID_ARGUMENT, "RoiAlign: X is empty");
  TRY(kiln_lew_check(ctx, bi, batch_bad, &N, KILN_CHECK_INDEX_RANGE));
  const kiln_dtype_t F = KILN_DTYPE_F32, I = KILN_DTYPE_I64;
  const int64_t one = 1, two = 2, four = 4;
  const tir_buffer_t* acc = tir_buffer(c, "ra_acc", F, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_buffer_t* pt = tir_buffer(c, "ra_pt", F, 1, &two, TIR_SCOPE_PRIVATE);
  const tir_buffer_t* pl = tir_buffer(c, "ra_l", F, 1, &two, TIR_SCOPE_PRIVATE);
  const tir_buffer_t* pi = tir_buffer(c, "ra_i", I, 1, &four, TIR_SCOPE_PRIVATE);
  const tir_expr_t* ix_[4];
  for (int k = 0; k < 4; ++k) ix_[k] = tir_int(c, k);
  kiln_lew_nest_t nest;
  kiln_lew_nest_buf(c, &nest, y);
  const tir_expr_t *r = nest.idx[0], *ch = nest.idx[1], *ph = nest.idx[2], *pw = nest.idx[3];
  const double off = a.half_pixel ? 0.5 : 0.0;
  const tir_expr_t* v[4];
  for (int k = 0; k < 4; ++k) {
    const tir_expr_t* ri[2] = {r, ix_[k]};
    v[k] = tir_sub(c, tir_mul(c, kiln_lew_f32(c, tir_load(c, rois, ri)), fc(c, a.scale)), fc(c, off));
  }
  const tir_expr_t* rw = tir_sub(c, v[2], v[0]);
  const tir_expr_t* rh = tir_sub(c, v[3], v[1]);
  if (!a.half_pixel) {
    rw = tir_bin(c, TIR_MAX, rw, fc(c, 1.0));
    rh = tir_bin(c, TIR_MAX, rh, fc(c, 1.0));
  }
  const tir_expr_t* bh = tir_bin(c, TIR_DIV, rh, fc(c, (double)a.out_h));
  const tir_expr_t* bw = tir_bin(c, TIR_DIV, rw, fc(c, (double)a.out_w));
  const tir_var_t* vy = tir_var(c, "sy");
  const tir_var_t* vx = tir_var(c, "sx");
  /* Sample point: start + bin * size + (i + 0.5) * size / G. */
  const tir_expr_t* half_y = tir_add(c, tir_cast(c, F, tir_ref(c, vy)), fc(c, 0.5));
  const tir_expr_t* half_x = tir_add(c, tir_cast(c, F, tir_ref(c, vx)), fc(c, 0.5));
  const tir_expr_t* yy = tir_add(c, tir_add(c, v[1], tir_mul(c, tir_cast(c, F, ph), bh)),
                                 tir_bin(c, TIR_DIV, tir_mul(c, half_y, bh), fc(c, (double)G)));
  const tir_expr_t* xx = tir_add(c, tir_add(c, v[0], tir_mul(c, tir_cast(c, F, pw), bw)),
                                 tir_bin(c, TIR_DIV, tir_mul(c, half_x, bw), fc(c, (double)G)));
  const tir_stmt_t* st[12];
  int32_t ns = 0;
  st[ns++] = tir_store(c, pt, &ix_[0], yy);
  st[ns++] = tir_store(c, pt, &ix_[1], xx);
  const tir_expr_t* pos[2] = {tir_load(c, pt, &ix_[0]), tir_load(c, pt, &ix_[1])};
  const int64_t size[2] = {H, W};
  for (int k = 0; k < 2; ++k) {
    /* Clamp below at 0; at or past the last pixel both corners are it. */
    const tir_expr_t* p = tir_bin(c, TIR_MIN, tir_bin(c, TIR_MAX, pos[k], fc(c, 0.0)), fc(c, (double)size[k]));
    const tir_expr_t* lo = kiln_lew_f2i(c, I, p);
    const tir_expr_t* edge = tir_bin(c, TIR_GE, lo, tir_int(c, size[k] - 1));
    st[ns++] = tir_store(c, pi, &ix_[2 * k], tir_select(c, edge, tir_int(c, size[k] - 1), lo));
    st[ns++] = tir_store(c, pi, &ix_[2 * k + 1],
                         tir_select(c, edge, tir_int(c, size[k] - 1), tir_add(c, lo, tir_int(c, 1))));
    st[ns++] = tir_store(c, pl, &ix_[k], tir_select(c, edge, fc(c, 0.0), tir_sub(c, p, tir_cast(c, F, lo))));
  }
  const tir_expr_t* valid =
      tir_bin(c, TIR_AND,
              tir_bin(c, TIR_AND, tir_bin(c, TIR_GE, pos[0], fc(c, -1.0)), tir_bin(c, TIR_LE, pos[0], fc(c, (double)H))),
              tir_bin(c, TIR_AND, tir_bin(c, TIR_GE, pos[1], fc(c, -1.0)), tir_bin(c, TIR_LE, pos[1], fc(c, (double)W))));
  const tir_expr_t* b = kiln_lew_clamp(c, tir_cast(c, I, tir_load(c, bi, &r)), 0, N - 1);
  const tir_expr_t* ly = tir_load(c, pl, &ix_[0]);
  const tir_expr_t* lx = tir_load(c, pl, &ix_[1]);
  const tir_expr_t* wy[2] = {tir_sub(c, fc(c, 1.0), ly), ly};
  const tir_expr_t* wx[2] = {tir_sub(c, fc(c, 1.0), lx), lx};
  const tir_expr_t* sum = NULL;
  const tir_expr_t* mx = NULL;
  for (int cy = 0; cy < 2; ++cy) {
    for (int cx = 0; cx < 2; ++cx) {
      const tir_expr_t* xi[4] = {b, ch, kiln_lew_clamp(c, tir_load(c, pi, &ix_[cy]), 0, H - 1),
                                 kiln_lew_clamp(c, tir_load(c, pi, &ix_[2 + cx]), 0, W - 1)};
      const tir_expr_t* t = tir_mul(c, tir_mul(c, wy[cy], wx[cx]), kiln_lew_f32(c, tir_load(c, x, xi)));
      sum = sum ? tir_add(c, sum, t) : t;
      mx = mx ? tir_bin(c, TIR_MAX, mx, t) : t;
    }
  }
  const tir_expr_t* z = ix_[0];
  const tir_expr_t* cur = tir_load(c, acc, &z);
  const tir_expr_t* upd;
  if (a.max) {
    const tir_expr_t* m = tir_select(c, valid, mx, fc(c, 0.0));
    const tir_expr_t* first = tir_bin(c, TIR_AND, tir_bin(c, TIR_EQ, tir_ref(c, vy), tir_int(c, 0)),
                                      tir_bin(c, TIR_EQ, tir_ref(c, vx), tir_int(c, 0)));
    upd = tir_select(c, first, m, tir_bin(c, TIR_MAX, cur, m));
  } else {
    upd = tir_add(c, cur, tir_select(c, valid, sum, fc(c, 0.0)));
  }
  st[ns++] = tir_store(c, acc, &z, upd);
  const tir_stmt_t* samp = tir_alloc(c, pt, tir_alloc(c, pl, tir_alloc(c, pi, tir_seq(c, ns, st))));
  samp = tir_for(c, vy, G, TIR_LOOP_SERIAL, tir_for(c, vx, G, TIR_LOOP_SERIAL, samp));
  const tir_expr_t* res = tir_load(c, acc, &z);
  if (!a.max) res = tir_bin(c, TIR_DIV, res, fc(c, (double)(G * G)));
  if (y->dtype != F) res = tir_cast(c, y->dtype, res);
  const tir_stmt_t* seq[3] = {tir_store(c, acc, &z, fc(c, 0.0)), samp, kiln_lew_store(c, &nest, y, res)};
  const tir_stmt_t* body = kiln_lew_loops(c, &nest, tir_alloc(c, acc, tir_seq(c, 3, seq)));
  const tir_buffer_t* params[4] = {x, rois, bi, y};
  return kiln_lew_emit(ctx, &nest, body, 4, params, false);
}
