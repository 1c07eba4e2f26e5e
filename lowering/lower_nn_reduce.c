/* The Reduce* family: Mean, Sum, Max, Min, Prod, L1, L2, SumSquare, LogSum
 * and LogSumExp (each a map per element, a fold and a finish; see
 * ir/ops/nn_reduce.c).
 *
 * The axes (attribute, or a constant input from ReduceSum-13 / ReduceMean-18
 * / ReduceMax-18 on) split the input dims into runs of kept and reduced
 * dims; size-1 dims are dropped and each run is merged into one dim, so the
 * kernel works on a flat view such as [kept][reduced] or
 * [kept][reduced][kept]. When the last run is reduced, every output element
 * reduces a contiguous row (16 lanes at a time for f32, nn_lane_reduce);
 * when it is kept, a PRIVATE row of that extent accumulates and the loop
 * along it vectorizes. A row of 64k elements or more is reduced in blocks
 * by two kernels (reduce_blocked: accurate and parallel). Floats accumulate
 * in f32 (the reference uses double: the difference is fp32 reassociation
 * error), integers in i64 wrapping like
 * the reference; Mean divides by the group size (0/0 = NaN for floats, 0 for
 * integers, as in the reference), Max starts from -inf / the dtype's lowest,
 * Min from +inf / its highest, Prod from 1. LogSumExp runs a Max reduction
 * into a temp first and sums exp(x - max) (f32 exp overflows past x = 88).
 * noop_with_empty_axes with no axes aliases the output to the input.
 */
#include <math.h>
#include <string.h>

#include "lowering/lower_nn_impl.h"

typedef kiln_nn_red_kind_t red_kind_t;

typedef struct rd_s {
  red_kind_t kind;
  const tir_buffer_t* xv;
  int32_t ng;
  int64_t gdim[KILN_MAX_RANK];
  bool gred[KILN_MAX_RANK];
  const tir_expr_t* gidx[KILN_MAX_RANK]; /* loop index per group (last: set by the row) */
  kiln_dtype_t xt, acc_t;
  const tir_buffer_t* shift; /* LogSumExp: the max per output, shaped as the flat output */
} rd_t;

/* The LogSumExp shift at output index |yidx|: the max, or 0 when it is
 * infinite (all -inf, empty, or +inf: the plain sum then gives the
 * reference's -inf / inf without an inf - inf NaN). */
static const tir_expr_t* rd_shift(nn_kb_t* kb, const rd_t* r, const tir_expr_t* const* yidx) {
  tir_ctx_t* t = kb->t;
  const tir_expr_t* m = tir_load(t, r->shift, yidx);
  const tir_expr_t* inf =
      tir_bin(t, TIR_EQ, tir_call(t, TIR_FABS, 1, m, NULL, NULL), tir_const(t, r->acc_t, INFINITY));
  return tir_select(t, inf, tir_const(t, r->acc_t, 0.0), m);
}

/* Element |idx| in the accumulator dtype, mapped for the kind. */
static const tir_expr_t* rd_val(nn_kb_t* kb, const rd_t* r, const tir_expr_t* const* idx) {
  tir_ctx_t* t = kb->t;
  const tir_expr_t* v = tir_cast(t, r->acc_t, tir_load(t, r->xv, idx));
  switch (r->kind) {
    case KILN_NN_RED_L1:
      return kiln_dtype_is_float(r->acc_t) ? tir_call(t, TIR_FABS, 1, v, NULL, NULL)
                                        : tir_bin(t, TIR_MAX, v, tir_sub(t, nn_i(kb, 0), v));
    case KILN_NN_RED_L2:
    case KILN_NN_RED_SUMSQ: return tir_mul(t, v, v);
    case KILN_NN_RED_LOGSUMEXP: {
      /* exp(x - max): the kept indices of |idx| index the shift */
      const tir_expr_t* yidx[KILN_MAX_RANK];
      int32_t n = 0;
      for (int32_t g = 0; g < r->ng; ++g)
        if (!r->gred[g]) yidx[n++] = idx[g];
      if (n == 0) yidx[n++] = nn_i(kb, 0);
      return tir_call(t, TIR_EXP, 1, tir_sub(t, v, rd_shift(kb, r, yidx)), NULL, NULL);
    }
    default: return v;
  }
}

/* The finished value of accumulator |v| over |group| elements, stored at
 * |yidx| of the flat output. */
