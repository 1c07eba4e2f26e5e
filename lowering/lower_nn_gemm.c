/* The GEMM generator (shared by MatMul, Gemm and Conv) and the MatMul and
 * Gemm lowerings.
 *
 * Kernel shape (one kernel per GEMM; a PARALLEL chunk loop outermost):
 *
 *   for chunk (PARALLEL over threads: M tiles, N tiles or batches)
 *    for b in batch
 *     for jc (N blocks of nc_tiles tiles: the R block kc x nc stays in L2)
 *      for pc (K blocks of kc)
 *       for mt (M tiles of the chunk)
 *        [pack the mr x kc micro-panel of L into a per-chunk slot]
 *        for nt (N tiles of the block)
 *         alloc acc[mr][nr] PRIVATE
 *          acc = pc == 0 ? init : C                 (i UNROLLED, j VECTORIZED)
 *          for k in kc: [for taps:] for i: for j: acc[i][j] += L[i][k] * R[k][j]
 *          C = pc == last ? epi(acc) : acc
 *
 * The L micro-panel (mr x kc floats, ~14 KiB) stays in L1 while the loop
 * over N tiles streams the R panels (kc x nr, contiguous when packed) from
 * L2; the inner loop is mr*nr/16 independent FMA chains on zmm registers
 * with one broadcast per row and nr/16 vector loads per k (checked in the
 * generated assembly: vbroadcastss + vfmadd231ps zmm only). Tiles at the M
 * and N edges are generated as separate, exactly sized tiles (their j loop
 * cut into 16/8/4-lane pieces), so no guard ever runs inside a tile. Chunks
 * get as equal numbers of tiles as whole tiles allow, the partial tile the
 * last chunk's last (balanced_chunks: branches on the chunk only, so every
 * access index stays provably in bounds); with overlap_m every chunk runs
 * one loop of the same tile, the last ones clamped to end at M.
 *
 * With n_outer (the implicit GEMM whose R is the weights) the L panels of
 * all M tiles of a K block are packed first and N is swept outside M, so
 * each weight panel is read once. Packed constants are laid out K-block
 * major when K is blocked, so one K block's panels are one sequential run
 * in memory (nn_pack_const).
 *
 * The int8 GEMM (idot: QLinearConv, lower_nn_conv.c) is the same nest on
 * i32 elements holding two i16 values, i32 accumulators and
 * acc = dot2_i16(acc, L, R), printed as vpmaddwd + vpaddd (one asm block so
 * the 6 x 16 tile's accumulators stay in registers) or vpdpwssd.
 *
 * Heuristics (nn_gemm_tiles), in units of the machine's f32 vector (L
 * lanes, R registers; nn_simd, detected at run time): nr = 2L when
 * N >= 2L, L when N >= L, else N; mr = the balanced split of M into tiles
 * of at most (R - 4)/(nr/L) rows (capped at 14), so the mr x nr/L
 * accumulators, the nr/L loads of R and the broadcast of L stay in
 * registers; kc = K up to 512, else K split into equal blocks of about
 * 320; nc = as many N tiles as keep kc*nc floats under 1 MiB (made a
 * divisor of the tile count where one above half of it exists: even_nblock). With AVX-512
 * (16 lanes, 32 zmm) that is the 14 x 32 tile of 28 zmm accumulators; with
 * AVX2 (8 lanes, 16 ymm) the 6 x 16 tile of 12 ymm. The 14 x 32 tile on
 * AVX2 needs 56 ymm accumulators and spills every FMA to the stack
 * (ResNet-18's 3x3 convs at 5-6.5 GFLOP/s per core on an AVX2 EPYC, 50-68
 * with 6 x 16 and 8-lane vectors). GPU targets keep the AVX-512 figures: their templates
 * re-derive the grid from them (template_conv.c), and B is packed in their
 * 32-wide panels (the layout the GEMM templates read). A GEMM printed for
 * a GPU with a loop limit (one no template takes: a fused epilogue)
 * computes a GPU tile per invocation instead (per_tile): at most 4 x 8
 * outputs, inside one packed panel. With the 13-14 x 32 register tile
 * there (a 416-float private accumulator, the row loop unrolled, in fp16
 * each operand converted from half inside it) lavapipe's LLVM spent
 * 130-326 s compiling one such shader (bert's linear1 with its bias and
 * erf GELU, gpt2's qkv, gru's input projections); with 4 x 8, 1.5-5.5 s for
 * the whole model (and 4 x 8 ran faster than 4 x 4 there: bert 1.1-1.2x,
 * lstm 1.04x).
 * Parallel split: batches when they divide evenly among the threads (or
 * are many), else the dimension with more tiles; none under ~0.2 MFLOP.
 * Measured (2 threads, AVX-512 Xeon): 1024^3 ~360 GFLOP/s, on par with
 * OpenBLAS in the same run, constant or run-time B (the latter adds a pack
 * kernel of ~0.2 ms).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lowering/lower_nn_impl.h"
#include "lowering/plan.h"

#define NN_L2_BUDGET (1 << 20)

/* The vector unit the tiles are for: this CPU's for the CPU target (its C
 * is compiled here, at run time); AVX-512's for GPU targets, whose
 * templates re-derive the grid from those figures (template_conv.c). */
void nn_simd(const kiln_lower_ctx_t* ctx, int64_t* lanes, int64_t* regs) {
  kiln_cpu_simd_t v = {16, 32};
  if (ctx && ctx->target == KILN_TARGET_CLASS_CPU) v = kiln_cpu_simd();
  *lanes = v.lanes, *regs = v.regs;
}

void nn_gemm_tiles(const kiln_lower_ctx_t* ctx, nn_gemm_t* g) {
  int64_t N = g->N, M = g->M, K = g->K;
  int64_t lanes, regs;
  nn_simd(ctx, &lanes, &regs);
  g->nr = N >= 2 * lanes ? 2 * lanes : N >= lanes ? lanes : (N > 0 ? N : 1);
  int64_t vecs = (g->nr + lanes - 1) / lanes;
  int64_t mr_max = (regs - 4) / vecs;
  if (mr_max > 14) mr_max = 14;
  if (mr_max < 1) mr_max = 1;
  if (M <= 0) {
    g->mr = 1;
  } else {
    int64_t tiles = (M + mr_max - 1) / mr_max;
    g->mr = (M + tiles - 1) / tiles;
  }
  int64_t T = g->taps > 0 ? g->taps : 1, KO = K / T;
  /* Vulkan plans (element-wise lanes: kiln_target_t.ew_lanes) take K whole:
   * their conv and GEMM templates lay the weights out over all of K and
   * loop over it in one pass, and a K-blocked kernel, which reloads its
   * partial sums, takes no fused epilogue (MobileNetV2's 576 -> 96 14x14
   * project convs left their residual Adds as kernels of their own) */
  const bool k_whole = ctx && ctx->target == KILN_TARGET_CLASS_GPU && ctx->ew_lanes > 1;
  if (!g->reload || K <= 512 || k_whole) {
    g->kc = KO > 0 ? KO : 1;
  } else {
    int64_t nk = (K + 319) / 320;
    g->kc = (KO + nk - 1) / nk;
  }
  /* a tuner's knobs: f32 GEMMs (the int8 one's tiles follow its own rules) */
  if (ctx && ctx->target == KILN_TARGET_CLASS_CPU && ctx->plan && ctx->plan->gemm_hook && !g->idot) {
    kiln_gemm_problem_t p = {ctx->node ? ctx->node->op_type : "", g->batch, M, N, K, T, g->reload && K > 0,
                             g->n_outer, g->L.load != NULL, g->L.lload != NULL, g->R.packed != NULL,
                             g->nr_max, (int32_t)lanes, (int32_t)regs, ctx->threads, 0, 0, {0}, 0};
    kiln_gemm_knobs_t k = {g->mr, g->nr, g->kc, KILN_GEMM_PAR_AUTO, 0, 0, 0, 0};
    ctx->plan->gemm_hook(ctx->plan->gemm_hook_user, ctx->node_index, &p, &k);
    /* clamped to what the generator handles: any tile at the edges is
     * generated exactly sized, so only the ranges matter */
    const int64_t nmax = g->nr_max > 0 && g->nr_max < N ? g->nr_max : N;
    g->mr = k.mr < 1 ? 1 : k.mr > (M > 0 ? M : 1) ? (M > 0 ? M : 1) : k.mr;
    g->nr = k.nr < 1 ? 1 : k.nr > (nmax > 0 ? nmax : 1) ? (nmax > 0 ? nmax : 1) : k.nr;
    if (p.k_blocks) g->kc = k.kc < 1 ? 1 : k.kc > KO ? (KO > 0 ? KO : 1) : k.kc;
    g->par = k.par >= KILN_GEMM_PAR_AUTO && k.par <= KILN_GEMM_PAR_N ? k.par : KILN_GEMM_PAR_AUTO;
  }
  int64_t nct = NN_L2_BUDGET / (int64_t)sizeof(float) / (g->kc * T * g->nr);
  g->nc_tiles = nct < 1 ? 1 : nct;
}

/* ---- generator ------------------------------------------------------------ */

typedef struct gen_s {
  nn_kb_t* kb;
  nn_gemm_t* g;
  const tir_expr_t* b;      /* batch index */
  const tir_expr_t* chunk;  /* slot index for the L pack */
  const tir_buffer_t* slot; /* [chunks][tiles][kc][mr] or NULL */
  const tir_expr_t* stile;  /* slot tile being packed / read */
  const tir_expr_t* kblk;   /* K block being generated */
  const tir_expr_t* sblk;   /* sparse: the non-zero block the k loop is in */
  const tir_buffer_t* psum; /* [chunks][group tiles + 1][mr][N] partial sums, or NULL */
  const tir_expr_t* pm;     /* the tile's index in its M group (psum) */
  int64_t mgroup;           /* M tiles per group (psum) */
  int64_t mt_full, mrem, nt_full, nrem;
  int64_t nkb_full, ktail;
  bool overlap;  /* g->overlap_m, where it applies */
  bool mclamp;   /* the tiles being built start at min(mt * mr, M - mr) (overlap_m) */
  /* GPU tile (per_tile): rows and columns of one invocation, divisors of
   * mr (where L is packed) and nr (where R is), so a tile lies in one
   * packed panel; 0: the register tile (mr, nr) */
  int64_t gm, gn;
} gen_t;

/* The tile's rows and columns: the GPU tile's where one is set. */
static int64_t tmr(const gen_t* e) { return e->gm > 0 ? e->gm : e->g->mr; }
static int64_t tnr(const gen_t* e) { return e->gn > 0 ? e->gn : e->g->nr; }

/* A packed operand's panel and offset in it of tile |t|'s element |i|
 * (panels of |w|; tiles of |tw|, a divisor of w). */
