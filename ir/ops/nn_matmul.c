/* MatMul (numpy semantics: 1-D promotion, batched with broadcast) and Gemm
 * (transA/transB, alpha, beta, C unidirectionally broadcast to [M, N]).
 * Float math goes through the shared blocked GEMM; i32/i64 use a plain
 * int64 loop that wraps like two's complement instead of overflowing.
 */
#include <string.h>

#include "ir/ops/nn_internal.h"

static bool known(int64_t d) { return kiln_dim_known(d); }

static kiln_status_t check_dtypes(const kiln_infer_t* ctx, const char* op,
                                  int32_t n) {
  kiln_dtype_t t0 = ctx->in[0]->dtype;
  for (int32_t i = 0; i < n && i < ctx->n_in; ++i) {
    if (!ctx->in[i]) continue;
    kiln_dtype_t t = ctx->in[i]->dtype;
    if (t == KILN_DTYPE_UNDEFINED) continue;
    /* MatMul computes f64 in double; Gemm's kernel is f32 only. */
    const bool f64_ok = !strcmp(op, "MatMul");
    if (t != KILN_DTYPE_F32 && t != KILN_DTYPE_F16 && t != KILN_DTYPE_I32 &&
        t != KILN_DTYPE_I64 && !(f64_ok && t == KILN_DTYPE_F64)) {
      return kiln_make_status(KILN_UNSUPPORTED,
                              "%s: input '%s' has dtype %s; %s supports f32, "
                              "f16, i32 and i64%s",
                              op, kiln_nn_in_name(ctx, i), kiln_dtype_name(t),
                              op, f64_ok ? " and f64" : "");
    }
    if (t0 != KILN_DTYPE_UNDEFINED && t != t0) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "%s: input '%s' has dtype %s but '%s' has %s", op,
                              kiln_nn_in_name(ctx, i), kiln_dtype_name(t),
                              kiln_nn_in_name(ctx, 0), kiln_dtype_name(t0));
    }
  }
  return NULL;
}

/* ---- MatMul ------------------------------------------------------------- */

typedef struct mm_s {
  int64_t M, N, K;
  kiln_shape_t batch; /* broadcast batch shape */
  kiln_shape_t abatch, bbatch;
  kiln_shape_t out;
} mm_t;

/* Output shape of A @ B; dims may be unknown at load time. */
static kiln_status_t mm_setup(const kiln_shape_t* a, const char* an,
                              const kiln_shape_t* b, const char* bn, mm_t* m) {
  if (a->rank < 0 || b->rank < 0) {
    m->out = kiln_shape_unknown();
    return NULL;
  }
  if (a->rank == 0 || b->rank == 0) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "MatMul: input '%s' is a scalar; MatMul needs "
                            "rank >= 1",
                            a->rank == 0 ? an : bn);
  }
  /* 1-D promotion: A [K] -> [1, K], B [K] -> [K, 1]; the added dim is
   * dropped from the output. */
  int64_t ka = a->dims[a->rank - 1];
  int64_t kb = b->rank >= 2 ? b->dims[b->rank - 2] : b->dims[0];
  m->M = a->rank >= 2 ? a->dims[a->rank - 2] : 1;
  m->N = b->rank >= 2 ? b->dims[b->rank - 1] : 1;
  m->K = ka;
  if (known(ka) && known(kb) && ka != kb) {
    char as[96], bs[96];
    kiln_shape_format(a, as, sizeof as);
    kiln_shape_format(b, bs, sizeof bs);
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "MatMul: inner dimensions disagree: '%s' %s has "
                            "K=%lld, '%s' %s has K=%lld",
                            an, as, (long long)ka, bn, bs, (long long)kb);
  }
  if (!known(ka)) m->K = kb;
  m->abatch.rank = a->rank > 2 ? a->rank - 2 : 0;
  m->bbatch.rank = b->rank > 2 ? b->rank - 2 : 0;
  for (int32_t i = 0; i < m->abatch.rank; ++i) m->abatch.dims[i] = a->dims[i];
  for (int32_t i = 0; i < m->bbatch.rank; ++i) m->bbatch.dims[i] = b->dims[i];
  kiln_status_t st = kiln_infer_broadcast(&m->abatch, &m->bbatch, &m->batch);
  if (st) return kiln_status_annotate(st, "MatMul: batch dims of '%s' and '%s'", an, bn);
  m->out = m->batch;
  if (a->rank >= 2) m->out.dims[m->out.rank++] = m->M;
  if (b->rank >= 2) m->out.dims[m->out.rank++] = m->N;
  if (m->out.rank > KILN_MAX_RANK) {
    return kiln_make_status(KILN_UNSUPPORTED, "MatMul: output rank %d exceeds %d",
                            (int)m->out.rank, KILN_MAX_RANK);
  }
  return NULL;
}

