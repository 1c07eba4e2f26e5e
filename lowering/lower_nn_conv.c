/* Conv and ConvTranspose lowerings.
 *
 * Conv is a GEMM per (image, group): Y[m][q] = sum_{c, tap} W[m][c,tap] *
 * Xs[c][off(tap) + q], with the weights packed at compile time (by a pack
 * kernel when not constant). The algorithm is chosen per shape (the
 * heuristic, in kiln_lower_nn_conv / conv_float):
 *
 *  1. "depthwise" (one input channel per group, up to 7x7 taps): a direct
 *     kernel, X to Y in one pass (conv_depthwise). It is memory bound; the
 *     GEMM path would copy the input and the output once more each.
 *  2. "plain GEMM" (1x1 convs and other stride-1 unpadded windows that read
 *     the input as is): the GEMM reads X and writes Y through flat views
 *     [N][C][spatial], weights as L, vectorized along the output positions;
 *     no copies.
 *  3. "implicit GEMM" (everything else, any stride/dilation/padding/group):
 *     one pass splits the zero-padded input into stride phases (s^nsp phase
 *     images, only those some tap uses), laid out with the pitch of the
 *     output grid. Every tap is then a shift of that flat plane, affine in
 *     the tap indices within a stride residue class, so the GEMM's R operand
 *     is contiguous along the grid, and its k loop runs over channels with
 *     the taps as inner loops (no im2col is ever materialised: the copy is
 *     one pass over the input where im2col writes taps times as much). The
 *     grid carries (k-1)*d/s garbage columns per row (2 of 58 for a 3x3 on
 *     56x56) and is padded to whole register tiles; the GEMM writes a flat
 *     temp and a crop kernel copies the valid part into Y.
 *  4. "transposed implicit GEMM" (tiny outputs, where the grid would be at
 *     least 1.5x the output, e.g. 16 columns for a 3x3 or 1x1 output): the
 *     GEMM's rows are the dense output positions (their taps gathered into
 *     packed panels) and it vectorizes over output channels instead, then a
 *     transpose copies into Y.
 *  5. "im2col GEMM" (more stride residue classes than the implicit GEMM
 *     keeps apart, NN_MAX_GROUPS: a ViT patchify conv, kernel 16 stride 16,
 *     has 256, one per tap): the taps are gathered into a patch matrix
 *     col[n][c*T + tap][q] over the dense output positions and a plain GEMM
 *     writes Y. For the usual patchify (kernel == stride, no padding) col
 *     holds every input element once, the same bytes as the phase split.
 *
 * QLinearConv with constant weights (nn_conv_quantized) takes the direct
 * depthwise kernel when it is depthwise and its sums are exact in f32
 * (dw_exact: below 2^24), reading u8/i8 x - x_zp and storing the caller's
 * requantization; 3x faster than the GEMM path on MobileNetV2's shapes
 * (whose channel pairs were half empty) and without its 4-byte-per-element
 * copy of the input. Otherwise it takes the same paths as Conv: X loads
 * subtract x's zero point (so the input is
 * always copied, never read as is), the weights are w - w_zp, the i32 bias
 * is the initial sum and the caller's requantization the epilogue. Cases
 * 3 and 4 run as an int8 GEMM (cv_t.pair): the copy packs channels 2c and
 * 2c+1 of x - x_zp as the i16 halves of one i32 (the k loop counts pairs),
 * the weights likewise (one byte each when every w - w_zp fits int8), and
 * the i32 accumulators step by dot2_i16: exact sums, two multiply-adds per
 * lane per instruction (vpmaddwd + vpaddd; vpdpwssd with VNNI). i16 rather
 * than vpmaddubsw's u8 x i8: its int16 pair sums saturate (255*127*2 >
 * 32767), which oneDNN and onnxruntime accept (or avoid by 7-bit weights)
 * and kiln's bit-exactness with the reference does not. The GEMM stores
 * y's dtype (its crop temps too), so the requantization vectorizes.
 *
 * ConvTranspose is a GEMM col[(m, tap)][i] = sum_c W[c][m, tap] * X[c][i]
 * into a temp, then a col2im kernel adding each tap's columns into the
 * output (per output channel, so it runs in parallel without races).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lowering/lower_nn_impl.h"

#define NN_MAX_TAPS 4096

typedef struct cv_s {
  const tir_buffer_t *x, *w, *bias, *y;
  const tir_buffer_t* src; /* [N][C][plane]: X view or the phase-split temp */
  const tir_buffer_t* dst; /* Y view [N][M][Q] or flat temp [N*G][Mg][Q] */
  bool crop;
  bool trans;      /* spatial positions as the GEMM's M: dst is [N*G][Qd][Mg] */
  int32_t nsp;
  nn_axis_t a3[3]; /* spatial axes padded to 3 (leading 1s) */
  int64_t N, C, M, G, Cg, Mg, T, Q, Qd;
  int64_t q3[3];   /* phase image dims (Dq, Hq, Wq) */
  /* tap groups (stride residue classes): input offset of the group's tap
   * at loop indices kv = obase + sum kv[i] * ostr[i] */
  int32_t ng;
  nn_tap_group_t tg[NN_MAX_GROUPS];
  int64_t obase[NN_MAX_GROUPS], ostr[3];
  const float* wval;
  const nn_qconv_t* q; /* QLinearConv (nn_conv_quantized), else NULL */
  /* QLinearConv as an int8 GEMM (the GEMM's idot): src holds channel pairs
   * [N][G*Cgp][plane] as i32 (two i16 of x - x_zp, the second 0 past an odd
   * Cg), K = Cgp*T, the weights pack w - w_zp pairs the same way. */
  bool pair;
  bool w8; /* with pair: every w - w_zp fits int8, stored one byte each */
  const tir_buffer_t* w8buf; /* those weights as L: [G][Mg][K][1] i16 pairs */
  int64_t Cgp;
  nn_sparse_t sp; /* the weights' block-sparse form when the GEMM uses it */
  const tir_buffer_t* wdw; /* QLinearConv depthwise: w - w_zp as f32, W's shape */
} cv_t;

/* (lo & 0xffff) | hi << 16 of two i32 values in [-32768, 32767] (i32 ops). */
static const tir_expr_t* pack_i16(nn_kb_t* kb, const tir_expr_t* lo, const tir_expr_t* hi) {
  tir_ctx_t* t = kb->t;
  return tir_add(t, tir_bin(t, TIR_BAND, lo, tir_const(t, KILN_DTYPE_I32, 0xffff)),
                 tir_mul(t, hi, tir_const(t, KILN_DTYPE_I32, 65536)));
}

/* The source-plane channel count: channels, or pairs of them. */
static int64_t cv_src_ch(const cv_t* cv) { return cv->pair ? cv->G * cv->Cgp : cv->C; }
/* Channels (pairs) per group as the GEMM's k loop counts them. */
static int64_t cv_kch(const cv_t* cv) { return cv->pair ? cv->Cgp : cv->Cg; }

/* X[idx] as f32; QLinearConv subtracts x's zero point (padding reads 0,
 * which is then x - x_zp outside the input, as ONNX pads). */
static const tir_expr_t* cv_ldx(nn_kb_t* kb, const cv_t* cv, const tir_expr_t* const* idx) {
  const tir_expr_t* x = nn_ldf(kb, cv->x, idx);
  if (!cv->q) return x;
  if (cv->q->xzp_is_imm) return tir_sub(kb->t, x, nn_f(kb, (double)cv->q->xzp_imm));
  return tir_sub(kb->t, x, nn_ldf(kb, cv->q->xzp, NN_IDX(nn_i(kb, 0))));
}

/* The pair of x - x_zp at channels idx[1] and idx[1] + 1 (pair |c| of the
 * source plane; the second 0 when Cg is odd and c is a group's last pair),
 * packed as i16 halves of an i32. */
static const tir_expr_t* cv_ldx_pair(nn_kb_t* kb, const cv_t* cv, const tir_expr_t* c,
                                     const tir_expr_t* const* idx) {
  tir_ctx_t* t = kb->t;
  const tir_expr_t* zp = cv->q->xzp_is_imm
                             ? tir_const(t, KILN_DTYPE_I32, cv->q->xzp_imm)
                             : tir_cast(t, KILN_DTYPE_I32, tir_load(t, cv->q->xzp, NN_IDX(nn_i(kb, 0))));
  const tir_expr_t* lo = tir_sub(t, tir_cast(t, KILN_DTYPE_I32, tir_load(t, cv->x, idx)), zp);
  const tir_expr_t* i2[KILN_MAX_RANK];
  for (int32_t d = 0; d < cv->x->rank; ++d) i2[d] = idx[d];
  const tir_expr_t* hi;
  if (cv->Cg % 2 == 0) {
    i2[1] = nn_addc(kb, idx[1], 1);
    hi = tir_sub(t, tir_cast(t, KILN_DTYPE_I32, tir_load(t, cv->x, i2)), zp);
  } else {
    /* the last pair of a group has no second channel: clamp, then 0 */
    const tir_expr_t* ok = tir_bin(t, TIR_LT, nn_modc(kb, c, cv->Cgp), nn_i(kb, cv->Cgp - 1));
    i2[1] = nn_clamp(kb, nn_addc(kb, idx[1], 1), 0, cv->C - 1);
    hi = tir_select(t, ok, tir_sub(t, tir_cast(t, KILN_DTYPE_I32, tir_load(t, cv->x, i2)), zp),
                    tir_const(t, KILN_DTYPE_I32, 0));
  }
  return pack_i16(kb, lo, hi);
}

/* Index list of a rank nsp+2 tensor from n, c and three spatial indices. */
static void sp_idx(int32_t nsp, const tir_expr_t* n, const tir_expr_t* c,
                   const tir_expr_t* const* s3, const tir_expr_t** idx) {
  idx[0] = n;
  idx[1] = c;
  for (int32_t i = 0; i < nsp; ++i) idx[2 + i] = s3[3 - nsp + i];
}

/* ---- GEMM callbacks -------------------------------------------------------- */

static const tir_expr_t* cv_n(nn_kb_t* kb, const cv_t* cv, const tir_expr_t* b) {
  return nn_divc(kb, b, cv->G);
}
static const tir_expr_t* cv_g(nn_kb_t* kb, const cv_t* cv, const tir_expr_t* b) {
  return nn_modc(kb, b, cv->G);
}

