float kiln_fminf(float a, float b) { return (a < b || isnan(a)) ? a : b; }
float kiln_fmaxf(float a, float b) { return (a > b || isnan(a)) ? a : b; }
float kiln_hround(float x) { return unpackHalf2x16(packHalf2x16(vec2(x, 0.0))).x; }
int kiln_floordiv(int a, int b) {
  if (b == 0) return 0;
  int q = a / b;
  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
int kiln_floormod(int a, int b) {
  if (b == 0) return 0;
  int r = a - (a / b) * b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
float kiln_ffloordiv(float a, float b) { return floor(a / b); }
float kiln_ffloormod(float a, float b) { return a - floor(a / b) * b; }
/* C fmod: GLSL's mod() floors; this truncates, as fmod does. Not exact like
 * libm's (a - b * trunc(a / b) rounds twice), within the f32 tolerances. */
float kiln_fmodf(float a, float b) { return a - b * trunc(a / b); }
/* asin / acos through the two-argument atan: GLSL leaves their precision to
 * the driver, and some (llvmpipe) miss the f32 tolerance by 4e-4 where their
 * atan does not. sqrt((1-x)(1+x)) keeps precision near |x| = 1, and |x| > 1
 * gives NaN as asin does. */
/* pow: GLSL leaves it undefined for a base < 0, or 0 with an exponent
 * <= 0 (drivers give NaN); C's powf is defined there: a negative base with
 * an integral exponent, 0^0 = 1, 0^-y = inf. */
float kiln_powf(float a, float b) {
  if (b == 0.0) return 1.0;
  if (a == 0.0) return b > 0.0 ? 0.0 : uintBitsToFloat(0x7f800000u);
  if (a > 0.0 || isnan(a) || isnan(b)) return pow(a, b);
  if (b != floor(b)) return uintBitsToFloat(0x7fc00000u);
  float r = pow(-a, b);
  return mod(b, 2.0) == 1.0 ? -r : r;
}
float kiln_asin(float x) { return atan(x, sqrt((1.0 - x) * (1.0 + x))); }
float kiln_acos(float x) { return atan(sqrt((1.0 - x) * (1.0 + x)), x); }
int kiln_idiv32(int a, int b) { return b == 0 ? 0 : b == -1 ? -a : a / b; }
int64_t kiln_idiv64(int64_t a, int64_t b) { return b == 0 ? 0l : b == -1 ? -a : a / b; }
int64_t kiln_iabs(int64_t a) { return a < 0 ? -a : a; }
int64_t kiln_f2i(float x) {
  return isnan(x) ? 0l : x >= 9223372036854775808.0 ? 9223372036854775807l
       : x <= -9223372036854775808.0 ? (-9223372036854775807l - 1l) : int64_t(x);
}
float kiln_sigmoidf(float v) {
  if (v >= 0.0) return 1.0 / (1.0 + exp(-v));
  float e = exp(v);
  return e / (1.0 + e);
}
/* TIR_SILU: a fused Mul(x, Sigmoid(x)), the same two roundings */
float kiln_siluf(float v) { return v * kiln_sigmoidf(v); }
/* TIR_SOFTPLUS: max(x, 0) + log1p(exp(-|x|)), log1p(e) = log(u) + c / u
   with u = 1 + e and c = e - (u - 1) its rounding error */
float kiln_softplusf(float x) {
  float e = exp(-abs(x));
  float u = 1.0 + e;
  return max(x, 0.0) + (log(u) + (e - (u - 1.0)) / u);
}
/* erf: Abramowitz-Stegun 7.1.26 (|error| < 1.5e-7) */
float kiln_erf(float x) {
  float t = 1.0 / (1.0 + 0.3275911 * abs(x));
  float y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-x * x);
  return x < 0.0 ? -y : y;
}
/* vec4 forms of the helpers for the printer's texel loops (printer.h
 * vec_texels): per lane the scalar form's steps, its branches as selects */
// Round to nearest even onto the half grid by the bits (normal halves: 10
// mantissa bits; subnormals: multiples of 2^-24; past 65504: inf; NaN
// kept): lavapipe (Mesa 22) truncated packHalf2x16 on vec4 operands.
vec4 kiln_hround(vec4 x) {
  const uvec4 u = floatBitsToUint(x);
  vec4 r = uintBitsToFloat((u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u);
  r = mix(r, roundEven(x * 16777216.0) * (1.0 / 16777216.0), lessThan(abs(x), vec4(6.103515625e-05)));
  r = mix(r, sign(x) * uintBitsToFloat(0x7f800000u), greaterThan(abs(r), vec4(65504.0)));
  return mix(r, x, isnan(x));
}
vec4 kiln_fminf(vec4 a, vec4 b) { return mix(b, a, bvec4(uvec4(lessThan(a, b)) | uvec4(isnan(a)))); }
vec4 kiln_fmaxf(vec4 a, vec4 b) { return mix(b, a, bvec4(uvec4(greaterThan(a, b)) | uvec4(isnan(a)))); }
vec4 kiln_sigmoidf(vec4 v) {
  vec4 e = exp(-abs(v));
  return mix(e / (1.0 + e), 1.0 / (1.0 + e), greaterThanEqual(v, vec4(0.0)));
}
vec4 kiln_siluf(vec4 v) { return v * kiln_sigmoidf(v); }
vec4 kiln_softplusf(vec4 x) {
  vec4 e = exp(-abs(x));
  vec4 u = 1.0 + e;
  return max(x, vec4(0.0)) + (log(u) + (e - (u - 1.0)) / u);
}
vec4 kiln_erf(vec4 x) {
  vec4 t = 1.0 / (1.0 + 0.3275911 * abs(x));
  vec4 y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-x * x);
  return mix(y, -y, lessThan(x, vec4(0.0)));
}
/* float8 <-> f32 (TIR_F8_DECODE / TIR_F8_ENCODE; the C prelude's kiln_f8_dec
 * and kiln_f8_enc, the same steps) */
float kiln_f8_dec(int v, int k) {
  int m = k < 2 ? 3 : 2, uz = k & 1, bias = (k < 2 ? 7 : 15) + uz;
  int maxc = uz != 0 ? 127 : k == 0 ? 126 : 123, mag = v & 127;
  if (uz != 0 ? v == 128 : mag > maxc)
    return uintBitsToFloat(k == 2 && mag == 124 ? (0x7f800000u | uint(v & 128) << 24) : 0x7fc00000u);
  int e = mag >> m, man = mag & ((1 << m) - 1);
  float a = e != 0 ? ldexp(float(man + (1 << m)), e - bias - m) : ldexp(float(man), 1 - bias - m);
  return (v & 128) != 0 ? -a : a;
}
int kiln_f8_enc(float x, int ks) {
  int k = ks >> 1, m = k < 2 ? 3 : 2, uz = k & 1, bias = (k < 2 ? 7 : 15) + uz;
  int maxc = uz != 0 ? 127 : k == 0 ? 126 : 123;
  int sign = int(floatBitsToUint(x) >> 31) << 7;
  if (isnan(x)) return uz != 0 ? 128 : sign | 127;
  int over = (ks & 1) != 0 ? maxc : uz != 0 ? -1 : k == 2 ? 124 : 127;
  int code = over;
  if (!isinf(x)) {
    int e;
    float a = abs(x);
    frexp(a, e);
    if (e - 1 < 1 - bias) e = 2 - bias;
    int q = int(roundEven(ldexp(a, m - (e - 1))));
    code = q < (1 << m) ? q : ((e - 1 + bias) << m) + q - (1 << m);
    if (code > maxc) code = over;
  }
  if (code < 0) return 128;
  if (uz != 0 && code == 0) return 0;
  return sign | code;
}
