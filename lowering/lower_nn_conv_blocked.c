/* Kernels on the blocked NCHWc layout (lowering/layout.h): Conv (group 1,
 * and depthwise), GlobalAveragePool and the reorders between layouts.
 *
 * A blocked tensor [N][C][H][W] lives as [N][CB][H][W][c] with CB =
 * ceil(C/c); lanes past C in the last block are never read.
 *
 * Conv (group 1) is one GEMM per image whose rows are the dense output
 * positions (no padded grid) and whose columns are the output channels,
 * one register tile column per channel block (nr = c): the tile's vector
 * of c lanes is one block of Y, so the GEMM stores Y[n][ob][oh][ow][0..c)
 * in place (no workspace, no crop) and epilogue fusion sees an ordinary
 * store into the tensor. L is read in place from X, blocked or plain (a
 * 3-channel stem reads the model input as is), or from a zero-padded copy
 * of X where taps fall outside it; the tile's k loop runs over the input
 * channels of one tap at a time (cut at X's channel blocks, so its loads
 * are constant offsets from hoisted pointers), over K blocks of at most
 * max(64, 512 / taps) channels (bc_kblock). The weights are R, packed at compile time
 * [ceil(M/c)][C*T][c] (per K block tap-major) with zero columns past M.
 *
 * Depthwise convs are direct: per (image, channel block) and output
 * position a c-lane vector accumulates the taps, split into interior rows
 * and columns (no guard; BDW_OW columns at a time in registers) and
 * borders (masked taps); weights and bias are re-laid out at compile time
 * as [CB][KH*KW][c] and [CB][c].
 */
#include <stdlib.h>
#include <string.h>

#include "lowering/layout.h"
#include "lowering/lower_ew_impl.h"
#include "lowering/lower_nn_impl.h"
#include "lowering/plan.h"

typedef struct bc_s {
  const tir_buffer_t *x, *y, *bias; /* bias: padded to Mp, or NULL */
  int32_t xb, c;                    /* x's block (0: plain NCHW), the block */
  int64_t N, C, M, Mp, T;
  nn_axis_t ah, aw;                 /* the two spatial axes */
  const float* wval;
  /* The GEMM (batch n, row m = oh * OW + ow) reads |src| in place: X, or
   * X zero-padded by ph/pw on every side where a tap reads outside it
   * (then padh/padw = ph/pw), in X's layout */
  int64_t kc; /* input channels per K block */
  const tir_buffer_t* src;
  int64_t padh, padw;
} bc_t;

/* Output row and column of GEMM row m. */
static const tir_expr_t* bc_pos_h(nn_kb_t* kb, const bc_t* bc, const tir_expr_t* m) { return nn_divc(kb, m, bc->aw.out); }
static const tir_expr_t* bc_pos_w(nn_kb_t* kb, const bc_t* bc, const tir_expr_t* m) { return nn_modc(kb, m, bc->aw.out); }

/* Element (n, channel ch, row ih, column iw) of |x| in X's layout. */
static const tir_expr_t* bc_x(nn_kb_t* kb, const bc_t* bc, const tir_buffer_t* x, const tir_expr_t* n,
                              const tir_expr_t* ch, const tir_expr_t* ih, const tir_expr_t* iw) {
  if (bc->xb) return nn_ldf(kb, x, NN_IDX(n, nn_divc(kb, ch, bc->xb), ih, iw, nn_modc(kb, ch, bc->xb)));
  return nn_ldf(kb, x, NN_IDX(n, ch, ih, iw));
}

/* Coordinate o*s + k*d - p along |a|, clamped with its validity folded into
 * *valid when some tap may fall outside the input. */
static const tir_expr_t* bc_coord(nn_kb_t* kb, const nn_axis_t* a, const tir_expr_t* o, const tir_expr_t* k,
                                  const tir_expr_t** valid) {
  tir_ctx_t* t = kb->t;
  const tir_expr_t* e = nn_addc(kb, nn_add(kb, nn_mulc(kb, o, a->s), nn_mulc(kb, k, a->d)), -a->p);
  if (a->p <= 0 && (a->out - 1) * a->s + (a->k - 1) * a->d - a->p < a->in) return e;
  const tir_expr_t* ok =
      tir_bin(t, TIR_AND, tir_bin(t, TIR_GE, e, nn_i(kb, 0)), tir_bin(t, TIR_LT, e, nn_i(kb, a->in)));
  *valid = *valid ? tir_bin(t, TIR_AND, *valid, ok) : ok;
  return nn_clamp(kb, e, 0, a->in - 1);
}

/* L element: output position m's tap (kv[1], kv[2]) of input channel c. */
static const tir_expr_t* bc_lload(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b, const tir_expr_t* c,
                                  int32_t grp, const tir_expr_t* const* kv, const tir_expr_t* m) {
  const bc_t* bc = g->user;
  (void)grp;
  /* every tap inside src: plain affine loads */
  const tir_expr_t* ih = nn_addc(kb, nn_add(kb, nn_mulc(kb, bc_pos_h(kb, bc, m), bc->ah.s), nn_mulc(kb, kv[1], bc->ah.d)),
                                 bc->padh - bc->ah.p);
  const tir_expr_t* iw = nn_addc(kb, nn_add(kb, nn_mulc(kb, bc_pos_w(kb, bc, m), bc->aw.s), nn_mulc(kb, kv[2], bc->aw.d)),
                                 bc->padw - bc->aw.p);
  return bc_x(kb, bc, bc->src, b, c, ih, iw);
}

static void bc_yidx(nn_kb_t* kb, const bc_t* bc, const tir_expr_t* b, const tir_expr_t* m, const tir_expr_t* n,
                    const tir_expr_t** idx) {
  /* n = nt * c + j with j < c: the simplifier folds the block to nt and the
   * lane to j, so the store is the tile's contiguous vector */
  idx[0] = b;
  idx[1] = nn_divc(kb, n, bc->c);
  idx[2] = bc_pos_h(kb, bc, m);
  idx[3] = bc_pos_w(kb, bc, m);
  idx[4] = nn_modc(kb, n, bc->c);
}

static const tir_stmt_t* bc_store(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b, const tir_expr_t* m,
                                  const tir_expr_t* n, const tir_expr_t* v) {
  const tir_expr_t* idx[5];
  bc_yidx(kb, g->user, b, m, n, idx);
  return nn_stf(kb, ((const bc_t*)g->user)->y, idx, v);
}

static const tir_expr_t* bc_init(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b, const tir_expr_t* m,
                                 const tir_expr_t* n) {
  (void)b, (void)m;
  return nn_ldf(kb, ((const bc_t*)g->user)->bias, NN_IDX(n));
}

/* Packed weights: row (output channel) m, column kk in K blocks of kc
 * channels, each tap-major (the taps are outside the tile's k loop). */
static double bc_get_w(const void* user, int64_t gi, int64_t m, int64_t kk) {
  const bc_t* bc = user;
  (void)gi;
  const int64_t blk = kk / (bc->kc * bc->T), r = kk % (bc->kc * bc->T);
  return bc->wval[m * bc->C * bc->T + (blk * bc->kc + r % bc->kc) * bc->T + r / bc->kc];
}

