/* kiln GEMV template for OpenCL C 1.2: the GEMMs with few rows (M <= 4:
 * a CNN's classifier, a decoder's projections for one token),
 *
 *   Y[b] = EPI(ALPHA * op(A[b]) x B[b] (+ BETA * bias, broadcast)),
 *
 * which read every weight once and do two FLOPs with it, so they run at
 * the speed B streams in. gemm.cl tiles M by TM rows and copies B slices
 * into __local panels first: at M = 1 that copy is as much work as the
 * product. Here each work-group owns NC columns of Y for all M rows and
 * its WK work-items split K; every item streams its share of B straight
 * from global memory, a row of NC columns per k in VW-wide vector loads
 * (B stored K x N, or packed in panels of GPACK_T columns, as the lowering
 * packs every constant and every transposed run-time B: rows of a panel
 * are contiguous in n), keeps M x NC/VW vector accumulators and
 * broadcasts A(m, k). A B stored N x K in place (GTRANS_B without
 * packing) is gemm.cl's: the host never prints it here.
 * WK > 1 (GPU devices) reduces the items' partial sums in __local memory;
 * WK 1 (PoCL, where a work-group is a loop over its items) needs no
 * barrier. Ragged N reads zeros past GN and stores only columns < GN.
 * Every sum is f32 and no partial sum goes through Y, so an f16 Y
 * (GY_F16) is written once, rounded.
 *
 * Instance parameters: those of gemm.cl (the host prints the same shape,
 * operand, bias, residual and activation macros; GRT_M is never 1 here:
 * a run-time M stays on gemm.cl), and the tiles
 *   VW   vector width along n: 4, 8 or 16
 *   NC   columns of Y per work-group, a multiple of VW
 *   WK   work-items per group, splitting K
 * Launch: global (ceil(GN/NC)*WK, 1, GBATCH), local (WK, 1, 1).
 */
#define KV_CAT_(a, b) a##b
#define KV_CAT(a, b) KV_CAT_(a, b)
#define KV_VT KV_CAT(float, VW)
#define KV_LANE(v, l) (((float*)&(v))[l])
#define KV_LD_0(p, i) ((p)[i])
#define KV_LD_1(p, i) vload_half((i), (p))
#define KV_LD(h, p, i) KV_CAT(KV_LD_, h)(p, i)
#define KV_ST_0(v, p, i) ((p)[i] = (v))
#define KV_ST_1(v, p, i) vstore_half_rte((v), (i), (p))
#define KV_ST(h, v, p, i) KV_CAT(KV_ST_, h)(v, p, i)
#define KV_VLD_0(p) KV_CAT(vload, VW)(0, (p))
#define KV_VLD_1(p) KV_CAT(vload_half, VW)(0, (p))
#define KV_VLD(h, p) KV_CAT(KV_VLD_, h)(p)
#define KV_EVEN_N (GN % NC == 0)
#if GTRANS_A
#define KV_AI(m, k) ((k) * GLDA + (m))
#else
#define KV_AI(m, k) ((m) * GLDA + (k))
#endif
#define KV_A(m, k) KV_LD(GA_F16, A, KV_AI(m, k))
#if GPACK_T
#define KV_BI(k, n)                                                                           \
  (((((k) / GPACK_KBS) * GPACK_TILES + (n) / GPACK_T) * GPACK_KBS + (k) % GPACK_KBS) * GPACK_T + \
   (n) % GPACK_T)
#else
#define KV_BI(k, n) ((k) * GLDB + (n))
#endif
#define KV_B(k, n) KV_LD(GB_F16, B, KV_BI(k, n))
/* a vector of B never crosses a packed panel */
#if GPACK_T == 0 || GPACK_T % VW == 0
#define KV_VEC_B 1
#else
#define KV_VEC_B 0
#endif
/* the epilogue, in gemm.cl's order: alpha, bias, residual, activation */
#if GHAS_BIAS
#define KV_BIAS(m, n) (GBETA * KV_LD(GC_F16, BIAS, (m) * GBIAS_SM + (n) * GBIAS_SN))
#else
#define KV_BIAS(m, n) 0.0f
#endif
#if GHAS_RES
#define KV_RES(m, n) KV_LD(GR_F16, RES, (m) * GLDY + (n))
#else
#define KV_RES(m, n) 0.0f
#endif
#if GACT == 1
#define KV_ACT(v) ((0.5f * (v)) * (1.0f + erf((v) * 0.70710678118654752f)))
#elif GACT == 2
#define KV_ACT(v) ((0.5f * (v)) * (1.0f + tanh(0.79788456080286536f * ((v) + ((0.044715f * (v)) * (v)) * (v)))))
#elif GACT == 3
#define KV_ACT(v) fmax((v), 0.0f)
#elif GACT == 4
#define KV_ACT(v) fmin(fmax((v), GACT_LO), GACT_HI)
#else
#define KV_ACT(v) (v)
#endif

