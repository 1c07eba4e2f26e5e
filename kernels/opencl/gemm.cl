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
 *   GALPHA GBETA         float literals
 *   TM TN VW WX WY BK    tiles (TN % VW == 0; VW in 1, 2, 4, 8, 16)
 *   MM MN                micro-tiles per work-item along M and N
 * Launch: global (ceil(GN/BN)*WX, ceil(GM/BM)*WY, GBATCH), local (WX, WY, 1).
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
#define KG_EVEN_M (GM % KG_BM == 0)
#define KG_EVEN_N (GN % KG_BN == 0)
#define KG_EVEN_K (GK % BK == 0)
#if GTRANS_A
#define KG_A(m, k) A[(k) * GLDA + (m)]
#else
#define KG_A(m, k) A[(m) * GLDA + (k)]
#endif
#if GPACK_T
/* B packed by lowering/lower_nn_gemm.c: panels of GPACK_T columns, K in
 * blocks of GPACK_KBS (see kiln_opencl_gemm_t). */
#define KG_B(k, n)                                                                             \
  B[((((k) / GPACK_KBS) * GPACK_TILES + (n) / GPACK_T) * GPACK_KBS + (k) % GPACK_KBS) * GPACK_T + \
    (n) % GPACK_T]
#elif GTRANS_B
#define KG_B(k, n) B[(n) * GLDB + (k)]
#else
#define KG_B(k, n) B[(k) * GLDB + (n)]
#endif

__kernel __attribute__((reqd_work_group_size(WX, WY, 1))) void KILN_GEMM_NAME(KILN_GEMM_SIGNATURE) {
  /* Panel-major slices, as a BLAS packs them: the TM rows of one A micro-
   * panel are contiguous per k, and so are the TN columns of a B one, so
   * the inner loop streams both. */
  __local float As[BK * KG_BM]; /* As[(m / TM) * BK * TM + k * TM + m % TM] */
  __local float Bs[BK * KG_BN]; /* Bs[(n / TN) * BK * TN + k * TN + n % TN] */
  const int tx = (int)get_local_id(0), ty = (int)get_local_id(1);
  const int lid = ty * WX + tx;
  const int n0 = (int)get_group_id(0) * KG_BN, m0 = (int)get_group_id(1) * KG_BM;
  const int bz = (int)get_group_id(2);
  A += (long)bz * GSA;
  B += (long)bz * GSB;
  Y += (long)bz * GSY;

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
        v = KG_VLOAD(A + gm * GLDA + gk);
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
        v = KG_VLOAD(&KG_B(gk, gn));
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
     * through Y), so nothing private crosses a barrier: on CPU devices
     * (PoCL) they stay in registers. */
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
              const int gn = n0 + cn + j * VW;
              if (KG_EVEN_N ? 1 : gn + VW <= GN) {
                acc[i][j] = KG_VLOAD(Y + gm * GLDY + gn);
              } else {
                #pragma unroll
                for (int l = 0; l < VW; ++l)
                  if (gn + l < GN) KG_LANE(acc[i][j], l) = Y[gm * GLDY + gn + l];
              }
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
            if (last) {
              v *= (KG_VT)(GALPHA);
#if GHAS_BIAS
              #pragma unroll
              for (int l = 0; l < VW; ++l)
                if (KG_EVEN_N ? 1 : gn + l < GN)
                  KG_LANE(v, l) += GBETA * BIAS[gm * GBIAS_SM + (gn + l) * GBIAS_SN];
#endif
            }
            if (KG_EVEN_N ? 1 : gn + VW <= GN) {
              KG_VSTORE(v, Y + gm * GLDY + gn);
            } else {
              #pragma unroll
              for (int l = 0; l < VW; ++l)
                if (gn + l < GN) Y[gm * GLDY + gn + l] = KG_LANE(v, l);
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
