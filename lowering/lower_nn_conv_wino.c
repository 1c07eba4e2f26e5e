/* Winograd convolution F(m x m, 3 x 3) on the blocked NCHWc layout
 * (lowering/layout.h) for group-1 convs with 3x3 kernels, stride 1 and
 * dilation 1 (lower_nn_conv_blocked.c dispatches here; the rule is
 * nn_conv_wino_choose).
 *
 * An output tile of m x m positions is A^T [ (G g G^T) .* (B^T d B) ] A
 * with d the (m + 2) x (m + 2) input patch: a = (m + 2)^2 element-wise
 * products per tile and channel pair instead of 9 m^2 (m = 2: 16 for 36,
 * m = 4: 36 for 144). Summed over the input channels, each of the a
 * positions is one GEMM (rows: tiles, columns: output channels, K: input
 * channels), so the run is three kernels:
 *
 *  1. input transform: X [N][CB][H][W][c] -> V [a][CB][T][c] (T = N times
 *     the tiles of an image), B^T d B per tile and c-lane vector, the
 *     patch's taps outside X read as 0 (the pads, any of them, no padded
 *     copy);
 *  2. the a GEMMs (batch a of the blocked conv's GEMM generator, its
 *     register tiles and K blocks, L read in place from V as the 1x1 conv
 *     reads X) against the weights transformed at compile time, packed per
 *     position: U [a][MB][T][c];
 *  3. output transform: A^T U A + bias per tile and vector, stored into Y
 *     [N][MB][OH][OW][c] (the tiles past OH / OW cut at compile time), the
 *     store epilogue fusion folds Relu / Add / Clip into.
 *
 * Transform matrices: Lavin & Gray's (points 0, 1, -1 for m = 2; 0, +-1,
 * +-2 and infinity for m = 4). F(4) rounds more (its B and A hold 4s, 5s
 * and 8s): measured against the direct conv in tests/test_conv_wino_cpu.c
 * and on the ResNets against onnxruntime (docs/STATUS.md).
 */
#include <stdlib.h>
#include <string.h>

#include "lowering/layout.h"
#include "lowering/lower_nn_impl.h"
#include "lowering/plan.h"

#define WINO_AMAX 6

static const double bt2[4][4] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
static const double g2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
static const double at2[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};

