/* QLinearConv on the blocked NCHWc layout (lowering/layout.h; which
 * QLinearConvs run blocked: lowering/layout_q8.c). Tensors are u8/i8
 * [N][CB][H][W][c], the block c the same as the float graph's (8 on AVX2):
 * one block of output channels is one vector of c i32 accumulators.
 *
 * Group 1 is Conv's blocked GEMM (lower_nn_conv_blocked.c) as an int8
 * GEMM (nn_gemm_t.idot): rows are the dense output positions, columns the
 * output channels padded to whole blocks, so each tile column stores one
 * block of Y in place (no grid, no crop, no workspace but the GEMM's L
 * micro-panel). L elements are pairs of input channels (2p, 2p + 1) of one
 * tap, x - x_zp packed as the i16 halves of an i32 (taps outside the input
 * are 0, ONNX's padding of x - x_zp) and gathered from X, blocked or plain
 * (the stem reads the quantized model input as is); the weights are R,
 * the same pairs packed at compile time (int8 pairs one byte each where
 * every w - w_zp fits int8). Sums are exact i32 (dot2_i16), the i32 bias
 * is the initial value and the caller's requantization the epilogue.
 * Against the NCHW int8 GEMM (lower_nn_conv.c) there is no pair copy of the
 * input (2 bytes per element, the int8 arena's largest buffers) and no
 * crop, and the small late-stage planes (14x14, 7x7) fill whole vectors.
 *
 * Depthwise is direct, per (image, channel block) and output position a
 * vector of c lanes: sums of (x - x_zp) * (w - w_zp) over the taps (in f32
 * where they are exact integers, else i32), masked at the borders,
 * requantized and stored. Weights and bias are re-laid out at compile time
 * as [CB][T][c] (int8 where they fit) and [CB][c]. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lowering/lower_nn_impl.h"
#include "lowering/plan.h"

typedef struct qb_s {
  const nn_qconv_t* q;
  const tir_buffer_t *x, *y, *bias; /* bias: i32 [Mp] (GEMM) or [CB][c], or NULL */
  const tir_buffer_t* w;            /* depthwise: i32 [CB][T][c] */
  int32_t xb, c;                    /* x's block (0: plain NCHW), the block */
  int64_t N, C, M, Mp, T, Cp;
  nn_axis_t ah, aw;
  bool w8;
  bool dwf; /* depthwise sums in f32 (exact) */
  /* x's zero point folded into the bias (sum of x * w, less x_zp * sum of
   * w: no subtraction per element; GEMM, and depthwise with f32 sums), and
   * the GEMM's x as a flat view of positions (1x1 stride 1 unpadded) */
  bool zfold;
  const tir_buffer_t* xf;
  /* The VNNI form (q4: dot4_u8i8): GEMM elements are quads of channels
   * (4q .. 4q + 3) of one tap, read as one i32 from xq, an i32 view of x
   * ([N][CB][H][W][c/4], or [N][CB][P][c/4] where xf is flat); i8 x is
   * made u8 by flipping the sign bits (x + 128), and zu (x_zp, + 128 for
   * i8) is folded into the bias; taps outside the input read zu. */
  bool q4;
  const tir_buffer_t* xq;
  int32_t zu;
  /* q4 reads L in place (the GEMM's direct L, taps outside its k loop):
   * from xq, or from src, xq copied with zu-padding where taps fall
   * outside x (and with i8 made u8); padh/padw its padding */
  const tir_buffer_t* src;
  int64_t padh, padw;
} qb_t;

/* x's zero point as an i32 expression. */
static const tir_expr_t* qb_zp(nn_kb_t* kb, const qb_t* qb) {
  tir_ctx_t* t = kb->t;
  if (qb->q->xzp_is_imm) return tir_const(t, KILN_DTYPE_I32, qb->q->xzp_imm);
  return tir_cast(t, KILN_DTYPE_I32, tir_load(t, qb->q->xzp, NN_IDX(nn_i(kb, 0))));
}

/* i32(x) at (n, channel ch, ih, iw) in x's layout. */
static const tir_expr_t* qb_x(nn_kb_t* kb, const qb_t* qb, const tir_expr_t* n, const tir_expr_t* ch,
                              const tir_expr_t* ih, const tir_expr_t* iw) {
  const tir_expr_t* const* idx = qb->xb ? NN_IDX(n, nn_divc(kb, ch, qb->xb), ih, iw, nn_modc(kb, ch, qb->xb))
                                        : NN_IDX(n, ch, ih, iw);
  return tir_cast(kb->t, KILN_DTYPE_I32, tir_load(kb->t, qb->x, idx));
}

/* Input coordinate o*s + k*d - p along |a|; where a tap may fall outside
 * the input it is clamped and its validity and-ed into *valid. */
static const tir_expr_t* qb_coord(nn_kb_t* kb, const nn_axis_t* a, const tir_expr_t* o, const tir_expr_t* k,
                                  bool guard, const tir_expr_t** valid) {
  tir_ctx_t* t = kb->t;
  const tir_expr_t* e = nn_addc(kb, nn_add(kb, nn_mulc(kb, o, a->s), nn_mulc(kb, k, a->d)), -a->p);
  if (!guard || (a->p <= 0 && (a->out - 1) * a->s + (a->k - 1) * a->d - a->p < a->in)) return e;
  const tir_expr_t* ok =
      tir_bin(t, TIR_AND, tir_bin(t, TIR_GE, e, nn_i(kb, 0)), tir_bin(t, TIR_LT, e, nn_i(kb, a->in)));
  *valid = *valid ? tir_bin(t, TIR_AND, *valid, ok) : ok;
  return nn_clamp(kb, e, 0, a->in - 1);
}

