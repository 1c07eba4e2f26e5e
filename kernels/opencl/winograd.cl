/* kiln Winograd F(2x2, 3x3) convolution template for OpenCL C 1.2.
 *
 *   Y[b][m][oy][ox] = EPI(bias[m] + sum_c sum_{kh,kw} w[m][c][kh][kw] * XP[b][c][(oy+kh)*CQ2 + ox+kw])
 *
 * for a 3x3, stride-1, dilation-1 convolution whose input the lowering laid
 * out as planes of CPLANE floats per channel with row pitch CQ2 (the
 * zero-padded phase split, or X itself when there is no padding), so the
 * taps are the shifts kh*CQ2 + kw (the same operands as conv.cl).
 *
 * The output is cut into 2x2 tiles (KW_TH x KW_TW of them, numbered row by
 * row, each row padded to whole groups of four tiles: KW_TWP); tile t reads the 4x4 input patch d at rows 2ty.., columns 2tx.. and
 *   Y_tile = A^T [ sum_c (G g_c G^T) .* (B^T d_c B) ] A
 * with the usual F(2x2, 3x3) matrices (B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0;
 * 0 1 0 -1], A^T = [1 1 1 0; 0 1 -1 -1]). So the work is 16 GEMMs, one per
 * position xi of the 4x4 transformed tile, M output channels x tiles x C
 * channels: 16 multiply-adds per tile and channel against 36 for the
 * direct 2x2 outputs.
 *
 * The weights U = G g G^T are transformed at compile time
 * (opencl_winograd.c) and laid out in the order the micro-kernel reads
 * them: block of TM channels, xi, channel (padded with zeros to whole
 * slices of CB), channel of the block: U[((mb * 16 + xi) * KW_CP + c) * TM + i].
 *
 * A work-group of WX x WY items computes BM = TM*WY channels x BT = TN*WX
 * tiles. Per slice of CB input channels it transforms the CB x BT input
 * patches into __local Vs[xi][c][t] (a patch outside the plane's valid rows
 * and columns reads zeros there: those values reach only outputs past the
 * edge, which are not stored), then each item runs the 16 small GEMMs on its
 * TM channels x TN tiles (TN tiles a vector), keeping the 16 x TM partial
 * sums in a private array across slices. After the last slice it applies
 * A^T . A, the bias and the fused epilogue, and stores the outputs that lie
 * inside Y (dense NCHW).
 *
 * f16 storage (--precision fp16): any of W (U), XP, BIAS, Y and the
 * epilogue operands may be a half buffer (CW_F16, CX_F16, CC_F16, CY_F16;
 * the epilogue's own loads), read with vload_half[n] and written with
 * vstore_half_rte (OpenCL C 1.2 without cl_khr_fp16 may not dereference a
 * half pointer). The patches are transformed in f32 (__local Vs is float),
 * each GEMM's CB x TM slice of U is converted once into a private float
 * array, and the partial sums are the private f32 array above: nothing
 * between the slices is f16.
 *
 * Instance parameters (defined by the includer, #undef'd after):
 *   KILN_WINO_NAME, KILN_WINO_SIGNATURE (parameters as conv.cl's: W (here
 *     U), XP, Y, optionally YF (unused), BIAS and epilogue operands)
 *   CM CC           output and input channels
 *   CPLANE CQ2      floats per channel plane of XP, row pitch
 *   CHO CWO         output height and width
 *   CBATCH          images (get_group_id(2))
 *   CHAS_BIAS       bias per output channel
 *   CW_F16 CX_F16 CC_F16 CY_F16  1: that buffer holds half (storage only)
 *   KW_EPI(v, b, m, p, LD, LDH), KW_EPI_PRE(b, m)  the fused epilogue on a
 *                   float v (as conv.cl)
 *   TM TN WX WY CB  tiles: channels per item, tiles per item (vector width:
 *                   1, 2, 4, 8 or 16; TN * WX a multiple of 4), items per
 *                   group, channels per slice
 *   CF4 CU0       1: F(4x4, 3x3) (below; U after CU0 words), 0: F(2x2)
 *   CRT           0: the sizes above are macros; 1: run-time shapes, read
 *                 from the kernel's last parameter KS (CM CC CPLANE CQ2 CHO
 *                 CWO, then the epilogue's strides: opencl_winograd.c), so
 *                 one kernel serves every 3x3 conv with the same tiles,
 *                 epilogue and flags (PoCL compiles each kernel at its first
 *                 launch: see conv.cl)
 * Launch: global (ceil(KW_NT/BT)*WX, ceil(CM/BM)*WY, CBATCH), local (WX, WY, 1).
 */
