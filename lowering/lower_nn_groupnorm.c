/* InstanceNormalization and GroupNormalization (see ir/ops/nn_groupnorm.c).
 *
 * x [N, C, spatial...] is viewed as rows [N*G][C/G][plane], each row one
 * (n, group) block, contiguous in memory. A row's mean and then its biased
 * variance come from two nn_lane_reduce passes (16 lanes, so the f32 sums
 * keep their accuracy), like LayerNormalization; the output pass runs
 * channel by channel (scale and bias folded into one fma per element, the
 * plane loop vectorized).
 *
 * Short rows are one kernel, PARALLEL over rows. A long row (LONG_ROW
 * elements or more, a diffusion UNet's GroupNorm has 160k) would leave a GPU
 * with N*G work-items each looping over the whole row (and pass Vulkan's
 * per-invocation loop limit), so it is cut into P equal blocks of B: kernel 1
 * takes each (row, block)'s mean and sum of squared deviations in parallel,
 * kernel 2 combines a row's blocks (Chan et al.: M2 = sum M2_b + B * sum
 * (mean_b - mean)^2, no E[x^2] - E[x]^2 cancellation) into a stats temp, and
 * kernel 3 writes the output block by block in parallel, like kernel 1.
 */
#include <math.h>
#include <string.h>

#include "lowering/lower_nn_impl.h"

enum { LONG_ROW = 32768 };

typedef struct gn_s {
  const tir_buffer_t* xv; /* [rows][R] */
  const tir_expr_t *row, *base; /* base: first element of the block (NULL: 0) */
  const tir_buffer_t* mean;     /* PRIVATE [1] */
} gn_t;

static const tir_expr_t* gn_x(nn_kb_t* kb, const void* u, const tir_expr_t* i) {
  const gn_t* g = u;
  return nn_ldf(kb, g->xv, NN_IDX(g->row, g->base ? nn_add(kb, g->base, i) : i));
}

static const tir_expr_t* gn_dev2(nn_kb_t* kb, const void* u, const tir_expr_t* i) {
  return nn_sqdev(kb, gn_x(kb, u, i), ((const gn_t*)u)->mean);
}

/* Mean into g->mean[0], then the sum of squared deviations into m2[0], over
 * |n| elements from g->base. */
static const tir_stmt_t* gn_moments(nn_kb_t* kb, const gn_t* g, int64_t n, const tir_buffer_t* m2) {
  tir_ctx_t* t = kb->t;
  const tir_expr_t* z = nn_i(kb, 0);
  const tir_stmt_t* items[3] = {
      nn_lane_reduce(kb, g->mean, TIR_ADD, nn_f(kb, 0.0), n, gn_x, g),
      tir_store(t, g->mean, NN_IDX(z), tir_bin(t, TIR_DIV, tir_load(t, g->mean, NN_IDX(z)), nn_f(kb, (double)n))),
      nn_lane_reduce(kb, m2, TIR_ADD, nn_f(kb, 0.0), n, gn_dev2, g)};
  return tir_seq(t, 3, items);
}

/* The parameters of one normalisation: views and the channel layout. */
typedef struct gp_s {
  const tir_buffer_t *xv, *yv, *yrow, *sv, *bv; /* x [rows][R], y [rows][cpg][plane] and [rows][R], scale, bias */
  int64_t G, cpg, plane;
  bool per_group;
} gp_t;

/* Channel c of row |row|: y = x * a + b with a = inv * scale, b = bias -
 * mean * a (|ab| a PRIVATE [2]), the plane loop vectorized. */
