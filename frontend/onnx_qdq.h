/* kiln ONNX QDQ writer: rewrites an ONNX model file by a quantization plan
 * (ir/qdq_plan.h) into a QDQ model that onnxruntime, and any runtime that
 * reads QuantizeLinear/DequantizeLinear, loads.
 *
 *   KILN_RETURN_IF_ERROR(kiln_onnx_write_qdq("m.onnx", &plan, "m.int8.onnx"));
 *
 * The original file is re-read (protobuf-c, the same generated code the
 * frontend uses) and everything the plan does not name is kept as it was:
 * nodes, attributes, other initializers, value_info, metadata. For each plan
 * activation T the writer adds
 *     T -> QuantizeLinear(T_scale, T_zero_point) -> T_quantized
 *       -> DequantizeLinear -> T_dequantized
 * right after T's producer (or first, for a graph input) and points every
 * node that read T at T_dequantized. For each plan constant W, the float
 * initializer W becomes the integer initializer W_quantized plus W_scale and
 * W_zero_point, and a DequantizeLinear (with `axis` when per channel)
 * produces W, so its readers are unchanged.
 *
 * Needs the default-domain opset >= 13 (per-channel DequantizeLinear) and
 * initializers inside the file (no external data). Errors name the file and
 * the tensor. Thread-safe (no global state).
 */
#ifndef KILN_FRONTEND_ONNX_QDQ_H_
#define KILN_FRONTEND_ONNX_QDQ_H_

#include "ir/qdq_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads |in_path| (a model kiln has already loaded, so its wire format was
 * checked), applies |plan| and writes the QDQ model to |out_path| (through a
 * temporary file renamed at the end, so a failure leaves no partial model). */
kiln_status_t kiln_onnx_write_qdq(const char* in_path, const kiln_qdq_plan_t* plan,
                                  const char* out_path);

#ifdef __cplusplus
}
#endif
#endif /* KILN_FRONTEND_ONNX_QDQ_H_ */
