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
/* f32 tanh, erf, sigmoid, silu and softplus as straight-line arithmetic (no
   branches, no libm calls but exp): PoCL runs its erf and tanh builtins and
   a branchy sigmoid at ~1% of the bandwidth the element-wise kernels reach
   (issue 23). The math is the C prelude's (kernels/cpu/prelude.h, swept by
   tests/test_cpu_vmath.c), one lane: Cephes' exp reduction and log
   polynomial, the Eigen/TensorFlow rational erf on [-4, 4]. Swept on the
   device by tests/test_gpu_ew_limits.c. */
/* expm1(r) of r = x - n ln2 (ln2 in two parts), *n = round(x / ln2) */
KILN_INLINE float kiln_expm1r(float x, float* n) {
  *n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - *n * 0.693359375f;
  r = r - *n * -2.12194440e-4f;
  float p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * (r * r) + r;
}
/* tanh|x| = e / (e + 2), e = expm1(2|x|); the odd polynomial below 0.625 */
KILN_INLINE float kiln_tanhf(float x) {
  float a = fabs(x);
  a = a > 9.0f ? 9.0f : a;
  float n;
  float p = kiln_expm1r(a + a, &n);
  float s = as_float(((int)n + 127) << 23);
  float e = s * p + (s - 1.0f);
  float q = a * a;
  float o = q * -5.70498872745e-3f + 2.06390887954e-2f;
  o = o * q - 5.37397155531e-2f;
  o = o * q + 1.33314422036e-1f;
  o = o * q - 3.33332819422e-1f;
  o = o * q * a + a;
  float y = a < 0.625f ? o : e / (e + 2.0f);
  return isnan(x) ? x : copysign(y, x);
}
KILN_INLINE float kiln_erff(float x0) {
  float x = x0 > 4.0f ? 4.0f : x0;
  x = x < -4.0f ? -4.0f : x;
  float q = x * x;
  float p = q * -2.72614225801306e-10f + 2.77068142495902e-08f;
  p = p * q - 2.10102402082508e-06f;
  p = p * q - 5.69250639462346e-05f;
  p = p * q - 7.34990630326855e-04f;
  p = p * q - 2.95459980854025e-03f;
  p = p * q - 1.60960333262415e-02f;
  float d = q * -1.45660718464996e-05f - 2.13374055278905e-04f;
  d = d * q - 1.68282697438203e-03f;
  d = d * q - 7.37332916720468e-03f;
  d = d * q - 1.42647390514189e-02f;
  return x * p / d;
}
/* exp(-|v|) on both sides: 1 or e over 1 + e, one division */
KILN_INLINE float kiln_sigmoidf(float v) {
  float e = exp(-fabs(v));
  return (v >= 0.0f ? 1.0f : e) / (1.0f + e);
}
/* max(x, 0) + log1p(e), e = exp(-|x|) in [0, 1]: u = 1 + e in [1, 2], c =
   e - (u - 1) its rounding error, log1p(e) = log(u) + c / u with u =
   2^fe (1 + m) and Cephes' log polynomial of m */
KILN_INLINE float kiln_softplusf(float x) {
  float e = exp(-fabs(x));
  float u = 1.0f + e;
  float c = e - (u - 1.0f);
  float fe = u >= 1.41421356237309505f ? 1.0f : 0.0f;
  float m = (fe > 0.0f ? u * 0.5f : u) - 1.0f;
  float q = m * m;
  float p = m * 7.0376836292e-2f - 1.1514610310e-1f;
  p = p * m + 1.1676998740e-1f;
  p = p * m - 1.2420140846e-1f;
  p = p * m + 1.4249322787e-1f;
  p = p * m - 1.6668057665e-1f;
  p = p * m + 2.0000714765e-1f;
  p = p * m - 2.4999993993e-1f;
  p = p * m + 3.3333331174e-1f;
  float l = m + (p * m * q + fe * -2.12194440e-4f - 0.5f * q) + fe * 0.693359375f;
  return (x > 0.0f ? x : 0.0f) + (l + c / u);
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