static void panel_of(nn_kb_t* kb, const tir_expr_t* t, int64_t tw, int64_t w, const tir_expr_t* i,
                     const tir_expr_t** panel, const tir_expr_t** off) {
  if (tw == w) {
    *panel = t, *off = i;
    return;
  }
  const int64_t q = w / tw;
  *panel = nn_divc(kb, t, q);
  *off = nn_add(kb, nn_mulc(kb, nn_modc(kb, t, q), tw), i);
}

/* K block position: first/last are 1 (always), 0 (never) or -1 (the
 * condition expression decides). */
typedef struct kpos_s {
  int first, last;
  const tir_expr_t* fcond;
  const tir_expr_t* lcond;
} kpos_t;

static const tir_expr_t* pbatch(gen_t* e, const nn_operand_t* op) {
  if (op->bmap) return op->bmap(e->kb, e->g, e->b);
  return op->packed->shape[0] == 1 ? nn_i(e->kb, 0) : e->b;
}

/* A packed constant's element as the GEMM reads it (int8 pairs widened). */
static const tir_expr_t* packed_elem(gen_t* e, const tir_expr_t* ld) {
  return e->g->w8 ? tir_call(e->kb->t, TIR_WIDEN_I8X2, 1, ld, NULL, NULL) : ld;
}

/* The first row of M tile |mt|: the last tile of an overlap_m loop starts
 * mr rows before the end (overlapping the one before it). */
static const tir_expr_t* tile_row0(gen_t* e, const tir_expr_t* mt) {
  const tir_expr_t* m0 = nn_mulc(e->kb, mt, tmr(e));
  return e->mclamp ? tir_bin(e->kb->t, TIR_MIN, m0, nn_i(e->kb, e->g->M - e->g->mr)) : m0;
}

/* Element |i| of tile |t| of the packed operand |op| (tiles of |tw| inside
 * its panels of |w|): K block and k offset |krel| where it is packed in K
 * blocks (rank 5), else the absolute k |kabs|. */
static const tir_expr_t* packed_at(gen_t* e, const nn_operand_t* op, const tir_expr_t* t, int64_t tw, int64_t w,
                                   const tir_expr_t* i, const tir_expr_t* kabs, const tir_expr_t* krel) {
  nn_kb_t* kb = e->kb;
  const tir_expr_t *pt, *pi;
  panel_of(kb, t, tw, w, i, &pt, &pi);
  if (op->packed->rank == 5)
    return packed_elem(e, tir_load(kb->t, op->packed, NN_IDX(pbatch(e, op), e->kblk, pt, krel, pi)));
  return packed_elem(e, tir_load(kb->t, op->packed, NN_IDX(pbatch(e, op), pt, kabs, pi)));
}

static const tir_expr_t* l_elem(gen_t* e, const tir_expr_t* mt, const tir_expr_t* i,
                                const tir_expr_t* kabs, const tir_expr_t* krel,
                                const tir_expr_t* kout, int32_t grp, const tir_expr_t* const* kv) {
  nn_kb_t* kb = e->kb;
  const nn_gemm_t* g = e->g;
  /* krel is the k offset inside the block: the k loop runs over its kr */
  if (g->sparse) return tir_load(kb->t, g->sparse->vals, NN_IDX(e->sblk, krel, i));
  if (e->slot) return tir_load(kb->t, e->slot, NN_IDX(e->chunk, e->stile, krel, i));
  if (g->L.packed) return packed_at(e, &g->L, mt, tmr(e), g->mr, i, kabs, krel);
  const tir_expr_t* m = nn_add(kb, tile_row0(e, mt), i);
  if (g->L.lload) return g->L.lload(kb, g, e->b, kout, grp, kv, m);
  return g->L.load(kb, g, e->b, m, kabs);
}

static const tir_expr_t* r_elem(gen_t* e, const tir_expr_t* nt, const tir_expr_t* j,
                                const tir_expr_t* kout, int32_t grp, const tir_expr_t* const* kv,
                                const tir_expr_t* kabs, const tir_expr_t* krel) {
  nn_kb_t* kb = e->kb;
  const nn_gemm_t* g = e->g;
  if (g->R.packed) return packed_at(e, &g->R, nt, tnr(e), g->nr, j, kabs, krel);
  return g->R.rload(kb, g, e->b, kout, grp, kv, nn_add(kb, nn_mulc(kb, nt, tnr(e)), j));
}

/* for i (UNROLLED) for j (VECTORIZED when the width allows) */
typedef const tir_stmt_t* (*ij_body_fn)(gen_t* e, void* u, const tir_expr_t* i,
                                        const tir_expr_t* j);

/* The j range is cut into pieces of 16k, 8 and 4 lanes (the printer gives
 * each VECTORIZED loop the widest vector dividing its extent, so a 24-wide
 * tile becomes one zmm and one ymm instead of six xmm), and a scalar rest. */
static const tir_stmt_t* ij_nest(gen_t* e, int64_t mr, int64_t nr, ij_body_fn fn, void* u) {
  nn_kb_t* kb = e->kb;
  tir_var_t* vi = nn_var(kb, "i");
  const tir_expr_t* i = nn_v(kb, vi);
  const tir_stmt_t* parts[4] = {NULL, NULL, NULL, NULL};
  int64_t j0 = 0;
  if (e->g->jblock > 0 && nr % e->g->jblock == 0 && nr / e->g->jblock <= 4) {
    /* one piece per block of the caller's layout */
    for (int p = 0; j0 < nr; ++p, j0 += e->g->jblock) {
      tir_var_t* vj = nn_var(kb, "j");
      parts[p] = nn_for(kb, vj, e->g->jblock, fn(e, u, i, nn_addc(kb, nn_v(kb, vj), j0)));
      nn_vectorize(kb, vj);
    }
    j0 = nr;
  }
  for (int p = 0; p < 4 && j0 < nr; ++p) {
    int64_t w = p == 0 ? (nr / 16) * 16 : p == 1 ? ((nr - j0) / 8) * 8
                : p == 2 ? ((nr - j0) / 4) * 4 : nr - j0;
    if (w <= 0) continue;
    tir_var_t* vj = nn_var(kb, "j");
    parts[p] = nn_for(kb, vj, w, fn(e, u, i, nn_addc(kb, nn_v(kb, vj), j0)));
    if (p < 3) nn_vectorize(kb, vj);
    j0 += w;
  }
  const tir_stmt_t* s = nn_for(kb, vi, mr, tir_seq(kb->t, 4, parts));
  if (mr > 1 && mr <= 16) nn_unroll(kb, vi);
  return s;
}

typedef struct tile_s {
  const tir_buffer_t* acc;
  const tir_expr_t *mt, *nt, *k0, *kv; /* k0, kv in k-loop (K / taps) units */
  int32_t grp;                         /* tap group */
  const tir_expr_t* tv[3];             /* its loop indices */
  const tir_expr_t* tap;               /* tap index */
  int mode; /* init: 0 init, 1 reload; store: 0 raw, 1 epilogue */
} tile_t;

static const tir_expr_t* tile_m(gen_t* e, tile_t* t, const tir_expr_t* i) {
  return nn_add(e->kb, tile_row0(e, t->mt), i);
}
static const tir_expr_t* tile_n(gen_t* e, tile_t* t, const tir_expr_t* j) {
  return nn_add(e->kb, nn_mulc(e->kb, t->nt, tnr(e)), j);
}

static const tir_stmt_t* init_body(gen_t* e, void* u, const tir_expr_t* i, const tir_expr_t* j) {
  tile_t* t = u;
  nn_kb_t* kb = e->kb;
  const nn_gemm_t* g = e->g;
  const tir_expr_t* v;
  if (t->mode == 1 && e->psum) {
    v = tir_load(kb->t, e->psum, NN_IDX(e->chunk, e->pm, i, tile_n(e, t, j)));
  } else if (t->mode == 1) {
    v = g->reload(kb, g, e->b, tile_m(e, t, i), tile_n(e, t, j));
  } else if (g->init) {
    v = g->init(kb, g, e->b, tile_m(e, t, i), tile_n(e, t, j));
  } else {
    v = g->idot ? tir_const(kb->t, KILN_DTYPE_I32, 0) : nn_f(kb, 0.0);
  }
  return tir_store(kb->t, t->acc, NN_IDX(i, j), v);
}

static const tir_expr_t* kflat(gen_t* e, const tir_expr_t* k, const tir_expr_t* tap) {
  int64_t T = e->g->taps > 0 ? e->g->taps : 1;
  /* taps outside the k loop: packed K is tap-major, so the k loop of one
   * tap reads its weights as one sequential run */
  if (e->g->taps_outer) return nn_add(e->kb, nn_mulc(e->kb, tap, e->g->kc), k);
  return nn_add(e->kb, nn_mulc(e->kb, k, T), tap);
}

static const tir_stmt_t* fma_body(gen_t* e, void* u, const tir_expr_t* i, const tir_expr_t* j) {
  tile_t* t = u;
  nn_kb_t* kb = e->kb;
  const tir_expr_t* kout = nn_add(kb, t->k0, t->kv);
  const tir_expr_t* kabs = kflat(e, kout, t->tap);
  const tir_expr_t* a = tir_load(kb->t, t->acc, NN_IDX(i, j));
  const tir_expr_t* krel = kflat(e, t->kv, t->tap);
  const tir_expr_t* l = l_elem(e, t->mt, i, kabs, krel, kout, t->grp, t->tv);
  const tir_expr_t* r = r_elem(e, t->nt, j, kout, t->grp, t->tv, kabs, krel);
  if (e->g->idot)
    return tir_store(kb->t, t->acc, NN_IDX(i, j), tir_call(kb->t, e->g->dot4 ? TIR_DOT4_U8I8 : TIR_DOT2_I16, 3, a, l, r));
  /* one rounding per step, spelled as such: every tile, whatever its
   * width, sums a column in the same order with the same roundings */
  return tir_store(kb->t, t->acc, NN_IDX(i, j), tir_call(kb->t, TIR_FMA, 3, l, r, a));
}

static const tir_stmt_t* store_body(gen_t* e, void* u, const tir_expr_t* i, const tir_expr_t* j) {
  tile_t* t = u;
  nn_kb_t* kb = e->kb;
  const nn_gemm_t* g = e->g;
  const tir_expr_t* m = tile_m(e, t, i);
  const tir_expr_t* n = tile_n(e, t, j);
  const tir_expr_t* v = tir_load(kb->t, t->acc, NN_IDX(i, j));
  if (t->mode == 0 && e->psum) return tir_store(kb->t, e->psum, NN_IDX(e->chunk, e->pm, i, n), v);
  if (t->mode == 1 && g->epi) v = g->epi(kb, g, e->b, m, n, v);
  return g->store(kb, g, e->b, m, n, v);
}