static const tir_expr_t* cv_bmap(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b) {
  return cv_g(kb, g->user, b);
}

static const tir_expr_t* cv_rload(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                  const tir_expr_t* c, int32_t grp, const tir_expr_t* const* kv,
                                  const tir_expr_t* q) {
  const cv_t* cv = g->user;
  const tir_expr_t* ch = nn_add(kb, nn_mulc(kb, cv_g(kb, cv, b), cv_kch(cv)), c);
  const tir_expr_t* off = nn_i(kb, cv->obase[grp]);
  for (int d = 0; d < 3; ++d) off = nn_add(kb, off, nn_mulc(kb, kv[d], cv->ostr[d]));
  const tir_expr_t* const* idx = NN_IDX(cv_n(kb, cv, b), ch, nn_add(kb, q, off));
  return cv->pair ? tir_load(kb->t, cv->src, idx) : nn_ldf(kb, cv->src, idx);
}

/* Output index of element (m, q) of GEMM batch b: the flat temp or Y. */
static void cv_dst_idx(nn_kb_t* kb, const cv_t* cv, const tir_expr_t* b, const tir_expr_t* m,
                       const tir_expr_t* q, const tir_expr_t** idx) {
  if (cv->crop) {
    idx[0] = b, idx[1] = m, idx[2] = q;
  } else {
    idx[0] = cv_n(kb, cv, b);
    idx[1] = nn_add(kb, nn_mulc(kb, cv_g(kb, cv, b), cv->Mg), m);
    idx[2] = q;
  }
}

static const tir_stmt_t* cv_store(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                  const tir_expr_t* m, const tir_expr_t* q,
                                  const tir_expr_t* v) {
  const cv_t* cv = g->user;
  const tir_expr_t* idx[3];
  cv_dst_idx(kb, cv, b, m, q, idx);
  return nn_stf(kb, cv->dst, idx, v);
}

static const tir_expr_t* cv_reload(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                   const tir_expr_t* m, const tir_expr_t* q) {
  const cv_t* cv = g->user;
  const tir_expr_t* idx[3];
  cv_dst_idx(kb, cv, b, m, q, idx);
  return nn_ldf(kb, cv->dst, idx);
}

static const tir_expr_t* cv_init(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                 const tir_expr_t* m, const tir_expr_t* q) {
  const cv_t* cv = g->user;
  (void)q;
  const tir_expr_t* const* idx = NN_IDX(nn_add(kb, nn_mulc(kb, cv_g(kb, cv, b), cv->Mg), m));
  if (cv->pair) return tir_cast(kb->t, KILN_DTYPE_I32, tir_load(kb->t, cv->bias, idx));
  return nn_ldf(kb, cv->bias, idx);
}

/* QLinearConv: the final sum of output channel g*Mg + m (transposed mode:
 * the GEMM's column n) requantized by the caller's callback. */
static const tir_expr_t* cv_requant(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                    const tir_expr_t* m, const tir_expr_t* n,
                                    const tir_expr_t* acc) {
  const cv_t* cv = g->user;
  const tir_expr_t* ch = nn_add(kb, nn_mulc(kb, cv_g(kb, cv, b), cv->Mg), cv->trans ? n : m);
  const tir_expr_t* v = cv->q->requant(kb, cv->q->user, ch, acc);
  /* the int8 GEMM stores y's dtype (its temps have it): no f32 round trip,
   * which kept GCC from vectorizing the epilogue */
  return cv->pair ? v : tir_cast(kb->t, KILN_DTYPE_F32, v);
}

/* Transposed mode: GEMM rows are the dense output positions q (read from
 * the phase grid at their grid position), columns the output channels. */
static const tir_expr_t* cvt_qpos(nn_kb_t* kb, const cv_t* cv, const tir_expr_t* q) {
  const nn_axis_t* a3 = cv->a3;
  const tir_expr_t* w = nn_modc(kb, q, a3[2].out);
  const tir_expr_t* h = nn_modc(kb, nn_divc(kb, q, a3[2].out), a3[1].out);
  const tir_expr_t* d = nn_divc(kb, q, a3[1].out * a3[2].out);
  return nn_add(kb, nn_mulc(kb, nn_add(kb, nn_mulc(kb, d, cv->q3[1]), h), cv->q3[2]), w);
}

static const tir_expr_t* cvt_lload(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                   const tir_expr_t* c, int32_t grp, const tir_expr_t* const* kv,
                                   const tir_expr_t* q) {
  const cv_t* cv = g->user;
  const tir_expr_t* ch = nn_add(kb, nn_mulc(kb, cv_g(kb, cv, b), cv_kch(cv)), c);
  const tir_expr_t* off = nn_i(kb, cv->obase[grp]);
  for (int d = 0; d < 3; ++d) off = nn_add(kb, off, nn_mulc(kb, kv[d], cv->ostr[d]));
  const tir_expr_t* const* idx = NN_IDX(cv_n(kb, cv, b), ch, nn_add(kb, cvt_qpos(kb, cv, q), off));
  return cv->pair ? tir_load(kb->t, cv->src, idx) : nn_ldf(kb, cv->src, idx);
}

static const tir_stmt_t* cvt_store(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                   const tir_expr_t* q, const tir_expr_t* m,
                                   const tir_expr_t* v) {
  const cv_t* cv = g->user;
  return tir_store(kb->t, cv->dst, NN_IDX(b, q, m), v);
}

static const tir_expr_t* cvt_reload(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                    const tir_expr_t* q, const tir_expr_t* m) {
  const cv_t* cv = g->user;
  return tir_load(kb->t, cv->dst, NN_IDX(b, q, m));
}

static const tir_expr_t* cvt_init(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                  const tir_expr_t* q, const tir_expr_t* m) {
  (void)q;
  return cv_init(kb, g, b, m, q);
}

/* Packed weights: batch g, row m, col kk = c * T + tap. */
static double cv_get_w(const void* user, int64_t g, int64_t m, int64_t kk) {
  const cv_t* cv = user;
  const float* w = cv->wval + (g * cv->Mg + m) * cv->Cg * cv->T;
  if (!cv->pair) return w[kk];
  /* kk = pair * T + tap: channels 2*pair and 2*pair + 1 (0 past Cg) */
  const int64_t c0 = kk / cv->T * 2, tap = kk % cv->T;
  const int32_t lo = (int32_t)w[c0 * cv->T + tap], hi = c0 + 1 < cv->Cg ? (int32_t)w[(c0 + 1) * cv->T + tap] : 0;
  /* int8 pairs in an i16 (cv->w8), else i16 pairs in an i32 */
  if (cv->w8) return (double)(int16_t)(uint16_t)(((uint32_t)lo & 0xffu) | (((uint32_t)hi & 0xffu) << 8));
  return (double)(int32_t)(((uint32_t)lo & 0xffffu) | ((uint32_t)hi << 16));
}

/* L element (m, k) of batch b from the int8 weights (pack_weights' panel
 * case), widened to dot2_i16's operand. */
static const tir_expr_t* cv_load_w8(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                    const tir_expr_t* m, const tir_expr_t* k) {
  const cv_t* cv = g->user;
  const tir_expr_t* ld = tir_load(kb->t, cv->w8buf, NN_IDX(cv_g(kb, cv, b), m, k, nn_i(kb, 0)));
  return tir_call(kb->t, TIR_WIDEN_I8X2, 1, ld, NULL, NULL);
}

/* W[dim0][flat], with |flat| spread over the weight's dims 1..rank-1
 * (e.g. ((c * KD + kd) * KH + kh) * KW + kw): Conv and ConvTranspose read
 * their weights through it. */
static const tir_expr_t* load_w_flat(nn_kb_t* kb, const tir_buffer_t* w, const tir_expr_t* dim0,
                                     const tir_expr_t* flat) {
  const tir_expr_t* idx[KILN_MAX_RANK];
  idx[0] = dim0;
  const tir_expr_t* rest = flat;
  for (int32_t d = w->rank - 1; d >= 1; --d) {
    idx[d] = d == 1 ? rest : nn_modc(kb, rest, w->shape[d]);
    rest = nn_divc(kb, rest, w->shape[d]);
  }
  return nn_ldf(kb, w, idx);
}

static const tir_expr_t* cv_load_w(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* grp,
                                   const tir_expr_t* m, const tir_expr_t* kk) {
  const cv_t* cv = g->user;
  return load_w_flat(kb, cv->w, nn_add(kb, nn_mulc(kb, grp, cv->Mg), m), kk);
}

/* ---- phase split ---------------------------------------------------------- */

/* Zero-fill of src[n][c][base + e] for e in [0, len). */
static const tir_stmt_t* zero_run(nn_kb_t* kb, const cv_t* cv, const tir_expr_t* n,
                                  const tir_expr_t* c, const tir_expr_t* base, int64_t len) {
  if (len <= 0) return NULL;
  tir_var_t* ve = nn_var(kb, "z");
  const tir_stmt_t* s = tir_store(kb->t, cv->src, NN_IDX(n, c, nn_add(kb, base, nn_v(kb, ve))),
                                  cv->pair ? tir_const(kb->t, KILN_DTYPE_I32, 0) : nn_f(kb, 0.0));
  nn_vectorize(kb, ve);
  return nn_for(kb, ve, len, s);
}

/* Valid phase-image indices [lo, hi) along one axis: l*s + a - p in [0, in). */
static void phase_range(const nn_axis_t* ax, int64_t a, int64_t len, int64_t* lo, int64_t* hi) {
  int64_t off = a - ax->p;
  kiln_nn_valid_range(off, ax->s, ax->in, len, lo, hi);
}

/* The phase split for a device with a loop limit (lavapipe: 65,535
 * iterations per invocation) when a plane is past half of it (a 3-channel
 * 320x320 stride-2 stem: 4 phases of 161x161 per invocation): one work-item
 * per element of src, its phase p and position (i, j, l) from its index,
 * X read at clamped coordinates and replaced by 0 outside X or past the
 * used phases. Not for the paired int8 planes. */
