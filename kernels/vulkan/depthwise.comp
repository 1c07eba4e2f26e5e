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
// kiln depthwise 2-D convolution (one input channel per group), f32 sums:
//
//   Y[b][m][oh][ow] = EPI(bias[m] + sum_{kh, kw} W[m][kh][kw] * X[b][m / MG][ih][iw]),
//   ih = oh*SH + kh*DH - PH, iw = ow*SW + kw*DW - PW (taps outside X add 0)
//
// One invocation per RW neighbouring outputs of a row: the taps are
// unrolled, so an invocation runs no loop at all (lavapipe's
// 65535-iteration limit is far). Why RW outputs: on lavapipe a load whose
// address differs between invocations costs a loop over the SIMD lanes, and
// RW outputs of a row share their weights and most of their input row
// (KH*KW + KH*SEG loads for RW outputs instead of 2*KH*KW per output).
// The host puts after the #extension lines: the element types TX TW TC TY,
// the bindings BIND_X BIND_W BIND_C BIND_Y (kernel parameter order), the
// epilogue operands' buffers (e0, e1, ...) and KC_EPI(v, b, m, p) as for
// conv.comp, and
//   CN CM CC MG   images, output channels, input channels, outputs per group
//   IH IW OH OW   input and output plane
//   KH KW SH SW DH DW PH PW  window
//   CHAS_BIAS     bias per output channel
//   WG            invocations per work-group
//   RW            outputs per invocation (along a row)
//   RH            rows of RW outputs per invocation (default 1): the rows
//                 share their input rows ((RH-1)*SH + (KH-1)*DH + 1 row
//                 segments read for RH rows instead of RH*KH)
//   TEXEL         1: X is a uniform texel buffer of vec4 texels (f32), or
//                 with TEXEL_X16 1 (f16 X) an rgba16f storage texel buffer
//                 read with imageLoad (conv.comp says why)
//   TEXEL_W       1: W is one too (a channel's taps from whole texels; f16
//                 W with TEXEL_W16 1)
//   TEXEL_Y       1: Y (f32, OW and RW multiples of 4) is a storage texel
//                 buffer: RW outputs stored as RW/4 vec4 texels
//   Y_VEC4        (TEXEL_Y 1) 1: those texels through a storage buffer of
//                 vec4s; 2: in pairs as u64vec4s (64-bit integers, OW and
//                 RW multiples of 8)
//   FLAT          1: an invocation takes RW consecutive outputs of all of Y
//                 seen as one flat array (stride 1, X and Y planes the same
//                 size, one channel per group, RW a multiple of 4, at most
//                 a plane, CN*CM*OH*OW a multiple of RW): its outputs may
//                 span two planes and cross rows; per tap row one texel
//                 segment at a constant shift, each output's taps masked
//                 by its own row and column, RW/8 u64vec4 (Y_VEC4 2) or
//                 RW/4 vec4 stores where rows of 14 or 7 outputs stored
//                 floats one by one (a loop over the lanes each on lavapipe);
//                 RW whole rows (a multiple of OW dividing a plane): one
//                 plane an invocation, constant columns
// Dispatch: (ceil(ceil(OH/RH)*ceil(OW/RW) / WG), CN*CM, 1) work-groups;
// FLAT: (ceil(CN*CM*OH*OW / RW / WG), 1, 1).


