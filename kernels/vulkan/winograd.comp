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
// kiln Winograd F(2x2, 3x3) and F(4x4, 3x3) convolution, f32 sums (the same operands as
// conv.comp; lowering/template.h has the instance, template_weights.c the
// weight transform):
//
//   Y[b][m][oy][ox] = EPI(bias[m] + sum_c sum_{kh,kw} w[m][c][kh][kw] * XP[b][c][(oy+kh)*CQ2 + ox+kw])
//
// for a 3x3, stride-1, dilation-1 convolution whose input the lowering laid
// out as planes of CPLANE floats per channel with row pitch CQ2 (the
// zero-padded phase split, or X itself without padding). The output is cut
// into 2x2 tiles; tile (ty, tx) reads the 4x4 patch d at rows 2ty..,
// columns 2tx.. and
//   Y_tile = A^T [ sum_c U_c .* (B^T d_c B) ] A,   U_c = G g_c G^T
// (B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], A^T = [1 1 1 0;
// 0 1 -1 -1]): 16 multiply-adds per tile and input channel where the
// direct 2x2 outputs take 36. U is transformed at compile time, laid out
// as U[((mb * 16 + xi) * CC + c) * TM + m % TM] (mb = m / TM; channels
// zero-padded to whole blocks of TM); F(4x4): U[((mb * CC + c) * 36 + xi)
// * TM + m % TM] after 12 words of sizes and epilogue (CRT, EPI_RT below).
//
// An invocation computes TM output channels x NT tiles: NTY tile rows of
// NT / NTY tiles (NTY 1, the row form; 2 where a tile row has fewer tiles
// than NT, such as F(4x4)'s 2 on 7x7 planes; NT a multiple of 4: the sums
// are vec4s of 4 tiles, acc[xi][m][NT/4], tile t at tile row t / NTX);
// a work-group is 8 invocations (lavapipe's SIMD width) of consecutive
// tile groups (a channel block's groups, then the next block's). Per input channel it reads the
// (WF NTY + 2) x (WF NT / NTY + 2) patch rows as
// whole vec4 texels shifted by the row's offset within a texel, transforms
// them (adds only) and runs 16 x TM x NT / 4 vec4 multiply-adds with the
// 16 x TM / 4 texels of this channel's U. Invocations past the last block
// recompute it and store nothing; patch values outside the valid rows and columns (past the plane's edge,
// another row, another channel, zeros past the buffer) reach only outputs
// past the edge, which are never stored: A^T keeps the first output row
// (column) away from the fourth patch row (column).
//
// The host puts after the #extension lines: BIND_W BIND_X BIND_C BIND_Y
// (kernel parameter order), the element types TW TX TC TY (float, or
// float16_t with the 16-bit extensions: storage only), the epilogue
// operands' buffers and KC_EPI(v, b, m, p) as for conv.comp, and
//   CM CC CPLANE CQ2 CHO CWO CBATCH CHAS_BIAS  the conv
//   WF               2: F(2x2, 3x3); 4: F(4x4, 3x3) (points 0, +-1, +-2:
//                    B^T, A^T below; U over the 36 positions of a 6x6 tile)
//   TM NT            channels and tiles per invocation
//   NTY 2            the NT tiles as 2 tile rows of NT / 2 (no TEXEL_Y);
//                    unset: one tile row
//   TEXEL 1          W and X as uniform texel buffers of vec4 (f32; kiln's
//                    tile mode 4): one 16-byte load per lane on lavapipe
//                    where a storage-buffer load is a loop over the lanes;
//                    an f16 one (TEXEL_W16 / TEXEL_X16 1) as an rgba16f
//                    storage texel buffer read with imageLoad (conv.comp)
//   TEXEL_Y 1        Y as an rgba32f storage texel buffer (f32 Y, CWO a
//                    multiple of 4): 4 columns of an output row a texel
//   Y_VEC4 1         (TEXEL_Y 1) those texels through a storage buffer of
//                    vec4s; 2: in pairs as u64vec4s (64-bit integers, CWO
//                    a multiple of 8); 3 (CRT, WF 4): pairs or vec4s as
//                    the run-time CWO allows
//   Y_VEC2 1         (no TEXEL_Y, f32 Y, CWO even) pairs of columns as
//                    vec2 stores
//   CRT 1            (F(4x4), f32 U) the conv's sizes CM CC CHO CWO CIH CIW
//                    CPLANE CQ2 are run-time values, read from the first
//                    2 texels of W (lowering's KILN_TEMPLATE_WINO4_SIZES
//                    words before U, there for every F(4x4) instance), not
//                    defines: one shader, so one
//                    pipeline and one driver compile, serves every conv of
//                    its kind (tiles, epilogue, store form, CALIGN); the
//                    unrolled transforms and products stay constant
//   EPI_RT 1         (F(4x4), f32 U) the epilogue is none or one Relu,
//                    chosen at run time by W's word 8 (1: Relu; lowering's
//                    KILN_TEMPLATE_WINO4_SIZES): KC_EPI applies it where
//                    CRELU, so convs with and without the Relu share a
//                    shader; EPI_RT 2: and a residual operand 0 (texels
//                    te0, Y's shape; a placeholder never read where the
//                    conv has none) added before the Relu where W's word
//                    9 is 1 (CADD): the convs with a Relu and with a
//                    residual Add + Relu share one too
//   CALIGN           (CDIRECT) true where X's rows and planes are whole
//                    texels (CIW % 4 == 0 and CIH * CIW % 4 == 0): every
//                    patch row keeps one shift in a texel
//   CDIRECT 1        X is the image itself (CIH x CIW planes, no phase
//                    split): patch row r0 + r, column s0 + j read X at
//                    (r0 + r - CPH, s0 + j - CPW), zero outside the plane
//                    (a select on clamped reads); CDIRECT 0: the planes
//                    (CPLANE, pitch CQ2) hold the padding already
// Dispatch: (ceil(CTH * CG * CMB / WG), 1, CBATCH) work-groups
// of WG invocations. Each invocation loops CC times (lavapipe's limit of
// 65535 loop iterations per invocation: the host reports CC).

