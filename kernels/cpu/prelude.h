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
   lane by lane with the software conversion otherwise. Loads go through
   the F16C / AVX-512 intrinsics where the ISA has them (an unaligned load
   folded into vcvtph2ps): converting the dereferenced under-aligned
   vector instead made GCC 12's RTL combiner take minutes on long unrolled
   sums of such loads (MobileNetV3-Small's 5x5 depthwise convs in fp16:
   one 168 KB part over 400 s), and a memcpy into a vector cost ResNet-18
   fp16 19% at run time. */
#if defined(__FLT16_MANT_DIG__) && !defined(KILN_SOFT_F16) && defined(__F16C__)
#include <immintrin.h>
#define KILN_VH2F_LOAD8(p) ((kiln_v8f)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(const void*)(p))))
#define KILN_VH2F_LOAD4(p) ((kiln_v4f)_mm_cvtph_ps(_mm_loadl_epi64((const __m128i*)(const void*)(p))))
#if defined(__AVX512F__)
#define KILN_VH2F_LOAD16(p) ((kiln_v16f)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(const void*)(p))))
#endif
#endif
#if defined(__FLT16_MANT_DIG__) && !defined(KILN_SOFT_F16)
#define KILN_VHDEF(W, BYTES)                                                      \
  typedef kiln_f16 kiln_v##W##h __attribute__((vector_size(BYTES), aligned(2))); \
  KILN_INLINE kiln_v##W##f kiln_vh2f##W(const kiln_f16* p) {                    \
    KILN_VH2F_BODY##W                                                           \
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
#if defined(KILN_VH2F_LOAD4)
#define KILN_VH2F_BODY4 return KILN_VH2F_LOAD4(p);
#define KILN_VH2F_BODY8 return KILN_VH2F_LOAD8(p);
#else
#define KILN_VH2F_BODY4 return __builtin_convertvector(*(const kiln_v4h*)p, kiln_v4f);
#define KILN_VH2F_BODY8 return __builtin_convertvector(*(const kiln_v8h*)p, kiln_v8f);
#endif
#if defined(KILN_VH2F_LOAD16)
#define KILN_VH2F_BODY16 return KILN_VH2F_LOAD16(p);
#else
#define KILN_VH2F_BODY16 return __builtin_convertvector(*(const kiln_v16h*)p, kiln_v16f);
#endif
KILN_VHDEF(4, 8)
KILN_VHDEF(8, 16)
KILN_VHDEF(16, 32)

/* Bytes <-> f32 vectors for the quantized kernels: u8/i8 widened on load
   (one vpmovzxbd / vpmovsxbd where GCC has the builtin: its generic
   conversion inserts the bytes one by one), an f32 vector of integers
   already saturated to the byte's range narrowed on store (the scalar
   code's (uint8_t)(int32_t)v: the low byte of each i32 lane, picked by a
   shuffle). kiln_vrint rounds half to even as nearbyintf does lane by lane
   (default rounding mode): below 2^23, (|x| + 2^23) - 2^23 rounds once, to
   an integer, and x's sign is put back (-0.0 stays -0.0); from 2^23 on x is
   an integer already (or inf, NaN) and is kept. */
typedef long long kiln_vq2 __attribute__((vector_size(16)));
typedef char kiln_vq16 __attribute__((vector_size(16)));
typedef uint8_t kiln_vbu4 __attribute__((vector_size(4), aligned(1)));
typedef uint8_t kiln_vbu8 __attribute__((vector_size(8), aligned(1)));
typedef uint8_t kiln_vbu16 __attribute__((vector_size(16), aligned(1)));
typedef uint8_t kiln_vub16 __attribute__((vector_size(16)));
typedef uint8_t kiln_vub32 __attribute__((vector_size(32)));
typedef uint8_t kiln_vub64 __attribute__((vector_size(64)));
KILN_INLINE kiln_vq16 kiln_bytes16(const void* p, size_t n) { /* n <= 16 bytes, the rest 0 */
  kiln_vq2 q = {0, 0};
  memcpy(&q, p, n);
  return (kiln_vq16)q;
}
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX2__)
#define KILN_ZXBD8(p) __builtin_ia32_pmovzxbd256(kiln_bytes16(p, 8))
#define KILN_SXBD8(p) __builtin_ia32_pmovsxbd256(kiln_bytes16(p, 8))
#define KILN_ZXBD4(p) __builtin_ia32_pmovzxbd128(kiln_bytes16(p, 4))
#define KILN_SXBD4(p) __builtin_ia32_pmovsxbd128(kiln_bytes16(p, 4))
#endif
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
#define KILN_ZXBD16(p) __builtin_ia32_pmovzxbd512_mask(kiln_bytes16(p, 16), (kiln_v16i){0}, 0xffff)
#define KILN_SXBD16(p) __builtin_ia32_pmovsxbd512_mask(kiln_bytes16(p, 16), (kiln_v16i){0}, 0xffff)
#endif
#define KILN_VQLOAD(W, NAME, T, EXT)                                               \
  KILN_INLINE kiln_v##W##f NAME##W(const T* p) {                                  \
    kiln_v##W##i r = (kiln_v##W##i)EXT##W(p);                                     \
    return __builtin_convertvector(r, kiln_v##W##f);                              \
  }