static const tir_stmt_t* gn_channel(nn_kb_t* kb, const gp_t* p, const tir_expr_t* row, const tir_expr_t* c,
                                    const tir_expr_t* mean, const tir_expr_t* inv, const tir_buffer_t* ab) {
  tir_ctx_t* t = kb->t;
  const tir_expr_t *z = nn_i(kb, 0), *o1 = nn_i(kb, 1);
  const tir_expr_t* grp = nn_modc(kb, row, p->G);
  const tir_expr_t* pi = p->per_group ? grp : nn_add(kb, nn_mulc(kb, grp, p->cpg), c);
  const tir_stmt_t* set_ab = tir_seq2(
      t, tir_store(t, ab, NN_IDX(z), tir_mul(t, inv, nn_ldf(kb, p->sv, NN_IDX(pi)))),
      tir_store(t, ab, NN_IDX(o1), tir_sub(t, nn_ldf(kb, p->bv, NN_IDX(pi)), tir_mul(t, mean, tir_load(t, ab, NN_IDX(z))))));
  tir_var_t* vp = nn_var(kb, "p");
  const tir_expr_t* pe = nn_v(kb, vp);
  gn_t g = {p->xv, row, NULL, NULL};
  const tir_expr_t* v = tir_call(t, TIR_FMA, 3, gn_x(kb, &g, nn_add(kb, nn_mulc(kb, c, p->plane), pe)),
                                 tir_load(t, ab, NN_IDX(z)), tir_load(t, ab, NN_IDX(o1)));
  const tir_stmt_t* per_p = nn_for(kb, vp, p->plane, nn_stf(kb, p->yv, NN_IDX(row, c, pe), v));
  nn_vectorize(kb, vp);
  return tir_seq2(t, set_ab, per_p);
}

static const tir_expr_t* inv_std(nn_kb_t* kb, const tir_expr_t* m2, int64_t R, float eps) {
  const tir_expr_t* var = tir_bin(kb->t, TIR_DIV, m2, nn_f(kb, (double)R));
  return tir_call(kb->t, TIR_RSQRT, 1, tir_add(kb->t, var, nn_f(kb, eps)), NULL, NULL);
}

/* Rows of up to LONG_ROW elements: one kernel. */
static kiln_status_t gn_short(nn_kb_t* kb, const gp_t* p, int64_t rows, float eps) {
  tir_ctx_t* t = kb->t;
  const int64_t one = 1, two = 2, R = p->cpg * p->plane;
  gn_t g = {p->xv, NULL, NULL, tir_buffer(t, "mean", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE)};
  const tir_buffer_t* m2 = tir_buffer(t, "m2", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE);
  const tir_buffer_t* ab = tir_buffer(t, "ab", KILN_DTYPE_F32, 1, &two, TIR_SCOPE_PRIVATE);
  tir_var_t* vr = nn_var(kb, "row");
  g.row = nn_v(kb, vr);
  const tir_expr_t* z = nn_i(kb, 0);
  tir_var_t* vc = nn_var(kb, "c");
  const tir_stmt_t* chans =
      nn_for(kb, vc, p->cpg,
             gn_channel(kb, p, g.row, nn_v(kb, vc), tir_load(t, g.mean, NN_IDX(z)), tir_load(t, m2, NN_IDX(z)), ab));
  const tir_stmt_t* items[3] = {gn_moments(kb, &g, R, m2),
                                tir_store(t, m2, NN_IDX(z), inv_std(kb, tir_load(t, m2, NN_IDX(z)), R, eps)), chans};
  const tir_stmt_t* s = tir_alloc(t, g.mean, tir_alloc(t, m2, tir_alloc(t, ab, tir_seq(t, 3, items))));
  s = nn_for(kb, vr, rows, s);
  if (rows > 1 && rows * R >= 4096) nn_parallel(kb, vr);
  return nn_emit(kb, s);
}

/* Partials [rows * P][2] (block mean, block M2) read as a row of P. */
typedef struct gpart_s {
  const tir_buffer_t* part;
  const tir_expr_t* first; /* row * P */
  const tir_buffer_t* mean; /* for the deviations; NULL otherwise */
  int64_t col;
} gpart_t;

static const tir_expr_t* gpart_val(nn_kb_t* kb, const void* u, const tir_expr_t* i) {
  const gpart_t* q = u;
  const tir_expr_t* v = tir_load(kb->t, q->part, NN_IDX(nn_add(kb, q->first, i), nn_i(kb, q->col)));
  return q->mean ? nn_sqdev(kb, v, q->mean) : v;
}

