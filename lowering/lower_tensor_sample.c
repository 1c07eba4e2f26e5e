/* Lowering of GridSample and AffineGrid (ir/ops/tensor_sample.c) to TIR.
 *
 * GridSample is one loop nest over Y [N, C, O1..Ok]. The grid is data, so
 * coordinates are computed in the kernel, per output element, in f32 with
 * the reference's formulas (ir/ops/tensor_sample.c): private scalars hold
 * each axis's coordinate, its 1/2/4 tap indices and weights, then the
 * output is the sum over the taps^k corners. Every tap index is clamped
 * into the axis before the load, so any grid value (inf, NaN, huge) reads
 * inside X; with padding zeros an outside tap is stored as -1 and selects 0.
 *
 * AffineGrid is one nest over the grid [N, O1..Ok, k]: the base coordinate
 * of each axis is affine in its loop index and the output is the dot
 * product with a row of theta.
 */
#include <stdio.h>
#include <string.h>

#include "ir/ops/grid_sample.h"
#include "lowering/lower_ew_impl.h"
#include "lowering/lower_tensor_impl.h"

#define TRY(expr)                  \
  do {                             \
    kiln_status_t try_s_ = (expr); \
    if (try_s_) return try_s_;     \
  } while (0)

static const tir_expr_t* f32c(tir_ctx_t* c, double v) { return tir_const(c, KILN_DTYPE_F32, v); }

static const tir_expr_t* fbin(tir_ctx_t* c, tir_binop_t op, const tir_expr_t* a, double b) {
  return tir_bin(c, op, a, f32c(c, b));
}

/* |v| folded into [lo, hi] like the reference's _gs_reflect: the parity of
 * the number of whole ranges past the border decides the direction. */
static const tir_expr_t* reflect(tir_ctx_t* c, const tir_expr_t* v, double lo, double hi) {
  double rng = hi - lo;
  if (!(rng > 0.0)) return f32c(c, lo);
  const tir_expr_t* two = f32c(c, 2.0 * rng);
  const tir_expr_t* mb = tir_call(c, TIR_FMOD, 2, tir_sub(c, f32c(c, lo), v), two, NULL);
  const tir_expr_t* ma = tir_call(c, TIR_FMOD, 2, tir_sub(c, v, f32c(c, hi)), two, NULL);
  const tir_expr_t* below = tir_select(c, fbin(c, TIR_LT, mb, rng), tir_add(c, f32c(c, lo), mb),
                                       tir_sub(c, f32c(c, hi + rng), mb));
  const tir_expr_t* above = tir_select(c, fbin(c, TIR_LT, ma, rng), tir_sub(c, f32c(c, hi), ma),
                                       tir_add(c, f32c(c, lo - rng), ma));
  return tir_select(c, fbin(c, TIR_LT, v, lo), below, tir_select(c, fbin(c, TIR_GT, v, hi), above, v));
}

/* Keys cubic weight (a = -0.75) of tap |j| (offset j - 1) for fraction |t|. */
static const tir_expr_t* cubic_w(tir_ctx_t* c, const tir_expr_t* t, int j) {
  const double A = -0.75;
  static const double off[4] = {1.0, 0.0, 1.0, 2.0};
  const tir_expr_t* x = j == 0 ? fbin(c, TIR_ADD, t, 1.0) : (j == 1 ? t : tir_sub(c, f32c(c, off[j]), t));
  if (j == 1 || j == 2) {
    /* ((A + 2) x - (A + 3)) x^2 + 1 */
    const tir_expr_t* p = fbin(c, TIR_SUB, fbin(c, TIR_MUL, x, A + 2.0), A + 3.0);
    return fbin(c, TIR_ADD, tir_mul(c, tir_mul(c, p, x), x), 1.0);
  }
  /* ((A x - 5A) x + 8A) x - 4A */
  const tir_expr_t* p = fbin(c, TIR_SUB, fbin(c, TIR_MUL, x, A), 5.0 * A);
  p = fbin(c, TIR_ADD, tir_mul(c, p, x), 8.0 * A);
  return fbin(c, TIR_SUB, tir_mul(c, p, x), 4.0 * A);
}