static const tir_expr_t* rd_finish(nn_kb_t* kb, const rd_t* r, const tir_expr_t* v, int64_t group,
                                   const tir_expr_t* const* yidx) {
  tir_ctx_t* t = kb->t;
  switch (r->kind) {
    case KILN_NN_RED_MEAN: return tir_bin(t, TIR_DIV, v, tir_const(t, r->acc_t, (double)group));
    case KILN_NN_RED_L2: return tir_call(t, TIR_SQRT, 1, v, NULL, NULL);
    case KILN_NN_RED_LOGSUM: return tir_call(t, TIR_LOG, 1, v, NULL, NULL);
    case KILN_NN_RED_LOGSUMEXP: return tir_add(t, tir_call(t, TIR_LOG, 1, v, NULL, NULL), rd_shift(kb, r, yidx));
    default: return v;
  }
}

static const tir_expr_t* rd_row(nn_kb_t* kb, const void* u, const tir_expr_t* i) {
  const rd_t* r = u;
  const tir_expr_t* idx[KILN_MAX_RANK];
  for (int32_t g = 0; g < r->ng; ++g) idx[g] = g == r->ng - 1 ? i : r->gidx[g];
  return rd_val(kb, r, idx);
}

static const tir_expr_t* lowest(nn_kb_t* kb, kiln_dtype_t xt, kiln_dtype_t acc_t) {
  if (kiln_dtype_is_float(acc_t)) return tir_const(kb->t, acc_t, -INFINITY);
  switch (xt) {
    case KILN_DTYPE_I8: return nn_i(kb, -128);
    case KILN_DTYPE_U8:
    case KILN_DTYPE_BOOL: return nn_i(kb, 0);
    case KILN_DTYPE_I32: return nn_i(kb, INT32_MIN);
    default: return nn_i(kb, INT64_MIN);
  }
}

static const tir_expr_t* highest(nn_kb_t* kb, kiln_dtype_t xt, kiln_dtype_t acc_t) {
  if (kiln_dtype_is_float(acc_t)) return tir_const(kb->t, acc_t, INFINITY);
  switch (xt) {
    case KILN_DTYPE_I8: return nn_i(kb, 127);
    case KILN_DTYPE_U8: return nn_i(kb, 255);
    case KILN_DTYPE_BOOL: return nn_i(kb, 1);
    case KILN_DTYPE_I32: return nn_i(kb, INT32_MAX);
    default: return nn_i(kb, INT64_MAX);
  }
}

/* ---- long rows: two kernels over blocks ------------------------------------
 *
 * One accumulator per lane summing a whole row loses everything past 2^24
 * times the lane's element size (a sum of 7e8 ones came out 2.7e8) and, on a
 * GPU, runs in one work-item. A row of at least SPLIT_MIN elements is cut
 * into blocks of B (about sqrt(row), a multiple of 256, at least 4096): the
 * first kernel reduces every (row, block) pair into a workspace in parallel,
 * the second reduces each row's partials and the row's tail. Each level adds
 * about sqrt(row)/16 values per lane, so the error grows with sqrt(row) terms
 * instead of row terms, and one work-item never loops over more than about
 * sqrt(row) elements. */
enum { SPLIT_MIN = 65536 };

typedef struct blk_s {
  const rd_t* r;
  const tir_expr_t* row; /* kept index (NULL: one row) */
  const tir_expr_t* base;
  const tir_buffer_t* part;
} blk_t;

static const tir_expr_t* blk_x(nn_kb_t* kb, const void* u, const tir_expr_t* i) {
  const blk_t* b = u;
  const tir_expr_t* idx[2];
  int32_t n = 0;
  if (b->row) idx[n++] = b->row;
  idx[n++] = nn_add(kb, b->base, i);
  return rd_val(kb, b->r, idx);
}

static const tir_expr_t* blk_part(nn_kb_t* kb, const void* u, const tir_expr_t* i) {
  const blk_t* b = u;
  return tir_load(kb->t, b->part, NN_IDX(nn_add(kb, b->base, i)));
}

