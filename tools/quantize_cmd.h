/* `kiln quantize MODEL.onnx --calibrate DIR -o MODEL.int8.onnx`: kiln's
 * post-training quantization (compiler/quantize.h) written as a QDQ ONNX
 * model (frontend/onnx_qdq.h). `kiln quantize --help` lists the options.
 *
 * Returns the process exit status (0 ok, 1 error, 2 usage error) and prints
 * to stdout/stderr itself.
 */
#ifndef KILN_TOOLS_QUANTIZE_CMD_H_
#define KILN_TOOLS_QUANTIZE_CMD_H_

/* argv[0] is the first argument after the subcommand. */
int kiln_cmd_quantize(int argc, char** argv);

#endif /* KILN_TOOLS_QUANTIZE_CMD_H_ */