kiln_status_t kiln_lower_tensor_grid_sample(kiln_lower_ctx_t* ctx) {
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* x = kiln_lew_in(ctx, 0);
  const tir_buffer_t* g = kiln_lew_in(ctx, 1);
  const tir_buffer_t* y = kiln_lew_out(ctx, 0);
  if (!x || !g || !y) return kiln_make_status(KILN_INVALID_ARGUMENT, "GridSample: missing input or output");
  gs_attrs_t a;
  TRY(kiln_gs_parse_attrs(ctx->node, &a));
  const int32_t r = x->rank, D = r - 2;
  if (r < 4 || r > 2 + KILN_GS_MAX_SPATIAL || g->rank != r || y->rank != r || g->shape[r - 1] != D ||
      y->dtype != x->dtype)
    return kiln_make_status(KILN_INTERNAL, "GridSample: X, grid and Y do not match");
  if (tir_buffer_numel(y) == 0) return NULL;
  for (int32_t k = 0; k < D; ++k)
    if (x->shape[2 + k] == 0) return kiln_make_status(KILN_INVALID_ARGUMENT, "GridSample: X has an empty spatial axis");
  const int taps = kiln_gs_taps(a.mode);
  const kiln_dtype_t F = KILN_DTYPE_F32, I = KILN_DTYPE_I64;
  const int64_t nd = D, nt = (int64_t)D * taps;
  const tir_buffer_t* fx = tir_buffer(c, "gs_x", F, 1, &nd, TIR_SCOPE_PRIVATE);
  const tir_buffer_t* ix = tir_buffer(c, "gs_i", I, 1, &nt, TIR_SCOPE_PRIVATE);
  const tir_buffer_t* wt = tir_buffer(c, "gs_w", F, 1, &nt, TIR_SCOPE_PRIVATE);
  kiln_lew_nest_t nest;
  kiln_lew_nest_buf(c, &nest, y);
  const tir_stmt_t* st[3 * KILN_GS_MAX_SPATIAL + 3 * KILN_GS_MAX_SPATIAL * 4 + 1];
  int32_t ns = 0;
  for (int32_t k = 0; k < D; ++k) {
    const double d = (double)x->shape[2 + k];
    const tir_expr_t* kk[1] = {tir_int(c, k)};
    const tir_expr_t* gi[KILN_MAX_RANK];
    gi[0] = nest.idx[0];
    for (int32_t q = 0; q < D; ++q) gi[1 + q] = nest.idx[2 + q];
    gi[r - 1] = tir_int(c, D - 1 - k);
    const tir_expr_t* gv = kiln_lew_f32(c, tir_load(c, g, gi));
    /* Denormalise: (g + 1) / 2 * (d - 1), or ((g + 1) * d - 1) / 2. */
    const tir_expr_t* v = a.align_corners
                              ? fbin(c, TIR_MUL, fbin(c, TIR_DIV, fbin(c, TIR_ADD, gv, 1.0), 2.0), d - 1.0)
                              : fbin(c, TIR_DIV, fbin(c, TIR_SUB, fbin(c, TIR_MUL, fbin(c, TIR_ADD, gv, 1.0), d), 1.0), 2.0);
    if (a.mode == GS_NEAREST) v = tir_call(c, TIR_ROUND_EVEN, 1, v, NULL, NULL);
    st[ns++] = tir_store(c, fx, kk, v);
    const tir_expr_t* cur = tir_load(c, fx, kk);
    const double lo = a.align_corners ? 0.0 : -0.5, hi = a.align_corners ? d - 1.0 : d - 0.5;
    const tir_expr_t* out = tir_bin(c, TIR_OR, fbin(c, TIR_LT, cur, lo), fbin(c, TIR_GT, cur, hi));
    const tir_expr_t* moved = NULL;
    if (a.padding == GS_BORDER)
      moved = tir_bin(c, TIR_MIN, tir_bin(c, TIR_MAX, cur, f32c(c, 0.0)), f32c(c, d - 1.0));
    if (a.padding == GS_REFLECTION) moved = reflect(c, cur, lo, hi);
    /* Far outside (zeros) every tap is zero anyway: keep the conversion to
     * an index in range; NaN becomes -4 too (max/min pick the number in C's
     * fmaxf, and the select below catches the rest). */
    const tir_expr_t* pv = moved ? tir_select(c, out, moved, cur) : cur;
    pv = tir_select(c, fbin(c, TIR_GT, pv, -4.0), pv, f32c(c, -4.0));
    pv = tir_select(c, fbin(c, TIR_GT, pv, d + 4.0), f32c(c, d + 4.0), pv);
    st[ns++] = tir_store(c, fx, kk, pv);
    const tir_expr_t* fl = a.mode == GS_NEAREST ? cur : tir_call(c, TIR_FLOOR, 1, cur, NULL, NULL);
    const tir_expr_t* first = kiln_lew_f2i(c, I, fl);
    const tir_expr_t* t = tir_sub(c, cur, fl);
    for (int j = 0; j < taps; ++j) {
      const tir_expr_t* sl[1] = {tir_int(c, k * taps + j)};
      const tir_expr_t* i = tir_add(c, first, tir_int(c, j - (a.mode == GS_CUBIC ? 1 : 0)));
      const int64_t di = x->shape[2 + k];
      if (a.padding == GS_ZEROS) {
        const tir_expr_t* bad = tir_bin(c, TIR_OR, tir_bin(c, TIR_LT, i, tir_int(c, 0)),
                                        tir_bin(c, TIR_GE, i, tir_int(c, di)));
        i = tir_select(c, bad, tir_int(c, -1), i);
      } else {
        if (a.padding == GS_REFLECTION) i = kiln_lew_f2i(c, I, reflect(c, tir_cast(c, F, i), lo, hi));
        i = kiln_lew_clamp(c, i, 0, di - 1);
      }
      st[ns++] = tir_store(c, ix, sl, i);
      if (a.mode == GS_NEAREST) continue;
      const tir_expr_t* w = a.mode == GS_CUBIC ? cubic_w(c, t, j) : (j == 0 ? tir_sub(c, f32c(c, 1.0), t) : t);
      st[ns++] = tir_store(c, wt, sl, w);
    }
  }
  int64_t corners = 1;
  for (int32_t k = 0; k < D; ++k) corners *= taps;
  const tir_expr_t* acc = NULL;
  for (int64_t m = 0; m < corners; ++m) {
    const tir_expr_t* xi[KILN_MAX_RANK];
    xi[0] = nest.idx[0];
    xi[1] = nest.idx[1];
    const tir_expr_t* ok = NULL;
    const tir_expr_t* w = NULL;
    int64_t rest = m;
    for (int32_t k = D - 1; k >= 0; --k) {
      const tir_expr_t* sl[1] = {tir_int(c, k * taps + (int)(rest % taps))};
      rest /= taps;
      const tir_expr_t* i = tir_load(c, ix, sl);
      xi[2 + k] = kiln_lew_clamp(c, i, 0, x->shape[2 + k] - 1);
      if (a.padding == GS_ZEROS) {
        const tir_expr_t* in = tir_bin(c, TIR_GE, i, tir_int(c, 0));
        ok = ok ? tir_bin(c, TIR_AND, ok, in) : in;
      }
      if (a.mode != GS_NEAREST) w = w ? tir_mul(c, w, tir_load(c, wt, sl)) : tir_load(c, wt, sl);
    }
    const tir_expr_t* v = kiln_lew_f32(c, tir_load(c, x, xi));
    if (w) v = tir_mul(c, w, v);
    if (ok) v = tir_select(c, ok, v, f32c(c, 0.0));
    acc = acc ? tir_add(c, acc, v) : v;
  }
  if (y->dtype != F) acc = tir_cast(c, y->dtype, acc);
  st[ns++] = kiln_lew_store(c, &nest, y, acc);
  const tir_stmt_t* body = tir_seq(c, ns, st);
  body = tir_alloc(c, fx, tir_alloc(c, ix, tir_alloc(c, wt, body)));
  body = kiln_lew_loops(c, &nest, body);
  const tir_buffer_t* params[3] = {x, g, y};
  return kiln_lew_emit(ctx, &nest, body, 3, params, false);
}

