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
// kiln tiled SGEMM: C[M,N] = A[M,K] * B, f32, row-major.
//
// The host inserts its #defines right after the #version line (the values
// below are only defaults, so `glslc -DM=.. -fshader-stage=comp` also works):
//   M N K      problem size (static shapes: bounds checks fold away when
//              the sizes are multiples of the tiles)
//   B_MODE     0: B is [K,N]; 1: B is [N,K] (transB); 2: B is kiln's packed
//              panel layout [1][PNKB][PTILES][PKBS][PT] (lowering/lower_nn_gemm.c:
//              element (k, n) at (((k / PKBS) * PTILES + n / PT) * PKBS + k % PKBS)
//              * PT + n % PT), as the CPU-oriented lowering leaves it
//   BIND_A BIND_B BIND_C  binding of each operand (the kernel's parameter order)
//   HAS_BIAS BIND_BIAS BIAS_SM BIAS_SN BETA  Gemm's C added as BETA * bias
//              [r * BIAS_SM + n * BIAS_SN] (strides 0 where it broadcasts)
//   TM TN      outputs per work-group (rows x columns)
//   TK         K slice staged in shared memory per step
//   RM RN      outputs per thread (register tile); the work-group is
//              (TN/RN) x (TM/RM) threads, and TM*TK and TK*TN must be
//              multiples of that thread count (each thread loads an equal
//              share of both tiles).
//   SHARED     1: stage A and B tiles in shared memory (the GPU way);
//              0: every thread reads its A rows and B columns straight from
//              the buffers, TK only sets the unrolled K step;
//              2: subgroup mode (below), the default: a work-group of 8
//              invocations (TN/RN == 8, RM == TM, TM % 8 == 0, TK even)
//              in which invocation l loads rows l, l+8, ... of A and
//              subgroupBroadcast hands them to the others. Needs subgroup
//              ballot operations, subgroups of 8 or more invocations (with
//              fewer, every invocation loads A itself) and shaderInt64
//              (A64 / B64: pairs of floats read as one 64-bit word).
//   A64 B64    (SHARED 2) 1 when A / B can be read in aligned pairs: A
//              along K (K even), B along N (B_MODE 0: N even; 2: PT and N
//              even) or along K (B_MODE 1: K even).
//   TEXEL      (SHARED 2) 1: A and B are uniform texel buffers of vec4 texels
//              read whole (TK and RN multiples of 4, K too, and N (B_MODE 0)
//              or PT (B_MODE 2)): kiln's tile mode 4; A64 = B64 = 0.
//   A4 B4      (SHARED 1) 1 when A / B are read from the buffers as vec4
//              (f16vec4 for f16 storage) into shared memory: A along K
//              (K % 4 == 0, TK % 4 == 0), B along N (B_MODE 0: N % 4 ==
//              0; 2: PT and N too) or along K (B_MODE 1: K % 4 == 0), and
//              TM*TK/4 (A) / TK*TN/4 (B) multiples of the thread count;
//              else scalar reads (views start 64-byte aligned: session.c)
//   C4         (SHARED 1) 1: C (f32, N % 4 == 0) stored as vec4, each
//              invocation's columns being groups of 4 (VS below); not with
//              a GELU (its rolled loop stores floats)
//   DB         (SHARED 1) 1: two shared buffers, the next K tile read into
//              registers before the current tile's FMAs and stored to the
//              other buffer after them (one barrier a K step); the host
//              sets it where 2 x TK x (TM + TN) floats fit its shared-memory
//              budget (16 KiB, Vulkan's minimum)
//   EVEN       1 when M % TM == 0, N % TN == 0 and K % TK == 0: no bounds checks.
//   HAS_RES BIND_RES  a residual added after the bias: res[r * N + n] (f32,
//              C's shape; a fused residual Add)
//   ACT        1: GELU after the bias and residual, 0.5 v (1 + erf(v / sqrt(2)))
//              (the host inserts prelude.glsl's kiln_erf); 2: its tanh form,
//              0.5 v (1 + tanh(0.79788456 (v + 0.044715 v^3))); 3: Relu;
//              4: Clip to [ACT_LO, ACT_HI] (either undefined: no bound)
//   AF16       (SHARED 0 / 1) 1: the products and sums in float16_t (the
//              shared tiles too), from the compile's --fp16-accumulate on
//              a device with shaderFloat16 (the host adds the float16
//              arithmetic extension); bias, residual and activation in f32
//              from the f16 sums
//   RT_M       1: a range program's GEMM: M is M_A * n + M_B at the dim's
//              run-time value n, read from the dims buffer (int64) at
//              binding BIND_D (the host defines M as kg_m, set first in
//              main), the row tiles are KILN_WG.z, which the device
//              launches n times (n >= ceil(M / TM)); tiles past M return
//              before anything else (the whole work-group); EVEN 0.
//   BATCHED    1: KILN_WG.z is the batch (a MatMul with one B per batch:
//              attention's heads) or the sample (a per-sample program's
//              dim 2): A, B and C start SA, SB, SY elements further each
//              (0: shared by all); the host keeps them multiples of 4
//              where the mode reads vec4s or texels, of 2 for 64-bit pairs
// Dispatch: (ceil(N/TN), ceil(M/TM), BATCH) work-groups; RT_M: (ceil(N/TN), 1, n).
// Bindings (set 0): BIND_A, BIND_B, BIND_C (default 0, 1, 2).
#ifndef M
#define M 256
#endif
#ifndef N
#define N 256
#endif
#ifndef K
#define K 256
#endif
#ifndef B_MODE
#define B_MODE 0
#endif
#ifndef BATCHED
#define BATCHED 0
#endif
#if BATCHED
#define A_OFF (int(KILN_WG.z) * SA)
#define B_OFF (int(KILN_WG.z) * SB)
#define C_OFF (int(KILN_WG.z) * SY)
#else
#define A_OFF 0
#define B_OFF 0
#define C_OFF 0
#endif
#ifndef PT
#define PT 32
#endif
#ifndef PTILES
#define PTILES ((N + PT - 1) / PT)
#endif
#ifndef PKBS
#define PKBS K
#endif
#ifndef SHARED
#define SHARED 1
#endif
#ifndef EVEN
#define EVEN 0
#endif
#ifndef BIND_A
#define BIND_A 0
#endif
#ifndef BIND_B
#define BIND_B 1
#endif
#ifndef BIND_C
#define BIND_C 2
#endif
#ifndef TM
#define TM 64
#endif
#ifndef TN
#define TN 64
#endif
#ifndef TK
#define TK 16
#endif
#ifndef RM
#define RM 4
#endif
#ifndef RN
#define RN 4
#endif