/* Block-sparse L: the first k-loop unit of the tile's current non-zero
 * block (the block loop's variable goes to *out_var, its trip count, the
 * tile's block count read from ptr, to *out_n; e->sblk becomes the block's
 * index). Every index read from the weights is clamped into its range, so
 * the accesses stay provably in bounds whatever the constants hold. */
static const tir_expr_t* sparse_k0(gen_t* e, const tir_expr_t* mt, tir_var_t** out_var, const tir_expr_t** out_n) {
  nn_kb_t* kb = e->kb;
  const nn_sparse_t* sp = e->g->sparse;
  const tir_expr_t* b = pbatch(e, &e->g->L);
  const tir_expr_t* p0 = tir_cast(kb->t, KILN_DTYPE_I64, tir_load(kb->t, sp->ptr, NN_IDX(b, mt)));
  const tir_expr_t* p1 = tir_cast(kb->t, KILN_DTYPE_I64, tir_load(kb->t, sp->ptr, NN_IDX(b, nn_addc(kb, mt, 1))));
  *out_n = nn_clamp(kb, tir_bin(kb->t, TIR_SUB, p1, p0), 0, sp->max_blocks);
  *out_var = nn_var(kb, "blk");
  const int64_t last = sp->nnzb > 0 ? sp->nnzb - 1 : 0;
  e->sblk = nn_clamp(kb, nn_add(kb, p0, nn_v(kb, *out_var)), 0, last);
  const int64_t KO = e->g->K / (e->g->taps > 0 ? e->g->taps : 1);
  return nn_clamp(kb, tir_cast(kb->t, KILN_DTYPE_I64, tir_load(kb->t, sp->kidx, NN_IDX(e->sblk))), 0, KO - sp->kr);
}

/* Prefetches of the next N tile's R panel at this k step (g->prefetch_r):
 * one per cache line of its nr-wide row, the tile index clamped to the
 * last (whose own row it then re-touches). Measured on Zen 5, 2 threads,
 * ResNet-50's 1024 -> 256 1x1 conv at 14x14 alone with its 1 MB of
 * weights rotated through 48 copies (so they come from memory, as in the
 * model): 0.226 -> 0.210 ms; with the weights in cache 0.195 -> 0.198. */
static const tir_stmt_t* r_prefetch(gen_t* e, const tile_t* t, int64_t nr) {
  nn_kb_t* kb = e->kb;
  const nn_gemm_t* g = e->g;
  const tir_buffer_t* R = g->R.packed;
  if (!R || (R->rank != 4 && R->rank != 5) || g->sparse || e->gn > 0) return NULL;
  const int64_t tiles = R->shape[R->rank - 3], esz = (int64_t)kiln_dtype_size(R->dtype);
  if (tiles < 2 || esz <= 0) return NULL;
  const int64_t line = 64 / esz; /* elements per 64-byte line */
  const tir_expr_t* nt1 = nn_clamp(kb, nn_addc(kb, t->nt, 1), 0, tiles - 1);
  const tir_expr_t* kk = R->rank == 5 ? kflat(e, t->kv, t->tap) : kflat(e, nn_add(kb, t->k0, t->kv), t->tap);
  const tir_stmt_t* s = NULL;
  for (int64_t j0 = 0; j0 < nr; j0 += line) {
    const tir_expr_t* j = nn_i(kb, j0);
    s = tir_seq2(kb->t, s, R->rank == 5 ? tir_prefetch(kb->t, R, NN_IDX(pbatch(e, &g->R), e->kblk, nt1, kk, j))
                                          : tir_prefetch(kb->t, R, NN_IDX(pbatch(e, &g->R), nt1, kk, j)));
  }
  return s;
}

/* One mr x nr register tile over K range [k0, k0 + kl) (block-sparse L:
 * over the tile's non-zero blocks instead). */
static const tir_stmt_t* tile(gen_t* e, const tir_expr_t* mt, int64_t mr, const tir_expr_t* nt,
                              int64_t nr, const tir_expr_t* k0, int64_t kl, const kpos_t* kp) {
  nn_kb_t* kb = e->kb;
  int64_t shape[2] = {mr, nr};
  const kiln_dtype_t at = e->g->idot ? KILN_DTYPE_I32 : KILN_DTYPE_F32;
  tile_t t = {.acc = tir_buffer(kb->t, "acc", at, 2, shape, TIR_SCOPE_PRIVATE),
              .mt = mt,
              .nt = nt,
              .k0 = k0};
  /* init */
  const tir_stmt_t* init;
  t.mode = 0;
  const tir_stmt_t* s0 = kp->first != 0 ? ij_nest(e, mr, nr, init_body, &t) : NULL;
  t.mode = 1;
  const tir_stmt_t* s1 = kp->first != 1 ? ij_nest(e, mr, nr, init_body, &t) : NULL;
  init = kp->first == 1 ? s0 : kp->first == 0 ? s1 : tir_if(kb->t, kp->fcond, s0, s1);
  /* k loop */
  tir_var_t* vk = nn_var(kb, "k");
  t.kv = nn_v(kb, vk);
  const nn_sparse_t* sp = e->g->sparse;
  tir_var_t* vblk = NULL;
  const tir_expr_t* nblk = NULL;
  if (sp) t.k0 = sparse_k0(e, mt, &vblk, &nblk);
  const tir_stmt_t* taps = NULL;
  static const nn_tap_group_t one = {{1, 1, 1}, 0, {0, 0, 0}};
  const int32_t ng = e->g->n_groups > 0 ? e->g->n_groups : 1;
  /* Taps outside the k loop (the caller's L is read in place): the k loop
   * then runs over channels only, cut into ksplit-wide pieces where L's
   * layout has channel blocks, so every load of its body is a constant
   * offset from pointers the compiler hoists (a k / c, k % c index left in
   * the innermost loop costs two integer ops per broadcast, and nine taps
   * unrolled inside it spill the 6 x 16 AVX2 tile: 72 -> 92 GFLOP/s on a
   * 64-channel 3x3 conv at 56x56, 1 thread). */
  const bool touter = e->g->taps_outer && !sp;
  const int64_t ks = e->g->ksplit;
  const bool split = touter && ks > 1 && kl % ks == 0;
  tir_var_t* vkb = NULL;
  if (split) {
    vkb = nn_var(kb, "kb");
    t.kv = nn_add(kb, nn_mulc(kb, nn_v(kb, vkb), ks), nn_v(kb, vk));
  }
  for (t.grp = 0; t.grp < ng; ++t.grp) {
    const nn_tap_group_t* tg = e->g->n_groups > 0 ? &e->g->groups[t.grp] : &one;
    tir_var_t* tv[3] = {NULL, NULL, NULL};
    t.tap = nn_i(kb, tg->tbase);
    for (int d = 0; d < 3; ++d) {
      if (tg->ext[d] > 1) {
        tv[d] = nn_var(kb, d == 0 ? "td" : d == 1 ? "th" : "tw");
        t.tv[d] = nn_v(kb, tv[d]);
        t.tap = nn_add(kb, t.tap, nn_mulc(kb, t.tv[d], tg->tstr[d]));
      } else {
        t.tv[d] = nn_i(kb, 0);
      }
    }
    const tir_stmt_t* s = ij_nest(e, mr, nr, fma_body, &t);
    if (touter && e->g->prefetch_r) s = tir_seq2(kb->t, r_prefetch(e, &t, nr), s);
    if (split) s = nn_for(kb, vkb, kl / ks, nn_for(kb, vk, ks, s));
    else if (touter) s = nn_for(kb, vk, kl, s);
    for (int d = 2; d >= 0; --d)
      if (tv[d]) s = nn_for(kb, tv[d], tg->ext[d], s);
    taps = tir_seq2(kb->t, taps, s);
    if (touter && t.grp + 1 < ng) {
      /* each group's loops get their own variables */
      vk = nn_var(kb, "k");
      vkb = split ? nn_var(kb, "kb") : NULL;
      t.kv = split ? nn_add(kb, nn_mulc(kb, nn_v(kb, vkb), ks), nn_v(kb, vk)) : nn_v(kb, vk);
    }
  }
  const tir_stmt_t* body = touter ? taps : nn_for(kb, vk, sp ? sp->kr : kl, taps);
  if (sp) body = tir_for_dyn(kb->t, vblk, sp->max_blocks, nblk, TIR_LOOP_SERIAL, body);
  /* store */
  t.mode = 1;
  const tir_stmt_t* w1 = kp->last != 0 ? ij_nest(e, mr, nr, store_body, &t) : NULL;
  t.mode = 0;
  const tir_stmt_t* w0 = kp->last != 1 ? ij_nest(e, mr, nr, store_body, &t) : NULL;
  const tir_stmt_t* store =
      kp->last == 1 ? w1 : kp->last == 0 ? w0 : tir_if(kb->t, kp->lcond, w1, w0);
  const tir_stmt_t* items[3] = {init, body, store};
  return tir_alloc(kb->t, t.acc, tir_seq(kb->t, 3, items));
}

/* Packs rows [mt*MR, mt*MR + mr) x K range [k0, k0+kl) (k-loop units) of L
 * into the slot. */
static const tir_stmt_t* pack_slot(gen_t* e, const tir_expr_t* mt, int64_t mr,
                                   const tir_expr_t* k0u, int64_t klu) {
  nn_kb_t* kb = e->kb;
  const nn_gemm_t* g = e->g;
  int64_t T = g->taps > 0 ? g->taps : 1;
  if (g->L.lload) {
    /* Implicit GEMM: gather the taps of every row into the panel (an
     * im2col of one micro-panel, reused by all N tiles of the chunk). */
    static const nn_tap_group_t one = {{1, 1, 1}, 0, {0, 0, 0}};
    tir_var_t* vk = nn_var(kb, "pk");
    const tir_expr_t* k = nn_v(kb, vk);
    const tir_expr_t* kout = nn_add(kb, k0u, k);
    const tir_stmt_t* body = NULL;
    const int32_t ng = g->n_groups > 0 ? g->n_groups : 1;
    for (int32_t grp = 0; grp < ng; ++grp) {
      const nn_tap_group_t* tg = g->n_groups > 0 ? &g->groups[grp] : &one;
      tir_var_t* tv[3] = {NULL, NULL, NULL};
      const tir_expr_t* kv[3];
      const tir_expr_t* tap = nn_i(kb, tg->tbase);
      for (int d = 0; d < 3; ++d) {
        if (tg->ext[d] > 1) {
          tv[d] = nn_var(kb, d == 0 ? "pd" : d == 1 ? "ph" : "pw");
          kv[d] = nn_v(kb, tv[d]);
          tap = nn_add(kb, tap, nn_mulc(kb, kv[d], tg->tstr[d]));
        } else {
          kv[d] = nn_i(kb, 0);
        }
      }
      tir_var_t* vi = nn_var(kb, "pi");
      const tir_expr_t* i = nn_v(kb, vi);
      const tir_expr_t* m = nn_add(kb, nn_mulc(kb, mt, g->mr), i);
      const tir_stmt_t* s =
          tir_store(kb->t, e->slot,
                    NN_IDX(e->chunk, e->stile, nn_add(kb, nn_mulc(kb, k, T), tap), i),
                    g->L.lload(kb, g, e->b, kout, grp, kv, m));
      s = nn_for(kb, vi, mr, s);
      for (int d = 2; d >= 0; --d)
        if (tv[d]) s = nn_for(kb, tv[d], tg->ext[d], s);
      body = tir_seq2(kb->t, body, s);
    }
    return nn_for(kb, vk, klu, body);
  }
  const tir_expr_t* k0 = nn_mulc(kb, k0u, T);
  int64_t kl = klu * T;
  tir_var_t* vi = nn_var(kb, "pi");
  tir_var_t* vk = nn_var(kb, "pk");
  const tir_expr_t* i = nn_v(kb, vi);
  const tir_expr_t* k = nn_v(kb, vk);
  const tir_expr_t* m = nn_add(kb, nn_mulc(kb, mt, g->mr), i);
  const tir_stmt_t* s = tir_store(kb->t, e->slot, NN_IDX(e->chunk, e->stile, k, i),
                                  g->L.load(kb, g, e->b, m, nn_add(kb, k0, k)));
  return nn_for(kb, vi, mr, nn_for(kb, vk, kl, s));
}