/* The bias padded to |len| channels (zeros past the model's), as a
 * compile-time constant; NULL without a bias. */
static kiln_status_t padded_bias(kiln_lower_ctx_t* ctx, int64_t M, int32_t rank, const int64_t* shape,
                                 const tir_buffer_t** out) {
  *out = NULL;
  int64_t len = 1;
  for (int32_t i = 0; i < rank; ++i) len *= shape[i];
  if (ctx->n_in < 3 || !ctx->in[2]) return NULL;
  float* b = NULL;
  KILN_RETURN_IF_ERROR(nn_const_input_f32(ctx, 2, &b));
  if (!b) return kiln_make_status(KILN_INTERNAL, "Conv: blocked layout needs a constant bias");
  float* p = NULL;
  kiln_status_t s = nn_alloc_f32(len, "padded bias", &p);
  if (!s) memcpy(p, b, sizeof(float) * (size_t)M);
  free(b);
  KILN_RETURN_IF_ERROR(s);
  return nn_const_f32(ctx, "bias_blk", rank, shape, p, out);
}

/* Extent of src along |a|: what the taps of every output read. */
static int64_t bc_extent(const nn_axis_t* a) { return (a->out - 1) * a->s + (a->k - 1) * a->d + 1; }

static bool bc_outside(const nn_axis_t* a) { return a->p > 0 || bc_extent(a) - a->p > a->in; }

/* Columns [w0, w0 + len) of padded row hs of channel (block) ch: a copy of
 * X's row ih from column w0 - padw on (ih non-NULL), else zeros. */
static const tir_stmt_t* bc_pad_seg(nn_kb_t* kb, const bc_t* bc, const tir_expr_t* n, const tir_expr_t* ch,
                                    const tir_expr_t* hs, const tir_expr_t* ih, int64_t w0, int64_t len) {
  if (len <= 0) return NULL;
  tir_ctx_t* t = kb->t;
  const tir_buffer_t* x = bc->x;
  tir_var_t* vw = nn_var(kb, "ws");
  const tir_expr_t* ws = nn_addc(kb, nn_v(kb, vw), w0);
  const tir_stmt_t* s;
  if (x->rank == 5) {
    tir_var_t* vl = nn_var(kb, "l");
    const tir_expr_t* l = nn_v(kb, vl);
    const tir_expr_t* v = ih ? nn_ldf(kb, x, NN_IDX(n, ch, ih, nn_addc(kb, ws, -bc->padw), l)) : nn_f(kb, 0.0);
    s = nn_for(kb, vl, x->shape[4], tir_store(t, bc->src, NN_IDX(n, ch, hs, ws, l), v));
    nn_vectorize(kb, vl);
  } else {
    const tir_expr_t* v = ih ? nn_ldf(kb, x, NN_IDX(n, ch, ih, nn_addc(kb, ws, -bc->padw))) : nn_f(kb, 0.0);
    s = tir_store(t, bc->src, NN_IDX(n, ch, hs, ws), v);
  }
  return nn_for(kb, vw, len, s);
}

/* Whether the padded temp's interior can become X's storage
 * (lowering/fuse_slice.c): X comes from a node of the graph (not an input
 * or a constant, which arrive in their own memory), is not a graph output,
 * and the environment does not ask for the copy (`KILN_CONV_PAD=copy`: the
 * path before, kept for measuring; the compile cache keys on the code). */
static bool bc_pad_in_place(const kiln_lower_ctx_t* ctx) {
  const char* env = getenv("KILN_CONV_PAD");
  if (env && !strcmp(env, "copy")) return false;
  if (ctx->target != KILN_TARGET_CLASS_CPU || !ctx->graph || !ctx->node) return false;
  const int32_t ti = ctx->node->inputs[0];
  if (ti < 0 || ti >= ctx->graph->n_tensors || ctx->graph->tensors[ti].producer < 0) return false;
  if (ctx->in[0]->dtype != KILN_DTYPE_F32) return false;
  for (int32_t i = 0; i < ctx->graph->n_outputs; ++i)
    if (ctx->graph->outputs[i] == ti) return false;
  return true;
}

/* src's interior from X as a plain copy nest `src[n][ch][h + ph][w + pw]..
 * = X[n][ch][h][w]..`: the form epilogue fusion folds into X's producer
 * (a Concat part's store, lowering/fuse.c) and kiln_plan_fold_slices
 * turns into X's storage where X has other readers; the border kernel
 * (bc_pad without the copy) zeroes the rest. What stays of the copy when
 * neither applies is this kernel. */
static kiln_status_t bc_pad_interior(nn_kb_t* kb, const bc_t* bc) {
  tir_ctx_t* t = kb->t;
  const tir_buffer_t* x = bc->x;
  kiln_lew_nest_t n;
  kiln_lew_nest_buf(t, &n, x);
  const tir_expr_t* idx[KILN_MAX_RANK];
  for (int32_t k = 0; k < x->rank; ++k) idx[k] = n.idx[k];
  idx[2] = tir_add(t, n.idx[2], tir_int(t, bc->padh));
  idx[3] = tir_add(t, n.idx[3], tir_int(t, bc->padw));
  const tir_stmt_t* body = kiln_lew_loops(t, &n, tir_store(t, bc->src, idx, tir_load(t, x, n.idx)));
  const tir_buffer_t* params[2] = {x, bc->src};
  return kiln_lew_emit(kb->ctx, &n, body, 2, params, true);
}

/* The zero-padded copy of X (same layout): src[n][ch][hs][ws][l] =
 * X[n][ch][hs - ph][ws - pw][l], 0 outside X. One pass over the input;
 * the GEMM then reads its rows as affine loads without guards. A padded
 * row inside X is its left zeros, a straight copy of X's row (contiguous:
 * vector loads and stores, no per-element clamp or select) and its right
 * zeros; a row outside X is zeros (it was one loop over every padded
 * element with a clamp and a select each). ResNet-18 at 2 threads (Zen 5,
 * kernel medians of 100 runs): the 64-channel copies at 56x56 10 -> 8 us,
 * the 16 copies 132 -> 117 us in all; the stem's (3 x 224 x 224, plain)
 * stays 35 us, bound by reading the input from memory. */