layout(local_size_x = WG, local_size_y = 1, local_size_z = 1) in;
#ifndef TEXEL
#define TEXEL 0
#endif
#ifndef TEXEL_X16
#define TEXEL_X16 0
#endif
#ifndef TEXEL_W16
#define TEXEL_W16 0
#endif
#if TEXEL
// X as a uniform texel buffer of vec4 texels (gemm.comp says why):
// a row segment is SEG / 4 + 2 texel reads shifted by its start within a
// texel instead of SEG loads that lavapipe runs as loops over the lanes
#if TEXEL_X16
layout(set = 0, binding = BIND_X, rgba16f) uniform restrict readonly imageBuffer tx;
#define FETCH_X(i) imageLoad(tx, i)
#else
layout(set = 0, binding = BIND_X) uniform samplerBuffer tx;
#define FETCH_X(i) texelFetch(tx, i)
#endif
#define NF ((SEG + 6) / 4)
#else
layout(std430, set = 0, binding = BIND_X) restrict readonly buffer BufX { TX x[]; };
#endif
#ifndef TEXEL_W
#define TEXEL_W 0
#endif
#ifndef TEXEL_Y
#define TEXEL_Y 0
#endif
#if TEXEL_W
// a channel's KH*KW taps from (KH*KW + 6) / 4 texels shifted by their start
// within a texel: the same for all lanes, a few texel reads where the
// buffer loads were a loop over the lanes per tap
#if TEXEL_W16
layout(set = 0, binding = BIND_W, rgba16f) uniform restrict readonly imageBuffer tw;
#define FETCH_W(i) imageLoad(tw, i)
#else
layout(set = 0, binding = BIND_W) uniform samplerBuffer tw;
#define FETCH_W(i) texelFetch(tw, i)
#endif
#define NW ((KH * KW + 6) / 4)
#else
layout(std430, set = 0, binding = BIND_W) restrict readonly buffer BufW { TW w[]; };
#endif
#if CHAS_BIAS
layout(std430, set = 0, binding = BIND_C) restrict readonly buffer BufC { TC bias[]; };
#endif
#ifndef Y_VEC4
#define Y_VEC4 0
#endif
#if TEXEL_Y && Y_VEC4 == 2
// (Y_VEC4 2) pairs of texels as one u64vec4: one loop over the lanes stores
// 8 floats a lane
layout(std430, set = 0, binding = BIND_Y) restrict writeonly buffer BufY8 { u64vec4 y8[]; };
#define YS 8
#define Y_PUT(i, o)                                                                                 \
  y8[(i) >> 3] = u64vec4(pack64(floatBitsToUint(vec2(o[0], o[1]))), pack64(floatBitsToUint(vec2(o[2], o[3]))), \
                         pack64(floatBitsToUint(vec2(o[4], o[5]))), pack64(floatBitsToUint(vec2(o[6], o[7]))))
#elif TEXEL_Y && Y_VEC4
// (Y_VEC4 1) vec4 texels through a storage buffer: lavapipe (Mesa 22.3)
// runs an imageStore as a loop over the 8 lanes per component, a vec4
// buffer store as one loop for all 4
layout(std430, set = 0, binding = BIND_Y) restrict writeonly buffer BufY4 { vec4 y4[]; };
#define YS 4
#define Y_PUT(i, o) y4[(i) >> 2] = vec4(o[0], o[1], o[2], o[3])
#elif TEXEL_Y
// RW outputs of a row as RW/4 vec4 texels (one 16-byte store per lane on
// lavapipe where a buffer store is a loop over the lanes per float)
layout(set = 0, binding = BIND_Y, rgba32f) uniform restrict writeonly imageBuffer ty;
#define YS 4
#define Y_PUT(i, o) imageStore(ty, (i) >> 2, vec4(o[0], o[1], o[2], o[3]))
#else
layout(std430, set = 0, binding = BIND_Y) restrict writeonly buffer BufY { TY y[]; };
#endif

#ifndef RH
#define RH 1
#endif
#define OWB ((OW + RW - 1) / RW)
#define OHB ((OH + RH - 1) / RH)
// the input a row segment of RW outputs reads: (RW-1)*SW + (KW-1)*DW + 1
#define SEG ((RW - 1) * SW + (KW - 1) * DW + 1)
// the input rows RH output rows read
#define NR ((RH - 1) * SH + (KH - 1) * DH + 1)
// (TEXEL) every segment starts at the same place within a texel where the
// planes, rows and segment steps are whole texels: its shift is then a
// constant, (-PW) & 3, and the selects below fold away
#define SH_CONST ((IH * IW) % 4 == 0 && IW % 4 == 0 && (RW * SW) % 4 == 0)

#ifndef FLAT
#define FLAT 0
#endif