#define KILN_VQLOADG(W, NAME, T)                                                   \
  KILN_INLINE kiln_v##W##f NAME##W(const T* p) {                                  \
    kiln_v##W##f r;                                                               \
    for (int l = 0; l < W; ++l) r[l] = (float)p[l];                               \
    return r;                                                                     \
  }
#ifdef KILN_ZXBD4
KILN_VQLOAD(4, kiln_vu8f, uint8_t, KILN_ZXBD)
KILN_VQLOAD(8, kiln_vu8f, uint8_t, KILN_ZXBD)
KILN_VQLOAD(4, kiln_vs8f, int8_t, KILN_SXBD)
KILN_VQLOAD(8, kiln_vs8f, int8_t, KILN_SXBD)
#else
KILN_VQLOADG(4, kiln_vu8f, uint8_t)
KILN_VQLOADG(8, kiln_vu8f, uint8_t)
KILN_VQLOADG(4, kiln_vs8f, int8_t)
KILN_VQLOADG(8, kiln_vs8f, int8_t)
#endif
#ifdef KILN_ZXBD16
KILN_VQLOAD(16, kiln_vu8f, uint8_t, KILN_ZXBD)
KILN_VQLOAD(16, kiln_vs8f, int8_t, KILN_SXBD)
#else
KILN_VQLOADG(16, kiln_vu8f, uint8_t)
KILN_VQLOADG(16, kiln_vs8f, int8_t)
#endif
/* W i32 converted to f32 (the int8 GEMM's requantization of its sums) */
#define KILN_VI2F(W)                                                               \
  KILN_INLINE kiln_v##W##f kiln_vi2f##W(const int32_t* p) {                        \
    kiln_v##W##i r;                                                               \
    memcpy(&r, p, sizeof r);                                                      \
    return __builtin_convertvector(r, kiln_v##W##f);                              \
  }
KILN_VI2F(4)
KILN_VI2F(8)
KILN_VI2F(16)
#if defined(__has_builtin)
#if __has_builtin(__builtin_shufflevector)
#define KILN_HAS_SHUFFLE 1
#endif
#endif
#ifdef KILN_HAS_SHUFFLE
#define KILN_LOW4(b) __builtin_shufflevector(b, b, 0, 4, 8, 12)
#define KILN_LOW8(b) __builtin_shufflevector(b, b, 0, 4, 8, 12, 16, 20, 24, 28)
#define KILN_LOW16(b) __builtin_shufflevector(b, b, 0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60)
#define KILN_VQSTORE(W, BYTES, T)                                                  \
  KILN_INLINE void kiln_vf2##T##W(T##_t* p, kiln_v##W##f v) {                    \
    kiln_vub##BYTES b = (kiln_vub##BYTES)__builtin_convertvector(v, kiln_v##W##i); \
    kiln_vbu##W low = KILN_LOW##W(b);                                              \
    memcpy(p, &low, W);                                                           \
  }
#else
#define KILN_VQSTORE(W, BYTES, T)                                                  \
  KILN_INLINE void kiln_vf2##T##W(T##_t* p, kiln_v##W##f v) {                    \
    for (int l = 0; l < W; ++l) p[l] = (T##_t)(int32_t)v[l];                     \
  }
#endif
KILN_VQSTORE(4, 16, uint8)
KILN_VQSTORE(8, 32, uint8)
KILN_VQSTORE(16, 64, uint8)
KILN_VQSTORE(4, 16, int8)
KILN_VQSTORE(8, 32, int8)
KILN_VQSTORE(16, 64, int8)
typedef float kiln_vx4f __attribute__((vector_size(16)));
typedef float kiln_vx8f __attribute__((vector_size(32)));
typedef float kiln_vx16f __attribute__((vector_size(64)));
#define KILN_VRINT(W)                                                              \
  KILN_INLINE kiln_v##W##f kiln_vrint##W(kiln_v##W##f x) {                      \
    kiln_v##W##f a = kiln_vabs##W(x);                                           \
    kiln_v##W##f r = (a + 8388608.0f) - 8388608.0f;                             \
    r = (kiln_v##W##f)((kiln_v##W##i)r | ((kiln_v##W##i)x & INT32_MIN));        \
    return kiln_vsel##W(a < 8388608.0f, r, x);                                  \
  }
/* One instruction where GCC has the builtin (vroundps / vrndscaleps with
   round-to-nearest-even, exceptions suppressed): the same values, signed
   zeros and NaNs as the form above, ~5 instructions fewer in the int8
   requantization that runs on every output vector. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__SSE4_1__)
KILN_INLINE kiln_v4f kiln_vrint4(kiln_v4f x) { return (kiln_v4f)__builtin_ia32_roundps((kiln_vx4f)x, 8); }
#else
KILN_VRINT(4)
#endif
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX__)
KILN_INLINE kiln_v8f kiln_vrint8(kiln_v8f x) { return (kiln_v8f)__builtin_ia32_roundps256((kiln_vx8f)x, 8); }
#else
KILN_VRINT(8)
#endif
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
KILN_INLINE kiln_v16f kiln_vrint16(kiln_v16f x) {
  return (kiln_v16f)__builtin_ia32_rndscaleps_mask((kiln_vx16f)x, 8, (kiln_vx16f)x, (unsigned short)0xffff, 4);
}
#else
KILN_VRINT(16)
#endif

/* kiln_mulrf / kiln_vmulr: the f32 product a * b rounded to f32 on its
   own, which is what tensor IR's f32(f64(a) * f64(b)) of f32 a, b is (24 x
   24 significant bits fit an f64 exactly, so the one rounding is the f32
   product's): the QLinearAdd's dequantized operands. The compiler narrows
   that f64 form to a plain `a * b` and then contracts `a * b + c` into one
   FMA (-ffp-contract=fast), skipping the rounding; an empty asm it cannot
   see through holds the rounded product in a register (one vmulps) where
   the value fits one, a volatile local elsewhere. */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && defined(__SSE2__)