static kiln_status_t bc_pad(nn_kb_t* kb, bc_t* bc, bool copy) {
  /* !copy: the interior is bc_pad_interior's nest, this kernel the border */
  kiln_lower_ctx_t* ctx = kb->ctx;
  tir_ctx_t* t = kb->t;
  const tir_buffer_t* x = bc->x;
  int64_t shape[5];
  for (int32_t i = 0; i < x->rank; ++i) shape[i] = x->shape[i];
  shape[2] = bc_extent(&bc->ah), shape[3] = bc_extent(&bc->aw);
  KILN_RETURN_IF_ERROR(kiln_lower_temp(ctx, "xpad_blk", KILN_DTYPE_F32, x->rank, shape, &bc->src));
  bc->padh = bc->ah.p, bc->padw = bc->aw.p;
  /* the interior holds all of X only where no row or column of X lies past
   * what the taps read (a stride can leave X's last ones unread) */
  if (bc->padh + bc->ah.in > shape[2] || bc->padw + bc->aw.in > shape[3]) copy = true;
  if (!copy) KILN_RETURN_IF_ERROR(bc_pad_interior(kb, bc));
  /* parallel over (image, padded row): the threads that split a conv's
   * positions write (and then read) rows near the ones they computed */
  tir_var_t* vo = nn_var(kb, "nh");
  tir_var_t* vc = nn_var(kb, "ch");
  tir_var_t* vz = nn_var(kb, "ch");
  const tir_expr_t* o = nn_v(kb, vo);
  const tir_expr_t *n = nn_divc(kb, o, shape[2]), *hs = nn_modc(kb, o, shape[2]);
  const tir_expr_t* ihr = nn_addc(kb, hs, -bc->padh);
  const tir_expr_t* inside =
      tir_bin(t, TIR_AND, tir_bin(t, TIR_GE, ihr, nn_i(kb, 0)), tir_bin(t, TIR_LT, ihr, nn_i(kb, bc->ah.in)));
  /* clamped although the row is inside: the load's bounds hold without the guard */
  const tir_expr_t* ih = nn_clamp(kb, ihr, 0, bc->ah.in - 1);
  const int64_t pw = bc->padw < shape[3] ? bc->padw : shape[3];
  int64_t cw = shape[3] - pw < bc->aw.in ? shape[3] - pw : bc->aw.in;
  if (cw < 0) cw = 0;
  const tir_expr_t* ch = nn_v(kb, vc);
  const tir_stmt_t* row = bc_pad_seg(kb, bc, n, ch, hs, NULL, 0, pw);
  if (copy) row = tir_seq2(t, row, bc_pad_seg(kb, bc, n, ch, hs, ih, pw, cw));
  row = tir_seq2(t, row, bc_pad_seg(kb, bc, n, ch, hs, NULL, pw + cw, shape[3] - pw - cw));
  const tir_stmt_t* zero = bc_pad_seg(kb, bc, n, nn_v(kb, vz), hs, NULL, 0, shape[3]);
  const tir_stmt_t* s;
  if (row) {
    s = tir_if(t, inside, nn_for(kb, vc, shape[1], row), nn_for(kb, vz, shape[1], zero));
  } else {
    /* no columns outside X and no copy: only the rows outside X */
    const tir_expr_t* outside =
        tir_bin(t, TIR_OR, tir_bin(t, TIR_LT, ihr, nn_i(kb, 0)), tir_bin(t, TIR_GE, ihr, nn_i(kb, bc->ah.in)));
    s = tir_if(t, outside, nn_for(kb, vz, shape[1], zero), NULL);
  }
  s = nn_for(kb, vo, shape[0] * shape[2], s);
  /* The border alone (no copy) is tens of KB (ResNet-18's 56x56 64-channel
   * one 58 KB): serial up to 256 KB, sparing the threads' fork and join
   * (kernel time 1 us serial against 4-5 us parallel, ResNet-18 profiled at
   * 2 threads under load). */
  const int64_t lanes = x->rank == 5 ? x->shape[4] : 1;
  const int64_t border = shape[0] * shape[1] * (shape[2] * shape[3] - bc->ah.in * bc->aw.in) * lanes;
  if (shape[0] * shape[2] > 1 && (copy || border > 65536)) nn_parallel(kb, vo);
  return nn_emit(kb, s);
}

/* Channels per K block of a direct conv over C input channels (block xb):
 * the largest multiple of xb dividing C with at most max(64, 512 / T)
 * channels (T taps). A K block's input channels at every position and its
 * weights stay in L1/L2 while the tiles sweep them; the partial sums wait
 * in the GEMM's per-thread scratch, so Y is stored once and epilogues
 * still fuse. Measured on AVX2 (znver3), 1 thread, kiln / onnxruntime by
 * CPU time, with the partial sums in Y then (epilogues not fused):
 * ResNet-50 1.25x with K blocks only at 7x7, 1.06x with them everywhere
 * (32 channels: 1.16x, 128: 1.25x); ResNet-18 1.07x / 1.06x. A 1x1 conv's
 * k loop then ran only 64 steps per visit of the scratch (a 3x3's 576):
 * with up to 512 channels for 1x1 convs, on AVX-512 (Zen 5, 14 x 32
 * tiles, 1 thread, kernel time of chains of 1x1 convs whose weights come
 * from memory), 1024 <-> 256 at 14x14 went 19.1 -> 17.9 ms for 40 convs,
 * 2048 <-> 512 at 7x7 8.4 -> 7.4 ms for 10, the strided 1x1s 3.5 -> 3.4. */
static int64_t bc_kblock(const bc_t* bc) {
  const int64_t most = bc->T * 64 >= 512 ? 64 : 512 / bc->T;
  if (bc->xb <= 0 || bc->C <= most) return bc->C;
  for (int64_t kc = most / bc->xb * bc->xb; kc >= bc->xb; kc -= bc->xb)
    if (bc->C % kc == 0) return kc;
  return bc->C;
}

/* A tuner's knobs (the plan's gemm hook, CPU plans only): register tile
 * rows mr, columns nr (one or two channel blocks), channels per K block
 * kc, the threads' split and the KB of weights per N block. What the hook
 * returns is used only where this kernel can take it (kc a multiple of
 * X's block dividing C, nr one block or two that divide the columns),
 * else the default stays. */
static void bc_hook(kiln_lower_ctx_t* ctx, bc_t* bc, nn_gemm_t* g, int64_t lanes, int64_t regs, int64_t* nblock_kb,
                    int32_t wtiles, int64_t* wm, nn_wino_knobs_t* wk) {
  if (ctx->target != KILN_TARGET_CLASS_CPU || !ctx->plan || !ctx->plan->gemm_hook) return;
  kiln_gemm_problem_t p = {ctx->node ? ctx->node->op_type : "", g->batch, g->M, g->N, g->K, bc->T, true,
                           false, false, true, true, g->nr_max, (int32_t)lanes, (int32_t)regs, ctx->threads,
                           (int32_t)bc->c, (int32_t)bc->xb, {0}, wtiles};
  kiln_gemm_knobs_t k = {g->mr, g->nr, g->kc, g->par, *nblock_kb, 0, 0, wtiles ? (*wm ? *wm : 1) : 0};
  const kiln_gemm_knobs_t d = k;
  ctx->plan->gemm_hook(ctx->plan->gemm_hook_user, ctx->node_index, &p, &k);
  /* the Winograd switch (1: the direct conv); the GEMM knobs the point
   * changes apply to the Winograd GEMMs too, where they take them */
  if (wtiles && (k.wino == 1 || ((k.wino == 2 || k.wino == 4) && (wtiles >> k.wino) & 1))) *wm = k.wino == 1 ? 0 : k.wino;
  wk->mr = k.mr != d.mr ? k.mr : 0;
  wk->nr = k.nr != d.nr ? k.nr : 0;
  wk->kc = k.kc != d.kc ? k.kc : 0;
  wk->par = k.par != d.par ? k.par : -1;
  wk->nblock_kb = k.nblock_kb != d.nblock_kb ? k.nblock_kb : 0;
  if (k.mr >= 1 && k.mr <= g->M) g->mr = k.mr;
  if (k.nr == bc->c || ((k.nr == 2 * bc->c || k.nr == 3 * bc->c) && g->N % k.nr == 0)) g->nr = k.nr;
  if (k.kc >= 1 && k.kc <= bc->C && bc->C % k.kc == 0 && (k.kc == bc->C || (bc->xb > 0 && k.kc % bc->xb == 0)))
    g->kc = bc->kc = k.kc;
  if (k.par >= KILN_GEMM_PAR_AUTO && k.par <= KILN_GEMM_PAR_N) g->par = k.par;
  if (k.nblock_kb >= 1 && k.nblock_kb <= (1 << 20)) *nblock_kb = k.nblock_kb;
}

