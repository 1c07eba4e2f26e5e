/* Lowering of DeformConv (ir/ops/nn_deform_conv.c) to TIR: one loop nest
 * over Y [N, oC, oH, oW]; per output, serial loops over the group's input
 * channels and the kernel taps load the tap's offset (and mask), keep the
 * sample point in private scalars, and add W * mask * the bilinear sample
 * (four clamped loads, each selected to 0 outside X) into a private f32
 * accumulator. A direct kernel: no im2col/GEMM fast path yet. */
#include "ir/ops/deform_conv.h"
#include "lowering/lower_ew_impl.h"
#include "lowering/lower_nn_impl.h"

#define TRY(expr)                  \
  do {                             \
    kiln_status_t try_s_ = (expr); \
    if (try_s_) return try_s_;     \
  } while (0)

static const tir_expr_t* fk(tir_ctx_t* c, double v) { return tir_const(c, KILN_DTYPE_F32, v); }

kiln_status_t kiln_lower_nn_deform_conv(kiln_lower_ctx_t* ctx) {
  tir_ctx_t* c = ctx->tir;
  const tir_buffer_t* x = kiln_lew_in(ctx, 0);
  const tir_buffer_t* w = kiln_lew_in(ctx, 1);
  const tir_buffer_t* off = kiln_lew_in(ctx, 2);
  const tir_buffer_t* b = kiln_lew_in(ctx, 3);
  const tir_buffer_t* m = kiln_lew_in(ctx, 4);
  const tir_buffer_t* y = kiln_lew_out(ctx, 0);
  if (!x || !w || !off || !y) return kiln_make_status(KILN_INVALID_ARGUMENT, "DeformConv: missing input or output");
  kiln_shape_t xs = kiln_shape_make(x->rank, x->shape), ws = kiln_shape_make(w->rank, w->shape);
  kiln_shape_t os = kiln_shape_make(off->rank, off->shape);
  kiln_shape_t ms = m ? kiln_shape_make(m->rank, m->shape) : os;
  deform_t g;
  TRY(kiln_deform_geometry(ctx->node, &xs, &ws, &os, m ? &ms : NULL, &g));
  if (y->rank != 4 || y->dtype != x->dtype || (b && tir_buffer_numel(b) != g.oc))
    return kiln_make_status(KILN_INTERNAL, "DeformConv: output or B mismatch");
  if (tir_buffer_numel(y) == 0) return NULL;
  if (g.ih == 0 || g.iw == 0) return kiln_make_status(KILN_INVALID_ARGUMENT, "DeformConv: X is empty");
  const kiln_dtype_t F = KILN_DTYPE_F32, I = KILN_DTYPE_I64;
  const int64_t one = 1, two = 2, taps = g.kh * g.kw;
  const tir_buffer_t* acc = tir_buffer(c, "dc_acc", F, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_buffer_t* pt = tir_buffer(c, "dc_pt", F, 1, &two, TIR_SCOPE_PRIVATE);
  const tir_expr_t* i0 = tir_int(c, 0);
  const tir_expr_t* i1 = tir_int(c, 1);
  kiln_lew_nest_t nest;
  kiln_lew_nest_buf(c, &nest, y);
  const tir_expr_t *n = nest.idx[0], *oc = nest.idx[1], *oh = nest.idx[2], *ow = nest.idx[3];
  const tir_var_t* cv = tir_var(c, "ci");
  const tir_var_t* tv = tir_var(c, "tap");
  const tir_expr_t* ci = tir_ref(c, cv);
  const tir_expr_t* t = tir_ref(c, tv);
  const tir_expr_t* ica = tir_add(c, tir_mul(c, tir_bin(c, TIR_FLOORDIV, oc, tir_int(c, g.ocpg)), tir_int(c, g.icpg)), ci);
  const tir_expr_t* og = tir_bin(c, TIR_FLOORDIV, ica, tir_int(c, g.icpog));
  const tir_expr_t* kh = tir_bin(c, TIR_FLOORDIV, t, tir_int(c, g.kw));
  const tir_expr_t* kw = tir_bin(c, TIR_FLOORMOD, t, tir_int(c, g.kw));
  const tir_expr_t* ochan = tir_mul(c, tir_add(c, tir_mul(c, og, tir_int(c, taps)), t), tir_int(c, 2));
  const tir_expr_t* oi_h[4] = {n, ochan, oh, ow};
  const tir_expr_t* oi_w[4] = {n, tir_add(c, ochan, i1), oh, ow};
  /* Sample point, clamped to (-2, size + 1) where every corner is outside
   * anyway (keeps the integer conversion in range; NaN lands at -2). */
  const tir_expr_t* base_h = tir_sub(c, tir_add(c, tir_mul(c, oh, tir_int(c, g.sh)), tir_mul(c, kh, tir_int(c, g.dh))), tir_int(c, g.ph));
  const tir_expr_t* base_w = tir_sub(c, tir_add(c, tir_mul(c, ow, tir_int(c, g.sw)), tir_mul(c, kw, tir_int(c, g.dw))), tir_int(c, g.pw));
  const tir_expr_t* hv = tir_add(c, tir_cast(c, F, base_h), kiln_lew_f32(c, tir_load(c, off, oi_h)));
  const tir_expr_t* wv = tir_add(c, tir_cast(c, F, base_w), kiln_lew_f32(c, tir_load(c, off, oi_w)));
  const int64_t size[2] = {g.ih, g.iw};
  const tir_expr_t* raw[2] = {hv, wv};
  const tir_stmt_t* st[4];
  int32_t ns = 0;
  const tir_expr_t* idx01[2] = {i0, i1};
  for (int k = 0; k < 2; ++k) {
    const tir_expr_t* v = tir_select(c, tir_bin(c, TIR_GT, raw[k], fk(c, -2.0)), raw[k], fk(c, -2.0));
    v = tir_select(c, tir_bin(c, TIR_LT, v, fk(c, (double)size[k] + 1.0)), v, fk(c, (double)size[k] + 1.0));
    st[ns++] = tir_store(c, pt, &idx01[k], v);
  }
  const tir_expr_t* fl[2];
  const tir_expr_t* lo[2];
  const tir_expr_t* fr[2];
  for (int k = 0; k < 2; ++k) {
    const tir_expr_t* p = tir_load(c, pt, &idx01[k]);
    fl[k] = tir_call(c, TIR_FLOOR, 1, p, NULL, NULL);
    lo[k] = kiln_lew_f2i(c, I, fl[k]);
    fr[k] = tir_sub(c, p, fl[k]);
  }
  const tir_expr_t* sample = NULL;
  for (int q = 0; q < 4; ++q) {
    const tir_expr_t* hi = tir_add(c, lo[0], tir_int(c, q >> 1));
    const tir_expr_t* wi = tir_add(c, lo[1], tir_int(c, q & 1));
    const tir_expr_t* in = tir_bin(
        c, TIR_AND,
        tir_bin(c, TIR_AND, tir_bin(c, TIR_GE, hi, i0), tir_bin(c, TIR_LT, hi, tir_int(c, g.ih))),
        tir_bin(c, TIR_AND, tir_bin(c, TIR_GE, wi, i0), tir_bin(c, TIR_LT, wi, tir_int(c, g.iw))));
    const tir_expr_t* xi[4] = {n, ica, kiln_lew_clamp(c, hi, 0, g.ih - 1), kiln_lew_clamp(c, wi, 0, g.iw - 1)};
    const tir_expr_t* wt = tir_mul(c, (q >> 1) ? fr[0] : tir_sub(c, fk(c, 1.0), fr[0]),
                                   (q & 1) ? fr[1] : tir_sub(c, fk(c, 1.0), fr[1]));
    const tir_expr_t* term = tir_select(c, in, tir_mul(c, wt, kiln_lew_f32(c, tir_load(c, x, xi))), fk(c, 0.0));
    sample = sample ? tir_add(c, sample, term) : term;
  }
  const tir_expr_t* wi4[4] = {oc, ci, kh, kw};
  const tir_expr_t* coef = kiln_lew_f32(c, tir_load(c, w, wi4));
  if (m) {
    const tir_expr_t* mi[4] = {n, tir_add(c, tir_mul(c, og, tir_int(c, taps)), t), oh, ow};
    coef = tir_mul(c, coef, kiln_lew_f32(c, tir_load(c, m, mi)));
  }
  const tir_expr_t* z = i0;
  st[ns++] = tir_store(c, acc, &z, tir_add(c, tir_load(c, acc, &z), tir_mul(c, coef, sample)));
  const tir_stmt_t* inner = tir_alloc(c, pt, tir_seq(c, ns, st));
  inner = tir_for(c, cv, g.icpg, TIR_LOOP_SERIAL, tir_for(c, tv, taps, TIR_LOOP_SERIAL, inner));
  const tir_expr_t* init = b ? kiln_lew_f32(c, tir_load(c, b, &oc)) : fk(c, 0.0);
  const tir_expr_t* res = tir_load(c, acc, &z);
  if (y->dtype != F) res = tir_cast(c, y->dtype, res);
  const tir_stmt_t* seq[3] = {tir_store(c, acc, &z, init), inner, kiln_lew_store(c, &nest, y, res)};
  const tir_stmt_t* body = kiln_lew_loops(c, &nest, tir_alloc(c, acc, tir_seq(c, 3, seq)));
  const tir_buffer_t* params[6];
  int32_t np = 0;
  params[np++] = x;
  params[np++] = w;
  params[np++] = off;
  if (b) params[np++] = b;
  if (m) params[np++] = m;
  params[np++] = y;
  return kiln_lew_emit(ctx, &nest, body, np, params, false);
}
