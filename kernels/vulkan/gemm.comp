#version 450
#extension GL_EXT_control_flow_attributes : enable
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
//   TM TN      outputs per work-group (rows x columns)
//   TK         K slice staged in shared memory per step
//   RM RN      outputs per thread (register tile); the work-group is
//              (TN/RN) x (TM/RM) threads, and TM*TK and TK*TN must be
//              multiples of that thread count (each thread loads an equal
//              share of both tiles).
//   SHARED     1: stage A and B tiles in shared memory (the GPU way);
//              0: every thread reads its A rows and B columns straight from
//              the buffers, TK only sets the unrolled K step. On CPU
//              implementations (lavapipe runs a work-group as coroutines,
//              switching at every barrier) 0 is much faster: the caches
//              do the staging.
//   EVEN       1 when M % TM == 0, N % TN == 0 and K % TK == 0: no bounds checks.
// Dispatch: (ceil(N/TN), ceil(M/TM), 1) work-groups.
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
layout(std430, set = 0, binding = BIND_A) restrict readonly buffer BufA { float a[]; };
layout(std430, set = 0, binding = BIND_B) restrict readonly buffer BufB { float b[]; };
layout(std430, set = 0, binding = BIND_C) restrict writeonly buffer BufC { float c[]; };

#if EVEN
#define INSIDE(r, cc, k) true
#else
#define INSIDE(r, cc, k) ((r) < M && (cc) < N && (k) < K)
#endif

// A(r, k) and B(k, n) with zero outside the matrices.
float load_a(int r, int k) {
#if EVEN
  return a[r * K + k];
#else
  return (r < M && k < K) ? a[r * K + k] : 0.0;
#endif
}
float load_b(int k, int n) {
#if !EVEN
  if (k >= K || n >= N) return 0.0;
#endif
#if B_MODE == 1
  return b[n * K + k];
#elif B_MODE == 2
  return b[(((k / PKBS) * PTILES + n / PT) * PKBS + k % PKBS) * PT + n % PT];
#else
  return b[k * N + n];
#endif
}

#if SHARED
// +1 padding keeps column walks off one shared-memory bank.
shared float As[TK][TM + 1];
shared float Bs[TK][TN + 1];
#endif

void main() {
  const int tx = int(gl_LocalInvocationID.x);
  const int ty = int(gl_LocalInvocationID.y);
  const int row0 = int(gl_WorkGroupID.y) * TM;
  const int col0 = int(gl_WorkGroupID.x) * TN;

  float acc[RM][RN];
  [[unroll]] for (int i = 0; i < RM; ++i)
    [[unroll]] for (int j = 0; j < RN; ++j) acc[i][j] = 0.0;

  for (int k0 = 0; k0 < K; k0 += TK) {
#if SHARED
    const int tid = ty * LX + tx;
    // A tile: TM rows x TK columns; B tile: TK rows x TN columns.
    for (int e = tid; e < TM * TK; e += NT) As[e % TK][e / TK] = load_a(row0 + e / TK, k0 + e % TK);
    for (int e = tid; e < TK * TN; e += NT) Bs[e / TN][e % TN] = load_b(k0 + e / TN, col0 + e % TN);
    barrier();
#endif
    [[unroll]] for (int kk = 0; kk < TK; ++kk) {
      float av[RM], bv[RN];
      // Thread (tx, ty) owns rows ty + i*LY and columns tx + j*LX:
      // neighbouring threads read neighbouring words.
#if SHARED
      [[unroll]] for (int i = 0; i < RM; ++i) av[i] = As[kk][ty + i * LY];
      [[unroll]] for (int j = 0; j < RN; ++j) bv[j] = Bs[kk][tx + j * LX];
#else
      [[unroll]] for (int i = 0; i < RM; ++i) av[i] = load_a(row0 + ty + i * LY, k0 + kk);
      [[unroll]] for (int j = 0; j < RN; ++j) bv[j] = load_b(k0 + kk, col0 + tx + j * LX);
#endif
      [[unroll]] for (int i = 0; i < RM; ++i)
        [[unroll]] for (int j = 0; j < RN; ++j) acc[i][j] = fma(av[i], bv[j], acc[i][j]);
    }
#if SHARED
    barrier();
#endif
  }
  [[unroll]] for (int i = 0; i < RM; ++i) {
    int gr = row0 + ty + i * LY;
    [[unroll]] for (int j = 0; j < RN; ++j) {
      int gc = col0 + tx + j * LX;
      if (INSIDE(gr, gc, 0)) c[gr * N + gc] = acc[i][j];
    }
  }
}