#define LX (TN / RN)
#define LY (TM / RM)
#define NT (LX * LY)

layout(local_size_x = LX, local_size_y = LY, local_size_z = 1) in;
#ifndef A64
#define A64 0
#endif
// the storage type of each operand: float, or float16_t (f16 storage, the
// host's 16-bit storage extensions; sums in f32; no TEXEL, A64 or B64 for it)
#ifndef A_T
#define A_T float
#endif
#ifndef B_T
#define B_T float
#endif
#ifndef C_T
#define C_T float
#endif
#ifndef BIAS_T
#define BIAS_T float
#endif
#ifndef RES_T
#define RES_T float
#endif
#ifndef B64
#define B64 0
#endif
#ifndef TEXEL
#define TEXEL 0
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
#if TEXEL
// (SHARED 2) A and B as uniform texel buffers of vec4 texels (the device
// binds every samplerBuffer as an RGBA32F view): on lavapipe a vec4
// texelFetch is one 16-byte load per lane where a buffer load whose address
// differs between lanes is a loop over the lanes with a stack round trip
// per lane and component (runtime/vulkan/vulkan_texel.c). The main loop
// reads whole texels (TK, RN multiples of 4; K, and N or PT, too: rows
// start on a texel); single values (the K tail) pick one component.
layout(set = 0, binding = BIND_A) uniform samplerBuffer ta;
layout(set = 0, binding = BIND_B) uniform samplerBuffer tb;
#define a(i) texelFetch(ta, (A_OFF + (i)) >> 2)[(A_OFF + (i)) & 3]
#define b(i) texelFetch(tb, (B_OFF + (i)) >> 2)[(B_OFF + (i)) & 3]
#else
layout(std430, set = 0, binding = BIND_A) restrict readonly buffer BufA { A_T a_[]; };
layout(std430, set = 0, binding = BIND_B) restrict readonly buffer BufB { B_T b_[]; };
#define a(i) float(a_[A_OFF + (i)])
#define b(i) float(b_[B_OFF + (i)])
#endif
#if SHARED == 2 && A64
layout(std430, set = 0, binding = BIND_A) restrict readonly buffer BufA2 { uint64_t a2[]; };
#endif
#if SHARED == 2 && B64
layout(std430, set = 0, binding = BIND_B) restrict readonly buffer BufB2 { uint64_t b2[]; };
#endif
layout(std430, set = 0, binding = BIND_C) restrict writeonly buffer BufC { C_T c[]; };
#ifndef HAS_BIAS
#define HAS_BIAS 0
#endif
#if HAS_BIAS
// Gemm's C: c = A * B + BETA * bias[r * BIAS_SM + n * BIAS_SN]
layout(std430, set = 0, binding = BIND_BIAS) restrict readonly buffer BufBias { BIAS_T bias_[]; };
#define BIAS(r, n) (BETA * float(bias_[(r) * BIAS_SM + (n) * BIAS_SN]))
#else
#define BIAS(r, n) 0.0
#endif
#ifndef HAS_RES
#define HAS_RES 0
#endif
#if HAS_RES
layout(std430, set = 0, binding = BIND_RES) restrict readonly buffer BufRes { RES_T res_[]; };
#define PLUS_RES(v, r, n) ((v) + float(res_[(r) * N + (n)]))
#else
#define PLUS_RES(v, r, n) (v)
#endif
#ifndef ACT
#define ACT 0
#endif
#if ACT == 1
#define ACTF(v) ((0.5 * (v)) * (1.0 + kiln_erf((v) * 0.70710678118654752)))
#elif ACT == 2
#define ACTF(v) ((0.5 * (v)) * (1.0 + tanh(0.79788456080286536 * ((v) + ((0.044715 * (v)) * (v)) * (v)))))
#elif ACT == 3
#define ACTF(v) max(v, 0.0)
#elif ACT == 4 && defined(ACT_LO) && defined(ACT_HI)
#define ACTF(v) min(max(v, ACT_LO), ACT_HI)
#elif ACT == 4 && defined(ACT_LO)
#define ACTF(v) max(v, ACT_LO)
#elif ACT == 4 && defined(ACT_HI)
#define ACTF(v) min(v, ACT_HI)
#else
#define ACTF(v) (v)
#endif
// A GELU is applied in a rolled loop over the invocation's outputs, read
// from a private array of the sums with bias and residual: unrolled, its
// TM x RN copies of kiln_erf took lavapipe's LLVM seconds a shader (the
// loop's RM * RN trips count against the device's loop limit)
#define ROLLED_ACT (ACT == 1 || ACT == 2)
#ifndef RT_M
#define RT_M 0
#endif
#if RT_M
#define TM_ROWS TM // the rows of a tile a work-group reads (past M: row M - 1)
layout(std430, set = 0, binding = BIND_D) restrict readonly buffer BufDims { int64_t dims_[]; };
int kg_m; // M at this run (the host's #define M kg_m)
// the row tile of this work-group; false (return) past M
bool rt_m_rows(out int row0) {
  kg_m = int(dims_[0]) * M_A + M_B;
  row0 = int(KILN_WG.z) * TM;
  return row0 < kg_m;
}
#endif
#ifndef TM_ROWS
#define TM_ROWS (M < TM ? M : TM)
#endif

