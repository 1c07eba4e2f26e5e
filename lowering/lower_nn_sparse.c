/* Block-sparse constant weights on the CPU (issue 27 item 4).
 *
 * A convolution whose weights are a compile-time constant is looked at in
 * blocks of lowering/sparse_block.h's shape (4 output channels x a run of
 * input channels with all their taps). When enough blocks are zero (AUTO:
 * KILN_SPARSE_AUTO_MIN_ZERO of them, the measured break-even; ON: always)
 * the weights are stored as their non-zero blocks only -- per M tile of 4
 * rows a range of blocks (ptr), each block's first input channel (kidx)
 * and its 4 x (kr * taps) values, packed as the dense GEMM packs a panel
 * (vals) -- and the GEMM generator's k loop runs over a tile's non-zero
 * blocks instead of every input channel (nn_gemm_t.sparse): the zero
 * blocks are neither stored in the module nor multiplied. Everything else
 * -- the implicit-GEMM input, the tiles' init, the fused epilogues and the
 * stores -- is the dense kernel's.
 *
 * The kernel's tile is 4 rows x up to 3 vectors (12 accumulators, like the
 * dense AVX2 6 x 16 tile; AVX-512 likewise 4 x 48; 2 vectors on narrow
 * grids), over the whole K (no K blocking: a tile's blocks are few). Each decision is noted in the plan
 * (kiln_plan_sparse_note_t) for the compile report.
 */
#include <stdlib.h>
#include <string.h>

#include "lowering/lower_nn_impl.h"
#include "lowering/plan.h"
#include "lowering/sparse_block.h"

static kiln_status_t note_add(kiln_plan_t* p, const kiln_plan_sparse_note_t* n) {
  if (p->n_sparse_notes == p->cap_sparse_notes) {
    int32_t cap = p->cap_sparse_notes ? 2 * p->cap_sparse_notes : 16;
    void* q = realloc(p->sparse_notes, sizeof *n * (size_t)cap);
    if (!q) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory (sparse notes)");
    p->sparse_notes = q;
    p->cap_sparse_notes = cap;
  }
  p->sparse_notes[p->n_sparse_notes++] = *n;
  return NULL;
}

/* Whether block (b, tile, kb) of the weights is all zero. */
static bool block_zero(nn_get_fn get, const void* user, int64_t b, int64_t r0, int64_t r1, int64_t k0, int64_t k1) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t k = k0; k < k1; ++k)
      if (get(user, b, r, k) != 0.0) return false;
  return true;
}

static int64_t sparse_nr(const kiln_lower_ctx_t* ctx, int64_t N) {
  int64_t lanes, regs;
  nn_simd(ctx, &lanes, &regs);
  int64_t vecs = (regs - 4) / KILN_SPARSE_BLOCK_ROWS;
  if (vecs > 3) vecs = 3;
  if (vecs < 1) vecs = 1;
  /* A narrow output (a 7x7 conv's 64-column grid) in whole 2-vector tiles
   * rather than 3-vector ones and a partial tile: measured 1.4x faster on
   * ResNet-18's 512x7x7 convs (AVX2), slower on the wider grids. */
  if (vecs == 3 && N < 4 * 3 * lanes && N % (3 * lanes) && N % (2 * lanes) == 0) vecs = 2;
  for (int64_t v = vecs; v >= 1; --v)
    if (N >= v * lanes) return v * lanes;
  return N > 0 ? N : 1;
}

