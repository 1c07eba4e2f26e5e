#version 450
#extension GL_EXT_control_flow_attributes : enable
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_ballot : enable
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : enable
// KILN_WG, KILN_GID: this work-group's and invocation's ids in the
// instance's grid; KILN_WG_GUARD; starts main(). The built-in ids and
// nothing unless the host folded a grid past the device's work-group counts
// (targets/vulkan/vulkan_grid.c defines them after the #version line).
#ifndef KILN_WG
#define KILN_WG gl_WorkGroupID
#define KILN_GID gl_GlobalInvocationID
#define KILN_WG_GUARD
#endif
// kiln implicit-GEMM convolution, f32 (targets/gpu_conv.h has the layout):
//
//   Y[b][m][p] = EPI(bias[m] + sum_{c, tap} W[m][c*CT + tap] * XP[b][c][TOFF[tap] + q(p)])
//
// XP is the input itself or the lowering's zero-padded stride-phase split,
// in which every tap is a constant shift TOFF[tap] of a flat plane of
// CPLANE floats per channel, so B[c*CT + tap][q] = XP[c][TOFF[tap] + q] is
// contiguous along the output grid q. The grid has the pitch of the phase
// images (CQ1 x CQ2 per depth slice): its CQ2 - CWO extra columns per row
// are computed and never stored. W is the lowering's packed constant:
// element (m, k) at (((k / CKBS) * CTILES + m / CPT) * CKBS + k % CKBS) * CPT + m % CPT.
//
// The host puts after the #version line: the sizes below, the bindings
// BIND_W BIND_X BIND_C BIND_Y (kernel parameter order), "const int
// TOFF[CT]", the element types TW TX TC TY (float, or float16_t with the
// 16-bit storage and float16 extensions enabled: storage only, the sums
// are f32), the epilogue operands' buffer declarations (e0, e1, ...) and
//   KC_EPI(v, b, m, p)  statements applying the fused epilogue to v for
//                       image b, channel m, dense output position p
//   CM CQ CK CT CC CPLANE CBATCH CPT CKBS CTILES CCROP CQ1 CQ2 CDO CHO CWO CHAS_BIAS
//   TM TN TK RM RN SHARED  tiles, as in gemm.comp (a work-group of
//                       (TN/RN) x (TM/RM) threads computes TM channels x
//                       TN grid positions, each thread an RM x RN tile)
//   SHARED 2 (the default) is gemm.comp's subgroup mode: a work-group of 8
//                       invocations (TN/RN == 8, RM == TM), invocation l
//                       computing all TM channels of grid positions
//                       q0 + l*RN .. + RN-1 with the weights loaded once per
//                       subgroup and broadcast; W64 1: f32 weights read in
//                       pairs of channels as 64-bit words (CPT and CM even,
//                       TM % 16 == 0)
//   TEXEL 1 (SHARED 2, f32 W and X or f16 ones with TEXEL_W16 / TEXEL_X16 1,
//          CPT % 4 == 0, TM % 16 == 0, RN % 4 == 0):
//                       W and X as uniform texel buffers of vec4 texels
//                       (kiln's tile mode 4; W64 0); there the 8
//                       invocations may also be LX = TN/RN position groups
//                       x LY = TM/RM channel groups (LX * LY == 8, RM % 4
//                       == 0), each computing RM channels x RN positions
//   XALIGNED 1 (TEXEL 1): CPLANE and every TOFF multiples of 4, so the RN
//                       positions of every K step are RN/4 whole texels
//   TEXEL_Y 1 (TEXEL 1, no crop, CP % 4 == 0, f32 Y, or f16 Y with Y16 1
//          and Y_VEC4 1: f16vec4 stores): Y as a storage texel
//                       buffer (rgba32f imageBuffer), each invocation's RN
//                       positions of a channel stored as RN/4 whole texels
//   KC_EPI4(v, b, m, q, e)  (TEXEL_Y 1, where the host defines it) the
//                       epilogue of output q + e, q a whole texel's first
//                       position: operands laid out as Y (residual Adds) read
//                       as component e of their texel, one fetch for 4 outputs
//   Y_VEC4 1 (TEXEL_Y 1): those texels through a storage buffer of vec4s;
//          2: in pairs, as u64vec4s (64-bit integers; RN, TN, CP % 8 == 0)
//   AF16 1 (SHARED 0 / 1) the products and sums in float16_t (the shared
//                       tiles too): the compile's --fp16-accumulate on a
//                       device with shaderFloat16 (the host adds the float16
//                       arithmetic extension); bias and epilogue in f32
//   CDIRECT 1           X is the image itself (CIH x CIW planes of CPLANE
//                       floats, no phase split): the grid is the dense
//                       output (no crop, CQ = CHO * CWO), position q reads
//                       tap (ky, kx) = (t / CKW, t % CKW) at
//                       ((q / CWO) * CSH + ky * CDH - CPH, (q % CWO) * CSW +
//                       kx * CDW - CPW), zero outside the plane (a select on
//                       a clamped read); CDIRECT 0: the planes hold the
//                       padding already (or X is read flat: TOFF, CPLANE)
// Dispatch: (ceil(CQ/TN), ceil(CM/TM), CBATCH) work-groups.
//
// Every invocation loops CK/TK times over a K slice: Mesa's lavapipe ends
// an invocation after 65535 loop iterations in all, so the work of one
// invocation must stay far below that (CK/TK * (1 + loads) here).

