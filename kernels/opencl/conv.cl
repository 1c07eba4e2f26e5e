/* kiln implicit-GEMM convolution template for OpenCL C 1.2.
 *
 *   Y[b][m][p] = EPI(bias[m] + sum_{c, tap} W[m][c*CT + tap] * XP[b][c][TOFF[tap] + q(p)])
 *
 * The convolution as the lowering (lowering/lower_nn_conv.c, "implicit
 * GEMM") lays it out: the input is either X itself or its zero-padded
 * stride-phase split XP (one pass, done by the plan's own phase kernel),
 * in which every tap is a constant shift TOFF[tap] of a flat plane of
 * CPLANE floats per channel, so the GEMM's B operand B[c*CT + tap][q] =
 * XP[c][TOFF[tap] + q] is contiguous along the output grid q and needs no
 * bounds checks (the plane carries the slack the last tile reads). The
 * grid has the pitch of the phase images (CQ1 x CQ2 per depth slice), so
 * it holds CQ2 - CWO garbage columns per row; they are computed and never
 * stored to Y.
 *
 * Tiling is gemm.cl's: a work-group of WX x WY items computes a BM x BN
 * block (BM = TM*WY*MM output channels, BN = TN*WX*MN grid positions), K
 * in slices of BK copied panel-major into __local memory, a TM x TN
 * register tile per micro-tile, no accumulator live across a barrier
 * (PoCL spills those): partial sums of a slice go to PS (the GEMM's grid
 * scratch YF when CCROP, Y itself otherwise) and are read back by the next
 * slice. The last slice adds the bias, applies the fused epilogue KC_EPI
 * and stores the valid grid positions into Y (dense NCHW), vector stores
 * where a run of VW positions lies inside one output row.
 *
 * f16 storage (--precision fp16): any of W, XP, BIAS, Y and the epilogue
 * operands may be a half buffer (CW_F16, CX_F16, CC_F16, CY_F16; the
 * epilogue's own loads). OpenCL C 1.2 without cl_khr_fp16 may not
 * dereference a half pointer, so they are read with vload_half[n] and Y is
 * written with vstore_half[n]_rte; every sum is f32 (the B slice is
 * converted once, into __local floats, and so is a tiled f16 weight slice:
 * the micro-kernel reads floats only).
 *
 * Partial sums between K slices never go through f16 (rounding each slice's
 * sum would add an error that grows with the number of slices, i.e. with K):
 * with CPSUM 0 they go through PS as above, which the host allows only when
 * PS is an f32 buffer (the precision pass keeps the grid f32 where the
 * printed GEMM accumulates in it); with CPSUM 1 (PS would be f16: an f16 Y
 * without a crop, or an f16 grid) each work-item keeps the f32 partial sums
 * of all its MM x MN micro-tiles in a private array across the slices,
 * read into the register tile and written back the same way PS is. On
 * PoCL's CPU device that array is stack memory (BM x BN / (WX x WY) floats,
 * 32 KB at the default tiles; a work-group of several items keeps one per
 * item): it replaces the global round trip through PS instead of adding
 * one, and the grid temp leaves the program (the host matches without the
 * 'F' parameter). On a GPU it would be spilled scratch; tiles for a GPU
 * would keep MM = MN = 1.
 *
 * The weights W are, with CWTILED, re-laid out at compile time in the
 * order the micro-kernel reads them (opencl_conv.c): block of BM channels,
 * K slice, micro-panel of TM channels, k, channel, zero-padded to whole
 * blocks and slices, so the inner loop reads them straight from W with no
 * copy and no guards. Without it (a constant other kernels read too) W is
 * the lowering's packed constant (panels of CPT output channels, K in
 * blocks of CKBS): element (m, k) at
 * (((k / CKBS) * CTILES + m / CPT) * CKBS + k % CKBS) * CPT + m % CPT,
 * gathered into __local memory per slice.
 *
 * Instance parameters (the includer defines them before this text and
 * #undefs them after):
 *   KILN_CONV_NAME, KILN_CONV_SIGNATURE (parameters W, XP, Y, optionally
 *     YF, BIAS and the epilogue operands), KC_TOFF (name of a __constant
 *     int[CT] array of tap shifts)
 *   CM CQ CK CT   output channels, grid size, K = channels * taps, taps
 *   CC CPLANE     input channels, floats per channel plane of XP
 *   CBATCH        images (get_group_id(2))
 *   CPT CKBS CTILES  packed weight layout
 *   CCROP         1: Y is the valid part of the grid (YF holds partials)
 *   CQ1 CQ2       grid pitch: rows per depth slice, columns per row
 *   CDO CHO CWO   output depth, height, width (CP = their product)
 *   CHAS_BIAS     bias per output channel
 *   CWTILED       W in the micro-kernel's order (above)
 *   CW_F16 CX_F16 CC_F16 CY_F16  1: that buffer holds half (storage only)
 *   CPSUM         0: partial sums through PS (f32); 1: in a private array
 *   KC_EPI(v, b, m, p, LD, LDH)  statement applying the epilogue to v
 *     (float or KG_VT) for image b, channel m, dense position p; LD(ptr)
 *     loads a value of v's type from a float pointer, LDH from a half one;
 *     it runs in the scope of KC_EPI_PRE(b, m), which loads the operands
 *     that are the same for all positions once
 *   TM TN VW WX WY BK MM MN  tiles, as in gemm.cl
 *   CRT           0: the above are macros (one kernel per shape);
 *                 1: run-time shapes (below)
 * Launch: global (ceil(CQ/BN)*WX, ceil(CM/BM)*WY, CBATCH), local (WX, WY, 1).
 *
 * Run-time shapes (CRT 1): PoCL compiles every kernel of a program at its
 * first launch, about 1.5 s of CPU each here, so a kernel per conv shape
 * made most of a cold start (ResNet-18: 7 conv shapes). Then the sizes
 * (CM .. CWO), the K slice BK and the micro-tile counts MM MN are read at
 * the start from the kernel's last parameter KS (an int constant buffer:
 * opencl_conv.c writes its layout, the epilogue's strides and the tap
 * shifts KC_TOFF come from it too), the local and private arrays are sized
 * for the largest KC_BKX, KC_MMX, KC_MNX the instance allows, and one kernel
 * serves every conv with the same tiles TM TN VW WX WY, epilogue and
 * flags. The register tile and its loops stay compile-time, so the
 * micro-kernel is the same code.
 */
