/* kiln hand-tuned SGEMM template for OpenCL C 1.2.
 *
 *   Y[b] = ALPHA * op(A[b]) x op(B[b]) (+ BETA * bias, broadcast)
 *
 * Register-tiled and __local-tiled: a work-group of WX x WY work-items
 * computes a BM x BN block of Y (BM = TM*WY*MM rows, BN = TN*WX*MN
 * columns). K is walked in slices of BK: the group copies the BM x BK slice
 * of A and the BK x BN slice of B into __local memory in panel-major order
 * (what a BLAS packs), synchronises, and each work-item runs the register
 * micro-kernel -- a TM x TN tile of accumulators, TN/VW vectors of VW floats
 * per row, BK rank-1 updates -- on its MM x MN micro-tiles of the block.
 * Partial sums of a slice go back to Y (read again for the next slice), so
 * no accumulator lives across a barrier: on CPU devices such as PoCL, where
 * a barrier splits the work-item loops and spills what is live across it,
 * the tile stays in registers. Edges are zero-filled in the copies and
 * guarded in the loads/stores of Y, so any M, N, K work; the guards compile
 * away for shapes the block divides.
 *
 * f16 storage (--precision fp16): any of A, B, BIAS and Y may be a half
 * buffer (GA_F16, GB_F16, GC_F16, GY_F16), read with vload_half[n] and
 * written with vstore_half[n]_rte (OpenCL C 1.2 without cl_khr_fp16 may not
 * dereference a half pointer); the slices are converted once into the
 * __local float panels and every sum is f32. Partial sums never go through
 * an f16 Y (rounding each K slice's sum adds an error that grows with K):
 * with GPSUM 1 (the host sets it for an f16 Y) each work-item keeps them in
 * a private f32 array of its MM x MN micro-tiles across the slices instead
 * (on PoCL's CPU device: stack memory that replaces the round trip through
 * Y; on a GPU, spilled scratch -- GPU tiles would keep MM = MN = 1).
 *
 * Instance parameters (macros the includer defines before this text, and
 * #undefs after; every one is a tuning knob except the shape ones):
 *   KILN_GEMM_NAME       kernel name
 *   KILN_GEMM_SIGNATURE  parameter list naming A, B, Y (and BIAS when
 *                        GHAS_BIAS), e.g. "__global const float* restrict A, ..."
 *   GM GN GK             sizes; GBATCH batches (get_group_id(2))
 *   GSA GSB GSY          elements between batches (0: broadcast operand)
 *   GLDA GLDB GLDY       leading dimensions (row-major)
 *   GTRANS_A GTRANS_B    0: A is M x K, B is K x N; 1: transposed storage
 *   GPACK_T GPACK_KBS GPACK_TILES   B packed in column panels (GPACK_T 0: plain)
 *   GHAS_BIAS            bias added as BETA * BIAS[m * GBIAS_SM + n * GBIAS_SN]
 *   GHAS_RES             then RES[m * GLDY + n] added (a residual of Y's shape;
 *                        GR_F16 1: it holds half)
 *   GACT                 then 1: GELU, 0.5 v (1 + erf(v / sqrt(2))); 2: GELU's tanh
 *                        form, 0.5 v (1 + tanh(0.79788456 (v + 0.044715 v^3)));
 *                        3: Relu; 4: Clip to [GACT_LO, GACT_HI] (float literals)
 *   GALPHA GBETA         float literals
 *   TM TN VW WX WY BK    tiles (TN % VW == 0; VW in 1, 2, 4, 8, 16)
 *   MM MN                micro-tiles per work-item along M and N
 *   GA_F16 GB_F16 GC_F16 GY_F16  1: that operand holds half (storage only)
 *   GPSUM                0: partial sums through Y (f32); 1: a private array
 *   GRT_M                1: a range program's GEMM (GBATCH 1): M is
 *                        GM_A * DIMS[0] + GM_B, the dim's run-time value n
 *                        read from the signature's DIMS (GM names it), and
 *                        the row blocks are get_group_id(2), which the
 *                        device launches n times (n >= ceil(M / BM)); blocks
 *                        past M return before any barrier (the whole group)
 * Launch: global (ceil(GN/BN)*WX, ceil(GM/BM)*WY, GBATCH), local (WX, WY, 1);
 * GRT_M: global (ceil(GN/BN)*WX, WY, n).
 */
