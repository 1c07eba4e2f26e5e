/* `kiln eval MODEL.onnx --variants fp32,fp16,int8,auto,prune:0.3`: every
 * variant compiled for the target and measured there (latency, weights and
 * arena bytes, accuracy or agreement with fp32). `kiln eval --help` lists
 * the options.
 *
 * Returns the process exit status (0 ok, 1 error, 2 usage error) and prints
 * to stdout/stderr itself.
 */
#ifndef KILN_TOOLS_EVAL_CMD_H_
#define KILN_TOOLS_EVAL_CMD_H_

/* argv[0] is the first argument after the subcommand. */
int kiln_cmd_eval(int argc, char** argv);

#endif /* KILN_TOOLS_EVAL_CMD_H_ */
