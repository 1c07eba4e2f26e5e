/* kiln post-training quantization: `kiln quantize`.
 *
 * Given a prepared graph with static input shapes and calibration samples
 * (kiln_calibrate_inputs in calibrate.h reads them from a folder),
 *  1. chooses the layers: every Conv, Gemm and MatMul (domain ai.onnx) whose
 *     data input is a float activation. Their activation inputs, any
 *     non-constant second operand, and their outputs (except model outputs,
 *     which stay float) are quantized per tensor, u8 or i8 asymmetric; their
 *     float weight initializers i8 symmetric, per output channel (Conv axis
 *     0, Gemm axis 0 or 1 by transB, MatMul the last axis) or per tensor;
 *     their 1-D float bias initializers i32 with scale s_in * s_w[c] and zero
 *     point 0 (Gemm only with alpha = beta = 1);
 *  2. runs the reference executor over every sample recording each
 *     quantized activation's range, and for `percentile` and `entropy` a
 *     second time filling a 2,048-bin histogram of |x| over [0, max |x|]:
 *       minmax      [min, max]
 *       percentile  |x| clipped at the given percentile of |x| (99.99)
 *       entropy     the clipping threshold whose 128-level (255 for a
 *                   non-negative tensor) quantized histogram is closest to
 *                   the clipped one in KL divergence (TensorRT's method,
 *                   the zero bin's count replaced by the next one's as in
 *                   NVIDIA's pytorch-quantization);
 *     values are recorded as clamped by a Relu or Clip that is the
 *     tensor's only reader (QuantizeLinear saturating at its bounds gives the
 *     same result, and no level is spent on values it removes); ranges are
 *     widened to hold 0, then scale = (max - min) / 255 and the zero point
 *     puts 0.0 on an integer;
 *  3. simulates the QDQ model in the reference executor -- weights and
 *     biases replaced by their dequantized integers, every quantized
 *     activation rounded through its scale and zero point as
 *     QuantizeLinear -> DequantizeLinear do -- next to an fp32 run on each
 *     sample, and reports per layer the SQNR of its output against fp32,
 *     10 log10(sum x^2 / sum (x - x_q)^2) (after the clamp of a lone
 *     Relu/Clip reader), with the error of the layers before it included
 *     (so a drop between two rows is the later layer's doing), and the same
 *     for each model output.
 *
 * The plan it returns is what frontend/onnx_qdq.h writes.
 * Thread-compatible; |g| is changed during the call (weights swapped for
 * the simulation) and restored before it returns.
 */
#ifndef KILN_COMPILER_QUANTIZE_H_
#define KILN_COMPILER_QUANTIZE_H_

#include <stdio.h>

#include "ir/op.h"
#include "ir/qdq_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_quant_method_e {
  KILN_QUANT_MINMAX = 0,
  KILN_QUANT_PERCENTILE,
  KILN_QUANT_ENTROPY,
} kiln_quant_method_t;

typedef struct kiln_quantize_options_s {
  kiln_quant_method_t method;  /* default minmax */
  double percentile;           /* percentile of |x| kept, in [50, 100] (default 99.99) */
  bool per_tensor_weights;     /* default false: one scale per output channel */
  kiln_dtype_t act_dtype;      /* KILN_DTYPE_U8 (default) or KILN_DTYPE_I8 */
  FILE* progress;              /* a progress line with an ETA (may be NULL) */
} kiln_quantize_options_t;

void kiln_quantize_options_default(kiln_quantize_options_t* o);

typedef struct kiln_quant_layer_s {
  int32_t node;
  int32_t act_in;    /* plan.acts index of the data input */
  int32_t act_out;   /* plan.acts index of the output; -1: a model output, left float */
  int32_t weight;    /* plan.consts index; -1: the second operand is an activation */
  int32_t act_b;     /* plan.acts index of a non-constant second operand, else -1 */
  int32_t bias;      /* plan.consts index; -1: no bias, or left float */
  double sqnr_db;    /* output vs fp32 over all samples; INFINITY when equal */
} kiln_quant_layer_t;

typedef struct kiln_quant_skip_s {
  int32_t node;
  const char* reason;  /* static string */
} kiln_quant_skip_t;

typedef struct kiln_quant_result_s {
  kiln_qdq_plan_t plan;
  int32_t n_layers;
  kiln_quant_layer_t* layers;
  int32_t n_skipped;
  kiln_quant_skip_t* skipped;  /* Conv/Gemm/MatMul nodes left in float */
  double* output_sqnr_db;      /* per graph output */
  double* act_min;             /* per plan.acts: the calibrated range (after the method) */
  double* act_max;
  int32_t samples;
  double seconds;
} kiln_quant_result_t;

/* Calibrates on |inputs| (|n| samples of g->n_inputs arrays, sample-major,
 * each matching the graph's static input shapes) and fills |out| (free with
 * kiln_quant_result_free). Errors name the layer or the sample; a graph
 * with nothing to quantize is an error naming why. */
kiln_status_t kiln_quantize(kiln_graph_t* g, const kiln_array_t* inputs, int32_t n,
                            const kiln_quantize_options_t* o, kiln_quant_result_t* out);

/* Text report: per layer its node, op, input/output scale and zero point,
 * weight scale range and SQNR; the layers left float and why; the model
 * outputs' SQNR. */
void kiln_quant_report_print(const kiln_graph_t* g, const kiln_quant_result_t* r, FILE* out);
void kiln_quant_result_free(kiln_quant_result_t* r);

#ifdef __cplusplus
}
#endif
#endif /* KILN_COMPILER_QUANTIZE_H_ */