#ifndef WF
#define WF 2
#endif
#ifndef CR
#define CR 1 // input channels a loop trip (CC a multiple of CR)
#endif
#define WA (WF + 2)                    // patch size
#define NXI (WA * WA)                  // positions of the transformed tile
#define NV (NT / 4)
#ifndef NTY
#define NTY 1
#endif
#define CTW ((CWO + WF - 1) / WF)      // tiles per row
#define CTH ((CHO + WF - 1) / WF)      // rows of tiles
#if NTY == 1
#define NTX NT
#define PR WA                          // patch rows
#define CTHG CTH
#else
#define NTX (NT / NTY)                 // tiles of a tile row an invocation
#define PR (WF * NTY + 2)
#define CTHG ((CTH + NTY - 1) / NTY)   // groups of NTY rows of tiles
#if TEXEL_Y
#error "winograd.comp: texel stores take one tile row an invocation (NTY 1)"
#endif
#endif
#define CG ((CTW + NTX - 1) / NTX)     // groups of NTX tiles per row of tiles
#define CP (CHO * CWO)
#define CMB ((CM + TM - 1) / TM)       // blocks of TM channels
#define RW (WF * NTX + 2)              // patch columns
#define RT ((RW + 3) / 4 + 1)          // texels per patch row at any shift
#ifndef CDIRECT
#define CDIRECT 0
#endif
#ifndef CRT
#define CRT 0
#endif
#if CRT
int CM, CC, CHO, CWO, CIH, CIW, CPLANE, CQ2; // main() reads them from W
#endif
#ifndef EPI_RT
#define EPI_RT 0
#endif
#if EPI_RT
bool CRELU; // main() reads it from W
#endif
#if EPI_RT == 2
bool CADD; // main() reads it from W
#endif
#if WF == 4
#define UHEAD 3 // F(4x4): the 12 words of sizes and epilogue before U (4 elements a U4)
#else
#define UHEAD 0
#endif
#ifndef CALIGN
#define CALIGN (CIW % 4 == 0 && XPLANE % 4 == 0)
#endif
#if CDIRECT
#define XPLANE (CIH * CIW)             // floats per input channel
#else
#define XPLANE CPLANE
#endif

