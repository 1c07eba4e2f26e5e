#include <stdint.h>
#include <string.h>
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#pragma GCC diagnostic ignored "-Wpsabi"
#define KILN_INLINE static inline __attribute__((always_inline, unused))

/* f16 storage: _Float16 where the compiler has it (plain conversions, so
   loops vectorize to vcvtph2ps/vcvtps2ph), else uint16_t bits with the
   bit-exact software conversion kiln uses. Same 2-byte IEEE layout. */
#if defined(__FLT16_MANT_DIG__) && !defined(KILN_SOFT_F16)
typedef _Float16 kiln_f16;
KILN_INLINE float kiln_h2f(kiln_f16 h) { return (float)h; }
KILN_INLINE kiln_f16 kiln_f2h(float x) { return (kiln_f16)x; }
#else
typedef uint16_t kiln_f16;
KILN_INLINE float kiln_h2f(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, b;
  if (e == 0) {
    if (m == 0) b = sign;
    else { int k = -1; do { ++k; m <<= 1; } while (!(m & 0x400u));
           b = sign | ((uint32_t)(127 - 15 - k) << 23) | ((m & 0x3ffu) << 13); }
  } else if (e == 31) b = sign | 0x7f800000u | (m << 13);
  else b = sign | ((e + 127 - 15) << 23) | (m << 13);
  float f; memcpy(&f, &b, 4); return f;
}
KILN_INLINE uint16_t kiln_f2h(float f) {
  uint32_t x; memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, e8 = (x >> 23) & 0xffu, m = x & 0x7fffffu;
  if (e8 == 0xff) return (uint16_t)(sign | 0x7c00u | (m ? 0x200u | (m >> 13) : 0));
  int32_t e = (int32_t)e8 - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    m |= 0x800000u;
    uint32_t sh = (uint32_t)(14 - e), hv = m >> sh, rem = m & ((1u << sh) - 1), mid = 1u << (sh - 1);
    if (rem > mid || (rem == mid && (hv & 1))) ++hv;
    return (uint16_t)(sign | hv);
  }
  uint32_t hv = ((uint32_t)e << 10) | (m >> 13), rem = m & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (hv & 1))) ++hv;
  return (uint16_t)(sign | hv);
}
#endif
KILN_INLINE float kiln_hround(float x) { return kiln_h2f(kiln_f2h(x)); }