static kiln_status_t reduce_blocked(nn_kb_t* kb, const rd_t* r, const tir_buffer_t* yv, tir_binop_t bop,
                                    const tir_expr_t* ident) {
  tir_ctx_t* t = kb->t;
  const int64_t R = r->gdim[r->ng - 1], rows = r->ng == 2 ? r->gdim[0] : 1;
  int64_t B = 256;
  while (B * B < R) B += 256;
  if (B < 4096) B = 4096;
  const int64_t P = R / B, tail = R - P * B, np = rows * P;
  const tir_buffer_t* part;
  KILN_RETURN_IF_ERROR(kiln_lower_temp(kb->ctx, "part", r->acc_t, 1, &np, &part));
  const int64_t one = 1;
  const tir_expr_t* z = nn_i(kb, 0);
  /* kernel 1: part[q] for q = row * P + block, in parallel over q */
  {
    tir_var_t* vq = nn_var(kb, "q");
    const tir_expr_t* q = nn_v(kb, vq);
    const tir_buffer_t* acc = tir_buffer(t, "acc", r->acc_t, 1, &one, TIR_SCOPE_PRIVATE);
    blk_t b = {r, r->ng == 2 ? nn_divc(kb, q, P) : NULL, nn_mulc(kb, nn_modc(kb, q, P), B), NULL};
    const tir_stmt_t* body = tir_seq2(t, nn_lane_reduce(kb, acc, bop, ident, B, blk_x, &b),
                                      tir_store(t, part, NN_IDX(q), tir_load(t, acc, NN_IDX(z))));
    const tir_stmt_t* s = nn_for(kb, vq, np, tir_alloc(t, acc, body));
    nn_parallel(kb, vq);
    KILN_RETURN_IF_ERROR(nn_emit(kb, s));
  }
  /* kernel 2: per row, the partials, then the tail */
  tir_var_t* vk = nn_var(kb, "k");
  const tir_expr_t* k = rows > 1 ? nn_v(kb, vk) : z;
  const tir_buffer_t* acc = tir_buffer(t, "acc", r->acc_t, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_buffer_t* rest = tir_buffer(t, "rest", r->acc_t, 1, &one, TIR_SCOPE_PRIVATE);
  blk_t bp = {r, NULL, nn_mulc(kb, k, P), part};
  const tir_stmt_t* items[3] = {nn_lane_reduce(kb, acc, bop, ident, P, blk_part, &bp), NULL, NULL};
  if (tail) {
    blk_t bt = {r, r->ng == 2 ? k : NULL, nn_i(kb, P * B), NULL};
    const tir_stmt_t* ts = tir_seq2(
        t, nn_lane_reduce(kb, rest, bop, ident, tail, blk_x, &bt),
        tir_store(t, acc, NN_IDX(z), tir_bin(t, bop, tir_load(t, acc, NN_IDX(z)), tir_load(t, rest, NN_IDX(z)))));
    items[1] = tir_alloc(t, rest, ts);
  }
  const tir_expr_t* v = rd_finish(kb, r, tir_load(t, acc, NN_IDX(z)), R, NN_IDX(k));
  items[2] = tir_store(t, yv, NN_IDX(k), tir_cast(t, yv->dtype, v));
  const tir_stmt_t* s = tir_alloc(t, acc, tir_seq(t, 3, items));
  if (rows > 1) {
    s = nn_for(kb, vk, rows, s);
    if (rows * P >= 256) nn_parallel(kb, vk);
  }
  return nn_emit(kb, s);
}

/* ---- GPU: one invocation per output -----------------------------------------
 *
 * With a kept inner run ([kept][reduced][kept]) the CPU form gives each
 * thread a PRIVATE row of the inner extent and sweeps the reduced dims over
 * it: on a GPU that is one work-item per outer index looping over the whole
 * slab (8 x 512 x 1024 summed over axis 1: 8 work-items of 526,848 loop
 * iterations each, past lavapipe's 65535 an invocation, and the device idle
 * but for 8 lanes). On a device with a loop limit every output is a
 * work-item of one flat PARALLEL loop (the kept indices from its flat
 * index), looping over its own group only; neighbouring work-items read
 * neighbouring inner elements. */
/* The kept indices of r->gidx from flat output index |o| (the kept groups
 * in order, innermost fastest). */
static void kept_from(nn_kb_t* kb, rd_t* r, const tir_expr_t* o, int64_t nout) {
  int64_t stride = 1;
  for (int32_t g = r->ng - 1; g >= 0; --g)
    if (!r->gred[g]) {
      const tir_expr_t* q = stride > 1 ? nn_divc(kb, o, stride) : o;
      stride *= r->gdim[g];
      r->gidx[g] = stride < nout ? nn_modc(kb, q, r->gdim[g]) : q;
    }
}

/* Strided reductions as vectors: on plans whose element-wise nests take
 * lanes (kiln_lower_ctx_t.ew_lanes, Vulkan 4) an invocation takes L
 * adjacent outputs of the contiguous inner kept run, so each step of the
 * reduced loops reads L neighbouring floats (one vec4 texel on Vulkan)
 * instead of a lane per output reading one float each (lavapipe runs such
 * loads as a loop over its 8 SIMD lanes; 8 x 512 x 1024 summed over axis 1,
 * kiln bench alternated with main's build at load 4-8: 11.5-16.8 ms in that
 * form, 2.2-5.8 ms in this). Needs f32 accumulation, the inner kept extent
 * a multiple of L, and the group short enough that the lane
 * loop printed as scalars (a printer that cannot take the texels) still
 * keeps within half the device's loop limit. Returns L, or 1 for the form
 * with one output an invocation. */
static int64_t reduce_cols(nn_kb_t* kb, const rd_t* r, int64_t group) {
  const int64_t L = kb->ctx->target == KILN_TARGET_CLASS_GPU ? kb->ctx->ew_lanes : 0;
  if (L < 2 || r->acc_t != KILN_DTYPE_F32 || r->gred[r->ng - 1] || r->gdim[r->ng - 1] % L != 0) return 1;
  int64_t nout = 1;
  for (int32_t g = 0; g < r->ng; ++g)
    if (!r->gred[g]) nout *= r->gdim[g];
  /* two texels an invocation where the inner extent and the work allow:
   * on lavapipe (8x512x1024 over axis 1, 4 alternated rounds at load 8)
   * 8 columns ran at 2.0-3.2 GFLOP/s, 4 at 0.9-2.2, 16 at 1.7-2.6 */
  const int64_t C = r->gdim[r->ng - 1] % (2 * L) == 0 && nout / (2 * L) >= 64 ? 2 * L : L;
  if (kb->ctx->loop_limit > 0 && group * (C + 1) > kb->ctx->loop_limit / 2) return 1;
  return C;
}

static kiln_status_t reduce_per_cols(nn_kb_t* kb, rd_t* r, const tir_buffer_t* yv, int64_t group, int64_t nout,
                                     int64_t L, tir_binop_t bop, const tir_expr_t* ident) {
  tir_ctx_t* t = kb->t;
  const int64_t W = r->gdim[r->ng - 1], nq = nout / L;
  tir_var_t* vq = nn_var(kb, "q");
  const tir_expr_t* q = nn_v(kb, vq);
  /* column block q: the inner kept index q % (W / L) * L + l, the outer
   * kept indices from q / (W / L) (innermost fastest) */
  const int64_t nouter = nout / W;
  const tir_expr_t* qo = nouter > 1 ? nn_divc(kb, q, W / L) : nn_i(kb, 0);
  int64_t stride = 1;
  for (int32_t g = r->ng - 2; g >= 0; --g)
    if (!r->gred[g]) {
      const tir_expr_t* qd = stride > 1 ? nn_divc(kb, qo, stride) : qo;
      stride *= r->gdim[g];
      r->gidx[g] = stride < nouter ? nn_modc(kb, qd, r->gdim[g]) : qd;
    }
  const tir_buffer_t* acc = tir_buffer(t, "acc", r->acc_t, 1, &L, TIR_SCOPE_PRIVATE);
  tir_var_t* vl[3];
  const tir_expr_t* inner[3];
  const tir_expr_t* qi = nouter > 1 ? nn_modc(kb, q, W / L) : q;
  for (int32_t k = 0; k < 3; ++k) {
    vl[k] = nn_var(kb, "l");
    inner[k] = nn_add(kb, nn_mulc(kb, qi, L), nn_v(kb, vl[k]));
  }
  /* acc[l] = ident; for the reduced indices: acc[l] op= x[..]; y = finish */
  const tir_stmt_t* init = nn_for(kb, vl[0], L, tir_store(t, acc, NN_IDX(nn_v(kb, vl[0])), ident));
  tir_var_t* gv[KILN_MAX_RANK] = {NULL};
  for (int32_t g = 0; g < r->ng; ++g)
    if (r->gred[g]) {
      gv[g] = nn_var(kb, "r");
      r->gidx[g] = nn_v(kb, gv[g]);
    }
  r->gidx[r->ng - 1] = inner[1];
  const tir_expr_t* a1 = nn_v(kb, vl[1]);
  const tir_stmt_t* upd = nn_for(
      kb, vl[1], L, tir_store(t, acc, NN_IDX(a1), tir_bin(t, bop, tir_load(t, acc, NN_IDX(a1)), rd_val(kb, r, r->gidx))));
  for (int32_t g = r->ng - 1; g >= 0; --g)
    if (r->gred[g]) upd = nn_for(kb, gv[g], r->gdim[g], upd);
  r->gidx[r->ng - 1] = inner[2];
  const tir_expr_t* yi[KILN_MAX_RANK];
  int32_t nyi = 0;
  for (int32_t g = 0; g < r->ng; ++g)
    if (!r->gred[g]) yi[nyi++] = r->gidx[g];
  const tir_expr_t* a2 = nn_v(kb, vl[2]);
  const tir_expr_t* v = rd_finish(kb, r, tir_load(t, acc, NN_IDX(a2)), group, yi);
  const tir_stmt_t* fin = nn_for(kb, vl[2], L, tir_store(t, yv, yi, tir_cast(t, yv->dtype, v)));
  for (int32_t k = 0; k < 3; ++k) nn_vectorize(kb, vl[k]);
  const tir_stmt_t* items[3] = {init, upd, fin};
  const tir_stmt_t* s = nn_for(kb, vq, nq, tir_alloc(t, acc, tir_seq(t, 3, items)));
  if (nq > 1) nn_parallel(kb, vq);
  return nn_emit(kb, s);
}

static kiln_status_t reduce_per_output(nn_kb_t* kb, rd_t* r, const tir_buffer_t* yv, int64_t group, tir_binop_t bop,
                                       const tir_expr_t* ident) {
  tir_ctx_t* t = kb->t;
  int64_t nout = 1;
  for (int32_t g = 0; g < r->ng; ++g)
    if (!r->gred[g]) nout *= r->gdim[g];
  const int64_t one = 1;
  const tir_expr_t* z = nn_i(kb, 0);
  const tir_buffer_t* acc = tir_buffer(t, "acc", r->acc_t, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_buffer_t* part = NULL;
  /* A group longer than half the loop limit splits in two kernels: nb
   * chunks of B (about sqrt(group)) per output into a workspace, the
   * reduced indices from the chunk's flat position; then each output folds
   * its nb partials. */
  int64_t B = group, nb = 1;
  if (kb->ctx->loop_limit > 0 && group > kb->ctx->loop_limit / 2) {
    B = 256;
    while (B * B < group) B += 256;
    nb = (group + B - 1) / B;
    if (B > kb->ctx->loop_limit / 2 || nb > kb->ctx->loop_limit / 2)
      return kiln_make_status(KILN_UNSUPPORTED,
                              "%s: %lld values per output pass the device's loop limit of %lld an invocation "
                              "even in %lld chunks",
                              kiln_nn_red_name(r->kind), (long long)group, (long long)kb->ctx->loop_limit,
                              (long long)nb);
    const int64_t np = nout * nb;
    KILN_RETURN_IF_ERROR(kiln_lower_temp(kb->ctx, "part", r->acc_t, 1, &np, &part));
    tir_var_t* vq = nn_var(kb, "q");
    tir_var_t* vj = nn_var(kb, "j");
    const tir_expr_t* q = nn_v(kb, vq);
    kept_from(kb, r, nn_divc(kb, q, nb), nout);
    const tir_expr_t* f = nn_add(kb, nn_mulc(kb, nn_modc(kb, q, nb), B), nn_v(kb, vj));
    int64_t stride = 1;
    for (int32_t g = r->ng - 1; g >= 0; --g)
      if (r->gred[g]) {
        const tir_expr_t* fq = stride > 1 ? nn_divc(kb, f, stride) : f;
        stride *= r->gdim[g];
        r->gidx[g] = stride < group ? nn_modc(kb, fq, r->gdim[g]) : fq;
      }
    const tir_stmt_t* upd =
        tir_store(t, acc, NN_IDX(z), tir_bin(t, bop, tir_load(t, acc, NN_IDX(z)), rd_val(kb, r, r->gidx)));
    if (nb * B != group) upd = tir_if(t, tir_bin(t, TIR_LT, f, nn_i(kb, group)), upd, NULL);
    const tir_stmt_t* items[3] = {tir_store(t, acc, NN_IDX(z), ident), nn_for(kb, vj, B, upd),
                                  tir_store(t, part, NN_IDX(q), tir_load(t, acc, NN_IDX(z)))};
    const tir_stmt_t* s1 = nn_for(kb, vq, np, tir_alloc(t, acc, tir_seq(t, 3, items)));
    nn_parallel(kb, vq);
    KILN_RETURN_IF_ERROR(nn_emit(kb, s1));
  }
  if (!part) {
    const int64_t L = reduce_cols(kb, r, group);
    if (L > 1) return reduce_per_cols(kb, r, yv, group, nout, L, bop, ident);
  }
  tir_var_t* vo = nn_var(kb, "o");
  const tir_expr_t* o = nn_v(kb, vo);
  kept_from(kb, r, o, nout);
  tir_var_t* gv[KILN_MAX_RANK] = {NULL};
  const tir_stmt_t* upd;
  if (part) {
    tir_var_t* vb = nn_var(kb, "b");
    const tir_expr_t* pv = tir_load(t, part, NN_IDX(nn_add(kb, nn_mulc(kb, o, nb), nn_v(kb, vb))));
    upd = nn_for(kb, vb, nb, tir_store(t, acc, NN_IDX(z), tir_bin(t, bop, tir_load(t, acc, NN_IDX(z)), pv)));
  } else {
    for (int32_t g = 0; g < r->ng; ++g)
      if (r->gred[g]) {
        gv[g] = nn_var(kb, "r");
        r->gidx[g] = nn_v(kb, gv[g]);
      }
    upd = tir_store(t, acc, NN_IDX(z), tir_bin(t, bop, tir_load(t, acc, NN_IDX(z)), rd_val(kb, r, r->gidx)));
    for (int32_t g = r->ng - 1; g >= 0; --g)
      if (r->gred[g]) upd = nn_for(kb, gv[g], r->gdim[g], upd);
  }
  const tir_expr_t* yi[KILN_MAX_RANK];
  int32_t nyi = 0;
  for (int32_t g = 0; g < r->ng; ++g)
    if (!r->gred[g]) yi[nyi++] = r->gidx[g];
  const tir_expr_t* v = rd_finish(kb, r, tir_load(t, acc, NN_IDX(z)), group, yi);
  const tir_stmt_t* items[3] = {tir_store(t, acc, NN_IDX(z), ident), upd,
                                tir_store(t, yv, yi, tir_cast(t, yv->dtype, v))};
  const tir_stmt_t* s = nn_for(kb, vo, nout, tir_alloc(t, acc, tir_seq(t, 3, items)));
  if (nout > 1) nn_parallel(kb, vo);
  return nn_emit(kb, s);
}

/* Reduces the runs of |r| (x view, kinds, dtypes set) into the flat output
 * |yv| with the kernel(s) for their layout. */
static kiln_status_t reduce_runs(nn_kb_t* kb, rd_t* r, red_kind_t kind, const tir_buffer_t* yv, int64_t group,
                                 int64_t xnumel) {
  tir_ctx_t* t = kb->t;
  r->kind = kind;
  const bool is_float = kiln_dtype_is_float(r->acc_t);
  const tir_binop_t bop =
      kind == KILN_NN_RED_MAX ? TIR_MAX : kind == KILN_NN_RED_MIN ? TIR_MIN : kind == KILN_NN_RED_PROD ? TIR_MUL : TIR_ADD;
  const tir_expr_t* ident = kind == KILN_NN_RED_MAX   ? lowest(kb, r->xt, r->acc_t)
                            : kind == KILN_NN_RED_MIN ? highest(kb, r->xt, r->acc_t)
                                              : tir_const(t, r->acc_t, kind == KILN_NN_RED_PROD ? 1.0 : 0.0);

  /* Loop variables: kept groups outermost (in order), then reduced ones;
   * when the last group is kept it becomes the innermost row loop. */
  const bool last_kept = !r->gred[r->ng - 1];
  /* [row] or [kept][row] with a long row: blocked, in two kernels. */
  if (!last_kept && r->gdim[r->ng - 1] >= SPLIT_MIN && (r->ng == 1 || (r->ng == 2 && !r->gred[0])))
    return reduce_blocked(kb, r, yv, bop, ident);
  /* a device with a loop limit (lavapipe): an invocation per output. PoCL
   * (no limit) runs the CPU form's rows at 0.6 ms for 8 x 512 x 1024 over
   * axis 1, the per-output form at 13-22 ms */
  /* ... and on plans with lanes (Vulkan) L outputs an invocation whatever
   * the device's limit: a GPU thread sweeping a PRIVATE row of the inner
   * extent is the slow form there too */
  if (last_kept && kb->ctx->target == KILN_TARGET_CLASS_GPU &&
      (kb->ctx->loop_limit > 0 || reduce_cols(kb, r, group) > 1))
    return reduce_per_output(kb, r, yv, group, bop, ident);
  tir_var_t* gv[KILN_MAX_RANK];
  for (int32_t g = 0; g < r->ng; ++g) {
    gv[g] = nn_var(kb, r->gred[g] ? "r" : "k");
    r->gidx[g] = nn_v(kb, gv[g]);
  }
  const tir_expr_t* yi[KILN_MAX_RANK];
  int32_t nyi = 0;
  for (int32_t g = 0; g < r->ng; ++g)
    if (!r->gred[g]) yi[nyi++] = r->gidx[g];
  if (nyi == 0) yi[nyi++] = nn_i(kb, 0);
  const tir_stmt_t* s;
  if (!last_kept) {
    int64_t one = 1;
    const tir_buffer_t* acc = tir_buffer(t, "acc", r->acc_t, 1, &one, TIR_SCOPE_PRIVATE);
    const tir_expr_t* z = nn_i(kb, 0);
    /* reduced groups other than the last: serial loops around a row
     * reduction into a partial, folded into acc */
    const tir_buffer_t* part = tir_buffer(t, "part", r->acc_t, 1, &one, TIR_SCOPE_PRIVATE);
    const tir_stmt_t* row = tir_seq2(
        t, nn_lane_reduce(kb, part, bop, ident, r->gdim[r->ng - 1], rd_row, r),
        tir_store(t, acc, NN_IDX(z),
                  tir_bin(t, bop, tir_load(t, acc, NN_IDX(z)), tir_load(t, part, NN_IDX(z)))));
    row = tir_alloc(t, part, row);
    for (int32_t g = r->ng - 2; g >= 0; --g)
      if (r->gred[g]) row = nn_for(kb, gv[g], r->gdim[g], row);
    const tir_expr_t* v = rd_finish(kb, r, tir_load(t, acc, NN_IDX(z)), group, yi);
    const tir_stmt_t* items[3] = {tir_store(t, acc, NN_IDX(z), ident), row,
                                  tir_store(t, yv, yi, tir_cast(t, yv->dtype, v))};
    s = tir_alloc(t, acc, tir_seq(t, 3, items));
    for (int32_t g = r->ng - 1; g >= 0; --g)
      if (!r->gred[g]) s = nn_for(kb, gv[g], r->gdim[g], s);
  } else {
    const int64_t L = r->gdim[r->ng - 1];
    const tir_buffer_t* acc = tir_buffer(t, "acc", r->acc_t, 1, &L, TIR_SCOPE_PRIVATE);
    const tir_expr_t* l = r->gidx[r->ng - 1];
    const tir_expr_t* xi[KILN_MAX_RANK];
    for (int32_t g = 0; g < r->ng; ++g) xi[g] = r->gidx[g];
    /* init and finalize loops need their own variables */
    tir_var_t* vi0 = nn_var(kb, "l");
    tir_var_t* vi1 = nn_var(kb, "l");
    const tir_expr_t* l0 = nn_v(kb, vi0);
    const tir_expr_t* l1 = nn_v(kb, vi1);
    const tir_stmt_t* init = nn_for(kb, vi0, L, tir_store(t, acc, NN_IDX(l0), ident));
    const tir_stmt_t* upd = tir_store(
        t, acc, NN_IDX(l), tir_bin(t, bop, tir_load(t, acc, NN_IDX(l)), rd_val(kb, r, xi)));
    upd = nn_for(kb, gv[r->ng - 1], L, upd);
    for (int32_t g = r->ng - 2; g >= 0; --g)
      if (r->gred[g]) upd = nn_for(kb, gv[g], r->gdim[g], upd);
    yi[nyi - 1] = l1;
    const tir_expr_t* v = rd_finish(kb, r, tir_load(t, acc, NN_IDX(l1)), group, yi);
    const tir_stmt_t* fin = nn_for(kb, vi1, L, tir_store(t, yv, yi, tir_cast(t, yv->dtype, v)));
    if (is_float) {
      nn_vectorize(kb, vi0);
      nn_vectorize(kb, gv[r->ng - 1]);
      nn_vectorize(kb, vi1);
    }
    const tir_stmt_t* items[3] = {init, upd, fin};
    s = tir_alloc(t, acc, tir_seq(t, 3, items));
    for (int32_t g = r->ng - 2; g >= 0; --g)
      if (!r->gred[g]) s = nn_for(kb, gv[g], r->gdim[g], s);
  }
  /* Parallel over the outermost kept group when there is enough work. */
  if (!r->gred[0] && (r->ng > 1 || !last_kept) && r->gdim[0] > 1 &&
      xnumel >= 16384) {
    nn_parallel(kb, gv[0]);
  }
  return nn_emit(kb, s);
}


static kiln_status_t reduce(kiln_lower_ctx_t* ctx, red_kind_t kind) {
  const char* op = kiln_nn_red_name(kind);
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  const tir_buffer_t *x = ctx->in[0], *y = ctx->out[0];
  if (!x || !y) return kiln_make_status(KILN_INTERNAL, "%s: missing operand", op);
  int64_t keep = 1, noop = 0;
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "keepdims", 1, &keep));
  KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "noop_with_empty_axes", 0, &noop));
  const bool from_input = ctx->opset >= (kind == KILN_NN_RED_SUM ? 13 : 18);
  int64_t axes[KILN_MAX_RANK];
  int64_t count = 0;
  if (from_input && ctx->n_in > 1 && ctx->in[1]) {
    /* An empty axes input is empty whatever its (run-time) values. */
    if (tir_buffer_numel(ctx->in[1]) > 0) {
      if (!nn_is_const(ctx, 1)) {
        return kiln_make_status(KILN_UNSUPPORTED, "%s: axes must be a compile-time constant", op);
      }
      const kiln_array_t* a = &ctx->in_tensor[1]->value;
      count = kiln_array_numel(a);
      if (count > KILN_MAX_RANK) {
        return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: %lld axes", op, (long long)count);
      }
      for (int64_t i = 0; i < count; ++i) axes[i] = kiln_load_i64(a->dtype, a->data, (size_t)i);
    }
  } else if (!from_input) {
    const int64_t* v = NULL;
    int64_t n = -1;
    KILN_RETURN_IF_ERROR(kiln_attr_ints(ctx->node, "axes", &v, &n));
    if (n > KILN_MAX_RANK) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: %lld axes", op, (long long)n);
    for (int64_t i = 0; i < n; ++i) axes[i] = v[i];
    count = n < 0 ? 0 : n;
  }
  if (count == 0 && noop) return kiln_lower_alias(ctx, 0, 0);
  bool red[KILN_MAX_RANK] = {false};
  for (int32_t d = 0; d < x->rank; ++d) red[d] = count == 0;
  for (int64_t i = 0; i < count; ++i) {
    int64_t a = axes[i] < 0 ? axes[i] + x->rank : axes[i];
    if (a < 0 || a >= x->rank) {
      return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: axis %lld out of range", op,
                              (long long)axes[i]);
    }
    red[a] = true;
  }
  if (tir_buffer_numel(y) == 0) return NULL;
  rd_t r;
  memset(&r, 0, sizeof r);
  r.kind = kind;
  r.ng = nn_dim_runs(x, red, r.gdim, r.gred);
  int64_t nout = 1, group = 1;
  int64_t yshape[KILN_MAX_RANK];
  int32_t ny = 0;
  for (int32_t g = 0; g < r.ng; ++g) {
    if (r.gred[g]) group *= r.gdim[g];
    else nout *= (yshape[ny++] = r.gdim[g]);
  }
  if (ny == 0) yshape[ny++] = 1;
  const tir_buffer_t* yv;
  KILN_RETURN_IF_ERROR(nn_view(ctx, x, "xflat", r.ng, r.gdim, &r.xv));
  KILN_RETURN_IF_ERROR(nn_view(ctx, y, "yflat", ny, yshape, &yv));
  r.xt = x->dtype;
  /* f64 accumulates in f64, other floats in f32 */
  r.acc_t = x->dtype == KILN_DTYPE_F64          ? KILN_DTYPE_F64
            : kiln_dtype_is_float(x->dtype) ? KILN_DTYPE_F32
                                            : KILN_DTYPE_I64;
  if (kind == KILN_NN_RED_LOGSUMEXP) {
    /* log(sum(exp(x - m))) + m with m the max: a first reduction into a
     * temp, so exp cannot overflow f32 (it would past x = 88) */
    KILN_RETURN_IF_ERROR(kiln_lower_temp(ctx, "lse_max", r.acc_t, ny, yshape, &r.shift));
    KILN_RETURN_IF_ERROR(reduce_runs(&kb, &r, KILN_NN_RED_MAX, r.shift, group, tir_buffer_numel(x)));
  }
  (void)nout;
  return reduce_runs(&kb, &r, kind, yv, group, tir_buffer_numel(x));
}

