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
 * one image and group, K in steps of 4: each step reads 4 k-values of
 * every position (a gather through the conv window; taps outside X read
 * the zero point, so they add 0) and of every channel (a 4-byte vector
 * load along K for conv weights [M][K] and matmul rows of A), as values
 * centred on the byte range: c = v - 128 for u8, v for i8 (every centred
 * value fits a signed byte). Then
 *   - the plain path: int4 sums of (cx - czx) * (cw - czw[m]), reduced at
 *     the end;
 *   - the integer dot-product path, where the device's compiler reports
 *     4x8-bit dot products (cl_khr_integer_dot_product: the OpenCL C 3.0
 *     feature macro, or the extension macro before 3.0): D += dot(cx, cw)
 *     on char4 (exact, no saturation), with the sums of cx per position and
 *     of cw per channel, and
 *       sum (cx - czx)(cw - czw) = D - czw*Sx - czx*Sw + n*czx*czw
 *     over the n terms counted (the K tail's padding reads cx = czx, which
 *     adds 0 to either form), in wrapping 32-bit arithmetic: the same i32.
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
 * Launch: global (ceil(ceil(CP/KQ_TP) / KQ_WG) * KQ_WG, CN*CG*ceil(CMG/KQ_TM)),
 * local (KQ_WG, 1).
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

/* One step of 4 k-values from k0 (TAIL: some may be >= CK). Reads into
 * cx[j] / cw[i] (centred int4), then accumulates. */
#if KQ_MATMUL
#define KQ_LOAD_X(k0, TAIL)                                                                      \
  for (int j = 0; j < KQ_TP; ++j) {                                                              \
    const __global KQ_TX* row = X + pj[j] * CK + (k0);                                           \
    if (!(TAIL)) {                                                                               \
      cx[j] = convert_int4(vload4(0, row)) - KQ_XSH;                                             \
    } else {                                                                                     \
      cx[j] = (int4)(czx);                                                                       \
      if ((k0) + 0 < CK) cx[j].s0 = (int)row[0] - KQ_XSH;                                        \
      if ((k0) + 1 < CK) cx[j].s1 = (int)row[1] - KQ_XSH;                                        \
      if ((k0) + 2 < CK) cx[j].s2 = (int)row[2] - KQ_XSH;                                        \
    }                                                                                            \
  }
#define KQ_W_AT(m, k) ((int)W[(k) * CM + (m)])
#define KQ_LOAD_W(k0, TAIL)                                                                      \
  for (int i = 0; i < KQ_TM; ++i) {                                                              \
    const int k3 = (TAIL) ? CK - 1 : (k0) + 3;                                                   \
    const int k2 = (TAIL) && (k0) + 2 >= CK ? CK - 1 : (k0) + 2;                                 \
    const int k1 = (TAIL) && (k0) + 1 >= CK ? CK - 1 : (k0) + 1;                                 \
    cw[i] = (int4)(KQ_W_AT(mi[i], (k0)), KQ_W_AT(mi[i], k1), KQ_W_AT(mi[i], k2), KQ_W_AT(mi[i], k3)) - KQ_WSH; \
  }
#else
#define KQ_LOAD_X(k0, TAIL)                                                                      \
  {                                                                                              \
    int koff[4], kz[4], ky[4], kx[4];                                                            \
    bool kin[4];                                                                                 \
    for (int q = 0; q < 4; ++q) {                                                                \
      const int k = (k0) + q;                                                                    \
      const int c = k / KQ_TAPS, t = k - c * KQ_TAPS;                                            \
      kz[q] = (t / (KH * KW)) * DD;                                                              \
      ky[q] = (t / KW % KH) * DH;                                                                \
      kx[q] = (t % KW) * DW;                                                                     \
      koff[q] = c * (ID * IH * IW) + (kz[q] * IH + ky[q]) * IW + kx[q];                          \
      kin[q] = !(TAIL) || k < CK; /* past K: reads the zero point */                             \
    }                                                                                            \
    for (int j = 0; j < KQ_TP; ++j) {                                                            \
      int v[4];                                                                                  \
      for (int q = 0; q < 4; ++q) {                                                              \
        const int iz = bz[j] + kz[q], iy = by[j] + ky[q], ix = bx[j] + kx[q];                    \
        const bool in = kin[q] && iz >= 0 && iz < ID && iy >= 0 && iy < IH && ix >= 0 && ix < IW; \
        v[q] = in ? (int)X[xb + xo[j] + koff[q]] - KQ_XSH : czx;                                 \
      }                                                                                          \
      cx[j] = (int4)(v[0], v[1], v[2], v[3]);                                                    \
    }                                                                                            \
  }
#define KQ_LOAD_W(k0, TAIL)                                                                      \
  for (int i = 0; i < KQ_TM; ++i) {                                                              \
    const __global KQ_TW* wr = W + mi[i] * CK + (k0);                                            \
    if (!(TAIL)) {                                                                               \
      cw[i] = convert_int4(vload4(0, wr)) - KQ_WSH;                                              \
    } else {                                                                                     \
      cw[i] = (int4)(0);                                                                         \
      if ((k0) + 0 < CK) cw[i].s0 = (int)wr[0] - KQ_WSH;                                         \
      if ((k0) + 1 < CK) cw[i].s1 = (int)wr[1] - KQ_WSH;                                         \
      if ((k0) + 2 < CK) cw[i].s2 = (int)wr[2] - KQ_WSH;                                         \
    }                                                                                            \
  }