kiln_status_t kiln_nn_matmul_infer(kiln_infer_t* ctx) {
  KILN_RETURN_IF_ERROR(check_dtypes(ctx, "MatMul", 2));
  mm_t m;
  KILN_RETURN_IF_ERROR(mm_setup(&ctx->in[0]->shape, kiln_nn_in_name(ctx, 0),
                                &ctx->in[1]->shape, kiln_nn_in_name(ctx, 1),
                                &m));
  kiln_infer_set(ctx, 0, ctx->in[0]->dtype, &m.out);
  return NULL;
}

int64_t kiln_nn_matmul_flops(const kiln_infer_t* ctx) {
  const kiln_shape_t* a = &ctx->in[0]->shape;
  if (!ctx->out[0] || !kiln_shape_is_static(&ctx->out[0]->shape) ||
      a->rank < 1 || !known(a->dims[a->rank - 1])) {
    return 0;
  }
  return kiln_nn_mul_sat(2 * kiln_shape_count(&ctx->out[0]->shape),
                         a->dims[a->rank - 1]);
}

/* Visits every batch index: a_off/b_off are the matrix indices into A and B
 * under broadcasting. */
static void batch_offsets(const mm_t* m, int64_t bi, int64_t* a_off,
                          int64_t* b_off) {
  int64_t as[KILN_MAX_RANK], bs[KILN_MAX_RANK];
  kiln_broadcast_strides(&m->abatch, &m->batch, as);
  kiln_broadcast_strides(&m->bbatch, &m->batch, bs);
  int64_t ao = 0, bo = 0, rem = bi;
  for (int32_t d = m->batch.rank - 1; d >= 0; --d) {
    int64_t idx = rem % m->batch.dims[d];
    rem /= m->batch.dims[d];
    ao += idx * as[d];
    bo += idx * bs[d];
  }
  *a_off = ao;
  *b_off = bo;
}

kiln_status_t kiln_nn_matmul_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* A = ctx->in[0];
  const kiln_array_t* B = ctx->in[1];
  kiln_array_t* Y = ctx->out[0];
  mm_t m;
  KILN_RETURN_IF_ERROR(mm_setup(&A->shape, "A", &B->shape, "B", &m));
  const int64_t M = m.M, N = m.N, K = m.K;
  const int64_t nb = kiln_shape_count(&m.batch);
  if (A->dtype == KILN_DTYPE_F32 || A->dtype == KILN_DTYPE_F16) {
    const float *a, *b;
    float *as = NULL, *bs = NULL, *y, *ys = NULL;
    kiln_status_t st = kiln_nn_f32_load(ctx, A, &a, &as);
    if (!st) st = kiln_nn_f32_load(ctx, B, &b, &bs);
    if (!st) st = kiln_nn_f32_dest(ctx, Y, &y, &ys);
    if (!st) {
      memset(y, 0, sizeof(float) * (size_t)(nb * M * N));
      for (int64_t bi = 0; bi < nb; ++bi) {
        int64_t ao, bo;
        batch_offsets(&m, bi, &ao, &bo);
        kiln_nn_sgemm(M, N, K, a + ao * M * K, K, 1, b + bo * K * N, N,
                      y + bi * M * N, N);
      }
      kiln_nn_f32_store(ctx, Y, ys);
    } else {
      kiln_nn_scratch_free(ctx, ys);
    }
    kiln_nn_scratch_free(ctx, as);
    kiln_nn_scratch_free(ctx, bs);
    return st;
  }
  if (A->dtype == KILN_DTYPE_F64) { /* in double, summed in k order */
    const double *a = A->data, *b = B->data;
    double* y = Y->data;
    for (int64_t bi = 0; bi < nb; ++bi) {
      int64_t ao, bo;
      batch_offsets(&m, bi, &ao, &bo);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double acc = 0.0;
          for (int64_t k = 0; k < K; ++k)
            acc += a[ao * M * K + i * K + k] * b[bo * K * N + k * N + j];
          y[(bi * M + i) * N + j] = acc;
        }
    }
    return NULL;
  }
  if (A->dtype != KILN_DTYPE_I32 && A->dtype != KILN_DTYPE_I64) {
    return kiln_make_status(KILN_UNSUPPORTED, "MatMul: dtype %s",
                            kiln_dtype_name(A->dtype));
  }
  for (int64_t bi = 0; bi < nb; ++bi) {
    int64_t ao, bo;
    batch_offsets(&m, bi, &ao, &bo);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        uint64_t acc = 0;
        for (int64_t k = 0; k < K; ++k) {
          acc += (uint64_t)kiln_load_i64(A->dtype, A->data,
                                         (size_t)(ao * M * K + i * K + k)) *
                 (uint64_t)kiln_load_i64(B->dtype, B->data,
                                         (size_t)(bo * K * N + k * N + j));
        }
        kiln_store_i64(Y->dtype, Y->data, (size_t)((bi * M + i) * N + j),
                       (int64_t)acc);
      }
  }
  return NULL;
}

