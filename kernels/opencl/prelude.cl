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
