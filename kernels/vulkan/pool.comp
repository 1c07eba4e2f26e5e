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
// kiln 2-D window pool (MaxPool, AveragePool, GlobalAveragePool), f32 or
// f16 X and Y (HX / HY; f32 sums):
//
//   Y[p][oy][ox] = max / mean over the taps (ky, kx) with iy = oy*SH + ky - PH
//   in [0, IH) and ix = ox*SW + kx - PW in [0, IW) of X[p][iy][ix]
//
// (lowering/template.h, kiln_template_pool_t). MAX: the first valid tap,
// then a strictly greater one (the reference's rule: a NaN first stays);
// else the sum over the valid taps divided by KH*KW (COUNT_PAD) or by
// their count. One invocation per RW neighbouring outputs of a row: the
// taps are unrolled (no loop), and each of the KH input rows is read once
// as a row segment for the RW outputs. On lavapipe a load whose address
// differs between lanes is a loop over the lanes, so the segments are read
// as vec4 texels (TEXEL) shifted by their start within a texel, the
// columns and rows outside the plane masked, and with OW a multiple of 4
// the RW outputs are stored as vec4 texels (TEXEL_Y).
// The host puts after the #extension lines: BIND_X BIND_Y (kernel
// parameter order) and
//   CP IH IW OH OW KH KW SH SW PH PW   planes (N*C), plane sizes, window
//   MAX COUNT_PAD RW TEXEL TEXEL_Y
//   HX HY         1: X / Y are f16 (X's texels an rgba16f storage texel
//                 buffer read with imageLoad: a sampled buffer has no format)
//   FLAT          1: the planes are folded into dim x of the dispatch
//   Y_VEC4        (TEXEL_Y 1) 1: the texels through a storage buffer of
//                 vec4s; 2: in pairs as u64vec4s (64-bit integers, OW and
//                 RW multiples of 8)
// Dispatch: (ceil(OH * ceil(OW/RW) / WG), CP, 1) work-groups of WG, with
// FLAT (ceil(CP * OH * ceil(OW/RW) / WG), 1, 1).

// WG: invocations a work-group (8, one lavapipe SIMD row; the host's GPU
// rules print 64)
#ifndef WG
#define WG 8
#endif
layout(local_size_x = WG, local_size_y = 1, local_size_z = 1) in;

#ifndef HX
#define HX 0
#endif
#ifndef HY
#define HY 0
#endif
#if HX
#define TXS float16_t
#else
#define TXS float
#endif
#if HY
#define TYS float16_t
#define TY4 f16vec4
#else
#define TYS float
#define TY4 vec4
#endif
#if TEXEL && HX
layout(set = 0, binding = BIND_X, rgba16f) uniform restrict readonly imageBuffer tx;
#define FETCH_X(i) imageLoad(tx, (i))
#elif TEXEL
layout(set = 0, binding = BIND_X) uniform samplerBuffer tx;
#define FETCH_X(i) texelFetch(tx, (i))
#else
layout(std430, set = 0, binding = BIND_X) restrict readonly buffer BufX { TXS x[]; };
#endif
#ifndef Y_VEC4
#define Y_VEC4 0
#endif
#if HY && TEXEL_Y && Y_VEC4 != 1
#error "pool.comp: f16 Y is stored 4 halves a store (Y_VEC4 1) or one a store"
#endif
#if TEXEL_Y && Y_VEC4 == 2
// (Y_VEC4 2) pairs of texels as one u64vec4 (8 floats a lane a store)
layout(std430, set = 0, binding = BIND_Y) restrict writeonly buffer BufY8 { u64vec4 y8[]; };
#define YS 8
#define Y_PUT(i, o)                                                                                 \
  y8[(i) >> 3] = u64vec4(pack64(floatBitsToUint(vec2(o[0], o[1]))), pack64(floatBitsToUint(vec2(o[2], o[3]))), \
                         pack64(floatBitsToUint(vec2(o[4], o[5]))), pack64(floatBitsToUint(vec2(o[6], o[7]))))