static kiln_status_t phase_split_flat(nn_kb_t* kb, cv_t* cv, int32_t nph, const int64_t (*ph)[3],
                                      int64_t plane) {
  tir_ctx_t* t = kb->t;
  tir_var_t* vq = nn_var(kb, "q");
  const tir_expr_t* q = nn_v(kb, vq);
  const int64_t SC = cv_src_ch(cv);
  const int64_t Dq = cv->q3[0], Hq = cv->q3[1], Wq = cv->q3[2], PS = Dq * Hq * Wq;
  const tir_expr_t* nc = nn_divc(kb, q, plane);
  const tir_expr_t* e = nn_modc(kb, q, plane);
  const tir_expr_t* n = nn_divc(kb, nc, SC);
  const tir_expr_t* c = nn_modc(kb, nc, SC);
  const tir_expr_t* p = nn_divc(kb, e, PS);
  const tir_expr_t* r = nn_modc(kb, e, PS);
  const tir_expr_t* pos[3] = {nn_divc(kb, r, Hq * Wq), nn_modc(kb, nn_divc(kb, r, Wq), Hq),
                              nn_modc(kb, r, Wq)};
  const tir_expr_t* ok = tir_bin(t, TIR_LT, p, nn_i(kb, nph));
  const tir_expr_t* s3[3];
  for (int32_t d = 0; d < 3; ++d) {
    /* the phase's offset along d: a select over the used phases */
    const tir_expr_t* a = nn_i(kb, ph[0][d]);
    for (int32_t k = 1; k < nph; ++k)
      a = tir_select(t, tir_bin(t, TIR_EQ, p, nn_i(kb, k)), nn_i(kb, ph[k][d]), a);
    const nn_axis_t* ax = &cv->a3[d];
    const tir_expr_t* x = tir_sub(t, tir_add(t, nn_mulc(kb, pos[d], ax->s), a), nn_i(kb, ax->p));
    ok = tir_bin(t, TIR_AND, ok,
                 tir_bin(t, TIR_AND, tir_bin(t, TIR_GE, x, nn_i(kb, 0)), tir_bin(t, TIR_LT, x, nn_i(kb, ax->in))));
    s3[d] = nn_clamp(kb, x, 0, ax->in - 1);
  }
  const tir_expr_t* xi[KILN_MAX_RANK];
  sp_idx(cv->nsp, n, c, s3, xi);
  const tir_stmt_t* body =
      tir_store(t, cv->src, NN_IDX(n, c, e), tir_select(t, ok, cv_ldx(kb, cv, xi), nn_f(kb, 0.0)));
  nn_parallel(kb, vq);
  return nn_emit(kb, nn_for(kb, vq, cv->N * SC * plane, body));
}

/* The phase-split kernel: for every used phase (ad, ah, aw) and phase image
 * position (i, j, l): src[n][c][ph*PS + (i*Hq + j)*Wq + l] =
 * X[n][c][i*sd + ad - pd][j*sh + ah - ph][l*sw + aw - pw] (0 outside X),
 * then zeros up to the plane end. */
static kiln_status_t phase_split(nn_kb_t* kb, cv_t* cv, int32_t nph, const int64_t (*ph)[3],
                                 int64_t plane) {
  tir_var_t* vnc = nn_var(kb, "nc");
  const tir_expr_t* nc = nn_v(kb, vnc);
  const int64_t SC = cv_src_ch(cv);
  const tir_expr_t* n = nn_divc(kb, nc, SC);
  const tir_expr_t* c = nn_modc(kb, nc, SC); /* the source plane's channel (pair) */
  /* x's channel: c, or the pair's first channel g*Cg + 2*(c % Cgp) */
  const tir_expr_t* cx = !cv->pair ? c
      : nn_add(kb, nn_mulc(kb, nn_divc(kb, c, cv->Cgp), cv->Cg), nn_mulc(kb, nn_modc(kb, c, cv->Cgp), 2));
  const int64_t Dq = cv->q3[0], Hq = cv->q3[1], Wq = cv->q3[2], PS = Dq * Hq * Wq;
  const tir_stmt_t* body = NULL;
  for (int32_t p = 0; p < nph; ++p) {
    int64_t lo[3], hi[3];
    for (int32_t d = 0; d < 3; ++d) phase_range(&cv->a3[d], ph[p][d], cv->q3[d], &lo[d], &hi[d]);
    const int64_t base = p * PS;
    if (lo[0] >= hi[0] || lo[1] >= hi[1] || lo[2] >= hi[2]) {
      body = tir_seq2(kb->t, body, zero_run(kb, cv, n, c, nn_i(kb, base), PS));
      continue;
    }
    /* depth slabs outside the input */
    body = tir_seq2(kb->t, body, zero_run(kb, cv, n, c, nn_i(kb, base), lo[0] * Hq * Wq));
    body = tir_seq2(kb->t, body, zero_run(kb, cv, n, c, nn_i(kb, base + hi[0] * Hq * Wq),
                                          (Dq - hi[0]) * Hq * Wq));
    /* valid slabs: rows above/below the input, then data rows */
    tir_var_t* vi = nn_var(kb, "pd");
    tir_var_t* vj = nn_var(kb, "ph");
    tir_var_t* vl = nn_var(kb, "pw");
    const tir_expr_t* i = nn_addc(kb, nn_v(kb, vi), lo[0]);
    const tir_expr_t* j = nn_addc(kb, nn_v(kb, vj), lo[1]);
    const tir_expr_t* l = nn_addc(kb, nn_v(kb, vl), lo[2]);
    const tir_expr_t* slab = nn_addc(kb, nn_mulc(kb, i, Hq * Wq), base);
    const tir_expr_t* row = nn_add(kb, slab, nn_mulc(kb, j, Wq));
    const tir_expr_t* s3[3] = {
        nn_addc(kb, nn_mulc(kb, i, cv->a3[0].s), ph[p][0] - cv->a3[0].p),
        nn_addc(kb, nn_mulc(kb, j, cv->a3[1].s), ph[p][1] - cv->a3[1].p),
        nn_addc(kb, nn_mulc(kb, l, cv->a3[2].s), ph[p][2] - cv->a3[2].p)};
    const tir_expr_t* xi[KILN_MAX_RANK];
    sp_idx(cv->nsp, n, cx, s3, xi);
    const tir_stmt_t* copy =
        tir_store(kb->t, cv->src, NN_IDX(n, c, nn_add(kb, row, l)), cv->pair ? cv_ldx_pair(kb, cv, c, xi) : cv_ldx(kb, cv, xi));
    copy = nn_for(kb, vl, hi[2] - lo[2], copy);
    if (cv->a3[2].s == 1) nn_vectorize(kb, vl);
    const tir_stmt_t* rowb[3] = {zero_run(kb, cv, n, c, row, lo[2]), copy,
                                 zero_run(kb, cv, n, c, nn_addc(kb, row, hi[2]), Wq - hi[2])};
    const tir_stmt_t* rows = nn_for(kb, vj, hi[1] - lo[1], tir_seq(kb->t, 3, rowb));
    const tir_stmt_t* slabb[3] = {
        zero_run(kb, cv, n, c, slab, lo[1] * Wq), rows,
        zero_run(kb, cv, n, c, nn_addc(kb, slab, hi[1] * Wq), (Hq - hi[1]) * Wq)};
    body = tir_seq2(kb->t, body, nn_for(kb, vi, hi[0] - lo[0], tir_seq(kb->t, 3, slabb)));
  }
  body = tir_seq2(kb->t, body, zero_run(kb, cv, n, c, nn_i(kb, nph * PS), plane - nph * PS));
  body = nn_for(kb, vnc, cv->N * SC, body);
  if (cv->N * SC > 1) nn_parallel(kb, vnc);
  return nn_emit(kb, body);
}

/* Y[n][g*Mg + m][od][oh][ow] = flat[n*G + g][m][(od*Hq + oh)*Wq + ow]
 * (transposed mode: flat[n*G + g][(od*Ho + oh)*Wo + ow][m]). */
static kiln_status_t crop(nn_kb_t* kb, const cv_t* cv) {
  tir_var_t* vnm = nn_var(kb, "nm");
  tir_var_t* vd = nn_var(kb, "od");
  tir_var_t* vh = nn_var(kb, "oh");
  tir_var_t* vw = nn_var(kb, "ow");
  const tir_expr_t* nm = nn_v(kb, vnm);
  const tir_expr_t* n = nn_divc(kb, nm, cv->M);
  const tir_expr_t* m = nn_modc(kb, nm, cv->M);
  const tir_expr_t* b = nn_add(kb, nn_mulc(kb, n, cv->G), nn_divc(kb, m, cv->Mg));
  const tir_expr_t* s3[3] = {nn_v(kb, vd), nn_v(kb, vh), nn_v(kb, vw)};
  const tir_expr_t* q = nn_add(
      kb, nn_mulc(kb, nn_add(kb, nn_mulc(kb, s3[0], cv->q3[1]), s3[1]), cv->q3[2]), s3[2]);
  const tir_expr_t* yi[KILN_MAX_RANK];
  sp_idx(cv->nsp, n, m, s3, yi);
  const tir_expr_t* mg = nn_modc(kb, m, cv->Mg);
  if (cv->trans) {
    q = nn_add(kb, nn_mulc(kb, nn_add(kb, nn_mulc(kb, s3[0], cv->a3[1].out), s3[1]), cv->a3[2].out),
               s3[2]);
  }
  const tir_stmt_t* s = nn_stf(
      kb, cv->y, yi, tir_load(kb->t, cv->dst, cv->trans ? NN_IDX(b, q, mg) : NN_IDX(b, mg, q)));
  s = nn_for(kb, vw, cv->a3[2].out, s);
  s = nn_for(kb, vh, cv->a3[1].out, s);
  s = nn_for(kb, vd, cv->a3[0].out, s);
  s = nn_for(kb, vnm, cv->N * cv->M, s);
  nn_vectorize(kb, vw);
  if (cv->N * cv->M > 1) nn_parallel(kb, vnm);
  return nn_emit(kb, s);
}

/* ---- direct depthwise ------------------------------------------------------- */

typedef struct dw_s {
  const cv_t* cv;
  const tir_expr_t *n, *m, *ci, *od, *oh;
  bool rows_guarded; /* some tap row may be outside the input */
  bool cols_guarded; /* some tap column may be outside the input */
} dw_t;

/* y[n][m][od][oh][o] = bias[m] + sum over taps of w[m][0][tap] * x[n][ci][...]
 * with taps outside the input contributing 0 (the reference's zero
 * padding, in the same tap order). */
