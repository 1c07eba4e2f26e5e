#version 450
#extension GL_EXT_control_flow_attributes : enable
// KILN_WG, KILN_GID: this work-group's and invocation's ids in the
// instance's grid; KILN_WG_GUARD; starts main(). The built-in ids and
// nothing unless the host folded a grid past the device's work-group counts
// (targets/vulkan/vulkan_grid.c defines them after the #version line).
#ifndef KILN_WG
#define KILN_WG gl_WorkGroupID
#define KILN_GID gl_GlobalInvocationID
#define KILN_WG_GUARD
#endif
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
//   image and group (positions pt + j * ceil(CP / TP)), K as taps (outer)
//   x input channels (inner, 4 a step; taps outside X and channels past
//   CCG read the zero point);
//   values are centred on the byte range (v - 128 for u8, v for i8);
//   IDOT 0: int sums of (cx - czx) * (cw - czw[m]);
//   IDOT 1 (VK_KHR_shader_integer_dot_product): each step's 4 centred bytes
//   of a position and of a channel packed into one int, D += OpSDotKHR of
//   the two (4x8-bit packed, exact), and
//     sum (cx - czx)(cw - czw) = D - czw*Sx - czx*Sw + n*czx*czw
//   over the n terms counted.
// An invocation loops TAPS * (ceil(CCG / 4) + 1) times (lavapipe's
// 65535-iteration limit: the template set admits instances within it).
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
#if MATMUL
#define XCS 1   // x: next input channel (column of A)
#define WMS 1   // w: next output channel (column of B)
#define WCS CM  // w: next input channel (row of B)
#else
#define XCS (ID * IH * IW)
#define WMS CK
#define WCS TAPS
#endif

#if IDOT
int pack4(int a, int b, int c, int d) { return (a & 255) | ((b & 255) << 8) | ((c & 255) << 16) | (d << 24); }
#endif

void main() {
  KILN_WG_GUARD;
  const int pt = int(KILN_GID.x);
  if (pt >= PT) return;
  const int r = int(KILN_WG.y);
  const int mt = r % MT, g = r / MT % CG, n = r / (MT * CG);
  const int czx = int(xz[0]) - XSH;
  // position j: pt + j * PT (neighbouring invocations, neighbouring positions)
  int mi[TM], czw[TM], pj[TP];
  [[unroll]] for (int i = 0; i < TM; ++i) {
    mi[i] = g * CMG + min(mt * TM + i, CMG - 1);
    czw[i] = int(wz[WPC != 0 ? mi[i] : 0]) - WSH;
  }
  [[unroll]] for (int j = 0; j < TP; ++j) pj[j] = min(pt + j * PT, CP - 1);
  int acc[TM][TP];
#if IDOT
  int sx[TP], sw[TM];
  [[unroll]] for (int j = 0; j < TP; ++j) sx[j] = 0;
  [[unroll]] for (int i = 0; i < TM; ++i) sw[i] = 0;
#endif
  [[unroll]] for (int i = 0; i < TM; ++i)
    [[unroll]] for (int j = 0; j < TP; ++j) acc[i][j] = 0;
  // K as taps (outer: the window's bounds checked once per tap and
  // position) x input channels (inner, 4 a step)
  for (int tap = 0; tap < TAPS; ++tap) {
    int xo[TP];
    bool xin[TP];
#if MATMUL
    [[unroll]] for (int j = 0; j < TP; ++j) {
      xo[j] = pj[j] * CK;
      xin[j] = true;
    }
#else
    const int tz = tap / (KH * KW) * DD, ty = tap / KW % KH * DH, tx = tap % KW * DW;
    const int xb = (n * CG + g) * CCG * XCS;
    [[unroll]] for (int j = 0; j < TP; ++j) {
      const int iz = pj[j] / (OH * OW) * SD - PD + tz, iy = pj[j] / OW % OH * SH - PH + ty;
      const int ix = pj[j] % OW * SW - PW + tx;
      xin[j] = iz >= 0 && iz < ID && iy >= 0 && iy < IH && ix >= 0 && ix < IW;
      xo[j] = xin[j] ? xb + (iz * IH + iy) * IW + ix : 0;
    }
#endif
    for (int c0 = 0; c0 < CCG; c0 += 4) {
      ivec4 cx[TP], cw[TM];
      [[unroll]] for (int q = 0; q < 4; ++q) {
        // past the group's channels: x reads the zero point (adds 0)
        const bool cin = (CCG % 4) == 0 || c0 + q < CCG;
        const int c = cin ? c0 + q : 0;
        [[unroll]] for (int j = 0; j < TP; ++j) {
          const int v = int(x[xo[j] + c * XCS]) - XSH;
          cx[j][q] = xin[j] && cin ? v : czx;
        }
        [[unroll]] for (int i = 0; i < TM; ++i) cw[i][q] = int(w[mi[i] * WMS + c * WCS + tap]) - WSH;
      }
#if IDOT
      int px[TP];
      [[unroll]] for (int j = 0; j < TP; ++j) {
        px[j] = pack4(cx[j].x, cx[j].y, cx[j].z, cx[j].w);
        sx[j] += cx[j].x + cx[j].y + cx[j].z + cx[j].w;
      }
      [[unroll]] for (int i = 0; i < TM; ++i) {
        sw[i] += cw[i].x + cw[i].y + cw[i].z + cw[i].w;
        const int pw = pack4(cw[i].x, cw[i].y, cw[i].z, cw[i].w);
        [[unroll]] for (int j = 0; j < TP; ++j) acc[i][j] += kiln_sdot4(px[j], pw, 0);
      }
#else
      [[unroll]] for (int i = 0; i < TM; ++i) {
        const ivec4 wd = cw[i] - czw[i];
        [[unroll]] for (int j = 0; j < TP; ++j) {
          const ivec4 t = (cx[j] - czx) * wd;
          acc[i][j] += t.x + t.y + t.z + t.w;
        }
      }
#endif
    }
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
      if (pt + j * PT >= CP) break;
#if IDOT
      const int nt = TAPS * ((CCG + 3) / 4 * 4);
      const int s = acc[i][j] - czw[i] * sx[j] - czx * sw[i] + nt * czx * czw[i];
#else
      const int s = acc[i][j];
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
