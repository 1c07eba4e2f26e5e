/* `--precision int8 --calibrate DIR`: kiln's post-training quantization
 * (compiler/quantize.h) applied to a graph in memory, with no QDQ file in
 * between.
 *
 *   KILN_RETURN_IF_ERROR(kiln_quantize_graph_in_place("m.onnx", g, "calib/", NULL, log));
 *
 * The model is parsed a second time with its symbolic dims bound to the
 * first calibration sample's sizes (a run graph is often prepared for
 * another batch), calibrated there, and the plan -- which names tensors, so
 * it fits both graphs -- is applied to |g| as the QDQ writer
 * (frontend/onnx_qdq.h) applies it to a file: QuantizeLinear ->
 * DequantizeLinear after every planned activation, every reader moved to
 * the dequantized tensor, each planned weight or bias stored as its integers
 * with a DequantizeLinear producing the float tensor its readers read. So
 * `kiln run M --precision int8 --calibrate D` computes what `kiln run` of
 * `kiln quantize M --calibrate D`'s model does.
 *
 * Thread-compatible.
 */
#ifndef KILN_COMPILER_QUANTIZE_GRAPH_H_
#define KILN_COMPILER_QUANTIZE_GRAPH_H_

#include "compiler/pipeline.h"
#include "compiler/quantize.h"
#include "ir/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Binds each input's symbolic dims of |g| (not yet prepared) to the sizes of
 * its array in the first calibration sample of |dir|. What cannot be bound
 * here (no file, another rank) is left for kiln_calibrate_inputs, whose
 * error names the file. */
void kiln_quantize_bind_dims(kiln_graph_t* g, const char* dir);

/* Applies |plan| (made for a graph with the same tensor names) to prepared
 * |g| and prepares it again. Errors name the tensor. */
KILN_MUST_USE kiln_status_t kiln_qdq_plan_apply(kiln_graph_t* g, const kiln_qdq_plan_t* plan);

/* Calibrates |model_path| on |calibrate_dir| (options |o|, NULL: defaults),
 * logs the per-layer report (section "quantize") and applies the plan to
 * prepared |g|, parsed from the same model. Errors name the folder, file,
 * model or layer. */
KILN_MUST_USE kiln_status_t kiln_quantize_graph_in_place(const char* model_path, kiln_graph_t* g,
                                                         const char* calibrate_dir,
                                                         const kiln_quantize_options_t* o,
                                                         kiln_compile_log_t* log);

#ifdef __cplusplus
}
#endif
#endif /* KILN_COMPILER_QUANTIZE_GRAPH_H_ */