/* The tiles of one K block: M tiles [mfirst, mfirst+mcnt) (+ the partial
 * M tile when mpart) x N tiles [nfirst, nfirst+ncnt) (+ partial when npart). */
static const tir_stmt_t* kbody(gen_t* e, const tir_expr_t* mfirst, int64_t mcnt, bool mpart,
                               const tir_expr_t* nfirst, int64_t ncnt, bool npart,
                               const tir_expr_t* k0, int64_t kl, const kpos_t* kp) {
  nn_kb_t* kb = e->kb;
  const nn_gemm_t* g = e->g;
  if (g->n_outer) {
    /* Pack every M tile's panel of this K block, then sweep N outermost:
     * each R panel is read once (from memory when R is the weights) and
     * reused by all M tiles while it sits in L1. */
    const tir_stmt_t* packs = NULL;
    if (mcnt > 0) {
      tir_var_t* vm = nn_var(kb, "mt");
      e->stile = nn_v(kb, vm);
      packs = nn_for(kb, vm, mcnt, pack_slot(e, nn_add(kb, mfirst, e->stile), g->mr, k0, kl));
    }
    if (mpart) {
      e->stile = nn_i(kb, mcnt);
      packs = tir_seq2(kb->t, packs, pack_slot(e, nn_i(kb, e->mt_full), e->mrem, k0, kl));
    }
    const tir_stmt_t* sweep = NULL;
    for (int np = 0; np < 2; ++np) {
      if (np ? !npart : ncnt <= 0) continue;
      tir_var_t* vn = np ? NULL : nn_var(kb, "nt");
      const tir_expr_t* nt = np ? nn_i(kb, e->nt_full) : nn_add(kb, nfirst, nn_v(kb, vn));
      int64_t nr = np ? e->nrem : g->nr;
      const tir_stmt_t* col = NULL;
      if (mcnt > 0) {
        tir_var_t* vm = nn_var(kb, "mt");
        e->stile = nn_v(kb, vm);
        col = nn_for(kb, vm, mcnt, tile(e, nn_add(kb, mfirst, e->stile), g->mr, nt, nr, k0, kl, kp));
      }
      if (mpart) {
        e->stile = nn_i(kb, mcnt);
        col = tir_seq2(kb->t, col, tile(e, nn_i(kb, e->mt_full), e->mrem, nt, nr, k0, kl, kp));
      }
      sweep = tir_seq2(kb->t, sweep, np ? col : nn_for(kb, vn, ncnt, col));
    }
    return tir_seq2(kb->t, packs, sweep);
  }
  e->stile = nn_i(kb, 0);
  /* overlap_m: the partial tile is the loop's last full one, clamped */
  e->mclamp = e->overlap && mpart;
  if (e->mclamp) {
    mcnt += 1;
    mpart = false;
  }
  const tir_stmt_t* out[2] = {NULL, NULL};
  for (int part = 0; part < 2; ++part) {
    int64_t mr = part ? e->mrem : tmr(e);
    if (part ? !mpart : mcnt <= 0) continue;
    tir_var_t* vm = part ? NULL : nn_var(kb, "mt");
    const tir_expr_t* mt = part ? nn_i(kb, e->mt_full) : nn_add(kb, mfirst, nn_v(kb, vm));
    e->pm = part ? nn_i(kb, mcnt) : nn_v(kb, vm);
    const tir_stmt_t* items[3] = {NULL, NULL, NULL};
    if (e->slot) items[0] = pack_slot(e, mt, mr, k0, kl);
    if (ncnt > 0) {
      tir_var_t* vn = nn_var(kb, "nt");
      items[1] = nn_for(kb, vn, ncnt,
                        tile(e, mt, mr, nn_add(kb, nfirst, nn_v(kb, vn)), tnr(e), k0, kl, kp));
    }
    if (npart) items[2] = tile(e, mt, mr, nn_i(kb, e->nt_full), e->nrem, k0, kl, kp);
    const tir_stmt_t* s = tir_seq(kb->t, 3, items);
    out[part] = part ? s : nn_for(kb, vm, mcnt, s);
  }
  e->mclamp = false;
  return tir_seq(kb->t, 2, out);
}

/* All K blocks for the given M/N tile ranges. */
static const tir_stmt_t* kloop(gen_t* e, const tir_expr_t* mfirst, int64_t mcnt, bool mpart,
                               const tir_expr_t* nfirst, int64_t ncnt, bool npart) {
  nn_kb_t* kb = e->kb;
  const nn_gemm_t* g = e->g;
  if ((mcnt <= 0 && !mpart) || (ncnt <= 0 && !npart)) return NULL;
  const tir_stmt_t* items[2] = {NULL, NULL};
  if (e->nkb_full > 0) {
    kpos_t kp = {0};
    if (e->nkb_full == 1) {
      kp.first = 1;
      kp.last = e->ktail == 0 ? 1 : 0;
      e->kblk = nn_i(kb, 0);
      items[0] = kbody(e, mfirst, mcnt, mpart, nfirst, ncnt, npart, nn_i(kb, 0), g->kc, &kp);
    } else {
      tir_var_t* vp = nn_var(kb, "pc");
      const tir_expr_t* pc = nn_v(kb, vp);
      kp.first = -1;
      kp.fcond = tir_bin(kb->t, TIR_EQ, pc, nn_i(kb, 0));
      kp.last = e->ktail == 0 ? -1 : 0;
      kp.lcond = tir_bin(kb->t, TIR_EQ, pc, nn_i(kb, e->nkb_full - 1));
      e->kblk = pc;
      items[0] = nn_for(kb, vp, e->nkb_full,
                        kbody(e, mfirst, mcnt, mpart, nfirst, ncnt, npart, nn_mulc(kb, pc, g->kc),
                              g->kc, &kp));
    }
  }
  if (e->ktail > 0) {
    kpos_t kp = {.first = e->nkb_full == 0 ? 1 : 0, .last = 1};
    e->kblk = nn_i(kb, e->nkb_full);
    items[1] = kbody(e, mfirst, mcnt, mpart, nfirst, ncnt, npart,
                     nn_i(kb, e->nkb_full * g->kc), e->ktail, &kp);
  }
  return tir_seq(kb->t, 2, items);
}

/* N blocks of |nct| tiles (the cache budget's) over |ncnt| tiles (M
 * groups too): where they leave a remainder block, a divisor of |ncnt|
 * above nct / 2 instead,
 * so every block is one copy of the loop nest. A remainder block is the
 * whole K loop and its micro-kernel printed again, which the C compiler
 * pays for at every cold compile (ResNet-50's 3x3 convs: 4 tiles a
 * thread as 3 + 1 compiled in about twice the time of 2 + 2); the smaller
 * block keeps the weights under the budget and costs at most one more
 * sweep of the M tiles (from L1/L2). */
static int64_t even_nblock(int64_t nct, int64_t ncnt) {
  if (nct < 1 || nct >= ncnt || ncnt % nct == 0) return nct;
  for (int64_t d = nct - 1; 2 * d > nct; --d)
    if (ncnt % d == 0) return d;
  return nct;
}

/* N blocking (jc) around kloop. */
static const tir_stmt_t* blk(gen_t* e, const tir_expr_t* mfirst, int64_t mcnt, bool mpart,
                             const tir_expr_t* nfirst, int64_t ncnt, bool npart) {
  nn_kb_t* kb = e->kb;
  int64_t nct = even_nblock(e->g->nc_tiles, ncnt);
  int64_t njc = ncnt / nct, nrest = ncnt % nct;
  const tir_stmt_t* items[3] = {NULL, NULL, NULL};
  if (njc > 1) {
    tir_var_t* vj = nn_var(kb, "jc");
    const tir_expr_t* ns = nn_add(kb, nfirst, nn_mulc(kb, nn_v(kb, vj), nct));
    items[0] = nn_for(kb, vj, njc, kloop(e, mfirst, mcnt, mpart, ns, nct, false));
  } else if (njc == 1) {
    items[0] = kloop(e, mfirst, mcnt, mpart, nfirst, nct, false);
  }
  /* The last N block takes the rest and the partial tile. */
  if (nrest > 0 || npart) {
    items[1] = kloop(e, mfirst, mcnt, mpart, nn_add(kb, nfirst, nn_i(kb, njc * nct)), nrest,
                     npart);
  }
  return tir_seq(kb->t, 3, items);
}

/* With psum, the chunk's M tiles in groups of e->mgroup: every K block of
 * a group runs before the next group, its partial sums in the chunk's
 * scratch (the last K block stores through the epilogue). */
static const tir_stmt_t* mgroups(gen_t* e, const tir_expr_t* mfirst, int64_t mcnt, bool mpart,
                                 const tir_expr_t* nfirst, int64_t ncnt, bool npart) {
  nn_kb_t* kb = e->kb;
  if (!e->psum || mcnt <= e->mgroup) return blk(e, mfirst, mcnt, mpart, nfirst, ncnt, npart);
  const int64_t G = even_nblock(e->mgroup, mcnt); /* no smaller remainder group: see even_nblock */
  if (mcnt <= G) return blk(e, mfirst, mcnt, mpart, nfirst, ncnt, npart);
  const int64_t ng = mcnt / G, rest = mcnt % G;
  tir_var_t* vg = nn_var(kb, "mg");
  const tir_stmt_t* full = nn_for(kb, vg, ng, blk(e, nn_add(kb, mfirst, nn_mulc(kb, nn_v(kb, vg), G)), G, false, nfirst, ncnt, npart));
  const tir_stmt_t* tail = rest > 0 || mpart ? blk(e, nn_add(kb, mfirst, nn_i(kb, ng * G)), rest, mpart, nfirst, ncnt, npart) : NULL;
  return tir_seq2(kb->t, full, tail);
}