__kernel __attribute__((reqd_work_group_size(WK, 1, 1))) void KILN_GEMM_NAME(KILN_GEMM_SIGNATURE) {
  const int lid = (int)get_local_id(0);
  const int n0 = (int)get_group_id(0) * NC;
  /* the batch on dim 2, as gemm.cl has it (a per-sample plan's device
   * launches dim 2 once per sample: lowering/plan_dyn_tmpl.c) */
  const int bz = (int)get_group_id(2);
  A += (long)bz * GSA;
  B += (long)bz * GSB;
  Y += (long)bz * GSY;
  float sum[GM][NC];
#define KV_NV (NC / VW)
  KV_VT acc[GM][KV_NV];
#pragma unroll
  for (int m = 0; m < GM; ++m)
#pragma unroll
    for (int j = 0; j < KV_NV; ++j) acc[m][j] = (KV_VT)(0.0f);
  for (int k = lid; k < GK; k += WK) {
    KV_VT b[KV_NV];
#pragma unroll
    for (int j = 0; j < KV_NV; ++j) {
      const int n = n0 + j * VW;
      if (KV_VEC_B & (KV_EVEN_N ? 1 : n + VW <= GN)) {
        b[j] = KV_VLD(GB_F16, B + KV_BI(k, n));
      } else {
#pragma unroll
        for (int l = 0; l < VW; ++l) KV_LANE(b[j], l) = n + l < GN ? KV_B(k, n + l) : 0.0f;
      }
    }
#pragma unroll
    for (int m = 0; m < GM; ++m) {
      const KV_VT a = (KV_VT)(KV_A(m, k));
#pragma unroll
      for (int j = 0; j < KV_NV; ++j) acc[m][j] = fma(a, b[j], acc[m][j]);
    }
  }
#pragma unroll
  for (int m = 0; m < GM; ++m)
#pragma unroll
    for (int j = 0; j < KV_NV; ++j)
#pragma unroll
      for (int l = 0; l < VW; ++l) sum[m][j * VW + l] = KV_LANE(acc[m][j], l);
#undef KV_NV
#if WK > 1
  __local float part[WK * GM * NC];
#pragma unroll
  for (int m = 0; m < GM; ++m)
#pragma unroll
    for (int j = 0; j < NC; ++j) part[(lid * GM + m) * NC + j] = sum[m][j];
  barrier(CLK_LOCAL_MEM_FENCE);
#endif
  for (int e = lid; e < GM * NC; e += WK) {
    const int m = e / NC, j = e % NC, n = n0 + j;
#if WK > 1
    float v = 0.0f;
    for (int w = 0; w < WK; ++w) v += part[w * GM * NC + e];
#else
    float v = sum[m][j];
#endif
    if (KV_EVEN_N ? 1 : n < GN) {
      v = v * GALPHA + KV_BIAS(m, n);
      v += KV_RES(m, n);
      KV_ST(GY_F16, KV_ACT(v), Y, m * GLDY + n);
    }
  }
}

#undef KV_CAT_
#undef KV_CAT
#undef KV_VT
#undef KV_LANE
#undef KV_LD_0
#undef KV_LD_1
#undef KV_LD
#undef KV_ST_0
#undef KV_ST_1
#undef KV_ST
#undef KV_VLD_0
#undef KV_VLD_1
#undef KV_VLD
#undef KV_EVEN_N
#undef KV_AI
#undef KV_A
#undef KV_BI
#undef KV_B
#undef KV_VEC_B
#undef KV_BIAS
#undef KV_RES
#undef KV_ACT