#if EVEN
#define INSIDE(r, cc, k) true
#else
#define INSIDE(r, cc, k) ((r) < M && (cc) < N && (k) < K)
#endif

// A(r, k) and B(k, n) with zero outside the matrices.
float load_a(int r, int k) {
#if EVEN
  return a(r * K + k);
#else
  return (r < M && k < K) ? a(r * K + k) : 0.0;
#endif
}
float load_b(int k, int n) {
#if !EVEN
  if (k >= K || n >= N) return 0.0;
#endif
#if B_MODE == 1
  return b(n * K + k);
#elif B_MODE == 2
  return b((((k / PKBS) * PTILES + n / PT) * PKBS + k % PKBS) * PT + n % PT);
#else
  return b(k * N + n);
#endif
}

#if SHARED == 1
// ---- shared-memory mode (SHARED 1, the GPU rules) ---------------------------
// A work-group of LX x LY invocations computes TM x TN outputs, RM x RN an
// invocation, from K tiles of TK staged in shared memory: A stored
// transposed (As[k][m]) so that the inner loop reads rows of A and columns
// of B contiguously. Each invocation reads its share of the next tile into
// registers (LA floats of A, LB of B: vec4 where A4 / B4) while the current
// one is multiplied, then stores it to the other buffer (DB), so a K step
// has one barrier and its global reads overlap the FMAs.
#ifndef A4
#define A4 0
#endif
#ifndef B4
#define B4 0
#endif
#ifndef DB
#define DB 0
#endif
#define NBUF (DB + 1)
#define LA (TM * TK / NT) // floats of A an invocation reads a K tile
#define LB (TK * TN / NT)
// VS: register tiles in groups of 4 rows / columns, read from shared memory
// as vec4 (invocation (tx, ty) owns rows (i/4 * LY + ty) * 4 + i%4 and the
// columns alike: a warp reads consecutive vec4s); else rows ty + i*LY and
// columns tx + j*LX (consecutive words)
#define VS (RM % 4 == 0 && RN % 4 == 0 && TM % 4 == 0 && TN % 4 == 0)
#if VS
shared AF4 As4[NBUF * TK * (TM / 4)];
shared AF4 Bs4[NBUF * TK * (TN / 4)];
#define AS_ST(s, k, m, v) As4[((s) * TK + (k)) * (TM / 4) + ((m) >> 2)][(m) & 3] = AF(v)
#define BS_ST(s, k, n, v) Bs4[((s) * TK + (k)) * (TN / 4) + ((n) >> 2)][(n) & 3] = AF(v)
#define ROW_OF(i) ((((i) >> 2) * LY + ty) * 4 + ((i) & 3))
#define COL_OF(j) ((((j) >> 2) * LX + tx) * 4 + ((j) & 3))
#else
shared AF As[NBUF * TK * TM];
shared AF Bs[NBUF * TK * TN];
#define AS_ST(s, k, m, v) As[((s) * TK + (k)) * TM + (m)] = AF(v)
#define BS_ST(s, k, n, v) Bs[((s) * TK + (k)) * TN + (n)] = AF(v)
#define ROW_OF(i) (ty + (i) * LY)
#define COL_OF(j) (tx + (j) * LX)
#endif
#if A4 || B4
#ifndef A4_T
#define A4_T vec4
#endif
#ifndef B4_T
#define B4_T vec4
#endif
#endif
#if A4
layout(std430, set = 0, binding = BIND_A) restrict readonly buffer BufA4 { A4_T a4_[]; };
vec4 ra[LA / 4];
#else
float ra[LA];
#endif
#ifndef C4
#define C4 0
#endif
#if C4 && VS && !ROLLED_ACT
layout(std430, set = 0, binding = BIND_C) restrict writeonly buffer BufC4 { vec4 c4_[]; };
#endif
#if B4
layout(std430, set = 0, binding = BIND_B) restrict readonly buffer BufB4 { B4_T b4_[]; };
vec4 rb[LB / 4];
#else
float rb[LB];
#endif
// vec4 element e of the invocation's share: idx = tid + e * NT over the
// tile's vec4s (scalars: its floats), consecutive invocations reading
// consecutive addresses
void sh_fetch(int tid, int row0, int col0, int k0) {
#if A4
  [[unroll]] for (int e = 0; e < LA / 4; ++e) {
    const int idx = tid + e * NT, r = row0 + idx / (TK / 4), k = k0 + (idx % (TK / 4)) * 4;
#if EVEN
    ra[e] = vec4(a4_[(A_OFF + r * K + k) >> 2]);
#else
    ra[e] = (r < M && k < K) ? vec4(a4_[(A_OFF + r * K + k) >> 2]) : vec4(0.0);
#endif
  }
#else
  [[unroll]] for (int e = 0; e < LA; ++e) {
    const int idx = tid + e * NT;
    ra[e] = load_a(row0 + idx / TK, k0 + idx % TK);
  }
#endif
#if B4 && B_MODE == 1
  [[unroll]] for (int e = 0; e < LB / 4; ++e) { // B [N,K]: vec4 along K
    const int idx = tid + e * NT, n = col0 + idx / (TK / 4), k = k0 + (idx % (TK / 4)) * 4;
#if EVEN
    rb[e] = vec4(b4_[(B_OFF + n * K + k) >> 2]);
#else
    rb[e] = (n < N && k < K) ? vec4(b4_[(B_OFF + n * K + k) >> 2]) : vec4(0.0);
#endif
  }
#elif B4
  [[unroll]] for (int e = 0; e < LB / 4; ++e) { // vec4 along N
    const int idx = tid + e * NT, k = k0 + idx / (TN / 4), n = col0 + (idx % (TN / 4)) * 4;
#if B_MODE == 2
    const int at = (((k / PKBS) * PTILES + n / PT) * PKBS + k % PKBS) * PT + n % PT;
#else
    const int at = k * N + n;
#endif
#if EVEN
    rb[e] = vec4(b4_[(B_OFF + at) >> 2]);
#else
    rb[e] = (k < K && n < N) ? vec4(b4_[(B_OFF + at) >> 2]) : vec4(0.0);
#endif
  }
#elif B_MODE == 1
  [[unroll]] for (int e = 0; e < LB; ++e) { // along K, as B's rows lie
    const int idx = tid + e * NT;
    rb[e] = load_b(k0 + idx % TK, col0 + idx / TK);
  }
#else
  [[unroll]] for (int e = 0; e < LB; ++e) {
    const int idx = tid + e * NT;
    rb[e] = load_b(k0 + idx / TN, col0 + idx % TN);
  }
#endif
}
// the registers sh_fetch filled, into shared buffer s
void sh_stash(int tid, int s) {
#if A4
  [[unroll]] for (int e = 0; e < LA / 4; ++e) {
    const int idx = tid + e * NT, m = idx / (TK / 4), k = (idx % (TK / 4)) * 4;
    [[unroll]] for (int q = 0; q < 4; ++q) AS_ST(s, k + q, m, ra[e][q]);
  }
#else
  [[unroll]] for (int e = 0; e < LA; ++e) {
    const int idx = tid + e * NT;
    AS_ST(s, idx % TK, idx / TK, ra[e]);
  }
#endif
#if B4 && B_MODE == 1
  [[unroll]] for (int e = 0; e < LB / 4; ++e) {
    const int idx = tid + e * NT, n = idx / (TK / 4), k = (idx % (TK / 4)) * 4;
    [[unroll]] for (int q = 0; q < 4; ++q) BS_ST(s, k + q, n, rb[e][q]);
  }
#elif B4 && VS
  [[unroll]] for (int e = 0; e < LB / 4; ++e) {
    const int idx = tid + e * NT;
    Bs4[(s * TK + idx / (TN / 4)) * (TN / 4) + idx % (TN / 4)] = AF4(rb[e]);
  }
#elif B4
  [[unroll]] for (int e = 0; e < LB / 4; ++e) {
    const int idx = tid + e * NT, k = idx / (TN / 4), n = (idx % (TN / 4)) * 4;
    [[unroll]] for (int q = 0; q < 4; ++q) BS_ST(s, k, n + q, rb[e][q]);
  }
#elif B_MODE == 1
  [[unroll]] for (int e = 0; e < LB; ++e) {
    const int idx = tid + e * NT;
    BS_ST(s, idx % TK, idx / TK, rb[e]);
  }
#else
  [[unroll]] for (int e = 0; e < LB; ++e) {
    const int idx = tid + e * NT;
    BS_ST(s, idx / TN, idx % TN, rb[e]);
  }
#endif
}
#endif
#ifndef ROW_OF // (SHARED 0) rows ty + i*LY, columns tx + j*LX
#define ROW_OF(i) (ty + (i) * LY)
#define COL_OF(j) (tx + (j) * LX)
#endif

