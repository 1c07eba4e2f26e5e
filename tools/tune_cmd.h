/* `kiln tune`: tunes a model's template kernels on a device into a tuning
 * cache, or merges caches (tune_cmd.c, compiler/tune.h, docs/TUNING.md). */
#ifndef KILN_TOOLS_TUNE_CMD_H_
#define KILN_TOOLS_TUNE_CMD_H_

#include <stdbool.h>
#include <stddef.h>

/* argv[0] is the first argument after "tune"; returns the exit status
 * (0 ok, 1 error, 2 usage error). */
int kiln_cmd_tune(int argc, char** argv);

/* The tuning cache `kiln compile|run` read: |given| (--tuning-cache FILE),
 * else none with |off| (--no-tuning-cache), else the cache folder's
 * tuning.tsv when it exists (copied into buf; *implicit true), else NULL. */
const char* kiln_cli_tuning_path(const char* given, bool off, char* buf, size_t n, bool* implicit);

#endif