/* Long rows: the three kernels described at the top. */
static kiln_status_t gn_long(nn_kb_t* kb, const gp_t* p, int64_t rows, int64_t B, float eps) {
  tir_ctx_t* t = kb->t;
  const int64_t R = p->cpg * p->plane, P = R / B, one = 1;
  const int64_t pshape[2] = {rows * P, 2}, sshape[2] = {rows, 2};
  const tir_buffer_t *part, *stats;
  KILN_RETURN_IF_ERROR(kiln_lower_temp(kb->ctx, "gn_part", KILN_DTYPE_F32, 2, pshape, &part));
  KILN_RETURN_IF_ERROR(kiln_lower_temp(kb->ctx, "gn_stats", KILN_DTYPE_F32, 2, sshape, &stats));
  const tir_expr_t *z = nn_i(kb, 0), *o1 = nn_i(kb, 1);
  {
    tir_var_t* vq = nn_var(kb, "q");
    const tir_expr_t* q = nn_v(kb, vq);
    gn_t g = {p->xv, nn_divc(kb, q, P), nn_mulc(kb, nn_modc(kb, q, P), B),
              tir_buffer(t, "mean", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE)};
    const tir_buffer_t* m2 = tir_buffer(t, "m2", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE);
    const tir_stmt_t* items[3] = {gn_moments(kb, &g, B, m2),
                                  tir_store(t, part, NN_IDX(q, z), tir_load(t, g.mean, NN_IDX(z))),
                                  tir_store(t, part, NN_IDX(q, o1), tir_load(t, m2, NN_IDX(z)))};
    const tir_stmt_t* s = nn_for(kb, vq, rows * P, tir_alloc(t, g.mean, tir_alloc(t, m2, tir_seq(t, 3, items))));
    nn_parallel(kb, vq);
    KILN_RETURN_IF_ERROR(nn_emit(kb, s));
  }
  {
    tir_var_t* vr = nn_var(kb, "row");
    const tir_expr_t* r = nn_v(kb, vr);
    const tir_buffer_t* mean = tir_buffer(t, "mean", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE);
    const tir_buffer_t* m2 = tir_buffer(t, "m2", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE);
    const tir_buffer_t* dev = tir_buffer(t, "dev", KILN_DTYPE_F32, 1, &one, TIR_SCOPE_PRIVATE);
    gpart_t pm = {part, nn_mulc(kb, r, P), NULL, 0}, pm2 = {part, pm.first, NULL, 1}, pd = {part, pm.first, mean, 0};
    const tir_expr_t* m = tir_load(t, mean, NN_IDX(z));
    const tir_expr_t* total = tir_add(t, tir_load(t, m2, NN_IDX(z)),
                                      tir_mul(t, nn_f(kb, (double)B), tir_load(t, dev, NN_IDX(z))));
    const tir_stmt_t* items[6] = {
        nn_lane_reduce(kb, mean, TIR_ADD, nn_f(kb, 0.0), P, gpart_val, &pm),
        tir_store(t, mean, NN_IDX(z), tir_bin(t, TIR_DIV, m, nn_f(kb, (double)P))),
        nn_lane_reduce(kb, m2, TIR_ADD, nn_f(kb, 0.0), P, gpart_val, &pm2),
        nn_lane_reduce(kb, dev, TIR_ADD, nn_f(kb, 0.0), P, gpart_val, &pd),
        tir_store(t, stats, NN_IDX(r, z), m),
        tir_store(t, stats, NN_IDX(r, o1), inv_std(kb, total, R, eps))};
    const tir_stmt_t* s = tir_alloc(t, mean, tir_alloc(t, m2, tir_alloc(t, dev, tir_seq(t, 6, items))));
    s = nn_for(kb, vr, rows, s);
    if (rows > 1) nn_parallel(kb, vr);
    KILN_RETURN_IF_ERROR(nn_emit(kb, s));
  }
  /* kernel 3: block by block again, the channel (and so the parameters)
   * per element: a block may cross channels */
  tir_var_t* vq = nn_var(kb, "q");
  tir_var_t* vi = nn_var(kb, "i");
  const tir_expr_t *q = nn_v(kb, vq), *i = nn_v(kb, vi);
  const tir_expr_t* r = nn_divc(kb, q, P);
  const tir_expr_t* e = nn_add(kb, nn_mulc(kb, nn_modc(kb, q, P), B), i);
  const tir_expr_t* c = nn_divc(kb, e, p->plane);
  const tir_expr_t* grp = nn_modc(kb, r, p->G);
  const tir_expr_t* pi = p->per_group ? grp : nn_add(kb, nn_mulc(kb, grp, p->cpg), c);
  const tir_expr_t* a = tir_mul(t, tir_load(t, stats, NN_IDX(r, o1)), nn_ldf(kb, p->sv, NN_IDX(pi)));
  const tir_expr_t* dx = tir_sub(t, nn_ldf(kb, p->xv, NN_IDX(r, e)), tir_load(t, stats, NN_IDX(r, z)));
  const tir_expr_t* v = tir_call(t, TIR_FMA, 3, dx, a, nn_ldf(kb, p->bv, NN_IDX(pi)));
  const tir_stmt_t* s = nn_for(kb, vq, rows * P, nn_for(kb, vi, B, nn_stf(kb, p->yrow, NN_IDX(r, e), v)));
  nn_vectorize(kb, vi);
  nn_parallel(kb, vq);
  return nn_emit(kb, s);
}