/* The requantized value of sum |acc| of output channel |ch| (lanes past M
 * in the last block use channel M - 1's parameters: stored, never read). */
static const tir_expr_t* qb_requant(nn_kb_t* kb, const qb_t* qb, const tir_expr_t* ch, const tir_expr_t* acc) {
  const tir_expr_t* v = qb->q->requant(kb, qb->q->user, nn_clamp(kb, ch, 0, qb->M - 1), acc);
  return v->dtype == qb->y->dtype ? v : tir_cast(kb->t, qb->y->dtype, v);
}

/* The constant i32 bias (node input 8) as [len], zero past M (the caller
 * hands it to a constant, which owns it); NULL when the node has none. */
static kiln_status_t qb_bias(kiln_lower_ctx_t* ctx, const qb_t* qb, int64_t len, int32_t** out) {
  *out = NULL;
  if (qb->q->bias < 0 || qb->q->bias >= ctx->n_in || !ctx->in[qb->q->bias]) return NULL;
  if (!nn_is_const(ctx, qb->q->bias))
    return kiln_make_status(KILN_INTERNAL, "%s: the blocked layout needs a constant bias", ctx->node->name);
  const kiln_array_t* b = &ctx->in_tensor[qb->q->bias]->value;
  int32_t* p = calloc((size_t)len, sizeof(int32_t));
  if (!p) return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: blocked bias", ctx->node->name);
  for (int64_t m = 0; m < qb->M && m < kiln_array_numel(b); ++m) p[m] = (int32_t)kiln_load_i64(b->dtype, b->data, (size_t)m);
  *out = p;
  return NULL;
}

/* ---- group 1: the int8 GEMM ------------------------------------------------ */

/* i32(x) at channel |ch| of position |pos| of the flat view [N][C or
 * CB][H*W]([c]) (1x1 stride 1 unpadded convs: the GEMM row is the input
 * position, no division into row and column). */
static const tir_expr_t* qb_xflat(nn_kb_t* kb, const qb_t* qb, const tir_expr_t* n, const tir_expr_t* ch,
                                  const tir_expr_t* pos) {
  const tir_expr_t* const* idx = qb->xb ? NN_IDX(n, nn_divc(kb, ch, qb->xb), pos, nn_modc(kb, ch, qb->xb))
                                        : NN_IDX(n, ch, pos);
  return tir_cast(kb->t, KILN_DTYPE_I32, tir_load(kb->t, qb->xf, idx));
}

/* L element: output position m's tap (kv[1], kv[2]) of channel pair |cp|:
 * x - x_zp of both channels, or x itself when the zero point is folded
 * into the bias (qb->zfold: taps outside the input then read x_zp). */
static const tir_expr_t* qb_lload(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b, const tir_expr_t* cp,
                                  int32_t grp, const tir_expr_t* const* kv, const tir_expr_t* m) {
  const qb_t* qb = g->user;
  tir_ctx_t* t = kb->t;
  (void)grp;
  const tir_expr_t* c0 = nn_mulc(kb, cp, 2);
  /* an odd C's last pair reads channel C - 1 twice: its weight is 0 */
  const tir_expr_t* c1 = qb->C % 2 ? nn_clamp(kb, nn_addc(kb, c0, 1), 0, qb->C - 1) : nn_addc(kb, c0, 1);
  const tir_expr_t* valid = NULL;
  const tir_expr_t *lo, *hi;
  if (qb->xf) {
    lo = qb_xflat(kb, qb, b, c0, m), hi = qb_xflat(kb, qb, b, c1, m);
  } else {
    const tir_expr_t* ih = qb_coord(kb, &qb->ah, nn_divc(kb, m, qb->aw.out), kv[1], true, &valid);
    const tir_expr_t* iw = qb_coord(kb, &qb->aw, nn_modc(kb, m, qb->aw.out), kv[2], true, &valid);
    lo = qb_x(kb, qb, b, c0, ih, iw), hi = qb_x(kb, qb, b, c1, ih, iw);
  }
  if (!qb->zfold) {
    const tir_expr_t* zp = qb_zp(kb, qb);
    lo = tir_sub(t, lo, zp), hi = tir_sub(t, hi, zp);
  }
  const tir_expr_t* v = tir_add(t, tir_bin(t, TIR_BAND, lo, tir_const(t, KILN_DTYPE_I32, 0xffff)),
                                tir_mul(t, hi, tir_const(t, KILN_DTYPE_I32, 65536)));
  /* the pair (x_zp, x_zp) as the packing above forms it */
  const uint32_t z = (uint32_t)qb->q->xzp_imm;
  const int32_t pad = qb->zfold ? (int32_t)((z & 0xffffu) + z * 65536u) : 0;
  return valid ? tir_select(t, valid, v, tir_const(t, KILN_DTYPE_I32, pad)) : v;
}

/* An i32 view of |base| (u8 / i8 bytes, 4 per element) of |shape|. */
static kiln_status_t qb_view_i32(kiln_lower_ctx_t* ctx, const tir_buffer_t* base, const char* name, int32_t rank,
                                 const int64_t* shape, const tir_buffer_t** out) {
  if (kiln_dtype_size(base->dtype) != 1)
    return kiln_make_status(KILN_INTERNAL, "%s: i32 view '%s' of buffer '%s' needs bytes", ctx->node->name, name,
                            base->name);
  return nn_view_typed(ctx, base, name, KILN_DTYPE_I32, rank, shape, out);
}