static kiln_status_t conv_gemm_blocked(nn_kb_t* kb, bc_t* bc) {
  kiln_lower_ctx_t* ctx = kb->ctx;
  if (bc->xb == 0 && (bc_outside(&bc->ah) || bc_outside(&bc->aw))) {
    /* a stem from the plain input: no padded copy (lower_nn_conv_stem.c) */
    const nn_stem_t st = {bc->x, bc->y, bc->N, bc->C, bc->M, bc->c, bc->ah, bc->aw};
    if (nn_conv_stem_applies(&st)) return nn_conv_stem(kb, &st);
  }
  KILN_RETURN_IF_ERROR(padded_bias(ctx, bc->M, 1, &bc->Mp, &bc->bias));
  /* 3x3 stride-1 convs: Winograd where the rule (or a tuner's point) says
   * (lower_nn_conv_wino.c) */
  const nn_wino_geo_t geo = {bc->N, bc->C, bc->M, bc->c, bc->xb, bc->ah, bc->aw, bc->bias};
  const int32_t wtiles = nn_conv_wino_tiles(ctx, &geo);
  int64_t wm = wtiles ? nn_conv_wino_choose(ctx, &geo) : 0;
  nn_wino_knobs_t wk = {0, 0, 0, -1, 0};
  /* The GEMM's rows are an image's output positions, read in place from X
   * (or from X zero-padded where a tap falls outside it). Measured on AVX2,
   * 1 thread, chains of four convs against onnxruntime, this direct form
   * over every position beat the per-output-row GEMMs (the weights re-read
   * per row: 3x3 256 channels at 14x14 1.20x -> 1.03x) and the gathered
   * micro-panels (512 at 7x7 1.31x -> 1.03x with the K blocks below). */
  nn_tap_group_t tg = {{1, bc->ah.k, bc->aw.k}, 0, {0, bc->aw.k, 1}};
  nn_gemm_t g;
  memset(&g, 0, sizeof g);
  g.batch = bc->N;
  g.M = bc->ah.out * bc->aw.out;
  g.N = bc->Mp;
  g.K = bc->C * bc->T;
  g.taps = bc->T;
  g.n_groups = 1;
  g.groups = &tg;
  g.user = bc;
  g.init = bc->bias ? bc_init : NULL;
  g.L.lload = bc_lload;
  g.store = bc_store;
  bc->kc = bc_kblock(bc);
  g.psum = true;
  g.direct_l = true;
  g.taps_outer = true;
  g.ksplit = bc->xb;
  g.nr_max = 2 * bc->c;
  /* Tiles here, not by nn_gemm_tiles (these columns are channel blocks);
   * a gemm hook sees them as a problem with |block| set (a tuner's space
   * of its own, compiler/tune_cpu.c). */
  g.kc = bc->kc;
  /* one or two channel blocks per tile column: each vector is one block of Y */
  int64_t lanes, regs;
  nn_simd(ctx, &lanes, &regs);
  g.nr = bc->Mp % (2 * bc->c) == 0 ? 2 * bc->c : bc->c;
  /* An odd number of channel blocks that 3 divides (MobileNetV2's 144
   * channels: 9 blocks of 16) takes three blocks per tile column where
   * there are 32 vector registers: mr x 3 accumulators (8 x 3 = 24 at
   * 56x56) instead of 14 x 1, so a k step loads mr broadcasts for 3*mr
   * FMAs, not 14 for 14. The 24 -> 144 1x1 convs at 56x56 (K = 24), Zen 5,
   * 2 threads, kernel medians of 50 runs: 68 -> 49 us. */
  if (regs >= 32 && bc->Mp % (2 * bc->c) != 0 && bc->Mp % (3 * bc->c) == 0) g.nr = 3 * bc->c;
  /* A stem from the plain input (ResNet's 7x7, K = 3 x 49) with four
   * channel blocks takes all four in one tile column where there are 32
   * vector registers: 6 x 4 accumulators (7 x 4 spills) instead of 14 x 2,
   * so each tap of the input is read once, not once per column tile, and a
   * k step loads 6 broadcasts for 24 FMAs instead of 14 for 28. Its last
   * tile overlaps the one before it (overlap_m: one tile shape, one copy
   * of it in the C). */
  const bool stem4 = regs >= 32 && bc->xb == 0 && bc->Mp == 4 * bc->c && bc->c == lanes;
  if (stem4) g.nr = 4 * bc->c, g.overlap_m = true;
  g.jblock = bc->c;
  /* mr x vecs accumulators, vecs weight vectors and a broadcast */
  int64_t vecs = (g.nr + lanes - 1) / lanes, mr_max = (regs - (vecs > 3 ? vecs + 1 : 4)) / vecs;
  if (mr_max > 14) mr_max = 14;
  if (mr_max < 1) mr_max = 1;
  int64_t tiles = (g.M + mr_max - 1) / mr_max;
  g.mr = (g.M + tiles - 1) / tiles;
  /* A 1x1 conv's tiles within one output row where a divisor of the width
   * of at least half the tallest tile exists: the simplifier then gives a
   * tile's rows one base (tile_split in ir/tir_simplify.c) instead of a
   * division and a register each. ResNet-50's 2048 <-> 512 at 7x7 (13-row
   * tiles before), 10 convs whose weights come from memory, on Zen 5: 7.04
   * -> 6.58 ms at 1 thread, 3.46 -> 3.32 ms at 2; 3x3 convs at 7x7 ran 2%
   * slower with 7-row tiles, so they keep theirs. */
  if (bc->T == 1)
    for (int64_t r = mr_max; r >= (mr_max + 1) / 2 && r > 1; --r)
      if (bc->aw.out % r == 0) {
        g.mr = r;
        break;
      }
  /* N blocks whose weights (one K block of them) stay within 256 KB, half
   * the smallest L2 of the machines this runs on, while every position
   * sweeps them */
  int64_t nblock_kb = 256;
  /* Threads share the output channels, not the positions, where an image's
   * weights are more than twice its input and the channel tiles split
   * evenly: each thread then reads half the weights (from memory:
   * ResNet-50's 25 M floats stay in no cache) and all of X (from L2/L3)
   * instead of all the weights and half of X. (Chains of 1024 <-> 256 1x1
   * convs at 14x14, 2 threads, Zen 5: 10.3 ms for 40 with both split by
   * channels, 9.8 with the 1024 -> 256 ones, whose weights are 1.3x their
   * input, split by positions.) */
  const int64_t thr = ctx->threads > 1 ? ctx->threads : 1, ntiles = g.N / g.nr;
  if (thr > 1 && g.N % g.nr == 0 && ntiles % thr == 0 &&
      g.K * g.N > 2 * bc->C * bc->ah.in * bc->aw.in)
    g.par = KILN_GEMM_PAR_N;
  bc_hook(ctx, bc, &g, lanes, regs, &nblock_kb, wtiles, &wm, &wk);
  if (wm) return nn_conv_wino(ctx, &geo, wm, &wk);
  /* The padded input (its kernel before the GEMM's). A conv a tuner's
   * point may switch to Winograd (which reads X itself) takes the copy in
   * plans built with a gemm hook, so its kernels read X at every point:
   * the tuner's program of the node reads the same tensors (with X folded
   * into the padded input, the direct conv read none). */
  bc->src = bc->x;
  const bool copy = !bc_pad_in_place(ctx) || (wtiles && ctx->plan && ctx->plan->gemm_hook);
  if (bc_outside(&bc->ah) || bc_outside(&bc->aw)) KILN_RETURN_IF_ERROR(bc_pad(kb, bc, copy));
  /* Weights prefetched a panel ahead (nn_gemm_t.prefetch_r) where a
   * thread's M tiles are few (<= 16), so the first sweep over each panel,
   * which reads it from memory, is a large part of the work (ResNet-50's
   * layers at 14x14 and 7x7); where many tiles reuse a panel (the stem's
   * 448 a thread) the prefetches would only take load slots. */
  const int64_t mtiles = (g.M + g.mr - 1) / g.mr;
  g.prefetch_r = (g.par == KILN_GEMM_PAR_N ? mtiles : (mtiles + thr - 1) / thr) <= 16;
  int64_t nct = (nblock_kb << 10) / (int64_t)sizeof(float) / (g.kc * bc->T * g.nr);
  g.nc_tiles = nct < 1 ? 1 : nct;
  float* wval = NULL;
  KILN_RETURN_IF_ERROR(nn_const_input_f32(ctx, 1, &wval));
  if (!wval) return kiln_make_status(KILN_INTERNAL, "Conv: blocked layout needs constant weights");
  bc->wval = wval;
  kiln_status_t s = nn_pack_const(ctx, &g, "wpack_blk", 1, bc->M, g.K, g.nr, bc_get_w, bc, &g.R.packed);
  free(wval);
  bc->wval = NULL;
  KILN_RETURN_IF_ERROR(s);
  return nn_gemm_emit(kb, &g);
}

