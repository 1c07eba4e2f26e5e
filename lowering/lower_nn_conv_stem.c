/* A direct conv for stems: group 1, a few input channels read from the
 * plain NCHW model input, NCHWc output (lowering/layout.h), no zero-padded
 * copy of the input.
 *
 * The blocked GEMM (lower_nn_conv_blocked.c) reads a padded copy of X
 * where taps fall outside it; for a stem that copy is a kernel of its own
 * over the whole input (3 x 225 x 225 floats for MobileNetV2) with a
 * barrier after it. Here every output row is one of a few row kinds: the
 * interior rows, whose taps are all inside X, and each border row on its
 * own, with the kernel rows that fall outside left out at compile time;
 * within a row the same for the columns (interior columns in register
 * tiles of mr positions x nr channels, border columns one position each
 * with their outside taps left out). So no load is guarded, clamped or
 * selected: the tiles are the GEMM's (a broadcast of X per position and
 * tap, nr / lanes weight vectors, mr x nr / lanes FMAs), over all C x
 * taps of K, each output summed as the blocked GEMM with its taps outside
 * the k loop sums it (bias, then the taps row by row, the channels within
 * a tap, one FMA each).
 */
#include <stdlib.h>
#include <string.h>

#include "lowering/lower_nn_impl.h"
#include "lowering/plan.h"

typedef struct stem_s {
  const nn_stem_t* st;
  const tir_buffer_t *w, *bias; /* [NT][T * C][nr], [NT * nr] (or NULL) */
  int64_t nr, nb;               /* columns per tile, blocks per tile */
  const tir_expr_t *n, *oh, *nt;
} stem_t;

/* Taps [*k0, *k1) of |a| inside the input at output |o|. */
static void taps_inside(const nn_axis_t* a, int64_t o, int64_t* k0, int64_t* k1) {
  *k0 = a->k, *k1 = a->k;
  for (int64_t k = 0; k < a->k; ++k) {
    const int64_t i = o * a->s + k * a->d - a->p;
    if (i < 0 || i >= a->in) continue;
    if (*k0 == a->k) *k0 = k;
    *k1 = k + 1;
  }
  if (*k0 == a->k) *k0 = *k1 = 0;
}

/* Prefetches of the input lines the next output row's tile at the same
 * columns reads (every kernel row, channel and 64-byte line of the span;
 * rows clamped into X). The model input comes from L3 or memory (the
 * run's other tensors evict it), and a row's 3 x k short row segments are
 * too many streams for the hardware prefetchers: measured on Zen 5, 1
 * thread, MobileNetV2's stem without these 194 us, with them below. */
static const tir_stmt_t* stem_prefetch(nn_kb_t* kb, const stem_t* d, const tir_expr_t* ow0, int64_t np) {
  const nn_stem_t* st = d->st;
  const int64_t span = (np - 1) * st->aw.s + (st->aw.k - 1) * st->aw.d + 1;
  const tir_stmt_t* s = NULL;
  for (int64_t ch = 0; ch < st->C; ++ch)
    for (int64_t kh = 0; kh < st->ah.k; ++kh) {
      const tir_expr_t* ih = nn_addc(kb, nn_mulc(kb, d->oh, st->ah.s), st->ah.s + kh * st->ah.d - st->ah.p);
      ih = nn_clamp(kb, ih, 0, st->ah.in - 1);
      for (int64_t w0 = 0; w0 < span; w0 += 16) {
        const tir_expr_t* iw = nn_clamp(kb, nn_addc(kb, nn_mulc(kb, ow0, st->aw.s), w0 - st->aw.p), 0, st->aw.in - 1);
        s = tir_seq2(kb->t, s, tir_prefetch(kb->t, st->x, NN_IDX(d->n, nn_i(kb, ch), ih, iw)));
      }
    }
  return s;
}

/* One tile: |np| positions from column |ow0| of row d->oh, kernel rows
 * [kh0, kh1) and columns [kw0, kw1) (all inside X for every position). */