static const tir_stmt_t* dw_body(nn_kb_t* kb, void* u, const tir_expr_t* ow) {
  const dw_t* d = u;
  const cv_t* cv = d->cv;
  const nn_axis_t* a3 = cv->a3;
  tir_ctx_t* t = kb->t;
  const tir_expr_t* acc = cv->bias ? nn_ldf(kb, cv->bias, NN_IDX(d->m)) : nn_f(kb, 0.0);
  const tir_expr_t* o3[3] = {d->od, d->oh, ow};
  for (int64_t kd = 0; kd < a3[0].k; ++kd)
    for (int64_t kh = 0; kh < a3[1].k; ++kh)
      for (int64_t kw = 0; kw < a3[2].k; ++kw) {
        const int64_t kk[3] = {kd, kh, kw};
        const tir_expr_t* i3[3];
        const tir_expr_t* valid = NULL;
        for (int32_t a = 0; a < 3; ++a) {
          const tir_expr_t* e = nn_addc(kb, nn_mulc(kb, o3[a], a3[a].s), kk[a] * a3[a].d - a3[a].p);
          bool guard = a < 2 ? d->rows_guarded : d->cols_guarded;
          if (guard && a3[a].in > 0) {
            const tir_expr_t* ok = tir_bin(t, TIR_AND, tir_bin(t, TIR_GE, e, nn_i(kb, 0)),
                                           tir_bin(t, TIR_LT, e, nn_i(kb, a3[a].in)));
            valid = valid ? tir_bin(t, TIR_AND, valid, ok) : ok;
            e = nn_clamp(kb, e, 0, a3[a].in - 1);
          }
          i3[a] = e;
        }
        const tir_expr_t* xi[KILN_MAX_RANK];
        sp_idx(cv->nsp, d->n, d->ci, i3, xi);
        const tir_expr_t* x = cv_ldx(kb, cv, xi);
        if (valid) x = tir_select(t, valid, x, nn_f(kb, 0.0));
        const tir_expr_t* k3[3] = {nn_i(kb, kd), nn_i(kb, kh), nn_i(kb, kw)};
        const tir_expr_t* wi[KILN_MAX_RANK];
        sp_idx(cv->nsp, d->m, nn_i(kb, 0), k3, wi);
        acc = tir_add(t, acc, tir_mul(t, x, nn_ldf(kb, cv->q ? cv->wdw : cv->w, wi)));
      }
  const tir_expr_t* yi[KILN_MAX_RANK];
  sp_idx(cv->nsp, d->n, d->m, o3, yi);
  if (cv->q) { /* exact integer sums in f32 (dw_exact), requantized */
    const tir_expr_t* v = cv->q->requant(kb, cv->q->user, d->m, acc);
    return tir_store(t, cv->y, yi, v->dtype == cv->y->dtype ? v : tir_cast(t, cv->y->dtype, v));
  }
  return nn_stf(kb, cv->y, yi, acc);
}

/* QLinearConv depthwise runs the direct kernel above on x - x_zp and
 * w - w_zp in f32 when every partial sum is an integer below 2^24, so
 * exact in any order: |bias[m]| + 255 * sum |w - w_zp| over the channel's
 * taps (|x - x_zp| <= 255) below 2^24 for every channel. Then one pass over
 * x and y and no pair copy, against the int8 GEMM's half-empty channel
 * pairs. */
static bool dw_exact(kiln_lower_ctx_t* ctx, const cv_t* cv, const nn_qconv_t* q) {
  const kiln_array_t* b = q->bias >= 0 && q->bias < ctx->n_in && nn_is_const(ctx, q->bias)
                              ? &ctx->in_tensor[q->bias]->value
                              : NULL;
  if (cv->bias && !b) return false;
  for (int64_t m = 0; m < cv->M; ++m) {
    double bound = b ? fabs(kiln_load_f64(b->dtype, b->data, (size_t)m)) : 0.0;
    for (int64_t i = 0; i < cv->T; ++i) bound += 255.0 * fabs((double)q->wq[m * cv->T + i]);
    if (bound >= 16777216.0) return false;
  }
  return true;
}

/* Depthwise on small planes (2-D, stride 1, no dilation, output rows of at
 * most 64, the padded plane at most 4096 values): the row kernel above runs
 * their rows largely as border code (a 7x7 plane with a 3x3 window: 25 of
 * 49 outputs scalar, padding taps multiplied as 0 * w; a 28-wide row as
 * 16 + 8 + 2 scalar). Here each plane is copied once into a PRIVATE
 * zero-padded plane of row pitch Wp = Wo + kw - 1, the sums run over the
 * flattened rows of that pitch -- acc[i] = sum w[tap] * pad[i + kh Wp + kw]
 * for i < (Ho - 1) Wp + Wo, no masks, vectors of 16/8/4 along i (the
 * columns past Wo of each row are computed and dropped) -- and the Ho rows
 * of Wo are copied out to Y. Same taps in the same order as dw_body. */
typedef struct dwp_s {
  const cv_t* cv;
  const tir_buffer_t *pad, *acc;
  const tir_expr_t *n, *m, *ci, *row;
  int64_t Wp;
} dwp_t;

static const tir_stmt_t* dwp_zero(nn_kb_t* kb, void* u, const tir_expr_t* i) {
  const dwp_t* d = u;
  return tir_store(kb->t, d->pad, NN_IDX(i), nn_f(kb, 0.0));
}

/* pad[(row + ph) Wp + pw + iw] = x[n][ci][row][iw] */
static const tir_stmt_t* dwp_in(nn_kb_t* kb, void* u, const tir_expr_t* iw) {
  const dwp_t* d = u;
  const cv_t* cv = d->cv;
  const tir_expr_t* s3[3] = {nn_i(kb, 0), d->row, iw};
  const tir_expr_t* xi[KILN_MAX_RANK];
  sp_idx(cv->nsp, d->n, d->ci, s3, xi);
  const tir_expr_t* at = nn_add(kb, nn_mulc(kb, nn_addc(kb, d->row, cv->a3[1].p), d->Wp), nn_addc(kb, iw, cv->a3[2].p));
  return tir_store(kb->t, d->pad, NN_IDX(at), nn_ldf(kb, cv->x, xi));
}

static const tir_stmt_t* dwp_mac(nn_kb_t* kb, void* u, const tir_expr_t* i) {
  const dwp_t* d = u;
  const cv_t* cv = d->cv;
  tir_ctx_t* t = kb->t;
  const tir_expr_t* acc = cv->bias ? nn_ldf(kb, cv->bias, NN_IDX(d->m)) : nn_f(kb, 0.0);
  for (int64_t kh = 0; kh < cv->a3[1].k; ++kh)
    for (int64_t kw = 0; kw < cv->a3[2].k; ++kw) {
      const tir_expr_t* k3[3] = {nn_i(kb, 0), nn_i(kb, kh), nn_i(kb, kw)};
      const tir_expr_t* wi[KILN_MAX_RANK];
      sp_idx(cv->nsp, d->m, nn_i(kb, 0), k3, wi);
      const tir_expr_t* x = tir_load(t, d->pad, NN_IDX(nn_addc(kb, i, kh * d->Wp + kw)));
      acc = tir_add(t, acc, tir_mul(t, x, nn_ldf(kb, cv->w, wi)));
    }
  return tir_store(t, d->acc, NN_IDX(i), acc);
}

/* y[n][m][row][ow] = acc[row Wp + ow] */
static const tir_stmt_t* dwp_out(nn_kb_t* kb, void* u, const tir_expr_t* ow) {
  const dwp_t* d = u;
  const cv_t* cv = d->cv;
  const tir_expr_t* s3[3] = {nn_i(kb, 0), d->row, ow};
  const tir_expr_t* yi[KILN_MAX_RANK];
  sp_idx(cv->nsp, d->n, d->m, s3, yi);
  return nn_stf(kb, cv->y, yi, tir_load(kb->t, d->acc, NN_IDX(nn_add(kb, nn_mulc(kb, d->row, d->Wp), ow))));
}

/* [0, len) as nn_vec_run's vector pieces, and a rest of 1-3 elements as
 * one 4-lane vector ending at len (overlapping the piece before it): only
 * for bodies that store the same value when run twice (the padded copy and
 * the sums, never Y, whose stores a fused epilogue may turn into a
 * read-modify-write). */
static const tir_stmt_t* dwp_run(nn_kb_t* kb, int64_t len, nn_seg_fn fn, dwp_t* d) {
  const int64_t rest = len % 4;
  if (len < 4 || !rest) return nn_vec_run(kb, 0, len, true, fn, d);
  tir_var_t* v = nn_var(kb, "ow");
  const tir_stmt_t* tail = nn_for(kb, v, 4, fn(kb, d, nn_addc(kb, nn_v(kb, v), len - 4)));
  nn_vectorize(kb, v);
  return tir_seq2(kb->t, nn_vec_run(kb, 0, len - rest, true, fn, d), tail);
}

/* The planes this kernel takes (see above). */
static bool dw_small_plane(const cv_t* cv) {
  const nn_axis_t* a3 = cv->a3;
  if (cv->nsp != 2 || cv->q || a3[2].out > 64) return false;
  for (int32_t a = 1; a < 3; ++a)
    if (a3[a].s != 1 || a3[a].d != 1 || a3[a].p < 0 || a3[a].out < 1) return false;
  const int64_t Hp = a3[1].out + a3[1].k - 1, Wp = a3[2].out + a3[2].k - 1;
  return Hp * Wp <= 4096;
}