/* ---- depthwise and pooling: windows over c-lane vectors -------------------- */

typedef enum { WIN_DEPTHWISE, WIN_MAX, WIN_AVG } win_kind_t;

typedef struct bdw_s {
  const bc_t* bc;
  win_kind_t kind;
  bool include_pad;             /* AveragePool's count_include_pad */
  const tir_buffer_t *w, *bias; /* depthwise: [CB][T][c], [CB][c] */
  const tir_expr_t *n, *cb, *oh, *ow;
  bool rows_guarded, cols_guarded;
  /* depthwise: output vectors per register tile (BDW_OW; 0: pools, no
   * tiles), row groups per plane (0: win_row_groups'), one thread */
  int64_t cols, rgroups;
  bool serial;
} bdw_t;

static const tir_expr_t* and_or(tir_ctx_t* t, tir_binop_t op, const tir_expr_t* a, const tir_expr_t* b) {
  return !a ? b : !b ? a : tir_bin(t, op, a, b);
}

/* Output vector (n, cb, oh, ow, lanes l) of a window: the depthwise sum
 * (taps outside the input read 0, the reference's order), MaxPool's
 * maximum (the first valid tap taken, later ones when strictly greater:
 * the reference's tie and NaN rule) or AveragePool's mean (over the kernel
 * with count_include_pad, else over the valid taps). Validity is one flag
 * per position, the same for every lane. */
static const tir_stmt_t* bdw_body(nn_kb_t* kb, const bdw_t* d, const tir_expr_t* l) {
  const bc_t* bc = d->bc;
  tir_ctx_t* t = kb->t;
  const tir_expr_t* acc = d->kind == WIN_DEPTHWISE && d->bias ? nn_ldf(kb, d->bias, NN_IDX(d->cb, l)) : nn_f(kb, 0.0);
  const tir_expr_t* count = nn_f(kb, 0.0); /* AveragePool: valid taps */
  const tir_expr_t* seen = NULL;          /* MaxPool: earlier valid taps, f32 (NULL: none) */
  bool seen_all = false;                  /* ... and one was always valid */
  for (int64_t kh = 0; kh < bc->ah.k; ++kh)
    for (int64_t kw = 0; kw < bc->aw.k; ++kw) {
      const tir_expr_t* valid = NULL;
      const tir_expr_t* ih = nn_addc(kb, nn_mulc(kb, d->oh, bc->ah.s), kh * bc->ah.d - bc->ah.p);
      const tir_expr_t* iw = nn_addc(kb, nn_mulc(kb, d->ow, bc->aw.s), kw * bc->aw.d - bc->aw.p);
      if (d->rows_guarded) ih = bc_coord(kb, &bc->ah, d->oh, nn_i(kb, kh), &valid);
      if (d->cols_guarded) iw = bc_coord(kb, &bc->aw, d->ow, nn_i(kb, kw), &valid);
      const tir_expr_t* x = nn_ldf(kb, bc->x, NN_IDX(d->n, d->cb, ih, iw, l));
      if (d->kind == WIN_MAX) {
        /* take = valid && (!seen || x > acc) */
        const tir_expr_t* take =
            seen_all ? tir_bin(t, TIR_GT, x, acc)
            : !seen  ? NULL
                     : tir_bin(t, TIR_OR, tir_bin(t, TIR_LT, seen, nn_f(kb, 0.5)), tir_bin(t, TIR_GT, x, acc));
        take = and_or(t, TIR_AND, valid, take);
        acc = take ? tir_select(t, take, x, acc) : x;
        if (!valid) seen_all = true;
        else seen = tir_add(t, seen ? seen : nn_f(kb, 0.0), tir_select(t, valid, nn_f(kb, 1.0), nn_f(kb, 0.0)));
        continue;
      }
      if (valid) x = tir_select(t, valid, x, nn_f(kb, 0.0));
      if (d->kind == WIN_AVG) {
        acc = tir_add(t, acc, x);
        count = tir_add(t, count, valid ? tir_select(t, valid, nn_f(kb, 1.0), nn_f(kb, 0.0)) : nn_f(kb, 1.0));
      } else {
        acc = tir_add(t, acc, tir_mul(t, x, nn_ldf(kb, d->w, NN_IDX(d->cb, nn_i(kb, kh * bc->aw.k + kw), l))));
      }
    }
  if (d->kind == WIN_AVG)
    acc = tir_bin(t, TIR_DIV, acc, d->include_pad ? nn_f(kb, (double)(bc->ah.k * bc->aw.k)) : count);
  return nn_stf(kb, bc->y, NN_IDX(d->n, d->cb, d->oh, d->ow, l), acc);
}