#ifndef KREUSE
#define KREUSE 0
#endif
#ifndef AF16
#define AF16 0
#endif
#if AF16 // (SHARED 0 / 1) the arithmetic type: float16_t sums
#define AF float16_t
#define AF4 f16vec4
#else
#define AF float
#define AF4 vec4
#endif
// K a multiple of TK: no partial last K step, so no clamped K index and no
// zeroed products (a multiply per X value and step that LLVM cannot fold:
// k0 is a run-time value)
#define KTAIL (CK % TK != 0)
// (TEXEL, X read flat, planes not whole texels: MobileNetV2's 7x7 1x1
// convs, 49 floats a plane) every K step's shift within a texel is known
// at compile time where one tap a channel, K whole steps of TK and TK
// planes, the images and q0 (TN, RN) whole texels: the selects over the 4
// shifts fold away, and the texel past a shift of 0 goes
#define XSHIFT_K (CT == 1 && !KTAIL && (TK * CPLANE) % 4 == 0 && (CBATCH == 1 || (CC * CPLANE) % 4 == 0) && \
                  TN % 4 == 0 && RN % 4 == 0)
#define LX (TN / RN)
#define LY (TM / RM)
#define NT (LX * LY)
#define CP (CDO * CHO * CWO)

#ifndef TEXEL
#define TEXEL 0
#endif
#if TEXEL && LY > 1
// (split work-group) one row of 8: lavapipe runs the x invocations of a
// work-group as the SIMD lanes, so a (2, 4) group would fill 2 lanes of 8
layout(local_size_x = NT, local_size_y = 1, local_size_z = 1) in;
#else
layout(local_size_x = LX, local_size_y = LY, local_size_z = 1) in;
#endif
#if TEXEL
// (SHARED 2) W and X as uniform texel buffers of vec4 texels, as in
// gemm.comp: a vec4 texelFetch is one 16-byte load per lane on lavapipe
// where a buffer load is a loop over the lanes. Every invocation reads the
// TM channels of W at k itself, 4 a texel (CPT a multiple of 4; no
// broadcast), and its RN grid positions from RN/4 + 1 texels, shifted by
// the tap's offset within a texel (the same for all lanes).
// (TEXEL_W16 / TEXEL_X16 1: that operand is f16) its texels are 4 halves,
// read through an rgba16f storage texel buffer (imageLoad converts them
// to a vec4 of f32): a sampled buffer carries no format in SPIR-V, so the
// device could not tell an f16 view from an f32 one. On lavapipe an
// imageLoad is a little slower than a texelFetch but ~4x faster than the
// f16 storage-buffer loads it replaces (ResNet-18 fp16 on lavapipe).
#ifndef TEXEL_W16
#define TEXEL_W16 0
#endif
#ifndef TEXEL_X16
#define TEXEL_X16 0
#endif
#if TEXEL_W16
layout(set = 0, binding = BIND_W, rgba16f) uniform restrict readonly imageBuffer tw;
#define FETCH_W(i) imageLoad(tw, i)
#else
layout(set = 0, binding = BIND_W) uniform samplerBuffer tw;
#define FETCH_W(i) texelFetch(tw, i)
#endif
#if TEXEL_X16
layout(set = 0, binding = BIND_X, rgba16f) uniform restrict readonly imageBuffer tx;
#define FETCH_X(i) imageLoad(tx, i)
#else
layout(set = 0, binding = BIND_X) uniform samplerBuffer tx;
#define FETCH_X(i) texelFetch(tx, i)
#endif
#define w(i) FETCH_W((i) >> 2)[(i) & 3]
#define xp(i) FETCH_X((i) >> 2)[(i) & 3]
#else
layout(std430, set = 0, binding = BIND_W) restrict readonly buffer BufW { TW w_[]; };
layout(std430, set = 0, binding = BIND_X) restrict readonly buffer BufX { TX xp_[]; };
#define w(i) w_[i]
#define xp(i) xp_[i]
#endif
#ifndef TEXEL_C
#define TEXEL_C 0
#endif
#if CHAS_BIAS && TEXEL_C
// (TEXEL 1, f32 bias) a uniform texel buffer too: a channel's bias is the
// same for all lanes, and a buffer load is a loop over the lanes where a
// texel fetch serves 4 channels
layout(set = 0, binding = BIND_C) uniform samplerBuffer tc;
#define BIAS(m) texelFetch(tc, (m) >> 2)[(m) & 3]
#elif CHAS_BIAS
layout(std430, set = 0, binding = BIND_C) restrict readonly buffer BufC { TC bias[]; };
#define BIAS(m) float(bias[m])
#endif
#ifndef TEXEL_Y
#define TEXEL_Y 0
#endif
#ifndef Y_VEC4
#define Y_VEC4 0
#endif
#ifndef Y16
#define Y16 0
#endif
#if TEXEL_Y && Y_VEC4 == 2
// (Y_VEC4 2) pairs of texels as 64-bit vec4s: one loop over the lanes
// stores 8 floats a lane (RN, TN and CP multiples of 8)
layout(std430, set = 0, binding = BIND_Y) restrict writeonly buffer BufY8 { u64vec4 y8[]; };
#elif TEXEL_Y && Y_VEC4 && Y16
// (Y_VEC4 1, f16 Y) 4 halves a store (lavapipe: one loop over the lanes
// for the 4, where f16 Y stored element by element took a loop each)
layout(std430, set = 0, binding = BIND_Y) restrict writeonly buffer BufY4 { f16vec4 y4[]; };
#define Y_STORE(i, o) y4[i] = f16vec4(o)
#elif TEXEL_Y && Y_VEC4
// (Y_VEC4 1) the same texels through a storage buffer of vec4s: lavapipe
// (Mesa 22.3) runs an imageStore as one loop over the 8 lanes per
// component, a vec4 buffer store as one loop for all 4
layout(std430, set = 0, binding = BIND_Y) restrict writeonly buffer BufY4 { vec4 y4[]; };
#define Y_STORE(i, o) y4[i] = o
#elif TEXEL_Y
// lavapipe stores a vec4 texel with one 16-byte store per lane; a storage
// buffer store is a loop over the lanes for every float
layout(set = 0, binding = BIND_Y, rgba32f) uniform restrict writeonly imageBuffer ty;
#define Y_STORE(i, o) imageStore(ty, i, o)
#else
layout(std430, set = 0, binding = BIND_Y) restrict writeonly buffer BufY { TY y[]; };
#endif