static kiln_status_t conv_depthwise_small(nn_kb_t* kb, cv_t* cv) {
  const nn_axis_t* a3 = cv->a3;
  tir_ctx_t* t = kb->t;
  const int64_t Ho = a3[1].out, Wo = a3[2].out;
  const int64_t Hp = Ho + a3[1].k - 1, Wp = Wo + a3[2].k - 1;
  /* input rows and columns inside the padded plane */
  int64_t rows = Hp - a3[1].p, cols = Wp - a3[2].p;
  if (rows > a3[1].in) rows = a3[1].in;
  if (cols > a3[2].in) cols = a3[2].in;
  const int64_t np = Hp * Wp, na = (Ho - 1) * Wp + Wo, P = cv->N * cv->M;
  /* planes of at most 64 outputs four (or two) at a time: the other
   * planes' copies run between a plane's copy and the loads of its sums,
   * which then find the copy's narrow stores committed instead of waiting
   * on them (a 16-lane load is not forwarded from 4-lane stores) */
  const int64_t K = Ho * Wo > 64 ? 1 : P % 4 == 0 ? 4 : P % 2 == 0 ? 2 : 1;
  tir_var_t* vnm = nn_var(kb, "nm");
  dwp_t d[4];
  const tir_stmt_t* items[12];
  memset(items, 0, sizeof items);
  for (int64_t k = 0; k < K; ++k) {
    const tir_expr_t* nm = nn_addc(kb, nn_mulc(kb, nn_v(kb, vnm), K), k);
    d[k] = (dwp_t){.cv = cv, .Wp = Wp};
    d[k].n = nn_divc(kb, nm, cv->M);
    d[k].m = nn_modc(kb, nm, cv->M);
    d[k].ci = nn_divc(kb, d[k].m, cv->Mg);
    d[k].pad = tir_buffer(t, "dwpad", KILN_DTYPE_F32, 1, &np, TIR_SCOPE_PRIVATE);
    d[k].acc = tir_buffer(t, "dwsum", KILN_DTYPE_F32, 1, &na, TIR_SCOPE_PRIVATE);
    items[k] = dwp_run(kb, np, dwp_zero, &d[k]);
    if (rows > 0 && cols > 0) {
      tir_var_t* vr = nn_var(kb, "ih");
      d[k].row = nn_v(kb, vr);
      items[k] = tir_seq2(t, items[k], nn_for(kb, vr, rows, dwp_run(kb, cols, dwp_in, &d[k])));
    }
  }
  for (int64_t k = 0; k < K; ++k) {
    items[K + k] = dwp_run(kb, na, dwp_mac, &d[k]);
    tir_var_t* vo = nn_var(kb, "oh");
    d[k].row = nn_v(kb, vo);
    items[2 * K + k] = nn_for(kb, vo, Ho, nn_vec_run(kb, 0, Wo, true, dwp_out, &d[k]));
  }
  const tir_stmt_t* body = tir_seq(t, (int32_t)(3 * K), items);
  for (int64_t k = K - 1; k >= 0; --k) body = tir_alloc(t, d[k].pad, tir_alloc(t, d[k].acc, body));
  body = nn_for(kb, vnm, P / K, body);
  if (P / K > 1) nn_parallel(kb, vnm);
  return nn_emit(kb, body);
}

/* Depthwise convolution (one input channel per group) straight from X to
 * Y: it is memory bound, so it reads the input once and writes the output
 * once. Rows and columns are split into the interior, where every tap is
 * inside the input and the row runs as plain vector code (stride 1), and
 * the borders, where taps are masked. */
static kiln_status_t conv_depthwise(nn_kb_t* kb, cv_t* cv) {
  const nn_axis_t* a3 = cv->a3;
  tir_var_t* vnm = nn_var(kb, "nm");
  const tir_expr_t* nm = nn_v(kb, vnm);
  dw_t d = {.cv = cv};
  d.n = nn_divc(kb, nm, cv->M);
  d.m = nn_modc(kb, nm, cv->M);
  d.ci = nn_divc(kb, d.m, cv->Mg);
  int64_t lo[3], hi[3];
  for (int32_t a = 0; a < 3; ++a) nn_axis_interior(&a3[a], &lo[a], &hi[a]);
  const tir_stmt_t* body = NULL;
  /* output rows (od, oh) in three row segments per axis: interior rows
   * need no row guard */
  const int64_t segd[4] = {0, lo[0], hi[0], a3[0].out}, segh[4] = {0, lo[1], hi[1], a3[1].out};
  for (int sd = 0; sd < 3; ++sd)
    for (int sh = 0; sh < 3; ++sh) {
      int64_t nd = segd[sd + 1] - segd[sd], nh = segh[sh + 1] - segh[sh];
      if (nd <= 0 || nh <= 0) continue;
      tir_var_t* vd = nn_var(kb, "od");
      tir_var_t* vh = nn_var(kb, "oh");
      d.od = nn_addc(kb, nn_v(kb, vd), segd[sd]);
      d.oh = nn_addc(kb, nn_v(kb, vh), segh[sh]);
      d.rows_guarded = sd != 1 || sh != 1;
      const int64_t segw[4] = {0, lo[2], hi[2], a3[2].out};
      const tir_stmt_t* row = NULL;
      for (int sw = 0; sw < 3; ++sw) {
        int64_t nw = segw[sw + 1] - segw[sw];
        if (nw <= 0) continue;
        d.cols_guarded = sw != 1;
        row = tir_seq2(kb->t, row,
                       nn_vec_run(kb, segw[sw], nw, sw == 1 && a3[2].s == 1, dw_body, &d));
      }
      body = tir_seq2(kb->t, body, nn_for(kb, vd, nd, nn_for(kb, vh, nh, row)));
    }
  body = nn_for(kb, vnm, cv->N * cv->M, body);
  if (cv->N * cv->M > 1) nn_parallel(kb, vnm);
  return nn_emit(kb, body);
}

/* ---- Conv ------------------------------------------------------------------ */

/* Spatial axes padded to 3 with size-1 leading axes. */
static void pad3(int32_t nsp, const nn_axis_t* ax, nn_axis_t* a3) {
  for (int32_t d = 0; d < 3; ++d) {
    int32_t i = d - (3 - nsp);
    if (i < 0) {
      a3[d] = (nn_axis_t){.in = 1, .out = 1, .k = 1, .s = 1, .d = 1, .p = 0};
    } else {
      a3[d] = ax[i];
    }
  }
}

/* Weights packed as the L operand [G][ceil(Mg/mr)][Cg*T][mr] (column
 * c*T + tap), or in transposed mode as R [G][ceil(Mg/nr)][Cg*T][nr]: at
 * compile time when constant, else by a pack kernel. */
static kiln_status_t pack_weights(nn_kb_t* kb, cv_t* cv, nn_gemm_t* g) {
  kiln_lower_ctx_t* ctx = kb->ctx;
  nn_operand_t* wop = cv->trans ? &g->R : &g->L;
  const int64_t wt = cv->trans ? g->nr : g->mr;
  float* wval = NULL;
  if (cv->q) {
    /* constant by nn_conv_quantized's contract; the caller owns them */
    cv->wval = cv->q->wq;
    /* int8 weights as the broadcast operand (L): stored [G][Mg][K] and
     * widened into the GEMM's per-chunk L panel (pack_l), reused by every
     * N tile. Read in place, each row's pair would cost a vpbroadcastw and
     * a vpmovsxbw where an i16 pair is one vpbroadcastd load (ResNet-18
     * 15-30% slower on AVX2). As R they are widened by the vector load. */
    const bool panel = g->w8 && !cv->trans;
    kiln_status_t st = nn_pack_const(ctx, g, "wpack", cv->G, cv->Mg, g->K, panel ? 1 : wt, cv_get_w, cv,
                                     panel ? &cv->w8buf : &wop->packed);
    cv->wval = NULL;
    KILN_RETURN_IF_ERROR(st);
    if (panel) g->L.load = cv_load_w8;
    else wop->bmap = cv_bmap;
    return NULL;
  }
  KILN_RETURN_IF_ERROR(nn_const_input_f32(ctx, 1, &wval));
  if (wval) {
    cv->wval = wval;
    /* Constant weights as L on the CPU: block-sparse when enough of their
     * blocks are zero (lower_nn_sparse.c). */
    kiln_status_t st = NULL;
    if (ctx->target == KILN_TARGET_CLASS_CPU && !cv->trans) {
      st = nn_sparse_try(ctx, g, cv->G, cv_get_w, cv, &cv->sp);
      if (!st && g->sparse) {
        free(wval);
        cv->wval = NULL;
        g->L.packed = cv->sp.vals;
        g->L.bmap = cv_bmap;
        return NULL;
      }
    }
    if (!st) st = nn_pack_const(ctx, g, "wpack", cv->G, cv->Mg, g->K, wt, cv_get_w, cv, &wop->packed);
    free(wval);
    cv->wval = NULL;
    KILN_RETURN_IF_ERROR(st);
  } else {
    nn_gemm_t pg = *g;
    KILN_RETURN_IF_ERROR(
        nn_pack_runtime(kb, &pg, "wpack", cv->G, cv->Mg, g->K, wt, cv_load_w, &wop->packed));
  }
  wop->bmap = cv_bmap;
  return NULL;
}

/* ---- im2col (too many stride residue classes) ------------------------------ */

/* R of the im2col GEMM: col[n][g*Cg*T + k][q] (no tap groups: k runs over
 * c*T + tap). */
static const tir_expr_t* cvi_rload(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                   const tir_expr_t* k, int32_t grp, const tir_expr_t* const* kv,
                                   const tir_expr_t* q) {
  const cv_t* cv = g->user;
  (void)grp;
  (void)kv;
  const tir_expr_t* row = nn_add(kb, nn_mulc(kb, cv_g(kb, cv, b), cv->Cg * cv->T), k);
  return tir_load(kb->t, cv->src, NN_IDX(cv_n(kb, cv, b), row, q));
}

/* col[n][c*T + tap][q] = X[n][c][od*sd + kd*dd - pd][oh*sh + kh*dh - ph]
 * [ow*sw + kw*dw - pw] (0 outside X) with tap = (kd*KH + kh)*KW + kw and
 * q = (od*Ho + oh)*Wo + ow. Only axes where some tap reads padding load
 * through a clamp and a select; a patchify conv's read X as it is. */
