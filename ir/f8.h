/* float8 <-> float: the ONNX float8 types' values (FLOAT8E4M3FN,
 * FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ; kiln dtypes
 * KILN_DTYPE_F8E4M3FN..F8E5M2FNUZ, one byte each).
 *
 * e4m3fn has no infinities and one NaN pattern per sign (0x7F / 0xFF);
 * the fnuz variants have no negative zero, no infinities and one NaN
 * (0x80); e5m2 is IEEE-like (infinity 0x7C, NaNs above it).
 * kiln_f32_to_f8 rounds to nearest even; a value beyond the largest finite
 * one after rounding (and an infinity) becomes, with |saturate|, the
 * largest finite value of its sign, without it infinity (e5m2) or NaN (the
 * others): ONNX Cast's tables. NaN stays NaN.
 *
 * The compiler's reference kernels, the tensor-IR interpreter and the
 * comparisons use these; the targets print the same steps (the preludes'
 * kiln_f8_dec / kiln_f8_enc). kiln_load_f64 / kiln_store_f64 (kiln/array.h)
 * convert through them, in libkiln_rt too. */
#ifndef KILN_IR_F8_H_
#define KILN_IR_F8_H_

#include "kiln/array.h"

#ifdef __cplusplus
extern "C" {
#endif

/* |t| a float8 dtype. */
float kiln_f8_to_f32(kiln_dtype_t t, uint8_t v);
uint8_t kiln_f32_to_f8(kiln_dtype_t t, float f, bool saturate);

#ifdef __cplusplus
}
#endif

#endif /* KILN_IR_F8_H_ */