static const tir_stmt_t* stem_tile(nn_kb_t* kb, const stem_t* d, const tir_expr_t* ow0, int64_t np, int64_t kh0,
                                   int64_t kh1, int64_t kw0, int64_t kw1) {
  const nn_stem_t* st = d->st;
  tir_ctx_t* t = kb->t;
  const int64_t c = st->c, nr = d->nr, len = np * nr;
  const tir_buffer_t* acc = tir_buffer(t, "sacc", KILN_DTYPE_F32, 1, &len, TIR_SCOPE_PRIVATE);
  const tir_stmt_t* seq = NULL;
  /* phase 0: acc = bias; 1: the taps; 2: the stores */
  for (int phase = 0; phase < 3; ++phase) {
    tir_var_t* vi = nn_var(kb, "i");
    const tir_expr_t* i = nn_v(kb, vi);
    const tir_expr_t* ow = nn_add(kb, ow0, i);
    tir_var_t *vkh = NULL, *vkw = NULL, *vch = NULL;
    const tir_expr_t* x = NULL;
    const tir_expr_t* wrow = NULL;
    if (phase == 1 && (kh1 <= kh0 || kw1 <= kw0)) continue; /* no tap inside X: the bias */
    if (phase == 1) {
      vkh = nn_var(kb, "kh"), vkw = nn_var(kb, "kw"), vch = nn_var(kb, "ch");
      const tir_expr_t* kh = nn_addc(kb, nn_v(kb, vkh), kh0);
      const tir_expr_t* kw = nn_addc(kb, nn_v(kb, vkw), kw0);
      const tir_expr_t* ch = nn_v(kb, vch);
      const tir_expr_t* ih = nn_addc(kb, nn_add(kb, nn_mulc(kb, d->oh, st->ah.s), nn_mulc(kb, kh, st->ah.d)), -st->ah.p);
      const tir_expr_t* iw = nn_addc(kb, nn_add(kb, nn_mulc(kb, ow, st->aw.s), nn_mulc(kb, kw, st->aw.d)), -st->aw.p);
      x = nn_ldf(kb, st->x, NN_IDX(d->n, ch, ih, iw));
      wrow = nn_add(kb, nn_mulc(kb, nn_add(kb, nn_mulc(kb, kh, st->aw.k), kw), st->C), ch);
    }
    const tir_stmt_t* parts = NULL;
    for (int64_t q = 0; q < d->nb; ++q) {
      tir_var_t* vl = nn_var(kb, "l");
      const tir_expr_t* l = nn_v(kb, vl);
      const tir_expr_t* j = nn_addc(kb, l, q * c);
      const tir_expr_t* const* ai = NN_IDX(nn_add(kb, nn_mulc(kb, i, nr), j));
      const tir_stmt_t* s;
      if (phase == 0) {
        s = tir_store(t, acc, ai, d->bias ? nn_ldf(kb, d->bias, NN_IDX(nn_add(kb, nn_mulc(kb, d->nt, nr), j))) : nn_f(kb, 0.0));
      } else if (phase == 1) {
        const tir_expr_t* w = nn_ldf(kb, d->w, NN_IDX(d->nt, wrow, j));
        s = tir_store(t, acc, ai, tir_call(t, TIR_FMA, 3, x, w, tir_load(t, acc, ai)));
      } else {
        const tir_expr_t* ob = nn_addc(kb, nn_mulc(kb, d->nt, d->nb), q);
        s = nn_stf(kb, st->y, NN_IDX(d->n, ob, d->oh, ow, l), tir_load(t, acc, ai));
      }
      parts = tir_seq2(t, parts, nn_for(kb, vl, c, s));
      nn_vectorize(kb, vl);
    }
    const tir_stmt_t* s = nn_for(kb, vi, np, parts);
    if (np > 1) nn_unroll(kb, vi);
    if (phase == 1)
      s = nn_for(kb, vkh, kh1 - kh0, nn_for(kb, vkw, kw1 - kw0, nn_for(kb, vch, st->C, s)));
    if (phase == 1 && np > 1) s = tir_seq2(t, stem_prefetch(kb, d, ow0, np), s);
    seq = tir_seq2(t, seq, s);
  }
  return tir_alloc(t, acc, seq);
}

/* The columns of one row kind (kernel rows [kh0, kh1)): border columns
 * one position each, the interior in tiles of mr and one of the rest; in
 * a border row (|border|: one of a few, each its own code) the interior
 * too one position at a time, which keeps the unrolled tiles to two
 * (MobileNetV2's stem: 0.23 s of the C compiler's CPU with them in row 0
 * too, 0.08 s for the GEMM and the padded copy it replaces). */