#define KILN_MULR_REG "v"
#elif defined(__GNUC__) && defined(__aarch64__)
#define KILN_MULR_REG "w"
#endif
#define KILN_VMULR_MEM(W, T)                                                       \
  KILN_INLINE T kiln_vmulr##W(T a, T b) {                                         \
    volatile T r = a * b;                                                         \
    return r;                                                                     \
  }
#define KILN_VMULR_ASM(W, T)                                                       \
  KILN_INLINE T kiln_vmulr##W(T a, T b) {                                         \
    T r = a * b;                                                                  \
    __asm__("" : "+" KILN_MULR_REG(r));                                           \
    return r;                                                                     \
  }
/* a vector of two register halves (AVX2's 16 lanes, SSE's 8) */
#define KILN_VMULR_SPLIT(W, T, H)                                                  \
  KILN_INLINE T kiln_vmulr##W(T a, T b) {                                         \
    T r = a * b;                                                                  \
    H h[2];                                                                       \
    memcpy(h, &r, sizeof r);                                                      \
    __asm__("" : "+" KILN_MULR_REG(h[0]), "+" KILN_MULR_REG(h[1]));               \
    memcpy(&r, h, sizeof r);                                                      \
    return r;                                                                     \
  }
#ifdef KILN_MULR_REG
KILN_VMULR_ASM(1, float)
KILN_VMULR_ASM(4, kiln_v4f)
#else
KILN_VMULR_MEM(1, float)
KILN_VMULR_MEM(4, kiln_v4f)
#endif
#if defined(KILN_MULR_REG) && defined(__AVX__)
KILN_VMULR_ASM(8, kiln_v8f)
#elif defined(KILN_MULR_REG)
KILN_VMULR_SPLIT(8, kiln_v8f, kiln_v4f)
#else
KILN_VMULR_MEM(8, kiln_v8f)
#endif
#if defined(KILN_MULR_REG) && defined(__AVX512F__)
KILN_VMULR_ASM(16, kiln_v16f)
#elif defined(KILN_MULR_REG) && defined(__AVX__)
KILN_VMULR_SPLIT(16, kiln_v16f, kiln_v8f)
#else
KILN_VMULR_MEM(16, kiln_v16f)
#endif
#define kiln_mulrf kiln_vmulr1

/* a * b + c rounded once (tensor-IR fma: the f32 GEMMs' step), spelled
   out rather than left to -ffp-contract: GCC's Zen tunings fuse 512-bit
   chains but leave 256-bit, 128-bit and scalar ones as a multiply and an
   add, so a GEMM's 8-column edge tile rounded differently from its 32-column
   tiles (VGG-19's equal logits came out unequal). One vfmadd per vector on
   x86 with FMA (GCC's builtins; clang's elementwise one); a * b + c where
   neither applies (no FMA unit on x86: never fused; elsewhere the
   compiler's contraction, the same at every width). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__FMA__)
#define KILN_FMA_BUILTINS 1
KILN_INLINE float kiln_fmaf(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
KILN_INLINE kiln_v4f kiln_vfma4(kiln_v4f a, kiln_v4f b, kiln_v4f c) {
  return (kiln_v4f)__builtin_ia32_vfmaddps((kiln_vx4f)a, (kiln_vx4f)b, (kiln_vx4f)c);
}
KILN_INLINE kiln_v8f kiln_vfma8(kiln_v8f a, kiln_v8f b, kiln_v8f c) {
  return (kiln_v8f)__builtin_ia32_vfmaddps256((kiln_vx8f)a, (kiln_vx8f)b, (kiln_vx8f)c);
}
#if defined(__AVX512F__)
KILN_INLINE kiln_v16f kiln_vfma16(kiln_v16f a, kiln_v16f b, kiln_v16f c) {
  return (kiln_v16f)__builtin_ia32_vfmaddps512_mask((kiln_vx16f)a, (kiln_vx16f)b, (kiln_vx16f)c,
                                                    (unsigned short)0xffff, 4);
}
#else
KILN_INLINE kiln_v16f kiln_vfma16(kiln_v16f a, kiln_v16f b, kiln_v16f c) {
  kiln_v16f r; /* never printed without AVX-512 (the dialect's widths) */
  for (int l = 0; l < 16; ++l) r[l] = __builtin_fmaf(a[l], b[l], c[l]);
  return r;
}
#endif
#elif defined(__clang__) && defined(__has_builtin)
#if __has_builtin(__builtin_elementwise_fma) && (defined(__FMA__) || !defined(__x86_64__))
#define KILN_FMA_BUILTINS 1
KILN_INLINE float kiln_fmaf(float a, float b, float c) { return __builtin_elementwise_fma(a, b, c); }
KILN_INLINE kiln_v4f kiln_vfma4(kiln_v4f a, kiln_v4f b, kiln_v4f c) { return __builtin_elementwise_fma(a, b, c); }
KILN_INLINE kiln_v8f kiln_vfma8(kiln_v8f a, kiln_v8f b, kiln_v8f c) { return __builtin_elementwise_fma(a, b, c); }
KILN_INLINE kiln_v16f kiln_vfma16(kiln_v16f a, kiln_v16f b, kiln_v16f c) { return __builtin_elementwise_fma(a, b, c); }
#endif
#endif
#ifndef KILN_FMA_BUILTINS
KILN_INLINE float kiln_fmaf(float a, float b, float c) { return a * b + c; }
KILN_INLINE kiln_v4f kiln_vfma4(kiln_v4f a, kiln_v4f b, kiln_v4f c) { return a * b + c; }
KILN_INLINE kiln_v8f kiln_vfma8(kiln_v8f a, kiln_v8f b, kiln_v8f c) { return a * b + c; }
KILN_INLINE kiln_v16f kiln_vfma16(kiln_v16f a, kiln_v16f b, kiln_v16f c) { return a * b + c; }
#endif