static kiln_status_t im2col(nn_kb_t* kb, const cv_t* cv) {
  const nn_axis_t* a3 = cv->a3;
  tir_ctx_t* t = kb->t;
  const int64_t KD = a3[0].k, KH = a3[1].k, KW = a3[2].k;
  tir_var_t* vo = nn_var(kb, "nck");
  tir_var_t* vkw = nn_var(kb, "kw");
  tir_var_t* vd = nn_var(kb, "od");
  tir_var_t* vh = nn_var(kb, "oh");
  tir_var_t* vw = nn_var(kb, "ow");
  const tir_expr_t* o = nn_v(kb, vo);
  const tir_expr_t* nc = nn_divc(kb, o, KD * KH);
  const tir_expr_t* n = nn_divc(kb, nc, cv->C);
  const tir_expr_t* c = nn_modc(kb, nc, cv->C);
  const tir_expr_t* k3[3] = {nn_modc(kb, nn_divc(kb, o, KH), KD), nn_modc(kb, o, KH), nn_v(kb, vkw)};
  const tir_expr_t* o3[3] = {nn_v(kb, vd), nn_v(kb, vh), nn_v(kb, vw)};
  const tir_expr_t* i3[3];
  const tir_expr_t* valid = NULL;
  bool empty = false;
  for (int32_t a = 0; a < 3; ++a) {
    const nn_axis_t* ax = &a3[a];
    const tir_expr_t* e =
        nn_addc(kb, nn_add(kb, nn_mulc(kb, o3[a], ax->s), nn_mulc(kb, k3[a], ax->d)), -ax->p);
    empty = empty || ax->in <= 0;
    if (ax->in > 0 && (ax->p > 0 || (ax->out - 1) * ax->s + (ax->k - 1) * ax->d - ax->p >= ax->in)) {
      const tir_expr_t* ok = tir_bin(t, TIR_AND, tir_bin(t, TIR_GE, e, nn_i(kb, 0)),
                                     tir_bin(t, TIR_LT, e, nn_i(kb, ax->in)));
      valid = valid ? tir_bin(t, TIR_AND, valid, ok) : ok;
      e = nn_clamp(kb, e, 0, ax->in - 1);
    }
    i3[a] = e;
  }
  const tir_expr_t* x = nn_f(kb, 0.0);
  if (!empty) {
    const tir_expr_t* xi[KILN_MAX_RANK];
    sp_idx(cv->nsp, n, c, i3, xi);
    x = cv_ldx(kb, cv, xi);
    if (valid) x = tir_select(t, valid, x, nn_f(kb, 0.0));
  }
  const tir_expr_t* tap = nn_add(kb, nn_mulc(kb, nn_add(kb, nn_mulc(kb, k3[0], KH), k3[1]), KW), k3[2]);
  const tir_expr_t* q = nn_add(
      kb, nn_mulc(kb, nn_add(kb, nn_mulc(kb, o3[0], a3[1].out), o3[1]), a3[2].out), o3[2]);
  const tir_stmt_t* st =
      tir_store(t, cv->src, NN_IDX(n, nn_add(kb, nn_mulc(kb, c, cv->T), tap), q), x);
  st = nn_for(kb, vw, a3[2].out, st);
  st = nn_for(kb, vh, a3[1].out, st);
  st = nn_for(kb, vd, a3[0].out, st);
  st = nn_for(kb, vkw, KW, st);
  st = nn_for(kb, vo, cv->N * cv->C * KD * KH, st);
  if (a3[2].s == 1) nn_vectorize(kb, vw);
  if (cv->N * cv->C * KD * KH > 1) nn_parallel(kb, vo);
  return nn_emit(kb, st);
}

/* Case 5 of the header: the patch matrix, then Y = W x col per (image,
 * group) straight into Y (dense output positions: no grid, no crop). */
static kiln_status_t conv_im2col(nn_kb_t* kb, cv_t* cv) {
  kiln_lower_ctx_t* ctx = kb->ctx;
  const nn_axis_t* a3 = cv->a3;
  cv->Qd = cv->Q = a3[0].out * a3[1].out * a3[2].out;
  cv->crop = cv->trans = false;
  int64_t cs[3] = {cv->N, cv->C * cv->T, cv->Qd};
  KILN_RETURN_IF_ERROR(kiln_lower_temp(ctx, "xcol", KILN_DTYPE_F32, 3, cs, &cv->src));
  KILN_RETURN_IF_ERROR(im2col(kb, cv));
  int64_t ys[3] = {cv->N, cv->M, cv->Qd};
  KILN_RETURN_IF_ERROR(nn_view(ctx, cv->y, "yflat", 3, ys, &cv->dst));
  nn_gemm_t g;
  memset(&g, 0, sizeof g);
  g.batch = cv->N * cv->G;
  g.M = cv->Mg, g.N = cv->Qd, g.K = cv->Cg * cv->T;
  g.user = cv;
  g.init = cv->bias ? cv_init : NULL;
  g.epi = cv->q ? cv_requant : NULL;
  g.R.rload = cvi_rload;
  g.store = cv_store;
  g.reload = cv->dst->dtype == KILN_DTYPE_F32 ? cv_reload : NULL;
  nn_gemm_tiles(ctx, &g);
  KILN_RETURN_IF_ERROR(pack_weights(kb, cv, &g));
  return nn_gemm_emit(kb, &g);
}

static kiln_status_t conv_float(nn_kb_t* kb, cv_t* cv) {
  kiln_lower_ctx_t* ctx = kb->ctx;
  const nn_axis_t* a3 = cv->a3;
  /* One tap group per stride residue class present: past NN_MAX_GROUPS
   * (a patchify conv has one per tap) gather the patches instead. */
  const int64_t k3[3] = {a3[0].k, a3[1].k, a3[2].k}, s3[3] = {a3[0].s, a3[1].s, a3[2].s};
  if (nn_stride_classes(k3, s3) > NN_MAX_GROUPS) {
    cv->pair = cv->w8 = false; /* the patch matrix stays f32 (exact integer products summed in f32) */
    return conv_im2col(kb, cv);
  }
  /* Phase images: (k-1)*d/s extra positions past the output per axis. */
  for (int32_t d = 0; d < 3; ++d) cv->q3[d] = a3[d].out + (a3[d].k - 1) * a3[d].d / a3[d].s;
  /* Tap groups: per axis the taps k with the same k % s (k = k1*s + a)
   * read phase (a*d) % s at shift k1*d + (a*d) / s, affine in k1. */
  int64_t ph[64][3];
  int32_t nph = 0;
  const int64_t PS = cv->q3[0] * cv->q3[1] * cv->q3[2];
  const int64_t KH = a3[1].k, KW = a3[2].k;
  cv->ostr[0] = a3[0].d * cv->q3[1] * cv->q3[2];
  cv->ostr[1] = a3[1].d * cv->q3[2];
  cv->ostr[2] = a3[2].d;
  int64_t max_off = 0;
  cv->ng = 0;
  for (int64_t ad = 0; ad < a3[0].s && ad < a3[0].k; ++ad)
    for (int64_t ah = 0; ah < a3[1].s && ah < a3[1].k; ++ah)
      for (int64_t aw = 0; aw < a3[2].s && aw < a3[2].k; ++aw) {
        const int64_t a[3] = {ad, ah, aw};
        int64_t phase[3], shift[3];
        nn_tap_group_t* tg = &cv->tg[cv->ng];
        for (int32_t d = 0; d < 3; ++d) {
          phase[d] = a[d] * a3[d].d % a3[d].s;
          shift[d] = a[d] * a3[d].d / a3[d].s;
          tg->ext[d] = (a3[d].k - a[d] + a3[d].s - 1) / a3[d].s;
        }
        int32_t p = 0;
        while (p < nph && !(ph[p][0] == phase[0] && ph[p][1] == phase[1] && ph[p][2] == phase[2])) ++p;
        /* at most NN_MAX_GROUPS classes reach here (conv_im2col takes
         * the rest), and phases are at most classes */
        if (cv->ng == NN_MAX_GROUPS || (p == nph && nph == 64)) {
          return kiln_make_status(KILN_INTERNAL, "Conv: stride phases past the table (strides %lld,%lld,%lld)",
                                  (long long)a3[0].s, (long long)a3[1].s, (long long)a3[2].s);
        }
        if (p == nph) memcpy(ph[nph++], phase, sizeof phase);
        tg->tbase = (ad * KH + ah) * KW + aw;
        tg->tstr[0] = a3[0].s * KH * KW;
        tg->tstr[1] = a3[1].s * KW;
        tg->tstr[2] = a3[2].s;
        cv->obase[cv->ng] = p * PS + (shift[0] * cv->q3[1] + shift[1]) * cv->q3[2] + shift[2];
        int64_t last = cv->obase[cv->ng];
        for (int32_t d = 0; d < 3; ++d) last += (tg->ext[d] - 1) * cv->ostr[d];
        if (last > max_off) max_off = last;
        cv->ng++;
      }
  cv->Q = ((a3[0].out - 1) * cv->q3[1] + a3[1].out - 1) * cv->q3[2] + a3[2].out;
  /* The output grid is Y itself when it has no garbage columns/rows. */
  cv->crop = cv->q3[2] != a3[2].out || (a3[0].out > 1 && cv->q3[1] != a3[1].out);
  /* The input as is when the single phase image is exactly X. */
  bool plain = nph == 1;
  for (int32_t d = 0; d < 3; ++d)
    if (a3[d].s != 1 || a3[d].p != 0 || cv->q3[d] != a3[d].in) plain = false;
  if (cv->q) plain = false; /* the copy subtracts x's zero point */
  /* A last N tile whose width is not a multiple of 4 would have a scalar
   * column, which keeps the whole accumulator out of registers: then
   * compute on a grid padded to whole tiles (its extra columns are garbage
   * that the crop drops; the input plane gets the slack they read). */
  int64_t lanes, regs;
  nn_simd(ctx, &lanes, &regs);
  const int64_t nr = cv->Q >= 2 * lanes ? 2 * lanes : lanes; /* nn_gemm_tiles' nr, or more */
  const int64_t qround = (cv->Q + nr - 1) / nr * nr;
  /* Tiny outputs waste most of the grid (a 3x3 output is 16 columns for 9
   * outputs, a 1x1 one 16 for 1): then let the GEMM's rows be the dense
   * output positions and vectorize over output channels instead. (Measured
   * on ResNet shapes: at 1.3x waste, 7x7 outputs, the normal orientation
   * is still as fast, its L panels being the packed weights.) */
  cv->Qd = a3[0].out * a3[1].out * a3[2].out;
  const int64_t qeff = cv->crop || cv->Q % nr % 4 != 0 ? qround : cv->Q;
  cv->trans = cv->Mg >= 32 && qeff * 2 >= cv->Qd * 3;
  if (cv->trans) {
    cv->crop = true;
  } else {
    if (!cv->crop && cv->Q % nr % 4 != 0) cv->crop = true, plain = false;
    if (cv->crop) cv->Q = qround;
    if (plain && max_off + cv->Q > PS) plain = false; /* needs slack: copy */
  }
  int64_t plane = nph * PS;
  if (max_off + cv->Q > plane) plane = max_off + cv->Q;
  if (plain) {
    int64_t shape[3] = {cv->N, cv->C, PS};
    KILN_RETURN_IF_ERROR(nn_view(ctx, cv->x, "xflat", 3, shape, &cv->src));
  } else {
    int64_t shape[3] = {cv->N, cv_src_ch(cv), plane};
    KILN_RETURN_IF_ERROR(kiln_lower_temp(ctx, "xphase", cv->pair ? KILN_DTYPE_I32 : KILN_DTYPE_F32, 3, shape,
                                         &cv->src));
    if (!cv->pair && ctx->loop_limit > 0 && plane > ctx->loop_limit / 2) {
      KILN_RETURN_IF_ERROR(phase_split_flat(kb, cv, nph, (const int64_t(*)[3])ph, plane));
    } else {
      KILN_RETURN_IF_ERROR(phase_split(kb, cv, nph, (const int64_t(*)[3])ph, plane));
    }
  }
  const kiln_dtype_t dt = cv->pair ? cv->y->dtype : KILN_DTYPE_F32;
  if (cv->trans) {
    int64_t shape[3] = {cv->N * cv->G, cv->Qd, cv->Mg};
    KILN_RETURN_IF_ERROR(kiln_lower_temp(ctx, "yt", dt, 3, shape, &cv->dst));
  } else if (cv->crop) {
    int64_t shape[3] = {cv->N * cv->G, cv->Mg, cv->Q};
    KILN_RETURN_IF_ERROR(kiln_lower_temp(ctx, "yflat", dt, 3, shape, &cv->dst));
  } else {
    int64_t shape[3] = {cv->N, cv->M, cv->Q};
    KILN_RETURN_IF_ERROR(nn_view(ctx, cv->y, "yflat", 3, shape, &cv->dst));
  }

  nn_gemm_t g;
  memset(&g, 0, sizeof g);
  g.batch = cv->N * cv->G;
  g.K = cv_kch(cv) * cv->T, g.taps = cv->T;
  g.idot = cv->pair;
  g.w8 = cv->pair && cv->w8;
  g.n_groups = cv->ng;
  g.groups = cv->tg;
  g.user = cv;
  g.init = cv->bias ? (cv->trans ? cvt_init : cv_init) : NULL;
  g.epi = cv->q ? cv_requant : NULL;
  if (cv->trans) {
    g.M = cv->Qd, g.N = cv->Mg;
    g.n_outer = true; /* the weights (R) are the big operand */
    g.L.lload = cvt_lload;
    g.store = cvt_store;
    g.reload = cv->pair ? NULL : cvt_reload;
  } else {
    g.M = cv->Mg, g.N = cv->Q;
    g.R.rload = cv_rload;
    g.store = cv_store;
    g.reload = cv->dst->dtype == KILN_DTYPE_F32 && !cv->pair ? cv_reload : NULL;
    g.nr_max = nr; /* the grid is rounded to whole tiles of it */
  }
  nn_gemm_tiles(ctx, &g);
  KILN_RETURN_IF_ERROR(pack_weights(kb, cv, &g));
  KILN_RETURN_IF_ERROR(nn_gemm_emit(kb, &g));
  if (cv->crop) KILN_RETURN_IF_ERROR(crop(kb, cv));
  return NULL;
}