// WG: invocations a work-group (8, one lavapipe SIMD row; the host's GPU
// rules print 64)
#ifndef WG
#define WG 8
#endif
layout(local_size_x = WG, local_size_y = 1, local_size_z = 1) in;

#ifndef TEXEL_W16
#define TEXEL_W16 0
#endif
#ifndef TEXEL_X16
#define TEXEL_X16 0
#endif
#if TEXEL && TEXEL_W16
layout(set = 0, binding = BIND_W, rgba16f) uniform restrict readonly imageBuffer tw;
#define U4(i) imageLoad(tw, (i))
#elif TEXEL
layout(set = 0, binding = BIND_W) uniform samplerBuffer tw;
#define U4(i) texelFetch(tw, (i))
#endif
#if TEXEL && TEXEL_X16
layout(set = 0, binding = BIND_X, rgba16f) uniform restrict readonly imageBuffer tx;
#define FETCH_X(i) imageLoad(tx, i)
#elif TEXEL
layout(set = 0, binding = BIND_X) uniform samplerBuffer tx;
#define FETCH_X(i) texelFetch(tx, i)
#else
layout(std430, set = 0, binding = BIND_W) restrict readonly buffer BufW { TW w_[]; };
layout(std430, set = 0, binding = BIND_X) restrict readonly buffer BufX { TX x_[]; };
vec4 U4(int i) { return vec4(float(w_[4 * i]), float(w_[4 * i + 1]), float(w_[4 * i + 2]), float(w_[4 * i + 3])); }
#endif
#if CHAS_BIAS
layout(std430, set = 0, binding = BIND_C) restrict readonly buffer BufC { TC bias[]; };
#endif
#ifndef Y_VEC4
#define Y_VEC4 0
#endif
#ifndef Y_VEC2
#define Y_VEC2 0
#endif
#if TEXEL_Y && Y_VEC4 == 3
// (Y_VEC4 3, CRT) pairs where CWO, a run-time size, is a multiple of 8,
// else vec4s: both views of Y, one taken per dispatch
layout(std430, set = 0, binding = BIND_Y) restrict writeonly buffer BufY8 { u64vec4 y8[]; };
layout(std430, set = 0, binding = BIND_Y) restrict writeonly buffer BufY4 { vec4 y4[]; };
#define YS 4
#elif TEXEL_Y && Y_VEC4 == 2
// (Y_VEC4 2) pairs of texels as one u64vec4 (8 floats a lane a store)
layout(std430, set = 0, binding = BIND_Y) restrict writeonly buffer BufY8 { u64vec4 y8[]; };
#define YS 8
#define Y_PUT(i, o)                                                                                 \
  y8[(i) >> 3] = u64vec4(pack64(floatBitsToUint(vec2(o[0], o[1]))), pack64(floatBitsToUint(vec2(o[2], o[3]))), \
                         pack64(floatBitsToUint(vec2(o[4], o[5]))), pack64(floatBitsToUint(vec2(o[6], o[7]))))
#elif TEXEL_Y && Y_VEC4
// (Y_VEC4 1) vec4 texels through a storage buffer: lavapipe (Mesa 22.3)
// runs an imageStore as a loop over the lanes per component
layout(std430, set = 0, binding = BIND_Y) restrict writeonly buffer BufY4 { vec4 y4[]; };
#define YS 4
#define Y_PUT(i, o) y4[(i) >> 2] = vec4(o[0], o[1], o[2], o[3])
#elif TEXEL_Y
layout(set = 0, binding = BIND_Y, rgba32f) uniform restrict writeonly imageBuffer ty;
#define YS 4
#define Y_PUT(i, o) imageStore(ty, (i) >> 2, vec4(o[0], o[1], o[2], o[3]))
#elif Y_VEC2
// (Y_VEC2 1) f32 Y without texel stores, rows of an even width: a pair of
// columns as one vec2 (lavapipe stores a vector with one loop over the
// lanes where each float is one: half the loops its LLVM compiles)
layout(std430, set = 0, binding = BIND_Y) restrict writeonly buffer BufY2 { vec2 y2[]; };
#else
layout(std430, set = 0, binding = BIND_Y) restrict writeonly buffer BufY { TY y[]; };
#endif