#define KG_BM (TM * WY * MM)
#define KG_BN (TN * WX * MN)
#define KG_NV (TN / VW)
#define KG_CAT_(a, b) a##b
#define KG_CAT(a, b) KG_CAT_(a, b)
#if VW == 1
#define KG_VT float
#define KG_VLOAD(p) (*(p))
#define KG_VSTORE(v, p) (*(p) = (v))
#define KG_LANE(v, l) (v)
#else
#define KG_VT KG_CAT(float, VW)
#define KG_VLOAD(p) KG_CAT(vload, VW)(0, (p))
#define KG_VSTORE(v, p) KG_CAT(vstore, VW)((v), 0, (p))
#define KG_LANE(v, l) (((float*)&(v))[l])
#endif
/* f16 storage: loads and stores by the operand's flag h (0 float, 1 half) */
#define KG_LD_0(p, i) ((p)[i])
#define KG_LD_1(p, i) vload_half((i), (p))
#define KG_LD(h, p, i) KG_CAT(KG_LD_, h)(p, i)
#define KG_ST_0(v, p, i) ((p)[i] = (v))
#define KG_ST_1(v, p, i) vstore_half_rte((v), (i), (p))
#define KG_ST(h, v, p, i) KG_CAT(KG_ST_, h)(v, p, i)
#define KG_VLD_0(p) KG_VLOAD(p)
#define KG_VST_0(v, p) KG_VSTORE(v, p)
#if VW == 1
#define KG_VLD_1(p) vload_half(0, (p))
#define KG_VST_1(v, p) vstore_half_rte((v), 0, (p))
#else
#define KG_VLD_1(p) KG_CAT(vload_half, VW)(0, (p))
#define KG_VST_1(v, p) KG_CAT(KG_CAT(vstore_half, VW), _rte)((v), 0, (p))
#endif
#define KG_VLD(h, p) KG_CAT(KG_VLD_, h)(p)
#define KG_VST(h, v, p) KG_CAT(KG_VST_, h)(v, p)
#define KG_EVEN_M (GM % KG_BM == 0)
#define KG_EVEN_N (GN % KG_BN == 0)
#define KG_EVEN_K (GK % BK == 0)
#if GTRANS_A
#define KG_A(m, k) KG_LD(GA_F16, A, (k) * GLDA + (m))
#else
#define KG_A(m, k) KG_LD(GA_F16, A, (m) * GLDA + (k))
#endif
#if GPACK_T
/* B packed by lowering/lower_nn_gemm.c: panels of GPACK_T columns, K in
 * blocks of GPACK_KBS (see kiln_opencl_gemm_t). */
#define KG_BI(k, n)                                                                           \
  (((((k) / GPACK_KBS) * GPACK_TILES + (n) / GPACK_T) * GPACK_KBS + (k) % GPACK_KBS) * GPACK_T + \
   (n) % GPACK_T)
#elif GTRANS_B
#define KG_BI(k, n) ((n) * GLDB + (k))
#else
#define KG_BI(k, n) ((k) * GLDB + (n))
#endif
#define KG_B(k, n) KG_LD(GB_F16, B, KG_BI(k, n))
#if GPSUM
#define KG_PS_AT(i, j) pacc[((jn * MM + im) * TM + (i)) * KG_NV + (j)]
#endif