#if CRT
#define KW_RT_DECL const int CM = KS[0], CC = KS[1], CPLANE = KS[2], CQ2 = KS[3], CHO = KS[4], CWO = KS[5];
/* the output tiles' lanes as loops (as conv.cl's KC_LANES) */
#define KW_LANES _Pragma("unroll 1")
#else
#define KW_RT_DECL
#define KW_LANES
#endif
#if CF4
#define KW_F 4
#else
#define KW_F 2
#endif
#define KW_TH ((CHO + KW_F - 1) / KW_F)
#define KW_TW ((CWO + KW_F - 1) / KW_F)
#define KW_TWP ((KW_TW + 3) / 4 * 4)
#define KW_NT (KW_TH * KW_TWP)
#define KW_BT (TN * WX)
#define KW_CP (((CC + CB - 1) / CB) * CB)
#define KW_CAT_(a, b) a##b
#define KW_CAT(a, b) KW_CAT_(a, b)
#if TN == 1
#define KW_VT float
#define KW_VLOAD(p) (*(p))
#define KW_LANE(v, l) (v)
#else
#define KW_VT KW_CAT(float, TN)
#define KW_VLOAD(p) KW_CAT(vload, TN)(0, (p))
#define KW_LANE(v, l) (((float*)&(v))[l])
#endif
#define KW_SLOAD(p) (*(p))
#define KW_SLOADH(p) vload_half(0, (p))
#define KW_CP_OUT (CHO * CWO)
/* f16 storage: loads and stores by the buffer's flag h (0 float, 1 half) */
#define KW_LD_0(p, i) ((p)[i])
#define KW_LD_1(p, i) vload_half((i), (p))
#define KW_LD(h, p, i) KW_CAT(KW_LD_, h)(p, i)
#if CX_F16
#define KW_TX half
#define KW_LD16(p) vload_half16(0, (p))
#define KW_LD8(p) vload_half8(0, (p))
#define KW_LD2(p) vload_half2(0, (p))
#else
#define KW_TX float
#define KW_LD16(p) vload16(0, (p))
#define KW_LD8(p) vload8(0, (p))
#define KW_LD2(p) vload2(0, (p))
#endif
#if CW_F16
#define KW_WT half
#else
#define KW_WT float
#endif
#if CY_F16
#define KW_TY half
#define KW_ST(v, p, i) vstore_half_rte((v), (i), (p))
#if TN == 1
#define KW_VSTH(v, p) vstore_half_rte((v), 0, (p))
#else
#define KW_VSTH(v, p) KW_CAT(KW_CAT(vstore_half, TN), _rte)((v), 0, (p))
#endif
#else
#define KW_TY float
#define KW_ST(v, p, i) ((p)[i] = (v))
#endif

/* Shared by the two bodies below (KW_F apart: F(2x2) or F(4x4)).
 * KW_TILE_ORIGINS: with run-time sizes, the first row and column of each
 * group of four tiles, divided out once per work-item instead of per
 * element of every slice (a division by a run-time value costs tens of
 * cycles, by a constant a multiply); KW_R0 / KW_S0 read them. */