enum { PAR_NONE, PAR_BATCH, PAR_M, PAR_N };

/* |cnt| tiles of the split dimension from |first| (the last one partial
 * when |part|), all tiles of the other. */
static const tir_stmt_t* split_run(gen_t* e, const tir_expr_t* first, int64_t cnt, bool part, bool split_m) {
  nn_kb_t* kb = e->kb;
  return split_m ? mgroups(e, first, cnt, part, nn_i(kb, 0), e->nt_full, e->nrem > 0)
                 : mgroups(e, nn_i(kb, 0), e->mt_full, e->mrem > 0, first, cnt, part);
}

/* Chunk c's tiles when the P chunks share the split dimension's |full| full
 * tiles and (|part|) its partial one as evenly as whole tiles allow: of the
 * all = full + part tiles, chunk c gets base = all / P, plus one for the
 * first all % P chunks; the partial tile is the last chunk's last. (Giving
 * the leftover tiles all to the last chunk left a 128-row MatMul split 52
 * and 76 rows on 2 threads.) Needs all >= P. Each branch's conditions
 * bound c, so every index stays provably in bounds. */
static const tir_stmt_t* balanced_chunks(gen_t* e, const tir_expr_t* c, int64_t P, int64_t full, bool part,
                                         bool split_m) {
  nn_kb_t* kb = e->kb;
  const int64_t all = full + (part ? 1 : 0), base = all / P, rem = all % P;
  /* the last chunk: base tiles, the partial one last */
  const tir_stmt_t* body =
      split_run(e, nn_i(kb, (P - 1) * base + rem), part ? base - 1 : base, part, split_m);
  /* chunks rem .. P-2: base full tiles */
  if (P - 2 >= rem) {
    const tir_stmt_t* mid = split_run(e, nn_addc(kb, nn_mulc(kb, c, base), rem), base, false, split_m);
    body = tir_if(kb->t, tir_bin(kb->t, TIR_LT, c, nn_i(kb, P - 1)), mid, body);
  }
  /* chunks 0 .. rem-1: base + 1 full tiles */
  if (rem > 0) {
    const tir_stmt_t* more = split_run(e, nn_mulc(kb, c, base + 1), base + 1, false, split_m);
    body = tir_if(kb->t, tir_bin(kb->t, TIR_LT, c, nn_i(kb, rem)), more, body);
  }
  return body;
}

/* One tile per invocation, for a GPU whose invocations may only run so many
 * loop iterations (ctx->loop_limit): the chunked form gives each of a few
 * chunks whole rows of tiles (CPU threads), which on such a device ends
 * invocations early and leaves its lanes idle. Here the PARALLEL loop runs
 * over batch x M tiles x N tiles (GPU tiles: e->gm x e->gn), and each
 * iteration computes its tile over
 * the whole K, so an invocation runs only the K loop. The edge tiles have
 * other (compile-time) sizes: a branch per case, on the tile's coordinates
 * only, so every access stays provably in bounds. */
static const tir_stmt_t* per_tile(gen_t* e, int64_t mt_all, int64_t nt_all) {
  nn_kb_t* kb = e->kb;
  const nn_gemm_t* g = e->g;
  const int64_t tiles = mt_all * nt_all;
  tir_var_t* vt = nn_var(kb, "tile");
  const tir_expr_t* t = nn_v(kb, vt);
  e->b = g->batch == 1 ? nn_i(kb, 0) : nn_divc(kb, t, tiles);
  const tir_expr_t* r = g->batch == 1 ? t : nn_modc(kb, t, tiles);
  const tir_expr_t* mi = nn_divc(kb, r, nt_all);
  const tir_expr_t* ni = nn_modc(kb, r, nt_all);
  const tir_expr_t* zero = nn_i(kb, 0);
  /* [M full?][N full?], only the kinds of tile this GEMM has */
  const bool has_m[2] = {e->mrem > 0, e->mt_full > 0}, has_n[2] = {e->nrem > 0, e->nt_full > 0};
  const tir_stmt_t* c[2][2] = {{NULL, NULL}, {NULL, NULL}};
  for (int fm = 0; fm < 2; ++fm)
    for (int fn = 0; fn < 2; ++fn)
      if (has_m[fm] && has_n[fn])
        c[fm][fn] = blk(e, fm ? mi : zero, fm ? 1 : 0, !fm, fn ? ni : zero, fn ? 1 : 0, !fn);
  const tir_stmt_t* rows[2] = {NULL, NULL};
  for (int fm = 0; fm < 2; ++fm) {
    if (e->nrem == 0) rows[fm] = c[fm][1];
    else if (e->nt_full == 0) rows[fm] = c[fm][0];
    else rows[fm] = tir_if(kb->t, tir_bin(kb->t, TIR_LT, ni, nn_i(kb, e->nt_full)), c[fm][1], c[fm][0]);
  }
  const tir_stmt_t* body = e->mrem == 0     ? rows[1]
                           : e->mt_full == 0 ? rows[0]
                                             : tir_if(kb->t, tir_bin(kb->t, TIR_LT, mi, nn_i(kb, e->mt_full)),
                                                      rows[1], rows[0]);
  body = nn_for(kb, vt, g->batch * tiles, body);
  nn_parallel(kb, vt);
  return body;
}

/* The GPU tile's edge along a packed panel of |w|: its largest divisor up
 * to 4 (nn_gemm_emit takes 8 columns where 8 divides the panel). */
static int64_t gpu_edge(int64_t w) {
  for (int64_t d = 4; d > 1; --d)
    if (w % d == 0) return d;
  return 1;
}

kiln_status_t nn_gemm_emit(nn_kb_t* kb, nn_gemm_t* g) {
  kiln_lower_ctx_t* ctx = kb->ctx;
  if (g->batch <= 0 || g->M <= 0 || g->N <= 0) return NULL; /* empty output */
  gen_t e = {.kb = kb, .g = g};
  e.mt_full = g->M / g->mr;
  e.mrem = g->M % g->mr;
  e.nt_full = g->N / g->nr;
  e.nrem = g->N % g->nr;
  if (g->K > 0) {
    int64_t T = g->taps > 0 ? g->taps : 1;
    e.nkb_full = g->K / T / g->kc;
    e.ktail = g->K / T % g->kc;
  }
  const int64_t mt_all = e.mt_full + (e.mrem > 0), nt_all = e.nt_full + (e.nrem > 0);
  const int64_t T = ctx->threads > 0 ? ctx->threads : 1;

  /* Parallel split: batches when they divide evenly (or are many), else
   * the dimension with more tiles; nothing for tiny products where the
   * fork/join would cost more than the work. */
  double flops = 2.0 * (double)g->batch * (double)g->M * (double)g->N * (double)(g->K + 1);
  int mode = PAR_NONE;
  if (T > 1 && flops >= 2e5) {
    if (g->batch % T == 0 || g->batch >= 4 * T) {
      mode = PAR_BATCH;
    } else if (mt_all >= nt_all && mt_all >= 2) {
      mode = PAR_M;
    } else if (nt_all >= 2) {
      mode = PAR_N;
    } else if (g->batch >= 2) {
      mode = PAR_BATCH;
    }
  }
  /* a gemm hook's split, where it has the work to split */
  if (g->par == KILN_GEMM_PAR_NONE) mode = PAR_NONE;
  else if (g->par == KILN_GEMM_PAR_BATCH && T > 1 && g->batch >= 2) mode = PAR_BATCH;
  else if (g->par == KILN_GEMM_PAR_M && T > 1 && mt_all >= 2) mode = PAR_M;
  else if (g->par == KILN_GEMM_PAR_N && T > 1 && nt_all >= 2) mode = PAR_N;
  int64_t P = mode == PAR_BATCH ? g->batch : mode == PAR_NONE ? 1 : T;
  const bool tiled = ctx->target == KILN_TARGET_CLASS_GPU && ctx->loop_limit > 0;

  /* taps outside k only with the caller's L in place and whole K blocks
   * (packed K is tap-major within each block) */
  /* (int8: one K block, its i32 sums are never reloaded) */
  if (g->taps_outer && (!g->direct_l || g->sparse || g->kc <= 0 || g->K % (g->kc * (g->taps > 0 ? g->taps : 1)) ||
                        (g->idot && g->kc * (g->taps > 0 ? g->taps : 1) != g->K)))
    return kiln_make_status(KILN_INTERNAL, "GEMM: taps outside the k loop need a direct L and equal K blocks");
  g->pack_l = !tiled && !g->direct_l && !g->L.packed && (g->L.load || g->L.lload) && g->mr > 1 && nt_all >= 2 && g->K > 0;
  if (!g->pack_l) g->n_outer = false;
  if (g->pack_l) {
    int64_t T = g->taps > 0 ? g->taps : 1;
    int64_t kcs = g->kc * T < g->K ? g->kc * T : g->K;
    int64_t shape[4] = {P, g->n_outer ? mt_all : 1, kcs, g->mr};
    KILN_RETURN_IF_ERROR(
        kiln_lower_temp(ctx, "lpack", g->idot ? KILN_DTYPE_I32 : KILN_DTYPE_F32, 4, shape, &e.slot));
  }

  /* K blocks without a reload: partial sums in a per-chunk scratch, for
   * M groups whose sums stay within about 256 KB, so the kernel stores
   * its output once (epilogues fuse) */
  if (g->psum && g->n_outer)
    return kiln_make_status(KILN_INTERNAL, "GEMM: the partial-sum scratch needs N inside M (no n_outer)");
  if (g->psum && !tiled && !g->reload && e.nkb_full + (e.ktail > 0) > 1) {
    int64_t G = (256 << 10) / (int64_t)sizeof(float) / (g->mr * g->N);
    e.mgroup = G < 1 ? 1 : G > mt_all ? mt_all : G;
    int64_t shape[4] = {P, e.mgroup + 1, g->mr, g->N};
    KILN_RETURN_IF_ERROR(kiln_lower_temp(ctx, "psum", KILN_DTYPE_F32, 4, shape, &e.psum));
  } else if (!g->reload && e.nkb_full + (e.ktail > 0) > 1) {
    return kiln_make_status(KILN_INTERNAL, "GEMM: K blocks need a reload or the partial-sum scratch");
  }
  /* overlap_m where every row is computed whole in one K block by the
   * thread that also computes the tile before the partial one */
  e.overlap = g->overlap_m && !tiled && g->direct_l && !g->L.packed && !g->sparse && !e.slot && !e.psum &&
              e.mrem > 0 && g->M >= g->mr && e.nkb_full + (e.ktail > 0) == 1 &&
              (mode != PAR_M || mt_all / P >= 2);
  const tir_stmt_t* body = NULL;
  if (tiled) {
    /* A GPU tile of at most 4 x 8 outputs per invocation, not the CPU's
     * register tile: lavapipe's LLVM took minutes on one 11 x 32 tile
     * with a fused erf epilogue (bert's linear1) and half conversions */
    if (!g->sparse) e.gm = g->L.packed ? gpu_edge(g->mr) : (g->M < 4 ? g->M : 4);
    e.gn = g->R.packed ? (g->nr % 8 == 0 ? 8 : gpu_edge(g->nr)) : (g->N < 8 ? g->N : 8);
    e.mt_full = g->M / tmr(&e), e.mrem = g->M % tmr(&e);
    e.nt_full = g->N / tnr(&e), e.nrem = g->N % tnr(&e);
    e.chunk = nn_i(kb, 0);
    body = per_tile(&e, e.mt_full + (e.mrem > 0), e.nt_full + (e.nrem > 0));
  } else if (mode == PAR_BATCH) {
    tir_var_t* vb = nn_var(kb, "b");
    e.b = e.chunk = nn_v(kb, vb);
    body = mgroups(&e, nn_i(kb, 0), e.mt_full, e.mrem > 0, nn_i(kb, 0), e.nt_full, e.nrem > 0);
    body = nn_for(kb, vb, g->batch, body);
    nn_parallel(kb, vb);
  } else {
    tir_var_t* vc = mode == PAR_NONE ? NULL : nn_var(kb, "chunk");
    const tir_expr_t* c = vc ? nn_v(kb, vc) : nn_i(kb, 0);
    tir_var_t* vb = nn_var(kb, "b");
    e.b = g->batch == 1 ? nn_i(kb, 0) : nn_v(kb, vb);
    e.chunk = c;
    bool split_m = mode == PAR_M;
    int64_t full = split_m ? e.mt_full : e.nt_full;
    bool part = split_m ? e.mrem > 0 : e.nrem > 0;
    int64_t q = full / P, extra = full % P;
    /* overlap_m split over M: every chunk runs qo tiles in one loop, each
     * tile's first row clamped to M - mr (kbody's mclamp), so the tile is
     * one copy; the tiles past the last one repeat it on the last chunk,
     * which also computes the whole tile before it (so no row is stored by
     * two threads). At most ceil(all / P) tiles a chunk, as balanced_chunks
     * gives. */
    const int64_t qo = (full + 1 + P - 1) / P;
    if (mode == PAR_NONE) {
      body = mgroups(&e, nn_i(kb, 0), e.mt_full, e.mrem > 0, nn_i(kb, 0), e.nt_full, e.nrem > 0);
    } else if (e.overlap && split_m && part && qo >= 2 && (P - 1) * qo <= full - 1) {
      body = mgroups(&e, nn_mulc(kb, c, qo), qo - 1, true, nn_i(kb, 0), e.nt_full, e.nrem > 0);
    } else if (full + part >= P && (extra > 0 || part)) {
      body = balanced_chunks(&e, c, P, full, part, split_m);
    } else {
      /* Equal shares of full tiles... */
      const tir_expr_t* first = nn_mulc(kb, c, q);
      body = split_m ? mgroups(&e, first, q, false, nn_i(kb, 0), e.nt_full, e.nrem > 0)
                     : mgroups(&e, nn_i(kb, 0), e.mt_full, e.mrem > 0, first, q, false);
      /* ...then the leftover full tiles and the partial one, all on the
       * last chunk (extra < P <= threads, so at most a tile or two more). */
      if (extra > 0 || part) {
        const tir_expr_t* tfirst = nn_i(kb, P * q);
        const tir_stmt_t* s =
            split_m ? mgroups(&e, tfirst, extra, part, nn_i(kb, 0), e.nt_full, e.nrem > 0)
                    : mgroups(&e, nn_i(kb, 0), e.mt_full, e.mrem > 0, tfirst, extra, part);
        body = tir_seq2(kb->t, body,
                        tir_if(kb->t, tir_bin(kb->t, TIR_EQ, c, nn_i(kb, P - 1)), s, NULL));
      }
    }
    if (g->batch > 1) body = nn_for(kb, vb, g->batch, body);
    if (vc) {
      body = nn_for(kb, vc, P, body);
      nn_parallel(kb, vc);
    }
  }
  if (g->sparse) kb->name_suffix = "_sparse";
  return nn_emit(kb, body);
}