/* ---- Gemm --------------------------------------------------------------- */

typedef struct gemm_s {
  int64_t trans_a, trans_b;
  float alpha, beta;
  int64_t M, N, K;
} gemm_t;

static kiln_status_t gemm_setup(const kiln_node_t* node, const kiln_shape_t* a,
                                const char* an, const kiln_shape_t* b,
                                const char* bn, const kiln_shape_t* c,
                                const char* cn, gemm_t* g) {
  KILN_RETURN_IF_ERROR(kiln_attr_int(node, "transA", 0, &g->trans_a));
  KILN_RETURN_IF_ERROR(kiln_attr_int(node, "transB", 0, &g->trans_b));
  KILN_RETURN_IF_ERROR(kiln_attr_float(node, "alpha", 1.0f, &g->alpha));
  KILN_RETURN_IF_ERROR(kiln_attr_float(node, "beta", 1.0f, &g->beta));
  g->M = g->N = g->K = KILN_DIM_UNKNOWN;
  if (a->rank >= 0 && a->rank != 2) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Gemm: input '%s' has rank %d, expected 2", an,
                            (int)a->rank);
  }
  if (b->rank >= 0 && b->rank != 2) {
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Gemm: input '%s' has rank %d, expected 2", bn,
                            (int)b->rank);
  }
  int64_t ka = KILN_DIM_UNKNOWN, kb = KILN_DIM_UNKNOWN;
  if (a->rank == 2) {
    g->M = a->dims[g->trans_a ? 1 : 0];
    ka = a->dims[g->trans_a ? 0 : 1];
  }
  if (b->rank == 2) {
    g->N = b->dims[g->trans_b ? 0 : 1];
    kb = b->dims[g->trans_b ? 1 : 0];
  }
  if (known(ka) && known(kb) && ka != kb) {
    char as[64], bs[64];
    kiln_shape_format(a, as, sizeof as);
    kiln_shape_format(b, bs, sizeof bs);
    return kiln_make_status(KILN_INVALID_ARGUMENT,
                            "Gemm: inner dimensions disagree: '%s' %s "
                            "(transA=%lld) has K=%lld, '%s' %s (transB=%lld) "
                            "has K=%lld",
                            an, as, (long long)g->trans_a, (long long)ka, bn,
                            bs, (long long)g->trans_b, (long long)kb);
  }
  g->K = known(ka) ? ka : kb;
  if (c && c->rank >= 0) {
    /* C broadcasts unidirectionally to [M, N]. */
    if (c->rank > 2) {
      return kiln_make_status(KILN_INVALID_ARGUMENT,
                              "Gemm: input '%s' has rank %d, expected <= 2", cn,
                              (int)c->rank);
    }
    const int64_t mn[2] = {g->M, g->N};
    for (int32_t i = 0; i < c->rank; ++i) {
      int64_t d = c->dims[i], t = mn[2 - c->rank + i];
      if (known(d) && d != 1 && known(t) && d != t) {
        char cs[64];
        kiln_shape_format(c, cs, sizeof cs);
        return kiln_make_status(KILN_INVALID_ARGUMENT,
                                "Gemm: input '%s' of shape %s does not "
                                "broadcast to [%lld,%lld]",
                                cn, cs, (long long)g->M, (long long)g->N);
      }
    }
  }
  return NULL;
}

kiln_status_t kiln_nn_gemm_infer(kiln_infer_t* ctx) {
  KILN_RETURN_IF_ERROR(check_dtypes(ctx, "Gemm", 3));
  const kiln_tensor_t* c = ctx->n_in > 2 ? ctx->in[2] : NULL;
  gemm_t g;
  KILN_RETURN_IF_ERROR(gemm_setup(ctx->node, &ctx->in[0]->shape,
                                  kiln_nn_in_name(ctx, 0), &ctx->in[1]->shape,
                                  kiln_nn_in_name(ctx, 1),
                                  c ? &c->shape : NULL,
                                  c ? kiln_nn_in_name(ctx, 2) : "", &g));
  kiln_shape_t out = {.rank = 2, .dims = {g.M, g.N}};
  kiln_infer_set(ctx, 0, ctx->in[0]->dtype, &out);
  return NULL;
}