#ifndef CDIRECT
#define CDIRECT 0
#endif
#if CDIRECT
// (CDIRECT) X at row iy, column ix of the plane from xc; 0 outside it
float xd(int xc, int iy, int ix) {
  const bool ok = uint(iy) < uint(CIH) && uint(ix) < uint(CIW);
  const float v = float(xp(xc + (ok ? iy * CIW + ix : 0)));
  return ok ? v : 0.0;
}
#endif

float load_a(int m, int k) {
  if (m >= CM || k >= CK) return 0.0;
  return float(w((((k / CKBS) * CTILES + m / CPT) * CKBS + k % CKBS) * CPT + m % CPT));
}

float load_b(int xb, int k, int q) {
  if (k >= CK || q >= CQ) return 0.0;
#if CDIRECT
  const int tap = k % CT;
  return xd(xb + (k / CT) * CPLANE, (q / CWO) * CSH - CPH + (tap / CKW) * CDH,
            (q % CWO) * CSW - CPW + (tap % CKW) * CDW);
#else
  return float(xp(xb + (k / CT) * CPLANE + TOFF[k % CT] + q));
#endif
}

#ifndef W64
#define W64 0
#endif
#if SHARED == 2 && W64
layout(std430, set = 0, binding = BIND_W) restrict readonly buffer BufW2 { uint64_t w2[]; };
#endif