/* ---- packing -------------------------------------------------------------- */

/* One packing of nn_pack_const: the (batch, tile) pairs [u0, u1). */
typedef struct pack_job_s {
  void* p;
  const nn_gemm_t* g;
  nn_get_fn get;
  const void* user;
  int64_t rows, K, t, tiles, kbs, nkb;
  int64_t u0, u1;
} pack_job_t;

static void* pack_range(void* arg) {
  const pack_job_t* j = arg;
  const nn_gemm_t* g = j->g;
  float* p = j->p;
  int32_t* pi = j->p;
  int16_t* ph = j->p;
  const int64_t t = j->t, kbs = j->kbs;
  for (int64_t u = j->u0; u < j->u1; ++u) {
    const int64_t b = u / j->tiles, tt = u % j->tiles;
    for (int64_t i = 0; i < t; ++i) {
      const int64_t r = tt * t + i;
      if (r >= j->rows) break; /* zero padding (calloc'd) */
      /* K block by K block: no division per element */
      for (int64_t blk = 0, k = 0; blk < j->nkb; ++blk) {
        int64_t o = ((b * j->nkb + blk) * j->tiles + tt) * kbs * t + i;
        const int64_t kend = k + kbs < j->K ? k + kbs : j->K;
        for (; k < kend; ++k, o += t) {
          if (g->w8) ph[o] = (int16_t)j->get(j->user, b, r, k);
          else if (g->idot) pi[o] = (int32_t)j->get(j->user, b, r, k);
          else p[o] = (float)j->get(j->user, b, r, k);
        }
      }
    }
  }
  return NULL;
}

/* Packings at least this large (elements) take a second thread for half
 * the tiles: a cold compile is serial up to the C compiler, so the second
 * core would idle (ResNet-50 packs 25M weights, a fifth of kiln's own CPU
 * time before the C compiler starts). The getters only read. */
#define PACK_THREAD_MIN (1 << 20)

kiln_status_t nn_pack_const(kiln_lower_ctx_t* ctx, const nn_gemm_t* g, const char* name,
                            int64_t nb, int64_t rows, int64_t K, int64_t t, nn_get_fn get,
                            const void* user, const tir_buffer_t** out) {
  int64_t tiles = (rows + t - 1) / t;
  int64_t T = g->taps > 0 ? g->taps : 1;
  int64_t kbs = g->kc * T;
  if (kbs <= 0 || kbs >= K) kbs = K;
  int64_t nkb = K > 0 ? (K + kbs - 1) / kbs : 1;
  int64_t total = nb * nkb * tiles * (kbs > 0 ? kbs : 1) * t;
  float* p;
  /* int8 GEMMs (idot) pack i16 pairs as i32 (same element size), or int8
   * pairs as i16 (w8: half) */
  KILN_RETURN_IF_ERROR(nn_alloc_f32(g->w8 ? (total + 1) / 2 : total, "packed constant", &p));
  const int64_t units = nb * tiles;
  pack_job_t job = {p, g, get, user, rows, K, t, tiles, kbs, nkb, 0, units};
  pack_job_t half = job;
  pthread_t th;
  bool two = total >= PACK_THREAD_MIN && units >= 2 && sysconf(_SC_NPROCESSORS_ONLN) >= 2;
  if (two) {
    half.u0 = job.u1 = units / 2;
    two = pthread_create(&th, NULL, pack_range, &half) == 0;
    if (!two) job.u1 = units; /* no thread: all here */
  }
  pack_range(&job);
  if (two) pthread_join(th, NULL);
  const kiln_dtype_t dt = g->w8 ? KILN_DTYPE_I16 : g->idot ? KILN_DTYPE_I32 : KILN_DTYPE_F32;
  if (nkb == 1) {
    int64_t shape[4] = {nb, tiles, K > 0 ? K : 1, t};
    return nn_const_typed(ctx, name, dt, 4, shape, p, out);
  }
  int64_t shape[5] = {nb, nkb, tiles, kbs, t};
  return nn_const_typed(ctx, name, dt, 5, shape, p, out);
}

kiln_status_t nn_pack_runtime(nn_kb_t* kb, const nn_gemm_t* g, const char* name, int64_t nb,
                              int64_t rows, int64_t K, int64_t t, nn_elem_fn load,
                              const tir_buffer_t** out) {
  kiln_lower_ctx_t* ctx = kb->ctx;
  int64_t tiles = (rows + t - 1) / t;
  int64_t shape[4] = {nb, tiles, K > 0 ? K : 1, t};
  KILN_RETURN_IF_ERROR(kiln_lower_temp(ctx, name, KILN_DTYPE_F32, 4, shape, out));
  tir_var_t* vb = nn_var(kb, "b");
  tir_var_t* vt = nn_var(kb, "tile");
  tir_var_t* vk = nn_var(kb, "k");
  tir_var_t* vi = nn_var(kb, "i");
  const tir_expr_t* b = nn_v(kb, vb);
  const tir_expr_t* tt = nn_v(kb, vt);
  const tir_expr_t* k = nn_v(kb, vk);
  const tir_expr_t* i = nn_v(kb, vi);
  const tir_expr_t* idx[4] = {b, tt, k, i};
  const tir_stmt_t* s;
  if (rows % t == 0) {
    s = tir_store(kb->t, *out, idx, load(kb, g, b, nn_add(kb, nn_mulc(kb, tt, t), i), k));
  } else {
    /* Clamp the row so the (discarded) load stays in bounds; the tail rows
     * of the last tile are zero. */
    const tir_expr_t* r = nn_add(kb, nn_mulc(kb, tt, t), i);
    const tir_expr_t* ok = tir_bin(kb->t, TIR_LT, r, nn_i(kb, rows));
    const tir_expr_t* v = load(kb, g, b, nn_clamp(kb, r, 0, rows - 1), k);
    s = tir_store(kb->t, *out, idx, tir_select(kb->t, ok, v, nn_f(kb, 0.0)));
  }
  s = nn_for(kb, vi, t, s);
  s = nn_for(kb, vk, K, s);
  s = nn_for(kb, vt, tiles, s);
  s = nn_for(kb, vb, nb, s);
  if (t % 8 == 0) nn_vectorize(kb, vi);
  /* Parallel on the outermost loop that has more than one iteration. */
  if (nb * tiles * K * t >= 4096) {
    if (nb >= 2) nn_parallel(kb, vb);
    else if (tiles >= 2) nn_parallel(kb, vt);
  }
  return nn_emit(kb, s);
}

/* ---- MatMul and Gemm ------------------------------------------------------ */

