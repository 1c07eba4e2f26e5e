/* kiln int8 implicit-GEMM template for OpenCL C 1.2: QLinearConv and
 * QLinearMatMul (lowering/template.h, kiln_template_q8_t):
 *
 *   Y[n][m][p] = requant_m(bias[m] + sum_{k < CK} (X(n, p, k) - xz) * (W(m, k) - wz[m]))
 *   requant_m(a) = saturate(rint(float(a) * ((XS * WS[m]) / YS)) + YZ)
 *
 * in the reference's order and types (lowering/lower_nn_quant.c), so the
 * result is bit-exact: the products and sums are integers (i32, wrapping
 * as the reference's do), the requantization the same f32 operations.
 *
 * A work-item computes KQ_TM output channels x KQ_TP output positions of
 * one image and group: positions pt + j * ceil(CP / KQ_TP), so neighbouring
 * work-items read neighbouring positions (coalesced on a GPU; the weights
 * are the same for the whole work-group). K runs as taps (outer: the window's bounds checked
 * once per tap and position) x input channels (inner, 4 a step); values
 * are centred on the byte range: c = v - 128 for u8, v for i8 (every
 * centred value fits a signed byte). Then
 *   - the plain path: 32-bit sums of (cx - czx) * (cw - czw[m]);
 *   - the integer dot-product path, where the device's compiler reports
 *     4x8-bit dot products (cl_khr_integer_dot_product: the OpenCL C 3.0
 *     feature macro, or the extension macro before 3.0): D += dot(cx, cw)
 *     on char4 (exact, no saturation), with the sums of cx per position and
 *     of cw per channel, and
 *       sum (cx - czx)(cw - czw) = D - czw*Sx - czx*Sw + n*czx*czw
 *     over the n terms counted (taps outside X and the channel tail past
 *     CCG read cx = czx, which adds 0 to either form), in wrapping 32-bit
 *     arithmetic: the same i32.
 * Remainder channels and positions compute a clamped copy and store
 * nothing.
 *
 * Instance parameters (the includer defines them and #undefs them after):
 *   KQ_NAME, KQ_SIGNATURE   the plan kernel's parameters, roles named X XS
 *                           XZ W WS WZ YS YZ BIAS Y
 *   KQ_TX KQ_TW KQ_TY       uchar or char; KQ_XU8 KQ_WU8 1 for uchar
 *   KQ_YLO KQ_YHI           the output type's range (floats)
 *   KQ_MATMUL               1: X is A [CP][CK], W is B [CK][CM], Y [CP][CM]
 *   CN CG CM CMG CCG CK CP  images, groups, outputs, outputs per group,
 *                           input channels per group, K, positions
 *   ID IH IW OD OH OW KD KH KW SD SH SW DD DH DW PD PH PW  conv window
 *   KQ_WPC                  1: WS and WZ per output channel
 *   KQ_BIAS                 1: BIAS (i32 per output channel)
 *   KQ_TM KQ_TP KQ_WG       channels and positions per work-item, work-group
 *   KQ_ROWVEC               1: the row-vector conv kernel below (KQ_TP unused)
 *   KQ_YU8                  1: Y is uchar
 * Launch: global (ceil(ceil(CP/KQ_TP) / KQ_WG) * KQ_WG, CN*CG*ceil(CMG/KQ_TM)),
 * local (KQ_WG, 1); KQ_ROWVEC: OD*OH*ceil(OW/8) in place of ceil(CP/KQ_TP).
 */
#if defined(__opencl_c_integer_dot_product_input_4x8bit) || \
    (defined(cl_khr_integer_dot_product) && (!defined(__OPENCL_C_VERSION__) || __OPENCL_C_VERSION__ < 300))
