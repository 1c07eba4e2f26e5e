/* `kiln bench`: kernel microbenchmarks on the CPU backend.
 *
 *   kiln bench [--target cpu] [--suite gemm,conv,dwconv,elementwise,reduce,softmax,layernorm]
 *              [--quick] [--threads N] [--repeat N] [--warmup N] [--filter TEXT]
 *              [--csv FILE] [--json FILE]
 *
 * Measures the machine's peak FLOP/s and bandwidth (compiler/peak.h), then
 * runs each case (a one-node graph lowered, compiled and timed through the
 * CPU backend) and prints one line per finished case with progress and ETA.
 * Returns the process exit status: 0 all cases ran, 1 some case failed (the
 * others still run), 2 usage error. Prints to stdout/stderr itself.
 */
#ifndef KILN_TOOLS_BENCH_CMD_H_
#define KILN_TOOLS_BENCH_CMD_H_

/* argv[0] is "bench" (the subcommand); options follow. */
int kiln_cmd_bench(int argc, char** argv);

#endif /* KILN_TOOLS_BENCH_CMD_H_ */