#if CRT
#define KW_TILE_ORIGINS                        \
  int kw_r0[KW_BT / 4], kw_s0[KW_BT / 4];      \
  for (int q = 0; q < KW_BT / 4; ++q) {        \
    kw_r0[q] = ((t0 + q * 4) / KW_TWP) * KW_F; \
    kw_s0[q] = ((t0 + q * 4) % KW_TWP) * KW_F; \
  }
#define KW_R0(tl, t) kw_r0[(tl) / 4]
#define KW_S0(tl, t) kw_s0[(tl) / 4]
#else
#define KW_TILE_ORIGINS
#define KW_R0(tl, t) (((t) / KW_TWP) * KW_F)
#define KW_S0(tl, t) (((t) % KW_TWP) * KW_F)
#endif
/* d[P][P] (P = KW_F + 2; row r, column s of four tiles' patches, lane l
 * tile t + l) where the patches cross the plane's edge, the tiles or the
 * channels: zeros outside the valid rows and columns */
#define KW_EDGE_PATCH(d)                                                                                \
  _Pragma("unroll") for (int r = 0; r < KW_F + 2; ++r)                                                 \
  _Pragma("unroll") for (int s = 0; s < KW_F + 2; ++s)                                                 \
  _Pragma("unroll") for (int l = 0; l < 4; ++l) {                                                      \
    const bool in = (c < CC) & (t + l < KW_NT) & (r0 + r < CHO + 2) & (s0 + KW_F * l + s < CWO + 2); \
    ((float*)&(d)[r][s])[l] = in ? KW_LD(CX_F16, src, r * CQ2 + KW_F * l + s) : 0.0f;                 \
  }
#if CHAS_BIAS
#define KW_BIAS_OF(m) KW_LD(CC_F16, BIAS, (m))
#else
#define KW_BIAS_OF(m) 0.0f
#endif
/* channel m's outputs o[KW_F][KW_F] (TN lanes: the work-item's tiles) plus
 * |bias|, through the epilogue, stored inside Y (KW_ST: float or half) */
#define KW_STORE_TILES(o, bias)                                      \
  KW_LANES for (int l = 0; l < TN; ++l) {                            \
    const int t = t0 + tx * TN + l;                                  \
    if (t >= KW_NT) break;                                           \
    const int oy0 = (t / KW_TWP) * KW_F, ox0 = (t % KW_TWP) * KW_F;  \
    _Pragma("unroll") for (int r = 0; r < KW_F; ++r)                 \
    _Pragma("unroll") for (int s = 0; s < KW_F; ++s) {               \
      const int oy = oy0 + r, ox = ox0 + s;                          \
      if ((oy < CHO) & (ox < CWO)) {                                 \
        const int p = oy * CWO + ox;                                 \
        float v = KW_LANE((o)[r][s], l) + (bias);                    \
        KW_EPI(v, bz, m, p, KW_SLOAD, KW_SLOADH);                    \
        KW_ST(v, yb, (long)m * KW_CP_OUT + p);                       \
      }                                                              \
    }                                                                \
  }

