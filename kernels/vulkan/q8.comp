#version 450
#extension GL_EXT_control_flow_attributes : enable
// kiln int8 implicit GEMM: QLinearConv and QLinearMatMul
// (lowering/template.h, kiln_template_q8_t):
//
//   Y[n][m][p] = requant_m(bias[m] + sum_{k < CK} (X(n, p, k) - xz) * (W(m, k) - wz[m]))
//   requant_m(a) = saturate(roundEven(float(a) * ((XS * WS[m]) / YS)) + YZ)
//
// in the reference's order and types (lowering/lower_nn_quant.c): integer
// products and sums (32-bit, wrapping as the reference's), the same f32
// requantization, so the result is bit-exact. kernels/opencl/q8.cl is the
// same algorithm; its comment has the details:
//   an invocation computes TM output channels x TP output positions of one
//   image and group, K in steps of 4 (taps outside X read the zero point);
//   values are centred on the byte range (v - 128 for u8, v for i8);
//   IDOT 0: int sums of (cx - czx) * (cw - czw[m]);
//   IDOT 1 (VK_KHR_shader_integer_dot_product): each step's 4 centred bytes
//   of a position and of a channel packed into one int, D += OpSDotKHR of
//   the two (4x8-bit packed, exact), and
//     sum (cx - czx)(cw - czw) = D - czw*Sx - czx*Sw + n*czx*czw
//   over the n terms counted.
// An invocation loops ceil(CK / 4) times and nothing else (lavapipe's
// 65535-iteration limit: the template set admits K <= 4 * 65535).
//
// The host puts after the #extension lines: the 8-bit storage extensions
// (and, with IDOT, GL_EXT_spirv_intrinsics and kiln_sdot4), the buffers
// x xs xz w ws wz ys yz [bias] y at their parameters' bindings, and
//   TY                   int8_t or uint8_t (y); XU8 WU8: 1 where x / w are uint8_t
//   YLO YHI              the output type's range (floats)
//   MATMUL               1: x is A [CP][CK], w is B [CK][CM], y [CP][CM]
//   CN CG CM CMG CCG CK CP  images, groups, outputs, outputs per group,
//                        input channels per group, K, positions
//   ID IH IW OD OH OW KD KH KW SD SH SW DD DH DW PD PH PW  conv window
//   WPC                  1: ws and wz per output channel
//   HAS_BIAS             1: bias (int per output channel)
//   TM TP WG IDOT        tiles, invocations per work-group, the dot path
// Dispatch: (ceil(ceil(CP/TP) / WG), CN*CG*ceil(CMG/TM), 1) work-groups.

layout(local_size_x = WG, local_size_y = 1, local_size_z = 1) in;

#define MT ((CMG + TM - 1) / TM)
#define PT ((CP + TP - 1) / TP)
#define TAPS (KD * KH * KW)
#define XSH (XU8 != 0 ? 128 : 0)
#define WSH (WU8 != 0 ? 128 : 0)

int mi[TM], czw[TM], pj[TP];
#if MATMUL == 0
int xb, bz[TP], by[TP], bx[TP], xo[TP];
#endif
ivec4 cx[TP], cw[TM];
int czx;

// cx[j] for k0 .. k0 + 3 (past CK: the zero point)
void load_x(int k0) {
#if MATMUL
  [[unroll]] for (int j = 0; j < TP; ++j) {
    const int row = pj[j] * CK + k0;
    ivec4 v = ivec4(czx);
    [[unroll]] for (int q = 0; q < 4; ++q)
      if (k0 + q < CK) v[q] = int(x[row + q]) - XSH;
    cx[j] = v;
  }
#else
  int koff[4], kz[4], ky[4], kx[4];
  bool kin[4];
  [[unroll]] for (int q = 0; q < 4; ++q) {
    const int k = k0 + q;
    const int c = k / TAPS, t = k - c * TAPS;
    kz[q] = (t / (KH * KW)) * DD;
    ky[q] = (t / KW % KH) * DH;
    kx[q] = (t % KW) * DW;
    koff[q] = c * (ID * IH * IW) + (kz[q] * IH + ky[q]) * IW + kx[q];
    kin[q] = k < CK;
  }
  [[unroll]] for (int j = 0; j < TP; ++j) {
    ivec4 v;
    [[unroll]] for (int q = 0; q < 4; ++q) {
      const int iz = bz[j] + kz[q], iy = by[j] + ky[q], ix = bx[j] + kx[q];
      const bool inside = kin[q] && iz >= 0 && iz < ID && iy >= 0 && iy < IH && ix >= 0 && ix < IW;
      v[q] = inside ? int(x[xb + xo[j] + koff[q]]) - XSH : czx;
    }
    cx[j] = v;
  }
#endif
}