/* NaN-propagating min/max (numpy semantics, like the reference). */
KILN_INLINE float kiln_fminf(float a, float b) { return (a < b || a != a) ? a : b; }
KILN_INLINE float kiln_fmaxf(float a, float b) { return (a > b || a != a) ? a : b; }
KILN_INLINE int64_t kiln_imin(int64_t a, int64_t b) { return a < b ? a : b; }
KILN_INLINE int64_t kiln_imax(int64_t a, int64_t b) { return a > b ? a : b; }
/* floor division / modulo for any signs; a zero divisor gives 0. */
KILN_INLINE int64_t kiln_floordiv(int64_t a, int64_t b) {
  if (b == 0) return 0;
  if (b == -1) return (int64_t)(0 - (uint64_t)a);
  int64_t q = a / b;
  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
KILN_INLINE int64_t kiln_floormod(int64_t a, int64_t b) {
  if (b == 0 || b == -1) return 0;
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
KILN_INLINE float kiln_ffloordiv(float a, float b) { return floorf(a / b); }
KILN_INLINE float kiln_ffloormod(float a, float b) {
  float r = fmodf(a, b);
  return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
}
/* C division; x / 0 = 0 and x / -1 wraps, like the reference. */
KILN_INLINE int32_t kiln_idiv32(int32_t a, int32_t b) {
  return b == 0 ? 0 : b == -1 ? (int32_t)(0u - (uint32_t)a) : a / b;
}
KILN_INLINE int64_t kiln_idiv64(int64_t a, int64_t b) {
  return b == 0 ? 0 : b == -1 ? (int64_t)(0 - (uint64_t)a) : a / b;
}
KILN_INLINE int64_t kiln_iabs(int64_t a) { return a < 0 ? (int64_t)(0 - (uint64_t)a) : a; }
/* float -> int64: truncate toward zero, saturate, NaN -> 0. */
KILN_INLINE int64_t kiln_f2i(float x) {
  return x != x ? 0 : x >= 9223372036854775808.0f ? INT64_MAX
       : x <= -9223372036854775808.0f ? INT64_MIN : (int64_t)x;
}
/* The f64 forms of the float helpers, computed in double. */
KILN_INLINE double kiln_fmind(double a, double b) { return (a < b || a != a) ? a : b; }
KILN_INLINE double kiln_fmaxd(double a, double b) { return (a > b || a != a) ? a : b; }
KILN_INLINE double kiln_dfloordiv(double a, double b) { return floor(a / b); }
KILN_INLINE double kiln_dfloormod(double a, double b) {
  double r = fmod(a, b);
  return (r != 0.0 && ((r < 0.0) != (b < 0.0))) ? r + b : r;
}
KILN_INLINE int64_t kiln_d2i(double x) {
  return x != x ? 0 : x >= 9223372036854775808.0 ? INT64_MAX
       : x <= -9223372036854775808.0 ? INT64_MIN : (int64_t)x;
}
KILN_INLINE double kiln_sigmoidd(double v) {
  if (v >= 0.0) return 1.0 / (1.0 + exp(-v));
  double e = exp(v);
  return e / (1.0 + e);
}

/* GCC vector extensions for VECTORIZED loops; unaligned loads/stores. */
#define KILN_VDEF(W, BYTES)                                                      \
  typedef float kiln_v##W##f __attribute__((vector_size(BYTES), aligned(4)));  \
  typedef int32_t kiln_v##W##i __attribute__((vector_size(BYTES)));            \
  KILN_INLINE kiln_v##W##i kiln_vmask##W(int c) { return (kiln_v##W##i){0} - (c != 0); } \
  KILN_INLINE kiln_v##W##f kiln_vsel##W(kiln_v##W##i m, kiln_v##W##f a, kiln_v##W##f b) { \
    return (kiln_v##W##f)((m & (kiln_v##W##i)a) | (~m & (kiln_v##W##i)b));     \
  }                                                                             \
  KILN_INLINE kiln_v##W##f kiln_vmax##W(kiln_v##W##f a, kiln_v##W##f b) {      \
    return kiln_vsel##W((a > b) | (a != a), a, b);                              \
  }                                                                             \
  KILN_INLINE kiln_v##W##f kiln_vmin##W(kiln_v##W##f a, kiln_v##W##f b) {      \
    return kiln_vsel##W((a < b) | (a != a), a, b);                              \
  }                                                                             \
  KILN_INLINE kiln_v##W##f kiln_vabs##W(kiln_v##W##f a) {                      \
    return (kiln_v##W##f)((kiln_v##W##i)a & 0x7fffffff);                        \
  }
KILN_VDEF(1, 4)
KILN_VDEF(4, 16)
KILN_VDEF(8, 32)
KILN_VDEF(16, 64)
/* f16 <-> f32 vectors: one vcvtph2ps / vcvtps2ph with F16C (_Float16),
   lane by lane with the software conversion otherwise. */
#if defined(__FLT16_MANT_DIG__) && !defined(KILN_SOFT_F16)
#define KILN_VHDEF(W, BYTES)                                                      \
  typedef kiln_f16 kiln_v##W##h __attribute__((vector_size(BYTES), aligned(2))); \
  KILN_INLINE kiln_v##W##f kiln_vh2f##W(const kiln_f16* p) {                    \
    return __builtin_convertvector(*(const kiln_v##W##h*)p, kiln_v##W##f);      \
  }                                                                             \
  KILN_INLINE void kiln_vf2h##W(kiln_f16* p, kiln_v##W##f v) {                 \
    *(kiln_v##W##h*)p = __builtin_convertvector(v, kiln_v##W##h);              \
  }                                                                             \
  KILN_INLINE kiln_v##W##f kiln_vsplath##W(const kiln_f16* p) {                 \
    kiln_v##W##h h; /* a broadcast (vpbroadcastw), no f16 arithmetic */        \
    for (int l = 0; l < W; ++l) h[l] = *p;                                      \
    return __builtin_convertvector(h, kiln_v##W##f);                            \
  }
#else
#define KILN_VHDEF(W, BYTES)                                                      \
  KILN_INLINE kiln_v##W##f kiln_vh2f##W(const kiln_f16* p) {                    \
    kiln_v##W##f r;                                                             \
    for (int l = 0; l < W; ++l) r[l] = kiln_h2f(p[l]);                          \
    return r;                                                                   \
  }                                                                             \
  KILN_INLINE void kiln_vf2h##W(kiln_f16* p, kiln_v##W##f v) {                 \
    for (int l = 0; l < W; ++l) p[l] = kiln_f2h(v[l]);                          \
  }                                                                             \
  KILN_INLINE kiln_v##W##f kiln_vsplath##W(const kiln_f16* p) {                 \
    return kiln_vsplat##W(kiln_h2f(*p));                                        \
  }