typedef struct mm_s {
  const tir_buffer_t *a, *b, *c, *y;
  int32_t a_brank, b_brank;  /* batch dims of A and B */
  bool a1d, b1d;             /* 1-D operands (numpy promotion) */
  int32_t nob;               /* output batch rank */
  int64_t ob[KILN_MAX_RANK]; /* output batch dims */
  bool trans_a, trans_b;
  float alpha, beta;
  int64_t cstr[2];           /* Gemm C broadcast strides over [M, N] (0 = broadcast) */
  /* compile-time B for packing */
  const float* bval;
  int64_t M, N, K;
  /* > 0: the batches of A and Y are stacked into one GEMM of M = batch *
   * fold rows (B is one matrix for all): GEMM row r is row r % fold of
   * batch r / fold. */
  int64_t fold;
} mm_t;

/* Batch index of a buffer with |brank| leading batch dims, broadcast
 * against the output batch shape. */
static void batch_idx(nn_kb_t* kb, const mm_t* mm, const tir_buffer_t* buf, int32_t brank,
                      const tir_expr_t* b, const tir_expr_t** idx) {
  for (int32_t i = 0; i < brank; ++i) {
    int32_t o = i + mm->nob - brank;
    int64_t stride = 1;
    for (int32_t d = o + 1; d < mm->nob; ++d) stride *= mm->ob[d];
    idx[i] = buf->shape[i] == 1 ? nn_i(kb, 0) : nn_modc(kb, nn_divc(kb, b, stride), mm->ob[o]);
  }
}

/* Element (row, col) of operand |buf| (A: row m, col k; B: row k, col n)
 * in batch |b|: a 1-D operand holds only the contracted index |k1d|; a
 * transposed one is stored (col, row). */
static const tir_expr_t* mm_load_operand(nn_kb_t* kb, const mm_t* mm, const tir_buffer_t* buf, int32_t brank,
                                         bool is1d, bool trans, const tir_expr_t* b, const tir_expr_t* row,
                                         const tir_expr_t* col, const tir_expr_t* k1d) {
  const tir_expr_t* idx[KILN_MAX_RANK];
  if (mm->fold > 0 && buf == mm->a) {
    b = nn_divc(kb, row, mm->fold);
    row = nn_modc(kb, row, mm->fold);
  }
  batch_idx(kb, mm, buf, brank, b, idx);
  if (is1d) {
    idx[brank] = k1d;
  } else if (trans) {
    idx[brank] = col, idx[brank + 1] = row;
  } else {
    idx[brank] = row, idx[brank + 1] = col;
  }
  return nn_ldf(kb, buf, idx);
}

static const tir_expr_t* mm_load_a(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                   const tir_expr_t* m, const tir_expr_t* k) {
  const mm_t* mm = g->user;
  return mm_load_operand(kb, mm, mm->a, mm->a_brank, mm->a1d, mm->trans_a, b, m, k, k);
}

static const tir_expr_t* mm_load_b(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                   const tir_expr_t* k, const tir_expr_t* n);
static const tir_expr_t* mm_rload_b(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                    const tir_expr_t* k, int32_t grp, const tir_expr_t* const* kv,
                                    const tir_expr_t* n) {
  (void)grp;
  (void)kv;
  return mm_load_b(kb, g, b, k, n);
}

static const tir_expr_t* mm_load_b(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                   const tir_expr_t* k, const tir_expr_t* n) {
  const mm_t* mm = g->user;
  return mm_load_operand(kb, mm, mm->b, mm->b_brank, mm->b1d, mm->trans_b, b, k, n, k);
}

/* For the runtime pack of R: element (row = n, col = k). */
static const tir_expr_t* mm_load_bt(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                    const tir_expr_t* n, const tir_expr_t* k) {
  return mm_load_b(kb, g, b, k, n);
}

static void y_idx(nn_kb_t* kb, const mm_t* mm, const tir_expr_t* b, const tir_expr_t* m,
                  const tir_expr_t* n, const tir_expr_t** idx) {
  if (mm->fold > 0) {
    b = nn_divc(kb, m, mm->fold);
    m = nn_modc(kb, m, mm->fold);
  }
  batch_idx(kb, mm, mm->y, mm->nob, b, idx);
  int32_t r = mm->nob;
  if (!mm->a1d) idx[r++] = m;
  if (!mm->b1d) idx[r++] = n;
}

static const tir_stmt_t* mm_store(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                  const tir_expr_t* m, const tir_expr_t* n,
                                  const tir_expr_t* v) {
  const tir_expr_t* idx[KILN_MAX_RANK];
  y_idx(kb, g->user, b, m, n, idx);
  return nn_stf(kb, ((const mm_t*)g->user)->y, idx, v);
}

static const tir_expr_t* mm_reload(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                   const tir_expr_t* m, const tir_expr_t* n) {
  const tir_expr_t* idx[KILN_MAX_RANK];
  y_idx(kb, g->user, b, m, n, idx);
  return nn_ldf(kb, ((const mm_t*)g->user)->y, idx);
}

static const tir_expr_t* gemm_epi(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b,
                                  const tir_expr_t* m, const tir_expr_t* n,
                                  const tir_expr_t* acc) {
  const mm_t* mm = g->user;
  (void)b;
  const tir_expr_t* v = acc;
  if (mm->alpha != 1.0f) v = tir_mul(kb->t, v, nn_f(kb, mm->alpha));
  if (mm->c && mm->beta != 0.0f) {
    const tir_expr_t* idx[2];
    int32_t r = mm->c->rank;
    const tir_expr_t* mn[2] = {nn_mulc(kb, m, mm->cstr[0] ? 1 : 0),
                               nn_mulc(kb, n, mm->cstr[1] ? 1 : 0)};
    for (int32_t i = 0; i < r; ++i) idx[i] = mn[2 - r + i];
    const tir_expr_t* cv = r == 0 ? nn_ldf(kb, mm->c, NULL) : nn_ldf(kb, mm->c, idx);
    if (mm->beta != 1.0f) cv = tir_mul(kb->t, cv, nn_f(kb, mm->beta));
    v = tir_add(kb->t, v, cv);
  }
  return v;
}

/* B'(k, n) of batch b from the compile-time value, as get(row = n, col = k). */
static double mm_get_b(const void* user, int64_t b, int64_t n, int64_t k) {
  const mm_t* mm = user;
  const float* base = mm->bval + b * mm->K * mm->N;
  if (mm->b1d) return base[k];
  return mm->trans_b ? base[n * mm->K + k] : base[k * mm->N + n];
}

/* R batch index for a packed B: B's own batch index of output batch b. */
static const tir_expr_t* mm_bmap_b(nn_kb_t* kb, const nn_gemm_t* g, const tir_expr_t* b) {
  const mm_t* mm = g->user;
  const tir_expr_t* idx[KILN_MAX_RANK];
  batch_idx(kb, mm, mm->b, mm->b_brank, b, idx);
  /* Linearise over B's batch dims. */
  const tir_expr_t* lin = nn_i(kb, 0);
  for (int32_t i = 0; i < mm->b_brank; ++i)
    lin = nn_add(kb, nn_mulc(kb, lin, mm->b->shape[i]), idx[i]);
  return lin;
}

/* Integer products: a plain loop nest accumulating in i64 (wrapping like
 * the reference's uint64 arithmetic), then + C for Gemm. f64 products take
 * the same nest accumulating in f64: the tiled GEMM computes in f32. */
