/* A QDQ quantization plan: what post-training quantization decided for a
 * graph, in the terms an ONNX QDQ model spells it.
 *
 * compiler/quantize.h fills it from calibration runs; frontend/onnx_qdq.h
 * rewrites the original ONNX file by it:
 *  - every activation entry becomes QuantizeLinear -> DequantizeLinear after
 *    the tensor (per tensor, u8 or i8, asymmetric), and every reader of the
 *    tensor reads the dequantized value;
 *  - every constant entry (a weight or a bias initializer) is stored as its
 *    quantized integers (i8 weights, symmetric; i32 biases with scale
 *    s_in * s_w) with a DequantizeLinear that produces the original name.
 *
 * Names are borrowed from the graph the plan was made for; the plan owns its
 * scale and data arrays (free with kiln_qdq_plan_free in compiler/quantize.h).
 */
#ifndef KILN_IR_QDQ_PLAN_H_
#define KILN_IR_QDQ_PLAN_H_

#include "kiln/array.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_qdq_act_s {
  const char* name;     /* graph tensor (input or node output) */
  kiln_dtype_t dtype;   /* KILN_DTYPE_U8 or KILN_DTYPE_I8 */
  float scale;          /* > 0 */
  int32_t zero_point;   /* within dtype's range */
} kiln_qdq_act_t;

typedef struct kiln_qdq_const_s {
  const char* name;     /* initializer replaced by its quantized form */
  kiln_array_t q;       /* i8 (weights) or i32 (biases), the initializer's shape */
  int32_t axis;         /* channel axis of |scales|, -1: one scale (per tensor) */
  int32_t n_scales;
  float* scales;        /* n_scales entries, each > 0; zero points are all 0 */
} kiln_qdq_const_t;

typedef struct kiln_qdq_plan_s {
  int32_t n_acts;
  kiln_qdq_act_t* acts;
  int32_t n_consts;
  kiln_qdq_const_t* consts;
} kiln_qdq_plan_t;

#ifdef __cplusplus
}
#endif
#endif /* KILN_IR_QDQ_PLAN_H_ */