kiln_status_t nn_sparse_try(kiln_lower_ctx_t* ctx, nn_gemm_t* g, int64_t nb, nn_get_fn get, const void* user,
                            nn_sparse_t* sp) {
  memset(sp, 0, sizeof *sp);
  const int64_t R = KILN_SPARSE_BLOCK_ROWS, M = g->M, K = g->K;
  const int64_t T = g->taps > 0 ? g->taps : 1, KO = K / T;
  if (ctx->plan->sparse_mode == KILN_SPARSE_OFF || M <= 0 || KO <= 0 || nb <= 0) return NULL;
  /* A channel count the block run does not divide: one channel per block
   * (the pruner's wider blocks are then several zero blocks here). */
  int64_t kr = kiln_sparse_block_channels(T);
  if (KO % kr) kr = 1;
  const int64_t tiles = (M + R - 1) / R, kblocks = KO / kr, kw = kr * T;
  uint8_t* nz = malloc((size_t)(nb * tiles * kblocks) + 1);
  if (!nz) return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory (block-sparse weights)");
  int64_t nnzb = 0, most = 0;
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t r1 = (t + 1) * R < M ? (t + 1) * R : M;
      int64_t here = 0;
      for (int64_t k = 0; k < kblocks; ++k) {
        uint8_t v = !block_zero(get, user, b, t * R, r1, k * kw, (k + 1) * kw);
        nz[(b * tiles + t) * kblocks + k] = v;
        here += v;
      }
      nnzb += here;
      if (here > most) most = here;
    }
  const int64_t total = nb * tiles * kblocks;
  kiln_plan_sparse_note_t note = {ctx->node_index, R, kw, (double)(total - nnzb) / (double)total, 0, 0, false};
  const int64_t mr = g->mr > 0 ? g->mr : 1;
  note.dense_bytes = nb * ((M + mr - 1) / mr) * mr * K * (int64_t)sizeof(float);
  note.sparse_bytes = (nnzb * kw * R + nnzb + nb * (tiles + 1)) * (int64_t)sizeof(float);
  note.sparse = ctx->plan->sparse_mode == KILN_SPARSE_ON || note.zero_blocks >= KILN_SPARSE_AUTO_MIN_ZERO;
  kiln_status_t s = NULL;
  if (note.zero_blocks > 0 || note.sparse) s = note_add(ctx->plan, &note);
  if (s || !note.sparse) {
    free(nz);
    return s;
  }
  /* ptr, kidx and vals: tile-major, blocks in k order (the input plane is
   * then read front to back by each tile). */
  const int64_t nbk = nnzb > 0 ? nnzb : 1;
  int32_t* ptr = calloc((size_t)(nb * (tiles + 1)), sizeof(int32_t));
  int32_t* kidx = calloc((size_t)nbk, sizeof(int32_t));
  float* vals = NULL;
  if (!ptr || !kidx || nnzb > INT32_MAX) {
    free(nz), free(ptr), free(kidx);
    return kiln_make_status(KILN_OUT_OF_MEMORY, "out of memory (block-sparse weights)");
  }
  s = nn_alloc_f32(nbk * kw * R, "block-sparse weights", &vals);
  if (s) {
    free(nz), free(ptr), free(kidx);
    return s;
  }
  int64_t j = 0;
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t t = 0; t < tiles; ++t) {
      ptr[b * (tiles + 1) + t] = (int32_t)j;
      for (int64_t k = 0; k < kblocks; ++k) {
        if (!nz[(b * tiles + t) * kblocks + k]) continue;
        kidx[j] = (int32_t)(k * kr);
        for (int64_t c = 0; c < kw; ++c)
          for (int64_t i = 0; i < R && t * R + i < M; ++i) vals[(j * kw + c) * R + i] = (float)get(user, b, t * R + i, k * kw + c);
        ++j;
      }
      ptr[b * (tiles + 1) + t + 1] = (int32_t)j;
    }
  free(nz);
  int64_t pshape[2] = {nb, tiles + 1}, kshape[1] = {nbk}, vshape[3] = {nbk, kw, R};
  s = nn_const_typed(ctx, "sptr", KILN_DTYPE_I32, 2, pshape, ptr, &sp->ptr);
  if (s) {
    free(kidx), free(vals);
    return s;
  }
  s = nn_const_typed(ctx, "sidx", KILN_DTYPE_I32, 1, kshape, kidx, &sp->kidx);
  if (s) {
    free(vals);
    return s;
  }
  KILN_RETURN_IF_ERROR(nn_const_typed(ctx, "svals", KILN_DTYPE_F32, 3, vshape, vals, &sp->vals));
  sp->kr = kr;
  sp->nnzb = nnzb;
  sp->max_blocks = most;
  sp->tiles = tiles;
  /* the sparse kernel's tile: 4 rows, whole K (see the header) */
  g->mr = R;
  g->nr = sparse_nr(ctx, g->N);
  g->kc = KO;
  const int64_t nct = (1 << 20) / (int64_t)sizeof(float) / (kw * g->nr > 0 ? kw * g->nr : 1);
  g->nc_tiles = nct < 1 ? 1 : nct;
  g->sparse = sp;
  return NULL;
}