#endif
/* Broadcasts spelled lane by lane: (v){0} + x would cost an add and turn
   -0.0 into +0.0. */
KILN_INLINE kiln_v4f kiln_vsplat4(float x) { return (kiln_v4f){x, x, x, x}; }
KILN_INLINE kiln_v8f kiln_vsplat8(float x) { return (kiln_v8f){x, x, x, x, x, x, x, x}; }
KILN_INLINE kiln_v16f kiln_vsplat16(float x) {
  return (kiln_v16f){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
}
KILN_VHDEF(4, 8)
KILN_VHDEF(8, 16)
KILN_VHDEF(16, 32)

/* f32 exp, log, tanh, erf, sigmoid and silu without libm (issue 22): the
   approximations are written once with the vector extensions, so the
   printer's vector loops call kiln_v<name><W> and stay in the vector unit,
   and the scalar loops call the one-lane form (kiln_expf, ...: a one-lane
   vector compiles to plain scalar code), so a value does not depend on which
   loop computed it. Max errors over a dense sweep against double precision
   are held by tests/test_cpu_vmath.c (exp, log, tanh <= 2 ulp, sigmoid 2.5,
   silu 3.5, erf <= 4e-7 absolute). NaN in gives NaN out; the edges are
   exact: exp(-inf) = 0, exp(+inf) = exp(89) = +inf, exp underflows through
   the subnormals (2^n applied as two factors), log(0) = -inf, log(x < 0) =
   NaN, log(+inf) = +inf, log of a subnormal scaled first, tanh and erf(+-inf)
   = +-1, sigmoid(-inf) = 0.
   exp and log: Cephes' expf/logf (range reduction by n ln2 in two parts,
   degree-5/8 polynomials); tanh: Cephes' odd polynomial below 0.625, else
   1 - 2 / (exp(2|x|) + 1); erf: a rational x P(x^2) / Q(x^2) on [-4, 4]
   (erf is +-1 in f32 beyond), the minimax fit Eigen and TensorFlow use;
   sigmoid: exp(-|x|) on both sides like the reference. */
#define KILN_VMATHDEF(W)                                                          \
  KILN_INLINE kiln_v##W##f kiln_vexp##W(kiln_v##W##f x0) {                        \
    const kiln_v##W##f z = {0};                                                   \
    kiln_v##W##i nan = x0 != x0;                                                  \
    kiln_v##W##f x = kiln_vsel##W(nan, z, x0);                                    \
    x = kiln_vsel##W(x > 89.0f, z + 89.0f, x);                                    \
    x = kiln_vsel##W(x < -104.0f, z - 104.0f, x);                                 \
    kiln_v##W##f n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;      \
    kiln_v##W##f r = x - n * 0.693359375f;                                        \
    r = r - n * -2.12194440e-4f;                                                  \
    kiln_v##W##f p = r * 1.9875691500e-4f + 1.3981999507e-3f;                     \
    p = p * r + 8.3334519073e-3f;                                                 \
    p = p * r + 4.1665795894e-2f;                                                 \
    p = p * r + 1.6666665459e-1f;                                                 \
    p = p * r + 5.0000001201e-1f;                                                 \
    p = p * (r * r) + r + 1.0f;                                                   \
    kiln_v##W##i ni = __builtin_convertvector(n, kiln_v##W##i);                   \
    kiln_v##W##i n1 = ni >> 1, n2 = ni - n1; /* each in [-75, 64]: normal */     \
    kiln_v##W##f y = p * (kiln_v##W##f)((n1 + 127) << 23) * (kiln_v##W##f)((n2 + 127) << 23); \
    return kiln_vsel##W(nan, x0, y);                                              \
  }                                                                               \
  KILN_INLINE kiln_v##W##f kiln_vlog##W(kiln_v##W##f x0) {                        \
    const kiln_v##W##f z = {0};                                                   \
    kiln_v##W##i sub = x0 < 1.17549435e-38f; /* subnormal (or <= 0: fixed below) */ \
    kiln_v##W##f x = kiln_vsel##W(sub, x0 * 8388608.0f, x0);                      \
    kiln_v##W##i bits = (kiln_v##W##i)x;                                          \
    kiln_v##W##i e = ((bits >> 23) & 0xff) - 126 + (sub & -23);                   \
    kiln_v##W##f m = (kiln_v##W##f)((bits & 0x007fffff) | 0x3f000000); /* [0.5, 1) */ \
    kiln_v##W##i lo = m < 0.707106781186547524f;                                  \
    e = e + lo;                                                                   \
    m = kiln_vsel##W(lo, m + m, m) - 1.0f;                                        \
    kiln_v##W##f q = m * m;                                                       \
    kiln_v##W##f p = m * 7.0376836292e-2f - 1.1514610310e-1f;                     \
    p = p * m + 1.1676998740e-1f;                                                 \
    p = p * m - 1.2420140846e-1f;                                                 \
    p = p * m + 1.4249322787e-1f;                                                 \
    p = p * m - 1.6668057665e-1f;                                                 \
    p = p * m + 2.0000714765e-1f;                                                 \
    p = p * m - 2.4999993993e-1f;                                                 \
    p = p * m + 3.3333331174e-1f;                                                 \
    kiln_v##W##f fe = __builtin_convertvector(e, kiln_v##W##f);                   \
    kiln_v##W##f y = p * m * q + fe * -2.12194440e-4f - 0.5f * q;                 \
    y = m + y + fe * 0.693359375f;                                                \
    y = kiln_vsel##W(x0 == __builtin_inff(), x0, y);                              \
    y = kiln_vsel##W(x0 == 0.0f, z - __builtin_inff(), y);                        \
    return kiln_vsel##W((x0 < 0.0f) | (x0 != x0), z + __builtin_nanf(""), y);     \
  }                                                                               \
  KILN_INLINE kiln_v##W##f kiln_vtanh##W(kiln_v##W##f x) {                        \
    kiln_v##W##f a = kiln_vabs##W(x), q = x * x;                                  \
    kiln_v##W##f p = q * -5.70498872745e-3f + 2.06390887954e-2f;                  \
    p = p * q - 5.37397155531e-2f;                                                \
    p = p * q + 1.33314422036e-1f;                                                \
    p = p * q - 3.33332819422e-1f;                                                \
    p = p * q * a + a; /* on |x|, the sign put back last: tanh(-0) = -0 */       \
    kiln_v##W##f l = 1.0f - 2.0f / (kiln_vexp##W(a + a) + 1.0f);                  \
    kiln_v##W##i r = (kiln_v##W##i)kiln_vsel##W(a < 0.625f, p, l);                \
    return (kiln_v##W##f)(r | ((kiln_v##W##i)x & (int32_t)0x80000000u));          \
  }                                                                               \
  KILN_INLINE kiln_v##W##f kiln_verf##W(kiln_v##W##f x0) {                        \
    const kiln_v##W##f z = {0};                                                   \
    kiln_v##W##f x = kiln_vsel##W(x0 > 4.0f, z + 4.0f, x0);                       \
    x = kiln_vsel##W(x < -4.0f, z - 4.0f, x);                                     \
    kiln_v##W##f q = x * x;                                                       \
    kiln_v##W##f p = q * -2.72614225801306e-10f + 2.77068142495902e-08f;          \
    p = p * q - 2.10102402082508e-06f;                                            \
    p = p * q - 5.69250639462346e-05f;                                            \
    p = p * q - 7.34990630326855e-04f;                                            \
    p = p * q - 2.95459980854025e-03f;                                            \
    p = p * q - 1.60960333262415e-02f;                                            \
    kiln_v##W##f d = q * -1.45660718464996e-05f - 2.13374055278905e-04f;          \
    d = d * q - 1.68282697438203e-03f;                                            \
    d = d * q - 7.37332916720468e-03f;                                            \
    d = d * q - 1.42647390514189e-02f;                                            \
    return kiln_vsel##W(x0 != x0, x0, x * p / d);                                 \
  }                                                                               \
  KILN_INLINE kiln_v##W##f kiln_vsigmoid##W(kiln_v##W##f x) {                     \
    kiln_v##W##f e = kiln_vexp##W(-kiln_vabs##W(x));                              \
    const kiln_v##W##f z = {0}; /* 1 or e over 1 + e: one division */           \
    return kiln_vsel##W(x >= 0.0f, z + 1.0f, e) / (1.0f + e);                     \
  }                                                                               \
  KILN_INLINE kiln_v##W##f kiln_vsilu##W(kiln_v##W##f x) { return x * kiln_vsigmoid##W(x); }
KILN_VMATHDEF(1)
KILN_VMATHDEF(4)
KILN_VMATHDEF(8)
KILN_VMATHDEF(16)
#define KILN_SMATH(NAME) \
  KILN_INLINE float kiln_##NAME##f(float x) { return kiln_v##NAME##1((kiln_v1f){x})[0]; }
KILN_SMATH(exp)
KILN_SMATH(log)
KILN_SMATH(tanh)
KILN_SMATH(erf)
KILN_SMATH(sigmoid)
KILN_SMATH(silu)