// RW floats of X from float index a (a row of the patches; s = a & 3, a
// constant where the rows keep one shift); reads stay in [0, end), end
// the end of the image (a per-sample program's images are CC * XPLANE
// floats apart: the last texel there is its own)
void load_row(int a, int s, int end, out float d[RW]) {
#if TEXEL
  const int t0 = a >> 2, tl = (end - 1) >> 2;
  vec4 xt[RT];
  [[unroll]] for (int f = 0; f < RT; ++f) xt[f] = FETCH_X(clamp(t0 + f, 0, tl));
  [[unroll]] for (int f = 0; f < RT - 1; ++f) {
    const vec4 p = xt[f], q = xt[f + 1];
    const vec4 v = s == 0 ? p : s == 1 ? vec4(p.yzw, q.x) : s == 2 ? vec4(p.zw, q.xy) : vec4(p.w, q.xyz);
    [[unroll]] for (int e = 0; e < 4; ++e)
      if (f * 4 + e < RW) d[f * 4 + e] = v[e];
  }
#else
  [[unroll]] for (int j = 0; j < RW; ++j) d[j] = float(x_[clamp(a + j, 0, end - 1)]);
#endif
}

// B^T x (x a column or row of a patch)
#if WF == 2
#define BT(x, y)                                                                                    \
  {                                                                                                 \
    y[0] = x[0] - x[2];                                                                             \
    y[1] = x[1] + x[2];                                                                             \
    y[2] = x[2] - x[1];                                                                             \
    y[3] = x[1] - x[3];                                                                             \
  }
// A^T m (m a column or row of the product)
#define AT(m, o)                                                                                    \
  {                                                                                                 \
    o[0] = m[0] + m[1] + m[2];                                                                      \
    o[1] = m[1] - m[2] - m[3];                                                                      \
  }
#else
#define BT(x, y)                                                                                    \
  {                                                                                                 \
    y[0] = 4.0 * x[0] - 5.0 * x[2] + x[4];                                                          \
    y[1] = x[3] + x[4] - 4.0 * (x[1] + x[2]);                                                       \
    y[2] = x[4] - x[3] + 4.0 * (x[1] - x[2]);                                                       \
    y[3] = x[4] - x[2] + 2.0 * (x[3] - x[1]);                                                       \
    y[4] = x[4] - x[2] + 2.0 * (x[1] - x[3]);                                                       \
    y[5] = 4.0 * x[1] - 5.0 * x[3] + x[5];                                                          \
  }
#define AT(m, o)                                                                                    \
  {                                                                                                 \
    o[0] = m[0] + (m[1] + m[2]) + (m[3] + m[4]);                                                    \
    o[1] = (m[1] - m[2]) + 2.0 * (m[3] - m[4]);                                                     \
    o[2] = (m[1] + m[2]) + 4.0 * (m[3] + m[4]);                                                     \
    o[3] = (m[1] - m[2]) + 8.0 * (m[3] - m[4]) + m[5];                                              \
  }
#endif