/* The Conv geometry of node inputs x, w and bias (-1: none) into |cv|. */
static kiln_status_t conv_setup(kiln_lower_ctx_t* ctx, int32_t xi, int32_t wi, int32_t bi,
                                cv_t* cv_out) {
  cv_t cv;
  memset(&cv, 0, sizeof cv);
  cv.x = ctx->in[xi], cv.w = ctx->in[wi], cv.y = ctx->out[0];
  cv.bias = bi >= 0 && ctx->n_in > bi ? ctx->in[bi] : NULL;
  if (!cv.x || !cv.w || !cv.y) return kiln_make_status(KILN_INTERNAL, "Conv: missing operand");
  const int32_t r = cv.x->rank;
  cv.nsp = r - 2;
  if (cv.nsp < 1 || cv.nsp > 3 || cv.w->rank != r || cv.y->rank != r) {
    return kiln_make_status(KILN_UNSUPPORTED, "Conv: rank %d is not supported (1 to 3 spatial dims)",
                            (int)r);
  }
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "group", 1, &cv.G));
  cv.N = cv.x->shape[0], cv.C = cv.x->shape[1], cv.M = cv.w->shape[0], cv.Cg = cv.w->shape[1];
  if (cv.G < 1 || cv.C % cv.G || cv.M % cv.G || cv.Cg * cv.G != cv.C) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Conv: group %lld does not fit %lld channels",
                            (long long)cv.G, (long long)cv.C);
  }
  cv.Mg = cv.M / cv.G;
  nn_axis_t ax[3];
  KILN_RETURN_IF_ERROR(nn_window(ctx->node, ctx->node->op_type, cv.nsp, cv.x->shape + 2, cv.y->shape + 2,
                                 cv.w->shape + 2, false, ax));
  pad3(cv.nsp, ax, cv.a3);
  cv.T = 1;
  for (int32_t d = 0; d < 3; ++d) cv.T *= cv.a3[d].k;
  if (cv.T > NN_MAX_TAPS) {
    return kiln_make_status(KILN_UNSUPPORTED, "Conv: a kernel of %lld taps is too large (at most %d)",
                            (long long)cv.T, NN_MAX_TAPS);
  }
  *cv_out = cv;
  return NULL;
}

kiln_status_t nn_conv_quantized(kiln_lower_ctx_t* ctx, const nn_qconv_t* q) {
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  cv_t cv;
  KILN_RETURN_IF_ERROR(conv_setup(ctx, q->x, q->w, q->bias, &cv));
  cv.q = q;
  cv.pair = true;
  cv.Cgp = (cv.Cg + 1) / 2;
  /* i8 weights with zero point 0 (symmetric, what quantizers write) and u8
   * ones around 128 fit int8 after the zero point: one byte per weight */
  cv.w8 = true;
  const int64_t nw = tir_buffer_numel(cv.w);
  for (int64_t i = 0; i < nw && cv.w8; ++i) cv.w8 = q->wq[i] >= -128.0f && q->wq[i] <= 127.0f;
  if (tir_buffer_numel(cv.y) == 0) return NULL;
  if (cv.Cg == 1 && cv.T <= 49 && dw_exact(ctx, &cv, q)) {
    float* wdw = malloc(sizeof(float) * (size_t)nw);
    if (!wdw) return kiln_make_status(KILN_OUT_OF_MEMORY, "%s: depthwise weights", ctx->node->name);
    memcpy(wdw, q->wq, sizeof(float) * (size_t)nw);
    KILN_RETURN_IF_ERROR(nn_const_f32(ctx, "wdw", cv.w->rank, cv.w->shape, wdw, &cv.wdw));
    cv.pair = cv.w8 = false;
    return conv_depthwise(&kb, &cv);
  }
  return conv_float(&kb, &cv);
}

kiln_status_t kiln_lower_nn_conv(kiln_lower_ctx_t* ctx) {
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  if (ctx->in[0] && !kiln_dtype_is_float(ctx->in[0]->dtype)) {
    return kiln_make_status(KILN_UNSUPPORTED, "Conv: dtype %s", kiln_dtype_name(ctx->in[0]->dtype));
  }
  if (ctx->out_block && ctx->out_block[0] > 0) return nn_conv_blocked(ctx);
  cv_t cv;
  KILN_RETURN_IF_ERROR(conv_setup(ctx, 0, 1, 2, &cv));
  if (tir_buffer_numel(cv.y) == 0) return NULL;
  /* Depthwise with a small kernel: direct (see conv_depthwise). */
  if (cv.Cg == 1 && cv.T <= 49) {
    /* the padded plane is a CPU stack array (GPU dialects: the row kernel) */
    if (ctx->target == KILN_TARGET_CLASS_CPU && dw_small_plane(&cv)) return conv_depthwise_small(&kb, &cv);
    return conv_depthwise(&kb, &cv);
  }
  return conv_float(&kb, &cv);
}

/* ---- ConvTranspose ---------------------------------------------------------- */

typedef struct ct_s {
  const tir_buffer_t *x, *w, *bias, *y, *xv, *col;
  int32_t nsp;
  nn_axis_t a3[3]; /* in: ConvTranspose input, out: its output; p = pad_begin */
  int64_t N, C, M, G, Cg, Mg, T, P;
  const float* wval;
} ct_t;

static int64_t floor_half(int64_t a) { return a >= 0 ? a / 2 : -((1 - a) / 2); }

/* Pads as the reference resolves them (ir/ops/nn_conv.c convt_setup). */
static kiln_status_t ct_window(const kiln_lower_ctx_t* ctx, ct_t* ct, nn_axis_t* ax) {
  kiln_nn_window_t w;
  KILN_RETURN_IF_ERROR(kiln_nn_window_parse(ctx->node, "ConvTranspose", ct->nsp, false, &w));
  const int64_t* opad = NULL;
  int64_t nop = -1, non = -1;
  const int64_t* oshape = NULL;
  KILN_RETURN_IF_ERROR(kiln_attr_ints(ctx->node, "output_padding", &opad, &nop));
  KILN_RETURN_IF_ERROR(kiln_attr_ints(ctx->node, "output_shape", &oshape, &non));
  if (non == ct->nsp + 2) oshape += 2, non = ct->nsp;
  bool same = w.auto_pad == KILN_NN_PAD_SAME_UPPER || w.auto_pad == KILN_NN_PAD_SAME_LOWER;
  for (int32_t i = 0; i < ct->nsp; ++i) {
    int64_t in = ct->x->shape[2 + i], k = ct->w->shape[2 + i], s = w.stride[i],
            d = w.dilation[i];
    int64_t op = nop == ct->nsp ? opad[i] : 0;
    int64_t full = s * (in - 1) + op + (k - 1) * d + 1;
    int64_t pb = w.pad_begin[i];
    if (non == ct->nsp || same) {
      int64_t o = non == ct->nsp ? oshape[i] : in * s;
      if (non == ct->nsp || !w.has_pads) {
        int64_t total = full - o;
        if (!same && total < 0) total = 0;
        int64_t half = floor_half(total);
        pb = w.auto_pad == KILN_NN_PAD_SAME_UPPER ? half : total - half;
      }
    } else if (w.auto_pad == KILN_NN_PAD_VALID) {
      pb = 0;
    }
    ax[i] = (nn_axis_t){.in = in, .out = ct->y->shape[2 + i], .k = k, .s = s, .d = d, .p = pb};
  }
  return NULL;
}