kiln_status_t kiln_lower_tensor_affine_grid(kiln_lower_ctx_t* ctx) {
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* th = kiln_lew_in(ctx, 0);
  const tir_buffer_t* y = kiln_lew_out(ctx, 0);
  if (!th || !y) return kiln_make_status(KILN_INVALID_ARGUMENT, "AffineGrid: missing input or output");
  int64_t ac = 0;
  TRY(kiln_attr_int(ctx->node, "align_corners", 0, &ac));
  const int32_t r = y->rank, D = r - 2;
  if ((r != 4 && r != 5) || th->rank != 3 || th->shape[1] != D || th->shape[2] != D + 1 ||
      th->shape[0] != y->shape[0] || y->shape[r - 1] != D || y->dtype != th->dtype)
    return kiln_make_status(KILN_INTERNAL, "AffineGrid: theta and output do not match");
  if (tir_buffer_numel(y) == 0) return NULL;
  kiln_lew_nest_t nest;
  kiln_lew_nest_buf(c, &nest, y);
  const tir_expr_t* ti[3] = {nest.idx[0], nest.idx[r - 1], tir_int(c, D)};
  const tir_expr_t* acc = kiln_lew_f32(c, tir_load(c, th, ti));
  for (int32_t k = 0; k < D; ++k) {
    /* Coordinate k (x, y, z) runs along spatial axis D-1-k: affine in its
     * index, base(i) = base(0) + i * (base(1) - base(0)). */
    const int64_t s = y->shape[1 + (D - 1 - k)];
    const double b0 = kiln_affine_grid_base(0, s, ac != 0);
    const double step = s > 1 ? kiln_affine_grid_base(1, s, ac != 0) - b0 : 0.0;
    const tir_expr_t* base =
        fbin(c, TIR_ADD, fbin(c, TIR_MUL, tir_cast(c, KILN_DTYPE_F32, nest.idx[1 + (D - 1 - k)]), step), b0);
    ti[2] = tir_int(c, k);
    acc = tir_add(c, acc, tir_mul(c, kiln_lew_f32(c, tir_load(c, th, ti)), base));
  }
  if (y->dtype != KILN_DTYPE_F32) acc = tir_cast(c, y->dtype, acc);
  const tir_stmt_t* body = kiln_lew_loops(c, &nest, kiln_lew_store(c, &nest, y, acc));
  const tir_buffer_t* params[2] = {th, y};
  return kiln_lew_emit(ctx, &nest, body, 2, params, false);
}