kiln_status_t kiln_lower_nn_reduce_mean(kiln_lower_ctx_t* ctx) { return reduce(ctx, KILN_NN_RED_MEAN); }
kiln_status_t kiln_lower_nn_reduce_sum(kiln_lower_ctx_t* ctx) { return reduce(ctx, KILN_NN_RED_SUM); }
kiln_status_t kiln_lower_nn_reduce_max(kiln_lower_ctx_t* ctx) { return reduce(ctx, KILN_NN_RED_MAX); }
kiln_status_t kiln_lower_nn_reduce_min(kiln_lower_ctx_t* ctx) { return reduce(ctx, KILN_NN_RED_MIN); }
kiln_status_t kiln_lower_nn_reduce_prod(kiln_lower_ctx_t* ctx) { return reduce(ctx, KILN_NN_RED_PROD); }
kiln_status_t kiln_lower_nn_reduce_l1(kiln_lower_ctx_t* ctx) { return reduce(ctx, KILN_NN_RED_L1); }
kiln_status_t kiln_lower_nn_reduce_l2(kiln_lower_ctx_t* ctx) { return reduce(ctx, KILN_NN_RED_L2); }
kiln_status_t kiln_lower_nn_reduce_sum_square(kiln_lower_ctx_t* ctx) { return reduce(ctx, KILN_NN_RED_SUMSQ); }
kiln_status_t kiln_lower_nn_reduce_log_sum(kiln_lower_ctx_t* ctx) { return reduce(ctx, KILN_NN_RED_LOGSUM); }
kiln_status_t kiln_lower_nn_reduce_log_sum_exp(kiln_lower_ctx_t* ctx) { return reduce(ctx, KILN_NN_RED_LOGSUMEXP); }