/* One output column segment [o0, o0 + len): a loop over columns, then the
 * vector of lanes. */
static const tir_stmt_t* bdw_cols(nn_kb_t* kb, bdw_t* d, int64_t o0, int64_t len) {
  if (len <= 0) return NULL;
  tir_var_t* vw = nn_var(kb, "ow");
  tir_var_t* vl = nn_var(kb, "l");
  d->ow = nn_addc(kb, nn_v(kb, vw), o0);
  const tir_stmt_t* s = nn_for(kb, vl, d->bc->c, bdw_body(kb, d, nn_v(kb, vl)));
  nn_vectorize(kb, vl);
  return nn_for(kb, vw, len, s);
}

/* Depthwise interior (no guard on rows or columns): BDW_OW output vectors
 * of a row at a time, in a PRIVATE accumulator tile that the C compiler
 * keeps in registers (its loops unrolled, as the GEMM's tile). Each tap's
 * weight vector is loaded once for the BDW_OW outputs, and with stride 1
 * the outputs' input vectors overlap (tap kw of output j is tap kw - 1 of
 * output j + 1), so the loads the C compiler keeps are about one per FMA
 * fewer: a 5x5 window loaded 25 weights and 25 inputs per output vector.
 * Same sum order as bdw_body (bias, then the taps row by row). */
#define BDW_OW 4
static const tir_stmt_t* bdw_cols_tiled(nn_kb_t* kb, bdw_t* d, int64_t o0, int64_t nb) {
  const bc_t* bc = d->bc;
  tir_ctx_t* t = kb->t;
  const int64_t B = d->cols, c = bc->c, len = B * c;
  const tir_buffer_t* acc = tir_buffer(t, "dwacc", KILN_DTYPE_F32, 1, &len, TIR_SCOPE_PRIVATE);
  tir_var_t* vb = nn_var(kb, "owb");
  const tir_expr_t* ow0 = nn_addc(kb, nn_mulc(kb, nn_v(kb, vb), B), o0);
  const int64_t T = bc->ah.k * bc->aw.k;
  const tir_stmt_t* seq = NULL;
  for (int64_t tap = -1; tap <= T; ++tap) {
    /* tap -1: acc = bias; 0 .. T-1: acc += x * w; T: y = acc */
    tir_var_t* vj = nn_var(kb, "j");
    tir_var_t* vl = nn_var(kb, "l");
    const tir_expr_t *j = nn_v(kb, vj), *l = nn_v(kb, vl);
    const tir_expr_t* const* ai = NN_IDX(nn_add(kb, nn_mulc(kb, j, c), l));
    const tir_expr_t* ow = nn_add(kb, ow0, j);
    const tir_stmt_t* st;
    if (tap < 0) {
      st = tir_store(t, acc, ai, d->bias ? nn_ldf(kb, d->bias, NN_IDX(d->cb, l)) : nn_f(kb, 0.0));
    } else if (tap == T) {
      st = nn_stf(kb, bc->y, NN_IDX(d->n, d->cb, d->oh, ow, l), tir_load(t, acc, ai));
    } else {
      const int64_t kh = tap / bc->aw.k, kw = tap % bc->aw.k;
      const tir_expr_t* ih = nn_addc(kb, nn_mulc(kb, d->oh, bc->ah.s), kh * bc->ah.d - bc->ah.p);
      const tir_expr_t* iw = nn_addc(kb, nn_mulc(kb, ow, bc->aw.s), kw * bc->aw.d - bc->aw.p);
      const tir_expr_t* x = nn_ldf(kb, bc->x, NN_IDX(d->n, d->cb, ih, iw, l));
      const tir_expr_t* w = nn_ldf(kb, d->w, NN_IDX(d->cb, nn_i(kb, tap), l));
      st = tir_store(t, acc, ai, tir_add(t, tir_load(t, acc, ai), tir_mul(t, x, w)));
    }
    seq = tir_seq2(t, seq, nn_for(kb, vj, B, nn_for(kb, vl, c, st)));
    nn_unroll(kb, vj);
    nn_vectorize(kb, vl);
  }
  return nn_for(kb, vb, nb, tir_alloc(t, acc, seq));
}

/* Row groups per (image, channel block) plane: with fewer planes than
 * about 16 per thread and a count the threads do not divide (MobileNetV2's
 * 144 channels: 9 blocks, 5 and 4 on 2 threads; EfficientNet's 16: one
 * block, one thread), the fewest groups of equal height that make the
 * parallel loop's count a multiple of the threads, with at least 2 rows a
 * group; else 1. */
static int64_t win_row_groups(const kiln_lower_ctx_t* ctx, int64_t planes, int64_t rows) {
  const int64_t T = ctx->threads > 1 ? ctx->threads : 1;
  if (T <= 1 || planes % T == 0 || planes >= 16 * T) return 1;
  for (int64_t r = 2; r <= T; ++r)
    if (planes * r % T == 0) return rows >= 2 * r ? r : 1;
  return 1;
}

/* Rows [r0, r1) of a plane, split into the interior rows (no guard) and
 * the borders (masked taps); columns likewise. */
static const tir_stmt_t* win_rows(nn_kb_t* kb, bdw_t* d, int64_t r0, int64_t r1) {
  const bc_t* bc = d->bc;
  int64_t hlo, hhi, wlo, whi;
  nn_axis_interior(&bc->ah, &hlo, &hhi);
  nn_axis_interior(&bc->aw, &wlo, &whi);
  const int64_t segh[4] = {0, hlo, hhi, bc->ah.out}, segw[4] = {0, wlo, whi, bc->aw.out};
  const tir_stmt_t* body = NULL;
  for (int sh = 0; sh < 3; ++sh) {
    const int64_t h0 = segh[sh] > r0 ? segh[sh] : r0, h1 = segh[sh + 1] < r1 ? segh[sh + 1] : r1;
    const int64_t nh = h1 - h0;
    if (nh <= 0) continue;
    tir_var_t* vh = nn_var(kb, "oh");
    d->oh = nn_addc(kb, nn_v(kb, vh), h0);
    d->rows_guarded = sh != 1;
    const tir_stmt_t* row = NULL;
    for (int sw = 0; sw < 3; ++sw) {
      d->cols_guarded = sw != 1;
      int64_t w0 = segw[sw], nw = segw[sw + 1] - segw[sw];
      if (d->kind == WIN_DEPTHWISE && d->cols > 0 && sh == 1 && sw == 1 && nw >= d->cols) {
        const int64_t nb = nw / d->cols;
        row = tir_seq2(kb->t, row, bdw_cols_tiled(kb, d, w0, nb));
        w0 += nb * d->cols, nw -= nb * d->cols;
      }
      row = tir_seq2(kb->t, row, bdw_cols(kb, d, w0, nw));
    }
    body = tir_seq2(kb->t, body, nn_for(kb, vh, nh, row));
  }
  return body;
}

/* The window kernel: parallel over (image, channel block, row group);
 * each group's rows in the interior and border segments. */
