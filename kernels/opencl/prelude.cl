#define KILN_INLINE static inline
KILN_INLINE float kiln_fminf(float a, float b) { return (a < b || isnan(a)) ? a : b; }
KILN_INLINE float kiln_fmaxf(float a, float b) { return (a > b || isnan(a)) ? a : b; }
KILN_INLINE float kiln_hround(float x) {
  ushort h; vstore_half_rte(x, 0, (__private half*)&h); return vload_half(0, (__private half*)&h);
}
KILN_INLINE int kiln_floordiv(int a, int b) {
  if (b == 0) return 0;
  int q = a / b;
  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
KILN_INLINE int kiln_floormod(int a, int b) {
  if (b == 0) return 0;
  int r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
KILN_INLINE float kiln_ffloordiv(float a, float b) { return floor(a / b); }
KILN_INLINE float kiln_ffloormod(float a, float b) {
  float r = fmod(a, b);
  return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
}
KILN_INLINE int kiln_idiv32(int a, int b) {
  return b == 0 ? 0 : b == -1 ? (int)(0u - (uint)a) : a / b;
}
KILN_INLINE long kiln_idiv64(long a, long b) {
  return b == 0 ? 0 : b == -1 ? (long)(0ul - (ulong)a) : a / b;
}
KILN_INLINE long kiln_iabs(long a) { return a < 0 ? (long)(0ul - (ulong)a) : a; }
/* Integer min/max over operands of any int width: the builtin min/max
   are ambiguous for (int, long). */
KILN_INLINE long kiln_imin(long a, long b) { return a < b ? a : b; }
KILN_INLINE long kiln_imax(long a, long b) { return a > b ? a : b; }
KILN_INLINE float kiln_sigmoidf(float v) {
  if (v >= 0.0f) return 1.0f / (1.0f + exp(-v));
  float e = exp(v);
  return e / (1.0f + e);
}
/* TIR_SILU: a fused Mul(x, Sigmoid(x)), the same two roundings */
KILN_INLINE float kiln_siluf(float v) { return v * kiln_sigmoidf(v); }
/* f64 helpers, only in a program that enables cl_khr_fp64 (KILN_FP64). */
#ifdef KILN_FP64
KILN_INLINE double kiln_fmind(double a, double b) { return (a < b || isnan(a)) ? a : b; }
KILN_INLINE double kiln_fmaxd(double a, double b) { return (a > b || isnan(a)) ? a : b; }
KILN_INLINE double kiln_dfloordiv(double a, double b) { return floor(a / b); }
KILN_INLINE double kiln_dfloormod(double a, double b) {
  double r = fmod(a, b);
  return (r != 0.0 && ((r < 0.0) != (b < 0.0))) ? r + b : r;
}
KILN_INLINE double kiln_sigmoidd(double v) {
  if (v >= 0.0) return 1.0 / (1.0 + exp(-v));
  double e = exp(v);
  return e / (1.0 + e);
}
#endif
#define KILN_VMAX(a, b) select((b), (a), ((a) > (b)) | isnan(a))
#define KILN_VMIN(a, b) select((b), (a), ((a) < (b)) | isnan(a))
/* float8 <-> f32 (TIR_F8_DECODE / TIR_F8_ENCODE; the C prelude's kiln_f8_dec
 * and kiln_f8_enc, the same steps) */
float kiln_f8_dec(int v, int k) {
  const int m = k < 2 ? 3 : 2, uz = k & 1, bias = (k < 2 ? 7 : 15) + uz;
  const int maxc = uz ? 127 : k == 0 ? 126 : 123, mag = v & 127;
  if (uz ? v == 128 : mag > maxc)
    return k == 2 && mag == 124 ? ((v & 128) ? -INFINITY : INFINITY) : NAN;
  const int e = mag >> m, man = mag & ((1 << m) - 1);
  const float a = e ? ldexp((float)(man + (1 << m)), e - bias - m) : ldexp((float)man, 1 - bias - m);
  return (v & 128) ? -a : a;
}
int kiln_f8_enc(float x, int ks) {
  const int k = ks >> 1, m = k < 2 ? 3 : 2, uz = k & 1, bias = (k < 2 ? 7 : 15) + uz;
  const int maxc = uz ? 127 : k == 0 ? 126 : 123;
  const int sign = signbit(x) ? 128 : 0;
  if (isnan(x)) return uz ? 128 : sign | 127;
  const int over = (ks & 1) ? maxc : uz ? -1 : k == 2 ? 124 : 127;
  int code = over;
  if (!isinf(x)) {
    int e = 0;
    const float a = fabs(x);
    (void)frexp(a, &e);
    if (e - 1 < 1 - bias) e = 2 - bias;
    const int q = (int)rint(ldexp(a, m - (e - 1)));
    code = q < (1 << m) ? q : ((e - 1 + bias) << m) + q - (1 << m);
    if (code > maxc) code = over;
  }
  if (code < 0) return 128;
  if (uz && code == 0) return 0;
  return sign | code;
}