/* The int8 GEMM's step (tensor-IR dot2_i16): acc + lo(a)*lo(b) + hi(a)*hi(b)
   per 32-bit lane, lo/hi the signed 16-bit halves (u8/i8 operands minus
   their zero points, two channels per lane). Exact: |products| <= 255*255,
   so only the i32 sum can wrap, as vpmaddwd + vpaddd (and vpdpwssd) do.
   vpmaddubsw's u8 x i8 pairs would saturate at int16 and change results. */
KILN_INLINE int32_t kiln_dot2(int32_t acc, int32_t a, int32_t b) {
  int32_t s = (int32_t)(int16_t)(uint16_t)(uint32_t)a * (int16_t)(uint16_t)(uint32_t)b;
  int32_t t = (int32_t)(int16_t)(uint16_t)((uint32_t)a >> 16) * (int16_t)(uint16_t)((uint32_t)b >> 16);
  return (int32_t)((uint32_t)acc + (uint32_t)s + (uint32_t)t);
}
/* i32 vectors at any 4-byte address (the accumulators and packed panels). */
#define KILN_VIDEF(W, BYTES)                                                       \
  typedef int32_t kiln_vi##W __attribute__((vector_size(BYTES), aligned(4)));     \
  typedef uint32_t kiln_vu##W __attribute__((vector_size(BYTES)));                \
  KILN_INLINE kiln_vi##W kiln_vspliti##W(int32_t x) { return (kiln_vi##W){0} + x; } \
  KILN_INLINE kiln_vi##W kiln_vdot2g_##W(kiln_vi##W acc, kiln_vi##W a, kiln_vi##W b) { \
    kiln_vi##W al = (kiln_vi##W)((kiln_vu##W)a << 16) >> 16, ah = a >> 16;        \
    kiln_vi##W bl = (kiln_vi##W)((kiln_vu##W)b << 16) >> 16, bh = b >> 16;        \
    return (kiln_vi##W)((kiln_vu##W)acc + (kiln_vu##W)(al * bl) + (kiln_vu##W)(ah * bh)); \
  }
KILN_VIDEF(4, 16)
KILN_VIDEF(8, 32)
KILN_VIDEF(16, 64)
/* One instruction where the CPU has it: vpdpwssd (AVX512-VNNI, with VL for
   128/256 bits, or AVX-VNNI), else vpmaddwd + vpaddd; the portable lane code
   elsewhere (NEON: GCC's own widening multiplies) and for other compilers.
   GCC's builtins rather than <immintrin.h>, which costs ~0.4 s per unit. */
typedef int16_t kiln_vs8 __attribute__((vector_size(16)));
typedef int16_t kiln_vs16 __attribute__((vector_size(32)));
typedef int16_t kiln_vs32 __attribute__((vector_size(64)));
typedef int32_t kiln_vr4 __attribute__((vector_size(16)));
typedef int32_t kiln_vr8 __attribute__((vector_size(32)));
typedef int32_t kiln_vr16 __attribute__((vector_size(64)));
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#if defined(__AVX512VNNI__) && defined(__AVX512VL__) || defined(__AVXVNNI__)
#define KILN_DPW4(c, a, b) __builtin_ia32_vpdpwssd_v4si((kiln_vr4)(c), (kiln_vr4)(a), (kiln_vr4)(b))
#define KILN_DPW8(c, a, b) __builtin_ia32_vpdpwssd_v8si((kiln_vr8)(c), (kiln_vr8)(a), (kiln_vr8)(b))
#else
#define KILN_DPW4(c, a, b) ((kiln_vr4)(c) + __builtin_ia32_pmaddwd128((kiln_vs8)(a), (kiln_vs8)(b)))
#if defined(__AVX2__)
/* vpmaddwd + vpaddd kept together: written as two builtins, GCC computed a
   whole tile's products before adding them and spilled the 6 x 16 tile's
   accumulators to the stack (the ymm file is 16 registers). */
KILN_INLINE kiln_vr8 kiln_dpw8_avx2(kiln_vr8 c, kiln_vr8 a, kiln_vr8 b) {
  kiln_vr8 t;
  __asm__("vpmaddwd %[b], %[a], %[t]\n\tvpaddd %[t], %[c], %[c]" : [c] "+x"(c), [t] "=&x"(t) : [a] "x"(a), [b] "xm"(b));
  return c;
}
#define KILN_DPW8(c, a, b) kiln_dpw8_avx2((kiln_vr8)(c), (kiln_vr8)(a), (kiln_vr8)(b))
#endif
#endif
#if defined(__AVX512VNNI__)
#define KILN_DPW16(c, a, b) __builtin_ia32_vpdpwssd_v16si((kiln_vr16)(c), (kiln_vr16)(a), (kiln_vr16)(b))
#elif defined(__AVX512BW__)
#define KILN_DPW16(c, a, b) \
  ((kiln_vr16)(c) + __builtin_ia32_pmaddwd512_mask((kiln_vs32)(a), (kiln_vs32)(b), (kiln_v16i){0}, 0xffff))