/* The block size for a long row of R: the smallest divisor of R of at least
 * max(1024, sqrt(R)), or 0 when that is over 16384 (no even split: one
 * kernel after all). */
static int64_t block_size(int64_t R) {
  if (R < LONG_ROW) return 0;
  int64_t b = (int64_t)sqrt((double)R);
  if (b < 1024) b = 1024;
  for (; b <= 16384; ++b)
    if (R % b == 0) return b;
  return 0;
}

static kiln_status_t group_norm(kiln_lower_ctx_t* ctx, bool instance) {
  const char* op = instance ? "InstanceNormalization" : "GroupNormalization";
  nn_kb_t kb;
  nn_kb_init(&kb, ctx);
  const tir_buffer_t *x = ctx->in[0], *y = ctx->out[0];
  if (!x || !y || ctx->n_in < 3 || !ctx->in[1] || !ctx->in[2] || x->rank < 2) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: missing operand", op);
  }
  float eps = 1e-5f;
  KILN_RETURN_IF_ERROR(kiln_attr_float(ctx->node, "epsilon", 1e-5f, &eps));
  const int64_t N = x->shape[0], C = x->shape[1];
  int64_t G = C;
  if (!instance) KILN_RETURN_IF_ERROR(kiln_attr_int(ctx->node, "num_groups", -1, &G));
  if (G <= 0 || C % G) return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: bad num_groups %lld", op, (long long)G);
  gp_t p = {.G = G, .cpg = C / G, .plane = 1, .per_group = !instance && ctx->opset < 21};
  for (int32_t d = 2; d < x->rank; ++d) p.plane *= x->shape[d];
  const int64_t R = p.cpg * p.plane, rows = N * G, plen = p.per_group ? G : C;
  if (rows * R == 0) return NULL;
  if (tir_buffer_numel(ctx->in[1]) != plen || tir_buffer_numel(ctx->in[2]) != plen) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: scale and bias must have %lld elements", op,
                            (long long)plen);
  }
  const int64_t xs[2] = {rows, R}, ys[3] = {rows, p.cpg, p.plane};
  KILN_RETURN_IF_ERROR(nn_view(ctx, x, "xflat", 2, xs, &p.xv));
  KILN_RETURN_IF_ERROR(nn_view(ctx, y, "yflat", 3, ys, &p.yv));
  KILN_RETURN_IF_ERROR(nn_view(ctx, y, "yrow", 2, xs, &p.yrow));
  /* scale and bias are [plen] by the schema: used as they are (a view of
   * a constant initializer is not a buffer the program builder takes) */
  p.sv = ctx->in[1];
  p.bv = ctx->in[2];
  if (p.sv->rank != 1 || p.bv->rank != 1) {
    return kiln_make_status(KILN_INVALID_ARGUMENT, "%s: scale and bias must have rank 1", op);
  }
  const int64_t B = block_size(R);
  return B ? gn_long(&kb, &p, rows, B, eps) : gn_short(&kb, &p, rows, eps);
}

kiln_status_t kiln_lower_nn_instancenorm(kiln_lower_ctx_t* ctx) { return group_norm(ctx, true); }
kiln_status_t kiln_lower_nn_groupnorm(kiln_lower_ctx_t* ctx) { return group_norm(ctx, false); }
