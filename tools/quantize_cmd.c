/* `kiln quantize`: post-training quantization of an ONNX model into a QDQ
 * ONNX model (compiler/quantize.h calibrates, frontend/onnx_qdq.h writes). */
#include "tools/quantize_cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "compiler/calibrate.h"
#include "compiler/quantize.h"
#include "api/quantize_graph.h"
#include "frontend/onnx.h"
#include "frontend/onnx_qdq.h"
#include "tools/cli_args.h"
#include "tools/runner.h"

static const char* help =
    "usage: kiln quantize MODEL.onnx --calibrate DIR -o MODEL.int8.onnx [options]\n"
    "\n"
    "Post-training quantization: runs the model in kiln's reference executor over the\n"
    "calibration inputs, chooses int8 scales and zero points, and writes a QDQ ONNX\n"
    "model (QuantizeLinear/DequantizeLinear around every Conv, Gemm and MatMul, int8\n"
    "weights, int32 biases) that onnxruntime and other runtimes load. The model needs\n"
    "opset 13 or newer. Prints a progress line with an ETA (stderr) and a report per\n"
    "layer: scales, zero points, and the SQNR of its output against fp32 on the\n"
    "calibration data, errors of the layers before it included.\n"
    "\n"
    "options:\n"
    "  --calibrate DIR        calibration inputs: NAME.npy per model input (one sample),\n"
    "                         or subfolders each holding NAME.npy per input (one sample\n"
    "                         each); symbolic dims take the sizes of the first sample\n"
    "  -o FILE                the QDQ model to write\n"
    "  --method M             activation ranges: minmax (default), percentile, entropy\n"
    "                         (KL divergence of 2,048-bin histograms, as TensorRT)\n"
    "  --percentile P         percentile of |x| kept by --method percentile (default 99.99)\n"
    "  --per-channel          weights: one symmetric int8 scale per output channel (default)\n"
    "  --per-tensor           weights: one scale per tensor\n"
    "  --activations u8|i8    activation type, asymmetric per tensor (default u8)\n"
    "  --quiet                no progress line\n";

static int usage(const char* fmt, const char* arg) {
  fprintf(stderr, "kiln quantize: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nTry 'kiln quantize --help'.\n");
  return 2;
}

int kiln_cmd_quantize(int argc, char** argv) {
  const char *model = NULL, *dir = NULL, *out = NULL;
  kiln_quantize_options_t qo;
  kiln_quantize_options_default(&qo);
  qo.progress = stderr;
  for (int i = 0; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(help, stdout);
      return 0;
    } else if (!strcmp(a, "--calibrate") && v) {
      dir = v, ++i;
    } else if (!strcmp(a, "-o") && v) {
      out = v, ++i;
    } else if (!strcmp(a, "--method") && v) {
      ++i;
      if (!strcmp(v, "minmax")) qo.method = KILN_QUANT_MINMAX;
      else if (!strcmp(v, "percentile")) qo.method = KILN_QUANT_PERCENTILE;
      else if (!strcmp(v, "entropy")) qo.method = KILN_QUANT_ENTROPY;
      else return usage("--method '%s': expected minmax, percentile or entropy", v);
    } else if (!strcmp(a, "--percentile") && v) {
      ++i;
      char* end = NULL;
      qo.percentile = strtod(v, &end);
      if (!v[0] || *end || !(qo.percentile >= 50 && qo.percentile <= 100))
        return usage("--percentile '%s': expected a number in 50..100", v);
    } else if (!strcmp(a, "--per-channel")) {
      qo.per_tensor_weights = false;
    } else if (!strcmp(a, "--per-tensor")) {
      qo.per_tensor_weights = true;
    } else if (!strcmp(a, "--activations") && v) {
      ++i;
      if (!strcmp(v, "u8")) qo.act_dtype = KILN_DTYPE_U8;
      else if (!strcmp(v, "i8")) qo.act_dtype = KILN_DTYPE_I8;
      else return usage("--activations '%s': expected u8 or i8", v);
    } else if (!strcmp(a, "--quiet")) {
      qo.progress = NULL;
    } else if (a[0] == '-') {
      return usage("unknown option or missing value: '%s'", a);
    } else if (model) {
      return usage("unexpected argument '%s'", a);
    } else {
      model = a;
    }
  }
  if (!model) return usage("%sno model given", "");
  if (!dir) return usage("%s--calibrate DIR is required (the calibration inputs)", "");
  if (!out) return usage("%s-o FILE is required (the QDQ model to write)", "");
  if (qo.method != KILN_QUANT_PERCENTILE) {
    for (int i = 0; i < argc; ++i)
      if (!strcmp(argv[i], "--percentile")) return usage("%s--percentile needs --method percentile", "");
  }
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return kiln_cli_fail(kiln_make_status(KILN_NOT_FOUND, "%s: the calibration folder does not exist", dir));

  kiln_graph_t* g = NULL;
  kiln_status_t s = kiln_onnx_parse_model(model, NULL, kiln_allocator_system(), &g);
  /* Refused before calibrating, not after (the writer checks it too). */
  if (!s && g->opset < 13)
    s = kiln_make_status(KILN_UNSUPPORTED,
                         "%s: opset %lld; a QDQ model with per-channel weights needs opset 13 or newer "
                         "(re-export the model at opset >= 13)",
                         model, (long long)g->opset);
  if (!s) {
    kiln_quantize_bind_dims(g, dir);
    s = kiln_graph_prepare(g);
  }
  kiln_array_t* inputs = NULL;
  int32_t n = 0;
  kiln_calibrate_options_t co;
  kiln_calibrate_options_default(&co);
  co.input_dir = dir;
  if (!s) s = kiln_calibrate_inputs(g, &co, &inputs, &n);
  kiln_quant_result_t r;
  memset(&r, 0, sizeof r);
  if (!s) s = kiln_quantize(g, inputs, n, &qo, &r);
  if (!s) {
    kiln_quant_report_print(g, &r, stdout);
    s = kiln_onnx_write_qdq(model, &r.plan, out);
  }
  if (!s) printf("wrote %s\n", out);
  kiln_quant_result_free(&r);
  if (inputs) kiln_calibrate_inputs_free(g, inputs, n);
  kiln_graph_destroy(g);
  return s ? kiln_cli_fail(s) : 0;
}