#endif
#endif
#ifndef KILN_DPW4
#define KILN_DPW4(c, a, b) kiln_vdot2g_4(c, a, b)
#endif
#ifndef KILN_DPW8
#define KILN_DPW8(c, a, b) kiln_vdot2g_8(c, a, b)
#endif
#ifndef KILN_DPW16
#define KILN_DPW16(c, a, b) kiln_vdot2g_16(c, a, b)
#endif
KILN_INLINE kiln_vi4 kiln_vdot2_4(kiln_vi4 acc, kiln_vi4 a, kiln_vi4 b) { return (kiln_vi4)KILN_DPW4(acc, a, b); }
KILN_INLINE kiln_vi8 kiln_vdot2_8(kiln_vi8 acc, kiln_vi8 a, kiln_vi8 b) { return (kiln_vi8)KILN_DPW8(acc, a, b); }
KILN_INLINE kiln_vi16 kiln_vdot2_16(kiln_vi16 acc, kiln_vi16 a, kiln_vi16 b) {
  return (kiln_vi16)KILN_DPW16(acc, a, b);
}
/* Tensor-IR dot4_u8i8: acc + the four products of a's bytes as u8 and b's
   as s8, per 32-bit lane (u8 activations, four channels, times int8
   weights). One vpdpbusd where the CPU has VNNI (exact: that instruction
   sums the four products in 32 bits, no 16-bit saturation as vpmaddubsw's
   pairs), else the portable lane code. */