__kernel __attribute__((reqd_work_group_size(WX, WY, 1))) void KILN_GEMM_NAME(KILN_GEMM_SIGNATURE) {
  /* Panel-major slices, as a BLAS packs them: the TM rows of one A micro-
   * panel are contiguous per k, and so are the TN columns of a B one, so
   * the inner loop streams both. */
  __local float As[BK * KG_BM]; /* As[(m / TM) * BK * TM + k * TM + m % TM] */
  __local float Bs[BK * KG_BN]; /* Bs[(n / TN) * BK * TN + k * TN + n % TN] */
  const int tx = (int)get_local_id(0), ty = (int)get_local_id(1);
  const int lid = ty * WX + tx;
#if GRT_M
  const int kg_m = (int)(DIMS[0] * GM_A + GM_B);
  const int n0 = (int)get_group_id(0) * KG_BN, m0 = (int)get_group_id(2) * KG_BM;
  const int bz = 0;
  if (m0 >= kg_m) return;
#else
  const int n0 = (int)get_group_id(0) * KG_BN, m0 = (int)get_group_id(1) * KG_BM;
  const int bz = (int)get_group_id(2);
#endif
  A += (long)bz * GSA;
  B += (long)bz * GSB;
  Y += (long)bz * GSY;
#if GPSUM
  KG_VT pacc[MN * MM * TM * KG_NV]; /* f32 partial sums of the item's micro-tiles */
#endif

  for (int k0 = 0; k0 < GK; k0 += BK) {
    /* Copy the A and B slices; the index order follows each operand's
     * storage so consecutive work-items read consecutive addresses. */
#if !GTRANS_A && BK % VW == 0
    /* A rows are contiguous in k: vector loads, lanes scattered into the
     * panel (stride TM). */
    for (int e = lid; e < KG_BM * (BK / VW); e += WX * WY) {
      const int mm = e / (BK / VW), kk = (e % (BK / VW)) * VW;
      const int gm = m0 + mm, gk = k0 + kk;
      KG_VT v;
      if ((KG_EVEN_M ? 1 : gm < GM) & (KG_EVEN_K ? 1 : gk + VW <= GK)) {
        v = KG_VLD(GA_F16, A + gm * GLDA + gk);
      } else {
#pragma unroll
        for (int l = 0; l < VW; ++l)
          KG_LANE(v, l) = ((KG_EVEN_M ? 1 : gm < GM) & (gk + l < GK)) ? KG_A(gm, gk + l) : 0.0f;
      }
      __local float* dst = As + (mm / TM) * (BK * TM) + kk * TM + mm % TM;
#pragma unroll
      for (int l = 0; l < VW; ++l) dst[l * TM] = KG_LANE(v, l);
    }
#else
    for (int e = lid; e < BK * KG_BM; e += WX * WY) {
#if GTRANS_A
      const int kk = e / KG_BM, mm = e % KG_BM;
#else
      const int mm = e / BK, kk = e % BK;
#endif
      const int gm = m0 + mm, gk = k0 + kk;
      As[(mm / TM) * (BK * TM) + kk * TM + mm % TM] =
          ((KG_EVEN_M ? 1 : gm < GM) & (KG_EVEN_K ? 1 : gk < GK)) ? KG_A(gm, gk) : 0.0f;
    }
#endif
#if (!GTRANS_B || GPACK_T) && (GPACK_T == 0 || GPACK_T % VW == 0)
    /* B rows (or packed panels) are contiguous in n: vector copies. */
    for (int e = lid; e < BK * (KG_BN / VW); e += WX * WY) {
      const int kk = e / (KG_BN / VW), nn = (e % (KG_BN / VW)) * VW;
      const int gn = n0 + nn, gk = k0 + kk;
      KG_VT v;
      if ((KG_EVEN_N ? 1 : gn + VW <= GN) & (KG_EVEN_K ? 1 : gk < GK)) {
        v = KG_VLD(GB_F16, B + KG_BI(gk, gn));
      } else {
#pragma unroll
        for (int l = 0; l < VW; ++l)
          KG_LANE(v, l) = ((gn + l < GN) & (gk < GK)) ? KG_B(gk, gn + l) : 0.0f;
      }
      KG_VSTORE(v, Bs + (nn / TN) * (BK * TN) + kk * TN + nn % TN);
    }
#else
    for (int e = lid; e < BK * KG_BN; e += WX * WY) {
      const int nn = e / BK, kk = e % BK;
      const int gn = n0 + nn, gk = k0 + kk;
      Bs[(nn / TN) * (BK * TN) + kk * TN + nn % TN] =
          ((KG_EVEN_N ? 1 : gn < GN) & (KG_EVEN_K ? 1 : gk < GK)) ? KG_B(gk, gn) : 0.0f;
    }
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
    const bool first = k0 == 0, last = k0 + BK >= GK;
    /* The accumulators live only inside one K slice (partial sums go
     * through Y, or with GPSUM the private array), so no register tile
     * crosses a barrier: on CPU devices (PoCL) they stay in registers. */
    for (int jn = 0; jn < MN; ++jn) {
      const int cn = (jn * WX + tx) * TN; /* column of the micro-tile in the block */
      const __local float* bp = Bs + (cn / TN) * (BK * TN);
      for (int im = 0; im < MM; ++im) {
        const int rm = (im * WY + ty) * TM;
        const __local float* ap = As + (rm / TM) * (BK * TM);
        KG_VT acc[TM][KG_NV];
        #pragma unroll
        for (int i = 0; i < TM; ++i)
          #pragma unroll
          for (int j = 0; j < KG_NV; ++j) acc[i][j] = (KG_VT)(0.0f);
        if (!first) {
          #pragma unroll
          for (int i = 0; i < TM; ++i) {
            const int gm = m0 + rm + i;
            if (KG_EVEN_M ? 0 : gm >= GM) break;
            #pragma unroll
            for (int j = 0; j < KG_NV; ++j) {
#if GPSUM
              acc[i][j] = KG_PS_AT(i, j);
#else
              const int gn = n0 + cn + j * VW;
              if (KG_EVEN_N ? 1 : gn + VW <= GN) {
                acc[i][j] = KG_VLOAD(Y + gm * GLDY + gn);
              } else {
                #pragma unroll
                for (int l = 0; l < VW; ++l)
                  if (gn + l < GN) KG_LANE(acc[i][j], l) = Y[gm * GLDY + gn + l];
              }
#endif
            }
          }
        }
#pragma unroll 2
        for (int k = 0; k < BK; ++k) {
          KG_VT bv[KG_NV];
          #pragma unroll
          for (int j = 0; j < KG_NV; ++j) bv[j] = KG_VLOAD(bp + k * TN + j * VW);
          #pragma unroll
          for (int i = 0; i < TM; ++i) {
            const KG_VT av = (KG_VT)(ap[k * TM + i]);
            #pragma unroll
            for (int j = 0; j < KG_NV; ++j) acc[i][j] = fma(av, bv[j], acc[i][j]);
          }
        }
        #pragma unroll
        for (int i = 0; i < TM; ++i) {
          const int gm = m0 + rm + i;
          if (KG_EVEN_M ? 0 : gm >= GM) break;
          #pragma unroll
          for (int j = 0; j < KG_NV; ++j) {
            const int gn = n0 + cn + j * VW;
            KG_VT v = acc[i][j];
#if GPSUM
            if (!last) {
              KG_PS_AT(i, j) = v;
              continue;
            }
#endif
            if (last) {
              v *= (KG_VT)(GALPHA);
#if GHAS_BIAS
              #pragma unroll
              for (int l = 0; l < VW; ++l)
                if (KG_EVEN_N ? 1 : gn + l < GN)
                  KG_LANE(v, l) += GBETA * KG_LD(GC_F16, BIAS, gm * GBIAS_SM + (gn + l) * GBIAS_SN);
#endif
#if GHAS_RES
              #pragma unroll
              for (int l = 0; l < VW; ++l)
                if (KG_EVEN_N ? 1 : gn + l < GN) KG_LANE(v, l) += KG_LD(GR_F16, RES, gm * GLDY + gn + l);
#endif
#if GACT == 1
              v = (0.5f * v) * (1.0f + erf(v * 0.70710678118654752f));
#elif GACT == 2
              v = (0.5f * v) * (1.0f + tanh(0.79788456080286536f * (v + ((0.044715f * v) * v) * v)));
#elif GACT == 3
              v = fmax(v, (KG_VT)(0.0f));
#elif GACT == 4
              v = fmin(fmax(v, (KG_VT)(GACT_LO)), (KG_VT)(GACT_HI));
#endif
            }
            if (KG_EVEN_N ? 1 : gn + VW <= GN) {
              KG_VST(GY_F16, v, Y + gm * GLDY + gn);
            } else {
              #pragma unroll
              for (int l = 0; l < VW; ++l)
                if (gn + l < GN) KG_ST(GY_F16, KG_LANE(v, l), Y, gm * GLDY + gn + l);
            }
          }
        }
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
}

#undef KG_BM
#undef KG_BN
#undef KG_NV
#undef KG_CAT_
#undef KG_CAT
#undef KG_VT
#undef KG_VLOAD
#undef KG_VSTORE
#undef KG_LANE
#undef KG_EVEN_M
#undef KG_EVEN_N
#undef KG_EVEN_K
#undef KG_A
#undef KG_B
#undef KG_BI
#undef KG_PS_AT
#undef KG_LD_0
#undef KG_LD_1
#undef KG_LD
#undef KG_ST_0
#undef KG_ST_1
#undef KG_ST
#undef KG_VLD_0
#undef KG_VLD_1
#undef KG_VLD
#undef KG_VST_0
#undef KG_VST_1
#undef KG_VST