/* q4's L element read in place: src at the quad |cq| of output position
 * m's tap (kv[1], kv[2]), affine (src holds every tap). */
static const tir_expr_t* qb_lload4d(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b, const tir_expr_t* cq,
                                    int32_t grp, const tir_expr_t* const* kv, const tir_expr_t* m) {
  const qb_t* qb = g->user;
  (void)grp;
  const int64_t qpb = qb->xb ? qb->xb / 4 : 1;
  const tir_expr_t* blk = nn_divc(kb, cq, qpb);
  const tir_expr_t* lane = nn_modc(kb, cq, qpb);
  if (qb->xf && qb->src == qb->xq) return tir_load(kb->t, qb->xq, NN_IDX(b, blk, m, lane));
  const tir_expr_t* ih = nn_addc(kb, nn_add(kb, nn_mulc(kb, nn_divc(kb, m, qb->aw.out), qb->ah.s), nn_mulc(kb, kv[1], qb->ah.d)),
                                 qb->padh - qb->ah.p);
  const tir_expr_t* iw = nn_addc(kb, nn_add(kb, nn_mulc(kb, nn_modc(kb, m, qb->aw.out), qb->aw.s), nn_mulc(kb, kv[2], qb->aw.d)),
                                 qb->padw - qb->aw.p);
  return tir_load(kb->t, qb->src, NN_IDX(b, blk, ih, iw, lane));
}

/* Taps of |a| that fall outside the input. */
static bool qb_outside(const nn_axis_t* a) { return a->p > 0 || (a->out - 1) * a->s + (a->k - 1) * a->d - a->p >= a->in; }

/* for i in [0, len): row[o][h][i0 + i] = v(i) (|v| NULL: zu in every
 * byte; else x's row xr[o][h - padh][i], sign bits flipped for i8). */
static const tir_stmt_t* src4_run(nn_kb_t* kb, const qb_t* qb, const tir_buffer_t* row, const tir_buffer_t* xr,
                                  const tir_expr_t* o, const tir_expr_t* h, int64_t i0, int64_t len) {
  if (len <= 0) return NULL;
  tir_ctx_t* t = kb->t;
  tir_var_t* vi = nn_var(kb, "i");
  const tir_expr_t* i = nn_v(kb, vi);
  const tir_expr_t* v = tir_const(t, KILN_DTYPE_I32, (int32_t)((uint32_t)qb->zu * 0x01010101u));
  if (xr) {
    v = tir_load(t, xr, NN_IDX(o, nn_addc(kb, h, -qb->padh), i));
    if (qb->x->dtype == KILN_DTYPE_I8) v = tir_bin(t, TIR_BXOR, v, tir_const(t, KILN_DTYPE_I32, (int32_t)0x80808080u));
  }
  return nn_for(kb, vi, len, tir_store(t, row, NN_IDX(o, h, nn_addc(kb, i, i0)), v));
}

/* qb_src4 for a blocked x, as rows of i32 (one quad of a position each):
 * per (image, block) the padding rows filled, and per row of x its left
 * padding, the row copied, its right padding: runs of contiguous stores
 * the compiler vectorizes (a select and two clamps per element took ~3%
 * of ResNet-50's time). */
static kiln_status_t qb_src4_rows(nn_kb_t* kb, qb_t* qb, const int64_t* shape) {
  kiln_lower_ctx_t* ctx = kb->ctx;
  tir_ctx_t* t = kb->t;
  const int64_t* xs = qb->x->shape;
  const int64_t q = shape[4], NC = shape[0] * shape[1], EH = shape[2], EW = shape[3], H = xs[2], W = xs[3];
  const int64_t ds[3] = {NC, EH, EW * q}, ss[3] = {NC, H, W * q};
  const tir_buffer_t *row, *xr;
  KILN_RETURN_IF_ERROR(nn_view(ctx, qb->src, "xq_src_rows", 3, ds, &row));
  KILN_RETURN_IF_ERROR(qb_view_i32(ctx, qb->x, "xq_rows", 3, ss, &xr));
  const int64_t r0 = qb->padh < EH ? qb->padh : EH, r1 = qb->padh + H < EH ? qb->padh + H : EH;
  const int64_t c0 = qb->padw < EW ? qb->padw : EW, c1 = qb->padw + W < EW ? qb->padw + W : EW;
  tir_var_t* vo = nn_var(kb, "nc");
  const tir_expr_t* o = nn_v(kb, vo);
  const tir_stmt_t* body = NULL;
  const int64_t seg[4] = {0, r0, r1, EH};
  for (int k = 0; k < 3; ++k) {
    if (seg[k + 1] <= seg[k]) continue;
    tir_var_t* vh = nn_var(kb, "hs");
    const tir_expr_t* h = nn_addc(kb, nn_v(kb, vh), seg[k]);
    const tir_stmt_t* r = k != 1 ? src4_run(kb, qb, row, NULL, o, h, 0, EW * q)
                                 : tir_seq2(t, tir_seq2(t, src4_run(kb, qb, row, NULL, o, h, 0, c0 * q),
                                                        src4_run(kb, qb, row, xr, o, h, c0 * q, (c1 - c0) * q)),
                                            src4_run(kb, qb, row, NULL, o, h, c1 * q, (EW - c1) * q));
    body = tir_seq2(t, body, nn_for(kb, vh, seg[k + 1] - seg[k], r));
  }
  body = nn_for(kb, vo, NC, body);
  if (NC > 1) nn_parallel(kb, vo);
  return nn_emit(kb, body);
}