#elif TEXEL_Y && Y_VEC4
// (Y_VEC4 1) vec4 texels through a storage buffer: lavapipe (Mesa 22.3)
// runs an imageStore as a loop over the lanes per component
layout(std430, set = 0, binding = BIND_Y) restrict writeonly buffer BufY4 { TY4 y4[]; };
#define YS 4
#define Y_PUT(i, o) y4[(i) >> 2] = TY4(vec4(o[0], o[1], o[2], o[3]))
#elif TEXEL_Y
layout(set = 0, binding = BIND_Y, rgba32f) uniform restrict writeonly imageBuffer ty;
#define YS 4
#define Y_PUT(i, o) imageStore(ty, (i) >> 2, vec4(o[0], o[1], o[2], o[3]))
#else
layout(std430, set = 0, binding = BIND_Y) restrict writeonly buffer BufY { TYS y[]; };
#endif

#define OWB ((OW + RW - 1) / RW)
#define SEG ((RW - 1) * SW + KW)   // input columns of RW outputs
#define NF ((SEG + 3) / 4 + 1)     // texels of a segment at any shift

void main() {
  KILN_WG_GUARD;
#if FLAT
  // the planes folded into the work-groups' invocations (a 7x7 global
  // pool has one invocation a plane: the 8 lanes take 8 planes)
  const int gq = int(KILN_WG.x) * WG + int(gl_LocalInvocationID.x);
  if (gq >= CP * OH * OWB) return;
  const int p = gq / (OH * OWB), q = gq % (OH * OWB);
#else
  const int q = int(KILN_WG.x) * WG + int(gl_LocalInvocationID.x);
  if (q >= OH * OWB) return;
  const int p = int(KILN_WG.y);
#endif
  const int oy = q / OWB, ox0 = (q % OWB) * RW;
  const int c0 = ox0 * SW - PW; // the segment's first input column
  const int base = p * IH * IW;
  float acc[RW];
  float cnt[RW];
  bool seen[RW];
  [[unroll]] for (int o = 0; o < RW; ++o) acc[o] = 0.0, cnt[o] = 0.0, seen[o] = false;
  [[unroll]] for (int ky = 0; ky < KH; ++ky) {
    const int iy = oy * SH + ky - PH;
    const bool row_ok = iy >= 0 && iy < IH;
    const int a = base + clamp(iy, 0, IH - 1) * IW + c0; // may start before the plane (masked)
    float seg[SEG];
#if TEXEL
    const int t0 = a >> 2, s = a & 3, tl = (CP * IH * IW - 1) >> 2;
    vec4 xt[NF];
    [[unroll]] for (int f = 0; f < NF; ++f) xt[f] = FETCH_X(clamp(t0 + f, 0, tl));
    [[unroll]] for (int f = 0; f < NF - 1; ++f) {
      const vec4 u = xt[f], v = xt[f + 1];
      const vec4 w = s == 0 ? u : s == 1 ? vec4(u.yzw, v.x) : s == 2 ? vec4(u.zw, v.xy) : vec4(u.w, v.xyz);
      [[unroll]] for (int e = 0; e < 4; ++e)
        if (f * 4 + e < SEG) seg[f * 4 + e] = w[e];
    }
#else
    [[unroll]] for (int j = 0; j < SEG; ++j) seg[j] = float(x[clamp(a + j, 0, CP * IH * IW - 1)]);
#endif
    [[unroll]] for (int o = 0; o < RW; ++o)
      [[unroll]] for (int kx = 0; kx < KW; ++kx) {
        const int j = o * SW + kx, ix = c0 + j;
        const bool ok = row_ok && ix >= 0 && ix < IW;
        const float v = seg[j];
#if MAX
        acc[o] = ok && (!seen[o] || v > acc[o]) ? v : acc[o];
        seen[o] = seen[o] || ok;
#else
        acc[o] += ok ? v : 0.0;
        cnt[o] += ok ? 1.0 : 0.0;
#endif
      }
  }
  [[unroll]] for (int o = 0; o < RW; ++o) {
#if !MAX
#if COUNT_PAD
    acc[o] = acc[o] / float(KH * KW);
#else
    acc[o] = acc[o] / cnt[o];
#endif
#endif
  }
  const int yb = p * OH * OW + oy * OW + ox0;
#if TEXEL_Y
  // OW and RW multiples of YS: YS outputs are inside the row when their first is
  [[unroll]] for (int h = 0; h < RW / YS; ++h)
    if (ox0 + YS * h < OW) {
      float o[YS];
      [[unroll]] for (int e = 0; e < YS; ++e) o[e] = acc[YS * h + e];
      Y_PUT(yb + YS * h, o);
    }
#else
  [[unroll]] for (int o = 0; o < RW; ++o)
    if (ox0 + o < OW) y[yb + o] = TYS(acc[o]);
#endif
}