#if !CF4
__kernel __attribute__((reqd_work_group_size(WX, WY, 1))) void KILN_WINO_NAME(KILN_WINO_SIGNATURE) {
  __local float Vs[16 * CB * KW_BT]; /* Vs[(xi * CB + c) * BT + t] */
  KW_RT_DECL
  const int tx = (int)get_local_id(0), ty = (int)get_local_id(1);
  const int lid = ty * WX + tx;
  const int t0 = (int)get_group_id(0) * KW_BT;
  const int mb = (int)get_group_id(1) * WY + ty; /* this item's block of TM channels */
  const int bz = (int)get_group_id(2);
  const __global KW_TX* xb = XP + (long)bz * CC * CPLANE;
  const __global KW_WT* ub = W + (long)mb * 16 * KW_CP * TM;
  KW_VT acc[16][TM];
  KW_TILE_ORIGINS
  for (int c0 = 0; c0 < CC; c0 += CB) {
    /* input transform of CB channels x BT tiles, four tiles of a row at a
     * time (their patches are columns 2j.. of 10 consecutive columns) */
    for (int e = lid; e < CB * (KW_BT / 4); e += WX * WY) {
      const int cl = e / (KW_BT / 4), tl = (e % (KW_BT / 4)) * 4;
      const int c = c0 + cl, t = t0 + tl;
      float4 d[4][4]; /* d[r][s]: row r, column s of the four patches */
      const int r0 = KW_R0(tl, t), s0 = KW_S0(tl, t);
      const __global KW_TX* src = xb + (long)c * CPLANE + r0 * CQ2 + s0;
      if ((c < CC) & (t < KW_NT) & (r0 + 4 <= CHO + 2) & (s0 + 10 <= CWO + 2)) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const float8 a = KW_LD8(src + r * CQ2);
          const float2 b = KW_LD2(src + r * CQ2 + 8);
          d[r][0] = a.even;
          d[r][1] = a.odd;
          d[r][2] = (float4)(a.s246, b.s0);
          d[r][3] = (float4)(a.s357, b.s1);
        }
#if CX_F16
      } else if ((c < CC) & (t < KW_NT) & ((r0 + 3) * CQ2 + s0 + 10 <= CPLANE)) {
        /* the plane's edge, reads inside the channel's plane: whole rows
         * loaded and the values outside the valid rows and columns zeroed
         * (per-element vload_half costs 1.5x the whole 7x7 layer). t < KW_NT
         * covers the four tiles: rows of tiles are whole groups of four */
        const int8 ca = (int8)(s0) + (int8)(0, 1, 2, 3, 4, 5, 6, 7);
        const int2 cb = (int2)(s0 + 8, s0 + 9);
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const bool row = r0 + r < CHO + 2;
          const float8 a = select((float8)(0.0f), KW_LD8(src + r * CQ2), (ca < (int8)(CWO + 2)) & (int8)(row ? -1 : 0));
          const float2 b = select((float2)(0.0f), KW_LD2(src + r * CQ2 + 8), (cb < (int2)(CWO + 2)) & (int2)(row ? -1 : 0));
          d[r][0] = a.even;
          d[r][1] = a.odd;
          d[r][2] = (float4)(a.s246, b.s0);
          d[r][3] = (float4)(a.s357, b.s1);
        }
#endif
      } else {
        KW_EDGE_PATCH(d);
      }
      float4 u[4][4]; /* B^T d */
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        u[0][s] = d[0][s] - d[2][s];
        u[1][s] = d[1][s] + d[2][s];
        u[2][s] = d[2][s] - d[1][s];
        u[3][s] = d[1][s] - d[3][s];
      }
      __local float* vs = Vs + cl * KW_BT + tl;