#if CRT
#define KC_RT_DECL                                                                                       \
  const int CM = KS[0], CQ = KS[1], CK = KS[2], CT = KS[3], CC = KS[4], CPLANE = KS[5], CPT = KS[6];   \
  const int CKBS = KS[7], CTILES = KS[8], CQ1 = KS[9], CQ2 = KS[10], CDO = KS[11], CHO = KS[12];       \
  const int CWO = KS[13], BK = KS[14], MM = KS[15], MN = KS[16];
#define KC_TOFF (KS + KC_KS_TOFF)
/* the lane-by-lane paths (row ends, the grid's tail) as loops: unrolled,
 * their VW copies of the epilogue per register-tile entry were most of
 * the code PoCL compiles, and they run once per output */
#define KC_LANES _Pragma("unroll 1")
/* no unroll hint on the K loop: PoCL's LLVM cannot unroll a run-time BK
 * by 2 and printed "1 warning generated." (loop not unrolled) per build */
#define KC_UNROLL_K
#else
#define KC_RT_DECL
#define KC_LANES _Pragma("unroll")
#define KC_UNROLL_K _Pragma("unroll 2")
#define KC_BKX BK
#define KC_MMX MM
#define KC_MNX MN
#endif
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
#define KG_SLOAD(p) (*(p))
/* f16 storage: loads and stores by the buffer's KC_*_F16 flag h (0 float,
 * 1 half; half pointers are never dereferenced) */