#define KQ_IDOT 1
#else
#define KQ_IDOT 0
#endif
#define KQ_MT ((CMG + KQ_TM - 1) / KQ_TM)
#define KQ_PT ((CP + KQ_TP - 1) / KQ_TP)
#define KQ_TAPS (KD * KH * KW)
#define KQ_XSH (KQ_XU8 ? 128 : 0)
#define KQ_WSH (KQ_WU8 ? 128 : 0)
#if KQ_MATMUL
#define KQ_XCS 1                 /* x: next input channel (column of A) */
#define KQ_WMS 1                 /* w: next output channel (column of B) */
#define KQ_WCS CM                /* w: next input channel (row of B) */
#else
#define KQ_XCS (ID * IH * IW)
#define KQ_WMS CK
#define KQ_WCS KQ_TAPS
#endif

#if !KQ_ROWVEC
__kernel __attribute__((reqd_work_group_size(KQ_WG, 1, 1))) void KQ_NAME(KQ_SIGNATURE) {
  const int pt = get_global_id(0);
  if (pt >= KQ_PT) return;
  const int r = get_global_id(1);
  const int mt = r % KQ_MT, g = r / KQ_MT % CG, n = r / (KQ_MT * CG);
  const int czx = (int)XZ[0] - KQ_XSH;
  /* position j of the item: pt + j * KQ_PT (neighbouring items read
   * neighbouring positions); channel i: the group's mt * KQ_TM + i */
  int mi[KQ_TM], czw[KQ_TM], pj[KQ_TP];
#pragma unroll
  for (int i = 0; i < KQ_TM; ++i) {
    mi[i] = g * CMG + min(mt * KQ_TM + i, CMG - 1);
    czw[i] = (int)WZ[KQ_WPC ? mi[i] : 0] - KQ_WSH;
  }
#pragma unroll
  for (int j = 0; j < KQ_TP; ++j) pj[j] = min(pt + j * KQ_PT, CP - 1);
#if KQ_IDOT
  uint acc[KQ_TM][KQ_TP];
  int sx[KQ_TP], sw[KQ_TM];
#pragma unroll
  for (int j = 0; j < KQ_TP; ++j) sx[j] = 0;
#pragma unroll
  for (int i = 0; i < KQ_TM; ++i) sw[i] = 0;
#else
  uint acc[KQ_TM][KQ_TP]; /* 32-bit sums wrap, as the reference's */
#endif
#pragma unroll
  for (int i = 0; i < KQ_TM; ++i)
#pragma unroll
    for (int j = 0; j < KQ_TP; ++j) acc[i][j] = 0;
  /* K as taps (outer) x input channels (inner, 4 a step): the window's
   * bounds are checked once per tap and position */
  for (int tap = 0; tap < KQ_TAPS; ++tap) {
    int xo[KQ_TP];
    bool xin[KQ_TP];
#if KQ_MATMUL
#pragma unroll
    for (int j = 0; j < KQ_TP; ++j) xo[j] = pj[j] * CK, xin[j] = true;
#else
    const int tz = tap / (KH * KW) * DD, ty = tap / KW % KH * DH, tx = tap % KW * DW;
    const int xb = (n * CG + g) * CCG * KQ_XCS;
#pragma unroll
    for (int j = 0; j < KQ_TP; ++j) {
      const int iz = pj[j] / (OH * OW) * SD - PD + tz, iy = pj[j] / OW % OH * SH - PH + ty;
      const int ix = pj[j] % OW * SW - PW + tx;
      xin[j] = iz >= 0 && iz < ID && iy >= 0 && iy < IH && ix >= 0 && ix < IW;
      xo[j] = xin[j] ? xb + (iz * IH + iy) * IW + ix : 0;
    }
#endif
    for (int c0 = 0; c0 < CCG; c0 += 4) {
      int cx[KQ_TP][4], cw[KQ_TM][4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        /* past the group's channels: x reads the zero point (adds 0) */
        const bool cin = CCG % 4 == 0 || c0 + q < CCG;
        const int c = cin ? c0 + q : 0;
#pragma unroll
        for (int j = 0; j < KQ_TP; ++j) {
          /* a load from a valid address either way (vectorizes unmasked) */
          const int v = (int)X[xo[j] + c * KQ_XCS] - KQ_XSH;
          cx[j][q] = xin[j] && cin ? v : czx;
        }
#pragma unroll
        for (int i = 0; i < KQ_TM; ++i) cw[i][q] = (int)W[mi[i] * KQ_WMS + c * KQ_WCS + tap] - KQ_WSH;
      }
#if KQ_IDOT
#pragma unroll
      for (int j = 0; j < KQ_TP; ++j) sx[j] += cx[j][0] + cx[j][1] + cx[j][2] + cx[j][3];
#pragma unroll
      for (int i = 0; i < KQ_TM; ++i) {
        sw[i] += cw[i][0] + cw[i][1] + cw[i][2] + cw[i][3];
        const char4 wc = (char4)((char)cw[i][0], (char)cw[i][1], (char)cw[i][2], (char)cw[i][3]);
#pragma unroll
        for (int j = 0; j < KQ_TP; ++j)
          acc[i][j] += (uint)dot((char4)((char)cx[j][0], (char)cx[j][1], (char)cx[j][2], (char)cx[j][3]), wc);
      }
#else
#pragma unroll
      for (int q = 0; q < 4; ++q) {
#pragma unroll
        for (int j = 0; j < KQ_TP; ++j) cx[j][q] -= czx;
#pragma unroll
        for (int i = 0; i < KQ_TM; ++i) cw[i][q] -= czw[i];
      }
#pragma unroll
      for (int i = 0; i < KQ_TM; ++i)
#pragma unroll
        for (int j = 0; j < KQ_TP; ++j)
          acc[i][j] += (uint)(cx[j][0] * cw[i][0] + cx[j][1] * cw[i][1] + cx[j][2] * cw[i][2] + cx[j][3] * cw[i][3]);
#endif
    }
  }
  const float xs = XS[0], ys = YS[0], yz = (float)YZ[0];
#pragma unroll
  for (int i = 0; i < KQ_TM; ++i) {
    if (mt * KQ_TM + i >= CMG) break;
    const int m = mi[i];
    const float mult = xs * WS[KQ_WPC ? m : 0] / ys;
#if KQ_BIAS
    const uint b = as_uint(BIAS[m]);
#else
    const uint b = 0;
#endif
#pragma unroll
    for (int j = 0; j < KQ_TP; ++j) {
      if (pt + j * KQ_PT >= CP) break;
#if KQ_IDOT
      const uint nt = (uint)(KQ_TAPS * ((CCG + 3) / 4 * 4));
      const uint s = acc[i][j] - (uint)czw[i] * (uint)sx[j] - (uint)czx * (uint)sw[i] + nt * (uint)czx * (uint)czw[i];
#else
      const uint s = acc[i][j];
#endif
      float v = rint((float)as_int(s + b) * mult) + yz;
      v = v == v ? v : KQ_YLO;
      v = fmin(fmax(v, KQ_YLO), KQ_YHI);
#if KQ_MATMUL
      Y[pj[j] * CM + m] = (KQ_TY)(int)v;
#else
      Y[(n * CM + m) * CP + pj[j]] = (KQ_TY)(int)v;
#endif
    }
  }
}
#else
/* KQ_ROWVEC: a conv on a CPU-like device without the dot product (PoCL):
 * a work-item computes KQ_TM channels x 8 neighbouring outputs of one
 * output row as int8 vectors, the input row segment of each tap and input
 * channel read with one vector load (stride 1: vload8; stride 2: the even
 * lanes of a vload16) where it lies inside the row, else lane by lane with
 * the zero point outside; the weight of a tap and channel is one scalar
 * for all 8 lanes. (The work-item-parallel form above leaves PoCL a byte
 * gather per lane: 3-5x slower on ResNet-18's shapes.) */