KILN_INLINE int32_t kiln_dot4(int32_t acc, int32_t a, int32_t b) {
  uint32_t s = (uint32_t)acc;
  for (int k = 0; k < 4; ++k)
    s += (uint32_t)((int32_t)(uint8_t)((uint32_t)a >> (8 * k)) * (int32_t)(int8_t)(uint8_t)((uint32_t)b >> (8 * k)));
  return (int32_t)s;
}
#define KILN_VD4DEF(W)                                                             \
  KILN_INLINE kiln_vi##W kiln_vdot4g_##W(kiln_vi##W acc, kiln_vi##W a, kiln_vi##W b) { \
    kiln_vu##W s = (kiln_vu##W)acc;                                               \
    for (int k = 0; k < 4; ++k) {                                                 \
      kiln_vi##W ab = (kiln_vi##W)(((kiln_vu##W)a >> (8 * k)) & 255u);             \
      kiln_vi##W bb = (kiln_vi##W)((kiln_vu##W)b << (24 - 8 * k)) >> 24;          \
      s += (kiln_vu##W)(ab * bb);                                                 \
    }                                                                             \
    return (kiln_vi##W)s;                                                         \
  }
KILN_VD4DEF(4)
KILN_VD4DEF(8)
KILN_VD4DEF(16)
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#if defined(__AVX512VNNI__) && defined(__AVX512VL__) || defined(__AVXVNNI__)
#define KILN_DPB4(c, a, b) __builtin_ia32_vpdpbusd_v4si((kiln_vr4)(c), (kiln_vr4)(a), (kiln_vr4)(b))
#define KILN_DPB8(c, a, b) __builtin_ia32_vpdpbusd_v8si((kiln_vr8)(c), (kiln_vr8)(a), (kiln_vr8)(b))
#endif
#if defined(__AVX512VNNI__)
#define KILN_DPB16(c, a, b) __builtin_ia32_vpdpbusd_v16si((kiln_vr16)(c), (kiln_vr16)(a), (kiln_vr16)(b))
#endif
#endif
#ifndef KILN_DPB4
#define KILN_DPB4(c, a, b) kiln_vdot4g_4(c, a, b)
#endif
#ifndef KILN_DPB8
#define KILN_DPB8(c, a, b) kiln_vdot4g_8(c, a, b)
#endif
#ifndef KILN_DPB16
#define KILN_DPB16(c, a, b) kiln_vdot4g_16(c, a, b)
#endif
KILN_INLINE kiln_vi4 kiln_vdot4_4(kiln_vi4 acc, kiln_vi4 a, kiln_vi4 b) { return (kiln_vi4)KILN_DPB4(acc, a, b); }
KILN_INLINE kiln_vi8 kiln_vdot4_8(kiln_vi8 acc, kiln_vi8 a, kiln_vi8 b) { return (kiln_vi8)KILN_DPB8(acc, a, b); }
KILN_INLINE kiln_vi16 kiln_vdot4_16(kiln_vi16 acc, kiln_vi16 a, kiln_vi16 b) {
  return (kiln_vi16)KILN_DPB16(acc, a, b);
}
/* The quantized ops' saturation min(max(select(x == x, x, lo), lo), hi)
   (constant lo <= hi) as the vector unit's max then min, which return
   their second operand for a NaN and for equal values: NaN -> lo, and the
   same signed zeros as the NaN-propagating kiln_vmax / kiln_vmin with the
   select. Two instructions instead of ~10 on every requantized vector. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__SSE__) && defined(__x86_64__)
KILN_INLINE kiln_v4f kiln_vqsat4(kiln_v4f x, kiln_v4f lo, kiln_v4f hi) {
  return (kiln_v4f)__builtin_ia32_minps(__builtin_ia32_maxps((kiln_vx4f)x, (kiln_vx4f)lo), (kiln_vx4f)hi);
}
#else
KILN_INLINE kiln_v4f kiln_vqsat4(kiln_v4f x, kiln_v4f lo, kiln_v4f hi) {
  return kiln_vmin4(kiln_vmax4(kiln_vsel4(x == x, x, lo), lo), hi);
}
#endif
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX__)
KILN_INLINE kiln_v8f kiln_vqsat8(kiln_v8f x, kiln_v8f lo, kiln_v8f hi) {
  return (kiln_v8f)__builtin_ia32_minps256(__builtin_ia32_maxps256((kiln_vx8f)x, (kiln_vx8f)lo), (kiln_vx8f)hi);
}
#else
KILN_INLINE kiln_v8f kiln_vqsat8(kiln_v8f x, kiln_v8f lo, kiln_v8f hi) {
  return kiln_vmin8(kiln_vmax8(kiln_vsel8(x == x, x, lo), lo), hi);
}
#endif
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
KILN_INLINE kiln_v16f kiln_vqsat16(kiln_v16f x, kiln_v16f lo, kiln_v16f hi) {
  kiln_vx16f m = __builtin_ia32_maxps512_mask((kiln_vx16f)x, (kiln_vx16f)lo, (kiln_vx16f)lo, (unsigned short)0xffff, 4);
  return (kiln_v16f)__builtin_ia32_minps512_mask(m, (kiln_vx16f)hi, (kiln_vx16f)hi, (unsigned short)0xffff, 4);
}
#else
KILN_INLINE kiln_v16f kiln_vqsat16(kiln_v16f x, kiln_v16f lo, kiln_v16f hi) {
  return kiln_vmin16(kiln_vmax16(kiln_vsel16(x == x, x, lo), lo), hi);
}
#endif
/* int8 weights, one byte each, two per i16 (tensor-IR widen_i8x2): each
   byte sign-extended into a 16-bit half of dot2_i16's operand. The vector
   forms are vpmovsxbw of 16 bytes (a row of pairs) or of a broadcast pair. */
KILN_INLINE int32_t kiln_widen2(int16_t x) {
  uint32_t lo = (uint16_t)(int16_t)(int8_t)(uint8_t)(uint16_t)x;
  uint32_t hi = (uint16_t)(int16_t)(int8_t)(uint8_t)((uint16_t)x >> 8);
  return (int32_t)(lo | hi << 16);
}
typedef int8_t kiln_vb8 __attribute__((vector_size(8)));
typedef int8_t kiln_vb16 __attribute__((vector_size(16)));
typedef int8_t kiln_vb32 __attribute__((vector_size(32)));
typedef int16_t kiln_vs4 __attribute__((vector_size(8)));
/* one vpmovsxbw where GCC has the builtin (its generic conversion split the
   256-bit one into two 128-bit halves on znver3) */
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX2__)
typedef char kiln_vc16 __attribute__((vector_size(16)));
#define KILN_SXBW8(b) ((kiln_vi8)__builtin_ia32_pmovsxbw256((kiln_vc16)(b)))
#else
#define KILN_SXBW8(b) ((kiln_vi8)__builtin_convertvector(b, kiln_vs16))
#endif
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512BW__)
typedef char kiln_vc32 __attribute__((vector_size(32)));
#define KILN_SXBW16(b) ((kiln_vi16)__builtin_ia32_pmovsxbw512_mask((kiln_vc32)(b), (kiln_vs32){0}, 0xffffffffu))
#else
#define KILN_SXBW16(b) ((kiln_vi16)__builtin_convertvector(b, kiln_vs32))
#endif
#define KILN_SXBW4(b) ((kiln_vi4)__builtin_convertvector(b, kiln_vs8))
#define KILN_VWDEF(W, VB, VSH)                                                     \
  KILN_INLINE kiln_vi##W kiln_vwiden##W(const int16_t* p) {                       \
    VB b;                                                                         \
    memcpy(&b, p, sizeof b);                                                      \
    return KILN_SXBW##W(b);                                                       \
  }                                                                               \
  KILN_INLINE kiln_vi##W kiln_vsplatw##W(const int16_t* p) {                      \
    int16_t h;                                                                    \
    memcpy(&h, p, 2);                                                             \
    VSH v = {0};                                                                  \
    v += h;                                                                       \
    return KILN_SXBW##W((VB)v);                                                   \
  }