#endif

#if KQ_IDOT
#define KQ_ACC()                                                                                 \
  for (int j = 0; j < KQ_TP; ++j) sx[j] += cx[j].s0 + cx[j].s1 + cx[j].s2 + cx[j].s3;            \
  for (int i = 0; i < KQ_TM; ++i) {                                                              \
    sw[i] += cw[i].s0 + cw[i].s1 + cw[i].s2 + cw[i].s3;                                          \
    const char4 wc = convert_char4(cw[i]);                                                       \
    for (int j = 0; j < KQ_TP; ++j) acc[i][j] += (uint)dot(convert_char4(cx[j]), wc);            \
  }
#else
#define KQ_ACC()                                                                                 \
  for (int i = 0; i < KQ_TM; ++i) {                                                              \
    const int4 wd = cw[i] - czw[i];                                                              \
    for (int j = 0; j < KQ_TP; ++j) acc4[i][j] += as_uint4((cx[j] - czx) * wd);                  \
  }
#endif

__kernel __attribute__((reqd_work_group_size(KQ_WG, 1, 1))) void KQ_NAME(KQ_SIGNATURE) {
  const int pt = get_global_id(0);
  if (pt >= KQ_PT) return;
  const int r = get_global_id(1);
  const int mt = r % KQ_MT, g = r / KQ_MT % CG, n = r / (KQ_MT * CG);
  const int czx = (int)XZ[0] - KQ_XSH;
  int mi[KQ_TM], czw[KQ_TM], pj[KQ_TP];
  for (int i = 0; i < KQ_TM; ++i) {
    const int mg = min(mt * KQ_TM + i, CMG - 1);
    mi[i] = g * CMG + mg;
    czw[i] = (int)WZ[KQ_WPC ? mi[i] : 0] - KQ_WSH;
  }
  for (int j = 0; j < KQ_TP; ++j) pj[j] = min(pt * KQ_TP + j, CP - 1);
#if !KQ_MATMUL
  /* each position's window corner and offset in its image's group */
  const int xb = (n * CG + g) * CCG * (ID * IH * IW);
  int bz[KQ_TP], by[KQ_TP], bx[KQ_TP], xo[KQ_TP];
  for (int j = 0; j < KQ_TP; ++j) {
    bz[j] = pj[j] / (OH * OW) * SD - PD;
    by[j] = pj[j] / OW % OH * SH - PH;
    bx[j] = pj[j] % OW * SW - PW;
    xo[j] = (bz[j] * IH + by[j]) * IW + bx[j];
  }
#endif
  int4 cx[KQ_TP], cw[KQ_TM];
#if KQ_IDOT
  uint acc[KQ_TM][KQ_TP];
  int sx[KQ_TP], sw[KQ_TM];
  for (int j = 0; j < KQ_TP; ++j) sx[j] = 0;
  for (int i = 0; i < KQ_TM; ++i) {
    sw[i] = 0;
    for (int j = 0; j < KQ_TP; ++j) acc[i][j] = 0;
  }
#else
  uint4 acc4[KQ_TM][KQ_TP];
  for (int i = 0; i < KQ_TM; ++i)
    for (int j = 0; j < KQ_TP; ++j) acc4[i][j] = (uint4)(0);
#endif
  for (int k0 = 0; k0 < CK / 4 * 4; k0 += 4) {
    KQ_LOAD_X(k0, 0)
    KQ_LOAD_W(k0, 0)
    KQ_ACC()
  }
#if CK % 4
  {
    const int k0 = CK / 4 * 4;
    KQ_LOAD_X(k0, 1)
    KQ_LOAD_W(k0, 1)
    KQ_ACC()
  }
#endif
  const float xs = XS[0], ys = YS[0], yz = (float)YZ[0];
  for (int i = 0; i < KQ_TM; ++i) {
    if (mt * KQ_TM + i >= CMG) break;
    const int m = mi[i];
    const float mult = xs * WS[KQ_WPC ? m : 0] / ys;
#if KQ_BIAS
    const uint b = as_uint(BIAS[m]);
#else
    const uint b = 0;
#endif
    for (int j = 0; j < KQ_TP; ++j) {
      if (pt * KQ_TP + j >= CP) break;
#if KQ_IDOT
      const uint nt = (uint)((CK + 3) / 4 * 4);
      const uint s = acc[i][j] - (uint)czw[i] * (uint)sx[j] - (uint)czx * (uint)sw[i] + nt * (uint)czx * (uint)czw[i];
#else
      const uint4 a4 = acc4[i][j];
      const uint s = a4.s0 + a4.s1 + a4.s2 + a4.s3;
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
#undef KQ_IDOT
#undef KQ_MT
#undef KQ_PT
#undef KQ_TAPS
#undef KQ_XSH
#undef KQ_WSH
#undef KQ_LOAD_X
#undef KQ_LOAD_W
#undef KQ_W_AT
#undef KQ_ACC