#pragma unroll
      for (int r = 0; r < 4; ++r) { /* (B^T d) B */
        vstore4(u[r][0] - u[r][2], 0, vs + (r * 4 + 0) * CB * KW_BT);
        vstore4(u[r][1] + u[r][2], 0, vs + (r * 4 + 1) * CB * KW_BT);
        vstore4(u[r][2] - u[r][1], 0, vs + (r * 4 + 2) * CB * KW_BT);
        vstore4(u[r][1] - u[r][3], 0, vs + (r * 4 + 3) * CB * KW_BT);
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    /* the 16 GEMMs of this slice on TM channels x TN tiles */
    const __local float* vp = Vs + tx * TN;
    for (int xi = 0; xi < 16; ++xi) {
      KW_VT a[TM];
#pragma unroll
      for (int i = 0; i < TM; ++i) a[i] = c0 == 0 ? (KW_VT)(0.0f) : acc[xi][i];
#if CW_F16
      /* this xi's CB x TM slice of U, converted once with vector loads into
       * a private float array the GEMM then reads as broadcasts (converting
       * in the loop costs a lane shuffle per multiply-add) */
      float up[CB * TM];
      {
        const __global half* uh = ub + ((long)xi * KW_CP + c0) * TM;
#if CB * TM % 16 == 0
        for (int e = 0; e < CB * TM; e += 16) vstore16(vload_half16(0, uh + e), 0, up + e);
#else
        for (int e = 0; e < CB * TM; ++e) up[e] = vload_half(e, uh);
#endif
      }
#else
      const __global float* up = ub + ((long)xi * KW_CP + c0) * TM;
#endif
      const __local float* vx = vp + xi * CB * KW_BT;
#pragma unroll 4
      for (int c = 0; c < CB; ++c) {
        const KW_VT v = KW_VLOAD(vx + c * KW_BT);
#pragma unroll
        for (int i = 0; i < TM; ++i) a[i] = fma((KW_VT)(up[c * TM + i]), v, a[i]);
      }
#pragma unroll
      for (int i = 0; i < TM; ++i) acc[xi][i] = a[i];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  /* output transform A^T acc A, bias, epilogue, stores */
  __global KW_TY* yb = Y + (long)bz * CM * KW_CP_OUT;
  for (int i = 0; i < TM; ++i) {
    const int m = mb * TM + i;
    if (m >= CM) break;
    KW_EPI_PRE(bz, m);
    KW_VT w[2][4]; /* A^T acc */
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      w[0][s] = acc[0 * 4 + s][i] + acc[1 * 4 + s][i] + acc[2 * 4 + s][i];
      w[1][s] = acc[1 * 4 + s][i] - acc[2 * 4 + s][i] - acc[3 * 4 + s][i];
    }
    KW_VT o[2][2]; /* (A^T acc) A */
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      o[r][0] = w[r][0] + w[r][1] + w[r][2];
      o[r][1] = w[r][1] - w[r][2] - w[r][3];
    }
    const float bias = KW_BIAS_OF(m);
#if CY_F16
    /* f16 Y: the epilogue lane by lane, then each 2x2 position's TN outputs
     * rounded to f16 with one vector conversion and stored as 16-bit words
     * (a scalar vstore_half_rte per output costs a third of the layer on
     * PoCL) */
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        KW_VT ov = o[r][s] + (KW_VT)(bias);
        KW_LANES
        for (int l = 0; l < TN; ++l) {
          const int t = t0 + tx * TN + l;
          const int oy = (t / KW_TWP) * 2 + r, ox = (t % KW_TWP) * 2 + s;
          if ((t < KW_NT) & (oy < CHO) & (ox < CWO)) {
            float v = KW_LANE(ov, l);
            KW_EPI(v, bz, m, oy * CWO + ox, KW_SLOAD, KW_SLOADH);
            KW_LANE(ov, l) = v;
          }
        }
        ushort hv[TN];
        KW_VSTH(ov, (__private half*)hv);
        KW_LANES
        for (int l = 0; l < TN; ++l) {
          const int t = t0 + tx * TN + l;
          const int oy = (t / KW_TWP) * 2 + r, ox = (t % KW_TWP) * 2 + s;
          if ((t < KW_NT) & (oy < CHO) & (ox < CWO)) ((__global ushort*)yb)[(long)m * KW_CP_OUT + oy * CWO + ox] = hv[l];
        }
      }
#else
    KW_STORE_TILES(o, bias);
#endif
  }
}

#endif /* !CF4 */

#if CF4
/* F(4x4, 3x3) (CF4 1; points 0, +-1, +-2): 4x4 output tiles from 6x6
 * patches at rows 4ty.., columns 4tx..,
 *   Y_tile = A^T [ sum_c U_c .* (B^T d_c B) ] A
 * with B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0;
 * 0 2 -1 -2 1 0; 0 4 0 -5 0 1] and A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0;
 * 0 1 1 4 4 0; 0 1 -1 8 -8 1]: 36 GEMMs, 36 multiply-adds per tile and
 * channel for 16 outputs (2.25 an output against F(2x2)'s 4). U is
 * lowering's KILN_TEMPLATE_W_WINOGRAD4 constant (the one the Vulkan
 * instance reads): KW_U0 words of the conv's sizes, then a channel's 36
 * positions together, U[KW_U0 + ((mb * KW_CP + c) * 36 + xi) * TM + i].
 * The same work-group shape, __local patches (36 positions), private
 * partial sums, zeros past the plane and stores inside Y as F(2x2);
 * f16 buffers are read and written element by element. */