KILN_VWDEF(4, kiln_vb8, kiln_vs4)
KILN_VWDEF(8, kiln_vb16, kiln_vs8)
KILN_VWDEF(16, kiln_vb32, kiln_vs16)
/* f32 exp, log, tanh, erf, sigmoid, silu and softplus without libm (issue 22): the
   approximations are written once with the vector extensions, so the
   printer's vector loops call kiln_v<name><W> and stay in the vector unit,
   and the scalar loops call the one-lane form (kiln_expf, ...: a one-lane
   vector compiles to plain scalar code), so a value does not depend on which
   loop computed it. Max errors over a dense sweep against double precision
   are held by tests/test_cpu_vmath.c (exp, log, tanh <= 2 ulp, sigmoid 2.5,
   silu 3.5, softplus 2, erf <= 4e-7 absolute). NaN in gives NaN out; the edges are
   exact: exp(-inf) = 0, exp(+inf) = exp(89) = +inf, exp underflows through
   the subnormals (2^n applied as two factors), log(0) = -inf, log(x < 0) =
   NaN, log(+inf) = +inf, log of a subnormal scaled first, tanh and erf(+-inf)
   = +-1, sigmoid(-inf) = 0.
   exp and log: Cephes' expf/logf (range reduction by n ln2 in two parts,
   degree-5/8 polynomials); tanh: e / (e + 2) with e = expm1(2|x|) from the
   same reduction, Cephes' odd polynomial below 0.625 (one exp, one division:
   it computed exp and the rational form both before); erf: a rational x P(x^2) / Q(x^2) on [-4, 4]
   (erf is +-1 in f32 beyond), the minimax fit Eigen and TensorFlow use;
   sigmoid: exp(-|x|) on both sides like the reference. */