void main() {
  KILN_WG_GUARD;
#if CRT
  {
    const vec4 h0 = U4(0), h1 = U4(1);
    CM = int(h0.x), CC = int(h0.y), CHO = int(h0.z), CWO = int(h0.w);
    CIH = int(h1.x), CIW = int(h1.y), CPLANE = int(h1.z), CQ2 = int(h1.w);
  }
#endif
#if EPI_RT
  CRELU = U4(2).x != 0.0;
#endif
#if EPI_RT == 2
  CADD = U4(2).y != 0.0;
#endif
  // invocation gi: tile group gi % (CTH * CG) of channel block gi / (CTH *
  // CG), so the lanes of a small plane take several channel blocks (a
  // texel fetch costs lavapipe the same whether the lanes' addresses agree
  // or not)
  const int gi = int(KILN_WG.x) * WG + int(gl_LocalInvocationID.x);
  const int mb = min(gi / (CTHG * CG), CMB - 1);
  const int g = gi % (CTHG * CG);
  const int bz = int(KILN_WG.z);
  const int gy = g / CG, gx = g % CG;
  const int r0 = WF * NTY * gy, s0 = WF * gx * NTX; // the patches' first row and column
  int xa = bz * CC * XPLANE;
  const int xend = (bz + 1) * CC * XPLANE;
  int ua = UHEAD + ((mb * NXI * CC * TM) >> 2); // this block's U, in texels
#if WF == 4
  // F(4x4): U[mb][c][xi][m % TM], a channel's positions together (constant
  // offsets while CC is a run-time size)
#define UOFF(h, xi, i) ((h) * (NXI * TM / 4) + (xi) * (TM / 4) + (i) / 4)
#define USTEP (CR * NXI * TM / 4)
#else
#define UOFF(h, xi, i) ((h) * (TM / 4) + (xi) * CC * (TM / 4) + (i) / 4)
#define USTEP (CR * (TM / 4))
#endif
  // each patch row's offset in a channel's plane, and its shift in a texel
  int ro[PR], rs[PR];
#if CDIRECT
  // X itself: the padding is zeros here, rows outside the plane read
  // a clamped row (then zeroed)
  bool rin[PR], cin[RW];
  [[unroll]] for (int r = 0; r < PR; ++r) {
    const int iy = r0 + r - CPH;
    rin[r] = iy >= 0 && iy < CIH;
    ro[r] = clamp(iy, 0, CIH - 1) * CIW + s0 - CPW;
    rs[r] = CALIGN ? (8 - CPW % 4) & 3 : -1; // s0 is a multiple of 4
  }
  [[unroll]] for (int j = 0; j < RW; ++j) cin[j] = s0 + j - CPW >= 0 && s0 + j - CPW < CIW;
#else
  [[unroll]] for (int r = 0; r < PR; ++r) ro[r] = (r0 + r) * CQ2 + s0, rs[r] = -1;
#if WF == 4
  // F(4x4): a patch value outside the valid rows and columns would reach
  // the valid outputs of its tile through the transforms (cancelling only
  // in exact arithmetic, a NaN not at all): zeros there
  bool rin[PR], cin[RW];
  [[unroll]] for (int r = 0; r < PR; ++r) rin[r] = r0 + r < CHO + 2;
  [[unroll]] for (int j = 0; j < RW; ++j) cin[j] = s0 + j < CWO + 2;
#endif
#endif
  vec4 acc[NXI][TM][NV];
  [[unroll]] for (int xi = 0; xi < NXI; ++xi)
    [[unroll]] for (int i = 0; i < TM; ++i)
      [[unroll]] for (int f = 0; f < NV; ++f) acc[xi][i][f] = vec4(0.0);
  for (int c = 0; c < CC; c += CR) {
    // (CR input channels a trip: their transformed patches first, then
    // each sum takes its CR products in a row; lavapipe holds the sums on
    // the stack, so a sum is loaded and stored once per CR products)
    vec4 vr[CR][NXI][NV];
    [[unroll]] for (int h = 0; h < CR; ++h) {
    // B^T d over the rows, for every column of the NT patches (each tile
    // row's WA patch rows: u[q * WA + r] of tile row q)
    float d[PR][RW], u[NTY * WA][RW];
    [[unroll]] for (int r = 0; r < PR; ++r) {
      const int a = xa + ro[r];
      load_row(a, rs[r] >= 0 ? rs[r] : a & 3, xend, d[r]);
    }
#if WF == 4 || CDIRECT
    [[unroll]] for (int r = 0; r < PR; ++r)
      [[unroll]] for (int j = 0; j < RW; ++j) d[r][j] = rin[r] && cin[j] ? d[r][j] : 0.0;
#endif
    [[unroll]] for (int j = 0; j < RW; ++j) {
#if NTY == 1
      float x[WA], y[WA];
      [[unroll]] for (int r = 0; r < WA; ++r) x[r] = d[r][j];
      BT(x, y);
      [[unroll]] for (int r = 0; r < WA; ++r) u[r][j] = y[r];
#else
      [[unroll]] for (int q = 0; q < NTY; ++q) {
        float x[WA], y[WA];
        [[unroll]] for (int r = 0; r < WA; ++r) x[r] = d[WF * q + r][j];
        BT(x, y);
        [[unroll]] for (int r = 0; r < WA; ++r) u[q * WA + r][j] = y[r];
      }
#endif
    }
    // (B^T d) B per tile: v[i * WA + j] holds the NT tiles' element (i, j)
    vec4 v[NXI][NV];
    [[unroll]] for (int i = 0; i < WA; ++i)
      [[unroll]] for (int t = 0; t < NT; ++t) {
        float x[WA], y[WA];
#if NTY == 1
        [[unroll]] for (int k = 0; k < WA; ++k) x[k] = u[i][WF * t + k];
#else
        [[unroll]] for (int k = 0; k < WA; ++k) x[k] = u[t / NTX * WA + i][WF * (t % NTX) + k];
#endif
        BT(x, y);
        [[unroll]] for (int j = 0; j < WA; ++j) v[i * WA + j][t >> 2][t & 3] = y[j];
      }
    [[unroll]] for (int xi = 0; xi < NXI; ++xi)
      [[unroll]] for (int f = 0; f < NV; ++f) vr[h][xi][f] = v[xi][f];
    xa += XPLANE;
    }
    // the NXI products with these channels' U (TM / 4 texels per xi and
    // channel; channel c + h's U is TM / 4 texels after c's)
    [[unroll]] for (int xi = 0; xi < NXI; ++xi)
      [[unroll]] for (int i = 0; i < TM; i += 4) {
        vec4 w[CR];
        [[unroll]] for (int h = 0; h < CR; ++h) w[h] = U4(ua + UOFF(h, xi, i));
        [[unroll]] for (int e = 0; e < 4; ++e)
          [[unroll]] for (int f = 0; f < NV; ++f)
            [[unroll]] for (int h = 0; h < CR; ++h) acc[xi][i + e][f] = fma(vec4(w[h][e]), vr[h][xi][f], acc[xi][i + e][f]);
      }
    ua += USTEP;
  }
  if (gi >= CTHG * CG * CMB) return;
  const int yb = bz * CM * CP;
  [[unroll]] for (int i = 0; i < TM; ++i) {
    const int m = mb * TM + i;
    if (m >= CM) continue;
#if CHAS_BIAS
    const float bm = float(bias[m]);
#else
    const float bm = 0.0;
#endif
    [[unroll]] for (int f = 0; f < NV; ++f) {
      // A^T acc A for 4 tiles at once: o[r][q] row r, column q of the tiles
      vec4 o[WF][WF];
      {
        vec4 w[WF][WA];
        [[unroll]] for (int s = 0; s < WA; ++s) {
          vec4 x[WA], y[WF];
          [[unroll]] for (int k = 0; k < WA; ++k) x[k] = acc[k * WA + s][i][f];
          AT(x, y);
          [[unroll]] for (int r = 0; r < WF; ++r) w[r][s] = y[r];
        }
        [[unroll]] for (int r = 0; r < WF; ++r) {
          vec4 y[WF];
          AT(w[r], y);
          [[unroll]] for (int q = 0; q < WF; ++q) o[r][q] = y[q] + bm;
        }
      }
      [[unroll]] for (int r = 0; r < WF; ++r) {
#if NTY > 1
        // tile t of these 4: tile row (4 f + t) / NTX, column (4 f + t) % NTX
        // of the invocation's (no texel stores)
        [[unroll]] for (int t = 0; t < 4; ++t) {
          const int oy = r0 + WF * ((f * 4 + t) / NTX) + r;
          if (oy >= CHO) continue;
#if Y_VEC2
          [[unroll]] for (int q = 0; q < WF; q += 2) {
            const int ox = s0 + ((f * 4 + t) % NTX) * WF + q;
            if (ox >= CWO) continue;
            float v0 = o[r][q][t], v1 = o[r][q + 1][t];
            KC_EPI(v0, bz, m, oy * CWO + ox);
            KC_EPI(v1, bz, m, oy * CWO + ox + 1);
            y2[(yb + m * CP + oy * CWO + ox) >> 1] = vec2(v0, v1);
          }
#else
          [[unroll]] for (int q = 0; q < WF; ++q) {
            const int ox = s0 + ((f * 4 + t) % NTX) * WF + q;
            if (ox >= CWO) continue;
            float val = o[r][q][t];
            KC_EPI(val, bz, m, oy * CWO + ox);
            y[yb + m * CP + oy * CWO + ox] = TY(val);
          }
#endif
        }
      }
#else
        const int oy = r0 + r;
        if (oy >= CHO) continue;
#if TEXEL_Y && Y_VEC4 == 3
        // the 4 tiles' 4 WF columns with the epilogue, then stored as
        // WF / 2 pairs of texels where the rows are whole pairs, else as WF
        // vec4 texels (CWO a multiple of 4, s0 of 8)
        const int ox0 = s0 + f * 4 * WF;
        float ov[4 * WF];
        [[unroll]] for (int h = 0; h < WF; ++h) {
          [[unroll]] for (int e = 0; e < 4; ++e) ov[4 * h + e] = o[r][(4 * h + e) % WF][(4 * h + e) / WF];
          if (ox0 + 4 * h < CWO) // (4 columns inside the row when their first is)
            [[unroll]] for (int e = 0; e < 4; ++e) KC_EPI(ov[4 * h + e], bz, m, oy * CWO + ox0 + 4 * h + e);
        }
        const int yo = yb + m * CP + oy * CWO + ox0;
        if (CWO % 8 == 0) {
          [[unroll]] for (int h = 0; h < WF / 2; ++h)
            if (ox0 + 8 * h < CWO)
              y8[(yo >> 3) + h] = u64vec4(pack64(floatBitsToUint(vec2(ov[8 * h], ov[8 * h + 1]))),
                                          pack64(floatBitsToUint(vec2(ov[8 * h + 2], ov[8 * h + 3]))),
                                          pack64(floatBitsToUint(vec2(ov[8 * h + 4], ov[8 * h + 5]))),
                                          pack64(floatBitsToUint(vec2(ov[8 * h + 6], ov[8 * h + 7]))));
        } else {
          [[unroll]] for (int h = 0; h < WF; ++h)
            if (ox0 + 4 * h < CWO) y4[(yo >> 2) + h] = vec4(ov[4 * h], ov[4 * h + 1], ov[4 * h + 2], ov[4 * h + 3]);
        }
#elif TEXEL_Y
        // the 4 tiles' 4 WF columns as 4 WF / YS stores (CWO a multiple of
        // YS, s0 of 8: YS columns are inside the row when their first is)
        [[unroll]] for (int h = 0; h < 4 * WF / YS; ++h) {
          const int ox = s0 + f * 4 * WF + h * YS;
          if (ox >= CWO) continue;
          float ov[YS];
          [[unroll]] for (int e = 0; e < YS; ++e) {
            const int j = h * YS + e; // column of the 4 tiles
            float val = o[r][j % WF][j / WF];
            KC_EPI(val, bz, m, oy * CWO + ox + e);
            ov[e] = val;
          }
          Y_PUT(yb + m * CP + oy * CWO + ox, ov);
        }
#elif Y_VEC2
        // (CWO even, so CP too: a pair's first index is even, its second
        // column inside the row when its first is)
        [[unroll]] for (int t = 0; t < 4; ++t)
          [[unroll]] for (int q = 0; q < WF; q += 2) {
            const int ox = s0 + (f * 4 + t) * WF + q;
            if (ox >= CWO) continue;
            float v0 = o[r][q][t], v1 = o[r][q + 1][t];
            KC_EPI(v0, bz, m, oy * CWO + ox);
            KC_EPI(v1, bz, m, oy * CWO + ox + 1);
            y2[(yb + m * CP + oy * CWO + ox) >> 1] = vec2(v0, v1);
          }
#else
        [[unroll]] for (int t = 0; t < 4; ++t)
          [[unroll]] for (int q = 0; q < WF; ++q) {
            const int ox = s0 + (f * 4 + t) * WF + q;
            if (ox >= CWO) continue;
            float val = o[r][q][t];
            KC_EPI(val, bz, m, oy * CWO + ox);
            y[yb + m * CP + oy * CWO + ox] = TY(val);
          }
#endif
      }
#endif
    }
  }
}