#define KC_LD_0(p, i) ((p)[i])
#define KC_LD_1(p, i) vload_half((i), (p))
#define KC_LD(h, p, i) KG_CAT(KC_LD_, h)(p, i)
#define KC_ST_0(v, p, i) ((p)[i] = (v))
#define KC_ST_1(v, p, i) vstore_half_rte((v), (i), (p))
#define KC_ST(h, v, p, i) KG_CAT(KC_ST_, h)(v, p, i)
#define KC_VLD_0(p) KG_VLOAD(p)
#define KC_VST_0(v, p) KG_VSTORE(v, p)
#if VW == 1
#define KC_VLD_1(p) vload_half(0, (p))
#define KC_VST_1(v, p) vstore_half_rte((v), 0, (p))
#else
#define KC_VLD_1(p) KG_CAT(vload_half, VW)(0, (p))
#define KC_VST_1(v, p) KG_CAT(KG_CAT(vstore_half, VW), _rte)((v), 0, (p))
#endif
#define KC_VLD(h, p) KG_CAT(KC_VLD_, h)(p)
#define KC_VST(h, v, p) KG_CAT(KC_VST_, h)(v, p)
#define KG_VLOADH(p) KC_VLD_1(p)
#define KG_SLOADH(p) vload_half(0, (p))
#if CX_F16
#define KC_TX half
#else
#define KC_TX float
#endif
#if CY_F16
#define KC_TY half
#else
#define KC_TY float
#endif
#define KG_EVEN_M (CM % KG_BM == 0)
#define KG_EVEN_N (CQ % KG_BN == 0)
#define KG_EVEN_K (CK % BK == 0)
#define KC_CP (CDO * CHO * CWO)
#define KC_W(m, k) KC_LD(CW_F16, W, ((((k) / CKBS) * CTILES + (m) / CPT) * CKBS + (k) % CKBS) * CPT + (m) % CPT)
#if CPSUM
#define KC_PS_AT(i, j) pacc[((jn * MM + im) * TM + (i)) * KG_NV + (j)]
#elif CCROP
#define KC_PS YF
#else
#define KC_PS Y
#endif

#define KC_NKS ((CK + BK - 1) / BK)