int64_t kiln_nn_gemm_flops(const kiln_infer_t* ctx) {
  const kiln_shape_t* a = &ctx->in[0]->shape;
  if (!ctx->out[0] || !kiln_shape_is_static(&ctx->out[0]->shape) ||
      !kiln_shape_is_static(a) || a->rank != 2) {
    return 0;
  }
  /* K is whichever dim of A is not M. */
  int64_t M = ctx->out[0]->shape.dims[0];
  int64_t K = a->dims[0] == M ? a->dims[1] : a->dims[0];
  return kiln_nn_mul_sat(2 * kiln_shape_count(&ctx->out[0]->shape), K);
}

kiln_status_t kiln_nn_gemm_run(const kiln_ref_ctx_t* ctx) {
  const kiln_array_t* A = ctx->in[0];
  const kiln_array_t* B = ctx->in[1];
  const kiln_array_t* C = ctx->n_in > 2 ? ctx->in[2] : NULL;
  kiln_array_t* Y = ctx->out[0];
  gemm_t g;
  KILN_RETURN_IF_ERROR(gemm_setup(ctx->node, &A->shape, "A", &B->shape, "B",
                                  C ? &C->shape : NULL, "C", &g));
  const int64_t M = g.M, N = g.N, K = g.K;
  int64_t cstr[KILN_MAX_RANK] = {0, 0};
  const kiln_shape_t mn = {.rank = 2, .dims = {M, N}};
  if (C) kiln_broadcast_strides(&C->shape, &mn, cstr);
  /* A'(i,k) = A[i*ars + k*acs] covers transA without a copy. */
  const int64_t ars = g.trans_a ? 1 : K, acs = g.trans_a ? M : 1;

  if (!kiln_dtype_is_float(A->dtype)) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        uint64_t acc = 0;
        for (int64_t k = 0; k < K; ++k) {
          int64_t bi = g.trans_b ? j * K + k : k * N + j;
          acc += (uint64_t)kiln_load_i64(A->dtype, A->data,
                                         (size_t)(i * ars + k * acs)) *
                 (uint64_t)kiln_load_i64(B->dtype, B->data, (size_t)bi);
        }
        double v = (double)g.alpha * (double)(int64_t)acc;
        if (C) {
          v += (double)g.beta *
               (double)kiln_load_i64(C->dtype, C->data,
                                     (size_t)(i * cstr[0] + j * cstr[1]));
        }
        kiln_store_f64(Y->dtype, Y->data, (size_t)(i * N + j), v);
      }
    return NULL;
  }

  const float *a, *b, *c = NULL;
  float *as = NULL, *bs = NULL, *cs = NULL, *bt = NULL, *y, *ys = NULL;
  kiln_status_t st = kiln_nn_f32_load(ctx, A, &a, &as);
  if (!st) st = kiln_nn_f32_load(ctx, B, &b, &bs);
  if (!st && C) st = kiln_nn_f32_load(ctx, C, &c, &cs);
  if (!st && g.trans_b) {
    /* The GEMM streams rows of B; materialise B' = B^T as [K, N]. */
    st = kiln_nn_scratch(ctx, K * N, sizeof(float), "Gemm transposed B",
                         (void**)&bt);
    if (!st) {
      /* 32x32 tiles keep both the reads and the strided writes in cache. */
      for (int64_t n0 = 0; n0 < N; n0 += 32)
        for (int64_t k0 = 0; k0 < K; k0 += 32)
          for (int64_t n = n0; n < N && n < n0 + 32; ++n)
            for (int64_t k = k0; k < K && k < k0 + 32; ++k)
              bt[k * N + n] = b[n * K + k];
      b = bt;
    }
  }
  if (!st) st = kiln_nn_f32_dest(ctx, Y, &y, &ys);
  if (!st) {
    memset(y, 0, sizeof(float) * (size_t)(M * N));
    kiln_nn_sgemm(M, N, K, a, ars, acs, b, N, y, N);
    for (int64_t i = 0; i < M; ++i) {
      float* yr = y + i * N;
      for (int64_t j = 0; j < N; ++j) yr[j] *= g.alpha;
      if (c) {
        const float* cr = c + i * cstr[0];
        for (int64_t j = 0; j < N; ++j) yr[j] += g.beta * cr[j * cstr[1]];
      }
    }
    kiln_nn_f32_store(ctx, Y, ys);
  } else {
    kiln_nn_scratch_free(ctx, ys);
  }
  kiln_nn_scratch_free(ctx, as);
  kiln_nn_scratch_free(ctx, bs);
  kiln_nn_scratch_free(ctx, cs);
  kiln_nn_scratch_free(ctx, bt);
  return st;
}