/* src for q4's direct L: xq as it is (u8 x, every tap inside), or a copy
 * padded with zu by padh/padw (x's padding) where taps fall outside x,
 * sign bits flipped for i8 x: src[n][cb][hs][ws][q] = xq[n][cb][hs - padh]
 * [ws - padw][q] (^ 0x80808080), zu in every byte outside. One pass over
 * x, in i32 units. A plain x (the stem: no xq) is always copied, as
 * src[n][quad][hs][ws][0], the quad's four channels' bytes gathered from
 * their planes (channels past C read channel C - 1: their weights are 0). */
static kiln_status_t qb_src4(nn_kb_t* kb, qb_t* qb) {
  kiln_lower_ctx_t* ctx = kb->ctx;
  tir_ctx_t* t = kb->t;
  const bool flip = qb->x->dtype == KILN_DTYPE_I8, pad = qb_outside(&qb->ah) || qb_outside(&qb->aw);
  qb->src = qb->xq;
  qb->padh = qb->padw = 0;
  if (!flip && !pad && qb->xb) return NULL;
  if (pad) qb->padh = qb->ah.p > 0 ? qb->ah.p : 0, qb->padw = qb->aw.p > 0 ? qb->aw.p : 0;
  const int64_t* xs = qb->x->shape;
  const int64_t eh = (qb->ah.out - 1) * qb->ah.s + (qb->ah.k - 1) * qb->ah.d + 1,
                ew = (qb->aw.out - 1) * qb->aw.s + (qb->aw.k - 1) * qb->aw.d + 1;
  const int64_t shape[5] = {xs[0], qb->xb ? xs[1] : (qb->C + 3) / 4, pad ? eh : xs[2], pad ? ew : xs[3],
                            qb->xb ? qb->xb / 4 : 1};
  KILN_RETURN_IF_ERROR(kiln_lower_temp(ctx, "xq_src", KILN_DTYPE_I32, 5, shape, &qb->src));
  if (qb->xb) return qb_src4_rows(kb, qb, shape);
  /* the 5-D view of x (xq may be the flat one) */
  const tir_buffer_t* xv = qb->xq;
  if (qb->xb && qb->xq->rank != 5) {
    const int64_t s5[5] = {xs[0], xs[1], xs[2], xs[3], qb->xb / 4};
    KILN_RETURN_IF_ERROR(qb_view_i32(ctx, qb->x, "xq_i32_5d", 5, s5, &xv));
  }
  tir_var_t* vo = nn_var(kb, "nc");
  tir_var_t* vh = nn_var(kb, "hs");
  tir_var_t* vw = nn_var(kb, "ws");
  tir_var_t* vl = nn_var(kb, "q");
  const tir_expr_t* o = nn_v(kb, vo);
  const tir_expr_t *n = nn_divc(kb, o, shape[1]), *cb = nn_modc(kb, o, shape[1]), *l = nn_v(kb, vl);
  const tir_expr_t* ih = nn_addc(kb, nn_v(kb, vh), -qb->padh);
  const tir_expr_t* iw = nn_addc(kb, nn_v(kb, vw), -qb->padw);
  const tir_expr_t *ihc = nn_clamp(kb, ih, 0, xs[2] - 1), *iwc = nn_clamp(kb, iw, 0, xs[3] - 1);
  const tir_expr_t* v;
  if (qb->xb) {
    v = tir_load(t, xv, NN_IDX(n, cb, ihc, iwc, l));
  } else {
    /* bytes b0 + b1 2^8 + b2 2^16 + s3 2^24, s3 the top byte as signed
     * (b3 - 256 above 127): no i32 overflow */
    v = NULL;
    for (int64_t k = 0; k < 4; ++k) {
      const tir_expr_t* ch = nn_clamp(kb, nn_addc(kb, nn_mulc(kb, cb, 4), k), 0, qb->C - 1);
      const tir_expr_t* b =
          tir_bin(t, TIR_BAND, tir_cast(t, KILN_DTYPE_I32, tir_load(t, qb->x, NN_IDX(n, ch, ihc, iwc))),
                  tir_const(t, KILN_DTYPE_I32, 255));
      if (flip) b = tir_bin(t, TIR_BXOR, b, tir_const(t, KILN_DTYPE_I32, 128));
      if (k == 3)
        b = tir_mul(t, tir_sub(t, tir_bin(t, TIR_BXOR, b, tir_const(t, KILN_DTYPE_I32, 128)), tir_const(t, KILN_DTYPE_I32, 128)),
                    tir_const(t, KILN_DTYPE_I32, 16777216));
      else if (k > 0)
        b = tir_mul(t, b, tir_const(t, KILN_DTYPE_I32, (int32_t)1 << (8 * k)));
      v = v ? tir_add(t, v, b) : b;
    }
  }
  if (flip && qb->xb) v = tir_bin(t, TIR_BXOR, v, tir_const(t, KILN_DTYPE_I32, (int32_t)0x80808080u));
  if (pad) {
    const tir_expr_t* ok =
        tir_bin(t, TIR_AND, tir_bin(t, TIR_AND, tir_bin(t, TIR_GE, ih, nn_i(kb, 0)), tir_bin(t, TIR_LT, ih, nn_i(kb, xs[2]))),
                tir_bin(t, TIR_AND, tir_bin(t, TIR_GE, iw, nn_i(kb, 0)), tir_bin(t, TIR_LT, iw, nn_i(kb, xs[3]))));
    v = tir_select(t, ok, v, tir_const(t, KILN_DTYPE_I32, (int32_t)((uint32_t)qb->zu * 0x01010101u)));
  }
  const tir_stmt_t* s = tir_store(t, qb->src, NN_IDX(n, cb, nn_v(kb, vh), nn_v(kb, vw), l), v);
  s = nn_for(kb, vo, shape[0] * shape[1],
             nn_for(kb, vh, shape[2], nn_for(kb, vw, shape[3], nn_for(kb, vl, shape[4], s))));
  if (shape[0] * shape[1] > 1) nn_parallel(kb, vo);
  return nn_emit(kb, s);
}