static kiln_status_t win_emit(nn_kb_t* kb, bdw_t* d) {
  const bc_t* bc = d->bc;
  const int64_t CB = (bc->C + bc->c - 1) / bc->c, H = bc->ah.out;
  const int64_t R = d->rgroups > 0 && d->rgroups <= H ? d->rgroups : win_row_groups(kb->ctx, bc->N * CB, H);
  tir_var_t* vnc = nn_var(kb, "ncb");
  const tir_expr_t* plane = R > 1 ? nn_divc(kb, nn_v(kb, vnc), R) : nn_v(kb, vnc);
  d->n = nn_divc(kb, plane, CB);
  d->cb = nn_modc(kb, plane, CB);
  const tir_stmt_t* body = NULL;
  for (int64_t g = R - 1; g >= 0; --g) {
    const tir_stmt_t* rows = win_rows(kb, d, g * H / R, (g + 1) * H / R);
    body = !body ? rows
                 : tir_if(kb->t, tir_bin(kb->t, TIR_EQ, nn_modc(kb, nn_v(kb, vnc), R), nn_i(kb, g)), rows, body);
  }
  body = nn_for(kb, vnc, bc->N * CB * R, body);
  if (bc->N * CB * R > 1 && !d->serial) nn_parallel(kb, vnc);
  return nn_emit(kb, body);
}

/* A tuner's knobs for the depthwise window kernel (the plan's gemm hook,
 * CPU plans only, as bc_hook; problem dw[0] > 0): output vectors per
 * register tile, row groups per plane, one thread or the threads' split.
 * A point this kernel cannot take keeps the default. */
static void bdw_hook(kiln_lower_ctx_t* ctx, bdw_t* d) {
  if (ctx->target != KILN_TARGET_CLASS_CPU || !ctx->plan || !ctx->plan->gemm_hook) return;
  const bc_t* bc = d->bc;
  int64_t lanes, regs;
  nn_simd(ctx, &lanes, &regs);
  kiln_gemm_problem_t p;
  memset(&p, 0, sizeof p);
  p.op = ctx->node ? ctx->node->op_type : "";
  p.batch = bc->N, p.M = bc->ah.out, p.N = bc->aw.out, p.K = bc->C, p.taps = bc->T;
  p.lanes = (int32_t)lanes, p.regs = (int32_t)regs, p.threads = ctx->threads;
  p.block = p.in_block = bc->c;
  const int64_t geo[8] = {bc->ah.k, bc->aw.k, bc->ah.s, bc->aw.s, bc->ah.p, bc->aw.p, bc->ah.d, bc->aw.d};
  memcpy(p.dw, geo, sizeof geo);
  kiln_gemm_knobs_t k = {0};
  k.dw_cols = d->cols, k.dw_rgroups = d->rgroups, k.par = KILN_GEMM_PAR_AUTO;
  ctx->plan->gemm_hook(ctx->plan->gemm_hook_user, ctx->node_index, &p, &k);
  if (k.dw_cols >= 1 && k.dw_cols <= 32) d->cols = k.dw_cols;
  if (k.dw_rgroups >= 1 && k.dw_rgroups <= bc->ah.out) d->rgroups = k.dw_rgroups;
  d->serial = k.par == KILN_GEMM_PAR_NONE;
}

static kiln_status_t conv_depthwise_blocked(nn_kb_t* kb, bc_t* bc) {
  kiln_lower_ctx_t* ctx = kb->ctx;
  const int64_t c = bc->c, CB = (bc->C + c - 1) / c, T = bc->T;
  float* wval = NULL;
  KILN_RETURN_IF_ERROR(nn_const_input_f32(ctx, 1, &wval));
  if (!wval) return kiln_make_status(KILN_INTERNAL, "Conv: blocked layout needs constant weights");
  float* wp = NULL;
  kiln_status_t s = nn_alloc_f32(CB * T * c, "blocked depthwise weights", &wp);
  if (!s)
    for (int64_t ch = 0; ch < bc->C; ++ch)
      for (int64_t tap = 0; tap < T; ++tap) wp[((ch / c) * T + tap) * c + ch % c] = wval[ch * T + tap];
  free(wval);
  KILN_RETURN_IF_ERROR(s);
  bdw_t d = {.bc = bc, .kind = WIN_DEPTHWISE, .cols = BDW_OW};
  d.rgroups = win_row_groups(ctx, bc->N * CB, bc->ah.out);
  bdw_hook(ctx, &d);
  int64_t ws[3] = {CB, T, c};
  KILN_RETURN_IF_ERROR(nn_const_f32(ctx, "wdw_blk", 3, ws, wp, &d.w));
  const int64_t bs[2] = {CB, c};
  KILN_RETURN_IF_ERROR(padded_bias(ctx, bc->M, 2, bs, &d.bias));
  return win_emit(kb, &d);
}

/* MaxPool (no Indices) and AveragePool on NCHWc. */
kiln_status_t nn_pool_blocked(kiln_lower_ctx_t* ctx, bool is_max) {
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  const char* op = is_max ? "MaxPool" : "AveragePool";
  const kiln_tensor_t *xt = ctx->in_tensor[0], *yt = ctx->out_tensor[0];
  if (!xt || !yt || xt->shape.rank != 4 || ctx->in_block[0] <= 0 || ctx->out_block[0] != ctx->in_block[0])
    return kiln_make_status(KILN_INTERNAL, "%s: the blocked layout takes 2-D pools in and out of NCHWc", op);
  int64_t ceil_mode = 0, cip = 0;
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "ceil_mode", 0, &ceil_mode));
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "count_include_pad", 0, &cip));
  bc_t bc;
  memset(&bc, 0, sizeof bc);
  bc.x = ctx->in[0], bc.y = ctx->out[0], bc.xb = bc.c = ctx->in_block[0];
  bc.N = xt->shape.dims[0], bc.C = bc.M = xt->shape.dims[1];
  nn_axis_t ax[2];
  KILN_RETURN_IF_ERROR(nn_window(ctx->node, op, 2, xt->shape.dims + 2, yt->shape.dims + 2, NULL, ceil_mode != 0, ax));
  bc.ah = ax[0], bc.aw = ax[1];
  if (kiln_shape_count(&yt->shape) == 0) return NULL;
  bdw_t d = {.bc = &bc, .kind = is_max ? WIN_MAX : WIN_AVG, .include_pad = cip != 0};
  return win_emit(&kb, &d);
}