#define KQ_VW 8
#define KQ_OWB ((OW + KQ_VW - 1) / KQ_VW)
__kernel __attribute__((reqd_work_group_size(KQ_WG, 1, 1))) void KQ_NAME(KQ_SIGNATURE) {
  const int pt = get_global_id(0);
  if (pt >= OD * OH * KQ_OWB) return;
  const int r = get_global_id(1);
  const int mt = r % KQ_MT, g = r / KQ_MT % CG, n = r / (KQ_MT * CG);
  const int row = pt / KQ_OWB, ow0 = pt % KQ_OWB * KQ_VW, oz = row / OH, oy = row % OH;
  const int xz = (int)XZ[0];
  int mi[KQ_TM], wz[KQ_TM];
  uint8 acc[KQ_TM]; /* 32-bit sums wrap, as the reference's */
#pragma unroll
  for (int i = 0; i < KQ_TM; ++i) {
    mi[i] = g * CMG + min(mt * KQ_TM + i, CMG - 1);
    wz[i] = (int)WZ[KQ_WPC ? mi[i] : 0];
    acc[i] = (uint8)(0);
  }
  const int xb = (n * CG + g) * CCG * KQ_XCS;
  const int8 lane = (int8)(0, 1, 2, 3, 4, 5, 6, 7);
  for (int tap = 0; tap < KQ_TAPS; ++tap) {
    const int iz = oz * SD - PD + tap / (KH * KW) * DD, iy = oy * SH - PH + tap / KW % KH * DH;
    if (iz < 0 || iz >= ID || iy < 0 || iy >= IH) continue; /* x - xz is 0 there */
    const int ix0 = ow0 * SW - PW + tap % KW * DW;
    const int8 ix = ix0 + lane * SW;
    const int8 inside = ix >= 0 && ix < IW;
    const int8 ixc = clamp(ix, 0, IW - 1) - ix0;
    const bool full = ix0 >= 0 && ix0 + (SW == 2 ? 2 * KQ_VW : (KQ_VW - 1) * SW + 1) <= IW && (SW == 1 || SW == 2);
    const __global KQ_TX* px = X + xb + (iz * IH + iy) * IW + ix0;
    for (int c = 0; c < CCG; ++c, px += KQ_XCS) {
      int8 xv;
      if (full) {
#if SW == 2
        xv = convert_int8(vload16(0, px).even);
#else
        xv = convert_int8(vload8(0, px));
#endif
      } else {
        xv = (int8)((int)px[ixc.s0], (int)px[ixc.s1], (int)px[ixc.s2], (int)px[ixc.s3], (int)px[ixc.s4],
                    (int)px[ixc.s5], (int)px[ixc.s6], (int)px[ixc.s7]);
        xv = select((int8)(xz), xv, inside);
      }
      xv -= xz;
#pragma unroll
      for (int i = 0; i < KQ_TM; ++i) acc[i] += as_uint8(xv * ((int)W[mi[i] * KQ_WMS + c * KQ_WCS + tap] - wz[i]));
    }
  }
  const float xs = XS[0], ys = YS[0], yz = (float)YZ[0];
#pragma unroll
  for (int i = 0; i < KQ_TM; ++i) {
    if (mt * KQ_TM + i >= CMG) break;
    const int m = mi[i];
    const float mult = xs * WS[KQ_WPC ? m : 0] / ys;
#if KQ_BIAS
    const int8 b = (int8)(BIAS[m]);
#else
    const int8 b = (int8)(0);
#endif
    const int8 a = as_int8(acc[i] + as_uint8(b));
    float8 v = rint(convert_float8(a) * mult) + yz;
    v = select(v, (float8)(KQ_YLO), isnan(v));
    v = fmin(fmax(v, KQ_YLO), KQ_YHI);
    const int8 q = convert_int8(v);
    __global KQ_TY* py = Y + (n * CM + m) * CP + row * OW + ow0;
    if (ow0 + KQ_VW <= OW) {
#if KQ_YU8
      vstore8(convert_uchar8(q), 0, py);
#else
      vstore8(convert_char8(q), 0, py);
#endif
    } else {
      const int q0[8] = {q.s0, q.s1, q.s2, q.s3, q.s4, q.s5, q.s6, q.s7};
      for (int l = 0; l < OW - ow0; ++l) py[l] = (KQ_TY)q0[l];
    }
  }
}
#undef KQ_VW
#undef KQ_OWB
#endif
#undef KQ_IDOT
#undef KQ_MT
#undef KQ_PT
#undef KQ_TAPS
#undef KQ_XSH
#undef KQ_WSH
#undef KQ_XCS
#undef KQ_WMS
#undef KQ_WCS