/* q4's packed weights: output channel m, column kk = tap * Cq + quad (the
 * taps outside the GEMM's k loop), the int8 weights of channels 4 quad ..
 * 4 quad + 3 (0 past C), low byte first. */
static double qb_get_w4(const void* user, int64_t gi, int64_t m, int64_t kk) {
  const qb_t* qb = user;
  (void)gi;
  const float* w = qb->q->wq + m * qb->C * qb->T;
  const int64_t c0 = kk % qb->Cp * 4, tap = kk / qb->Cp;
  uint32_t v = 0;
  for (int64_t k = 0; k < 4; ++k)
    if (c0 + k < qb->C) v |= ((uint32_t)(int32_t)w[(c0 + k) * qb->T + tap] & 0xffu) << (8 * k);
  return (double)(int32_t)v;
}

/* VNNI (vpdpbusd) on the CPU this process runs on, where the CPU target
 * compiles its C with -march=native (lowering/cpu_simd.c's rule). */
static bool qb_vnni(const kiln_lower_ctx_t* ctx) {
  if (ctx->target != KILN_TARGET_CLASS_CPU) return false;
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && !defined(__clang__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vnni") || __builtin_cpu_supports("avxvnni");
#else
  return false;
#endif
}

/* Packed weights: output channel m, column kk = pair * T + tap, channels
 * 2*pair and 2*pair + 1 (0 past C): int8 pairs in an i16 (w8), else i16
 * pairs in an i32, as Conv's int8 GEMM packs them. */
static double qb_get_w(const void* user, int64_t gi, int64_t m, int64_t kk) {
  const qb_t* qb = user;
  (void)gi;
  const float* w = qb->q->wq + m * qb->C * qb->T;
  const int64_t c0 = kk / qb->T * 2, tap = kk % qb->T;
  const int32_t lo = (int32_t)w[c0 * qb->T + tap], hi = c0 + 1 < qb->C ? (int32_t)w[(c0 + 1) * qb->T + tap] : 0;
  if (qb->w8) return (double)(int16_t)(uint16_t)(((uint32_t)lo & 0xffu) | (((uint32_t)hi & 0xffu) << 8));
  return (double)(int32_t)(((uint32_t)lo & 0xffffu) | ((uint32_t)hi << 16));
}

static const tir_expr_t* qb_init(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b, const tir_expr_t* m,
                                 const tir_expr_t* n) {
  (void)b, (void)m;
  return tir_load(kb->t, ((const qb_t*)g->user)->bias, NN_IDX(n));
}

static const tir_expr_t* qb_epi(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b, const tir_expr_t* m,
                                const tir_expr_t* n, const tir_expr_t* acc) {
  (void)b, (void)m;
  return qb_requant(kb, g->user, n, acc);
}

static const tir_stmt_t* qb_store(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b, const tir_expr_t* m,
                                  const tir_expr_t* n, const tir_expr_t* v) {
  const qb_t* qb = g->user;
  /* n = nt * c + j with j < c: the block folds to nt and the lane to j,
   * so the store is the tile's contiguous vector */
  return tir_store(kb->t, qb->y,
                   NN_IDX(b, nn_divc(kb, n, qb->c), nn_divc(kb, m, qb->aw.out), nn_modc(kb, m, qb->aw.out),
                          nn_modc(kb, n, qb->c)),
                   v);
}

static kiln_status_t qconv_gemm_blocked(nn_kb_t* kb, qb_t* qb) {
  kiln_lower_ctx_t* ctx = kb->ctx;
  int32_t* bias = NULL;
  KILN_RETURN_IF_ERROR(qb_bias(ctx, qb, qb->Mp, &bias));
  qb->w8 = true;
  for (int64_t i = 0; i < qb->M * qb->C * qb->T && qb->w8; ++i) qb->w8 = qb->q->wq[i] >= -128.0f && qb->q->wq[i] <= 127.0f;
  /* VNNI: quads of u8 x int8 (a blocked x, whole quads per block, int8
   * weights, a constant zero point) */
  qb->q4 = qb->w8 && qb->q->xzp_is_imm && qb->xb % 4 == 0 && qb_vnni(ctx) &&
           (qb->x->dtype == KILN_DTYPE_U8 || qb->x->dtype == KILN_DTYPE_I8);
  qb->zu = qb->q->xzp_imm + (qb->x->dtype == KILN_DTYPE_I8 ? 128 : 0);
  /* a constant zero point folds into the bias: sum (x - z) w = sum x w - z sum w
   * (q4: x + 128 and z + 128 for i8 x) */
  qb->zfold = qb->q->xzp_is_imm;
  const int32_t zf = qb->q4 ? qb->zu : qb->q->xzp_imm;
  if (qb->zfold && zf != 0) {
    if (!bias && !(bias = calloc((size_t)qb->Mp, sizeof(int32_t))))
      return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: blocked bias", ctx->node->name);
    for (int64_t m = 0; m < qb->M; ++m) {
      int64_t sw = 0;
      for (int64_t k = 0; k < qb->C * qb->T; ++k) sw += (int64_t)qb->q->wq[m * qb->C * qb->T + k];
      bias[m] = (int32_t)((int64_t)bias[m] - (int64_t)zf * sw);
    }
  }
  if (bias) KILN_RETURN_IF_ERROR(nn_const_typed(ctx, "qbias_blk", KILN_DTYPE_I32, 1, &qb->Mp, bias, &qb->bias));
  if (qb->T == 1 && qb->ah.s == 1 && qb->aw.s == 1 && qb->ah.p == 0 && qb->aw.p == 0 && qb->ah.out == qb->ah.in &&
      qb->aw.out == qb->aw.in) {
    const int64_t P = qb->ah.in * qb->aw.in;
    const int64_t fs[4] = {qb->N, qb->x->shape[1], P, qb->xb};
    KILN_RETURN_IF_ERROR(nn_view(ctx, qb->x, "xq_flat", qb->xb ? 4 : 3, fs, &qb->xf));
  }
  if (qb->q4 && qb->xb) {
    const int64_t* xs = qb->x->shape;
    const int64_t s5[5] = {xs[0], xs[1], xs[2], xs[3], qb->xb / 4}, s4[4] = {xs[0], xs[1], xs[2] * xs[3], qb->xb / 4};
    KILN_RETURN_IF_ERROR(qb_view_i32(ctx, qb->x, "xq_i32", qb->xf ? 4 : 5, qb->xf ? s4 : s5, &qb->xq));
  }
  qb->Cp = qb->q4 ? (qb->C + 3) / 4 : (qb->C + 1) / 2;
  nn_tap_group_t tg = {{1, qb->ah.k, qb->aw.k}, 0, {0, qb->aw.k, 1}};
  nn_gemm_t g;
  memset(&g, 0, sizeof g);
  g.batch = qb->N;
  g.M = qb->ah.out * qb->aw.out;
  g.N = qb->Mp;
  g.K = qb->Cp * qb->T;
  g.taps = qb->T;
  g.n_groups = 1;
  g.groups = &tg;
  g.user = qb;
  g.idot = true;
  g.dot4 = qb->q4;
  g.w8 = qb->w8 && !qb->q4;
  g.init = qb->bias ? qb_init : NULL;
  g.epi = qb_epi;
  g.L.lload = qb_lload;
  if (qb->q4) {
    /* L in place, the taps outside the k loop, which runs over one x
     * block's quads at a time (loads at constant offsets) */
    KILN_RETURN_IF_ERROR(qb_src4(kb, qb));
    g.L.lload = qb_lload4d;
    g.direct_l = true;
    g.taps_outer = true;
    g.ksplit = qb->xb / 4;
  }
  g.store = qb_store;
  g.nr_max = 2 * qb->c;
  g.kc = qb->Cp; /* idot: no K blocks (the i32 sums are never reloaded) */
  /* one or two channel blocks per tile column; rows as many as keep the
   * accumulators, the R vectors and the broadcast in registers */
  int64_t lanes, regs;
  nn_simd(ctx, &lanes, &regs);
  g.nr = qb->Mp % (2 * qb->c) == 0 ? 2 * qb->c : qb->c;
  g.jblock = qb->c;
  int64_t vecs = (g.nr + lanes - 1) / lanes, mr_max = (regs - 4) / vecs;
  if (mr_max > 14) mr_max = 14;
  if (mr_max < 1) mr_max = 1;
  const int64_t tiles = (g.M + mr_max - 1) / mr_max;
  g.mr = (g.M + tiles - 1) / tiles;
  const int64_t nct = (1 << 20) / (int64_t)sizeof(int32_t) / (g.K * g.nr);
  g.nc_tiles = nct < 1 ? 1 : nct;
  KILN_RETURN_IF_ERROR(
      nn_pack_const(ctx, &g, "wpack_qblk", 1, qb->M, g.K, g.nr, qb->q4 ? qb_get_w4 : qb_get_w, qb, &g.R.packed));
  return nn_gemm_emit(kb, &g);
}

/* ---- depthwise ----------------------------------------------------------------- */

typedef struct qdw_s {
  const qb_t* qb;
  const tir_expr_t *n, *cb, *oh, *ow;
  bool rows_guarded, cols_guarded;
  /* int8 weights: the channel block's, widened to f32 [T * c] once per
   * block (the taps' loads are then plain f32 vectors, as with f32
   * weights: widening them at every position cost ~7% of MobileNetV2) */
  const tir_buffer_t* wv;
} qdw_t;

/* Output vector (n, cb, oh, ow, lane l): bias + the taps' (x - x_zp) *
 * (w - w_zp), taps outside the input 0, requantized. In f32 where every
 * partial sum is an integer below 2^24 (qb->dwf: exact in any order, and
 * the CPU printer's f32 vectors widen the u8 loads), else in i32. */
static const tir_stmt_t* qdw_body(nn_kb_t* kb, const qdw_t* d, const tir_expr_t* l) {
  const qb_t* qb = d->qb;
  tir_ctx_t* t = kb->t;
  const bool f = qb->dwf;
  const tir_expr_t* zero = f ? nn_f(kb, 0.0) : tir_const(t, KILN_DTYPE_I32, 0);
  const tir_expr_t* acc = qb->bias ? tir_load(t, qb->bias, NN_IDX(d->cb, l)) : zero;
  const tir_expr_t* zp = !f ? NULL
                         : qb->q->xzp_is_imm ? nn_f(kb, (double)qb->q->xzp_imm)
                                             : nn_ldf(kb, qb->q->xzp, NN_IDX(nn_i(kb, 0)));
  const tir_expr_t* ch = nn_add(kb, nn_mulc(kb, d->cb, qb->c), l);
  for (int64_t kh = 0; kh < qb->ah.k; ++kh)
    for (int64_t kw = 0; kw < qb->aw.k; ++kw) {
      const tir_expr_t* valid = NULL;
      const tir_expr_t* ih = qb_coord(kb, &qb->ah, d->oh, nn_i(kb, kh), d->rows_guarded, &valid);
      const tir_expr_t* iw = qb_coord(kb, &qb->aw, d->ow, nn_i(kb, kw), d->cols_guarded, &valid);
      const tir_expr_t* x = f ? nn_ldf(kb, qb->x, NN_IDX(d->n, d->cb, ih, iw, l)) : qb_x(kb, qb, d->n, ch, ih, iw);
      /* with the zero point in the bias (qb->zfold) x as it is, and x_zp
       * outside the input; else x - x_zp, and 0 outside */
      if (!qb->zfold) x = tir_sub(t, x, f ? zp : qb_zp(kb, qb));
      if (valid) x = tir_select(t, valid, x, qb->zfold ? zp : zero);
      const int64_t tap = kh * qb->aw.k + kw;
      const tir_expr_t* wv = d->wv ? tir_load(t, d->wv, NN_IDX(nn_addc(kb, l, tap * qb->c)))
                                   : tir_load(t, qb->w, NN_IDX(d->cb, nn_i(kb, tap), l));
      acc = tir_add(t, acc, tir_mul(t, x, wv));
    }
  return tir_store(t, qb->y, NN_IDX(d->n, d->cb, d->oh, d->ow, l), qb_requant(kb, qb, ch, acc));
}

/* Output columns [o0, o0 + len) of one row: columns, then the lanes. */
static const tir_stmt_t* qdw_cols(nn_kb_t* kb, qdw_t* d, int64_t o0, int64_t len) {
  if (len <= 0) return NULL;
  tir_var_t* vw = nn_var(kb, "ow");
  tir_var_t* vl = nn_var(kb, "l");
  d->ow = nn_addc(kb, nn_v(kb, vw), o0);
  const tir_stmt_t* s = nn_for(kb, vl, d->qb->c, qdw_body(kb, d, nn_v(kb, vl)));
  nn_vectorize(kb, vl);
  return nn_for(kb, vw, len, s);
}

static kiln_status_t qconv_depthwise_blocked(nn_kb_t* kb, qb_t* qb) {
  kiln_lower_ctx_t* ctx = kb->ctx;
  const int64_t c = qb->c, CB = (qb->C + c - 1) / c, T = qb->T;
  int32_t* bias = NULL;
  KILN_RETURN_IF_ERROR(qb_bias(ctx, qb, CB * c, &bias));
  /* f32 sums when |bias| + 255 * sum |w - w_zp| stays below 2^24 for
   * every channel (|x - x_zp| <= 255) */
  qb->dwf = true;
  for (int64_t ch = 0; ch < qb->C && qb->dwf; ++ch) {
    double bound = bias ? fabs((double)bias[ch]) : 0.0;
    for (int64_t tap = 0; tap < T; ++tap) bound += 255.0 * fabs((double)qb->q->wq[ch * T + tap]);
    qb->dwf = bound < 16777216.0;
  }
  /* x_zp folded into the bias when constant: the partial sums then stay
   * within |bias| + 510 * sum |w - w_zp| */
  qb->zfold = qb->dwf && qb->q->xzp_is_imm;
  for (int64_t ch = 0; ch < qb->C && qb->zfold; ++ch) {
    double bound = bias ? fabs((double)bias[ch]) : 0.0;
    for (int64_t tap = 0; tap < T; ++tap) bound += 510.0 * fabs((double)qb->q->wq[ch * T + tap]);
    qb->zfold = bound < 16777216.0;
  }
  if (qb->zfold && qb->q->xzp_imm != 0) {
    if (!bias && !(bias = calloc((size_t)(CB * c), sizeof(int32_t))))
      return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: blocked depthwise bias", ctx->node->name);
    for (int64_t ch = 0; ch < qb->C; ++ch) {
      int64_t sw = 0;
      for (int64_t tap = 0; tap < T; ++tap) sw += (int64_t)qb->q->wq[ch * T + tap];
      bias[ch] = (int32_t)((int64_t)bias[ch] - (int64_t)qb->q->xzp_imm * sw);
    }
  }
  const kiln_dtype_t dt = qb->dwf ? KILN_DTYPE_F32 : KILN_DTYPE_I32;
  /* f32 sums read int8 weights (one byte each, widened by the vector
   * load) where every w - w_zp fits int8 */
  bool w8 = qb->dwf;
  for (int64_t i = 0; i < qb->C * T && w8; ++i) w8 = qb->q->wq[i] >= -128.0f && qb->q->wq[i] <= 127.0f;
  const kiln_dtype_t wdt = w8 ? KILN_DTYPE_I8 : dt;
  void* wp = calloc((size_t)(CB * T * c), kiln_dtype_size(wdt));
  void* bp = bias && qb->dwf ? calloc((size_t)(CB * c), 4) : NULL;
  if (!wp || (bias && qb->dwf && !bp)) {
    free(wp), free(bp), free(bias);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: blocked depthwise weights", ctx->node->name);
  }
  for (int64_t ch = 0; ch < qb->C; ++ch)
    for (int64_t tap = 0; tap < T; ++tap) {
      const int64_t o = ((ch / c) * T + tap) * c + ch % c;
      if (w8) ((int8_t*)wp)[o] = (int8_t)qb->q->wq[ch * T + tap];
      else if (qb->dwf) ((float*)wp)[o] = qb->q->wq[ch * T + tap];
      else ((int32_t*)wp)[o] = (int32_t)qb->q->wq[ch * T + tap];
    }
  if (bp) {
    for (int64_t i = 0; i < CB * c; ++i) ((float*)bp)[i] = (float)bias[i];
    free(bias);
    bias = bp;
  }
  const int64_t ws[3] = {CB, T, c}, bs[2] = {CB, c};
  kiln_status_t st = nn_const_typed(ctx, "qwdw_blk", wdt, 3, ws, wp, &qb->w);
  if (st) {
    free(bias);
    return st;
  }
  if (bias) KILN_RETURN_IF_ERROR(nn_const_typed(ctx, "qbdw_blk", dt, 2, bs, bias, &qb->bias));
  qdw_t d = {.qb = qb};
  const int64_t tc = T * c;
  if (w8) d.wv = tir_buffer(kb->t, "wv", KILN_DTYPE_F32, 1, &tc, TIR_SCOPE_PRIVATE);
  tir_var_t* vnc = nn_var(kb, "ncb");
  d.n = nn_divc(kb, nn_v(kb, vnc), CB);
  d.cb = nn_modc(kb, nn_v(kb, vnc), CB);
  int64_t hlo, hhi, wlo, whi;
  nn_axis_interior(&qb->ah, &hlo, &hhi);
  nn_axis_interior(&qb->aw, &wlo, &whi);
  const int64_t segh[4] = {0, hlo, hhi, qb->ah.out}, segw[4] = {0, wlo, whi, qb->aw.out};
  const tir_stmt_t* body = NULL;
  for (int sh = 0; sh < 3; ++sh) {
    if (segh[sh + 1] <= segh[sh]) continue;
    tir_var_t* vh = nn_var(kb, "oh");
    d.oh = nn_addc(kb, nn_v(kb, vh), segh[sh]);
    d.rows_guarded = sh != 1;
    const tir_stmt_t* row = NULL;
    for (int sw = 0; sw < 3; ++sw) {
      d.cols_guarded = sw != 1;
      row = tir_seq2(kb->t, row, qdw_cols(kb, &d, segw[sw], segw[sw + 1] - segw[sw]));
    }
    body = tir_seq2(kb->t, body, nn_for(kb, vh, segh[sh + 1] - segh[sh], row));
  }
  if (d.wv) {
    tir_var_t* vi = nn_var(kb, "wi");
    const tir_expr_t* i = nn_v(kb, vi);
    const tir_stmt_t* widen = nn_for(
        kb, vi, T * c, tir_store(kb->t, d.wv, NN_IDX(i), nn_ldf(kb, qb->w, NN_IDX(d.cb, nn_divc(kb, i, c), nn_modc(kb, i, c)))));
    nn_vectorize(kb, vi);
    body = tir_alloc(kb->t, d.wv, tir_seq2(kb->t, widen, body));
  }
  body = nn_for(kb, vnc, qb->N * CB, body);
  if (qb->N * CB > 1) nn_parallel(kb, vnc);
  return nn_emit(kb, body);
}

kiln_status_t nn_qconv_blocked(kiln_lower_ctx_t* ctx, const nn_qconv_t* q) {
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  const kiln_node_t* node = ctx->node;
  const kiln_tensor_t *xt = ctx->in_tensor[q->x], *wt = ctx->in_tensor[q->w], *yt = ctx->out_tensor[0];
  if (!xt || !wt || !yt || xt->shape.rank != 4 || wt->shape.rank != 4 || yt->shape.rank != 4)
    return kiln_make_status(KILN_INTERNAL, "%s: the blocked layout takes 2-D convolutions only", node->name);
  qb_t qb;
  memset(&qb, 0, sizeof qb);
  qb.q = q;
  qb.x = ctx->in[q->x], qb.y = ctx->out[0];
  qb.xb = ctx->in_block ? ctx->in_block[q->x] : 0;
  qb.c = ctx->out_block[0];
  qb.N = xt->shape.dims[0], qb.C = xt->shape.dims[1], qb.M = wt->shape.dims[0];
  qb.Mp = (qb.M + qb.c - 1) / qb.c * qb.c;
  nn_axis_t ax[2];
  KILN_RETURN_IF_ERROR(nn_window(node, node->op_type, 2, xt->shape.dims + 2, yt->shape.dims + 2, wt->shape.dims + 2,
                                 false, ax));
  qb.ah = ax[0], qb.aw = ax[1];
  qb.T = qb.ah.k * qb.aw.k;
  int64_t G = 1;
  KILN_RETURN_IF_ERROR(kiln_attr_int(node, "group", 1, &G));
  if (kiln_shape_count(&yt->shape) == 0) return NULL;
  if (G == 1 && wt->shape.dims[1] == qb.C) return qconv_gemm_blocked(&kb, &qb);
  if (G == qb.C && qb.M == qb.C && wt->shape.dims[1] == 1 && qb.xb == qb.c) return qconv_depthwise_blocked(&kb, &qb);
  return kiln_make_status(KILN_INTERNAL, "%s: group %lld has no blocked int8 kernel", node->name, (long long)G);
}