static kiln_status_t int_matmul(nn_kb_t* kb, mm_t* mm, int64_t batch) {
  tir_ctx_t* t = kb->t;
  tir_var_t* vb = nn_var(kb, "b");
  tir_var_t* vm = nn_var(kb, "m");
  tir_var_t* vn = nn_var(kb, "n");
  tir_var_t* vk = nn_var(kb, "k");
  const tir_expr_t *b = nn_v(kb, vb), *m = nn_v(kb, vm), *n = nn_v(kb, vn), *k = nn_v(kb, vk);
  int64_t one = 1;
  /* a plain f32/f16 nest (kiln_plan_options_t.plain_loops) accumulates in f32 */
  const bool plain = kiln_dtype_is_float(mm->y->dtype) && mm->y->dtype != KILN_DTYPE_F64;
  const kiln_dtype_t at = plain ? KILN_DTYPE_F32 : mm->y->dtype == KILN_DTYPE_F64 ? KILN_DTYPE_F64 : KILN_DTYPE_I64;
  const tir_buffer_t* acc = tir_buffer(t, "acc", at, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_expr_t* z[1] = {nn_i(kb, 0)};
  const tir_expr_t *ai[KILN_MAX_RANK], *bi[KILN_MAX_RANK], *yi[KILN_MAX_RANK];
  batch_idx(kb, mm, mm->a, mm->a_brank, b, ai);
  batch_idx(kb, mm, mm->b, mm->b_brank, b, bi);
  int32_t ra = mm->a_brank, rb = mm->b_brank;
  if (mm->a1d) ai[ra] = k;
  else if (mm->trans_a) ai[ra] = k, ai[ra + 1] = m;
  else ai[ra] = m, ai[ra + 1] = k;
  if (mm->b1d) bi[rb] = k;
  else if (mm->trans_b) bi[rb] = n, bi[rb + 1] = k;
  else bi[rb] = k, bi[rb + 1] = n;
  y_idx(kb, mm, b, m, n, yi);
  const tir_expr_t* prod = tir_mul(t, tir_cast(t, at, tir_load(t, mm->a, ai)),
                                   tir_cast(t, at, tir_load(t, mm->b, bi)));
  const tir_stmt_t* upd = tir_store(t, acc, z, tir_add(t, tir_load(t, acc, z), prod));
  const tir_expr_t* v = tir_load(t, acc, z);
  if (plain && mm->alpha != 1.0f) v = tir_mul(t, v, tir_const(t, at, mm->alpha));
  if (mm->c && (!plain || mm->beta != 0.0f)) {
    const tir_expr_t* ci[2];
    int32_t r = mm->c->rank;
    const tir_expr_t* mn[2] = {mm->cstr[0] ? m : nn_i(kb, 0), mm->cstr[1] ? n : nn_i(kb, 0)};
    for (int32_t i = 0; i < r; ++i) ci[i] = mn[2 - r + i];
    const tir_expr_t* cv = tir_cast(t, at, tir_load(t, mm->c, ci));
    if (plain && mm->beta != 1.0f) cv = tir_mul(t, cv, tir_const(t, at, mm->beta));
    v = tir_add(t, v, cv);
  }
  const tir_stmt_t* items[3] = {tir_store(t, acc, z, tir_const(t, at, 0.0)), nn_for(kb, vk, mm->K, upd),
                                tir_store(t, mm->y, yi, tir_cast(t, mm->y->dtype, v))};
  const tir_stmt_t* s = NULL;
  if (plain && mm->N <= 8192) {
    /* plain float: a row of N sums per m (k outside n, so the n loops read
     * B's rows contiguously and vectorize), rows in parallel */
    int64_t nr = mm->N;
    const tir_buffer_t* row = tir_buffer(t, "accrow", at, 1, &nr, TIR_SCOPE_PRIVATE);
    tir_var_t* vn0 = nn_var(kb, "n");
    tir_var_t* vn1 = nn_var(kb, "n");
    const tir_expr_t* rn[1] = {n};
    const tir_expr_t* rn0[1] = {nn_v(kb, vn0)};
    const tir_expr_t* rn1[1] = {nn_v(kb, vn1)};
    const tir_var_t* from[1] = {vn};
    const tir_expr_t* to[1] = {rn1[0]};
    const tir_expr_t* out = tir_load(t, row, rn1);
    if (mm->alpha != 1.0f) out = tir_mul(t, out, tir_const(t, at, mm->alpha));
    if (mm->c && mm->beta != 0.0f) {
      const tir_expr_t* ci[2];
      int32_t r = mm->c->rank;
      const tir_expr_t* mn[2] = {mm->cstr[0] ? m : nn_i(kb, 0), mm->cstr[1] ? rn1[0] : nn_i(kb, 0)};
      for (int32_t i = 0; i < r; ++i) ci[i] = mn[2 - r + i];
      const tir_expr_t* cv = tir_cast(t, at, tir_load(t, mm->c, ci));
      if (mm->beta != 1.0f) cv = tir_mul(t, cv, tir_const(t, at, mm->beta));
      out = tir_add(t, out, cv);
    }
    const tir_expr_t* yo[KILN_MAX_RANK];
    for (int32_t i = 0; i < mm->y->rank; ++i) yo[i] = tir_substitute_expr(t, yi[i], 1, from, to);
    const tir_stmt_t* ritems[3] = {
        nn_for(kb, vn0, mm->N, tir_store(t, row, rn0, tir_const(t, at, 0.0))),
        nn_for(kb, vk, mm->K, nn_for(kb, vn, mm->N, tir_store(t, row, rn, tir_add(t, tir_load(t, row, rn), prod)))),
        nn_for(kb, vn1, mm->N, tir_store(t, mm->y, yo, tir_cast(t, mm->y->dtype, out)))};
    s = nn_for(kb, vm, mm->M, tir_alloc(t, row, tir_seq(t, 3, ritems)));
    nn_vectorize(kb, vn0);
    nn_vectorize(kb, vn);
    nn_vectorize(kb, vn1);
    nn_parallel(kb, vm);
  } else {
    s = nn_for(kb, vm, mm->M, nn_for(kb, vn, mm->N, tir_alloc(t, acc, tir_seq(t, 3, items))));
  }
  s = nn_for(kb, vb, batch, s);
  return nn_emit(kb, s);
}

static kiln_status_t mm_run(nn_kb_t* kb, mm_t* mm, int64_t batch) {
  kiln_lower_ctx_t* ctx = kb->ctx;
  if (batch * mm->M * mm->N == 0) return NULL;
  if (!kiln_dtype_is_float(mm->y->dtype) || mm->y->dtype == KILN_DTYPE_F64) {
    if (mm->c && (mm->alpha != 1.0f || mm->beta != 1.0f)) {
      return kiln_make_status(KILN_UNSUPPORTED,
                              "Gemm: integer inputs with alpha/beta other than 1 are not "
                              "supported");
    }
    if (!mm->c && mm->alpha != 1.0f) {
      return kiln_make_status(KILN_UNSUPPORTED,
                              "Gemm: integer inputs with alpha other than 1 are not supported");
    }
    return int_matmul(kb, mm, batch);
  }
  if (ctx->plan && ctx->plan->plain_loops) return int_matmul(kb, mm, batch);
  nn_gemm_t g;
  memset(&g, 0, sizeof g);
  g.batch = batch;
  g.M = mm->M, g.N = mm->N, g.K = mm->K;
  g.user = mm;
  g.store = mm_store;
  g.reload = mm->y->dtype == KILN_DTYPE_F32 ? mm_reload : NULL;
  g.epi = (mm->alpha != 1.0f || (mm->c && mm->beta != 0.0f)) ? gemm_epi : NULL;
  g.L.load = mm_load_a;
  g.R.rload = mm_rload_b;
  nn_gemm_tiles(ctx, &g);
  /* A read in place on the CPU (no run-time micro-panels) where its rows
   * are short: a tile's rows then lie in different L1 sets (rows 4 KiB
   * apart would share one) and their broadcasts are loads at fixed
   * offsets from one pointer; the panels cost the encoder's 128-row
   * MatMuls an eighth of their time, each thread packing what it reads. */
  if (ctx->target == KILN_TARGET_CLASS_CPU && !mm->trans_a && !mm->a1d && mm->fold == 0 && mm->K <= 512 &&
      g.mr > 1)
    g.direct_l = g.overlap_m = true;
  /* B: packed at compile time when constant, else by a pack kernel at run
   * time (or read in place when A has few rows). */
  float* bval = NULL;
  KILN_RETURN_IF_ERROR(nn_const_input_f32(ctx, 1, &bval));
  int64_t nbb = 1;
  for (int32_t i = 0; i < mm->b_brank; ++i) nbb *= mm->b->shape[i];
  if (bval) {
    mm->bval = bval;
    kiln_status_t st = nn_pack_const(ctx, &g, "bpack", nbb, mm->N, mm->K, g.nr, mm_get_b, mm,
                                     &g.R.packed);
    free(bval);
    mm->bval = NULL;
    KILN_RETURN_IF_ERROR(st);
    g.R.bmap = mm_bmap_b;
  } else if (mm->trans_b || (mm->M >= 16 && mm->N >= g.nr && mm->K * mm->N >= 16384)) {
    /* Run-time B is packed too when transposed (strided rows otherwise) or
     * when enough rows of A reuse it: its rows N floats apart would map
     * the kc x nr panel onto a few L1 sets (4 KiB aliasing for N = 1024). */
    nn_gemm_t pg = g;
    pg.batch = nbb;
    /* The pack kernel's batch is B's own batch: map it 1:1. */
    mm_t pm = *mm;
    pm.nob = mm->b_brank;
    for (int32_t i = 0; i < pm.nob; ++i) pm.ob[i] = mm->b->shape[i];
    pg.user = &pm;
    KILN_RETURN_IF_ERROR(
        nn_pack_runtime(kb, &pg, "bpack", nbb, mm->N, mm->K, g.nr, mm_load_bt, &g.R.packed));
    g.R.bmap = mm_bmap_b;
  }
  return nn_gemm_emit(kb, &g);
}

kiln_status_t kiln_lower_nn_matmul(kiln_lower_ctx_t* ctx) {
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  mm_t mm;
  memset(&mm, 0, sizeof mm);
  mm.a = ctx->in[0], mm.b = ctx->in[1], mm.y = ctx->out[0];
  mm.alpha = 1.0f;
  const tir_buffer_t *a = mm.a, *b = mm.b, *y = mm.y;
  if (!a || !b || !y) return kiln_make_status(KILN_INTERNAL, "MatMul: missing input/output");
  if (a->rank < 1 || b->rank < 1) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "MatMul: scalar operand");
  }
  mm.a1d = a->rank == 1, mm.b1d = b->rank == 1;
  mm.a_brank = a->rank > 2 ? a->rank - 2 : 0;
  mm.b_brank = b->rank > 2 ? b->rank - 2 : 0;
  mm.K = a->shape[a->rank - 1];
  mm.M = mm.a1d ? 1 : a->shape[a->rank - 2];
  mm.N = mm.b1d ? 1 : b->shape[b->rank - 1];
  mm.nob = y->rank - (mm.a1d ? 0 : 1) - (mm.b1d ? 0 : 1);
  if (mm.nob < 0 || mm.nob < mm.a_brank || mm.nob < mm.b_brank) {
    return kiln_make_status(KILN_INTERNAL, "MatMul: output rank %d does not fit the operands",
                            (int)y->rank);
  }
  int64_t batch = 1;
  for (int32_t i = 0; i < mm.nob; ++i) batch *= (mm.ob[i] = y->shape[i]);
  /* [B..., M, K] x [K, N] (B's batch dims, if any, all 1): one GEMM over
   * the B*M rows, since A and Y are dense and their batches stack (ViT's
   * [197,1,768] x [768,2304] would otherwise be 197 vector products).
   * Float only: the integer loop nest indexes batches itself. CPU only:
   * the GPU GEMM templates stack such rows themselves (template_gemm.c),
   * and where none applies (a fused epilogue) the printed kernel's batch
   * loop is what spreads the work over work-groups. */
  bool shared_b = ctx->target == KILN_TARGET_CLASS_CPU && !mm.a1d && !mm.b1d && batch > 1 &&
                  kiln_dtype_is_float(y->dtype) && !(ctx->plan && ctx->plan->plain_loops);
  for (int32_t i = 0; i < mm.b_brank && shared_b; ++i) shared_b = b->shape[i] == 1;
  if (shared_b) {
    mm.fold = mm.M;
    mm.M *= batch;
    batch = 1;
  }
  return mm_run(&kb, &mm, batch);
}

kiln_status_t kiln_lower_nn_gemm(kiln_lower_ctx_t* ctx) {
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  mm_t mm;
  memset(&mm, 0, sizeof mm);
  mm.a = ctx->in[0], mm.b = ctx->in[1], mm.y = ctx->out[0];
  mm.c = ctx->n_in > 2 ? ctx->in[2] : NULL;
  if (!mm.a || !mm.b || !mm.y) return kiln_make_status(KILN_INTERNAL, "Gemm: missing input/output");
  int64_t ta, tb;
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "transA", 0, &ta));
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "transB", 0, &tb));
  KILN_RETURN_IF_ERROR(kiln_attr_float(ctx->node, "alpha", 1.0f, &mm.alpha));
  KILN_RETURN_IF_ERROR(kiln_attr_float(ctx->node, "beta", 1.0f, &mm.beta));
  mm.trans_a = ta != 0, mm.trans_b = tb != 0;
  if (mm.a->rank != 2 || mm.b->rank != 2 || mm.y->rank != 2) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "Gemm: operands must have rank 2");
  }
  mm.M = mm.y->shape[0], mm.N = mm.y->shape[1];
  mm.K = mm.a->shape[mm.trans_a ? 0 : 1];
  if (mm.c) {
    if (mm.c->rank > 2) return kiln_make_status(KILN_INVALID_ARGUMENT, "Gemm: C has rank > 2");
    const int64_t mn[2] = {mm.M, mm.N};
    for (int32_t i = 0; i < 2; ++i) {
      int32_t ci = i - (2 - mm.c->rank);
      mm.cstr[i] = ci >= 0 && mm.c->shape[ci] == mn[i] && mn[i] != 1 ? 1 : 0;
    }
  }
  return mm_run(&kb, &mm, 1);
}