/* col[b][m*T + tap][i] = sum_c W[g*Cg + c][m][tap] * Xv[n][g*Cg + c][i] */
static const tir_expr_t* ct_rload(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                  const tir_expr_t* c, int32_t grp, const tir_expr_t* const* kv,
                                  const tir_expr_t* i) {
  const ct_t* ct = g->user;
  (void)grp;
  (void)kv;
  const tir_expr_t* ch = nn_add(kb, nn_mulc(kb, nn_modc(kb, b, ct->G), ct->Cg), c);
  return nn_ldf(kb, ct->xv, NN_IDX(nn_divc(kb, b, ct->G), ch, i));
}

static const tir_stmt_t* ct_store(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                  const tir_expr_t* r, const tir_expr_t* i,
                                  const tir_expr_t* v) {
  const ct_t* ct = g->user;
  return tir_store(kb->t, ct->col, NN_IDX(b, r, i), v);
}

static const tir_expr_t* ct_reload(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                   const tir_expr_t* r, const tir_expr_t* i) {
  const ct_t* ct = g->user;
  return tir_load(kb->t, ct->col, NN_IDX(b, r, i));
}

static const tir_expr_t* ct_bmap(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b) {
  return nn_modc(kb, b, ((const ct_t*)g->user)->G);
}

/* L row r = m*T + tap, col c of group g: W[g*Cg + c][m][tap]. */
static double ct_get_w(const void* user, int64_t g, int64_t r, int64_t c) {
  const ct_t* ct = user;
  return ct->wval[((g * ct->Cg + c) * ct->Mg) * ct->T + r];
}

static const tir_expr_t* ct_load_w(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* grp,
                                   const tir_expr_t* r, const tir_expr_t* c) {
  const ct_t* ct = g->user;
  return load_w_flat(kb, ct->w, nn_add(kb, nn_mulc(kb, grp, ct->Cg), c), r);
}

/* Y[n][g*Mg + m][o] = bias + sum_tap col[b][m*T + tap][i] with
 * o = i*s + k*d - p per axis; each tap adds over the input positions whose
 * output lies inside Y (ranges computed here, so no guards run). */
static kiln_status_t col2im(nn_kb_t* kb, const ct_t* ct) {
  tir_var_t* vnm = nn_var(kb, "nm");
  const tir_expr_t* nm = nn_v(kb, vnm);
  const tir_expr_t* n = nn_divc(kb, nm, ct->M);
  const tir_expr_t* m = nn_modc(kb, nm, ct->M);
  const tir_expr_t* b = nn_add(kb, nn_mulc(kb, n, ct->G), nn_divc(kb, m, ct->Mg));
  const tir_expr_t* mg = nn_modc(kb, m, ct->Mg);
  const nn_axis_t* a3 = ct->a3;
  /* bias fill */
  tir_var_t* vo[3];
  const tir_expr_t* o3[3];
  for (int32_t d = 0; d < 3; ++d) {
    vo[d] = nn_var(kb, d == 0 ? "od" : d == 1 ? "oh" : "ow");
    o3[d] = nn_v(kb, vo[d]);
  }
  const tir_expr_t* yi[KILN_MAX_RANK];
  sp_idx(ct->nsp, n, m, o3, yi);
  const tir_stmt_t* fill =
      nn_stf(kb, ct->y, yi, ct->bias ? nn_ldf(kb, ct->bias, NN_IDX(m)) : nn_f(kb, 0.0));
  for (int32_t d = 2; d >= 0; --d) fill = nn_for(kb, vo[d], a3[d].out, fill);
  nn_vectorize(kb, vo[2]);
  const tir_stmt_t* body = fill;
  int64_t tap = 0;
  for (int64_t kd = 0; kd < a3[0].k; ++kd)
    for (int64_t kh = 0; kh < a3[1].k; ++kh)
      for (int64_t kw = 0; kw < a3[2].k; ++kw, ++tap) {
        const int64_t kk[3] = {kd, kh, kw};
        int64_t lo[3], hi[3];
        bool any = true;
        for (int32_t d = 0; d < 3; ++d) {
          kiln_nn_valid_range(kk[d] * a3[d].d - a3[d].p, a3[d].s, a3[d].out, a3[d].in, &lo[d],
                              &hi[d]);
          if (lo[d] >= hi[d]) any = false;
        }
        if (!any || ct->Cg == 0) continue;
        tir_var_t* vi[3];
        const tir_expr_t *i3[3], *os[3];
        for (int32_t d = 0; d < 3; ++d) {
          vi[d] = nn_var(kb, d == 0 ? "id" : d == 1 ? "ih" : "iw");
          i3[d] = nn_addc(kb, nn_v(kb, vi[d]), lo[d]);
          os[d] = nn_addc(kb, nn_mulc(kb, i3[d], a3[d].s), kk[d] * a3[d].d - a3[d].p);
        }
        const tir_expr_t* ip = nn_add(
            kb, nn_mulc(kb, nn_add(kb, nn_mulc(kb, i3[0], a3[1].in), i3[1]), a3[2].in), i3[2]);
        const tir_expr_t* oi[KILN_MAX_RANK];
        sp_idx(ct->nsp, n, m, os, oi);
        const tir_expr_t* cv =
            tir_load(kb->t, ct->col, NN_IDX(b, nn_addc(kb, nn_mulc(kb, mg, ct->T), tap), ip));
        const tir_stmt_t* s = nn_stf(kb, ct->y, oi, tir_add(kb->t, nn_ldf(kb, ct->y, oi), cv));
        for (int32_t d = 2; d >= 0; --d) s = nn_for(kb, vi[d], hi[d] - lo[d], s);
        if (a3[2].s == 1) nn_vectorize(kb, vi[2]);
        body = tir_seq2(kb->t, body, s);
      }
  body = nn_for(kb, vnm, ct->N * ct->M, body);
  if (ct->N * ct->M > 1) nn_parallel(kb, vnm);
  return nn_emit(kb, body);
}

kiln_status_t kiln_lower_nn_conv_transpose(kiln_lower_ctx_t* ctx) {
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  ct_t ct;
  memset(&ct, 0, sizeof ct);
  ct.x = ctx->in[0], ct.w = ctx->in[1], ct.y = ctx->out[0];
  ct.bias = ctx->n_in > 2 ? ctx->in[2] : NULL;
  if (!ct.x || !ct.w || !ct.y) return kiln_make_status(KILN_INTERNAL, "ConvTranspose: missing operand");
  const int32_t r = ct.x->rank;
  ct.nsp = r - 2;
  if (ct.nsp < 1 || ct.nsp > 3 || ct.w->rank != r || ct.y->rank != r) {
    return kiln_make_status(KILN_UNSUPPORTED,
                            "ConvTranspose: rank %d is not supported (1 to 3 spatial dims)", (int)r);
  }
  if (!kiln_dtype_is_float(ct.x->dtype)) {
    return kiln_make_status(KILN_UNSUPPORTED, "ConvTranspose: dtype %s",
                            kiln_dtype_name(ct.x->dtype));
  }
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "group", 1, &ct.G));
  ct.N = ct.x->shape[0], ct.C = ct.x->shape[1], ct.Mg = ct.w->shape[1];
  if (ct.G < 1 || ct.C % ct.G) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "ConvTranspose: group %lld does not divide %lld channels",
                            (long long)ct.G, (long long)ct.C);
  }
  ct.Cg = ct.C / ct.G, ct.M = ct.Mg * ct.G;
  nn_axis_t ax[3];
  KILN_RETURN_IF_ERROR(ct_window(ctx, &ct, ax));
  pad3(ct.nsp, ax, ct.a3);
  ct.T = 1;
  ct.P = 1;
  for (int32_t d = 0; d < 3; ++d) ct.T *= ct.a3[d].k, ct.P *= ct.a3[d].in;
  if (tir_buffer_numel(ct.y) == 0) return NULL;
  int64_t xs[3] = {ct.N, ct.C, ct.P};
  KILN_RETURN_IF_ERROR(nn_view(ctx, ct.x, "xflat", 3, xs, &ct.xv));
  int64_t cs[3] = {ct.N * ct.G, ct.Mg * ct.T, ct.P};
  KILN_RETURN_IF_ERROR(kiln_lower_temp(ctx, "col", KILN_DTYPE_F32, 3, cs, &ct.col));
  if (ct.P > 0 && ct.Cg > 0 && ct.Mg > 0) {
    nn_gemm_t g;
    memset(&g, 0, sizeof g);
    g.batch = ct.N * ct.G;
    g.M = ct.Mg * ct.T, g.N = ct.P, g.K = ct.Cg;
    g.user = &ct;
    g.R.rload = ct_rload;
    g.store = ct_store;
    g.reload = ct_reload;
    nn_gemm_tiles(ctx, &g);
    float* wval = NULL;
    KILN_RETURN_IF_ERROR(nn_const_input_f32(ctx, 1, &wval));
    if (wval) {
      ct.wval = wval;
      kiln_status_t st =
          nn_pack_const(ctx, &g, "wpack", ct.G, g.M, g.K, g.mr, ct_get_w, &ct, &g.L.packed);
      free(wval);
      ct.wval = NULL;
      KILN_RETURN_IF_ERROR(st);
    } else {
      nn_gemm_t pg = g;
      KILN_RETURN_IF_ERROR(
          nn_pack_runtime(&kb, &pg, "wpack", ct.G, g.M, g.K, g.mr, ct_load_w, &g.L.packed));
    }
    g.L.bmap = ct_bmap;
    KILN_RETURN_IF_ERROR(nn_gemm_emit(&kb, &g));
  }
  return col2im(&kb, &ct);
}