#if SHARED == 2
// ---- subgroup mode (SHARED 2) ----------------------------------------------
// A work-group is 8 invocations (one subgroup where subgroups have 8 or
// more); invocation l computes all TM rows of columns col0 + l*RN .. + RN-1.
// Why: lavapipe runs the 8 invocations as the lanes of one SIMD register and
// turns every load whose address differs between lanes into a loop over the
// lanes (a scalar load and a vector rebuilt through memory per lane and per
// component), so loads, not arithmetic, set the speed. Here invocation l
// loads rows l, l+8, ... of A and subgroupBroadcast (one register shuffle)
// hands each value to the others: TM/8 + RN loads per K step for TM*RN
// fmas, and 64-bit words (A64/B64) halve the loads again.
#define SG 8
float a_at(int r, int k) { return a(r * K + k); }
float b_at(int k, int n) {
#if B_MODE == 1
  return b(n * K + k);
#elif B_MODE == 2
  return b((((k / PKBS) * PTILES + n / PT) * PKBS + k % PKBS) * PT + n % PT);
#else
  return b(k * N + n);
#endif
}
#if A64 || B64  // (else no 64-bit type: devices without shaderInt64)
vec2 u64f(uint64_t v) { return vec2(uintBitsToFloat(uint(v)), uintBitsToFloat(uint(v >> 32))); }
#endif
// A(r, k), A(r, k + 1); k even, k + 1 < K, r < M
vec2 a_pair(int r, int k) {
#if A64
  return u64f(a2[(A_OFF + r * K + k) >> 1]);
#else
  return vec2(a_at(r, k), a_at(r, k + 1));
#endif
}
// B(k, n), B(k + 1, n) (B_MODE 1, n < N) or B(k, n), B(k, n + 1) (n even;
// the pair's start is clamped into B here, so columns past N read real
// values that are never stored)
vec2 b_pair(int k, int n) {
#if B_MODE == 1
#if B64
  return u64f(b2[(B_OFF + n * K + k) >> 1]);
#else
  return vec2(b_at(k, n), b_at(k + 1, n));
#endif
#elif B64
  const int nn = min(n, N - 2);
#if B_MODE == 2
  return u64f(b2[(B_OFF + (((k / PKBS) * PTILES + nn / PT) * PKBS + k % PKBS) * PT + nn % PT) >> 1]);
#else
  return u64f(b2[(B_OFF + k * N + nn) >> 1]);
#endif
#else
  return vec2(b_at(k, min(n, N - 1)), b_at(k, min(n + 1, N - 1)));
#endif
}
// av[0..7] = the value X of invocations 0..7 (LOADI: the same read for
// row group index i, where subgroups are smaller than 8)
#define BCAST8(av, X, LOADI)                                            \
  if (gl_SubgroupSize >= SG) {                                          \
    av[0] = subgroupBroadcast(X, 0);                                    \
    av[1] = subgroupBroadcast(X, 1);                                    \
    av[2] = subgroupBroadcast(X, 2);                                    \
    av[3] = subgroupBroadcast(X, 3);                                    \
    av[4] = subgroupBroadcast(X, 4);                                    \
    av[5] = subgroupBroadcast(X, 5);                                    \
    av[6] = subgroupBroadcast(X, 6);                                    \
    av[7] = subgroupBroadcast(X, 7);                                    \
  } else {                                                              \
    [[unroll]] for (int i = 0; i < SG; ++i) av[i] = LOADI;              \
  }