#if FLAT
#define PL (OH * OW)
// (RW whole rows: a multiple of OW dividing the plane) an invocation's
// outputs lie in one plane, output r at column r % OW: the column masks
// are constants and the second plane's taps and bias are never read
#define WHOLE_ROWS (RW % OW == 0 && PL % RW == 0)
void main() {
  KILN_WG_GUARD;
  const int g0 = int(KILN_GID.x) * RW;
  if (g0 >= CN * CM * PL) return;
  // the (at most two) planes the RW outputs lie in, their taps and bias
  const int na = g0 / PL, nb = (g0 + RW - 1) / PL;
  const int ma = na % CM, mb = nb % CM;
  float wa[KH * KW], wb[KH * KW];
  {
    const int a0 = ma * KH * KW, a1 = mb * KH * KW, s0 = a0 & 3, s1 = a1 & 3;
    float w0[4 * NW], w1[4 * NW];
    [[unroll]] for (int f = 0; f < NW; ++f) {
      const vec4 u0 = FETCH_W((a0 >> 2) + f), u1 = FETCH_W((a1 >> 2) + f);
      [[unroll]] for (int e = 0; e < 4; ++e) w0[4 * f + e] = u0[e], w1[4 * f + e] = u1[e];
    }
    [[unroll]] for (int t = 0; t < KH * KW; ++t) {
      wa[t] = s0 == 0 ? w0[t] : s0 == 1 ? w0[t + 1] : s0 == 2 ? w0[t + 2] : w0[t + 3];
      wb[t] = s1 == 0 ? w1[t] : s1 == 1 ? w1[t + 1] : s1 == 2 ? w1[t + 2] : w1[t + 3];
    }
  }
#if CHAS_BIAS
  const float ba = float(bias[ma]), bb = float(bias[mb]);
#else
  const float ba = 0.0, bb = 0.0;
#endif
  // each output's row and column in its plane
  int oh[RW], ow[RW];
  bool inb[RW];
  float v[RW];
  [[unroll]] for (int r = 0; r < RW; ++r) {
#if WHOLE_ROWS
    oh[r] = g0 % PL / OW + r / OW, ow[r] = r % OW;
    inb[r] = true;
#else
    const int q = (g0 + r) % PL;
    oh[r] = q / OW, ow[r] = q % OW;
    inb[r] = g0 + r < (na + 1) * PL;
#endif
    v[r] = inb[r] ? ba : bb;
  }
  // X's planes are Y's: output g reads X at g + (kh*DH - PH)*IW + kw*DW - PW
  // (other planes' values and reads past the buffer masked: a tap outside
  // the plane adds 0); g0 is a multiple of 4, so the shift is a constant
  [[unroll]] for (int kh = 0; kh < KH; ++kh) {
    const int d = (kh * DH - PH) * IW - PW, sh = d & 3;
    const int a = g0 + d;
    float win[4 * NF];
    [[unroll]] for (int f = 0; f < NF; ++f) {
      const vec4 u = FETCH_X((a >> 2) + f);
      [[unroll]] for (int e = 0; e < 4; ++e) win[4 * f + e] = u[e];
    }
    [[unroll]] for (int r = 0; r < RW; ++r) {
      const int ih = oh[r] + kh * DH - PH;
      const bool rin = ih >= 0 && ih < IH;
      [[unroll]] for (int kw = 0; kw < KW; ++kw) {
        const int iw = ow[r] + kw * DW - PW;
        const float x1 = rin && iw >= 0 && iw < IW ? win[sh + r + kw * DW] : 0.0;
        v[r] = fma(x1, inb[r] ? wa[kh * KW + kw] : wb[kh * KW + kw], v[r]);
      }
    }
  }
  float o[RW];
  [[unroll]] for (int r = 0; r < RW; ++r) {
    const int n = inb[r] ? na : nb;
    float vr = v[r];
    KC_EPI(vr, n / CM, n % CM, oh[r] * OW + ow[r]);
    o[r] = vr;
  }
#if Y_VEC4 == 2
  [[unroll]] for (int r = 0; r < RW; r += 8) {
    float o8[8] = float[8](o[r], o[r + 1], o[r + 2], o[r + 3], o[r + 4], o[r + 5], o[r + 6], o[r + 7]);
    Y_PUT(g0 + r, o8);
  }
#else
  [[unroll]] for (int r = 0; r < RW; r += 4) {
    float o4[4] = float[4](o[r], o[r + 1], o[r + 2], o[r + 3]);
    Y_PUT(g0 + r, o4);
  }
#endif
}
#else
void main() {
  KILN_WG_GUARD;
  const int p = int(KILN_GID.x);
  if (p >= OHB * OWB) return;
  const int nm = int(KILN_WG.y);
  const int b = nm / CM, m = nm % CM;
  const int oh0 = (p / OWB) * RH, ow0 = (p % OWB) * RW;
  const int xb = (b * CC + m / MG) * IH * IW;
  float wt[KH * KW];
#if TEXEL_W
  {
    const int a = m * KH * KW, sh = a & 3;
    float win[4 * NW];
    [[unroll]] for (int f = 0; f < NW; ++f) {
      const vec4 v = FETCH_W((a >> 2) + f);
      [[unroll]] for (int e = 0; e < 4; ++e) win[4 * f + e] = v[e];
    }
    [[unroll]] for (int t = 0; t < KH * KW; ++t)
      wt[t] = sh == 0 ? win[t] : sh == 1 ? win[t + 1] : sh == 2 ? win[t + 2] : win[t + 3];
  }
#else
  [[unroll]] for (int t = 0; t < KH * KW; ++t) wt[t] = float(w[m * KH * KW + t]);
#endif
  float v[RH][RW];
#if CHAS_BIAS
  const float b0 = float(bias[m]);
#else
  const float b0 = 0.0;
#endif
  [[unroll]] for (int i = 0; i < RH; ++i)
    [[unroll]] for (int r = 0; r < RW; ++r) v[i][r] = b0;
  const int iw0 = ow0 * SW - PW;
  // input row oh0*SH - PH + n feeds output row oh0 + i with tap row
  // kh = (n - i*SH) / DH where that is whole and inside the window
  [[unroll]] for (int n = 0; n < NR; ++n) {
    const int ih = oh0 * SH + n - PH;
    if (ih < 0 || ih >= IH) continue;
    float xs[SEG];
#if TEXEL
    // the segment's texels (before the buffer's start, the first reads
    // zeros); values of other rows or past the row (padding) add 0
    const int a = xb + ih * IW + iw0, sh = SH_CONST ? (-PW) & 3 : a & 3;
    float win[4 * NF];
    [[unroll]] for (int f = 0; f < NF; ++f) {
      const vec4 v = FETCH_X((a >> 2) + f);
      [[unroll]] for (int e = 0; e < 4; ++e) win[4 * f + e] = v[e];
    }
    [[unroll]] for (int s = 0; s < SEG; ++s) {
      const int iw = iw0 + s;
      const float x1 = sh == 0 ? win[s] : sh == 1 ? win[s + 1] : sh == 2 ? win[s + 2] : win[s + 3];
      xs[s] = iw >= 0 && iw < IW ? x1 : 0.0;
    }
#else
    // taps left and right of the input (padding) read a clamped index and add 0
    [[unroll]] for (int s = 0; s < SEG; ++s) {
      const int iw = iw0 + s;
      const float x1 = float(x[xb + ih * IW + clamp(iw, 0, IW - 1)]);
      xs[s] = iw >= 0 && iw < IW ? x1 : 0.0;
    }
#endif
    [[unroll]] for (int i = 0; i < RH; ++i) {
      const int kd = n - i * SH, kh = kd / DH;
      if (kd < 0 || kd % DH != 0 || kh >= KH) continue; // (constants: folded)
      [[unroll]] for (int r = 0; r < RW; ++r)
        [[unroll]] for (int kw = 0; kw < KW; ++kw) v[i][r] = fma(xs[r * SW + kw * DW], wt[kh * KW + kw], v[i][r]);
    }
  }
  [[unroll]] for (int i = 0; i < RH; ++i) {
    const int oh = oh0 + i;
    if (oh >= OH) break;
#if TEXEL_Y
    // OW a multiple of YS: YS outputs lie in Y's row when their first does
    [[unroll]] for (int r = 0; r < RW; r += YS) {
      const int ow = ow0 + r;
      if (ow >= OW) break;
      const int q = oh * OW + ow;
      float o[YS];
      [[unroll]] for (int e = 0; e < YS; ++e) {
        float vr = v[i][r + e];
        KC_EPI(vr, b, m, q + e);
        o[e] = vr;
      }
      Y_PUT(nm * OH * OW + q, o);
    }
#else
    [[unroll]] for (int r = 0; r < RW; ++r) {
      const int ow = ow0 + r;
      if (ow >= OW) break;
      float vr = v[i][r];
      const int q = oh * OW + ow;
      KC_EPI(vr, b, m, q);
      y[nm * OH * OW + q] = TY(vr);
    }
#endif
  }
}
#endif