#if SHARED == 1
// ---- shared-memory mode (SHARED 1, the GPU rules): gemm.comp's ------------
// A K tile of W (TM channels x TK) and of X (TK x TN positions) staged in
// shared memory, W stored as As[k][m]; each invocation reads its share of
// the next tile into registers (LA floats of W, LB of X) before the
// current tile's FMAs and stores it to the other buffer after them (DB:
// one barrier a K step). Host-set:
//   W4  W read as vec4 of 4 channels (the panel layout keeps CPT channels
//       of a k contiguous: CPT, CM and TM multiples of 4, TM*TK/4 of NT)
//   X4  X read as vec4 of 4 positions (planes read flat: no CDIRECT,
//       CPLANE, every TOFF and CQ multiples of 4, TK*TN/4 of NT)
//   DB  two buffers (2 x TK x (TM + TN) floats within the host's budget)
#ifndef W4
#define W4 0
#endif
#ifndef X4
#define X4 0
#endif
#ifndef DB
#define DB 0
#endif
#define NBUF (DB + 1)
#define LA (TM * TK / NT)
#define LB (TK * TN / NT)
// VS: register tiles in groups of 4 channels / positions read from shared
// memory as vec4 (invocation (tx, ty): channels (i/4 * LY + ty) * 4 + i%4,
// positions alike); else channels ty + i*LY, positions tx + j*LX
#define VS (RM % 4 == 0 && RN % 4 == 0 && TM % 4 == 0 && TN % 4 == 0)
#if VS
shared AF4 As4[NBUF * TK * (TM / 4)];
shared AF4 Bs4[NBUF * TK * (TN / 4)];
#define AS_ST(s, k, m, v) As4[((s) * TK + (k)) * (TM / 4) + ((m) >> 2)][(m) & 3] = AF(v)
#define BS_ST(s, k, n, v) Bs4[((s) * TK + (k)) * (TN / 4) + ((n) >> 2)][(n) & 3] = AF(v)
#define SH_ROW(i) ((((i) >> 2) * LY + ty) * 4 + ((i) & 3))
#define SH_COL(j) ((((j) >> 2) * LX + tx) * 4 + ((j) & 3))
#else
shared AF As[NBUF * TK * TM];
shared AF Bs[NBUF * TK * TN];
#define AS_ST(s, k, m, v) As[((s) * TK + (k)) * TM + (m)] = AF(v)
#define BS_ST(s, k, n, v) Bs[((s) * TK + (k)) * TN + (n)] = AF(v)
#define SH_ROW(i) (ty + (i) * LY)
#define SH_COL(j) (tx + (j) * LX)
#endif
#if W4
#ifndef TW4
#define TW4 vec4
#endif
layout(std430, set = 0, binding = BIND_W) restrict readonly buffer BufW4 { TW4 w4_[]; };
vec4 ra[LA / 4];
#else
float ra[LA];
#endif
#if X4
#ifndef TX4
#define TX4 vec4
#endif
layout(std430, set = 0, binding = BIND_X) restrict readonly buffer BufX4 { TX4 x4_[]; };
vec4 rb[LB / 4];
#else
float rb[LB];
#endif
// this invocation's share of the K tile at k0 into registers: element e at
// idx = tid + e * NT, consecutive invocations reading consecutive channels
// of a panel (W) and positions (X)
void sh_fetch(int tid, int m0, int q0, int xb, int k0) {
#if W4
  [[unroll]] for (int e = 0; e < LA / 4; ++e) {
    const int idx = tid + e * NT, k = k0 + idx / (TM / 4), m = m0 + (idx % (TM / 4)) * 4;
    ra[e] = (m < CM && k < CK)
                ? vec4(w4_[((((k / CKBS) * CTILES + m / CPT) * CKBS + k % CKBS) * CPT + m % CPT) >> 2])
                : vec4(0.0);
  }
#else
  [[unroll]] for (int e = 0; e < LA; ++e) {
    const int idx = tid + e * NT;
    ra[e] = load_a(m0 + idx % TM, k0 + idx / TM);
  }
#endif
#if X4
  [[unroll]] for (int e = 0; e < LB / 4; ++e) {
    const int idx = tid + e * NT, k = k0 + idx / (TN / 4), q = q0 + (idx % (TN / 4)) * 4;
    rb[e] = (k < CK && q < CQ) ? vec4(x4_[(xb + (k / CT) * CPLANE + TOFF[k % CT] + q) >> 2]) : vec4(0.0);
  }
#else
  [[unroll]] for (int e = 0; e < LB; ++e) {
    const int idx = tid + e * NT;
    rb[e] = load_b(xb, k0 + idx / TN, q0 + idx % TN);
  }
#endif
}
// the registers sh_fetch filled, into shared buffer s
void sh_stash(int tid, int s) {
#if W4 && VS
  [[unroll]] for (int e = 0; e < LA / 4; ++e) As4[s * TK * (TM / 4) + tid + e * NT] = AF4(ra[e]);
#elif W4
  [[unroll]] for (int e = 0; e < LA / 4; ++e) {
    const int idx = tid + e * NT, k = idx / (TM / 4), m = (idx % (TM / 4)) * 4;
    [[unroll]] for (int q = 0; q < 4; ++q) AS_ST(s, k, m + q, ra[e][q]);
  }
#else
  [[unroll]] for (int e = 0; e < LA; ++e) {
    const int idx = tid + e * NT;
    AS_ST(s, idx / TM, idx % TM, ra[e]);
  }
#endif
#if X4 && VS
  [[unroll]] for (int e = 0; e < LB / 4; ++e) Bs4[s * TK * (TN / 4) + tid + e * NT] = AF4(rb[e]);
#elif X4
  [[unroll]] for (int e = 0; e < LB / 4; ++e) {
    const int idx = tid + e * NT, k = idx / (TN / 4), n = (idx % (TN / 4)) * 4;
    [[unroll]] for (int q = 0; q < 4; ++q) BS_ST(s, k, n + q, rb[e][q]);
  }
#else
  [[unroll]] for (int e = 0; e < LB; ++e) {
    const int idx = tid + e * NT;
    BS_ST(s, idx / TN, idx % TN, rb[e]);
  }
#endif
}
#endif