// acc += A(rows, k) x B(k, columns) with A's value of row group r being
// X (this invocation's row), B's of column j BJ
#define SG_STEP(X, LOADI, BJ)                                           \
  [[unroll]] for (int r = 0; r < TM / SG; ++r) {                        \
    float av[SG];                                                       \
    BCAST8(av, X, LOADI)                                                \
    [[unroll]] for (int i = 0; i < SG; ++i)                             \
      [[unroll]] for (int j = 0; j < RN; ++j)                           \
        ACC(r * SG + i, j) = fma(av[i], BJ, ACC(r * SG + i, j));        \
  }

void main() {
  KILN_WG_GUARD;
  const int lane = gl_SubgroupSize >= SG ? int(gl_SubgroupInvocationID) : int(gl_LocalInvocationID.x);
  // (one row tile: a constant, so the rows past M fold away)
#if RT_M
  int row0;
  if (!rt_m_rows(row0)) return;
#else
  const int row0 = M <= TM ? 0 : int(KILN_WG.y) * TM;
#endif
  const int col0 = int(KILN_WG.x) * TN + lane * RN;
#if TEXEL
  // vec4s of columns, used as read: arrays of floats made shaderc's
  // optimizer several times slower
  vec4 acc4[TM][RN / 4];
  [[unroll]] for (int i = 0; i < TM; ++i)
    [[unroll]] for (int f = 0; f < RN / 4; ++f) acc4[i][f] = vec4(0.0);
#define ACC(i, j) acc4[i][(j) >> 2][(j) & 3]
#else
  float acc[TM][RN];
  [[unroll]] for (int i = 0; i < TM; ++i)
    [[unroll]] for (int j = 0; j < RN; ++j) acc[i][j] = 0.0;
#define ACC(i, j) acc[i][j]
#endif
  int myrow[TM / SG];
  [[unroll]] for (int r = 0; r < TM / SG; ++r) myrow[r] = min(row0 + r * SG + lane, M - 1);
#define ROWI min(row0 + r * SG + i, M - 1)
  const int KMAIN = K - K % TK;
  for (int k0 = 0; k0 < KMAIN; k0 += TK) {
#if TEXEL
    // every invocation reads all TM rows of A itself (the same texels in
    // all lanes; rows past M read row M - 1, never stored): on lavapipe a
    // texelFetch costs about what one subgroupBroadcast does (a loop over
    // the lanes per value), so TM / 4 fetches per K step where the
    // broadcasts were TM
    vec4 bv4[TK][RN / 4];
#if B_MODE == 1
    [[unroll]] for (int j = 0; j < RN; ++j)
      [[unroll]] for (int kk = 0; kk < TK; kk += 4) {
        const vec4 v = texelFetch(tb, (B_OFF + min(col0 + j, N - 1) * K + k0 + kk) >> 2);
        [[unroll]] for (int e = 0; e < 4; ++e) bv4[kk + e][j >> 2][j & 3] = v[e];
      }
#else
    // columns past N read other values (or zeros past the buffer), never stored
    [[unroll]] for (int kk = 0; kk < TK; ++kk)
      [[unroll]] for (int j = 0; j < RN; j += 4) {
        const int k = k0 + kk, n = col0 + j;
#if B_MODE == 2
        bv4[kk][j >> 2] = texelFetch(tb, (B_OFF + (((k / PKBS) * PTILES + n / PT) * PKBS + k % PKBS) * PT + n % PT) >> 2);
#else
        bv4[kk][j >> 2] = texelFetch(tb, (B_OFF + k * N + n) >> 2);
#endif
      }
#endif
    // A's values used as read (no array of them: shaderc's optimizer);
    // where M <= TM (one row tile) only its M rows (the classifier's M = 1)
    [[unroll]] for (int kk = 0; kk < TK; kk += 4)
      [[unroll]] for (int i = 0; i < TM_ROWS; ++i) {
        const vec4 v = texelFetch(ta, (A_OFF + min(row0 + i, M - 1) * K + k0 + kk) >> 2);
        [[unroll]] for (int e = 0; e < 4; ++e)
          [[unroll]] for (int f = 0; f < RN / 4; ++f) acc4[i][f] = fma(vec4(v[e]), bv4[kk + e][f], acc4[i][f]);
      }
#else
    float ar[TM / SG][TK];
    [[unroll]] for (int r = 0; r < TM / SG; ++r)
      [[unroll]] for (int kk = 0; kk < TK; kk += 2) {
        const vec2 v = a_pair(myrow[r], k0 + kk);
        ar[r][kk] = v.x;
        ar[r][kk + 1] = v.y;
      }
    float bv[TK][RN];
    [[unroll]] for (int kk = 0; kk < TK; kk += 2)
      [[unroll]] for (int j = 0; j < RN; j += 2) {
#if B_MODE == 1
        const vec2 v0 = b_pair(k0 + kk, min(col0 + j, N - 1)), v1 = b_pair(k0 + kk, min(col0 + j + 1, N - 1));
        bv[kk][j] = v0.x;
        bv[kk + 1][j] = v0.y;
        bv[kk][j + 1] = v1.x;
        bv[kk + 1][j + 1] = v1.y;
#else
        const vec2 v0 = b_pair(k0 + kk, col0 + j), v1 = b_pair(k0 + kk + 1, col0 + j);
        bv[kk][j] = v0.x;
        bv[kk][j + 1] = v0.y;
        bv[kk + 1][j] = v1.x;
        bv[kk + 1][j + 1] = v1.y;
#endif
      }
    [[unroll]] for (int kk = 0; kk < TK; ++kk) { SG_STEP(ar[r][kk], a_at(ROWI, k0 + kk), bv[kk][j]) }
#endif
  }
  // the last K % TK steps, one value at a time
  for (int k = KMAIN; k < K; ++k) {
    float ar[TM / SG];
    [[unroll]] for (int r = 0; r < TM / SG; ++r) ar[r] = a_at(myrow[r], k);
    float bv[RN];
    [[unroll]] for (int j = 0; j < RN; ++j) bv[j] = b_at(k, min(col0 + j, N - 1));
    SG_STEP(ar[r], a_at(ROWI, k), bv[j])
  }
#if ROLLED_ACT
  float pre[TM * RN];
  [[unroll]] for (int i = 0; i < TM; ++i)
    [[unroll]] for (int j = 0; j < RN; ++j) {
      const int gr = row0 + i, gc = col0 + j;
      float v = 0.0;
      if (INSIDE(gr, gc, 0)) v = PLUS_RES(ACC(i, j) + BIAS(gr, gc), gr, gc);
      pre[i * RN + j] = v;
    }
  [[dont_unroll]] for (int e = 0; e < TM * RN; ++e) {
    const int gr = row0 + e / RN, gc = col0 + e % RN;
    if (INSIDE(gr, gc, 0)) c[C_OFF + gr * N + gc] = C_T(ACTF(pre[e]));
  }
#else
  [[unroll]] for (int i = 0; i < TM; ++i) {
    const int gr = row0 + i;
    [[unroll]] for (int j = 0; j < RN; ++j) {
      const int gc = col0 + j;
      if (INSIDE(gr, gc, 0)) c[C_OFF + gr * N + gc] = C_T(ACTF(PLUS_RES(ACC(i, j) + BIAS(gr, gc), gr, gc)));
    }
  }
#endif
}
#else
void main() {
  KILN_WG_GUARD;
  const int tx = int(gl_LocalInvocationID.x);
  const int ty = int(gl_LocalInvocationID.y);
#if RT_M
  int row0;
  if (!rt_m_rows(row0)) return;
#else
  const int row0 = int(KILN_WG.y) * TM;
#endif
  const int col0 = int(KILN_WG.x) * TN;

  AF acc[RM][RN];
  [[unroll]] for (int i = 0; i < RM; ++i)
    [[unroll]] for (int j = 0; j < RN; ++j) acc[i][j] = AF(0.0);

#if SHARED == 1
  const int tid = ty * LX + tx;
  const int nkt = (K + TK - 1) / TK;
  sh_fetch(tid, row0, col0, 0);
  sh_stash(tid, 0);
  barrier();
  for (int t = 0; t < nkt; ++t) {
#if DB
    const int s = t & 1;
    if (t + 1 < nkt) sh_fetch(tid, row0, col0, (t + 1) * TK); // in flight during the FMAs
#else
    const int s = 0;
#endif
    [[unroll]] for (int kk = 0; kk < TK; ++kk) {
#if VS
      AF4 av[RM / 4], bv[RN / 4];
      [[unroll]] for (int i = 0; i < RM / 4; ++i) av[i] = As4[(s * TK + kk) * (TM / 4) + i * LY + ty];
      [[unroll]] for (int j = 0; j < RN / 4; ++j) bv[j] = Bs4[(s * TK + kk) * (TN / 4) + j * LX + tx];
      [[unroll]] for (int i = 0; i < RM; ++i)
        [[unroll]] for (int j = 0; j < RN; ++j) acc[i][j] = fma(av[i >> 2][i & 3], bv[j >> 2][j & 3], acc[i][j]);
#else
      AF av[RM], bv[RN];
      [[unroll]] for (int i = 0; i < RM; ++i) av[i] = As[(s * TK + kk) * TM + ROW_OF(i)];
      [[unroll]] for (int j = 0; j < RN; ++j) bv[j] = Bs[(s * TK + kk) * TN + COL_OF(j)];
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
      sh_fetch(tid, row0, col0, (t + 1) * TK);
      sh_stash(tid, 0);
      barrier();
    }
#endif
  }
#else
  for (int k0 = 0; k0 < K; k0 += TK) {
    [[unroll]] for (int kk = 0; kk < TK; ++kk) {
      AF av[RM], bv[RN];
      // Thread (tx, ty) owns rows ty + i*LY and columns tx + j*LX:
      // neighbouring threads read neighbouring words.
      [[unroll]] for (int i = 0; i < RM; ++i) av[i] = AF(load_a(row0 + ROW_OF(i), k0 + kk));
      [[unroll]] for (int j = 0; j < RN; ++j) bv[j] = AF(load_b(k0 + kk, col0 + COL_OF(j)));
      [[unroll]] for (int i = 0; i < RM; ++i)
        [[unroll]] for (int j = 0; j < RN; ++j) acc[i][j] = fma(av[i], bv[j], acc[i][j]);
    }
  }
#endif
#if ROLLED_ACT
  float pre[RM * RN];
  [[unroll]] for (int i = 0; i < RM; ++i)
    [[unroll]] for (int j = 0; j < RN; ++j) {
      const int gr = row0 + ROW_OF(i), gc = col0 + COL_OF(j);
      float v = 0.0;
      if (INSIDE(gr, gc, 0)) v = PLUS_RES(float(acc[i][j]) + BIAS(gr, gc), gr, gc);
      pre[i * RN + j] = v;
    }
  [[dont_unroll]] for (int e = 0; e < RM * RN; ++e) {
    const int gr = row0 + ROW_OF(e / RN), gc = col0 + COL_OF(e % RN);
    if (INSIDE(gr, gc, 0)) c[C_OFF + gr * N + gc] = C_T(ACTF(pre[e]));
  }
#elif SHARED == 1 && C4 && VS
  // 4 columns from a multiple of 4 (N too): all inside or all outside
  [[unroll]] for (int i = 0; i < RM; ++i) {
    const int gr = row0 + ROW_OF(i);
    [[unroll]] for (int j = 0; j < RN; j += 4) {
      const int gc = col0 + COL_OF(j);
      if (INSIDE(gr, gc, 0)) {
        vec4 v;
        [[unroll]] for (int e = 0; e < 4; ++e)
          v[e] = ACTF(PLUS_RES(float(acc[i][j + e]) + BIAS(gr, gc + e), gr, gc + e));
        c4_[(C_OFF + gr * N + gc) >> 2] = v;
      }
    }
  }
#else
  [[unroll]] for (int i = 0; i < RM; ++i) {
    const int gr = row0 + ROW_OF(i);
    [[unroll]] for (int j = 0; j < RN; ++j) {
      const int gc = col0 + COL_OF(j);
      if (INSIDE(gr, gc, 0)) c[C_OFF + gr * N + gc] = C_T(ACTF(PLUS_RES(float(acc[i][j]) + BIAS(gr, gc), gr, gc)));
    }
  }
#endif
}
#endif