kiln_status_t nn_conv_blocked(kiln_lower_ctx_t* ctx) {
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  const kiln_tensor_t *xt = ctx->in_tensor[0], *wt = ctx->in_tensor[1], *yt = ctx->out_tensor[0];
  if (!xt || !wt || !yt || xt->shape.rank != 4 || wt->shape.rank != 4 || yt->shape.rank != 4)
    return kiln_make_status(KILN_INTERNAL, "Conv: the blocked layout takes 2-D convolutions only");
  bc_t bc;
  memset(&bc, 0, sizeof bc);
  bc.x = ctx->in[0], bc.y = ctx->out[0];
  bc.xb = ctx->in_block ? ctx->in_block[0] : 0;
  bc.c = ctx->out_block[0];
  bc.N = xt->shape.dims[0], bc.C = xt->shape.dims[1], bc.M = wt->shape.dims[0];
  bc.Mp = (bc.M + bc.c - 1) / bc.c * bc.c;
  nn_axis_t ax[2];
  KILN_RETURN_IF_ERROR(nn_window(ctx->node, "Conv", 2, xt->shape.dims + 2, yt->shape.dims + 2, wt->shape.dims + 2,
                                 false, ax));
  bc.ah = ax[0], bc.aw = ax[1];
  bc.T = bc.ah.k * bc.aw.k;
  int64_t G = 1;
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "group", 1, &G));
  if (kiln_shape_count(&yt->shape) == 0) return NULL;
  if (G == 1) return conv_gemm_blocked(&kb, &bc);
  if (G == bc.C && bc.M == bc.C && wt->shape.dims[1] == 1 && bc.xb == bc.c) return conv_depthwise_blocked(&kb, &bc);
  return kiln_make_status(KILN_INTERNAL, "Conv: group %lld has no blocked kernel", (long long)G);
}

/* ---- GlobalAveragePool ----------------------------------------------------- */

/* Y[n][ch][0][0] (plain) = mean over the plane of blocked X: per (image,
 * block) a c-lane vector sums the plane, then the real lanes are stored. */
kiln_status_t nn_global_avgpool_blocked(kiln_lower_ctx_t* ctx) {
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  tir_ctx_t* t = kb.t;
  const tir_buffer_t *x = ctx->in[0], *y = ctx->out[0];
  const int64_t c = ctx->in_block[0];
  if (!x || !y || x->rank != 5 || x->shape[4] != c || y->rank != 4)
    return kiln_make_status(KILN_INTERNAL, "GlobalAveragePool: not a blocked input");
  const int64_t N = x->shape[0], CB = x->shape[1], C = y->shape[1], P = x->shape[2] * x->shape[3];
  if (N * C == 0) return NULL;
  const tir_buffer_t* acc = tir_buffer(t, "acc", KILN_DTYPE_F32, 1, &c, TIR_SCOPE_PRIVATE);
  tir_var_t* vnc = nn_var(&kb, "ncb");
  tir_var_t* vl0 = nn_var(&kb, "l");
  tir_var_t* vp = nn_var(&kb, "p");
  tir_var_t* vl1 = nn_var(&kb, "l");
  tir_var_t* vl2 = nn_var(&kb, "l");
  const tir_expr_t* n = nn_divc(&kb, nn_v(&kb, vnc), CB);
  const tir_expr_t* cb = nn_modc(&kb, nn_v(&kb, vnc), CB);
  const tir_stmt_t* zero = nn_for(&kb, vl0, c, tir_store(t, acc, NN_IDX(nn_v(&kb, vl0)), nn_f(&kb, 0.0)));
  nn_vectorize(&kb, vl0);
  const tir_expr_t* l1 = nn_v(&kb, vl1);
  const tir_expr_t* p = nn_v(&kb, vp);
  const tir_expr_t* xv = nn_ldf(&kb, x, NN_IDX(n, cb, nn_divc(&kb, p, x->shape[3]), nn_modc(&kb, p, x->shape[3]), l1));
  const tir_stmt_t* sum =
      nn_for(&kb, vp, P, nn_for(&kb, vl1, c, tir_store(t, acc, NN_IDX(l1), tir_add(t, tir_load(t, acc, NN_IDX(l1)), xv))));
  nn_vectorize(&kb, vl1);
  /* lanes of the block that are channels: min(c, C - cb*c) */
  const tir_expr_t* l2 = nn_v(&kb, vl2);
  const tir_expr_t* ch = nn_add(&kb, nn_mulc(&kb, cb, c), l2);
  const tir_expr_t* ok = tir_bin(t, TIR_LT, ch, nn_i(&kb, C));
  const tir_expr_t* v = tir_bin(t, TIR_DIV, tir_load(t, acc, NN_IDX(l2)), nn_f(&kb, (double)P));
  const tir_stmt_t* st = tir_if(t, ok, nn_stf(&kb, y, NN_IDX(n, nn_clamp(&kb, ch, 0, C - 1), nn_i(&kb, 0), nn_i(&kb, 0)), v), NULL);
  const tir_stmt_t* items[3] = {zero, sum, nn_for(&kb, vl2, c, st)};
  const tir_stmt_t* s = nn_for(&kb, vnc, N * CB, tir_alloc(t, acc, tir_seq(t, 3, items)));
  if (N * CB > 1 && N * CB * P * c >= 4096) nn_parallel(&kb, vnc);
  return nn_emit(&kb, s);
}

/* ---- reorders ------------------------------------------------------------------ */

kiln_status_t kiln_layout_emit_reorder(kiln_lower_ctx_t* ctx, const tir_buffer_t* src, int32_t sb,
                                       const tir_buffer_t* dst, int32_t db, const int64_t* dims) {
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  const int64_t N = dims[0], C = dims[1], H = dims[2], W = dims[3];
  if (N * C * H * W == 0) return NULL;
  tir_var_t* vo = nn_var(&kb, "nc");
  tir_var_t* vh = nn_var(&kb, "h");
  tir_var_t* vw = nn_var(&kb, "w");
  const tir_expr_t *h = nn_v(&kb, vh), *w = nn_v(&kb, vw);
  const tir_stmt_t* s;
  int64_t outer;
  if (db > 0 && sb == 0) {
    /* plain -> blocked: lanes past C repeat the last channel (never read) */
    const int64_t CB = (C + db - 1) / db;
    tir_var_t* vl = nn_var(&kb, "l");
    const tir_expr_t* o = nn_v(&kb, vo);
    const tir_expr_t *n = nn_divc(&kb, o, CB), *cb = nn_modc(&kb, o, CB), *l = nn_v(&kb, vl);
    const tir_expr_t* ch = nn_clamp(&kb, nn_add(&kb, nn_mulc(&kb, cb, db), l), 0, C - 1);
    s = tir_store(kb.t, dst, NN_IDX(n, cb, h, w, l), tir_load(kb.t, src, NN_IDX(n, ch, h, w)));
    s = nn_for(&kb, vl, db, s);
    outer = N * CB;
  } else if (sb > 0 && db == 0) {
    const tir_expr_t* o = nn_v(&kb, vo);
    const tir_expr_t *n = nn_divc(&kb, o, C), *ch = nn_modc(&kb, o, C);
    s = tir_store(kb.t, dst, NN_IDX(n, ch, h, w), tir_load(kb.t, src, NN_IDX(n, nn_divc(&kb, ch, sb), h, w, nn_modc(&kb, ch, sb))));
    outer = N * C;
  } else {
    return kiln_make_status(KILN_INTERNAL, "layout: no reorder from block %d to block %d", (int)sb, (int)db);
  }
  s = nn_for(&kb, vw, W, s);
  s = nn_for(&kb, vh, H, s);
  s = nn_for(&kb, vo, outer, s);
  if (outer > 1 && outer * H * W >= 4096) nn_parallel(&kb, vo);
  return nn_emit(&kb, s);
}