#define KW_U0 CU0
/* B^T x over six values (x0..x5) into y0..y5 */
#define KW_BT6(y, x)                                    \
  do {                                                  \
    y[0] = 4.0f * x[0] - 5.0f * x[2] + x[4];            \
    y[1] = x[3] + x[4] - 4.0f * (x[1] + x[2]);          \
    y[2] = x[4] - x[3] + 4.0f * (x[1] - x[2]);          \
    y[3] = x[4] - x[2] + 2.0f * (x[3] - x[1]);          \
    y[4] = x[4] - x[2] + 2.0f * (x[1] - x[3]);          \
    y[5] = 4.0f * x[1] - 5.0f * x[3] + x[5];            \
  } while (0)
/* A^T m over six values into o0..o3 */
#define KW_AT6(o, m)                                    \
  do {                                                  \
    o[0] = m[0] + m[1] + m[2] + m[3] + m[4];            \
    o[1] = (m[1] - m[2]) + 2.0f * (m[3] - m[4]);        \
    o[2] = (m[1] + m[2]) + 4.0f * (m[3] + m[4]);        \
    o[3] = (m[1] - m[2]) + 8.0f * (m[3] - m[4]) + m[5]; \
  } while (0)

__kernel __attribute__((reqd_work_group_size(WX, WY, 1))) void KILN_WINO_NAME(KILN_WINO_SIGNATURE) {
  __local float Vs[36 * CB * KW_BT]; /* Vs[(xi * CB + c) * BT + t] */
  KW_RT_DECL
  const int tx = (int)get_local_id(0), ty = (int)get_local_id(1);
  const int lid = ty * WX + tx;
  const int t0 = (int)get_group_id(0) * KW_BT;
  const int mb = (int)get_group_id(1) * WY + ty; /* this item's block of TM channels */
  const int bz = (int)get_group_id(2);
  const __global KW_TX* xb = XP + (long)bz * CC * CPLANE;
  const __global KW_WT* ub = W + KW_U0 + (long)mb * KW_CP * 36 * TM;
  KW_VT acc[36][TM];
  KW_TILE_ORIGINS
  for (int c0 = 0; c0 < CC; c0 += CB) {
    /* input transform of CB channels x BT tiles, four tiles of a row at a
     * time (their patches are columns 4j.. of 18 consecutive columns) */
    for (int e = lid; e < CB * (KW_BT / 4); e += WX * WY) {
      const int cl = e / (KW_BT / 4), tl = (e % (KW_BT / 4)) * 4;
      const int c = c0 + cl, t = t0 + tl;
      float4 d[6][6]; /* d[r][s]: row r, column s of the four patches */
      const int r0 = KW_R0(tl, t), s0 = KW_S0(tl, t);
      const __global KW_TX* src = xb + (long)c * CPLANE + r0 * CQ2 + s0;
      if ((c < CC) & (t < KW_NT) & (r0 + 6 <= CHO + 2) & (s0 + 18 <= CWO + 2)) {
#pragma unroll
        for (int r = 0; r < 6; ++r) {
          const float16 a = KW_LD16(src + r * CQ2);
          const float2 b = KW_LD2(src + r * CQ2 + 16);
          d[r][0] = a.s048c;
          d[r][1] = a.s159d;
          d[r][2] = a.s26ae;
          d[r][3] = a.s37bf;
          d[r][4] = (float4)(a.s48c, b.s0);
          d[r][5] = (float4)(a.s59d, b.s1);
        }
      } else {
        KW_EDGE_PATCH(d);
      }
      float4 u[6][6]; /* B^T d */
#pragma unroll
      for (int s = 0; s < 6; ++s) {
        float4 x[6], y[6];
#pragma unroll
        for (int r = 0; r < 6; ++r) x[r] = d[r][s];
        KW_BT6(y, x);
#pragma unroll
        for (int r = 0; r < 6; ++r) u[r][s] = y[r];
      }
      __local float* vs = Vs + cl * KW_BT + tl;
#pragma unroll
      for (int r = 0; r < 6; ++r) { /* (B^T d) B */
        float4 y[6];
        KW_BT6(y, u[r]);
#pragma unroll
        for (int s = 0; s < 6; ++s) vstore4(y[s], 0, vs + (r * 6 + s) * CB * KW_BT);
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    /* the 36 GEMMs of this slice on TM channels x TN tiles */
    const __local float* vp = Vs + tx * TN;
    for (int xi = 0; xi < 36; ++xi) {
      KW_VT a[TM];
#pragma unroll
      for (int i = 0; i < TM; ++i) a[i] = c0 == 0 ? (KW_VT)(0.0f) : acc[xi][i];
      const __global KW_WT* up = ub + ((long)c0 * 36 + xi) * TM;
      const __local float* vx = vp + xi * CB * KW_BT;
#pragma unroll 4
      for (int c = 0; c < CB; ++c) {
        const KW_VT v = KW_VLOAD(vx + c * KW_BT);
#pragma unroll
        for (int i = 0; i < TM; ++i) a[i] = fma((KW_VT)(KW_LD(CW_F16, up, c * 36 * TM + i)), v, a[i]);
      }
#pragma unroll
      for (int i = 0; i < TM; ++i) acc[xi][i] = a[i];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  /* output transform A^T acc A, bias, epilogue, stores */
  __global KW_TY* yb = Y + (long)bz * CM * KW_CP_OUT;
  for (int i = 0; i < TM; ++i) {
    const int m = mb * TM + i;
    if (m >= CM) break;
    KW_EPI_PRE(bz, m);
    KW_VT w[4][6]; /* A^T acc */
#pragma unroll
    for (int s = 0; s < 6; ++s) {
      KW_VT x[6], y[4];
#pragma unroll
      for (int r = 0; r < 6; ++r) x[r] = acc[r * 6 + s][i];
      KW_AT6(y, x);
#pragma unroll
      for (int r = 0; r < 4; ++r) w[r][s] = y[r];
    }
    KW_VT o[4][4]; /* (A^T acc) A */
#pragma unroll
    for (int r = 0; r < 4; ++r) KW_AT6(o[r], w[r]);
    const float bias = KW_BIAS_OF(m);
    KW_STORE_TILES(o, bias);
  }
}
#undef KW_U0
#undef KW_BT6
#undef KW_AT6
#endif /* CF4 */

#undef KW_F
#undef KW_TH
#undef KW_TW
#undef KW_TWP
#undef KW_NT
#undef KW_BT
#undef KW_CP
#undef KW_CAT_
#undef KW_CAT
#undef KW_VT
#undef KW_VLOAD
#undef KW_LANE
#undef KW_SLOAD
#undef KW_SLOADH
#undef KW_CP_OUT
#undef KW_LD_0
#undef KW_LD_1
#undef KW_LD
#undef KW_TX
#undef KW_LD16
#undef KW_LD8
#undef KW_LD2
#undef KW_WT
#undef KW_TY
#undef KW_ST
#undef KW_VSTH
#undef KW_RT_DECL
#undef KW_LANES
#undef KW_R0
#undef KW_S0
#undef KW_TILE_ORIGINS
#undef KW_EDGE_PATCH
#undef KW_BIAS_OF
#undef KW_STORE_TILES