__kernel __attribute__((reqd_work_group_size(WX, WY, 1))) void KILN_CONV_NAME(KILN_CONV_SIGNATURE) {
#if !CWTILED || CW_F16
  __local float As[KC_BKX * TM * WY * KC_MMX]; /* As[(m / TM) * BK * TM + k * TM + m % TM] */
#endif
  __local float Bs[KC_BKX * TN * WX * KC_MNX]; /* Bs[(n / TN) * BK * TN + k * TN + n % TN] */
  KC_RT_DECL
  const int tx = (int)get_local_id(0), ty = (int)get_local_id(1);
  const int lid = ty * WX + tx;
  const int n0 = (int)get_group_id(0) * KG_BN, m0 = (int)get_group_id(1) * KG_BM;
  const int bz = (int)get_group_id(2);
  const __global KC_TX* xb = XP + (long)bz * CC * CPLANE;
#if CPSUM
  KG_VT pacc[KC_MNX * KC_MMX * TM * KG_NV]; /* f32 partial sums of the item's micro-tiles */
#else
  __global float* ps = KC_PS + (long)bz * CM * CQ;
#endif
  __global KC_TY* yb = Y + (long)bz * CM * KC_CP;

  for (int k0 = 0; k0 < CK; k0 += BK) {
#if CWTILED && CW_F16
    /* A: this block's slice, in the order the micro-kernel reads it,
     * converted once per slice into __local floats with vector loads (in
     * the micro-kernel each conversion would cost a lane shuffle per
     * multiply-add, and MN micro-tiles read each weight) */
    {
      const __global half* ws = W + ((long)(m0 / KG_BM) * KC_NKS + k0 / BK) * (BK * KG_BM);
      if (BK * KG_BM % 16 == 0)
        for (int e = lid * 16; e < BK * KG_BM; e += WX * WY * 16) vstore16(vload_half16(0, ws + e), 0, As + e);
      else
        for (int e = lid; e < BK * KG_BM; e += WX * WY) As[e] = vload_half(e, ws);
    }
    const __local float* as = As;
#elif CWTILED
    /* A: this block's slice, in the order the micro-kernel reads it. */
    const __global float* as = W + ((long)(m0 / KG_BM) * KC_NKS + k0 / BK) * (BK * KG_BM);
#else
    /* A: the packed weights, channels within a panel contiguous. */
    for (int e = lid; e < BK * KG_BM; e += WX * WY) {
      const int kk = e / KG_BM, mm = e % KG_BM;
      const int gm = m0 + mm, gk = k0 + kk;
      As[(mm / TM) * (BK * TM) + kk * TM + mm % TM] =
          ((KG_EVEN_M ? 1 : gm < CM) & (KG_EVEN_K ? 1 : gk < CK)) ? KC_W(gm, gk) : 0.0f;
    }
    const __local float* as = As;
#endif
    /* B: rows of the phase planes, shifted per tap; vector copies. */
#if CRT
    /* run-time sizes: the row kk, its channel ci and tap ti advance with e
     * instead of being divided out per element (a division by a run-time
     * value costs tens of cycles, by a constant a multiply) */
    int kk = lid / (KG_BN / VW), nv = lid % (KG_BN / VW);
    int ci = (k0 + kk) / CT, ti = (k0 + kk) % CT;
    for (int e = lid; e < BK * (KG_BN / VW); e += WX * WY) {
      const int nn = nv * VW;
#else
    for (int e = lid; e < BK * (KG_BN / VW); e += WX * WY) {
      const int kk = e / (KG_BN / VW), nn = (e % (KG_BN / VW)) * VW;
      const int ci = (k0 + kk) / CT, ti = (k0 + kk) % CT;
#endif
      const int gn = n0 + nn, gk = k0 + kk;
      KG_VT v;
      if (KG_EVEN_K ? 1 : gk < CK) {
        const __global KC_TX* src = xb + ci * CPLANE + KC_TOFF[ti] + gn;
        if (KG_EVEN_N ? 1 : gn + VW <= CQ) {
          v = KC_VLD(CX_F16, src);
        } else {
KC_LANES
          for (int l = 0; l < VW; ++l) KG_LANE(v, l) = gn + l < CQ ? KC_LD(CX_F16, src, l) : 0.0f;
        }
      } else {
        v = (KG_VT)(0.0f);
      }
      KG_VSTORE(v, Bs + (nn / TN) * (BK * TN) + kk * TN + nn % TN);
#if CRT
      for (nv += WX * WY; nv >= KG_BN / VW; nv -= KG_BN / VW) {
        ++kk;
        if (++ti == CT) {
          ti = 0;
          ++ci;
        }
      }
#endif
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const bool first = k0 == 0, last = k0 + BK >= CK;
    for (int jn = 0; jn < MN; ++jn) {
      const int cn = (jn * WX + tx) * TN;
      const __local float* bp = Bs + (cn / TN) * (BK * TN);
      for (int im = 0; im < MM; ++im) {
        const int rm = (im * WY + ty) * TM;
#if CWTILED && !CW_F16
        const __global float* ap = as + (rm / TM) * (BK * TM);
#else
        const __local float* ap = as + (rm / TM) * (BK * TM);
#endif
        KG_VT acc[TM][KG_NV];
        #pragma unroll
        for (int i = 0; i < TM; ++i)
          #pragma unroll
          for (int j = 0; j < KG_NV; ++j) acc[i][j] = (KG_VT)(0.0f);
        if (!first) {
          #pragma unroll
          for (int i = 0; i < TM; ++i) {
            const int gm = m0 + rm + i;
            if (KG_EVEN_M ? 0 : gm >= CM) break;
            #pragma unroll
            for (int j = 0; j < KG_NV; ++j) {
#if CPSUM
              acc[i][j] = KC_PS_AT(i, j);
#else
              const int gn = n0 + cn + j * VW;
              if (KG_EVEN_N ? 1 : gn + VW <= CQ) {
                acc[i][j] = KG_VLOAD(ps + gm * CQ + gn);
              } else {
                KC_LANES
                for (int l = 0; l < VW; ++l)
                  if (gn + l < CQ) KG_LANE(acc[i][j], l) = ps[gm * CQ + gn + l];
              }
#endif
            }
          }
        }
KC_UNROLL_K
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
          if (KG_EVEN_M ? 0 : gm >= CM) break;
          KC_EPI_PRE(bz, gm);
          #pragma unroll
          for (int j = 0; j < KG_NV; ++j) {
            const int gn = n0 + cn + j * VW;
            KG_VT v = acc[i][j];
            if (!last) {
#if CPSUM
              KC_PS_AT(i, j) = v;
#else
              if (KG_EVEN_N ? 1 : gn + VW <= CQ) {
                KG_VSTORE(v, ps + gm * CQ + gn);
              } else {
                KC_LANES
                for (int l = 0; l < VW; ++l)
                  if (gn + l < CQ) ps[gm * CQ + gn + l] = KG_LANE(v, l);
              }
#endif
              continue;
            }
#if CHAS_BIAS
            v += (KG_VT)(KC_LD(CC_F16, BIAS, gm));
#endif
#if CCROP
            /* grid position -> output (od, oh, ow); a run inside one row
             * is one vector store, anything else goes lane by lane */
            const int gd = gn / (CQ1 * CQ2), gr = gn % (CQ1 * CQ2);
            const int gh = gr / CQ2, gw = gr % CQ2;
            /* gd < CDO even for one depth slice: positions past the grid
             * (the last block's tail, gd = 1) would land in channel gm + 1 */
            if ((gd < CDO) & (gh < CHO) & (gw + VW <= CWO)) {
              const int p = (gd * CHO + gh) * CWO + gw;
              KC_EPI(v, bz, gm, p, KG_VLOAD, KG_VLOADH);
              KC_VST(CY_F16, v, yb + gm * KC_CP + p);
            } else {
              KC_LANES
              for (int l = 0; l < VW; ++l) {
                const int q = gn + l;
                const int qd = q / (CQ1 * CQ2), qr = q % (CQ1 * CQ2);
                const int qh = qr / CQ2, qw = qr % CQ2;
                if ((q < CQ) & (qd < CDO) & (qh < CHO) & (qw < CWO)) {
                  const int p = (qd * CHO + qh) * CWO + qw;
                  float s = KG_LANE(v, l);
                  KC_EPI(s, bz, gm, p, KG_SLOAD, KG_SLOADH);
                  KC_ST(CY_F16, s, yb, gm * KC_CP + p);
                }
              }
            }
#else
            if (KG_EVEN_N ? 1 : gn + VW <= CQ) {
              KC_EPI(v, bz, gm, gn, KG_VLOAD, KG_VLOADH);
              KC_VST(CY_F16, v, yb + gm * KC_CP + gn);
            } else {
              KC_LANES
              for (int l = 0; l < VW; ++l)
                if (gn + l < CQ) {
                  float s = KG_LANE(v, l);
                  KC_EPI(s, bz, gm, gn + l, KG_SLOAD, KG_SLOADH);
                  KC_ST(CY_F16, s, yb, gm * KC_CP + gn + l);
                }
            }
#endif
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
#undef KG_SLOAD
#undef KG_EVEN_M
#undef KG_EVEN_N
#undef KG_EVEN_K
#undef KC_CP
#undef KC_W
#undef KC_PS
#undef KC_PS_AT
#undef KC_NKS
#undef KC_LD_0
#undef KC_LD_1
#undef KC_LD
#undef KC_ST_0
#undef KC_ST_1
#undef KC_ST
#undef KC_VLD_0
#undef KC_VLD_1
#undef KC_VLD
#undef KC_VST_0
#undef KC_VST_1
#undef KC_VST
#undef KG_VLOADH
#undef KG_SLOADH
#undef KC_TX
#undef KC_TY
#undef KC_RT_DECL
#undef KC_LANES
#undef KC_UNROLL_K
#undef KC_TOFF
#if !CRT
#undef KC_BKX
#undef KC_MMX
#undef KC_MNX
#endif
