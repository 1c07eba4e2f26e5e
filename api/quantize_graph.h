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
#ifndef KILN_API_QUANTIZE_GRAPH_H_
#define KILN_API_QUANTIZE_GRAPH_H_

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

/* A calibration of a model for int8: the graph it ran (dims bound to the
 * samples), the samples, and kiln_quantize's result (whose plan borrows
 * names from |g|). */
typedef struct kiln_quant_calibration_s {
  kiln_graph_t* g;
  kiln_array_t* inputs; /* n samples of g->n_inputs arrays, sample-major */
  int32_t n;
  kiln_quant_result_t r;
} kiln_quant_calibration_t;

/* Parses |model_path| again (|g|, the graph it is for, must have opset >=
 * 13), calibrates it on |calibrate_dir| and logs the per-layer report
 * (section "quantize"). Free |out| with kiln_quant_calibration_free. */
KILN_MUST_USE kiln_status_t kiln_quantize_calibrate(const char* model_path, const kiln_graph_t* g,
                                                    const char* calibrate_dir, const kiln_quantize_options_t* o,
                                                    kiln_compile_log_t* log, kiln_quant_calibration_t* out);
void kiln_quant_calibration_free(kiln_quant_calibration_t* c);

/* Calibrates |model_path| on |calibrate_dir| (options |o|, NULL: defaults),
 * logs the per-layer report (section "quantize") and applies the plan to
 * prepared |g|, parsed from the same model. Errors name the folder, file,
 * model or layer. */
KILN_MUST_USE kiln_status_t kiln_quantize_graph_in_place(const char* model_path, kiln_graph_t* g,
                                                         const char* calibrate_dir,
                                                         const kiln_quantize_options_t* o,
                                                         kiln_compile_log_t* log);

/* int8 in --precision auto: with |calibrate_dir| (int8 ranges need real
 * inputs), an opset >= 13 and a Conv, Gemm or MatMul, calibrates as above,
 * then keeps in int8 the layers whose quantization keeps every output of
 * every sample, run in the reference executor, within |got - want| <= atol
 * + rtol max|want| of fp32 (with 10% to spare; relative to the output's
 * largest magnitude, as int8 steps are fractions of a range, where fp16's
 * test is per element): all layers at once, else one by
 * one in graph order on top of those kept. Logs each layer's choice and
 * measured error (the layers left float named), and applies the kept
 * layers to prepared |g|; auto's fp16/fp32 choice then runs on the result.
 * |policy| (may be NULL) decides first: a layer whose last matching rule
 * says int8 is int8, fp16 or fp32 stays float, neither measured.
 * Without a calibration folder, or nothing to quantize, it logs why int8 was
 * not tried and leaves |g| alone. |out_kept|: the layers made int8, each
 * also appended to |int8_rules| (may be NULL) as `node:NAME int8`.
 *
 * The callers give int8 half of --tolerance and, when it kept a layer, the
 * fp16 choice the other half (measured against the int8 graph), so the two
 * errors add up to about the tolerance, not twice it. */
KILN_MUST_USE kiln_status_t kiln_quantize_graph_auto(const char* model_path, kiln_graph_t* g,
                                                     const char* calibrate_dir, const kiln_precision_policy_t* policy,
                                                     double rtol, double atol, kiln_compile_log_t* log,
                                                     kiln_precision_policy_t* int8_rules, int32_t* out_kept);

/* What --precision asks of the graph before its passes: int8 quantizes it
 * (kiln_quantize_graph_in_place), auto chooses int8 per layer
 * (kiln_quantize_graph_auto, with prec->policy_path's rules) and, when it
 * kept a layer, halves prec->tolerance for the fp16 choice; other modes
 * leave it alone. */
KILN_MUST_USE kiln_status_t kiln_quantize_for_precision(const char* model_path, kiln_graph_t* g,
                                                        kiln_compile_precision_t* prec, kiln_compile_log_t* log);

#ifdef __cplusplus
}
#endif
#endif /* KILN_API_QUANTIZE_GRAPH_H_ */
