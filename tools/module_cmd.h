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

#endif /* KILN_TOOLS_MODULE_CMD_H_ */