#if SHARED == 2
#define SG 8
#if TEXEL
#define RPL 4           // channels per invocation and load
#else
#define RPL (1 + W64)   // channels per invocation and load
#endif
#define GR (SG * RPL)   // channels per broadcast group
#define W_IDX(m, k) ((((k) / CKBS) * CTILES + (m) / CPT) * CKBS + (k) % CKBS) * CPT + (m) % CPT
float w_at(int m, int k) { return float(w(W_IDX(m, k))); }
// this invocation's RPL channels m, (m + 1) of W at k (m < CM, even with W64)
// (TEXEL reads the weights in main, no broadcast)
void w_load(int m, int k, out float wv[RPL]) {
#if W64
  const uint64_t v = w2[((((k / CKBS) * CTILES + m / CPT) * CKBS + k % CKBS) * CPT + m % CPT) >> 1];
  wv[0] = uintBitsToFloat(uint(v));
  wv[1] = uintBitsToFloat(uint(v >> 32));
#else
  wv[0] = w_at(m, k);
#endif
}

void main() {
  KILN_WG_GUARD;
  // where subgroups hold fewer than 8 invocations, every invocation loads
  // the weights itself instead of taking them from a broadcast
  const bool bc = gl_SubgroupSize >= SG;
  const int lane = bc ? int(gl_SubgroupInvocationID) : int(gl_LocalInvocationID.x);
#if TEXEL && LY > 1
  // (TEXEL, LY > 1: the 8 invocations as LX position groups x LY channel
  // groups, each RM channels x RN positions; no broadcast, so no lane ids)
  const int q0 = int(KILN_WG.x) * TN + int(gl_LocalInvocationID.x) % LX * RN;
  const int m0 = (CM <= TM ? 0 : int(KILN_WG.y) * TM) + int(gl_LocalInvocationID.x) / LX * RM;
#else
  const int q0 = int(KILN_WG.x) * TN + lane * RN;
  // (one channel tile: a constant, so the rows past CM fold away)
  const int m0 = CM <= TM ? 0 : int(KILN_WG.y) * TM;
#endif
  const int bz = int(KILN_WG.z);
  const int xb = bz * CC * CPLANE;
#if TEXEL
  vec4 acc4[RM][RN / 4];
  [[unroll]] for (int i = 0; i < RM; ++i)
    [[unroll]] for (int f = 0; f < RN / 4; ++f) acc4[i][f] = vec4(0.0);
#define ACC(i, j) acc4[i][(j) >> 2][(j) & 3]
#else
  float acc[TM][RN];
  [[unroll]] for (int i = 0; i < TM; ++i)
    [[unroll]] for (int j = 0; j < RN; ++j) acc[i][j] = 0.0;
#define ACC(i, j) acc[i][j]
#endif
#if !TEXEL
  int myrow[TM / GR];
  [[unroll]] for (int r = 0; r < TM / GR; ++r) myrow[r] = min(m0 + r * GR + lane * RPL, CM - RPL);
#endif
  int qc[RN];
  [[unroll]] for (int j = 0; j < RN; ++j) qc[j] = min(q0 + j, CQ - 1); // past CQ: computed, never stored
#if CDIRECT
  // each position's input row and column of tap (0, 0)
  int iy0[RN], ix0[RN];
  [[unroll]] for (int j = 0; j < RN; ++j) iy0[j] = (qc[j] / CWO) * CSH - CPH, ix0[j] = (qc[j] % CWO) * CSW - CPW;
#endif
  for (int k0 = 0; k0 < CK; k0 += TK) {
#if TEXEL && KREUSE
    vec4 xv[TK][RN / 4];
#endif
    [[unroll]] for (int kk = 0; kk < TK; ++kk) {
      const int k = KTAIL ? min(k0 + kk, CK - 1) : k0 + kk;
      const float kin = !KTAIL || k0 + kk < CK ? 1.0 : 0.0; // the K tail adds nothing
#if CDIRECT && TK == CT
      // (a channel's taps a K step: k0 a multiple of CT) constant shifts
      const int xc = xb + (k0 / CT) * CPLANE, tap = kk;
      const int dy = (tap / CKW) * CDH, dx = (tap % CKW) * CDW;
#elif CDIRECT
      const int xc = xb + (k / CT) * CPLANE, tap = k % CT;
      const int dy = (tap / CKW) * CDH, dx = (tap % CKW) * CDW;
#else
      const int xk = xb + (k / CT) * CPLANE + TOFF[k % CT];
#endif
#if TEXEL
#if CDIRECT
      // (X itself) every position's value of this tap on its own
      vec4 bv4[RN / 4];
      [[unroll]] for (int f = 0; f < RN / 4; ++f)
        [[unroll]] for (int e = 0; e < 4; ++e)
          bv4[f][e] = kin * xd(xc, iy0[4 * f + e] + dy, ix0[4 * f + e] + dx);
#else
      // positions q0 .. q0 + RN - 1 start at texel component s; those past
      // CQ read other values (or zeros past the buffer), never stored
      const int xa = xk + q0, s = XSHIFT_K ? (kk * CPLANE + TOFF[0]) & 3 : xa & 3;
      vec4 bv4[RN / 4];
#if XALIGNED
      // (planes and tap offsets multiples of 4: every shift s is 0)
      [[unroll]] for (int f = 0; f < RN / 4; ++f) bv4[f] = kin * FETCH_X((xa >> 2) + f);
#else
      vec4 xt[RN / 4 + 1];
      [[unroll]] for (int f = 0; f <= RN / 4; ++f) xt[f] = FETCH_X((xa >> 2) + f);
      [[unroll]] for (int f = 0; f < RN / 4; ++f) {
        const vec4 a = xt[f], b = xt[f + 1];
        bv4[f] = kin * (s == 0 ? a : s == 1 ? vec4(a.yzw, b.x) : s == 2 ? vec4(a.zw, b.xy) : vec4(a.w, b.xyz));
      }
#endif
#endif
      // Every invocation reads all TM channels of W at k itself (the same
      // texels in all lanes; channels past CM, in the panel's zero padding
      // or a tile past CTILES, read other weights or zeros, never stored):
      // on lavapipe a texelFetch costs about what one subgroupBroadcast
      // does (a loop over the lanes per value), so this is TM / 4 fetches
      // where the broadcasts were 1 + TM (3x3 convs of 64..512 channels:
      // 18-21 -> 41-46 GFLOP/s). The sums are vec4s of positions, used as
      // read: arrays of floats made shaderc's optimizer 2-3x slower.
      // (where CM <= TM, one channel tile: only its channels, in 4s)
#if KREUSE
      [[unroll]] for (int f = 0; f < RN / 4; ++f) xv[kk][f] = bv4[f];
#else
      [[unroll]] for (int i = 0; i < (LY == 1 && CM < TM ? (CM + 3) / 4 * 4 : RM); i += 4) {
        const vec4 v = FETCH_W(W_IDX(m0 + i, k) >> 2);
        [[unroll]] for (int e = 0; e < 4; ++e)
          [[unroll]] for (int f = 0; f < RN / 4; ++f) acc4[i + e][f] = fma(vec4(v[e]), bv4[f], acc4[i + e][f]);
      }
#endif
#else
      float bv[RN];
#if CDIRECT
      [[unroll]] for (int j = 0; j < RN; ++j) bv[j] = kin * xd(xc, iy0[j] + dy, ix0[j] + dx);
#else
      [[unroll]] for (int j = 0; j < RN; ++j) bv[j] = kin * float(xp(xk + qc[j]));
#endif
      [[unroll]] for (int r = 0; r < TM / GR; ++r) {
        float wv[RPL], av[GR];
        w_load(myrow[r], k, wv);
        [[unroll]] for (int e = 0; e < RPL; ++e) {
          if (bc) {
            // subgroupBroadcast wants a constant id: spelled out
            av[0 * RPL + e] = subgroupBroadcast(wv[e], 0);
            av[1 * RPL + e] = subgroupBroadcast(wv[e], 1);
            av[2 * RPL + e] = subgroupBroadcast(wv[e], 2);
            av[3 * RPL + e] = subgroupBroadcast(wv[e], 3);
            av[4 * RPL + e] = subgroupBroadcast(wv[e], 4);
            av[5 * RPL + e] = subgroupBroadcast(wv[e], 5);
            av[6 * RPL + e] = subgroupBroadcast(wv[e], 6);
            av[7 * RPL + e] = subgroupBroadcast(wv[e], 7);
          } else {
            [[unroll]] for (int i = 0; i < SG; ++i) av[i * RPL + e] = w_at(min(m0 + r * GR + i * RPL + e, CM - 1), k);
          }
        }
        [[unroll]] for (int i = 0; i < GR; ++i)
          [[unroll]] for (int j = 0; j < RN; ++j) acc[r * GR + i][j] = fma(av[i], bv[j], acc[r * GR + i][j]);
      }
#endif
    }
#if TEXEL && KREUSE
    // (KREUSE) the TK steps' X values first, then every sum takes its TK
    // products in a row: lavapipe keeps an invocation's sums on the stack
    // (one register per lane), so a sum is loaded and stored once per TK
    // products instead of once per product
    [[unroll]] for (int i = 0; i < (LY == 1 && CM < TM ? (CM + 3) / 4 * 4 : RM); i += 4) {
      vec4 wv[TK];
      [[unroll]] for (int kk = 0; kk < TK; ++kk) wv[kk] = FETCH_W(W_IDX(m0 + i, KTAIL ? min(k0 + kk, CK - 1) : k0 + kk) >> 2);
      [[unroll]] for (int e = 0; e < 4; ++e)
        [[unroll]] for (int f = 0; f < RN / 4; ++f)
          [[unroll]] for (int kk = 0; kk < TK; ++kk) acc4[i + e][f] = fma(vec4(wv[kk][e]), xv[kk][f], acc4[i + e][f]);
    }
#endif
  }
#define ROW_OF(i) (m0 + (i))
#define COL_OF(j) (q0 + (j))
#else
void main() {
  KILN_WG_GUARD;
  const int tx = int(gl_LocalInvocationID.x);
  const int ty = int(gl_LocalInvocationID.y);
  const int q0 = int(KILN_WG.x) * TN;
  const int m0 = int(KILN_WG.y) * TM;
  const int bz = int(KILN_WG.z);
  const int xb = bz * CC * CPLANE;

  AF acc[RM][RN];
  [[unroll]] for (int i = 0; i < RM; ++i)
    [[unroll]] for (int j = 0; j < RN; ++j) acc[i][j] = AF(0.0);

#if SHARED == 1
  const int tid = ty * LX + tx;
  const int nkt = (CK + TK - 1) / TK;
  sh_fetch(tid, m0, q0, xb, 0);
  sh_stash(tid, 0);
  barrier();
  for (int t = 0; t < nkt; ++t) {
#if DB
    const int s = t & 1;
    if (t + 1 < nkt) sh_fetch(tid, m0, q0, xb, (t + 1) * TK); // in flight during the FMAs
#else
    const int s = 0;
#endif
    for (int kk = 0; kk < TK; ++kk) { // not unrolled: RM x RN fmas are enough code
#if VS
      AF4 av[RM / 4], bv[RN / 4];
      [[unroll]] for (int i = 0; i < RM / 4; ++i) av[i] = As4[(s * TK + kk) * (TM / 4) + i * LY + ty];
      [[unroll]] for (int j = 0; j < RN / 4; ++j) bv[j] = Bs4[(s * TK + kk) * (TN / 4) + j * LX + tx];
      [[unroll]] for (int i = 0; i < RM; ++i)
        [[unroll]] for (int j = 0; j < RN; ++j) acc[i][j] = fma(av[i >> 2][i & 3], bv[j >> 2][j & 3], acc[i][j]);
#else
      AF av[RM], bv[RN];
      [[unroll]] for (int i = 0; i < RM; ++i) av[i] = As[(s * TK + kk) * TM + SH_ROW(i)];
      [[unroll]] for (int j = 0; j < RN; ++j) bv[j] = Bs[(s * TK + kk) * TN + SH_COL(j)];
      [[unroll]] for (int i = 0; i < RM; ++i)
        [[unroll]] for (int j = 0; j < RN; ++j) acc[i][j] = fma(av[i], bv[j], acc[i][j]);
#endif
    }
#if DB
    if (t + 1 < nkt) sh_stash(tid, s ^ 1);
    barrier();
#else
    barrier();
    if (t + 1 < nkt) {
      sh_fetch(tid, m0, q0, xb, (t + 1) * TK);
      sh_stash(tid, 0);
      barrier();
    }
#endif
  }
#define ACC(i, j) acc[i][j]
#define ROW_OF(i) (m0 + SH_ROW(i))
#define COL_OF(j) (q0 + SH_COL(j))
#else
  for (int k0 = 0; k0 < CK; k0 += TK) {
    for (int kk = 0; kk < TK; ++kk) { // not unrolled: RM x RN fmas are enough code
      AF av[RM], bv[RN];
      // Thread (tx, ty) owns channels ty + i*LY and positions tx + j*LX.
      [[unroll]] for (int i = 0; i < RM; ++i) av[i] = AF(load_a(m0 + ty + i * LY, k0 + kk));
      [[unroll]] for (int j = 0; j < RN; ++j) bv[j] = AF(load_b(xb, k0 + kk, q0 + tx + j * LX));
      [[unroll]] for (int i = 0; i < RM; ++i)
        [[unroll]] for (int j = 0; j < RN; ++j) acc[i][j] = fma(av[i], bv[j], acc[i][j]);
    }
  }
#define ACC(i, j) acc[i][j]
#define ROW_OF(i) (m0 + ty + (i) * LY)
#define COL_OF(j) (q0 + tx + (j) * LX)
#endif
#endif

  const int yb = bz * CM * CP;
#if TEXEL_Y
  // no crop: grid position q is output position q; RN positions from a
  // multiple of 4 (q0, RN and CP multiples of 4) are RN/4 whole texels,
  // each inside Y when its first position is
  [[unroll]] for (int i = 0; i < RM; ++i) {
    const int gm = ROW_OF(i);
    if (gm >= CM) continue;
#if Y_VEC4 == 2
    [[unroll]] for (int j = 0; j < RN; j += 8) {
      const int q = COL_OF(j);
      if (q >= CQ) continue;
      vec4 o[2];
      [[unroll]] for (int h = 0; h < 2; ++h)
        [[unroll]] for (int e = 0; e < 4; ++e) {
          float v = float(ACC(i, j + 4 * h + e));
#if CHAS_BIAS
          v += BIAS(gm);
#endif
#ifdef KC_EPI4
          KC_EPI4(v, bz, gm, q + 4 * h, e);
#else
          KC_EPI(v, bz, gm, q + 4 * h + e);
#endif
          o[h][e] = v;
        }
      y8[(yb + gm * CP + q) >> 3] = u64vec4(pack64(floatBitsToUint(o[0].xy)), pack64(floatBitsToUint(o[0].zw)),
                                            pack64(floatBitsToUint(o[1].xy)), pack64(floatBitsToUint(o[1].zw)));
    }
#else
    [[unroll]] for (int j = 0; j < RN; j += 4) {
      const int q = COL_OF(j);
      if (q >= CQ) continue;
      vec4 o;
      [[unroll]] for (int e = 0; e < 4; ++e) {
        float v = float(ACC(i, j + e));
#if CHAS_BIAS
        v += BIAS(gm);
#endif
#ifdef KC_EPI4
        KC_EPI4(v, bz, gm, q, e);
#else
        KC_EPI(v, bz, gm, q + e);
#endif
        o[e] = v;
      }
      Y_STORE((yb + gm * CP + q) >> 2, o);
    }
#endif
  }
#else
  [[unroll]] for (int i = 0; i < RM; ++i) {
    const int gm = ROW_OF(i);
    if (gm >= CM) continue;
    [[unroll]] for (int j = 0; j < RN; ++j) {
      const int q = COL_OF(j);
      if (q >= CQ) continue;
#if CCROP
      // grid position -> output (d, h, w); the pitch's extra columns and
      // the grid's tail past the last slice are not outputs
      const int qd = q / (CQ1 * CQ2), qr = q % (CQ1 * CQ2);
      const int qh = qr / CQ2, qw = qr % CQ2;
      if (qd >= CDO || qh >= CHO || qw >= CWO) continue;
      const int p = (qd * CHO + qh) * CWO + qw;
#else
      const int p = q;
#endif
      float v = float(ACC(i, j));
#if CHAS_BIAS
      v += BIAS(gm);
#endif
      KC_EPI(v, bz, gm, p);
      y[yb + gm * CP + p] = TY(v);
    }
  }
#endif
}
