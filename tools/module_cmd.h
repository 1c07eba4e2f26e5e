/* `kiln keygen` and `kiln info MODULE.kiln`: the command-line side of
 * module signing (runtime/module_sign.h, docs/TRUST.md).
 *
 *   kiln keygen -o KEYBASE            writes KEYBASE.key (0600) and KEYBASE.pub
 *   kiln info MODULE.kiln [--verify-key KEY.pub]
 *
 * Both return the process exit status (0 ok, 1 error, 2 usage error) and
 * print to stdout/stderr themselves.
 */
#ifndef KILN_TOOLS_MODULE_CMD_H_
#define KILN_TOOLS_MODULE_CMD_H_

/* argv[0] is the first argument after the subcommand. */
int kiln_cmd_keygen(int argc, char** argv);
/* `kiln info` on a module file: what it holds, and its signature. */
int kiln_cmd_module_info(const char* path, const char* verify_key);

#include "kiln/runtime.h"

/* `kiln run MODULE --dim ...`: each spec is the module's bucketed dim
 * (*out_bucket, kiln_module_bucket_parse) or its dynamic dim
 * (*out_value, kiln_module_dim_parse); the first error. */
kiln_status_t kiln_cli_module_dims(const kiln_module_t* m, const char* const* dims, int n, int64_t* out_value,
                                   int32_t* out_bucket);
/* A module with shape buckets: prints the plan of the bucket |inputs| took
 * (at their batch when the module has a dynamic dim) against its lower
 * bound; nothing for other modules. */
kiln_status_t kiln_cli_print_bucket_memory(const kiln_module_t* m, const kiln_session_t* s, const kiln_array_t* inputs,
                                           int32_t n_in);

#endif /* KILN_TOOLS_MODULE_CMD_H_ */