static const tir_stmt_t* stem_row(nn_kb_t* kb, const stem_t* d, int64_t kh0, int64_t kh1, int64_t mr, bool border) {
  const nn_stem_t* st = d->st;
  int64_t wlo, whi;
  nn_axis_interior(&st->aw, &wlo, &whi);
  const tir_stmt_t* row = NULL;
  for (int64_t ow = 0; ow < st->aw.out; ++ow) {
    if (ow == wlo && whi > wlo && border) {
      tir_var_t* vt = nn_var(kb, "ow");
      const tir_expr_t* ow0 = nn_addc(kb, nn_v(kb, vt), wlo);
      row = tir_seq2(kb->t, row, nn_for(kb, vt, whi - wlo, stem_tile(kb, d, ow0, 1, kh0, kh1, 0, st->aw.k)));
      ow = whi - 1;
      continue;
    }
    if (ow == wlo && whi > wlo) {
      const int64_t n = whi - wlo, full = n / mr, rest = n % mr;
      if (full > 0) {
        tir_var_t* vt = nn_var(kb, "owt");
        const tir_expr_t* ow0 = nn_addc(kb, nn_mulc(kb, nn_v(kb, vt), mr), wlo);
        row = tir_seq2(kb->t, row, nn_for(kb, vt, full, stem_tile(kb, d, ow0, mr, kh0, kh1, 0, st->aw.k)));
      }
      if (rest > 0) row = tir_seq2(kb->t, row, stem_tile(kb, d, nn_i(kb, wlo + full * mr), rest, kh0, kh1, 0, st->aw.k));
      ow = whi - 1;
      continue;
    }
    int64_t kw0, kw1;
    taps_inside(&st->aw, ow, &kw0, &kw1);
    row = tir_seq2(kb->t, row, stem_tile(kb, d, nn_i(kb, ow), 1, kh0, kh1, kw0, kw1));
  }
  return row;
}

/* The widest register tile of d->nb blocks: mr positions. */
static int64_t stem_mr(const stem_t* d, int64_t lanes, int64_t regs) {
  const int64_t vecs = (d->nb * d->st->c + lanes - 1) / lanes;
  int64_t mr = (regs - 4) / vecs;
  if (mr > 14) mr = 14;
  return mr < 1 ? 1 : mr;
}

/* A tuner's knobs (the plan's gemm hook, CPU plans only), asked with the
 * problem the blocked GEMM would have been (its positions, channel blocks
 * and all C x taps as K, no K blocks): of them this kernel takes the
 * register tile, mr positions (up to what the registers hold) and one or
 * two blocks (two where the block count is even); the others (the
 * threads' split, the N blocks' size) do not apply, so a tuner's points
 * that change only those build the same kernel. */
static void stem_hook(kiln_lower_ctx_t* ctx, const nn_stem_t* st, int64_t lanes, int64_t regs, stem_t* d,
                      int64_t* mr) {
  if (ctx->target != KILN_TARGET_CLASS_CPU || !ctx->plan || !ctx->plan->gemm_hook) return;
  const int64_t c = st->c, MB = (st->M + c - 1) / c, T = st->ah.k * st->aw.k;
  kiln_gemm_problem_t p = {ctx->node ? ctx->node->op_type : "", st->N, st->ah.out * st->aw.out, MB * c, st->C * T, T,
                           false, false, false, true, true, 2 * c, (int32_t)lanes, (int32_t)regs, ctx->threads,
                           (int32_t)c, 0, {0}, 0};
  kiln_gemm_knobs_t k = {*mr, d->nb * c, st->C, KILN_GEMM_PAR_AUTO, 256, 0, 0, 0};
  ctx->plan->gemm_hook(ctx->plan->gemm_hook_user, ctx->node_index, &p, &k);
  if (k.nr == c || (k.nr == 2 * c && MB % 2 == 0)) d->nb = k.nr / c;
  const int64_t most = stem_mr(d, lanes, regs);
  *mr = k.mr >= 1 && k.mr <= most ? k.mr : most;
}

bool nn_conv_stem_applies(const nn_stem_t* st) {
  if (st->C < 1 || st->C > 4 || st->c < 1) return false;
  /* at most 5x5 taps: each border row and column prints its taps, and
   * ResNet's 7x7 stem took 51 KB of C (ResNet-50 213 -> 264 KB, its cold
   * compile 1.93 -> 2.1-2.3 s) for a stem 1-3% faster than the padded copy
   * and GEMM, which it keeps */
  if (st->ah.k * st->aw.k > 25) return false;
  int64_t lo, hi;
  /* border rows and columns are code of their own: a few only */
  nn_axis_interior(&st->ah, &lo, &hi);
  if (lo + st->ah.out - hi > 8) return false;
  nn_axis_interior(&st->aw, &lo, &hi);
  return lo + st->aw.out - hi <= 8;
}