// cw[i] for k0 .. k0 + 3 (past CK: 0; those terms read cx = czx and add 0)
void load_w(int k0) {
  [[unroll]] for (int i = 0; i < TM; ++i) {
    ivec4 v = ivec4(0);
    [[unroll]] for (int q = 0; q < 4; ++q)
#if MATMUL
      if (k0 + q < CK) v[q] = int(w[(k0 + q) * CM + mi[i]]) - WSH;
#else
      if (k0 + q < CK) v[q] = int(w[mi[i] * CK + k0 + q]) - WSH;
#endif
    cw[i] = v;
  }
}

#if IDOT
int pack4(ivec4 v) { return (v.x & 255) | ((v.y & 255) << 8) | ((v.z & 255) << 16) | (v.w << 24); }
#endif

void main() {
  const int pt = int(gl_GlobalInvocationID.x);
  if (pt >= PT) return;
  const int r = int(gl_WorkGroupID.y);
  const int mt = r % MT, g = r / MT % CG, n = r / (MT * CG);
  czx = int(xz[0]) - XSH;
  [[unroll]] for (int i = 0; i < TM; ++i) {
    mi[i] = g * CMG + min(mt * TM + i, CMG - 1);
    czw[i] = int(wz[WPC != 0 ? mi[i] : 0]) - WSH;
  }
  [[unroll]] for (int j = 0; j < TP; ++j) pj[j] = min(pt * TP + j, CP - 1);
#if MATMUL == 0
  xb = (n * CG + g) * CCG * (ID * IH * IW);
  [[unroll]] for (int j = 0; j < TP; ++j) {
    bz[j] = pj[j] / (OH * OW) * SD - PD;
    by[j] = pj[j] / OW % OH * SH - PH;
    bx[j] = pj[j] % OW * SW - PW;
    xo[j] = (bz[j] * IH + by[j]) * IW + bx[j];
  }
#endif
#if IDOT
  int acc[TM][TP], sx[TP], sw[TM];
  [[unroll]] for (int j = 0; j < TP; ++j) sx[j] = 0;
  [[unroll]] for (int i = 0; i < TM; ++i) {
    sw[i] = 0;
    [[unroll]] for (int j = 0; j < TP; ++j) acc[i][j] = 0;
  }
#else
  ivec4 acc4[TM][TP];
  [[unroll]] for (int i = 0; i < TM; ++i)
    [[unroll]] for (int j = 0; j < TP; ++j) acc4[i][j] = ivec4(0);
#endif
  for (int k0 = 0; k0 < CK; k0 += 4) {
    load_x(k0);
    load_w(k0);
#if IDOT
    int px[TP];
    [[unroll]] for (int j = 0; j < TP; ++j) {
      px[j] = pack4(cx[j]);
      sx[j] += cx[j].x + cx[j].y + cx[j].z + cx[j].w;
    }
    [[unroll]] for (int i = 0; i < TM; ++i) {
      sw[i] += cw[i].x + cw[i].y + cw[i].z + cw[i].w;
      const int pw = pack4(cw[i]);
      [[unroll]] for (int j = 0; j < TP; ++j) acc[i][j] += kiln_sdot4(px[j], pw, 0);
    }
#else
    [[unroll]] for (int i = 0; i < TM; ++i) {
      const ivec4 wd = cw[i] - czw[i];
      [[unroll]] for (int j = 0; j < TP; ++j) acc4[i][j] += (cx[j] - czx) * wd;
    }
#endif
  }
  const float fxs = xs[0], fys = ys[0], fyz = float(yz[0]);
  [[unroll]] for (int i = 0; i < TM; ++i) {
    if (mt * TM + i >= CMG) break;
    const int m = mi[i];
    const float mult = fxs * ws[WPC != 0 ? m : 0] / fys;
#if HAS_BIAS
    const int b = bias[m];
#else
    const int b = 0;
#endif
    [[unroll]] for (int j = 0; j < TP; ++j) {
      if (pt * TP + j >= CP) break;
#if IDOT
      const int nt = (CK + 3) / 4 * 4;
      const int s = acc[i][j] - czw[i] * sx[j] - czx * sw[i] + nt * czx * czw[i];
#else
      const ivec4 a4 = acc4[i][j];
      const int s = a4.x + a4.y + a4.z + a4.w;
#endif
      float v = roundEven(float(s + b) * mult) + fyz;
      v = isnan(v) ? YLO : v;
      v = min(max(v, YLO), YHI);
#if MATMUL
      y[pj[j] * CM + m] = TY(int(v));
#else
      y[(n * CM + m) * CP + pj[j]] = TY(int(v));
#endif
    }
  }
}