static const double bt4[6][6] = {{4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
                                 {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
static const double g4[6][3] = {{1.0 / 4, 0, 0},
                                {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                {0, 0, 1}};
static const double at4[4][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}};

static double bt_at(int64_t m, int64_t i, int64_t j) { return m == 2 ? bt2[i][j] : bt4[i][j]; }
static double g_at(int64_t m, int64_t i, int64_t j) { return m == 2 ? g2[i][j] : g4[i][j]; }
static double at_at(int64_t m, int64_t i, int64_t j) { return m == 2 ? at2[i][j] : at4[i][j]; }

typedef struct wino_s {
  const tir_buffer_t *x, *y, *bias; /* bias: [Mp] or NULL */
  const tir_buffer_t *v, *u;        /* [A*A][CB][T][c], [A*A][MB][T][c] */
  int64_t m, A;                     /* tile, patch (m + 2) */
  int64_t N, C, M, Mp, c, CB, MB;
  int64_t th, tw, T; /* tiles per column / row of an image, in all */
  nn_axis_t ah, aw;
  float* wt; /* transformed weights [A*A][M][C] (compile time: G g G^T in double, rounded once) */
} wino_t;

/* sum_j coef(j) * v[j] with the zero coefficients left out and +-1 as a
 * plain add / subtract. */
static const tir_expr_t* lin(nn_kb_t* kb, int64_t n, const double* coef, const tir_expr_t* const* v) {
  tir_ctx_t* t = kb->t;
  const tir_expr_t* e = NULL;
  for (int64_t j = 0; j < n; ++j) {
    const double k = coef[j];
    if (k == 0) continue;
    if (!e) {
      e = k == 1 ? v[j] : tir_mul(t, v[j], nn_f(kb, k));
    } else if (k == 1) {
      e = tir_add(t, e, v[j]);
    } else if (k == -1) {
      e = tir_sub(t, e, v[j]);
    } else {
      e = tir_add(t, e, tir_mul(t, v[j], nn_f(kb, k)));
    }
  }
  return e ? e : nn_f(kb, 0.0);
}

/* One vectorized statement over the c lanes: |fn| builds the value of
 * lane l and the store. */
static const tir_stmt_t* lanes_st(nn_kb_t* kb, int64_t c, tir_var_t* vl, const tir_stmt_t* st) {
  const tir_stmt_t* s = nn_for(kb, vl, c, st);
  nn_vectorize(kb, vl);
  return s;
}

/* Patch coordinate o * m + k - p along |a| (k an expression), clamped
 * with its validity folded into *valid where |guarded|. */
static const tir_expr_t* patch_coord(nn_kb_t* kb, const nn_axis_t* a, const tir_expr_t* o, int64_t m,
                                     const tir_expr_t* k, bool guarded, const tir_expr_t** valid) {
  tir_ctx_t* t = kb->t;
  const tir_expr_t* e = nn_addc(kb, nn_add(kb, nn_mulc(kb, o, m), k), -a->p);
  if (!guarded) return e;
  const tir_expr_t* ok =
      tir_bin(t, TIR_AND, tir_bin(t, TIR_GE, e, nn_i(kb, 0)), tir_bin(t, TIR_LT, e, nn_i(kb, a->in)));
  *valid = *valid ? tir_bin(t, TIR_AND, *valid, ok) : ok;
  return nn_clamp(kb, e, 0, a->in - 1);
}

/* Element (row r, column q) of a private A x A buffer of c-lane vectors. */
static const tir_expr_t* pidx(nn_kb_t* kb, int64_t A, int64_t c, const tir_expr_t* r, const tir_expr_t* q,
                              const tir_expr_t* l) {
  return nn_add(kb, nn_mulc(kb, nn_add(kb, nn_mulc(kb, r, A), q), c), l);
}

/* sum_q M[j][q] e[r][q] (M = B^T or A^T of tile |w->m|): row r of a
 * transform's second stage, from the private first-stage values |e|. */
static const tir_expr_t* stage_row(nn_kb_t* kb, const wino_t* w, const tir_buffer_t* e, const tir_expr_t* er,
                                   const tir_expr_t* l, int64_t j, double (*mat)(int64_t, int64_t, int64_t)) {
  const tir_expr_t* row[WINO_AMAX];
  double coef[WINO_AMAX];
  for (int64_t q = 0; q < w->A; ++q) {
    row[q] = tir_load(kb->t, e, NN_IDX(pidx(kb, w->A, w->c, er, nn_i(kb, q), l)));
    coef[q] = mat(w->m, j, q);
  }
  return lin(kb, w->A, coef, row);
}

/* The loop variables of kernels 1 and 3, parallel over (image, channel
 * block, tile row) = |vo| (|nb| blocks) with the tile column |vx|: *ty,
 * *n, *b (the block), *tx and the tile's index *p in V / U. */
static void tile_vars(nn_kb_t* kb, const wino_t* w, int64_t nb, const char* name, tir_var_t** vo, tir_var_t** vx,
                      const tir_expr_t** ty, const tir_expr_t** n, const tir_expr_t** b, const tir_expr_t** tx,
                      const tir_expr_t** p) {
  *vo = nn_var(kb, name);
  const tir_expr_t* o = nn_v(kb, *vo);
  *ty = nn_modc(kb, o, w->th);
  const tir_expr_t* nbk = nn_divc(kb, o, w->th);
  *n = nn_divc(kb, nbk, nb);
  *b = nn_modc(kb, nbk, nb);
  *vx = nn_var(kb, "tx");
  *tx = nn_v(kb, *vx);
  *p = nn_add(kb, nn_mulc(kb, nn_add(kb, nn_mulc(kb, *n, w->th), *ty), w->tw), *tx);
}

/* Input transform of tile (n, cb, ty, tx) (tile index p): B^T d into a
 * private buffer one column of the patch d at a time (its A vectors read
 * from X, as 0 outside X where |grow| / |gcol| guard the rows / columns;
 * each read once, the C compiler keeping them across the A sums), then
 * (B^T d) B into V one row at a time. The TIR holds 2 A statements, not
 * the 3 A^2 of a patch copy and two stages written out (ResNet-18's C
 * 836 -> 331 KB); the C compiler unrolls the column and row loops
 * (profiled, ResNet-18 under chrt: layer1's input transform 0.110 ->
 * 0.094 ms, its output transform 0.041 -> 0.032 ms). */
static const tir_stmt_t* in_tile(nn_kb_t* kb, const wino_t* w, const tir_expr_t* n, const tir_expr_t* cb,
                                 const tir_expr_t* ty, const tir_expr_t* tx, const tir_expr_t* p, bool grow,
                                 bool gcol) {
  tir_ctx_t* t = kb->t;
  const int64_t A = w->A, c = w->c, len = A * A * c;
  const tir_buffer_t* e = tir_buffer(t, "we", KILN_DTYPE_F32, 1, &len, TIR_SCOPE_PRIVATE);
  /* e[i][b] = sum_a B^T[i][a] d[a][b], per column b */
  tir_var_t* vc = nn_var(kb, "pb");
  const tir_expr_t* ec = nn_v(kb, vc);
  const tir_stmt_t* cols = NULL;
  for (int64_t i = 0; i < A; ++i) {
    tir_var_t* vl = nn_var(kb, "l");
    const tir_expr_t* l = nn_v(kb, vl);
    const tir_expr_t* col[WINO_AMAX];
    double coef[WINO_AMAX];
    for (int64_t r = 0; r < A; ++r) {
      coef[r] = bt_at(w->m, i, r);
      col[r] = NULL;
      if (coef[r] == 0) continue;
      const tir_expr_t* valid = NULL;
      const tir_expr_t* ih = patch_coord(kb, &w->ah, ty, w->m, nn_i(kb, r), grow, &valid);
      const tir_expr_t* iw = patch_coord(kb, &w->aw, tx, w->m, ec, gcol, &valid);
      const tir_expr_t* x = nn_ldf(kb, w->x, NN_IDX(n, cb, ih, iw, l));
      col[r] = valid ? tir_select(t, valid, x, nn_f(kb, 0.0)) : x;
    }
    const tir_stmt_t* st = tir_store(t, e, NN_IDX(pidx(kb, A, c, nn_i(kb, i), ec, l)), lin(kb, A, coef, col));
    cols = tir_seq2(t, cols, lanes_st(kb, c, vl, st));
  }
  cols = nn_for(kb, vc, A, cols);
  nn_unroll(kb, vc);
  /* V[i * A + j] = sum_b e[i][b] B^T[j][b], per row i */
  tir_var_t* vr = nn_var(kb, "pa");
  const tir_expr_t* er = nn_v(kb, vr);
  const tir_stmt_t* rows = NULL;
  for (int64_t j = 0; j < A; ++j) {
    tir_var_t* vl = nn_var(kb, "l");
    const tir_expr_t* l = nn_v(kb, vl);
    const tir_stmt_t* st = tir_store(t, w->v, NN_IDX(nn_addc(kb, nn_mulc(kb, er, A), j), cb, p, l),
                                     stage_row(kb, w, e, er, l, j, bt_at));
    rows = tir_seq2(t, rows, lanes_st(kb, c, vl, st));
  }
  rows = nn_for(kb, vr, A, rows);
  nn_unroll(kb, vr);
  return tir_alloc(t, e, tir_seq2(t, cols, rows));
}

/* Tiles [lo, hi) along |a| whose patches lie inside the input. */
static void tiles_inside(const nn_axis_t* a, int64_t m, int64_t tiles, int64_t* lo, int64_t* hi) {
  *lo = *hi = 0;
  bool any = false;
  for (int64_t o = 0; o < tiles; ++o) {
    const int64_t s = o * m - a->p;
    if (s < 0 || s + m + 2 > a->in) continue;
    if (!any) *lo = o;
    *hi = o + 1, any = true;
  }
}

/* Kernel 1: parallel over (image, channel block, tile row); a tile whose
 * patch lies inside X reads it plainly, the others through guards: two
 * copies of the tile (not one per border row / column segment: ResNet-50's
 * C 380 -> 281 KB, its cold compile's C compiler 3.4 -> 2.8 s CPU). */
static kiln_status_t emit_input(nn_kb_t* kb, const wino_t* w) {
  tir_ctx_t* t = kb->t;
  int64_t ylo, yhi, xlo, xhi;
  tiles_inside(&w->ah, w->m, w->th, &ylo, &yhi);
  tiles_inside(&w->aw, w->m, w->tw, &xlo, &xhi);
  tir_var_t *vo, *vx;
  const tir_expr_t *ty, *n, *cb, *tx, *p;
  tile_vars(kb, w, w->CB, "ncy", &vo, &vx, &ty, &n, &cb, &tx, &p);
  const bool all_in = ylo == 0 && yhi == w->th && xlo == 0 && xhi == w->tw;
  const tir_stmt_t* tile = in_tile(kb, w, n, cb, ty, tx, p, !all_in, !all_in);
  if (!all_in && ylo < yhi && xlo < xhi) {
    const tir_expr_t* inside = tir_bin(t, TIR_AND, tir_bin(t, TIR_GE, ty, nn_i(kb, ylo)), tir_bin(t, TIR_LT, ty, nn_i(kb, yhi)));
    inside = tir_bin(t, TIR_AND, inside, tir_bin(t, TIR_GE, tx, nn_i(kb, xlo)));
    inside = tir_bin(t, TIR_AND, inside, tir_bin(t, TIR_LT, tx, nn_i(kb, xhi)));
    tile = tir_if(t, inside, in_tile(kb, w, n, cb, ty, tx, p, false, false), tile);
  }
  const tir_stmt_t* body = nn_for(kb, vx, w->tw, tile);
  body = nn_for(kb, vo, w->N * w->CB * w->th, body);
  if (w->N * w->CB * w->th > 1) nn_parallel(kb, vo);
  kb->name_suffix = w->m == 2 ? "_wino2_in" : "_wino4_in";
  return nn_emit(kb, body);
}

/* Kernel 2: the A*A GEMMs, L = V (as the blocked 1x1 conv reads X) */
static const tir_expr_t* g_lload(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b, const tir_expr_t* k,
                                 int32_t grp, const tir_expr_t* const* kv, const tir_expr_t* m) {
  const wino_t* w = g->user;
  (void)grp, (void)kv;
  return nn_ldf(kb, w->v, NN_IDX(b, nn_divc(kb, k, w->c), m, nn_modc(kb, k, w->c)));
}

static const tir_stmt_t* g_store(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b, const tir_expr_t* m,
                                 const tir_expr_t* n, const tir_expr_t* v) {
  const wino_t* w = g->user;
  return nn_stf(kb, w->u, NN_IDX(b, nn_divc(kb, n, w->c), m, nn_modc(kb, n, w->c)), v);
}

static double g_get_w(const void* user, int64_t b, int64_t row, int64_t col) {
  const wino_t* w = user;
  return w->wt[(b * w->M + row) * w->C + col];
}

/* U = G g G^T per (position, output channel, input channel), in double
 * (G read once into registers; the same sums in the same order as the
 * plain triple loops, so the same rounding). */
static kiln_status_t transform_weights(kiln_lower_ctx_t* ctx, wino_t* w) {
  float* g = NULL;
  KILN_RETURN_IF_ERROR(nn_const_input_f32(ctx, 1, &g));
  if (!g) return kiln_make_status(KILN_INTERNAL, "Conv: the Winograd kernel needs constant weights");
  const int64_t A = w->A, AA = A * A, plane = w->M * w->C;
  w->wt = malloc(sizeof(float) * (size_t)(AA * plane));
  if (!w->wt) {
    free(g);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "Conv: Winograd weights");
  }
  double gm[WINO_AMAX][3];
  for (int64_t i = 0; i < A; ++i)
    for (int64_t r = 0; r < 3; ++r) gm[i][r] = g_at(w->m, i, r);
  for (int64_t mo = 0; mo < w->M; ++mo)
    for (int64_t ci = 0; ci < w->C; ++ci) {
      const float* k = g + (mo * w->C + ci) * 9;
      float* dst = w->wt + mo * w->C + ci;
      double gk[WINO_AMAX][3];
      for (int64_t i = 0; i < A; ++i)
        for (int64_t j = 0; j < 3; ++j) {
          double s = 0;
          s += gm[i][0] * k[j];
          s += gm[i][1] * k[3 + j];
          s += gm[i][2] * k[6 + j];
          gk[i][j] = s;
        }
      for (int64_t i = 0; i < A; ++i)
        for (int64_t j = 0; j < A; ++j) {
          double s = 0;
          s += gk[i][0] * gm[j][0];
          s += gk[i][1] * gm[j][1];
          s += gk[i][2] * gm[j][2];
          dst[(i * A + j) * plane] = (float)s;
        }
    }
  free(g);
  return NULL;
}

static kiln_status_t emit_gemm(nn_kb_t* kb, wino_t* w, const nn_wino_knobs_t* k) {
  kiln_lower_ctx_t* ctx = kb->ctx;
  nn_tap_group_t tg = {{1, 1, 1}, 0, {0, 0, 0}};
  nn_gemm_t g;
  memset(&g, 0, sizeof g);
  g.batch = w->A * w->A;
  g.M = w->T;
  g.N = w->Mp;
  g.K = w->C;
  g.taps = 1;
  g.n_groups = 1;
  g.groups = &tg;
  g.user = w;
  g.L.lload = g_lload;
  g.store = g_store;
  g.psum = true;
  g.direct_l = true;
  g.taps_outer = true;
  g.ksplit = w->c;
  g.nr_max = 2 * w->c;
  /* K blocks of at most 512 channels (the blocked 1x1 conv's) */
  g.kc = w->C;
  if (w->C > 512)
    for (int64_t kc = 512 / w->c * w->c; kc >= w->c; kc -= w->c)
      if (w->C % kc == 0) {
        g.kc = kc;
        break;
      }
  int64_t lanes, regs;
  nn_simd(ctx, &lanes, &regs);
  g.nr = w->Mp % (2 * w->c) == 0 ? 2 * w->c : w->c;
  g.jblock = w->c;
  const int64_t vecs = (g.nr + lanes - 1) / lanes;
  int64_t mr_max = (regs - (vecs > 3 ? vecs + 1 : 4)) / vecs;
  if (mr_max > 14) mr_max = 14;
  if (mr_max < 1) mr_max = 1;
  const int64_t tiles = (g.M + mr_max - 1) / mr_max;
  g.mr = (g.M + tiles - 1) / tiles;
  /* the weights of one K block of each position's N block within 256 KB */
  int64_t nblock_kb = 256;
  /* a tuner's knobs where this GEMM takes them (as the blocked conv's) */
  if (k) {
    if (k->mr >= 1 && k->mr <= g.M && k->mr <= 14) g.mr = k->mr;
    if (k->nr == w->c || ((k->nr == 2 * w->c || k->nr == 3 * w->c) && w->Mp % k->nr == 0)) g.nr = k->nr;
    if (k->kc >= 1 && k->kc <= w->C && w->C % k->kc == 0 && (k->kc == w->C || k->kc % w->c == 0)) g.kc = k->kc;
    if (k->par >= KILN_GEMM_PAR_AUTO && k->par <= KILN_GEMM_PAR_N) g.par = k->par;
    if (k->nblock_kb >= 1 && k->nblock_kb <= (1 << 20)) nblock_kb = k->nblock_kb;
    /* the registers: mr x vecs accumulators, vecs weights and a broadcast */
    const int64_t v = (g.nr + lanes - 1) / lanes;
    if (g.mr * v + v + 1 > regs) g.mr = (regs - v - 1) / v > 0 ? (regs - v - 1) / v : 1;
  }
  const int64_t nct = (nblock_kb << 10) / (int64_t)sizeof(float) / (g.kc * g.nr);
  g.nc_tiles = nct < 1 ? 1 : nct;
  KILN_RETURN_IF_ERROR(nn_pack_const(ctx, &g, "wino_w", g.batch, w->M, g.K, g.nr, g_get_w, w, &g.R.packed));
  kb->name_suffix = w->m == 2 ? "_wino2_gemm" : "_wino4_gemm";
  return nn_gemm_emit(kb, &g);
}

/* Output transform of tile (n, mb, ty, tx): A^T U into a private buffer,
 * one column at a time, then (A^T U) A + bias stored into Y, one row at a
 * time, the positions past OH / OW (the last tiles of planes that are not
 * whole tiles) skipped. */
static const tir_stmt_t* out_tile(nn_kb_t* kb, const wino_t* w, const tir_expr_t* n, const tir_expr_t* mb,
                                  const tir_expr_t* ty, const tir_expr_t* tx, const tir_expr_t* p) {
  tir_ctx_t* t = kb->t;
  const int64_t A = w->A, c = w->c, m = w->m, len = m * A * c;
  const tir_buffer_t* e = tir_buffer(t, "wo", KILN_DTYPE_F32, 1, &len, TIR_SCOPE_PRIVATE);
  tir_var_t* vc = nn_var(kb, "pb");
  const tir_expr_t* ec = nn_v(kb, vc);
  const tir_stmt_t* cols = NULL;
  for (int64_t i = 0; i < m; ++i) {
    tir_var_t* vl = nn_var(kb, "l");
    const tir_expr_t* l = nn_v(kb, vl);
    const tir_expr_t* col[WINO_AMAX];
    double coef[WINO_AMAX];
    for (int64_t a = 0; a < A; ++a) {
      col[a] = nn_ldf(kb, w->u, NN_IDX(nn_addc(kb, ec, a * A), mb, p, l));
      coef[a] = at_at(m, i, a);
    }
    const tir_stmt_t* st = tir_store(t, e, NN_IDX(pidx(kb, A, c, nn_i(kb, i), ec, l)), lin(kb, A, coef, col));
    cols = tir_seq2(t, cols, lanes_st(kb, c, vl, st));
  }
  cols = nn_for(kb, vc, A, cols);
  nn_unroll(kb, vc);
  tir_var_t* vr = nn_var(kb, "pa");
  const tir_expr_t* er = nn_v(kb, vr);
  const tir_expr_t* oh = nn_add(kb, nn_mulc(kb, ty, m), er);
  const bool rcut = w->ah.out % m != 0, ccut = w->aw.out % m != 0;
  const tir_expr_t* rok = rcut ? tir_bin(t, TIR_LT, oh, nn_i(kb, w->ah.out)) : NULL;
  if (rcut) oh = nn_clamp(kb, oh, 0, w->ah.out - 1);
  const tir_stmt_t* rows = NULL;
  for (int64_t j = 0; j < m; ++j) {
    tir_var_t* vl = nn_var(kb, "l");
    const tir_expr_t* l = nn_v(kb, vl);
    const tir_expr_t* v = stage_row(kb, w, e, er, l, j, at_at);
    if (w->bias) v = tir_add(t, nn_ldf(kb, w->bias, NN_IDX(nn_add(kb, nn_mulc(kb, mb, c), l))), v);
    const tir_expr_t* ow = nn_addc(kb, nn_mulc(kb, tx, m), j);
    const tir_expr_t* ok = rok;
    if (ccut && j > 0) {
      const tir_expr_t* cok = tir_bin(t, TIR_LT, ow, nn_i(kb, w->aw.out));
      ok = ok ? tir_bin(t, TIR_AND, ok, cok) : cok;
      ow = nn_clamp(kb, ow, 0, w->aw.out - 1);
    }
    /* guarded stores index in bounds (clamped) without the guard */
    const tir_stmt_t* st = nn_stf(kb, w->y, NN_IDX(n, mb, oh, ow, l), v);
    if (ok) st = tir_if(t, ok, st, NULL);
    rows = tir_seq2(t, rows, lanes_st(kb, c, vl, st));
  }
  rows = nn_for(kb, vr, m, rows);
  nn_unroll(kb, vr);
  return tir_alloc(t, e, tir_seq2(t, cols, rows));
}

/* Kernel 3: parallel over (image, channel block, tile row). */
static kiln_status_t emit_output(nn_kb_t* kb, const wino_t* w) {
  tir_var_t *vo, *vx;
  const tir_expr_t *ty, *n, *mb, *tx, *p;
  tile_vars(kb, w, w->MB, "nmy", &vo, &vx, &ty, &n, &mb, &tx, &p);
  const tir_stmt_t* body = nn_for(kb, vx, w->tw, out_tile(kb, w, n, mb, ty, tx, p));
  body = nn_for(kb, vo, w->N * w->MB * w->th, body);
  if (w->N * w->MB * w->th > 1) nn_parallel(kb, vo);
  kb->name_suffix = w->m == 2 ? "_wino2_out" : "_wino4_out";
  return nn_emit(kb, body);
}

int32_t nn_conv_wino_tiles(const kiln_lower_ctx_t* ctx, const nn_wino_geo_t* geo) {
  if (ctx->target != KILN_TARGET_CLASS_CPU) return 0;
  const nn_axis_t *h = &geo->ah, *w = &geo->aw;
  if (geo->xb <= 0 || geo->xb != geo->c || h->k != 3 || w->k != 3) return 0;
  if (h->s != 1 || w->s != 1 || h->d != 1 || w->d != 1) return 0;
  if (ctx->in[0]->dtype != KILN_DTYPE_F32 || ctx->out[0]->dtype != KILN_DTYPE_F32) return 0;
  /* under 16 channels the transforms cost more than the GEMMs save */
  if (geo->C < 16 || geo->M < 16) return 0;
  return (1 << 2) | (1 << 4);
}

int64_t nn_conv_wino_choose(const kiln_lower_ctx_t* ctx, const nn_wino_geo_t* geo) {
  const nn_axis_t *h = &geo->ah, *w = &geo->aw;
  if (!nn_conv_wino_tiles(ctx, geo)) return 0;
  const char* env = getenv("KILN_WINO");
  if (env && (!strcmp(env, "0") || !strcmp(env, "off"))) return 0;
  if (env && !strcmp(env, "2")) return 2;
  if (env && !strcmp(env, "4")) return 4;
  /* The rule (measured, docs/STATUS.md): F(4) where the plane is whole
   * 4x4 tiles, at least 8 a side; F(2) on the other planes of at least 6
   * a side; the dense conv on smaller planes. */
  if (h->out % 4 == 0 && w->out % 4 == 0 && h->out >= 8 && w->out >= 8) return 4;
  if (h->out >= 6 && w->out >= 6) return 2;
  return 0;
}

kiln_status_t nn_conv_wino(kiln_lower_ctx_t* ctx, const nn_wino_geo_t* geo, int64_t m, const nn_wino_knobs_t* k) {
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  if (m != 2 && m != 4) return kiln_make_status(KILN_INTERNAL, "Conv: no Winograd F(%lldx%lld, 3x3)", (long long)m, (long long)m);
  wino_t w;
  memset(&w, 0, sizeof w);
  w.x = ctx->in[0], w.y = ctx->out[0];
  w.m = m, w.A = m + 2;
  w.N = geo->N, w.C = geo->C, w.M = geo->M, w.c = geo->c;
  w.CB = (w.C + w.c - 1) / w.c, w.MB = (w.M + w.c - 1) / w.c, w.Mp = w.MB * w.c;
  w.ah = geo->ah, w.aw = geo->aw;
  w.th = (w.ah.out + m - 1) / m, w.tw = (w.aw.out + m - 1) / m;
  w.T = w.N * w.th * w.tw;
  w.bias = geo->bias;
  const int64_t AA = w.A * w.A;
  const int64_t vs[4] = {AA, w.CB, w.T, w.c}, us[4] = {AA, w.MB, w.T, w.c};
  KILN_RETURN_IF_ERROR(kiln_lower_temp(ctx, "wino_v", KILN_DTYPE_F32, 4, vs, &w.v));
  KILN_RETURN_IF_ERROR(kiln_lower_temp(ctx, "wino_u", KILN_DTYPE_F32, 4, us, &w.u));
  KILN_RETURN_IF_ERROR(transform_weights(ctx, &w));
  kiln_status_t s = emit_input(&kb, &w);
  if (!s) s = emit_gemm(&kb, &w, k);
  free(w.wt);
  w.wt = NULL;
  KILN_RETURN_IF_ERROR(s);
  return emit_output(&kb, &w);
}
