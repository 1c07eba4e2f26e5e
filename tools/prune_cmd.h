/* `kiln prune MODEL.onnx -o PRUNED.onnx --ratio R`: structured channel
 * pruning (compiler/prune.h, api/prune_graph.h) written as a plain ONNX
 * model (frontend/onnx_prune.h). `kiln prune --help` lists the options.
 *
 * Returns the process exit status (0 ok, 1 error, 2 usage error) and prints
 * to stdout/stderr itself.
 */
#ifndef KILN_TOOLS_PRUNE_CMD_H_
#define KILN_TOOLS_PRUNE_CMD_H_

/* argv[0] is the first argument after the subcommand. */
int kiln_cmd_prune(int argc, char** argv);

#endif /* KILN_TOOLS_PRUNE_CMD_H_ */