kiln_status_t nn_conv_stem(nn_kb_t* kb, const nn_stem_t* st) {
  kiln_lower_ctx_t* ctx = kb->ctx;
  const int64_t c = st->c, MB = (st->M + c - 1) / c, T = st->ah.k * st->aw.k, K = T * st->C;
  int64_t lanes, regs;
  nn_simd(ctx, &lanes, &regs);
  stem_t d = {.st = st, .nb = MB % 2 == 0 ? 2 : 1};
  int64_t mr = stem_mr(&d, lanes, regs);
  stem_hook(ctx, st, lanes, regs, &d, &mr);
  d.nr = d.nb * c;
  const int64_t NT = MB / d.nb;
  int64_t wlo, whi;
  nn_axis_interior(&st->aw, &wlo, &whi);
  if (whi > wlo) {
    const int64_t tiles = (whi - wlo + mr - 1) / mr;
    mr = (whi - wlo + tiles - 1) / tiles;
  }
  /* weights [NT][T * C][nr] tap-major (kh, kw, channel), zero past M */
  float* wval = NULL;
  KILN_RETURN_IF_ERROR(nn_const_input_f32(ctx, 1, &wval));
  if (!wval) return kiln_make_status(KILN_INTERNAL, "Conv: the stem kernel needs constant weights");
  float* wp = NULL;
  kiln_status_t s = nn_alloc_f32(NT * K * d.nr, "stem weights", &wp);
  if (!s)
    for (int64_t m = 0; m < st->M; ++m)
      for (int64_t ch = 0; ch < st->C; ++ch)
        for (int64_t tap = 0; tap < T; ++tap)
          wp[((m / d.nr) * K + tap * st->C + ch) * d.nr + m % d.nr] = wval[(m * st->C + ch) * T + tap];
  free(wval);
  KILN_RETURN_IF_ERROR(s);
  const int64_t wshape[3] = {NT, K, d.nr};
  KILN_RETURN_IF_ERROR(nn_const_f32(ctx, "wstem", 3, wshape, wp, &d.w));
  if (ctx->n_in >= 3 && ctx->in[2]) {
    float* b = NULL;
    KILN_RETURN_IF_ERROR(nn_const_input_f32(ctx, 2, &b));
    if (!b) return kiln_make_status(KILN_INTERNAL, "Conv: the stem kernel needs a constant bias");
    float* bp = NULL;
    s = nn_alloc_f32(NT * d.nr, "stem bias", &bp);
    if (!s) memcpy(bp, b, sizeof(float) * (size_t)st->M);
    free(b);
    KILN_RETURN_IF_ERROR(s);
    const int64_t bshape[1] = {NT * d.nr};
    KILN_RETURN_IF_ERROR(nn_const_f32(ctx, "bstem", 1, bshape, bp, &d.bias));
  }
  /* parallel over (image, output row); per row its kind's code, then the
   * tile columns */
  tir_var_t* vr = nn_var(kb, "nh");
  tir_var_t* vnt = nn_var(kb, "nt");
  const tir_expr_t* r = nn_v(kb, vr);
  d.n = nn_divc(kb, r, st->ah.out);
  d.nt = nn_v(kb, vnt);
  int64_t hlo, hhi;
  nn_axis_interior(&st->ah, &hlo, &hhi);
  const tir_expr_t* ohv = nn_modc(kb, r, st->ah.out);
  const tir_stmt_t* body = NULL;
  if (hhi > hlo) {
    /* clamped although the branch holds interior rows only: the loads'
     * bounds then hold without the branch conditions */
    d.oh = nn_clamp(kb, ohv, hlo, hhi - 1);
    body = stem_row(kb, &d, 0, st->ah.k, mr, false);
  }
  for (int64_t oh = st->ah.out - 1; oh >= 0; --oh) {
    if (oh >= hlo && oh < hhi) continue;
    int64_t kh0, kh1;
    taps_inside(&st->ah, oh, &kh0, &kh1);
    d.oh = nn_i(kb, oh);
    const tir_stmt_t* b = stem_row(kb, &d, kh0, kh1, mr, true);
    body = !body ? b : tir_if(kb->t, tir_bin(kb->t, TIR_EQ, ohv, nn_i(kb, oh)), b, body);
  }
  body = nn_for(kb, vr, st->N * st->ah.out, nn_for(kb, vnt, NT, body));
  if (st->N * st->ah.out > 1) nn_parallel(kb, vr);
  return nn_emit(kb, body);
}
