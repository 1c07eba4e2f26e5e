/* float8 <-> float (ir/f8.h). */
#include "ir/f8.h"

#include <math.h>

/* Mantissa bits, exponent bias, largest finite magnitude code and whether
 * the variant is "fnuz" (NaN 0x80, no negative zero, no infinity). */
static void f8_params(kiln_dtype_t t, int* m, int* bias, int* maxc, bool* uz) {
  const bool e4 = t == KILN_DTYPE_F8E4M3FN || t == KILN_DTYPE_F8E4M3FNUZ;
  *uz = t == KILN_DTYPE_F8E4M3FNUZ || t == KILN_DTYPE_F8E5M2FNUZ;
  *m = e4 ? 3 : 2;
  *bias = (e4 ? 7 : 15) + *uz;
  *maxc = *uz ? 0x7F : e4 ? 0x7E : 0x7B;
}

float kiln_f8_to_f32(kiln_dtype_t t, uint8_t v) {
  int m, bias, maxc;
  bool uz;
  f8_params(t, &m, &bias, &maxc, &uz);
  const int mag = v & 0x7F;
  if (uz ? v == 0x80 : mag > maxc) /* e5m2: 0x7C is infinity */
    return t == KILN_DTYPE_F8E5M2 && mag == 0x7C ? ((v & 0x80) ? -INFINITY : INFINITY) : NAN;
  const int e = mag >> m, man = mag & ((1 << m) - 1);
  const float a = e ? ldexpf((float)(man + (1 << m)), e - bias - m) : ldexpf((float)man, 1 - bias - m);
  return (v & 0x80) ? -a : a;
}

uint8_t kiln_f32_to_f8(kiln_dtype_t t, float f, bool saturate) {
  int m, bias, maxc;
  bool uz;
  f8_params(t, &m, &bias, &maxc, &uz);
  const int sign = signbit(f) ? 0x80 : 0;
  const int over = saturate ? maxc : uz ? -1 : t == KILN_DTYPE_F8E5M2 ? 0x7C : 0x7F;
  if (isnan(f)) return uz ? 0x80 : (uint8_t)(sign | 0x7F);
  int code = over;
  if (!isinf(f)) {
    const float a = fabsf(f);
    int e = 0;
    (void)frexpf(a, &e); /* a = [0.5, 1) * 2^e */
    if (e - 1 < 1 - bias) e = 2 - bias; /* subnormal: the smallest exponent's step */
    /* a / step rounded to nearest even; exact scaling by a power of two */
    const int q = (int)nearbyintf(ldexpf(a, m - (e - 1)));
    code = q < (1 << m) ? q : ((e - 1 + bias) << m) + q - (1 << m);
    if (code > maxc) code = over;
  }
  if (code < 0) return 0x80;       /* fnuz overflow: NaN */
  if (uz && code == 0) return 0;   /* no negative zero */
  return (uint8_t)(sign | code);
}