#define KILN_VMATHDEF(W)                                                          \
  /* Cephes' exp reduction of finite x: *n = round(x / ln2) and expm1(r) =    \
     r + r^2 P(r) of r = x - n ln2 (ln2 in two parts), exp(x) = 2^n (1 + it) */ \
  KILN_INLINE kiln_v##W##f kiln_vexpm1r##W(kiln_v##W##f x, kiln_v##W##f* n) {    \
    *n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;                  \
    kiln_v##W##f r = x - *n * 0.693359375f;                                       \
    r = r - *n * -2.12194440e-4f;                                                 \
    kiln_v##W##f p = r * 1.9875691500e-4f + 1.3981999507e-3f;                     \
    p = p * r + 8.3334519073e-3f;                                                 \
    p = p * r + 4.1665795894e-2f;                                                 \
    p = p * r + 1.6666665459e-1f;                                                 \
    p = p * r + 5.0000001201e-1f;                                                 \
    return p * (r * r) + r;                                                       \
  }                                                                               \
  KILN_INLINE kiln_v##W##f kiln_vexp##W(kiln_v##W##f x0) {                        \
    const kiln_v##W##f z = {0};                                                   \
    kiln_v##W##i nan = x0 != x0;                                                  \
    kiln_v##W##f x = kiln_vsel##W(nan, z, x0);                                    \
    x = kiln_vsel##W(x > 89.0f, z + 89.0f, x);                                    \
    x = kiln_vsel##W(x < -104.0f, z - 104.0f, x);                                 \
    kiln_v##W##f n;                                                               \
    kiln_v##W##f p = kiln_vexpm1r##W(x, &n) + 1.0f;                               \
    kiln_v##W##i ni = __builtin_convertvector(n, kiln_v##W##i);                   \
    kiln_v##W##i n1 = ni >> 1, n2 = ni - n1; /* each in [-75, 64]: normal */     \
    kiln_v##W##f y = p * (kiln_v##W##f)((n1 + 127) << 23) * (kiln_v##W##f)((n2 + 127) << 23); \
    return kiln_vsel##W(nan, x0, y);                                              \
  }                                                                               \
  /* Cephes' log of 2^fe (1 + m), m in [sqrt(1/2) - 1, sqrt(2) - 1) */          \
  KILN_INLINE kiln_v##W##f kiln_vlogr##W(kiln_v##W##f m, kiln_v##W##f fe) {       \
    kiln_v##W##f q = m * m;                                                       \
    kiln_v##W##f p = m * 7.0376836292e-2f - 1.1514610310e-1f;                     \
    p = p * m + 1.1676998740e-1f;                                                 \
    p = p * m - 1.2420140846e-1f;                                                 \
    p = p * m + 1.4249322787e-1f;                                                 \
    p = p * m - 1.6668057665e-1f;                                                 \
    p = p * m + 2.0000714765e-1f;                                                 \
    p = p * m - 2.4999993993e-1f;                                                 \
    p = p * m + 3.3333331174e-1f;                                                 \
    kiln_v##W##f y = p * m * q + fe * -2.12194440e-4f - 0.5f * q;                 \
    return m + y + fe * 0.693359375f;                                             \
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
    kiln_v##W##f y = kiln_vlogr##W(m, __builtin_convertvector(e, kiln_v##W##f));   \
    y = kiln_vsel##W(x0 == __builtin_inff(), x0, y);                              \
    y = kiln_vsel##W(x0 == 0.0f, z - __builtin_inff(), y);                        \
    return kiln_vsel##W((x0 < 0.0f) | (x0 != x0), z + __builtin_nanf(""), y);     \
  }                                                                               \
  KILN_INLINE kiln_v##W##f kiln_vtanh##W(kiln_v##W##f x) {                        \
    /* tanh|x| = e / (e + 2) with e = expm1(2|x|): one exp for every x (the   \
       Cephes reduction, expm1(r) = r + r^2 P(r): no cancellation at 0, e =    \
       2^n expm1(r) + (2^n - 1)); |x| clamped to 9, where tanh is 1. Below    \
       0.625 the odd polynomial (7 FMAs) replaces the quotient: 2.2 -> 1.5 ulp */ \
    const kiln_v##W##f z = {0};                                                   \
    kiln_v##W##f a = kiln_vabs##W(x);                                             \
    kiln_v##W##i nan = x != x;                                                    \
    a = kiln_vsel##W((a > 9.0f) | nan, z + 9.0f, a); /* n in [0, 26] below */     \
    kiln_v##W##f n;                                                               \
    kiln_v##W##f p = kiln_vexpm1r##W(a + a, &n);                                  \
    kiln_v##W##i ni = __builtin_convertvector(n, kiln_v##W##i);                   \
    kiln_v##W##f s = (kiln_v##W##f)((ni + 127) << 23);                            \
    kiln_v##W##f e = s * p + (s - 1.0f);                                          \
    kiln_v##W##f q = a * a;                                                       \
    kiln_v##W##f o = q * -5.70498872745e-3f + 2.06390887954e-2f;                  \
    o = o * q - 5.37397155531e-2f;                                                \
    o = o * q + 1.33314422036e-1f;                                                \
    o = o * q - 3.33332819422e-1f;                                                \
    o = o * q * a + a;                                                            \
    kiln_v##W##i y = (kiln_v##W##i)kiln_vsel##W(a < 0.625f, o, e / (e + 2.0f));    \
    y = y | ((kiln_v##W##i)x & (int32_t)0x80000000u);                             \
    return kiln_vsel##W(nan, x, (kiln_v##W##f)y);                                 \
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
  KILN_INLINE kiln_v##W##f kiln_vsilu##W(kiln_v##W##f x) { return x * kiln_vsigmoid##W(x); } \
  /* max(x, 0) + log1p(e), e = exp(-|x|) in [0, 1]: u = 1 + e is in [1, 2]  \
     (no log edge cases), c = e - (u - 1) its rounding error (exact), and    \
     log1p(e) = log(u) + c / u. e is kiln_vexp's value without its NaN and    \
     overflow selects (-|x| <= 0; NaN propagates through the arithmetic and   \
     the max) */                                                              \
  KILN_INLINE kiln_v##W##f kiln_vsoftplus##W(kiln_v##W##f x) {                    \
    const kiln_v##W##f z = {0};                                                   \
    kiln_v##W##f n;                                                               \
    kiln_v##W##f p = kiln_vexpm1r##W(-kiln_vmin##W(kiln_vabs##W(x), z + 104.0f), &n) + 1.0f; \
    kiln_v##W##i ni = __builtin_convertvector(n, kiln_v##W##i);                   \
    kiln_v##W##i n1 = ni >> 1, n2 = ni - n1;                                      \
    kiln_v##W##f e = p * (kiln_v##W##f)((n1 + 127) << 23) * (kiln_v##W##f)((n2 + 127) << 23); \
    kiln_v##W##f u = 1.0f + e;                                                    \
    kiln_v##W##f c = e - (u - 1.0f);                                              \
    /* u = 2^fe (1 + m) as kiln_vlog reduces it: fe 1 from sqrt(2) on */     \
    kiln_v##W##i hi = u >= 1.41421356237309505f;                                  \
    kiln_v##W##f m = kiln_vsel##W(hi, u * 0.5f, u) - 1.0f;                        \
    kiln_v##W##f l = kiln_vlogr##W(m, (kiln_v##W##f)(hi & 0x3f800000));           \
    return kiln_vsel##W(x > z, x, z) + (l + c / u);                               \
  }
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
KILN_SMATH(softplus)
/* float8 <-> f32 (TIR_F8_DECODE / TIR_F8_ENCODE; kiln_f8_to_f32 and
 * kiln_f32_to_f8 in ir/array.c are the reference). k: 0 e4m3fn, 1 e4m3fnuz,
 * 2 e5m2, 3 e5m2fnuz; ks = 2 * k + saturate. */
KILN_INLINE float kiln_f8_dec(int32_t v, int32_t k) {
  const int32_t m = k < 2 ? 3 : 2, uz = k & 1, bias = (k < 2 ? 7 : 15) + uz;
  const int32_t maxc = uz ? 127 : k == 0 ? 126 : 123, mag = v & 127;
  if (uz ? v == 128 : mag > maxc)
    return k == 2 && mag == 124 ? ((v & 128) ? -__builtin_inff() : __builtin_inff()) : __builtin_nanf("");
  const int32_t e = mag >> m, man = mag & ((1 << m) - 1);
  const float a = e ? ldexpf((float)(man + (1 << m)), e - bias - m) : ldexpf((float)man, 1 - bias - m);
  return (v & 128) ? -a : a;
}
KILN_INLINE int32_t kiln_f8_enc(float x, int32_t ks) {
  const int32_t k = ks >> 1, m = k < 2 ? 3 : 2, uz = k & 1, bias = (k < 2 ? 7 : 15) + uz;
  const int32_t maxc = uz ? 127 : k == 0 ? 126 : 123;
  const int32_t sign = signbit(x) ? 128 : 0;
  if (isnan(x)) return uz ? 128 : sign | 127;
  const int32_t over = (ks & 1) ? maxc : uz ? -1 : k == 2 ? 124 : 127;
  int32_t code = over;
  if (!isinf(x)) {
    int e = 0;
    const float a = fabsf(x);
    (void)frexpf(a, &e);
    if (e - 1 < 1 - bias) e = 2 - bias;
    const int32_t q = (int32_t)nearbyintf(ldexpf(a, m - (e - 1)));
    code = q < (1 << m) ? q : ((e - 1 + bias) << m) + q - (1 << m);
    if (code > maxc) code = over;
  }
  if (code < 0) return 128;
  if (uz && code == 0) return 0;
  return sign | code;
}
