/* `kiln tune`: tunes a model's template kernels on a device into a tuning
 * cache, or merges caches (tune_cmd.c, compiler/tune.h, docs/TUNING.md). */
#ifndef KILN_TOOLS_TUNE_CMD_H_
#define KILN_TOOLS_TUNE_CMD_H_

/* argv[0] is the first argument after "tune"; returns the exit status
 * (0 ok, 1 error, 2 usage error). */
int kiln_cmd_tune(int argc, char** argv);

#endif
